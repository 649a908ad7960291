//! Supervising one router's daemons: start in order, wait for their sockets, stop
//! group by group, restart zebra.

use super::*;
use crate::process::{SignalTarget, Supervised};

#[derive(Debug)]
struct Running {
    daemon: Daemon,
    child: Supervised,
}

/// An FRR instance (zebra, staticd, ospfd, ldpd as configured) in one network
/// namespace. Dropping it stops the daemons.
///
/// Like [`Topology::spawn`], the daemons are killed (`PR_SET_PDEATHSIG`) if the thread
/// that started them exits: start and restart them from a thread that lives as long as
/// the router.
#[derive(Debug)]
pub struct FrrRouter {
    pub(super) ns: String,
    pub(super) dir: PathBuf,
    /// `dir` as the daemons see it (inside [`FrrOptions::root`]).
    pub(super) inner_dir: PathBuf,
    pub(super) options: FrrOptions,
    running: Vec<Running>,
}

impl FrrRouter {
    /// Starts FRR for `host` of `topology` (see [`FrrRouter::start_in_ns`]).
    pub fn start(
        topology: &Topology,
        host: &str,
        work_dir: &Path,
        options: FrrOptions,
    ) -> anyhow::Result<Self> {
        Self::start_in_ns(topology.ns(host)?, work_dir, options)
    }

    /// Starts FRR in the network namespace `ns`: adds the router id to `lo` (and sets
    /// `lo` up), writes the configs into `WORK_DIR/<hostname>/`, then starts zebra,
    /// waits for its socket, and starts staticd, ospfd and ldpd (as configured), waiting
    /// for each one's vty socket. On error, whatever was started is stopped.
    pub fn start_in_ns(ns: &str, work_dir: &Path, options: FrrOptions) -> anyhow::Result<Self> {
        if options.hostname.is_empty() || options.hostname.contains(['/', ' ']) {
            bail!("FRR hostname {:?} must be non-empty, without '/' or spaces", options.hostname);
        }
        let sbin = options.sbin();
        if !sbin.join("zebra").exists() {
            bail!("{}/zebra is missing: install FRR first (frr::ensure_frr_installed)", sbin.display());
        }
        if let Some(m) = options.zebra_module.as_ref().filter(|m| !m.is_file()) {
            bail!("zebra module {} does not exist (build it with scripts/build-zebra-module)", m.display());
        }
        let dir = work_dir.join(&options.hostname);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let dir = dir.canonicalize().with_context(|| format!("resolving {}", dir.display()))?;
        let inner_dir = options.path_inside(&dir)?;
        if let Some(m) = &options.zebra_module {
            options.path_inside(m).context("the zebra module")?;
        }
        if let Some(root) = &options.root {
            // where mgmtd makes its pathspace directory (a fresh root has none)
            let run = root.join(FRR_RUN_DIR.trim_start_matches('/'));
            fs::create_dir_all(&run).with_context(|| format!("creating {}", run.display()))?;
        }
        add_loopback(ns, options.router_id)?;
        for d in options.daemons() {
            let path = dir.join(format!("{}.conf", d.name()));
            fs::write(&path, options.config(d, &inner_dir))
                .with_context(|| format!("writing {}", path.display()))?;
        }
        // vtysh reads vtysh.conf from --config_dir: an empty one keeps /etc/frr's out.
        fs::write(dir.join("vtysh.conf"), "! vtysh for this lab router (written by vmpls-lab)\n")
            .with_context(|| format!("writing {}", dir.join("vtysh.conf").display()))?;
        let mut router = Self { ns: ns.to_string(), dir, inner_dir, options, running: Vec::new() };
        for d in router.options.daemons() {
            router.start_daemon(d)?;
        }
        // staticd of an FRR with mgmtd reads no file: its lines go through vtysh.
        let extra = router.options.staticd_extra.clone();
        let lines: Vec<&str> = extra.lines().map(str::trim).filter(|l| !l.is_empty() && *l != "!").collect();
        if router.options.uses_mgmtd() && !lines.is_empty() {
            let mut commands = vec!["configure terminal"];
            commands.extend(lines);
            router.vtysh(&commands)?;
        }
        Ok(router)
    }

