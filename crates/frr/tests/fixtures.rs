//! The decoder against byte streams Debian's zebra 8.4.4 really sent over FPM, with our
//! zebra module loaded (`frr/fixtures/`, where README.md says how each was made).

use std::net::IpAddr;

use vmpls_frr::route::{MAIN_TABLE, decode};
use vmpls_frr::{Dest, Kind, Nexthop, Rib, Route, RouteKey, Update, fpm};

fn fixture(name: &str) -> Vec<Update> {
    let path = format!("{}/../../frr/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut rest = &bytes[..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        let frame = fpm::parse_frame(rest).expect("a valid frame").expect("a whole frame");
        out.extend(decode(frame.payload).unwrap_or_else(|e| panic!("{name}: {e}")));
        rest = &rest[frame.len..];
    }
    out
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn key(dest: Dest) -> RouteKey {
    RouteKey { table: MAIN_TABLE, dest }
}

fn nh(gw: &str, ifindex: u32, labels: &[u32]) -> Nexthop {
    Nexthop { gateway: Some(ip(gw)), ifindex: Some(ifindex), labels: labels.to_vec(), weight: 1 }
}

fn rib_of(updates: Vec<Update>) -> Rib {
    let mut rib = Rib::new();
    updates.into_iter().for_each(|u| rib.apply(u));
    rib
}

#[test]
fn static_lsps_added_then_removed() {
    let u = fixture("static-lsp-add-del.fpm");
    assert_eq!(u.len(), 7);
    assert!(u.contains(&Update::Add(Route {
        key: key(Dest::Label(100)),
        protocol: 196,
        kind: Kind::Unicast,
        nexthops: vec![nh("198.18.10.2", 40, &[200])],
    })));
    // Implicit null: no outgoing label, a penultimate-hop pop.
    assert!(u.contains(&Update::Add(Route {
        key: key(Dest::Label(101)),
        protocol: 196,
        kind: Kind::Unicast,
        nexthops: vec![nh("198.18.10.2", 40, &[])],
    })));
    assert_eq!(u[5..], [Update::Delete(key(Dest::Label(100))), Update::Delete(key(Dest::Label(101)))]);
    let rib = rib_of(u);
    assert!(rib.routes().all(|r| r.protocol == 2), "only the connected routes stay");
}

#[test]
fn labelled_static_routes_single_ecmp_update_and_delete() {
    let u = fixture("labelled-static-route.fpm");
    assert_eq!(u.len(), 9);
    assert!(u.contains(&Update::Add(Route {
        key: key(Dest::Prefix(ip("198.18.60.0"), 24)),
        protocol: 196,
        kind: Kind::Unicast,
        nexthops: vec![nh("198.18.10.2", 40, &[300])],
    })));
    assert!(u.contains(&Update::Add(Route {
        key: key(Dest::Prefix(ip("198.18.61.0"), 24)),
        protocol: 196,
        kind: Kind::Unicast,
        nexthops: vec![nh("198.18.10.2", 40, &[301]), nh("198.18.11.2", 42, &[302])],
    })));
    // An update is a delete and an add in one frame: applied together, the route is
    // replaced, never missing.
    assert_eq!(u[5], Update::Delete(key(Dest::Prefix(ip("198.18.60.0"), 24))));
    let Update::Add(r) = &u[6] else { panic!("{:?}", u[6]) };
    assert_eq!(r.nexthops, vec![nh("198.18.11.2", 42, &[303])]);
    let rib = rib_of(u);
    assert!(rib.routes().all(|r| r.protocol == 2));
}

#[test]
fn ldp_over_ospf_gives_labelled_routes_and_lsps() {
    let u = fixture("ldp-r1.fpm");
    assert_eq!(u.len(), 29);
    // Take the stream up to the LSPs: the converged table.
    let converged = rib_of(u[..15].to_vec());
    let get = |d: Dest| converged.routes().find(|r| r.key.dest == d).cloned().unwrap();
    let r = get(Dest::Prefix(ip("198.18.80.0"), 24));
    assert_eq!((r.protocol, r.nexthops.clone()), (188, vec![nh("198.18.12.2", 44, &[16])]));
    assert_eq!(get(Dest::Label(18)).nexthops, vec![nh("198.18.12.2", 44, &[16])]);
    assert_eq!(get(Dest::Label(16)).nexthops, vec![nh("198.18.12.2", 44, &[])]);
    assert_eq!(get(Dest::Label(18)).protocol, 193);
    // Connected routes come too (protocol 2): the loopback out of lo, the link's subnet,
    // and IPv6 link-local.
    let lo = get(Dest::Prefix(ip("198.18.0.1"), 32));
    assert_eq!((lo.protocol, lo.nexthops[0].gateway, lo.nexthops[0].ifindex), (2, None, Some(1)));
    assert!(converged.routes().any(|r| r.key.dest == Dest::Prefix(ip("fe80::"), 64)));
    // The whole stream ends with r1 shut down: no LSP left.
    let end = rib_of(u);
    assert!(end.routes().all(|r| !matches!(r.key.dest, Dest::Label(_))));
}

#[test]
fn a_replay_after_a_restart_resyncs_to_the_same_table() {
    let before = rib_of(fixture("ldp-r1.fpm")[..15].to_vec());
    let mut rib = before.clone();
    rib.take_changes();
    rib.begin_resync();
    for u in fixture("replay-after-restart.fpm") {
        rib.apply(u);
    }
    assert_eq!(rib.end_resync(), 0, "the replay holds every route the first connection left");
    let mut a: Vec<_> = before.routes().map(|r| format!("{r:?}")).collect();
    let mut b: Vec<_> = rib.routes().map(|r| format!("{r:?}")).collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    assert!(!fixture("fpm-reconnect-replay.fpm").is_empty());
}

/// 6VPE (`vpn6-pe1.fpm`): an IPv6 route of VRF red (table 1000) learned by BGP over the
/// IPv4 core, BGP's next hop pe2's loopback as `::ffff:198.18.255.2`, resolved over the
/// labelled static route to 198.18.255.2 (via 198.18.12.2, label 100). zebra writes its
/// next hop as the interface and the labels alone: no `RTA_GATEWAY`, no `RTA_VIA`
/// (`show ipv6 route vrf red` says `via 198.18.12.2, pe1-pe2, label 100/5002`). The
/// decoder keeps exactly that; the router finds the gateway (`crates/router/src/fpm.rs`).
#[test]
fn a_6vpe_route_comes_with_its_labels_and_interface_but_no_gateway() {
    let u = fixture("vpn6-pe1.fpm");
    assert_eq!(u.len(), 12);
    let red = |dest| RouteKey { table: 1000, dest };
    let v6 = red(Dest::Prefix(ip("2001:db8:2::"), 64));
    assert_eq!(
        u[10],
        Update::Add(Route {
            key: v6,
            protocol: 186,
            kind: Kind::Unicast,
            nexthops: vec![Nexthop { gateway: None, ifindex: Some(2), labels: vec![100, 5002], weight: 1 }],
        })
    );
    // The IPv4 VPN route to pe2's other CE subnet, and the transport it resolves over,
    // have the gateway.
    assert_eq!(
        u[9],
        Update::Add(Route {
            key: red(Dest::Prefix(ip("198.18.102.0"), 24)),
            protocol: 186,
            kind: Kind::Unicast,
            nexthops: vec![nh("198.18.12.2", 2, &[100, 5002])],
        })
    );
    assert_eq!(
        u[8],
        Update::Add(Route {
            key: key(Dest::Prefix(ip("198.18.255.2"), 32)),
            protocol: 196,
            kind: Kind::Unicast,
            nexthops: vec![nh("198.18.12.2", 2, &[100])],
        })
    );
    // One VPN label per address family with `label vpn export auto`: 16 (IPv4), 17 (IPv6),
    // both popping to red's VRF interface 1000.
    for label in [16, 17] {
        assert!(u[..2].iter().any(|x| matches!(x, Update::Add(r) if r.key == key(Dest::Label(label))
            && r.nexthops == [Nexthop { gateway: None, ifindex: Some(1000), labels: vec![], weight: 1 }])));
    }
    assert_eq!(u[11], Update::Delete(v6));
    // pe2 (`label vpn export 5002`): one label for both families, pe1's IPv6 subnet over
    // the transport to pe1 (label 200) with pe1's IPv6 VPN label 17.
    let u = fixture("vpn6-pe2.fpm");
    assert_eq!(u.len(), 11);
    assert!(u.contains(&Update::Add(Route {
        key: red(Dest::Prefix(ip("2001:db8:1::"), 64)),
        protocol: 186,
        kind: Kind::Unicast,
        nexthops: vec![Nexthop { gateway: None, ifindex: Some(2), labels: vec![200, 17], weight: 1 }],
    })));
}
