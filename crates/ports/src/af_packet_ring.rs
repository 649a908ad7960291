//! An `AF_PACKET` port whose receive side is a `TPACKET_V3` memory-mapped ring
//! (`PACKET_RX_RING`), with `PACKET_VNET_HDR` so TSO super-frames arrive whole with their
//! offload metadata. Transmit uses `sendmmsg` batches, as [`crate::AfPacketPort`] does.
//!
//! The kernel writes frames into blocks of a shared ring and hands over a whole block at
//! a time; we copy each frame into a pooled [`Packet`] (the pipeline rewrites frames in
//! place and needs headroom) and give the block back. The copy count is the same as with
//! `recvmmsg`; what changes is the number of syscalls (none on receive, only `poll`).
//!
//! Verified on this kernel (6.18): with `PACKET_VNET_HDR` a `TPACKET_V3` ring carries
//! the 10-byte `virtio_net_hdr` immediately in front of the frame, at `tp_mac - 10`
//! (`tests/ring.rs` reads a kernel TCP super-frame with `GSO_TCPV4`/`NEEDS_CSUM` from it).
//!
//! # Measured: bump-in-the-wire forwarder, mmsg vs ring
//!
//! Command (as root, on this 2-vCPU VM, kernel 6.18.44, `CONFIG_HZ=250`; other
//! engineers' builds were running, load average about 3):
//! `CARGO_TARGET_DIR=/work/target-ring cargo bench -p vmpls-ports --features rings --bench io`
//! (`benches/io.rs`: namespaces sender `s0` -- `f0` [forwarder] `f1` -- `r0` receiver,
//! iperf3 TCP for 5 s with default offloads, one forwarder thread polling both ports and
//! moving frames unchanged, pool of 512, batches of 64; CPU from
//! `getrusage(RUSAGE_THREAD)` of the forwarder thread; the three variants alternate).
//!
//! | round | port | Gbit/s | fwd user s | fwd sys s | fwd CPU % | frames f0→f1 | avg frame B |
//! |---|---|---|---|---|---|---|---|
//! | 1 | `AfPacketPort` (mmsg) | 16.31 | 0.08 | 2.83 | 54 | 157478 | 64802 |
//! | 1 | ring, 64 × 256 KiB | 12.85 | 0.77 | 1.60 | 44 | 126547 | 63552 |
//! | 1 | ring, 128 × 128 KiB | 12.46 | 0.65 | 1.93 | 48 | 122089 | 63842 |
//! | 2 | `AfPacketPort` (mmsg) | 16.87 | 0.31 | 3.28 | 66 | 162643 | 64889 |
//! | 2 | ring, 64 × 256 KiB | 14.57 | 0.97 | 1.69 | 49 | 144516 | 63105 |
//! | 2 | ring, 128 × 128 KiB | 13.36 | 0.78 | 1.91 | 50 | 131419 | 63626 |
//! | 3 | `AfPacketPort` (mmsg) | 18.52 | 0.31 | 3.65 | 73 | 179639 | 64546 |
//! | 3 | ring, 64 × 256 KiB | 10.51 | 0.97 | 1.34 | 43 | 103376 | 63688 |
//! | 3 | ring, 128 × 128 KiB | 9.43 | 0.58 | 1.79 | 44 | 92180 | 64111 |
//!
//! Means: mmsg **17.2 Gbit/s**, 64 % CPU, 0.19 s sys per Gbit; ring 256 KiB **12.6
//! Gbit/s**, 45 % CPU, 0.12 s sys per Gbit; ring 128 KiB 11.8 Gbit/s, 47 %, 0.16 s. No
//! drops anywhere. An earlier 2-variant run of the same bench gave mmsg 18.6/15.6/16.0 and
//! ring 13.1/9.8/10.9 Gbit/s.
//!
//! Verdict: `recvmmsg`/`sendmmsg` stays the router's port; it is about 35 % faster. The
//! ring costs less kernel time per bit (no `recvmmsg` copy into user iovecs, one
//! `memcpy` in user space instead) but the forwarder then idles at under 50 % CPU: the
//! flow is latency-bound, because `TPACKET_V3` wakes the reader only when a block is
//! closed, by filling it or by the retire timer (1 ms asked, one jiffy = 4 ms at
//! `HZ=250`), which holds back the small ACKs of the reverse direction. A per-frame ring
//! (`TPACKET_V2`, 128 KiB slots) or a TX ring was not measured.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use vmpls_dataplane::gso::{self, OffloadRefused};
use vmpls_dataplane::{Packet, PacketPool, PortId, PortInfo};
use vmpls_wire::virtio_net;

