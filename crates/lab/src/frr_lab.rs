//! The FRR seed lab: ce1 -- pe1 -- p -- pe2 -- ce2 with FRRouting (OSPF + LDP) as the
//! control plane and vmpls forwarding in FRR mode, measured in several modes in one run.
//!
//! ```text
//!  ce1 ----------- pe1 ------------ p ------------ pe2 ----------- ce2
//!  198.18.1.2/24   .1 | 198.18.10.1  .2 | 198.18.20.1  .2 | 198.18.2.1   198.18.2.2/24
//!              lo 198.18.255.1    lo 198.18.255.2    lo 198.18.255.3
//! ```
//!
//! The interfaces, subnets and vmpls port names are those of [`crate::seed`] (IPv4 only:
//! FRR's OSPFv2 and LDP carry IPv4). The CEs are plain kernel hosts with default routes
//! to their PE. On pe1, p and pe2 the kernel owns the addresses (the interfaces' and
//! the loopback) and FRR runs ([`FrrOptions::seed`]: zebra with our module and
//! `dplane_fpm_nl`, staticd, ospfd, ldpd), and one `vmpls run` in FRR mode gets zebra's
//! routes and labels over FPM. The kernel's IP forwarding is off there: vmpls forwards
//! transit traffic, the kernel answers for the router itself (ARP, ping, OSPF, LDP).
//!
//! [`run_frr_lab`] starts it all, measures how long the routers take to hold the LSPs
//! FRR computed (`converged_s`: from the daemons' start to every vmpls label table
//! being equal to FRR's `show mpls table`), checks ping and `traceroute -e`, and runs
//! the content-checked TCP flow ce1 -> ce2 in three modes:
//! - `kernel-ip`: vmpls stopped, the kernel's forwarding on; the kernel routes by the
//!   OSPF routes zebra installed (labelled routes reach the kernel stripped of labels).
//!   The baseline.
//! - `vmpls-ldp`: forwarding off, vmpls in FRR mode on its own pipeline, over the LDP
//!   LSPs.
//! - `vmpls-ldp-tc`: the same with the in-kernel fast path (`fast-path = "tc"`).
//!
//! Between modes the vmpls processes are restarted with the other config; zebra's FPM
//! client reconnects to the new one on its own and sends its whole table again, which
//! the lab waits for (and reports how long it took).
//!
//! [`FrrLab`] is the building block, also used by the integration tests: the topology,
//! FRR and vmpls on each router, and comparisons of vmpls's tables with FRR's.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;
use vmpls_control::api;

use crate::frr::{FrrOptions, FrrRouter, ensure_frr_installed};
use crate::report::{self, JsonDetail, Measured, ModeRow};
use crate::routers::{LogMode, RouterSet};
use crate::seed::{CE1_V4, CE2_V4, prefix};
use crate::topology::{HostOptions, Topology};
use crate::traffic::{FlowOptions, FlowProgress, FlowResult, Limit, run_flow};
use crate::{IpPrefix, check_interrupt, interrupted, is_interrupted, require_root};

/// What `vmpls lab frr` does.
#[derive(Debug, Clone)]
pub struct FrrLabOptions {
    /// The `vmpls` binary (started as `VMPLS run --config FILE` on each router).
    pub vmpls: PathBuf,
    /// How long each mode's TCP flow runs.
    pub duration: Duration,
    /// Our zebra module (`vmpls_zebra.so`, from `scripts/build-zebra-module`).
    pub zebra_module: PathBuf,
    /// The caller wants JSON ([`FrrLabReport::to_json`]) rather than Markdown; the lab
    /// itself does not print.
    pub json: bool,
}

/// One vmpls port of a router: (port name, interface, kernel address).
type PortDef = (&'static str, &'static str, &'static str);

/// A router of the lab.
struct RouterDef {
    name: &'static str,
    router_id: Ipv4Addr,
    ports: [PortDef; 2],
}

/// The routers with [`crate::seed`]'s port names, interfaces and subnets.
const ROUTERS: [RouterDef; 3] = [
    RouterDef {
        name: "pe1",
        router_id: Ipv4Addr::new(198, 18, 255, 1),
        ports: [("ce1", "pe1-ce1", "198.18.1.1/24"), ("core", "pe1-p", "198.18.10.1/24")],
    },
    RouterDef {
        name: "p",
        router_id: Ipv4Addr::new(198, 18, 255, 2),
        ports: [("west", "p-pe1", "198.18.10.2/24"), ("east", "p-pe2", "198.18.20.1/24")],
    },
    RouterDef {
        name: "pe2",
        router_id: Ipv4Addr::new(198, 18, 255, 3),
        ports: [("core", "pe2-p", "198.18.20.2/24"), ("ce2", "pe2-ce2", "198.18.2.1/24")],
    },
];

/// The router names, in order along the line.
pub const ROUTER_NAMES: [&str; 3] = ["pe1", "p", "pe2"];

/// (host a, interface a, host b, interface b, core link?), as in [`crate::seed`].
const LINKS: [(&str, &str, &str, &str, bool); 4] = [
    ("ce1", "ce1-pe1", "pe1", "pe1-ce1", false),
    ("pe1", "pe1-p", "p", "p-pe1", true),
    ("p", "p-pe2", "pe2", "pe2-p", true),
    ("pe2", "pe2-ce2", "ce2", "ce2-pe2", false),
];

/// MTU of the customer links.
const CUSTOMER_MTU: u32 = 1500;
/// MTU of the core links: super-frames cross them whole (as in the seed lab).
const CORE_MTU: u32 = 65535;

/// The prefixes LDP binds labels to: the loopbacks, the customer and the core subnets.
const FECS: [&str; 7] = [
    "198.18.255.1/32",
    "198.18.255.2/32",
    "198.18.255.3/32",
    "198.18.1.0/24",
    "198.18.2.0/24",
    "198.18.10.0/24",
    "198.18.20.0/24",
];

fn def(name: &str) -> anyhow::Result<&'static RouterDef> {
    ROUTERS.iter().find(|r| r.name == name).ok_or_else(|| anyhow!("the FRR lab has no router {name:?}"))
}

