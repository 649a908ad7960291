//! Shared pieces of the integration tests: the seed lab (ce1 -- pe1 -- p -- pe2 -- ce2)
//! with three real `vmpls run` processes writing stats files, a work directory kept
//! for inspection when a test fails, and checks on the routers' counters.
//!
//! Each test builds its own lab (namespaces named `vl<pid>-<n>-<host>`, unique per
//! process and lab) and the lab's `Drop` stops the routers and removes the namespaces,
//! also when the test panics.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use vmpls_lab::ping::{PingOptions, PingResult, ping};
use vmpls_lab::seed::{SeedLab, SeedParams};
use vmpls_lab::stats::RouterStats;
use vmpls_lab::traffic::{FlowOptions, FlowResult, Limit, run_flow};

/// ce1's addresses.
pub const CE1_V4: &str = "198.18.1.2";
pub const CE1_V6: &str = "2001:db8:1::2";
/// ce2's addresses.
pub const CE2_V4: &str = "198.18.2.2";
pub const CE2_V6: &str = "2001:db8:2::2";
/// The routers' own addresses (the source of the ICMP they send).
pub const PE1_V4: &str = "198.18.255.1";
pub const P_V4: &str = "198.18.255.2";
pub const PE2_V4: &str = "198.18.255.3";
pub const PE1_V6: &str = "2001:db8:ff::1";
pub const P_V6: &str = "2001:db8:ff::2";
pub const PE2_V6: &str = "2001:db8:ff::3";

/// The routers of the seed lab, in start order.
pub const ROUTERS: [&str; 3] = ["pe1", "p", "pe2"];

pub use vmpls_lab::stats::BACKGROUND_DROPS;

/// Drops tolerated under sustained load: none. (`no_buffer` was, until the pipeline
/// learnt to hand control back to the loop when the pool runs low; keep this list empty
/// so every test is strict about it.)
pub const LOAD_DROPS: &[&str] = &[];

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// The address of a prefix written `ADDRESS/LENGTH` (the seed lab's constants).
pub fn host_of(prefix: &str) -> IpAddr {
    ip(prefix.split('/').next().unwrap_or(prefix))
}

/// A content-checked TCP flow of `bytes` from host `from` to `to` (an address of
/// `to_host`, as a prefix); panics with the routers' logs if it fails.
pub fn content_checked_flow(lab: &SeedLab, from: &str, to_host: &str, to: &str, bytes: u64) {
    use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};
    let opts = FlowOptions { limit: Limit::Bytes(bytes), ..FlowOptions::default() };
    let topo = lab.topology();
    let r = run_flow(topo.ns(from).unwrap(), topo.ns(to_host).unwrap(), host_of(to), &opts, &mut |_| {})
        .unwrap_or_else(|e| panic!("flow {from} -> {to}: {e:#}\n{}", lab.router_logs(30)));
    assert!(r.content_ok, "{from} -> {to}: {r:?}");
    assert_eq!(r.bytes_received, bytes, "{from} -> {to}: {r:?}");
}

/// The `vmpls` binary under test.
pub fn router_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vmpls"))
}

/// A work directory for configs, logs, stats and captures. Removed when the test
/// passes, kept (and its path printed) when it fails.
pub struct WorkDir(PathBuf);

impl WorkDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "vmpls-it-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("work directory kept for inspection: {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The seed lab with vmpls routers on pe1, p and pe2.
pub struct Lab {
    // Field order: the lab (routers, namespaces) goes before the work directory.
    pub seed: SeedLab,
    pub work: WorkDir,
}

impl Lab {
    /// Builds the seed topology with `params`, takes the kernel out of forwarding,
    /// starts the three routers with stats files, and waits until ce1 and ce2 reach
    /// each other over IPv4 and IPv6 (ping both ways, 3 of 3).
    ///
    /// With `VMPLS_TEST_FAST_PATH=1` in the environment every lab runs its routers with
    /// `fast-path = "tc"`, to run a suite against the in-kernel fast path (tests that
    /// count the pipeline's own work then fail for that reason alone). With
    /// `VMPLS_TEST_POLL=interrupt` they run with `poll = "interrupt"` (the default is
    /// adaptive polling).
    pub fn start(tag: &str, mut params: SeedParams) -> Self {
        vmpls_lab::require_root().expect("the integration tests need root");
        if std::env::var_os("VMPLS_TEST_FAST_PATH").is_some_and(|v| v == "1") {
            params.fast_path = true;
        }
        if std::env::var_os("VMPLS_TEST_POLL").is_some_and(|v| v == "interrupt") {
            params.poll_interrupt = true;
        }
        let work = WorkDir::new(tag);
        let mut seed = SeedLab::build(&params).expect("building the seed topology");
        seed.clear_kernel_ip().expect("taking the kernel out");
        let mut lab = Self { seed, work };
        lab.start_routers();
        lab
    }

