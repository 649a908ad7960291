//! Traffic over the seed lab's label-switched path, end to end through three `vmpls run`
//! processes: ping and content-checked TCP both ways over IPv4 and IPv6, with the hosts'
//! offloads on and off; and a clean stop on SIGTERM. Needs root.

mod common;

use std::time::{Duration, Instant};

use common::*;
use vmpls_lab::netns;
use vmpls_lab::ping::PingOptions;
use vmpls_lab::seed::SeedParams;

/// Bytes of each TCP transfer.
const TRANSFER: u64 = 100 * 1024 * 1024;

fn pings_and_transfers(lab: &mut Lab, phase: &str) {
    let opts = PingOptions { count: 5, interval: Duration::from_millis(20), ..PingOptions::default() };
    for (from, to) in [("ce1", CE2_V4), ("ce1", CE2_V6), ("ce2", CE1_V4), ("ce2", CE1_V6)] {
        let r = lab.ping(from, to, &opts);
        assert_eq!(r.received, 5, "{phase}: ping {from} -> {to}: {r:?}");
        assert!(r.replies.iter().all(|p| p.from == ip(to)), "{r:?}");
        // A big echo too: 4000 bytes are fragmented by the host, reassembled by the
        // other host; every fragment crosses the LSP.
        let big = PingOptions { size: 4000, ..opts.clone() };
        let r = lab.ping(from, to, &big);
        assert_eq!(r.received, 5, "{phase}: 4000-byte ping {from} -> {to}: {r:?}");
    }
    for (from, to, addr) in
        [("ce1", "ce2", CE2_V4), ("ce1", "ce2", CE2_V6), ("ce2", "ce1", CE1_V4), ("ce2", "ce1", CE1_V6)]
    {
        lab.flow(from, to, addr, TRANSFER);
        lab.assert_routers_running();
    }
}

fn check_counters(lab: &mut Lab, phase: &str) {
    let stats = lab.stop_routers();
    // No frame lost to a malformed header or checksum, a missing route or label, the
    // MTU, segmentation or neighbour resolution. Buffer exhaustion under load is the
    // subject of `sustained_tcp_flow_loses_nothing_in_the_routers`.
    assert_no_unexpected_drops(&stats, LOAD_DROPS, phase);
    // Each router did its part of the LSP, in both directions. Two transfers of 100 MiB
    // each way are at least 2 * 100 MiB / 64 KiB frames (a super-frame carries at most
    // 64 KiB), whether the routers pass super-frames whole or segment them.
    let min_frames = 2 * TRANSFER / 65536;
    let (pe1, p, pe2) = (&stats["pe1"], &stats["p"], &stats["pe2"]);
    assert!(pe1.event("label_push") >= min_frames, "{phase}: pe1 {pe1:?}");
    assert!(pe1.event("label_pop") >= min_frames, "{phase}: pe1 {pe1:?}");
    assert!(p.event("label_swap") >= 2 * min_frames, "{phase}: p {p:?}");
    assert_eq!(p.event("label_push"), 0, "{phase}: p {p:?}");
    assert_eq!(p.event("label_pop"), 0, "{phase}: p {p:?}");
    assert!(pe2.event("label_push") >= min_frames, "{phase}: pe2 {pe2:?}");
    assert!(pe2.event("label_pop") >= min_frames, "{phase}: pe2 {pe2:?}");
    eprintln!("{phase}: counters {stats:#?}");
}

