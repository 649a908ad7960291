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
//! The same script refreshes the fixtures: `vpn-two-pe.sh frr/fixtures`. `frr10_vpn_zebra.rs`
//! runs it against FRR 10.3.
//!
//! Needs root (skipped otherwise); installs Debian's frr if missing; the zebra module
//! comes from `VMPLS_ZEBRA_MODULE` or `scripts/build-zebra-module`.

mod frr_common;

use frr_common::{is_root, run_vpn_two_pe, zebra_module};
use vmpls_lab::frr;

#[test]
fn netns_vrfs_get_a_vrf_interface_table_id_and_vpn_label_pop() {
    if !is_root() {
        eprintln!("skipping frr_vpn_zebra: needs root (network namespaces, FRR daemons)");
        return;
    }
    frr::ensure_frr_installed().unwrap();
    run_vpn_two_pe(&zebra_module(), None);
}
