//! Segment routing (OSPF prefix SIDs, no LDP) through vmpls in FRR mode:
//! ce1 -- pe1 -- p -- pe2 -- ce2, FRR (zebra with our module + dplane_fpm_nl, staticd,
//! ospfd with `segment-routing on`) in each router namespace and one `vmpls run` beside
//! it; the kernels own the addresses and forward nothing.
//!
//! - SRGB 16000-23999 on every router; prefix SIDs on the loopbacks: pe1 198.18.255.1
//!   index 1 with `no-php-flag` (p swaps 16001 to 16001, pe1 pops its own label and
//!   routes the packet), p 198.18.255.2 index 2 and pe2 198.18.255.3 index 3 with
//!   penultimate-hop popping (p pops 16003): both ways of ending an SR path are used.
//! - FRR's `show mpls table json` on each router has the SR labels 16000+index of the
//!   other routers with the expected out labels, and vmpls's label table equals it
//!   entry for entry (next hop, interface, out labels), with protocol `ospf`; the
//!   labelled OSPF and static IP routes are equal too.
//! - Traffic: ping from ce1 to pe2's loopback follows the OSPF route whose next hop
//!   pushes pe2's SID (pe1) and p's SR LSP (pop); a content-checked TCP flow ce1 -> ce2
//!   runs over labelled static routes that push the far PE's SID (pe1: 16003, pe2:
//!   16001; p pops 16003 and swaps 16001, pe1 pops 16001 and routes). Captures at p
//!   show on the wire exactly the SR labels expected, and the routers' kernels
//!   forwarded no datagram.
//! - Not checked, printed: a packet for a router's own address that arrives under its
//!   own label (pe1's SID without PHP) is dropped (`local_after_pop`: under
//!   `HostStack::Kernel` vmpls cannot hand it to the kernel), so ce2 cannot ping pe1's
//!   loopback.
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
use vmpls_lab::frr::{self, OspfInterface};
use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};
use vmpls_lab::{IpPrefix, Topology};

/// The SRGB every router uses.
const SRGB: (u32, u32) = (16000, 23999);

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

fn sid(index: u32) -> u32 {
    SRGB.0 + index
}

