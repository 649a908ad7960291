//! From TOML text to a validated [`Config`]: the file's shape (serde, with the span of
//! every value kept, in [`raw`]), then every check that needs more than one value, one
//! module a section of the file, in the order [`parse`] runs them: `[router]`, `[[vrf]]`,
//! `[[port]]`, `[[route]]`, `[[label]]`, `[limits]`, `[frr]`, `[[neighbor]]`. Every error
//! names the file, the line and the key ([`ctx`]).

mod attach;
mod ctx;
mod frr;
mod labels;
mod limits;
mod neighbors;
mod nexthops;
mod ports;
pub(crate) mod pseudowires;
mod raw;
mod router;
mod routes;
mod values;
mod vpls;
mod vrfs;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

use toml::Spanned;
use vmpls_fib::DEFAULT_VRF_NAME;

use self::ctx::Ctx;
use self::nexthops::Validator;
pub use self::ports::TAP_MEMIF_MAX_MTU;
use self::raw::RawFile;
pub use self::values::MAX_SOCKET_PATH;
use crate::{Config, ConfigError};
use vmpls_wire::prefix::max_len;

type S<T> = Spanned<T>;

/// What a prefix in a VRF was first defined as, for duplicate messages.
enum Origin {
    Route(usize),
    Connected { port: String, line: usize },
    Local { line: usize },
}

/// Every prefix defined so far, by (VRF, address, length): the ports' addresses and
/// connected subnets, the router's addresses, the routes.
type Prefixes = HashMap<(String, IpAddr, u8), Origin>;

/// Parses and checks the config file `path` whose text is `text`.
pub(crate) fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let ctx = Ctx::new(path, text);
    let raw: RawFile = toml::from_str(text).map_err(|e| ctx.toml_error(&e))?;

    let Some(rr) = &raw.router else {
        return Err(ctx.err_line(
            1,
            "router",
            "missing [router] table; a config starts with [router] and name = \"...\"",
        ));
    };
    let (router, router_lines) = router::parse_router(&ctx, rr)?;
    let vrfs = vrfs::parse_vrfs(&ctx, &raw.vrf)?;

    let mut prefixes = Prefixes::new();
    let ports = ports::parse_ports(&ctx, &raw.port, &vrfs, &mut prefixes)?;
    // The router's own addresses after the ports': a port's address that is also the
    // router's keeps the port's line in messages.
    for &(a, line) in &router_lines {
        let key = (DEFAULT_VRF_NAME.to_string(), a, max_len(a));
        prefixes.entry(key).or_insert(Origin::Local { line });
    }

    let v = Validator::new(&ctx, &ports);
    let routes = routes::parse_routes(&ctx, &v, &raw.route, &vrfs, &mut prefixes)?;
    let labels = labels::parse_labels(&ctx, &v, &raw.label, &vrfs)?;

    let limits = limits::parse_limits(&ctx, raw.limits.as_ref())?;
    let frr = match &raw.frr {
        None => None,
        Some(f) => Some(frr::parse_frr(&ctx, f, rr, &raw.port)?),
    };
    let neighbors = neighbors::parse_neighbors(&ctx, &raw.neighbor, &ports)?;
    let pseudowires = pseudowires::parse_pseudowires(&ctx, &raw.pseudowire, &ports, &labels, frr.is_some())?;
    let vpls = vpls::parse_vpls(&ctx, &raw.vpls, &ports, &labels, &pseudowires, frr.is_some())?;

    Ok(Config {
        path: path.to_path_buf(),
        router,
        ports,
        vrfs,
        routes,
        labels,
        limits,
        frr,
        neighbors,
        pseudowires,
        vpls,
    })
}
