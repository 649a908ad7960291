//! A port that is a QEMU/KVM guest's virtio-net device, through vhost-user.
//!
//! vmpls listens on one Unix socket per guest NIC, mode 0600 (0660 in the group
//! [`VhostUserOptions::socket_group`] names, for a QEMU running as another user); QEMU
//! connects to it with
//! `-chardev socket,path=SOCKET,id=c0 -netdev vhost-user,chardev=c0,id=n0
//! -device virtio-net-pci,netdev=n0,mrg_rxbuf=on`, with the guest's RAM shared
//! (`-object memory-backend-memfd,id=mem,size=512M,share=on -numa node,memdev=mem`).
//! The guest's transmit queue becomes this port's input and its receive queue this port's
//! output; the 12-byte virtio-net header (`virtio_net_hdr_v1`, with `num_buffers`) travels
//! with every frame, so a guest's TSO super-frames enter whole and super-frames go to a guest
//! that negotiated `GUEST_TSO4/6` whole.
//!
//! QEMU 7.2 (Debian 12) under TCG crashes (`msix_set_vector_notifiers`, in
//! `vhost_net_start`) when a vhost-user virtio-net device uses MSI-X; give the device
//! `vectors=0` there (legacy interrupts).
//!
//! # Threads
//!
//! `vhost-user-backend` runs the protocol (`VhostUserDaemon`: one thread reading the
//! frontend's messages, one epoll worker per group of queues calling
//! `VhostUserBackend::handle_event` when the guest kicks a queue). The router, though, is
//! one thread polling every port's [`Port::fd`] and moving batches through `&mut self`. So
//! the queues are processed by the router thread, not by the worker:
//! - the worker's `handle_event` only writes an eventfd (this port's [`Port::fd`]) when the
//!   guest kicks its transmit queue, and hands over the connection's vrings the first time
//!   it sees them; the receive queue's kicks (buffers posted) it turns off at the queue's
//!   start, and passes them on (an eventfd write) only while frames wait for buffers and
//!   the router sleeps (see below);
//! - [`Port::recv_batch`] and [`Port::send_batch`] lock the vring (`VringMutex`, shared with
//!   the protocol thread, uncontended except while the frontend reconfigures the queue)
//!   once per batch and pop descriptor chains themselves.
//!
//! No frame is queued between threads, so there is no second copy and no unbounded buffer:
//! the guest's rings are the buffers. Frames for a guest whose receive ring is full wait in
//! the port, bounded ([`WAITING_FRAMES`], [`WAITING_BYTES`]), as they wait in a TAP's queue
//! for QEMU's own backend, and go first once the guest posts buffers: at the router's next
//! turn while it polls, else on the guest's kick, which the port asks for only then.
//!
//! While the router works through a backlog of the guest's transmit queue it keeps the
//! guest's kicks off (`VRING_USED_F_NO_NOTIFY`) and re-arms its own eventfd, as the
//! level-triggered poll loop expects; it re-enables them once the ring is empty. While the
//! router polls the port ([`Port::set_polling`], adaptive polling) the kicks stay off and the
//! eventfd is left alone; when the polling ends they go back on and the ring is looked at
//! once more, so a frame queued without a kick is not left waiting.
//!
//! A listener thread owned by the port accepts frontends one at a time, for the port's whole
//! life, and relays each one's messages to a fresh `VhostUserDaemon` over a private socket
//! (the `relay` module: QEMU sends `SET_VRING_ENABLE` before `SET_FEATURES`, which the
//! `vhost` crate would take as a fatal error). When QEMU exits or the guest's connection
//! breaks, the port drops that connection's queues and memory, stops receiving, and accepts
//! the next frontend (QEMU restarted, or `reconnect=` on its chardev). A guest rebooting
//! inside one QEMU renegotiates on the same connection; the port follows the new features.
//! Protocol features offered: `REPLY_ACK`, `CONFIGURE_MEM_SLOTS` (no `MQ`: one queue pair).
//!
//! # The untrusted guest
//!
//! Descriptor chains are walked by `virtio-queue` and every guest address goes through
//! `vm-memory`; see the `chain` module. A malformed chain (shorter than the headers,
//! device-writable where it must be readable, longer than a frame, outside guest memory, an
//! undecodable header) is counted in [`VhostUserStats`] and skipped, and its buffer is
//! given back to the guest.
//!
//! # Offloads
//!
//! The port offers `VERSION_1`, `CSUM`, `GUEST_CSUM`, `HOST_TSO4/6`, `HOST_ECN`,
//! `GUEST_TSO4/6`, `GUEST_ECN`, `MRG_RXBUF`, `MTU`, `MAC` and `RING_INDIRECT_DESC`
//! (QEMU itself answers the guest's config-space reads for MAC and MTU, from
//! `-device virtio-net-pci,mac=...,host_mtu=...`). [`PortInfo::caps`] says what the
//! connected guest negotiated (`tso4`/`tso6` need `GUEST_TSO4/6` and `GUEST_CSUM`); before a
//! guest connects it says what is offered. A router may have read the caps before the guest
//! negotiated; so [`Port::send_batch`] also segments (`vmpls_dataplane::gso`) a super-frame the
//! guest cannot take, and completes a partial checksum for a guest without `GUEST_CSUM`.
//! Labelled super-frames are always segmented: virtio-net has no MPLS GSO type.

mod chain;
pub(crate) mod fuzz;
mod relay;
mod ring;

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use vhost::vhost_user::Listener;
use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost_user_backend::{ShutdownHandle, VhostUserBackend, VhostUserDaemon, VringMutex, VringT};
use virtio_bindings::bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::bindings::virtio_net::{
    VIRTIO_NET_F_CSUM, VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_GUEST_ECN, VIRTIO_NET_F_GUEST_TSO4,
    VIRTIO_NET_F_GUEST_TSO6, VIRTIO_NET_F_HOST_ECN, VIRTIO_NET_F_HOST_TSO4, VIRTIO_NET_F_HOST_TSO6,
    VIRTIO_NET_F_MAC, VIRTIO_NET_F_MRG_RXBUF, VIRTIO_NET_F_MTU,
};
use virtio_bindings::bindings::virtio_ring::VIRTIO_RING_F_INDIRECT_DESC;
use virtio_queue::QueueT;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::event::{EventConsumer, EventFlag, EventNotifier, new_event_consumer_and_notifier};
use vmpls_dataplane::gso::{self, SegmentChecksum};
use vmpls_dataplane::{Packet, PacketPool, PortCaps, PortId, PortInfo};
use vmpls_sys::EventFd;
use vmpls_wire::{ethernet, mpls, virtio_net};

use self::chain::{RxError, TxChainError};
use self::ring::{RingError, SplitRing};
use crate::{MIN_MTU, Port, PortError, PortStats};

/// Queue index of the guest's receive queue (our output).
const RX_QUEUE: usize = 0;
/// Queue index of the guest's transmit queue (our input).
const TX_QUEUE: usize = 1;
/// Largest queue size a frontend may configure.
const MAX_QUEUE_SIZE: usize = 1024;
/// The MTU a guest gets without `host_mtu=`.
pub const DEFAULT_MTU: u32 = 1500;
/// The largest MTU virtio-net can announce (a 16-bit config field).
pub const MAX_MTU: u32 = 65535;
/// How often the listener thread looks at its stop flag while waiting for a frontend.
const ACCEPT_POLL_MS: i32 = 100;
/// Most memory regions a guest may have (the port answers `GET_MAX_MEM_SLOTS` with it):
/// each is a descriptor and a mapping the port keeps while the guest is connected, and
/// `vhost-user-backend` sets no limit of its own on `ADD_MEM_REG`. 64 is the default of
/// the kernel's own vhost (`max_mem_regions`), so a QEMU set up for vhost-net fits; a
/// frontend that goes beyond is disconnected.
pub const MAX_MEM_REGIONS: usize = 64;
/// Most frames that wait for a guest's receive buffers: a ring's worth of small frames.
pub const WAITING_FRAMES: usize = 256;
/// Most bytes that wait for a guest's receive buffers: some 64 TCP super-frames, of the
/// router's 1024 buffers.
pub const WAITING_BYTES: usize = 4 << 20;

