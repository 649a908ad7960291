//! Replays the saved corpus of the `config` fuzz target (`fuzz/corpus/config/*`) and every
//! crash it found so far (`fuzz/regressions/config/*`) through the same check as the
//! cargo-fuzz target (`fuzz/common/config.rs`), on stable Rust, in the normal `cargo test`
//! run.
//!
//! `cargo test -p vmpls-control --test fuzz_corpus -- --ignored write_seed_corpus`
//! rewrites the seed files (`seed-*`) of the config corpus; see `fuzz/README.md`.

#[path = "../../../fuzz/common/config.rs"]
mod config;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

/// Regression inputs of bugs not fixed yet (file names under `fuzz/regressions/config/`):
/// each has an `#[ignore]`d test below naming the bug, and the replay of all regressions
/// skips it until then.
const OPEN: &[&str] = &[];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn inputs(kind: &str) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(fuzz_dir().join(kind).join("config")) else { return Vec::new() };
    let mut files: Vec<PathBuf> =
        dir.map(|e| e.expect("a readable directory entry").path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

fn assert_replays(kind: &str, must_exist: bool) {
    let files = inputs(kind);
    if must_exist {
        assert!(!files.is_empty(), "fuzz/{kind}/config is empty: the seed corpus is missing");
    }
    let mut failures = Vec::new();
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if OPEN.contains(&name.as_str()) {
            continue;
        }
        let data = std::fs::read(path).expect("a readable corpus file");
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| config::config(&data))) {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(format!(
                "fuzz/{kind}/config/{name}: {msg}\n    input: {:?}",
                String::from_utf8_lossy(&data)
            ));
        }
    }
    assert!(failures.is_empty(), "{} input(s) fail:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn config_corpus_replays() {
    assert_replays("corpus", true);
}

#[test]
fn config_regressions_replay() {
    assert_replays("regressions", false);
}

/// A config that uses every kind of table the parser knows: VRFs, port MTU and VRF,
/// multipath routes with weights, blackholes, every label action, both TTL models.
const EVERYTHING: &str = r#"[router]
name = "all"
control-socket = "/run/vmpls/all.sock"
addresses = ["198.18.255.9", "2001:db8:ff::9"]

[[vrf]]
name = "cust"

[[port]]
name = "ce1"
interface = "all-ce1"
vrf = "cust"
mtu = 9000
addresses = ["198.18.1.1/24", "2001:db8:1::1/64"]

[[port]]
name = "core"
interface = "all-core"
addresses = ["198.18.10.1/24", "2001:db8:10::1/64"]

[[route]]
prefix = "198.18.2.0/24"
vrf = "cust"
nexthops = [
  { via = "198.18.10.2", port = "core", push = [1002, 5000], weight = 2 },
  { via = "2001:db8:10::2", port = "core", push = [1102], weight = 1 },
]

[[route]]
prefix = "198.18.3.0/24"
blackhole = true

[[route]]
prefix = "2001:db8:2::/64"
via = "2001:db8:10::2"
push = [1002]
ttl-model = "pipe"

[[label]]
in = 100
action = "pop"
vrf = "cust"

[[label]]
in = 101
action = "pop"
via = "198.18.10.2"

[[label]]
in = 102
action = "swap"
out = [3]
via = "198.18.10.2"
port = "core"
ttl-model = "pipe"

[[label]]
in = 103
action = "swap"
nexthops = [
  { via = "198.18.10.2", out = [300, 301] },
  { via = "2001:db8:10::2", out = [400], weight = 3 },
]
"#;

#[test]
#[ignore = "a tool, not a test: rewrites the seed files of fuzz/corpus/config"]
fn write_seed_corpus() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut seeds: Vec<(String, String)> = Vec::new();
    for dir in [examples.clone(), examples.join("seed")] {
        let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files.into_iter().filter(|f| f.extension().is_some_and(|e| e == "toml")) {
            let rel = f.strip_prefix(&examples).unwrap().to_string_lossy().replace('/', "-");
            seeds.push((rel, std::fs::read_to_string(&f).unwrap()));
        }
    }
    seeds.push(("everything.toml".into(), EVERYTHING.into()));
    let dir = fuzz_dir().join("corpus/config");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in &seeds {
        if let Err(e) = vmpls_control::Config::from_str(text, Path::new(name)) {
            panic!("seed {name} does not validate: {e}");
        }
        std::fs::write(dir.join(format!("seed-{name}")), text).unwrap();
    }
    eprintln!("wrote {} seed files", seeds.len());
}
