//! Fuzz target `vhost_queues`: a guest's memory of arbitrary bytes holding a transmit and a
//! receive virtqueue, driven by the vhost-user port's chain functions; see
//! `crates/ports/src/vhost_user/fuzz.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    vmpls_ports::fuzz_vhost_queues(data);
});
