//! The memif shared-memory layout: ring headers, descriptors and where a client puts
//! them (DPDK `memif.h`, `memif_ring_t` and `memif_desc_t`).
//!
//! ```text
//! ring (in a region, at the offset ADD_RING gives):
//!   0: cookie u32 (0x03e31f20)  4: flags u16 (bit 0: interrupts masked)  6: head u16
//!  64: tail u16                     (its own cache line: the other end writes it)
//! 128: descriptors, 16 bytes each, 2^log2_ring_size of them
//! descriptor:
//!   0: flags u16 (bit 0: NEXT, the frame goes on in the next descriptor)
//!   2: region u16   4: length u32   8: offset u32 (in the region)   12: metadata u32
//! ```
//!
//! `head` and `tail` are free-running `u16` counters, the slot being `counter & mask`.
//! Client-to-server ring: the client produces at `head`, the server consumes and writes
//! `tail`. Server-to-client ring: the client hands empty buffers to the server by
//! advancing `head`; the server fills them and advances `tail`.
//!
//! Pure and panic-free: the shared memory itself is read and written in `super::shm`;
//! here are the offsets, the descriptor encoding and the checks of what the peer wrote.

/// The ring header's cookie (`MEMIF_COOKIE`).
pub const COOKIE: u32 = 0x03e3_1f20;
/// Ring flag: the consumer polls and wants no interrupt (`MEMIF_RING_FLAG_MASK_INT`).
pub const RING_FLAG_MASK_INT: u16 = 1;
/// Descriptor flag: the frame continues in the next descriptor (`MEMIF_DESC_FLAG_NEXT`).
pub const DESC_FLAG_NEXT: u16 = 1;
/// Bytes of the ring header before the descriptors (two cache lines).
pub const RING_HEADER_LEN: usize = 128;
/// Bytes of one descriptor.
pub const DESCRIPTOR_LEN: usize = 16;
/// Largest ring vmpls accepts or makes: 2^14 descriptors (DPDK's limit too).
pub const MAX_LOG2_RING_SIZE: u8 = 14;

/// Offsets of the ring header's fields.
pub mod field {
    /// `cookie`, u32.
    pub const COOKIE: usize = 0;
    /// `flags`, u16.
    pub const FLAGS: usize = 4;
    /// `head`, u16.
    pub const HEAD: usize = 6;
    /// `tail`, u16, on the second cache line.
    pub const TAIL: usize = 64;
}

/// Bytes of a ring of 2^`log2_size` descriptors, header included.
pub const fn ring_len(log2_size: u8) -> usize {
    RING_HEADER_LEN + (DESCRIPTOR_LEN << log2_size)
}

/// Offset of descriptor `slot` from the ring header.
pub const fn descriptor_offset(slot: u16) -> usize {
    RING_HEADER_LEN + slot as usize * DESCRIPTOR_LEN
}

/// One descriptor, decoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// [`DESC_FLAG_NEXT`] or 0.
    pub flags: u16,
    /// Region of the buffer.
    pub region: u16,
    /// Bytes of frame in the buffer (or, handed out empty, the buffer's size).
    pub length: u32,
    /// Offset of the buffer in its region.
    pub offset: u32,
    /// Free for the application; vmpls writes 0 and ignores it (DPDK does the same).
    pub metadata: u32,
}

impl Descriptor {
    /// Decodes the 16 bytes of a descriptor.
    pub fn parse(b: &[u8; DESCRIPTOR_LEN]) -> Descriptor {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Descriptor {
            flags: u16_at(0),
            region: u16_at(2),
            length: u32_at(4),
            offset: u32_at(8),
            metadata: u32_at(12),
        }
    }

    /// Encodes it.
    pub fn emit(&self) -> [u8; DESCRIPTOR_LEN] {
        let mut b = [0; DESCRIPTOR_LEN];
        b[0..2].copy_from_slice(&self.flags.to_le_bytes());
        b[2..4].copy_from_slice(&self.region.to_le_bytes());
        b[4..8].copy_from_slice(&self.length.to_le_bytes());
        b[8..12].copy_from_slice(&self.offset.to_le_bytes());
        b[12..16].copy_from_slice(&self.metadata.to_le_bytes());
        b
    }

    /// True when the frame goes on in the next descriptor.
    pub fn has_next(&self) -> bool {
        self.flags & DESC_FLAG_NEXT != 0
    }

    /// The buffer's bytes `offset..offset + len` in its region, if the region exists
    /// (`region_lens[region]`) and holds them: what the peer wrote is checked before any
    /// byte is read or written.
    pub fn buffer(&self, len: u32, region_lens: &[usize]) -> Result<std::ops::Range<usize>, RingError> {
        let region_len =
            *region_lens.get(usize::from(self.region)).ok_or(RingError::NoSuchRegion(self.region))?;
        let start = self.offset as usize;
        let end = start
            .checked_add(len as usize)
            .filter(|&e| e <= region_len)
            .ok_or(RingError::OutsideRegion { region: self.region, offset: self.offset, length: len })?;
        Ok(start..end)
    }
}

/// What the peer wrote into a ring that cannot be right.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The ring says more descriptors are ready than it has.
    #[error("the peer's ring index claims {pending} descriptors ready in a ring of {size}")]
    IndexOutOfRange {
        /// Descriptors claimed.
        pending: u16,
        /// The ring's size.
        size: u16,
    },
    /// A descriptor names a region that was never added.
    #[error("a descriptor names region {0}, which the peer never added")]
    NoSuchRegion(u16),
    /// A descriptor's buffer does not lie inside its region.
    #[error("a descriptor's buffer ({length} bytes at {offset} in region {region}) lies outside the region")]
    OutsideRegion {
        /// The region.
        region: u16,
        /// The buffer's offset.
        offset: u32,
        /// Its length.
        length: u32,
    },
}

