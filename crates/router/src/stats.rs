//! The router's counters in one schema, [`vmpls_control::api::Stats`]: what `vmpls
//! stats` and the control API answer, what the metrics endpoint exports, and what
//! `--stats-file` holds (rewritten every second and at exit, by [`StatsFileWriter`]). All of them are made here,
//! from one [`Snapshot`] of the forwarding loop, so they cannot disagree.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

use tracing::{info, warn};
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
        tx_waited: s.tx_waited,
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
        forwarding_loop: snap
            .forwarding_loop
            .counters()
            .into_iter()
            .map(|(name, value)| Counter { name: name.into(), value })
            .collect(),
        frr: Vec::new(),
        vrfs: Vec::new(),
    }
}

/// The mode of `--stats-file` unless `--stats-file-mode` says otherwise: the counters
/// name ports and labels, which only the router's operators need to read.
pub const DEFAULT_STATS_FILE_MODE: u32 = 0o600;

/// Writes `stats` to `path` as JSON, whole (a reader never sees half a file), with
/// `mode`, never through a symbolic link (see [`vmpls_sys::fs::replace_file`]).
pub(crate) fn write_file(stats: &Stats, path: &Path, mode: u32) {
    let json = serde_json::to_vec_pretty(stats).unwrap_or_default();
    if let Err(e) = vmpls_sys::fs::replace_file(path, &json, mode) {
        warn!(path = %path.display(), error = %e, "writing stats failed");
    }
}

/// What the writer thread gets: a snapshot of the loop and the FIB in force with it.
type StatsJob = (Snapshot, Arc<Fib>);

/// Writes `--stats-file` from a thread of its own: the forwarding loop hands it a
/// snapshot and goes on, it never waits on the disk. While the writer is still busy
/// with one snapshot (a slow or stuck disk), the loop's next ones are skipped, not
/// queued.
pub(crate) struct StatsFileWriter {
    tx: Option<SyncSender<StatsJob>>,
    thread: Option<JoinHandle<()>>,
    /// Snapshots skipped because the writer was busy.
    skipped: u64,
}

impl StatsFileWriter {
    /// Starts the writer thread for `path`, whose files get `mode`.
    pub(crate) fn spawn(path: PathBuf, mode: u32) -> std::io::Result<StatsFileWriter> {
        Self::spawn_with(move |stats| write_file(stats, &path, mode))
    }

    /// Starts a writer thread that hands each snapshot's counters to `write`.
    fn spawn_with(mut write: impl FnMut(&Stats) + Send + 'static) -> std::io::Result<StatsFileWriter> {
        // One snapshot waiting beside the one being written.
        let (tx, rx) = sync_channel::<StatsJob>(1);
        let thread = std::thread::Builder::new().name("stats-file".into()).spawn(move || {
            for (snap, fib) in rx {
                write(&collect(&snap, &fib));
            }
        })?;
        Ok(StatsFileWriter { tx: Some(tx), thread: Some(thread), skipped: 0 })
    }

    /// Hands a snapshot to the writer without waiting; returns whether it was taken (not
    /// while the writer is still busy with the one before).
    pub(crate) fn submit(&mut self, snap: Snapshot, fib: Arc<Fib>) -> bool {
        let Some(tx) = &self.tx else { return false };
        match tx.try_send((snap, fib)) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                if self.skipped == 0 {
                    warn!(
                        "the stats file writer is behind (slow disk?): skipping snapshots until it catches up"
                    );
                }
                self.skipped += 1;
                false
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }

