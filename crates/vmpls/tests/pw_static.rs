//! A static Ethernet pseudowire (VPWS) between two vmpls PEs over a static LSP, two
//! kernel CE hosts in one subnet on its attachment circuits: ARP and ping across, a
//! VLAN-tagged ping (802.1Q sub-interfaces on the CEs), content-checked TCP both ways
//! with TSO on the CEs, labels and the control word on the core link as tshark
//! dissects them, and `pw show` saying down when an attachment circuit goes down.
//! Needs root, dumpcap and tshark.
//!
//! ```text
//! ce1 (198.18.50.1) -- pe1 [198.18.255.1] -- 198.18.61.0/24 -- [198.18.255.2] pe2 -- ce2 (198.18.50.2)
//!                      pw mpw0: local 1000, remote 2000      pw mpw0: local 2000, remote 1000
//!                      LSP to pe2: push 3002                 LSP to pe1: push 3001
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vmpls_lab::capture::{Capture, tshark_fields};
use vmpls_lab::ping::{PingOptions, ping};
use vmpls_lab::topology::{HostOptions, Topology};
use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};

fn config(name: &str, me: u8, peer: u8, socket: &Path) -> String {
    let (local, remote) = if me == 1 { (1000, 2000) } else { (2000, 1000) };
    format!(
        r#"[router]
name = "{name}"
control-socket = "{socket}"
addresses = ["198.18.255.{me}"]
fast-path = "off"

[[port]]
name = "ce"
interface = "{name}-ce"

[[port]]
name = "core"
interface = "{name}-core"
addresses = ["198.18.61.{me}/24"]

[[route]]
prefix = "198.18.255.{peer}/32"
push = [300{peer}]
via = "198.18.61.{peer}"
port = "core"

[[label]]
in = 300{me}
action = "pop"

[[pseudowire]]
name = "mpw0"
attachment = "ce"
local-label = {local}
remote-label = {remote}
peer = "198.18.255.{peer}"
"#,
        socket = socket.display()
    )
}

struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn cli(socket: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vmpls"))
        .arg("--socket")
        .arg(socket)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running the vmpls CLI")
}

