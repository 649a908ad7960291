//! The cached paths against the general path: the same frames through two routers, one
//! by [`Dataplane::process`] (the cached swap, IPv4 route and pop first), one straight
//! into [`Dataplane::mpls_input`] or [`Dataplane::ipv4_input`], must give the same frames
//! out, the same counters and the same neighbour table, including across neighbour
//! changes and stale entries.

use std::time::Duration;

use vmpls_fib::{LabelAction, LabelRoute, Nexthop, NexthopGroup, PrefixRoute, RouteTarget, TtlModel};

use std::net::Ipv6Addr;

use vmpls_wire::{arp, checksum, icmpv6, ipv6, mpls, virtio_net};

use super::icmp::may_answer_with_error;
use super::ipv6::{MAX_IPV6_EXT_HEADERS, ipv6_repr};
use super::*;

const WEST_MAC: [u8; 6] = [2, 0, 0, 0, 0x10, 0x02];
const EAST_MAC: [u8; 6] = [2, 0, 0, 0, 0x20, 0x01];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0x20, 0x02];
const PEER2_MAC: [u8; 6] = [2, 0, 0, 0, 0x20, 0x03];

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn route(nexthops: &[(PortId, &str, &[u32])]) -> LabelRoute {
    let nhs =
        nexthops.iter().map(|&(p, via, labels)| Nexthop::new(p, Some(ip(via)), labels.to_vec())).collect();
    LabelRoute::new(LabelAction::Forward(NexthopGroup::new(nhs).unwrap()), TtlModel::Uniform)
}

fn router() -> Dataplane {
    router_at(Instant::now())
}

/// The test router, its east peers learned at `now`.
fn router_at(now: Instant) -> Dataplane {
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
    let mut dp = Dataplane::new(FibHandle::new(b.build().unwrap()), ports, DataplaneConfig::default());
    for a in ["198.18.20.2", "198.18.20.3", "2001:db8:20::2"] {
        dp.neighbors.learn(now, 1, ip(a), PEER_MAC, true);
    }
    dp
}

