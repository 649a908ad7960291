//! The seed lab split over two "hosts": network namespaces `h1` and `h2` joined only by
//! an IP underlay, the way containerlab joins nodes on two machines.
//!
//! ```text
//!   host h1                                        host h2
//!  ┌──────────────────────────┐                   ┌────────────────────────────────────┐
//!  │ ce1 ── pe1 ┄┄ VXLAN 42 / │ h1-u ════════ h2-u│ VXLAN 42 / ┄┄ p ── pe2 ── ce2       │
//!  │            MPLS-in-UDP   │ 198.18.100.1/30   │ MPLS-in-UDP                          │
//!  │                          │ 2001:db8:100::1   │ 198.18.100.2, 2001:db8:100::2        │
//!  └──────────────────────────┘                   └────────────────────────────────────┘
//! ```
//!
//! The pe1 -- p link (`pe1-p` / `p-pe1`) is, as containerlab makes it, a VXLAN device
//! created in each host (VNI 42, UDP 4789, over the underlay, MTU 1450) and moved into
//! its node. Kernel IP routing and vmpls over AF_PACKET use it as they use a veth. The
//! MPLS-in-UDP modes leave it alone: pe1's `core` and p's `west` ports are `kind = "udp"`
//! tunnels whose sockets live in the host's namespace (`netns`), as a VXLAN device's do.
//! Every other link is the seed's.
//!
//! The in-kernel fast path serves an MPLS-in-UDP port only when the port's socket is in
//! the router's own namespace (a TC program redirects only to interfaces of its
//! namespace, and takes the tunnel's datagrams at the underlay interface's ingress). So
//! pe1 and p also have an underlay link of their own, a veth to their host that the host
//! routes (`pe1-u` -- `h1-pe1`, `p-u` -- `h2-p`, 198.18.101.0/30 and 198.18.102.0/30,
//! 2001:db8:101::/64 and 2001:db8:102::/64), as a container on a bridge or a routed veth
//! has; with [`SeedLab::set_udp_tunnel_in_routers`](crate::seed::SeedLab) the tunnel runs
//! between the routers' addresses there, sockets in the routers' namespaces
//! (`vmpls-mpls-tc-udp`):
//!
//! ```text
//!  pe1 ── pe1-u ═ h1-pe1 ─ h1 (routes) ─ h1-u ═══ h2-u ─ h2 (routes) ─ h2-p ═ p-u ── p
//! ```
//!
//! The namespaces, the underlay and the VXLAN devices are created with `ip` (VXLAN
//! devices, and moving them between namespaces, are one command each).

use std::net::IpAddr;
use std::process::Command;

use anyhow::{Context, bail};

use crate::seed_config::{RouterConfig, SeedParams, router_configs};
use crate::topology::Topology;

