//! The decoder against byte streams Debian trixie's zebra 10.3 really sent over FPM, with
//! our zebra module loaded (`frr/fixtures/frr10-*`, where README.md says how each was
//! made and how they differ from 8.4's).

use std::net::IpAddr;

use vmpls_frr::route::{MAIN_TABLE, decode};
use vmpls_frr::{Dest, Kind, Nexthop, Rib, Route, RouteKey, Unsupported, Update, fpm};

/// The updates of a stream, frame by frame (each frame's updates in one `Vec`).
fn frames(name: &str) -> Vec<Vec<Update>> {
    let path = format!("{}/../../frr/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut rest = &bytes[..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        let frame = fpm::parse_frame(rest).expect("a valid frame").expect("a whole frame");
        out.push(decode(frame.payload).unwrap_or_else(|e| panic!("{name}: {e}")));
        rest = &rest[frame.len..];
    }
    out
}

fn fixture(name: &str) -> Vec<Update> {
    frames(name).into_iter().flatten().collect()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn key(dest: Dest) -> RouteKey {
    RouteKey { table: MAIN_TABLE, dest }
}

fn prefix(p: &str, len: u8) -> Dest {
    Dest::Prefix(ip(p), len)
}

fn nh(gw: &str, ifindex: u32, labels: &[u32]) -> Nexthop {
    Nexthop { gateway: Some(ip(gw)), ifindex: Some(ifindex), labels: labels.to_vec(), weight: 1 }
}

fn rib_of(updates: Vec<Update>) -> Rib {
    let mut rib = Rib::new();
    updates.into_iter().for_each(|u| rib.apply(u));
    rib
}

/// Every message of the stream is a route add or delete: nothing skipped.
fn all_routes(name: &str, updates: &[Update]) {
    for u in updates {
        assert!(matches!(u, Update::Add(_) | Update::Delete(_)), "{name}: {u:?}");
    }
}

#[test]
fn static_lsps_added_then_removed() {
    let u = fixture("frr10-static-lsp-add-del.fpm");
    assert_eq!(u.len(), 14);
    all_routes("static LSPs", &u);
    assert!(u.contains(&Update::Add(Route {
        key: key(Dest::Label(100)),
        protocol: 196,
        kind: Kind::Unicast,
        nexthops: vec![nh("198.18.10.2", 40, &[200])],
    })));
    assert!(u.contains(&Update::Add(Route {
        key: key(Dest::Label(101)),
        protocol: 196,
        kind: Kind::Unicast,
        nexthops: vec![nh("198.18.10.2", 40, &[])],
    })));
    assert_eq!(u[12..], [Update::Delete(key(Dest::Label(100))), Update::Delete(key(Dest::Label(101)))]);
    let rib = rib_of(u);
    assert!(rib.routes().all(|r| r.protocol == 2), "only the connected routes stay");
}

/// FRR 10 sends the interface addresses' own /32s ("local" routes) as protocol 2 too,
/// like the connected subnets: vmpls's FRR mode leaves protocol 2 to the kernel's
/// addresses, so they never become routes out of an interface.
#[test]
fn local_host_routes_come_as_protocol_kernel() {
    let rib = rib_of(fixture("frr10-static-lsp-add-del.fpm"));
    let local = rib.routes().find(|r| r.key.dest == prefix("198.18.10.1", 32)).expect("the local /32");
    assert_eq!(local.protocol, 2);
    assert_eq!(local.nexthops, vec![Nexthop { gateway: None, ifindex: Some(40), labels: vec![], weight: 1 }]);
}

#[test]
fn labelled_static_routes_updates_are_one_replace() {
    let frames = frames("frr10-labelled-static-route.fpm");
    // FRR 10's `fpm use-route-replace` (on by default): an update is one RTM_NEWROUTE,
    // where 8.4 sent a delete and an add in one frame.
    assert!(frames.iter().all(|f| f.len() == 1), "one message per frame: {frames:?}");
    let u: Vec<Update> = frames.into_iter().flatten().collect();
    assert_eq!(u.len(), 16);
    all_routes("labelled static routes", &u);
    let adds = |d: Dest| -> Vec<Vec<Nexthop>> {
        u.iter()
            .filter_map(|u| match u {
                Update::Add(r) if r.key.dest == d => Some(r.nexthops.clone()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        adds(prefix("198.18.60.0", 24)),
        [vec![nh("198.18.10.2", 40, &[300])], vec![nh("198.18.11.2", 42, &[303])]]
    );
    // The ECMP route, then what is left of it when the first next hop is removed.
    assert_eq!(
        adds(prefix("198.18.61.0", 24)),
        [
            vec![nh("198.18.10.2", 40, &[301]), nh("198.18.11.2", 42, &[302])],
            vec![nh("198.18.11.2", 42, &[302])]
        ]
    );
    assert_eq!(u[13], Update::Delete(key(prefix("198.18.60.0", 24))));
    assert_eq!(u[15], Update::Delete(key(prefix("198.18.61.0", 24))));
    let rib = rib_of(u);
    assert!(rib.routes().all(|r| r.protocol == 2));
}

/// Without `no fpm use-next-hop-groups` (FRR 10.3's default), zebra sends next-hop
/// objects and routes that only name them: every one is skipped as `nexthop_groups`
/// (counted, with the hint), none becomes a route without next hops.
#[test]
fn next_hop_groups_are_skipped_by_name() {
    let u = fixture("frr10-nhg-labelled-static-route.fpm");
    assert_eq!(u.len(), 23);
    let mut skipped = 0;
    for x in &u {
        match x {
            Update::Unsupported(s) => {
                assert_eq!(s.kind, Unsupported::NexthopGroups, "{s:?}");
                assert!(s.detail.contains("no fpm use-next-hop-groups"), "{s:?}");
                skipped += 1;
            }
            Update::Delete(_) => {}
            Update::Add(r) => panic!("a route read from a next-hop group id: {r:?}"),
            Update::Ignored(t) => panic!("message type {t} ignored"),
        }
    }
    assert_eq!(skipped, 21, "8 RTM_NEWNEXTHOP and 13 routes by next-hop id: all but the 2 deletes");
}

#[test]
fn ldp_over_ospf_gives_labelled_routes_and_lsps() {
    let u = fixture("frr10-ldp-r1.fpm");
    assert_eq!(u.len(), 28);
    all_routes("ldp r1", &u);
    // Up to the LSPs: the converged table.
    let converged = rib_of(u[..17].to_vec());
    let get = |d: Dest| converged.routes().find(|r| r.key.dest == d).cloned().unwrap();
    let r = get(prefix("198.18.80.0", 24));
    assert_eq!((r.protocol, r.nexthops.clone()), (188, vec![nh("198.18.12.2", 44, &[16])]));
    assert_eq!(get(Dest::Label(18)).nexthops, vec![nh("198.18.12.2", 44, &[16])]);
    assert_eq!(get(Dest::Label(16)).nexthops, vec![nh("198.18.12.2", 44, &[])]);
    assert_eq!(get(Dest::Label(17)).nexthops, vec![nh("198.18.12.2", 44, &[])]);
    assert_eq!(get(Dest::Label(18)).protocol, 193);
    let lo = get(prefix("198.18.0.1", 32));
    assert_eq!((lo.protocol, lo.nexthops[0].gateway, lo.nexthops[0].ifindex), (2, None, Some(1)));
    // r1 shut down (ldpd first): no LSP and no OSPF route left.
    let end = rib_of(u);
    assert!(end.routes().all(|r| r.protocol == 2), "{:?}", end.routes().collect::<Vec<_>>());
}

#[test]
fn replays_resync_to_the_same_table() {
    let before = rib_of(fixture("frr10-ldp-r1.fpm")[..17].to_vec());
    let sorted = |rib: &Rib| {
        let mut v: Vec<String> = rib.routes().map(|r| format!("{r:?}")).collect();
        v.sort();
        v
    };
    for replay in ["frr10-replay-after-restart.fpm", "frr10-fpm-reconnect-replay.fpm"] {
        let mut rib = before.clone();
        rib.take_changes();
        rib.begin_resync();
        let u = fixture(replay);
        all_routes(replay, &u);
        u.into_iter().for_each(|u| rib.apply(u));
        assert_eq!(rib.end_resync(), 0, "{replay} holds every route the first connection had");
        assert_eq!(sorted(&rib), sorted(&before), "{replay}");
    }
}
