//! Network namespaces: entering one (the calling thread only), creating one, the mounts
//! that keep a named one alive (`/run/netns/NAME`, as `ip netns` does), and starting a
//! process inside one.
//!
//! A thread's network namespace decides which interfaces its sockets, netlink requests and
//! `/proc/sys/net` files see; a socket stays in the namespace it was opened in. So code
//! enters a namespace on a thread of its own ([`run_in`]).

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use rustix::mount::{MountPropagationFlags, UnmountFlags};
use rustix::thread::{LinkNameSpaceType, UnshareFlags};

/// Moves the calling thread into the network namespace `ns` (an open namespace file:
/// `/run/netns/NAME`, `/proc/PID/ns/net`). The thread stays there: use it on threads you
/// own and end afterwards.
pub fn enter(ns: impl AsFd) -> io::Result<()> {
    Ok(rustix::thread::move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network))?)
}

/// Opens the namespace file at `path` and moves the calling thread into it.
pub fn enter_path(path: impl AsRef<Path>) -> io::Result<()> {
    enter(File::open(path)?)
}

/// Moves the calling thread into a new, empty network namespace.
pub fn unshare() -> io::Result<()> {
    // SAFETY: `unshare_unsafe` is unsafe only for CLONE_FILES (descriptors of another
    // table); CLONE_NEWNET only changes this thread's network namespace.
    Ok(unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }?)
}

/// Runs `f` on a fresh thread inside the network namespace `ns` and returns its result;
/// a panic in `f` goes on in the caller. The calling thread's namespace is untouched.
pub fn run_in<R: Send>(ns: &File, f: impl FnOnce() -> R + Send) -> io::Result<R> {
    std::thread::scope(|s| {
        let t = s.spawn(|| -> io::Result<R> {
            enter(ns)?;
            Ok(f())
        });
        t.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Bind-mounts `source` onto `target` (`mount --bind`): how a namespace file is kept alive
/// under a name.
pub fn bind_mount(source: impl AsRef<Path>, target: impl AsRef<Path>) -> io::Result<()> {
    Ok(rustix::mount::mount_bind(source.as_ref(), target.as_ref())?)
}

/// Bind-mounts `source` onto `target` with everything mounted below it (`mount --rbind`).
pub fn bind_mount_recursive(source: impl AsRef<Path>, target: impl AsRef<Path>) -> io::Result<()> {
    Ok(rustix::mount::mount_bind_recursive(source.as_ref(), target.as_ref())?)
}

/// Makes the mount at `target`, and those below it, shared (`mount --make-rshared`);
/// `EINVAL` if `target` is not a mount point.
pub fn make_shared_recursive(target: impl AsRef<Path>) -> io::Result<()> {
    Ok(rustix::mount::mount_change(
        target.as_ref(),
        MountPropagationFlags::SHARED | MountPropagationFlags::REC,
    )?)
}

/// Mounts a new, empty tmpfs on `target` and makes it shared, so that mounts made below
/// it later (namespace files) reach the mount namespaces that copied it.
pub fn mount_shared_tmpfs(target: impl AsRef<Path>) -> io::Result<()> {
    let target = target.as_ref();
    rustix::mount::mount(c"tmpfs", target, c"tmpfs", rustix::mount::MountFlags::empty(), c"mode=0755")?;
    make_shared_recursive(target)
}

/// Detaches the mount at `target` (`umount -l`); `EINVAL` if it is not a mount point.
pub fn unmount_detach(target: impl AsRef<Path>) -> io::Result<()> {
    Ok(rustix::mount::unmount(target.as_ref(), UnmountFlags::DETACH)?)
}

/// Makes `cmd` enter the network namespace `ns` between `fork` and `exec`. `cmd` keeps
/// `ns` open until it is dropped; the file is close-on-exec, so the program does not
/// inherit it.
pub fn command_in(cmd: &mut Command, ns: File) {
    // SAFETY: the closure runs in the child between fork and exec. It only calls setns(2)
    // (a direct syscall, async-signal-safe) on a descriptor opened before the fork and
    // owned by the closure; it allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || enter(&ns));
    }
}

/// The directory named namespaces live in (`ip netns`), which `zebra -n` takes as the
/// list of VRFs.
const RUN_NETNS: &std::ffi::CStr = c"/run/netns";

/// Makes `cmd` run in a mount namespace of its own in which `dir` (with the namespace
/// files mounted in it) is mounted on `/run/netns`: a router's private list of VRF
/// namespaces. The rest of the file system is shared, and receives the host's mounts
/// but sends none back (`/` is made a slave first), so the host's `/run/netns` is
/// untouched. Mounts made below `dir` later reach the process if `dir` is a shared
/// mount ([`mount_shared_tmpfs`]).
pub fn command_with_netns_dir(cmd: &mut Command, dir: &Path) -> io::Result<()> {
    let dir =
        CString::new(dir.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the closure runs in the child between fork and exec. It makes three direct
    // system calls (unshare, two mounts) with C strings built before the fork; it
    // allocates nothing and takes no lock. CLONE_NEWNS only changes the child's mount
    // namespace.
    unsafe {
        cmd.pre_exec(move || {
            rustix::thread::unshare_unsafe(UnshareFlags::NEWNS)?;
            rustix::mount::mount_change(
                c"/",
                MountPropagationFlags::DOWNSTREAM | MountPropagationFlags::REC,
            )?;
            rustix::mount::mount_bind_recursive(dir.as_c_str(), RUN_NETNS)?;
            Ok(())
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_in_a_new_namespace_sees_only_its_loopback() {
        if !crate::process::is_root() {
            return;
        }
        let (ns_ino, lo_only) = std::thread::spawn(|| {
            unshare().unwrap();
            let f = File::open("/proc/thread-self/ns/net").unwrap();
            let ino = std::os::unix::fs::MetadataExt::ino(&f.metadata().unwrap());
            let lo_only = crate::if_nametoindex("lo") == Some(1);
            (ino, (f, lo_only))
        })
        .join()
        .unwrap();
        let (ns, lo_only) = lo_only;
        assert!(lo_only);
        let here = std::fs::metadata("/proc/thread-self/ns/net").unwrap();
        assert_ne!(std::os::unix::fs::MetadataExt::ino(&here), ns_ino);
        let inside = run_in(&ns, || {
            std::os::unix::fs::MetadataExt::ino(&std::fs::metadata("/proc/thread-self/ns/net").unwrap())
        })
        .unwrap();
        assert_eq!(inside, ns_ino);
    }
}