const fn bit(b: u32) -> u64 {
    1 << b
}

/// The virtio features this port offers a frontend.
pub const OFFERED_FEATURES: u64 = bit(VIRTIO_F_VERSION_1)
    | bit(VIRTIO_NET_F_CSUM)
    | bit(VIRTIO_NET_F_GUEST_CSUM)
    | bit(VIRTIO_NET_F_MTU)
    | bit(VIRTIO_NET_F_MAC)
    | bit(VIRTIO_NET_F_GUEST_TSO4)
    | bit(VIRTIO_NET_F_GUEST_TSO6)
    | bit(VIRTIO_NET_F_GUEST_ECN)
    | bit(VIRTIO_NET_F_HOST_TSO4)
    | bit(VIRTIO_NET_F_HOST_TSO6)
    | bit(VIRTIO_NET_F_HOST_ECN)
    | bit(VIRTIO_NET_F_MRG_RXBUF)
    | bit(VIRTIO_RING_F_INDIRECT_DESC)
    | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();

/// What a guest negotiated, as far as moving frames is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Negotiated {
    /// Length of the virtio-net header on both queues: 12 with `VERSION_1` or
    /// `MRG_RXBUF`, else 10.
    hdr_len: usize,
    mergeable: bool,
    guest_csum: bool,
    guest_tso4: bool,
    guest_tso6: bool,
    guest_ecn: bool,
}

impl Negotiated {
    fn from_features(f: u64) -> Negotiated {
        let has = |b: u32| f & bit(b) != 0;
        let mergeable = has(VIRTIO_NET_F_MRG_RXBUF);
        Negotiated {
            hdr_len: if has(VIRTIO_F_VERSION_1) || mergeable {
                virtio_net::HEADER_LEN_MRG
            } else {
                virtio_net::HEADER_LEN
            },
            mergeable,
            guest_csum: has(VIRTIO_NET_F_GUEST_CSUM),
            // Receiving TSO needs receive checksum offload (virtio 1.x 5.1.3.1).
            guest_tso4: has(VIRTIO_NET_F_GUEST_TSO4) && has(VIRTIO_NET_F_GUEST_CSUM),
            guest_tso6: has(VIRTIO_NET_F_GUEST_TSO6) && has(VIRTIO_NET_F_GUEST_CSUM),
            guest_ecn: has(VIRTIO_NET_F_GUEST_ECN),
        }
    }

    /// What the pipeline may send to this guest.
    fn caps(&self) -> PortCaps {
        PortCaps {
            tso4: self.guest_tso4,
            tso6: self.guest_tso6,
            uso: false,
            csum: self.guest_csum,
            // virtio-net has no MPLS GSO, but the port cuts a labelled super-frame itself,
            // straight into the guest's buffers (one copy less than the pipeline's cut).
            mpls_gso: true,
        }
    }
}

/// What a port accepts at output for a guest that negotiated `features` (virtio feature
/// bits as acknowledged by the frontend).
pub fn vhost_user_caps(features: u64) -> PortCaps {
    Negotiated::from_features(features).caps()
}

/// How one frame goes to the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    /// As it is, with its offload metadata as the header.
    Whole,
    /// Its partial checksum completed first (a guest without `GUEST_CSUM`).
    CompleteChecksum,
    /// Segmented in software first: a super-frame the guest cannot take.
    Segment,
}

fn delivery(pkt: &Packet, neg: &Negotiated) -> Delivery {
    let off = &pkt.offload;
    if off.is_gso() {
        let labelled = is_labelled(pkt.frame());
        let takes = match off.gso_type {
            virtio_net::GsoType::TcpV4 => neg.guest_tso4,
            virtio_net::GsoType::TcpV6 => neg.guest_tso6,
            _ => false,
        };
        if labelled || !takes || (off.gso_ecn && !neg.guest_ecn) {
            return Delivery::Segment;
        }
        return Delivery::Whole;
    }
    if off.needs_csum && !neg.guest_csum {
        return Delivery::CompleteChecksum;
    }
    Delivery::Whole
}

fn is_labelled(frame: &[u8]) -> bool {
    matches!(frame.get(12..14), Some([0x88, 0x47]) | Some([0x88, 0x48]))
}

/// Offset of the IP header: after Ethernet and any label stack.
fn l3_offset(frame: &[u8]) -> usize {
    if is_labelled(frame) {
        let stack = frame.get(ethernet::HEADER_LEN..).unwrap_or(&[]);
        ethernet::HEADER_LEN + 4 * mpls::stack_depth(stack).unwrap_or(0)
    } else {
        ethernet::HEADER_LEN
    }
}

/// The virtio-net header for a frame going to the guest (`num_buffers` filled in later).
fn rx_header(offload: &virtio_net::Repr, neg: &Negotiated) -> [u8; virtio_net::HEADER_LEN_MRG] {
    let mut repr = *offload;
    if !neg.guest_csum {
        repr.needs_csum = false;
        repr.data_valid = false;
    }
    let mut hdr = [0u8; virtio_net::HEADER_LEN_MRG];
    repr.emit(&mut virtio_net::Header::new_unchecked(&mut hdr[..]));
    hdr
}

/// Counters of a vhost-user port beyond [`PortStats`]. "rx" is from the guest (its transmit
/// queue), "tx" to the guest (its receive queue).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VhostUserStats {
    /// Frontends accepted on the socket.
    pub connections: u64,
    /// Frontends gone (QEMU exited, guest's connection broken).
    pub disconnections: u64,
    /// Transmit chains shorter than the virtio-net and Ethernet headers.
    pub rx_chain_too_short: u64,
    /// Transmit chains longer than the largest frame.
    pub rx_chain_too_long: u64,
    /// Transmit chains with a device-writable descriptor.
    pub rx_chain_write_only: u64,
    /// Transmit chains with a buffer outside guest memory.
    pub rx_chain_bad_address: u64,
    /// Transmit chains with an undecodable virtio-net header (also in
    /// [`PortStats::rx_bad_vnet_hdr`]).
    pub rx_bad_header: u64,
    /// Frames for the guest dropped because no guest was connected with its receive queue
    /// running.
    pub tx_not_connected: u64,
    /// Frames for the guest dropped because it had not posted enough receive buffers and
    /// as many frames as may wait for them ([`WAITING_FRAMES`], [`WAITING_BYTES`]) did.
    pub tx_no_rx_buffers: u64,
    /// Frames larger than one receive buffer of a guest without `MRG_RXBUF`.
    pub tx_too_big: u64,
    /// Malformed receive chains from the guest (device-readable, empty, outside memory);
    /// the frame being written was lost.
    pub tx_bad_chain: u64,
    /// Super-frames that could not be segmented (malformed headers, pool empty).
    pub tx_segment_failed: u64,
    /// Partial checksums completed by the port for a guest without `GUEST_CSUM`.
    pub tx_csum_completed: u64,
    /// Used rings the port could not write (outside guest memory): the guest is broken.
    pub used_ring_errors: u64,
    /// Batches not moved because a ring of the queue does not lie inside one region of
    /// the guest's memory (or the queue has no entries): a broken frontend, as QEMU and
    /// DPDK lay a ring out in one piece.
    pub rings_unmapped: u64,
    /// File descriptors a frontend sent that its messages do not take (more than a
    /// message carries, or sent with a message's later bytes): closed on arrival.
    pub frontend_fds_closed: u64,
    /// Frontends disconnected for mapping more than [`MAX_MEM_REGIONS`] memory regions.
    pub frontend_too_many_regions: u64,
    /// Times the guest's transmit queue woke the port: once when the queue starts, then on
    /// the guest's kicks (none while the router polls the port with the kicks off).
    pub tx_queue_wakeups: u64,
    /// Times the guest's receive queue woke the port's worker: once when the queue starts,
    /// which asks the guest for no kicks after posting buffers, then the kicks the port
    /// asks for while frames wait for buffers and the router sleeps, and those of a driver
    /// that ignores the asking.
    pub rx_queue_events: u64,
}

