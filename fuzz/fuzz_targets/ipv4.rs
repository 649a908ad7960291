//! Fuzz target `ipv4`: see `fuzz/common/wire.rs`.
#![no_main]

#[path = "../common/wire.rs"]
mod wire;

libfuzzer_sys::fuzz_target!(|data: &[u8]| wire::ipv4(data));
