//! IPv4 headers (RFC 791).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version|  IHL  |   DSCP    |ECN|          Total Length         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |         Identification        |Flags|      Fragment Offset    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Time to Live |    Protocol   |         Header Checksum       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       Source Address                          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Destination Address                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Options                    |    Padding    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The buffer may be longer than the total length (Ethernet padding, trailing bytes):
//! [`Packet::payload`] ends at the total length.

use core::net::Ipv4Addr;

use crate::{Error, Field, Result, checksum};

pub(crate) mod field {
    use crate::Field;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const TTL_PROTOCOL: Field = 8..10;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC_ADDR: Field = 12..16;
    pub const DST_ADDR: Field = 16..20;
}

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;
/// Length of a header with the most options (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;
/// The largest fragment offset in bytes: 13 bits of 8-byte units.
pub const MAX_FRAG_OFFSET: u16 = 0x1fff * 8;

/// IP protocol numbers (IANA "Assigned Internet Protocol Numbers"), also the IPv6 Next
/// Header values.
pub mod protocol {
    /// IPv6 Hop-by-Hop Options.
    pub const HOPOPT: u8 = 0;
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// IGMP.
    pub const IGMP: u8 = 2;
    /// IPv4 in IP.
    pub const IPV4: u8 = 4;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 in IP.
    pub const IPV6: u8 = 41;
    /// IPv6 Routing header.
    pub const IPV6_ROUTE: u8 = 43;
    /// IPv6 Fragment header.
    pub const IPV6_FRAG: u8 = 44;
    /// GRE.
    pub const GRE: u8 = 47;
    /// ESP.
    pub const ESP: u8 = 50;
    /// AH.
    pub const AH: u8 = 51;
    /// ICMPv6.
    pub const IPV6_ICMP: u8 = 58;
    /// IPv6 No Next Header.
    pub const IPV6_NONXT: u8 = 59;
    /// IPv6 Destination Options.
    pub const IPV6_OPTS: u8 = 60;
    /// MPLS in IP (RFC 4023).
    pub const MPLS_IN_IP: u8 = 137;
}

/// IPv4 option types (IANA "IP Option Numbers") and the copied flag of the type byte.
pub mod option {
    /// End of Option List: the options end here; a single byte.
    pub const END_OF_LIST: u8 = 0;
    /// No Operation: padding between options; a single byte.
    pub const NOP: u8 = 1;
    /// Record Route.
    pub const RECORD_ROUTE: u8 = 7;
    /// Timestamp.
    pub const TIMESTAMP: u8 = 0x44;
    /// Loose Source and Record Route.
    pub const LSRR: u8 = 0x83;
    /// Strict Source and Record Route.
    pub const SSRR: u8 = 0x89;
    /// Router Alert (RFC 2113).
    pub const ROUTER_ALERT: u8 = 0x94;
    /// The copied flag of a type: the option goes into every fragment (RFC 791 3.1).
    pub const COPIED: u8 = 0x80;
}

/// One option of a header, from [`Options`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpOption<'a> {
    bytes: &'a [u8],
}

impl<'a> IpOption<'a> {
    /// The option type (see [`option`]).
    #[inline]
    pub fn kind(&self) -> u8 {
        self.bytes[0]
    }

    /// True when the copied flag is set: the option belongs in every fragment.
    #[inline]
    pub fn copied(&self) -> bool {
        self.kind() & option::COPIED != 0
    }

    /// The data after the type and length bytes; empty for No Operation.
    pub fn data(&self) -> &'a [u8] {
        self.bytes.get(2..).unwrap_or_default()
    }

    /// The whole option: type, length and data (the type alone for No Operation).
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// The options of a header ([`Packet::options`]) one by one. It ends at End of Option List
/// (not yielded) or at the end of the bytes; an option whose length byte is missing, below
/// 2 or runs past the bytes gives `Err(Malformed)` and ends it.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    rest: &'a [u8],
}

