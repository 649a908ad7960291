//! Push and pop with the kernel's own TCP over h1 -- pe1 -- pe2 -- h2 (veth, offloads on):
//! pe1 pushes 1000 toward h2 and pops 2000 toward h1, pe2 the mirror image. Needs root.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use common::{End, Netns, PacketSocket, eth, fold, ipv4_udp, mac_str, sum16, transfer, veth};
use vmpls_fastpath::{Adjacency, Delivery, FastPath, FastPort, FastTables, LabelEntry, RouteEntry};

const H1: [u8; 6] = [0x02, 0xfb, 0, 0, 0, 0x11];
const PE1C: [u8; 6] = [0x02, 0xfb, 0, 0, 1, 0x01];
const PE1P: [u8; 6] = [0x02, 0xfb, 0, 0, 1, 0x02];
const PE2P: [u8; 6] = [0x02, 0xfb, 0, 0, 2, 0x02];
const PE2C: [u8; 6] = [0x02, 0xfb, 0, 0, 2, 0x01];
const H2: [u8; 6] = [0x02, 0xfb, 0, 0, 0, 0x22];
const CORE_MTU: u32 = 1600;
const EDGE_MTU: u32 = 1500;

struct Side {
    host: Ipv4Addr,
    host6: Ipv6Addr,
    net: Ipv4Addr,
    net6: Ipv6Addr,
}

const SIDE1: Side = Side {
    host: Ipv4Addr::new(198, 18, 1, 2),
    host6: Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2),
    net: Ipv4Addr::new(198, 18, 1, 0),
    net6: Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0),
};
const SIDE2: Side = Side {
    host: Ipv4Addr::new(198, 18, 2, 2),
    host6: Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 2),
    net: Ipv4Addr::new(198, 18, 2, 0),
    net6: Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0),
};

/// A PE's tables: `c`/`p` its customer and core ports; pushes `push` (with `push_ttl`)
/// toward the far side's prefixes, pops `pop` and forwards to its own host by /32, /128.
#[allow(clippy::too_many_arguments)]
fn pe_tables(
    c: u32,
    c_mac: [u8; 6],
    host_mac: [u8; 6],
    p: u32,
    p_mac: [u8; 6],
    far_mac: [u8; 6],
    near: &Side,
    far: &Side,
    push: u32,
    push_ttl: Option<u8>,
    pop: u32,
) -> FastTables {
    let core = Adjacency { ifindex: p, mtu: CORE_MTU, dst_mac: far_mac, src_mac: p_mac };
    let edge = Adjacency { ifindex: c, mtu: EDGE_MTU, dst_mac: host_mac, src_mac: c_mac };
    let mut t = FastTables::default();
    t.ports.insert(
        c,
        FastPort { vrf: 0, mac: c_mac, accepts_mpls: true, netns: 0, delivery: Delivery::VethPeer },
    );
    t.ports.insert(
        p,
        FastPort { vrf: 0, mac: p_mac, accepts_mpls: true, netns: 0, delivery: Delivery::VethPeer },
    );
    t.labels.insert(pop, LabelEntry::PopIp { vrf: 0, uniform: true });
    let to_far = |label_ttl| RouteEntry::Forward { labels: vec![push], label_ttl, adj: core };
    let to_host = RouteEntry::Forward { labels: vec![], label_ttl: None, adj: edge };
    t.routes_v4.insert((0, far.net, 24), to_far(push_ttl));
    t.routes_v6.insert((0, far.net6, 64), to_far(None));
    t.routes_v4.insert((0, near.host, 32), to_host.clone());
    t.routes_v6.insert((0, near.host6, 128), to_host);
    t
}

