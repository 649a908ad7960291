//! Fuzz target `control_api`: control socket requests (JSON) and `vmpls route` command lines,
//! applied to a router's tables; see `fuzz/common/api.rs`.
#![no_main]

#[path = "../common/api.rs"]
mod api;

libfuzzer_sys::fuzz_target!(|data: &[u8]| api::api(data));
