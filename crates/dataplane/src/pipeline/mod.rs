//! The forwarding pipeline: what happens to one frame, from the Ethernet header in to the
//! frames out.
//!
//! ```text
//! frame ─ ethernet ─┬─ ARP ──────────────── neighbour table, ARP reply
//!                   ├─ MPLS ─ label table ─┬─ swap/push ─────────────┐
//!                   │                      ├─ PHP pop ───────────────┤
//!                   │                      └─ pop+lookup ─┐          │
//!                   ├─ IPv4 ─┬─ local (echo, ...)         │          ├─ neighbour ─ output
//!                   └─ IPv6 ─┴─ prefix table ─ push? ─────┴─ (IP) ───┘   (pass whole,
//!                                                                         checksum, segment)
//! ```
//!
//! The frame is rewritten in place in its buffer: labels are pushed by moving the 14-byte
//! Ethernet header into the headroom, popped by moving it back. ICMP errors are built in
//! fresh buffers and sent through the same pipeline.
//!
//! Where the kernel owns the router's addresses ([`HostStack::Kernel`]), everything the
//! "local" branches above would answer (ARP and neighbour solicitations for our addresses,
//! packets to them, broadcast and multicast IP, IPv6 link-local) is left to it instead.

use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use vmpls_fib::{Fib, FibHandle, LookupKey, PrefixRoute, Reject, Vrf, VrfId};
use vmpls_wire::ethernet::{self, EtherType};

use crate::counters::{Counters, DropReason, Event};
use crate::gro;
use crate::neighbor::{NeighborConfig, NeighborTable, Resolution};
use crate::packet::{Packet, PacketPool, PortId};
use crate::port::{PortCaps, PortInfo};
use crate::rate::TokenBucket;
use mpls::{ReceivedStack, entry_at, gro_eligible};
use neighbor::{ADJ_SLOTS, Adjacency};

mod cached;
mod icmp;
mod ipv4;
mod ipv6;
mod mpls;
mod neighbor;
mod output;
mod pw;
#[cfg(test)]
mod pw_tests;
#[cfg(test)]
mod tests;
mod vpls;
#[cfg(test)]
mod vpls_tests;

pub use vpls::{FdbDev, FdbEntry};

const ETH: usize = ethernet::HEADER_LEN;
/// Most label stack entries one frame may carry; deeper stacks are dropped. The control
/// plane refuses routes that would push more.
const MAX_LABELS: usize = vmpls_fib::MAX_STACK_DEPTH;
/// Label stack entries kept for an ICMP extension or for sending an error along the LSP:
/// the whole stack of any frame accepted, so an error sent along the LSP gets it all back
/// (with fewer, its last entry would lack the bottom-of-stack bit).
const MAX_QUOTED_LABELS: usize = MAX_LABELS;

/// Free buffers below which [`Dataplane::process_batch`] hands control back so the caller
/// can send: enough for one 64 KiB super-frame cut into 1448-byte segments, twice over.
pub const POOL_LOW_WATER: usize = 96;

/// Who answers for the router's own addresses: ARP and neighbour solicitations for
/// them, echo requests, and every other packet addressed to the router.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HostStack {
    /// The pipeline does: it answers ARP, neighbour solicitations and pings for the
    /// router's addresses, and sends port unreachable to UDP for them. For a router
    /// whose ports only vmpls reads (TAP, vhost-user, or interfaces the kernel has no
    /// addresses on).
    #[default]
    Own,
    /// The Linux kernel does: vmpls shares the router's interfaces with it (the MPLS data
    /// plane for FRRouting on a kernel without MPLS). Every frame reaches both: the kernel
    /// owns the addresses and answers ARP, neighbour discovery and ping for them, and runs
    /// the routing daemons' sockets (OSPF and LDP hellos to multicast groups, LDP and BGP
    /// sessions over TCP); its IP forwarding is off, so only vmpls forwards. Answering
    /// here too would put a second reply on the wire, and a port unreachable or reset
    /// could break a session, so a frame for the router itself is left alone: freed,
    /// counted as [`Event::LeftToKernel`] (not a drop: the kernel has its own copy).
    /// Under labels the kernel's copy was an MPLS frame it cannot read, so a packet for
    /// the router that arrives labelled is lost: [`DropReason::LocalAfterPop`].
    ///
    /// Unchanged: transit forwarding, the ARP requests and neighbour solicitations vmpls
    /// sends to resolve its next hops (and what it learns from the answers), and the
    /// ICMP errors about transit packets (time exceeded, fragmentation needed, packet too
    /// big, unreachable), from the router's addresses.
    Kernel,
}