use vmpls_sys::{packet, sockopt};

use crate::mmsg::MmsgBatch;
use crate::{Port, PortError, PortStats, af_packet_caps};

/// `PACKET_RX_RING` socket option.
const PACKET_RX_RING: libc::c_int = 5;
/// `PACKET_VERSION` socket option.
const PACKET_VERSION: libc::c_int = 10;
/// `TPACKET_V3` (the value of `enum tpacket_versions`).
const TPACKET_V3: libc::c_int = 2;
/// Block status: owned by user space.
const TP_STATUS_USER: u32 = 1;
/// Block status: owned by the kernel.
const TP_STATUS_KERNEL: u32 = 0;

/// Offsets in `struct tpacket_block_desc` (version, offset_to_priv, then
/// `tpacket_hdr_v1`).
mod bd {
    pub const BLOCK_STATUS: usize = 8;
    pub const NUM_PKTS: usize = 12;
    pub const OFFSET_TO_FIRST_PKT: usize = 16;
    pub const BLK_LEN: usize = 20;
}

/// Offsets in `struct tpacket3_hdr`; the `sockaddr_ll` follows at `TPACKET_ALIGN(48)`.
mod ph {
    pub const NEXT_OFFSET: usize = 0;
    pub const SNAPLEN: usize = 12;
    pub const LEN: usize = 16;
    pub const MAC: usize = 24;
    pub const HDR_LEN: usize = 48;
    /// `sll_pkttype` inside the `sockaddr_ll` after the header.
    pub const PKTTYPE: usize = HDR_LEN + 10;
}

/// Ring geometry. A block must hold a 64 KiB super-frame plus its headers, so blocks are
/// 256 KiB (several super-frames, or hundreds of small frames).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    /// Bytes per block: a power of two, a multiple of the page size, at least 128 KiB.
    pub block_size: u32,
    /// Number of blocks.
    pub block_nr: u32,
    /// Milliseconds after which the kernel hands over a block that is not full (the
    /// latency bound for a lone small frame).
    pub retire_timeout_ms: u32,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig { block_size: 256 << 10, block_nr: 64, retire_timeout_ms: 1 }
    }
}

/// The mapped ring: `len` bytes at `ptr`, unmapped on drop.
struct Ring {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone (no aliasing Rust references escape
// it beyond one `recv_batch` call), and the kernel side synchronises through the block
// status words, which we access atomically; moving it to another thread is sound.
unsafe impl Send for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the region returned by our mmap, unmapped once.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// A port on a Linux Ethernet interface through `AF_PACKET` with a `TPACKET_V3` receive
/// ring.
pub struct AfPacketRingPort {
    info: PortInfo,
    ifname: String,
    ifindex: u32,
    // Field order: the ring is unmapped before the socket closes.
    ring: Ring,
    fd: OwnedFd,
    cfg: RingConfig,
    /// The block we read next.
    block: usize,
    /// Frames left in `block` once it is ours; 0 while we wait for it.
    left: u32,
    /// Offset of the next frame inside `block`.
    off: usize,
    batch: MmsgBatch,
    stats: PortStats,
    /// Blocks handed back with a layout we could not follow (should stay 0).
    bad_blocks: u64,
}

impl std::fmt::Debug for AfPacketRingPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfPacketRingPort")
            .field("info", &self.info)
            .field("ifname", &self.ifname)
            .field("ifindex", &self.ifindex)
            .field("fd", &self.fd.as_raw_fd())
            .field("ring", &self.cfg)
            .finish()
    }
}

