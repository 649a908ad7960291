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

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Instant;

use vmpls_fib::{Fib, FibHandle, LabelAction, Nexthop, PrefixRoute, RouteTarget, TtlModel, VrfId};
use vmpls_wire::{arp, checksum, ethernet, icmpv4, icmpv6, ipv4, ipv6, mpls, virtio_net};

use crate::counters::{Counters, Drop, Event};
use crate::hash::{ip_flow_hash, mpls_flow_hash};
use crate::neighbor::{NeighborConfig, NeighborTable, Resolution};
use crate::packet::{Packet, PacketPool, PortId};
use crate::port::{PortCaps, PortInfo};
use crate::rate::TokenBucket;
use crate::{fragment, gro, gso};

const ETH: usize = ethernet::HEADER_LEN;
const MPLS_ETHERTYPE: u16 = 0x8847;
const IPV4_ETHERTYPE: u16 = 0x0800;
const IPV6_ETHERTYPE: u16 = 0x86dd;
const ARP_ETHERTYPE: u16 = 0x0806;
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
    /// the router that arrives labelled is lost: [`Drop::LocalAfterPop`].
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
    /// all. Errors over the limit are counted as [`Drop::IcmpSuppressed`].
    pub icmp_rate: u32,
    /// ICMP errors the router may send back to back before `icmp_rate` applies;
    /// `None`: as many as `icmp_rate`.
    pub icmp_burst: Option<u32>,
    /// ARP requests and neighbour solicitations per second the router sends at most, all
    /// ports together (a [`TokenBucket`]); at least 1 to resolve anything. Requests over
    /// the limit are not sent and are counted as [`Drop::NeighborRequestSuppressed`];
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

/// The label stack a frame arrived with, kept for ICMP (RFC 4950) and for sending an error
/// along the LSP.
#[derive(Debug, Clone, Copy, Default)]
struct ReceivedStack {
    words: [u32; MAX_QUOTED_LABELS],
    len: usize,
}

impl ReceivedStack {
    fn capture(stack: &[u8]) -> ReceivedStack {
        let mut s = ReceivedStack::default();
        for e in stack.chunks_exact(4).take(MAX_QUOTED_LABELS) {
            s.words[s.len] = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
            s.len += 1;
            if e[2] & 1 != 0 {
                break;
            }
        }
        s
    }

    fn words(&self) -> &[u32] {
        &self.words[..self.len]
    }
}

/// The largest MTU of an Ethernet NIC (jumbo frames). Links above it are virtual (veth,
/// TAP) and carry super-frames whole.
const MAX_ETHERNET_MTU: u32 = 9216;

/// The destination MAC written on frames to a point-to-point port (which ignores it).
const POINT_TO_POINT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

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

/// Slots of the adjacency cache (a power of two).
const ADJ_SLOTS: usize = 16;

/// A fresh neighbour resolution remembered by the swap fast path, so a switched frame
/// costs no hash lookup: valid while the neighbour table's generation is `generation`
/// and the time is before `stale_at` (exactly when the table would answer the same).
#[derive(Debug, Clone, Copy)]
struct Adjacency {
    /// 0: empty slot (a table made by `NeighborTable::new` never has generation 0).
    generation: u64,
    port: PortId,
    addr: IpAddr,
    mac: [u8; 6],
    stale_at: Instant,
}

/// The slot of a (port, address) pair in the adjacency cache: low address bits, where
/// next hops on one subnet differ, mixed with the port.
#[inline(always)]
fn adj_slot(port: PortId, addr: IpAddr) -> usize {
    let a = match addr {
        IpAddr::V4(a) => a.to_bits(),
        IpAddr::V6(a) => a.to_bits() as u32,
    };
    (a ^ (a >> 8) ^ u32::from(port)) as usize & (ADJ_SLOTS - 1)
}

/// The router's forwarding state and logic. Owned by one forwarding thread.
pub struct Dataplane {
    fib: FibHandle,
    ports: Vec<PortInfo>,
    neighbors: NeighborTable,
    adjacency: [Adjacency; ADJ_SLOTS],
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
}

impl Dataplane {
    /// A pipeline over `ports` (index = port id) reading routes from `fib`.
    pub fn new(fib: FibHandle, ports: Vec<PortInfo>, config: DataplaneConfig) -> Dataplane {
        let n = ports.len();
        Dataplane {
            fib,
            ports,
            neighbors: NeighborTable::new(config.neighbor),
            adjacency: [Adjacency {
                generation: 0,
                port: 0,
                addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                mac: [0; 6],
                stale_at: Instant::now(),
            }; ADJ_SLOTS],
            counters: Counters::new(n),
            config,
            ip_ident: 1,
            icmp_limit: config.icmp_bucket(),
            request_limit: config.neighbor_request_bucket(),
            scratch: Vec::new(),
            gro_scratch: Vec::new(),
            point_to_point: vec![false; n],
        }
    }

    /// Marks `port` as point-to-point (an MPLS-in-UDP tunnel): every next hop on it is
    /// the one remote, sent to without ARP or neighbour discovery (the port ignores the
    /// Ethernet addresses).
    pub fn set_point_to_point(&mut self, port: PortId) {
        if let Some(p) = self.point_to_point.get_mut(usize::from(port)) {
            *p = true;
        }
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
        if probe {
            let fib = self.fib.load_full();
            self.send_solicit(&fib, now, port, addr, pool, out);
        }
    }

    /// Sets a static neighbour (`neigh add`, `[[neighbor]]`; see
    /// [`NeighborTable::set_static`]): `addr` on `port` is `mac`, never asked for, never
    /// aged. Frames held while the address was being resolved go out to it now.
    ///
    /// # Errors
    /// A static entry with another MAC exists and `replace` is false, or `mac` is not
    /// unicast.
    #[allow(clippy::too_many_arguments)]
    pub fn set_static_neighbor(
        &mut self,
        now: Instant,
        port: PortId,
        addr: IpAddr,
        mac: [u8; 6],
        replace: bool,
        pool: &mut PacketPool,
        out: &mut Output,
    ) -> Result<(), crate::neighbor::StaticNeighborError> {
        let released = self.neighbors.set_static(now, port, addr, mac, replace)?;
        self.release(released, mac, pool, out);
        Ok(())
    }

