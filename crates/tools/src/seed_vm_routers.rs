//! `vmpls lab seed --vm-routers`: the seed experiment as its author ran it, with the MPLS
//! routers inside QEMU guests on virtio-net.
//!
//! ```text
//!  host netns ce1                  guest "pe" (netns pe1 | netns pe2)                 host netns ce2
//!  tap .1.2 ==virtio== pe1-ce1 [pe1] pe1-p ==+    +== pe2-p [pe2] pe2-ce2 ==virtio== tap .2.2
//!                                            |    |
//!                               bridge br-w  |    |  bridge br-e   (host netns "links")
//!                                            |    |
//!                          guest "p":  p-pe1 ==+  +== p-pe2   [p]
//! ```
//!
//! Two guests, as in the seed: a P guest, and a PE guest holding pe1 and pe2 in two
//! network namespaces (each PE with two virtio-net NICs). The iperf3 endpoints ce1 and ce2
//! are host namespaces on the PE guest's customer TAPs (the seed had them inside the PE
//! guest; on the host they cost the TCG guests no CPU, so the guests' time goes to
//! routing). The guests' core NICs are TAPs joined pairwise by a Linux bridge in a host
//! namespace: a bridge forwards the TAPs' frames (super-frames included, with their
//! virtio-net header) without touching them, like the seed's libvirt bridge.
//!
//! Every mode boots both guests afresh with the same image, NICs, addresses and labels,
//! all taken from the seed lab's router configs ([`router_configs`]: interfaces are
//! renamed inside the guests to the names those configs use):
//! - `kernel-ip`: the guests' kernels route IP (the `vmpls-ip` configs as kernel routes);
//! - `kernel-mpls`: the guests' kernel MPLS (`mpls_router`, `mpls_iptunnel`), the same
//!   labels as vmpls, configured with iproute2 from the same configs;
//! - `vmpls-mpls`: `vmpls run` in both guests (pe1 and pe2 in their namespaces, p on its
//!   NICs) with the seed configs, core links at MTU 1500 as in the seed;
//! - `vmpls-mpls-64k` (and `kernel-mpls-64k`): the same with the guests' core NICs at MTU
//!   65521 (virtio-net allows up to 65535, a TAP 65521, and the bridge forwards no more
//!   than its ports' MTU): vmpls pushes labels on whole super-frames and sends them as
//!   single frames, where the kernel must still cut
//!   every labelled super-frame into `gso_size` segments (virtio-net has no MPLS GSO);
//! - `vmpls-mpls-tc`, `vmpls-mpls-64k-tc`: those two with `fast-path = "tc"`: the in-kernel
//!   fast path on the guests' virtio-net NICs (out by `bpf_redirect` to the NIC), the
//!   pipeline for what it leaves (labelled super-frames, pops of frames a NIC received).
//!
//! In each mode the host checks the path (ping ce1 -> ce2), sends a content-checked
//! transfer ce1 -> ce2 while dumpcap watches the guests' core TAPs (in MPLS modes the
//! labels seen there must be the configured ones), then runs `iperf3 -c ce2 -t DURATION`
//! from ce1. Ratios refer to `kernel-ip` in the same run.
//!
//! Cleanup: guests are killed when their [`Guest`] drops (their TAPs go with QEMU),
//! namespaces and bridges when the [`Topology`] drops or is cleaned up; Ctrl-C sets the
//! lab's interrupt flag, which every wait checks.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use vmpls_control::{Config, LabelConfigAction, RouteAction};
use vmpls_guest::{ExtraFile, FAIL_MARKER, Guest, GuestCache, GuestConfig, GuestImage, Nic};
use vmpls_lab::capture::{Capture, tshark_fields};
use vmpls_lab::seed::{CE1_V4, CE2_V4, SeedParams, router_configs};
use vmpls_lab::stats::RouterStats;
use vmpls_lab::topology::{HostOptions, Topology};
use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};
use vmpls_lab::{Interrupted, interrupted};

use crate::seed_vm::{IperfResult, LabelOps, VmModeResult, VmSeedReport, parse_iperf_json};

/// The host namespace with the bridges that join the guests' core TAPs.
const LINKS: &str = "links";
/// The guests' NICs: (guest, TAP on the host, name inside the guest, netns in the guest).
/// The guest names are the seed configs' interfaces.
const PE_NICS: [(&str, &str, &str); 4] = [
    ("pe-ce1", "pe1-ce1", "pe1"),
    ("pe-pe1p", "pe1-p", "pe1"),
    ("pe-pe2p", "pe2-p", "pe2"),
    ("pe-ce2", "pe2-ce2", "pe2"),
];
const P_NICS: [(&str, &str, &str); 2] = [("p-west", "p-pe1", ""), ("p-east", "p-pe2", "")];
/// The bridges: (bridge, the PE guest's TAP, the P guest's TAP).
const BRIDGES: [(&str, &str, &str); 2] = [("br-w", "pe-pe1p", "p-west"), ("br-e", "pe-pe2p", "p-east")];
/// The customer TAPs and the host namespaces they move into: (TAP, host).
const CE_TAPS: [(&str, &str); 2] = [("pe-ce1", "ce1"), ("pe-ce2", "ce2")];
/// How long guests may take to boot and configure themselves.
const SETUP_TIMEOUT: Duration = Duration::from_secs(150);
/// How long ce1 -> ce2 may take to answer after the guests are ready (ARP on every hop).
const REACH_TIMEOUT: Duration = Duration::from_secs(60);
/// The content-checked transfer of each mode.
const CHECK_BYTES: u64 = 4 << 20;
/// The MTU of the host side of the core links (TAPs and bridges): a TAP's largest
/// (65535 less its Ethernet header), so the guests' MTU alone decides. The `-64k` modes
/// give the guests' core NICs the same.
const HOST_CORE_MTU: u32 = 65521;

