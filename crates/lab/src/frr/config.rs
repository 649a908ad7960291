//! What one FRR router runs: the daemons, their options and timers, and the config
//! files and command lines rendered from them.

use super::*;

/// One FRR daemon the lab runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Daemon {
    /// FRR >= 9's management daemon: staticd (and parts of zebra) take their
    /// configuration from it, so it starts first where it exists.
    Mgmtd,
    /// The RIB manager; talks to the data plane (FPM) and to the other daemons.
    Zebra,
    /// Static routes and static LSPs (`mpls lsp` is zebra's, but labelled static
    /// routes are staticd's).
    Staticd,
    /// OSPFv2.
    Ospfd,
    /// LDP.
    Ldpd,
    /// BGP (VPNv4/VPNv6 between PEs, eBGP with CEs).
    Bgpd,
    /// IS-IS (level 2, with segment routing as the transport).
    Isisd,
}

impl Daemon {
    /// All daemons, in start order (mgmtd, then zebra: the others connect to them).
    pub const ALL: [Daemon; 7] = [
        Daemon::Mgmtd,
        Daemon::Zebra,
        Daemon::Staticd,
        Daemon::Ospfd,
        Daemon::Ldpd,
        Daemon::Bgpd,
        Daemon::Isisd,
    ];

    /// The binary's name (`zebra`, `ospfd`, ...), which also names its files.
    pub fn name(self) -> &'static str {
        match self {
            Daemon::Mgmtd => "mgmtd",
            Daemon::Zebra => "zebra",
            Daemon::Staticd => "staticd",
            Daemon::Ospfd => "ospfd",
            Daemon::Ldpd => "ldpd",
            Daemon::Bgpd => "bgpd",
            Daemon::Isisd => "isisd",
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

/// An interface IS-IS runs on (level 2, instance `1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsisInterface {
    /// The interface name in the router's namespace.
    pub name: String,
    /// Advertise the interface's subnet but form no adjacency on it (a customer-facing
    /// link). Non-passive interfaces are `isis network point-to-point` (veth pairs: no
    /// DIS election, no pseudonode).
    pub passive: bool,
}

impl IsisInterface {
    /// A point-to-point core link that forms an adjacency.
    pub fn p2p(name: &str) -> Self {
        Self { name: name.to_string(), passive: false }
    }

    /// A passive interface: its subnet is advertised, no hellos are sent.
    pub fn passive(name: &str) -> Self {
        Self { name: name.to_string(), passive: true }
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
    /// `isis hello-interval` in seconds (FRR: 3).
    pub isis_hello: u32,
    /// `isis hello-multiplier`: hellos missed before the adjacency is down (FRR: 10).
    pub isis_hello_multiplier: u32,
    /// `lsp-gen-interval` in seconds: the least time between two LSPs (FRR: 30).
    pub isis_lsp_gen: u32,
    /// `spf-interval` in seconds (FRR: 1).
    pub isis_spf: u32,
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
            isis_hello: 3,
            isis_hello_multiplier: 10,
            isis_lsp_gen: 30,
            isis_spf: 1,
        }
    }

    /// Lab timers: OSPF hellos every second, a neighbour dead after 4 s, retransmits
    /// after 1 s, SPF at once (at most every 500 ms under churn), an LSA originated at
    /// most every 200 ms and accepted every 100 ms, LDP hellos every second held 5 s,
    /// IS-IS hellos every second (adjacency down after 4 missed), an LSP at most every
    /// second.
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
            isis_hello: 1,
            isis_hello_multiplier: 4,
            isis_lsp_gen: 1,
            isis_spf: 1,
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
    /// Interfaces IS-IS (instance `1`, level 2, wide metrics) runs on; `lo` is always
    /// added (passive). Empty: no isisd.
    pub isis: Vec<IsisInterface>,
    /// Extra lines for isisd's config, after the `router isis 1` block (start with
    /// `router isis 1` again to add to it, e.g. `segment-routing on`).
    pub isisd_extra: String,
    /// bgpd and what it runs; `None`: no bgpd.
    pub bgp: Option<BgpOptions>,
    /// The router's private `/run/netns` (a directory of VRF namespaces): every daemon
    /// runs in a mount namespace with it mounted on `/run/netns`, and zebra takes each
    /// namespace there as a VRF (`--vrfwnetns`: zebra's on FRR 8.4, every daemon's on FRR
    /// 10). `None`: no VRFs, the host's `/run/netns`.
    pub netns_dir: Option<PathBuf>,
    /// A Debian root (`scripts/make-frr-root`, e.g. trixie's FRR 10.3) whose FRR runs
    /// instead of the host's: the daemons and vtysh run chrooted into it, the router's
    /// directory and the zebra module must be inside it. `None`: the host's FRR.
    pub root: Option<PathBuf>,
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
            isis: Vec::new(),
            isisd_extra: String::new(),
            bgp: None,
            netns_dir: None,
            root: None,
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

