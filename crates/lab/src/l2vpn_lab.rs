//! The L2VPN lab: Ethernet pseudowires (RFC 4448 with the RFC 4385 control word) signalled
//! by an unmodified FRR ldpd (RFC 4447/8077) and carried by vmpls in FRR mode, over the
//! FRR seed core with a third PE: a point-to-point VPWS between two sites and a
//! three-site VPLS (RFC 4762), the CE hosts of each in one IP subnet across the core.
//!
//! ```text
//!   ce1 ──┐                                        ┌── ce2     VPWS `vpws`, pw-id 100
//!  vce1 ──┴ pe1 [255.1] ── p [255.2] ── pe2 [255.3] ┴── vce2    VPLS `blue` (ldpd BLUE)
//!                          │
//!                          └── pe3 [255.4] ── vce3
//! ```
//!
//! - Core: OSPF and LDP on the core links (198.18.10.0/24 pe1-p, 198.18.20.0/24 p-pe2,
//!   198.18.30.0/24 p-pe3; MTU 65535, so a CE's super-frame crosses whole), loopbacks
//!   198.18.255.1-4 (the LSR ids the pseudowires are signalled to).
//! - VPWS: ce1 (198.18.50.1/24) at pe1, ce2 (198.18.50.2/24) at pe2. ldpd on each PE: a
//!   one-member `l2vpn VPWS type vpls` (member interface the CE port, member pseudowire
//!   `vpws` to the other PE, pw-id 100); vmpls: a `[[pseudowire]]` `vpws` without
//!   labels or peer.
//! - VPLS: vce1, vce2, vce3 (198.18.60.1-3/24), one per PE. ldpd: `l2vpn BLUE type vpls`
//!   with the CE port and a member pseudowire `bl-peN` to each other PE (a full mesh,
//!   pw-ids 12, 13, 23); vmpls: `[[vpls]]` `blue` with a `[[vpls.pseudowire]]` of each
//!   member's name, without labels.
//! - The PEs' CE ports have no addresses (raw Ethernet mode, promiscuous); vmpls starts
//!   before FRR, making the interfaces standing for the pseudowires that ldpd's config
//!   names.
//! - Kernel IP baseline: the VPN lab's line k-ce1 -- k-pe1 -- k-p -- k-pe2 -- k-ce2 with
//!   the same MTUs, routed by the kernel
//!   ([`crate::vpn_lab::build_kernel_baseline`]).
//!
//! # What the lab checks
//! [`run_l2vpn_lab`] waits until FRR has converged (LDP sessions, every pseudowire end
//! up in `show l2vpn atom vc`) and vmpls has every pseudowire up with the labels ldpd
//! signalled (`show l2vpn atom binding`); then ARP and ping across the VPWS and between
//! every pair of VPLS sites (each CE's ARP table holds the far CE's own MAC), the FDB of
//! `blue` at every PE (each CE's MAC on its attachment circuit or on the pseudowire to
//! its PE), and a content-checked TCP flow through the VPWS and through the VPLS beside
//! the same flow through the kernel-routed line (`kernel-ip`).
//!
//! [`L2vpnLab`] is the building block, also used by the integration test.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;
use vmpls_control::api;

use crate::frr::{FrrOptions, FrrRouter, OspfInterface};
use crate::report::{self, JsonDetail, ModeRow};
use crate::routers::{LogMode, RouterSet};
use crate::seed::ModeResult;
use crate::topology::{HostOptions, Topology};
use crate::traffic::{FlowOptions, FlowResult, Limit, run_flow};
use crate::vpn_lab::{KERNEL_BASELINE_DST, KERNEL_BASELINE_ENDS, flow_problem};
use crate::{IpPrefix, check_interrupt, interrupted, is_interrupted, require_root};

/// MTU of the customer links (ldpd's default l2vpn MTU, which both ends must signal).
const CUSTOMER_MTU: u32 = 1500;
/// MTU of the core links: super-frames cross them whole (as in the seed lab).
const CORE_MTU: u32 = 65535;

/// A router of the core: (name, last byte of its loopback, core interfaces with their
/// addresses).
type CoreDef = (&'static str, u8, &'static [(&'static str, &'static str)]);

/// The core routers.
const CORE: [CoreDef; 4] = [
    ("pe1", 1, &[("pe1-p", "198.18.10.1/24")]),
    ("p", 2, &[("p-pe1", "198.18.10.2/24"), ("p-pe2", "198.18.20.1/24"), ("p-pe3", "198.18.30.1/24")]),
    ("pe2", 3, &[("pe2-p", "198.18.20.2/24")]),
    ("pe3", 4, &[("pe3-p", "198.18.30.2/24")]),
];

/// The core links: (host a, interface a, host b, interface b).
const CORE_LINKS: [(&str, &str, &str, &str); 3] =
    [("pe1", "pe1-p", "p", "p-pe1"), ("p", "p-pe2", "pe2", "pe2-p"), ("p", "p-pe3", "pe3", "pe3-p")];

/// The routers (vmpls and FRR run on each).
pub const ROUTER_NAMES: [&str; 4] = ["pe1", "p", "pe2", "pe3"];

/// The provider edges, in VPLS order (pw-ids and member names follow it).
pub const PE_NAMES: [&str; 3] = ["pe1", "pe2", "pe3"];

/// The point-to-point pseudowire's name (ldpd's `member pseudowire`, vmpls's
/// `[[pseudowire]]`) on both PEs, its l2vpn and its pw-id.
pub const VPWS_PW: &str = "vpws";
/// ldpd's l2vpn of the VPWS (a one-member VPLS in ldpd's terms).
pub const VPWS_L2VPN: &str = "VPWS";
/// The VPWS's pw-id.
pub const VPWS_PW_ID: u32 = 100;
/// vmpls's VPLS instance.
pub const VPLS: &str = "blue";
/// ldpd's l2vpn of the VPLS.
pub const VPLS_L2VPN: &str = "BLUE";

/// Which service a site is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// The point-to-point pseudowire.
    Vpws,
    /// VPLS `blue`.
    Vpls,
}

