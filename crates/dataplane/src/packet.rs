//! The frame buffer every port fills and the pipeline rewrites in place.
//!
//! A [`Packet`] owns a fixed-size buffer with headroom in front of the Ethernet header, so
//! pushing labels moves only the 14-byte Ethernet header back, never the payload. Buffers
//! come from a [`PacketPool`] and go back to it: no allocation per packet.

use vmpls_wire::{ethernet, virtio_net};

/// Room in front of a received frame for labels pushed later: 64 label stack entries.
pub const HEADROOM: usize = 256;
/// The largest frame a port may hand us: a 64 KiB IP super-frame, an Ethernet header with
/// one VLAN tag, and some label stack entries, rounded up.
pub const MAX_FRAME: usize = 65536 + 512;
/// Bytes a buffer holds in all.
pub const BUFFER_LEN: usize = HEADROOM + MAX_FRAME;
/// The untagged Ethernet header, the head a label push or pop moves.
const ETH_HEADER: usize = ethernet::HEADER_LEN;

/// Index of a port in the router's port list.
pub use vmpls_fib::PortId;

/// One Ethernet frame and the offload metadata that travels with it: a pointer to its
/// [`PacketBuffer`], which holds both, so that moving a packet between a batch and a
/// queue copies 8 bytes. Moved whole (40 bytes, as it was), a packet whose fields had just
/// been written was read back before the writes reached the cache: a store-forwarding
/// stall at every queue a frame passed (a fifth of `Dataplane::input`'s samples, two
/// fifths of the pipeline bench's receive loop), however the fields were laid out.
pub struct Packet(Box<PacketBuffer>);

/// What a [`Packet`] points to: its buffer and its metadata.
pub struct PacketBuffer {
    /// `BUFFER_LEN` bytes. As an array of that length (`Box<[u8; BUFFER_LEN]>`) it saved
    /// about 20 instructions a frame but ran 3-4 ns a frame slower in the pipeline bench.
    buf: Box<[u8]>,
    /// Where the frame starts in `buf`, and its length: 32 bits, so that their sum cannot
    /// overflow and slicing the frame checks one bound.
    start: u32,
    len: u32,
    /// GSO and checksum metadata, offsets relative to the start of the frame.
    pub offload: virtio_net::Repr,
    /// The port it arrived on (or the port it leaves by, once the pipeline decided).
    pub port: PortId,
}

impl std::ops::Deref for Packet {
    type Target = PacketBuffer;

    #[inline(always)]
    fn deref(&self) -> &PacketBuffer {
        &self.0
    }
}

impl std::ops::DerefMut for Packet {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut PacketBuffer {
        &mut self.0
    }
}

impl std::fmt::Debug for Packet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packet")
            .field("port", &self.port)
            .field("len", &self.len)
            .field("offload", &self.offload)
            .finish()
    }
}

impl Default for Packet {
    fn default() -> Self {
        Packet::new()
    }
}

impl Packet {
    /// A new empty packet with its own buffer. Use [`PacketPool::get`] in the forwarding loop.
    pub fn new() -> Packet {
        Packet(Box::new(PacketBuffer {
            buf: vec![0u8; BUFFER_LEN].into_boxed_slice(),
            start: HEADROOM as u32,
            len: 0,
            offload: virtio_net::Repr::default(),
            port: 0,
        }))
    }

    /// A packet holding a copy of `frame`, for tests and for frames built by the router.
    pub fn from_frame(port: PortId, frame: &[u8]) -> Packet {
        let mut p = Packet::new();
        p.port = port;
        p.set_frame(frame);
        p
    }
}

impl PacketBuffer {
    /// The frame, from the Ethernet header on.
    #[inline]
    pub fn frame(&self) -> &[u8] {
        &self.buf[self.start as usize..self.start as usize + self.len as usize]
    }