/// Settings of the pipeline that are not routes.
#[derive(Debug, Clone, Copy)]
pub struct DataplaneConfig {
    /// TTL of labels pushed under the pipe model, and of ICMP the router originates.
    pub default_ttl: u8,
    /// ICMP errors per second the router sends at most (a [`TokenBucket`]); 0: none at
    /// all. Errors over the limit are counted as [`DropReason::IcmpSuppressed`].
    pub icmp_rate: u32,
    /// ICMP errors the router may send back to back before `icmp_rate` applies;
    /// `None`: as many as `icmp_rate`.
    pub icmp_burst: Option<u32>,
    /// ARP requests and neighbour solicitations per second the router sends at most, all
    /// ports together (a [`TokenBucket`]); at least 1 to resolve anything. Requests over
    /// the limit are not sent and are counted as [`DropReason::NeighborRequestSuppressed`];
    /// the frames waiting for the address stay held until the next retransmission or
    /// until they expire.
    pub neighbor_request_rate: u32,
    /// Requests the router may send back to back before `neighbor_request_rate`
    /// applies; `None`: as many as `neighbor_request_rate`.
    pub neighbor_request_burst: Option<u32>,
    /// Neighbour table timers and sizes.
    pub neighbor: NeighborConfig,
    /// Whether the pipeline or the kernel answers for the router's own addresses.
    pub host_stack: HostStack,
}

impl Default for DataplaneConfig {
    fn default() -> Self {
        DataplaneConfig {
            default_ttl: 255,
            icmp_rate: 1000,
            icmp_burst: None,
            neighbor_request_rate: 100,
            neighbor_request_burst: None,
            neighbor: NeighborConfig::default(),
            host_stack: HostStack::Own,
        }
    }
}

impl DataplaneConfig {
    /// The bucket limiting ICMP errors.
    fn icmp_bucket(&self) -> TokenBucket {
        TokenBucket::new(self.icmp_rate, self.icmp_burst.unwrap_or(self.icmp_rate))
    }

    /// The bucket limiting ARP requests and neighbour solicitations.
    fn neighbor_request_bucket(&self) -> TokenBucket {
        TokenBucket::new(
            self.neighbor_request_rate,
            self.neighbor_request_burst.unwrap_or(self.neighbor_request_rate),
        )
    }
}

/// Frames the pipeline wants sent, per output port.
#[derive(Debug, Default)]
pub struct Output {
    /// Index = port id.
    pub tx: Vec<Vec<Packet>>,
}

impl Output {
    /// An empty output for `ports` ports.
    pub fn new(ports: usize) -> Output {
        Output { tx: (0..ports).map(|_| Vec::new()).collect() }
    }

    /// Frames waiting in all.
    pub fn len(&self) -> usize {
        self.tx.iter().map(Vec::len).sum()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.tx.iter().all(Vec::is_empty)
    }
}

/// Which ICMP error to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IcmpKind {
    TimeExceeded,
    TooBig {
        mtu: u32,
    },
    NetUnreachable,
    PortUnreachable,
    /// What a rejecting route answers.
    Rejected(Reject),
}

