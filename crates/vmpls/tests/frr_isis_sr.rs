//! IS-IS segment routing through vmpls in FRR mode: ce1 -- pe1 -- p -- pe2 -- ce2, FRR
//! (zebra with our module + dplane_fpm_nl, staticd, isisd with `segment-routing on`) in
//! each router namespace and one `vmpls run` beside it; the kernels own the addresses
//! and forward nothing.
//!
//! - IS-IS level 2, point-to-point core links, SRGB 16000-23999 on every router; prefix
//!   SIDs on the loopbacks: pe1 198.18.255.1 index 1 with `no-php-flag` (p swaps 16001
//!   to 16001, pe1 pops its own label and routes the packet), p index 2 and pe2 index 3
//!   with penultimate-hop popping. isisd gives each adjacency an adjacency SID of its
//!   own (a label of the SRLB, 15000-15999) that pops and sends to that neighbour.
//! - vmpls starts with `fast-path = "tc"`: IS-IS hellos (LLC frames to 01:80:c2:00:00:15)
//!   reach isisd past the fast path's programs and the pipeline, the adjacencies come
//!   up; `show isis segment-routing node` on each router knows every router's SRGB;
//!   FRR's `show mpls table` equals vmpls's label table entry for entry (prefix and
//!   adjacency SIDs, protocol `isis`), the labelled IS-IS and static routes too.
//! - Traffic with the fast path on, then (vmpls restarted) off: ping from ce1 to pe2's
//!   loopback follows the IS-IS route that pushes pe2's prefix SID (16003, popped by p);
//!   a content-checked TCP flow ce1 -> ce2 runs over a static route on pe1 that pushes
//!   p's adjacency SID toward pe2 (p pops it and hands the packet to pe2) and back over
//!   one on pe2 that pushes pe1's prefix SID (16001: p swaps, pe1 pops). Captures at p
//!   show exactly these labels on the wire, and the routers' kernels forwarded no
//!   datagram.
//!
//! Needs root (skipped otherwise); installs Debian's frr if missing; the zebra module
//! comes from `VMPLS_ZEBRA_MODULE` or `scripts/build-zebra-module`.
mod frr_common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use frr_common::*;
use serde_json::Value;
use vmpls_lab::capture::{Capture, tshark_fields};
use vmpls_lab::frr::{self, IsisInterface};
use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};
use vmpls_lab::{IpPrefix, Topology};

/// The SRGB every router uses.
const SRGB: (u32, u32) = (16000, 23999);

fn sid(index: u32) -> u32 {
    SRGB.0 + index
}

/// The labels tshark finds in `pcap`.
fn labels_on_wire(pcap: &Path) -> BTreeMap<u32, usize> {
    let rows = tshark_fields(pcap, "mpls", &["mpls.label"], Duration::from_secs(30)).unwrap();
    let mut seen = BTreeMap::new();
    for row in rows {
        for l in row[0].split(',').filter(|s| !s.is_empty()) {
            *seen.entry(l.parse::<u32>().unwrap()).or_insert(0) += 1;
        }
    }
    seen
}

/// A counter of a `vmpls -j stats` list.
fn counter(list: &Value, name: &str) -> u64 {
    list.as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .and_then(|c| c["value"].as_u64())
        .unwrap_or(0)
}

/// The counters of a `vmpls -j stats` list that are not zero.
fn nonzero(counters: &Value) -> Vec<String> {
    counters
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|c| c["value"].as_u64() != Some(0))
        .map(|c| format!("{}={}", c["name"].as_str().unwrap_or_default(), c["value"]))
        .collect()
}

/// The MAC address of `ifname` on `host`.
fn mac(lab: &Lab, host: &str, ifname: &str) -> String {
    let out = lab
        .topo
        .run_timeout(host, cmd(&["ip", "-br", "link", "show", "dev", ifname]), Duration::from_secs(5))
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mac =
        text.split_whitespace().nth(2).unwrap_or_else(|| panic!("ip -br link show dev {ifname}: {text}"));
    assert_eq!(mac.len(), 17, "{ifname}: {text}");
    mac.to_string()
}

