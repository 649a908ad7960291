//! FRRouting daemons inside the lab's network namespaces: the control plane for vmpls in
//! FRR mode.
//!
//! In FRR mode vmpls forwards and FRR decides: zebra (Debian's unmodified binary, with
//! our `vmpls_zebra.so` module when it is built) hands routes and labels to vmpls over
//! FPM (`-M dplane_fpm_nl`, zebra connecting to `127.0.0.1:2620` inside the router's
//! namespace), while ospfd, ldpd and staticd compute them. This module runs one such
//! FRR per namespace, several side by side on one machine:
//!
//! - [`ensure_frr_installed`] installs Debian's `frr` package if needed;
//! - [`FrrOptions`] says what one router runs (router id, OSPF and LDP interfaces,
//!   timers, extra config); [`FrrOptions::seed`] gives the seed lab's pe1, p and pe2;
//! - [`FrrRouter::start`] writes the config files into a directory of its own and starts
//!   zebra, staticd, ospfd and ldpd inside the namespace; dropping it stops them;
//! - queries go through `vtysh` against that router's sockets ([`FrrRouter::vtysh`],
//!   [`FrrRouter::mpls_table`], [`FrrRouter::wait_converged`], ...).
//!
//! # How instances are kept apart
//!
//! Nothing of an instance lives in `/etc/frr` or `/var/run/frr`: every daemon gets its
//! config file (`-f`), pid file (`-i`), vty socket directory (`--vty_socket`), zebra
//! socket (`-z`, the same for all daemons of one router) and, for ldpd, control socket
//! directory (`--ctl_socket`) in the router's directory, no vty TCP port (`-P 0`) and a
//! log file there (`log file` in its config). The daemons run as root with the group
//! `frrvty` (`-u root -g frrvty`): Debian's FRR is built with `--enable-vty-group=frrvty`
//! and every daemon exits at start ("user(root) is not part of vty group") unless the
//! user it runs as is in that group, and `-g` puts it there without editing
//! `/etc/group`. `vtysh` is pointed at the same directory (`--vty_socket`,
//! `--config_dir`) so it neither reads `/etc/frr/vtysh.conf` nor talks to another
//! router's daemons.
//!
//! The daemons run in the foreground (no `-d`) as our children, each in its own process
//! group (ldpd's two helper processes share its group), with `PR_SET_PDEATHSIG`, so a
//! crashed lab does not leave them behind. They are stopped group by group; nothing is
//! ever killed by name.
//!
//! # What to expect without the zebra module
//!
//! zebra turns MPLS off when the kernel has none (`/proc/sys/net/mpls` missing, as on
//! the machines here): LDP sessions come up and bindings are exchanged, but
//! `show mpls table` stays empty and labelled static routes are refused. The module
//! (`scripts/build-zebra-module`, see `../shared/research/frr.md`) turns MPLS on and
//! lets labelled routes and LSPs reach FPM. [`FrrRouter::wait_converged`] only expects
//! LSPs when the module is loaded.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use crate::process::{SignalTarget, Supervised};
use crate::topology::Topology;
use crate::{IpPrefix, check_interrupt, netns, nl};

/// Where Debian installs the FRR daemons.
pub const FRR_SBIN: &str = "/usr/lib/frr";

/// The default FPM address zebra connects to (and vmpls listens on) inside a router's
/// namespace.
pub const DEFAULT_FPM: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 2620);

/// Where every FRR process keeps a directory of its own (`<daemon>.<pid>`).
const FRR_TMP_DIR: &str = "/var/tmp/frr";

/// The group the daemons run with: Debian's FRR requires its user to be in `frrvty`.
const VTY_GROUP: &str = "frrvty";