/// Options of a vhost-user port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VhostUserOptions {
    /// The MTU of the link to the guest; default [`DEFAULT_MTU`]. Give the guest the same
    /// with `-device virtio-net-pci,host_mtu=N`.
    pub mtu: Option<u32>,
    /// The router's MAC address on this port; default a locally administered address
    /// derived from the socket path, stable across restarts.
    pub mac: Option<[u8; 6]>,
    /// The group whose members may connect (QEMU's, e.g. `kvm`): the socket is then mode
    /// 0660 in that group. `None`: mode 0600, only the router's user.
    pub socket_group: Option<String>,
}

/// The connection's state as the protocol threads leave it for the router thread.
#[derive(Default)]
struct Conn {
    connected: bool,
    mem: Option<GuestMemoryAtomic<GuestMemoryMmap>>,
    vrings: Option<Vec<Vring>>,
    features: u64,
    shutdown: Option<ShutdownHandle>,
}

type Vring = VringMutex<GuestMemoryAtomic<GuestMemoryMmap>>;

/// Frames for the guest that found its receive ring full, oldest first; they go before
/// any newer frame once the guest posts buffers. QEMU's own tap backend stops reading the
/// TAP while the guest's ring is full, and the frames wait in the kernel's queue; a port
/// that dropped them instead lost a whole super-frame (some 40 TCP segments) whenever a
/// slow guest fell behind a burst (`lab seed --vm`: hundreds of retransmits a run where
/// the TAP had none). Bounded, so a guest that stops taking frames holds at most this much
/// of the router's buffers, and never more than would leave the pool under half full
/// (several stalled guests must not starve the other ports); beyond, frames are dropped
/// and counted.
#[derive(Default)]
struct Waiting {
    frames: VecDeque<Packet>,
    bytes: usize,
}

impl Waiting {
    /// Queues `pkt` last, or gives it back when a bound is reached.
    fn push(&mut self, pkt: Packet, pool: &PacketPool) -> Result<(), Packet> {
        if self.frames.len() >= WAITING_FRAMES
            || self.bytes + pkt.len() > WAITING_BYTES
            || pool.available() * 2 < pool.capacity()
        {
            return Err(pkt);
        }
        self.bytes += pkt.len();
        self.frames.push_back(pkt);
        Ok(())
    }

    fn pop(&mut self) -> Option<Packet> {
        let pkt = self.frames.pop_front()?;
        self.bytes -= pkt.len();
        Some(pkt)
    }

    fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
}

/// What became of a frame offered to the guest's receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offered {
    /// Written (a super-frame cut for the guest: as many of its segments as fit, the rest
    /// dropped and counted), or dropped and counted.
    Done,
    /// Nothing written: the ring has no room for it now.
    RingFull,
}

/// One batch of writes into the guest's receive queue.
struct RxBatch<'b, 'q, 'm> {
    ring: SplitRing<'q, 'm>,
    neg: Negotiated,
    used: &'b mut Vec<(u16, u32)>,
    stats: &'b mut PortStats,
    vstats: &'b mut VhostUserStats,
}

impl RxBatch<'_, '_, '_> {
    /// Writes one frame (in one or two pieces), counted when sent or dropped;
    /// `Err(NoBuffers)` is left to the caller to count.
    fn write(&mut self, offload: &virtio_net::Repr, frame: [&[u8]; 2]) -> Result<(), RxError> {
        // A ring found empty in this batch is not looked at again.
        let written = if self.ring.exhausted() {
            Err(RxError::NoBuffers)
        } else {
            let hdr = rx_header(offload, &self.neg);
            chain::write_rx_parts(
                &mut self.ring,
                &hdr,
                self.neg.hdr_len,
                frame,
                self.neg.mergeable,
                self.used,
            )
        };
        match written {
            Ok(_) => {
                self.stats.tx_packets += 1;
                self.stats.tx_bytes += (frame[0].len() + frame[1].len()) as u64;
                Ok(())
            }
            Err(e) => {
                match e {
                    RxError::NoBuffers => return Err(e),
                    RxError::TooBig => self.vstats.tx_too_big += 1,
                    RxError::BadChain => self.vstats.tx_bad_chain += 1,
                }
                self.stats.tx_dropped += 1;
                Err(e)
            }
        }
    }

    /// Frames dropped for want of receive buffers.
    fn drop_no_buffers(&mut self, frames: u64) {
        self.stats.tx_dropped += frames;
        self.vstats.tx_no_rx_buffers += frames;
    }

    /// Offers `pkt` to the guest as it can take it: whole, its checksum completed, or cut
    /// into segments (their headers built in `headers`).
    fn offer(&mut self, pkt: &mut Packet, headers: &mut Vec<u8>) -> Offered {
        let full = |r: Result<(), RxError>| {
            if r == Err(RxError::NoBuffers) { Offered::RingFull } else { Offered::Done }
        };
        match delivery(pkt, &self.neg) {
            Delivery::Whole => full(self.write(&pkt.offload, [pkt.frame(), &[]])),
            Delivery::CompleteChecksum => {
                if gso::complete_checksum(pkt).is_err() {
                    self.stats.tx_dropped += 1;
                    self.vstats.tx_segment_failed += 1;
                    return Offered::Done;
                }
                // Done once: a frame that waits is whole the next time.
                self.vstats.tx_csum_completed += 1;
                pkt.offload.needs_csum = false;
                full(self.write(&pkt.offload, [pkt.frame(), &[]]))
            }
            Delivery::Segment => {
                // Each segment is its own headers and a slice of the super-frame's payload.
                // A guest that completes checksums (GUEST_CSUM) gets them partial, so the
                // payload is read once, by the copy into its buffers.
                let frame = pkt.frame();
                let csum = if self.neg.guest_csum { SegmentChecksum::Partial } else { SegmentChecksum::Full };
                let Ok(cut) = gso::segment_headers(pkt, l3_offset(frame), 0, csum, headers) else {
                    self.stats.tx_dropped += 1;
                    self.vstats.tx_segment_failed += 1;
                    return Offered::Done;
                };
                let offload = match csum {
                    SegmentChecksum::Partial => virtio_net::Repr {
                        needs_csum: true,
                        csum_start: cut.l4_offset as u16,
                        csum_offset: cut.csum_offset as u16,
                        ..virtio_net::Repr::default()
                    },
                    SegmentChecksum::Full => virtio_net::Repr::default(),
                };
                for i in 0..cut.segments {
                    let head = &headers[i * cut.header_len..(i + 1) * cut.header_len];
                    let start = cut.payload_offset + i * cut.gso_size;
                    let payload = &frame[start..(start + cut.gso_size).min(frame.len())];
                    match self.write(&offload, [head, payload]) {
                        Ok(()) => {}
                        // Not one segment fits: the super-frame waits whole.
                        Err(RxError::NoBuffers) if i == 0 => return Offered::RingFull,
                        Err(RxError::NoBuffers) => {
                            // The ring filled part way: the rest of the segments cannot go
                            // either; counted without the copies.
                            self.drop_no_buffers((cut.segments - i) as u64);
                            break;
                        }
                        Err(_) => {}
                    }
                }
                self.stats.tx_segmented += 1;
                self.stats.tx_segments += cut.segments as u64;
                Offered::Done
            }
        }
    }
}

