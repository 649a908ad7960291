//! VPLS bridging on bytes: a PE with two attachment circuits (ports 0 "ce1" and 1 "ce2"),
//! a core port (2) and two pseudowires of the instance "blue": pw 0 to PE 198.18.255.2
//! (labels: ours 1002, theirs 2002, transport 3002) and pw 1 to PE 198.18.255.3 (1003,
//! 2003, transport 3003), both with the control word.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vmpls_fib::{
    DEFAULT_VRF, LabelAction, LabelRoute, Nexthop, NexthopGroup, PrefixRoute, Pseudowire, RouteTarget,
    TtlModel, VplsInstance,
};

use super::*;

const CE1_MAC: [u8; 6] = [2, 0, 0, 0, 0x50, 0x01];
const CE2_MAC: [u8; 6] = [2, 0, 0, 0, 0x50, 0x02];
const CORE_MAC: [u8; 6] = [2, 0, 0, 0, 0x60, 0x01];
const P_MAC: [u8; 6] = [2, 0, 0, 0, 0x60, 0x02];
/// Behind ce1.
const HOST_A: [u8; 6] = [0x5a, 0, 0, 0, 0, 0x0a];
/// Behind ce2.
const HOST_B: [u8; 6] = [0x5a, 0, 0, 0, 0, 0x0b];
/// Behind the PE of pw 0.
const HOST_C: [u8; 6] = [0x5a, 0, 0, 0, 0, 0x0c];
/// Behind the PE of pw 1.
const HOST_D: [u8; 6] = [0x5a, 0, 0, 0, 0, 0x0d];
const BROADCAST: [u8; 6] = [0xff; 6];

const CE1: PortId = 0;
const CE2: PortId = 1;
const CORE: PortId = 2;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pseudowire(name: &str, local_label: u32, remote_label: u32, peer: &str) -> Pseudowire {
    Pseudowire {
        name: name.into(),
        attachment: None,
        local_label,
        remote_label,
        peer: ip(peer),
        control_word: true,
        up: true,
    }
}

/// The PE's FIB with instance "blue" limited to `mac_limit` MACs and `flood_rate`
/// flooded frames a second, MACs aged out after 300 s.
fn fib(mac_limit: u32, flood_rate: u32) -> Fib {
    let mut b = Fib::builder();
    b.add_port("ce1", DEFAULT_VRF, &[]).unwrap();
    b.add_port("ce2", DEFAULT_VRF, &[]).unwrap();
    b.add_port("core", DEFAULT_VRF, &[(ip("198.18.60.1"), 24)]).unwrap();
    for (peer, transport) in [("198.18.255.2", 3002), ("198.18.255.3", 3003)] {
        let nh = Nexthop::new(CORE, Some(ip("198.18.60.2")), vec![transport]);
        let route = PrefixRoute::new(RouteTarget::Forward(NexthopGroup::new(vec![nh]).unwrap()));
        b.add_prefix_route(DEFAULT_VRF, ip(peer), 32, route).unwrap();
    }
    let mut fib = b.build().unwrap();
    fib.pseudowires.push(pseudowire("blue-pe2", 1002, 2002, "198.18.255.2"));
    fib.pseudowires.push(pseudowire("blue-pe3", 1003, 2003, "198.18.255.3"));
    fib.pw_vpls = vec![Some(0), Some(0)];
    for (pw, label) in [(0, 1002), (1, 1003)] {
        let route = LabelRoute::new(LabelAction::Pseudowire { pw }, TtlModel::Pipe);
        fib.set_label_route(label, Some(route)).unwrap();
    }
    fib.vpls.push(VplsInstance {
        name: "blue".into(),
        attachments: vec![CE1, CE2],
        pseudowires: vec![0, 1],
        mac_limit,
        flood_rate,
        mac_aging_s: 300,
    });
    fib.port_vpls = vec![Some(0), Some(0), None];
    fib
}

fn pe(fib: Fib) -> Dataplane {
    let caps = PortCaps::default();
    let ports = vec![
        PortInfo { id: CE1, name: "ce1".into(), mac: CE1_MAC, mtu: 1500, caps },
        PortInfo { id: CE2, name: "ce2".into(), mac: CE2_MAC, mtu: 1500, caps },
        PortInfo { id: CORE, name: "core".into(), mac: CORE_MAC, mtu: 1500, caps },
    ];
    let mut dp = Dataplane::new(FibHandle::new(fib), ports, DataplaneConfig::default());
    dp.neighbors.learn(Instant::now(), CORE, ip("198.18.60.2"), P_MAC, true);
    dp
}

