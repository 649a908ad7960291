//! The swap path, the socket filter and apply()'s diffing on a -- r -- b (veth), with
//! raw frames sent from a's AF_PACKET socket and captured at b. Needs root.

mod common;

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::time::Duration;

use common::{End, Netns, PacketSocket, eth, ipv4_udp, lse, veth};
use vmpls_fastpath::{
    Adjacency, Delivery, FastPath, FastPathError, FastPort, FastTables, FastTablesChange, LabelEntry,
    RouteEntry,
};

const A0: [u8; 6] = [0x02, 0xfa, 0, 0, 0, 1];
const R0: [u8; 6] = [0x02, 0xfa, 0, 0, 0, 2];
const R1: [u8; 6] = [0x02, 0xfa, 0, 0, 0, 3];
const B0: [u8; 6] = [0x02, 0xfa, 0, 0, 0, 4];
const MPLS: u16 = 0x8847;
const QUIET: Duration = Duration::from_millis(300);

struct Lab {
    fp: FastPath,
    /// a's socket on a0: sends toward r0.
    tx: PacketSocket,
    /// b's socket on b0: what r redirected.
    rx: PacketSocket,
    r0: u32,
    r1: u32,
    r: Netns,
    _a: Netns,
    _b: Netns,
}

impl Lab {
    fn new(tag: &str) -> Lab {
        let a = Netns::without_ipv6(&format!("{tag}a"));
        let r = Netns::without_ipv6(&format!("{tag}r"));
        let b = Netns::without_ipv6(&format!("{tag}b"));
        veth(End { ns: &a, ifname: "a0", mac: Some(A0) }, End { ns: &r, ifname: "r0", mac: Some(R0) }, 1500);
        veth(End { ns: &r, ifname: "r1", mac: Some(R1) }, End { ns: &b, ifname: "b0", mac: Some(B0) }, 1500);
        let (a0, r0, r1, b0) = (a.ifindex("a0"), r.ifindex("r0"), r.ifindex("r1"), b.ifindex("b0"));
        let fp = r.run(|| {
            assert!(vmpls_fastpath::is_veth("r1"));
            assert!(!vmpls_fastpath::is_veth("lo"));
            let mut fp = FastPath::load().expect("load the fast path");
            fp.attach("r0").expect("attach r0");
            fp.attach("r1").expect("attach r1");
            fp.attach("r0").expect("attaching twice is fine");
            fp
        });
        let tx = a.run(|| PacketSocket::open_index(a0));
        let rx = b.run(|| PacketSocket::open_index(b0));
        Lab { fp, tx, rx, r0, r1, r, _a: a, _b: b }
    }

    fn to_b(&self) -> Adjacency {
        Adjacency { ifindex: self.r1, mtu: 1500, dst_mac: B0, src_mac: R1 }
    }

    /// Ports r0, r1 in VRF 0, and the given swaps toward b.
    fn tables(&self, swaps: &[(u32, u32)]) -> FastTables {
        let mut t = FastTables::default();
        t.ports.insert(
            self.r0,
            FastPort { vrf: 0, mac: R0, accepts_mpls: true, netns: 0, delivery: Delivery::VethPeer },
        );
        t.ports.insert(
            self.r1,
            FastPort { vrf: 0, mac: R1, accepts_mpls: true, netns: 0, delivery: Delivery::VethPeer },
        );
        for (i, o) in swaps {
            t.labels.insert(*i, LabelEntry::Swap { out_label: *o, adj: self.to_b() });
        }
        t
    }

    /// MPLS frames b received.
    fn at_b(&self) -> Vec<Vec<u8>> {
        self.rx
            .drain(QUIET)
            .into_iter()
            .filter(|f| f.len() >= 18 && f[12..14] == MPLS.to_be_bytes())
            .collect()
    }
}

/// A frame a sends to r0 with `stack` over an IPv4 packet.
fn mpls_frame(stack: &[[u8; 4]]) -> Vec<u8> {
    let mut body: Vec<u8> = stack.iter().flatten().copied().collect();
    body.extend(ipv4_udp([198, 18, 0, 2], 64, 60));
    eth(R0, A0, MPLS, &body)
}

fn label_of(frame: &[u8]) -> u32 {
    u32::from_be_bytes(frame[14..18].try_into().unwrap()) >> 12
}

