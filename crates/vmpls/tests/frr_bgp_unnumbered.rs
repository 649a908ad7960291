//! BGP unnumbered (RFC 8950) through vmpls in FRR mode, against real bgpd on both ends:
//!
//!   h1 -- r1 ==(no IPv4 address: IPv6 link-local only)== r2 -- h2
//!
//! r1 runs FRR (zebra with our module and FPM, bgpd) and vmpls; r2 runs plain FRR over
//! its kernel's forwarding. bgpd peers over the interface (`neighbor IF interface`), the
//! session on the IPv6 link-local addresses learned from router advertisements, and the
//! IPv4 routes come with IPv6 next hops. zebra hands them to FPM as `via 169.254.0.1
//! onlink` and puts a PERMANENT neighbour 169.254.0.1 with the peer's MAC in the kernel;
//! nobody answers ARP for that address, so vmpls must take the kernel's static neighbour
//! as its own (`kernel::read_neighbors`).
//!
//! Checked: the session comes up; vmpls holds r2's subnet via 169.254.0.1 on r1-r2 and
//! the neighbour with r2's MAC, PERMANENT; h1 pings h2 (IPv4, and IPv6 via r2's
//! link-local address, which vmpls asks for from the port's own link-local address) and
//! a content-checked TCP flow crosses r1 while r1's kernel forwards nothing; the neighbour removed from the kernel
//! is removed from vmpls and comes back with it; all again with the fast path.
//!
//! Needs root (skipped otherwise); installs Debian's frr if missing; the zebra module
//! comes from `VMPLS_ZEBRA_MODULE` or `scripts/build-zebra-module`.
mod frr_common;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use frr_common::*;
use serde_json::Value;
use vmpls_lab::frr::{self, BgpFamily, BgpNeighbor, BgpOptions, BgpPeer, FrrOptions, FrrRouter};
use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};
use vmpls_lab::{IpPrefix, Topology};

/// The address zebra gives every IPv4 route over an IPv6 next hop (RFC 8950 on Linux).
const UNNUMBERED_GATEWAY: &str = "169.254.0.1";

fn bgp(asn: u32, interface: &str, remote_as: u32) -> BgpOptions {
    BgpOptions {
        asn,
        neighbors: vec![BgpNeighbor {
            peer: BgpPeer::Interface(interface.to_string()),
            remote_as,
            update_source: None,
            families: vec![BgpFamily::Ipv4Unicast, BgpFamily::Ipv6Unicast],
            route_reflector_client: false,
        }],
        redistribute_connected: true,
        vrfs: Vec::new(),
    }
}