/// Shared between the port (router thread), the listener thread and the backend (protocol
/// and worker threads).
struct Shared {
    /// The port's [`Port::fd`]: written on guest kicks and connection changes.
    wake: EventFd,
    /// Bumped on every change of `conn`; the port re-reads `conn` when it moves.
    generation: AtomicU64,
    stop: AtomicBool,
    conn: Mutex<Conn>,
    connections: AtomicU64,
    disconnections: AtomicU64,
    /// Shared with the relay threads: [`VhostUserStats::frontend_fds_closed`].
    fds_closed: Arc<AtomicU64>,
    too_many_regions: AtomicU64,
    /// [`VhostUserStats::tx_queue_wakeups`], counted after the eventfd is written.
    tx_queue_wakeups: AtomicU64,
    /// [`VhostUserStats::rx_queue_events`].
    rx_queue_events: AtomicU64,
    /// Frames wait for the guest's receive buffers and the router sleeps: the receive
    /// queue's kicks are wanted (they wake the port), not turned off. Written by the
    /// port with the queue's lock held, read by the worker under it.
    rx_kicks_wanted: AtomicBool,
}

impl Shared {
    fn conn(&self) -> MutexGuard<'_, Conn> {
        // A panic elsewhere must not take the router down with it.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, f: impl FnOnce(&mut Conn)) {
        f(&mut self.conn());
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.wake();
    }

    fn wake(&self) {
        // EAGAIN only when the counter is about to overflow: it is readable anyway.
        self.wake.signal();
    }
}

/// The `VhostUserBackend` of one connection: it answers feature questions and passes
/// events on to the port; it moves no frames (see the module doc).
struct NetBackend {
    shared: Arc<Shared>,
    /// Ends this connection; set once the daemon has it, before any message is relayed.
    shutdown: Mutex<Option<ShutdownHandle>>,
}

impl VhostUserBackend for NetBackend {
    type Bitmap = ();
    type Vring = Vring;

    fn num_queues(&self) -> usize {
        2
    }

    fn max_queue_size(&self) -> usize {
        MAX_QUEUE_SIZE
    }

    fn features(&self) -> u64 {
        OFFERED_FEATURES
    }

    fn acked_features(&self, features: u64) {
        tracing::debug!(features = format_args!("{features:#x}"), "vhost-user features acked");
        self.shared.update(|c| c.features = features);
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::REPLY_ACK | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
    }

    fn reset_device(&self) {
        self.shared.update(|c| c.features = 0);
    }

    fn set_event_idx(&self, _enabled: bool) {
        // EVENT_IDX is not offered.
    }

    fn update_memory(&self, mem: GuestMemoryAtomic<GuestMemoryMmap>) -> io::Result<()> {
        let regions = mem.memory().num_regions();
        if regions > MAX_MEM_REGIONS {
            // The region is in the daemon's map already (`ADD_MEM_REG` inserts before it
            // tells us): only ending the connection gives its descriptor back.
            tracing::warn!(
                regions,
                max = MAX_MEM_REGIONS,
                "vhost-user frontend maps more memory regions than the port allows: disconnecting it"
            );
            self.shared.too_many_regions.fetch_add(1, Ordering::Relaxed);
            if let Some(h) = self.shutdown.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                h.shutdown();
            }
            return Err(io::Error::other(format!("more than {MAX_MEM_REGIONS} memory regions")));
        }
        self.shared.update(|c| c.mem = Some(mem));
        Ok(())
    }

    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        // Lets the listener stop this connection's worker thread when the frontend goes.
        new_event_consumer_and_notifier(EventFlag::NONBLOCK | EventFlag::CLOEXEC).ok()
    }

    fn handle_event(
        &self,
        device_event: u16,
        _evset: EventSet,
        vrings: &[Vring],
        _thread_id: usize,
    ) -> io::Result<()> {
        // Called when a queue starts and on every kick, with all the connection's vrings.
        let have = self.shared.conn().vrings.is_some();
        if !have && vrings.len() > TX_QUEUE {
            self.shared.update(|c| c.vrings = Some(vrings.to_vec()));
        }
        match usize::from(device_event) {
            TX_QUEUE => {
                self.shared.wake();
                self.shared.tx_queue_wakeups.fetch_add(1, Ordering::Release);
            }
            RX_QUEUE => {
                // The queue started, or the guest posted receive buffers and kicked. Only
                // frames waiting for buffers while the router sleeps need to hear of it
                // (the port asks for kicks then); else a kick only costs a wake-up of this
                // thread (and, for a QEMU guest, an exit): ask for none
                // (`VRING_USED_F_NO_NOTIFY`; a queue reset clears it and starts the queue
                // again). Under the queue's lock, which the port holds when it changes its
                // mind. Err: the used ring lies outside guest memory; the router's next
                // send counts what that breaks.
                if let Some(rx) = vrings.get(RX_QUEUE) {
                    let mut state = rx.get_mut();
                    if self.shared.rx_kicks_wanted.load(Ordering::Acquire) {
                        self.shared.wake();
                    } else {
                        let _ = state.disable_notification();
                    }
                }
                self.shared.rx_queue_events.fetch_add(1, Ordering::Release);
            }
            _ => {}
        }
        Ok(())
    }
}

/// The router thread's view of the current connection.
struct Active {
    /// The guest's memory as of the connection's last change: every change of the map
    /// (`SET_MEM_TABLE`, `ADD_MEM_REG`, `REM_MEM_REG`) goes through `update_memory`, which
    /// bumps the generation the port checks before each batch, so the snapshot is taken
    /// again then; it saves an `arc-swap` load per batch.
    mem: Arc<GuestMemoryMmap>,
    rx: Vring,
    tx: Vring,
    neg: Negotiated,
}

/// A port that is a guest's virtio-net device, served over a vhost-user socket.
pub struct VhostUserPort {
    info: PortInfo,
    socket: PathBuf,
    /// Private directory of the daemon's internal socket (see the `relay` module).
    private_dir: PathBuf,
    shared: Arc<Shared>,
    listener: Option<JoinHandle<()>>,
    seen_generation: u64,
    active: Option<Active>,
    /// The last receive filled its batch: the guest's kicks are off and the port's eventfd
    /// was left readable, so the router comes back without a read and a write of the
    /// eventfd per batch.
    backlog: bool,
    /// The router polls the port ([`Port::set_polling`]): the guest's kicks stay off and
    /// the eventfd is left alone from batch to batch.
    polling: bool,
    /// The connection generation whose transmit queue had its kicks turned off for the
    /// polling (`u64::MAX`: none yet); a new connection or renegotiation turns them off again.
    kicks_off: u64,
    /// Frames for the guest waiting for its receive buffers.
    waiting: Waiting,
    /// The guest's receive-queue kicks are on: frames wait and the router sleeps.
    rx_kicks: bool,
    /// Used-ring entries of the batch in progress.
    used: Vec<(u16, u32)>,
    /// The segments' headers of a super-frame the guest cannot take whole (their payloads
    /// are copied from the super-frame straight into the guest's buffers).
    segment_headers: Vec<u8>,
    stats: PortStats,
    vstats: VhostUserStats,
}

