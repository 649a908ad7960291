//! Replays the saved fuzz corpus (`fuzz/corpus/TARGET/*`) and every crash the fuzzers
//! found so far (`fuzz/regressions/TARGET/*`) through the same checks as the cargo-fuzz
//! targets, on stable Rust, in the normal `cargo test` run: the wire decoders
//! (`fuzz/common/wire.rs`) and the whole pipeline (`fuzz/common/pipeline.rs`). The config
//! target is replayed by `crates/control/tests/fuzz_corpus.rs`.
//!
//! `cargo test -p vmpls-dataplane --test fuzz_corpus -- --ignored write_seed_corpus`
//! rewrites the seed files (`seed-*`) of these targets' corpora; see `fuzz/README.md`.

mod fixtures;

#[path = "../../../fuzz/common/pipeline.rs"]
mod pipeline;
#[path = "../../../fuzz/common/wire.rs"]
mod wire;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use fixtures::*;
use pipeline::{Encoder, Role};
use vmpls_wire::virtio_net::{self, GsoType};

/// Regression inputs of bugs not fixed yet, as `TARGET/FILE`: each has an `#[ignore]`d
/// test below naming the bug, and the replay of all regressions skips it until then.
const OPEN: &[&str] = &[];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `fuzz/KIND/TARGET`, sorted; none if the directory does not exist.
fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(fuzz_dir().join(kind).join(target)) else { return Vec::new() };
    let mut files: Vec<PathBuf> =
        dir.map(|e| e.expect("a readable directory entry").path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs `check` on every file; returns how many ran and a line for each that panicked.
fn replay(files: &[PathBuf], check: fn(&[u8])) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    for path in files {
        let rel = path.strip_prefix(fuzz_dir()).unwrap_or(path).display().to_string();
        if OPEN.iter().any(|o| rel.ends_with(o)) {
            continue;
        }
        let data = std::fs::read(path).expect("a readable corpus file");
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| check(&data))) {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let shown = if data.len() <= 256 { hex(&data) } else { format!("{}...", hex(&data[..256])) };
            failures.push(format!("{rel}: {msg}\n    input: {shown}"));
        }
    }
    (files.len(), failures)
}

fn assert_replays(kind: &str, target: &str, check: fn(&[u8]), must_exist: bool) {
    let files = inputs(kind, target);
    if must_exist {
        assert!(!files.is_empty(), "fuzz/{kind}/{target} is empty: the seed corpus is missing");
    }
    let (_, failures) = replay(&files, check);
    assert!(
        failures.is_empty(),
        "fuzz/{kind}/{target}: {} input(s) fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn run_pipeline(data: &[u8]) {
    pipeline::run(data);
}

#[test]
fn wire_corpus_replays() {
    for (target, check) in wire::TARGETS {
        assert_replays("corpus", target, *check, true);
    }
}

#[test]
fn wire_regressions_replay() {
    for (target, check) in wire::TARGETS {
        assert_replays("regressions", target, *check, false);
    }
}

#[test]
fn pipeline_corpus_replays() {
    assert_replays("corpus", "pipeline", run_pipeline, true);
}

#[test]
fn pipeline_regressions_replay() {
    assert_replays("regressions", "pipeline", run_pipeline, false);
}

/// Fixed bug: `icmpv4::emit_echo_reply` derived the reply's checksum incrementally (RFC
/// 1624 eqn. 3) and got 0x0000 where only 0xffff is right, for a valid request whose other
/// words all become zero in the reply (type 8 -> 0, identifier 0, sequence 0, no data:
/// `08 00 f7 ff 00 00 00 00`).
#[test]
fn regression_icmpv4_echo_reply_checksum_zero() {
    let data = std::fs::read(fuzz_dir().join("regressions/icmpv4/echo-reply-checksum-zero")).unwrap();
    wire::icmpv4(&data);
}

#[test]
fn harness_catches_a_frame_over_the_mtu() {
    // The checks must be able to fail: a frame one byte over the port's MTU is refused.
    let ports = pe1_ports();
    let mut pkt =
        vmpls_dataplane::Packet::from_frame(PE1_CORE, &eth(P_WEST_MAC, PE1_CORE_MAC, 0x0800, &[0; 1501]));
    pkt.port = PE1_CORE;
    assert!(catch_unwind(AssertUnwindSafe(|| pipeline::check_frame(&ports[1], &pkt))).is_err());
    let ok = ipv4_frame(P_WEST_MAC, PE1_CORE_MAC, &ipv4_udp(CE1, CE2, 64, &pattern(1472, 1)));
    pipeline::check_frame(&ports[1], &vmpls_dataplane::Packet::from_frame(PE1_CORE, &ok));
}

#[test]
fn pipeline_seed_inputs_forward_traffic() {
    // The seed inputs reach the forwarding paths, not only the early drops: each of a
    // role's templates, unmutated, gets a frame sent (forwarded, or an answer).
    for role in [Role::Pe1, Role::P, Role::Pe2] {
        for i in 0..role.templates().len() {
            let sent = pipeline::run(&Encoder::new(role, false).template(i as u8).finish());
            assert!(sent >= 1, "{role:?} template {i} sent nothing");
        }
    }
}

// ---------------------------------------------------------------- seed corpus

/// Every `static NAME: [u8; N] = [..];` in a source file: the frames the wire unit tests
/// captured from the kernel.
fn captured_statics(source: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("static ") {
        rest = &rest[at + 7..];
        let Some(colon) = rest.find(':') else { break };
        let name = rest[..colon].trim().to_string();
        let decl = &rest[colon..];
        if !decl.trim_start_matches(':').trim_start().starts_with("[u8;") {
            continue;
        }
        let Some(open) = decl.find("= [") else { continue };
        let Some(close) = decl[open..].find("];") else { continue };
        let body = &decl[open + 3..open + close];
        let bytes: Option<Vec<u8>> = body
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| u8::from_str_radix(t.trim_start_matches("0x"), 16).ok())
            .collect();
        if let Some(bytes) = bytes {
            out.push((name, bytes));
        }
    }
    out
}

