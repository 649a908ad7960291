//! `vmpls bench fpm --vrfs N` end to end, small: 3 VRF namespaces of 10 VPN routes each
//! (and each VRF's VPN label) from the FPM generator into a router in FRR mode, a few
//! single route changes, read back from the JSON report. Needs root (namespaces,
//! AF_PACKET); a few seconds.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn f64_at(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} is not a number in {v:#}"))
}

#[test]
fn the_vpn_benchmark_applies_every_vrfs_routes_and_times_changes() {
    vmpls_lab::require_root().expect("the integration tests need root");
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_vmpls"))
        .args(["bench", "fpm", "--vrfs", "3", "--routes-per-vrf", "10", "--updates", "5", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting vmpls");
    // Bounded: the run takes seconds; a hang is killed (the bench's namespaces are its
    // own and go with it) and fails the test.
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("waiting for vmpls").is_none() {
        if Instant::now() >= deadline {
            let _ = vmpls_sys::process::kill(child.id(), libc::SIGTERM);
            std::thread::sleep(Duration::from_secs(5));
            let _ = child.kill();
            let _ = child.wait();
            panic!("vmpls bench fpm --vrfs ran longer than 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("reading vmpls's output");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "vmpls bench fpm --vrfs failed: {stderr}");
    let r: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"));
    // The bench itself fails unless the router holds exactly 30 routes and 3 VPN labels
    // from zebra and each change was seen in force with its new label.
    assert_eq!(
        (r["vrfs"].as_u64(), r["vpn_routes"].as_u64(), r["vpn_labels"].as_u64()),
        (Some(3), Some(30), Some(3))
    );
    assert_eq!(r["changes"].as_u64(), Some(5), "{r:#}");
    let (median, p99, max) =
        (f64_at(&r, "change_median_ms"), f64_at(&r, "change_p99_ms"), f64_at(&r, "change_max_ms"));
    assert!(0.0 < median && median <= p99 && p99 <= max, "{r:#}");
    assert!(f64_at(&r, "full_table_s") > 0.0 && f64_at(&r, "kernel_full_table_s") > 0.0, "{r:#}");
    assert!(r["router_rss_after_bytes"].as_u64().is_some_and(|b| b > 0), "{r:#}");
    // Nothing left behind: no namespace and no private /run/netns of the bench.
    let leftovers: Vec<String> = std::fs::read_dir("/run/vmpls-lab")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    assert!(!leftovers.iter().any(|n| n.ends_with("-bench-fpm")), "left behind: {leftovers:?}");
    eprintln!("bench fpm --vrfs 3 took {:?}", start.elapsed());
}
