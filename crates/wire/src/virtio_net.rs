//! The 10-byte virtio-net header (`struct virtio_net_hdr`, virtio 1.x section 5.1.6),
//! little-endian, as `PACKET_VNET_HDR`, TAP with `IFF_VNET_HDR` and vhost-user carry it.
//!
//! ```text
//!  0        1          2            4            6              8               10
//! +--------+----------+------------+------------+--------------+---------------+
//! | flags  | gso_type | hdr_len    | gso_size   | csum_start   | csum_offset   |
//! +--------+----------+------------+------------+--------------+---------------+
//! ```
//!
//! vmpls keeps this metadata with every frame ([`Repr`]): offsets are relative to the
//! start of the Ethernet frame, so pushing N labels adds 4N to `csum_start` and `hdr_len`.

use crate::{Error, Field, Result};

mod field {
    use crate::Field;
    pub const FLAGS: usize = 0;
    pub const GSO_TYPE: usize = 1;
    pub const HDR_LEN: Field = 2..4;
    pub const GSO_SIZE: Field = 4..6;
    pub const CSUM_START: Field = 6..8;
    pub const CSUM_OFFSET: Field = 8..10;
}

/// Length of the header without `num_buffers`.
pub const HEADER_LEN: usize = 10;
/// Length of the header with `num_buffers` (`VIRTIO_NET_F_MRG_RXBUF` or `VERSION_1`).
pub const HEADER_LEN_MRG: usize = 12;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum at `csum_start + csum_offset` holds only the
/// pseudo-header sum; whoever transmits must complete it.
pub const FLAG_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the checksum was already verified.
pub const FLAG_DATA_VALID: u8 = 2;

/// `gso_type` values (without the ECN bit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GsoType {
    /// Not a super-frame.
    #[default]
    None,
    /// TCP over IPv4 (`VIRTIO_NET_HDR_GSO_TCPV4`).
    TcpV4,
    /// UDP fragmentation offload (`VIRTIO_NET_HDR_GSO_UDP`), legacy.
    Udp,
    /// TCP over IPv6 (`VIRTIO_NET_HDR_GSO_TCPV6`).
    TcpV6,
    /// UDP segmentation (`VIRTIO_NET_HDR_GSO_UDP_L4`).
    UdpL4,
}

const GSO_ECN: u8 = 0x80;

impl GsoType {
    fn from_raw(raw: u8) -> Option<GsoType> {
        Some(match raw & !GSO_ECN {
            0 => GsoType::None,
            1 => GsoType::TcpV4,
            3 => GsoType::Udp,
            4 => GsoType::TcpV6,
            5 => GsoType::UdpL4,
            _ => return None,
        })
    }

    fn to_raw(self) -> u8 {
        match self {
            GsoType::None => 0,
            GsoType::TcpV4 => 1,
            GsoType::Udp => 3,
            GsoType::TcpV6 => 4,
            GsoType::UdpL4 => 5,
        }
    }
}

/// A view over a virtio-net header.
#[derive(Debug)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Header<T> {
        Header { buffer }
    }

    /// Wraps a buffer of at least [`HEADER_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<Header<T>> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Header { buffer })
    }

    fn u16_at(&self, f: Field) -> u16 {
        let b = &self.buffer.as_ref()[f];
        u16::from_le_bytes([b[0], b[1]])
    }

    /// The flags byte.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// The raw `gso_type` byte, ECN bit included.
    pub fn gso_type_raw(&self) -> u8 {
        self.buffer.as_ref()[field::GSO_TYPE]
    }
    /// Length of the headers to copy onto every segment.
    pub fn hdr_len(&self) -> u16 {
        self.u16_at(field::HDR_LEN)
    }
    /// Payload bytes per segment.
    pub fn gso_size(&self) -> u16 {
        self.u16_at(field::GSO_SIZE)
    }
    /// Where checksumming starts, from the start of the frame.
    pub fn csum_start(&self) -> u16 {
        self.u16_at(field::CSUM_START)
    }
    /// Where the checksum goes, from `csum_start`.
    pub fn csum_offset(&self) -> u16 {
        self.u16_at(field::CSUM_OFFSET)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    fn set_u16_at(&mut self, f: Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_le_bytes());
    }
    /// Sets the flags byte.
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    /// Sets the raw `gso_type` byte.
    pub fn set_gso_type_raw(&mut self, v: u8) {
        self.buffer.as_mut()[field::GSO_TYPE] = v;
    }
    /// Sets `hdr_len`.
    pub fn set_hdr_len(&mut self, v: u16) {
        self.set_u16_at(field::HDR_LEN, v)
    }
    /// Sets `gso_size`.
    pub fn set_gso_size(&mut self, v: u16) {
        self.set_u16_at(field::GSO_SIZE, v)
    }
    /// Sets `csum_start`.
    pub fn set_csum_start(&mut self, v: u16) {
        self.set_u16_at(field::CSUM_START, v)
    }
    /// Sets `csum_offset`.
    pub fn set_csum_offset(&mut self, v: u16) {
        self.set_u16_at(field::CSUM_OFFSET, v)
    }
}

