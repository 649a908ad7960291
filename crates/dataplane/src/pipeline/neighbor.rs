//! ARP and IPv6 neighbour discovery: answers for the router's addresses, learning,
//! requests for next hops, and the adjacency cache in front of the neighbour table.

use std::net::{IpAddr, Ipv6Addr};
use std::time::Instant;

use vmpls_fib::Fib;
use vmpls_wire::ethernet::{self, EtherType};
use vmpls_wire::{arp, icmpv6, ipv6};

use super::ipv6::ipv6_repr;
use super::{Batch, Dataplane, ETH, HostStack, IpContext, write_ethernet};
use crate::counters::{DropReason, Event};
use crate::packet::{Packet, PacketPool, PortId};

impl Dataplane {
    /// The MAC of a next hop when the neighbour table would answer
    /// `Resolution::Known { probe: false }` (known, not stale), from the adjacency cache
    /// when it can: no hash lookup per frame. Changes nothing in the table; `None` means
    /// "ask the table" ([`NeighborTable::resolve`]).
    #[inline(always)]
    pub(super) fn fresh_neighbor(&mut self, now: Instant, port: PortId, addr: IpAddr) -> Option<[u8; 6]> {
        let generation = self.neighbors.generation();
        let slot = adj_slot(port, addr);
        if let Some(adj) = &self.adjacency[slot]
            && adj.generation == generation
            && adj.port == port
            && adj.addr == addr
            && now < adj.stale_at
        {
            return Some(adj.mac);
        }
        // After the cache, which never holds a point-to-point port's next hops
        // ([`set_point_to_point`](Dataplane::set_point_to_point)).
        if self.point_to_point.get(usize::from(port)) == Some(&true) {
            return Some(POINT_TO_POINT_MAC);
        }
        let (mac, stale_at) = self.neighbors.fresh(now, port, addr)?;
        self.adjacency[slot] = Some(Adjacency { generation, port, addr, mac, stale_at });
        Some(mac)
    }

    /// Takes the next hops on `port` out of the adjacency cache.
    pub(super) fn forget_adjacencies(&mut self, port: PortId) {
        for slot in &mut self.adjacency {
            if slot.as_ref().is_some_and(|adj| adj.port == port) {
                *slot = None;
            }
        }
    }

    pub(super) fn arp_input(&mut self, b: &mut Batch<'_>, pkt: Packet) {
        let in_port = pkt.port;
        let Ok(repr) = arp::Packet::new_checked(&pkt.frame()[ETH..]).and_then(|p| arp::Repr::parse(&p))
        else {
            return self.discard(DropReason::BadArp, pkt, b.pool);
        };
        b.pool.put(pkt);
        let ours = b
            .fib
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
        let create = request_for_us && on_port_subnet(b.fib, in_port, sender);
        let released = self.neighbors.learn(b.now, in_port, sender, repr.sender_hardware_addr, create);
        self.count_refused_neighbors();
        self.release(b, released, repr.sender_hardware_addr);
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
            if let Some(p) = self.build_arp(in_port, repr.sender_hardware_addr, &reply, b.pool) {
                self.counters.event(Event::ArpReply, 1);
                self.counters.tx_frames[usize::from(in_port)] += 1;
                b.out.tx[usize::from(in_port)].push(p);
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
            self.counters.drop(DropReason::NoBuffer);
            return None;
        };
        let area = p.receive_area();
        write_ethernet(area, dst, mac, EtherType::Arp);
        repr.emit(&mut arp::Packet::new_unchecked(&mut area[ETH..ETH + arp::PACKET_LEN]));
        // Pad to the Ethernet minimum, as NICs do.
        area[ETH + arp::PACKET_LEN..ethernet::MIN_FRAME_LEN].fill(0);
        p.set_received(ethernet::MIN_FRAME_LEN);
        p.port = port;
        Some(p)
    }

    /// Counts the entries the neighbour table just refused (a port's share or the table
    /// full): one field read when there were none.
    #[inline]
    pub(super) fn count_refused_neighbors(&mut self) {
        let refused = self.neighbors.take_refused();
        if refused > 0 {
            self.counters.event(Event::NeighborEntryRefused, refused);
        }
    }

    pub(super) fn release(&mut self, b: &mut Batch<'_>, frames: Vec<Packet>, mac: [u8; 6]) {
        for f in frames {
            self.emit(b, mac, f);
        }
    }