/// How long one `vtysh` call may take.
const VTYSH_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a daemon may take to create its socket at start.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a daemon gets to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// Installs Debian's `frr` package unless `/usr/lib/frr/zebra` exists, and makes sure
/// the system-wide FRR service does not run.
///
/// The lab starts its own daemons per namespace with their own files; a system-wide
/// FRR (which the package's post-install script may start) would read `/etc/frr`, own
/// the default sockets and program the root namespace, so it is stopped and disabled.
/// That is only done when systemd is the init (on machines without it nothing starts
/// the service). Progress goes to stderr, as it can take a minute.
pub fn ensure_frr_installed() -> anyhow::Result<()> {
    crate::require_root()?;
    if !Path::new(FRR_SBIN).join("zebra").exists() {
        eprintln!("installing FRRouting (apt-get install frr)...");
        for args in [&["update", "-q"][..], &["install", "-y", "-q", "--no-install-recommends", "frr"][..]] {
            let out = Command::new("apt-get")
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .stdin(Stdio::null())
                .output()
                .context("running apt-get (is this a Debian machine?)")?;
            if !out.status.success() {
                bail!(
                    "apt-get {} failed ({}): {}",
                    args.join(" "),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        if !Path::new(FRR_SBIN).join("zebra").exists() {
            bail!("apt-get installed frr, but {FRR_SBIN}/zebra is still missing");
        }
        eprintln!("installed FRRouting");
    }
    if Path::new("/run/systemd/system").exists() {
        // Ignore failures: the unit may not exist (FRR from elsewhere) or be stopped.
        let _ = Command::new("systemctl")
            .args(["disable", "--now", "frr.service"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    Ok(())
}

/// One FRR daemon the lab runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Daemon {
    /// The RIB manager; talks to the data plane (FPM) and to the other daemons.
    Zebra,
    /// Static routes and static LSPs (`mpls lsp` is zebra's, but labelled static
    /// routes are staticd's).
    Staticd,
    /// OSPFv2.
    Ospfd,
    /// LDP.
    Ldpd,
}

impl Daemon {
    /// All daemons, in start order (zebra first: the others connect to it).
    pub const ALL: [Daemon; 4] = [Daemon::Zebra, Daemon::Staticd, Daemon::Ospfd, Daemon::Ldpd];

    /// The binary's name (`zebra`, `ospfd`, ...), which also names its files.
    pub fn name(self) -> &'static str {
        match self {
            Daemon::Zebra => "zebra",
            Daemon::Staticd => "staticd",
            Daemon::Ospfd => "ospfd",
            Daemon::Ldpd => "ldpd",
        }
    }
}

/// An interface OSPF runs on (all in area 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OspfInterface {
    /// The interface name in the router's namespace.
    pub name: String,
    /// `ip ospf cost` (default: FRR's, from the reference bandwidth).
    pub cost: Option<u32>,
    /// Advertise the interface's subnet but form no adjacency on it (a customer-facing
    /// link). Non-passive interfaces are `ip ospf network point-to-point`: the lab's
    /// links are veth pairs, so no DR election is needed (faster, and no network LSA).
    pub passive: bool,
}

impl OspfInterface {
    /// A point-to-point core link that forms an adjacency.
    pub fn p2p(name: &str) -> Self {
        Self { name: name.to_string(), cost: None, passive: false }
    }

    /// A passive interface: its subnet is advertised, no hellos are sent.
    pub fn passive(name: &str) -> Self {
        Self { name: name.to_string(), cost: None, passive: true }
    }

    /// The same with `ip ospf cost COST`.
    pub fn with_cost(mut self, cost: u32) -> Self {
        self.cost = Some(cost);
        self
    }
}

/// Protocol timers. [`Timers::fast`] (the default) makes a lab converge in seconds;
/// [`Timers::frr_defaults`] is what FRR uses with no timer configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timers {
    /// `ip ospf hello-interval` in seconds (FRR: 10).
    pub ospf_hello: u32,
    /// `ip ospf dead-interval` in seconds (FRR: 40).
    pub ospf_dead: u32,
    /// `ip ospf retransmit-interval` in seconds (FRR: 5): how long an unacknowledged
    /// LSA or database description waits before it is sent again.
    pub ospf_retransmit: u32,
    /// `timers throttle spf DELAY HOLD MAX` in milliseconds (FRR: 0 50 5000).
    pub spf_throttle: (u32, u32, u32),
    /// `timers throttle lsa all` in milliseconds (FRR: 5000, RFC 2328's MinLSInterval):
    /// the least time between two originations of one LSA. With the default a router
    /// that comes up waits 5 s before its router-LSA lists a new adjacency, twice over
    /// in a line of three, which dominates a lab's convergence.
    pub lsa_throttle_ms: u32,
    /// `timers lsa min-arrival` in milliseconds (FRR: 1000, RFC 2328's MinLSArrival):
    /// newer instances of an LSA arriving faster are dropped, so it must stay below
    /// `lsa_throttle_ms`.
    pub lsa_min_arrival_ms: u32,
    /// LDP `discovery hello interval` in seconds (FRR: 5).
    pub ldp_hello_interval: u32,
    /// LDP `discovery hello holdtime` in seconds (FRR: 15).
    pub ldp_hello_holdtime: u32,
}

impl Timers {
    /// FRR's defaults (no timer lines in the configs).
    pub const fn frr_defaults() -> Self {
        Self {
            ospf_hello: 10,
            ospf_dead: 40,
            ospf_retransmit: 5,
            spf_throttle: (0, 50, 5000),
            lsa_throttle_ms: 5000,
            lsa_min_arrival_ms: 1000,
            ldp_hello_interval: 5,
            ldp_hello_holdtime: 15,
        }
    }

    /// Lab timers: OSPF hellos every second, a neighbour dead after 4 s, retransmits
    /// after 1 s, SPF at once (at most every 500 ms under churn), an LSA originated at
    /// most every 200 ms and accepted every 100 ms, LDP hellos every second held 5 s.
    pub const fn fast() -> Self {
        Self {
            ospf_hello: 1,
            ospf_dead: 4,
            ospf_retransmit: 1,
            spf_throttle: (0, 50, 500),
            lsa_throttle_ms: 200,
            lsa_min_arrival_ms: 100,
            ldp_hello_interval: 1,
            ldp_hello_holdtime: 5,
        }
    }
}

impl Default for Timers {
    fn default() -> Self {
        Self::fast()
    }
}

/// What one FRR router runs. Build it with [`FrrOptions::new`] and set the fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrrOptions {
    /// The hostname in FRR (also the name of the router's directory).
    pub hostname: String,
    /// The router id, also added as a /32 to `lo` (OSPF advertises it; LDP's LSR id
    /// and transport address).
    pub router_id: Ipv4Addr,
    /// Interfaces OSPF runs on; `lo` is always added (passive). Empty: no ospfd.
    pub ospf: Vec<OspfInterface>,
    /// Interfaces LDP runs on, transport address = router id. Empty: no ldpd.
    pub ldp: Vec<String>,
    /// Where zebra sends routes over FPM; `None`: no FPM module.
    pub fpm: Option<SocketAddrV4>,
    /// Our zebra module (`vmpls_zebra.so`), loaded before `dplane_fpm_nl`.
    pub zebra_module: Option<PathBuf>,
    /// Protocol timers.
    pub timers: Timers,
    /// Extra lines for zebra's config (`mpls lsp 100 198.18.10.2 200`, ...).
    pub zebra_extra: String,
    /// Extra lines for staticd's config (`ip route 198.18.2.0/24 198.18.10.2 label 16`).
    pub staticd_extra: String,
    /// Extra lines for ospfd's config, after the `router ospf` block (start with
    /// `router ospf` again to add to it, e.g. `segment-routing on`).
    pub ospfd_extra: String,
    /// Extra lines for ldpd's config.
    pub ldpd_extra: String,
}

impl FrrOptions {
    /// A router with only zebra (FPM to [`DEFAULT_FPM`]) and staticd, fast timers.
    pub fn new(hostname: &str, router_id: Ipv4Addr) -> Self {
        Self {
            hostname: hostname.to_string(),
            router_id,
            ospf: Vec::new(),
            ldp: Vec::new(),
            fpm: Some(DEFAULT_FPM),
            zebra_module: None,
            timers: Timers::fast(),
            zebra_extra: String::new(),
            staticd_extra: String::new(),
            ospfd_extra: String::new(),
            ldpd_extra: String::new(),
        }
    }

    /// The seed lab's router `name` (`pe1`, `p` or `pe2`) in FRR mode: OSPF area 0 on
    /// the core links (point-to-point) and the loopback, the customer-facing subnet
    /// passive in OSPF (so LDP binds a label to it and the other PE pushes one), LDP on
    /// the core links. Interface names and subnets are those of [`crate::seed`];
    /// loopbacks 198.18.255.1, .2, .3.
    pub fn seed(name: &str) -> anyhow::Result<Self> {
        let (id, ospf, ldp): (u8, Vec<OspfInterface>, &[&str]) = match name {
            "pe1" => (1, vec![OspfInterface::p2p("pe1-p"), OspfInterface::passive("pe1-ce1")], &["pe1-p"]),
            "p" => (2, vec![OspfInterface::p2p("p-pe1"), OspfInterface::p2p("p-pe2")], &["p-pe1", "p-pe2"]),
            "pe2" => (3, vec![OspfInterface::p2p("pe2-p"), OspfInterface::passive("pe2-ce2")], &["pe2-p"]),
            _ => bail!("the seed lab has no router {name:?} (pe1, p, pe2)"),
        };
        let mut o = Self::new(name, Ipv4Addr::new(198, 18, 255, id));
        o.ospf = ospf;
        o.ldp = ldp.iter().map(|s| s.to_string()).collect();
        Ok(o)
    }

    /// The daemons these options run.
    pub fn daemons(&self) -> Vec<Daemon> {
        Daemon::ALL
            .into_iter()
            .filter(|d| match d {
                Daemon::Zebra | Daemon::Staticd => true,
                Daemon::Ospfd => !self.ospf.is_empty(),
                Daemon::Ldpd => !self.ldp.is_empty(),
            })
            .collect()
    }

    /// The config file of `daemon`, logging to `DIR/<daemon>.log`.
    pub fn config(&self, daemon: Daemon, dir: &Path) -> String {
        let mut c = String::new();
        let _ = writeln!(c, "! {} for {} (written by vmpls-lab)", daemon.name(), self.hostname);
        let _ = writeln!(c, "frr defaults traditional");
        let _ = writeln!(c, "hostname {}", self.hostname);
        let _ = writeln!(c, "log file {}", dir.join(format!("{}.log", daemon.name())).display());
        let _ = writeln!(c, "log timestamp precision 3");
        let _ = writeln!(c, "!");
        match daemon {
            Daemon::Zebra => self.zebra_config(&mut c),
            Daemon::Staticd => push_extra(&mut c, &self.staticd_extra),
            Daemon::Ospfd => self.ospfd_config(&mut c),
            Daemon::Ldpd => self.ldpd_config(&mut c),
        }
        c
    }

    fn zebra_config(&self, c: &mut String) {
        if let Some(fpm) = self.fpm {
            let _ = writeln!(c, "! routes and LSPs go to vmpls over FPM, each route with its own next hops");
            let _ = writeln!(c, "fpm address {} port {}", fpm.ip(), fpm.port());
            let _ = writeln!(c, "no fpm use-next-hop-groups");
            let _ = writeln!(c, "!");
        }
        push_extra(c, &self.zebra_extra);
    }

    fn ospfd_config(&self, c: &mut String) {
        let t = self.timers;
        let d = Timers::frr_defaults();
        let lo = OspfInterface::passive("lo");
        for i in std::iter::once(&lo).chain(&self.ospf) {
            let _ = writeln!(c, "interface {}", i.name);
            let _ = writeln!(c, " ip ospf area 0");
            if i.passive {
                let _ = writeln!(c, " ip ospf passive");
            } else {
                let _ = writeln!(c, " ip ospf network point-to-point");
                if t.ospf_hello != d.ospf_hello {
                    let _ = writeln!(c, " ip ospf hello-interval {}", t.ospf_hello);
                }
                if t.ospf_dead != d.ospf_dead {
                    let _ = writeln!(c, " ip ospf dead-interval {}", t.ospf_dead);
                }
                if t.ospf_retransmit != d.ospf_retransmit {
                    let _ = writeln!(c, " ip ospf retransmit-interval {}", t.ospf_retransmit);
                }
            }
            if let Some(cost) = i.cost {
                let _ = writeln!(c, " ip ospf cost {cost}");
            }
            let _ = writeln!(c, "exit");
            let _ = writeln!(c, "!");
        }
        let _ = writeln!(c, "router ospf");
        let _ = writeln!(c, " ospf router-id {}", self.router_id);
        if t.spf_throttle != d.spf_throttle {
            let (delay, hold, max) = t.spf_throttle;
            let _ = writeln!(c, " timers throttle spf {delay} {hold} {max}");
        }
        if t.lsa_throttle_ms != d.lsa_throttle_ms {
            let _ = writeln!(c, " timers throttle lsa all {}", t.lsa_throttle_ms);
        }
        if t.lsa_min_arrival_ms != d.lsa_min_arrival_ms {
            let _ = writeln!(c, " timers lsa min-arrival {}", t.lsa_min_arrival_ms);
        }
        let _ = writeln!(c, "exit");
        let _ = writeln!(c, "!");
        push_extra(c, &self.ospfd_extra);
    }

    fn ldpd_config(&self, c: &mut String) {
        let t = self.timers;
        let d = Timers::frr_defaults();
        let _ = writeln!(c, "mpls ldp");
        let _ = writeln!(c, " router-id {}", self.router_id);
        if t.ldp_hello_holdtime != d.ldp_hello_holdtime {
            let _ = writeln!(c, " discovery hello holdtime {}", t.ldp_hello_holdtime);
        }
        if t.ldp_hello_interval != d.ldp_hello_interval {
            let _ = writeln!(c, " discovery hello interval {}", t.ldp_hello_interval);
        }
        let _ = writeln!(c, " !");
        let _ = writeln!(c, " address-family ipv4");
        let _ = writeln!(c, "  discovery transport-address {}", self.router_id);
        let _ = writeln!(c, "  !");
        for i in &self.ldp {
            let _ = writeln!(c, "  interface {i}");
            let _ = writeln!(c, "  exit");
            let _ = writeln!(c, "  !");
        }
        let _ = writeln!(c, " exit-address-family");
        let _ = writeln!(c, " !");
        let _ = writeln!(c, "exit");
        let _ = writeln!(c, "!");
        push_extra(c, &self.ldpd_extra);
    }

    /// The command line of `daemon` (program and arguments) for a router whose files are
    /// in `dir`.
    pub fn command_line(&self, daemon: Daemon, dir: &Path) -> Vec<OsString> {
        let name = daemon.name();
        let mut v: Vec<OsString> = vec![Path::new(FRR_SBIN).join(name).into()];
        let mut arg = |a: &str| v.push(a.into());
        arg("-f");
        arg(&dir.join(format!("{name}.conf")).to_string_lossy());
        arg("-i");
        arg(&dir.join(format!("{name}.pid")).to_string_lossy());
        arg("--vty_socket");
        arg(&dir.to_string_lossy());
        arg("-z");
        arg(&dir.join("zserv.api").to_string_lossy());
        arg("-u");
        arg("root");
        arg("-g");
        arg(VTY_GROUP);
        arg("-P");
        arg("0");
        match daemon {
            Daemon::Zebra => {
                if let Some(m) = &self.zebra_module {
                    arg("-M");
                    arg(&m.to_string_lossy());
                }
                if self.fpm.is_some() {
                    arg("-M");
                    arg("dplane_fpm_nl");
                }
            }
            Daemon::Ldpd => {
                arg("--ctl_socket");
                arg(&dir.to_string_lossy());
            }
            Daemon::Staticd | Daemon::Ospfd => {}
        }
        v
    }
}

fn push_extra(c: &mut String, extra: &str) {
    if !extra.trim().is_empty() {
        c.push_str(extra.trim_end());
        c.push_str("\n!\n");
    }
}

/// What [`FrrRouter::wait_for`] waits for: at least these counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Convergence {
    /// OSPF neighbours in state Full.
    pub ospf_full: usize,
    /// LDP sessions in state OPERATIONAL.
    pub ldp_operational: usize,
    /// Entries of `show mpls table` (only non-zero with the zebra module: without it
    /// zebra's MPLS is off on kernels without MPLS).
    pub mpls_lsps: usize,
}