    /// The frame, writable.
    #[inline]
    pub fn frame_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start as usize..self.start as usize + self.len as usize]
    }

    /// Frame length in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True for a frame of no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes free in front of the frame.
    pub fn headroom(&self) -> usize {
        self.start as usize
    }

    /// Bytes free after the frame.
    pub fn tailroom(&self) -> usize {
        self.buf.len() - self.start as usize - self.len as usize
    }

    /// Resets the packet and returns the whole area after the headroom for a port to
    /// receive into; then call [`set_received`](PacketBuffer::set_received).
    #[inline]
    pub fn receive_area(&mut self) -> &mut [u8] {
        self.start = HEADROOM as u32;
        self.len = 0;
        self.offload = virtio_net::Repr::default();
        &mut self.buf[HEADROOM..]
    }

    /// [`receive_area`](PacketBuffer::receive_area) with `prefix` bytes in front of it,
    /// in the headroom (at most [`HEADROOM`]): for a port whose frames come after a
    /// header of their own (virtio-net's), so that header and frame are copied in one.
    /// The frame then starts at `prefix`; [`set_received`](PacketBuffer::set_received)
    /// takes its length as for `receive_area`.
    #[inline]
    pub fn receive_area_after(&mut self, prefix: usize) -> &mut [u8] {
        let at = HEADROOM - prefix.min(HEADROOM);
        self.receive_area();
        &mut self.buf[at..]
    }

    /// The `prefix` bytes a port received in front of the frame
    /// ([`receive_area_after`](PacketBuffer::receive_area_after)), until the frame is
    /// changed.
    #[inline]
    pub fn received_prefix(&self, prefix: usize) -> &[u8] {
        &self.buf[HEADROOM - prefix.min(HEADROOM)..HEADROOM]
    }

    /// Sets the length of a frame received into [`receive_area`](PacketBuffer::receive_area).
    #[inline]
    pub fn set_received(&mut self, len: usize) {
        self.start = HEADROOM as u32;
        self.len = len.min(MAX_FRAME) as u32;
    }

    /// Replaces the frame with a copy of `frame` (truncated to [`MAX_FRAME`]).
    pub fn set_frame(&mut self, frame: &[u8]) {
        let n = frame.len().min(MAX_FRAME);
        self.start = HEADROOM as u32;
        self.len = n as u32;
        self.buf[HEADROOM..HEADROOM + n].copy_from_slice(&frame[..n]);
    }

    /// Grows the frame by `n` bytes at the front and returns the new frame. `None` when
    /// the headroom is exhausted.
    pub fn push_front(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.headroom() {
            return None;
        }
        self.start -= n as u32;
        self.len += n as u32;
        Some(self.frame_mut())
    }

    /// Removes `n` bytes from the front. `None` when the frame is shorter.
    pub fn pull_front(&mut self, n: usize) -> Option<()> {
        if n > self.len() {
            return None;
        }
        self.start += n as u32;
        self.len -= n as u32;
        Some(())
    }

    /// Shortens the frame to `len` bytes (no-op if already shorter).
    pub fn truncate(&mut self, len: usize) {
        if len < self.len() {
            self.len = len as u32;
        }
    }

    /// Grows the frame at the end by `n` bytes (contents unspecified). `None` when the
    /// buffer is full.
    pub fn extend(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.tailroom() {
            return None;
        }
        self.len += n as u32;
        Some(self.frame_mut())
    }

    /// Moves the first `n` bytes of the frame `by` bytes toward the front (`by` > 0) or
    /// the back, opening or closing a gap behind them: the primitive under label push
    /// (open 4 bytes behind the Ethernet header) and pop (close them).
    #[inline(always)]
    pub fn shift_head(&mut self, n: usize, by: isize) -> Option<()> {
        if by >= 0 {
            let by = by as usize;
            if by > self.headroom() || n > self.len() {
                return None;
            }
            let s = self.headroom();
            self.move_head(s, n, s - by);
            self.start -= by as u32;
            self.len += by as u32;
        } else {
            let by = by.unsigned_abs();
            if n.saturating_add(by) > self.len() {
                return None;
            }
            let s = self.headroom();
            self.move_head(s, n, s + by);
            self.start += by as u32;
            self.len -= by as u32;
        }
        Some(())
    }

    /// Moves `n` bytes at `from` to `to` in the buffer. The Ethernet header, which every
    /// push and pop moves, goes as one fixed-size copy instead of a call to `memmove`.
    #[inline(always)]
    fn move_head(&mut self, from: usize, n: usize, to: usize) {
        match <[u8; ETH_HEADER]>::try_from(&self.buf[from..from + n]) {
            Ok(head) => self.buf[to..to + ETH_HEADER].copy_from_slice(&head),
            Err(_) => self.buf.copy_within(from..from + n, to),
        }
    }
}

