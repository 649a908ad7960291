//! VPLS bridging at scale: known unicast between two attachment circuits with 10 and with
//! 10,000 learned MACs (the goal: within 10 % of each other), each against the
//! 10-MAC case measured in the same run.
//!
//! `cargo bench -p vmpls-dataplane --bench vpls` prints ns per frame and the ratio.

use std::hint::black_box;
use std::time::{Duration, Instant};

use vmpls_dataplane::{Dataplane, DataplaneConfig, Output, Packet, PacketPool, PortCaps, PortInfo};
use vmpls_fib::{DEFAULT_VRF, Fib, FibHandle, VplsInstance};

const BATCH: usize = 32;

/// A PE with one instance over ports 0 and 1, and frames from port 0 to `macs` stations
/// behind port 1 (learned first), in a shuffled order.
fn bridge(macs: usize) -> (Dataplane, Vec<Vec<u8>>) {
    let mut b = Fib::builder();
    b.add_port("ce1", DEFAULT_VRF, &[]).unwrap();
    b.add_port("ce2", DEFAULT_VRF, &[]).unwrap();
    let mut fib = b.build().unwrap();
    fib.vpls.push(VplsInstance {
        name: "blue".into(),
        attachments: vec![0, 1],
        pseudowires: Vec::new(),
        mac_limit: 1 << 20,
        flood_rate: 0,
        mac_aging_s: 300,
    });
    fib.port_vpls = vec![Some(0), Some(0)];
    let caps = PortCaps::default();
    let ports = vec![
        PortInfo { id: 0, name: "ce1".into(), mac: [2, 0, 0, 0, 0, 1], mtu: 1500, caps },
        PortInfo { id: 1, name: "ce2".into(), mac: [2, 0, 0, 0, 0, 2], mtu: 1500, caps },
    ];
    let mut dp = Dataplane::new(FibHandle::new(fib), ports, DataplaneConfig::default());
    let station = |i: usize| {
        let n = (i as u32).to_be_bytes();
        [0x5a, 0x01, n[0], n[1], n[2], n[3]]
    };
    let frame = |dst: [u8; 6], src: [u8; 6]| {
        let mut f = dst.to_vec();
        f.extend_from_slice(&src);
        f.extend_from_slice(&[0x88, 0xb5]);
        f.resize(64, 0);
        f
    };
    let mut pool = PacketPool::new(4 * BATCH);
    let learn: Vec<Vec<u8>> = (0..macs).map(|i| frame([0xff; 6], station(i))).collect();
    for chunk in learn.chunks(BATCH) {
        run(&mut dp, &mut pool, 1, chunk);
    }
    // A fixed shuffle (multiplicative step coprime to the count): lookups spread over
    // the whole table.
    let step = (0..).map(|k| 7919 + k).find(|s| gcd(*s, macs) == 1).unwrap();
    let me = [0x5a, 0x02, 0, 0, 0, 1];
    let frames = (0..macs.max(4096)).map(|i| frame(station((i * step) % macs), me)).collect();
    (dp, frames)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn run(dp: &mut Dataplane, pool: &mut PacketPool, port: u16, frames: &[Vec<u8>]) -> u64 {
    let mut out = Output::new(2);
    let mut batch: Vec<Packet> = Vec::with_capacity(BATCH);
    for f in frames {
        let mut p = pool.get().expect("pool sized for a batch");
        p.set_frame(f);
        p.port = port;
        batch.push(p);
    }
    dp.process_batch(Instant::now(), &mut batch, pool, &mut out);
    let mut sent = 0;
    for tx in out.tx.iter_mut() {
        sent += tx.len() as u64;
        for p in tx.drain(..) {
            pool.put(black_box(p));
        }
    }
    sent
}

/// ns per frame over `budget`, and the frames sent out of port 1 (all of them: known).
fn measure(macs: usize, budget: Duration) -> (f64, u64, u64) {
    let (mut dp, frames) = bridge(macs);
    let mut pool = PacketPool::new(4 * BATCH);
    let (mut n, mut sent) = (0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < budget {
        for chunk in frames.chunks(BATCH) {
            sent += run(&mut dp, &mut pool, 0, chunk);
            n += chunk.len() as u64;
        }
    }
    (start.elapsed().as_nanos() as f64 / n as f64, n, sent)
}

fn main() {
    let budget = Duration::from_secs(2);
    // Interleaved, so drift of a noisy machine hits both.
    let mut small = Vec::new();
    let mut large = Vec::new();
    for _ in 0..3 {
        small.push(measure(10, budget));
        large.push(measure(10_000, budget));
    }
    for (name, r) in [("10 MACs", &small), ("10,000 MACs", &large)] {
        for &(_, n, sent) in r.iter() {
            assert_eq!(n, sent, "{name}: every frame known unicast, sent once");
        }
    }
    let best = |r: &[(f64, u64, u64)]| r.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
    let (s, l) = (best(&small), best(&large));
    println!("vpls known unicast, 64 B, best of 3 x {} s:", budget.as_secs());
    println!("  10 MACs      {s:7.1} ns/frame  {:6.2} Mpps", 1e3 / s);
    println!("  10,000 MACs  {l:7.1} ns/frame  {:6.2} Mpps  ratio {:.3} (10,000 / 10)", 1e3 / l, l / s);
}
