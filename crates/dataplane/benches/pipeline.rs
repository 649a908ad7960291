//! Pipeline micro-benchmarks: the cost of swap, push and pop per packet at 64 and 1500
//! bytes, against a baseline measured in the same run (the same loop with a frame the
//! pipeline drops at once, so buffer refills and the batch loop cancel out), and software
//! segmentation in GB/s.
//!
//! `cargo bench -p vmpls-dataplane --bench pipeline` prints a table. For instruction
//! counts, which are repeatable on noisy machines, run one case under callgrind twice
//! with different packet counts and take the difference (scripts/bench-instructions does):
//! `valgrind --tool=callgrind target/release/deps/pipeline-* --count CASE N`.

#[path = "../tests/fixtures/mod.rs"]
#[allow(unused_imports)]
mod fixtures;

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use fixtures::*;
use vmpls_dataplane::{Dataplane, Output, Packet, PacketPool, PortId, gso};
use vmpls_fib::{DEFAULT_VRF, TtlModel};
use vmpls_wire::{ipv4, virtio_net};

const BATCH: usize = 32;

struct Case {
    name: &'static str,
    router: fn() -> Router,
    in_port: PortId,
    frame: Vec<u8>,
}

/// Prefixes of the benchmarking range for a table of `n` routes, longest first (all
/// 262,143 prefixes of 198.18.0.0/15 at most), without pe1's own subnets, addresses and
/// route, which the table has already.
fn table_prefixes(n: usize) -> Vec<(Ipv4Addr, u8)> {
    let base = u32::from(Ipv4Addr::new(198, 18, 0, 0));
    let taken = [
        ("198.18.1.0", 24),
        ("198.18.1.1", 32),
        ("198.18.10.0", 24),
        ("198.18.10.1", 32),
        ("198.18.2.0", 24),
        ("198.18.255.1", 32),
    ]
    .map(|(a, l)| (a.parse::<Ipv4Addr>().unwrap(), l));
    (15..=32u8)
        .rev()
        .flat_map(|len| (0..1u32 << (len - 15)).map(move |i| (Ipv4Addr::from(base + (i << (32 - len))), len)))
        .filter(|p| !taken.contains(p))
        .take(n)
        .collect()
}

/// pe1 with `n` more IPv4 routes pushing a label toward p, through `groups` next-hop
/// groups (labels) in all, and 64-byte frames from ce1 to 4,096 destinations spread over
/// the whole table, in random order (so lookups walk the table as traffic to many
/// destinations does, not one cached path).
fn scaled_pe1(n: usize, groups: usize) -> (Router, Vec<Vec<u8>>) {
    let prefixes = table_prefixes(n);
    let mut b = pe1_builder();
    let groups: Vec<_> =
        (0..groups.min(n)).map(|g| single(PE1_CORE, "198.18.10.2", &[16 + g as u32])).collect();
    for (i, (a, len)) in prefixes.iter().enumerate() {
        let group = groups[i % groups.len()].clone();
        b.add_prefix_route(DEFAULT_VRF, IpAddr::V4(*a), *len, push_route(group, TtlModel::Uniform)).unwrap();
    }
    let mut r = Router::new(b, pe1_ports());
    r.resolve_all_pe1();
    let frames = random_picks(prefixes.len())
        .map(|i| frame(64, |ip| ipv4_frame(PE1_CE1_MAC, CE1_MAC, ip), 0, &prefixes[i].0.to_string()))
        .collect();
    (r, frames)
}

/// Nanoseconds per packet of pe1 pushing 64-byte frames to destinations spread over `n`
/// routes through `groups` next-hop groups, measured for `budget`.
fn scaled_push(n: usize, groups: usize, budget: Duration) -> (f64, u64) {
    let (mut r, frames) = scaled_pe1(n, groups);
    time_frames(&mut r.dp, PE1_CE1, &frames, budget)
}

/// 4,096 indices below `len` in a fixed random order (xorshift).
fn random_picks(len: usize) -> impl Iterator<Item = usize> {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    (0..4096).map(move |_| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % len as u64) as usize
    })
}

/// Nanoseconds per packet of `frames` into `in_port`, batch by batch, over and over for
/// `budget`; and frames sent.
fn time_frames(dp: &mut Dataplane, in_port: PortId, frames: &[Vec<u8>], budget: Duration) -> (f64, u64) {
    let mut pool = PacketPool::new(4 * BATCH);
    let mut sent = 0;
    let mut done = 0usize;
    let start = Instant::now();
    while start.elapsed() < budget {
        for batch in frames.chunks(BATCH) {
            sent += run_frames(dp, &mut pool, in_port, batch);
            done += batch.len();
        }
    }
    (start.elapsed().as_nanos() as f64 / done as f64, sent)
}