/// `VMPLS_GUEST_PERF=SECONDS`: each guest records a CPU profile (`perf record -a`, 99 Hz)
/// for SECONDS, starting [`PROFILE_DELAY`] after it is ready (when iperf3 runs, if the
/// mode's `--duration` covers it), and prints `perf report` to its console, which
/// `VMPLS_GUEST_KEEP_RUNS=1` keeps. Needs the host's `perf` (Debian `linux-perf`).
const PROFILE_ENV: &str = "VMPLS_GUEST_PERF";
/// From a guest's READY to the start of its profile: the path check and the
/// content-checked transfer come first.
const PROFILE_DELAY: Duration = Duration::from_secs(14);

/// How long the lab waits after the flow for the guests' `perf report`s (slow under TCG).
const PROFILE_REPORT_TIMEOUT: Duration = Duration::from_secs(180);

/// How long each guest profiles, from [`PROFILE_ENV`]; `None` when unset.
fn profile_seconds() -> anyhow::Result<Option<u32>> {
    match std::env::var(PROFILE_ENV) {
        Err(_) => Ok(None),
        Ok(v) => match v.trim().parse::<u32>() {
            Ok(n) if (1..=600).contains(&n) => Ok(Some(n)),
            _ => bail!("{PROFILE_ENV}={v}: give the profile's length in seconds (1 to 600)"),
        },
    }
}

/// The guest script's line that records and prints the profile.
fn profile_command(seconds: u32) -> String {
    format!(
        "(sleep {delay}; perf record -a -F 99 -o /tmp/perf.data -- sleep {seconds} >/dev/null 2>&1; \
         echo VMPLS-PERF; perf report -i /tmp/perf.data --stdio --no-children --sort comm,sym 2>&1 \
         | grep -v '^#' | grep -v '^$' | head -60; echo VMPLS-PERF-END) > /dev/console 2>&1 &\n",
        delay = PROFILE_DELAY.as_secs()
    )
}

/// How the guests route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouterMode {
    /// The guests' kernels route IP.
    KernelIp,
    /// The guests' kernel MPLS.
    KernelMpls,
    /// Kernel MPLS with core NICs at MTU 65521.
    KernelMpls64k,
    /// vmpls in both guests.
    VmplsMpls,
    /// vmpls with core NICs at MTU 65521.
    VmplsMpls64k,
    /// vmpls with its in-kernel fast path on the guests' NICs.
    VmplsMplsTc,
    /// The same with core NICs at MTU 65521.
    VmplsMpls64kTc,
}

impl RouterMode {
    /// Every mode, in report order.
    pub const ALL: [RouterMode; 7] = [
        RouterMode::KernelIp,
        RouterMode::KernelMpls,
        RouterMode::KernelMpls64k,
        RouterMode::VmplsMpls,
        RouterMode::VmplsMpls64k,
        RouterMode::VmplsMplsTc,
        RouterMode::VmplsMpls64kTc,
    ];

    /// What `vmpls lab seed --vm-routers` runs without `--modes`.
    pub const DEFAULT: [RouterMode; 6] = [
        RouterMode::KernelIp,
        RouterMode::KernelMpls,
        RouterMode::VmplsMpls,
        RouterMode::VmplsMpls64k,
        RouterMode::VmplsMplsTc,
        RouterMode::VmplsMpls64kTc,
    ];

    /// The name in the report and in `--modes`.
    pub fn name(self) -> &'static str {
        match self {
            RouterMode::KernelIp => "kernel-ip",
            RouterMode::KernelMpls => "kernel-mpls",
            RouterMode::KernelMpls64k => "kernel-mpls-64k",
            RouterMode::VmplsMpls => "vmpls-mpls",
            RouterMode::VmplsMpls64k => "vmpls-mpls-64k",
            RouterMode::VmplsMplsTc => "vmpls-mpls-tc",
            RouterMode::VmplsMpls64kTc => "vmpls-mpls-64k-tc",
        }
    }

    /// The guests' core NIC MTU.
    pub fn core_mtu(self) -> u32 {
        match self {
            RouterMode::KernelMpls64k | RouterMode::VmplsMpls64k | RouterMode::VmplsMpls64kTc => {
                HOST_CORE_MTU
            }
            _ => 1500,
        }
    }

    fn vmpls(self) -> bool {
        matches!(
            self,
            RouterMode::VmplsMpls
                | RouterMode::VmplsMpls64k
                | RouterMode::VmplsMplsTc
                | RouterMode::VmplsMpls64kTc
        )
    }

    fn fast_path(self) -> bool {
        matches!(self, RouterMode::VmplsMplsTc | RouterMode::VmplsMpls64kTc)
    }

    fn mpls(self) -> bool {
        self != RouterMode::KernelIp
    }

    /// Parses `--modes`: names separated by commas.
    ///
    /// # Errors
    /// An unknown or repeated name, or none.
    pub fn parse_list(text: &str) -> anyhow::Result<Vec<RouterMode>> {
        let mut modes = Vec::new();
        for name in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let mode = RouterMode::ALL.into_iter().find(|m| m.name() == name).ok_or_else(|| {
                let all: Vec<_> = RouterMode::ALL.iter().map(|m| m.name()).collect();
                anyhow!("unknown mode {name:?}: the modes are {}", all.join(", "))
            })?;
            if modes.contains(&mode) {
                bail!("mode {name} is given twice");
            }
            modes.push(mode);
        }
        if modes.is_empty() {
            bail!("no mode given: name one or more of kernel-ip, kernel-mpls, vmpls-mpls, ...");
        }
        Ok(modes)
    }
}

