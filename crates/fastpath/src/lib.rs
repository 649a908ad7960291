//! vmpls's in-kernel MPLS fast path: TC eBPF programs that swap, pop, push and
//! IP-forward frames and hand them to the next hop with `bpf_redirect_peer` (veth) or
//! `bpf_redirect` (any other Ethernet device), keeping GSO super-frames whole (research/tc-fastpath/README.md has the measurements behind it).
//!
//! vmpls stays the control plane and the slow path. [`FastPath::load`] loads one eBPF
//! object holding
//! - `fp_tc`, attached with [`FastPath::attach`] at TC ingress of each port (tcx from
//!   Linux 6.6, a clsact qdisc's filter before);
//! - `fp_sock`, a socket filter that [`FastPath::filter_socket`] puts on the router's
//!   AF_PACKET `SOCK_RAW` socket: packet taps run before tc ingress, so without it the
//!   router would also see (and forward a second time) every frame the fast path
//!   redirects. It drops exactly those frames and keeps everything else;
//! - `fp_act` (the action chain's last step) and `fp_xdp` (label switching in the driver
//!   of virtio-net NICs, see [`FastPath::xdp_switching`]);
//! - the maps the programs read, which [`FastPath::apply`] makes equal to a
//!   [`FastTables`], and the counters ([`FastPath::counters`], [`FastPath::label_stats`],
//!   [`FastPath::port_stats`]).
//!
//! # What the fast path does
//! A frame is a candidate when it arrives untagged, addressed (`PACKET_HOST`, destination
//! MAC) to a port that is both in [`FastTables::ports`] and attached. Then:
//! - MPLS, top label with TTL > 1 in [`FastTables::labels`]:
//!   [`LabelEntry::Swap`] rewrites the label (TC and S kept, TTL - 1);
//!   [`LabelEntry::Php`] pops and sends the IP packet on (bottom of stack), or the
//!   labels under it with the next one on top (its TTL the popped one's - 1 in the
//!   uniform model; a frame another fast path sent, like a pop);
//!   [`LabelEntry::PopIp`] (bottom of stack only) pops and forwards the IP packet by a
//!   [`RouteEntry::Forward`] without labels in the entry's VRF. A pop needs
//!   `skb->protocol` to be IPv4/IPv6 (`bpf_skb_adjust_room` refuses others), which holds
//!   for frames that came by `bpf_redirect_peer` from another fast path and for tunnel
//!   datagrams (decapsulation sets it); a labelled frame that came through a real
//!   transmit (a router's AF_PACKET send, a TAP's writer, a NIC: the kernel makes it
//!   MPLS) is popped by the port's action chain, or without one sent through the port's
//!   ingress a second time as the inner packet's protocol and popped there.
//! - IPv4 (valid header and checksum) / IPv6 unicast, TTL > 1, with a
//!   [`RouteEntry::Forward`] in the port's VRF: forwards (TTL - 1), pushing its labels.
//! - ECMP ([`LabelEntry::Multipath`], [`RouteEntry::Multipath`]): the flow hash of the
//!   pipeline (`vmpls_dataplane::hash`: the label stack and the IP packet under it, or
//!   the IP packet's addresses, protocol and ports), computed word for word alike in the
//!   program, picks a bucket of the [`FastGroup`] as the FIB's `NexthopGroup::select`
//!   does, with the same bucket table: a flow takes the same next hop whether the
//!   program or the pipeline forwards a frame of it. An ECMP route after a pop is left
//!   to the pipeline.
//! - Frames must fit the out port's MTU: the IP packet (plus the labels), or for GSO
//!   frames one segment (`gso_size` + IP and TCP/UDP headers, plus the labels).
//!
//! MPLS-in-UDP tunnels (RFC 7510, [`FastTables::tunnels`]): an [`Adjacency`] whose
//! `ifindex` is a [`tunnel_key`] sends into the tunnel: a swap or a push (at least one
//! label; at most 4 entries in the stack) gets an outer IPv4 + UDP header (source port
//! 49152 + 14 bits of the flow hash, UDP checksum 0 as RFC 7510 allows over IPv4, DF),
//! with one `bpf_skb_adjust_room` that keeps a GSO super-frame whole for the kernel's UDP
//! tunnel GSO to cut at the underlay, and leaves through the tunnel's underlay interface
//! with `bpf_redirect_neigh` (the kernel's route and neighbour for the outer destination).
//! Tunnels over IPv6 are decapsulated only: adjust_room cannot ask the kernel for the
//! outer UDP checksum IPv6 needs on every segment. On the interfaces attached with
//! [`FastPath::attach_underlay`], datagrams of a tunnel (outer destination its local
//! address, source its remote, UDP destination its port) are switched as if received on
//! it (swap toward a veth, or pop), their outer headers removed; what the programs cannot
//! switch goes on to the tunnel's socket untouched. The port counters of a tunnel are
//! kept under its key: frames decapsulated (rx) and encapsulated (tx). An encapsulated
//! frame keeps its offloads (a TCP super-frame, an inner checksum still to compute) for
//! the underlay device to finish; over a veth-only underlay nothing finishes them, so
//! there the receiving end must decapsulate in its programs too, not in a socket.
//!
//! Ports in VRF namespaces ([`FastPort::netns`], attached from a thread in their
//! namespace with [`FastPath::attach_named`]): a frame whose out port is in another
//! namespace than its in port is decided on and rewritten where it arrives, then crosses
//! by the VRF's [`Crossing`] (a veth pair between the router's namespace and the VRF's):
//! `bpf_redirect_peer` into it, and at its far end's ingress the program hands the frame
//! on to the out port (a per-CPU hand-off: the kernel runs the far end's ingress at
//! once, on the same CPU). VRF to VRF across two namespaces is left to the pipeline.
//!
//! Ports that are not veth ([`Delivery::Transmit`]: TAP, virtio-net inside a guest,
//! physical NICs): frames leave by `bpf_redirect` to the device's egress. Labelled
//! super-frames to them go through the in port's action chain where it has one, else to
//! the pipeline (see [`Delivery`]); frames whose out port is such a device in another
//! namespace than the in port are the pipeline's.
//!
//! The action chain (where the kernel has MPLS GSO, `act_mpls` and `cls_fw`; see
//! `action_chain.rs`): TC filters after `fp_tc` on each attached port, where the kernel's
//! MPLS action pushes onto TCP super-frames (so that MPLS GSO can cut them at the out
//! device) and pops frames some device sent, which `bpf_skb_adjust_room` refuses; a
//! third program, `fp_act`, finishes both.
//!
//! Label switching in the driver (`fp_xdp`, XDP, on virtio-net NICs that take labelled
//! frames; see [`FastPath::xdp_switching`]): the bottom label of a frame whose label pops into
//! the port's own VRF comes off before the driver's GRO, so the segments of a TCP flow
//! that another router's MPLS GSO cut merge again and go on as one super-frame (the
//! kernel has no MPLS GRO, and the egress PE of a 1500-byte core otherwise pops and sends
//! frame by frame); swaps toward another such NIC go there from the driver, without an
//! skb.
//!
//! Everything else (TTL expiry, ARP/ND, multicast, link-local, local routes, unknown
//! labels and prefixes, frames too big, anything unparsed) goes to the router untouched.
//! The out port of every adjacency must be an Ethernet device ([`delivery_to`]) in the
//! netns where [`FastPath::attach`] runs (veth also in VRF namespaces), or a tunnel whose
//! underlay interface is there.
//!
//! The programs detach when the [`FastPath`] is dropped or the process exits: a dead
//! router stops forwarding.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use aya::maps::lpm_trie::LpmTrie;
use aya::maps::{HashMap as BpfHashMap, MapData, MapError, PerCpuArray, PerCpuHashMap};
use aya::programs::tc::SchedClassifierLink;
use aya::programs::xdp::XdpLink;
use aya::programs::{Link, ProgramError, SchedClassifier, SocketFilter, TcAttachType, Xdp, XdpMode};

mod action_chain;
mod raw;

use raw::{
    Encoded, RawCounterSet, RawCrossing, RawGroup, RawKey4, RawKey6, RawLabel, RawLabelStat, RawPort,
    RawPortStat, RawRoute, RawTunnel, RawTunnelKey, counter,
};

