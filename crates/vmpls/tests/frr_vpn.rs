//! BGP/MPLS IP VPNs (RFC 4364) under real FRR daemons: the VPN lab's topology
//! ([`vmpls_lab::vpn_lab::VpnLab`]): red (eBGP CEs, IPv4 and IPv6) and blue (static) on
//! pe1 and pe2 with the same addresses, a common-services VRF on pe2, iBGP VPNv4/VPNv6
//! between the PEs' loopbacks over LDP, VRFs as network namespaces in a private
//! `/run/netns` per PE, vmpls in FRR mode on pe1, p and pe2.
//!
//! - FRR converges (LDP, the VPN sessions, every VRF's routes in zebra) and vmpls's
//!   label table and VRF routes equal zebra's, entry for entry;
//! - reachability: red <-> red, blue <-> blue, red over IPv6 (6VPE), both customers to
//!   the common services and back;
//! - isolation: red never reaches blue nor blue red, both ways, and a customer's pings
//!   to the address both customers use reach only its own host (the other customer's
//!   ICMP counters stay still);
//! - labels on the wire: a packet socket on p's link to pe1 sees the transport label
//!   (p's LDP label for pe2's loopback) over the VPN label pe2's bgpd bound
//!   (`show bgp vrf red ipv4 unicast PREFIX json`), which pe2's label table pops into red;
//! - `traceroute -e` from red-ce1 shows every hop, p with the transport and VPN labels
//!   it received (its error goes on down the LSP to pe2, which routes it in red);
//! - ICMP errors inside the VPN, from the PEs' addresses in red: staticd's `reject` route
//!   and a CLI `prohibit` route in red answer host unreachable, packet filtered and IPv6
//!   no route; a packet too big for pe2's (narrowed) red port gets fragmentation needed;
//! - a labelled frame from a customer port (red-ce1 sending blue's VPN label) is refused
//!   and counted (`mpls_not_accepted`), and blue sees nothing of it;
//! - content-checked TCP per customer through the VPN, each flow in its own VRF's counters
//!   on pe2 (`vrf show`: under its VPN labels, out of its ports) and not in the other's.
//!
//! Needs root (skipped otherwise); installs Debian's `frr` if missing. The zebra module
//! comes from `VMPLS_ZEBRA_MODULE`, else `scripts/build-zebra-module` builds it.

mod frr_common;

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use frr_common::{BIN, WorkDir, is_root, step, zebra_module};
use vmpls_lab::capture::{Capture, tshark_fields};
use vmpls_lab::frr;
use vmpls_lab::inject::{self, ETHERTYPE_MPLS};
use vmpls_lab::traffic::{FlowOptions, Limit};
use vmpls_lab::vpn_lab::{PE_NAMES, ROUTER_NAMES, VpnLab, ce_addr, ce_addr_v6, loopback, vrfs_of};

/// The VPN label of the best path of `prefix` in VRF `vrf` of `router`: the label the
/// PE that exported it bound (`remoteLabel`).
fn vpn_label(lab: &VpnLab, router: &str, vrf: &str, prefix: &str) -> u32 {
    let frr = lab.frr(router).unwrap();
    let v = frr.vtysh_json(&format!("show bgp vrf {vrf} ipv4 unicast {prefix} json")).unwrap();
    let paths =
        v["paths"].as_array().unwrap_or_else(|| panic!("{router}: no paths for {prefix} in {vrf}: {v}"));
    let best = paths
        .iter()
        .find(|p| p["bestpath"]["overall"] == true)
        .unwrap_or_else(|| panic!("{router}: no best path for {prefix} in {vrf}: {v}"));
    let label = best["remoteLabel"]
        .as_u64()
        .unwrap_or_else(|| panic!("{router}: {prefix} in {vrf} has no label: {v}"));
    u32::try_from(label).unwrap()
}

/// The MAC address of `ifname` in VRF `vrf` of `pe` (`ip -br link`: name, state, MAC).
fn vrf_interface_mac(lab: &VpnLab, pe: &str, vrf: &str, ifname: &str) -> [u8; 6] {
    let out = lab.vrf_sh(pe, vrf, &format!("ip -br link show dev {ifname}")).unwrap();
    let mac = out.split_whitespace().nth(2).unwrap_or_else(|| panic!("no MAC in {out:?}"));
    let bytes: Vec<u8> = mac.split(':').map(|b| u8::from_str_radix(b, 16).unwrap()).collect();
    bytes.try_into().unwrap_or_else(|_| panic!("bad MAC {mac:?}"))
}