    /// Removes the neighbour entry of `addr` on `port`, static or learned (`neigh del`);
    /// frames it held are dropped as `neighbor_unresolved`. Returns whether there was one.
    pub fn remove_neighbor(&mut self, port: PortId, addr: IpAddr, pool: &mut PacketPool) -> bool {
        let Some(held) = self.neighbors.remove(port, addr) else { return false };
        for pkt in held {
            self.discard(Drop::NeighborUnresolved, pkt, pool);
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
        if frames.len() > 1 {
            let ports = &self.ports;
            let gro = gro::coalesce(frames, &mut self.gro_scratch, pool, |p| gro_eligible(&fib, ports, p));
            self.counters.event(Event::GroMerged, gro.merged);
            self.counters.event(Event::GroAbsorbed, gro.absorbed);
        }
        // Taken from the back of a reversed batch, so what is left stays in order.
        frames.reverse();
        while let Some(pkt) = frames.pop() {
            self.input(&fib, now, pkt, pool, out);
            if pool.available() < POOL_LOW_WATER && !frames.is_empty() {
                break;
            }
        }
        frames.reverse();
    }

    /// Processes one received frame.
    pub fn process(&mut self, now: Instant, pkt: Packet, pool: &mut PacketPool, out: &mut Output) {
        let fib = self.fib.load_full();
        self.input(&fib, now, pkt, pool, out);
    }

    /// Runs timers (neighbour requests and timeouts). Call it every few hundred ms.
    pub fn poll(&mut self, now: Instant, pool: &mut PacketPool, out: &mut Output) {
        let fib = self.fib.load_full();
        let expiry = self.neighbors.poll(now);
        for (port, addr) in expiry.probes {
            self.send_solicit(&fib, now, port, addr, pool, out);
        }
        for pkt in expiry.dropped {
            self.counters.drop(Drop::NeighborUnresolved);
            pool.put(pkt);
        }
    }

    fn discard(&mut self, reason: Drop, pkt: Packet, pool: &mut PacketPool) {
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
    /// it: dropped as [`Drop::LocalAfterPop`].
    #[cold]
    fn leave_to_kernel(&mut self, pkt: Packet, ctx: &IpContext, pool: &mut PacketPool) {
        if ctx.stack.is_some() {
            return self.discard(Drop::LocalAfterPop, pkt, pool);
        }
        self.counters.event(Event::LeftToKernel, 1);
        pool.put(pkt);
    }

    fn input(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        mut pkt: Packet,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        let in_port = pkt.port;
        let Some(port) = self.ports.get(usize::from(in_port)) else {
            return self.discard(Drop::NoSuchPort, pkt, pool);
        };
        if let Some(c) = self.counters.rx_frames.get_mut(usize::from(in_port)) {
            *c += 1;
        }
        let Ok(frame) = ethernet::Frame::new_checked(pkt.frame()) else {
            return self.discard(Drop::TruncatedEthernet, pkt, pool);
        };
        let dst = frame.dst_addr();
        if dst.0 != port.mac && dst.is_unicast() {
            return self.discard(Drop::OtherHost, pkt, pool);
        }
        if frame.vlan().is_some() {
            return self.discard(Drop::Vlan, pkt, pool);
        }
        // A partial checksum is completed where the sender says; never over our headers.
        if pkt.offload.needs_csum && usize::from(pkt.offload.csum_start) < ETH {
            return self.discard(Drop::BadChecksumOffload, pkt, pool);
        }
        // Untagged (checked above): the EtherType is the outer one, read without the
        // enum round trip.
        let ethertype = u16::from_be_bytes([pkt.frame()[12], pkt.frame()[13]]);
        if ethertype == MPLS_ETHERTYPE {
            if self.swap_fast(fib, now, &mut pkt, out) {
                return out.tx[usize::from(pkt.port)].push(pkt);
            }
            return self.mpls_input(fib, now, pkt, pool, out, false);
        }
        let vrf = fib.port_vrf.get(usize::from(in_port)).copied().unwrap_or(vmpls_fib::DEFAULT_VRF);
        match ethertype {
            IPV4_ETHERTYPE => {
                let ctx = IpContext { in_port, vrf, originated: false, stack: None };
                self.ipv4_input(fib, now, pkt, ctx, pool, out)
            }
            IPV6_ETHERTYPE => {
                let ctx = IpContext { in_port, vrf, originated: false, stack: None };
                self.ipv6_input(fib, now, pkt, ctx, pool, out)
            }
            ARP_ETHERTYPE => self.arp_input(fib, now, pkt, pool, out),
            _ => self.discard(Drop::UnknownEthertype, pkt, pool),
        }
    }

    // ---------------------------------------------------------------- MPLS

    /// The common case of a P router, switched without the general path's detours: a
    /// label swapped for exactly one label toward a resolved next hop, on a frame that
    /// needs nothing else (no segmentation, no checksum to complete, fits the MTU, TTL
    /// left). Returns false, having changed nothing, for anything else: the general path
    /// ([`mpls_input`](Dataplane::mpls_input)) is the reference behaviour, and this does
    /// exactly what it would do (same frame out, same counters) except for the push onto
    /// `out.tx[pkt.port]`, left to the caller.
    #[inline(always)]
    fn swap_fast(&mut self, fib: &Fib, now: Instant, pkt: &mut Packet, out: &Output) -> bool {
        let offload = pkt.offload;
        if offload.is_gso() {
            return false;
        }
        let frame = pkt.frame_mut();
        let len = frame.len();
        let Some(entry) = frame.get_mut(ETH..ETH + 4) else { return false };
        let word = u32::from_be_bytes([entry[0], entry[1], entry[2], entry[3]]);
        let top = mpls::Repr::from_u32(word);
        if top.label < mpls::FIRST_UNRESERVED || top.ttl <= 1 {
            return false;
        }
        // The general path's stack checks: complete, not too deep, no checksum offset
        // inside it.
        let depth = if top.bottom {
            1
        } else {
            match mpls::stack_depth(&frame[ETH..]) {
                Ok(d) if d <= MAX_LABELS => d,
                _ => return false,
            }
        };
        if offload.needs_csum && usize::from(offload.csum_start) < ETH + 4 * depth {
            return false;
        }
        let Some(route) = fib.labels.get(top.label) else { return false };
        let LabelAction::Forward(group) = &route.action else { return false };
        let nh = match group.nexthops() {
            [nh] => nh,
            _ => group.select(mpls_flow_hash(&frame[ETH..])),
        };
        let (&[label], Some(addr)) = (nh.labels.as_slice(), nh.via) else { return false };
        let out_port = nh.port;
        let Some(port) = self.ports.get(usize::from(out_port)) else { return false };
        // On the wire after the Ethernet header: the frame as it is (one label for one).
        if len - ETH > port.mtu as usize || (offload.needs_csum && !port.caps.csum) {
            return false;
        }
        let src_mac = port.mac;
        if usize::from(out_port) >= out.tx.len() {
            return false;
        }
        // Unknown, stale or refresh due: the general path resolves (and asks).
        let Some(dst_mac) = self.fresh_neighbor(now, out_port, addr) else { return false };
        // Committed: from here on, what the general path does for this frame.
        let entry = mpls::Repr { label, tc: top.tc, bottom: top.bottom, ttl: top.ttl - 1 };
        frame[ETH..ETH + 4].copy_from_slice(&entry.to_u32().to_be_bytes());
        frame[0..6].copy_from_slice(&dst_mac);
        frame[6..12].copy_from_slice(&src_mac);
        pkt.port = out_port;
        self.counters.label(top.label, len);
        self.counters.event(Event::LabelSwap, 1);
        self.counters.tx_frames[usize::from(out_port)] += 1;
        true
    }

    /// The MAC of a next hop when the neighbour table would answer
    /// `Resolution::Known { probe: false }` (known, not stale), from the adjacency cache
    /// when it can: no hash lookup per frame. Changes nothing in the table; `None` means
    /// "ask the table" ([`NeighborTable::resolve`]).
    #[inline(always)]
    fn fresh_neighbor(&mut self, now: Instant, port: PortId, addr: IpAddr) -> Option<[u8; 6]> {
        if self.point_to_point.get(usize::from(port)) == Some(&true) {
            return Some(POINT_TO_POINT_MAC);
        }
        let generation = self.neighbors.generation();
        let slot = adj_slot(port, addr);
        let adj = &self.adjacency[slot];
        if adj.generation == generation && adj.port == port && adj.addr == addr && now < adj.stale_at {
            return Some(adj.mac);
        }
        let (mac, stale_at) = self.neighbors.fresh(now, port, addr)?;
        self.adjacency[slot] = Adjacency { generation, port, addr, mac, stale_at };
        Some(mac)
    }

    /// A labelled frame: label stack right after the Ethernet header. `along_lsp` marks an
    /// ICMP error this router built and is sending along the LSP (never answered with
    /// another error).
    fn mpls_input(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        mut pkt: Packet,
        pool: &mut PacketPool,
        out: &mut Output,
        along_lsp: bool,
    ) {
        let in_port = pkt.port;
        let depth = match mpls::stack_depth(&pkt.frame()[ETH..]) {
            Ok(d) => d,
            Err(_) => return self.discard(Drop::TruncatedLabelStack, pkt, pool),
        };
        if depth > MAX_LABELS {
            return self.discard(Drop::LabelStackTooDeep, pkt, pool);
        }
        if pkt.offload.needs_csum && usize::from(pkt.offload.csum_start) < ETH + 4 * depth {
            return self.discard(Drop::BadChecksumOffload, pkt, pool);
        }
        // Captured before the first pop changes the stack, and only then: a plain swap
        // never needs it.
        let mut received: Option<ReceivedStack> = None;
        let port_vrf = fib.port_vrf.get(usize::from(in_port)).copied().unwrap_or(vmpls_fib::DEFAULT_VRF);
        // Each pass handles the top entry; pops at this router continue with the next one.
        loop {
            let top = mpls::Repr::from_u32(u32::from_be_bytes(
                pkt.frame()[ETH..ETH + 4].try_into().expect("stack_depth checked 4 bytes"),
            ));
            let ttl = top.ttl;
            match top.label {
                mpls::IPV4_EXPLICIT_NULL | mpls::IPV6_EXPLICIT_NULL => {
                    // RFC 4182: explicit null may appear anywhere in the stack; pop it and
                    // go on with what is under it, in the port's VRF.
                    self.counters.event(Event::LabelPop, 1);
                    let received =
                        *received.get_or_insert_with(|| ReceivedStack::capture(&pkt.frame()[ETH..]));
                    match self.pop_and_continue(pkt, top, TtlModel::Uniform, pool) {
                        Some(p) => pkt = p,
                        None => return,
                    }
                    if top.bottom {
                        return self.ip_after_pop(fib, now, pkt, in_port, port_vrf, received, pool, out);
                    }
                    continue;
                }
                mpls::ROUTER_ALERT => {
                    self.counters.event(Event::PuntRouterAlert, 1);
                    pool.put(pkt);
                    return;
                }
                mpls::OAM_ALERT => {
                    self.counters.event(Event::PuntOamAlert, 1);
                    pool.put(pkt);
                    return;
                }
                mpls::IMPLICIT_NULL => return self.discard(Drop::ImplicitNullOnWire, pkt, pool),
                mpls::ENTROPY_LABEL_INDICATOR if !top.bottom => {
                    // ELI at the top reaches only the egress: pop it with its entropy label.
                    let el_bottom = pkt.frame()[ETH + 4 + 2] & 1 != 0;
                    self.counters.event(Event::LabelPop, 2);
                    let received =
                        *received.get_or_insert_with(|| ReceivedStack::capture(&pkt.frame()[ETH..]));
                    if pkt.shift_head(ETH, -8).is_none() {
                        return self.discard(Drop::TruncatedLabelStack, pkt, pool);
                    }
                    pkt.offload.shift(-8);
                    if el_bottom {
                        return self.ip_after_pop(fib, now, pkt, in_port, port_vrf, received, pool, out);
                    }
                    continue;
                }
                l if l < mpls::FIRST_UNRESERVED => return self.discard(Drop::ReservedLabel, pkt, pool),
                _ => {}
            }
            let Some(route) = fib.labels.get(top.label) else {
                return self.discard(Drop::UnknownLabel, pkt, pool);
            };
            self.counters.label(top.label, pkt.len());
            if ttl <= 1 {
                self.counters.drop(Drop::LabelTtlExpired);
                if !along_lsp {
                    // Transit unless this is the last label: a pop with labels under it
                    // (pop-then-swap, or a service label below) goes on switching too.
                    let forward = matches!(route.action, LabelAction::Forward(_)) || !top.bottom;
                    let received =
                        *received.get_or_insert_with(|| ReceivedStack::capture(&pkt.frame()[ETH..]));
                    // At the egress the source is reached in the VRF the label pops into,
                    // where the packet itself would have gone, not in the core port's.
                    let vrf = match route.action {
                        LabelAction::PopAndLookup { vrf } => vrf,
                        LabelAction::Forward(_) => port_vrf,
                    };
                    self.label_ttl_expired(fib, now, &pkt, received, forward, vrf, pool, out);
                }
                pool.put(pkt);
                return;
            }
            match &route.action {
                LabelAction::PopAndLookup { vrf } => {
                    self.counters.event(Event::LabelPop, 1);
                    let vrf = *vrf;
                    let received =
                        *received.get_or_insert_with(|| ReceivedStack::capture(&pkt.frame()[ETH..]));
                    match self.pop_and_continue(pkt, top, route.ttl_model, pool) {
                        Some(p) => pkt = p,
                        None => return,
                    }
                    if top.bottom {
                        return self.ip_after_pop(fib, now, pkt, in_port, vrf, received, pool, out);
                    }
                }
                LabelAction::Forward(group) => {
                    let nh = group.select(if group.is_multipath() {
                        mpls_flow_hash(&pkt.frame()[ETH..])
                    } else {
                        0
                    });
                    return self.label_forward(fib, now, pkt, top, route.ttl_model, nh, pool, out);
                }
            }
        }
    }

    /// Pops the top entry at a router that goes on processing the frame (egress, explicit
    /// null). Under the uniform model the TTL moves down to the exposed entry or to the IP
    /// header, not yet decremented: the next step decrements it once for this router.
    fn pop_and_continue(
        &mut self,
        mut pkt: Packet,
        top: mpls::Repr,
        model: TtlModel,
        pool: &mut PacketPool,
    ) -> Option<Packet> {
        if pkt.shift_head(ETH, -4).is_none() {
            self.discard(Drop::TruncatedLabelStack, pkt, pool);
            return None;
        }
        pkt.offload.shift(-4);
        if model == TtlModel::Uniform {
            let ttl = top.ttl;
            if top.bottom {
                set_ip_ttl_below(pkt.frame_mut(), ETH, ttl);
            } else if let Some(next) = pkt.frame_mut().get_mut(ETH..ETH + 4) {
                next[3] = next[3].min(ttl);
            }
        }
        Some(pkt)
    }

    /// After the bottom label was popped: the IP packet now follows the Ethernet header.
    #[allow(clippy::too_many_arguments)]
    fn ip_after_pop(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        mut pkt: Packet,
        in_port: PortId,
        vrf: VrfId,
        received: ReceivedStack,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        let ctx = IpContext { in_port, vrf, originated: false, stack: Some(received) };
        match pkt.frame().get(ETH).map(|b| b >> 4) {
            Some(4) => {
                set_ethertype(pkt.frame_mut(), IPV4_ETHERTYPE);
                self.ipv4_input(fib, now, pkt, ctx, pool, out)
            }
            Some(6) => {
                set_ethertype(pkt.frame_mut(), IPV6_ETHERTYPE);
                self.ipv6_input(fib, now, pkt, ctx, pool, out)
            }
            _ => self.discard(Drop::UnknownPayload, pkt, pool),
        }
    }

    /// Swap (or PHP pop) toward a next hop.
    #[allow(clippy::too_many_arguments)]
    fn label_forward(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        mut pkt: Packet,
        top: mpls::Repr,
        model: TtlModel,
        nh: &Nexthop,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        let ttl = top.ttl - 1;
        let labels = nh.labels.as_slice();
        if labels.is_empty() {
            // Penultimate-hop pop.
            self.counters.event(Event::LabelPop, 1);
            if pkt.shift_head(ETH, -4).is_none() {
                return self.discard(Drop::TruncatedLabelStack, pkt, pool);
            }
            pkt.offload.shift(-4);
            if top.bottom {
                let ethertype = match pkt.frame().get(ETH).map(|b| b >> 4) {
                    Some(4) => IPV4_ETHERTYPE,
                    Some(6) => IPV6_ETHERTYPE,
                    _ => return self.discard(Drop::UnknownPayload, pkt, pool),
                };
                if !ip_header_sane(&pkt.frame()[ETH..]) {
                    let reason =
                        if ethertype == IPV4_ETHERTYPE { Drop::BadIpv4Header } else { Drop::BadIpv6Header };
                    return self.discard(reason, pkt, pool);
                }
                set_ethertype(pkt.frame_mut(), ethertype);
                if model == TtlModel::Uniform {
                    set_ip_ttl_below(pkt.frame_mut(), ETH, ttl);
                }
            } else if model == TtlModel::Uniform {
                pkt.frame_mut()[ETH + 3] = ttl;
            }
        } else {
            self.counters.event(Event::LabelSwap, 1);
            let extra = labels.len() - 1;
            if extra > 0 && (pkt.shift_head(ETH, (4 * extra) as isize).is_none()) {
                return self.discard(Drop::LabelStackTooDeep, pkt, pool);
            }
            pkt.offload.shift((4 * extra) as isize);
            let frame = pkt.frame_mut();
            let n = labels.len();
            for (i, &label) in labels.iter().enumerate() {
                let entry = mpls::Repr { label, tc: top.tc, bottom: i == n - 1 && top.bottom, ttl };
                frame[ETH + 4 * i..ETH + 4 * i + 4].copy_from_slice(&entry.to_u32().to_be_bytes());
            }
        }
        let hop =
            Hop { port: nh.port, addr: nh.via.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), labels: &[] };
        if nh.via.is_none() {
            // A label route without a gateway has nowhere to resolve; configs reject it.
            return self.discard(Drop::NeighborUnresolved, pkt, pool);
        }
        self.check_mtu_and_send(fib, now, pkt, hop, None, pool, out);
    }

    /// A label's TTL ran out: ICMP time exceeded with the received stack (RFC 4950).
    /// A transit LSR sends it forward along the LSP (RFC 3032 section 2.3.2): the egress
    /// knows the way back to the source, the P router usually does not.
    #[allow(clippy::too_many_arguments)]
    fn label_ttl_expired(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        pkt: &Packet,
        received: ReceivedStack,
        transit: bool,
        vrf: VrfId,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        let in_port = pkt.port;
        let Some(original) = pkt.frame().get(l3_offset(pkt.frame())..) else { return };
        let Some(mut icmp) = self.build_icmp_error(
            fib,
            now,
            in_port,
            original,
            IcmpKind::TimeExceeded,
            received.words(),
            pool,
        ) else {
            return;
        };
        self.counters.event(Event::IcmpTimeExceeded, 1);
        if transit {
            // Put the received stack back on with fresh TTLs and switch it like the original.
            let n = received.len;
            if icmp.shift_head(ETH, (4 * n) as isize).is_none() {
                return self.discard(Drop::LabelStackTooDeep, icmp, pool);
            }
            let frame = icmp.frame_mut();
            for (i, w) in received.words().iter().enumerate() {
                let mut e = mpls::Repr::from_u32(*w);
                e.ttl = self.config.default_ttl;
                frame[ETH + 4 * i..ETH + 4 * i + 4].copy_from_slice(&e.to_u32().to_be_bytes());
            }
            set_ethertype(frame, MPLS_ETHERTYPE);
            self.counters.event(Event::IcmpAlongLsp, 1);
            self.mpls_input(fib, now, icmp, pool, out, true);
        } else {
            let ctx = IpContext { in_port, vrf, originated: true, stack: None };
            if original.first().map(|b| b >> 4) == Some(6) {
                self.ipv6_input(fib, now, icmp, ctx, pool, out)
            } else {
                self.ipv4_input(fib, now, icmp, ctx, pool, out)
            }
        }
    }

    // ---------------------------------------------------------------- IPv4

    fn ipv4_input(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        mut pkt: Packet,
        ctx: IpContext,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        let (dst, ttl, total_len) = {
            let Ok(ip) = ipv4::Packet::new_checked(&pkt.frame()[ETH..]) else {
                return self.discard(Drop::BadIpv4Header, pkt, pool);
            };
            if !ip.verify_checksum() {
                return self.discard(Drop::BadIpv4Checksum, pkt, pool);
            }
            (ip.dst_addr(), ip.ttl(), usize::from(ip.total_len()))
        };
        // Drop Ethernet padding so pushed labels and lengths stay exact.
        pkt.truncate(ETH + total_len);
        if dst.is_broadcast() || dst.is_multicast() || dst.is_unspecified() {
            // Broadcast and multicast (OSPF, LDP hellos) are the host's: the kernel's, if
            // it received them too. Unspecified is nobody's.
            if !dst.is_unspecified() && self.kernel_has_copy(&ctx) {
                return self.leave_to_kernel(pkt, &ctx, pool);
            }
            return self.discard(Drop::IpMulticast, pkt, pool);
        }
        let Some(vrf) = fib.vrf(ctx.vrf) else { return self.discard(Drop::NoRoute, pkt, pool) };
        let route = vrf.v4.lookup(dst).map(|(_, _, r)| r);
        if matches!(route.map(|r| &r.target), Some(RouteTarget::Local)) {
            return self.ipv4_local(fib, now, pkt, ctx, pool, out);
        }
        self.route_ip(fib, now, pkt, ctx, IpAddr::V4(dst), ttl, route, pool, out);
    }

    /// The routing step both IP versions share, after the local-address check: TTL
    /// expiry, no route, next-hop choice (ECMP), TTL decrement, then output. `ttl` is the
    /// IPv4 TTL or IPv6 hop limit as received.
    #[allow(clippy::too_many_arguments)]
    fn route_ip(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        mut pkt: Packet,
        ctx: IpContext,
        dst: IpAddr,
        ttl: u8,
        route: Option<&PrefixRoute>,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        if !ctx.originated && ttl <= 1 {
            self.counters.drop(Drop::IpTtlExpired);
            let stack = ctx.stack.unwrap_or_default();
            self.icmp_error_reply(fib, now, &pkt, ctx, IcmpKind::TimeExceeded, stack.words(), pool, out);
            pool.put(pkt);
            return;
        }
        let Some(route) = route else {
            self.counters.drop(Drop::NoRoute);
            if !ctx.originated {
                self.icmp_error_reply(fib, now, &pkt, ctx, IcmpKind::NetUnreachable, &[], pool, out);
            }
            pool.put(pkt);
            return;
        };
        let hop = match &route.target {
            RouteTarget::Local => unreachable!("the callers deliver local routes"),
            RouteTarget::Blackhole => return self.discard(Drop::Blackhole, pkt, pool),
            RouteTarget::Connected { port } => Hop { port: *port, addr: dst, labels: &[] },
            RouteTarget::Forward(group) => {
                let nh =
                    group.select(if group.is_multipath() { ip_flow_hash(&pkt.frame()[ETH..]) } else { 0 });
                Hop { port: nh.port, addr: nh.via.unwrap_or(dst), labels: &nh.labels }
            }
        };
        let mut ttl_out = ttl;
        if !ctx.originated {
            let ip = &mut pkt.frame_mut()[ETH..];
            ttl_out = match dst {
                IpAddr::V4(_) => ipv4::Packet::new_unchecked(ip).decrement_ttl(),
                IpAddr::V6(_) => ipv6::Packet::new_unchecked(ip).decrement_hop_limit(),
            };
        }
        self.ip_output(fib, now, pkt, ctx, hop, ttl_out, route.ttl_model, pool, out);
    }

    fn ipv4_local(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        pkt: Packet,
        ctx: IpContext,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        // Only what came in from the wire: a packet built here (an ICMP error about one
        // from our own address) was never the kernel's, and goes the way it always has.
        if self.config.host_stack == HostStack::Kernel && !ctx.originated {
            return self.leave_to_kernel(pkt, &ctx, pool);
        }
        let ip = ipv4::Packet::new_unchecked(&pkt.frame()[ETH..]);
        let (src, dst, proto) = (ip.src_addr(), ip.dst_addr(), ip.protocol());
        let fragmented = ip.more_frags() || ip.frag_offset() != 0;
        let payload = ip.payload();
        if proto == ipv4::protocol::ICMP && !fragmented {
            let Ok(icmp) = icmpv4::Packet::new_checked(payload) else {
                return self.discard(Drop::BadIcmp, pkt, pool);
            };
            if icmp.msg_type() == icmpv4::msg_type::ECHO_REQUEST {
                if !icmp.verify_checksum() {
                    return self.discard(Drop::BadIcmp, pkt, pool);
                }
                let Some(mut reply) = pool.get() else { return self.discard(Drop::NoBuffer, pkt, pool) };
                let hdr = ipv4::Repr {
                    src_addr: dst,
                    dst_addr: src,
                    protocol: ipv4::protocol::ICMP,
                    payload_len: 0,
                    ttl: 64,
                    dscp_ecn: 0,
                    ident: self.next_ident(),
                    dont_frag: false,
                };
                let built = {
                    let area = reply.receive_area();
                    match icmpv4::emit_echo_reply(payload, &mut area[ETH + 20..]) {
                        Ok(n) => {
                            let h = ipv4::Repr { payload_len: n, ..hdr };
                            h.emit(&mut ipv4::Packet::new_unchecked(&mut area[ETH..ETH + 20]));
                            Some(ETH + 20 + n)
                        }
                        Err(_) => None,
                    }
                };
                pool.put(pkt);
                let Some(len) = built else { return self.discard(Drop::BadIcmp, reply, pool) };
                reply.set_received(len);
                set_ethertype(reply.frame_mut(), IPV4_ETHERTYPE);
                reply.port = ctx.in_port;
                self.counters.event(Event::EchoReply, 1);
                let ctx = IpContext { originated: true, stack: None, ..ctx };
                return self.ipv4_input(fib, now, reply, ctx, pool, out);
            }
            return self.discard(Drop::LocalUnhandled, pkt, pool);
        }
        if proto == ipv4::protocol::UDP && !ctx.originated {
            // traceroute's UDP probes to one of our addresses end here.
            self.counters.drop(Drop::LocalUnhandled);
            self.icmp_error_reply(fib, now, &pkt, ctx, IcmpKind::PortUnreachable, &[], pool, out);
            pool.put(pkt);
            return;
        }
        self.discard(Drop::LocalUnhandled, pkt, pool)
    }

    // ---------------------------------------------------------------- IPv6

    fn ipv6_input(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        mut pkt: Packet,
        ctx: IpContext,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        let (dst, hop_limit, next_header, payload_len) = {
            let Ok(ip) = ipv6::Packet::new_checked(&pkt.frame()[ETH..]) else {
                return self.discard(Drop::BadIpv6Header, pkt, pool);
            };
            (ip.dst_addr(), ip.hop_limit(), ip.next_header(), usize::from(ip.payload_len()))
        };
        pkt.truncate(ETH + ipv6::HEADER_LEN + payload_len);
        if next_header == ipv4::protocol::IPV6_ICMP
            && let Some(&t) = pkt.frame().get(ETH + ipv6::HEADER_LEN)
            && (t == icmpv6::msg_type::NEIGHBOR_SOLICIT || t == icmpv6::msg_type::NEIGHBOR_ADVERT)
            && !ctx.originated
        {
            return self.nd_input(fib, now, pkt, ctx, pool, out);
        }
        if dst.is_multicast() || dst.is_unspecified() {
            if dst.is_multicast() && self.kernel_has_copy(&ctx) {
                return self.leave_to_kernel(pkt, &ctx, pool);
            }
            return self.discard(Drop::IpMulticast, pkt, pool);
        }
        let Some(vrf) = fib.vrf(ctx.vrf) else { return self.discard(Drop::NoRoute, pkt, pool) };
        let route = vrf.v6.lookup(dst).map(|(_, _, r)| r);
        if matches!(route.map(|r| &r.target), Some(RouteTarget::Local)) {
            return self.ipv6_local(fib, now, pkt, ctx, pool, out);
        }
        if is_link_local(dst) {
            // Never routed; sent to our MAC, it is for the kernel's link-local address.
            if self.kernel_has_copy(&ctx) {
                return self.leave_to_kernel(pkt, &ctx, pool);
            }
            return self.discard(Drop::NoRoute, pkt, pool);
        }
        self.route_ip(fib, now, pkt, ctx, IpAddr::V6(dst), hop_limit, route, pool, out);
    }

    fn ipv6_local(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        pkt: Packet,
        ctx: IpContext,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        if self.config.host_stack == HostStack::Kernel && !ctx.originated {
            return self.leave_to_kernel(pkt, &ctx, pool);
        }
        let ip = ipv6::Packet::new_unchecked(&pkt.frame()[ETH..]);
        let (src, dst, next) = (ip.src_addr(), ip.dst_addr(), ip.next_header());
        let payload = ip.payload();
        if next == ipv4::protocol::IPV6_ICMP {
            let Ok(icmp) = icmpv6::Packet::new_checked(payload) else {
                return self.discard(Drop::BadIcmp, pkt, pool);
            };
            if icmp.msg_type() == icmpv6::msg_type::ECHO_REQUEST {
                if !icmp.verify_checksum(src, dst) {
                    return self.discard(Drop::BadIcmp, pkt, pool);
                }
                let Some(mut reply) = pool.get() else { return self.discard(Drop::NoBuffer, pkt, pool) };
                let built = {
                    let area = reply.receive_area();
                    match icmpv6::emit_echo_reply(payload, &mut area[ETH + 40..], dst, src) {
                        Ok(n) => {
                            ipv6_repr(dst, src, n, 64)
                                .emit(&mut ipv6::Packet::new_unchecked(&mut area[ETH..ETH + 40]));
                            Some(ETH + 40 + n)
                        }
                        Err(_) => None,
                    }
                };
                pool.put(pkt);
                let Some(len) = built else { return self.discard(Drop::BadIcmp, reply, pool) };
                reply.set_received(len);
                set_ethertype(reply.frame_mut(), IPV6_ETHERTYPE);
                reply.port = ctx.in_port;
                self.counters.event(Event::EchoReply, 1);
                let ctx = IpContext { originated: true, stack: None, ..ctx };
                return self.ipv6_input(fib, now, reply, ctx, pool, out);
            }
            return self.discard(Drop::LocalUnhandled, pkt, pool);
        }
        if next == ipv4::protocol::UDP && !ctx.originated {
            self.counters.drop(Drop::LocalUnhandled);
            self.icmp_error_reply(fib, now, &pkt, ctx, IcmpKind::PortUnreachable, &[], pool, out);
            pool.put(pkt);
            return;
        }
        self.discard(Drop::LocalUnhandled, pkt, pool)
    }

    // ---------------------------------------------------------------- IP output

    /// Pushes the route's labels (if any) and sends toward the next hop, after the MTU
    /// check. `ttl` is the IP TTL after this router's decrement.
    #[allow(clippy::too_many_arguments)]
    fn ip_output(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        pkt: Packet,
        ctx: IpContext,
        hop: Hop<'_>,
        ttl: u8,
        model: TtlModel,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        if hop.labels.is_empty() {
            self.counters.event(Event::IpForward, 1);
        } else {
            self.counters.event(Event::LabelPush, 1);
        }
        let label_ttl = match model {
            TtlModel::Uniform => ttl,
            TtlModel::Pipe => self.config.default_ttl,
        };
        self.check_mtu_and_send(fib, now, pkt, hop, Some((ctx, label_ttl)), pool, out);
    }

    /// The MTU check before the frame is committed to a port. `ip` is set for an IP packet
    /// that gets `hop.labels` pushed here (with the TTL for them); for a frame that already
    /// carries its labels it is `None`.
    #[allow(clippy::too_many_arguments)]
    fn check_mtu_and_send(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        mut pkt: Packet,
        hop: Hop<'_>,
        ip: Option<(IpContext, u8)>,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        let Some(port) = self.ports.get(usize::from(hop.port)) else {
            return self.discard(Drop::NoSuchPort, pkt, pool);
        };
        let mtu = port.mtu as usize;
        let push = 4 * hop.labels.len();
        let l3 = l3_offset(pkt.frame());
        // What each frame on the wire will carry after the Ethernet header.
        let mut on_wire = if pkt.offload.is_gso() {
            match gso::segment_l3_len(&pkt, l3) {
                Ok(n) => n + (l3 - ETH) + push,
                Err(_) => return self.discard(Drop::BadGso, pkt, pool),
            }
        } else {
            pkt.len() - ETH + push
        };
        // A TCP super-frame that crossed the core whole as a jumbo frame, with its GSO
        // marking lost (the kernel refuses labelled GSO frames through AF_PACKET): cut it
        // to this port's MTU again (by the port's TSO or in software at output). Popped
        // here, or by the penultimate hop (PHP): then it arrives as plain IP, over a link
        // larger than any Ethernet's, where only super-frames are that big. A host's
        // oversized packet on an ordinary link still gets "too big".
        let jumbo_in = |ctx: &IpContext| {
            self.ports.get(usize::from(ctx.in_port)).is_some_and(|p| p.mtu > MAX_ETHERNET_MTU)
        };
        // A transit LSR re-cuts too: a labelled jumbo frame from a large link (a 64 KiB
        // veth) toward a small one (a tunnel, a VXLAN link) is a super-frame whose GSO
        // marking the previous router had to drop.
        let recut = match ip {
            Some((ctx, _)) => ctx.stack.is_some() || (!ctx.originated && jumbo_in(&ctx)),
            None => self.ports.get(usize::from(pkt.port)).is_some_and(|p| p.mtu > MAX_ETHERNET_MTU),
        };
        // A super-frame this router merged from such jumbo frames has segments of
        // their size: cut smaller too.
        let stack = l3 - ETH;
        if on_wire > mtu && recut && gso::rebuild(&mut pkt, l3, mtu.saturating_sub(push + stack)).is_ok() {
            self.counters.event(Event::GsoRebuilt, 1);
            on_wire = gso::segment_l3_len(&pkt, l3).map_or(on_wire, |n| n + stack + push);
        }
        if on_wire > mtu {
            let room = mtu.saturating_sub(push + (l3 - ETH));
            let ipv4 = pkt.frame().get(l3).map(|b| b >> 4) == Some(4);
            let df = !ipv4 || ipv4::Packet::new_checked(&pkt.frame()[l3..]).map_or(true, |p| p.dont_frag());
            if let (false, Some((_, ttl))) = (df || pkt.offload.is_gso(), ip) {
                // IPv4 without DF: fragment before the labels go on (at the ingress PE).
                let mut frags = std::mem::take(&mut self.scratch);
                let r = fragment::fragment_ipv4(&mut pkt, l3, room, pool, &mut frags);
                pool.put(pkt);
                match r {
                    Ok(_) => {
                        self.counters.event(Event::Fragmented, 1);
                        for f in frags.drain(..) {
                            self.push_and_send(fib, now, f, hop, ttl, pool, out);
                        }
                    }
                    Err(_) => {
                        self.counters.drop(Drop::FragmentFailed);
                        for f in frags.drain(..) {
                            pool.put(f);
                        }
                    }
                }
                self.scratch = frags;
                return;
            }
            self.counters.drop(Drop::MtuExceeded);
            let kind = IcmpKind::TooBig { mtu: room as u32 };
            match ip {
                Some((ctx, _)) if !ctx.originated => {
                    self.icmp_error_reply_at(fib, now, &pkt, l3, ctx, kind, &[], pool, out)
                }
                Some(_) => {}
                // A transit LSR: like time exceeded, forward along the LSP.
                None => self.too_big_along_lsp(fib, now, &pkt, l3, hop, kind, pool, out),
            }
            pool.put(pkt);
            return;
        }
        match ip {
            Some((_, ttl)) => self.push_and_send(fib, now, pkt, hop, ttl, pool, out),
            None => self.resolve_and_send(fib, now, pkt, hop, pool, out),
        }
    }

    /// "Fragmentation needed" / "packet too big" at a transit LSR, which usually has no
    /// route back to the source: the error goes forward along the LSP (RFC 3032 section
    /// 2.3.2), under the labels `pkt` was leaving with (fresh TTLs), to the same next hop;
    /// the egress routes it back. `l3` is the offset of the IP packet in `pkt`.
    #[allow(clippy::too_many_arguments)]
    fn too_big_along_lsp(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        pkt: &Packet,
        l3: usize,
        hop: Hop<'_>,
        kind: IcmpKind,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        let Some(original) = pkt.frame().get(l3..) else { return };
        let Some(mut icmp) = self.build_icmp_error(fib, now, pkt.port, original, kind, &[], pool) else {
            return;
        };
        self.counters.event(Event::IcmpTooBig, 1);
        let stack = &pkt.frame()[ETH..l3];
        let n = stack.len();
        if n > 0 {
            if icmp.shift_head(ETH, n as isize).is_none() {
                return self.discard(Drop::LabelStackTooDeep, icmp, pool);
            }
            let ttl = self.config.default_ttl;
            let frame = icmp.frame_mut();
            frame[ETH..ETH + n].copy_from_slice(stack);
            for e in frame[ETH..ETH + n].chunks_exact_mut(4) {
                e[3] = ttl;
            }
            set_ethertype(frame, MPLS_ETHERTYPE);
        }
        self.counters.event(Event::IcmpAlongLsp, 1);
        self.resolve_and_send(fib, now, icmp, hop, pool, out);
    }

    /// Pushes `hop.labels` on an IP packet (right after the Ethernet header) and sends it.
    #[allow(clippy::too_many_arguments)]
    fn push_and_send(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        mut pkt: Packet,
        hop: Hop<'_>,
        ttl: u8,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        let n = hop.labels.len();
        if n > 0 {
            let tc = pkt.frame().get(ETH..ETH + 2).map(|b| ip_dscp(b) >> 3).unwrap_or(0);
            if pkt.shift_head(ETH, (4 * n) as isize).is_none() {
                return self.discard(Drop::LabelStackTooDeep, pkt, pool);
            }
            pkt.offload.shift((4 * n) as isize);
            let frame = pkt.frame_mut();
            for (i, &label) in hop.labels.iter().enumerate() {
                let e = mpls::Repr { label, tc, bottom: i == n - 1, ttl };
                frame[ETH + 4 * i..ETH + 4 * i + 4].copy_from_slice(&e.to_u32().to_be_bytes());
            }
            set_ethertype(frame, MPLS_ETHERTYPE);
        }
        self.resolve_and_send(fib, now, pkt, hop, pool, out);
    }

    /// Finds the next hop's MAC (or holds the frame while asking for it), then outputs.
    fn resolve_and_send(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        mut pkt: Packet,
        hop: Hop<'_>,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        pkt.port = hop.port;
        if let Some(mac) = self.fresh_neighbor(now, hop.port, hop.addr) {
            return self.emit(mac, pkt, pool, out);
        }
        match self.neighbors.resolve(now, hop.port, hop.addr) {
            Resolution::Known { mac, probe } => {
                if probe {
                    self.send_solicit(fib, now, hop.port, hop.addr, pool, out);
                }
                self.emit(mac, pkt, pool, out);
            }
            Resolution::Unknown { probe } => {
                if let Err(pkt) = self.neighbors.hold(hop.port, hop.addr, pkt) {
                    self.discard(Drop::NeighborQueueFull, pkt, pool);
                }
                if probe {
                    self.send_solicit(fib, now, hop.port, hop.addr, pool, out);
                }
            }
        }
    }

    /// The output stage: Ethernet addresses, then the least work the port allows — pass
    /// a super-frame whole, complete a partial checksum, or segment in software.
    fn emit(&mut self, dst_mac: [u8; 6], mut pkt: Packet, pool: &mut PacketPool, out: &mut Output) {
        let port_id = pkt.port;
        let Some(port) = self.ports.get(usize::from(port_id)) else {
            return self.discard(Drop::NoSuchPort, pkt, pool);
        };
        let caps = port.caps;
        let mtu = port.mtu as usize;
        {
            let f = pkt.frame_mut();
            f[0..6].copy_from_slice(&dst_mac);
            f[6..12].copy_from_slice(&port.mac);
        }
        let ethertype = u16::from_be_bytes([pkt.frame()[12], pkt.frame()[13]]);
        let labelled = ethertype == MPLS_ETHERTYPE;
        let tx = &mut out.tx[usize::from(port_id)];
        if pkt.offload.is_gso() {
            let whole = if labelled {
                caps.mpls_gso
            } else {
                match pkt.offload.gso_type {
                    virtio_net::GsoType::TcpV4 => caps.tso4,
                    virtio_net::GsoType::TcpV6 => caps.tso6,
                    virtio_net::GsoType::UdpL4 => caps.uso,
                    _ => false,
                }
            };
            if whole {
                self.counters.event(Event::GsoPassed, 1);
                self.counters.tx_frames[usize::from(port_id)] += 1;
                tx.push(pkt);
                return;
            }
            if pkt.len() - ETH <= mtu && (caps.csum || !pkt.offload.needs_csum) {
                // The whole super-frame fits the link (a 64 KiB veth between vmpls
                // routers): send it as one jumbo frame without GSO marking, which the
                // kernel accepts where it refuses labelled GSO (research/kernel-io.md,
                // alternative A). The partial checksum travels with it; the egress PE
                // rebuilds the GSO metadata for its customer port.
                pkt.offload.gso_type = virtio_net::GsoType::None;
                pkt.offload.gso_size = 0;
                pkt.offload.gso_ecn = false;
                self.counters.event(Event::GsoJumbo, 1);
                self.counters.tx_frames[usize::from(port_id)] += 1;
                tx.push(pkt);
                return;
            }
            let l3 = l3_offset(pkt.frame());
            let before = tx.len();
            let r = gso::segment(&pkt, l3, pool, tx);
            let made = tx.len() - before;
            pool.put(pkt);
            self.counters.tx_frames[usize::from(port_id)] += made as u64;
            match r {
                Ok(_) => {
                    self.counters.event(Event::GsoSegmented, 1);
                    self.counters.event(Event::GsoSegments, made as u64);
                }
                Err(gso::GsoError::NoBuffer) => self.counters.drop(Drop::NoBuffer),
                Err(_) => self.counters.drop(Drop::BadGso),
            }
            return;
        }
        if pkt.len() - ETH > mtu {
            return self.discard(Drop::OversizeAtOutput, pkt, pool);
        }
        if pkt.offload.needs_csum && !caps.csum {
            if gso::complete_checksum(&mut pkt).is_err() {
                return self.discard(Drop::BadChecksumOffload, pkt, pool);
            }
            self.counters.event(Event::ChecksumCompleted, 1);
        }
        self.counters.tx_frames[usize::from(port_id)] += 1;
        out.tx[usize::from(port_id)].push(pkt);
    }

    // ---------------------------------------------------------------- ICMP errors

    fn next_ident(&mut self) -> u16 {
        self.ip_ident = self.ip_ident.wrapping_add(1);
        self.ip_ident
    }

    /// Answers the packet in `pkt` (IP header right after Ethernet) with an ICMP error
    /// routed back to its source.
    #[allow(clippy::too_many_arguments)]
    fn icmp_error_reply(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        pkt: &Packet,
        ctx: IpContext,
        kind: IcmpKind,
        stack: &[u32],
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        self.icmp_error_reply_at(fib, now, pkt, ETH, ctx, kind, stack, pool, out)
    }

    #[allow(clippy::too_many_arguments)]
    fn icmp_error_reply_at(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        pkt: &Packet,
        l3: usize,
        ctx: IpContext,
        kind: IcmpKind,
        stack: &[u32],
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        let Some(original) = pkt.frame().get(l3..) else { return };
        let Some(icmp) = self.build_icmp_error(fib, now, ctx.in_port, original, kind, stack, pool) else {
            return;
        };
        match kind {
            IcmpKind::TimeExceeded => self.counters.event(Event::IcmpTimeExceeded, 1),
            IcmpKind::TooBig { .. } => self.counters.event(Event::IcmpTooBig, 1),
            _ => self.counters.event(Event::IcmpUnreachable, 1),
        }
        let ctx = IpContext { originated: true, stack: None, ..ctx };
        if original.first().map(|b| b >> 4) == Some(6) {
            self.ipv6_input(fib, now, icmp, ctx, pool, out)
        } else {
            self.ipv4_input(fib, now, icmp, ctx, pool, out)
        }
    }

    /// Builds Ethernet (addresses filled at output) + IP + ICMP error about `original`
    /// (an IPv4 or IPv6 packet from its header on), from the router's address. `None` when
    /// no error may be sent: about an ICMP error, a non-first fragment, a multicast or
    /// unspecified source, over the rate limit, or with no source address configured.
    #[allow(clippy::too_many_arguments)]
    fn build_icmp_error(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        in_port: PortId,
        original: &[u8],
        kind: IcmpKind,
        stack: &[u32],
        pool: &mut PacketPool,
    ) -> Option<Packet> {
        let v6 = match original.first().map(|b| b >> 4) {
            Some(4) => false,
            Some(6) => true,
            _ => return None,
        };
        if !may_answer_with_error(original) {
            return None;
        }
        if !self.icmp_limit.take(now) {
            self.counters.drop(Drop::IcmpSuppressed);
            return None;
        }
        let Some(mut pkt) = pool.get() else {
            self.counters.drop(Drop::NoBuffer);
            return None;
        };
        pkt.port = in_port;
        let ttl = self.config.default_ttl;
        let len = if v6 {
            let orig = ipv6::Packet::new_unchecked(original);
            let Some(src) = fib.source_v6_for(in_port) else {
                self.counters.drop(Drop::IcmpSuppressed);
                pool.put(pkt);
                return None;
            };
            let dst = orig.src_addr();
            let kind6 = match kind {
                IcmpKind::TimeExceeded => icmpv6::ErrorKind6::TimeExceeded,
                IcmpKind::TooBig { mtu } => icmpv6::ErrorKind6::PacketTooBig { mtu },
                IcmpKind::NetUnreachable => icmpv6::ErrorKind6::Unreachable { code: 0 },
                IcmpKind::PortUnreachable => icmpv6::ErrorKind6::Unreachable { code: 4 },
            };
            let area = pkt.receive_area();
            let Ok(n) = icmpv6::emit_error(&mut area[ETH + 40..ETH + 1280], kind6, original, stack, src, dst)
            else {
                pool.put(pkt);
                return None;
            };
            ipv6_repr(src, dst, n, ttl).emit(&mut ipv6::Packet::new_unchecked(&mut area[ETH..ETH + 40]));
            ETH + 40 + n
        } else {
            let orig = ipv4::Packet::new_unchecked(original);
            let Some(src) = fib.source_v4_for(in_port) else {
                self.counters.drop(Drop::IcmpSuppressed);
                pool.put(pkt);
                return None;
            };
            let dst = orig.src_addr();
            let kind4 = match kind {
                IcmpKind::TimeExceeded => icmpv4::ErrorKind::TimeExceeded,
                IcmpKind::TooBig { mtu } => icmpv4::ErrorKind::FragNeeded { mtu: mtu.min(0xffff) as u16 },
                IcmpKind::NetUnreachable => icmpv4::ErrorKind::Unreachable { code: 0 },
                IcmpKind::PortUnreachable => icmpv4::ErrorKind::Unreachable { code: 3 },
            };
            let ident = self.next_ident();
            let area = pkt.receive_area();
            let Ok(n) = icmpv4::emit_error(&mut area[ETH + 20..ETH + 576], kind4, original, stack) else {
                pool.put(pkt);
                return None;
            };
            let h = ipv4::Repr {
                src_addr: src,
                dst_addr: dst,
                protocol: ipv4::protocol::ICMP,
                payload_len: n,
                ttl,
                dscp_ecn: 0xc0, // CS6, network control, as routers mark their ICMP
                ident,
                dont_frag: false,
            };
            h.emit(&mut ipv4::Packet::new_unchecked(&mut area[ETH..ETH + 20]));
            ETH + 20 + n
        };
        pkt.set_received(len);
        set_ethertype(pkt.frame_mut(), if v6 { IPV6_ETHERTYPE } else { IPV4_ETHERTYPE });
        Some(pkt)
    }

    // ---------------------------------------------------------------- ARP and ND

    fn arp_input(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        pkt: Packet,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        let in_port = pkt.port;
        let Ok(repr) = arp::Packet::new_checked(&pkt.frame()[ETH..]).and_then(|p| arp::Repr::parse(&p))
        else {
            return self.discard(Drop::BadArp, pkt, pool);
        };
        pool.put(pkt);
        let ours = fib
            .port_addrs
            .get(usize::from(in_port))
            .is_some_and(|a| a.v4.iter().any(|(addr, _)| *addr == repr.target_protocol_addr));
        let request_for_us = ours && repr.operation == arp::Operation::Request;
        // The kernel answers for the addresses it owns; what it tells the sender is its
        // business, learning from the request is still ours.
        let kernel_answers = request_for_us && self.config.host_stack == HostStack::Kernel;
        if kernel_answers {
            self.counters.event(Event::LeftToKernel, 1);
        }
        let sender = IpAddr::V4(repr.sender_protocol_addr);
        if repr.sender_protocol_addr.is_unspecified() {
            return; // an address-conflict probe: nothing to learn
        }
        // RFC 826's merge rule: a known sender is updated; a new one is added only from a
        // request for one of our addresses (as Linux without arp_accept: an unsolicited
        // reply never adds one), and only when it is on the port's subnet, the only
        // addresses a route can name as next hop. Floods of replies, or of requests from
        // elsewhere, cannot fill the table.
        let create = request_for_us && on_port_subnet(fib, in_port, sender);
        let released = self.neighbors.learn(now, in_port, sender, repr.sender_hardware_addr, create);
        self.release(released, repr.sender_hardware_addr, pool, out);
        if request_for_us && !kernel_answers {
            let Some(port) = self.ports.get(usize::from(in_port)) else { return };
            let mac = port.mac;
            let reply = arp::Repr {
                operation: arp::Operation::Reply,
                sender_hardware_addr: mac,
                sender_protocol_addr: repr.target_protocol_addr,
                target_hardware_addr: repr.sender_hardware_addr,
                target_protocol_addr: repr.sender_protocol_addr,
            };
            if let Some(p) = self.build_arp(in_port, repr.sender_hardware_addr, &reply, pool) {
                self.counters.event(Event::ArpReply, 1);
                self.counters.tx_frames[usize::from(in_port)] += 1;
                out.tx[usize::from(in_port)].push(p);
            }
        }
    }

    fn build_arp(
        &mut self,
        port: PortId,
        dst: [u8; 6],
        repr: &arp::Repr,
        pool: &mut PacketPool,
    ) -> Option<Packet> {
        let mac = self.ports.get(usize::from(port))?.mac;
        let Some(mut p) = pool.get() else {
            self.counters.drop(Drop::NoBuffer);
            return None;
        };
        let area = p.receive_area();
        write_ethernet(area, dst, mac, ARP_ETHERTYPE);
        repr.emit(&mut arp::Packet::new_unchecked(&mut area[ETH..ETH + 28]));
        // Pad to the Ethernet minimum, as NICs do.
        area[ETH + 28..60].fill(0);
        p.set_received(60);
        p.port = port;
        Some(p)
    }

    fn release(&mut self, frames: Vec<Packet>, mac: [u8; 6], pool: &mut PacketPool, out: &mut Output) {
        for f in frames {
            self.emit(mac, f, pool, out);
        }
    }

    /// Asks for `addr`'s MAC on `port`: ARP request or neighbour solicitation, if the
    /// request rate limit allows one now (else counted, and the neighbour table's next
    /// retransmission tries again).
    fn send_solicit(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        port: PortId,
        addr: IpAddr,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        let Some(info) = self.ports.get(usize::from(port)) else { return };
        let mac = info.mac;
        let has_source = match addr {
            IpAddr::V4(_) => fib.port_v4(port).is_some(),
            IpAddr::V6(_) => fib.port_v6(port).is_some(),
        };
        if !has_source {
            return;
        }
        if !self.request_limit.take(now) {
            return self.counters.drop(Drop::NeighborRequestSuppressed);
        }
        match addr {
            IpAddr::V4(target) => {
                let Some(src) = fib.port_v4(port) else { return };
                let req = arp::Repr {
                    operation: arp::Operation::Request,
                    sender_hardware_addr: mac,
                    sender_protocol_addr: src,
                    target_hardware_addr: [0; 6],
                    target_protocol_addr: target,
                };
                if let Some(p) = self.build_arp(port, [0xff; 6], &req, pool) {
                    self.counters.event(Event::ArpRequest, 1);
                    self.counters.tx_frames[usize::from(port)] += 1;
                    out.tx[usize::from(port)].push(p);
                }
            }
            IpAddr::V6(target) => {
                let Some(src) = fib.port_v6(port) else { return };
                let dst = icmpv6::solicited_node_multicast(target);
                let Some(mut p) = pool.get() else {
                    self.counters.drop(Drop::NoBuffer);
                    return;
                };
                let area = p.receive_area();
                write_ethernet(area, icmpv6::multicast_mac(dst), mac, IPV6_ETHERTYPE);
                let Ok(n) = icmpv6::emit_neighbor_solicit(&mut area[ETH + 40..], src, dst, target, mac)
                else {
                    return pool.put(p);
                };
                ipv6_repr(src, dst, n, 255).emit(&mut ipv6::Packet::new_unchecked(&mut area[ETH..ETH + 40]));
                p.set_received(ETH + 40 + n);
                p.port = port;
                self.counters.event(Event::NdSolicit, 1);
                self.counters.tx_frames[usize::from(port)] += 1;
                out.tx[usize::from(port)].push(p);
            }
        }
    }

    fn nd_input(
        &mut self,
        fib: &Arc<Fib>,
        now: Instant,
        pkt: Packet,
        ctx: IpContext,
        pool: &mut PacketPool,
        out: &mut Output,
    ) {
        let in_port = ctx.in_port;
        let ip = ipv6::Packet::new_unchecked(&pkt.frame()[ETH..]);
        let (src, dst, hop_limit) = (ip.src_addr(), ip.dst_addr(), ip.hop_limit());
        let Ok(icmp) = icmpv6::Packet::new_checked(ip.payload()) else {
            return self.discard(Drop::BadIcmp, pkt, pool);
        };
        // RFC 4861 section 7.1: hop limit 255 proves the sender is on the link.
        if hop_limit != 255 || !icmp.verify_checksum(src, dst) {
            return self.discard(Drop::BadIcmp, pkt, pool);
        }
        let Ok(nd) = icmpv6::NdRepr::parse(&icmp) else {
            return self.discard(Drop::BadIcmp, pkt, pool);
        };
        pool.put(pkt);
        let port_has = |a: Ipv6Addr| {
            fib.port_addrs.get(usize::from(in_port)).is_some_and(|p| p.v6.iter().any(|(x, _)| *x == a))
        };
        match nd {
            icmpv6::NdRepr::NeighborSolicit { target, source_mac } => {
                if !port_has(target) {
                    return;
                }
                let Some(mac) = self.ports.get(usize::from(in_port)).map(|p| p.mac) else { return };
                // From the unspecified address (DAD): learn nothing.
                if !src.is_unspecified()
                    && let Some(smac) = source_mac
                {
                    // RFC 4861 section 7.2.3 creates an entry for the sender; here only
                    // for one on the port's subnet (the only possible next hops), so a
                    // flood from elsewhere cannot fill the table. The reply (when this
                    // router answers) goes out either way.
                    let create = on_port_subnet(fib, in_port, IpAddr::V6(src));
                    let released = self.neighbors.learn(now, in_port, IpAddr::V6(src), smac, create);
                    self.release(released, smac, pool, out);
                }
                if self.config.host_stack == HostStack::Kernel {
                    // The kernel advertises the addresses it owns (learning stays ours).
                    if ctx.stack.is_some() {
                        return self.counters.drop(Drop::LocalAfterPop);
                    }
                    return self.counters.event(Event::LeftToKernel, 1);
                }
                // DAD: answer to all-nodes.
                let (reply_dst, reply_mac) = if src.is_unspecified() {
                    let all = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
                    (all, icmpv6::multicast_mac(all))
                } else {
                    let Some(smac) = source_mac else { return };
                    (src, smac)
                };
                let Some(mut p) = pool.get() else {
                    return self.counters.drop(Drop::NoBuffer);
                };
                let area = p.receive_area();
                write_ethernet(area, reply_mac, mac, IPV6_ETHERTYPE);
                let solicited = !src.is_unspecified();
                let Ok(n) = icmpv6::emit_neighbor_advert(
                    &mut area[ETH + 40..],
                    target,
                    reply_dst,
                    target,
                    mac,
                    true,
                    solicited,
                    true,
                ) else {
                    return pool.put(p);
                };
                ipv6_repr(target, reply_dst, n, 255)
                    .emit(&mut ipv6::Packet::new_unchecked(&mut area[ETH..ETH + 40]));
                p.set_received(ETH + 40 + n);
                p.port = in_port;
                self.counters.event(Event::NdAdvert, 1);
                self.counters.tx_frames[usize::from(in_port)] += 1;
                out.tx[usize::from(in_port)].push(p);
            }
            icmpv6::NdRepr::NeighborAdvert { target, target_mac, override_, .. } => {
                let Some(mac) = target_mac else { return };
                // RFC 4861 section 7.2.5: without the override flag, an advertisement
                // does not replace the address of a reachable entry.
                if !override_
                    && self.neighbors.fresh(now, in_port, IpAddr::V6(target)).is_some_and(|(m, _)| m != mac)
                {
                    return;
                }
                let released = self.neighbors.learn(now, in_port, IpAddr::V6(target), mac, false);
                self.release(released, mac, pool, out);
            }
        }
    }
}

/// Which ICMP error to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IcmpKind {
    TimeExceeded,
    TooBig { mtu: u32 },
    NetUnreachable,
    PortUnreachable,
}