/// A customer site: a CE host on one PE.
#[derive(Debug)]
pub struct Site {
    /// The CE host.
    pub host: &'static str,
    /// Its PE.
    pub pe: &'static str,
    /// The CE's interface.
    pub ce_if: &'static str,
    /// The PE's interface: the attachment circuit (a vmpls port of the same name).
    pub pe_if: &'static str,
    /// The CE's address.
    pub addr: &'static str,
    /// The service.
    pub service: Service,
}

/// The sites: two on the VPWS, one per PE on the VPLS.
pub const SITES: [Site; 5] = [
    Site {
        host: "ce1",
        pe: "pe1",
        ce_if: "ce1-pe1",
        pe_if: "pe1-ce1",
        addr: "198.18.50.1/24",
        service: Service::Vpws,
    },
    Site {
        host: "ce2",
        pe: "pe2",
        ce_if: "ce2-pe2",
        pe_if: "pe2-ce2",
        addr: "198.18.50.2/24",
        service: Service::Vpws,
    },
    Site {
        host: "vce1",
        pe: "pe1",
        ce_if: "vce1-pe1",
        pe_if: "pe1-vce1",
        addr: "198.18.60.1/24",
        service: Service::Vpls,
    },
    Site {
        host: "vce2",
        pe: "pe2",
        ce_if: "vce2-pe2",
        pe_if: "pe2-vce2",
        addr: "198.18.60.2/24",
        service: Service::Vpls,
    },
    Site {
        host: "vce3",
        pe: "pe3",
        ce_if: "vce3-pe3",
        pe_if: "pe3-vce3",
        addr: "198.18.60.3/24",
        service: Service::Vpls,
    },
];

fn prefix(s: &str) -> IpPrefix {
    s.parse().unwrap_or_else(|e| panic!("bad lab prefix {s:?}: {e}"))
}

fn core(name: &str) -> anyhow::Result<&'static CoreDef> {
    CORE.iter().find(|c| c.0 == name).ok_or_else(|| anyhow!("the L2VPN lab has no router {name:?}"))
}

/// The site of host `host`.
pub fn site(host: &str) -> anyhow::Result<&'static Site> {
    SITES.iter().find(|s| s.host == host).ok_or_else(|| anyhow!("the L2VPN lab has no site {host:?}"))
}

/// The address of CE `host`.
pub fn ce_addr(host: &str) -> anyhow::Result<IpAddr> {
    Ok(prefix(site(host)?.addr).addr())
}

/// Router `name`'s loopback, its LSR id.
pub fn loopback(name: &str) -> anyhow::Result<Ipv4Addr> {
    Ok(Ipv4Addr::new(198, 18, 255, core(name)?.1))
}

/// One end of a pseudowire: what ldpd and vmpls on `pe` call it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PwEnd {
    /// The PE.
    pub pe: &'static str,
    /// ldpd's `member pseudowire` name, vmpls's pseudowire name.
    pub name: String,
    /// ldpd's l2vpn.
    pub l2vpn: &'static str,
    /// The far PE's LSR id.
    pub peer: Ipv4Addr,
    /// The pw-id (the same at both ends).
    pub pw_id: u32,
}

/// Every pseudowire end of the lab: the VPWS's two, then the VPLS mesh's six (PE `i`'s
/// member toward PE `j` is `bl-peJ`, pw-id `10 * min + max` of their numbers).
pub fn pseudowire_ends() -> Vec<PwEnd> {
    let mut v = Vec::new();
    for (pe, far) in [("pe1", "pe2"), ("pe2", "pe1")] {
        v.push(PwEnd {
            pe,
            name: VPWS_PW.into(),
            l2vpn: VPWS_L2VPN,
            peer: loopback(far).unwrap_or(Ipv4Addr::UNSPECIFIED),
            pw_id: VPWS_PW_ID,
        });
    }
    for (i, pe) in PE_NAMES.iter().enumerate() {
        for (j, far) in PE_NAMES.iter().enumerate().filter(|(j, _)| *j != i) {
            let (a, b) = (i.min(j) as u32 + 1, i.max(j) as u32 + 1);
            v.push(PwEnd {
                pe,
                name: format!("bl-{far}"),
                l2vpn: VPLS_L2VPN,
                peer: loopback(far).unwrap_or(Ipv4Addr::UNSPECIFIED),
                pw_id: 10 * a + b,
            });
        }
    }
    v
}

/// ldpd's l2vpn blocks of `pe` (empty for p).
pub fn ldpd_l2vpn_config(pe: &str) -> String {
    let mut c = String::new();
    for (l2vpn, service) in [(VPWS_L2VPN, Service::Vpws), (VPLS_L2VPN, Service::Vpls)] {
        let members: Vec<PwEnd> =
            pseudowire_ends().into_iter().filter(|e| e.pe == pe && e.l2vpn == l2vpn).collect();
        if members.is_empty() {
            continue;
        }
        let _ = writeln!(c, "l2vpn {l2vpn} type vpls");
        for s in SITES.iter().filter(|s| s.pe == pe && s.service == service) {
            let _ = writeln!(c, " member interface {}", s.pe_if);
        }
        for m in members {
            let _ = writeln!(
                c,
                " member pseudowire {}\n  neighbor lsr-id {}\n  pw-id {}\n exit",
                m.name, m.peer, m.pw_id
            );
        }
        let _ = writeln!(c, "exit\n!");
    }
    c
}

/// FRR's options for `router`: OSPF and LDP on its core links, the l2vpns in ldpd.
pub fn frr_options(router: &str) -> anyhow::Result<FrrOptions> {
    let (name, _, ports) = core(router)?;
    let mut o = FrrOptions::new(name, loopback(name)?);
    o.ospf = ports.iter().map(|p| OspfInterface::p2p(p.0)).collect();
    o.ldp = ports.iter().map(|p| p.0.to_string()).collect();
    o.ldpd_extra = ldpd_l2vpn_config(name);
    Ok(o)
}