/// ce2's address, the flows' destination.
pub fn ce2_addr() -> IpAddr {
    prefix(CE2_V4).addr()
}

/// ce1's address.
pub fn ce1_addr() -> IpAddr {
    prefix(CE1_V4).addr()
}

/// The number of LSPs `router` has when converged: one per FEC that is not its own
/// (a FEC of its own gets implicit null, no LSP).
pub fn expected_lsps(router: &str) -> anyhow::Result<usize> {
    let d = def(router)?;
    let own = |fec: &IpPrefix| {
        fec.contains(IpAddr::V4(d.router_id)) || d.ports.iter().any(|p| prefix(p.2).network() == *fec)
    };
    Ok(FECS.iter().map(|f| prefix(f)).filter(|f| !own(f)).count())
}

/// One next hop of a label table entry, compared between FRR and vmpls. Implicit null
/// (3) is left out of the label stack: both mean "pop and send".
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LabelHop {
    /// The outgoing label stack (without implicit null).
    pub out_labels: Vec<u32>,
    /// The next hop's address.
    pub via: Option<IpAddr>,
    /// The outgoing interface (FRR 8.4's LDP next hops have only the address: it is
    /// found from the router's subnets then).
    pub interface: Option<String>,
}

/// A label table: incoming label -> next hops.
pub type LabelTable = BTreeMap<u32, BTreeSet<LabelHop>>;

/// One next hop of an IP route, compared between FRR and vmpls.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RouteHop {
    /// The labels pushed (without implicit null).
    pub labels: Vec<u32>,
    /// The gateway.
    pub via: Option<IpAddr>,
    /// The outgoing interface.
    pub interface: Option<String>,
}

/// The routes FRR hands over (not the connected ones): prefix (as text, `198.18.2.0/24`)
/// -> next hops.
pub type RouteTable = BTreeMap<String, BTreeSet<RouteHop>>;

pub(crate) fn strip_imp_null(labels: &[u32]) -> Vec<u32> {
    labels.iter().copied().filter(|&l| l != 3).collect()
}

/// The interface of `router` whose subnet holds `via`.
fn interface_for(router: &str, via: Option<IpAddr>) -> Option<String> {
    let via = via?;
    let d = def(router).ok()?;
    d.ports.iter().find(|p| prefix(p.2).contains(via)).map(|p| p.1.to_string())
}

/// The interface behind vmpls port `port` of `router`.
fn port_interface(router: &str, port: &str) -> Option<String> {
    def(router).ok()?.ports.iter().find(|p| p.0 == port).map(|p| p.1.to_string())
}

/// The differences between two tables, one line per key (empty: equal).
pub(crate) fn diff<K: Ord + std::fmt::Display, V: PartialEq + std::fmt::Debug>(
    frr: &BTreeMap<K, V>,
    vmpls: &BTreeMap<K, V>,
) -> Vec<String> {
    let keys: BTreeSet<&K> = frr.keys().chain(vmpls.keys()).collect();
    keys.into_iter()
        .filter_map(|k| match (frr.get(k), vmpls.get(k)) {
            (Some(a), Some(b)) if a == b => None,
            (Some(a), Some(b)) => Some(format!("{k}: FRR {a:?}, vmpls {b:?}")),
            (Some(a), None) => Some(format!("{k}: FRR {a:?}, missing in vmpls")),
            (None, Some(b)) => Some(format!("{k}: only in vmpls {b:?}")),
            (None, None) => None,
        })
        .collect()
}

/// The FRR seed topology with FRR and vmpls on pe1, p and pe2. Dropping it stops
/// everything and removes the namespaces.
#[derive(Debug)]
pub struct FrrLab {
    // Field order is drop order: FRR before the namespaces.
    frr: Vec<FrrRouter>,
    topo: Topology,
    vmpls: RouterSet,
    vmpls_bin: PathBuf,
    work_dir: PathBuf,
    fast_path: bool,
}

impl FrrLab {
    /// Builds the namespaces and links, the CEs' addresses and default routes, and the
    /// routers' kernel addresses, with the kernel's forwarding off on the routers. No
    /// daemon runs yet. Configs and logs go to `work_dir`.
    pub fn build(vmpls_bin: &Path, work_dir: &Path) -> anyhow::Result<Self> {
        require_root()?;
        let mut topo = Topology::new();
        let no_v6 = HostOptions { ipv6: false };
        topo.add_host_with("ce1", no_v6)?;
        for r in &ROUTERS {
            topo.add_host_with(r.name, no_v6)?;
        }
        topo.add_host_with("ce2", no_v6)?;
        for (a, a_if, b, b_if, core) in LINKS {
            topo.add_link(a, a_if, b, b_if, if core { CORE_MTU } else { CUSTOMER_MTU })?;
        }
        topo.add_address("ce1", "ce1-pe1", prefix(CE1_V4))?;
        topo.add_address("ce2", "ce2-pe2", prefix(CE2_V4))?;
        topo.add_default_route("ce1", prefix("198.18.1.1/24").addr())?;
        topo.add_default_route("ce2", prefix("198.18.2.1/24").addr())?;
        for r in &ROUTERS {
            for (_, ifname, addr) in r.ports {
                topo.add_address(r.name, ifname, prefix(addr))?;
            }
            topo.set_forwarding(r.name, false)?;
        }
        Ok(Self {
            frr: Vec::new(),
            topo,
            vmpls: RouterSet::new(),
            vmpls_bin: vmpls_bin.to_path_buf(),
            work_dir: work_dir.to_path_buf(),
            fast_path: false,
        })
    }

