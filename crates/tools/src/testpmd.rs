//! DPDK's `dpdk-testpmd` as the guest of a vhost-user port, through its virtio-user
//! driver (`--no-pci --single-file-segments --vdev=net_virtio_userN,path=SOCKET`): a
//! virtio driver that is not QEMU's, busy-polling its rings in a process of its own.
//! Shared by `vmpls bench vhost-user`, the OVS-DPDK test and the CI test that runs
//! testpmd against vmpls (`tests/vhost_user_testpmd.rs`).
//!
//! testpmd takes its memory from a [`Hugepages`] reservation. [`Testpmd`]
//! runs one testpmd interactively with its stdin a pipe: `stop` ends forwarding and prints
//! its forward statistics ([`Testpmd::stop_forwarding`] returns them) with its ports still
//! connected, `quit` ends it.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::hugepages::Hugepages;

/// The testpmd binary (Debian's `dpdk-dev`).
pub const TESTPMD: &str = "dpdk-testpmd";

/// Whether `dpdk-testpmd` is on the PATH.
pub fn testpmd_installed() -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(TESTPMD).is_file()))
        .unwrap_or(false)
}

/// One port's lines of testpmd's "Forward statistics".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ForwardStats {
    /// Frames the port received.
    pub rx_packets: u64,
    /// Frames the driver could not receive (`imissed`).
    pub rx_dropped: u64,
    /// Frames the port sent (enqueued on the vhost-user device's ring).
    pub tx_packets: u64,
    /// Frames the engine could not enqueue (the ring was full).
    pub tx_dropped: u64,
}

/// Parses testpmd's "Forward statistics for port N" blocks (the last one per port wins).
pub fn parse_forward_stats(log: &str) -> BTreeMap<u16, ForwardStats> {
    let mut out = BTreeMap::new();
    let mut current: Option<(u16, ForwardStats)> = None;
    let field = |line: &str, name: &str| -> Option<u64> {
        let i = line.find(name)?;
        line[i + name.len()..].split_whitespace().next()?.parse().ok()
    };
    for line in log.lines() {
        if let Some(rest) = line.split("Forward statistics for port ").nth(1) {
            if let Some((p, s)) = current.take() {
                out.insert(p, s);
            }
            let port = rest.split_whitespace().next().and_then(|p| p.parse().ok());
            current = port.map(|p| (p, ForwardStats::default()));
            continue;
        }
        let Some((_, s)) = current.as_mut() else { continue };
        if line.contains("RX-packets:") {
            s.rx_packets = field(line, "RX-packets:").unwrap_or(0);
            s.rx_dropped = field(line, "RX-dropped:").unwrap_or(0);
        } else if line.contains("TX-packets:") {
            s.tx_packets = field(line, "TX-packets:").unwrap_or(0);
            s.tx_dropped = field(line, "TX-dropped:").unwrap_or(0);
        } else if line.contains("-------------------------------")
            && let Some((p, s)) = current.take()
        {
            out.insert(p, s);
        }
    }
    if let Some((p, s)) = current.take() {
        out.insert(p, s);
    }
    out
}

/// How to run one testpmd.
#[derive(Debug, Clone)]
pub struct TestpmdOptions {
    /// Names its DPDK runtime directory (`--file-prefix`) and its log file.
    pub name: String,
    /// `--lcores`: the main lcore and the forwarding one, e.g. `0@0,1@1`.
    pub lcores: String,
    /// `--vdev` arguments (`net_virtio_user0,path=...`, `net_pcap0,...`).
    pub vdevs: Vec<String>,
    /// `-m`: MiB of hugepage memory.
    pub mem_mb: u32,
    /// testpmd's own arguments (after `--`).
    pub args: Vec<String>,
    /// Commands run before forwarding starts (`--cmdline-file`).
    pub commands: Vec<String>,
}

/// A running testpmd. Dropping it kills it (SIGKILL) if [`Testpmd::stop`] did not end it.
pub struct Testpmd {
    child: Child,
    stdin: Option<ChildStdin>,
    log: PathBuf,
    runtime_dir: PathBuf,
}

impl Testpmd {
    /// Starts testpmd with its output in `work/NAME.log`.
    pub fn start(work: &Path, huge: &Hugepages, opts: &TestpmdOptions) -> anyhow::Result<Testpmd> {
        Testpmd::launch(work, Some(huge.dir()), opts)
    }