/// Descriptors between a consumer at `from` and a producer at `to` (free-running
/// counters), checked against the ring's `size`: a peer's index that runs ahead by more
/// than the ring holds is an error, not a reason to read stale or foreign slots.
pub fn ready(from: u16, to: u16, size: u16) -> Result<u16, RingError> {
    let pending = to.wrapping_sub(from);
    if pending > size {
        return Err(RingError::IndexOutOfRange { pending, size });
    }
    Ok(pending)
}

/// Where a client puts its rings and buffers in the one region it creates (region 0),
/// as DPDK's client does without zero-copy: the client-to-server rings, then the
/// server-to-client rings, then one buffer per descriptor of every ring, in the same
/// order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLayout {
    /// log2 of each ring's number of descriptors.
    pub log2_ring_size: u8,
    /// Bytes of each buffer.
    pub buffer_size: u32,
    /// Rings in each direction.
    pub rings_per_direction: u16,
}

impl ClientLayout {
    /// Descriptors of one ring.
    pub fn ring_size(&self) -> u16 {
        1 << self.log2_ring_size
    }

    fn ring_number(&self, c2s: bool, index: u16) -> usize {
        usize::from(index) + if c2s { 0 } else { usize::from(self.rings_per_direction) }
    }

    /// Offset of a ring's header in the region.
    pub fn ring_offset(&self, c2s: bool, index: u16) -> usize {
        self.ring_number(c2s, index) * ring_len(self.log2_ring_size)
    }

    /// Offset of the buffer of descriptor `slot` of a ring.
    pub fn buffer_offset(&self, c2s: bool, index: u16, slot: u16) -> usize {
        let rings = 2 * usize::from(self.rings_per_direction) * ring_len(self.log2_ring_size);
        let n = self.ring_number(c2s, index) * usize::from(self.ring_size()) + usize::from(slot);
        rings + n * self.buffer_size as usize
    }

    /// Size of the whole region.
    pub fn region_len(&self) -> usize {
        self.buffer_offset(true, 2 * self.rings_per_direction, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memif::hex;

    // The region DPDK 22.11.11's testpmd (`role=client`, defaults) created, as it was when
    // it sent CONNECT: the server-to-client ring's header (cookie, flags = interrupts
    // masked since testpmd polls, head = 1024: every buffer handed out), and the first
    // two descriptors of each ring.
    const S2C_HEADER: &str = "201fe303 0100 0004";
    const C2S_DESC0: &str = "0000 0000 00080000 00810000 00000000";
    const C2S_DESC1: &str = "0000 0000 00080000 00890000 00000000";
    const S2C_DESC0: &str = "0000 0000 00080000 00812000 00000000";

    #[test]
    fn dpdk_ring_header_fields_sit_where_we_read_them() {
        let b = hex(S2C_HEADER);
        assert_eq!(u32::from_le_bytes(b[field::COOKIE..field::COOKIE + 4].try_into().unwrap()), COOKIE);
        assert_eq!(u16::from_le_bytes([b[field::FLAGS], b[field::FLAGS + 1]]), RING_FLAG_MASK_INT);
        assert_eq!(u16::from_le_bytes([b[field::HEAD], b[field::HEAD + 1]]), 1024);
    }

    #[test]
    fn dpdk_descriptors_decode_and_encode_back() {
        let layout = ClientLayout { log2_ring_size: 10, buffer_size: 2048, rings_per_direction: 1 };
        for (capture, c2s, slot) in [(C2S_DESC0, true, 0), (C2S_DESC1, true, 1), (S2C_DESC0, false, 0)] {
            let b: [u8; DESCRIPTOR_LEN] = hex(capture).try_into().unwrap();
            let d = Descriptor::parse(&b);
            assert_eq!(d.emit(), b);
            assert_eq!((d.flags, d.region, d.length, d.metadata), (0, 0, 2048, 0));
            // Our client layout puts every buffer where DPDK's does.
            assert_eq!(d.offset as usize, layout.buffer_offset(c2s, 0, slot), "{capture}");
        }
    }

    #[test]
    fn client_layout_matches_the_region_dpdk_announced() {
        let layout = ClientLayout { log2_ring_size: 10, buffer_size: 2048, rings_per_direction: 1 };
        assert_eq!(ring_len(10), 16512);
        assert_eq!(layout.ring_offset(true, 0), 0);
        assert_eq!(layout.ring_offset(false, 0), 16512);
        assert_eq!(layout.region_len(), 0x0040_8100);
    }

    #[test]
    fn ring_indices_wrap_and_a_runaway_peer_is_an_error() {
        assert_eq!(ready(10, 10, 1024), Ok(0));
        assert_eq!(ready(65530, 4, 1024), Ok(10));
        assert_eq!(ready(0, 1024, 1024), Ok(1024));
        assert_eq!(ready(0, 1025, 1024), Err(RingError::IndexOutOfRange { pending: 1025, size: 1024 }));
        // A tail "behind" the consumer wraps to a huge count: refused too.
        assert!(ready(5, 4, 1024).is_err());
    }

    #[test]
    fn a_descriptor_outside_its_region_is_refused() {
        let d = Descriptor { region: 0, offset: 4000, length: 200, ..Descriptor::default() };
        assert_eq!(d.buffer(96, &[4096]), Ok(4000..4096));
        assert!(matches!(d.buffer(97, &[4096]), Err(RingError::OutsideRegion { .. })));
        assert_eq!(d.buffer(1, &[]), Err(RingError::NoSuchRegion(0)));
        let far = Descriptor { offset: u32::MAX, ..d };
        assert!(far.buffer(u32::MAX, &[1 << 20]).is_err());
    }
}