/// p with `n` more label routes (16 and up, skipping the table's own), each swapping to
/// its own label toward pe2 (a group per route), and 64-byte frames from pe1 under 4,096
/// of those labels, in random order.
fn scaled_p(n: usize) -> (Router, Vec<Vec<u8>>) {
    let mut b = p_builder();
    let labels: Vec<u32> = (16..).filter(|l| ![1001, 1002].contains(l)).take(n).collect();
    for &label in &labels {
        b.add_label_route(label, swap_route(single(P_EAST, "198.18.20.2", &[label]))).unwrap();
    }
    let mut r = Router::new(b, p_ports());
    r.resolve_all_p();
    let frames = random_picks(labels.len())
        .map(|i| frame(64, |ip| mpls_frame(P_WEST_MAC, PE1_CORE_MAC, &[(labels[i], 64)], ip), 1, CE2))
        .collect();
    (r, frames)
}

/// Nanoseconds per packet of p swapping 64-byte frames under labels spread over `n`
/// label routes, measured for `budget`.
fn scaled_swap(n: usize, budget: Duration) -> (f64, u64) {
    let (mut r, frames) = scaled_p(n);
    time_frames(&mut r.dp, P_WEST, &frames, budget)
}

/// A frame of exactly `len` bytes: `head` (Ethernet and labels) in front of an IPv4/UDP
/// packet from ce1 to ce2 padded to size.
fn frame(len: usize, head: impl Fn(&[u8]) -> Vec<u8>, labels: usize, dst: &str) -> Vec<u8> {
    let ip_len = len - 14 - 4 * labels;
    let ip = ipv4_udp(CE1, dst, 64, &vec![0xab; ip_len - 28]);
    let f = head(&ip);
    assert_eq!(f.len(), len);
    f
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for len in [64, 1500] {
        v.push(Case {
            name: if len == 64 { "baseline-64" } else { "baseline-1500" },
            router: Router::p,
            in_port: P_WEST,
            frame: frame(len, |ip| eth(P_WEST_MAC, PE1_CORE_MAC, 0x88b5, ip), 0, CE2),
        });
        v.push(Case {
            name: if len == 64 { "swap-64" } else { "swap-1500" },
            router: Router::p,
            in_port: P_WEST,
            frame: frame(len, |ip| mpls_frame(P_WEST_MAC, PE1_CORE_MAC, &[(1002, 64)], ip), 1, CE2),
        });
        v.push(Case {
            name: if len == 64 { "push-64" } else { "push-1500" },
            router: Router::pe1,
            in_port: PE1_CE1,
            frame: frame(len, |ip| ipv4_frame(PE1_CE1_MAC, CE1_MAC, ip), 0, CE2),
        });
        v.push(Case {
            name: if len == 64 { "pop-64" } else { "pop-1500" },
            router: Router::pe2,
            in_port: PE2_CORE,
            frame: frame(len, |ip| mpls_frame(PE2_CORE_MAC, P_EAST_MAC, &[(2002, 64)], ip), 1, CE2),
        });
    }
    v
}

/// Runs one batch of `frames` into `in_port`; returns frames sent.
fn run_frames(dp: &mut Dataplane, pool: &mut PacketPool, in_port: PortId, frames: &[Vec<u8>]) -> u64 {
    let now = Instant::now();
    let mut out = Output::new(dp.ports().len());
    let mut batch: Vec<Packet> = Vec::with_capacity(BATCH);
    for f in frames {
        let mut p = pool.get().expect("pool sized for a batch");
        p.set_frame(f);
        p.port = in_port;
        batch.push(p);
    }
    dp.process_batch(now, &mut batch, pool, &mut out);
    let mut sent = 0;
    for tx in out.tx.iter_mut() {
        sent += tx.len() as u64;
        for p in tx.drain(..) {
            pool.put(black_box(p));
        }
    }
    sent
}

/// Runs `n` packets of `case` through its router in batches; returns frames sent.
fn run(dp: &mut Dataplane, pool: &mut PacketPool, case: &Case, n: usize) -> u64 {
    let now = Instant::now();
    let mut out = Output::new(dp.ports().len());
    let mut batch: Vec<Packet> = Vec::with_capacity(BATCH);
    let mut sent = 0u64;
    let mut done = 0;
    while done < n {
        let k = BATCH.min(n - done);
        for _ in 0..k {
            let mut p = pool.get().expect("pool sized for a batch");
            p.set_frame(&case.frame);
            p.port = case.in_port;
            batch.push(p);
        }
        dp.process_batch(now, &mut batch, pool, &mut out);
        for tx in out.tx.iter_mut() {
            sent += tx.len() as u64;
            for p in tx.drain(..) {
                pool.put(black_box(p));
            }
        }
        done += k;
    }
    sent
}

fn measure(case: &Case, budget: Duration) -> (f64, u64) {
    let mut r = (case.router)();
    let mut pool = PacketPool::new(4 * BATCH);
    run(&mut r.dp, &mut pool, case, 10_000);
    let mut n = 0usize;
    let mut sent = 0;
    let start = Instant::now();
    while start.elapsed() < budget {
        sent += run(&mut r.dp, &mut pool, case, 100_000);
        n += 100_000;
    }
    (start.elapsed().as_nanos() as f64 / n as f64, sent)
}