/// Where an IP packet came from, for TTL handling and ICMP.
#[derive(Debug, Clone, Copy)]
struct IpContext {
    in_port: PortId,
    vrf: VrfId,
    /// Built by this router: no TTL decrement, and no ICMP error about it.
    originated: bool,
    /// The label stack it arrived under, if it did.
    stack: Option<ReceivedStack>,
}

/// The next hop chosen for a frame: where it goes and which labels go on it.
#[derive(Debug, Clone, Copy)]
struct Hop<'a> {
    port: PortId,
    addr: IpAddr,
    labels: &'a [u32],
}

/// What one call into the pipeline works with besides the router's own state: the
/// routes in force (loaded once for the whole call), the time, the free buffers and the
/// frames to send. Every step of the pipeline takes it.
struct Batch<'a> {
    fib: &'a Fib,
    now: Instant,
    pool: &'a mut PacketPool,
    out: &'a mut Output,
    /// An IPv4 route looked up in this batch's FIB: by the lookup stage for the frame
    /// being processed ([`prefetch_routes`]), or for an earlier frame; a frame's IPv4
    /// input uses it if the VRF and destination match ([`Batch::ipv4_route`]).
    route_hint: Cell<Option<RouteHint<'a>>>,
}

impl<'a> Batch<'a> {
    /// The route to `dst` in `vrf` (whose tables are `routes`): the one the lookup stage
    /// or an earlier frame of the batch found for this very key, else a lookup, kept for
    /// the next frames (a flow's frames come in runs: a small table's lookup was a twentieth
    /// of a 64-byte push's time through a vhost-user router).
    #[inline(always)]
    fn ipv4_route(&self, vrf: VrfId, routes: &'a Vrf, dst: Ipv4Addr) -> Option<&'a PrefixRoute> {
        match self.route_hint.get() {
            Some(h) if h.vrf == vrf && h.dst == dst => h.route,
            _ => {
                let route = routes.v4.lookup_value(dst);
                self.route_hint.set(Some(RouteHint { vrf, dst, route }));
                route
            }
        }
    }
}

/// The result of looking `dst` up in `vrf` (in the batch's FIB), by the lookup stage for
/// one frame or for an earlier frame, so a frame with the same key need not look again.
#[derive(Debug, Clone, Copy)]
struct RouteHint<'a> {
    vrf: VrfId,
    dst: Ipv4Addr,
    route: Option<&'a PrefixRoute>,
}

/// The router's forwarding state and logic. Owned by one forwarding thread.
pub struct Dataplane {
    fib: FibHandle,
    ports: Vec<PortInfo>,
    neighbors: NeighborTable,
    adjacency: [Option<Adjacency>; ADJ_SLOTS],
    counters: Counters,
    config: DataplaneConfig,
    ip_ident: u16,
    /// ICMP errors the router originates.
    icmp_limit: TokenBucket,
    /// ARP requests and neighbour solicitations the router originates.
    request_limit: TokenBucket,
    scratch: Vec<Packet>,
    gro_scratch: Vec<Packet>,
    /// Per port: a point-to-point port (a tunnel), whose next hops need no neighbour
    /// resolution.
    point_to_point: Vec<bool>,
    /// The VPLS instances' bridges (MAC tables, flood limits) and attachment links.
    vpls: vpls::VplsState,
}

impl Dataplane {
    /// A pipeline over `ports` (index = port id) reading routes from `fib`.
    pub fn new(fib: FibHandle, ports: Vec<PortInfo>, config: DataplaneConfig) -> Dataplane {
        let n = ports.len();
        Dataplane {
            fib,
            ports,
            neighbors: NeighborTable::new(config.neighbor.for_ports(n)),
            adjacency: [None; ADJ_SLOTS],
            counters: Counters::new(n),
            config,
            ip_ident: 1,
            icmp_limit: config.icmp_bucket(),
            request_limit: config.neighbor_request_bucket(),
            scratch: Vec::new(),
            gro_scratch: Vec::new(),
            point_to_point: vec![false; n],
            vpls: vpls::VplsState::default(),
        }
    }

