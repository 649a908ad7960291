//! The iproute2 route grammar, parsed into [`Request`]s:
//!
//! ```text
//! route { add | del | replace } [ unicast | blackhole ] PREFIX [ vrf NAME ]
//!       [ ttl-propagate { enabled | disabled } ] [ proto NAME ] NH | nexthop NH ...
//! NH := [ encap mpls LABEL[/LABEL...] ] [ via [ inet | inet6 ] ADDRESS ] [ dev PORT ]
//!       [ weight N ]
//! route { show | list } [ vrf NAME ] [ PREFIX ]
//! route get ADDRESS [ vrf NAME ]
//! route flush { all | SELECTOR ... }
//! SELECTOR := [ root | match | exact ] PREFIX | vrf { NAME | all } | dev PORT
//!             | via ADDRESS | proto NAME
//!
//! -f mpls route { add | del | replace } LABEL [ vrf NAME ] [ ttl-propagate ... ]
//!       MNH | nexthop MNH ...
//! MNH := [ as [ to ] LABEL[/LABEL...] ] [ via [ inet | inet6 ] ADDRESS ] [ dev PORT ]
//!        [ weight N ]
//! ```
//!
//! Keywords may come in any order, as in iproute2. A label route without next hop pops
//! and routes the packet underneath in its VRF (`vrf NAME`, default "default"); with a
//! next hop but no `as` it pops and forwards (penultimate-hop popping).

use crate::api::{
    Family, IpRoute, Mac, MplsAction, MplsRoute, Nexthop, PrefixMatch, Protocol, PwSpec, PwType, Request,
    RouteFilter, RouteSpec, RouteType, check_neighbor_mac,
};
use crate::tables::parse_prefix;

/// `vmpls route help`.
pub const HELP: &str = "\
Usage: vmpls [-r ROUTER | --socket PATH] [-j] [-p] [-4|-6] route { add | del | replace } ROUTE
       vmpls [-r ROUTER | --socket PATH] [-j] [-p] [-4|-6] route show [ vrf NAME ] [ PREFIX ]
       vmpls [-r ROUTER | --socket PATH] [-j] [-p] route get ADDRESS [ vrf NAME ]
       vmpls [-r ROUTER | --socket PATH] [-j] [-4|-6] route flush { all | SELECTOR ... }
       vmpls ... -f mpls route { add | del | replace } LABEL_ROUTE
       vmpls ... -f mpls route show [ LABEL ]
       vmpls ... -f mpls route flush { all | SELECTOR ... }
ROUTE := [ unicast | blackhole | unreachable | prohibit ] PREFIX [ vrf NAME ] [ ttl-propagate { enabled | disabled } ]
         [ proto NAME ] NH | nexthop NH [ nexthop NH ... ]
SELECTOR := [ root | match | exact ] PREFIX | LABEL | vrf { NAME | all } | dev PORT
            | via ADDRESS | proto NAME
flush removes the file's and the CLI's routes it selects (default VRF unless `vrf` says
otherwise); connected subnets and routes from FRR stay; `reload` brings back the file's.
NH := [ encap mpls LABEL[/LABEL...] ] [ via [ inet | inet6 ] ADDRESS ] [ dev PORT ] [ weight N ]
LABEL_ROUTE := LABEL [ ttl-propagate { enabled | disabled } ]
               { MNH | nexthop MNH ... | vrf NAME }
MNH := [ as [ to ] LABEL[/LABEL...] ] [ via [ inet | inet6 ] ADDRESS ] [ dev PORT ] [ weight N ]
A label route without next hop pops and routes the packet in VRF NAME (default \"default\");
with a next hop and no `as` it pops and forwards (penultimate-hop popping).";

/// What `route` was asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Show,
    Get,
    Add,
    Del,
    Replace,
    Flush,
}

fn op(word: Option<&str>) -> Result<Op, String> {
    Ok(match word {
        None | Some("show" | "list" | "ls" | "lst" | "sh" | "s" | "l") => Op::Show,
        Some("add" | "a") => Op::Add,
        Some("get" | "g") => Op::Get,
        Some("del" | "delete" | "d") => Op::Del,
        Some("replace" | "repl") => Op::Replace,
        Some("flush" | "f") => Op::Flush,
        Some(other) => {
            return Err(format!(
                "unknown route command \"{other}\"; expected add, del, replace, show, get or flush"
            ));
        }
    })
}

/// Parses `-f FAMILY`'s argument.
///
/// # Errors
/// An unknown family.
pub fn parse_family(word: &str) -> Result<Family, String> {
    match word {
        "inet" | "ipv4" | "4" => Ok(Family::Inet),
        "inet6" | "ipv6" | "6" => Ok(Family::Inet6),
        "mpls" => Ok(Family::Mpls),
        other => Err(format!("unknown family \"{other}\"; expected inet, inet6 or mpls")),
    }
}