/// The vmpls config of `router` in FRR mode: its core ports and attachment circuits
/// (no addresses: the kernel has those of the core, the CE ports have none), the VPWS's
/// `[[pseudowire]]` and VPLS `blue` with a `[[vpls.pseudowire]]` per ldpd member, none
/// with labels (ldpd signals them).
pub fn vmpls_config(router: &str, socket: &Path, fast_path: bool) -> anyhow::Result<String> {
    let (_, _, ports) = core(router)?;
    let mut s = String::new();
    let _ = writeln!(s, "# {router} in FRR mode: generated by the L2VPN lab.\n");
    let _ = writeln!(s, "[router]\nname = \"{router}\"");
    let _ = writeln!(s, "control-socket = \"{}\"", socket.display());
    let _ = writeln!(s, "fast-path = \"{}\"", if fast_path { "tc" } else { "off" });
    let _ = writeln!(s, "\n[frr]\nfpm = \"127.0.0.1:2620\"");
    let sites: Vec<&Site> = SITES.iter().filter(|s| s.pe == router).collect();
    for ifname in ports.iter().map(|p| p.0).chain(sites.iter().map(|s| s.pe_if)) {
        let _ = writeln!(s, "\n[[port]]\nname = \"{ifname}\"\ninterface = \"{ifname}\"");
    }
    let ends = pseudowire_ends();
    for site in sites.iter().filter(|s| s.service == Service::Vpws) {
        for e in ends.iter().filter(|e| e.pe == router && e.l2vpn == VPWS_L2VPN) {
            let _ = writeln!(
                s,
                "\n[[pseudowire]]\nname = \"{}\"          # ldpd's member pseudowire (to {}, pw-id {})\nattachment = \"{}\"",
                e.name, e.peer, e.pw_id, site.pe_if
            );
        }
    }
    let vpls: Vec<String> =
        sites.iter().filter(|s| s.service == Service::Vpls).map(|s| format!("\"{}\"", s.pe_if)).collect();
    if !vpls.is_empty() {
        let _ = writeln!(s, "\n[[vpls]]\nname = \"{VPLS}\"\nattachments = [{}]", vpls.join(", "));
        for e in ends.iter().filter(|e| e.pe == router && e.l2vpn == VPLS_L2VPN) {
            let _ = writeln!(
                s,
                "\n[[vpls.pseudowire]]\nname = \"{}\"        # ldpd's member pseudowire (to {}, pw-id {})",
                e.name, e.peer, e.pw_id
            );
        }
    }
    Ok(s)
}

/// The L2VPN topology with FRR and vmpls on pe1, p, pe2, pe3, the CE hosts and the
/// kernel-routed baseline line. Dropping it stops everything and removes the
/// namespaces.
#[derive(Debug)]
pub struct L2vpnLab {
    // Field order is drop order: FRR before the namespaces.
    frr: Vec<FrrRouter>,
    topo: Topology,
    vmpls: RouterSet,
    vmpls_bin: PathBuf,
    work_dir: PathBuf,
}

impl L2vpnLab {
    /// Builds the namespaces, links and addresses (the CEs' only; the PEs' CE ports have
    /// none) and the kernel-routed baseline line; kernel forwarding off on the routers.
    /// No daemon runs yet. Configs and logs go to `work_dir`.
    pub fn build(vmpls_bin: &Path, work_dir: &Path) -> anyhow::Result<Self> {
        require_root()?;
        let mut lab = Self {
            frr: Vec::new(),
            topo: Topology::new(),
            vmpls: RouterSet::new(),
            vmpls_bin: vmpls_bin.to_path_buf(),
            work_dir: work_dir.to_path_buf(),
        };
        let topo = &mut lab.topo;
        // No IPv6: the FDB and the pseudowires' counters hold the lab's frames only.
        for name in ROUTER_NAMES.into_iter().chain(SITES.iter().map(|s| s.host)) {
            topo.add_host_with(name, HostOptions { ipv6: false })?;
        }
        for name in ROUTER_NAMES {
            topo.set_forwarding(name, false)?;
        }
        for (a, a_if, b, b_if) in CORE_LINKS {
            topo.add_link(a, a_if, b, b_if, CORE_MTU)?;
        }
        for (name, _, ports) in &CORE {
            for (ifname, addr) in *ports {
                topo.add_address(name, ifname, prefix(addr))?;
            }
        }
        for s in &SITES {
            topo.add_link(s.host, s.ce_if, s.pe, s.pe_if, CUSTOMER_MTU)?;
            topo.add_address(s.host, s.ce_if, prefix(s.addr))?;
        }
        crate::vpn_lab::build_kernel_baseline(topo)?;
        Ok(lab)
    }

    /// The topology (namespaces: [`Topology::ns`]).
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    fn socket_path(&self, router: &str) -> PathBuf {
        self.work_dir.join(format!("{router}.sock"))
    }

    /// Starts one `vmpls run` in FRR mode per router and waits for their control
    /// sockets. Start it before FRR: it makes the interfaces standing for the
    /// pseudowires that ldpd's config names.
    pub fn start_vmpls(&mut self, fast_path: bool) -> anyhow::Result<()> {
        self.stop_vmpls()?;
        for name in ROUTER_NAMES {
            let config = self.work_dir.join(format!("{name}.toml"));
            std::fs::write(&config, vmpls_config(name, &self.socket_path(name), fast_path)?)
                .with_context(|| format!("writing {}", config.display()))?;
            let log = self.work_dir.join(format!("{name}.vmpls.log"));
            let cmd = RouterSet::command(&self.vmpls_bin, &config);
            let socket = Some(self.socket_path(name));
            self.vmpls.start(&mut self.topo, name, cmd, log, LogMode::Append, socket)?;
        }
        self.vmpls.wait_answering(&mut self.topo, Duration::from_secs(15))
    }

    /// Stops the vmpls routers (if any run).
    pub fn stop_vmpls(&mut self) -> anyhow::Result<()> {
        self.vmpls.stop(&mut self.topo, Duration::from_secs(3)).map(drop)
    }

