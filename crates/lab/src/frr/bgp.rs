//! bgpd's config for the labs: a default instance (iBGP VPNv4/VPNv6 between PEs'
//! loopbacks, or a CE's eBGP session) and one `router bgp ASN vrf NAME` per VRF with
//! its route distinguisher, route targets and VPN label.

use super::*;

/// An address family a BGP session carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BgpFamily {
    /// `ipv4 unicast`.
    Ipv4Unicast,
    /// `ipv6 unicast`.
    Ipv6Unicast,
    /// `ipv4 vpn` (VPNv4, RFC 4364).
    Ipv4Vpn,
    /// `ipv6 vpn` (VPNv6 / 6VPE, RFC 4659).
    Ipv6Vpn,
}

impl BgpFamily {
    fn keyword(self) -> &'static str {
        match self {
            BgpFamily::Ipv4Unicast => "ipv4 unicast",
            BgpFamily::Ipv6Unicast => "ipv6 unicast",
            BgpFamily::Ipv4Vpn => "ipv4 vpn",
            BgpFamily::Ipv6Vpn => "ipv6 vpn",
        }
    }
}

/// Whom a BGP session is with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BgpPeer {
    /// The peer's address.
    Address(IpAddr),
    /// Whoever is at the other end of an interface (`neighbor IF interface`): BGP
    /// unnumbered, the session over IPv6 link-local addresses learned from router
    /// advertisements, IPv4 routes with IPv6 next hops (RFC 8950).
    Interface(String),
}

impl From<IpAddr> for BgpPeer {
    fn from(addr: IpAddr) -> Self {
        BgpPeer::Address(addr)
    }
}

impl std::fmt::Display for BgpPeer {
    /// As `neighbor` names it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BgpPeer::Address(a) => write!(f, "{a}"),
            BgpPeer::Interface(i) => f.write_str(i),
        }
    }
}

/// One BGP session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BgpNeighbor {
    /// The peer.
    pub peer: BgpPeer,
    /// The peer's AS (the same as ours: iBGP).
    pub remote_as: u32,
    /// `neighbor ADDR update-source IF` (iBGP between loopbacks: `lo`).
    pub update_source: Option<String>,
    /// The families activated on it.
    pub families: Vec<BgpFamily>,
    /// `neighbor ADDR route-reflector-client` in each of its families (we reflect its
    /// routes to the other clients: RFC 4456).
    pub route_reflector_client: bool,
}

/// A customer VRF's BGP instance (`router bgp ASN vrf NAME`): its connected and static
/// routes and what its CEs advertise are exported to VPN with `rd` and `rt_export`, and
/// VPN routes carrying one of `rt_import` are imported into it. The VPN label is one
/// per VRF (`label vpn export auto`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BgpVrf {
    /// The VRF (a network namespace with `zebra -n`).
    pub name: String,
    /// Route distinguisher, `ASN:N`.
    pub rd: String,
    /// Route targets imported (a spoke imports its own and the hub's).
    pub rt_import: Vec<String>,
    /// Route targets its routes are exported with.
    pub rt_export: Vec<String>,
    /// eBGP sessions with the VRF's CEs.
    pub neighbors: Vec<BgpNeighbor>,
    /// Whether IPv6 unicast is exported and imported too (VPNv6).
    pub ipv6: bool,
    /// `redistribute ospf` too: the VRF's CEs speak OSPF with its `router ospf vrf NAME`.
    pub redistribute_ospf: bool,
}

/// What bgpd runs: the default instance and the VRF instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BgpOptions {
    /// Our AS.
    pub asn: u32,
    /// Sessions of the default instance.
    pub neighbors: Vec<BgpNeighbor>,
    /// Advertise the connected routes in the default instance (a CE's loopback).
    pub redistribute_connected: bool,
    /// One instance per customer VRF.
    pub vrfs: Vec<BgpVrf>,
}

