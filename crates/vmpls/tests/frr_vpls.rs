//! A VPLS instance (RFC 4762) whose pseudowires an unmodified FRR ldpd signals and vmpls
//! carries, end to end: three PEs around a P router, OSPF + LDP in the core, each router
//! FRR (zebra with our module) and `vmpls run` in FRR mode; on each PE ldpd's
//! `l2vpn BLUE type vpls` with a `member pseudowire` to each other PE (a full mesh) and
//! vmpls's `[[vpls]]` whose `[[vpls.pseudowire]]`s have the same names and no labels.
//!
//! ```text
//!   ce1a (.11) ─┐                                       198.18.50.0/24 across
//!   ce1b (.12) ─┴ pe1 [198.18.255.1] ── p [.2] ── pe2 [.3] ── ce2 (.2)
//!                                       │
//!                                      pe3 [.4] ── ce3 (.3)
//! pw-id: pe1-pe2 12, pe1-pe3 13, pe2-pe3 23; member names bl-peN on each PE
//! ```
//!
//! - ldpd brings all six pseudowire ends up (`show l2vpn atom vc json`), and vmpls has
//!   each member up with the labels ldpd signalled (`show l2vpn atom binding json`);
//! - every CE pings every other across the PEs, and a content-checked TCP flow crosses;
//! - `bridge fdb show vpls blue` has each CE's MAC on the right attachment circuit or
//!   pseudowire, at every PE;
//! - pe3's only attachment circuit down: FRR shows pe3's members down with vmpls's reason
//!   (`attachment down`, in zebra's log); up again, they come back and carry traffic.
//!
//! Needs root (skipped otherwise); installs Debian's `frr` if missing. The zebra module
//! comes from `VMPLS_ZEBRA_MODULE`, else `scripts/build-zebra-module` builds it.

mod frr_common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use frr_common::*;
use serde_json::Value;
use vmpls_lab::frr::{self, Daemon, OspfInterface};
use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};
use vmpls_lab::{IpPrefix, Topology};

/// How long ldpd may take to bring the pseudowires up (sessions, then label mappings).
const PW_UP: Duration = Duration::from_secs(30);

