//! Pipeline tests, sans I/O: frames in, frames and counters out, on the pe1 / p / pe2
//! routers of the seed topology (ce1 -- pe1 -- p -- pe2 -- ce2).

mod fixtures;

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use fixtures::*;
use vmpls_dataplane::{DropReason, Event, Output, Packet, PortCaps};
use vmpls_fib::{DEFAULT_VRF, LabelAction, Nexthop, NexthopGroup, PrefixRoute, RouteTarget, TtlModel};
use vmpls_wire::{arp, icmpv4, icmpv6, ipv4, tcp, virtio_net};

fn ip(s: &str) -> std::net::IpAddr {
    s.parse().unwrap()
}

/// A frame from ce1's host to pe1.
fn from_ce1(ip: &[u8]) -> Vec<u8> {
    ipv4_frame(PE1_CE1_MAC, CE1_MAC, ip)
}

fn from_ce1_v6(ip: &[u8]) -> Vec<u8> {
    ipv6_frame(PE1_CE1_MAC, CE1_MAC, ip)
}

/// A labelled frame from pe1 to p.
fn to_p(entries: &[(u32, u8)], ip: &[u8]) -> Vec<u8> {
    mpls_frame(P_WEST_MAC, PE1_CORE_MAC, entries, ip)
}

/// A labelled frame from p to pe2.
fn to_pe2(entries: &[(u32, u8)], ip: &[u8]) -> Vec<u8> {
    mpls_frame(PE2_CORE_MAC, P_EAST_MAC, entries, ip)
}

fn tcp_ce1_ce2(ttl: u8, sport: u16) -> Vec<u8> {
    ipv4_tcp(CE1, CE2, ttl, sport, 5201, &pattern(100, sport as u8), true)
}

/// The one frame of `out`, on `port`.
fn only(out: &[Sent], port: u16) -> Parsed {
    assert_eq!(out.len(), 1, "expected one frame out, got {out:?}");
    assert_eq!(out[0].port, port, "output port");
    out[0].parse()
}

/// The IPv4 packet `got` is `sent` with the TTL lowered to `ttl` (checksum recomputed
/// and valid), every other byte the same.
fn assert_ipv4_forwarded(got: &Parsed, sent: &[u8], ttl: u8) {
    let h = got.ipv4();
    assert_eq!(h.ttl(), ttl, "IPv4 TTL");
    assert_eq!(got.l3.len(), sent.len(), "IP length");
    assert_eq!(&got.l3[..8], &sent[..8]);
    assert_eq!(got.l3[9], sent[9]);
    assert_eq!(&got.l3[12..], &sent[12..], "addresses and payload unchanged");
}

fn assert_ipv6_forwarded(got: &Parsed, sent: &[u8], hop_limit: u8) {
    assert_eq!(got.ipv6().hop_limit(), hop_limit, "IPv6 hop limit");
    assert_eq!(&got.l3[..7], &sent[..7]);
    assert_eq!(&got.l3[8..], &sent[8..], "addresses and payload unchanged");
}

/// A good frame through pe1 after a bad one: still forwarded.
fn pe1_still_forwards(r: &mut Router) {
    let ip = tcp_ce1_ce2(64, 40001);
    let p = only(&r.send(PE1_CE1, &from_ce1(&ip)), PE1_CORE);
    assert_eq!(p.stack(), vec![(1002, 63, true)]);
    assert_ipv4_forwarded(&p, &ip, 63);
}

/// A good frame through p after a bad one: still switched.
fn p_still_forwards(r: &mut Router) {
    let ip = tcp_ce1_ce2(63, 40001);
    let p = only(&r.send(P_WEST, &to_p(&[(1002, 63)], &ip)), P_EAST);
    assert_eq!(p.stack(), vec![(2002, 62, true)]);
    assert_eq!(p.l3, ip);
}

// ================================================================ PE ingress

#[test]
fn pe_ingress_ipv4_pushes_label_toward_next_hop_with_uniform_ttl() {
    let mut r = Router::pe1();
    let ip = tcp_ce1_ce2(64, 40000);
    let p = only(&r.send(PE1_CE1, &from_ce1(&ip)), PE1_CORE);
    assert_eq!(p.ethertype, 0x8847);
    assert_eq!(p.src, PE1_CORE_MAC, "Ethernet source = out port MAC");
    assert_eq!(p.dst, P_WEST_MAC, "Ethernet destination = next hop MAC");
    assert_eq!(p.stack(), vec![(1002, 63, true)], "label TTL = IP TTL after decrement");
    assert_ipv4_forwarded(&p, &ip, 63);
    assert_eq!(r.events(Event::LabelPush), 1);
    r.assert_no_drops();
}

#[test]
fn pe_ingress_ipv6_pushes_label_toward_next_hop_with_uniform_ttl() {
    let mut r = Router::pe1();
    let ip = ipv6_tcp(CE1_V6, CE2_V6, 64, 40000, 5201, &pattern(100, 3));
    let p = only(&r.send(PE1_CE1, &from_ce1_v6(&ip)), PE1_CORE);
    assert_eq!(p.ethertype, 0x8847);
    assert_eq!((p.src, p.dst), (PE1_CORE_MAC, P_WEST_MAC));
    assert_eq!(p.stack(), vec![(1002, 63, true)]);
    assert_ipv6_forwarded(&p, &ip, 63);
    r.assert_no_drops();
}

/// pe1 with extra routes, neighbours resolved.
fn pe1_with(extra: impl FnOnce(&mut vmpls_fib::FibBuilder)) -> Router {
    let mut b = pe1_builder();
    extra(&mut b);
    let mut r = Router::new(b, pe1_ports());
    r.resolve_all_pe1();
    r
}

fn route(b: &mut vmpls_fib::FibBuilder, prefix: &str, len: u8, via: &str, labels: &[u32], model: TtlModel) {
    b.add_prefix_route(DEFAULT_VRF, ip(prefix), len, push_route(single(PE1_CORE, via, labels), model))
        .unwrap();
}

#[test]
fn pe_ingress_pushes_a_stack_of_three_labels_bottom_of_stack_on_the_last() {
    let mut r = pe1_with(|b| {
        route(b, "198.18.3.0", 24, "198.18.10.2", &[100, 200, 300], TtlModel::Uniform);
        route(b, "2001:db8:3::", 64, "2001:db8:10::2", &[100, 200, 300], TtlModel::Uniform);
    });
    let ip4 = ipv4_tcp(CE1, "198.18.3.9", 20, 1, 2, &pattern(64, 0), false);
    let p = only(&r.send(PE1_CE1, &from_ce1(&ip4)), PE1_CORE);
    assert_eq!(p.stack(), vec![(100, 19, false), (200, 19, false), (300, 19, true)]);
    assert_eq!((p.src, p.dst, p.ethertype), (PE1_CORE_MAC, P_WEST_MAC, 0x8847));
    assert_ipv4_forwarded(&p, &ip4, 19);

    let ip6 = ipv6_tcp(CE1_V6, "2001:db8:3::9", 20, 1, 2, &pattern(64, 0));
    let p = only(&r.send(PE1_CE1, &from_ce1_v6(&ip6)), PE1_CORE);
    assert_eq!(p.stack(), vec![(100, 19, false), (200, 19, false), (300, 19, true)]);
    assert_ipv6_forwarded(&p, &ip6, 19);
    r.assert_no_drops();
}

#[test]
fn pe_ingress_pipe_model_pushes_labels_with_ttl_255() {
    let mut r = pe1_with(|b| {
        route(b, "198.18.4.0", 24, "198.18.10.2", &[1004, 1005], TtlModel::Pipe);
        route(b, "2001:db8:4::", 64, "2001:db8:10::2", &[1004], TtlModel::Pipe);
    });
    let ip4 = ipv4_tcp(CE1, "198.18.4.1", 64, 1, 2, &pattern(10, 0), true);
    let p = only(&r.send(PE1_CE1, &from_ce1(&ip4)), PE1_CORE);
    assert_eq!(p.stack(), vec![(1004, 255, false), (1005, 255, true)]);
    assert_ipv4_forwarded(&p, &ip4, 63);

    let ip6 = ipv6_tcp(CE1_V6, "2001:db8:4::1", 64, 1, 2, &pattern(10, 0));
    let p = only(&r.send(PE1_CE1, &from_ce1_v6(&ip6)), PE1_CORE);
    assert_eq!(p.stack(), vec![(1004, 255, true)]);
    assert_ipv6_forwarded(&p, &ip6, 63);
}

#[test]
fn pe_ingress_longest_prefix_match_picks_the_most_specific_route() {
    let mut r = pe1_with(|b| {
        route(b, "198.18.2.128", 25, "198.18.10.2", &[1502], TtlModel::Uniform);
        route(b, "198.18.0.0", 16, "198.18.10.2", &[1602], TtlModel::Uniform);
        route(b, "2001:db8:2::8000", 113, "2001:db8:10::2", &[1702], TtlModel::Uniform);
    });
    for (dst, label) in
        [("198.18.2.200", 1502), ("198.18.2.5", 1002), ("198.18.7.1", 1602), ("198.18.2.128", 1502)]
    {
        let ip = ipv4_tcp(CE1, dst, 64, 1, 2, &[], true);
        let p = only(&r.send(PE1_CE1, &from_ce1(&ip)), PE1_CORE);
        assert_eq!(p.stack(), vec![(label, 63, true)], "route for {dst}");
    }
    for (dst, label) in [("2001:db8:2::8001", 1702), ("2001:db8:2::7fff", 1002)] {
        let ip = ipv6_tcp(CE1_V6, dst, 64, 1, 2, &[]);
        let p = only(&r.send(PE1_CE1, &from_ce1_v6(&ip)), PE1_CORE);
        assert_eq!(p.stack(), vec![(label, 63, true)], "route for {dst}");
    }
    r.assert_no_drops();
}

#[test]
fn pe_ingress_plain_ip_route_forwards_without_labels() {
    let mut r = pe1_with(|b| {
        route(b, "198.18.5.0", 24, "198.18.10.2", &[], TtlModel::Uniform);
        route(b, "2001:db8:5::", 64, "2001:db8:10::2", &[], TtlModel::Uniform);
    });
    let ip4 = ipv4_tcp(CE1, "198.18.5.1", 64, 1, 2, &pattern(300, 9), true);
    let p = only(&r.send(PE1_CE1, &from_ce1(&ip4)), PE1_CORE);
    assert_eq!((p.src, p.dst, p.ethertype), (PE1_CORE_MAC, P_WEST_MAC, 0x0800));
    assert!(p.labels.is_empty());
    assert_ipv4_forwarded(&p, &ip4, 63);
    assert!(tcp_v4_checksum_ok(&p.l3));

    let ip6 = ipv6_tcp(CE1_V6, "2001:db8:5::1", 64, 1, 2, &pattern(300, 9));
    let p = only(&r.send(PE1_CE1, &from_ce1_v6(&ip6)), PE1_CORE);
    assert_eq!((p.src, p.dst, p.ethertype), (PE1_CORE_MAC, P_WEST_MAC, 0x86dd));
    assert_ipv6_forwarded(&p, &ip6, 63);
    assert_eq!(r.events(Event::IpForward), 2);
    assert_eq!(r.events(Event::LabelPush), 0);
}

#[test]
fn pe_connected_route_delivers_to_the_host_on_the_port() {
    let mut r = Router::pe1();
    // From the core, plain IP, to ce1's host on a connected subnet.
    let ip = ipv4_tcp("198.18.10.2", CE1, 9, 1, 2, &pattern(40, 1), false);
    let p = only(&r.send(PE1_CORE, &ipv4_frame(PE1_CORE_MAC, P_WEST_MAC, &ip)), PE1_CE1);
    assert_eq!((p.src, p.dst, p.ethertype), (PE1_CE1_MAC, CE1_MAC, 0x0800));
    assert_ipv4_forwarded(&p, &ip, 8);
}

// ================================================================ neighbour resolution

#[test]
fn unresolved_ipv4_next_hop_sends_arp_request_holds_frames_and_releases_them_on_reply() {
    let mut r = Router::new(pe1_builder(), pe1_ports());
    let ip1 = tcp_ce1_ce2(64, 1);
    let ip2 = tcp_ce1_ce2(64, 2);
    let p = only(&r.send(PE1_CE1, &from_ce1(&ip1)), PE1_CORE);
    assert_eq!((p.dst, p.src, p.ethertype), ([0xff; 6], PE1_CORE_MAC, 0x0806));
    let req = arp::Repr::parse(&arp::Packet::new_checked(&p.l3[..]).unwrap()).unwrap();
    assert_eq!(req.operation, arp::Operation::Request);
    assert_eq!(req.sender_hardware_addr, PE1_CORE_MAC);
    assert_eq!(req.sender_protocol_addr, v4("198.18.10.1"));
    assert_eq!(req.target_protocol_addr, v4("198.18.10.2"));
    assert_eq!(r.events(Event::ArpRequest), 1);
    // A second frame for the same next hop is held too, without another request.
    assert!(r.send(PE1_CE1, &from_ce1(&ip2)).is_empty());

    let reply = arp_frame(
        P_WEST_MAC,
        v4("198.18.10.2"),
        v4("198.18.10.1"),
        arp::Operation::Reply,
        PE1_CORE_MAC,
        PE1_CORE_MAC,
    );
    let out = r.send(PE1_CORE, &reply);
    assert_eq!(out.len(), 2, "both held frames released");
    for (s, ip) in out.iter().zip([&ip1, &ip2]) {
        assert_eq!(s.port, PE1_CORE);
        let p = s.parse();
        assert_eq!((p.dst, p.src), (P_WEST_MAC, PE1_CORE_MAC));
        assert_eq!(p.stack(), vec![(1002, 63, true)]);
        assert_ipv4_forwarded(&p, ip, 63);
    }
    // Resolved now: the next frame goes straight out.
    only(&r.send(PE1_CE1, &from_ce1(&ip1)), PE1_CORE);
    r.assert_no_drops();
}

#[test]
fn unresolved_ipv6_next_hop_sends_neighbor_solicitation_and_releases_on_advert() {
    let mut r = Router::new(pe1_builder(), pe1_ports());
    let ip = ipv6_tcp(CE1_V6, CE2_V6, 64, 1, 2, &pattern(50, 1));
    let p = only(&r.send(PE1_CE1, &from_ce1_v6(&ip)), PE1_CORE);
    let target = v6("2001:db8:10::2");
    let group = icmpv6::solicited_node_multicast(target);
    assert_eq!(group, v6("ff02::1:ff00:2"));
    assert_eq!((p.dst, p.src, p.ethertype), ([0x33, 0x33, 0xff, 0, 0, 2], PE1_CORE_MAC, 0x86dd));
    let h = p.ipv6();
    assert_eq!((h.src_addr(), h.dst_addr(), h.hop_limit()), (v6("2001:db8:10::1"), group, 255));
    let ns = icmpv6::NdRepr::parse(&p.icmpv6()).unwrap();
    assert_eq!(ns, icmpv6::NdRepr::NeighborSolicit { target, source_mac: Some(PE1_CORE_MAC) });
    assert_eq!(r.events(Event::NdSolicit), 1);

    let na = neighbor_advert(P_WEST_MAC, target, v6("2001:db8:10::1"), PE1_CORE_MAC);
    let p = only(&r.send(PE1_CORE, &na), PE1_CORE);
    assert_eq!((p.dst, p.src), (P_WEST_MAC, PE1_CORE_MAC));
    assert_eq!(p.stack(), vec![(1002, 63, true)]);
    assert_ipv6_forwarded(&p, &ip, 63);
    r.assert_no_drops();
}

/// BGP unnumbered (RFC 8950): an IPv6 route via the neighbour's link-local address. It
/// is asked for from the port's own link-local address (formed from its MAC), not from
/// its global one, and the advertisement to that address releases the packet.
#[test]
fn a_link_local_next_hop_is_asked_for_from_the_ports_link_local_address() {
    let peer = v6("fe80::5c2e:3bff:fe86:59be");
    let mut b = pe1_builder();
    b.add_prefix_route(
        DEFAULT_VRF,
        ip("2001:db8:7::"),
        64,
        push_route(single(PE1_CORE, "fe80::5c2e:3bff:fe86:59be", &[]), TtlModel::Uniform),
    )
    .unwrap();
    let mut r = Router::new(b, pe1_ports());
    let ip = ipv6_tcp(CE1_V6, "2001:db8:7::2", 64, 1, 2, &pattern(50, 3));
    let p = only(&r.send(PE1_CE1, &from_ce1_v6(&ip)), PE1_CORE);
    let own = icmpv6::link_local_from_mac(PE1_CORE_MAC);
    let h = p.ipv6();
    assert_eq!((h.src_addr(), h.dst_addr()), (own, icmpv6::solicited_node_multicast(peer)));
    let ns = icmpv6::NdRepr::parse(&p.icmpv6()).unwrap();
    assert_eq!(ns, icmpv6::NdRepr::NeighborSolicit { target: peer, source_mac: Some(PE1_CORE_MAC) });
    let na = neighbor_advert(P_WEST_MAC, peer, own, PE1_CORE_MAC);
    let p = only(&r.send(PE1_CORE, &na), PE1_CORE);
    assert_eq!((p.dst, p.src), (P_WEST_MAC, PE1_CORE_MAC));
    assert_ipv6_forwarded(&p, &ip, 63);
    r.assert_no_drops();
}

