//! Frames in and out of a guest's virtqueues, one descriptor chain at a time.
//!
//! The guest is untrusted. Every guest address goes through `vm-memory` (`get_slice` for a
//! buffer inside one region, `read_slice`/`write_slice` across regions: each checks the
//! whole access against the guest's memory regions), and the chain walk is
//! [`SplitRing`]'s, `virtio-queue`'s walk over slices taken once per batch (bounded by the
//! table's size, indirect tables included), so a chain can at worst be refused: never a
//! read or write outside the guest's memory, never a panic. The unit tests drive these
//! functions with `virtio-queue`'s `MockSplitQueue` over a `GuestMemoryMmap` built in the
//! test.
//!
//! Used-ring entries are collected by the caller and published with
//! [`SplitRing::publish_used`]: all elements first, then one store of the used index. With
//! mergeable receive buffers a frame spans several chains, and the guest (Linux
//! `receive_mergeable`) reads `num_buffers` from the first and then expects the rest to be
//! used already; publishing the index once after all of them (as QEMU's `virtqueue_flush`
//! does) avoids that race. `virtio-queue`'s `add_used` publishes each element on its own.

use virtio_queue::desc::split::Descriptor;
use vm_memory::{
    Address, Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryError, GuestMemoryMmap, VolatileSlice,
};
use vmpls_dataplane::gso::{self, OffloadRefused};
use vmpls_wire::{ethernet, virtio_net};

use super::ring::SplitRing;

/// Why a chain from the guest's transmit queue was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxChainError {
    /// Fewer bytes than the virtio-net header and an Ethernet header.
    TooShort,
    /// More bytes than the largest frame a [`vmpls_dataplane::Packet`] holds.
    TooLong,
    /// A device-writable descriptor in a chain the device should only read.
    WriteOnly,
    /// A buffer that is not (wholly) inside the guest's memory.
    BadAddress,
    /// A virtio-net header we cannot decode (unknown `gso_type`), or offsets outside the
    /// frame.
    BadHeader,
    /// A super-frame asking for segments smaller than [`gso::MIN_GSO_SIZE`]: no real
    /// stack sends it, and cutting it would stall the router.
    GsoSizeTooSmall,
}

/// Reads one transmit chain into `area`, whole: the first `hdr_len` bytes are the
/// virtio-net header (10, or 12 with `num_buffers`, which is ignored on transmit), the
/// rest the frame, which lands at `area[hdr_len..]` (a packet's receive area with the
/// header in its headroom: [`vmpls_dataplane::PacketBuffer::receive_area_after`]). Returns
/// the decoded offload metadata and the frame length: [`copy_tx_chain`], then
/// [`tx_offload`].
#[inline(always)]
pub(crate) fn read_tx_chain<I>(
    mem: &GuestMemoryMmap,
    chain: I,
    hdr_len: usize,
    area: &mut [u8],
) -> Result<(virtio_net::Repr, usize), TxChainError>
where
    I: IntoIterator<Item = Descriptor>,
{
    let len = copy_tx_chain(mem, chain, hdr_len, area)?;
    Ok((tx_offload(&area[..hdr_len.min(virtio_net::HEADER_LEN_MRG)], len)?, len))
}

