//! The fast path on a port that is not a veth: a TAP device, as QEMU's tap backend makes
//! one for a guest's virtio-net NIC. Frames leave by it through `bpf_redirect` to its
//! egress (its reader gets them), not into a veth peer. Needs root.
//!
//! ```text
//!  h1 e0 ==veth== r0 [wire] <- relay -> tap c0 [pe1] p0 ==veth== p0 [pe2] c0 ==veth== e0 h2
//! ```
//!
//! The relay reads and writes the TAP's descriptor with virtio-net headers as QEMU does
//! and carries the frames to and from h1 over a veth, so h1's kernel TCP stands for the
//! guest's. pe1 pushes 1000 toward h2 (frames from the TAP's ingress) and pops 2000
//! toward h1 (into the TAP); pe2 is the mirror image on veth.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::{End, Netns, PacketSocket, mac_str, transfer, veth};
use vmpls_dataplane::{Packet, PacketPool};
use vmpls_fastpath::{Adjacency, Delivery, FastPath, FastPort, FastTables, LabelEntry, RouteEntry};
use vmpls_ports::{AfPacketPort, Port, TapOptions, TapPort};

const H1: [u8; 6] = [0x02, 0xfc, 0, 0, 0, 0x11];
const PE1C: [u8; 6] = [0x02, 0xfc, 0, 0, 1, 0x01];
const PE1P: [u8; 6] = [0x02, 0xfc, 0, 0, 1, 0x02];
const PE2P: [u8; 6] = [0x02, 0xfc, 0, 0, 2, 0x02];
const PE2C: [u8; 6] = [0x02, 0xfc, 0, 0, 2, 0x01];
const H2: [u8; 6] = [0x02, 0xfc, 0, 0, 0, 0x22];
const CORE_MTU: u32 = 1600;
const EDGE_MTU: u32 = 1500;
const H1_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
const H2_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 2);

/// What the relay saw of the frames the TAP's reader got.
#[derive(Default)]
struct Seen {
    frames: AtomicU64,
    /// Frames larger than the TAP's MTU: super-frames handed over whole.
    super_frames: AtomicU64,
}

/// Moves frames between `tap` and `wire` until `stop`, as QEMU's tap backend moves them
/// between the TAP and a guest.
fn relay(mut tap: TapPort, mut wire: AfPacketPort, stop: &AtomicBool, seen: &Seen) {
    let mut pool = PacketPool::new(512);
    let mut batch: Vec<Packet> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let mut fds = [
            libc::pollfd { fd: raw(&tap), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: raw(&wire), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, 20) };
        if tap.recv_batch(&mut pool, &mut batch, 64).unwrap() > 0 {
            for p in &batch {
                seen.frames.fetch_add(1, Ordering::Relaxed);
                if p.len() > 14 + EDGE_MTU as usize {
                    seen.super_frames.fetch_add(1, Ordering::Relaxed);
                }
            }
            wire.send_batch(&mut batch, &mut pool).unwrap();
        }
        if wire.recv_batch(&mut pool, &mut batch, 64).unwrap() > 0 {
            tap.send_batch(&mut batch, &mut pool).unwrap();
        }
    }
}

fn raw(fd: &impl AsFd) -> i32 {
    use std::os::fd::AsRawFd;
    fd.as_fd().as_raw_fd()
}

