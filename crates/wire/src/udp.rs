//! UDP datagrams (RFC 768; checksum over IPv6 per RFC 8200 section 8.1).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          Source Port          |       Destination Port        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |            Length             |           Checksum            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! A zero checksum over IPv4 means "none computed"; a computed zero is sent as `0xffff`.
//! Over IPv6 the checksum is mandatory.

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::checksum;
use crate::{Error, Field, Result};

mod field {
    use crate::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;
/// The IP protocol number of UDP.
pub const PROTOCOL: u8 = 17;
/// Offset of the checksum field in the header (virtio-net `csum_offset`).
pub const CHECKSUM_OFFSET: usize = 6;

/// A view over a UDP datagram. The buffer may run past the datagram (link padding);
/// [`Packet::len`] delimits it.
#[derive(Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer that holds the header and as many bytes as the length field says.
    /// `Err(Truncated)` if it is shorter, `Err(Malformed)` for a length below 8.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let packet = Packet { buffer };
        let len = usize::from(packet.len());
        if len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if packet.buffer.as_ref().len() < len {
            return Err(Error::Truncated);
        }
        Ok(packet)
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, f: Field) -> u16 {
        let b = &self.buffer.as_ref()[f];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The source port.
    pub fn src_port(&self) -> u16 {
        self.u16_at(field::SRC_PORT)
    }
    /// The destination port.
    pub fn dst_port(&self) -> u16 {
        self.u16_at(field::DST_PORT)
    }
    /// The length field: header plus payload.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        self.u16_at(field::LENGTH)
    }
    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }
    /// The datagram as the length field delimits it (the whole buffer if it says more).
    fn datagram(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[..usize::from(self.len()).clamp(HEADER_LEN.min(b.len()), b.len())]
    }
    /// The payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        let d = self.datagram();
        &d[HEADER_LEN.min(d.len())..]
    }
    /// True when the checksum is zero (none sent) or correct over the IPv4 pseudo-header.
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let d = self.datagram();
        let ph = checksum::pseudo_header_v4(src, dst, PROTOCOL, d.len() as u32);
        checksum::fold(checksum::add(ph, checksum::sum(d))) == 0xffff
    }
    /// True when the checksum is correct over the IPv6 pseudo-header (zero is invalid).
    pub fn verify_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        if self.checksum() == 0 {
            return false;
        }
        let d = self.datagram();
        let ph = checksum::pseudo_header_v6(src, dst, PROTOCOL, d.len() as u32);
        checksum::fold(checksum::add(ph, checksum::sum(d))) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_u16_at(&mut self, f: Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        self.set_u16_at(field::SRC_PORT, v)
    }
    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        self.set_u16_at(field::DST_PORT, v)
    }
    /// Sets the length field.
    pub fn set_len(&mut self, v: u16) {
        self.set_u16_at(field::LENGTH, v)
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set_u16_at(field::CHECKSUM, v)
    }
    /// The payload up to the length field, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.len());
        let b = self.buffer.as_mut();
        let end = len.clamp(HEADER_LEN.min(b.len()), b.len());
        &mut b[HEADER_LEN.min(end)..end]
    }
    fn fill_with_pseudo_header(&mut self, ph: impl FnOnce(u32) -> u32) {
        self.set_checksum(0);
        let d = self.datagram();
        let c = checksum::finish(checksum::add(ph(d.len() as u32), checksum::sum(d)));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }
    /// Computes and writes the checksum over the IPv4 pseudo-header and the datagram.
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.fill_with_pseudo_header(|len| checksum::pseudo_header_v4(src, dst, PROTOCOL, len));
    }
    /// Computes and writes the checksum over the IPv6 pseudo-header and the datagram.
    pub fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.fill_with_pseudo_header(|len| checksum::pseudo_header_v6(src, dst, PROTOCOL, len));
    }
    /// Writes the partial checksum a `NEEDS_CSUM` frame carries: the folded, not
    /// complemented, IPv4 pseudo-header sum.
    pub fn fill_partial_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        let len = u32::from(self.len());
        let ph = checksum::pseudo_header_v4(src, dst, PROTOCOL, len);
        self.set_checksum(checksum::fold(ph));
    }
    /// Writes the partial checksum (IPv6 pseudo-header sum) of a `NEEDS_CSUM` frame.
    pub fn fill_partial_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        let len = u32::from(self.len());
        let ph = checksum::pseudo_header_v6(src, dst, PROTOCOL, len);
        self.set_checksum(checksum::fold(ph));
    }
}

