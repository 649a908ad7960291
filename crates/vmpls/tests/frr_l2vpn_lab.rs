//! `vmpls lab l2vpn`'s code in CI time ([`vmpls_lab::l2vpn_lab::run_l2vpn_lab`] with
//! 2-second flows): FRR's ldpd signals a VPWS (pe1 <-> pe2) and a three-PE VPLS full mesh
//! over OSPF + LDP, vmpls carries them. The lab's JSON must say: every pseudowire end up
//! in FRR and in vmpls with the labels ldpd signalled, ARP and ping across the VPWS and
//! between every VPLS site, each CE's MAC in the right place of every PE's FDB, and a
//! content-checked TCP flow through the VPWS and the VPLS beside kernel IP routing.
//!
//! Needs root (skipped otherwise); installs Debian's `frr` if missing. The zebra module
//! comes from `VMPLS_ZEBRA_MODULE`, else `scripts/build-zebra-module` builds it.

mod frr_common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use frr_common::{BIN, is_root, step, zebra_module};
use serde_json::Value;
use vmpls_lab::l2vpn_lab::{L2vpnLabOptions, pseudowire_ends, run_l2vpn_lab};

#[test]
fn the_l2vpn_lab_brings_every_pseudowire_up_and_carries_traffic() {
    if !is_root() {
        eprintln!("skipping frr_l2vpn_lab: needs root (network namespaces, FRR daemons)");
        return;
    }
    let t0 = Instant::now();
    vmpls_lab::frr::ensure_frr_installed().unwrap();
    let opts = L2vpnLabOptions {
        vmpls: PathBuf::from(BIN),
        duration: Duration::from_secs(2),
        zebra_module: zebra_module(),
    };
    let report = run_l2vpn_lab(&opts, &mut |line| step(t0, line)).unwrap();
    let text = report.to_markdown();
    eprintln!("{text}");
    let j = report.to_json();

    let pws = j["pseudowires"].as_array().unwrap();
    assert_eq!(pws.len(), pseudowire_ends().len(), "{j:#}");
    assert_eq!(pws.len(), 8, "2 VPWS ends and 6 VPLS ends: {j:#}");
    for p in pws {
        for key in ["router", "name", "status_frr", "status_vmpls", "local_label", "remote_label"] {
            assert!(!p[key].is_null(), "{key} missing: {p}");
        }
        assert_eq!(p["status_frr"], "up", "{p}");
        assert_eq!(p["status_vmpls"], "up", "{p}");
        assert_eq!(p["local_label"], p["vmpls_local_label"], "{p}");
        assert_eq!(p["remote_label"], p["vmpls_remote_label"], "{p}");
    }
    // each end's remote label is the far end's local label
    for p in pws {
        let far = pws
            .iter()
            .find(|q| {
                q["pw_id"] == p["pw_id"]
                    && q["router"] != p["router"]
                    && q["peer"]
                        .as_str()
                        .is_some_and(|peer| peer.ends_with(&format!(".{}", router_id(&p["router"]))))
            })
            .unwrap_or_else(|| panic!("no far end of {p}"));
        assert_eq!(p["remote_label"], far["local_label"], "{p} / {far}");
    }
    assert!(j["converged_s"].as_f64().is_some_and(|t| t > 0.0 && t < 60.0), "{j:#}");

    let checks = j["checks"].as_array().unwrap();
    let failed: Vec<&Value> = checks.iter().filter(|c| c["ok"] != true).collect();
    assert!(failed.is_empty(), "failed checks: {failed:#?}");
    for want in [
        "ping ce1 -> ce2 (VPWS)",
        "ARP across: ce1 has ce2's own MAC",
        "ping vce2 -> vce3 (VPLS)",
        "FDB of blue",
    ] {
        assert!(
            checks.iter().any(|c| c["name"].as_str().is_some_and(|n| n.starts_with(want))),
            "no check {want:?}: {checks:#?}"
        );
    }
    // 3 VPLS CEs known at each of 3 PEs
    assert_eq!(j["fdb"].as_array().unwrap().iter().filter(|e| !e["host"].is_null()).count(), 9, "{j:#}");

    let modes = j["modes"].as_array().unwrap();
    let names: Vec<&str> = modes.iter().filter_map(|m| m["name"].as_str()).collect();
    assert_eq!(names, ["kernel-ip", "vmpls-vpws", "vmpls-vpls"]);
    for m in modes {
        assert_eq!(m["content_ok"], true, "{m}");
        assert!(m["error"].is_null(), "{m}");
        assert!(m["gbps"].as_f64().is_some_and(|g| g > 0.0) && m["ratio"].as_f64().is_some(), "{m}");
    }
    assert!(report.ok(), "{text}");
    step(t0, "done");
}

/// The last byte of `router`'s loopback (pe1 1, pe2 3, pe3 4).
fn router_id(router: &Value) -> u8 {
    match router.as_str() {
        Some("pe1") => 1,
        Some("pe2") => 3,
        Some("pe3") => 4,
        r => panic!("not a PE: {r:?}"),
    }
}