    /// The last snapshot, at exit: waits until it and any before it are written.
    pub(crate) fn finish(mut self, snap: Snapshot, fib: Arc<Fib>) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send((snap, fib));
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if self.skipped > 0 {
            info!(skipped = self.skipped, "stats file snapshots skipped while the writer was behind");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::PortFaults;
    use vmpls_ports::PortStats;

    /// A snapshot of a router with one port, `core`, whose socket counted `port`.
    fn one_port(port: PortStats) -> Snapshot {
        Snapshot {
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
            forwarding_loop: Default::default(),
        }
    }

    fn test_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("vmpls-stats-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_ports_receive_drops_include_the_kernels() {
        let port = PortStats {
            rx_kernel_dropped: 5,
            rx_truncated: 2,
            rx_not_mpls: 1,
            tx_waited: 3,
            ..PortStats::default()
        };
        let stats = collect(&one_port(port), &Fib::default());
        let link = &stats.ports[0].link;
        assert_eq!((link.rx_dropped, link.rx_kernel_dropped), (8, 5));
        assert_eq!((link.rx_truncated, link.rx_not_mpls), (2, 1));
        assert_eq!((link.tx_waited, link.tx_dropped), (3, 0), "waiting is not dropping");
        // The file holds the same schema the API answers with.
        let dir = test_dir("schema");
        let path = dir.join("stats.json");
        write_file(&stats, &path, DEFAULT_STATS_FILE_MODE);
        let back: Stats = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(back, stats);
    }

    #[test]
    fn the_stats_file_is_private_and_never_written_through_a_planted_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = test_dir("links");
        let target = dir.join("precious");
        std::fs::write(&target, b"not yours").unwrap();
        let path = dir.join("stats.json");
        // Links at the temporary name older routers used, and at the file itself.
        std::os::unix::fs::symlink(&target, dir.join("stats.tmp")).unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let stats = collect(&one_port(PortStats::default()), &Fib::default());
        write_file(&stats, &path, DEFAULT_STATS_FILE_MODE);
        assert_eq!(std::fs::read(&target).unwrap(), b"not yours", "written through a link");
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let back: Stats = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back, stats);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn readers_of_the_stats_file_never_see_part_of_it() {
        let dir = test_dir("whole");
        let path = dir.join("stats.json");
        let stats = collect(&one_port(PortStats::default()), &Fib::default());
        write_file(&stats, &path, DEFAULT_STATS_FILE_MODE);
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (path, done) = (path.clone(), done.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let text = std::fs::read(&path).unwrap();
                    serde_json::from_slice::<Stats>(&text).expect("a whole stats file");
                    reads += 1;
                }
                reads
            })
        };
        for i in 0..300 {
            let port = PortStats { rx_packets: i, ..PortStats::default() };
            write_file(&collect(&one_port(port), &Fib::default()), &path, DEFAULT_STATS_FILE_MODE);
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_forwarding_loop_never_waits_for_a_stuck_stats_writer() {
        let (unblock, blocked) = std::sync::mpsc::channel::<()>();
        let (wrote_tx, wrote) = std::sync::mpsc::channel::<u64>();
        let (started_tx, started) = std::sync::mpsc::channel::<()>();
        let mut writer = StatsFileWriter::spawn_with(move |stats| {
            // The disk hangs on each write until the test lets it go.
            let _ = started_tx.send(());
            let _ = blocked.recv();
            let _ = wrote_tx.send(stats.ports[0].link.rx_packets);
        })
        .unwrap();
        let snap = |n| one_port(PortStats { rx_packets: n, ..PortStats::default() });
        let fib = Arc::new(Fib::default());
        assert!(writer.submit(snap(0), fib.clone()));
        started.recv().unwrap();
        let start = std::time::Instant::now();
        let taken: Vec<bool> = (1..20).map(|n| writer.submit(snap(n), fib.clone())).collect();
        assert!(start.elapsed() < std::time::Duration::from_millis(500), "{:?}", start.elapsed());
        // With the first being written, the next one waits and the rest are skipped.
        assert_eq!(taken.iter().filter(|t| **t).count(), 1, "{taken:?}");
        assert_eq!(writer.skipped, 18);
        for _ in 0..3 {
            unblock.send(()).unwrap();
        }
        writer.finish(snap(99), fib);
        assert_eq!(wrote.try_iter().collect::<Vec<_>>(), [0, 1, 99], "the last snapshot is written at exit");
    }
}