fn parse_labels(word: &str) -> Result<Vec<u32>, String> {
    word.split('/')
        .map(|l| {
            l.parse::<u32>().map_err(|_| {
                format!("\"{word}\" is not a label stack; expected LABEL[/LABEL...] like 100/200")
            })
        })
        .collect()
}

struct Words<'a> {
    words: &'a [String],
    i: usize,
}

impl<'a> Words<'a> {
    fn next(&mut self) -> Option<&'a str> {
        let w = self.words.get(self.i)?;
        self.i += 1;
        Some(w.as_str())
    }

    fn arg(&mut self, keyword: &str, what: &str) -> Result<&'a str, String> {
        self.next().ok_or_else(|| format!("\"{keyword}\" needs {what} after it"))
    }
}

/// Next hops being collected: inline keywords, or `nexthop` blocks.
#[derive(Default)]
struct Nexthops {
    inline: Option<Nexthop>,
    blocks: Vec<Nexthop>,
}

fn empty_nh() -> Nexthop {
    Nexthop { gateway: None, dev: None, labels: Vec::new(), weight: 1 }
}

impl Nexthops {
    fn current(&mut self) -> &mut Nexthop {
        match self.blocks.last_mut() {
            Some(n) => n,
            None => self.inline.get_or_insert_with(empty_nh),
        }
    }

    fn finish(self) -> Result<Vec<Nexthop>, String> {
        match (self.inline, self.blocks.is_empty()) {
            (Some(_), false) => Err("give the next hop either inline or with `nexthop ...`, not both".into()),
            (Some(n), true) => Ok(vec![n]),
            (None, _) => Ok(self.blocks),
        }
    }

