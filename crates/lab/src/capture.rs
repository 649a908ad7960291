//! Packet captures on a lab interface with Wireshark's `dumpcap`, and their dissection
//! with `tshark`, so tests check what is on the wire with a dissector that is not ours.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use std::time::Duration;
//! use vmpls_lab::capture::{Capture, tshark_fields};
//! let cap = Capture::start("vl1-0-p", "p-pe1", "/tmp/p-pe1.pcap".as_ref(), None)?;
//! // ... traffic ...
//! let file = cap.stop()?;
//! let rows = tshark_fields(&file, "mpls", &["mpls.label", "mpls.ttl"], Duration::from_secs(30))?;
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::process::{Background, run_here_timeout};

/// A running `dumpcap` on one interface, writing a pcap file. Dropping it stops it.
#[derive(Debug)]
pub struct Capture {
    dumpcap: Background,
    path: PathBuf,
    log: PathBuf,
}

impl Capture {
    /// How long [`Capture::stop`] waits for the frames already captured to reach the
    /// file: more than dumpcap's read timeout (1 s).
    pub const DRAIN: Duration = Duration::from_millis(1500);

    /// Starts `dumpcap` on `ifname` in the namespace `ns`, writing `path` (pcap
    /// format), with an optional capture filter (BPF syntax, as for tcpdump). Returns
    /// once the capture is running (dumpcap has written the file header, which it does
    /// after opening the interface), so traffic sent afterwards is captured.
    pub fn start(ns: &str, ifname: &str, path: &Path, filter: Option<&str>) -> anyhow::Result<Self> {
        let _ = std::fs::remove_file(path);
        let log = path.with_extension("dumpcap.log");
        let log_file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = Command::new("dumpcap");
        // -P: pcap rather than pcapng; -q: no packet count on stderr.
        cmd.args(["-q", "-P", "-i", ifname, "-w"]).arg(path).stdout(Stdio::null()).stderr(log_file);
        if let Some(f) = filter {
            cmd.args(["-f", f]);
        }
        let mut dumpcap = Background::spawn(ns, &format!("dumpcap on {ifname}"), cmd)
            .context("starting dumpcap (is Wireshark's tshark/dumpcap installed?)")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // The 24-byte pcap file header.
            if std::fs::metadata(path).is_ok_and(|m| m.len() >= 24) {
                break;
            }
            if let Some(status) = dumpcap.try_wait()? {
                bail!(
                    "dumpcap on {ifname} exited ({status}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default().trim()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "dumpcap on {ifname} did not start within 10 s: {}",
                    std::fs::read_to_string(&log).unwrap_or_default().trim()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Self { dumpcap, path: path.to_path_buf(), log })
    }

    /// The pcap file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops the capture and returns the pcap file's path.
    ///
    /// Waits [`Capture::DRAIN`] first: libpcap reads the kernel's packet ring
    /// (TPACKET_V3) a block at a time, and a block that is not full is handed over only
    /// when dumpcap's read timeout expires; frames still in such a block when dumpcap
    /// gets SIGTERM would be lost. Then SIGTERM: dumpcap writes what it has and exits.
    pub fn stop(mut self) -> anyhow::Result<PathBuf> {
        std::thread::sleep(Self::DRAIN);
        self.dumpcap
            .stop(libc::SIGTERM, Duration::from_secs(5))
            .with_context(|| std::fs::read_to_string(&self.log).unwrap_or_default())?;
        let _ = std::fs::remove_file(&self.log);
        Ok(self.path.clone())
    }
}

/// Dissects `pcap` with `tshark -r FILE -Y FILTER -T fields -e F1 -e F2 ...` and
/// returns one row per matching packet, one string per field (empty if the packet has
/// no such field; several occurrences, like the entries of a label stack, are joined
/// with commas).
pub fn tshark_fields(
    pcap: &Path,
    display_filter: &str,
    fields: &[&str],
    timeout: Duration,
) -> anyhow::Result<Vec<Vec<String>>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-n").arg("-r").arg(pcap);
    if !display_filter.is_empty() {
        cmd.args(["-Y", display_filter]);
    }
    cmd.args(["-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = run_here_timeout(cmd, timeout).context("running tshark (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "tshark -r {} -Y {display_filter:?} failed ({}): {}",
            pcap.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(parse_fields(&text, fields.len()))
}

/// Splits tshark's tab-separated field output into rows of `n` fields.
fn parse_fields(text: &str, n: usize) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut row: Vec<String> = l.split('\t').map(str::to_string).collect();
            row.resize(n, String::new());
            row
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_field_rows() {
        let rows = parse_fields("1002\t63\t1\n\n2002,100\t62,62\t0,1\n5\n", 3);
        assert_eq!(rows, vec![vec!["1002", "63", "1"], vec!["2002,100", "62,62", "0,1"], vec!["5", "", ""],]);
    }
}
