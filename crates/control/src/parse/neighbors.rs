//! `[[neighbor]]`: static neighbour entries (an address and its MAC on a port), checked
//! against the ports already parsed.

use std::net::IpAddr;

use vmpls_fib::PortId;

use super::ctx::Ctx;
use super::raw::RawNeighbor;
use super::values::parse_mac_of;
use crate::{ConfigError, PortConfig};

/// `[[neighbor]]`s: a known port, an address, a unicast MAC, one entry per address and port.
pub(super) fn parse_neighbors(
    ctx: &Ctx,
    raw: &[RawNeighbor],
    ports: &[PortConfig],
) -> Result<Vec<crate::StaticNeighborConfig>, ConfigError> {
    let mut out: Vec<crate::StaticNeighborConfig> = Vec::new();
    for n in raw {
        let line = ctx.line(&n.address.span());
        let port = ports.iter().position(|p| p.name == *n.port.get_ref()).ok_or_else(|| {
            let names: Vec<&str> = ports.iter().map(|p| p.name.as_str()).collect();
            ctx.err(
                &n.port.span(),
                "neighbor.port",
                format!("no port named \"{}\" (ports are: {})", n.port.get_ref(), names.join(", ")),
            )
        })?;
        let address: IpAddr = n.address.get_ref().trim().parse().map_err(|_| {
            ctx.err(
                &n.address.span(),
                "neighbor.address",
                format!("\"{}\" is not an IPv4 or IPv6 address", n.address.get_ref()),
            )
        })?;
        if address.is_unspecified() || address.is_multicast() || address == IpAddr::from([255, 255, 255, 255])
        {
            return Err(ctx.err(
                &n.address.span(),
                "neighbor.address",
                format!("{address} cannot be a neighbour: give a unicast address"),
            ));
        }
        let lladdr = parse_mac_of(ctx, &n.lladdr, "neighbor.lladdr", "a neighbour")?;
        if let Some(first) = out.iter().find(|o| o.port == port as PortId && o.address == address) {
            return Err(ctx.err(
                &n.address.span(),
                "neighbor.address",
                format!(
                    "{address} on port \"{}\" is already defined at line {}",
                    n.port.get_ref(),
                    first.line
                ),
            ));
        }
        out.push(crate::StaticNeighborConfig { port: port as PortId, address, lladdr, line });
    }
    Ok(out)
}