    /// Starts testpmd without hugepages (`--no-huge`): enough for drivers whose shared
    /// memory is their own (`net_memif` creates or maps memfds), not for virtio-user,
    /// whose vhost-user backend maps testpmd's memory by file.
    pub fn start_without_hugepages(work: &Path, opts: &TestpmdOptions) -> anyhow::Result<Testpmd> {
        Testpmd::launch(work, None, opts)
    }

    fn launch(work: &Path, huge_dir: Option<&Path>, opts: &TestpmdOptions) -> anyhow::Result<Testpmd> {
        let log = work.join(format!("{}.log", opts.name));
        // Unique in the process too: tests that run at once start testpmds of the same
        // name, and DPDK refuses a second primary process on one runtime directory.
        static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let prefix = format!("vmpls-{}-{n}-{}", std::process::id(), opts.name);
        // Line-buffered output: its log shows at once when it is ready ("Press enter").
        let mut cmd = Command::new("stdbuf");
        cmd.arg("-oL")
            .arg(TESTPMD)
            .arg(format!("--lcores={}", opts.lcores))
            .args(["--no-pci", "--single-file-segments", "--no-telemetry", "-m"])
            .arg(opts.mem_mb.to_string());
        match huge_dir {
            Some(dir) => cmd.arg("--huge-dir").arg(dir),
            None => cmd.arg("--no-huge"),
        };
        cmd.arg("--file-prefix").arg(&prefix);
        for v in &opts.vdevs {
            cmd.arg(format!("--vdev={v}"));
        }
        // Interactive, driven through its stdin: `stop` prints the statistics while the
        // port stays connected, `quit` ends it.
        cmd.arg("--").args(["-i", "--auto-start", "--nb-cores=1", "--no-lsc-interrupt"]).args(&opts.args);
        if !opts.commands.is_empty() {
            let file = work.join(format!("{}.cmds", opts.name));
            std::fs::write(&file, opts.commands.join("\n") + "\n")?;
            cmd.arg(format!("--cmdline-file={}", file.display()));
        }
        cmd.stdin(Stdio::piped())
            .stdout(std::fs::File::create(&log)?)
            .stderr(Stdio::from(std::fs::OpenOptions::new().append(true).open(&log)?));
        // testpmd dies with the thread that started it: a crashed bench or test leaves
        // no busy-polling process behind.
        vmpls_sys::process::kill_with_parent(&mut cmd);
        let mut child =
            cmd.spawn().with_context(|| format!("starting {TESTPMD} (Debian package dpdk-dev)"))?;
        let stdin = child.stdin.take();
        Ok(Testpmd { child, stdin, log, runtime_dir: Path::new("/var/run/dpdk").join(prefix) })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last lines of its output, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Marker in its output once it forwards.
    pub const READY: &'static str = "Start automatic packet forwarding";

    /// Waits until its output contains `text` (it exits: error with its log).
    pub fn wait_for(&mut self, text: &str, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.log().contains(text) {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("{TESTPMD} exited ({status}) before \"{text}\":\n{}", self.log_tail(25));
            }
            if Instant::now() > deadline {
                bail!("{TESTPMD} did not print \"{text}\" within {timeout:?}:\n{}", self.log_tail(25));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn command(&mut self, line: &str) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("testpmd's stdin is closed")?;
        stdin.write_all(line.as_bytes())?;
        stdin.write_all(b"\n")?;
        stdin.flush()?;
        Ok(())
    }

    /// Stops forwarding (`stop`); the port stays connected, so the switch's counters of
    /// it stay readable. Returns testpmd's forward statistics per port.
    pub fn stop_forwarding(&mut self) -> anyhow::Result<BTreeMap<u16, ForwardStats>> {
        let from = self.log().len();
        self.command("stop")?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let log = self.log();
            let done = log
                .get(from..)
                .and_then(|l| l.split_once("Accumulated forward statistics"))
                .is_some_and(|(_, rest)| rest.contains("Done."));
            if done {
                let stats = parse_forward_stats(&log[from..]);
                anyhow::ensure!(
                    !stats.is_empty(),
                    "{TESTPMD} printed no forward statistics:\n{}",
                    self.log_tail(25)
                );
                return Ok(stats);
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("{TESTPMD} exited ({status}) instead of stopping:\n{}", self.log_tail(25));
            }
            if Instant::now() > deadline {
                bail!("{TESTPMD} printed no statistics within 20 s of `stop`:\n{}", self.log_tail(20));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Quits (`quit`): it closes its ports and exits; killed after 20 s.
    pub fn quit(mut self) -> anyhow::Result<()> {
        let _ = self.command("quit");
        self.stdin = None;
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                bail!("{TESTPMD} did not exit within 20 s of `quit`:\n{}", self.log_tail(20));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Stops forwarding, quits, and returns its forward statistics per port.
    pub fn stop(mut self) -> anyhow::Result<BTreeMap<u16, ForwardStats>> {
        let stats = self.stop_forwarding()?;
        self.quit()?;
        Ok(stats)
    }

    /// Kills it with SIGKILL (no goodbye to the vhost-user backend) and waits for it.
    pub fn kill(mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.runtime_dir);
    }
}

/// A classic pcap file (microsecond timestamps, Ethernet) holding `frames`.
pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) -> anyhow::Result<()> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&262_144u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    for f in frames {
        let len = u32::try_from(f.len())?;
        out.extend_from_slice(&[0u8; 8]);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(f);
    }
    std::fs::write(path, out)?;
    Ok(())
}

fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum = 0u32;
    for part in parts {
        let mut chunks = part.chunks_exact(2);
        for c in &mut chunks {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        if let [last] = chunks.remainder() {
            sum += u32::from(*last) << 8;
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An Ethernet/IPv4/TCP frame with `payload` bytes, checksums right, as a Linux guest's
/// TCP hands a super-frame to its NIC before TSO cuts it (`seq` its sequence number).
pub fn tcp_frame(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    seq: u32,
    payload: usize,
) -> Vec<u8> {
    let data: Vec<u8> = (0..payload).map(|i| (i % 251) as u8).collect();
    let mut tcp = [0u8; 20];
    tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&5201u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    tcp[8..12].copy_from_slice(&1u32.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x18; // PSH, ACK
    tcp[14..16].copy_from_slice(&65535u16.to_be_bytes());
    let tcp_len = u16::try_from(20 + payload).unwrap_or(u16::MAX);
    let mut pseudo = [0u8; 12];
    pseudo[0..4].copy_from_slice(&src);
    pseudo[4..8].copy_from_slice(&dst);
    pseudo[9] = 6;
    pseudo[10..12].copy_from_slice(&tcp_len.to_be_bytes());
    let c = checksum(&[&pseudo, &tcp, &data]);
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(tcp_len + 20).to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let c = checksum(&[&ip]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = Vec::with_capacity(54 + payload);
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&tcp);
    f.extend_from_slice(&data);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_statistics_are_parsed_per_port() {
        let log = "\
  ---------------------- Forward statistics for port 0  ----------------------
  RX-packets: 8              RX-dropped: 0             RX-total: 8
  Bad-ipcsum: 0              Bad-l4csum: 0             Bad-outer-l4csum: 0
  TX-packets: 899072         TX-dropped: 1434592       TX-total: 2333664
  ----------------------------------------------------------------------------

  ---------------------- Forward statistics for port 1  ----------------------
  RX-packets: 51045          RX-dropped: 3             RX-total: 51048
  TX-packets: 0              TX-dropped: 0             TX-total: 0
  ----------------------------------------------------------------------------

  +++++++++++++++ Accumulated forward statistics for all ports+++++++++++++++
  RX-packets: 2333672        RX-dropped: 0             RX-total: 2333672
";
        let s = parse_forward_stats(log);
        assert_eq!(
            s[&0],
            ForwardStats { rx_packets: 8, rx_dropped: 0, tx_packets: 899072, tx_dropped: 1434592 }
        );
        assert_eq!(s[&1], ForwardStats { rx_packets: 51045, rx_dropped: 3, tx_packets: 0, tx_dropped: 0 });
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn tcp_frames_carry_valid_checksums() {
        let f = tcp_frame(
            [2, 0, 0, 0, 0xaa, 1],
            [2, 0, 0, 0, 0xaa, 2],
            [198, 18, 1, 2],
            [198, 18, 20, 2],
            7,
            1001,
        );
        assert_eq!(f.len(), 14 + 20 + 20 + 1001);
        assert_eq!(checksum(&[&f[14..34]]), 0);
        let mut pseudo = [0u8; 12];
        pseudo[0..8].copy_from_slice(&f[26..34]);
        pseudo[9] = 6;
        pseudo[10..12].copy_from_slice(&1021u16.to_be_bytes());
        assert_eq!(checksum(&[&pseudo, &f[34..]]), 0);
    }
}
