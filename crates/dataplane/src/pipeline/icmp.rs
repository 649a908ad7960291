//! ICMP errors the router originates: time exceeded, unreachable, fragmentation needed
//! and packet too big, with the received label stack (RFC 4950), rate-limited.

use vmpls_fib::{Reject, VrfId};
use vmpls_wire::ethernet::EtherType;
use vmpls_wire::{icmpv4, icmpv6, ip, ipv4, ipv6};

use super::ipv6::{Upper, ipv6_repr, ipv6_upper_layer};
use super::{Batch, Dataplane, ETH, IcmpKind, IpContext, set_ethertype};
use crate::counters::{DropReason, Event};
use crate::packet::{Packet, PortId};

impl Dataplane {
    pub(super) fn next_ident(&mut self) -> u16 {
        self.ip_ident = self.ip_ident.wrapping_add(1);
        self.ip_ident
    }

    /// Answers the packet in `pkt` (IP header right after Ethernet) with an ICMP error
    /// routed back to its source.
    pub(super) fn icmp_error_reply(
        &mut self,
        b: &mut Batch<'_>,
        pkt: &Packet,
        ctx: IpContext,
        kind: IcmpKind,
        stack: &[u32],
    ) {
        self.icmp_error_reply_at(b, pkt, ETH, ctx, kind, stack)
    }

    pub(super) fn icmp_error_reply_at(
        &mut self,
        b: &mut Batch<'_>,
        pkt: &Packet,
        l3: usize,
        ctx: IpContext,
        kind: IcmpKind,
        stack: &[u32],
    ) {
        let Some(original) = pkt.frame().get(l3..) else { return };
        let Some(icmp) = self.build_icmp_error(b, ctx.in_port, ctx.vrf, original, kind, stack) else {
            return;
        };
        match kind {
            IcmpKind::TimeExceeded => self.counters.event(Event::IcmpTimeExceeded, 1),
            IcmpKind::TooBig { .. } => self.counters.event(Event::IcmpTooBig, 1),
            _ => self.counters.event(Event::IcmpUnreachable, 1),
        }
        let ctx = IpContext { originated: true, stack: None, ..ctx };
        if ip::Version::of_packet(original) == Some(ip::Version::Ipv6) {
            self.ipv6_input(b, icmp, ctx)
        } else {
            self.ipv4_input(b, icmp, ctx)
        }
    }

