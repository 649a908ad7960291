//! `[[vpls]]`: VPLS instances (RFC 4762). A unique name, its attachment circuits (ports
//! without addresses, in raw Ethernet mode, attached to nothing else), its pseudowires
//! (`[[vpls.pseudowire]]`, as `[[pseudowire]]` has them, names and local labels unique
//! among all pseudowires and `[[label]]`s), and its limits. A member pseudowire is static
//! (local-label, remote-label and peer) or, with `[frr]` and none of the three, signalled
//! by ldpd; one instance may have both kinds.

use std::collections::HashMap;
use std::net::IpAddr;

use vmpls_fib::PortId;

use super::S;
use super::ctx::Ctx;
use super::pseudowires::MAX_PW_NAME;
use super::raw::RawVpls;
use crate::api::{PwSpec, PwType};
use crate::{ConfigError, LabelConfig, PortConfig, PseudowireConfig, VplsConfig, VplsPseudowireConfig};

/// `mac-limit` when absent.
pub(crate) const DEFAULT_MAC_LIMIT: u32 = 4096;
/// The largest `mac-limit`.
const MAX_MAC_LIMIT: i64 = 1 << 20;
/// `mac-aging` when absent (seconds), as a Linux bridge's `ageing_time`.
pub(crate) const DEFAULT_MAC_AGING_S: u32 = 300;
/// The longest `mac-aging` (a day).
const MAX_MAC_AGING_S: i64 = 86_400;
/// The largest `flood-rate` (frames a second).
const MAX_FLOOD_RATE: i64 = 100_000_000;

fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_PW_NAME
        && name.bytes().all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(&c))
}

fn int_in(
    ctx: &Ctx,
    v: Option<&S<i64>>,
    field: &str,
    range: std::ops::RangeInclusive<i64>,
    default: u32,
) -> Result<u32, ConfigError> {
    let Some(v) = v else { return Ok(default) };
    let n = *v.get_ref();
    if !range.contains(&n) {
        return Err(ctx.err(
            &v.span(),
            field,
            format!("{n} is out of range ({}..={})", range.start(), range.end()),
        ));
    }
    Ok(n as u32)
}

fn label_of(ctx: &Ctx, v: &S<i64>, field: &str) -> Result<u32, ConfigError> {
    let n = *v.get_ref();
    let range = i64::from(vmpls_fib::FIRST_UNRESERVED)..=i64::from(vmpls_fib::MAX_LABEL);
    if !range.contains(&n) {
        return Err(ctx.err(
            &v.span(),
            field,
            format!("label {n} is out of range ({}..={}: 0 to 15 are reserved)", range.start(), range.end()),
        ));
    }
    Ok(n as u32)
}

/// A static member's spec: its labels (the local one unique among all pseudowires and
/// `[[label]]`s; `local` holds those taken, with their line) and its peer.
#[allow(clippy::too_many_arguments)]
fn static_member(
    ctx: &Ctx,
    name: &str,
    l: &S<i64>,
    rl: &S<i64>,
    p: &S<String>,
    control_word: bool,
    labels: &[LabelConfig],
    local: &mut HashMap<u32, usize>,
) -> Result<PwSpec, ConfigError> {
    let local_label = label_of(ctx, l, "vpls.pseudowire.local-label")?;
    let remote_label = label_of(ctx, rl, "vpls.pseudowire.remote-label")?;
    if let Some(first) = local.insert(local_label, ctx.line(&l.span())) {
        return Err(ctx.err(
            &l.span(),
            "vpls.pseudowire.local-label",
            format!("label {local_label} is already the local label of the pseudowire at line {first}"),
        ));
    }
    if let Some(lc) = labels.iter().find(|lc| lc.label == local_label) {
        return Err(ctx.err(
            &l.span(),
            "vpls.pseudowire.local-label",
            format!("label {local_label} is already a [[label]] at line {}", lc.line),
        ));
    }
    let peer: IpAddr = p.get_ref().trim().parse().map_err(|_| {
        ctx.err(&p.span(), "vpls.pseudowire.peer", format!("\"{}\" is not an IP address", p.get_ref()))
    })?;
    if peer.is_unspecified() || peer.is_multicast() {
        return Err(ctx.err(&p.span(), "vpls.pseudowire.peer", format!("{peer} cannot be a PE's address")));
    }
    Ok(PwSpec {
        name: name.to_string(),
        local_label,
        remote_label,
        peer,
        control_word,
        pw_type: PwType::Ethernet,
    })
}

