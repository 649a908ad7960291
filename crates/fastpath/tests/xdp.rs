//! Label switching in the driver (`fp_xdp`), run by the kernel on single frames
//! (`FastPath::run_xdp`, BPF_PROG_TEST_RUN) as received on a veth of a test namespace:
//! exactly the frames whose bottom label pops into the port's own VRF lose it, with the
//! IP TTL the pop sets (uniform: the lower of the two; pipe: the IP one) and a valid IPv4
//! checksum; swaps toward a port with the program are rewritten and redirected; everything
//! else passes unchanged. Where it is attached for real (virtio-net NICs inside guests)
//! `guest_vm_routers` checks it end to end. Needs root.

mod common;

use common::{End, Netns, eth, fold, ipv4_udp, lse, sum16, veth};
use vmpls_fastpath::FastCounters;
use vmpls_fastpath::{Adjacency, Delivery, FastPath, FastPort, FastTables, LabelEntry};

const CORE: [u8; 6] = [0x02, 0xfc, 0, 0, 0, 0x01];
const CUSTOMER: [u8; 6] = [0x02, 0xfc, 0, 0, 0, 0x02];
const PEER: [u8; 6] = [0x02, 0xfc, 0, 0, 0, 0x99];
const XDP_PASS: u32 = 2;
const XDP_REDIRECT: u32 = 4;

const UNIFORM: u32 = 2002;
const PIPE: u32 = 2003;
const OTHER_VRF: u32 = 2004;
const SWAP: u32 = 3000;

fn tables(core: u32, customer: u32) -> FastTables {
    let mut t = FastTables::default();
    let port =
        |mac, accepts_mpls| FastPort { vrf: 0, mac, accepts_mpls, netns: 0, delivery: Delivery::VethPeer };
    t.ports.insert(core, port(CORE, true));
    t.ports.insert(customer, port(CUSTOMER, false));
    t.labels.insert(UNIFORM, LabelEntry::PopIp { vrf: 0, uniform: true });
    t.labels.insert(PIPE, LabelEntry::PopIp { vrf: 0, uniform: false });
    t.labels.insert(OTHER_VRF, LabelEntry::PopIp { vrf: 1, uniform: true });
    let adj = Adjacency { ifindex: core, mtu: 1500, dst_mac: PEER, src_mac: CORE };
    t.labels.insert(SWAP, LabelEntry::Swap { out_label: 3001, adj });
    t
}

/// A frame to `dst_mac` with `labels` (label, bottom, TTL) over `ip`.
fn labelled(dst_mac: [u8; 6], labels: &[(u32, bool, u8)], ip: &[u8]) -> Vec<u8> {
    let mut payload: Vec<u8> = labels.iter().flat_map(|&(l, bos, ttl)| lse(l, 0, bos, ttl)).collect();
    payload.extend_from_slice(ip);
    eth(dst_mac, PEER, 0x8847, &payload)
}

/// An IPv6/UDP packet 2001:db8::1 -> `dst` with hop limit `hop`.
fn ipv6_udp(dst: [u8; 16], hop: u8) -> Vec<u8> {
    let mut p = vec![0u8; 40 + 8 + 16];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&24u16.to_be_bytes());
    p[6] = 17;
    p[7] = hop;
    p[8..24].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    p[24..40].copy_from_slice(&dst);
    p
}

/// The core port p0 (its peer p1 has PEER's MAC) and the customer port c0 in `ns`: their
/// ifindexes.
fn ports(ns: &Netns) -> (u32, u32) {
    veth(End { ns, ifname: "p0", mac: Some(CORE) }, End { ns, ifname: "p1", mac: Some(PEER) }, 1500);
    veth(End { ns, ifname: "c0", mac: Some(CUSTOMER) }, End { ns, ifname: "c1", mac: None }, 1500);
    (ns.ifindex("p0"), ns.ifindex("c0"))
}

