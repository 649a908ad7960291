//! Which port a next hop leaves by, shared by the config file's `[[route]]`/`[[label]]`
//! and the tables' `route`/`label` changes: the port by name or by the gateway's subnet,
//! the gateway directly connected and not the router's own address.

use std::net::IpAddr;

use vmpls_wire::prefix::mask;

use crate::PortConfig;

/// Why a next hop does not resolve to a port. The texts are the grammar-neutral ones;
/// a caller with a different way to name the fix (a TOML key, a CLI keyword) says it
/// for [`NexthopError::NoGatewayNoPort`], [`NexthopError::NotOnAnySubnet`] and
/// [`NexthopError::OnManySubnets`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NexthopError {
    /// Neither a gateway nor a port.
    #[error("a next hop needs a gateway and/or a port")]
    NoGatewayNoPort,
    /// The gateway is the router's own address on the port.
    #[error("{addr} is this router's own address on port \"{port}\"; the next hop must be a neighbour")]
    OwnAddress { addr: IpAddr, port: String },
    /// The gateway is not on the named port's subnets.
    #[error(
        "{addr} is not on any subnet of port \"{port}\" ({subnets}); a next hop must be directly connected"
    )]
    NotOnPortSubnet { addr: IpAddr, port: String, subnets: String },
    /// No port has the gateway on a subnet.
    #[error("{addr} is not on any port's subnet; a next hop must be directly connected")]
    NotOnAnySubnet { addr: IpAddr },
    /// Several ports have the gateway on a subnet; `ports` is their quoted names.
    #[error("{addr} is on the subnets of ports {ports}")]
    OnManySubnets { addr: IpAddr, ports: String },
}

/// Whether `a` is on the subnet `net/len` (same family, same network bits).
pub(crate) fn on_subnet(net: IpAddr, len: u8, a: IpAddr) -> bool {
    net.is_ipv4() == a.is_ipv4() && mask(net, len) == mask(a, len)
}

/// The index of the port named `name`.
pub(crate) fn port_index(ports: &[PortConfig], name: &str) -> Option<usize> {
    ports.iter().position(|p| p.name == name)
}

/// The port a next hop leaves by: `port` (an index into `ports`) if given, with `via` on
/// one of its subnets; otherwise the one port with `via` on a subnet.
pub(crate) fn resolve_port(
    ports: &[PortConfig],
    port: Option<usize>,
    via: Option<IpAddr>,
) -> Result<usize, NexthopError> {
    let Some(a) = via else {
        return port.ok_or(NexthopError::NoGatewayNoPort);
    };
    let has_subnet = |p: &PortConfig| p.addresses.iter().any(|&(net, len)| on_subnet(net, len, a));
    let p = match port {
        Some(p) => {
            if !has_subnet(&ports[p]) {
                return Err(NexthopError::NotOnPortSubnet {
                    addr: a,
                    port: ports[p].name.clone(),
                    subnets: subnets(&ports[p]),
                });
            }
            p
        }
        None => {
            let on: Vec<usize> = (0..ports.len()).filter(|&i| has_subnet(&ports[i])).collect();
            match on.as_slice() {
                [] => return Err(NexthopError::NotOnAnySubnet { addr: a }),
                [p] => *p,
                many => {
                    let names: Vec<String> = many.iter().map(|&i| format!("\"{}\"", ports[i].name)).collect();
                    return Err(NexthopError::OnManySubnets { addr: a, ports: names.join(" and ") });
                }
            }
        }
    };
    if is_own(&ports[p], a) {
        return Err(NexthopError::OwnAddress { addr: a, port: ports[p].name.clone() });
    }
    Ok(p)
}

fn is_own(port: &PortConfig, a: IpAddr) -> bool {
    port.addresses.iter().any(|&(b, _)| b == a)
}

/// The port's subnets as `net/len, ...`, for an error.
fn subnets(p: &PortConfig) -> String {
    if p.addresses.is_empty() {
        return "it has no addresses".to_string();
    }
    let nets: Vec<String> = p.addresses.iter().map(|&(a, l)| format!("{}/{l}", mask(a, l))).collect();
    nets.join(", ")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::Config;

    fn ports() -> Vec<PortConfig> {
        let text = r#"[router]
name = "t"

[[port]]
name = "a"
interface = "t-a"
addresses = ["198.18.1.1/24"]

[[port]]
name = "b"
interface = "t-b"
addresses = ["198.18.2.1/24"]

[[port]]
name = "bare"
interface = "t-bare"
"#;
        let mut ports = Config::from_str(text, Path::new("t.toml")).unwrap_or_else(|e| panic!("{e}")).ports;
        // Ports in different VRFs may share a subnet; the config refuses it within one.
        ports[1].addresses.insert(0, ("198.18.1.9".parse().unwrap(), 24));
        ports
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn port_by_name_or_by_the_gateways_one_subnet() {
        let ports = ports();
        assert_eq!(resolve_port(&ports, Some(2), None), Ok(2));
        assert_eq!(resolve_port(&ports, None, ip("198.18.2.7")), Ok(1));
        assert_eq!(resolve_port(&ports, Some(0), ip("198.18.1.7")), Ok(0));
        assert_eq!(resolve_port(&ports, None, None), Err(NexthopError::NoGatewayNoPort));
    }

    #[test]
    fn gateway_must_be_a_neighbour_on_one_port() {
        let ports = ports();
        let text = |port, via| resolve_port(&ports, port, ip(via)).unwrap_err().to_string();
        assert_eq!(
            text(Some(0), "198.18.1.1"),
            "198.18.1.1 is this router's own address on port \"a\"; the next hop must be a neighbour"
        );
        assert_eq!(
            text(None, "198.18.2.1"),
            "198.18.2.1 is this router's own address on port \"b\"; the next hop must be a neighbour"
        );
        assert_eq!(
            text(Some(0), "198.18.2.7"),
            "198.18.2.7 is not on any subnet of port \"a\" (198.18.1.0/24); a next hop must be directly connected"
        );
        assert_eq!(
            text(Some(2), "198.18.1.7"),
            "198.18.1.7 is not on any subnet of port \"bare\" (it has no addresses); a next hop must be directly connected"
        );
        assert_eq!(
            text(None, "2001:db8::1"),
            "2001:db8::1 is not on any port's subnet; a next hop must be directly connected"
        );
        assert_eq!(text(None, "198.18.1.7"), "198.18.1.7 is on the subnets of ports \"a\" and \"b\"");
    }
}
