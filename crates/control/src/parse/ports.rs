//! `[[port]]`: each port's unique name, what it attaches to (see [`super::attach`]), its
//! MTU, VRF, addresses, offload overrides and whether it accepts labelled frames. A
//! port's addresses go into the table of defined prefixes (as local addresses, their
//! subnets as connected) that the routes are checked against.

use std::net::{IpAddr, Ipv4Addr};

use super::attach::{port_attachment, same_namespace};
use super::ctx::Ctx;
use super::raw::{RawOffloads, RawPort};
use vmpls_wire::prefix::{mask, max_len};

use super::values::{check_name, parse_prefix, usable_host};
use super::vrfs::vrf_of;
use super::{Origin, Prefixes, S};
use crate::{ConfigError, OffloadOverrides, PortConfig, PortKind};

/// The largest MTU of a TAP device (the kernel's limit) and of a memif port (a frame
/// and its header in one 64 KiB chain): 65535 minus the Ethernet header.
pub const TAP_MEMIF_MAX_MTU: u32 = 65535 - 14;

/// The `[[port]]`s in file order: names and attachments each used once, their addresses
/// recorded in `prefixes`.
pub(super) fn parse_ports(
    ctx: &Ctx,
    raw: &[RawPort],
    vrfs: &[String],
    prefixes: &mut Prefixes,
) -> Result<Vec<PortConfig>, ConfigError> {
    let mut ports: Vec<PortConfig> = Vec::new();
    let mut port_lines: Vec<usize> = Vec::new();
    for p in raw {
        let name = check_name(ctx, &p.name, "port.name", "port")?;
        let line = ctx.line(&p.name.span());
        if let Some(i) = ports.iter().position(|q| q.name == name) {
            return Err(ctx.err_line(
                line,
                "port.name",
                format!("port \"{name}\" is already defined at line {}", port_lines[i]),
            ));
        }
        let (interface, interface_line, kind) = port_attachment(ctx, p, line)?;
        if let Some(q) = ports.iter().find(|q| q.interface == interface && same_namespace(&q.kind, &kind)) {
            let (field, what) = match kind {
                PortKind::VhostUser { .. } | PortKind::Memif { .. } => ("port.socket", "socket"),
                _ => ("port.interface", "interface"),
            };
            return Err(ctx.err_line(
                interface_line,
                field,
                format!(
                    "{what} \"{interface}\" is already used by port \"{}\" (line {})",
                    q.name, q.interface_line
                ),
            ));
        }
        let mtu = parse_mtu(ctx, p.mtu.as_ref(), &kind)?;
        let vrf = vrf_of(ctx, vrfs, p.vrf.as_ref(), "port.vrf")?;
        let addresses = port_addresses(ctx, p, &name, &vrf, prefixes)?;
        let offloads = raw_offloads(&p.offloads);
        let mpls = parse_mpls(ctx, p.mpls.as_ref(), &kind)?;
        let mtu_line = p.mtu.as_ref().map_or(line, |m| ctx.line(&m.span()));
        ports.push(PortConfig {
            name,
            interface,
            mtu,
            vrf,
            vrf_line: p.vrf.as_ref().map(|v| ctx.line(&v.span())),
            netns: None,
            addresses,
            kind,
            interface_line,
            mtu_line,
            offloads,
            mpls,
        });
        port_lines.push(line);
    }
    Ok(ports)
}

/// `mpls`: whether the port accepts labelled frames. An MPLS-in-UDP port carries
/// nothing else, so it cannot refuse them.
fn parse_mpls(ctx: &Ctx, mpls: Option<&S<bool>>, kind: &PortKind) -> Result<Option<bool>, ConfigError> {
    let Some(m) = mpls else { return Ok(None) };
    if !*m.get_ref() && matches!(kind, PortKind::Udp { .. }) {
        return Err(ctx.err(
            &m.span(),
            "port.mpls",
            "an MPLS-in-UDP port carries only labelled frames; mpls = false would drop everything it receives",
        ));
    }
    Ok(Some(*m.get_ref()))
}

