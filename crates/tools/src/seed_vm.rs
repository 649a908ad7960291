//! `vmpls lab seed --vm`: the seed topology with the customers as QEMU guests.
//!
//! ```text
//!  kernel-ip:   guest ce1 ==tap ce1-tap== r (netns, kernel IP routing) ==tap ce2-tap== guest ce2
//!  vmpls-mpls:  guest ce1 ==vhost-user== pe1 --veth-- p --veth-- pe2 ==vhost-user== guest ce2
//! ```
//!
//! Both modes run in one invocation, one after the other, with the same guests (the image
//! of `vmpls-guest`, booted afresh per mode: TAP NICs for the baseline, vhost-user NICs
//! for vmpls), the same addresses as the seed lab (`198.18.1.2` and `198.18.2.2`, with
//! `.1` gateways) and the same routers: pe1, p and pe2 run the seed lab's configs
//! ([`vmpls_lab::seed::router_configs`]) with the customer ports turned into vhost-user
//! ports whose sockets QEMU connects to.
//!
//! In each mode ce2 starts an `iperf3` server and pings ce1, ce1 pings ce2 (IPv4 and
//! IPv6) and then runs `iperf3 -c ce2 -t DURATION -J`; the JSON report comes back on the
//! guest's result channel (its second serial port) and gives the throughput the receiver
//! saw (`end.sum_received.bits_per_second`) and the sender's retransmits. Ratios refer to
//! the kernel-ip mode of the same run.
//!
//! Everything is removed at the end, on failure or on Ctrl-C (the lab's interrupt flag):
//! guests are killed when their [`Guest`] drops, routers and namespaces when the
//! [`Topology`] drops, the work directory when [`WorkDir`] drops (it is kept, and named
//! in the report, when a mode failed).

use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use vmpls_guest::{FAIL_MARKER, Guest, GuestCache, GuestConfig, GuestError, GuestImage, Nic};
use vmpls_lab::report::{self, JsonDetail, Measured, ModeRow};
use vmpls_lab::routers::{LogMode, RouterSet};
use vmpls_lab::seed::{CE1_V4, CE1_V6, CE2_V4, CE2_V6, SeedParams, router_configs};
use vmpls_lab::topology::{HostOptions, Topology};
use vmpls_lab::{Interrupted, interrupted};

/// The namespace that routes between the guests' TAPs in the kernel-ip mode.
const KERNEL_ROUTER: &str = "r";
/// The TAPs of the kernel-ip mode (in [`KERNEL_ROUTER`]), with the gateway addresses.
const TAPS: [(&str, &str, &str); 2] =
    [("ce1-tap", "198.18.1.1/24", "2001:db8:1::1/64"), ("ce2-tap", "198.18.2.1/24", "2001:db8:2::1/64")];
/// How long a guest may take to boot and reach the other one.
const SETUP_TIMEOUT: Duration = Duration::from_secs(180);
/// The result-channel lines around ce1's iperf3 JSON report.
const JSON_BEGIN: &str = "IPERF-JSON-BEGIN";
const JSON_END: &str = "IPERF-JSON-END";

/// How ce1 and ce2 are joined in a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmMode {
    /// Guests on TAPs, the host kernel routes IP between them (the baseline).
    KernelIp,
    /// Guests on vhost-user ports of pe1 and pe2; pe1, p and pe2 are vmpls routers with
    /// the seed lab's label-switched path.
    VmplsMpls,
    /// The same with the routers' in-kernel fast path where it serves (`fast-path =
    /// "auto"`, the routers' default): p's swaps and the PEs' veth sides in the kernel,
    /// the guests' vhost-user ports in the pipeline.
    VmplsMplsTc,
}

impl VmMode {
    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            VmMode::KernelIp => "kernel-ip",
            VmMode::VmplsMpls => "vmpls-mpls",
            VmMode::VmplsMplsTc => "vmpls-mpls-tc",
        }
    }

    /// Whether the mode runs vmpls routers.
    fn routers(self) -> bool {
        self != VmMode::KernelIp
    }
}

