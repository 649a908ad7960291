//! ECMP in the programs on a -- r -- {b, c} (veth): raw frames of many flows sent from a's
//! AF_PACKET socket, each checked to arrive at the next hop the pipeline would choose for
//! it (the FIB's `NexthopGroup::select` over `vmpls_dataplane::hash`), so a flow keeps its
//! path whether the programs or the pipeline forward it. Needs root.

mod common;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use common::{End, Netns, PacketSocket, eth, ipv4_udp, lse, veth};
use vmpls_dataplane::hash::{ip_flow_hash, mpls_flow_hash};
use vmpls_fastpath::{
    Adjacency, Delivery, FastGroup, FastNexthop, FastPath, FastPort, FastTables, FastTablesChange,
    LabelEntry, RouteEntry,
};
use vmpls_fib::{Nexthop, NexthopGroup};

const A0: [u8; 6] = [0x02, 0xec, 0, 0, 0, 1];
const R0: [u8; 6] = [0x02, 0xec, 0, 0, 0, 2];
const R1: [u8; 6] = [0x02, 0xec, 0, 0, 0, 3];
const B0: [u8; 6] = [0x02, 0xec, 0, 0, 0, 4];
const R2: [u8; 6] = [0x02, 0xec, 0, 0, 0, 5];
const C0: [u8; 6] = [0x02, 0xec, 0, 0, 0, 6];
const MPLS: u16 = 0x8847;
const IPV4: u16 = 0x0800;
const QUIET: Duration = Duration::from_millis(300);
/// Flows (UDP source ports) per case.
const FLOWS: u16 = 400;

/// The FIB's group of two next hops (ports 1 and 2) with these weights and labels.
fn fib_group(weights: [u32; 2], labels: [Vec<u32>; 2]) -> NexthopGroup {
    let [la, lb] = labels;
    let nh = |port: u16, labels: Vec<u32>, weight| Nexthop {
        port,
        via: Some(IpAddr::V4(Ipv4Addr::new(198, 18, 0, port as u8))),
        labels,
        weight,
    };
    NexthopGroup::new(vec![nh(1, la, weights[0]), nh(2, lb, weights[1])]).unwrap()
}

/// The programs' form of `g`, next hop `i` sending toward `adj[i]`.
fn fast_group(g: &NexthopGroup, adj: [Adjacency; 2]) -> Arc<FastGroup> {
    let nexthops = g
        .nexthops()
        .iter()
        .zip(adj)
        .map(|(nh, adj)| FastNexthop { labels: nh.labels.clone(), adj })
        .collect();
    Arc::new(FastGroup { nexthops, buckets: g.buckets().to_vec() })
}

/// Which next hop (0 or 1) the pipeline picks for `hash`.
fn pipeline_choice(g: &NexthopGroup, hash: u32) -> usize {
    let chosen = g.select(hash);
    g.nexthops().iter().position(|n| std::ptr::eq(n, chosen)).unwrap()
}

/// An IPv4/UDP packet to `dst` from UDP port `sport`.
fn udp(dst: [u8; 4], sport: u16) -> Vec<u8> {
    let mut p = ipv4_udp(dst, 64, 60);
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p
}

/// The UDP source port of a frame at b or c, behind `labels` label stack entries.
fn sport(frame: &[u8], labels: usize) -> u16 {
    let at = 14 + 4 * labels + 20;
    u16::from_be_bytes([frame[at], frame[at + 1]])
}