/// RFC 1812 section 4.3.2.7 / RFC 4443 section 2.4(e): no error about an ICMP error (for
/// IPv6 also one behind extension headers), a non-first fragment, a packet whose IPv6
/// extension headers cannot be followed, or a packet from a multicast, broadcast or
/// unspecified source.
fn may_answer_with_error(original: &[u8]) -> bool {
    match original.first().map(|b| b >> 4) {
        Some(4) => {
            let Ok(ip) = ipv4::Packet::new_checked(original) else { return false };
            let src = ip.src_addr();
            if src.is_unspecified() || src.is_broadcast() || src.is_multicast() || ip.frag_offset() != 0 {
                return false;
            }
            if ip.protocol() == ipv4::protocol::ICMP {
                let t = ip.payload().first().copied().unwrap_or(255);
                return matches!(t, icmpv4::msg_type::ECHO_REQUEST | icmpv4::msg_type::ECHO_REPLY);
            }
            true
        }
        Some(6) => {
            let Ok(ip) = ipv6::Packet::new_checked(original) else { return false };
            let src = ip.src_addr();
            if src.is_unspecified() || src.is_multicast() {
                return false;
            }
            // The upper layer may sit behind extension headers: walk them, and stay
            // silent when the chain cannot be followed (cut short, too long).
            match ipv6_upper_layer(ip.next_header(), ip.payload()) {
                Some(Upper::Protocol(ipv4::protocol::IPV6_ICMP, icmp)) => {
                    // Types below 128 are errors.
                    icmp.first().is_some_and(|t| *t >= 128)
                }
                Some(Upper::Protocol(..)) => true,
                Some(Upper::LaterFragment) | None => false,
            }
        }
        _ => false,
    }
}

