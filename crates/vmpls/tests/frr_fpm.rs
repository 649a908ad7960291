//! FRR mode against a stand-in for zebra: a `vmpls run` with `[frr]` in a network
//! namespace whose kernel owns the addresses, fed FPM frames built like zebra's
//! (`vmpls_frr::route::encode`). What zebra sends becomes the tables with its protocol,
//! traffic follows it, bad input closes the connection and leaves the table, a second
//! connection is refused, a reconnection replaces the table, and nothing outside the
//! namespace reaches the listener. The same against real FRR daemons: `frr_ldp.rs`.
//!
//! h1 -- r -- h2; r runs vmpls, its kernel has the addresses and no IP forwarding.
//! Needs root.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use vmpls_frr::route::{MAIN_TABLE, encode};
use vmpls_frr::{Dest, Kind, Nexthop, Route, RouteKey, fpm};
use vmpls_lab::{IpPrefix, Topology};

const BIN: &str = env!("CARGO_BIN_EXE_vmpls");

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

struct Lab {
    topo: Topology,
    dir: PathBuf,
    socket: PathBuf,
    router: Option<u32>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.topo.stop_all(Duration::from_secs(3));
        let _ = self.topo.cleanup();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Lab {
    fn new(tag: &str) -> Lab {
        vmpls_lab::require_root().expect("root");
        let mut topo = Topology::new();
        for h in ["h1", "r", "h2"] {
            topo.add_host(h).unwrap();
        }
        topo.add_link("h1", "h1-r", "r", "r-h1", 1500).unwrap();
        topo.add_link("r", "r-h2", "h2", "h2-r", 1500).unwrap();
        let add = |h: &str, i: &str, a: &str| topo.add_address(h, i, a.parse::<IpPrefix>().unwrap()).unwrap();
        add("h1", "h1-r", "198.18.1.2/24");
        add("r", "r-h1", "198.18.1.1/24");
        add("r", "r-h2", "198.18.10.1/24");
        add("h2", "h2-r", "198.18.10.2/24");
        add("r", "lo", "198.18.255.1/32");
        add("h2", "lo", "198.18.50.1/32");
        topo.add_default_route("h1", ip("198.18.1.1")).unwrap();
        topo.add_default_route("h2", ip("198.18.10.1")).unwrap();
        topo.set_forwarding("r", false).unwrap();
        let dir = std::env::temp_dir().join(format!("vmpls-frr-fpm-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("r.sock");
        Lab { topo, dir, socket, router: None }
    }

    fn config(&self) -> PathBuf {
        let path = self.dir.join("r.toml");
        std::fs::write(
            &path,
            format!(
                "[router]\nname = \"r\"\nfast-path = \"off\"\ncontrol-socket = \"{}\"\n\n[frr]\nfpm = \"127.0.0.1:2620\"\nhold-time = 60\nstale-time = 1\n\n\
                 [[port]]\nname = \"west\"\ninterface = \"r-h1\"\n\n[[port]]\nname = \"east\"\ninterface = \"r-h2\"\n",
                self.socket.display()
            ),
        )
        .unwrap();
        path
    }

    fn start(&mut self) {
        let cfg = self.config();
        let log = self.dir.join("r.log");
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--config"]).arg(&cfg);
        cmd.stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap());
        self.router = Some(self.topo.spawn("r", "vmpls", cmd, Some(log)).unwrap());
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.socket.exists() {
            assert!(Instant::now() < deadline, "router did not start: {}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("r.log")).unwrap_or_default()
    }

    fn cli(&self, args: &[&str]) -> Value {
        let out = Command::new(BIN).arg("--socket").arg(&self.socket).arg("-j").args(args).output().unwrap();
        assert!(out.status.success(), "vmpls {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn frr_counter(&self, name: &str) -> u64 {
        let st = self.cli(&["stats"]);
        st["frr"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap()["value"].as_u64().unwrap()
    }

    /// Connects to the FPM listener from inside r's namespace, as zebra does.
    fn zebra(&self) -> TcpStream {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.topo.in_host("r", || TcpStream::connect("127.0.0.1:2620")).unwrap() {
                Ok(s) => return s,
                Err(e) => {
                    assert!(Instant::now() < deadline, "FPM listener: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    fn run(&self, host: &str, args: &[&str]) -> Output {
        let mut cmd = Command::new(args[0]);
        cmd.args(&args[1..]);
        self.topo.run_timeout(host, cmd, Duration::from_secs(20)).unwrap()
    }

    fn ifindex(&self, ifname: &str) -> u32 {
        let idx = self.topo.in_host("r", || vmpls_sys::if_nametoindex(ifname)).unwrap();
        idx.unwrap_or_else(|| panic!("no interface {ifname} in r"))
    }
}

fn send(z: &mut TcpStream, routes: &[(&Route, bool)]) {
    let mut bytes = Vec::new();
    for (r, delete) in routes {
        bytes.extend(fpm::frame(&encode::message(r, *delete)));
    }
    z.write_all(&bytes).unwrap();
}

fn until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn labels(lab: &Lab) -> Vec<(u64, String)> {
    lab.cli(&["-f", "mpls", "route", "show"])
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["label"].as_u64().unwrap(), r["protocol"].as_str().unwrap().to_string()))
        .collect()
}

fn route(dest: Dest, protocol: u8, gw: &str, ifindex: u32, labels: &[u32]) -> Route {
    Route {
        key: RouteKey { table: MAIN_TABLE, dest },
        protocol,
        kind: Kind::Unicast,
        nexthops: vec![Nexthop {
            gateway: Some(ip(gw)),
            ifindex: Some(ifindex),
            labels: labels.to_vec(),
            weight: 1,
        }],
    }
}

#[test]
fn routes_from_zebra_become_the_tables_and_bad_peers_change_nothing() {
    let mut lab = Lab::new("main");

    // The kernel must not forward beside vmpls.
    lab.topo.set_forwarding("r", true).unwrap();
    let cfg = lab.config();
    let out = lab.run("r", &[BIN, "run", "--config", cfg.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("the kernel forwards IP on"), "{err}");
    lab.topo.set_forwarding("r", false).unwrap();

    lab.start();
    assert_eq!(lab.frr_counter("connected"), 0);
    let east = lab.ifindex("r-h2");
    let lsp = route(Dest::Label(100), 193, "198.18.10.2", east, &[200]);
    let php = route(Dest::Label(101), 193, "198.18.10.2", east, &[]);
    let plain = route(Dest::Prefix(ip("198.18.50.1"), 32), 188, "198.18.10.2", east, &[]);
    let pushed = route(Dest::Prefix(ip("198.18.60.0"), 24), 196, "198.18.10.2", east, &[300, 301]);
    let off_port = route(Dest::Prefix(ip("198.18.70.0"), 24), 188, "198.18.10.2", 999, &[]);
    let mut z = lab.zebra();
    send(&mut z, &[(&lsp, false), (&php, false), (&plain, false), (&pushed, false), (&off_port, false)]);
    until("the label routes", Duration::from_secs(5), || labels(&lab).len() == 2);
    assert_eq!(labels(&lab), [(100, "ldp".to_string()), (101, "ldp".to_string())]);
    let v4 = lab.cli(&["route", "show"]);
    let find = |dst: &str| v4.as_array().unwrap().iter().find(|r| r["dst"] == dst).cloned();
    let p = find("198.18.60.0/24").expect("labelled route");
    assert_eq!(p["protocol"], "static");
    assert_eq!(p["nexthops"][0]["labels"], serde_json::json!([300, 301]));
    assert_eq!(find("198.18.50.1/32").unwrap()["protocol"], "ospf");
    assert!(find("198.18.70.0/24").is_none(), "a route out of an interface vmpls does not serve");
    // Connected subnets come from the kernel's addresses.
    assert!(find("198.18.10.0/24").is_some());
    assert_eq!(lab.frr_counter("connected"), 1);
    assert!(lab.frr_counter("unusable") >= 1);

    // Transit traffic follows zebra's route, forwarded by vmpls alone; the router's own
    // address is answered by the kernel alone (no duplicates).
    for dst in ["198.18.50.1", "198.18.1.1", "198.18.255.1"] {
        let out = lab.run("h1", &["ping", "-c", "3", "-i", "0.2", "-W", "2", dst]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("3 received") && !text.contains("DUP!"), "ping {dst}: {text}\n{}", lab.log());
    }

    // A second zebra is refused while the first is connected.
    let mut second = lab.zebra();
    second.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 1];
    assert!(matches!(second.read(&mut b), Ok(0) | Err(_)), "the second connection must be closed");
    until("the refusal counted", Duration::from_secs(5), || lab.frr_counter("refused") == 1);

    // Garbage closes the connection; the table stays.
    z.write_all(&[2, 1, 0, 8, 0, 0, 0, 0]).unwrap();
    until("the decode error counted", Duration::from_secs(5), || lab.frr_counter("decode_errors") == 1);
    assert_eq!(lab.frr_counter("connected"), 0);
    assert_eq!(labels(&lab).len(), 2, "the table stays after a bad peer");
    assert!(lab.log().contains("FPM version 2"), "{}", lab.log());

    // A truncated route and a 64 KiB length: closed as well, still forwarding.
    let mut z = lab.zebra();
    let mut cut = fpm::frame(&encode::message(&lsp, false));
    cut.truncate(cut.len() - 3);
    let len = u16::try_from(cut.len()).unwrap();
    cut[2..4].copy_from_slice(&len.to_be_bytes());
    z.write_all(&cut).unwrap();
    until("the second decode error", Duration::from_secs(5), || lab.frr_counter("decode_errors") == 2);
    let mut z = lab.zebra();
    z.write_all(&[1, 1, 0xff, 0xff]).unwrap();
    z.write_all(&vec![0xa5; 65531]).unwrap();
    until("the third decode error", Duration::from_secs(5), || lab.frr_counter("decode_errors") == 3);
    let out = lab.run("h1", &["ping", "-c", "2", "-i", "0.2", "-W", "2", "198.18.50.1"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 received"));

    // zebra comes back and sends less: what it did not send again goes after the walk,
    // not before.
    let mut z = lab.zebra();
    send(&mut z, &[(&lsp, false), (&plain, false)]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(labels(&lab).len(), 2, "nothing is removed while zebra's walk may go on");
    until("the stale routes removed", Duration::from_secs(10), || labels(&lab).len() == 1);
    assert_eq!(labels(&lab), [(100, "ldp".to_string())]);
    let v4 = lab.cli(&["route", "show"]);
    assert!(!v4.as_array().unwrap().iter().any(|r| r["dst"] == "198.18.60.0/24"));

    // Deletes apply.
    send(&mut z, &[(&lsp, true)]);
    until("the delete", Duration::from_secs(5), || labels(&lab).is_empty());

    // Nobody outside r's namespace reaches the listener.
    let outside = lab.topo.in_host("h1", || {
        TcpStream::connect_timeout(&"198.18.1.1:2620".parse().unwrap(), Duration::from_secs(2))
    });
    assert!(outside.unwrap().is_err(), "the FPM listener must not be reachable from another namespace");
    drop(z);
    assert!(lab.router.is_some());
}

/// Sends `bytes` to the FPM listener from r's namespace as user `uid`, holding the
/// connection `hold_s` seconds after (0: closed at once), like a local process would.
fn connect_as(lab: &Lab, uid: u32, bytes: &[u8], hold_s: u32) -> std::process::Child {
    let file = lab.dir.join(format!("frames-{uid}-{}", bytes.len()));
    std::fs::write(&file, bytes).unwrap();
    let script = format!("exec 3<>/dev/tcp/127.0.0.1/2620 && cat {} >&3 && sleep {hold_s}", file.display());
    Command::new("ip")
        .args(["netns", "exec", lab.topo.ns("r").unwrap(), "setpriv"])
        .args([format!("--reuid={uid}"), format!("--regid={uid}"), "--clear-groups".into()])
        .args(["bash", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn only_zebra_drives_fpm_and_what_vmpls_cannot_carry_is_skipped() {
    const NOBODY: u32 = 65534;
    let mut lab = Lab::new("owner");
    let frr_uid = vmpls_sys::cred::user_id("frr").unwrap().expect("FRR's packages create the frr user");

    // Whoever holds the FPM port first would get zebra's routes: vmpls does not start.
    let squatter = lab.topo.in_host("r", || std::net::TcpListener::bind("127.0.0.1:2620")).unwrap().unwrap();
    let cfg = lab.config();
    let out = lab.run("r", &[BIN, "run", "--config", cfg.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("cannot listen for zebra's FPM connection"), "{err}");
    drop(squatter);

    lab.start();
    let east = lab.ifindex("r-h2");
    let lsp = |l: u32| route(Dest::Label(l), 193, "198.18.10.2", east, &[l + 100]);
    let frames = |routes: &[Route]| -> Vec<u8> {
        routes.iter().flat_map(|r| fpm::frame(&encode::message(r, false))).collect()
    };
    let mut z = lab.zebra();
    send(&mut z, &[(&lsp(100), false)]);
    until("zebra's route", Duration::from_secs(5), || labels(&lab).len() == 1);

    // Another local user, while zebra is connected and while it is away: refused, and
    // never taken for zebra's reconnection (no route of its own, no resync dropping
    // zebra's routes once the stale time is over).
    let injected = frames(&[lsp(102)]);
    let mut impostor = connect_as(&lab, NOBODY, &injected, 1);
    impostor.wait().unwrap();
    drop(z);
    until("zebra gone", Duration::from_secs(5), || lab.frr_counter("connected") == 0);
    // Held past the stale time and the resync's quiet time (1 + 3 s), and one closed at
    // once (its socket's owner is gone before it can be asked).
    let mut impostor = connect_as(&lab, NOBODY, &injected, 5);
    let mut quick = connect_as(&lab, NOBODY, &injected, 0);
    impostor.wait().unwrap();
    quick.wait().unwrap();
    assert_eq!(labels(&lab), [(100, "ldp".to_string())], "an impostor changed the tables");
    assert_eq!((lab.frr_counter("connections"), lab.frr_counter("connected")), (1, 0));
    assert_eq!(lab.frr_counter("refused_owner"), 3);
    assert_eq!(
        lab.log().matches("refused an FPM connection").count(),
        1,
        "logged once per user: {}",
        lab.log()
    );

    // zebra as FRR's packages run it (user frr) is served. FRR 10's SRv6 route between two
    // label routes is skipped and counted; the session goes on and the next route arrives.
    let vpn = route(Dest::Prefix(ip("198.18.70.0"), 24), 20, "198.18.10.2", east, &[]);
    let mut bytes = frames(&[lsp(100), lsp(101)]);
    bytes.extend(fpm::frame(&encode::srv6_message(&vpn, "2001:db8:100::1".parse().unwrap())));
    bytes.extend(frames(&[lsp(103)]));
    let mut zebra = connect_as(&lab, frr_uid, &bytes, 3);
    until("zebra's routes after the SRv6 one", Duration::from_secs(5), || labels(&lab).len() == 3);
    assert_eq!(lab.frr_counter("connected"), 1);
    assert_eq!(lab.frr_counter("unsupported_seg6"), 1);
    assert_eq!(lab.frr_counter("decode_errors"), 0);
    assert!(lab.log().contains("seg6"), "{}", lab.log());
    zebra.wait().unwrap();
}
