//! Malformed frames thrown at the routers while a content-checked TCP flow crosses the
//! label-switched path: each is counted under its own drop reason, and the flow
//! arrives intact. Needs root.
//!
//! The frames are written with an AF_PACKET socket onto pe1's end of the pe1 -- p link
//! (addressed to p's MAC), so p receives them as if pe1 had sent them; the ones that p
//! switches reach pe2. A few more go straight to pe2 from p's end of the p -- pe2 link.
//! The routers have the same interfaces open; their sockets ignore frames sent on the
//! interface, so only the peer router sees the injected ones.

mod common;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use common::*;
use vmpls_lab::inject::{ETHERTYPE_MPLS, ethernet, interface_mac, ipv4_udp, mpls_entry, send_frames};
use vmpls_lab::seed::SeedParams;
use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};

/// Copies of each malformed frame.
const COPIES: u64 = 5;

/// A UDP datagram ce1 -> ce2 (discard port), as the customer would send it.
fn customer_packet() -> Vec<u8> {
    ipv4_udp(Ipv4Addr::new(198, 18, 1, 2), Ipv4Addr::new(198, 18, 2, 2), 64, 40000, 9, &[0x5a; 64])
}

fn labelled(entries: &[[u8; 4]], payload: &[u8]) -> Vec<u8> {
    let mut v: Vec<u8> = entries.iter().flatten().copied().collect();
    v.extend_from_slice(payload);
    v
}

/// One kind of malformed frame: what it is, the MPLS payload after the Ethernet
/// header, and where it must be counted.
struct Case {
    name: &'static str,
    mpls: Vec<u8>,
    router: &'static str,
    drop: &'static str,
}

/// Frames for p (sent from pe1's side).
fn cases_for_p() -> Vec<Case> {
    let ip = customer_packet();
    let mut bad_ihl = ip.clone();
    // Header length 4 words (16 bytes): less than the minimum of 5; checksum redone
    // over the 20 bytes so that only the length is wrong.
    bad_ihl[0] = 0x44;
    bad_ihl[10..12].fill(0);
    let c = vmpls_wire::checksum::checksum(&bad_ihl[..20]);
    bad_ihl[10..12].copy_from_slice(&c.to_be_bytes());
    let mut bad_sum = ip.clone();
    bad_sum[10] ^= 0x5a;
    vec![
        Case {
            name: "frame ends inside the first label entry",
            mpls: mpls_entry(1002, 0, true, 64)[..2].to_vec(),
            router: "p",
            drop: "truncated_label_stack",
        },
        Case {
            name: "no bottom-of-stack entry within the frame",
            mpls: labelled(&[mpls_entry(1002, 0, false, 64), mpls_entry(2000, 0, false, 64)], &[]),
            router: "p",
            drop: "truncated_label_stack",
        },
        Case {
            name: "label TTL 0",
            mpls: labelled(&[mpls_entry(1002, 0, true, 0)], &ip),
            router: "p",
            drop: "label_ttl_expired",
        },
        Case {
            name: "label TTL 1",
            mpls: labelled(&[mpls_entry(1002, 0, true, 1)], &ip),
            router: "p",
            drop: "label_ttl_expired",
        },
        Case {
            name: "unknown label 4321",
            mpls: labelled(&[mpls_entry(4321, 0, true, 64)], &ip),
            router: "p",
            drop: "unknown_label",
        },
        Case {
            name: "reserved label 13 (GAL)",
            mpls: labelled(&[mpls_entry(13, 0, true, 64)], &ip),
            router: "p",
            drop: "reserved_label",
        },
        Case {
            name: "IPv4 header length 16 under label 1002 (pe2 pops to IP)",
            mpls: labelled(&[mpls_entry(1002, 0, true, 64)], &bad_ihl),
            router: "pe2",
            drop: "bad_ipv4_header",
        },
        Case {
            name: "IPv4 bad header checksum under label 1002 (pe2 pops to IP)",
            mpls: labelled(&[mpls_entry(1002, 0, true, 64)], &bad_sum),
            router: "pe2",
            drop: "bad_ipv4_checksum",
        },
    ]
}

/// Frames for pe2 (sent from p's side).
fn cases_for_pe2() -> Vec<Case> {
    let mut bad_sum = customer_packet();
    bad_sum[11] ^= 0x01;
    vec![
        Case {
            name: "label 1002, unknown at pe2",
            mpls: labelled(&[mpls_entry(1002, 0, true, 64)], &customer_packet()),
            router: "pe2",
            drop: "unknown_label",
        },
        Case {
            name: "frame ends inside the second label entry",
            mpls: labelled(&[mpls_entry(2002, 0, false, 64)], &[0x00, 0x3e, 0xa1]),
            router: "pe2",
            drop: "truncated_label_stack",
        },
        Case {
            name: "IPv4 bad header checksum under label 2002",
            mpls: labelled(&[mpls_entry(2002, 0, true, 64)], &bad_sum),
            router: "pe2",
            drop: "bad_ipv4_checksum",
        },
    ]
}