/// The programs on both ports with [`tables`], from a thread in their namespace.
fn loaded(core: u32, customer: u32) -> FastPath {
    let mut fp = FastPath::load().expect("load");
    fp.attach("p0").unwrap();
    fp.attach("c0").unwrap();
    fp.apply(&tables(core, customer)).unwrap();
    fp
}

const DST: [u8; 4] = [198, 18, 2, 2];
const DST6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

#[test]
fn the_pop_before_gro_takes_exactly_the_labels_that_pop_into_the_ports_vrf() {
    let ns = Netns::new("xdpop");
    let (core, customer) = ports(&ns);
    ns.run(|| {
        let mut fp = loaded(core, customer);
        // A veth: the program is never attached there by the router (see `xdp_switching`).
        assert_eq!(fp.xdp_switching("p0"), Ok(false));

        let mut popped = |frame: &[u8]| -> Vec<u8> {
            let (verdict, out) = fp.run_xdp(frame, core, &[]).unwrap();
            assert_eq!(verdict, XDP_PASS);
            out
        };
        let ip = |ttl| ipv4_udp(DST, ttl, 32);
        // Uniform: the IP TTL drops to the label's (the forwarding that follows decrements
        // it once more, as after any pop), with the checksum patched; the addresses stay.
        let out = popped(&labelled(CORE, &[(UNIFORM, true, 10)], &ip(64)));
        assert_eq!(out, eth(CORE, PEER, 0x0800, &ip(10)));
        assert_eq!(fold(sum16(&out[14..34])), 0xffff, "a valid IPv4 header checksum");
        // ... and stays when it is the lower one; pipe: the IP TTL as it is.
        assert_eq!(
            popped(&labelled(CORE, &[(UNIFORM, true, 64)], &ip(10))),
            eth(CORE, PEER, 0x0800, &ip(10))
        );
        assert_eq!(popped(&labelled(CORE, &[(PIPE, true, 5)], &ip(64))), eth(CORE, PEER, 0x0800, &ip(64)));
        // IPv6: the hop limit.
        let out = popped(&labelled(CORE, &[(UNIFORM, true, 7)], &ipv6_udp(DST6, 64)));
        assert_eq!(out, eth(CORE, PEER, 0x86dd, &ipv6_udp(DST6, 7)));

        // Everything else passes as it came.
        let unchanged = [
            ("label TTL expires here", labelled(CORE, &[(UNIFORM, true, 1)], &ip(64))),
            ("IP TTL expires here", labelled(CORE, &[(UNIFORM, true, 64)], &ip(1))),
            ("uniform TTL expires here", labelled(CORE, &[(UNIFORM, true, 2)], &ip(1))),
            ("not the bottom label", labelled(CORE, &[(UNIFORM, false, 64), (UNIFORM, true, 64)], &ip(64))),
            ("another router's MAC", labelled(PEER, &[(UNIFORM, true, 64)], &ip(64))),
            ("a label that pops into another VRF", labelled(CORE, &[(OTHER_VRF, true, 64)], &ip(64))),
            ("a swap toward a port without the program", labelled(CORE, &[(SWAP, true, 64)], &ip(64))),
            ("an unknown label", labelled(CORE, &[(5555, true, 64)], &ip(64))),
            ("multicast", labelled(CORE, &[(UNIFORM, true, 64)], &ipv4_udp([224, 0, 0, 5], 64, 32))),
            ("IPv6 link-local", {
                let mut a = DST6;
                a[..2].copy_from_slice(&[0xfe, 0x80]);
                labelled(CORE, &[(UNIFORM, true, 64)], &ipv6_udp(a, 64))
            }),
            ("not IP under the label", labelled(CORE, &[(UNIFORM, true, 64)], &[0x10; 40])),
            ("unlabelled", eth(CORE, PEER, 0x0800, &ip(64))),
            ("too short for an IPv4 header", labelled(CORE, &[(UNIFORM, true, 64)], &ip(64)[..10])),
            (
                "too short for an IPv6 header",
                labelled(CORE, &[(UNIFORM, true, 64)], &ipv6_udp(DST6, 64)[..30]),
            ),
        ];
        for (what, frame) in &unchanged {
            let (verdict, out) = fp.run_xdp(frame, core, &[]).unwrap();
            assert_eq!((verdict, &out), (XDP_PASS, frame), "{what}");
        }
        // A customer's port switches no labels: its frames pass too.
        let frame = labelled(CUSTOMER, &[(UNIFORM, true, 64)], &ip(64));
        assert_eq!(fp.run_xdp(&frame, customer, &[]).unwrap(), (XDP_PASS, frame));

        let c = fp.counters().unwrap();
        assert_eq!(c.xdp_pop, 4, "{c:?}");
        let labels = fp.label_stats().unwrap();
        assert_eq!(labels.get(&UNIFORM).map(|s| s.0), Some(3), "{labels:?}");
        assert_eq!(labels.get(&PIPE).map(|s| s.0), Some(1), "{labels:?}");
    });
}

