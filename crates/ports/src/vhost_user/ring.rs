//! A split virtqueue's three rings, looked up in the guest's memory once per batch.
//!
//! `virtio-queue`'s own walk finds the memory region again for every access: the
//! available index (read again for every chain), each ring entry, each descriptor, each
//! used element. The profile of `bench vhost-user`'s 64-byte case had that walk, the
//! region lookups and the index reads of a ring the guest writes at the same time as half
//! of the port's time. [`SplitRing`] takes the descriptor table, the available ring and
//! the used ring each as one slice of guest memory when a batch starts (each must lie
//! inside one memory region, as DPDK's vhost and QEMU require of a ring), reads the
//! available index once and again only when the heads read so far run out (not at all
//! once a read found nothing new, until the next batch), and walks the chains ([`Chain`])
//! over the slice of their table. Every access is still checked
//! against its slice by `vm-memory`; a chain is walked as `virtio-queue`'s
//! `DescriptorChain` walks it (a unit test holds the two to the same descriptors for
//! chains of every shape, broken ones included), so a guest can at worst have a chain
//! refused.
//!
//! The queue's positions stay in its [`Queue`] (`next_avail`, `next_used`), which the
//! protocol thread reads when the frontend stops the queue.

use std::sync::atomic::{Ordering, fence};

use virtio_bindings::bindings::virtio_ring::{
    VRING_AVAIL_F_NO_INTERRUPT, VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT,
};
use virtio_queue::desc::split::Descriptor;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, VolatileSlice};
use vmpls_sys::cpu::prefetch;

/// Bytes of one descriptor.
const DESC_LEN: usize = 16;
/// The available ring's header (flags, idx) before its entries; the used ring's too.
const RING_HEADER: usize = 4;
/// Bytes of one used element (`id: le32, len: le32`).
const USED_ELEM_LEN: usize = 8;

/// Most chains [`SplitRing::prefetch`] looks ahead at.
const PREFETCH_MAX: usize = 64;
/// Bytes of a chain's first buffer [`SplitRing::prefetch`] asks for: a virtio-net header
/// and a 64-byte frame, wherever they start in a line.
const PREFETCH_BYTES: usize = 128;

/// Why a queue's rings cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RingError {
    /// The queue is not ready, or its size is not a power of two (0 included).
    NotReady,
    /// A ring is not wholly inside one region of the guest's memory.
    Unmapped,
}

/// Why used-ring entries could not be published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UsedRingError;

/// A ready split queue's rings in the guest's memory, for one batch.
pub(crate) struct SplitRing<'q, 'm> {
    queue: &'q mut Queue,
    mem: &'m GuestMemoryMmap,
    size: u16,
    desc: VolatileSlice<'m>,
    avail: VolatileSlice<'m>,
    used: VolatileSlice<'m>,
    /// The driver's available index as last read: the heads before it can be taken
    /// without reading it again.
    avail_end: u16,
    /// A read of the index found nothing new: the ring is empty for this batch. A full
    /// receive ring (a guest slower than its traffic) then costs each further frame of the
    /// batch no read of a line the guest is writing; DPDK's vhost reads the index once
    /// per burst too.
    drained: bool,
}

impl<'q, 'm> SplitRing<'q, 'm> {
    /// The rings of `queue` in `mem`, for one batch.
    #[inline(always)]
    pub(crate) fn new(queue: &'q mut Queue, mem: &'m GuestMemoryMmap) -> Result<Self, RingError> {
        let size = queue.size();
        // A split queue's size is a power of two (`virtio-queue` sets no other), so a ring
        // position is the index masked: a division per entry was a tenth of the used
        // ring's publishing.
        if !queue.ready() || !size.is_power_of_two() {
            return Err(RingError::NotReady);
        }
        let n = usize::from(size);
        let slice =
            |addr: u64, len: usize| mem.get_slice(GuestAddress(addr), len).map_err(|_| RingError::Unmapped);
        let desc = slice(queue.desc_table(), n * DESC_LEN)?;
        let avail = slice(queue.avail_ring(), RING_HEADER + 2 * n)?;
        let used = slice(queue.used_ring(), RING_HEADER + USED_ELEM_LEN * n)?;
        let avail_end = queue.next_avail();
        Ok(SplitRing { queue, mem, size, desc, avail, used, avail_end, drained: false })
    }

