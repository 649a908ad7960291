//! Replays the saved corpus of the `config` and `control_api` fuzz targets
//! (`fuzz/corpus/TARGET/*`) and every crash they found so far (`fuzz/regressions/TARGET/*`)
//! through the same checks as the cargo-fuzz targets (`fuzz/common/config.rs`,
//! `fuzz/common/api.rs`), on stable Rust, in the normal `cargo test` run.
//!
//! `cargo test -p vmpls-control --test fuzz_corpus -- --ignored write_seed_corpus`
//! rewrites the seed files (`seed-*`) of both corpora; see `fuzz/README.md`.

#[path = "../../../fuzz/common/api.rs"]
mod api;
#[path = "../../../fuzz/common/config.rs"]
mod config;

use std::panic::{AssertUnwindSafe, catch_unwind};

use std::path::{Path, PathBuf};
use vmpls_control::api::Family;

/// Regression inputs of bugs not fixed yet (as `TARGET/FILE` under `fuzz/regressions/`):
/// each has an `#[ignore]`d test below naming the bug, and the replay of all regressions
/// skips it until then.
const OPEN: &[&str] = &[];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(fuzz_dir().join(kind).join(target)) else { return Vec::new() };
    let mut files: Vec<PathBuf> =
        dir.map(|e| e.expect("a readable directory entry").path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

fn assert_replays(kind: &str, target: &str, check: fn(&[u8]), must_exist: bool) {
    let files = inputs(kind, target);
    if must_exist {
        assert!(!files.is_empty(), "fuzz/{kind}/{target} is empty: the seed corpus is missing");
    }
    let mut failures = Vec::new();
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if OPEN.contains(&format!("{target}/{name}").as_str()) {
            continue;
        }
        let data = std::fs::read(path).expect("a readable corpus file");
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| check(&data))) {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(format!(
                "fuzz/{kind}/{target}/{name}: {msg}\n    input: {:?}",
                String::from_utf8_lossy(&data)
            ));
        }
    }
    assert!(failures.is_empty(), "{} input(s) fail:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn config_corpus_replays() {
    assert_replays("corpus", "config", config::config, true);
}

#[test]
fn config_regressions_replay() {
    assert_replays("regressions", "config", config::config, false);
}

#[test]
fn control_api_corpus_replays() {
    assert_replays("corpus", "control_api", api::api, true);
}

#[test]
fn control_api_regressions_replay() {
    assert_replays("regressions", "control_api", api::api, false);
}

/// Requests on the control socket (first byte 0: JSON) and `vmpls route` command lines
/// (first byte odd: the words; bits 1-2 the family given with `-4`/`-6`/`-f mpls`).
const API_SEEDS: &[(&str, u8, &str)] = &[
    ("json-show", 0, r#"{"cmd":"route-show","family":"inet","vrf":"cust"}"#),
    ("json-stats", 0, r#"{"cmd":"stats"}"#),
    ("json-capture", 0, r#"{"cmd":"capture","port":"core","label":1002,"count":10}"#),
    (
        "json-add-push",
        0,
        r#"{"cmd":"route-add","route":{"family":"inet","dst":"198.18.3.0/24","nexthops":[{"gateway":"198.18.10.2","dev":"core","labels":[1003]}]}}"#,
    ),
    ("json-del", 0, r#"{"cmd":"route-del","route":{"family":"inet6","dst":"2001:db8:2::/64"}}"#),
    (
        "json-mpls-replace",
        0,
        r#"{"cmd":"route-replace","route":{"family":"mpls","label":3000,"action":"forward","nexthops":[{"gateway":"198.18.10.2","labels":[3002,3003]}]}}"#,
    ),
    ("cli-add", 1, "add 198.18.4.0/24 encap mpls 1004/5000 via 198.18.10.2 dev core"),
    ("cli-ecmp", 1, "add 198.18.5.0/24 vrf cust nexthop via 198.18.10.2 weight 2 nexthop via 198.18.10.3"),
    ("cli-blackhole", 1, "replace blackhole 198.18.6.0/24"),
    ("cli-v6", 5, "add 2001:db8:7::/64 encap mpls 1007 via inet6 2001:db8:10::2 ttl-propagate disabled"),
    ("cli-mpls-swap", 7, "add 3100 as to 3101 via inet 198.18.10.2 dev core"),
    ("cli-mpls-pop", 7, "add 3200 vrf cust"),
    ("cli-mpls-php", 7, "replace 3000 via 198.18.10.2"),
    ("cli-del", 3, "del 198.18.2.0/24 vrf cust"),
];

/// A config that uses every kind of table the parser knows: limits, VRFs, port MTU and VRF,
/// multipath routes with weights, blackholes, every label action, both TTL models.
const EVERYTHING: &str = r#"[router]
name = "all"
control-socket = "/run/vmpls/all.sock"
addresses = ["198.18.255.9", "2001:db8:ff::9"]

[limits]
icmp-rate = 10
icmp-burst = 20
neighbor-request-rate = 5
neighbor-request-burst = 8
neighbor-entries = 64
neighbor-held-per-address = 2
neighbor-held-total = 16

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
#[ignore = "a tool, not a test: rewrites the seed files of fuzz/corpus/config and control_api"]
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
    let api_dir = fuzz_dir().join("corpus/control_api");
    std::fs::create_dir_all(&api_dir).unwrap();
    for (name, door, text) in API_SEEDS {
        let parsed = if door & 1 == 0 {
            serde_json::from_str::<vmpls_control::api::Request>(text).map(drop).map_err(|e| e.to_string())
        } else {
            let family = [None, Some(Family::Inet), Some(Family::Inet6), Some(Family::Mpls)]
                [usize::from(door >> 1 & 3)];
            let words: Vec<String> = text.split_whitespace().map(str::to_string).collect();
            vmpls_control::cli::parse_route(family, &words).map(drop)
        };
        if let Err(e) = parsed {
            panic!("seed {name} does not parse: {e}");
        }
        let mut data = vec![*door];
        data.extend_from_slice(text.as_bytes());
        api::api(&data);
        std::fs::write(api_dir.join(format!("seed-{name}")), data).unwrap();
    }
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