/// Waits up to `limit` for `what` to hold, checking the lab's processes each turn.
fn wait_until(lab: &mut Lab, limit: Duration, what: &str, mut holds: impl FnMut(&Lab) -> Option<String>) {
    let start = Instant::now();
    loop {
        lab.check_running();
        let Some(why_not) = holds(lab) else {
            eprintln!("{what} ({:.1} s)", start.elapsed().as_secs_f64());
            return;
        };
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}: {why_not}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// r1's vmpls neighbour 169.254.0.1 on r1-r2, if it has one: (MAC, state).
fn unnumbered_neighbor(lab: &Lab) -> Option<(String, String)> {
    let list = lab.cli("r1", &["neigh", "show"]);
    list.as_array()?.iter().find_map(|n| {
        (n["dst"] == UNNUMBERED_GATEWAY && n["dev"] == "r1-r2").then(|| {
            (n["lladdr"].as_str().unwrap_or("").to_string(), n["state"].as_str().unwrap_or("").to_string())
        })
    })
}

/// The next hops of `prefix` in r1's vmpls, as `route show -j` gives them.
fn vmpls_route(lab: &Lab, prefix: &str) -> Option<Value> {
    let routes = lab.cli("r1", &["route", "show"]);
    routes.as_array()?.iter().find(|r| r["dst"] == prefix).cloned()
}

/// `ip neigh ARGS` in r1's kernel.
fn kernel_neigh_r1(lab: &Lab, args: &[&str]) {
    let mut all = vec!["ip", "neigh"];
    all.extend_from_slice(args);
    let out = lab.topo.run("r1", cmd(&all)).unwrap();
    assert!(out.status.success(), "{all:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn ping_and_flow(lab: &mut Lab, mode: &str) {
    let before = lab.kernel_forwarded("r1");
    let out = lab
        .topo
        .run_timeout(
            "h1",
            cmd(&["ping", "-c", "3", "-i", "0.2", "-W", "2", "198.18.2.2"]),
            Duration::from_secs(15),
        )
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let out6 = lab
        .topo
        .run_timeout(
            "h1",
            cmd(&["ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", "2001:db8:2::2"]),
            Duration::from_secs(15),
        )
        .unwrap();
    let text6 = String::from_utf8_lossy(&out6.stdout);
    if !text.contains(" 3 received") || !text6.contains(" 3 received") {
        let routes = lab.cli("r1", &["route", "show"]);
        let routes6 = lab.cli("r1", &["-6", "route", "show"]);
        let neighbors = lab.cli("r1", &["neigh", "show"]);
        panic!(
            "{mode}: ping h1 -> h2 over BGP unnumbered: {text}\n{text6}\nr1's routes: {routes} {routes6}\nr1's neighbours: {neighbors}"
        );
    }
    let opts = FlowOptions {
        limit: Limit::Bytes(8 << 20),
        deadline: Some(Duration::from_secs(30)),
        ..FlowOptions::default()
    };
    let flow = run_flow(&lab.ns("h1"), &lab.ns("h2"), ip("198.18.2.2"), &opts, &mut |_| {}).unwrap();
    eprintln!("{mode}: TCP h1 -> h2: {flow:?}");
    assert!(flow.content_ok && flow.bytes_received == 8 << 20, "{mode}: {flow:?}");
    assert_eq!(lab.kernel_forwarded("r1"), before, "{mode}: r1's kernel forwarded (vmpls must)");
}

#[test]
fn bgp_unnumbered_routes_forward_through_the_kernels_static_neighbour() {
    if !is_root() {
        eprintln!("skipping frr_bgp_unnumbered: needs root (network namespaces, FRR daemons)");
        return;
    }
    frr::ensure_frr_installed().unwrap();
    let module = zebra_module();

    let mut t = Topology::new();
    for h in ["h1", "r1", "r2", "h2"] {
        t.add_host(h).unwrap();
    }
    t.add_link("h1", "h1-r1", "r1", "r1-h1", 1500).unwrap();
    t.add_link("r1", "r1-r2", "r2", "r2-r1", 1500).unwrap();
    t.add_link("r2", "r2-h2", "h2", "h2-r2", 1500).unwrap();
    for (host, ifname, addr) in [
        ("h1", "h1-r1", "198.18.1.2/24"),
        ("r1", "r1-h1", "198.18.1.1/24"),
        ("r2", "r2-h2", "198.18.2.1/24"),
        ("h2", "h2-r2", "198.18.2.2/24"),
        ("h1", "h1-r1", "2001:db8:1::2/64"),
        ("r1", "r1-h1", "2001:db8:1::1/64"),
        ("r2", "r2-h2", "2001:db8:2::1/64"),
        ("h2", "h2-r2", "2001:db8:2::2/64"),
    ] {
        t.add_address(host, ifname, addr.parse::<IpPrefix>().unwrap()).unwrap();
    }
    t.add_default_route("h1", ip("198.18.1.1")).unwrap();
    t.add_default_route("h2", ip("198.18.2.1")).unwrap();
    t.add_default_route("h1", ip("2001:db8:1::1")).unwrap();
    t.add_default_route("h2", ip("2001:db8:2::1")).unwrap();
    t.set_forwarding("r2", true).unwrap();
    let mut lab = Lab::new("frr-unnumbered", t);

    let r1 = RouterSpec {
        name: "r1",
        id: 1,
        ports: vec!["r1-h1", "r1-r2"],
        ospf: vec![],
        ldp: vec![],
        ospfd_extra: String::new(),
        isis: vec![],
        isisd_extra: String::new(),
    };
    lab.start_vmpls(&r1);
    let mut o1 = FrrOptions::new("r1", Ipv4Addr::new(198, 18, 255, 1));
    o1.zebra_module = Some(module.clone());
    o1.bgp = Some(bgp(65001, "r1-r2", 65002));
    let mut o2 = FrrOptions::new("r2", Ipv4Addr::new(198, 18, 255, 2));
    o2.fpm = None;
    o2.bgp = Some(bgp(65002, "r2-r1", 65001));
    let frr_dir = lab.dir.join("frr");
    for (name, o) in [("r1", o1), ("r2", o2)] {
        let router = FrrRouter::start(&lab.topo, name, &frr_dir, o).unwrap();
        lab.frr.insert(name.to_string(), router);
    }

    wait_until(&mut lab, Duration::from_secs(60), "r1: BGP unnumbered session with r2 established", |lab| {
        match lab.frr("r1").bgp_established("ipv4 unicast") {
            Ok(1) => None,
            other => Some(format!("{other:?}")),
        }
    });
    for r in lab.frr.values() {
        assert_eq!(r.config_errors(), Vec::<String>::new(), "{} refused config lines", r.options().hostname);
    }
    wait_until(&mut lab, Duration::from_secs(20), "r1: vmpls routes r2's subnet via 169.254.0.1", |lab| {
        let Some(route) = vmpls_route(lab, "198.18.2.0/24") else {
            let frr = lab.frr("r1").vtysh(&["show ip route 198.18.2.0/24"]).unwrap_or_default();
            return Some(format!("no route in vmpls; zebra has: {frr}"));
        };
        let hops = route["nexthops"].as_array().cloned().unwrap_or_default();
        let ok = hops.len() == 1 && hops[0]["gateway"] == UNNUMBERED_GATEWAY && hops[0]["dev"] == "r1-r2";
        (!ok).then(|| route.to_string())
    });
    let r2_mac = {
        let out = lab.topo.run("r2", cmd(&["ip", "-j", "link", "show", "r2-r1"])).unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v[0]["address"].as_str().unwrap().to_string()
    };
    let kernel_neigh = {
        let out =
            lab.topo.run("r1", cmd(&["ip", "neigh", "show", UNNUMBERED_GATEWAY, "dev", "r1-r2"])).unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    eprintln!("r1's kernel: {kernel_neigh}");
    assert!(
        kernel_neigh.contains(&r2_mac) && kernel_neigh.contains("PERMANENT"),
        "zebra's neighbour: {kernel_neigh}"
    );
    wait_until(
        &mut lab,
        Duration::from_secs(10),
        "r1: vmpls has the kernel's neighbour 169.254.0.1",
        |lab| match unnumbered_neighbor(lab) {
            Some((mac, state)) if mac == r2_mac && state == "PERMANENT" => None,
            other => Some(format!("{other:?} (r2's MAC {r2_mac})")),
        },
    );
    ping_and_flow(&mut lab, "pipeline");

    // The kernel's neighbour goes: so does vmpls's; it comes back with it.
    kernel_neigh_r1(&lab, &["del", UNNUMBERED_GATEWAY, "dev", "r1-r2"]);
    wait_until(
        &mut lab,
        Duration::from_secs(10),
        "r1: neighbour deleted in the kernel -> gone from vmpls",
        |lab| unnumbered_neighbor(lab).map(|n| format!("{n:?}")),
    );
    kernel_neigh_r1(
        &lab,
        &["add", UNNUMBERED_GATEWAY, "lladdr", &r2_mac, "dev", "r1-r2", "nud", "permanent"],
    );
    wait_until(
        &mut lab,
        Duration::from_secs(10),
        "r1: neighbour back in the kernel -> back in vmpls",
        |lab| match unnumbered_neighbor(lab) {
            Some((mac, _)) if mac == r2_mac => None,
            other => Some(format!("{other:?}")),
        },
    );

    // The same with the in-kernel fast path.
    lab.restart_vmpls(&r1, true);
    wait_until(
        &mut lab,
        Duration::from_secs(30),
        "r1 (fast path): zebra's routes and the neighbour again",
        |lab| {
            let route = vmpls_route(lab, "198.18.2.0/24");
            match (route, unnumbered_neighbor(lab)) {
                (Some(_), Some((mac, _))) if mac == r2_mac => None,
                other => Some(format!("{other:?}")),
            }
        },
    );
    ping_and_flow(&mut lab, "fast path");
}