fn ok(socket: &Path, args: &[&str]) -> String {
    let out = cli(socket, args);
    assert!(out.status.success(), "vmpls {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn pw_json(socket: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(socket, &["-j", "pw", "show"])).unwrap()
}

fn sh(topo: &Topology, host: &str, line: &str) {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(line);
    let out = topo.run(host, cmd).unwrap();
    assert!(out.status.success(), "{host}: {line}: {}", String::from_utf8_lossy(&out.stderr));
}

fn flow(topo: &Topology, from: &str, to: &str, dst: &str, bytes: u64) {
    let opts = FlowOptions {
        limit: Limit::Bytes(bytes),
        io_timeout: Duration::from_secs(10),
        deadline: Some(Duration::from_secs(30)),
        ..FlowOptions::default()
    };
    let r = run_flow(topo.ns(from).unwrap(), topo.ns(to).unwrap(), dst.parse().unwrap(), &opts, &mut |_| {})
        .unwrap_or_else(|e| panic!("TCP {from} -> {dst}: {e:#}"));
    assert!(r.content_ok && r.bytes_received == bytes && r.bytes_sent == bytes, "TCP {from} -> {dst}: {r:?}");
    eprintln!("TCP {from} -> {dst}: {bytes} bytes in {:.2} s, {:.2} Gbit/s", r.seconds, r.gbps);
}

#[test]
fn static_pseudowire_carries_arp_ping_vlans_and_tcp_and_follows_its_attachment() {
    vmpls_lab::require_root().expect("needs root");
    let work = WorkDir(std::env::temp_dir().join(format!("vmpls-pw-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&work.0);
    std::fs::create_dir_all(&work.0).unwrap();
    let mut topo = Topology::new();
    for h in ["ce1", "pe1", "pe2", "ce2"] {
        topo.add_host_with(h, HostOptions { ipv6: false }).unwrap();
    }
    topo.add_link("ce1", "ce1-pe", "pe1", "pe1-ce", 1500).unwrap();
    topo.add_link("pe1", "pe1-core", "pe2", "pe2-core", 65535).unwrap();
    topo.add_link("pe2", "pe2-ce", "ce2", "ce2-pe", 1500).unwrap();
    topo.add_address("ce1", "ce1-pe", "198.18.50.1/24".parse().unwrap()).unwrap();
    topo.add_address("ce2", "ce2-pe", "198.18.50.2/24".parse().unwrap()).unwrap();
    // 802.1Q sub-interfaces need the kernel's 8021q module; without it the tagged part
    // is left out (said on stderr; the pipeline's tests cover tagged frames on bytes).
    let mut vlans = true;
    for (h, i, a) in [("ce1", "ce1-pe", "198.18.51.1/24"), ("ce2", "ce2-pe", "198.18.51.2/24")] {
        let mut cmd = Command::new("ip");
        let sub = format!("{i}.100");
        cmd.args(["link", "add", "link", i, "name", sub.as_str(), "type", "vlan", "id", "100"]);
        let out = topo.run(h, cmd).unwrap();
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr);
            eprintln!("no VLAN sub-interfaces here ({}): tagged ping left out", why.trim());
            vlans = false;
            break;
        }
        sh(&topo, h, &format!("ip addr add {a} dev {sub} && ip link set {sub} up"));
    }

    let mut sockets = Vec::new();
    for (name, me, peer) in [("pe1", 1u8, 2u8), ("pe2", 2, 1)] {
        let socket = work.0.join(format!("{name}.ctl"));
        let cfg = work.0.join(format!("{name}.toml"));
        std::fs::write(&cfg, config(name, me, peer, &socket)).unwrap();
        let log = work.0.join(format!("{name}.log"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vmpls"));
        cmd.arg("run")
            .arg("--config")
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        topo.spawn(name, "vmpls", cmd, Some(log.clone())).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cli(&socket, &["link", "show"]).status.success() {
            assert!(topo.exited_child().is_none(), "vmpls exited:\n{}", Topology::log_tail(&log, 30));
            assert!(Instant::now() < deadline, "vmpls did not answer:\n{}", Topology::log_tail(&log, 30));
            std::thread::sleep(Duration::from_millis(50));
        }
        sockets.push(socket);
    }

    // Up at both ends, from the file, with its labels.
    for (s, local) in sockets.iter().zip([1000, 2000]) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while pw_json(s)[0]["up"] != true && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let v = pw_json(s);
        assert_eq!(v[0]["name"], "mpw0", "{v}");
        assert_eq!(v[0]["origin"], "config", "{v}");
        assert_eq!(v[0]["attachment"], "ce", "{v}");
        assert_eq!(v[0]["spec"]["local-label"], local, "{v}");
        assert_eq!(v[0]["up"], true, "{v}");
    }

    // ARP and ping across, untagged and tagged, while the core link is captured.
    let pcap = work.0.join("core.pcap");
    let cap = Capture::start(topo.ns("pe2").unwrap(), "pe2-core", &pcap, None).expect("dumpcap");
    let opts = PingOptions {
        count: 3,
        interval: Duration::from_millis(100),
        timeout: Duration::from_secs(2),
        ..PingOptions::default()
    };
    let dsts: &[&str] = if vlans { &["198.18.50.2", "198.18.51.2"] } else { &["198.18.50.2"] };
    for &dst in dsts {
        let r = ping(topo.ns("ce1").unwrap(), dst.parse().unwrap(), &opts).expect("ping");
        assert_eq!(r.received, 3, "ping {dst}: {r:?}\n{}", ok(&sockets[0], &["stats"]));
    }
    let pcap = cap.stop().expect("stopping dumpcap");
    let rows = tshark_fields(
        &pcap,
        "pwethcw",
        &["mpls.label", "vlan.id", "arp.opcode", "icmp.type"],
        Duration::from_secs(30),
    )
    .expect("tshark");
    let has = |labels: &str, f: &dyn Fn(&Vec<String>) -> bool| rows.iter().any(|r| r[0] == labels && f(r));
    // pe1 -> pe2: transport 3002 over the PW label 2000; back: 3001 over 1000.
    assert!(has("3002,2000", &|r| r[2] == "1"), "no ARP request in the PW: {rows:?}");
    assert!(has("3001,1000", &|r| r[2] == "2"), "no ARP reply in the PW: {rows:?}");
    assert!(has("3002,2000", &|r| r[3] == "8" && r[1].is_empty()), "no untagged echo request: {rows:?}");
    assert!(has("3001,1000", &|r| r[3] == "0"), "no echo reply: {rows:?}");
    if vlans {
        assert!(has("3001,1000", &|r| r[3] == "0" && r[1] == "100"), "no tagged echo reply: {rows:?}");
    }

    // TCP with TSO on the CEs, both ways, every byte checked.
    flow(&topo, "ce1", "ce2", "198.18.50.2", 32 << 20);
    flow(&topo, "ce2", "ce1", "198.18.50.1", 32 << 20);
    let v = pw_json(&sockets[0]);
    assert!(v[0]["tx-frames"].as_u64().unwrap() > 0 && v[0]["rx-frames"].as_u64().unwrap() > 0, "{v}");
    let stats = ok(&sockets[0], &["stats"]);
    assert!(stats.contains("\ndrops: 0\n"), "drops: {stats}");

    // The attachment circuit down (the CE's side: the PE's loses its carrier): down with
    // the reason; back up, up again.
    topo.set_up("ce2", "ce2-pe", false).unwrap();
    // The kernel's link watch takes the carrier away up to a second later.
    let deadline = Instant::now() + Duration::from_secs(5);
    while pw_json(&sockets[1])[0]["up"] != false && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let v = pw_json(&sockets[1]);
    assert_eq!((v[0]["up"].clone(), v[0]["reason"].clone()), (false.into(), "attachment down".into()), "{v}");
    let text = ok(&sockets[1], &["pw", "show"]);
    assert!(text.starts_with("mpw0 down (attachment down) attachment ce local-label 2000"), "{text}");
    topo.set_up("ce2", "ce2-pe", true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while pw_json(&sockets[1])[0]["up"] != true {
        assert!(Instant::now() < deadline, "{}", pw_json(&sockets[1]));
        std::thread::sleep(Duration::from_millis(50));
    }

    // The CLI: a second pseudowire needs a free port; a label in use is refused.
    let out = cli(
        &sockets[0],
        &[
            "pw",
            "add",
            "mpw1",
            "attachment",
            "ce",
            "local-label",
            "1001",
            "remote-label",
            "2001",
            "peer",
            "198.18.255.2",
        ],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("already the attachment"), "{out:?}");
    let out = cli(
        &sockets[0],
        &["pw", "add", "mpw0", "local-label", "3001", "remote-label", "2000", "peer", "198.18.255.2"],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use"), "{out:?}");
    assert!(topo.exited_child().is_none(), "a router exited");
}
