//! Open vSwitch with DPDK as the baseline of the vhost-user benchmark (issue 12): what a
//! user would pick instead of vmpls as a host-side vhost-user switch, run privately and
//! driven by the same testpmd guests.
//!
//! # Interface
//!
//! ```text
//! pub fn available() -> bool            // Debian's openvswitch-switch-dpdk binaries present
//! pub struct Options { pmd_core, socket_mem_mb, ovs_is_server,
//!                      userspace_tso, pmd_max_sleep_us, keep_state }      // Default
//! pub struct OvsDpdk;
//! impl OvsDpdk {
//!     pub fn start_with(work_dir, ports, flows, &Options) -> Result<OvsDpdk>;
//!     pub fn port_stats(&self, name: &str) -> Result<PortCounters>;     // live
//!     pub fn interface_statistics(&self, name) -> Result<BTreeMap<String, u64>>; // DB, 5 s old
//!     pub fn cpu_sample(&self) -> Result<CpuSample>; // PMD cycles, PMD and process CPU time
//!     pub fn datapath_flows(&self) -> Result<String>;      // ovs-appctl dpctl/dump-flows
//!     pub fn appctl(&self, args: &[&str]) -> Result<String>;
//!     pub fn tsc_hz(&self) -> f64; pub fn log_path(&self) -> PathBuf;
//! }
//! impl CpuSample {  // differences between two samples, seconds
//!     pub fn busy_cpu_seconds_since(&self, earlier: &CpuSample) -> f64; // PMD CPU x busy share
//!     pub fn processing_seconds_since / pmd_cpu_seconds_since / process_cpu_seconds_since
//! }
//! impl Drop for OvsDpdk  // stops both daemons, unmounts and gives back the hugepages,
//!                        // removes the state directory
//! ```
//!
//! # How it runs OVS
//!
//! Everything is private to one `OvsDpdk`: its state lives in `WORK_DIR/ovs-dpdk` (the
//! database made with `ovsdb-tool create`, the run directory with the control sockets,
//! the logs, a hugetlbfs mount), both daemons are children of this process (no
//! `--detach`, no pidfile games; only those two pids are ever signalled), the system's
//! `openvswitch-switch` service and the `ovs-vswitchd` alternative are left alone (the
//! DPDK build is called by its path, [`VSWITCHD`]), and `ovs-vswitchd` runs in a network
//! namespace of its own (`unshare --net`), so the TAP devices the netdev datapath makes
//! for its internal ports (`ovs-netdev`, the bridge's) never appear on the host. It gets:
//!
//! - `dpdk-init=true`, `dpdk-socket-mem` = `dpdk-socket-limit` = [`Options::socket_mem_mb`],
//!   `per-port-memory=true` (mempools sized per port, not the 256 Ki-mbuf shared pool),
//!   `dpdk-extra="--no-pci --single-file-segments --huge-dir DIR --file-prefix P"` (OVS
//!   adds `--in-memory` itself); the socket memory and 32 MiB in 2 MiB pages reserved on
//!   top of `/proc/sys/vm/nr_hugepages` ([`Hugepages`]) and given back on drop;
//! - `pmd-cpu-mask` with the one core [`Options::pmd_core`];
//! - a bridge with `datapath_type=netdev` and a port for each `(name, socket)`, OpenFlow
//!   port number = its place in the list + 1.
//!
//! **Roles.** By default OVS is the vhost-user *client*: `dpdkvhostuserclient` ports with
//! `options:vhost-server-path=SOCKET`, and the guest (testpmd's virtio-user with
//! `server=1`) creates the socket. That is the role OVS recommends, and the one in which
//! OVS 3.1 reports port counters: its `dpdkvhostuser` (server) ports, deprecated, answer
//! every statistics query with EPROTO (`ovs-ofctl dump-ports` shows `rx pkts=?`), because
//! they are registered without DPDK's per-virtqueue statistics. OVS reconnects every
//! second, so the guests may start before or after it. With [`Options::ovs_is_server`]
//! OVS creates the sockets (in its run directory; `SOCKET` becomes a symlink to it) as
//! vmpls does, but [`OvsDpdk::port_stats`] then has nothing to read.
//!
//! **CPU.** The PMD thread busy-polls its core, so the process's CPU time is the time the
//! scheduler gave that core's poller, whatever the load. OVS counts, per PMD thread, the
//! TSC cycles of the iterations that received packets ("processing cycles") apart from
//! the empty polls ("idle cycles"). [`OvsDpdk::processing_cpu_seconds`] is the processing
//! cycles divided by the TSC frequency (measured against the monotonic clock when OVS
//! starts, [`CpuSample::processing_seconds_since`]): the CPU time OVS would need for the
//! same traffic if it slept when idle, as long as the PMD has its core to itself. The TSC runs on while the thread is preempted,
//! so where more threads poll than there are cores (testpmd's two and the PMD on two
//! cores) a preempted busy iteration counts the time it waited, and that figure can be
//! several times the CPU actually used. [`CpuSample::busy_cpu_seconds_since`] is the one
//! to report: the CPU time the PMD thread got (`/proc/PID/task/TID/stat`) times the share
//! of its cycles that were processing cycles.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use vmpls_lab::process::{SignalTarget, Supervised};

use crate::hugepages::{HUGEPAGE_MB, Hugepages};

/// The DPDK build of `ovs-vswitchd` from Debian's `openvswitch-switch-dpdk`, called by its
/// path so that the system's `ovs-vswitchd` alternative stays as it is.
pub const VSWITCHD: &str = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk";
/// The database schema of `ovs-vswitchd` (package `openvswitch-common`).
const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";
/// The other programs it runs, from `openvswitch-common` and `openvswitch-switch`.
const TOOLS: [&str; 5] = ["ovsdb-tool", "ovsdb-server", "ovs-vsctl", "ovs-ofctl", "ovs-appctl"];
/// The one bridge (private to this instance's network namespace and database).
const BRIDGE: &str = "vmpls-ovs";
/// How long a control command (`ovs-vsctl`, `ovs-ofctl`, `ovs-appctl`) may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the daemons get to come up (DPDK's memory set-up takes a few seconds here).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a daemon gets after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Whether OVS-DPDK can be run: the DPDK `ovs-vswitchd`, its schema and the OVS tools are
/// installed (`apt-get install openvswitch-switch-dpdk`).
pub fn available() -> bool {
    Path::new(VSWITCHD).is_file()
        && Path::new(SCHEMA).is_file()
        && TOOLS.iter().all(|t| find_in_path(t).is_some())
        && find_in_path("unshare").is_some()
}