/// Where a frame goes: the out veth and the Ethernet header to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Adjacency {
    /// The out veth's ifindex in the router's netns; `bpf_redirect_peer` delivers the
    /// frame to its peer's ingress.
    pub ifindex: u32,
    /// The largest L3 packet (labels included) the out port takes.
    pub mtu: u32,
    /// Destination MAC: the next hop's address on that link.
    pub dst_mac: [u8; 6],
    /// Source MAC: the out port's address.
    pub src_mac: [u8; 6],
}

/// The bit that makes an [`Adjacency::ifindex`] (and a port counter's key) a tunnel's.
pub const TUNNEL_BIT: u32 = 0x8000_0000;

/// The key of the tunnel that is the router's port `port` (its index in the config): the
/// [`Adjacency::ifindex`] that sends into it, its [`FastTables::tunnels`] key and the key
/// of its counters in [`FastPath::port_stats`]. No interface has such an index.
pub fn tunnel_key(port: u16) -> u32 {
    TUNNEL_BIT | u32::from(port)
}

/// An MPLS-in-UDP tunnel (RFC 7510) the programs send into and receive from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunnel {
    /// The local underlay address: the outer source sent, the destination received.
    pub local: IpAddr,
    /// The remote underlay address (same family).
    pub remote: IpAddr,
    /// The UDP destination port (6635).
    pub port: u16,
    /// The underlay interface the outer packets leave by (and arrive on).
    pub underlay_ifindex: u32,
    /// Whether the programs encapsulate into it (IPv4 underlays); else they only
    /// decapsulate and the pipeline sends.
    pub encap: bool,
}

/// A port the fast path serves (keyed by ifindex in [`FastTables::ports`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastPort {
    /// The VRF the port's IP traffic is routed in.
    pub vrf: u16,
    /// The port's MAC: only unicast frames to it are fast-pathed.
    pub mac: [u8; 6],
    /// Whether labelled frames from it are switched; the programs leave the others to
    /// the pipeline, which drops and counts them (`mpls_not_accepted`).
    pub accepts_mpls: bool,
    /// The namespace its interface is in: 0 the router's (where the [`FastPath`] was
    /// loaded), else a VRF's, the key of its [`Crossing`] in [`FastTables::crossings`].
    pub netns: u8,
    /// How frames the programs send out of it get there.
    pub delivery: Delivery,
}

/// How the programs hand a frame to its out port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Delivery {
    /// A veth: `bpf_redirect_peer` lands the frame at its peer's ingress in one step, and
    /// super-frames, labelled or not, arrive whole. The peer's stack takes the skb as it
    /// is: a push through the in port's action chain (where there is one) makes it MPLS,
    /// as a neighbour routing with the kernel's own MPLS needs; a push by the program
    /// alone leaves `skb->protocol` IP under the MPLS EtherType, which only another vmpls
    /// fast path reads right.
    #[default]
    VethPeer,
    /// Any other Ethernet device (TAP, virtio-net, a physical NIC): `bpf_redirect` to its
    /// egress, where the kernel segments by `skb->protocol` and the device's features. A
    /// labelled super-frame needs the kernel's MPLS GSO, which only an skb marked by the
    /// kernel's own push can use: a push onto a TCP super-frame received on a port with
    /// its action chain (see [`FastPath::act_chain`]) goes through the chain's
    /// `act_mpls` and leaves whole, to be cut at the device (also where a jumbo link
    /// would take the whole labelled frame: in guests under TCG the pipeline's one frame
    /// costs more than the kernel's segments, BENCHMARKS.md). Other labelled super-frames
    /// are the pipeline's, which segments them; unlabelled
    /// super-frames (routed, or popped) leave whole. Without the chain, pushes of single
    /// TCP segments with data go to the pipeline too while their port delivers
    /// super-frames, behind them, which they would otherwise overtake. A transmitting
    /// port is reached from its own namespace only.
    Transmit,
}

/// How frames cross between the router's namespace and a VRF's: the VRF interface, a
/// veth pair with one end in each (both attached, see [`FastPath::attach_named`]). A frame
/// received in one namespace whose out port is in the other is rewritten there and sent
/// with `bpf_redirect_peer` into the VRF interface; at its other end the program sends it
/// on to the out port (a hand-off on the same CPU, see `fp_handoff` in the program).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crossing {
    /// The VRF interface's ifindex in the router's namespace.
    pub root_ifindex: u32,
    /// Its peer's ifindex in the VRF's namespace.
    pub vrf_ifindex: u32,
}

/// One next hop of a [`FastGroup`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FastNexthop {
    /// A route's: the labels pushed (0 to 4, outermost first). A label's: the one label
    /// swapped in, or none for a penultimate-hop pop.
    pub labels: Vec<u32>,
    /// Where to send.
    pub adj: Adjacency,
}

/// Next hops that a flow hash selects among (ECMP), laid out as the FIB's
/// `NexthopGroup`: the mixed hash picks bucket `(mix(hash) * buckets.len()) >> 32`, which
/// names the next hop, so weights are bucket counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FastGroup {
    /// 1 to 64 next hops.
    pub nexthops: Vec<FastNexthop>,
    /// 1 to 4096 buckets, each an index into `nexthops`.
    pub buckets: Vec<u8>,
}

/// What the fast path does with a frame whose top label is the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelEntry {
    /// Replace the top label with `out_label` (TC and S kept, TTL - 1) and send to `adj`.
    Swap {
        /// The outgoing label (0..=1048575).
        out_label: u32,
        /// Where to send.
        adj: Adjacency,
    },
    /// Bottom of stack only: pop, then route the IP packet in `vrf` (only a
    /// [`RouteEntry::Forward`] without labels is fast).
    PopIp {
        /// The VRF to route the inner packet in.
        vrf: u16,
        /// Uniform TTL model: IP TTL = min(IP TTL, label TTL) before the IP hop's own
        /// decrement. Otherwise (pipe) the label TTL is ignored.
        uniform: bool,
    },
    /// Penultimate-hop pop: pop and send the rest to `adj` (no IP hop here, the IP TTL
    /// is not decremented): the IP packet at the bottom of the stack, else the labels
    /// under it (a P router's pop of a transport label over a VPN label).
    Php {
        /// Uniform TTL model: IP TTL = min(IP TTL, label TTL - 1), or the next label's
        /// TTL = label TTL - 1. Otherwise (pipe) the IP TTL or next label's TTL stays.
        uniform: bool,
        /// Where to send.
        adj: Adjacency,
    },
    /// ECMP: the flow's next hop in `group` swaps in its one label, or pops the bottom
    /// label (no labels) as [`LabelEntry::Php`] does.
    Multipath {
        /// For the pops: as [`LabelEntry::Php`]'s.
        uniform: bool,
        /// The next hops.
        group: Arc<FastGroup>,
    },
}

/// What the fast path does with an IP packet whose destination matches the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteEntry {
    /// Addressed to the router: never fast, always left to userspace.
    Local,
    /// Forward to `adj` (TTL - 1), pushing `labels` (0 to 4, `labels[0]` outermost).
    Forward {
        /// Labels to push, outermost first; empty for plain IP forwarding.
        labels: Vec<u32>,
        /// TTL of the pushed labels: `None` copies the IP TTL after this hop's decrement
        /// (uniform), `Some(ttl)` sets it (pipe; 0 is invalid).
        label_ttl: Option<u8>,
        /// Where to send.
        adj: Adjacency,
    },
    /// ECMP: forward to the flow's next hop in `group` (TTL - 1), pushing its labels.
    Multipath {
        /// As [`RouteEntry::Forward`]'s.
        label_ttl: Option<u8>,
        /// The next hops.
        group: Arc<FastGroup>,
    },
}

/// Everything the fast path forwards by; [`FastPath::apply`] makes the maps equal to it.
#[derive(Default, Clone, PartialEq, Debug)]
pub struct FastTables {
    /// Ports by ifindex. A port takes effect once it is also attached.
    pub ports: BTreeMap<u32, FastPort>,
    /// Incoming labels (0..=1048575).
    pub labels: BTreeMap<u32, LabelEntry>,
    /// IPv4 routes by (VRF, prefix, prefix length); no bits set beyond the length.
    pub routes_v4: BTreeMap<(u16, Ipv4Addr, u8), RouteEntry>,
    /// IPv6 routes by (VRF, prefix, prefix length); no bits set beyond the length.
    pub routes_v6: BTreeMap<(u16, Ipv6Addr, u8), RouteEntry>,
    /// MPLS-in-UDP tunnels by [`tunnel_key`].
    pub tunnels: BTreeMap<u32, Tunnel>,
    /// The VRF namespaces' crossings by namespace number ([`FastPort::netns`], 1..=255).
    /// A frame whose out port is in another namespace than its in port and that has no
    /// crossing (or would need two: VRF to VRF) is left to the pipeline.
    pub crossings: BTreeMap<u8, Crossing>,
}