/// What `vmpls lab seed --vm-routers` does.
#[derive(Debug, Clone)]
pub struct VmRoutersOptions {
    /// The `vmpls` binary copied into the guests.
    pub router_binary: PathBuf,
    /// How long each mode's iperf3 flow runs (at least 1 s).
    pub duration: Duration,
    /// Where the guest image is built and cached.
    pub cache: GuestCache,
    /// The modes, in order; ratios refer to kernel-ip.
    pub modes: Vec<RouterMode>,
    /// Go on with the next mode when one fails (the report shows the error).
    pub keep_going: bool,
}

impl VmRoutersOptions {
    /// The default modes with the default guest cache.
    pub fn new(router_binary: impl Into<PathBuf>, duration: Duration) -> Self {
        Self {
            router_binary: router_binary.into(),
            duration,
            cache: GuestCache::default_location(),
            modes: RouterMode::DEFAULT.to_vec(),
            keep_going: false,
        }
    }
}

/// The seed configs a mode's routers use: the MPLS ones, or the IP-only ones for
/// kernel-ip.
fn mode_configs(mode: RouterMode) -> Vec<(String, String)> {
    let params = SeedParams { ip_only: !mode.mpls(), fast_path: mode.fast_path(), ..SeedParams::default() };
    router_configs(&params).into_iter().map(|c| (c.router, c.toml)).collect()
}

fn nh_via(via: Option<IpAddr>) -> String {
    match via {
        Some(IpAddr::V4(a)) => format!(" via inet {a}"),
        Some(IpAddr::V6(a)) => format!(" via inet6 {a}"),
        None => String::new(),
    }
}

/// The iproute2 and sysctl commands that make a guest kernel do what `config` tells a
/// vmpls router: addresses on the ports, IP routes (with `encap mpls` for pushes), and
/// MPLS routes for swaps and pops. `ip` is the iproute2 prefix (`ip -n pe1`), `exec` the
/// prefix that runs a command in the router's namespace (`ip netns exec pe1`).
///
/// # Errors
/// The config uses what the kernel translation does not cover (ECMP, blackholes, VRFs).
pub fn kernel_commands(config: &Config, ip: &str, exec: &str) -> anyhow::Result<String> {
    let mut s = String::new();
    let port = |id: u16| -> anyhow::Result<&str> {
        config.ports.get(id as usize).map(|p| p.interface.as_str()).ok_or_else(|| anyhow!("no port {id}"))
    };
    let _ = writeln!(s, "{exec} sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1");
    let mpls = !config.labels.is_empty()
        || config.routes.iter().any(
            |r| matches!(&r.action, RouteAction::Forward(nhs) if nhs.iter().any(|n| !n.labels.is_empty())),
        );
    if mpls {
        let _ = writeln!(s, "{exec} sysctl -qw net.mpls.platform_labels=4096 || fail \"no kernel MPLS\"");
    }
    for p in &config.ports {
        if mpls {
            let _ = writeln!(s, "{exec} sysctl -qw net.mpls.conf.{}.input=1", p.interface);
        }
        for (a, len) in &p.addresses {
            let nodad = if a.is_ipv6() { " nodad" } else { "" };
            let _ = writeln!(s, "{ip} addr add {a}/{len} dev {}{nodad} || fail \"address {a}\"", p.interface);
        }
    }
    for r in &config.routes {
        let RouteAction::Forward(nhs) = &r.action else { bail!("line {}: blackhole routes", r.line) };
        let [nh] = nhs.as_slice() else { bail!("line {}: one next hop a route only", r.line) };
        if r.vrf != "default" {
            bail!("line {}: VRFs", r.line);
        }
        let encap = match nh.labels.as_slice() {
            [] => String::new(),
            labels => {
                format!(" encap mpls {}", labels.iter().map(u32::to_string).collect::<Vec<_>>().join("/"))
            }
        };
        let family = if r.prefix.is_ipv6() { " -6" } else { "" };
        let _ = writeln!(
            s,
            "{ip}{family} route add {}/{}{encap}{} dev {} || fail \"route {}/{}\"",
            r.prefix,
            r.len,
            nh_via(nh.via),
            port(nh.port)?,
            r.prefix,
            r.len
        );
    }
    for l in &config.labels {
        let what = match &l.action {
            LabelConfigAction::PopAndLookup { .. } => " dev lo".to_string(),
            LabelConfigAction::Forward(nhs) => {
                let [nh] = nhs.as_slice() else { bail!("line {}: one next hop a label only", l.line) };
                let out = match nh.labels.as_slice() {
                    [] => String::new(),
                    labels => {
                        format!(" as {}", labels.iter().map(u32::to_string).collect::<Vec<_>>().join("/"))
                    }
                };
                format!("{out}{} dev {}", nh_via(nh.via), port(nh.port)?)
            }
        };
        let _ = writeln!(s, "{ip} -f mpls route add {}{what} || fail \"label {}\"", l.label, l.label);
    }
    Ok(s)
}