/// 6PE / 6VPE (RFC 4798, RFC 4659): an IPv6 route whose labelled next hop is an IPv4
/// address of the IPv4 core. The neighbour is found by ARP on the core port, and the IPv6
/// packet leaves under the labels to that neighbour's MAC.
#[test]
fn ipv6_route_over_an_ipv4_next_hop_arps_for_it_and_pushes_the_labels() {
    let mut b = pe1_builder();
    route(&mut b, "2001:db8:7::", 64, "198.18.10.2", &[100, 5002], TtlModel::Uniform);
    let mut r = Router::new(b, pe1_ports());
    let ip = ipv6_tcp(CE1_V6, "2001:db8:7::2", 64, 1, 2, &pattern(80, 4));
    let p = only(&r.send(PE1_CE1, &from_ce1_v6(&ip)), PE1_CORE);
    assert_eq!((p.dst, p.src, p.ethertype), ([0xff; 6], PE1_CORE_MAC, 0x0806), "an ARP request, no ND");
    let req = arp::Repr::parse(&arp::Packet::new_checked(&p.l3[..]).unwrap()).unwrap();
    assert_eq!(req.target_protocol_addr, v4("198.18.10.2"));
    assert_eq!(req.sender_protocol_addr, v4("198.18.10.1"));
    assert_eq!((r.events(Event::ArpRequest), r.events(Event::NdSolicit)), (1, 0));

    let reply = arp_frame(
        P_WEST_MAC,
        v4("198.18.10.2"),
        v4("198.18.10.1"),
        arp::Operation::Reply,
        PE1_CORE_MAC,
        PE1_CORE_MAC,
    );
    let p = only(&r.send(PE1_CORE, &reply), PE1_CORE);
    assert_eq!((p.dst, p.src, p.ethertype), (P_WEST_MAC, PE1_CORE_MAC, 0x8847));
    assert_eq!(p.stack(), vec![(100, 63, false), (5002, 63, true)]);
    assert_ipv6_forwarded(&p, &ip, 63);
    // Resolved now: the next packet goes straight out.
    let p = only(&r.send(PE1_CE1, &from_ce1_v6(&ip)), PE1_CORE);
    assert_eq!(p.stack(), vec![(100, 63, false), (5002, 63, true)]);
    r.assert_no_drops();
}

#[test]
fn unanswered_neighbor_requests_time_out_and_held_frames_count_as_unresolved() {
    let mut r = Router::new(pe1_builder(), pe1_ports());
    assert_eq!(r.send(PE1_CE1, &from_ce1(&tcp_ce1_ce2(64, 1))).len(), 1, "ARP request");
    assert!(r.send(PE1_CE1, &from_ce1(&tcp_ce1_ce2(64, 2))).is_empty());
    let mut requests = 1;
    for _ in 0..10 {
        for s in r.poll(Duration::from_millis(500)) {
            assert_eq!(s.port, PE1_CORE);
            assert_eq!(s.parse().ethertype, 0x0806, "only ARP requests while waiting");
            requests += 1;
        }
    }
    assert!((2..=5).contains(&requests), "{requests} ARP requests: retried, then given up");
    assert_eq!(r.events(Event::ArpRequest), requests as u64);
    r.assert_only_drop(DropReason::NeighborUnresolved, 2);
    // A late reply releases nothing.
    let reply = arp_frame(
        P_WEST_MAC,
        v4("198.18.10.2"),
        v4("198.18.10.1"),
        arp::Operation::Reply,
        PE1_CORE_MAC,
        PE1_CORE_MAC,
    );
    assert!(r.send(PE1_CORE, &reply).is_empty());
}

#[test]
fn frames_beyond_the_hold_queue_are_dropped_as_queue_full() {
    let mut r = Router::new(pe1_builder(), pe1_ports());
    let held = vmpls_dataplane::neighbor::NeighborConfig::default().max_held;
    for i in 0..held + 2 {
        r.send(PE1_CE1, &from_ce1(&tcp_ce1_ce2(64, u16::try_from(i).unwrap())));
    }
    r.assert_only_drop(DropReason::NeighborQueueFull, 2);
}

#[test]
fn arp_request_for_a_port_address_gets_a_reply() {
    let mut r = Router::new(pe1_builder(), pe1_ports());
    let req = arp_frame(CE1_MAC, v4(CE1), v4("198.18.1.1"), arp::Operation::Request, [0xff; 6], [0; 6]);
    let p = only(&r.send(PE1_CE1, &req), PE1_CE1);
    assert_eq!((p.dst, p.src, p.ethertype), (CE1_MAC, PE1_CE1_MAC, 0x0806));
    let reply = arp::Repr::parse(&arp::Packet::new_checked(&p.l3[..]).unwrap()).unwrap();
    assert_eq!(
        reply,
        arp::Repr {
            operation: arp::Operation::Reply,
            sender_hardware_addr: PE1_CE1_MAC,
            sender_protocol_addr: v4("198.18.1.1"),
            target_hardware_addr: CE1_MAC,
            target_protocol_addr: v4(CE1),
        }
    );
    assert_eq!(r.events(Event::ArpReply), 1);
    // Not ours (another host's address, or the other port's): no answer.
    let other = arp_frame(CE1_MAC, v4(CE1), v4("198.18.1.77"), arp::Operation::Request, [0xff; 6], [0; 6]);
    assert!(r.send(PE1_CE1, &other).is_empty());
    let other_port =
        arp_frame(CE1_MAC, v4(CE1), v4("198.18.10.1"), arp::Operation::Request, [0xff; 6], [0; 6]);
    assert!(r.send(PE1_CE1, &other_port).is_empty());
    r.assert_no_drops();
}

#[test]
fn neighbor_solicitation_for_a_port_address_gets_an_advert() {
    let mut r = Router::new(pe1_builder(), pe1_ports());
    let target = v6("2001:db8:1::1");
    let ns = neighbor_solicit(CE1_MAC, v6(CE1_V6), target, PE1_CE1_MAC, false);
    let p = only(&r.send(PE1_CE1, &ns), PE1_CE1);
    assert_eq!((p.dst, p.src, p.ethertype), (CE1_MAC, PE1_CE1_MAC, 0x86dd));
    let h = p.ipv6();
    assert_eq!((h.src_addr(), h.dst_addr(), h.hop_limit()), (target, v6(CE1_V6), 255));
    match icmpv6::NdRepr::parse(&p.icmpv6()).unwrap() {
        icmpv6::NdRepr::NeighborAdvert { solicited, override_, target: t, target_mac, .. } => {
            assert!(solicited && override_);
            assert_eq!((t, target_mac), (target, Some(PE1_CE1_MAC)));
        }
        other => panic!("expected an advert, got {other:?}"),
    }
    assert_eq!(r.events(Event::NdAdvert), 1);
    // For someone else's address: silence.
    let other = neighbor_solicit(CE1_MAC, v6(CE1_V6), v6("2001:db8:1::77"), PE1_CE1_MAC, false);
    assert!(r.send(PE1_CE1, &other).is_empty());
    r.assert_no_drops();
}

fn assert_echo_reply_v4(out: &[Sent], request: &[u8], from: &str) {
    let p = only(out, PE1_CE1);
    assert_eq!((p.dst, p.src, p.ethertype), (CE1_MAC, PE1_CE1_MAC, 0x0800));
    let h = p.ipv4();
    assert_eq!((h.src_addr(), h.dst_addr()), (v4(from), v4(CE1)));
    let icmp = p.icmpv4();
    assert_eq!((icmp.msg_type(), icmp.code()), (icmpv4::msg_type::ECHO_REPLY, 0));
    assert_eq!(&icmp.data(), &&request[28..], "echo data returned");
    assert_eq!((icmp.echo_ident(), icmp.echo_seq_no()), (0x1969, 7));
}

#[test]
fn echo_request_to_a_port_address_gets_a_reply() {
    let mut r = Router::pe1();
    let req = icmpv4_echo(CE1, "198.18.1.1", 64);
    assert_echo_reply_v4(&r.send(PE1_CE1, &from_ce1(&req)), &req, "198.18.1.1");
    // The core port's address is the router's too, reached through ce1's port.
    let req = icmpv4_echo(CE1, "198.18.10.1", 64);
    assert_echo_reply_v4(&r.send(PE1_CE1, &from_ce1(&req)), &req, "198.18.10.1");
    assert_eq!(r.events(Event::EchoReply), 2);
    r.assert_no_drops();
}

#[test]
fn echo_request_to_the_router_address_gets_a_reply() {
    let mut r = Router::pe1();
    let req = icmpv4_echo(CE1, "198.18.255.1", 1);
    assert_echo_reply_v4(&r.send(PE1_CE1, &from_ce1(&req)), &req, "198.18.255.1");
    r.assert_no_drops();
}

fn assert_echo_reply_v6(out: &[Sent], request: &[u8], from: &str) {
    let p = only(out, PE1_CE1);
    assert_eq!((p.dst, p.src, p.ethertype), (CE1_MAC, PE1_CE1_MAC, 0x86dd));
    let h = p.ipv6();
    assert_eq!((h.src_addr(), h.dst_addr()), (v6(from), v6(CE1_V6)));
    let icmp = p.icmpv6();
    assert_eq!((icmp.msg_type(), icmp.code()), (icmpv6::msg_type::ECHO_REPLY, 0));
    assert_eq!(icmp.data(), &request[48..]);
    assert_eq!((icmp.echo_ident(), icmp.echo_seq_no()), (0x1969, 7));
}

#[test]
fn echo_request_v6_to_a_port_address_gets_a_reply() {
    let mut r = Router::pe1();
    let req = icmpv6_echo(CE1_V6, "2001:db8:1::1", 64);
    assert_echo_reply_v6(&r.send(PE1_CE1, &from_ce1_v6(&req)), &req, "2001:db8:1::1");
    r.assert_no_drops();
}

#[test]
fn echo_request_v6_to_the_router_address_gets_a_reply() {
    let mut r = Router::pe1();
    let req = icmpv6_echo(CE1_V6, "2001:db8:ff::1", 64);
    assert_echo_reply_v6(&r.send(PE1_CE1, &from_ce1_v6(&req)), &req, "2001:db8:ff::1");
    r.assert_no_drops();
}

// ================================================================ P router

/// p with extra label routes, neighbours resolved.
fn p_with(extra: impl FnOnce(&mut vmpls_fib::FibBuilder)) -> Router {
    let mut b = p_builder();
    extra(&mut b);
    let mut r = Router::new(b, p_ports());
    r.resolve_all_p();
    r
}

#[test]
fn p_swaps_the_top_label_and_decrements_its_ttl() {
    let mut r = Router::p();
    let ip = tcp_ce1_ce2(63, 40000);
    let p = only(&r.send(P_WEST, &to_p(&[(1002, 63)], &ip)), P_EAST);
    assert_eq!((p.src, p.dst, p.ethertype), (P_EAST_MAC, PE2_CORE_MAC, 0x8847));
    assert_eq!(p.stack(), vec![(2002, 62, true)]);
    assert_eq!(p.l3, ip, "the IP packet is not touched by a P router");
    // And the reverse LSP.
    let p = only(&r.send(P_EAST, &mpls_frame(P_EAST_MAC, PE2_CORE_MAC, &[(1001, 40)], &ip)), P_WEST);
    assert_eq!((p.src, p.dst), (P_WEST_MAC, PE1_CORE_MAC));
    assert_eq!(p.stack(), vec![(2001, 39, true)]);
    assert_eq!(r.events(Event::LabelSwap), 2);
    r.assert_no_drops();
}

#[test]
fn p_swaps_to_two_labels_keeping_bottom_of_stack_last() {
    let mut r = p_with(|b| {
        b.add_label_route(1003, swap_route(single(P_EAST, "198.18.20.2", &[2003, 3003]))).unwrap();
    });
    let ip = tcp_ce1_ce2(63, 40000);
    let p = only(&r.send(P_WEST, &to_p(&[(1003, 63)], &ip)), P_EAST);
    assert_eq!(p.stack(), vec![(2003, 62, false), (3003, 62, true)]);
    assert_eq!(p.l3, ip);
    // Over a label that stays: neither new entry is the bottom.
    let p = only(&r.send(P_WEST, &to_p(&[(1003, 63), (5000, 17)], &ip)), P_EAST);
    assert_eq!(p.stack(), vec![(2003, 62, false), (3003, 62, false), (5000, 17, true)]);
    assert_eq!(p.l3, ip);
    r.assert_no_drops();
}

#[test]
fn p_php_with_implicit_null_out_label_exposes_ip_with_label_ttl_minus_one() {
    let mut r = p_with(|b| {
        b.add_label_route(1004, swap_route(single(P_EAST, "198.18.20.2", &[3]))).unwrap();
    });
    let fib = r.dp.fib().load_full();
    match &fib.labels.get(1004).unwrap().action() {
        LabelAction::Forward(g) => assert!(g.nexthops()[0].labels.is_empty(), "fib normalises [3] to a pop"),
        other => panic!("{other:?}"),
    }
    let ip = tcp_ce1_ce2(64, 40000);
    let p = only(&r.send(P_WEST, &to_p(&[(1004, 10)], &ip)), P_EAST);
    assert_eq!((p.src, p.dst, p.ethertype), (P_EAST_MAC, PE2_CORE_MAC, 0x0800));
    assert!(p.labels.is_empty());
    assert_ipv4_forwarded(&p, &ip, 9);
    assert_eq!(r.events(Event::LabelPop), 1);
    r.assert_no_drops();
}

#[test]
fn p_php_with_empty_out_labels_exposes_ipv6_with_label_ttl_minus_one() {
    let mut r = p_with(|b| {
        b.add_label_route(1005, swap_route(single(P_EAST, "198.18.20.2", &[]))).unwrap();
    });
    let ip = ipv6_tcp(CE1_V6, CE2_V6, 64, 1, 2, &pattern(80, 2));
    let p = only(&r.send(P_WEST, &to_p(&[(1005, 10)], &ip)), P_EAST);
    assert_eq!((p.dst, p.ethertype), (PE2_CORE_MAC, 0x86dd));
    assert_ipv6_forwarded(&p, &ip, 9);
    // Also for IPv4 behind the same label.
    let ip4 = tcp_ce1_ce2(64, 1);
    let p = only(&r.send(P_WEST, &to_p(&[(1005, 30)], &ip4)), P_EAST);
    assert_eq!(p.ethertype, 0x0800);
    assert_ipv4_forwarded(&p, &ip4, 29);
    r.assert_no_drops();
}

#[test]
fn p_pops_then_swaps_the_next_label() {
    let mut r = p_with(|b| {
        b.add_label_route(1006, pop_route()).unwrap();
    });
    let ip = tcp_ce1_ce2(64, 40000);
    let p = only(&r.send(P_WEST, &to_p(&[(1006, 50), (1002, 63)], &ip)), P_EAST);
    // Uniform: the popped TTL (50) moves down (min with 63), then the swap takes one.
    assert_eq!(p.stack(), vec![(2002, 49, true)]);
    assert_eq!(p.l3, ip);
    assert_eq!((r.events(Event::LabelPop), r.events(Event::LabelSwap)), (1, 1));
    r.assert_no_drops();
}

#[test]
fn egress_pe_pops_and_routes_ipv4_by_the_prefix_table() {
    let mut r = Router::pe2();
    let ip = tcp_ce1_ce2(63, 40000);
    let p = only(&r.send(PE2_CORE, &to_pe2(&[(2002, 62)], &ip)), PE2_CE2);
    assert_eq!((p.src, p.dst, p.ethertype), (PE2_CE2_MAC, CE2_MAC, 0x0800));
    assert_ipv4_forwarded(&p, &ip, 61);
    assert!(tcp_v4_checksum_ok(&p.l3));
    assert_eq!(r.events(Event::LabelPop), 1);
    r.assert_no_drops();
}

#[test]
fn egress_pe_pops_and_routes_ipv6_by_the_prefix_table() {
    let mut r = Router::pe2();
    let ip = ipv6_tcp(CE1_V6, CE2_V6, 63, 1, 2, &pattern(70, 1));
    let p = only(&r.send(PE2_CORE, &to_pe2(&[(2002, 62)], &ip)), PE2_CE2);
    assert_eq!((p.src, p.dst, p.ethertype), (PE2_CE2_MAC, CE2_MAC, 0x86dd));
    assert_ipv6_forwarded(&p, &ip, 61);
    r.assert_no_drops();
}

#[test]
fn explicit_null_labels_are_accepted_on_input() {
    let mut r = Router::pe2();
    let ip4 = tcp_ce1_ce2(63, 1);
    let p = only(&r.send(PE2_CORE, &to_pe2(&[(0, 62)], &ip4)), PE2_CE2);
    assert_eq!((p.dst, p.ethertype), (CE2_MAC, 0x0800));
    assert_ipv4_forwarded(&p, &ip4, 61);

    let ip6 = ipv6_tcp(CE1_V6, CE2_V6, 63, 1, 2, &pattern(70, 1));
    let p = only(&r.send(PE2_CORE, &to_pe2(&[(2, 62)], &ip6)), PE2_CE2);
    assert_eq!((p.dst, p.ethertype), (CE2_MAC, 0x86dd));
    assert_ipv6_forwarded(&p, &ip6, 61);

    // Under the egress label too.
    let p = only(&r.send(PE2_CORE, &to_pe2(&[(2002, 62), (0, 62)], &ip4)), PE2_CE2);
    assert_ipv4_forwarded(&p, &ip4, 61);
    r.assert_no_drops();
}