/// What one ring slot turned out to be.
#[derive(Debug, PartialEq, Eq)]
enum Slot {
    /// A frame of `len` bytes at offset `mac` of the slot, with its offload metadata.
    Frame {
        mac: usize,
        len: usize,
        offload: virtio_net::Repr,
    },
    Truncated,
    BadHeader,
    GsoSizeTooSmall,
    Outgoing,
}

/// Classifies a slot: `avail` bytes from the slot's start to the end of its block.
fn classify_slot(slot: &[u8]) -> Slot {
    let u32_at = |o: usize| u32::from_ne_bytes(slot[o..o + 4].try_into().unwrap_or([0; 4]));
    if slot.len() < ph::PKTTYPE + 1 {
        return Slot::Truncated;
    }
    if slot[ph::PKTTYPE] == packet::PACKET_OUTGOING {
        return Slot::Outgoing;
    }
    let snaplen = u32_at(ph::SNAPLEN) as usize;
    let len = u32_at(ph::LEN) as usize;
    let mac = u16::from_ne_bytes([slot[ph::MAC], slot[ph::MAC + 1]]) as usize;
    if snaplen < len || mac < ph::PKTTYPE + virtio_net::HEADER_LEN || mac + snaplen > slot.len() {
        return Slot::Truncated;
    }
    let hdr = &slot[mac - virtio_net::HEADER_LEN..mac];
    match gso::received_offload(hdr, len) {
        Ok(offload) => Slot::Frame { mac, len, offload },
        Err(OffloadRefused::BadHeader) => Slot::BadHeader,
        Err(OffloadRefused::GsoSizeTooSmall) => Slot::GsoSizeTooSmall,
    }
}

impl AfPacketRingPort {
    /// Opens a port with index `id` and configured `name` on interface `ifname` of the
    /// calling thread's network namespace, with the default [`RingConfig`]. Same checks
    /// as [`crate::AfPacketPort::open`].
    pub fn open(
        id: PortId,
        name: &str,
        ifname: &str,
        mtu_override: Option<u32>,
    ) -> Result<AfPacketRingPort, PortError> {
        Self::open_with(id, name, ifname, mtu_override, RingConfig::default())
    }

    /// As [`AfPacketRingPort::open`], with ring geometry `cfg`.
    pub fn open_with(
        id: PortId,
        name: &str,
        ifname: &str,
        mtu_override: Option<u32>,
        cfg: RingConfig,
    ) -> Result<AfPacketRingPort, PortError> {
        let (fd, ifindex, details, mtu) = crate::af_packet::open_checked(ifname, mtu_override)?;
        let no_such = || PortError::NoSuchInterface { ifname: ifname.to_owned() };
        let io_err = |op: &'static str| {
            move |source: io::Error| PortError::Io { ifname: ifname.to_owned(), op, source }
        };

