//! Weighted ECMP through two P routers, end to end, with one `vmpls` process per router.
//! Needs root.
//!
//! ```text
//!                         .2 pa .1
//!                  198.18.10.0/24  198.18.20.0/24
//!                 /  (1002 -> 2002)             \
//!  ce1 ------ pe1                                 pe2 ------ ce2
//!  198.18.1.0/24  \  (1102 -> 2102)             /   198.18.2.0/24
//!                  198.18.11.0/24  198.18.21.0/24
//!                         .2 pb .1
//! ```
//!
//! (and the same with `2001:db8:N::/64`). pe1 reaches ce2's prefixes over two next
//! hops weighted 2:1, each with the label its P router expects (1002 toward pa, 1102
//! toward pb); pa and pb swap toward pe2, which pops and delivers. The way back goes
//! through pa only (1001 -> 2001).
//!
//! Which path a flow took is read from packet captures on pa's and pb's links from pe1
//! (`tcpdump -w`, taken on the receiving end, so a sender that bypasses the qdisc is
//! still seen), grouped by the flow's 4-tuple; the routers' stats files confirm that
//! both P routers switched the traffic.
//!
//! The second test runs the same diamond with `fast-path = "tc"` on every router and
//! weights 1:1 (IPv4) and 3:1 (IPv6): pe1's TC program picks the next hop, and its
//! counters show that it, not the pipeline, pushed the flows' packets.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use common::WorkDir;
use vmpls_lab::IpPrefix;
use vmpls_lab::ping::{PingOptions, ping};
use vmpls_lab::topology::{HostOptions, Topology};
use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};

const VMPLS: &str = env!("CARGO_BIN_EXE_vmpls");

/// Flows per address family. With a 2/3 chance each of taking pa (ephemeral ports are
/// random), the number of flows on pa is binomial: for 300 flows its standard deviation
/// is 2.7 % of the flows, and the accepted band (55 % to 78 %) reaches at least 4.2
/// deviations to either side, so a correct router fails it about once in 10 000 runs
/// (both families together). An even 1:1 split (50 %) falls outside it 24 times in 25.
const FLOWS: usize = 300;
/// Flows running at the same time.
const PARALLEL: usize = 3;
/// Bytes each flow sends (checked byte by byte at the receiver).
const FLOW_BYTES: u64 = 300_000;
/// The accepted share of flows on the weight-2 path.
const SHARE_MIN: f64 = 0.55;
const SHARE_MAX: f64 = 0.78;
/// Flows per family through the fast path: 200 flows give a standard deviation of at
/// most 3.6 % of the flows on a path, and the bands below reach at least 3.8 deviations
/// to either side (1:1: 36 % to 64 %; 3:1: 62 % to 88 %, which an even split misses).
const FAST_FLOWS: usize = 200;
const FAST_SHARE_V4: (f64, f64) = (0.36, 0.64);
const FAST_SHARE_V6: (f64, f64) = (0.62, 0.88);

const PE1: &str = r#"
[router]
fast-path = "off"
name = "pe1"
addresses = ["198.18.255.1", "2001:db8:ff::1"]

[[port]]
name = "ce1"
interface = "pe1-ce1"
addresses = ["198.18.1.1/24", "2001:db8:1::1/64"]

[[port]]
name = "core-a"
interface = "pe1-pa"
addresses = ["198.18.10.1/24", "2001:db8:10::1/64"]

[[port]]
name = "core-b"
interface = "pe1-pb"
addresses = ["198.18.11.1/24", "2001:db8:11::1/64"]

[[route]]
prefix = "198.18.2.0/24"
nexthops = [
  { via = "198.18.10.2", port = "core-a", push = [1002], weight = 2 },
  { via = "198.18.11.2", port = "core-b", push = [1102], weight = 1 },
]

[[route]]
prefix = "2001:db8:2::/64"
nexthops = [
  { via = "2001:db8:10::2", port = "core-a", push = [1002], weight = 2 },
  { via = "2001:db8:11::2", port = "core-b", push = [1102], weight = 1 },
]

[[label]]
in = 2001
action = "pop"
"#;

const PA: &str = r#"
[router]
fast-path = "off"
name = "pa"
addresses = ["198.18.255.2", "2001:db8:ff::2"]

[[port]]
name = "west"
interface = "pa-pe1"
addresses = ["198.18.10.2/24", "2001:db8:10::2/64"]

