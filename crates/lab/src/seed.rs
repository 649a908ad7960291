//! The seed lab: ce1 -- pe1 -- p -- pe2 -- ce2, measured in several modes.
//!
//! ```text
//!  ce1 ----------- pe1 ------------ p ------------ pe2 ----------- ce2
//!  198.18.1.2/24   .1 | 198.18.10.1  .2 | 198.18.20.1  .2 | 198.18.2.1   198.18.2.2/24
//!  2001:db8:1::2   ::1| 2001:db8:10::1 ::2| 2001:db8:20::1 ::2| 2001:db8:2::1 2001:db8:2::2
//! ```
//!
//! Interfaces are named as in `examples/seed`: `ce1-pe1`/`pe1-ce1`, `pe1-p`/`p-pe1`,
//! `p-pe2`/`pe2-p`, `pe2-ce2`/`ce2-pe2`. All modes run one after the other in the
//! same namespaces, so they are compared on the same links:
//! - `kernel-ip`: pe1, p and pe2 are kernel IP routers (addresses, forwarding, static
//!   routes). The baseline every ratio refers to.
//! - `vmpls-mpls`: the kernel's addresses on the router interfaces are removed and
//!   IPv6 is disabled there (the kernel stays silent), and one `vmpls run` process
//!   per router forwards over the label-switched path of the configs from
//!   [`router_configs`].
//!
//! More modes (offloads off, vmpls IP routing, a 1500-byte core) are new entries of
//! [`Mode`].

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

use crate::ping::{PingOptions, ping};
use crate::report::{self, JsonDetail, Measured, ModeRow};
use crate::routers::{LogMode, RouterSet};
pub(crate) use crate::seed_config::prefix;
pub use crate::seed_config::{CE1_V4, CE1_V6, CE2_V4, CE2_V6, RouterConfig, SeedParams, router_configs};
use crate::seed_config::{LINKS, ROUTERS, addr};
use crate::stats::RouterStats;
use crate::topology::{HostOptions, Topology};
use crate::traffic::{FlowOptions, FlowProgress, FlowResult, Limit, run_flow};
use crate::{IpPrefix, check_interrupt, interrupted, is_interrupted, require_root};

/// How the three routers forward in a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeKind {
    /// The Linux kernel routes IP (the baseline).
    KernelIp,
    /// Three vmpls processes route IP without labels.
    VmplsIp,
    /// Three vmpls processes switch labels (configs from [`router_configs`]).
    VmplsMpls,
}

impl ModeKind {
    /// vmpls forwards (as opposed to the kernel).
    pub fn is_vmpls(self) -> bool {
        self != ModeKind::KernelIp
    }
}

/// One measurement of the seed lab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mode {
    /// The name in the report (`kernel-ip`, `vmpls-mpls`, ...).
    pub name: String,
    /// Who forwards.
    pub kind: ModeKind,
    /// Whether segmentation offloads (TSO, GSO) stay on, on every interface; `false`
    /// turns TSO, GSO and GRO off with ethtool on the hosts' and kernel routers'
    /// interfaces. vmpls routers then turn GRO on where they receive from a customer,
    /// as a router vendor would (issue 3): the kernel coalesces the hosts' segments
    /// into super-frames before vmpls reads them.
    pub offloads: bool,
    /// The core links' MTU for this mode (`None`: the lab's [`SeedParams::core_mtu`]).
    pub core_mtu: Option<u32>,
    /// The vmpls routers run with `fast-path = "tc"` (the in-kernel fast path).
    pub fast_path: bool,
    /// Two-host lab only: pe1 and p join over an MPLS-in-UDP port (`kind = "udp"`, IPv4
    /// underlay) instead of the VXLAN link.
    pub udp_core: bool,
    /// ECMP at pe1 and p over the same links ([`SeedParams::ecmp`]).
    pub ecmp: bool,
    /// The core links are memif ports ([`SeedParams::memif_core`], sockets in the work
    /// directory): shared memory between the routers instead of the veth pairs.
    pub memif_core: bool,
}

impl Mode {
    fn new(name: &str, kind: ModeKind, offloads: bool, core_mtu: Option<u32>) -> Self {
        Self {
            name: name.into(),
            kind,
            offloads,
            core_mtu,
            fast_path: false,
            udp_core: false,
            ecmp: false,
            memif_core: false,
        }
    }

    /// Kernel IP routing with default offloads: the baseline.
    pub fn kernel_ip() -> Self {
        Self::new("kernel-ip", ModeKind::KernelIp, true, None)
    }

    /// Kernel IP routing with TSO, GSO and GRO off on every link: the baseline of the
    /// offloads-off modes.
    pub fn kernel_ip_offloads_off() -> Self {
        Self::new("kernel-ip-offloads-off", ModeKind::KernelIp, false, None)
    }

    /// vmpls routing IP without labels.
    pub fn vmpls_ip() -> Self {
        Self::new("vmpls-ip", ModeKind::VmplsIp, true, None)
    }

    /// vmpls label switching with default offloads.
    pub fn vmpls_mpls() -> Self {
        Self::new("vmpls-mpls", ModeKind::VmplsMpls, true, None)
    }

    /// vmpls label switching with TSO, GSO and GRO off on the hosts.
    pub fn vmpls_mpls_offloads_off() -> Self {
        Self::new("vmpls-mpls-offloads-off", ModeKind::VmplsMpls, false, None)
    }