/// What `vmpls lab seed --vm` does.
#[derive(Debug, Clone)]
pub struct VmSeedOptions {
    /// The `vmpls` binary the routers run (`ROUTER_BINARY run --config FILE`).
    pub router_binary: PathBuf,
    /// How long each mode's iperf3 flow runs.
    pub duration: Duration,
    /// Where the guest image is built and cached.
    pub cache: GuestCache,
    /// The modes, in order; ratios refer to the kernel-ip one.
    pub modes: Vec<VmMode>,
    /// Go on with the next mode when one fails (the report shows the error).
    pub keep_going: bool,
}

impl VmSeedOptions {
    /// Every mode, kernel-ip first, with the default guest cache.
    pub fn new(router_binary: impl Into<PathBuf>, duration: Duration) -> Self {
        Self {
            router_binary: router_binary.into(),
            duration,
            cache: GuestCache::default_location(),
            modes: vec![VmMode::KernelIp, VmMode::VmplsMpls, VmMode::VmplsMplsTc],
            keep_going: false,
        }
    }
}

/// What iperf3 measured: receiver throughput and bytes, sender retransmits.
pub type IperfResult = Measured;

/// The outcome of one mode.
#[derive(Debug, Clone, PartialEq)]
pub struct VmModeResult {
    /// The mode's name.
    pub name: String,
    /// The measurement; `None` if the mode failed.
    pub iperf: Option<IperfResult>,
    /// Throughput relative to kernel-ip in the same run.
    pub ratio: Option<f64>,
    /// Why the mode failed, if it did.
    pub error: Option<String>,
    /// What each vmpls router did, by name (`--vm-routers` only).
    pub routers: Vec<(String, LabelOps)>,
}

/// The label operations one vmpls router did in a mode: by its in-kernel programs and by
/// its pipeline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LabelOps {
    pub fast_push: u64,
    pub fast_swap: u64,
    pub fast_pop: u64,
    /// Of the programs' pops, those that took a second pass through their port.
    pub fast_repassed: u64,
    /// Of the programs' pushes and pops, those the kernel's MPLS action did (the port's
    /// action chain): super-frames pushed whole, pops in one pass.
    pub fast_act_mpls: u64,
    /// Pops before GRO (XDP in a virtio-net driver): not in `fast_pop`.
    pub fast_xdp_pop: u64,
    /// Swaps in a virtio-net driver (XDP): not in `fast_swap`.
    pub fast_xdp_swap: u64,
    /// Frames the programs left to the pipeline.
    pub fast_passed: u64,
    pub pipeline_push: u64,
    pub pipeline_swap: u64,
    pub pipeline_pop: u64,
}

impl LabelOps {
    /// From a router's counters (the router's label events count both paths' work).
    pub fn from_stats(s: &vmpls_lab::stats::RouterStats) -> LabelOps {
        LabelOps {
            fast_push: s.fast("push"),
            fast_swap: s.fast("swap"),
            fast_pop: s.fast("pop"),
            fast_repassed: s.fast("repassed"),
            fast_act_mpls: s.fast("act_mpls"),
            fast_xdp_pop: s.fast("xdp_pop"),
            fast_xdp_swap: s.fast("xdp_swap"),
            fast_passed: s.fast("passed"),
            pipeline_push: s.event("label_push").saturating_sub(s.fast("push")),
            pipeline_swap: s.event("label_swap").saturating_sub(s.fast("swap") + s.fast("xdp_swap")),
            pipeline_pop: s.event("label_pop").saturating_sub(s.fast("pop") + s.fast("xdp_pop")),
        }
    }

    fn to_json(self) -> serde_json::Value {
        serde_json::json!({
            "fast": { "push": self.fast_push, "swap": self.fast_swap, "pop": self.fast_pop,
                      "repassed": self.fast_repassed, "act_mpls": self.fast_act_mpls,
                      "xdp_pop": self.fast_xdp_pop, "xdp_swap": self.fast_xdp_swap,
                      "passed": self.fast_passed },
            "pipeline": { "push": self.pipeline_push, "swap": self.pipeline_swap, "pop": self.pipeline_pop },
        })
    }
}

