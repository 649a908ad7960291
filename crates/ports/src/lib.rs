//! Ports: the places frames come from and go to.
//!
//! One small trait, [`Port`], in the manner of `quinn-udp`: the forwarding thread polls
//! the port's descriptor ([`AsFd`]) for readability, then moves batches of [`Packet`]s with
//! [`Port::recv_batch`] and [`Port::send_batch`]. Every frame carries its virtio-net
//! metadata ([`offload`](vmpls_dataplane::PacketBuffer::offload)) in and out, so TSO
//! super-frames pass whole.
//!
//! Implementations:
//! - [`AfPacketPort`]: any Linux Ethernet interface (veth, NIC) through an `AF_PACKET`
//!   socket with `PACKET_VNET_HDR`, batched with `recvmmsg`/`sendmmsg`.
//! - [`TapPort`]: a TAP device vmpls creates (`IFF_VNET_HDR`, checksum and TSO offloads),
//!   for the host stack or a container.
//! - [`VhostUserPort`]: the virtio-net device of a QEMU/KVM guest, over a vhost-user
//!   socket; guest TSO frames enter whole, and frames leave whole to a guest that
//!   negotiated `GUEST_TSO4/6`.
//! - [`MemifPort`]: shared memory with another process on this host (VPP's memif, DPDK's
//!   `net_memif`, another vmpls), frames copied once into the peer's buffers.
//! - [`MplsUdpPort`]: an MPLS-in-UDP tunnel (RFC 7510) to one remote router over an IP
//!   underlay, a super-frame's segments in one `UDP_SEGMENT` send, received with `UDP_GRO`.
//!
//! Sockets, interface ioctls and TUN/TAP setup are `vmpls-sys`. The `unsafe` code left
//! here is what only the ports need: the `recvmmsg`/`sendmmsg` arrays in `mmsg`, the ring
//! mappings in `af_packet_ring` and `af_packet_txring` (experimental, behind the `rings`
//! feature, off by default), the UDP tunnel's `sendmsg`/`recvmsg`
//! control messages in `mpls_udp`, the shared memory of `memif::shm`, and the file-descriptor passing in `vhost_user::relay`; guest memory is only
//! touched through `vm-memory` and `virtio-queue`. Every block has a `// SAFETY:` note.

mod af_packet;
#[cfg(feature = "rings")]
mod af_packet_ring;
#[cfg(feature = "rings")]
mod af_packet_txring;
mod memif;
mod mmsg;
mod mpls_udp;
mod tap;
mod vhost_user;

use std::io;
use std::os::fd::AsFd;

use vmpls_dataplane::{Packet, PacketPool, PortInfo};

pub use af_packet::{AfPacketPort, MIN_MTU, af_packet_caps};
#[cfg(feature = "rings")]
pub use af_packet_ring::{AfPacketRingPort, RingConfig};
#[cfg(feature = "rings")]
pub use af_packet_txring::{AfPacketTxRing, RecvFrom, SubmitError, TxRingConfig};
pub use memif::{
    APP_NAME as MEMIF_APP_NAME, DEFAULT_MTU as MEMIF_DEFAULT_MTU, MemifOptions, MemifPort, MemifRole,
    MemifStats, memif_caps,
};
pub use mpls_udp::{MplsUdpOptions, MplsUdpPort, SOURCE_PORTS as MPLS_UDP_SOURCE_PORTS, mpls_udp_caps};
pub use tap::{TAP_MAX_MTU, TapOptions, TapPort, tap_caps};
/// The vhost-user virtqueue fuzz harness (for `fuzz/` and the corpus replay test).
#[doc(hidden)]
pub use vhost_user::fuzz::{QueueRun as FuzzQueueRun, drive_queues as fuzz_vhost_queues};
pub use vhost_user::{
    DEFAULT_MTU as VHOST_USER_DEFAULT_MTU, MAX_MEM_REGIONS, OFFERED_FEATURES as VHOST_USER_FEATURES,
    VhostUserOptions, VhostUserPort, VhostUserStats, WAITING_BYTES as VHOST_USER_WAITING_BYTES,
    WAITING_FRAMES as VHOST_USER_WAITING_FRAMES, vhost_user_caps,
};
pub use vmpls_sys::if_nametoindex;