    /// vmpls label switching over 1500-byte core links: software segmentation at the
    /// ingress, coalescing at the egress.
    pub fn vmpls_mpls_1500() -> Self {
        Self::new("vmpls-mpls-1500", ModeKind::VmplsMpls, true, Some(1500))
    }

    /// vmpls label switching with the in-kernel fast path (TC eBPF, `fast-path = "tc"`):
    /// the routers program the kernel and only see what it leaves to them.
    pub fn vmpls_mpls_tc() -> Self {
        Self { fast_path: true, ..Self::new("vmpls-mpls-tc", ModeKind::VmplsMpls, true, None) }
    }

    /// The fast path over 1500-byte core links.
    pub fn vmpls_mpls_tc_1500() -> Self {
        Self { fast_path: true, ..Self::new("vmpls-mpls-tc-1500", ModeKind::VmplsMpls, true, Some(1500)) }
    }

    /// ECMP at pe1 and p through the routers' pipelines ([`SeedParams::ecmp`]).
    pub fn vmpls_mpls_ecmp() -> Self {
        Self { ecmp: true, ..Self::new("vmpls-mpls-ecmp", ModeKind::VmplsMpls, true, None) }
    }

    /// ECMP at pe1 and p with the in-kernel fast path: compare with `vmpls-mpls-tc`.
    pub fn vmpls_mpls_tc_ecmp() -> Self {
        Self {
            fast_path: true,
            ecmp: true,
            ..Self::new("vmpls-mpls-tc-ecmp", ModeKind::VmplsMpls, true, None)
        }
    }

    /// vmpls label switching with the core links as memif ports: the routers hand frames
    /// to each other through shared memory, super-frames whole, without the kernel.
    pub fn vmpls_mpls_memif() -> Self {
        Self { memif_core: true, ..Self::new("vmpls-mpls-memif", ModeKind::VmplsMpls, true, None) }
    }

    /// The modes `vmpls lab seed` runs by default: `kernel-ip`, then `vmpls-mpls` (the
    /// routers' own pipelines) and `vmpls-mpls-tc` (with the in-kernel fast path).
    pub fn defaults() -> Vec<Mode> {
        vec![Self::kernel_ip(), Self::vmpls_mpls(), Self::vmpls_mpls_tc()]
    }

    /// The modes of `vmpls lab seed --hosts 2` (see [`crate::hosts`]): kernel IP routing
    /// over the VXLAN link (containerlab's way, the baseline), vmpls over that link
    /// (AF_PACKET), and vmpls over MPLS-in-UDP; each vmpls mode with its pipeline alone
    /// and with the in-kernel fast path.
    pub fn two_hosts() -> Vec<Mode> {
        let udp = |name: &str, fast_path: bool| Self {
            fast_path,
            udp_core: true,
            ..Self::new(name, ModeKind::VmplsMpls, true, None)
        };
        vec![
            Self::new("kernel-ip-vxlan", ModeKind::KernelIp, true, None),
            Self::new("vmpls-mpls-vxlan", ModeKind::VmplsMpls, true, None),
            Self { fast_path: true, ..Self::new("vmpls-mpls-tc-vxlan", ModeKind::VmplsMpls, true, None) },
            udp("vmpls-mpls-udp", false),
            udp("vmpls-mpls-tc-udp", true),
        ]
    }

    /// The modes of `vmpls bench seed`, in the order they run.
    pub fn bench() -> Vec<Mode> {
        vec![
            Self::kernel_ip(),
            Self::kernel_ip_offloads_off(),
            Self::vmpls_ip(),
            Self::vmpls_mpls(),
            Self::vmpls_mpls_offloads_off(),
            Self::vmpls_mpls_1500(),
            Self::vmpls_mpls_tc(),
            Self::vmpls_mpls_tc_1500(),
            Self::vmpls_mpls_ecmp(),
            Self::vmpls_mpls_tc_ecmp(),
            Self::vmpls_mpls_memif(),
        ]
    }

