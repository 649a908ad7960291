//! Fuzz target `pipeline`: arbitrary frames and offload metadata through the seed's pe1,
//! p and pe2 routers, every output frame and the buffer count checked; see
//! `fuzz/common/pipeline.rs`.
#![no_main]

#[path = "../../crates/dataplane/tests/fixtures/mod.rs"]
mod fixtures;
#[path = "../common/pipeline.rs"]
mod pipeline;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    pipeline::run(data);
});
