//! The calling process and others.

use std::io;

/// Whether the process runs as root (effective user 0).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Sends `signal` (`libc::SIGTERM`, ...) to process `pid`.
pub fn kill(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
    let sig = rustix::process::Signal::from_named_raw(signal)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok(rustix::process::kill_process(pid, sig)?)
}