    /// The modes named in `list` (comma-separated), in its order: any of
    /// [`Mode::bench`]'s.
    pub fn parse_list(list: &str) -> anyhow::Result<Vec<Mode>> {
        let known = Self::bench();
        list.split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(|name| {
                known.iter().find(|m| m.name == name).cloned().ok_or_else(|| {
                    let names: Vec<&str> = known.iter().map(|m| m.name.as_str()).collect();
                    anyhow!("unknown seed lab mode \"{name}\"; the modes are {}", names.join(", "))
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()
            .and_then(|modes| if modes.is_empty() { bail!("--modes names no mode") } else { Ok(modes) })
    }
}

/// What `vmpls lab seed` does.
#[derive(Debug, Clone)]
pub struct SeedOptions {
    /// The `vmpls` binary to start as `ROUTER_BINARY run --config FILE` (vmpls modes).
    pub router_binary: PathBuf,
    /// How long each mode's TCP flow runs.
    pub duration: Duration,
    /// Go on with the next mode when one fails (the report shows the error); otherwise
    /// the first failure ends the run.
    pub keep_going: bool,
    /// The caller wants JSON (see [`SeedReport::to_json`]) rather than the Markdown
    /// table; the lab itself does not print.
    pub json: bool,
    /// The modes to run, in order. Ratios refer to the first `kernel-ip` mode.
    pub modes: Vec<Mode>,
    /// Topology and config parameters.
    pub params: SeedParams,
    /// Where configs and router logs go; `None`: a new directory under the system temp
    /// dir, removed at the end if every mode succeeded.
    pub work_dir: Option<PathBuf>,
    /// How long to wait for ce1 to reach ce2 after a mode is set up.
    pub reach_timeout: Duration,
    /// 2: the lab split over two hosts ([`SeedLab::build_two_hosts`]); else one.
    pub hosts: u8,
}

impl SeedOptions {
    /// Options with the default modes and parameters.
    pub fn new(router_binary: impl Into<PathBuf>, duration: Duration) -> Self {
        Self {
            router_binary: router_binary.into(),
            duration,
            keep_going: false,
            json: false,
            modes: Mode::defaults(),
            params: SeedParams::default(),
            work_dir: None,
            reach_timeout: Duration::from_secs(10),
            hosts: 1,
        }
    }
}

/// The outcome of one mode.
#[derive(Debug, Clone, PartialEq)]
pub struct ModeResult {
    /// The mode's name.
    pub name: String,
    /// The flow's measurements; `None` if the mode failed before or during the flow.
    pub flow: Option<FlowResult>,
    /// Throughput relative to the kernel-ip mode of the same run.
    pub ratio: Option<f64>,
    /// Why the mode failed, if it did (also set when the flow's content was wrong).
    pub error: Option<String>,
}

impl ModeResult {
    /// Gbit/s of the flow, if it ran.
    pub fn gbps(&self) -> Option<f64> {
        self.flow.as_ref().map(|f| f.gbps)
    }

    /// Its row in a lab's table.
    pub fn row(&self) -> ModeRow<'_> {
        ModeRow {
            name: &self.name,
            measured: self.flow.as_ref().map(Measured::from),
            ratio: self.ratio,
            error: self.error.as_deref(),
        }
    }
}

/// The result of `vmpls lab seed`.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedReport {
    /// One entry per mode, in the order run.
    pub modes: Vec<ModeResult>,
    /// The directory with the configs and router logs, if it was kept.
    pub work_dir: Option<PathBuf>,
}

impl SeedReport {
    /// Whether every mode succeeded.
    pub fn ok(&self) -> bool {
        self.modes.iter().all(|m| m.error.is_none())
    }

    fn rows(&self) -> Vec<ModeRow<'_>> {
        self.modes.iter().map(ModeResult::row).collect()
    }

    /// The seed's table in Markdown: mode, Gbit/s, retransmits, ratio to kernel-ip (for
    /// a mode with host offloads off: to kernel-ip-offloads-off, when the run measured
    /// it); failures are listed under it.
    pub fn to_markdown(&self) -> String {
        report::to_markdown(&self.rows())
    }

    /// The report as JSON: `{"modes":[{"name", "gbps", "retransmits", "ratio", ...}]}`.
    pub fn to_json(&self) -> serde_json::Value {
        let modes: Vec<_> = self
            .rows()
            .iter()
            .zip(&self.modes)
            .map(|(row, m)| {
                let mut o = report::mode_json(row, JsonDetail::Full);
                o.insert("content_ok".into(), m.flow.as_ref().map(|f| f.content_ok).into());
                serde_json::Value::Object(o)
            })
            .collect();
        serde_json::json!({ "modes": modes })
    }
}

/// Runs the seed lab: builds the topology, runs every mode of `opts.modes` in order
/// and returns the report. `progress` gets human-readable progress lines.
///
/// Fails at once without root. On Ctrl-C/SIGTERM (with
/// [`install_interrupt_handler`](crate::install_interrupt_handler)) it returns an
/// `interrupted` error; the namespaces and routers are removed either way.
pub fn run_seed(opts: &SeedOptions, progress: &mut dyn FnMut(&str)) -> anyhow::Result<SeedReport> {
    require_root()?;
    if opts.modes.is_empty() {
        bail!("no modes to run");
    }
    if opts.duration.is_zero() {
        bail!("the flow duration must be more than 0 s");
    }
    if opts.modes.iter().any(|m| m.kind.is_vmpls()) && !opts.router_binary.is_file() {
        bail!(
            "router binary {} not found (it runs as `{0} run --config FILE`)",
            opts.router_binary.display()
        );
    }
    let (work_dir, temporary) = match &opts.work_dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            (d.clone(), false)
        }
        None => (crate::temp_work_dir("vmpls-lab")?, true),
    };
    let result = run_modes(opts, &work_dir, progress);
    match result {
        Ok(mut report) => {
            if temporary && report.ok() {
                let _ = std::fs::remove_dir_all(&work_dir);
            } else {
                report.work_dir = Some(work_dir);
            }
            Ok(report)
        }
        Err(e) => {
            let empty = std::fs::read_dir(&work_dir).map(|mut d| d.next().is_none()).unwrap_or(false);
            if empty && temporary {
                let _ = std::fs::remove_dir(&work_dir);
                return Err(e);
            }
            if is_interrupted(&e) {
                return Err(e);
            }
            Err(e.context(format!("seed lab failed (configs and logs are in {})", work_dir.display())))
        }
    }
}