/// The copy of [`read_tx_chain`]: the chain into `area`, one copy a descriptor, header
/// and frame together; returns the frame's length (at least an Ethernet header). The
/// header is decoded apart ([`tx_offload`]): the port decodes a batch's headers after
/// all its copies, since a header read right after its copy waits for the copy's stores
/// to reach the cache (two fifths of the decoding's samples in `bench vhost-user`).
#[inline(always)]
pub(crate) fn copy_tx_chain<I>(
    mem: &GuestMemoryMmap,
    chain: I,
    hdr_len: usize,
    area: &mut [u8],
) -> Result<usize, TxChainError>
where
    I: IntoIterator<Item = Descriptor>,
{
    let hdr_len = hdr_len.min(virtio_net::HEADER_LEN_MRG);
    let mut total = 0usize;
    for desc in chain {
        if desc.is_write_only() {
            return Err(TxChainError::WriteOnly);
        }
        let len = desc.len() as usize;
        let Some(to) = area.get_mut(total..).and_then(|rest| rest.get_mut(..len)) else {
            return Err(TxChainError::TooLong);
        };
        if len == 0 {
            continue;
        }
        GuestBuffer::new(mem, desc.addr(), len).read(to, 0).map_err(|_| TxChainError::BadAddress)?;
        total += len;
    }
    if total < hdr_len + ethernet::HEADER_LEN {
        return Err(TxChainError::TooShort);
    }
    Ok(total - hdr_len)
}

/// The offload metadata of a `frame_len`-byte frame the guest sent, from its virtio-net
/// `header`: the second half of [`read_tx_chain`].
#[inline(always)]
pub(crate) fn tx_offload(header: &[u8], frame_len: usize) -> Result<virtio_net::Repr, TxChainError> {
    gso::received_offload(header, frame_len).map_err(|e| match e {
        OffloadRefused::BadHeader => TxChainError::BadHeader,
        OffloadRefused::GsoSizeTooSmall => TxChainError::GsoSizeTooSmall,
    })
}

/// One descriptor's buffer in guest memory: its slice of the one region that holds it, as
/// nearly every buffer lies, looked up once for all the buffer's pieces; else its
/// address, for `read_slice`/`write_slice`, which walk the regions piece by piece. Either
/// way every access is checked against the guest's memory. The walk cost a 64-byte frame
/// a sixth of the router's time in the profile of `bench vhost-user`, and a lookup for
/// each piece (header, frame) most of a tenth later.
struct GuestBuffer<'m> {
    /// The buffer's slice of one region, or why it has none (it spans regions, or lies
    /// outside the memory). Kept where `get_slice` returned it: moved into a shape of our
    /// own, its fields were read back wider than they had been written, a load that waits
    /// for the stores to reach the cache (a third of `read_tx_chain`'s samples).
    slice: Result<VolatileSlice<'m>, GuestMemoryError>,
    mem: &'m GuestMemoryMmap,
    addr: GuestAddress,
    len: usize,
}

impl<'m> GuestBuffer<'m> {
    #[inline(always)]
    fn new(mem: &'m GuestMemoryMmap, addr: GuestAddress, len: usize) -> Self {
        GuestBuffer { slice: mem.get_slice(addr, len), mem, addr, len }
    }

    /// Reads `buf.len()` bytes from `offset` into the buffer.
    #[inline(always)]
    fn read(&self, buf: &mut [u8], offset: usize) -> Result<(), ()> {
        if buf.is_empty() {
            return Ok(());
        }
        match &self.slice {
            Ok(slice) => slice.read_slice(buf, offset).map_err(|_| ()),
            Err(_) => {
                let at = spanning_at(self.addr, self.len, offset, buf.len())?;
                self.mem.read_slice(buf, at).map_err(|_| ())
            }
        }
    }

    /// Writes `buf` at `offset` into the buffer (the region's dirty bitmap marked).
    #[inline(always)]
    fn write(&self, buf: &[u8], offset: usize) -> Result<(), ()> {
        if buf.is_empty() {
            return Ok(());
        }
        match &self.slice {
            Ok(slice) => slice.write_slice(buf, offset).map_err(|_| ()),
            Err(_) => {
                let at = spanning_at(self.addr, self.len, offset, buf.len())?;
                self.mem.write_slice(buf, at).map_err(|_| ())
            }
        }
    }
}

/// The guest address of `count` bytes at `offset` in a buffer of `len` bytes at `addr`,
/// if they lie inside it.
fn spanning_at(addr: GuestAddress, len: usize, offset: usize, count: usize) -> Result<GuestAddress, ()> {
    if offset.checked_add(count).is_none_or(|end| end > len) {
        return Err(());
    }
    addr.checked_add(offset as u64).ok_or(())
}

