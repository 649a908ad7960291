//! The vmpls routers of a lab: [`RouterSet`] starts `vmpls run --config FILE` in the
//! routers' namespaces with their output in a log file, waits until they answer, checks
//! that they still run (quoting their logs when one died) and stops them.
//!
//! The routers are children of the lab's [`Topology`] ([`Topology::spawn`]), so they are
//! stopped when it is dropped, also after a panic; the waits here check the interrupt
//! flag ([`crate::install_interrupt_handler`]), so Ctrl-C or SIGTERM unwinds the lab
//! and the same drop cleans up.

use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::check_interrupt;
use crate::topology::Topology;

/// How a router's log file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogMode {
    /// A new, empty log each start.
    Truncate,
    /// Appended to, so the log keeps every start of a run (restarts in one lab).
    Append,
}

#[derive(Debug)]
struct Router {
    name: String,
    label: String,
    pid: u32,
    log: PathBuf,
    /// The file whose existence says it answers (its control socket).
    socket: Option<PathBuf>,
}

/// The vmpls routers a lab runs now. See the [module documentation](self).
#[derive(Debug, Default)]
pub struct RouterSet {
    routers: Vec<Router>,
}

impl RouterSet {
    /// No routers yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `binary run --config CONFIG`, the command that starts a router (add more
    /// arguments before [`RouterSet::start`]).
    pub fn command(binary: &Path, config: &Path) -> Command {
        let mut cmd = Command::new(binary);
        cmd.arg("run").arg("--config").arg(config);
        cmd
    }

    /// Starts `cmd` as router `name` in host `name` of `topo`, its stdout and stderr
    /// in `log`. `socket`, if given, is the control socket [`RouterSet::wait_answering`]
    /// waits for: a stale one is removed first. Returns the pid.
    pub fn start(
        &mut self,
        topo: &mut Topology,
        name: &str,
        mut cmd: Command,
        log: PathBuf,
        mode: LogMode,
        socket: Option<PathBuf>,
    ) -> anyhow::Result<u32> {
        let out = match mode {
            LogMode::Truncate => File::create(&log),
            LogMode::Append => File::options().create(true).append(true).open(&log),
        }
        .with_context(|| format!("opening {}", log.display()))?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        if let Some(socket) = &socket {
            let _ = std::fs::remove_file(socket);
        }
        let label = format!("vmpls {name}");
        let pid = topo.spawn(name, &label, cmd, Some(log.clone()))?;
        self.routers.push(Router { name: name.to_string(), label, pid, log, socket });
        Ok(pid)
    }

    /// Whether no router runs.
    pub fn is_empty(&self) -> bool {
        self.routers.is_empty()
    }

    /// The routers' names, in start order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.routers.iter().map(|r| r.name.as_str())
    }

    /// The pid of router `name`.
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.routers.iter().find(|r| r.name == name).map(|r| r.pid)
    }

    /// The control socket router `name` was started with.
    pub fn socket(&self, name: &str) -> Option<&Path> {
        self.routers.iter().find(|r| r.name == name).and_then(|r| r.socket.as_deref())
    }

    /// Runs the vmpls CLI `binary` against router `name`'s control socket with `-j` and
    /// returns its JSON (`null` for the commands that print nothing).
    pub fn cli_json(&self, binary: &Path, name: &str, args: &[&str]) -> anyhow::Result<serde_json::Value> {
        let socket = self.socket(name).ok_or_else(|| anyhow::anyhow!("vmpls does not run on {name:?}"))?;
        let mut cmd = Command::new(binary);
        cmd.arg("--socket").arg(socket).arg("-j").args(args);
        let out = crate::process::run_here_timeout(cmd, Duration::from_secs(10))?;
        if !out.status.success() {
            bail!(
                "vmpls -j {args:?} on {name} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        if out.stdout.iter().all(u8::is_ascii_whitespace) {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_slice(&out.stdout)
            .with_context(|| format!("vmpls -j {args:?} on {name}: {}", String::from_utf8_lossy(&out.stdout)))
    }

    /// The last `lines` lines of every router's log, for error messages.
    pub fn logs(&self, lines: usize) -> String {
        let mut s = String::new();
        for r in &self.routers {
            let _ =
                writeln!(s, "--- {} ({}):\n{}", r.label, r.log.display(), Topology::log_tail(&r.log, lines));
        }
        s
    }

    /// Fails if a child of `topo` (a router, or another process the lab started) has
    /// exited, with the routers' log tails.
    pub fn check_running(&self, topo: &mut Topology) -> anyhow::Result<()> {
        if let Some(dead) = topo.exited_child() {
            bail!("{} exited ({})\n{}", dead.label, dead.status, self.logs(20));
        }
        Ok(())
    }

    /// Waits (up to `timeout`) until every router's control socket exists, checking that
    /// they still run and the interrupt flag.
    pub fn wait_answering(&self, topo: &mut Topology, timeout: Duration) -> anyhow::Result<()> {
        let sockets: Vec<&Path> = self.routers.iter().filter_map(|r| r.socket.as_deref()).collect();
        self.wait_for_files(topo, &sockets, "the routers' control sockets", timeout)
    }

    /// Waits (up to `timeout`) until every file of `paths` (sockets the routers create,
    /// named `what` in the error) exists, checking that the routers still run and the
    /// interrupt flag.
    pub fn wait_for_files(
        &self,
        topo: &mut Topology,
        paths: &[&Path],
        what: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while let Some(missing) = paths.iter().find(|p| !p.exists()) {
            check_interrupt()?;
            self.check_running(topo)?;
            if Instant::now() >= deadline {
                bail!(
                    "{what} did not appear within {timeout:?} ({} is missing)\n{}",
                    missing.display(),
                    self.logs(15)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Stops every router (SIGTERM, SIGKILL after `grace`) and returns each one's exit
    /// status in start order; the first error, if any, after trying them all.
    pub fn stop(
        &mut self,
        topo: &mut Topology,
        grace: Duration,
    ) -> anyhow::Result<Vec<(String, ExitStatus)>> {
        let mut statuses = Vec::new();
        let mut first = None;
        for r in std::mem::take(&mut self.routers) {
            match topo.stop(r.pid, grace) {
                Ok(status) => statuses.push((r.name, status)),
                Err(e) => {
                    first.get_or_insert(e.context(format!("router {}", r.name)));
                }
            }
        }
        first.map_or(Ok(statuses), Err)
    }

    /// Forgets the routers (after the topology stopped them in its cleanup).
    pub fn clear(&mut self) {
        self.routers.clear();
    }
}
