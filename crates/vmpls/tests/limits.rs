//! The `[limits]` of the config against a running router: ICMP errors and ARP requests
//! it originates stay within their token buckets on the wire, what it does not send is
//! counted, the neighbour table and the frames held while resolving stay within their
//! bounds during a scan of a connected /16, and good traffic keeps flowing meanwhile.
//! Needs root (namespaces, AF_PACKET) and tshark.
//!
//! The lab: a -- r -- b, with vmpls on r. a is 198.18.1.2/24 behind r's port "a"; b is
//! 198.19.0.2 on r's connected 198.19.0.0/16 (port "b"), where every other address is
//! silent.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use vmpls_lab::capture::{Capture, tshark_fields};
use vmpls_lab::inject::{ETHERTYPE_IPV4, ethernet, interface_mac, ipv4_udp, send_frames};
use vmpls_lab::ping::{PingOptions, ping};
use vmpls_lab::topology::HostOptions;
use vmpls_lab::{IpPrefix, Topology};

use common::{WorkDir, output_text, router_binary};

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
const B: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 2);
/// r's address on b's subnet: the sender of its ARP requests there.
const R_B: &str = "198.19.0.1";

/// The lab with one router; dropping it stops the router and removes the namespaces
/// (also when a test panics), then the work directory (kept on failure).
struct LimitLab {
    topo: Topology,
    work: WorkDir,
    socket: PathBuf,
    config: PathBuf,
}

impl LimitLab {
    /// Builds a -- r -- b and starts vmpls on r with `limits` as its `[limits]` table.
    fn start(tag: &str, limits: &str) -> LimitLab {
        vmpls_lab::require_root().expect("this test needs root");
        let work = WorkDir::new(tag);
        let mut topo = Topology::new();
        topo.add_host("a").unwrap();
        topo.add_host_with("r", HostOptions { ipv6: false }).unwrap();
        topo.add_host("b").unwrap();
        topo.add_link("a", "a-r", "r", "r-a", 1500).unwrap();
        topo.add_link("r", "r-b", "b", "b-r", 1500).unwrap();
        let prefix = |s: &str| s.parse::<IpPrefix>().unwrap();
        topo.add_address("a", "a-r", prefix("198.18.1.2/24")).unwrap();
        topo.add_default_route("a", "198.18.1.1".parse().unwrap()).unwrap();
        topo.add_address("b", "b-r", prefix("198.19.0.2/16")).unwrap();
        topo.add_default_route("b", R_B.parse().unwrap()).unwrap();
        let socket = work.path().join("r.sock");
        let config = work.path().join("r.toml");
        let mut lab = LimitLab { topo, work, socket, config };
        lab.write_config(limits);
        lab.start_router();
        lab
    }

    fn write_config(&self, limits: &str) {
        let text = format!(
            "[router]\nname = \"r\"\nfast-path = \"off\"\ncontrol-socket = \"{}\"\naddresses = [\"198.18.255.1\"]\n\n\
             [[port]]\nname = \"a\"\ninterface = \"r-a\"\naddresses = [\"198.18.1.1/24\"]\n\n\
             [[port]]\nname = \"b\"\ninterface = \"r-b\"\naddresses = [\"{R_B}/16\"]\n\n\
             [limits]\n{limits}\n",
            self.socket.display()
        );
        std::fs::write(&self.config, text).unwrap();
    }

