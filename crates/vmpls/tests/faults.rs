//! Faults while the seed lab's routers run: the core link p -- pe2 goes down and up, then
//! is deleted and created again; the routers heal by themselves (no restart), keep
//! forwarding what does not need the broken link, and stay idle while it is broken. And
//! SIGTERM in the middle of a TCP flow. Needs root.
//!
//! Not here because covered elsewhere: two routers on one control socket (the second
//! exits non-zero naming the path: `ops_cli.rs`), SIGTERM without traffic leaving no
//! namespace (`lsp_traffic.rs`), a vhost-user guest reconnecting (`guest_vhost_user.rs`).

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use vmpls_lab::ping::PingOptions;
use vmpls_lab::seed::SeedParams;
use vmpls_lab::stats::RouterStats;
use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};

/// pe1's address on ce1's subnet: answered by pe1 alone, whatever happens to the core.
const PE1_CE1_V4: &str = "198.18.1.1";
/// How long a router may take to forward again once the link is usable: its link check
/// runs every second, then neighbour resolution.
const HEAL_WITHIN: Duration = Duration::from_secs(5);
/// The most CPU a router may use while a port is broken, in cores: an idle router uses
/// next to nothing; one spinning on an error condition uses a whole core.
const MAX_IDLE_CPU: f64 = 0.2;

/// CPU seconds (user + system) `pid` has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    vmpls_sys::process::cpu_seconds(pid).expect("read /proc/PID/stat")
}

/// Asserts that each of `pids` (router, pid) uses at most [`MAX_IDLE_CPU`] over 2 s.
fn assert_idle(pids: &[(&str, u32)], phase: &str) {
    let before: Vec<f64> = pids.iter().map(|(_, pid)| cpu_seconds(*pid)).collect();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let wall = start.elapsed().as_secs_f64();
    for ((router, pid), b) in pids.iter().zip(before) {
        let share = (cpu_seconds(*pid) - b) / wall;
        eprintln!("{phase}: {router} used {share:.3} of a core");
        assert!(share < MAX_IDLE_CPU, "{phase}: router {router} used {share:.2} of a core");
    }
}

/// A port's entry in a router's stats file.
fn port<'a>(stats: &'a RouterStats, name: &str) -> &'a serde_json::Value {
    stats
        .ports
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no port {name} in {:?}", stats.ports))
}

fn count(stats: &RouterStats, port_name: &str, key: &str) -> u64 {
    port(stats, port_name)[key].as_u64().unwrap_or_else(|| panic!("{key} of {port_name}: {stats:?}"))
}

/// Asserts that ce1 gets no reply from ce2 (the path is broken).
fn assert_cut(lab: &Lab, phase: &str) {
    let opts = PingOptions {
        count: 3,
        interval: Duration::from_millis(100),
        timeout: Duration::from_millis(500),
        ..PingOptions::default()
    };
    let r = lab.ping("ce1", CE2_V4, &opts);
    assert_eq!(r.received, 0, "{phase}: ce2 still answers: {r:?}");
}

/// Asserts that what does not cross the broken link still works: pe1 answers ce1, and p
/// still receives on its healthy port and switches what arrives there.
fn assert_rest_works(lab: &mut Lab, phase: &str) {
    let before = lab.fresh_stats();
    let r = lab.ping("ce1", PE1_CE1_V4, &PingOptions::default());
    assert_eq!(r.received, 3, "{phase}: pe1 does not answer ce1: {r:?}");
    // Toward ce2: pe1 pushes, p swaps and cannot deliver.
    assert_cut(lab, phase);
    let after = lab.fresh_stats();
    let (p0, p1) = (&before["p"], &after["p"]);
    assert!(count(p1, "west", "rx_packets") >= count(p0, "west", "rx_packets") + 3, "{phase}: {p1:?}");
    assert!(p1.event("label_swap") >= p0.event("label_swap") + 3, "{phase}: {p1:?}");
    lab.assert_routers_running();
}