#[test]
fn ospf_segment_routing_labels_reach_vmpls_and_the_wire() {
    if !is_root() {
        eprintln!("skipping frr_sr: needs root (network namespaces, FRR daemons)");
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
    let mut lab = Lab::new("frr-sr", t);

    // (router, SID index, extra flag)
    let sids: [(&str, u32, &str); 3] = [("pe1", 1, " no-php-flag"), ("p", 2, ""), ("pe2", 3, "")];
    let ospf_sr = |name: &str| {
        let (_, index, flag) = sids.iter().find(|s| s.0 == name).unwrap();
        let id = index;
        format!(
            "router ospf\n capability opaque\n router-info area\n segment-routing on\n \
             segment-routing global-block {} {}\n segment-routing prefix 198.18.255.{id}/32 index {index}{flag}\nexit\n",
            SRGB.0, SRGB.1
        )
    };
    let routers = [
        RouterSpec {
            name: "pe1",
            id: 1,
            ports: vec!["pe1-ce1", "pe1-p"],
            ospf: vec![OspfInterface::p2p("pe1-p"), OspfInterface::passive("pe1-ce1")],
            ldp: vec![],
            ospfd_extra: ospf_sr("pe1"),
            isis: vec![],
            isisd_extra: String::new(),
        },
        RouterSpec {
            name: "p",
            id: 2,
            ports: vec!["p-pe1", "p-pe2"],
            ospf: vec![OspfInterface::p2p("p-pe1"), OspfInterface::p2p("p-pe2")],
            ldp: vec![],
            ospfd_extra: ospf_sr("p"),
            isis: vec![],
            isisd_extra: String::new(),
        },
        RouterSpec {
            name: "pe2",
            id: 3,
            ports: vec!["pe2-p", "pe2-ce2"],
            ospf: vec![OspfInterface::p2p("pe2-p"), OspfInterface::passive("pe2-ce2")],
            ldp: vec![],
            ospfd_extra: ospf_sr("pe2"),
            isis: vec![],
            isisd_extra: String::new(),
        },
    ];
    let names: Vec<&str> = routers.iter().map(|r| r.name).collect();
    for r in &routers {
        lab.start_vmpls(r);
    }
    for r in &routers {
        lab.start_frr(r, &module);
    }
    let kernel_fwd_before: Vec<u64> = names.iter().map(|r| lab.kernel_forwarded(r)).collect();

    // Converged: every router has the other routers' prefix SIDs in zebra's label table.
    let conv_start = Instant::now();
    loop {
        lab.check_running();
        let missing: Vec<String> = names
            .iter()
            .flat_map(|&r| {
                let table = frr_labels(lab.frr(r));
                sids.iter()
                    .filter(|s| s.0 != r && !table.contains_key(&sid(s.1)))
                    .map(|s| format!("{r} lacks {} ({}'s SID)", sid(s.1), s.0))
                    .collect::<Vec<_>>()
            })
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(conv_start.elapsed() < Duration::from_secs(30), "SR did not converge in 30 s: {missing:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("SR labels in zebra on all routers {:?} after FRR start", conv_start.elapsed());
    for r in lab.frr.values() {
        assert_eq!(r.config_errors(), Vec::<String>::new(), "{} refused config lines", r.options().hostname);
    }
    // The CE subnets over the SR paths: pe1 pushes pe2's prefix SID toward ce2's subnet,
    // pe2 pushes pe1's toward ce1's. Added once staticd is connected to zebra: staticd
    // refuses labelled routes in its config file at start ("MPLS not turned on in
    // kernel": it learns that MPLS is on from zebra only after it read its config).
    for (router, route) in [
        ("pe1", format!("ip route 198.18.2.0/24 198.18.10.2 label {}", sid(3))),
        ("pe2", format!("ip route 198.18.1.0/24 198.18.20.1 label {}", sid(1))),
    ] {
        lab.frr(router).vtysh(&["configure terminal", &route]).unwrap();
    }
    let took = wait_tables_equal(&mut lab, &names, Duration::from_secs(20), "after SR converged");
    eprintln!("vmpls's tables equal FRR's on all routers {took:?} later");

    // What each router does with each SID: p pops (PHP) the SIDs of its neighbours but
    // pe1's (no-php-flag); pe1 and pe2 swap each other's SID to itself.
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
        assert_eq!(proto, "ospf", "{router} {label}: the protocol vmpls shows");
    }
    // pe1's own SID without PHP: zebra pops it out of lo, vmpls pops and routes.
    let own = lab.frr("pe1").mpls_table().unwrap();
    let own = &own.get(&sid(1)).unwrap_or_else(|| panic!("pe1 has no LSP for its own SID: {own:?}")).nexthops;
    assert!(own.len() == 1 && own[0].via.is_none() && own[0].interface.as_deref() == Some("lo"), "{own:?}");
    assert_eq!(vmpls_labels(&lab, "pe1")[&sid(1)].0, "lookup");
    // Every label vmpls holds came from ospfd (prefix and adjacency SIDs alike).
    for r in &names {
        let vm = vmpls_labels(&lab, r);
        eprintln!("{r}: vmpls label table: {vm:?}");
        for (label, (_, _, proto)) in &vm {
            assert_eq!(proto, "ospf", "{r}: label {label}");
        }
    }
    // pe1: the OSPF route to pe2's loopback pushes pe2's SID; the static route to ce2's
    // subnet too.
    let routes = vmpls_routes(&lab, "pe1");
    let hop = |l: u32| BTreeSet::from([(Some(ip("198.18.10.2")), Some("pe1-p".to_string()), vec![l])]);
    assert_eq!(routes.get("198.18.255.3/32"), Some(&("ospf".to_string(), hop(sid(3)))), "{routes:?}");
    assert_eq!(routes.get("198.18.2.0/24"), Some(&("static".to_string(), hop(sid(3)))), "{routes:?}");

    // Traffic, captured at p on both sides.
    let p_ns = lab.ns("p");
    let west = Capture::start(&p_ns, "p-pe1", &lab.dir.join("p-pe1.pcap"), Some("mpls")).unwrap();
    let east = Capture::start(&p_ns, "p-pe2", &lab.dir.join("p-pe2.pcap"), Some("mpls")).unwrap();
    let out = lab
        .topo
        .run_timeout(
            "ce1",
            cmd(&["ping", "-c", "3", "-i", "0.2", "-W", "2", "198.18.255.3"]),
            Duration::from_secs(15),
        )
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if std::env::var_os("DEBUG_PAUSE").is_some() {
        eprintln!("PAUSE {}", lab.ns("p"));
        std::thread::sleep(Duration::from_secs(150));
    }
    assert!(text.contains(" 3 received") && !text.contains("DUP!"), "ping ce1 -> pe2's loopback: {text}");
    let opts = FlowOptions {
        limit: Limit::Bytes(8 << 20),
        deadline: Some(Duration::from_secs(30)),
        ..FlowOptions::default()
    };
    let flow = run_flow(&lab.ns("ce1"), &lab.ns("ce2"), ip("198.18.2.2"), &opts, &mut |_| {}).unwrap();
    eprintln!("TCP ce1 -> ce2 over SR: {flow:?}");
    assert!(flow.content_ok && flow.bytes_received == 8 << 20, "{flow:?}");
    let (west, east) = (west.stop().unwrap(), east.stop().unwrap());
    let (w, e) = (labels_on_wire(&west), labels_on_wire(&east));
    eprintln!("labels on the wire (label: frames): p-pe1 {w:?}, p-pe2 {e:?}");
    // pe1 -> p: pe2's SID (ping and TCP data); p -> pe1: pe1's SID (TCP acks; no PHP).
    // pe2 -> p: pe1's SID (TCP acks); p -> pe2: nothing labelled (p popped pe2's SID).
    assert_eq!(w.keys().copied().collect::<Vec<_>>(), [sid(1), sid(3)], "p-pe1: {w:?}");
    assert_eq!(e.keys().copied().collect::<Vec<_>>(), [sid(1)], "p-pe2: {e:?}");
    assert!(w[&sid(3)] >= 3 + 100 && w[&sid(1)] >= 10 && e[&sid(1)] >= 10, "{w:?} {e:?}");

    // Known limitation (printed, not checked): pe1's loopback from ce2 arrives under
    // pe1's own SID, which vmpls pops, and the packet for the router is dropped.
    let out = lab
        .topo
        .run_timeout(
            "ce2",
            cmd(&["ping", "-c", "2", "-i", "0.2", "-W", "1", "198.18.255.1"]),
            Duration::from_secs(10),
        )
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "known limitation: ping ce2 -> pe1's loopback (under pe1's SID, no PHP): {}; pe1's drops: {:?}",
        text.lines().find(|l| l.contains("transmitted")).unwrap_or_default(),
        nonzero(&lab.cli("pe1", &["stats"])["drops"])
    );
    let kernel_fwd_after: Vec<u64> = names.iter().map(|r| lab.kernel_forwarded(r)).collect();
    assert_eq!(kernel_fwd_after, kernel_fwd_before, "the routers' kernels forwarded datagrams ({names:?})");
    for r in &names {
        let st = lab.cli(r, &["stats"]);
        eprintln!("{r}: frr counters {:?}, drops {:?}", nonzero(&st["frr"]), nonzero(&st["drops"]));
    }
    lab.check_running();
    eprintln!("frr_sr done in {:?}", started.elapsed());
}