#[test]
fn lsp_carries_ping_and_tcp_both_ways() {
    let start = Instant::now();
    let mut lab = Lab::start("traffic", SeedParams::default());

    // The hosts' defaults: TSO and GSO on, so super-frames enter the routers.
    pings_and_transfers(&mut lab, "offloads on");
    check_counters(&mut lab, "offloads on");

    // TSO, GSO and GRO off on every link (hosts and routers); the routers are
    // restarted so they see the interfaces' new features.
    lab.seed.set_offloads(false).unwrap();
    let t = lab.seed.topology();
    let features = t
        .run_timeout(
            "ce1",
            {
                let mut c = std::process::Command::new("ethtool");
                c.args(["-k", "ce1-pe1"]);
                c
            },
            Duration::from_secs(10),
        )
        .unwrap();
    let features = String::from_utf8_lossy(&features.stdout);
    assert!(features.contains("tcp-segmentation-offload: off"), "{features}");
    lab.start_routers();
    pings_and_transfers(&mut lab, "offloads off");
    check_counters(&mut lab, "offloads off");
    eprintln!("lsp_carries_ping_and_tcp_both_ways: {:?}", start.elapsed());
}

/// A few seconds of TCP ce1 -> ce2 at full speed with the hosts' offloads on, then
/// the routers' counters: no frame of the flow may be dropped inside a router.
fn sustained_flow(
    tag: &str,
    params: SeedParams,
) -> std::collections::BTreeMap<String, vmpls_lab::stats::RouterStats> {
    let mut lab = Lab::start(tag, params);
    let opts = vmpls_lab::traffic::FlowOptions {
        limit: vmpls_lab::traffic::Limit::Duration(Duration::from_secs(3)),
        io_timeout: Duration::from_secs(10),
        ..Default::default()
    };
    for dst in [CE2_V4, CE2_V6] {
        let flow = vmpls_lab::traffic::run_flow(&lab.ns("ce1"), &lab.ns("ce2"), ip(dst), &opts, &mut |_| {})
            .unwrap_or_else(|e| panic!("{tag} {dst}: {e:#}\n{}", lab.logs()));
        assert!(flow.content_ok, "{tag} {dst}: {flow:?}");
        eprintln!(
            "{tag}: TCP ce1 -> {dst} for 3 s: {:.2} Gbit/s, {} retransmits",
            flow.gbps, flow.retransmits
        );
    }
    let stats = lab.stop_routers();
    assert!(stats["pe1"].event("label_push") > 0, "{stats:#?}");
    // Path MTU discovery on a 1500-byte core costs a few "too big" drops, answered.
    let allowed: &[&str] = if lab.seed.params().core_mtu < 65535 { &["mtu_exceeded"] } else { &[] };
    assert_no_unexpected_drops(&stats, allowed, &format!("{tag}: TCP flows"));
    stats
}

#[test]
fn sustained_tcp_flow_loses_nothing_in_the_routers() {
    // Jumbo core links: the TSO super-frames cross the LSP whole, as single jumbo
    // frames; nobody segments; the egress rebuilds GSO metadata for ce2's port.
    let stats = sustained_flow("sustained-jumbo", SeedParams::default());
    assert!(stats["pe1"].event("superframes_sent_as_jumbo") > 0, "{stats:#?}");
    assert!(stats["pe2"].event("gso_superframes_rebuilt") > 0, "{stats:#?}");
    for r in ROUTERS {
        assert_eq!(
            stats[r].event("gso_superframes_segmented"),
            0,
            "{r} segmented on a jumbo core: {stats:#?}"
        );
    }
    // Coalescing only where frames leave the LSP (pe2 may merge the few small segments a
    // TCP sender sends before its super-frames); never at p, which swaps them onward.
    assert_eq!(stats["p"].event("gro_superframes_built"), 0, "{stats:#?}");
    // A 1500-byte core: pe1 cuts every super-frame into labelled segments, p switches
    // them one by one, pe2 coalesces them again where they leave the LSP.
    let stats = sustained_flow("sustained-1500", SeedParams { core_mtu: 1500, ..SeedParams::default() });
    assert!(stats["pe1"].event("gso_superframes_segmented") > 0, "{stats:#?}");
    assert!(stats["pe2"].event("gro_superframes_built") > 0, "{stats:#?}");
    assert_eq!(stats["p"].event("gso_superframes_segmented"), 0, "{stats:#?}");
    assert_eq!(
        stats["p"].event("gro_superframes_built"),
        0,
        "p must not coalesce what it swaps on: {stats:#?}"
    );
    assert_eq!(stats["pe1"].event("superframes_sent_as_jumbo"), 0, "{stats:#?}");
}

