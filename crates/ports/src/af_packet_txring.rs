//! A `PACKET_TX_RING` transmit ring (`TPACKET_V2`, `PACKET_VNET_HDR`) on an Ethernet
//! interface: user space writes the virtio-net header and the frame into a frame of a
//! ring shared with the kernel, marks it `TP_STATUS_SEND_REQUEST`, and one `send(fd,
//! NULL, 0)` transmits every marked frame. [`AfPacketTxRing::recv_from`] goes one step
//! further: it `recvmmsg`s from another packet socket straight into free ring frames, so
//! a forwarder makes no copy of its own on the way out.
//!
//! The socket is transmit-only: it is bound to the interface with protocol 0, so the
//! kernel queues nothing on it; receive through another socket (an
//! [`crate::AfPacketPort`] with `PACKET_IGNORE_OUTGOING`, which then does not see what
//! this ring sends).
//!
//! # Frame layout (kernel 6.18, `net/packet/af_packet.c`)
//!
//! A ring frame is `[struct tpacket2_hdr (32 B)][area]`. `tpacket_parse_header` takes the
//! data at `tp_hdrlen - sizeof(sockaddr_ll)` = `DATA_OFFSET` (32), or, with
//! `PACKET_TX_HAS_OFF` (enabled here), at `tp_mac`, which may lie anywhere from 32 to
//! `frame_size - tp_len`. With `PACKET_VNET_HDR` the data begins with the 10-byte
//! `virtio_net_hdr` and the Ethernet frame follows it directly; `tp_len` counts both.
//! (`tp_mac` points at the virtio-net header, not at the Ethernet header; `tp_net` is
//! only read by `SOCK_DGRAM` sockets.) `tpacket_fill_skb` copies `max(hdr_len, 14)`
//! bytes into the skb's linear part and attaches the rest of the frame as page
//! fragments (`get_page`, no copy), at most `MAX_SKB_FRAGS` (17) of them. Tested: frames
//! at area offsets 0 and 256, and 64 KB `GSO_TCPV4` super-frames, reach the veth peer
//! whole with their virtio-net header.
//!
//! # The kernel copies anyway on a veth or a TAP
//!
//! `tpacket_fill_skb` marks the skb zero-copy (`skb_zcopy_set_nouarg`), so that the ring
//! frame is never reused while something still reads it: wherever an skb would outlive
//! its socket or be cloned, `skb_orphan_frags` copies the fragments into fresh pages
//! (`skb_copy_ubufs`). A veth does this in `____dev_forward_skb` for every frame (seen
//! in `perf`: `packet_sendmsg` → `veth_xmit` → `__dev_forward_skb2` → `skb_copy_ubufs`
//! → `memcpy`), a TAP in `tun_net_xmit` (`skb_orphan_frags_rx`), and so does a clone
//! for a packet tap (`tcpdump`). So on the ports vmpls runs on, the transmit copy is not
//! avoided, only moved from `sendmsg` into `veth_xmit`; only a NIC that transmits from
//! the fragments (DMA) would skip it. Because of that copy the frame goes back to
//! `TP_STATUS_AVAILABLE` early: when the skb is orphaned or freed on the peer's side,
//! in the softirq that the `send` itself runs; the tests see the frame free as soon as
//! `send` returns, and the benchmark never found the ring full.
//!
//! # Pitfalls this module handles
//!
//! - The kernel walks the ring strictly in order from its own head and stops at the first
//!   frame that is not `SEND_REQUEST`: frames are filled and submitted in ring order, with
//!   no holes ([`AfPacketTxRing::recv_from`] closes the holes that dropped messages leave).
//! - `PACKET_LOSS` is set: a frame `tpacket_snd` cannot parse is given back and skipped
//!   instead of stopping the ring with `TP_STATUS_WRONG_FORMAT`.
//! - A frame the device refuses (measured: `ENOMEM` for an MPLS GSO frame, `ENOBUFS` for a
//!   non-GSO frame above the veth MTU) is set back to `SEND_REQUEST` and the kernel head
//!   stays on it: every later `send` retries it, fails the same way, and nothing behind it
//!   ever leaves (measured: three `send`s, three `ENOBUFS`, the next frame still
//!   `SEND_REQUEST`). [`AfPacketTxRing::flush`] therefore rewrites such a frame with
//!   `tp_len = 0`, which `tpacket_snd` rejects as malformed and, with `PACKET_LOSS`,
//!   skips; the frame is counted by errno in [`PortStats::tx_errors`].
//!
//! # Measured: bump-in-the-wire forwarder, `benches/io.rs`
//!
//! `IO_BENCH_ROUNDS=6 IO_BENCH_SECS=5 CARGO_TARGET_DIR=/work/target-txring cargo bench -p
//! vmpls-ports --features rings --bench io` (as root, 2 vCPUs, kernel 6.18.44; `s0 -- f0 [forwarder] f1
//! -- r0`, iperf3 TCP, one forwarder thread, the three kinds alternating in each round).
//! `mmsg` is `AfPacketPort` both ways; `txring-copy` receives into pool buffers with
//! `recvmmsg` and copies into this ring; `txring-zerocopy` uses `recv_from`. Means of 6
//! rounds (median, standard deviation); CPU is the forwarder thread's user+sys per GB of
//! data forwarded.
//!
//! | sender frames | kind | Gbit/s | median | sd | fwd user s | fwd sys s | CPU s/GB | µs per data frame |
//! |---|---|---|---|---|---|---|---|---|
//! | TSO (avg 64.5 KB) | mmsg | 8.56 | 8.20 | 1.30 | 0.08 | 1.63 | 0.319 | 20.6 |
//! | TSO | txring-copy | 7.48 | 7.37 | 2.16 | 0.34 | 1.29 | 0.347 | 22.4 |
//! | TSO | txring-zerocopy | 7.75 | 7.64 | 1.11 | 0.04 | 1.40 | 0.297 | 19.1 |
//! | 1514 B (`tso off gso off` on `s0`) | mmsg | 1.74 | 1.74 | 0.31 | 0.06 | 2.41 | 2.165 | 3.28 |
//! | 1514 B | txring-copy | 2.18 | 2.15 | 0.24 | 0.11 | 2.00 | 1.483 | 2.25 |
//! | 1514 B | txring-zerocopy | 2.12 | 2.03 | 0.39 | 0.03 | 1.86 | 1.362 | 2.06 |
//!
//! No frame was dropped or refused in any run. Noisy: the load average was 6.5 to 17.5
//! (other engineers' builds and router benchmarks), the forwarder got only 26 to 45 % of
//! a CPU, and a run at a higher load (not used) spread from 0.01 to 9 Gbit/s. An
//! earlier 5-round run at load 11 ranked the same way: TSO mmsg 6.46, copy 3.96, zerocopy
//! 3.67 Gbit/s; 1514 B 1.08, 1.45, 1.27. The receiver acknowledged less often behind the
//! ring (0.03 instead of 0.18 ACKs per data frame at 1514 B), which lowers the ring's CPU
//! per data frame a little beyond its own savings.
//!
//! Verdict: with TSO super-frames the ring is no faster (CPU per GB -7 % zero-copy, +9 %
//! with the user-space copy; throughput within the noise), because the copy it was meant
//! to remove still happens in `veth_xmit`. With 1514-byte frames the ring cuts CPU per
//! frame by about a third, copy or not: the saving is `sendmmsg`'s per-message cost, not
//! the copy. The router does not use this ring today.

