//! A three-site VPLS (RFC 4762) of static pseudowires between three vmpls PEs, a full
//! mesh over direct core links, kernel CE hosts in one subnet on the attachment circuits
//! (two at pe1): ping between every pair, a broadcast ARP request reaching every other
//! CE once, a frame to an unknown MAC flooded to every other CE exactly once (split
//! horizon: pe1 does not relay what pe2 sent it to pe3, or it would arrive twice), the
//! MACs in `bridge fdb show` on the right attachment circuit or pseudowire (text and
//! `-j`), the MAC limit counted, a MAC moving to another site and back, a broadcast
//! storm held to pe2's flood rate while known unicast crosses, and an attachment circuit
//! going down withdrawing its MACs. Needs root.
//!
//! ```text
//!   ce1a (.11) ─┐                               198.18.50.0/24 across
//!   ce1b (.12) ─┴ pe1 [198.18.255.1] ── 198.18.62.0/24 ── pe2 [.2] ── ce2 (.2)
//!                  │  198.18.63.0/24              │ 198.18.64.0/24
//!                  └────────────── pe3 [.3] ──────┘
//!                                   └── ce3 (.3)
//! pseudowire label from pe A to pe B: 1000 + 10 * A + B (pushed by A, popped by B)
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vmpls_lab::inject::{self, SniffFilter, Sniffer};
use vmpls_lab::ping::{PingOptions, ping};
use vmpls_lab::topology::{HostOptions, Topology};

/// The core link between PEs `a` < `b`: its subnet's third octet.
fn core_net(a: u8, b: u8) -> u8 {
    match (a, b) {
        (1, 2) => 62,
        (1, 3) => 63,
        _ => 64,
    }
}

