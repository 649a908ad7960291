//! Replays the saved corpus of the `vhost_queues` fuzz target (`fuzz/corpus/vhost_queues/*`)
//! and every crash it found so far (`fuzz/regressions/vhost_queues/*`) through the same
//! harness as the cargo-fuzz target ([`vmpls_ports::fuzz_vhost_queues`]), on stable Rust,
//! in the normal `cargo test` run.
//!
//! `cargo test -p vmpls-ports --test fuzz_corpus -- --ignored write_seed_corpus` rewrites
//! the seed files (`seed-*`); see `fuzz/README.md`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use vmpls_ports::{FuzzQueueRun, fuzz_vhost_queues};

const TARGET: &str = "vhost_queues";

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn inputs(kind: &str) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(fuzz_dir().join(kind).join(TARGET)) else { return Vec::new() };
    let mut files: Vec<PathBuf> =
        dir.map(|e| e.expect("a readable directory entry").path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

fn assert_replays(kind: &str, must_exist: bool) {
    let files = inputs(kind);
    if must_exist {
        assert!(!files.is_empty(), "fuzz/{kind}/{TARGET} is empty: the seed corpus is missing");
    }
    let mut failures = Vec::new();
    for path in &files {
        let data = std::fs::read(path).expect("a readable corpus file");
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| fuzz_vhost_queues(&data))) {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(format!("{}: {msg}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{} input(s) fail:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn vhost_queues_corpus_replays() {
    assert_replays("corpus", true);
}

#[test]
fn vhost_queues_regressions_replay() {
    assert_replays("regressions", false);
}

/// Guest memory images for the seed corpus, laid out as `fuzz_vhost_queues` reads them.
struct Image(Vec<u8>);

const VRING_DESC_F_NEXT: u16 = 1;
const VRING_DESC_F_WRITE: u16 = 2;
const VRING_DESC_F_INDIRECT: u16 = 4;
const TX_DESC: usize = 0x0000;
const TX_AVAIL: usize = 0x1000;
const RX_DESC: usize = 0x2000;
const RX_AVAIL: usize = 0x3000;

impl Image {
    fn new() -> Image {
        Image(vec![0; 0x8000])
    }

    fn desc(&mut self, table: usize, i: usize, addr: u64, len: u32, flags: u16, next: u16) {
        let at = table + 16 * i;
        self.0[at..at + 8].copy_from_slice(&addr.to_le_bytes());
        self.0[at + 8..at + 12].copy_from_slice(&len.to_le_bytes());
        self.0[at + 12..at + 14].copy_from_slice(&flags.to_le_bytes());
        self.0[at + 14..at + 16].copy_from_slice(&next.to_le_bytes());
    }

    /// Makes `heads` available, in order.
    fn avail(&mut self, ring: usize, heads: &[u16]) {
        self.0[ring + 2..ring + 4].copy_from_slice(&(heads.len() as u16).to_le_bytes());
        for (k, h) in heads.iter().enumerate() {
            self.0[ring + 4 + 2 * k..ring + 6 + 2 * k].copy_from_slice(&h.to_le_bytes());
        }
    }

    fn write(&mut self, at: usize, bytes: &[u8]) {
        self.0[at..at + bytes.len()].copy_from_slice(bytes);
    }

    fn input(&self, size_exp: u8, features: u8, rx_len: u16) -> Vec<u8> {
        let mut v = vec![size_exp, features];
        v.extend_from_slice(&rx_len.to_le_bytes());
        v.extend_from_slice(&self.0);
        v
    }
}

/// An IPv4 TCP super-frame's virtio-net header: NEEDS_CSUM, TCPV4, hdr_len 66,
/// gso_size 1448, csum_start 34, csum_offset 16.
const TSO_HDR: [u8; 12] = [1, 1, 66, 0, 0xa8, 0x05, 34, 0, 16, 0, 0, 0];

fn seeds() -> Vec<(&'static str, Vec<u8>, FuzzQueueRun)> {
    let mut out = Vec::new();
    let n = VRING_DESC_F_NEXT;
    let w = VRING_DESC_F_WRITE;

    // Header and frame in one descriptor each, two chains; two receive buffers.
    let mut img = Image::new();
    img.write(0x4000, &TSO_HDR);
    img.desc(TX_DESC, 0, 0x4000, 12, n, 1);
    img.desc(TX_DESC, 1, 0x4100, 1000, 0, 0);
    img.desc(TX_DESC, 2, 0x4800, 72, 0, 0);
    img.avail(TX_AVAIL, &[0, 2]);
    img.desc(RX_DESC, 0, 0x5000, 2048, w, 0);
    img.desc(RX_DESC, 1, 0x5800, 2048, w, 0);
    img.avail(RX_AVAIL, &[0, 1]);
    out.push(("two-chains", img.input(4, 2, 1514), FuzzQueueRun { tx_frames: 2, rx_frames: 2 }));

    // Mergeable receive buffers: one frame across three small buffers.
    let mut img = Image::new();
    img.desc(TX_DESC, 0, 0x4000, 200, 0, 0);
    img.avail(TX_AVAIL, &[0]);
    for i in 0..3u16 {
        img.desc(RX_DESC, usize::from(i), 0x5000 + u64::from(i) * 0x400, 600, w, 0);
    }
    img.avail(RX_AVAIL, &[0, 1, 2]);
    out.push(("mergeable", img.input(3, 3, 1500), FuzzQueueRun { tx_frames: 1, rx_frames: 1 }));

    // An indirect table on the transmit side, a chain looping on itself (virtio-queue ends
    // it after queue-size descriptors: a 400-byte frame), a buffer out of memory, and a
    // device-readable receive buffer.
    let mut img = Image::new();
    img.desc(TX_DESC, 0, 0x6000, 32, VRING_DESC_F_INDIRECT, 0);
    img.desc(0x6000, 0, 0x4000, 10, n, 1);
    img.desc(0x6000, 1, 0x4100, 80, 0, 0);
    img.desc(TX_DESC, 1, 0x4200, 100, n, 1);
    img.desc(TX_DESC, 2, 0xffff_0000, 100, 0, 0);
    img.avail(TX_AVAIL, &[0, 1, 2]);
    img.desc(RX_DESC, 0, 0x5000, 2048, 0, 0);
    img.desc(RX_DESC, 1, 0x5800, 2048, w, 0);
    img.avail(RX_AVAIL, &[0, 1]);
    out.push(("indirect-loop-outside", img.input(2, 0, 100), FuzzQueueRun { tx_frames: 2, rx_frames: 1 }));

    // A guest whose available index runs far ahead of the queue size.
    let mut img = Image::new();
    img.desc(TX_DESC, 0, 0x4000, 100, 0, 0);
    img.0[TX_AVAIL + 2..TX_AVAIL + 4].copy_from_slice(&5000u16.to_le_bytes());
    out.push(("avail-ahead", img.input(1, 0, 60), FuzzQueueRun { tx_frames: 0, rx_frames: 0 }));
    out
}

#[test]
fn the_seed_images_do_what_they_say() {
    for (name, input, expected) in seeds() {
        assert_eq!(fuzz_vhost_queues(&input), expected, "seed {name}");
    }
}

#[test]
#[ignore = "a tool, not a test: rewrites the seed files of fuzz/corpus/vhost_queues"]
fn write_seed_corpus() {
    let dir = fuzz_dir().join("corpus").join(TARGET);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, input, _) in seeds() {
        std::fs::write(dir.join(format!("seed-{name}")), input).unwrap();
    }
}
