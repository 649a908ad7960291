//! The vmpls-frr image as BGP/MPLS VPN PEs in containerlab: `examples/containerlab/
//! vpn.clab.yml`, red and blue customers with the same addresses on pe1 and pe2, p in
//! the core (OSPF + LDP), iBGP VPNv4 between the PEs' loopbacks.
//!
//! The PEs' frr.conf puts their customer-facing interfaces in VRFs (`interface eth2 vrf
//! red`); the image's entrypoint makes a network namespace per VRF inside the container
//! and moves them there, zebra runs with -n. The test wires the topology as containerlab
//! does (`container_common`), then checks:
//!
//! - the VRFs inside each PE (`ip netns`, `vmpls vrf show`), their interfaces moved;
//! - the VPNv4 session up on both PEs, each VRF's remote site selected in zebra, and
//!   vmpls's routes of each VRF the same prefixes as zebra's, the remote site's with
//!   zebra's VPN label at the bottom of the stack;
//! - red-ce1 reaches red-ce2 and blue-ce1 blue-ce2 on the address both use, and the echo
//!   requests arrive at the own customer's host only (`Icmp: InEchos` of each CE);
//! - isolation: blue-ce2's own address 198.18.204.1 answers blue-ce1, never red-ce1, and
//!   red's echo requests to it reach no host;
//! - bad input: VMPLS_VRFS naming an interface that is no data interface exits 1 saying
//!   so.
//!
//! The image is built on its default suite (trixie, FRR 10.3) or the one `VMPLS_IMAGE_SUITE`
//! names (bookworm: FRR 8.4); the
//! host's IP forwarding must be as it was at the end. Needs root (skipped otherwise) and
//! docker or podman. Everything is removed at the end, also on failure.

mod container_common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use container_common::{ClabLab, ClabTopology, Engine, HostForwarding, Image, is_root, parse_clab, repo};
use vmpls_control::api;
use vmpls_lab::frr::parse_ip_routes_json;

const TOPOLOGY_IMAGE: &str = "vmpls-frr:latest";
const PES: [&str; 2] = ["pe1", "pe2"];
const VRFS: [&str; 2] = ["blue", "red"];
/// The address both customers' hosts at pe2 have.
const CE2_ADDR: &str = "198.18.2.2";
/// blue-ce2's own address, which only blue routes (pe2's static route in VRF blue).
const BLUE_ONLY: &str = "198.18.204.1";

fn vpn_topology() -> (ClabTopology, PathBuf) {
    let dir = repo().join("examples/containerlab");
    let text = std::fs::read_to_string(dir.join("vpn.clab.yml")).expect("reading vpn.clab.yml");
    (parse_clab(&text).expect("vpn.clab.yml"), dir)
}

/// The site prefix a PE's VRF learns from the other PE.
fn remote_site(pe: &str) -> &'static str {
    if pe == "pe1" { "198.18.2.0/24" } else { "198.18.1.0/24" }
}

/// `interface IF vrf NAME` lines of a frr.conf: IF -> NAME.
fn conf_vrf_interfaces(conf: &str) -> BTreeMap<String, String> {
    conf.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                ["interface", i, "vrf", v] => Some((i.to_string(), v.to_string())),
                _ => None,
            }
        })
        .collect()
}

#[test]
fn the_vpn_clab_topology_puts_customer_links_in_vrfs() {
    let (topo, dir) = vpn_topology();
    assert_eq!(
        topo.nodes.keys().collect::<Vec<_>>(),
        ["blue-ce1", "blue-ce2", "p", "pe1", "pe2", "red-ce1", "red-ce2"]
    );
    assert_eq!(topo.links.len(), 6);
    for (name, node) in &topo.nodes {
        assert_eq!(node.image, TOPOLOGY_IMAGE, "{name}");
        for bind in &node.binds {
            let host = bind.split(':').next().unwrap();
            assert!(dir.join(host).is_file(), "{name}: bind {bind} names no file");
        }
    }
    for pe in PES {
        let conf = std::fs::read_to_string(dir.join(format!("vpn/{pe}/frr.conf"))).unwrap();
        let vrfs = conf_vrf_interfaces(&conf);
        assert_eq!(
            vrfs.values().collect::<BTreeSet<_>>(),
            VRFS.iter().map(|v| v.to_string()).collect::<BTreeSet<_>>().iter().collect()
        );
        // Each VRF's interface leads to that customer's CE.
        for (intf, vrf) in &vrfs {
            let peer = topo
                .links
                .iter()
                .find_map(|[a, b]| {
                    if a.0 == pe && &a.1 == intf {
                        Some(b.0.clone())
                    } else if b.0 == pe && &b.1 == intf {
                        Some(a.0.clone())
                    } else {
                        None
                    }
                })
                .unwrap_or_else(|| panic!("{pe}: {intf} is on no link"));
            assert!(peer.starts_with(&format!("{vrf}-ce")), "{pe}: {intf} (vrf {vrf}) leads to {peer}");
        }
    }
}