/// A change to some entries of the tables last applied ([`FastPath::update`]): each key
/// with its entry now, `None` where it is gone.
#[derive(Default, Clone, PartialEq, Debug)]
pub struct FastTablesChange {
    /// Incoming labels.
    pub labels: Vec<(u32, Option<LabelEntry>)>,
    /// IPv4 routes by (VRF, prefix, prefix length).
    pub routes_v4: Vec<((u16, Ipv4Addr, u8), Option<RouteEntry>)>,
    /// IPv6 routes by (VRF, prefix, prefix length).
    pub routes_v6: Vec<((u16, Ipv6Addr, u8), Option<RouteEntry>)>,
}

impl FastTablesChange {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.routes_v4.is_empty() && self.routes_v6.is_empty()
    }
}

/// The fast path's counters, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastCounters {
    /// Candidate frames looked at (to a served port's MAC, untagged).
    pub frames_in: u64,
    /// Frames swapped and redirected.
    pub swap: u64,
    /// Frames pushed and redirected.
    pub push: u64,
    /// Frames popped and redirected.
    pub pop: u64,
    /// Frames IP-forwarded without labels and redirected.
    pub ip_forward: u64,
    /// Candidates left to userspace.
    pub passed: u64,
    /// Bytes (`skb->len`, as sent, super-frames whole) of redirected frames.
    pub bytes: u64,
    /// Frames dropped because rewriting or redirecting failed after the decision.
    pub redirect_failed: u64,
    /// Frames sent into an MPLS-in-UDP tunnel.
    pub encap: u64,
    /// Frames received from an MPLS-in-UDP tunnel and switched.
    pub decap: u64,
    /// Frames handed on at the far end of a [`Crossing`] (counted once more there: each
    /// was counted as swapped, pushed, popped or forwarded where it was received).
    pub crossed: u64,
    /// Frames some device's transmit sent (skb->protocol MPLS) sent once more through
    /// their port's ingress with the inner packet's EtherType, to be popped there (counted
    /// again as popped, or as failed).
    pub repassed: u64,
    /// Frames whose labels their port's action chain (the kernel's `act_mpls`, see
    /// [`FastPath::act_chain`]) pushed or popped: TCP super-frames pushed to leave whole
    /// for the out device's MPLS GSO, pops of frames some device sent (counted as pushed
    /// or popped too).
    pub act_mpls: u64,
    /// Frames the TC program did not decide on again: it took the decision the socket
    /// filter made on the same frame a moment before (the router's packet socket sees
    /// each frame before TC does).
    pub recalled: u64,
    /// Bottom labels popped before GRO (see [`FastPath::xdp_switching`]), in the label counters
    /// too; the packets, merged or not, are then counted again as any frame the port
    /// receives (IP-forwarded, or passed).
    pub xdp_pop: u64,
    /// Frames swapped in a virtio-net driver and sent from there to another (see
    /// [`FastPath::xdp_switching`]); not in `swap` or `frames_in`, in `bytes`, the label and
    /// the port counters.
    pub xdp_swap: u64,
}

/// Per-port counters of redirected frames, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastPortStats {
    /// Frames received on this port and redirected.
    pub rx_frames: u64,
    /// Their bytes, as received.
    pub rx_bytes: u64,
    /// Frames redirected out of this port.
    pub tx_frames: u64,
    /// Their bytes, as sent.
    pub tx_bytes: u64,
}

/// Errors of the fast path.
#[derive(Debug, thiserror::Error)]
pub enum FastPathError {
    /// The crate was compiled without clang, so there is no eBPF object.
    #[error(
        "vmpls was built without clang: the TC fast path is unavailable; install clang and libbpf-dev and rebuild"
    )]
    Unavailable,
    /// The kernel refused the eBPF object's maps or BTF.
    #[error("loading the fast path's eBPF object failed (needs root, or CAP_BPF and CAP_NET_ADMIN)")]
    Load(#[source] aya::EbpfError),
    /// The kernel refused a program (verifier) or the program is missing.
    #[error("eBPF program `{name}`: {what} failed")]
    Program {
        /// The program's name.
        name: &'static str,
        /// What was being done.
        what: &'static str,
        /// The cause.
        #[source]
        source: ProgramError,
    },
    /// The eBPF object lacks a map or it has an unexpected layout.
    #[error("eBPF map `{map}`: {what} failed")]
    Map {
        /// The map's name.
        map: &'static str,
        /// What was being done.
        what: &'static str,
        /// The cause.
        #[source]
        source: MapError,
    },
    /// The eBPF object has no map of that name.
    #[error("the fast path's eBPF object has no map `{0}`")]
    MissingMap(&'static str),
    /// No interface of that name in the calling thread's network namespace.
    #[error("interface `{ifname}` not found in this network namespace")]
    NoInterface {
        /// The name asked for.
        ifname: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Attaching `fp_tc` at tcx ingress failed.
    #[error("attaching the fast path to `{ifname}` (tcx ingress) failed")]
    Attach {
        /// The interface.
        ifname: String,
        /// The cause.
        #[source]
        source: ProgramError,
    },
    /// Detaching `fp_tc` failed.
    #[error("detaching the fast path from `{ifname}` failed")]
    Detach {
        /// The interface.
        ifname: String,
        /// The cause.
        #[source]
        source: ProgramError,
    },
    /// `SO_ATTACH_BPF` failed.
    #[error("attaching the fast path's socket filter to the packet socket failed")]
    SocketFilter(#[source] ProgramError),
    /// A label outside 0..=1048575 in the tables.
    #[error("{what} {label} is not a valid MPLS label (0..=1048575)")]
    InvalidLabel {
        /// The value.
        label: u32,
        /// Which label it was.
        what: &'static str,
    },
    /// A route pushes more than 4 labels.
    #[error("route {prefix} pushes {count} labels; the fast path pushes at most 4")]
    TooManyLabels {
        /// The route.
        prefix: String,
        /// How many labels it has.
        count: usize,
    },
    /// A route key with a prefix length beyond the family or host bits set.
    #[error("route {prefix}: {why}")]
    InvalidPrefix {
        /// The route.
        prefix: String,
        /// What is wrong.
        why: &'static str,
    },
    /// A tunnel's addresses are of two families.
    #[error("tunnel {local} -> {remote}: the addresses must be of one family")]
    TunnelFamilies {
        /// The local address.
        local: IpAddr,
        /// The remote address.
        remote: IpAddr,
    },
    /// An ECMP group the programs cannot hold.
    #[error("{what}: {why}")]
    InvalidGroup {
        /// The entry.
        what: String,
        /// What is wrong.
        why: &'static str,
    },
    /// A crossing for namespace 0, which is the router's own.
    #[error(
        "VRF namespace 0 is the router's own namespace: it has no crossing (number VRF namespaces from 1)"
    )]
    RootCrossing,
    /// A route pushes labels with a fixed TTL of 0.
    #[error("route {prefix}: a fixed label TTL of 0 would be dropped by the next hop; use 1..=255 or None")]
    ZeroLabelTtl {
        /// The route.
        prefix: String,
    },
}

const TC_PROG: &str = "fp_tc";
const SOCK_PROG: &str = "fp_sock";
const ACT_PROG: &str = "fp_act";
const XDP_PROG: &str = "fp_xdp";

#[cfg(not(vmpls_fastpath_unavailable))]
fn object() -> Result<&'static [u8], FastPathError> {
    Ok(aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/fastpath.bpf.o")))
}

#[cfg(vmpls_fastpath_unavailable)]
fn object() -> Result<&'static [u8], FastPathError> {
    Err(FastPathError::Unavailable)
}

/// A tcx attachment of `fp_tc`; dropping the link detaches it.
struct Attached {
    ifindex: u32,
    ifname: String,
    link: SchedClassifierLink,
    /// The port's action chain, or why it has none.
    act_chain: Result<action_chain::ActionChain, String>,
    xdp: XdpSwitching,
}

