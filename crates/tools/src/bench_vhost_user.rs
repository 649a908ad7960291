//! `vmpls bench vhost-user`: the vhost-user path without QEMU. DPDK's `dpdk-testpmd`
//! (virtio-user, a driver that is not QEMU's) plays both guests:
//!
//! ```text
//! testpmd tx -> vhost-user a [ switch under test ] vhost-user b -> testpmd rx (rxonly)
//! ```
//!
//! The switch: one vmpls router pushing label 1002 (`--topology one`), or the LSP
//! pe1 (push) -> p (swap) -> pe2 (pop) of three vmpls routers joined by veth pairs with a
//! 64 KiB MTU in network namespaces of their own (`--topology chain`), or Open vSwitch
//! with DPDK (`--backends ovs-dpdk`: one PMD thread, an OpenFlow rule with `push_mpls`).
//!
//! Cases: `64` (testpmd txonly, 64-byte IPv4/UDP frames) and `tso` (64 KiB TCP
//! super-frames as a Linux guest hands them to virtio-net: `gso_type` TCPV4, `gso_size`
//! 1448, partial checksum; testpmd's csum engine with `tso set 1448` on its virtio-user
//! port, fed from a pcap of whole TCP frames, makes virtio-user send exactly that).
//!
//! testpmd busy-polls; on a 2-core machine the rates alone would measure contention. So
//! the switch runs on a CPU of its own and the testpmds on the others ([`Placement`]),
//! and everything is per CPU-second of the switch (utime + stime of its processes), next to
//! this machine's memory copy bandwidth measured in the same run before testpmd starts.
//! Every frame is accounted for over the whole run: frames in = frames out + drops under
//! named counters (the receiving guest's ring full is `b.tx_dropped`), with the frames a
//! router made by segmenting super-frames added.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use vmpls_control::api::Request;
use vmpls_lab::Topology;
use vmpls_lab::topology::HostOptions;
use vmpls_router::client::Connection;

use vmpls_tools::hugepages::Hugepages;
use vmpls_tools::testpmd::{ForwardStats, Testpmd, TestpmdOptions};

/// The routers' MAC on port a and b, and the testpmd guests' MACs.
const MAC_A: &str = "02:00:00:00:aa:01";
const MAC_A_GUEST: &str = "02:00:00:00:aa:02";
const MAC_B: &str = "02:00:00:00:bb:01";
const MAC_B_GUEST: &str = "02:00:00:00:bb:02";
/// Hugepages the two testpmds need at most (`-m 256` and `-m 320`), with room.
const HUGEPAGES: u64 = 320;
/// The super-frames' TCP payload: 44 segments of 1448 bytes (63,766-byte frames).
const TSO_PAYLOAD: usize = 44 * 1448;

/// Where the switch and the guests run: the switch (each vmpls router's threads, OVS's
/// PMD thread) on a CPU of its own, as a DPDK poller is given a core, the two testpmds on
/// the others. On a machine of two CPUs both testpmds share the first: otherwise a busy
/// testpmd would share the switch's core, and the switch's rate would measure the
/// scheduler (a router moved between cores and sharing one with a busy poller measured
/// a third below its rate on a core of its own, OVS-DPDK's pinned PMD alike either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Placement {
    switch: u16,
    tx: u16,
    rx: u16,
}

impl Placement {
    /// The switch on the last CPU this process may use, testpmd tx and rx on the first
    /// and second of the others (both on the first if there is one other, all on the one
    /// CPU of a machine of one).
    fn of(cpus: &[u16]) -> Placement {
        let (&switch, rest) = cpus.split_last().unwrap_or((&0, &[]));
        let tx = rest.first().copied().unwrap_or(switch);
        let rx = rest.get(1).copied().unwrap_or(tx);
        Placement { switch, tx, rx }
    }

    fn describe(&self) -> String {
        format!("switch on CPU {}, testpmd tx on {}, rx on {}", self.switch, self.tx, self.rx)
    }
}

/// Which switch topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Topo {
    /// One router: a -> push 1002 -> b.
    One,
    /// pe1 push -> p swap -> pe2 pop, three routers over 64 KiB veth pairs.
    Chain,
    /// The chain with memif ports between the routers: shared memory, no kernel.
    ChainMemif,
}

impl Topo {
    fn name(self) -> &'static str {
        match self {
            Topo::One => "one",
            Topo::Chain => "chain",
            Topo::ChainMemif => "chain-memif",
        }
    }
}

/// What the switch under test is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// vmpls routers.
    Vmpls,
    /// Open vSwitch with DPDK (`ovs-vswitchd` with vhost-user ports and `push_mpls`).
    OvsDpdk,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Vmpls => "vmpls",
            Backend::OvsDpdk => "ovs-dpdk",
        }
    }
}

/// The routers' `poll` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Poll {
    /// Busy-poll the rings while frames come, the guests' kicks off; sleep when idle.
    Adaptive,
    /// Sleep on the guests' kicks and the sockets throughout.
    Interrupt,
}

impl Poll {
    fn name(self) -> &'static str {
        match self {
            Poll::Adaptive => "adaptive",
            Poll::Interrupt => "interrupt",
        }
    }
}

/// The traffic of one case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Case {
    /// 64-byte IPv4/UDP frames (testpmd txonly).
    #[value(name = "64")]
    Small,
    /// 64 KiB TCP super-frames with TSO metadata (testpmd csum engine, `tso set 1448`).
    Tso,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Small => "64-byte",
            Case::Tso => "tso-64k",
        }
    }
}

/// What `vmpls bench vhost-user` runs.
#[derive(Debug, Clone)]
pub struct VhostUserBenchOptions {
    /// The `vmpls` binary.
    pub vmpls: PathBuf,
    /// Measured seconds per case (after traffic flows and a 2-second warm-up).
    pub duration: Duration,
    /// The switch topology.
    pub topology: Topo,
    /// The switches to measure, one after the other.
    pub backends: Vec<Backend>,
    /// The cases.
    pub cases: Vec<Case>,
    /// The vmpls routers' poll modes, each measured.
    pub polls: Vec<Poll>,
}