/// `Icmp: InEchos` of a node's namespace.
fn in_echos(lab: &ClabLab<'_>, node: &str) -> anyhow::Result<u64> {
    let snmp = lab.exec(node, &["cat", "/proc/net/snmp"])?;
    let mut lines = snmp.lines().filter(|l| l.starts_with("Icmp:"));
    let (names, values) = (lines.next(), lines.next());
    names
        .zip(values)
        .and_then(|(n, v)| {
            n.split_whitespace().zip(v.split_whitespace()).find(|(n, _)| *n == "InEchos").map(|(_, v)| v)
        })
        .ok_or_else(|| anyhow!("no Icmp InEchos on {node}: {snmp}"))?
        .parse()
        .context("InEchos")
}

/// Pings `to` from `from` 3 times: replies, and the echo requests each of `hosts` got.
fn ping_counted(
    lab: &ClabLab<'_>,
    from: &str,
    to: &str,
    hosts: &[&str],
) -> anyhow::Result<(bool, BTreeMap<String, u64>)> {
    let before: Vec<u64> = hosts.iter().map(|h| in_echos(lab, h)).collect::<anyhow::Result<_>>()?;
    let answered = lab.exec(from, &["ping", "-c", "3", "-i", "0.2", "-W", "1", to]).is_ok();
    let mut got = BTreeMap::new();
    for (h, b) in hosts.iter().zip(before) {
        got.insert(h.to_string(), in_echos(lab, h)? - b);
    }
    Ok((answered, got))
}

/// What is still missing on `pe` (empty: converged).
fn pe_missing(lab: &ClabLab<'_>, pe: &str) -> anyhow::Result<Vec<String>> {
    let mut missing = Vec::new();
    let summary = lab.vtysh_json(pe, "show bgp ipv4 vpn summary json")?;
    let up = summary
        .get("peers")
        .and_then(|p| p.as_object())
        .map(|p| p.values().filter(|p| p["state"] == "Established").count())
        .unwrap_or(0);
    if up != 1 {
        missing.push(format!("VPNv4 sessions established: {up}"));
    }
    for vrf in VRFS {
        let frr = parse_ip_routes_json(&lab.vtysh_json(pe, &format!("show ip route vrf {vrf} json"))?)?;
        let frr: BTreeSet<String> = frr
            .iter()
            .filter(|r| r.selected && !matches!(r.protocol.as_str(), "connected" | "kernel" | "local"))
            .map(|r| r.prefix.to_string())
            .collect();
        if !frr.contains(remote_site(pe)) {
            missing.push(format!("vrf {vrf}: zebra has no {} ({frr:?})", remote_site(pe)));
            continue;
        }
        let routes: Vec<api::IpRoute> =
            serde_json::from_value(lab.json(pe, &["vmpls", "-r", pe, "-j", "route", "show", "vrf", vrf])?)?;
        let vmpls: BTreeSet<String> =
            routes.iter().filter(|r| r.protocol != api::Protocol::Kernel).map(|r| r.dst.clone()).collect();
        if vmpls != frr {
            missing.push(format!("vrf {vrf}: zebra routes {frr:?}, vmpls {vmpls:?}"));
        }
    }
    Ok(missing)
}

