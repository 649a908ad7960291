//! The zebra module with network-namespace VRFs (`zebra -n`), against real FRR daemons:
//! `frr/zebra-module/tools/vpn-two-pe.sh` builds two PEs, each with a private mount
//! namespace whose `/run/netns` holds only its VRF `red` (a CE-facing veth moved into
//! it), zebra -n with the module and FPM to a capturing server, staticd, and bgpd with
//! iBGP VPNv4 between the loopbacks over labelled static routes. It checks, on the
//! captured FPM streams and in the kernels:
//!
//! - the VRF interface `red` is up in the PE's namespace and in the VRF's with one
//!   ifindex T, and T is the VRF's table id;
//! - the remote CE subnet arrives in table T with labels [transport, the other PE's VPN
//!   label], the local VPN label (`label vpn export auto` on pe1, a fixed 5002 on pe2)
//!   as an AF_MPLS pop with only `RTA_OIF = T`, the connected CE subnet in table T, no
//!   VRF route in table 254, and the VPN route not in the VRF namespace's kernel;
//! - a restarted FPM server gets the VRF's routes again in table T;
//! - deleting the VRF's namespace deletes its routes (table T) and the VRF interface;
//! - a VRF created at runtime gets its VRF interface; a zebra killed with SIGKILL leaves
//!   it behind, and the next zebra takes it over (made once, not in a loop);
//! - zebra -n with a netns VRF removes its VRF interface and exits on SIGTERM without
//!   the SIGSEGV FRR 8.4 has there.
//!
//! The same script refreshes the fixtures: `vpn-two-pe.sh frr/fixtures`.
//!
//! Needs root (skipped otherwise); installs Debian's frr if missing; the zebra module
//! comes from `VMPLS_ZEBRA_MODULE` or `scripts/build-zebra-module`.

mod frr_common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use frr_common::{is_root, zebra_module};
use vmpls_lab::frr;
use vmpls_lab::process::run_here_timeout;

#[test]
fn netns_vrfs_get_a_vrf_interface_table_id_and_vpn_label_pop() {
    if !is_root() {
        eprintln!("skipping frr_vpn_zebra: needs root (network namespaces, FRR daemons)");
        return;
    }
    frr::ensure_frr_installed().unwrap();
    let module = zebra_module();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../frr/zebra-module/tools/vpn-two-pe.sh");
    let mut cmd = Command::new(&script);
    cmd.env("VMPLS_ZEBRA_MODULE", &module);
    // Every wait in the script is bounded (about 60 s in all if each one times out).
    let out = run_here_timeout(cmd, Duration::from_secs(120)).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    let passed = stdout.lines().filter(|l| l.starts_with("PASS: ")).count();
    let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL: ")).collect();
    assert!(
        out.status.success() && failed.is_empty(),
        "{} ({}): {} checks failed:\n{}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        script.display(),
        out.status,
        failed.len(),
        failed.join("\n")
    );
    // A script that stopped early (e.g. at a `set -e` step) passes fewer checks.
    assert!(passed >= 30, "only {passed} checks passed:\n{stdout}");
}