/// The `[[vpls]]`s in file order.
pub(super) fn parse_vpls(
    ctx: &Ctx,
    raw: &[RawVpls],
    ports: &[PortConfig],
    labels: &[LabelConfig],
    vpws: &[PseudowireConfig],
    frr: bool,
) -> Result<Vec<VplsConfig>, ConfigError> {
    let mut out: Vec<VplsConfig> = Vec::new();
    // Pseudowire names and local labels taken so far, with their line.
    let mut pw_names: HashMap<String, usize> = vpws.iter().map(|p| (p.name.clone(), p.line)).collect();
    let mut local: HashMap<u32, usize> =
        vpws.iter().filter_map(|p| Some((p.static_spec.as_ref()?.local_label, p.line))).collect();
    let mut port_owner: HashMap<PortId, String> = HashMap::new();
    for r in raw {
        let line = ctx.line(&r.name.span());
        let name = r.name.get_ref().clone();
        if !name_ok(&name) {
            return Err(ctx.err(
                &r.name.span(),
                "vpls.name",
                format!("\"{name}\" is not a VPLS name: 1 to {MAX_PW_NAME} letters, digits, '-', '_' or '.'"),
            ));
        }
        if let Some(first) = out.iter().find(|v| v.name == name) {
            return Err(ctx.err(
                &r.name.span(),
                "vpls.name",
                format!("VPLS \"{name}\" is already defined at line {}", first.line),
            ));
        }
        if r.attachments.is_empty() {
            return Err(ctx.err_line(
                line,
                "vpls.attachments",
                "a VPLS needs at least one attachment circuit",
            ));
        }
        let mut attachments = Vec::new();
        for a in &r.attachments {
            let att = a.get_ref();
            let Some(port) = ports.iter().position(|p| p.name == *att) else {
                let names: Vec<&str> = ports.iter().map(|p| p.name.as_str()).collect();
                return Err(ctx.err(
                    &a.span(),
                    "vpls.attachments",
                    format!("no port named \"{att}\" (ports are: {})", names.join(", ")),
                ));
            };
            let id = port as PortId;
            if let Some(pw) = vpws.iter().find(|p| p.attachment == id) {
                return Err(ctx.err(
                    &a.span(),
                    "vpls.attachments",
                    format!(
                        "port \"{att}\" is the attachment of pseudowire \"{}\" (line {})",
                        pw.name, pw.line
                    ),
                ));
            }
            if let Some(other) = port_owner.insert(id, name.clone()) {
                return Err(ctx.err(
                    &a.span(),
                    "vpls.attachments",
                    format!("port \"{att}\" is already an attachment circuit of VPLS \"{other}\""),
                ));
            }
            if !ports[port].addresses.is_empty() && !frr {
                return Err(ctx.err(
                    &a.span(),
                    "vpls.attachments",
                    format!("port \"{att}\" has addresses; an attachment circuit is in raw Ethernet mode and has none"),
                ));
            }
            attachments.push(id);
        }
        let mut pseudowires = Vec::new();
        for p in &r.pseudowire {
            let pw_name = p.name.get_ref().clone();
            if !name_ok(&pw_name) {
                return Err(ctx.err(
                    &p.name.span(),
                    "vpls.pseudowire.name",
                    format!("\"{pw_name}\" is not a pseudowire name: 1 to {MAX_PW_NAME} letters, digits, '-', '_' or '.'"),
                ));
            }
            if let Some(first) = pw_names.insert(pw_name.clone(), ctx.line(&p.name.span())) {
                return Err(ctx.err(
                    &p.name.span(),
                    "vpls.pseudowire.name",
                    format!("pseudowire \"{pw_name}\" is already defined at line {first}"),
                ));
            }
            let pw_line = ctx.line(&p.name.span());
            let control_word = p.control_word.as_ref().is_none_or(|c| *c.get_ref());
            let static_spec = match (p.local_label.as_ref(), p.remote_label.as_ref(), p.peer.as_ref()) {
                (None, None, None) if frr => None,
                (Some(l), Some(rl), Some(peer)) => {
                    Some(static_member(ctx, &pw_name, l, rl, peer, control_word, labels, &mut local)?)
                }
                (None, None, None) => {
                    return Err(ctx.err_line(
                        pw_line,
                        "vpls.pseudowire",
                        format!(
                            "pseudowire \"{pw_name}\" needs local-label, remote-label and peer (or [frr], for ldpd to signal it)"
                        ),
                    ));
                }
                _ => {
                    return Err(ctx.err_line(
                        pw_line,
                        "vpls.pseudowire",
                        format!(
                            "pseudowire \"{pw_name}\" gives only some of local-label, remote-label and peer: all three \
                             (static) or, with [frr], none (ldpd signals it)"
                        ),
                    ));
                }
            };
            pseudowires.push(VplsPseudowireConfig {
                name: pw_name,
                static_spec,
                control_word,
                line: pw_line,
            });
        }
        out.push(VplsConfig {
            name,
            attachments,
            pseudowires,
            mac_limit: int_in(
                ctx,
                r.mac_limit.as_ref(),
                "vpls.mac-limit",
                1..=MAX_MAC_LIMIT,
                DEFAULT_MAC_LIMIT,
            )?,
            flood_rate: int_in(ctx, r.flood_rate.as_ref(), "vpls.flood-rate", 0..=MAX_FLOOD_RATE, 0)?,
            mac_aging_s: int_in(
                ctx,
                r.mac_aging.as_ref(),
                "vpls.mac-aging",
                1..=MAX_MAC_AGING_S,
                DEFAULT_MAC_AGING_S,
            )?,
            line,
        });
    }
    Ok(out)
}