/// Extension headers [`ipv6_upper_layer`] follows at most.
const MAX_IPV6_EXT_HEADERS: usize = 32;

/// What follows an IPv6 header's extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upper<'a> {
    /// An upper-layer protocol (or one this walk does not know as an extension header)
    /// and the bytes from its header on.
    Protocol(u8, &'a [u8]),
    /// A fragment header with a nonzero offset: the upper-layer header is elsewhere.
    LaterFragment,
}

/// Follows the extension headers (hop-by-hop, routing, fragment, destination options,
/// authentication) from `next` over `payload` (the bytes after the fixed IPv6 header) to
/// the upper layer. `None` when a header runs past the payload or the chain is longer
/// than [`MAX_IPV6_EXT_HEADERS`].
fn ipv6_upper_layer(mut next: u8, mut payload: &[u8]) -> Option<Upper<'_>> {
    use ipv4::protocol::{AH, HOPOPT, IPV6_FRAG, IPV6_ROUTE};
    const IPV6_OPTS: u8 = 60;
    for _ in 0..=MAX_IPV6_EXT_HEADERS {
        let len = match next {
            HOPOPT | IPV6_ROUTE | IPV6_OPTS => (usize::from(*payload.get(1)?) + 1) * 8,
            AH => (usize::from(*payload.get(1)?) + 2) * 4,
            IPV6_FRAG => {
                let offset = u16::from_be_bytes([*payload.get(2)?, *payload.get(3)?]) >> 3;
                if offset != 0 {
                    return Some(Upper::LaterFragment);
                }
                8
            }
            _ => return Some(Upper::Protocol(next, payload)),
        };
        let header = payload.get(..len)?;
        next = header[0];
        payload = &payload[len..];
    }
    None
}