    /// The guest's memory the rings lie in.
    pub(crate) fn memory(&self) -> &'m GuestMemoryMmap {
        self.mem
    }

    /// The queue, for what is not done here (notifications).
    pub(crate) fn queue(&mut self) -> &mut Queue {
        self.queue
    }

    pub(crate) fn next_avail(&self) -> u16 {
        self.queue.next_avail()
    }

    /// Gives back the chains taken since `next_avail` was read (a frame that did not fit).
    pub(crate) fn rewind(&mut self, next_avail: u16) {
        self.queue.set_next_avail(next_avail);
    }

    /// Whether [`SplitRing::pop`] has nothing more for this batch: a read of the index
    /// found nothing new, and no chain was given back since.
    pub(crate) fn exhausted(&self) -> bool {
        self.drained && self.queue.next_avail() == self.avail_end
    }

    /// The next chain the driver made available, or `None` when there is none (for the
    /// rest of this batch, once a read of the index found nothing new). An available
    /// index more than a queue's worth ahead (a broken driver) gives `None` too, as
    /// `virtio-queue` does, so a guest cannot make the port take a head twice.
    #[inline(always)]
    pub(crate) fn pop(&mut self) -> Option<Chain<'m>> {
        let next = self.queue.next_avail();
        if next == self.avail_end && self.read_avail_index() == 0 {
            return None;
        }
        let head = self.head_at(next)?;
        self.queue.set_next_avail(next.wrapping_add(1));
        Some(Chain {
            mem: self.mem,
            table: self.desc,
            head,
            table_size: self.size,
            next: head,
            ttl: self.size,
            indirect: false,
            bytes: 0,
        })
    }

    /// Reads the driver's available index (unless a read found nothing new in this
    /// batch) and returns how many chains wait from `next_avail` on: 0 also for an index
    /// more than a queue's worth ahead (a broken driver), as `virtio-queue` does, so a
    /// guest cannot make the port take a head twice.
    #[inline(always)]
    fn read_avail_index(&mut self) -> u16 {
        let next = self.queue.next_avail();
        if self.drained {
            return self.avail_end.wrapping_sub(next);
        }
        // Acquire: the entries and descriptors the driver wrote before the index.
        let Some(idx) = self.avail.load::<u16>(2, Ordering::Acquire).ok().map(u16::from_le) else {
            return 0;
        };
        if idx.wrapping_sub(next) > self.size {
            return 0;
        }
        self.avail_end = idx;
        if next == idx {
            self.drained = true;
        }
        idx.wrapping_sub(next)
    }

    /// The head index in the available ring's entry for position `at`.
    #[inline(always)]
    fn head_at(&self, at: u16) -> Option<u16> {
        let at = RING_HEADER + 2 * usize::from(at & (self.size - 1));
        self.avail.read_obj::<u16>(at).ok().map(u16::from_le)
    }

    /// Asks the CPU for the lines the next `max` chains' walks and reads will miss, all
    /// at once: first each head's descriptor, then (those on their way) the start of
    /// the buffer each points to. The guest wrote them from another core, so each is a
    /// miss; taken one chain at a time they were a fifth of a 64-byte frame's time in
    /// the router (`bench vhost-user`), paid one after the other. A hint only: nothing
    /// read here is trusted or kept, and a descriptor outside the table or a buffer
    /// outside guest memory is passed over.
    pub(crate) fn prefetch(&mut self, max: usize) {
        let next = self.queue.next_avail();
        let waiting =
            if next == self.avail_end { self.read_avail_index() } else { self.avail_end.wrapping_sub(next) };
        let n = usize::from(waiting).min(max).min(PREFETCH_MAX);
        let mut heads = [u16::MAX; PREFETCH_MAX];
        let table = self.desc.ptr_guard();
        for (i, head) in heads.iter_mut().enumerate().take(n) {
            if let Some(h) = self.head_at(next.wrapping_add(i as u16))
                && h < self.size
            {
                prefetch(table.as_ptr().wrapping_add(usize::from(h) * DESC_LEN));
                *head = h;
            }
        }
        for &head in heads.iter().take(n) {
            if head == u16::MAX {
                continue;
            }
            let Ok(desc) = self.desc.read_obj::<Descriptor>(usize::from(head) * DESC_LEN) else { continue };
            if desc.flags() & VRING_DESC_F_INDIRECT as u16 != 0 {
                continue;
            }
            // The header and a small frame: the lines of the first and the last byte.
            let len = (desc.len() as usize).min(PREFETCH_BYTES);
            if len > 0
                && let Ok(buffer) = self.mem.get_slice(desc.addr(), len)
            {
                let p = buffer.ptr_guard().as_ptr();
                prefetch(p);
                prefetch(p.wrapping_add(len - 1));
            }
        }
    }

    /// Writes `used` (head index, bytes written) into the used ring, then publishes them
    /// with one release store of the used index. Entries whose head index is not below
    /// the queue size are skipped (a guest can put any index in its available ring).
    /// Returns how many were published.
    pub(crate) fn publish_used(&mut self, used: &[(u16, u32)]) -> Result<usize, UsedRingError> {
        if used.is_empty() {
            return Ok(0);
        }
        let mut next = self.queue.next_used();
        let mut published = 0;
        for &(head, len) in used {
            if head >= self.size {
                continue;
            }
            let at = RING_HEADER + USED_ELEM_LEN * usize::from(next & (self.size - 1));
            let mut elem = [0u8; USED_ELEM_LEN];
            elem[..4].copy_from_slice(&u32::from(head).to_le_bytes());
            elem[4..].copy_from_slice(&len.to_le_bytes());
            self.used.write_slice(&elem, at).map_err(|_| UsedRingError)?;
            next = next.wrapping_add(1);
            published += 1;
        }
        self.used.store(next.to_le(), 2, Ordering::Release).map_err(|_| UsedRingError)?;
        self.queue.set_next_used(next);
        Ok(published)
    }

    /// Asks the driver to kick when it makes buffers available (clears
    /// `VRING_USED_F_NO_NOTIFY`), then says whether it made any available since the index
    /// was last read: those came without a kick.
    pub(crate) fn ask_for_kicks(&mut self) -> bool {
        // Err: the used ring is outside guest memory, which the batch's own accesses count.
        let _ = self.queue.enable_notification(self.mem);
        // The flag must be visible before the index is read, or buffers the driver posted
        // in between (seeing the old flag, so without a kick) would be missed.
        fence(Ordering::SeqCst);
        match self.avail.load::<u16>(2, Ordering::Acquire) {
            Ok(idx) => u16::from_le(idx) != self.avail_end,
            Err(_) => true,
        }
    }

    /// False when the guest asked not to be interrupted for this queue
    /// (`VRING_AVAIL_F_NO_INTERRUPT`, without `EVENT_IDX`). Call after
    /// [`SplitRing::publish_used`].
    pub(crate) fn guest_wants_interrupt(&self) -> bool {
        // The used index store must be visible before the flags are read, or an interrupt
        // the guest re-enabled meanwhile could be missed.
        fence(Ordering::SeqCst);
        match self.avail.load::<u16>(0, Ordering::Acquire) {
            Ok(flags) => u16::from_le(flags) & VRING_AVAIL_F_NO_INTERRUPT as u16 == 0,
            Err(_) => true,
        }
    }
}

