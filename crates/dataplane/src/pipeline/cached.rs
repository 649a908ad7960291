//! The cached paths: the common frames of each role switched without the general path's
//! detours, with the next hop's MAC from the adjacency cache
//! ([`fresh_neighbor`](Dataplane::fresh_neighbor)).
//!
//! - a P router's swap of one label for one ([`swap_cached`](Dataplane::swap_cached));
//! - an ingress PE's IPv4 packet routed out, with the route's labels pushed or none
//!   ([`ipv4_cached`](Dataplane::ipv4_cached));
//! - an egress PE's bottom label popped and the IPv4 packet under it routed out
//!   ([`pop_cached`](Dataplane::pop_cached)).
//!
//! Each first decides, changing nothing, whether the frame needs nothing else: no
//! segmentation, no checksum to complete, fits the MTU, TTL left, a resolved next hop, no
//! error to answer, nothing addressed to the router. Anything else returns false and goes
//! the general way (`mpls_input`, `ipv4_input`), which is the reference behaviour: a
//! cached path does exactly what it would do (same frame out, same counters) except for
//! the push onto `out.tx[pkt.port]`, left to the caller. `tests.rs` feeds both the same
//! frames and compares everything that comes out.

use std::net::IpAddr;

use vmpls_fib::{LabelAction, LabelRoute, NexthopGroup, RouteTarget, TtlModel, VrfId};
use vmpls_wire::ethernet::{self, EtherType};
use vmpls_wire::{ipv4, mpls, virtio_net};

use super::mpls::{top_entry, write_entry};
use super::{Batch, Dataplane, ETH, MAX_LABELS, entry_at, port_vrf, write_ethernet};
use crate::counters::Event;
use crate::hash::{ip_flow_hash, mpls_flow_hash};
use crate::packet::{Packet, PortId};

/// Where a cached IPv4 packet goes and what goes on it, decided before anything changes.
struct Ipv4Out<'a> {
    /// The IPv4 total length: what the frame keeps after the IP header's start (Ethernet
    /// padding goes).
    total_len: usize,
    port: PortId,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    labels: &'a [u32],
    ttl_model: TtlModel,
}

impl Dataplane {
    /// The cached label paths: a frame whose top label is swapped ([`swap_cached`]) or
    /// popped at the bottom of the stack into a VRF ([`pop_cached`]).
    ///
    /// [`swap_cached`]: Dataplane::swap_cached
    /// [`pop_cached`]: Dataplane::pop_cached
    #[inline(always)]
    pub(super) fn label_cached(&mut self, b: &Batch<'_>, pkt: &mut Packet) -> bool {
        if pkt.offload.is_gso() {
            return false;
        }
        let Some(top) = top_entry(pkt.frame()) else { return false };
        if top.label < mpls::FIRST_UNRESERVED || top.ttl <= 1 {
            return false;
        }
        let Some(route) = b.fib.labels.get(top.label) else { return false };
        match route.action() {
            LabelAction::Forward(group) => self.swap_cached(b, pkt, top, route, group),
            LabelAction::PopAndLookup { vrf } if top.bottom => {
                self.pop_cached(b, pkt, top, *vrf, route.ttl_model())
            }
            _ => false,
        }
    }

    /// The cached swap: the top label (`top`, TTL left) swapped for exactly one label
    /// toward a resolved next hop of `group` (any stack depth under it; ECMP selected as
    /// the general path selects), or toward the copy of its single next hop that `route`
    /// keeps ([`LabelRoute::swap_hop`]).
    #[inline(always)]
    fn swap_cached(
        &mut self,
        b: &Batch<'_>,
        pkt: &mut Packet,
        top: mpls::Repr,
        route: &LabelRoute,
        group: &NexthopGroup,
    ) -> bool {
        let offload = pkt.offload;
        let frame = pkt.frame_mut();
        let len = frame.len();
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
        if offload.needs_csum && usize::from(offload.csum_start) < entry_at(depth) {
            return false;
        }
        let (label, addr, out_port) = match route.swap_hop() {
            // The route's copy of its next hop: the group is not read.
            Some((label, via, port)) => (label, IpAddr::V4(via), port),
            None => {
                let nh = match group.nexthops() {
                    [nh] => nh,
                    _ => group.select(mpls_flow_hash(&frame[ETH..])),
                };
                let (&[label], Some(addr)) = (nh.labels.as_slice(), nh.via) else { return false };
                (label, addr, nh.port)
            }
        };
        let Some(port) = self.ports.get(usize::from(out_port)) else { return false };
        // On the wire after the Ethernet header: the frame as it is (one label for one).
        if len - ETH > port.mtu as usize || (offload.needs_csum && !port.caps.csum) {
            return false;
        }
        let src_mac = port.mac;
        if usize::from(out_port) >= b.out.tx.len() {
            return false;
        }
        // Unknown, stale or refresh due: the general path resolves (and asks).
        let Some(dst_mac) = self.fresh_neighbor(b.now, out_port, addr) else { return false };
        // Committed: from here on, what the general path does for this frame.
        write_entry(frame, 0, mpls::Repr { label, tc: top.tc, bottom: top.bottom, ttl: top.ttl - 1 });
        let mut eth = ethernet::Frame::new_unchecked(frame);
        eth.set_dst_addr(ethernet::Address(dst_mac));
        eth.set_src_addr(ethernet::Address(src_mac));
        pkt.port = out_port;
        self.counters.label(top.label, len);
        self.counters.event(Event::LabelSwap, 1);
        self.counters.tx_frames[usize::from(out_port)] += 1;
        true
    }

