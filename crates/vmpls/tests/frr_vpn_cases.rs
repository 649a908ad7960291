//! The VPN cases of netlab's integration suite beyond the VPN lab's default
//! (`frr_vpn.rs`), on the same topology ([`VpnLab`]) under real FRR daemons, vmpls in
//! FRR mode on pe1, p and pe2:
//!
//! - `route_reflector_and_ce_pe_ospf`: p reflects VPNv4/VPNv6 for pe1 and pe2 (no
//!   session between the PEs), blue's CEs speak OSPF with their PEs inside VRF blue
//!   (`router ospf vrf blue`: the hellos cross vmpls's port into the kernel of the VRF's
//!   namespace).
//! - `pe_ce_link_down_and_frr_restart_under_traffic`: red-ce2's link down at pe2 (its
//!   routes withdrawn from pe1's VRF red) and up again; then FRR restarted as a whole on
//!   pe2 while red-ce1 pings red-ce2 every 20 ms (the loss and the time until vmpls holds
//!   what zebra sent again are printed, not asserted).
//! - `vpn_over_ospf_segment_routing`, `vpn_over_isis_segment_routing`: OSPF or IS-IS
//!   prefix SIDs instead of LDP as the transport.
//! - `vrf_deleted_and_created_again`: VRF blue of pe1 deleted at runtime (its namespace;
//!   its interface back in pe1's own) and created again: vmpls follows, blue's traffic
//!   crosses pe1 again under the new VPN label (bgpd sends it as soon as zebra announces
//!   the VRF; the zebra module makes the VRF's interface known to zebra at once so that
//!   zebra does not drop it, and has zebra evaluate the LSPs again when the pair is up).
//!
//! After each step vmpls's tables equal zebra's entry for entry (label table, every
//! VRF's routes: `VpnLab::vmpls_differences`) and its VPN routes equal BGP's VPN table
//! (`show bgp ipv4 vpn` / `ipv6 vpn`, each prefix with BGP's VPN label:
//! `VpnLab::bgp_vpn_differences`); the customers ping their sites and a content-checked
//! TCP transfer crosses the VPN.
//!
//! Needs root (skipped otherwise); installs Debian's `frr` if missing. The zebra module
//! comes from `VMPLS_ZEBRA_MODULE`, else `scripts/build-zebra-module` builds it.

mod frr_common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use frr_common::{BIN, WorkDir, is_root, step, zebra_module};
use vmpls_lab::frr;
use vmpls_lab::ping::{PingOptions, ping};
use vmpls_lab::traffic::{FlowOptions, Limit};
use vmpls_lab::vpn_lab::{PE_NAMES, ROUTER_NAMES, Transport, VpnLab, VpnVariant, ce_addr, loopback};

const REACH: Duration = Duration::from_secs(10);

