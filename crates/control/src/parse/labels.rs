//! `[[label]]`: label routes. The incoming label (unreserved, defined once), the TTL
//! model, and the action: swap to next hops (each with its outgoing label), pop to next
//! hops, or pop and look the packet up again in a VRF. Next hops are inline or
//! `nexthops = [...]`, resolved by [`Validator`].

use std::collections::HashMap;

use vmpls_fib::{FIRST_UNRESERVED, Label, MAX_LABEL};

use super::ctx::Ctx;
use super::nexthops::{RawNh, Validator, inline_first};
use super::raw::RawLabel;
use super::values::parse_ttl;
use super::vrfs::vrf_of;
use crate::{ConfigError, LabelConfig, LabelConfigAction, NexthopConfig};

/// The `[[label]]`s in file order.
pub(super) fn parse_labels(
    ctx: &Ctx,
    v: &Validator,
    raw: &[RawLabel],
    vrfs: &[String],
) -> Result<Vec<LabelConfig>, ConfigError> {
    let mut labels = Vec::new();
    let mut label_lines: HashMap<Label, usize> = HashMap::new();
    for l in raw {
        let line = ctx.line(&l.label.span());
        let label = incoming_label(ctx, l, line)?;
        if let Some(first) = label_lines.insert(label, line) {
            return Err(ctx.err_line(
                line,
                "label.in",
                format!("label {label} is already defined at line {first}"),
            ));
        }
        let ttl_model = parse_ttl(ctx, l.ttl_model.as_ref(), "label.ttl-model")?;
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
        let action = match label_nexthops(ctx, v, l, swap, line)? {
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
            None => LabelConfigAction::PopAndLookup { vrf: vrf_of(ctx, vrfs, l.vrf.as_ref(), "label.vrf")? },
        };
        labels.push(LabelConfig { label, action, ttl_model, line });
    }
    Ok(labels)
}

/// `in`: a label from [`FIRST_UNRESERVED`] to [`MAX_LABEL`].
fn incoming_label(ctx: &Ctx, l: &RawLabel, line: usize) -> Result<Label, ConfigError> {
    match u32::try_from(*l.label.get_ref()) {
        Ok(v) if (FIRST_UNRESERVED..=MAX_LABEL).contains(&v) => Ok(v),
        Ok(v) if v < FIRST_UNRESERVED => Err(ctx.err_line(
            line,
            "label.in",
            format!("label {v} is reserved (labels 0-15 are reserved); incoming labels are {FIRST_UNRESERVED} to {MAX_LABEL}"),
        )),
        _ => Err(ctx.err_line(
            line,
            "label.in",
            format!("label {} is out of range; incoming labels are {FIRST_UNRESERVED} to {MAX_LABEL} (20 bits)", l.label.get_ref()),
        )),
    }
}

/// Label route `l`'s next hops, if it has any: a `nexthops = [...]` list or one inline
/// next hop, never both. A swap's next hops carry `out` labels, a pop's none.
fn label_nexthops(
    ctx: &Ctx,
    v: &Validator,
    l: &RawLabel,
    swap: bool,
    line: usize,
) -> Result<Option<Vec<NexthopConfig>>, ConfigError> {
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
    if let Some(list) = &l.nexthops {
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
        Ok(Some(nhs))
    } else if has_inline_nh {
        Ok(Some(vec![v.nexthop(&inline, "label", "out", swap, None, line)?]))
    } else {
        Ok(None)
    }
}