/// Most frames one `recv_batch`/`send_batch` syscall moves.
pub const BATCH: usize = mmsg::BATCH;

/// A place frames come from and go to. Non-blocking: the router polls the port's
/// descriptor ([`AsFd`]) for readability; the port owns it and keeps it open as long as
/// it lives.
pub trait Port: AsFd + Send {
    /// Identity, MAC, MTU and offload capabilities, as the pipeline sees them.
    fn info(&self) -> &PortInfo;

    /// Receives up to `max` frames into buffers taken from `pool`, appending them to `out`
    /// (with `offload` decoded from the virtio-net header and `port` set to this port's id).
    /// Returns how many were received; `Ok(0)` when nothing waits (`EAGAIN`). A frame with a
    /// malformed virtio-net header or truncated (`MSG_TRUNC`) is counted and dropped, not
    /// returned. When `pool` is empty, waiting frames are read and dropped (counted as
    /// `rx_no_buffer`) so a level-triggered poll does not spin.
    fn recv_batch(&mut self, pool: &mut PacketPool, out: &mut Vec<Packet>, max: usize) -> io::Result<usize>;

    /// Sends every frame in `pkts` (draining it, returning each buffer to `pool`), writing
    /// each frame's `offload` as its virtio-net header. Frames the kernel refuses are
    /// counted (by errno) and dropped; the rest still go out. A port whose peer has no
    /// room now may keep frames (bounded, in order) and send them first when room comes
    /// (a vhost-user guest's receive ring). Returns how many were sent.
    fn send_batch(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize>;

    /// Counters since the port was opened.
    fn stats(&self) -> PortStats;

    /// Adaptive polling: `true` when the router starts calling [`Port::recv_batch`] in a
    /// loop without waiting for the descriptor, `false` when it goes back to sleeping on
    /// it. A port whose peer notifies it (a vhost-user guest's kicks) turns the
    /// notifications off while polled and back on when the polling ends; it then looks at
    /// its queue once more and returns `true` if frames arrived meanwhile (they may have
    /// come without a notification), so the router receives before it sleeps. A kernel
    /// socket's readiness needs no re-arming: the default does nothing and returns `false`.
    fn set_polling(&mut self, on: bool) -> bool {
        let _ = on;
        false
    }

    /// True when the port can be polled without its descriptor (frames come through
    /// shared rings the router reads itself): while polling, the router then needs no
    /// `poll(2)` for it.
    fn polls_rings(&self) -> bool {
        false
    }

    /// True for a port with exactly one neighbour and no link-layer addresses to learn (a
    /// tunnel): the pipeline sends to it without ARP or neighbour discovery, and the
    /// port ignores the Ethernet addresses.
    fn point_to_point(&self) -> bool {
        false
    }

    /// The MTU the port's medium carries now, for a port whose MTU follows something the
    /// router cannot watch as an interface (a tunnel's path MTU through its underlay,
    /// which changes with the underlay's links and with "packet too big" the kernel
    /// learns). `None`: the port's MTU is its interface's (the router follows that) or
    /// does not change.
    fn medium_mtu(&self) -> Option<u32> {
        None
    }
}

/// Frames the kernel refused at output, by errno.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxErrors {
    /// `ENOMEM`: on a veth, the kernel could not validate a GSO frame (an MPLS super-frame
    /// marked GSO, see research/kernel-io.md).
    pub nomem: u64,
    /// `ENOBUFS`: the device queue dropped the frame.
    pub nobufs: u64,
    /// `EMSGSIZE`: a frame larger than the interface MTU without GSO.
    pub msgsize: u64,
    /// `EINVAL`: a malformed frame or virtio-net header.
    pub inval: u64,
    /// Any other errno.
    pub other: u64,
    /// The errno of the most recent frame counted in `other` (0 if none).
    pub last_other_errno: i32,
}