/// One next hop of an LSP in `show mpls table json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MplsNexthop {
    /// Who installed it (`LDP`, `Static`, `SR (OSPF)`, ...).
    pub kind: String,
    /// The outgoing label stack (`[3]`: implicit null, i.e. penultimate-hop pop).
    pub out_labels: Vec<u32>,
    /// The next hop's address, if it has one.
    pub via: Option<IpAddr>,
    /// The outgoing interface, if zebra's next hop has one (FRR 8.4's LDP next hops
    /// have only the address).
    pub interface: Option<String>,
    /// zebra marked it installed in the data plane.
    pub installed: bool,
}

/// One LSP of `show mpls table json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lsp {
    /// The incoming label.
    pub in_label: u32,
    /// zebra marked it installed in the data plane.
    pub installed: bool,
    /// Its next hops.
    pub nexthops: Vec<MplsNexthop>,
}

/// An LDP label binding (`show mpls ldp binding json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LdpBinding {
    /// The FEC.
    pub prefix: IpPrefix,
    /// The LDP neighbour (LSR id) that sent the remote label.
    pub neighbor: Ipv4Addr,
    /// The label we advertise (`None`: `-`, none; `Some(3)`: implicit null).
    pub local_label: Option<u32>,
    /// The neighbour's label.
    pub remote_label: Option<u32>,
    /// The neighbour is the IGP next hop for the FEC, so its label is used.
    pub in_use: bool,
}