fn host_setup(h: &Netns, me: &Side, far: &Side, gw_mac: [u8; 6]) {
    let gw = Ipv4Addr::from(u32::from(me.net) + 1).to_string();
    let gw6 = Ipv6Addr::from(u128::from(me.net6) + 1).to_string();
    h.ip(&["addr", "add", &format!("{}/24", me.host), "dev", "e0"]);
    h.ip(&["-6", "addr", "add", &format!("{}/64", me.host6), "dev", "e0", "nodad"]);
    h.ip(&["neigh", "add", &gw, "lladdr", &mac_str(gw_mac), "dev", "e0", "nud", "permanent"]);
    h.ip(&["-6", "neigh", "add", &gw6, "lladdr", &mac_str(gw_mac), "dev", "e0", "nud", "permanent"]);
    h.ip(&["route", "add", &format!("{}/24", far.net), "via", &gw, "dev", "e0"]);
    h.ip(&["-6", "route", "add", &format!("{}/64", far.net6), "via", &gw6, "dev", "e0"]);
}

/// `name` from /proc/net/snmp and netstat (`Tcp:`-style header/value line pairs) or
/// snmp6 (`name value`).
fn snmp(ns: &Netns, name: (&str, &str)) -> u64 {
    let (snmp, snmp6) = ns.run(|| {
        (
            std::fs::read_to_string("/proc/thread-self/net/snmp").unwrap()
                + &std::fs::read_to_string("/proc/thread-self/net/netstat").unwrap(),
            std::fs::read_to_string("/proc/thread-self/net/snmp6").unwrap(),
        )
    });
    let lines: Vec<&str> = snmp.lines().collect();
    for pair in lines.chunks(2) {
        let (h, v) = (pair[0].split_whitespace(), pair[1].split_whitespace());
        let mut hv = h.zip(v);
        if hv.next().map(|(p, _)| p) == Some(name.0) {
            if let Some((_, v)) = hv.find(|(k, _)| *k == name.1) {
                return v.parse().unwrap();
            }
        }
    }
    let full = format!("{}{}", name.0.trim_end_matches(':'), name.1);
    for l in snmp6.lines() {
        let mut it = l.split_whitespace();
        if it.next() == Some(full.as_str()) {
            return it.next().unwrap().parse().unwrap();
        }
    }
    panic!("no counter {name:?}");
}

