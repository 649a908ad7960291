//! The `fpm` target's checks, shared by the fuzz target and the stable replay test
//! (`crates/frr/tests/fuzz_corpus.rs`): an FPM byte stream as zebra's peer would send it
//! is framed, decoded and applied to the table zebra has sent. Every input ends in
//! frames read or a framing error, never a panic; every route read, of whatever table
//! (a VRF's: `RTA_TABLE` above 255, or the header's byte), encodes back to itself, so
//! nothing of what zebra said (table, destination, next hops, labels) is lost or
//! invented on the way in; the table, resynced to nothing, is empty.

use vmpls_frr::route::encode;
use vmpls_frr::{Kind, Rib, Route, Update, fpm, route};

/// Replays `data`; returns the updates read.
pub fn replay(data: &[u8]) -> Vec<Update> {
    let mut rib = Rib::new();
    let mut all = Vec::new();
    let mut rest = data;
    while let Ok(Some(frame)) = fpm::parse_frame(rest) {
        match route::decode(frame.payload) {
            Ok(updates) => {
                for u in updates {
                    check_round_trip(&u);
                    all.push(u.clone());
                    rib.apply(u);
                }
            }
            Err(_) => break,
        }
        rest = &rest[frame.len..];
    }
    rib.begin_resync();
    let _ = rib.take_changes();
    rib.end_resync();
    assert!(rib.is_empty());
    all
}

/// A route read encodes to a message read as the same route (a single next hop's weight
/// aside: alone, it has no weight on the wire).
fn check_round_trip(u: &Update) {
    let again = |r: &Route, delete: bool| route::decode(&encode::message(r, delete)).expect("re-encoded");
    match u {
        Update::Add(r) => {
            let mut want = r.clone();
            if let [n] = want.nexthops.as_mut_slice() {
                n.weight = 1;
            }
            assert_eq!(again(r, false), [Update::Add(want)], "{r:?}");
        }
        Update::Delete(key) => {
            let r = Route { key: *key, protocol: 0, kind: Kind::Unicast, nexthops: vec![] };
            assert_eq!(again(&r, true), [Update::Delete(*key)], "{key:?}");
        }
        Update::Ignored(_) | Update::Unsupported(_) => {}
    }
}