    /// Handles a next-hop keyword; `Ok(false)` if `word` is not one.
    fn keyword(&mut self, word: &str, w: &mut Words, mpls: bool) -> Result<bool, String> {
        match word {
            "nexthop" => self.blocks.push(empty_nh()),
            "encap" if !mpls => {
                let kind = w.arg("encap", "a type (mpls)")?;
                if kind != "mpls" {
                    return Err(format!("encap {kind}: only `encap mpls LABEL[/LABEL...]` is supported"));
                }
                let l = w.arg("encap mpls", "a label stack like 100/200")?;
                self.current().labels = parse_labels(l)?;
            }
            "as" if mpls => {
                let mut l = w.arg("as", "a label stack like 200")?;
                if l == "to" {
                    l = w.arg("as to", "a label stack like 200")?;
                }
                self.current().labels = parse_labels(l)?;
            }
            "via" => {
                let mut a = w.arg("via", "an address")?;
                if matches!(a, "inet" | "inet6") {
                    a = w.arg("via inet", "an address")?;
                }
                let addr = a.parse().map_err(|_| format!("\"{a}\" is not an IPv4 or IPv6 address"))?;
                self.current().gateway = Some(addr);
            }
            "dev" | "oif" => {
                let d = w.arg(word, "a port name")?;
                self.current().dev = Some(d.to_string());
            }
            "weight" => {
                let n = w.arg("weight", "a number")?;
                self.current().weight =
                    n.parse().map_err(|_| format!("\"{n}\" is not a valid weight (1 or more)"))?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

fn ttl_propagate(w: &mut Words) -> Result<bool, String> {
    match w.arg("ttl-propagate", "enabled or disabled")? {
        "enabled" => Ok(true),
        "disabled" => Ok(false),
        other => {
            Err(format!("ttl-propagate {other}: expected enabled (uniform, RFC 3443) or disabled (pipe)"))
        }
    }
}

/// `proto NAME`.
fn protocol(w: &mut Words, keyword: &str) -> Result<Protocol, String> {
    let name = w.arg(keyword, "a protocol name")?;
    Protocol::from_name(name).ok_or_else(|| {
        format!(
            "unknown protocol \"{name}\"; expected boot, static, kernel, zebra, bgp, isis, ospf, rip, \
             ripng, eigrp, ldp, sharp, openfabric, srte, babel or other"
        )
    })
}

/// `route flush SELECTOR...`: iproute2's selectors; like `ip route flush`, it needs at
/// least one (`all` for the whole table).
fn parse_flush(w: &mut Words, family: Option<Family>) -> Result<Request, String> {
    let mut f = RouteFilter::default();
    let mut all = false;
    let mut any = false;
    while let Some(word) = w.next() {
        any = true;
        match word {
            "all" if !all => all = true,
            "vrf" | "table" => f.vrf = Some(w.arg(word, "a VRF name (or all)")?.to_string()),
            "dev" | "oif" => f.dev = Some(w.arg(word, "a port name")?.to_string()),
            "via" => {
                let mut a = w.arg("via", "an address")?;
                if matches!(a, "inet" | "inet6") {
                    a = w.arg("via inet", "an address")?;
                }
                f.via = Some(a.parse().map_err(|_| format!("\"{a}\" is not an IPv4 or IPv6 address"))?);
            }
            "proto" | "protocol" => f.proto = Some(protocol(w, word)?),
            "root" | "match" | "exact" | "to" if f.dst.is_none() => {
                f.dst_match = match word {
                    "root" => PrefixMatch::Root,
                    "match" => PrefixMatch::Match,
                    _ => PrefixMatch::Exact,
                };
                f.dst = Some(w.arg(word, "a prefix")?.to_string());
            }
            other if f.dst.is_none() => f.dst = Some(other.to_string()),
            other => return Err(garbage(other)),
        }
    }
    if !any {
        return Err("route flush needs a selector, as `ip route flush` does: `all`, a prefix, \
                    `vrf NAME`, `dev PORT`, `via ADDRESS` or `proto NAME`"
            .into());
    }
    let family = family.unwrap_or(match &f.dst {
        Some(d) if d.contains(':') => Family::Inet6,
        _ => Family::Inet,
    });
    match (&f.dst, family) {
        (Some(_), Family::Mpls) if f.dst_match != PrefixMatch::Exact => {
            return Err("root and match select prefixes; give a label alone".into());
        }
        (Some(l), Family::Mpls) => {
            let l = l
                .parse::<u32>()
                .map_err(|_| format!("\"{l}\" is not a label; expected a number like 100"))?;
            f.dst = Some(l.to_string());
        }
        (Some(p), _) => {
            let (a, len) = parse_prefix(p, family).map_err(|e| e.to_string())?;
            f.dst = Some(format!("{a}/{len}"));
        }
        (None, _) => {}
    }
    if family == Family::Mpls && f.vrf.is_some() {
        return Err("label routes are not per VRF: drop `vrf`".into());
    }
    Ok(Request::RouteFlush { family, filter: f })
}

fn garbage(word: &str) -> String {
    format!("either \"{word}\" is duplicate, or it is garbage (see `vmpls route help`)")
}

/// Parses the words after `route` into a request. `family` comes from `-4`, `-6` or
/// `-f`; without one, `show` lists IPv4 routes and `add`/`del`/`replace` take the family
/// of the prefix.
///
/// # Errors
/// A message for `Error: ...`.
pub fn parse_route(family: Option<Family>, args: &[String]) -> Result<Request, String> {
    let mut w = Words { words: args, i: 0 };
    let op = op(w.next())?;
    if op == Op::Flush {
        return parse_flush(&mut w, family);
    }
    if op == Op::Show || op == Op::Get {
        let mut vrf = None;
        let mut dst: Option<&str> = None;
        while let Some(word) = w.next() {
            match word {
                "vrf" | "table" => vrf = Some(w.arg(word, "a VRF name")?.to_string()),
                "to" | "exact" if dst.is_none() => dst = Some(w.arg(word, "a destination")?),
                other if dst.is_none() => dst = Some(other),
                other => return Err(garbage(other)),
            }
        }
        if op == Op::Get {
            let Some(dst) = dst else {
                return Err("route get needs an address: vmpls route get ADDRESS".into());
            };
            let addr = dst.parse().map_err(|_| format!("\"{dst}\" is not an IPv4 or IPv6 address"))?;
            return Ok(Request::RouteGet { addr, vrf });
        }
        let dst = match (dst, family) {
            (None, _) => None,
            (Some(l), Some(Family::Mpls)) => Some(
                l.parse::<u32>()
                    .map_err(|_| format!("\"{l}\" is not a label; expected a number like 100"))?
                    .to_string(),
            ),
            (Some(p), f) => {
                let (a, len) =
                    parse_prefix(p, f.unwrap_or(if p.contains(':') { Family::Inet6 } else { Family::Inet }))
                        .map_err(|e| e.to_string())?;
                Some(format!("{a}/{len}"))
            }
        };
        let family = family.unwrap_or(match &dst {
            Some(d) if d.contains(':') => Family::Inet6,
            _ => Family::Inet,
        });
        if family == Family::Mpls && vrf.is_some() {
            return Err("label routes are not per VRF: drop `vrf`".into());
        }
        return Ok(Request::RouteShow { family, vrf, dst });
    }
    let route = if family == Some(Family::Mpls) {
        RouteSpec::Mpls(parse_mpls(&mut w, op)?)
    } else {
        parse_ip(&mut w, family, op)?
    };
    Ok(match op {
        Op::Add => Request::RouteAdd { route },
        Op::Del => Request::RouteDel { route },
        Op::Replace | Op::Show | Op::Get | Op::Flush => Request::RouteReplace { route },
    })
}

fn parse_ip(w: &mut Words, family: Option<Family>, op: Op) -> Result<RouteSpec, String> {
    let mut kind = None;
    let mut dst: Option<&str> = None;
    let mut vrf = None;
    let mut ttl = true;
    let mut proto = Protocol::Boot;
    let mut nhs = Nexthops::default();
    while let Some(word) = w.next() {
        if nhs.keyword(word, w, false)? {
            continue;
        }
        match word {
            w if dst.is_none() && kind.is_none() && RouteType::from_name(w).is_some() => {
                kind = RouteType::from_name(w);
            }
            "vrf" | "table" => vrf = Some(w.arg(word, "a VRF name")?.to_string()),
            "ttl-propagate" => ttl = ttl_propagate(w)?,
            "proto" | "protocol" => proto = protocol(w, word)?,
            // What `route show` prints for connected routes, so its lines paste back.
            "scope" => {
                w.arg(word, "a scope (link, global)")?;
            }
            "src" => {
                let a = w.arg(word, "an address")?;
                a.parse::<std::net::IpAddr>()
                    .map_err(|_| format!("\"{a}\" is not an IPv4 or IPv6 address"))?;
            }
            "to" if dst.is_none() => dst = Some(w.arg("to", "a prefix")?),
            other if dst.is_none() => dst = Some(other),
            other => return Err(garbage(other)),
        }
    }
    let Some(dst) = dst else {
        let verb = match op {
            Op::Del => "del",
            Op::Replace => "replace",
            _ => "add",
        };
        return Err(format!(
            "a destination is needed: vmpls route {verb} PREFIX [encap mpls LABEL] via ADDRESS dev PORT"
        ));
    };
    // `default` takes its family from -4/-6, else from the gateway.
    let gateway_v6 =
        nhs.inline.iter().chain(&nhs.blocks).find_map(|n| n.gateway).is_some_and(|g| g.is_ipv6());
    let guess = if gateway_v6 { Family::Inet6 } else { Family::Inet };
    let (addr, len) = parse_prefix(dst, family.unwrap_or(guess)).map_err(|e| e.to_string())?;
    let family = family.unwrap_or(if addr.is_ipv4() { Family::Inet } else { Family::Inet6 });
    let route = IpRoute {
        dst: format!("{addr}/{len}"),
        vrf: vrf.unwrap_or_else(|| vmpls_fib::DEFAULT_VRF_NAME.to_string()),
        kind: kind.unwrap_or_default(),
        nexthops: nhs.finish()?,
        ttl_propagate: ttl,
        protocol: proto,
        prefsrc: None,
    };
    Ok(match family {
        Family::Inet6 => RouteSpec::Inet6(route),
        _ => RouteSpec::Inet(route),
    })
}

fn parse_mpls(w: &mut Words, op: Op) -> Result<MplsRoute, String> {
    let mut label: Option<u32> = None;
    let mut vrf = None;
    let mut ttl = true;
    let mut proto = Protocol::Boot;
    let mut nhs = Nexthops::default();
    while let Some(word) = w.next() {
        if nhs.keyword(word, w, true)? {
            continue;
        }
        match word {
            "vrf" | "table" => vrf = Some(w.arg(word, "a VRF name")?.to_string()),
            "ttl-propagate" => ttl = ttl_propagate(w)?,
            "proto" | "protocol" => proto = protocol(w, word)?,
            other if label.is_none() => {
                label = Some(
                    other
                        .parse()
                        .map_err(|_| format!("\"{other}\" is not a label; expected a number like 100"))?,
                );
            }
            other => return Err(garbage(other)),
        }
    }
    let Some(label) = label else {
        let verb = if op == Op::Del { "del" } else { "add" };
        return Err(format!(
            "an incoming label is needed: vmpls -f mpls route {verb} LABEL [as LABEL] via inet ADDRESS dev PORT"
        ));
    };
    let nexthops = nhs.finish()?;
    let action = if nexthops.is_empty() { MplsAction::Lookup } else { MplsAction::Forward };
    Ok(MplsRoute { label, action, nexthops, vrf, ttl_propagate: ttl, protocol: proto })
}

/// A MAC address as iproute2 writes it (`02:00:5e:00:01:01`, or with `-`), checked to
/// be unicast and not all zeros.
///
/// # Errors
/// What is wrong with it, for `Error: ...`.
pub fn parse_lladdr(word: &str) -> Result<Mac, String> {
    let mac = word.parse().map_err(|e| format!("\"{word}\" is not a MAC address; {e}"))?;
    check_neighbor_mac(mac)
}

/// Parses the words after `neigh` for a change: `add|replace ADDR lladdr MAC dev PORT
/// [nud permanent]` or `del ADDR dev PORT`, in any order after the verb as iproute2
/// takes them (`to ADDR` too). `None` for the words of `show` (or none at all), which
/// the caller handles.
///
/// # Errors
/// A message for `Error: ...`.
pub fn parse_neigh(args: &[String]) -> Option<Result<Request, String>> {
    let verb = args.first()?.as_str();
    let replace = match verb {
        "add" | "a" => false,
        "replace" | "change" | "chg" | "repl" => true,
        "del" | "delete" | "d" => {
            return Some(neigh_words(&args[1..], false).and_then(|(dst, lladdr, dev)| match lladdr {
                Some(_) => Err("neigh del takes no lladdr: give the address and dev PORT".into()),
                None => Ok(Request::NeighDel { dst, dev }),
            }));
        }
        _ => return None,
    };
    Some(neigh_words(&args[1..], true).and_then(|(dst, lladdr, dev)| {
        let lladdr = lladdr.ok_or("a static neighbour needs lladdr MAC")?;
        Ok(Request::NeighAdd { dst, lladdr, dev, replace })
    }))
}

/// Parses the words after `pw` for a change: `add NAME attachment PORT local-label L
/// remote-label R peer ADDR [control-word on|off]` (keywords in any order after the
/// name) or `del NAME`. `None` for `show` (or no words), which the caller handles.
///
/// # Errors
/// A message for `Error: ...`.
pub fn parse_pw(args: &[String]) -> Option<Result<Request, String>> {
    let verb = args.first()?.as_str();
    match verb {
        "add" | "a" | "replace" | "change" => Some(pw_add_words(&args[1..])),
        "del" | "delete" | "d" => Some(match &args[1..] {
            [name] => Ok(Request::PwDel { name: name.clone() }),
            [] => Err("pw del needs the pseudowire's name".into()),
            [_, extra, ..] => Err(format!("pw del takes only a name; \"{extra}\" is garbage")),
        }),
        _ => None,
    }
}

fn pw_add_words(args: &[String]) -> Result<Request, String> {
    let Some((name, rest)) = args.split_first() else {
        return Err(
            "pw add needs a name: pw add NAME attachment PORT local-label L remote-label R peer ADDR".into(),
        );
    };
    let (mut attachment, mut local, mut remote, mut peer, mut cw) = (None, None, None, None, true);
    let mut it = rest.iter().map(String::as_str);
    while let Some(key) = it.next() {
        let value = it.next().ok_or_else(|| format!("\"{key}\" needs a value after it"))?;
        let label = |v: &str| -> Result<u32, String> {
            v.parse::<u32>().map_err(|_| format!("{key} \"{v}\" is not a label"))
        };
        match key {
            "attachment" | "dev" => attachment = Some(value.to_string()),
            "local-label" | "local" => local = Some(label(value)?),
            "remote-label" | "remote" => remote = Some(label(value)?),
            "peer" => {
                peer = Some(value.parse().map_err(|_| format!("peer \"{value}\" is not an IP address"))?)
            }
            "control-word" | "cw" => {
                cw = match value {
                    "on" | "yes" | "true" => true,
                    "off" | "no" | "false" => false,
                    other => return Err(format!("control-word \"{other}\": expected on or off")),
                }
            }
            other => return Err(format!("unknown pw keyword \"{other}\"")),
        }
    }
    let pw = PwSpec {
        name: name.clone(),
        local_label: local.ok_or("give local-label L")?,
        remote_label: remote.ok_or("give remote-label R")?,
        peer: peer.ok_or("give peer ADDR")?,
        control_word: cw,
        pw_type: PwType::Ethernet,
    };
    Ok(Request::PwReplace { pw, attachment })
}

/// The address, `lladdr` and `dev` of a `neigh` change.
fn neigh_words(args: &[String], add: bool) -> Result<(std::net::IpAddr, Option<Mac>, String), String> {
    let (mut dst, mut lladdr, mut dev) = (None, None, None);
    let mut mac = None;
    let mut it = args.iter().map(String::as_str);
    let set = |slot: &mut Option<String>, word: &str, v: Option<&str>| -> Result<(), String> {
        let v = v.ok_or_else(|| format!("\"{word}\" needs a value after it"))?;
        match slot.replace(v.to_string()) {
            Some(_) => Err(format!("\"{word}\" is given twice")),
            None => Ok(()),
        }
    };
    while let Some(w) = it.next() {
        match w {
            "lladdr" if add => {
                let v = it.next();
                set(&mut lladdr, w, v)?;
                mac = Some(parse_lladdr(lladdr.as_deref().unwrap_or_default())?);
            }
            "dev" => set(&mut dev, w, it.next())?,
            "nud" if add => match it.next() {
                Some("permanent") => {}
                Some(other) => {
                    return Err(format!(
                        "nud \"{other}\": vmpls sets static neighbours only (nud permanent)"
                    ));
                }
                None => return Err("\"nud\" needs a value after it".into()),
            },
            "to" => set(&mut dst, w, it.next())?,
            other if dst.is_none() => dst = Some(other.to_string()),
            other => return Err(format!("either \"{other}\" is duplicate, or it is garbage")),
        }
    }
    let dst = dst.ok_or("give the neighbour's address")?;
    let addr: std::net::IpAddr =
        dst.parse().map_err(|_| format!("\"{dst}\" is not an IPv4 or IPv6 address"))?;
    let dev = dev.ok_or("give the port: dev PORT")?;
    Ok((addr, mac, dev))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn parse(family: Option<Family>, s: &str) -> Result<Request, String> {
        parse_route(family, &args(s))
    }

    #[test]
    fn the_issue_examples_parse() {
        let r = parse(None, "add 198.18.2.0/24 encap mpls 100/200 via 198.18.10.2 dev core0").unwrap();
        let Request::RouteAdd { route: RouteSpec::Inet(r) } = r else { panic!("{r:?}") };
        assert_eq!(r.dst, "198.18.2.0/24");
        assert_eq!(r.nexthops.len(), 1);
        assert_eq!(r.nexthops[0].labels, vec![100, 200]);
        assert_eq!(r.nexthops[0].gateway, Some("198.18.10.2".parse().unwrap()));
        assert_eq!(r.nexthops[0].dev.as_deref(), Some("core0"));

        let r = parse(Some(Family::Mpls), "add 100 as 200 via inet 198.18.20.2 dev core1").unwrap();
        let Request::RouteAdd { route: RouteSpec::Mpls(m) } = r else { panic!("{r:?}") };
        assert_eq!((m.label, m.action.clone()), (100, MplsAction::Forward));
        assert_eq!(m.nexthops[0].labels, vec![200]);

        let r = parse(Some(Family::Mpls), "add 101 via inet 198.18.20.2 dev core1").unwrap();
        let Request::RouteAdd { route: RouteSpec::Mpls(m) } = r else { panic!("{r:?}") };
        assert!(m.nexthops[0].labels.is_empty());

        let r = parse(Some(Family::Mpls), "add 2001 vrf cust").unwrap();
        let Request::RouteAdd { route: RouteSpec::Mpls(m) } = r else { panic!("{r:?}") };
        assert_eq!((m.action, m.vrf.as_deref()), (MplsAction::Lookup, Some("cust")));

        assert_eq!(
            parse(None, "show vrf cust").unwrap(),
            Request::RouteShow { family: Family::Inet, vrf: Some("cust".into()), dst: None }
        );
        assert_eq!(
            parse(Some(Family::Inet6), "").unwrap(),
            Request::RouteShow { family: Family::Inet6, vrf: None, dst: None }
        );
        assert_eq!(
            parse(Some(Family::Mpls), "list").unwrap(),
            Request::RouteShow { family: Family::Mpls, vrf: None, dst: None }
        );
    }

    #[test]
    fn family_follows_the_prefix_and_keywords_come_in_any_order() {
        let r = parse(
            None,
            "replace 2001:db8:2::/64 dev core via 2001:db8:10::2 encap mpls 5 ttl-propagate disabled",
        )
        .unwrap();
        let Request::RouteReplace { route: RouteSpec::Inet6(r) } = r else { panic!("{r:?}") };
        assert!(!r.ttl_propagate);
        assert_eq!(r.nexthops[0].labels, vec![5]);
        let r = parse(None, "del default").unwrap();
        assert!(
            matches!(r, Request::RouteDel { route: RouteSpec::Inet(ref x) } if x.dst == "0.0.0.0/0" && x.nexthops.is_empty())
        );
        let r = parse(None, "add blackhole 198.18.9.0/24").unwrap();
        assert!(
            matches!(r, Request::RouteAdd { route: RouteSpec::Inet(ref x) } if x.kind == RouteType::Blackhole)
        );
        for (word, kind) in [("unreachable", RouteType::Unreachable), ("prohibit", RouteType::Prohibit)] {
            let r = parse(Some(Family::Inet6), &format!("add {word} 2001:db8:9::/64 vrf red")).unwrap();
            assert!(
                matches!(r, Request::RouteAdd { route: RouteSpec::Inet6(ref x) } if x.kind == kind && x.vrf == "red"),
                "{word}: {r:?}"
            );
        }
    }

    #[test]
    fn show_takes_a_destination_get_an_address_and_default_a_family() {
        let show = |fam, line| parse(fam, line).unwrap();
        assert_eq!(
            show(None, "show 198.18.2.0/24"),
            Request::RouteShow { family: Family::Inet, vrf: None, dst: Some("198.18.2.0/24".into()) }
        );
        assert_eq!(
            show(None, "show default"),
            Request::RouteShow { family: Family::Inet, vrf: None, dst: Some("0.0.0.0/0".into()) }
        );
        assert_eq!(
            show(Some(Family::Inet6), "list default"),
            Request::RouteShow { family: Family::Inet6, vrf: None, dst: Some("::/0".into()) }
        );
        assert_eq!(
            show(Some(Family::Mpls), "show 1002"),
            Request::RouteShow { family: Family::Mpls, vrf: None, dst: Some("1002".into()) }
        );
        assert_eq!(
            show(None, "get 198.18.2.7 vrf cust"),
            Request::RouteGet { addr: "198.18.2.7".parse().unwrap(), vrf: Some("cust".into()) }
        );
        // `default` with an IPv6 gateway is ::/0 without -6.
        let Request::RouteAdd { route: RouteSpec::Inet6(r) } = show(None, "add default via 2001:db8:10::2")
        else {
            panic!("not an IPv6 route")
        };
        assert_eq!(r.dst, "::/0");
        // A connected route's line, as `route show` prints it, parses.
        let Request::RouteReplace { route: RouteSpec::Inet(r) } =
            show(None, "replace 198.18.1.0/24 dev ce1 proto kernel scope link src 198.18.1.1")
        else {
            panic!("not an IPv4 route")
        };
        assert_eq!(r.nexthops[0].dev.as_deref(), Some("ce1"));
    }

    #[test]
    fn proto_is_kept_and_flush_takes_iproute2_selectors() {
        let Request::RouteReplace { route: RouteSpec::Inet(r) } =
            parse(None, "replace 198.18.2.0/24 encap mpls 1002 via 198.18.10.2 dev core proto static")
                .unwrap()
        else {
            panic!("not an IPv4 replace")
        };
        assert_eq!(r.protocol, Protocol::Static);
        let Request::RouteReplace { route: RouteSpec::Mpls(m) } =
            parse(Some(Family::Mpls), "replace 1002 as to 2002 via inet 198.18.20.2 dev east proto ldp")
                .unwrap()
        else {
            panic!("not a label replace")
        };
        assert_eq!(m.protocol, Protocol::Ldp);
        let e = parse(None, "add 198.18.2.0/24 via 198.18.10.2 proto pigeon").unwrap_err();
        assert!(e.contains("unknown protocol \"pigeon\""), "{e}");

        let flush = |fam, line| match parse(fam, line).unwrap() {
            Request::RouteFlush { family, filter } => (family, filter),
            other => panic!("{other:?}"),
        };
        assert_eq!(flush(None, "flush all"), (Family::Inet, RouteFilter::default()));
        assert_eq!(
            flush(None, "flush root 198.18.0.0/16 vrf cust dev core via 198.18.10.2 proto boot"),
            (
                Family::Inet,
                RouteFilter {
                    vrf: Some("cust".into()),
                    dst: Some("198.18.0.0/16".into()),
                    dst_match: PrefixMatch::Root,
                    dev: Some("core".into()),
                    via: Some("198.18.10.2".parse().unwrap()),
                    proto: Some(Protocol::Boot),
                }
            )
        );
        let (family, f) = flush(None, "flush 2001:db8:2::/64");
        assert_eq!(
            (family, f.dst.as_deref(), f.dst_match),
            (Family::Inet6, Some("2001:db8:2::/64"), PrefixMatch::Exact)
        );
        let (family, f) = flush(Some(Family::Inet6), "flush table all");
        assert_eq!((family, f.vrf.as_deref()), (Family::Inet6, Some("all")));
        let (family, f) = flush(Some(Family::Mpls), "flush 1002");
        assert_eq!((family, f.dst.as_deref()), (Family::Mpls, Some("1002")));
        for (fam, line, want) in [
            (None, "flush", "needs a selector"),
            (None, "flush 198.18.0.0/16 198.18.1.0/24", "duplicate"),
            (Some(Family::Mpls), "flush vrf cust", "not per VRF"),
            (Some(Family::Mpls), "flush root 100", "give a label alone"),
            (None, "flush proto", "\"proto\" needs"),
        ] {
            let e = parse(fam, line).unwrap_err();
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn multipath_uses_nexthop_blocks() {
        let r = parse(
            None,
            "add 198.18.2.0/24 nexthop encap mpls 100 via 198.18.10.2 weight 3 nexthop encap mpls 101 via 198.18.11.2 dev b",
        )
        .unwrap();
        let Request::RouteAdd { route: RouteSpec::Inet(r) } = r else { panic!("{r:?}") };
        assert_eq!(r.nexthops.len(), 2);
        assert_eq!((r.nexthops[0].weight, r.nexthops[1].weight), (3, 1));
        assert_eq!(r.nexthops[1].dev.as_deref(), Some("b"));
        let e = parse(None, "add 198.18.2.0/24 via 198.18.10.2 nexthop via 198.18.11.2").unwrap_err();
        assert!(e.contains("not both"), "{e}");
    }

    #[test]
    fn mistakes_say_what_was_expected() {
        for (fam, line, want) in [
            (None, "fly", "unknown route command \"fly\""),
            (None, "add", "a destination is needed"),
            (None, "add bogus via 1.2.3.4", "\"bogus\" is not a prefix"),
            (None, "add 198.18.2.0/24 via", "\"via\" needs an address"),
            (None, "add 198.18.2.0/24 via nowhere", "\"nowhere\" is not an IPv4 or IPv6 address"),
            (None, "add 198.18.2.0/24 encap mpls x/1 via 198.18.10.2", "\"x/1\" is not a label stack"),
            (None, "add 198.18.2.0/24 encap vxlan 5", "only `encap mpls"),
            (None, "add 198.18.2.0/24 198.18.3.0/24", "\"198.18.3.0/24\" is duplicate"),
            (None, "add 198.18.2.0/24 via 198.18.10.2 weight heavy", "\"heavy\" is not a valid weight"),
            (None, "add 198.18.2.0/24 ttl-propagate maybe", "ttl-propagate maybe"),
            (None, "show extra", "\"extra\" is not a prefix"),
            (None, "show 198.18.2.0/24 extra", "\"extra\" is duplicate"),
            (None, "get", "route get needs an address"),
            (None, "get 198.18.2.0/24", "is not an IPv4 or IPv6 address"),
            (Some(Family::Mpls), "add x as 200", "\"x\" is not a label"),
            (Some(Family::Mpls), "add as 200 via inet 198.18.20.2", "an incoming label is needed"),
            (Some(Family::Mpls), "show vrf cust", "not per VRF"),
        ] {
            let e = parse(fam, line).unwrap_err();
            assert!(e.contains(want), "{line}: {e}");
        }
        assert!(parse_family("ipx").unwrap_err().contains("inet, inet6 or mpls"));
    }

    #[test]
    fn pw_words() {
        let w = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let add =
            parse_pw(&w("add mpw0 attachment ce1 local-label 1000 remote-label 2000 peer 198.18.255.3"));
        let want = Request::PwReplace {
            pw: PwSpec {
                name: "mpw0".into(),
                local_label: 1000,
                remote_label: 2000,
                peer: "198.18.255.3".parse().unwrap(),
                control_word: true,
                pw_type: PwType::Ethernet,
            },
            attachment: Some("ce1".into()),
        };
        assert_eq!(add.unwrap().unwrap(), want);
        let off = parse_pw(&w("add mpw0 peer 2001:db8::3 remote-label 2 local-label 17 control-word off"));
        assert!(matches!(
            off.unwrap().unwrap(),
            Request::PwReplace { pw: PwSpec { control_word: false, .. }, attachment: None }
        ));
        assert_eq!(parse_pw(&w("del mpw0")).unwrap().unwrap(), Request::PwDel { name: "mpw0".into() });
        assert!(parse_pw(&w("show")).is_none());
        for bad in [
            "add",
            "add x local-label",
            "add x local-label a",
            "add x local-label 1 remote-label 2",
            "add x cw maybe peer ::1 local 20 remote 20",
            "del",
            "del a b",
        ] {
            assert!(parse_pw(&w(bad)).unwrap().is_err(), "{bad}");
        }
    }

    #[test]
    fn neigh_changes_take_iproute2_words() {
        let w = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let add = parse_neigh(&w("add 198.18.1.2 lladdr 02:00:00:00:01:02 dev ce1")).unwrap().unwrap();
        let want = Request::NeighAdd {
            dst: "198.18.1.2".parse().unwrap(),
            lladdr: Mac([2, 0, 0, 0, 1, 2]),
            dev: "ce1".into(),
            replace: false,
        };
        assert_eq!(add, want);
        let any_order = parse_neigh(&w("add dev ce1 lladdr 02:00:00:00:01:02 to 198.18.1.2 nud permanent"));
        assert_eq!(any_order.unwrap().unwrap(), want);
        let repl =
            parse_neigh(&w("replace 2001:db8:1::2 lladdr 02:00:00:00:01:02 dev ce1")).unwrap().unwrap();
        assert!(matches!(repl, Request::NeighAdd { replace: true, .. }));
        let del = parse_neigh(&w("del 198.18.1.2 dev ce1")).unwrap().unwrap();
        assert_eq!(del, Request::NeighDel { dst: "198.18.1.2".parse().unwrap(), dev: "ce1".into() });
        assert!(parse_neigh(&w("show")).is_none());
        assert!(parse_neigh(&[]).is_none());
        for (words, msg) in [
            ("add 198.18.1.2 dev ce1", "needs lladdr"),
            ("add 198.18.1.2 lladdr 02:00:00:00:01 dev ce1", "not a MAC address"),
            ("add 198.18.1.2 lladdr +2:00:00:00:01:02 dev ce1", "not a MAC address"),
            ("add 198.18.1.2 lladdr ff:ff:ff:ff:ff:ff dev ce1", "not a unicast"),
            ("add 198.18.1.2 lladdr 02:00:00:00:01:02", "dev PORT"),
            ("add 198.18.1.x lladdr 02:00:00:00:01:02 dev ce1", "not an IPv4 or IPv6"),
            ("add 198.18.1.2 lladdr 02:00:00:00:01:02 dev ce1 nud reachable", "nud permanent"),
            ("add 198.18.1.2 198.18.1.3 lladdr 02:00:00:00:01:02 dev ce1", "garbage"),
            ("del 198.18.1.2 lladdr 02:00:00:00:01:02 dev ce1", "garbage"),
            ("del dev ce1", "address"),
        ] {
            let e = parse_neigh(&w(words)).unwrap().unwrap_err();
            assert!(e.contains(msg), "{words}: {e}");
        }
    }
}