fn find_in_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(program)).find(|p| p.is_file())
}

/// How [`OvsDpdk::start_with`] sets OVS up; [`Default`] is what the benchmark uses.
#[derive(Clone, Debug)]
pub struct Options {
    /// The core of the one PMD thread (`pmd-cpu-mask`). Default 1.
    pub pmd_core: u32,
    /// `dpdk-socket-mem` and `dpdk-socket-limit` in MiB; as many hugepages and 32 MiB
    /// more are reserved for OVS. Default 256 (two vhost-user ports with per-port
    /// mempools need about 100).
    pub socket_mem_mb: u32,
    /// OVS creates the sockets (`dpdkvhostuser`, the guest connects as client, as with
    /// vmpls) instead of connecting to the guest's (`dpdkvhostuserclient`). Default
    /// false: OVS 3.1 has no port counters for server ports (see the module docs).
    pub ovs_is_server: bool,
    /// `userspace-tso-enable=true`: OVS offers TSO/checksum offload to the guests and
    /// passes super-frames through. Default false.
    pub userspace_tso: bool,
    /// `pmd-maxsleep` in microseconds (OVS 3.1, experimental): the PMD sleeps up to this
    /// long when its queues are nearly empty. Default none (pure busy polling).
    pub pmd_max_sleep_us: Option<u32>,
    /// Leave `WORK_DIR/ovs-dpdk` (database, logs) in place on drop. Default false.
    pub keep_state: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            pmd_core: 1,
            socket_mem_mb: 256,
            ovs_is_server: false,
            userspace_tso: false,
            pmd_max_sleep_us: None,
            keep_state: false,
        }
    }
}

/// A port's counters as OVS keeps them (its netdev statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Frames OVS took from the guest (the guest's transmit queue).
    pub rx_packets: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Frames dropped on receive (QoS policing; vhost-user has no other cause).
    pub rx_dropped: u64,
    /// Frames OVS put into the guest's receive queue.
    pub tx_packets: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Frames OVS could not give the guest: its receive queue full after the retries
    /// (`ovs_tx_failure_drops`), too long for the MTU, policed, or offloads the guest
    /// cannot take.
    pub tx_dropped: u64,
}

/// One PMD thread's share of `ovs-appctl dpif-netdev/pmd-stats-show` (cumulative since
/// OVS started or the last `pmd-stats-clear`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PmdThreadStats {
    /// The core it runs on.
    pub core_id: u32,
    /// Packets it received from its queues.
    pub packets_received: u64,
    /// TSC cycles of the polling iterations that received nothing.
    pub idle_cycles: u64,
    /// TSC cycles of the iterations that received packets (lookup, actions, sending).
    pub processing_cycles: u64,
}

/// What [`OvsDpdk::cpu_sample`] reads at one instant; two of them give the CPU time of an
/// interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuSample {
    /// The PMD threads' processing cycles (TSC), cumulative.
    pub processing_cycles: u64,
    /// Their idle cycles (TSC), cumulative.
    pub idle_cycles: u64,
    /// utime + stime of the PMD threads, seconds.
    pub pmd_cpu_seconds: f64,
    /// utime + stime of `ovs-vswitchd`, seconds.
    pub process_cpu_seconds: f64,
    /// The TSC's frequency, Hz.
    pub tsc_hz: f64,
}

impl CpuSample {
    /// The CPU time the PMD spent on packets since `earlier`: the CPU time its thread got
    /// times the share of its cycles in iterations that received packets. Unlike the
    /// processing cycles alone (TSC time, which runs on while the thread waits for a
    /// core), this stays right when more threads poll than there are cores: a preemption
    /// falls into busy and idle iterations in proportion to their time.
    pub fn busy_cpu_seconds_since(&self, earlier: &CpuSample) -> f64 {
        let busy = self.processing_cycles.saturating_sub(earlier.processing_cycles) as f64;
        let idle = self.idle_cycles.saturating_sub(earlier.idle_cycles) as f64;
        if busy + idle == 0.0 {
            return 0.0;
        }
        self.pmd_cpu_seconds_since(earlier) * busy / (busy + idle)
    }

    /// The processing cycles since `earlier` as seconds (cycles / TSC Hz): wall time of the
    /// busy iterations, equal to their CPU time only when the PMD has its core to itself.
    pub fn processing_seconds_since(&self, earlier: &CpuSample) -> f64 {
        self.processing_cycles.saturating_sub(earlier.processing_cycles) as f64 / self.tsc_hz
    }

    /// CPU time of the PMD threads since `earlier`, seconds.
    pub fn pmd_cpu_seconds_since(&self, earlier: &CpuSample) -> f64 {
        self.pmd_cpu_seconds - earlier.pmd_cpu_seconds
    }

    /// CPU time of `ovs-vswitchd` since `earlier`, seconds.
    pub fn process_cpu_seconds_since(&self, earlier: &CpuSample) -> f64 {
        self.process_cpu_seconds - earlier.process_cpu_seconds
    }
}

/// A private OVS-DPDK: `ovsdb-server` and `ovs-vswitchd` with one netdev bridge, vhost-user
/// ports and the given OpenFlow rules. Dropping it stops both and cleans up.
#[derive(Debug)]
pub struct OvsDpdk {
    /// `WORK_DIR/ovs-dpdk`: database, logs, `run/`, `huge/`.
    dir: PathBuf,
    run_dir: PathBuf,
    huge_dir: PathBuf,
    /// DPDK's `--file-prefix` (also its `/var/run/dpdk/PREFIX` directory).
    file_prefix: String,
    ovsdb: Option<Supervised>,
    vswitchd: Option<Supervised>,
    /// Given back on drop, once `ovs-vswitchd` has let go of them.
    hugepages: Option<Hugepages>,
    /// Symlinks made in server mode (`SOCKET` -> `run/NAME`), removed on drop.
    symlinks: Vec<PathBuf>,
    tsc_hz: f64,
    keep_state: bool,
}