#[test]
fn ecmp_picks_the_pipelines_next_hop_for_every_flow_and_keeps_the_weights() {
    let a = Netns::without_ipv6("ecma");
    let r = Netns::without_ipv6("ecmr");
    let b = Netns::without_ipv6("ecmb");
    let c = Netns::without_ipv6("ecmc");
    veth(End { ns: &a, ifname: "a0", mac: Some(A0) }, End { ns: &r, ifname: "r0", mac: Some(R0) }, 1500);
    veth(End { ns: &r, ifname: "r1", mac: Some(R1) }, End { ns: &b, ifname: "b0", mac: Some(B0) }, 1500);
    veth(End { ns: &r, ifname: "r2", mac: Some(R2) }, End { ns: &c, ifname: "c0", mac: Some(C0) }, 1500);
    let (r0, r1, r2) = (r.ifindex("r0"), r.ifindex("r1"), r.ifindex("r2"));
    let mut fp = r.run(|| {
        let mut fp = FastPath::load().expect("load the fast path");
        for ifname in ["r0", "r1", "r2"] {
            fp.attach(ifname).expect("attach");
        }
        fp
    });
    let tx = a.run(|| PacketSocket::open_index(a.ifindex("a0")));
    let at_b = b.run(|| PacketSocket::open_index(b.ifindex("b0")));
    let at_c = c.run(|| PacketSocket::open_index(c.ifindex("c0")));
    let to = [
        Adjacency { ifindex: r1, mtu: 1500, dst_mac: B0, src_mac: R1 },
        Adjacency { ifindex: r2, mtu: 1500, dst_mac: C0, src_mac: R2 },
    ];

    // Label 100: swap to 200 toward b or 300 toward c, weights 3:1. 198.18.9.0/24: push 16
    // toward b or forward unlabelled toward c, weights 1:1.
    let swap = fib_group([3, 1], [vec![200], vec![300]]);
    let push = fib_group([1, 1], [vec![16], vec![]]);
    let mut t = FastTables::default();
    for i in [r0, r1, r2] {
        let mac = [(r0, R0), (r1, R1), (r2, R2)].iter().find(|(x, _)| *x == i).unwrap().1;
        t.ports
            .insert(i, FastPort { vrf: 0, mac, accepts_mpls: true, netns: 0, delivery: Delivery::VethPeer });
    }
    t.labels.insert(100, LabelEntry::Multipath { uniform: true, group: fast_group(&swap, to) });
    t.routes_v4.insert(
        (0, Ipv4Addr::new(198, 18, 9, 0), 24),
        RouteEntry::Multipath { label_ttl: None, group: fast_group(&push, to) },
    );
    fp.apply(&t).unwrap();

    // Labelled: 100 over 555 (both hashed, as the pipeline hashes the stack) over UDP.
    let mut want: BTreeMap<u16, usize> = BTreeMap::new();
    for port in 0..FLOWS {
        let sport = 20_000 + port;
        let mut body = [lse(100, 0, false, 64), lse(555, 0, true, 64)].concat();
        body.extend(udp([198, 18, 9, 2], sport));
        want.insert(sport, pipeline_choice(&swap, mpls_flow_hash(&body)));
        tx.send(&eth(R0, A0, MPLS, &body));
    }
    let got_b: Vec<u16> = at_b
        .drain(QUIET)
        .iter()
        .filter(|f| f[12..14] == MPLS.to_be_bytes())
        .map(|f| {
            assert_eq!(u32::from_be_bytes(f[14..18].try_into().unwrap()) >> 12, 200, "b's label");
            sport(f, 2)
        })
        .collect();
    let got_c: Vec<u16> = at_c
        .drain(QUIET)
        .iter()
        .filter(|f| f[12..14] == MPLS.to_be_bytes())
        .map(|f| {
            assert_eq!(u32::from_be_bytes(f[14..18].try_into().unwrap()) >> 12, 300, "c's label");
            sport(f, 2)
        })
        .collect();
    check_split("swap 3:1", &want, &got_b, &got_c, 0.75);

    // IP: each flow pushed toward b or forwarded toward c, as the pipeline picks.
    let mut want = BTreeMap::new();
    for port in 0..FLOWS {
        let sport = 30_000 + port;
        let ip = udp([198, 18, 9, 2], sport);
        want.insert(sport, pipeline_choice(&push, ip_flow_hash(&ip)));
        tx.send(&eth(R0, A0, IPV4, &ip));
    }
    let got_b: Vec<u16> = at_b
        .drain(QUIET)
        .iter()
        .filter(|f| f[12..14] == MPLS.to_be_bytes())
        .map(|f| {
            assert_eq!(
                u32::from_be_bytes(f[14..18].try_into().unwrap()),
                (16 << 12) | 0x100 | 63,
                "b's label"
            );
            sport(f, 1)
        })
        .collect();
    let got_c: Vec<u16> = at_c
        .drain(QUIET)
        .iter()
        .filter(|f| f[12..14] == IPV4.to_be_bytes())
        .map(|f| {
            assert_eq!(f[14 + 8], 63, "TTL");
            sport(f, 0)
        })
        .collect();
    check_split("push/forward 1:1", &want, &got_b, &got_c, 0.5);

    let counters = fp.counters().unwrap();
    let n = u64::from(FLOWS);
    assert_eq!((counters.swap, counters.passed, counters.redirect_failed), (n, 0, 0), "{counters:?}");
    assert_eq!(counters.push + counters.ip_forward, n, "{counters:?}");

    // A stack deeper than the programs look (33 entries) is the pipeline's; a group
    // that goes away takes its label with it (the label is then unknown: passed).
    let mut deep: Vec<u8> = std::iter::repeat_n(lse(100, 0, false, 64), 32).flatten().collect();
    deep.extend(lse(555, 0, true, 64));
    deep.extend(udp([198, 18, 9, 2], 1));
    tx.send(&eth(R0, A0, MPLS, &deep));
    let change = FastTablesChange { labels: vec![(100, None)], ..FastTablesChange::default() };
    fp.update(&change).unwrap();
    tx.send(&eth(R0, A0, MPLS, &[lse(100, 0, true, 64).to_vec(), udp([198, 18, 9, 2], 2)].concat()));
    assert!(at_b.drain(QUIET).is_empty() && at_c.drain(QUIET).is_empty());
    let after = fp.counters().unwrap();
    assert_eq!((after.swap, after.passed), (n, 2), "{after:?}");
}

/// Every flow arrived exactly once, where the pipeline would have sent it, and the split
/// is near `share` (of flows to b).
fn check_split(case: &str, want: &BTreeMap<u16, usize>, got_b: &[u16], got_c: &[u16], share: f64) {
    let mut got: BTreeMap<u16, usize> = BTreeMap::new();
    for (&p, nh) in got_b.iter().map(|p| (p, 0)).chain(got_c.iter().map(|p| (p, 1))) {
        assert!(got.insert(p, nh).is_none(), "{case}: flow {p} arrived twice");
    }
    assert_eq!(&got, want, "{case}: every flow at the pipeline's next hop");
    let to_b = got.values().filter(|&&nh| nh == 0).count() as f64 / got.len() as f64;
    eprintln!("{case}: {:.1} % of {} flows to b", to_b * 100.0, got.len());
    // 400 flows: a standard deviation of at most 2.5 %; 4 of them either side.
    assert!(
        (to_b - share).abs() < 0.1,
        "{case}: {:.1} % to b, expected about {:.0} %",
        to_b * 100.0,
        share * 100.0
    );
}