/// Writes every case `COPIES` times onto `ifname` of `host`, addressed to the MAC of
/// `peer_if` on `peer`, interleaved and paced so that they spread over the flow.
fn inject(lab: &Lab, host: &str, ifname: &str, peer: &str, peer_if: &str, cases: &[Case]) {
    let dst = interface_mac(&lab.ns(peer), peer_if).unwrap();
    let src = interface_mac(&lab.ns(host), ifname).unwrap();
    for _ in 0..COPIES {
        for c in cases {
            let frame = ethernet(dst, src, ETHERTYPE_MPLS, &c.mpls);
            send_frames(&lab.ns(host), ifname, &[frame]).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[test]
fn malformed_frames_are_counted_while_tcp_flows() {
    let mut lab = Lab::start("malformed", SeedParams::default());
    let before = lab.fresh_stats();

    // The flow runs on its own threads for 4 s; the frames go in meanwhile.
    let opts = FlowOptions {
        limit: Limit::Duration(Duration::from_secs(4)),
        io_timeout: Duration::from_secs(10),
        ..FlowOptions::default()
    };
    let (ce1, ce2) = (lab.ns("ce1"), lab.ns("ce2"));
    let flow = std::thread::spawn(move || run_flow(&ce1, &ce2, ip(CE2_V4), &opts, &mut |_| {}));
    std::thread::sleep(Duration::from_millis(500));
    let (to_p, to_pe2) = (cases_for_p(), cases_for_pe2());
    inject(&lab, "pe1", "pe1-p", "p", "p-pe1", &to_p);
    inject(&lab, "p", "p-pe2", "pe2", "pe2-p", &to_pe2);
    let injection_done = flow.is_finished();
    let flow = flow.join().unwrap();
    let flow = match flow {
        Ok(f) => f,
        Err(e) => panic!("TCP flow: {e:#}\n{}", lab.logs()),
    };
    assert!(!injection_done, "the flow ended before the injection did: {flow:?}");
    assert!(flow.content_ok, "{flow:?}");
    assert!(flow.bytes_received > 0, "{flow:?}");
    eprintln!(
        "TCP ce1 -> ce2 during the injection: {} bytes, {:.2} Gbit/s, {} retransmits",
        flow.bytes_received, flow.gbps, flow.retransmits
    );

    let after = lab.stop_routers();
    let delta: BTreeMap<&str, _> = ROUTERS.iter().map(|r| (*r, after[*r].since(&before[*r]))).collect();
    // Expected count per (router, reason).
    let mut expected: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let mut names: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    for c in to_p.iter().chain(&to_pe2) {
        *expected.entry((c.router, c.drop)).or_default() += COPIES;
        names.entry((c.router, c.drop)).or_default().push(c.name);
    }
    for ((router, reason), n) in &expected {
        let got = delta[router].drop_count(reason);
        assert_eq!(
            got,
            *n,
            "{router} {reason}: counted {got}, injected {n} ({:?}); counters {:#?}",
            names[&(*router, *reason)],
            delta[router]
        );
    }
    // Label TTL 1 (and 0) at p: an ICMP time exceeded, sent on along the LSP.
    let p = &delta["p"];
    assert!(
        p.event("icmp_time_exceeded_sent") >= COPIES,
        "p sent no ICMP time exceeded for TTL-1 labels: {p:#?}"
    );
    assert!(p.event("icmp_sent_along_lsp") >= COPIES, "{p:#?}");
    // And nothing else was dropped (buffer exhaustion under load aside: see
    // LOAD_DROPS).
    let mut reasons: Vec<&str> = expected.keys().map(|(_, d)| *d).collect();
    reasons.extend_from_slice(LOAD_DROPS);
    assert_no_unexpected_drops(&after, &reasons, "malformed frames");
    for ((router, reason), _) in expected.iter() {
        // A reason expected on one router must not show up on the others.
        for other in ROUTERS.iter().filter(|r| *r != router) {
            if expected.contains_key(&(*other, *reason)) {
                continue;
            }
            assert_eq!(delta[other].drop_count(reason), 0, "{other} counted {reason}: {:#?}", delta[other]);
        }
    }
}