/// Waits until ce1 reaches ce2 again; returns how long it took.
fn wait_healed(lab: &mut Lab, phase: &str) -> Duration {
    let start = Instant::now();
    if let Err(e) = lab.seed.wait_reachable("ce1", ip(CE2_V4), HEAL_WITHIN) {
        panic!("{phase}: {e:#}\n{}", lab.logs());
    }
    let took = start.elapsed();
    eprintln!("{phase}: ce1 reaches ce2 again after {took:?}");
    // Both ways, both families.
    if let Err(e) = lab.seed.check_pings(HEAL_WITHIN) {
        panic!("{phase}: {e:#}\n{}", lab.logs());
    }
    took
}

/// The `state` of `port` in `router`'s `link show -j`.
fn link_state(lab: &Lab, router: &str, port: &str) -> String {
    let bin = router_binary();
    let out =
        lab.run(router, &[bin.to_str().unwrap(), "-r", router, "-j", "link", "show"], Duration::from_secs(5));
    let links: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("-j link show: {e}: {}", output_text(&out)));
    let link = links.as_array().and_then(|l| l.iter().find(|l| l["name"] == port));
    link.and_then(|l| l["state"].as_str()).unwrap_or_else(|| panic!("no state of {port}: {links}")).to_owned()
}

fn ip_cmd(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

#[test]
fn core_link_down_up_and_recreated_heals_without_restarting_routers() {
    let mut lab = Lab::start("faults-link", SeedParams::default());
    let pids: Vec<(&str, u32)> = ROUTERS.iter().map(|r| (*r, router_pid(&lab, r))).collect();
    let (p_ns, pe2_ns) = (lab.ns("p"), lab.ns("pe2"));

    // (a) p's end of the link p -- pe2 goes down: p's socket gets ENETDOWN, pe2's
    // carrier goes. The path is cut; the rest works; nobody spins.
    lab.seed.topology().set_up("p", "p-pe2", false).unwrap();
    assert_rest_works(&mut lab, "p-pe2 down");
    assert_idle(&pids, "p-pe2 down");
    let stats = lab.fresh_stats();
    assert!(count(&stats["p"], "east", "errors") >= 1, "the ENETDOWN is counted: {:?}", stats["p"]);
    assert!(!port(&stats["p"], "east")["detached"].as_bool().unwrap(), "down is not deleted");
    // `link show` tells which end is down and which lost its carrier, as `ip link` does.
    assert_eq!(link_state(&lab, "p", "east"), "DOWN");
    assert_eq!(link_state(&lab, "pe2", "core"), "NO-CARRIER");
    // Up again: the kernel resumes the bound socket.
    lab.seed.topology().set_up("p", "p-pe2", true).unwrap();
    wait_healed(&mut lab, "p-pe2 up again");
    assert_eq!((link_state(&lab, "p", "east"), link_state(&lab, "pe2", "core")), ("UP".into(), "UP".into()));
    let stats = lab.fresh_stats();
    assert_eq!(count(&stats["p"], "east", "reopened"), 0, "nothing to reopen after down/up");

    // (b) The link is deleted (both ends go), then created again with the same names and
    // MTU but, as any new veth, new MACs and indexes.
    ip_cmd(&["-n", &p_ns, "link", "del", "p-pe2"]);
    assert_rest_works(&mut lab, "p-pe2 deleted");
    assert_idle(&pids, "p-pe2 deleted");
    let stats = lab.fresh_stats();
    for (router, port_name) in [("p", "east"), ("pe2", "core")] {
        let entry = port(&stats[router], port_name);
        assert_eq!(entry["detached"], true, "{router} {port_name}: {entry}");
        assert!(count(&stats[router], port_name, "errors") >= 1, "{router} {port_name}: {entry}");
    }
    let mtu = lab.seed.params().core_mtu.to_string();
    ip_cmd(&[
        "-n", &p_ns, "link", "add", "p-pe2", "mtu", &mtu, "type", "veth", "peer", "name", "pe2-p", "mtu",
        &mtu, "netns", &pe2_ns,
    ]);
    ip_cmd(&["-n", &p_ns, "link", "set", "p-pe2", "up"]);
    ip_cmd(&["-n", &pe2_ns, "link", "set", "pe2-p", "up"]);
    wait_healed(&mut lab, "p-pe2 re-created");
    let stats = lab.fresh_stats();
    for (router, port_name) in [("p", "east"), ("pe2", "core")] {
        let entry = port(&stats[router], port_name);
        assert_eq!(entry["reopened"], 1, "{router} {port_name}: {entry}");
        assert_eq!(entry["detached"], false, "{router} {port_name}: {entry}");
    }
    // The operator sees the same through the CLI.
    let bin = router_binary();
    let out =
        lab.run("p", &[bin.to_str().unwrap(), "-r", "p", "-j", "-s", "link", "show"], Duration::from_secs(5));
    let links: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("-j -s link show: {e}: {}", output_text(&out)));
    let east =
        links.as_array().and_then(|l| l.iter().find(|l| l["name"] == "east")).expect("east in link show");
    assert_eq!(
        (&east["stats"]["reopened"], &east["stats"]["detached"]),
        (&1.into(), &false.into()),
        "{east}"
    );
    assert!(east["stats"]["errors"].as_u64() >= Some(1), "{east}");
    // More than pings: a content-checked transfer over the healed link.
    lab.flow("ce1", "ce2", CE2_V4, 20 * 1024 * 1024);
    lab.flow("ce2", "ce1", CE1_V6, 20 * 1024 * 1024);

    // The same three processes did all of it, and they stop cleanly.
    let now: Vec<(&str, u32)> = ROUTERS.iter().map(|r| (*r, router_pid(&lab, r))).collect();
    assert_eq!(now, pids, "no router was restarted");
    let log = std::fs::read_to_string(lab.work.path().join("p.log")).unwrap();
    assert!(log.contains("port reopened"), "{log}");
    let stats = lab.stop_routers();
    // Counters run on across the reopen: the transfers are in p's east port.
    assert!(count(&stats["p"], "east", "tx_bytes") > 20 * 1024 * 1024, "{:?}", stats["p"]);
}