fn segmentation_gbps(budget: Duration) -> f64 {
    let payload = pattern(64000, 3);
    let ip = ipv4_tcp_partial(CE1, CE2, 64, 1, &payload);
    let frame = mpls_frame(P_EAST_MAC, P_WEST_MAC, &[(2002, 63)], &ip);
    let mut pkt = Packet::from_frame(0, &frame);
    pkt.offload = virtio_net::Repr {
        needs_csum: true,
        gso_type: virtio_net::GsoType::TcpV4,
        gso_size: 1448,
        csum_start: 38,
        csum_offset: 16,
        ..Default::default()
    };
    let mut pool = PacketPool::new(64);
    let mut out = Vec::with_capacity(64);
    let mut bytes = 0usize;
    let start = Instant::now();
    while start.elapsed() < budget {
        for _ in 0..50 {
            gso::segment(&pkt, 18, &mut pool, &mut out).unwrap();
            for p in out.drain(..) {
                pool.put(p);
            }
            bytes += payload.len();
        }
    }
    bytes as f64 / start.elapsed().as_secs_f64() / 1e9
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--count") {
        // For callgrind: run exactly N packets of one case, print nothing else.
        let name = &args[i + 1];
        let n: usize = args[i + 2].parse().expect("packet count");
        let all = cases();
        let case = all.iter().find(|c| c.name == name).expect("known case");
        let mut r = (case.router)();
        let mut pool = PacketPool::new(4 * BATCH);
        let sent = run(&mut r.dp, &mut pool, case, n);
        println!("{name} {n} packets, {sent} sent");
        return;
    }
    let budget =
        if args.iter().any(|a| a == "--quick") { Duration::from_millis(200) } else { Duration::from_secs(1) };
    if let Some(i) = args.iter().position(|a| a == "--scaled") {
        // For a profiler: only the push at one table size (a group per route), for the budget.
        let n: usize = args[i + 1].parse().expect("route count");
        let (ns, sent) = scaled_push(n, usize::MAX, budget * 10);
        println!("push at {n} routes: {ns:.1} ns/packet, {sent} sent");
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--scaled-swap") {
        // The same for p's swap at one label table size.
        let n: usize = args[i + 1].parse().expect("label route count");
        let (ns, sent) = scaled_swap(n, budget * 10);
        println!("swap at {n} labels: {ns:.1} ns/packet, {sent} sent");
        return;
    }
    println!("| case | ns/packet | Mpps | ns/packet over baseline |");
    println!("|------|----------:|-----:|------------------------:|");
    let all = cases();
    let mut baseline = [0.0f64; 2];
    for case in &all {
        let (ns, sent) = measure(case, budget);
        let size = usize::from(case.name.ends_with("1500"));
        if case.name.starts_with("baseline") {
            baseline[size] = ns;
            assert_eq!(sent, 0, "the baseline frame must be dropped");
        } else {
            assert!(sent > 0, "{} forwarded nothing", case.name);
        }
        println!("| {} | {:.1} | {:.2} | {:.1} |", case.name, ns, 1e3 / ns, ns - baseline[size]);
    }
    println!();
    println!("push, 64-byte frames to 4,096 destinations spread over the table, by table size;");
    println!("a label per prefix (a group per route), or 16 next-hop groups shared by all routes:");
    println!("| IPv4 routes | groups | ns/packet | Mpps | rate against 10 routes |");
    println!("|---:|---:|---:|---:|---:|");
    for groups in [usize::MAX, 16] {
        let mut small = 0.0;
        for n in [10, 10_000, 100_000, 262_137] {
            let (ns, sent) = scaled_push(n, groups, budget);
            assert!(sent > 0, "the scaled table forwarded nothing");
            if n == 10 {
                small = ns;
            }
            let shown = if groups == usize::MAX { "per route".to_string() } else { groups.to_string() };
            println!("| {n} | {shown} | {ns:.1} | {:.2} | {:.2}x |", 1e3 / ns, small / ns);
        }
    }
    println!();
    println!("swap, 64-byte frames under 4,096 labels spread over the label table, by table size,");
    println!("a label route (and next-hop group) per label:");
    println!("| label routes | ns/packet | Mpps | rate against 10 routes |");
    println!("|---:|---:|---:|---:|");
    let mut small = 0.0;
    for n in [10, 10_000, 100_000, 262_137] {
        let (ns, sent) = scaled_swap(n, budget);
        assert!(sent > 0, "the scaled label table switched nothing");
        if n == 10 {
            small = ns;
        }
        println!("| {n} | {ns:.1} | {:.2} | {:.2}x |", 1e3 / ns, small / ns);
    }
    println!();
    println!("software segmentation, 64000-byte TCP super-frame with one label into 1448-byte segments:");
    println!("{:.2} GB/s of payload", segmentation_gbps(budget * 2));
    let _ = ipv4::HEADER_LEN;
}