impl std::fmt::Display for LabelOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "fast push {} swap {} pop {} (act_mpls {}, repassed {}) xdp swap {} pop {} passed {}; pipeline push {} swap {} pop {}",
            self.fast_push,
            self.fast_swap,
            self.fast_pop,
            self.fast_act_mpls,
            self.fast_repassed,
            self.fast_xdp_swap,
            self.fast_xdp_pop,
            self.fast_passed,
            self.pipeline_push,
            self.pipeline_swap,
            self.pipeline_pop
        )
    }
}

/// The result of `vmpls lab seed --vm`.
#[derive(Debug, Clone, PartialEq)]
pub struct VmSeedReport {
    /// One entry per mode, in the order run.
    pub modes: Vec<VmModeResult>,
    /// The accelerator the guests ran on (`Tcg` or `Kvm`).
    pub accel: String,
    /// Where the configs and logs were kept (when a mode failed).
    pub work_dir: Option<PathBuf>,
}

impl VmSeedReport {
    /// Whether every mode succeeded.
    pub fn ok(&self) -> bool {
        self.modes.iter().all(|m| m.error.is_none())
    }

    fn rows(&self) -> Vec<ModeRow<'_>> {
        self.modes
            .iter()
            .map(|m| ModeRow { name: &m.name, measured: m.iperf, ratio: m.ratio, error: m.error.as_deref() })
            .collect()
    }

    /// The table of `vmpls lab seed`: mode, Gbit/s, retransmits, ratio to kernel-ip;
    /// failures listed under it.
    pub fn to_markdown(&self) -> String {
        report::to_markdown(&self.rows())
    }

    /// As JSON, with the keys of `vmpls lab seed --json`:
    /// `{"guests":{"accel":...},"modes":[{"name","gbps","retransmits","ratio","bytes","seconds","error"}]}`,
    /// and a mode with vmpls routers in guests has `"routers":{NAME:{"fast":{"push",
    /// "swap","pop","repassed","passed"},"pipeline":{"push","swap","pop"}}}`.
    pub fn to_json(&self) -> serde_json::Value {
        let modes: Vec<_> = self
            .rows()
            .iter()
            .zip(&self.modes)
            .map(|(row, m)| {
                let mut o = report::mode_json(row, JsonDetail::Full);
                if !m.routers.is_empty() {
                    let routers = m.routers.iter().map(|(name, ops)| (name.clone(), ops.to_json()));
                    o.insert("routers".into(), serde_json::Value::Object(routers.collect()));
                }
                serde_json::Value::Object(o)
            })
            .collect();
        serde_json::json!({ "guests": { "accel": self.accel }, "modes": modes })
    }
}

/// Reads iperf3's `-J` report: receiver throughput and bytes, sender retransmits.
///
/// # Errors
/// The text is not JSON, iperf3 reported an error, or a field is missing.
pub fn parse_iperf_json(text: &str) -> anyhow::Result<IperfResult> {
    let v: serde_json::Value = serde_json::from_str(text).context("iperf3's report is not JSON")?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        bail!("iperf3: {e}");
    }
    let end = &v["end"];
    let num = |section: &str, key: &str| {
        end[section][key].as_f64().ok_or_else(|| anyhow!("iperf3's report has no end.{section}.{key}"))
    };
    let bps = num("sum_received", "bits_per_second")?;
    Ok(IperfResult {
        gbps: bps / 1e9,
        retransmits: num("sum_sent", "retransmits")? as u64,
        bytes: num("sum_received", "bytes")? as u64,
        seconds: num("sum_received", "seconds")?,
    })
}

/// The lines strictly between `begin` and `end` on a guest's result channel.
fn between(results: &str, begin: &str, end: &str) -> Option<String> {
    let mut lines = results.lines().skip_while(|l| l.trim() != begin);
    lines.next()?;
    let mut out = String::new();
    for l in lines {
        if l.trim() == end {
            return Some(out);
        }
        out.push_str(l);
        out.push('\n');
    }
    None
}