/// `mtu`: 68 up to 65535, or up to [`TAP_MEMIF_MAX_MTU`] for a TAP or memif port.
fn parse_mtu(ctx: &Ctx, mtu: Option<&S<i64>>, kind: &PortKind) -> Result<Option<u32>, ConfigError> {
    let Some(m) = mtu else { return Ok(None) };
    let max = match kind {
        PortKind::Tap { .. } | PortKind::Memif { .. } => TAP_MEMIF_MAX_MTU,
        _ => 65535,
    };
    match u32::try_from(*m.get_ref()) {
        Ok(v) if (68..=max).contains(&v) => Ok(Some(v)),
        _ => {
            let why = match kind {
                PortKind::Tap { .. } => " (a TAP's MTU is at most 65535 minus the Ethernet header)",
                PortKind::Memif { .. } => " (a memif frame and its Ethernet header fit in 64 KiB)",
                _ => "",
            };
            Err(ctx.err(
                &m.span(),
                "port.mtu",
                format!("MTU {} is out of range; expected 68 to {max}{why}", m.get_ref()),
            ))
        }
    }
}

/// Port `name`'s `addresses` in `vrf`: host addresses (not an IPv4 subnet's network or
/// broadcast address), each listed once and on one port, and no subnet shared with
/// another port. Each address goes into `prefixes` as local, its subnet as connected.
fn port_addresses(
    ctx: &Ctx,
    p: &RawPort,
    name: &str,
    vrf: &str,
    prefixes: &mut Prefixes,
) -> Result<Vec<(IpAddr, u8)>, ConfigError> {
    let mut addresses: Vec<(IpAddr, u8)> = Vec::new();
    for s in p.addresses.iter().flatten() {
        let (a, len) = parse_prefix(ctx, s, "port.addresses", "198.18.1.1/24 or 2001:db8:1::1/64")?;
        let aline = ctx.line(&s.span());
        if !usable_host(a) {
            return Err(ctx.err_line(
                aline,
                "port.addresses",
                format!("{a} cannot be a port's address (unspecified, multicast or broadcast)"),
            ));
        }
        if let (IpAddr::V4(a4), true) = (a, len <= 30) {
            let net = u32::from(a4) & !(u32::MAX >> len);
            let bcast = net | (u32::MAX >> len);
            let which = if u32::from(a4) == net {
                Some("network")
            } else if u32::from(a4) == bcast {
                Some("broadcast")
            } else {
                None
            };
            if let Some(which) = which {
                let (net, first) = (Ipv4Addr::from(net), Ipv4Addr::from(net + 1));
                return Err(ctx.err_line(
                    aline,
                    "port.addresses",
                    format!("{a} is the {which} address of {net}/{len}; give the port a host address in it, like {first}/{len}"),
                ));
            }
        }
        if addresses.iter().any(|&(b, _)| b == a) {
            return Err(ctx.err_line(aline, "port.addresses", format!("{a} is listed twice")));
        }
        let host = max_len(a);
        if let Some(Origin::Local { line: l }) = prefixes.get(&(vrf.to_string(), a, host)) {
            return Err(ctx.err_line(
                aline,
                "port.addresses",
                format!("{a} is already an address of another port (line {l})"),
            ));
        }
        prefixes.insert((vrf.to_string(), a, host), Origin::Local { line: aline });
        if len < host {
            let key = (vrf.to_string(), mask(a, len), len);
            match prefixes.get(&key) {
                Some(Origin::Connected { port, line: l }) if *port != name => {
                    return Err(ctx.err_line(
                        aline,
                        "port.addresses",
                        format!(
                            "subnet {}/{len} is already on port \"{port}\" (line {l}); two ports cannot share a subnet in one VRF",
                            mask(a, len)
                        ),
                    ));
                }
                Some(_) => {}
                None => {
                    prefixes.insert(key, Origin::Connected { port: name.to_string(), line: aline });
                }
            }
        }
        addresses.push((a, len));
    }
    Ok(addresses)
}

/// `[port.offloads]`: what the router may hand the port, forced over what its kind
/// reports; `tso` sets both `tso4` and `tso6` unless they are given.
fn raw_offloads(raw: &Option<RawOffloads>) -> OffloadOverrides {
    let Some(o) = raw else { return OffloadOverrides::default() };
    OffloadOverrides {
        tso4: o.tso4.or(o.tso),
        tso6: o.tso6.or(o.tso),
        uso: o.uso,
        csum: o.csum,
        mpls_gso: o.mpls_gso,
    }
}
