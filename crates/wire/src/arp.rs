//! ARP for Ethernet and IPv4 (RFC 826), the only combination vmpls speaks.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |        Hardware type (1)      |     Protocol type (0x0800)    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  HW len (6)   | Proto len (4) |           Operation           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Sender hardware address (6) | Sender protocol address (4)    |
//! |  Target hardware address (6) | Target protocol address (4)    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! [`Packet::new_checked`] accepts only 6-byte hardware and 4-byte protocol addresses (so
//! the fixed offsets hold); [`Repr::parse`] also requires hardware type Ethernet and
//! protocol type IPv4. Anything else is `Malformed`.

use core::net::Ipv4Addr;

use crate::{Error, Field, Result};

mod field {
    use crate::Field;
    pub const HTYPE: Field = 0..2;
    pub const PTYPE: Field = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Field = 6..8;
    pub const SHA: Field = 8..14;
    pub const SPA: Field = 14..18;
    pub const THA: Field = 18..24;
    pub const TPA: Field = 24..28;
}

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;
/// Hardware type Ethernet.
pub const HARDWARE_ETHERNET: u16 = 1;
/// Protocol type IPv4 (its EtherType).
pub const PROTOCOL_IPV4: u16 = 0x0800;

/// The ARP operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Who has the target protocol address? (1)
    Request,
    /// The sender has the sender protocol address. (2)
    Reply,
    /// Any other operation code.
    Unknown(u16),
}

impl From<u16> for Operation {
    fn from(v: u16) -> Operation {
        match v {
            1 => Operation::Request,
            2 => Operation::Reply,
            v => Operation::Unknown(v),
        }
    }
}

impl From<Operation> for u16 {
    fn from(op: Operation) -> u16 {
        match op {
            Operation::Request => 1,
            Operation::Reply => 2,
            Operation::Unknown(v) => v,
        }
    }
}

/// A view over an ARP packet. Ethernet frames may carry padding after the 28 bytes.
#[derive(Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer of at least 28 bytes whose address lengths are 6 and 4.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let b = buffer.as_ref();
        if b.len() < PACKET_LEN {
            return Err(Error::Truncated);
        }
        if b[field::HLEN] != 6 || b[field::PLEN] != 4 {
            return Err(Error::Malformed);
        }
        Ok(Packet { buffer })
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, f: Field) -> u16 {
        let b = &self.buffer.as_ref()[f];
        u16::from_be_bytes([b[0], b[1]])
    }
    fn mac_at(&self, f: Field) -> [u8; 6] {
        let b = &self.buffer.as_ref()[f];
        [b[0], b[1], b[2], b[3], b[4], b[5]]
    }
    fn ip_at(&self, f: Field) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[f];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The hardware type (1 for Ethernet).
    pub fn hardware_type(&self) -> u16 {
        self.u16_at(field::HTYPE)
    }
    /// The protocol type (0x0800 for IPv4).
    pub fn protocol_type(&self) -> u16 {
        self.u16_at(field::PTYPE)
    }
    /// The hardware address length.
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }
    /// The protocol address length.
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }
    /// The operation.
    pub fn operation(&self) -> Operation {
        Operation::from(self.u16_at(field::OPER))
    }
    /// The sender's MAC address.
    pub fn sender_hardware_addr(&self) -> [u8; 6] {
        self.mac_at(field::SHA)
    }
    /// The sender's IPv4 address.
    pub fn sender_protocol_addr(&self) -> Ipv4Addr {
        self.ip_at(field::SPA)
    }
    /// The target's MAC address (zero in a request).
    pub fn target_hardware_addr(&self) -> [u8; 6] {
        self.mac_at(field::THA)
    }
    /// The target's IPv4 address.
    pub fn target_protocol_addr(&self) -> Ipv4Addr {
        self.ip_at(field::TPA)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_u16_at(&mut self, f: Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the hardware type.
    pub fn set_hardware_type(&mut self, v: u16) {
        self.set_u16_at(field::HTYPE, v)
    }
    /// Sets the protocol type.
    pub fn set_protocol_type(&mut self, v: u16) {
        self.set_u16_at(field::PTYPE, v)
    }
    /// Sets the hardware address length.
    pub fn set_hardware_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::HLEN] = v;
    }
    /// Sets the protocol address length.
    pub fn set_protocol_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::PLEN] = v;
    }
    /// Sets the operation.
    pub fn set_operation(&mut self, op: Operation) {
        self.set_u16_at(field::OPER, op.into())
    }
    /// Sets the sender's MAC address.
    pub fn set_sender_hardware_addr(&mut self, v: [u8; 6]) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&v);
    }
    /// Sets the sender's IPv4 address.
    pub fn set_sender_protocol_addr(&mut self, v: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&v.octets());
    }
    /// Sets the target's MAC address.
    pub fn set_target_hardware_addr(&mut self, v: [u8; 6]) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&v);
    }
    /// Sets the target's IPv4 address.
    pub fn set_target_protocol_addr(&mut self, v: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&v.octets());
    }
}