/// One next hop of a route in `show ip route json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteNexthop {
    /// The gateway, if any (none: directly connected).
    pub via: Option<IpAddr>,
    /// The outgoing interface.
    pub interface: Option<String>,
    /// Labels pushed on this next hop.
    pub labels: Vec<u32>,
    /// zebra uses this next hop.
    pub active: bool,
}

/// A route of `show ip route json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpRoute {
    /// The destination.
    pub prefix: IpPrefix,
    /// `connected`, `ospf`, `static`, `kernel`, ...
    pub protocol: String,
    /// The best route for its prefix.
    pub selected: bool,
    /// Installed in the data plane (the kernel, or skipped for FPM by our module).
    pub installed: bool,
    /// Its next hops.
    pub nexthops: Vec<RouteNexthop>,
}

#[derive(Debug)]
struct Running {
    daemon: Daemon,
    child: Supervised,
}

/// An FRR instance (zebra, staticd, ospfd, ldpd as configured) in one network
/// namespace. Dropping it stops the daemons.
///
/// Like [`Topology::spawn`], the daemons are killed (`PR_SET_PDEATHSIG`) if the thread
/// that started them exits: start and restart them from a thread that lives as long as
/// the router.
#[derive(Debug)]
pub struct FrrRouter {
    ns: String,
    dir: PathBuf,
    options: FrrOptions,
    running: Vec<Running>,
}

impl FrrRouter {
    /// Starts FRR for `host` of `topology` (see [`FrrRouter::start_in_ns`]).
    pub fn start(
        topology: &Topology,
        host: &str,
        work_dir: &Path,
        options: FrrOptions,
    ) -> anyhow::Result<Self> {
        Self::start_in_ns(topology.ns(host)?, work_dir, options)
    }

    /// Starts FRR in the network namespace `ns`: adds the router id to `lo` (and sets
    /// `lo` up), writes the configs into `WORK_DIR/<hostname>/`, then starts zebra,
    /// waits for its socket, and starts staticd, ospfd and ldpd (as configured), waiting
    /// for each one's vty socket. On error, whatever was started is stopped.
    pub fn start_in_ns(ns: &str, work_dir: &Path, options: FrrOptions) -> anyhow::Result<Self> {
        if options.hostname.is_empty() || options.hostname.contains(['/', ' ']) {
            bail!("FRR hostname {:?} must be non-empty, without '/' or spaces", options.hostname);
        }
        if !Path::new(FRR_SBIN).join("zebra").exists() {
            bail!("{FRR_SBIN}/zebra is missing: install FRR first (frr::ensure_frr_installed)");
        }
        if let Some(m) = options.zebra_module.as_ref().filter(|m| !m.is_file()) {
            bail!("zebra module {} does not exist (build it with scripts/build-zebra-module)", m.display());
        }
        let dir = work_dir.join(&options.hostname);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let dir = dir.canonicalize().with_context(|| format!("resolving {}", dir.display()))?;
        add_loopback(ns, options.router_id)?;
        for d in options.daemons() {
            let path = dir.join(format!("{}.conf", d.name()));
            fs::write(&path, options.config(d, &dir))
                .with_context(|| format!("writing {}", path.display()))?;
        }
        // vtysh reads vtysh.conf from --config_dir: an empty one keeps /etc/frr's out.
        fs::write(dir.join("vtysh.conf"), "! vtysh for this lab router (written by vmpls-lab)\n")
            .with_context(|| format!("writing {}", dir.join("vtysh.conf").display()))?;
        let mut router = Self { ns: ns.to_string(), dir, options, running: Vec::new() };
        for d in router.options.daemons() {
            router.start_daemon(d)?;
        }
        Ok(router)
    }

    /// The router's options.
    pub fn options(&self) -> &FrrOptions {
        &self.options
    }

    /// The namespace it runs in.
    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// The directory with its configs, logs, pid files and sockets.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of `daemon`'s log file.
    pub fn log_path(&self, daemon: Daemon) -> PathBuf {
        self.dir.join(format!("{}.log", daemon.name()))
    }

    /// The pid of `daemon`, if it runs.
    pub fn pid(&self, daemon: Daemon) -> Option<u32> {
        self.running.iter().find(|r| r.daemon == daemon).map(|r| r.child.id())
    }