impl<'a> Options<'a> {
    /// Walks `options`, the bytes after the fixed header.
    pub fn new(options: &'a [u8]) -> Options<'a> {
        Options { rest: options }
    }
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<IpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let len = match *self.rest.first()? {
            option::END_OF_LIST => 0,
            option::NOP => 1,
            _ => match self.rest.get(1).map(|&l| usize::from(l)) {
                Some(l) if l >= 2 && l <= self.rest.len() => l,
                _ => {
                    self.rest = &[];
                    return Some(Err(Error::Malformed));
                }
            },
        };
        if len == 0 {
            self.rest = &[];
            return None;
        }
        let (bytes, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(Ok(IpOption { bytes }))
    }
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// A view over an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<'a> Packet<&'a [u8; HEADER_LEN]> {
    /// The fixed header of `packet` if `packet` is an IPv4 packet without options that
    /// holds the total length it claims and whose header checksum is right (the buffer may
    /// be longer); else `None`, for the caller's general way. One check where
    /// [`new_checked`](Packet::new_checked) and
    /// [`verify_checksum`](Packet::verify_checksum) each re-read the header length: for
    /// fast paths, which leave packets with options to their general path.
    #[inline(always)]
    pub fn plain_checked(packet: &'a [u8]) -> Option<Self> {
        let fixed: &[u8; HEADER_LEN] = packet.first_chunk()?;
        let header = Packet::new_unchecked(fixed);
        let total = usize::from(header.total_len());
        let plain = fixed[field::VER_IHL] == 0x45 && (HEADER_LEN..=packet.len()).contains(&total);
        (plain && checksum::fold(checksum::sum_array(fixed)) == 0xffff).then_some(header)
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the header and the total length it claims:
    /// `Err(Truncated)` if the buffer is shorter than 20 bytes, the header length or the
    /// total length; `Err(Malformed)` if the version is not 4, the IHL is below 5 or the
    /// total length is below the header length. The buffer may be longer.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 4 || self.header_len() < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if self.header_len() > len {
            return Err(Error::Truncated);
        }
        let total = usize::from(self.total_len());
        if total < self.header_len() {
            return Err(Error::Malformed);
        }
        if total > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, f: Field) -> u16 {
        let b = &self.buffer.as_ref()[f];
        u16::from_be_bytes([b[0], b[1]])
    }

    fn addr_at(&self, f: Field) -> Ipv4Addr {
        // The field is 4 bytes: one load, no check per byte.
        Ipv4Addr::from(<[u8; 4]>::try_from(&self.buffer.as_ref()[f]).unwrap_or_default())
    }

    /// The version field (4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// The header length in bytes (IHL times 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// The DSCP and ECN byte (formerly Type of Service).
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    /// The differentiated services code point, 6 bits.
    pub fn dscp(&self) -> u8 {
        self.dscp_ecn() >> 2
    }

    /// The explicit congestion notification bits, 2 bits.
    pub fn ecn(&self) -> u8 {
        self.dscp_ecn() & 0x03
    }

    /// The total length of header and payload.
    pub fn total_len(&self) -> u16 {
        self.u16_at(field::LENGTH)
    }

    /// The identification field.
    pub fn ident(&self) -> u16 {
        self.u16_at(field::IDENT)
    }

    /// The three flag bits as they are: reserved (0b100), Don't Fragment (0b010) and
    /// More Fragments (0b001).
    pub fn flags(&self) -> u8 {
        (self.u16_at(field::FLG_OFF) >> 13) as u8
    }