fn config(me: u8, socket: &Path, mac_limit: u32, flood_rate: u32) -> String {
    let mut c = format!(
        r#"[router]
name = "pe{me}"
control-socket = "{socket}"
addresses = ["198.18.255.{me}"]
fast-path = "off"
"#,
        socket = socket.display()
    );
    let acs: Vec<String> = if me == 1 { vec!["ce1a".into(), "ce1b".into()] } else { vec![format!("ce{me}")] };
    for ac in &acs {
        c += &format!("\n[[port]]\nname = \"{ac}\"\ninterface = \"pe{me}-{ac}\"\n");
    }
    for peer in [1u8, 2, 3].into_iter().filter(|&p| p != me) {
        let net = core_net(me.min(peer), me.max(peer));
        c += &format!(
            "\n[[port]]\nname = \"to-pe{peer}\"\ninterface = \"pe{me}-pe{peer}\"\naddresses = [\"198.18.{net}.{me}/24\"]\n\
             \n[[route]]\nprefix = \"198.18.255.{peer}/32\"\nvia = \"198.18.{net}.{peer}\"\nport = \"to-pe{peer}\"\n"
        );
    }
    let quoted: Vec<String> = acs.iter().map(|a| format!("\"{a}\"")).collect();
    c += &format!(
        "\n[[vpls]]\nname = \"blue\"\nattachments = [{}]\nmac-limit = {mac_limit}\nmac-aging = 300\nflood-rate = {flood_rate}\n",
        quoted.join(", ")
    );
    for peer in [1u8, 2, 3].into_iter().filter(|&p| p != me) {
        c += &format!(
            "\n[[vpls.pseudowire]]\nname = \"blue-pe{peer}\"\nlocal-label = {}\nremote-label = {}\npeer = \"198.18.255.{peer}\"\n",
            1000 + 10 * u32::from(peer) + u32::from(me),
            1000 + 10 * u32::from(me) + u32::from(peer),
        );
    }
    c
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

fn json(socket: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["-j"];
    all.extend_from_slice(args);
    serde_json::from_str(&ok(socket, &all)).unwrap()
}

/// A counter of `vmpls -j stats` (drops and events by name), 0 when absent.
fn counter(socket: &Path, name: &str) -> u64 {
    let stats: vmpls_control::api::Stats = serde_json::from_value(json(socket, &["stats"])).unwrap();
    stats.drop(name).or(stats.event(name)).unwrap_or(0)
}

/// pe2's `flood-rate`, frames a second.
const FLOOD_RATE: u32 = 200;

/// The CEs: (host, interface, address).
const CES: [(&str, &str, &str); 4] = [
    ("ce1a", "ce1a-pe", "198.18.50.11"),
    ("ce1b", "ce1b-pe", "198.18.50.12"),
    ("ce2", "ce2-pe", "198.18.50.2"),
    ("ce3", "ce3-pe", "198.18.50.3"),
];

/// Sends `frames` from CE `from` and returns how many frames carrying `marker` each CE
/// received.
fn delivered(topo: &Topology, from: usize, frames: &[Vec<u8>], marker: &[u8]) -> Vec<usize> {
    let sniffers: Vec<Sniffer> = CES
        .iter()
        .map(|(h, i, _)| Sniffer::start(topo.ns(h).unwrap(), i, SniffFilter::All).unwrap())
        .collect();
    let (h, i, _) = CES[from];
    inject::send_frames(topo.ns(h).unwrap(), i, frames).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    sniffers
        .into_iter()
        .map(|s| {
            s.stop().unwrap().iter().filter(|f| f.frame.windows(marker.len()).any(|w| w == marker)).count()
        })
        .collect()
}

#[test]
fn static_vpls_of_three_pes_bridges_learns_floods_with_split_horizon_and_withdraws() {
    vmpls_lab::require_root().expect("needs root");
    let started = Instant::now();
    let work = WorkDir(std::env::temp_dir().join(format!("vmpls-vpls-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&work.0);
    std::fs::create_dir_all(&work.0).unwrap();
    let mut topo = Topology::new();
    for h in ["pe1", "pe2", "pe3", "ce1a", "ce1b", "ce2", "ce3"] {
        topo.add_host_with(h, HostOptions { ipv6: false }).unwrap();
    }
    for (pe, ce) in [("pe1", "ce1a"), ("pe1", "ce1b"), ("pe2", "ce2"), ("pe3", "ce3")] {
        topo.add_link(ce, &format!("{ce}-pe"), pe, &format!("{pe}-{ce}"), 1500).unwrap();
    }
    for (a, b) in [("pe1", "pe2"), ("pe1", "pe3"), ("pe2", "pe3")] {
        topo.add_link(a, &format!("{a}-{b}"), b, &format!("{b}-{a}"), 1600).unwrap();
    }
    for (h, i, a) in CES {
        topo.add_address(h, i, format!("{a}/24").parse().unwrap()).unwrap();
    }

    // pe1 learns at most 4 MACs: its two CEs and two remote ones.
    let mut sockets = Vec::new();
    for me in 1u8..=3 {
        let name = format!("pe{me}");
        let socket = work.0.join(format!("{name}.ctl"));
        let cfg = work.0.join(format!("{name}.toml"));
        // pe2 floods at most FLOOD_RATE frames a second (the storm below comes from ce2).
        let (limit, rate) = if me == 1 { (4, 0) } else { (100, if me == 2 { FLOOD_RATE } else { 0 }) };
        std::fs::write(&cfg, config(me, &socket, limit, rate)).unwrap();
        let log = work.0.join(format!("{name}.log"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vmpls"));
        cmd.arg("run")
            .arg("--config")
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        topo.spawn(&name, "vmpls", cmd, Some(log.clone())).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cli(&socket, &["link", "show"]).status.success() {
            assert!(topo.exited_child().is_none(), "vmpls exited:\n{}", Topology::log_tail(&log, 30));
            assert!(Instant::now() < deadline, "vmpls did not answer:\n{}", Topology::log_tail(&log, 30));
            std::thread::sleep(Duration::from_millis(50));
        }
        sockets.push(socket);
    }

    // Every pseudowire up, with its labels.
    for (i, s) in sockets.iter().enumerate() {
        let v = json(s, &["vpls", "show"]);
        assert_eq!(v[0]["name"], "blue", "{v}");
        let pws = v[0]["pseudowires"].as_array().unwrap();
        assert_eq!(pws.len(), 2, "{v}");
        assert!(pws.iter().all(|p| p["up"] == true), "pe{}: {v}", i + 1);
    }

    // Ping between every pair of CEs (ARP first, broadcast across the VPLS).
    let opts = PingOptions {
        count: 2,
        interval: Duration::from_millis(100),
        timeout: Duration::from_secs(2),
        ..PingOptions::default()
    };
    for (i, (h, _, _)) in CES.iter().enumerate() {
        for (_, _, dst) in &CES[i + 1..] {
            let r = ping(topo.ns(h).unwrap(), dst.parse().unwrap(), &opts).expect("ping");
            assert_eq!(r.received, 2, "{h} -> {dst}: {r:?}\n{}", ok(&sockets[0], &["stats"]));
        }
    }

    // The MACs where they are: at pe1, ce1a and ce1b on their ports, ce2 and ce3 behind
    // their pseudowires; the limit of 4 is full.
    let macs: Vec<[u8; 6]> =
        CES.iter().map(|(h, i, _)| inject::interface_mac(topo.ns(h).unwrap(), i).unwrap()).collect();
    let text = ok(&sockets[0], &["bridge", "fdb", "show"]);
    let mac = |i: usize| vmpls_wire::ethernet::Address(macs[i]).to_string();
    for (i, dev) in [(0, "dev ce1a"), (1, "dev ce1b"), (2, "pw blue-pe2"), (3, "pw blue-pe3")] {
        assert!(text.contains(&format!("{} {dev} master blue\n", mac(i))), "{} {dev}:\n{text}", mac(i));
    }
    let v = json(&sockets[2], &["bridge", "fdb", "show", "vpls", "blue"]);
    let ce3 = v.as_array().unwrap().iter().find(|e| e["mac"] == mac(3).as_str()).expect("ce3 at pe3");
    assert_eq!((ce3["ifname"].as_str(), ce3["master"].as_str()), (Some("ce3"), Some("blue")), "{v}");
    let ce1a = v.as_array().unwrap().iter().find(|e| e["mac"] == mac(0).as_str()).expect("ce1a at pe3");
    assert_eq!(ce1a["pw"], "blue-pe1", "{v}");
    assert!(!cli(&sockets[0], &["bridge", "fdb", "show", "vpls", "red"]).status.success());

    // A broadcast ARP request from ce2 reaches every other CE once, not itself.
    let me = macs[2];
    let arp_req = |target: [u8; 4]| {
        let a = inject::arp(inject::ARP_REQUEST, me, [198, 18, 50, 2].into(), [0; 6], target.into());
        inject::ethernet([0xff; 6], me, 0x0806, &a)
    };
    let got = delivered(&topo, 2, &[arp_req([198, 18, 50, 99])], &[198, 18, 50, 99]);
    assert_eq!(got, vec![1, 1, 0, 1], "broadcast ARP per CE");

    // A frame to a MAC no one has: flooded, each other CE gets it exactly once (pe1 gets
    // it from pe2 and does not send it on to pe3: split horizon). 20 of them, marked.
    let marker = *b"vmpls-vpls-flood";
    let unknown = [0x02, 0x5e, 0, 0, 0, 0x99];
    let frames: Vec<Vec<u8>> = (0..20u8)
        .map(|i| {
            let mut p = marker.to_vec();
            p.push(i);
            p.resize(46, 0);
            inject::ethernet(unknown, me, 0x88b5, &p)
        })
        .collect();
    let flooded_before = counter(&sockets[0], "vpls_flooded");
    let got = delivered(&topo, 2, &frames, &marker);
    assert_eq!(got, vec![20, 20, 0, 20], "unknown unicast per CE");
    assert!(counter(&sockets[0], "vpls_flooded") >= flooded_before + 20);

    // A fifth MAC at pe1 (ce1b speaking from another address) is over the limit: counted,
    // not learned, its frame still delivered.
    let stranger = [0x02, 0x5e, 0, 0, 0, 0x42];
    let a = inject::arp(
        inject::ARP_REQUEST,
        stranger,
        [198, 18, 50, 42].into(),
        [0; 6],
        [198, 18, 50, 98].into(),
    );
    let got = delivered(&topo, 1, &[inject::ethernet([0xff; 6], stranger, 0x0806, &a)], &[198, 18, 50, 98]);
    assert_eq!(got, vec![1, 0, 1, 1], "broadcast from an unlearned MAC still flooded");
    assert!(counter(&sockets[0], "vpls_mac_limit") >= 1);
    let text = ok(&sockets[0], &["bridge", "fdb", "show"]);
    assert!(!text.contains("02:5e:00:00:00:42"), "{text}");
    let v = json(&sockets[0], &["vpls", "show"]);
    assert_eq!((v[0]["macs"].as_u64(), v[0]["mac-limit"].as_u64()), (Some(4), Some(4)), "{v}");

    // ce2's MAC speaks from ce3's site: it moves, at pe1, to the pseudowire to pe3; when
    // ce2 speaks again from its own site it moves back.
    let moved_before = counter(&sockets[0], "vpls_mac_moved");
    let from_ce3 =
        inject::ethernet([0xff; 6], macs[2], 0x88b5, b"vmpls-vpls-mac-move-0123456789abcdefghijklmnopqr");
    inject::send_frames(topo.ns("ce3").unwrap(), "ce3-pe", &[from_ce3]).unwrap();
    let where_is_ce2 = |want: &str| {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let text = ok(&sockets[0], &["bridge", "fdb", "show"]);
            if text.contains(&format!("{} {want} master blue\n", mac(2))) {
                return;
            }
            assert!(Instant::now() < deadline, "ce2's MAC not on {want} at pe1:\n{text}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    where_is_ce2("pw blue-pe3");
    assert!(counter(&sockets[0], "vpls_mac_moved") > moved_before);
    let r = ping(topo.ns("ce2").unwrap(), "198.18.50.11".parse().unwrap(), &opts).expect("ping");
    assert_eq!(r.received, 2, "ce2 after its MAC came back: {r:?}");
    where_is_ce2("pw blue-pe2");

    // A broadcast storm from ce2: pe2 floods at most FLOOD_RATE a second (and a bucket
    // of as many), counts the rest as vpls_flood_rate, and ce2's known unicast to ce1a
    // keeps crossing meanwhile.
    const STORM: usize = 20_000;
    let storm_marker = *b"vmpls-vpls-storm";
    let storm: Vec<Vec<u8>> = (0..STORM)
        .map(|i| {
            let mut p = storm_marker.to_vec();
            p.extend_from_slice(&(i as u32).to_be_bytes());
            p.resize(46, 0);
            inject::ethernet([0xff; 6], macs[2], 0x88b5, &p)
        })
        .collect();
    let limited_before = counter(&sockets[1], "vpls_flood_rate");
    let storm_start = Instant::now();
    let pinger = {
        let ns = topo.ns("ce2").unwrap().to_string();
        std::thread::spawn(move || {
            let opts = PingOptions {
                count: 20,
                interval: Duration::from_millis(20),
                timeout: Duration::from_secs(2),
                ..PingOptions::default()
            };
            ping(&ns, "198.18.50.11".parse().unwrap(), &opts).expect("ping")
        })
    };
    let got = delivered(&topo, 2, &storm, &storm_marker);
    let storm_s = storm_start.elapsed().as_secs_f64();
    let during = pinger.join().unwrap();
    let limited = counter(&sockets[1], "vpls_flood_rate") - limited_before;
    eprintln!(
        "storm of {STORM} broadcasts from ce2 in {storm_s:.2} s: delivered {got:?}, {limited} over the rate"
    );
    let most = (f64::from(FLOOD_RATE) * (1.0 + storm_s)) as usize + 10;
    for (i, (h, _, _)) in CES.iter().enumerate().filter(|(i, _)| *i != 2) {
        assert!(got[i] >= 1 && got[i] <= most, "{h} got {} of the storm, at most {most} allowed", got[i]);
    }
    assert!(limited as usize >= STORM - most, "pe2 counted {limited} floods over the rate");
    assert!(during.received >= 18, "ce2's unicast to ce1a during the storm: {during:?}");

    // ce1b's link goes down: pe1 withdraws its MAC and shows the circuit down.
    topo.set_up("ce1b", "ce1b-pe", false).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while ok(&sockets[0], &["bridge", "fdb", "show"]).contains(&format!("{} dev ce1b", mac(1))) {
        assert!(Instant::now() < deadline, "ce1b's MAC not withdrawn");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(counter(&sockets[0], "vpls_mac_withdrawn") >= 1);
    let v = json(&sockets[0], &["vpls", "show"]);
    let att = v[0]["attachments"].as_array().unwrap();
    assert!(att.iter().any(|a| a["port"] == "ce1b" && a["up"] == false), "{v}");
    let text = ok(&sockets[0], &["vpls", "show"]);
    assert!(text.contains("attachment ce1b down"), "{text}");
    // The others still talk.
    let r = ping(topo.ns("ce3").unwrap(), "198.18.50.11".parse().unwrap(), &opts).expect("ping");
    assert_eq!(r.received, 2, "{r:?}");
    assert!(topo.exited_child().is_none(), "a router exited");
    eprintln!("VPLS test: {:.1} s", started.elapsed().as_secs_f64());
}
