//! IPv6 input: header checks, neighbour discovery hand-off, the local-address branch,
//! and the extension header walk ICMP needs.

use std::net::{IpAddr, Ipv6Addr};

use vmpls_fib::RouteTarget;
use vmpls_wire::ethernet::EtherType;
use vmpls_wire::{icmpv6, ipv6, ipv6_ext};

use super::{Batch, Dataplane, ETH, HostStack, IcmpKind, IpContext, set_ethertype};
use crate::counters::{DropReason, Event};
use crate::packet::Packet;

impl Dataplane {
    pub(super) fn ipv6_input(&mut self, b: &mut Batch<'_>, mut pkt: Packet, ctx: IpContext) {
        let (dst, hop_limit, next_header, payload_len) = {
            let Ok(ip) = ipv6::Packet::new_checked(&pkt.frame()[ETH..]) else {
                return self.discard(DropReason::BadIpv6Header, pkt, b.pool);
            };
            (ip.dst_addr(), ip.hop_limit(), ip.next_header(), usize::from(ip.payload_len()))
        };
        pkt.truncate(ETH + ipv6::HEADER_LEN + payload_len);
        if next_header == ipv6::protocol::IPV6_ICMP
            && let Some(t) = pkt.frame().get(ETH + ipv6::HEADER_LEN..).and_then(icmpv6::peek_msg_type)
            && (t == icmpv6::msg_type::NEIGHBOR_SOLICIT || t == icmpv6::msg_type::NEIGHBOR_ADVERT)
            && !ctx.originated
        {
            return self.nd_input(b, pkt, ctx);
        }
        if dst.is_multicast() || dst.is_unspecified() {
            if dst.is_multicast() && self.kernel_has_copy(&ctx) {
                return self.leave_to_kernel(pkt, &ctx, b.pool);
            }
            return self.discard(DropReason::IpMulticast, pkt, b.pool);
        }
        let Some(vrf) = b.fib.vrf(ctx.vrf) else { return self.discard(DropReason::NoRoute, pkt, b.pool) };
        let route = vrf.v6.lookup_value(dst);
        if matches!(route.map(|r| r.target()), Some(RouteTarget::Local)) {
            return self.ipv6_local(b, pkt, ctx);
        }
        if is_link_local(dst) {
            // Never routed; sent to our MAC, it is for the kernel's link-local address.
            if self.kernel_has_copy(&ctx) {
                return self.leave_to_kernel(pkt, &ctx, b.pool);
            }
            return self.discard(DropReason::NoRoute, pkt, b.pool);
        }
        self.route_ip(b, pkt, ctx, IpAddr::V6(dst), hop_limit, route);
    }

    fn ipv6_local(&mut self, b: &mut Batch<'_>, pkt: Packet, ctx: IpContext) {
        if self.config.host_stack == HostStack::Kernel && !ctx.originated {
            return self.leave_to_kernel(pkt, &ctx, b.pool);
        }
        let ip = ipv6::Packet::new_unchecked(&pkt.frame()[ETH..]);
        let (src, dst, next) = (ip.src_addr(), ip.dst_addr(), ip.next_header());
        let payload = ip.payload();
        if next == ipv6::protocol::IPV6_ICMP {
            let Ok(icmp) = icmpv6::Packet::new_checked(payload) else {
                return self.discard(DropReason::BadIcmp, pkt, b.pool);
            };
            if icmp.msg_type() == icmpv6::msg_type::ECHO_REQUEST {
                if !icmp.verify_checksum(src, dst) {
                    return self.discard(DropReason::BadIcmp, pkt, b.pool);
                }
                let Some(mut reply) = b.pool.get() else {
                    return self.discard(DropReason::NoBuffer, pkt, b.pool);
                };
                let built = {
                    let area = reply.receive_area();
                    match icmpv6::emit_echo_reply(payload, &mut area[ETH + ipv6::HEADER_LEN..], dst, src) {
                        Ok(n) => {
                            ipv6_repr(dst, src, n, 64).emit(&mut ipv6::Packet::new_unchecked(
                                &mut area[ETH..ETH + ipv6::HEADER_LEN],
                            ));
                            Some(ETH + ipv6::HEADER_LEN + n)
                        }
                        Err(_) => None,
                    }
                };
                b.pool.put(pkt);
                let Some(len) = built else { return self.discard(DropReason::BadIcmp, reply, b.pool) };
                reply.set_received(len);
                set_ethertype(reply.frame_mut(), EtherType::Ipv6);
                reply.port = ctx.in_port;
                self.counters.event(Event::EchoReply, 1);
                let ctx = IpContext { originated: true, stack: None, ..ctx };
                return self.ipv6_input(b, reply, ctx);
            }
            return self.discard(DropReason::LocalUnhandled, pkt, b.pool);
        }
        if next == ipv6::protocol::UDP && !ctx.originated {
            self.counters.drop(DropReason::LocalUnhandled);
            self.icmp_error_reply(b, &pkt, ctx, IcmpKind::PortUnreachable, &[]);
            b.pool.put(pkt);
            return;
        }
        self.discard(DropReason::LocalUnhandled, pkt, b.pool)
    }
}

/// Extension headers [`ipv6_upper_layer`] follows at most.
pub(super) const MAX_IPV6_EXT_HEADERS: usize = 32;

/// What follows an IPv6 header's extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Upper<'a> {
    /// An upper-layer protocol (or one this walk does not know as an extension header)
    /// and the bytes from its header on.
    Protocol(u8, &'a [u8]),
    /// A fragment header with a nonzero offset: the upper-layer header is elsewhere.
    LaterFragment,
}

/// Follows the extension headers (hop-by-hop, routing, fragment, destination options,
/// authentication) from `next` over `payload` (the bytes after the fixed IPv6 header) to
/// the upper layer. `None` when a header runs past the payload (a later fragment's
/// included: its 8-byte header must be whole) or the chain is longer
/// than [`MAX_IPV6_EXT_HEADERS`].
pub(super) fn ipv6_upper_layer(mut next: u8, mut payload: &[u8]) -> Option<Upper<'_>> {
    use ipv6::protocol::{AH, HOPOPT, IPV6_FRAG, IPV6_OPTS, IPV6_ROUTE};
    for _ in 0..=MAX_IPV6_EXT_HEADERS {
        (next, payload) = match next {
            HOPOPT | IPV6_ROUTE | IPV6_OPTS => {
                let h = ipv6_ext::Header::new_checked(payload).ok()?;
                (h.next_header(), h.payload())
            }
            AH => {
                let h = ipv6_ext::AuthHeader::new_checked(payload).ok()?;
                (h.next_header(), h.payload())
            }
            IPV6_FRAG => {
                let h = ipv6_ext::FragmentHeader::new_checked(payload).ok()?;
                if h.frag_offset() != 0 {
                    return Some(Upper::LaterFragment);
                }
                (h.next_header(), h.payload())
            }
            _ => return Some(Upper::Protocol(next, payload)),
        };
    }
    None
}

fn is_link_local(a: Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

pub(super) fn ipv6_repr(src: Ipv6Addr, dst: Ipv6Addr, payload_len: usize, hop_limit: u8) -> ipv6::Repr {
    ipv6::Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: ipv6::protocol::IPV6_ICMP,
        payload_len,
        hop_limit,
        traffic_class: 0,
        flow_label: 0,
    }
}
