//! The vmpls-frr container image (`scripts/build-image`) in the containerlab seed lab,
//! `examples/containerlab/seed.clab.yml`, ce1 -- pe1 -- p -- pe2 -- ce2.
//!
//! containerlab cannot be installed here, so the test wires the topology as containerlab
//! does for `kind: linux` nodes (`container_common`). Then:
//!
//! - OSPF Full and LDP OPERATIONAL toward every router neighbour (vtysh in the
//!   containers), and each vmpls label table (`vmpls -j` inside) holds FRR's labels;
//! - frr.conf applied without errors, pe1's static route in zebra's table (FRR 10:
//!   through mgmtd); on FRR 10, netlab's OSPF validation command answers;
//! - ping ce1 -> ce2, and a content-checked TCP flow ce1 -> ce2 whose bytes p's vmpls
//!   switched by label;
//! - a router whose zebra dies exits 1 saying so; `stop` ends a router with 0;
//! - bad input: the image without NET_ADMIN, without data interfaces, with the kernel
//!   forwarding IP where it cannot be turned off, or with a zebra module built for
//!   another FRR exits non-zero with a log line saying so.
//!
//! The image is built on build-image's default Debian suite (trixie, FRR 10.3), or on
//! `VMPLS_IMAGE_SUITE` (`bookworm`: FRR 8.4); the host's IP forwarding must be as it was after the build
//! and at the end.
//!
//! Needs root (skipped otherwise) and docker or podman (`scripts/build-image` installs
//! podman when neither is there). Containers, namespaces, veths and the image it
//! builds are removed at the end, also on failure.

mod container_common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use container_common::{ClabLab, ClabTopology, Engine, HostForwarding, Image, is_root, parse_clab, repo};
use vmpls_control::api;
use vmpls_lab::frr::{parse_ldp_operational, parse_mpls_table, parse_ospf_full};
use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};
use vmpls_testkit::TempDir;

/// The image the topology names, replaced by the tag this test builds.
const TOPOLOGY_IMAGE: &str = "vmpls-frr:latest";
/// The seed lab's hosts and the address the flow goes to.
const CE1: &str = "ce1";
const CE2: &str = "ce2";
const CE2_ADDR: &str = "198.18.2.2";
/// The static route pe1's frr.conf configures.
const PE1_STATIC: &str = "198.18.100.0/24";
/// p's OSPF router id.
const P_ROUTER_ID: &str = "198.18.255.2";
/// The transit router whose label counters must carry the flow.
const P: &str = "p";
const FLOW_BYTES: u64 = 64 << 20;

/// One router's state as the checks see it.
#[derive(Debug, Default)]
struct RouterState {
    ospf_full: usize,
    ldp_operational: usize,
    frr_labels: BTreeSet<u32>,
    vmpls_labels: BTreeSet<u32>,
}

fn router_state(lab: &ClabLab<'_>, node: &str) -> anyhow::Result<RouterState> {
    let ospf_full = parse_ospf_full(&lab.vtysh_json(node, "show ip ospf neighbor json")?)?;
    let ldp_operational = parse_ldp_operational(&lab.vtysh_json(node, "show mpls ldp neighbor json")?)?;
    let frr_labels = parse_mpls_table(&lab.vtysh_json(node, "show mpls table json")?)?.into_keys().collect();
    let routes: Vec<api::MplsRoute> =
        serde_json::from_value(lab.json(node, &["vmpls", "-r", node, "-j", "-f", "mpls", "route", "show"])?)
            .context("vmpls -j -f mpls route show")?;
    let vmpls_labels = routes.iter().map(|r| r.label).collect();
    Ok(RouterState { ospf_full, ldp_operational, frr_labels, vmpls_labels })
}

fn label_bytes(stats: &api::Stats) -> u64 {
    stats.labels.iter().map(|l| l.bytes).sum()
}

fn seed_topology() -> (ClabTopology, PathBuf) {
    let dir = repo().join("examples/containerlab");
    let text = std::fs::read_to_string(dir.join("seed.clab.yml")).expect("reading seed.clab.yml");
    (parse_clab(&text).expect("seed.clab.yml"), dir)
}

#[test]
fn the_seed_clab_topology_parses_as_containerlab_reads_it() {
    let (topo, dir) = seed_topology();
    assert_eq!(topo.nodes.keys().collect::<Vec<_>>(), ["ce1", "ce2", "p", "pe1", "pe2"]);
    assert_eq!(topo.links.len(), 4);
    for (name, node) in &topo.nodes {
        assert_eq!(node.image, TOPOLOGY_IMAGE, "{name}");
        for bind in &node.binds {
            let host = bind.split(':').next().unwrap();
            assert!(dir.join(host).is_file(), "{name}: bind {bind} names no file");
        }
    }
    assert_eq!(topo.nodes["ce1"].cmd.as_deref(), Some("sleep infinity"));
    assert!(topo.nodes["pe1"].binds.iter().any(|b| b.ends_with(":/etc/frr/daemons")));
    // Every interface of the routers' frr.conf is an endpoint of a link of that router.
    for name in ["pe1", "p", "pe2"] {
        let conf = std::fs::read_to_string(dir.join(format!("seed/{name}/frr.conf"))).unwrap();
        for line in conf.lines().filter_map(|l| l.trim().strip_prefix("interface ")) {
            let ok = line == "lo" || topo.links.iter().flatten().any(|(n, i)| n == name && i == line);
            assert!(ok, "{name}/frr.conf: interface {line} is on no link of {name}");
        }
    }
}