    /// The cached IPv4 route: an unlabelled IPv4 packet from a customer or core port
    /// routed in its port's VRF to a connected host or a next hop, with the route's labels
    /// pushed (an ingress PE) or none (plain IP routing).
    #[inline(always)]
    pub(super) fn ipv4_cached(&mut self, b: &Batch<'_>, pkt: &mut Packet) -> bool {
        let offload = pkt.offload;
        if offload.is_gso() {
            return false;
        }
        let vrf = port_vrf(b.fib, pkt.port);
        let headroom = pkt.headroom();
        let Some(ip) = pkt.frame().get(ETH..) else { return false };
        let Some(out) = self.ipv4_out(b, ip, vrf, offload, headroom) else { return false };
        // Committed: what `ipv4_input`, `route_ip` and `push_and_send` do.
        self.ipv4_commit(pkt, out, None);
        true
    }

    /// The cached pop: the bottom label (`top`, TTL left) popped into `vrf` (an egress PE),
    /// the IPv4 packet under it routed out as [`ipv4_cached`](Dataplane::ipv4_cached)
    /// routes. `label_model`: the label route's TTL model.
    #[inline(always)]
    fn pop_cached(
        &mut self,
        b: &Batch<'_>,
        pkt: &mut Packet,
        top: mpls::Repr,
        vrf: VrfId,
        label_model: TtlModel,
    ) -> bool {
        let offload = pkt.offload;
        if offload.needs_csum && usize::from(offload.csum_start) < entry_at(1) {
            return false;
        }
        let headroom = pkt.headroom() + mpls::ENTRY_LEN;
        let frame = pkt.frame();
        let Some(ip) = frame.get(entry_at(1)..) else { return false };
        // The IP TTL is checked as it is: lowered to the label's (at least 2) under the
        // uniform model, as `pop_and_continue` leaves it, it would expire exactly alike.
        let Some(out) = self.ipv4_out(b, ip, vrf, offload, headroom) else { return false };
        // Committed: what `mpls_input` and `pop_and_continue` do, then the IPv4 route.
        self.counters.label(top.label, frame.len());
        self.counters.event(Event::LabelPop, 1);
        // The label goes with the front of the old Ethernet header: `ipv4_commit` writes
        // a whole new one in front of the IP header.
        let popped = pkt.pull_front(mpls::ENTRY_LEN);
        debug_assert!(popped.is_some(), "the frame holds the IP header under the label");
        pkt.offload.shift(-(mpls::ENTRY_LEN as isize));
        let ttl_cap = (label_model == TtlModel::Uniform).then_some(top.ttl);
        self.ipv4_commit(pkt, out, ttl_cap);
        true
    }

