//! `vmpls-lab`: network labs on one Linux machine.
//!
//! This crate builds topologies of network namespaces joined by veth links (through
//! netlink, with `rtnetlink`), starts routers inside them, and measures them with a
//! built-in, content-checked TCP flow and a native ping. It is the library behind
//! `vmpls lab seed` and behind the project's integration tests.
//!
//! - [`netns`]: named network namespaces (`/run/netns/NAME`, as `ip netns add`
//!   makes them), running code and processes inside one.
//! - [`topology`]: the [`Topology`] builder: hosts, veth links,
//!   kernel addresses, routes and sysctls, child processes; everything is removed on
//!   drop, even after a panic.
//! - [`traffic`]: a TCP sender and receiver that check every byte of a seeded
//!   pseudo-random stream and report throughput and retransmits.
//! - [`udp`]: a UDP flow at a fixed rate with sequence numbers: sent, received, lost,
//!   reordered, duplicated, corrupted.
//! - [`ping`]: ICMP and ICMPv6 echo with raw sockets, with don't-fragment and the
//!   ICMP errors that come back.
//! - [`process`]: external programs in a namespace, with timeouts or in the
//!   background, and [`process::Supervised`], the one child type that stops a process
//!   (SIGTERM, grace, SIGKILL) for the topology, FRR and the tools.
//! - [`capture`]: packet captures with `dumpcap`, dissected with `tshark`.
//! - [`inject`]: hand-made Ethernet frames written onto an interface.
//! - [`frr`]: FRRouting daemons (zebra, staticd, ospfd, ldpd) inside a namespace, as
//!   the control plane of vmpls in FRR mode, and queries through `vtysh`.
//! - [`stats`]: the counters a `vmpls run --stats-file` router writes.
//! - [`routers`]: [`routers::RouterSet`], the vmpls routers of a lab: started with
//!   their logs, waited for, checked, stopped.
//! - [`report`]: the modes table (Gbit/s, retransmits, ratio) and its JSON, shared by
//!   every lab.
//! - [`vpn_lab`]: the BGP/MPLS VPN lab: red and blue customers with overlapping
//!   addresses and a common-services VRF over the FRR seed core, VRFs as network
//!   namespaces in a private `/run/netns` per PE.
//! - [`l2vpn_lab`]: the L2VPN lab: a VPWS and a three-site VPLS signalled by FRR's
//!   ldpd over the FRR seed core with a third PE.
//! - [`seed`]: the seed lab, ce1 -- pe1 -- p -- pe2 -- ce2, measured in several modes
//!   (kernel IP routing, vmpls MPLS) in one run.
//!
//! The public API is synchronous; `tokio` is used internally for netlink only.
//! Everything here needs root (`CAP_NET_ADMIN` and `CAP_SYS_ADMIN`).
//!
//! Long-running loops (waiting for ping replies, TCP flows) check a process-wide
//! interrupt flag: call [`install_interrupt_handler`] once at start so that Ctrl-C or
//! SIGTERM makes them return an [`Interrupted`] error, and the topology's `Drop`
//! cleans up.

pub mod capture;
pub mod frr;
pub mod frr_lab;
pub mod hosts;
pub mod inject;
pub mod l2vpn_lab;
pub mod netns;
mod nl;
pub mod ping;
pub mod prefix;
pub mod process;
pub mod report;
pub mod routers;
pub mod seed;
pub mod seed_config;
pub mod stats;
pub mod topology;
pub mod traffic;
pub mod udp;
pub mod vpn_lab;

use std::sync::atomic::{AtomicBool, Ordering};

pub use prefix::IpPrefix;
pub use seed::{Mode, ModeKind, ModeResult, SeedOptions, SeedParams, SeedReport, run_seed};
pub use topology::Topology;

/// The message of the error that every lab entry point returns when not run as root.
pub const NEEDS_ROOT: &str = "vmpls lab needs root: it creates network namespaces and veth links, \
                              and the routers open AF_PACKET sockets (run it with sudo)";

/// A new, empty work directory `/tmp/PREFIX-PID-N` for a lab's configs and logs.
pub(crate) fn temp_work_dir(prefix: &str) -> anyhow::Result<std::path::PathBuf> {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Fails with [`NEEDS_ROOT`] unless the effective user is root.
pub fn require_root() -> anyhow::Result<()> {
    if !vmpls_sys::process::is_root() {
        anyhow::bail!(NEEDS_ROOT);
    }
    Ok(())
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs a handler for SIGINT and SIGTERM that sets the process-wide interrupt flag
/// (see [`interrupted`]). Long loops in this crate check the flag and return an
/// [`Interrupted`] error, so the caller unwinds normally and drops its
/// [`Topology`], which removes the namespaces and stops the routers.
pub fn install_interrupt_handler() -> anyhow::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // The handler only does an atomic store, which is async-signal-safe.
        vmpls_sys::signal::set_handler(signal, on_signal, true)?;
    }
    Ok(())
}

/// Whether SIGINT or SIGTERM arrived since [`install_interrupt_handler`] (or since
/// [`set_interrupted`] was called with `true`).
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Sets or clears the interrupt flag by hand (for embedding and tests).
pub fn set_interrupted(value: bool) {
    INTERRUPTED.store(value, Ordering::SeqCst);
}

/// The error long-running operations return when the interrupt flag is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// Whether `e` (or any error in its chain of causes) is [`Interrupted`].
pub fn is_interrupted(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<Interrupted>())
}

/// Returns `Err(Interrupted)` if the interrupt flag is set.
pub(crate) fn check_interrupt() -> anyhow::Result<()> {
    if interrupted() {
        return Err(Interrupted.into());
    }
    Ok(())
}