    /// The Don't Fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.u16_at(field::FLG_OFF) & FLAG_DF != 0
    }

    /// The More Fragments flag.
    pub fn more_frags(&self) -> bool {
        self.u16_at(field::FLG_OFF) & FLAG_MF != 0
    }

    /// The fragment offset in bytes (the field times 8).
    pub fn frag_offset(&self) -> u16 {
        (self.u16_at(field::FLG_OFF) & OFFSET_MASK) * 8
    }

    /// True for a fragment: More Fragments set or a non-zero offset.
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    /// The time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// The protocol of the payload (see [`protocol`]).
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// The header checksum.
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    /// The source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        self.addr_at(field::SRC_ADDR)
    }

    /// The destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        self.addr_at(field::DST_ADDR)
    }

    /// True when the header checksum is correct.
    #[inline(always)]
    pub fn verify_checksum(&self) -> bool {
        let header = &self.buffer.as_ref()[..self.header_len()];
        // Nearly every header has no options: its sum unrolled.
        match <&[u8; HEADER_LEN]>::try_from(header) {
            Ok(fixed) => checksum::fold(checksum::sum_array(fixed)) == 0xffff,
            Err(_) => checksum::verify(header),
        }
    }

    /// The options between the fixed header and the payload.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The options one by one.
    pub fn option_iter(&self) -> Options<'_> {
        Options::new(self.options())
    }

    /// The header, options included: the first [`Packet::header_len`] bytes.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// The payload, from the end of the header to the total length.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[self.header_len()..usize::from(self.total_len())]
    }

    /// The unfolded sum of the TCP/UDP pseudo-header for an upper-layer `length`.
    pub fn pseudo_header_sum(&self, length: u32) -> u32 {
        checksum::pseudo_header_v4(self.src_addr(), self.dst_addr(), self.protocol(), length)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_u16_at(&mut self, f: Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the version field.
    pub fn set_version(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (v << 4);
    }

    /// Sets the header length in bytes; it is stored divided by 4, truncated to 4 bits.
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | ((len / 4) as u8 & 0x0f);
    }

    /// Sets the DSCP and ECN byte.
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = v;
    }

    /// Sets the DSCP, keeping ECN; bits above the 6th are dropped.
    pub fn set_dscp(&mut self, dscp: u8) {
        let v = (dscp << 2) | self.ecn();
        self.set_dscp_ecn(v);
    }

    /// Sets the ECN bits, keeping the DSCP; bits above the 2nd are dropped.
    pub fn set_ecn(&mut self, ecn: u8) {
        let v = (self.dscp_ecn() & 0xfc) | (ecn & 0x03);
        self.set_dscp_ecn(v);
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, len: u16) {
        self.set_u16_at(field::LENGTH, len)
    }

    /// Sets the identification field.
    pub fn set_ident(&mut self, v: u16) {
        self.set_u16_at(field::IDENT, v)
    }

    fn set_flag(&mut self, flag: u16, on: bool) {
        let w = self.u16_at(field::FLG_OFF);
        self.set_u16_at(field::FLG_OFF, if on { w | flag } else { w & !flag });
    }

    /// Sets the Don't Fragment flag.
    pub fn set_dont_frag(&mut self, on: bool) {
        self.set_flag(FLAG_DF, on)
    }

    /// Sets the More Fragments flag.
    pub fn set_more_frags(&mut self, on: bool) {
        self.set_flag(FLAG_MF, on)
    }

    /// Sets the fragment offset in bytes; it is stored divided by 8.
    pub fn set_frag_offset(&mut self, offset: u16) {
        let w = self.u16_at(field::FLG_OFF);
        self.set_u16_at(field::FLG_OFF, (w & !OFFSET_MASK) | (offset / 8));
    }

    /// Sets the time to live, leaving the checksum alone.
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Sets the protocol.
    pub fn set_protocol(&mut self, p: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = p;
    }

    /// Sets the header checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set_u16_at(field::CHECKSUM, v)
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// Computes the header checksum over [`Packet::header_len`] bytes and stores it.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(&self.buffer.as_ref()[..self.header_len()]);
        self.set_checksum(c);
    }

    /// Sets the TTL and patches the checksum incrementally (RFC 1624): a correct checksum
    /// stays correct.
    pub fn set_ttl_incremental(&mut self, ttl: u8) {
        let old = self.u16_at(field::TTL_PROTOCOL);
        self.set_ttl(ttl);
        let new = self.u16_at(field::TTL_PROTOCOL);
        let c = checksum::update16(self.checksum(), old, new);
        self.set_checksum(c);
    }

    /// Decrements the TTL, patching the checksum incrementally, and returns the new TTL.
    /// A TTL of 0 stays 0 (callers check for expiry before forwarding).
    #[inline(always)]
    pub fn decrement_ttl(&mut self) -> u8 {
        let ttl = self.ttl();
        if ttl == 0 {
            return 0;
        }
        self.set_ttl(ttl - 1);
        // RFC 1624 eqn. 3 with the TTL the high byte of its word (m' = m - 0x0100):
        // ~m + m' is 0xfeff whatever m is, and one fold suffices. Every router decrements
        // every packet's TTL, so this skips reading the word back and the general fold.
        let acc = u32::from(!self.checksum()) + 0xfeff;
        self.set_checksum(!(((acc & 0xffff) + (acc >> 16)) as u16));
        ttl - 1
    }

    /// The options, mutable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// The payload up to the total length, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (start, end) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buffer.as_mut()[start..end]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// An IPv4 header without options, decoded.
///
/// Options and the fragmentation fields other than Don't Fragment are not represented:
/// [`Repr::parse`] skips options, and a caller that must tell fragments apart asks the
/// [`Packet`] ([`Packet::is_fragment`]). [`Repr::emit`] writes an unfragmented header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Protocol of the payload (see [`protocol`]).
    pub protocol: u8,
    /// Length of the payload (total length minus header length).
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// DSCP and ECN byte.
    pub dscp_ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
}