/// Counters of the switch, as one snapshot.
#[derive(Debug, Clone, Default)]
struct Counters {
    /// Frames and bytes the switch took from guest a.
    in_frames: u64,
    in_bytes: u64,
    /// Frames and bytes it gave guest b.
    out_frames: u64,
    out_bytes: u64,
    /// Frames not forwarded, by named counter.
    dropped: BTreeMap<String, u64>,
    /// Frames the switch made beyond those it took (segments of super-frames, less
    /// segments merged into super-frames).
    made: i64,
}

impl Counters {
    fn minus(&self, before: &Counters) -> Counters {
        let mut dropped = BTreeMap::new();
        for (k, v) in &self.dropped {
            let d = v.saturating_sub(before.dropped.get(k).copied().unwrap_or(0));
            if d > 0 {
                dropped.insert(k.clone(), d);
            }
        }
        Counters {
            in_frames: self.in_frames - before.in_frames.min(self.in_frames),
            in_bytes: self.in_bytes - before.in_bytes.min(self.in_bytes),
            out_frames: self.out_frames - before.out_frames.min(self.out_frames),
            out_bytes: self.out_bytes - before.out_bytes.min(self.out_bytes),
            dropped,
            made: self.made - before.made,
        }
    }

    fn dropped_total(&self) -> u64 {
        self.dropped.values().sum()
    }

    /// Frames in (and made) that are neither out nor under a named drop counter.
    fn unaccounted(&self) -> i64 {
        self.in_frames as i64 + self.made - self.out_frames as i64 - self.dropped_total() as i64
    }
}

/// A switch under test: two vhost-user sockets testpmd connects to, counters, CPU time.
trait Switch {
    /// The socket of port a (guest a's transmit side) and of port b.
    fn sockets(&self) -> (PathBuf, PathBuf);
    /// Whether the guest creates the sockets (testpmd's `server=1`) and the switch
    /// connects to them.
    fn guest_is_server(&self) -> bool {
        false
    }
    fn counters(&mut self) -> anyhow::Result<Counters>;
    /// A mark of the CPU time its processes (or forwarding threads) have used so far.
    fn cpu_mark(&self) -> anyhow::Result<CpuMark>;
    /// One line on how it is set up, for the report.
    fn describe(&self) -> String;
}

/// CPU time used so far, as a switch measures it.
enum CpuMark {
    /// Each vmpls router: utime + stime of its process, and its forwarding loop's awake
    /// time in turns that received frames and in turns that received none (`stats`'
    /// `forwarding_loop`), microseconds.
    Routers(Vec<RouterCpu>),
    /// OVS's PMD threads: their CPU time and busy share.
    Ovs(vmpls_tools::ovs_dpdk::CpuSample),
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct RouterCpu {
    seconds: f64,
    busy_us: u64,
    idle_us: u64,
}

impl CpuMark {
    /// CPU seconds from `earlier` to `self`: all the routers' CPU time; OVS's PMD CPU time
    /// times its busy share (it busy-polls, so its CPU time alone is the scheduler's
    /// share, and OVS counts its processing cycles apart from its idle ones).
    fn since(&self, earlier: &CpuMark) -> f64 {
        match (self, earlier) {
            (CpuMark::Routers(b), CpuMark::Routers(a)) => {
                b.iter().zip(a).map(|(b, a)| b.seconds - a.seconds).sum()
            }
            (CpuMark::Ovs(b), CpuMark::Ovs(a)) => b.busy_cpu_seconds_since(a),
            _ => f64::NAN,
        }
    }

    /// The CPU seconds of the switch's busy turns from `earlier` to `self`, each switch
    /// measured as OVS measures its poller: CPU time times the share of the awake time
    /// spent in turns that received frames. For OVS the same as [`CpuMark::since`].
    fn busy_since(&self, earlier: &CpuMark) -> f64 {
        match (self, earlier) {
            (CpuMark::Routers(b), CpuMark::Routers(a)) => b
                .iter()
                .zip(a)
                .map(|(b, a)| {
                    let busy = b.busy_us.saturating_sub(a.busy_us) as f64;
                    let idle = b.idle_us.saturating_sub(a.idle_us) as f64;
                    let share = if busy + idle > 0.0 { busy / (busy + idle) } else { 1.0 };
                    (b.seconds - a.seconds) * share
                })
                .sum(),
            _ => self.since(earlier),
        }
    }
}

/// CPU seconds (utime + stime) of a process, all its threads.
pub fn process_cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    vmpls_sys::process::cpu_seconds(pid).with_context(|| format!("reading /proc/{pid}/stat (process gone?)"))
}

/// vmpls routers: one, or the chain pe1 -> p -> pe2.
struct VmplsSwitch {
    topo: Topology,
    dir: PathBuf,
    /// (name, control socket, pid), ingress first, egress last.
    routers: Vec<(String, PathBuf, u32)>,
    topology: Topo,
}

fn router_config(name: &str, dir: &Path, poll: Poll, cpu: u16, body: &str) -> String {
    format!(
        "[router]\nname = \"{name}\"\ncontrol-socket = \"{}\"\npoll = \"{}\"\ncpus = \"{cpu}\"\n# The whole load in the measured process: \
         the in-kernel fast path would switch on the veths in softirq time.\nfast-path = \"off\"\n{body}",
        dir.join(format!("{name}.ctl")).display(),
        poll.name()
    )
}

fn vhost_port(name: &str, dir: &Path, mac: &str, addr: &str) -> String {
    format!(
        "\n[[port]]\nname = \"{name}\"\nkind = \"vhost-user\"\nsocket = \"{}\"\nmac = \"{mac}\"\naddresses = [\"{addr}\"]\n",
        dir.join(format!("{name}.sock")).display()
    )
}