// ================================================================ ECMP

const NH2_MAC: [u8; 6] = [2, 0, 0, 0, 0x10, 0x03];

fn weighted(a: Nexthop, b: Nexthop) -> NexthopGroup {
    NexthopGroup::new(vec![Nexthop { weight: 2, ..a }, Nexthop { weight: 1, ..b }]).unwrap()
}

/// Asserts a 2:1 split within 3 percentage points.
fn assert_two_to_one(first: usize, total: usize) {
    let share = first as f64 / total as f64;
    assert!((share - 2.0 / 3.0).abs() < 0.03, "share of the weight-2 next hop: {share:.3} ({first}/{total})");
}

#[test]
fn ecmp_ip_flows_split_by_weight_and_stay_on_one_next_hop() {
    let mut r = pe1_with(|b| {
        let g = weighted(
            Nexthop::new(PE1_CORE, Some(ip("198.18.10.2")), vec![1002]),
            Nexthop::new(PE1_CORE, Some(ip("198.18.10.3")), vec![1102]),
        );
        b.add_prefix_route(DEFAULT_VRF, ip("198.18.6.0"), 24, push_route(g, TtlModel::Uniform)).unwrap();
    });
    r.learn(PE1_CORE, "198.18.10.3", NH2_MAC);
    let mut chosen: HashMap<u16, u32> = HashMap::new();
    for round in 0..3u8 {
        for i in 0..3000u16 {
            let sport = 10000 + i;
            // Same flow, other TTL and payload each round.
            let ip = ipv4_tcp(
                CE1,
                "198.18.6.7",
                64 - round,
                sport,
                5201,
                &pattern(20 + usize::from(round), round),
                true,
            );
            let p = only(&r.send(PE1_CE1, &from_ce1(&ip)), PE1_CORE);
            let label = p.labels[0].label;
            let mac = if label == 1002 { P_WEST_MAC } else { NH2_MAC };
            assert_eq!(p.dst, mac, "labels and MAC of one next hop");
            let first = *chosen.entry(sport).or_insert(label);
            assert_eq!(first, label, "flow {sport} moved between next hops");
        }
    }
    let heavy = chosen.values().filter(|&&l| l == 1002).count();
    assert_two_to_one(heavy, chosen.len());
    r.assert_no_drops();
}

fn p_ecmp() -> Router {
    p_with(|b| {
        let g = weighted(
            Nexthop::new(P_EAST, Some(ip("198.18.20.2")), vec![2002]),
            Nexthop::new(P_WEST, Some(ip("198.18.10.1")), vec![2001]),
        );
        b.add_label_route(1007, swap_route(g)).unwrap();
    })
}

#[test]
fn ecmp_labelled_flows_split_by_inner_flow_and_stay_on_one_next_hop() {
    let mut r = p_ecmp();
    let mut chosen: HashMap<u16, u16> = HashMap::new();
    for round in 0..2u8 {
        for i in 0..3000u16 {
            let ip = ipv4_tcp(CE1, CE2, 60, 20000 + i, 80, &pattern(10, round), true);
            let out = r.send(P_WEST, &to_p(&[(1007, 60 - round)], &ip));
            assert_eq!(out.len(), 1);
            let first = *chosen.entry(i).or_insert(out[0].port);
            assert_eq!(first, out[0].port, "flow {i} moved");
        }
    }
    assert_two_to_one(chosen.values().filter(|&&p| p == P_EAST).count(), chosen.len());
    r.assert_no_drops();
}

#[test]
fn ecmp_labelled_hash_includes_the_labels_below_the_top() {
    let mut r = p_ecmp();
    let ip = tcp_ce1_ce2(60, 1);
    let east = (0..3000u32)
        .filter(|i| {
            let out = r.send(P_WEST, &to_p(&[(1007, 60), (16 + i, 60)], &ip));
            assert_eq!(out.len(), 1);
            out[0].port == P_EAST
        })
        .count();
    assert_two_to_one(east, 3000);
}

#[test]
fn ecmp_entropy_label_alone_decides() {
    let mut r = p_ecmp();
    // One entropy label, many inner flows: one next hop.
    let ports: std::collections::HashSet<u16> = (0..200u16)
        .map(|i| {
            let ip = ipv4_tcp(CE1, CE2, 60, 30000 + i, 80, &[], true);
            let out = r.send(P_WEST, &to_p(&[(1007, 60), (7, 60), (777_777, 60)], &ip));
            assert_eq!(out.len(), 1);
            let p = out[0].parse();
            assert_eq!(p.stack()[1..], [(7, 60, false), (777_777, 60, true)], "ELI and EL kept");
            out[0].port
        })
        .collect();
    assert_eq!(ports.len(), 1, "the entropy label alone picks the next hop");
    // Many entropy labels, one inner flow: spread by weight.
    let ip = ipv4_tcp(CE1, CE2, 60, 30000, 80, &[], true);
    let east = (0..3000u32)
        .filter(|i| {
            let out = r.send(P_WEST, &to_p(&[(1007, 60), (7, 60), (100_000 + i, 60)], &ip));
            out[0].port == P_EAST
        })
        .count();
    assert_two_to_one(east, 3000);
}

// ================================================================ TTL

#[test]
fn label_ttl_expiry_at_p_sends_time_exceeded_with_label_stack_along_the_lsp() {
    let mut r = Router::p();
    let probe = ipv4_udp(CE1, CE2, 1, &pattern(32, 7));
    let p = only(&r.send(P_WEST, &to_p(&[(1002, 1)], &probe)), P_EAST);
    // Forward along the LSP: p's out port for 1002, the swapped label, a fresh TTL.
    assert_eq!((p.src, p.dst, p.ethertype), (P_EAST_MAC, PE2_CORE_MAC, 0x8847));
    assert_eq!(p.labels.len(), 1);
    assert_eq!((p.labels[0].label, p.labels[0].bottom), (2002, true));
    assert!(p.labels[0].ttl >= 254, "fresh label TTL, got {}", p.labels[0].ttl);
    let h = p.ipv4();
    assert_eq!((h.src_addr(), h.dst_addr()), (v4("198.18.255.2"), v4(CE1)), "from the router address");
    let icmp = p.icmpv4();
    assert_eq!((icmp.msg_type(), icmp.code()), (icmpv4::msg_type::TIME_EXCEEDED, 0));
    assert_eq!(icmp.rfc4884_length(), 32, "RFC 4884 length: 128 bytes");
    assert_eq!(&icmp.data()[..probe.len()], &probe[..], "quotes the datagram");
    assert_eq!(extension_stack(icmp.extension()), vec![word(1002, 1, true)], "the received stack");
    assert_eq!(r.drops(DropReason::LabelTtlExpired), 1);
    assert_eq!((r.events(Event::IcmpTimeExceeded), r.events(Event::IcmpAlongLsp)), (1, 1));
}

#[test]
fn label_ttl_expiry_at_p_quotes_a_two_label_stack() {
    let mut r = p_with(|b| {
        b.add_label_route(1003, swap_route(single(P_EAST, "198.18.20.2", &[2003]))).unwrap();
    });
    let probe = ipv6_tcp(CE1_V6, CE2_V6, 1, 1, 2, &[]);
    let p = only(&r.send(P_WEST, &to_p(&[(1003, 1), (5000, 9)], &probe)), P_EAST);
    assert_eq!(p.stack()[1..], [(5000, 255, true)]);
    assert_eq!(p.stack()[0].0, 2003);
    let h = p.ipv6();
    assert_eq!((h.src_addr(), h.dst_addr()), (v6("2001:db8:ff::2"), v6(CE1_V6)));
    let icmp = p.icmpv6();
    assert_eq!((icmp.msg_type(), icmp.code()), (icmpv6::msg_type::TIME_EXCEEDED, 0));
    assert_eq!(icmp.rfc4884_length(), 16);
    assert_eq!(extension_stack(icmp.extension()), vec![word(1003, 1, false), word(5000, 9, true)]);
}

/// Red's VPN label at pe2 (pops into VRF red), under p's transport label.
const RED_VPN_LABEL: u32 = 3000;

/// A traceroute probe from a CE across a BGP/MPLS VPN (issue 23): at p the transport
/// label's TTL runs out, and p has no route to the customer's address. The time exceeded
/// goes on down the LSP (RFC 3032 section 2.3.2) under both received labels, toward the
/// same next hop, and quotes them (RFC 4950).
#[test]
fn vpn_label_ttl_expiry_at_p_sends_time_exceeded_down_the_lsp_under_both_labels() {
    let mut r = Router::p();
    let probe = ipv4_udp(CE1, CE2, 1, &pattern(32, 7));
    let p = only(&r.send(P_WEST, &to_p(&[(1002, 1), (RED_VPN_LABEL, 1)], &probe)), P_EAST);
    assert_eq!((p.src, p.dst, p.ethertype), (P_EAST_MAC, PE2_CORE_MAC, 0x8847), "the LSP's next hop");
    // Fresh TTLs (255), then switched as the probe would have been: 1002 swapped to 2002
    // (its TTL decremented), the VPN label carried under it.
    assert_eq!(p.stack(), vec![(2002, 254, false), (RED_VPN_LABEL, 255, true)]);
    let h = p.ipv4();
    assert_eq!((h.src_addr(), h.dst_addr()), (v4("198.18.255.2"), v4(CE1)), "from p, to the customer");
    let icmp = p.icmpv4();
    assert_eq!((icmp.msg_type(), icmp.code()), (icmpv4::msg_type::TIME_EXCEEDED, 0));
    assert_eq!(&icmp.data()[..probe.len()], &probe[..], "quotes the datagram");
    assert_eq!(
        extension_stack(icmp.extension()),
        vec![word(1002, 1, false), word(RED_VPN_LABEL, 1, true)],
        "the received stack, both labels"
    );
    r.assert_only_drop(DropReason::LabelTtlExpired, 1);
    assert_eq!((r.events(Event::IcmpTimeExceeded), r.events(Event::IcmpAlongLsp)), (1, 1));
}

/// The same where p is the penultimate hop of the transport LSP (LDP's implicit null):
/// the error leaves under the VPN label alone, as the probe would have.
#[test]
fn vpn_label_ttl_expiry_at_a_penultimate_p_sends_time_exceeded_under_the_vpn_label() {
    let mut r = p_with(|b| {
        b.add_label_route(1005, swap_route(single(P_EAST, "198.18.20.2", &[]))).unwrap();
    });
    let probe = ipv4_udp(CE1, CE2, 1, &pattern(32, 7));
    let p = only(&r.send(P_WEST, &to_p(&[(1005, 1), (RED_VPN_LABEL, 1)], &probe)), P_EAST);
    assert_eq!((p.dst, p.ethertype), (PE2_CORE_MAC, 0x8847));
    assert_eq!(p.stack(), vec![(RED_VPN_LABEL, 254, true)], "transport popped, uniform TTL");
    assert_eq!(p.ipv4().dst_addr(), v4(CE1));
    assert_eq!(p.icmpv4().msg_type(), icmpv4::msg_type::TIME_EXCEEDED);
    assert_eq!(
        extension_stack(p.icmpv4().extension()),
        vec![word(1005, 1, false), word(RED_VPN_LABEL, 1, true)]
    );
    r.assert_only_drop(DropReason::LabelTtlExpired, 1);
    assert_eq!(r.events(Event::IcmpAlongLsp), 1);
}

/// pe2 with red's site in VRF red: 2002 pops (the transport), 3000 pops into red, and
/// red's way back to ce1's subnet pushes p's label 1001 over pe1's VPN label 4001.
fn pe2_with_red_vrf() -> Router {
    let mut b = vmpls_fib::Fib::builder();
    b.router_v4(v4("198.18.255.3"));
    let red = b.add_vrf("red").unwrap();
    b.add_port("core", DEFAULT_VRF, &[(ip("198.18.20.2"), 24)]).unwrap();
    b.add_port("ce2", red, &[(ip("198.18.2.1"), 24)]).unwrap();
    b.add_label_route(2002, pop_route()).unwrap();
    b.add_label_route(
        RED_VPN_LABEL,
        vmpls_fib::LabelRoute::new(LabelAction::PopAndLookup { vrf: red }, TtlModel::Uniform),
    )
    .unwrap();
    b.add_prefix_route(
        red,
        ip("198.18.1.0"),
        24,
        push_route(single(PE2_CORE, "198.18.20.1", &[1001, 4001]), TtlModel::Uniform),
    )
    .unwrap();
    let mut r = Router::new(b, pe2_ports());
    r.learn(PE2_CORE, "198.18.20.1", P_EAST_MAC);
    r.learn(PE2_CE2, CE2, CE2_MAC);
    r
}

/// p's error, sent down the LSP, reaches the egress PE, which pops it into the
/// customer's VRF and routes it back to the CE over the VPN, untouched but for the TTL:
/// the hop a CE's traceroute shows for p.
#[test]
fn time_exceeded_sent_down_the_lsp_is_routed_back_to_the_ce_by_the_egress_pe_in_its_vrf() {
    let mut p = Router::p();
    let probe = ipv4_udp(CE1, CE2, 1, &pattern(32, 7));
    let out = p.send(P_WEST, &to_p(&[(1002, 1), (RED_VPN_LABEL, 1)], &probe));
    assert_eq!(out.len(), 1);
    let from_p = out[0].parse();
    let mut pe2 = pe2_with_red_vrf();
    let back = only(&pe2.send(PE2_CORE, &out[0].frame), PE2_CORE);
    assert_eq!((back.src, back.dst, back.ethertype), (PE2_CORE_MAC, P_EAST_MAC, 0x8847));
    let h = back.ipv4();
    assert_eq!((h.src_addr(), h.dst_addr()), (v4("198.18.255.2"), v4(CE1)), "still p's error");
    assert_eq!(h.ttl(), 253, "254 after the swap at p, kept through both pops (uniform), then routed");
    assert_eq!(
        back.stack(),
        vec![(1001, 253, false), (4001, 253, true)],
        "red's route back: transport over pe1's VPN label"
    );
    let ip_len = h.header_len();
    assert_eq!(back.l3[ip_len..], from_p.l3[ip_len..], "the ICMP message unchanged");
    assert_eq!(
        extension_stack(back.icmpv4().extension()),
        vec![word(1002, 1, false), word(RED_VPN_LABEL, 1, true)]
    );
    pe2.assert_no_drops();
}

/// At the egress PE the VPN label's TTL runs out: the error is routed in the label's VRF
/// back over the VPN, from the VRF's own address, not the core's router address (which
/// the customer cannot reach, and which may be one of its own).
#[test]
fn vpn_label_ttl_expiry_at_the_egress_pe_answers_from_the_vrfs_address() {
    let mut r = pe2_with_red_vrf();
    let probe = ipv4_udp(CE1, CE2, 1, &pattern(32, 7));
    let p = only(&r.send(PE2_CORE, &to_pe2(&[(RED_VPN_LABEL, 1)], &probe)), PE2_CORE);
    assert_eq!(p.stack().iter().map(|e| e.0).collect::<Vec<_>>(), [1001, 4001], "red's way back");
    let h = p.ipv4();
    assert_eq!((h.src_addr(), h.dst_addr()), (v4("198.18.2.1"), v4(CE1)), "from red's address");
    let icmp = p.icmpv4();
    assert_eq!((icmp.msg_type(), icmp.code()), (icmpv4::msg_type::TIME_EXCEEDED, 0));
    assert_eq!(extension_stack(icmp.extension()), vec![word(RED_VPN_LABEL, 1, true)]);
    r.assert_only_drop(DropReason::LabelTtlExpired, 1);
    assert_eq!(r.events(Event::IcmpAlongLsp), 0, "routed, not sent along an LSP");
}

/// A CE's probe expiring at its PE is answered from the PE's address in the CE's VRF.
#[test]
fn ip_ttl_expiry_in_a_vrf_answers_from_the_ports_address() {
    let mut r = pe2_with_red_vrf();
    let probe = ipv4_udp(CE2, CE1, 1, &pattern(32, 7));
    let p = only(&r.send(PE2_CE2, &ipv4_frame(PE2_CE2_MAC, CE2_MAC, &probe)), PE2_CE2);
    assert_eq!((p.dst, p.ethertype), (CE2_MAC, 0x0800));
    let h = p.ipv4();
    assert_eq!((h.src_addr(), h.dst_addr()), (v4("198.18.2.1"), v4(CE2)));
    assert_eq!(p.icmpv4().msg_type(), icmpv4::msg_type::TIME_EXCEEDED);
    r.assert_only_drop(DropReason::IpTtlExpired, 1);
}

#[test]
fn ip_ttl_expiry_at_ingress_pe_sends_time_exceeded_back_to_the_customer() {
    let mut r = Router::pe1();
    let probe = ipv4_udp(CE1, CE2, 1, &pattern(32, 7));
    let p = only(&r.send(PE1_CE1, &from_ce1(&probe)), PE1_CE1);
    assert_eq!((p.src, p.dst, p.ethertype), (PE1_CE1_MAC, CE1_MAC, 0x0800));
    let h = p.ipv4();
    assert_eq!((h.src_addr(), h.dst_addr()), (v4("198.18.255.1"), v4(CE1)));
    let icmp = p.icmpv4();
    assert_eq!((icmp.msg_type(), icmp.code()), (icmpv4::msg_type::TIME_EXCEEDED, 0));
    assert_eq!(icmp.rfc4884_length(), 0, "no label stack to quote");
    assert_eq!(icmp.data(), &probe[..]);
    r.assert_only_drop(DropReason::IpTtlExpired, 1);
}