#[test]
fn swaps_in_the_driver_go_only_to_ports_with_the_program() {
    let ns = Netns::new("xdpswap");
    let (core, customer) = ports(&ns);
    ns.run(|| {
        let mut fp = loaded(core, customer);
        let ip = ipv4_udp(DST, 64, 32);
        let stack = |entries: &[[u8; 4]]| -> Vec<u8> {
            let mut payload: Vec<u8> = entries.concat();
            payload.extend_from_slice(&ip);
            payload
        };
        // The top label swapped (traffic class kept, TTL - 1), the next hop's addresses,
        // sent on from the driver; a label under it untouched.
        let frame = eth(CORE, PEER, 0x8847, &stack(&[lse(SWAP, 5, true, 64)]));
        let swapped = eth(PEER, CORE, 0x8847, &stack(&[lse(3001, 5, true, 63)]));
        assert_eq!(fp.run_xdp(&frame, core, &[core]).unwrap(), (XDP_REDIRECT, swapped));
        let frame = eth(CORE, PEER, 0x8847, &stack(&[lse(SWAP, 0, false, 9), lse(16, 0, true, 64)]));
        let swapped = eth(PEER, CORE, 0x8847, &stack(&[lse(3001, 0, false, 8), lse(16, 0, true, 64)]));
        assert_eq!(fp.run_xdp(&frame, core, &[core]).unwrap(), (XDP_REDIRECT, swapped));

        let unchanged = [
            (
                "the out port has no program",
                eth(CORE, PEER, 0x8847, &stack(&[lse(SWAP, 0, true, 64)])),
                vec![],
            ),
            ("TTL expires", eth(CORE, PEER, 0x8847, &stack(&[lse(SWAP, 0, true, 1)])), vec![core]),
            (
                "larger than the out port's MTU",
                {
                    let mut payload = lse(SWAP, 0, true, 64).to_vec();
                    payload.extend_from_slice(&ipv4_udp(DST, 64, 1500 - 28));
                    eth(CORE, PEER, 0x8847, &payload)
                },
                vec![core],
            ),
            (
                "a stack without a bottom",
                eth(CORE, PEER, 0x8847, &[lse(SWAP, 0, false, 64); 12].concat()),
                vec![core],
            ),
            ("a customer's port", eth(CUSTOMER, PEER, 0x8847, &stack(&[lse(SWAP, 0, true, 64)])), vec![core]),
        ];
        for (what, frame, with) in &unchanged {
            let ingress = if frame[..6] == CUSTOMER { customer } else { core };
            let (verdict, out) = fp.run_xdp(frame, ingress, with).unwrap();
            assert_eq!((verdict, &out), (XDP_PASS, frame), "{what}");
        }
        let c: FastCounters = fp.counters().unwrap();
        assert_eq!((c.xdp_swap, c.xdp_pop, c.swap), (2, 0, 0), "{c:?}");
        assert_eq!(fp.label_stats().unwrap().get(&SWAP).map(|s| s.0), Some(2));
        let ports = fp.port_stats().unwrap();
        let p0 = ports.get(&core).copied().unwrap_or_default();
        assert_eq!((p0.rx_frames, p0.tx_frames), (2, 2), "{ports:?}");
    });
}