        let sock = fd.as_fd();
        // Order matters: the vnet header and the version must be set before the ring.
        sockopt::set_int(sock, libc::SOL_PACKET, packet::PACKET_VNET_HDR, 1)
            .map_err(io_err("enable PACKET_VNET_HDR"))?;
        sockopt::set_int(sock, libc::SOL_PACKET, PACKET_VERSION, TPACKET_V3)
            .map_err(io_err("select TPACKET_V3"))?;
        if let Err(e) = sockopt::set_int(sock, libc::SOL_PACKET, packet::PACKET_IGNORE_OUTGOING, 1) {
            tracing::warn!(ifname, error = %e, "PACKET_IGNORE_OUTGOING unavailable");
        }
        let req = libc::tpacket_req3 {
            tp_block_size: cfg.block_size,
            tp_block_nr: cfg.block_nr,
            // V3 packs frames of any size into a block; the frame fields only need to
            // be consistent.
            tp_frame_size: cfg.block_size,
            tp_frame_nr: cfg.block_nr,
            tp_retire_blk_tov: cfg.retire_timeout_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        sockopt::set(sock, libc::SOL_PACKET, PACKET_RX_RING, &req)
            .map_err(io_err("set up the TPACKET_V3 receive ring (PACKET_RX_RING)"))?;
        let len = cfg.block_size as usize * cfg.block_nr as usize;
        // SAFETY: a fresh shared mapping of the socket's ring, of exactly the size the
        // kernel allocated; the result is checked before use and owned by `Ring`.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED,
                sock.as_raw_fd(),
                0,
            )
        };
        let ptr = if ptr == libc::MAP_FAILED {
            // MAP_LOCKED can fail under RLIMIT_MEMLOCK; retry without it.
            // SAFETY: as above.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    sock.as_raw_fd(),
                    0,
                )
            }
        } else {
            ptr
        };
        if ptr == libc::MAP_FAILED {
            return Err(io_err("map the receive ring")(io::Error::last_os_error()));
        }
        let ring = Ring {
            ptr: NonNull::new(ptr.cast()).ok_or_else(|| {
                io_err("map the receive ring")(io::Error::from(io::ErrorKind::AddrNotAvailable))
            })?,
            len,
        };
        packet::bind(sock, ifindex, packet::ETH_P_ALL).map_err(|source| {
            if source.raw_os_error() == Some(libc::ENODEV) {
                no_such()
            } else {
                io_err("bind the packet socket to the interface")(source)
            }
        })?;
        if sockopt::set_int(sock, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 32 << 20).is_err() {
            let _ = sockopt::set_int(sock, libc::SOL_SOCKET, libc::SO_SNDBUF, 32 << 20);
        }
        packet::add_membership(sock, ifindex, packet::PACKET_MR_ALLMULTI)
            .map_err(io_err("join all-multicast (PACKET_MR_ALLMULTI)"))?;
        tracing::debug!(ifname, ifindex, mtu, ?cfg, "AF_PACKET ring port open");
        Ok(AfPacketRingPort {
            info: PortInfo { id, name: name.to_owned(), mac: details.mac, mtu, caps: af_packet_caps() },
            ifname: ifname.to_owned(),
            ifindex,
            ring,
            fd,
            cfg,
            block: 0,
            left: 0,
            off: 0,
            batch: MmsgBatch::new(),
            stats: PortStats::default(),
            bad_blocks: 0,
        })
    }

    /// The Linux interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The Linux interface index (in the namespace the port was opened in).
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The ring geometry in use.
    pub fn ring_config(&self) -> RingConfig {
        self.cfg
    }

    /// Ring blocks given back unread because their layout was inconsistent.
    pub fn bad_blocks(&self) -> u64 {
        self.bad_blocks
    }

    fn block_ptr(&self, i: usize) -> *mut u8 {
        // SAFETY: `i < block_nr`, so the offset stays inside the mapping.
        unsafe { self.ring.ptr.as_ptr().add(i * self.cfg.block_size as usize) }
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: the status word is 4-byte aligned (blocks are page aligned, offset 8),
        // inside the mapping that lives as long as `self`, and shared with the kernel,
        // which is why we only touch it atomically.
        unsafe { AtomicU32::from_ptr(self.block_ptr(i).add(bd::BLOCK_STATUS).cast()) }
    }

    /// The current block as bytes, once the kernel handed it to us.
    fn block_bytes(&self) -> &[u8] {
        // SAFETY: the block is inside the mapping; its status is TP_STATUS_USER (checked
        // with Acquire before any call), so the kernel does not write it until we store
        // TP_STATUS_KERNEL in `release_block`, which takes `&mut self`.
        unsafe { std::slice::from_raw_parts(self.block_ptr(self.block), self.cfg.block_size as usize) }
    }

    fn release_block(&mut self) {
        self.status(self.block).store(TP_STATUS_KERNEL, Ordering::Release);
        self.block = (self.block + 1) % self.cfg.block_nr as usize;
        self.left = 0;
    }
}

impl AsFd for AfPacketRingPort {
    /// The descriptor to poll for readability.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Port for AfPacketRingPort {
    fn info(&self) -> &PortInfo {
        &self.info
    }