    /// Starts the routers (after [`Lab::stop_routers`]) and waits for reachability.
    pub fn start_routers(&mut self) {
        self.start_routers_with(&router_binary());
    }

    /// [`Lab::start_routers`] with `binary` standing for vmpls (a wrapper that starts it).
    pub fn start_routers_with(&mut self, binary: &Path) {
        self.seed.start_routers_with_stats(binary, self.work.path()).expect("starting the routers");
        if let Err(e) = self.seed.check_pings(Duration::from_secs(10)) {
            panic!("{e:#}\n{}", self.seed.router_logs(30));
        }
    }

    /// The namespace of `host`.
    pub fn ns(&self, host: &str) -> String {
        self.seed.topology().ns(host).unwrap().to_string()
    }

    /// Panics with the router logs if a router has exited.
    pub fn assert_routers_running(&mut self) {
        if let Err(e) = self.seed.check_routers_running() {
            panic!("{e:#}");
        }
    }

    /// The tail of each router's log (also after the routers stopped).
    pub fn logs(&self) -> String {
        ROUTERS
            .iter()
            .map(|r| {
                let log = self.work.path().join(format!("{r}.log"));
                format!("--- {r}:\n{}\n", vmpls_lab::Topology::log_tail(&log, 30))
            })
            .collect()
    }

    /// The counters the routers wrote last (they write every second while running).
    pub fn stats_now(&self) -> BTreeMap<String, RouterStats> {
        ROUTERS.iter().map(|r| (r.to_string(), self.seed.router_stats(r).unwrap())).collect()
    }

    /// Waits until every router has rewritten its stats file after this call (they do
    /// every second), then returns the counters: a snapshot that includes everything
    /// the routers processed before the call.
    pub fn fresh_stats(&mut self) -> BTreeMap<String, RouterStats> {
        let start = std::time::SystemTime::now();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let fresh = ROUTERS.iter().all(|r| {
                self.seed
                    .stats_path(r)
                    .and_then(|p| std::fs::metadata(p).ok())
                    .and_then(|m| m.modified().ok())
                    .is_some_and(|t| t > start)
            });
            if fresh {
                return self.stats_now();
            }
            self.assert_routers_running();
            assert!(Instant::now() < deadline, "the routers did not rewrite their stats files within 5 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the routers with SIGTERM, checks that each exited with status 0 within
    /// a few seconds, and returns the counters they wrote at exit.
    pub fn stop_routers(&mut self) -> BTreeMap<String, RouterStats> {
        let start = Instant::now();
        let statuses = self.seed.stop_routers_status(Duration::from_secs(5)).expect("stopping the routers");
        for (name, status) in &statuses {
            assert!(
                status.success(),
                "router {name} did not stop cleanly on SIGTERM: {status}\n{}",
                self.logs()
            );
        }
        assert_eq!(statuses.len(), 3);
        assert!(start.elapsed() < Duration::from_secs(5), "stopping took {:?}", start.elapsed());
        self.stats_now()
    }

    /// A content-checked TCP flow of `bytes` from `from` to `to_addr` (on host `to`).
    pub fn flow(&mut self, from: &str, to: &str, to_addr: &str, bytes: u64) -> FlowResult {
        let opts = FlowOptions {
            limit: Limit::Bytes(bytes),
            io_timeout: Duration::from_secs(10),
            deadline: Some(Duration::from_secs(90)),
            ..FlowOptions::default()
        };
        let r = run_flow(
            self.seed.topology().ns(from).unwrap(),
            self.seed.topology().ns(to).unwrap(),
            ip(to_addr),
            &opts,
            &mut |_| {},
        );
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                let stats = self.stats_now();
                panic!("TCP {from} -> {to} ({to_addr}): {e:#}\nstats: {stats:#?}\n{}", self.logs());
            }
        };
        assert!(
            r.content_ok && r.bytes_received == bytes && r.bytes_sent == bytes,
            "TCP {from} -> {to} ({to_addr}): {r:?}"
        );
        eprintln!(
            "TCP {from} -> {to_addr}: {} bytes in {:.2} s, {:.2} Gbit/s, {} retransmits",
            r.bytes_received, r.seconds, r.gbps, r.retransmits
        );
        r
    }

