//! `[frr]`: running under FRR, with zebra feeding routes over FPM. The FPM address and
//! the zebra module's pseudowire channel (on loopback only), the hold and stale timers, and the keys that FRR mode refuses because
//! the kernel then owns the addresses and every port is a kernel interface.

use super::S;
use super::ctx::Ctx;
use super::raw::{RawFrr, RawPort, RawRouter};
use crate::{ConfigError, FrrConfig};

/// `[frr]`: where zebra's FPM connects, and the rule that the kernel owns the addresses.
pub(super) fn parse_frr(
    ctx: &Ctx,
    f: &RawFrr,
    router: &RawRouter,
    ports: &[RawPort],
) -> Result<FrrConfig, ConfigError> {
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
    let pw_channel = match &f.pw_channel {
        None => Some(FrrConfig::DEFAULT_PW_CHANNEL),
        Some(s) if s.get_ref() == "off" => None,
        Some(s) => {
            let addr: std::net::SocketAddr = s.get_ref().parse().map_err(|_| {
                ctx.err(
                    &s.span(),
                    "frr.pw-channel",
                    format!(
                        "\"{}\" is not an address and port like 127.0.0.1:2621, nor \"off\"",
                        s.get_ref()
                    ),
                )
            })?;
            if !addr.ip().is_loopback() {
                return Err(ctx.err(
                    &s.span(),
                    "frr.pw-channel",
                    format!(
                        "{addr} is not a loopback address: the pseudowire channel has no authentication; \
                         listen on 127.0.0.1 or ::1 (zebra runs in the router's own network namespace)"
                    ),
                ));
            }
            if addr == fpm {
                return Err(ctx.err(&s.span(), "frr.pw-channel", format!("{addr} is FPM's address")));
            }
            Some(addr)
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
    let fpm_users = match &f.fpm_users {
        None => None,
        Some(u) => {
            let names = u.get_ref();
            if let Some(bad) = names.iter().find(|n| n.is_empty() || n.contains(['\0', ':', '/'])) {
                return Err(ctx.err(&u.span(), "frr.fpm-users", format!("{bad:?} is not a user name")));
            }
            Some((names.clone(), ctx.line(&u.span())))
        }
    };
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
    Ok(FrrConfig { fpm, hold, stale, fpm_users, pw_channel })
}