    /// Marks `port` as point-to-point (an MPLS-in-UDP tunnel): every next hop on it is
    /// the one remote, sent to without ARP or neighbour discovery (the port ignores the
    /// Ethernet addresses).
    pub fn set_point_to_point(&mut self, port: PortId) {
        if let Some(p) = self.point_to_point.get_mut(usize::from(port)) {
            *p = true;
        }
        // Its neighbours are no longer asked for: the cache must not answer for them.
        self.forget_adjacencies(port);
    }

    /// The counters so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The ports.
    pub fn ports(&self) -> &[PortInfo] {
        &self.ports
    }

    /// Updates what a port accepts at output, for ports whose offloads change while the
    /// router runs (a vhost-user guest negotiates its features when it connects).
    pub fn set_port_caps(&mut self, port: PortId, caps: PortCaps) {
        if let Some(p) = self.ports.get_mut(usize::from(port)) {
            p.caps = caps;
        }
    }

    /// Updates a port's MTU, for interfaces whose MTU an operator changes while the
    /// router runs: frames are checked against it from the next one on ("fragmentation
    /// needed" / "packet too big", fragmentation, segmentation, GSO rebuild).
    pub fn set_port_mtu(&mut self, port: PortId, mtu: u32) {
        if let Some(p) = self.ports.get_mut(usize::from(port)) {
            p.mtu = mtu;
        }
    }

    /// The neighbour table.
    pub fn neighbors(&self) -> &NeighborTable {
        &self.neighbors
    }