use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use vmpls_dataplane::gso;
use vmpls_wire::virtio_net;

use vmpls_sys::{packet, sockopt};

use crate::{PortError, PortStats, mmsg};

/// `PACKET_VERSION` socket option.
const PACKET_VERSION: libc::c_int = 10;
/// `PACKET_TX_RING` socket option.
const PACKET_TX_RING: libc::c_int = 13;
/// `PACKET_LOSS` socket option: skip malformed ring frames instead of stopping.
const PACKET_LOSS: libc::c_int = 14;
/// `PACKET_TX_HAS_OFF` socket option: the data starts at `tp_mac`.
const PACKET_TX_HAS_OFF: libc::c_int = 19;
/// `TPACKET_V2` (the value of `enum tpacket_versions`).
const TPACKET_V2: libc::c_int = 1;

/// Frame status bits (`tp_status`) on a transmit ring. `TP_STATUS_AVAILABLE` is 0; the
/// kernel may add timestamp bits to it.
const TP_STATUS_SEND_REQUEST: u32 = 1;
const TP_STATUS_SENDING: u32 = 2;
const TP_STATUS_WRONG_FORMAT: u32 = 4;
const TP_STATUS_BUSY: u32 = TP_STATUS_SEND_REQUEST | TP_STATUS_SENDING | TP_STATUS_WRONG_FORMAT;

/// Offsets in `struct tpacket2_hdr`.
mod hdr {
    pub const STATUS: usize = 0;
    pub const LEN: usize = 4;
    pub const MAC: usize = 12;
}

/// Where a frame's writable area begins: `TPACKET2_HDRLEN - sizeof(struct sockaddr_ll)`
/// = `TPACKET_ALIGN(sizeof(struct tpacket2_hdr))` = 32, the smallest offset
/// `tpacket_parse_header` accepts.
pub(crate) const DATA_OFFSET: usize = 32;

/// The smallest Ethernet frame the kernel takes from a raw packet socket (its header).
const MIN_FRAME: usize = 14;

/// Most messages one [`AfPacketTxRing::recv_from`] moves.
const RECV_BATCH: usize = mmsg::BATCH;

/// Transmit ring geometry: `frame_nr` frames of `frame_size` bytes, one frame a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxRingConfig {
    /// Bytes per frame (and per block): a multiple of the page size. It must hold
    /// `DATA_OFFSET`, the 10-byte virtio-net header, any headroom the caller keeps and
    /// the frame; 128 KiB holds a 64 KiB super-frame with room to spare.
    pub frame_size: u32,
    /// Number of frames: how many frames may be in flight at once.
    pub frame_nr: u32,
}

impl Default for TxRingConfig {
    fn default() -> Self {
        TxRingConfig { frame_size: 128 << 10, frame_nr: 64 }
    }
}