    /// Every process of this router: the daemons and their helpers (ldpd forks two),
    /// i.e. all members of the daemons' process groups.
    pub fn pids(&self) -> Vec<u32> {
        let groups: Vec<u32> = self.running.iter().map(|r| r.child.id()).collect();
        let mut pids = group_members(&groups);
        pids.extend(&groups);
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    fn start_daemon(&mut self, daemon: Daemon) -> anyhow::Result<()> {
        let name = daemon.name();
        let argv = self.options.command_line(daemon, &self.dir);
        let out_path = self.dir.join(format!("{name}.out"));
        let out = File::create(&out_path).with_context(|| format!("creating {}", out_path.display()))?;
        let err = out.try_clone()?;
        // Sockets of a previous run would make us believe the daemon is up.
        let socket = match daemon {
            Daemon::Zebra => self.dir.join("zserv.api"),
            _ => self.dir.join(format!("{name}.vty")),
        };
        let _ = fs::remove_file(&socket);
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]).stdin(Stdio::null()).stdout(out).stderr(err).current_dir(&self.dir);
        netns::lab_child_in_netns(&self.ns, &mut cmd)?;
        let child = cmd.spawn().with_context(|| format!("starting {name} in namespace {}", self.ns))?;
        let child =
            Supervised::new(format!("{name} of {}", self.options.hostname), child, SignalTarget::Group);
        self.running.push(Running { daemon, child });
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.running.last_mut().and_then(|r| r.child.try_wait().ok().flatten()) {
                self.running.pop();
                bail!(
                    "{name} of {} exited at start ({status}); {}: {}; {}: {}",
                    self.options.hostname,
                    out_path.display(),
                    Topology::log_tail(&out_path, 10),
                    self.log_path(daemon).display(),
                    Topology::log_tail(&self.log_path(daemon), 10)
                );
            }
            if socket.exists() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{name} of {} did not create {} within {START_TIMEOUT:?}; log: {}",
                    self.options.hostname,
                    socket.display(),
                    Topology::log_tail(&self.log_path(daemon), 10)
                );
            }
            check_interrupt()?;
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The pids of `daemon` and its helpers.
    fn daemon_pids(&self, daemon: Daemon) -> Vec<u32> {
        let Some(leader) = self.pid(daemon) else {
            return Vec::new();
        };
        let mut pids = group_members(&[leader]);
        pids.push(leader);
        pids
    }

    fn stop_daemon(&mut self, daemon: Daemon) -> anyhow::Result<()> {
        let pids = self.daemon_pids(daemon);
        self.stop_daemon_with(daemon, &pids)
    }

    /// Stops `daemon`, then removes the temporary directories of `pids` (its processes,
    /// listed before it was signalled: its helpers may be gone already).
    fn stop_daemon_with(&mut self, daemon: Daemon, pids: &[u32]) -> anyhow::Result<()> {
        let Some(i) = self.running.iter().position(|r| r.daemon == daemon) else {
            return Ok(());
        };
        let mut r = self.running.remove(i);
        let result = stop_group(&mut r.child, STOP_GRACE);
        remove_tmp_dirs(daemon, pids);
        result
    }

    /// Stops every daemon (the routing daemons first, zebra last). Safe to call twice.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        let mut first_err = None;
        let all: Vec<(Daemon, Vec<u32>)> =
            self.running.iter().map(|r| (r.daemon, self.daemon_pids(r.daemon))).collect();
        // Signal all first so they shut down in parallel, then reap in reverse order.
        for r in &self.running {
            r.child.signal(libc::SIGTERM);
        }
        for (d, pids) in all.into_iter().rev() {
            if let Err(e) = self.stop_daemon_with(d, &pids) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Stops zebra and starts it again with the same arguments, as after a zebra crash,
    /// then waits (up to 20 s) until the other daemons are its clients again.
    ///
    /// FRR 8.4's ospfd does not send its routes again when zebra comes back (its
    /// `ospf_zebra_connected` only registers; routes are sent on SPF changes only), so
    /// zebra would stay without OSPF routes. This is why watchfrr restarts every daemon
    /// when zebra dies; here `clear ip ospf process` is enough: ospfd rebuilds its
    /// adjacencies and routing table (a few seconds with [`Timers::fast`]) and installs
    /// every route again. staticd and ldpd resend theirs on their own.
    pub fn restart_zebra(&mut self) -> anyhow::Result<()> {
        self.stop_daemon(Daemon::Zebra)?;
        let started = Instant::now();
        // zebra must be first in the list again: clients are stopped before it.
        let rest = std::mem::take(&mut self.running);
        let result = self.start_daemon(Daemon::Zebra);
        self.running.extend(rest);
        result?;
        let clients: Vec<&str> = self
            .running
            .iter()
            .filter_map(|r| match r.daemon {
                Daemon::Zebra => None,
                Daemon::Staticd => Some("static"),
                Daemon::Ospfd => Some("ospf"),
                Daemon::Ldpd => Some("ldp"),
            })
            .collect();
        let deadline = started + Duration::from_secs(20);
        loop {
            let summary = self.vtysh(&["show zebra client summary"])?;
            let connected: Vec<&str> = summary.lines().filter_map(|l| l.split_whitespace().next()).collect();
            if clients.iter().all(|c| connected.contains(c)) {
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "after restarting zebra of {}, not all of {clients:?} reconnected within 20 s: {summary}",
                    self.options.hostname
                );
            }
            check_interrupt()?;
            std::thread::sleep(Duration::from_millis(200));
        }
        if self.pid(Daemon::Ospfd).is_some() {
            self.vtysh(&["clear ip ospf process"])?;
        }
        Ok(())
    }

    /// Runs `vtysh` against this router with one `-c` per command and returns what it
    /// printed. Configuration works as at the prompt:
    /// `vtysh(&["configure terminal", "mpls lsp 100 198.18.10.2 200"])`. Fails if vtysh
    /// reports an error (exit status) or prints one (`% ...`).
    pub fn vtysh(&self, commands: &[&str]) -> anyhow::Result<String> {
        let mut cmd = Command::new("vtysh");
        cmd.arg("--vty_socket").arg(&self.dir).arg("--config_dir").arg(&self.dir);
        for c in commands {
            cmd.arg("-c").arg(c);
        }
        let out = crate::process::run_timeout(&self.ns, cmd, VTYSH_TIMEOUT)
            .with_context(|| format!("vtysh {commands:?} on {}", self.options.hostname))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let error_line = stdout.lines().chain(stderr.lines()).find(|l| l.trim_start().starts_with('%'));
        if !out.status.success() || error_line.is_some() {
            bail!(
                "vtysh {commands:?} on {} failed ({}): {}{}",
                self.options.hostname,
                out.status,
                stdout.trim(),
                stderr.trim()
            );
        }
        Ok(stdout)
    }

    /// The JSON a `show ... json` command prints.
    pub fn vtysh_json(&self, command: &str) -> anyhow::Result<Value> {
        let text = self.vtysh(&[command])?;
        if text.trim().is_empty() {
            // Some commands print nothing when there is nothing to show.
            return Ok(Value::Object(Default::default()));
        }
        serde_json::from_str(&text).with_context(|| {
            format!("parsing the output of {command:?} on {}: {text}", self.options.hostname)
        })
    }

    /// The number of OSPF neighbours in state Full.
    pub fn ospf_full_neighbors(&self) -> anyhow::Result<usize> {
        parse_ospf_full(&self.vtysh_json("show ip ospf neighbor json")?)
    }

    /// The number of LDP sessions in state OPERATIONAL (`show mpls ldp neighbor json`).
    pub fn ldp_sessions_operational(&self) -> anyhow::Result<usize> {
        parse_ldp_operational(&self.vtysh_json("show mpls ldp neighbor json")?)
    }

    /// LDP's label bindings (`show mpls ldp binding json`).
    pub fn ldp_bindings(&self) -> anyhow::Result<Vec<LdpBinding>> {
        parse_ldp_bindings(&self.vtysh_json("show mpls ldp binding json")?)
    }

    /// zebra's label table (`show mpls table json`), by incoming label.
    pub fn mpls_table(&self) -> anyhow::Result<BTreeMap<u32, Lsp>> {
        parse_mpls_table(&self.vtysh_json("show mpls table json")?)
    }

    /// zebra's IPv4 routes (`show ip route json`), all protocols.
    pub fn ip_routes(&self) -> anyhow::Result<Vec<IpRoute>> {
        parse_ip_routes(&self.vtysh_json("show ip route json")?)
    }

    /// What this router should reach when converged: one OSPF neighbour per
    /// non-passive OSPF interface, one LDP session per LDP interface (the lab's links
    /// are point-to-point and no two lead to the same router), and with the zebra module
    /// at least one LSP when LDP runs.
    pub fn expected(&self) -> Convergence {
        Convergence {
            ospf_full: self.options.ospf.iter().filter(|i| !i.passive && i.name != "lo").count(),
            ldp_operational: self.options.ldp.len(),
            mpls_lsps: usize::from(self.options.zebra_module.is_some() && !self.options.ldp.is_empty()),
        }
    }

    /// Waits until [`FrrRouter::expected`] holds; returns how long it took.
    pub fn wait_converged(&self, timeout: Duration) -> anyhow::Result<Duration> {
        self.wait_for(self.expected(), timeout)
    }

    /// Waits (polling every 100 ms) until the router has at least the counts in
    /// `expect`; returns how long it took, or an error saying what was missing.
    pub fn wait_for(&self, expect: Convergence, timeout: Duration) -> anyhow::Result<Duration> {
        let start = Instant::now();
        loop {
            let now = self.convergence()?;
            if now.ospf_full >= expect.ospf_full
                && now.ldp_operational >= expect.ldp_operational
                && now.mpls_lsps >= expect.mpls_lsps
            {
                return Ok(start.elapsed());
            }
            if start.elapsed() >= timeout {
                bail!(
                    "{} did not converge within {timeout:?}: wanted {expect:?}, has {now:?} (logs in {})",
                    self.options.hostname,
                    self.dir.display()
                );
            }
            self.check_running()?;
            check_interrupt()?;
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The counts [`FrrRouter::wait_for`] compares (only those of running daemons are
    /// queried).
    pub fn convergence(&self) -> anyhow::Result<Convergence> {
        Ok(Convergence {
            ospf_full: if self.pid(Daemon::Ospfd).is_some() { self.ospf_full_neighbors()? } else { 0 },
            ldp_operational: if self.pid(Daemon::Ldpd).is_some() {
                self.ldp_sessions_operational()?
            } else {
                0
            },
            mpls_lsps: self.mpls_table()?.len(),
        })
    }

    /// The lines of the daemons' logs that report a config line they refused ("No such
    /// command", "Config Failed"): FRR logs them and runs on without the line.
    pub fn config_errors(&self) -> Vec<String> {
        self.running
            .iter()
            .filter_map(|r| fs::read_to_string(self.log_path(r.daemon)).ok())
            .flat_map(|log| {
                log.lines()
                    .filter(|l| l.contains("No such command") || l.contains("Config Failed"))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Fails if a daemon has exited, quoting its log. (It stays unreaped, as a zombie,
    /// until the router is stopped, so this takes `&self`.)
    pub fn check_running(&self) -> anyhow::Result<()> {
        for r in &self.running {
            if !process_running(r.child.id()) {
                let log = self.log_path(r.daemon);
                bail!(
                    "{} of {} exited; {}: {}",
                    r.daemon.name(),
                    self.options.hostname,
                    log.display(),
                    Topology::log_tail(&log, 10)
                );
            }
        }
        Ok(())
    }
}

impl Drop for FrrRouter {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!("stopping FRR of {}: {e:#}", self.options.hostname);
        }
    }
}

/// Whether process `pid` exists and is not a zombie.
pub fn process_running(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat_fields(&stat).is_some_and(|(state, _)| state != 'Z'),
        Err(_) => false,
    }
}

/// (state, process group) from a `/proc/PID/stat` line.
fn stat_fields(stat: &str) -> Option<(char, u32)> {
    // "pid (comm) state ppid pgrp ...": comm may contain spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let _ppid = f.next()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// The live processes whose process group is one of `groups`.
fn group_members(groups: &[u32]) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| stat_fields(&s))
                .is_some_and(|(state, pgrp)| state != 'Z' && groups.contains(&pgrp))
        })
        .collect()
}