fn run_modes(
    opts: &SeedOptions,
    work_dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<SeedReport> {
    let mut lab = if opts.hosts == 2 {
        progress("building the seed topology over two hosts: ce1 -- pe1 | h1 == h2 | p -- pe2 -- ce2");
        SeedLab::build_two_hosts(&opts.params)?
    } else {
        progress("building the seed topology: ce1 -- pe1 -- p -- pe2 -- ce2");
        SeedLab::build(&opts.params)?
    };
    progress(&format!("namespaces: {}", lab.topology().namespaces().join(" ")));
    let mut results = Vec::new();
    for mode in &opts.modes {
        check_interrupt()?;
        progress(&format!("{}: setting up", mode.name));
        match lab.run_mode(mode, opts, work_dir, progress) {
            Ok(flow) => {
                let error = (!flow.content_ok).then(|| match flow.first_mismatch {
                    Some(at) => {
                        format!("received data differs from what was sent, first at byte {at}")
                    }
                    None => format!("sent {} bytes but received {}", flow.bytes_sent, flow.bytes_received),
                });
                progress(&format!(
                    "{}: {:.2} Gbit/s, {} retransmits, {} bytes in {:.1} s{}",
                    mode.name,
                    flow.gbps,
                    flow.retransmits,
                    flow.bytes_received,
                    flow.seconds,
                    if flow.content_ok { "" } else { ", CONTENT WRONG" }
                ));
                results.push(ModeResult { name: mode.name.clone(), flow: Some(flow), ratio: None, error });
            }
            Err(e) if interrupted() || is_interrupted(&e) => return Err(e),
            Err(e) if opts.keep_going => {
                progress(&format!("{}: failed: {e:#}", mode.name));
                results.push(ModeResult {
                    name: mode.name.clone(),
                    flow: None,
                    ratio: None,
                    error: Some(format!("{e:#}")),
                });
            }
            Err(e) => return Err(e.context(format!("mode {}", mode.name))),
        }
        if let Err(e) = lab.stop_routers() {
            progress(&format!("{}: stopping the routers: {e:#}", mode.name));
        }
    }
    // Each mode is compared with kernel routing under the same host offloads, where
    // the run measured that; else with kernel-ip.
    let gbps: Vec<Option<f64>> = results.iter().map(ModeResult::gbps).collect();
    let measured_baseline = |offloads: bool| {
        let i = opts
            .modes
            .iter()
            .position(|m| m.kind == ModeKind::KernelIp && m.offloads == offloads && m.core_mtu.is_none())?;
        gbps.get(i).copied().flatten().is_some_and(|g| g > 0.0).then_some(i)
    };
    let ratios = report::ratios(&gbps, |i| {
        measured_baseline(opts.modes[i].offloads).or_else(|| measured_baseline(true))
    });
    for (r, ratio) in results.iter_mut().zip(ratios) {
        r.ratio = ratio;
    }
    lab.cleanup()?;
    Ok(SeedReport { modes: results, work_dir: None })
}

/// The seed topology, built and ready to be set up in one mode after another.
#[derive(Debug)]
pub struct SeedLab {
    topo: Topology,
    params: SeedParams,
    offloads_on: bool,
    /// GRO is on at the routers' customer-facing interfaces.
    router_gro: bool,
    /// The core links' MTU right now.
    core_mtu_now: u32,
    routers: RouterSet,
    /// The stats file of each router started with
    /// [`SeedLab::start_routers_with_stats`].
    stats_files: Vec<(String, PathBuf)>,
    /// Split over two hosts ([`crate::hosts`]): the pe1 -- p link is a VXLAN link.
    two_hosts: bool,
    /// Two hosts: routers started next join pe1 and p over MPLS-in-UDP, over the IPv6
    /// underlay if `true`, the IPv4 one if `false`.
    udp_core: Option<bool>,
    /// Two hosts: the MPLS-in-UDP tunnel runs between pe1's and p's own underlay links,
    /// its sockets in their namespaces (what the fast path serves), not the hosts'.
    udp_in_routers: bool,
}

impl SeedLab {
    /// Builds the namespaces, links, customer addresses and default routes. The
    /// routers are not set up for any mode yet.
    pub fn build(params: &SeedParams) -> anyhow::Result<Self> {
        Self::build_on(params, false)
    }

    /// Like [`SeedLab::build`], split over two hosts joined only by an IP underlay (see
    /// [`crate::hosts`]): the pe1 -- p link is a VXLAN device each host creates and
    /// moves into its node, with the MTU VXLAN leaves (1450).
    pub fn build_two_hosts(params: &SeedParams) -> anyhow::Result<Self> {
        Self::build_on(params, true)
    }

    /// Two hosts: the next routers started join pe1 and p over MPLS-in-UDP ports, over
    /// the IPv6 underlay if `Some(true)`, IPv4 if `Some(false)`; `None`: over the VXLAN
    /// link, as the configs of [`router_configs`] say.
    pub fn set_udp_core(&mut self, underlay_v6: Option<bool>) -> anyhow::Result<()> {
        if underlay_v6.is_some() && !self.two_hosts {
            bail!("an MPLS-in-UDP core needs the two-host lab");
        }
        self.udp_core = underlay_v6;
        Ok(())
    }

    /// Two hosts: the next routers started run the MPLS-in-UDP tunnel between their own
    /// underlay links (sockets in their namespaces, which the in-kernel fast path serves)
    /// if `on`, else with sockets in the hosts' namespaces (see [`crate::hosts`]).
    pub fn set_udp_tunnel_in_routers(&mut self, on: bool) -> anyhow::Result<()> {
        if on && !self.two_hosts {
            bail!("an MPLS-in-UDP core needs the two-host lab");
        }
        self.udp_in_routers = on;
        Ok(())
    }

    fn build_on(params: &SeedParams, two_hosts: bool) -> anyhow::Result<Self> {
        let mut topo = Topology::new();
        if two_hosts {
            crate::hosts::build_underlay(&mut topo)?;
        }
        topo.add_host("ce1")?;
        for r in &ROUTERS {
            topo.add_host_with(r.name, HostOptions { ipv6: false })?;
        }
        topo.add_host("ce2")?;
        if two_hosts {
            crate::hosts::add_router_underlay(&mut topo)?;
        }
        for (a, a_if, b, b_if, core) in LINKS {
            if two_hosts && a_if == crate::hosts::SPLIT_LINK {
                crate::hosts::add_vxlan_core(&mut topo)?;
                continue;
            }
            let mtu = if core { params.core_mtu } else { params.customer_mtu };
            topo.add_link(a, a_if, b, b_if, mtu)?;
        }
        for (host, ifname, v4, v6) in [("ce1", "ce1-pe1", CE1_V4, CE1_V6), ("ce2", "ce2-pe2", CE2_V4, CE2_V6)]
        {
            let (v4, v6) = (prefix(v4), prefix(v6));
            topo.add_address(host, ifname, v4)?;
            topo.add_address(host, ifname, v6)?;
            // The gateway is .1 / ::1 of the customer's subnet.
            let gw = |p: IpPrefix| match p.network().addr() {
                IpAddr::V4(a) => IpAddr::V4((u32::from(a) + 1).into()),
                IpAddr::V6(a) => IpAddr::V6((u128::from(a) + 1).into()),
            };
            topo.add_default_route(host, gw(v4))?;
            topo.add_default_route(host, gw(v6))?;
        }
        Ok(Self {
            topo,
            params: params.clone(),
            router_gro: false,
            core_mtu_now: params.core_mtu,
            offloads_on: true,
            routers: RouterSet::new(),
            stats_files: Vec::new(),
            two_hosts,
            udp_core: None,
            udp_in_routers: false,
        })
    }

    /// The underlying topology.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Makes pe1, p and pe2 kernel IP routers: IPv6 on, addresses, forwarding, static
    /// routes.
    pub fn setup_kernel_ip(&mut self) -> anyhow::Result<()> {
        for r in &ROUTERS {
            for port in &r.ports {
                self.topo.set_ipv6(r.name, port.interface, true)?;
                self.topo.flush_addresses(r.name, port.interface)?;
                self.topo.add_address(r.name, port.interface, prefix(port.v4))?;
                self.topo.add_address(r.name, port.interface, prefix(port.v6))?;
            }
            self.topo.set_forwarding(r.name, true)?;
            for (dest, via) in r.kernel_routes {
                self.topo.add_route(r.name, prefix(dest), addr(via))?;
            }
        }
        Ok(())
    }

    /// Takes the kernel out of forwarding on pe1, p and pe2: no routes, no addresses,
    /// no forwarding, IPv6 disabled on the router interfaces.
    pub fn clear_kernel_ip(&mut self) -> anyhow::Result<()> {
        for r in &ROUTERS {
            self.topo.set_forwarding(r.name, false)?;
            for (dest, _) in r.kernel_routes {
                self.topo.del_route(r.name, prefix(dest))?;
            }
            for port in &r.ports {
                self.topo.set_ipv6(r.name, port.interface, false)?;
                self.topo.flush_addresses(r.name, port.interface)?;
            }
        }
        Ok(())
    }

    /// Switches TSO, GSO and GRO on every interface (only if they are not already in
    /// that state; the lab starts with the veth defaults: TSO and GSO on, GRO off).
    pub fn set_offloads(&mut self, on: bool) -> anyhow::Result<()> {
        if on == self.offloads_on {
            return Ok(());
        }
        let features: &[(&str, bool)] = if on {
            &[("tso", true), ("gso", true), ("gro", false)]
        } else {
            &[("tso", false), ("gso", false), ("gro", false)]
        };
        for (a, a_if, b, b_if, _) in LINKS {
            self.topo.set_offloads(a, a_if, features)?;
            self.topo.set_offloads(b, b_if, features)?;
        }
        self.offloads_on = on;
        Ok(())
    }

    /// GRO on the routers' customer-facing interfaces (pe1-ce1, pe2-ce2): with it the
    /// kernel hands vmpls super-frames even from hosts that send 1500-byte segments.
    pub fn set_router_gro(&mut self, on: bool) -> anyhow::Result<()> {
        if on == self.router_gro {
            return Ok(());
        }
        for (router, ifname) in [("pe1", "pe1-ce1"), ("pe2", "pe2-ce2")] {
            self.topo.set_offloads(router, ifname, &[("gro", on)])?;
        }
        self.router_gro = on;
        Ok(())
    }

    /// Sets both ends of both core links to `mtu` (routers read the interface MTU when
    /// they start).
    pub fn set_core_mtu(&mut self, mtu: u32) -> anyhow::Result<()> {
        if mtu == self.core_mtu_now {
            return Ok(());
        }
        for (a, a_if, b, b_if, core) in LINKS {
            if core && !(self.two_hosts && a_if == crate::hosts::SPLIT_LINK) {
                self.topo.set_mtu(a, a_if, mtu)?;
                self.topo.set_mtu(b, b_if, mtu)?;
            }
        }
        self.core_mtu_now = mtu;
        Ok(())
    }

    /// Writes the router configs into `work_dir` and starts `router_binary run
    /// --config FILE` in pe1, p and pe2, with output to `ROUTER.log` there.
    pub fn start_routers(&mut self, router_binary: &Path, work_dir: &Path) -> anyhow::Result<()> {
        self.start_routers_inner(router_binary, work_dir, false)
    }

    /// Like [`SeedLab::start_routers`], and each router writes its counters to
    /// `ROUTER.stats.json` in `work_dir` (`--stats-file`: every second and at exit);
    /// read them with [`SeedLab::router_stats`].
    pub fn start_routers_with_stats(&mut self, router_binary: &Path, work_dir: &Path) -> anyhow::Result<()> {
        self.start_routers_inner(router_binary, work_dir, true)
    }

    /// The stats file of `router` (started with [`SeedLab::start_routers_with_stats`]).
    pub fn stats_path(&self, router: &str) -> Option<&Path> {
        self.stats_files.iter().find(|(name, _)| name == router).map(|(_, p)| p.as_path())
    }

    /// The counters `router` wrote last (every second while it runs, and at exit).
    pub fn router_stats(&self, router: &str) -> anyhow::Result<RouterStats> {
        let path = self
            .stats_path(router)
            .ok_or_else(|| anyhow!("router {router} was not started with start_routers_with_stats"))?;
        RouterStats::read(path)
    }

    fn start_routers_inner(
        &mut self,
        router_binary: &Path,
        work_dir: &Path,
        stats: bool,
    ) -> anyhow::Result<()> {
        self.stats_files.clear();
        let configs = match self.udp_core {
            Some(v6) => crate::hosts::udp_core_configs(&self.params, &self.topo, v6, self.udp_in_routers)?,
            None => router_configs(&self.params),
        };
        for cfg in configs {
            let config = work_dir.join(format!("{}.toml", cfg.router));
            std::fs::write(&config, &cfg.toml).with_context(|| format!("writing {}", config.display()))?;
            let log = work_dir.join(format!("{}.log", cfg.router));
            let mut cmd = RouterSet::command(router_binary, &config);
            if stats {
                let path = work_dir.join(format!("{}.stats.json", cfg.router));
                let _ = std::fs::remove_file(&path);
                cmd.arg("--stats-file").arg(&path);
                self.stats_files.push((cfg.router.clone(), path));
            }
            self.routers.start(&mut self.topo, &cfg.router, cmd, log, LogMode::Truncate, None)?;
        }
        Ok(())
    }

    /// Stops the routers started by [`SeedLab::start_routers`].
    pub fn stop_routers(&mut self) -> anyhow::Result<()> {
        self.stop_routers_status(Duration::from_secs(2)).map(drop)
    }

    /// Stops the routers started by [`SeedLab::start_routers`] (SIGTERM, SIGKILL after
    /// `grace`) and returns each one's exit status, in start order (pe1, p, pe2). A
    /// router that stops cleanly exits with status 0.
    pub fn stop_routers_status(&mut self, grace: Duration) -> anyhow::Result<Vec<(String, ExitStatus)>> {
        self.routers.stop(&mut self.topo, grace)
    }

    /// Whether a router started by [`SeedLab::start_routers`] has exited (an error
    /// with its log tail if so).
    pub fn check_routers_running(&mut self) -> anyhow::Result<()> {
        self.check_routers()
    }

    /// The topology, mutable: for processes of a test's own
    /// ([`Topology::spawn`]), MTUs, offloads of single interfaces.
    pub fn topology_mut(&mut self) -> &mut Topology {
        &mut self.topo
    }

    /// The parameters the lab was built with.
    pub fn params(&self) -> &SeedParams {
        &self.params
    }

    /// The last lines of every router log, for error messages.
    pub fn router_logs(&self, lines: usize) -> String {
        self.routers.logs(lines)
    }

    fn check_routers(&mut self) -> anyhow::Result<()> {
        self.routers.check_running(&mut self.topo)
    }

    /// Waits until `from` gets an echo reply from `to` (bounded by `timeout`), checking
    /// that the routers still run.
    pub fn wait_reachable(&mut self, from: &str, to: IpAddr, timeout: Duration) -> anyhow::Result<()> {
        let start = Instant::now();
        let opts = PingOptions {
            count: 1,
            timeout: Duration::from_millis(300),
            stop_after: Some(1),
            ..PingOptions::default()
        };
        let ns = self.topo.ns(from)?.to_string();
        loop {
            check_interrupt()?;
            self.check_routers()?;
            let r = ping(&ns, to, &opts)?;
            if r.received > 0 {
                return Ok(());
            }
            if start.elapsed() >= timeout {
                let errors = if r.errors.is_empty() {
                    String::new()
                } else {
                    format!(" (ICMP errors: {:?})", r.errors)
                };
                bail!("{from} cannot reach {to} after {timeout:?}{errors}");
            }
        }
    }

    /// Checks ping ce1 <-> ce2 both ways over IPv4 and IPv6: each pair must become
    /// reachable within `timeout`, then answer 3 of 3 echo requests.
    pub fn check_pings(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let pairs = [
            ("ce1", prefix(CE2_V4).addr()),
            ("ce1", prefix(CE2_V6).addr()),
            ("ce2", prefix(CE1_V4).addr()),
            ("ce2", prefix(CE1_V6).addr()),
        ];
        for (from, to) in pairs {
            self.wait_reachable(from, to, timeout)?;
            let r = ping(self.topo.ns(from)?, to, &PingOptions::default())?;
            if r.received != r.sent {
                bail!(
                    "ping {from} -> {to}: {} of {} replies (ICMP errors: {:?})",
                    r.received,
                    r.sent,
                    r.errors
                );
            }
        }
        Ok(())
    }

    /// Runs the TCP flow ce1 -> ce2 (IPv4) for `duration`, content-checked.
    pub fn run_flow(
        &self,
        duration: Duration,
        progress: &mut dyn FnMut(FlowProgress),
    ) -> anyhow::Result<FlowResult> {
        let opts = FlowOptions { limit: Limit::Duration(duration), ..FlowOptions::default() };
        run_flow(self.topo.ns("ce1")?, self.topo.ns("ce2")?, prefix(CE2_V4).addr(), &opts, progress)
    }

    /// Sets up `mode`, checks reachability and pings, and runs the flow. Routers a
    /// vmpls mode starts keep running until [`SeedLab::stop_routers`].
    pub fn run_mode(
        &mut self,
        mode: &Mode,
        opts: &SeedOptions,
        work_dir: &Path,
        progress: &mut dyn FnMut(&str),
    ) -> anyhow::Result<FlowResult> {
        if mode.memif_core && self.two_hosts {
            bail!("{}: memif joins routers on one host, not over the two-host lab's underlay", mode.name);
        }
        self.stop_routers()?;
        self.set_offloads(mode.offloads)?;
        self.set_router_gro(mode.kind.is_vmpls() && !mode.offloads)?;
        self.set_core_mtu(mode.core_mtu.unwrap_or(self.params.core_mtu))?;
        match mode.kind {
            ModeKind::KernelIp => self.setup_kernel_ip()?,
            ModeKind::VmplsIp | ModeKind::VmplsMpls => {
                self.clear_kernel_ip()?;
                let (labelled, fast_path, ecmp, memif) = (
                    self.params.ip_only,
                    self.params.fast_path,
                    self.params.ecmp,
                    self.params.memif_core.clone(),
                );
                self.params.ip_only = mode.kind == ModeKind::VmplsIp;
                self.params.fast_path = mode.fast_path;
                self.params.ecmp = mode.ecmp;
                if mode.memif_core {
                    self.params.memif_core = Some(work_dir.to_path_buf());
                }
                self.set_udp_core(mode.udp_core.then_some(false))?;
                // The fast path serves a tunnel whose socket is in the router's namespace.
                self.set_udp_tunnel_in_routers(mode.udp_core && mode.fast_path)?;
                let started = self.start_routers(&opts.router_binary, work_dir);
                (self.params.ip_only, self.params.fast_path, self.params.ecmp, self.params.memif_core) =
                    (labelled, fast_path, ecmp, memif);
                started?;
            }
        }
        progress(&format!("{}: waiting for ce1 to reach ce2", mode.name));
        let checked = self.check_pings(opts.reach_timeout);
        if let Err(e) = checked {
            if mode.kind.is_vmpls() && !self.routers.is_empty() && !is_interrupted(&e) {
                return Err(anyhow!("{e:#}\n{}", self.router_logs(20)));
            }
            return Err(e);
        }
        progress(&format!("{}: TCP ce1 -> ce2 for {:?}", mode.name, opts.duration));
        let name = mode.name.clone();
        let flow = self.run_flow(opts.duration, &mut |p| {
            let gbps = crate::traffic::gbps(p.bytes, p.elapsed.as_secs_f64());
            progress(&format!(
                "{name}: {:.0} s, {:.2} GB, {gbps:.2} Gbit/s",
                p.elapsed.as_secs_f64(),
                p.bytes as f64 / 1e9
            ));
        });
        match flow {
            Ok(f) => Ok(f),
            Err(e) if mode.kind.is_vmpls() && !is_interrupted(&e) => {
                self.check_routers()?;
                Err(anyhow!("{e:#}\n{}", self.router_logs(20)))
            }
            Err(e) => Err(e),
        }
    }

    /// Stops the routers and removes the namespaces (also done on drop).
    pub fn cleanup(&mut self) -> anyhow::Result<()> {
        self.routers.clear();
        self.topo.cleanup()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The config text without comments and blank lines.
    fn normalise(text: &str) -> Vec<String> {
        text.lines()
            .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    }

    #[test]
    fn default_configs_match_the_examples() {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/seed");
        // The examples take the routers' default, fast-path = "auto".
        for cfg in router_configs(&SeedParams { fast_path_auto: true, ..SeedParams::default() }) {
            let path = examples.join(format!("{}.toml", cfg.router));
            let example =
                std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(normalise(&cfg.toml), normalise(&example), "{}", cfg.router);
        }
    }

    #[test]
    fn ip_only_configs_route_both_ways_without_labels() {
        let cfgs = router_configs(&SeedParams { ip_only: true, ..SeedParams::default() });
        for cfg in &cfgs {
            assert!(!cfg.toml.contains("push") && !cfg.toml.contains("[[label]]"), "{}", cfg.toml);
        }
        let p = &cfgs[1].toml;
        assert!(p.contains("prefix = \"198.18.2.0/24\"\nvia = \"198.18.20.2\"\nport = \"east\""), "{p}");
        assert!(p.contains("prefix = \"2001:db8:1::/64\"\nvia = \"2001:db8:10::1\"\nport = \"west\""), "{p}");
        assert!(cfgs[0].toml.contains("prefix = \"198.18.2.0/24\"\nvia = \"198.18.10.2\"\nport = \"core\""));
    }

    #[test]
    fn memif_core_configs_pair_each_link_s_ends_and_parse() {
        let dir = std::path::Path::new("/run/vmpls-seed");
        let cfgs = router_configs(&SeedParams { memif_core: Some(dir.into()), ..SeedParams::default() });
        let port = |router: usize, name: &str| {
            let cfg = vmpls_control::Config::from_str(&cfgs[router].toml, Path::new("seed.toml"))
                .unwrap_or_else(|e| panic!("{e}\n{}", cfgs[router].toml));
            let (_, p) = cfg.port(name).unwrap();
            (p.kind.clone(), p.mtu)
        };
        let memif = |socket: &str, role| vmpls_control::PortKind::Memif {
            socket: dir.join(socket),
            role,
            id: 0,
            mac: None,
        };
        use vmpls_control::MemifRole::{Client, Server};
        let core_mtu = Some(vmpls_control::TAP_MEMIF_MAX_MTU);
        assert_eq!(port(0, "core"), (memif("pe1-p.sock", Server), core_mtu));
        assert_eq!(port(1, "west"), (memif("pe1-p.sock", Client), core_mtu));
        assert_eq!(port(1, "east"), (memif("p-pe2.sock", Server), core_mtu));
        assert_eq!(port(2, "core"), (memif("p-pe2.sock", Client), core_mtu));
        // The customers stay on their veths.
        assert!(cfgs[0].toml.contains("name = \"ce1\"\ninterface = \"pe1-ce1\""), "{}", cfgs[0].toml);
    }

    #[test]
    fn configs_follow_the_params() {
        let params = SeedParams {
            pe1_push: 100,
            p_to_pe2: 200,
            pe2_push: 101,
            p_to_pe1: 201,
            php: false,
            customer_mtu: 1400,
            core_mtu: 9000,
            mtu_in_config: true,
            ip_only: false,
            fast_path: true,
            fast_path_auto: false,
            ecmp: false,
            poll_interrupt: true,
            cpus: Some("1,3".into()),
            memif_core: None,
        };
        let cfgs = router_configs(&params);
        let p = &cfgs[1].toml;
        assert!(cfgs.iter().all(|c| c.toml.contains("\nfast-path = \"tc\"\n")), "{p}");
        assert!(cfgs.iter().all(|c| c.toml.contains("\npoll = \"interrupt\"\n")), "{p}");
        assert!(cfgs.iter().all(|c| c.toml.contains("\ncpus = \"1,3\"\n")), "{p}");
        // The pipeline's modes say so (the routers' default is "auto"); auto leaves it out.
        let off = router_configs(&SeedParams::default());
        assert!(off.iter().all(|c| c.toml.contains("\nfast-path = \"off\"\n")), "{}", off[0].toml);
        assert!(off.iter().all(|c| !c.toml.contains("cpus")), "{}", off[0].toml);
        let auto =
            router_configs(&SeedParams { fast_path_auto: true, fast_path: true, ..SeedParams::default() });
        assert!(auto.iter().all(|c| !c.toml.contains("fast-path")), "{}", auto[0].toml);
        assert!(p.contains("in = 100\naction = \"swap\"\nout = [200]"), "{p}");
        assert!(p.contains("in = 101\naction = \"swap\"\nout = [201]"), "{p}");
        assert!(cfgs[0].toml.contains("push = [100]"));
        assert!(cfgs[0].toml.contains("in = 201\naction = \"pop\""));
        assert!(cfgs[0].toml.contains(
            "interface = \"pe1-ce1\"\naddresses = [\"198.18.1.1/24\", \"2001:db8:1::1/64\"]\nmtu = 1400"
        ));
        assert!(cfgs[0].toml.contains(
            "interface = \"pe1-p\"\naddresses = [\"198.18.10.1/24\", \"2001:db8:10::1/64\"]\nmtu = 9000"
        ));
        assert!(cfgs[2].toml.contains("in = 200\naction = \"pop\""));

        let php = router_configs(&SeedParams { php: true, ..SeedParams::default() });
        assert_eq!(php[1].toml.matches("out = [3]").count(), 2);
        assert!(!php[0].toml.contains("action = \"pop\""));
        assert!(!php[2].toml.contains("action = \"pop\""));
    }

    #[test]
    fn built_in_addresses_parse() {
        for r in &ROUTERS {
            for port in &r.ports {
                prefix(port.v4);
                prefix(port.v6);
            }
            for a in r.addresses {
                addr(a);
            }
            for (d, v) in r.kernel_routes {
                assert!(!prefix(d).contains(addr(v)));
            }
        }
    }

    #[test]
    fn report_tables_and_json() {
        let flow = |gbps: f64| FlowResult {
            bytes_sent: 10,
            bytes_received: 10,
            seconds: 1.0,
            gbps,
            retransmits: 3,
            content_ok: true,
            first_mismatch: None,
        };
        let report = SeedReport {
            modes: vec![
                ModeResult {
                    name: "kernel-ip".into(),
                    flow: Some(flow(16.0)),
                    ratio: Some(1.0),
                    error: None,
                },
                ModeResult {
                    name: "vmpls-mpls".into(),
                    flow: Some(flow(8.0)),
                    ratio: Some(0.5),
                    error: None,
                },
                ModeResult {
                    name: "vmpls-ip".into(),
                    flow: None,
                    ratio: None,
                    error: Some("router p exited".into()),
                },
            ],
            work_dir: None,
        };
        let md = report.to_markdown();
        assert!(md.contains("| kernel-ip | 16.00 | 3 | 1.00 |"), "{md}");
        assert!(md.contains("| vmpls-mpls | 8.00 | 3 | 0.50 |"), "{md}");
        assert!(md.contains("| vmpls-ip | failed | - | - |"), "{md}");
        assert!(md.contains("- vmpls-ip: router p exited"), "{md}");
        let json = report.to_json();
        assert_eq!(json["modes"][1]["name"], "vmpls-mpls");
        assert_eq!(json["modes"][1]["gbps"], 8.0);
        assert_eq!(json["modes"][1]["ratio"], 0.5);
        assert_eq!(json["modes"][1]["retransmits"], 3);
        assert!(json["modes"][2]["gbps"].is_null());
        assert!(!report.ok());
    }
}