    /// Asks for `addr`'s MAC on `port`: ARP request or neighbour solicitation, if the
    /// request rate limit allows one now (else counted, and the neighbour table's next
    /// retransmission tries again).
    pub(super) fn send_solicit(&mut self, b: &mut Batch<'_>, port: PortId, addr: IpAddr) {
        let Some(info) = self.ports.get(usize::from(port)) else { return };
        let mac = info.mac;
        // IPv6 always has one: the port's link-local address.
        let has_source = match addr {
            IpAddr::V4(_) => b.fib.port_v4(port).is_some(),
            IpAddr::V6(_) => true,
        };
        if !has_source {
            return;
        }
        if !self.request_limit.take(b.now) {
            return self.counters.drop(DropReason::NeighborRequestSuppressed);
        }
        match addr {
            IpAddr::V4(target) => {
                let Some(src) = b.fib.port_v4(port) else { return };
                let req = arp::Repr {
                    operation: arp::Operation::Request,
                    sender_hardware_addr: mac,
                    sender_protocol_addr: src,
                    target_hardware_addr: [0; 6],
                    target_protocol_addr: target,
                };
                if let Some(p) = self.build_arp(port, [0xff; 6], &req, b.pool) {
                    self.counters.event(Event::ArpRequest, 1);
                    self.counters.tx_frames[usize::from(port)] += 1;
                    b.out.tx[usize::from(port)].push(p);
                }
            }
            IpAddr::V6(target) => {
                // A link-local next hop (BGP unnumbered, RFC 8950; any router on a link
                // without global addresses) is asked from the port's own link-local
                // address, formed from its MAC as the kernel forms it; a global one from
                // the port's address where it has one.
                let src = match b.fib.port_v6(port) {
                    Some(global) if !target.is_unicast_link_local() => global,
                    _ => icmpv6::link_local_from_mac(mac),
                };
                let dst = icmpv6::solicited_node_multicast(target);
                let Some(mut p) = b.pool.get() else {
                    self.counters.drop(DropReason::NoBuffer);
                    return;
                };
                let area = p.receive_area();
                write_ethernet(area, icmpv6::multicast_mac(dst), mac, EtherType::Ipv6);
                let Ok(n) =
                    icmpv6::emit_neighbor_solicit(&mut area[ETH + ipv6::HEADER_LEN..], src, dst, target, mac)
                else {
                    return b.pool.put(p);
                };
                ipv6_repr(src, dst, n, 255)
                    .emit(&mut ipv6::Packet::new_unchecked(&mut area[ETH..ETH + ipv6::HEADER_LEN]));
                p.set_received(ETH + ipv6::HEADER_LEN + n);
                p.port = port;
                self.counters.event(Event::NdSolicit, 1);
                self.counters.tx_frames[usize::from(port)] += 1;
                b.out.tx[usize::from(port)].push(p);
            }
        }
    }

    pub(super) fn nd_input(&mut self, b: &mut Batch<'_>, pkt: Packet, ctx: IpContext) {
        let in_port = ctx.in_port;
        let ip = ipv6::Packet::new_unchecked(&pkt.frame()[ETH..]);
        let (src, dst, hop_limit) = (ip.src_addr(), ip.dst_addr(), ip.hop_limit());
        let Ok(icmp) = icmpv6::Packet::new_checked(ip.payload()) else {
            return self.discard(DropReason::BadIcmp, pkt, b.pool);
        };
        // RFC 4861 section 7.1: hop limit 255 proves the sender is on the link.
        if hop_limit != 255 || !icmp.verify_checksum(src, dst) {
            return self.discard(DropReason::BadIcmp, pkt, b.pool);
        }
        let Ok(nd) = icmpv6::NdRepr::parse(&icmp) else {
            return self.discard(DropReason::BadIcmp, pkt, b.pool);
        };
        b.pool.put(pkt);
        let port_has = |a: Ipv6Addr| {
            b.fib.port_addrs.get(usize::from(in_port)).is_some_and(|p| p.v6.iter().any(|(x, _)| *x == a))
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
                    // router answers) goes b.out either way.
                    let create = on_port_subnet(b.fib, in_port, IpAddr::V6(src));
                    let released = self.neighbors.learn(b.now, in_port, IpAddr::V6(src), smac, create);
                    self.count_refused_neighbors();
                    self.release(b, released, smac);
                }
                if self.config.host_stack == HostStack::Kernel {
                    // The kernel advertises the addresses it owns (learning stays ours).
                    if ctx.stack.is_some() {
                        return self.counters.drop(DropReason::LocalAfterPop);
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
                let Some(mut p) = b.pool.get() else {
                    return self.counters.drop(DropReason::NoBuffer);
                };
                let area = p.receive_area();
                write_ethernet(area, reply_mac, mac, EtherType::Ipv6);
                let solicited = !src.is_unspecified();
                let Ok(n) = icmpv6::emit_neighbor_advert(
                    &mut area[ETH + ipv6::HEADER_LEN..],
                    target,
                    reply_dst,
                    target,
                    mac,
                    true,
                    solicited,
                    true,
                ) else {
                    return b.pool.put(p);
                };
                ipv6_repr(target, reply_dst, n, 255)
                    .emit(&mut ipv6::Packet::new_unchecked(&mut area[ETH..ETH + ipv6::HEADER_LEN]));
                p.set_received(ETH + ipv6::HEADER_LEN + n);
                p.port = in_port;
                self.counters.event(Event::NdAdvert, 1);
                self.counters.tx_frames[usize::from(in_port)] += 1;
                b.out.tx[usize::from(in_port)].push(p);
            }
            icmpv6::NdRepr::NeighborAdvert { target, target_mac, override_, .. } => {
                let Some(mac) = target_mac else { return };
                // RFC 4861 section 7.2.5: without the override flag, an advertisement
                // does not replace the address of a reachable entry.
                if !override_
                    && self.neighbors.fresh(b.now, in_port, IpAddr::V6(target)).is_some_and(|(m, _)| m != mac)
                {
                    return;
                }
                let released = self.neighbors.learn(b.now, in_port, IpAddr::V6(target), mac, false);
                self.release(b, released, mac);
            }
        }
    }
}

/// The destination MAC written on frames to a point-to-point port (which ignores it).
const POINT_TO_POINT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

/// Slots of the adjacency cache (a power of two).
pub(super) const ADJ_SLOTS: usize = 16;

/// A fresh neighbour resolution remembered for the cached paths (`cached.rs`), so a
/// switched frame costs no hash lookup: valid while the neighbour table's generation is `generation`
/// and the time is before `stale_at` (exactly when the table would answer the same).
#[derive(Debug, Clone, Copy)]
pub(super) struct Adjacency {
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