/// A guest's script for `mode`: its NICs renamed to the seed configs' interface names
/// (and moved into the router namespaces for the PE guest), MTUs set, then each router
/// configured (kernel) or started (vmpls); `READY` on the result channel, then it waits.
fn guest_script(
    mode: RouterMode,
    nics: &[(&str, &str, &str)],
    routers: &[&str],
    profile: Option<u32>,
) -> anyhow::Result<String> {
    let mut s =
        String::from("sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0\n");
    let configs = mode_configs(mode);
    if mode.fast_path() {
        // The socket filter needs more option memory than Linux 6.1 allows by default,
        // and the limit can only be raised from the initial namespace, where the PEs'
        // routers do not run.
        let _ = writeln!(s, "sysctl -qw net.core.optmem_max={}", vmpls_fastpath::OPTMEM_FOR_FILTER);
    }
    for ns in routers.iter().filter(|_| nics.iter().any(|n| !n.2.is_empty())) {
        let _ = writeln!(s, "ip netns add {ns} || fail \"ip netns add {ns}\"\nip -n {ns} link set lo up");
    }
    for (i, (_, name, ns)) in nics.iter().enumerate() {
        let _ = writeln!(s, "ip link set eth{i} name {name} || fail \"rename eth{i}\"");
        if !ns.is_empty() {
            let _ = writeln!(s, "ip link set {name} netns {ns} || fail \"move {name}\"");
        }
        let ip = if ns.is_empty() { "ip".to_string() } else { format!("ip -n {ns}") };
        let mtu = if name.ends_with("-p") || name.starts_with("p-") { mode.core_mtu() } else { 1500 };
        let _ = writeln!(s, "{ip} link set {name} mtu {mtu} up || fail \"mtu {mtu} on {name}\"");
    }
    let mut pids = Vec::new();
    for router in routers {
        let toml = &configs.iter().find(|(r, _)| r == router).ok_or_else(|| anyhow!("no config {router}"))?.1;
        let ns = nics.iter().find(|n| n.2 == *router).map(|_| *router);
        let (ip, exec) = match ns {
            Some(ns) => (format!("ip -n {ns}"), format!("ip netns exec {ns}")),
            None => ("ip".to_string(), String::new()),
        };
        if mode.vmpls() {
            // vmpls owns the addresses; the guest kernel stays quiet on these NICs.
            let _ = writeln!(s, "{exec} sysctl -qw net.ipv6.conf.all.disable_ipv6=1");
            let _ = writeln!(s, "cat > /tmp/{router}.toml <<'VMPLS_EOF'\n{toml}VMPLS_EOF");
            let _ = writeln!(
                s,
                "{exec} vmpls run --config /tmp/{router}.toml --socket /tmp/{router}.sock \
                 --stats-file /tmp/{router}.json > /tmp/{router}.log 2>&1 &\n{router}_pid=$!"
            );
            pids.push(*router);
        } else {
            let config = Config::from_str(toml, Path::new(&format!("{router}.toml")))
                .map_err(|e| anyhow!("the seed config of {router}: {e}"))?;
            s.push_str(&kernel_commands(&config, &ip, &exec)?);
        }
    }
    if !pids.is_empty() {
        s.push_str("sleep 2\n");
        for r in &pids {
            let _ = writeln!(
                s,
                "kill -0 ${r}_pid 2>/dev/null || {{ cat /tmp/{r}.log > /dev/console; fail \"vmpls {r} did not start: $(tail -3 /tmp/{r}.log)\"; }}"
            );
            // Its start-up lines (how each port is served: the fast path's come once its
            // programs are loaded) on the console, which VMPLS_GUEST_KEEP_RUNS keeps.
            let _ = writeln!(s, "(sleep 20; cat /tmp/{r}.log > /dev/console) &");
        }
    }
    // CPU samples on the console every 2 s (kept with VMPLS_GUEST_KEEP_RUNS): the guest's
    // /proc/stat, and the utime and stime of its vmpls processes, to see where its time
    // goes.
    s.push_str(
        "(while sleep 2; do echo \"VMPLS-CPU $(head -1 /proc/stat) vmpls $(for x in $(pidof vmpls); do \
         cut -d' ' -f14,15 /proc/$x/stat; done | tr '\\n' ' ')\"; done) > /dev/console 2>&1 &\n",
    );
    // The routers' counters every 2 s on the result channel (see `router_label_ops`),
    // from the stats files the routers write: a `vmpls stats` process each time would
    // cost the TCG guests more than the kernel modes' guests spend on their counters.
    for r in &pids {
        let _ = writeln!(
            s,
            "(while sleep 2; do result \"STATS {r} $(tr -d '\\n' < /tmp/{r}.json 2>/dev/null)\"; done) &"
        );
    }
    if let Some(seconds) = profile {
        s.push_str(&profile_command(seconds));
    }
    s.push_str("result READY\n");
    if pids.is_empty() {
        s.push_str("sleep 100000\n");
    } else {
        let _ = writeln!(s, "wait ${}_pid", pids[0]);
        for r in &pids {
            let _ = writeln!(s, "cat /tmp/{r}.log > /dev/console");
        }
        s.push_str("fail \"a vmpls router exited\"\n");
    }
    Ok(s)
}

/// What each vmpls router in `guest` did, from its last counters on the result channel.
fn router_label_ops(guest: &Guest) -> Vec<(String, LabelOps)> {
    let results = guest.results();
    let mut last = std::collections::BTreeMap::new();
    for line in results.lines() {
        let Some(rest) = line.strip_prefix("STATS ") else { continue };
        let Some((router, json)) = rest.split_once(' ') else { continue };
        if let Ok(stats) = RouterStats::parse(json) {
            last.insert(router.to_string(), LabelOps::from_stats(&stats));
        }
    }
    last.into_iter().collect()
}