    /// `argv` (an FRR program and its arguments) as a command of this router's FRR: as
    /// is, or chrooted into [`FrrOptions::root`] inside a private mount namespace with
    /// the host's `/proc` and `/dev` and a `/sys` of the router's network namespace
    /// (mounted by a process already in it), all gone with the last process in it.
    pub(super) fn frr_command(&self, argv: &[OsString]) -> Command {
        let Some(root) = &self.options.root else {
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..]);
            return cmd;
        };
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
            .arg(
                "r=$1; shift; mount --rbind /proc \"$r/proc\" && mount -t sysfs sysfs \"$r/sys\" && \
                 mount --rbind /dev \"$r/dev\" && exec chroot \"$r\" \"$@\"",
            )
            .arg("sh")
            .arg(root)
            .args(argv);
        cmd
    }

    /// The pathspace (`-N`) of this router's daemons when FRR has mgmtd: its sockets
    /// (`/var/run/frr/<pathspace>/mgmtd_*.sock`) are the only ones not in the router's
    /// directory. The namespace's name, unique on the machine.
    fn pathspace(&self) -> Option<String> {
        self.options.uses_mgmtd().then(|| self.ns.replace(['.', '/'], "_"))
    }

    /// The router's options.
    pub fn options(&self) -> &FrrOptions {
        &self.options
    }

    /// The namespace it runs in.
    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// The directory with its configs, logs, pid files and sockets.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of `daemon`'s log file.
    pub fn log_path(&self, daemon: Daemon) -> PathBuf {
        self.dir.join(format!("{}.log", daemon.name()))
    }

    /// The pid of `daemon`, if it runs.
    pub fn pid(&self, daemon: Daemon) -> Option<u32> {
        self.running.iter().find(|r| r.daemon == daemon).map(|r| r.child.id())
    }

    /// Every process of this router: the daemons and their helpers (ldpd forks two),
    /// i.e. all members of the daemons' process groups.
    pub fn pids(&self) -> Vec<u32> {
        let groups: Vec<u32> = self.running.iter().map(|r| r.child.id()).collect();
        let mut pids = group_members(&groups);
        pids.extend(&groups);
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    fn start_daemon(&mut self, daemon: Daemon) -> anyhow::Result<()> {
        let name = daemon.name();
        let mut argv = self.options.command_line(daemon, &self.inner_dir);
        if let Some(ps) = self.pathspace() {
            argv.extend(["-N".into(), ps.into()]);
        }
        let out_path = self.dir.join(format!("{name}.out"));
        let out = File::create(&out_path).with_context(|| format!("creating {}", out_path.display()))?;
        let err = out.try_clone()?;
        // Sockets of a previous run would make us believe the daemon is up.
        let socket = match daemon {
            Daemon::Zebra => self.dir.join("zserv.api"),
            _ => self.dir.join(format!("{name}.vty")),
        };
        let _ = fs::remove_file(&socket);
        let mut cmd = self.frr_command(&argv);
        cmd.stdin(Stdio::null()).stdout(out).stderr(err).current_dir(&self.dir);
        netns::lab_child_in_netns(&self.ns, &mut cmd)?;
        if let Some(dir) = &self.options.netns_dir {
            vmpls_sys::netns::command_with_netns_dir(&mut cmd, dir)
                .with_context(|| format!("giving {name} {} as /run/netns", dir.display()))?;
        }
        let child = cmd.spawn().with_context(|| format!("starting {name} in namespace {}", self.ns))?;
        let child =
            Supervised::new(format!("{name} of {}", self.options.hostname), child, SignalTarget::Group);
        self.running.push(Running { daemon, child });
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.running.last_mut().and_then(|r| r.child.try_wait().ok().flatten()) {
                self.running.pop();
                bail!(
                    "{name} of {} exited at start ({status}); {}: {}; {}: {}",
                    self.options.hostname,
                    out_path.display(),
                    Topology::log_tail(&out_path, 10),
                    self.log_path(daemon).display(),
                    Topology::log_tail(&self.log_path(daemon), 10)
                );
            }
            if socket.exists() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{name} of {} did not create {} within {START_TIMEOUT:?}; log: {}",
                    self.options.hostname,
                    socket.display(),
                    Topology::log_tail(&self.log_path(daemon), 10)
                );
            }
            check_interrupt()?;
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The pids of `daemon` and its helpers.
    fn daemon_pids(&self, daemon: Daemon) -> Vec<u32> {
        let Some(leader) = self.pid(daemon) else {
            return Vec::new();
        };
        let mut pids = group_members(&[leader]);
        pids.push(leader);
        pids
    }

    fn stop_daemon(&mut self, daemon: Daemon) -> anyhow::Result<()> {
        let pids = self.daemon_pids(daemon);
        self.stop_daemon_with(daemon, &pids)
    }

    /// Stops `daemon`, then removes the temporary directories of `pids` (its processes,
    /// listed before it was signalled: its helpers may be gone already).
    fn stop_daemon_with(&mut self, daemon: Daemon, pids: &[u32]) -> anyhow::Result<()> {
        let Some(i) = self.running.iter().position(|r| r.daemon == daemon) else {
            return Ok(());
        };
        let mut r = self.running.remove(i);
        let result = stop_group(&mut r.child, STOP_GRACE);
        remove_tmp_dirs(self.options.root.as_deref(), daemon, pids);
        result
    }

    /// Stops `daemon` and starts it again with the same arguments, as watchfrr does after
    /// it died; zebra has [`FrrRouter::restart_zebra`].
    ///
    /// # Errors
    /// `daemon` is zebra or does not run here, or it did not come back.
    pub fn restart_daemon(&mut self, daemon: Daemon) -> anyhow::Result<()> {
        anyhow::ensure!(daemon != Daemon::Zebra, "zebra is restarted with restart_zebra");
        anyhow::ensure!(
            self.pid(daemon).is_some(),
            "{} does not run on {}",
            daemon.name(),
            self.options.hostname
        );
        self.stop_daemon(daemon)?;
        self.start_daemon(daemon)
    }

    /// Stops every daemon (the routing daemons first, zebra last). Safe to call twice.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        let mut first_err = None;
        let all: Vec<(Daemon, Vec<u32>)> =
            self.running.iter().map(|r| (r.daemon, self.daemon_pids(r.daemon))).collect();
        // Signal all first so they shut down in parallel, then reap in reverse order.
        for r in &self.running {
            r.child.signal(libc::SIGTERM);
        }
        for (d, pids) in all.into_iter().rev() {
            if let Err(e) = self.stop_daemon_with(d, &pids) {
                first_err.get_or_insert(e);
            }
        }
        // mgmtd leaves its pathspace directory and sockets behind
        if let Some(ps) = self.pathspace().filter(|_| first_err.is_none()) {
            let root = self.options.root.as_deref().unwrap_or(Path::new("/"));
            let _ = fs::remove_dir_all(root.join(FRR_RUN_DIR.trim_start_matches('/')).join(ps));
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Stops zebra and starts it again with the same arguments, as after a zebra crash,
    /// then waits (up to 20 s) until the other daemons are its clients again.
    ///
    /// FRR 8.4's ospfd does not send its routes again when zebra comes back (its
    /// `ospf_zebra_connected` only registers; routes are sent on SPF changes only), so
    /// zebra would stay without OSPF routes. This is why watchfrr restarts every daemon
    /// when zebra dies; here `clear ip ospf process` is enough: ospfd rebuilds its
    /// adjacencies and routing table (a few seconds with [`Timers::fast`]) and installs
    /// every route again. staticd and ldpd resend theirs on their own.
    pub fn restart_zebra(&mut self) -> anyhow::Result<()> {
        self.stop_daemon(Daemon::Zebra)?;
        let started = Instant::now();
        // zebra must be first in the list again: clients are stopped before it.
        let rest = std::mem::take(&mut self.running);
        let result = self.start_daemon(Daemon::Zebra);
        self.running.extend(rest);
        result?;
        let clients: Vec<&str> = self
            .running
            .iter()
            .filter_map(|r| match r.daemon {
                Daemon::Mgmtd | Daemon::Zebra => None,
                Daemon::Staticd => Some("static"),
                Daemon::Ospfd => Some("ospf"),
                Daemon::Ldpd => Some("ldp"),
                Daemon::Bgpd => Some("bgp"),
                Daemon::Isisd => Some("isis"),
            })
            .collect();
        let deadline = started + Duration::from_secs(20);
        loop {
            let summary = self.vtysh(&["show zebra client summary"])?;
            let connected: Vec<&str> = summary.lines().filter_map(|l| l.split_whitespace().next()).collect();
            if clients.iter().all(|c| connected.contains(c)) {
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "after restarting zebra of {}, not all of {clients:?} reconnected within 20 s: {summary}",
                    self.options.hostname
                );
            }
            check_interrupt()?;
            std::thread::sleep(Duration::from_millis(200));
        }
        if self.pid(Daemon::Ospfd).is_some() {
            self.vtysh(&["clear ip ospf process"])?;
        }
        Ok(())
    }
}