[[port]]
name = "east"
interface = "pa-pe2"
addresses = ["198.18.20.1/24", "2001:db8:20::1/64"]

[[label]]
in = 1002
action = "swap"
out = [2002]
via = "198.18.20.2"
port = "east"

[[label]]
in = 1001
action = "swap"
out = [2001]
via = "198.18.10.1"
port = "west"
"#;

const PB: &str = r#"
[router]
fast-path = "off"
name = "pb"
addresses = ["198.18.255.4", "2001:db8:ff::4"]

[[port]]
name = "west"
interface = "pb-pe1"
addresses = ["198.18.11.2/24", "2001:db8:11::2/64"]

[[port]]
name = "east"
interface = "pb-pe2"
addresses = ["198.18.21.1/24", "2001:db8:21::1/64"]

[[label]]
in = 1102
action = "swap"
out = [2102]
via = "198.18.21.2"
port = "east"
"#;

const PE2: &str = r#"
[router]
fast-path = "off"
name = "pe2"
addresses = ["198.18.255.3", "2001:db8:ff::3"]

[[port]]
name = "core-a"
interface = "pe2-pa"
addresses = ["198.18.20.2/24", "2001:db8:20::2/64"]

[[port]]
name = "core-b"
interface = "pe2-pb"
addresses = ["198.18.21.2/24", "2001:db8:21::2/64"]

[[port]]
name = "ce2"
interface = "pe2-ce2"
addresses = ["198.18.2.1/24", "2001:db8:2::1/64"]

[[label]]
in = 2002
action = "pop"

[[label]]
in = 2102
action = "pop"

[[route]]
prefix = "198.18.1.0/24"
push = [1001]
via = "198.18.20.1"
port = "core-a"

[[route]]
prefix = "2001:db8:1::/64"
push = [1001]
via = "2001:db8:20::1"
port = "core-a"
"#;

const ROUTERS: [(&str, &str); 4] = [("pe1", PE1), ("pa", PA), ("pb", PB), ("pe2", PE2)];

/// (host a, interface a, host b, interface b, MTU). The core links take super-frames
/// whole, as in the seed lab.
const LINKS: [(&str, &str, &str, &str, u32); 6] = [
    ("ce1", "ce1-pe1", "pe1", "pe1-ce1", 1500),
    ("pe1", "pe1-pa", "pa", "pa-pe1", 65535),
    ("pe1", "pe1-pb", "pb", "pb-pe1", 65535),
    ("pa", "pa-pe2", "pe2", "pe2-pa", 65535),
    ("pb", "pb-pe2", "pe2", "pe2-pb", 65535),
    ("pe2", "pe2-ce2", "ce2", "ce2-pe2", 1500),
];

const CE1_V4: &str = "198.18.1.2";
const CE1_V6: &str = "2001:db8:1::2";
const CE2_V4: &str = "198.18.2.2";
const CE2_V6: &str = "2001:db8:2::2";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("bad built-in address {s}: {e}"))
}

fn prefix(s: &str) -> IpPrefix {
    s.parse().unwrap_or_else(|e| panic!("bad built-in prefix {s}: {e}"))
}

/// The lab: its topology and the pids of what runs in it.
struct Lab {
    topo: Topology,
    dir: WorkDir,
    /// (router, pid, log, stats file)
    routers: Vec<(String, u32, PathBuf, PathBuf)>,
}

impl Lab {
    fn build() -> anyhow::Result<Self> {
        vmpls_lab::require_root()?;
        let mut topo = Topology::new();
        topo.add_host("ce1")?;
        for (router, _) in ROUTERS {
            topo.add_host_with(router, HostOptions { ipv6: false })?;
        }
        topo.add_host("ce2")?;
        for (a, a_if, b, b_if, mtu) in LINKS {
            topo.add_link(a, a_if, b, b_if, mtu)?;
        }
        for (host, ifname, v4, v6, gw4, gw6) in [
            ("ce1", "ce1-pe1", "198.18.1.2/24", "2001:db8:1::2/64", "198.18.1.1", "2001:db8:1::1"),
            ("ce2", "ce2-pe2", "198.18.2.2/24", "2001:db8:2::2/64", "198.18.2.1", "2001:db8:2::1"),
        ] {
            topo.add_address(host, ifname, prefix(v4))?;
            topo.add_address(host, ifname, prefix(v6))?;
            topo.add_default_route(host, ip(gw4))?;
            topo.add_default_route(host, ip(gw6))?;
        }
        Ok(Self { topo, dir: WorkDir::new("ecmp"), routers: Vec::new() })
    }