/// The labels a capture on a core link must show: (link TAP, labels).
fn expected_labels() -> [(&'static str, BTreeSet<String>); 2] {
    let p = SeedParams::default();
    let set = |a: u32, b: u32| [a, b].into_iter().map(|l| l.to_string()).collect();
    // West: pe1 -> p with pe1's push, p -> pe1 with p's swap; east the mirror image.
    [("p-west", set(p.pe1_push, p.p_to_pe1)), ("p-east", set(p.p_to_pe2, p.pe2_push))]
}

fn check_interrupt() -> anyhow::Result<()> {
    if interrupted() {
        return Err(Interrupted.into());
    }
    Ok(())
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn ip(ns: &str, args: &[&str]) -> anyhow::Result<()> {
    let out =
        Command::new("ip").args(["-n", ns]).args(args).output().context("running ip (package iproute2)")?;
    if !out.status.success() {
        bail!("ip -n {ns} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// The host side of one run: namespaces ce1, ce2 and the bridges' namespace.
pub struct VmRoutersLab {
    topo: Topology,
    image: GuestImage,
    /// The router binary, stripped, for the guests.
    vmpls: ExtraFile,
    work: PathBuf,
    /// The accelerator the guests ran on.
    pub accel: Option<vmpls_guest::Accel>,
}

/// The two guests of one mode; dropping them kills QEMU.
pub struct ModeGuests {
    pe: Guest,
    p: Guest,
}

impl VmRoutersLab {
    /// Builds (or reuses) the guest image and creates the host namespaces and bridges.
    ///
    /// # Errors
    /// Not root, tools missing, or the namespaces cannot be made.
    pub fn new(router_binary: &Path, cache: &GuestCache, work: &Path) -> anyhow::Result<VmRoutersLab> {
        vmpls_lab::require_root()?;
        if !router_binary.is_file() {
            bail!("router binary {} not found", router_binary.display());
        }
        let image = GuestImage::build(cache).context("building the guest image")?;
        let vmpls = ExtraFile::stripped_program(router_binary, work, "/usr/bin/vmpls");
        let mut topo = Topology::new();
        topo.add_host(LINKS)?;
        for h in ["ce1", "ce2"] {
            topo.add_host_with(h, HostOptions { ipv6: false })?;
        }
        let ns = topo.ns(LINKS)?.to_string();
        for (br, _, _) in BRIDGES {
            ip(&ns, &["link", "add", "name", br, "type", "bridge", "stp_state", "0"])?;
            ip(&ns, &["link", "set", br, "mtu", &HOST_CORE_MTU.to_string(), "up"])?;
        }
        Ok(VmRoutersLab { topo, image, vmpls, work: work.to_path_buf(), accel: None })
    }

    /// The files each guest gets: vmpls, and perf when profiling.
    fn guest_files(&self) -> anyhow::Result<Vec<ExtraFile>> {
        let mut files = vec![self.vmpls.clone()];
        if profile_seconds()?.is_some() {
            let perf = Path::new("/usr/bin/perf");
            if !perf.is_file() {
                bail!("{PROFILE_ENV} needs perf on the host (Debian package linux-perf)");
            }
            files.push(ExtraFile::program(perf, "/usr/bin/perf"));
        }
        Ok(files)
    }

    fn boot(
        &self,
        name: &str,
        nics: &[(&str, &str, &str)],
        script: String,
        memory_mib: u32,
    ) -> anyhow::Result<Guest> {
        let ns = self.topo.ns(LINKS)?.to_string();
        Guest::boot(
            &self.image,
            GuestConfig {
                name: name.into(),
                nics: nics.iter().map(|n| Nic::tap(n.0)).collect(),
                script,
                netns: Some(ns),
                memory_mib,
                script_timeout: Duration::from_secs(900),
                files: self.guest_files()?,
                ..GuestConfig::default()
            },
        )
        .with_context(|| format!("booting guest {name}"))
    }

    /// Boots both guests for `mode`, joins their TAPs (bridges, ce1 and ce2) and waits
    /// until both report their routers ready and ce1 reaches ce2.
    ///
    /// # Errors
    /// A guest failed to boot or configure, or the path does not answer in time.
    pub fn start_mode(&mut self, mode: RouterMode) -> anyhow::Result<ModeGuests> {
        let profile = profile_seconds()?;
        let p_script = guest_script(mode, &P_NICS, &["p"], profile)?;
        let pe_script = guest_script(mode, &PE_NICS, &["pe1", "pe2"], profile)?;
        let p = self.boot("p", &P_NICS, p_script, 512)?;
        let pe = self.boot("pe", &PE_NICS, pe_script, 768)?;
        self.accel = Some(p.accel());
        let mut guests = ModeGuests { pe, p };
        let ns = self.topo.ns(LINKS)?.to_string();
        let mtu = HOST_CORE_MTU.to_string();
        for (br, a, b) in BRIDGES {
            for tap in [a, b] {
                ip(&ns, &["link", "set", tap, "mtu", &mtu])?;
                ip(&ns, &["link", "set", tap, "master", br, "up"])?;
            }
        }
        for ((tap, host), (addr, gw)) in
            CE_TAPS.into_iter().zip([(CE1_V4, "198.18.1.1"), (CE2_V4, "198.18.2.1")])
        {
            let target = self.topo.ns(host)?.to_string();
            ip(&ns, &["link", "set", tap, "netns", &target])?;
            self.topo.set_up(host, tap, true)?;
            self.topo.add_address(host, tap, addr.parse()?)?;
            self.topo.add_default_route(host, gw.parse()?)?;
        }
        let deadline = Instant::now() + SETUP_TIMEOUT;
        for g in [&mut guests.p, &mut guests.pe] {
            loop {
                check_interrupt()?;
                match g.wait_for("READY", Duration::from_millis(500)) {
                    Ok(_) => break,
                    Err(vmpls_guest::GuestError::Timeout(_)) if Instant::now() < deadline => {}
                    Err(e) => return Err(anyhow!("{e}")),
                }
            }
        }
        let deadline = Instant::now() + REACH_TIMEOUT;
        let dst = CE2_V4.split('/').next().unwrap_or(CE2_V4);
        loop {
            check_interrupt()?;
            guests.check()?;
            let mut cmd = Command::new("ping");
            cmd.args(["-c", "1", "-W", "1", dst]);
            if self.topo.run("ce1", cmd)?.status.success() {
                return Ok(guests);
            }
            if Instant::now() > deadline {
                bail!(
                    "ce1 cannot reach {dst} through the guests in {REACH_TIMEOUT:?}\npe:\n{}\np:\n{}",
                    tail(&guests.pe.output(), 25),
                    tail(&guests.p.output(), 25)
                );
            }
        }
    }

    /// Sends `CHECK_BYTES` ce1 -> ce2, content-checked, while dumpcap watches the P
    /// guest's TAPs; in MPLS modes the labels seen there must be the configured ones.
    ///
    /// # Errors
    /// The transfer is incomplete or corrupt, or other labels crossed the links.
    pub fn check_transfer(&mut self, mode: RouterMode, guests: &mut ModeGuests) -> anyhow::Result<()> {
        let ns = self.topo.ns(LINKS)?.to_string();
        let mut captures = Vec::new();
        if mode.mpls() {
            for (tap, want) in expected_labels() {
                let path = self.work.join(format!("{}-{tap}.pcap", mode.name()));
                captures.push((Capture::start(&ns, tap, &path, Some("mpls"))?, tap, want));
            }
        }
        let opts = FlowOptions { limit: Limit::Bytes(CHECK_BYTES), ..FlowOptions::default() };
        let dst: IpAddr = CE2_V4.split('/').next().unwrap_or(CE2_V4).parse()?;
        let flow = run_flow(self.topo.ns("ce1")?, self.topo.ns("ce2")?, dst, &opts, &mut |_| {})
            .context("the content-checked transfer ce1 -> ce2")?;
        guests.check()?;
        if !flow.content_ok || flow.bytes_received != CHECK_BYTES {
            bail!(
                "the transfer ce1 -> ce2 arrived damaged: {} of {CHECK_BYTES} bytes, first mismatch at {:?}",
                flow.bytes_received,
                flow.first_mismatch
            );
        }
        for (cap, tap, want) in captures {
            let pcap = cap.stop()?;
            let rows = tshark_fields(&pcap, "mpls", &["mpls.label"], Duration::from_secs(60))?;
            let seen: BTreeSet<String> = rows.into_iter().filter_map(|r| r.into_iter().next()).collect();
            if seen != want {
                bail!("labels on {tap}: {seen:?}, configured {want:?}");
            }
            let _ = std::fs::remove_file(pcap);
        }
        Ok(())
    }

    /// iperf3 ce1 -> ce2 for `duration`, tried twice if need be.
    ///
    /// # Errors
    /// iperf3 failed or did not finish in time, twice.
    pub fn iperf(&mut self, guests: &mut ModeGuests, duration: Duration) -> anyhow::Result<IperfResult> {
        self.iperf_once(guests, duration).or_else(|first| {
            // Under TCG an iperf3 client now and then never ends (a test whose path had
            // carried the content-checked transfer just before; either mode, kernel's or
            // vmpls's): one more try, with the first failure kept if that fails too.
            eprintln!("iperf3 ce1 -> ce2 failed ({first:#}); trying once more");
            guests.check()?;
            self.iperf_once(guests, duration).map_err(|second| second.context(format!("after: {first:#}")))
        })
    }

    /// One iperf3 run: a server in ce2 for one test, the client in ce1.
    fn iperf_once(&mut self, guests: &mut ModeGuests, duration: Duration) -> anyhow::Result<IperfResult> {
        let log = self.work.join("iperf3-server.log");
        let mut server = Command::new("iperf3");
        server
            .args(["-s", "-1", "-p", "5201"])
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(self.work.join("iperf3-server.err"))?);
        let pid = self.topo.spawn("ce2", "iperf3 server", server, Some(log))?;
        std::thread::sleep(Duration::from_millis(300));
        let dst = CE2_V4.split('/').next().unwrap_or(CE2_V4);
        let mut client = Command::new("iperf3");
        let secs = duration.as_secs().max(1).to_string();
        client.args(["-c", dst, "-p", "5201", "-t", &secs, "-i", "0", "-J", "--connect-timeout", "5000"]);
        let out = self.topo.run_timeout("ce1", client, duration + Duration::from_secs(30));
        let _ = self.topo.stop(pid, Duration::from_secs(2));
        guests.check()?;
        let out = out.context("iperf3 -c")?;
        parse_iperf_json(&String::from_utf8_lossy(&out.stdout))
    }

    /// Removes everything the lab created.
    ///
    /// # Errors
    /// A namespace could not be deleted.
    pub fn cleanup(&mut self) -> anyhow::Result<()> {
        self.topo.cleanup()
    }
}

impl ModeGuests {
    /// Waits until both guests printed their profile (or `timeout` passes: a profile
    /// that started after the flow ended, or a slow guest, is left unfinished).
    fn wait_for_profiles(&mut self, timeout: Duration, progress: &mut dyn FnMut(&str)) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while [&self.p, &self.pe].iter().any(|g| !g.output().contains("VMPLS-PERF-END")) {
            check_interrupt()?;
            if Instant::now() >= deadline {
                progress(&format!("profiles: not all printed within {timeout:?}"));
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(())
    }

    /// Fails if a guest reported a failure or exited.
    fn check(&mut self) -> anyhow::Result<()> {
        for g in [&mut self.p, &mut self.pe] {
            let results = g.results();
            if let Some(line) =
                results.lines().find(|l| l.starts_with(FAIL_MARKER) || l.contains("GUEST-DONE"))
            {
                bail!("guest {}: {line}\nconsole:\n{}", g.name(), tail(&g.output(), 30));
            }
            if g.pid().is_none() {
                bail!("guest {} is gone\nconsole:\n{}", g.name(), tail(&g.output(), 30));
            }
        }
        Ok(())
    }
}

/// Runs `vmpls lab seed --vm-routers` and returns the report (the `lab seed --vm` one).
///
/// # Errors
/// Not root, tools missing, or (without `keep_going`) a mode failed; `Interrupted` on
/// Ctrl-C. Everything created is removed either way.
pub fn run_seed_vm_routers(
    opts: &VmRoutersOptions,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<VmSeedReport> {
    if opts.duration.as_secs() == 0 {
        bail!("the flow duration must be at least 1 s");
    }
    if opts.modes.is_empty() {
        bail!("no mode to run");
    }
    let work = std::env::temp_dir().join(format!("vmpls-lab-vmr-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    progress(&format!("guest image: building or reusing it in {}", opts.cache.dir().display()));
    let result = run_in(opts, &work, progress);
    // Kept for a look after a failure; not after Ctrl-C or success.
    let keep = match &result {
        Ok(r) => !r.ok(),
        Err(e) => !vmpls_lab::is_interrupted(e),
    };
    if !keep {
        let _ = std::fs::remove_dir_all(&work);
    }
    result.map(|mut r| {
        if keep {
            r.work_dir = Some(work);
        }
        r
    })
}

fn run_in(
    opts: &VmRoutersOptions,
    work: &Path,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<VmSeedReport> {
    let mut lab = VmRoutersLab::new(&opts.router_binary, &opts.cache, work)?;
    progress(&format!("namespaces: {}", lab.topo.namespaces().join(" ")));
    let mut results = Vec::new();
    for &mode in &opts.modes {
        check_interrupt()?;
        let name = mode.name();
        progress(&format!("{name}: booting guests p and pe (core MTU {})", mode.core_mtu()));
        let started = Instant::now();
        let r = (|| {
            let mut guests = lab.start_mode(mode)?;
            progress(&format!(
                "{name}: ready in {:.0?}; content-checked transfer ce1 -> ce2",
                started.elapsed()
            ));
            lab.check_transfer(mode, &mut guests)?;
            check_interrupt()?;
            progress(&format!("{name}: iperf3 ce1 -> ce2 for {:?}", opts.duration));
            let iperf = lab.iperf(&mut guests, opts.duration);
            // Ctrl-C during the flow kills iperf3 and ends the run here.
            check_interrupt()?;
            let mut routers = Vec::new();
            if mode.vmpls() {
                // The counters after the flow come within 2 s.
                std::thread::sleep(Duration::from_millis(2500));
                for g in [&guests.pe, &guests.p] {
                    routers.extend(router_label_ops(g));
                }
                for (router, ops) in &routers {
                    progress(&format!("{name}: {router}: {ops}"));
                }
            }
            if profile_seconds()?.is_some() {
                progress(&format!("{name}: waiting for the guests' profiles (perf report)"));
                guests.wait_for_profiles(PROFILE_REPORT_TIMEOUT, &mut *progress)?;
            }
            iperf.map(|i| (i, routers))
        })();
        match r {
            Ok((i, routers)) => {
                progress(&format!("{name}: {:.3} Gbit/s, {} retransmits", i.gbps, i.retransmits));
                results.push(VmModeResult {
                    name: name.into(),
                    iperf: Some(i),
                    ratio: None,
                    error: None,
                    routers,
                });
            }
            Err(e) if interrupted() || vmpls_lab::is_interrupted(&e) => {
                lab.cleanup()?;
                return Err(e);
            }
            Err(e) if opts.keep_going => {
                progress(&format!("{name}: failed: {e:#}"));
                results.push(VmModeResult {
                    name: name.into(),
                    iperf: None,
                    ratio: None,
                    error: Some(format!("{e:#}")),
                    routers: Vec::new(),
                });
            }
            Err(e) => {
                lab.cleanup()?;
                return Err(e.context(format!("mode {name} (files in {})", work.display())));
            }
        }
    }
    let gbps: Vec<Option<f64>> = results.iter().map(|r| r.iperf.map(|i| i.gbps)).collect();
    let kernel_ip = results.iter().position(|r| r.name == RouterMode::KernelIp.name());
    for (r, ratio) in results.iter_mut().zip(vmpls_lab::report::ratios(&gbps, |_| kernel_ip)) {
        r.ratio = ratio;
    }
    let accel = lab.accel.map_or_else(|| "-".to_string(), |a| format!("{a:?}").to_lowercase());
    lab.cleanup()?;
    Ok(VmSeedReport { modes: results, accel, work_dir: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(router: &str, mode: RouterMode) -> Config {
        let toml = mode_configs(mode).into_iter().find(|(r, _)| r == router).unwrap().1;
        Config::from_str(&toml, Path::new("t.toml")).unwrap()
    }

    #[test]
    fn kernel_mpls_commands_say_what_the_seed_configs_say() {
        let pe1 = kernel_commands(&config("pe1", RouterMode::KernelMpls), "ip -n pe1", "ip netns exec pe1")
            .unwrap();
        assert!(pe1.contains("ip netns exec pe1 sysctl -qw net.mpls.platform_labels=4096"), "{pe1}");
        assert!(pe1.contains("ip netns exec pe1 sysctl -qw net.mpls.conf.pe1-p.input=1"), "{pe1}");
        assert!(pe1.contains("ip -n pe1 addr add 198.18.10.1/24 dev pe1-p ||"), "{pe1}");
        assert!(pe1.contains("ip -n pe1 addr add 2001:db8:1::1/64 dev pe1-ce1 nodad ||"), "{pe1}");
        assert!(
            pe1.contains(
                "ip -n pe1 route add 198.18.2.0/24 encap mpls 1002 via inet 198.18.10.2 dev pe1-p ||"
            ),
            "{pe1}"
        );
        assert!(
            pe1.contains(
                "ip -n pe1 -6 route add 2001:db8:2::/64 encap mpls 1002 via inet6 2001:db8:10::2 dev pe1-p ||"
            ),
            "{pe1}"
        );
        assert!(pe1.contains("ip -n pe1 -f mpls route add 2001 dev lo ||"), "{pe1}");
        let p = kernel_commands(&config("p", RouterMode::KernelMpls), "ip", "").unwrap();
        assert!(p.contains("ip -f mpls route add 1002 as 2002 via inet 198.18.20.2 dev p-pe2 ||"), "{p}");
        assert!(p.contains("ip -f mpls route add 1001 as 2001 via inet 198.18.10.1 dev p-pe1 ||"), "{p}");
    }

    #[test]
    fn kernel_ip_commands_route_without_labels() {
        let p = kernel_commands(&config("p", RouterMode::KernelIp), "ip", "").unwrap();
        assert!(p.contains("ip route add 198.18.2.0/24 via inet 198.18.20.2 dev p-pe2 ||"), "{p}");
        assert!(p.contains("ip route add 198.18.1.0/24 via inet 198.18.10.1 dev p-pe1 ||"), "{p}");
        assert!(!p.contains("mpls"), "{p}");
    }

    #[test]
    fn guest_scripts_rename_the_nics_to_the_seed_names_and_set_the_mode_mtu() {
        let s = guest_script(RouterMode::VmplsMpls64k, &PE_NICS, &["pe1", "pe2"], None).unwrap();
        assert!(s.contains("ip link set eth1 name pe1-p ||"), "{s}");
        assert!(s.contains("ip link set pe1-p netns pe1 ||"), "{s}");
        assert!(s.contains("ip -n pe1 link set pe1-p mtu 65521 up"), "{s}");
        assert!(s.contains("ip -n pe2 link set pe2-ce2 mtu 1500 up"), "{s}");
        assert!(s.contains("ip netns exec pe2 vmpls run --config /tmp/pe2.toml"), "{s}");
        assert!(s.contains("interface = \"pe2-ce2\""), "{s}");
        let s = guest_script(RouterMode::KernelMpls, &P_NICS, &["p"], None).unwrap();
        assert!(s.contains("ip link set eth0 name p-pe1 ||"), "{s}");
        assert!(s.contains("ip link set p-pe2 mtu 1500 up"), "{s}");
        assert!(!s.contains("netns"), "{s}");
        assert!(s.contains("ip -f mpls route add 1002 as 2002"), "{s}");
        assert!(!s.contains("perf record"), "{s}");
        let s = guest_script(RouterMode::VmplsMpls64kTc, &PE_NICS, &["pe1", "pe2"], None).unwrap();
        assert!(
            s.contains("fast-path = \"tc\"") && s.contains("ip -n pe1 link set pe1-p mtu 65521 up"),
            "{s}"
        );
        assert!(s.contains("sysctl -qw net.core.optmem_max=131072"), "{s}");
        // The customer NICs keep their receive aggregation: the push chain takes the
        // super-frames whole (the guest image has its modules).
        assert!(!s.contains("ethtool -K"), "{s}");
        assert!(s.contains("result \"STATS pe1 $(tr -d '\\n' < /tmp/pe1.json"), "{s}");
        assert!(s.contains("--stats-file /tmp/pe1.json"), "{s}");
        let s = guest_script(RouterMode::VmplsMpls64k, &PE_NICS, &["pe1", "pe2"], None).unwrap();
        assert!(!s.contains("ethtool -K"), "{s}");
        let s = guest_script(RouterMode::VmplsMpls, &P_NICS, &["p"], Some(10)).unwrap();
        assert!(s.contains("fast-path = \"off\"") && !s.contains("optmem_max"), "{s}");
        let (profile, ready) = (s.find("perf record -a -F 99").unwrap(), s.find("result READY").unwrap());
        assert!(profile < ready && s.contains("-- sleep 10 "), "{s}");
    }

    #[test]
    fn modes_parse_from_a_list_and_reject_unknown_names() {
        assert_eq!(
            RouterMode::parse_list("kernel-ip, vmpls-mpls-64k").unwrap(),
            [RouterMode::KernelIp, RouterMode::VmplsMpls64k]
        );
        let e = RouterMode::parse_list("kernel-ip,bogus").unwrap_err().to_string();
        assert!(e.contains("unknown mode \"bogus\"") && e.contains("vmpls-mpls-64k"), "{e}");
        assert!(RouterMode::parse_list("kernel-ip,kernel-ip").is_err());
        assert!(RouterMode::parse_list(" , ").is_err());
    }

    #[test]
    fn the_labels_expected_on_the_core_links_follow_the_seed_params() {
        let [(w, west), (e, east)] = expected_labels();
        assert_eq!((w, e), ("p-west", "p-east"));
        assert_eq!(west, ["1002", "2001"].map(String::from).into_iter().collect());
        assert_eq!(east, ["1001", "2002"].map(String::from).into_iter().collect());
    }
}
