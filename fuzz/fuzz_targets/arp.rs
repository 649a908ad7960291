//! Fuzz target `arp`: see `fuzz/common/wire.rs`.
#![no_main]

#[path = "../common/wire.rs"]
mod wire;

libfuzzer_sys::fuzz_target!(|data: &[u8]| wire::arp(data));