/// Label switching in a port's driver (see [`FastPath::xdp_switching`]).
enum XdpSwitching {
    /// Not a virtio-net NIC. Elsewhere it gains nothing or costs: a veth with an XDP
    /// program takes no super-frames (its peer loses GSO), a TAP's receive does no GRO.
    NotVirtio,
    /// A virtio-net NIC without the program: none of its frames was switched by label yet
    /// (a customer's never are), or the tables no longer let them be. It keeps its
    /// receive offloads (virtio-net turns the guest's offloads off while an XDP program
    /// is attached).
    Off,
    /// Attached while held: dropping the link detaches the program.
    On { _link: XdpLink },
    /// The driver refused it (an MTU too large for XDP, offloads it cannot turn off):
    /// not tried again until the port is attached again.
    Refused(String),
}

/// The loaded fast path: programs, maps and attachments. Dropping it detaches everything.
pub struct FastPath {
    attached: BTreeMap<String, Attached>,
    ebpf: aya::Ebpf,
    ports: BpfHashMap<MapData, u32, RawPort>,
    labels: BpfHashMap<MapData, u32, RawLabel>,
    routes_v4: LpmTrie<MapData, RawKey4, RawRoute>,
    routes_v6: LpmTrie<MapData, RawKey6, RawRoute>,
    counters: PerCpuArray<MapData, RawCounterSet>,
    label_stats: PerCpuHashMap<MapData, u32, RawLabelStat>,
    port_stats: PerCpuHashMap<MapData, u32, RawPortStat>,
    tunnels: BpfHashMap<MapData, u32, RawTunnel>,
    tunnels_rx: BpfHashMap<MapData, RawTunnelKey, u32>,
    underlay: BpfHashMap<MapData, u32, u32>,
    groups: BpfHashMap<MapData, u32, RawGroup>,
    crossings: BpfHashMap<MapData, u32, RawCrossing>,
    /// The interfaces `fp_xdp` is attached to: its swaps go only there.
    xdp_ports: BpfHashMap<MapData, u32, u32>,
    /// The next new group's id (never 0, never reused).
    next_group: u32,
    /// The last applied tables, encoded (all ports, attached or not).
    wanted: Encoded,
    /// What the maps hold.
    installed: Encoded,
    /// The IPv4 table's size when an insert into its map failed; see [`Overflow`].
    v4_failed_at: Option<usize>,
    /// The same for IPv6.
    v6_failed_at: Option<usize>,
    /// What the maps left out at the last sync.
    overflow: Overflow,
    /// Whether the kernel cuts labelled super-frames (MPLS GSO), or why not.
    mpls_gso: Result<(), String>,
    /// Whether `fp_xdp` loaded (see [`FastPath::xdp_switching`]), or why not: without it the
    /// rest of the fast path serves as before.
    xdp_loaded: Result<(), String>,
}