/// Why a frame could not be submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// Every frame is in flight: wait until the kernel gives some back.
    #[error("no free frame in the transmit ring")]
    Full,
    /// `start + len` exceeds the frame's area, or `len` is shorter than the virtio-net
    /// header and an Ethernet header.
    #[error("frame of {len} bytes at offset {start} does not fit the ring frame's area of {area} bytes")]
    BadLength {
        /// Offset asked for, in the area.
        start: usize,
        /// Length asked for (virtio-net header included).
        len: usize,
        /// Bytes in a frame's area.
        area: usize,
    },
    /// The virtio-net header cannot be decoded, or its offsets lie outside the frame.
    #[error("malformed virtio-net header")]
    BadHeader,
}

/// The ring mapping: `len` bytes at `ptr`, unmapped on drop.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone; Rust references into it never
// outlive a `&mut` borrow of the owning ring, and the kernel side synchronises through
// the frame status words, which are only accessed atomically. Moving it to another
// thread is sound.
unsafe impl Send for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the region returned by our mmap, unmapped once.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// The arrays [`AfPacketTxRing::recv_from`] hands to `recvmmsg`, allocated once.
struct RecvArrays {
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_ll>,
}

// SAFETY: the raw pointers inside `msgs` and `iovs` are rewritten before every
// `recvmmsg` and never dereferenced by Rust code; they point into these arrays and into
// the ring mapping owned by the same ring.
unsafe impl Send for RecvArrays {}

impl RecvArrays {
    fn new() -> RecvArrays {
        // SAFETY: mmsghdr, iovec and sockaddr_ll are plain C data; all zeroes (null
        // pointers, zero lengths) is a valid value.
        let (m, i, a) = unsafe {
            (mem::zeroed::<libc::mmsghdr>(), mem::zeroed::<libc::iovec>(), mem::zeroed::<libc::sockaddr_ll>())
        };
        RecvArrays { msgs: vec![m; RECV_BATCH], iovs: vec![i; RECV_BATCH], addrs: vec![a; RECV_BATCH] }
    }
}

/// Checks a virtio-net header plus frame as the kernel will: returns the frame length.
fn check_frame(data: &[u8]) -> Result<usize, SubmitError> {
    if data.len() < virtio_net::HEADER_LEN + MIN_FRAME {
        return Err(SubmitError::BadHeader);
    }
    let len = data.len() - virtio_net::HEADER_LEN;
    gso::received_offload(&data[..virtio_net::HEADER_LEN], len).map_err(|_| SubmitError::BadHeader)?;
    Ok(len)
}

/// What one [`AfPacketTxRing::recv_from`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvFrom {
    /// Messages `recvmmsg` returned.
    pub received: usize,
    /// Of those, frames submitted to the ring.
    pub submitted: usize,
}

/// A transmit-only packet socket with a `TPACKET_V2` `PACKET_TX_RING` on one interface.
pub struct AfPacketTxRing {
    ifname: String,
    ifindex: u32,
    // Field order: the ring is unmapped before the socket closes.
    ring: Mapping,
    fd: OwnedFd,
    cfg: TxRingConfig,
    /// The next frame user space fills.
    fill: usize,
    /// The oldest submitted frame that was still `SEND_REQUEST` when last looked at.
    unsent: usize,
    /// Frames submitted and not yet taken by the kernel (from `unsent` to `fill`).
    queued: usize,
    /// Per frame: frame bytes (virtio-net header excluded) submitted, for the counters.
    lens: Vec<u32>,
    /// Per frame: rewritten by `flush` after the device refused it.
    poisoned: Vec<bool>,
    recv: RecvArrays,
    stats: PortStats,
}

impl std::fmt::Debug for AfPacketTxRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfPacketTxRing")
            .field("ifname", &self.ifname)
            .field("ifindex", &self.ifindex)
            .field("fd", &self.fd.as_raw_fd())
            .field("ring", &self.cfg)
            .field("queued", &self.queued)
            .finish()
    }
}