/// Splits a captured frame (or bare header) into the inputs of each wire target.
fn route(bytes: &[u8], out: &mut Vec<(&'static str, Vec<u8>)>) {
    out.push(("ethernet", bytes.to_vec()));
    out.push(("checksum", bytes.to_vec()));
    let l3 = if bytes.len() == virtio_net::HEADER_LEN {
        out.push(("virtio_net", bytes.to_vec()));
        return;
    } else if bytes.len() > 14
        && matches!(u16::from_be_bytes([bytes[12], bytes[13]]), 0x0800 | 0x86dd | 0x8847 | 0x0806)
    {
        let payload = &bytes[14..];
        match u16::from_be_bytes([bytes[12], bytes[13]]) {
            0x0806 => {
                out.push(("arp", payload.to_vec()));
                return;
            }
            0x8847 => {
                out.push(("mpls", payload.to_vec()));
                let Ok(d) = vmpls_wire::mpls::stack_depth(payload) else { return };
                payload[4 * d..].to_vec()
            }
            _ => payload.to_vec(),
        }
    } else {
        bytes.to_vec()
    };
    match l3.first().map(|b| b >> 4) {
        Some(4) => {
            out.push(("ipv4", l3.clone()));
            if let Ok(p) = vmpls_wire::ipv4::Packet::new_checked(&l3[..]) {
                let t = match p.protocol() {
                    1 => "icmpv4",
                    6 => "tcp",
                    17 => "udp",
                    _ => return,
                };
                out.push((t, p.payload().to_vec()));
            }
        }
        Some(6) => {
            out.push(("ipv6", l3.clone()));
            if let Ok(p) = vmpls_wire::ipv6::Packet::new_checked(&l3[..]) {
                let t = match p.next_header() {
                    58 => "icmpv6",
                    6 => "tcp",
                    17 => "udp",
                    _ => return,
                };
                out.push((t, p.payload().to_vec()));
            }
        }
        _ => {}
    }
}

/// Consecutive TCP segments of one flow, each in `wrap`, for the GRO path.
fn tcp_run(n: usize, seg: usize, wrap: impl Fn(Vec<u8>) -> Vec<u8>) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut t = tcp_segment(40000, 5201, 1000 + (i * seg) as u32, &pattern(seg, i as u8));
            vmpls_wire::tcp::Packet::new_unchecked(&mut t[..]).fill_checksum_v4(v4(CE1), v4(CE2));
            wrap(ipv4(CE1, CE2, vmpls_wire::ipv4::protocol::TCP, 64, true, &t))
        })
        .collect()
}