impl TxErrors {
    /// Counts one refused frame under its errno.
    pub fn record(&mut self, errno: i32) {
        match errno {
            libc::ENOMEM => self.nomem += 1,
            libc::ENOBUFS => self.nobufs += 1,
            libc::EMSGSIZE => self.msgsize += 1,
            libc::EINVAL => self.inval += 1,
            e => {
                self.other += 1;
                self.last_other_errno = e;
            }
        }
    }

    /// All refused frames.
    pub fn total(&self) -> u64 {
        self.nomem + self.nobufs + self.msgsize + self.inval + self.other
    }
}

/// Counters of one port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames handed to the pipeline.
    pub rx_packets: u64,
    /// Bytes of those frames (Ethernet header on, virtio-net header not counted).
    pub rx_bytes: u64,
    /// Frames dropped for a virtio-net header we cannot decode.
    pub rx_bad_vnet_hdr: u64,
    /// Super-frames dropped for a `gso_size` below
    /// [`MIN_GSO_SIZE`](vmpls_dataplane::gso::MIN_GSO_SIZE): no real stack sends them, and
    /// cutting one would stall the forwarding thread.
    pub rx_gso_size_too_small: u64,
    /// Frames dropped because they did not fit the buffer (`MSG_TRUNC`).
    pub rx_truncated: u64,
    /// Frames dropped because the packet pool was empty.
    pub rx_no_buffer: u64,
    /// Frames the kernel dropped before the router read them: the socket's receive queue
    /// was full (`PACKET_STATISTICS`; AF_PACKET ports only).
    pub rx_kernel_dropped: u64,
    /// Our own transmitted frames seen on receive (`PACKET_OUTGOING`), ignored.
    pub rx_outgoing: u64,
    /// Frames the kernel accepted.
    pub tx_packets: u64,
    /// Bytes of those frames (virtio-net header not counted).
    pub tx_bytes: u64,
    /// Frames dropped because the socket buffer was full (`EAGAIN`): the forwarding thread
    /// never blocks on output.
    pub tx_dropped: u64,
    /// Frames the kernel refused, by errno.
    pub tx_errors: TxErrors,
    /// Tunnel ports: datagrams whose payload is not a label stack (no bottom of stack
    /// within the deepest stack the router takes), dropped.
    pub rx_not_mpls: u64,
    /// Tunnel ports: datagrams from an address other than the configured remote, dropped.
    pub rx_wrong_source: u64,
    /// Tunnel ports: frames not sent because the remote or the way to it was reported
    /// unreachable (the remote's "port unreachable" when no router listens there).
    pub tx_unreachable: u64,
    /// Tunnel ports: frames a tunnel cannot carry (neither MPLS nor IP), dropped.
    pub tx_not_mpls: u64,
    /// Super-frames the port took whole and cut into segments itself (a labelled one for a
    /// vhost-user guest, any for a tunnel): the pipeline counts each as one frame out.
    pub tx_segmented: u64,
    /// The segments made from them; those that went out are also in `tx_packets`, those
    /// that could not in `tx_dropped` or `tx_errors`.
    pub tx_segments: u64,
    /// Frames that found no room at the peer and waited in the port (a vhost-user guest's
    /// full receive ring); counted again in `tx_packets` when they went, or in
    /// `tx_dropped` if the peer went first.
    pub tx_waited: u64,
}

/// Counters of two sockets of one port (before and after it was reopened): summed; the
/// last errno is the later one's if it has any.
impl std::ops::Add for TxErrors {
    type Output = TxErrors;

    fn add(self, b: TxErrors) -> TxErrors {
        TxErrors {
            nomem: self.nomem + b.nomem,
            nobufs: self.nobufs + b.nobufs,
            msgsize: self.msgsize + b.msgsize,
            inval: self.inval + b.inval,
            other: self.other + b.other,
            last_other_errno: if b.other > 0 { b.last_other_errno } else { self.last_other_errno },
        }
    }
}

/// Counters of two sockets of one port (before and after it was reopened), summed.
impl std::ops::Add for PortStats {
    type Output = PortStats;

