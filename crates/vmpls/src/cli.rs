//! The CLI against a running router: `vmpls [-r ROUTER | --socket PATH] [-j] [-p]
//! [-4|-6] [-f mpls] { route | link | neigh | vrf | stats | reload } ...`, iproute2's words and
//! order; errors print as `Error: ...` and exit non-zero (1: the command line or the
//! connection, 2: the router refused, as iproute2 does for the kernel).

use vmpls_control::api::{FlushSummary, IpRoute, Link, Neighbor, ReloadSummary, Request, Stats, Vrf};
use vmpls_control::show;

use crate::session::{CliError, Globals, connect, usage};

/// Prints `value` as JSON (`-p`: indented).
fn print_json(g: &Globals, value: &serde_json::Value) -> Result<(), CliError> {
    let text = if g.pretty { serde_json::to_string_pretty(value) } else { serde_json::to_string(value) }
        .map_err(|e| usage(e.to_string()))?;
    println!("{text}");
    Ok(())
}

fn decode<T: serde::de::DeserializeOwned>(v: Option<serde_json::Value>) -> Result<T, CliError> {
    serde_json::from_value(v.unwrap_or(serde_json::Value::Null))
        .map_err(|e| usage(format!("bad reply from the router: {e}")))
}

/// One request, printing its data as JSON with `-j` or as `text` otherwise.
fn show<T: serde::de::DeserializeOwned>(
    g: &Globals,
    req: &Request,
    text: impl FnOnce(T) -> String,
) -> Result<(), CliError> {
    let data = connect(g)?.request(req)?;
    if g.json {
        return print_json(g, &data.unwrap_or(serde_json::Value::Null));
    }
    print!("{}", text(decode(data)?));
    Ok(())
}

/// `vmpls route ...`.
///
/// # Errors
/// See [`CliError`].
pub fn route(g: &Globals, args: &[String]) -> Result<(), CliError> {
    if args.first().is_some_and(|a| a == "help") {
        println!("{}", vmpls_control::cli::HELP);
        return Ok(());
    }
    let req = vmpls_control::cli::parse_route(g.family, args).map_err(CliError::Usage)?;
    match &req {
        // Printed as the router streams it.
        Request::RouteShow { .. } => crate::stream::route_show(g, &req),
        // As `ip route get`: the address, then the route that takes it.
        Request::RouteGet { addr, .. } => {
            show(g, &req, |r: IpRoute| format!("{}\n", IpRoute { dst: addr.to_string(), ..r }))
        }
        // Silent, as `ip route flush`, but for routes it leaves alone.
        Request::RouteFlush { .. } => show(g, &req, |s: FlushSummary| {
            if s.frr_kept > 0 {
                eprintln!(
                    "{} matching routes from FRR kept: zebra owns them (remove them in FRR)",
                    s.frr_kept
                );
            }
            String::new()
        }),
        _ => connect(g)?.request(&req).map(|_| ()).map_err(CliError::from),
    }
}

/// Checks `show [dev] [NAME]`-style arguments and returns the name filter.
fn show_args(object: &str, args: &[String]) -> Result<Option<String>, CliError> {
    let mut it = args.iter().map(String::as_str);
    match it.next() {
        None | Some("show" | "list" | "ls" | "lst" | "sh") => {}
        Some(other) => {
            let also = if object == "neigh" || object == "pw" { ", add, replace or del" } else { "" };
            return Err(usage(format!("unknown {object} command \"{other}\"; expected show{also}")));
        }
    }
    let mut name = None;
    while let Some(w) = it.next() {
        let n = if w == "dev" {
            it.next().ok_or_else(|| usage("\"dev\" needs a port name after it"))?
        } else {
            w
        };
        if name.replace(n.to_string()).is_some() {
            return Err(usage(format!("either \"{n}\" is duplicate, or it is garbage")));
        }
    }
    Ok(name)
}

/// `vmpls pw show [NAME] | add NAME attachment PORT local-label L remote-label R peer
/// ADDR [control-word on|off] | del NAME`.
///
/// # Errors
/// See [`CliError`].
pub fn pw(g: &Globals, args: &[String]) -> Result<(), CliError> {
    if let Some(req) = vmpls_control::cli::parse_pw(args) {
        let req = req.map_err(CliError::Usage)?;
        connect(g)?.request(&req)?;
        return Ok(());
    }
    let name = show_args("pw", args)?;
    let data = connect(g)?.request(&Request::PwShow)?;
    let mut list: Vec<vmpls_control::api::PwStatus> = decode(data)?;
    if let Some(n) = &name {
        list.retain(|p| &p.name == n);
        if list.is_empty() {
            return Err(CliError::Router(format!("no pseudowire named \"{n}\"")));
        }
    }
    if g.json {
        let v = serde_json::to_value(&list).map_err(|e| usage(e.to_string()))?;
        return print_json(g, &v);
    }
    print!("{}", show::pseudowires(&list));
    Ok(())
}

