//! The router's counters in one schema, [`vmpls_control::api::Stats`]: what `vmpls
//! stats` and the control API answer, what the metrics endpoint exports, and what
//! `--stats-file` holds (rewritten every second and at exit). All of them are made here,
//! from one [`Snapshot`] of the forwarding loop, so they cannot disagree.

use std::io::Write;
use std::path::Path;

use tracing::warn;
use vmpls_control::api::{Counter, FastPathShare, LabelCounter, LinkStats, PortCounters, Stats};
use vmpls_fib::Fib;

use crate::protocol::Snapshot;

/// What the in-kernel fast path forwarded through port `i`, if it serves the port.
fn fast_share(snap: &Snapshot, i: usize) -> Option<FastPathShare> {
    let c = snap.fast_path_ports.get(i).copied().flatten()?;
    Some(FastPathShare {
        rx_packets: c.rx_frames,
        rx_bytes: c.rx_bytes,
        tx_packets: c.tx_frames,
        tx_bytes: c.tx_bytes,
    })
}

/// Port `i`'s counters: what its socket moved plus what the fast path forwarded through
/// it (the fast path's share given apart).
pub fn link_stats(snap: &Snapshot, i: usize) -> LinkStats {
    let s = snap.ports.get(i).copied().unwrap_or_default();
    let f = snap.faults.get(i).copied().unwrap_or_default();
    let fast = fast_share(snap, i);
    let share = fast.clone().unwrap_or_default();
    LinkStats {
        rx_packets: s.rx_packets + share.rx_packets,
        rx_bytes: s.rx_bytes + share.rx_bytes,
        rx_dropped: s.rx_dropped(),
        rx_kernel_dropped: s.rx_kernel_dropped,
        rx_truncated: s.rx_truncated,
        rx_gso_size_too_small: s.rx_gso_size_too_small,
        rx_not_mpls: s.rx_not_mpls,
        rx_wrong_source: s.rx_wrong_source,
        tx_packets: s.tx_packets + share.tx_packets,
        tx_bytes: s.tx_bytes + share.tx_bytes,
        tx_dropped: s.tx_dropped,
        tx_errors: s.tx_errors.total(),
        tx_unreachable: s.tx_unreachable,
        tx_not_mpls: s.tx_not_mpls,
        tx_segmented: s.tx_segmented,
        tx_segments: s.tx_segments,
        errors: f.errors,
        reopened: f.reopened,
        detached: f.detached,
        fast_path: fast,
    }
}

/// All counters of a snapshot, with the table sizes of `fib` (the FIB in force). The
/// FPM server's counters (`frr`) are the control side's to add.
pub fn collect(snap: &Snapshot, fib: &Fib) -> Stats {
    let c = &snap.counters;
    let ports = snap
        .port_info
        .iter()
        .enumerate()
        .map(|(i, p)| PortCounters {
            name: p.name.clone(),
            link: link_stats(snap, i),
            pipeline_rx: c.rx_frames.get(i).copied().unwrap_or(0),
            pipeline_tx: c.tx_frames.get(i).copied().unwrap_or(0),
            fast_path_rx: fast_share(snap, i).map_or(0, |f| f.rx_packets),
            fast_path_tx: fast_share(snap, i).map_or(0, |f| f.tx_packets),
        })
        .collect();
    Stats {
        ports,
        drops: vmpls_dataplane::DropReason::ALL
            .iter()
            .map(|d| Counter { name: d.name().into(), value: c.drops(*d) })
            .collect(),
        events: vmpls_dataplane::Event::ALL
            .iter()
            .map(|e| Counter { name: e.name().into(), value: c.events(*e) })
            .collect(),
        neighbors: snap.neighbors.len() as u64,
        neighbors_reachable: snap.neighbors.iter().filter(|n| n.2.is_some()).count() as u64,
        label_routes: fib.labels.len() as u64,
        prefix_routes: fib.vrfs.iter().map(|v| (v.v4.len() + v.v6.len()) as u64).sum(),
        labels: c
            .label_list()
            .map(|(label, packets, bytes)| LabelCounter { label, packets, bytes })
            .collect(),
        fast_path: snap.fast_path.iter().map(|&(name, value)| Counter { name: name.into(), value }).collect(),
        frr: Vec::new(),
    }
}

/// Writes `stats` to `path` as JSON, through a temporary file renamed over it (a reader
/// never sees half a file).
pub(crate) fn write_file(stats: &Stats, path: &Path) {
    let tmp = path.with_extension("tmp");
    let r = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(serde_json::to_string_pretty(stats).unwrap_or_default().as_bytes()))
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = r {
        warn!(path = %path.display(), error = %e, "writing stats failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::PortFaults;
    use vmpls_ports::PortStats;

    #[test]
    fn a_ports_receive_drops_include_the_kernels() {
        let port =
            PortStats { rx_kernel_dropped: 5, rx_truncated: 2, rx_not_mpls: 1, ..PortStats::default() };
        let snap = Snapshot {
            counters: vmpls_dataplane::Counters::new(1),
            ports: vec![port],
            neighbors: Vec::new(),
            faults: vec![PortFaults::default()],
            fast_path: Vec::new(),
            fast_path_ports: vec![None],
            port_info: vec![vmpls_dataplane::PortInfo {
                id: 0,
                name: "core".into(),
                mac: [2, 0, 0, 0, 0, 1],
                mtu: 1500,
                caps: Default::default(),
            }],
            static_neighbors: Default::default(),
        };
        let stats = collect(&snap, &Fib::default());
        let link = &stats.ports[0].link;
        assert_eq!((link.rx_dropped, link.rx_kernel_dropped), (8, 5));
        assert_eq!((link.rx_truncated, link.rx_not_mpls), (2, 1));
        // The file holds the same schema the API answers with.
        let dir = std::env::temp_dir().join(format!("vmpls-stats-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stats.json");
        write_file(&stats, &path);
        let back: Stats = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(back, stats);
    }
}
