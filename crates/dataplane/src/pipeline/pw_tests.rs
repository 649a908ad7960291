//! Pseudowire encapsulation and decapsulation on bytes: a PE with an attachment circuit
//! (port 0, "ce") and a core port (port 1), one pseudowire to 198.18.255.3 reached over
//! a static LSP (transport label 3001).

use std::net::IpAddr;
use std::time::Instant;

use vmpls_fib::{DEFAULT_VRF, Nexthop, NexthopGroup, PrefixRoute, Pseudowire, RouteTarget, TtlModel};
use vmpls_wire::{mpls, virtio_net};

use super::*;

const CE_MAC: [u8; 6] = [2, 0, 0, 0, 0x50, 0x01];
const CORE_MAC: [u8; 6] = [2, 0, 0, 0, 0x60, 0x01];
const P_MAC: [u8; 6] = [2, 0, 0, 0, 0x60, 0x02];
const HOST_A: [u8; 6] = [0x5a, 0x11, 0x22, 0x33, 0x44, 0x55];
const HOST_B: [u8; 6] = [0x5a, 0x66, 0x77, 0x88, 0x99, 0xaa];

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pe(control_word: bool, core_mtu: u32, caps: PortCaps) -> Dataplane {
    pe_with_core_labels(control_word, core_mtu, caps, vmpls_fib::LabelAcceptance::Always)
}

/// As [`pe`], the core port accepting labels as `core` says.
fn pe_with_core_labels(
    control_word: bool,
    core_mtu: u32,
    caps: PortCaps,
    core: vmpls_fib::LabelAcceptance,
) -> Dataplane {
    let mut b = Fib::builder();
    b.add_port("ce", DEFAULT_VRF, &[]).unwrap();
    let core_port = b.add_port("core", DEFAULT_VRF, &[(ip("198.18.60.1"), 24)]).unwrap();
    b.set_port_label_acceptance(core_port, core).unwrap();
    let nh = Nexthop::new(1, Some(ip("198.18.60.2")), vec![3001]);
    let to_peer = PrefixRoute::new(RouteTarget::Forward(NexthopGroup::new(vec![nh]).unwrap()));
    b.add_prefix_route(DEFAULT_VRF, ip("198.18.255.3"), 32, to_peer).unwrap();
    let mut fib = b.build().unwrap();
    fib.pseudowires.push(Pseudowire {
        name: "mpw0".into(),
        attachment: Some(0),
        local_label: 1000,
        remote_label: 2000,
        peer: ip("198.18.255.3"),
        control_word,
        up: true,
    });
    fib.port_pw[0] = Some(0);
    fib.set_label_route(
        1000,
        Some(vmpls_fib::LabelRoute::new(vmpls_fib::LabelAction::Pseudowire { pw: 0 }, TtlModel::Pipe)),
    )
    .unwrap();
    let ports = vec![
        PortInfo { id: 0, name: "ce".into(), mac: CE_MAC, mtu: 1500, caps },
        PortInfo { id: 1, name: "core".into(), mac: CORE_MAC, mtu: core_mtu, caps },
    ];
    let mut dp = Dataplane::new(FibHandle::new(fib), ports, DataplaneConfig::default());
    dp.neighbors.learn(Instant::now(), 1, ip("198.18.60.2"), P_MAC, true);
    dp
}