    /// Decides, changing nothing, whether the IPv4 packet `ip` (which starts the frame's
    /// IP part, Ethernet padding and all) is routed out of `vrf` the cached way, and
    /// where. `headroom`: the frame's headroom once the IP header follows the Ethernet
    /// header.
    #[inline(always)]
    fn ipv4_out<'f>(
        &mut self,
        b: &Batch<'f>,
        ip: &[u8],
        vrf: VrfId,
        offload: virtio_net::Repr,
        headroom: usize,
    ) -> Option<Ipv4Out<'f>> {
        // Options, a bad checksum, a length it does not hold: the general way.
        let header = ipv4::Packet::plain_checked(ip)?;
        let dst = header.dst_addr();
        // Broadcast, multicast and unspecified go the general way (the host's, or dropped).
        if header.ttl() <= 1 || dst.is_broadcast() || dst.is_multicast() || dst.is_unspecified() {
            return None;
        }
        let total_len = usize::from(header.total_len());
        let routes = b.fib.vrf(vrf)?;
        let route = b.ipv4_route(vrf, routes, dst)?;
        let (port_id, addr, labels) = match route.target() {
            RouteTarget::Connected { port } => (*port, IpAddr::V4(dst), &[][..]),
            RouteTarget::Forward(group) => match route.inline_hop() {
                // The route's copy of its single next hop: the group is not read.
                Some(hop) => (hop.port, IpAddr::V4(hop.via), hop.labels),
                None => {
                    // Hashed as the general path hashes it: without the padding.
                    let hash = if group.is_multipath() { ip_flow_hash(&ip[..total_len]) } else { 0 };
                    let nh = group.select(hash);
                    (nh.port, nh.via.unwrap_or(IpAddr::V4(dst)), nh.labels.as_slice())
                }
            },
            // Delivered, dropped or answered with an error: the general way.
            RouteTarget::Local | RouteTarget::Blackhole | RouteTarget::Reject(_) => return None,
        };
        let push = mpls::ENTRY_LEN * labels.len();
        let port = self.ports.get(usize::from(port_id))?;
        if push > headroom
            || total_len + push > port.mtu as usize
            || (offload.needs_csum && !port.caps.csum)
            || usize::from(port_id) >= b.out.tx.len()
        {
            return None;
        }
        let src_mac = port.mac;
        let dst_mac = self.fresh_neighbor(b.now, port_id, addr)?;
        Some(Ipv4Out { total_len, port: port_id, src_mac, dst_mac, labels, ttl_model: route.ttl_model() })
    }

    /// Routes an IPv4 packet (right after the Ethernet header, whose bytes are not read)
    /// as `out` says: padding off, TTL lowered to `ttl_cap` (a label popped under the
    /// uniform model, as `set_ip_ttl_below` does) and decremented, labels pushed, a new
    /// Ethernet header written whole, counters.
    #[inline(always)]
    fn ipv4_commit(&mut self, pkt: &mut Packet, out: Ipv4Out<'_>, ttl_cap: Option<u8>) {
        pkt.truncate(ETH + out.total_len);
        // The Ethernet header and the fixed IPv4 header as arrays, so that their fields'
        // reads and writes need no checks (`ipv4_out` checked that the frame holds a whole
        // IPv4 packet).
        let Some((eth, ip)) = pkt.frame_mut().split_first_chunk_mut::<ETH>() else {
            unreachable!("the frame holds an Ethernet header")
        };
        let Some(fixed) = ip.first_chunk_mut::<{ ipv4::HEADER_LEN }>() else {
            unreachable!("ipv4_out checked the header")
        };
        let mut header = ipv4::Packet::new_unchecked(fixed);
        if let Some(cap) = ttl_cap
            && header.ttl() > cap
        {
            header.set_ttl_incremental(cap);
        }
        let ttl = header.decrement_ttl();
        if out.labels.is_empty() {
            self.counters.event(Event::IpForward, 1);
            write_ethernet(eth, out.dst_mac, out.src_mac, EtherType::Ipv4);
        } else {
            self.counters.event(Event::LabelPush, 1);
            // The class selector (the DSCP's top three bits) becomes the traffic class.
            let tc = header.dscp() >> 3;
            let label_ttl = match out.ttl_model {
                TtlModel::Uniform => ttl,
                TtlModel::Pipe => self.config.default_ttl,
            };
            let grow = mpls::ENTRY_LEN * out.labels.len();
            let Some(frame) = pkt.push_front(grow) else { unreachable!("the headroom was checked") };
            let n = out.labels.len();
            for (i, &label) in out.labels.iter().enumerate() {
                write_entry(frame, i, mpls::Repr { label, tc, bottom: i == n - 1, ttl: label_ttl });
            }
            let Some(eth) = frame.first_chunk_mut::<ETH>() else {
                unreachable!("the frame holds an Ethernet header")
            };
            write_ethernet(eth, out.dst_mac, out.src_mac, EtherType::Mpls);
            pkt.offload.shift(grow as isize);
        }
        pkt.port = out.port;
        self.counters.tx_frames[usize::from(out.port)] += 1;
    }
}
