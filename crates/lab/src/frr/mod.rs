//! FRRouting daemons inside the lab's network namespaces: the control plane for vmpls in
//! FRR mode.
//!
//! In FRR mode vmpls forwards and FRR decides: zebra (Debian's unmodified binary, with
//! our `vmpls_zebra.so` module when it is built) hands routes and labels to vmpls over
//! FPM (`-M dplane_fpm_nl`, zebra connecting to `127.0.0.1:2620` inside the router's
//! namespace), while ospfd, ldpd and staticd compute them. This module runs one such
//! FRR per namespace, several side by side on one machine:
//!
//! - [`ensure_frr_installed`] installs Debian's `frr` package if needed;
//! - [`FrrOptions`] says what one router runs (router id, OSPF and LDP interfaces,
//!   timers, extra config); [`FrrOptions::seed`] gives the seed lab's pe1, p and pe2;
//! - [`FrrRouter::start`] writes the config files into a directory of its own and starts
//!   zebra, staticd, ospfd and ldpd inside the namespace; dropping it stops them;
//! - queries go through `vtysh` against that router's sockets ([`FrrRouter::vtysh`],
//!   [`FrrRouter::mpls_table`], [`FrrRouter::wait_converged`], ...).
//!
//! # How instances are kept apart
//!
//! Nothing of an instance lives in `/etc/frr` or `/var/run/frr`: every daemon gets its
//! config file (`-f`), pid file (`-i`), vty socket directory (`--vty_socket`), zebra
//! socket (`-z`, the same for all daemons of one router) and, for ldpd, control socket
//! directory (`--ctl_socket`) in the router's directory, no vty TCP port (`-P 0`) and a
//! log file there (`log file` in its config). The daemons run as root with the group
//! `frrvty` (`-u root -g frrvty`): Debian's FRR is built with `--enable-vty-group=frrvty`
//! and every daemon exits at start ("user(root) is not part of vty group") unless the
//! user it runs as is in that group, and `-g` puts it there without editing
//! `/etc/group`. `vtysh` is pointed at the same directory (`--vty_socket`,
//! `--config_dir`) so it neither reads `/etc/frr/vtysh.conf` nor talks to another
//! router's daemons.
//!
//! The daemons run in the foreground (no `-d`) as our children, each in its own process
//! group (ldpd's two helper processes share its group), with `PR_SET_PDEATHSIG`, so a
//! crashed lab does not leave them behind. They are stopped group by group; nothing is
//! ever killed by name.
//!
//! # What to expect without the zebra module
//!
//! zebra turns MPLS off when the kernel has none (`/proc/sys/net/mpls` missing, as on
//! the machines here): LDP sessions come up and bindings are exchanged, but
//! `show mpls table` stays empty and labelled static routes are refused. The module
//! (`scripts/build-zebra-module`, see `../shared/research/frr.md`) turns MPLS on and
//! lets labelled routes and LSPs reach FPM. [`FrrRouter::wait_converged`] only expects
//! LSPs when the module is loaded.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use crate::topology::Topology;
use crate::{IpPrefix, check_interrupt, netns, nl};

mod bgp;
mod config;
mod daemons;
mod vtysh;

pub use bgp::{BgpFamily, BgpNeighbor, BgpOptions, BgpPeer, BgpVrf};
pub use config::{Daemon, FrrOptions, IsisInterface, OspfInterface, Timers};
pub use daemons::{FrrRouter, process_running};
pub use vtysh::{
    Convergence, IpRoute, LdpBinding, Lsp, MplsNexthop, RouteNexthop, parse_ip_routes_json,
    parse_ldp_operational, parse_mpls_table, parse_ospf_full,
};

/// Where Debian installs the FRR daemons.
pub const FRR_SBIN: &str = "/usr/lib/frr";

/// The default FPM address zebra connects to (and vmpls listens on) inside a router's
/// namespace.
pub const DEFAULT_FPM: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 2620);

/// FRR's run-state directory, where mgmtd makes one per pathspace (`-N`).
const FRR_RUN_DIR: &str = "/run/frr";

/// Where every FRR process keeps a directory of its own (`<daemon>.<pid>`).
const FRR_TMP_DIR: &str = "/var/tmp/frr";

/// The group the daemons run with: Debian's FRR requires its user to be in `frrvty`.
const VTY_GROUP: &str = "frrvty";

/// How long one `vtysh` call may take.
const VTYSH_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a daemon may take to create its socket at start.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a daemon gets to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// Installs Debian's `frr` package unless `/usr/lib/frr/zebra` exists, and makes sure
/// the system-wide FRR service does not run.
///
/// The lab starts its own daemons per namespace with their own files; a system-wide
/// FRR (which the package's post-install script may start) would read `/etc/frr`, own
/// the default sockets and program the root namespace, so it is stopped and disabled.
/// That is only done when systemd is the init (on machines without it nothing starts
/// the service). Progress goes to stderr, as it can take a minute.
pub fn ensure_frr_installed() -> anyhow::Result<()> {
    crate::require_root()?;
    if !Path::new(FRR_SBIN).join("zebra").exists() {
        eprintln!("installing FRRouting (apt-get install frr)...");
        for args in [&["update", "-q"][..], &["install", "-y", "-q", "--no-install-recommends", "frr"][..]] {
            let out = Command::new("apt-get")
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .stdin(Stdio::null())
                .output()
                .context("running apt-get (is this a Debian machine?)")?;
            if !out.status.success() {
                bail!(
                    "apt-get {} failed ({}): {}",
                    args.join(" "),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        if !Path::new(FRR_SBIN).join("zebra").exists() {
            bail!("apt-get installed frr, but {FRR_SBIN}/zebra is still missing");
        }
        eprintln!("installed FRRouting");
    }
    if Path::new("/run/systemd/system").exists() {
        // Ignore failures: the unit may not exist (FRR from elsewhere) or be stopped.
        let _ = Command::new("systemctl")
            .args(["disable", "--now", "frr.service"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    Ok(())
}