/// pe1 with a more specific route than the LSP's to CE2 (the lower half of its subnet,
/// which holds CE2's addresses) that does `target`.
fn pe1_routing_ce2_to(target: RouteTarget) -> Router {
    pe1_with(|b| {
        b.add_prefix_route(DEFAULT_VRF, ip("198.18.2.0"), 25, PrefixRoute::new(target.clone())).unwrap();
        b.add_prefix_route(DEFAULT_VRF, ip("2001:db8:2::"), 96, PrefixRoute::new(target)).unwrap();
    })
}

#[test]
fn reject_routes_answer_with_the_unreachable_linux_sends_and_blackholes_stay_silent() {
    use vmpls_fib::Reject;
    // Linux's codes for its route types: unreachable is host unreachable (IPv6 no route),
    // prohibit administratively prohibited (IPv4 13, IPv6 1).
    for (reject, code4, code6, reason) in [
        (Reject::Unreachable, icmpv4::unreachable_code::HOST_UNREACHABLE, 0, DropReason::UnreachableRoute),
        (
            Reject::Prohibit,
            icmpv4::unreachable_code::ADMIN_PROHIBITED,
            icmpv6::unreachable_code::ADMIN_PROHIBITED,
            DropReason::ProhibitedRoute,
        ),
    ] {
        let mut r = pe1_routing_ce2_to(RouteTarget::Reject(reject));
        let probe = ipv4_udp(CE1, CE2, 64, &pattern(32, 7));
        let p = only(&r.send(PE1_CE1, &from_ce1(&probe)), PE1_CE1);
        assert_eq!((p.dst, p.ethertype), (CE1_MAC, 0x0800));
        assert_eq!((p.ipv4().src_addr(), p.ipv4().dst_addr()), (v4("198.18.255.1"), v4(CE1)));
        let icmp = p.icmpv4();
        assert_eq!((icmp.msg_type(), icmp.code()), (icmpv4::msg_type::DST_UNREACHABLE, code4), "{reject:?}");
        assert_eq!(icmp.data(), &probe[..], "{reject:?} quotes the packet");
        r.assert_only_drop(reason, 1);

        let probe = ipv6_tcp(CE1_V6, CE2_V6, 64, 1, 2, &pattern(16, 1));
        let p = only(&r.send(PE1_CE1, &from_ce1_v6(&probe)), PE1_CE1);
        assert_eq!(p.ipv6().dst_addr(), v6(CE1_V6));
        let icmp = p.icmpv6();
        assert_eq!((icmp.msg_type(), icmp.code()), (icmpv6::msg_type::DST_UNREACHABLE, code6), "{reject:?}");
        assert_eq!(icmp.data(), &probe[..]);
        r.assert_only_drop(reason, 2);
    }
    let mut r = pe1_routing_ce2_to(RouteTarget::Blackhole);
    assert!(r.send(PE1_CE1, &from_ce1(&ipv4_udp(CE1, CE2, 64, &pattern(32, 7)))).is_empty());
    r.assert_only_drop(DropReason::Blackhole, 1);
}

#[test]
fn ipv6_hop_limit_expiry_at_ingress_pe_sends_time_exceeded_back_to_the_customer() {
    let mut r = Router::pe1();
    let probe = ipv6_tcp(CE1_V6, CE2_V6, 1, 1, 2, &pattern(16, 1));
    let p = only(&r.send(PE1_CE1, &from_ce1_v6(&probe)), PE1_CE1);
    assert_eq!((p.dst, p.ethertype), (CE1_MAC, 0x86dd));
    let h = p.ipv6();
    assert_eq!((h.src_addr(), h.dst_addr()), (v6("2001:db8:ff::1"), v6(CE1_V6)));
    let icmp = p.icmpv6();
    assert_eq!((icmp.msg_type(), icmp.code()), (icmpv6::msg_type::TIME_EXCEEDED, 0));
    assert_eq!(icmp.data(), &probe[..]);
    r.assert_only_drop(DropReason::IpTtlExpired, 1);
}

#[test]
fn label_ttl_expiry_at_egress_pe_sends_time_exceeded_routed_over_the_reverse_lsp() {
    let mut r = Router::pe2();
    let probe = ipv4_udp(CE1, CE2, 1, &pattern(32, 7));
    let p = only(&r.send(PE2_CORE, &to_pe2(&[(2002, 1)], &probe)), PE2_CORE);
    assert_eq!((p.src, p.dst, p.ethertype), (PE2_CORE_MAC, P_EAST_MAC, 0x8847));
    assert_eq!(p.labels.len(), 1);
    assert_eq!((p.labels[0].label, p.labels[0].bottom), (1001, true), "the reverse LSP's label");
    let h = p.ipv4();
    assert_eq!((h.src_addr(), h.dst_addr()), (v4("198.18.255.3"), v4(CE1)));
    assert_eq!(p.labels[0].ttl, h.ttl(), "uniform push copies the IP TTL");
    let icmp = p.icmpv4();
    assert_eq!((icmp.msg_type(), icmp.code()), (icmpv4::msg_type::TIME_EXCEEDED, 0));
    assert_eq!(&icmp.data()[..probe.len()], &probe[..]);
    assert_eq!(extension_stack(icmp.extension()), vec![word(2002, 1, true)]);
    r.assert_only_drop(DropReason::LabelTtlExpired, 1);
}

/// Issue 13, item 1: pe2 with its customer in VRF "cust": label 2002 pops into it, and
/// the way back to ce1 (push 1001) is a route of that VRF only.
#[test]
fn label_ttl_expiry_at_a_vrf_egress_sends_time_exceeded_routed_in_the_labels_vrf() {
    let mut b = vmpls_fib::Fib::builder();
    b.router_v4(v4("198.18.255.3")).router_v6(v6("2001:db8:ff::3"));
    let cust = b.add_vrf("cust").unwrap();
    b.add_port("core", DEFAULT_VRF, &[(ip("198.18.20.2"), 24), (ip("2001:db8:20::2"), 64)]).unwrap();
    b.add_port("ce2", cust, &[(ip("198.18.2.1"), 24), (ip("2001:db8:2::1"), 64)]).unwrap();
    b.add_label_route(
        2002,
        vmpls_fib::LabelRoute::new(LabelAction::PopAndLookup { vrf: cust }, TtlModel::Uniform),
    )
    .unwrap();
    b.add_prefix_route(
        cust,
        ip("198.18.1.0"),
        24,
        push_route(single(PE2_CORE, "198.18.20.1", &[1001]), TtlModel::Uniform),
    )
    .unwrap();
    let mut r = Router::new(b, pe2_ports());
    r.learn(PE2_CORE, "198.18.20.1", P_EAST_MAC);
    r.learn(PE2_CE2, CE2, CE2_MAC);
    let probe = ipv4_udp(CE1, CE2, 1, &pattern(32, 7));
    let p = only(&r.send(PE2_CORE, &to_pe2(&[(2002, 1)], &probe)), PE2_CORE);
    assert_eq!(p.labels.len(), 1);
    assert_eq!(p.labels[0].label, 1001, "the reverse LSP of VRF cust");
    let h = p.ipv4();
    assert_eq!(h.dst_addr(), v4(CE1));
    assert_eq!((p.icmpv4().msg_type(), p.icmpv4().code()), (icmpv4::msg_type::TIME_EXCEEDED, 0));
    r.assert_only_drop(DropReason::LabelTtlExpired, 1);
}

// ================================================================ MTU

#[test]
fn ipv4_df_too_big_after_push_gets_frag_needed_with_mtu_minus_labels() {
    let mut r = pe1_with(|b| route(b, "198.18.3.0", 24, "198.18.10.2", &[100, 200], TtlModel::Uniform));
    // 1496 bytes + one label = 1500: fits exactly.
    let fits = ipv4_tcp(CE1, CE2, 64, 1, 2, &pattern(1456, 1), true);
    let p = only(&r.send(PE1_CE1, &from_ce1(&fits)), PE1_CORE);
    assert_eq!(p.l3.len() + 4, 1500);
    r.assert_no_drops();

    let big = ipv4_tcp(CE1, CE2, 64, 1, 2, &pattern(1457, 1), true);
    let p = only(&r.send(PE1_CE1, &from_ce1(&big)), PE1_CE1);
    assert_eq!((p.dst, p.ethertype), (CE1_MAC, 0x0800));
    let h = p.ipv4();
    assert_eq!((h.src_addr(), h.dst_addr()), (v4("198.18.255.1"), v4(CE1)));
    let icmp = p.icmpv4();
    assert_eq!((icmp.msg_type(), icmp.code()), (icmpv4::msg_type::DST_UNREACHABLE, icmpv4::FRAG_NEEDED));
    assert_eq!(icmp.next_hop_mtu(), 1496);
    assert_eq!(&icmp.data()[12..20], &big[12..20], "quotes the original's addresses");
    r.assert_only_drop(DropReason::MtuExceeded, 1);
    assert_eq!(r.events(Event::IcmpTooBig), 1);

    // Two labels: 1492.
    let big = ipv4_tcp(CE1, "198.18.3.3", 64, 1, 2, &pattern(1453, 1), true);
    let icmp_frame = only(&r.send(PE1_CE1, &from_ce1(&big)), PE1_CE1);
    assert_eq!(icmp_frame.icmpv4().next_hop_mtu(), 1492);
}

#[test]
fn ipv6_too_big_after_push_gets_packet_too_big_with_mtu_minus_labels() {
    let mut r = Router::pe1();
    let big = ipv6_tcp(CE1_V6, CE2_V6, 64, 1, 2, &pattern(1440, 1));
    assert_eq!(big.len(), 1500);
    let p = only(&r.send(PE1_CE1, &from_ce1_v6(&big)), PE1_CE1);
    assert_eq!((p.dst, p.ethertype), (CE1_MAC, 0x86dd));
    let h = p.ipv6();
    assert_eq!((h.src_addr(), h.dst_addr()), (v6("2001:db8:ff::1"), v6(CE1_V6)));
    let icmp = p.icmpv6();
    assert_eq!((icmp.msg_type(), icmp.code()), (icmpv6::msg_type::PACKET_TOO_BIG, 0));
    assert_eq!(icmp.mtu(), 1496);
    assert_eq!(&icmp.data()[8..40], &big[8..40]);
    r.assert_only_drop(DropReason::MtuExceeded, 1);
}

#[test]
fn a_port_mtu_lowered_while_running_is_used_for_frag_needed_and_raised_again() {
    let mut r = Router::pe1();
    let fits = ipv4_tcp(CE1, CE2, 64, 1, 2, &pattern(1456, 1), true);
    only(&r.send(PE1_CE1, &from_ce1(&fits)), PE1_CORE);
    // The core interface's MTU was lowered to 1400 under the router.
    r.dp.set_port_mtu(PE1_CORE, 1400);
    assert_eq!(r.dp.ports()[usize::from(PE1_CORE)].mtu, 1400);
    let p = only(&r.send(PE1_CE1, &from_ce1(&fits)), PE1_CE1);
    let icmp = p.icmpv4();
    assert_eq!((icmp.msg_type(), icmp.code()), (icmpv4::msg_type::DST_UNREACHABLE, icmpv4::FRAG_NEEDED));
    assert_eq!(icmp.next_hop_mtu(), 1396);
    r.assert_only_drop(DropReason::MtuExceeded, 1);
    // And raised again.
    r.dp.set_port_mtu(PE1_CORE, 1500);
    let p = only(&r.send(PE1_CE1, &from_ce1(&fits)), PE1_CORE);
    assert_eq!(p.l3.len() + 4, 1500);
}

#[test]
fn ipv4_without_df_is_fragmented_at_ingress_and_each_fragment_fits_with_labels() {
    let mut r = pe1_with(|b| route(b, "198.18.3.0", 24, "198.18.10.2", &[100, 200], TtlModel::Uniform));
    for (dst, labels) in [(CE2, 1usize), ("198.18.3.3", 2)] {
        let big = ipv4_tcp(CE1, dst, 64, 1, 2, &pattern(3960, 3), false);
        let out = r.send(PE1_CE1, &from_ce1(&big));
        assert!(out.len() >= 3, "{} fragments", out.len());
        let mut pieces = Vec::new();
        for s in &out {
            assert_eq!(s.port, PE1_CORE);
            assert!(s.frame.len() - 14 <= 1500, "fragment of {} bytes with labels", s.frame.len() - 14);
            let p = s.parse();
            assert_eq!(p.labels.len(), labels);
            assert!(p.labels.iter().all(|l| l.ttl == 63));
            let h = p.ipv4();
            assert_eq!((h.src_addr(), h.dst_addr(), h.ident(), h.ttl()), (v4(CE1), v4(dst), 0x1234, 63));
            pieces.push((h.frag_offset(), h.more_frags(), h.payload().to_vec()));
        }
        pieces.sort_by_key(|p| p.0);
        let mut payload = Vec::new();
        for (i, (off, mf, data)) in pieces.iter().enumerate() {
            assert_eq!(usize::from(*off), payload.len(), "fragments contiguous");
            assert_eq!(*mf, i + 1 < pieces.len(), "MF on all but the last");
            payload.extend_from_slice(data);
        }
        assert_eq!(payload, big[20..], "reassembles to the original");
    }
    assert_eq!(r.events(Event::Fragmented), 2);
    r.assert_no_drops();
}

const GSO_PAYLOAD: usize = 10 * 1448 + 500;

/// A TCP/IPv4 super-frame from ce1 as a guest's virtio-net TSO hands it over.
fn tso_superframe(dst: &str, port: u16, dst_mac: [u8; 6], src_mac: [u8; 6]) -> (Packet, Vec<u8>) {
    let ip = ipv4_tcp_partial(CE1, dst, 64, 0xffff_f000, &pattern(GSO_PAYLOAD, 11));
    let mut pkt = Packet::from_frame(port, &ipv4_frame(dst_mac, src_mac, &ip));
    pkt.offload = virtio_net::Repr {
        needs_csum: true,
        data_valid: false,
        gso_type: virtio_net::GsoType::TcpV4,
        gso_ecn: false,
        hdr_len: 54,
        gso_size: 1448,
        csum_start: 34,
        csum_offset: 16,
    };
    (pkt, ip)
}

fn pe1_caps(core: PortCaps) -> Router {
    let mut ports = pe1_ports();
    ports[usize::from(PE1_CORE)].caps = core;
    let mut b = pe1_builder();
    route(&mut b, "198.18.5.0", 24, "198.18.10.2", &[], TtlModel::Uniform);
    let mut r = Router::new(b, ports);
    r.resolve_all_pe1();
    r
}

#[test]
fn tcp_gso_superframe_pushed_onto_port_without_mpls_gso_is_segmented() {
    let mut r = pe1_caps(PortCaps { tso4: true, csum: true, ..PortCaps::default() });
    let (pkt, ip) = tso_superframe(CE2, PE1_CE1, PE1_CE1_MAC, CE1_MAC);
    let out = r.send_packet(pkt);
    assert_eq!(out.len(), GSO_PAYLOAD.div_ceil(1448));
    let mut payload = Vec::new();
    for (i, s) in out.iter().enumerate() {
        assert_eq!(s.port, PE1_CORE);
        assert!(!s.offload.is_gso() && !s.offload.needs_csum, "segments leave complete");
        assert!(s.frame.len() - 14 <= 1500, "segment of {} bytes with its label", s.frame.len() - 14);
        let p = s.parse();
        assert_eq!((p.dst, p.src), (P_WEST_MAC, PE1_CORE_MAC));
        assert_eq!(p.stack(), vec![(1002, 63, true)]);
        assert_eq!(p.ipv4().ttl(), 63);
        assert!(tcp_v4_checksum_ok(&p.l3), "segment {i} TCP checksum");
        let seg = &p.l3[20..];
        let seq = u32::from_be_bytes([seg[4], seg[5], seg[6], seg[7]]);
        assert_eq!(seq, 0xffff_f000u32.wrapping_add(payload.len() as u32));
        payload.extend_from_slice(&seg[20..]);
    }
    assert_eq!(payload, ip[40..], "segments carry the whole payload in order");
    assert_eq!((r.events(Event::GsoSegmented), r.events(Event::GsoSegments)), (1, out.len() as u64));
    r.assert_no_drops();
}

#[test]
fn tcp_gso_superframe_to_port_with_mpls_gso_passes_whole() {
    let mut r = pe1_caps(PortCaps { mpls_gso: true, ..PortCaps::default() });
    let (pkt, ip) = tso_superframe(CE2, PE1_CE1, PE1_CE1_MAC, CE1_MAC);
    let out = r.send_packet(pkt);
    assert_eq!(out.len(), 1);
    let s = &out[0];
    assert_eq!(s.port, PE1_CORE);
    let p = s.parse();
    assert_eq!(p.stack(), vec![(1002, 63, true)]);
    assert_eq!(p.l3.len(), ip.len());
    assert_eq!(&p.l3[20..], &ip[20..], "TCP untouched, checksum still partial");
    assert_eq!(s.offload.gso_type, virtio_net::GsoType::TcpV4);
    assert_eq!(s.offload.gso_size, 1448);
    assert_eq!((s.offload.csum_start, s.offload.hdr_len), (38, 58), "offsets follow the label");
    assert!(s.offload.needs_csum);
    assert_eq!(r.events(Event::GsoPassed), 1);
    r.assert_no_drops();
}