#[test]
fn vpn_lab_in_vmpls_frr_containers_keeps_customers_apart() {
    if !is_root() {
        eprintln!("skipped: needs root (containers, veths, namespaces)");
        return;
    }
    let started = Instant::now();
    let forwarding = HostForwarding::read().unwrap();
    let engine = Engine::pick().expect("a container engine");
    let image = Image::build(&engine).expect("building the image");
    let built = Instant::now();
    let (topo, dir) = vpn_topology();
    let lab =
        ClabLab::deploy(&engine, topo, &dir, TOPOLOGY_IMAGE, &image.tag).expect("deploying the VPN lab");
    let deployed = Instant::now();
    let routers = lab.routers();
    assert_eq!(routers, ["p", "pe1", "pe2"]);

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut missing: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    loop {
        for r in &routers {
            lab.check_running(r).unwrap();
        }
        for pe in PES {
            missing.insert(pe, pe_missing(&lab, pe).unwrap_or_else(|e| vec![format!("{e:#}")]));
        }
        if missing.values().all(Vec::is_empty) {
            break;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> =
                routers.iter().map(|r| format!("--- {r}:\n{}", lab.log_tail(r, 40))).collect();
            panic!("not converged in 60 s: {missing:#?}\n{}", logs.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("VPN converged {:.1} s after the wiring", deployed.elapsed().as_secs_f64());

    for pe in PES {
        let log = lab.log_tail(pe, 10_000);
        assert!(!log.contains("vtysh -b reported errors"), "{pe}:\n{log}");
        // The VRFs are namespaces inside the container, holding the customer links.
        let netns = lab.exec(pe, &["ip", "netns", "list"]).unwrap();
        let names: BTreeSet<&str> = netns.lines().filter_map(|l| l.split_whitespace().next()).collect();
        assert_eq!(names, VRFS.into_iter().collect(), "{pe}: ip netns list: {netns}");
        for (vrf, intf) in [("red", "eth2"), ("blue", "eth3")] {
            lab.exec(pe, &["ip", "-n", vrf, "link", "show", "dev", intf])
                .unwrap_or_else(|e| panic!("{pe}: {intf} is not in VRF {vrf}'s namespace: {e:#}"));
            assert!(
                lab.exec(pe, &["ip", "link", "show", "dev", intf]).is_err(),
                "{pe}: {intf} is still in the router's namespace"
            );
        }
        let shown: Vec<api::Vrf> =
            serde_json::from_value(lab.json(pe, &["vmpls", "-r", pe, "-j", "vrf", "show"]).unwrap()).unwrap();
        let shown: BTreeMap<&str, &api::Vrf> = shown.iter().map(|v| (v.name.as_str(), v)).collect();
        for (vrf, intf) in [("red", "eth2"), ("blue", "eth3")] {
            let v = shown.get(vrf).unwrap_or_else(|| panic!("{pe}: vmpls has no VRF {vrf}: {shown:?}"));
            assert!(v.interfaces.iter().any(|i| i == intf), "{pe}: vmpls's VRF {vrf}: {v:?}");
        }
        // The remote site's route in red carries zebra's VPN label at the bottom.
        let site = remote_site(pe);
        let frr =
            parse_ip_routes_json(&lab.vtysh_json(pe, &format!("show ip route vrf red {site} json")).unwrap())
                .unwrap();
        let frr_labels: BTreeSet<u32> =
            frr.iter().flat_map(|r| r.nexthops.iter().flat_map(|n| n.labels.clone())).collect();
        let routes: Vec<api::IpRoute> = serde_json::from_value(
            lab.json(pe, &["vmpls", "-r", pe, "-j", "route", "show", "vrf", "red"]).unwrap(),
        )
        .unwrap();
        let route =
            routes.iter().find(|r| r.dst == site).unwrap_or_else(|| panic!("{pe}: vmpls has no {site}"));
        let bottom: BTreeSet<u32> = route.nexthops.iter().filter_map(|n| n.labels.last().copied()).collect();
        assert!(
            !bottom.is_empty() && bottom.is_subset(&frr_labels),
            "{pe}: vmpls pushes {:?} for red's {site}, zebra's labels {frr_labels:?}",
            route.nexthops
        );
    }

    // Same address, each customer's own host.
    for (from, own, other) in [("red-ce1", "red-ce2", "blue-ce2"), ("blue-ce1", "blue-ce2", "red-ce2")] {
        let (answered, got) = ping_counted(&lab, from, CE2_ADDR, &[own, other]).unwrap();
        assert!(answered, "{from} -> {CE2_ADDR}: no reply\n{}", lab.log_tail("pe1", 20));
        assert!(got[own] >= 3, "{from} -> {CE2_ADDR}: {got:?}");
        assert_eq!(got[other], 0, "{from} -> {CE2_ADDR} reached the other customer: {got:?}");
    }
    // The address only blue routes.
    let (answered, got) = ping_counted(&lab, "blue-ce1", BLUE_ONLY, &["blue-ce2"]).unwrap();
    assert!(answered && got["blue-ce2"] >= 3, "blue-ce1 -> {BLUE_ONLY}: {got:?}");
    let hosts = ["blue-ce1", "blue-ce2", "red-ce2"];
    let (answered, got) = ping_counted(&lab, "red-ce1", BLUE_ONLY, &hosts).unwrap();
    assert!(!answered, "red-ce1 reached blue's {BLUE_ONLY}");
    assert!(got.values().all(|&n| n == 0), "red-ce1 -> {BLUE_ONLY} reached {got:?}");
    eprintln!(
        "red and blue reach their own sites only; image {:.0} s, lab {:.0} s",
        (built - started).as_secs_f64(),
        built.elapsed().as_secs_f64()
    );
    drop(lab);

    // Bad input: a VRF naming an interface that is no data interface.
    let (code, log) = engine
        .run_to_end(&[
            "--network",
            "none",
            "--privileged",
            "-e",
            "VMPLS_INTERFACES=lo",
            "-e",
            "VMPLS_VRFS=red=eth7",
            &image.tag,
        ])
        .unwrap();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("VMPLS_VRFS puts eth7 in VRF red, but eth7 is no data interface"), "{log}");
    forwarding.check_unchanged("the image was built and the lab ran").unwrap();
}