#[test]
fn swap_rewrites_the_top_entry_and_redirects_to_the_peer() {
    let mut lab = Lab::new("sw");
    let t = lab.tables(&[(100, 200)]);
    lab.fp.apply(&t).unwrap();

    let frame = mpls_frame(&[lse(100, 5, true, 64)]);
    lab.tx.send(&frame);
    let got = lab.at_b();
    let mut want = mpls_frame(&[lse(200, 5, true, 63)]);
    want[..12].copy_from_slice(&[B0, R1].concat());
    assert_eq!(got, vec![want], "b gets label 200, TTL 63, TC and S kept, MACs rewritten");

    // TTL 1, an unknown label: left to r's stack (which drops MPLS), nothing at b.
    lab.tx.send(&mpls_frame(&[lse(100, 5, true, 1)]));
    lab.tx.send(&mpls_frame(&[lse(999, 0, true, 64)]));
    // Not to r0's MAC: not even a candidate.
    let mut other = mpls_frame(&[lse(100, 0, true, 64)]);
    other[..6].copy_from_slice(&[0x02, 0xfa, 0, 0, 0, 0x99]);
    lab.tx.send(&other);
    assert!(lab.at_b().is_empty());

    let c = lab.fp.counters().unwrap();
    assert_eq!((c.frames_in, c.swap, c.passed, c.redirect_failed), (3, 1, 2, 0), "{c:?}");
    assert_eq!((c.push, c.pop, c.ip_forward), (0, 0, 0));
    assert_eq!(c.recalled, 0, "no filtered socket: the TC program decided on each frame");
    assert_eq!(c.bytes, frame.len() as u64);
    let len = frame.len() as u64;
    assert_eq!(lab.fp.label_stats().unwrap(), BTreeMap::from([(100, (1, len))]));
    let ports = lab.fp.port_stats().unwrap();
    assert_eq!((ports[&lab.r0].rx_frames, ports[&lab.r0].rx_bytes, ports[&lab.r0].tx_frames), (1, len, 0));
    assert_eq!((ports[&lab.r1].tx_frames, ports[&lab.r1].tx_bytes, ports[&lab.r1].rx_frames), (1, len, 0));

    // Deeper stack: only the top entry changes, S stays 0 on it.
    lab.tx.send(&mpls_frame(&[lse(100, 1, false, 10), lse(300, 0, true, 20)]));
    let got = lab.at_b();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0][14..22], [lse(200, 1, false, 9), lse(300, 0, true, 20)].concat());
    assert_eq!(lab.fp.counters().unwrap().swap, 2);
}

#[test]
fn socket_filter_hides_exactly_the_redirected_frames() {
    let mut lab = Lab::new("sf");
    let t = lab.tables(&[(100, 200)]);
    lab.fp.apply(&t).unwrap();
    let r0 = lab.r0;
    let (filtered, plain) = lab.r.run(|| (PacketSocket::open_index(r0), PacketSocket::open_index(r0)));
    lab.fp.filter_socket(filtered.as_fd()).unwrap();

    lab.tx.send(&mpls_frame(&[lse(100, 0, true, 64)]));
    lab.tx.send(&mpls_frame(&[lse(100, 0, true, 1)]));
    lab.tx.send(&mpls_frame(&[lse(999, 0, true, 64)]));
    assert_eq!(lab.at_b().len(), 1, "the swapped frame reached b");

    let seen = |s: &PacketSocket| -> Vec<(u32, u8)> {
        s.drain(QUIET)
            .iter()
            .filter(|f| f[12..14] == MPLS.to_be_bytes())
            .map(|f| (label_of(f), f[17]))
            .collect()
    };
    assert_eq!(seen(&filtered), vec![(100, 1), (999, 64)], "the router sees what the fast path left it");
    assert_eq!(seen(&plain), vec![(100, 64), (100, 1), (999, 64)], "an unfiltered tap sees everything");
    // The socket filter decided on each frame first; the TC program took its decisions.
    let c = lab.fp.counters().unwrap();
    assert_eq!((c.frames_in, c.recalled, c.swap, c.passed), (3, 3, 1, 2), "{c:?}");

    // A frame shorter than what ties a decision to its frame: decided twice, alike.
    let mut short = mpls_frame(&[lse(100, 0, true, 64)]);
    short.truncate(14 + 4 + 20);
    short[14 + 4 + 2..14 + 4 + 4].copy_from_slice(&20u16.to_be_bytes());
    lab.tx.send(&short);
    let c = lab.fp.counters().unwrap();
    assert_eq!(c.frames_in, 4, "{c:?}");
    assert_eq!(c.recalled, 3, "{c:?}");
    assert_eq!(c.swap + c.passed, 4, "{c:?}");
    let to_b = lab.at_b().len() as u64;
    let to_router = seen(&filtered).len() as u64;
    assert_eq!(to_b + to_router, 1, "the short frame went one way only");
}