/// Whether `a` is on one of `port`'s subnets: the only neighbours a route can name (a
/// config's next hop must be directly connected), so the only ones worth an entry in the
/// neighbour table.
fn on_port_subnet(fib: &Fib, port: PortId, a: IpAddr) -> bool {
    let Some(addrs) = fib.port_addrs.get(usize::from(port)) else { return false };
    match a {
        IpAddr::V4(a) => addrs.v4.iter().any(|&(net, len)| {
            let mask = u32::MAX.checked_shl(32 - u32::from(len.min(32))).unwrap_or(0);
            (net.to_bits() ^ a.to_bits()) & mask == 0
        }),
        IpAddr::V6(a) => addrs.v6.iter().any(|&(net, len)| {
            let mask = u128::MAX.checked_shl(128 - u32::from(len.min(128))).unwrap_or(0);
            (net.to_bits() ^ a.to_bits()) & mask == 0
        }),
    }
}

fn is_link_local(a: Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

fn ipv6_repr(src: Ipv6Addr, dst: Ipv6Addr, payload_len: usize, hop_limit: u8) -> ipv6::Repr {
    ipv6::Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: ipv4::protocol::IPV6_ICMP,
        payload_len,
        hop_limit,
        traffic_class: 0,
        flow_label: 0,
    }
}