impl std::fmt::Debug for FastPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastPath")
            .field("attached", &self.attached.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

fn take_map<M>(ebpf: &mut aya::Ebpf, name: &'static str) -> Result<M, FastPathError>
where
    M: TryFrom<aya::maps::Map, Error = MapError>,
{
    let map = ebpf.take_map(name).ok_or(FastPathError::MissingMap(name))?;
    M::try_from(map).map_err(|source| FastPathError::Map { map: name, what: "opening", source })
}

fn map_err(map: &'static str, what: &'static str) -> impl FnOnce(MapError) -> FastPathError {
    move |source| FastPathError::Map { map, what, source }
}

/// A delete of a key that is already gone succeeds.
fn deleted(r: Result<(), MapError>) -> Result<(), MapError> {
    match r {
        Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(MapError::KeyNotFound) => Ok(()),
        r => r,
    }
}

/// Entries `fp_labels` holds (its `max_entries` in the eBPF program).
pub const LABEL_CAPACITY: usize = 262_144;
/// Entries each of `fp_routes_v4` and `fp_routes_v6` holds.
pub const ROUTE_CAPACITY: usize = 1_048_576;
/// Distinct ECMP groups `fp_groups` holds.
pub const GROUP_CAPACITY: usize = 16_384;

/// What the maps could not take in the last [`FastPath::apply`]; the pipeline forwards
/// it (correctly, only more slowly).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Overflow {
    /// Labels left to the pipeline.
    pub labels_left_out: usize,
    /// IPv4 prefixes all left to the pipeline.
    pub v4_off: bool,
    /// IPv6 prefixes all left to the pipeline.
    pub v6_off: bool,
    /// ECMP groups the map refused: their labels and routes go to the pipeline.
    pub groups_left_out: usize,
}

impl Overflow {
    /// Whether the maps hold everything.
    pub fn is_none(&self) -> bool {
        *self == Overflow::default()
    }
}

/// Whether a prefix table of `len` entries goes into its map: it fits the map, and, if an
/// insert failed before at `failed_at` entries, it is well below that (a tenth less).
fn family_fits(len: usize, failed_at: Option<usize>) -> bool {
    len <= ROUTE_CAPACITY && failed_at.is_none_or(|n| len < n - n / 10)
}

/// One family's prefixes: `wanted` whole, or nothing (see [`FastPath::sync`]); returns
/// whether the family is left to the pipeline. Upserts go before removals, so a prefix
/// being replaced by another never leaves a less specific one answering meanwhile.
fn sync_family<A: Ord + Copy, K: aya::Pod>(
    map: &mut LpmTrie<MapData, K, RawRoute>,
    installed: &mut BTreeMap<(u16, A, u8), RawRoute>,
    wanted: &BTreeMap<(u16, A, u8), RawRoute>,
    failed_at: &mut Option<usize>,
    key: impl Fn((u16, A, u8)) -> aya::maps::lpm_trie::Key<K>,
) -> Result<bool, FastPathError> {
    let empty = BTreeMap::new();
    let fits = family_fits(wanted.len(), *failed_at);
    if fits {
        *failed_at = None;
    }
    let target = if fits { wanted } else { &empty };
    let d = raw::diff(installed, target);
    for (k, v) in d.upsert {
        if map.insert(&key(k), v, 0).is_err() {
            // Full, or out of kernel memory: leave the whole family to the pipeline.
            *failed_at = Some(wanted.len());
            return sync_family(map, installed, wanted, failed_at, key).map(|_| true);
        }
        installed.insert(k, v);
    }
    for k in d.remove {
        deleted(map.remove(&key(k))).map_err(map_err("fp_routes", "deleting"))?;
        installed.remove(&k);
    }
    Ok(!fits)
}

/// Changed map entries by key: the new value, or `None` where the key is gone.
type EntryChanges<K> = [(K, Option<RawRoute>)];

/// Changed map entries by key, each new one with its ECMP group if it has one.
type GroupedChanges<K, V> = Vec<(K, Option<(V, Option<RawGroup>)>)>;

/// Changed entries with their groups' ids: each lets go of the group its entry in `wanted`
/// had and takes its new one's in `groups`.
fn with_groups<K: Ord + Copy, V: Copy>(
    change: GroupedChanges<K, V>,
    wanted: &BTreeMap<K, V>,
    groups: &mut raw::Groups,
    next: &mut u32,
    group_of: impl Fn(&mut V) -> &mut u32,
) -> Vec<(K, Option<V>)> {
    let none = raw::Groups::default();
    change
        .into_iter()
        .map(|(k, v)| {
            // Taken before the old one goes, so an entry that keeps its group keeps its id.
            let v = v.map(|(mut e, g)| {
                if let Some(g) = g {
                    *group_of(&mut e) = groups.acquire(&g, &none, next);
                }
                e
            });
            if let Some(mut old) = wanted.get(&k).copied() {
                let id = *group_of(&mut old);
                if id != 0 {
                    groups.release(id);
                }
            }
            (k, v)
        })
        .collect()
}

/// Sets each key of `map` to its value, or removes it (`None`).
fn set_all<K: Ord + Copy, V: Copy>(map: &mut BTreeMap<K, V>, change: &[(K, Option<V>)]) {
    for (k, v) in change {
        match v {
            Some(v) => map.insert(*k, *v),
            None => map.remove(k),
        };
    }
}

/// Writes one family's changed prefixes: upserts first, so that a prefix replaced by
/// another never leaves a less specific one answering meanwhile.
fn write_family<A: Ord + Copy, K: aya::Pod>(
    map: &mut LpmTrie<MapData, K, RawRoute>,
    installed: &mut BTreeMap<(u16, A, u8), RawRoute>,
    change: &EntryChanges<(u16, A, u8)>,
    key: impl Fn((u16, A, u8)) -> aya::maps::lpm_trie::Key<K>,
) -> Result<(), MapError> {
    for (k, v) in change {
        if let Some(v) = v {
            map.insert(&key(*k), *v, 0)?;
            installed.insert(*k, *v);
        }
    }
    for (k, v) in change {
        if v.is_none() {
            deleted(map.remove(&key(*k)))?;
            installed.remove(k);
        }
    }
    Ok(())
}

impl FastPath {
    /// Loads both programs and creates the maps (empty). Needs root (CAP_BPF and
    /// CAP_NET_ADMIN); aya raises RLIMIT_MEMLOCK where the kernel still charges it.
    pub fn load() -> Result<FastPath, FastPathError> {
        let mut ebpf = aya::Ebpf::load(object()?).map_err(FastPathError::Load)?;
        for name in [TC_PROG, ACT_PROG] {
            let tc: &mut SchedClassifier = program(&mut ebpf, name)?;
            tc.load().map_err(|source| FastPathError::Program { name, what: "loading", source })?;
        }
        let xdp_loaded = program::<Xdp>(&mut ebpf, XDP_PROG)
            .and_then(|x| {
                x.load().map_err(|source| FastPathError::Program { name: XDP_PROG, what: "loading", source })
            })
            .map_err(|e| e.to_string());
        {
            let sock: &mut SocketFilter = program(&mut ebpf, SOCK_PROG)?;
            sock.load().map_err(|source| FastPathError::Program {
                name: SOCK_PROG,
                what: "loading",
                source,
            })?;
        }
        Ok(FastPath {
            attached: BTreeMap::new(),
            ports: take_map(&mut ebpf, "fp_ports")?,
            labels: take_map(&mut ebpf, "fp_labels")?,
            routes_v4: take_map(&mut ebpf, "fp_routes_v4")?,
            routes_v6: take_map(&mut ebpf, "fp_routes_v6")?,
            counters: take_map(&mut ebpf, "fp_counters")?,
            label_stats: take_map(&mut ebpf, "fp_label_stats")?,
            port_stats: take_map(&mut ebpf, "fp_port_stats")?,
            tunnels: take_map(&mut ebpf, "fp_tunnels")?,
            tunnels_rx: take_map(&mut ebpf, "fp_tunnel_rx")?,
            underlay: take_map(&mut ebpf, "fp_underlay")?,
            groups: take_map(&mut ebpf, "fp_groups")?,
            crossings: take_map(&mut ebpf, "fp_crossings")?,
            xdp_ports: take_map(&mut ebpf, "fp_xdp_ports")?,
            next_group: 1,
            ebpf,
            wanted: Encoded::default(),
            installed: Encoded::default(),
            v4_failed_at: None,
            v6_failed_at: None,
            overflow: Overflow::default(),
            mpls_gso: action_chain::kernel_has_mpls_gso(),
            xdp_loaded,
        })
    }

    /// Attaches the TC program at tcx ingress of `ifname`, an interface in the calling
    /// thread's network namespace. Attaching an attached interface again does nothing.
    /// The port's entry in [`FastTables::ports`] takes effect only after this.
    pub fn attach(&mut self, ifname: &str) -> Result<(), FastPathError> {
        self.attach_named(ifname, ifname)
    }

    /// [`FastPath::attach`] under the name `key` (what [`FastPath::detach`] takes): for
    /// interfaces of other namespaces (a VRF's ports and VRF interface), attached from a
    /// thread in that namespace, whose names may be taken here too.
    pub fn attach_named(&mut self, key: &str, ifname: &str) -> Result<(), FastPathError> {
        let ifindex = ifindex(ifname)?;
        if let Some(a) = self.attached.get(key) {
            if a.ifindex == ifindex {
                return Ok(());
            }
            // The interface was replaced: the old attachment went with it.
            self.detach(key)?;
        }
        let tc: &mut SchedClassifier = program(&mut self.ebpf, TC_PROG)?;
        let attach_err = |source| FastPathError::Attach { ifname: ifname.to_owned(), source };
        // Before tcx (Linux 6.6) the program is a filter of the interface's clsact qdisc,
        // which must exist first; one that exists already (EEXIST) is used as it is.
        use aya::util::KernelVersion;
        if KernelVersion::current().is_ok_and(|v| v < KernelVersion::new(6, 6, 0)) {
            let _ = aya::programs::tc::qdisc_add_clsact(ifname);
        }
        let id = tc.attach(ifname, TcAttachType::Ingress).map_err(attach_err)?;
        let link = tc.take_link(id).map_err(attach_err)?;
        let act_chain = self.install_action_chain(ifname, ifindex);
        let virtio = vmpls_sys::IfName::new(ifname)
            .and_then(|n| vmpls_sys::iface::driver(&n).ok())
            .is_some_and(|d| d == "virtio_net");
        let xdp = if virtio { XdpSwitching::Off } else { XdpSwitching::NotVirtio };
        let a = Attached { ifindex, ifname: ifname.to_owned(), link, act_chain, xdp };
        self.attached.insert(key.to_owned(), a);
        self.sync().map(drop)
    }

    /// Whether the port attached as `key` switches by label in its driver, before GRO:
    /// the XDP program `fp_xdp` takes the bottom label off frames whose label pops into
    /// the port's own VRF (the IP TTL as the pop sets it), so that the driver's GRO merges
    /// the segments of a TCP flow again (the kernel has no GRO for MPLS) and the TC
    /// program forwards the merged super-frame as IP, where each segment would be popped
    /// and sent alone; and it swaps frames toward another port that has it and sends them
    /// there from the driver (XDP_REDIRECT: no skb, no TC). On virtio-net NICs that may
    /// receive labelled frames and where the TC program has popped or swapped some
    /// ([`FastPath::watch_label_switching`]): a customer's NIC, which receives none, keeps its
    /// receive offloads (virtio-net turns the guest's offloads off while an XDP program
    /// is attached, so the host sends it segments instead of super-frames). `Ok(false)`:
    /// not such a port (yet); `Err`: why the driver or kernel refused it.
    pub fn xdp_switching(&self, key: &str) -> Result<bool, String> {
        match self.attached.get(key).map(|a| &a.xdp) {
            None => Err(format!("{key} is not attached")),
            Some(XdpSwitching::On { .. }) => Ok(true),
            Some(XdpSwitching::NotVirtio | XdpSwitching::Off) => Ok(false),
            Some(XdpSwitching::Refused(why)) => Err(why.clone()),
        }
    }

    /// Runs `fp_xdp` once on `frame` as if the interface `ifindex` (of the calling
    /// thread's namespace) had received it, without its driver (`BPF_PROG_TEST_RUN`; a
    /// redirect is decided, not done), and as if the interfaces `with_xdp` had the program
    /// too (where its swaps may go): the program's verdict (`XDP_DROP` 1, `XDP_PASS` 2,
    /// `XDP_REDIRECT` 4) and the frame it leaves. The maps are the live ones (the counters
    /// count). For tests and diagnosis on kernels and interfaces where it is not attached.
    pub fn run_xdp(
        &mut self,
        frame: &[u8],
        ifindex: u32,
        with_xdp: &[u32],
    ) -> Result<(u32, Vec<u8>), FastPathError> {
        use aya::programs::{TestRun, TestRunOptions};
        let mut added = Vec::new();
        for &i in with_xdp {
            if self.xdp_ports.get(&i, 0).is_err() {
                self.xdp_ports.insert(i, 1, 0).map_err(map_err("fp_xdp_ports", "updating"))?;
                added.push(i);
            }
        }
        let xdp: &mut Xdp = program(&mut self.ebpf, XDP_PROG)?;
        let end = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
        // egress_ifindex.
        let ctx: Vec<u8> = [0, end, 0, ifindex, 0, 0].iter().flat_map(|w: &u32| w.to_ne_bytes()).collect();
        let mut out = vec![0u8; frame.len() + 256];
        let r = xdp.test_run(TestRunOptions {
            data_in: Some(frame),
            data_out: Some(&mut out),
            ctx_in: Some(&ctx),
            ..Default::default()
        });
        for i in added {
            deleted(self.xdp_ports.remove(&i)).map_err(map_err("fp_xdp_ports", "deleting"))?;
        }
        let r =
            r.map_err(|source| FastPathError::Program { name: XDP_PROG, what: "test-running", source })?;
        out.truncate(r.data_size_out as usize);
        Ok((r.return_value, out))
    }

    /// Attaches `fp_xdp` to the virtio-net ports where the TC program has popped labels
    /// into a VRF or swapped labels since they were attached, and detaches it from those
    /// whose frames may no longer be switched by label (see [`FastPath::xdp_switching`]).
    /// Cheap: one map read per virtio-net port still without it. The router calls it
    /// every second.
    pub fn watch_label_switching(&mut self) {
        for a in self.attached.values_mut() {
            let accepts = self.installed.ports.get(&a.ifindex).is_some_and(|p| p.accepts_mpls != 0);
            match (&a.xdp, accepts) {
                (XdpSwitching::Off, true) => {
                    let switched = self
                        .port_stats
                        .get(&a.ifindex, 0)
                        .is_ok_and(|per_cpu| per_cpu.iter().any(|c| c.rx_by_label > 0));
                    if !switched {
                        continue;
                    }
                    a.xdp = match &self.xdp_loaded {
                        Err(e) => XdpSwitching::Refused(format!("the XDP program did not load: {e}")),
                        Ok(()) => attach_xdp(&mut self.ebpf, &mut self.xdp_ports, &a.ifname, a.ifindex),
                    };
                }
                (XdpSwitching::On { .. }, false) => {
                    // No swap is sent here once the link goes, which detaches the program.
                    let _ = deleted(self.xdp_ports.remove(&a.ifindex));
                    a.xdp = XdpSwitching::Off;
                }
                _ => {}
            }
        }
    }

    /// The action chain on `ifname`'s ingress, where the kernel has MPLS GSO; else why not.
    fn install_action_chain(
        &mut self,
        ifname: &str,
        ifindex: u32,
    ) -> Result<action_chain::ActionChain, String> {
        self.mpls_gso.clone()?;
        // The chain's filters live in the clsact qdisc (tcx, from Linux 6.6, needs none
        // for fp_tc); one that exists already is used as it is.
        let _ = aya::programs::tc::qdisc_add_clsact(ifname);
        let act: &mut SchedClassifier = program(&mut self.ebpf, ACT_PROG).map_err(|e| e.to_string())?;
        let fd = act.fd().map_err(|e| format!("{ACT_PROG}: {e}"))?;
        let raw = std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(fd));
        action_chain::ActionChain::install(ifindex, raw as u32, ACT_PROG)
            .map_err(|e| format!("installing the action chain (cls_fw, act_mpls) on {ifname}: {e}"))
    }

    /// Whether the port attached as `key` has its action chain, the kernel's MPLS action
    /// (`act_mpls`) after the programs: TCP super-frames received on it and pushed into a
    /// transmitting port then leave whole (the out device's MPLS GSO cuts them, where the
    /// pipeline would), and frames some device sent are popped in one pass (where they
    /// would take a second pass through the port's ingress). Else why not.
    pub fn act_chain(&self, key: &str) -> Result<(), String> {
        match self.attached.get(key) {
            None => Err(format!("{key} is not attached")),
            Some(a) => a.act_chain.as_ref().map(drop).map_err(Clone::clone),
        }
    }

    /// Attaches the TC program at tcx ingress of `ifname`, an underlay interface of the
    /// tunnels in [`FastTables::tunnels`], where it takes their datagrams. Attaching again
    /// does nothing; [`FastPath::detach`] undoes it.
    pub fn attach_underlay(&mut self, ifname: &str) -> Result<(), FastPathError> {
        self.attach(ifname)?;
        let ifindex = ifindex(ifname)?;
        self.underlay.insert(ifindex, 1, 0).map_err(map_err("fp_underlay", "updating"))
    }

    /// Detaches the TC program from `ifname`; the port's entry leaves the maps first, so
    /// the socket filter keeps its frames again. Detaching a detached interface does nothing.
    pub fn detach(&mut self, ifname: &str) -> Result<(), FastPathError> {
        let Some(a) = self.attached.remove(ifname) else {
            return Ok(());
        };
        let _ = deleted(self.underlay.remove(&a.ifindex));
        let _ = deleted(self.xdp_ports.remove(&a.ifindex));
        let synced = self.sync().map(drop);
        let _ = deleted(self.port_stats.remove(&a.ifindex));
        // An interface that is gone took its tcx link with it: nothing left to detach.
        match a.link.detach() {
            Ok(()) => {}
            Err(_) if ifindex(ifname).ok() != Some(a.ifindex) => {}
            Err(source) => return Err(FastPathError::Detach { ifname: ifname.to_owned(), source }),
        }
        synced
    }

    /// Attaches the socket filter (`SO_ATTACH_BPF`) to `socket`, the router's AF_PACKET
    /// `SOCK_RAW` socket: it then receives no frame that the TC program redirects.
    pub fn filter_socket(&self, socket: BorrowedFd<'_>) -> Result<(), FastPathError> {
        let prog = self.ebpf.program(SOCK_PROG).ok_or(FastPathError::Program {
            name: SOCK_PROG,
            what: "finding",
            source: ProgramError::NotLoaded,
        })?;
        let sock: &SocketFilter = prog.try_into().map_err(|source| FastPathError::Program {
            name: SOCK_PROG,
            what: "finding",
            source,
        })?;
        sock.attach(socket).map_err(FastPathError::SocketFilter)
    }

    /// [`FastPath::filter_socket`], raising `net.core.optmem_max` to
    /// [`OPTMEM_FOR_FILTER`] if the kernel refused the filter for want of socket option
    /// memory, and trying once more. Returns the limit it replaced, if it raised it.
    pub fn filter_socket_raising_optmem(&self, socket: BorrowedFd<'_>) -> Result<Option<u64>, FastPathError> {
        match self.filter_socket(socket) {
            Err(e) if e.is_out_of_option_memory() => {
                let Ok(Some(old)) = raise_optmem_max() else { return Err(e) };
                self.filter_socket(socket).map(|()| Some(old))
            }
            r => r.map(|()| None),
        }
    }

    /// Makes the maps equal to `tables`: writes what changed since the last call and
    /// deletes what is gone (with its label counters). Invalid tables (label > 1048575,
    /// more than 4 labels, prefix length beyond the family, host bits set, fixed label
    /// TTL 0) give an error and change nothing. On a map error part of the change may be
    /// in place; the next call finishes it. What the maps cannot hold is returned, and
    /// left to the pipeline ([`Overflow`]).
    pub fn apply(&mut self, tables: &FastTables) -> Result<Overflow, FastPathError> {
        let (wanted, next) = raw::encode(tables, &self.wanted.groups, self.next_group)?;
        self.wanted = wanted;
        self.next_group = next;
        self.sync()
    }

    /// Brings the maps to `wanted` (ports only where attached). Ports leave first and
    /// arrive last, so a port is never served by entries that are not yet in place.
    ///
    /// What the maps cannot hold is left to the pipeline, never answered wrongly: labels
    /// beyond the map's capacity are left out (a missing label goes to the pipeline); a
    /// prefix table larger than its map, or one whose insert failed, is left out whole
    /// for that family, since any part of it could let a less specific prefix answer for
    /// a more specific one that is missing. The family comes back once its table is well
    /// below the size that failed ([`Overflow`]).
    fn sync(&mut self) -> Result<Overflow, FastPathError> {
        let ports: BTreeMap<u32, RawPort> = self
            .wanted
            .ports
            .iter()
            .filter_map(|(i, p)| {
                let a = self.attached.values().find(|a| a.ifindex == *i)?;
                Some((*i, RawPort { act_chain: u8::from(a.act_chain.is_ok()), ..*p }))
            })
            .collect();
        let port_diff = raw::diff(&self.installed.ports, &ports);
        for i in port_diff.remove {
            deleted(self.ports.remove(&i)).map_err(map_err("fp_ports", "deleting"))?;
            self.installed.ports.remove(&i);
        }

        // Tunnels before the labels and routes that send into them (an adjacency whose
        // tunnel is missing is left to the pipeline), and gone after them.
        let tunnel_diff = raw::diff(&self.installed.tunnels, &self.wanted.tunnels);
        for (k, t) in &tunnel_diff.upsert {
            self.tunnels.insert(k, t, 0).map_err(map_err("fp_tunnels", "updating"))?;
            self.installed.tunnels.insert(*k, *t);
        }
        let rx_diff = raw::diff(&self.installed.tunnels_rx, &self.wanted.tunnels_rx);
        for (k, t) in &rx_diff.upsert {
            self.tunnels_rx.insert(k, t, 0).map_err(map_err("fp_tunnel_rx", "updating"))?;
            self.installed.tunnels_rx.insert(*k, *t);
        }
        for k in rx_diff.remove {
            deleted(self.tunnels_rx.remove(&k)).map_err(map_err("fp_tunnel_rx", "deleting"))?;
            self.installed.tunnels_rx.remove(&k);
        }

        // Groups before the entries that refer to them, and gone after them. A group the map
        // refuses leaves its entries to the pipeline (the programs find no group).
        let mut overflow = Overflow::default();
        let new_groups: Vec<(u32, RawGroup)> = self
            .wanted
            .groups
            .by_id
            .iter()
            .filter(|(id, _)| !self.installed.groups.by_id.contains_key(id))
            .map(|(id, (g, _))| (*id, **g))
            .collect();
        for (id, g) in &new_groups {
            match self.groups.insert(id, g, 0) {
                Ok(()) => self.installed.groups.insert(*id, g),
                Err(_) => overflow.groups_left_out += 1,
            }
        }
        let capped;
        let labels = if self.wanted.labels.len() <= LABEL_CAPACITY {
            &self.wanted.labels
        } else {
            overflow.labels_left_out = self.wanted.labels.len() - LABEL_CAPACITY;
            capped = self.wanted.labels.iter().take(LABEL_CAPACITY).map(|(k, v)| (*k, *v)).collect();
            &capped
        };
        let d = raw::diff(&self.installed.labels, labels);
        for (l, v) in d.upsert {
            match self.labels.insert(l, v, 0) {
                Ok(()) => {
                    self.installed.labels.insert(l, v);
                }
                // The kernel refused it (memory): the pipeline switches this label.
                Err(_) => overflow.labels_left_out += 1,
            }
        }
        overflow.v4_off = sync_family(
            &mut self.routes_v4,
            &mut self.installed.routes_v4,
            &self.wanted.routes_v4,
            &mut self.v4_failed_at,
            |(vrf, a, len)| raw::key4(vrf, a, len),
        )?;
        overflow.v6_off = sync_family(
            &mut self.routes_v6,
            &mut self.installed.routes_v6,
            &self.wanted.routes_v6,
            &mut self.v6_failed_at,
            |(vrf, a, len)| raw::key6(vrf, a, len),
        )?;
        for l in d.remove {
            deleted(self.labels.remove(&l)).map_err(map_err("fp_labels", "deleting"))?;
            self.installed.labels.remove(&l);
            deleted(self.label_stats.remove(&l)).map_err(map_err("fp_label_stats", "deleting"))?;
        }

        self.remove_unwanted_groups().map_err(map_err("fp_groups", "deleting"))?;

        for k in tunnel_diff.remove {
            deleted(self.tunnels.remove(&k)).map_err(map_err("fp_tunnels", "deleting"))?;
            self.installed.tunnels.remove(&k);
        }

        for (i, p) in port_diff.upsert {
            self.ports.insert(i, p, 0).map_err(map_err("fp_ports", "updating"))?;
            self.installed.ports.insert(i, p);
        }
        let cross_diff = raw::diff(&self.installed.crossings, &self.wanted.crossings);
        for (k, c) in cross_diff.upsert {
            self.crossings.insert(k, c, 0).map_err(map_err("fp_crossings", "updating"))?;
            self.installed.crossings.insert(k, c);
        }
        for k in cross_diff.remove {
            deleted(self.crossings.remove(&k)).map_err(map_err("fp_crossings", "deleting"))?;
            self.installed.crossings.remove(&k);
        }
        self.overflow = overflow;
        Ok(overflow)
    }

    /// Changes some entries of the tables last applied (as [`FastPath::apply`] with those
    /// tables so changed would), writing only those entries to the maps: a route change
    /// costs time that does not grow with the tables. When the maps do not hold the whole
    /// tables (before or after the change), or a write fails, it falls back to comparing
    /// everything. An invalid entry gives an error and changes nothing.
    pub fn update(&mut self, change: &FastTablesChange) -> Result<Overflow, FastPathError> {
        let (labels, v4, v6) = raw::encode_change(change)?;
        // Groups: the changed entries let go of theirs and take their new ones.
        let mut groups = std::mem::take(&mut self.wanted.groups);
        let next = &mut self.next_group;
        let labels = with_groups(labels, &self.wanted.labels, &mut groups, next, |e| &mut e.group);
        let v4 = with_groups(v4, &self.wanted.routes_v4, &mut groups, next, |e| &mut e.group);
        let v6 = with_groups(v6, &self.wanted.routes_v6, &mut groups, next, |e| &mut e.group);
        self.wanted.groups = groups;
        set_all(&mut self.wanted.labels, &labels);
        set_all(&mut self.wanted.routes_v4, &v4);
        set_all(&mut self.wanted.routes_v6, &v6);
        let whole = self.overflow.is_none()
            && self.wanted.labels.len() <= LABEL_CAPACITY
            && family_fits(self.wanted.routes_v4.len(), self.v4_failed_at)
            && family_fits(self.wanted.routes_v6.len(), self.v6_failed_at);
        if !whole || self.write_entries(&labels, &v4, &v6).is_err() {
            return self.sync();
        }
        Ok(self.overflow)
    }

    /// Writes the given entries to the maps: upserts, then route removals, then label
    /// removals (with their counters), as [`FastPath::sync`] orders them.
    fn write_entries(
        &mut self,
        labels: &[(u32, Option<RawLabel>)],
        v4: &EntryChanges<(u16, Ipv4Addr, u8)>,
        v6: &EntryChanges<(u16, Ipv6Addr, u8)>,
    ) -> Result<(), MapError> {
        let new_groups: Vec<(u32, RawGroup)> = self
            .wanted
            .groups
            .by_id
            .iter()
            .filter(|(id, _)| !self.installed.groups.by_id.contains_key(id))
            .map(|(id, (g, _))| (*id, **g))
            .collect();
        for (id, g) in &new_groups {
            self.groups.insert(id, g, 0)?;
            self.installed.groups.insert(*id, g);
        }
        for (l, v) in labels {
            if let Some(v) = v {
                self.labels.insert(l, v, 0)?;
                self.installed.labels.insert(*l, *v);
            }
        }
        write_family(&mut self.routes_v4, &mut self.installed.routes_v4, v4, |(vrf, a, len)| {
            raw::key4(vrf, a, len)
        })?;
        write_family(&mut self.routes_v6, &mut self.installed.routes_v6, v6, |(vrf, a, len)| {
            raw::key6(vrf, a, len)
        })?;
        for (l, v) in labels {
            if v.is_none() {
                deleted(self.labels.remove(l))?;
                self.installed.labels.remove(l);
                deleted(self.label_stats.remove(l))?;
            }
        }
        self.remove_unwanted_groups()
    }

    /// Deletes the groups no wanted entry refers to any more (after the entries).
    fn remove_unwanted_groups(&mut self) -> Result<(), MapError> {
        let gone: Vec<u32> = self
            .installed
            .groups
            .by_id
            .keys()
            .filter(|id| !self.wanted.groups.by_id.contains_key(id))
            .copied()
            .collect();
        for id in gone {
            deleted(self.groups.remove(&id))?;
            self.installed.groups.remove(id);
        }
        Ok(())
    }

    /// The counters, summed over CPUs.
    pub fn counters(&self) -> Result<FastCounters, FastPathError> {
        let per_cpu = self.counters.get(&0, 0).map_err(map_err("fp_counters", "reading"))?;
        let get = |i: u32| per_cpu.iter().fold(0u64, |s, set| s.wrapping_add(set.c[i as usize]));
        Ok(FastCounters {
            frames_in: get(counter::FRAMES_IN),
            swap: get(counter::SWAP),
            push: get(counter::PUSH),
            pop: get(counter::POP),
            ip_forward: get(counter::IP_FORWARD),
            passed: get(counter::PASSED),
            bytes: get(counter::BYTES),
            redirect_failed: get(counter::REDIRECT_FAILED),
            encap: get(counter::ENCAP),
            decap: get(counter::DECAP),
            crossed: get(counter::CROSSED),
            repassed: get(counter::REPASSED),
            act_mpls: get(counter::ACT_MPLS),
            recalled: get(counter::RECALLED),
            xdp_pop: get(counter::XDP_POP),
            xdp_swap: get(counter::XDP_SWAP),
        })
    }

    /// Frames and bytes (as received) swapped or popped, by incoming label, summed over
    /// CPUs. A label's counters restart when it leaves the tables.
    pub fn label_stats(&self) -> Result<BTreeMap<u32, (u64, u64)>, FastPathError> {
        let mut out = BTreeMap::new();
        for entry in self.label_stats.iter() {
            let (label, per_cpu) = entry.map_err(map_err("fp_label_stats", "reading"))?;
            let sum = per_cpu
                .iter()
                .fold((0u64, 0u64), |(f, b), s| (f.wrapping_add(s.frames), b.wrapping_add(s.bytes)));
            out.insert(label, sum);
        }
        Ok(out)
    }

    /// Redirected frames by ifindex (rx on the port they came in, tx on the port they went
    /// out), summed over CPUs. A port's counters restart when it is detached.
    pub fn port_stats(&self) -> Result<BTreeMap<u32, FastPortStats>, FastPathError> {
        let mut out = BTreeMap::new();
        for entry in self.port_stats.iter() {
            let (ifindex, per_cpu) = entry.map_err(map_err("fp_port_stats", "reading"))?;
            let mut s = FastPortStats::default();
            for c in per_cpu.iter() {
                s.rx_frames = s.rx_frames.wrapping_add(c.rx_frames);
                s.rx_bytes = s.rx_bytes.wrapping_add(c.rx_bytes);
                s.tx_frames = s.tx_frames.wrapping_add(c.tx_frames);
                s.tx_bytes = s.tx_bytes.wrapping_add(c.tx_bytes);
            }
            out.insert(ifindex, s);
        }
        Ok(out)
    }
}

