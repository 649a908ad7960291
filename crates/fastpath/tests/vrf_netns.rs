//! A VPN customer port in a VRF's own network namespace, served in the kernel across the
//! namespace boundary by the VRF interface (a veth pair named like the VRF, one end in the
//! PE's namespace and one in the VRF's, the same ifindex in both, as the zebra module
//! makes it). Needs root.
//!
//! ```text
//!   ce (e0) -- (c0) [pe1's VRF "red" netns] (red)==(red) [pe1] (p0) -- (w0) [p] (e0) -- (p0) [pe2] (c0) -- (e0) h2
//! ```
//!
//! pe1 routes red's traffic toward 198.18.2.0/24 with [transport 1000, VPN 2000] pushed
//! and pops red's VPN label 3000 into red; p pops the transport labels (1000 toward pe2,
//! 1001 toward pe1) at the penultimate hop, leaving the VPN label on top; pe2 is a plain
//! fast path that pops 2000 toward h2 and pushes [1001, 3000] toward the customer.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use common::{End, Netns, PacketSocket, eth, fold, ipv4_udp, lse, mac_str, sum16, transfer, veth};
use vmpls_fastpath::{Adjacency, Crossing, Delivery, FastPath, FastPort, FastTables, LabelEntry, RouteEntry};

const CE: [u8; 6] = [0x02, 0xfc, 0, 0, 0, 0x11];
const PE1C: [u8; 6] = [0x02, 0xfc, 0, 0, 1, 0x01];
const PE1P: [u8; 6] = [0x02, 0xfc, 0, 0, 1, 0x02];
const PW: [u8; 6] = [0x02, 0xfc, 0, 0, 3, 0x01];
const PE: [u8; 6] = [0x02, 0xfc, 0, 0, 3, 0x02];
const PE2P: [u8; 6] = [0x02, 0xfc, 0, 0, 2, 0x02];
const PE2C: [u8; 6] = [0x02, 0xfc, 0, 0, 2, 0x01];
const H2: [u8; 6] = [0x02, 0xfc, 0, 0, 0, 0x22];
const CORE_MTU: u32 = 1600;
const EDGE_MTU: u32 = 1500;
/// The VRF interface's index in both namespaces (the zebra module uses the table id).
const RED_IFINDEX: u32 = 1000;
/// The customer port's index in red's namespace: unique among the attached interfaces.
const C0_IFINDEX: u32 = 501;
const RED_VRF: u16 = 1;
const RED_NETNS: u8 = 1;
const TRANSPORT: u32 = 1000;
const TRANSPORT_BACK: u32 = 1001;
const VPN_AT_PE2: u32 = 2000;
const VPN_AT_PE1: u32 = 3000;

const CE_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
const H2_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 2);

/// pe1's tables: red's port in red's namespace, the core port in pe1's own; toward h2's
/// prefix `labels` (VPN label innermost); red's VPN label pops into red.
fn pe1_tables(c0: u32, p0: u32, labels: Vec<u32>) -> FastTables {
    let core = Adjacency { ifindex: p0, mtu: CORE_MTU, dst_mac: PW, src_mac: PE1P };
    let edge = Adjacency { ifindex: c0, mtu: EDGE_MTU, dst_mac: CE, src_mac: PE1C };
    let mut t = FastTables::default();
    t.ports.insert(
        c0,
        FastPort {
            vrf: RED_VRF,
            mac: PE1C,
            accepts_mpls: false,
            netns: RED_NETNS,
            delivery: Delivery::VethPeer,
        },
    );
    t.ports.insert(
        p0,
        FastPort { vrf: 0, mac: PE1P, accepts_mpls: true, netns: 0, delivery: Delivery::VethPeer },
    );
    t.crossings.insert(RED_NETNS, Crossing { root_ifindex: RED_IFINDEX, vrf_ifindex: RED_IFINDEX });
    t.labels.insert(VPN_AT_PE1, LabelEntry::PopIp { vrf: RED_VRF, uniform: true });
    t.routes_v4.insert(
        (RED_VRF, Ipv4Addr::new(198, 18, 2, 0), 24),
        RouteEntry::Forward { labels, label_ttl: None, adj: core },
    );
    t.routes_v4
        .insert((RED_VRF, CE_ADDR, 32), RouteEntry::Forward { labels: vec![], label_ttl: None, adj: edge });
    t
}

