//! Fuzz target `pw_channel`: what the zebra module sends on its pseudowire channel
//! (line-delimited JSON), framed and decoded by `vmpls_frr::pw`; see
//! `fuzz/common/pw_channel.rs`. The corpus is replayed on stable by
//! `crates/frr/tests/fuzz_corpus.rs`.
#![no_main]

#[path = "../common/pw_channel.rs"]
mod pw_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = pw_checks::replay(data);
});
