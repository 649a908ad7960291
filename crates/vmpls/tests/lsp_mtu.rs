//! Path MTU discovery through the label-switched path: with 1500-byte core links the
//! label pe1 pushes leaves 1496 bytes for IP, and pe1 says so with ICMP "fragmentation
//! needed" / "packet too big"; the hosts' own ping and TCP find and use that MTU.
//! Needs root.

mod common;

use std::time::Duration;

use common::*;
use vmpls_lab::ping::{IcmpError, PingOptions};
use vmpls_lab::seed::SeedParams;

/// The IP MTU of the LSP: the 1500-byte core minus one label.
const LSP_MTU: u32 = 1496;

fn df_ping(size: usize) -> PingOptions {
    PingOptions {
        count: 3,
        size,
        dont_fragment: true,
        interval: Duration::from_millis(50),
        ..PingOptions::default()
    }
}

/// Forgets the path MTUs the hosts' kernels learnt, so the next probe meets the
/// router again.
fn flush_pmtu(lab: &Lab) {
    for host in ["ce1", "ce2"] {
        for family in ["-4", "-6"] {
            let out = lab.run(host, &["ip", family, "route", "flush", "cache"], Duration::from_secs(10));
            assert!(out.status.success(), "{}", output_text(&out));
        }
    }
}

#[test]
fn path_mtu_discovery_through_the_lsp() {
    let params = SeedParams { core_mtu: 1500, ..SeedParams::default() };
    let mut lab = Lab::start("pmtu", params);

    // IPv4: a 1500-byte packet with DF (1472 bytes of echo payload) does not fit with
    // the label: pe1 answers "fragmentation needed" with the LSP's MTU.
    let r = lab.ping("ce1", CE2_V4, &df_ping(1472));
    assert_eq!(r.received, 0, "{r:?}");
    assert_eq!(
        r.errors.first(),
        Some(&IcmpError::FragmentationNeeded { from: ip(PE1_V4), mtu: LSP_MTU }),
        "{r:?}"
    );
    // The kernel learnt it: later sends are refused locally, or meet pe1 again.
    assert!(
        r.errors.iter().all(|e| matches!(
            e,
            IcmpError::LocalMessageTooLong | IcmpError::FragmentationNeeded { mtu: LSP_MTU, .. }
        )),
        "{r:?}"
    );
    // 1496 bytes fit.
    let r = lab.ping("ce1", CE2_V4, &df_ping(1468));
    assert_eq!(r.received, 3, "{r:?}");
    assert!(r.errors.is_empty(), "{r:?}");

    // The same with iputils' ping, after the kernel forgot the path MTU.
    flush_pmtu(&lab);
    let out = lab.run(
        "ce1",
        &["ping", "-n", "-M", "do", "-s", "1472", "-c", "2", "-i", "0.2", "-W", "1", CE2_V4],
        Duration::from_secs(20),
    );
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("From {PE1_V4} icmp_seq=1 Frag needed and DF set (mtu = {LSP_MTU})")),
        "{text}"
    );
    let out = lab.run(
        "ce1",
        &["ping", "-n", "-M", "do", "-s", "1468", "-c", "3", "-i", "0.2", "-W", "1", CE2_V4],
        Duration::from_secs(20),
    );
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("3 received, 0% packet loss"), "{text}");

    // IPv6: 1452 bytes of payload make a 1500-byte packet; "packet too big" from pe1.
    let r = lab.ping("ce1", CE2_V6, &df_ping(1452));
    assert_eq!(r.received, 0, "{r:?}");
    assert_eq!(r.errors.first(), Some(&IcmpError::PacketTooBig { from: ip(PE1_V6), mtu: LSP_MTU }), "{r:?}");
    let r = lab.ping("ce1", CE2_V6, &df_ping(1448));
    assert_eq!(r.received, 3, "{r:?}");
    flush_pmtu(&lab);
    let out = lab.run(
        "ce1",
        &["ping", "-6", "-n", "-M", "do", "-s", "1452", "-c", "2", "-i", "0.2", "-W", "1", CE2_V6],
        Duration::from_secs(20),
    );
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(&format!("From {PE1_V6} icmp_seq=1 Packet too big: mtu={LSP_MTU}")), "{text}");
    let out = lab.run(
        "ce1",
        &["ping", "-6", "-n", "-M", "do", "-s", "1448", "-c", "3", "-i", "0.2", "-W", "1", CE2_V6],
        Duration::from_secs(20),
    );
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");

    // TCP over the 1500-byte core, both ways and both families, after the kernels
    // forgot the path MTU: the hosts' 1500-byte segments (TSO super-frames of them)
    // meet pe1's "too big", TCP lowers its segment size, and the routers cut the
    // super-frames into labelled segments that fit the core.
    let before = lab.fresh_stats();
    for (from, to, addr) in
        [("ce1", "ce2", CE2_V4), ("ce1", "ce2", CE2_V6), ("ce2", "ce1", CE1_V4), ("ce2", "ce1", CE1_V6)]
    {
        flush_pmtu(&lab);
        lab.flow(from, to, addr, 32 * 1024 * 1024);
    }
    let stats = lab.stop_routers();
    let (pe1, pe2) = (stats["pe1"].since(&before["pe1"]), stats["pe2"].since(&before["pe2"]));
    assert!(pe1.event("icmp_too_big_sent") >= 1, "pe1 {pe1:#?}");
    assert!(pe2.event("icmp_too_big_sent") >= 1, "pe2 {pe2:#?}");
    assert!(pe1.event("gso_superframes_segmented") >= 1, "pe1 {pe1:#?}");
    assert!(pe2.event("gso_superframes_segmented") >= 1, "pe2 {pe2:#?}");
    // Nothing larger than the core's MTU left a router.
    for (r, s) in &stats {
        assert_eq!(s.drop_count("oversize_at_output"), 0, "{r}: {s:#?}");
    }
    // The only drops besides background ones: the packets too big, which the routers
    // answered (and buffer exhaustion under load, see LOAD_DROPS).
    let mut allowed = vec!["mtu_exceeded"];
    allowed.extend_from_slice(LOAD_DROPS);
    assert_no_unexpected_drops(&stats, &allowed, "1500-byte core");
}