impl OvsDpdk {
    /// Starts OVS-DPDK with its state in `WORK_DIR/ovs-dpdk` (which must not exist): a
    /// bridge with a vhost-user port for each `(name, socket)` and, in place of the
    /// default NORMAL rule, `flows` (`ovs-ofctl add-flow` syntax; ports may be named,
    /// e.g. `in_port=a,ip,nw_dst=198.18.20.0/24,actions=push_mpls:0x8847,...,output:b`).
    /// Returns once OVS has DPDK up, the ports made and the flows in; the guests may
    /// connect at any time. Needs root (hugepages, mount, network namespace).
    pub fn start_with(
        work_dir: &Path,
        ports: &[(&str, &Path)],
        flows: &[String],
        options: &Options,
    ) -> anyhow::Result<OvsDpdk> {
        if !available() {
            bail!(
                "OVS-DPDK is not installed: {VSWITCHD} or the OVS tools are missing \
                 (apt-get install openvswitch-switch-dpdk)"
            );
        }
        let dir = work_dir.join("ovs-dpdk");
        fs::create_dir(&dir)
            .with_context(|| format!("creating {} (left by an earlier run? remove it)", dir.display()))?;
        let mut ovs = OvsDpdk {
            run_dir: dir.join("run"),
            huge_dir: dir.join("huge"),
            file_prefix: format!("vmpls-ovs-{}", std::process::id()),
            dir,
            ovsdb: None,
            vswitchd: None,
            hugepages: None,
            symlinks: Vec::new(),
            tsc_hz: 0.0,
            keep_state: options.keep_state,
        };
        // From here on, an error drops `ovs`, which undoes what was done.
        ovs.tsc_hz = measure_tsc_hz()?;
        fs::create_dir(&ovs.run_dir)?;
        ovs.start_ovsdb()?;
        ovs.configure(options)?;
        ovs.reserve_hugepages(options)?;
        ovs.start_vswitchd()?;
        ovs.add_ports(ports, options)?;
        ovs.add_flows(flows)?;
        Ok(ovs)
    }

    fn start_ovsdb(&mut self) -> anyhow::Result<()> {
        let db = self.dir.join("conf.db");
        self.run("ovsdb-tool", &["create", &path_str(&db)?, SCHEMA])?;
        let mut cmd = self.command("ovsdb-server");
        cmd.arg(&db)
            .arg(format!("--remote=punix:{}", self.run_dir.join("db.sock").display()))
            .arg(format!("--unixctl={}", self.run_dir.join("ovsdb-server.ctl").display()))
            .arg(format!("--log-file={}", self.dir.join("ovsdb-server.log").display()));
        self.ovsdb = Some(self.spawn(cmd, "ovsdb-server", "ovsdb-server.out")?);
        let sock = self.run_dir.join("db.sock");
        self.wait_for("ovsdb-server to make its socket", |ovs| {
            ovs.check_alive()?;
            Ok(sock.exists())
        })?;
        self.vsctl(&["--no-wait", "init"])?;
        Ok(())
    }

    fn configure(&self, options: &Options) -> anyhow::Result<()> {
        let extra = format!(
            "--no-pci --single-file-segments --huge-dir {} --file-prefix {}",
            self.huge_dir.display(),
            self.file_prefix
        );
        let mut config = vec![
            "other_config:dpdk-init=true".to_string(),
            format!("other_config:dpdk-socket-mem={}", options.socket_mem_mb),
            format!("other_config:dpdk-socket-limit={}", options.socket_mem_mb),
            "other_config:per-port-memory=true".to_string(),
            format!("other_config:dpdk-extra=\"{extra}\""),
            format!("other_config:pmd-cpu-mask={:#x}", 1u64 << options.pmd_core.min(63)),
        ];
        if options.userspace_tso {
            config.push("other_config:userspace-tso-enable=true".to_string());
        }
        if let Some(us) = options.pmd_max_sleep_us {
            config.push(format!("other_config:pmd-maxsleep={us}"));
        }
        let mut args = vec!["--no-wait", "set", "Open_vSwitch", "."];
        args.extend(config.iter().map(String::as_str));
        self.vsctl(&args)?;
        Ok(())
    }

    fn reserve_hugepages(&mut self, options: &Options) -> anyhow::Result<()> {
        let pages = options.socket_mem_mb.div_ceil(HUGEPAGE_MB) + 16;
        self.hugepages = Some(
            Hugepages::reserve(pages.into(), &self.huge_dir)
                .with_context(|| format!("hugepages for dpdk-socket-mem={}", options.socket_mem_mb))?,
        );
        Ok(())
    }

    fn start_vswitchd(&mut self) -> anyhow::Result<()> {
        let mut cmd = self.command("unshare");
        cmd.args(["--net", "--", VSWITCHD])
            .arg(format!("unix:{}", self.run_dir.join("db.sock").display()))
            .arg(format!("--unixctl={}", self.ctl().display()))
            .arg(format!("--log-file={}", self.log_path().display()));
        self.vswitchd = Some(self.spawn(cmd, "ovs-vswitchd", "ovs-vswitchd.out")?);
        self.wait_for("ovs-vswitchd to initialise DPDK", |ovs| {
            ovs.check_alive()?;
            if !ovs.ctl().exists() {
                return Ok(false);
            }
            Ok(ovs.vsctl(&["get", "Open_vSwitch", ".", "dpdk_initialized"])?.trim() == "true")
        })?;
        self.vsctl(&["add-br", BRIDGE, "--", "set", "bridge", BRIDGE, "datapath_type=netdev"])?;
        Ok(())
    }