fn write_ethernet(area: &mut [u8], dst: [u8; 6], src: [u8; 6], ethertype: u16) {
    area[0..6].copy_from_slice(&dst);
    area[6..12].copy_from_slice(&src);
    area[12..14].copy_from_slice(&ethertype.to_be_bytes());
}

fn set_ethertype(frame: &mut [u8], ethertype: u16) {
    frame[12..14].copy_from_slice(&ethertype.to_be_bytes());
}

/// The DSCP of an IPv4 or IPv6 header from its first two bytes.
fn ip_dscp(b: &[u8]) -> u8 {
    match b[0] >> 4 {
        4 => b[1] >> 2,
        6 => ((b[0] & 0x0f) << 2) | (b[1] >> 6),
        _ => 0,
    }
}

/// Whether GRO may merge `pkt`: TCP right under a single label (not GSO), checked first
/// because it is cheap and rules out most switched traffic without a label lookup; then
/// the label must end the LSP here ([`leaves_lsp`]), or swap it from a small-MTU port
/// toward ports that carry the merged frame whole
/// ([`swapped_from_small_to_large_ports`]), so a transit LSR between a
/// small-MTU link (VXLAN, an MPLS-in-UDP tunnel) and a 64 KiB one sends one frame where
/// it received dozens. A frame swapped onto another small-MTU link is not merged: it
/// would be cut up again at once. Merging needs two adjacent frames GRO takes as
/// candidates, and those pass the cheap check, so it changes nothing but the cost.
#[inline]
fn gro_eligible(fib: &Fib, ports: &[PortInfo], pkt: &Packet) -> bool {
    const TCP: u8 = 6;
    let frame = pkt.frame();
    if pkt.offload.is_gso() || frame.get(12..14) != Some(&MPLS_ETHERTYPE.to_be_bytes()[..]) {
        return false;
    }
    let tcp = match frame.get(ETH + 4).map(|b| b >> 4) {
        Some(4) => frame.get(ETH + 4 + 9) == Some(&TCP),
        Some(6) => frame.get(ETH + 4 + 6) == Some(&TCP),
        _ => false,
    };
    tcp && (leaves_lsp(fib, frame) || swapped_from_small_to_large_ports(fib, ports, pkt))
}