fn veth_port(name: &str, ifname: &str, addr: &str) -> String {
    format!("\n[[port]]\nname = \"{name}\"\ninterface = \"{ifname}\"\naddresses = [\"{addr}\"]\n")
}

/// A port between two routers of the chain on `link` (`pe1-p`, `p-pe1`, ...): the veth of
/// that name, or with `memif` one end of the memif named by the link's first end, which
/// listens (pe1 toward p, p toward pe2).
fn chain_port(name: &str, link: &str, memif: bool, dir: &Path, addr: &str) -> String {
    if !memif {
        return veth_port(name, link, addr);
    }
    let (socket, role) = match link {
        "pe1-p" => ("pe1-p", "server"),
        "p-pe1" => ("pe1-p", "client"),
        "p-pe2" => ("p-pe2", "server"),
        _ => ("p-pe2", "client"),
    };
    format!(
        "\n[[port]]\nname = \"{name}\"\nkind = \"memif\"\nsocket = \"{}\"\nrole = \"{role}\"\nmac = \"{}\"\naddresses = [\"{addr}\"]\n",
        dir.join(format!("{socket}.sock")).display(),
        memif_mac(link),
    )
}

/// The MAC of the chain's memif end on `link`, fixed so that the next router can be told
/// it ([`memif_neighbor`]).
fn memif_mac(link: &str) -> &'static str {
    match link {
        "pe1-p" => "02:00:00:00:10:01",
        "p-pe1" => "02:00:00:00:10:02",
        "p-pe2" => "02:00:00:00:11:01",
        _ => "02:00:00:00:11:02",
    }
}

/// Over memif the chain's next hops are static neighbours: no ARP crosses the chain. A
/// request the router sends before the memif is connected is a `tx_dropped` that is no
/// forwarded frame, and would put the accounting out by one; and frames held for the
/// answer (a client connects up to a second after it starts) would be dropped as
/// `neighbor_queue_full` meanwhile.
fn memif_neighbor(memif: bool, port: &str, addr: &str, peer_link: &str) -> String {
    if !memif {
        return String::new();
    }
    format!(
        "\n[[neighbor]]\naddress = \"{addr}\"\nlladdr = \"{}\"\nport = \"{port}\"\n",
        memif_mac(peer_link)
    )
}

/// testpmd answers no ARP: the router is told guest b's MAC.
fn guest_b_neighbor() -> String {
    format!("\n[[neighbor]]\naddress = \"198.18.2.2\"\nlladdr = \"{MAC_B_GUEST}\"\nport = \"b\"\n")
}

impl VmplsSwitch {
    fn start(vmpls: &Path, dir: &Path, topology: Topo, poll: Poll, cpu: u16) -> anyhow::Result<VmplsSwitch> {
        let mut topo = Topology::new();
        let configs: Vec<(&str, String)> = match topology {
            Topo::One => {
                topo.add_host("r")?;
                let body = format!(
                    "addresses = [\"198.18.255.77\"]\n{}{}\n[[route]]\nprefix = \"198.18.20.0/24\"\npush = [1002]\nvia = \"198.18.2.2\"\nport = \"b\"\n{}",
                    vhost_port("a", dir, MAC_A, "198.18.1.1/24"),
                    vhost_port("b", dir, MAC_B, "198.18.2.1/24"),
                    guest_b_neighbor()
                );
                vec![("r", router_config("r", dir, poll, cpu, &body))]
            }
            Topo::Chain | Topo::ChainMemif => {
                let memif = topology == Topo::ChainMemif;
                for h in ["pe1", "p", "pe2"] {
                    // The routers own the veths: no IPv6 multicast from the kernel on them.
                    topo.add_host_with(h, HostOptions { ipv6: false })?;
                }
                if !memif {
                    // 64 KiB links: labelled super-frames cross the core whole, as between
                    // vmpls routers on one host they should (over memif they do anyway:
                    // the frames carry their virtio-net headers).
                    topo.add_link("pe1", "pe1-p", "p", "p-pe1", 65535)?;
                    topo.add_link("p", "p-pe2", "pe2", "pe2-p", 65535)?;
                }
                let pe1 = format!(
                    "addresses = [\"198.18.255.1\"]\n{}{}\n[[route]]\nprefix = \"198.18.20.0/24\"\npush = [1002]\nvia = \"198.18.10.2\"\nport = \"core\"\n{}",
                    vhost_port("a", dir, MAC_A, "198.18.1.1/24"),
                    chain_port("core", "pe1-p", memif, dir, "198.18.10.1/24"),
                    memif_neighbor(memif, "core", "198.18.10.2", "p-pe1"),
                );
                let p = format!(
                    "addresses = [\"198.18.255.2\"]\n{}{}\n[[label]]\nin = 1002\naction = \"swap\"\nout = [1003]\nvia = \"198.18.11.2\"\nport = \"east\"\n{}",
                    chain_port("west", "p-pe1", memif, dir, "198.18.10.2/24"),
                    chain_port("east", "p-pe2", memif, dir, "198.18.11.1/24"),
                    memif_neighbor(memif, "east", "198.18.11.2", "pe2-p"),
                );
                let pe2 = format!(
                    "addresses = [\"198.18.255.3\"]\n{}{}\n[[label]]\nin = 1003\naction = \"pop\"\n\n[[route]]\nprefix = \"198.18.20.0/24\"\nvia = \"198.18.2.2\"\nport = \"b\"\n{}",
                    chain_port("core", "pe2-p", memif, dir, "198.18.11.2/24"),
                    vhost_port("b", dir, MAC_B, "198.18.2.1/24"),
                    guest_b_neighbor()
                );
                vec![
                    ("pe1", router_config("pe1", dir, poll, cpu, &pe1)),
                    ("p", router_config("p", dir, poll, cpu, &p)),
                    ("pe2", router_config("pe2", dir, poll, cpu, &pe2)),
                ]
            }
        };
        let mut routers = Vec::new();
        for (name, cfg) in configs {
            let path = dir.join(format!("{name}.toml"));
            std::fs::write(&path, cfg)?;
            let log = dir.join(format!("{name}.log"));
            let mut cmd = Command::new(vmpls);
            cmd.args(["run", "--config"])
                .arg(&path)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log)?);
            let pid = topo.spawn(name, "vmpls", cmd, Some(log))?;
            routers.push((name.to_string(), dir.join(format!("{name}.ctl")), pid));
        }
        let s = VmplsSwitch { topo, dir: dir.to_path_buf(), routers, topology };
        let deadline = Instant::now() + Duration::from_secs(10);
        for (name, ctl, _) in &s.routers {
            while Connection::open(ctl).is_err() {
                if Instant::now() > deadline {
                    bail!(
                        "router {name} did not start:\n{}",
                        Topology::log_tail(&s.dir.join(format!("{name}.log")), 20)
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(s)
    }
}

fn stats_of(ctl: &Path) -> anyhow::Result<Value> {
    let mut c = Connection::open(ctl)?;
    c.request(&Request::Stats).map_err(|e| anyhow::anyhow!("{e}"))?.context("stats without data")
}

fn named(stats: &Value, list: &str, name: &str) -> u64 {
    stats[list]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .and_then(|c| c["value"].as_u64())
        .unwrap_or(0)
}

fn port<'a>(stats: &'a Value, name: &str) -> anyhow::Result<&'a Value> {
    stats["ports"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == name))
        .with_context(|| format!("no port {name} in the router's stats"))
}