#[test]
fn routers_stop_cleanly_on_sigterm_and_the_lab_leaves_nothing() {
    let mut lab = Lab::start("sigterm", SeedParams::default());
    let namespaces = lab.seed.topology().namespaces();
    assert_eq!(namespaces.len(), 5);
    let r = lab.ping("ce1", CE2_V4, &PingOptions::default());
    assert_eq!(r.received, 3, "{r:?}");
    // SIGTERM: exit status 0 (checked by stop_routers), and the counters written at
    // exit include the pings just sent.
    let stats = lab.stop_routers();
    assert!(stats["pe1"].event("label_push") >= 3, "{stats:#?}");
    assert!(stats["p"].event("label_swap") >= 6, "{stats:#?}");
    for r in ROUTERS {
        let log = std::fs::read_to_string(lab.work.path().join(format!("{r}.log"))).unwrap();
        assert!(log.contains("stopped"), "{r}: {log}");
    }
    // With the routers gone, nothing forwards.
    let r = lab.ping(
        "ce1",
        CE2_V4,
        &PingOptions { count: 1, timeout: Duration::from_millis(300), ..PingOptions::default() },
    );
    assert_eq!(r.received, 0, "{r:?}");
    drop(lab);
    for ns in namespaces {
        assert!(!netns::exists(&ns), "namespace {ns} left behind");
    }
}

/// The core links as memif ports ([`SeedParams::memif_core`]): the routers hand frames
/// to each other through shared memory, not the veths. Ping and content-checked TCP both
/// ways, every label operation done, and the hosts' super-frames cross both memifs whole
/// (the peers are vmpls: each frame carries its virtio-net header).
#[test]
fn lsp_over_memif_core_links_carries_ping_and_tcp_both_ways() {
    let sockets = std::env::temp_dir().join(format!("vmpls-seed-memif-{}", std::process::id()));
    std::fs::create_dir_all(&sockets).unwrap();
    let mut lab =
        Lab::start("memif", SeedParams { memif_core: Some(sockets.clone()), ..SeedParams::default() });
    pings_and_transfers(&mut lab, "memif core");
    let stats = lab.stop_routers();
    let port = |router: &str, name: &str, key: &str| {
        let p = stats[router].ports.iter().find(|p| p["name"] == name);
        p.and_then(|p| p[key].as_u64()).unwrap_or_else(|| panic!("{router}.{name}.{key}: {stats:#?}"))
    };
    for (router, name) in [("pe1", "core"), ("p", "west"), ("p", "east"), ("pe2", "core")] {
        let (frames, bytes) = (port(router, name, "tx_packets"), port(router, name, "tx_bytes"));
        assert!(frames > 0, "{router}.{name} sent nothing: {stats:#?}");
        assert_eq!(port(router, name, "tx_segmented"), 0, "{router}.{name} cut super-frames: {stats:#?}");
        // Two 100 MiB transfers each way, mostly in super-frames far above 1500 bytes.
        assert!(bytes / frames > 6000, "{router}.{name}: {bytes} bytes in {frames} frames");
    }
    assert_no_unexpected_drops(&stats, LOAD_DROPS, "memif core");
    let min_frames = 2 * TRANSFER / 65536;
    assert!(stats["pe1"].event("label_push") >= min_frames, "{stats:#?}");
    assert!(stats["p"].event("label_swap") >= 2 * min_frames, "{stats:#?}");
    assert!(stats["pe2"].event("label_pop") >= min_frames, "{stats:#?}");
    drop(lab);
    let _ = std::fs::remove_dir_all(&sockets);
}
