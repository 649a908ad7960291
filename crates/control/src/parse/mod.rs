//! From TOML text to a validated [`Config`]: the file's shape (serde, with the span of
//! every value kept), then every check that needs more than one value.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;
use vmpls_fib::{
    DEFAULT_VRF_NAME, IMPLICIT_NULL, Label, MAX_LABEL, MAX_NEXTHOPS, MIN_UNRESERVED_LABEL, PortId, TtlModel,
};

use crate::{
    Config, ConfigError, FastPathMode, FrrConfig, LabelConfig, LabelConfigAction, LimitsConfig,
    MAX_HELD_TOTAL, MAX_NEIGHBOR_ENTRIES, MAX_RATE, NexthopConfig, PortConfig, PortKind, RouteAction,
    RouteConfig, RouterConfig,
};

type S<T> = Spanned<T>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    router: Option<RawRouter>,
    #[serde(default)]
    port: Vec<RawPort>,
    #[serde(default)]
    vrf: Vec<RawVrf>,
    #[serde(default)]
    route: Vec<RawRoute>,
    #[serde(default)]
    label: Vec<RawLabel>,
    limits: Option<RawLimits>,
    frr: Option<RawFrr>,
    #[serde(default)]
    neighbor: Vec<RawNeighbor>,
}

/// `[[neighbor]]`: a static neighbour.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawNeighbor {
    address: S<String>,
    lladdr: S<String>,
    port: S<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawFrr {
    fpm: Option<S<String>>,
    hold_time: Option<S<i64>>,
    stale_time: Option<S<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawLimits {
    icmp_rate: Option<S<i64>>,
    icmp_burst: Option<S<i64>>,
    neighbor_request_rate: Option<S<i64>>,
    neighbor_request_burst: Option<S<i64>>,
    neighbor_entries: Option<S<i64>>,
    neighbor_held_per_address: Option<S<i64>>,
    neighbor_held_total: Option<S<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawRouter {
    name: S<String>,
    addresses: Option<Vec<S<String>>>,
    control_socket: Option<S<String>>,
    fast_path: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawPort {
    name: S<String>,
    interface: Option<S<String>>,
    socket: Option<S<String>>,
    mac: Option<S<String>>,
    addresses: Option<Vec<S<String>>>,
    mtu: Option<S<i64>>,
    vrf: Option<S<String>>,
    kind: Option<S<String>>,
    offloads: Option<RawOffloads>,
    local: Option<S<String>>,
    remote: Option<S<String>>,
    udp_port: Option<S<i64>>,
    netns: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawOffloads {
    tso: Option<bool>,
    tso4: Option<bool>,
    tso6: Option<bool>,
    uso: Option<bool>,
    csum: Option<bool>,
    mpls_gso: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawVrf {
    name: S<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawRouteNexthop {
    via: Option<S<String>>,
    port: Option<S<String>>,
    push: Option<S<Vec<S<i64>>>>,
    weight: Option<S<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawRoute {
    prefix: S<String>,
    vrf: Option<S<String>>,
    via: Option<S<String>>,
    port: Option<S<String>>,
    push: Option<S<Vec<S<i64>>>>,
    weight: Option<S<i64>>,
    nexthops: Option<S<Vec<RawRouteNexthop>>>,
    blackhole: Option<S<bool>>,
    ttl_model: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawLabelNexthop {
    via: Option<S<String>>,
    port: Option<S<String>>,
    out: Option<S<Vec<S<i64>>>>,
    weight: Option<S<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawLabel {
    #[serde(rename = "in")]
    label: S<i64>,
    action: S<String>,
    out: Option<S<Vec<S<i64>>>>,
    via: Option<S<String>>,
    port: Option<S<String>>,
    weight: Option<S<i64>>,
    nexthops: Option<S<Vec<RawLabelNexthop>>>,
    vrf: Option<S<String>>,
    ttl_model: Option<S<String>>,
}

/// A next hop as written, inline or in `nexthops = [...]`, before resolution.
struct RawNh<'a> {
    via: Option<&'a S<String>>,
    port: Option<&'a S<String>>,
    labels: Option<&'a S<Vec<S<i64>>>>,
    weight: Option<&'a S<i64>>,
}

/// Where in the file, for messages.
struct Ctx<'a> {
    path: &'a Path,
    text: &'a str,
    /// Byte offset of every newline, so that a line number is a binary search (every
    /// entry of a config has one), not a count from the start of the file.
    newlines: Vec<usize>,
}

impl<'a> Ctx<'a> {
    fn new(path: &'a Path, text: &'a str) -> Ctx<'a> {
        Ctx { path, text, newlines: text.match_indices('\n').map(|(i, _)| i).collect() }
    }

    fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before_count = self.newlines.partition_point(|&nl| nl < offset);
        let line = before_count + 1;
        let line_start = before_count.checked_sub(1).map_or(0, |i| self.newlines[i] + 1);
        let before = self.text.get(..offset).unwrap_or(self.text);
        let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
        (line, column)
    }

    fn line(&self, span: &Range<usize>) -> usize {
        self.line_col(span.start).0
    }

    fn err(&self, span: &Range<usize>, field: &str, message: impl Into<String>) -> ConfigError {
        self.err_line(self.line(span), field, message)
    }

    fn err_line(&self, line: usize, field: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            line,
            field: field.to_string(),
            message: message.into(),
        }
    }

    fn toml_error(&self, e: &toml::de::Error) -> ConfigError {
        let (line, column) = e.span().map_or((1, 1), |s| self.line_col(s.start));
        ConfigError::Parse {
            path: self.path.to_path_buf(),
            line,
            column,
            message: friendlier(e.message().trim_end()),
        }
    }
}

/// Serde's type names in a network engineer's words.
fn friendlier(message: &str) -> String {
    message
        .replace("expected i64", "expected an integer")
        .replace("expected a sequence", "expected a list like [\"...\", \"...\"]")
        .replace("expected a boolean", "expected true or false")
}

fn max_len(a: IpAddr) -> u8 {
    if a.is_ipv4() { 32 } else { 128 }
}

/// `a` with the bits beyond `len` cleared.
fn mask(a: IpAddr, len: u8) -> IpAddr {
    match a {
        IpAddr::V4(a) => {
            let m = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len)) };
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

fn contains(net: IpAddr, len: u8, a: IpAddr) -> bool {
    net.is_ipv4() == a.is_ipv4() && mask(net, len) == mask(a, len)
}

fn usable_host(a: IpAddr) -> bool {
    !(a.is_unspecified() || a.is_multicast() || a == IpAddr::V4(Ipv4Addr::BROADCAST))
}

/// A host address without prefix length.
fn parse_host(ctx: &Ctx, s: &S<String>, field: &str, example: &str) -> Result<IpAddr, ConfigError> {
    let text = s.get_ref().trim();
    if text.contains('/') {
        return Err(ctx.err(
            &s.span(),
            field,
            format!("\"{text}\": expected an address without prefix length, like {example}"),
        ));
    }
    let a: IpAddr = text.parse().map_err(|_| {
        ctx.err(
            &s.span(),
            field,
            format!("\"{text}\" is not an IPv4 or IPv6 address; expected one like {example}"),
        )
    })?;
    if !usable_host(a) {
        return Err(ctx.err(
            &s.span(),
            field,
            format!("{a} cannot be a host's address (unspecified, multicast or broadcast)"),
        ));
    }
    Ok(a)
}

/// `address/length`.
fn parse_prefix(ctx: &Ctx, s: &S<String>, field: &str, example: &str) -> Result<(IpAddr, u8), ConfigError> {
    let text = s.get_ref().trim();
    let bad =
        || ctx.err(&s.span(), field, format!("\"{text}\": expected address/prefix-length, like {example}"));
    let (addr, len) = text.split_once('/').ok_or_else(bad)?;
    let addr: IpAddr = addr.parse().map_err(|_| bad())?;
    let len: u8 = len.parse().map_err(|_| bad())?;
    if len > max_len(addr) {
        return Err(ctx.err(
            &s.span(),
            field,
            format!(
                "\"{text}\": prefix length /{len} is longer than the address (at most /{})",
                max_len(addr)
            ),
        ));
    }
    Ok((addr, len))
}

fn parse_ttl(ctx: &Ctx, s: Option<&S<String>>, field: &str) -> Result<TtlModel, ConfigError> {
    match s.map(|s| (s.get_ref().as_str(), s.span())) {
        None | Some(("uniform", _)) => Ok(TtlModel::Uniform),
        Some(("pipe", _)) => Ok(TtlModel::Pipe),
        Some((other, span)) => Err(ctx.err(
            &span,
            field,
            format!("\"{other}\" is not a TTL model; expected \"uniform\" or \"pipe\" (RFC 3443)"),
        )),
    }
}

fn parse_weight(ctx: &Ctx, w: Option<&S<i64>>, field: &str) -> Result<u32, ConfigError> {
    let Some(w) = w else { return Ok(1) };
    match u32::try_from(*w.get_ref()) {
        Ok(0) => Err(ctx.err(
            &w.span(),
            field,
            "weight 0: weights start at 1 (to send a next hop no traffic, leave it out)",
        )),
        Ok(v) => Ok(v),
        Err(_) => Err(ctx.err(
            &w.span(),
            field,
            format!("weight {} is out of range; expected 1 to {}", w.get_ref(), u32::MAX),
        )),
    }
}

/// A label stack (`push` or `out`), checked by [`crate::check_out_stack`];
/// `ipv4_payload` as there.
fn parse_stack(
    ctx: &Ctx,
    stack: &S<Vec<S<i64>>>,
    field: &str,
    ipv4_payload: Option<bool>,
) -> Result<Vec<Label>, ConfigError> {
    let mut out = Vec::with_capacity(stack.get_ref().len());
    for l in stack.get_ref() {
        match u32::try_from(*l.get_ref()) {
            Ok(v) if v <= MAX_LABEL => out.push(v),
            _ => {
                return Err(ctx.err(
                    &l.span(),
                    field,
                    format!("label {} is out of range; labels are 0 to {MAX_LABEL} (20 bits)", l.get_ref()),
                ));
            }
        }
    }
    crate::check_out_stack(&out, ipv4_payload).map_err(|m| ctx.err(&stack.span(), field, m))?;
    Ok(out)
}

fn check_name(ctx: &Ctx, s: &S<String>, field: &str, what: &str) -> Result<String, ConfigError> {
    let name = s.get_ref();
    if name.trim().is_empty() {
        return Err(ctx.err(&s.span(), field, format!("the {what} name is empty")));
    }
    Ok(name.clone())
}

/// A router name: it names the control socket (`/run/vmpls/NAME.sock`) and the CLI's
/// `-r NAME`, so it is a plain file name.
fn check_router_name(ctx: &Ctx, s: &S<String>) -> Result<String, ConfigError> {
    let name = check_name(ctx, s, "router.name", "router")?;
    if name == "." || name == ".." || name.contains(['/', '\0']) || name.contains(char::is_whitespace) {
        return Err(ctx.err(
            &s.span(),
            "router.name",
            format!("router name \"{name}\" cannot name a file (it names the control socket): no '/', spaces, \".\" or \"..\""),
        ));
    }
    Ok(name)
}

/// `control-socket`: an absolute path of a Unix socket.
fn check_socket_path(ctx: &Ctx, s: &S<String>) -> Result<std::path::PathBuf, ConfigError> {
    check_unix_socket_path(ctx, s, "router.control-socket", "/run/vmpls/pe1.sock")
}

/// An absolute path of a Unix socket for `field`. Linux limits socket paths to 107
/// bytes (`sun_path`).
fn check_unix_socket_path(
    ctx: &Ctx,
    s: &S<String>,
    field: &str,
    example: &str,
) -> Result<std::path::PathBuf, ConfigError> {
    let text = s.get_ref();
    let problem = if !text.starts_with('/') {
        Some(format!("is not an absolute path; write it like \"{example}\""))
    } else if text.len() > MAX_SOCKET_PATH {
        Some(format!("is {} bytes long; a Unix socket path has at most {MAX_SOCKET_PATH}", text.len()))
    } else if text.ends_with('/') || text.contains('\0') {
        Some("is not a file path".to_string())
    } else {
        None
    };
    match problem {
        Some(p) => Err(ctx.err(&s.span(), field, format!("\"{text}\" {p}"))),
        None => Ok(std::path::PathBuf::from(text)),
    }
}

/// The longest path a Unix socket address holds (`sun_path` is 108 bytes with its NUL).
pub const MAX_SOCKET_PATH: usize = 107;

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

/// The largest MTU the kernel gives a TAP device (65535 minus the Ethernet header).
const TAP_MAX_MTU: u32 = 65535 - 14;

/// `aa:bb:cc:dd:ee:ff`: a unicast MAC address, not all zeros.
fn parse_mac(ctx: &Ctx, s: &S<String>) -> Result<[u8; 6], ConfigError> {
    parse_mac_of(ctx, s, "port.mac", "a port")
}

/// [`parse_mac`] for `field`, whose MAC is `whose` in messages.
fn parse_mac_of(ctx: &Ctx, s: &S<String>, field: &str, whose: &str) -> Result<[u8; 6], ConfigError> {
    let text = s.get_ref().trim();
    let bad = || {
        ctx.err(
            &s.span(),
            field,
            format!("\"{text}\" is not a MAC address; expected six hex bytes like \"02:00:5e:10:00:01\""),
        )
    };
    let mut mac = [0u8; 6];
    let mut parts = text.split([':', '-']);
    for b in &mut mac {
        let part = parts.next().ok_or_else(bad)?;
        if part.is_empty() || part.len() > 2 {
            return Err(bad());
        }
        *b = u8::from_str_radix(part, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    if mac[0] & 1 != 0 {
        return Err(ctx.err(
            &s.span(),
            field,
            format!(
                "{text} is a multicast address (lowest bit of the first byte set); {whose} needs a unicast MAC"
            ),
        ));
    }
    if mac == [0; 6] {
        return Err(ctx.err(&s.span(), field, format!("00:00:00:00:00:00 cannot be {whose}'s MAC")));
    }
    Ok(mac)
}

/// Whether two ports' `interface` values name things in one namespace: interface names
/// (af-packet and TAP ports) or socket paths (vhost-user).
fn same_namespace(a: &PortKind, b: &PortKind) -> bool {
    matches!(a, PortKind::VhostUser { .. }) == matches!(b, PortKind::VhostUser { .. })
}

/// A `[[port]]`'s kind and what it attaches to: (`interface` as [`PortConfig`] keeps it,
/// the line of the key naming it, the kind). `line` is the port's `name` line, for
/// missing keys.
fn port_attachment(ctx: &Ctx, p: &RawPort, line: usize) -> Result<(String, usize, PortKind), ConfigError> {
    let kind_name = p.kind.as_ref().map_or("af-packet", |k| k.get_ref().as_str());
    let not_for = |s: &S<String>, field: &str, hint: &str| {
        ctx.err(&s.span(), field, format!("a {kind_name} port takes no {}; {hint}", &field[5..]))
    };
    let mac = || p.mac.as_ref().map(|m| parse_mac(ctx, m)).transpose();
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
        "af-packet" | "tap" => {
            if let Some(s) = &p.socket {
                return Err(not_for(s, "port.socket", "socket = \"...\" is for kind = \"vhost-user\""));
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
            Ok((interface, ctx.line(&sock.span()), PortKind::VhostUser { socket, mac: mac()? }))
        }
        other => {
            let span = p.kind.as_ref().map(|k| k.span()).unwrap_or_default();
            Err(ctx.err(
                &span,
                "port.kind",
                format!(
                    "unknown port kind \"{other}\"; expected \"af-packet\", \"tap\", \"vhost-user\" or \"udp\""
                ),
            ))
        }
    }
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

/// What a prefix in a VRF was first defined as, for duplicate messages.
enum Origin {
    Route(usize),
    Connected { port: String, line: usize },
    Local { line: usize },
}

pub(crate) fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let ctx = Ctx::new(path, text);
    let raw: RawFile = toml::from_str(text).map_err(|e| ctx.toml_error(&e))?;

    // [router]
    let Some(rr) = raw.router else {
        return Err(ctx.err_line(
            1,
            "router",
            "missing [router] table; a config starts with [router] and name = \"...\"",
        ));
    };
    let control_socket = match &rr.control_socket {
        None => None,
        Some(s) => Some(check_socket_path(&ctx, s)?),
    };
    let fast_path = match rr.fast_path.as_ref().map(|s| (s, s.get_ref().as_str())) {
        None | Some((_, "auto")) => FastPathMode::Auto,
        Some((_, "off")) => FastPathMode::Off,
        Some((_, "tc")) => FastPathMode::Tc,
        Some((s, other)) => {
            return Err(ctx.err(
                &s.span(),
                "router.fast-path",
                format!("unknown fast path \"{other}\"; use \"auto\" (the default), \"tc\" or \"off\""),
            ));
        }
    };
    let mut router = RouterConfig {
        name: check_router_name(&ctx, &rr.name)?,
        v4: None,
        v6: None,
        control_socket,
        fast_path,
    };
    let mut router_lines = Vec::new();
    for s in rr.addresses.iter().flatten() {
        let a = parse_host(&ctx, s, "router.addresses", "198.18.255.1 or 2001:db8:ff::1")?;
        let dup = match a {
            IpAddr::V4(a) => router.v4.replace(a).is_some(),
            IpAddr::V6(a) => router.v6.replace(a).is_some(),
        };
        if dup {
            let fam = if a.is_ipv4() { "IPv4" } else { "IPv6" };
            return Err(ctx.err(
                &s.span(),
                "router.addresses",
                format!("a second {fam} address ({a}); the router has at most one of each family"),
            ));
        }
        router_lines.push((a, ctx.line(&s.span())));
    }

    // [[vrf]]
    let mut vrfs = vec![DEFAULT_VRF_NAME.to_string()];
    let mut vrf_lines: HashMap<String, usize> = HashMap::new();
    for v in &raw.vrf {
        let name = check_name(&ctx, &v.name, "vrf.name", "VRF")?;
        let line = ctx.line(&v.name.span());
        if let Some(first) = vrf_lines.insert(name.clone(), line) {
            return Err(ctx.err_line(
                line,
                "vrf.name",
                format!("VRF \"{name}\" is already defined at line {first}"),
            ));
        }
        if name != DEFAULT_VRF_NAME {
            vrfs.push(name);
        }
    }
    let vrf_of = |s: Option<&S<String>>, field: &str| -> Result<String, ConfigError> {
        match s {
            None => Ok(DEFAULT_VRF_NAME.to_string()),
            Some(s) if vrfs.contains(s.get_ref()) => Ok(s.get_ref().clone()),
            Some(s) => Err(ctx.err(
                &s.span(),
                field,
                format!(
                    "VRF \"{}\" is not defined; add [[vrf]] with name = \"{}\"",
                    s.get_ref(),
                    s.get_ref()
                ),
            )),
        }
    };

    // [[port]]
    let mut ports: Vec<PortConfig> = Vec::new();
    let mut port_lines: Vec<usize> = Vec::new();
    let mut prefixes: HashMap<(String, IpAddr, u8), Origin> = HashMap::new();
    for p in &raw.port {
        let name = check_name(&ctx, &p.name, "port.name", "port")?;
        let line = ctx.line(&p.name.span());
        if let Some(i) = ports.iter().position(|q| q.name == name) {
            return Err(ctx.err_line(
                line,
                "port.name",
                format!("port \"{name}\" is already defined at line {}", port_lines[i]),
            ));
        }
        let (interface, interface_line, kind) = port_attachment(&ctx, p, line)?;
        if let Some(q) = ports.iter().find(|q| q.interface == interface && same_namespace(&q.kind, &kind)) {
            let (field, what) = match kind {
                PortKind::VhostUser { .. } => ("port.socket", "socket"),
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
        let mtu = match &p.mtu {
            None => None,
            Some(m) => {
                let max = if matches!(kind, PortKind::Tap { .. }) { TAP_MAX_MTU } else { 65535 };
                match u32::try_from(*m.get_ref()) {
                    Ok(v) if (68..=max).contains(&v) => Some(v),
                    _ => {
                        let why = if max == TAP_MAX_MTU {
                            " (a TAP's MTU is at most 65535 minus the Ethernet header)"
                        } else {
                            ""
                        };
                        return Err(ctx.err(
                            &m.span(),
                            "port.mtu",
                            format!("MTU {} is out of range; expected 68 to {max}{why}", m.get_ref()),
                        ));
                    }
                }
            }
        };
        let vrf = vrf_of(p.vrf.as_ref(), "port.vrf")?;
        let mut addresses: Vec<(IpAddr, u8)> = Vec::new();
        for s in p.addresses.iter().flatten() {
            let (a, len) = parse_prefix(&ctx, s, "port.addresses", "198.18.1.1/24 or 2001:db8:1::1/64")?;
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
            if let Some(Origin::Local { line: l }) = prefixes.get(&(vrf.clone(), a, host)) {
                return Err(ctx.err_line(
                    aline,
                    "port.addresses",
                    format!("{a} is already an address of another port (line {l})"),
                ));
            }
            prefixes.insert((vrf.clone(), a, host), Origin::Local { line: aline });
            if len < host {
                let key = (vrf.clone(), mask(a, len), len);
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
                        prefixes.insert(key, Origin::Connected { port: name.clone(), line: aline });
                    }
                }
            }
            addresses.push((a, len));
        }
        let offloads = raw_offloads(&p.offloads);
        let mtu_line = p.mtu.as_ref().map_or(line, |m| ctx.line(&m.span()));
        ports.push(PortConfig {
            name,
            interface,
            mtu,
            vrf,
            addresses,
            kind,
            interface_line,
            mtu_line,
            offloads,
        });
        port_lines.push(line);
    }
    for &(a, line) in &router_lines {
        let key = (DEFAULT_VRF_NAME.to_string(), a, max_len(a));
        prefixes.entry(key).or_insert(Origin::Local { line });
    }

    let v = Validator { ctx: &ctx, ports: &ports };

    // [[route]]
    let mut routes = Vec::new();
    for r in &raw.route {
        let line = ctx.line(&r.prefix.span());
        let (addr, len) = parse_prefix(&ctx, &r.prefix, "route.prefix", "198.18.2.0/24 or 2001:db8:2::/64")?;
        let net = mask(addr, len);
        if net != addr {
            return Err(ctx.err_line(
                line,
                "route.prefix",
                format!("{addr}/{len} has host bits set; did you mean {net}/{len}?"),
            ));
        }
        let vrf = vrf_of(r.vrf.as_ref(), "route.vrf")?;
        let ttl_model = parse_ttl(&ctx, r.ttl_model.as_ref(), "route.ttl-model")?;
        let inline = RawNh {
            via: r.via.as_ref(),
            port: r.port.as_ref(),
            labels: r.push.as_ref(),
            weight: r.weight.as_ref(),
        };
        let inline_field = inline_first(&inline, "route", "push");
        let action = if r.blackhole.as_ref().is_some_and(|b| *b.get_ref()) {
            if let Some((field, span)) = inline_field {
                return Err(ctx.err(
                    &span,
                    &field,
                    "a blackhole route takes no next hop; remove this or blackhole = true",
                ));
            }
            if let Some(n) = &r.nexthops {
                return Err(ctx.err(
                    &n.span(),
                    "route.nexthops",
                    "a blackhole route takes no next hop; remove this or blackhole = true",
                ));
            }
            RouteAction::Blackhole
        } else if let Some(list) = &r.nexthops {
            if let Some((field, span)) = inline_field {
                return Err(ctx.err(
                    &span,
                    &field,
                    "give next hops either inline (via, port, push, weight) or as nexthops = [...], not both",
                ));
            }
            v.check_count(list.get_ref().len(), &list.span(), "route.nexthops")?;
            let mut nhs = Vec::new();
            for n in list.get_ref() {
                let raw = RawNh {
                    via: n.via.as_ref(),
                    port: n.port.as_ref(),
                    labels: n.push.as_ref(),
                    weight: n.weight.as_ref(),
                };
                nhs.push(v.nexthop(&raw, "route.nexthops", "push", false, Some(addr.is_ipv4()), line)?);
            }
            RouteAction::Forward(nhs)
        } else if inline.via.is_some() || inline.port.is_some() {
            RouteAction::Forward(vec![v.nexthop(
                &inline,
                "route",
                "push",
                false,
                Some(addr.is_ipv4()),
                line,
            )?])
        } else {
            let hint = match inline_field {
                Some((f, _)) => format!(" ({f} alone is not enough)"),
                None => String::new(),
            };
            return Err(ctx.err_line(
                line,
                "route.prefix",
                format!("route {net}/{len} has no next hop{hint}: add via = \"...\" (and port = \"...\"), nexthops = [...], or blackhole = true"),
            ));
        };
        let key = (vrf.clone(), net, len);
        if let Some(first) = prefixes.get(&key) {
            let why = match first {
                Origin::Route(l) => {
                    format!("is already defined in VRF \"{vrf}\" at line {l} (overlapping definitions)")
                }
                Origin::Connected { port, line: l } => {
                    format!(
                        "is the connected subnet of port \"{port}\" (line {l}); a route cannot replace it"
                    )
                }
                Origin::Local { line: l } => {
                    format!("is one of this router's own addresses (line {l}); a route cannot replace it")
                }
            };
            return Err(ctx.err_line(line, "route.prefix", format!("{net}/{len} {why}")));
        }
        prefixes.insert(key, Origin::Route(line));
        routes.push(RouteConfig { vrf, prefix: net, len, action, ttl_model, line });
    }

    // [[label]]
    let mut labels = Vec::new();
    let mut label_lines: HashMap<Label, usize> = HashMap::new();
    for l in &raw.label {
        let line = ctx.line(&l.label.span());
        let label = match u32::try_from(*l.label.get_ref()) {
            Ok(v) if (MIN_UNRESERVED_LABEL..=MAX_LABEL).contains(&v) => v,
            Ok(v) if v < MIN_UNRESERVED_LABEL => {
                return Err(ctx.err_line(
                    line,
                    "label.in",
                    format!("label {v} is reserved (labels 0-15 are reserved); incoming labels are {MIN_UNRESERVED_LABEL} to {MAX_LABEL}"),
                ));
            }
            _ => {
                return Err(ctx.err_line(
                    line,
                    "label.in",
                    format!("label {} is out of range; incoming labels are {MIN_UNRESERVED_LABEL} to {MAX_LABEL} (20 bits)", l.label.get_ref()),
                ));
            }
        };
        if let Some(first) = label_lines.insert(label, line) {
            return Err(ctx.err_line(
                line,
                "label.in",
                format!("label {label} is already defined at line {first}"),
            ));
        }
        let ttl_model = parse_ttl(&ctx, l.ttl_model.as_ref(), "label.ttl-model")?;
        let swap = match l.action.get_ref().as_str() {
            "swap" => true,
            "pop" => false,
            other => {
                return Err(ctx.err(
                    &l.action.span(),
                    "label.action",
                    format!("unknown action \"{other}\"; expected \"swap\" or \"pop\""),
                ));
            }
        };
        let inline = RawNh {
            via: l.via.as_ref(),
            port: l.port.as_ref(),
            labels: l.out.as_ref(),
            weight: l.weight.as_ref(),
        };
        let has_inline_nh = inline.via.is_some() || inline.port.is_some() || inline.weight.is_some();
        if let (false, Some(out)) = (swap, &l.out) {
            return Err(ctx.err(
                &out.span(),
                "label.out",
                "pop takes no out labels; to swap, write action = \"swap\" (out = [3] swaps to implicit null, i.e. pops)",
            ));
        }
        let nexthops = if let Some(list) = &l.nexthops {
            if let Some((field, span)) = inline_first(&inline, "label", "out") {
                return Err(ctx.err(
                    &span,
                    &field,
                    "give next hops either inline (via, port, out, weight) or as nexthops = [...], not both",
                ));
            }
            v.check_count(list.get_ref().len(), &list.span(), "label.nexthops")?;
            let mut nhs = Vec::new();
            for n in list.get_ref() {
                if let (false, Some(out)) = (swap, &n.out) {
                    return Err(ctx.err(
                        &out.span(),
                        "label.nexthops.out",
                        "pop takes no out labels; write action = \"swap\" to swap",
                    ));
                }
                let raw = RawNh {
                    via: n.via.as_ref(),
                    port: n.port.as_ref(),
                    labels: n.out.as_ref(),
                    weight: n.weight.as_ref(),
                };
                nhs.push(v.nexthop(&raw, "label.nexthops", "out", swap, None, line)?);
            }
            Some(nhs)
        } else if has_inline_nh {
            Some(vec![v.nexthop(&inline, "label", "out", swap, None, line)?])
        } else {
            None
        };
        let action = match nexthops {
            Some(nhs) => {
                if let Some(vrf) = &l.vrf {
                    return Err(ctx.err(
                        &vrf.span(),
                        "label.vrf",
                        "vrf applies only to pop without a next hop (pop, then route the IP packet in that VRF); remove it or the next hop",
                    ));
                }
                LabelConfigAction::Forward(nhs)
            }
            None if swap => {
                return Err(ctx.err(
                    &l.action.span(),
                    "label.action",
                    format!("swap of label {label} needs a next hop: add via = \"...\" (and port = \"...\") or nexthops = [...]"),
                ));
            }
            None => LabelConfigAction::PopAndLookup { vrf: vrf_of(l.vrf.as_ref(), "label.vrf")? },
        };
        labels.push(LabelConfig { label, action, ttl_model, line });
    }

    let limits = parse_limits(&ctx, raw.limits.as_ref())?;
    let frr = match &raw.frr {
        None => None,
        Some(f) => Some(parse_frr(&ctx, f, &rr, &raw.port)?),
    };

    let neighbors = parse_neighbors(&ctx, &raw.neighbor, &ports)?;

    Ok(Config { path: path.to_path_buf(), router, ports, vrfs, routes, labels, limits, frr, neighbors })
}

/// `[[neighbor]]`s: a known port, an address, a unicast MAC, one entry per address and port.
fn parse_neighbors(
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

/// `[frr]`: where zebra's FPM connects, and the rule that the kernel owns the addresses.
fn parse_frr(ctx: &Ctx, f: &RawFrr, router: &RawRouter, ports: &[RawPort]) -> Result<FrrConfig, ConfigError> {
    let fpm = match &f.fpm {
        None => FrrConfig::DEFAULT_FPM,
        Some(s) => {
            let addr: std::net::SocketAddr = s.get_ref().parse().map_err(|_| {
                ctx.err(
                    &s.span(),
                    "frr.fpm",
                    format!("\"{}\" is not an address and port like 127.0.0.1:2620", s.get_ref()),
                )
            })?;
            if !addr.ip().is_loopback() {
                return Err(ctx.err(
                    &s.span(),
                    "frr.fpm",
                    format!(
                        "{addr} is not a loopback address: FPM has no authentication, so whoever reaches \
                         it controls the router's tables; listen on 127.0.0.1 or ::1 (zebra runs in the \
                         router's own network namespace)"
                    ),
                ));
            }
            addr
        }
    };
    let seconds = |v: &Option<S<i64>>, key: &str, default| match v {
        None => Ok(default),
        Some(h) => match u64::try_from(*h.get_ref()) {
            Ok(v) if (1..=86_400).contains(&v) => Ok(std::time::Duration::from_secs(v)),
            _ => Err(ctx.err(
                &h.span(),
                key,
                format!("{} is out of range; expected 1 to 86400 seconds", h.get_ref()),
            )),
        },
    };
    let hold = seconds(&f.hold_time, "frr.hold-time", FrrConfig::DEFAULT_HOLD)?;
    let stale = seconds(&f.stale_time, "frr.stale-time", FrrConfig::DEFAULT_STALE)?;
    let kernel_owns = "with [frr] the kernel owns the addresses (FRR's daemons use them); \
                       vmpls reads them from the interfaces: remove this key";
    if let Some(a) = router.addresses.as_ref().and_then(|a| a.first()) {
        return Err(ctx.err(&a.span(), "router.addresses", kernel_owns));
    }
    if let Some(a) = ports.iter().find_map(|p| p.addresses.as_ref().and_then(|a| a.first())) {
        return Err(ctx.err(&a.span(), "port.addresses", kernel_owns));
    }
    if let Some(p) = ports.iter().find(|p| p.kind.as_ref().is_some_and(|k| k.get_ref() != "af-packet")) {
        return Err(ctx.err(
            &p.name.span(),
            "port.kind",
            "with [frr] every port is an interface the kernel also has (kind \"af-packet\"), so that \
             FRR's daemons can use it",
        ));
    }
    Ok(FrrConfig { fpm, hold, stale })
}

/// One `[limits]` number: `None` when absent, else within `min..=max`. `below` explains
/// what a value under `min` would mean (or why it is refused), `above` what caps it.
fn limit(
    ctx: &Ctx,
    v: Option<&S<i64>>,
    key: &str,
    (min, max): (u32, u32),
    below: &str,
    above: &str,
) -> Result<Option<u32>, ConfigError> {
    let Some(v) = v else { return Ok(None) };
    let n = *v.get_ref();
    let why = if n < i64::from(min) && !below.is_empty() {
        format!(": {below}")
    } else if n > i64::from(max) && !above.is_empty() {
        format!(": {above}")
    } else {
        String::new()
    };
    match u32::try_from(n) {
        Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(ctx.err(
            &v.span(),
            &format!("limits.{key}"),
            format!("{n} is out of range; expected {min} to {max}{why}"),
        )),
    }
}

/// `[limits]`: every key optional, defaults from [`LimitsConfig::default`]; bursts
/// default to their rate.
fn parse_limits(ctx: &Ctx, raw: Option<&RawLimits>) -> Result<LimitsConfig, ConfigError> {
    let d = LimitsConfig::default();
    let Some(r) = raw else { return Ok(d) };
    let rate = (0, MAX_RATE);
    let icmp_rate = limit(ctx, r.icmp_rate.as_ref(), "icmp-rate", rate, "", "")?.unwrap_or(d.icmp_rate);
    let icmp_burst = match (&r.icmp_burst, icmp_rate) {
        (Some(b), 0) => {
            return Err(ctx.err(
                &b.span(),
                "limits.icmp-burst",
                "icmp-rate = 0 sends no ICMP errors at all, so a burst means nothing: remove icmp-burst, or set icmp-rate above 0",
            ));
        }
        (b, _) => limit(
            ctx,
            b.as_ref(),
            "icmp-burst",
            (1, MAX_RATE),
            "a burst of 0 would send nothing; to send no ICMP errors, set icmp-rate = 0",
            "",
        )?
        .unwrap_or(icmp_rate),
    };
    let neighbor_request_rate = limit(
        ctx,
        r.neighbor_request_rate.as_ref(),
        "neighbor-request-rate",
        (1, MAX_RATE),
        "with 0 the router would send no ARP request or neighbour solicitation, and resolve no next hop",
        "",
    )?
    .unwrap_or(d.neighbor_request_rate);
    let neighbor_request_burst = limit(
        ctx,
        r.neighbor_request_burst.as_ref(),
        "neighbor-request-burst",
        (1, MAX_RATE),
        "a burst of 0 would send no request at all",
        "",
    )?
    .unwrap_or(neighbor_request_rate);
    let neighbor_entries = limit(
        ctx,
        r.neighbor_entries.as_ref(),
        "neighbor-entries",
        (16, MAX_NEIGHBOR_ENTRIES),
        "the table also holds the router's own next hops",
        "",
    )?
    .unwrap_or(d.neighbor_entries);
    let neighbor_held_total = limit(
        ctx,
        r.neighbor_held_total.as_ref(),
        "neighbor-held-total",
        (1, MAX_HELD_TOTAL),
        "with 0 the first frames toward every new neighbour would be dropped",
        "held frames keep packet buffers, and more would starve forwarding (the router has 1024)",
    )?
    .unwrap_or(d.neighbor_held_total);
    let neighbor_held_per_address = match limit(
        ctx,
        r.neighbor_held_per_address.as_ref(),
        "neighbor-held-per-address",
        (1, MAX_HELD_TOTAL),
        "with 0 the first frames toward every new neighbour would be dropped",
        "",
    )? {
        Some(n) if n > neighbor_held_total => {
            let span = r.neighbor_held_per_address.as_ref().map(|v| v.span()).unwrap_or_default();
            return Err(ctx.err(
                &span,
                "limits.neighbor-held-per-address",
                format!(
                    "{n} is more than neighbor-held-total ({neighbor_held_total}), the frames held for all addresses together"
                ),
            ));
        }
        Some(n) => n,
        None => d.neighbor_held_per_address.min(neighbor_held_total),
    };
    Ok(LimitsConfig {
        icmp_rate,
        icmp_burst,
        neighbor_request_rate,
        neighbor_request_burst,
        neighbor_entries,
        neighbor_held_per_address,
        neighbor_held_total,
    })
}

/// The first inline next-hop key present, as (`table.key`, span).
fn inline_first(nh: &RawNh, table: &str, labels_key: &str) -> Option<(String, Range<usize>)> {
    let f = |k: &str| format!("{table}.{k}");
    nh.via
        .map(|s| (f("via"), s.span()))
        .or_else(|| nh.port.map(|s| (f("port"), s.span())))
        .or_else(|| nh.labels.map(|s| (f(labels_key), s.span())))
        .or_else(|| nh.weight.map(|s| (f("weight"), s.span())))
}

/// Checks of next hops against the ports.
struct Validator<'a> {
    ctx: &'a Ctx<'a>,
    ports: &'a [PortConfig],
}

impl Validator<'_> {
    fn check_count(&self, n: usize, span: &Range<usize>, field: &str) -> Result<(), ConfigError> {
        if n == 0 {
            return Err(self.ctx.err(span, field, "the list is empty; give at least one next hop"));
        }
        if n > MAX_NEXTHOPS {
            return Err(self.ctx.err(
                span,
                field,
                format!("{n} next hops; at most {MAX_NEXTHOPS} are allowed"),
            ));
        }
        Ok(())
    }

    fn subnets(&self, p: &PortConfig) -> String {
        if p.addresses.is_empty() {
            return "it has no addresses".to_string();
        }
        let nets: Vec<String> = p.addresses.iter().map(|&(a, l)| format!("{}/{l}", mask(a, l))).collect();
        nets.join(", ")
    }

    /// Resolves one next hop: the port by name or by `via`'s subnet, the gateway on it,
    /// the label stack (required non-empty when `need_labels`; `ipv4_payload` as in
    /// [`crate::check_out_stack`]), the weight.
    fn nexthop(
        &self,
        nh: &RawNh,
        table: &str,
        labels_key: &str,
        need_labels: bool,
        ipv4_payload: Option<bool>,
        line: usize,
    ) -> Result<NexthopConfig, ConfigError> {
        let ctx = self.ctx;
        let is_label = table.starts_with("label");
        let field = |k: &str| format!("{table}.{k}");
        let port = match nh.port {
            None => None,
            Some(s) => match self.ports.iter().position(|p| p.name == *s.get_ref()) {
                Some(i) => Some(i),
                None => {
                    let names: Vec<&str> = self.ports.iter().map(|p| p.name.as_str()).collect();
                    let known = if names.is_empty() {
                        "none are defined".to_string()
                    } else {
                        format!("ports are: {}", names.join(", "))
                    };
                    return Err(ctx.err(
                        &s.span(),
                        &field("port"),
                        format!("no port named \"{}\" ({known})", s.get_ref()),
                    ));
                }
            },
        };
        let via = match nh.via {
            None => None,
            Some(s) => Some((parse_host(ctx, s, &field("via"), "198.18.10.2 or 2001:db8:10::2")?, s.span())),
        };
        let (via, port) = match (via, port) {
            (None, None) => {
                return Err(ctx.err_line(
                    line,
                    &field("via"),
                    "the next hop needs via = \"...\" (a gateway) and/or port = \"...\"",
                ));
            }
            (None, Some(p)) => {
                if is_label {
                    let span = nh.port.map(|s| s.span()).unwrap_or_default();
                    return Err(ctx.err(
                        &span,
                        &field("port"),
                        "a labelled packet needs a gateway on the port: add via = \"...\"",
                    ));
                }
                (None, p)
            }
            (Some((a, span)), Some(p)) => {
                let port = &self.ports[p];
                if port.addresses.iter().any(|&(b, _)| b == a) {
                    return Err(ctx.err(
                        &span,
                        &field("via"),
                        format!("{a} is this router's own address on port \"{}\"; the next hop must be a neighbour", port.name),
                    ));
                }
                if !port.addresses.iter().any(|&(net, len)| contains(net, len, a)) {
                    return Err(ctx.err(
                        &span,
                        &field("via"),
                        format!(
                            "{a} is not on any subnet of port \"{}\" ({}); a next hop must be directly connected",
                            port.name,
                            self.subnets(port)
                        ),
                    ));
                }
                (Some(a), p)
            }
            (Some((a, span)), None) => {
                let on: Vec<usize> = (0..self.ports.len())
                    .filter(|&i| self.ports[i].addresses.iter().any(|&(net, len)| contains(net, len, a)))
                    .collect();
                match on.as_slice() {
                    [] => {
                        return Err(ctx.err(
                            &span,
                            &field("via"),
                            format!("{a} is not on any port's subnet; a next hop must be directly connected (check the address, or the port's addresses)"),
                        ));
                    }
                    [p] => {
                        let port = &self.ports[*p];
                        if port.addresses.iter().any(|&(b, _)| b == a) {
                            return Err(ctx.err(
                                &span,
                                &field("via"),
                                format!("{a} is this router's own address on port \"{}\"; the next hop must be a neighbour", port.name),
                            ));
                        }
                        (Some(a), *p)
                    }
                    many => {
                        let names: Vec<String> =
                            many.iter().map(|&i| format!("\"{}\"", self.ports[i].name)).collect();
                        return Err(ctx.err(
                            &span,
                            &field("via"),
                            format!(
                                "{a} is on the subnets of ports {}; add port = \"...\" to choose one",
                                names.join(" and ")
                            ),
                        ));
                    }
                }
            }
        };
        let labels = match nh.labels {
            Some(stack) => parse_stack(ctx, stack, &field(labels_key), ipv4_payload)?,
            None => Vec::new(),
        };
        if need_labels && labels.is_empty() {
            let span = nh.labels.map(|s| s.span()).or(nh.via.map(|s| s.span())).or(nh.port.map(|s| s.span()));
            let msg = "swap needs the outgoing label: out = [label] (out = [3] for penultimate-hop popping)";
            return Err(match span {
                Some(span) => ctx.err(&span, &field(labels_key), msg),
                None => ctx.err_line(line, &field(labels_key), msg),
            });
        }
        let weight = parse_weight(ctx, nh.weight, &field("weight"))?;
        // Implicit null alone: no label (penultimate-hop pop, or push nothing).
        let labels = if labels == [IMPLICIT_NULL] { Vec::new() } else { labels };
        Ok(NexthopConfig { port: port as PortId, via, labels, weight })
    }
}

fn raw_offloads(raw: &Option<RawOffloads>) -> crate::OffloadOverrides {
    let Some(o) = raw else { return crate::OffloadOverrides::default() };
    crate::OffloadOverrides {
        tso4: o.tso4.or(o.tso),
        tso6: o.tso6.or(o.tso),
        uso: o.uso,
        csum: o.csum,
        mpls_gso: o.mpls_gso,
    }
}
