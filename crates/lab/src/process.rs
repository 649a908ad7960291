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

/// A program running in the background inside a namespace. Dropping it stops it.
#[derive(Debug)]
pub struct Background {
    label: String,
    child: Option<Child>,
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
        Ok(Self { label: label.to_string(), child: Some(child) })
    }

    /// The process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its exit status if it has exited already.
    pub fn try_wait(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        match &mut self.child {
            Some(c) => Ok(c.try_wait()?),
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
        stop_child(&mut child, signal, grace).with_context(|| format!("stopping {}", self.label))
    }
}

/// Sends `signal` to `child` (unless it has exited), waits up to `grace`, then kills it.
pub(crate) fn stop_child(
    child: &mut Child,
    signal: libc::c_int,
    grace: Duration,
) -> anyhow::Result<ExitStatus> {
    if let Some(status) = child.try_wait()? {
        return Ok(status);
    }
    // Our own child, not reaped (try_wait above said it still runs), so the pid cannot
    // belong to another process.
    let _ = vmpls_sys::process::kill(child.id(), signal);
    let deadline = Instant::now() + grace;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill()?;
    Ok(child.wait()?)
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = stop_child(&mut child, libc::SIGTERM, Duration::from_secs(2));
        }
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
}
