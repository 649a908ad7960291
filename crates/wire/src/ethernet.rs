//! Ethernet II frames (IEEE 802.3) with at most one IEEE 802.1Q VLAN tag.
//!
//! ```text
//!  0                   6                   12        14
//! +-------------------+-------------------+---------+---------
//! | destination       | source            | type    | payload
//! +-------------------+-------------------+---------+---------
//!
//! With one 802.1Q tag (outer type 0x8100):
//!  0                   6                   12     14     16     18
//! +-------------------+-------------------+------+------+------+---------
//! | destination       | source            |0x8100| TCI  | type | payload
//! +-------------------+-------------------+------+------+------+---------
//!
//! TCI: | PCP (3 bits) | DEI (1 bit) | VID (12 bits) |
//! ```
//!
//! [`Frame::ethertype`] is the type of the payload: the inner type when the frame is
//! tagged. The frame check sequence is not part of what a port hands us and is not
//! modelled here.

use core::fmt;

use crate::{Error, Field, Result};

mod field {
    use crate::Field;
    pub const DESTINATION: Field = 0..6;
    pub const SOURCE: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    pub const VLAN_TCI: Field = 14..16;
    pub const INNER_ETHERTYPE: Field = 16..18;
}

/// Length of an untagged Ethernet header.
pub const HEADER_LEN: usize = 14;
/// Length of one 802.1Q tag (TPID and TCI).
pub const VLAN_TAG_LEN: usize = 4;
/// The shortest Ethernet frame without its frame check sequence (64 bytes on the wire
/// less 4): shorter frames are padded to it.
pub const MIN_FRAME_LEN: usize = 60;

/// A 48-bit MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Address(pub [u8; 6]);

impl Address {
    /// `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: Address = Address([0xff; 6]);

    /// Reads an address from the first six bytes of `data`, or `None` if it is shorter.
    pub fn from_bytes(data: &[u8]) -> Option<Address> {
        let b: [u8; 6] = data.get(..6)?.try_into().ok()?;
        Some(Address(b))
    }

    /// The six octets.
    pub const fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// True for `ff:ff:ff:ff:ff:ff`.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// True when the group bit (least significant bit of the first octet) is set;
    /// broadcast is a multicast address.
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// True when the group bit is clear.
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// True when the locally administered bit (second least significant bit of the first
    /// octet) is set.
    pub const fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}

/// Text that is not six hex bytes separated by `:` or `-`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressParseError;

impl fmt::Display for AddressParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("expected six hex bytes like 02:00:5e:10:00:01")
    }
}

impl core::error::Error for AddressParseError {}

/// `02:00:5e:10:00:01` as iproute2 reads it: one or two hex digits a byte, `:` or `-`
/// between them.
impl core::str::FromStr for Address {
    type Err = AddressParseError;

    fn from_str(text: &str) -> core::result::Result<Address, AddressParseError> {
        let mut mac = [0u8; 6];
        let mut parts = text.split([':', '-']);
        for b in &mut mac {
            let part = parts
                .next()
                .filter(|p| (1..=2).contains(&p.len()) && p.bytes().all(|c| c.is_ascii_hexdigit()))
                .ok_or(AddressParseError)?;
            *b = u8::from_str_radix(part, 16).map_err(|_| AddressParseError)?;
        }
        match parts.next() {
            Some(_) => Err(AddressParseError),
            None => Ok(Address(mac)),
        }
    }
}

/// The EtherType of a frame's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EtherType {
    /// IPv4, 0x0800.
    Ipv4,
    /// ARP, 0x0806.
    Arp,
    /// IPv6, 0x86dd.
    Ipv6,
    /// MPLS unicast, 0x8847.
    Mpls,
    /// MPLS multicast, 0x8848.
    MplsMulticast,
    /// IEEE 802.1Q VLAN tag, 0x8100.
    Vlan,
    /// Any other value.
    Unknown(u16),
}