#[test]
fn push_and_pop_carry_kernel_tcp_super_frames_over_ipv4_and_ipv6() {
    let h1 = Netns::new("pph1");
    let pe1 = Netns::without_ipv6("pppe1");
    let pe2 = Netns::without_ipv6("pppe2");
    let h2 = Netns::new("pph2");
    veth(
        End { ns: &h1, ifname: "e0", mac: Some(H1) },
        End { ns: &pe1, ifname: "c0", mac: Some(PE1C) },
        EDGE_MTU,
    );
    veth(
        End { ns: &pe1, ifname: "p0", mac: Some(PE1P) },
        End { ns: &pe2, ifname: "p0", mac: Some(PE2P) },
        CORE_MTU,
    );
    veth(
        End { ns: &pe2, ifname: "c0", mac: Some(PE2C) },
        End { ns: &h2, ifname: "e0", mac: Some(H2) },
        EDGE_MTU,
    );
    host_setup(&h1, &SIDE1, &SIDE2, PE1C);
    host_setup(&h2, &SIDE2, &SIDE1, PE2C);
    let tso = h1.exec(&["ethtool", "-k", "e0"]);
    assert!(tso.contains("tcp-segmentation-offload: on"), "{tso}");

    let (c1, p1, c2, p2) = (pe1.ifindex("c0"), pe1.ifindex("p0"), pe2.ifindex("c0"), pe2.ifindex("p0"));
    // pe1 pushes IPv4 toward h2 with a fixed label TTL of 10 (pipe at the push); pe2 pops
    // with the uniform model, so h2 sees TTL min(63, 10) - 1 = 9. IPv6 is uniform all along.
    let t1 = pe_tables(c1, PE1C, H1, p1, PE1P, PE2P, &SIDE1, &SIDE2, 1000, Some(10), 2000);
    let t2 = pe_tables(c2, PE2C, H2, p2, PE2P, PE1P, &SIDE2, &SIDE1, 2000, None, 1000);
    let load = |ns: &Netns, t: &FastTables| {
        ns.run(|| {
            let mut fp = FastPath::load().expect("load");
            fp.attach("c0").unwrap();
            fp.attach("p0").unwrap();
            fp.apply(t).unwrap();
            fp
        })
    };
    let fp1 = load(&pe1, &t1);
    let fp2 = load(&pe2, &t2);

    // One UDP datagram of each family, raw from h1: check what h2 gets, byte by byte.
    let (e0_h1, e0_h2) = (h1.ifindex("e0"), h2.ifindex("e0"));
    let tx = h1.run(|| PacketSocket::open_index(e0_h1));
    let rx = h2.run(|| PacketSocket::open_index(e0_h2));
    let v4 = ipv4_udp(SIDE2.host.octets(), 64, 100);
    tx.send(&eth(PE1C, H1, 0x0800, &v4));
    let mut v6 = vec![0x60, 0, 0, 0, 0, 8 + 100, 17, 64];
    v6.extend(SIDE1.host6.octets());
    v6.extend(SIDE2.host6.octets());
    v6.extend(&v4[20..]); // the UDP header and payload; its checksum is not checked here
    tx.send(&eth(PE1C, H1, 0x86dd, &v6));
    let got: Vec<Vec<u8>> = rx
        .drain(Duration::from_millis(300))
        .into_iter()
        .filter(|f| f[..6] == H2 && f[6..12] == PE2C)
        .collect();
    assert_eq!(got.len(), 2, "{got:x?}");
    assert_eq!(got[0][12..14], [0x08, 0x00]);
    let ip = &got[0][14..];
    assert_eq!(ip.len(), v4.len());
    assert_eq!(ip[8], 9, "IPv4 TTL: min(63, label 10) - 1");
    assert_eq!(fold(sum16(&ip[..20])), 0xffff, "IPv4 header checksum");
    assert_eq!((&ip[..8], &ip[9..10], &ip[12..]), (&v4[..8], &v4[9..10], &v4[12..]));
    assert_eq!(got[1][12..14], [0x86, 0xdd]);
    let ip6 = &got[1][14..];
    assert_eq!(ip6[7], 62, "hop limit 64 -> 63 at the push, 62 at the pop");
    assert_eq!((&ip6[..7], &ip6[8..]), (&v6[..7], &v6[8..]));
    let (a, b) = (fp1.counters().unwrap(), fp2.counters().unwrap());
    assert_eq!((a.push, b.pop), (2, 2), "{a:?} {b:?}");

    // Kernel TCP, both directions fast: data pushed at pe1 and popped at pe2, ACKs pushed
    // at pe2 and popped at pe1.
    const TOTAL: u64 = 20 << 20;
    let v4 = SocketAddr::new(IpAddr::V4(SIDE2.host), 5201);
    assert_eq!(transfer(&h1, &h2, v4, TOTAL), TOTAL);
    let v6 = SocketAddr::new(IpAddr::V6(SIDE2.host6), 5202);
    assert_eq!(transfer(&h1, &h2, v6, TOTAL), TOTAL);

    let (a, b) = (fp1.counters().unwrap(), fp2.counters().unwrap());
    assert!(a.push > 2 && a.pop > 0 && b.push > 0 && b.pop > 2, "pe1 {a:?}\npe2 {b:?}");
    assert_eq!((a.redirect_failed, b.redirect_failed), (0, 0));
    assert_eq!((a.swap, a.ip_forward, b.swap, b.ip_forward), (0, 0, 0, 0));
    // Super-frames went through whole: the data frames average more than one MTU.
    let s1 = fp1.port_stats().unwrap()[&c1];
    assert!(s1.rx_bytes > 2 * TOTAL, "{s1:?}");
    assert!(s1.rx_bytes / s1.rx_frames > 1514, "GSO frames were fast-pathed whole: {s1:?}");
    eprintln!("pe1 {a:?}\npe2 {b:?}\npe1 c0 {s1:?}");
    let pops = fp2.label_stats().unwrap()[&1000];
    assert!(pops.0 > 2 && pops.1 > 2 * TOTAL, "{pops:?}");

    for (proto, name) in
        [("Tcp:", "InCsumErrors"), ("IpExt:", "InCsumErrors"), ("Ip:", "InHdrErrors"), ("Ip6", "InHdrErrors")]
    {
        assert_eq!(snmp(&h2, (proto, name)), 0, "h2 {proto}{name}");
    }
}
