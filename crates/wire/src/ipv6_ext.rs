//! IPv6 extension headers (RFC 8200 section 4; the Authentication Header, RFC 4302
//! section 2).
//!
//! Hop-by-Hop Options, Routing and Destination Options share one shape, [`Header`]: a
//! Next Header byte, then the header's length in 8-octet units not counting the first 8.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Next Header  |  Hdr Ext Len  |                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//! |                 Options or routing data (6 + 8n bytes)        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The Fragment header, [`FragmentHeader`], is always 8 bytes:
//!
//! ```text
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Next Header  |   Reserved    |      Fragment Offset    |Res|M|
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                         Identification                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The Authentication Header, [`AuthHeader`], counts its length in 4-octet units not
//! counting the first 8:
//!
//! ```text
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Next Header  |  Payload Len  |          Reserved             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 Security Parameters Index (SPI)               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |            Sequence Number, Integrity Check Value ...         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Each view's buffer starts at its header and may run on past it: `payload()` is what
//! follows the header, the next header in the chain or the upper layer. Which view fits
//! is decided by the Next Header value in front ([`crate::ipv6::protocol`]).

use crate::{Error, Result};

mod field {
    use crate::Field;
    pub const NXT_HDR: usize = 0;
    pub const LENGTH: usize = 1;
    pub const FRAG_OFF_M: Field = 2..4;
    pub const FRAG_IDENT: Field = 4..8;
    pub const AH_SPI: Field = 4..8;
}

/// Length of the Fragment header, and the shortest any extension header can be.
pub const FRAGMENT_HEADER_LEN: usize = 8;

const FRAG_M: u16 = 0x0001;
const FRAG_OFFSET_MASK: u16 = 0xfff8;

/// A view over a Hop-by-Hop Options, Routing or Destination Options header.
#[derive(Debug, Clone)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Header<T> {
        Header { buffer }
    }

    /// Wraps a buffer that holds the whole header its length field claims;
    /// `Err(Truncated)` otherwise.
    pub fn new_checked(buffer: T) -> Result<Header<T>> {
        let b = buffer.as_ref();
        if b.len() < FRAGMENT_HEADER_LEN || b.len() < (usize::from(b[field::LENGTH]) + 1) * 8 {
            return Err(Error::Truncated);
        }
        Ok(Header { buffer })
    }

    /// Returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The Next Header value: what follows this header.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// The Hdr Ext Len field as it is: 8-octet units after the first 8 bytes.
    #[inline]
    pub fn hdr_ext_len(&self) -> u8 {
        self.buffer.as_ref()[field::LENGTH]
    }

    /// The header's length in bytes, `(hdr_ext_len + 1) * 8`.
    #[inline]
    pub fn header_len(&self) -> usize {
        (usize::from(self.hdr_ext_len()) + 1) * 8
    }

    /// The options (or routing data) after the first two bytes, padding included.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[2..self.header_len()]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Header<&'a T> {
    /// What follows the header. It borrows the buffer, not the view, so a walk can move on with it.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    /// Sets the Next Header value.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = v;
    }

    /// Sets the Hdr Ext Len field (8-octet units after the first 8 bytes).
    pub fn set_hdr_ext_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::LENGTH] = v;
    }

    /// The options (or routing data), mutable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[2..end]
    }
}

/// A view over a Fragment header.
#[derive(Debug, Clone)]
pub struct FragmentHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> FragmentHeader<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> FragmentHeader<T> {
        FragmentHeader { buffer }
    }

    /// Wraps a buffer of at least [`FRAGMENT_HEADER_LEN`] bytes; `Err(Truncated)` otherwise.
    pub fn new_checked(buffer: T) -> Result<FragmentHeader<T>> {
        if buffer.as_ref().len() < FRAGMENT_HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(FragmentHeader { buffer })
    }

    /// Returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn off_m(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::FRAG_OFF_M];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The Next Header value of the fragmented part.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// The fragment offset in bytes (the 13-bit field times 8).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        self.off_m() & FRAG_OFFSET_MASK
    }

    /// The M flag: more fragments follow.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.off_m() & FRAG_M != 0
    }

    /// The identification.
    #[inline]
    pub fn ident(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::FRAG_IDENT];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> FragmentHeader<&'a T> {
    /// What follows the header: this fragment's part of the fragmentable part. It borrows the buffer, not the view, so a walk can move on with it.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[FRAGMENT_HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FragmentHeader<T> {
    fn set_off_m(&mut self, v: u16) {
        self.buffer.as_mut()[field::FRAG_OFF_M].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the Next Header value.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = v;
    }

    /// Sets the fragment offset in bytes; it is stored divided by 8.
    pub fn set_frag_offset(&mut self, offset: u16) {
        let w = self.off_m();
        self.set_off_m((w & !FRAG_OFFSET_MASK) | (offset & FRAG_OFFSET_MASK));
    }

    /// Sets or clears the M flag.
    pub fn set_more_frags(&mut self, on: bool) {
        let w = self.off_m();
        self.set_off_m(if on { w | FRAG_M } else { w & !FRAG_M });
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, v: u32) {
        self.buffer.as_mut()[field::FRAG_IDENT].copy_from_slice(&v.to_be_bytes());
    }
}