impl From<u16> for EtherType {
    #[inline]
    fn from(v: u16) -> EtherType {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x86dd => EtherType::Ipv6,
            0x8847 => EtherType::Mpls,
            0x8848 => EtherType::MplsMulticast,
            0x8100 => EtherType::Vlan,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    #[inline]
    fn from(t: EtherType) -> u16 {
        match t {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Mpls => 0x8847,
            EtherType::MplsMulticast => 0x8848,
            EtherType::Vlan => 0x8100,
            EtherType::Unknown(other) => other,
        }
    }
}

impl EtherType {
    /// Whether the frame is a link's own control traffic, spoken by a daemon on the
    /// interface rather than routed: IEEE 802.3 frames whose type field is a length (LLC:
    /// IS-IS, STP), LLDP (0x88cc) and the slow protocols (0x8809: LACP).
    #[inline]
    pub fn is_link_control(self) -> bool {
        match self {
            EtherType::Unknown(v) => v <= MAX_8023_LENGTH || v == 0x88cc || v == 0x8809,
            _ => false,
        }
    }
}

/// The largest value of the type field that is an IEEE 802.3 length, not an EtherType.
const MAX_8023_LENGTH: u16 = 1500;

impl fmt::Display for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtherType::Ipv4 => f.write_str("IPv4"),
            EtherType::Arp => f.write_str("ARP"),
            EtherType::Ipv6 => f.write_str("IPv6"),
            EtherType::Mpls => f.write_str("MPLS"),
            EtherType::MplsMulticast => f.write_str("MPLS-multicast"),
            EtherType::Vlan => f.write_str("802.1Q"),
            EtherType::Unknown(v) => write!(f, "0x{v:04x}"),
        }
    }
}

const TPID_VLAN: u16 = 0x8100;

/// The tag control information of an 802.1Q tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority code point, 3 bits.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier, 12 bits.
    pub vid: u16,
}

impl VlanTag {
    /// Decodes a 16-bit TCI.
    pub const fn from_tci(tci: u16) -> VlanTag {
        VlanTag { pcp: (tci >> 13) as u8, dei: tci & 0x1000 != 0, vid: tci & 0x0fff }
    }

    /// Encodes the TCI; bits of `pcp` above 3 and of `vid` above 12 are dropped.
    pub const fn to_tci(&self) -> u16 {
        ((self.pcp as u16 & 0x7) << 13) | ((self.dei as u16) << 12) | (self.vid & 0x0fff)
    }
}