fn tables(
    c: (u32, [u8; 6], Delivery),
    host: ([u8; 6], Ipv4Addr),
    p: (u32, [u8; 6]),
    far: ([u8; 6], Ipv4Addr),
    push: u32,
    pop: u32,
) -> FastTables {
    let core = Adjacency { ifindex: p.0, mtu: CORE_MTU, dst_mac: far.0, src_mac: p.1 };
    let edge = Adjacency { ifindex: c.0, mtu: EDGE_MTU, dst_mac: host.0, src_mac: c.1 };
    let mut t = FastTables::default();
    t.ports.insert(c.0, FastPort { vrf: 0, mac: c.1, accepts_mpls: true, netns: 0, delivery: c.2 });
    t.ports.insert(
        p.0,
        FastPort { vrf: 0, mac: p.1, accepts_mpls: true, netns: 0, delivery: Delivery::VethPeer },
    );
    t.labels.insert(pop, LabelEntry::PopIp { vrf: 0, uniform: true });
    let net = |a: Ipv4Addr| Ipv4Addr::from(u32::from(a) & 0xffff_ff00);
    t.routes_v4
        .insert((0, net(far.1), 24), RouteEntry::Forward { labels: vec![push], label_ttl: None, adj: core });
    t.routes_v4.insert((0, host.1, 32), RouteEntry::Forward { labels: vec![], label_ttl: None, adj: edge });
    t
}

fn host_setup(h: &Netns, me: Ipv4Addr, far: Ipv4Addr, gw_mac: [u8; 6]) {
    let gw = Ipv4Addr::from(u32::from(me) & 0xffff_ff00 | 1).to_string();
    let far_net = Ipv4Addr::from(u32::from(far) & 0xffff_ff00);
    h.ip(&["addr", "add", &format!("{me}/24"), "dev", "e0"]);
    h.ip(&["neigh", "add", &gw, "lladdr", &mac_str(gw_mac), "dev", "e0", "nud", "permanent"]);
    h.ip(&["route", "add", &format!("{far_net}/24"), "via", &gw, "dev", "e0"]);
}

#[test]
fn a_tap_port_takes_pushes_from_its_ingress_and_popped_super_frames_to_its_reader() {
    let h1 = Netns::new("fth1");
    let wire = Netns::new("ftw");
    let pe1 = Netns::without_ipv6("ftpe1");
    let pe2 = Netns::without_ipv6("ftpe2");
    let h2 = Netns::new("fth2");
    veth(End { ns: &h1, ifname: "e0", mac: Some(H1) }, End { ns: &wire, ifname: "r0", mac: None }, EDGE_MTU);
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
    let tap_opts = TapOptions { mtu: Some(EDGE_MTU), mac: Some(H1), mpls_gso: false };
    let tap = pe1.run(|| TapPort::create(0, "c0", "c0", &tap_opts).expect("TAP c0 in pe1"));
    pe1.ip(&["link", "set", "c0", "address", &mac_str(PE1C)]);
    let mut wire_port = wire.run(|| AfPacketPort::open(1, "r0", "r0", None).expect("packet socket on r0"));
    wire_port.receive_every_frame().unwrap();
    host_setup(&h1, H1_ADDR, H2_ADDR, PE1C);
    host_setup(&h2, H2_ADDR, H1_ADDR, PE2C);

    assert_eq!(pe1.run(|| vmpls_fastpath::delivery_to("c0")), Ok(Delivery::Transmit));
    assert_eq!(pe1.run(|| vmpls_fastpath::delivery_to("p0")), Ok(Delivery::VethPeer));
    let (c1, p1, c2, p2) = (pe1.ifindex("c0"), pe1.ifindex("p0"), pe2.ifindex("c0"), pe2.ifindex("p0"));
    let t1 = tables((c1, PE1C, Delivery::Transmit), (H1, H1_ADDR), (p1, PE1P), (PE2P, H2_ADDR), 1000, 2000);
    let t2 = tables((c2, PE2C, Delivery::VethPeer), (H2, H2_ADDR), (p2, PE2P), (PE1P, H1_ADDR), 2000, 1000);
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

    let stop = AtomicBool::new(false);
    let seen = Seen::default();
    const TOTAL: u64 = 16 << 20;
    let (to_h2, to_h1) = std::thread::scope(|s| {
        let relay = s.spawn(|| relay(tap, wire_port, &stop, &seen));
        // Kernel TCP both ways: h1 -> h2 enters pe1 at the TAP's ingress and is pushed;
        // h2 -> h1 is popped at pe1 and leaves by the TAP, its super-frames whole.
        let to_h2 = transfer(&h1, &h2, SocketAddr::new(IpAddr::V4(H2_ADDR), 5201), TOTAL);
        let to_h1 = transfer(&h2, &h1, SocketAddr::new(IpAddr::V4(H1_ADDR), 5202), TOTAL);
        // The connections' last segments (FIN, ACK) still cross meanwhile.
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        relay.join().unwrap();
        (to_h2, to_h1)
    });
    assert_eq!((to_h2, to_h1), (TOTAL, TOTAL));

    let (a, b) = (fp1.counters().unwrap(), fp2.counters().unwrap());
    assert_eq!((a.redirect_failed, b.redirect_failed), (0, 0), "pe1 {a:?}\npe2 {b:?}");
    assert!(a.push > 2 && a.pop > 2 && b.push > 2 && b.pop > 2, "pe1 {a:?}\npe2 {b:?}");
    let tap_stats = fp1.port_stats().unwrap()[&c1];
    // Everything h1 sent reached pe1 by the TAP's ingress and was pushed there; what the
    // relay read from the TAP is what pe1's programs sent into it (and a few ARP-free
    // extras cannot exist: the hosts' gateways are permanent neighbours).
    assert!(tap_stats.rx_bytes > TOTAL && tap_stats.tx_bytes > TOTAL, "{tap_stats:?}");
    let (frames, super_frames) =
        (seen.frames.load(Ordering::Relaxed), seen.super_frames.load(Ordering::Relaxed));
    assert_eq!(frames, tap_stats.tx_frames, "every frame the programs sent into the TAP reached its reader");
    assert!(super_frames > 0, "popped super-frames reach the TAP's reader whole ({frames} frames)");
}