    /// The counters, for work done on the pipeline's behalf elsewhere (the in-kernel fast
    /// path's frames are added here so every report shows the router's whole work).
    pub fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }

    /// Uses the neighbour entry of a next hop as forwarding a frame toward it would: a
    /// next hop the in-kernel fast path sends to is never seen here, and without this
    /// its entry would go stale and expire while traffic flows. Resolves it (creating an
    /// incomplete entry if it is unknown) and sends a request when one is due.
    pub fn use_neighbor(
        &mut self,
        now: Instant,
        port: PortId,
        addr: IpAddr,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        let probe = match self.neighbors.resolve(now, port, addr) {
            Resolution::Known { probe, .. } | Resolution::Unknown { probe } => probe,
        };
        self.count_refused_neighbors();
        if probe {
            let fib = self.fib.load_full();
            self.send_solicit(
                &mut Batch { fib: &fib, now, pool, out, route_hint: Cell::new(None) },
                port,
                addr,
            );
        }
    }

    /// Sets a static neighbour (`neigh add`, `[[neighbor]]`; see
    /// [`NeighborTable::set_static`]): `addr` on `port` is `mac`, never asked for, never
    /// aged. Frames held while the address was being resolved go out to it now.
    ///
    /// # Errors
    /// A static entry with another MAC exists (change it with
    /// [`replace_static_neighbor`](Dataplane::replace_static_neighbor)), or `mac` is not
    /// unicast.
    pub fn set_static_neighbor(
        &mut self,
        now: Instant,
        port: PortId,
        addr: IpAddr,
        mac: [u8; 6],
        pool: &mut PacketPool,
        out: &mut Output,
    ) -> Result<(), crate::neighbor::StaticNeighborError> {
        let fib = self.fib.load_full();
        self.set_static(
            &mut Batch { fib: &fib, now, pool, out, route_hint: Cell::new(None) },
            port,
            addr,
            mac,
            false,
        )
    }

    /// As [`set_static_neighbor`](Dataplane::set_static_neighbor), changing the MAC of a
    /// static entry that exists (`neigh add ... replace`).
    ///
    /// # Errors
    /// `mac` is not unicast.
    pub fn replace_static_neighbor(
        &mut self,
        now: Instant,
        port: PortId,
        addr: IpAddr,
        mac: [u8; 6],
        pool: &mut PacketPool,
        out: &mut Output,
    ) -> Result<(), crate::neighbor::StaticNeighborError> {
        let fib = self.fib.load_full();
        self.set_static(
            &mut Batch { fib: &fib, now, pool, out, route_hint: Cell::new(None) },
            port,
            addr,
            mac,
            true,
        )
    }

    fn set_static(
        &mut self,
        b: &mut Batch<'_>,
        port: PortId,
        addr: IpAddr,
        mac: [u8; 6],
        replace: bool,
    ) -> Result<(), crate::neighbor::StaticNeighborError> {
        let released = self.neighbors.set_static(b.now, port, addr, mac, replace)?;
        self.release(b, released, mac);
        Ok(())
    }

    /// Removes the neighbour entry of `addr` on `port`, static or learned (`neigh del`);
    /// frames it held are dropped as `neighbor_unresolved`. Returns whether there was one.
    pub fn remove_neighbor(&mut self, port: PortId, addr: IpAddr, pool: &mut PacketPool) -> bool {
        let Some(held) = self.neighbors.remove(port, addr) else { return false };
        for pkt in held {
            self.discard(DropReason::NeighborUnresolved, pkt, pool);
        }
        true
    }

    /// The routes in force.
    pub fn fib(&self) -> &FibHandle {
        &self.fib
    }

    /// Processes a batch of received frames (each with `port` set to where it arrived).
    /// Buffers of dropped frames go back to `pool`.
    ///
    /// Stops early, leaving the rest in `frames`, when fewer than [`POOL_LOW_WATER`]
    /// buffers are left: cutting a batch of super-frames into segments can take thousands
    /// of buffers. The caller then sends `out` (which returns buffers to the pool) and
    /// calls again with what is left.
    pub fn process_batch(
        &mut self,
        now: Instant,
        frames: &mut Vec<Packet>,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        let fib = self.fib.load_full();
        self.vpls_follow(&fib);
        if frames.len() > 1 {
            let ports = &self.ports;
            let gro = gro::coalesce(frames, &mut self.gro_scratch, pool, |p| gro_eligible(&fib, ports, p));
            self.counters.event(Event::GroMerged, gro.merged);
            self.counters.event(Event::GroAbsorbed, gro.absorbed);
        }
        // Taken from the back of a reversed batch, so what is left stays in order.
        frames.reverse();
        let mut b = Batch { fib: &fib, now, pool, out, route_hint: Cell::new(None) };
        let staged = frames.len() > 1 && fib.prefetch_pays();
        while !frames.is_empty() {
            let window = frames.len().min(LOOKAHEAD);
            let mut hints = [None; LOOKAHEAD];
            if staged {
                prefetch_routes(b.fib, &frames[frames.len() - window..], &mut hints);
            }
            if !self.input_window(&mut b, frames, &hints[..window]) {
                break;
            }
        }
        frames.reverse();
    }

    /// The next `hints.len()` frames of a reversed batch (taken from its back), each with
    /// the IPv4 route the lookup stage found for it, if it ran ([`prefetch_routes`]: a
    /// window's misses overlapped). False when the pool ran low with frames left (see
    /// [`process_batch`](Dataplane::process_batch)).
    fn input_window<'a>(
        &mut self,
        b: &mut Batch<'a>,
        frames: &mut Vec<Packet>,
        hints: &[Option<RouteHint<'a>>],
    ) -> bool {
        for hint in hints.iter().rev() {
            if hint.is_some() {
                b.route_hint.set(*hint);
            }
            let Some(pkt) = frames.pop() else { break };
            self.input(b, pkt);
            if b.pool.available() < POOL_LOW_WATER && !frames.is_empty() {
                return false;
            }
        }
        true
    }

    /// Processes one received frame.
    pub fn process(&mut self, now: Instant, pkt: Packet, pool: &mut PacketPool, out: &mut Output) {
        let fib = self.fib.load_full();
        self.vpls_follow(&fib);
        self.input(&mut Batch { fib: &fib, now, pool, out, route_hint: Cell::new(None) }, pkt);
    }

    /// When [`poll`](Dataplane::poll) next has work (neighbour requests to repeat, held
    /// frames to drop, entries to age out), as quinn's `Connection::poll_timeout`: the
    /// loop sleeps until then (or until frames arrive) and calls `poll` at that time.
    /// `None`: no timer runs. Never late; after a neighbour was refreshed it may be early,
    /// and `poll` then finds nothing to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.neighbors.poll_timeout()
    }

    /// Runs the timers due at `now` (see [`poll_timeout`](Dataplane::poll_timeout)):
    /// neighbour requests repeated, unanswered and stale entries removed with the frames
    /// they held. Time is the caller's: the pipeline never reads a clock.
    pub fn poll(&mut self, now: Instant, pool: &mut PacketPool, out: &mut Output) {
        let fib = self.fib.load_full();
        let expiry = self.neighbors.poll(now);
        let mut b = Batch { fib: &fib, now, pool, out, route_hint: Cell::new(None) };
        for (port, addr) in expiry.probes {
            self.send_solicit(&mut b, port, addr);
        }
        for pkt in expiry.dropped {
            self.counters.drop(DropReason::NeighborUnresolved);
            b.pool.put(pkt);
        }
    }

    fn discard(&mut self, reason: DropReason, pkt: Packet, pool: &mut PacketPool) {
        self.counters.drop(reason);
        pool.put(pkt);
    }

    /// True when the kernel received its own copy of this IP packet and answers it
    /// ([`HostStack::Kernel`]): it arrived unlabelled from the wire (not built here).
    #[inline]
    fn kernel_has_copy(&self, ctx: &IpContext) -> bool {
        self.config.host_stack == HostStack::Kernel && !ctx.originated && ctx.stack.is_none()
    }

    /// Under [`HostStack::Kernel`]: a packet received for the router itself is the
    /// kernel's. Arrived unlabelled, the kernel has its copy: counted, freed. Arrived
    /// under labels, the kernel could not read its copy and this one cannot be handed to
    /// it: dropped as [`DropReason::LocalAfterPop`].
    #[cold]
    fn leave_to_kernel(&mut self, pkt: Packet, ctx: &IpContext, pool: &mut PacketPool) {
        if ctx.stack.is_some() {
            return self.discard(DropReason::LocalAfterPop, pkt, pool);
        }
        self.counters.event(Event::LeftToKernel, 1);
        pool.put(pkt);
    }

    /// Processes one received frame.
    fn input(&mut self, b: &mut Batch<'_>, mut pkt: Packet) {
        match self.receive(b, &mut pkt) {
            Received::Rewritten => b.out.tx[usize::from(pkt.port)].push(pkt),
            Received::Next(step) => self.dispatch(b, pkt, step),
        }
    }

    /// The first look at a received frame, where it lies: its arrival counted, the checks
    /// every frame passes, and for the common frames of each role the cached paths
    /// (`cached.rs`), which rewrite it for its output port (then `pkt.port`, which
    /// exists). Any other frame is left untouched, with what the general way does next.
    #[inline(always)]
    fn receive(&mut self, b: &Batch<'_>, pkt: &mut Packet) -> Received {
        let in_port = pkt.port;
        let Some(port) = self.ports.get(usize::from(in_port)) else {
            return Received::Next(Step::Drop(DropReason::NoSuchPort));
        };
        if let Some(c) = self.counters.rx_frames.get_mut(usize::from(in_port)) {
            *c += 1;
        }
        // An attachment circuit is in raw Ethernet mode: every frame rides its pseudowire.
        if let Some((pw, _)) = b.fib.attachment_pw(in_port) {
            return Received::Next(Step::Pseudowire(pw));
        }
        // So is a VPLS attachment circuit: every frame is bridged.
        if let Some(inst) = b.fib.port_vpls(in_port) {
            return Received::Next(Step::Vpls(inst));
        }
        let Ok(frame) = ethernet::Frame::new_checked(pkt.frame()) else {
            return Received::Next(Step::Drop(DropReason::TruncatedEthernet));
        };
        let dst = frame.dst_addr();
        if dst.0 != port.mac && dst.is_unicast() {
            return Received::Next(Step::Drop(DropReason::OtherHost));
        }
        if frame.vlan().is_some() {
            return Received::Next(Step::Drop(DropReason::Vlan));
        }
        // A partial checksum is completed where the sender says; never over our headers.
        if pkt.offload.needs_csum && usize::from(pkt.offload.csum_start) < ETH {
            return Received::Next(Step::Drop(DropReason::BadChecksumOffload));
        }
        // Untagged (checked above): the EtherType is the outer one.
        let step = match frame.outer_ethertype() {
            EtherType::Mpls => {
                if !b.fib.accepts_mpls(in_port) {
                    return Received::Next(Step::Drop(DropReason::MplsNotAccepted));
                }
                if self.label_cached(b, pkt) {
                    return Received::Rewritten;
                }
                Step::Mpls
            }
            EtherType::Ipv4 => {
                if self.ipv4_cached(b, pkt) {
                    return Received::Rewritten;
                }
                Step::Ipv4
            }
            EtherType::Ipv6 => Step::Ipv6,
            EtherType::Arp => Step::Arp,
            // IS-IS hellos and the like: isisd (or lldpd) reads its own copy.
            t if t.is_link_control() && self.config.host_stack == HostStack::Kernel => Step::LeftToKernel,
            _ => Step::Drop(DropReason::UnknownEthertype),
        };
        Received::Next(step)
    }

    /// The general way for a received frame that [`receive`](Dataplane::receive) left.
    fn dispatch(&mut self, b: &mut Batch<'_>, pkt: Packet, step: Step) {
        match step {
            Step::Drop(reason) => self.discard(reason, pkt, b.pool),
            Step::Pseudowire(pw) => self.pw_ingress(b, pkt, pw),
            Step::Vpls(inst) => self.vpls_from_ac(b, pkt, inst),
            Step::Mpls => self.mpls_input(b, pkt, false),
            Step::Ipv4 | Step::Ipv6 => {
                let in_port = pkt.port;
                let ctx =
                    IpContext { in_port, vrf: port_vrf(b.fib, in_port), originated: false, stack: None };
                match step {
                    Step::Ipv4 => self.ipv4_input(b, pkt, ctx),
                    _ => self.ipv6_input(b, pkt, ctx),
                }
            }
            Step::Arp => self.arp_input(b, pkt),
            Step::LeftToKernel => {
                self.counters.event(Event::LeftToKernel, 1);
                b.pool.put(pkt);
            }
        }
    }
}