impl std::fmt::Debug for VhostUserPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VhostUserPort")
            .field("info", &self.info)
            .field("socket", &self.socket)
            .field("connected", &self.active.is_some())
            .finish()
    }
}

/// A locally administered unicast MAC derived from `seed` (FNV-1a); memif ports use it too.
pub(crate) fn derived_mac(seed: &[u8]) -> [u8; 6] {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in seed {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let b = h.to_be_bytes();
    [0x02, b[3], b[4], b[5], b[6], b[7]]
}

impl VhostUserPort {
    /// Opens a port with index `id` and configured `name`, listening for a vhost-user
    /// frontend (QEMU) on the Unix socket `socket`. A stale socket file at that path is
    /// replaced; any other file there is an error. The socket is removed when the port is
    /// dropped.
    pub fn open(
        id: PortId,
        name: &str,
        socket: &Path,
        options: &VhostUserOptions,
    ) -> Result<VhostUserPort, PortError> {
        let shown = socket.display().to_string();
        let io_err = |op: &'static str| {
            let shown = shown.clone();
            move |source: io::Error| PortError::Io { ifname: shown, op, source }
        };
        let mtu = options.mtu.unwrap_or(DEFAULT_MTU);
        if mtu < MIN_MTU {
            return Err(PortError::MtuTooSmall { ifname: shown, requested: mtu });
        }
        if mtu > MAX_MTU {
            return Err(PortError::MtuTooLarge { ifname: shown, requested: mtu, interface_mtu: MAX_MTU });
        }
        if let Ok(meta) = std::fs::symlink_metadata(socket) {
            if !meta.file_type().is_socket() {
                return Err(io_err("replace the file at the socket path (not a socket)")(io::Error::from(
                    io::ErrorKind::AlreadyExists,
                )));
            }
            if std::os::unix::net::UnixStream::connect(socket).is_ok() {
                return Err(io_err("take over the socket (another process is listening on it)")(
                    io::Error::from(io::ErrorKind::AddrInUse),
                ));
            }
            std::fs::remove_file(socket).map_err(io_err("remove the stale socket"))?;
        }
        let group = match &options.socket_group {
            None => None,
            Some(g) => match vmpls_sys::process::group_id(g) {
                Ok(Some(gid)) => Some(gid),
                Ok(None) => return Err(PortError::NoSuchGroup { ifname: shown, group: g.clone() }),
                Err(e) => return Err(io_err("look up the socket's group")(e)),
            },
        };
        // Whoever can connect drives the guest's side of the port: only the router's
        // user, or the group named for QEMU.
        let mode = if group.is_some() { 0o660 } else { 0o600 };
        let public = vmpls_sys::unix::listen_with_mode(socket, mode, group)
            .map_err(io_err("bind the vhost-user socket"))?;
        let private_dir = match private_dir() {
            Ok(d) => d,
            Err(e) => {
                let _ = std::fs::remove_file(socket);
                return Err(io_err("create a private directory")(e));
            }
        };
        let started = (|| {
            let internal_path = private_dir.join("backend.sock");
            let internal = UnixListener::bind(&internal_path).map_err(io_err("bind the internal socket"))?;
            let wake = EventFd::new().map_err(io_err("create an eventfd"))?;
            let shared = Arc::new(Shared {
                wake,
                generation: AtomicU64::new(0),
                stop: AtomicBool::new(false),
                conn: Mutex::new(Conn::default()),
                connections: AtomicU64::new(0),
                disconnections: AtomicU64::new(0),
                fds_closed: Arc::new(AtomicU64::new(0)),
                too_many_regions: AtomicU64::new(0),
                tx_queue_wakeups: AtomicU64::new(0),
                rx_queue_events: AtomicU64::new(0),
                rx_kicks_wanted: AtomicBool::new(false),
            });
            let thread_shared = shared.clone();
            let daemon_name = name.to_owned();
            let sockets = Sockets { public, internal: Listener::from(internal), internal_path };
            let listener = std::thread::Builder::new()
                .name(format!("vhost-{name}"))
                .spawn(move || serve(sockets, &thread_shared, &daemon_name))
                .map_err(io_err("start the listener thread"))?;
            Ok((shared, listener))
        })();
        let (shared, listener) = match started {
            Ok(v) => v,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&private_dir);
                let _ = std::fs::remove_file(socket);
                return Err(e);
            }
        };
        let mac = options.mac.unwrap_or_else(|| derived_mac(socket.as_os_str().as_encoded_bytes()));
        tracing::debug!(port = name, socket = %shown, mtu, "vhost-user port listening");
        Ok(VhostUserPort {
            info: PortInfo { id, name: name.to_owned(), mac, mtu, caps: vhost_user_caps(OFFERED_FEATURES) },
            socket: socket.to_owned(),
            private_dir,
            shared,
            listener: Some(listener),
            seen_generation: u64::MAX,
            backlog: false,
            polling: false,
            kicks_off: u64::MAX,
            active: None,
            waiting: Waiting::default(),
            rx_kicks: false,
            used: Vec::with_capacity(MAX_QUEUE_SIZE),
            segment_headers: Vec::new(),
            stats: PortStats::default(),
            vstats: VhostUserStats::default(),
        })
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// True while a frontend is connected (its queues may not be running yet).
    pub fn is_connected(&self) -> bool {
        self.shared.conn().connected
    }

    /// The virtio features the connected guest acknowledged, if one is connected and has
    /// negotiated.
    pub fn negotiated_features(&self) -> Option<u64> {
        let c = self.shared.conn();
        (c.connected && c.features != 0).then_some(c.features)
    }

    /// Counters beyond [`Port::stats`].
    pub fn vhost_stats(&self) -> VhostUserStats {
        VhostUserStats {
            connections: self.shared.connections.load(Ordering::Relaxed),
            disconnections: self.shared.disconnections.load(Ordering::Relaxed),
            frontend_fds_closed: self.shared.fds_closed.load(Ordering::Relaxed),
            frontend_too_many_regions: self.shared.too_many_regions.load(Ordering::Relaxed),
            tx_queue_wakeups: self.shared.tx_queue_wakeups.load(Ordering::Acquire),
            rx_queue_events: self.shared.rx_queue_events.load(Ordering::Acquire),
            ..self.vstats
        }
    }

    /// Re-reads the connection if it changed: queues, memory, negotiated features, caps.
    fn refresh(&mut self) {
        let generation = self.shared.generation.load(Ordering::Acquire);
        if generation == self.seen_generation {
            return;
        }
        self.seen_generation = generation;
        let c = self.shared.conn();
        self.active = match (&c.mem, &c.vrings) {
            (Some(mem), Some(vrings)) if c.connected && c.features != 0 => Some(Active {
                mem: mem.memory().into_inner(),
                rx: vrings[RX_QUEUE].clone(),
                tx: vrings[TX_QUEUE].clone(),
                neg: Negotiated::from_features(c.features),
            }),
            _ => None,
        };
        self.info.caps = match &self.active {
            Some(a) => a.neg.caps(),
            None => vhost_user_caps(OFFERED_FEATURES),
        };
        // The queue may be new: the next send asks again if frames wait.
        self.rx_kicks = false;
        self.shared.rx_kicks_wanted.store(false, Ordering::Release);
    }

    /// Drops `pkts` and the frames waiting for the guest: no guest with a running
    /// receive queue.
    fn drop_not_connected(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) {
        let n = pkts.len() + self.waiting.frames.len();
        self.vstats.tx_not_connected += n as u64;
        self.stats.tx_dropped += n as u64;
        pkts.drain(..).for_each(|p| pool.put(p));
        while let Some(p) = self.waiting.pop() {
            pool.put(p);
        }
    }

    /// Sends the frames waiting for the guest's receive buffers, then `pkts` (drained),
    /// giving each buffer back to `pool` once its frame is written or dropped. A frame that
    /// finds the ring full waits behind the older ones (up to the bound; dropped and
    /// counted beyond). While frames wait and the router sleeps, the guest's
    /// receive-queue kicks are on, so its next buffers wake the port.
    fn transmit(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) {
        self.refresh();
        let Some(active) = &self.active else {
            return self.drop_not_connected(pkts, pool);
        };
        let mem = &*active.mem;
        let neg = active.neg;
        let mut vring = active.rx.get_mut();
        if !vring.get_queue().ready() || !vring.is_enabled() {
            drop(vring);
            return self.drop_not_connected(pkts, pool);
        }
        let ring = match SplitRing::new(vring.get_queue_mut(), mem) {
            Ok(ring) => ring,
            Err(e) => {
                drop(vring);
                self.vstats.count_ring_error(e);
                return self.drop_not_connected(pkts, pool);
            }
        };
        self.used.clear();
        let mut batch =
            RxBatch { ring, neg, used: &mut self.used, stats: &mut self.stats, vstats: &mut self.vstats };
        let (waiting, headers) = (&mut self.waiting, &mut self.segment_headers);
        while let Some(pkt) = waiting.frames.front_mut() {
            if batch.offer(pkt, headers) == Offered::RingFull {
                break;
            }
            if let Some(pkt) = waiting.pop() {
                pool.put(pkt);
            }
        }
        for mut pkt in pkts.drain(..) {
            if waiting.is_empty() && batch.offer(&mut pkt, headers) == Offered::Done {
                pool.put(pkt);
                continue;
            }
            match waiting.push(pkt, pool) {
                Ok(()) => batch.stats.tx_waited += 1,
                Err(pkt) => {
                    batch.drop_no_buffers(1);
                    pool.put(pkt);
                }
            }
        }
        let mut used_err = false;
        let mut interrupt = false;
        if !batch.used.is_empty() {
            match batch.ring.publish_used(batch.used) {
                Ok(_) => interrupt = batch.ring.guest_wants_interrupt(),
                Err(_) => used_err = true,
            }
        }
        // A polling router comes back at its next turn; a sleeping one needs the kick.
        let want_kicks = !waiting.is_empty() && !self.polling;
        if want_kicks != self.rx_kicks {
            self.rx_kicks = want_kicks;
            self.shared.rx_kicks_wanted.store(want_kicks, Ordering::Release);
            if !want_kicks {
                let _ = batch.ring.queue().disable_notification(mem);
            } else if batch.ring.ask_for_kicks() {
                // Buffers came before the kicks were on: try again at once.
                self.shared.wake();
            }
        }
        if interrupt {
            let _ = vring.signal_used_queue();
        }
        drop(vring);
        self.vstats.used_ring_errors += u64::from(used_err);
    }
}