/// A view over an Authentication Header, as far as walking past it needs.
#[derive(Debug, Clone)]
pub struct AuthHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AuthHeader<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> AuthHeader<T> {
        AuthHeader { buffer }
    }

    /// Wraps a buffer that holds the whole header its Payload Len claims (8 bytes at
    /// least); `Err(Truncated)` otherwise.
    pub fn new_checked(buffer: T) -> Result<AuthHeader<T>> {
        let b = buffer.as_ref();
        if b.len() < FRAGMENT_HEADER_LEN || b.len() < (usize::from(b[field::LENGTH]) + 2) * 4 {
            return Err(Error::Truncated);
        }
        Ok(AuthHeader { buffer })
    }

    /// Returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The Next Header value: what the AH protects.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// The header's length in bytes, `(payload_len + 2) * 4`.
    #[inline]
    pub fn header_len(&self) -> usize {
        (usize::from(self.buffer.as_ref()[field::LENGTH]) + 2) * 4
    }

    /// The Security Parameters Index.
    pub fn spi(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::AH_SPI];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> AuthHeader<&'a T> {
    /// What follows the header. It borrows the buffer, not the view, so a walk can move on with it.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv6::{self, protocol};

    // Captured with a Python AF_PACKET socket on `lo` in a fresh network namespace (MTU
    // 1280): a 1380-byte UDP datagram from ::1 port 48814 to ::1 port 4000 sent on a
    // socket with IPV6_HOPOPTS (router alert, PadN), IPV6_RTHDR (segment routing, one
    // segment ::1, segments left 0) and IPV6_DSTOPTS (unknown skippable option 0x1e with
    // 0xdeadbeef). The kernel fragmented it. The first 104 bytes of each fragment:
    // IPv6 | hop-by-hop | routing | fragment | [destination options | UDP | data].

    /// First fragment: offset 0, M set, identification 0x80cc9c1f.
    static FIRST_FRAGMENT: [u8; 104] = [
        0x60, 0x01, 0xa2, 0x08, 0x04, 0xd8, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x2b, 0x00, 0x05, 0x02, 0x00, 0x00, 0x01, 0x00, 0x2c, 0x02, 0x04,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x01, 0x3c, 0x00, 0x00, 0x01, 0x80, 0xcc, 0x9c, 0x1f, 0x11, 0x00, 0x1e, 0x04, 0xde,
        0xad, 0xbe, 0xef, 0xbe, 0xae, 0x0f, 0xa0, 0x05, 0x6c, 0x65, 0x87, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05,
        0x06, 0x07,
    ];

    /// Second and last fragment: offset 1200, M clear, same identification.
    static LAST_FRAGMENT: [u8; 104] = [
        0x60, 0x01, 0xa2, 0x08, 0x00, 0xec, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x2b, 0x00, 0x05, 0x02, 0x00, 0x00, 0x01, 0x00, 0x2c, 0x02, 0x04,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x01, 0x3c, 0x00, 0x04, 0xb0, 0x80, 0xcc, 0x9c, 0x1f, 0xa0, 0xa1, 0xa2, 0xa3, 0xa4,
        0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5,
        0xb6, 0xb7,
    ];

    const HBH: core::ops::Range<usize> = 40..48;
    const ROUTING: core::ops::Range<usize> = 48..72;
    const FRAG: core::ops::Range<usize> = 72..80;
    const DSTOPTS: core::ops::Range<usize> = 80..88;

    #[test]
    fn parses_captured_hop_by_hop_header() {
        assert_eq!(ipv6::Packet::new_unchecked(&FIRST_FRAGMENT[..]).next_header(), protocol::HOPOPT);
        let h = Header::new_checked(&FIRST_FRAGMENT[HBH.start..]).unwrap();
        assert_eq!(h.next_header(), protocol::IPV6_ROUTE);
        assert_eq!((h.hdr_ext_len(), h.header_len()), (0, 8));
        assert_eq!(h.data(), &[0x05, 0x02, 0x00, 0x00, 0x01, 0x00], "router alert (MLD), PadN");
        assert_eq!(h.payload(), &FIRST_FRAGMENT[ROUTING.start..]);
    }

    #[test]
    fn parses_captured_routing_header() {
        let h = Header::new_checked(&FIRST_FRAGMENT[ROUTING.start..]).unwrap();
        assert_eq!(h.next_header(), protocol::IPV6_FRAG);
        assert_eq!((h.hdr_ext_len(), h.header_len()), (2, 24));
        // Routing type 4 (segment routing), segments left 0, then the segment ::1.
        assert_eq!(&h.data()[..2], &[4, 0]);
        assert_eq!(h.data()[6..], core::net::Ipv6Addr::LOCALHOST.octets());
        assert_eq!(h.payload(), &FIRST_FRAGMENT[FRAG.start..]);
    }

    #[test]
    fn parses_captured_fragment_headers() {
        let f = FragmentHeader::new_checked(&FIRST_FRAGMENT[FRAG.start..]).unwrap();
        assert_eq!(f.next_header(), protocol::IPV6_OPTS);
        assert_eq!((f.frag_offset(), f.more_frags(), f.ident()), (0, true, 0x80cc_9c1f));
        assert_eq!(f.payload(), &FIRST_FRAGMENT[DSTOPTS.start..]);
        let f = FragmentHeader::new_checked(&LAST_FRAGMENT[FRAG.start..]).unwrap();
        assert_eq!(f.next_header(), protocol::IPV6_OPTS, "the first fragment's value");
        assert_eq!((f.frag_offset(), f.more_frags(), f.ident()), (1200, false, 0x80cc_9c1f));
        assert_eq!(f.payload(), &LAST_FRAGMENT[80..]);
    }

    #[test]
    fn parses_captured_destination_options_header() {
        let h = Header::new_checked(&FIRST_FRAGMENT[DSTOPTS.start..]).unwrap();
        assert_eq!(h.next_header(), protocol::UDP);
        assert_eq!(h.header_len(), 8);
        assert_eq!(h.data(), &[0x1e, 0x04, 0xde, 0xad, 0xbe, 0xef]);
        // The UDP header: source port 48814, destination port 4000.
        assert_eq!(&h.payload()[..4], &[0xbe, 0xae, 0x0f, 0xa0]);
    }

    #[test]
    fn setters_rebuild_captured_headers() {
        let mut out = [0xffu8; 88];
        out[..40].copy_from_slice(&FIRST_FRAGMENT[..40]);
        let mut h = Header::new_unchecked(&mut out[HBH]);
        h.set_next_header(protocol::IPV6_ROUTE);
        h.set_hdr_ext_len(0);
        h.data_mut().copy_from_slice(&[0x05, 0x02, 0x00, 0x00, 0x01, 0x00]);
        let mut h = Header::new_unchecked(&mut out[ROUTING]);
        h.set_next_header(protocol::IPV6_FRAG);
        h.set_hdr_ext_len(2);
        h.data_mut().fill(0);
        h.data_mut()[0] = 4;
        h.data_mut()[6..].copy_from_slice(&core::net::Ipv6Addr::LOCALHOST.octets());
        let mut f = FragmentHeader::new_unchecked(&mut out[FRAG]);
        f.set_next_header(protocol::IPV6_OPTS);
        f.set_ident(0x80cc_9c1f);
        f.buffer[1] = 0;
        f.set_frag_offset(1200);
        f.set_more_frags(true);
        f.set_more_frags(false);
        f.buffer[3] &= 0xf9; // the two reserved bits
        let mut h = Header::new_unchecked(&mut out[DSTOPTS]);
        h.set_next_header(protocol::UDP);
        h.set_hdr_ext_len(0);
        h.data_mut().copy_from_slice(&[0x1e, 0x04, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&out[40..80], &LAST_FRAGMENT[40..80]);
        let mut f = FragmentHeader::new_unchecked(&mut out[FRAG]);
        f.set_frag_offset(0);
        f.set_more_frags(true);
        assert_eq!(&out[..], &FIRST_FRAGMENT[..88]);
    }

    #[test]
    fn authentication_header_length_counts_4_octet_units() {
        // RFC 4302 with a 96-bit ICV: payload length 4, 24 bytes.
        let mut ah = [0u8; 28];
        ah[..8].copy_from_slice(&[protocol::TCP, 4, 0, 0, 0x00, 0x00, 0x01, 0x00]);
        let a = AuthHeader::new_checked(&ah[..]).unwrap();
        assert_eq!((a.next_header(), a.header_len(), a.spi()), (protocol::TCP, 24, 0x100));
        assert_eq!(a.payload().len(), 4);
        assert_eq!(AuthHeader::new_checked(&ah[..23]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn short_headers_are_truncated_and_nothing_panics_after_new_checked() {
        let chain = &FIRST_FRAGMENT[40..88];
        for start in 0..chain.len() {
            for end in start..=chain.len() {
                let b = &chain[start..end];
                if let Ok(h) = Header::new_checked(b) {
                    assert!(h.header_len() <= b.len());
                    let _ = (h.next_header(), h.data().len(), h.payload().len());
                } else {
                    assert!(b.len() < 8 || b.len() < (usize::from(b[1]) + 1) * 8);
                }
                if let Ok(f) = FragmentHeader::new_checked(b) {
                    let _ = (f.next_header(), f.frag_offset(), f.more_frags(), f.ident(), f.payload());
                } else {
                    assert!(b.len() < 8);
                }
                if let Ok(a) = AuthHeader::new_checked(b) {
                    let _ = (a.next_header(), a.spi(), a.payload().len());
                }
            }
        }
        let mut long = FIRST_FRAGMENT[ROUTING].to_vec();
        long[1] = 3;
        assert_eq!(Header::new_checked(&long[..]).unwrap_err(), Error::Truncated);
    }
}
