//! The shared memory of a memif: regions mapped from memfds, the ring fields both ends
//! write (read and written atomically, with acquire/release ordering on `head` and
//! `tail` as the protocol requires), descriptors and buffers (copied, after their ranges
//! were checked against the region). The `unsafe` of the memif port is here.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use super::ring::{self, DESCRIPTOR_LEN, Descriptor};

/// One mapped region, unmapped on drop.
pub(super) struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; every access goes
// through the bounds-checked methods below, which the one forwarding thread calls.
unsafe impl Send for Region {}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region").field("len", &self.len).finish()
    }
}

impl Region {
    /// Maps `len` bytes of the memfd `fd` (a region the peer created), shared. The file
    /// must be sealed against shrinking (DPDK and libmemif seal theirs): a peer that cut
    /// it under our mapping would make our next read of it a SIGBUS.
    pub(super) fn map_peers(fd: BorrowedFd<'_>, len: usize) -> io::Result<Region> {
        let seals = rustix::fs::fcntl_get_seals(fd)?;
        if !seals.contains(rustix::fs::SealFlags::SHRINK) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the region's memory file is not sealed against shrinking (F_SEAL_SHRINK)",
            ));
        }
        Region::map(fd, len)
    }

    /// Maps `len` bytes of `fd`, shared.
    fn map(fd: BorrowedFd<'_>, len: usize) -> io::Result<Region> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty region"));
        }
        // The file must hold the whole region: touching a page past its end would SIGBUS.
        let st = rustix::fs::fstat(fd)?;
        if (st.st_size as u64) < len as u64 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "region larger than its file"));
        }
        // SAFETY: a fresh mapping at an address the kernel picks (no existing memory is
        // replaced); its length is checked against the file above.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                fd,
                0,
            )?
        };
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Region { ptr, len })
    }

    /// Creates a zeroed region of `len` bytes in a new memfd (sealed against shrinking,
    /// so a peer cannot make our own accesses fault), returning it and the fd to send.
    pub(super) fn create(name: &str, len: usize) -> io::Result<(Region, OwnedFd)> {
        use rustix::fs::{MemfdFlags, SealFlags};
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
        rustix::fs::ftruncate(&fd, len as u64)?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        let region = Region::map(fd.as_fd(), len)?;
        Ok((region, fd))
    }

    /// Its length.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    fn atomic_u16(&self, offset: usize) -> Option<&AtomicU16> {
        if offset.checked_add(2)? > self.len || !offset.is_multiple_of(2) {
            return None;
        }
        // SAFETY: in bounds and 2-aligned (the mapping is page-aligned), checked above;
        // the memory lives as long as `self`. The peer writes it concurrently, which is
        // what atomics are for.
        Some(unsafe { AtomicU16::from_ptr(self.ptr.as_ptr().add(offset).cast()) })
    }

    /// Copies `dst.len()` bytes at `offset` out of the region; false if out of bounds.
    pub(super) fn read(&self, offset: usize, dst: &mut [u8]) -> bool {
        if offset.checked_add(dst.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: the source range lies in the mapping (checked above) and `dst` is our
        // own memory, so they cannot overlap. The peer may write the bytes meanwhile (a
        // broken peer); we copy whatever is there, never trusting it beyond this call.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) };
        true
    }

    /// Copies `src` into the region at `offset`; false if out of bounds.
    pub(super) fn write(&self, offset: usize, src: &[u8]) -> bool {
        if offset.checked_add(src.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: the destination range lies in the mapping (checked above); `src` is our
        // own memory, not in the mapping.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len()) };
        true
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, with its length; nothing borrows it past
        // `self` (the atomics' lifetimes are tied to `&self`).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// One ring: the region holding it (an index into the connection's regions), its offset
/// and size, checked once at connection ([`RingAt::check`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct RingAt {
    pub region: usize,
    pub offset: usize,
    pub log2_size: u8,
}

impl RingAt {
    /// Checks that the ring lies inside its region and is aligned for its atomic fields,
    /// and that its cookie is memif's.
    pub(super) fn check(&self, regions: &[Region]) -> Result<(), &'static str> {
        let r = regions.get(self.region).ok_or("a ring lies in a region that was never added")?;
        if self.log2_size > ring::MAX_LOG2_RING_SIZE {
            return Err("a ring is larger than 2^14 descriptors");
        }
        let end = self.offset.checked_add(ring::ring_len(self.log2_size));
        if end.is_none_or(|e| e > r.len()) || !self.offset.is_multiple_of(8) {
            return Err("a ring lies outside its region or is misaligned");
        }
        let mut cookie = [0; 4];
        r.read(self.offset + ring::field::COOKIE, &mut cookie);
        if u32::from_le_bytes(cookie) != ring::COOKIE {
            return Err("a ring's cookie is not memif's (0x3e31f20)");
        }
        Ok(())
    }

    pub(super) fn size(&self) -> u16 {
        1 << self.log2_size
    }

    fn mask(&self) -> u16 {
        self.size() - 1
    }

    /// A header field. `check` proved the header in bounds and aligned (and a client's
    /// own rings are made so), so `None` does not happen; were it to, loads read 0 and
    /// stores are lost rather than the router panicking.
    fn field<'r>(&self, regions: &'r [Region], at: usize) -> Option<&'r AtomicU16> {
        regions.get(self.region)?.atomic_u16(self.offset + at)
    }

    pub(super) fn head(&self, regions: &[Region]) -> u16 {
        self.field(regions, ring::field::HEAD).map_or(0, |a| a.load(Ordering::Acquire))
    }

    pub(super) fn set_head(&self, regions: &[Region], v: u16) {
        if let Some(a) = self.field(regions, ring::field::HEAD) {
            a.store(v, Ordering::Release)
        }
    }

    pub(super) fn tail(&self, regions: &[Region]) -> u16 {
        self.field(regions, ring::field::TAIL).map_or(0, |a| a.load(Ordering::Acquire))
    }

    pub(super) fn set_tail(&self, regions: &[Region], v: u16) {
        if let Some(a) = self.field(regions, ring::field::TAIL) {
            a.store(v, Ordering::Release)
        }
    }

    pub(super) fn flags(&self, regions: &[Region]) -> u16 {
        self.field(regions, ring::field::FLAGS).map_or(0, |a| a.load(Ordering::Relaxed))
    }

    pub(super) fn set_flags(&self, regions: &[Region], v: u16) {
        if let Some(a) = self.field(regions, ring::field::FLAGS) {
            a.store(v, Ordering::Relaxed)
        }
    }

    /// Writes the header of a new ring (client): cookie, no flags, indices at 0.
    pub(super) fn init(&self, regions: &[Region]) {
        if let Some(r) = regions.get(self.region) {
            r.write(self.offset + ring::field::COOKIE, &ring::COOKIE.to_le_bytes());
        }
        self.set_flags(regions, 0);
        self.set_head(regions, 0);
        self.set_tail(regions, 0);
    }

    /// The descriptor of counter value `slot`.
    pub(super) fn descriptor(&self, regions: &[Region], slot: u16) -> Descriptor {
        let mut b = [0; DESCRIPTOR_LEN];
        let Some(r) = regions.get(self.region) else { return Descriptor::default() };
        r.read(self.offset + ring::descriptor_offset(slot & self.mask()), &mut b);
        Descriptor::parse(&b)
    }

    pub(super) fn set_descriptor(&self, regions: &[Region], slot: u16, d: &Descriptor) {
        if let Some(r) = regions.get(self.region) {
            r.write(self.offset + ring::descriptor_offset(slot & self.mask()), &d.emit());
        }
    }
}

/// `Region::len` of each region, for descriptor checks.
pub(super) fn region_lens(regions: &[Region]) -> Vec<usize> {
    regions.iter().map(Region::len).collect()
}
