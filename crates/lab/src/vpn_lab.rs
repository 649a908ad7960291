//! The BGP/MPLS VPN lab (RFC 4364): the FRR seed topology with two customers whose
//! addresses overlap and a common-services VRF, FRR as the control plane and vmpls
//! forwarding in FRR mode.
//!
//! ```text
//!  red-ce1  ---(VRF red)--+                                +--(VRF red)---  red-ce2
//!  blue-ce1 ---(VRF blue)-+ pe1 ----- p ----- pe2 ---------+--(VRF blue)--  blue-ce2
//!                                                          +--(VRF common)- svc
//! ```
//!
//! - Core: pe1, p, pe2 as in [`crate::frr_lab`] (OSPF and LDP, loopbacks
//!   198.18.255.1-3, core links 198.18.10.0/24 and 198.18.20.0/24).
//! - Customers: red and blue have the same subnets, 198.18.1.0/24 at pe1 and
//!   198.18.2.0/24 at pe2 (CEs .2, PEs .1); each CE has a loopback of its own
//!   (198.18.201-204.1/32), which is what the common-services VRF reaches. Red speaks
//!   eBGP with its PE (IPv4 and IPv6: 2001:db8:1::/64 and 2001:db8:2::/64, VPNv6 over
//!   the IPv4 core, 6VPE); blue has static routes on the PEs. Every CE starts with a
//!   static default route to its PE.
//! - Common services: VRF `common` on pe2 with one host, `svc` (198.18.3.2/24,
//!   2001:db8:3::2/64). Hub and spoke by route targets: red exports 65000:1, blue
//!   65000:2, common 65000:100; red and blue import their own and 65000:100, common
//!   imports all three. Red and blue never see each other's routes. The CEs reach svc
//!   from their loopbacks (a kernel route with `src`), since their subnets overlap.
//!
//! # VRFs without VRF devices
//! Each PE's VRFs are network namespaces named like the VRF in a private `/run/netns`
//! of that PE ([`NetnsDir`]: a tmpfs the lab mounts; its daemons and its vmpls run in a
//! mount namespace where it is `/run/netns`). `zebra -n` takes each as a VRF; the
//! CE-facing interfaces are moved into them and keep their addresses there (the
//! kernel in the VRF namespace answers ARP, ping and carries the CE's BGP session;
//! its IP forwarding stays off, vmpls forwards). bgpd: iBGP between the PEs' loopbacks
//! with `ipv4 vpn` and `ipv6 vpn`, one `router bgp 65000 vrf NAME` per VRF (`rd`,
//! `rt vpn import/export`, `label vpn export auto`, `export vpn`, `import vpn`,
//! `redistribute connected`/`static`).
//!
//! # What the lab checks
//! [`run_vpn_lab`] waits until FRR has converged (LDP, the VPNv4 session, every VRF's
//! routes in zebra) and vmpls holds what zebra has, VRF by VRF and label by label;
//! then pings red <-> red, blue <-> blue, red -> svc, blue -> svc, svc -> both, red
//! IPv6 across the VPN, and that red never reaches blue (nor blue red), both ways, with
//! the ICMP counters of the other customer's hosts unchanged; `traceroute -e` from
//! red-ce1; a content-checked TCP flow per customer through the VPN beside the same
//! flow through a kernel-routed line of namespaces of the same shape (`kernel-ip`), and
//! red's again with the in-kernel fast path on the core ports (`vmpls-vpn-red-tc`).
//!
//! [`VpnLab`] is the building block, also used by the integration test.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;
use vmpls_control::api;

use crate::frr::{
    BgpFamily, BgpNeighbor, BgpOptions, BgpVrf, FrrOptions, FrrRouter, IsisInterface, OspfInterface,
};
use crate::frr_lab::{LabelHop, LabelTable, RouteHop, RouteTable, TraceHop, diff, strip_imp_null};
use crate::netns::NetnsDir;
use crate::ping::{PingOptions, ping};
use crate::report::{self, JsonDetail, ModeRow};
use crate::routers::{LogMode, RouterSet};
use crate::seed::ModeResult;
use crate::topology::{HostOptions, Topology};
use crate::traffic::{FlowOptions, FlowResult, Limit, run_flow};
use crate::{IpPrefix, check_interrupt, interrupted, is_interrupted, require_root};

/// The provider's AS (iBGP between the PEs).
pub const ASN: u32 = 65000;

/// MTU of the customer links.
const CUSTOMER_MTU: u32 = 1500;
/// MTU of the core links: super-frames cross them whole (as in the seed lab).
const CORE_MTU: u32 = 65535;

/// A customer VRF.
#[derive(Debug)]
pub struct VrfDef {
    /// Its name (the namespace's on each PE).
    pub name: &'static str,
    /// The route target it exports with.
    pub rt_export: &'static str,
    /// The route targets it imports.
    pub rt_import: &'static [&'static str],
    /// VPNv6 too.
    pub ipv6: bool,
}

/// The VRFs: red and blue (spokes), common (the hub).
pub const VRFS: [VrfDef; 3] = [
    VrfDef { name: "red", rt_export: "65000:1", rt_import: &["65000:1", "65000:100"], ipv6: true },
    VrfDef { name: "blue", rt_export: "65000:2", rt_import: &["65000:2", "65000:100"], ipv6: false },
    VrfDef {
        name: "common",
        rt_export: "65000:100",
        rt_import: &["65000:1", "65000:2", "65000:100"],
        ipv6: true,
    },
];

/// How a site's routes reach its PE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CeRouting {
    /// eBGP from the CE (bgpd in the CE's namespace) with this AS.
    Ebgp(u32),
    /// Static routes on the PE (to the CE's loopback).
    Static,
    /// OSPF between the CE (ospfd in the CE's namespace) and the PE's `router ospf vrf
    /// NAME`, redistributed into the VRF's BGP and BGP's routes back into OSPF.
    Ospf,
}

/// A variant of the VPN lab's control plane (the topology and addresses stay the same).
/// The default is what `vmpls lab vpn` runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VpnVariant {
    /// p reflects the VPNv4 and VPNv6 routes (RFC 4456): pe1 and pe2 peer with p only,
    /// as its `route-reflector-client`s, instead of with each other (the full mesh).
    pub route_reflector: bool,
    /// Blue's CEs speak OSPF with their PEs inside VRF blue ([`CeRouting::Ospf`])
    /// instead of the PEs' static routes to their loopbacks.
    pub blue_ospf: bool,
    /// What carries the VPN routes across the core.
    pub transport: Transport,
}

/// The core's label distribution in a [`VpnVariant`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Transport {
    /// OSPF for the loopbacks and links, LDP for their labels.
    #[default]
    Ldp,
    /// OSPF with segment routing: prefix SIDs on the core's loopbacks
    /// ([`SR_GLOBAL_BLOCK`], index the loopback's last byte, penultimate-hop popping),
    /// no ldpd.
    OspfSr,
    /// IS-IS (level 2) with segment routing instead of OSPF, SIDs as with
    /// [`Transport::OspfSr`]; no ospfd, no ldpd.
    IsisSr,
}

/// The SRGB of every core router with a segment routing [`Transport`].
pub const SR_GLOBAL_BLOCK: (u32, u32) = (16000, 23999);

/// The segment routing lines for ospfd or isisd (`router`: `router ospf`, `router isis
/// 1`) that give `loopback`'s router a prefix SID for its loopback.
fn segment_routing(router: &str, loopback: Ipv4Addr) -> String {
    let (first, last) = SR_GLOBAL_BLOCK;
    let ospf_only = if router == "router ospf" { " capability opaque\n router-info area\n" } else { "" };
    format!(
        "{router}\n{ospf_only} segment-routing on\n segment-routing global-block {first} {last}\n \
         segment-routing prefix {loopback}/32 index {}\nexit\n",
        loopback.octets()[3]
    )
}

/// Makes core router `o` (loopback `loopback`, core ports `ports`) use `transport`.
fn use_transport(o: &mut FrrOptions, transport: Transport, loopback: Ipv4Addr, ports: &[&str]) {
    match transport {
        Transport::Ldp => {}
        Transport::OspfSr => {
            o.ldp.clear();
            o.ospfd_extra.push_str(&segment_routing("router ospf", loopback));
        }
        Transport::IsisSr => {
            o.ldp.clear();
            o.ospf.clear();
            o.isis = ports.iter().map(|p| IsisInterface::p2p(p)).collect();
            o.isisd_extra = segment_routing("router isis 1", loopback);
        }
    }
}

impl VpnVariant {
    /// How `site`'s PE learns its routes in this variant.
    pub fn routing(&self, site: &Site) -> CeRouting {
        if self.blue_ospf && site.vrf == "blue" { CeRouting::Ospf } else { site.routing }
    }

    /// The CEs that run FRR in this variant (eBGP or OSPF with their PE).
    pub fn frr_ces(&self) -> Vec<&'static str> {
        SITES.iter().filter(|s| self.routing(s) != CeRouting::Static).map(|s| s.host).collect()
    }
}

/// A customer site: a CE host on one PE, in one VRF.
#[derive(Debug)]
pub struct Site {
    /// The CE host.
    pub host: &'static str,
    /// Its PE.
    pub pe: &'static str,
    /// The VRF on the PE.
    pub vrf: &'static str,
    /// The CE's interface.
    pub ce_if: &'static str,
    /// The PE's interface (in the VRF's namespace), also the vmpls port's interface.
    pub pe_if: &'static str,
    /// The CE's address on the link.
    pub ce_v4: &'static str,
    /// The PE's.
    pub pe_v4: &'static str,
    /// The CE's and the PE's IPv6 addresses, if the site has IPv6.
    pub v6: Option<(&'static str, &'static str)>,
    /// The CE's loopback (a /32 the other VRFs reach it at), if any.
    pub loopback: Option<&'static str>,
    /// How the PE learns the loopback.
    pub routing: CeRouting,
}

/// The sites.
pub const SITES: [Site; 5] = [
    Site {
        host: "red-ce1",
        pe: "pe1",
        vrf: "red",
        ce_if: "red-ce1-pe1",
        pe_if: "pe1-red",
        ce_v4: "198.18.1.2/24",
        pe_v4: "198.18.1.1/24",
        v6: Some(("2001:db8:1::2/64", "2001:db8:1::1/64")),
        loopback: Some("198.18.201.1/32"),
        routing: CeRouting::Ebgp(65101),
    },
    Site {
        host: "blue-ce1",
        pe: "pe1",
        vrf: "blue",
        ce_if: "blue-ce1-pe1",
        pe_if: "pe1-blue",
        ce_v4: "198.18.1.2/24",
        pe_v4: "198.18.1.1/24",
        v6: None,
        loopback: Some("198.18.202.1/32"),
        routing: CeRouting::Static,
    },
    Site {
        host: "red-ce2",
        pe: "pe2",
        vrf: "red",
        ce_if: "red-ce2-pe2",
        pe_if: "pe2-red",
        ce_v4: "198.18.2.2/24",
        pe_v4: "198.18.2.1/24",
        v6: Some(("2001:db8:2::2/64", "2001:db8:2::1/64")),
        loopback: Some("198.18.203.1/32"),
        routing: CeRouting::Ebgp(65102),
    },
    Site {
        host: "blue-ce2",
        pe: "pe2",
        vrf: "blue",
        ce_if: "blue-ce2-pe2",
        pe_if: "pe2-blue",
        ce_v4: "198.18.2.2/24",
        pe_v4: "198.18.2.1/24",
        v6: None,
        loopback: Some("198.18.204.1/32"),
        routing: CeRouting::Static,
    },
    Site {
        host: "svc",
        pe: "pe2",
        vrf: "common",
        ce_if: "svc-pe2",
        pe_if: "pe2-common",
        ce_v4: "198.18.3.2/24",
        pe_v4: "198.18.3.1/24",
        v6: Some(("2001:db8:3::2/64", "2001:db8:3::1/64")),
        loopback: None,
        routing: CeRouting::Static,
    },
];