/// `router`'s adjacency SID toward `neighbor`: the IS-IS SR label outside the SRGB
/// that zebra pops out to that next hop.
fn adjacency_sid(lab: &Lab, router: &str, neighbor: &str) -> u32 {
    let table = lab.frr(router).mpls_table().unwrap();
    let adj: Vec<u32> = table
        .values()
        .filter(|lsp| {
            lsp.in_label < SRGB.0
                && lsp.nexthops.iter().any(|n| {
                    n.kind.contains("SR")
                        && n.via == Some(ip(neighbor))
                        && without_implicit_null(&n.out_labels).is_empty()
                })
        })
        .map(|lsp| lsp.in_label)
        .collect();
    assert_eq!(adj.len(), 1, "{router}: one adjacency SID toward {neighbor}: {table:?}");
    adj[0]
}

#[test]
fn isis_segment_routing_labels_reach_vmpls_and_the_wire() {
    if !is_root() {
        eprintln!("skipping frr_isis_sr: needs root (network namespaces, FRR daemons)");
        return;
    }
    let started = Instant::now();
    frr::ensure_frr_installed().unwrap();
    let module = zebra_module();

    let mut t = Topology::new();
    for h in ["ce1", "pe1", "p", "pe2", "ce2"] {
        t.add_host(h).unwrap();
    }
    t.add_link("ce1", "ce1-pe1", "pe1", "pe1-ce1", 1500).unwrap();
    t.add_link("pe1", "pe1-p", "p", "p-pe1", 1500).unwrap();
    t.add_link("p", "p-pe2", "pe2", "pe2-p", 1500).unwrap();
    t.add_link("pe2", "pe2-ce2", "ce2", "ce2-pe2", 1500).unwrap();
    for (host, ifname, addr) in [
        ("ce1", "ce1-pe1", "198.18.1.2/24"),
        ("pe1", "pe1-ce1", "198.18.1.1/24"),
        ("pe1", "pe1-p", "198.18.10.1/24"),
        ("p", "p-pe1", "198.18.10.2/24"),
        ("p", "p-pe2", "198.18.20.1/24"),
        ("pe2", "pe2-p", "198.18.20.2/24"),
        ("pe2", "pe2-ce2", "198.18.2.1/24"),
        ("ce2", "ce2-pe2", "198.18.2.2/24"),
    ] {
        t.add_address(host, ifname, addr.parse::<IpPrefix>().unwrap()).unwrap();
    }
    t.add_default_route("ce1", ip("198.18.1.1")).unwrap();
    t.add_default_route("ce2", ip("198.18.2.1")).unwrap();
    let mut lab = Lab::new("frr-isis-sr", t);

    // (router, SID index, extra flag)
    let sids: [(&str, u32, &str); 3] = [("pe1", 1, " no-php-flag"), ("p", 2, ""), ("pe2", 3, "")];
    let isis_sr = |name: &str| {
        let (_, index, flag) = sids.iter().find(|s| s.0 == name).unwrap();
        format!(
            "router isis 1\n segment-routing on\n segment-routing global-block {} {}\n \
             segment-routing prefix 198.18.255.{index}/32 index {index}{flag}\nexit\n",
            SRGB.0, SRGB.1
        )
    };
    let spec = |name: &'static str, id: u8, ports: [&'static str; 2], isis: Vec<IsisInterface>| RouterSpec {
        name,
        id,
        ports: ports.to_vec(),
        ospf: vec![],
        ldp: vec![],
        ospfd_extra: String::new(),
        isis,
        isisd_extra: isis_sr(name),
    };
    let routers = [
        spec(
            "pe1",
            1,
            ["pe1-ce1", "pe1-p"],
            vec![IsisInterface::p2p("pe1-p"), IsisInterface::passive("pe1-ce1")],
        ),
        spec("p", 2, ["p-pe1", "p-pe2"], vec![IsisInterface::p2p("p-pe1"), IsisInterface::p2p("p-pe2")]),
        spec(
            "pe2",
            3,
            ["pe2-p", "pe2-ce2"],
            vec![IsisInterface::p2p("pe2-p"), IsisInterface::passive("pe2-ce2")],
        ),
    ];
    let names: Vec<&str> = routers.iter().map(|r| r.name).collect();
    // The adjacencies form with the fast path's programs on the ports.
    lab.fast_path = true;
    for r in &routers {
        lab.start_vmpls(r);
    }
    for r in &routers {
        lab.start_frr(r, &module);
    }
    let kernel_fwd_before: Vec<u64> = names.iter().map(|r| lab.kernel_forwarded(r)).collect();

    // Converged: the adjacencies are up and every router has the other routers' prefix
    // SIDs in zebra's label table.
    let conv_start = Instant::now();
    let adjacencies = [("pe1", 1), ("p", 2), ("pe2", 1)];
    loop {
        lab.check_running();
        let mut missing: Vec<String> = Vec::new();
        for (r, want) in adjacencies {
            let up = lab.frr(r).isis_up_adjacencies().unwrap();
            if up != want {
                missing.push(format!("{r} has {up} of {want} IS-IS adjacencies up"));
            }
            let table = frr_labels(lab.frr(r));
            for s in sids.iter().filter(|s| s.0 != r && !table.contains_key(&sid(s.1))) {
                missing.push(format!("{r} lacks {} ({}'s SID)", sid(s.1), s.0));
            }
        }
        if missing.is_empty() {
            break;
        }
        assert!(
            conv_start.elapsed() < Duration::from_secs(30),
            "IS-IS SR did not converge in 30 s: {missing:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "IS-IS adjacencies and SR labels in zebra on all routers {:?} after FRR start",
        conv_start.elapsed()
    );
    for r in lab.frr.values() {
        assert_eq!(r.config_errors(), Vec::<String>::new(), "{} refused config lines", r.options().hostname);
    }
    eprintln!("p: show isis neighbor:\n{}", lab.frr("p").vtysh(&["show isis neighbor"]).unwrap());
    // Every router knows every router's SRGB.
    for r in &names {
        let nodes = lab.frr(r).vtysh(&["show isis segment-routing node"]).unwrap();
        eprintln!("{r}: show isis segment-routing node:\n{nodes}");
        let srgbs = nodes.lines().filter(|l| l.contains(&format!("{}", SRGB.0))).count();
        assert!(srgbs >= 3, "{r}: show isis segment-routing node:\n{nodes}");
    }
    // The explicit paths, added once staticd is connected to zebra (it refuses labelled
    // routes in its config file at start): pe1 reaches ce2's subnet by p's adjacency SID
    // toward pe2, pe2 reaches ce1's by pe1's prefix SID.
    let p_adj_pe2 = adjacency_sid(&lab, "p", "198.18.20.2");
    for (router, route) in [
        ("pe1", format!("ip route 198.18.2.0/24 198.18.10.2 label {p_adj_pe2}")),
        ("pe2", format!("ip route 198.18.1.0/24 198.18.20.1 label {}", sid(1))),
    ] {
        lab.frr(router).vtysh(&["configure terminal", &route]).unwrap();
    }
    let took = wait_tables_equal(&mut lab, &names, Duration::from_secs(20), "after IS-IS SR converged");
    eprintln!("vmpls's tables equal FRR's on all routers {took:?} later");

    // What each router does with each prefix SID: p pops (PHP) the SIDs of its
    // neighbours but pe1's (no-php-flag); pe1 and pe2 swap each other's SID to itself.
    let php = |owner: &str| sids.iter().find(|s| s.0 == owner).unwrap().2.is_empty();
    // (router, SID owner, next hop, its interface, the next hop is the owner)
    let expect = [
        ("pe1", "p", "198.18.10.2", "pe1-p", true),
        ("pe1", "pe2", "198.18.10.2", "pe1-p", false),
        ("p", "pe1", "198.18.10.1", "p-pe1", true),
        ("p", "pe2", "198.18.20.2", "p-pe2", true),
        ("pe2", "pe1", "198.18.20.1", "pe2-p", false),
        ("pe2", "p", "198.18.20.1", "pe2-p", true),
    ];
    for (router, owner, via, dev, next_is_owner) in expect {
        let label = sid(sids.iter().find(|s| s.0 == owner).unwrap().1);
        let out: Vec<u32> = if next_is_owner && php(owner) { vec![] } else { vec![label] };
        let lsps = lab.frr(router).mpls_table().unwrap();
        let lsp = lsps.get(&label).unwrap_or_else(|| panic!("{router}: no LSP {label}: {lsps:?}"));
        assert_eq!(lsp.nexthops.len(), 1, "{router} {label}: {lsp:?}");
        let n = &lsp.nexthops[0];
        assert!(n.kind.contains("SR"), "{router} {label}: {n:?}");
        assert_eq!(
            (n.via, without_implicit_null(&n.out_labels)),
            (Some(ip(via)), out.clone()),
            "{router} {label}: {n:?}"
        );
        let vm = vmpls_labels(&lab, router);
        let (action, hops, proto) =
            vm.get(&label).unwrap_or_else(|| panic!("{router}: vmpls has no label {label}: {vm:?}"));
        assert_eq!(action, "forward");
        assert_eq!(hops, &BTreeSet::from([(Some(ip(via)), Some(dev.to_string()), out)]), "{router} {label}");
        assert_eq!(proto, "isis", "{router} {label}: the protocol vmpls shows");
    }
    // Adjacency SIDs: one per adjacency, each popping toward its neighbour, in vmpls too.
    for (router, neighbor, dev) in [
        ("pe1", "198.18.10.2", "pe1-p"),
        ("p", "198.18.10.1", "p-pe1"),
        ("p", "198.18.20.2", "p-pe2"),
        ("pe2", "198.18.20.1", "pe2-p"),
    ] {
        let label = adjacency_sid(&lab, router, neighbor);
        let vm = vmpls_labels(&lab, router);
        assert_eq!(
            vm.get(&label),
            Some(&(
                "forward".to_string(),
                BTreeSet::from([(Some(ip(neighbor)), Some(dev.to_string()), vec![])]),
                "isis".to_string()
            )),
            "{router}: adjacency SID {label} toward {neighbor}"
        );
    }
    // pe1's own SID without PHP: zebra pops it out of lo, vmpls pops and routes.
    assert_eq!(vmpls_labels(&lab, "pe1")[&sid(1)].0, "lookup");
    // Every label vmpls holds came from isisd (prefix and adjacency SIDs alike).
    for r in &names {
        let vm = vmpls_labels(&lab, r);
        eprintln!("{r}: vmpls label table: {vm:?}");
        for (label, (_, _, proto)) in &vm {
            assert_eq!(proto, "isis", "{r}: label {label}");
        }
    }
    // pe1: the IS-IS route to pe2's loopback pushes pe2's SID; the static route to ce2's
    // subnet p's adjacency SID.
    let routes = vmpls_routes(&lab, "pe1");
    let hop = |l: u32| BTreeSet::from([(Some(ip("198.18.10.2")), Some("pe1-p".to_string()), vec![l])]);
    assert_eq!(routes.get("198.18.255.3/32"), Some(&("isis".to_string(), hop(sid(3)))), "{routes:?}");
    assert_eq!(routes.get("198.18.2.0/24"), Some(&("static".to_string(), hop(p_adj_pe2))), "{routes:?}");

    // Traffic with the fast path, then through the pipeline.
    for fast_path in [true, false] {
        let mode = if fast_path { "fast path" } else { "pipeline" };
        if !fast_path {
            let restarted = Instant::now();
            for r in &routers {
                lab.restart_vmpls(r, false);
            }
            let took = wait_tables_equal(&mut lab, &names, Duration::from_secs(30), "after vmpls restarted");
            eprintln!(
                "[{:.1?}] vmpls restarted without the fast path: tables equal FRR's after {took:?}",
                started.elapsed()
            );
            assert!(restarted.elapsed() < Duration::from_secs(30));
            for (r, want) in adjacencies {
                assert_eq!(lab.frr(r).isis_up_adjacencies().unwrap(), want, "{r}: IS-IS adjacencies");
            }
        }
        // Each direction of each core link is captured where it arrives, by its source
        // MAC: frames the fast path hands on (`bpf_redirect_peer`) skip the sending
        // veth's taps and are seen only by the receiving one.
        let captures: Vec<(&str, Capture)> = [
            ("pe1", "pe1-p", "p", "p-pe1"),
            ("p", "p-pe1", "pe1", "pe1-p"),
            ("p", "p-pe2", "pe2", "pe2-p"),
            ("pe2", "pe2-p", "p", "p-pe2"),
        ]
        .into_iter()
        .map(|(host, ifname, from_host, from_if)| {
            let path = lab.dir.join(format!("{ifname}-{mode}.pcap").replace(' ', "-"));
            let filter = format!("mpls and ether src {}", mac(&lab, from_host, from_if));
            (ifname, Capture::start(&lab.ns(host), ifname, &path, Some(&filter)).unwrap())
        })
        .collect();
        let out = lab
            .topo
            .run_timeout(
                "ce1",
                cmd(&["ping", "-c", "3", "-i", "0.2", "-W", "2", "198.18.255.3"]),
                Duration::from_secs(15),
            )
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(" 3 received") && !text.contains("DUP!"),
            "{mode}: ping ce1 -> pe2's loopback: {text}"
        );
        let opts = FlowOptions {
            limit: Limit::Bytes(8 << 20),
            deadline: Some(Duration::from_secs(30)),
            ..FlowOptions::default()
        };
        let flow = run_flow(&lab.ns("ce1"), &lab.ns("ce2"), ip("198.18.2.2"), &opts, &mut |_| {}).unwrap();
        eprintln!("{mode}: TCP ce1 -> ce2 over IS-IS SR: {flow:?}");
        assert!(flow.content_ok && flow.bytes_received == 8 << 20, "{mode}: {flow:?}");
        // Stopped and read in parallel: each stop waits for dumpcap to drain.
        let seen: BTreeMap<&str, BTreeMap<u32, usize>> = std::thread::scope(|scope| {
            let running: Vec<_> = captures
                .into_iter()
                .map(|(ifname, c)| (ifname, scope.spawn(move || labels_on_wire(&c.stop().unwrap()))))
                .collect();
            running.into_iter().map(|(ifname, t)| (ifname, t.join().unwrap())).collect()
        });
        eprintln!("[{:.1?}] {mode}: labels arriving (interface: label: frames): {seen:?}", started.elapsed());
        let labels = |ifname: &str| seen[ifname].keys().copied().collect::<Vec<_>>();
        // pe1 -> p: pe2's prefix SID (ping), p's adjacency SID toward pe2 (TCP data);
        // p -> pe1: pe1's prefix SID (TCP acks; no PHP). pe2 -> p: pe1's prefix SID (TCP
        // acks); p -> pe2: nothing labelled (p popped pe2's SID and its adjacency SID).
        let mut to_p = vec![p_adj_pe2, sid(3)];
        to_p.sort_unstable();
        assert_eq!(labels("p-pe1"), to_p, "{mode}: pe1 -> p: {seen:?}");
        assert_eq!(labels("pe1-p"), [sid(1)], "{mode}: p -> pe1: {seen:?}");
        assert_eq!(labels("p-pe2"), [sid(1)], "{mode}: pe2 -> p: {seen:?}");
        assert_eq!(labels("pe2-p"), Vec::<u32>::new(), "{mode}: p -> pe2: {seen:?}");
        let (pe1_p, p_pe1, p_pe2) = (&seen["pe1-p"], &seen["p-pe1"], &seen["p-pe2"]);
        assert!(p_pe1[&sid(3)] >= 3 && p_pe1[&p_adj_pe2] >= 20, "{mode}: {seen:?}");
        assert!(pe1_p[&sid(1)] >= 10 && p_pe2[&sid(1)] >= 10, "{mode}: {seen:?}");
        if fast_path {
            // p switched the flow in the kernel: pops of the adjacency SID, swaps of 16001.
            let st = lab.cli("p", &["stats"]);
            let fp = &st["fast_path"];
            eprintln!("p's fast path counters: {:?}", nonzero(fp));
            assert!(counter(fp, "swap") >= 10, "p's fast path swapped pe1's SID: {fp}");
            assert!(counter(fp, "pop") >= 20, "p's fast path popped the adjacency SID: {fp}");
        }
    }
    let kernel_fwd_after: Vec<u64> = names.iter().map(|r| lab.kernel_forwarded(r)).collect();
    assert_eq!(kernel_fwd_after, kernel_fwd_before, "the routers' kernels forwarded datagrams ({names:?})");
    for r in &names {
        let st = lab.cli(r, &["stats"]);
        // IS-IS frames went to isisd: counted as the kernel's, never dropped.
        assert!(counter(&st["events"], "left_to_kernel") > 0, "{r}: {}", st["events"]);
        assert_eq!(counter(&st["drops"], "unknown_ethertype"), 0, "{r}: {}", st["drops"]);
        eprintln!(
            "{r}: frr counters {:?}, events {:?}, drops {:?}",
            nonzero(&st["frr"]),
            nonzero(&st["events"]),
            nonzero(&st["drops"])
        );
    }
    lab.check_running();
    eprintln!("frr_isis_sr done in {:?}", started.elapsed());
}