#[test]
fn plain_ip_gso_superframe_to_port_with_tso4_passes_whole() {
    let mut r = pe1_caps(PortCaps { tso4: true, ..PortCaps::default() });
    let (pkt, ip) = tso_superframe("198.18.5.1", PE1_CE1, PE1_CE1_MAC, CE1_MAC);
    let out = r.send_packet(pkt);
    assert_eq!(out.len(), 1);
    let s = &out[0];
    let p = s.parse();
    assert_eq!((p.dst, p.ethertype), (P_WEST_MAC, 0x0800));
    assert_eq!(p.ipv4().ttl(), 63);
    assert_eq!(&p.l3[20..], &ip[20..]);
    assert_eq!(
        (s.offload.gso_type, s.offload.gso_size, s.offload.csum_start),
        (virtio_net::GsoType::TcpV4, 1448, 34)
    );
    assert_eq!(r.events(Event::GsoPassed), 1);
    r.assert_no_drops();
}

#[test]
fn needs_csum_on_a_labelled_frame_travels_where_the_port_takes_it_and_is_completed_where_not() {
    for port_csum in [true, false] {
        let mut r = pe1_caps(PortCaps { csum: port_csum, ..PortCaps::default() });
        let ip = ipv4_tcp_partial(CE1, CE2, 64, 77, &pattern(200, 4));
        assert!(!tcp_v4_checksum_ok(&ip));
        let mut pkt = Packet::from_frame(PE1_CE1, &from_ce1(&ip));
        pkt.offload.needs_csum = true;
        pkt.offload.csum_start = 34;
        pkt.offload.csum_offset = 16;
        let out = r.send_packet(pkt);
        assert_eq!(out.len(), 1);
        let p = out[0].parse();
        assert_eq!(p.stack(), vec![(1002, 63, true)]);
        if port_csum {
            // The partial checksum moves with the pushed label: the next hop completes it.
            assert!(out[0].offload.needs_csum);
            assert_eq!(out[0].offload.csum_start, 38);
            assert_eq!(r.events(Event::ChecksumCompleted), 0);
        } else {
            assert!(!out[0].offload.needs_csum);
            assert!(tcp_v4_checksum_ok(&p.l3), "checksum completed");
            assert_eq!(r.events(Event::ChecksumCompleted), 1);
        }
        r.assert_no_drops();
    }
}

// ================================================================ labels from customer ports

const RED_MAC: [u8; 6] = [2, 0, 0, 0, 0x03, 0x01];
const RED_HOST_MAC: [u8; 6] = [2, 0, 0, 0, 0x03, 0x02];
const BLUE_MAC: [u8; 6] = [2, 0, 0, 0, 0x04, 0x01];
const BLUE_HOST_MAC: [u8; 6] = [2, 0, 0, 0, 0x04, 0x02];
const TWO_VRF_CORE: u16 = 0;
const TWO_VRF_RED: u16 = 1;
const TWO_VRF_BLUE: u16 = 2;
const BLUE_HOST: &str = "198.18.4.2";

/// A PE with a core port and two customers, red and blue, each in a VRF of its own:
/// label 2004 is blue's egress (pops into VRF blue), label 3000 a transit swap toward
/// the core. `settings` runs last on the tables' builder (default: none).
fn two_vrf_pe(settings: impl FnOnce(&mut vmpls_fib::FibBuilder)) -> Router {
    let mut b = vmpls_fib::Fib::builder();
    b.router_v4(v4("198.18.255.3"));
    let red = b.add_vrf("red").unwrap();
    let blue = b.add_vrf("blue").unwrap();
    b.add_port("core", DEFAULT_VRF, &[(ip("198.18.20.2"), 24)]).unwrap();
    b.add_port("red", red, &[(ip("198.18.3.1"), 24)]).unwrap();
    b.add_port("blue", blue, &[(ip("198.18.4.1"), 24)]).unwrap();
    b.add_label_route(
        2004,
        vmpls_fib::LabelRoute::new(LabelAction::PopAndLookup { vrf: blue }, TtlModel::Uniform),
    )
    .unwrap();
    b.add_label_route(3000, swap_route(single(TWO_VRF_CORE, "198.18.20.1", &[3001]))).unwrap();
    settings(&mut b);
    let ports = vec![
        port(TWO_VRF_CORE, "core", PE2_CORE_MAC),
        port(TWO_VRF_RED, "red", RED_MAC),
        port(TWO_VRF_BLUE, "blue", BLUE_MAC),
    ];
    let mut r = Router::new(b, ports);
    r.learn(TWO_VRF_CORE, "198.18.20.1", P_EAST_MAC);
    r.learn(TWO_VRF_BLUE, BLUE_HOST, BLUE_HOST_MAC);
    r
}

/// A frame from red's host carrying blue's egress label, toward blue's host.
fn red_into_blue(ttl: u8) -> (Vec<u8>, Vec<u8>) {
    let inner = ipv4_udp("198.18.3.2", BLUE_HOST, ttl, &pattern(64, 9));
    (mpls_frame(RED_MAC, RED_HOST_MAC, &[(2004, ttl)], &inner), inner)
}

#[test]
fn a_label_popping_into_another_vrf_from_a_customer_port_is_dropped_as_mpls_not_accepted() {
    let mut r = two_vrf_pe(|_| {});
    let (frame, _) = red_into_blue(64);
    assert!(r.send(TWO_VRF_RED, &frame).is_empty(), "nothing reaches VRF blue");
    // The cached swap (one label for one, resolved next hop) refuses it too.
    let ip = ipv4_udp("198.18.3.2", "198.18.9.9", 64, &pattern(64, 1));
    assert!(r.send(TWO_VRF_RED, &mpls_frame(RED_MAC, RED_HOST_MAC, &[(3000, 64)], &ip)).is_empty());
    // Explicit null too: no label at all is taken from the port.
    assert!(r.send(TWO_VRF_RED, &mpls_frame(RED_MAC, RED_HOST_MAC, &[(0, 64)], &ip)).is_empty());
    r.assert_only_drop(DropReason::MplsNotAccepted, 3);
    assert_eq!(r.events(Event::LabelPop) + r.events(Event::LabelSwap), 0);
    assert!(r.dp.counters().label_list().next().is_none(), "no label counted as switched");
}

#[test]
fn a_batch_of_labelled_segments_from_a_customer_port_is_dropped_frame_by_frame() {
    let mut r = two_vrf_pe(|_| {});
    let mut batch = Vec::new();
    for i in 0..4u32 {
        let mut t = tcp_segment(40000, 5201, 1000 + 1000 * i, &pattern(1000, i as u8));
        tcp::Packet::new_unchecked(&mut t[..]).fill_checksum_v4(v4("198.18.3.2"), v4(BLUE_HOST));
        let ip = ipv4("198.18.3.2", BLUE_HOST, ipv4::protocol::TCP, 64, true, &t);
        batch.push(Packet::from_frame(TWO_VRF_RED, &mpls_frame(RED_MAC, RED_HOST_MAC, &[(2004, 64)], &ip)));
    }
    let mut out = Output::new(3);
    r.dp.process_batch(r.now, &mut batch, &mut r.pool, &mut out);
    assert!(out.tx.iter().all(|q| q.is_empty()), "nothing forwarded");
    assert_eq!(r.events(Event::GroMerged), 0, "not merged in front of the drop");
    r.assert_only_drop(DropReason::MplsNotAccepted, 4);
}

#[test]
fn the_same_label_from_the_core_port_or_a_customer_port_set_to_accept_labels_is_popped_into_its_vrf() {
    let (frame, inner) = red_into_blue(64);
    let from_core = mpls_frame(PE2_CORE_MAC, P_EAST_MAC, &[(2004, 64)], &inner);
    let mut r = two_vrf_pe(|_| {});
    let p = only(&r.send(TWO_VRF_CORE, &from_core), TWO_VRF_BLUE);
    assert_eq!((p.dst, p.ethertype), (BLUE_HOST_MAC, 0x0800));
    assert_ipv4_forwarded(&p, &inner, 63);
    r.assert_no_drops();

    let mut r = two_vrf_pe(|b| {
        b.set_port_accepts_mpls(TWO_VRF_RED, true).unwrap();
    });
    let p = only(&r.send(TWO_VRF_RED, &frame), TWO_VRF_BLUE);
    assert_ipv4_forwarded(&p, &inner, 63);
    r.assert_no_drops();

    // And a core port set to refuse labels refuses them.
    let mut r = two_vrf_pe(|b| {
        b.set_port_accepts_mpls(TWO_VRF_CORE, false).unwrap();
    });
    assert!(r.send(TWO_VRF_CORE, &from_core).is_empty());
    r.assert_only_drop(DropReason::MplsNotAccepted, 1);
}

// ================================================================ reserved labels

#[test]
fn router_alert_label_is_punted_and_counted() {
    let mut r = Router::p();
    assert!(r.send(P_WEST, &to_p(&[(1, 64), (1002, 64)], &tcp_ce1_ce2(64, 1))).is_empty());
    assert_eq!(r.events(Event::PuntRouterAlert), 1);
    p_still_forwards(&mut r);
}

#[test]
fn oam_alert_label_is_punted_and_counted() {
    let mut r = Router::p();
    assert!(r.send(P_WEST, &to_p(&[(14, 64), (1002, 64)], &tcp_ce1_ce2(64, 1))).is_empty());
    assert_eq!(r.events(Event::PuntOamAlert), 1);
    p_still_forwards(&mut r);
}

#[test]
fn implicit_null_on_the_wire_is_dropped_and_counted() {
    let mut r = Router::p();
    assert!(r.send(P_WEST, &to_p(&[(3, 64)], &tcp_ce1_ce2(64, 1))).is_empty());
    r.assert_only_drop(DropReason::ImplicitNullOnWire, 1);
    p_still_forwards(&mut r);
}

#[test]
fn gal_label_13_is_dropped_as_reserved() {
    let mut r = Router::p();
    assert!(r.send(P_WEST, &to_p(&[(13, 64)], &tcp_ce1_ce2(64, 1))).is_empty());
    r.assert_only_drop(DropReason::ReservedLabel, 1);
    p_still_forwards(&mut r);
}

#[test]
fn other_reserved_labels_are_dropped_as_reserved() {
    let mut r = Router::p();
    for label in [4, 5, 6, 8, 15] {
        assert!(r.send(P_WEST, &to_p(&[(label, 64), (1002, 64)], &tcp_ce1_ce2(64, 1))).is_empty());
    }
    // An entropy label indicator at the bottom has no entropy label under it.
    assert!(r.send(P_WEST, &to_p(&[(7, 64)], &tcp_ce1_ce2(64, 1))).is_empty());
    r.assert_only_drop(DropReason::ReservedLabel, 6);
    p_still_forwards(&mut r);
}

#[test]
fn unknown_label_is_dropped_and_counted() {
    let mut r = Router::p();
    assert!(r.send(P_WEST, &to_p(&[(4242, 64)], &tcp_ce1_ce2(64, 1))).is_empty());
    assert!(r.send(P_WEST, &to_p(&[(vmpls_fib::MAX_LABEL, 64)], &tcp_ce1_ce2(64, 1))).is_empty());
    r.assert_only_drop(DropReason::UnknownLabel, 2);
    p_still_forwards(&mut r);
}

// ================================================================ malformed input

#[test]
fn truncated_ethernet_is_counted() {
    let mut r = Router::p();
    for n in [0, 1, 13] {
        assert!(r.send(P_WEST, &to_p(&[(1002, 64)], &[])[..n]).is_empty());
    }
    r.assert_only_drop(DropReason::TruncatedEthernet, 3);
    p_still_forwards(&mut r);
}

#[test]
fn truncated_label_stack_is_counted() {
    let mut r = Router::p();
    let full = to_p(&[(1002, 64)], &[]);
    for n in [14, 15, 17] {
        assert!(r.send(P_WEST, &full[..n]).is_empty());
    }
    r.assert_only_drop(DropReason::TruncatedLabelStack, 3);
    p_still_forwards(&mut r);
}

#[test]
fn label_stack_without_bottom_of_stack_is_counted() {
    let mut r = Router::p();
    let mut f = to_p(&[(1002, 64), (1002, 64), (1002, 64)], &[]);
    f[14 + 8 + 2] &= !1; // clear S on the last entry
    assert!(r.send(P_WEST, &f).is_empty());
    r.assert_only_drop(DropReason::TruncatedLabelStack, 1);
    p_still_forwards(&mut r);
}

#[test]
fn bad_ipv4_header_length_is_counted() {
    let mut r = Router::pe1();
    let mut ip = tcp_ce1_ce2(64, 1);
    ip[0] = 0x44; // IHL 4: below the minimum
    assert!(r.send(PE1_CE1, &from_ce1(&ip)).is_empty());
    let mut ip = tcp_ce1_ce2(64, 1);
    ip[2..4].copy_from_slice(&16u16.to_be_bytes()); // total length shorter than the header
    assert!(r.send(PE1_CE1, &from_ce1(&ip)).is_empty());
    r.assert_only_drop(DropReason::BadIpv4Header, 2);
    pe1_still_forwards(&mut r);
}

#[test]
fn bad_ipv4_checksum_is_counted() {
    let mut r = Router::pe1();
    let mut ip = tcp_ce1_ce2(64, 1);
    ip[10] ^= 0x55;
    assert!(r.send(PE1_CE1, &from_ce1(&ip)).is_empty());
    r.assert_only_drop(DropReason::BadIpv4Checksum, 1);
    pe1_still_forwards(&mut r);
}

#[test]
fn ipv4_ttl_zero_is_counted_as_expired() {
    let mut r = Router::pe1();
    let out = r.send(PE1_CE1, &from_ce1(&tcp_ce1_ce2(0, 1)));
    assert!(out.iter().all(|s| s.port == PE1_CE1), "nothing forwarded");
    r.assert_only_drop(DropReason::IpTtlExpired, 1);
    pe1_still_forwards(&mut r);
}

#[test]
fn label_ttl_zero_is_counted_as_expired() {
    let mut r = Router::p();
    let out = r.send(P_WEST, &to_p(&[(1002, 0)], &tcp_ce1_ce2(64, 1)));
    assert!(
        out.iter().all(|s| s.parse().l3.get(9) == Some(&ipv4::protocol::ICMP)),
        "only an ICMP error goes out"
    );
    r.assert_only_drop(DropReason::LabelTtlExpired, 1);
    p_still_forwards(&mut r);
}

#[test]
fn bad_ipv4_header_under_a_popped_label_is_counted() {
    let mut r = Router::pe2();
    let mut ip = tcp_ce1_ce2(63, 1);
    ip[0] = 0x43;
    assert!(r.send(PE2_CORE, &to_pe2(&[(2002, 62)], &ip)).is_empty());
    let mut ip = tcp_ce1_ce2(63, 1);
    ip[11] ^= 1;
    assert!(r.send(PE2_CORE, &to_pe2(&[(2002, 62)], &ip)).is_empty());
    assert_eq!((r.drops(DropReason::BadIpv4Header), r.drops(DropReason::BadIpv4Checksum)), (1, 1));
    let ip = tcp_ce1_ce2(63, 1);
    only(&r.send(PE2_CORE, &to_pe2(&[(2002, 62)], &ip)), PE2_CE2);
}

#[test]
fn ethernet_padding_after_a_short_packet_is_not_forwarded() {
    let mut r = Router::pe1();
    let ip = ipv4_tcp(CE1, CE2, 64, 1, 2, &[], true); // 40 bytes: padded to 46 on the wire
    let mut f = from_ce1(&ip);
    f.extend_from_slice(&[0xee; 6]);
    let p = only(&r.send(PE1_CE1, &f), PE1_CORE);
    assert_eq!(p.l3.len(), 40, "padding dropped before the label goes on");
    assert_ipv4_forwarded(&p, &ip, 63);
}

#[test]
fn ipv6_header_types_are_distinguished_after_php_by_version_nibble() {
    // A PHP pop of a stack whose payload is neither IPv4 nor IPv6 is dropped, not sent
    // with a guessed ethertype.
    let mut r = p_with(|b| {
        b.add_label_route(1005, swap_route(single(P_EAST, "198.18.20.2", &[]))).unwrap();
    });
    let mut junk = tcp_ce1_ce2(64, 1);
    junk[0] = 0x25;
    assert!(r.send(P_WEST, &to_p(&[(1005, 30)], &junk)).is_empty());
    r.assert_only_drop(DropReason::UnknownPayload, 1);
}

#[test]
fn label_ttl_expiry_under_a_deep_stack_sends_the_whole_stack_along_the_lsp() {
    let mut r = Router::p();
    let probe = ipv4_udp(CE1, CE2, 1, &pattern(32, 7));
    let mut entries = vec![(1002u32, 1u8)];
    entries.extend((0..19).map(|i| (5000 + i, 9)));
    let p = only(&r.send(P_WEST, &to_p(&entries, &probe)), P_EAST);
    assert_eq!(p.labels.len(), 20, "every received entry back on, the top one swapped");
    assert_eq!(p.stack()[0].0, 2002);
    let below: Vec<_> = p.stack()[1..].iter().map(|&(l, _, s)| (l, s)).collect();
    let want: Vec<_> = (0..19).map(|i| (5000 + i, i == 18)).collect();
    assert_eq!(below, want, "bottom of stack on the last entry only");
    let icmp = p.icmpv4();
    assert_eq!(icmp.msg_type(), icmpv4::msg_type::TIME_EXCEEDED);
    let quoted = extension_stack(icmp.extension());
    assert_eq!(quoted.len(), 20);
    assert_eq!(quoted[19], word(5018, 9, true));
}