/// p: penultimate-hop pops of both transport labels (uniform), the VPN label below.
fn p_tables(w0: u32, e0: u32) -> FastTables {
    let mut t = FastTables::default();
    t.ports
        .insert(w0, FastPort { vrf: 0, mac: PW, accepts_mpls: true, netns: 0, delivery: Delivery::VethPeer });
    t.ports
        .insert(e0, FastPort { vrf: 0, mac: PE, accepts_mpls: true, netns: 0, delivery: Delivery::VethPeer });
    let to_pe2 = Adjacency { ifindex: e0, mtu: CORE_MTU, dst_mac: PE2P, src_mac: PE };
    let to_pe1 = Adjacency { ifindex: w0, mtu: CORE_MTU, dst_mac: PE1P, src_mac: PW };
    t.labels.insert(TRANSPORT, LabelEntry::Php { uniform: true, adj: to_pe2 });
    t.labels.insert(TRANSPORT_BACK, LabelEntry::Php { uniform: true, adj: to_pe1 });
    t
}

fn pe2_tables(c0: u32, p0: u32) -> FastTables {
    let core = Adjacency { ifindex: p0, mtu: CORE_MTU, dst_mac: PE, src_mac: PE2P };
    let edge = Adjacency { ifindex: c0, mtu: EDGE_MTU, dst_mac: H2, src_mac: PE2C };
    let mut t = FastTables::default();
    t.ports.insert(
        c0,
        FastPort { vrf: 0, mac: PE2C, accepts_mpls: false, netns: 0, delivery: Delivery::VethPeer },
    );
    t.ports.insert(
        p0,
        FastPort { vrf: 0, mac: PE2P, accepts_mpls: true, netns: 0, delivery: Delivery::VethPeer },
    );
    t.labels.insert(VPN_AT_PE2, LabelEntry::PopIp { vrf: 0, uniform: true });
    let to_ce = RouteEntry::Forward { labels: vec![TRANSPORT_BACK, VPN_AT_PE1], label_ttl: None, adj: core };
    t.routes_v4.insert((0, Ipv4Addr::new(198, 18, 1, 0), 24), to_ce);
    t.routes_v4.insert((0, H2_ADDR, 32), RouteEntry::Forward { labels: vec![], label_ttl: None, adj: edge });
    t
}

fn host_setup(h: &Netns, me: Ipv4Addr, far_net: &str, gw_mac: [u8; 6]) {
    let gw = Ipv4Addr::from(u32::from(me) & !0xff | 1).to_string();
    h.ip(&["addr", "add", &format!("{me}/24"), "dev", "e0"]);
    h.ip(&["neigh", "add", &gw, "lladdr", &mac_str(gw_mac), "dev", "e0", "nud", "permanent"]);
    h.ip(&["route", "add", far_net, "via", &gw, "dev", "e0"]);
}