#[test]
fn sigterm_during_a_tcp_flow_exits_cleanly_and_removes_the_control_sockets() {
    let mut lab = Lab::start("faults-sigterm", SeedParams::default());
    let sockets: Vec<PathBuf> = ROUTERS
        .iter()
        .map(|r| PathBuf::from("/run/vmpls/netns").join(lab.ns(r)).join(format!("{r}.sock")))
        .collect();
    for s in &sockets {
        assert!(s.exists(), "{} missing while the router runs", s.display());
    }
    let (from, to) = (lab.ns("ce1"), lab.ns("ce2"));
    let flow = std::thread::spawn(move || {
        let opts = FlowOptions {
            limit: Limit::Duration(Duration::from_secs(10)),
            io_timeout: Duration::from_secs(3),
            deadline: Some(Duration::from_secs(20)),
            ..FlowOptions::default()
        };
        run_flow(&from, &to, ip(CE2_V4), &opts, &mut |_| {})
    });
    // Let the flow get going: pe1 pushes labels at full speed.
    let start = Instant::now();
    loop {
        let stats = lab.fresh_stats();
        if stats["pe1"].event("label_push") > 10_000 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the flow did not start: {stats:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // SIGTERM to all three mid-flow: each exits 0 within 5 s (checked by stop_routers).
    let stats = lab.stop_routers();
    assert!(stats["p"].event("label_swap") > 10_000, "{stats:#?}");
    for s in &sockets {
        assert!(!s.exists(), "{} left behind", s.display());
    }
    for r in ROUTERS {
        let log = std::fs::read_to_string(lab.work.path().join(format!("{r}.log"))).unwrap();
        assert!(log.contains("stopped"), "{r}: {log}");
    }
    // The flow breaks off (or had just finished); either way the thread ends.
    match flow.join().expect("flow thread") {
        Ok(r) => eprintln!("the flow ended before the SIGTERM: {} bytes", r.bytes_received),
        Err(e) => eprintln!("the flow cut by SIGTERM: {}", e.root_cause()),
    }
}