#[test]
fn labelled_frames_from_a_port_that_refuses_labels_are_left_to_the_router() {
    let mut lab = Lab::new("rl");
    let mut t = lab.tables(&[(100, 200)]);
    t.ports.get_mut(&lab.r0).unwrap().accepts_mpls = false;
    lab.fp.apply(&t).unwrap();
    let r0 = lab.r.run(|| PacketSocket::open_index(lab.r0));
    lab.fp.filter_socket(r0.as_fd()).unwrap();

    lab.tx.send(&mpls_frame(&[lse(100, 0, true, 64)]));
    assert!(lab.at_b().is_empty(), "not switched");
    let at_router: Vec<u32> =
        r0.drain(QUIET).iter().filter(|f| f[12..14] == MPLS.to_be_bytes()).map(|f| label_of(f)).collect();
    assert_eq!(at_router, vec![100], "the router's socket gets it, to drop and count");
    let c = lab.fp.counters().unwrap();
    assert_eq!((c.frames_in, c.swap, c.passed), (1, 0, 1), "{c:?}");

    // Accepting again is one port entry rewritten.
    t.ports.get_mut(&lab.r0).unwrap().accepts_mpls = true;
    lab.fp.apply(&t).unwrap();
    lab.tx.send(&mpls_frame(&[lse(100, 0, true, 64)]));
    assert_eq!(lab.at_b().iter().map(|f| label_of(f)).collect::<Vec<_>>(), vec![200]);
}

#[test]
fn apply_removes_what_is_gone_and_invalid_tables_change_nothing() {
    let mut lab = Lab::new("ap");
    let both = lab.tables(&[(100, 200), (101, 201)]);
    lab.fp.apply(&both).unwrap();
    lab.tx.send(&mpls_frame(&[lse(100, 0, true, 64)]));
    lab.tx.send(&mpls_frame(&[lse(101, 0, true, 64)]));
    assert_eq!(lab.at_b().iter().map(|f| label_of(f)).collect::<Vec<_>>(), vec![200, 201]);

    let smaller = lab.tables(&[(101, 202)]);
    lab.fp.apply(&smaller).unwrap();
    assert!(!lab.fp.label_stats().unwrap().contains_key(&100), "a removed label's counters go with it");
    let passed = lab.fp.counters().unwrap().passed;
    lab.tx.send(&mpls_frame(&[lse(100, 0, true, 64)]));
    lab.tx.send(&mpls_frame(&[lse(101, 0, true, 64)]));
    assert_eq!(
        lab.at_b().iter().map(|f| label_of(f)).collect::<Vec<_>>(),
        vec![202],
        "100 is gone, 101 updated"
    );
    assert_eq!(lab.fp.counters().unwrap().passed, passed + 1);

    // Invalid tables: an error, and the maps stay as they were.
    let mut bad = lab.tables(&[(100, 200), (101, 203)]);
    bad.labels.insert(1 << 20, LabelEntry::PopIp { vrf: 0, uniform: true });
    assert!(matches!(lab.fp.apply(&bad), Err(FastPathError::InvalidLabel { .. })));
    let mut bad = lab.tables(&[(100, 200)]);
    bad.routes_v4.insert(
        (0, "198.18.0.0".parse().unwrap(), 15),
        RouteEntry::Forward { labels: vec![16, 17, 18, 19, 20], label_ttl: None, adj: lab.to_b() },
    );
    assert!(matches!(lab.fp.apply(&bad), Err(FastPathError::TooManyLabels { .. })));
    lab.tx.send(&mpls_frame(&[lse(100, 0, true, 64)]));
    lab.tx.send(&mpls_frame(&[lse(101, 0, true, 64)]));
    assert_eq!(lab.at_b().iter().map(|f| label_of(f)).collect::<Vec<_>>(), vec![202]);

    // A detached port leaves the maps; attached again, it is served again.
    let fp = &mut lab.fp;
    lab.r.run(|| fp.detach("r0").unwrap());
    let before = lab.fp.counters().unwrap();
    lab.tx.send(&mpls_frame(&[lse(101, 0, true, 64)]));
    assert!(lab.at_b().is_empty());
    assert_eq!(lab.fp.counters().unwrap(), before, "no program on r0 any more");
    let fp = &mut lab.fp;
    lab.r.run(|| fp.attach("r0").unwrap());
    lab.tx.send(&mpls_frame(&[lse(101, 0, true, 64)]));
    assert_eq!(lab.at_b().iter().map(|f| label_of(f)).collect::<Vec<_>>(), vec![202]);
}