impl FrrRouter {
    /// The lines of the daemons' logs that report a config line they refused ("No such
    /// command", "Config Failed"): FRR logs them and runs on without the line.
    pub fn config_errors(&self) -> Vec<String> {
        self.running
            .iter()
            .filter_map(|r| fs::read_to_string(self.log_path(r.daemon)).ok())
            .flat_map(|log| {
                log.lines()
                    .filter(|l| l.contains("No such command") || l.contains("Config Failed"))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Fails if a daemon has exited, quoting its log. (It stays unreaped, as a zombie,
    /// until the router is stopped, so this takes `&self`.)
    pub fn check_running(&self) -> anyhow::Result<()> {
        for r in &self.running {
            if !process_running(r.child.id()) {
                let log = self.log_path(r.daemon);
                bail!(
                    "{} of {} exited; {}: {}",
                    r.daemon.name(),
                    self.options.hostname,
                    log.display(),
                    Topology::log_tail(&log, 10)
                );
            }
        }
        Ok(())
    }
}

impl Drop for FrrRouter {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!("stopping FRR of {}: {e:#}", self.options.hostname);
        }
    }
}

/// Whether process `pid` exists and is not a zombie.
pub fn process_running(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat_fields(&stat).is_some_and(|(state, _)| state != 'Z'),
        Err(_) => false,
    }
}

/// (state, process group) from a `/proc/PID/stat` line.
fn stat_fields(stat: &str) -> Option<(char, u32)> {
    // "pid (comm) state ppid pgrp ...": comm may contain spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let _ppid = f.next()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// The live processes whose process group is one of `groups`.
fn group_members(groups: &[u32]) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| stat_fields(&s))
                .is_some_and(|(state, pgrp)| state != 'Z' && groups.contains(&pgrp))
        })
        .collect()
}