    /// Starts FRR (zebra with `zebra_module`, ospfd, ldpd) on every router.
    pub fn start_frr(&mut self, zebra_module: &Path) -> anyhow::Result<()> {
        for name in ROUTER_NAMES {
            let mut o = frr_options(name)?;
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

    /// Fails if a vmpls router (or another child of the topology) or an FRR daemon has
    /// exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        self.vmpls.check_running(&mut self.topo)?;
        for r in &self.frr {
            r.check_running()?;
        }
        Ok(())
    }

    /// The last `lines` lines of each running vmpls router's log.
    pub fn vmpls_logs(&self, lines: usize) -> String {
        self.vmpls.logs(lines)
    }

    /// Runs the vmpls CLI against `router` with `-j` and returns its JSON.
    pub fn vmpls_cli(&self, router: &str, args: &[&str]) -> anyhow::Result<Value> {
        self.vmpls.cli_json(&self.vmpls_bin, router, args)
    }

    fn vmpls_typed<T: for<'de> serde::Deserialize<'de>>(
        &self,
        router: &str,
        args: &[&str],
    ) -> anyhow::Result<T> {
        let v = self.vmpls_cli(router, args)?;
        T::deserialize(&v).with_context(|| format!("vmpls -j {args:?} on {router}: {v}"))
    }

    /// Every pseudowire end as FRR and vmpls see it now.
    pub fn pseudowires(&self) -> anyhow::Result<Vec<PwResult>> {
        let mut out = Vec::new();
        for pe in PE_NAMES {
            let frr = self.frr(pe)?;
            let vc = frr.vtysh_json("show l2vpn atom vc json")?;
            let bindings = frr.vtysh_json("show l2vpn atom binding json")?;
            let vmpls: Option<Vec<api::PwStatus>> =
                if self.vmpls.is_empty() { None } else { self.vmpls_typed(pe, &["pw", "show"]).ok() };
            for e in pseudowire_ends().into_iter().filter(|e| e.pe == pe) {
                let binding = bindings.as_object().and_then(|o| {
                    o.values().find(|b| {
                        b["destination"].as_str() == Some(&e.peer.to_string())
                            && b["vcId"].as_u64() == Some(u64::from(e.pw_id))
                    })
                });
                let label =
                    |key: &str| binding.and_then(|b| b[key].as_u64()).and_then(|l| u32::try_from(l).ok());
                let vm = vmpls.as_ref().and_then(|v| v.iter().find(|p| p.name == e.name));
                out.push(PwResult {
                    status_frr: vc[&e.name]["status"].as_str().unwrap_or("absent").to_string(),
                    status_vmpls: match vm {
                        None => "absent".into(),
                        Some(p) if p.up => "up".into(),
                        Some(p) => format!("down ({})", p.reason.as_deref().unwrap_or("no reason")),
                    },
                    local_label: label("localLabel"),
                    remote_label: label("remoteLabel"),
                    vmpls_local_label: vm.and_then(|p| p.spec.as_ref()).map(|s| s.local_label),
                    vmpls_remote_label: vm.and_then(|p| p.spec.as_ref()).map(|s| s.remote_label),
                    end: e,
                });
            }
        }
        Ok(out)
    }

    /// What FRR still lacks to be converged (empty: converged): LDP sessions on every
    /// router, then every pseudowire end up in `show l2vpn atom vc`.
    pub fn frr_missing(&self) -> anyhow::Result<Vec<String>> {
        let mut missing = Vec::new();
        for r in &self.frr {
            let (want, up) = (r.expected().ldp_operational, r.ldp_sessions_operational()?);
            if up < want {
                missing.push(format!("{}: {up} of {want} LDP sessions up", r.options().hostname));
            }
        }
        if !missing.is_empty() {
            return Ok(missing);
        }
        for p in self.pseudowires()? {
            if p.status_frr != "up" {
                missing.push(format!("{}: pseudowire {} is {} in FRR", p.end.pe, p.end.name, p.status_frr));
            }
        }
        Ok(missing)
    }

    /// How vmpls's pseudowires differ from ldpd's (empty: every end up in both, with
    /// ldpd's labels).
    pub fn vmpls_differences(&self) -> anyhow::Result<Vec<String>> {
        Ok(self
            .pseudowires()?
            .iter()
            .filter(|p| !p.agrees())
            .map(|p| {
                format!(
                    "{} {}: FRR {} labels {:?}/{:?}, vmpls {} labels {:?}/{:?}",
                    p.end.pe,
                    p.end.name,
                    p.status_frr,
                    p.local_label,
                    p.remote_label,
                    p.status_vmpls,
                    p.vmpls_local_label,
                    p.vmpls_remote_label
                )
            })
            .collect())
    }

    /// Polls `missing` every 200 ms until it is empty (returns how long it took) or
    /// `timeout` passed (fails with what is still missing).
    pub fn wait_until(
        &mut self,
        timeout: Duration,
        what: &str,
        mut missing: impl FnMut(&Self) -> anyhow::Result<Vec<String>>,
    ) -> anyhow::Result<Duration> {
        let start = Instant::now();
        loop {
            match missing(self) {
                Ok(m) if m.is_empty() => return Ok(start.elapsed()),
                Ok(m) if start.elapsed() >= timeout => {
                    bail!("{what} after {timeout:?}:\n  {}\n{}", m.join("\n  "), self.vmpls_logs(10))
                }
                Err(e) if start.elapsed() >= timeout => {
                    return Err(e.context(format!("{what} after {timeout:?}")));
                }
                _ => {}
            }
            self.check_running()?;
            check_interrupt()?;
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until `from` gets an echo reply from `to`, then checks 3 of 3 replies.
    pub fn check_ping(&mut self, from: &str, to: IpAddr, timeout: Duration) -> anyhow::Result<()> {
        let ns = self.topo.ns(from)?.to_string();
        crate::ping::ping_until_answered(&ns, to, timeout, &mut || self.check_running())
            .with_context(|| format!("ping {from} -> {to}"))
    }

    /// The MAC address of CE `host`'s interface toward its PE.
    pub fn ce_mac(&self, host: &str) -> anyhow::Result<String> {
        let s = site(host)?;
        let mut cmd = std::process::Command::new("ip");
        cmd.args(["-j", "link", "show", "dev", s.ce_if]);
        let out = self.topo.run(host, cmd)?;
        let v: Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "ip -j link show dev {} on {host}: {}",
                s.ce_if,
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })?;
        v[0]["address"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("{host}: {} has no MAC: {v}", s.ce_if))
    }

    /// The MAC `from`'s ARP table holds for `to`'s address, if any.
    pub fn arp_entry(&self, from: &str, to: &str) -> anyhow::Result<Option<String>> {
        let mut cmd = std::process::Command::new("ip");
        cmd.args(["-j", "neigh", "show", &ce_addr(to)?.to_string(), "dev", site(from)?.ce_if]);
        let out = self.topo.run(from, cmd)?;
        let v: Value = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("ip -j neigh on {from}: {}", String::from_utf8_lossy(&out.stdout)))?;
        Ok(v.as_array().and_then(|a| a.first()).and_then(|n| n["lladdr"].as_str()).map(str::to_string))
    }