#[test]
fn update_writes_only_the_changed_entries_and_invalid_changes_change_nothing() {
    let mut lab = Lab::new("up");
    lab.fp.apply(&lab.tables(&[(100, 200), (101, 201)])).unwrap();
    let to_b = lab.to_b();
    let swap = |o| Some(LabelEntry::Swap { out_label: o, adj: to_b });
    let change = FastTablesChange {
        labels: vec![(100, None), (101, swap(211)), (102, swap(212))],
        ..Default::default()
    };
    assert!(lab.fp.update(&change).unwrap().is_none());
    assert!(!lab.fp.label_stats().unwrap().contains_key(&100), "a removed label's counters go with it");
    for l in [100, 101, 102] {
        lab.tx.send(&mpls_frame(&[lse(l, 0, true, 64)]));
    }
    assert_eq!(
        lab.at_b().iter().map(|f| label_of(f)).collect::<Vec<_>>(),
        vec![211, 212],
        "100 gone, 101 changed, 102 new"
    );

    // An invalid entry: an error, and nothing changes (not even the valid entries with it).
    let bad = FastTablesChange { labels: vec![(101, swap(221)), (1 << 20, swap(5))], ..Default::default() };
    assert!(matches!(lab.fp.update(&bad), Err(FastPathError::InvalidLabel { .. })));
    lab.tx.send(&mpls_frame(&[lse(101, 0, true, 64)]));
    assert_eq!(lab.at_b().iter().map(|f| label_of(f)).collect::<Vec<_>>(), vec![211]);

    // The tables so changed, applied whole, leave the maps as they are.
    let whole = lab.tables(&[(101, 211), (102, 212)]);
    lab.fp.apply(&whole).unwrap();
    lab.tx.send(&mpls_frame(&[lse(102, 0, true, 64)]));
    assert_eq!(lab.at_b().iter().map(|f| label_of(f)).collect::<Vec<_>>(), vec![212]);
}

#[test]
fn attach_names_a_missing_interface() {
    let r = Netns::without_ipv6("mi");
    let e = r.run(|| FastPath::load().unwrap().attach("nosuch0").unwrap_err());
    assert!(e.to_string().contains("nosuch0"), "{e}");
}