#[test]
fn a_vrf_namespace_port_pushes_and_pops_across_the_vrf_interface() {
    let ce = Netns::new("vnce");
    let red = Netns::without_ipv6("vnred");
    let pe1 = Netns::without_ipv6("vnpe1");
    let p = Netns::without_ipv6("vnp");
    let pe2 = Netns::without_ipv6("vnpe2");
    let h2 = Netns::new("vnh2");
    // The customer port with a fixed index in red's namespace, and the VRF interface.
    let (c0, mtu) = (C0_IFINDEX.to_string(), EDGE_MTU.to_string());
    red.ip(&["link", "add", "c0", "index", &c0, "address", &mac_str(PE1C), "mtu", &mtu, "type", "veth"]
        .into_iter()
        .chain(["peer", "name", "e0", "netns", ce.name(), "address", &mac_str(CE), "mtu", &mtu])
        .collect::<Vec<_>>());
    let red_index = RED_IFINDEX.to_string();
    pe1.ip(&[
        "link", "add", "red", "index", &red_index, "type", "veth", "peer", "name", "red", "index", &red_index,
    ]
    .into_iter()
    .chain(["netns", red.name()])
    .collect::<Vec<_>>());
    red.ip(&["link", "set", "c0", "up"]);
    red.ip(&["link", "set", "red", "up"]);
    pe1.ip(&["link", "set", "red", "up"]);
    ce.ip(&["link", "set", "e0", "up"]);
    veth(
        End { ns: &pe1, ifname: "p0", mac: Some(PE1P) },
        End { ns: &p, ifname: "w0", mac: Some(PW) },
        CORE_MTU,
    );
    veth(
        End { ns: &p, ifname: "e0", mac: Some(PE) },
        End { ns: &pe2, ifname: "p0", mac: Some(PE2P) },
        CORE_MTU,
    );
    veth(
        End { ns: &pe2, ifname: "c0", mac: Some(PE2C) },
        End { ns: &h2, ifname: "e0", mac: Some(H2) },
        EDGE_MTU,
    );
    host_setup(&ce, CE_ADDR, "198.18.2.0/24", PE1C);
    host_setup(&h2, H2_ADDR, "198.18.1.0/24", PE2C);
    assert_eq!(
        (red.ifindex("c0"), red.ifindex("red"), pe1.ifindex("red")),
        (C0_IFINDEX, RED_IFINDEX, RED_IFINDEX)
    );

    let p0 = pe1.ifindex("p0");
    assert!(p0 != C0_IFINDEX && p0 != RED_IFINDEX);
    let mut fp1 = pe1.run(|| {
        let mut fp = FastPath::load().expect("load");
        fp.attach("p0").unwrap();
        fp.attach_named("pe1/red", "red").unwrap();
        fp
    });
    red.run(|| {
        fp1.attach_named("red/c0", "c0").unwrap();
        fp1.attach_named("red/red", "red").unwrap();
    });
    fp1.apply(&pe1_tables(C0_IFINDEX, p0, vec![TRANSPORT, VPN_AT_PE2])).unwrap();
    let (w0, e0) = (p.ifindex("w0"), p.ifindex("e0"));
    let mut fp_p = p.run(|| {
        let mut fp = FastPath::load().expect("load");
        fp.attach("w0").unwrap();
        fp.attach("e0").unwrap();
        fp
    });
    let (pe2_c0, pe2_p0) = (pe2.ifindex("c0"), pe2.ifindex("p0"));
    let fp2 = pe2.run(|| {
        let mut fp = FastPath::load().expect("load");
        fp.attach("c0").unwrap();
        fp.attach("p0").unwrap();
        fp.apply(&pe2_tables(pe2_c0, pe2_p0)).unwrap();
        fp
    });

    // One datagram from the customer: on the core link with [transport, VPN] pushed, the
    // IP TTL down by one (p has no tables yet: its kernel drops the frame).
    let tx = ce.run(|| PacketSocket::open("e0"));
    let wire = p.run(|| PacketSocket::open_index(w0));
    let v4 = ipv4_udp(H2_ADDR.octets(), 64, 100);
    tx.send(&eth(PE1C, CE, 0x0800, &v4));
    let got: Vec<Vec<u8>> =
        wire.drain(Duration::from_millis(300)).into_iter().filter(|f| f[6..12] == PE1P).collect();
    assert_eq!(got.len(), 1, "{got:x?}");
    let f = &got[0];
    assert_eq!((&f[..6], &f[12..14]), (&PW[..], &[0x88, 0x47][..]));
    assert_eq!(f[14..18], lse(TRANSPORT, 0, false, 63), "transport label, TTL copied from IP");
    assert_eq!(f[18..22], lse(VPN_AT_PE2, 0, true, 63), "VPN label at the bottom");
    let ip = &f[22..];
    assert_eq!(ip.len(), v4.len());
    assert_eq!(ip[8], 63);
    assert_eq!(fold(sum16(&ip[..20])), 0xffff, "IPv4 header checksum");
    assert_eq!((&ip[..8], &ip[9..10], &ip[12..]), (&v4[..8], &v4[9..10], &v4[12..]));
    let c = fp1.counters().unwrap();
    assert_eq!((c.push, c.crossed, c.redirect_failed), (1, 1, 0), "{c:?}");

    // A labelled frame from the customer (red's own VPN label) is refused: left to the
    // pipeline (here: the kernel of red's namespace, which drops it), never popped into red.
    let mut labelled = lse(VPN_AT_PE1, 0, true, 64).to_vec();
    labelled.extend(ipv4_udp(CE_ADDR.octets(), 64, 10));
    let back = ce.run(|| PacketSocket::open("e0"));
    tx.send(&eth(PE1C, CE, 0x8847, &labelled));
    let echoed = back.drain(Duration::from_millis(300)).into_iter().filter(|f| f[6..12] == PE1C).count();
    assert_eq!(echoed, 0);
    let c = fp1.counters().unwrap();
    assert_eq!((c.pop, c.passed, c.crossed), (0, 1, 1), "{c:?}");

    // p's penultimate-hop pop of the transport label: the VPN label on top, its TTL the
    // transport's - 1 (uniform), on to pe2 (raw frames from a socket are MPLS to the
    // kernel, which the programs cannot pop: this one comes from pe1's program).
    fp_p.apply(&p_tables(w0, e0)).unwrap();
    let at_pe2 = pe2.run(|| PacketSocket::open_index(pe2_p0));
    tx.send(&eth(PE1C, CE, 0x0800, &v4));
    let got: Vec<Vec<u8>> =
        at_pe2.drain(Duration::from_millis(300)).into_iter().filter(|f| f[6..12] == PE).collect();
    assert_eq!(got.len(), 1, "{got:x?}");
    assert_eq!((&got[0][..6], &got[0][12..14]), (&PE2P[..], &[0x88, 0x47][..]));
    assert_eq!(got[0][14..18], lse(VPN_AT_PE2, 0, true, 62), "the VPN label on top, TTL 63 - 1");
    assert_eq!(got[0][18..], f[22..], "the IP packet as pe1 sent it");
    let c = fp_p.counters().unwrap();
    assert_eq!((c.pop, c.passed, c.redirect_failed), (1, 0, 0), "{c:?}");

    // Kernel TCP in both directions: data pushed at pe1 across red's VRF interface,
    // p's pops, popped at pe2; ACKs pushed at pe2, p's pops, popped at pe1 into red and
    // across to the customer's port.
    const TOTAL: u64 = 20 << 20;
    let server = SocketAddr::new(IpAddr::V4(H2_ADDR), 5201);
    assert_eq!(transfer(&ce, &h2, server, TOTAL), TOTAL);
    let (a, m, b) = (fp1.counters().unwrap(), fp_p.counters().unwrap(), fp2.counters().unwrap());
    eprintln!("pe1 {a:?}\np {m:?}\npe2 {b:?}");
    assert!(a.push > 2 && a.pop > 2 && b.pop > 2 && b.push > 2, "pe1 {a:?}\npe2 {b:?}");
    assert_eq!((a.redirect_failed, m.redirect_failed, b.redirect_failed), (0, 0, 0));
    assert_eq!(a.crossed, a.push + a.pop, "every frame of red crossed once: {a:?}");
    // Every frame one PE pushed p popped and the other PE popped, but for the first
    // datagram, which p's kernel dropped (p had no tables yet).
    assert_eq!(m.pop, a.push - 1 + b.push, "p: {m:?}");
    assert_eq!((b.pop, a.pop), (a.push - 1, b.push), "pe1 {a:?}\npe2 {b:?}");
    let s = fp1.port_stats().unwrap();
    let (red_rx, core_tx) = (s[&C0_IFINDEX], s[&p0]);
    assert_eq!((red_rx.rx_frames, red_rx.tx_frames), (a.push, a.pop), "{red_rx:?}");
    assert_eq!(core_tx.tx_frames, a.push, "{core_tx:?}");
    assert!(red_rx.rx_bytes / red_rx.rx_frames > 1514, "GSO super-frames crossed whole: {red_rx:?}");
}