    /// The topology (namespaces: [`Topology::ns`]).
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The directory with the configs and logs.
    pub fn work_dir(&self) -> &Path {
        &self.work_dir
    }

    /// Starts FRR on pe1, p and pe2 ([`FrrOptions::seed`] with `zebra_module`).
    pub fn start_frr(&mut self, zebra_module: &Path) -> anyhow::Result<()> {
        self.start_frr_from(None, zebra_module)
    }

    /// Like [`FrrLab::start_frr`], with the FRR of the Debian root `root` (see
    /// [`FrrOptions::root`]; the work directory and the module must be inside it).
    pub fn start_frr_from(&mut self, root: Option<&Path>, zebra_module: &Path) -> anyhow::Result<()> {
        for name in ROUTER_NAMES {
            let mut o = FrrOptions::seed(name)?;
            o.root = root.map(Path::to_path_buf);
            o.zebra_module = Some(zebra_module.to_path_buf());
            let r = FrrRouter::start(&self.topo, name, &self.work_dir, o)
                .with_context(|| format!("starting FRR on {name}"))?;
            self.frr.push(r);
        }
        Ok(())
    }

    /// FRR of `router`.
    pub fn frr(&self, router: &str) -> anyhow::Result<&FrrRouter> {
        self.frr
            .iter()
            .find(|r| r.options().hostname == router)
            .ok_or_else(|| anyhow!("FRR does not run on {router:?}"))
    }

    /// FRR of `router`, mutable (for [`FrrRouter::restart_zebra`]).
    pub fn frr_mut(&mut self, router: &str) -> anyhow::Result<&mut FrrRouter> {
        self.frr
            .iter_mut()
            .find(|r| r.options().hostname == router)
            .ok_or_else(|| anyhow!("FRR does not run on {router:?}"))
    }

    /// The vmpls config of `router` in FRR mode.
    pub fn vmpls_config(&self, router: &str, fast_path: bool) -> anyhow::Result<String> {
        vmpls_config(router, &self.socket_path(router), fast_path)
    }

    fn socket_path(&self, router: &str) -> PathBuf {
        self.work_dir.join(format!("{router}.sock"))
    }

    /// Starts one `vmpls run` in FRR mode per router (with the fast path or not) and
    /// waits for their control sockets. The kernel's forwarding must be off.
    pub fn start_vmpls(&mut self, fast_path: bool) -> anyhow::Result<()> {
        self.stop_vmpls()?;
        self.fast_path = fast_path;
        for name in ROUTER_NAMES {
            let config = self.work_dir.join(format!("{name}.toml"));
            std::fs::write(&config, self.vmpls_config(name, fast_path)?)
                .with_context(|| format!("writing {}", config.display()))?;
            let log = self.work_dir.join(format!("{name}.vmpls.log"));
            let cmd = RouterSet::command(&self.vmpls_bin, &config);
            let socket = Some(self.socket_path(name));
            self.vmpls.start(&mut self.topo, name, cmd, log, LogMode::Append, socket)?;
        }
        self.vmpls.wait_answering(&mut self.topo, Duration::from_secs(15))
    }

    /// Whether the running vmpls routers use the fast path.
    pub fn fast_path(&self) -> bool {
        self.fast_path
    }

    /// Stops the vmpls routers (if any run).
    pub fn stop_vmpls(&mut self) -> anyhow::Result<()> {
        self.vmpls.stop(&mut self.topo, Duration::from_secs(3)).map(drop)
    }

    /// Turns the kernel's IP forwarding on or off on pe1, p and pe2.
    pub fn set_kernel_forwarding(&self, on: bool) -> anyhow::Result<()> {
        for name in ROUTER_NAMES {
            self.topo.set_forwarding(name, on)?;
        }
        Ok(())
    }

    /// The last `lines` lines of each running vmpls router's log.
    pub fn vmpls_logs(&self, lines: usize) -> String {
        self.vmpls.logs(lines)
    }

