//! The single values of a config and their checks, wherever they appear: host
//! addresses and prefixes (with the address arithmetic the checks need), TTL models,
//! weights, label stacks, names, Unix socket paths and MAC addresses. Each takes the
//! value's span and its `table.key` so that its message points at the line.

use std::net::{IpAddr, Ipv4Addr};

use vmpls_fib::{Label, MAX_LABEL, TtlModel};

use super::S;
use super::ctx::Ctx;
use crate::ConfigError;

use vmpls_wire::prefix::max_len;

pub(super) fn usable_host(a: IpAddr) -> bool {
    !(a.is_unspecified() || a.is_multicast() || a == IpAddr::V4(Ipv4Addr::BROADCAST))
}

/// A host address without prefix length.
pub(super) fn parse_host(
    ctx: &Ctx,
    s: &S<String>,
    field: &str,
    example: &str,
) -> Result<IpAddr, ConfigError> {
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
pub(super) fn parse_prefix(
    ctx: &Ctx,
    s: &S<String>,
    field: &str,
    example: &str,
) -> Result<(IpAddr, u8), ConfigError> {
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

pub(super) fn parse_ttl(ctx: &Ctx, s: Option<&S<String>>, field: &str) -> Result<TtlModel, ConfigError> {
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

pub(super) fn parse_weight(ctx: &Ctx, w: Option<&S<i64>>, field: &str) -> Result<u32, ConfigError> {
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
pub(super) fn parse_stack(
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
    crate::check_out_stack(&out, ipv4_payload).map_err(|m| ctx.err(&stack.span(), field, m.to_string()))?;
    Ok(out)
}

pub(super) fn check_name(ctx: &Ctx, s: &S<String>, field: &str, what: &str) -> Result<String, ConfigError> {
    let name = s.get_ref();
    if name.trim().is_empty() {
        return Err(ctx.err(&s.span(), field, format!("the {what} name is empty")));
    }
    Ok(name.clone())
}

/// An absolute path of a Unix socket for `field`. Linux limits socket paths to 107
/// bytes (`sun_path`).
pub(super) fn check_unix_socket_path(
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

/// `aa:bb:cc:dd:ee:ff` for `field`: a unicast MAC address, not all zeros, whose MAC is
/// `whose` in messages.
pub(super) fn parse_mac_of(
    ctx: &Ctx,
    s: &S<String>,
    field: &str,
    whose: &str,
) -> Result<[u8; 6], ConfigError> {
    let text = s.get_ref().trim();
    let bad = || {
        ctx.err(
            &s.span(),
            field,
            format!("\"{text}\" is not a MAC address; expected six hex bytes like \"02:00:5e:10:00:01\""),
        )
    };
    let mac = text.parse::<vmpls_wire::ethernet::Address>().map_err(|_| bad())?.0;
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