/// `vmpls vpls show [NAME]`.
///
/// # Errors
/// See [`CliError`].
pub fn vpls(g: &Globals, args: &[String]) -> Result<(), CliError> {
    let name = show_args("vpls", args)?;
    let data = connect(g)?.request(&Request::VplsShow)?;
    let mut list: Vec<vmpls_control::api::VplsStatus> = decode(data)?;
    if let Some(n) = &name {
        list.retain(|v| &v.name == n);
        if list.is_empty() {
            return Err(CliError::Router(format!("no VPLS named \"{n}\"")));
        }
    }
    if g.json {
        let v = serde_json::to_value(&list).map_err(|e| usage(e.to_string()))?;
        return print_json(g, &v);
    }
    print!("{}", show::vpls(&list));
    Ok(())
}

/// `vmpls bridge fdb show [vpls NAME]` (`br NAME`, `master NAME` as aliases of `vpls`).
///
/// # Errors
/// See [`CliError`].
pub fn bridge(g: &Globals, args: &[String]) -> Result<(), CliError> {
    let mut it = args.iter().map(String::as_str);
    match it.next() {
        Some("fdb") => {}
        Some(other) => return Err(usage(format!("unknown bridge object \"{other}\"; expected fdb"))),
        None => return Err(usage("expected \"bridge fdb show [vpls NAME]\"")),
    }
    match it.next() {
        None | Some("show" | "list" | "ls" | "lst" | "sh") => {}
        Some(other) => return Err(usage(format!("unknown fdb command \"{other}\"; expected show"))),
    }
    let mut vpls = None;
    while let Some(w) = it.next() {
        match w {
            "vpls" | "br" | "master" => {
                let n = it.next().ok_or_else(|| usage(format!("\"{w}\" needs a VPLS name after it")))?;
                vpls = Some(n.to_string());
            }
            other => return Err(usage(format!("either \"{other}\" is duplicate, or it is garbage"))),
        }
    }
    let data = connect(g)?.request(&Request::FdbShow { vpls })?;
    let list: Vec<vmpls_control::api::FdbEntry> = decode(data)?;
    if g.json {
        let v = serde_json::to_value(&list).map_err(|e| usage(e.to_string()))?;
        return print_json(g, &v);
    }
    print!("{}", show::fdb(&list));
    Ok(())
}

/// `vmpls link show [[dev] PORT]`.
///
/// # Errors
/// See [`CliError`].
pub fn link(g: &Globals, args: &[String]) -> Result<(), CliError> {
    let name = show_args("link", args)?;
    let data = connect(g)?.request(&Request::LinkShow)?;
    let mut links: Vec<Link> = decode(data)?;
    if let Some(n) = &name {
        links.retain(|l| &l.name == n);
        if links.is_empty() {
            return Err(CliError::Router(format!("no port named \"{n}\"")));
        }
    }
    if g.json {
        let v = serde_json::to_value(&links).map_err(|e| usage(e.to_string()))?;
        return print_json(g, &v);
    }
    print!("{}", show::links(&links, g.stats));
    Ok(())
}

/// `vmpls vrf show [NAME]`.
///
/// # Errors
/// See [`CliError`].
pub fn vrf(g: &Globals, args: &[String]) -> Result<(), CliError> {
    let name = show_args("vrf", args)?;
    let mut list: Vec<Vrf> = decode(connect(g)?.request(&Request::VrfShow)?)?;
    if let Some(n) = &name {
        list.retain(|v| &v.name == n);
        if list.is_empty() {
            return Err(CliError::Router(format!("no VRF named \"{n}\"")));
        }
    }
    if g.json {
        let v = serde_json::to_value(&list).map_err(|e| usage(e.to_string()))?;
        return print_json(g, &v);
    }
    print!("{}", show::vrfs(&list, g.stats));
    Ok(())
}

/// `vmpls neigh show [dev PORT]`, `vmpls neigh add|replace ADDR lladdr MAC dev PORT`,
/// `vmpls neigh del ADDR dev PORT`.
///
/// # Errors
/// See [`CliError`].
pub fn neigh(g: &Globals, args: &[String]) -> Result<(), CliError> {
    if let Some(req) = vmpls_control::cli::parse_neigh(args) {
        let req = req.map_err(CliError::Usage)?;
        connect(g)?.request(&req)?;
        return Ok(());
    }
    let name = show_args("neigh", args)?;
    let data = connect(g)?.request(&Request::NeighShow)?;
    let mut list: Vec<Neighbor> = decode(data)?;
    if let Some(n) = &name {
        list.retain(|e| &e.dev == n);
        if list.is_empty() {
            // An empty table of a port, or no such port: say which, as `link show` does.
            let links: Vec<Link> = decode(connect(g)?.request(&Request::LinkShow)?)?;
            if !links.iter().any(|l| &l.name == n) {
                return Err(CliError::Router(format!("no port named \"{n}\"")));
            }
        }
    }
    if g.json {
        let v = serde_json::to_value(&list).map_err(|e| usage(e.to_string()))?;
        return print_json(g, &v);
    }
    print!("{}", show::neighbors(&list));
    Ok(())
}

/// `vmpls stats [-s]`.
///
/// # Errors
/// See [`CliError`].
pub fn stats(g: &Globals) -> Result<(), CliError> {
    show(g, &Request::Stats, |s: Stats| show::stats(&s, g.stats))
}

/// `vmpls reload`.
///
/// # Errors
/// See [`CliError`].
pub fn reload(g: &Globals) -> Result<(), CliError> {
    show(g, &Request::Reload, |s: ReloadSummary| format!("reloaded {s}\n"))
}
