//! `vmpls-guest`: small QEMU guests for tests.
//!
//! - [`GuestImage::build`] builds, once per cache directory ([`GuestCache`]), a guest from
//!   Debian's packages: the kernel of `linux-image-amd64` unpacked from its package, and
//!   an initramfs with static busybox, the modules for virtio-net, veth, dummy and the
//!   kernel's MPLS (`mpls_router`, `mpls_iptunnel`), and the host's `ip`, `iperf3` and
//!   `ethtool` with their libraries. See [`image`] for the steps and the cache key.
//! - [`Guest::boot`] starts QEMU with that kernel, a shell script to run, and NICs on
//!   TAP devices (`-netdev tap,...,vhost=off`) or vhost-user sockets, optionally inside a
//!   network namespace the caller created. The script's results come back on the guest's
//!   second serial port (`ttyS1`), a channel free of kernel messages;
//!   [`Guest::wait_for`] waits for a line there. QEMU is killed when the [`Guest`] drops.
//!
//! Guests run under TCG (`-accel tcg,thread=multi -cpu max`): this project's machines
//! have a KVM that cannot boot stock kernels (`../shared/research/qemu-guests.md`). With
//! [`Accel::Auto`], KVM is tried once per cache directory and host kernel, and used only
//! if a guest boots with it within a few seconds; the verdict is remembered in the cache.
//!
//! Inside the guest, the script runs as root after the modules are loaded and `lo` is up,
//! with these shell functions: `result TEXT` (a line on the result channel), `fail TEXT`
//! (report `VMPLS-GUEST-FAIL TEXT` and stop), `retry SECONDS CMD...` (until CMD
//! succeeds). NICs are `eth0`, `eth1`, ... in the order given. When the script ends, the
//! guest reports `VMPLS-GUEST-DONE rc=N` and powers off.
//!
//! Host packages it needs (Debian): `qemu-system-x86`, `busybox-static`, `kmod`,
//! `iproute2`, `iperf3`, `ethtool`, `xz-utils` (to unpack the kernel for a fast PVH
//! boot), `apt` and `dpkg` (for the kernel package, after `apt-get update`). No `cpio`:
//! the initramfs is written by [`cpio`]. The cache is `target/guest-cache/` or
//! `$VMPLS_GUEST_CACHE`; `$VMPLS_GUEST_ACCEL` (`tcg`, `kvm`, `auto`) picks the
//! accelerator and `$VMPLS_GUEST_KEEP_RUNS` keeps each boot's directory (console and
//! result logs) for debugging.

pub mod cpio;
pub mod image;
mod qemu;

use std::path::PathBuf;

pub use image::{ExtraFile, GuestCache, GuestImage, ImageSpec};
pub use qemu::{Accel, BOOTED_MARKER, DONE_MARKER, FAIL_MARKER, Guest, GuestConfig, Nic, kvm_usable};

/// Results of this crate.
pub type Result<T> = std::result::Result<T, GuestError>;

/// What went wrong building or running a guest.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// A program the harness runs is not installed.
    #[error("{tool} not found: install the Debian package {package}")]
    MissingTool {
        /// The program.
        tool: String,
        /// The package that provides it.
        package: &'static str,
    },
    /// `ldd` could not find a library of a program to copy into the guest.
    #[error("{program:?} needs {library}, which ldd cannot find")]
    MissingLibrary {
        /// The program.
        program: PathBuf,
        /// The library.
        library: String,
    },
    /// The kernel package could not be determined or downloaded.
    #[error(
        "cannot find the guest kernel package: `apt-cache depends linux-image-amd64` names \
         none (run `apt-get update`), or set VMPLS_GUEST_KERNEL_PACKAGE"
    )]
    NoKernelPackage,
    /// The kernel package does not look like a Debian kernel image.
    #[error("{deb:?} is not a usable kernel package: {reason}")]
    BadKernelPackage {
        /// The package file.
        deb: PathBuf,
        /// What is missing.
        reason: String,
    },
    /// A command failed.
    #[error("{command} failed ({status}): {stderr}")]
    CommandFailed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// Its standard error.
        stderr: String,
    },
    /// A file or process operation failed.
    #[error("{what}")]
    Io {
        /// What we were doing.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The configuration cannot be booted.
    #[error("invalid guest configuration: {0}")]
    Config(String),
    /// A TAP device QEMU should have created did not appear.
    #[error("QEMU did not create TAP {ifname:?} within {waited_ms} ms; console:\n{console}")]
    TapMissing {
        /// The TAP's name.
        ifname: String,
        /// How long we waited.
        waited_ms: u128,
        /// The end of the guest's console output.
        console: String,
    },
    /// The marker did not appear in time.
    #[error("{0}")]
    Timeout(Box<WaitFailure>),
    /// QEMU exited, or the script ended or failed, before the marker appeared.
    #[error("{0}")]
    Exited(Box<WaitFailure>),
}

/// Why [`Guest::wait_for`] gave up, with everything the guest had said by then.
#[derive(Debug, Clone)]
pub struct WaitFailure {
    /// The guest's name.
    pub guest: String,
    /// What we waited for.
    pub marker: String,
    /// How long we waited.
    pub waited: std::time::Duration,
    /// QEMU's exit status, or why we stopped waiting while it runs.
    pub status: Option<String>,
    /// The result channel (`ttyS1`).
    pub results: String,
    /// The end of the console output (`ttyS0`).
    pub console: String,
    /// QEMU's standard error.
    pub stderr: String,
}

impl std::fmt::Display for WaitFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.status {
            Some(status) => write!(
                f,
                "guest {}: {status} before {:?} appeared on the result channel",
                self.guest, self.marker
            )?,
            None => write!(
                f,
                "guest {}: {:?} did not appear on the result channel within {:?}",
                self.guest, self.marker, self.waited
            )?,
        }
        write!(f, "\nresults:\n{}\nconsole (end):\n{}", self.results, self.console)?;
        if !self.stderr.trim().is_empty() {
            write!(f, "\nQEMU stderr:\n{}", self.stderr.trim())?;
        }
        Ok(())
    }
}

impl GuestError {
    pub(crate) fn io(what: String, source: std::io::Error) -> GuestError {
        GuestError::Io { what, source }
    }
}