/// A customer's frame from HOST_A to HOST_B: `vlan` tagged or not, IPv4 TCP with
/// `payload` bytes.
fn customer_frame(vlan: Option<u16>, payload: usize) -> Vec<u8> {
    let mut f = HOST_B.to_vec();
    f.extend_from_slice(&HOST_A);
    if let Some(v) = vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (40 + payload) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 198, 18, 50, 1, 198, 18, 50, 2];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let c = !vmpls_wire::checksum::fold(vmpls_wire::checksum::sum(&ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    // TCP: ports 40000 -> 5001, seq 1, ack 1, data offset 5, ACK|PSH, window 512
    f.extend_from_slice(&[0x9c, 0x40, 0x13, 0x89, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x18, 0x02, 0, 0, 0, 0, 0]);
    f.extend((0..payload).map(|i| (i % 251) as u8));
    f
}

fn run(dp: &mut Dataplane, pkt: Packet) -> Output {
    let mut pool = PacketPool::new(64);
    let mut out = Output::new(2);
    dp.process(Instant::now(), pkt, &mut pool, &mut out);
    out
}

fn labels_of(frame: &[u8]) -> Vec<(u32, bool, u8)> {
    let mut v = Vec::new();
    for e in frame[ETH..].chunks_exact(4) {
        let r = mpls::Repr::parse(&mpls::Entry::new_checked(e).unwrap()).unwrap();
        v.push((r.label, r.bottom, r.ttl));
        if r.bottom {
            break;
        }
    }
    v
}

#[test]
fn encap_pushes_control_word_pw_and_transport_labels() {
    for vlan in [None, Some(100)] {
        let mut dp = pe(true, 1500, PortCaps::default());
        let inner = customer_frame(vlan, 100);
        let out = run(&mut dp, Packet::from_frame(0, &inner));
        assert_eq!(out.tx[1].len(), 1, "{vlan:?}");
        let f = out.tx[1][0].frame();
        assert_eq!(&f[..6], &P_MAC);
        assert_eq!(&f[6..12], &CORE_MAC);
        assert_eq!(&f[12..14], &[0x88, 0x47]);
        assert_eq!(labels_of(f), vec![(3001, false, 255), (2000, true, 255)]);
        assert_eq!(&f[22..26], &[0, 0, 0, 0], "control word");
        assert_eq!(&f[26..], &inner[..], "the customer's frame, tags and MACs as they were");
        assert_eq!(dp.counters().events(Event::PwEncap), 1);
        assert_eq!(dp.counters().pw_tx[0], [1, inner.len() as u64]);
    }
}

#[test]
fn encap_without_control_word() {
    let mut dp = pe(false, 1500, PortCaps::default());
    let inner = customer_frame(None, 10);
    let out = run(&mut dp, Packet::from_frame(0, &inner));
    let f = out.tx[1][0].frame();
    assert_eq!(labels_of(f), vec![(3001, false, 255), (2000, true, 255)]);
    assert_eq!(&f[22..], &inner[..]);
}

#[test]
fn any_frame_from_the_attachment_rides_the_pw() {
    // Labelled, ARP, broadcast, to the router's own MAC: all carried, none switched.
    let mut dp = pe(true, 1500, PortCaps::default());
    let mut labelled = customer_frame(None, 10);
    labelled[12..14].copy_from_slice(&[0x88, 0x47]);
    let mut to_us = customer_frame(None, 10);
    to_us[..6].copy_from_slice(&CE_MAC);
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&HOST_A);
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0; 28]);
    for f in [labelled, to_us, arp] {
        let out = run(&mut dp, Packet::from_frame(0, &f));
        assert_eq!(&out.tx[1][0].frame()[26..], &f[..]);
    }
    assert_eq!(dp.counters().events(Event::PwEncap), 3);
    assert_eq!(dp.counters().total_drops(), 0);
}

#[test]
fn decap_sends_the_inner_frame_out_unchanged() {
    let mut dp = pe(true, 1500, PortCaps::default());
    let inner = customer_frame(Some(7), 200);
    let mut f = CORE_MAC.to_vec();
    f.extend_from_slice(&P_MAC);
    f.extend_from_slice(&[0x88, 0x47, 0x00, 0x3e, 0x81, 0x3f, 0, 0, 0, 0]); // 1000, S=1, TTL 63
    f.extend_from_slice(&inner);
    let out = run(&mut dp, Packet::from_frame(1, &f));
    assert_eq!(out.tx[0].len(), 1);
    assert_eq!(out.tx[0][0].frame(), &inner[..]);
    assert_eq!(dp.counters().events(Event::PwDecap), 1);
    assert_eq!(dp.counters().label_list().collect::<Vec<_>>(), vec![(1000, 1, f.len() as u64)]);
}