    fn start_router(&mut self) {
        let log = self.work.path().join("r.log");
        let out = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(router_binary());
        cmd.arg("run")
            .arg("--config")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        self.topo.spawn("r", "vmpls", cmd, Some(log)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.cli(&["link", "show"]).status.success() {
            if let Some(c) = self.topo.exited_child() {
                panic!("vmpls exited ({}):\n{}", c.status, self.log());
            }
            assert!(Instant::now() < deadline, "vmpls did not answer on its socket:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.work.path().join("r.log")).unwrap_or_default()
    }

    fn ns(&self, host: &str) -> String {
        self.topo.ns(host).unwrap().to_string()
    }

    /// `vmpls --socket SOCKET ARGS...`.
    fn cli(&self, args: &[&str]) -> Output {
        Command::new(router_binary())
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("running the vmpls CLI")
    }

    /// `vmpls -j stats`.
    fn stats(&self) -> Value {
        let out = self.cli(&["-j", "stats"]);
        assert!(out.status.success(), "vmpls stats: {}", output_text(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Pings b from a.
    fn ping_b(&self, count: u32, interval: Duration) -> (u32, u32) {
        let opts = PingOptions { count, interval, timeout: Duration::from_secs(1), ..PingOptions::default() };
        let r = ping(&self.ns("a"), IpAddr::V4(B), &opts).unwrap();
        (r.sent, r.received)
    }

    /// Frames from a to r (on a's link) carrying UDP packets from a to each of `dsts`
    /// with `ttl`.
    fn frames_from_a(&self, dsts: &[Ipv4Addr], ttl: u8) -> Vec<Vec<u8>> {
        let r_mac = interface_mac(&self.ns("r"), "r-a").unwrap();
        let a_mac = interface_mac(&self.ns("a"), "a-r").unwrap();
        dsts.iter()
            .map(|d| ethernet(r_mac, a_mac, ETHERTYPE_IPV4, &ipv4_udp(A, *d, ttl, 40000, 9, &[0x5a; 32])))
            .collect()
    }
}

/// A counter of `vmpls -j stats`: `table` is "drops" or "events".
fn counter(stats: &Value, table: &str, name: &str) -> u64 {
    stats[table]
        .as_array()
        .and_then(|l| l.iter().find(|c| c["name"] == name))
        .and_then(|c| c["value"].as_u64())
        .unwrap_or_else(|| panic!("no {table} counter {name} in {stats}"))
}

fn delta(after: &Value, before: &Value, table: &str, name: &str) -> u64 {
    counter(after, table, name) - counter(before, table, name)
}

#[test]
fn icmp_errors_stay_within_the_configured_rate_and_the_rest_are_counted() {
    const RATE: f64 = 10.0;
    const BURST: f64 = 10.0;
    const FLOOD: u64 = 500;
    let lab = LimitLab::start("limits-icmp", "icmp-rate = 10");
    assert_eq!(lab.ping_b(3, Duration::from_millis(100)).1, 3, "a reaches b:\n{}", lab.log());
    // The bucket has refilled from the ICMP errors nothing sent so far: it is full.
    let before = lab.stats();
    let pcap = lab.work.path().join("a.pcap");
    let cap = Capture::start(&lab.ns("a"), "a-r", &pcap, Some("icmp")).unwrap();

    // 500 packets whose TTL runs out at r, as fast as the socket takes them (in batches
    // of 50 so that r's receive buffer never overflows).
    let frames = lab.frames_from_a(&[B; FLOOD as usize], 1);
    let t0 = Instant::now();
    for batch in frames.chunks(50) {
        send_frames(&lab.ns("a"), "a-r", batch).unwrap();
    }
    let sent_in = t0.elapsed();
    // Until r has seen them all: the replies all go out before then.
    let deadline = Instant::now() + Duration::from_secs(5);
    let after = loop {
        let s = lab.stats();
        if delta(&s, &before, "drops", "ip_ttl_expired") >= FLOOD {
            break s;
        }
        assert!(Instant::now() < deadline, "r did not see the {FLOOD} packets: {s}\n{}", lab.log());
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = t0.elapsed().as_secs_f64();
    let pcap = cap.stop().unwrap();
    let replies =
        tshark_fields(&pcap, "icmp.type == 11", &["ip.src"], Duration::from_secs(30)).unwrap().len() as u64;

    let sent = delta(&after, &before, "events", "icmp_time_exceeded_sent");
    let suppressed = delta(&after, &before, "drops", "icmp_suppressed");
    eprintln!(
        "{FLOOD} TTL-1 packets sent in {sent_in:?}, all seen within {elapsed:.3} s: \
         {replies} time exceeded on the wire, {sent} counted sent, {suppressed} suppressed"
    );
    assert_eq!(delta(&after, &before, "drops", "ip_ttl_expired"), FLOOD);
    assert_eq!(replies, sent, "every error counted as sent is on the wire");
    assert_eq!(sent + suppressed, FLOOD, "every packet got an error or was counted as suppressed");
    assert!(replies >= BURST as u64, "the burst goes out: {replies}");
    let most = (BURST + RATE * elapsed).floor() as u64 + 1;
    assert!(replies <= most, "{replies} errors in {elapsed:.3} s: more than burst + rate x time ({most})");

    // The limits are fixed at start: a reload that changes them says so and changes
    // nothing.
    lab.write_config("icmp-rate = 100");
    let out = lab.cli(&["reload"]);
    let text = output_text(&out);
    assert!(!out.status.success(), "reload accepted a limits change: {text}");
    assert!(
        text.contains("[limits] changed: icmp-rate (10 -> 100), icmp-burst (10 -> 100)")
            && text.contains("restart"),
        "{text}"
    );
}

#[test]
fn a_scan_of_a_connected_subnet_stays_within_the_neighbor_limits() {
    const RATE: f64 = 5.0;
    const BURST: f64 = 5.0;
    const ENTRIES: u64 = 64;
    const HELD_TOTAL: u64 = 16;
    const HOSTS: u64 = 200;
    let lab = LimitLab::start(
        "limits-neigh",
        "neighbor-request-rate = 5\nneighbor-entries = 64\nneighbor-held-per-address = 2\nneighbor-held-total = 16",
    );
    assert_eq!(lab.ping_b(3, Duration::from_millis(100)).1, 3, "a reaches b:\n{}", lab.log());
    // Let the request bucket fill up again (one request went to b).
    std::thread::sleep(Duration::from_millis(1200));
    let before = lab.stats();
    let pcap = lab.work.path().join("b.pcap");
    let cap = Capture::start(&lab.ns("b"), "b-r", &pcap, Some("arp")).unwrap();

    // Good traffic meanwhile: a pings b (resolved) through the scan.
    let ns_a = lab.ns("a");
    let pinger = std::thread::spawn(move || {
        let opts = PingOptions {
            count: 30,
            interval: Duration::from_millis(100),
            timeout: Duration::from_secs(1),
            ..PingOptions::default()
        };
        ping(&ns_a, IpAddr::V4(B), &opts)
    });

    // The scan: one packet to each of 200 silent addresses of 198.19.0.0/16, in 20
    // batches 50 ms apart (about 1.5 s: less than the 3 s an unanswered entry lives, so
    // every frame held is still held at the end of the scan).
    let dsts: Vec<Ipv4Addr> =
        (0..HOSTS as u32).map(|i| Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 1, 0)) + i)).collect();
    let frames = lab.frames_from_a(&dsts, 64);
    let t0 = Instant::now();
    let mut most_entries = 0;
    for batch in frames.chunks(10) {
        send_frames(&lab.ns("a"), "a-r", batch).unwrap();
        let s = lab.stats();
        most_entries = most_entries.max(s["neighbors"].as_u64().unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Until every entry of the scan has given up (3 tries a second apart).
    while t0.elapsed() < Duration::from_secs(6) {
        let s = lab.stats();
        most_entries = most_entries.max(s["neighbors"].as_u64().unwrap());
        std::thread::sleep(Duration::from_millis(200));
    }
    let after = lab.stats();
    let elapsed = t0.elapsed().as_secs_f64();
    let pcap = cap.stop().unwrap();
    let pinged = pinger.join().unwrap().unwrap();

    let requests = tshark_fields(
        &pcap,
        &format!("arp.opcode == 1 && arp.src.proto_ipv4 == {R_B}"),
        &["arp.dst.proto_ipv4"],
        Duration::from_secs(30),
    )
    .unwrap();
    let to_scanned = requests.iter().filter(|r| r[0].starts_with("198.19.1.")).count() as u64;
    let on_wire = requests.len() as u64;
    let counted = delta(&after, &before, "events", "arp_request_sent");
    let suppressed = delta(&after, &before, "drops", "neighbor_request_suppressed");
    let unresolved = delta(&after, &before, "drops", "neighbor_unresolved");
    let refused = delta(&after, &before, "drops", "neighbor_queue_full");
    eprintln!(
        "scan of {HOSTS} addresses over {elapsed:.2} s: {on_wire} ARP requests on the wire ({to_scanned} for \
         scanned addresses), {counted} counted sent, {suppressed} suppressed; frames held then given up \
         {unresolved}, refused {refused}; at most {most_entries} neighbour entries; ping {}/{}",
        pinged.received, pinged.sent
    );
    assert_eq!(on_wire, counted, "every request counted as sent is on the wire");
    assert_eq!(to_scanned, on_wire, "no other address was asked for");
    let most = (BURST + RATE * elapsed).floor() as u64 + 1;
    assert!(on_wire <= most, "{on_wire} requests in {elapsed:.2} s: more than burst + rate x time ({most})");
    assert!(on_wire >= BURST as u64, "the burst goes out: {on_wire}");
    assert!(suppressed > 0, "the scan asked for more than the rate");
    assert!(most_entries <= ENTRIES, "the neighbour table grew to {most_entries} entries");
    assert_eq!(unresolved + refused, HOSTS, "each frame of the scan was held or refused");
    assert!(unresolved <= HELD_TOTAL, "{unresolved} frames held at once, more than neighbor-held-total");
    assert!(unresolved > 0, "frames were held while resolving");
    assert_eq!(after["neighbors"].as_u64(), Some(2), "only a and b are left: {after}");
    assert_eq!((pinged.sent, pinged.received), (30, 30), "a's pings to b during the scan: {pinged:?}");
}