    fn start_routers(&mut self, routers: &[(&str, String)]) -> anyhow::Result<()> {
        for (router, toml) in routers {
            let router = *router;
            let config = self.dir.path().join(format!("{router}.toml"));
            std::fs::write(&config, toml)?;
            let log = self.dir.path().join(format!("{router}.log"));
            let stats = self.dir.path().join(format!("{router}.json"));
            let out = File::create(&log)?;
            let mut cmd = Command::new(VMPLS);
            cmd.arg("run")
                .arg("--config")
                .arg(&config)
                .arg("--stats-file")
                .arg(&stats)
                .stdin(Stdio::null())
                .stdout(out.try_clone()?)
                .stderr(out);
            let pid = self.topo.spawn(router, router, cmd, Some(log.clone()))?;
            self.routers.push((router.to_string(), pid, log, stats));
        }
        Ok(())
    }

    fn router_logs(&self) -> String {
        self.routers
            .iter()
            .map(|(name, _, log, _)| format!("--- {name}:\n{}\n", Topology::log_tail(log, 15)))
            .collect()
    }

    fn check_routers(&mut self) -> anyhow::Result<()> {
        if let Some(dead) = self.topo.exited_child() {
            bail!("{} on {} exited ({})\n{}", dead.label, dead.host, dead.status, self.router_logs());
        }
        Ok(())
    }

    /// Waits until `from` gets an echo reply from `to`.
    fn wait_reachable(&mut self, from: &str, to: IpAddr, timeout: Duration) -> anyhow::Result<()> {
        let start = Instant::now();
        let opts = PingOptions {
            count: 1,
            timeout: Duration::from_millis(300),
            stop_after: Some(1),
            ..PingOptions::default()
        };
        loop {
            self.check_routers()?;
            if ping(self.topo.ns(from)?, to, &opts)?.received > 0 {
                return Ok(());
            }
            if start.elapsed() >= timeout {
                bail!("{from} cannot reach {to} after {timeout:?}\n{}", self.router_logs());
            }
        }
    }

    /// Starts `tcpdump` on `host`'s `ifname`, writing to `NAME.pcap` in the work dir,
    /// and waits until it captures. Returns its pid and the capture file.
    fn start_capture(&mut self, host: &str, ifname: &str) -> anyhow::Result<(u32, PathBuf)> {
        let pcap = self.dir.path().join(format!("{host}-{ifname}.pcap"));
        let log = self.dir.path().join(format!("{host}-{ifname}.tcpdump.log"));
        let mut cmd = Command::new("tcpdump");
        // -Z root: Debian's tcpdump otherwise drops to the tcpdump user, who cannot
        // write into our directory. --immediate-mode: take packets from the kernel as
        // they come, not a full block (or a timeout) later. -U: write each at once.
        cmd.args(["-n", "--immediate-mode", "-U", "-Z", "root", "-s", "200", "-B", "16384"])
            .args(["-i", ifname, "-w"])
            .arg(&pcap)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log)?);
        let pid = self
            .topo
            .spawn(host, &format!("tcpdump {ifname}"), cmd, Some(log.clone()))
            .context("starting tcpdump (is it installed?)")?;
        let start = Instant::now();
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("listening on") {
                return Ok((pid, pcap));
            }
            if let Some(dead) = self.topo.exited_child() {
                bail!("{} exited ({}): {text}", dead.label, dead.status);
            }
            if start.elapsed() > Duration::from_secs(10) {
                bail!("tcpdump on {host} {ifname} did not start within 10 s: {text}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops `tcpdump` `pid` once its capture file has stopped growing (it quits on
    /// SIGTERM without reading what is still queued for it); fails if it reports
    /// packets dropped by the kernel.
    fn stop_capture(&mut self, pid: u32, pcap: &Path) -> anyhow::Result<()> {
        let size = || std::fs::metadata(pcap).map(|m| m.len()).unwrap_or(0);
        let start = Instant::now();
        let (mut last, mut since) = (size(), Instant::now());
        while since.elapsed() < Duration::from_millis(500) && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(50));
            if size() != last {
                (last, since) = (size(), Instant::now());
            }
        }
        self.topo.stop(pid, Duration::from_secs(5))?;
        let log = pcap.with_extension("tcpdump.log");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let dropped = text
            .lines()
            .find(|l| l.contains("dropped by kernel"))
            .and_then(|l| l.split_whitespace().next()?.parse::<u64>().ok());
        ensure!(dropped == Some(0), "tcpdump for {} dropped packets: {text}", pcap.display());
        Ok(())
    }

    /// Stops every router (each writes its stats at exit) and reads their stats.
    fn stop_routers(&mut self) -> anyhow::Result<BTreeMap<String, serde_json::Value>> {
        self.check_routers()?;
        let mut stats = BTreeMap::new();
        for (name, pid, _, file) in std::mem::take(&mut self.routers) {
            let status = self.topo.stop(pid, Duration::from_secs(5))?;
            ensure!(status.success(), "router {name} ended with {status}");
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {name}'s stats {}", file.display()))?;
            let json: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("parsing {name}'s stats {}", file.display()))?;
            stats.insert(name, json);
        }
        Ok(stats)
    }
}