#[test]
fn labelled_packet_too_big_at_p_gets_frag_needed_sent_along_the_lsp() {
    let mut ports = p_ports();
    ports[usize::from(P_EAST)].mtu = 1400;
    let mut r = Router::new(p_builder(), ports);
    r.resolve_all_p();
    let big = ipv4_tcp(CE1, CE2, 64, 1, 2, &pattern(1380, 1), true);
    let p = only(&r.send(P_WEST, &to_p(&[(1002, 64)], &big)), P_EAST);
    assert_eq!((p.dst, p.ethertype), (PE2_CORE_MAC, 0x8847));
    assert_eq!(p.stack(), vec![(2002, 255, true)], "the LSP's outgoing label, fresh TTL");
    let h = p.ipv4();
    assert_eq!((h.src_addr(), h.dst_addr()), (v4("198.18.255.2"), v4(CE1)));
    let icmp = p.icmpv4();
    assert_eq!((icmp.msg_type(), icmp.code()), (icmpv4::msg_type::DST_UNREACHABLE, icmpv4::FRAG_NEEDED));
    assert_eq!(icmp.next_hop_mtu(), 1396, "port MTU less the label the packet carries");
    r.assert_only_drop(DropReason::MtuExceeded, 1);
    assert_eq!((r.events(Event::IcmpTooBig), r.events(Event::IcmpAlongLsp)), (1, 1));
}

#[test]
fn icmp_errors_are_rate_limited_and_counted_as_suppressed() {
    let cfg = vmpls_dataplane::DataplaneConfig { icmp_rate: 2, ..Default::default() };
    let mut r = Router::with_config(pe1_builder(), pe1_ports(), cfg);
    r.resolve_all_pe1();
    let probe = from_ce1(&ipv4_udp(CE1, CE2, 1, &[]));
    let sent: usize = (0..5).map(|_| r.send(PE1_CE1, &probe).len()).sum();
    assert_eq!(sent, 2, "a burst of the rate");
    assert_eq!((r.drops(DropReason::IpTtlExpired), r.drops(DropReason::IcmpSuppressed)), (5, 3));
    r.poll(Duration::from_secs(1));
    let sent: usize = (0..5).map(|_| r.send(PE1_CE1, &probe).len()).sum();
    assert_eq!(sent, 2, "refilled after a second");
}

#[test]
fn pushed_labels_carry_the_dscp_class_as_traffic_class() {
    let mut r = Router::pe1();
    let mut ip = tcp_ce1_ce2(64, 1);
    ip[1] = 46 << 2; // EF
    ipv4::Packet::new_unchecked(&mut ip[..]).fill_checksum();
    let p = only(&r.send(PE1_CE1, &from_ce1(&ip)), PE1_CORE);
    assert_eq!(p.labels[0].tc, 5);
    // A swap keeps it.
    let mut p_router = Router::p();
    let sent = mpls_frame(P_WEST_MAC, PE1_CORE_MAC, &[], &[]);
    let mut f = sent[..14].to_vec();
    f.extend_from_slice(&p.labels[0].to_u32().to_be_bytes());
    f.extend_from_slice(&p.l3);
    let q = only(&p_router.send(P_WEST, &f), P_EAST);
    assert_eq!((q.labels[0].label, q.labels[0].tc), (2002, 5));
}

#[test]
fn echo_request_over_the_lsp_to_the_egress_router_address_is_answered_over_the_reverse_lsp() {
    let mut r = Router::pe2();
    let req = icmpv4_echo(CE1, "198.18.255.3", 60);
    let p = only(&r.send(PE2_CORE, &to_pe2(&[(2002, 60)], &req)), PE2_CORE);
    assert_eq!((p.dst, p.labels[0].label), (P_EAST_MAC, 1001));
    let h = p.ipv4();
    assert_eq!((h.src_addr(), h.dst_addr()), (v4("198.18.255.3"), v4(CE1)));
    assert_eq!(p.icmpv4().msg_type(), icmpv4::msg_type::ECHO_REPLY);
    r.assert_no_drops();
}

#[test]
fn labelled_gso_superframe_popped_at_egress_passes_whole_to_a_tso4_port() {
    let mut ports = pe2_ports();
    ports[usize::from(PE2_CE2)].caps = PortCaps { tso4: true, ..PortCaps::default() };
    let mut r = Router::new(pe2_builder(), ports);
    r.resolve_all_pe2();
    let ip = ipv4_tcp_partial(CE1, CE2, 64, 5, &pattern(10_000, 3));
    let mut pkt = Packet::from_frame(PE2_CORE, &to_pe2(&[(2002, 60)], &ip));
    pkt.offload = virtio_net::Repr {
        needs_csum: true,
        data_valid: false,
        gso_type: virtio_net::GsoType::TcpV4,
        gso_ecn: false,
        hdr_len: 58,
        gso_size: 1448,
        csum_start: 38,
        csum_offset: 16,
    };
    let out = r.send_packet(pkt);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].offload.csum_start, out[0].offload.hdr_len), (34, 54), "offsets follow the pop");
    let p = out[0].parse();
    assert_eq!((p.dst, p.ethertype), (CE2_MAC, 0x0800));
    assert_eq!(p.ipv4().ttl(), 59);
    assert_eq!(&p.l3[20..], &ip[20..]);
    r.assert_no_drops();
}

#[test]
fn process_batch_handles_every_frame() {
    let mut r = Router::pe1();
    let mut frames: Vec<Packet> =
        (0..4).map(|i| Packet::from_frame(PE1_CE1, &from_ce1(&tcp_ce1_ce2(64, i)))).collect();
    frames.push(Packet::from_frame(PE1_CE1, &[1, 2, 3]));
    let mut out = vmpls_dataplane::Output::new(2);
    r.dp.process_batch(r.now, &mut frames, &mut r.pool, &mut out);
    assert!(frames.is_empty());
    assert_eq!(out.tx[usize::from(PE1_CORE)].len(), 4);
    r.assert_only_drop(DropReason::TruncatedEthernet, 1);
}

#[test]
fn partial_checksum_starting_in_front_of_the_ip_header_is_dropped() {
    // csum_start inside the Ethernet header (PE) or the label stack (P): completing it
    // would overwrite a MAC address or a label.
    let mut r = Router::pe1();
    let mut pkt = Packet::from_frame(PE1_CE1, &from_ce1(&ipv4_tcp_partial(CE1, CE2, 64, 1, &pattern(10, 1))));
    pkt.offload.needs_csum = true;
    pkt.offload.csum_offset = 6;
    assert!(r.send_packet(pkt).is_empty());
    r.assert_only_drop(DropReason::BadChecksumOffload, 1);

    let mut r = Router::p();
    let ip = ipv4_tcp_partial(CE1, CE2, 64, 1, &pattern(10, 1));
    let mut pkt = Packet::from_frame(P_WEST, &to_p(&[(1002, 64)], &ip));
    pkt.offload.needs_csum = true;
    pkt.offload.csum_start = 14;
    pkt.offload.csum_offset = 0;
    assert!(r.send_packet(pkt).is_empty());
    r.assert_only_drop(DropReason::BadChecksumOffload, 1);
    // Where the TCP header is, it is completed.
    let mut pkt = Packet::from_frame(P_WEST, &to_p(&[(1002, 64)], &ip));
    pkt.offload.needs_csum = true;
    pkt.offload.csum_start = 38;
    pkt.offload.csum_offset = 16;
    let p = only(&r.send_packet(pkt), P_EAST);
    assert!(tcp_v4_checksum_ok(&p.l3));
}

#[test]
fn label_ttl_expiry_on_a_popped_label_with_labels_below_goes_along_the_lsp() {
    let mut r = p_with(|b| {
        b.add_label_route(1006, pop_route()).unwrap();
    });
    let probe = ipv4_udp(CE1, CE2, 1, &pattern(8, 1));
    let p = only(&r.send(P_WEST, &to_p(&[(1006, 1), (1002, 5)], &probe)), P_EAST);
    assert_eq!(p.labels.len(), 1);
    assert_eq!(p.labels[0].label, 2002, "popped, then switched like the original");
    let h = p.ipv4();
    assert_eq!((h.src_addr(), h.dst_addr()), (v4("198.18.255.2"), v4(CE1)));
    let icmp = p.icmpv4();
    assert_eq!(icmp.msg_type(), icmpv4::msg_type::TIME_EXCEEDED);
    assert_eq!(extension_stack(icmp.extension()), vec![word(1006, 1, false), word(1002, 5, true)]);
    r.assert_only_drop(DropReason::LabelTtlExpired, 1);
}

#[test]
fn frames_held_for_many_silent_hosts_are_bounded_in_all() {
    let mut cfg = vmpls_dataplane::DataplaneConfig::default();
    cfg.neighbor.max_held_total = 3;
    let mut r = Router::with_config(pe1_builder(), pe1_ports(), cfg);
    // A scan of the core's connected subnet: one frame to each of five silent hosts.
    let mut requests = 0;
    for i in 0..5u8 {
        let dst = format!("198.18.10.{}", 50 + i);
        for s in r.send(PE1_CE1, &from_ce1(&ipv4_tcp(CE1, &dst, 64, 1, 2, &[], true))) {
            assert_eq!(s.parse().ethertype, 0x0806);
            requests += 1;
        }
    }
    assert_eq!(requests, 5, "each host is asked for");
    r.assert_only_drop(DropReason::NeighborQueueFull, 2);
    assert_eq!(r.dp.neighbors().held(), 3);
    for _ in 0..10 {
        r.poll(Duration::from_secs(1));
    }
    assert_eq!(r.drops(DropReason::NeighborUnresolved), 3);
    assert_eq!(r.dp.neighbors().held(), 0);
}

// ================================================================ super-frames whole along the LSP

/// A TCP super-frame as a kernel host hands it to pe1: IPv4, partial checksum, GSO TCPv4.
fn super_frame_from_ce1(payload_len: usize) -> Packet {
    let ip = ipv4_tcp_partial(CE1, CE2, 64, 1, &pattern(payload_len, 7));
    let mut pkt = Packet::from_frame(PE1_CE1, &from_ce1(&ip));
    pkt.offload = virtio_net::Repr {
        needs_csum: true,
        gso_type: virtio_net::GsoType::TcpV4,
        gso_size: 1448,
        hdr_len: 54,
        csum_start: 34,
        csum_offset: 16,
        ..Default::default()
    };
    pkt
}

#[test]
fn labelled_super_frame_crosses_a_jumbo_core_link_whole() {
    let mut ports = pe1_ports();
    ports[usize::from(PE1_CORE)].mtu = 65535;
    ports[usize::from(PE1_CORE)].caps = PortCaps { csum: true, ..PortCaps::default() };
    let mut r = Router::new(pe1_builder(), ports);
    r.resolve_all_pe1();
    let out = r.send_packet(super_frame_from_ce1(30000));
    assert_eq!(out.len(), 1, "one frame, not 21 segments");
    let s = &out[0];
    assert_eq!(s.offload.gso_type, virtio_net::GsoType::None, "the kernel refuses labelled GSO");
    assert!(s.offload.needs_csum, "the partial checksum travels");
    assert_eq!(s.offload.csum_start, 38);
    assert_eq!(s.parse().stack(), vec![(1002, 63, true)]);
    assert_eq!(r.events(Event::GsoJumbo), 1);
    assert_eq!(r.events(Event::GsoSegmented), 0);
    r.assert_no_drops();
}

#[test]
fn egress_rebuilds_gso_for_the_customer_port_from_a_jumbo_frame() {
    let mut ports = pe2_ports();
    ports[usize::from(PE2_CE2)].caps = PortCaps { tso4: true, tso6: true, csum: true, ..PortCaps::default() };
    let mut r = Router::new(pe2_builder(), ports);
    r.resolve_all_pe2();
    // What p sends on a 64 KiB link: label 2002 over a 30000-byte TCP packet, partial checksum.
    let ip = ipv4_tcp_partial(CE1, CE2, 62, 1, &pattern(30000, 7));
    let frame = mpls_frame(PE2_CORE_MAC, P_EAST_MAC, &[(2002, 62)], &ip);
    let mut pkt = Packet::from_frame(PE2_CORE, &frame);
    pkt.offload =
        virtio_net::Repr { needs_csum: true, csum_start: 38, csum_offset: 16, ..Default::default() };
    let out = r.send_packet(pkt);
    assert_eq!(out.len(), 1);
    let s = &out[0];
    assert_eq!(s.port, PE2_CE2);
    assert_eq!(s.offload.gso_type, virtio_net::GsoType::TcpV4);
    assert_eq!(s.offload.gso_size, 1500 - 20 - 20, "segments fit the customer MTU");
    assert_eq!((s.offload.csum_start, s.offload.csum_offset), (34, 16));
    assert_eq!(r.events(Event::GsoRebuilt), 1);
    r.assert_no_drops();

    // Without TSO on the customer port the rebuilt super-frame is cut in software.
    let mut r = Router::pe2();
    let mut pkt = Packet::from_frame(PE2_CORE, &frame);
    pkt.offload =
        virtio_net::Repr { needs_csum: true, csum_start: 38, csum_offset: 16, ..Default::default() };
    let out = r.send_packet(pkt);
    assert_eq!(out.len(), 30000usize.div_ceil(1460));
    let mut data = Vec::new();
    for s in &out {
        assert!(s.frame.len() - 14 <= 1500);
        let p = s.parse();
        assert!(tcp_v4_checksum_ok(&p.l3));
        data.extend_from_slice(&p.l3[40..]);
    }
    assert_eq!(data, pattern(30000, 7));
    r.assert_no_drops();
}

#[test]
fn egress_rebuilds_gso_for_a_jumbo_frame_the_penultimate_hop_popped() {
    // With PHP, p pops the last label and pe2 gets the super-frame as plain IP over the
    // 64 KiB core: cut for the customer like one that arrived labelled.
    let mut ports = pe2_ports();
    ports[usize::from(PE2_CORE)].mtu = 65535;
    ports[usize::from(PE2_CE2)].caps = PortCaps { tso4: true, tso6: true, csum: true, ..PortCaps::default() };
    let mut r = Router::new(pe2_builder(), ports);
    r.resolve_all_pe2();
    let ip = ipv4_tcp_partial(CE1, CE2, 62, 1, &pattern(30000, 7));
    let mut pkt = Packet::from_frame(PE2_CORE, &ipv4_frame(PE2_CORE_MAC, P_EAST_MAC, &ip));
    pkt.offload =
        virtio_net::Repr { needs_csum: true, csum_start: 34, csum_offset: 16, ..Default::default() };
    let out = r.send_packet(pkt);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port, PE2_CE2);
    assert_eq!(out[0].offload.gso_type, virtio_net::GsoType::TcpV4);
    assert_eq!(out[0].offload.gso_size, 1500 - 20 - 20);
    assert_eq!(r.events(Event::GsoRebuilt), 1);
    r.assert_no_drops();

    // The same over an ordinary 1500-byte core would not have arrived; over a 9000-byte
    // Ethernet jumbo link it is a host's packet, answered with "too big".
    let mut ports = pe2_ports();
    ports[usize::from(PE2_CORE)].mtu = 9000;
    let mut r = Router::new(pe2_builder(), ports);
    r.resolve_all_pe2();
    let ip = ipv4_tcp_partial(CE1, CE2, 62, 1, &pattern(8000, 7));
    let mut pkt = Packet::from_frame(PE2_CORE, &ipv4_frame(PE2_CORE_MAC, P_EAST_MAC, &ip));
    pkt.offload =
        virtio_net::Repr { needs_csum: true, csum_start: 34, csum_offset: 16, ..Default::default() };
    let out = r.send_packet(pkt);
    assert_eq!(r.events(Event::GsoRebuilt), 0);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port, PE2_CORE);
    assert_eq!(out[0].parse().icmpv4().msg_type(), icmpv4::msg_type::DST_UNREACHABLE);
}

#[test]
fn a_plain_ip_packet_too_big_for_the_port_still_gets_frag_needed() {
    // Only frames that crossed an LSP are re-cut; a host's oversized DF packet is answered.
    let mut ports = pe1_ports();
    ports[usize::from(PE1_CE1)].mtu = 9000;
    let mut r = Router::new(pe1_builder(), ports);
    r.resolve_all_pe1();
    let ip = ipv4_tcp(CE1, CE2, 64, 40000, 5201, &pattern(3000, 1), true);
    let out = r.send(PE1_CE1, &from_ce1(&ip));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port, PE1_CE1);
    assert_eq!(out[0].parse().icmpv4().msg_type(), icmpv4::msg_type::DST_UNREACHABLE);
    assert_eq!(r.events(Event::GsoRebuilt), 0);
}

