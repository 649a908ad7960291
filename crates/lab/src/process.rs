//! External programs inside a namespace: run one to completion with a timeout, or keep
//! one running in the background (a capture, an iperf3 server) until it is stopped.
//!
//! Both are bounded: [`run_timeout`] kills a program that runs past its timeout, and a
//! [`Background`] process is stopped (SIGTERM, then SIGKILL) when dropped, so a failing
//! test cannot leave one behind.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::netns;

fn read_all(mut r: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        // A read error ends the capture of this stream; what was read is kept.
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

/// Runs `cmd` inside the network namespace `ns` and returns its output (stdout and
/// stderr captured, stdin empty). If it has not exited after `timeout` it is killed
/// and the result is an error that quotes what it printed so far.
pub fn run_timeout(ns: &str, mut cmd: Command, timeout: Duration) -> anyhow::Result<Output> {
    netns::command_in_netns(ns, &mut cmd)?;
    run_here_timeout(cmd, timeout).with_context(|| format!("in namespace {ns}"))
}

/// Like [`run_timeout`], in the caller's own network namespace (for programs that
/// need none, like `tshark -r FILE`).
pub fn run_here_timeout(cmd: Command, timeout: Duration) -> anyhow::Result<Output> {
    run_until(cmd, timeout, crate::interrupted)
}

/// Runs `cmd` as [`run_here_timeout`] does, and also kills it as soon as `stop` turns
/// true while it runs (a SIGTERM to the lab must not wait for a 30-second flow to end),
/// returning [`Interrupted`](crate::Interrupted). A command started after the stop
/// (cleanup after an interrupt) runs to its end.
fn run_until(mut cmd: Command, timeout: Duration, stop: impl Fn() -> bool) -> anyhow::Result<Output> {
    let stopped_before = stop();
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let program = format!("{:?}", cmd.get_program());
    let mut child = cmd.spawn().with_context(|| format!("starting {program}"))?;
    let stdout = child.stdout.take().map(read_all);
    let stderr = child.stderr.take().map(read_all);
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if !stopped_before && stop() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(crate::Interrupted.into());
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let join = |h: Option<JoinHandle<Vec<u8>>>| h.and_then(|h| h.join().ok()).unwrap_or_default();
    let (stdout, stderr) = (join(stdout), join(stderr));
    match status {
        Some(status) => Ok(Output { status, stdout, stderr }),
        None => bail!(
            "{program} did not finish within {timeout:?} (killed); stdout: {}; stderr: {}",
            String::from_utf8_lossy(&stdout).trim(),
            String::from_utf8_lossy(&stderr).trim()
        ),
    }
}

/// Who a [`Supervised`] child's signals reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalTarget {
    /// The child alone.
    Process,
    /// The process group the child leads (it must have been spawned with
    /// `process_group(0)`), so helpers it forked stop with it.
    Group,
}

/// A child process we own, and the one place that stops one: `signal` (SIGTERM by
/// default), then SIGKILL if it has not exited after a grace period, then reaped.
/// Dropping it stops it the same way (SIGTERM, [`Supervised::DROP_GRACE`]), so a
/// failing lab cannot leave one behind.
///
/// Its pid stays valid for signals as long as this value lives: the child is reaped
/// only by [`Supervised::try_wait`] (which remembers the status) or by a stop.
#[derive(Debug)]
pub struct Supervised {
    label: String,
    child: Child,
    target: SignalTarget,
    exited: Option<ExitStatus>,
    stopped: bool,
}

impl Supervised {
    /// How long a dropped child gets between SIGTERM and SIGKILL.
    pub const DROP_GRACE: Duration = Duration::from_secs(2);

    /// Takes ownership of `child`; `label` names it in errors.
    pub fn new(label: impl Into<String>, child: Child, target: SignalTarget) -> Self {
        Self { label: label.into(), child, target, exited: None, stopped: false }
    }

    /// Spawns `cmd` and supervises it.
    pub fn spawn(label: impl Into<String>, mut cmd: Command, target: SignalTarget) -> anyhow::Result<Self> {
        let label = label.into();
        let child = cmd.spawn().with_context(|| format!("starting {label} ({:?})", cmd.get_program()))?;
        Ok(Self::new(label, child, target))
    }