impl Switch for VmplsSwitch {
    fn sockets(&self) -> (PathBuf, PathBuf) {
        (self.dir.join("a.sock"), self.dir.join("b.sock"))
    }

    fn counters(&mut self) -> anyhow::Result<Counters> {
        let mut c = Counters::default();
        let last = self.routers.len() - 1;
        for (i, (name, ctl, _)) in self.routers.iter().enumerate() {
            let s = stats_of(ctl)?;
            if i == 0 {
                let a = port(&s, "a")?;
                c.in_frames = a["rx_packets"].as_u64().unwrap_or(0);
                c.in_bytes = a["rx_bytes"].as_u64().unwrap_or(0);
            }
            if i == last {
                let b = port(&s, "b")?;
                c.out_frames = b["tx_packets"].as_u64().unwrap_or(0);
                c.out_bytes = b["tx_bytes"].as_u64().unwrap_or(0);
            }
            for d in s["drops"].as_array().into_iter().flatten() {
                let v = d["value"].as_u64().unwrap_or(0);
                if v > 0 {
                    c.dropped.insert(format!("{name}.{}", d["name"].as_str().unwrap_or("?")), v);
                }
            }
            for p in s["ports"].as_array().into_iter().flatten() {
                // Segments the port cut itself (a labelled super-frame for a guest).
                let n = |k: &str| p[k].as_u64().unwrap_or(0) as i64;
                c.made += n("tx_segments") - n("tx_segmented");
                let pname = p["name"].as_str().unwrap_or("?");
                for (k, v) in p.as_object().into_iter().flatten() {
                    // rx_dropped includes rx_kernel_dropped (the socket's queue was full).
                    let counted = (k.ends_with("_dropped") && k != "rx_kernel_dropped")
                        || k == "tx_errors"
                        || k == "tx_unreachable";
                    if let (true, Some(v @ 1..)) = (counted, v.as_u64()) {
                        c.dropped.insert(format!("{name}.{pname}.{k}"), v);
                    }
                }
            }
            c.made += named(&s, "events", "gso_segments_out") as i64
                - named(&s, "events", "gso_superframes_segmented") as i64
                - named(&s, "events", "gro_segments_absorbed") as i64;
        }
        Ok(c)
    }

    fn cpu_mark(&self) -> anyhow::Result<CpuMark> {
        let routers = self.routers.iter().map(|(_, ctl, pid)| {
            let seconds = process_cpu_seconds(*pid)?;
            let s = stats_of(ctl)?;
            Ok(RouterCpu {
                seconds,
                busy_us: named(&s, "forwarding_loop", "busy_us"),
                idle_us: named(&s, "forwarding_loop", "idle_us"),
            })
        });
        Ok(CpuMark::Routers(routers.collect::<anyhow::Result<_>>()?))
    }

    fn describe(&self) -> String {
        match self.topology {
            Topo::One => "one vmpls router: a -> push 1002 -> b".into(),
            Topo::Chain => {
                "pe1 push 1002 -> p swap 1003 -> pe2 pop, three vmpls over 64 KiB veth pairs (AF_PACKET, fast path off)"
                    .into()
            }
            Topo::ChainMemif => {
                "pe1 push 1002 -> p swap 1003 -> pe2 pop, three vmpls joined by memif ports (shared memory)".into()
            }
        }
    }
}

impl Drop for VmplsSwitch {
    fn drop(&mut self) {
        let _ = self.topo.stop_all(Duration::from_secs(3));
        let _ = self.topo.cleanup();
    }
}

// ---------------------------------------------------------------------------------------
// Open vSwitch with DPDK (`vmpls_tools::ovs_dpdk`): what a user would pick
// instead of vmpls as a host-side vhost-user switch. A private ovs-vswitchd (DPDK build,
// one PMD thread), two vhost-user ports a and b, and one OpenFlow rule doing what the
// one-router topology does: TTL - 1, push 1002, new MACs, out b. OVS is the vhost-user
// client (its server ports have no counters in OVS 3.1): testpmd creates the sockets.
// ---------------------------------------------------------------------------------------

struct OvsSwitch {
    ovs: vmpls_tools::ovs_dpdk::OvsDpdk,
    dir: PathBuf,
}