    /// Fails if a vmpls router (or another child of the topology) has exited, or an
    /// FRR daemon has.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        self.vmpls.check_running(&mut self.topo)?;
        for r in &self.frr {
            r.check_running()?;
        }
        Ok(())
    }

    /// Runs the vmpls CLI against `router` with `-j` and returns its JSON.
    pub fn vmpls_cli(&self, router: &str, args: &[&str]) -> anyhow::Result<Value> {
        self.vmpls.cli_json(&self.vmpls_bin, router, args)
    }

    /// A counter of the FPM server of `router` (`connected`, `connections`, ...).
    pub fn frr_counter(&self, router: &str, name: &str) -> anyhow::Result<u64> {
        let st: api::Stats = self.vmpls_typed(router, &["stats"])?;
        st.frr
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.value)
            .ok_or_else(|| anyhow!("vmpls stats of {router} have no frr counter {name:?}: {:?}", st.frr))
    }

    /// Runs the vmpls CLI against `router` with `-j` and reads its JSON into `T`, the
    /// control API's type for that output.
    fn vmpls_typed<T: for<'de> serde::Deserialize<'de>>(
        &self,
        router: &str,
        args: &[&str],
    ) -> anyhow::Result<T> {
        let v = self.vmpls_cli(router, args)?;
        T::deserialize(&v).with_context(|| format!("vmpls -j {args:?} on {router}: {v}"))
    }

    /// vmpls's label table on `router` (`vmpls -j -f mpls route show`).
    pub fn vmpls_label_table(&self, router: &str) -> anyhow::Result<LabelTable> {
        let routes: Vec<api::MplsRoute> = self.vmpls_typed(router, &["-f", "mpls", "route", "show"])?;
        Ok(routes.iter().map(|r| (r.label, vmpls_hops(router, &r.nexthops).collect())).collect())
    }

    /// FRR's label table on `router` (`show mpls table json`), in the same form.
    pub fn frr_label_table(&self, router: &str) -> anyhow::Result<LabelTable> {
        Ok(self
            .frr(router)?
            .mpls_table()?
            .into_values()
            .map(|lsp| {
                let hops = lsp
                    .nexthops
                    .iter()
                    .map(|n| LabelHop {
                        out_labels: strip_imp_null(&n.out_labels),
                        via: n.via,
                        interface: n.interface.clone().or_else(|| interface_for(router, n.via)),
                    })
                    .collect();
                (lsp.in_label, hops)
            })
            .collect())
    }

    /// The routes vmpls has from FRR on `router` (`vmpls -j route show`, all but the
    /// connected ones, `proto kernel`).
    pub fn vmpls_routes(&self, router: &str) -> anyhow::Result<RouteTable> {
        let routes: Vec<api::IpRoute> = self.vmpls_typed(router, &["route", "show"])?;
        let mut t = RouteTable::new();
        for r in routes.into_iter().filter(|r| r.protocol != api::Protocol::Kernel) {
            let dst: IpPrefix = r.dst.parse().with_context(|| format!("route dst {:?}", r.dst))?;
            let hops = vmpls_hops(router, &r.nexthops)
                .map(|h| RouteHop { labels: h.out_labels, via: h.via, interface: h.interface })
                .collect();
            t.insert(dst.to_string(), hops);
        }
        Ok(t)
    }

    /// The routes zebra hands to vmpls on `router`: its selected IPv4 routes but the
    /// connected and kernel ones, with their active next hops.
    pub fn frr_routes(&self, router: &str) -> anyhow::Result<RouteTable> {
        let mut t = RouteTable::new();
        for r in self.frr(router)?.ip_routes()? {
            if !r.selected || matches!(r.protocol.as_str(), "connected" | "kernel" | "local") {
                continue;
            }
            let hops = r
                .nexthops
                .iter()
                .filter(|n| n.active)
                .map(|n| RouteHop {
                    labels: strip_imp_null(&n.labels),
                    via: n.via,
                    interface: n.interface.clone().or_else(|| interface_for(router, n.via)),
                })
                .collect();
            t.insert(r.prefix.to_string(), hops);
        }
        Ok(t)
    }

    /// How vmpls's tables on `router` differ from FRR's (label table, then routes); empty
    /// when they are equal.
    pub fn table_differences(&self, router: &str) -> anyhow::Result<Vec<String>> {
        let mut d: Vec<String> = diff(&self.frr_label_table(router)?, &self.vmpls_label_table(router)?)
            .into_iter()
            .map(|l| format!("{router} label {l}"))
            .collect();
        d.extend(
            diff(&self.frr_routes(router)?, &self.vmpls_routes(router)?)
                .into_iter()
                .map(|l| format!("{router} route {l}")),
        );
        Ok(d)
    }

    /// Waits until every router is converged and vmpls holds what FRR has: LDP
    /// sessions up, FRR's label table complete ([`expected_lsps`]) and installed,
    /// zebra connected to vmpls, and vmpls's label table and routes equal to FRR's.
    /// Returns how long it took, or an error saying what differs.
    pub fn wait_synced(&mut self, timeout: Duration) -> anyhow::Result<Duration> {
        let start = Instant::now();
        loop {
            let missing = self.sync_state()?;
            if missing.is_empty() {
                return Ok(start.elapsed());
            }
            if start.elapsed() >= timeout {
                bail!(
                    "vmpls and FRR not in sync after {timeout:?}:\n  {}\n{}",
                    missing.join("\n  "),
                    self.vmpls_logs(10)
                );
            }
            self.check_running()?;
            check_interrupt()?;
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What is still missing for [`FrrLab::wait_synced`] (empty: in sync).
    pub fn sync_state(&self) -> anyhow::Result<Vec<String>> {
        let mut missing = Vec::new();
        for name in ROUTER_NAMES {
            let frr = self.frr(name)?;
            let want = frr.expected();
            let up = frr.ldp_sessions_operational()?;
            if up < want.ldp_operational {
                missing.push(format!("{name}: {up} of {} LDP sessions up", want.ldp_operational));
                continue;
            }
            let table = frr.mpls_table()?;
            let lsps = expected_lsps(name)?;
            if table.len() < lsps {
                missing.push(format!("{name}: FRR has {} of {lsps} LSPs", table.len()));
                continue;
            }
            if let Some(l) = table.values().find(|l| !l.installed) {
                missing.push(format!("{name}: FRR's LSP {} is not installed", l.in_label));
                continue;
            }
            if self.frr_counter(name, "connected")? != 1 {
                missing.push(format!("{name}: zebra is not connected to vmpls"));
                continue;
            }
            missing.extend(self.table_differences(name)?);
        }
        Ok(missing)
    }

    /// Per router: LDP sessions up, entries of FRR's label table, label routes of vmpls.
    pub fn router_summaries(&self) -> anyhow::Result<Vec<RouterResult>> {
        ROUTER_NAMES
            .iter()
            .map(|&name| {
                let frr = self.frr(name)?;
                Ok(RouterResult {
                    name: name.to_string(),
                    ldp_sessions_up: frr.ldp_sessions_operational()?,
                    lsps_frr: frr.mpls_table()?.len(),
                    lsps_vmpls: if self.vmpls.is_empty() { 0 } else { self.vmpls_label_table(name)?.len() },
                })
            })
            .collect()
    }

    /// Waits until `from` gets an echo reply from `to`, then checks 3 of 3 replies.
    pub fn check_ping(&mut self, from: &str, to: IpAddr, timeout: Duration) -> anyhow::Result<()> {
        let ns = self.topo.ns(from)?.to_string();
        crate::ping::ping_until_answered(&ns, to, timeout, &mut || self.check_running())
            .with_context(|| format!("ping {from} -> {to}"))
    }

    /// `traceroute -e -n` from `from` to `to`: the hops in order.
    pub fn traceroute(&self, from: &str, to: IpAddr) -> anyhow::Result<Vec<TraceHop>> {
        traceroute(&self.topo, from, to)
    }

    /// Runs the content-checked TCP flow ce1 -> ce2 with `opts`.
    pub fn run_flow(
        &self,
        opts: &FlowOptions,
        progress: &mut dyn FnMut(FlowProgress),
    ) -> anyhow::Result<FlowResult> {
        run_flow(self.topo.ns("ce1")?, self.topo.ns("ce2")?, ce2_addr(), opts, progress)
    }

    /// Stops vmpls and FRR and removes the namespaces (also done on drop).
    pub fn cleanup(&mut self) -> anyhow::Result<()> {
        let mut first = self.stop_vmpls().err();
        for mut r in std::mem::take(&mut self.frr) {
            if let Err(e) = r.stop() {
                first.get_or_insert(e);
            }
        }
        if let Err(e) = self.topo.cleanup() {
            first.get_or_insert(e);
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for FrrLab {
    fn drop(&mut self) {
        let _ = self.cleanup();
    }
}

/// The vmpls config of `router` in FRR mode: its ports (no addresses, the kernel owns
/// them), `[frr]` with zebra's default FPM address, the control socket `socket`.
pub fn vmpls_config(router: &str, socket: &Path, fast_path: bool) -> anyhow::Result<String> {
    let d = def(router)?;
    let mut s = String::new();
    let _ = writeln!(s, "# {router} in FRR mode: generated by the FRR lab.\n");
    let _ = writeln!(s, "[router]\nname = \"{router}\"");
    let _ = writeln!(s, "control-socket = \"{}\"", socket.display());
    let _ = writeln!(s, "fast-path = \"{}\"", if fast_path { "tc" } else { "off" });
    let _ = writeln!(s, "\n[frr]\nfpm = \"127.0.0.1:2620\"");
    for (name, ifname, _) in d.ports {
        let _ = writeln!(s, "\n[[port]]\nname = \"{name}\"\ninterface = \"{ifname}\"");
    }
    Ok(s)
}

/// vmpls's next hops on `router` in the lab's form: implicit null left out, ports
/// named by their Linux interface.
fn vmpls_hops<'a>(router: &'a str, nexthops: &'a [api::Nexthop]) -> impl Iterator<Item = LabelHop> + 'a {
    nexthops.iter().map(move |n| LabelHop {
        out_labels: strip_imp_null(&n.labels),
        via: n.gateway,
        interface: n.dev.as_deref().and_then(|p| port_interface(router, p)),
    })
}

/// `traceroute -e -n` from host `from` of `topo` to `to`: the hops in order.
pub fn traceroute(topo: &Topology, from: &str, to: IpAddr) -> anyhow::Result<Vec<TraceHop>> {
    let mut cmd = Command::new("traceroute");
    cmd.args(["-e", "-n", "-q", "1", "-w", "1", "-m", "8"]).arg(to.to_string());
    let out = topo.run_timeout(from, cmd, Duration::from_secs(30)).context("running traceroute")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "traceroute {to} from {from} failed ({}): {text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(parse_traceroute(&text))
}

/// One hop of `traceroute -e -n -q 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceHop {
    /// The hop number (TTL).
    pub ttl: u32,
    /// Who answered (`None`: `*`, no answer).
    pub addr: Option<IpAddr>,
    /// The MPLS labels the answer carried (RFC 4950), outermost first.
    pub labels: Vec<u32>,
    /// The line as traceroute printed it.
    pub line: String,
}

/// Parses `traceroute -e -n -q 1` output: ` 2  198.18.10.2 <MPLS:L=16,E=0,S=1,T=1>  0.1 ms`.
pub fn parse_traceroute(text: &str) -> Vec<TraceHop> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let ttl = words.next()?.parse().ok()?;
            let addr = words.next().and_then(|w| w.parse().ok());
            let mut labels = Vec::new();
            let mut rest = line;
            while let Some(i) = rest.find("L=") {
                rest = &rest[i + 2..];
                let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
                if let Ok(l) = n.parse() {
                    labels.push(l);
                }
            }
            Some(TraceHop { ttl, addr, labels, line: line.trim_end().to_string() })
        })
        .collect()
}

