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
//! The namespaces, the underlay and the VXLAN devices are created with `ip` (VXLAN
//! devices, and moving them between namespaces, are one command each).

use std::net::IpAddr;
use std::process::Command;

use anyhow::{Context, bail};

use crate::seed::{RouterConfig, SeedParams, router_configs};
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
/// tunnels over the IPv6 underlay (`v6`) or the IPv4 one, their sockets in h1's and
/// h2's namespaces.
pub fn udp_core_configs(params: &SeedParams, topo: &Topology, v6: bool) -> anyhow::Result<Vec<RouterConfig>> {
    let (a, b) = underlay(v6);
    let mut cfgs = router_configs(params);
    for (router, ifname, host, local, remote) in [("pe1", "pe1-p", H1, a, b), ("p", "p-pe1", H2, b, a)] {
        let ns = topo.ns(host)?;
        let cfg = cfgs.iter_mut().find(|c| c.router == router).context("no such router config")?;
        let from = format!("interface = \"{ifname}\"\n");
        if !cfg.toml.contains(&from) {
            bail!("{router}'s config has no port on {ifname}");
        }
        let to = format!("kind = \"udp\"\nlocal = \"{local}\"\nremote = \"{remote}\"\nnetns = \"{ns}\"\n");
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
    }
}