impl OvsSwitch {
    fn start(dir: &Path, topology: Topo, case: Case, cpu: u16) -> anyhow::Result<OvsSwitch> {
        anyhow::ensure!(
            topology == Topo::One,
            "the OVS-DPDK backend is measured as one switch (--topology one): a host runs one OVS"
        );
        let (a, b) = (dir.join("a.sock"), dir.join("b.sock"));
        let flow = format!(
            "in_port=a,ip,nw_dst=198.18.20.0/24,actions=dec_ttl,push_mpls:0x8847,set_field:1002->mpls_label,\
             mod_dl_src:{MAC_B},mod_dl_dst:{MAC_B_GUEST},output:b"
        );
        let options = vmpls_tools::ovs_dpdk::Options {
            // Super-frames: OVS offers TSO to the guests as vmpls does.
            userspace_tso: case == Case::Tso,
            pmd_core: u32::from(cpu),
            ..vmpls_tools::ovs_dpdk::Options::default()
        };
        let ovs =
            vmpls_tools::ovs_dpdk::OvsDpdk::start_with(dir, &[("a", &a), ("b", &b)], &[flow], &options)?;
        Ok(OvsSwitch { ovs, dir: dir.to_path_buf() })
    }
}

impl Switch for OvsSwitch {
    fn sockets(&self) -> (PathBuf, PathBuf) {
        (self.dir.join("a.sock"), self.dir.join("b.sock"))
    }

    fn guest_is_server(&self) -> bool {
        true
    }

    fn counters(&mut self) -> anyhow::Result<Counters> {
        let a = self.ovs.port_stats("a")?;
        let b = self.ovs.port_stats("b")?;
        let mut dropped = BTreeMap::new();
        for (name, v) in [
            ("ovs.a.rx_dropped", a.rx_dropped),
            ("ovs.a.tx_dropped", a.tx_dropped),
            ("ovs.b.rx_dropped", b.rx_dropped),
            ("ovs.b.tx_dropped", b.tx_dropped),
        ] {
            if v > 0 {
                dropped.insert(name.to_string(), v);
            }
        }
        Ok(Counters {
            in_frames: a.rx_packets,
            in_bytes: a.rx_bytes,
            out_frames: b.tx_packets,
            out_bytes: b.tx_bytes,
            dropped,
            made: 0,
        })
    }

    fn cpu_mark(&self) -> anyhow::Result<CpuMark> {
        Ok(CpuMark::Ovs(self.ovs.cpu_sample()?))
    }

    fn describe(&self) -> String {
        "Open vSwitch 3.1 with DPDK, one PMD thread, rule: dec_ttl, push_mpls 1002, output b (CPU: PMD busy share)"
            .into()
    }
}

/// The backends run by default: vmpls, and OVS-DPDK where it is installed (in the
/// one-switch topology: a host runs one OVS).
pub fn default_backends(topology: Topo) -> Vec<Backend> {
    let mut b = vec![Backend::Vmpls];
    if topology == Topo::One && vmpls_tools::ovs_dpdk::available() {
        b.push(Backend::OvsDpdk);
    }
    b
}

/// This machine's memory copy bandwidth, bytes per second: the best of 5 copies of a
/// 256 MiB buffer (larger than any cache).
pub fn copy_bandwidth() -> f64 {
    const N: usize = 256 << 20;
    let src = vec![0x5au8; N];
    let mut dst = vec![0u8; N];
    dst.copy_from_slice(&src);
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        best = best.min(t.elapsed().as_secs_f64());
    }
    N as f64 / best
}

/// One case's figures.
#[derive(Debug, Clone)]
pub struct CaseResult {
    backend: Backend,
    /// vmpls: the routers' poll mode.
    poll: Option<Poll>,
    topology: Topo,
    case: Case,
    setup: String,
    /// The measured window: switch counters, CPU and wall seconds.
    window: Counters,
    cpu_seconds: f64,
    /// Of `cpu_seconds`, the busy turns' (see [`CpuMark::busy_since`]).
    busy_cpu_seconds: f64,
    wall_seconds: f64,
    /// The whole run, from before testpmd sent until after it stopped: the accounting.
    total: Counters,
    /// testpmd's own counts: frames its tx port sent (and could not), frames its rx port got.
    testpmd_sent: u64,
    testpmd_not_sent: u64,
    testpmd_received: u64,
    /// Copy bound, bytes per second.
    copy: f64,
}

impl CaseResult {
    /// The switch's name, with the poll mode for vmpls.
    fn switch_name(&self) -> String {
        match self.poll {
            Some(p) => format!("{} ({})", self.backend.name(), p.name()),
            None => self.backend.name().to_string(),
        }
    }

    /// CPU the switch used over the window, in % of one core.
    fn cpu_percent(&self) -> f64 {
        100.0 * self.cpu_seconds / self.wall_seconds
    }

    fn mframes_per_cpu(&self) -> f64 {
        self.window.in_frames as f64 / self.cpu_seconds / 1e6
    }

    /// Frames in per CPU-second of the busy turns: the figure to hold against OVS's.
    fn mframes_per_busy_cpu(&self) -> f64 {
        self.window.in_frames as f64 / self.busy_cpu_seconds / 1e6
    }

    fn gbps_per_busy_cpu(&self) -> f64 {
        self.window.in_bytes as f64 * 8.0 / self.busy_cpu_seconds / 1e9
    }

    fn gbps_per_cpu(&self) -> f64 {
        self.window.in_bytes as f64 * 8.0 / self.cpu_seconds / 1e9
    }

    fn mframes_out_per_cpu(&self) -> f64 {
        self.window.out_frames as f64 / self.cpu_seconds / 1e6
    }

    fn gbps_out_per_cpu(&self) -> f64 {
        self.window.out_bytes as f64 * 8.0 / self.cpu_seconds / 1e9
    }

