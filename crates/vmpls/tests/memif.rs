//! memif ports against real peers: DPDK's testpmd with `net_memif`, and another vmpls.
//!
//! ```text
//! (a) h1 --veth-- [ r: push 1062 ] ==memif== testpmd (macswap)
//!                 [ r: pop 1062  ] --veth-- h2          (and back the same way)
//! (b) h1 --veth-- [ r1: push 1072 ] ==memif== [ r2: pop ] --veth-- h2   (and back)
//! ```
//!
//! (a) every frame the router sends over the memif comes back through testpmd and is
//! counted on both sides, and a content-checked TCP flow crosses that hairpin (the
//! pipeline segments the hosts' super-frames, since DPDK takes no offloads); (b) two
//! routers find each other by ARP over the memif, TCP crosses both ways content-checked,
//! and the hosts' super-frames cross the memif whole (bytes per frame far above the MTU,
//! nothing segmented).
//!
//! Needs root. (a) needs `dpdk-testpmd` (Debian `dpdk-dev`, which scripts/test installs)
//! and is skipped with a message without it; it runs testpmd with `--no-huge` (memif's
//! memory is memfds), so no hugepages are needed. Namespaces are `mf<pid>-<n>-HOST`,
//! addresses in 198.18.0.0/15; everything goes when the test ends, also on failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};
use vmpls_lab::{IpPrefix, Topology, topology::HostOptions};
use vmpls_tools::testpmd::{TESTPMD, Testpmd, TestpmdOptions};

const VMPLS: &str = env!("CARGO_BIN_EXE_vmpls");
const PMD_MAC: &str = "02:00:00:00:6d:02";

fn prefix(s: &str) -> IpPrefix {
    s.parse().unwrap()
}

/// A work directory of its own, removed on drop.
struct Work(PathBuf);

