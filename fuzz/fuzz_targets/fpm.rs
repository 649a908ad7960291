//! Fuzz target `fpm`: an FPM byte stream as zebra's peer would send it, framed, decoded
//! and applied to the table zebra has sent (`vmpls-frr`); see `fuzz/common/fpm.rs`. The
//! corpus is replayed on stable by `crates/frr/tests/fuzz_corpus.rs`; `fuzz/fpm.dict`
//! holds the route attributes and table ids worth splicing in
//! (`cargo fuzz run fpm -- -dict=fpm.dict`).
#![no_main]

#[path = "../common/fpm.rs"]
mod fpm_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fpm_checks::replay(data);
});