    fn copy_gbps(&self) -> f64 {
        self.copy * 8.0 / 1e9
    }

    fn to_json(&self) -> Value {
        json!({
            "backend": self.backend.name(),
            "topology": self.topology.name(),
            "case": self.case.name(),
            "setup": self.setup,
            "frames_in": self.total.in_frames,
            "frames_out": self.total.out_frames,
            "frames_made": self.total.made,
            "dropped": self.total.dropped,
            "unaccounted": self.total.unaccounted(),
            "testpmd_sent": self.testpmd_sent,
            "testpmd_not_sent_ring_full": self.testpmd_not_sent,
            "testpmd_received": self.testpmd_received,
            "window": {
                "frames_in": self.window.in_frames,
                "bytes_in": self.window.in_bytes,
                "frames_out": self.window.out_frames,
                "bytes_out": self.window.out_bytes,
                "wall_seconds": self.wall_seconds,
            },
            "cpu_seconds": self.cpu_seconds,
            "busy_cpu_seconds": self.busy_cpu_seconds,
            "mframes_per_busy_cpu_second": self.mframes_per_busy_cpu(),
            "gbps_per_busy_cpu_second": self.gbps_per_busy_cpu(),
            "poll": self.poll.map(Poll::name),
            "cpu_percent": self.cpu_percent(),
            "mframes_per_cpu_second": self.mframes_per_cpu(),
            "gbps_per_cpu_second": self.gbps_per_cpu(),
            "mframes_out_per_cpu_second": self.mframes_out_per_cpu(),
            "gbps_out_per_cpu_second": self.gbps_out_per_cpu(),
            "copy_bound_gbytes_per_second": self.copy / 1e9,
            "copy_bound_gbps": self.copy_gbps(),
            "ratio_to_copy_bound": self.gbps_per_cpu() / self.copy_gbps(),
        })
    }
}

/// testpmd rx, both its lcores (the main one, which waits for commands, and the
/// forwarding one) on `cpu`.
fn testpmd_rx(b_sock: &Path, server: &str, case: Case, cpu: u16) -> TestpmdOptions {
    let mut args = vec!["--forward-mode=rxonly".to_string(), "--total-num-mbufs=8192".into()];
    if case == Case::Tso {
        // LRO and receive checksum offload: virtio-user negotiates GUEST_TSO4/6 and
        // GUEST_CSUM, so a router may hand it TCP super-frames whole.
        args.push("--rx-offloads=0x1c".into());
    }
    TestpmdOptions {
        name: "rx".into(),
        lcores: format!("0@{cpu},1@{cpu}"),
        vdevs: vec![format!("net_virtio_user1,path={}{server},queues=1,mac={MAC_B_GUEST}", b_sock.display())],
        mem_mb: 256,
        args,
        commands: vec![],
    }
}

/// testpmd tx, both its lcores on `cpu`.
fn testpmd_tx(a_sock: &Path, server: &str, case: Case, pcap: &Path, cpu: u16) -> TestpmdOptions {
    let virtio = format!("net_virtio_user0,path={}{server},queues=1,mac={MAC_A_GUEST}", a_sock.display());
    match case {
        Case::Small => TestpmdOptions {
            name: "tx".into(),
            lcores: format!("0@{cpu},1@{cpu}"),
            vdevs: vec![virtio],
            mem_mb: 256,
            args: vec![
                "--forward-mode=txonly".into(),
                format!("--eth-peer=0,{MAC_A}"),
                "--tx-ip=198.18.1.2,198.18.20.2".into(),
                "--txpkts=64".into(),
                "--total-num-mbufs=8192".into(),
            ],
            commands: vec![],
        },
        // Port 0 replays whole TCP frames from a pcap (one 64 KiB mbuf each); the csum
        // engine forwards them to port 1, virtio-user, with TSO: virtio-user puts
        // gso_type TCPV4, gso_size 1448, hdr_len and the partial checksum in the header.
        Case::Tso => TestpmdOptions {
            name: "tx".into(),
            lcores: format!("0@{cpu},1@{cpu}"),
            vdevs: vec![
                format!("net_pcap0,rx_pcap={},tx_pcap=/dev/null,infinite_rx=1", pcap.display()),
                virtio,
            ],
            mem_mb: 320,
            args: vec![
                "--forward-mode=csum".into(),
                format!("--eth-peer=1,{MAC_A}"),
                "--total-num-mbufs=2048".into(),
                "--mbuf-size=65535".into(),
            ],
            // testpmd takes csum and tso settings only on a stopped port.
            commands: vec![
                "port stop 1".into(),
                "port config 1 tx_offload tcp_tso on".into(),
                "port config 1 tx_offload tcp_cksum on".into(),
                "port config 1 tx_offload multi_segs on".into(),
                "csum set tcp hw 1".into(),
                "tso set 1448 1".into(),
                "port start 1".into(),
            ],
        },
    }
}

fn mac_bytes(mac: &str) -> [u8; 6] {
    let mut m = [0u8; 6];
    for (i, p) in mac.split(':').enumerate().take(6) {
        m[i] = u8::from_str_radix(p, 16).unwrap_or(0);
    }
    m
}