    /// The name it was given.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The process id (also the process group id with [`SignalTarget::Group`]).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status if it has exited already (and reaps it).
    pub fn try_wait(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait()?;
        }
        Ok(self.exited)
    }

    /// Sends `signal` to it (or its group) unless it has been reaped already.
    pub fn signal(&self, signal: libc::c_int) {
        if self.exited.is_some() {
            return;
        }
        // Our own child, not reaped yet, so the pid (and the group it leads) cannot
        // belong to another process. A failure means it is gone already.
        let _ = match self.target {
            SignalTarget::Process => vmpls_sys::process::kill(self.child.id(), signal),
            SignalTarget::Group => vmpls_sys::process::kill_group(self.child.id(), signal),
        };
    }

    /// Stops it with SIGTERM (see [`Supervised::stop_with`]).
    pub fn stop(&mut self, grace: Duration) -> anyhow::Result<ExitStatus> {
        self.stop_with(libc::SIGTERM, grace)
    }

    /// Sends `signal` (unless it has exited), waits up to `grace`, then SIGKILL; returns
    /// its exit status. Calling it again returns the same status.
    pub fn stop_with(&mut self, signal: libc::c_int, grace: Duration) -> anyhow::Result<ExitStatus> {
        self.stopped = true;
        self.stop_inner(signal, grace).with_context(|| format!("stopping {}", self.label))
    }

    fn stop_inner(&mut self, signal: libc::c_int, grace: Duration) -> anyhow::Result<ExitStatus> {
        if let Some(status) = self.try_wait()? {
            return Ok(status);
        }
        self.signal(signal);
        let deadline = Instant::now() + grace;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.signal(libc::SIGKILL);
        let status = self.child.wait()?;
        self.exited = Some(status);
        Ok(status)
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if !self.stopped
            && let Err(e) = self.stop(Self::DROP_GRACE)
        {
            tracing::warn!("{e:#}");
        }
    }
}

/// A program running in the background inside a namespace. Dropping it stops it.
#[derive(Debug)]
pub struct Background {
    label: String,
    /// `None` once stopped.
    child: Option<Supervised>,
}

impl Background {
    /// Starts `cmd` inside the network namespace `ns` in its own process group. The
    /// caller decides where its output goes (the default is to inherit ours). `label`
    /// names it in errors.
    pub fn spawn(ns: &str, label: &str, mut cmd: Command) -> anyhow::Result<Self> {
        netns::command_in_netns(ns, &mut cmd)?;
        cmd.stdin(Stdio::null()).process_group(0);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {label} ({:?}) in namespace {ns}", cmd.get_program()))?;
        Ok(Self {
            label: label.to_string(),
            child: Some(Supervised::new(label, child, SignalTarget::Process)),
        })
    }

    /// The process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Supervised::id)
    }

    /// Its exit status if it has exited already.
    pub fn try_wait(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        match &mut self.child {
            Some(c) => c.try_wait(),
            None => bail!("{} was stopped already", self.label),
        }
    }

    /// Waits up to `timeout` for it to exit on its own; `None` if it still runs.
    pub fn wait_timeout(&mut self, timeout: Duration) -> anyhow::Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.try_wait()? {
                return Ok(Some(s));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops it: `signal` (e.g. `libc::SIGTERM` or `SIGINT`), then SIGKILL if it has
    /// not exited after `grace`. Returns its exit status.
    pub fn stop(&mut self, signal: libc::c_int, grace: Duration) -> anyhow::Result<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            bail!("{} was stopped already", self.label);
        };
        child.stop_with(signal, grace)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[test]
    fn a_stop_while_running_kills_the_program_at_once() {
        let stop = AtomicBool::new(false);
        let started = Instant::now();
        let mut sleep = Command::new("sleep");
        sleep.arg("20");
        let err = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(200));
                stop.store(true, Ordering::SeqCst);
            });
            run_until(sleep, Duration::from_secs(30), || stop.load(Ordering::SeqCst)).unwrap_err()
        });
        assert!(crate::is_interrupted(&err), "{err:#}");
        assert!(started.elapsed() < Duration::from_secs(10), "waited {:?}", started.elapsed());
    }

    #[test]
    fn a_program_started_after_the_stop_runs_to_its_end() {
        let mut echo = Command::new("echo");
        echo.arg("cleanup");
        let out = run_until(echo, Duration::from_secs(10), || true).unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "cleanup");
    }

    fn shell(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script).process_group(0);
        cmd
    }

    fn process_exists(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()) != Some("Z"))
    }

    #[test]
    fn a_child_that_ignores_sigterm_is_killed_after_the_grace() {
        let mut child =
            Supervised::spawn("stubborn", shell("trap '' TERM; sleep 20"), SignalTarget::Process).unwrap();
        // Let the shell install its trap before the SIGTERM.
        std::thread::sleep(Duration::from_millis(200));
        let started = Instant::now();
        let status = child.stop(Duration::from_millis(300)).unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
        assert!(started.elapsed() < Duration::from_secs(5), "waited {:?}", started.elapsed());
        assert_eq!(child.stop(Duration::ZERO).unwrap(), status, "a second stop returns the same status");
    }

    #[test]
    fn a_group_stop_reaches_the_helpers_the_child_forked() {
        let (mut child, helper) = {
            let mut cmd = shell("sleep 20 & echo $!; wait");
            cmd.stdout(Stdio::piped());
            let mut child = Supervised::spawn("leader", cmd, SignalTarget::Group).unwrap();
            let mut line = String::new();
            let stdout = child.child.stdout.take().unwrap();
            std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
            (child, line.trim().parse::<u32>().unwrap())
        };
        assert!(process_exists(helper));
        child.stop(Duration::from_secs(2)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        while process_exists(helper) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!process_exists(helper), "helper {helper} outlived its group's stop");
    }

    #[test]
    fn dropping_a_supervised_child_stops_it() {
        let child = Supervised::spawn("sleeper", shell("sleep 20"), SignalTarget::Process).unwrap();
        let pid = child.id();
        drop(child);
        assert!(!process_exists(pid), "{pid} still runs after the drop");
    }
}