/// Where the router writes the fast path's tables: the kernel's maps ([`FastPath`]), or a
/// stand-in that records the writes (the router's tests inject a failed write with one).
pub trait FastMaps {
    /// Makes the maps equal to `tables` ([`FastPath::apply`]).
    fn apply(&mut self, tables: &FastTables) -> Result<Overflow, FastPathError>;
    /// Changes some entries of the tables last applied ([`FastPath::update`]).
    fn update(&mut self, change: &FastTablesChange) -> Result<Overflow, FastPathError>;
}

impl FastMaps for FastPath {
    fn apply(&mut self, tables: &FastTables) -> Result<Overflow, FastPathError> {
        FastPath::apply(self, tables)
    }

    fn update(&mut self, change: &FastTablesChange) -> Result<Overflow, FastPathError> {
        FastPath::update(self, change)
    }
}

// A FastPath moves to the thread that runs the control plane.
const _: () = {
    const fn send<T: Send>() {}
    send::<FastPath>();
};

fn program<'a, P>(ebpf: &'a mut aya::Ebpf, name: &'static str) -> Result<&'a mut P, FastPathError>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    let prog = ebpf.program_mut(name).ok_or(FastPathError::Program {
        name,
        what: "finding",
        source: ProgramError::NotLoaded,
    })?;
    prog.try_into().map_err(|source| FastPathError::Program { name, what: "finding", source })
}