/// An attachment circuit: (PE interface, CE host, CE address).
type Ac = (&'static str, &'static str, &'static str);

/// The PEs: (name, loopback id, core interface, P's interface toward it, attachment
/// circuits).
const PES: [(&str, u8, &str, &str, &[Ac]); 3] = [
    (
        "pe1",
        1,
        "pe1-p",
        "p-pe1",
        &[("pe1-ce1a", "ce1a", "198.18.50.11"), ("pe1-ce1b", "ce1b", "198.18.50.12")],
    ),
    ("pe2", 3, "pe2-p", "p-pe2", &[("pe2-ce2", "ce2", "198.18.50.2")]),
    ("pe3", 4, "pe3-p", "p-pe3", &[("pe3-ce3", "ce3", "198.18.50.3")]),
];

/// The pw-id of the pseudowire between PEs `a` and `b` (1, 2, 3).
fn pw_id(a: usize, b: usize) -> usize {
    10 * a.min(b) + a.max(b)
}

/// PE `i`'s (1-based) member name for its pseudowire to PE `j`.
fn member(j: usize) -> String {
    format!("bl-pe{j}")
}

/// The other PEs than PE `me` (1-based): (index, loopback id).
fn others(me: usize) -> impl Iterator<Item = (usize, u8)> {
    PES.iter().enumerate().map(|(j, p)| (j + 1, p.1)).filter(move |&(j, _)| j != me)
}

/// A CE's interface toward its PE.
fn ce_ifname(ce: &str) -> String {
    format!("{ce}-pe")
}

/// The members of VPLS blue in `pe`'s `vpls show`, by name.
fn vmpls_members(lab: &Lab, pe: &str) -> BTreeMap<String, Value> {
    let v = lab.cli(pe, &["vpls", "show"]);
    let inst = v.as_array().and_then(|a| a.iter().find(|i| i["name"] == "blue")).cloned().unwrap_or_default();
    inst["pseudowires"]
        .as_array()
        .map(|a| a.iter().map(|p| (p["name"].as_str().unwrap_or_default().to_string(), p.clone())).collect())
        .unwrap_or_default()
}

/// ldpd's (local, remote) label of its pseudowire to `peer` with `pwid` on `pe`.
fn ldp_labels(lab: &Lab, pe: &str, peer: &str, pwid: usize) -> (u64, u64) {
    let v = lab.frr(pe).vtysh_json("show l2vpn atom binding json").unwrap();
    let b = v
        .as_object()
        .and_then(|o| {
            o.values().find(|b| b["destination"] == peer && b["vcId"].as_u64() == Some(pwid as u64))
        })
        .unwrap_or_else(|| panic!("{pe}: no binding to {peer} pw-id {pwid}: {v}"));
    (b["localLabel"].as_u64().unwrap(), b["remoteLabel"].as_u64().unwrap())
}

#[test]
fn ldpd_signals_a_vpls_full_mesh_that_vmpls_bridges() {
    if !is_root() {
        eprintln!("skipping frr_vpls: needs root (network namespaces, FRR daemons)");
        return;
    }
    let t0 = Instant::now();
    frr::ensure_frr_installed().unwrap();
    let module = zebra_module();

    let mut t = Topology::new();
    for h in ["pe1", "pe2", "pe3", "p"] {
        t.add_host(h).unwrap();
    }
    for (pe, _, _, _, acs) in PES {
        for (ac, ce, addr) in acs {
            t.add_host(ce).unwrap();
            t.add_link(ce, &ce_ifname(ce), pe, ac, 1500).unwrap();
            t.add_address(ce, &ce_ifname(ce), format!("{addr}/24").parse::<IpPrefix>().unwrap()).unwrap();
        }
    }
    // the core carries the CEs' 1500-byte packets with their Ethernet header, the
    // control word and two labels
    for (i, (pe, _, core, p_if, _)) in PES.iter().enumerate() {
        let net = 10 * (i + 1);
        t.add_link(pe, core, "p", p_if, 1600).unwrap();
        t.add_address(pe, core, format!("198.18.{net}.1/24").parse::<IpPrefix>().unwrap()).unwrap();
        t.add_address("p", p_if, format!("198.18.{net}.2/24").parse::<IpPrefix>().unwrap()).unwrap();
    }
    let mut lab = Lab::new("frr-vpls", t);
    let spec = |name: &'static str, id: u8, ports: Vec<&'static str>, core: Vec<&'static str>| RouterSpec {
        name,
        id,
        ports,
        ospf: core.iter().map(|i| OspfInterface::p2p(i)).collect(),
        ldp: core,
        ospfd_extra: String::new(),
        isis: vec![],
        isisd_extra: String::new(),
    };
    let mut routers = Vec::new();
    for (i, (pe, id, core, _, acs)) in PES.iter().enumerate() {
        let me = i + 1;
        let mut ports: Vec<&'static str> = acs.iter().map(|(ac, _, _)| *ac).collect();
        ports.push(core);
        routers.push(spec(pe, *id, ports, vec![core]));
        // vmpls: the instance, its members named as ldpd's, without labels
        let quoted: Vec<String> = acs.iter().map(|(ac, _, _)| format!("\"{ac}\"")).collect();
        let mut v = format!("\n[[vpls]]\nname = \"blue\"\nattachments = [{}]\n", quoted.join(", "));
        // ldpd: l2vpn BLUE with the same attachment circuits and a member to each other PE
        let mut l = "l2vpn BLUE type vpls\n".to_string();
        for (ac, _, _) in *acs {
            l += &format!(" member interface {ac}\n");
        }
        for (j, far) in others(me) {
            v += &format!("\n[[vpls.pseudowire]]\nname = \"{}\"\n", member(j));
            l += &format!(
                " member pseudowire {}\n  neighbor lsr-id 198.18.255.{far}\n  pw-id {}\n exit\n",
                member(j),
                pw_id(me, j)
            );
        }
        l += "exit\n";
        lab.vmpls_extra.insert(pe.to_string(), v);
        lab.ldpd_extra.insert(pe.to_string(), l);
    }
    let p_ports: Vec<&'static str> = PES.iter().map(|(_, _, _, p_if, _)| *p_if).collect();
    routers.push(spec("p", 2, p_ports.clone(), p_ports));
    // vmpls first: it makes the stand-ins (`bl-pe2`...) ldpd's config names
    for r in &routers {
        lab.start_vmpls(r);
    }
    for r in &routers {
        lab.start_frr(r, &module);
    }
    step(t0, "routers started");

    // every end of every pseudowire up in FRR
    let ends: Vec<(&str, String)> = (1..=3)
        .flat_map(|i| (1..=3).filter(move |&j| j != i).map(move |j| (PES[i - 1].0, member(j))))
        .collect();
    let all_up = |lab: &Lab| ends.iter().all(|(pe, m)| frr_pw_status(lab, pe, m) == "up");
    let up = wait(&mut lab, "ldpd brings the six pseudowire ends up", PW_UP, all_up);
    step(t0, &format!("the full mesh up in FRR ({up:.1?})"));
    for r in lab.frr.values() {
        assert_eq!(r.config_errors(), Vec::<String>::new(), "{} refused config lines", r.options().hostname);
    }

    // vmpls has each member up with ldpd's labels
    for (i, (pe, _, _, _, _)) in PES.iter().enumerate() {
        let me = i + 1;
        wait(&mut lab, &format!("{pe}: vmpls has its members up"), Duration::from_secs(5), |lab| {
            let m = vmpls_members(lab, pe);
            m.len() == 2 && m.values().all(|p| p["up"] == true)
        });
        let members = vmpls_members(&lab, pe);
        for (j, far) in others(me) {
            let peer = format!("198.18.255.{far}");
            let (local, remote) = ldp_labels(&lab, pe, &peer, pw_id(me, j));
            let m = &members[&member(j)];
            assert_eq!(m["origin"], "frr", "{pe}: {m}");
            assert_eq!(m["spec"]["local-label"], local, "{pe}: {m}");
            assert_eq!(m["spec"]["remote-label"], remote, "{pe}: {m}");
            assert_eq!(m["spec"]["peer"], peer.as_str(), "{pe}: {m}");
            assert_eq!(m["spec"]["control-word"], true, "{pe}: {m}");
        }
        let pws = lab.cli(pe, &["pw", "show"]);
        for p in pws.as_array().unwrap() {
            assert_eq!((&p["vpls"], &p["up"]), (&Value::from("blue"), &Value::Bool(true)), "{pe}: {p}");
        }
    }
    step(t0, "vmpls has every member with ldpd's labels");

    // every CE reaches every other (ARP floods, then known unicast)
    let ces: Vec<Ac> = PES.iter().flat_map(|p| p.4.iter().copied()).collect();
    for (_, from, _) in &ces {
        for (_, _, to) in ces.iter().filter(|(_, ce, _)| ce != from) {
            let ok = (0..3).any(|_| ping(&lab, from, to, "2"));
            assert!(ok, "{from} cannot ping {to} across the VPLS");
        }
    }
    step(t0, "every CE pings every other");
    let bytes = 10_000_000;
    let opts = FlowOptions { limit: Limit::Bytes(bytes), ..FlowOptions::default() };
    let (ce2, ce1a) = (lab.ns("ce2"), lab.ns("ce1a"));
    let r = run_flow(&ce2, &ce1a, ip("198.18.50.11"), &opts, &mut |_| {}).unwrap();
    assert!(r.content_ok && r.bytes_received == bytes, "TCP ce2 -> ce1a through the VPLS: {r:?}");
    step(t0, &format!("10 MB content-checked TCP ce2 -> ce1a: {:.2} Gbit/s", r.gbps));

    // each CE's MAC on the right member at every PE
    let macs: BTreeMap<&str, String> = ces
        .iter()
        .map(|(_, ce, _)| {
            let m = vmpls_lab::inject::interface_mac(&lab.ns(ce), &ce_ifname(ce)).unwrap();
            (*ce, vmpls_wire::ethernet::Address(m).to_string())
        })
        .collect();
    for (i, (pe, _, _, _, _)) in PES.iter().enumerate() {
        let fdb = lab.cli(pe, &["bridge", "fdb", "show", "vpls", "blue"]);
        for (j, (_, _, _, _, acs)) in PES.iter().enumerate() {
            for (ac, ce, _) in *acs {
                let e = fdb
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|e| e["mac"] == macs[ce].as_str())
                    .unwrap_or_else(|| panic!("{pe}: {ce}'s MAC not learned: {fdb}"));
                let (key, want) = if i == j { ("ifname", ac.to_string()) } else { ("pw", member(j + 1)) };
                assert_eq!(e[key], want.as_str(), "{pe}: {ce}: {e}");
                assert_eq!(e["master"], "blue", "{pe}: {e}");
            }
        }
    }
    step(t0, "bridge fdb show: each CE on its attachment circuit or pseudowire");

    // pe3's attachment circuit down: its members down in FRR and vmpls, with the reason
    let ce3_link = |lab: &Lab, state: &str| {
        let out = lab
            .topo
            .run_timeout("ce3", cmd(&["ip", "link", "set", &ce_ifname("ce3"), state]), Duration::from_secs(5))
            .unwrap();
        assert!(out.status.success());
    };
    ce3_link(&lab, "down");
    wait(&mut lab, "AC down: FRR shows pe3's members down", Duration::from_secs(15), |lab| {
        frr_pw_status(lab, "pe3", "bl-pe1") != "up" && frr_pw_status(lab, "pe3", "bl-pe2") != "up"
    });
    // vmpls follows the link within a second (ldpd, which follows the interface too, may
    // be quicker)
    wait(&mut lab, "AC down: vmpls has pe3's members down", Duration::from_secs(5), |lab| {
        vmpls_members(lab, "pe3").values().all(|m| m["up"] == false)
    });
    for m in vmpls_members(&lab, "pe3").values() {
        assert_eq!(m["reason"], "attachment down", "{m}");
    }
    ce3_link(&lab, "up");
    let t = wait(&mut lab, "AC up: the full mesh up again", PW_UP, all_up);
    step(t0, &format!("AC down -> pe3's PWs down (attachment down), up again ({t:.1?})"));
    let ok = (0..10).any(|_| ping(&lab, "ce1a", "198.18.50.3", "2"));
    assert!(ok, "no ping ce1a -> ce3 after pe3's attachment came back");
    let zlog = std::fs::read_to_string(lab.frr("pe3").log_path(Daemon::Zebra)).unwrap();
    for m in ["bl-pe1", "bl-pe2"] {
        let want = format!("vmpls: PW {m}: vmpls says down: attachment down");
        assert!(zlog.contains(&want), "pe3's zebra log lacks {want:?}:\n{zlog}");
    }
    let stats = lab.cli("pe1", &["stats"]);
    let counter = |name: &str| {
        stats["frr"].as_array().unwrap().iter().find(|c| c["name"] == name).map(|c| c["value"].clone())
    };
    assert_eq!(counter("pw_channel_unknown"), Some(Value::from(0)), "{stats}");
    assert_eq!(counter("pw_channel_bad_lines"), Some(Value::from(0)), "{stats}");
    step(t0, "done");
}