    /// Pings `to` from `from` with the lab's native ping.
    pub fn ping(&self, from: &str, to: &str, opts: &PingOptions) -> PingResult {
        ping(self.seed.topology().ns(from).unwrap(), ip(to), opts)
            .unwrap_or_else(|e| panic!("ping {from} -> {to}: {e:#}"))
    }

    /// Runs a command on `host` (bounded by `timeout`) and returns its output.
    pub fn run(&self, host: &str, args: &[&str], timeout: Duration) -> std::process::Output {
        let mut cmd = Command::new(args[0]);
        cmd.args(&args[1..]);
        self.seed
            .topology()
            .run_timeout(host, cmd, timeout)
            .unwrap_or_else(|e| panic!("{args:?} on {host}: {e:#}"))
    }
}

/// Panics if any router counted a drop outside `BACKGROUND_DROPS` and `also_allowed`.
pub fn assert_no_unexpected_drops(
    stats: &BTreeMap<String, RouterStats>,
    also_allowed: &[&str],
    context: &str,
) {
    let mut allowed: Vec<&str> = BACKGROUND_DROPS.to_vec();
    allowed.extend_from_slice(also_allowed);
    let bad: BTreeMap<&str, BTreeMap<&str, u64>> = stats
        .iter()
        .map(|(r, s)| (r.as_str(), s.drops_except(&allowed)))
        .filter(|(_, d)| !d.is_empty())
        .collect();
    assert!(bad.is_empty(), "{context}: unexpected drops {bad:?}; all counters: {stats:#?}");
}

/// Text of a command's stdout and stderr.
pub fn output_text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The PID of `router`'s `vmpls run` process, found by its config path in the lab's
/// work directory (unique to this lab).
pub fn router_pid(lab: &Lab, router: &str) -> u32 {
    let config = lab.work.path().join(format!("{router}.toml"));
    let config = config.to_str().unwrap();
    let found: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == config.as_bytes()))
        })
        .collect();
    assert_eq!(found.len(), 1, "processes running {config}: {found:?}");
    found[0]
}

/// A hop of `traceroute`: number, address (None for `*`), MPLS extension text.
pub type Hop = (u32, Option<String>, Option<String>);

/// One line of `traceroute -n -e -q 1`: hop number, address (None for `*`), and the
/// extension text (`MPLS:L=1002,E=0,S=1,T=1`) if any.
pub fn parse_hop(line: &str) -> Option<Hop> {
    let mut words = line.split_whitespace();
    let hop: u32 = words.next()?.parse().ok()?;
    let addr = words.next()?;
    if addr == "*" {
        return Some((hop, None, None));
    }
    let ext = line.split_once('<').and_then(|(_, rest)| rest.split_once('>')).map(|(e, _)| e.to_string());
    Some((hop, Some(addr.to_string()), ext))
}

pub fn traceroute(lab: &Lab, v6: bool) -> Vec<Hop> {
    let dst = if v6 { CE2_V6 } else { CE2_V4 };
    // One probe per hop, one at a time (-N 1: no burst for the hosts' ICMP rate
    // limits), at most 8 hops.
    let mut args = vec!["traceroute"];
    if v6 {
        args.push("-6");
    }
    args.extend(["-e", "-n", "-q", "1", "-w", "1", "-N", "1", "-m", "8", dst]);
    let out = lab.run("ce1", &args, Duration::from_secs(30));
    let text = output_text(&out);
    assert!(out.status.success(), "{args:?}: {text}");
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .map(|l| parse_hop(l).unwrap_or_else(|| panic!("unexpected line {l:?} in:\n{text}")))
        .collect()
}