/// A TCP flow as seen in a capture: (client address, client port, server address,
/// server port).
type FlowKey = (IpAddr, u16, IpAddr, u16);

/// What one capture saw of the TCP packets ce1 sent.
#[derive(Debug, Default)]
struct Capture {
    /// Packets (super-frames count once) per flow.
    flows: BTreeMap<FlowKey, u64>,
    /// The label stacks these packets carried, and how often.
    stacks: BTreeMap<Vec<u32>, u64>,
}

/// Reads a classic pcap file of Ethernet frames and collects the MPLS-labelled TCP
/// packets whose source address is in `sources`.
fn read_capture(path: &Path, sources: &[IpAddr]) -> anyhow::Result<Capture> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let header = data.get(..24).context("pcap file shorter than its header")?;
    let magic = [header[0], header[1], header[2], header[3]];
    let little = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => bail!("{}: not a pcap file (magic {magic:02x?})", path.display()),
    };
    let u32_at = |b: &[u8], at: usize| -> anyhow::Result<u32> {
        let w: [u8; 4] = b.get(at..at + 4).and_then(|s| s.try_into().ok()).context("truncated pcap")?;
        Ok(if little { u32::from_le_bytes(w) } else { u32::from_be_bytes(w) })
    };
    let linktype = u32_at(header, 20)?;
    ensure!(linktype == 1, "{}: link type {linktype}, expected Ethernet", path.display());
    let mut capture = Capture::default();
    let mut off = 24;
    while off < data.len() {
        let caplen = u32_at(&data, off + 8)? as usize;
        let frame = data.get(off + 16..off + 16 + caplen).context("truncated pcap record")?;
        off += 16 + caplen;
        let Some((stack, key)) = parse_labelled_tcp(frame) else {
            continue;
        };
        if sources.contains(&key.0) {
            *capture.flows.entry(key).or_default() += 1;
            *capture.stacks.entry(stack).or_default() += 1;
        }
    }
    Ok(capture)
}

/// The label stack and TCP 4-tuple of an Ethernet frame carrying MPLS over IPv4 or
/// IPv6 over TCP; `None` for anything else.
fn parse_labelled_tcp(frame: &[u8]) -> Option<(Vec<u32>, FlowKey)> {
    const MPLS_UNICAST: u16 = 0x8847;
    const TCP: u8 = 6;
    let ethertype = u16::from_be_bytes(frame.get(12..14)?.try_into().ok()?);
    if ethertype != MPLS_UNICAST {
        return None;
    }
    let mut off = 14;
    let mut stack = Vec::new();
    loop {
        let entry = u32::from_be_bytes(frame.get(off..off + 4)?.try_into().ok()?);
        off += 4;
        stack.push(entry >> 12);
        if entry & 0x100 != 0 {
            break;
        }
    }
    let ip = frame.get(off..)?;
    let (src, dst, l4): (IpAddr, IpAddr, &[u8]) = match ip.first()? >> 4 {
        4 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let fragment = u16::from_be_bytes(ip.get(6..8)?.try_into().ok()?) & 0x1fff;
            if *ip.get(9)? != TCP || fragment != 0 {
                return None;
            }
            let src: [u8; 4] = ip.get(12..16)?.try_into().ok()?;
            let dst: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
            (src.into(), dst.into(), ip.get(ihl..)?)
        }
        6 => {
            if *ip.get(6)? != TCP {
                return None;
            }
            let src: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
            let dst: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
            (src.into(), dst.into(), ip.get(40..)?)
        }
        _ => return None,
    };
    let sport = u16::from_be_bytes(l4.get(0..2)?.try_into().ok()?);
    let dport = u16::from_be_bytes(l4.get(2..4)?.try_into().ok()?);
    Some((stack, (src, sport, dst, dport)))
}