impl VhostUserStats {
    fn count_ring_error(&mut self, _: RingError) {
        self.rings_unmapped += 1;
    }
}

/// Counts a skipped transmit chain under its reason.
fn count_tx_chain_error(stats: &mut PortStats, v: &mut VhostUserStats, e: TxChainError) {
    match e {
        TxChainError::TooShort => v.rx_chain_too_short += 1,
        TxChainError::TooLong => v.rx_chain_too_long += 1,
        TxChainError::WriteOnly => v.rx_chain_write_only += 1,
        TxChainError::BadAddress => v.rx_chain_bad_address += 1,
        TxChainError::BadHeader => {
            v.rx_bad_header += 1;
            stats.rx_bad_vnet_hdr += 1;
            return;
        }
        TxChainError::GsoSizeTooSmall => {
            stats.rx_gso_size_too_small += 1;
            return;
        }
    }
    // The frame could not be read whole.
    stats.rx_truncated += 1;
}

impl Drop for VhostUserPort {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(h) = self.shared.conn().shutdown.take() {
            h.shutdown();
        }
        if let Some(t) = self.listener.take() {
            let _ = t.join();
        }
        if std::fs::symlink_metadata(&self.socket).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(&self.socket);
        }
        let _ = std::fs::remove_dir_all(&self.private_dir);
    }
}

/// Prefix of the [`private_dir`]s in the temporary directory: `vmpls-vhost-PID-N`.
const PRIVATE_DIR_PREFIX: &str = "vmpls-vhost-";

/// A new directory only this user can enter, for the daemon's internal socket. The first
/// call of a process also removes those of processes gone without removing theirs (a
/// router killed with SIGKILL, say): see [`remove_stale_private_dirs`].
fn private_dir() -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    static N: AtomicU64 = AtomicU64::new(0);
    static STALE_REMOVED: std::sync::Once = std::sync::Once::new();
    let tmp = std::env::temp_dir();
    STALE_REMOVED.call_once(|| remove_stale_private_dirs(&tmp));
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = tmp.join(format!("{PRIVATE_DIR_PREFIX}{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// Removes the [`private_dir`]s in `tmp` that this user owns and whose process no longer
/// runs. One whose PID a new process has taken stays (until that one ends too): the
/// directories are small, and a live process's are never touched.
fn remove_stale_private_dirs(tmp: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(tmp) else { return };
    let uid = vmpls_sys::process::effective_uid();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(private_dir_pid) else { continue };
        // Not followed if a link: only a real directory of this user's is removed.
        let owned_dir = entry.metadata().is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if owned_dir && !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The process ID in the name of a [`private_dir`] (`vmpls-vhost-PID-N`).
fn private_dir_pid(name: &str) -> Option<u32> {
    let (pid, n) = name.strip_prefix(PRIVATE_DIR_PREFIX)?.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && digits(n)).then(|| pid.parse().ok()).flatten()
}

/// The listener thread's sockets: QEMU connects to `public`; the daemon accepts the
/// relay's connection on `internal`.
struct Sockets {
    public: UnixListener,
    internal: Listener,
    internal_path: PathBuf,
}

/// The listener thread: accepts one frontend at a time until the port is dropped.
fn serve(mut sockets: Sockets, shared: &Arc<Shared>, name: &str) {
    let epoll = match Epoll::new().and_then(|ep| {
        ep.ctl(ControlOperation::Add, sockets.public.as_raw_fd(), EpollEvent::new(EventSet::IN, 0))
            .map(|()| ep)
    }) {
        Ok(ep) => ep,
        Err(e) => {
            tracing::error!(port = name, error = %e, "vhost-user listener cannot poll its socket");
            return;
        }
    };
    let mut events = [EpollEvent::default(); 1];
    while !shared.stop.load(Ordering::Acquire) {
        match epoll.wait(ACCEPT_POLL_MS, &mut events) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::error!(port = name, error = %e, "vhost-user listener failed");
                return;
            }
        }
        let front = match sockets.public.accept() {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(port = name, error = %e, "vhost-user accept failed");
                continue;
            }
        };
        if let Err(e) = connection(front, &mut sockets, shared, name) {
            tracing::warn!(port = name, error = %e, "vhost-user connection failed");
        }
    }
}