/// The first host (ce1, pe1).
pub const H1: &str = "h1";
/// The second host (p, pe2, ce2).
pub const H2: &str = "h2";
/// The underlay interfaces (h1's, h2's).
pub const H1_IF: &str = "h1-u";
pub const H2_IF: &str = "h2-u";
/// The underlay addresses (IPv4, IPv6) of h1 and h2.
pub const H1_UNDERLAY: [&str; 2] = ["198.18.100.1", "2001:db8:100::1"];
/// h2's underlay addresses.
pub const H2_UNDERLAY: [&str; 2] = ["198.18.100.2", "2001:db8:100::2"];
/// The underlay's MTU (an ordinary Ethernet between machines).
pub const UNDERLAY_MTU: u32 = 1500;
/// A router's own underlay link: a veth to its host, which routes it.
struct RouterUnderlay {
    router: &'static str,
    router_if: &'static str,
    host: &'static str,
    host_if: &'static str,
    /// The router's addresses (IPv4, IPv6).
    router_addrs: [&'static str; 2],
    /// The host's addresses (IPv4, IPv6): the router's gateway.
    host_addrs: [&'static str; 2],
}

/// pe1's and p's own underlay links.
const ROUTER_UNDERLAY: [RouterUnderlay; 2] = [
    RouterUnderlay {
        router: "pe1",
        router_if: "pe1-u",
        host: H1,
        host_if: "h1-pe1",
        router_addrs: ["198.18.101.2", "2001:db8:101::2"],
        host_addrs: ["198.18.101.1", "2001:db8:101::1"],
    },
    RouterUnderlay {
        router: "p",
        router_if: "p-u",
        host: H2,
        host_if: "h2-p",
        router_addrs: ["198.18.102.2", "2001:db8:102::2"],
        host_addrs: ["198.18.102.1", "2001:db8:102::1"],
    },
];
/// The VXLAN network identifier of the pe1 -- p link.
const VNI: &str = "42";
/// The seed link split over the hosts (pe1's end).
pub(crate) const SPLIT_LINK: &str = "pe1-p";

fn ip(host: &str, topo: &Topology, args: &[&str]) -> anyhow::Result<()> {
    let mut cmd = Command::new("ip");
    cmd.args(args);
    let out = topo.run(host, cmd).with_context(|| format!("running ip {}", args.join(" ")))?;
    if !out.status.success() {
        bail!("ip {} on {host} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Adds the hosts h1 and h2 and the underlay link between them, with addresses.
pub(crate) fn build_underlay(topo: &mut Topology) -> anyhow::Result<()> {
    topo.add_host(H1)?;
    topo.add_host(H2)?;
    topo.add_link(H1, H1_IF, H2, H2_IF, UNDERLAY_MTU)?;
    for (host, ifname, addrs) in [(H1, H1_IF, H1_UNDERLAY), (H2, H2_IF, H2_UNDERLAY)] {
        topo.add_address(host, ifname, format!("{}/30", addrs[0]).parse()?)?;
        topo.add_address(host, ifname, format!("{}/64", addrs[1]).parse()?)?;
    }
    Ok(())
}

/// Gives pe1 and p an underlay link of their own to their host (see the module docs):
/// addresses without duplicate address detection (the tunnel's sockets bind to them at
/// once), routes in the routers toward the other router's link, and in the hosts toward
/// the other host's router, forwarding in the hosts.
pub(crate) fn add_router_underlay(topo: &mut Topology) -> anyhow::Result<()> {
    for u in &ROUTER_UNDERLAY {
        topo.add_link(u.router, u.router_if, u.host, u.host_if, UNDERLAY_MTU)?;
        for (node, ifname, addrs) in
            [(u.router, u.router_if, u.router_addrs), (u.host, u.host_if, u.host_addrs)]
        {
            topo.set_ipv6(node, ifname, true)?;
            topo.set_sysctl(node, &format!("net/ipv6/conf/{ifname}/accept_dad"), "0")?;
            topo.add_address(node, ifname, format!("{}/30", addrs[0]).parse()?)?;
            topo.add_address(node, ifname, format!("{}/64", addrs[1]).parse()?)?;
        }
        topo.set_forwarding(u.host, true)?;
    }
    let [pe1, p] = &ROUTER_UNDERLAY;
    let (pe1, h1, p, h2) = (pe1.router_addrs, pe1.host_addrs, p.router_addrs, p.host_addrs);
    let net = |a: &str, v6: bool| -> anyhow::Result<crate::IpPrefix> {
        let a: IpAddr = a.parse()?;
        Ok(match a {
            IpAddr::V4(a) if !v6 => format!("{}/30", std::net::Ipv4Addr::from(u32::from(a) & !3)).parse()?,
            IpAddr::V6(a) => {
                format!("{}/64", std::net::Ipv6Addr::from(u128::from(a) & !0xffff_ffff_ffff_ffff)).parse()?
            }
            IpAddr::V4(_) => bail!("an IPv4 address for an IPv6 prefix"),
        })
    };
    for i in 0..2 {
        let v6 = i == 1;
        topo.add_route("pe1", net(p[i], v6)?, h1[i].parse()?)?;
        topo.add_route("p", net(pe1[i], v6)?, h2[i].parse()?)?;
        topo.add_route(H1, net(p[i], v6)?, H2_UNDERLAY[i].parse()?)?;
        topo.add_route(H2, net(pe1[i], v6)?, H1_UNDERLAY[i].parse()?)?;
    }
    Ok(())
}

/// The addresses of pe1's and p's own underlay links in one family.
pub fn router_underlay(v6: bool) -> (IpAddr, IpAddr) {
    let i = usize::from(v6);
    let [pe1, p] = &ROUTER_UNDERLAY;
    let (pe1, p) = (pe1.router_addrs, p.router_addrs);
    // The constants are valid addresses.
    (pe1[i].parse().unwrap_or(IpAddr::from([0, 0, 0, 0])), p[i].parse().unwrap_or(IpAddr::from([0, 0, 0, 0])))
}

/// Creates the VXLAN device of the pe1 -- p link in each host and moves it into the
/// node under the seed's interface name, up.
pub(crate) fn add_vxlan_core(topo: &mut Topology) -> anyhow::Result<()> {
    for (host, ifname, node, node_if, local, remote) in [
        (H1, H1_IF, "pe1", "pe1-p", H1_UNDERLAY[0], H2_UNDERLAY[0]),
        (H2, H2_IF, "p", "p-pe1", H2_UNDERLAY[0], H1_UNDERLAY[0]),
    ] {
        let node_ns = topo.ns(node)?.to_string();
        let args = [
            "link", "add", node_if, "type", "vxlan", "id", VNI, "local", local, "remote", remote, "dstport",
            "4789", "dev", ifname,
        ];
        ip(host, topo, &args)?;
        ip(host, topo, &["link", "set", node_if, "netns", &node_ns])?;
        topo.set_up(node, node_if, true)?;
    }
    Ok(())
}

/// The underlay addresses of h1 and h2 in one family.
pub fn underlay(v6: bool) -> (IpAddr, IpAddr) {
    let i = usize::from(v6);
    // The constants are valid addresses.
    (
        H1_UNDERLAY[i].parse().unwrap_or(IpAddr::from([0, 0, 0, 0])),
        H2_UNDERLAY[i].parse().unwrap_or(IpAddr::from([0, 0, 0, 0])),
    )
}

/// The seed's router configs with pe1's `core` and p's `west` port as MPLS-in-UDP
/// tunnels over the IPv6 underlay (`v6`) or the IPv4 one: their sockets in h1's and h2's
/// namespaces, or (`in_routers`) in the routers' own, over their own underlay links.
pub fn udp_core_configs(
    params: &SeedParams,
    topo: &Topology,
    v6: bool,
    in_routers: bool,
) -> anyhow::Result<Vec<RouterConfig>> {
    let (a, b) = if in_routers { router_underlay(v6) } else { underlay(v6) };
    let mut cfgs = router_configs(params);
    for (router, ifname, host, local, remote) in [("pe1", "pe1-p", H1, a, b), ("p", "p-pe1", H2, b, a)] {
        let ns = topo.ns(host)?;
        let cfg = cfgs.iter_mut().find(|c| c.router == router).context("no such router config")?;
        let from = format!("interface = \"{ifname}\"\n");
        if !cfg.toml.contains(&from) {
            bail!("{router}'s config has no port on {ifname}");
        }
        let netns = if in_routers { String::new() } else { format!("netns = \"{ns}\"\n") };
        let to = format!("kind = \"udp\"\nlocal = \"{local}\"\nremote = \"{remote}\"\n{netns}");
        cfg.toml = cfg.toml.replacen(&from, &to, 1);
    }
    Ok(cfgs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_link_and_underlay_addresses() {
        let cfgs = router_configs(&SeedParams::default());
        assert!(cfgs[0].toml.contains("interface = \"pe1-p\""));
        assert_eq!(underlay(false).0.to_string(), "198.18.100.1");
        assert_eq!(underlay(true).1.to_string(), "2001:db8:100::2");
        assert_eq!(
            router_underlay(false),
            ("198.18.101.2".parse().unwrap(), "198.18.102.2".parse().unwrap())
        );
        assert_eq!(router_underlay(true).1.to_string(), "2001:db8:102::2");
    }
}