    /// Checks that `from` reached `to` by ARP across the core: its ARP table holds `to`'s
    /// own MAC (what ping resolved).
    pub fn check_arp(&self, from: &str, to: &str) -> anyhow::Result<()> {
        let want = self.ce_mac(to)?;
        match self.arp_entry(from, to)? {
            Some(mac) if mac == want => Ok(()),
            other => bail!("{from}'s ARP entry for {} is {other:?}, {to}'s MAC is {want}", ce_addr(to)?),
        }
    }

    /// VPLS `blue`'s FDB at every PE (`vmpls -j bridge fdb show vpls blue`).
    pub fn fdb(&self) -> anyhow::Result<Vec<(String, api::FdbEntry)>> {
        let mut v = Vec::new();
        for pe in PE_NAMES {
            let entries: Vec<api::FdbEntry> =
                self.vmpls_typed(pe, &["bridge", "fdb", "show", "vpls", VPLS])?;
            v.extend(entries.into_iter().map(|e| (pe.to_string(), e)));
        }
        Ok(v)
    }

    /// Checks each PE's FDB: every VPLS CE's MAC on that PE's attachment circuit for
    /// its own CE, on the pseudowire to the CE's PE for the others.
    pub fn check_fdb(&self, fdb: &[(String, api::FdbEntry)]) -> anyhow::Result<()> {
        let mut wrong = Vec::new();
        for pe in PE_NAMES {
            for s in SITES.iter().filter(|s| s.service == Service::Vpls) {
                let mac = self.ce_mac(s.host)?;
                let (want_if, want_pw) = if s.pe == pe {
                    (Some(s.pe_if.to_string()), None)
                } else {
                    (None, Some(format!("bl-{}", s.pe)))
                };
                let found: Vec<&api::FdbEntry> =
                    fdb.iter().filter(|(r, e)| r == pe && e.mac.to_string() == mac).map(|(_, e)| e).collect();
                match found.as_slice() {
                    [e] if e.ifname == want_if && e.pw == want_pw => {}
                    other => wrong.push(format!(
                        "{pe}: {} ({mac}) should be on {}, is on {:?}",
                        s.host,
                        want_if.as_deref().or(want_pw.as_deref()).unwrap_or("?"),
                        other.iter().map(|e| fdb_where(e)).collect::<Vec<_>>()
                    )),
                }
            }
        }
        if !wrong.is_empty() {
            bail!("{}", wrong.join("; "));
        }
        Ok(())
    }

    /// The content-checked TCP flow from `from` to `to` (a CE, or the baseline's k-ce2).
    pub fn run_flow(&self, from: &str, to: &str, opts: &FlowOptions) -> anyhow::Result<FlowResult> {
        let dst = if to == KERNEL_BASELINE_ENDS.1 { KERNEL_BASELINE_DST.parse()? } else { ce_addr(to)? };
        run_flow(self.topo.ns(from)?, self.topo.ns(to)?, dst, opts, &mut |_| {})
    }

    /// FRR's config lines a daemon refused, per router (empty: none).
    pub fn config_errors(&self) -> Vec<String> {
        self.frr
            .iter()
            .flat_map(|r| {
                r.config_errors().into_iter().map(move |e| format!("{}: {e}", r.options().hostname))
            })
            .collect()
    }