    fn add(self, b: PortStats) -> PortStats {
        PortStats {
            rx_packets: self.rx_packets + b.rx_packets,
            rx_bytes: self.rx_bytes + b.rx_bytes,
            rx_bad_vnet_hdr: self.rx_bad_vnet_hdr + b.rx_bad_vnet_hdr,
            rx_gso_size_too_small: self.rx_gso_size_too_small + b.rx_gso_size_too_small,
            rx_truncated: self.rx_truncated + b.rx_truncated,
            rx_no_buffer: self.rx_no_buffer + b.rx_no_buffer,
            rx_kernel_dropped: self.rx_kernel_dropped + b.rx_kernel_dropped,
            rx_outgoing: self.rx_outgoing + b.rx_outgoing,
            tx_packets: self.tx_packets + b.tx_packets,
            tx_bytes: self.tx_bytes + b.tx_bytes,
            tx_dropped: self.tx_dropped + b.tx_dropped,
            tx_errors: self.tx_errors + b.tx_errors,
            rx_not_mpls: self.rx_not_mpls + b.rx_not_mpls,
            rx_wrong_source: self.rx_wrong_source + b.rx_wrong_source,
            tx_unreachable: self.tx_unreachable + b.tx_unreachable,
            tx_not_mpls: self.tx_not_mpls + b.tx_not_mpls,
            tx_segmented: self.tx_segmented + b.tx_segmented,
            tx_segments: self.tx_segments + b.tx_segments,
            tx_waited: self.tx_waited + b.tx_waited,
        }
    }
}

impl PortStats {
    /// All frames dropped on receive (bad header, `gso_size` too small, truncated, no
    /// buffer, the kernel's receive queue full, a tunnel's datagrams that are not MPLS or
    /// not from its remote).
    pub fn rx_dropped(&self) -> u64 {
        self.rx_bad_vnet_hdr
            + self.rx_gso_size_too_small
            + self.rx_truncated
            + self.rx_no_buffer
            + self.rx_kernel_dropped
            + self.rx_not_mpls
            + self.rx_wrong_source
    }
}

/// Why a port could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The name cannot be a Linux interface name.
    #[error("{ifname:?} is not a valid interface name: it must be 1 to 15 bytes without NUL or '/'")]
    InvalidName {
        /// The name given.
        ifname: String,
    },
    /// No interface of that name in the router's network namespace.
    #[error(
        "no network interface named {ifname:?} in this network namespace (see `ip link show`; \
         is the router running in the right namespace?)"
    )]
    NoSuchInterface {
        /// The name given.
        ifname: String,
    },
    /// The interface is administratively down.
    #[error("interface {ifname:?} is down: bring it up first (`ip link set {ifname} up`)")]
    InterfaceDown {
        /// The interface.
        ifname: String,
    },
    /// The interface does not carry Ethernet frames (a TUN device, loopback, ...).
    #[error(
        "interface {ifname:?} is not an Ethernet interface (hardware type {hw_type}); \
         AF_PACKET ports need Ethernet (veth, NIC, TAP in TAP mode)"
    )]
    NotEthernet {
        /// The interface.
        ifname: String,
        /// Its `ARPHRD_*` type.
        hw_type: u16,
    },
    /// The configured MTU exceeds the interface's: the kernel would refuse such frames.
    #[error(
        "MTU {requested} configured for {ifname:?} exceeds the interface MTU {interface_mtu}: \
         raise it with `ip link set {ifname} mtu {requested}` or lower the configured MTU"
    )]
    MtuTooLarge {
        /// The interface.
        ifname: String,
        /// The configured MTU.
        requested: u32,
        /// The interface's MTU.
        interface_mtu: u32,
    },
    /// The configured MTU is below what IPv4 requires.
    #[error("MTU {requested} configured for {ifname:?} is below the IPv4 minimum of 68")]
    MtuTooSmall {
        /// The interface.
        ifname: String,
        /// The configured MTU.
        requested: u32,
    },
    /// The group a socket is to be given does not exist.
    #[error("no group named {group:?} for the socket of {ifname:?} (see `getent group`); fix socket-group")]
    NoSuchGroup {
        /// The socket.
        ifname: String,
        /// The group named.
        group: String,
    },
    /// Not allowed to open a packet socket.
    #[error("not permitted to open a packet socket on {ifname:?}: run as root or with CAP_NET_RAW")]
    PermissionDenied {
        /// The interface.
        ifname: String,
        /// The error from the kernel.
        #[source]
        source: io::Error,
    },
    /// A syscall while setting up the port failed.
    #[error("setting up the port on {ifname:?} failed: {op}")]
    Io {
        /// The interface.
        ifname: String,
        /// What we were doing.
        op: &'static str,
        /// The error from the kernel.
        #[source]
        source: io::Error,
    },
}