/// What [`Dataplane::receive`] did with a frame.
enum Received {
    /// A cached path rewrote it for its output port: it goes on that port's queue.
    Rewritten,
    /// Untouched: the general way takes it on from here.
    Next(Step),
}

/// What the general way does next with a received frame ([`Dataplane::dispatch`]).
#[derive(Debug, Clone, Copy)]
enum Step {
    Drop(DropReason),
    /// Into pseudowire `0` (its attachment circuit's frames, whole).
    Pseudowire(u16),
    /// Into VPLS instance `0`, bridged.
    Vpls(u16),
    Mpls,
    Ipv4,
    Ipv6,
    Arp,
    /// A link-control frame (IS-IS, LACP...), whose own copy the kernel reads.
    LeftToKernel,
}

/// Frames whose lookups [`prefetch_routes`] takes together: enough to cover a cache
/// miss's latency with the steps of the other frames' lookups, few enough that what the
/// steps brought in is still in cache when the frames are processed. 8, 16 and 64 measured
/// alike (BENCHMARKS.md).
const LOOKAHEAD: usize = 32;

/// The lookup stage of a batch, as VPP's graph nodes and DPDK's pipelines stage theirs:
/// each frame's top label or IPv4 destination is read without checks, and the lookups of
/// all frames are taken together one dependent read per pass
/// ([`Fib::prefetch_lookups`]: the index entries, the trie node, the next-hop group, the
/// next hop, its labels), so that the cache misses of all of them are in flight at once
/// instead of one after the other as each frame is processed. A hint only: the frames are
/// then processed as before, in order, and their lookups find the tables in cache. The
/// IPv4 routes the lookups found go into `hints`, which the frames' IPv4 input takes
/// instead of looking up again. At most [`LOOKAHEAD`] frames.
fn prefetch_routes<'a>(fib: &'a Fib, frames: &[Packet], hints: &mut [Option<RouteHint<'a>>; LOOKAHEAD]) {
    let mut keys = [LookupKey::None; LOOKAHEAD];
    for (key, pkt) in keys.iter_mut().zip(frames) {
        let f = pkt.frame();
        let Some(&[t0, t1, b0, b1, b2, ..]) = f.get(ETH - 2..) else { continue };
        *key = match EtherType::from(u16::from_be_bytes([t0, t1])) {
            // The label: the top 20 bits of the entry.
            EtherType::Mpls => LookupKey::Label(u32::from_be_bytes([0, b0, b1, b2]) >> 4),
            // The destination address: bytes 16 to 19 of the header.
            EtherType::Ipv4 => match f.get(ETH + 16..ETH + 20) {
                Some(&[d0, d1, d2, d3]) => {
                    LookupKey::Ipv4(port_vrf(fib, pkt.port), Ipv4Addr::new(d0, d1, d2, d3))
                }
                _ => continue,
            },
            _ => continue,
        };
    }
    let routes = fib.prefetch_lookups(&keys);
    for ((hint, key), route) in hints.iter_mut().zip(keys).zip(routes) {
        *hint = match (key, route) {
            (LookupKey::Ipv4(vrf, dst), Some(route)) => Some(RouteHint { vrf, dst, route }),
            _ => None,
        };
    }
}