/// The common-services subnets the CEs reach from their loopbacks.
const COMMON_V4: &str = "198.18.3.0/24";

/// A router of the core: (name, router id, core interfaces with their addresses).
type CoreDef = (&'static str, Ipv4Addr, &'static [(&'static str, &'static str)]);

/// The core routers, in order along the line.
const CORE: [CoreDef; 3] = [
    ("pe1", Ipv4Addr::new(198, 18, 255, 1), &[("pe1-p", "198.18.10.1/24")]),
    ("p", Ipv4Addr::new(198, 18, 255, 2), &[("p-pe1", "198.18.10.2/24"), ("p-pe2", "198.18.20.1/24")]),
    ("pe2", Ipv4Addr::new(198, 18, 255, 3), &[("pe2-p", "198.18.20.2/24")]),
];

/// The core links: (host a, interface a, host b, interface b).
const CORE_LINKS: [(&str, &str, &str, &str); 2] =
    [("pe1", "pe1-p", "p", "p-pe1"), ("p", "p-pe2", "pe2", "pe2-p")];

/// The routers (vmpls and FRR run on each).
pub const ROUTER_NAMES: [&str; 3] = ["pe1", "p", "pe2"];

/// The provider edges.
pub const PE_NAMES: [&str; 2] = ["pe1", "pe2"];

/// The kernel-routed baseline: the same line of five namespaces with the same MTUs,
/// routed by the kernel without VRFs or labels. (host, its links' far ends).
const BASELINE_HOSTS: [&str; 5] = ["k-ce1", "k-pe1", "k-p", "k-pe2", "k-ce2"];

fn prefix(s: &str) -> IpPrefix {
    s.parse().unwrap_or_else(|e| panic!("bad lab prefix {s:?}: {e}"))
}

fn core(name: &str) -> anyhow::Result<&'static CoreDef> {
    CORE.iter().find(|c| c.0 == name).ok_or_else(|| anyhow!("the VPN lab has no router {name:?}"))
}

/// The site of host `host`.
pub fn site(host: &str) -> anyhow::Result<&'static Site> {
    SITES.iter().find(|s| s.host == host).ok_or_else(|| anyhow!("the VPN lab has no site {host:?}"))
}

fn vrf_def(name: &str) -> anyhow::Result<&'static VrfDef> {
    VRFS.iter().find(|v| v.name == name).ok_or_else(|| anyhow!("the VPN lab has no VRF {name:?}"))
}

/// The VRFs of PE `pe`, in [`VRFS`] order.
pub fn vrfs_of(pe: &str) -> Vec<&'static VrfDef> {
    VRFS.iter().filter(|v| SITES.iter().any(|s| s.pe == pe && s.vrf == v.name)).collect()
}

/// The route distinguisher of `vrf` on the PE with id `router_id`: one per PE and VRF,
/// so every path stays apart in the VPN table.
fn rd(router_id: Ipv4Addr, vrf: &str) -> anyhow::Result<String> {
    let n = VRFS.iter().position(|v| v.name == vrf).ok_or_else(|| anyhow!("no VRF {vrf:?}"))? + 1;
    Ok(format!("{router_id}:{n}"))
}

/// The prefixes VRF `vrf` holds when converged (on any PE that has it): the subnets and
/// loopbacks of every site whose VRF exports a route target `vrf` imports.
pub fn expected_prefixes(vrf: &str, ipv6: bool) -> anyhow::Result<BTreeSet<String>> {
    let v = vrf_def(vrf)?;
    if ipv6 && !v.ipv6 {
        return Ok(BTreeSet::new());
    }
    let mut set = BTreeSet::new();
    for s in SITES.iter().filter(|s| v.rt_import.contains(&vrf_def(s.vrf).map(|d| d.rt_export).unwrap_or("")))
    {
        if ipv6 {
            if let Some((ce, _)) = s.v6 {
                set.insert(prefix(ce).network().to_string());
            }
        } else {
            set.insert(prefix(s.ce_v4).network().to_string());
            if let Some(lo) = s.loopback {
                set.insert(prefix(lo).to_string());
            }
        }
    }
    Ok(set)
}

/// The address of `site`'s CE on its link.
pub fn ce_addr(host: &str) -> anyhow::Result<IpAddr> {
    Ok(prefix(site(host)?.ce_v4).addr())
}

/// The IPv6 address of `site`'s CE on its link.
pub fn ce_addr_v6(host: &str) -> anyhow::Result<IpAddr> {
    let s = site(host)?;
    s.v6.map(|(ce, _)| prefix(ce).addr()).ok_or_else(|| anyhow!("{host} has no IPv6"))
}

/// The loopback of `site`'s CE.
pub fn loopback(host: &str) -> anyhow::Result<IpAddr> {
    let s = site(host)?;
    s.loopback.map(|l| prefix(l).addr()).ok_or_else(|| anyhow!("{host} has no loopback"))
}

/// The vmpls port name of interface `ifname` on `router`: the VRF of a customer-facing
/// one, `core`/`west`/`east` for the core.
fn port_name(router: &str, ifname: &str) -> String {
    if let Some(s) = SITES.iter().find(|s| s.pe == router && s.pe_if == ifname) {
        return s.vrf.to_string();
    }
    match ifname {
        "p-pe1" => "west".into(),
        "p-pe2" => "east".into(),
        _ => "core".into(),
    }
}

/// The interfaces vmpls serves on `router`: the core ones, then the customer-facing
/// ones (which live in the VRFs' namespaces).
fn router_interfaces(router: &str) -> anyhow::Result<Vec<&'static str>> {
    let (_, _, ports) = core(router)?;
    let mut v: Vec<&str> = ports.iter().map(|p| p.0).collect();
    v.extend(SITES.iter().filter(|s| s.pe == router).map(|s| s.pe_if));
    Ok(v)
}

/// The vmpls config of `router` in FRR mode: its core and (with `customer_ports`)
/// customer-facing ports (no addresses, no VRFs: the kernel and zebra say those),
/// `[frr]`, the control socket.
pub fn vmpls_config(
    router: &str,
    socket: &Path,
    fast_path: bool,
    customer_ports: bool,
) -> anyhow::Result<String> {
    let mut s = String::new();
    let _ = writeln!(s, "# {router} in FRR mode: generated by the VPN lab.\n");
    let _ = writeln!(s, "[router]\nname = \"{router}\"");
    let _ = writeln!(s, "control-socket = \"{}\"", socket.display());
    let _ = writeln!(s, "fast-path = \"{}\"", if fast_path { "tc" } else { "off" });
    let _ = writeln!(s, "\n[frr]\nfpm = \"127.0.0.1:2620\"");
    let core_ports = core(router)?.2.len();
    for ifname in
        router_interfaces(router)?.into_iter().take(if customer_ports { usize::MAX } else { core_ports })
    {
        let _ = writeln!(s, "\n[[port]]\nname = \"{}\"\ninterface = \"{ifname}\"", port_name(router, ifname));
    }
    Ok(s)
}

/// FRR's options for `router` (`pe1`, `p`, `pe2`, or a red CE) in the default variant,
/// without the paths the lab adds (module, private `/run/netns`).
pub fn frr_options(router: &str) -> anyhow::Result<FrrOptions> {
    frr_options_with(router, VpnVariant::default())
}

/// The iBGP session of the default instance with `peer`'s loopback (VPNv4 and VPNv6).
fn vpn_neighbor(peer: Ipv4Addr, route_reflector_client: bool) -> BgpNeighbor {
    BgpNeighbor {
        peer: IpAddr::V4(peer).into(),
        remote_as: ASN,
        update_source: Some("lo".into()),
        families: vec![BgpFamily::Ipv4Vpn, BgpFamily::Ipv6Vpn],
        route_reflector_client,
    }
}

/// The vtysh commands that make the CE-facing interface of each OSPF-speaking site of
/// `router` point-to-point with the lab's timers. They cannot be in ospfd's file: FRR
/// 8.4's ospfd reads it before zebra has told it about the namespace VRFs and puts
/// `interface NAME vrf VRF` into the default VRF, where the interface is not.
fn pe_ospf_vrf_interface_commands(router: &str, variant: VpnVariant) -> Vec<(&'static Site, Vec<String>)> {
    let t = crate::frr::Timers::fast();
    SITES
        .iter()
        .filter(|s| s.pe == router && variant.routing(s) == CeRouting::Ospf)
        .map(|s| {
            let commands = vec![
                "configure terminal".to_string(),
                format!("interface {} vrf {}", s.pe_if, s.vrf),
                "ip ospf network point-to-point".to_string(),
                format!("ip ospf hello-interval {}", t.ospf_hello),
                format!("ip ospf dead-interval {}", t.ospf_dead),
                format!("ip ospf retransmit-interval {}", t.ospf_retransmit),
            ];
            (s, commands)
        })
        .collect()
}

/// ospfd's lines for the PE side of OSPF-speaking sites of `router`: per VRF a `router
/// ospf vrf NAME` on the site's subnet, BGP's (VPN) routes redistributed to the CEs
/// (the interfaces: [`pe_ospf_vrf_interface_commands`]).
fn pe_ospf_vrf_config(router: &str, router_id: Ipv4Addr, variant: VpnVariant) -> String {
    let t = crate::frr::Timers::fast();
    let mut c = String::new();
    for s in SITES.iter().filter(|s| s.pe == router && variant.routing(s) == CeRouting::Ospf) {
        let _ = writeln!(c, "router ospf vrf {}", s.vrf);
        let _ = writeln!(c, " ospf router-id {router_id}");
        let (delay, hold, max) = t.spf_throttle;
        let _ = writeln!(c, " timers throttle spf {delay} {hold} {max}");
        let _ = writeln!(c, " network {} area 0", prefix(s.pe_v4).network());
        let _ = writeln!(c, " redistribute bgp");
        let _ = writeln!(c, "exit\n!");
    }
    c
}