/// Serves one frontend until it goes (or the port is dropped).
fn connection(
    front: std::os::unix::net::UnixStream,
    sockets: &mut Sockets,
    shared: &Arc<Shared>,
    name: &str,
) -> io::Result<()> {
    let back = std::os::unix::net::UnixStream::connect(&sockets.internal_path)?;
    let backend = Arc::new(NetBackend { shared: shared.clone(), shutdown: Mutex::new(None) });
    let mem = GuestMemoryAtomic::new(GuestMemoryMmap::new());
    let mut daemon = VhostUserDaemon::new(name.to_owned(), backend.clone(), mem)
        .map_err(|e| io::Error::other(e.to_string()))?;
    if let Err(e) = daemon.start(&mut sockets.internal) {
        stop_workers(&daemon);
        return Err(io::Error::other(e.to_string()));
    }
    *backend.shutdown.lock().unwrap_or_else(|e| e.into_inner()) = daemon.shutdown_handle();
    let relay = match relay::Relay::start(front, back, name, shared.fds_closed.clone()) {
        Ok(r) => r,
        Err(e) => {
            daemon.request_shutdown();
            let _ = daemon.wait();
            stop_workers(&daemon);
            return Err(e);
        }
    };
    shared.connections.fetch_add(1, Ordering::Relaxed);
    shared.update(|c| *c = Conn { connected: true, shutdown: daemon.shutdown_handle(), ..Conn::default() });
    tracing::info!(port = name, "vhost-user frontend connected");
    if shared.stop.load(Ordering::Acquire) {
        daemon.request_shutdown();
    }
    match daemon.wait() {
        Ok(()) => tracing::info!(port = name, "vhost-user frontend disconnected"),
        Err(e) => tracing::info!(port = name, error = %e, "vhost-user frontend gone"),
    }
    relay.stop();
    stop_workers(&daemon);
    shared.disconnections.fetch_add(1, Ordering::Relaxed);
    // Drops our references to the guest's memory and queues.
    shared.update(|c| *c = Conn::default());
    Ok(())
}

fn stop_workers(daemon: &VhostUserDaemon<Arc<NetBackend>>) {
    for h in daemon.get_epoll_handlers() {
        h.send_exit_event();
    }
}

impl AsFd for VhostUserPort {
    /// The descriptor to poll for readability.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.shared.wake.as_fd()
    }
}

impl Port for VhostUserPort {
    fn info(&self) -> &PortInfo {
        &self.info
    }

    fn recv_batch(&mut self, pool: &mut PacketPool, out: &mut Vec<Packet>, max: usize) -> io::Result<usize> {
        // Clear the eventfd first (a kick after this point makes it readable again), unless
        // a backlog keeps it readable on purpose or the router polls without it.
        if !self.backlog && !self.polling {
            self.shared.wake.drain();
        }
        if !self.waiting.is_empty() {
            // The guest's kick for its new buffers woke the port, or the router polls.
            self.transmit(&mut Vec::new(), pool);
        }
        self.refresh();
        let Some(active) = &self.active else {
            self.backlog = false;
            self.shared.wake.drain();
            return Ok(0);
        };
        let mem = &*active.mem;
        let neg = active.neg;
        let mut vring = active.tx.get_mut();
        if !vring.get_queue().ready() || !vring.is_enabled() {
            self.backlog = false;
            self.shared.wake.drain();
            return Ok(0);
        }
        let mut ring = match SplitRing::new(vring.get_queue_mut(), mem) {
            Ok(ring) => ring,
            Err(e) => {
                drop(vring);
                self.backlog = false;
                self.shared.wake.drain();
                self.vstats.count_ring_error(e);
                return Ok(0);
            }
        };
        if !self.polling {
            let _ = ring.queue().disable_notification(mem);
        } else if self.kicks_off != self.seen_generation {
            // Once per polling spell (and connection): VRING_USED_F_NO_NOTIFY.
            let _ = ring.queue().disable_notification(mem);
            self.kicks_off = self.seen_generation;
        }
        ring.prefetch(max);
        self.used.clear();
        let first = out.len();
        let mut popped = 0;
        while popped < max {
            let Some(chain) = ring.pop() else {
                break;
            };
            popped += 1;
            self.used.push((chain.head_index(), 0));
            let Some(mut p) = pool.get() else {
                self.stats.rx_no_buffer += 1;
                continue;
            };
            match chain::copy_tx_chain(mem, chain, neg.hdr_len, p.receive_area_after(neg.hdr_len)) {
                Ok(len) => {
                    p.set_received(len);
                    out.push(p);
                }
                Err(e) => {
                    count_tx_chain_error(&mut self.stats, &mut self.vstats, e);
                    pool.put(p);
                }
            }
        }
        // The headers, once every copy is done (see `copy_tx_chain`).
        let (stats, vstats, id) = (&mut self.stats, &mut self.vstats, self.info.id);
        let delivered = crate::keep_received(out, first, pool, |p| {
            let len = p.len();
            match chain::tx_offload(p.received_prefix(neg.hdr_len), len) {
                Ok(offload) => {
                    p.offload = offload;
                    p.port = id;
                    stats.rx_packets += 1;
                    stats.rx_bytes += len as u64;
                    true
                }
                Err(e) => {
                    count_tx_chain_error(stats, vstats, e);
                    false
                }
            }
        });
        if self.polling {
            // The router comes back without a kick: they stay off, the eventfd untouched.
        } else if popped == max {
            // More may wait: keep the guest's kicks off and come back.
            if !self.backlog {
                self.shared.wake();
                self.backlog = true;
            }
        } else {
            if self.backlog {
                // Before the kicks come back on: one after this makes it readable again.
                self.shared.wake.drain();
                self.backlog = false;
            }
            if ring.queue().enable_notification(mem).unwrap_or(true) {
                // Something arrived while kicks were off.
                self.shared.wake();
            }
        }
        let mut used_err = false;
        let mut interrupt = false;
        if !self.used.is_empty() {
            match ring.publish_used(&self.used) {
                Ok(_) => interrupt = ring.guest_wants_interrupt(),
                Err(_) => used_err = true,
            }
        }
        if interrupt {
            let _ = vring.signal_used_queue();
        }
        drop(vring);
        self.vstats.used_ring_errors += u64::from(used_err);
        Ok(delivered)
    }

