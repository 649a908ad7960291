//! The seed lab with `fast-path = "tc"` on all three routers: TC programs push at pe1,
//! swap at p and pop at pe2 inside the kernel, the routers' pipelines see only what the
//! programs leave to them. Checked end to end: ping and content-checked TCP both ways
//! over IPv4 and IPv6, most frames switched by the programs and kept from the routers'
//! sockets, TTL expiry still answered by the pipelines (traceroute shows every hop with
//! its label), a route change followed at once, and nothing forwarded by a router that
//! was killed. Needs root and a vmpls built with clang. Also the default, "auto": the
//! same on veth without asking, and the pipeline alone where the programs cannot load.

mod common;

use std::time::Duration;

use common::*;
use vmpls_lab::ping::PingOptions;
use vmpls_lab::seed::SeedParams;

const TRANSFER: u64 = 64 * 1024 * 1024;

/// `vmpls -r ROUTER ARGS...` in the router's namespace (where its default socket is).
fn vmpls_cli(lab: &Lab, router: &str, args: &[&str]) -> std::process::Output {
    let binary = router_binary();
    let mut all = vec![binary.to_str().expect("a UTF-8 path"), "-r", router];
    all.extend_from_slice(args);
    lab.run(router, &all, Duration::from_secs(10))
}

/// Frames the router's sockets received: the ports' totals less the fast path's share.
fn rx_packets(stats: &vmpls_lab::stats::RouterStats) -> u64 {
    let socket = |p: &serde_json::Value| {
        p["rx_packets"].as_u64().unwrap_or(0) - p["fast_path"]["rx_packets"].as_u64().unwrap_or(0)
    };
    stats.ports.iter().map(socket).sum()
}