/// The descriptors of one chain, as `virtio-queue`'s `DescriptorChain` yields them: at
/// most a table's worth (a loop ends there), an indirect descriptor followed into its
/// table (one level; its table must lie in one memory region), the walk ended at a
/// descriptor index outside the table or an unreadable descriptor.
#[derive(Clone)]
pub(crate) struct Chain<'m> {
    mem: &'m GuestMemoryMmap,
    table: VolatileSlice<'m>,
    head: u16,
    table_size: u16,
    next: u16,
    ttl: u16,
    indirect: bool,
    /// Bytes yielded so far: a chain over 4 GiB ends (virtio 1.2, 2.7.5.2).
    bytes: u32,
}

impl Chain<'_> {
    /// The chain's index in the available ring's entry: what the used ring gets back.
    pub(crate) fn head_index(&self) -> u16 {
        self.head
    }

    /// Continues the walk in the indirect table `desc` points to; false if it cannot be.
    fn enter_indirect(&mut self, desc: &Descriptor) -> bool {
        let len = desc.len() as usize;
        if self.indirect || !len.is_multiple_of(DESC_LEN) || len / DESC_LEN > usize::from(u16::MAX) {
            return false;
        }
        let Ok(table) = self.mem.get_slice(desc.addr(), len) else {
            return false;
        };
        self.table = table;
        self.table_size = (len / DESC_LEN) as u16;
        self.next = 0;
        self.ttl = self.table_size;
        self.indirect = true;
        true
    }
}