impl BgpOptions {
    /// bgpd's config for a router with id `router_id`: fast timers (keepalive 1 s, hold
    /// 3 s, reconnect after 1 s, no advertisement delay), no policy required for eBGP.
    pub(super) fn render(&self, router_id: Ipv4Addr, c: &mut String) {
        let families =
            [BgpFamily::Ipv4Unicast, BgpFamily::Ipv6Unicast, BgpFamily::Ipv4Vpn, BgpFamily::Ipv6Vpn];
        let _ = writeln!(c, "router bgp {}", self.asn);
        instance_head(c, router_id, &self.neighbors);
        for family in families {
            let active: Vec<&BgpNeighbor> =
                self.neighbors.iter().filter(|n| n.families.contains(&family)).collect();
            let redistribute = self.redistribute_connected
                && matches!(family, BgpFamily::Ipv4Unicast | BgpFamily::Ipv6Unicast);
            if active.is_empty() && !redistribute {
                continue;
            }
            let _ = writeln!(c, " address-family {}", family.keyword());
            if redistribute {
                let _ = writeln!(c, "  redistribute connected");
            }
            for n in active {
                let _ = writeln!(c, "  neighbor {} activate", n.peer);
                if n.route_reflector_client {
                    let _ = writeln!(c, "  neighbor {} route-reflector-client", n.peer);
                }
            }
            let _ = writeln!(c, " exit-address-family");
        }
        let _ = writeln!(c, "exit\n!");
        for v in &self.vrfs {
            let _ = writeln!(c, "router bgp {} vrf {}", self.asn, v.name);
            instance_head(c, router_id, &v.neighbors);
            let unicast: &[BgpFamily] = if v.ipv6 {
                &[BgpFamily::Ipv4Unicast, BgpFamily::Ipv6Unicast]
            } else {
                &[BgpFamily::Ipv4Unicast]
            };
            for &family in unicast {
                let _ = writeln!(c, " address-family {}", family.keyword());
                let _ = writeln!(c, "  redistribute connected");
                let _ = writeln!(c, "  redistribute static");
                if v.redistribute_ospf && family == BgpFamily::Ipv4Unicast {
                    let _ = writeln!(c, "  redistribute ospf");
                }
                for n in v.neighbors.iter().filter(|n| n.families.contains(&family)) {
                    let _ = writeln!(c, "  neighbor {} activate", n.peer);
                }
                let _ = writeln!(c, "  label vpn export auto");
                let _ = writeln!(c, "  rd vpn export {}", v.rd);
                let _ = writeln!(c, "  rt vpn import {}", v.rt_import.join(" "));
                let _ = writeln!(c, "  rt vpn export {}", v.rt_export.join(" "));
                let _ = writeln!(c, "  export vpn");
                let _ = writeln!(c, "  import vpn");
                let _ = writeln!(c, " exit-address-family");
            }
            let _ = writeln!(c, "exit\n!");
        }
    }
}

/// The lines every instance starts with: router id, no default IPv4 activation (each
/// family is activated where it is wanted), the sessions and their timers.
fn instance_head(c: &mut String, router_id: Ipv4Addr, neighbors: &[BgpNeighbor]) {
    let _ = writeln!(c, " bgp router-id {router_id}");
    let _ = writeln!(c, " no bgp ebgp-requires-policy");
    let _ = writeln!(c, " no bgp default ipv4-unicast");
    let _ = writeln!(c, " timers bgp 1 3");
    for n in neighbors {
        let interface = if matches!(n.peer, BgpPeer::Interface(_)) { " interface" } else { "" };
        let _ = writeln!(c, " neighbor {}{interface} remote-as {}", n.peer, n.remote_as);
        if let Some(source) = &n.update_source {
            let _ = writeln!(c, " neighbor {} update-source {source}", n.peer);
        }
        let _ = writeln!(c, " neighbor {} timers connect 1", n.peer);
        let _ = writeln!(c, " neighbor {} advertisement-interval 0", n.peer);
    }
}
