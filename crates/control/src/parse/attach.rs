//! What a `[[port]]` attaches to, by its `kind`: a Linux interface (af-packet), a TAP
//! device the router creates, a vhost-user socket a guest connects to, or an MPLS-in-UDP
//! tunnel. Each kind's required keys, the keys it refuses, and the `interface` string a
//! port keeps for messages and `link show`.

use std::net::IpAddr;

use super::S;
use super::ctx::Ctx;
use super::raw::RawPort;
use super::values::{check_unix_socket_path, parse_host, parse_mac_of};
use crate::{ConfigError, MemifRole, PortKind, SocketGroup};

/// Linux's `dev_valid_name`: 1 to 15 bytes, not "." or "..", no '/', ':' or whitespace.
fn check_interface_name(ctx: &Ctx, s: &S<String>) -> Result<String, ConfigError> {
    let n = s.get_ref();
    let problem = if n.is_empty() {
        Some("is empty".to_string())
    } else if n.len() > 15 {
        Some(format!("is {} bytes long; Linux interface names have at most 15", n.len()))
    } else if n == "." || n == ".." || n.contains(['/', ':']) || n.contains(char::is_whitespace) {
        Some("is not a valid Linux interface name (no '/', ':' or spaces)".to_string())
    } else {
        None
    };
    match problem {
        Some(p) => Err(ctx.err(&s.span(), "port.interface", format!("interface name \"{n}\" {p}"))),
        None => Ok(n.clone()),
    }
}

/// `socket-group`: a group name as `/etc/group` holds them (whether it exists is
/// [`check_socket_groups`](crate::check_socket_groups)'s to say).
fn check_group_name(ctx: &Ctx, s: &S<String>) -> Result<SocketGroup, ConfigError> {
    let n = s.get_ref();
    if n.is_empty() || n.len() > 32 || n.contains([':', '/', ',']) || n.contains(char::is_whitespace) {
        return Err(ctx.err(
            &s.span(),
            "port.socket-group",
            format!(
                "\"{n}\" is not a group name (1 to 32 characters, no ':', ',', '/' or spaces), e.g. \"kvm\""
            ),
        ));
    }
    Ok(SocketGroup { name: n.clone(), line: ctx.line(&s.span()) })
}

/// `aa:bb:cc:dd:ee:ff`: a unicast MAC address, not all zeros.
fn parse_mac(ctx: &Ctx, s: &S<String>) -> Result<[u8; 6], ConfigError> {
    parse_mac_of(ctx, s, "port.mac", "a port")
}

/// Whether two ports' `interface` values name things in one namespace: interface names
/// (af-packet and TAP ports) or socket paths (vhost-user, memif).
pub(super) fn same_namespace(a: &PortKind, b: &PortKind) -> bool {
    let path = |k: &PortKind| matches!(k, PortKind::VhostUser { .. } | PortKind::Memif { .. });
    path(a) == path(b)
}