#[test]
fn vpn_customers_reach_their_sites_and_never_each_other() {
    customers_reach_their_sites_and_never_each_other(false);
}

/// The same with `fast-path = "tc"`: the customer ports live in the VRFs' namespaces and
/// the programs cross into them by each VRF's interface; what the pipeline did before
/// (labels pushed and popped) the programs do now, and isolation holds the same.
#[test]
fn vpn_customers_reach_their_sites_and_never_each_other_with_the_fast_path() {
    customers_reach_their_sites_and_never_each_other(true);
}

fn customers_reach_their_sites_and_never_each_other(fast_path: bool) {
    if !is_root() {
        eprintln!("skipping frr_vpn: needs root (network namespaces, FRR daemons)");
        return;
    }
    frr::ensure_frr_installed().unwrap();
    let module = zebra_module();
    let t0 = Instant::now();
    let work =
        WorkDir(std::env::temp_dir().join(format!("vmpls-frr-vpn-{}-{fast_path}", std::process::id())));
    let _ = std::fs::remove_dir_all(&work.0);
    std::fs::create_dir_all(&work.0).unwrap();
    let mut lab = VpnLab::build(Path::new(BIN), &work.0).unwrap();
    // zebra first: its module makes each VRF's interface, by which vmpls knows the VRF.
    lab.start_frr(&module).unwrap();
    lab.wait_vrf_interfaces(Duration::from_secs(10)).unwrap();
    lab.start_vmpls(fast_path, true).unwrap_or_else(|e| {
        panic!("vmpls must open the customer-facing ports inside the VRFs' namespaces: {e:#}")
    });
    let took = lab.wait_frr_converged(Duration::from_secs(45)).unwrap();
    step(t0, &format!("FRR converged {:.2} s after it started", took.as_secs_f64()));
    for pe in PE_NAMES {
        let frr = lab.frr(pe).unwrap();
        assert_eq!(frr.config_errors(), Vec::<String>::new(), "{pe} refused config lines");
        assert_eq!(frr.bgp_established("ipv4 vpn").unwrap(), 1, "{pe}: VPNv4 session");
        assert_eq!(frr.bgp_established("ipv6 vpn").unwrap(), 1, "{pe}: VPNv6 session");
    }

    // --- vmpls holds what zebra has, VRF by VRF and label by label.
    let took = lab.wait_synced(Duration::from_secs(20)).unwrap();
    step(t0, &format!("vmpls in sync with zebra {:.2} s after FRR converged", took.as_secs_f64()));
    for r in ROUTER_NAMES {
        assert_eq!(lab.frr_label_table(r).unwrap(), lab.vmpls_label_table(r).unwrap(), "{r}: label tables");
    }
    for pe in PE_NAMES {
        for v in vrfs_of(pe) {
            let (f, m) = (lab.frr_vrf_routes(pe, v.name).unwrap(), lab.vmpls_vrf_routes(pe, v.name).unwrap());
            assert!(!f.is_empty(), "{pe}: zebra has no routes in VRF {}", v.name);
            assert_eq!(f, m, "{pe}: VRF {} routes", v.name);
            eprintln!("    {pe} vrf {}: {} routes in zebra and vmpls", v.name, f.len());
        }
    }

    // --- Reachability: each customer's sites, 6VPE, the common services both ways.
    let reach = Duration::from_secs(10);
    for (from, to) in
        [("red-ce1", "red-ce2"), ("red-ce2", "red-ce1"), ("blue-ce1", "blue-ce2"), ("blue-ce2", "blue-ce1")]
    {
        lab.check_ping(from, ce_addr(to).unwrap(), reach)
            .unwrap_or_else(|e| panic!("{from} -> {to}: {e:#}\n{}", lab.vmpls_logs(20)));
    }
    lab.check_ping("red-ce1", ce_addr_v6("red-ce2").unwrap(), reach).unwrap();
    for ce in ["red-ce1", "blue-ce1", "red-ce2", "blue-ce2"] {
        lab.check_ping(ce, ce_addr("svc").unwrap(), reach).unwrap_or_else(|e| panic!("{ce} -> svc: {e:#}"));
        lab.check_ping("svc", loopback(ce).unwrap(), reach).unwrap_or_else(|e| panic!("svc -> {ce}: {e:#}"));
    }
    step(t0, "every site reaches its own and the common services");

    // --- Isolation, both ways, on the addresses both customers use too.
    let red: &[&str] = &["red-ce1", "red-ce2"];
    let blue: &[&str] = &["blue-ce1", "blue-ce2"];
    for (from, to, others) in [
        ("red-ce1", "blue-ce1", blue),
        ("red-ce1", "blue-ce2", blue),
        ("blue-ce1", "red-ce1", red),
        ("blue-ce2", "red-ce2", red),
    ] {
        lab.check_isolated(from, loopback(to).unwrap(), others).unwrap_or_else(|e| panic!("{e:#}"));
    }
    for (from, to, others) in
        [("red-ce1", "red-ce2", blue), ("blue-ce1", "blue-ce2", red), ("blue-ce2", "blue-ce1", red)]
    {
        lab.check_own_host_only(from, ce_addr(to).unwrap(), others).unwrap_or_else(|e| panic!("{e:#}"));
    }
    step(t0, "red and blue never reach each other");

    // --- Reject routes in a VRF: staticd's `reject` (zebra's unreachable route) and a
    // `prohibit` route from vmpls's CLI answer red-ce1 with the errors Linux sends for
    // those route types, from pe1's addresses in red; counted as their drop reasons.
    let pe1 = lab.frr("pe1").unwrap();
    pe1.vtysh(&[
        "configure terminal",
        "ip route 198.18.99.0/24 reject vrf red",
        "ipv6 route 2001:db8:99::/64 reject vrf red",
    ])
    .unwrap();
    lab.vmpls_cli("pe1", &["route", "add", "prohibit", "198.18.98.0/24", "vrf", "red"]).unwrap();
    for route in ["198.18.96.0/22 via 198.18.1.1", "2001:db8:99::/64 via 2001:db8:1::1"] {
        let mut ip = std::process::Command::new("ip");
        ip.args(["route", "add"]).args(route.split(' '));
        let out = lab.topology().run_timeout("red-ce1", ip, Duration::from_secs(5)).unwrap();
        assert!(out.status.success(), "red-ce1: ip route add {route}: {out:?}");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let kind_of = |lab: &VpnLab, family: &str, dst: &str| -> Option<String> {
        let v = lab.vmpls_cli("pe1", &[family, "route", "show", "vrf", "red"]).unwrap();
        let r = v.as_array()?.iter().find(|r| r["dst"] == dst)?;
        Some(r["type"].as_str().unwrap_or("unicast").to_string())
    };
    while kind_of(&lab, "-4", "198.18.99.0/24").is_none() || kind_of(&lab, "-6", "2001:db8:99::/64").is_none()
    {
        assert!(Instant::now() < deadline, "vmpls on pe1 never got staticd's reject routes in red");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(kind_of(&lab, "-4", "198.18.99.0/24").as_deref(), Some("unreachable"));
    assert_eq!(kind_of(&lab, "-6", "2001:db8:99::/64").as_deref(), Some("unreachable"));
    assert_eq!(kind_of(&lab, "-4", "198.18.98.0/24").as_deref(), Some("prohibit"));
    let (unreachable0, prohibited0) = (
        lab.drop_counter("pe1", "unreachable_route").unwrap(),
        lab.drop_counter("pe1", "prohibited_route").unwrap(),
    );
    for (dst, want) in [
        ("198.18.99.1", "From 198.18.1.1 icmp_seq=1 Destination Host Unreachable"),
        ("198.18.98.1", "From 198.18.1.1 icmp_seq=1 Packet filtered"),
        ("2001:db8:99::1", "From 2001:db8:1::1 icmp_seq=1 Destination unreachable: No route"),
    ] {
        let mut ping = std::process::Command::new("ping");
        ping.args(["-n", "-c", "1", "-W", "2", dst]);
        let out = lab.topology().run_timeout("red-ce1", ping, Duration::from_secs(10)).unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(want), "red-ce1 ping {dst}: want {want:?}, got {text}");
    }
    assert_eq!(lab.drop_counter("pe1", "unreachable_route").unwrap() - unreachable0, 2);
    assert_eq!(lab.drop_counter("pe1", "prohibited_route").unwrap() - prohibited0, 1);
    lab.vmpls_cli("pe1", &["route", "del", "prohibit", "198.18.98.0/24", "vrf", "red"]).unwrap();
    lab.frr("pe1")
        .unwrap()
        .vtysh(&[
            "configure terminal",
            "no ip route 198.18.99.0/24 reject vrf red",
            "no ipv6 route 2001:db8:99::/64 reject vrf red",
        ])
        .unwrap();
    step(
        t0,
        "reject routes in red answer host unreachable, packet filtered and no route from pe1's red addresses",
    );

    // --- Too big inside the VPN: pe2's red port narrowed to 1400 bytes; a 1478-byte
    // packet with DF from red-ce1 crosses the core whole and pe2, popping it into red,
    // answers fragmentation needed from its address in red, back over the VPN.
    lab.vrf_sh("pe2", "red", "ip link set pe2-red mtu 1400").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let links = lab.vmpls_cli("pe2", &["link", "show"]).unwrap();
        let mtu =
            links.as_array().and_then(|l| l.iter().find(|p| p["name"] == "red")).map(|p| p["mtu"].clone());
        if mtu == Some(serde_json::json!(1400)) {
            break;
        }
        assert!(Instant::now() < deadline, "vmpls on pe2 does not follow pe2-red's MTU: {mtu:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let too_big0 = lab.drop_counter("pe2", "mtu_exceeded").unwrap();
    let mut ping = std::process::Command::new("ping");
    ping.args(["-n", "-c", "1", "-W", "2", "-M", "do", "-s", "1450", "198.18.2.2"]);
    let out = lab.topology().run_timeout("red-ce1", ping, Duration::from_secs(10)).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("From 198.18.2.1 icmp_seq=1 Frag needed and DF set (mtu = 1400)"),
        "red-ce1's 1478-byte ping with DF: pe2 answers from its red address: {text}"
    );
    assert_eq!(lab.drop_counter("pe2", "mtu_exceeded").unwrap() - too_big0, 1);
    lab.vrf_sh("pe2", "red", "ip link set pe2-red mtu 1500").unwrap();
    step(t0, "too big for pe2's red port: fragmentation needed from pe2's address in red");

    // --- Labels on the wire: p's link to pe1 carries red's requests with p's LDP label
    // for pe2's loopback over the VPN label pe2's bgpd bound to red.
    let vpn = vpn_label(&lab, "pe1", "red", "198.18.2.0/24");
    let p_binding = lab
        .frr("p")
        .unwrap()
        .ldp_bindings()
        .unwrap()
        .into_iter()
        .find(|b| b.prefix.to_string() == "198.18.255.3/32" && b.local_label.is_some())
        .and_then(|b| b.local_label)
        .expect("p binds a label to pe2's loopback");
    let pe2_lsp = lab.frr_label_table("pe2").unwrap();
    assert!(
        pe2_lsp.contains_key(&vpn),
        "pe2's label table has no entry for red's VPN label {vpn}: {pe2_lsp:?}"
    );
    assert!(lab.vmpls_label_table("pe2").unwrap().contains_key(&vpn), "vmpls on pe2 lacks VPN label {vpn}");
    let p_ns = lab.topology().ns("p").unwrap().to_string();
    let cap = Capture::start(&p_ns, "p-pe1", &work.0.join("p-pe1.pcap"), Some("mpls")).unwrap();
    lab.check_ping("red-ce1", ce_addr("red-ce2").unwrap(), reach).unwrap();
    let file = cap.stop().unwrap();
    let rows = tshark_fields(&file, "icmp.type == 8", &["mpls.label"], Duration::from_secs(30)).unwrap();
    let want = format!("{p_binding},{vpn}");
    assert!(!rows.is_empty(), "no labelled echo request on p-pe1");
    assert!(rows.iter().all(|r| r[0] == want), "labels on p-pe1: {rows:?}, want transport,VPN = {want}");
    step(t0, &format!("labels on the wire: {want} (LDP transport, red's VPN label)"));

    // --- traceroute -e from red-ce1: every hop answers. p cannot reach red-ce1 (its
    // default VRF has no customer routes): its time exceeded goes on down the LSP under
    // the stack it received (RFC 3032 section 2.3.2), and pe2 pops it into red and routes
    // it back; it quotes both labels (RFC 4950). The PEs answer from their addresses in
    // red, not from their loopbacks in the core; pe2 quotes red's VPN label.
    let hops = lab.traceroute("red-ce1", ce_addr("red-ce2").unwrap()).unwrap();
    for h in &hops {
        eprintln!("    {}", h.line);
    }
    let owners: [&[&str]; 4] =
        [&["198.18.1.1"], &["198.18.10.2", "198.18.20.1", "198.18.255.2"], &["198.18.2.1"], &["198.18.2.2"]];
    assert_eq!(hops.len(), 4, "{hops:#?}");
    for (h, owner) in hops.iter().zip(owners) {
        let a = h.addr.unwrap_or_else(|| panic!("hop {} did not answer: {hops:#?}", h.ttl));
        assert!(owner.contains(&a.to_string().as_str()), "hop {}: {a} is not one of {owner:?}", h.ttl);
    }
    assert_eq!(hops[1].labels, [p_binding, vpn], "p quotes transport and VPN label: {}", hops[1].line);
    assert_eq!(hops[2].labels, [vpn], "pe2 quotes red's VPN label: {}", hops[2].line);
    assert!(hops[0].labels.is_empty() && hops[3].labels.is_empty(), "{hops:#?}");
    step(t0, "traceroute -e from red-ce1 shows p and pe2 with their labels");
    // 6VPE: the PEs answer from their IPv6 addresses in red (their loopbacks and the core
    // have none); p has no IPv6 address to answer from (the core is IPv4 only; Linux
    // drops the IPv4-mapped sources some 6PE routers use), so its hop is not checked.
    let hops = lab.traceroute("red-ce1", ce_addr_v6("red-ce2").unwrap()).unwrap();
    for h in &hops {
        eprintln!("    {}", h.line);
    }
    assert_eq!(hops.len(), 4, "{hops:#?}");
    let addr = |i: usize| hops[i].addr.map(|a| a.to_string());
    assert_eq!(addr(0).as_deref(), Some("2001:db8:1::1"), "pe1's address in red: {hops:#?}");
    assert_eq!(addr(2).as_deref(), Some("2001:db8:2::1"), "pe2's address in red: {hops:#?}");
    assert_eq!(hops[3].addr, Some(ce_addr_v6("red-ce2").unwrap()), "{hops:#?}");
    assert_eq!(hops[2].labels.len(), 1, "pe2 quotes red's IPv6 VPN label: {}", hops[2].line);
    step(t0, "traceroute -e over 6VPE: the PEs answer from red's IPv6 addresses");

    // --- A customer port refuses labelled frames: red-ce1 sends blue's VPN label at
    // pe1 with an echo request for blue-ce1's address.
    let blue_label = vpn_label(&lab, "pe2", "blue", "198.18.1.0/24");
    let ce_ns = lab.topology().ns("red-ce1").unwrap().to_string();
    let ce_mac = inject::interface_mac(&ce_ns, "red-ce1-pe1").unwrap();
    let pe_mac = vrf_interface_mac(&lab, "pe1", "red", "pe1-red");
    let echo = inject::icmpv4(8, 0, [0x12, 0x34, 0, 1], b"not for blue");
    let packet =
        inject::ipv4_packet(Ipv4Addr::new(198, 18, 2, 2), Ipv4Addr::new(198, 18, 1, 2), 64, 1, 7, 0, &echo);
    let mut payload = inject::mpls_entry(blue_label, 0, true, 64).to_vec();
    payload.extend_from_slice(&packet);
    let frame = inject::ethernet(pe_mac, ce_mac, ETHERTYPE_MPLS, &payload);
    const FRAMES: usize = 5;
    let before = lab.drop_counter("pe1", "mpls_not_accepted").unwrap();
    let blue_before = lab.icmp_in_echos("blue-ce1").unwrap();
    inject::send_frames(&ce_ns, "red-ce1-pe1", &vec![frame; FRAMES]).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let refused = lab.drop_counter("pe1", "mpls_not_accepted").unwrap() - before;
    assert_eq!(
        refused, FRAMES as u64,
        "pe1 counts every labelled frame from red's port as mpls_not_accepted"
    );
    assert_eq!(lab.icmp_in_echos("blue-ce1").unwrap(), blue_before, "an injected frame reached blue-ce1");
    step(t0, &format!("{FRAMES} labelled frames from a customer port refused (mpls_not_accepted)"));

    // --- Content-checked TCP per customer through the VPN (the same addresses).
    // Each flow is in its own VRF's counters on pe2 (under its VPN labels in, out of its
    // ports) and in none of the other VRF's.
    for (from, to, vrf, other) in
        [("red-ce1", "red-ce2", "red", "blue"), ("blue-ce1", "blue-ce2", "blue", "red")]
    {
        let bytes = 20_000_000;
        let (own0, other0) = (lab.vrf_traffic("pe2", vrf).unwrap(), lab.vrf_traffic("pe2", other).unwrap());
        let opts = FlowOptions { limit: Limit::Bytes(bytes), ..FlowOptions::default() };
        let r = lab
            .run_flow(from, to, &opts)
            .unwrap_or_else(|e| panic!("{from} -> {to}: {e:#}\n{}", lab.vmpls_logs(20)));
        assert!(r.content_ok && r.bytes_received == bytes, "{from} -> {to}: {r:?}");
        eprintln!("    {from} -> {to}: {} MB intact, {:.2} Gbit/s", bytes / 1_000_000, r.gbps);
        let (own, other1) = (lab.vrf_traffic("pe2", vrf).unwrap(), lab.vrf_traffic("pe2", other).unwrap());
        let (label_in, port_out) = (own.label_bytes - own0.label_bytes, own.tx_bytes - own0.tx_bytes);
        eprintln!(
            "    pe2 vrf {vrf}: {label_in} bytes in under labels {:?}, {port_out} out of its ports",
            own.labels
        );
        assert!(label_in >= bytes && port_out >= bytes, "pe2 vrf {vrf} counts the flow: {own0:?} -> {own:?}");
        assert!(
            own.labels.contains(&vpn_label(&lab, "pe1", vrf, "198.18.2.0/24")),
            "{vrf}'s labels: {own:?}"
        );
        assert!(
            other1.label_bytes - other0.label_bytes < bytes / 100
                && other1.tx_bytes - other0.tx_bytes < bytes / 100,
            "pe2 vrf {other} counted {vrf}'s flow: {other0:?} -> {other1:?}"
        );
    }
    step(t0, "TCP intact through the VPN for red and blue, each in its own VRF's counters");
    if fast_path {
        // The PEs' programs pushed the customers' traffic out of the VRFs and popped it
        // into them (p's programs pop the transport label over the VPN label), every
        // frame of it crossing a VRF interface; nothing failed on the way.
        for pe in PE_NAMES {
            let c = |name| lab.fast_path_counter(pe, name).unwrap();
            let (push, pop, crossed, failed) = (c("push"), c("pop"), c("crossed"), c("redirect_failed"));
            eprintln!(
                "    {pe} fast path: push {push}, pop {pop}, crossed {crossed}, redirect_failed {failed}"
            );
            assert!(
                push > 100 && pop > 100,
                "{pe}: the programs carried the VPN flows: push {push} pop {pop}"
            );
            assert!(crossed >= push + pop, "{pe}: crossed {crossed} (push {push}, pop {pop})");
            assert_eq!(failed, 0, "{pe}: redirect_failed");
        }
        let p_pops = lab.fast_path_counter("p", "pop").unwrap();
        assert!(p_pops > 200, "p's programs popped the transport labels: {p_pops}");
        step(t0, "the PEs' fast paths pushed and popped the VPN flows across the VRF interfaces");
    }
    lab.cleanup().unwrap();
}