/// True when an interface of that name exists in the calling thread's network namespace.
pub fn interface_exists(ifname: &str) -> bool {
    vmpls_sys::if_nametoindex(ifname).is_some()
}

/// Checks, without opening it, that an `af-packet` port could be opened on `ifname` with
/// `mtu` (`None`: the interface's): the interface exists in the calling thread's network
/// namespace, is up, is Ethernet, and its MTU is at least `mtu`. The checks of
/// [`AfPacketPort::open`], without the privilege a packet socket needs.
///
/// # Errors
/// The [`PortError`] opening the port would fail with.
pub fn check_af_packet(ifname: &str, mtu: Option<u32>) -> Result<(), PortError> {
    let cname =
        vmpls_sys::IfName::new(ifname).ok_or_else(|| PortError::InvalidName { ifname: ifname.to_owned() })?;
    let io_err =
        |op: &'static str| move |source: io::Error| PortError::Io { ifname: ifname.to_owned(), op, source };
    if vmpls_sys::if_nametoindex(ifname).is_none() {
        return Err(PortError::NoSuchInterface { ifname: ifname.to_owned() });
    }
    // Any socket answers the interface ioctls; a datagram socket needs no privilege.
    let fd = vmpls_sys::control_socket().map_err(io_err("open a socket"))?;
    let details = vmpls_sys::iface::details(&fd, &cname).map_err(|source| {
        if source.raw_os_error() == Some(libc::ENODEV) {
            PortError::NoSuchInterface { ifname: ifname.to_owned() }
        } else {
            io_err("read the interface's flags, address and MTU")(source)
        }
    })?;
    af_packet::usable(ifname, &details, mtu).map(|_| ())
}

/// The second pass of a ring port's receive: the frames a batch copied into
/// `out[first..]` go through `keep` (which decodes what came with each, its virtio-net
/// header, and counts a refusal); those it refuses go back to `pool`, the others stay in
/// order. Returns how many stayed. Decoding after all the copies, not after each: a header
/// read right after its copy waits for the copy's stores to reach the cache.
pub(crate) fn keep_received(
    out: &mut Vec<Packet>,
    first: usize,
    pool: &mut PacketPool,
    mut keep: impl FnMut(&mut Packet) -> bool,
) -> usize {
    let mut kept = first;
    for i in first..out.len() {
        if keep(&mut out[i]) {
            out.swap(kept, i);
            kept += 1;
        }
    }
    for p in out.drain(kept..) {
        pool.put(p);
    }
    kept - first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tx_errors_are_counted_by_errno() {
        let mut e = TxErrors::default();
        for errno in
            [libc::ENOMEM, libc::ENOBUFS, libc::ENOBUFS, libc::EMSGSIZE, libc::EINVAL, libc::ENETDOWN]
        {
            e.record(errno);
        }
        assert_eq!((e.nomem, e.nobufs, e.msgsize, e.inval, e.other), (1, 2, 1, 1, 1));
        assert_eq!(e.last_other_errno, libc::ENETDOWN);
        assert_eq!(e.total(), 6);
    }

    #[test]
    fn error_messages_name_the_interface_and_the_fix() {
        let e = PortError::InterfaceDown { ifname: "core0".into() };
        assert_eq!(e.to_string(), "interface \"core0\" is down: bring it up first (`ip link set core0 up`)");
        let e = PortError::NoSuchInterface { ifname: "nope0".into() };
        assert!(e.to_string().contains("\"nope0\""));
    }
}
