//! What the config fuzz target checks, shared by the cargo-fuzz target
//! (`fuzz/fuzz_targets/config.rs`) and the stable replay of the saved corpus
//! (`crates/control/tests/fuzz_corpus.rs`), both of which include this file with `#[path]`.
//!
//! Arbitrary text goes to [`vmpls_control::Config::from_str`]. A config it accepts must
//! build its forwarding tables ([`vmpls_control::Config::build_fib`]: validation is meant
//! to catch everything the tables would reject), and find each of its ports by name. A
//! config it rejects must say why, at a line of the text.
#![allow(dead_code)]

use std::path::Path;

use vmpls_control::Config;

/// Checks one input; panics on a broken promise.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let lines = text.matches('\n').count() + 1;
    match Config::from_str(text, Path::new("fuzz.toml")) {
        Ok(cfg) => {
            if let Err(e) = cfg.build_fib() {
                panic!("a config that validates does not build: {e} ({e:?})");
            }
            for (i, p) in cfg.ports.iter().enumerate() {
                let (id, found) = cfg.port(&p.name).expect("a port found by its name");
                assert!(usize::from(id) <= i && found.name == p.name);
            }
            assert_eq!(cfg.vrfs.first().map(String::as_str), Some("default"));
        }
        Err(e) => {
            let message = e.to_string();
            assert!(!message.is_empty(), "an error without a message");
            if let Some(line) = e.line() {
                assert!(
                    (1..=lines).contains(&line),
                    "error at line {line} of a {lines}-line text: {message}"
                );
            }
            std::hint::black_box(e.field());
        }
    }
}
