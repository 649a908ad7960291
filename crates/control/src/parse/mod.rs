//! From TOML text to a validated [`Config`]: the file's shape (serde, with the span of
//! every value kept), then every check that needs more than one value.

mod attach;
mod ctx;
mod frr;
mod limits;
mod neighbors;
mod nexthops;
mod raw;
mod values;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use toml::Spanned;
use vmpls_fib::{DEFAULT_VRF_NAME, Label, MAX_LABEL, MIN_UNRESERVED_LABEL};

use self::attach::{port_attachment, same_namespace};
use self::ctx::Ctx;
use self::frr::parse_frr;
use self::limits::parse_limits;
use self::neighbors::parse_neighbors;
use self::nexthops::{RawNh, Validator, inline_first};
use self::raw::{RawFile, RawOffloads};
pub use self::values::MAX_SOCKET_PATH;
use self::values::{
    check_name, check_unix_socket_path, mask, max_len, parse_host, parse_prefix, parse_ttl, usable_host,
};
use crate::{
    Config, ConfigError, FastPathMode, LabelConfig, LabelConfigAction, PortConfig, PortKind, RouteAction,
    RouteConfig, RouterConfig,
};

type S<T> = Spanned<T>;

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

    let v = Validator::new(&ctx, &ports);

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

/// The largest MTU the kernel gives a TAP device (65535 minus the Ethernet header).
const TAP_MAX_MTU: u32 = 65535 - 14;

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