/// A view over an Ethernet frame.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking its length.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps a buffer that holds at least the whole header: [`HEADER_LEN`] bytes, or
    /// `HEADER_LEN + VLAN_TAG_LEN` when the outer EtherType is 0x8100.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Frame<T>> {
        let frame = Frame::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Checks that the buffer holds the whole header; `Err(Truncated)` otherwise.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < self.header_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    fn u16_at(&self, f: Field) -> u16 {
        let b = &self.buffer.as_ref()[f];
        u16::from_be_bytes([b[0], b[1]])
    }

    #[inline]
    fn outer_raw(&self) -> u16 {
        self.u16_at(field::ETHERTYPE)
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> Address {
        let b = &self.buffer.as_ref()[field::DESTINATION];
        Address([b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> Address {
        let b = &self.buffer.as_ref()[field::SOURCE];
        Address([b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    /// The EtherType at offset 12: [`EtherType::Vlan`] for a tagged frame.
    #[inline]
    pub fn outer_ethertype(&self) -> EtherType {
        EtherType::from(self.outer_raw())
    }

    /// True when the EtherType at offset 12 is `t`: one comparison of the raw value, no
    /// conversion (for the per-frame dispatch).
    #[inline]
    pub fn outer_ethertype_is(&self, t: EtherType) -> bool {
        self.outer_raw() == u16::from(t)
    }

    /// True when an 802.1Q tag follows the addresses.
    #[inline]
    pub fn is_tagged(&self) -> bool {
        self.buffer.as_ref().len() >= field::ETHERTYPE.end && self.outer_raw() == TPID_VLAN
    }

    /// The EtherType of the payload: the inner type when the frame carries one 802.1Q tag.
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        if self.is_tagged() {
            EtherType::from(self.u16_at(field::INNER_ETHERTYPE))
        } else {
            self.outer_ethertype()
        }
    }

    /// The 802.1Q tag, if the frame carries one.
    #[inline]
    pub fn vlan(&self) -> Option<VlanTag> {
        if self.is_tagged() { Some(VlanTag::from_tci(self.u16_at(field::VLAN_TCI))) } else { None }
    }

    /// Length of the header: 14, or 18 with an 802.1Q tag.
    #[inline]
    pub fn header_len(&self) -> usize {
        if self.is_tagged() { HEADER_LEN + VLAN_TAG_LEN } else { HEADER_LEN }
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        let start = self.header_len();
        &self.buffer.as_ref()[start..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    #[inline]
    fn set_u16_at(&mut self, f: Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: Address) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&addr.0);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: Address) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&addr.0);
    }

    /// Sets the EtherType of the payload: the inner one when the frame is tagged.
    #[inline]
    pub fn set_ethertype(&mut self, t: EtherType) {
        if self.is_tagged() {
            self.set_u16_at(field::INNER_ETHERTYPE, t.into());
        } else {
            self.set_u16_at(field::ETHERTYPE, t.into());
        }
    }

    /// Sets the EtherType at offset 12, whatever follows it. Writing 0x8100 makes the
    /// frame tagged (the buffer then needs [`VLAN_TAG_LEN`] more bytes).
    #[inline]
    pub fn set_outer_ethertype(&mut self, t: EtherType) {
        self.set_u16_at(field::ETHERTYPE, t.into());
    }

    /// Sets the TCI of a tagged frame and returns true; returns false and changes nothing
    /// for an untagged one.
    pub fn set_vlan(&mut self, tag: VlanTag) -> bool {
        if !self.is_tagged() {
            return false;
        }
        self.set_u16_at(field::VLAN_TCI, tag.to_tci());
        true
    }

    /// The bytes after the header, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Frame<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// An Ethernet header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Address,
    /// Destination address.
    pub dst_addr: Address,
    /// EtherType of the payload (the inner one when tagged).
    pub ethertype: EtherType,
    /// The 802.1Q tag, if any.
    pub vlan: Option<VlanTag>,
}

impl Repr {
    /// Decodes the header of `frame`, checking its length first.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Result<Repr> {
        frame.check_len()?;
        Ok(Repr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            ethertype: frame.ethertype(),
            vlan: frame.vlan(),
        })
    }

    /// Length of the header this emits: 14, or 18 with a tag.
    pub const fn buffer_len(&self) -> usize {
        if self.vlan.is_some() { HEADER_LEN + VLAN_TAG_LEN } else { HEADER_LEN }
    }

    /// Writes the header into the first [`Repr::buffer_len`] bytes of `frame`.
    ///
    /// # Panics
    /// If the buffer is shorter than [`Repr::buffer_len`].
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<T>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        match self.vlan {
            Some(tag) => {
                frame.set_u16_at(field::ETHERTYPE, TPID_VLAN);
                frame.set_u16_at(field::VLAN_TCI, tag.to_tci());
                frame.set_u16_at(field::INNER_ETHERTYPE, self.ethertype.into());
            }
            None => frame.set_u16_at(field::ETHERTYPE, self.ethertype.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_read_back_as_displayed_and_odd_text_is_refused() {
        let a: Address = "02:00:5e:10:0:1".parse().unwrap();
        assert_eq!(a, Address([2, 0, 0x5e, 0x10, 0, 1]));
        assert_eq!(a.to_string().parse(), Ok(a));
        assert_eq!("02-00-5E-10-00-01".parse(), Ok(a));
        for bad in [
            "",
            "02:00:5e:10:00",
            "02:00:5e:10:00:01:02",
            "02:00:5e:10:00:001",
            "02::5e:10:00:01",
            "0g:00:5e:10:00:01",
            "+2:00:5e:10:00:01",
        ] {
            assert_eq!(bad.parse::<Address>(), Err(AddressParseError), "{bad}");
        }
    }

    // A broadcast ARP request (who-has 198.18.1.2 tell 198.18.1.1) captured with a Python
    // AF_PACKET socket (ETH_P_ALL) on one end of a veth pair between two network
    // namespaces, the other end having 02:00:00:00:0a:01 and 198.18.1.1/24 (sent by the
    // kernel before `ping 198.18.1.2`). The kernel pads nothing on veth: 42 bytes.
    static ARP_FRAME: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x08, 0x06, 0x00, 0x01, 0x08,
        0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0xc6, 0x12, 0x01, 0x01, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0xc6, 0x12, 0x01, 0x02,
    ];

    // The Ethernet header of an MLDv2 report to 33:33:00:00:00:16 captured the same way.
    static MLD_HEADER: [u8; 14] =
        [0x33, 0x33, 0x00, 0x00, 0x00, 0x16, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x86, 0xdd];

    // ARP_FRAME with an 802.1Q tag inserted after the addresses, built by hand with
    // Python's struct (this kernel has no 8021q module, so no tagged traffic could be
    // captured): TPID 0x8100, TCI = PCP 5 << 13 | DEI 0 << 12 | VID 100 = 0xa000 | 0x064
    // = 0xa064.
    static VLAN_ARP_FRAME: [u8; 46] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x81, 0x00, 0xa0, 0x64, 0x08,
        0x06, 0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0xc6, 0x12,
        0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc6, 0x12, 0x01, 0x02,
    ];

    const HOST_A: Address = Address([0x02, 0x00, 0x00, 0x00, 0x0a, 0x01]);

    #[test]
    fn parses_captured_arp_frame() {
        let frame = Frame::new_checked(&ARP_FRAME[..]).unwrap();
        assert_eq!(frame.dst_addr(), Address::BROADCAST);
        assert_eq!(frame.src_addr(), HOST_A);
        assert_eq!(frame.ethertype(), EtherType::Arp);
        assert_eq!(frame.vlan(), None);
        assert!(frame.outer_ethertype_is(EtherType::Arp) && !frame.outer_ethertype_is(EtherType::Ipv4));
        assert_eq!(frame.header_len(), 14);
        assert_eq!(frame.payload(), &ARP_FRAME[14..]);
        assert_eq!(
            Repr::parse(&frame).unwrap(),
            Repr { src_addr: HOST_A, dst_addr: Address::BROADCAST, ethertype: EtherType::Arp, vlan: None }
        );
    }

    #[test]
    fn emits_captured_arp_header() {
        let repr =
            Repr { src_addr: HOST_A, dst_addr: Address::BROADCAST, ethertype: EtherType::Arp, vlan: None };
        assert_eq!(repr.buffer_len(), 14);
        let mut out = [0u8; 42];
        out[14..].copy_from_slice(&ARP_FRAME[14..]);
        repr.emit(&mut Frame::new_unchecked(&mut out[..]));
        assert_eq!(out, ARP_FRAME);
    }

    #[test]
    fn parses_tagged_frame_inner_ethertype() {
        let frame = Frame::new_checked(&VLAN_ARP_FRAME[..]).unwrap();
        assert_eq!(frame.outer_ethertype(), EtherType::Vlan);
        assert_eq!(frame.ethertype(), EtherType::Arp);
        assert!(frame.outer_ethertype_is(EtherType::Vlan) && !frame.outer_ethertype_is(EtherType::Arp));
        assert_eq!(frame.vlan(), Some(VlanTag { pcp: 5, dei: false, vid: 100 }));
        assert_eq!(frame.header_len(), 18);
        assert_eq!(frame.payload(), &ARP_FRAME[14..]);
    }

    #[test]
    fn emits_tagged_frame() {
        let repr = Repr::parse(&Frame::new_checked(&VLAN_ARP_FRAME[..]).unwrap()).unwrap();
        assert_eq!(repr.buffer_len(), 18);
        let mut out = [0u8; 46];
        out[18..].copy_from_slice(&ARP_FRAME[14..]);
        repr.emit(&mut Frame::new_unchecked(&mut out[..]));
        assert_eq!(out, VLAN_ARP_FRAME);
    }

    #[test]
    fn set_ethertype_writes_inner_type_when_tagged() {
        let mut bytes = VLAN_ARP_FRAME;
        let mut frame = Frame::new_checked(&mut bytes[..]).unwrap();
        frame.set_ethertype(EtherType::Mpls);
        assert_eq!(frame.ethertype(), EtherType::Mpls);
        assert_eq!(frame.outer_ethertype(), EtherType::Vlan);
        assert!(frame.set_vlan(VlanTag { pcp: 7, dei: true, vid: 4095 }));
        assert_eq!(&bytes[12..18], &[0x81, 0x00, 0xff, 0xff, 0x88, 0x47]);

        let mut bytes = ARP_FRAME;
        let mut frame = Frame::new_checked(&mut bytes[..]).unwrap();
        frame.set_ethertype(EtherType::Ipv6);
        assert!(!frame.set_vlan(VlanTag::default()));
        frame.set_dst_addr(HOST_A);
        frame.set_src_addr(Address::BROADCAST);
        frame.payload_mut()[0] = 0xaa;
        assert_eq!(&bytes[..15], &[2, 0, 0, 0, 10, 1, 255, 255, 255, 255, 255, 255, 0x86, 0xdd, 0xaa]);
    }

    #[test]
    fn address_classes_and_display() {
        let frame = Frame::new_checked(&MLD_HEADER[..]).unwrap();
        let mc = frame.dst_addr();
        assert!(mc.is_multicast() && !mc.is_broadcast() && !mc.is_unicast());
        assert!(Address::BROADCAST.is_broadcast() && Address::BROADCAST.is_multicast());
        assert!(HOST_A.is_unicast() && HOST_A.is_local() && !HOST_A.is_multicast());
        assert_eq!(mc.to_string(), "33:33:00:00:00:16");
        assert_eq!(HOST_A.to_string(), "02:00:00:00:0a:01");
        assert_eq!(frame.ethertype(), EtherType::Ipv6);
        assert!(frame.payload().is_empty());
        assert_eq!(Address::from_bytes(&MLD_HEADER[6..]), Some(HOST_A));
        assert_eq!(Address::from_bytes(&MLD_HEADER[9..]), None);
    }

    #[test]
    fn ethertype_round_trips() {
        for (v, t) in [
            (0x0800, EtherType::Ipv4),
            (0x0806, EtherType::Arp),
            (0x86dd, EtherType::Ipv6),
            (0x8847, EtherType::Mpls),
            (0x8848, EtherType::MplsMulticast),
            (0x8100, EtherType::Vlan),
            (0x88cc, EtherType::Unknown(0x88cc)),
        ] {
            assert_eq!(EtherType::from(v), t);
            assert_eq!(u16::from(t), v);
        }
        assert_eq!(EtherType::Unknown(0x88cc).to_string(), "0x88cc");
        // IS-IS's LLC frames carry a length; LLDP and LACP have types of their own.
        for control in [0x05dc, 0x002e, 0x88cc, 0x8809] {
            assert!(EtherType::from(control).is_link_control(), "{control:#06x}");
        }
        for other in [0x0800, 0x86dd, 0x8847, 0x8100, 0x0600, 0x88b5] {
            assert!(!EtherType::from(other).is_link_control(), "{other:#06x}");
        }
    }

    #[test]
    fn vlan_tci_round_trips() {
        for tci in [0u16, 0x0001, 0x0fff, 0x1000, 0xa064, 0xffff] {
            assert_eq!(VlanTag::from_tci(tci).to_tci(), tci);
        }
    }

    #[test]
    fn short_frames_are_truncated() {
        for len in 0..14 {
            assert_eq!(Frame::new_checked(&ARP_FRAME[..len]).unwrap_err(), Error::Truncated);
        }
        // Tagged: the tag and inner type must be there too.
        for len in 0..18 {
            assert_eq!(Frame::new_checked(&VLAN_ARP_FRAME[..len]).unwrap_err(), Error::Truncated);
        }
        assert!(Frame::new_checked(&VLAN_ARP_FRAME[..18]).is_ok());
        assert_eq!(Repr::parse(&Frame::new_unchecked(&VLAN_ARP_FRAME[..16])).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn no_accessor_panics_on_any_prefix() {
        for frame in [&ARP_FRAME[..], &VLAN_ARP_FRAME[..]] {
            for len in 0..=frame.len() {
                let mut buf = frame[..len].to_vec();
                if let Ok(mut f) = Frame::new_checked(&mut buf[..]) {
                    let _ = (f.dst_addr(), f.src_addr(), f.ethertype(), f.vlan());
                    assert_eq!(f.payload().len(), len - f.header_len());
                    let _ = Repr::parse(&f).unwrap();
                    f.set_ethertype(EtherType::Ipv4);
                    f.set_vlan(VlanTag::default());
                    let _ = f.payload_mut();
                }
            }
        }
    }
}