impl Work {
    fn new(tag: &str) -> Work {
        let dir = std::env::temp_dir().join(format!("vmpls-memif-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Work(dir)
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Hosts h1 and h2, routers `routers`, h1 linked to the first router and h2 to the last
/// (h1 198.18.61.2/24, h2 198.18.62.2/24, gateways .1).
fn topology(routers: &[&str]) -> Topology {
    vmpls_lab::require_root().expect("the memif tests need root");
    let mut topo = Topology::with_prefix("mf");
    topo.add_host("h1").unwrap();
    topo.add_host("h2").unwrap();
    for r in routers {
        topo.add_host_with(r, HostOptions { ipv6: false }).unwrap();
    }
    let (first, last) = (routers[0], routers[routers.len() - 1]);
    topo.add_link("h1", "h1-r", first, "r-h1", 1500).unwrap();
    topo.add_link(last, "r-h2", "h2", "h2-r", 1500).unwrap();
    for (h, ifname, net) in [("h1", "h1-r", 61), ("h2", "h2-r", 62)] {
        topo.add_address(h, ifname, prefix(&format!("198.18.{net}.2/24"))).unwrap();
        topo.add_default_route(h, format!("198.18.{net}.1").parse().unwrap()).unwrap();
    }
    topo
}

/// Starts `vmpls run` with `config` in `router`'s namespace and waits for its control
/// socket; returns its pid.
fn start_router(topo: &mut Topology, work: &Path, router: &str, config: &str) -> u32 {
    let cfg = work.join(format!("{router}.toml"));
    std::fs::write(&cfg, config).unwrap();
    let mut cmd = Command::new(VMPLS);
    cmd.args(["run", "--config"]).arg(&cfg).stdin(Stdio::null()).stdout(Stdio::null());
    cmd.stderr(std::fs::File::create(work.join(format!("{router}.log"))).unwrap());
    let pid = topo.spawn(router, "vmpls", cmd, Some(work.join(format!("{router}.log")))).unwrap();
    let ctl = work.join(format!("{router}.ctl"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ctl.exists() {
        assert!(Instant::now() < deadline, "{router} did not start:\n{}", log(work, router));
        std::thread::sleep(Duration::from_millis(20));
    }
    pid
}

fn log(work: &Path, router: &str) -> String {
    std::fs::read_to_string(work.join(format!("{router}.log"))).unwrap_or_default()
}

/// One port's counters (`vmpls -j stats`).
fn port_stats(work: &Path, router: &str, port: &str) -> serde_json::Value {
    let out = Command::new(VMPLS)
        .arg("--socket")
        .arg(work.join(format!("{router}.ctl")))
        .args(["-j", "stats"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["ports"].as_array().and_then(|a| a.iter().find(|p| p["name"] == port)).cloned().unwrap()
}

fn count(port: &serde_json::Value, key: &str) -> u64 {
    port[key].as_u64().unwrap_or_else(|| panic!("no counter {key} in {port}"))
}

/// Pings `to` from `from` until one answer comes, within `within`.
fn wait_for_path(topo: &Topology, from: &str, to: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let mut ping = Command::new("ping");
        ping.args(["-c1", "-W1", to]);
        if topo.run_timeout(from, ping, Duration::from_secs(3)).is_ok_and(|o| o.status.success()) {
            return true;
        }
    }
    false
}

/// A content-checked TCP flow of `bytes` from `from` to `to`.
fn flow(topo: &Topology, from: &str, to_host: &str, to: &str, bytes: u64, logs: &dyn Fn() -> String) {
    let opts = FlowOptions {
        limit: Limit::Bytes(bytes),
        deadline: Some(Duration::from_secs(30)),
        ..FlowOptions::default()
    };
    let r =
        run_flow(topo.ns(from).unwrap(), topo.ns(to_host).unwrap(), to.parse().unwrap(), &opts, &mut |_| {})
            .unwrap_or_else(|e| panic!("flow {from} -> {to}: {e:#}\n{}", logs()));
    assert!(r.content_ok && r.bytes_received == bytes, "{from} -> {to}: {r:?}\n{}", logs());
}

/// The `[router]` section of router `name` (`mf-NAME`, control socket `DIR/NAME.ctl`),
/// the userspace pipeline only (`fast-path = "off"`: memif is not a veth).
fn router_section(dir: &str, name: &str) -> String {
    format!("[router]\nname = \"mf-{name}\"\nfast-path = \"off\"\ncontrol-socket = \"{dir}/{name}.ctl\"\n")
}

/// Starts a testpmd without hugepages on a memif `net_memif0,role=ROLE,socket=SOCKET`
/// (path, not abstract) with `args`, and waits until it forwards.
fn start_testpmd(work: &Path, name: &str, lcores: &str, role: &str, socket: &str, args: &[&str]) -> Testpmd {
    let dir = work.display();
    let opts = TestpmdOptions {
        name: name.into(),
        lcores: lcores.into(),
        vdevs: vec![format!(
            "net_memif0,role={role},socket={dir}/{socket},socket-abstract=no,id=0,mac={PMD_MAC}"
        )],
        mem_mb: 256,
        args: args.iter().map(|a| a.to_string()).chain(["--total-num-mbufs=8192".to_string()]).collect(),
        commands: vec![],
    };
    let mut t = Testpmd::start_without_hugepages(work, &opts).unwrap();
    t.wait_for(Testpmd::READY, Duration::from_secs(30)).unwrap();
    t
}

fn testpmd_present() -> bool {
    Command::new(TESTPMD).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

#[test]
fn frames_sent_to_a_testpmd_client_over_memif_come_back_counted_and_tcp_crosses_the_hairpin() {
    testpmd_hairpin("server");
}

#[test]
fn frames_sent_to_a_testpmd_server_over_memif_come_back_counted_and_tcp_crosses_the_hairpin() {
    testpmd_hairpin("client");
}

/// The hairpin through testpmd, the router being the memif's `router_role`.
fn testpmd_hairpin(router_role: &str) {
    if !testpmd_present() {
        eprintln!(
            "SKIPPED: {TESTPMD} not found (Debian package dpdk-dev); the memif test against DPDK needs it"
        );
        return;
    }
    let work = Work::new(&format!("pmd-{router_role}"));
    let dir = work.0.display().to_string();
    let mut topo = topology(&["r"]);
    let header = router_section(&dir, "r");
    let config = format!(
        r#"{header}
[[port]]
name = "h1"
interface = "r-h1"
addresses = ["198.18.61.1/24"]

[[port]]
name = "h2"
interface = "r-h2"
addresses = ["198.18.62.1/24"]

[[port]]
name = "m"
kind = "memif"
socket = "{dir}/m.sock"
role = "{router_role}"
addresses = ["198.18.60.1/24"]

# testpmd answers no ARP.
[[neighbor]]
address = "198.18.60.2"
lladdr = "{PMD_MAC}"
port = "m"

# Toward each host: labelled out to testpmd, which sends it back; popped to the host.
[[route]]
prefix = "198.18.62.2/32"
push = [1062]
via = "198.18.60.2"
port = "m"

[[route]]
prefix = "198.18.61.2/32"
push = [1061]
via = "198.18.60.2"
port = "m"

[[label]]
in = 1062
action = "pop"
via = "198.18.62.2"
port = "h2"

[[label]]
in = 1061
action = "pop"
via = "198.18.61.2"
port = "h1"
"#
    );
    start_router(&mut topo, &work.0, "r", &config);
    let pmd_role = if router_role == "server" { "client" } else { "server" };
    let mut pmd = start_testpmd(
        &work.0,
        &format!("pmd-{router_role}"),
        "0@0,1@1",
        pmd_role,
        "m.sock",
        &["--forward-mode=macswap"],
    );
    // DPDK's memif_connect sets both rings' indices to 0 when its side of the handshake
    // completes; a DPDK client does it on our CONNECTED, so a frame the router sends in
    // that instant is lost (the port then goes on from the reset index,
    // `peer_ring_resets`). Frames sent in the first moments would make the counts
    // differ by one now and then: the traffic starts half a second after the handshake.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !log(&work.0, "r").contains("memif connected") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let logs = || format!("router:\n{}\ntestpmd:\n{}", log(&work.0, "r"), pmd.log_tail(20));
    assert!(
        wait_for_path(&topo, "h1", "198.18.62.2", Duration::from_secs(15)),
        "no path through testpmd\n{}",
        logs()
    );
    assert!(log(&work.0, "r").contains("memif connected"), "{}", logs());
    flow(&topo, "h1", "h2", "198.18.62.2", 8 << 20, &logs);
    flow(&topo, "h2", "h1", "198.18.61.2", 8 << 20, &logs);
    // The hosts' stacks may still send a late ACK or FIN: wait until the memif's
    // counters stand still for a second, then stop testpmd and compare.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut m = port_stats(&work.0, "r", "m");
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let now = port_stats(&work.0, "r", "m");
        if now == m || Instant::now() > deadline {
            break;
        }
        m = now;
    }
    let pmd_counts = pmd.stop_forwarding().unwrap()[&0];
    assert_eq!(port_stats(&work.0, "r", "m"), m, "the memif stood still while testpmd stopped");
    let (sent, back) = (count(&m, "tx_packets"), count(&m, "rx_packets"));
    assert!(sent > 5000, "the flows crossed the memif: {m}");
    let router_log = log(&work.0, "r");
    assert_eq!(
        pmd_counts.rx_packets, sent,
        "testpmd received every frame the router sent: {pmd_counts:?} {m}\n{router_log}"
    );
    assert_eq!(pmd_counts.tx_packets, back, "the router received every frame testpmd sent back: {m}");
    assert_eq!(sent, back, "every frame came back");
    assert_eq!(count(&m, "tx_dropped") + count(&m, "rx_dropped"), 0, "{m}");
    drop(pmd);
}

/// How the two routers of the chain are joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Memif,
    /// An AF_PACKET veth pair, for comparison.
    Veth,
}

/// h1 - r1 = r2 - h2, r1 and r2 joined by `link` (r1's port `m` the memif server), the
/// LSP r1 -> r2 label 1062 and back 1061, both popped at the far router. Returns the
/// topology and the routers' pids.
fn two_router_chain(work: &Work, link: Link) -> (Topology, [u32; 2]) {
    let dir = work.0.display().to_string();
    let mut topo = topology(&["r1", "r2"]);
    if link == Link::Veth {
        topo.add_link("r1", "r1-r2", "r2", "r2-r1", 1500).unwrap();
    }
    let router = |name: &str, host_net: u8, role: &str, me: u8, peer: u8, far_net: u8| {
        let attach = match link {
            Link::Memif => format!("kind = \"memif\"\nsocket = \"{dir}/m.sock\"\nrole = \"{role}\""),
            Link::Veth => format!("interface = \"{name}-r{peer}\""),
        };
        let header = router_section(&dir, name);
        format!(
            r#"{header}
[[port]]
name = "host"
interface = "{ifname}"
addresses = ["198.18.{host_net}.1/24"]

[[port]]
name = "m"
{attach}
addresses = ["198.18.70.{me}/24"]

# Toward the far host: push; from the far router: pop and route.
[[route]]
prefix = "198.18.{far_net}.0/24"
push = [10{far_net}]
via = "198.18.70.{peer}"
port = "m"

[[label]]
in = 10{host_net}
action = "pop"
"#,
            ifname = if host_net == 61 { "r-h1" } else { "r-h2" },
        )
    };
    let r1 = start_router(&mut topo, &work.0, "r1", &router("r1", 61, "server", 1, 2, 62));
    let r2 = start_router(&mut topo, &work.0, "r2", &router("r2", 62, "client", 2, 1, 61));
    (topo, [r1, r2])
}

fn chain_logs(work: &Work) -> String {
    format!("r1:\n{}\nr2:\n{}", log(&work.0, "r1"), log(&work.0, "r2"))
}

#[test]
fn two_routers_joined_by_memif_carry_tcp_both_ways_and_super_frames_cross_whole() {
    let work = Work::new("lsp");
    let (topo, _) = two_router_chain(&work, Link::Memif);
    let logs = || chain_logs(&work);
    assert!(
        wait_for_path(&topo, "h1", "198.18.62.2", Duration::from_secs(15)),
        "no path over the memif\n{}",
        logs()
    );
    flow(&topo, "h1", "h2", "198.18.62.2", 32 << 20, &logs);
    flow(&topo, "h2", "h1", "198.18.61.2", 32 << 20, &logs);
    let (m1, m2) = (port_stats(&work.0, "r1", "m"), port_stats(&work.0, "r2", "m"));
    // The hosts' TCP super-frames cross labelled and whole: on average several MTUs a
    // frame, none cut by the memif port.
    for (m, dir) in [(&m1, "tx"), (&m2, "rx"), (&m2, "tx"), (&m1, "rx")] {
        let per_frame = count(m, &format!("{dir}_bytes")) / count(m, &format!("{dir}_packets")).max(1);
        eprintln!("memif {dir}: {per_frame} bytes a frame on average");
        assert!(per_frame > 3000, "{dir}: {per_frame} bytes a frame: {m}");
    }
    assert_eq!(count(&m1, "tx_segments") + count(&m2, "tx_segments"), 0);
    assert_eq!(count(&m1, "tx_packets"), count(&m2, "rx_packets"), "r2 received what r1 sent: {m1} {m2}");
    assert_eq!(count(&m2, "tx_packets"), count(&m1, "rx_packets"), "r1 received what r2 sent: {m1} {m2}");
}

/// The measurement in BENCHMARKS.md, not a check: one TCP flow h1 -> h2 for 5 s through
/// the two-router chain joined by memif, then by a veth pair, in one run: Gbit/s, the
/// routers' CPU seconds (utime + stime of both), and per CPU-second of the routers the
/// Gbit and the frames that crossed the link between them.
/// `cargo test --release -p vmpls --test memif -- --ignored --nocapture --test-threads=1`
#[test]
#[ignore = "a measurement: run it by name with --ignored"]
fn measure_two_router_chain_memif_against_veth() {
    let mut rows = Vec::new();
    for link in [Link::Memif, Link::Veth] {
        let work = Work::new(&format!("bench-{link:?}"));
        let (topo, pids) = two_router_chain(&work, link);
        let logs = || chain_logs(&work);
        assert!(wait_for_path(&topo, "h1", "198.18.62.2", Duration::from_secs(15)), "no path\n{}", logs());
        let cpu = || pids.iter().map(|&p| vmpls_sys::process::cpu_seconds(p).unwrap()).sum::<f64>();
        let frames = || count(&port_stats(&work.0, "r1", "m"), "tx_packets");
        let (cpu0, frames0) = (cpu(), frames());
        let opts = FlowOptions { limit: Limit::Duration(Duration::from_secs(5)), ..FlowOptions::default() };
        let r = run_flow(
            topo.ns("h1").unwrap(),
            topo.ns("h2").unwrap(),
            "198.18.62.2".parse().unwrap(),
            &opts,
            &mut |_| {},
        )
        .unwrap_or_else(|e| panic!("{link:?}: {e:#}\n{}", logs()));
        assert!(r.content_ok, "{r:?}");
        let (cpu_s, link_frames) = (cpu() - cpu0, frames() - frames0);
        rows.push(format!(
            "| {link:?} | {:.2} | {cpu_s:.2} | {:.2} | {:.0} | {} |",
            r.gbps,
            r.gbps * r.seconds / cpu_s,
            link_frames as f64 / cpu_s,
            (r.bytes_received / link_frames.max(1)),
        ));
    }
    println!(
        "| link r1 -> r2 | Gbit/s | routers' CPU s | Gbit per CPU-s | link frames per CPU-s | TCP payload bytes a link frame |"
    );
    println!("|---|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
}

/// The measurement in BENCHMARKS.md, not a check: 64-byte frames through one router
/// between two memif ports, each a testpmd (client) of its own: testpmd `txonly` sends
/// IPv4/UDP to port a for 5 s, the router pushes a label and sends out port b to a
/// `rxonly` testpmd. Frames in and out, the router's CPU seconds, frames per CPU-second.
/// `cargo test --release -p vmpls --test memif -- --ignored --nocapture --test-threads=1`
#[test]
#[ignore = "a measurement: run it by name with --ignored"]
fn measure_64_byte_frames_between_two_memif_ports() {
    if !testpmd_present() {
        eprintln!("SKIPPED: {TESTPMD} not found");
        return;
    }
    let work = Work::new("bench64");
    let dir = work.0.display().to_string();
    let mut topo = Topology::with_prefix("mf");
    topo.add_host_with("r", HostOptions { ipv6: false }).unwrap();
    let header = router_section(&dir, "r");
    let config = format!(
        r#"{header}
[[port]]
name = "a"
kind = "memif"
socket = "{dir}/a.sock"
role = "server"
mac = "02:00:00:00:aa:01"
addresses = ["198.18.63.1/24"]

[[port]]
name = "b"
kind = "memif"
socket = "{dir}/b.sock"
role = "server"
addresses = ["198.18.64.1/24"]

[[neighbor]]
address = "198.18.64.2"
lladdr = "{PMD_MAC}"
port = "b"

[[route]]
prefix = "198.18.65.0/24"
push = [1065]
via = "198.18.64.2"
port = "b"
"#
    );
    let pid = start_router(&mut topo, &work.0, "r", &config);
    let pmd = |name: &str, lcores: &str, sock: &str, args: &[&str]| {
        start_testpmd(&work.0, name, lcores, "client", sock, args)
    };
    let rx = pmd("rx", "0@0,1@1", "b.sock", &["--forward-mode=rxonly"]);
    let tx = pmd(
        "tx",
        "0@1,1@0",
        "a.sock",
        &[
            "--forward-mode=txonly",
            "--eth-peer=0,02:00:00:00:aa:01",
            "--tx-ip=198.18.63.2,198.18.65.2",
            "--txpkts=64",
        ],
    );
    std::thread::sleep(Duration::from_millis(500));
    let (cpu0, a0, b0) = (
        vmpls_sys::process::cpu_seconds(pid).unwrap(),
        count(&port_stats(&work.0, "r", "a"), "rx_packets"),
        count(&port_stats(&work.0, "r", "b"), "tx_packets"),
    );
    std::thread::sleep(Duration::from_secs(5));
    let (cpu1, a1, b1) = (
        vmpls_sys::process::cpu_seconds(pid).unwrap(),
        count(&port_stats(&work.0, "r", "a"), "rx_packets"),
        count(&port_stats(&work.0, "r", "b"), "tx_packets"),
    );
    let sent = tx.stop().unwrap()[&0];
    std::thread::sleep(Duration::from_millis(500));
    let received = rx.stop().unwrap()[&0];
    let (a, b) = (port_stats(&work.0, "r", "a"), port_stats(&work.0, "r", "b"));
    let cpu = cpu1 - cpu0;
    println!("| 5 s window | router CPU s | frames in | frames out | M frames in / CPU-s |");
    println!("|---|---:|---:|---:|---:|");
    println!(
        "| memif a -> b, 64-byte | {cpu:.2} | {} | {} | {:.2} |",
        a1 - a0,
        b1 - b0,
        (a1 - a0) as f64 / cpu / 1e6
    );
    println!(
        "whole run: testpmd sent {} (tx_dropped {}), port a received {} (rx_dropped {}), port b sent {} \
         (tx_dropped {}), testpmd received {}",
        sent.tx_packets,
        sent.tx_dropped,
        count(&a, "rx_packets"),
        count(&a, "rx_dropped"),
        count(&b, "tx_packets"),
        count(&b, "tx_dropped"),
        received.rx_packets
    );
}