    fn add_ports(&mut self, ports: &[(&str, &Path)], options: &Options) -> anyhow::Result<()> {
        for (i, (name, socket)) in ports.iter().enumerate() {
            let ofport = format!("ofport_request={}", i + 1);
            if options.ovs_is_server {
                if fs::symlink_metadata(socket).is_ok() {
                    bail!("{} exists: OVS would serve port {name} there", socket.display());
                }
                self.vsctl(&[
                    "add-port",
                    BRIDGE,
                    name,
                    "--",
                    "set",
                    "Interface",
                    name,
                    "type=dpdkvhostuser",
                    &ofport,
                ])?;
                let served = self.run_dir.join(name);
                self.wait_for("OVS to create the vhost-user socket", |_| Ok(served.exists()))?;
                std::os::unix::fs::symlink(&served, socket).with_context(|| {
                    format!("linking {} to OVS's socket {}", socket.display(), served.display())
                })?;
                self.symlinks.push(socket.to_path_buf());
            } else {
                let server_path = format!("options:vhost-server-path={}", path_str(socket)?);
                self.vsctl(&[
                    "add-port",
                    BRIDGE,
                    name,
                    "--",
                    "set",
                    "Interface",
                    name,
                    "type=dpdkvhostuserclient",
                    &server_path,
                    &ofport,
                ])?;
            }
        }
        Ok(())
    }

    fn add_flows(&self, flows: &[String]) -> anyhow::Result<()> {
        self.ofctl(&["del-flows", BRIDGE])?;
        for flow in flows {
            self.ofctl(&["add-flow", BRIDGE, flow])?;
        }
        Ok(())
    }

    /// Port `name`'s counters, read live (`ovs-ofctl dump-ports`; the `statistics` column
    /// of the database lags up to 5 s). Fails while the port's guest is not connected
    /// (OVS then reports none) and always for server-mode ports (see the module docs).
    pub fn port_stats(&self, name: &str) -> anyhow::Result<PortCounters> {
        let text = self.ofctl(&["dump-ports", BRIDGE, name])?;
        parse_dump_ports(&text).with_context(|| {
            format!(
                "port {name}: OVS has no counters for it (is its guest connected? a \
                 dpdkvhostuser server port never has them in OVS 3.1)"
            )
        })
    }

    /// Port `name`'s `statistics` column (`ovs-vsctl get Interface NAME statistics`): every
    /// counter OVS and DPDK keep, e.g. `ovs_tx_failure_drops` (guest ring full) or
    /// `tx_q0_size_65_127_packets`. OVS refreshes it every 5 s.
    pub fn interface_statistics(&self, name: &str) -> anyhow::Result<BTreeMap<String, u64>> {
        let text = self.vsctl(&["get", "Interface", name, "statistics"])?;
        parse_statistics(&text)
    }

    /// `ovs-appctl dpif-netdev/pmd-stats-show`, a record per PMD thread.
    fn pmd_stats(&self) -> anyhow::Result<Vec<PmdThreadStats>> {
        let text = self.appctl(&["dpif-netdev/pmd-stats-show"])?;
        parse_pmd_stats(&text)
    }

    /// The PMD cycles and the CPU times read together, for [`CpuSample`]'s differences.
    pub fn cpu_sample(&self) -> anyhow::Result<CpuSample> {
        let pmds = self.pmd_stats()?;
        Ok(CpuSample {
            processing_cycles: pmds.iter().map(|p| p.processing_cycles).sum(),
            idle_cycles: pmds.iter().map(|p| p.idle_cycles).sum(),
            pmd_cpu_seconds: self.pmd_thread_cpu_seconds()?,
            process_cpu_seconds: self.process_cpu_seconds()?,
            tsc_hz: self.tsc_hz,
        })
    }

    /// CPU time of the `ovs-vswitchd` process (utime + stime of all its threads), seconds.
    /// With a busy-polling PMD this is about the wall time the PMD's core was given.
    fn process_cpu_seconds(&self) -> anyhow::Result<f64> {
        let path = format!("/proc/{}/stat", self.pid());
        let stat = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        cpu_seconds_of_stat(&stat)
    }

    /// CPU time of the PMD threads alone (threads named `pmd...`), seconds: how much of its
    /// core the scheduler gave the busy-polling PMD.
    fn pmd_thread_cpu_seconds(&self) -> anyhow::Result<f64> {
        let tasks = format!("/proc/{}/task", self.pid());
        let mut total = 0.0;
        for entry in fs::read_dir(&tasks).with_context(|| format!("reading {tasks}"))? {
            let path = entry?.path();
            let comm = fs::read_to_string(path.join("comm")).unwrap_or_default();
            if comm.starts_with("pmd") {
                let stat = fs::read_to_string(path.join("stat"))
                    .with_context(|| format!("reading {}/stat", path.display()))?;
                total += cpu_seconds_of_stat(&stat)?;
            }
        }
        Ok(total)
    }

    /// The datapath's flows with their actions as executed (`ovs-appctl dpctl/dump-flows`),
    /// e.g. `push_mpls(label=1002,tc=0,ttl=63,bos=1,eth_type=0x8847)`.
    pub fn datapath_flows(&self) -> anyhow::Result<String> {
        self.appctl(&["dpctl/dump-flows"])
    }

