//! The `fpm` fuzz target's corpus (`fuzz/corpus/fpm/`), replayed on the stable toolchain:
//! every seed is read frame by frame as the router reads zebra's stream, and the seeds
//! that hold routes vmpls cannot carry (FRR 10's SRv6) are skipped by kind without
//! ending the stream.

use vmpls_frr::{Rib, Unsupported, Update, fpm, route};

/// What the fuzz target does with one input; returns the updates read.
fn replay(data: &[u8]) -> Vec<Update> {
    let mut rib = Rib::new();
    let mut all = Vec::new();
    let mut rest = data;
    while let Ok(Some(frame)) = fpm::parse_frame(rest) {
        match route::decode(frame.payload) {
            Ok(updates) => {
                all.extend(updates.iter().cloned());
                updates.into_iter().for_each(|u| rib.apply(u));
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
    assert!(seeds >= 6, "{seeds} seeds in {dir}");
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