#[test]
fn seed_lab_in_vmpls_frr_containers_forwards_over_ldp() {
    if !is_root() {
        eprintln!("skipped: needs root (containers, veths, namespaces)");
        return;
    }
    let started = Instant::now();
    let forwarding = HostForwarding::read().unwrap();
    let engine = Engine::pick().expect("a container engine");
    let image = Image::build(&engine).expect("building the image");
    let (topo, dir) = seed_topology();
    let lab =
        ClabLab::deploy(&engine, topo, &dir, TOPOLOGY_IMAGE, &image.tag).expect("deploying the seed lab");
    let deployed = Instant::now();

    let routers = lab.routers();
    assert_eq!(routers, ["p", "pe1", "pe2"]);
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut states = BTreeMap::new();
    loop {
        for r in &routers {
            lab.check_running(r).unwrap();
        }
        // Every router's state, for the message should it not converge.
        let done: Vec<bool> = routers
            .iter()
            .map(|r| {
                let want = lab.router_neighbours(r, &routers);
                let state = router_state(&lab, r).unwrap_or_default();
                let ok = state.ospf_full == want
                    && state.ldp_operational == want
                    && !state.frr_labels.is_empty()
                    && state.frr_labels == state.vmpls_labels;
                states.insert(r.clone(), state);
                ok
            })
            .collect();
        if done.iter().all(|&ok| ok) {
            break;
        }
        if Instant::now() > deadline {
            // The kernel's and zebra's view of the interfaces too: a core link without its
            // address (seen once under load) shows here.
            let logs: Vec<String> = routers
                .iter()
                .map(|r| {
                    let kernel = lab.exec(r, &["ip", "-br", "addr"]).unwrap_or_else(|e| format!("{e:#}"));
                    let zebra = lab
                        .exec(r, &["vtysh", "-c", "show interface brief"])
                        .unwrap_or_else(|e| format!("{e:#}"));
                    format!("--- {r}:\n{kernel}\n{zebra}\n{}", lab.log_tail(r, 60))
                })
                .collect();
            panic!("not converged in 90 s: {states:#?}\n{}", logs.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("converged {:.1} s after the wiring: {states:?}", deployed.elapsed().as_secs_f64());

    // vtysh -b applied frr.conf without an error status, and staticd's part of it (FRR
    // 10: through mgmtd) took effect: pe1's static route is in zebra's table. vtysh -b
    // passes over a line no daemon knows with status 0, so the route is the real check.
    for r in &routers {
        let log = lab.log_tail(r, 10_000);
        assert!(!log.contains("vtysh -b reported errors"), "{r}:\n{log}");
    }
    let static_route = lab.vtysh_json("pe1", &format!("show ip route {PE1_STATIC} json")).unwrap();
    let installed = static_route[PE1_STATIC].as_array().is_some_and(|routes| {
        routes.iter().any(|r| r["protocol"] == "static" && r["selected"] == true && r["installed"] == true)
    });
    assert!(installed, "pe1's static route {PE1_STATIC}: {static_route}");

    // The command netlab's OSPF validation runs, which FRR 8.4's vtysh refuses: why the
    // image is on trixie by default.
    let frr = lab.exec("pe1", &["dpkg-query", "-W", "-f=${Version}", "frr"]).unwrap();
    let netlab_check = format!("show ip ospf vrf default neighbor {P_ROUTER_ID} detail json");
    let detail = lab.exec("pe1", &["vtysh", "-c", &netlab_check]);
    if frr.split('.').next().and_then(|major| major.parse::<u32>().ok()).is_some_and(|major| major >= 10) {
        let detail = detail.unwrap();
        let parsed: anyhow::Result<serde_json::Value> = serde_json::from_str(&detail).map_err(Into::into);
        assert!(
            parsed.is_ok() && detail.contains("Full"),
            "pe1 (frr {frr}): {netlab_check} printed {detail:?}"
        );
    } else {
        eprintln!("frr {frr}: `{netlab_check}` gives {detail:?}");
    }

    let ping = lab.exec(CE1, &["ping", "-c", "3", "-i", "0.2", "-W", "2", CE2_ADDR]);
    assert!(ping.is_ok(), "ping ce1 -> ce2: {ping:?}");

    let before = label_bytes(&lab.vmpls_stats(P).unwrap());
    let opts = FlowOptions {
        limit: Limit::Bytes(FLOW_BYTES),
        deadline: Some(Duration::from_secs(60)),
        ..FlowOptions::default()
    };
    let dst: IpAddr = CE2_ADDR.parse().unwrap();
    let flow =
        run_flow(&lab.container(CE1), &lab.container(CE2), dst, &opts, &mut |_| {}).expect("the TCP flow");
    assert!(flow.content_ok, "the flow's content: {flow:?}");
    assert_eq!(flow.bytes_received, FLOW_BYTES, "{flow:?}");
    let switched = label_bytes(&lab.vmpls_stats(P).unwrap()) - before;
    assert!(
        switched >= FLOW_BYTES,
        "p's vmpls switched {switched} bytes by label during a flow of {FLOW_BYTES}: the flow did not take the LSP"
    );
    eprintln!(
        "flow ce1 -> ce2: {} bytes intact, {:.2} Gbit/s, {} retransmits; p switched {switched} bytes by label; {:.0} s in all",
        flow.bytes_received,
        flow.gbps,
        flow.retransmits,
        started.elapsed().as_secs_f64()
    );

    // A daemon dying takes the router down with a reason (pe2's zebra), and `stop` ends
    // a router cleanly (p).
    lab.exec("pe2", &["sh", "-c", "kill $(cat /run/frr/zebra.pid)"]).unwrap();
    let (code, log) = lab.wait_exit("pe2", Duration::from_secs(20)).unwrap();
    assert_eq!(code, 1, "pe2 after its zebra was killed:\n{log}");
    assert!(log.contains("ERROR: zebra exited with status"), "{log}");
    let stopping = Instant::now();
    lab.engine.output(&["stop", "-t", "20", &lab.container(P)], Duration::from_secs(30)).unwrap();
    let (code, log) = lab.wait_exit(P, Duration::from_secs(5)).unwrap();
    assert_eq!(code, 0, "p after stop:\n{log}");
    assert!(stopping.elapsed() < Duration::from_secs(15), "p took {:?} to stop", stopping.elapsed());
    forwarding.check_unchanged("the image was built and the lab ran").unwrap();
}

#[test]
fn vmpls_frr_image_refuses_bad_input_with_a_reason() {
    if !is_root() {
        eprintln!("skipped: needs root (containers)");
        return;
    }
    let engine = Engine::pick().expect("a container engine");
    let image = Image::build(&engine).expect("building the image");
    let tag = image.tag.as_str();

    let (code, log) = engine.run_to_end(&["--network", "none", tag]).unwrap();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("lacks the capabilities NET_ADMIN NET_RAW BPF"), "{log}");

    let (code, log) = engine
        .run_to_end(&["--network", "none", "--privileged", "-e", "VMPLS_WAIT_INTERFACES=1", tag])
        .unwrap();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("no data interfaces after 1 s"), "{log}");

    // The kernel forwarding on a data interface (lo stands for one here) where /proc/sys
    // is read-only (capabilities without --privileged).
    let caps = ["--cap-add", "NET_ADMIN", "--cap-add", "NET_RAW", "--cap-add", "BPF"];
    let mut args = vec!["--network", "none", "--sysctl", "net.ipv4.conf.all.forwarding=1"];
    args.extend(caps);
    args.extend(["-e", "VMPLS_INTERFACES=lo", tag]);
    let (code, log) = engine.run_to_end(&args).unwrap();
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains(
            "the kernel forwards IP on lo (net/ipv4/conf/lo/forwarding=1) and /proc/sys is read-only"
        ),
        "{log}"
    );
    assert!(!log.contains("Read-only file system"), "the refusal is one clear line: {log}");

    // A mounted /etc/vmpls/vmpls.toml is the one vmpls runs: a wrong one stops the
    // container with vmpls's reason, at its line, before FRR starts.
    let dir = TempDir::new("container-config");
    let config = dir.path().join("vmpls.toml");
    std::fs::write(&config, "[router]\nname = \"r1\"\nfast-paht = \"off\"\n").unwrap();
    let bind = format!("{}:/etc/vmpls/vmpls.toml:ro", config.display());
    let (code, log) = engine
        .run_to_end(&["--network", "none", "--privileged", "-e", "VMPLS_INTERFACES=lo", "-v", &bind, tag])
        .unwrap();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("vmpls config: /etc/vmpls/vmpls.toml (mounted)"), "{log}");
    assert!(log.contains("/etc/vmpls/vmpls.toml:3:1: unknown field `fast-paht`"), "{log}");
    assert!(log.contains("vmpls refuses /etc/vmpls/vmpls.toml"), "{log}");
    assert!(!log.contains("applied /etc/frr/frr.conf"), "FRR started around a refused config: {log}");

    // A module of another FRR (its version string is what the entrypoint reads first;
    // zebra's own refusal is the frr tests' business).
    let dir = TempDir::new("container-module");
    let fake = dir.path().join("vmpls_zebra.so");
    std::fs::write(&fake, b"\0VMPLS frr 7.5.1-1.1\0").unwrap();
    let bind = format!("{}:/tmp/other.so:ro", fake.display());
    let (code, log) = engine
        .run_to_end(&[
            "--network",
            "none",
            "--privileged",
            "-v",
            &bind,
            "-e",
            "VMPLS_ZEBRA_MODULE=/tmp/other.so",
            tag,
        ])
        .unwrap();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("was built for frr 7.5.1-1.1, this image runs frr"), "{log}");
}