#[test]
fn fast_path_carries_the_lsp_and_leaves_the_rest_to_the_pipeline() {
    let mut lab = Lab::start("fastpath", SeedParams { fast_path: true, ..SeedParams::default() });
    let opts = PingOptions { count: 3, interval: Duration::from_millis(20), ..PingOptions::default() };
    for (from, to) in [("ce1", CE2_V4), ("ce1", CE2_V6), ("ce2", CE1_V4), ("ce2", CE1_V6)] {
        let r = lab.ping(from, to, &opts);
        assert_eq!(r.received, 3, "ping {from} -> {to}: {r:?}\n{}", lab.logs());
    }
    for (from, to, addr) in
        [("ce1", "ce2", CE2_V4), ("ce1", "ce2", CE2_V6), ("ce2", "ce1", CE1_V4), ("ce2", "ce1", CE1_V6)]
    {
        let flow = lab.flow(from, to, addr, TRANSFER);
        eprintln!("{from} -> {addr}: {:.2} Gbit/s, {} retransmits", flow.gbps, flow.retransmits);
        lab.assert_routers_running();
    }
    let stats = lab.fresh_stats();
    let (pe1, p, pe2) = (&stats["pe1"], &stats["p"], &stats["pe2"]);
    eprintln!("fast path: pe1 {:?}\np {:?}\npe2 {:?}", pe1.fast_path, p.fast_path, pe2.fast_path);
    // Four transfers, each at least TRANSFER / 64 KiB frames at every router.
    let min = TRANSFER / 65536;
    for (name, s) in [("pe1", pe1), ("pe2", pe2)] {
        assert!(s.fast("push") >= 2 * min, "{name}: {:?}", s.fast_path);
        assert!(s.fast("pop") >= 2 * min, "{name}: {:?}", s.fast_path);
        assert!(s.event("label_push") >= s.fast("push"), "{name}: the fast path's pushes are counted");
    }
    assert!(p.fast("swap") >= 4 * min, "p: {:?}", p.fast_path);
    assert!(p.event("label_swap") >= p.fast("swap"), "p: {:?}", p.events);
    assert_eq!(p.fast("redirect_failed"), 0, "p: {:?}", p.fast_path);
    // p's sockets were spared the switched frames: what reached them (ARP, ND, the first
    // frames before the neighbours were known) is a small part of what p switched.
    assert!(rx_packets(p) * 10 < p.fast("swap"), "p's sockets got {} frames: {:?}", rx_packets(p), p.ports);
    assert_no_unexpected_drops(&stats, BACKGROUND_DROPS, "fast path flows");
    // The operator sees the same through the CLI.
    let out = vmpls_cli(&lab, "p", &["-j", "stats"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("-j stats: {e}: {}", output_text(&out)));
    let swaps = json["fast_path"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "swap"))
        .and_then(|c| c["value"].as_u64());
    assert!(swaps >= Some(p.fast("swap")), "{json}");
    let text = output_text(&vmpls_cli(&lab, "p", &["stats"]));
    assert!(text.contains("fast path:\n") && text.contains("  swap "), "{text}");
    // The port table and `link show -s` count the frames the fast path switched too,
    // with its share apart: p's sockets saw only a few, its ports carried them all.
    for port in json["ports"].as_array().expect("ports") {
        let share = &port["fast_path"];
        let (rx, tx) = (share["rx_packets"].as_u64().unwrap_or(0), share["tx_packets"].as_u64().unwrap_or(0));
        assert!(rx >= 2 * min && tx >= 2 * min, "{port}");
        assert!(port["rx_packets"].as_u64() >= Some(rx) && port["tx_packets"].as_u64() >= Some(tx), "{port}");
    }
    assert!(text.contains("\n    fast path  "), "{text}");
    let link = output_text(&vmpls_cli(&lab, "p", &["-s", "link", "show", "dev", "east"]));
    assert!(link.contains("    of which the fast path: rx "), "{link}");
    // A capture says that the fast path's frames bypass it.
    let binary = router_binary();
    let mut cap = std::process::Command::new("ip")
        .args(["netns", "exec", &lab.ns("p")])
        .arg(&binary)
        .args(["-r", "p", "capture", "east", "-c", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting vmpls capture");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(cap.stderr.take().expect("piped")));
    let head: Vec<String> = lines.by_ref().take(2).map_while(Result::ok).collect();
    let _ = cap.kill();
    let _ = cap.wait();
    assert!(
        head.len() == 2
            && head[1].contains("the in-kernel fast path serves east")
            && head[1].contains("bypass"),
        "{head:?}"
    );

    // TTL expiry is the pipeline's: every hop answers, with the label it received.
    let s = |x: &str| Some(x.to_string());
    assert_eq!(
        traceroute(&lab, false),
        vec![
            (1, s(PE1_V4), None),
            (2, s(P_V4), s("MPLS:L=1002,E=0,S=1,T=1")),
            (3, s(PE2_V4), s("MPLS:L=2002,E=0,S=1,T=1")),
            (4, s(CE2_V4), None),
        ]
    );

    // A route deleted on pe1 stops the traffic it carried at once (pe1 answers "net
    // unreachable"); added again, the LSP carries it again.
    let out = vmpls_cli(&lab, "pe1", &["route", "del", "198.18.2.0/24"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let r = lab.ping("ce1", CE2_V4, &opts);
    assert_eq!(r.received, 0, "ce2 reached without a route on pe1: {r:?}");
    let out = vmpls_cli(
        &lab,
        "pe1",
        &["route", "add", "198.18.2.0/24", "encap", "mpls", "1002", "via", "198.18.10.2", "dev", "core"],
    );
    assert!(out.status.success(), "{}", output_text(&out));
    let before = lab.fresh_stats()["pe1"].fast("push");
    let r = lab.ping("ce1", CE2_V4, &opts);
    assert_eq!(r.received, 3, "after the route came back: {r:?}");
    let after = lab.fresh_stats()["pe1"].fast("push");
    assert!(after >= before + 3, "the echo requests took the fast path again: {before} -> {after}");
    lab.stop_routers();

    // A router that is gone forwards nothing: its programs went with it (tcx links owned
    // by the process), also without a clean exit.
    lab.start_routers();
    let pid = router_pid(&lab, "p");
    // The pid of a process this test started.
    vmpls_sys::process::kill(pid, libc::SIGKILL).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = lab.ping("ce1", CE2_V4, &opts);
    assert_eq!(r.received, 0, "ce2 reached through a killed p: {r:?}");
}

/// Penultimate-hop popping over the fast path: p pops the last label in the kernel and
/// pe2 and pe1 route plain IP to their hosts, content-checked both ways.
#[test]
fn fast_path_pops_at_the_penultimate_hop() {
    let mut lab =
        Lab::start("fastpath-php", SeedParams { fast_path: true, php: true, ..SeedParams::default() });
    for (from, to, addr) in [("ce1", "ce2", CE2_V4), ("ce2", "ce1", CE1_V6)] {
        lab.flow(from, to, addr, TRANSFER);
    }
    let stats = lab.fresh_stats();
    let (pe1, p, pe2) = (&stats["pe1"], &stats["p"], &stats["pe2"]);
    let min = TRANSFER / 65536;
    assert!(p.fast("pop") >= 2 * min, "p: {:?}", p.fast_path);
    assert_eq!(p.fast("swap"), 0, "p: {:?}", p.fast_path);
    assert!(p.event("label_pop") >= p.fast("pop"), "p: {:?}", p.events);
    for (name, s) in [("pe1", pe1), ("pe2", pe2)] {
        assert!(s.fast("push") >= min && s.fast("ip_forward") >= min, "{name}: {:?}", s.fast_path);
    }
    assert_no_unexpected_drops(&stats, BACKGROUND_DROPS, "PHP flows");
    // TTL expiry at p is still answered, with the label p received.
    let s = |x: &str| Some(x.to_string());
    assert_eq!(traceroute(&lab, true)[1], (2, s(P_V6), s("MPLS:L=1002,E=0,S=1,T=1")));
    lab.stop_routers();
}

/// The lines of `router`'s log that contain `what`.
fn log_lines(lab: &Lab, router: &str, what: &str) -> Vec<String> {
    let log = std::fs::read_to_string(lab.work.path().join(format!("{router}.log"))).unwrap_or_default();
    log.lines().filter(|l| l.contains(what)).map(str::to_string).collect()
}

/// With no `fast-path` in the config (the default, "auto"), routers on veth forward the
/// LSP in the kernel and the start-up log names each port's choice.
#[test]
fn auto_is_the_default_and_serves_veth_ports_in_the_kernel() {
    let mut lab = Lab::start("fastpath-auto", SeedParams { fast_path_auto: true, ..SeedParams::default() });
    let flow = lab.flow("ce1", "ce2", CE2_V4, TRANSFER);
    eprintln!("auto: {:.2} Gbit/s, {} retransmits", flow.gbps, flow.retransmits);
    let stats = lab.fresh_stats();
    let min = TRANSFER / 65536;
    assert!(stats["pe1"].fast("push") >= min, "pe1: {:?}", stats["pe1"].fast_path);
    assert!(stats["p"].fast("swap") >= min, "p: {:?}", stats["p"].fast_path);
    assert!(stats["pe2"].fast("pop") >= min, "pe2: {:?}", stats["pe2"].fast_path);
    for (router, ports) in [("pe1", ["ce1", "core"]), ("p", ["west", "east"]), ("pe2", ["core", "ce2"])] {
        let lines = log_lines(&lab, router, "forwarding: the in-kernel fast path");
        for port in ports {
            assert!(
                lines.iter().any(|l| l.contains(&format!("port={port} "))),
                "{router}: no line for {port}: {lines:?}\n{}",
                lab.logs()
            );
        }
    }
    lab.stop_routers();
}

/// "auto" where the programs cannot be loaded (here: no CAP_BPF and no CAP_SYS_ADMIN)
/// starts the router anyway, says why once, and the pipeline forwards everything.
#[test]
fn auto_falls_back_to_the_pipeline_when_the_programs_cannot_load() {
    let mut lab =
        Lab::start("fastpath-auto-nobpf", SeedParams { fast_path_auto: true, ..SeedParams::default() });
    lab.stop_routers();
    let wrapper = lab.work.path().join("vmpls-without-bpf");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec setpriv --bounding-set -bpf,-sys_admin,-perfmon {} \"$@\"\n",
            router_binary().display()
        ),
    )
    .expect("writing the wrapper");
    let mut perm = std::fs::metadata(&wrapper).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&wrapper, perm).unwrap();
    lab.start_routers_with(&wrapper);
    let flow = lab.flow("ce1", "ce2", CE2_V4, 4 * 1024 * 1024);
    assert!(flow.content_ok && flow.bytes_received == 4 * 1024 * 1024, "{flow:?}");
    let stats = lab.fresh_stats();
    for r in ["pe1", "p", "pe2"] {
        assert!(stats[r].fast_path.is_empty(), "{r}: {:?}", stats[r].fast_path);
        let warned = log_lines(&lab, r, "the in-kernel fast path cannot run here");
        assert_eq!(warned.len(), 1, "{r}: {warned:?}\n{}", lab.logs());
        let pipeline = log_lines(&lab, r, "forwarding: the pipeline (the fast path did not start)");
        assert_eq!(pipeline.len(), 2, "{r}: {pipeline:?}");
    }
    assert!(stats["p"].event("label_swap") >= 64, "p's pipeline switched the flow: {:?}", stats["p"].events);
    lab.stop_routers();
}
