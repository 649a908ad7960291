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
    create_at(&path(name))
}

/// Creates a network namespace kept alive by a mount on the file `target` (which must
/// not exist; its directory must), like [`create`] but anywhere: a router's private
/// directory of VRF namespaces, for one.
pub fn create_at(target: &Path) -> anyhow::Result<()> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(target)
        .with_context(|| format!("creating {} (does the namespace exist already?)", target.display()))?;
    let target_c = target.to_path_buf();
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
        Ok(r) => r.with_context(|| format!("creating network namespace {}", target.display())),
        Err(_) => Err(anyhow::anyhow!("the namespace-creating thread panicked")),
    };
    if result.is_err() {
        let _ = std::fs::remove_file(target);
    }
    result
}

/// Deletes the network namespace `name` (like `ip netns del NAME`).
///
/// The namespace itself, with its interfaces (veth peers included), goes away when no
/// process, thread or file descriptor refers to it any more.
pub fn delete(name: &str) -> anyhow::Result<()> {
    validate_name(name)?;
    delete_at(&path(name))
}

/// Deletes the network namespace mounted on `target` ([`create_at`]).
pub fn delete_at(target: &Path) -> anyhow::Result<()> {
    if let Err(e) = sys::unmount_detach(target) {
        // EINVAL: not a mount point (a half-created namespace); the file still goes.
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e).with_context(|| format!("unmounting {}", target.display()));
        }
    }
    std::fs::remove_file(target).with_context(|| format!("removing {}", target.display()))
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

/// A router's private `/run/netns`: a shared tmpfs at a directory of the lab's, holding
/// the router's VRF namespaces only (`zebra -n` takes every namespace in `/run/netns` as
/// a VRF, so routers on one machine must not see each other's). Processes started with
/// [`NetnsDir::private_for`] see it as their `/run/netns`; the lab reaches the VRF
/// namespaces by path ([`NetnsDir::command_in`]). Dropping it deletes the namespaces and
/// unmounts the tmpfs.
#[derive(Debug)]
pub struct NetnsDir {
    dir: PathBuf,
    names: Vec<String>,
}

impl NetnsDir {
    /// Creates `dir` and mounts the tmpfs on it.
    pub fn create(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        sys::mount_shared_tmpfs(dir).with_context(|| format!("mounting a tmpfs on {}", dir.display()))?;
        Ok(Self { dir: dir.to_path_buf(), names: Vec::new() })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The namespace file of `name`.
    pub fn ns_path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The namespaces in it, in the order added.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Creates the network namespace `name` in it.
    pub fn add(&mut self, name: &str) -> anyhow::Result<()> {
        validate_name(name)?;
        create_at(&self.ns_path(name))?;
        self.names.push(name.to_string());
        Ok(())
    }

    /// Deletes the network namespace `name` (its interfaces go when nothing uses it).
    pub fn remove(&mut self, name: &str) -> anyhow::Result<()> {
        validate_name(name)?;
        self.names.retain(|n| n != name);
        delete_at(&self.ns_path(name))
    }

    /// Makes `cmd` see this directory as `/run/netns` (in a mount namespace of its own).
    pub fn private_for(&self, cmd: &mut Command) -> anyhow::Result<()> {
        sys::command_with_netns_dir(cmd, &self.dir)
            .with_context(|| format!("giving a process {} as /run/netns", self.dir.display()))
    }

    /// Makes `cmd` run inside the namespace `name` of this directory.
    pub fn command_in(&self, name: &str, cmd: &mut Command) -> anyhow::Result<()> {
        let p = self.ns_path(name);
        let ns = File::open(&p).with_context(|| format!("opening network namespace {}", p.display()))?;
        sys::command_in(cmd, ns);
        Ok(())
    }

    /// Deletes the namespaces, unmounts the tmpfs and removes the directory; the first
    /// error after trying everything. Safe to call twice.
    pub fn cleanup(&mut self) -> anyhow::Result<()> {
        let mut first = None;
        for name in std::mem::take(&mut self.names) {
            if let Err(e) = delete_at(&self.ns_path(&name)) {
                first.get_or_insert(e);
            }
        }
        if self.dir.exists() {
            if let Err(e) = sys::unmount_detach(&self.dir)
                && e.raw_os_error() != Some(libc::EINVAL)
            {
                first.get_or_insert(
                    anyhow::Error::from(e).context(format!("unmounting {}", self.dir.display())),
                );
            }
            if let Err(e) = std::fs::remove_dir(&self.dir) {
                first.get_or_insert(
                    anyhow::Error::from(e).context(format!("removing {}", self.dir.display())),
                );
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for NetnsDir {
    fn drop(&mut self) {
        if let Err(e) = self.cleanup() {
            tracing::warn!("removing the namespaces in {}: {e:#}", self.dir.display());
        }
    }
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

    /// A process given a private `/run/netns` sees only its namespaces there, and the
    /// host's `/run/netns` neither shows them nor gets the process's mount.
    #[test]
    fn a_private_netns_dir_shows_only_its_namespaces() {
        if !vmpls_sys::process::is_root() {
            return;
        }
        prepare_netns_dir().unwrap();
        let dir = std::env::temp_dir().join(format!("vmpls-netns-dir-test-{}", std::process::id()));
        let mut d = NetnsDir::create(&dir).unwrap();
        d.add("red").unwrap();
        let mut ls = Command::new("ls");
        ls.arg(NETNS_DIR);
        d.private_for(&mut ls).unwrap();
        let out = ls.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "red\n");
        // The host's /run/netns is still its own file system, not the private one.
        let dev = |p: &Path| std::os::unix::fs::MetadataExt::dev(&std::fs::metadata(p).unwrap());
        assert_ne!(dev(Path::new(NETNS_DIR)), dev(&dir));
        let mut ip = Command::new("ip");
        ip.args(["-br", "link", "show"]);
        d.command_in("red", &mut ip).unwrap();
        let out = ip.output().unwrap();
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with("lo "),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        d.cleanup().unwrap();
        assert!(!dir.exists());
    }
}
