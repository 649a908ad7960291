//! IPv4 input: header checks, the local-address branch (echo, port unreachable), then
//! the shared routing step.

use std::net::IpAddr;

use vmpls_fib::RouteTarget;
use vmpls_wire::ethernet::EtherType;
use vmpls_wire::{icmpv4, ipv4};

use super::{Batch, Dataplane, ETH, HostStack, IcmpKind, IpContext, set_ethertype};
use crate::counters::{DropReason, Event};
use crate::packet::Packet;

impl Dataplane {
    pub(super) fn ipv4_input(&mut self, b: &mut Batch<'_>, mut pkt: Packet, ctx: IpContext) {
        let (dst, ttl, total_len) = {
            let Ok(ip) = ipv4::Packet::new_checked(&pkt.frame()[ETH..]) else {
                return self.discard(DropReason::BadIpv4Header, pkt, b.pool);
            };
            if !ip.verify_checksum() {
                return self.discard(DropReason::BadIpv4Checksum, pkt, b.pool);
            }
            (ip.dst_addr(), ip.ttl(), usize::from(ip.total_len()))
        };
        // DropReason Ethernet padding so pushed labels and lengths stay exact.
        pkt.truncate(ETH + total_len);
        if dst.is_broadcast() || dst.is_multicast() || dst.is_unspecified() {
            // Broadcast and multicast (OSPF, LDP hellos) are the host's: the kernel's, if
            // it received them too. Unspecified is nobody's.
            if !dst.is_unspecified() && self.kernel_has_copy(&ctx) {
                return self.leave_to_kernel(pkt, &ctx, b.pool);
            }
            return self.discard(DropReason::IpMulticast, pkt, b.pool);
        }
        let Some(vrf) = b.fib.vrf(ctx.vrf) else { return self.discard(DropReason::NoRoute, pkt, b.pool) };
        let route = b.ipv4_route(ctx.vrf, vrf, dst);
        if matches!(route.map(|r| r.target()), Some(RouteTarget::Local)) {
            return self.ipv4_local(b, pkt, ctx);
        }
        self.route_ip(b, pkt, ctx, IpAddr::V4(dst), ttl, route);
    }

    fn ipv4_local(&mut self, b: &mut Batch<'_>, pkt: Packet, ctx: IpContext) {
        // Only what came in from the wire: a packet built here (an ICMP error about one
        // from our own address) was never the kernel's, and goes the way it always has.
        if self.config.host_stack == HostStack::Kernel && !ctx.originated {
            return self.leave_to_kernel(pkt, &ctx, b.pool);
        }
        let ip = ipv4::Packet::new_unchecked(&pkt.frame()[ETH..]);
        let (src, dst, proto) = (ip.src_addr(), ip.dst_addr(), ip.protocol());
        let fragmented = ip.more_frags() || ip.frag_offset() != 0;
        let payload = ip.payload();
        if proto == ipv4::protocol::ICMP && !fragmented {
            let Ok(icmp) = icmpv4::Packet::new_checked(payload) else {
                return self.discard(DropReason::BadIcmp, pkt, b.pool);
            };
            if icmp.msg_type() == icmpv4::msg_type::ECHO_REQUEST {
                if !icmp.verify_checksum() {
                    return self.discard(DropReason::BadIcmp, pkt, b.pool);
                }
                let Some(mut reply) = b.pool.get() else {
                    return self.discard(DropReason::NoBuffer, pkt, b.pool);
                };
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
                    match icmpv4::emit_echo_reply(payload, &mut area[ETH + ipv4::HEADER_LEN..]) {
                        Ok(n) => {
                            let h = ipv4::Repr { payload_len: n, ..hdr };
                            h.emit(&mut ipv4::Packet::new_unchecked(&mut area[ETH..ETH + ipv4::HEADER_LEN]));
                            Some(ETH + ipv4::HEADER_LEN + n)
                        }
                        Err(_) => None,
                    }
                };
                b.pool.put(pkt);
                let Some(len) = built else { return self.discard(DropReason::BadIcmp, reply, b.pool) };
                reply.set_received(len);
                set_ethertype(reply.frame_mut(), EtherType::Ipv4);
                reply.port = ctx.in_port;
                self.counters.event(Event::EchoReply, 1);
                let ctx = IpContext { originated: true, stack: None, ..ctx };
                return self.ipv4_input(b, reply, ctx);
            }
            return self.discard(DropReason::LocalUnhandled, pkt, b.pool);
        }
        if proto == ipv4::protocol::UDP && !ctx.originated {
            // traceroute's UDP probes to one of our addresses end here.
            self.counters.drop(DropReason::LocalUnhandled);
            self.icmp_error_reply(b, &pkt, ctx, IcmpKind::PortUnreachable, &[]);
            b.pool.put(pkt);
            return;
        }
        self.discard(DropReason::LocalUnhandled, pkt, b.pool)
    }
}