/// The seed lab's router configs with the customer port of pe1 (and pe2) turned into a
/// vhost-user port on `sockets.0` (and `sockets.1`); p's unchanged.
///
/// # Errors
/// The seed lab's configs no longer name the customer interfaces this expects.
pub fn vm_router_configs(
    params: &SeedParams,
    sockets: (&Path, &Path),
) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for cfg in router_configs(params) {
        let replace = match cfg.router.as_str() {
            "pe1" => Some(("pe1-ce1", sockets.0)),
            "pe2" => Some(("pe2-ce2", sockets.1)),
            _ => None,
        };
        let toml = match replace {
            None => cfg.toml,
            Some((ifname, socket)) => {
                let from = format!("interface = \"{ifname}\"");
                if !cfg.toml.contains(&from) {
                    bail!("the seed lab's {} config has no {from}; cannot attach the guest", cfg.router);
                }
                let to = format!("kind = \"vhost-user\"\nsocket = \"{}\"", socket.display());
                cfg.toml.replacen(&from, &to, 1)
            }
        };
        out.push((cfg.router, toml));
    }
    Ok(out)
}

/// The customer's network setup: its address on eth0 (`v4`, `v6`, gateways `.1`).
fn net_setup(v4: &str, v6: &str) -> String {
    let gw = |p: &str| {
        let net = p.split('/').next().unwrap_or(p);
        match net.rsplit_once(['.', ':']) {
            Some((head, _)) if net.contains('.') => format!("{head}.1"),
            Some((head, _)) => format!("{head}:1"),
            None => net.to_string(),
        }
    };
    format!(
        "ip link set eth0 up || fail link
ip addr add {v4} dev eth0 || fail addr4
ip -6 addr add {v6} dev eth0 nodad || fail addr6
ip route add default via {} || fail route4
ip -6 route add default via {} || fail route6
",
        gw(v4),
        gw(v6)
    )
}

/// A ping check: reachable within `wait` seconds, then 3 of 3 replies.
fn ping_check(cmd: &str, dst: &str, wait: u32) -> String {
    format!(
        "retry {wait} {cmd} -c 1 -W 1 {dst} || fail \"no echo reply from {dst} in {wait} s\"
{cmd} -c 3 -W 3 {dst} > /tmp/ping 2>&1 || fail \"{cmd} {dst}: $(cat /tmp/ping)\"
"
    )
}

fn addr(prefix: &str) -> &str {
    prefix.split('/').next().unwrap_or(prefix)
}

/// ce1: pings ce2, then the iperf3 client; its JSON report on the result channel.
fn ce1_script(duration: Duration) -> String {
    let (v4, v6) = (addr(CE2_V4), addr(CE2_V6));
    format!(
        "{setup}{p4}{p6}result PINGS-OK
n=0
until iperf3 -c {v4} -t {secs} -i 0 -J > /tmp/iperf.json 2> /tmp/iperf.err; do
    n=$((n + 1))
    [ $n -ge 30 ] && fail \"iperf3 -c {v4}: $(cat /tmp/iperf.err) $(tail -c 300 /tmp/iperf.json)\"
    sleep 1
done
result {JSON_BEGIN}
cat /tmp/iperf.json > /dev/ttyS1
result {JSON_END}
",
        setup = net_setup(CE1_V4, CE1_V6),
        p4 = ping_check("ping", v4, 90),
        p6 = ping_check("ping6", v6, 30),
        secs = duration.as_secs().max(1),
    )
}

/// ce2: the iperf3 server (one test), and pings to ce1 meanwhile.
fn ce2_script() -> String {
    let (v4, v6) = (addr(CE1_V4), addr(CE1_V6));
    format!(
        "{setup}iperf3 -s -1 > /tmp/iperf-s.log 2>&1 &
server=$!
{p4}{p6}result PINGS-OK
wait $server || fail \"iperf3 server: $(tail -5 /tmp/iperf-s.log)\"
",
        setup = net_setup(CE2_V4, CE2_V6),
        p4 = ping_check("ping", v4, 90),
        p6 = ping_check("ping6", v6, 30),
    )
}

/// The work directory: removed on drop unless kept.
#[derive(Debug)]
pub struct WorkDir {
    path: PathBuf,
    keep: bool,
}