/// The smallest MTU toward which merging in front of a swap pays: a link of Ethernet
/// jumbo frames or more (a veth between vmpls routers has 65535).
const MERGE_MIN_MTU: u32 = 9000;

/// True for a port that carries a merged labelled frame whole: its MTU is at least
/// [`MERGE_MIN_MTU`] and it takes a partial checksum (as `emit` sends a super-frame that
/// fits the link as one jumbo frame). A port that takes labelled GSO but cuts it itself
/// (an MPLS-in-UDP tunnel) gains nothing: it sends consecutive segments of a flow in one
/// call already, and the merge would only add a copy and a checksum pass.
fn carries_merged(port: &PortInfo) -> bool {
    port.mtu >= MERGE_MIN_MTU && port.caps.csum
}

/// True for a frame under one label, received on a port below [`MERGE_MIN_MTU`], that is
/// swapped (not popped) toward next hops whose ports all [carry merged
/// frames](carries_merged). A swap toward a small-MTU port would cut the merged frame
/// again at once; from a large one, super-frames arrive whole already.
fn swapped_from_small_to_large_ports(fib: &Fib, ports: &[PortInfo], pkt: &Packet) -> bool {
    if ports.get(usize::from(pkt.port)).is_none_or(|p| p.mtu >= MERGE_MIN_MTU) {
        return false;
    }
    let frame = pkt.frame();
    let Some(e) = frame.get(ETH..ETH + 4) else { return false };
    let top = mpls::Repr::from_u32(u32::from_be_bytes([e[0], e[1], e[2], e[3]]));
    if !top.bottom || top.ttl <= 1 {
        return false;
    }
    match fib.labels.get(top.label).map(|r| &r.action) {
        Some(LabelAction::Forward(g)) => g
            .nexthops()
            .iter()
            .all(|nh| !nh.labels.is_empty() && ports.get(usize::from(nh.port)).is_some_and(carries_merged)),
        _ => false,
    }
}

/// True when a labelled frame's top label ends the label-switched path here (pop and
/// lookup, penultimate-hop pop, explicit null).
fn leaves_lsp(fib: &Fib, frame: &[u8]) -> bool {
    let Some(e) = frame.get(ETH..ETH + 4) else { return false };
    if u16::from_be_bytes([frame[12], frame[13]]) != MPLS_ETHERTYPE {
        return false;
    }
    let top = mpls::Repr::from_u32(u32::from_be_bytes([e[0], e[1], e[2], e[3]]));
    if !top.bottom || top.ttl <= 1 {
        return false;
    }
    match top.label {
        mpls::IPV4_EXPLICIT_NULL | mpls::IPV6_EXPLICIT_NULL => true,
        l => match fib.labels.get(l).map(|r| &r.action) {
            Some(LabelAction::PopAndLookup { .. }) => true,
            Some(LabelAction::Forward(g)) => g.nexthops().iter().all(|nh| nh.labels.is_empty()),
            None => false,
        },
    }
}

/// Offset of the IP header: after Ethernet and, for a labelled frame, the label stack.
fn l3_offset(frame: &[u8]) -> usize {
    if frame.len() >= ETH && u16::from_be_bytes([frame[12], frame[13]]) == MPLS_ETHERTYPE {
        ETH + 4 * mpls::stack_depth(&frame[ETH..]).unwrap_or(0)
    } else {
        ETH
    }
}

/// Enough of an IP header to send it on after a pop.
fn ip_header_sane(ip: &[u8]) -> bool {
    match ip.first().map(|b| b >> 4) {
        Some(4) => ipv4::Packet::new_checked(ip).is_ok(),
        Some(6) => ipv6::Packet::new_checked(ip).is_ok(),
        _ => false,
    }
}