/// Why a frame could not be written to the guest's receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RxError {
    /// The guest has not posted enough receive buffers (nothing was consumed).
    NoBuffers,
    /// Without mergeable buffers the frame must fit one chain, and the next one is smaller
    /// (nothing was consumed).
    TooBig,
    /// A chain with a device-readable descriptor, no room at all, or a buffer outside guest
    /// memory. It and the chains this frame had filled are returned to the guest as used
    /// with length 0 (a driver drops those as short packets); the frame is lost.
    BadChain,
}

/// Writes `hdr[..hdr_len]` followed by `frame` into the guest's receive queue, appending
/// the used-ring entries to `used` (publish them with [`SplitRing::publish_used`]). With `mergeable`
/// the frame may span several chains and `num_buffers` (bytes 10..12 of a 12-byte header)
/// is set to their number; without it the frame must fit one chain. On `NoBuffers` and
/// `TooBig` the queue position is restored, so the buffers wait for the next frame.
pub(crate) fn write_rx_frame(
    ring: &mut SplitRing<'_, '_>,
    hdr: &[u8; virtio_net::HEADER_LEN_MRG],
    hdr_len: usize,
    frame: &[u8],
    mergeable: bool,
    used: &mut Vec<(u16, u32)>,
) -> Result<u16, RxError> {
    write_rx_parts(ring, hdr, hdr_len, [frame, &[]], mergeable, used)
}

/// [`write_rx_frame`] for a frame in two pieces, written one after the other: a segment
/// of a super-frame as its own headers and a slice of the super-frame's payload, copied
/// once, straight into the guest's buffers.
pub(crate) fn write_rx_parts(
    ring: &mut SplitRing<'_, '_>,
    hdr: &[u8; virtio_net::HEADER_LEN_MRG],
    hdr_len: usize,
    frame: [&[u8]; 2],
    mergeable: bool,
    used: &mut Vec<(u16, u32)>,
) -> Result<u16, RxError> {
    let hdr_len = hdr_len.min(hdr.len());
    let src = Source { hdr: &hdr[..hdr_len], frame };
    let total = hdr_len + frame[0].len() + frame[1].len();
    let mem = ring.memory();
    let start_avail = ring.next_avail();
    let used_start = used.len();
    let mut written = 0usize;
    let mut buffers: u16 = 0;
    let mut num_buffers_at: [Option<GuestAddress>; 2] = [None, None];
    let rollback = |ring: &mut SplitRing<'_, '_>, used: &mut Vec<(u16, u32)>| {
        ring.rewind(start_avail);
        used.truncate(used_start);
    };
    while written < total {
        if buffers == 1 && !mergeable {
            rollback(ring, used);
            return Err(RxError::TooBig);
        }
        let Some(chain) = ring.pop() else {
            rollback(ring, used);
            return Err(RxError::NoBuffers);
        };
        let head = chain.head_index();
        let mut chain_len = 0usize;
        let mut bad = false;
        for desc in chain {
            if !desc.is_write_only() {
                bad = true;
                break;
            }
            if written == total {
                break;
            }
            let n = (desc.len() as usize).min(total - written);
            let buffer = GuestBuffer::new(mem, desc.addr(), n);
            if src.copy_out(&buffer, desc.addr(), written, n, &mut num_buffers_at).is_err() {
                bad = true;
                break;
            }
            written += n;
            chain_len += n;
        }
        if bad || chain_len == 0 {
            for entry in &mut used[used_start..] {
                entry.1 = 0;
            }
            used.push((head, 0));
            return Err(RxError::BadChain);
        }
        // chain_len <= total < 2^32: the frame is at most a Packet buffer.
        used.push((head, chain_len as u32));
        buffers = buffers.saturating_add(1);
    }
    if hdr_len == virtio_net::HEADER_LEN_MRG {
        let bytes = buffers.to_le_bytes();
        // Recorded while writing the header, so inside guest memory; one write when the
        // two bytes are next to each other, as they are unless a buffer ends between them.
        let written = match num_buffers_at {
            [Some(a), Some(b)] if a.checked_add(1) == Some(b) => GuestBuffer::new(mem, a, 2).write(&bytes, 0),
            at => at
                .iter()
                .zip(bytes)
                .filter_map(|(a, byte)| a.map(|a| GuestBuffer::new(mem, a, 1).write(&[byte], 0)))
                .collect(),
        };
        if written.is_err() {
            for entry in &mut used[used_start..] {
                entry.1 = 0;
            }
            return Err(RxError::BadChain);
        }
    }
    Ok(buffers)
}