#[test]
fn a_pseudowire_label_is_taken_only_from_a_port_that_takes_labels() {
    let mut rest = vec![0, 0, 0, 0];
    rest.extend_from_slice(&customer_frame(None, 10));
    let frame = core_frame(&[(1000, true)], &rest);
    // `mpls = false` on the port: the pseudowire's label is no way into the circuit.
    let mut dp = pe_with_core_labels(true, 1500, PortCaps::default(), vmpls_fib::LabelAcceptance::Never);
    assert_eq!(run(&mut dp, Packet::from_frame(1, &frame)).len(), 0);
    assert_eq!(dp.counters().drops(DropReason::MplsNotAccepted), 1);
    assert_eq!(dp.counters().events(Event::PwDecap), 0);
    // FRR mode: the core takes labels because the transport to the far PE leaves by it.
    let mut dp =
        pe_with_core_labels(true, 1500, PortCaps::default(), vmpls_fib::LabelAcceptance::WhileLabelsLeave);
    assert_eq!(run(&mut dp, Packet::from_frame(1, &frame)).tx[0].len(), 1);
    assert_eq!(dp.counters().events(Event::PwDecap), 1);
}

fn core_frame(entries: &[(u32, bool)], rest: &[u8]) -> Vec<u8> {
    let mut f = CORE_MAC.to_vec();
    f.extend_from_slice(&P_MAC);
    f.extend_from_slice(&[0x88, 0x47]);
    for &(label, bottom) in entries {
        f.extend_from_slice(&mpls::Repr { label, tc: 0, bottom, ttl: 255 }.to_u32().to_be_bytes());
    }
    f.extend_from_slice(rest);
    f
}

#[test]
fn bad_control_word_s0_and_truncated_are_counted_drops() {
    let mut dp = pe(true, 1500, PortCaps::default());
    let inner = customer_frame(None, 10);
    // An IPv4 header where the control word should be.
    let out = run(&mut dp, Packet::from_frame(1, &core_frame(&[(1000, true)], &inner[14..])));
    assert_eq!(out.len(), 0);
    assert_eq!(dp.counters().drops(DropReason::PwBadControlWord), 1);
    // The PW label with a label under it.
    let mut rest = vec![0, 0, 0, 0];
    rest.extend_from_slice(&inner);
    let out = run(&mut dp, Packet::from_frame(1, &core_frame(&[(1000, false), (16, true)], &rest)));
    assert_eq!(out.len(), 0);
    assert_eq!(dp.counters().drops(DropReason::PwLabelNotBottom), 1);
    // Control word cut short; control word and half an Ethernet header.
    for rest in [&[0u8, 0][..], &[0, 0, 0, 0, 1, 2, 3, 4, 5][..]] {
        let out = run(&mut dp, Packet::from_frame(1, &core_frame(&[(1000, true)], rest)));
        assert_eq!(out.len(), 0);
    }
    assert_eq!(dp.counters().drops(DropReason::PwTruncated), 2);
}

#[test]
fn too_big_for_the_core_is_counted() {
    let mut dp = pe(true, 1500, PortCaps::default());
    // 1500 bytes of IP fit the AC, not the core with 14 + 12 bytes more.
    let inner = customer_frame(None, 1460);
    let out = run(&mut dp, Packet::from_frame(0, &inner));
    assert_eq!(out.len(), 0);
    assert_eq!(dp.counters().drops(DropReason::PwTooBig), 1);
    // 1474 of IP: the largest that fits (1474 + 14 + 12 = 1500).
    let out = run(&mut dp, Packet::from_frame(0, &customer_frame(None, 1434)));
    assert_eq!(out.tx[1].len(), 1);
}