/// Stops the daemon `child` and its process group (SIGTERM, SIGKILL after `grace`);
/// then waits (briefly) for the rest of its group (ldpd's helpers exit when their
/// parent does).
fn stop_group(child: &mut Supervised, grace: Duration) -> anyhow::Result<()> {
    child.stop(grace)?;
    let group = [child.id()];
    let deadline = Instant::now() + Duration::from_secs(2);
    while !group_members(&group).is_empty() {
        if Instant::now() >= deadline {
            bail!(
                "processes {:?} of group {} still run after its leader exited",
                group_members(&group),
                group[0]
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Removes the per-process directories (`/var/tmp/frr/<daemon>.<pid>`, for crash logs)
/// of the stopped processes `pids`.
///
/// Every FRR daemon creates one at start and removes it at exit, but running as root
/// it has dropped the capability it needs to write into Debian's `/var/tmp/frr`
/// (owned by frr, mode 0700), so the directory stays ("failed to rmdir ...: Permission
/// denied"). Only empty directories are removed: one holding a crash log is kept.
fn remove_tmp_dirs(root: Option<&Path>, daemon: Daemon, pids: &[u32]) {
    let tmp = root.unwrap_or(Path::new("/")).join(FRR_TMP_DIR.trim_start_matches('/'));
    for pid in pids {
        let _ = fs::remove_dir(tmp.join(format!("{}.{pid}", daemon.name())));
    }
}

/// Adds `id`/32 to `lo` in `ns` (unless it is there) and sets `lo` up.
fn add_loopback(ns: &str, id: Ipv4Addr) -> anyhow::Result<()> {
    let prefix = IpPrefix::new(IpAddr::V4(id), 32)?;
    nl::session(ns, |h| async move {
        nl::set_up(&h, "lo", true).await?;
        if !nl::addresses(&h, "lo").await?.contains(&prefix) {
            nl::add_address(&h, "lo", prefix).await?;
        }
        Ok(())
    })
    .with_context(|| format!("adding router id {id} to lo in namespace {ns}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_stat() {
        assert_eq!(stat_fields("42 (ld pd) (x)) S 1 42 42 0"), Some(('S', 42)));
        assert!(process_running(std::process::id()));
    }
}