#[test]
fn ip_forward_and_push_and_what_they_leave_to_userspace() {
    let mut lab = Lab::new("ip");
    let mut t = lab.tables(&[]);
    let fwd = |labels: Vec<u32>, mtu| RouteEntry::Forward {
        labels,
        label_ttl: None,
        adj: Adjacency { mtu, ..lab.to_b() },
    };
    let host = |d: u8| (0, std::net::Ipv4Addr::new(198, 18, 0, d), 32);
    t.routes_v4.insert(host(2), fwd(vec![], 1500));
    t.routes_v4.insert(host(3), fwd(vec![16, 17], 1500));
    t.routes_v4.insert(host(4), RouteEntry::Local);
    t.routes_v4.insert(host(5), fwd(vec![], 100));
    t.routes_v4.insert((0, "224.0.0.0".parse().unwrap(), 4), fwd(vec![], 1500));
    t.labels.insert(500, LabelEntry::PopIp { vrf: 0, uniform: true });
    lab.fp.apply(&t).unwrap();
    let ip_frame = |ip: &[u8]| eth(R0, A0, 0x0800, ip);

    let plain = ipv4_udp([198, 18, 0, 2], 64, 100);
    lab.tx.send(&ip_frame(&plain));
    let pushed = ipv4_udp([198, 18, 0, 3], 64, 100);
    lab.tx.send(&ip_frame(&pushed));
    let got = lab.rx.drain(QUIET);
    assert_eq!(got.len(), 2, "{got:x?}");
    assert_eq!((&got[0][..12], &got[0][12..14]), (&[B0, R1].concat()[..], &[0x08, 0x00][..]));
    let ip = &got[0][14..];
    assert_eq!(ip[8], 63);
    assert_eq!(common::fold(common::sum16(&ip[..20])), 0xffff, "header checksum fixed");
    assert_eq!((&ip[..8], &ip[9..10], &ip[12..]), (&plain[..8], &plain[9..10], &plain[12..]));
    assert_eq!(got[1][12..14], MPLS.to_be_bytes());
    assert_eq!(got[1][14..22], [lse(16, 0, false, 63), lse(17, 0, true, 63)].concat(), "S on the last only");
    assert_eq!(got[1][22 + 8], 63, "the IP TTL was decremented too");
    assert_eq!(got[1].len(), 14 + 8 + pushed.len());

    // Left to userspace: TTL 1, a bad header checksum, multicast, a local route, too big
    // for the out port.
    lab.tx.send(&ip_frame(&ipv4_udp([198, 18, 0, 2], 1, 100)));
    let mut bad = ipv4_udp([198, 18, 0, 2], 64, 100);
    bad[10] ^= 1;
    lab.tx.send(&ip_frame(&bad));
    lab.tx.send(&ip_frame(&ipv4_udp([224, 0, 0, 5], 64, 100)));
    lab.tx.send(&ip_frame(&ipv4_udp([198, 18, 0, 4], 64, 100)));
    lab.tx.send(&ip_frame(&ipv4_udp([198, 18, 0, 5], 64, 100)));
    assert!(lab.rx.drain(QUIET).is_empty());

    let c = lab.fp.counters().unwrap();
    assert_eq!(
        (c.ip_forward, c.push, c.pop, c.swap, c.passed, c.redirect_failed),
        (1, 1, 0, 0, 5, 0),
        "{c:?}"
    );
    assert_eq!(c.frames_in, 7);
}

/// An IPv6/UDP packet 2001:db8::1 -> `dst` with hop limit `hops` and `payload` bytes.
fn ipv6_udp(dst: std::net::Ipv6Addr, hops: u8, payload: usize) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0];
    p.extend(((8 + payload) as u16).to_be_bytes());
    p.extend([17, hops]);
    p.extend("2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    p.extend(dst.octets());
    p.extend([0x30, 0x39, 0x30, 0x39]);
    p.extend(((8 + payload) as u16).to_be_bytes());
    p.extend([0, 0]);
    p.extend((0..payload).map(|i| i as u8));
    p
}