/// An ARP request from `src` (as a host sends it: to the broadcast address) or, with
/// `dst` unicast, an Ethernet frame of ethertype 0x88b5 (local experimental) with a
/// 46-byte payload.
fn customer_frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src);
    if dst == BROADCAST {
        // ARP request: who has 198.18.70.2, tell 198.18.70.1.
        f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&[198, 18, 70, 1, 0, 0, 0, 0, 0, 0, 198, 18, 70, 2]);
        f.resize(60, 0);
    } else {
        f.extend_from_slice(&[0x88, 0xb5]);
        f.extend((0..46).map(|i| i as u8));
    }
    f
}

/// `inner` as it arrives from the core on pseudowire label `label` (the transport label
/// popped by the penultimate P), with a zero control word.
fn from_core(label: u32, inner: &[u8]) -> Vec<u8> {
    let mut f = CORE_MAC.to_vec();
    f.extend_from_slice(&P_MAC);
    f.extend_from_slice(&[0x88, 0x47]);
    f.extend_from_slice(&((label << 12) | 0x100 | 64).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(inner);
    f
}

/// `inner` as this PE sends it into a pseudowire: transport label, pseudowire label,
/// zero control word.
fn to_core(transport: u32, pw_label: u32, inner: &[u8]) -> Vec<u8> {
    let mut f = P_MAC.to_vec();
    f.extend_from_slice(&CORE_MAC);
    f.extend_from_slice(&[0x88, 0x47]);
    f.extend_from_slice(&((transport << 12) | 255).to_be_bytes());
    f.extend_from_slice(&((pw_label << 12) | 0x100 | 255).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(inner);
    f
}

struct Run {
    dp: Dataplane,
    pool: PacketPool,
    now: Instant,
}

impl Run {
    fn new(fib: Fib) -> Run {
        Run { dp: pe(fib), pool: PacketPool::new(64), now: Instant::now() }
    }

    /// Sends `frame` in on `port`; returns the frames out, per port.
    fn send(&mut self, port: PortId, frame: &[u8]) -> Vec<Vec<Vec<u8>>> {
        let mut out = Output::new(3);
        self.dp.process(self.now, Packet::from_frame(port, frame), &mut self.pool, &mut out);
        out.tx.into_iter().map(|q| q.into_iter().map(|p| p.frame().to_vec()).collect()).collect()
    }

    fn drops(&self, r: DropReason) -> u64 {
        self.dp.counters().drops(r)
    }

    fn events(&self, e: Event) -> u64 {
        self.dp.counters().events(e)
    }

    fn fdb(&mut self) -> Vec<([u8; 6], FdbDev)> {
        self.dp.vpls_fdb(self.now).into_iter().map(|e| (e.mac, e.dev)).collect()
    }
}

fn port(name: &str) -> FdbDev {
    FdbDev::Port(name.into())
}

fn pw(name: &str) -> FdbDev {
    FdbDev::Pw(name.into())
}

#[test]
fn broadcast_from_an_attachment_floods_to_every_other_member_and_learns_the_source() {
    let mut r = Run::new(fib(100, 0));
    let arp = customer_frame(BROADCAST, HOST_A);
    let out = r.send(CE1, &arp);
    assert!(out[CE1 as usize].is_empty(), "not back where it came from");
    assert_eq!(out[CE2 as usize], vec![arp.clone()]);
    assert_eq!(out[CORE as usize], vec![to_core(3002, 2002, &arp), to_core(3003, 2003, &arp)]);
    assert_eq!(r.events(Event::VplsFlooded), 1);
    assert_eq!(r.fdb(), vec![(HOST_A, port("ce1"))]);
}

#[test]
fn known_unicast_goes_to_its_member_only() {
    let mut r = Run::new(fib(100, 0));
    r.send(CE1, &customer_frame(BROADCAST, HOST_A));
    // The answer from behind pw 0: learned there, sent to ce1 only.
    let reply = customer_frame(HOST_A, HOST_C);
    let out = r.send(CORE, &from_core(1002, &reply));
    assert_eq!(out[CE1 as usize], vec![reply]);
    assert!(out[CE2 as usize].is_empty() && out[CORE as usize].is_empty());
    // And back: into pw 0 only.
    let back = customer_frame(HOST_C, HOST_A);
    let out = r.send(CE1, &back);
    assert_eq!(out[CORE as usize], vec![to_core(3002, 2002, &back)]);
    assert!(out[CE2 as usize].is_empty());
    assert_eq!(r.fdb(), vec![(HOST_A, port("ce1")), (HOST_C, pw("blue-pe2"))]);
}

#[test]
fn a_frame_from_a_pseudowire_never_goes_to_another_pseudowire() {
    let mut r = Run::new(fib(100, 0));
    // Unknown unicast from pw 0: flooded to the attachment circuits only.
    let unknown = customer_frame(HOST_B, HOST_C);
    let out = r.send(CORE, &from_core(1002, &unknown));
    assert_eq!(out[CE1 as usize], vec![unknown.clone()]);
    assert_eq!(out[CE2 as usize], vec![unknown]);
    assert!(out[CORE as usize].is_empty(), "split horizon");
    // Broadcast from pw 1: the same.
    let out = r.send(CORE, &from_core(1003, &customer_frame(BROADCAST, HOST_D)));
    assert_eq!((out[CE1 as usize].len(), out[CE2 as usize].len(), out[CORE as usize].len()), (1, 1, 0));
    // Known unicast from pw 0 to a MAC behind pw 1: dropped, counted.
    let out = r.send(CORE, &from_core(1002, &customer_frame(HOST_D, HOST_C)));
    assert!(out.iter().all(Vec::is_empty));
    assert_eq!(r.drops(DropReason::VplsSplitHorizon), 1);
}

#[test]
fn a_frame_for_a_mac_on_the_member_it_came_from_is_filtered() {
    let mut r = Run::new(fib(100, 0));
    r.send(CE1, &customer_frame(BROADCAST, HOST_A));
    r.send(CE1, &customer_frame(BROADCAST, HOST_B));
    let out = r.send(CE1, &customer_frame(HOST_B, HOST_A));
    assert!(out.iter().all(Vec::is_empty));
    assert_eq!(r.drops(DropReason::VplsFiltered), 1);
}

#[test]
fn a_mac_seen_elsewhere_moves() {
    let mut r = Run::new(fib(100, 0));
    r.send(CE1, &customer_frame(BROADCAST, HOST_A));
    r.send(CORE, &from_core(1003, &customer_frame(BROADCAST, HOST_A)));
    assert_eq!(r.fdb(), vec![(HOST_A, pw("blue-pe3"))]);
    assert_eq!(r.events(Event::VplsMacMoved), 1);
    let to_a = customer_frame(HOST_A, HOST_B);
    let out = r.send(CE2, &to_a);
    assert_eq!(out[CORE as usize], vec![to_core(3003, 2003, &to_a)]);
    assert!(out[CE1 as usize].is_empty());
}

#[test]
fn macs_beyond_the_limit_are_not_learned_but_their_frames_pass() {
    let mut r = Run::new(fib(2, 0));
    r.send(CE1, &customer_frame(BROADCAST, HOST_A));
    r.send(CE2, &customer_frame(BROADCAST, HOST_B));
    let out = r.send(CORE, &from_core(1002, &customer_frame(HOST_A, HOST_C)));
    assert_eq!(out[CE1 as usize].len(), 1, "forwarded all the same");
    assert_eq!(r.events(Event::VplsMacLimit), 1);
    assert_eq!(r.fdb(), vec![(HOST_A, port("ce1")), (HOST_B, port("ce2"))]);
    // Frames to the unlearned MAC are flooded.
    let out = r.send(CE1, &customer_frame(HOST_C, HOST_A));
    assert_eq!((out[CE2 as usize].len(), out[CORE as usize].len()), (1, 2));
}

#[test]
fn learned_macs_age_out() {
    let mut r = Run::new(fib(100, 0));
    r.send(CE1, &customer_frame(BROADCAST, HOST_A));
    r.now += Duration::from_secs(299);
    let out = r.send(CE2, &customer_frame(HOST_A, HOST_B));
    assert_eq!((out[CE1 as usize].len(), out[CORE as usize].len()), (1, 0), "known");
    r.now += Duration::from_secs(2);
    let out = r.send(CE2, &customer_frame(HOST_A, HOST_B));
    // (The core port also asks for its next hop's MAC again by now: count labelled frames.)
    let labelled = out[CORE as usize].iter().filter(|f| f[12..14] == [0x88, 0x47]).count();
    assert_eq!((out[CE1 as usize].len(), labelled), (1, 2), "aged out: flooded");
    assert_eq!(r.fdb(), vec![(HOST_B, port("ce2"))]);
}

#[test]
fn floods_beyond_the_rate_are_dropped_and_counted_while_known_unicast_passes() {
    let mut r = Run::new(fib(100, 2));
    for _ in 0..5 {
        r.send(CE1, &customer_frame(BROADCAST, HOST_A));
    }
    assert_eq!(r.events(Event::VplsFlooded), 2);
    assert_eq!(r.drops(DropReason::VplsFloodRate), 3);
    let out = r.send(CE2, &customer_frame(HOST_A, HOST_B));
    assert_eq!(out[CE1 as usize].len(), 1);
    // A second later the bucket holds two again.
    r.now += Duration::from_secs(1);
    for _ in 0..3 {
        r.send(CE1, &customer_frame(BROADCAST, HOST_A));
    }
    assert_eq!(r.events(Event::VplsFlooded), 4);
}

#[test]
fn an_attachment_circuit_going_down_withdraws_its_macs_and_leaves_floods() {
    let mut r = Run::new(fib(100, 0));
    r.send(CE1, &customer_frame(BROADCAST, HOST_A));
    r.send(CE2, &customer_frame(BROADCAST, HOST_B));
    r.dp.set_port_link(CE1, false);
    assert_eq!(r.fdb(), vec![(HOST_B, port("ce2"))]);
    assert_eq!(r.events(Event::VplsMacWithdrawn), 1);
    let out = r.send(CE2, &customer_frame(HOST_A, HOST_B));
    assert!(out[CE1 as usize].is_empty(), "down: not flooded to");
    assert_eq!(out[CORE as usize].len(), 2);
    r.dp.set_port_link(CE1, true);
    let out = r.send(CE2, &customer_frame(HOST_A, HOST_B));
    assert_eq!(out[CE1 as usize].len(), 1, "back up");
}

#[test]
fn a_pseudowire_going_down_withdraws_its_macs() {
    let mut r = Run::new(fib(100, 0));
    r.send(CORE, &from_core(1002, &customer_frame(BROADCAST, HOST_C)));
    r.send(CORE, &from_core(1003, &customer_frame(BROADCAST, HOST_D)));
    let mut f = fib(100, 0);
    f.pseudowires[0].up = false;
    f.set_label_route(1002, None).unwrap();
    r.dp.fib().store(f);
    assert_eq!(r.fdb(), vec![(HOST_D, pw("blue-pe3"))]);
    let to_c = customer_frame(HOST_C, HOST_A);
    let out = r.send(CE1, &to_c);
    assert_eq!(out[CORE as usize], vec![to_core(3003, 2003, &to_c)], "flooded to the pseudowire in force");
    assert_eq!(out[CE2 as usize].len(), 1);
}

#[test]
fn a_new_fib_keeps_the_macs_of_members_still_in_force() {
    let mut r = Run::new(fib(100, 0));
    r.send(CE1, &customer_frame(BROADCAST, HOST_A));
    r.send(CORE, &from_core(1002, &customer_frame(BROADCAST, HOST_C)));
    let before = Arc::as_ptr(&r.dp.fib().load_full());
    r.dp.fib().store(fib(100, 0));
    assert_ne!(before, Arc::as_ptr(&r.dp.fib().load_full()));
    assert_eq!(r.fdb(), vec![(HOST_A, port("ce1")), (HOST_C, pw("blue-pe2"))]);
}

#[test]
fn truncated_frames_from_an_attachment_are_counted() {
    let mut r = Run::new(fib(100, 0));
    let out = r.send(CE1, &[0xff; 10]);
    assert!(out.iter().all(Vec::is_empty));
    assert_eq!(r.drops(DropReason::TruncatedEthernet), 1);
}