    fn send_batch(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize> {
        let sent_before = self.stats.tx_packets;
        self.transmit(pkts, pool);
        Ok((self.stats.tx_packets - sent_before) as usize)
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn set_polling(&mut self, on: bool) -> bool {
        if on {
            self.polling = true;
            self.backlog = false;
            self.kicks_off = u64::MAX;
            return false;
        }
        if !self.polling {
            return false;
        }
        self.polling = false;
        self.backlog = false;
        // In this order: a kick after the drain leaves the eventfd readable, and what the
        // guest queued while its kicks were off (it need not kick then) is seen by the
        // look at the ring after they are back on.
        self.shared.wake.drain();
        self.refresh();
        // Frames waiting for the guest's buffers: the receive before the sleep sends what
        // it can and turns the guest's receive-queue kicks on for the rest.
        let waiting = !self.waiting.is_empty();
        let Some(active) = &self.active else {
            return waiting;
        };
        let mem = &*active.mem;
        let mut vring = active.tx.get_mut();
        if !vring.get_queue().ready() || !vring.is_enabled() {
            return waiting;
        }
        // Err: the avail ring is outside guest memory; receiving counts what that breaks.
        vring.get_queue_mut().enable_notification(mem).unwrap_or(true) || waiting
    }

    fn polls_rings(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn neg(features: u64) -> Negotiated {
        Negotiated::from_features(features)
    }

    #[test]
    fn caps_follow_the_guests_features() {
        let all = neg(OFFERED_FEATURES);
        assert_eq!(all.hdr_len, 12);
        assert!(all.mergeable);
        let c = all.caps();
        assert!(c.tso4 && c.tso6 && c.csum);
        assert!(!c.uso && c.mpls_gso);
        // A guest with tso4 off (`-device virtio-net-pci,guest_tso4=off`).
        let c = vhost_user_caps(OFFERED_FEATURES & !bit(VIRTIO_NET_F_GUEST_TSO4));
        assert!(!c.tso4 && c.tso6);
        // TSO without receive checksum offload is not TSO.
        let c = vhost_user_caps(OFFERED_FEATURES & !bit(VIRTIO_NET_F_GUEST_CSUM));
        assert!(!c.tso4 && !c.tso6 && !c.csum);
        // A legacy guest without VERSION_1 or MRG_RXBUF uses the 10-byte header.
        let legacy = neg(bit(VIRTIO_NET_F_CSUM));
        assert_eq!(legacy.hdr_len, 10);
        assert!(!legacy.mergeable);
    }

    fn tso_packet(labelled: bool, ecn: bool) -> Packet {
        let mut f = vec![0u8; 200];
        if labelled {
            f[12..14].copy_from_slice(&[0x88, 0x47]);
            f[16] = 0x01; // bottom of stack
        } else {
            f[12..14].copy_from_slice(&[0x08, 0x00]);
        }
        let mut p = Packet::from_frame(0, &f);
        p.offload = virtio_net::Repr {
            needs_csum: true,
            gso_type: virtio_net::GsoType::TcpV4,
            gso_ecn: ecn,
            gso_size: 1448,
            hdr_len: 54,
            csum_start: 34,
            csum_offset: 16,
            ..Default::default()
        };
        p
    }

    #[test]
    fn super_frames_go_whole_only_where_the_guest_takes_them() {
        let all = neg(OFFERED_FEATURES);
        assert_eq!(delivery(&tso_packet(false, false), &all), Delivery::Whole);
        assert_eq!(delivery(&tso_packet(false, true), &all), Delivery::Whole);
        assert_eq!(delivery(&tso_packet(true, false), &all), Delivery::Segment);
        let no_tso4 = neg(OFFERED_FEATURES & !bit(VIRTIO_NET_F_GUEST_TSO4));
        assert_eq!(delivery(&tso_packet(false, false), &no_tso4), Delivery::Segment);
        let no_ecn = neg(OFFERED_FEATURES & !bit(VIRTIO_NET_F_GUEST_ECN));
        assert_eq!(delivery(&tso_packet(false, true), &no_ecn), Delivery::Segment);
        let mut plain = tso_packet(false, false);
        plain.offload.gso_type = virtio_net::GsoType::None;
        assert_eq!(delivery(&plain, &all), Delivery::Whole);
        let no_csum = neg(OFFERED_FEATURES & !bit(VIRTIO_NET_F_GUEST_CSUM));
        assert_eq!(delivery(&plain, &no_csum), Delivery::CompleteChecksum);
    }

    #[test]
    fn receive_header_carries_the_offload_and_drops_checksum_flags_without_guest_csum() {
        let p = tso_packet(false, false);
        let h = rx_header(&p.offload, &neg(OFFERED_FEATURES));
        assert_eq!(h, [1, 1, 54, 0, 0xa8, 0x05, 34, 0, 16, 0, 0, 0]);
        let mut plain = p.offload;
        plain.gso_type = virtio_net::GsoType::None;
        plain.data_valid = true;
        let h = rx_header(&plain, &neg(OFFERED_FEATURES & !bit(VIRTIO_NET_F_GUEST_CSUM)));
        assert_eq!(h[0], 0);
    }

    #[test]
    fn l3_offset_skips_the_label_stack() {
        let mut f = vec![0u8; 64];
        assert_eq!(l3_offset(&f), 14);
        f[12..14].copy_from_slice(&[0x88, 0x47]);
        f[20] = 0x01; // second entry has S set
        assert_eq!(l3_offset(&f), 22);
    }

    #[test]
    fn derived_macs_are_local_unicast_and_stable() {
        let a = derived_mac(b"/run/vmpls/g1.sock");
        assert_eq!(a[0], 0x02);
        assert_eq!(a, derived_mac(b"/run/vmpls/g1.sock"));
        assert_ne!(a, derived_mac(b"/run/vmpls/g2.sock"));
    }

    #[test]
    fn open_refuses_a_regular_file_and_bad_mtus() {
        let dir = std::env::temp_dir().join(format!("vmpls-vhost-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("not-a-socket");
        std::fs::write(&file, b"keep me").unwrap();
        let e = VhostUserPort::open(0, "g", &file, &VhostUserOptions::default()).unwrap_err();
        assert!(matches!(e, PortError::Io { .. }), "{e}");
        assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
        let sock = dir.join("s.sock");
        let small = VhostUserOptions { mtu: Some(60), ..VhostUserOptions::default() };
        assert!(matches!(VhostUserPort::open(0, "g", &sock, &small), Err(PortError::MtuTooSmall { .. })));
        // A stale socket is replaced, and removed when the port goes.
        drop(UnixListener::bind(&sock).unwrap());
        let port = VhostUserPort::open(0, "g", &sock, &VhostUserOptions::default()).unwrap();
        assert!(!port.is_connected());
        assert_eq!(port.info().mtu, DEFAULT_MTU);
        // A socket someone listens on is not taken over.
        let e = VhostUserPort::open(1, "h", &sock, &VhostUserOptions::default()).unwrap_err();
        assert!(e.to_string().contains("another process"), "{e}");
        drop(port);
        assert!(!sock.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_private_dirs_of_processes_gone_are_removed() {
        assert_eq!(private_dir_pid("vmpls-vhost-123-0"), Some(123));
        for other in
            ["vmpls-vhost-unit-123", "vmpls-vhost-123-", "vmpls-vhost-12a-0", "vmpls-vhost-123", "x-1-2"]
        {
            assert_eq!(private_dir_pid(other), None, "{other}");
        }
        let tmp = std::env::temp_dir().join(format!("vmpls-stale-test-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        // A process that has ended: its PID names no process (unless taken again, which
        // this test would see as a directory kept).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let stale = tmp.join(format!("vmpls-vhost-{gone}-3"));
        let live = tmp.join(format!("vmpls-vhost-{}-7", std::process::id()));
        let unrelated = tmp.join(format!("vmpls-vhost-unit-{gone}"));
        for dir in [&stale, &live, &unrelated] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("backend.sock"), b"").unwrap();
        }
        remove_stale_private_dirs(&tmp);
        assert!(!stale.exists(), "the dead process's directory is removed");
        assert!(live.exists(), "a running process's directory stays");
        assert!(unrelated.exists(), "a name of another shape stays");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn the_socket_is_private_unless_a_group_is_given() {
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("vmpls-vhost-mode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("g.sock");
        let port = VhostUserPort::open(0, "g", &sock, &VhostUserOptions::default()).unwrap();
        assert_eq!(std::fs::metadata(&sock).unwrap().mode() & 0o777, 0o600);
        drop(port);
        // Group 1 ("daemon" on Debian) stands for QEMU's.
        let daemon = vmpls_sys::process::group_id("daemon").unwrap().expect("group daemon");
        let opts = VhostUserOptions { socket_group: Some("daemon".into()), ..VhostUserOptions::default() };
        let port = VhostUserPort::open(0, "g", &sock, &opts).unwrap();
        let meta = std::fs::metadata(&sock).unwrap();
        assert_eq!((meta.mode() & 0o777, meta.gid()), (0o660, daemon));
        drop(port);
        let opts =
            VhostUserOptions { socket_group: Some("no-such-group".into()), ..VhostUserOptions::default() };
        let e = VhostUserPort::open(0, "g", &sock, &opts).unwrap_err();
        assert!(matches!(e, PortError::NoSuchGroup { .. }), "{e}");
        assert!(!sock.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