    fn recv_batch(&mut self, pool: &mut PacketPool, out: &mut Vec<Packet>, max: usize) -> io::Result<usize> {
        let mut seen = 0;
        let mut delivered = 0;
        while seen < max {
            if self.left == 0 {
                if self.status(self.block).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                    break;
                }
                let b = self.block_bytes();
                let word = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
                let (n, first, blk_len) =
                    (word(bd::NUM_PKTS), word(bd::OFFSET_TO_FIRST_PKT) as usize, word(bd::BLK_LEN) as usize);
                if n == 0 || first >= b.len() || blk_len > b.len() {
                    if n != 0 {
                        self.bad_blocks += 1;
                    }
                    self.release_block();
                    continue;
                }
                self.left = n;
                self.off = first;
            }
            let b = self.block_bytes();
            let slot = &b[self.off..];
            seen += 1;
            let next = slot
                .get(ph::NEXT_OFFSET..ph::NEXT_OFFSET + 4)
                .map_or(0, |w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as usize);
            match classify_slot(slot) {
                Slot::Frame { mac, len, offload } => match pool.get() {
                    Some(mut p) => {
                        p.receive_area()[..len].copy_from_slice(&slot[mac..mac + len]);
                        p.set_received(len);
                        p.offload = offload;
                        p.port = self.info.id;
                        self.stats.rx_packets += 1;
                        self.stats.rx_bytes += len as u64;
                        out.push(p);
                        delivered += 1;
                    }
                    None => self.stats.rx_no_buffer += 1,
                },
                Slot::Truncated => self.stats.rx_truncated += 1,
                Slot::BadHeader => self.stats.rx_bad_vnet_hdr += 1,
                Slot::GsoSizeTooSmall => self.stats.rx_gso_size_too_small += 1,
                Slot::Outgoing => self.stats.rx_outgoing += 1,
            }
            self.left -= 1;
            if self.left == 0 {
                self.release_block();
            } else if next == 0 || self.off + next >= self.cfg.block_size as usize {
                // The kernel always links the next frame; a zero or outside offset means
                // we cannot follow this block.
                self.bad_blocks += 1;
                self.release_block();
            } else {
                self.off += next;
            }
        }
        Ok(delivered)
    }

    fn send_batch(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize> {
        Ok(crate::af_packet::send_all(&mut self.batch, self.fd.as_fd(), pkts, pool, &mut self.stats))
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(mac: u16, snaplen: u32, len: u32, pkttype: u8, hdr: [u8; 10], size: usize) -> Vec<u8> {
        let mut s = vec![0u8; size];
        s[ph::SNAPLEN..ph::SNAPLEN + 4].copy_from_slice(&snaplen.to_ne_bytes());
        s[ph::LEN..ph::LEN + 4].copy_from_slice(&len.to_ne_bytes());
        s[ph::MAC..ph::MAC + 2].copy_from_slice(&mac.to_ne_bytes());
        s[ph::PKTTYPE] = pkttype;
        let m = mac as usize;
        if m >= 10 && m <= s.len() {
            s[m - 10..m].copy_from_slice(&hdr);
        }
        s
    }

    const TSO_HDR: [u8; 10] = [0x01, 0x01, 0x42, 0x00, 0xa8, 0x05, 0x22, 0x00, 0x10, 0x00];

    #[test]
    fn slots_are_classified_and_never_read_out_of_bounds() {
        let s = slot(82, 1000, 1000, 0, TSO_HDR, 82 + 1000);
        assert!(matches!(
            classify_slot(&s),
            Slot::Frame { mac: 82, len: 1000, offload } if offload.needs_csum
        ));
        assert_eq!(classify_slot(&s[..82 + 999]), Slot::Truncated);
        assert_eq!(classify_slot(&slot(82, 900, 1000, 0, TSO_HDR, 2000)), Slot::Truncated);
        assert_eq!(classify_slot(&slot(82, 10, 10, 4, TSO_HDR, 200)), Slot::Outgoing);
        assert_eq!(classify_slot(&slot(5, 10, 10, 0, TSO_HDR, 200)), Slot::Truncated);
        let mut bad = TSO_HDR;
        bad[1] = 2;
        assert_eq!(classify_slot(&slot(82, 100, 100, 0, bad, 300)), Slot::BadHeader);
        assert_eq!(classify_slot(&[0u8; 20]), Slot::Truncated);
    }
}
