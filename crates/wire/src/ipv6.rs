//! IPv6 fixed headers (RFC 8200 section 3).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version| Traffic Class |           Flow Label                  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |         Payload Length        |  Next Header  |   Hop Limit   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                                                               |
//! +                    Source Address (128 bits)                  +
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                                                               |
//! +                 Destination Address (128 bits)                +
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Extension headers are part of the payload here. The buffer may be longer than
//! `40 + payload_len`; [`Packet::payload`] ends at the payload length. A payload length
//! of zero with a Jumbo Payload option (RFC 2675) is not interpreted: the payload is then
//! empty.

use core::net::Ipv6Addr;

use crate::{Error, Field, Result, checksum};

/// IP protocol numbers, shared with IPv4: the Next Header values.
pub use crate::ipv4::protocol;

pub(crate) mod field {
    use crate::Field;
    pub const VER_TC_FLOW: Field = 0..4;
    pub const LENGTH: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Field = 8..24;
    pub const DST_ADDR: Field = 24..40;
}

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;

const FLOW_MASK: u32 = 0x000f_ffff;

/// A view over an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
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

    /// Checks the header: `Err(Truncated)` if the buffer is shorter than 40 bytes or
    /// than `40 + payload_len`, `Err(Malformed)` if the version is not 6.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 6 {
            return Err(Error::Malformed);
        }
        if self.total_len() > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn word0(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VER_TC_FLOW];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    fn addr_at(&self, f: Field) -> Ipv6Addr {
        let mut o = [0u8; 16];
        o.copy_from_slice(&self.buffer.as_ref()[f]);
        Ipv6Addr::from(o)
    }

    /// The version field (6).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// The traffic class (DSCP and ECN).
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }

    /// The 20-bit flow label.
    pub fn flow_label(&self) -> u32 {
        self.word0() & FLOW_MASK
    }

    /// The payload length: what follows the fixed header, extension headers included.
    pub fn payload_len(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::LENGTH];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// `HEADER_LEN + payload_len`: the length of the packet on the wire.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + usize::from(self.payload_len())
    }

    /// The Next Header value (see [`protocol`]).
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// The hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// The source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        self.addr_at(field::SRC_ADDR)
    }

    /// The destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        self.addr_at(field::DST_ADDR)
    }

    /// The payload, `payload_len` bytes after the fixed header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.total_len()]
    }

    /// The unfolded sum of the upper-layer pseudo-header (RFC 8200 section 8.1) for
    /// `next_header` and an upper-layer `length`.
    pub fn pseudo_header_sum(&self, next_header: u8, length: u32) -> u32 {
        checksum::pseudo_header_v6(self.src_addr(), self.dst_addr(), next_header, length)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_word0(&mut self, w: u32) {
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes());
    }

    /// Sets the version field.
    pub fn set_version(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[0];
        *b = (*b & 0x0f) | (v << 4);
    }

    /// Sets the traffic class.
    pub fn set_traffic_class(&mut self, tc: u8) {
        let w = self.word0();
        self.set_word0((w & 0xf00f_ffff) | (u32::from(tc) << 20));
    }

    /// Sets the flow label; bits above the 20th are dropped.
    pub fn set_flow_label(&mut self, label: u32) {
        let w = self.word0();
        self.set_word0((w & !FLOW_MASK) | (label & FLOW_MASK));
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, len: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// Sets the Next Header value.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = v;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// Decrements the hop limit and returns the new value; 0 stays 0 (callers check for
    /// expiry before forwarding). IPv6 has no header checksum to patch.
    pub fn decrement_hop_limit(&mut self) -> u8 {
        let h = self.hop_limit().saturating_sub(1);
        self.set_hop_limit(h);
        h
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// An IPv6 fixed header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next Header (see [`protocol`]).
    pub next_header: u8,
    /// Length of what follows the fixed header.
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// Flow label, 20 bits.
    pub flow_label: u32,
}

impl Repr {
    /// Decodes the fixed header after [`Packet::check_len`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: usize::from(packet.payload_len()),
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
        })
    }

    /// Length of the fixed header, [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the fixed header; `payload_len` is truncated to 16 bits (keep it at most
    /// 65535) and `flow_label` to 20.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_word0((6 << 28) | (u32::from(self.traffic_class) << 20) | (self.flow_label & FLOW_MASK));
        packet.set_payload_len(self.payload_len as u16);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured with a Python AF_PACKET socket (ETH_P_ALL) on `w1vb`, one end of a veth
    // pair between two network namespaces: 2001:db8:1::1 (02:00:00:00:0a:01) on the other
    // end, 2001:db8:1::2 (02:00:00:00:0b:01) here.

    // `ping -6 -c1 -Q 0xb9 -t 17 2001:db8:1::2`: traffic class 0xb9, flow label 0xee041
    // (chosen by the kernel), hop limit 17, ICMPv6 echo request with 56 bytes of data.
    static ECHO_FRAME: [u8; 118] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x86, 0xdd, 0x6b, 0x9e, 0xe0,
        0x41, 0x00, 0x40, 0x3a, 0x11, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x02, 0x80, 0x00, 0xaa, 0x3c, 0x19, 0x38, 0x00, 0x01, 0x21, 0xd2, 0x0c, 0x6b, 0x00, 0x00,
        0x00, 0x00, 0x66, 0x88, 0x0d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16,
        0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27,
        0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37,
    ];

    // The IPv6 header (only) of `ping -6 -c1 -F 0x12345 2001:db8:1::2`: flow label
    // 0x12345 set by the sender, traffic class 0, hop limit 64, payload length 64.
    static FLOW_HEADER: [u8; 40] = [
        0x60, 0x01, 0x23, 0x45, 0x00, 0x40, 0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x01, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x02,
    ];

    const HOST_A: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
    const HOST_B: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);

    fn echo_repr() -> Repr {
        Repr {
            src_addr: HOST_A,
            dst_addr: HOST_B,
            next_header: protocol::IPV6_ICMP,
            payload_len: 64,
            hop_limit: 17,
            traffic_class: 0xb9,
            flow_label: 0xee041,
        }
    }

    #[test]
    fn parses_captured_echo_request() {
        let p = Packet::new_checked(&ECHO_FRAME[14..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xb9);
        assert_eq!(p.flow_label(), 0xee041);
        assert_eq!(p.payload_len(), 64);
        assert_eq!(p.total_len(), 104);
        assert_eq!(p.next_header(), protocol::IPV6_ICMP);
        assert_eq!(p.hop_limit(), 17);
        assert_eq!((p.src_addr(), p.dst_addr()), (HOST_A, HOST_B));
        assert_eq!(p.payload(), &ECHO_FRAME[54..]);
        assert_eq!(Repr::parse(&p).unwrap(), echo_repr());
    }

    #[test]
    fn emits_captured_echo_request_header() {
        let repr = echo_repr();
        assert_eq!(repr.buffer_len(), 40);
        let mut out = [0xffu8; 40];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, ECHO_FRAME[14..54]);
    }

    #[test]
    fn icmpv6_checksum_verifies_with_pseudo_header() {
        // The captured echo request carries a complete ICMPv6 checksum (0xaa3c).
        let p = Packet::new_checked(&ECHO_FRAME[14..]).unwrap();
        let sum = checksum::add(
            p.pseudo_header_sum(protocol::IPV6_ICMP, u32::from(p.payload_len())),
            checksum::sum(p.payload()),
        );
        assert_eq!(checksum::fold(sum), 0xffff);
    }

    #[test]
    fn setters_produce_captured_flow_header() {
        let mut h = ECHO_FRAME;
        let mut p = Packet::new_checked(&mut h[14..]).unwrap();
        p.set_traffic_class(0);
        p.set_flow_label(0xf0_0000 | 0x12345);
        p.set_hop_limit(64);
        assert_eq!(&h[14..54], &FLOW_HEADER[..]);
        let p = Packet::new_unchecked(&FLOW_HEADER[..]);
        assert_eq!((p.traffic_class(), p.flow_label(), p.hop_limit()), (0, 0x12345, 64));
        // Only the header was kept: the payload length runs past the buffer.
        assert_eq!(Packet::new_checked(&FLOW_HEADER[..]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn setters_rewrite_every_field() {
        let mut h = [0u8; 44];
        let mut p = Packet::new_unchecked(&mut h[..]);
        p.set_version(6);
        p.set_traffic_class(0xff);
        p.set_flow_label(0xfffff);
        p.set_traffic_class(0x01);
        p.set_payload_len(4);
        p.set_next_header(protocol::UDP);
        p.set_hop_limit(1);
        p.set_src_addr(HOST_B);
        p.set_dst_addr(HOST_A);
        p.payload_mut().copy_from_slice(&[1, 2, 3, 4]);
        let p = Packet::new_checked(&h[..]).unwrap();
        assert_eq!((p.version(), p.traffic_class(), p.flow_label()), (6, 1, 0xfffff));
        assert_eq!((p.next_header(), p.hop_limit()), (protocol::UDP, 1));
        assert_eq!((p.src_addr(), p.dst_addr()), (HOST_B, HOST_A));
        assert_eq!(p.payload(), &[1, 2, 3, 4]);
        assert_eq!(&h[..4], &[0x60, 0x1f, 0xff, 0xff]);
    }

    #[test]
    fn decrement_hop_limit_stops_at_zero() {
        let mut frame = ECHO_FRAME;
        let mut p = Packet::new_checked(&mut frame[14..]).unwrap();
        assert_eq!(p.decrement_hop_limit(), 16);
        assert_eq!(p.hop_limit(), 16);
        p.set_hop_limit(1);
        assert_eq!(p.decrement_hop_limit(), 0);
        assert_eq!(p.decrement_hop_limit(), 0);
    }

    #[test]
    fn payload_stops_at_payload_length_despite_padding() {
        let mut buf = ECHO_FRAME[14..].to_vec();
        buf.extend_from_slice(&[0xee; 6]);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.payload(), &ECHO_FRAME[54..]);
    }

    #[test]
    fn bad_headers_are_rejected() {
        let ip = &ECHO_FRAME[14..];
        for len in 0..40 {
            assert_eq!(Packet::new_checked(&ip[..len]).unwrap_err(), Error::Truncated);
        }
        assert_eq!(Packet::new_checked(&ip[..103]).unwrap_err(), Error::Truncated);
        for version in [0u8, 4, 7, 15] {
            let mut b = ip.to_vec();
            b[0] = (version << 4) | (b[0] & 0x0f);
            assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::Malformed);
            assert_eq!(Repr::parse(&Packet::new_unchecked(&b[..])).unwrap_err(), Error::Malformed);
        }
    }

    #[test]
    fn no_accessor_panics_after_new_checked() {
        let ip = &ECHO_FRAME[14..];
        for len in 0..=60 {
            for first in [0x00, 0x45, 0x60, 0x6b, 0x6f, 0xff] {
                for plen in [0u16, 1, 4, 19, 20, 21, 0xffff] {
                    let mut buf = ip[..len].to_vec();
                    if let Some(b) = buf.first_mut() {
                        *b = first;
                    }
                    if len >= 6 {
                        buf[4..6].copy_from_slice(&plen.to_be_bytes());
                    }
                    let Ok(mut p) = Packet::new_checked(&mut buf[..]) else {
                        continue;
                    };
                    assert!(p.total_len() <= len);
                    let _ = (p.traffic_class(), p.flow_label(), p.next_header());
                    let _ = (p.hop_limit(), p.src_addr(), p.dst_addr(), p.payload().len());
                    let _ = p.pseudo_header_sum(protocol::TCP, 0);
                    assert!(Repr::parse(&p).is_ok());
                    p.decrement_hop_limit();
                    p.set_flow_label(1);
                    let _ = p.payload_mut().len();
                }
            }
        }
    }
}