/// The pipeline seed inputs: every template of every role, with and without resolved
/// neighbours, with offload-capable and jumbo ports, GRO batches, and the wire captures.
fn pipeline_seeds(captures: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    for (name, role) in [("pe1", Role::Pe1), ("p", Role::P), ("pe2", Role::Pe2)] {
        for i in 0..role.templates().len() {
            let i8 = i as u8;
            seeds.push((format!("{name}-template{i}"), Encoder::new(role, false).template(i8).finish()));
            seeds.push((
                format!("{name}-template{i}-unresolved"),
                Encoder::new(role, true).template(i8).template(i8).poll(1000).poll(5000).finish(),
            ));
            seeds.push((
                format!("{name}-template{i}-offload-ports"),
                Encoder::new(role, false).port(0, 2, 0x1f).port(1, 1, 0x1f).template(i8).finish(),
            ));
        }
    }
    let seg = 1000;
    let pe2_run: Vec<(u16, Vec<u8>)> =
        tcp_run(4, seg, |ip| mpls_frame(PE2_CORE_MAC, P_EAST_MAC, &[(2002, 64)], &ip))
            .into_iter()
            .map(|f| (PE2_CORE, f))
            .collect();
    seeds.push(("pe2-gro-batch".into(), Encoder::new(Role::Pe2, false).batch(&pe2_run).finish()));
    seeds.push((
        "pe2-gro-batch-tso-port".into(),
        Encoder::new(Role::Pe2, false).port(1, 0, 0x0f).batch(&pe2_run).finish(),
    ));
    let p_run: Vec<(u16, Vec<u8>)> =
        tcp_run(3, seg, |ip| mpls_frame(P_WEST_MAC, PE1_CORE_MAC, &[(1002, 64)], &ip))
            .into_iter()
            .map(|f| (P_WEST, f))
            .collect();
    seeds.push(("p-batch".into(), Encoder::new(Role::P, false).batch(&p_run).finish()));
    // A UDP GSO super-frame at pe1, to a port that takes it whole and to one that does not.
    let udp = ipv4_frame(PE1_CE1_MAC, CE1_MAC, &ipv4_udp(CE1, CE2, 64, &pattern(3000, 9)));
    let uso = virtio_net::Repr {
        needs_csum: true,
        gso_type: GsoType::UdpL4,
        hdr_len: 42,
        gso_size: 1000,
        csum_start: 34,
        csum_offset: 6,
        ..Default::default()
    };
    seeds.push(("pe1-uso".into(), Encoder::new(Role::Pe1, false).frame(PE1_CE1, &udp, Some(uso)).finish()));
    seeds.push((
        "pe1-uso-whole".into(),
        Encoder::new(Role::Pe1, false).port(1, 0, 0x04).frame(PE1_CE1, &udp, Some(uso)).finish(),
    ));
    // IPv4 without DF over the MTU: fragmented at the ingress.
    let big = ipv4_frame(PE1_CE1_MAC, CE1_MAC, &ipv4_udp(CE1, CE2, 64, &pattern(2000, 7)));
    seeds.push(("pe1-fragment".into(), Encoder::new(Role::Pe1, false).frame(PE1_CE1, &big, None).finish()));
    // The wire captures, as they are, into each router's first port.
    for (name, bytes) in captures.iter().filter(|(_, b)| b.len() >= 14) {
        for (role_name, role) in [("pe1", Role::Pe1), ("p", Role::P), ("pe2", Role::Pe2)] {
            seeds.push((
                format!("{role_name}-capture-{}", name.to_lowercase()),
                Encoder::new(role, false).frame(0, bytes, None).finish(),
            ));
        }
    }
    seeds
}

#[test]
#[ignore = "a tool, not a test: rewrites the seed files of fuzz/corpus"]
fn write_seed_corpus() {
    let wire_src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wire/src");
    let mut files: Vec<_> = std::fs::read_dir(&wire_src).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut captures = Vec::new();
    for f in files {
        let stem = f.file_stem().unwrap().to_string_lossy().to_string();
        for (name, bytes) in captured_statics(&std::fs::read_to_string(&f).unwrap()) {
            captures.push((format!("{stem}-{name}"), bytes));
        }
    }
    assert!(captures.len() > 30, "found only {} captured frames", captures.len());
    let mut by_target: Vec<(&str, String, Vec<u8>)> = Vec::new();
    for (name, bytes) in &captures {
        let mut routed = Vec::new();
        route(bytes, &mut routed);
        for (target, data) in routed {
            by_target.push((target, name.to_lowercase(), data));
        }
    }
    for (name, data) in pipeline_seeds(&captures) {
        by_target.push(("pipeline", name, data));
    }
    let mut written = 0;
    for (target, name, data) in by_target {
        let dir = fuzz_dir().join("corpus").join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("seed-{name}")), &data).unwrap();
        written += 1;
    }
    eprintln!("wrote {written} seed files");
}