/// Builds the lab in `variant`, starts FRR and vmpls, waits until FRR has converged and
/// vmpls holds what zebra has; `None` when not root.
fn start_lab(name: &str, variant: VpnVariant) -> Option<(VpnLab, WorkDir, Instant)> {
    if !is_root() {
        eprintln!("skipping {name}: needs root (network namespaces, FRR daemons)");
        return None;
    }
    frr::ensure_frr_installed().unwrap();
    let module = zebra_module();
    let t0 = Instant::now();
    let work = WorkDir(std::env::temp_dir().join(format!("vmpls-{name}-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&work.0);
    std::fs::create_dir_all(&work.0).unwrap();
    let mut lab = VpnLab::build_with(Path::new(BIN), &work.0, variant).unwrap();
    // zebra first: its module makes each VRF's interface, by which vmpls knows the VRF.
    lab.start_frr(&module).unwrap();
    lab.wait_vrf_interfaces(Duration::from_secs(10)).unwrap();
    lab.start_vmpls(false, true).unwrap();
    let took = lab.wait_frr_converged(Duration::from_secs(45)).unwrap();
    step(t0, &format!("FRR converged {:.2} s after it started", took.as_secs_f64()));
    for r in ROUTER_NAMES {
        assert_eq!(lab.frr(r).unwrap().config_errors(), Vec::<String>::new(), "{r} refused config lines");
    }
    let took = lab.wait_synced(Duration::from_secs(20)).unwrap();
    step(t0, &format!("vmpls in sync with zebra {:.2} s after FRR converged", took.as_secs_f64()));
    assert_tables_agree(&lab, "at start");
    Some((lab, work, t0))
}

/// vmpls's tables equal zebra's and its VPN routes BGP's VPN table, on every router.
fn assert_tables_agree(lab: &VpnLab, when: &str) {
    for r in ROUTER_NAMES {
        let d = lab.vmpls_differences(r).unwrap();
        assert!(d.is_empty(), "{when}: vmpls differs from zebra:\n{}", d.join("\n"));
    }
    for pe in PE_NAMES {
        let d = lab.bgp_vpn_differences(pe).unwrap();
        assert!(d.is_empty(), "{when}: vmpls differs from BGP's VPN table:\n{}", d.join("\n"));
    }
}

/// Waits until vmpls holds what zebra has, then checks it against BGP's VPN table too.
fn wait_in_sync(lab: &mut VpnLab, t0: Instant, when: &str) -> Duration {
    let took = lab
        .wait_synced(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{when}: {e:#}\n{}", lab.vmpls_logs(20)));
    assert_tables_agree(lab, when);
    step(t0, &format!("{when}: vmpls in sync with zebra and BGP after {:.2} s", took.as_secs_f64()));
    took
}

/// The prefixes of VRF `vrf` that zebra on `router` has selected (IPv4).
fn zebra_prefixes(lab: &VpnLab, router: &str, vrf: &str) -> BTreeSet<String> {
    let routes = lab.frr(router).unwrap().vrf_routes(vrf, false).unwrap();
    routes.into_iter().filter(|r| r.selected).map(|r| r.prefix.to_string()).collect()
}

/// Waits until zebra's VRF `vrf` on `router` has (`present`) or lacks every prefix of
/// `prefixes`; returns how long it took.
fn wait_prefixes(lab: &VpnLab, router: &str, vrf: &str, prefixes: &[&str], present: bool) -> Duration {
    let start = Instant::now();
    loop {
        let have = zebra_prefixes(lab, router, vrf);
        if prefixes.iter().all(|p| have.contains(*p) == present) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{router} vrf {vrf}: {prefixes:?} still {} after 20 s: {have:?}",
            if present { "missing" } else { "there" }
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ping_all(lab: &mut VpnLab, pairs: &[(&str, &str)]) {
    for &(from, to) in pairs {
        lab.check_ping(from, ce_addr(to).unwrap(), REACH)
            .unwrap_or_else(|e| panic!("{from} -> {to}: {e:#}\n{}", lab.vmpls_logs(20)));
    }
}

fn transfer(lab: &VpnLab, from: &str, to: &str) {
    let bytes = 10_000_000;
    let opts = FlowOptions { limit: Limit::Bytes(bytes), ..FlowOptions::default() };
    let r = lab
        .run_flow(from, to, &opts)
        .unwrap_or_else(|e| panic!("{from} -> {to}: {e:#}\n{}", lab.vmpls_logs(20)));
    assert!(r.content_ok && r.bytes_received == bytes, "{from} -> {to}: {r:?}");
    eprintln!("    {from} -> {to}: {} MB intact, {:.2} Gbit/s", bytes / 1_000_000, r.gbps);
}

#[test]
fn route_reflector_and_ce_pe_ospf() {
    let variant = VpnVariant { route_reflector: true, blue_ospf: true, ..VpnVariant::default() };
    let Some((mut lab, _work, t0)) = start_lab("vpn-rr-ospf", variant) else { return };

    // --- The route reflector: each PE has its one VPN session with p, p has two.
    let p = lab.frr("p").unwrap();
    assert_eq!(p.bgp_established("ipv4 vpn").unwrap(), 2, "p reflects for pe1 and pe2 (VPNv4)");
    assert_eq!(p.bgp_established("ipv6 vpn").unwrap(), 2, "p reflects for pe1 and pe2 (VPNv6)");
    for pe in PE_NAMES {
        let summary = lab.frr(pe).unwrap().vtysh_json("show bgp ipv4 vpn summary json").unwrap();
        let peers: Vec<&String> = summary["peers"].as_object().unwrap().keys().collect();
        assert_eq!(peers, ["198.18.255.2"], "{pe} peers with the route reflector only");
    }
    // pe1 has pe2's routes reflected: the originator is pe2, the path came from p.
    let v = lab.frr("pe1").unwrap().vtysh_json("show bgp ipv4 vpn 198.18.2.0/24 json").unwrap();
    let text = v.to_string();
    assert!(text.contains("198.18.255.3") && text.contains("originatorId"), "pe1's path is reflected: {v}");

    // --- CE-PE OSPF in VRF blue: adjacencies up, the CEs' loopbacks learnt by OSPF in
    // the VRF, the remote site's loopback in each CE's OSPF (BGP redistributed).
    for (ce, pe, own, remote) in [
        ("blue-ce1", "pe1", "198.18.202.1/32", "198.18.204.1/32"),
        ("blue-ce2", "pe2", "198.18.204.1/32", "198.18.202.1/32"),
    ] {
        assert_eq!(lab.frr(ce).unwrap().ospf_full_neighbors().unwrap(), 1, "{ce}'s OSPF adjacency with {pe}");
        let routes = lab.frr(pe).unwrap().vrf_routes("blue", false).unwrap();
        let r = routes.iter().find(|r| r.prefix.to_string() == own && r.selected);
        assert_eq!(
            r.map(|r| r.protocol.as_str()),
            Some("ospf"),
            "{pe} vrf blue learns {own} by OSPF: {routes:?}"
        );
        let start = Instant::now();
        loop {
            let ce_routes = lab.frr(ce).unwrap().ip_routes().unwrap();
            if ce_routes.iter().any(|r| r.prefix.to_string() == remote && r.protocol == "ospf" && r.selected)
            {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "{ce} never learnt {remote} by OSPF: {ce_routes:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    step(t0, "route reflector (p) and CE-PE OSPF in VRF blue up");

    ping_all(
        &mut lab,
        &[("red-ce1", "red-ce2"), ("red-ce2", "red-ce1"), ("blue-ce1", "blue-ce2"), ("blue-ce2", "blue-ce1")],
    );
    for ce in ["blue-ce1", "blue-ce2"] {
        lab.check_ping(ce, ce_addr("svc").unwrap(), REACH).unwrap_or_else(|e| panic!("{ce} -> svc: {e:#}"));
        lab.check_ping("svc", loopback(ce).unwrap(), REACH).unwrap_or_else(|e| panic!("svc -> {ce}: {e:#}"));
        // The OSPF-learnt loopbacks are what red must never reach.
        lab.check_isolated("red-ce1", loopback(ce).unwrap(), &["blue-ce1", "blue-ce2"])
            .unwrap_or_else(|e| panic!("{e:#}"));
    }
    transfer(&lab, "blue-ce1", "blue-ce2");
    transfer(&lab, "red-ce2", "red-ce1");
    step(t0, "pings, isolation and TCP through the reflected VPN");
    lab.cleanup().unwrap();
}

/// The VPN over OSPF segment routing instead of LDP: the same customers, routes and
/// checks, the VPN label under the far PE's prefix SID.
#[test]
fn vpn_over_ospf_segment_routing() {
    vpn_over_segment_routing("vpn-ospf-sr", Transport::OspfSr);
}

/// The same over IS-IS segment routing (netlab's `sr` module): no OSPF in the core, the
/// IS-IS hellos (LLC frames) cross vmpls's ports to isisd.
#[test]
fn vpn_over_isis_segment_routing() {
    vpn_over_segment_routing("vpn-isis-sr", Transport::IsisSr);
}

fn vpn_over_segment_routing(name: &str, transport: Transport) {
    let variant = VpnVariant { transport, ..VpnVariant::default() };
    let Some((mut lab, _work, t0)) = start_lab(name, variant) else { return };
    let (srgb, _) = vmpls_lab::vpn_lab::SR_GLOBAL_BLOCK;
    // pe1 reaches pe2's loopback (index 3) under 16003; p pops it (PHP) toward pe2 and
    // pops 16001 toward pe1; no LDP label anywhere.
    for r in ROUTER_NAMES {
        let ldp = lab.frr(r).unwrap().vtysh(&["show mpls ldp neighbor"]);
        assert!(ldp.is_err(), "{r} runs no ldpd: {ldp:?}");
    }
    let p = lab.vmpls_label_table("p").unwrap();
    assert!(p.contains_key(&(srgb + 1)) && p.contains_key(&(srgb + 3)), "p's SR labels: {p:?}");
    for (pe, prefix, far_pe) in [("pe1", "198.18.2.0/24", 3), ("pe2", "198.18.1.0/24", 1)] {
        let routes = lab.vmpls_vrf_routes(pe, "red").unwrap();
        let hops = routes.get(prefix).unwrap_or_else(|| panic!("{pe} vrf red has no {prefix}: {routes:?}"));
        let labels: Vec<&Vec<u32>> = hops.iter().map(|h| &h.labels).collect();
        assert!(
            hops.iter().all(|h| h.labels.len() == 2 && h.labels[0] == srgb + far_pe),
            "{pe} vrf red {prefix}: the far PE's SID over the VPN label, got {labels:?}"
        );
    }
    step(t0, "the VPN routes push the far PE's prefix SID over the VPN label");
    ping_all(
        &mut lab,
        &[("red-ce1", "red-ce2"), ("red-ce2", "red-ce1"), ("blue-ce1", "blue-ce2"), ("blue-ce2", "blue-ce1")],
    );
    lab.check_ping("red-ce1", vmpls_lab::vpn_lab::ce_addr_v6("red-ce2").unwrap(), REACH).unwrap();
    lab.check_ping("blue-ce1", ce_addr("svc").unwrap(), REACH).unwrap();
    lab.check_isolated("red-ce1", loopback("blue-ce2").unwrap(), &["blue-ce1", "blue-ce2"])
        .unwrap_or_else(|e| panic!("{e:#}"));
    transfer(&lab, "red-ce1", "red-ce2");
    transfer(&lab, "blue-ce2", "blue-ce1");
    step(t0, "pings (6VPE too), isolation and TCP through the VPN over segment routing");
    lab.cleanup().unwrap();
}

/// Pings `dst` from `from` every 20 ms for `count` requests in a thread; returns the
/// sequence numbers answered.
fn ping_in_background(
    lab: &VpnLab,
    from: &str,
    to: &str,
    count: u32,
) -> std::thread::JoinHandle<(u32, Vec<u16>)> {
    let ns = lab.topology().ns(from).unwrap().to_string();
    let dst = ce_addr(to).unwrap();
    std::thread::spawn(move || {
        let opts = PingOptions {
            count,
            interval: Duration::from_millis(20),
            timeout: Duration::from_secs(1),
            ..PingOptions::default()
        };
        let r = ping(&ns, dst, &opts).unwrap();
        (r.sent, r.replies.iter().map(|r| r.seq).collect())
    })
}

#[test]
fn pe_ce_link_down_and_frr_restart_under_traffic() {
    let Some((mut lab, _work, t0)) = start_lab("vpn-restart", VpnVariant::default()) else { return };
    ping_all(&mut lab, &[("red-ce1", "red-ce2")]);

    // --- red-ce2's link down at pe2: its subnet and loopback leave pe1's VRF red (and
    // common), vmpls follows; red-ce1 no longer reaches it. Then up again.
    let red2 = ["198.18.2.0/24", "198.18.203.1/32"];
    lab.set_site_link("red-ce2", false).unwrap();
    let t = wait_prefixes(&lab, "pe1", "red", &red2, false);
    step(t0, &format!("red-ce2's link down: withdrawn from pe1's VRF red after {:.2} s", t.as_secs_f64()));
    wait_in_sync(&mut lab, t0, "red-ce2's link down");
    let (replies, _) = lab.pings_reaching("red-ce1", ce_addr("red-ce2").unwrap(), &[]).unwrap();
    assert_eq!(replies, 0, "red-ce1 reaches red-ce2 with its link down");
    lab.set_site_link("red-ce2", true).unwrap();
    let t = wait_prefixes(&lab, "pe1", "red", &red2, true);
    step(t0, &format!("red-ce2's link up: back in pe1's VRF red after {:.2} s", t.as_secs_f64()));
    // Every prefix, IPv6 (6VPE) too: the PE's addresses stay on a down link.
    lab.wait_frr_converged(Duration::from_secs(20)).unwrap();
    wait_in_sync(&mut lab, t0, "red-ce2's link up");
    ping_all(&mut lab, &[("red-ce1", "red-ce2"), ("red-ce2", "red-ce1")]);

    // --- FRR restarted as a whole on pe2 while red-ce1 pings red-ce2 every 20 ms.
    let probe = ping_in_background(&lab, "red-ce1", "red-ce2", 1000);
    std::thread::sleep(Duration::from_secs(1));
    let restarted = Instant::now();
    lab.restart_frr("pe2").unwrap();
    lab.wait_vrf_interfaces(Duration::from_secs(10)).unwrap();
    lab.wait_frr_converged(Duration::from_secs(45)).unwrap();
    let frr_back = restarted.elapsed();
    wait_in_sync(&mut lab, t0, "FRR restarted on pe2");
    let synced = restarted.elapsed();
    let (sent, seqs) = probe.join().unwrap();
    let got: BTreeSet<u16> = seqs.iter().copied().collect();
    let longest_gap = got.iter().zip(got.iter().skip(1)).map(|(a, b)| b - a - 1).max().unwrap_or(0);
    eprintln!(
        "    FRR restart on pe2: FRR converged {:.2} s, vmpls in sync {:.2} s after the restart began; \
         {} of {sent} pings (20 ms apart) lost, the longest outage {} ms",
        frr_back.as_secs_f64(),
        synced.as_secs_f64(),
        sent - got.len() as u32,
        u32::from(longest_gap) * 20
    );
    assert!(!got.is_empty(), "no ping crossed at all around the restart");
    ping_all(&mut lab, &[("red-ce1", "red-ce2"), ("blue-ce1", "blue-ce2"), ("blue-ce2", "svc")]);
    transfer(&lab, "red-ce1", "red-ce2");
    transfer(&lab, "blue-ce2", "blue-ce1");
    lab.cleanup().unwrap();
}

#[test]
fn vrf_deleted_and_created_again() {
    let Some((mut lab, _work, t0)) = start_lab("vpn-vrf", VpnVariant::default()) else { return };
    ping_all(&mut lab, &[("blue-ce1", "blue-ce2")]);

    // --- VRF blue of pe1 deleted: vmpls drops it, pe2's blue loses pe1's site.
    let blue1 = ["198.18.1.0/24", "198.18.202.1/32"];
    lab.delete_vrf("pe1", "blue").unwrap();
    let t = wait_prefixes(&lab, "pe2", "blue", &blue1, false);
    step(
        t0,
        &format!("VRF blue of pe1 deleted: its routes left pe2's VRF blue after {:.2} s", t.as_secs_f64()),
    );
    let start = Instant::now();
    loop {
        let vrfs = lab.vmpls_cli("pe1", &["vrf", "show"]).unwrap();
        if !vrfs.to_string().contains("\"blue\"") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "vmpls on pe1 still has VRF blue: {vrfs}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Red and the common services go on meanwhile.
    ping_all(&mut lab, &[("red-ce1", "red-ce2"), ("red-ce1", "svc")]);

    // --- Created again: the VPN converges, vmpls holds what zebra sent.
    lab.create_vrf("pe1", "blue").unwrap();
    lab.wait_vrf_interfaces(Duration::from_secs(10)).unwrap();
    let t = lab.wait_frr_converged(Duration::from_secs(30)).unwrap();
    step(t0, &format!("VRF blue of pe1 created again: FRR converged after {:.2} s", t.as_secs_f64()));
    wait_in_sync(&mut lab, t0, "VRF blue of pe1 created again");
    ping_all(&mut lab, &[("blue-ce1", "blue-ce2"), ("blue-ce2", "blue-ce1"), ("red-ce1", "red-ce2")]);
    lab.check_ping("blue-ce1", ce_addr("svc").unwrap(), REACH).unwrap();
    transfer(&lab, "blue-ce1", "blue-ce2");
    lab.cleanup().unwrap();
}
