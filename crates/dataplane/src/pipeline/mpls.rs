//! MPLS: the label stack walk (pop, swap, PHP, reserved labels), TTL
//! expiry under labels, and which labelled frames GRO may merge.

use std::net::{IpAddr, Ipv4Addr};

use vmpls_fib::{Fib, LabelAction, Nexthop, TtlModel, VrfId};
use vmpls_wire::ethernet::EtherType;
use vmpls_wire::{ip, ipv4, ipv6, mpls};

use super::IcmpKind;
use super::{
    Batch, Dataplane, ETH, Hop, IpContext, MAX_LABELS, MAX_QUOTED_LABELS, is_labelled, l3_offset, port_vrf,
    set_ethertype,
};
use crate::counters::{DropReason, Event};
use crate::hash::mpls_flow_hash;
use crate::packet::{Packet, PacketPool, PortId};
use crate::port::PortInfo;

impl Dataplane {
    /// A labelled frame: label stack right after the Ethernet header. `along_lsp` marks an
    /// ICMP error this router built and is sending along the LSP (never answered with
    /// another error).
    pub(super) fn mpls_input(&mut self, b: &mut Batch<'_>, mut pkt: Packet, along_lsp: bool) {
        let in_port = pkt.port;
        let depth = match mpls::stack_depth(&pkt.frame()[ETH..]) {
            Ok(d) => d,
            Err(_) => return self.discard(DropReason::TruncatedLabelStack, pkt, b.pool),
        };
        if depth > MAX_LABELS {
            return self.discard(DropReason::LabelStackTooDeep, pkt, b.pool);
        }
        if pkt.offload.needs_csum && usize::from(pkt.offload.csum_start) < entry_at(depth) {
            return self.discard(DropReason::BadChecksumOffload, pkt, b.pool);
        }
        // Captured before the first pop changes the stack, and only then: a plain swap
        // never needs it.
        let mut received: Option<ReceivedStack> = None;
        let port_vrf = port_vrf(b.fib, in_port);
        // Each pass handles the top entry; pops at this router continue with the next one.
        loop {
            let Some(top) = top_entry(pkt.frame()) else {
                return self.discard(DropReason::TruncatedLabelStack, pkt, b.pool);
            };
            let ttl = top.ttl;
            match top.label {
                mpls::IPV4_EXPLICIT_NULL | mpls::IPV6_EXPLICIT_NULL => {
                    // RFC 4182: explicit null may appear anywhere in the stack; pop it and
                    // go on with what is under it, in the port's VRF.
                    self.counters.event(Event::LabelPop, 1);
                    let received =
                        *received.get_or_insert_with(|| ReceivedStack::capture(&pkt.frame()[ETH..]));
                    match self.pop_and_continue(pkt, top, TtlModel::Uniform, b.pool) {
                        Some(p) => pkt = p,
                        None => return,
                    }
                    if top.bottom {
                        return self.ip_after_pop(b, pkt, in_port, port_vrf, received);
                    }
                    continue;
                }
                mpls::ROUTER_ALERT => {
                    self.counters.event(Event::PuntRouterAlert, 1);
                    b.pool.put(pkt);
                    return;
                }
                mpls::OAM_ALERT => {
                    self.counters.event(Event::PuntOamAlert, 1);
                    b.pool.put(pkt);
                    return;
                }
                mpls::IMPLICIT_NULL => return self.discard(DropReason::ImplicitNullOnWire, pkt, b.pool),
                mpls::ENTROPY_LABEL_INDICATOR if !top.bottom => {
                    // ELI at the top reaches only the egress: pop it with its entropy label.
                    let el_bottom = mpls::Entry::new_unchecked(&pkt.frame()[entry_at(1)..]).bottom_of_stack();
                    self.counters.event(Event::LabelPop, 2);
                    let received =
                        *received.get_or_insert_with(|| ReceivedStack::capture(&pkt.frame()[ETH..]));
                    if pkt.shift_head(ETH, -2 * LSE).is_none() {
                        return self.discard(DropReason::TruncatedLabelStack, pkt, b.pool);
                    }
                    pkt.offload.shift(-2 * LSE);
                    if el_bottom {
                        return self.ip_after_pop(b, pkt, in_port, port_vrf, received);
                    }
                    continue;
                }
                l if l < mpls::FIRST_UNRESERVED => {
                    return self.discard(DropReason::ReservedLabel, pkt, b.pool);
                }
                _ => {}
            }
            let Some(route) = b.fib.labels.get(top.label) else {
                return self.discard(DropReason::UnknownLabel, pkt, b.pool);
            };
            self.counters.label(top.label, pkt.len());
            // A pseudowire's label is not a hop: its TTL is not checked (RFC 4448 sends 255).
            if let &LabelAction::Pseudowire { pw } = route.action() {
                return self.pw_egress(b, pkt, top, pw);
            }
            if ttl <= 1 {
                self.counters.drop(DropReason::LabelTtlExpired);
                if !along_lsp {
                    // Transit unless this is the last label: a pop with labels under it
                    // (pop-then-swap, or a service label below) goes on switching too.
                    let forward = matches!(route.action(), LabelAction::Forward(_)) || !top.bottom;
                    let received =
                        *received.get_or_insert_with(|| ReceivedStack::capture(&pkt.frame()[ETH..]));
                    // At the egress the source is reached in the VRF the label pops into,
                    // where the packet itself would have gone, not in the core port's.
                    let vrf = match route.action() {
                        LabelAction::PopAndLookup { vrf } => *vrf,
                        LabelAction::Forward(_) | LabelAction::Pseudowire { .. } => port_vrf,
                    };
                    self.label_ttl_expired(b, &pkt, received, forward, vrf);
                }
                b.pool.put(pkt);
                return;
            }
            match route.action() {
                LabelAction::PopAndLookup { vrf } => {
                    self.counters.event(Event::LabelPop, 1);
                    let vrf = *vrf;
                    let received =
                        *received.get_or_insert_with(|| ReceivedStack::capture(&pkt.frame()[ETH..]));
                    match self.pop_and_continue(pkt, top, route.ttl_model(), b.pool) {
                        Some(p) => pkt = p,
                        None => return,
                    }
                    if top.bottom {
                        return self.ip_after_pop(b, pkt, in_port, vrf, received);
                    }
                }
                // Handled above; kept total without a panic.
                LabelAction::Pseudowire { pw } => return self.pw_egress(b, pkt, top, *pw),
                LabelAction::Forward(group) => {
                    let nh = group.select(if group.is_multipath() {
                        mpls_flow_hash(&pkt.frame()[ETH..])
                    } else {
                        0
                    });
                    return self.label_forward(b, pkt, top, route.ttl_model(), nh);
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
        if pkt.shift_head(ETH, -LSE).is_none() {
            self.discard(DropReason::TruncatedLabelStack, pkt, pool);
            return None;
        }
        pkt.offload.shift(-LSE);
        if model == TtlModel::Uniform {
            let ttl = top.ttl;
            if top.bottom {
                set_ip_ttl_below(pkt.frame_mut(), ETH, ttl);
            } else if let Some(next) = pkt.frame_mut().get_mut(ETH..)
                && let Ok(mut next) = mpls::Entry::new_checked(next)
            {
                next.set_ttl(next.ttl().min(ttl));
            }
        }
        Some(pkt)
    }

    /// After the bottom label was popped: the IP packet now follows the Ethernet header.
    fn ip_after_pop(
        &mut self,
        b: &mut Batch<'_>,
        mut pkt: Packet,
        in_port: PortId,
        vrf: VrfId,
        received: ReceivedStack,
    ) {
        let ctx = IpContext { in_port, vrf, originated: false, stack: Some(received) };
        match ip_version(pkt.frame()) {
            Some(ip::Version::Ipv4) => {
                set_ethertype(pkt.frame_mut(), EtherType::Ipv4);
                self.ipv4_input(b, pkt, ctx)
            }
            Some(ip::Version::Ipv6) => {
                set_ethertype(pkt.frame_mut(), EtherType::Ipv6);
                self.ipv6_input(b, pkt, ctx)
            }
            None => self.discard(DropReason::UnknownPayload, pkt, b.pool),
        }
    }

    /// Swap (or PHP pop) toward a next hop.
    fn label_forward(
        &mut self,
        b: &mut Batch<'_>,
        mut pkt: Packet,
        top: mpls::Repr,
        model: TtlModel,
        nh: &Nexthop,
    ) {
        let ttl = top.ttl - 1;
        let labels = nh.labels.as_slice();
        if labels.is_empty() {
            // Penultimate-hop pop.
            self.counters.event(Event::LabelPop, 1);
            if pkt.shift_head(ETH, -LSE).is_none() {
                return self.discard(DropReason::TruncatedLabelStack, pkt, b.pool);
            }
            pkt.offload.shift(-LSE);
            if top.bottom {
                let Some(version) = ip_version(pkt.frame()) else {
                    return self.discard(DropReason::UnknownPayload, pkt, b.pool);
                };
                if !ip_header_sane(&pkt.frame()[ETH..]) {
                    let reason = match version {
                        ip::Version::Ipv4 => DropReason::BadIpv4Header,
                        ip::Version::Ipv6 => DropReason::BadIpv6Header,
                    };
                    return self.discard(reason, pkt, b.pool);
                }
                set_ethertype(pkt.frame_mut(), version.ethertype());
                if model == TtlModel::Uniform {
                    set_ip_ttl_below(pkt.frame_mut(), ETH, ttl);
                }
            } else if model == TtlModel::Uniform {
                mpls::Entry::new_unchecked(&mut pkt.frame_mut()[ETH..]).set_ttl(ttl);
            }
        } else {
            self.counters.event(Event::LabelSwap, 1);
            let extra = labels.len() - 1;
            let grow = LSE * extra as isize;
            if extra > 0 && (pkt.shift_head(ETH, grow).is_none()) {
                return self.discard(DropReason::LabelStackTooDeep, pkt, b.pool);
            }
            pkt.offload.shift(grow);
            let frame = pkt.frame_mut();
            let n = labels.len();
            for (i, &label) in labels.iter().enumerate() {
                write_entry(
                    frame,
                    i,
                    mpls::Repr { label, tc: top.tc, bottom: i == n - 1 && top.bottom, ttl },
                );
            }
        }
        let hop =
            Hop { port: nh.port, addr: nh.via.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), labels: &[] };
        if nh.via.is_none() {
            // A label route without a gateway has nowhere to resolve; configs reject it.
            return self.discard(DropReason::NeighborUnresolved, pkt, b.pool);
        }
        self.check_mtu_and_send(b, pkt, hop, None);
    }

    /// A label's TTL ran out: ICMP time exceeded with the received stack (RFC 4950).
    /// A transit LSR sends it forward along the LSP (RFC 3032 section 2.3.2): the egress
    /// knows the way back to the source, the P router usually does not.
    fn label_ttl_expired(
        &mut self,
        b: &mut Batch<'_>,
        pkt: &Packet,
        received: ReceivedStack,
        transit: bool,
        vrf: VrfId,
    ) {
        let in_port = pkt.port;
        let Some(original) = pkt.frame().get(l3_offset(pkt.frame())..) else { return };
        let Some(mut icmp) =
            self.build_icmp_error(b, in_port, vrf, original, IcmpKind::TimeExceeded, received.words())
        else {
            return;
        };
        self.counters.event(Event::IcmpTimeExceeded, 1);
        if transit {
            // Put the received stack back on with fresh TTLs and switch it like the original.
            let n = received.len;
            if icmp.shift_head(ETH, LSE * n as isize).is_none() {
                return self.discard(DropReason::LabelStackTooDeep, icmp, b.pool);
            }
            let frame = icmp.frame_mut();
            for (i, w) in received.words().iter().enumerate() {
                write_entry(
                    frame,
                    i,
                    mpls::Repr { ttl: self.config.default_ttl, ..mpls::Repr::from_u32(*w) },
                );
            }
            set_ethertype(frame, EtherType::Mpls);
            self.counters.event(Event::IcmpAlongLsp, 1);
            self.mpls_input(b, icmp, true);
        } else {
            let ctx = IpContext { in_port, vrf, originated: true, stack: None };
            if ip::Version::of_packet(original) == Some(ip::Version::Ipv6) {
                self.ipv6_input(b, icmp, ctx)
            } else {
                self.ipv4_input(b, icmp, ctx)
            }
        }
    }
}

/// One label stack entry's length, as a head shift.
const LSE: isize = mpls::ENTRY_LEN as isize;

/// Offset of label stack entry `i` in a labelled frame (entry 0 is the top).
#[inline(always)]
pub(super) const fn entry_at(i: usize) -> usize {
    ETH + mpls::ENTRY_LEN * i
}

/// The top label stack entry of a labelled frame; `None` when the frame ends first.
#[inline(always)]
pub(super) fn top_entry(frame: &[u8]) -> Option<mpls::Repr> {
    let entry = mpls::Entry::new_checked(frame.get(ETH..)?).ok()?;
    Some(mpls::Repr::from_u32(entry.raw()))
}

/// Writes `entry` as label stack entry `i` of a labelled frame.
#[inline(always)]
pub(super) fn write_entry(frame: &mut [u8], i: usize, entry: mpls::Repr) {
    // A bounded slice: the compiler then writes the four bytes without a loop's worth of
    // length arithmetic around it.
    entry.emit(&mut mpls::Entry::new_unchecked(&mut frame[entry_at(i)..entry_at(i + 1)]));
}

/// The IP version of the packet right after the Ethernet header.
#[inline]
fn ip_version(frame: &[u8]) -> Option<ip::Version> {
    ip::Version::of_packet(frame.get(ETH..)?)
}

/// The label stack a frame arrived with, kept for ICMP (RFC 4950) and for sending an error
/// along the LSP.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ReceivedStack {
    words: [u32; MAX_QUOTED_LABELS],
    len: usize,
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
#[inline(always)]
pub(super) fn gro_eligible(fib: &Fib, ports: &[PortInfo], pkt: &Packet) -> bool {
    let frame = pkt.frame();
    if pkt.offload.is_gso() || !is_labelled(frame) {
        return false;
    }
    // TCP first: most frames that are not (small frames, UDP) stop at the cheapest test.
    let tcp = frame.get(entry_at(1)..).and_then(ip::protocol) == Some(ipv4::protocol::TCP);
    // Frames from a port that refuses labels are dropped one by one, each counted.
    tcp && fib.accepts_mpls(pkt.port) && labelled_tcp_gro_eligible(fib, ports, pkt)
}

/// The rest of [`gro_eligible`], for TCP under one label: out of line, so the cheap
/// checks stay inline in the coalescing scan.
#[inline(never)]
fn labelled_tcp_gro_eligible(fib: &Fib, ports: &[PortInfo], pkt: &Packet) -> bool {
    leaves_lsp(fib, pkt.frame()) || swapped_from_small_to_large_ports(fib, ports, pkt)
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
    let Some(top) = top_entry(pkt.frame()) else { return false };
    if !top.bottom || top.ttl <= 1 {
        return false;
    }
    match fib.labels.get(top.label).map(|r| r.action()) {
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
    let Some(top) = top_entry(frame) else { return false };
    if !is_labelled(frame) || !top.bottom || top.ttl <= 1 {
        return false;
    }
    match top.label {
        mpls::IPV4_EXPLICIT_NULL | mpls::IPV6_EXPLICIT_NULL => true,
        l => match fib.labels.get(l).map(|r| r.action()) {
            Some(LabelAction::PopAndLookup { .. }) => true,
            Some(LabelAction::Forward(g)) => g.nexthops().iter().all(|nh| nh.labels.is_empty()),
            Some(LabelAction::Pseudowire { .. }) | None => false,
        },
    }
}

/// Enough of an IP header to send it on after a pop.
fn ip_header_sane(ip: &[u8]) -> bool {
    match ip::Version::of_packet(ip) {
        Some(ip::Version::Ipv4) => ipv4::Packet::new_checked(ip).is_ok(),
        Some(ip::Version::Ipv6) => ipv6::Packet::new_checked(ip).is_ok(),
        None => false,
    }
}

/// Lowers the TTL / hop limit of the IP header at `off` to `ttl` (uniform model on pop),
/// patching the IPv4 header checksum. Never raises it: a label pushed under the pipe model
/// must not lengthen the packet's life. Leaves malformed headers alone: IP input rejects
/// them next.
fn set_ip_ttl_below(frame: &mut [u8], off: usize, ttl: u8) {
    let Some(ip) = frame.get_mut(off..) else { return };
    match ip::Version::of_packet(ip) {
        Some(ip::Version::Ipv4) if ip.len() >= ipv4::HEADER_LEN => {
            let mut ip = ipv4::Packet::new_unchecked(ip);
            if ip.ttl() > ttl {
                ip.set_ttl_incremental(ttl);
            }
        }
        Some(ip::Version::Ipv6) if ip.len() >= ipv6::HEADER_LEN => {
            let mut ip = ipv6::Packet::new_unchecked(ip);
            ip.set_hop_limit(ip.hop_limit().min(ttl));
        }
        _ => {}
    }
}

impl ReceivedStack {
    fn capture(stack: &[u8]) -> ReceivedStack {
        let mut s = ReceivedStack::default();
        for e in stack.chunks_exact(mpls::ENTRY_LEN).take(MAX_QUOTED_LABELS) {
            let e = mpls::Entry::new_unchecked(e);
            s.words[s.len] = e.raw();
            s.len += 1;
            if e.bottom_of_stack() {
                break;
            }
        }
        s
    }

    pub(super) fn words(&self) -> &[u32] {
        &self.words[..self.len]
    }
}