#[test]
fn segments_leaving_the_lsp_are_coalesced_in_a_batch_and_reach_the_customer_whole() {
    let mut ports = pe2_ports();
    ports[usize::from(PE2_CE2)].caps = PortCaps { tso4: true, tso6: true, csum: true, ..PortCaps::default() };
    let mut r = Router::new(pe2_builder(), ports);
    r.resolve_all_pe2();
    let mut batch = Vec::new();
    let mut data = Vec::new();
    let mut seq = 5000;
    for i in 0..8 {
        let payload = pattern(1448, i);
        let mut t = tcp_segment(40000, 5201, seq, &payload);
        // As segments of a TSO burst: PSH on the last only.
        tcp::Packet::new_unchecked(&mut t[..]).set_psh(i == 7);
        tcp::Packet::new_unchecked(&mut t[..]).fill_checksum_v4(v4(CE1), v4(CE2));
        let ip = ipv4(CE1, CE2, ipv4::protocol::TCP, 62, true, &t);
        batch.push(Packet::from_frame(PE2_CORE, &mpls_frame(PE2_CORE_MAC, P_EAST_MAC, &[(2002, 62)], &ip)));
        data.extend_from_slice(&payload);
        seq += 1448;
    }
    let mut out = Output::new(2);
    r.dp.process_batch(r.now, &mut batch, &mut r.pool, &mut out);
    let sent = &out.tx[usize::from(PE2_CE2)];
    assert_eq!(sent.len(), 1, "eight segments, one super-frame");
    let s = &sent[0];
    assert_eq!(s.offload.gso_type, virtio_net::GsoType::TcpV4);
    assert_eq!(s.offload.gso_size, 1448);
    assert_eq!(&s.frame()[14 + 40..], &data[..]);
    assert_eq!(r.events(Event::GroMerged), 1);
    assert_eq!(r.events(Event::GroAbsorbed), 7);
    r.assert_no_drops();
}

#[test]
fn jumbo_frames_a_transit_router_merged_are_merged_again_and_cut_for_the_customer() {
    // p merged the segments it got over a small-MTU link and sent them on whole over the
    // 64 KiB core (no GSO marking, partial checksum). pe2 merges two of them: the result's
    // segments are 5,000 bytes, too big for ce2's 1500 bytes; cut to 1460, no "too big".
    let mut ports = pe2_ports();
    ports[usize::from(PE2_CORE)].mtu = 65535;
    ports[usize::from(PE2_CE2)].caps = PortCaps { tso4: true, tso6: true, csum: true, ..PortCaps::default() };
    let mut r = Router::new(pe2_builder(), ports);
    r.resolve_all_pe2();
    let mut batch = Vec::new();
    let mut data = Vec::new();
    for i in 0..2u8 {
        let payload = pattern(5000, i);
        let mut t = tcp_segment(40000, 5201, 5000 + 5000 * u32::from(i), &payload);
        tcp::Packet::new_unchecked(&mut t[..]).set_psh(i == 1);
        tcp::Packet::new_unchecked(&mut t[..]).fill_partial_checksum_v4(v4(CE1), v4(CE2));
        let ip = ipv4(CE1, CE2, ipv4::protocol::TCP, 62, true, &t);
        let mut pkt = Packet::from_frame(PE2_CORE, &mpls_frame(PE2_CORE_MAC, P_EAST_MAC, &[(2002, 62)], &ip));
        pkt.offload = virtio_net::Repr {
            needs_csum: true,
            csum_start: 14 + 4 + 20,
            csum_offset: 16,
            ..Default::default()
        };
        batch.push(pkt);
        data.extend_from_slice(&payload);
    }
    let mut out = Output::new(2);
    r.dp.process_batch(r.now, &mut batch, &mut r.pool, &mut out);
    assert_eq!(r.events(Event::GroMerged), 1);
    assert_eq!(r.events(Event::GsoRebuilt), 1);
    let sent = &out.tx[usize::from(PE2_CE2)];
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].offload.gso_type, virtio_net::GsoType::TcpV4);
    assert_eq!(sent[0].offload.gso_size, 1500 - 20 - 20);
    assert_eq!(&sent[0].frame()[14 + 40..], &data[..]);
    assert!(out.tx[usize::from(PE2_CORE)].is_empty(), "no ICMP too big toward ce1");
    r.assert_no_drops();
}

#[test]
fn segments_that_are_swapped_onward_are_not_coalesced() {
    let mut r = Router::p();
    let mut batch = Vec::new();
    let mut seq = 5000;
    for i in 0..4 {
        let mut t = tcp_segment(40000, 5201, seq, &pattern(1000, i));
        tcp::Packet::new_unchecked(&mut t[..]).set_psh(false);
        tcp::Packet::new_unchecked(&mut t[..]).fill_checksum_v4(v4(CE1), v4(CE2));
        let ip = ipv4(CE1, CE2, ipv4::protocol::TCP, 63, true, &t);
        batch.push(Packet::from_frame(P_WEST, &mpls_frame(P_WEST_MAC, PE1_CORE_MAC, &[(1002, 63)], &ip)));
        seq += 1000;
    }
    let mut out = Output::new(2);
    r.dp.process_batch(r.now, &mut batch, &mut r.pool, &mut out);
    assert_eq!(out.tx[usize::from(P_EAST)].len(), 4);
    assert_eq!(r.events(Event::GroMerged), 0);
}

#[test]
fn segments_swapped_toward_a_64k_link_are_coalesced_and_leave_as_one_jumbo_frame() {
    // p between a small-MTU link (VXLAN, an MPLS-in-UDP tunnel) and a 64 KiB veth: the
    // segments pe1 cut leave toward pe2 as one frame, swapped, content and checksum intact.
    let mut ports = p_ports();
    ports[usize::from(P_EAST)].mtu = 65535;
    ports[usize::from(P_EAST)].caps = PortCaps { tso4: true, tso6: true, csum: true, ..PortCaps::default() };
    let mut r = Router::new(p_builder(), ports);
    r.resolve_all_p();
    let mut batch = Vec::new();
    let mut data = Vec::new();
    let mut seq = 5000;
    for i in 0..8 {
        let payload = pattern(1398, i);
        let mut t = tcp_segment(40000, 5201, seq, &payload);
        tcp::Packet::new_unchecked(&mut t[..]).set_psh(i == 7);
        tcp::Packet::new_unchecked(&mut t[..]).fill_checksum_v4(v4(CE1), v4(CE2));
        let ip = ipv4(CE1, CE2, ipv4::protocol::TCP, 63, true, &t);
        batch.push(Packet::from_frame(P_WEST, &mpls_frame(P_WEST_MAC, PE1_CORE_MAC, &[(1002, 63)], &ip)));
        data.extend_from_slice(&payload);
        seq += 1398;
    }
    let mut out = Output::new(2);
    r.dp.process_batch(r.now, &mut batch, &mut r.pool, &mut out);
    let sent = &mut out.tx[usize::from(P_EAST)];
    assert_eq!(sent.len(), 1, "eight segments, one frame");
    assert_eq!(r.events(Event::GroMerged), 1);
    assert_eq!(r.events(Event::GroAbsorbed), 7);
    vmpls_dataplane::gso::complete_checksum(&mut sent[0]).unwrap();
    let p = Parsed::new(sent[0].frame());
    assert_eq!(p.labels.len(), 1);
    assert_eq!((p.labels[0].label, p.labels[0].ttl), (2002, 62));
    assert!(tcp_v4_checksum_ok(&p.l3));
    assert_eq!(&p.l3[40..], &data[..]);
    r.assert_no_drops();

    // Between two 64 KiB links super-frames arrive whole: the few small segments a
    // sender starts with are switched as they come. Toward a tunnel that cuts labelled
    // super-frames itself (an MPLS-in-UDP port) merging would only add a copy.
    let jumbo = PortCaps { tso4: true, tso6: true, csum: true, ..PortCaps::default() };
    let tunnel = PortCaps { mpls_gso: true, ..PortCaps::default() };
    for (west, east) in [((65535, jumbo), (65535, jumbo)), ((1500, PortCaps::default()), (1472, tunnel))] {
        let mut ports = p_ports();
        (ports[usize::from(P_WEST)].mtu, ports[usize::from(P_WEST)].caps) = west;
        (ports[usize::from(P_EAST)].mtu, ports[usize::from(P_EAST)].caps) = east;
        let mut r = Router::new(p_builder(), ports);
        r.resolve_all_p();
        let mut batch = Vec::new();
        for i in 0..4u8 {
            let mut t = tcp_segment(40000, 5201, 5000 + 1000 * u32::from(i), &pattern(1000, i));
            tcp::Packet::new_unchecked(&mut t[..]).set_psh(false);
            tcp::Packet::new_unchecked(&mut t[..]).fill_checksum_v4(v4(CE1), v4(CE2));
            let ip = ipv4(CE1, CE2, ipv4::protocol::TCP, 63, true, &t);
            batch.push(Packet::from_frame(P_WEST, &mpls_frame(P_WEST_MAC, PE1_CORE_MAC, &[(1002, 63)], &ip)));
        }
        let mut out = Output::new(2);
        r.dp.process_batch(r.now, &mut batch, &mut r.pool, &mut out);
        assert_eq!(out.tx[usize::from(P_EAST)].len(), 4, "{west:?} -> {east:?}");
        assert_eq!(r.events(Event::GroMerged), 0);
    }
}

#[test]
fn a_batch_of_super_frames_stops_early_when_the_pool_runs_low_and_loses_nothing() {
    let mut r = Router::pe1();
    let mut pool = vmpls_dataplane::PacketPool::new(vmpls_dataplane::POOL_LOW_WATER + 40);
    let mut batch: Vec<Packet> = (0..6).map(|_| super_frame_from_ce1(30000)).collect();
    let mut out = Output::new(2);
    let mut calls = 0;
    let mut segments = 0;
    while !batch.is_empty() {
        calls += 1;
        assert!(calls < 20, "makes progress");
        r.dp.process_batch(r.now, &mut batch, &mut pool, &mut out);
        // What the router loop does between calls: send, which returns the buffers.
        for tx in out.tx.iter_mut() {
            segments += tx.len();
            for p in tx.drain(..) {
                pool.put(p);
            }
        }
    }
    assert!(calls > 1, "the pool was too small for the whole batch at once");
    assert_eq!(segments, 6 * 30000usize.div_ceil(1448));
    assert_eq!(r.drops(DropReason::NoBuffer), 0);
}

#[test]
fn frames_and_bytes_are_counted_per_incoming_label() {
    let mut r = Router::p();
    let ip = icmpv4_echo(CE1, CE2, 64);
    let frame = mpls_frame(P_WEST_MAC, PE1_CORE_MAC, &[(1002, 64)], &ip);
    for _ in 0..3 {
        assert_eq!(r.send(P_WEST, &frame).len(), 1);
    }
    // An unknown label is a drop, not a label count.
    r.send(P_WEST, &mpls_frame(P_WEST_MAC, PE1_CORE_MAC, &[(4444, 64)], &ip));
    let labels: Vec<_> = r.dp.counters().label_list().collect();
    assert_eq!(labels, vec![(1002, 3, 3 * frame.len() as u64)]);
}

/// A next hop that only the in-kernel fast path sends to: `use_neighbor` asks for it when
/// unknown, keeps its entry (asking again when it turns stale) and adds nothing to the
/// wire while it is fresh.
#[test]
fn use_neighbor_resolves_and_keeps_a_next_hop_the_pipeline_never_sees() {
    let mut r = Router::new(p_builder(), p_ports());
    let gw: IpAddr = "198.18.20.2".parse().unwrap();
    let mut out = Output::new(2);
    r.dp.use_neighbor(r.now, P_EAST, gw, &mut r.pool, &mut out);
    let asked: Vec<_> = out.tx[usize::from(P_EAST)].drain(..).map(|p| p.frame().to_vec()).collect();
    assert_eq!(asked.len(), 1, "one ARP request for the unknown next hop");
    assert_eq!(&asked[0][12..14], &[0x08, 0x06]);
    assert_eq!(r.dp.neighbors().mac(P_EAST, gw), None);
    r.learn(P_EAST, "198.18.20.2", PE2_CORE_MAC);
    assert_eq!(r.dp.neighbors().mac(P_EAST, gw), Some(PE2_CORE_MAC));
    // Fresh: nothing to send.
    r.dp.use_neighbor(r.now, P_EAST, gw, &mut r.pool, &mut out);
    assert!(out.tx.iter().all(|t| t.is_empty()));
    // Stale (30 s without confirmation): a refresh request, and the MAC stays usable.
    r.poll(Duration::from_secs(31));
    r.dp.use_neighbor(r.now, P_EAST, gw, &mut r.pool, &mut out);
    assert_eq!(out.tx[usize::from(P_EAST)].len(), 1, "a refresh request");
    for p in out.tx[usize::from(P_EAST)].drain(..) {
        r.pool.put(p);
    }
    assert_eq!(r.dp.neighbors().mac(P_EAST, gw), Some(PE2_CORE_MAC));
}

#[test]
fn counts_added_for_the_fast_path_show_in_the_label_list() {
    let mut r = Router::p();
    r.dp.counters_mut().label_add(1002, 3, 3000);
    r.dp.counters_mut().event(Event::LabelSwap, 3);
    assert_eq!(r.dp.counters().label_list().collect::<Vec<_>>(), vec![(1002, 3, 3000)]);
    assert_eq!(r.events(Event::LabelSwap), 3);
}

// ================================================================ the kernel owns the host stack

/// Which neighbour entry `dp` has for `addr` on `port`: its MAC, if resolved.
fn neighbor_mac(r: &Router, port: u16, addr: &str) -> Option<[u8; 6]> {
    r.dp.neighbors().entries().find(|e| (e.0, e.1) == (port, ip(addr))).and_then(|e| e.2)
}

#[test]
fn kernel_mode_arp_request_for_a_port_address_is_left_to_the_kernel_and_the_sender_learned() {
    let mut r = Router::kernel(pe1_builder(), pe1_ports());
    let req = arp_frame(CE1_MAC, v4(CE1), v4("198.18.1.1"), arp::Operation::Request, [0xff; 6], [0; 6]);
    assert!(r.send(PE1_CE1, &req).is_empty(), "the kernel answers");
    assert_eq!((r.events(Event::LeftToKernel), r.events(Event::ArpReply)), (1, 0));
    assert_eq!(neighbor_mac(&r, PE1_CE1, CE1), Some(CE1_MAC), "learned as today");
    // A probe (sender 0.0.0.0) for our address is the kernel's too; one for another
    // host's address is nobody's business here.
    let probe =
        arp_frame(CE1_MAC, v4("0.0.0.0"), v4("198.18.1.1"), arp::Operation::Request, [0xff; 6], [0; 6]);
    assert!(r.send(PE1_CE1, &probe).is_empty());
    let other = arp_frame(CE1_MAC, v4(CE1), v4("198.18.1.77"), arp::Operation::Request, [0xff; 6], [0; 6]);
    assert!(r.send(PE1_CE1, &other).is_empty());
    assert_eq!(r.events(Event::LeftToKernel), 2);
    // What was learned is used: traffic to ce1 goes out without asking.
    let ip = ipv4_tcp(CE2, CE1, 64, 1, 2, &pattern(40, 1), true);
    let p = only(&r.send(PE1_CORE, &mpls_frame(PE1_CORE_MAC, P_WEST_MAC, &[(2001, 63)], &ip)), PE1_CE1);
    assert_eq!((p.dst, p.ethertype), (CE1_MAC, 0x0800));
    r.assert_no_drops();
}

#[test]
fn kernel_mode_neighbor_solicitation_for_a_port_address_is_left_to_the_kernel_and_the_sender_learned() {
    let mut r = Router::kernel(pe1_builder(), pe1_ports());
    let target = v6("2001:db8:1::1");
    let ns = neighbor_solicit(CE1_MAC, v6(CE1_V6), target, PE1_CE1_MAC, false);
    assert!(r.send(PE1_CE1, &ns).is_empty(), "the kernel advertises");
    assert_eq!((r.events(Event::LeftToKernel), r.events(Event::NdAdvert)), (1, 0));
    assert_eq!(neighbor_mac(&r, PE1_CE1, CE1_V6), Some(CE1_MAC), "learned as today");
    // Duplicate address detection (from ::) likewise: no advert to all-nodes.
    let dad = neighbor_solicit(CE1_MAC, v6("::"), target, PE1_CE1_MAC, false);
    assert!(r.send(PE1_CE1, &dad).is_empty());
    assert_eq!(r.events(Event::LeftToKernel), 2);
    r.assert_no_drops();
}

#[test]
fn kernel_mode_still_resolves_its_own_next_hops_and_learns_from_the_replies() {
    let mut r = Router::kernel(pe1_builder(), pe1_ports());
    let ip = tcp_ce1_ce2(64, 1);
    let out = r.send(PE1_CE1, &from_ce1(&ip));
    let p = only(&out, PE1_CORE);
    assert_eq!((p.dst, p.src, p.ethertype), ([0xff; 6], PE1_CORE_MAC, 0x0806), "our own ARP request");
    let req = arp::Repr::parse(&arp::Packet::new_checked(&p.l3[..]).unwrap()).unwrap();
    assert_eq!((req.sender_protocol_addr, req.target_protocol_addr), (v4("198.18.10.1"), v4("198.18.10.2")));
    let reply = arp_frame(
        P_WEST_MAC,
        v4("198.18.10.2"),
        v4("198.18.10.1"),
        arp::Operation::Reply,
        PE1_CORE_MAC,
        PE1_CORE_MAC,
    );
    let p = only(&r.send(PE1_CORE, &reply), PE1_CORE);
    assert_eq!((p.dst, p.stack()), (P_WEST_MAC, vec![(1002, 63, true)]), "the held frame, released");
    assert_ipv4_forwarded(&p, &ip, 63);
    assert_eq!(r.events(Event::LeftToKernel), 0, "a reply to our request is ours");
    r.assert_no_drops();
}