/// Sets the MTU of pe1's core interface (pe1-p) under the running router and waits
/// (at most 3 s: the router checks its links every second) for the router to log that
/// its port follows; whether it did is for the caller's checks to find.
fn set_pe1_core_mtu(lab: &Lab, mtu: u32) {
    let out =
        lab.run("pe1", &["ip", "link", "set", "pe1-p", "mtu", &mtu.to_string()], Duration::from_secs(10));
    assert!(out.status.success(), "{}", output_text(&out));
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while !follows_logged(lab, mtu) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether pe1 logged that its core port follows the interface's MTU `mtu`.
fn follows_logged(lab: &Lab, mtu: u32) -> bool {
    let text = std::fs::read_to_string(lab.work.path().join("pe1.log")).unwrap_or_default();
    let wanted = format!(" mtu={mtu}");
    text.lines().any(|l| l.contains("the interface's MTU changed") && l.contains(&wanted))
}

/// Lowers pe1's core MTU from 65535 to 1400 under the running routers: a DF packet that
/// no longer fits with the label gets "fragmentation needed" with the new MTU (1396)
/// from pe1, whether the pipeline or the in-kernel fast path (which must leave it to the
/// pipeline) would have pushed it; smaller packets still go, through the fast path
/// where there is one; and raised again, the large packets pass again.
fn core_mtu_lowered_under_a_running_router(fast_path: bool) {
    let tag = if fast_path { "mtu-live-tc" } else { "mtu-live" };
    let lab = Lab::start(tag, SeedParams { fast_path, ..SeedParams::default() });
    let r = lab.ping("ce1", CE2_V4, &df_ping(1472));
    assert_eq!(r.received, 3, "65535-byte core: {r:?}");

    set_pe1_core_mtu(&lab, 1400);
    let r = lab.ping("ce1", CE2_V4, &df_ping(1472));
    assert_eq!(r.received, 0, "{r:?}\n{}", lab.logs());
    assert_eq!(
        r.errors.first(),
        Some(&IcmpError::FragmentationNeeded { from: ip(PE1_V4), mtu: 1396 }),
        "{r:?}\n{}",
        lab.logs()
    );
    let binary = router_binary();
    let out = lab.run(
        "pe1",
        &[binary.to_str().unwrap(), "-r", "pe1", "link", "show", "dev", "core"],
        Duration::from_secs(10),
    );
    let text = output_text(&out);
    assert!(text.starts_with("1: core: <UP> mtu 1400 "), "{text}");

    flush_pmtu(&lab);
    let before = lab.stats_now()["pe1"].fast("push");
    let r = lab.ping("ce1", CE2_V4, &df_ping(1368));
    assert_eq!(r.received, 3, "1396 bytes fit: {r:?}");
    if fast_path {
        // The fast path's adjacency has the new MTU and still pushes what fits.
        std::thread::sleep(Duration::from_millis(1200));
        let pushed = lab.stats_now()["pe1"].fast("push") - before;
        assert!(pushed >= 3, "the fast path pushed {pushed} of the fitting pings");
    }

    set_pe1_core_mtu(&lab, 65535);
    flush_pmtu(&lab);
    let r = lab.ping("ce1", CE2_V4, &df_ping(1472));
    assert_eq!(r.received, 3, "raised again: {r:?}\n{}", lab.logs());
    assert!(follows_logged(&lab, 1400) && follows_logged(&lab, 65535), "{}", lab.logs());
}

#[test]
fn core_mtu_lowered_under_a_running_router_gets_frag_needed_from_the_pipeline() {
    core_mtu_lowered_under_a_running_router(false);
}

#[test]
fn core_mtu_lowered_under_a_running_router_is_followed_by_the_fast_path() {
    core_mtu_lowered_under_a_running_router(true);
}
