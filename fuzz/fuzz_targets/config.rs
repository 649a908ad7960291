//! Fuzz target `config`: the TOML config parser and table build; see `fuzz/common/config.rs`.
#![no_main]

#[path = "../common/config.rs"]
mod config;

libfuzzer_sys::fuzz_target!(|data: &[u8]| config::config(data));
