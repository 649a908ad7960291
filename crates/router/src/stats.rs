use std::io::Write;
use std::path::Path;

use tracing::warn;
use vmpls_dataplane::Dataplane;
use vmpls_ports::Port;

use crate::fastpath::FastPathRuntime;
use crate::links::PortWatch;

pub(crate) fn stats_json(
    dp: &Dataplane,
    ports: &[Box<dyn Port>],
    watch: &[PortWatch],
    fast: Option<&FastPathRuntime>,
) -> serde_json::Value {
    let c = dp.counters();
    let drops: serde_json::Map<_, _> =
        vmpls_dataplane::Drop::ALL.iter().map(|d| (d.name().to_string(), c.drops(*d).into())).collect();
    let events: serde_json::Map<_, _> =
        vmpls_dataplane::Event::ALL.iter().map(|e| (e.name().to_string(), c.events(*e).into())).collect();
    let ports: Vec<serde_json::Value> = ports
        .iter()
        .zip(watch)
        .enumerate()
        .map(|(i, (p, w))| {
            let s = w.stats(p.as_ref());
            serde_json::json!({
                "name": p.info().name,
                "rx_packets": s.rx_packets,
                "rx_bytes": s.rx_bytes,
                "tx_packets": s.tx_packets,
                "tx_bytes": s.tx_bytes,
                "rx_dropped": s.rx_bad_vnet_hdr + s.rx_truncated + s.rx_no_buffer + s.rx_not_mpls + s.rx_wrong_source,
                "rx_truncated": s.rx_truncated,
                "rx_not_mpls": s.rx_not_mpls,
                "rx_wrong_source": s.rx_wrong_source,
                "tx_unreachable": s.tx_unreachable,
                "tx_not_mpls": s.tx_not_mpls,
                "tx_dropped": s.tx_dropped,
                "tx_errors": s.tx_errors.total(),
                "pipeline_rx": c.rx_frames.get(i).copied().unwrap_or(0),
                "pipeline_tx": c.tx_frames.get(i).copied().unwrap_or(0),
                "fast_path_rx": fast.and_then(|f| f.port_counts(i)).map_or(0, |c| c.rx_frames),
                "fast_path_tx": fast.and_then(|f| f.port_counts(i)).map_or(0, |c| c.tx_frames),
                "errors": w.faults.errors,
                "reopened": w.faults.reopened,
                "detached": w.faults.detached,
            })
        })
        .collect();
    let labels: Vec<serde_json::Value> = c
        .label_list()
        .map(|(label, packets, bytes)| serde_json::json!({ "label": label, "packets": packets, "bytes": bytes }))
        .collect();
    let mut json = serde_json::json!({ "drops": drops, "events": events, "ports": ports, "labels": labels });
    if let Some(f) = fast {
        let named: serde_json::Map<_, _> =
            f.named_counters().into_iter().map(|(name, n)| (name.to_string(), n.into())).collect();
        json["fast_path"] = named.into();
    }
    json
}

pub(crate) fn write_stats(
    dp: &Dataplane,
    ports: &[Box<dyn Port>],
    watch: &[PortWatch],
    fast: Option<&FastPathRuntime>,
    path: Option<&Path>,
) {
    let Some(path) = path else { return };
    let tmp = path.with_extension("tmp");
    let r = std::fs::File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(
                serde_json::to_string_pretty(&stats_json(dp, ports, watch, fast))
                    .unwrap_or_default()
                    .as_bytes(),
            )
        })
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = r {
        warn!(path = %path.display(), error = %e, "writing stats failed");
    }
}
