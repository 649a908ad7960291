//! `[limits]`: the rate limits (ICMP errors, neighbour requests) and the neighbour
//! table's sizes, each optional with its default from [`LimitsConfig::default`], each
//! refused out of range with what the range protects.

use super::S;
use super::ctx::Ctx;
use super::raw::RawLimits;
use crate::{ConfigError, LimitsConfig, MAX_HELD_TOTAL, MAX_NEIGHBOR_ENTRIES, MAX_RATE};

/// One `[limits]` number: `None` when absent, else within `min..=max`. `below` explains
/// what a value under `min` would mean (or why it is refused), `above` what caps it.
fn limit(
    ctx: &Ctx,
    v: Option<&S<i64>>,
    key: &str,
    (min, max): (u32, u32),
    below: &str,
    above: &str,
) -> Result<Option<u32>, ConfigError> {
    let Some(v) = v else { return Ok(None) };
    let n = *v.get_ref();
    let why = if n < i64::from(min) && !below.is_empty() {
        format!(": {below}")
    } else if n > i64::from(max) && !above.is_empty() {
        format!(": {above}")
    } else {
        String::new()
    };
    match u32::try_from(n) {
        Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(ctx.err(
            &v.span(),
            &format!("limits.{key}"),
            format!("{n} is out of range; expected {min} to {max}{why}"),
        )),
    }
}

/// `[limits]`: every key optional, defaults from [`LimitsConfig::default`]; bursts
/// default to their rate.
pub(super) fn parse_limits(ctx: &Ctx, raw: Option<&RawLimits>) -> Result<LimitsConfig, ConfigError> {
    let d = LimitsConfig::default();
    let Some(r) = raw else { return Ok(d) };
    let rate = (0, MAX_RATE);
    let icmp_rate = limit(ctx, r.icmp_rate.as_ref(), "icmp-rate", rate, "", "")?.unwrap_or(d.icmp_rate);
    let icmp_burst = match (&r.icmp_burst, icmp_rate) {
        (Some(b), 0) => {
            return Err(ctx.err(
                &b.span(),
                "limits.icmp-burst",
                "icmp-rate = 0 sends no ICMP errors at all, so a burst means nothing: remove icmp-burst, or set icmp-rate above 0",
            ));
        }
        (b, _) => limit(
            ctx,
            b.as_ref(),
            "icmp-burst",
            (1, MAX_RATE),
            "a burst of 0 would send nothing; to send no ICMP errors, set icmp-rate = 0",
            "",
        )?
        .unwrap_or(icmp_rate),
    };
    let neighbor_request_rate = limit(
        ctx,
        r.neighbor_request_rate.as_ref(),
        "neighbor-request-rate",
        (1, MAX_RATE),
        "with 0 the router would send no ARP request or neighbour solicitation, and resolve no next hop",
        "",
    )?
    .unwrap_or(d.neighbor_request_rate);
    let neighbor_request_burst = limit(
        ctx,
        r.neighbor_request_burst.as_ref(),
        "neighbor-request-burst",
        (1, MAX_RATE),
        "a burst of 0 would send no request at all",
        "",
    )?
    .unwrap_or(neighbor_request_rate);
    let neighbor_entries = limit(
        ctx,
        r.neighbor_entries.as_ref(),
        "neighbor-entries",
        (16, MAX_NEIGHBOR_ENTRIES),
        "the table also holds the router's own next hops",
        "",
    )?
    .unwrap_or(d.neighbor_entries);
    let neighbor_entries_per_port = limit(
        ctx,
        r.neighbor_entries_per_port.as_ref(),
        "neighbor-entries-per-port",
        (16, neighbor_entries),
        "the port's share also holds the router's own next hops on it",
        "a port's share is part of neighbor-entries",
    )?;
    let neighbor_held_total = limit(
        ctx,
        r.neighbor_held_total.as_ref(),
        "neighbor-held-total",
        (1, MAX_HELD_TOTAL),
        "with 0 the first frames toward every new neighbour would be dropped",
        "held frames keep packet buffers, and more would starve forwarding (the router has 1024)",
    )?
    .unwrap_or(d.neighbor_held_total);
    let neighbor_held_per_address = match limit(
        ctx,
        r.neighbor_held_per_address.as_ref(),
        "neighbor-held-per-address",
        (1, MAX_HELD_TOTAL),
        "with 0 the first frames toward every new neighbour would be dropped",
        "",
    )? {
        Some(n) if n > neighbor_held_total => {
            let span = r.neighbor_held_per_address.as_ref().map(|v| v.span()).unwrap_or_default();
            return Err(ctx.err(
                &span,
                "limits.neighbor-held-per-address",
                format!(
                    "{n} is more than neighbor-held-total ({neighbor_held_total}), the frames held for all addresses together"
                ),
            ));
        }
        Some(n) => n,
        None => d.neighbor_held_per_address.min(neighbor_held_total),
    };
    Ok(LimitsConfig {
        icmp_rate,
        icmp_burst,
        neighbor_request_rate,
        neighbor_request_burst,
        neighbor_entries,
        neighbor_entries_per_port,
        neighbor_held_per_address,
        neighbor_held_total,
    })
}
