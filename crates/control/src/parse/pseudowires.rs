//! `[[pseudowire]]`: point-to-point Ethernet pseudowires (VPWS). A unique name, an
//! attachment port (one pseudowire a port; a port without addresses: it is in raw
//! Ethernet mode), and, without `[frr]`, the static part: local and remote label, the far
//! PE's address. With `[frr]` those come from zebra and must be absent.

use std::collections::HashMap;
use std::net::IpAddr;

use vmpls_fib::{FIRST_UNRESERVED, MAX_LABEL, PortId};

use super::S;
use super::ctx::Ctx;
use super::raw::RawPseudowire;
use crate::{ConfigError, LabelConfig, PortConfig, PseudowireConfig};

/// The longest pseudowire name: an interface name in FRR mode (IFNAMSIZ - 1).
pub(crate) const MAX_PW_NAME: usize = 15;

fn label_of(ctx: &Ctx, v: &S<i64>, field: &str) -> Result<u32, ConfigError> {
    let n = *v.get_ref();
    if !(i64::from(FIRST_UNRESERVED)..=i64::from(MAX_LABEL)).contains(&n) {
        return Err(ctx.err(
            &v.span(),
            field,
            format!("label {n} is out of range ({FIRST_UNRESERVED}..={MAX_LABEL}: 0 to 15 are reserved)"),
        ));
    }
    Ok(n as u32)
}

/// The `[[pseudowire]]`s in file order.
pub(super) fn parse_pseudowires(
    ctx: &Ctx,
    raw: &[RawPseudowire],
    ports: &[PortConfig],
    labels: &[LabelConfig],
    frr: bool,
) -> Result<Vec<PseudowireConfig>, ConfigError> {
    let mut out: Vec<PseudowireConfig> = Vec::new();
    let mut local: HashMap<u32, usize> = HashMap::new();
    for r in raw {
        let line = ctx.line(&r.name.span());
        let name = r.name.get_ref().clone();
        let name_ok = !name.is_empty()
            && name.len() <= MAX_PW_NAME
            && name.bytes().all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(&c));
        if !name_ok {
            return Err(ctx.err(
                &r.name.span(),
                "pseudowire.name",
                format!(
                    "\"{name}\" is not a pseudowire name: 1 to {MAX_PW_NAME} letters, digits, '-', '_' or '.'"
                ),
            ));
        }
        if let Some(first) = out.iter().find(|p| p.name == name) {
            return Err(ctx.err(
                &r.name.span(),
                "pseudowire.name",
                format!("pseudowire \"{name}\" is already defined at line {}", first.line),
            ));
        }
        let att = r.attachment.get_ref();
        let Some(port) = ports.iter().position(|p| p.name == *att) else {
            let names: Vec<&str> = ports.iter().map(|p| p.name.as_str()).collect();
            return Err(ctx.err(
                &r.attachment.span(),
                "pseudowire.attachment",
                format!("no port named \"{att}\" (ports are: {})", names.join(", ")),
            ));
        };
        if let Some(other) = out.iter().find(|p| usize::from(p.attachment) == port) {
            return Err(ctx.err(
                &r.attachment.span(),
                "pseudowire.attachment",
                format!(
                    "port \"{att}\" is already the attachment of pseudowire \"{}\" (line {})",
                    other.name, other.line
                ),
            ));
        }
        if !ports[port].addresses.is_empty() && !frr {
            return Err(ctx.err(
                &r.attachment.span(),
                "pseudowire.attachment",
                format!(
                    "port \"{att}\" has addresses; an attachment circuit is in raw Ethernet mode and has none"
                ),
            ));
        }
        let control_word = r.control_word.as_ref().is_none_or(|c| *c.get_ref());
        let static_part = (r.local_label.as_ref(), r.remote_label.as_ref(), r.peer.as_ref());
        let spec = match static_part {
            (None, None, None) if frr => None,
            (l, rl, p) if frr => {
                let span =
                    l.map(|s| s.span()).or(rl.map(|s| s.span())).or(p.map(|s| s.span())).unwrap_or(0..0);
                return Err(ctx.err(
                    &span,
                    "pseudowire",
                    "with [frr], ldpd signals the labels and the peer: remove local-label, remote-label and peer",
                ));
            }
            (Some(l), Some(rl), Some(p)) => {
                let local_label = label_of(ctx, l, "pseudowire.local-label")?;
                let remote_label = label_of(ctx, rl, "pseudowire.remote-label")?;
                if let Some(first) = local.insert(local_label, line) {
                    return Err(ctx.err(
                        &l.span(),
                        "pseudowire.local-label",
                        format!(
                            "label {local_label} is already the local label of the pseudowire at line {first}"
                        ),
                    ));
                }
                if let Some(lc) = labels.iter().find(|lc| lc.label == local_label) {
                    return Err(ctx.err(
                        &l.span(),
                        "pseudowire.local-label",
                        format!("label {local_label} is already a [[label]] at line {}", lc.line),
                    ));
                }
                let peer: IpAddr = p.get_ref().trim().parse().map_err(|_| {
                    ctx.err(&p.span(), "pseudowire.peer", format!("\"{}\" is not an IP address", p.get_ref()))
                })?;
                if peer.is_unspecified() || peer.is_multicast() {
                    return Err(ctx.err(
                        &p.span(),
                        "pseudowire.peer",
                        format!("{peer} cannot be a PE's address"),
                    ));
                }
                Some((local_label, remote_label, peer))
            }
            _ => {
                return Err(ctx.err_line(
                    line,
                    "pseudowire",
                    "a static pseudowire needs local-label, remote-label and peer (or [frr] for ldpd to signal them)",
                ));
            }
        };
        out.push(PseudowireConfig {
            name,
            attachment: port as PortId,
            static_spec: spec.map(|(local_label, remote_label, peer)| crate::api::PwSpec {
                name: r.name.get_ref().clone(),
                local_label,
                remote_label,
                peer,
                control_word,
                pw_type: crate::api::PwType::Ethernet,
            }),
            control_word,
            line,
        });
    }
    Ok(out)
}