/// The VRF of the port a frame arrived on.
#[inline]
fn port_vrf(fib: &Fib, port: PortId) -> VrfId {
    fib.port_vrf.get(usize::from(port)).copied().unwrap_or(vmpls_fib::DEFAULT_VRF)
}

/// Writes an untagged Ethernet header at the start of `area`.
fn write_ethernet(area: &mut [u8], dst: [u8; 6], src: [u8; 6], ethertype: EtherType) {
    let header = ethernet::Repr {
        dst_addr: ethernet::Address(dst),
        src_addr: ethernet::Address(src),
        ethertype,
        vlan: None,
    };
    header.emit(&mut ethernet::Frame::new_unchecked(area));
}

/// Sets the EtherType of an untagged frame (after a push or a pop).
#[inline]
fn set_ethertype(frame: &mut [u8], ethertype: EtherType) {
    ethernet::Frame::new_unchecked(frame).set_outer_ethertype(ethertype);
}

/// True for a frame whose EtherType (the outer one) is MPLS.
#[inline(always)]
fn is_labelled(frame: &[u8]) -> bool {
    frame.len() >= ETH && ethernet::Frame::new_unchecked(frame).outer_ethertype_is(EtherType::Mpls)
}

/// Offset of the IP header: after Ethernet and, for a labelled frame, the label stack.
fn l3_offset(frame: &[u8]) -> usize {
    if is_labelled(frame) { entry_at(vmpls_wire::mpls::stack_depth(&frame[ETH..]).unwrap_or(0)) } else { ETH }
}