/// Runs `count` content-checked flows ce1 -> `dst`, `PARALLEL` at a time, each from its
/// own ephemeral port to its own listening port.
fn run_flows(topo: &Topology, dst: IpAddr, count: usize, seed: u64) -> anyhow::Result<()> {
    let (ce1, ce2) = (topo.ns("ce1")?, topo.ns("ce2")?);
    let mut next = 0;
    while next < count {
        let batch = (next..count.min(next + PARALLEL)).collect::<Vec<_>>();
        next += batch.len();
        std::thread::scope(|s| -> anyhow::Result<()> {
            let handles: Vec<_> = batch
                .iter()
                .map(|&i| {
                    s.spawn(move || {
                        let opts = FlowOptions {
                            limit: Limit::Bytes(FLOW_BYTES),
                            seed: seed + i as u64,
                            deadline: Some(Duration::from_secs(20)),
                            ..FlowOptions::default()
                        };
                        (i, run_flow(ce1, ce2, dst, &opts, &mut |_| {}))
                    })
                })
                .collect();
            for h in handles {
                let (i, result) = h.join().map_err(|_| anyhow::anyhow!("a flow thread panicked"))?;
                let flow = result.with_context(|| format!("flow {i} to {dst}"))?;
                ensure!(
                    flow.content_ok && flow.bytes_received == FLOW_BYTES,
                    "flow {i} to {dst}: sent {} bytes, received {}, first wrong byte at {:?}",
                    flow.bytes_sent,
                    flow.bytes_received,
                    flow.first_mismatch
                );
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// The flows of one address family on each path, checked: every flow on exactly one
/// path, all `flows` seen, the share of the path via pa within `(min, max)`. Returns the
/// share.
fn check_split(
    family: &str,
    client: IpAddr,
    pa: &Capture,
    pb: &Capture,
    flows: usize,
    (min, max): (f64, f64),
) -> anyhow::Result<f64> {
    let on =
        |c: &Capture| -> BTreeSet<FlowKey> { c.flows.keys().filter(|k| k.0 == client).copied().collect() };
    let (a, b) = (on(pa), on(pb));
    let both: Vec<_> = a.intersection(&b).collect();
    ensure!(both.is_empty(), "{family}: flows seen on both paths: {both:?}");
    let total = a.len() + b.len();
    ensure!(
        total == flows,
        "{family}: {total} flows captured ({} via pa, {} via pb), {flows} run",
        a.len(),
        b.len()
    );
    let share = a.len() as f64 / total as f64;
    eprintln!("{family}: {} flows via pa, {} via pb: {:.1} % via pa", a.len(), b.len(), share * 100.0);
    ensure!(
        (min..=max).contains(&share),
        "{family}: {:.1} % of flows via pa ({} of {total}), expected {:.0} % to {:.0} %",
        share * 100.0,
        a.len(),
        min * 100.0,
        max * 100.0
    );
    Ok(share)
}

/// Counter `name` of `group` (`drops`, `events`: lists of `{"name", "value"}`).
fn counter(stats: &serde_json::Value, group: &str, name: &str) -> u64 {
    stats[group]
        .as_array()
        .and_then(|l| l.iter().find(|c| c["name"] == name))
        .and_then(|c| c["value"].as_u64())
        .unwrap_or(0)
}

fn port_counter(stats: &serde_json::Value, port: &str, name: &str) -> anyhow::Result<u64> {
    stats["ports"]
        .as_array()
        .and_then(|ports| ports.iter().find(|p| p["name"] == port))
        .and_then(|p| p[name].as_u64())
        .with_context(|| format!("no {name} for port {port} in {stats}"))
}

#[test]
fn ecmp_spreads_flows_by_weight_and_keeps_each_flow_on_one_path() -> anyhow::Result<()> {
    let started = Instant::now();
    let mut lab = Lab::build()?;
    lab.start_routers(&ROUTERS.map(|(name, text)| (name, text.to_owned())))?;
    let captures = [lab.start_capture("pa", "pa-pe1")?, lab.start_capture("pb", "pb-pe1")?];
    for (from, to) in [("ce1", CE2_V4), ("ce1", CE2_V6), ("ce2", CE1_V4), ("ce2", CE1_V6)] {
        lab.wait_reachable(from, ip(to), Duration::from_secs(10))?;
    }

    let flows = run_flows(&lab.topo, ip(CE2_V4), FLOWS, 1_000)
        .and_then(|()| run_flows(&lab.topo, ip(CE2_V6), FLOWS, 2_000));
    if let Err(e) = flows {
        lab.check_routers()?;
        bail!("{e:#}\n{}", lab.router_logs());
    }
    lab.check_routers()?;
    for (pid, pcap) in &captures {
        lab.stop_capture(*pid, pcap)?;
    }
    let stats = lab.stop_routers()?;

    let clients = [ip(CE1_V4), ip(CE1_V6)];
    let pa = read_capture(&captures[0].1, &clients)?;
    let pb = read_capture(&captures[1].1, &clients)?;
    // Each next hop carries its own label, and nothing else reached that P router.
    ensure!(pa.stacks.keys().eq([&vec![1002]]), "label stacks toward pa: {:?}", pa.stacks);
    ensure!(pb.stacks.keys().eq([&vec![1102]]), "label stacks toward pb: {:?}", pb.stacks);
    let share_v4 = check_split("IPv4", ip(CE1_V4), &pa, &pb, FLOWS, (SHARE_MIN, SHARE_MAX))?;
    let share_v6 = check_split("IPv6", ip(CE1_V6), &pa, &pb, FLOWS, (SHARE_MIN, SHARE_MAX))?;

    // The routers' own counters agree: both P routers switched labels, pe1 pushed on
    // every packet they received from it, and pe2 popped both paths' labels.
    let (pa_stats, pb_stats) = (&stats["pa"], &stats["pb"]);
    for (name, s) in [("pa", pa_stats), ("pb", pb_stats)] {
        let drops: Vec<_> = s["drops"].as_array().into_iter().flatten().filter(|c| c["value"] != 0).collect();
        ensure!(drops.is_empty(), "{name} dropped packets: {drops:?}");
        ensure!(counter(s, "events", "label_swap") > 0, "{name} swapped no label: {s}");
        ensure!(port_counter(s, "west", "rx_packets")? > 0, "{name} received nothing: {s}");
        ensure!(port_counter(s, "east", "tx_packets")? > 0, "{name} sent nothing: {s}");
    }
    ensure!(counter(&stats["pe2"], "events", "label_pop") > 0, "pe2 popped nothing");
    // Every flow sends the same bytes, so the bytes the P routers received from pe1
    // split like the flows.
    let (a_bytes, b_bytes) = (
        port_counter(pa_stats, "west", "rx_bytes")? as f64,
        port_counter(pb_stats, "west", "rx_bytes")? as f64,
    );
    let byte_share = a_bytes / (a_bytes + b_bytes);
    let flow_share = (share_v4 + share_v6) / 2.0;
    eprintln!(
        "bytes from pe1: {a_bytes} to pa, {b_bytes} to pb ({:.1} % to pa); {:.1} s",
        byte_share * 100.0,
        started.elapsed().as_secs_f64()
    );
    ensure!(
        (byte_share - flow_share).abs() < 0.05,
        "pa got {:.1} % of the bytes from pe1 but {:.1} % of the flows",
        byte_share * 100.0,
        flow_share * 100.0
    );

    let namespaces = lab.topo.namespaces();
    lab.topo.cleanup()?;
    for ns in namespaces {
        ensure!(!vmpls_lab::netns::exists(&ns), "namespace {ns} left behind");
    }
    Ok(())
}

/// The diamond's configs with the fast path on every router, and pe1's IPv4 route
/// weighted 1:1, its IPv6 route 3:1.
fn fast_routers() -> Vec<(&'static str, String)> {
    ROUTERS
        .iter()
        .map(|(name, text)| {
            let mut text = text.replace("fast-path = \"off\"", "fast-path = \"tc\"");
            if *name == "pe1" {
                let (v4, v6) = text.split_at(text.find("2001:db8:2::/64").expect("pe1's IPv6 route"));
                let v4 = v4.replace("weight = 2", "weight = 1");
                let v6 = v6.replacen("weight = 2", "weight = 3", 1);
                text = v4 + &v6;
            }
            (*name, text)
        })
        .collect()
}

#[test]
fn ecmp_in_the_fast_path_spreads_flows_by_weight_and_keeps_each_flow_on_one_path() -> anyhow::Result<()> {
    let started = Instant::now();
    let mut lab = Lab::build()?;
    let routers = fast_routers();
    ensure!(routers[0].1.matches("weight = 1").count() == 3 && routers[0].1.contains("weight = 3"));
    lab.start_routers(&routers)?;
    let captures = [lab.start_capture("pa", "pa-pe1")?, lab.start_capture("pb", "pb-pe1")?];
    for (from, to) in [("ce1", CE2_V4), ("ce1", CE2_V6), ("ce2", CE1_V4), ("ce2", CE1_V6)] {
        lab.wait_reachable(from, ip(to), Duration::from_secs(10))?;
    }
    let flows = run_flows(&lab.topo, ip(CE2_V4), FAST_FLOWS, 3_000)
        .and_then(|()| run_flows(&lab.topo, ip(CE2_V6), FAST_FLOWS, 4_000));
    if let Err(e) = flows {
        lab.check_routers()?;
        bail!("{e:#}\n{}", lab.router_logs());
    }
    lab.check_routers()?;
    for (pid, pcap) in &captures {
        lab.stop_capture(*pid, pcap)?;
    }
    let stats = lab.stop_routers()?;

    let clients = [ip(CE1_V4), ip(CE1_V6)];
    let pa = read_capture(&captures[0].1, &clients)?;
    let pb = read_capture(&captures[1].1, &clients)?;
    ensure!(pa.stacks.keys().eq([&vec![1002]]), "label stacks toward pa: {:?}", pa.stacks);
    ensure!(pb.stacks.keys().eq([&vec![1102]]), "label stacks toward pb: {:?}", pb.stacks);
    check_split("IPv4 1:1", ip(CE1_V4), &pa, &pb, FAST_FLOWS, FAST_SHARE_V4)?;
    check_split("IPv6 3:1", ip(CE1_V6), &pa, &pb, FAST_FLOWS, FAST_SHARE_V6)?;

    // pe1's program pushed (nearly) every packet the P routers got from ce1; pe1's
    // socket saw only what the program leaves to the pipeline (the first frames before
    // a neighbour is known, ND, ARP).
    let fast = |router: &str, name: &str| counter(&stats[router], "fast_path", name);
    let fast_counters = |router: &str| format!("{router}: {}", stats[router]["fast_path"]);
    let captured: u64 = pa.flows.values().chain(pb.flows.values()).sum();
    let pushed = fast("pe1", "push");
    eprintln!(
        "pe1's fast path pushed {pushed} frames; {captured} labelled TCP frames from ce1 on pa's and pb's links; {:.1} s",
        started.elapsed().as_secs_f64()
    );
    ensure!(pushed * 10 >= captured * 9, "{}: {captured} captured", fast_counters("pe1"));
    ensure!(fast("pe1", "redirect_failed") == 0, "{}", fast_counters("pe1"));
    for router in ["pa", "pb"] {
        ensure!(fast(router, "swap") > 0, "{}", fast_counters(router));
    }
    ensure!(fast("pe2", "pop") > 0, "{}", fast_counters("pe2"));
    let ce1_rx = port_counter(&stats["pe1"], "ce1", "rx_packets")?;
    let ce1_fast = stats["pe1"]["ports"]
        .as_array()
        .and_then(|ports| ports.iter().find(|p| p["name"] == "ce1"))
        .and_then(|p| p["fast_path"]["rx_packets"].as_u64())
        .unwrap_or(0);
    ensure!(
        (ce1_rx - ce1_fast) * 100 < ce1_fast,
        "pe1's socket on ce1 got {} frames, its program {ce1_fast}",
        ce1_rx - ce1_fast
    );

    let namespaces = lab.topo.namespaces();
    lab.topo.cleanup()?;
    for ns in namespaces {
        ensure!(!vmpls_lab::netns::exists(&ns), "namespace {ns} left behind");
    }
    Ok(())
}