/// A `[[port]]`'s kind and what it attaches to: (`interface` as [`PortConfig`](crate::PortConfig) keeps it,
/// the line of the key naming it, the kind). `line` is the port's `name` line, for
/// missing keys.
pub(super) fn port_attachment(
    ctx: &Ctx,
    p: &RawPort,
    line: usize,
) -> Result<(String, usize, PortKind), ConfigError> {
    let kind_name = p.kind.as_ref().map_or("af-packet", |k| k.get_ref().as_str());
    let not_for = |s: &S<String>, field: &str, hint: &str| {
        ctx.err(&s.span(), field, format!("a {kind_name} port takes no {}; {hint}", &field[5..]))
    };
    let mac = || p.mac.as_ref().map(|m| parse_mac(ctx, m)).transpose();
    if kind_name != "vhost-user"
        && let Some(g) = &p.socket_group
    {
        return Err(not_for(
            g,
            "port.socket-group",
            "it is for kind = \"vhost-user\" (who may connect to the socket)",
        ));
    }
    if kind_name != "memif" {
        if let Some(r) = &p.role {
            return Err(not_for(r, "port.role", "it is for kind = \"memif\""));
        }
        if let Some(n) = &p.id {
            return Err(ctx.err(
                &n.span(),
                "port.id",
                format!("a {kind_name} port takes no id; it is for kind = \"memif\""),
            ));
        }
    }
    if kind_name != "udp" {
        let udp_only = [(&p.local, "port.local"), (&p.remote, "port.remote"), (&p.netns, "port.netns")];
        if let Some((s, field)) = udp_only.iter().find_map(|(s, f)| s.as_ref().map(|s| (s, *f))) {
            return Err(not_for(s, field, "it is for kind = \"udp\" (MPLS-in-UDP)"));
        }
        if let Some(n) = &p.udp_port {
            return Err(ctx.err(
                &n.span(),
                "port.udp-port",
                format!("a {kind_name} port takes no udp-port; it is for kind = \"udp\" (MPLS-in-UDP)"),
            ));
        }
    }
    match kind_name {
        "udp" => udp_attachment(ctx, p, line),
        "memif" => memif_attachment(ctx, p, line),
        "af-packet" | "tap" => {
            if let Some(s) = &p.socket {
                return Err(not_for(
                    s,
                    "port.socket",
                    "socket = \"...\" is for kind = \"vhost-user\" or \"memif\"",
                ));
            }
            let Some(iface) = &p.interface else {
                let what = if kind_name == "tap" {
                    "the name of the TAP device the router creates"
                } else {
                    "the Linux interface to attach to"
                };
                return Err(ctx.err_line(
                    line,
                    "port.interface",
                    format!("port \"{}\" needs interface = \"...\": {what}", p.name.get_ref()),
                ));
            };
            let interface = check_interface_name(ctx, iface)?;
            let kind = if kind_name == "tap" {
                PortKind::Tap { mac: mac()? }
            } else {
                if let Some(m) = &p.mac {
                    return Err(not_for(
                        m,
                        "port.mac",
                        "an af-packet port sends with its interface's MAC (set it with `ip link set IFACE address ...`)",
                    ));
                }
                PortKind::AfPacket
            };
            Ok((interface, ctx.line(&iface.span()), kind))
        }
        "vhost-user" => {
            if let Some(s) = &p.interface {
                return Err(not_for(
                    s,
                    "port.interface",
                    "a vhost-user port is a guest's NIC: give socket = \"/path\" for QEMU to connect to",
                ));
            }
            let Some(sock) = &p.socket else {
                return Err(ctx.err_line(
                    line,
                    "port.socket",
                    format!(
                        "port \"{}\" needs socket = \"/path\": the vhost-user socket the router listens on and QEMU connects to",
                        p.name.get_ref()
                    ),
                ));
            };
            let socket = check_unix_socket_path(ctx, sock, "port.socket", "/run/vmpls/vm1.sock")?;
            let interface = socket.display().to_string();
            let socket_group = p.socket_group.as_ref().map(|g| check_group_name(ctx, g)).transpose()?;
            Ok((interface, ctx.line(&sock.span()), PortKind::VhostUser { socket, mac: mac()?, socket_group }))
        }
        other => {
            let span = p.kind.as_ref().map(|k| k.span()).unwrap_or_default();
            Err(ctx.err(
                &span,
                "port.kind",
                format!(
                    "unknown port kind \"{other}\"; expected \"af-packet\", \"tap\", \"vhost-user\", \"udp\" or \"memif\""
                ),
            ))
        }
    }
}