impl Repr {
    /// Decodes a header after [`Packet::check_len`]; `Err(Malformed)` if the header
    /// checksum is wrong.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        if !packet.verify_checksum() {
            return Err(Error::Malformed);
        }
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: usize::from(packet.total_len()) - packet.header_len(),
            ttl: packet.ttl(),
            dscp_ecn: packet.dscp_ecn(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
        })
    }

    /// Length of the header this emits, [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes a 20-byte header with total length `20 + payload_len` (truncated to 16
    /// bits: keep `payload_len` at most 65515) and fills the checksum.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_version(4);
        packet.set_header_len(HEADER_LEN);
        packet.set_dscp_ecn(self.dscp_ecn);
        packet.set_total_len((HEADER_LEN + self.payload_len) as u16);
        packet.set_ident(self.ident);
        packet.set_u16_at(field::FLG_OFF, if self.dont_frag { FLAG_DF } else { 0 });
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Frames captured with a Python AF_PACKET socket (ETH_P_ALL) on `w1vb`, one end of a
    // veth pair between two network namespaces: 198.18.1.1 (02:00:00:00:0a:01) on the
    // other end, 198.18.1.2 (02:00:00:00:0b:01) here.

    // `ping -c1 -Q 0xb9 -t 17 198.18.1.2`: DSCP 46 (EF), ECN 1, TTL 17, DF, ICMP echo
    // request with 56 bytes of data.
    static ECHO_FRAME: [u8; 98] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x08, 0x00, 0x45, 0xb9, 0x00,
        0x54, 0xa5, 0x4b, 0x40, 0x00, 0x11, 0x01, 0x35, 0x7d, 0xc6, 0x12, 0x01, 0x01, 0xc6, 0x12, 0x01, 0x02,
        0x08, 0x00, 0x93, 0x5c, 0x19, 0x36, 0x00, 0x01, 0x21, 0xd2, 0x0c, 0x6b, 0x00, 0x00, 0x00, 0x00, 0x51,
        0x5c, 0x0d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19,
        0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a,
        0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37,
    ];

    // `ping -c1 -R 198.18.1.2`: IHL 15, options NOP + Record Route (type 7, length 39,
    // pointer 8, first slot 198.18.1.1 filled by the sender).
    // A UDP datagram ("vmpls", 198.18.0.1 port 33612 -> 198.18.0.2 port 4000) sent on a
    // socket with IP_OPTIONS: No Operation, Loose Source Route via 198.18.0.7 (copied),
    // Router Alert (copied), Record Route with two slots (not copied; the kernel filled the
    // first), End of Option List. Captured with an AF_PACKET socket on one end of a veth
    // pair in a fresh network namespace; the kernel sent it to the first hop, 198.18.0.7.
    static OPTIONS_FRAME: [u8; 71] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x07, 0x96, 0xb7, 0xbe, 0x33, 0x9f, 0xf8, 0x08, 0x00, 0x4b, 0x00, 0x00,
        0x39, 0x61, 0x0f, 0x40, 0x00, 0x40, 0x11, 0xc2, 0x06, 0xc6, 0x12, 0x00, 0x01, 0xc6, 0x12, 0x00, 0x07,
        0x01, 0x83, 0x07, 0x04, 0xc6, 0x12, 0x00, 0x02, 0x94, 0x04, 0x00, 0x00, 0x07, 0x0b, 0x08, 0xc6, 0x12,
        0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x83, 0x4c, 0x0f, 0xa0, 0x00, 0x0d, 0x8c, 0x4b, 0x76, 0x6d,
        0x70, 0x6c, 0x73,
    ];

    static RECORD_ROUTE_FRAME: [u8; 138] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x08, 0x00, 0x4f, 0x00, 0x00,
        0x7c, 0xf5, 0x2e, 0x40, 0x00, 0x40, 0x01, 0xbe, 0x07, 0xc6, 0x12, 0x01, 0x01, 0xc6, 0x12, 0x01, 0x02,
        0x01, 0x07, 0x27, 0x08, 0xc6, 0x12, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0xeb, 0x18, 0x15, 0xfc, 0x00, 0x01, 0x06, 0xd2, 0x0c,
        0x6b, 0x00, 0x00, 0x00, 0x00, 0x18, 0xda, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13,
        0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24,
        0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35,
        0x36, 0x37,
    ];

    // A TCP SYN from 198.18.1.1:49992 to 198.18.1.2:5001 (Python `create_connection`).
    // veth hands it up with CHECKSUM_PARTIAL, so the TCP checksum field holds only the
    // folded pseudo-header sum, 0x8e56.
    static SYN_FRAME: [u8; 74] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x08, 0x00, 0x45, 0x00, 0x00,
        0x3c, 0x2b, 0x72, 0x40, 0x00, 0x40, 0x06, 0x81, 0x22, 0xc6, 0x12, 0x01, 0x01, 0xc6, 0x12, 0x01, 0x02,
        0xc3, 0x48, 0x13, 0x89, 0x46, 0x41, 0x55, 0xfd, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa, 0xf0, 0x8e,
        0x56, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x71, 0x56, 0x10, 0x26, 0x00, 0x00,
        0x00, 0x00, 0x01, 0x03, 0x03, 0x0a,
    ];

    // The IPv4 headers (only) of the two fragments of `ping -c1 -s 2000 198.18.1.2` on a
    // 1500-byte MTU: total length 1500 with More Fragments, then 548 at offset 1480.
    static FIRST_FRAGMENT_HEADER: [u8; 20] = [
        0x45, 0x00, 0x05, 0xdc, 0xa5, 0x4c, 0x20, 0x00, 0x40, 0x01, 0x21, 0xad, 0xc6, 0x12, 0x01, 0x01, 0xc6,
        0x12, 0x01, 0x02,
    ];
    static LAST_FRAGMENT_HEADER: [u8; 20] = [
        0x45, 0x00, 0x02, 0x24, 0xa5, 0x4c, 0x00, 0xb9, 0x40, 0x01, 0x44, 0xac, 0xc6, 0x12, 0x01, 0x01, 0xc6,
        0x12, 0x01, 0x02,
    ];

    const HOST_A: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
    const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);

    fn echo_repr() -> Repr {
        Repr {
            src_addr: HOST_A,
            dst_addr: HOST_B,
            protocol: protocol::ICMP,
            payload_len: 64,
            ttl: 17,
            dscp_ecn: 0xb9,
            ident: 0xa54b,
            dont_frag: true,
        }
    }

    #[test]
    fn plain_checked_takes_what_new_checked_and_verify_checksum_take_without_options() {
        let ip = &ECHO_FRAME[14..];
        let plain = Packet::plain_checked(ip).expect("a plain, valid header");
        assert_eq!(plain.dst_addr(), Packet::new_checked(ip).unwrap().dst_addr());
        // Padding after the packet is allowed, as for new_checked.
        let mut padded = ip.to_vec();
        padded.extend([0; 6]);
        assert!(Packet::plain_checked(&padded).is_some());
        // Options (valid ones): left to the general way.
        assert!(Packet::new_checked(&RECORD_ROUTE_FRAME[14..]).unwrap().verify_checksum());
        assert!(Packet::plain_checked(&RECORD_ROUTE_FRAME[14..]).is_none());
        // A wrong checksum, a total length the buffer does not hold or below the header,
        // too short a buffer, another version.
        let mut bad = ip.to_vec();
        bad[11] ^= 1;
        assert!(Packet::plain_checked(&bad).is_none());
        assert!(Packet::plain_checked(&ip[..ip.len() - 1]).is_none());
        assert!(Packet::plain_checked(&ip[..19]).is_none());
        let mut short_total = ip.to_vec();
        short_total[2..4].copy_from_slice(&19u16.to_be_bytes());
        fix_checksum(&mut short_total);
        assert!(Packet::plain_checked(&short_total).is_none());
        let mut v6 = ip.to_vec();
        v6[0] = 0x65;
        fix_checksum(&mut v6);
        assert!(Packet::plain_checked(&v6).is_none());
    }

    /// Recomputes the checksum of the 20-byte header at the start of `ip`.
    fn fix_checksum(ip: &mut [u8]) {
        ip[10..12].fill(0);
        let c = checksum::checksum(&ip[..HEADER_LEN]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
    }

    #[test]
    fn parses_captured_echo_request() {
        let p = Packet::new_checked(&ECHO_FRAME[14..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!((p.dscp(), p.ecn(), p.dscp_ecn()), (46, 1, 0xb9));
        assert_eq!(p.total_len(), 84);
        assert_eq!(p.ident(), 0xa54b);
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!(p.flags(), 0b010);
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 17);
        assert_eq!(p.protocol(), protocol::ICMP);
        assert_eq!(p.checksum(), 0x357d);
        assert!(p.verify_checksum());
        assert_eq!((p.src_addr(), p.dst_addr()), (HOST_A, HOST_B));
        assert!(p.options().is_empty());
        assert_eq!(p.payload(), &ECHO_FRAME[34..]);
        assert_eq!(Repr::parse(&p).unwrap(), echo_repr());
    }

    #[test]
    fn emits_captured_echo_request_header() {
        let repr = echo_repr();
        assert_eq!(repr.buffer_len(), 20);
        let mut out = [0u8; 20];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, ECHO_FRAME[14..34]);
    }

    #[test]
    fn emits_captured_syn_header() {
        let repr = Repr::parse(&Packet::new_checked(&SYN_FRAME[14..]).unwrap()).unwrap();
        assert_eq!(
            repr,
            Repr {
                src_addr: HOST_A,
                dst_addr: HOST_B,
                protocol: protocol::TCP,
                payload_len: 40,
                ttl: 64,
                dscp_ecn: 0,
                ident: 0x2b72,
                dont_frag: true,
            }
        );
        let mut out = [0xffu8; 20];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, SYN_FRAME[14..34]);
    }

    #[test]
    fn pseudo_header_sum_matches_kernel_partial_checksum() {
        let p = Packet::new_checked(&SYN_FRAME[14..]).unwrap();
        let tcp_len = u32::from(p.total_len()) - p.header_len() as u32;
        let tcp = p.payload();
        let partial = u16::from_be_bytes([tcp[16], tcp[17]]);
        assert_eq!(checksum::fold(p.pseudo_header_sum(tcp_len)), partial);
        assert_eq!(partial, 0x8e56);
    }

    #[test]
    fn parses_options_of_record_route() {
        let p = Packet::new_checked(&RECORD_ROUTE_FRAME[14..]).unwrap();
        assert_eq!(p.header_len(), 60);
        assert_eq!(p.total_len(), 124);
        assert!(p.verify_checksum());
        assert_eq!(p.options().len(), 40);
        assert_eq!(&p.options()[..8], &[0x01, 0x07, 0x27, 0x08, 198, 18, 1, 1]);
        assert_eq!(p.payload(), &RECORD_ROUTE_FRAME[74..]);
        let repr = Repr::parse(&p).unwrap();
        assert_eq!(repr.payload_len, 64);
        assert_eq!(repr.ttl, 64);
    }

    #[test]
    fn walks_captured_options() {
        let p = Packet::new_checked(&OPTIONS_FRAME[14..]).unwrap();
        assert_eq!((p.header_len(), p.protocol()), (44, protocol::UDP));
        assert!(p.verify_checksum());
        assert_eq!(p.header(), &OPTIONS_FRAME[14..58]);
        let opts: Vec<IpOption<'_>> = p.option_iter().map(|o| o.unwrap()).collect();
        let kinds: Vec<u8> = opts.iter().map(|o| o.kind()).collect();
        assert_eq!(kinds, [option::NOP, option::LSRR, option::ROUTER_ALERT, option::RECORD_ROUTE]);
        let copied: Vec<bool> = opts.iter().map(|o| o.copied()).collect();
        assert_eq!(copied, [false, true, true, false]);
        assert_eq!(opts[0].bytes(), &[option::NOP]);
        assert!(opts[0].data().is_empty());
        assert_eq!(opts[1].bytes(), &OPTIONS_FRAME[35..42]);
        assert_eq!(opts[1].data(), &[4, 198, 18, 0, 2], "pointer, then the destination");
        assert_eq!(opts[2].data(), &[0, 0]);
        assert_eq!(opts[3].data(), &[8, 198, 18, 0, 1, 0, 0, 0, 0], "one slot filled");
        // The captured record route options: a No Operation and one 39-byte option.
        let p = Packet::new_checked(&RECORD_ROUTE_FRAME[14..]).unwrap();
        let lens: Vec<usize> = p.option_iter().map(|o| o.unwrap().bytes().len()).collect();
        assert_eq!(lens, [1, 39]);
    }

    #[test]
    fn malformed_options_end_the_walk_with_an_error() {
        let opts = &OPTIONS_FRAME[34..58];
        for (at, len) in [(2, 0u8), (2, 1), (2, 24), (13, 13)] {
            let mut b = opts.to_vec();
            b[at] = len;
            let walked: Vec<Result<IpOption<'_>>> = Options::new(&b).collect();
            assert_eq!(walked.last(), Some(&Err(Error::Malformed)), "length {len} at {at}");
            assert_eq!(walked.iter().filter(|o| o.is_err()).count(), 1);
        }
        // A type without its length byte.
        assert_eq!(Options::new(&[option::NOP, option::LSRR]).nth(1), Some(Err(Error::Malformed)));
        // Nothing after End of Option List is looked at.
        assert_eq!(Options::new(&[option::END_OF_LIST, 0x83, 0]).count(), 0);
        for n in 0..=opts.len() {
            let _ = Options::new(&opts[..n]).count();
        }
    }

    #[test]
    fn parses_fragment_fields() {
        let first = Packet::new_unchecked(&FIRST_FRAGMENT_HEADER[..]);
        assert!(first.more_frags() && !first.dont_frag() && first.is_fragment());
        assert_eq!(first.flags(), 0b001);
        assert_eq!((first.frag_offset(), first.total_len()), (0, 1500));
        assert!(first.verify_checksum());
        let last = Packet::new_unchecked(&LAST_FRAGMENT_HEADER[..]);
        assert!(!last.more_frags() && last.is_fragment());
        assert_eq!(last.flags(), 0);
        assert_eq!((last.frag_offset(), last.total_len()), (1480, 548));
        assert!(last.verify_checksum());
        // Only the header was kept: the total length runs past the buffer.
        assert_eq!(Packet::new_checked(&LAST_FRAGMENT_HEADER[..]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn fragment_setters_produce_captured_header() {
        let mut h = FIRST_FRAGMENT_HEADER;
        let mut p = Packet::new_unchecked(&mut h[..]);
        p.set_more_frags(false);
        p.set_frag_offset(1480);
        p.set_total_len(548);
        p.fill_checksum();
        assert_eq!(h, LAST_FRAGMENT_HEADER);
    }

    #[test]
    fn setters_rewrite_every_field() {
        let mut h = [0u8; 24];
        let mut p = Packet::new_unchecked(&mut h[..]);
        p.set_version(4);
        p.set_header_len(24);
        p.set_dscp(46);
        p.set_ecn(1);
        p.set_total_len(24);
        p.set_ident(0xa54b);
        p.set_dont_frag(true);
        p.set_more_frags(true);
        p.set_frag_offset(8 * 0x1fff);
        p.set_ttl(17);
        p.set_protocol(protocol::UDP);
        p.set_src_addr(HOST_A);
        p.set_dst_addr(HOST_B);
        p.options_mut().copy_from_slice(&[1, 1, 1, 0]);
        p.fill_checksum();
        assert!(p.verify_checksum());
        let p = Packet::new_checked(&h[..]).unwrap();
        assert_eq!((p.version(), p.header_len(), p.dscp_ecn()), (4, 24, 0xb9));
        assert!(p.dont_frag() && p.more_frags());
        assert_eq!(p.frag_offset(), 65528);
        assert_eq!((p.ttl(), p.protocol()), (17, protocol::UDP));
        assert_eq!((p.src_addr(), p.dst_addr()), (HOST_A, HOST_B));
        assert_eq!(p.options(), &[1, 1, 1, 0]);
        assert!(p.payload().is_empty());
        let mut p = Packet::new_checked(&mut h[..]).unwrap();
        p.set_dont_frag(false);
        p.set_ecn(0);
        assert!(!p.dont_frag() && p.more_frags());
        assert_eq!(p.dscp(), 46);
    }

    #[test]
    fn decrement_ttl_patches_checksum_as_rfc_1624_for_every_checksum() {
        let mut header = [0u8; HEADER_LEN];
        header[0] = 0x45;
        for ttl in [1u8, 2, 64, 128, 255] {
            for check in 0..=u16::MAX {
                header[8] = ttl;
                header[10..12].copy_from_slice(&check.to_be_bytes());
                let mut p = Packet::new_unchecked(&mut header[..]);
                let old = p.u16_at(field::TTL_PROTOCOL);
                assert_eq!(p.decrement_ttl(), ttl - 1);
                let want = checksum::update16(check, old, p.u16_at(field::TTL_PROTOCOL));
                assert_eq!(p.checksum(), want, "ttl {ttl} checksum {check:#06x}");
            }
        }
    }

    #[test]
    fn decrement_ttl_patches_checksum_like_full_recompute() {
        let mut frame = ECHO_FRAME;
        let mut p = Packet::new_checked(&mut frame[14..]).unwrap();
        for expect in (0..17).rev() {
            assert_eq!(p.decrement_ttl(), expect);
            assert!(p.verify_checksum(), "ttl {expect}");
            let incremental = p.checksum();
            p.fill_checksum();
            assert_eq!(p.checksum(), incremental);
        }
        // 0 does not wrap to 255.
        assert_eq!(p.decrement_ttl(), 0);
        assert_eq!(p.ttl(), 0);
        assert!(p.verify_checksum());
        p.set_ttl_incremental(255);
        assert!(p.verify_checksum());
        assert_eq!(p.ttl(), 255);
        p.set_ttl_incremental(17);
        assert_eq!(&frame[14..34], &ECHO_FRAME[14..34]);
    }

    #[test]
    fn payload_stops_at_total_length_despite_padding() {
        let mut buf = ECHO_FRAME[14..].to_vec();
        buf.extend_from_slice(&[0xee; 6]);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.payload(), &ECHO_FRAME[34..]);
        assert_eq!(Repr::parse(&p).unwrap().payload_len, 64);
    }

    #[test]
    fn bad_headers_are_rejected() {
        let ip = &ECHO_FRAME[14..];
        for len in 0..20 {
            assert_eq!(Packet::new_checked(&ip[..len]).unwrap_err(), Error::Truncated);
        }
        // Total length 84 runs past a 83-byte buffer.
        assert_eq!(Packet::new_checked(&ip[..83]).unwrap_err(), Error::Truncated);
        let with = |i: usize, v: u8| {
            let mut b = ip.to_vec();
            b[i] = v;
            b
        };
        // IPv6 version nibble.
        assert_eq!(Packet::new_checked(&with(0, 0x65)[..]).unwrap_err(), Error::Malformed);
        // IHL 4.
        assert_eq!(Packet::new_checked(&with(0, 0x44)[..]).unwrap_err(), Error::Malformed);
        // Total length 19 < header length.
        assert_eq!(Packet::new_checked(&with(3, 19)[..]).unwrap_err(), Error::Malformed);
        // IHL 15 (60 bytes) in a 40-byte buffer with total length 40.
        let mut b = with(0, 0x4f);
        b.truncate(40);
        b[3] = 40;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::Truncated);
        // A flipped bit fails the checksum: the view accepts it, Repr does not.
        let b = with(8, 16);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(!p.verify_checksum());
        assert_eq!(Repr::parse(&p).unwrap_err(), Error::Malformed);
    }

    #[test]
    fn no_accessor_panics_after_new_checked() {
        for frame in [&ECHO_FRAME[14..], &RECORD_ROUTE_FRAME[14..]] {
            for len in 0..=60.min(frame.len()) {
                for first in [0x00, 0x40, 0x44, 0x45, 0x46, 0x4c, 0x4f, 0x60, 0xff] {
                    for total in [0u16, 19, 20, 24, 59, 60, len as u16, 0xffff] {
                        let mut buf = frame[..len].to_vec();
                        if let Some(b) = buf.first_mut() {
                            *b = first;
                        }
                        if len >= 4 {
                            buf[2..4].copy_from_slice(&total.to_be_bytes());
                        }
                        exercise(&mut buf);
                    }
                }
            }
        }
    }

    fn exercise(buf: &mut [u8]) {
        let len = buf.len();
        let Ok(mut p) = Packet::new_checked(&mut *buf) else {
            return;
        };
        assert!(p.header_len() <= usize::from(p.total_len()));
        assert!(usize::from(p.total_len()) <= len);
        let _ = (p.version(), p.dscp(), p.ecn(), p.ident(), p.dont_frag());
        let _ = (p.more_frags(), p.frag_offset(), p.ttl(), p.protocol());
        let _ = (p.checksum(), p.src_addr(), p.dst_addr(), p.verify_checksum());
        let _ = (p.options().len(), p.payload().len(), p.pseudo_header_sum(0));
        let _ = Repr::parse(&p);
        p.decrement_ttl();
        p.set_ttl_incremental(1);
        p.fill_checksum();
        let _ = (p.options_mut().len(), p.payload_mut().len());
        assert!(Repr::parse(&p).is_ok());
    }
}
