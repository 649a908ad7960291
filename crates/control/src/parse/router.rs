//! `[router]`: the router's name (which names its control socket), the control socket's
//! path, the fast-path and poll modes, the CPUs it runs on and the router's own addresses,
//! at most one of each family.

use std::net::IpAddr;
use std::path::PathBuf;

use super::S;
use super::ctx::Ctx;
use super::raw::RawRouter;
use super::values::{check_name, check_unix_socket_path, parse_host};
use crate::{ConfigError, CpuList, FastPathMode, PollMode, RouterConfig};

/// The `[router]` table, and the line of each of its addresses (for duplicate messages
/// once the ports' addresses are known).
pub(super) fn parse_router(
    ctx: &Ctx,
    rr: &RawRouter,
) -> Result<(RouterConfig, Vec<(IpAddr, usize)>), ConfigError> {
    let control_socket = match &rr.control_socket {
        None => None,
        Some(s) => Some(check_socket_path(ctx, s)?),
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
    let poll = match rr.poll.as_ref().map(|s| (s, s.get_ref().as_str())) {
        None | Some((_, "adaptive")) => PollMode::Adaptive,
        Some((_, "interrupt")) => PollMode::Interrupt,
        Some((s, other)) => {
            return Err(ctx.err(
                &s.span(),
                "router.poll",
                format!("unknown poll mode \"{other}\"; use \"adaptive\" (the default) or \"interrupt\""),
            ));
        }
    };
    let cpus = match &rr.cpus {
        None => None,
        Some(s) => Some(CpuList::parse(s.get_ref()).map_err(|why| {
            ctx.err(&s.span(), "router.cpus", format!("{why}; write CPUs as \"1\" or \"0,2-3\""))
        })?),
    };
    let mut router = RouterConfig {
        name: check_router_name(ctx, &rr.name)?,
        v4: None,
        v6: None,
        control_socket,
        fast_path,
        poll,
        cpus,
    };
    let mut router_lines = Vec::new();
    for s in rr.addresses.iter().flatten() {
        let a = parse_host(ctx, s, "router.addresses", "198.18.255.1 or 2001:db8:ff::1")?;
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
    Ok((router, router_lines))
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
fn check_socket_path(ctx: &Ctx, s: &S<String>) -> Result<PathBuf, ConfigError> {
    check_unix_socket_path(ctx, s, "router.control-socket", "/run/vmpls/pe1.sock")
}