/// `fp_xdp` in the driver of `ifname` (`ifindex`), listed in `fp_xdp_ports` as a place
/// its swaps may go; or why not.
fn attach_xdp(
    ebpf: &mut aya::Ebpf,
    xdp_ports: &mut BpfHashMap<MapData, u32, u32>,
    ifname: &str,
    ifindex: u32,
) -> XdpSwitching {
    let attach_err = |source| FastPathError::Attach { ifname: ifname.to_owned(), source };
    let link = program::<Xdp>(ebpf, XDP_PROG).and_then(|x| {
        let id = x.attach(ifname, XdpMode::Driver).map_err(attach_err)?;
        x.take_link(id).map_err(attach_err)
    });
    match link {
        Ok(link) => match xdp_ports.insert(ifindex, 1, 0) {
            Ok(()) => XdpSwitching::On { _link: link },
            Err(e) => XdpSwitching::Refused(format!("fp_xdp_ports: {e}")),
        },
        Err(e) => XdpSwitching::Refused(e.to_string()),
    }
}

fn ifindex(ifname: &str) -> Result<u32, FastPathError> {
    vmpls_sys::if_nametoindex(ifname).ok_or_else(|| FastPathError::NoInterface {
        ifname: ifname.to_owned(),
        source: io::Error::from_raw_os_error(libc::ENODEV),
    })
}