    /// Where the FRR daemons are, as seen from here (under [`FrrOptions::root`]).
    pub fn sbin(&self) -> PathBuf {
        match &self.root {
            Some(root) => root.join(FRR_SBIN.trim_start_matches('/')),
            None => PathBuf::from(FRR_SBIN),
        }
    }

    /// Whether this FRR has mgmtd (9.0 and later): it then runs first, staticd reads no
    /// config file (`ip route` lines go through vtysh) and each router's daemons share
    /// a pathspace (`-N`) of their own, where mgmtd's sockets are.
    pub fn uses_mgmtd(&self) -> bool {
        self.sbin().join("mgmtd").exists()
    }

    /// `path` as the daemons see it: without the root's prefix.
    ///
    /// # Errors
    /// With a root, `path` is not inside it.
    pub fn path_inside(&self, path: &Path) -> anyhow::Result<PathBuf> {
        let Some(root) = &self.root else {
            return Ok(path.to_path_buf());
        };
        let rest = path
            .strip_prefix(root)
            .with_context(|| format!("{} is not inside the FRR root {}", path.display(), root.display()))?;
        Ok(Path::new("/").join(rest))
    }

    /// The daemons these options run.
    pub fn daemons(&self) -> Vec<Daemon> {
        Daemon::ALL
            .into_iter()
            .filter(|d| match d {
                Daemon::Mgmtd => self.uses_mgmtd(),
                Daemon::Zebra | Daemon::Staticd => true,
                Daemon::Ospfd => !self.ospf.is_empty(),
                Daemon::Ldpd => !self.ldp.is_empty(),
                Daemon::Bgpd => self.bgp.is_some(),
                Daemon::Isisd => !self.isis.is_empty(),
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
            Daemon::Mgmtd => {}
            Daemon::Zebra => self.zebra_config(&mut c),
            Daemon::Staticd => push_extra(&mut c, &self.staticd_extra),
            Daemon::Ospfd => self.ospfd_config(&mut c),
            Daemon::Ldpd => self.ldpd_config(&mut c),
            Daemon::Isisd => self.isisd_config(&mut c),
            Daemon::Bgpd => {
                if let Some(bgp) = &self.bgp {
                    bgp.render(self.router_id, &mut c);
                }
            }
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

    /// The IS-IS NET of the router: area 49.0001, the system id from the router id's
    /// octets written with three digits each (198.18.255.1 -> 1980.1825.5001).
    pub fn isis_net(&self) -> String {
        let digits: String = self.router_id.octets().iter().map(|o| format!("{o:03}")).collect();
        format!("49.0001.{}.{}.{}.00", &digits[0..4], &digits[4..8], &digits[8..12])
    }

    fn isisd_config(&self, c: &mut String) {
        let t = self.timers;
        let d = Timers::frr_defaults();
        // The instance's timers in a configuration transaction before its NET: isisd
        // applies a file's lines in one transaction in the order of its YANG model, so
        // the NET (which originates the first LSP) and `is-type` (which schedules the
        // next one by the LSP generation interval then in force) would come before
        // `lsp-gen-interval`, and the LSP with the router's prefixes and SIDs would wait
        // FRR's 30 s. A command outside the model ends a transaction.
        let _ = writeln!(c, "router isis 1");
        let _ = writeln!(c, " is-type level-2-only");
        let _ = writeln!(c, " metric-style wide");
        if t.isis_lsp_gen != d.isis_lsp_gen {
            let _ = writeln!(c, " lsp-gen-interval {}", t.isis_lsp_gen);
        }
        if t.isis_spf != d.isis_spf {
            let _ = writeln!(c, " spf-interval {}", t.isis_spf);
        }
        let _ = writeln!(c, "exit");
        let _ = writeln!(c, "! (outside the YANG model: applies the lines above first)");
        let _ = writeln!(c, "log timestamp precision 3");
        let _ = writeln!(c, "router isis 1");
        let _ = writeln!(c, " net {}", self.isis_net());
        let _ = writeln!(c, "exit");
        let _ = writeln!(c, "!");
        let lo = IsisInterface::passive("lo");
        for i in std::iter::once(&lo).chain(&self.isis) {
            let _ = writeln!(c, "interface {}", i.name);
            let _ = writeln!(c, " ip router isis 1");
            if i.passive {
                let _ = writeln!(c, " isis passive");
            } else {
                let _ = writeln!(c, " isis network point-to-point");
                if t.isis_hello != d.isis_hello {
                    let _ = writeln!(c, " isis hello-interval {}", t.isis_hello);
                }
                if t.isis_hello_multiplier != d.isis_hello_multiplier {
                    let _ = writeln!(c, " isis hello-multiplier {}", t.isis_hello_multiplier);
                }
            }
            let _ = writeln!(c, "exit");
            let _ = writeln!(c, "!");
        }
        push_extra(c, &self.isisd_extra);
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
    /// in `dir` (as the daemons see it: inside the root, if any).
    ///
    /// With mgmtd, mgmtd and staticd read no `-f` file (mgmtd reads only
    /// `/etc/frr/<daemon>.conf`, staticd refuses `-f`) and log with `--log`; the caller
    /// adds the pathspace (`-N`).
    pub fn command_line(&self, daemon: Daemon, dir: &Path) -> Vec<OsString> {
        let name = daemon.name();
        let mut v: Vec<OsString> = vec![Path::new(FRR_SBIN).join(name).into()];
        let mgmtd_configured = matches!(daemon, Daemon::Mgmtd | Daemon::Staticd) && self.uses_mgmtd();
        let zebra_module =
            self.zebra_module.as_ref().map(|m| self.path_inside(m).unwrap_or_else(|_| m.clone()));
        let mut arg = |a: &str| v.push(a.into());
        if mgmtd_configured {
            arg("--log");
            arg(&format!("file:{}", dir.join(format!("{name}.log")).display()));
        } else {
            arg("-f");
            arg(&dir.join(format!("{name}.conf")).to_string_lossy());
        }
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
        // netns VRFs: FRR 8.4 has the switch in zebra only (the others learn it from
        // zebra); FRR 10 (the FRR with mgmtd here) has it in every daemon, and mgmtd needs
        // it: without it, it names a VRF's interfaces without their VRF and zebra and
        // staticd abort on them (frr/zebra-module/README.md).
        if self.netns_dir.is_some() && (daemon == Daemon::Zebra || self.uses_mgmtd()) {
            arg("--vrfwnetns");
        }
        match daemon {
            Daemon::Zebra => {
                if let Some(m) = &zebra_module {
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
            Daemon::Mgmtd | Daemon::Staticd | Daemon::Ospfd | Daemon::Bgpd | Daemon::Isisd => {}
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
    fn isisd_config_sets_timers_before_the_net() {
        let mut o = FrrOptions::new("p", Ipv4Addr::new(198, 18, 255, 2));
        o.isis = vec![IsisInterface::p2p("p-pe1"), IsisInterface::passive("p-ce")];
        o.isisd_extra = "router isis 1\n segment-routing on\nexit\n".into();
        assert!(o.daemons().contains(&Daemon::Isisd));
        let c = o.config(Daemon::Isisd, Path::new("/x/p"));
        let at = |needle: &str| c.find(needle).unwrap_or_else(|| panic!("{needle:?} missing:\n{c}"));
        assert_eq!(o.isis_net(), "49.0001.1980.1825.5002.00");
        // timers, then a non-YANG line (ends the transaction), then the NET
        assert!(at(" lsp-gen-interval 1\n") < at("\nlog timestamp precision 3\nrouter isis 1\n net "), "{c}");
        assert!(
            at(" net 49.0001.1980.1825.5002.00\n") < at("interface lo\n ip router isis 1\n isis passive\n")
        );
        assert!(c.contains(
            "interface p-pe1\n ip router isis 1\n isis network point-to-point\n isis hello-interval 1\n \
             isis hello-multiplier 4\nexit\n"
        ));
        assert!(c.contains("interface p-ce\n ip router isis 1\n isis passive\nexit\n"), "{c}");
        assert!(c.ends_with("router isis 1\n segment-routing on\nexit\n!\n"), "{c}");
        let mut slow = o.clone();
        slow.timers = Timers::frr_defaults();
        let c = slow.config(Daemon::Isisd, Path::new("/x/p"));
        assert!(!c.contains("lsp-gen-interval") && !c.contains("hello-interval"), "{c}");
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
        // netns VRFs: zebra gets the switch; the others only where FRR has mgmtd (FRR 10)
        o.netns_dir = Some("/w/pe1-netns".into());
        let netns = |d| o.command_line(d, dir).iter().any(|a| a == "--vrfwnetns");
        assert!(netns(Daemon::Zebra));
        assert_eq!(netns(Daemon::Ldpd), o.uses_mgmtd());
        o.netns_dir = None;
        // (an FRR with mgmtd on the host runs it too)
        let mgmtd = usize::from(!o.uses_mgmtd());
        assert_eq!(o.daemons(), Daemon::ALL[mgmtd..Daemon::ALL.len() - 2], "all but bgpd and isisd");
        let x = FrrOptions::new("x", Ipv4Addr::LOCALHOST);
        assert_eq!(x.daemons(), [Daemon::Mgmtd, Daemon::Zebra, Daemon::Staticd][mgmtd..]);
    }

    #[test]
    fn an_frr_root_with_mgmtd_gets_paths_inside_and_staticd_without_a_file() {
        let root = std::env::temp_dir().join(format!("vmpls-lab-frr-root-{}", std::process::id()));
        let sbin = root.join("usr/lib/frr");
        fs::create_dir_all(&sbin).unwrap();
        fs::write(sbin.join("mgmtd"), "").unwrap();
        let mut o = FrrOptions::seed("p").unwrap();
        o.root = Some(root.clone());
        o.zebra_module = Some(root.join("var/cache/m.so"));
        assert!(o.uses_mgmtd());
        assert_eq!(o.daemons()[..2], [Daemon::Mgmtd, Daemon::Zebra]);
        let inside = o.path_inside(&root.join("run/vmpls/p")).unwrap();
        assert_eq!(inside, Path::new("/run/vmpls/p"));
        assert!(o.path_inside(Path::new("/tmp/elsewhere")).is_err());
        let line = |d| {
            o.command_line(d, &inside)
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert!(line(Daemon::Zebra).contains(" -f /run/vmpls/p/zebra.conf "), "{}", line(Daemon::Zebra));
        assert!(
            line(Daemon::Zebra).contains(" -M /var/cache/m.so -M dplane_fpm_nl"),
            "{}",
            line(Daemon::Zebra)
        );
        for d in [Daemon::Staticd, Daemon::Mgmtd] {
            let l = line(d);
            assert!(!l.contains(" -f "), "{l}");
            assert!(l.contains(&format!(" --log file:/run/vmpls/p/{}.log ", d.name())), "{l}");
        }
        // netns VRFs on an FRR with mgmtd: every daemon gets the switch
        assert!(!line(Daemon::Mgmtd).contains("--vrfwnetns"));
        o.netns_dir = Some("/run/vmpls/p-netns".into());
        let line = |d| o.command_line(d, &inside).iter().any(|a| a == "--vrfwnetns");
        for d in [Daemon::Mgmtd, Daemon::Zebra, Daemon::Staticd, Daemon::Ospfd, Daemon::Bgpd] {
            assert!(line(d), "{} without --vrfwnetns", d.name());
        }
        fs::remove_dir_all(&root).unwrap();
    }
}