/// `frame` (Ethernet, IPv4, TCP without options) as a TCP super-frame of 1000-byte
/// segments with a partial checksum, as a packet port hands it to the kernel.
fn tcp_super_frame(frame: &[u8]) -> Packet {
    let mut p = Packet::from_frame(1, frame);
    p.offload = vmpls_wire::virtio_net::Repr {
        needs_csum: true,
        gso_type: vmpls_wire::virtio_net::GsoType::TcpV4,
        hdr_len: 54,
        gso_size: 1000,
        csum_start: 34,
        csum_offset: 16,
        ..Default::default()
    };
    p
}

/// What a push into a TAP takes in the kernel: single frames, and TCP segments with data
/// only while the port they came from has delivered no super-frame lately (those go to the
/// pipeline, which cuts them; a segment pushed in the kernel meanwhile would overtake them).
#[test]
fn a_push_into_a_tap_takes_single_frames_and_tcp_data_while_no_super_frames_come() {
    let pe1 = Netns::without_ipv6("ftpp1");
    let src = Netns::new("ftpps");
    veth(
        End { ns: &pe1, ifname: "p0", mac: Some(PE1P) },
        End { ns: &src, ifname: "s0", mac: Some(PE2P) },
        CORE_MTU,
    );
    let tap_opts = TapOptions { mtu: Some(EDGE_MTU), mac: Some(H1), mpls_gso: false };
    let mut tap = pe1.run(|| TapPort::create(0, "c0", "c0", &tap_opts).expect("TAP c0 in pe1"));
    pe1.ip(&["link", "set", "c0", "address", &mac_str(PE1C)]);
    let (c1, p1) = (pe1.ifindex("c0"), pe1.ifindex("p0"));
    let mut t = FastTables::default();
    t.ports.insert(
        c1,
        FastPort { vrf: 0, mac: PE1C, accepts_mpls: true, netns: 0, delivery: Delivery::Transmit },
    );
    t.ports.insert(
        p1,
        FastPort { vrf: 0, mac: PE1P, accepts_mpls: true, netns: 0, delivery: Delivery::VethPeer },
    );
    let into_tap = Adjacency { ifindex: c1, mtu: EDGE_MTU, dst_mac: H1, src_mac: PE1C };
    t.routes_v4.insert(
        (0, Ipv4Addr::new(198, 18, 3, 0), 24),
        RouteEntry::Forward { labels: vec![3000], label_ttl: None, adj: into_tap },
    );
    let fp = pe1.run(|| {
        let mut fp = FastPath::load().expect("load");
        fp.attach("c0").unwrap();
        fp.attach("p0").unwrap();
        fp.apply(&t).unwrap();
        fp
    });
    let s0 = src.ifindex("s0");
    let tx = src.run(|| PacketSocket::open_index(s0));
    let mut gso_tx = src.run(|| AfPacketPort::open(1, "s0", "s0", None).expect("packet port on s0"));
    let dst = [198, 18, 3, 9];
    let sent = [
        ("UDP", common::ipv4_udp(dst, 64, 100), true, false),
        ("a pure ACK", common::ipv4_tcp(dst, 0), true, false),
        ("a TCP segment with data, no super-frame yet", common::ipv4_tcp(dst, 100), true, false),
        ("a TCP super-frame", common::ipv4_tcp(dst, 3000), false, true),
        ("a TCP segment with data after a super-frame", common::ipv4_tcp(dst, 100), false, false),
        ("a pure ACK after a super-frame", common::ipv4_tcp(dst, 0), true, false),
    ];
    let mut pool = PacketPool::new(64);
    for (what, ip, pushed, gso) in &sent {
        let before = fp.counters().unwrap();
        let frame = common::eth(PE1P, PE2P, 0x0800, ip);
        if *gso {
            gso_tx.send_batch(&mut vec![tcp_super_frame(&frame)], &mut pool).unwrap();
        } else {
            tx.send(&frame);
        }
        let mut got: Vec<Packet> = Vec::new();
        for _ in 0..15 {
            std::thread::sleep(Duration::from_millis(20));
            tap.recv_batch(&mut pool, &mut got, 64).unwrap();
        }
        let after = fp.counters().unwrap();
        let labelled: Vec<&[u8]> =
            got.iter().map(|p| p.frame()).filter(|f| f[12..14] == [0x88, 0x47]).collect();
        if *pushed {
            assert_eq!(labelled.len(), 1, "{what}: one labelled frame in the TAP, got {got:?}");
            assert_eq!(labelled[0][14..17], [0x00, 0xbb, 0x81], "{what}: label 3000, bottom of stack");
            let pushed_ip = &labelled[0][18..];
            assert_eq!((pushed_ip.len(), pushed_ip[8]), (ip.len(), 63), "{what}: the packet whole, TTL - 1");
            assert_eq!(pushed_ip[12..], ip[12..], "{what}: addresses and payload as sent");
            assert_eq!(after.push - before.push, 1, "{what}: {after:?}");
        } else {
            assert!(labelled.is_empty(), "{what}: left to the pipeline, not pushed into the TAP: {got:?}");
            assert_eq!((after.push - before.push, after.passed - before.passed), (0, 1), "{what}: {after:?}");
        }
        for p in got.drain(..) {
            pool.put(p);
        }
    }
    drop(tap);
}