/// Whether `ifname` (in the calling thread's network namespace) is a veth, whose driver
/// offers `bpf_redirect_peer`: every [`Adjacency`]'s out port must be one. Asks the driver
/// (ETHTOOL_GDRVINFO), so it sees the thread's namespace, unlike `/sys/class/net`.
pub fn is_veth(ifname: &str) -> bool {
    vmpls_sys::IfName::new(ifname)
        .and_then(|n| vmpls_sys::iface::driver(&n).ok())
        .is_some_and(|d| d == "veth")
}

/// What `net.core.optmem_max` must allow for the socket filter: the kernel charges a
/// filter's size (8 bytes an instruction, some thousands of them) to the socket's option
/// memory, which kernels before 6.9 limit to 20 KiB by default (`SO_ATTACH_BPF` then
/// fails with `ENOMEM`); 128 KiB is the default of later ones.
pub const OPTMEM_FOR_FILTER: u64 = 131_072;

const OPTMEM_MAX: &str = "/proc/sys/net/core/optmem_max";

/// Raises `net.core.optmem_max` to [`OPTMEM_FOR_FILTER`] if it is lower; returns the
/// value it replaced, or `None` if it was high enough.
pub fn raise_optmem_max() -> std::io::Result<Option<u64>> {
    let old: u64 = std::fs::read_to_string(OPTMEM_MAX)?
        .trim()
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    if old >= OPTMEM_FOR_FILTER {
        return Ok(None);
    }
    std::fs::write(OPTMEM_MAX, OPTMEM_FOR_FILTER.to_string())?;
    Ok(Some(old))
}

impl FastPathError {
    /// Whether this is the kernel refusing the socket filter for want of socket option
    /// memory (`ENOMEM` from `SO_ATTACH_BPF`: see [`OPTMEM_FOR_FILTER`]).
    pub fn is_out_of_option_memory(&self) -> bool {
        use aya::programs::SocketFilterError;
        matches!(
            self,
            FastPathError::SocketFilter(ProgramError::SocketFilterError(SocketFilterError::SetsockoptError { io_error, .. }))
                if io_error.raw_os_error() == Some(libc::ENOMEM)
        )
    }
}

/// How the programs would hand frames to `ifname`, an interface in the calling thread's
/// namespace: a veth by its peer, any other Ethernet device (TAP, virtio-net, physical) by
/// its transmit; why not, for anything else (no Ethernet header to rewrite).
pub fn delivery_to(ifname: &str) -> Result<Delivery, &'static str> {
    let name = vmpls_sys::IfName::new(ifname).ok_or("not an interface name")?;
    if is_veth(ifname) {
        return Ok(Delivery::VethPeer);
    }
    let ctl = vmpls_sys::iface::control_socket().map_err(|_| "no socket to ask the kernel with")?;
    match vmpls_sys::iface::hw_addr(&ctl, &name) {
        Ok((libc::ARPHRD_ETHER, _)) => Ok(Delivery::Transmit),
        Ok(_) => Err("not an Ethernet interface"),
        Err(_) => Err("no such interface"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_table_goes_in_whole_or_not_at_all_and_comes_back_below_the_size_that_failed() {
        assert!(family_fits(0, None));
        assert!(family_fits(ROUTE_CAPACITY, None));
        assert!(!family_fits(ROUTE_CAPACITY + 1, None));
        // An insert failed at 200,000 entries (kernel memory): off until well below.
        assert!(!family_fits(200_000, Some(200_000)));
        assert!(!family_fits(185_000, Some(200_000)));
        assert!(family_fits(179_999, Some(200_000)));
    }

    #[test]
    fn is_veth_rejects_names_that_cannot_be_interfaces() {
        assert!(!is_veth(""));
        assert!(!is_veth("a-name-much-longer-than-ifnamsiz"));
        assert!(!is_veth("bad\0name"));
        assert!(!is_veth("vmpls-no-such-if"));
    }

    #[test]
    fn loopback_is_not_a_veth() {
        assert!(!is_veth("lo"));
    }

    #[test]
    fn unknown_interfaces_are_named_in_the_error() {
        let e = ifindex("vmpls-nosuchif").unwrap_err();
        assert!(e.to_string().contains("vmpls-nosuchif"), "{e}");
    }

    #[test]
    fn unavailable_error_says_what_to_install() {
        let e = FastPathError::Unavailable.to_string();
        assert!(e.contains("clang") && e.contains("libbpf-dev"), "{e}");
    }
}
