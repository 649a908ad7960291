//! `vmpls lab seed --vm-routers` in a short form: the seed's routers inside two QEMU
//! guests (P; PE with pe1 and pe2 in namespaces), kernel MPLS and vmpls (core links at
//! 1500 and at 65521 bytes; and with the in-kernel fast path on the guests' virtio-net
//! NICs, whose counters in the report must show it did the flow's label operations) in
//! turn. Each mode of the lab itself checks that a 4 MiB transfer ce1 -> ce2 arrives
//! intact and that the labels dumpcap sees on the P guest's TAPs are the configured ones
//! (1002/2001 west, 2002/1001 east), then runs iperf3: the
//! test checks that every mode passed, that the numbers are there, and that the lab left
//! no namespace behind. Needs root, QEMU (TCG is enough), tshark/dumpcap and iperf3; the
//! guest image comes from `vmpls-guest` (the first build downloads the kernel package).

use std::process::Command;
use std::time::Instant;

#[test]
fn lab_seed_vm_routers_carries_labelled_traffic_through_guest_routers() {
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_vmpls"))
        .args([
            "lab",
            "seed",
            "--vm-routers",
            "--modes",
            "kernel-mpls,vmpls-mpls,vmpls-mpls-64k,vmpls-mpls-tc",
            "--duration",
            "2",
            "--json",
        ])
        .output()
        .expect("running vmpls lab seed --vm-routers");
    let stdout = String::from_utf8_lossy(&child.stdout);
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert!(child.status.success(), "{}\nstdout:\n{stdout}\nstderr:\n{stderr}", child.status);
    let report: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    let modes = report["modes"].as_array().expect("modes");
    let names: Vec<_> = modes.iter().map(|m| m["name"].as_str().unwrap_or("")).collect();
    assert_eq!(names, ["kernel-mpls", "vmpls-mpls", "vmpls-mpls-64k", "vmpls-mpls-tc"], "{report}");
    for m in modes {
        assert!(m["error"].is_null(), "{m}");
        assert!(m["gbps"].as_f64().is_some_and(|g| g > 0.0), "{m}");
        assert!(m["retransmits"].as_u64().is_some(), "{m}");
        // No kernel-ip in this run: no ratio.
        assert!(m["ratio"].is_null(), "{m}");
    }
    // With the fast path in the guests (their virtio-net NICs, Linux 6.1, whose kernel has
    // MPLS GSO, act_mpls and cls_fw: every port gets its action chain), the programs did
    // the label operations of the flow: pe1 pushed what ce1 sent, its super-frames whole
    // through the chain (cut by the core NIC's MPLS GSO), p swapped, pe2 popped what the
    // virtio-net NIC received: the first frames in TC (MPLS to the kernel: the chain's
    // act_mpls popped each in one pass), then, once the router saw pops on that port and
    // put the XDP program in its driver, before GRO (so the segments merged again); and
    // the ACKs the other way.
    let tc = modes.iter().find(|m| m["name"] == "vmpls-mpls-tc").expect("the fast-path mode");
    let counters = |router: &str| -> std::collections::BTreeMap<String, u64> {
        let ops = &tc["routers"][router];
        let mut out = std::collections::BTreeMap::new();
        for path in ["fast", "pipeline"] {
            for (name, n) in
                ops[path].as_object().unwrap_or_else(|| panic!("no {path} counters of {router}: {tc}"))
            {
                out.insert(
                    format!("{path} {name}"),
                    n.as_u64().unwrap_or_else(|| panic!("{router} {name}: {n}")),
                );
            }
        }
        out
    };
    let (pe1, p, pe2) = (counters("pe1"), counters("p"), counters("pe2"));
    // Pushes count super-frames as one each.
    assert!(pe1["fast push"] >= 100 && pe1["fast push"] > 10 * pe1["pipeline push"], "pe1 {pe1:?}");
    // p: the first frames in TC, then (its NICs' drivers running the XDP program once
    // the router saw swaps there) in the drivers, sent from one NIC to the other.
    assert!(p["fast swap"] + p["fast xdp_swap"] >= 1000 && p["pipeline swap"] < 10, "p {p:?}");
    assert!(p["fast xdp_swap"] >= 100, "p {p:?}");
    assert!(pe2["fast pop"] + pe2["fast xdp_pop"] >= 1000, "pe2 {pe2:?}");
    assert!(pe2["fast xdp_pop"] >= 100 && pe2["fast act_mpls"] >= pe2["fast pop"], "pe2 {pe2:?}");
    assert_eq!(pe2["fast repassed"], 0, "pe2 {pe2:?}");
    // pe1's chain popped the ACKs and pushed the super-frames.
    assert!(pe1["fast act_mpls"] >= pe1["fast pop"] + 100, "pe1 {pe1:?}");
    assert!(pe2["fast push"] > 0 && pe1["fast pop"] > 0, "the ACKs: pe2 {pe2:?} pe1 {pe1:?}");
    // Everything the lab made is gone.
    let made: Vec<&str> = stderr
        .lines()
        .find_map(|l| l.strip_prefix("namespaces: "))
        .expect("the lab names its namespaces")
        .split_whitespace()
        .collect();
    assert_eq!(made.len(), 3, "{stderr}");
    let netns = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    let left = String::from_utf8_lossy(&netns.stdout);
    for ns in made {
        assert!(!left.lines().any(|l| l.split_whitespace().next() == Some(ns)), "{ns} left behind:\n{left}");
    }
    eprintln!("{stderr}\nlab seed --vm-routers (4 modes) in {:?}", started.elapsed());
}
