//! vmpls's vhost-user ports against a virtio driver that is not QEMU's: DPDK's
//! `dpdk-testpmd` with virtio-user plays both guests of one router.
//!
//! ```text
//! testpmd tx (txonly) -> vhost-user a [ vmpls: push 1002 ] vhost-user b -> testpmd rx
//! ```
//!
//! Checks: the frames testpmd says it sent are the frames port a received, and what port
//! b sent is what the receiving testpmd counted (or dropped under a named counter); a
//! testpmd killed with SIGKILL mid-run and started again reconnects and traffic flows
//! again, the router untouched; static neighbours from the config and from the CLI are
//! the next hops' MACs (testpmd answers no ARP; no ARP request is sent).
//!
//! Needs root, `dpdk-testpmd` (Debian `dpdk-dev`, installed by scripts/test) and 320
//! free 2 MiB hugepages, reserved on top of the machine's count and given back; where
//! they cannot be reserved the test fails and says so. The `vmpls` binary is the one
//! beside `vmpls-tools` (scripts/test builds every binary first).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vmpls_tools::hugepages::Hugepages;
use vmpls_tools::testpmd::{Testpmd, TestpmdOptions};

const MAC_A: &str = "02:00:00:00:aa:01";
const MAC_B: &str = "02:00:00:00:bb:01";
const FILE_NEIGHBOR_MAC: &str = "02:00:00:00:bb:02";
const CLI_NEIGHBOR_MAC: &str = "02:00:00:00:bb:03";

fn vmpls_binary() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_vmpls-tools")).with_file_name("vmpls");
    assert!(
        p.is_file(),
        "no vmpls beside vmpls-tools: build every binary first (cargo build --release --workspace --bins)"
    );
    p
}