/// An Ethernet/IPv4 ARP packet, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Request, reply or other.
    pub operation: Operation,
    /// The sender's MAC address.
    pub sender_hardware_addr: [u8; 6],
    /// The sender's IPv4 address.
    pub sender_protocol_addr: Ipv4Addr,
    /// The target's MAC address (zero in a request).
    pub target_hardware_addr: [u8; 6],
    /// The target's IPv4 address.
    pub target_protocol_addr: Ipv4Addr,
}

impl Repr {
    /// Decodes a checked packet; `Err(Malformed)` unless it is Ethernet/IPv4.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        if packet.hardware_type() != HARDWARE_ETHERNET
            || packet.protocol_type() != PROTOCOL_IPV4
            || packet.hardware_len() != 6
            || packet.protocol_len() != 4
        {
            return Err(Error::Malformed);
        }
        Ok(Repr {
            operation: packet.operation(),
            sender_hardware_addr: packet.sender_hardware_addr(),
            sender_protocol_addr: packet.sender_protocol_addr(),
            target_hardware_addr: packet.target_hardware_addr(),
            target_protocol_addr: packet.target_protocol_addr(),
        })
    }

    /// The packet length, 28.
    pub const fn buffer_len(&self) -> usize {
        PACKET_LEN
    }

    /// Writes the packet into the first 28 bytes of `packet`, which must hold them (a view
    /// from [`Packet::new_unchecked`] over a shorter buffer panics).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_hardware_type(HARDWARE_ETHERNET);
        packet.set_protocol_type(PROTOCOL_IPV4);
        packet.set_hardware_len(6);
        packet.set_protocol_len(4);
        packet.set_operation(self.operation);
        packet.set_sender_hardware_addr(self.sender_hardware_addr);
        packet.set_sender_protocol_addr(self.sender_protocol_addr);
        packet.set_target_hardware_addr(self.target_hardware_addr);
        packet.set_target_protocol_addr(self.target_protocol_addr);
    }

    /// The reply to this request from the owner of its target address, `our_mac`:
    /// sender and target swapped, as RFC 826 describes.
    pub fn reply(&self, our_mac: [u8; 6]) -> Repr {
        Repr {
            operation: Operation::Reply,
            sender_hardware_addr: our_mac,
            sender_protocol_addr: self.target_protocol_addr,
            target_hardware_addr: self.sender_hardware_addr,
            target_protocol_addr: self.sender_protocol_addr,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured with a Python AF_PACKET socket (ETH_P_ALL) on the veth of namespace B
    // (198.18.50.2, 02:00:00:00:0b:01) when namespace A (198.18.50.1, 02:00:00:00:0a:01)
    // first pinged it over a fresh veth pair: A's broadcast request (received) and B's
    // kernel's reply (outgoing). 42 bytes each: a 14-byte Ethernet header, no padding.
    static ARP_REQUEST: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x08, 0x06, 0x00, 0x01, 0x08,
        0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0xc6, 0x12, 0x32, 0x01, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0xc6, 0x12, 0x32, 0x02,
    ];

    static ARP_REPLY: [u8; 42] = [
        0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x08, 0x06, 0x00, 0x01, 0x08,
        0x00, 0x06, 0x04, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0xc6, 0x12, 0x32, 0x02, 0x02, 0x00,
        0x00, 0x00, 0x0a, 0x01, 0xc6, 0x12, 0x32, 0x01,
    ];

    const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0x0a, 0x01];
    const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0x0b, 0x01];
    const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 50, 1);
    const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 50, 2);

    #[test]
    fn parses_captured_request_and_reply() {
        let p = Packet::new_checked(&ARP_REQUEST[14..]).unwrap();
        assert_eq!((p.hardware_type(), p.protocol_type()), (1, 0x0800));
        assert_eq!(p.operation(), Operation::Request);
        assert_eq!(
            Repr::parse(&p).unwrap(),
            Repr {
                operation: Operation::Request,
                sender_hardware_addr: MAC_A,
                sender_protocol_addr: IP_A,
                target_hardware_addr: [0; 6],
                target_protocol_addr: IP_B,
            }
        );
        let p = Packet::new_checked(&ARP_REPLY[14..]).unwrap();
        assert_eq!(
            Repr::parse(&p).unwrap(),
            Repr {
                operation: Operation::Reply,
                sender_hardware_addr: MAC_B,
                sender_protocol_addr: IP_B,
                target_hardware_addr: MAC_A,
                target_protocol_addr: IP_A,
            }
        );
    }

    #[test]
    fn emits_what_it_parses() {
        for frame in [&ARP_REQUEST, &ARP_REPLY] {
            let repr = Repr::parse(&Packet::new_checked(&frame[14..]).unwrap()).unwrap();
            let mut out = [0xffu8; 28];
            assert_eq!(repr.buffer_len(), out.len());
            repr.emit(&mut Packet::new_unchecked(&mut out[..]));
            assert_eq!(&out[..], &frame[14..]);
        }
    }

    #[test]
    fn reply_to_captured_request_matches_kernel_reply() {
        let req = Repr::parse(&Packet::new_checked(&ARP_REQUEST[14..]).unwrap()).unwrap();
        let mut out = [0u8; 28];
        req.reply(MAC_B).emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(&out[..], &ARP_REPLY[14..]);
    }

    #[test]
    fn padded_frames_and_unknown_operations_parse() {
        let mut padded = ARP_REQUEST[14..].to_vec();
        padded.resize(46, 0);
        padded[7] = 9;
        let p = Packet::new_checked(&padded[..]).unwrap();
        assert_eq!(p.operation(), Operation::Unknown(9));
        assert_eq!(u16::from(Repr::parse(&p).unwrap().operation), 9);
    }

    #[test]
    fn other_hardware_or_protocols_are_malformed() {
        let mut b = ARP_REQUEST[14..].to_vec();
        b[4] = 8;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::Malformed);
        let mut b = ARP_REQUEST[14..].to_vec();
        b[1] = 6; // IEEE 802
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap_err(), Error::Malformed);
        let mut b = ARP_REQUEST[14..].to_vec();
        b[2] = 0x86;
        b[3] = 0xdd;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap_err(), Error::Malformed);
    }

    #[test]
    fn every_prefix_parses_or_errors() {
        for frame in [&ARP_REQUEST, &ARP_REPLY] {
            let arp = &frame[14..];
            for len in 0..=arp.len() {
                match Packet::new_checked(&arp[..len]) {
                    Ok(p) => {
                        assert_eq!(len, PACKET_LEN);
                        Repr::parse(&p).unwrap();
                    }
                    Err(e) => assert_eq!(e, Error::Truncated),
                }
            }
        }
    }
}
