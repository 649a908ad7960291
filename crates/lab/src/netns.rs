//! Named network namespaces.
//!
//! A namespace is kept alive by a bind mount of its `ns/net` file on
//! `/run/netns/NAME`, exactly as `ip netns add NAME` does, so `ip netns exec NAME ...`
//! works for a human debugging a lab. Code enters a namespace on a fresh thread
//! ([`in_netns`], [`spawn_in_netns`]): a thread's network namespace decides which
//! interfaces its sockets, netlink requests and `/proc/sys/net` files see. Processes
//! enter it between `fork` and `exec` ([`command_in_netns`]).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::thread::JoinHandle;

use anyhow::{Context, bail};
use vmpls_sys::netns as sys;

/// Where named namespaces are mounted (the `ip netns` convention).
pub const NETNS_DIR: &str = "/run/netns";

/// The path of the namespace `name`: `/run/netns/NAME`.
pub fn path(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

/// Whether a namespace called `name` is mounted under [`NETNS_DIR`].
pub fn exists(name: &str) -> bool {
    validate_name(name).is_ok() && path(name).exists()
}

fn validate_name(name: &str) -> anyhow::Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        bail!("{name:?} is not a valid namespace name");
    }
    if name.len() > 200 {
        bail!("namespace name {name:?} is too long");
    }
    Ok(())
}

/// Makes sure `/run/netns` exists and is a shared mount point, as `ip netns add` does,
/// so that namespace mounts propagate to other mount namespaces. Done once a process.
fn prepare_netns_dir() -> anyhow::Result<()> {
    static DONE: Mutex<bool> = Mutex::new(false);
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    if *done {
        return Ok(());
    }
    let dir = Path::new(NETNS_DIR);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {NETNS_DIR}"))?;
    if let Err(e) = sys::make_shared_recursive(dir) {
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e).with_context(|| format!("making {NETNS_DIR} a shared mount"));
        }
        // Not a mount point yet: bind it onto itself, then make it shared.
        sys::bind_mount_recursive(dir, dir)
            .with_context(|| format!("bind-mounting {NETNS_DIR} onto itself"))?;
        sys::make_shared_recursive(dir).with_context(|| format!("making {NETNS_DIR} a shared mount"))?;
    }
    *done = true;
    Ok(())
}

/// Creates the network namespace `name` (like `ip netns add NAME`).
///
/// The new namespace has only a `lo` interface, which is down. Fails if a namespace of
/// that name exists already.
pub fn create(name: &str) -> anyhow::Result<()> {
    validate_name(name)?;
    prepare_netns_dir()?;
    let target = path(name);
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(&target)
        .with_context(|| format!("creating {} (does the namespace exist already?)", target.display()))?;
    let target_c = target.clone();
    let result = std::thread::Builder::new()
        .name("netns-create".into())
        .spawn(move || -> io::Result<()> {
            // The thread ends right after, so no other code runs in the new namespace.
            sys::unshare()?;
            sys::bind_mount("/proc/thread-self/ns/net", &target_c)
        })
        .context("spawning a thread")?
        .join();
    let result = match result {
        Ok(r) => r.with_context(|| format!("creating network namespace {name}")),
        Err(_) => Err(anyhow::anyhow!("the namespace-creating thread panicked")),
    };
    if result.is_err() {
        let _ = std::fs::remove_file(&target);
    }
    result
}

/// Deletes the network namespace `name` (like `ip netns del NAME`).
///
/// The namespace itself, with its interfaces (veth peers included), goes away when no
/// process, thread or file descriptor refers to it any more.
pub fn delete(name: &str) -> anyhow::Result<()> {
    validate_name(name)?;
    let target = path(name);
    if let Err(e) = sys::unmount_detach(&target) {
        // EINVAL: not a mount point (a half-created namespace); the file still goes.
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e).with_context(|| format!("unmounting {}", target.display()));
        }
    }
    std::fs::remove_file(&target).with_context(|| format!("removing {}", target.display()))
}

/// Opens the namespace file of `name`, to enter it later with [`enter`].
pub fn open(name: &str) -> anyhow::Result<File> {
    validate_name(name)?;
    let p = path(name);
    File::open(&p).with_context(|| format!("opening network namespace {} (does it exist?)", p.display()))
}

/// Moves the calling thread into the network namespace `ns` (an open namespace file).
///
/// Use it only on threads you own and end afterwards: the thread stays in `ns`.
pub fn enter(ns: &File) -> io::Result<()> {
    sys::enter(ns)
}

/// Runs `f` on a fresh thread inside the network namespace `name` and returns its
/// result. A panic in `f` is propagated to the caller.
pub fn in_netns<R: Send>(name: &str, f: impl FnOnce() -> R + Send) -> anyhow::Result<R> {
    let ns = open(name)?;
    let thread_name = format!("ns-{name}");
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name(thread_name)
            .spawn_scoped(scope, move || -> io::Result<R> {
                enter(&ns)?;
                drop(ns);
                Ok(f())
            })
            .context("spawning a thread")?;
        match handle.join() {
            Ok(r) => r.with_context(|| format!("entering network namespace {name}")),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Starts `f` on a new thread inside the network namespace `name`. The thread's result
/// is an error if it could not enter the namespace.
pub fn spawn_in_netns<R, F>(name: &str, f: F) -> anyhow::Result<JoinHandle<anyhow::Result<R>>>
where
    R: Send + 'static,
    F: FnOnce() -> anyhow::Result<R> + Send + 'static,
{
    let ns = open(name)?;
    let owned = name.to_string();
    std::thread::Builder::new()
        .name(format!("ns-{name}"))
        .spawn(move || {
            enter(&ns).with_context(|| format!("entering network namespace {owned}"))?;
            drop(ns);
            f()
        })
        .context("spawning a thread")
}

/// Makes `cmd` run inside the network namespace `name` when it is spawned.
///
/// The namespace file is opened now (errors show here, not in the child) and kept
/// open by `cmd` until it is dropped; it is close-on-exec, so the program does not
/// inherit it.
pub fn command_in_netns(name: &str, cmd: &mut Command) -> anyhow::Result<()> {
    let ns = open(name)?;
    sys::command_in(cmd, ns);
    Ok(())
}

/// Makes `cmd` a child of the lab: inside the network namespace `name`, in its own
/// process group (a terminal's Ctrl-C reaches only the lab, which stops its children in
/// order), and killed if the thread that spawns it exits (`PR_SET_PDEATHSIG`), so that it
/// cannot outlive a crashed lab.
pub fn lab_child_in_netns(name: &str, cmd: &mut Command) -> anyhow::Result<()> {
    command_in_netns(name, cmd)?;
    cmd.process_group(0);
    vmpls_sys::process::kill_with_parent(cmd);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_names() {
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert!(validate_name(bad).is_err(), "{bad:?} accepted");
            assert!(!exists(bad));
        }
        assert!(validate_name("vl1-0-ce1").is_ok());
    }
}