/// A router with two vhost-user ports, its work directory and hugepages; all gone on drop.
struct Setup {
    dir: PathBuf,
    router: Child,
    // Dropped after the router and before the directory goes.
    huge: Option<Hugepages>,
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = self.router.kill();
        let _ = self.router.wait();
        drop(self.huge.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Setup {
    fn new(name: &str) -> Setup {
        let dir = std::env::temp_dir().join(format!("vmpls-vhu-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let huge = match Hugepages::reserve(320, &dir.join("huge")) {
            Ok(h) => h,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                panic!("this test runs testpmd, which needs hugepages: {e:#}");
            }
        };
        // `VMPLS_TEST_POLL=interrupt`: the router sleeps on the guests' kicks throughout.
        let poll = std::env::var("VMPLS_TEST_POLL").unwrap_or_else(|_| "adaptive".into());
        let cfg = format!(
            r#"[router]
name = "vhu-test-{name}"
poll = "{poll}"
control-socket = "{dir}/r.ctl"
addresses = ["198.18.255.77"]

[[port]]
name = "a"
kind = "vhost-user"
socket = "{dir}/a.sock"
mac = "{MAC_A}"
addresses = ["198.18.1.1/24"]

[[port]]
name = "b"
kind = "vhost-user"
socket = "{dir}/b.sock"
mac = "{MAC_B}"
addresses = ["198.18.2.1/24"]

[[route]]
prefix = "198.18.20.0/24"
push = [1002]
via = "198.18.2.2"
port = "b"

[[route]]
prefix = "198.18.21.0/24"
push = [1003]
via = "198.18.2.3"
port = "b"

# testpmd answers no ARP.
[[neighbor]]
address = "198.18.2.2"
lladdr = "{FILE_NEIGHBOR_MAC}"
port = "b"
"#,
            dir = dir.display()
        );
        std::fs::write(dir.join("r.toml"), cfg).unwrap();
        let router = Command::new(vmpls_binary())
            .args(["run", "--config"])
            .arg(dir.join("r.toml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("r.log")).unwrap())
            .spawn()
            .expect("starting vmpls");
        let s = Setup { dir, router, huge: Some(huge) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !s.dir.join("b.sock").exists() || !s.dir.join("r.ctl").exists() {
            assert!(Instant::now() < deadline, "vmpls did not start: {}", s.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("r.log")).unwrap_or_default()
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(vmpls_binary())
            .arg("--socket")
            .arg(self.dir.join("r.ctl"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "vmpls {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::from_str(&self.cli(&["-j", "stats"])).unwrap()
    }

    fn rx(&self) -> Testpmd {
        let opts = TestpmdOptions {
            name: "rx".into(),
            lcores: "0@0,1@1".into(),
            vdevs: vec![format!(
                "net_virtio_user1,path={}/b.sock,queues=1,mac={FILE_NEIGHBOR_MAC}",
                self.dir.display()
            )],
            mem_mb: 256,
            args: vec!["--forward-mode=rxonly".into(), "--total-num-mbufs=8192".into()],
            commands: vec![],
        };
        let mut t = Testpmd::start(&self.dir, self.huge.as_ref().unwrap(), &opts).unwrap();
        t.wait_for(Testpmd::READY, Duration::from_secs(30)).unwrap();
        t
    }

    fn tx(&self, dst: &str) -> Testpmd {
        let opts = TestpmdOptions {
            name: "tx".into(),
            lcores: "0@1,1@0".into(),
            vdevs: vec![format!(
                "net_virtio_user0,path={}/a.sock,queues=1,mac=02:00:00:00:aa:02",
                self.dir.display()
            )],
            mem_mb: 256,
            args: vec![
                "--forward-mode=txonly".into(),
                format!("--eth-peer=0,{MAC_A}"),
                format!("--tx-ip=198.18.1.2,{dst}"),
                "--txpkts=64".into(),
                "--total-num-mbufs=8192".into(),
            ],
            commands: vec![],
        };
        let mut t = Testpmd::start(&self.dir, self.huge.as_ref().unwrap(), &opts).unwrap();
        t.wait_for(Testpmd::READY, Duration::from_secs(30)).unwrap();
        t
    }

    /// Waits until port a has received more than `than` frames.
    fn wait_rx_above(&self, than: u64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while counter(&self.stats(), "a", "rx_packets") <= than {
            assert!(Instant::now() < deadline, "no frames reached port a:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The destination MACs of the next `n` frames port b sends (`vmpls capture`).
    fn capture_b(&self, n: usize) -> Vec<String> {
        let file = self.dir.join("b.pcap");
        let mut c = Command::new(vmpls_binary())
            .arg("--socket")
            .arg(self.dir.join("r.ctl"))
            .args(["capture", "b", "-c", &n.to_string(), "-w"])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while c.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                panic!("capturing {n} frames on port b took more than 10 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        pcap_destinations(&std::fs::read(&file).unwrap())
    }
}

fn pcap_destinations(pcap: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let len = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &pcap[at + 16..(at + 16 + len).min(pcap.len())];
        if frame.len() >= 6 {
            let m: Vec<String> = frame[..6].iter().map(|b| format!("{b:02x}")).collect();
            out.push(m.join(":"));
        }
        at += 16 + len;
    }
    out
}

fn counter(stats: &serde_json::Value, port: &str, key: &str) -> u64 {
    stats["ports"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == port))
        .and_then(|p| p[key].as_u64())
        .unwrap_or(0)
}

fn named(stats: &serde_json::Value, list: &str, name: &str) -> u64 {
    stats[list]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .and_then(|c| c["value"].as_u64())
        .unwrap_or(0)
}

fn drops_total(stats: &serde_json::Value) -> u64 {
    stats["drops"].as_array().into_iter().flatten().filter_map(|d| d["value"].as_u64()).sum()
}

/// One run: testpmd sends for `secs`, stops; the counts on both sides must agree.
fn counted_run(s: &Setup, dst: &str, secs: u64) {
    let before = s.stats();
    let rx = s.rx();
    let tx = s.tx(dst);
    s.wait_rx_above(counter(&before, "a", "rx_packets"));
    std::thread::sleep(Duration::from_secs(secs));
    let sent = tx.stop().unwrap()[&0];
    // The router drains what testpmd left in the ring.
    std::thread::sleep(Duration::from_millis(1000));
    let after = s.stats();
    let received = rx.stop().unwrap()[&0];
    let d = |port: &str, key: &str| counter(&after, port, key) - counter(&before, port, key);
    assert!(sent.tx_packets > 10_000, "testpmd sent only {} frames", sent.tx_packets);
    assert_eq!(d("a", "rx_packets"), sent.tx_packets, "port a received what testpmd sent\n{}", s.log());
    let pipeline_drops = drops_total(&after) - drops_total(&before);
    assert_eq!(
        d("a", "rx_packets"),
        d("b", "tx_packets") + d("b", "tx_dropped") + pipeline_drops,
        "every frame in is out at b or dropped under a named counter"
    );
    assert_eq!(pipeline_drops, 0, "nothing dropped in the pipeline: {after}");
    assert_eq!(d("b", "tx_packets"), received.rx_packets, "testpmd received what port b sent");
    assert!(received.rx_packets > 1000, "testpmd received only {} frames", received.rx_packets);
}

#[test]
fn testpmd_counts_agree_with_the_router_and_a_killed_testpmd_reconnects() {
    let mut s = Setup::new("count");
    counted_run(&s, "198.18.20.2", 3);

    // Both guests killed mid-run (no goodbye on the vhost-user socket).
    let rx = s.rx();
    let tx = s.tx("198.18.20.2");
    s.wait_rx_above(counter(&s.stats(), "a", "rx_packets"));
    tx.kill().unwrap();
    rx.kill().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.log().matches("vhost-user frontend gone").count()
        + s.log().matches("frontend disconnected").count()
        < 4
    {
        assert!(Instant::now() < deadline, "vmpls did not see the killed testpmds go:\n{}", s.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Started again: the same router takes them and counts agree again.
    counted_run(&s, "198.18.20.2", 2);
    assert!(s.router_alive(), "the router kept running");
    let st = s.stats();
    assert_eq!(named(&st, "events", "arp_request_sent"), 0, "testpmd answers no ARP; none was needed");
}

#[test]
fn static_neighbours_from_config_and_cli_are_the_next_hops_of_testpmd() {
    let s = Setup::new("neigh");
    s.cli(&["neigh", "add", "198.18.2.3", "lladdr", CLI_NEIGHBOR_MAC, "dev", "b"]);
    let shown = s.cli(&["neigh", "show"]);
    assert!(shown.contains("198.18.2.2") && shown.contains("198.18.2.3"), "{shown}");
    assert_eq!(shown.matches("PERMANENT").count(), 2, "{shown}");
    for (dst, mac) in [("198.18.20.2", FILE_NEIGHBOR_MAC), ("198.18.21.3", CLI_NEIGHBOR_MAC)] {
        let rx = s.rx();
        let tx = s.tx(dst);
        s.wait_rx_above(0);
        let macs = s.capture_b(3);
        drop(tx);
        drop(rx);
        assert_eq!(macs, vec![mac.to_string(); 3], "frames toward {dst} go to its static neighbour");
    }
    let st = s.stats();
    assert_eq!(named(&st, "events", "arp_request_sent"), 0, "no ARP request for static neighbours");
    assert_eq!(named(&st, "drops", "neighbor_unresolved"), 0);
}

impl Setup {
    fn router_alive(&mut self) -> bool {
        matches!(self.router.try_wait(), Ok(None))
    }
}
