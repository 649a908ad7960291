//! Fuzz target `fpm`: an FPM byte stream as zebra's peer would send it, framed, decoded
//! and applied to the table zebra has sent (`vmpls-frr`). Every input ends in frames
//! read (well-framed messages vmpls cannot carry skipped by kind, their routes removed)
//! or a framing error that closes the connection, never a panic. The corpus is replayed
//! on stable by `crates/frr/tests/fuzz_corpus.rs`.
#![no_main]

use vmpls_frr::{Rib, fpm, route};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut rib = Rib::new();
    let mut rest = data;
    while let Ok(Some(frame)) = fpm::parse_frame(rest) {
        match route::decode(frame.payload) {
            Ok(updates) => updates.into_iter().for_each(|u| rib.apply(u)),
            Err(_) => break,
        }
        rest = &rest[frame.len..];
    }
    rib.begin_resync();
    let _ = rib.take_changes();
    rib.end_resync();
    assert!(rib.is_empty());
});