impl Iterator for Chain<'_> {
    type Item = Descriptor;

    #[inline(always)]
    fn next(&mut self) -> Option<Descriptor> {
        loop {
            if self.ttl == 0 || self.next >= self.table_size {
                return None;
            }
            let desc = self.table.read_obj::<Descriptor>(usize::from(self.next) * DESC_LEN).ok()?;
            if desc.flags() & VRING_DESC_F_INDIRECT as u16 != 0 {
                if !self.enter_indirect(&desc) {
                    self.ttl = 0;
                    return None;
                }
                continue;
            }
            self.bytes = self.bytes.checked_add(desc.len())?;
            if desc.flags() & VRING_DESC_F_NEXT as u16 != 0 {
                self.next = desc.next();
                self.ttl -= 1;
            } else {
                self.ttl = 0;
            }
            return Some(desc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use virtio_bindings::bindings::virtio_ring::VRING_DESC_F_WRITE;
    use virtio_queue::desc::RawDescriptor;
    use virtio_queue::mock::MockSplitQueue;

    /// 1 MiB of guest memory at 0 and 64 KiB more at 2 MiB; queues sit at 0.
    fn memory() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000), (GuestAddress(0x20_0000), 0x1_0000)])
            .unwrap()
    }

    /// A small deterministic generator (xorshift), so a failure names its seed.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A descriptor of any shape: mostly sane, sometimes pointing anywhere, looping,
    /// indirect (to a table of sane or broken descriptors, or nested), too long.
    fn random_desc(rng: &mut Rng, table_size: u16) -> Descriptor {
        let addr = match rng.below(8) {
            0 => rng.next(),
            1 => 0x20_0000 + rng.below(0x1_0000),
            _ => 0x1_0000 + rng.below(0xe_0000),
        };
        let len = match rng.below(8) {
            0 => rng.next() as u32,
            1 => 16 * rng.below(6) as u32,
            _ => rng.below(2048) as u32,
        };
        let mut flags = 0u16;
        if rng.below(3) != 0 {
            flags |= VRING_DESC_F_NEXT as u16;
        }
        if rng.below(2) == 0 {
            flags |= VRING_DESC_F_WRITE as u16;
        }
        let mut addr = addr;
        if rng.below(6) == 0 {
            flags |= VRING_DESC_F_INDIRECT as u16;
            if rng.below(2) == 0 {
                // One of the tables the test wrote.
                addr = 0x1_0000 + 0x1000 * rng.below(8);
            }
        }
        let next =
            if rng.below(10) == 0 { rng.next() as u16 } else { rng.below(u64::from(table_size)) as u16 };
        Descriptor::new(addr, len, flags, next)
    }

    #[test]
    fn chains_are_walked_as_virtio_queue_walks_them() {
        const SIZE: u16 = 16;
        for seed in 1..400u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mem = memory();
            let vq = MockSplitQueue::new(&mem, SIZE);
            for i in 0..SIZE {
                let d = random_desc(&mut rng, SIZE);
                mem.write_obj(d, GuestAddress(vq.desc_table_addr().0 + 16 * u64::from(i))).unwrap();
            }
            // Indirect tables the descriptors may point at.
            for t in 0..8u64 {
                let at = 0x1_0000 + 0x1000 * t;
                for i in 0..8u64 {
                    mem.write_obj(random_desc(&mut rng, 8), GuestAddress(at + 16 * i)).unwrap();
                }
            }
            // Every descriptor made available as a head, some heads out of range.
            let heads: Vec<u16> =
                (0..SIZE).map(|i| if rng.below(8) == 0 { SIZE + rng.below(100) as u16 } else { i }).collect();
            let avail = vq.avail_addr().0;
            for (i, h) in heads.iter().enumerate() {
                mem.write_obj(h.to_le(), GuestAddress(avail + 4 + 2 * i as u64)).unwrap();
            }
            mem.write_obj(SIZE.to_le(), GuestAddress(avail + 2)).unwrap();

            let mut theirs: Queue = vq.create_queue().unwrap();
            let mut ours: Queue = vq.create_queue().unwrap();
            let mut ring = SplitRing::new(&mut ours, &mem).unwrap();
            // A look ahead changes nothing the walk sees, whatever the descriptors hold.
            if seed % 2 == 0 {
                ring.prefetch(rng.below(u64::from(SIZE) + 4) as usize);
            }
            for _ in 0..SIZE {
                let a = theirs.pop_descriptor_chain(&mem).expect("virtio-queue's chain");
                let b = ring.pop().expect("our chain");
                assert_eq!(a.head_index(), b.head_index(), "seed {seed}");
                let a: Vec<_> = a.map(|d| (d.addr(), d.len(), d.flags(), d.next())).collect();
                let b: Vec<_> = b.map(|d| (d.addr(), d.len(), d.flags(), d.next())).collect();
                assert_eq!(a, b, "seed {seed}");
            }
            assert!(theirs.pop_descriptor_chain(&mem).is_none());
            assert!(ring.pop().is_none());
        }
    }

    #[test]
    fn the_available_index_is_read_again_only_when_its_heads_run_out() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 8);
        let one =
            |i| vq.add_desc_chains(&[RawDescriptor::from(Descriptor::new(0x1_0000, 64, 0, 0))], i).unwrap();
        one(0);
        let mut q: Queue = vq.create_queue().unwrap();
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        assert_eq!(ring.pop().map(|c| c.head_index()), Some(0));
        // Made available after the first read: seen when the heads read so far run out.
        one(1);
        assert_eq!(ring.pop().map(|c| c.head_index()), Some(1));
        assert_eq!(ring.next_avail(), 2);
        ring.rewind(1);
        assert_eq!(ring.pop().map(|c| c.head_index()), Some(1));
        assert!(!ring.exhausted());
        // A read that finds nothing new ends the batch: what comes after waits for the next.
        assert!(ring.pop().is_none());
        assert!(ring.exhausted());
        one(2);
        assert!(ring.pop().is_none(), "drained for this batch");
        // A chain given back (a frame that did not fit) can still be taken.
        ring.rewind(1);
        assert!(!ring.exhausted());
        assert_eq!(ring.pop().map(|c| c.head_index()), Some(1));
        assert!(ring.pop().is_none() && ring.exhausted());
        assert_eq!(q.next_avail(), 2, "the position stays in the queue");
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        assert_eq!(ring.pop().map(|c| c.head_index()), Some(2), "the next batch takes it");
    }

    #[test]
    fn an_available_index_too_far_ahead_gives_nothing() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 8);
        mem.write_obj(9u16.to_le(), GuestAddress(vq.avail_addr().0 + 2)).unwrap();
        let mut q: Queue = vq.create_queue().unwrap();
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        ring.prefetch(8);
        assert!(ring.pop().is_none());
        assert_eq!(ring.next_avail(), 0);
    }

    #[test]
    fn a_look_ahead_reads_the_index_as_the_walk_would() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 8);
        let one =
            |i| vq.add_desc_chains(&[RawDescriptor::from(Descriptor::new(0x1_0000, 64, 0, 0))], i).unwrap();
        let mut q: Queue = vq.create_queue().unwrap();
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        // Nothing yet: the batch is over, as a walk that found nothing would end it.
        ring.prefetch(8);
        assert!(ring.exhausted());
        one(0);
        assert!(ring.pop().is_none(), "drained for this batch");
        let mut ring = SplitRing::new(&mut q, &mem).unwrap();
        one(1);
        ring.prefetch(1);
        assert_eq!(ring.next_avail(), 0, "a look ahead takes nothing");
        assert_eq!(ring.pop().map(|c| c.head_index()), Some(0));
        assert_eq!(ring.pop().map(|c| c.head_index()), Some(1));
        assert!(ring.pop().is_none() && ring.exhausted());
    }

    #[test]
    fn rings_outside_one_region_are_refused() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 8);
        let mut q: Queue = vq.create_queue().unwrap();
        // The used ring runs past the end of the first region.
        q.set_used_ring_address(Some(0x10_0000 - 16), Some(0));
        assert_eq!(SplitRing::new(&mut q, &mem).err(), Some(RingError::Unmapped));
        q.set_used_ring_address(Some(0x30_0000), Some(0));
        assert_eq!(SplitRing::new(&mut q, &mem).err(), Some(RingError::Unmapped));
        q.set_ready(false);
        assert_eq!(SplitRing::new(&mut q, &mem).err(), Some(RingError::NotReady));
    }
}
