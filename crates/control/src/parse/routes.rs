//! `[[route]]`: IP routes. The prefix (no host bits), the VRF, the TTL model, and the
//! action: blackhole, or next hops inline or as `nexthops = [...]` (resolved by
//! [`Validator`]). A prefix is defined once in its VRF and replaces neither a port's
//! connected subnet nor one of the router's own addresses.

use std::net::IpAddr;

use super::ctx::Ctx;
use super::nexthops::{RawNh, Validator, inline_first};
use super::raw::RawRoute;
use vmpls_wire::prefix::mask;

use super::values::{parse_prefix, parse_ttl};
use super::vrfs::vrf_of;
use super::{Origin, Prefixes};
use crate::{ConfigError, RouteAction, RouteConfig};
use vmpls_fib::Reject;

/// The `[[route]]`s in file order, each recorded in `prefixes`.
pub(super) fn parse_routes(
    ctx: &Ctx,
    v: &Validator,
    raw: &[RawRoute],
    vrfs: &[String],
    prefixes: &mut Prefixes,
) -> Result<Vec<RouteConfig>, ConfigError> {
    let mut routes = Vec::new();
    for r in raw {
        let line = ctx.line(&r.prefix.span());
        let (addr, len) = parse_prefix(ctx, &r.prefix, "route.prefix", "198.18.2.0/24 or 2001:db8:2::/64")?;
        let net = mask(addr, len);
        if net != addr {
            return Err(ctx.err_line(
                line,
                "route.prefix",
                format!("{addr}/{len} has host bits set; did you mean {net}/{len}?"),
            ));
        }
        let vrf = vrf_of(ctx, vrfs, r.vrf.as_ref(), "route.vrf")?;
        let ttl_model = parse_ttl(ctx, r.ttl_model.as_ref(), "route.ttl-model")?;
        let action = route_action(ctx, v, r, (net, len), line)?;
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
    Ok(routes)
}

/// What route `r` to `net/len` (at `line`) does: `blackhole = true` or `reject = "..."`
/// with no next hop,
/// a `nexthops = [...]` list with no inline next hop, or one inline next hop.
fn route_action(
    ctx: &Ctx,
    v: &Validator,
    r: &RawRoute,
    (net, len): (IpAddr, u8),
    line: usize,
) -> Result<RouteAction, ConfigError> {
    let inline = RawNh {
        via: r.via.as_ref(),
        port: r.port.as_ref(),
        labels: r.push.as_ref(),
        weight: r.weight.as_ref(),
    };
    let inline_field = inline_first(&inline, "route", "push");
    let blackhole = r.blackhole.as_ref().is_some_and(|b| *b.get_ref());
    let reject = match &r.reject {
        None => None,
        Some(s) => match Reject::from_name(s.get_ref()) {
            Some(r) => Some(r),
            None => {
                return Err(ctx.err(
                    &s.span(),
                    "route.reject",
                    format!("unknown reject {:?}: \"unreachable\" (ICMP host unreachable) or \"prohibit\" (administratively prohibited)", s.get_ref()),
                ));
            }
        },
    };
    if let (true, Some(s)) = (blackhole, &r.reject) {
        return Err(ctx.err(
            &s.span(),
            "route.reject",
            "a route is either a blackhole (silent) or rejects (with an ICMP error); remove one",
        ));
    }
    if blackhole || reject.is_some() {
        let (what, field) = match reject {
            None => ("a blackhole route", "blackhole = true"),
            Some(_) => ("a rejecting route", "reject"),
        };
        let why = format!("{what} takes no next hop; remove this or {field}");
        if let Some((field, span)) = inline_field {
            return Err(ctx.err(&span, &field, why));
        }
        if let Some(n) = &r.nexthops {
            return Err(ctx.err(&n.span(), "route.nexthops", why));
        }
        Ok(reject.map_or(RouteAction::Blackhole, RouteAction::Reject))
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
            nhs.push(v.nexthop(&raw, "route.nexthops", "push", false, Some(net.is_ipv4()), line)?);
        }
        Ok(RouteAction::Forward(nhs))
    } else if inline.via.is_some() || inline.port.is_some() {
        Ok(RouteAction::Forward(vec![v.nexthop(
            &inline,
            "route",
            "push",
            false,
            Some(net.is_ipv4()),
            line,
        )?]))
    } else {
        let hint = match inline_field {
            Some((f, _)) => format!(" ({f} alone is not enough)"),
            None => String::new(),
        };
        Err(ctx.err_line(
            line,
            "route.prefix",
            format!("route {net}/{len} has no next hop{hint}: add via = \"...\" (and port = \"...\"), nexthops = [...], blackhole = true or reject = \"unreachable\""),
        ))
    }
}