#[test]
fn kernel_mode_echo_requests_to_the_router_are_left_to_the_kernel() {
    let mut r = Router::pe1_kernel();
    let before = r.events(Event::LeftToKernel);
    for dst in ["198.18.1.1", "198.18.10.1", "198.18.255.1"] {
        assert!(r.send(PE1_CE1, &from_ce1(&icmpv4_echo(CE1, dst, 64))).is_empty(), "{dst}");
    }
    for dst in ["2001:db8:1::1", "2001:db8:ff::1"] {
        assert!(r.send(PE1_CE1, &from_ce1_v6(&icmpv6_echo(CE1_V6, dst, 64))).is_empty(), "{dst}");
    }
    assert_eq!(r.events(Event::LeftToKernel) - before, 5);
    assert_eq!(r.events(Event::EchoReply), 0);
    r.assert_no_drops();
}

#[test]
fn kernel_mode_udp_and_tcp_to_the_router_get_no_answer_from_the_pipeline() {
    let mut r = Router::pe1_kernel();
    let before = r.events(Event::LeftToKernel);
    let frames = [
        // traceroute's last probe (TTL 1, to our address): the kernel sends port unreachable.
        from_ce1(&ipv4_udp(CE1, "198.18.1.1", 1, &pattern(32, 7))),
        from_ce1(&ipv4_udp(CE1, "198.18.255.1", 64, &pattern(32, 7))),
        // A BGP session to the loopback, an LDP session to the port address.
        from_ce1(&ipv4_tcp(CE1, "198.18.255.1", 64, 40000, 179, &pattern(19, 1), true)),
        from_ce1(&ipv4_tcp(CE1, "198.18.1.1", 1, 40000, 646, &pattern(19, 1), true)),
        from_ce1_v6(&ipv6_udp_ports(CE1_V6, "2001:db8:1::1", 1, 40000, 33434, &pattern(32, 7))),
        from_ce1_v6(&ipv6_tcp(CE1_V6, "2001:db8:ff::1", 64, 40000, 179, &pattern(19, 1))),
    ];
    for f in &frames {
        assert!(r.send(PE1_CE1, f).is_empty());
    }
    assert_eq!(r.events(Event::LeftToKernel) - before, frames.len() as u64);
    assert_eq!((r.events(Event::IcmpUnreachable), r.events(Event::IcmpTimeExceeded)), (0, 0));
    r.assert_no_drops();
}

#[test]
fn kernel_mode_routing_protocol_multicast_and_link_local_traffic_are_left_to_the_kernel_not_dropped() {
    let mut r = Router::p_kernel();
    let before = r.events(Event::LeftToKernel);
    const OSPF: u8 = 89;
    let v4_group = |group: &str, ip: &[u8]| ipv4_frame(ipv4_multicast_mac(group), PE1_CORE_MAC, ip);
    let v6_group =
        |group: &str, ip: &[u8]| ipv6_frame(vmpls_wire::icmpv6::multicast_mac(v6(group)), PE1_CORE_MAC, ip);
    let pe1_ll = "fe80::1";
    let frames = [
        // OSPFv2 hello, LDP hello, a limited broadcast.
        v4_group("224.0.0.5", &ipv4("198.18.10.1", "224.0.0.5", OSPF, 1, false, &pattern(44, 1))),
        v4_group("224.0.0.2", &ipv4_udp_ports("198.18.10.1", "224.0.0.2", 1, 646, 646, &pattern(30, 2))),
        ipv4_frame(
            [0xff; 6],
            PE1_CORE_MAC,
            &ipv4_udp_ports("0.0.0.0", "255.255.255.255", 64, 68, 67, &[0; 8]),
        ),
        // OSPFv3 hello, LDP hello over IPv6, router solicitation, MLDv2 report.
        v6_group("ff02::5", &ipv6(pe1_ll, "ff02::5", OSPF, 1, &pattern(40, 3))),
        v6_group("ff02::2", &ipv6_udp_ports(pe1_ll, "ff02::2", 255, 646, 646, &pattern(30, 4))),
        v6_group("ff02::2", &icmpv6_message(pe1_ll, "ff02::2", 255, 133, &[0; 4])),
        v6_group("ff02::16", &icmpv6_message(pe1_ll, "ff02::16", 1, 143, &[0; 4])),
        // Unicast to the kernel's link-local address: an OSPFv3 packet, a ping.
        ipv6_frame(P_WEST_MAC, PE1_CORE_MAC, &ipv6(pe1_ll, "fe80::2", OSPF, 1, &pattern(40, 5))),
        ipv6_frame(P_WEST_MAC, PE1_CORE_MAC, &icmpv6_echo(pe1_ll, "fe80::2", 64)),
    ];
    for f in &frames {
        assert!(r.send(P_WEST, f).is_empty());
    }
    assert_eq!(r.events(Event::LeftToKernel) - before, frames.len() as u64);
    r.assert_no_drops();
    p_still_forwards(&mut r);
}

#[test]
fn kernel_mode_transit_ip_and_labels_are_still_forwarded() {
    let mut r = Router::pe1_kernel();
    pe1_still_forwards(&mut r);
    let ip6 = ipv6_tcp(CE1_V6, CE2_V6, 64, 40000, 5201, &pattern(100, 3));
    let p = only(&r.send(PE1_CE1, &from_ce1_v6(&ip6)), PE1_CORE);
    assert_eq!(p.stack(), vec![(1002, 63, true)]);
    assert_eq!(r.events(Event::LabelPush), 2);
    let mut r = Router::p_kernel();
    p_still_forwards(&mut r);
    let mut r = Router::pe2_kernel();
    let ip = tcp_ce1_ce2(62, 1);
    let p = only(&r.send(PE2_CORE, &to_pe2(&[(2002, 62)], &ip)), PE2_CE2);
    assert_ipv4_forwarded(&p, &ip, 61);
    r.assert_no_drops();
}

#[test]
fn kernel_mode_transit_ttl_expiry_still_sends_time_exceeded() {
    let mut r = Router::pe1_kernel();
    let probe = ipv4_udp(CE1, CE2, 1, &pattern(32, 7));
    let p = only(&r.send(PE1_CE1, &from_ce1(&probe)), PE1_CE1);
    let h = p.ipv4();
    assert_eq!((h.src_addr(), h.dst_addr()), (v4("198.18.255.1"), v4(CE1)), "from the router address");
    assert_eq!(p.icmpv4().msg_type(), icmpv4::msg_type::TIME_EXCEEDED);
    r.assert_only_drop(DropReason::IpTtlExpired, 1);
    // At a P router: along the LSP with the received stack (RFC 4950).
    let mut r = Router::p_kernel();
    let p = only(&r.send(P_WEST, &to_p(&[(1002, 1)], &probe)), P_EAST);
    assert_eq!(p.labels[0].label, 2002);
    let icmp = p.icmpv4();
    assert_eq!(icmp.msg_type(), icmpv4::msg_type::TIME_EXCEEDED);
    assert_eq!(extension_stack(icmp.extension()), vec![word(1002, 1, true)]);
    assert_eq!(r.events(Event::IcmpAlongLsp), 1);
    r.assert_only_drop(DropReason::LabelTtlExpired, 1);
}

#[test]
fn kernel_mode_labelled_packets_for_the_router_are_dropped_as_local_after_pop() {
    let mut r = Router::pe2_kernel();
    let before = r.events(Event::LeftToKernel);
    let echo = icmpv4_echo(CE1, "198.18.255.3", 60);
    // Explicit null to the loopback, the egress label (pop and lookup), IPv6 explicit null.
    assert!(r.send(PE2_CORE, &to_pe2(&[(0, 60)], &echo)).is_empty());
    assert!(r.send(PE2_CORE, &to_pe2(&[(2002, 60)], &echo)).is_empty());
    let bgp = ipv6_tcp(CE1_V6, "2001:db8:ff::3", 60, 40000, 179, &pattern(19, 1));
    assert!(r.send(PE2_CORE, &to_pe2(&[(2, 60)], &bgp)).is_empty());
    r.assert_only_drop(DropReason::LocalAfterPop, 3);
    assert_eq!(r.events(Event::LeftToKernel), before, "the kernel got nothing it could read");
    assert_eq!(r.events(Event::EchoReply), 0);
}

#[test]
fn own_mode_answers_udp_to_the_router_and_drops_multicast_as_today() {
    let mut r = Router::pe1();
    let probe = ipv4_udp(CE1, "198.18.1.1", 1, &pattern(32, 7));
    let p = only(&r.send(PE1_CE1, &from_ce1(&probe)), PE1_CE1);
    let icmp = p.icmpv4();
    assert_eq!((icmp.msg_type(), icmp.code()), (icmpv4::msg_type::DST_UNREACHABLE, 3), "port unreachable");
    r.assert_only_drop(DropReason::LocalUnhandled, 1);
    let hello = ipv4_udp_ports("198.18.1.2", "224.0.0.2", 1, 646, 646, &pattern(30, 2));
    assert!(r.send(PE1_CE1, &ipv4_frame(ipv4_multicast_mac("224.0.0.2"), CE1_MAC, &hello)).is_empty());
    assert_eq!(r.drops(DropReason::IpMulticast), 1);
    // Explicit null to the router's address: answered, over the reverse LSP.
    let mut r = Router::pe2();
    let echo = icmpv4_echo(CE1, "198.18.255.3", 60);
    let p = only(&r.send(PE2_CORE, &to_pe2(&[(0, 60)], &echo)), PE2_CORE);
    assert_eq!((p.labels[0].label, p.icmpv4().msg_type()), (1001, icmpv4::msg_type::ECHO_REPLY));
    assert_eq!(r.events(Event::LeftToKernel), 0);
    r.assert_no_drops();
}

#[test]
fn every_counter_has_a_unique_snake_case_name() {
    let drops: Vec<&str> = DropReason::ALL.iter().map(|d| d.name()).collect();
    let events: Vec<&str> = Event::ALL.iter().map(|e| e.name()).collect();
    assert!(drops.contains(&"local_after_pop") && events.contains(&"left_to_kernel"));
    let mut all: Vec<&str> = drops.iter().chain(&events).copied().collect();
    assert!(all.iter().all(|n| n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')));
    all.sort_unstable();
    let n = all.len();
    all.dedup();
    assert_eq!(all.len(), n, "duplicate counter names");
    for (i, d) in DropReason::ALL.iter().enumerate() {
        assert_eq!(*d as usize, i, "DropReason::ALL in declaration order");
    }
    for (i, e) in Event::ALL.iter().enumerate() {
        assert_eq!(*e as usize, i, "Event::ALL in declaration order");
    }
}

/// An IS-IS level-2 LAN hello as FRR 8.4's isisd sent it on a veth (captured with
/// tcpdump): 802.3 with a length, LLC 0xfefe03, to AllL2ISs; the header and the first
/// TLVs, then the padding TLVs (type 8) that fill it to the link's MTU.
fn isis_l2_lan_hello() -> Vec<u8> {
    const HEAD: &str = "0180c20000151a708abd26cf05dcfefe03831b01001001000002000000000001\
                        000a05d940000000000000008101cc0104034900018404c6126301";
    let mut f: Vec<u8> =
        (0..HEAD.len()).step_by(2).map(|i| u8::from_str_radix(&HEAD[i..i + 2], 16).unwrap()).collect();
    for len in [255u8, 255, 255, 255, 255, 168] {
        f.extend([8, len]);
        f.extend(std::iter::repeat_n(0, usize::from(len)));
    }
    assert_eq!(f.len(), 1514);
    f
}

#[test]
fn kernel_mode_is_is_hellos_are_left_to_isisd_and_own_mode_counts_them_unknown() {
    let hello = isis_l2_lan_hello();
    let mut r = Router::p_kernel();
    let before = r.events(Event::LeftToKernel);
    assert!(r.send(P_WEST, &hello).is_empty());
    assert_eq!(r.events(Event::LeftToKernel) - before, 1);
    r.assert_no_drops();

    // Where vmpls is the host stack nobody here speaks IS-IS: a named drop, as before.
    let mut r = Router::p();
    assert!(r.send(P_WEST, &hello).is_empty());
    assert_eq!(r.drops(DropReason::UnknownEthertype), 1);
}

/// pe1 with tables large enough for the lookup stage of a batch
/// ([`vmpls_fib::PREFETCH_MIN_ROUTES`] routes of each kind): 198.19.0.0 + i/32 pushes
/// label 20000 + i, label 10000 + i is swapped for 100000 + i, both toward p.
fn pe1_large() -> Router {
    let mut b = pe1_builder();
    for i in 0..vmpls_fib::PREFETCH_MIN_ROUTES as u32 {
        let dst = IpAddr::V4(std::net::Ipv4Addr::from(0xc613_0000 + i));
        let push = push_route(single(PE1_CORE, "198.18.10.2", &[20_000 + i]), TtlModel::Uniform);
        b.add_prefix_route(DEFAULT_VRF, dst, 32, push).unwrap();
        b.add_label_route(10_000 + i, swap_route(single(PE1_CORE, "198.18.10.2", &[100_000 + i]))).unwrap();
    }
    let mut r = Router::new(b, pe1_ports());
    r.resolve_all_pe1();
    r
}

/// Moves the frames of `out` to the end of `sent`, the frames each port sent in order.
fn drain(out: &mut Output, sent: &mut [Vec<Vec<u8>>]) {
    for (tx, sent) in out.tx.iter_mut().zip(sent) {
        sent.extend(tx.drain(..).map(|p| p.frame().to_vec()));
    }
}

#[test]
fn a_batch_through_large_tables_goes_out_as_its_frames_one_by_one() {
    // What the lookup stage reads ahead (routed and labelled frames spread over the
    // tables), and what it must not trip on or change: no route, TTL 1 (ICMP errors),
    // unknown and reserved labels, frames cut short in the headers it reads.
    let udp = |dst: &str, ttl: u8, seed: u8| ipv4_udp(CE1, dst, ttl, &pattern(20, seed));
    let mut frames: Vec<(u16, Vec<u8>)> = Vec::new();
    for i in 0..150u32 {
        let dst = std::net::Ipv4Addr::from(0xc613_0000 + i * 53).to_string();
        frames.push((PE1_CE1, from_ce1(&udp(&dst, 64, i as u8))));
        let label = 10_000 + i * 53;
        frames.push((PE1_CORE, mpls_frame(PE1_CORE_MAC, P_WEST_MAC, &[(label, 64)], &udp(CE2, 64, i as u8))));
        match i % 10 {
            0 => frames.push((PE1_CE1, from_ce1(&udp("203.0.113.1", 64, 1)))),
            1 => frames.push((PE1_CE1, from_ce1(&udp(&dst, 1, 2)))),
            2 => {
                frames.push((PE1_CORE, mpls_frame(PE1_CORE_MAC, P_WEST_MAC, &[(label, 1)], &udp(CE2, 64, 3))))
            }
            3 => frames
                .push((PE1_CORE, mpls_frame(PE1_CORE_MAC, P_WEST_MAC, &[(999_999, 64)], &udp(CE2, 64, 4)))),
            4 => frames.push((PE1_CORE, mpls_frame(PE1_CORE_MAC, P_WEST_MAC, &[(7, 64)], &udp(CE2, 64, 5)))),
            5 => frames.push((PE1_CE1, from_ce1(&udp(&dst, 64, 6))[..30].to_vec())),
            6 => frames
                .push((PE1_CORE, mpls_frame(PE1_CORE_MAC, P_WEST_MAC, &[(label, 64)], &[])[..16].to_vec())),
            7 => frames.push((PE1_CE1, vec![1, 2, 3])),
            _ => {}
        }
    }
    let mut batched = pe1_large();
    let mut alone = pe1_large();
    let (mut out_batched, mut out_alone) = (Output::new(2), Output::new(2));
    let (mut sent_batched, mut sent_alone) = (vec![Vec::new(); 2], vec![Vec::new(); 2]);
    for chunk in frames.chunks(64) {
        let mut batch: Vec<Packet> = chunk.iter().map(|(port, f)| Packet::from_frame(*port, f)).collect();
        while !batch.is_empty() {
            batched.dp.process_batch(batched.now, &mut batch, &mut batched.pool, &mut out_batched);
            drain(&mut out_batched, &mut sent_batched);
        }
        for (port, f) in chunk {
            alone.dp.process(alone.now, Packet::from_frame(*port, f), &mut alone.pool, &mut out_alone);
            drain(&mut out_alone, &mut sent_alone);
        }
    }
    for port in 0..2 {
        assert_eq!(sent_batched[port].len(), sent_alone[port].len(), "frames out of port {port}");
        let first_difference = sent_batched[port].iter().zip(&sent_alone[port]).position(|(a, b)| a != b);
        assert_eq!(first_difference, None, "port {port}: frames differ");
    }
    assert_eq!(format!("{:?}", batched.dp.counters()), format!("{:?}", alone.dp.counters()));
    // Every routed and every labelled frame went through (the labelled ones with TTL 1
    // send their time exceeded along the LSP: 15 more swaps).
    assert_eq!(batched.events(Event::LabelPush), 150);
    assert_eq!(batched.events(Event::LabelSwap), 165);
    for reason in [
        DropReason::NoRoute,
        DropReason::IpTtlExpired,
        DropReason::LabelTtlExpired,
        DropReason::UnknownLabel,
        DropReason::ReservedLabel,
        DropReason::BadIpv4Header,
        DropReason::TruncatedLabelStack,
        DropReason::TruncatedEthernet,
    ] {
        assert_eq!(batched.drops(reason), 15, "{reason:?}");
    }
}