/// A `kind = "memif"` port: `socket` (an absolute path), `role` (`"client"` unless
/// given), `id` (0 unless given, up to 2^32 - 1), `mac`; no `interface`. Its `interface`
/// (for messages and `link show`) is the socket path.
fn memif_attachment(ctx: &Ctx, p: &RawPort, line: usize) -> Result<(String, usize, PortKind), ConfigError> {
    if let Some(s) = &p.interface {
        return Err(ctx.err(
            &s.span(),
            "port.interface",
            "a memif port takes no interface; give socket = \"/path\", the memif control socket",
        ));
    }
    let Some(sock) = &p.socket else {
        return Err(ctx.err_line(
            line,
            "port.socket",
            format!(
                "port \"{}\" needs socket = \"/path\": the memif control socket (the server listens on it)",
                p.name.get_ref()
            ),
        ));
    };
    let socket = check_unix_socket_path(ctx, sock, "port.socket", "/run/vmpls/memif0.sock")?;
    let role = match p.role.as_ref().map(|r| (r, r.get_ref().as_str())) {
        None | Some((_, "client")) => MemifRole::Client,
        Some((_, "server")) => MemifRole::Server,
        Some((r, other)) => {
            return Err(ctx.err(
                &r.span(),
                "port.role",
                format!(
                    "unknown memif role \"{other}\"; expected \"client\" (connects) or \"server\" (listens)"
                ),
            ));
        }
    };
    let id = match &p.id {
        None => 0,
        Some(n) => u32::try_from(*n.get_ref()).map_err(|_| {
            ctx.err(
                &n.span(),
                "port.id",
                format!("memif id {} is out of range; expected 0 to 4294967295", n.get_ref()),
            )
        })?,
    };
    let mac = p.mac.as_ref().map(|m| parse_mac(ctx, m)).transpose()?;
    let interface = socket.display().to_string();
    Ok((interface, ctx.line(&sock.span()), PortKind::Memif { socket, role, id, mac }))
}

/// A `kind = "udp"` port (MPLS-in-UDP): `local` and `remote` underlay addresses of one
/// family, `udp-port` (6635 unless given), `netns` for the underlay; no `interface`,
/// `socket` or `mac`. Its `interface` (for messages and `link show`) reads
/// `udp:LOCAL->REMOTE:PORT`.
fn udp_attachment(ctx: &Ctx, p: &RawPort, line: usize) -> Result<(String, usize, PortKind), ConfigError> {
    let hint = "a udp port is a tunnel: give local = \"ADDR\" and remote = \"ADDR\" (underlay addresses)";
    for (s, field) in [(&p.interface, "port.interface"), (&p.socket, "port.socket"), (&p.mac, "port.mac")] {
        if let Some(s) = s {
            return Err(ctx.err(&s.span(), field, format!("a udp port takes no {}; {hint}", &field[5..])));
        }
    }
    let name = p.name.get_ref();
    let need = |field: &str, what: &str| {
        ctx.err_line(line, field, format!("port \"{name}\" needs {} = \"...\": {what}", &field[5..]))
    };
    let local_s = p.local.as_ref().ok_or_else(|| need("port.local", "the underlay address to send from"))?;
    let remote_s =
        p.remote.as_ref().ok_or_else(|| need("port.remote", "the other end's underlay address"))?;
    let local = parse_host(ctx, local_s, "port.local", "198.18.100.1 or 2001:db8:100::1")?;
    let remote = parse_host(ctx, remote_s, "port.remote", "198.18.100.2 or 2001:db8:100::2")?;
    if local.is_ipv4() != remote.is_ipv4() {
        return Err(ctx.err(
            &remote_s.span(),
            "port.remote",
            format!("{remote} and local {local} are of different families; a tunnel's ends are both IPv4 or both IPv6"),
        ));
    }
    if local == remote {
        return Err(ctx.err(&remote_s.span(), "port.remote", format!("{remote} is the local address too")));
    }
    let port = match &p.udp_port {
        None => crate::MPLS_UDP_PORT,
        Some(n) => match u16::try_from(*n.get_ref()) {
            Ok(v) if v > 0 => v,
            _ => {
                return Err(ctx.err(
                    &n.span(),
                    "port.udp-port",
                    format!(
                        "UDP port {} is out of range; expected 1 to 65535 (6635 is MPLS-in-UDP's)",
                        n.get_ref()
                    ),
                ));
            }
        },
    };
    let netns = match &p.netns {
        None => None,
        Some(s) => {
            let n = s.get_ref();
            if n.is_empty() || n.contains('/') || n == "." || n == ".." {
                return Err(ctx.err(
                    &s.span(),
                    "port.netns",
                    format!("\"{n}\" is not a network namespace name (as `ip netns list` shows them)"),
                ));
            }
            Some(n.clone())
        }
    };
    let interface = match remote {
        IpAddr::V6(_) => format!("udp:[{local}]->[{remote}]:{port}"),
        IpAddr::V4(_) => format!("udp:{local}->{remote}:{port}"),
    };
    Ok((interface, ctx.line(&remote_s.span()), PortKind::Udp { local, remote, port, netns }))
}