/// Stops the daemon `child` and its process group (SIGTERM, SIGKILL after `grace`);
/// then waits (briefly) for the rest of its group (ldpd's helpers exit when their
/// parent does).
fn stop_group(child: &mut Supervised, grace: Duration) -> anyhow::Result<()> {
    child.stop(grace)?;
    let group = [child.id()];
    let deadline = Instant::now() + Duration::from_secs(2);
    while !group_members(&group).is_empty() {
        if Instant::now() >= deadline {
            bail!(
                "processes {:?} of group {} still run after its leader exited",
                group_members(&group),
                group[0]
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Removes the per-process directories (`/var/tmp/frr/<daemon>.<pid>`, for crash logs)
/// of the stopped processes `pids`.
///
/// Every FRR daemon creates one at start and removes it at exit, but running as root
/// it has dropped the capability it needs to write into Debian's `/var/tmp/frr`
/// (owned by frr, mode 0700), so the directory stays ("failed to rmdir ...: Permission
/// denied"). Only empty directories are removed: one holding a crash log is kept.
fn remove_tmp_dirs(daemon: Daemon, pids: &[u32]) {
    for pid in pids {
        let _ = fs::remove_dir(Path::new(FRR_TMP_DIR).join(format!("{}.{pid}", daemon.name())));
    }
}

/// Adds `id`/32 to `lo` in `ns` (unless it is there) and sets `lo` up.
fn add_loopback(ns: &str, id: Ipv4Addr) -> anyhow::Result<()> {
    let prefix = IpPrefix::new(IpAddr::V4(id), 32)?;
    nl::session(ns, |h| async move {
        nl::set_up(&h, "lo", true).await?;
        if !nl::addresses(&h, "lo").await?.contains(&prefix) {
            nl::add_address(&h, "lo", prefix).await?;
        }
        Ok(())
    })
    .with_context(|| format!("adding router id {id} to lo in namespace {ns}"))
}

fn label_of(v: &Value) -> Option<u32> {
    match v {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Value::String(s) => match s.as_str() {
            "imp-null" | "implicit-null" => Some(3),
            "exp-null" | "explicit-null" => Some(0),
            s => s.parse().ok(),
        },
        _ => None,
    }
}

fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn truthy(v: &Value, key: &str) -> bool {
    match v.get(key) {
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_u64().is_some_and(|n| n != 0),
        _ => false,
    }
}

fn parse_ospf_full(v: &Value) -> anyhow::Result<usize> {
    let Some(neighbors) = v.get("neighbors") else {
        return Ok(0);
    };
    let neighbors = neighbors.as_object().ok_or_else(|| anyhow!("\"neighbors\" is not an object: {v}"))?;
    // { "neighbors": { "ROUTER-ID": [ { "converged": "Full", "nbrState": "Full/-" } ] } }
    Ok(neighbors
        .values()
        .filter_map(Value::as_array)
        .flatten()
        .filter(|n| {
            str_field(n, "converged") == Some("Full")
                || str_field(n, "nbrState")
                    .or_else(|| str_field(n, "state"))
                    .is_some_and(|s| s.starts_with("Full"))
        })
        .count())
}

fn parse_ldp_operational(v: &Value) -> anyhow::Result<usize> {
    let Some(neighbors) = v.get("neighbors") else {
        return Ok(0);
    };
    let neighbors = neighbors.as_array().ok_or_else(|| anyhow!("\"neighbors\" is not an array: {v}"))?;
    Ok(neighbors.iter().filter(|n| str_field(n, "state") == Some("OPERATIONAL")).count())
}

fn parse_ldp_bindings(v: &Value) -> anyhow::Result<Vec<LdpBinding>> {
    let Some(bindings) = v.get("bindings") else {
        return Ok(Vec::new());
    };
    let bindings = bindings.as_array().ok_or_else(|| anyhow!("\"bindings\" is not an array: {v}"))?;
    bindings
        .iter()
        .map(|b| {
            let prefix = str_field(b, "prefix").ok_or_else(|| anyhow!("binding without prefix: {b}"))?;
            let neighbor =
                str_field(b, "neighborId").ok_or_else(|| anyhow!("binding without neighborId: {b}"))?;
            Ok(LdpBinding {
                prefix: prefix.parse().with_context(|| format!("binding prefix {prefix:?}"))?,
                neighbor: neighbor.parse().with_context(|| format!("binding neighbor {neighbor:?}"))?,
                local_label: b.get("localLabel").and_then(label_of),
                remote_label: b.get("remoteLabel").and_then(label_of),
                in_use: truthy(b, "inUse"),
            })
        })
        .collect()
}

fn parse_mpls_table(v: &Value) -> anyhow::Result<BTreeMap<u32, Lsp>> {
    // { "16": { "inLabel": 16, "installed": true, "nexthops": [ { "type": "LDP",
    //   "outLabel": 17, "outLabelStack": [17], "distance": 150, "installed": true,
    //   "nexthop": "198.18.20.2", "interface": "p-pe2" } ] }, ... }
    let entries: Vec<&Value> = match v {
        Value::Object(m) => m.values().collect(),
        Value::Array(a) => a.iter().collect(),
        _ => bail!("show mpls table json printed neither an object nor an array: {v}"),
    };
    let mut table = BTreeMap::new();
    for e in entries {
        let in_label =
            e.get("inLabel").and_then(label_of).ok_or_else(|| anyhow!("LSP without inLabel: {e}"))?;
        let nexthops = e
            .get("nexthops")
            .and_then(Value::as_array)
            .map(|a| a.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|n| {
                let out_labels = match n.get("outLabelStack").and_then(Value::as_array) {
                    Some(stack) => stack.iter().filter_map(label_of).collect(),
                    None => n.get("outLabel").and_then(label_of).into_iter().collect(),
                };
                MplsNexthop {
                    kind: str_field(n, "type").unwrap_or_default().to_string(),
                    out_labels,
                    via: str_field(n, "nexthop").and_then(|s| s.parse().ok()),
                    interface: str_field(n, "interface").map(str::to_string),
                    installed: truthy(n, "installed"),
                }
            })
            .collect();
        table.insert(in_label, Lsp { in_label, installed: truthy(e, "installed"), nexthops });
    }
    Ok(table)
}

fn parse_ip_routes(v: &Value) -> anyhow::Result<Vec<IpRoute>> {
    let m = v.as_object().ok_or_else(|| anyhow!("show ip route json printed no object: {v}"))?;
    let mut routes = Vec::new();
    for (prefix, list) in m {
        let prefix: IpPrefix = prefix.parse().with_context(|| format!("route prefix {prefix:?}"))?;
        for r in list.as_array().map(|a| a.as_slice()).unwrap_or_default() {
            let nexthops = r
                .get("nexthops")
                .and_then(Value::as_array)
                .map(|a| a.as_slice())
                .unwrap_or_default()
                .iter()
                .map(|n| RouteNexthop {
                    via: str_field(n, "ip").and_then(|s| s.parse().ok()),
                    interface: str_field(n, "interfaceName").map(str::to_string),
                    labels: n
                        .get("labels")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(label_of).collect())
                        .unwrap_or_default(),
                    active: truthy(n, "active"),
                })
                .collect();
            routes.push(IpRoute {
                prefix,
                protocol: str_field(r, "protocol").unwrap_or_default().to_string(),
                selected: truthy(r, "selected"),
                installed: truthy(r, "installed"),
                nexthops,
            });
        }
    }
    Ok(routes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dir the example configs in `examples/frr/` are rendered for.
    const EXAMPLE_DIR: &str = "/run/vmpls-frr";

    /// `VMPLS_BLESS=1 cargo test -p vmpls-lab --lib frr` rewrites the examples.
    #[test]
    fn examples_match_generated_configs() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/frr");
        for router in ["pe1", "p", "pe2"] {
            let o = FrrOptions::seed(router).unwrap();
            let dir = Path::new(EXAMPLE_DIR).join(router);
            for d in [Daemon::Zebra, Daemon::Ospfd, Daemon::Ldpd] {
                let path = root.join(router).join(format!("{}.conf", d.name()));
                if std::env::var_os("VMPLS_BLESS").is_some() {
                    fs::create_dir_all(path.parent().unwrap()).unwrap();
                    fs::write(&path, o.config(d, &dir)).unwrap();
                }
                let file = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert_eq!(
                    file,
                    o.config(d, &dir),
                    "{} differs from FrrOptions::seed({router:?})",
                    path.display()
                );
            }
        }
    }

    #[test]
    fn seed_configs_have_the_lab_settings() {
        let p = FrrOptions::seed("p").unwrap();
        let dir = Path::new("/x/p");
        let ospf = p.config(Daemon::Ospfd, dir);
        assert!(
            ospf.contains("interface p-pe1\n ip ospf area 0\n ip ospf network point-to-point\n"),
            "{ospf}"
        );
        assert!(ospf.contains(" ip ospf hello-interval 1\n ip ospf dead-interval 4\n"), "{ospf}");
        assert!(ospf.contains("interface lo\n ip ospf area 0\n ip ospf passive\n"), "{ospf}");
        assert!(ospf.contains(" ospf router-id 198.18.255.2\n"), "{ospf}");
        let ldp = p.config(Daemon::Ldpd, dir);
        assert!(ldp.contains("  discovery transport-address 198.18.255.2\n"), "{ldp}");
        assert!(ldp.contains("  interface p-pe2\n"), "{ldp}");
        let zebra = p.config(Daemon::Zebra, dir);
        assert!(zebra.contains("fpm address 127.0.0.1 port 2620\nno fpm use-next-hop-groups\n"), "{zebra}");
        assert!(zebra.contains("log file /x/p/zebra.log\n"), "{zebra}");
        let pe1 = FrrOptions::seed("pe1").unwrap();
        assert!(
            pe1.config(Daemon::Ospfd, dir).contains("interface pe1-ce1\n ip ospf area 0\n ip ospf passive\n")
        );
        assert!(FrrOptions::seed("ce1").is_err());
        let mut slow = p.clone();
        slow.timers = Timers::frr_defaults();
        assert!(!slow.config(Daemon::Ospfd, dir).contains("hello-interval"));
        assert!(!slow.config(Daemon::Ldpd, dir).contains("discovery hello"));
    }

    #[test]
    fn command_lines_keep_instances_apart() {
        let mut o = FrrOptions::seed("pe1").unwrap();
        o.zebra_module = Some("/m/vmpls_zebra.so".into());
        let dir = Path::new("/w/pe1");
        let zebra: Vec<String> =
            o.command_line(Daemon::Zebra, dir).iter().map(|s| s.to_string_lossy().into_owned()).collect();
        assert_eq!(
            zebra.join(" "),
            "/usr/lib/frr/zebra -f /w/pe1/zebra.conf -i /w/pe1/zebra.pid --vty_socket /w/pe1 \
             -z /w/pe1/zserv.api -u root -g frrvty -P 0 -M /m/vmpls_zebra.so -M dplane_fpm_nl"
        );
        let ldpd: Vec<String> =
            o.command_line(Daemon::Ldpd, dir).iter().map(|s| s.to_string_lossy().into_owned()).collect();
        assert!(ldpd.join(" ").ends_with("-P 0 --ctl_socket /w/pe1"), "{ldpd:?}");
        assert_eq!(o.daemons(), Daemon::ALL);
        assert_eq!(FrrOptions::new("x", Ipv4Addr::LOCALHOST).daemons(), [Daemon::Zebra, Daemon::Staticd]);
    }

    #[test]
    fn parses_frr_json() {
        let ospf: Value = serde_json::from_str(
            r#"{"neighbors":{"10.255.0.2":[{"state":"Full\/-","nbrState":"Full\/-","converged":"Full"}],
                "10.255.0.3":[{"state":"Init\/-","nbrState":"Init\/-","converged":"Init"}]}}"#,
        )
        .unwrap();
        assert_eq!(parse_ospf_full(&ospf).unwrap(), 1);
        assert_eq!(parse_ospf_full(&serde_json::json!({})).unwrap(), 0);
        let ldp: Value = serde_json::from_str(
            r#"{"neighbors":[{"addressFamily":"ipv4","neighborId":"10.255.0.2","state":"OPERATIONAL",
                "transportAddress":"10.255.0.2","upTime":"00:01:44"}]}"#,
        )
        .unwrap();
        assert_eq!(parse_ldp_operational(&ldp).unwrap(), 1);
        let bindings: Value = serde_json::from_str(
            r#"{"bindings":[{"addressFamily":"ipv4","prefix":"10.77.0.0/24","neighborId":"10.255.0.2",
                "localLabel":"-","remoteLabel":"17","inUse":0},
               {"addressFamily":"ipv4","prefix":"10.255.0.2/32","neighborId":"10.255.0.2",
                "localLabel":"16","remoteLabel":"imp-null","inUse":1}]}"#,
        )
        .unwrap();
        let b = parse_ldp_bindings(&bindings).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].local_label, b[0].remote_label, b[0].in_use), (None, Some(17), false));
        assert_eq!((b[1].local_label, b[1].remote_label, b[1].in_use), (Some(16), Some(3), true));
        let mpls: Value = serde_json::from_str(
            r#"{"16":{"inLabel":16,"installed":true,"nexthops":[{"type":"LDP","outLabel":3,
                "outLabelStack":[3],"distance":150,"installed":true,"nexthop":"198.18.20.2",
                "interface":"p-pe2"}]},
               "17":{"inLabel":17,"nexthops":[{"type":"Static","outLabel":20,"distance":150,
                "nexthop":"198.18.10.1"}]}}"#,
        )
        .unwrap();
        let t = parse_mpls_table(&mpls).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            t[&16].nexthops[0],
            MplsNexthop {
                kind: "LDP".into(),
                out_labels: vec![3],
                via: Some("198.18.20.2".parse().unwrap()),
                interface: Some("p-pe2".into()),
                installed: true,
            }
        );
        assert!(t[&16].installed && !t[&17].installed);
        assert_eq!(t[&17].nexthops[0].out_labels, [20]);
        assert!(parse_mpls_table(&serde_json::json!({})).unwrap().is_empty());
        let routes: Value = serde_json::from_str(
            r#"{"10.255.0.2/32":[{"prefix":"10.255.0.2/32","protocol":"ospf","selected":true,
                "installed":true,"nexthops":[{"ip":"10.9.0.2","interfaceName":"xa-xb","active":true,
                "labels":[16]}]}]}"#,
        )
        .unwrap();
        let r = parse_ip_routes(&routes).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].protocol, "ospf");
        assert!(r[0].selected && r[0].installed);
        assert_eq!(r[0].nexthops[0].labels, [16]);
        assert_eq!(r[0].nexthops[0].via, Some("10.9.0.2".parse().unwrap()));
    }

    #[test]
    fn reads_proc_stat() {
        assert_eq!(stat_fields("42 (ld pd) (x)) S 1 42 42 0"), Some(('S', 42)));
        assert!(process_running(std::process::id()));
    }
}