/// One case of one switch: a backend and, for vmpls, its poll mode.
fn run_case(
    opts: &VhostUserBenchOptions,
    (backend, poll): (Backend, Option<Poll>),
    case: Case,
    work: &Path,
    huge: &Hugepages,
    copy: f64,
    log: &mut dyn FnMut(&str),
) -> anyhow::Result<CaseResult> {
    let dir = work.join(format!("{}-{}-{}", backend.name(), poll.map_or("", Poll::name), case.name()));
    std::fs::create_dir_all(&dir)?;
    let place = Placement::of(&vmpls_sys::process::allowed_cpus()?);
    let mut switch: Box<dyn Switch> = match backend {
        Backend::Vmpls => Box::new(VmplsSwitch::start(
            &opts.vmpls,
            &dir,
            opts.topology,
            poll.unwrap_or(Poll::Adaptive),
            place.switch,
        )?),
        Backend::OvsDpdk => Box::new(OvsSwitch::start(&dir, opts.topology, case, place.switch)?),
    };
    let (a_sock, b_sock) = switch.sockets();
    let server = if switch.guest_is_server() { ",server=1" } else { "" };
    let pcap = dir.join("tso.pcap");
    if case == Case::Tso {
        let frames: Vec<Vec<u8>> = (0..8u32)
            .map(|k| {
                tcp_frame_for_guest(1 + k * TSO_PAYLOAD as u32) // distinct sequence numbers
            })
            .collect();
        vmpls_tools::testpmd::write_pcap(&pcap, &frames)?;
    }
    let mut rx = Testpmd::start(&dir, huge, &testpmd_rx(&b_sock, server, case, place.rx))?;
    rx.wait_for(Testpmd::READY, Duration::from_secs(30))?;
    // OVS has no counters of port a before its guest connects: all zero then.
    let s0 = switch.counters().unwrap_or_default();
    let mut tx = Testpmd::start(&dir, huge, &testpmd_tx(&a_sock, server, case, &pcap, place.tx))?;
    tx.wait_for(Testpmd::READY, Duration::from_secs(40))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while switch.counters().map_or(true, |c| c.in_frames == s0.in_frames) {
        if Instant::now() > deadline {
            bail!("no frame reached the switch within 30 s; testpmd tx said:\n{}", tx.log_tail(20));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    let (c1, s1, t1) = (switch.cpu_mark()?, switch.counters()?, Instant::now());
    std::thread::sleep(opts.duration);
    let (c2, s2, t2) = (switch.cpu_mark()?, switch.counters()?, Instant::now());
    let tx_stats = tx.stop_forwarding()?;
    // Let the switch drain what testpmd left in the rings; the guests stay connected.
    std::thread::sleep(Duration::from_secs(1));
    let rx_stats = rx.stop_forwarding()?;
    let s_end = switch.counters()?;
    tx.quit()?;
    rx.quit()?;
    let tx_port = if case == Case::Tso { 1 } else { 0 };
    let sent = tx_stats.get(&tx_port).copied().unwrap_or_default();
    let got: ForwardStats = rx_stats.get(&0).copied().unwrap_or_default();
    let r = CaseResult {
        backend,
        poll,
        topology: opts.topology,
        case,
        setup: format!("{}; {}", switch.describe(), place.describe()),
        window: s2.minus(&s1),
        cpu_seconds: c2.since(&c1),
        busy_cpu_seconds: c2.busy_since(&c1),
        wall_seconds: (t2 - t1).as_secs_f64(),
        total: s_end.minus(&s0),
        testpmd_sent: sent.tx_packets,
        testpmd_not_sent: sent.tx_dropped,
        testpmd_received: got.rx_packets,
        copy,
    };
    log(&format!(
        "{} {} {}: {:.2} M frames in / CPU-s ({:.2} / busy CPU-s), {:.2} Gbit/s in / CPU-s, CPU {:.0} %, unaccounted {}",
        r.switch_name(),
        opts.topology.name(),
        case.name(),
        r.mframes_per_cpu(),
        r.mframes_per_busy_cpu(),
        r.gbps_per_cpu(),
        r.cpu_percent(),
        r.total.unaccounted()
    ));
    drop(switch);
    Ok(r)
}

fn tcp_frame_for_guest(seq: u32) -> Vec<u8> {
    vmpls_tools::testpmd::tcp_frame(
        mac_bytes(MAC_A),
        mac_bytes(MAC_A_GUEST),
        [198, 18, 1, 2],
        [198, 18, 20, 2],
        seq,
        TSO_PAYLOAD,
    )
}

/// The report of a run.
pub struct Report {
    /// One per backend and case.
    pub cases: Vec<CaseResult>,
    /// Copy bound, bytes per second.
    pub copy: f64,
}

impl Report {
    /// `{"cases": [...], "copy_bound_gbytes_per_second": ...}`.
    pub fn to_json(&self) -> Value {
        json!({
            "cases": self.cases.iter().map(CaseResult::to_json).collect::<Vec<_>>(),
            "copy_bound_gbytes_per_second": self.copy / 1e9,
        })
    }

    /// A Markdown table.
    pub fn to_markdown(&self) -> String {
        let mut s = String::from(
            "| backend | topology | case | CPU s | CPU % | frames in | out | made (segments) | dropped (named) | unaccounted | M frames in / CPU-s | Gbit/s in / CPU-s | M frames out / CPU-s | Gbit/s out / CPU-s | copy bound Gbit/s | in / copy bound | busy CPU s | M frames in / busy CPU-s |\n|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for r in &self.cases {
            let dropped = if r.total.dropped.is_empty() {
                "0".to_string()
            } else {
                r.total.dropped.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
            };
            s.push_str(&format!(
                "| {} | {} | {} | {:.2} | {:.0} | {} | {} | {} | {} | {} | {:.2} | {:.1} | {:.2} | {:.1} | {:.1} | {:.0} % | {:.2} | {:.2} |\n",
                r.switch_name(),
                r.topology.name(),
                r.case.name(),
                r.cpu_seconds,
                r.cpu_percent(),
                r.total.in_frames,
                r.total.out_frames,
                r.total.made,
                dropped,
                r.total.unaccounted(),
                r.mframes_per_cpu(),
                r.gbps_per_cpu(),
                r.mframes_out_per_cpu(),
                r.gbps_out_per_cpu(),
                r.copy_gbps(),
                100.0 * r.gbps_per_cpu() / r.copy_gbps(),
                r.busy_cpu_seconds,
                r.mframes_per_busy_cpu(),
            ));
        }
        s.push_str(&format!(
            "\nrates over the measured window per CPU-second of the switch, CPU % of one core over that window; frames in/out/dropped over the whole run; \
             OVS's CPU is its poller's CPU time times its busy share (processing cycles over all); busy CPU: the same measure for every switch \
             (vmpls: each router's CPU time times the share of its forwarding loop's awake time in turns that received frames); \
             copy bound: memcpy of 256 MiB, best of 5 = {:.1} GB/s\n",
            self.copy / 1e9
        ));
        for r in &self.cases {
            s.push_str(&format!(
                "- {} {}: {}; testpmd sent {} ({} not sent, ring full), received {}\n",
                r.switch_name(),
                r.case.name(),
                r.setup,
                r.testpmd_sent,
                r.testpmd_not_sent,
                r.testpmd_received
            ));
        }
        s
    }

    /// Whether every frame was accounted for.
    pub fn ok(&self) -> bool {
        self.cases.iter().all(|r| r.total.unaccounted() == 0)
    }
}

/// Runs the benchmark.
pub fn run(opts: &VhostUserBenchOptions, log: &mut dyn FnMut(&str)) -> anyhow::Result<Report> {
    vmpls_lab::require_root()?;
    anyhow::ensure!(
        vmpls_tools::testpmd::testpmd_installed(),
        "vmpls bench vhost-user needs {} (Debian: apt-get install dpdk-dev)",
        vmpls_tools::testpmd::TESTPMD
    );
    let work = std::env::temp_dir().join(format!("vmpls-bench-vhu-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let _clean = RemoveDir(work.clone());
    // Before testpmd busy-polls the cores.
    let copy = copy_bandwidth();
    log(&format!("memory copy bandwidth: {:.1} GB/s", copy / 1e9));
    let huge = Hugepages::reserve(HUGEPAGES, &work.join("huge"))?;
    let mut cases = Vec::new();
    for &backend in &opts.backends {
        let polls: Vec<Option<Poll>> = match backend {
            Backend::Vmpls => opts.polls.iter().copied().map(Some).collect(),
            Backend::OvsDpdk => vec![None],
        };
        for poll in polls {
            for &case in &opts.cases {
                if vmpls_lab::interrupted() {
                    bail!("interrupted");
                }
                cases.push(run_case(opts, (backend, poll), case, &work, &huge, copy, log)?);
            }
        }
    }
    drop(huge);
    Ok(Report { cases, copy })
}

struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_gets_a_cpu_of_its_own_where_there_is_one() {
        let p = |switch, tx, rx| Placement { switch, tx, rx };
        assert_eq!(Placement::of(&[0, 1]), p(1, 0, 0));
        assert_eq!(Placement::of(&[0, 1, 2, 3]), p(3, 0, 1));
        assert_eq!(Placement::of(&[2, 5, 7]), p(7, 2, 5));
        assert_eq!(Placement::of(&[3]), p(3, 3, 3));
        assert_eq!(Placement::of(&[]), p(0, 0, 0));
    }

    fn counters(in_frames: u64, out_frames: u64, dropped: &[(&str, u64)], made: i64) -> Counters {
        Counters {
            in_frames,
            in_bytes: in_frames * 64,
            out_frames,
            out_bytes: out_frames * 68,
            dropped: dropped.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            made,
        }
    }

    #[test]
    fn busy_cpu_is_each_routers_cpu_times_its_busy_share() {
        let r = |seconds, busy_us, idle_us| RouterCpu { seconds, busy_us, idle_us };
        let before = CpuMark::Routers(vec![r(1.0, 100, 100), r(5.0, 0, 0)]);
        // Router 1: 2 s of CPU, a quarter of its awake time busy; router 2: 1 s, all busy
        // (no idle turn), so all of it counts.
        let after = CpuMark::Routers(vec![r(3.0, 200, 400), r(6.0, 50, 0)]);
        assert!((after.since(&before) - 3.0).abs() < 1e-9);
        assert!((after.busy_since(&before) - (2.0 * 0.25 + 1.0)).abs() < 1e-9);
        // No turn at all in the window: charged whole, never divided by zero.
        assert!((after.busy_since(&after)).abs() < 1e-9);
    }

    #[test]
    fn every_frame_in_is_out_dropped_or_a_segment_made() {
        let before = counters(100, 90, &[("r.b.tx_dropped", 10)], 0);
        // 50 super-frames in, cut into 44 segments each: 2150 frames made.
        let after = counters(150, 2190, &[("r.b.tx_dropped", 110), ("r.neighbor_queue_full", 3)], 2150);
        let d = after.minus(&before);
        assert_eq!((d.in_frames, d.out_frames, d.made), (50, 2100, 2150));
        assert_eq!(d.dropped.get("r.b.tx_dropped"), Some(&100));
        assert_eq!(d.dropped_total(), 103);
        assert_eq!(d.unaccounted(), 50 + 2150 - 2100 - 103);
        // A counter that did not move is not listed.
        let same = before.minus(&before);
        assert!(same.dropped.is_empty());
        assert_eq!(same.unaccounted(), 0);
    }

    #[test]
    fn cpu_time_is_read_after_the_command_name() {
        // Our own process: it has used some CPU, and a name with ") " would not confuse it.
        let s = process_cpu_seconds(std::process::id()).unwrap();
        assert!(s >= 0.0);
    }

    #[test]
    fn super_frames_are_what_a_linux_guest_hands_its_nic() {
        let f = tcp_frame_for_guest(1);
        assert_eq!(f.len(), 14 + 20 + 20 + TSO_PAYLOAD);
        assert_eq!(&f[..6], &mac_bytes(MAC_A));
        assert_eq!(&f[6..12], &mac_bytes(MAC_A_GUEST));
        assert_eq!(TSO_PAYLOAD % 1448, 0);
        assert!(f.len() - 14 <= 65535, "one IPv4 packet");
    }
}