/// Frames from a's packet socket are MPLS to r's kernel (eth_type_trans read their
/// EtherType), as are frames from a TAP, a virtio-net NIC or a NIC, and
/// bpf_skb_adjust_room pops only IP skbs: the pop goes through r0's ingress twice, the
/// second time as the inner packet's protocol. Checked: the popped frames at b, the TTL
/// rules of a pop and a penultimate-hop pop, IPv6 under the label, the counters (each
/// frame counted in once), and that neither pass reaches the router's socket.
#[test]
fn the_pop_of_a_frame_a_device_sent_takes_a_second_pass_through_the_ports_ingress() {
    let mut lab = Lab::new("rp");
    let mut t = lab.tables(&[]);
    t.labels.insert(500, LabelEntry::PopIp { vrf: 0, uniform: true });
    t.labels.insert(600, LabelEntry::Php { uniform: true, adj: lab.to_b() });
    let to_b = |labels: Vec<u32>| RouteEntry::Forward { labels, label_ttl: None, adj: lab.to_b() };
    t.routes_v4.insert((0, std::net::Ipv4Addr::new(198, 18, 0, 2), 32), to_b(vec![]));
    let dst6: std::net::Ipv6Addr = "2001:db8::2".parse().unwrap();
    t.routes_v6.insert((0, dst6, 128), to_b(vec![]));
    lab.fp.apply(&t).unwrap();
    let r0 = lab.r0;
    let (filtered, plain) = lab.r.run(|| (PacketSocket::open_index(r0), PacketSocket::open_index(r0)));
    lab.fp.filter_socket(filtered.as_fd()).unwrap();

    let ip4 = ipv4_udp([198, 18, 0, 2], 64, 60);
    let ip6 = ipv6_udp(dst6, 64, 60);
    let labelled = |label: u32, ttl: u8, ip: &[u8]| {
        let mut body = lse(label, 0, true, ttl).to_vec();
        body.extend_from_slice(ip);
        eth(R0, A0, MPLS, &body)
    };
    lab.tx.send(&labelled(500, 10, &ip4));
    lab.tx.send(&labelled(600, 20, &ip4));
    lab.tx.send(&labelled(500, 64, &ip6));
    let got = lab.rx.drain(QUIET);
    assert_eq!(got.len(), 3, "{got:x?}");
    for f in &got {
        assert_eq!(f[..12], [B0, R1].concat(), "MACs rewritten");
    }
    // Pop, uniform: min(IP 64, label 10) - 1; PHP, uniform: min(IP 64, label 20 - 1).
    for (f, ttl) in got[..2].iter().zip([9, 19]) {
        assert_eq!((&f[12..14], f.len()), (&[0x08, 0x00][..], 14 + ip4.len()), "{f:x?}");
        let ip = &f[14..];
        assert_eq!(ip[8], ttl);
        assert_eq!(common::fold(common::sum16(&ip[..20])), 0xffff, "header checksum fixed");
        assert_eq!((&ip[..8], &ip[9..10], &ip[12..]), (&ip4[..8], &ip4[9..10], &ip4[12..]));
    }
    assert_eq!(got[2][12..14], [0x86, 0xdd]);
    assert_eq!((got[2][14 + 7], &got[2][14 + 8..]), (63, &ip6[8..]), "hop limit 63, the rest as sent");

    let c = lab.fp.counters().unwrap();
    assert_eq!(
        (c.frames_in, c.pop, c.repassed, c.passed, c.redirect_failed, c.swap, c.ip_forward),
        (3, 3, 3, 0, 0, 0, 0),
        "{c:?}"
    );
    let labels = lab.fp.label_stats().unwrap();
    assert_eq!((labels[&500].0, labels[&600].0), (2, 1), "each pop counted once: {labels:?}");
    let ports = lab.fp.port_stats().unwrap();
    assert_eq!((ports[&lab.r0].rx_frames, ports[&lab.r1].tx_frames), (3, 3), "{ports:?}");
    assert_eq!(filtered.drain(QUIET), Vec::<Vec<u8>>::new(), "the router's socket sees neither pass");
    let passes: Vec<[u8; 2]> = plain.drain(QUIET).iter().map(|f| [f[12], f[13]]).collect();
    assert_eq!(
        passes,
        [[0x88, 0x47], [0x08, 0x00], [0x88, 0x47], [0x08, 0x00], [0x88, 0x47], [0x86, 0xdd]],
        "an unfiltered tap sees each frame as it came and on its second pass"
    );

    // A frame too big for where its pop sends it is the pipeline's; so, from then on,
    // are the TCP segments with data from the same port (a flow split between the two
    // would be reordered); a pure ACK still pops here.
    let small =
        RouteEntry::Forward { labels: vec![], label_ttl: None, adj: Adjacency { mtu: 100, ..lab.to_b() } };
    t.routes_v4.insert((0, std::net::Ipv4Addr::new(198, 18, 0, 3), 32), small);
    lab.fp.apply(&t).unwrap();
    let before = lab.fp.counters().unwrap();
    lab.tx.send(&labelled(500, 64, &common::ipv4_tcp([198, 18, 0, 2], 100)));
    assert_eq!(lab.rx.drain(QUIET).len(), 1, "before any big frame, a segment with data pops here");
    lab.tx.send(&labelled(500, 64, &ipv4_udp([198, 18, 0, 3], 64, 200)));
    lab.tx.send(&labelled(500, 64, &common::ipv4_tcp([198, 18, 0, 2], 100)));
    lab.tx.send(&labelled(500, 64, &common::ipv4_tcp([198, 18, 0, 2], 0)));
    let got = lab.rx.drain(QUIET);
    assert_eq!(got.len(), 1, "{got:x?}");
    assert_eq!(got[0].len(), 14 + 40, "the pure ACK, popped");
    let c = lab.fp.counters().unwrap();
    assert_eq!((c.pop - before.pop, c.passed - before.passed), (2, 2), "{c:?}");
    let kept: Vec<usize> = filtered.drain(QUIET).iter().map(Vec::len).collect();
    assert_eq!(
        kept,
        [14 + 4 + 228, 14 + 4 + 140],
        "the router's socket got the big frame and the segment with data after it"
    );
}
