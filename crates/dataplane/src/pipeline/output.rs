//! The IP routing step both versions share, and the way out: MTU check (fragment,
//! re-cut, or "too big"), label push, neighbour resolution, and the output stage.

use std::net::IpAddr;

use vmpls_fib::{PrefixRoute, Reject, RouteTarget, TtlModel};
use vmpls_wire::ethernet::{self, EtherType};
use vmpls_wire::{ip, ipv4, ipv6, mpls, virtio_net};

use super::mpls::write_entry;
use super::{Batch, Dataplane, ETH, Hop, IcmpKind, IpContext, l3_offset, port_vrf, set_ethertype};
use crate::counters::{DropReason, Event};
use crate::hash::ip_flow_hash;
use crate::neighbor::Resolution;
use crate::packet::Packet;
use crate::{fragment, gso};

impl Dataplane {
    /// The routing step both IP versions share, after the local-address check: TTL
    /// expiry, no route, next-hop choice (ECMP), TTL decrement, then output. `ttl` is the
    /// IPv4 TTL or IPv6 hop limit as received.
    pub(super) fn route_ip(
        &mut self,
        b: &mut Batch<'_>,
        mut pkt: Packet,
        ctx: IpContext,
        dst: IpAddr,
        ttl: u8,
        route: Option<&PrefixRoute>,
    ) {
        if !ctx.originated && ttl <= 1 {
            self.counters.drop(DropReason::IpTtlExpired);
            let stack = ctx.stack.unwrap_or_default();
            self.icmp_error_reply(b, &pkt, ctx, IcmpKind::TimeExceeded, stack.words());
            b.pool.put(pkt);
            return;
        }
        let Some(route) = route else {
            self.counters.drop(DropReason::NoRoute);
            if !ctx.originated {
                self.icmp_error_reply(b, &pkt, ctx, IcmpKind::NetUnreachable, &[]);
            }
            b.pool.put(pkt);
            return;
        };
        let hop = match route.target() {
            RouteTarget::Local => unreachable!("the callers deliver local routes"),
            RouteTarget::Blackhole => return self.discard(DropReason::Blackhole, pkt, b.pool),
            RouteTarget::Reject(reject) => {
                self.counters.drop(match reject {
                    Reject::Unreachable => DropReason::UnreachableRoute,
                    Reject::Prohibit => DropReason::ProhibitedRoute,
                });
                if !ctx.originated {
                    self.icmp_error_reply(b, &pkt, ctx, IcmpKind::Rejected(*reject), &[]);
                }
                b.pool.put(pkt);
                return;
            }
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
        self.ip_output(b, pkt, ctx, hop, ttl_out, route.ttl_model());
    }

    /// Pushes the route's labels (if any) and sends toward the next hop, after the MTU
    /// check. `ttl` is the IP TTL after this router's decrement.
    fn ip_output(
        &mut self,
        b: &mut Batch<'_>,
        pkt: Packet,
        ctx: IpContext,
        hop: Hop<'_>,
        ttl: u8,
        model: TtlModel,
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
        self.check_mtu_and_send(b, pkt, hop, Some((ctx, label_ttl)));
    }

    /// The MTU check before the frame is committed to a port. `ip` is set for an IP packet
    /// that gets `hop.labels` pushed here (with the TTL for them); for a frame that already
    /// carries its labels it is `None`.
    pub(super) fn check_mtu_and_send(
        &mut self,
        b: &mut Batch<'_>,
        mut pkt: Packet,
        hop: Hop<'_>,
        ip: Option<(IpContext, u8)>,
    ) {
        let Some(port) = self.ports.get(usize::from(hop.port)) else {
            return self.discard(DropReason::NoSuchPort, pkt, b.pool);
        };
        let mtu = port.mtu as usize;
        let push = mpls::ENTRY_LEN * hop.labels.len();
        let l3 = l3_offset(pkt.frame());
        // What each frame on the wire will carry after the Ethernet header.
        let mut on_wire = if pkt.offload.is_gso() {
            match gso::segment_l3_len(&pkt, l3) {
                Ok(n) => n + (l3 - ETH) + push,
                Err(_) => return self.discard(DropReason::BadGso, pkt, b.pool),
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
            let ipv4 = pkt.frame().get(l3..).and_then(ip::Version::of_packet) == Some(ip::Version::Ipv4);
            let df = !ipv4 || ipv4::Packet::new_checked(&pkt.frame()[l3..]).map_or(true, |p| p.dont_frag());
            if let (false, Some((_, ttl))) = (df || pkt.offload.is_gso(), ip) {
                // IPv4 without DF: fragment before the labels go on (at the ingress PE).
                let mut frags = std::mem::take(&mut self.scratch);
                let r = fragment::fragment_ipv4(&mut pkt, l3, room, b.pool, &mut frags);
                b.pool.put(pkt);
                match r {
                    Ok(_) => {
                        self.counters.event(Event::Fragmented, 1);
                        for f in frags.drain(..) {
                            self.push_and_send(b, f, hop, ttl);
                        }
                    }
                    Err(_) => {
                        self.counters.drop(DropReason::FragmentFailed);
                        for f in frags.drain(..) {
                            b.pool.put(f);
                        }
                    }
                }
                self.scratch = frags;
                return;
            }
            self.counters.drop(DropReason::MtuExceeded);
            let kind = IcmpKind::TooBig { mtu: room as u32 };
            match ip {
                Some((ctx, _)) if !ctx.originated => self.icmp_error_reply_at(b, &pkt, l3, ctx, kind, &[]),
                Some(_) => {}
                // A transit LSR: like time exceeded, forward along the LSP.
                None => self.too_big_along_lsp(b, &pkt, l3, hop, kind),
            }
            b.pool.put(pkt);
            return;
        }
        match ip {
            Some((_, ttl)) => self.push_and_send(b, pkt, hop, ttl),
            None => self.resolve_and_send(b, pkt, hop),
        }
    }

    /// "Fragmentation needed" / "packet too big" at a transit LSR, which usually has no
    /// route back to the source: the error goes forward along the LSP (RFC 3032 section
    /// 2.3.2), under the labels `pkt` was leaving with (fresh TTLs), to the same next hop;
    /// the egress routes it back. `l3` is the offset of the IP packet in `pkt`.
    fn too_big_along_lsp(
        &mut self,
        b: &mut Batch<'_>,
        pkt: &Packet,
        l3: usize,
        hop: Hop<'_>,
        kind: IcmpKind,
    ) {
        let Some(original) = pkt.frame().get(l3..) else { return };
        let vrf = port_vrf(b.fib, pkt.port);
        let Some(mut icmp) = self.build_icmp_error(b, pkt.port, vrf, original, kind, &[]) else {
            return;
        };
        self.counters.event(Event::IcmpTooBig, 1);
        let stack = &pkt.frame()[ETH..l3];
        let n = stack.len();
        if n > 0 {
            if icmp.shift_head(ETH, n as isize).is_none() {
                return self.discard(DropReason::LabelStackTooDeep, icmp, b.pool);
            }
            let ttl = self.config.default_ttl;
            let frame = icmp.frame_mut();
            frame[ETH..ETH + n].copy_from_slice(stack);
            for e in frame[ETH..ETH + n].chunks_exact_mut(mpls::ENTRY_LEN) {
                mpls::Entry::new_unchecked(e).set_ttl(ttl);
            }
            set_ethertype(frame, EtherType::Mpls);
        }
        self.counters.event(Event::IcmpAlongLsp, 1);
        self.resolve_and_send(b, icmp, hop);
    }

    /// Pushes `hop.labels` on an IP packet (right after the Ethernet header) and sends it.
    fn push_and_send(&mut self, b: &mut Batch<'_>, mut pkt: Packet, hop: Hop<'_>, ttl: u8) {
        if !hop.labels.is_empty() {
            // The class selector (the DSCP's top three bits) becomes the traffic class.
            let tc = pkt.frame().get(ETH..).and_then(ip::dscp).map_or(0, |dscp| dscp >> 3);
            if push_labels(&mut pkt, hop.labels, tc, ttl).is_none() {
                return self.discard(DropReason::LabelStackTooDeep, pkt, b.pool);
            }
        }
        self.resolve_and_send(b, pkt, hop);
    }

    /// Finds the next hop's MAC (or holds the frame while asking for it), then outputs.
    pub(super) fn resolve_and_send(&mut self, b: &mut Batch<'_>, mut pkt: Packet, hop: Hop<'_>) {
        pkt.port = hop.port;
        if let Some(mac) = self.fresh_neighbor(b.now, hop.port, hop.addr) {
            return self.emit(b, mac, pkt);
        }
        match self.neighbors.resolve(b.now, hop.port, hop.addr) {
            Resolution::Known { mac, probe } => {
                if probe {
                    self.send_solicit(b, hop.port, hop.addr);
                }
                self.emit(b, mac, pkt);
            }
            Resolution::Unknown { probe } => {
                self.count_refused_neighbors();
                if let Err(pkt) = self.neighbors.hold(hop.port, hop.addr, pkt) {
                    self.discard(DropReason::NeighborQueueFull, pkt, b.pool);
                }
                if probe {
                    self.send_solicit(b, hop.port, hop.addr);
                }
            }
        }
    }

    /// The output stage: Ethernet addresses, then the least work the port allows — pass
    /// a super-frame whole, complete a partial checksum, or segment in software.
    pub(super) fn emit(&mut self, b: &mut Batch<'_>, dst_mac: [u8; 6], mut pkt: Packet) {
        let port_id = pkt.port;
        let Some(port) = self.ports.get(usize::from(port_id)) else {
            return self.discard(DropReason::NoSuchPort, pkt, b.pool);
        };
        let caps = port.caps;
        let mtu = port.mtu as usize;
        let mut eth = ethernet::Frame::new_unchecked(pkt.frame_mut());
        eth.set_dst_addr(ethernet::Address(dst_mac));
        eth.set_src_addr(ethernet::Address(port.mac));
        let labelled = eth.outer_ethertype() == EtherType::Mpls;
        let tx = &mut b.out.tx[usize::from(port_id)];
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
            let r = gso::segment(&pkt, l3, b.pool, tx);
            let made = tx.len() - before;
            b.pool.put(pkt);
            self.counters.tx_frames[usize::from(port_id)] += made as u64;
            match r {
                Ok(_) => {
                    self.counters.event(Event::GsoSegmented, 1);
                    self.counters.event(Event::GsoSegments, made as u64);
                }
                Err(gso::GsoError::NoBuffer) => self.counters.drop(DropReason::NoBuffer),
                Err(_) => self.counters.drop(DropReason::BadGso),
            }
            return;
        }
        if pkt.len() - ETH > mtu {
            return self.discard(DropReason::OversizeAtOutput, pkt, b.pool);
        }
        if pkt.offload.needs_csum && !caps.csum {
            if gso::complete_checksum(&mut pkt).is_err() {
                return self.discard(DropReason::BadChecksumOffload, pkt, b.pool);
            }
            self.counters.event(Event::ChecksumCompleted, 1);
        }
        self.counters.tx_frames[usize::from(port_id)] += 1;
        b.out.tx[usize::from(port_id)].push(pkt);
    }
}

/// Pushes `labels` (at least one) with traffic class `tc` and TTL `ttl` on the IP packet
/// right after the Ethernet header, the last one marked bottom of stack. `None`, nothing
/// changed, when the headroom is too small for them.
#[inline(always)]
pub(super) fn push_labels(pkt: &mut Packet, labels: &[u32], tc: u8, ttl: u8) -> Option<()> {
    let n = labels.len();
    let grow = (mpls::ENTRY_LEN * n) as isize;
    pkt.shift_head(ETH, grow)?;
    pkt.offload.shift(grow);
    let frame = pkt.frame_mut();
    for (i, &label) in labels.iter().enumerate() {
        write_entry(frame, i, mpls::Repr { label, tc, bottom: i == n - 1, ttl });
    }
    set_ethertype(frame, EtherType::Mpls);
    Some(())
}

/// The largest MTU of an Ethernet NIC (jumbo frames). Links above it are virtual (veth,
/// TAP) and carry super-frames whole.
const MAX_ETHERNET_MTU: u32 = 9216;