impl WorkDir {
    fn new() -> anyhow::Result<Self> {
        let path = std::env::temp_dir().join(format!("vmpls-lab-vm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self { path, keep: false })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The namespaces, routers and guests of one run.
struct VmLab<'a> {
    opts: &'a VmSeedOptions,
    image: GuestImage,
    topo: Topology,
    work: &'a Path,
    /// Router pids and logs of the vmpls mode.
    routers: RouterSet,
    accel: Option<vmpls_guest::Accel>,
}

impl VmLab<'_> {
    fn router_logs(&self) -> String {
        self.routers.logs(20)
    }

    fn stop_routers(&mut self) -> anyhow::Result<()> {
        self.routers.stop(&mut self.topo, Duration::from_secs(3)).map(drop)
    }

    fn boot(&mut self, name: &str, nic: Nic, script: String, netns: Option<String>) -> anyhow::Result<Guest> {
        let g = Guest::boot(
            &self.image,
            GuestConfig {
                name: name.into(),
                nics: vec![nic],
                script,
                netns,
                script_timeout: SETUP_TIMEOUT + self.opts.duration + Duration::from_secs(60),
                ..GuestConfig::default()
            },
        )
        .with_context(|| format!("booting guest {name}"))?;
        self.accel = Some(g.accel());
        Ok(g)
    }

    /// Starts pe1, p and pe2 (with the fast path where it serves, or without it) and
    /// waits for their vhost-user sockets.
    fn start_routers(&mut self, sockets: (&Path, &Path), fast_path: bool) -> anyhow::Result<()> {
        let params = SeedParams { fast_path_auto: fast_path, ..SeedParams::default() };
        for (router, toml) in vm_router_configs(&params, sockets)? {
            let config = self.work.join(format!("{router}.toml"));
            std::fs::write(&config, toml).with_context(|| format!("writing {}", config.display()))?;
            let log = self.work.join(format!("{router}.log"));
            let mut cmd = RouterSet::command(&self.opts.router_binary, &config);
            cmd.arg("--socket").arg(self.work.join(format!("{router}.ctl")));
            self.routers.start(&mut self.topo, &router, cmd, log, LogMode::Truncate, None)?;
        }
        // QEMU connects once, at start: the sockets must be there first.
        let vhost_user = [sockets.0, sockets.1];
        self.routers.wait_for_files(
            &mut self.topo,
            &vhost_user,
            "the routers' vhost-user sockets",
            Duration::from_secs(10),
        )
    }

    /// Waits until ce1 reported its iperf3 JSON, watching ce2 and the routers.
    fn wait_report(&mut self, ce1: &mut Guest, ce2: &mut Guest) -> anyhow::Result<String> {
        let timeout = SETUP_TIMEOUT + self.opts.duration + Duration::from_secs(30);
        let start = Instant::now();
        loop {
            check_interrupt()?;
            self.routers.check_running(&mut self.topo)?;
            let other = ce2.results();
            if let Some(line) = other.lines().find(|l| l.starts_with(FAIL_MARKER)) {
                bail!("ce2: {line}\nce1:\n{}\nce2 console:\n{}", ce1.results(), tail(&ce2.output(), 15));
            }
            match ce1.wait_for(JSON_END, Duration::from_millis(200)) {
                Ok(_) => break,
                Err(GuestError::Timeout(_)) if start.elapsed() < timeout => {}
                Err(_) if interrupted() => return Err(Interrupted.into()),
                Err(e) => bail!("{e}\nce2:\n{other}"),
            }
        }
        between(&ce1.results(), JSON_BEGIN, JSON_END)
            .ok_or_else(|| anyhow!("ce1's iperf3 report is incomplete"))
    }

    fn run_mode(&mut self, mode: VmMode, progress: &mut dyn FnMut(&str)) -> anyhow::Result<IperfResult> {
        let name = mode.name();
        let (mut ce1, mut ce2) = match mode {
            VmMode::KernelIp => {
                progress(&format!("{name}: booting ce1 and ce2 on TAPs, the kernel routing between them"));
                let ns = self.topo.ns(KERNEL_ROUTER)?.to_string();
                let ce1 =
                    self.boot("ce1", Nic::tap(TAPS[0].0), ce1_script(self.opts.duration), Some(ns.clone()))?;
                let ce2 = self.boot("ce2", Nic::tap(TAPS[1].0), ce2_script(), Some(ns))?;
                for (tap, v4, v6) in TAPS {
                    self.topo.add_address(KERNEL_ROUTER, tap, v4.parse()?)?;
                    self.topo.add_address(KERNEL_ROUTER, tap, v6.parse()?)?;
                }
                self.topo.set_forwarding(KERNEL_ROUTER, true)?;
                (ce1, ce2)
            }
            VmMode::VmplsMpls | VmMode::VmplsMplsTc => {
                progress(&format!("{name}: starting pe1, p and pe2; booting ce1 and ce2 on vhost-user"));
                let sockets = (self.work.join("pe1-ce1.sock"), self.work.join("pe2-ce2.sock"));
                self.start_routers((&sockets.0, &sockets.1), mode == VmMode::VmplsMplsTc)?;
                let ce1 =
                    self.boot("ce1", Nic::vhost_user(&sockets.0), ce1_script(self.opts.duration), None)?;
                let ce2 = self.boot("ce2", Nic::vhost_user(&sockets.1), ce2_script(), None)?;
                (ce1, ce2)
            }
        };
        progress(&format!("{name}: pings ce1 <-> ce2, then iperf3 ce1 -> ce2 for {:?}", self.opts.duration));
        let report = self.wait_report(&mut ce1, &mut ce2);
        let report = match report {
            Err(e) if mode.routers() && !vmpls_lab::is_interrupted(&e) => {
                Err(anyhow!("{e:#}\n{}", self.router_logs()))
            }
            r => r,
        }?;
        parse_iperf_json(&report)
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn check_interrupt() -> anyhow::Result<()> {
    if interrupted() {
        return Err(Interrupted.into());
    }
    Ok(())
}

/// Runs `vmpls lab seed --vm`: builds (or reuses) the guest image, the namespaces and
/// links, runs each mode and returns the report. `progress` gets progress lines.
///
/// # Errors
/// Not root, QEMU or the guest image's tools missing, or (without `keep_going`) a mode
/// failed; `Interrupted` on Ctrl-C. Everything created is removed either way.
pub fn run_seed_vm(opts: &VmSeedOptions, progress: &mut dyn FnMut(&str)) -> anyhow::Result<VmSeedReport> {
    vmpls_lab::require_root()?;
    if opts.duration.is_zero() {
        bail!("the flow duration must be more than 0 s");
    }
    if opts.modes.iter().any(|m| m.routers()) && !opts.router_binary.is_file() {
        bail!("router binary {} not found", opts.router_binary.display());
    }
    progress(&format!("guest image: building or reusing it in {}", opts.cache.dir().display()));
    let image = GuestImage::build(&opts.cache).context("building the guest image")?;
    let mut work = WorkDir::new()?;
    let params = SeedParams::default();
    let mut topo = Topology::new();
    topo.add_host(KERNEL_ROUTER)?;
    for r in ["pe1", "p", "pe2"] {
        topo.add_host_with(r, HostOptions { ipv6: false })?;
    }
    topo.add_link("pe1", "pe1-p", "p", "p-pe1", params.core_mtu)?;
    topo.add_link("p", "p-pe2", "pe2", "pe2-p", params.core_mtu)?;
    progress(&format!("namespaces: {}", topo.namespaces().join(" ")));
    let mut lab = VmLab { opts, image, topo, work: &work.path, routers: RouterSet::new(), accel: None };
    let mut results = Vec::new();
    for &mode in &opts.modes {
        check_interrupt()?;
        let r = lab.run_mode(mode, progress);
        if let Err(e) = lab.stop_routers() {
            progress(&format!("{}: stopping the routers: {e:#}", mode.name()));
        }
        match r {
            Ok(iperf) => {
                progress(&format!(
                    "{}: {:.3} Gbit/s, {} retransmits, {} bytes in {:.1} s",
                    mode.name(),
                    iperf.gbps,
                    iperf.retransmits,
                    iperf.bytes,
                    iperf.seconds
                ));
                results.push(VmModeResult {
                    name: mode.name().into(),
                    iperf: Some(iperf),
                    ratio: None,
                    error: None,
                    routers: Vec::new(),
                });
            }
            Err(e) if interrupted() || vmpls_lab::is_interrupted(&e) => return Err(e),
            Err(e) if opts.keep_going => {
                progress(&format!("{}: failed: {e:#}", mode.name()));
                results.push(VmModeResult {
                    name: mode.name().into(),
                    iperf: None,
                    ratio: None,
                    error: Some(format!("{e:#}")),
                    routers: Vec::new(),
                });
            }
            Err(e) => {
                work.keep = true;
                return Err(e.context(format!(
                    "mode {} (configs and logs in {})",
                    mode.name(),
                    work.path.display()
                )));
            }
        }
    }
    let gbps: Vec<Option<f64>> = results.iter().map(|r| r.iperf.map(|i| i.gbps)).collect();
    let kernel_ip = opts.modes.iter().take(results.len()).position(|m| *m == VmMode::KernelIp);
    for (r, ratio) in results.iter_mut().zip(report::ratios(&gbps, |_| kernel_ip)) {
        r.ratio = ratio;
    }
    let accel = lab.accel.map_or_else(|| "-".to_string(), |a| format!("{a:?}").to_lowercase());
    lab.topo.cleanup()?;
    let mut report = VmSeedReport { modes: results, accel, work_dir: None };
    if !report.ok() {
        work.keep = true;
        report.work_dir = Some(work.path.clone());
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// iperf3 3.12's `-J` report, trimmed to the parts read.
    const IPERF_JSON: &str = r#"{"start": {"version": "iperf 3.12"}, "intervals": [], "end": {"sum_sent": {"start": 0, "end": 1.002912, "seconds": 1.002912, "bytes": 1180958720, "bits_per_second": 9420238026.865767, "retransmits": 12, "sender": true}, "sum_received": {"start": 0, "end": 1.003505, "seconds": 1.003505, "bytes": 1180762059, "bits_per_second": 9413103544.078005, "sender": true}}}"#;

    #[test]
    fn iperf_report_gives_receiver_rate_and_sender_retransmits() {
        let r = parse_iperf_json(IPERF_JSON).unwrap();
        assert!((r.gbps - 9.413103544).abs() < 1e-6, "{r:?}");
        assert_eq!((r.retransmits, r.bytes), (12, 1180762059));
        assert!((r.seconds - 1.003505).abs() < 1e-9);
    }

    #[test]
    fn iperf_errors_and_truncated_reports_are_errors() {
        let e = parse_iperf_json(
            "{\"start\":{},\"intervals\":[],\"end\":{},\"error\":\"unable to connect to server: Connection refused\"}",
        )
        .unwrap_err();
        assert!(e.to_string().contains("Connection refused"), "{e}");
        let e = parse_iperf_json("{\"end\":{\"sum_sent\":{\"retransmits\":1}}}").unwrap_err();
        assert!(e.to_string().contains("end.sum_received.bits_per_second"), "{e}");
        assert!(parse_iperf_json(&IPERF_JSON[..100]).is_err());
    }

    #[test]
    fn the_report_is_taken_from_between_the_markers() {
        let results = format!(
            "VMPLS-GUEST-BOOTED 6.1\nPINGS-OK\n{JSON_BEGIN}\n{{\n\"a\": 1\n}}\n{JSON_END}\nVMPLS-GUEST-DONE rc=0\n"
        );
        assert_eq!(between(&results, JSON_BEGIN, JSON_END).as_deref(), Some("{\n\"a\": 1\n}\n"));
        assert_eq!(between("PINGS-OK\nIPERF-JSON-BEGIN\n{", JSON_BEGIN, JSON_END), None);
        assert_eq!(between("PINGS-OK\n", JSON_BEGIN, JSON_END), None);
    }

    #[test]
    fn vm_configs_are_the_seed_configs_with_vhost_user_customer_ports() {
        let dir = Path::new("/tmp/vmpls-test");
        let (s1, s2) = (dir.join("pe1-ce1.sock"), dir.join("pe2-ce2.sock"));
        let cfgs = vm_router_configs(&SeedParams::default(), (&s1, &s2)).unwrap();
        let seed = router_configs(&SeedParams::default());
        assert_eq!(cfgs.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(), ["pe1", "p", "pe2"]);
        assert_eq!(cfgs[1].1, seed[1].toml, "p is the seed lab's");
        for ((router, toml), (port, socket)) in
            [&cfgs[0], &cfgs[2]].into_iter().zip([("ce1", &s1), ("ce2", &s2)])
        {
            let cfg =
                vmpls_control::Config::from_str(toml, Path::new("vm.toml")).unwrap_or_else(|e| panic!("{e}"));
            let (_, p) = cfg.port(port).unwrap_or_else(|| panic!("{router}: no port {port}"));
            assert_eq!(
                p.kind,
                vmpls_control::PortKind::VhostUser { socket: socket.clone(), mac: None, socket_group: None },
                "{router}"
            );
            let core = cfg.port("core").unwrap().1;
            assert_eq!(core.kind, vmpls_control::PortKind::AfPacket);
            cfg.build_fib().unwrap();
            assert!(toml.contains("fast-path = \"off\""), "{router}: vmpls-mpls is the pipeline's");
        }
        // vmpls-mpls-tc: the routers' default, the fast path wherever it serves.
        let auto = SeedParams { fast_path_auto: true, ..SeedParams::default() };
        for (router, toml) in vm_router_configs(&auto, (&s1, &s2)).unwrap() {
            assert!(!toml.contains("fast-path"), "{router}: {toml}");
        }
    }

    #[test]
    fn guest_scripts_use_the_seed_addresses_and_gateways() {
        let s = ce1_script(Duration::from_secs(5));
        assert!(s.contains("ip addr add 198.18.1.2/24 dev eth0"), "{s}");
        assert!(s.contains("ip route add default via 198.18.1.1"), "{s}");
        assert!(s.contains("ip -6 route add default via 2001:db8:1::1"), "{s}");
        assert!(s.contains("iperf3 -c 198.18.2.2 -t 5 -i 0 -J"), "{s}");
        assert!(s.contains("ping6 -c 3 -W 3 2001:db8:2::2"), "{s}");
        let s = ce2_script();
        assert!(s.contains("ip -6 addr add 2001:db8:2::2/64 dev eth0 nodad"), "{s}");
        assert!(s.contains("ip -6 route add default via 2001:db8:2::1"), "{s}");
        assert!(s.contains("ping -c 3 -W 3 198.18.1.2"), "{s}");
    }

    #[test]
    fn report_has_the_seed_table_and_json() {
        let r = |gbps| Some(IperfResult { gbps, retransmits: 4, bytes: 100, seconds: 5.0 });
        let report = VmSeedReport {
            modes: vec![
                VmModeResult {
                    name: "kernel-ip".into(),
                    iperf: r(0.4),
                    ratio: Some(1.0),
                    error: None,
                    routers: Vec::new(),
                },
                VmModeResult {
                    name: "vmpls-mpls".into(),
                    iperf: r(0.5),
                    ratio: Some(1.25),
                    error: None,
                    routers: Vec::new(),
                },
                VmModeResult {
                    name: "x".into(),
                    iperf: None,
                    ratio: None,
                    error: Some("boom".into()),
                    routers: Vec::new(),
                },
            ],
            accel: "tcg".into(),
            work_dir: None,
        };
        let md = report.to_markdown();
        assert!(md.starts_with("| mode | Gbit/s | retransmits | ratio to kernel-ip |\n"), "{md}");
        assert!(md.contains("| vmpls-mpls | 0.50 | 4 | 1.25 |"), "{md}");
        assert!(md.contains("| x | failed | - | - |\n\n- x: boom"), "{md}");
        let j = report.to_json();
        assert_eq!(j["modes"][1]["ratio"], 1.25);
        assert_eq!(j["modes"][0]["retransmits"], 4);
        assert_eq!(j["guests"]["accel"], "tcg");
        assert!(!report.ok());
    }
}