/// The socket (transmit only; poll it for `POLLOUT`).
impl AsFd for AfPacketTxRing {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AfPacketTxRing {
    /// Opens a transmit ring on interface `ifname` of the calling thread's network
    /// namespace (same interface checks as [`crate::AfPacketPort::open`]).
    pub fn open(ifname: &str, cfg: TxRingConfig) -> Result<AfPacketTxRing, PortError> {
        let io_err = |op: &'static str| {
            move |source: io::Error| PortError::Io { ifname: ifname.to_owned(), op, source }
        };
        let page = 4096u32;
        if cfg.frame_nr == 0
            || !cfg.frame_size.is_multiple_of(page)
            || (cfg.frame_size as usize) < DATA_OFFSET + virtio_net::HEADER_LEN + MIN_FRAME
        {
            return Err(io_err(
                "check the transmit ring geometry (frame size a multiple of 4096, frames > 0)",
            )(io::Error::from(io::ErrorKind::InvalidInput)));
        }
        let (fd, ifindex, _details, _mtu) = crate::af_packet::open_checked(ifname, None)?;
        let sock = fd.as_fd();
        // All of these must be set before the ring exists (EBUSY after).
        sockopt::set_int(sock, libc::SOL_PACKET, packet::PACKET_VNET_HDR, 1)
            .map_err(io_err("enable PACKET_VNET_HDR"))?;
        sockopt::set_int(sock, libc::SOL_PACKET, PACKET_VERSION, TPACKET_V2)
            .map_err(io_err("select TPACKET_V2"))?;
        sockopt::set_int(sock, libc::SOL_PACKET, PACKET_LOSS, 1).map_err(io_err("enable PACKET_LOSS"))?;
        sockopt::set_int(sock, libc::SOL_PACKET, PACKET_TX_HAS_OFF, 1)
            .map_err(io_err("enable PACKET_TX_HAS_OFF"))?;
        let req = libc::tpacket_req {
            tp_block_size: cfg.frame_size,
            tp_block_nr: cfg.frame_nr,
            tp_frame_size: cfg.frame_size,
            tp_frame_nr: cfg.frame_nr,
        };
        sockopt::set(sock, libc::SOL_PACKET, PACKET_TX_RING, &req)
            .map_err(io_err("set up the transmit ring (PACKET_TX_RING)"))?;
        let len = cfg.frame_size as usize * cfg.frame_nr as usize;
        // SAFETY: a fresh shared mapping of the socket's ring, of exactly the size the
        // kernel allocated; the result is checked before use and owned by `Mapping`.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                sock.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io_err("map the transmit ring")(io::Error::last_os_error()));
        }
        let ring = Mapping {
            ptr: NonNull::new(ptr.cast()).ok_or_else(|| {
                io_err("map the transmit ring")(io::Error::from(io::ErrorKind::AddrNotAvailable))
            })?,
            len,
        };
        packet::bind(sock, ifindex, 0).map_err(|source| {
            if source.raw_os_error() == Some(libc::ENODEV) {
                PortError::NoSuchInterface { ifname: ifname.to_owned() }
            } else {
                io_err("bind the packet socket to the interface")(source)
            }
        })?;
        // Every in-flight frame counts against the send buffer (`sk_wmem_alloc`): room
        // for the whole ring twice over, so the ring, not the buffer, is the limit.
        let sndbuf = (2 * len).clamp(4 << 20, i32::MAX as usize / 2) as libc::c_int;
        if sockopt::set_int(sock, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, sndbuf).is_err() {
            let _ = sockopt::set_int(sock, libc::SOL_SOCKET, libc::SO_SNDBUF, sndbuf);
        }
        tracing::debug!(ifname, ifindex, ?cfg, "AF_PACKET transmit ring open");
        let n = cfg.frame_nr as usize;
        Ok(AfPacketTxRing {
            ifname: ifname.to_owned(),
            ifindex,
            ring,
            fd,
            cfg,
            fill: 0,
            unsent: 0,
            queued: 0,
            lens: vec![0; n],
            poisoned: vec![false; n],
            recv: RecvArrays::new(),
            stats: PortStats::default(),
        })
    }

    /// The Linux interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The Linux interface index (in the namespace the ring was opened in).
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The ring geometry.
    pub fn config(&self) -> TxRingConfig {
        self.cfg
    }

    /// Bytes of a frame's writable area (virtio-net header, headroom and frame).
    pub fn area_len(&self) -> usize {
        self.cfg.frame_size as usize - DATA_OFFSET
    }

    /// Frames submitted and not yet taken by the kernel (a `flush` is due).
    pub fn pending(&self) -> usize {
        self.queued
    }

    /// Counters: `tx_*` for frames sent, `rx_*` for what [`AfPacketTxRing::recv_from`]
    /// received; `tx_dropped` counts `recv_from` calls that found no free frame.
    pub fn stats(&self) -> PortStats {
        self.stats
    }

    fn frame_ptr(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.cfg.frame_nr as usize);
        // SAFETY: `i < frame_nr`, so the offset stays inside the mapping.
        unsafe { self.ring.ptr.as_ptr().add(i * self.cfg.frame_size as usize) }
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: the status word is the first field of a frame, which starts on a page
        // boundary (4-byte aligned), inside the mapping that lives as long as `self`; it
        // is shared with the kernel, hence only accessed atomically.
        unsafe { AtomicU32::from_ptr(self.frame_ptr(i).add(hdr::STATUS).cast()) }
    }

    /// True when frame `i` belongs to user space (not queued, not in flight).
    fn is_free(&self, i: usize) -> bool {
        self.status(i).load(Ordering::Acquire) & TP_STATUS_BUSY == 0
    }

    /// How many frames, in ring order from the next one to fill, are free now.
    pub fn free_frames(&self) -> usize {
        let n = self.cfg.frame_nr as usize;
        let mut k = 0;
        while self.queued + k < n && self.is_free((self.fill + k) % n) {
            k += 1;
        }
        k
    }

    /// The writable area of the next free frame (in ring order), where the virtio-net
    /// header and the Ethernet frame go (at any offset: see [`AfPacketTxRing::submit`]).
    /// `None` when the ring is full.
    pub fn next_area(&mut self) -> Option<&mut [u8]> {
        if self.queued >= self.cfg.frame_nr as usize || !self.is_free(self.fill) {
            return None;
        }
        let area = self.area_len();
        // SAFETY: the area lies inside frame `fill` of the mapping; the frame is free
        // (status checked with Acquire), so the kernel neither reads nor writes it until
        // `submit` stores SEND_REQUEST, which needs `&mut self` and so ends this borrow.
        Some(unsafe { std::slice::from_raw_parts_mut(self.frame_ptr(self.fill).add(DATA_OFFSET), area) })
    }

    /// Hands the next free frame to the kernel: its virtio-net header and frame are the
    /// `len` bytes at offset `start` of the area [`AfPacketTxRing::next_area`] returned.
    /// Nothing is sent until [`AfPacketTxRing::flush`].
    pub fn submit(&mut self, start: usize, len: usize) -> Result<(), SubmitError> {
        let area = self.area_len();
        if len < virtio_net::HEADER_LEN + MIN_FRAME
            || start.checked_add(len).is_none_or(|end| end > area)
            || DATA_OFFSET + start > u16::MAX as usize
        {
            return Err(SubmitError::BadLength { start, len, area });
        }
        let data = self.next_area().ok_or(SubmitError::Full)?;
        let frame_len = check_frame(&data[start..start + len])?;
        let i = self.fill;
        self.lens[i] = frame_len as u32;
        self.publish(i, start, len);
        Ok(())
    }

    /// Writes frame `i`'s header for `len` bytes at area offset `start` and marks it
    /// `SEND_REQUEST`; `i` must be `self.fill` and free.
    fn publish(&mut self, i: usize, start: usize, len: usize) {
        let p = self.frame_ptr(i);
        // SAFETY: `tp_len` (u32 at 4) and `tp_mac` (u16 at 12) lie in frame `i`'s header,
        // suitably aligned (frames are page aligned); the frame is ours (free), so the
        // kernel does not read them before the Release store of the status below.
        unsafe {
            p.add(hdr::LEN).cast::<u32>().write_volatile(len as u32);
            p.add(hdr::MAC).cast::<u16>().write_volatile((DATA_OFFSET + start) as u16);
        }
        self.poisoned[i] = false;
        self.status(i).store(TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.fill = (i + 1) % self.cfg.frame_nr as usize;
        self.queued += 1;
    }

    /// Moves `unsent` past the frames the kernel has taken since, counting them.
    fn reap(&mut self) {
        let n = self.cfg.frame_nr as usize;
        while self.queued > 0
            && self.status(self.unsent).load(Ordering::Acquire) & TP_STATUS_SEND_REQUEST == 0
        {
            if !self.poisoned[self.unsent] {
                self.stats.tx_packets += 1;
                self.stats.tx_bytes += u64::from(self.lens[self.unsent]);
            }
            self.unsent = (self.unsent + 1) % n;
            self.queued -= 1;
        }
    }

    /// Sends every submitted frame: `send(fd, NULL, 0, MSG_DONTWAIT)`. Returns how many
    /// frames the kernel took. When the send buffer is full, frames stay queued for the
    /// next call. A frame the device refuses is dropped (counted by errno) so that it
    /// cannot stall the ring.
    pub fn flush(&mut self) -> usize {
        let before = self.stats.tx_packets;
        // Each round either ends or drops one refused frame: bounded by the ring size.
        for _ in 0..=self.cfg.frame_nr {
            if self.queued == 0 {
                break;
            }
            // An empty send is what a transmit ring expects: the kernel reads the frames
            // we marked SEND_REQUEST from the mapping.
            let err =
                rustix::net::send(&self.fd, &[], rustix::net::SendFlags::DONTWAIT).err().map(io::Error::from);
            self.reap();
            let Some(err) = err else {
                // Everything went, or the send buffer filled up (the kernel stopped
                // early and returned what it sent): try again later.
                break;
            };
            match err.raw_os_error().unwrap_or(0) {
                libc::EINTR => {}
                // The send buffer is full: the frames stay queued for the next call.
                libc::EAGAIN => break,
                errno => {
                    self.stats.tx_errors.record(errno);
                    if self.queued == 0 {
                        break;
                    }
                    // The kernel set the refused frame back to SEND_REQUEST and keeps its
                    // head on it: make it one `tpacket_snd` rejects and skips.
                    let i = self.unsent;
                    // SAFETY: frame `i` is SEND_REQUEST and no `send` is running (we are
                    // the only caller, and this thread is between calls), so the kernel
                    // does not read `tp_len` now; the next `send` sees the new value
                    // after the Release store below.
                    unsafe { self.frame_ptr(i).add(hdr::LEN).cast::<u32>().write_volatile(0) };
                    self.poisoned[i] = true;
                    self.status(i).store(TP_STATUS_SEND_REQUEST, Ordering::Release);
                }
            }
        }
        (self.stats.tx_packets - before) as usize
    }

    /// Receives up to `max` frames from packet socket `rx` (which must have
    /// `PACKET_VNET_HDR` set) directly into free frames of this ring, the virtio-net
    /// header at area offset `start` and the Ethernet frame right after it, and submits
    /// the good ones (send them with [`AfPacketTxRing::flush`]). Truncated frames,
    /// malformed headers and our own outgoing frames are counted and dropped; the frames
    /// after them are moved up so the ring has no holes. Receives nothing while the ring
    /// is full (the frames wait in `rx`'s socket buffer).
    pub fn recv_from(&mut self, rx: BorrowedFd<'_>, start: usize, max: usize) -> io::Result<RecvFrom> {
        let n = self.cfg.frame_nr as usize;
        let area = self.area_len();
        if start + virtio_net::HEADER_LEN + MIN_FRAME > area || DATA_OFFSET + start > u16::MAX as usize {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let want = self.free_frames().min(max).min(RECV_BATCH);
        if want == 0 {
            if max > 0 {
                self.stats.tx_dropped += 1;
            }
            return Ok(RecvFrom::default());
        }
        for k in 0..want {
            let i = (self.fill + k) % n;
            // SAFETY: frame `i` is free (checked by `free_frames`), so the offset stays
            // inside its area and the kernel's ring code does not touch it.
            let base = unsafe { self.frame_ptr(i).add(DATA_OFFSET + start) };
            self.recv.iovs[k] = libc::iovec { iov_base: base.cast(), iov_len: area - start };
            let h = &mut self.recv.msgs[k].msg_hdr;
            h.msg_name = (&mut self.recv.addrs[k] as *mut libc::sockaddr_ll).cast();
            h.msg_namelen = mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            h.msg_iov = &mut self.recv.iovs[k];
            h.msg_iovlen = 1;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
            self.recv.msgs[k].msg_len = 0;
        }
        // SAFETY: messages 0..want were prepared just above; every pointer points into
        // this ring's arrays or into the areas of free ring frames, which user space owns
        // until `publish`, with the lengths given.
        let r = unsafe {
            libc::recvmmsg(
                rx.as_raw_fd(),
                self.recv.msgs.as_mut_ptr(),
                want as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(RecvFrom::default()),
                _ => Err(e),
            };
        }
        let got = r as usize;
        let fill0 = self.fill;
        let mut out = 0;
        for k in 0..got {
            let msg_len = self.recv.msgs[k].msg_len as usize;
            let flags = self.recv.msgs[k].msg_hdr.msg_flags;
            let pkttype = self.recv.addrs[k].sll_pkttype;
            // Message k landed in the k-th free frame from where filling started.
            let src = (fill0 + k) % n;
            if pkttype == packet::PACKET_OUTGOING {
                self.stats.rx_outgoing += 1;
                continue;
            }
            if flags & libc::MSG_TRUNC != 0 || msg_len > area - start {
                self.stats.rx_truncated += 1;
                continue;
            }
            // SAFETY: frame `src` is free and `msg_len` bytes at `start` of its area were
            // just written by the kernel (bounded by the area, checked above).
            let data =
                unsafe { std::slice::from_raw_parts(self.frame_ptr(src).add(DATA_OFFSET + start), msg_len) };
            let frame_len = match check_frame(data) {
                Ok(l) => l,
                Err(_) => {
                    self.stats.rx_bad_vnet_hdr += 1;
                    continue;
                }
            };
            let dst = self.fill;
            if dst != src {
                // A dropped message left a hole: move this frame up (rare).
                // SAFETY: frames `src` and `dst` are distinct free frames of the mapping,
                // so the two ranges do not overlap; both lie inside their areas.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.frame_ptr(src).add(DATA_OFFSET + start),
                        self.frame_ptr(dst).add(DATA_OFFSET + start),
                        msg_len,
                    );
                }
            }
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += frame_len as u64;
            self.lens[dst] = frame_len as u32;
            self.publish(dst, start, msg_len);
            out += 1;
        }
        Ok(RecvFrom { received: got, submitted: out })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TSO_HDR: [u8; 10] = [0x01, 0x01, 0x42, 0x00, 0xa8, 0x05, 0x22, 0x00, 0x10, 0x00];

    #[test]
    fn frames_are_checked_as_the_kernel_checks_them() {
        let mut d = vec![0u8; 10 + 1000];
        d[..10].copy_from_slice(&TSO_HDR);
        assert_eq!(check_frame(&d), Ok(1000));
        assert_eq!(check_frame(&d[..10 + 60]), Err(SubmitError::BadHeader), "hdr_len 66 > 60");
        assert_eq!(check_frame(&d[..10 + 13]), Err(SubmitError::BadHeader), "shorter than Ethernet");
        let mut bad = d.clone();
        bad[1] = 9;
        assert_eq!(check_frame(&bad), Err(SubmitError::BadHeader));
        let plain = vec![0u8; 10 + 14];
        assert_eq!(check_frame(&plain), Ok(14));
    }

    /// Network tests against a real veth pair, in a namespace each test creates and
    /// removes on drop, even on panic. Need root.
    mod net {
        use std::time::{Duration, Instant};

        use vmpls_dataplane::{Packet, PacketPool};
        use vmpls_wire::virtio_net::{self, GsoType};

        use super::super::*;
        use crate::{AfPacketPort, Port};
        use vmpls_testkit::Netns;

        const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0xaa, 1];
        const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0xbb, 1];

        /// A namespace with the veth pair `fa` (MAC_A) -- `fb` (MAC_B), MTU 1500.
        fn lab(tag: &str) -> Netns {
            let ns = Netns::without_ipv6(&format!("txr-{tag}"));
            let mac = |m: [u8; 6]| m.map(|b| format!("{b:02x}")).join(":");
            ns.veth(("fa", &mac(MAC_A)), ("fb", &mac(MAC_B)), 1500);
            ns
        }

        /// An Ethernet frame of `len` bytes, ethertype 0x88b5, payload a pattern from `seed`.
        fn test_frame(len: usize, seed: u8) -> Vec<u8> {
            let mut f = Vec::with_capacity(len);
            f.extend_from_slice(&MAC_B);
            f.extend_from_slice(&MAC_A);
            f.extend_from_slice(&0x88b5u16.to_be_bytes());
            while f.len() < len {
                f.push((f.len() as u8).wrapping_mul(7).wrapping_add(seed));
            }
            f
        }

        /// An IPv4 TCP super-frame of `len` bytes (Ethernet, IPv4 20, TCP 32) behind
        /// `ethertype` and `labels` MPLS label stack entries.
        fn tcp_super_frame(len: usize, ethertype: u16, labels: usize) -> Vec<u8> {
            let mut f = Vec::with_capacity(len);
            f.extend_from_slice(&MAC_B);
            f.extend_from_slice(&MAC_A);
            f.extend_from_slice(&ethertype.to_be_bytes());
            for k in 0..labels {
                let bos = if k + 1 == labels { 0x100 } else { 0 };
                f.extend_from_slice(&((100u32 << 12) | bos | 64).to_be_bytes());
            }
            let ip_len = (len - f.len()) as u16;
            let mut iph = [0u8; 20];
            iph[0] = 0x45;
            iph[2..4].copy_from_slice(&ip_len.to_be_bytes());
            iph[6] = 0x40;
            iph[8] = 64;
            iph[9] = 6;
            iph[12..16].copy_from_slice(&[198, 18, 0, 1]);
            iph[16..20].copy_from_slice(&[198, 18, 0, 2]);
            let sum = iph.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum::<u32>();
            let sum = (sum & 0xffff) + (sum >> 16);
            iph[10..12].copy_from_slice(&(!((sum & 0xffff) + (sum >> 16)) as u16).to_be_bytes());
            f.extend_from_slice(&iph);
            let mut tcp = [0u8; 32];
            tcp[0..2].copy_from_slice(&5001u16.to_be_bytes());
            tcp[2..4].copy_from_slice(&5201u16.to_be_bytes());
            tcp[12] = 8 << 4;
            tcp[13] = 0x10;
            tcp[14..16].copy_from_slice(&512u16.to_be_bytes());
            tcp[20..22].copy_from_slice(&[1, 1]);
            tcp[22] = 8;
            tcp[23] = 10;
            f.extend_from_slice(&tcp);
            while f.len() < len {
                f.push(f.len() as u8);
            }
            f
        }

        fn tso_repr(l2: u16) -> virtio_net::Repr {
            virtio_net::Repr {
                needs_csum: true,
                gso_type: GsoType::TcpV4,
                hdr_len: l2 + 52,
                gso_size: 1448,
                csum_start: l2 + 20,
                csum_offset: 16,
                ..Default::default()
            }
        }

        /// Writes `offload` and `frame` at `start` of the next free frame and submits it.
        fn put(ring: &mut AfPacketTxRing, start: usize, offload: &virtio_net::Repr, frame: &[u8]) {
            let area = ring.next_area().expect("a free frame");
            offload.emit(&mut virtio_net::Header::new_unchecked(&mut area[start..start + 10]));
            area[start + 10..start + 10 + frame.len()].copy_from_slice(frame);
            ring.submit(start, 10 + frame.len()).expect("submit");
        }

        /// Frames `port` receives within two seconds, until `want` of them.
        fn receive(port: &mut AfPacketPort, pool: &mut PacketPool, want: usize) -> Vec<Packet> {
            let deadline = Instant::now() + Duration::from_secs(2);
            let mut got = Vec::new();
            while got.len() < want && Instant::now() < deadline {
                vmpls_sys::wait_readable(&*port, std::time::Duration::from_millis(50));
                port.recv_batch(pool, &mut got, 64).expect("recv_batch");
            }
            got
        }

        #[test]
        fn frames_leave_the_ring_whole_with_their_virtio_net_header() {
            let ns = lab("whole");
            let mut ring = ns.run(|| AfPacketTxRing::open("fa", TxRingConfig::default()).unwrap());
            let mut peer = ns.run(|| AfPacketPort::open(0, "peer", "fb", None).unwrap());
            let mut pool = PacketPool::new(16);
            let small = test_frame(60, 1);
            let big = tcp_super_frame(64_000, 0x0800, 0);
            assert_eq!(ring.free_frames(), 64);
            put(&mut ring, 0, &virtio_net::Repr::default(), &small);
            // With PACKET_TX_HAS_OFF the data may start anywhere: here after 256 bytes of
            // headroom, as a router that pushes labels in place would need.
            put(&mut ring, 256, &virtio_net::Repr::default(), &small);
            put(&mut ring, 0, &tso_repr(14), &big);
            put(&mut ring, 256, &tso_repr(14), &big);
            assert_eq!(ring.pending(), 4);
            assert_eq!(ring.flush(), 4);
            assert_eq!(ring.pending(), 0);
            let got = receive(&mut peer, &mut pool, 4);
            assert_eq!(got.len(), 4, "all four arrive");
            assert_eq!(got[0].frame(), &small[..]);
            assert_eq!(got[1].frame(), &small[..]);
            for p in &got[2..] {
                assert_eq!(p.frame(), &big[..], "the super-frame arrives unsegmented");
                assert_eq!(p.offload.gso_type, GsoType::TcpV4);
                assert_eq!(p.offload.gso_size, 1448);
            }
            let s = ring.stats();
            assert_eq!((s.tx_packets, s.tx_bytes), (4, 2 * 60 + 2 * 64_000));
            assert_eq!(s.tx_errors.total(), 0);
        }

        #[test]
        fn a_frame_reused_once_available_does_not_change_what_the_peer_reads() {
            let ns = lab("reuse");
            let cfg = TxRingConfig { frame_size: 128 << 10, frame_nr: 1 };
            let mut ring = ns.run(|| AfPacketTxRing::open("fa", cfg).unwrap());
            let mut peer = ns.run(|| AfPacketPort::open(0, "peer", "fb", None).unwrap());
            let mut pool = PacketPool::new(4);
            // 1500 bytes: beyond the 14 copied into the skb head, the rest are page
            // fragments of the ring frame.
            let first = test_frame(1500, 1);
            put(&mut ring, 0, &virtio_net::Repr::default(), &first);
            assert_eq!(ring.flush(), 1);
            // On a veth the frame is free again before the peer read anything.
            let deadline = Instant::now() + Duration::from_secs(1);
            while ring.free_frames() == 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(ring.free_frames(), 1, "the frame came back");
            let area = ring.next_area().expect("the one frame");
            area[10..10 + 1500].copy_from_slice(&test_frame(1500, 99));
            let got = receive(&mut peer, &mut pool, 1);
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].frame(), &first[..], "the kernel copied the fragments (skb_orphan_frags)");
        }

        #[test]
        fn a_frame_the_device_refuses_does_not_stall_the_ring() {
            let ns = lab("refuse");
            let mut ring = ns.run(|| AfPacketTxRing::open("fa", TxRingConfig::default()).unwrap());
            let mut peer = ns.run(|| AfPacketPort::open(0, "peer", "fb", None).unwrap());
            let mut pool = PacketPool::new(16);
            let before = test_frame(100, 1);
            let after = test_frame(100, 2);
            // An MPLS TCP super-frame marked GSO: no MPLS GSO on a veth (ENOMEM).
            let mpls = tcp_super_frame(30_000, 0x8847, 1);
            // A 3000-byte frame without GSO on a 1500-byte link: veth drops it (ENOBUFS).
            let oversize = test_frame(3000, 3);
            put(&mut ring, 0, &virtio_net::Repr::default(), &before);
            put(&mut ring, 0, &tso_repr(18), &mpls);
            put(&mut ring, 0, &virtio_net::Repr::default(), &oversize);
            put(&mut ring, 0, &virtio_net::Repr::default(), &after);
            assert_eq!(ring.flush(), 2);
            assert_eq!(ring.pending(), 0, "nothing left stuck in the ring");
            let e = ring.stats().tx_errors;
            assert_eq!((e.nomem, e.nobufs, e.total()), (1, 1, 2), "{e:?}");
            let got = receive(&mut peer, &mut pool, 2);
            let frames: Vec<&[u8]> = got.iter().map(|p| p.frame()).collect();
            assert_eq!(frames, vec![&before[..], &after[..]]);
            // The ring keeps working afterwards.
            put(&mut ring, 0, &virtio_net::Repr::default(), &before);
            assert_eq!(ring.flush(), 1);
        }

        #[test]
        fn frames_received_into_the_ring_go_out_unchanged() {
            let ns = lab("recv");
            // One pair, used both ways: `peer` sends on fb, `rx` reads them on fa straight
            // into the ring, which sends them back out of fa to `peer`.
            let rx = ns.run(|| AfPacketPort::open(0, "in", "fa", None).unwrap());
            let mut ring = ns.run(|| AfPacketTxRing::open("fa", TxRingConfig::default()).unwrap());
            let mut peer = ns.run(|| AfPacketPort::open(1, "peer", "fb", None).unwrap());
            let mut pool = PacketPool::new(16);
            let frames = [test_frame(60, 1), test_frame(1514, 2), tcp_super_frame(40_000, 0x0800, 0)];
            let offloads = [virtio_net::Repr::default(), virtio_net::Repr::default(), tso_repr(14)];
            let mut batch: Vec<Packet> = frames.iter().map(|f| Packet::from_frame(1, f)).collect();
            for (p, o) in batch.iter_mut().zip(offloads) {
                p.offload = o;
            }
            assert_eq!(peer.send_batch(&mut batch, &mut pool).unwrap(), 3);
            let deadline = Instant::now() + Duration::from_secs(2);
            let mut total = RecvFrom::default();
            while total.submitted < 3 && Instant::now() < deadline {
                let r = ring.recv_from(rx.as_fd(), 0, 64).unwrap();
                total.received += r.received;
                total.submitted += r.submitted;
                std::thread::sleep(Duration::from_millis(5));
            }
            assert_eq!(total, RecvFrom { received: 3, submitted: 3 });
            // Our own frames (PACKET_IGNORE_OUTGOING on `rx`) never come back into it.
            assert_eq!(ring.flush(), 3);
            let got = receive(&mut peer, &mut pool, 3);
            assert_eq!(got.len(), 3);
            for ((p, f), o) in got.iter().zip(&frames).zip(offloads) {
                assert_eq!(p.frame(), &f[..]);
                assert_eq!(p.offload.gso_type, o.gso_type);
            }
            assert_eq!(rx.stats().rx_packets, 0, "recv_from read rx's socket, not rx itself");
            let s = ring.stats();
            assert_eq!((s.rx_packets, s.tx_packets, s.rx_outgoing), (3, 3, 0));
        }
    }
}