    /// Runs `ovs-vsctl` against this instance's database; its stdout.
    fn vsctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let db = format!("--db=unix:{}", self.run_dir.join("db.sock").display());
        let timeout = format!("--timeout={}", COMMAND_TIMEOUT.as_secs());
        let mut all = vec![db.as_str(), timeout.as_str()];
        all.extend_from_slice(args);
        self.run("ovs-vsctl", &all)
    }

    /// Runs `ovs-ofctl` (a bridge argument finds this instance's through `OVS_RUNDIR`).
    fn ofctl(&self, args: &[&str]) -> anyhow::Result<String> {
        self.run("ovs-ofctl", args)
    }

    /// Runs `ovs-appctl` against this instance's `ovs-vswitchd`.
    pub fn appctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let ctl = path_str(&self.ctl())?;
        let mut all = vec!["-t", ctl.as_str()];
        all.extend_from_slice(args);
        self.run("ovs-appctl", &all)
    }

    /// The pid of `ovs-vswitchd`.
    fn pid(&self) -> u32 {
        self.vswitchd.as_ref().map_or(0, Supervised::id)
    }

    /// The TSC frequency measured at start, Hz.
    pub fn tsc_hz(&self) -> f64 {
        self.tsc_hz
    }

    /// `ovs-vswitchd`'s log (DPDK's messages are in it too).
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("ovs-vswitchd.log")
    }

    fn ctl(&self) -> PathBuf {
        self.run_dir.join("ovs-vswitchd.ctl")
    }

    /// A command with the OVS directories pointed at this instance's.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("OVS_RUNDIR", &self.run_dir)
            .env("OVS_DBDIR", &self.dir)
            .env("OVS_LOGDIR", &self.dir)
            .env("OVS_SYSCONFDIR", &self.dir);
        cmd
    }

    fn run(&self, program: &str, args: &[&str]) -> anyhow::Result<String> {
        let mut cmd = self.command(program);
        cmd.args(args);
        let shown = format!("{program} {}", args.join(" "));
        let out = vmpls_lab::process::run_here_timeout(cmd, COMMAND_TIMEOUT)
            .with_context(|| format!("running `{shown}`"))?;
        if !out.status.success() {
            bail!("`{shown}` failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Spawns a daemon in the foreground with its stdout and stderr in `DIR/out_file`; it
    /// gets SIGKILL if the thread that started it dies.
    fn spawn(&self, mut cmd: Command, name: &str, out_file: &str) -> anyhow::Result<Supervised> {
        let out = fs::File::create(self.dir.join(out_file))?;
        cmd.stdin(Stdio::null()).stdout(out.try_clone()?).stderr(out);
        vmpls_sys::process::kill_with_parent(&mut cmd);
        let child = cmd.spawn().with_context(|| format!("starting {:?}", cmd.get_program()))?;
        Ok(Supervised::new(name, child, SignalTarget::Process))
    }

    /// Fails, quoting the logs, if a daemon started has exited.
    fn check_alive(&mut self) -> anyhow::Result<()> {
        let mut exited = None;
        for (child, name) in [(&mut self.ovsdb, "ovsdb-server"), (&mut self.vswitchd, "ovs-vswitchd")] {
            if let Some(c) = child
                && let Some(status) = c.try_wait()?
            {
                *child = None;
                exited = Some((name, status));
                break;
            }
        }
        match exited {
            Some((name, status)) => bail!("{name} exited ({status}); {}", self.log_tail(name)),
            None => Ok(()),
        }
    }

    /// The last lines of a daemon's log and output, for errors.
    fn log_tail(&self, name: &str) -> String {
        let mut lines = Vec::new();
        for file in [format!("{name}.log"), format!("{name}.out")] {
            let text = fs::read_to_string(self.dir.join(&file)).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let tail = &all[all.len().saturating_sub(12)..];
            if !tail.is_empty() {
                lines.push(format!("{file}:\n{}", tail.join("\n")));
            }
        }
        if lines.is_empty() { format!("{name} wrote nothing") } else { lines.join("\n") }
    }

    fn wait_for(
        &mut self,
        what: &str,
        mut ready: impl FnMut(&mut Self) -> anyhow::Result<bool>,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if ready(self)? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "timed out after {START_TIMEOUT:?} waiting for {what}; {}",
                    self.log_tail("ovs-vswitchd")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for OvsDpdk {
    fn drop(&mut self) {
        // vswitchd first: it is the database's client and holds the hugepages.
        for (child, name) in [(self.vswitchd.take(), "ovs-vswitchd"), (self.ovsdb.take(), "ovsdb-server")] {
            // SIGTERM first: OVS's daemons clean up their sockets on it.
            if let Some(mut c) = child
                && let Err(e) = c.stop(STOP_GRACE)
            {
                tracing::warn!("stopping {name} (pid {}): {e:#}", c.id());
            }
        }
        for link in self.symlinks.drain(..) {
            let _ = fs::remove_file(link);
        }
        // Kept, with the state directory, while a page is still mapped.
        let mut huge_busy = false;
        if let Some(hugepages) = self.hugepages.take()
            && let Err(e) = hugepages.release()
        {
            tracing::warn!("{e:#}");
            huge_busy = true;
        }
        let _ = fs::remove_dir_all(Path::new("/var/run/dpdk").join(&self.file_prefix));
        if !self.keep_state && !huge_busy {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn path_str(p: &Path) -> anyhow::Result<String> {
    p.to_str().map(str::to_string).with_context(|| format!("path {} is not UTF-8", p.display()))
}

/// The TSC's rate against the monotonic clock over 100 ms: OVS counts its PMD cycles with
/// `rdtsc` (DPDK's `rte_get_tsc_cycles`).
#[cfg(target_arch = "x86_64")]
fn measure_tsc_hz() -> anyhow::Result<f64> {
    fn rdtsc() -> u64 {
        // SAFETY: RDTSC reads the time-stamp counter; it has no operands and no side
        // effects, and every x86_64 CPU has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    let (t0, c0) = (Instant::now(), rdtsc());
    std::thread::sleep(Duration::from_millis(100));
    let (c1, dt) = (rdtsc(), t0.elapsed());
    Ok(c1.wrapping_sub(c0) as f64 / dt.as_secs_f64())
}

#[cfg(not(target_arch = "x86_64"))]
fn measure_tsc_hz() -> anyhow::Result<f64> {
    bail!("OVS's PMD cycles are TSC cycles; their rate is known here only on x86_64")
}

/// utime + stime (fields 14 and 15 of `/proc/PID/stat` or `/proc/PID/task/TID/stat`) in
/// seconds. The fields are counted after the command name, which may hold spaces.
fn cpu_seconds_of_stat(stat: &str) -> anyhow::Result<f64> {
    let rest = stat.rsplit_once(')').map(|(_, r)| r).context("no ')' in a /proc stat line")?;
    // `rest` starts at field 3 (state): utime is field 14, the 12th of `rest`.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| -> anyhow::Result<u64> {
        fields.get(i).and_then(|f| f.parse().ok()).context("short /proc stat line")
    };
    let ticks = field(11)? + field(12)?;
    Ok(ticks as f64 / vmpls_sys::process::clock_ticks_per_second() as f64)
}

/// Parses `ovs-ofctl dump-ports BRIDGE PORT` (one port):
///
/// ```text
///   port  2: rx pkts=0, bytes=0, drop=0, errs=?, frame=?, over=?, crc=?
///            tx pkts=45056, bytes=3063808, drop=14008320, errs=?, coll=?
/// ```
///
/// A counter OVS does not have is `?`; the packet, byte and drop counters must be there.
fn parse_dump_ports(text: &str) -> anyhow::Result<PortCounters> {
    // `dir` is "rx" or "tx": the pairs after it on its line, `pkts` first.
    let counters = |dir: &str| -> anyhow::Result<[u64; 3]> {
        let pairs = text
            .lines()
            .find_map(|l| l.split_once(&format!("{dir} pkts=")).map(|(_, rest)| rest))
            .with_context(|| format!("no `{dir} pkts=` in dump-ports output: {text:?}"))?;
        let line = format!("pkts={pairs}");
        let pairs: BTreeMap<&str, &str> =
            line.split(',').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.trim(), v.trim())).collect();
        let get = |key: &str| -> anyhow::Result<u64> {
            match pairs.get(key) {
                Some(&"?") => bail!("OVS reports {dir} {key}=?"),
                Some(v) => v.parse().with_context(|| format!("{dir} {key}={v}")),
                None => bail!("no {dir} {key} in dump-ports output"),
            }
        };
        Ok([get("pkts")?, get("bytes")?, get("drop")?])
    };
    let [rx_packets, rx_bytes, rx_dropped] = counters("rx")?;
    let [tx_packets, tx_bytes, tx_dropped] = counters("tx")?;
    Ok(PortCounters { rx_packets, rx_bytes, rx_dropped, tx_packets, tx_bytes, tx_dropped })
}

/// Parses an OVSDB map of integers as `ovs-vsctl get Interface NAME statistics` prints it:
/// `{ovs_rx_qos_drops=0, rx_packets=10988672, ...}`.
fn parse_statistics(text: &str) -> anyhow::Result<BTreeMap<String, u64>> {
    let inner = text
        .trim()
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .with_context(|| format!("not an OVSDB map: {text:?}"))?;
    inner
        .split(',')
        .map(str::trim)
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').with_context(|| format!("no '=' in {kv:?}"))?;
            let v = v.parse().with_context(|| format!("statistics {k}={v}: not a count"))?;
            Ok((k.trim_matches('"').to_string(), v))
        })
        .collect()
}

/// Parses `ovs-appctl dpif-netdev/pmd-stats-show`: a record for each `pmd thread ... core_id
/// N:` section (the `main thread:` section, which has no cycle counts, is skipped).
fn parse_pmd_stats(text: &str) -> anyhow::Result<Vec<PmdThreadStats>> {
    let mut out = Vec::new();
    let mut current: Option<PmdThreadStats> = None;
    for line in text.lines() {
        if !line.starts_with(' ') && !line.trim().is_empty() {
            out.extend(current.take());
            if line.starts_with("pmd thread") {
                let core = line
                    .split_once("core_id")
                    .map(|(_, r)| r.trim().trim_end_matches(':').trim())
                    .context("pmd thread without core_id")?;
                current = Some(PmdThreadStats {
                    core_id: core.parse().with_context(|| format!("core_id {core:?}"))?,
                    ..Default::default()
                });
            }
            continue;
        }
        let Some(pmd) = current.as_mut() else { continue };
        let Some((key, value)) = line.trim().split_once(':') else { continue };
        // "12993937736 (100.00%)" or "4482496": the first word is the count.
        let first = value.split_whitespace().next().unwrap_or("");
        let count = || first.parse::<u64>().with_context(|| format!("{key}: {value:?}"));
        match key {
            "packets received" => pmd.packets_received = count()?,
            "idle cycles" => pmd.idle_cycles = count()?,
            "processing cycles" => pmd.processing_cycles = count()?,
            _ => {}
        }
    }
    out.extend(current);
    if out.is_empty() {
        bail!("no PMD thread in pmd-stats-show output (is pmd-cpu-mask on an online core?): {text:?}");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testpmd::{Testpmd, TestpmdOptions};

    /// `ovs-appctl dpif-netdev/pmd-stats-show` of OVS 3.1.0 (Debian 12) with 64-byte frames
    /// flowing from testpmd through a push_mpls rule.
    const PMD_STATS: &str = "pmd thread numa_id 0 core_id 1:
  packets received: 4482496
  packet recirculations: 0
  avg. datapath passes per packet: 1.00
  phwol hits: 0
  mfex opt hits: 0
  simple match hits: 0
  emc hits: 4482464
  smc hits: 0
  megaflow hits: 31
  avg. subtable lookups per megaflow hit: 1.00
  miss with success upcall: 1
  miss with failed upcall: 0
  avg. packets per output batch: 32.00
  idle cycles: 54311055862 (96.81%)
  processing cycles: 1790642102 (3.19%)
  avg cycles per packet: 12515.73 (56101697964/4482496)
  avg processing cycles per packet: 399.47 (1790642102/4482496)
main thread:
  packets received: 0
  packet recirculations: 0
  avg. datapath passes per packet: 0.00
  phwol hits: 0
  mfex opt hits: 0
  simple match hits: 0
  emc hits: 0
  smc hits: 0
  megaflow hits: 0
  avg. subtable lookups per megaflow hit: 0.00
  miss with success upcall: 0
  miss with failed upcall: 0
  avg. packets per output batch: 0.00
";

    /// The same before any packet: no per-packet averages.
    const PMD_STATS_IDLE: &str = "pmd thread numa_id 0 core_id 1:
  packets received: 0
  packet recirculations: 0
  avg. datapath passes per packet: 0.00
  emc hits: 0
  idle cycles: 12993937736 (100.00%)
  processing cycles: 0 (0.00%)
main thread:
  packets received: 0
";

    /// `ovs-ofctl dump-ports vmpls-ovs b` while testpmd received on b, its ring often full.
    const DUMP_PORTS: &str = "OFPST_PORT reply (xid=0x2): 1 ports
  port  2: rx pkts=0, bytes=0, drop=0, errs=?, frame=?, over=?, crc=?
           tx pkts=45056, bytes=3063808, drop=14008320, errs=?, coll=?
";

    /// The same for a `dpdkvhostuser` (server) port: OVS 3.1 has no counters for it.
    const DUMP_PORTS_SERVER: &str = "OFPST_PORT reply (xid=0x2): 1 ports
  port  1: rx pkts=?, bytes=?, drop=?, errs=?, frame=?, over=?, crc=?
           tx pkts=?, bytes=?, drop=?, errs=?, coll=?
";

    /// `ovs-vsctl get Interface b statistics` (a dpdkvhostuserclient port), cut to a few
    /// of its 70 counters.
    const STATISTICS: &str = "{ovs_rx_qos_drops=0, ovs_tx_failure_drops=10952832, \
        ovs_tx_invalid_hwol_drops=0, ovs_tx_mtu_exceeded_drops=0, ovs_tx_qos_drops=0, \
        ovs_tx_retries=0, rx_bytes=0, rx_dropped=0, rx_packets=0, tx_65_to_127_packets=35840, \
        tx_bytes=2437120, tx_dropped=10952832, tx_packets=35840, tx_q0_good_packets=35840}\n";

    #[test]
    fn pmd_stats_show_gives_the_pmd_threads_cycles_and_skips_the_main_thread() {
        let pmds = parse_pmd_stats(PMD_STATS).unwrap();
        assert_eq!(
            pmds,
            vec![PmdThreadStats {
                core_id: 1,
                packets_received: 4482496,
                idle_cycles: 54311055862,
                processing_cycles: 1790642102,
            }]
        );
        let idle = parse_pmd_stats(PMD_STATS_IDLE).unwrap();
        assert_eq!(idle[0].processing_cycles, 0);
        assert_eq!(idle[0].idle_cycles, 12993937736);
    }

    #[test]
    fn pmd_stats_show_without_a_pmd_thread_is_an_error() {
        assert!(parse_pmd_stats("main thread:\n  packets received: 0\n").is_err());
    }

    #[test]
    fn dump_ports_gives_packets_bytes_and_drops_both_ways() {
        assert_eq!(
            parse_dump_ports(DUMP_PORTS).unwrap(),
            PortCounters {
                rx_packets: 0,
                rx_bytes: 0,
                rx_dropped: 0,
                tx_packets: 45056,
                tx_bytes: 3063808,
                tx_dropped: 14008320,
            }
        );
    }

    #[test]
    fn dump_ports_of_a_port_without_counters_is_an_error() {
        let e = parse_dump_ports(DUMP_PORTS_SERVER).unwrap_err();
        assert!(format!("{e:#}").contains("?"), "{e:#}");
    }

    #[test]
    fn statistics_column_is_a_map_of_counts() {
        let s = parse_statistics(STATISTICS).unwrap();
        assert_eq!(s["ovs_tx_failure_drops"], 10952832);
        assert_eq!(s["tx_packets"], 35840);
        // 68-byte frames: 64 bytes from testpmd and the pushed label.
        assert_eq!(s["tx_bytes"], 68 * s["tx_packets"]);
        assert_eq!(s.len(), 14);
        assert_eq!(parse_statistics("{}\n").unwrap().len(), 0);
        assert!(parse_statistics("rx_packets=1").is_err());
    }

    #[test]
    fn cpu_seconds_come_from_utime_and_stime_after_the_command_name() {
        // A thread name with a space and a parenthesis, as `comm` may have.
        let stat = "4645 (pmd-c01 (x)) R 1 4645 4645 0 -1 4194560 2398 0 0 0 937 63 0 0 20 0 \
                    12 0 2850 137438953472 12000 18446744073709551615";
        let hz = vmpls_sys::process::clock_ticks_per_second() as f64;
        assert_eq!(cpu_seconds_of_stat(stat).unwrap(), 1000.0 / hz);
    }

    /// An interactive testpmd with one virtio-user port (the vhost-user server,
    /// `server=1`) on `vdev`.
    fn start_testpmd(
        work: &Path,
        huge: &Hugepages,
        name: &str,
        lcores: &str,
        vdev: String,
        args: &[&str],
    ) -> Testpmd {
        let options = TestpmdOptions {
            name: name.to_string(),
            lcores: lcores.to_string(),
            vdevs: vec![vdev],
            mem_mb: 256,
            args: ["--total-num-mbufs=8192"].iter().chain(args).map(|a| a.to_string()).collect(),
            commands: Vec::new(),
        };
        Testpmd::start(work, huge, &options).expect("dpdk-testpmd (apt-get install dpdk-dev)")
    }

    /// testpmd (txonly, 64-byte UDP to 198.18.20.2) -> vhost-user port a of OVS -> the
    /// rule vmpls's benchmark route does (push 1002, new MACs) -> port b -> testpmd
    /// (rxonly). Prints the rates the benchmark reports.
    ///
    /// `sudo cargo test --release -p vmpls-tools ovs_dpdk -- --ignored --nocapture`;
    /// `VMPLS_OVS_SECONDS` (default 5) sets the measured interval, `VMPLS_OVS_PMD_CORE`
    /// (default 1) the PMD's core.
    #[test]
    #[ignore = "needs root, openvswitch-switch-dpdk, dpdk-testpmd and 700 MiB of hugepages; \
                three busy pollers on the machine's cores for a few seconds"]
    fn testpmd_frames_cross_ovs_with_the_label_pushed() {
        assert!(available(), "apt-get install openvswitch-switch-dpdk");
        let secs: u64 = std::env::var("VMPLS_OVS_SECONDS").map_or(5, |s| s.parse().unwrap());
        let pmd_core: u32 = std::env::var("VMPLS_OVS_PMD_CORE").map_or(1, |s| s.parse().unwrap());
        let work = std::env::temp_dir().join(format!("vmpls-ovs-test-{}", std::process::id()));
        fs::create_dir_all(&work).unwrap();
        let huge = Hugepages::reserve(260, &work.join("huge")).unwrap();
        let (a, b) = (work.join("a.sock"), work.join("b.sock"));
        let flow = "in_port=a,ip,nw_dst=198.18.20.0/24,actions=dec_ttl,push_mpls:0x8847,\
                    set_field:1002->mpls_label,mod_dl_src:02:00:00:00:bb:01,\
                    mod_dl_dst:02:00:00:00:bb:02,output:b";
        let options = Options { pmd_core, ..Options::default() };
        let ovs = OvsDpdk::start_with(&work, &[("a", &a), ("b", &b)], &[flow.to_string()], &options).unwrap();
        let vdev = |n: u32, sock: &Path, mac: &str| {
            format!("net_virtio_user{n},path={},server=1,queues=1,mac={mac}", sock.display())
        };
        let mut rx = start_testpmd(
            &work,
            &huge,
            "rx",
            "0@0,1@1",
            vdev(1, &b, "02:00:00:00:bb:02"),
            &["--forward-mode=rxonly"],
        );
        let mut tx = start_testpmd(
            &work,
            &huge,
            "tx",
            "0@1,1@0",
            vdev(0, &a, "02:00:00:00:aa:02"),
            &[
                "--forward-mode=txonly",
                "--eth-peer=0,02:00:00:00:aa:01",
                "--tx-ip=198.18.1.2,198.18.20.2",
                "--txpkts=64",
            ],
        );
        // Both guests connected (OVS retries every second) and frames crossing.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let flowing = ovs.port_stats("a").is_ok_and(|s| s.rx_packets > 0)
                && ovs.port_stats("b").is_ok_and(|s| s.tx_packets > 0);
            if flowing {
                break;
            }
            assert!(Instant::now() < deadline, "no frames through OVS; see {}", ovs.log_path().display());
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_secs(1));
        let read = || (ovs.port_stats("a").unwrap(), ovs.port_stats("b").unwrap(), ovs.cpu_sample().unwrap());
        let (a0, b0, cpu0) = read();
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_secs(secs));
        let (a1, b1, cpu1) = read();
        let wall = t0.elapsed().as_secs_f64();
        // Forwarding stops, the guests stay connected: the counters stay readable.
        let tx_sent = tx.stop_forwarding().unwrap()[&0].tx_packets;
        std::thread::sleep(Duration::from_millis(500));
        let rx_received = rx.stop_forwarding().unwrap()[&0].rx_packets;
        let (a_end, b_end) = (ovs.port_stats("a").unwrap(), ovs.port_stats("b").unwrap());
        let flows = ovs.datapath_flows().unwrap();
        let b_stats = ovs.interface_statistics("b").unwrap();
        let coverage = ovs.appctl(&["coverage/show"]).unwrap();
        let drops: Vec<&str> = coverage.lines().filter(|l| l.contains("drop")).collect();
        println!("drop counters (ovs-appctl coverage/show):\n{}", drops.join("\n"));
        tx.quit().unwrap();
        rx.quit().unwrap();

        let frames_in = a1.rx_packets - a0.rx_packets;
        let frames_out = b1.tx_packets - b0.tx_packets;
        let dropped = b1.tx_dropped - b0.tx_dropped;
        let busy = cpu1.busy_cpu_seconds_since(&cpu0);
        let tsc_busy = cpu1.processing_seconds_since(&cpu0);
        let pmd = cpu1.pmd_cpu_seconds_since(&cpu0);
        let cpu = cpu1.process_cpu_seconds_since(&cpu0);
        let m = |frames: u64, secs: f64| frames as f64 / secs / 1e6;
        println!(
            "OVS-DPDK 64-byte frames, {wall:.1} s, PMD on core {pmd_core}, TSC {:.3} GHz",
            ovs.tsc_hz() / 1e9
        );
        println!(
            "frames in (port a): {frames_in}, out (port b): {frames_out}, dropped at b (guest \
             ring full): {dropped}, unaccounted: {}",
            frames_in as i64 - frames_out as i64 - dropped as i64
        );
        println!(
            "PMD thread CPU seconds: {pmd:.2} (ovs-vswitchd {cpu:.2}), of which busy: {busy:.3} \
             (processing cycles / TSC Hz: {tsc_busy:.3})"
        );
        println!(
            "per PMD busy CPU-second: {:.2} M frames in, {:.2} M out; per processing-cycle \
             second: {:.2} M in",
            m(frames_in, busy),
            m(frames_out, busy),
            m(frames_in, tsc_busy)
        );
        println!(
            "per ovs-vswitchd CPU-second: {:.2} M frames in, {:.2} M out",
            m(frames_in, cpu),
            m(frames_out, cpu)
        );
        println!("testpmd tx sent {tx_sent}, testpmd rx received {rx_received}");
        println!("datapath flows:\n{flows}");
        println!("port b's counters in the database (up to 5 s old): {b_stats:?}");

        assert!(frames_in > 0 && frames_out > 0);
        assert!(flows.contains("push_mpls(label=1002"), "{flows}");
        // Every frame in went out or was counted as dropped (the rule takes them all).
        assert_eq!(a_end.rx_packets, b_end.tx_packets + b_end.tx_dropped, "a {a_end:?}, b {b_end:?}");
        // 64 bytes from testpmd and the 4-byte label.
        assert_eq!(b_end.tx_bytes, 68 * b_end.tx_packets);
        // testpmd counts what it took from its ring: at most a ring (256) fewer.
        assert!(rx_received <= b_end.tx_packets && rx_received + 256 >= b_end.tx_packets, "{rx_received}");
        drop(ovs);
        drop(huge);
        let _ = fs::remove_dir_all(&work);
    }
}