/// One router of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterResult {
    /// `pe1`, `p` or `pe2`.
    pub name: String,
    /// LDP sessions in state OPERATIONAL.
    pub ldp_sessions_up: usize,
    /// Entries of FRR's `show mpls table`.
    pub lsps_frr: usize,
    /// Label routes vmpls forwards with (`vmpls -f mpls route show`).
    pub lsps_vmpls: usize,
}

/// The outcome of one mode.
#[derive(Debug, Clone, PartialEq)]
pub struct FrrModeResult {
    /// `kernel-ip`, `vmpls-ldp` or `vmpls-ldp-tc`.
    pub name: String,
    /// The flow's measurements; `None` if the mode failed before or during the flow.
    pub flow: Option<FlowResult>,
    /// Throughput relative to kernel-ip.
    pub ratio: Option<f64>,
    /// Seconds until vmpls held zebra's table again after it was (re)started.
    pub resync_s: Option<f64>,
    /// Why the mode failed, if it did.
    pub error: Option<String>,
}

/// The result of `vmpls lab frr`.
#[derive(Debug, Clone, PartialEq)]
pub struct FrrLabReport {
    /// Per router, after convergence.
    pub routers: Vec<RouterResult>,
    /// Seconds from the FRR daemons' start to every vmpls label table (and route
    /// table) equal to FRR's.
    pub converged_s: f64,
    /// `traceroute -e` ce1 -> ce2, one line per hop.
    pub traceroute: Vec<String>,
    /// Checks beside the modes that failed (ping, traceroute): empty when all passed.
    pub failed_checks: Vec<String>,
    /// One entry per mode, in the order run.
    pub modes: Vec<FrrModeResult>,
    /// The directory with the configs and logs, if it was kept (after a failure).
    pub work_dir: Option<PathBuf>,
}