/// The bytes of one received frame as the guest sees them: header, then the frame's two
/// pieces.
struct Source<'a> {
    hdr: &'a [u8],
    frame: [&'a [u8]; 2],
}

/// Offset of `num_buffers` in the 12-byte header.
const NUM_BUFFERS: usize = virtio_net::HEADER_LEN;

impl Source<'_> {
    /// Copies bytes `from..from + n` into `buffer` (a descriptor's, at guest address
    /// `addr`), noting where the two bytes of `num_buffers` land.
    fn copy_out(
        &self,
        buffer: &GuestBuffer<'_>,
        addr: GuestAddress,
        from: usize,
        n: usize,
        num_buffers_at: &mut [Option<GuestAddress>; 2],
    ) -> Result<(), ()> {
        let hdr_len = self.hdr.len();
        let end = from + n;
        let mut at = 0usize;
        let mut off = from;
        if off < hdr_len {
            let m = (hdr_len - off).min(end - off);
            buffer.write(&self.hdr[off..off + m], at)?;
            if hdr_len == virtio_net::HEADER_LEN_MRG {
                for (k, slot) in num_buffers_at.iter_mut().enumerate() {
                    let i = NUM_BUFFERS + k;
                    if (off..off + m).contains(&i) {
                        *slot = addr.checked_add((i - off) as u64);
                    }
                }
            }
            at += m;
            off += m;
        }
        // The rest from the pieces, each written where it overlaps off..end.
        let mut piece_start = hdr_len;
        for piece in self.frame {
            let piece_end = piece_start + piece.len();
            if off < end && off < piece_end {
                let m = (piece_end - off).min(end - off);
                buffer.write(&piece[off - piece_start..off - piece_start + m], at)?;
                at += m;
                off += m;
            }
            piece_start = piece_end;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use virtio_bindings::bindings::virtio_ring::VRING_AVAIL_F_NO_INTERRUPT;
    use virtio_bindings::bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
    use virtio_queue::desc::RawDescriptor;
    use virtio_queue::mock::MockSplitQueue;
    use virtio_queue::{Queue, QueueT};
    use vm_memory::GuestMemoryMmap;

    /// 1 MiB of guest memory at 0; the queue sits at 0, buffers from 0x1_0000 on.
    fn memory() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap()
    }

    fn desc(addr: u64, len: u32, flags: u32, next: u16) -> RawDescriptor {
        RawDescriptor::from(Descriptor::new(addr, len, flags as u16, next))
    }

    // An IPv4 TCP super-frame header as a Linux guest sends it: NEEDS_CSUM, TCPV4,
    // hdr_len 66, gso_size 1448, csum_start 34, csum_offset 16, num_buffers 0.
    const TSO_HDR: [u8; 12] = [1, 1, 66, 0, 0xa8, 0x05, 34, 0, 16, 0, 0, 0];

    fn frame(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + 3) as u8).collect()
    }

    #[test]
    fn guest_copies_take_one_region_straight_and_span_regions_by_the_walk() {
        // Two regions back to back, and a hole after them.
        let mem =
            GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x1000), (GuestAddress(0x1000), 0x1000)])
                .unwrap();
        let data: Vec<u8> = (0..64u8).collect();
        for at in [0x100, 0x1000 - 32, 0x1000 + 0x10] {
            let buffer = GuestBuffer::new(&mem, GuestAddress(at), 64);
            assert_eq!(buffer.slice.is_ok(), at != 0x1000 - 32, "at {at:#x}");
            // In two pieces, as a header and a frame are written.
            buffer.write(&data[..12], 0).unwrap();
            buffer.write(&data[12..], 12).unwrap();
            let mut back = [0u8; 64];
            buffer.read(&mut back[..20], 0).unwrap();
            buffer.read(&mut back[20..], 20).unwrap();
            assert_eq!(back[..], data[..], "at {at:#x}");
            let mut by_walk = [0u8; 64];
            mem.read_slice(&mut by_walk, GuestAddress(at)).unwrap();
            assert_eq!(by_walk[..], data[..], "at {at:#x}, read the other way");
            // Past the buffer's end: refused, even where the memory goes on.
            assert!(buffer.read(&mut back[..8], 60).is_err(), "at {at:#x}");
        }
        // Running past the memory, or starting outside it: refused.
        let mut buf = [0u8; 64];
        for at in [0x2000 - 32, 0x5000, u64::MAX - 8] {
            let buffer = GuestBuffer::new(&mem, GuestAddress(at), 64);
            assert!(buffer.read(&mut buf, 0).is_err(), "at {at:#x}");
            assert!(buffer.write(&data, 0).is_err(), "at {at:#x}");
        }
    }

    #[test]
    fn a_good_chain_gives_header_and_frame_across_descriptors() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 16);
        let body = frame(100);
        // Header in its own descriptor, the frame split 40 + 60.
        mem.write_slice(&[0u8; 12], GuestAddress(0x1_0000)).unwrap();
        mem.write_slice(&body[..40], GuestAddress(0x2_0000)).unwrap();
        mem.write_slice(&body[40..], GuestAddress(0x3_0000)).unwrap();
        let n = VRING_DESC_F_NEXT;
        vq.add_desc_chains(
            &[desc(0x1_0000, 12, n, 1), desc(0x2_0000, 40, n, 2), desc(0x3_0000, 60, 0, 0)],
            0,
        )
        .unwrap();
        let mut q: Queue = vq.create_queue().unwrap();
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        let chain = ring.pop().unwrap();
        assert_eq!(chain.head_index(), 0);
        let mut buf = vec![0u8; 65536];
        let (offload, len) = read_tx_chain(&mem, chain, 12, &mut buf).unwrap();
        assert_eq!(len, 100);
        // After the header, which came in its own descriptor.
        assert_eq!(&buf[..12], &[0u8; 12]);
        assert_eq!(&buf[12..112], &body[..]);
        assert_eq!(offload, virtio_net::Repr::default());
        assert!(ring.pop().is_none());
    }

    #[test]
    fn a_frame_with_gso_header_enters_whole_with_its_offload() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 16);
        let body = frame(20_000);
        // Header and the first bytes of the frame in one descriptor (ANY_LAYOUT).
        let mut first = TSO_HDR.to_vec();
        first.extend_from_slice(&body[..500]);
        mem.write_slice(&first, GuestAddress(0x1_0000)).unwrap();
        mem.write_slice(&body[500..], GuestAddress(0x2_0000)).unwrap();
        vq.add_desc_chains(
            &[
                desc(0x1_0000, first.len() as u32, VRING_DESC_F_NEXT, 1),
                desc(0x2_0000, (body.len() - 500) as u32, 0, 0),
            ],
            0,
        )
        .unwrap();
        let mut q: Queue = vq.create_queue().unwrap();
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        let chain = ring.pop().unwrap();
        let mut buf = vec![0u8; 65536];
        let (offload, len) = read_tx_chain(&mem, chain, 12, &mut buf).unwrap();
        assert_eq!(len, body.len());
        assert_eq!(&buf[..12], &TSO_HDR);
        assert_eq!(&buf[12..12 + len], &body[..]);
        assert_eq!(offload.gso_type, virtio_net::GsoType::TcpV4);
        assert_eq!(offload.gso_size, 1448);
        assert!(offload.needs_csum);
        assert_eq!((offload.csum_start, offload.csum_offset), (34, 16));
    }

    #[test]
    fn a_super_frame_with_a_tiny_gso_size_is_refused() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 16);
        // 60,000 bytes in segments of 1 byte: 60,000 segments if it were taken.
        let mut tiny = TSO_HDR;
        tiny[4..6].copy_from_slice(&1u16.to_le_bytes());
        mem.write_slice(&tiny, GuestAddress(0x1_0000)).unwrap();
        mem.write_slice(&frame(60_000), GuestAddress(0x2_0000)).unwrap();
        vq.add_desc_chains(&[desc(0x1_0000, 12, VRING_DESC_F_NEXT, 1), desc(0x2_0000, 60_000, 0, 0)], 0)
            .unwrap();
        let mut q: Queue = vq.create_queue().unwrap();
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        let chain = ring.pop().unwrap();
        let mut buf = vec![0u8; 65536];
        assert_eq!(read_tx_chain(&mem, chain, 12, &mut buf), Err(TxChainError::GsoSizeTooSmall));
    }

    #[test]
    fn a_chain_too_short_for_the_header_is_refused() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 16);
        vq.add_desc_chains(&[desc(0x1_0000, 8, 0, 0)], 0).unwrap();
        let mut q: Queue = vq.create_queue().unwrap();
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        let chain = ring.pop().unwrap();
        let mut buf = vec![0u8; 2048];
        assert_eq!(read_tx_chain(&mem, chain, 12, &mut buf), Err(TxChainError::TooShort));
    }

    #[test]
    fn a_chain_pointing_outside_guest_memory_is_refused() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 16);
        // Starts inside, ends 0x100 bytes past the end of the 1 MiB region.
        vq.add_desc_chains(
            &[desc(0x1_0000, 12, VRING_DESC_F_NEXT, 1), desc(0x10_0000 - 0x100, 0x200, 0, 0)],
            0,
        )
        .unwrap();
        // Wholly outside.
        vq.add_desc_chains(&[desc(0x4000_0000, 100, 0, 0)], 2).unwrap();
        let mut q: Queue = vq.create_queue().unwrap();
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        let mut buf = vec![0u8; 2048];
        for _ in 0..2 {
            let chain = ring.pop().unwrap();
            assert_eq!(read_tx_chain(&mem, chain, 12, &mut buf), Err(TxChainError::BadAddress));
        }
    }

    #[test]
    fn write_only_too_long_and_bad_header_chains_are_refused() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 16);
        let mut bad_gso = TSO_HDR;
        bad_gso[1] = 2; // no such gso_type
        mem.write_slice(&bad_gso, GuestAddress(0x1_0000)).unwrap();
        vq.add_desc_chains(&[desc(0x2_0000, 100, VRING_DESC_F_WRITE, 0)], 0).unwrap();
        vq.add_desc_chains(&[desc(0x2_0000, 4000, 0, 0)], 1).unwrap();
        vq.add_desc_chains(&[desc(0x1_0000, 200, 0, 0)], 2).unwrap();
        let mut q: Queue = vq.create_queue().unwrap();
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        let mut buf = vec![0u8; 2048];
        let expect = [TxChainError::WriteOnly, TxChainError::TooLong, TxChainError::BadHeader];
        for e in expect {
            let chain = ring.pop().unwrap();
            assert_eq!(read_tx_chain(&mem, chain, 12, &mut buf), Err(e));
        }
    }

    #[test]
    fn a_descriptor_loop_ends_without_hanging() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 16);
        // Two descriptors pointing at each other: the walk stops after the queue size.
        vq.desc_table().store(0, desc(0x1_0000, 64, VRING_DESC_F_NEXT, 1)).unwrap();
        vq.desc_table().store(1, desc(0x2_0000, 64, VRING_DESC_F_NEXT, 0)).unwrap();
        vq.avail().ring().ref_at(0).unwrap().store(0);
        vq.avail().idx().store(1);
        let mut q: Queue = vq.create_queue().unwrap();
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        let chain = ring.pop().unwrap();
        let mut buf = vec![0u8; 65536];
        // 16 descriptors of 64 bytes were read, then the walk stopped.
        let (_, len) = read_tx_chain(&mem, chain, 12, &mut buf).unwrap();
        assert_eq!(len, 16 * 64 - 12);
    }

    fn used_elem(vq: &MockSplitQueue<GuestMemoryMmap>, i: u16) -> (u32, u32) {
        let e = vq.used().ring().ref_at(i as usize).unwrap().load();
        (e.id(), e.len())
    }

    #[test]
    fn a_super_frame_spans_mergeable_buffers_with_num_buffers_set() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 16);
        // Four 1536-byte receive buffers, one descriptor each, as Linux posts them.
        let w = VRING_DESC_F_WRITE;
        let bufs: Vec<_> = (0..4).map(|i| desc(0x1_0000 + i * 0x1000, 1536, w, 0)).collect();
        for (i, d) in bufs.iter().enumerate() {
            vq.add_desc_chains(std::slice::from_ref(d), i as u16).unwrap();
        }
        let mut q: Queue = vq.create_queue().unwrap();
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        let body = frame(4000);
        let mut used = Vec::new();
        let n = write_rx_frame(&mut ring, &TSO_HDR, 12, &body, true, &mut used).unwrap();
        assert_eq!(n, 3);
        assert_eq!(used, vec![(0, 1536), (1, 1536), (2, 4012 - 3072)]);
        // Nothing visible to the guest before publishing.
        assert_eq!(vq.used().idx().load(), 0);
        assert_eq!(ring.publish_used(&used), Ok(3));
        assert_eq!(vq.used().idx().load(), 3);
        assert_eq!(used_elem(&vq, 1), (1, 1536));
        // Header with num_buffers = 3, then the frame, in buffer order.
        let mut got = vec![0u8; 3 * 1536];
        for i in 0..3u64 {
            let s = i as usize * 1536;
            mem.read_slice(&mut got[s..s + 1536], GuestAddress(0x1_0000 + i * 0x1000)).unwrap();
        }
        let mut want = TSO_HDR.to_vec();
        want[10] = 3;
        want.extend_from_slice(&body);
        assert_eq!(&got[..want.len()], &want[..]);
        // The fourth buffer is still available.
        assert_eq!(ring.next_avail(), 3);
    }

    #[test]
    fn a_frame_in_two_pieces_lands_as_one_across_buffer_boundaries() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 16);
        let w = VRING_DESC_F_WRITE;
        // Small buffers, so both the header and the pieces cross buffer ends.
        for i in 0..8u64 {
            vq.add_desc_chains(&[desc(0x1_0000 + i * 0x1000, 100, w, 0)], i as u16).unwrap();
        }
        let mut q: Queue = vq.create_queue().unwrap();
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        let body = frame(500);
        let (head, tail) = body.split_at(150);
        let mut used = Vec::new();
        let n = write_rx_parts(&mut ring, &TSO_HDR, 12, [head, tail], true, &mut used).unwrap();
        assert_eq!(n, 6);
        assert_eq!(used.iter().map(|u| u.1).sum::<u32>(), 512);
        let mut got = vec![0u8; 600];
        for i in 0..6u64 {
            let s = i as usize * 100;
            mem.read_slice(&mut got[s..s + 100], GuestAddress(0x1_0000 + i * 0x1000)).unwrap();
        }
        let mut want = TSO_HDR.to_vec();
        want[10] = 6;
        want.extend_from_slice(&body);
        assert_eq!(&got[..want.len()], &want[..]);
    }

    #[test]
    fn too_few_receive_buffers_consume_nothing() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 16);
        vq.add_desc_chains(&[desc(0x1_0000, 1536, VRING_DESC_F_WRITE, 0)], 0).unwrap();
        let mut q: Queue = vq.create_queue().unwrap();
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        let mut used = vec![(9, 9)];
        let r = write_rx_frame(&mut ring, &TSO_HDR, 12, &frame(3000), true, &mut used);
        assert_eq!(r, Err(RxError::NoBuffers));
        assert_eq!(used, vec![(9, 9)]);
        assert_eq!(ring.next_avail(), 0);
        // Without mergeable buffers the frame must fit one chain.
        let r = write_rx_frame(&mut ring, &TSO_HDR, 12, &frame(3000), false, &mut used);
        assert_eq!(r, Err(RxError::TooBig));
        assert_eq!(ring.next_avail(), 0);
        // A frame that fits still goes.
        let r = write_rx_frame(&mut ring, &TSO_HDR, 12, &frame(1000), false, &mut used);
        assert_eq!(r, Ok(1));
        assert_eq!(used, vec![(9, 9), (0, 1012)]);
    }

    #[test]
    fn a_bad_receive_chain_is_returned_empty() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 16);
        let w = VRING_DESC_F_WRITE;
        // A good buffer, a device-readable one, one outside memory, then a good one.
        vq.add_desc_chains(&[desc(0x1_0000, 1536, w, 0)], 0).unwrap();
        vq.add_desc_chains(&[desc(0x2_0000, 1536, 0, 0)], 1).unwrap();
        vq.add_desc_chains(&[desc(0x4000_0000, 1536, w, 0)], 2).unwrap();
        vq.add_desc_chains(&[desc(0x3_0000, 1536, w, 0)], 3).unwrap();
        let mut q: Queue = vq.create_queue().unwrap();
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        let mut used = Vec::new();
        // The frame needs two buffers: the first is filled, the second is readable.
        let r = write_rx_frame(&mut ring, &TSO_HDR, 12, &frame(2000), true, &mut used);
        assert_eq!(r, Err(RxError::BadChain));
        assert_eq!(used, vec![(0, 0), (1, 0)]);
        let r = write_rx_frame(&mut ring, &TSO_HDR, 12, &frame(100), true, &mut used);
        assert_eq!(r, Err(RxError::BadChain));
        assert_eq!(used.last(), Some(&(2, 0)));
        let r = write_rx_frame(&mut ring, &TSO_HDR, 12, &frame(100), true, &mut used);
        assert_eq!(r, Ok(1));
        assert_eq!(used.last(), Some(&(3, 112)));
        assert_eq!(ring.publish_used(&used), Ok(4));
        assert_eq!(vq.used().idx().load(), 4);
    }

    #[test]
    fn used_entries_with_impossible_heads_are_skipped() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 16);
        let mut q: Queue = vq.create_queue().unwrap();
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        assert_eq!(ring.publish_used(&[(3, 0), (16, 0), (500, 0)]), Ok(1));
        assert_eq!(vq.used().idx().load(), 1);
        assert_eq!(q.next_used(), 1);
    }

    #[test]
    fn no_interrupt_flag_is_honoured() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 16);
        let mut q: Queue = vq.create_queue().unwrap();
        let ring = SplitRing::new(&mut q, &mem).unwrap();
        assert!(ring.guest_wants_interrupt());
        mem.write_obj((VRING_AVAIL_F_NO_INTERRUPT as u16).to_le(), vq.avail_addr()).unwrap();
        assert!(!ring.guest_wants_interrupt());
    }
}
