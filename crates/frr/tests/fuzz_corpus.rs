//! The `fpm` fuzz target's corpus (`fuzz/corpus/fpm/`), replayed on the stable toolchain:
//! every seed is read frame by frame as the router reads zebra's stream, and the seeds
//! that hold routes vmpls cannot carry (FRR 10's SRv6) are skipped by kind without
//! ending the stream.

use vmpls_frr::route::MAIN_TABLE;
use vmpls_frr::{Dest, Unsupported, Update};

#[path = "../../../fuzz/common/fpm.rs"]
mod fpm_checks;
use fpm_checks::replay;

#[test]
fn the_fpm_corpus_replays() {
    let dir = format!("{}/../../fuzz/corpus/fpm", env!("CARGO_MANIFEST_DIR"));
    let mut seeds = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let updates = replay(&std::fs::read(&path).unwrap());
        assert!(!updates.is_empty(), "{}: nothing read", path.display());
        seeds += 1;
    }
    assert!(seeds >= 7, "{seeds} seeds in {dir}");
}

#[test]
fn frr_10_srv6_routes_are_skipped_and_the_stream_goes_on() {
    let path = format!("{}/../../fuzz/corpus/fpm/seed-frr10-srv6", env!("CARGO_MANIFEST_DIR"));
    let updates = replay(&std::fs::read(path).unwrap());
    let kinds: Vec<_> = updates
        .iter()
        .map(|u| match u {
            Update::Unsupported(s) => Some(s.kind),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, [Some(Unsupported::Seg6), Some(Unsupported::Seg6Local), None, None]);
    assert!(matches!(updates[2], Update::Add(_)), "{:?}", updates[2]);
    assert!(matches!(updates[3], Update::Delete(_)), "{:?}", updates[3]);
}

#[test]
fn vrf_routes_keep_their_tables() {
    let path = format!("{}/../../fuzz/corpus/fpm/seed-vrf-routes", env!("CARGO_MANIFEST_DIR"));
    let updates = replay(&std::fs::read(path).unwrap());
    let keys: Vec<_> = updates
        .iter()
        .map(|u| match u {
            Update::Add(r) => (r.key.table, r.key.dest, true),
            Update::Delete(k) => (k.table, k.dest, false),
            other => panic!("{other:?}"),
        })
        .collect();
    let tables: Vec<_> = keys.iter().map(|k| k.0).collect();
    assert_eq!(
        tables,
        [MAIN_TABLE, 1000, 1000, 1000, 1000, MAIN_TABLE, MAIN_TABLE, 10, 70000, 1000, MAIN_TABLE]
    );
    assert!(matches!(keys[5], (_, Dest::Label(80), true)));
    let Update::Add(pop) = &updates[5] else { panic!() };
    assert_eq!(
        (pop.nexthops[0].gateway, pop.nexthops[0].ifindex),
        (None, Some(1000)),
        "the VPN label pops to red's interface"
    );
    let Update::Add(vpn) = &updates[3] else { panic!() };
    assert_eq!(vpn.nexthops[0].labels, [20, 80], "transport label over the VPN label");
}

#[path = "../../../fuzz/common/pw_channel.rs"]
mod pw_checks;

#[test]
fn the_pw_channel_corpus_replays() {
    let dir = format!("{}/../../fuzz/corpus/pw_channel", env!("CARGO_MANIFEST_DIR"));
    let mut seeds = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let (msgs, _) = pw_checks::replay(&std::fs::read(&path).unwrap());
        assert!(!msgs.is_empty(), "{}: nothing read", path.display());
        seeds += 1;
    }
    assert!(seeds >= 2, "{seeds} seeds in {dir}");
    let (msgs, bad) = pw_checks::replay(&std::fs::read(format!("{dir}/seed-v6-tagged-and-bad")).unwrap());
    assert_eq!((msgs.len(), bad), (3, 2));
}