impl FrrLabReport {
    /// Whether every check and every mode succeeded.
    pub fn ok(&self) -> bool {
        self.failed_checks.is_empty()
            && !self.modes.is_empty()
            && self.modes.iter().all(|m| m.error.is_none())
    }

    /// `{"routers": [{"name", "ldp_sessions_up", "lsps_frr", "lsps_vmpls"}],
    /// "converged_s", "modes": [{"name", "gbps", "retransmits", "ratio"}]}`.
    pub fn to_json(&self) -> Value {
        let routers: Vec<Value> = self
            .routers
            .iter()
            .map(|r| {
                serde_json::json!({
                    "name": r.name,
                    "ldp_sessions_up": r.ldp_sessions_up,
                    "lsps_frr": r.lsps_frr,
                    "lsps_vmpls": r.lsps_vmpls,
                })
            })
            .collect();
        let modes: Vec<Value> =
            self.rows().iter().map(|m| Value::Object(report::mode_json(m, JsonDetail::Summary))).collect();
        serde_json::json!({ "routers": routers, "converged_s": self.converged_s, "modes": modes })
    }

    /// The modes table (as `vmpls lab seed` prints it), the routers table, the
    /// convergence time, the traceroute and any failures.
    pub fn to_markdown(&self) -> String {
        let rows = self.rows();
        let mut s = report::modes_table(&rows);
        s.push('\n');
        s.push_str("| router | LDP sessions up | LSPs in FRR | LSPs in vmpls |\n");
        s.push_str("|--------|----------------:|------------:|--------------:|\n");
        for r in &self.routers {
            let _ = writeln!(s, "| {} | {} | {} | {} |", r.name, r.ldp_sessions_up, r.lsps_frr, r.lsps_vmpls);
        }
        let _ = writeln!(
            s,
            "\nconverged in {:.2} s (FRR started -> vmpls holds every LSP FRR has)",
            self.converged_s
        );
        for m in &self.modes {
            if let Some(t) = m.resync_s {
                let _ = writeln!(s, "{}: vmpls had zebra's table {t:.2} s after it started", m.name);
            }
        }
        if !self.traceroute.is_empty() {
            let _ = writeln!(s, "\ntraceroute -e ce1 -> ce2:\n```\n{}\n```", self.traceroute.join("\n"));
        }
        s += &report::failure_list(self.failed_checks.iter().cloned().chain(report::mode_failures(&rows)));
        s
    }

    fn rows(&self) -> Vec<ModeRow<'_>> {
        self.modes
            .iter()
            .map(|m| ModeRow {
                name: &m.name,
                measured: m.flow.as_ref().map(Measured::from),
                ratio: m.ratio,
                error: m.error.as_deref(),
            })
            .collect()
    }
}

/// The modes, in the order run: (name, vmpls runs, fast path).
const MODES: [(&str, bool, bool); 3] =
    [("kernel-ip", false, false), ("vmpls-ldp", true, false), ("vmpls-ldp-tc", true, true)];

/// How long the lab waits for FRR and vmpls to converge at start.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long it waits for a restarted vmpls to get zebra's table again.
const RESYNC_TIMEOUT: Duration = Duration::from_secs(45);
/// Below this a flow counts as stalled (a failure).
const STALLED_GBPS: f64 = 0.01;
/// How long it waits for ce1 to reach ce2.
const REACH_TIMEOUT: Duration = Duration::from_secs(15);

/// Runs the FRR seed lab (see the [module documentation](self)) and returns its
/// report. `progress` gets human-readable progress lines.
///
/// Fails at once without root. On Ctrl-C/SIGTERM (with
/// [`install_interrupt_handler`](crate::install_interrupt_handler)) it returns an
/// `interrupted` error; daemons and namespaces are removed either way. The work
/// directory (configs, FRR and vmpls logs) is removed unless something failed.
pub fn run_frr_lab(opts: &FrrLabOptions, progress: &mut dyn FnMut(&str)) -> anyhow::Result<FrrLabReport> {
    require_root()?;
    if opts.duration.is_zero() {
        bail!("the flow duration must be more than 0 s");
    }
    if !opts.vmpls.is_file() {
        bail!("vmpls binary {} not found", opts.vmpls.display());
    }
    if !opts.zebra_module.is_file() {
        bail!(
            "zebra module {} not found (build it with scripts/build-zebra-module)",
            opts.zebra_module.display()
        );
    }
    ensure_frr_installed()?;
    let work_dir = crate::temp_work_dir("vmpls-frr-lab")?;
    match run_lab(opts, &work_dir, progress) {
        Ok(mut report) => {
            if report.ok() {
                let _ = std::fs::remove_dir_all(&work_dir);
            } else {
                report.work_dir = Some(work_dir);
            }
            Ok(report)
        }
        Err(e) if is_interrupted(&e) || interrupted() => {
            let _ = std::fs::remove_dir_all(&work_dir);
            Err(e)
        }
        Err(e) => Err(e.context(format!("FRR lab failed (configs and logs are in {})", work_dir.display()))),
    }
}