    /// Stops vmpls and FRR and removes the namespaces (also done on drop).
    pub fn cleanup(&mut self) -> anyhow::Result<()> {
        let mut first = self.stop_vmpls().err();
        for mut r in std::mem::take(&mut self.frr) {
            if let Err(e) = r.stop() {
                tracing::debug!("stopping FRR: {e:#}");
            }
        }
        if let Err(e) = self.topo.cleanup() {
            first.get_or_insert(e);
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for L2vpnLab {
    fn drop(&mut self) {
        let _ = self.cleanup();
    }
}

/// Where an FDB entry was learned, as `bridge fdb show` says it: `dev PORT` or `pw NAME`.
fn fdb_where(e: &api::FdbEntry) -> String {
    match (&e.ifname, &e.pw) {
        (Some(i), _) => format!("dev {i}"),
        (None, Some(p)) => format!("pw {p}"),
        (None, None) => "?".into(),
    }
}

/// One pseudowire end in the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PwResult {
    /// Which end.
    pub end: PwEnd,
    /// Its status in FRR's `show l2vpn atom vc` (`up`, `down`, `absent`).
    pub status_frr: String,
    /// Its status in vmpls's `pw show` (`up`, `down (REASON)`, `absent`).
    pub status_vmpls: String,
    /// ldpd's local label (`show l2vpn atom binding`).
    pub local_label: Option<u32>,
    /// ldpd's remote label.
    pub remote_label: Option<u32>,
    /// vmpls's local label.
    pub vmpls_local_label: Option<u32>,
    /// vmpls's remote label.
    pub vmpls_remote_label: Option<u32>,
}

impl PwResult {
    /// Up in FRR and vmpls, with ldpd's labels in vmpls.
    pub fn agrees(&self) -> bool {
        self.status_frr == "up"
            && self.status_vmpls == "up"
            && self.local_label.is_some()
            && self.remote_label.is_some()
            && self.local_label == self.vmpls_local_label
            && self.remote_label == self.vmpls_remote_label
    }
}

/// The result of `vmpls lab l2vpn`.
#[derive(Debug, Clone, PartialEq)]
pub struct L2vpnLabReport {
    /// Every pseudowire end.
    pub pseudowires: Vec<PwResult>,
    /// Seconds from the daemons' start to FRR converged (every pseudowire up in FRR).
    pub frr_converged_s: f64,
    /// Seconds from the daemons' start to vmpls holding every pseudowire up with
    /// ldpd's labels (`None`: it did not).
    pub converged_s: Option<f64>,
    /// The checks: (what, `None` if it passed or why it failed).
    pub checks: Vec<(String, Option<String>)>,
    /// VPLS `blue`'s FDB: (PE, entry, the CE whose MAC it is).
    pub fdb: Vec<(String, api::FdbEntry, Option<String>)>,
    /// The flows.
    pub modes: Vec<ModeResult>,
    /// The work directory, if kept (after a failure).
    pub work_dir: Option<PathBuf>,
}

impl L2vpnLabReport {
    /// Whether every pseudowire, check and mode passed.
    pub fn ok(&self) -> bool {
        self.converged_s.is_some()
            && self.pseudowires.iter().all(PwResult::agrees)
            && self.checks.iter().all(|c| c.1.is_none())
            && !self.modes.is_empty()
            && self.modes.iter().all(|m| m.error.is_none())
    }

    /// `{"pseudowires": [{"router", "name", "l2vpn", "peer", "pw_id", "status_frr",
    /// "status_vmpls", "local_label", "remote_label", "vmpls_local_label",
    /// "vmpls_remote_label"}], "frr_converged_s", "converged_s", "checks": [{"name", "ok",
    /// "error"}], "fdb": [{"router", "mac", "ifname" | "pw", "host"}], "modes": [{"name",
    /// "gbps", "retransmits", "ratio", "bytes", "seconds", "content_ok", "error"}]}`.
    pub fn to_json(&self) -> Value {
        let pws: Vec<Value> = self
            .pseudowires
            .iter()
            .map(|p| {
                serde_json::json!({
                    "router": p.end.pe, "name": p.end.name, "l2vpn": p.end.l2vpn,
                    "peer": p.end.peer.to_string(), "pw_id": p.end.pw_id,
                    "status_frr": p.status_frr, "status_vmpls": p.status_vmpls,
                    "local_label": p.local_label, "remote_label": p.remote_label,
                    "vmpls_local_label": p.vmpls_local_label, "vmpls_remote_label": p.vmpls_remote_label,
                })
            })
            .collect();
        let checks: Vec<Value> = self
            .checks
            .iter()
            .map(|(name, err)| serde_json::json!({"name": name, "ok": err.is_none(), "error": err}))
            .collect();
        let fdb: Vec<Value> = self
            .fdb
            .iter()
            .map(|(r, e, host)| {
                serde_json::json!({
                    "router": r, "mac": e.mac.to_string(), "ifname": e.ifname, "pw": e.pw, "host": host,
                })
            })
            .collect();
        let modes: Vec<Value> = self
            .rows()
            .iter()
            .zip(&self.modes)
            .map(|(row, m)| {
                let mut o = report::mode_json(row, JsonDetail::Full);
                o.insert("content_ok".into(), m.flow.as_ref().map(|f| f.content_ok).into());
                Value::Object(o)
            })
            .collect();
        serde_json::json!({
            "pseudowires": pws,
            "frr_converged_s": self.frr_converged_s,
            "converged_s": self.converged_s,
            "checks": checks,
            "fdb": fdb,
            "modes": modes,
        })
    }

    /// The modes table, the pseudowires, the FDB, the convergence times, the checks and
    /// the failures.
    pub fn to_markdown(&self) -> String {
        let rows = self.rows();
        let mut s = report::modes_table(&rows);
        s.push_str(
            "\n| PE | pseudowire | l2vpn | peer | pw-id | FRR | vmpls | local label | remote label |\n\
             |----|------------|-------|------|------:|-----|-------|------------:|-------------:|\n",
        );
        let opt = |v: Option<u32>| v.map_or("-".to_string(), |n| n.to_string());
        for p in &self.pseudowires {
            let labels = |ldp: Option<u32>, vmpls: Option<u32>| {
                if ldp == vmpls { opt(ldp) } else { format!("{} (vmpls {})", opt(ldp), opt(vmpls)) }
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                p.end.pe,
                p.end.name,
                p.end.l2vpn,
                p.end.peer,
                p.end.pw_id,
                p.status_frr,
                p.status_vmpls,
                labels(p.local_label, p.vmpls_local_label),
                labels(p.remote_label, p.vmpls_remote_label)
            );
        }
        if !self.fdb.is_empty() {
            let _ = writeln!(
                s,
                "\n| PE | MAC (vmpls bridge fdb show vpls {VPLS}) | learned on | CE |\n|----|-----|------------|----|"
            );
            for (r, e, host) in &self.fdb {
                let _ = writeln!(
                    s,
                    "| {r} | {} | {} | {} |",
                    e.mac,
                    fdb_where(e),
                    host.as_deref().unwrap_or("-")
                );
            }
        }
        let _ = writeln!(
            s,
            "\nFRR converged in {:.2} s (daemons started -> LDP up, every pseudowire up in FRR)",
            self.frr_converged_s
        );
        match self.converged_s {
            Some(t) => {
                let _ = writeln!(
                    s,
                    "vmpls converged in {t:.2} s (daemons started -> every pseudowire up in vmpls with ldpd's labels)"
                );
            }
            None => s.push_str("vmpls did not converge\n"),
        }
        s.push('\n');
        for (name, err) in &self.checks {
            let _ = writeln!(s, "- {name}: {}", if err.is_some() { "FAILED" } else { "ok" });
        }
        let failed = self.checks.iter().filter_map(|(n, e)| e.as_ref().map(|e| format!("{n}: {e}")));
        s += &report::failure_list(failed.chain(report::mode_failures(&rows)));
        if let Some(d) = &self.work_dir {
            let _ = writeln!(s, "\nconfigs and logs kept in {}", d.display());
        }
        s
    }

    fn rows(&self) -> Vec<ModeRow<'_>> {
        self.modes.iter().map(ModeResult::row).collect()
    }
}

/// What `vmpls lab l2vpn` does.
#[derive(Debug, Clone)]
pub struct L2vpnLabOptions {
    /// The `vmpls` binary.
    pub vmpls: PathBuf,
    /// How long each TCP flow runs.
    pub duration: Duration,
    /// Our zebra module (`vmpls_zebra.so`).
    pub zebra_module: PathBuf,
}

/// How long the lab waits for FRR to converge (LDP, then every pseudowire).
const FRR_TIMEOUT: Duration = Duration::from_secs(60);
/// How long it waits, after that, for vmpls to hold every pseudowire with ldpd's labels.
const SYNC_TIMEOUT: Duration = Duration::from_secs(15);
/// How long it waits for a ping to get through.
const REACH_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the L2VPN lab (see the [module documentation](self)) and returns its report;
/// `progress` gets human-readable lines. Cleans up on return, error and Ctrl-C; the
/// work directory is kept when something failed.
pub fn run_l2vpn_lab(
    opts: &L2vpnLabOptions,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<L2vpnLabReport> {
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
    crate::frr::ensure_frr_installed()?;
    let work_dir = crate::temp_work_dir("vmpls-l2vpn-lab")?;
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
        Err(e) => {
            Err(e.context(format!("L2VPN lab failed (configs and logs are in {})", work_dir.display())))
        }
    }
}

fn run_lab(
    opts: &L2vpnLabOptions,
    work_dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<L2vpnLabReport> {
    progress(
        "building the L2VPN topology: pe1 -- p -- pe2 and pe3 on p; VPWS ce1 <-> ce2, VPLS vce1, vce2, vce3",
    );
    let mut lab = L2vpnLab::build(&opts.vmpls, work_dir)?;
    let mut checks = Vec::new();
    // vmpls first: it makes the interfaces standing for the pseudowires, which ldpd's
    // config names; zebra's FPM and pseudowire channel connect to it once it listens.
    progress("starting vmpls in FRR mode on pe1, p, pe2, pe3 (the pseudowires' stand-in interfaces)");
    let started = Instant::now();
    lab.start_vmpls(false)?;
    progress("starting FRR: zebra + module, ospfd, ldpd (l2vpn VPWS and BLUE on the PEs)");
    lab.start_frr(&opts.zebra_module)?;
    progress("waiting for LDP and every pseudowire up in FRR");
    lab.wait_until(FRR_TIMEOUT, "FRR not converged", |lab| lab.frr_missing())?;
    let frr_converged_s = started.elapsed().as_secs_f64();
    progress(&format!("FRR converged in {frr_converged_s:.2} s"));
    let converged_s =
        match lab.wait_until(SYNC_TIMEOUT, "vmpls and ldpd disagree", |lab| lab.vmpls_differences()) {
            Ok(_) => {
                let t = started.elapsed().as_secs_f64();
                progress(&format!("vmpls converged in {t:.2} s: every pseudowire up with ldpd's labels"));
                Some(t)
            }
            Err(e) if is_interrupted(&e) => return Err(e),
            Err(e) => {
                progress(&format!("vmpls did not converge: {e:#}"));
                checks.push((
                    "vmpls has every pseudowire up with ldpd's labels".to_string(),
                    Some(format!("{e:#}")),
                ));
                None
            }
        };
    let pseudowires = lab.pseudowires()?;

    let mut check =
        |name: String, r: anyhow::Result<()>, progress: &mut dyn FnMut(&str)| -> anyhow::Result<()> {
            match r {
                Err(e) if is_interrupted(&e) => Err(e),
                r => {
                    let err = r.err().map(|e| format!("{e:#}"));
                    progress(&format!("{name}: {}", err.as_deref().unwrap_or("ok")));
                    checks.push((name, err));
                    Ok(())
                }
            }
        };
    let errors = lab.config_errors();
    let r = if errors.is_empty() { Ok(()) } else { Err(anyhow!("{}", errors.join("; "))) };
    check("FRR's daemons took every config line".into(), r, progress)?;
    let pairs = [
        ("ce1", "ce2"),
        ("ce2", "ce1"),
        ("vce1", "vce2"),
        ("vce1", "vce3"),
        ("vce2", "vce3"),
        ("vce3", "vce1"),
    ];
    for (from, to) in pairs {
        let over = if site(from)?.service == Service::Vpws { "VPWS" } else { "VPLS" };
        let r = lab.check_ping(from, ce_addr(to)?, REACH_TIMEOUT);
        let pinged = r.is_ok();
        check(format!("ping {from} -> {to} ({over})"), r, progress)?;
        if pinged {
            let r = lab.check_arp(from, to);
            check(format!("ARP across: {from} has {to}'s own MAC"), r, progress)?;
        }
    }
    let mut fdb = Vec::new();
    let r = lab.fdb().and_then(|entries| {
        let macs: Vec<(String, String)> = SITES
            .iter()
            .filter(|s| s.service == Service::Vpls)
            .map(|s| Ok((lab.ce_mac(s.host)?, s.host.to_string())))
            .collect::<anyhow::Result<_>>()?;
        let r = lab.check_fdb(&entries);
        fdb = entries
            .into_iter()
            .map(|(pe, e)| {
                let host = macs.iter().find(|(m, _)| *m == e.mac.to_string()).map(|(_, h)| h.clone());
                (pe, e, host)
            })
            .collect();
        r
    });
    check(
        format!("FDB of {VPLS}: each CE's MAC on its attachment circuit or on the pseudowire to its PE"),
        r,
        progress,
    )?;

    let flow_opts = FlowOptions { limit: Limit::Duration(opts.duration), ..FlowOptions::default() };
    let mut modes = Vec::new();
    let (k_from, k_to) = KERNEL_BASELINE_ENDS;
    for (name, from, to) in
        [("kernel-ip", k_from, k_to), ("vmpls-vpws", "ce1", "ce2"), ("vmpls-vpls", "vce1", "vce2")]
    {
        check_interrupt()?;
        progress(&format!("{name}: TCP {from} -> {to} for {:?}", opts.duration));
        let (flow, error) = match lab.run_flow(from, to, &flow_opts) {
            Ok(f) => {
                let error = flow_problem(&f);
                progress(&format!("{name}: {:.2} Gbit/s, {} retransmits", f.gbps, f.retransmits));
                (Some(f), error)
            }
            Err(e) if is_interrupted(&e) || interrupted() => return Err(e),
            Err(e) => (None, Some(format!("{e:#}"))),
        };
        modes.push(ModeResult { name: name.into(), flow, ratio: None, error });
    }
    let gbps: Vec<Option<f64>> = modes.iter().map(|m| m.flow.as_ref().map(|f| f.gbps)).collect();
    for (m, ratio) in modes.iter_mut().zip(report::ratios(&gbps, |_| Some(0))) {
        m.ratio = ratio;
    }
    lab.check_running()?;
    lab.cleanup()?;
    Ok(L2vpnLabReport { pseudowires, frr_converged_s, converged_s, checks, fdb, modes, work_dir: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vpls_is_a_full_mesh_with_one_pw_id_per_pair() {
        let ends = pseudowire_ends();
        assert_eq!(ends.len(), 8, "{ends:?}");
        let vpls: Vec<&PwEnd> = ends.iter().filter(|e| e.l2vpn == VPLS_L2VPN).collect();
        assert_eq!(vpls.len(), 6);
        for e in &vpls {
            // the far end has the same pw-id toward this PE
            let far = PE_NAMES.iter().find(|p| loopback(p).unwrap() == e.peer).unwrap();
            let back = vpls.iter().find(|b| b.pe == *far && b.peer == loopback(e.pe).unwrap()).unwrap();
            assert_eq!(back.pw_id, e.pw_id, "{e:?} / {back:?}");
        }
        let ids: std::collections::BTreeSet<u32> = vpls.iter().map(|e| e.pw_id).collect();
        assert_eq!(ids.into_iter().collect::<Vec<_>>(), [12, 13, 23]);
    }

    #[test]
    fn configs_name_the_same_pseudowires_in_ldpd_and_vmpls() {
        let ldpd = frr_options("pe1").unwrap().config(crate::frr::Daemon::Ldpd, Path::new("/x"));
        for line in [
            "l2vpn VPWS type vpls\n member interface pe1-ce1\n member pseudowire vpws\n  neighbor lsr-id 198.18.255.3\n  pw-id 100\n exit\nexit\n",
            "l2vpn BLUE type vpls\n member interface pe1-vce1\n member pseudowire bl-pe2\n  neighbor lsr-id 198.18.255.3\n  pw-id 12\n exit\n member pseudowire bl-pe3\n  neighbor lsr-id 198.18.255.4\n  pw-id 13\n exit\nexit\n",
        ] {
            assert!(ldpd.contains(line), "{line:?} missing in\n{ldpd}");
        }
        let pe3 = frr_options("pe3").unwrap().config(crate::frr::Daemon::Ldpd, Path::new("/x"));
        assert!(
            !pe3.contains("VPWS")
                && pe3.contains("member pseudowire bl-pe2\n  neighbor lsr-id 198.18.255.3\n  pw-id 23\n"),
            "{pe3}"
        );
        assert!(frr_options("p").unwrap().ldpd_extra.is_empty());
        let v = vmpls_config("pe2", Path::new("/s"), false).unwrap();
        for part in [
            "[[port]]\nname = \"pe2-p\"",
            "[[port]]\nname = \"pe2-ce2\"",
            "[[port]]\nname = \"pe2-vce2\"",
            "[[pseudowire]]\nname = \"vpws\"",
            "attachment = \"pe2-ce2\"",
            "[[vpls]]\nname = \"blue\"\nattachments = [\"pe2-vce2\"]",
            "[[vpls.pseudowire]]\nname = \"bl-pe1\"",
            "[[vpls.pseudowire]]\nname = \"bl-pe3\"",
        ] {
            assert!(v.contains(part), "{part:?} missing in\n{v}");
        }
        assert!(!v.contains("local-label"), "ldpd signals the labels: {v}");
        let p = vmpls_config("p", Path::new("/s"), false).unwrap();
        assert!(!p.contains("pseudowire") && !p.contains("vpls"), "{p}");
        for router in ROUTER_NAMES {
            let text = vmpls_config(router, Path::new("/s"), false).unwrap();
            let cfg = vmpls_control::Config::from_str(&text, Path::new("lab.toml"))
                .unwrap_or_else(|e| panic!("{router}: {e}\n{text}"));
            let members = cfg.vpls.iter().map(|v| v.pseudowires.len()).sum::<usize>();
            assert_eq!(members, if router == "p" { 0 } else { 2 }, "{router}: {text}");
        }
    }

    #[test]
    fn a_pseudowire_agrees_only_up_in_both_with_the_same_labels() {
        let end = pseudowire_ends().remove(0);
        let ok = PwResult {
            end,
            status_frr: "up".into(),
            status_vmpls: "up".into(),
            local_label: Some(16),
            remote_label: Some(17),
            vmpls_local_label: Some(16),
            vmpls_remote_label: Some(17),
        };
        assert!(ok.agrees());
        assert!(!PwResult { vmpls_remote_label: Some(18), ..ok.clone() }.agrees());
        assert!(!PwResult { status_vmpls: "down (attachment down)".into(), ..ok.clone() }.agrees());
        assert!(!PwResult { local_label: None, vmpls_local_label: None, ..ok }.agrees());
    }
}