/// Lowers the TTL / hop limit of the IP header at `off` to `ttl` (uniform model on pop),
/// patching the IPv4 header checksum. Never raises it: a label pushed under the pipe model
/// must not lengthen the packet's life. Leaves malformed headers alone: IP input rejects
/// them next.
fn set_ip_ttl_below(frame: &mut [u8], off: usize, ttl: u8) {
    let Some(ip) = frame.get_mut(off..) else { return };
    match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= 20 => {
            if ip[8] <= ttl {
                return;
            }
            let old = u16::from_be_bytes([ip[8], ip[9]]);
            ip[8] = ttl;
            let new = u16::from_be_bytes([ip[8], ip[9]]);
            let check = checksum::update16(u16::from_be_bytes([ip[10], ip[11]]), old, new);
            ip[10..12].copy_from_slice(&check.to_be_bytes());
        }
        Some(6) if ip.len() >= 40 => ip[7] = ip[7].min(ttl),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    //! The swap fast path against the general path: the same frames through two routers,
    //! one by [`Dataplane::process`] (fast path first), one straight into
    //! [`Dataplane::mpls_input`], must give the same frames out, the same counters and the
    //! same neighbour table, including across neighbour changes and stale entries.

    use std::time::Duration;

    use vmpls_fib::{LabelRoute, NexthopGroup};

    use super::*;

    const WEST_MAC: [u8; 6] = [2, 0, 0, 0, 0x10, 0x02];
    const EAST_MAC: [u8; 6] = [2, 0, 0, 0, 0x20, 0x01];
    const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0x20, 0x02];
    const PEER2_MAC: [u8; 6] = [2, 0, 0, 0, 0x20, 0x03];

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn route(nexthops: &[(PortId, &str, &[u32])]) -> LabelRoute {
        let nhs = nexthops
            .iter()
            .map(|&(p, via, labels)| Nexthop::new(p, Some(ip(via)), labels.to_vec()))
            .collect();
        LabelRoute {
            action: LabelAction::Forward(NexthopGroup::new(nhs).unwrap()),
            ttl_model: TtlModel::Uniform,
        }
    }

    fn router() -> Dataplane {
        let mut b = Fib::builder();
        b.router_v4("198.18.255.2".parse().unwrap());
        b.add_port("west", vmpls_fib::DEFAULT_VRF, &[(ip("198.18.10.2"), 24), (ip("2001:db8:10::2"), 64)])
            .unwrap();
        b.add_port("east", vmpls_fib::DEFAULT_VRF, &[(ip("198.18.20.1"), 24), (ip("2001:db8:20::1"), 64)])
            .unwrap();
        b.add_label_route(1002, route(&[(1, "198.18.20.2", &[2002])])).unwrap();
        b.add_label_route(1003, route(&[(1, "198.18.20.9", &[2003])])).unwrap();
        b.add_label_route(1004, route(&[(1, "198.18.20.2", &[])])).unwrap();
        b.add_label_route(1005, route(&[(1, "198.18.20.2", &[2005, 2006])])).unwrap();
        b.add_label_route(1006, route(&[(1, "198.18.20.2", &[2007]), (1, "198.18.20.3", &[2008])])).unwrap();
        b.add_label_route(1007, route(&[(1, "2001:db8:20::2", &[2009])])).unwrap();
        let ports = vec![
            PortInfo { id: 0, name: "west".into(), mac: WEST_MAC, mtu: 1500, caps: PortCaps::default() },
            PortInfo { id: 1, name: "east".into(), mac: EAST_MAC, mtu: 1500, caps: PortCaps::default() },
        ];
        let now = Instant::now();
        let mut dp = Dataplane::new(FibHandle::new(b.build().unwrap()), ports, DataplaneConfig::default());
        for a in ["198.18.20.2", "198.18.20.3", "2001:db8:20::2"] {
            dp.neighbors.learn(now, 1, ip(a), PEER_MAC, true);
        }
        dp
    }

    /// A labelled frame to the west port over a UDP/IPv4 packet of `payload` bytes.
    fn frame(entries: &[(u32, u8, bool)], payload: usize) -> Vec<u8> {
        let mut f = WEST_MAC.to_vec();
        f.extend_from_slice(&[2, 0, 0, 0, 0x10, 0x01]);
        f.extend_from_slice(&MPLS_ETHERTYPE.to_be_bytes());
        for &(label, ttl, bottom) in entries {
            let e = mpls::Repr { label, tc: 5, bottom, ttl };
            f.extend_from_slice(&e.to_u32().to_be_bytes());
        }
        let total = (28 + payload) as u16;
        let mut ip = vec![0x45, 0, 0, 0, 0x12, 0x34, 0, 0, 64, 17, 0, 0, 198, 18, 1, 2, 198, 18, 2, 2];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        let c = !checksum::fold(checksum::sum(&ip));
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&[0x30, 0x39, 0x30, 0x3a]);
        f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend((0..payload).map(|i| i as u8));
        f
    }

    fn cases() -> Vec<Packet> {
        let mut v: Vec<Packet> = [
            frame(&[(1002, 64, true)], 18),
            frame(&[(1002, 2, true)], 18),
            frame(&[(1002, 1, true)], 18),
            frame(&[(1002, 0, true)], 18),
            frame(&[(1003, 64, true)], 18),
            frame(&[(1004, 64, true)], 18),
            frame(&[(1005, 64, true)], 18),
            frame(&[(1006, 64, true)], 18),
            frame(&[(1006, 64, false), (77, 9, true)], 40),
            frame(&[(1007, 64, true)], 18),
            frame(&[(9999, 64, true)], 18),
            frame(&[(5, 64, true)], 18),
            frame(&[(1002, 64, false), (2000, 64, true)], 18),
            frame(&[(1002, 64, false)], 0)[..18].to_vec(),
            frame(&[(1002, 64, true)], 1500 - 4 - 28),
            frame(&[(1002, 64, true)], 1500 - 4 - 28 + 1),
        ]
        .iter()
        .map(|f| Packet::from_frame(0, f))
        .collect();
        let mut csum = Packet::from_frame(0, &frame(&[(1002, 64, true)], 18));
        csum.offload =
            virtio_net::Repr { needs_csum: true, csum_start: 38, csum_offset: 6, ..Default::default() };
        v.push(csum);
        let mut inside = Packet::from_frame(0, &frame(&[(1002, 64, false), (2000, 64, true)], 18));
        inside.offload =
            virtio_net::Repr { needs_csum: true, csum_start: 20, csum_offset: 6, ..Default::default() };
        v.push(inside);
        let mut gso = Packet::from_frame(0, &frame(&[(1002, 64, true)], 3000));
        gso.offload = virtio_net::Repr {
            needs_csum: true,
            gso_type: virtio_net::GsoType::UdpL4,
            gso_size: 1000,
            csum_start: 38,
            csum_offset: 6,
            ..Default::default()
        };
        v.push(gso);
        v
    }

    fn run(dp: &mut Dataplane, now: Instant, fast: bool, pool: &mut PacketPool) -> Vec<(PortId, Vec<u8>)> {
        let mut out = Output::new(2);
        for pkt in cases() {
            if fast {
                dp.process(now, pkt, pool, &mut out);
            } else {
                let fib = dp.fib.load_full();
                dp.counters.rx_frames[usize::from(pkt.port)] += 1;
                dp.mpls_input(&fib, now, pkt, pool, &mut out, false);
            }
        }
        let mut sent = Vec::new();
        for tx in &mut out.tx {
            for p in tx.drain(..) {
                sent.push((p.port, p.frame().to_vec()));
                pool.put(p);
            }
        }
        sent
    }

    /// Counters (as text) and neighbour entries, sorted.
    type State = (String, Vec<(PortId, IpAddr, Option<[u8; 6]>)>);

    fn state(dp: &Dataplane) -> State {
        let mut n: Vec<_> = dp.neighbors().entries().collect();
        n.sort();
        (format!("{:?}", dp.counters()), n)
    }

    /// An IPv6 packet 2001:db8:1::2 -> 2001:db8:2::2 with `next` and `payload`.
    fn ipv6_packet(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        ipv6_repr(ip6("2001:db8:1::2"), ip6("2001:db8:2::2"), payload.len(), 1)
            .emit(&mut ipv6::Packet::new_unchecked(&mut p[..]));
        p[6] = next;
        p.extend_from_slice(payload);
        p
    }

    fn ip6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    /// An extension header of `len` bytes (a multiple of 8) announcing `next`.
    fn ext(next: u8, len: usize) -> Vec<u8> {
        let mut h = vec![0u8; len];
        h[0] = next;
        h[1] = (len / 8 - 1) as u8;
        if len >= 8 {
            h[2] = 1; // PadN over the rest
            h[3] = (len - 4) as u8;
        }
        h
    }

    #[test]
    fn no_icmp_error_about_icmpv6_errors_or_later_fragments_behind_extension_headers() {
        const UDP: u8 = 17;
        const ICMP6: u8 = 58;
        const OPTS: u8 = 60;
        let chain = |headers: &[(u8, Vec<u8>)], upper: &[u8]| {
            let mut v: Vec<u8> = headers.iter().flat_map(|(_, h)| h.clone()).collect();
            v.extend_from_slice(upper);
            ipv6_packet(headers.first().map_or(UDP, |h| h.0), &v)
        };
        let echo = [128u8, 0, 0, 0, 0, 1, 0, 1];
        let unreachable = [1u8, 4, 0, 0, 0, 0, 0, 0];
        // hop-by-hop, then destination options, then the upper layer.
        let two = |upper: u8| vec![(0u8, ext(OPTS, 8)), (OPTS, ext(upper, 16))];
        assert!(may_answer_with_error(&chain(&two(ICMP6), &echo)), "echo behind options");
        assert!(!may_answer_with_error(&chain(&two(ICMP6), &unreachable)), "error behind options");
        assert!(!may_answer_with_error(&ipv6_packet(ICMP6, &unreachable)), "error right behind");
        assert!(may_answer_with_error(&chain(&two(UDP), &[0; 8])));
        // Fragments: an atomic or first one is looked through, a later one never answered.
        let mut first = vec![ICMP6, 0, 0, 1, 0, 0, 0, 7]; // offset 0, more fragments
        first.extend_from_slice(&unreachable);
        assert!(!may_answer_with_error(&ipv6_packet(44, &first)));
        let later = [UDP, 0, 0, 8 << 3, 0, 0, 0, 7, 1, 2, 3, 4, 5, 6, 7, 8];
        assert!(!may_answer_with_error(&ipv6_packet(44, &later)), "offset 8");
        // A header running past the packet: cannot tell.
        let mut cut = ext(UDP, 64);
        cut.truncate(16);
        assert!(!may_answer_with_error(&ipv6_packet(OPTS, &cut)));
        // Long chains: up to the limit followed, beyond it not answered.
        let opts = |n: usize| {
            let hs: Vec<(u8, Vec<u8>)> =
                (0..n).map(|i| (OPTS, ext(if i + 1 == n { UDP } else { OPTS }, 8))).collect();
            chain(&hs, &[0; 8])
        };
        assert!(may_answer_with_error(&opts(MAX_IPV6_EXT_HEADERS)));
        assert!(!may_answer_with_error(&opts(MAX_IPV6_EXT_HEADERS + 1)));
        // IPv4: echo answered; errors and later fragments not.
        let v4 = |proto: u8, frag: u16, payload: &[u8]| {
            let mut p = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 1, proto, 0, 0, 198, 18, 1, 2, 198, 18, 2, 2];
            p[2..4].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
            p[6..8].copy_from_slice(&frag.to_be_bytes());
            p.extend_from_slice(payload);
            p
        };
        assert!(may_answer_with_error(&v4(1, 0, &[8, 0, 0, 0, 0, 1, 0, 1])));
        assert!(!may_answer_with_error(&v4(1, 0, &[11, 0, 0, 0, 0, 0, 0, 0])));
        assert!(!may_answer_with_error(&v4(1, 0, &[3, 3, 0, 0, 0, 0, 0, 0])));
        assert!(!may_answer_with_error(&v4(17, 1, &[0; 8])), "offset 8");
    }

    fn arp_frame(op: arp::Operation, sender: &str, mac: [u8; 6], target: &str) -> Packet {
        let repr = arp::Repr {
            operation: op,
            sender_hardware_addr: mac,
            sender_protocol_addr: sender.parse().unwrap(),
            target_hardware_addr: if op == arp::Operation::Request { [0; 6] } else { WEST_MAC },
            target_protocol_addr: target.parse().unwrap(),
        };
        let mut f = vec![0u8; ETH + 28];
        let dst = if op == arp::Operation::Request { [0xff; 6] } else { WEST_MAC };
        write_ethernet(&mut f, dst, mac, ARP_ETHERTYPE);
        repr.emit(&mut arp::Packet::new_unchecked(&mut f[ETH..]));
        Packet::from_frame(0, &f)
    }

    /// A neighbour solicitation or advertisement from `src` (MAC `mac`) on the east port.
    fn nd_frame(src: &str, mac: [u8; 6], advert: Option<(&str, bool)>, target: &str) -> Packet {
        let (src, target) = (ip6(src), ip6(target));
        let dst = ip6("2001:db8:20::1");
        let mut f = vec![0u8; ETH + 40 + 32];
        write_ethernet(&mut f, EAST_MAC, mac, IPV6_ETHERTYPE);
        let n = match advert {
            None => icmpv6::emit_neighbor_solicit(&mut f[ETH + 40..], src, dst, target, mac).unwrap(),
            Some((_, o)) => {
                icmpv6::emit_neighbor_advert(&mut f[ETH + 40..], src, dst, target, mac, true, false, o)
                    .unwrap()
            }
        };
        ipv6_repr(src, dst, n, 255).emit(&mut ipv6::Packet::new_unchecked(&mut f[ETH..ETH + 40]));
        f.truncate(ETH + 40 + n);
        Packet::from_frame(1, &f)
    }

    fn neighbor(dp: &Dataplane, port: PortId, addr: &str) -> Option<[u8; 6]> {
        dp.neighbors().entries().find(|e| (e.0, e.1) == (port, ip(addr))).and_then(|e| e.2)
    }

    #[test]
    fn neighbours_are_added_only_from_requests_by_senders_on_the_port_subnet() {
        let mut dp = router();
        let mut pool = PacketPool::new(16);
        let mut out = Output::new(2);
        let now = Instant::now();
        let mac = [2, 0, 0, 0, 0x10, 0x77];
        let entries = |dp: &Dataplane| dp.neighbors().entries().count();
        let before = entries(&dp);
        let (request, reply) = (arp::Operation::Request, arp::Operation::Reply);
        let ours = "198.18.10.2";
        // From off the subnet: answered, not added.
        dp.process(now, arp_frame(request, "198.19.0.7", mac, ours), &mut pool, &mut out);
        assert_eq!(out.tx[0].len(), 1, "the request is answered");
        assert_eq!(entries(&dp), before);
        // An unsolicited reply, even from the subnet: not added.
        dp.process(now, arp_frame(reply, "198.18.10.77", mac, ours), &mut pool, &mut out);
        assert_eq!(entries(&dp), before);
        // A request from the subnet: added; a later reply updates it (merge).
        dp.process(now, arp_frame(request, "198.18.10.77", mac, ours), &mut pool, &mut out);
        assert_eq!(neighbor(&dp, 0, "198.18.10.77"), Some(mac));
        let moved = [2, 0, 0, 0, 0x10, 0x78];
        dp.process(now, arp_frame(reply, "198.18.10.77", moved, ours), &mut pool, &mut out);
        assert_eq!(neighbor(&dp, 0, "198.18.10.77"), Some(moved));
        // Neighbour solicitations likewise: the advertisement goes out either way.
        let sent = out.tx[1].len();
        dp.process(now, nd_frame("2001:db8:99::5", mac, None, "2001:db8:20::1"), &mut pool, &mut out);
        dp.process(now, nd_frame("2001:db8:20::5", mac, None, "2001:db8:20::1"), &mut pool, &mut out);
        assert_eq!(out.tx[1].len(), sent + 2, "both solicitations answered");
        assert_eq!(neighbor(&dp, 1, "2001:db8:99::5"), None);
        assert_eq!(neighbor(&dp, 1, "2001:db8:20::5"), Some(mac));
        assert_eq!(dp.counters().total_drops(), 0);
    }

    #[test]
    fn an_advert_without_override_does_not_replace_a_reachable_neighbour() {
        let mut dp = router();
        let mut pool = PacketPool::new(16);
        let mut out = Output::new(2);
        let now = Instant::now();
        let peer = "2001:db8:20::2";
        assert_eq!(neighbor(&dp, 1, peer), Some(PEER_MAC));
        let spoof = [2, 0, 0, 0, 0x66, 0x66];
        dp.process(now, nd_frame(peer, spoof, Some((peer, false)), peer), &mut pool, &mut out);
        assert_eq!(neighbor(&dp, 1, peer), Some(PEER_MAC), "O clear: kept");
        dp.process(now, nd_frame(peer, spoof, Some((peer, true)), peer), &mut pool, &mut out);
        assert_eq!(neighbor(&dp, 1, peer), Some(spoof), "O set: replaced (RFC 4861 section 7.2.5)");
        assert_eq!(dp.counters().total_drops(), 0);
    }

    #[test]
    fn swap_fast_path_matches_the_general_path() {
        let (mut a, mut b) = (router(), router());
        let (mut pa, mut pb) = (PacketPool::new(64), PacketPool::new(64));
        let t0 = Instant::now();
        let step = |a: &mut Dataplane, b: &mut Dataplane, pa: &mut PacketPool, pb: &mut PacketPool, now| {
            let sa = run(a, now, true, pa);
            let sb = run(b, now, false, pb);
            assert!(!sa.is_empty());
            assert_eq!(sa, sb, "frames out");
            assert_eq!(state(a), state(b), "counters and neighbours");
            sa
        };
        let first = step(&mut a, &mut b, &mut pa, &mut pb, t0);
        assert!(a.counters().events(Event::LabelSwap) >= 6, "the fast cases were switched");
        // Cached resolutions follow a neighbour's new MAC.
        for dp in [&mut a, &mut b] {
            dp.neighbors.learn(t0, 1, ip("198.18.20.2"), PEER2_MAC, false);
        }
        let moved = step(&mut a, &mut b, &mut pa, &mut pb, t0 + Duration::from_secs(1));
        assert_ne!(first, moved);
        assert!(moved.iter().any(|(_, f)| f[..6] == PEER2_MAC));
        // Stale: the general path switches and asks again; then expired and forgotten.
        step(&mut a, &mut b, &mut pa, &mut pb, t0 + Duration::from_secs(31));
        for dp in [&mut a, &mut b] {
            let mut out = Output::new(2);
            let mut pool = PacketPool::new(8);
            dp.poll(t0 + Duration::from_secs(40), &mut pool, &mut out);
        }
        step(&mut a, &mut b, &mut pa, &mut pb, t0 + Duration::from_secs(40));
    }
}