/// A UDP header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload bytes after the header (at most 65527).
    pub payload_len: usize,
}

impl Repr {
    /// Decodes the header of a checked datagram.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload_len: packet.payload().len(),
        })
    }

    /// Header plus payload.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header with a zero checksum: write the payload, then fill the checksum.
    /// `Err(Malformed)` if the datagram would not fit the 16-bit length field,
    /// `Err(Truncated)` if the buffer is shorter than the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        let len = u16::try_from(self.buffer_len()).map_err(|_| Error::Malformed)?;
        if packet.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(len);
        packet.set_checksum(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Frames captured with a Python AF_PACKET socket (ETH_P_ALL) on the receiving veth of a
    // pair between two network namespaces, A (198.18.50.1 / 2001:db8:50::1) and B
    // (198.18.50.2 / 2001:db8:50::2), after `ethtool -K <dev> tx off` on both ends so the
    // kernel computed the UDP checksums in full. Traffic: Python `sendto` of "vmpls udp4\n"
    // from A port 40002 to B port 5002, and "vmpls udp6\n" from A port 40003 to B port 5003.
    const UDP4: usize = 14 + 20;
    const UDP6: usize = 14 + 40;
    const A4: Ipv4Addr = Ipv4Addr::new(198, 18, 50, 1);
    const B4: Ipv4Addr = Ipv4Addr::new(198, 18, 50, 2);
    const A6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x50, 0, 0, 0, 0, 1);
    const B6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x50, 0, 0, 0, 0, 2);

    static UDP_V4: [u8; 53] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x08, 0x00, 0x45, 0x00, 0x00,
        0x27, 0x28, 0xfe, 0x40, 0x00, 0x40, 0x11, 0x21, 0xa0, 0xc6, 0x12, 0x32, 0x01, 0xc6, 0x12, 0x32, 0x02,
        0x9c, 0x42, 0x13, 0x8a, 0x00, 0x13, 0x16, 0x40, 0x76, 0x6d, 0x70, 0x6c, 0x73, 0x20, 0x75, 0x64, 0x70,
        0x34, 0x0a,
    ];

    static UDP_V6: [u8; 73] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x86, 0xdd, 0x60, 0x05, 0x44,
        0x32, 0x00, 0x13, 0x11, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x02, 0x9c, 0x43, 0x13, 0x8b, 0x00, 0x13, 0xaa, 0x4f, 0x76, 0x6d, 0x70, 0x6c, 0x73, 0x20,
        0x75, 0x64, 0x70, 0x36, 0x0a,
    ];

    #[test]
    fn parses_captured_datagrams() {
        let p = Packet::new_checked(&UDP_V4[UDP4..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (40002, 5002, 19));
        assert_eq!(p.checksum(), 0x1640);
        assert_eq!(p.payload(), b"vmpls udp4\n");
        assert!(p.verify_checksum_v4(A4, B4));
        assert!(!p.verify_checksum_v4(B4, B4));

        let p = Packet::new_checked(&UDP_V6[UDP6..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (40003, 5003, 19));
        assert_eq!(p.payload(), b"vmpls udp6\n");
        assert!(p.verify_checksum_v6(A6, B6));
        assert!(!p.verify_checksum_v6(A6, A6));
    }

    #[test]
    fn repr_round_trips_captured_datagrams() {
        for (frame, off, v6) in [(&UDP_V4[..], UDP4, false), (&UDP_V6[..], UDP6, true)] {
            let dgram = &frame[off..];
            let p = Packet::new_checked(dgram).unwrap();
            let repr = Repr::parse(&p).unwrap();
            assert_eq!(repr.payload_len, 11);
            assert_eq!(repr.buffer_len(), dgram.len());
            let mut out = vec![0u8; repr.buffer_len()];
            let mut q = Packet::new_unchecked(&mut out[..]);
            repr.emit(&mut q).unwrap();
            q.payload_mut().copy_from_slice(p.payload());
            if v6 {
                q.fill_checksum_v6(A6, B6);
            } else {
                q.fill_checksum_v4(A4, B4);
            }
            assert_eq!(&out[..], dgram);
        }
    }

    #[test]
    fn zero_checksum_rules() {
        let mut dgram = UDP_V4[UDP4..].to_vec();
        let mut p = Packet::new_checked(&mut dgram[..]).unwrap();
        p.set_checksum(0);
        assert!(p.verify_checksum_v4(A4, B4), "zero means none over IPv4");
        assert!(!p.verify_checksum_v6(A6, B6), "zero is invalid over IPv6");

        // Choose two payload bytes at an even offset so the computed checksum is zero: it must be
        // sent as 0xffff, which verifies.
        let mut p = Packet::new_checked(&mut dgram[..]).unwrap();
        p.payload_mut()[8..10].fill(0);
        p.fill_checksum_v4(A4, B4);
        // Adding the checksum value as a data word makes the sum all ones, so the
        // complement, the checksum to send, becomes zero.
        let c = p.checksum();
        p.payload_mut()[8..10].copy_from_slice(&c.to_be_bytes());
        p.fill_checksum_v4(A4, B4);
        assert_eq!(p.checksum(), 0xffff);
        assert!(p.verify_checksum_v4(A4, B4));
    }

    #[test]
    fn partial_checksum_completes_to_full() {
        let mut dgram = UDP_V6[UDP6..].to_vec();
        let mut p = Packet::new_checked(&mut dgram[..]).unwrap();
        p.fill_partial_checksum_v6(A6, B6);
        let c = checksum::checksum(&dgram);
        dgram[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 2].copy_from_slice(&c.to_be_bytes());
        assert_eq!(&dgram[..], &UDP_V6[UDP6..]);

        let mut dgram = UDP_V4[UDP4..].to_vec();
        let mut p = Packet::new_checked(&mut dgram[..]).unwrap();
        p.fill_partial_checksum_v4(A4, B4);
        let c = checksum::checksum(&dgram);
        dgram[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 2].copy_from_slice(&c.to_be_bytes());
        assert_eq!(&dgram[..], &UDP_V4[UDP4..]);
    }

    #[test]
    fn trailing_link_padding_is_ignored() {
        let mut padded = UDP_V4[UDP4..].to_vec();
        padded.extend_from_slice(&[0; 7]);
        let p = Packet::new_checked(&padded[..]).unwrap();
        assert_eq!(p.payload(), b"vmpls udp4\n");
        assert!(p.verify_checksum_v4(A4, B4));
    }

    #[test]
    fn setters_and_repr_errors() {
        let mut buf = [0u8; 8];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_src_port(53);
        p.set_dst_port(5353);
        p.set_len(8);
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (53, 5353, 8));
        assert!(p.payload().is_empty());
        let big = Repr { src_port: 1, dst_port: 2, payload_len: 65528 };
        assert_eq!(big.emit(&mut p), Err(Error::Malformed));
        let small = Repr { payload_len: 0, ..big };
        let mut short = [0u8; 7];
        assert_eq!(small.emit(&mut Packet::new_unchecked(&mut short[..])), Err(Error::Truncated));
    }

    #[test]
    fn malformed_and_truncated_datagrams_are_errors() {
        let mut dgram = UDP_V4[UDP4..].to_vec();
        dgram[4..6].copy_from_slice(&7u16.to_be_bytes());
        assert_eq!(Packet::new_checked(&dgram[..]).unwrap_err(), Error::Malformed);
        dgram[4..6].copy_from_slice(&20u16.to_be_bytes());
        assert_eq!(Packet::new_checked(&dgram[..]).unwrap_err(), Error::Truncated);
        for dgram in [&UDP_V4[UDP4..], &UDP_V6[UDP6..]] {
            for len in 0..=dgram.len() {
                match Packet::new_checked(&dgram[..len]) {
                    Ok(p) => {
                        assert_eq!(len, dgram.len());
                        let _ = Repr::parse(&p).unwrap();
                    }
                    Err(e) => assert_eq!(e, Error::Truncated),
                }
                // Unchecked views over every prefix still never panic in accessors that
                // read past the header.
                if len >= HEADER_LEN {
                    let p = Packet::new_unchecked(&dgram[..len]);
                    let _ = (p.payload().len(), p.verify_checksum_v4(A4, B4));
                    let _ = p.verify_checksum_v6(A6, B6);
                }
            }
        }
    }
}