    /// Builds Ethernet (addresses filled at output) + IP + ICMP error about `original`
    /// (an IPv4 or IPv6 packet from its header on), from the router's address, or in a
    /// customer's VRF `vrf` from an address of that VRF ([`vmpls_fib::Fib::source_v4_in`]). `None` when
    /// no error may be sent: about an ICMP error, a non-first fragment, a multicast or
    /// unspecified source, over the rate limit, or with no source address configured.
    pub(super) fn build_icmp_error(
        &mut self,
        b: &mut Batch<'_>,
        in_port: PortId,
        vrf: VrfId,
        original: &[u8],
        kind: IcmpKind,
        stack: &[u32],
    ) -> Option<Packet> {
        let v6 = match ip::Version::of_packet(original)? {
            ip::Version::Ipv4 => false,
            ip::Version::Ipv6 => true,
        };
        if !may_answer_with_error(original) {
            return None;
        }
        if !self.icmp_limit.take(b.now) {
            self.counters.drop(DropReason::IcmpSuppressed);
            return None;
        }
        let Some(mut pkt) = b.pool.get() else {
            self.counters.drop(DropReason::NoBuffer);
            return None;
        };
        pkt.port = in_port;
        let ttl = self.config.default_ttl;
        let len = if v6 {
            let orig = ipv6::Packet::new_unchecked(original);
            let Some(src) = b.fib.source_v6_in(vrf, in_port) else {
                self.counters.drop(DropReason::IcmpSuppressed);
                b.pool.put(pkt);
                return None;
            };
            let dst = orig.src_addr();
            let kind6 = match kind {
                IcmpKind::TimeExceeded => icmpv6::ErrorKind6::TimeExceeded,
                IcmpKind::TooBig { mtu } => icmpv6::ErrorKind6::PacketTooBig { mtu },
                IcmpKind::NetUnreachable => {
                    icmpv6::ErrorKind6::Unreachable { code: icmpv6::unreachable_code::NO_ROUTE }
                }
                IcmpKind::PortUnreachable => {
                    icmpv6::ErrorKind6::Unreachable { code: icmpv6::unreachable_code::PORT_UNREACHABLE }
                }
                IcmpKind::Rejected(Reject::Unreachable) => {
                    icmpv6::ErrorKind6::Unreachable { code: icmpv6::unreachable_code::NO_ROUTE }
                }
                IcmpKind::Rejected(Reject::Prohibit) => {
                    icmpv6::ErrorKind6::Unreachable { code: icmpv6::unreachable_code::ADMIN_PROHIBITED }
                }
            };
            let area = pkt.receive_area();
            let Ok(n) = icmpv6::emit_error(
                &mut area[ETH + ipv6::HEADER_LEN..ETH + icmpv6::MIN_MTU],
                kind6,
                original,
                stack,
                src,
                dst,
            ) else {
                b.pool.put(pkt);
                return None;
            };
            ipv6_repr(src, dst, n, ttl)
                .emit(&mut ipv6::Packet::new_unchecked(&mut area[ETH..ETH + ipv6::HEADER_LEN]));
            ETH + ipv6::HEADER_LEN + n
        } else {
            let orig = ipv4::Packet::new_unchecked(original);
            let Some(src) = b.fib.source_v4_in(vrf, in_port) else {
                self.counters.drop(DropReason::IcmpSuppressed);
                b.pool.put(pkt);
                return None;
            };
            let dst = orig.src_addr();
            let kind4 = match kind {
                IcmpKind::TimeExceeded => icmpv4::ErrorKind::TimeExceeded,
                IcmpKind::TooBig { mtu } => icmpv4::ErrorKind::FragNeeded { mtu: mtu.min(0xffff) as u16 },
                IcmpKind::NetUnreachable => {
                    icmpv4::ErrorKind::Unreachable { code: icmpv4::unreachable_code::NET_UNREACHABLE }
                }
                IcmpKind::PortUnreachable => {
                    icmpv4::ErrorKind::Unreachable { code: icmpv4::unreachable_code::PORT_UNREACHABLE }
                }
                IcmpKind::Rejected(Reject::Unreachable) => {
                    icmpv4::ErrorKind::Unreachable { code: icmpv4::unreachable_code::HOST_UNREACHABLE }
                }
                IcmpKind::Rejected(Reject::Prohibit) => {
                    icmpv4::ErrorKind::Unreachable { code: icmpv4::unreachable_code::ADMIN_PROHIBITED }
                }
            };
            let ident = self.next_ident();
            let area = pkt.receive_area();
            let Ok(n) = icmpv4::emit_error(
                &mut area[ETH + ipv4::HEADER_LEN..ETH + icmpv4::MIN_MTU],
                kind4,
                original,
                stack,
            ) else {
                b.pool.put(pkt);
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
            h.emit(&mut ipv4::Packet::new_unchecked(&mut area[ETH..ETH + ipv4::HEADER_LEN]));
            ETH + ipv4::HEADER_LEN + n
        };
        pkt.set_received(len);
        set_ethertype(pkt.frame_mut(), if v6 { EtherType::Ipv6 } else { EtherType::Ipv4 });
        Some(pkt)
    }
}

/// RFC 1812 section 4.3.2.7 / RFC 4443 section 2.4(e): no error about an ICMP error (for
/// IPv6 also one behind extension headers), a non-first fragment, a packet whose IPv6
/// extension headers cannot be followed, or a packet from a multicast, broadcast or
/// unspecified source.
pub(super) fn may_answer_with_error(original: &[u8]) -> bool {
    match ip::Version::of_packet(original) {
        Some(ip::Version::Ipv4) => {
            let Ok(ip) = ipv4::Packet::new_checked(original) else { return false };
            let src = ip.src_addr();
            if src.is_unspecified() || src.is_broadcast() || src.is_multicast() || ip.frag_offset() != 0 {
                return false;
            }
            if ip.protocol() == ipv4::protocol::ICMP {
                let t = icmpv4::peek_msg_type(ip.payload()).unwrap_or(255);
                return matches!(t, icmpv4::msg_type::ECHO_REQUEST | icmpv4::msg_type::ECHO_REPLY);
            }
            true
        }
        Some(ip::Version::Ipv6) => {
            let Ok(ip) = ipv6::Packet::new_checked(original) else { return false };
            let src = ip.src_addr();
            if src.is_unspecified() || src.is_multicast() {
                return false;
            }
            // The upper layer may sit behind extension headers: walk them, and stay
            // silent when the chain cannot be followed (cut short, too long).
            match ipv6_upper_layer(ip.next_header(), ip.payload()) {
                Some(Upper::Protocol(ipv6::protocol::IPV6_ICMP, icmp)) => {
                    icmpv6::peek_msg_type(icmp).is_some_and(|t| !icmpv6::is_error(t))
                }
                Some(Upper::Protocol(..)) => true,
                Some(Upper::LaterFragment) | None => false,
            }
        }
        None => false,
    }
}