/// A free list of packet buffers, owned by one forwarding thread.
pub struct PacketPool {
    free: Vec<Packet>,
    capacity: usize,
}

impl PacketPool {
    /// A pool of `capacity` buffers, allocated now.
    pub fn new(capacity: usize) -> PacketPool {
        PacketPool { free: (0..capacity).map(|_| Packet::new()).collect(), capacity }
    }

    /// A buffer, or `None` when all are in flight.
    #[inline]
    pub fn get(&mut self) -> Option<Packet> {
        let mut p = self.free.pop()?;
        p.start = HEADROOM as u32;
        p.len = 0;
        p.offload = virtio_net::Repr::default();
        p.port = 0;
        Some(p)
    }

    /// Returns a buffer to the pool. Buffers beyond the pool's capacity are freed.
    #[inline]
    pub fn put(&mut self, p: Packet) {
        if self.free.len() < self.capacity {
            self.free.push(p);
        }
    }

    /// Buffers available now.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Buffers the pool holds when none is in flight.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_received_after_a_header_starts_where_a_plain_one_does() {
        let mut p = Packet::new();
        p.set_frame(&[9; 100]);
        p.offload.gso_size = 1448;
        let area = p.receive_area_after(12);
        assert_eq!(area.len(), 12 + MAX_FRAME);
        area[..12].fill(0xee);
        area[12..76].copy_from_slice(&[7; 64]);
        p.set_received(64);
        assert_eq!(p.frame(), &[7; 64]);
        assert_eq!(p.received_prefix(12), &[0xee; 12]);
        assert_eq!(p.headroom(), HEADROOM, "the header's bytes are headroom again");
        assert_eq!(p.offload, virtio_net::Repr::default(), "reset as receive_area resets");
        // A prefix beyond the headroom gets all of it, no more.
        assert_eq!(p.receive_area_after(HEADROOM + 1).len(), BUFFER_LEN);
    }

    /// Batches, queues and the pool move packets: a word each, whatever the metadata holds.
    #[test]
    fn a_packet_moves_as_one_pointer() {
        assert_eq!(size_of::<Packet>(), size_of::<usize>());
        assert_eq!(size_of::<Option<Packet>>(), size_of::<usize>());
    }

    #[test]
    fn shift_head_opens_and_closes_a_gap_behind_the_ethernet_header() {
        let mut p = Packet::from_frame(0, &[1, 2, 3, 4, 5, 6]);
        p.shift_head(2, 4).unwrap();
        assert_eq!(p.len(), 10);
        assert_eq!(&p.frame()[..2], &[1, 2]);
        assert_eq!(&p.frame()[6..], &[3, 4, 5, 6]);
        p.shift_head(2, -4).unwrap();
        assert_eq!(p.frame(), &[1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn push_beyond_headroom_fails_cleanly() {
        let mut p = Packet::from_frame(0, &[0; 20]);
        assert!(p.push_front(HEADROOM + 1).is_none());
        assert!(p.shift_head(14, (HEADROOM + 1) as isize).is_none());
        assert!(p.pull_front(21).is_none());
        assert_eq!(p.len(), 20);
    }
}