/// A labelled frame to the west port over a UDP/IPv4 packet of `payload` bytes to
/// 198.18.2.2.
fn frame(entries: &[(u32, u8, bool)], payload: usize) -> Vec<u8> {
    ip_frame(entries, "198.18.2.2", 64, payload, 0)
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

fn run(dp: &mut Dataplane, now: Instant, cached: bool, pool: &mut PacketPool) -> Vec<(PortId, Vec<u8>)> {
    run_frames(dp, now, cached, pool, cases())
}

/// `frames` through `dp`: the whole input (`cached`, the cached paths first) or straight
/// into the general path of their EtherType.
fn run_frames(
    dp: &mut Dataplane,
    now: Instant,
    cached: bool,
    pool: &mut PacketPool,
    frames: Vec<Packet>,
) -> Vec<(PortId, Vec<u8>)> {
    let mut out = Output::new(dp.ports().len());
    for pkt in frames {
        if cached {
            dp.process(now, pkt, pool, &mut out);
        } else {
            let fib = dp.fib.load_full();
            dp.counters.rx_frames[usize::from(pkt.port)] += 1;
            let mut b = Batch { fib: &fib, now, pool, out: &mut out, route_hint: std::cell::Cell::new(None) };
            if is_labelled(pkt.frame()) {
                dp.mpls_input(&mut b, pkt, false);
            } else {
                let ctx = IpContext {
                    in_port: pkt.port,
                    vrf: port_vrf(&fib, pkt.port),
                    originated: false,
                    stack: None,
                };
                dp.ipv4_input(&mut b, pkt, ctx);
            }
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
    use ipv6::protocol::{IPV6_FRAG, IPV6_ICMP as ICMP6, IPV6_OPTS as OPTS, UDP};
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
    assert!(!may_answer_with_error(&ipv6_packet(IPV6_FRAG, &first)));
    let later = [UDP, 0, 0, 8 << 3, 0, 0, 0, 7, 1, 2, 3, 4, 5, 6, 7, 8];
    assert!(!may_answer_with_error(&ipv6_packet(IPV6_FRAG, &later)), "offset 8");
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
    write_ethernet(&mut f, dst, mac, EtherType::Arp);
    repr.emit(&mut arp::Packet::new_unchecked(&mut f[ETH..]));
    Packet::from_frame(0, &f)
}

/// A neighbour solicitation or advertisement from `src` (MAC `mac`) on the east port.
fn nd_frame(src: &str, mac: [u8; 6], advert: Option<(&str, bool)>, target: &str) -> Packet {
    let (src, target) = (ip6(src), ip6(target));
    let dst = ip6("2001:db8:20::1");
    let mut f = vec![0u8; ETH + 40 + 32];
    write_ethernet(&mut f, EAST_MAC, mac, EtherType::Ipv6);
    let n = match advert {
        None => icmpv6::emit_neighbor_solicit(&mut f[ETH + 40..], src, dst, target, mac).unwrap(),
        Some((_, o)) => {
            icmpv6::emit_neighbor_advert(&mut f[ETH + 40..], src, dst, target, mac, true, false, o).unwrap()
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
fn cached_swap_matches_the_general_path() {
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
    assert!(a.counters().events(Event::LabelSwap) >= 6, "the cached cases were switched");
    let moved = through_neighbour_changes(&mut a, &mut b, &mut pa, &mut pb, t0, step);
    assert_ne!(first, moved);
}

/// Runs `step` (the same frames through a cached router `a` and a general one `b`, which
/// compares what comes out) as the east peer 198.18.20.2 moves to another MAC, then goes
/// stale (the general path switches and asks again), then expires and is forgotten.
/// Returns what came out after the move, which must have the new MAC.
fn through_neighbour_changes(
    a: &mut Dataplane,
    b: &mut Dataplane,
    pa: &mut PacketPool,
    pb: &mut PacketPool,
    t0: Instant,
    step: impl Fn(
        &mut Dataplane,
        &mut Dataplane,
        &mut PacketPool,
        &mut PacketPool,
        Instant,
    ) -> Vec<(PortId, Vec<u8>)>,
) -> Vec<(PortId, Vec<u8>)> {
    for dp in [&mut *a, &mut *b] {
        dp.neighbors.learn(t0, 1, ip("198.18.20.2"), PEER2_MAC, false);
    }
    let moved = step(a, b, pa, pb, t0 + Duration::from_secs(1));
    assert!(moved.iter().any(|(_, f)| f[..6] == PEER2_MAC), "the new MAC is used");
    step(a, b, pa, pb, t0 + Duration::from_secs(31));
    for dp in [&mut *a, &mut *b] {
        let mut out = Output::new(dp.ports().len());
        let mut pool = PacketPool::new(8);
        dp.poll(t0 + Duration::from_secs(40), &mut pool, &mut out);
    }
    step(a, b, pa, pb, t0 + Duration::from_secs(40));
    moved
}

const CUST_MAC: [u8; 6] = [2, 0, 0, 0, 0x30, 0x01];
const CE_MAC: [u8; 6] = [2, 0, 0, 0, 0x30, 0x02];

/// A PE: west (default VRF) where IPv4 comes in and labels are popped, east toward the
/// core (pushes, plain routes, ECMP, an unresolved next hop, blackhole and reject), cust
/// in VRF red; labels 4001 (pop, uniform), 4002 (pop into red), 4003 (pop, pipe).
fn pe_at(now: Instant) -> Dataplane {
    pe_with(now, 0)
}

/// [`pe_at`]'s PE with `more` routes besides: host routes 198.19.0.0/32 and up, pushing
/// label 100,000 and up toward the east peer.
fn pe_with(now: Instant, more: u32) -> Dataplane {
    let mut b = Fib::builder();
    b.router_v4("198.18.255.2".parse().unwrap());
    let red = b.add_vrf("red").unwrap();
    b.add_port("west", vmpls_fib::DEFAULT_VRF, &[(ip("198.18.10.2"), 24)]).unwrap();
    b.add_port("east", vmpls_fib::DEFAULT_VRF, &[(ip("198.18.20.1"), 24)]).unwrap();
    b.add_port("cust", red, &[(ip("198.18.30.1"), 24)]).unwrap();
    let forward = |nexthops: &[(PortId, &str, &[u32])], ttl_model| {
        let nhs = nexthops
            .iter()
            .map(|&(p, via, labels)| Nexthop::new(p, Some(ip(via)), labels.to_vec()))
            .collect();
        PrefixRoute::new(RouteTarget::Forward(NexthopGroup::new(nhs).unwrap())).with_ttl_model(ttl_model)
    };
    let uniform = TtlModel::Uniform;
    let routes = [
        ("198.18.2.0", forward(&[(1, "198.18.20.2", &[3002])], uniform)),
        ("198.18.3.0", forward(&[(1, "198.18.20.2", &[3003, 3004])], uniform)),
        ("198.18.4.0", forward(&[(1, "198.18.20.2", &[])], uniform)),
        ("198.18.5.0", forward(&[(1, "198.18.20.2", &[3005])], TtlModel::Pipe)),
        ("198.18.6.0", forward(&[(1, "198.18.20.2", &[3006]), (1, "198.18.20.3", &[3007])], uniform)),
        ("198.18.7.0", forward(&[(1, "198.18.20.9", &[3008])], uniform)),
        ("198.18.8.0", PrefixRoute::new(RouteTarget::Blackhole)),
        ("198.18.9.0", PrefixRoute::new(RouteTarget::Reject(Reject::Unreachable))),
    ];
    for (prefix, route) in routes {
        b.add_prefix_route(vmpls_fib::DEFAULT_VRF, ip(prefix), 24, route).unwrap();
    }
    b.add_prefix_route(red, ip("198.18.40.0"), 24, forward(&[(2, "198.18.30.2", &[])], uniform)).unwrap();
    for i in 0..more {
        let host =
            IpAddr::V4(std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(198, 19, 0, 0)) + i));
        b.add_prefix_route(
            vmpls_fib::DEFAULT_VRF,
            host,
            32,
            forward(&[(1, "198.18.20.2", &[100_000 + i])], uniform),
        )
        .unwrap();
    }
    let pop = |vrf, ttl_model| LabelRoute::new(LabelAction::PopAndLookup { vrf }, ttl_model);
    b.add_label_route(4001, pop(vmpls_fib::DEFAULT_VRF, uniform)).unwrap();
    b.add_label_route(4002, pop(red, uniform)).unwrap();
    b.add_label_route(4003, pop(vmpls_fib::DEFAULT_VRF, TtlModel::Pipe)).unwrap();
    let ports = vec![
        PortInfo { id: 0, name: "west".into(), mac: WEST_MAC, mtu: 1500, caps: PortCaps::default() },
        PortInfo { id: 1, name: "east".into(), mac: EAST_MAC, mtu: 1500, caps: PortCaps::default() },
        PortInfo { id: 2, name: "cust".into(), mac: CUST_MAC, mtu: 1500, caps: PortCaps::default() },
    ];
    let mut dp = Dataplane::new(FibHandle::new(b.build().unwrap()), ports, DataplaneConfig::default());
    for a in ["198.18.20.2", "198.18.20.3"] {
        dp.neighbors.learn(now, 1, ip(a), PEER_MAC, true);
    }
    dp.neighbors.learn(now, 2, ip("198.18.30.2"), CE_MAC, true);
    dp
}

/// A UDP/IPv4 packet 198.18.1.2 -> `dst` (TTL `ttl`, DSCP 46, `payload` bytes) to the
/// west port under `entries` (none: unlabelled), with `pad` bytes of Ethernet padding.
fn ip_frame(entries: &[(u32, u8, bool)], dst: &str, ttl: u8, payload: usize, pad: usize) -> Vec<u8> {
    let mut f = WEST_MAC.to_vec();
    f.extend_from_slice(&[2, 0, 0, 0, 0x10, 0x01]);
    let ethertype = if entries.is_empty() { EtherType::Ipv4 } else { EtherType::Mpls };
    f.extend_from_slice(&u16::from(ethertype).to_be_bytes());
    for &(label, ttl, bottom) in entries {
        f.extend_from_slice(&mpls::Repr { label, tc: 5, bottom, ttl }.to_u32().to_be_bytes());
    }
    let dst: std::net::Ipv4Addr = dst.parse().unwrap();
    let mut ip = vec![0x45, 46 << 2, 0, 0, 0x12, 0x34, 0x40, 0, ttl, 17, 0, 0, 198, 18, 1, 2];
    ip.extend_from_slice(&dst.octets());
    ip[2..4].copy_from_slice(&((28 + payload) as u16).to_be_bytes());
    let c = !checksum::fold(checksum::sum(&ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x30, 0x39, 0x30, 0x3a]);
    f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend((0..payload).map(|i| i as u8));
    f.extend(std::iter::repeat_n(0, pad));
    f
}

/// Frames for the PE: each cached case and, beside it, each way it must not be taken.
fn pe_cases() -> Vec<Packet> {
    let plain = |dst: &str, ttl: u8| ip_frame(&[], dst, ttl, 18, 0);
    let popped = |label: u32, label_ttl: u8, dst: &str, ttl: u8| {
        ip_frame(&[(label, label_ttl, true)], dst, ttl, 18, 0)
    };
    let mut frames = vec![
        // Pushes, plain routing, ECMP, TTL models, TTL at its limits.
        plain("198.18.2.7", 64),
        plain("198.18.3.7", 64),
        plain("198.18.4.7", 64),
        plain("198.18.5.7", 64),
        plain("198.18.6.7", 64),
        plain("198.18.6.8", 64),
        plain("198.18.2.7", 2),
        plain("198.18.2.7", 1),
        plain("198.18.2.7", 0),
        // Connected, unresolved, blackhole, reject, no route, local, broadcast, multicast.
        plain("198.18.20.2", 64),
        plain("198.18.20.77", 64),
        plain("198.18.7.7", 64),
        plain("198.18.8.7", 64),
        plain("198.18.9.7", 64),
        plain("198.18.99.7", 64),
        plain("198.18.10.2", 64),
        plain("255.255.255.255", 64),
        plain("224.0.0.5", 64),
        // Padding, a packet that fits only without the label, one over the MTU (DF).
        ip_frame(&[], "198.18.2.7", 64, 18, 20),
        ip_frame(&[], "198.18.2.7", 64, 1500 - 28 - 4, 0),
        ip_frame(&[], "198.18.4.7", 64, 1500 - 28, 0),
        ip_frame(&[], "198.18.2.7", 64, 1500 - 28 - 3, 0),
        // Pops: into the default VRF and on (plain, pushed again), into red, pipe model,
        // label TTL below the IP TTL, TTL running out either way, not the bottom label,
        // to the router itself, padded.
        popped(4001, 64, "198.18.4.7", 64),
        popped(4001, 64, "198.18.2.7", 64),
        popped(4002, 64, "198.18.40.7", 64),
        popped(4003, 64, "198.18.4.7", 9),
        popped(4003, 64, "198.18.4.7", 1),
        popped(4001, 2, "198.18.4.7", 64),
        popped(4001, 1, "198.18.4.7", 64),
        popped(4001, 64, "198.18.4.7", 1),
        popped(4001, 64, "198.18.8.7", 64),
        popped(4001, 64, "198.18.10.2", 64),
        ip_frame(&[(4001, 64, false), (4002, 64, true)], "198.18.40.7", 64, 18, 0),
        ip_frame(&[(4001, 64, true)], "198.18.4.7", 64, 18, 12),
        ip_frame(&[(4001, 64, true)], "198.18.4.7", 64, 1500 - 28, 0),
        // One destination in two VRFs, one after the other: no route in the default VRF,
        // a route in red (a batch's frames reuse a lookup only for the same VRF).
        plain("198.18.40.7", 64),
        popped(4002, 64, "198.18.40.7", 64),
        plain("198.18.40.7", 64),
    ];
    // A wrong IP checksum, plain and under a label.
    for mut f in [plain("198.18.2.7", 64), popped(4001, 64, "198.18.4.7", 64)] {
        let at = f.len() - 18 - 8 - 20 + 10;
        f[at] ^= 0x55;
        frames.push(f);
    }
    // IPv4 options (IHL 6): the general path's.
    let mut options = plain("198.18.2.7", 64);
    options.splice(ETH + 20..ETH + 20, [1, 1, 1, 0]);
    options[ETH] = 0x46;
    let total = u16::from_be_bytes([options[ETH + 2], options[ETH + 3]]) + 4;
    options[ETH + 2..ETH + 4].copy_from_slice(&total.to_be_bytes());
    options[ETH + 10..ETH + 12].fill(0);
    let c = !checksum::fold(checksum::sum(&options[ETH..ETH + 24]));
    options[ETH + 10..ETH + 12].copy_from_slice(&c.to_be_bytes());
    frames.push(options);
    // Cut short inside the IP header, plain and popped.
    frames.push(plain("198.18.2.7", 64)[..ETH + 12].to_vec());
    frames.push(popped(4001, 64, "198.18.4.7", 64)[..ETH + 4 + 12].to_vec());
    let mut v: Vec<Packet> = frames.iter().map(|f| Packet::from_frame(0, f)).collect();
    // A partial checksum toward ports that do not take one; a UDP super-frame.
    let mut csum = Packet::from_frame(0, &plain("198.18.2.7", 64));
    csum.offload =
        virtio_net::Repr { needs_csum: true, csum_start: 34, csum_offset: 6, ..Default::default() };
    v.push(csum);
    let mut csum_popped = Packet::from_frame(0, &popped(4001, 64, "198.18.4.7", 64));
    csum_popped.offload =
        virtio_net::Repr { needs_csum: true, csum_start: 38, csum_offset: 6, ..Default::default() };
    v.push(csum_popped);
    let mut gso = Packet::from_frame(0, &ip_frame(&[], "198.18.2.7", 64, 3000, 0));
    gso.offload = virtio_net::Repr {
        needs_csum: true,
        gso_type: virtio_net::GsoType::UdpL4,
        gso_size: 1000,
        csum_start: 34,
        csum_offset: 6,
        ..Default::default()
    };
    v.push(gso);
    v
}

#[test]
fn cached_ipv4_route_and_pop_match_the_general_path() {
    let t0 = Instant::now();
    let (mut a, mut b) = (pe_at(t0), pe_at(t0));
    let (mut pa, mut pb) = (PacketPool::new(256), PacketPool::new(256));
    let step = |a: &mut Dataplane, b: &mut Dataplane, pa: &mut PacketPool, pb: &mut PacketPool, now| {
        let sa = run_frames(a, now, true, pa, pe_cases());
        let sb = run_frames(b, now, false, pb, pe_cases());
        assert_eq!(sa.len(), sb.len(), "frames out");
        for (i, (x, y)) in sa.iter().zip(&sb).enumerate() {
            assert_eq!(x, y, "frame {i} out");
        }
        assert_eq!(state(a), state(b), "counters and neighbours");
        sa
    };
    let first = step(&mut a, &mut b, &mut pa, &mut pb, t0);
    // The cases the cached paths take were taken, and did what a PE does.
    assert!(a.counters().events(Event::LabelPush) >= 6, "{:?}", a.counters());
    assert!(a.counters().events(Event::LabelPop) >= 8, "{:?}", a.counters());
    let to_red: Vec<_> = first.iter().filter(|(p, _)| *p == 2).collect();
    assert!(!to_red.is_empty() && to_red.iter().all(|(_, f)| f[..6] == CE_MAC), "popped into red");
    // ECMP: the two flows of 198.18.6.0/24 each take the path the general path takes
    // (compared above); a new MAC and a stale entry change the cached answer alike.
    through_neighbour_changes(&mut a, &mut b, &mut pa, &mut pb, t0, step);
}

/// Through tables large enough for the lookup stage ([`prefetch_routes`]), a batch comes
/// out as its frames one by one: the IPv4 routes the stage hands over are the frames' own.
#[test]
fn a_batch_through_large_tables_matches_its_frames_one_by_one() {
    let sent = batch_against_one_by_one(vmpls_fib::PREFETCH_MIN_ROUTES as u32, 512);
    let label_of = |f: &[u8]| u32::from_be_bytes([0, f[14], f[15], f[16]]) >> 4;
    let pushed: Vec<u32> =
        sent.iter().filter(|(p, f)| *p == 1 && is_labelled(f)).map(|(_, f)| label_of(f)).collect();
    for label in [100_007, 108_191, 100_001] {
        assert!(pushed.contains(&label), "label {label} pushed: {pushed:?}");
    }
}

/// Through small tables too (no lookup stage), the cached frames of a batch and the
/// general ones come out in order, as one by one.
#[test]
fn a_batch_mixing_cached_and_general_frames_matches_its_frames_one_by_one() {
    batch_against_one_by_one(0, 512);
}

/// A batch that stops early for want of buffers leaves its rest untouched, to be taken on
/// the next call: no frame processed twice, none lost.
#[test]
fn a_batch_stopped_for_buffers_leaves_its_rest_untouched() {
    // Spare buffers below the low water from the start: the batch stops after each frame
    // of the general path.
    batch_against_one_by_one(0, POOL_LOW_WATER - 8);
}

/// PE frames, the cached cases and those that must go the general way (and, with `more`
/// host routes, lookups under their own /24s and a miss), through one router as batches
/// and through another one by one, with `spare` buffers in the first's pool beside the
/// batch's: the same frames out, counters and neighbours. Returns the frames sent.
fn batch_against_one_by_one(more: u32, spare: usize) -> Vec<(PortId, Vec<u8>)> {
    let t0 = Instant::now();
    let (mut a, mut b) = (pe_with(t0, more), pe_with(t0, more));
    assert_eq!(a.fib.load().prefetch_pays(), more >= vmpls_fib::PREFETCH_MIN_ROUTES as u32);
    let mut frames = pe_cases();
    // Host routes under /24s of their own (the index's `tbl8` entries), and a miss.
    for dst in ["198.19.0.7", "198.19.31.255", "198.19.0.1", "198.19.32.0"] {
        frames.push(Packet::from_frame(0, &ip_frame(&[], dst, 64, 18, 0)));
    }
    let (mut pa, mut pb) = (PacketPool::new(frames.len() + spare), PacketPool::new(512));
    let mut out = Output::new(a.ports().len());
    let mut batch: Vec<Packet> = frames
        .iter()
        .map(|f| {
            let mut p = pa.get().unwrap();
            p.set_frame(f.frame());
            p.port = f.port;
            p.offload = f.offload;
            p
        })
        .collect();
    assert!(batch.len() > LOOKAHEAD, "more than one window");
    let mut sa = Vec::new();
    let mut calls = 0;
    while !batch.is_empty() && calls < 1000 {
        a.process_batch(t0, &mut batch, &mut pa, &mut out);
        for tx in &mut out.tx {
            for p in tx.drain(..) {
                sa.push((p.port, p.frame().to_vec()));
                pa.put(p);
            }
        }
        calls += 1;
    }
    assert!(batch.is_empty());
    assert_eq!(calls > 1, spare < POOL_LOW_WATER, "stopped early only for want of buffers");
    let sb = run_frames(&mut b, t0, true, &mut pb, frames);
    assert_eq!(sa.len(), sb.len(), "frames out");
    for (i, (x, y)) in sa.iter().zip(&sb).enumerate() {
        assert_eq!(x, y, "frame {i} out");
    }
    assert_eq!(state(&a), state(&b), "counters and neighbours");
    sa
}

/// A port made point-to-point (an MPLS-in-UDP tunnel) sends to its one remote, also for
/// next hops the adjacency cache had learned on it before.
#[test]
fn a_point_to_point_port_sends_without_its_cached_neighbours() {
    let t0 = Instant::now();
    let mut dp = router_at(t0);
    let mut pool = PacketPool::new(16);
    let swapped = |dp: &mut Dataplane, pool: &mut PacketPool, label: u32| {
        let sent =
            run_frames(dp, t0, true, pool, vec![Packet::from_frame(0, &frame(&[(label, 64, true)], 18))]);
        let [(1, f)] = &sent[..] else { panic!("label {label}: {sent:?}") };
        <[u8; 6]>::try_from(&f[..6]).unwrap()
    };
    assert_eq!(swapped(&mut dp, &mut pool, 1002), PEER_MAC, "learned, and now cached");
    dp.set_point_to_point(1);
    let remote = swapped(&mut dp, &mut pool, 1002);
    assert_ne!(remote, PEER_MAC, "the cached neighbour is not used");
    assert_eq!(swapped(&mut dp, &mut pool, 1003), remote, "an unknown next hop: the same remote, no ARP");
}

/// ARP requests the router sent for `target`, taken out of `out`.
fn arp_requests_for(out: &mut Output, pool: &mut PacketPool, target: &str) -> usize {
    let mut n = 0;
    for tx in &mut out.tx {
        for p in tx.drain(..) {
            let request = arp::Packet::new_checked(&p.frame()[ETH..]).and_then(|a| arp::Repr::parse(&a));
            if request.is_ok_and(|r| {
                r.operation == arp::Operation::Request && IpAddr::V4(r.target_protocol_addr) == ip(target)
            }) {
                n += 1;
            }
            pool.put(p);
        }
    }
    n
}

/// The pipeline's timers follow the time it is given, wherever that is from the
/// machine's clock (years ahead, a day behind): the deadline it reports, the request it
/// repeats and the frame it drops happen at the given times, and only then. A pipeline
/// that read the clock for any of it would act on the wrong side of a deadline here.
#[test]
fn timers_follow_the_time_given_not_the_clock() {
    let year = Duration::from_secs(365 * 24 * 3600);
    let day = Duration::from_secs(24 * 3600);
    let clock = Instant::now();
    for t0 in [Some(clock + 50 * year), clock.checked_sub(day), Some(clock)].into_iter().flatten() {
        let cfg = DataplaneConfig::default().neighbor;
        let mut dp = router_at(t0);
        let mut pool = PacketPool::new(16);
        let mut out = Output::new(2);
        let silent = "198.18.20.9"; // label 1003's next hop, never answers
        let peers_age_out = t0 + cfg.reachable + cfg.stale_grace;
        assert_eq!(dp.poll_timeout(), Some(peers_age_out), "the learned peers' ageing");
        dp.process(t0, Packet::from_frame(0, &frame(&[(1003, 64, true)], 18)), &mut pool, &mut out);
        assert_eq!(arp_requests_for(&mut out, &mut pool, silent), 1, "asked at once");
        assert_eq!(dp.neighbors().held(), 1, "the frame waits");
        for n in 1..u32::from(cfg.max_probes) {
            let due = t0 + cfg.retransmit * n;
            assert_eq!(dp.poll_timeout(), Some(due), "request {n} is due a retransmission interval later");
            dp.poll(due - Duration::from_millis(1), &mut pool, &mut out);
            assert_eq!(arp_requests_for(&mut out, &mut pool, silent), 0, "not before its time");
            dp.poll(due, &mut pool, &mut out);
            assert_eq!(arp_requests_for(&mut out, &mut pool, silent), 1, "asked again at its time");
        }
        let give_up = t0 + cfg.retransmit * u32::from(cfg.max_probes);
        assert_eq!(dp.poll_timeout(), Some(give_up));
        dp.poll(give_up, &mut pool, &mut out);
        assert_eq!(dp.counters().drops(DropReason::NeighborUnresolved), 1, "dropped at its time");
        assert_eq!(dp.neighbors().held(), 0);
        assert_eq!(dp.poll_timeout(), Some(peers_age_out));
        dp.poll(peers_age_out, &mut pool, &mut out);
        assert_eq!(dp.neighbors().entries().count(), 0, "the peers aged out at their time");
        assert_eq!(dp.poll_timeout(), None, "no timer left");
    }
}
