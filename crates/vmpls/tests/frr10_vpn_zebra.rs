//! The zebra module with network-namespace VRFs under FRRouting 10.3 (Debian trixie's,
//! netlab's FRR) while the host has bookworm's 8.4: `frr/zebra-module/tools/vpn-two-pe.sh`
//! (the checks of `frr_vpn_zebra.rs`: VRF interface and table id, VPN routes with
//! [transport, VPN label] and the VPN label's pop in FPM, FPM replay, a VRF deleted and
//! one created at runtime, zebra killed and restarted, zebra stopped) with every FRR daemon
//! chrooted into a trixie root (`scripts/make-frr-root`, cached under
//! `target/frr-roots/`), mgmtd giving staticd its configuration, and the module built for
//! that FRR (`scripts/build-zebra-module --root`).
//!
//! FRR 10 differs in what this guards: bgpd gives zebra a VRF's VPN label only while the
//! VRF's loopback is up, and zebra handles link messages after the VRF they came from is
//! gone (the module deletes a VRF's interface after zebra closed its sockets there).
//!
//! Needs root (skipped otherwise). The first run makes the root (mmdebstrap, about 40 s)
//! and builds the module in it (about 20 s: deb-src download and compile).

mod frr_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use frr_common::{is_root, run_vpn_two_pe};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs one of the repository's scripts and returns the path it prints last.
fn script_path(args: &[&str]) -> PathBuf {
    let out = Command::new(repo().join(args[0])).args(&args[1..]).current_dir(repo()).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path =
        PathBuf::from(stdout.lines().last().unwrap_or_else(|| panic!("{args:?} printed nothing")).trim());
    assert!(path.exists(), "{args:?} printed {path:?}, which does not exist");
    path
}

#[test]
fn netns_vrfs_on_frr_10_get_a_vrf_interface_table_id_and_vpn_label_pop() {
    if !is_root() {
        eprintln!("skipping frr10_vpn_zebra: needs root (chroot, network namespaces, FRR daemons)");
        return;
    }
    let root = script_path(&["scripts/make-frr-root"]);
    let module = script_path(&["scripts/build-zebra-module", "--root", &root.to_string_lossy()]);
    run_vpn_two_pe(&module, Some(&root));
}