/// FRR's options for `router` (`pe1`, `p`, `pe2`, or a CE that runs FRR in `variant`),
/// without the paths the lab adds (module, private `/run/netns`).
pub fn frr_options_with(router: &str, variant: VpnVariant) -> anyhow::Result<FrrOptions> {
    if router == "p" {
        let mut o = FrrOptions::seed("p")?;
        let (_, loopback, ports) = core("p")?;
        let ports: Vec<&str> = ports.iter().map(|p| p.0).collect();
        use_transport(&mut o, variant.transport, *loopback, &ports);
        if variant.route_reflector {
            let clients = CORE.iter().filter(|c| PE_NAMES.contains(&c.0)).map(|c| vpn_neighbor(c.1, true));
            o.bgp = Some(BgpOptions {
                asn: ASN,
                neighbors: clients.collect(),
                redistribute_connected: false,
                vrfs: Vec::new(),
            });
        }
        return Ok(o);
    }
    if let Ok(s) = site(router) {
        let lo = s.loopback.ok_or_else(|| anyhow!("{router} has no loopback"))?;
        let IpAddr::V4(id) = prefix(lo).addr() else { bail!("{router}'s loopback is not IPv4") };
        let asn = match variant.routing(s) {
            CeRouting::Static => bail!("{router} runs no FRR (its PE has static routes to it)"),
            CeRouting::Ospf => {
                let mut o = FrrOptions::new(router, id);
                o.fpm = None;
                o.ospf = vec![OspfInterface::p2p(s.ce_if)];
                return Ok(o);
            }
            CeRouting::Ebgp(asn) => asn,
        };
        let mut o = FrrOptions::new(router, id);
        o.fpm = None;
        let mut neighbors = vec![BgpNeighbor {
            peer: prefix(s.pe_v4).addr().into(),
            remote_as: ASN,
            update_source: None,
            families: vec![BgpFamily::Ipv4Unicast],
            route_reflector_client: false,
        }];
        if let Some((_, pe)) = s.v6 {
            neighbors.push(BgpNeighbor {
                peer: prefix(pe).addr().into(),
                remote_as: ASN,
                update_source: None,
                families: vec![BgpFamily::Ipv6Unicast],
                route_reflector_client: false,
            });
        }
        o.bgp = Some(BgpOptions { asn, neighbors, redistribute_connected: true, vrfs: Vec::new() });
        return Ok(o);
    }
    let (_, id, ports) = core(router)?;
    let mut o = FrrOptions::new(router, *id);
    o.ospf = ports.iter().map(|p| OspfInterface::p2p(p.0)).collect();
    o.ldp = ports.iter().map(|p| p.0.to_string()).collect();
    let other = CORE
        .iter()
        .find(|c| c.0 != router && c.0 != "p")
        .map(|c| c.1)
        .ok_or_else(|| anyhow!("no other PE"))?;
    let vrfs = vrfs_of(router)
        .into_iter()
        .map(|v| {
            let neighbors = SITES
                .iter()
                .filter(|s| s.pe == router && s.vrf == v.name)
                .filter_map(|s| match variant.routing(s) {
                    CeRouting::Ebgp(asn) => Some((s, asn)),
                    CeRouting::Static | CeRouting::Ospf => None,
                })
                .flat_map(|(s, asn)| {
                    let v4 = BgpNeighbor {
                        peer: prefix(s.ce_v4).addr().into(),
                        remote_as: asn,
                        update_source: None,
                        families: vec![BgpFamily::Ipv4Unicast],
                        route_reflector_client: false,
                    };
                    let v6 = s.v6.map(|(ce, _)| BgpNeighbor {
                        peer: prefix(ce).addr().into(),
                        remote_as: asn,
                        update_source: None,
                        families: vec![BgpFamily::Ipv6Unicast],
                        route_reflector_client: false,
                    });
                    std::iter::once(v4).chain(v6)
                })
                .collect();
            Ok(BgpVrf {
                name: v.name.to_string(),
                rd: rd(*id, v.name)?,
                rt_import: v.rt_import.iter().map(|s| s.to_string()).collect(),
                rt_export: vec![v.rt_export.to_string()],
                neighbors,
                ipv6: v.ipv6,
                redistribute_ospf: SITES
                    .iter()
                    .any(|s| s.pe == router && s.vrf == v.name && variant.routing(s) == CeRouting::Ospf),
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // With a route reflector the PE's one session is with p (its loopback), else with
    // the other PE.
    let peer = if variant.route_reflector { core("p")?.1 } else { other };
    o.bgp = Some(BgpOptions {
        asn: ASN,
        neighbors: vec![vpn_neighbor(peer, false)],
        redistribute_connected: false,
        vrfs,
    });
    o.ospfd_extra = pe_ospf_vrf_config(router, *id, variant);
    let core_ports: Vec<&str> = ports.iter().map(|p| p.0).collect();
    use_transport(&mut o, variant.transport, *id, &core_ports);
    let mut statics = String::new();
    for s in SITES.iter().filter(|s| s.pe == router && variant.routing(s) == CeRouting::Static) {
        if let Some(lo) = s.loopback {
            let _ = writeln!(statics, "vrf {}\n ip route {lo} {}\nexit-vrf", s.vrf, prefix(s.ce_v4).addr());
        }
    }
    o.staticd_extra = statics;
    Ok(o)
}

/// The VPN topology with FRR and vmpls on pe1, p and pe2, bgpd on the red CEs, and the
/// kernel-routed baseline line. Dropping it stops everything and removes the
/// namespaces.
#[derive(Debug)]
pub struct VpnLab {
    // Field order is drop order: FRR before the namespaces, the VRF namespaces last.
    frr: Vec<FrrRouter>,
    topo: Topology,
    vrf_dirs: Vec<(String, NetnsDir)>,
    vmpls: RouterSet,
    vmpls_bin: PathBuf,
    work_dir: PathBuf,
    variant: VpnVariant,
    zebra_module: Option<PathBuf>,
}

impl VpnLab {
    /// Builds the namespaces, links and addresses: the core as in the FRR lab, each
    /// PE's private `/run/netns` with its VRF namespaces and the customer-facing
    /// interfaces moved into them, the CEs with loopbacks and default routes, and the
    /// kernel-routed baseline line. No daemon runs yet. Configs and logs go to
    /// `work_dir`.
    pub fn build(vmpls_bin: &Path, work_dir: &Path) -> anyhow::Result<Self> {
        Self::build_with(vmpls_bin, work_dir, VpnVariant::default())
    }

    /// [`VpnLab::build`] for FRR configured as `variant` says (used from
    /// [`VpnLab::start_frr`] on).
    pub fn build_with(vmpls_bin: &Path, work_dir: &Path, variant: VpnVariant) -> anyhow::Result<Self> {
        require_root()?;
        let mut lab = Self {
            frr: Vec::new(),
            topo: Topology::new(),
            vrf_dirs: Vec::new(),
            vmpls: RouterSet::new(),
            vmpls_bin: vmpls_bin.to_path_buf(),
            work_dir: work_dir.to_path_buf(),
            variant,
            zebra_module: None,
        };
        let topo = &mut lab.topo;
        for (name, _, ports) in &CORE {
            topo.add_host_with(name, HostOptions { ipv6: false })?;
            topo.set_forwarding(name, false)?;
            let _ = ports;
        }
        for s in &SITES {
            topo.add_host(s.host)?;
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
        }
        for pe in PE_NAMES {
            let dir = Path::new("/run/vmpls-lab").join(format!("{}-{pe}", lab.topo.prefix()));
            let mut d = NetnsDir::create(&dir)?;
            for v in vrfs_of(pe) {
                d.add(v.name)?;
            }
            lab.vrf_dirs.push((pe.to_string(), d));
        }
        for s in &SITES {
            lab.build_site(s)?;
        }
        lab.build_baseline()?;
        Ok(lab)
    }

    /// Moves the PE's end of the site's link into its VRF and sets the addresses; the
    /// CE's addresses, loopback and routes.
    fn build_site(&self, s: &Site) -> anyhow::Result<()> {
        self.attach_site(s)?;
        self.build_ce(s)
    }

    /// Moves the PE's end of the site's link from the PE's namespace into its VRF and
    /// sets its addresses there.
    /// `keep_addr_on_down`: a PE-CE link set down and up again keeps its IPv6 addresses,
    /// as on a router (the kernel's default flushes them). An IPv6 blackhole default
    /// route behind the main table (table 250, rule 32767, where zebra does not look): the
    /// namespace's kernel sees the CE's frames too and has no route for the VPN's
    /// prefixes (labelled routes over the core cannot be installed there); IPv4 with
    /// forwarding off drops those packets silently, IPv6 would answer each "no route"
    /// (`!N` in a CE's traceroute, before vmpls's time exceeded).
    fn attach_site(&self, s: &Site) -> anyhow::Result<()> {
        let vrf_ns = self.netns_dir(s.pe)?.ns_path(s.vrf);
        let mut mv = Command::new("ip");
        mv.args(["link", "set", s.pe_if, "netns"]).arg(&vrf_ns);
        run_ok(self.topo.run(s.pe, mv)?, &format!("moving {} into VRF {} of {}", s.pe_if, s.vrf, s.pe))?;
        let mut script = format!(
            "set -e; ip link set lo up; sysctl -qw net.ipv4.ip_forward=0 net.ipv6.conf.all.forwarding=0; \
             sysctl -qw net.ipv6.conf.all.keep_addr_on_down=1; ip address add {} dev {if_}; \
             ip -6 route replace blackhole default table 250; \
             ip -6 rule show | grep -q 'lookup 250' || ip -6 rule add priority 32767 lookup 250; ",
            s.pe_v4,
            if_ = s.pe_if
        );
        if let Some((_, pe)) = s.v6 {
            let _ = write!(script, "ip -6 address add {pe} dev {} nodad; ", s.pe_if);
        }
        let _ = write!(script, "ip link set {} up", s.pe_if);
        self.vrf_sh(s.pe, s.vrf, &script)?;
        Ok(())
    }

    /// The CE's addresses, loopback and routes.
    fn build_ce(&self, s: &Site) -> anyhow::Result<()> {
        let topo = &self.topo;
        topo.add_address(s.host, s.ce_if, prefix(s.ce_v4))?;
        topo.add_default_route(s.host, prefix(s.pe_v4).addr())?;
        if let Some((ce, pe)) = s.v6 {
            topo.add_address(s.host, s.ce_if, prefix(ce))?;
            topo.add_default_route(s.host, prefix(pe).addr())?;
        }
        if let Some(lo) = s.loopback {
            topo.add_address(s.host, "lo", prefix(lo))?;
            // The CEs' subnets overlap: svc answers their loopbacks, which they use as
            // the source of what they send it.
            let mut cmd = Command::new("ip");
            cmd.args(["route", "replace", COMMON_V4, "via"])
                .arg(prefix(s.pe_v4).addr().to_string())
                .args(["src", &prefix(lo).addr().to_string()]);
            run_ok(topo.run(s.host, cmd)?, &format!("adding the route to {COMMON_V4} on {}", s.host))?;
        }
        Ok(())
    }

    fn build_baseline(&mut self) -> anyhow::Result<()> {
        build_kernel_baseline(&mut self.topo)
    }

    /// Deletes VRF `vrf` of PE `pe` at runtime, as an operator would: its CE-facing
    /// interfaces go back to the PE's own namespace (down, without addresses), then its
    /// namespace is deleted.
    pub fn delete_vrf(&mut self, pe: &str, vrf: &str) -> anyhow::Result<()> {
        let pe_ns = crate::netns::path(self.topo.ns(pe)?);
        for s in SITES.iter().filter(|s| s.pe == pe && s.vrf == vrf) {
            let script = format!(
                "ip link set {if_} down && ip link set {if_} netns {}",
                pe_ns.display(),
                if_ = s.pe_if
            );
            self.vrf_sh(pe, vrf, &script)?;
        }
        self.vrf_dirs
            .iter_mut()
            .find(|(n, _)| n == pe)
            .map(|(_, d)| d)
            .ok_or_else(|| anyhow!("{pe} has no VRFs"))?
            .remove(vrf)
    }

    /// Creates VRF `vrf` of PE `pe` again after [`VpnLab::delete_vrf`]: a new namespace,
    /// the CE-facing interfaces moved into it with their addresses.
    pub fn create_vrf(&mut self, pe: &str, vrf: &str) -> anyhow::Result<()> {
        vrf_def(vrf)?;
        self.vrf_dirs
            .iter_mut()
            .find(|(n, _)| n == pe)
            .map(|(_, d)| d)
            .ok_or_else(|| anyhow!("{pe} has no VRFs"))?
            .add(vrf)?;
        for s in SITES.iter().filter(|s| s.pe == pe && s.vrf == vrf) {
            self.attach_site(s)?;
        }
        Ok(())
    }

    /// The private `/run/netns` of PE `pe`.
    pub fn netns_dir(&self, pe: &str) -> anyhow::Result<&NetnsDir> {
        self.vrf_dirs.iter().find(|(n, _)| n == pe).map(|(_, d)| d).ok_or_else(|| anyhow!("{pe} has no VRFs"))
    }

    /// Runs `sh -c SCRIPT` inside VRF `vrf` of PE `pe`; fails if it fails.
    pub fn vrf_sh(&self, pe: &str, vrf: &str, script: &str) -> anyhow::Result<String> {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script);
        self.netns_dir(pe)?.command_in(vrf, &mut cmd)?;
        let out = crate::process::run_here_timeout(cmd, Duration::from_secs(10))?;
        run_ok(out, &format!("{script:?} in VRF {vrf} of {pe}"))
    }

    /// The topology (namespaces: [`Topology::ns`]).
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The directory with the configs and logs.
    pub fn work_dir(&self) -> &Path {
        &self.work_dir
    }

    /// Starts FRR on pe1, p, pe2 (the PEs with `zebra -n` in their private
    /// `/run/netns`) and on the CEs that route with their PE (the red ones: zebra and
    /// bgpd; in [`VpnVariant::blue_ospf`] the blue ones: zebra and ospfd).
    pub fn start_frr(&mut self, zebra_module: &Path) -> anyhow::Result<()> {
        self.zebra_module = Some(zebra_module.to_path_buf());
        let names: Vec<&str> = ROUTER_NAMES.into_iter().chain(self.variant.frr_ces()).collect();
        for name in names {
            self.start_frr_on(name)?;
        }
        Ok(())
    }

    fn start_frr_on(&mut self, name: &str) -> anyhow::Result<()> {
        let mut o = frr_options_with(name, self.variant)?;
        if ROUTER_NAMES.contains(&name) {
            o.zebra_module = Some(self.zebra_module.clone().ok_or_else(|| anyhow!("FRR was never started"))?);
        }
        if let Ok(d) = self.netns_dir(name) {
            o.netns_dir = Some(d.path().to_path_buf());
        }
        let r = FrrRouter::start(&self.topo, name, &self.work_dir, o)
            .with_context(|| format!("starting FRR on {name}"))?;
        // ospfd learns the VRFs from zebra shortly after it started: until then the
        // interface is not in the VRF and the commands would go to the default VRF.
        for (site, commands) in pe_ospf_vrf_interface_commands(name, self.variant) {
            let (ifname, vrf) = (site.pe_if, site.vrf);
            let start = Instant::now();
            loop {
                let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
                r.vtysh(&commands)?;
                let shown = r.vtysh(&[&format!("show ip ospf vrf {vrf} interface {ifname}")])?;
                if shown.contains("POINTOPOINT") {
                    break;
                }
                if start.elapsed() >= Duration::from_secs(10) {
                    bail!("{name}: ospfd did not take {ifname} of VRF {vrf} within 10 s: {shown}");
                }
                check_interrupt()?;
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        self.frr.push(r);
        Ok(())
    }

    /// Restarts FRR on `router` as a whole (every daemon stopped, then started again
    /// with the same configs), the way the README says to restart zebra.
    pub fn restart_frr(&mut self, router: &str) -> anyhow::Result<()> {
        let i = self
            .frr
            .iter()
            .position(|r| r.options().hostname == router)
            .ok_or_else(|| anyhow!("FRR does not run on {router:?}"))?;
        let mut old = self.frr.remove(i);
        if let Err(e) = old.stop() {
            // zebra -n of FRR 8.4 crashes on SIGTERM: a stop that ended it counts.
            tracing::debug!("stopping FRR of {router}: {e:#}");
        }
        drop(old);
        self.start_frr_on(router)
    }

    /// The variant FRR runs in.
    pub fn variant(&self) -> VpnVariant {
        self.variant
    }

    /// Sets the PE's end of `host`'s link (in the PE's VRF namespace) up or down; the
    /// CE's end loses its carrier with it.
    pub fn set_site_link(&self, host: &str, up: bool) -> anyhow::Result<()> {
        let s = site(host)?;
        self.vrf_sh(s.pe, s.vrf, &format!("ip link set {} {}", s.pe_if, if up { "up" } else { "down" }))
            .map(drop)
    }

    /// FRR of `router`.
    pub fn frr(&self, router: &str) -> anyhow::Result<&FrrRouter> {
        self.frr
            .iter()
            .find(|r| r.options().hostname == router)
            .ok_or_else(|| anyhow!("FRR does not run on {router:?}"))
    }

    fn socket_path(&self, router: &str) -> PathBuf {
        self.work_dir.join(format!("{router}.sock"))
    }

    /// Starts one `vmpls run` in FRR mode per router (the PEs' in their private
    /// `/run/netns`, where they find the VRFs) and waits for their control sockets.
    /// Without `customer_ports` vmpls serves the core ports only (the default VRF).
    pub fn start_vmpls(&mut self, fast_path: bool, customer_ports: bool) -> anyhow::Result<()> {
        self.stop_vmpls()?;
        for name in ROUTER_NAMES {
            let config = self.work_dir.join(format!("{name}.toml"));
            std::fs::write(&config, vmpls_config(name, &self.socket_path(name), fast_path, customer_ports)?)
                .with_context(|| format!("writing {}", config.display()))?;
            let log = self.work_dir.join(format!("{name}.vmpls.log"));
            let mut cmd = RouterSet::command(&self.vmpls_bin, &config);
            if let Ok(d) = self.netns_dir(name) {
                d.private_for(&mut cmd)?;
            }
            let socket = Some(self.socket_path(name));
            self.vmpls.start(&mut self.topo, name, cmd, log, LogMode::Append, socket)?;
        }
        let r = self.vmpls.wait_answering(&mut self.topo, Duration::from_secs(15));
        if r.is_err() {
            // None half-started: the lab goes on with FRR alone, and a router that
            // exited must not count as a crash later.
            let _ = self.stop_vmpls();
        }
        r
    }

    /// Stops the vmpls routers (if any run).
    pub fn stop_vmpls(&mut self) -> anyhow::Result<()> {
        self.vmpls.stop(&mut self.topo, Duration::from_secs(3)).map(drop)
    }

    /// The last `lines` lines of each running vmpls router's log.
    pub fn vmpls_logs(&self, lines: usize) -> String {
        self.vmpls.logs(lines)
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

    /// Runs the vmpls CLI against `router` with `-j` and returns its JSON (`null` for
    /// the commands that print nothing, `route add` ...).
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

    /// A counter of `router`'s FPM server (`connected`, ...).
    pub fn frr_counter(&self, router: &str, name: &str) -> anyhow::Result<u64> {
        let st: api::Stats = self.vmpls_typed(router, &["stats"])?;
        st.frr
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.value)
            .ok_or_else(|| anyhow!("vmpls stats of {router} have no frr counter {name:?}"))
    }

    /// A drop counter of `router` (`mpls_not_accepted`, ...), 0 if it never counted.
    pub fn drop_counter(&self, router: &str, name: &str) -> anyhow::Result<u64> {
        let st: api::Stats = self.vmpls_typed(router, &["stats"])?;
        Ok(st.drops.iter().filter(|c| c.name == name).map(|c| c.value).sum())
    }

    /// The traffic of VRF `vrf` on `pe` as vmpls counts it (`vmpls -j vrf show`: its
    /// ports and the labels that pop into it).
    pub fn vrf_traffic(&self, pe: &str, vrf: &str) -> anyhow::Result<api::VrfStats> {
        let list: Vec<api::Vrf> = self.vmpls_typed(pe, &["vrf", "show"])?;
        let v = list
            .into_iter()
            .find(|v| v.name == vrf)
            .ok_or_else(|| anyhow!("{pe}: vmpls has no VRF {vrf:?}"))?;
        v.stats.ok_or_else(|| anyhow!("{pe}: vmpls gave no counters for VRF {vrf:?}"))
    }

    /// The in-kernel fast path's counter `name` on `router` (`vmpls stats`: `push`, `pop`,
    /// `crossed`, ...); 0 when it runs without the fast path.
    pub fn fast_path_counter(&self, router: &str, name: &str) -> anyhow::Result<u64> {
        let st: api::Stats = self.vmpls_typed(router, &["stats"])?;
        Ok(st.fast_path.iter().filter(|c| c.name == name).map(|c| c.value).sum())
    }

    /// vmpls's label table on `router` (`vmpls -j -f mpls route show`), ports named by
    /// their interfaces.
    pub fn vmpls_label_table(&self, router: &str) -> anyhow::Result<LabelTable> {
        let routes: Vec<api::MplsRoute> = self.vmpls_typed(router, &["-f", "mpls", "route", "show"])?;
        Ok(routes
            .iter()
            .map(|r| {
                let hops = match (&r.vrf, r.nexthops.is_empty()) {
                    (Some(vrf), true) => [pop_into(vrf)].into(),
                    _ => vmpls_hops(router, &r.nexthops).collect(),
                };
                (r.label, hops)
            })
            .collect())
    }

    /// FRR's label table on `router` (`show mpls table json`), in the same form: a VPN
    /// label's LSP (a pop out of the VRF interface, named like the VRF) is a pop into
    /// that VRF.
    pub fn frr_label_table(&self, router: &str) -> anyhow::Result<LabelTable> {
        Ok(self
            .frr(router)?
            .mpls_table()?
            .into_values()
            .map(|lsp| {
                let hops = lsp
                    .nexthops
                    .iter()
                    .map(|n| match &n.interface {
                        Some(vrf) if n.via.is_none() && vrfs_of(router).iter().any(|v| v.name == vrf) => {
                            pop_into(vrf)
                        }
                        _ => LabelHop {
                            out_labels: strip_imp_null(&n.out_labels),
                            via: n.via,
                            interface: n.interface.clone().or_else(|| core_interface_for(router, n.via)),
                        },
                    })
                    .collect();
                (lsp.in_label, hops)
            })
            .collect())
    }

    /// The routes zebra hands vmpls for VRF `vrf` of `router` (both families): the
    /// selected ones but the connected and local ones, a VPN route's BGP next hop
    /// replaced by what it resolves to (transport labels over the VPN label).
    pub fn frr_vrf_routes(&self, router: &str, vrf: &str) -> anyhow::Result<RouteTable> {
        let frr = self.frr(router)?;
        let mut t = RouteTable::new();
        for ipv6 in [false, true] {
            for r in frr.vrf_routes(vrf, ipv6)? {
                if !r.selected || matches!(r.protocol.as_str(), "connected" | "kernel" | "local") {
                    continue;
                }
                t.insert(r.prefix.to_string(), frr_hops(router, &r.nexthops));
            }
        }
        Ok(t)
    }

    /// The routes vmpls has from FRR in VRF `vrf` of `router` (`vmpls -j route show vrf
    /// VRF`, IPv4 and IPv6, without the connected ones).
    pub fn vmpls_vrf_routes(&self, router: &str, vrf: &str) -> anyhow::Result<RouteTable> {
        let mut t = RouteTable::new();
        for family in [&["route", "show", "vrf", vrf][..], &["-6", "route", "show", "vrf", vrf][..]] {
            let routes: Vec<api::IpRoute> = self.vmpls_typed(router, family)?;
            for r in routes.into_iter().filter(|r| r.protocol != api::Protocol::Kernel) {
                let dst: IpPrefix = r.dst.parse().with_context(|| format!("route dst {:?}", r.dst))?;
                let hops = vmpls_hops(router, &r.nexthops)
                    .map(|h| RouteHop { labels: h.out_labels, via: h.via, interface: h.interface })
                    .collect();
                t.insert(dst.to_string(), hops);
            }
        }
        Ok(t)
    }

    /// What FRR still lacks on `router` to be converged (empty: converged): LDP
    /// sessions, the VPNv4 session, and every VRF's expected prefixes selected in
    /// zebra.
    pub fn frr_missing(&self, router: &str) -> anyhow::Result<Vec<String>> {
        let frr = self.frr(router)?;
        let mut missing = Vec::new();
        let want = frr.expected();
        // Without ldpd (segment routing) there is no LDP session to wait for or ask about.
        let up = if want.ldp_operational > 0 { frr.ldp_sessions_operational()? } else { 0 };
        if up < want.ldp_operational {
            missing.push(format!("{router}: {up} of {} LDP sessions up", want.ldp_operational));
            return Ok(missing);
        }
        if !PE_NAMES.contains(&router) {
            if self.variant.route_reflector {
                let up = frr.bgp_established("ipv4 vpn")?;
                if up < PE_NAMES.len() {
                    missing.push(format!(
                        "{router}: {up} of {} VPNv4 sessions (route reflector)",
                        PE_NAMES.len()
                    ));
                }
            }
            return Ok(missing);
        }
        if frr.bgp_established("ipv4 vpn")? < 1 {
            missing.push(format!("{router}: the VPNv4 session is not established"));
            return Ok(missing);
        }
        for v in vrfs_of(router) {
            for ipv6 in [false, true] {
                let want = expected_prefixes(v.name, ipv6)?;
                if want.is_empty() {
                    continue;
                }
                let have: BTreeSet<String> = frr
                    .vrf_routes(v.name, ipv6)?
                    .into_iter()
                    .filter(|r| r.selected)
                    .map(|r| r.prefix.to_string())
                    .collect();
                let lacking: Vec<String> = want.difference(&have).map(|p| p.to_string()).collect();
                if !lacking.is_empty() {
                    missing.push(format!("{router}: VRF {} lacks {}", v.name, lacking.join(" ")));
                }
            }
        }
        Ok(missing)
    }

    /// How vmpls's tables on `router` differ from FRR's: zebra connected over FPM, the
    /// label table, each VRF's routes. Empty when they are equal.
    pub fn vmpls_differences(&self, router: &str) -> anyhow::Result<Vec<String>> {
        if self.frr_counter(router, "connected")? != 1 {
            return Ok(vec![format!("{router}: zebra is not connected to vmpls")]);
        }
        let mut d: Vec<String> = diff(&self.frr_label_table(router)?, &self.vmpls_label_table(router)?)
            .into_iter()
            .map(|l| format!("{router} label {l}"))
            .collect();
        if PE_NAMES.contains(&router) {
            for v in vrfs_of(router) {
                let frr = self.frr_vrf_routes(router, v.name)?;
                // A VRF vmpls does not know is a difference, not the end of the check.
                match self.vmpls_vrf_routes(router, v.name) {
                    Ok(vmpls) => d.extend(
                        diff(&frr, &vmpls).into_iter().map(|l| format!("{router} vrf {} route {l}", v.name)),
                    ),
                    Err(e) => d.push(format!("{router} vrf {}: {e:#}", v.name)),
                }
            }
        }
        Ok(d)
    }

    /// How vmpls's VPN routes on PE `router` differ from BGP's VPN table, per VRF and
    /// family: the prefixes `show bgp ipv4 vpn` (`ipv6 vpn`) holds under the route
    /// distinguishers of the other PE's VRFs whose route target this VRF imports must be
    /// exactly the routes vmpls pushes a VPN label for in this VRF, each with the label
    /// of BGP's best path in the VRF (`show bgp vrf VRF ipv4 unicast PREFIX`:
    /// `remoteLabel`) at the bottom. Empty when they agree.
    pub fn bgp_vpn_differences(&self, router: &str) -> anyhow::Result<Vec<String>> {
        let frr = self.frr(router)?;
        let other = PE_NAMES.iter().find(|&&p| p != router).ok_or_else(|| anyhow!("no other PE"))?;
        let other_id = core(other)?.1;
        let mut d = Vec::new();
        let vmpls_routes: Vec<(String, RouteTable)> = vrfs_of(router)
            .iter()
            .map(|v| Ok((v.name.to_string(), self.vmpls_vrf_routes(router, v.name)?)))
            .collect::<anyhow::Result<_>>()?;
        for ipv6 in [false, true] {
            let family = if ipv6 { "ipv6" } else { "ipv4" };
            let vpn = frr.bgp_vpn_routes(ipv6)?;
            for v in vrfs_of(router).into_iter().filter(|v| v.ipv6 || !ipv6) {
                let mut want = BTreeSet::new();
                for w in vrfs_of(other).into_iter().filter(|w| v.rt_import.contains(&w.rt_export)) {
                    let rd = rd(other_id, w.name)?;
                    want.extend(vpn.get(&rd).into_iter().flatten().map(|p| p.to_string()));
                }
                let vmpls =
                    &vmpls_routes.iter().find(|(n, _)| n == v.name).ok_or_else(|| anyhow!("no VRF"))?.1;
                let labelled: BTreeMap<&String, BTreeSet<u32>> = vmpls
                    .iter()
                    .filter(|(p, hops)| p.contains(':') == ipv6 && hops.iter().any(|h| !h.labels.is_empty()))
                    .map(|(p, hops)| (p, hops.iter().filter_map(|h| h.labels.last().copied()).collect()))
                    .collect();
                for p in labelled.keys().filter(|p| !want.contains(p.as_str())) {
                    d.push(format!(
                        "{router} vrf {}: vmpls pushes a VPN label for {p}, not in show bgp {family} vpn",
                        v.name
                    ));
                }
                for p in &want {
                    let Some(labels) = labelled.get(p) else {
                        d.push(format!(
                            "{router} vrf {}: {p} of show bgp {family} vpn has no labelled route in vmpls",
                            v.name
                        ));
                        continue;
                    };
                    let best =
                        frr.vtysh_json(&format!("show bgp vrf {} {family} unicast {p} json", v.name))?;
                    let label = best["paths"]
                        .as_array()
                        .and_then(|paths| paths.iter().find(|p| p["bestpath"]["overall"] == true))
                        .and_then(|p| p["remoteLabel"].as_u64())
                        .and_then(|l| u32::try_from(l).ok());
                    if label.is_none() || labels.iter().any(|l| Some(*l) != label) {
                        d.push(format!(
                            "{router} vrf {}: {p}: BGP's best path has label {label:?}, vmpls pushes {labels:?}",
                            v.name
                        ));
                    }
                }
            }
        }
        Ok(d)
    }

    /// The VRFs of the PEs that have no VRF interface yet (an interface named like the
    /// VRF in its namespace, which the zebra module makes), as `pe/vrf`.
    pub fn vrfs_without_interface(&self) -> anyhow::Result<Vec<String>> {
        let mut missing = Vec::new();
        for pe in PE_NAMES {
            for v in vrfs_of(pe) {
                let script = format!("ip link show dev {} >/dev/null 2>&1 && echo yes || echo no", v.name);
                if self.vrf_sh(pe, v.name, &script)?.trim() != "yes" {
                    missing.push(format!("{pe}/{}", v.name));
                }
            }
        }
        Ok(missing)
    }

    /// Waits until every VRF of the PEs has its VRF interface; returns how long it took.
    pub fn wait_vrf_interfaces(&mut self, timeout: Duration) -> anyhow::Result<Duration> {
        self.wait_until(
            timeout,
            "VRFs without their VRF interface (does the zebra module make them?)",
            |lab| lab.vrfs_without_interface(),
        )
    }

    /// Waits until FRR has converged on every router ([`VpnLab::frr_missing`]); returns
    /// how long it took.
    pub fn wait_frr_converged(&mut self, timeout: Duration) -> anyhow::Result<Duration> {
        self.wait_until(timeout, "FRR not converged", |lab| {
            let mut m = Vec::new();
            for r in ROUTER_NAMES {
                m.extend(lab.frr_missing(r)?);
            }
            Ok(m)
        })
    }

    /// Waits until vmpls holds what zebra has on every router
    /// ([`VpnLab::vmpls_differences`]); returns how long it took.
    pub fn wait_synced(&mut self, timeout: Duration) -> anyhow::Result<Duration> {
        self.wait_until(timeout, "vmpls and FRR not in sync", |lab| {
            let mut m = Vec::new();
            for r in ROUTER_NAMES {
                m.extend(lab.vmpls_differences(r)?);
            }
            Ok(m)
        })
    }

    fn wait_until(
        &mut self,
        timeout: Duration,
        what: &str,
        mut missing: impl FnMut(&Self) -> anyhow::Result<Vec<String>>,
    ) -> anyhow::Result<Duration> {
        let start = Instant::now();
        loop {
            let m = missing(self);
            match m {
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

    /// Per VRF of each PE: routes in zebra (both families, all protocols) and in vmpls.
    pub fn vrf_summaries(&self) -> anyhow::Result<Vec<VrfResult>> {
        let mut v = Vec::new();
        for pe in PE_NAMES {
            let frr = self.frr(pe)?;
            for vrf in vrfs_of(pe) {
                let routes_frr =
                    frr.vrf_routes(vrf.name, false)?.len() + frr.vrf_routes(vrf.name, true)?.len();
                let routes_vmpls = if self.vmpls.is_empty() {
                    None
                } else {
                    let count = |args: &[&str]| -> Option<usize> {
                        self.vmpls_cli(pe, args).ok().and_then(|j| j.as_array().map(Vec::len))
                    };
                    match (
                        count(&["route", "show", "vrf", vrf.name]),
                        count(&["-6", "route", "show", "vrf", vrf.name]),
                    ) {
                        (Some(a), Some(b)) => Some(a + b),
                        _ => None,
                    }
                };
                v.push(VrfResult {
                    router: pe.to_string(),
                    name: vrf.name.to_string(),
                    routes_frr,
                    routes_vmpls,
                });
            }
        }
        Ok(v)
    }

    /// Per router: LDP sessions, VPN sessions, VPN prefixes, LSPs in FRR and vmpls.
    pub fn router_summaries(&self) -> anyhow::Result<Vec<VpnRouterResult>> {
        ROUTER_NAMES
            .iter()
            .map(|&name| {
                let frr = self.frr(name)?;
                let pe = PE_NAMES.contains(&name);
                let count = |ipv6| -> anyhow::Result<usize> {
                    Ok(frr.bgp_vpn_routes(ipv6)?.values().map(Vec::len).sum())
                };
                Ok(VpnRouterResult {
                    name: name.to_string(),
                    ldp_sessions_up: if frr.options().ldp.is_empty() {
                        0
                    } else {
                        frr.ldp_sessions_operational()?
                    },
                    vpn_sessions_up: if pe { frr.bgp_established("ipv4 vpn")? } else { 0 },
                    vpnv4_routes: if pe { count(false)? } else { 0 },
                    vpnv6_routes: if pe { count(true)? } else { 0 },
                    lsps_frr: frr.mpls_table()?.len(),
                    lsps_vmpls: if self.vmpls.is_empty() {
                        None
                    } else {
                        self.vmpls_label_table(name).ok().map(|t| t.len())
                    },
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

    /// Sends 3 echo requests from `from` to `to`; returns the replies and, for each
    /// host of `others` that received echo requests meanwhile, how many.
    pub fn pings_reaching(
        &self,
        from: &str,
        to: IpAddr,
        others: &[&str],
    ) -> anyhow::Result<(u32, Vec<(String, u64)>)> {
        let before = others.iter().map(|h| self.icmp_in_echos(h)).collect::<anyhow::Result<Vec<u64>>>()?;
        let opts = PingOptions { count: 3, timeout: Duration::from_millis(300), ..PingOptions::default() };
        let r = ping(self.topo.ns(from)?, to, &opts)?;
        let mut reached = Vec::new();
        for (h, b) in others.iter().zip(before) {
            let after = self.icmp_in_echos(h)?;
            if after != b {
                reached.push((h.to_string(), after.saturating_sub(b)));
            }
        }
        Ok((r.received, reached))
    }

    /// Checks that `from` never reaches `to` (no reply to 3 echo requests) and that
    /// none of them arrived at a host of `others` (the other customer's hosts, which
    /// share the addresses).
    pub fn check_isolated(&self, from: &str, to: IpAddr, others: &[&str]) -> anyhow::Result<()> {
        let (replies, reached) = self.pings_reaching(from, to, others)?;
        if replies > 0 {
            bail!("{from} got {replies} replies from {to}");
        }
        if !reached.is_empty() {
            bail!("echo requests from {from} to {to} reached {reached:?}");
        }
        Ok(())
    }

    /// Checks that `from`'s pings to `to` (an address both customers use) are answered
    /// and reach no host of `others`.
    pub fn check_own_host_only(&self, from: &str, to: IpAddr, others: &[&str]) -> anyhow::Result<()> {
        let (replies, reached) = self.pings_reaching(from, to, others)?;
        if !reached.is_empty() {
            bail!("echo requests from {from} to {to} reached {reached:?}");
        }
        if replies == 0 {
            bail!("{from} got no reply from {to}");
        }
        Ok(())
    }

    /// The echo requests host `host` received (`Icmp: InEchos` of its namespace, both
    /// families).
    pub fn icmp_in_echos(&self, host: &str) -> anyhow::Result<u64> {
        let texts = self.topo.in_host(host, || {
            let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp");
            let snmp6 = std::fs::read_to_string("/proc/thread-self/net/snmp6").unwrap_or_default();
            snmp.map(|s| (s, snmp6))
        })??;
        Ok(parse_in_echos(&texts.0, &texts.1))
    }

    /// `traceroute -e -n` from `from` to `to`.
    pub fn traceroute(&self, from: &str, to: IpAddr) -> anyhow::Result<Vec<TraceHop>> {
        crate::frr_lab::traceroute(&self.topo, from, to)
    }

    /// The content-checked TCP flow from `from` to `to`'s address on its link.
    pub fn run_flow(&self, from: &str, to: &str, opts: &FlowOptions) -> anyhow::Result<FlowResult> {
        let dst = if BASELINE_HOSTS.contains(&to) { KERNEL_BASELINE_DST.parse()? } else { ce_addr(to)? };
        run_flow(self.topo.ns(from)?, self.topo.ns(to)?, dst, opts, &mut |_| {})
    }

    /// Stops vmpls and FRR and removes the namespaces (also done on drop).
    pub fn cleanup(&mut self) -> anyhow::Result<()> {
        let mut first = self.stop_vmpls().err();
        for mut r in std::mem::take(&mut self.frr) {
            if let Err(e) = r.stop() {
                // zebra -n of FRR 8.4 crashes on SIGTERM: a stop that ended it counts.
                tracing::debug!("stopping FRR: {e:#}");
            }
        }
        if let Err(e) = self.topo.cleanup() {
            first.get_or_insert(e);
        }
        for (_, mut d) in std::mem::take(&mut self.vrf_dirs) {
            if let Err(e) = d.cleanup() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for VpnLab {
    fn drop(&mut self) {
        let _ = self.cleanup();
    }
}

/// The kernel-routed line k-ce1 -- k-pe1 -- k-p -- k-pe2 -- k-ce2 (the baseline of the
/// VPN and L2VPN labs) in `topo`: red's addresses, the labs' MTUs (1500 to the CEs,
/// 65535 in the core), static routes, IP forwarding on in the middle. k-ce2 is at
/// [`KERNEL_BASELINE_DST`].
pub(crate) fn build_kernel_baseline(topo: &mut Topology) -> anyhow::Result<()> {
    for h in BASELINE_HOSTS {
        topo.add_host_with(h, HostOptions { ipv6: false })?;
    }
    let links: [(&str, &str, &str, &str, &str, &str, u32); 4] = [
        ("k-ce1", "k-ce1-pe1", "198.18.1.2/24", "k-pe1", "k-pe1-ce1", "198.18.1.1/24", CUSTOMER_MTU),
        ("k-pe1", "k-pe1-p", "198.18.10.1/24", "k-p", "k-p-pe1", "198.18.10.2/24", CORE_MTU),
        ("k-p", "k-p-pe2", "198.18.20.1/24", "k-pe2", "k-pe2-p", "198.18.20.2/24", CORE_MTU),
        ("k-pe2", "k-pe2-ce2", "198.18.2.1/24", "k-ce2", "k-ce2-pe2", "198.18.2.2/24", CUSTOMER_MTU),
    ];
    for (a, a_if, a_addr, b, b_if, b_addr, mtu) in links {
        topo.add_link(a, a_if, b, b_if, mtu)?;
        topo.add_address(a, a_if, prefix(a_addr))?;
        topo.add_address(b, b_if, prefix(b_addr))?;
    }
    let ip = |s: &str| -> IpAddr { prefix(s).addr() };
    topo.add_default_route("k-ce1", ip("198.18.1.1/24"))?;
    topo.add_default_route("k-ce2", ip("198.18.2.1/24"))?;
    topo.add_route("k-pe1", prefix("198.18.2.0/24"), ip("198.18.10.2/24"))?;
    topo.add_route("k-p", prefix("198.18.1.0/24"), ip("198.18.10.1/24"))?;
    topo.add_route("k-p", prefix("198.18.2.0/24"), ip("198.18.20.2/24"))?;
    topo.add_route("k-pe2", prefix("198.18.1.0/24"), ip("198.18.20.1/24"))?;
    for h in ["k-pe1", "k-p", "k-pe2"] {
        topo.set_forwarding(h, true)?;
    }
    Ok(())
}

/// The address of k-ce2 in the kernel-routed baseline ([`build_kernel_baseline`]).
pub(crate) const KERNEL_BASELINE_DST: &str = "198.18.2.2";
/// The baseline's hosts a flow runs between: (sender, receiver at [`KERNEL_BASELINE_DST`]).
pub(crate) const KERNEL_BASELINE_ENDS: (&str, &str) = ("k-ce1", "k-ce2");

/// Fails with the command's output unless it succeeded; returns its stdout.
fn run_ok(out: std::process::Output, what: &str) -> anyhow::Result<String> {
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `Icmp: InEchos` of `/proc/net/snmp` plus `Icmp6InEchos` of `/proc/net/snmp6`.
fn parse_in_echos(snmp: &str, snmp6: &str) -> u64 {
    let mut lines = snmp.lines().filter(|l| l.starts_with("Icmp:"));
    let v4 = match (lines.next(), lines.next()) {
        (Some(names), Some(values)) => names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == "InEchos")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0),
        _ => 0,
    };
    let v6 = snmp6
        .lines()
        .filter_map(|l| l.split_once(char::is_whitespace))
        .find(|(n, _)| *n == "Icmp6InEchos")
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    v4 + v6
}

/// A VPN label's entry in the compared form: pop, then route in VRF `vrf`.
fn pop_into(vrf: &str) -> LabelHop {
    LabelHop { out_labels: Vec::new(), via: None, interface: Some(format!("vrf {vrf}")) }
}

/// The core interface of `router` whose subnet holds `via`.
fn core_interface_for(router: &str, via: Option<IpAddr>) -> Option<String> {
    let via = via?;
    let (_, _, ports) = core(router).ok()?;
    ports.iter().find(|p| prefix(p.1).contains(via)).map(|p| p.0.to_string())
}

/// FRR's next hops in the form vmpls's are compared in: the active ones but a
/// recursive (BGP) next hop, which is what zebra sends is what it resolves to (FRR 8.4
/// lists the resolvers with the whole stack, transport label over VPN label); implicit
/// null left out.
fn frr_hops(router: &str, nexthops: &[crate::frr::RouteNexthop]) -> BTreeSet<RouteHop> {
    nexthops
        .iter()
        .filter(|n| n.active && !n.recursive)
        .map(|n| RouteHop {
            labels: strip_imp_null(&n.labels),
            via: n.via,
            interface: n.interface.clone().or_else(|| core_interface_for(router, n.via)),
        })
        .collect()
}

/// vmpls's next hops on `router` in the lab's form: implicit null left out, ports named
/// by their interface.
fn vmpls_hops<'a>(router: &'a str, nexthops: &'a [api::Nexthop]) -> impl Iterator<Item = LabelHop> + 'a {
    nexthops.iter().map(move |n| LabelHop {
        out_labels: strip_imp_null(&n.labels),
        via: n.gateway,
        interface: n.dev.as_deref().and_then(|p| {
            router_interfaces(router)
                .ok()?
                .into_iter()
                .find(|i| port_name(router, i) == p)
                .map(str::to_string)
        }),
    })
}

/// One router of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VpnRouterResult {
    /// `pe1`, `p` or `pe2`.
    pub name: String,
    /// LDP sessions in state OPERATIONAL.
    pub ldp_sessions_up: usize,
    /// BGP VPNv4 sessions established.
    pub vpn_sessions_up: usize,
    /// Prefixes in BGP's VPNv4 table (all route distinguishers).
    pub vpnv4_routes: usize,
    /// Prefixes in BGP's VPNv6 table.
    pub vpnv6_routes: usize,
    /// Entries of FRR's `show mpls table`.
    pub lsps_frr: usize,
    /// Label routes of vmpls (`None`: not known).
    pub lsps_vmpls: Option<usize>,
}

/// One VRF of a PE in the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VrfResult {
    /// The PE.
    pub router: String,
    /// The VRF.
    pub name: String,
    /// Routes of the VRF in zebra (IPv4 and IPv6, all protocols).
    pub routes_frr: usize,
    /// Routes of the VRF in vmpls (`None`: vmpls does not know the VRF).
    pub routes_vmpls: Option<usize>,
}

/// The result of `vmpls lab vpn`.
#[derive(Debug, Clone, PartialEq)]
pub struct VpnLabReport {
    /// Per router.
    pub routers: Vec<VpnRouterResult>,
    /// Per VRF of each PE.
    pub vrfs: Vec<VrfResult>,
    /// Seconds from the daemons' start to FRR converged (every VRF's routes in zebra).
    pub frr_converged_s: f64,
    /// Seconds from the daemons' start to vmpls holding what zebra has (`None`: it did
    /// not).
    pub converged_s: Option<f64>,
    /// The checks: (what, `None` if it passed or why it failed).
    pub checks: Vec<(String, Option<String>)>,
    /// `traceroute -e` red-ce1 -> red-ce2.
    pub traceroute: Vec<String>,
    /// The flows.
    pub modes: Vec<ModeResult>,
    /// The work directory, if kept (after a failure).
    pub work_dir: Option<PathBuf>,
}

impl VpnLabReport {
    /// Whether every check and mode passed.
    pub fn ok(&self) -> bool {
        self.converged_s.is_some()
            && self.checks.iter().all(|c| c.1.is_none())
            && !self.modes.is_empty()
            && self.modes.iter().all(|m| m.error.is_none())
    }

    /// `{"routers": [...], "vrfs": [{"router", "name", "routes_frr", "routes_vmpls"}],
    /// "frr_converged_s", "converged_s", "checks": [{"name", "ok", "error"}], "modes":
    /// [{"name", "gbps", "retransmits", "ratio"}]}`.
    pub fn to_json(&self) -> Value {
        let routers: Vec<Value> = self
            .routers
            .iter()
            .map(|r| {
                serde_json::json!({
                    "name": r.name,
                    "ldp_sessions_up": r.ldp_sessions_up,
                    "vpn_sessions_up": r.vpn_sessions_up,
                    "vpnv4_routes": r.vpnv4_routes,
                    "vpnv6_routes": r.vpnv6_routes,
                    "lsps_frr": r.lsps_frr,
                    "lsps_vmpls": r.lsps_vmpls,
                })
            })
            .collect();
        let vrfs: Vec<Value> = self
            .vrfs
            .iter()
            .map(|v| {
                serde_json::json!({
                    "router": v.router, "name": v.name, "routes_frr": v.routes_frr, "routes_vmpls": v.routes_vmpls,
                })
            })
            .collect();
        let checks: Vec<Value> = self
            .checks
            .iter()
            .map(|(name, err)| serde_json::json!({"name": name, "ok": err.is_none(), "error": err}))
            .collect();
        let modes: Vec<Value> =
            self.rows().iter().map(|m| Value::Object(report::mode_json(m, JsonDetail::Summary))).collect();
        serde_json::json!({
            "routers": routers,
            "vrfs": vrfs,
            "frr_converged_s": self.frr_converged_s,
            "converged_s": self.converged_s,
            "checks": checks,
            "traceroute": self.traceroute,
            "modes": modes,
        })
    }

    /// The modes table, the routers and VRFs, the convergence times, the checks, the
    /// traceroute and the failures.
    pub fn to_markdown(&self) -> String {
        let rows = self.rows();
        let mut s = report::modes_table(&rows);
        let opt = |v: Option<usize>| v.map_or("-".to_string(), |n| n.to_string());
        s.push_str(
            "\n| router | LDP up | VPN sessions | VPNv4 routes | VPNv6 routes | LSPs FRR | LSPs vmpls |\n",
        );
        s.push_str(
            "|--------|-------:|-------------:|-------------:|-------------:|---------:|-----------:|\n",
        );
        for r in &self.routers {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.name,
                r.ldp_sessions_up,
                r.vpn_sessions_up,
                r.vpnv4_routes,
                r.vpnv6_routes,
                r.lsps_frr,
                opt(r.lsps_vmpls)
            );
        }
        s.push_str("\n| router | VRF | routes in FRR | routes in vmpls |\n|---|---|---:|---:|\n");
        for v in &self.vrfs {
            let _ = writeln!(s, "| {} | {} | {} | {} |", v.router, v.name, v.routes_frr, opt(v.routes_vmpls));
        }
        let _ = writeln!(
            s,
            "\nFRR converged in {:.2} s (daemons started -> every VRF's routes in zebra)",
            self.frr_converged_s
        );
        match self.converged_s {
            Some(t) => {
                let _ = writeln!(
                    s,
                    "vmpls converged in {t:.2} s (daemons started -> vmpls holds every route and label)"
                );
            }
            None => s.push_str("vmpls did not converge\n"),
        }
        s.push('\n');
        for (name, err) in &self.checks {
            let _ = writeln!(s, "- {name}: {}", if err.is_some() { "FAILED" } else { "ok" });
        }
        if !self.traceroute.is_empty() {
            let _ =
                writeln!(s, "\ntraceroute -e red-ce1 -> red-ce2:\n```\n{}\n```", self.traceroute.join("\n"));
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

/// What `vmpls lab vpn` does.
#[derive(Debug, Clone)]
pub struct VpnLabOptions {
    /// The `vmpls` binary.
    pub vmpls: PathBuf,
    /// How long each TCP flow runs.
    pub duration: Duration,
    /// Our zebra module (`vmpls_zebra.so`).
    pub zebra_module: PathBuf,
}

/// How long the lab waits for FRR to converge.
const FRR_TIMEOUT: Duration = Duration::from_secs(90);
/// How long zebra may take to make the VRF interfaces after it starts.
const VRF_INTERFACE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long it waits, after that, for vmpls to hold what zebra has.
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);
/// How long it waits for a ping to get through.
const REACH_TIMEOUT: Duration = Duration::from_secs(10);
/// Below this a flow counts as stalled.
const STALLED_GBPS: f64 = 0.01;

/// `traceroute -e` across the VPN: every hop answered (p too, whose error goes down the
/// LSP to the egress PE, RFC 3032 section 2.3.2), the core hop quoting the transport
/// and the VPN label (RFC 4950), and the last hop is `to`.
fn check_vpn_traceroute(hops: &[TraceHop], to: IpAddr) -> anyhow::Result<()> {
    let lines = || hops.iter().map(|h| h.line.as_str()).collect::<Vec<_>>();
    if hops.last().and_then(|h| h.addr) != Some(to) {
        bail!("did not reach {to}: {:?}", lines());
    }
    if let Some(h) = hops.iter().find(|h| h.addr.is_none()) {
        bail!("hop {} did not answer: {:?}", h.ttl, lines());
    }
    if !hops.iter().any(|h| h.labels.len() == 2) {
        bail!("no hop quotes the transport and the VPN label: {:?}", lines());
    }
    Ok(())
}

/// Runs the VPN lab (see the [module documentation](self)) and returns its report;
/// `progress` gets human-readable lines. Cleans up on return, error and Ctrl-C; the
/// work directory is kept when something failed.
pub fn run_vpn_lab(opts: &VpnLabOptions, progress: &mut dyn FnMut(&str)) -> anyhow::Result<VpnLabReport> {
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
    let work_dir = crate::temp_work_dir("vmpls-vpn-lab")?;
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
        Err(e) => Err(e.context(format!("VPN lab failed (configs and logs are in {})", work_dir.display()))),
    }
}

fn run_lab(
    opts: &VpnLabOptions,
    work_dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<VpnLabReport> {
    progress("building the VPN topology: red and blue CEs on pe1 and pe2, svc in VRF common on pe2");
    let mut lab = VpnLab::build(&opts.vmpls, work_dir)?;
    let mut checks = Vec::new();
    // zebra first: a VRF is known (to zebra's module, then to vmpls) once its VRF
    // interface exists, which zebra makes when it enables the VRF. zebra's FPM client
    // connects to vmpls once vmpls listens.
    progress(
        "starting FRR: zebra -n + module + FPM, ospfd, ldpd, bgpd (VPNv4/VPNv6) on the PEs; bgpd on the red CEs",
    );
    let started = Instant::now();
    lab.start_frr(&opts.zebra_module)?;
    if let Err(e) = lab.wait_vrf_interfaces(VRF_INTERFACE_TIMEOUT) {
        if is_interrupted(&e) {
            return Err(e);
        }
        progress(&format!("{e:#}"));
        checks.push(("zebra makes each VRF's interface".to_string(), Some(format!("{e:#}"))));
    }
    progress("starting vmpls in FRR mode on pe1, p, pe2 (the customer-facing ports in the VRFs' namespaces)");
    let vmpls_started = match lab.start_vmpls(false, true) {
        Ok(()) => true,
        Err(e) if is_interrupted(&e) => return Err(e),
        Err(e) => {
            progress(&format!("vmpls did not start with the customer-facing ports: {e:#}"));
            checks.push(("vmpls serves the ports in the VRFs".to_string(), Some(format!("{e:#}"))));
            progress(
                "starting vmpls with the core ports only (the default VRF), so that FRR's core converges",
            );
            lab.start_vmpls(false, false)?;
            false
        }
    };
    progress("waiting for LDP, the VPN sessions and every VRF's routes in zebra");
    lab.wait_frr_converged(FRR_TIMEOUT)?;
    let frr_converged_s = started.elapsed().as_secs_f64();
    progress(&format!("FRR converged in {frr_converged_s:.2} s"));
    let converged_s = if vmpls_started {
        progress("waiting for vmpls to hold every VRF's routes and every label zebra has");
        match lab.wait_synced(SYNC_TIMEOUT) {
            Ok(_) => {
                let t = started.elapsed().as_secs_f64();
                progress(&format!("vmpls converged in {t:.2} s: every VRF and label table equals FRR's"));
                Some(t)
            }
            Err(e) if is_interrupted(&e) => return Err(e),
            Err(e) => {
                progress(&format!("vmpls did not converge: {e:#}"));
                checks.push(("vmpls holds what zebra has".to_string(), Some(format!("{e:#}"))));
                None
            }
        }
    } else {
        None
    };
    let routers = lab.router_summaries()?;
    let vrfs = lab.vrf_summaries()?;

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
    for (from, to) in
        [("red-ce1", "red-ce2"), ("red-ce2", "red-ce1"), ("blue-ce1", "blue-ce2"), ("blue-ce2", "blue-ce1")]
    {
        let r = lab.check_ping(from, ce_addr(to)?, REACH_TIMEOUT);
        check(format!("ping {from} -> {to}"), r, progress)?;
    }
    let r = lab.check_ping("red-ce1", ce_addr_v6("red-ce2")?, REACH_TIMEOUT);
    check("ping -6 red-ce1 -> red-ce2 (6VPE)".into(), r, progress)?;
    for from in ["red-ce1", "blue-ce1"] {
        let r = lab.check_ping(from, ce_addr("svc")?, REACH_TIMEOUT);
        check(format!("ping {from} -> svc (common services)"), r, progress)?;
    }
    for to in ["red-ce1", "blue-ce1"] {
        let r = lab.check_ping("svc", loopback(to)?, REACH_TIMEOUT);
        check(format!("ping svc -> {to}'s loopback"), r, progress)?;
    }
    let isolation: [(&str, &str, &[&str]); 4] = [
        ("red-ce1", "blue-ce1", &["blue-ce1", "blue-ce2"]),
        ("red-ce1", "blue-ce2", &["blue-ce1", "blue-ce2"]),
        ("blue-ce1", "red-ce1", &["red-ce1", "red-ce2"]),
        ("blue-ce1", "red-ce2", &["red-ce1", "red-ce2"]),
    ];
    for (from, to, others) in isolation {
        let r = lab.check_isolated(from, loopback(to)?, others);
        check(format!("isolation: {from} never reaches {to}'s loopback"), r, progress)?;
    }
    // The overlapping addresses: each customer's pings to 198.18.2.2 reach its own CE.
    for (from, to, others) in
        [("red-ce1", "red-ce2", &["blue-ce1", "blue-ce2"]), ("blue-ce1", "blue-ce2", &["red-ce1", "red-ce2"])]
    {
        let r = lab.check_own_host_only(from, ce_addr(to)?, others);
        check(format!("isolation: {from}'s pings to {} reach {to} only", ce_addr(to)?), r, progress)?;
    }
    let traceroute = match lab.traceroute("red-ce1", ce_addr("red-ce2")?) {
        Ok(hops) => {
            let r = check_vpn_traceroute(&hops, ce_addr("red-ce2")?);
            check("traceroute -e red-ce1 -> red-ce2".into(), r, progress)?;
            hops.into_iter().map(|h| h.line).collect()
        }
        Err(e) => {
            check("traceroute -e red-ce1 -> red-ce2".into(), Err(e), progress)?;
            Vec::new()
        }
    };

    let flow_opts = FlowOptions { limit: Limit::Duration(opts.duration), ..FlowOptions::default() };
    let mut modes = Vec::new();
    for (name, from, to) in [
        ("kernel-ip", "k-ce1", "k-ce2"),
        ("vmpls-vpn-red", "red-ce1", "red-ce2"),
        ("vmpls-vpn-blue", "blue-ce1", "blue-ce2"),
    ] {
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
    // The fast path serves the core's label switching at p, the PEs' core ports and the
    // customer ports in the VRFs' namespaces (across each VRF's interface).
    let name = "vmpls-vpn-red-tc";
    check_interrupt()?;
    let result = if converged_s.is_none() {
        Err(anyhow!("not run: vmpls did not hold zebra's tables"))
    } else {
        progress(&format!("{name}: restarting vmpls with fast-path = \"tc\""));
        lab.start_vmpls(true, true).and_then(|()| lab.wait_synced(SYNC_TIMEOUT)).and_then(|t| {
            progress(&format!("{name}: vmpls holds zebra's tables again after {:.2} s", t.as_secs_f64()));
            lab.check_ping("red-ce1", ce_addr("red-ce2")?, REACH_TIMEOUT)?;
            progress(&format!("{name}: TCP red-ce1 -> red-ce2 for {:?}", opts.duration));
            lab.run_flow("red-ce1", "red-ce2", &flow_opts)
        })
    };
    match result {
        Ok(f) => {
            progress(&format!("{name}: {:.2} Gbit/s, {} retransmits", f.gbps, f.retransmits));
            let error = flow_problem(&f);
            modes.push(ModeResult { name: name.into(), flow: Some(f), ratio: None, error });
        }
        Err(e) if is_interrupted(&e) || interrupted() => return Err(e),
        Err(e) => modes.push(ModeResult {
            name: name.into(),
            flow: None,
            ratio: None,
            error: Some(format!("{e:#}")),
        }),
    }
    let gbps: Vec<Option<f64>> = modes.iter().map(|m| m.flow.as_ref().map(|f| f.gbps)).collect();
    for (m, ratio) in modes.iter_mut().zip(report::ratios(&gbps, |_| Some(0))) {
        m.ratio = ratio;
    }
    lab.cleanup()?;
    Ok(VpnLabReport {
        routers,
        vrfs,
        frr_converged_s,
        converged_s,
        checks,
        traceroute,
        modes,
        work_dir: None,
    })
}

/// Why a flow counts as failed, if it does.
pub(crate) fn flow_problem(f: &FlowResult) -> Option<String> {
    if !f.content_ok {
        Some(match f.first_mismatch {
            Some(at) => format!("received data differs from what was sent, first at byte {at}"),
            None => format!("sent {} bytes but received {}", f.bytes_sent, f.bytes_received),
        })
    } else if f.gbps < STALLED_GBPS {
        Some(format!("the flow stalled: {} bytes in {:.1} s", f.bytes_received, f.seconds))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vpn_traceroute_check_wants_every_hop_and_the_core_hops_two_labels() {
        let to = ce_addr("red-ce2").unwrap();
        let good = " 1  198.18.1.1  0.268 ms\n 2  198.18.255.2 <MPLS:L=17,E=0,S=0,T=1/L=80,E=0,S=1,T=1>  0.518 ms\n 3  198.18.2.1 <MPLS:L=80,E=0,S=1,T=1>  0.786 ms\n 4  198.18.2.2  0.800 ms\n";
        check_vpn_traceroute(&crate::frr_lab::parse_traceroute(good), to).unwrap();
        let star = good.replace("198.18.255.2 <MPLS:L=17,E=0,S=0,T=1/L=80,E=0,S=1,T=1>  0.518 ms", "*");
        let e = check_vpn_traceroute(&crate::frr_lab::parse_traceroute(&star), to).unwrap_err();
        assert!(e.to_string().contains("hop 2 did not answer"), "{e}");
        let one_label = good.replace("L=17,E=0,S=0,T=1/", "");
        assert!(check_vpn_traceroute(&crate::frr_lab::parse_traceroute(&one_label), to).is_err());
        let short: String = good.lines().take(3).map(|l| format!("{l}\n")).collect();
        assert!(check_vpn_traceroute(&crate::frr_lab::parse_traceroute(&short), to).is_err());
    }

    #[test]
    fn hub_and_spoke_prefixes() {
        let red: Vec<String> = expected_prefixes("red", false).unwrap().into_iter().collect();
        assert_eq!(
            red,
            ["198.18.1.0/24", "198.18.2.0/24", "198.18.201.1/32", "198.18.203.1/32", "198.18.3.0/24"],
            "red sees its own sites and common, never blue's loopbacks"
        );
        let common = expected_prefixes("common", false).unwrap();
        for lo in ["198.18.201.1/32", "198.18.202.1/32", "198.18.203.1/32", "198.18.204.1/32"] {
            assert!(common.contains(lo), "common lacks {lo}");
        }
        assert!(expected_prefixes("blue", true).unwrap().is_empty());
        assert_eq!(expected_prefixes("red", true).unwrap().len(), 3);
    }

    #[test]
    fn the_segment_routing_variants_run_no_ldpd_and_give_each_loopback_a_sid() {
        let isis = VpnVariant { transport: Transport::IsisSr, ..VpnVariant::default() };
        for (router, index) in [("pe1", 1), ("p", 2), ("pe2", 3)] {
            let o = frr_options_with(router, isis).unwrap();
            assert!(o.ldp.is_empty() && o.ospf.is_empty() && !o.isis.is_empty(), "{router}: {o:?}");
            let conf = o.config(crate::frr::Daemon::Isisd, Path::new("/x"));
            let sid = format!(" segment-routing prefix 198.18.255.{index}/32 index {index}\n");
            assert!(conf.contains(&sid) && conf.contains("router isis 1\n segment-routing on\n"), "{conf}");
        }
        let v = VpnVariant { transport: Transport::OspfSr, ..VpnVariant::default() };
        for (router, index) in [("pe1", 1), ("p", 2), ("pe2", 3)] {
            let o = frr_options_with(router, v).unwrap();
            assert!(o.ldp.is_empty(), "{router}: {:?}", o.ldp);
            let ospf = o.config(crate::frr::Daemon::Ospfd, Path::new("/x"));
            for line in [
                " segment-routing on\n".to_string(),
                " segment-routing global-block 16000 23999\n".to_string(),
                format!(" segment-routing prefix 198.18.255.{index}/32 index {index}\n"),
            ] {
                assert!(ospf.contains(&line), "{router}: {line:?} missing in\n{ospf}");
            }
        }
        assert!(!frr_options("pe1").unwrap().ldp.is_empty(), "LDP by default");
    }

    #[test]
    fn pe_configs_have_the_vpn() {
        let pe1 = frr_options("pe1").unwrap();
        let bgp = pe1.config(crate::frr::Daemon::Bgpd, Path::new("/x"));
        for line in [
            "router bgp 65000\n",
            " neighbor 198.18.255.3 update-source lo\n",
            " address-family ipv4 vpn\n  neighbor 198.18.255.3 activate\n",
            " address-family ipv6 vpn\n  neighbor 198.18.255.3 activate\n",
            "router bgp 65000 vrf red\n",
            " neighbor 198.18.1.2 remote-as 65101\n",
            " neighbor 2001:db8:1::2 remote-as 65101\n",
            "  rd vpn export 198.18.255.1:1\n",
            "  rt vpn import 65000:1 65000:100\n",
            "  label vpn export auto\n",
            "router bgp 65000 vrf blue\n",
            "  rt vpn export 65000:2\n",
        ] {
            assert!(bgp.contains(line), "{line:?} missing in\n{bgp}");
        }
        assert!(!bgp.contains("vrf common"), "{bgp}");
        let statics = pe1.config(crate::frr::Daemon::Staticd, Path::new("/x"));
        assert!(statics.contains("vrf blue\n ip route 198.18.202.1/32 198.18.1.2\nexit-vrf\n"), "{statics}");
        let pe2 = frr_options("pe2").unwrap().config(crate::frr::Daemon::Bgpd, Path::new("/x"));
        assert!(pe2.contains("router bgp 65000 vrf common\n"), "{pe2}");
        assert!(pe2.contains("  rt vpn import 65000:1 65000:2 65000:100\n"), "{pe2}");
        let ce = frr_options("red-ce1").unwrap().config(crate::frr::Daemon::Bgpd, Path::new("/x"));
        assert!(ce.contains("router bgp 65101\n") && ce.contains("  redistribute connected\n"), "{ce}");
        assert!(frr_options("blue-ce1").is_err());
    }

    #[test]
    fn variants_configure_a_route_reflector_and_ce_pe_ospf() {
        let v = VpnVariant { route_reflector: true, blue_ospf: true, ..VpnVariant::default() };
        let p = frr_options_with("p", v).unwrap().config(crate::frr::Daemon::Bgpd, Path::new("/x"));
        for line in [
            " address-family ipv4 vpn\n  neighbor 198.18.255.1 activate\n  neighbor 198.18.255.1 route-reflector-client\n",
            "  neighbor 198.18.255.3 route-reflector-client\n",
        ] {
            assert!(p.contains(line), "{line:?} missing in\n{p}");
        }
        let pe1 = frr_options_with("pe1", v).unwrap();
        let bgp = pe1.config(crate::frr::Daemon::Bgpd, Path::new("/x"));
        assert!(bgp.contains(" neighbor 198.18.255.2 remote-as 65000\n"), "{bgp}");
        assert!(!bgp.contains("198.18.255.3"), "no session with pe2 under a route reflector: {bgp}");
        assert!(
            bgp.contains("router bgp 65000 vrf blue\n") && bgp.contains("  redistribute ospf\n"),
            "{bgp}"
        );
        let ospf = pe1.config(crate::frr::Daemon::Ospfd, Path::new("/x"));
        assert!(
            ospf.contains("router ospf vrf blue\n") && ospf.contains(" network 198.18.1.0/24 area 0\n"),
            "{ospf}"
        );
        let statics = pe1.config(crate::frr::Daemon::Staticd, Path::new("/x"));
        assert!(!statics.contains("vrf blue"), "blue's routes come from OSPF: {statics}");
        let ce = frr_options_with("blue-ce1", v).unwrap();
        assert_eq!(ce.ospf, [OspfInterface::p2p("blue-ce1-pe1")]);
        assert!(ce.bgp.is_none());
        assert_eq!(v.frr_ces(), ["red-ce1", "blue-ce1", "red-ce2", "blue-ce2"]);
        assert_eq!(VpnVariant::default().frr_ces(), ["red-ce1", "red-ce2"]);
    }

    #[test]
    fn vmpls_configs_serve_core_and_customer_ports() {
        let c = vmpls_config("pe2", Path::new("/s"), false, true).unwrap();
        for port in [
            "name = \"core\"\ninterface = \"pe2-p\"",
            "name = \"red\"\ninterface = \"pe2-red\"",
            "name = \"common\"\ninterface = \"pe2-common\"",
        ] {
            assert!(c.contains(port), "{port:?} missing in\n{c}");
        }
        assert!(vmpls_config("p", Path::new("/s"), false, true).unwrap().contains("interface = \"p-pe2\""));
        let core_only = vmpls_config("pe2", Path::new("/s"), false, false).unwrap();
        assert!(core_only.contains("pe2-p") && !core_only.contains("pe2-red"), "{core_only}");
    }

    /// FRR 8.4's `show ip route vrf red json` on pe1 for red's remote subnet: the BGP
    /// next hop with the VPN label (80), resolved over LDP (p's label 17 for pe2's
    /// loopback), the resolver listing the whole stack.
    #[test]
    fn vpn_routes_compare_by_their_resolved_next_hops() {
        let json: Value = serde_json::from_str(
            r#"{"198.18.2.0/24":[{"prefix":"198.18.2.0/24","protocol":"bgp","vrfName":"red","selected":true,
              "installed":true,"table":254,"nexthops":[
              {"flags":5,"ip":"198.18.255.3","afi":"ipv4","vrf":"default","active":true,"recursive":true,
               "labels":[80],"weight":1},
              {"flags":3,"fib":true,"ip":"198.18.10.2","afi":"ipv4","interfaceIndex":2,"interfaceName":"pe1-p",
               "resolver":true,"vrf":"default","active":true,"labels":[17,80],"weight":1}]}]}"#,
        )
        .unwrap();
        let routes = crate::frr::parse_ip_routes_json(&json).unwrap();
        let hops = frr_hops("pe1", &routes[0].nexthops);
        assert_eq!(
            hops.into_iter().collect::<Vec<_>>(),
            [RouteHop {
                labels: vec![17, 80],
                via: Some("198.18.10.2".parse().unwrap()),
                interface: Some("pe1-p".into())
            }]
        );
    }

    /// `VMPLS_BLESS=1 cargo test -p vmpls-lab --lib vpn_lab` rewrites `examples/frr/vpn/`.
    #[test]
    fn examples_match_generated_configs() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/frr/vpn");
        let bless = std::env::var_os("VMPLS_BLESS").is_some();
        let check = |path: PathBuf, text: String| {
            if bless {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &text).unwrap();
            }
            let file = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(file, text, "{} differs from what the VPN lab generates", path.display());
        };
        for router in ["pe1", "p", "pe2", "red-ce1", "red-ce2"] {
            let o = frr_options(router).unwrap();
            let dir = Path::new("/run/vmpls-frr").join(router);
            for d in o.daemons() {
                check(root.join(router).join(format!("{}.conf", d.name())), o.config(d, &dir));
            }
            if ROUTER_NAMES.contains(&router) {
                let socket = Path::new("/run/vmpls-frr").join(format!("{router}.sock"));
                check(
                    root.join(router).join("vmpls.toml"),
                    vmpls_config(router, &socket, false, true).unwrap(),
                );
            }
        }
    }

    #[test]
    fn counts_echo_requests() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 2 64\nIcmp: InMsgs InErrors InCsumErrors InDestUnreachs InTimeExcds InParmProbs InSrcQuenchs InRedirects InEchos\nIcmp: 9 0 0 1 0 0 0 0 7\n";
        assert_eq!(
            parse_in_echos(
                snmp,
                "Icmp6InMsgs                     \t3\nIcmp6InEchos                    \t2\n"
            ),
            9
        );
        assert_eq!(parse_in_echos("", ""), 0);
    }
}