/// A super-frame the kernel sends on whole (here an IP one, routed to a veth) does not
/// count as one the pipeline must cut: the TCP segments with data that follow it from the
/// same port are still pushed in the kernel. Only frames left to the pipeline hold the
/// flow's other segments back behind them; holding them back otherwise would send them
/// the slow way while the super-frames overtook them.
#[test]
fn a_super_frame_the_kernel_forwards_whole_leaves_the_ports_tcp_data_in_the_kernel() {
    let pe1 = Netns::without_ipv6("ftpw1");
    let src = Netns::new("ftpws");
    let dst = Netns::new("ftpwd");
    const PE1Q: [u8; 6] = [0x02, 0xfc, 0, 0, 1, 0x03];
    const DST: [u8; 6] = [0x02, 0xfc, 0, 0, 3, 0x01];
    veth(
        End { ns: &pe1, ifname: "p0", mac: Some(PE1P) },
        End { ns: &src, ifname: "s0", mac: Some(PE2P) },
        CORE_MTU,
    );
    veth(
        End { ns: &pe1, ifname: "q0", mac: Some(PE1Q) },
        End { ns: &dst, ifname: "d0", mac: Some(DST) },
        65535,
    );
    let tap_opts = TapOptions { mtu: Some(EDGE_MTU), mac: Some(H1), mpls_gso: false };
    let mut tap = pe1.run(|| TapPort::create(0, "c0", "c0", &tap_opts).expect("TAP c0 in pe1"));
    pe1.ip(&["link", "set", "c0", "address", &mac_str(PE1C)]);
    let (c1, p1, q1) = (pe1.ifindex("c0"), pe1.ifindex("p0"), pe1.ifindex("q0"));
    let mut t = FastTables::default();
    for (ifindex, mac, delivery) in
        [(c1, PE1C, Delivery::Transmit), (p1, PE1P, Delivery::VethPeer), (q1, PE1Q, Delivery::VethPeer)]
    {
        t.ports.insert(ifindex, FastPort { vrf: 0, mac, accepts_mpls: true, netns: 0, delivery });
    }
    let into_tap = Adjacency { ifindex: c1, mtu: EDGE_MTU, dst_mac: H1, src_mac: PE1C };
    t.routes_v4.insert(
        (0, Ipv4Addr::new(198, 18, 3, 0), 24),
        RouteEntry::Forward { labels: vec![3000], label_ttl: None, adj: into_tap },
    );
    let onward = Adjacency { ifindex: q1, mtu: 65535, dst_mac: DST, src_mac: PE1Q };
    t.routes_v4.insert(
        (0, Ipv4Addr::new(198, 18, 4, 0), 24),
        RouteEntry::Forward { labels: vec![], label_ttl: None, adj: onward },
    );
    let fp = pe1.run(|| {
        let mut fp = FastPath::load().expect("load");
        for ifname in ["c0", "p0", "q0"] {
            fp.attach(ifname).unwrap();
        }
        fp.apply(&t).unwrap();
        fp
    });
    let s0 = src.ifindex("s0");
    let tx = src.run(|| PacketSocket::open_index(s0));
    let mut gso_tx = src.run(|| AfPacketPort::open(1, "s0", "s0", None).expect("packet port on s0"));
    let mut rx = dst.run(|| AfPacketPort::open(2, "d0", "d0", None).expect("packet port on d0"));
    let mut pool = PacketPool::new(64);

    let before = fp.counters().unwrap();
    let super_frame = common::eth(PE1P, PE2P, 0x0800, &common::ipv4_tcp([198, 18, 4, 9], 3000));
    gso_tx.send_batch(&mut vec![tcp_super_frame(&super_frame)], &mut pool).unwrap();
    let mut got: Vec<Packet> = Vec::new();
    for _ in 0..15 {
        std::thread::sleep(Duration::from_millis(20));
        rx.recv_batch(&mut pool, &mut got, 64).unwrap();
    }
    let after = fp.counters().unwrap();
    assert_eq!(
        (after.ip_forward - before.ip_forward, after.passed - before.passed),
        (1, 0),
        "the super-frame routed in the kernel: {after:?}"
    );
    let whole: Vec<usize> = got.iter().map(|p| p.len()).collect();
    assert_eq!(whole, [14 + 40 + 3000], "it reached d0 whole");
    for p in got.drain(..) {
        pool.put(p);
    }

    let before = fp.counters().unwrap();
    tx.send(&common::eth(PE1P, PE2P, 0x0800, &common::ipv4_tcp([198, 18, 3, 9], 100)));
    for _ in 0..15 {
        std::thread::sleep(Duration::from_millis(20));
        tap.recv_batch(&mut pool, &mut got, 64).unwrap();
    }
    let after = fp.counters().unwrap();
    let labelled = got.iter().filter(|p| p.frame()[12..14] == [0x88, 0x47]).count();
    assert_eq!(
        (labelled, after.push - before.push, after.passed - before.passed),
        (1, 1, 0),
        "the segment with data after it pushed into the TAP in the kernel: {after:?}"
    );
    drop(tap);
}
