//! What the label-switched path looks like from outside: labels and TTLs on the core
//! links as tshark dissects them from captures (with and without penultimate-hop
//! popping), and every hop with its label in the kernel's `traceroute -e`. Needs root.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use vmpls_lab::capture::{Capture, tshark_fields};
use vmpls_lab::inject::interface_mac;
use vmpls_lab::ping::PingOptions;
use vmpls_lab::seed::SeedParams;

const PINGS: u32 = 3;

/// Fields read from each captured echo request or reply.
const FIELDS: [&str; 9] = [
    "eth.src",
    "eth.type",
    "mpls.label",
    "mpls.ttl",
    "mpls.bottom",
    "ip.ttl",
    "ipv6.hlim",
    "icmp.type",
    "icmpv6.type",
];

/// One captured echo frame.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Echo {
    src_mac: String,
    ethertype: u16,
    /// Label stack entries, top first: (label, ttl, bottom).
    labels: Vec<(u32, u8, bool)>,
    /// IPv4 TTL or IPv6 hop limit of the innermost IP header.
    ip_ttl: u8,
    v6: bool,
    request: bool,
}

fn mac_text(mac: [u8; 6]) -> String {
    mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

fn parse_list<T: std::str::FromStr>(s: &str) -> Vec<T>
where
    T::Err: std::fmt::Debug,
{
    s.split(',')
        .filter(|x| !x.is_empty())
        .map(|x| x.trim().parse().unwrap_or_else(|e| panic!("{x:?}: {e:?}")))
        .collect()
}

/// The echo requests and replies in `pcap`, dissected by tshark.
fn echoes(pcap: &Path) -> Vec<Echo> {
    let filter = "icmp.type == 8 || icmp.type == 0 || icmpv6.type == 128 || icmpv6.type == 129";
    let rows = tshark_fields(pcap, filter, &FIELDS, Duration::from_secs(60)).unwrap();
    rows.iter()
        .map(|r| {
            let labels: Vec<u32> = parse_list(&r[2]);
            let ttls: Vec<u8> = parse_list(&r[3]);
            let bottoms: Vec<String> = parse_list(&r[4]);
            assert_eq!(labels.len(), ttls.len(), "{r:?}");
            assert_eq!(labels.len(), bottoms.len(), "{r:?}");
            let v6 = !r[8].is_empty();
            // With an ICMP error quoting a packet, tshark lists both headers; the echo
            // frames here have one IP header each.
            let ttl_field = if v6 { &r[6] } else { &r[5] };
            let ip_ttls: Vec<u8> = parse_list(ttl_field);
            assert_eq!(ip_ttls.len(), 1, "{r:?}");
            let kind: Vec<u8> = parse_list(if v6 { &r[8] } else { &r[7] });
            Echo {
                src_mac: r[0].clone(),
                ethertype: u16::from_str_radix(r[1].trim_start_matches("0x"), 16)
                    .unwrap_or_else(|e| panic!("{r:?}: {e}")),
                labels: labels
                    .iter()
                    .zip(&ttls)
                    .zip(&bottoms)
                    .map(|((l, t), b)| (*l, *t, b == "1" || b == "True"))
                    .collect(),
                ip_ttl: ip_ttls[0],
                v6,
                request: matches!(kind[0], 8 | 128),
            }
        })
        .collect()
}

/// Pings ce1 -> ce2 over IPv4 and IPv6 with TTL / hop limit 64 while capturing on
/// p's two interfaces; returns the echoes seen on p-pe1 and on p-pe2.
fn capture_pings(lab: &Lab) -> (Vec<Echo>, Vec<Echo>) {
    let p = lab.ns("p");
    let west = Capture::start(&p, "p-pe1", &lab.work.path().join("p-pe1.pcap"), None).unwrap();
    let east = Capture::start(&p, "p-pe2", &lab.work.path().join("p-pe2.pcap"), None).unwrap();
    let opts = PingOptions { count: PINGS, ttl: Some(64), ..PingOptions::default() };
    for dst in [CE2_V4, CE2_V6] {
        let r = lab.ping("ce1", dst, &opts);
        assert_eq!(r.received, PINGS, "ping {dst}: {r:?}");
    }
    let west = echoes(&west.stop().unwrap());
    let east = echoes(&east.stop().unwrap());
    (west, east)
}

/// The frames of one kind (request or reply, IPv4 or IPv6), checked to be `PINGS`
/// identical ones, and that one.
fn the_one(frames: &[Echo], request: bool, v6: bool, link: &str) -> Echo {
    let of_kind: Vec<&Echo> = frames.iter().filter(|e| e.request == request && e.v6 == v6).collect();
    let what = format!(
        "{} {} on {link}",
        if v6 { "IPv6" } else { "IPv4" },
        if request { "requests" } else { "replies" }
    );
    assert_eq!(of_kind.len(), PINGS as usize, "{what}: {of_kind:#?}\nall frames: {frames:#?}");
    assert!(of_kind.iter().all(|e| *e == of_kind[0]), "{what} differ: {of_kind:#?}");
    of_kind[0].clone()
}

#[test]
fn labels_on_the_wire_match_the_config() {
    let lab = Lab::start("labels", SeedParams::default());
    let mac = |host: &str, ifname: &str| mac_text(interface_mac(&lab.ns(host), ifname).unwrap());
    let (pe1_p, p_pe1, p_pe2, pe2_p) =
        (mac("pe1", "pe1-p"), mac("p", "p-pe1"), mac("p", "p-pe2"), mac("pe2", "pe2-p"));
    let (west, east) = capture_pings(&lab);
    for v6 in [false, true] {
        // Uniform TTL model (RFC 3443): ce1 sends TTL 64; pe1 decrements it and copies
        // it into the label it pushes (63); p swaps and decrements (62). The way back
        // the same from ce2's 64.
        let checks = [
            (&west, true, &pe1_p, 1002, 63, "pe1 -> p"),
            (&east, true, &p_pe2, 2002, 62, "p -> pe2"),
            (&east, false, &pe2_p, 1001, 63, "pe2 -> p"),
            (&west, false, &p_pe1, 2001, 62, "p -> pe1"),
        ];
        for (frames, request, src, label, ttl, link) in checks {
            let e = the_one(frames, request, v6, link);
            assert_eq!(e.ethertype, 0x8847, "{link}: {e:?}");
            assert_eq!(&e.src_mac, src, "{link}: {e:?}");
            assert_eq!(
                e.labels,
                vec![(label, ttl, true)],
                "{link} ({}): label stack (label, TTL, bottom)",
                if v6 { "IPv6" } else { "IPv4" }
            );
        }
    }
    // Nothing but labelled frames carries the pings in the core.
    assert_eq!(west.len() + east.len(), 4 * 2 * PINGS as usize);
}

#[test]
fn labels_on_the_wire_with_penultimate_hop_popping() {
    let params = SeedParams { php: true, ..SeedParams::default() };
    let lab = Lab::start("php", params);
    let mac = |host: &str, ifname: &str| mac_text(interface_mac(&lab.ns(host), ifname).unwrap());
    let (pe1_p, p_pe1, p_pe2, pe2_p) =
        (mac("pe1", "pe1-p"), mac("p", "p-pe1"), mac("p", "p-pe2"), mac("pe2", "pe2-p"));
    let (west, east) = capture_pings(&lab);
    for v6 in [false, true] {
        let family = if v6 { "IPv6" } else { "IPv4" };
        let ethertype = if v6 { 0x86dd } else { 0x0800 };
        // Labelled toward p as before.
        let e = the_one(&west, true, v6, "pe1 -> p");
        assert_eq!((e.ethertype, &e.src_mac), (0x8847, &pe1_p), "{e:?}");
        assert_eq!(e.labels, vec![(1002, 63, true)], "pe1 -> p ({family})");
        let e = the_one(&east, false, v6, "pe2 -> p");
        assert_eq!((e.ethertype, &e.src_mac), (0x8847, &pe2_p), "{e:?}");
        assert_eq!(e.labels, vec![(1001, 63, true)], "pe2 -> p ({family})");
        // p pops (implicit null) and sends plain IP, with the label's TTL (62) copied
        // into the IP header (uniform model).
        for (frames, request, src, link) in
            [(&east, true, &p_pe2, "p -> pe2"), (&west, false, &p_pe1, "p -> pe1")]
        {
            let e = the_one(frames, request, v6, link);
            assert_eq!(&e.src_mac, src, "{link}: {e:?}");
            assert_eq!(e.ethertype, ethertype, "{link} ({family}): no MPLS: {e:?}");
            assert!(e.labels.is_empty(), "{link} ({family}): {e:?}");
            assert_eq!(e.ip_ttl, 62, "{link} ({family}): IP TTL: {e:?}");
        }
    }
}

#[test]
fn traceroute_shows_every_hop_with_labels() {
    let lab = Lab::start("traceroute", SeedParams::default());
    let s = |x: &str| Some(x.to_string());
    let hops = traceroute(&lab, false);
    assert_eq!(
        hops,
        vec![
            (1, s(PE1_V4), None),
            (2, s(P_V4), s("MPLS:L=1002,E=0,S=1,T=1")),
            (3, s(PE2_V4), s("MPLS:L=2002,E=0,S=1,T=1")),
            (4, s(CE2_V4), None),
        ]
    );
    let hops = traceroute(&lab, true);
    assert_eq!(
        hops,
        vec![
            (1, s(PE1_V6), None),
            (2, s(P_V6), s("MPLS:L=1002,E=0,S=1,T=1")),
            (3, s(PE2_V6), s("MPLS:L=2002,E=0,S=1,T=1")),
            (4, s(CE2_V6), None),
        ]
    );
}