fn run_lab(
    opts: &FrrLabOptions,
    work_dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<FrrLabReport> {
    progress("building the FRR seed topology: ce1 -- pe1 -- p -- pe2 -- ce2");
    let mut lab = FrrLab::build(&opts.vmpls, work_dir)?;
    progress(&format!("namespaces: {}", lab.topology().namespaces().join(" ")));
    progress("starting vmpls in FRR mode on pe1, p, pe2 (waiting for zebra over FPM)");
    lab.start_vmpls(false)?;
    progress("starting FRR (zebra + vmpls module + dplane_fpm_nl, staticd, ospfd, ldpd) on pe1, p, pe2");
    let started = Instant::now();
    lab.start_frr(&opts.zebra_module)?;
    progress("waiting for OSPF and LDP to converge and vmpls to hold FRR's LSPs");
    lab.wait_synced(CONVERGE_TIMEOUT)?;
    let converged_s = started.elapsed().as_secs_f64();
    let routers = lab.router_summaries()?;
    for r in &routers {
        progress(&format!(
            "{}: {} LDP sessions up, {} LSPs in FRR, {} in vmpls",
            r.name, r.ldp_sessions_up, r.lsps_frr, r.lsps_vmpls
        ));
    }
    progress(&format!("converged in {converged_s:.2} s: every vmpls label table equals FRR's"));

    let mut failed_checks = Vec::new();
    for (from, to) in [("ce1", ce2_addr()), ("ce2", ce1_addr())] {
        match lab.check_ping(from, to, REACH_TIMEOUT) {
            Ok(()) => progress(&format!("ping {from} -> {to}: 3 of 3")),
            Err(e) if is_interrupted(&e) => return Err(e),
            Err(e) => {
                progress(&format!("ping {from} -> {to}: {e:#}"));
                failed_checks.push(format!("ping {from} -> {to}: {e:#}"));
            }
        }
    }
    let traceroute = match lab.traceroute("ce1", ce2_addr()) {
        Ok(hops) => {
            for h in &hops {
                progress(&format!("traceroute -e: {}", h.line));
            }
            if let Some(problem) = check_trace(&hops) {
                failed_checks.push(format!("traceroute -e ce1 -> ce2: {problem}"));
            }
            hops.into_iter().map(|h| h.line).collect()
        }
        Err(e) => {
            failed_checks.push(format!("traceroute -e ce1 -> ce2: {e:#}"));
            Vec::new()
        }
    };

    let mut modes = Vec::new();
    for (name, vmpls, fast_path) in MODES {
        check_interrupt()?;
        progress(&format!("{name}: setting up"));
        let mut resync_s = None;
        let result = run_mode(&mut lab, opts, name, vmpls, fast_path, &mut resync_s, progress);
        match result {
            Ok(flow) => {
                let error = if !flow.content_ok {
                    Some(match flow.first_mismatch {
                        Some(at) => format!("received data differs from what was sent, first at byte {at}"),
                        None => {
                            format!("sent {} bytes but received {}", flow.bytes_sent, flow.bytes_received)
                        }
                    })
                } else if flow.gbps < STALLED_GBPS {
                    // A flow with a time limit ends "intact" even when almost nothing
                    // crossed: the sender was blocked the whole time.
                    Some(format!(
                        "the flow stalled: {} bytes in {:.1} s, {} retransmits",
                        flow.bytes_received, flow.seconds, flow.retransmits
                    ))
                } else {
                    None
                };
                progress(&format!(
                    "{name}: {:.2} Gbit/s, {} retransmits, {} bytes in {:.1} s{}",
                    flow.gbps,
                    flow.retransmits,
                    flow.bytes_received,
                    flow.seconds,
                    if flow.content_ok { "" } else { ", CONTENT WRONG" }
                ));
                modes.push(FrrModeResult {
                    name: name.into(),
                    flow: Some(flow),
                    ratio: None,
                    resync_s,
                    error,
                });
            }
            Err(e) if interrupted() || is_interrupted(&e) => return Err(e),
            Err(e) => {
                progress(&format!("{name}: failed: {e:#}"));
                modes.push(FrrModeResult {
                    name: name.into(),
                    flow: None,
                    ratio: None,
                    resync_s,
                    error: Some(format!("{e:#}")),
                });
            }
        }
    }
    let gbps: Vec<Option<f64>> = modes.iter().map(|m| m.flow.as_ref().map(|f| f.gbps)).collect();
    let kernel_ip = modes.iter().position(|m| m.name == "kernel-ip");
    for (m, ratio) in modes.iter_mut().zip(report::ratios(&gbps, |_| kernel_ip)) {
        m.ratio = ratio;
    }
    lab.cleanup()?;
    Ok(FrrLabReport { routers, converged_s, traceroute, failed_checks, modes, work_dir: None })
}

/// What is wrong with a traceroute ce1 -> ce2 over the LSP, if anything: it must reach
/// ce2, every hop must answer, and p's answer must carry the label it received.
fn check_trace(hops: &[TraceHop]) -> Option<String> {
    let last = hops.last()?;
    if last.addr != Some(ce2_addr()) {
        return Some(format!(
            "did not reach {}: {:?}",
            ce2_addr(),
            hops.iter().map(|h| &h.line).collect::<Vec<_>>()
        ));
    }
    if let Some(h) = hops.iter().find(|h| h.addr.is_none()) {
        return Some(format!("hop {} did not answer", h.ttl));
    }
    if !hops.iter().any(|h| !h.labels.is_empty()) {
        return Some("no hop showed an MPLS label (RFC 4950)".into());
    }
    None
}

fn run_mode(
    lab: &mut FrrLab,
    opts: &FrrLabOptions,
    name: &str,
    vmpls: bool,
    fast_path: bool,
    resync_s: &mut Option<f64>,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<FlowResult> {
    lab.stop_vmpls()?;
    if vmpls {
        lab.set_kernel_forwarding(false)?;
        let started = Instant::now();
        progress(&format!(
            "{name}: starting vmpls{}",
            if fast_path { " with fast-path = \"tc\"" } else { "" }
        ));
        lab.start_vmpls(fast_path)?;
        progress(&format!("{name}: waiting for zebra to reconnect and send its table again"));
        lab.wait_synced(RESYNC_TIMEOUT)?;
        let t = started.elapsed().as_secs_f64();
        *resync_s = Some(t);
        progress(&format!("{name}: vmpls holds zebra's table again after {t:.2} s"));
    } else {
        lab.set_kernel_forwarding(true)?;
        progress(&format!("{name}: vmpls stopped, the kernel forwards by zebra's OSPF routes"));
    }
    progress(&format!("{name}: waiting for ce1 to reach ce2"));
    for (from, to) in [("ce1", ce2_addr()), ("ce2", ce1_addr())] {
        lab.check_ping(from, to, REACH_TIMEOUT).map_err(|e| anyhow!("{e:#}\n{}", lab.vmpls_logs(10)))?;
    }
    progress(&format!("{name}: TCP ce1 -> ce2 for {:?}", opts.duration));
    let flow_opts = FlowOptions { limit: Limit::Duration(opts.duration), ..FlowOptions::default() };
    let flow = lab.run_flow(&flow_opts, &mut |p| {
        let gbps = crate::traffic::gbps(p.bytes, p.elapsed.as_secs_f64());
        progress(&format!(
            "{name}: {:.0} s, {:.2} GB, {gbps:.2} Gbit/s",
            p.elapsed.as_secs_f64(),
            p.bytes as f64 / 1e9
        ));
    });
    match flow {
        Ok(f) => Ok(f),
        Err(e) if vmpls && !is_interrupted(&e) => {
            lab.check_running()?;
            Err(anyhow!("{e:#}\n{}", lab.vmpls_logs(20)))
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_lsps_leave_out_own_fecs() {
        for r in ROUTER_NAMES {
            assert_eq!(expected_lsps(r).unwrap(), 4, "{r}");
        }
        assert!(expected_lsps("ce1").is_err());
    }

    #[test]
    fn parses_traceroute_with_labels() {
        let text = "traceroute to 198.18.2.2 (198.18.2.2), 8 hops max, 60 byte packets\n \
                    1  198.18.1.1  0.050 ms\n \
                    2  198.18.10.2 <MPLS:L=16,E=0,S=1,T=1>  0.101 ms\n \
                    3  *\n \
                    4  198.18.2.2  0.2 ms\n";
        let hops = parse_traceroute(text);
        assert_eq!(hops.len(), 4);
        assert_eq!(hops[1].labels, [16]);
        assert_eq!(hops[1].addr, Some("198.18.10.2".parse().unwrap()));
        assert_eq!(hops[2].addr, None);
        assert_eq!(check_trace(&hops).unwrap(), "hop 3 did not answer");
    }

    #[test]
    fn tables_differ_by_key() {
        let hop = |l: u32| LabelHop { out_labels: vec![l], via: None, interface: None };
        let a: LabelTable = [(16, [hop(17)].into()), (18, [hop(19)].into())].into();
        let b: LabelTable = [(16, [hop(17)].into()), (20, [hop(3)].into())].into();
        let d = diff(&a, &b);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].starts_with("18: FRR") && d[1].starts_with("20: only in vmpls"), "{d:?}");
        assert!(diff(&a, &a).is_empty());
    }

    #[test]
    fn configs_and_report() {
        let cfg = vmpls_config("p", Path::new("/x/p.sock"), true).unwrap();
        assert!(cfg.contains("[frr]\nfpm = \"127.0.0.1:2620\""), "{cfg}");
        assert!(cfg.contains("fast-path = \"tc\""), "{cfg}");
        assert!(cfg.contains("name = \"east\"\ninterface = \"p-pe2\""), "{cfg}");
        assert!(!cfg.contains("addresses"), "{cfg}");
        let report = FrrLabReport {
            routers: vec![RouterResult { name: "p".into(), ldp_sessions_up: 2, lsps_frr: 4, lsps_vmpls: 4 }],
            converged_s: 4.5,
            traceroute: vec![],
            failed_checks: vec![],
            modes: vec![FrrModeResult {
                name: "vmpls-ldp".into(),
                flow: Some(FlowResult {
                    bytes_sent: 1,
                    bytes_received: 1,
                    seconds: 1.0,
                    gbps: 8.0,
                    retransmits: 2,
                    content_ok: true,
                    first_mismatch: None,
                }),
                ratio: Some(0.5),
                resync_s: Some(3.0),
                error: None,
            }],
            work_dir: None,
        };
        let j = report.to_json();
        assert_eq!(j["routers"][0]["lsps_vmpls"], 4);
        assert_eq!(j["converged_s"], 4.5);
        assert_eq!(j["modes"][0]["ratio"], 0.5);
        assert_eq!(j.as_object().unwrap().len(), 3);
        assert_eq!(j["modes"][0].as_object().unwrap().len(), 4);
        let md = report.to_markdown();
        assert!(md.contains("| vmpls-ldp | 8.00 | 2 | 0.50 |"), "{md}");
        assert!(md.contains("| p | 2 | 4 | 4 |"), "{md}");
        assert!(report.ok());
    }

    #[test]
    fn reads_vmpls_json_into_the_api_types() {
        // What `vmpls -j -f mpls route show` prints on p: one swap towards pe2 and a pop
        // with implicit null (3) left out of the comparison.
        let shown = r#"[
            {"label":100,"action":"forward","protocol":"ldp","ttl_propagate":true,
             "nexthops":[{"gateway":"198.18.20.2","dev":"east","labels":[200],"weight":1}]},
            {"label":101,"action":"forward","protocol":"ldp","ttl_propagate":true,
             "nexthops":[{"gateway":"198.18.10.1","dev":"west","labels":[3],"weight":1}]}
        ]"#;
        let routes: Vec<api::MplsRoute> = serde_json::from_str(shown).unwrap();
        let hops: Vec<Vec<LabelHop>> =
            routes.iter().map(|r| vmpls_hops("p", &r.nexthops).collect()).collect();
        assert_eq!(
            hops,
            vec![
                vec![LabelHop {
                    out_labels: vec![200],
                    via: Some("198.18.20.2".parse().unwrap()),
                    interface: Some("p-pe2".into())
                }],
                vec![LabelHop {
                    out_labels: vec![],
                    via: Some("198.18.10.1".parse().unwrap()),
                    interface: Some("p-pe1".into())
                }],
            ]
        );
    }
}