fn super_frame(vlan: Option<u16>) -> Packet {
    let f = customer_frame(vlan, 8000);
    let l3 = if vlan.is_some() { 18 } else { 14 };
    let mut pkt = Packet::from_frame(0, &f);
    pkt.offload = virtio_net::Repr {
        needs_csum: true,
        gso_type: virtio_net::GsoType::TcpV4,
        hdr_len: (l3 + 40) as u16,
        gso_size: 1448,
        csum_start: (l3 + 20) as u16,
        csum_offset: 16,
        ..virtio_net::Repr::default()
    };
    pkt
}

#[test]
fn super_frame_crosses_a_large_core_link_whole_and_comes_back_with_its_offsets() {
    let caps = PortCaps { tso4: true, tso6: true, csum: true, ..PortCaps::default() };
    let mut ingress = pe(true, 65535, caps);
    let pkt = super_frame(None);
    let (offload, inner) = (pkt.offload, pkt.frame().to_vec());
    let out = run(&mut ingress, pkt);
    assert_eq!(out.tx[1].len(), 1);
    let on_core = &out.tx[1][0];
    // A jumbo frame (no GSO marking: AF_PACKET refuses labelled GSO), checksum offsets
    // moved by the 26 bytes in front.
    assert!(!on_core.offload.is_gso());
    assert_eq!(on_core.offload.csum_start, offload.csum_start + 26);
    assert_eq!(&on_core.frame()[26..], &inner[..]);
    // At the far PE: the same bytes in, the super-frame out of the AC with GSO metadata
    // for 1500-byte segments.
    let mut egress = pe(true, 65535, caps);
    // Its local label is the ingress's remote one.
    let mut fib = (*egress.fib().load_full()).clone();
    let pw_route = fib.labels.get(1000).cloned();
    fib.set_label_route(2000, pw_route).unwrap();
    egress.fib().store(fib);
    let mut arrived = Packet::from_frame(1, on_core.frame());
    arrived.offload = on_core.offload;
    // The P router popped the transport label (PHP).
    let mut f = CORE_MAC.to_vec();
    f.extend_from_slice(&P_MAC);
    f.extend_from_slice(&on_core.frame()[12..14]);
    f.extend_from_slice(&on_core.frame()[18..]);
    arrived.set_frame(&f);
    arrived.offload.shift(-4);
    let out = run(&mut egress, arrived);
    assert_eq!(out.tx[0].len(), 1, "{:?}", egress.counters().drop_list().collect::<Vec<_>>());
    let back = &out.tx[0][0];
    assert_eq!(back.frame(), &inner[..]);
    assert!(back.offload.is_gso());
    assert_eq!(back.offload.csum_start, offload.csum_start);
    assert_eq!(back.offload.gso_size, 1460);
}

#[test]
fn super_frame_too_big_for_the_core_is_cut_first() {
    let caps = PortCaps { tso4: true, csum: true, ..PortCaps::default() };
    let mut dp = pe(true, 1500, caps);
    let out = run(&mut dp, super_frame(Some(9)));
    // 8000 bytes of payload in segments of 1500 - 12 (labels, control word) - 18 (the
    // customer's tagged Ethernet header) - 40 = 1430 bytes.
    assert_eq!(out.tx[1].len(), 6, "{:?}", dp.counters().drop_list().collect::<Vec<_>>());
    for seg in &out.tx[1] {
        assert!(seg.len() - ETH <= 1500);
        assert_eq!(labels_of(seg.frame()), vec![(3001, false, 255), (2000, true, 255)]);
        assert_eq!(&seg.frame()[38..40], &[0x81, 0x00], "tag kept");
    }
    assert_eq!(dp.counters().total_drops(), 0);
}

#[test]
fn no_route_to_peer_is_counted() {
    let mut dp = pe(true, 1500, PortCaps::default());
    let mut fib = (*dp.fib().load_full()).clone();
    fib.vrfs[0].v4.remove("198.18.255.3".parse().unwrap(), 32);
    dp.fib().store(fib);
    let out = run(&mut dp, Packet::from_frame(0, &customer_frame(None, 10)));
    assert_eq!(out.len(), 0);
    assert_eq!(dp.counters().drops(DropReason::PwNoRoute), 1);
}