/// The offload metadata of one frame, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// The transport checksum is partial and must be completed at `csum_start + csum_offset`.
    pub needs_csum: bool,
    /// The checksum was verified by whoever handed us the frame.
    pub data_valid: bool,
    /// Which segmentation the frame asks for.
    pub gso_type: GsoType,
    /// The sender set ECN/CWR on the first segment (`VIRTIO_NET_HDR_GSO_ECN`).
    pub gso_ecn: bool,
    /// Length of all headers up to the transport payload.
    pub hdr_len: u16,
    /// Transport payload per segment.
    pub gso_size: u16,
    /// Offset of the transport header, from the start of the frame.
    pub csum_start: u16,
    /// Offset of the checksum field inside the transport header.
    pub csum_offset: u16,
}

impl Repr {
    /// Decodes a header; an unknown `gso_type` is an error, since the frame cannot be
    /// segmented correctly.
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(header: &Header<T>) -> Result<Repr> {
        let raw = header.gso_type_raw();
        let gso_type = GsoType::from_raw(raw).ok_or(Error::Malformed)?;
        Ok(Repr {
            needs_csum: header.flags() & FLAG_NEEDS_CSUM != 0,
            data_valid: header.flags() & FLAG_DATA_VALID != 0,
            gso_type,
            gso_ecn: raw & GSO_ECN != 0,
            hdr_len: header.hdr_len(),
            gso_size: header.gso_size(),
            csum_start: header.csum_start(),
            csum_offset: header.csum_offset(),
        })
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `header`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, header: &mut Header<T>) {
        let mut flags = 0;
        if self.needs_csum {
            flags |= FLAG_NEEDS_CSUM;
        }
        if self.data_valid {
            flags |= FLAG_DATA_VALID;
        }
        header.set_flags(flags);
        let ecn = if self.gso_ecn { GSO_ECN } else { 0 };
        header.set_gso_type_raw(self.gso_type.to_raw() | ecn);
        header.set_hdr_len(self.hdr_len);
        header.set_gso_size(self.gso_size);
        header.set_csum_start(self.csum_start);
        header.set_csum_offset(self.csum_offset);
    }

    /// True for a super-frame that must be segmented before a port without GSO sends it.
    pub fn is_gso(&self) -> bool {
        self.gso_type != GsoType::None
    }

    /// Moves the offsets by `delta` bytes, for labels pushed (positive) or popped
    /// (negative) in front of the network header. Offsets never go below zero.
    ///
    /// Inlined to the test of whether there is an offset: most frames have none.
    #[inline]
    pub fn shift(&mut self, delta: isize) {
        if self.needs_csum || self.hdr_len != 0 {
            self.shift_offsets(delta);
        }
    }

    #[inline(never)]
    fn shift_offsets(&mut self, delta: isize) {
        let mv = |v: u16| (v as isize + delta).clamp(0, u16::MAX as isize) as u16;
        if self.needs_csum {
            self.csum_start = mv(self.csum_start);
        }
        if self.hdr_len != 0 {
            self.hdr_len = mv(self.hdr_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Read by a PACKET_VNET_HDR socket on a veth from a kernel TCP sender with TSO on
    // (research/kernel-io.md): NEEDS_CSUM, TCPV4, hdr_len 66, gso_size 1448,
    // csum_start 34, csum_offset 16.
    static TSO_HEADER: [u8; 10] = [0x01, 0x01, 0x42, 0x00, 0xa8, 0x05, 0x22, 0x00, 0x10, 0x00];

    #[test]
    fn parses_kernel_tso_header() {
        let repr = Repr::parse(&Header::new_checked(&TSO_HEADER[..]).unwrap()).unwrap();
        assert_eq!(
            repr,
            Repr {
                needs_csum: true,
                data_valid: false,
                gso_type: GsoType::TcpV4,
                gso_ecn: false,
                hdr_len: 66,
                gso_size: 1448,
                csum_start: 34,
                csum_offset: 16,
            }
        );
    }

    #[test]
    fn emits_what_it_parses() {
        let repr = Repr::parse(&Header::new_checked(&TSO_HEADER[..]).unwrap()).unwrap();
        let mut out = [0u8; 10];
        repr.emit(&mut Header::new_unchecked(&mut out[..]));
        assert_eq!(out, TSO_HEADER);
    }

    #[test]
    fn ecn_bit_round_trips() {
        let mut bytes = TSO_HEADER;
        bytes[1] = 0x84;
        let repr = Repr::parse(&Header::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(repr.gso_type, GsoType::TcpV6);
        assert!(repr.gso_ecn);
        let mut out = [0u8; 10];
        repr.emit(&mut Header::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }

    #[test]
    fn rejects_short_and_unknown() {
        assert_eq!(Header::new_checked(&TSO_HEADER[..9]).unwrap_err(), Error::Truncated);
        let mut bytes = TSO_HEADER;
        bytes[1] = 2;
        assert_eq!(Repr::parse(&Header::new_checked(&bytes[..]).unwrap()).unwrap_err(), Error::Malformed);
    }

    #[test]
    fn shift_follows_pushed_labels() {
        let mut repr = Repr::parse(&Header::new_checked(&TSO_HEADER[..]).unwrap()).unwrap();
        repr.shift(8);
        assert_eq!((repr.csum_start, repr.hdr_len), (42, 74));
        repr.shift(-8);
        assert_eq!((repr.csum_start, repr.hdr_len), (34, 66));
    }
}
