//! Point-to-point pseudowires (VPWS, RFC 4448 with the RFC 4385 control word) in the
//! pipeline: encapsulation of a customer's frame (control word, pseudowire label,
//! transport label) and decapsulation at the far end, at 64 and 1500 bytes, each against
//! the IPv4 label push of a frame of the same size through the same router, measured in
//! the same run (interleaved, best of 3).
//!
//! `cargo bench -p vmpls-dataplane --bench pw` prints ns per frame and the ratios.

use std::hint::black_box;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use vmpls_dataplane::{Dataplane, DataplaneConfig, Output, Packet, PacketPool, PortCaps, PortId, PortInfo};
use vmpls_fib::{
    DEFAULT_VRF, Fib, FibHandle, LabelAction, LabelRoute, Nexthop, NexthopGroup, PrefixRoute, Pseudowire,
    RouteTarget, TtlModel,
};

const BATCH: usize = 32;
const AC: PortId = 0;
const CORE: PortId = 1;
const IP_PORT: PortId = 2;
const CORE_MAC: [u8; 6] = [2, 0, 0, 0, 0x60, 1];
const P_MAC: [u8; 6] = [2, 0, 0, 0, 0x60, 2];
const IP_MAC: [u8; 6] = [2, 0, 0, 0, 0x70, 1];
const PW_LABEL: u32 = 1000;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A PE: attachment circuit `ac` (port 0) of pseudowire mpw0 (local label 1000, remote
/// 2000) to 198.18.255.3 over the core (port 1, transport label 3001), and an IP port
/// (port 2) whose traffic to 198.18.2.0/24 gets label 3002 toward the core.
fn pe() -> Dataplane {
    let mut b = Fib::builder();
    b.add_port("ac", DEFAULT_VRF, &[]).unwrap();
    b.add_port("core", DEFAULT_VRF, &[(ip("198.18.60.1"), 24)]).unwrap();
    b.add_port("ip", DEFAULT_VRF, &[(ip("198.18.1.1"), 24)]).unwrap();
    let push = |label: u32| {
        PrefixRoute::new(RouteTarget::Forward(
            NexthopGroup::new(vec![Nexthop::new(CORE, Some(ip("198.18.60.2")), vec![label])]).unwrap(),
        ))
    };
    b.add_prefix_route(DEFAULT_VRF, ip("198.18.255.3"), 32, push(3001)).unwrap();
    b.add_prefix_route(DEFAULT_VRF, ip("198.18.2.0"), 24, push(3002)).unwrap();
    let mut fib = b.build().unwrap();
    fib.pseudowires.push(Pseudowire {
        name: "mpw0".into(),
        attachment: Some(AC),
        local_label: PW_LABEL,
        remote_label: 2000,
        peer: ip("198.18.255.3"),
        control_word: true,
        up: true,
    });
    fib.port_pw[usize::from(AC)] = Some(0);
    let to_pw = LabelRoute::new(LabelAction::Pseudowire { pw: 0 }, TtlModel::Pipe);
    fib.set_label_route(PW_LABEL, Some(to_pw)).unwrap();
    let caps = PortCaps::default();
    let port = |id: PortId, name: &str, mac| PortInfo { id, name: name.into(), mac, mtu: 9000, caps };
    let ports = vec![
        port(AC, "ac", [2, 0, 0, 0, 0x50, 1]),
        port(CORE, "core", CORE_MAC),
        port(IP_PORT, "ip", IP_MAC),
    ];
    let mut dp = Dataplane::new(FibHandle::new(fib), ports, DataplaneConfig::default());
    let mut pool = PacketPool::new(4);
    let mut out = Output::new(3);
    dp.set_static_neighbor(Instant::now(), CORE, ip("198.18.60.2"), P_MAC, &mut pool, &mut out).unwrap();
    dp
}

/// An Ethernet frame of `len` bytes to `dst_mac` carrying IPv4 UDP 198.18.1.2 -> 198.18.2.2.
fn ip_frame(dst_mac: [u8; 6], len: usize) -> Vec<u8> {
    let mut f = dst_mac.to_vec();
    f.extend_from_slice(&[0x5a, 0, 0, 0, 0, 1, 0x08, 0x00]);
    let total = (len - 14) as u16;
    let mut h = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0, 198, 18, 1, 2, 198, 18, 2, 2];
    h[2..4].copy_from_slice(&total.to_be_bytes());
    let c = !vmpls_wire::checksum::fold(vmpls_wire::checksum::sum(&h));
    h[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&h);
    f.extend_from_slice(&[0x9c, 0x40, 0x13, 0x89]);
    f.extend_from_slice(&((len - 34) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.resize(len, 0xa5);
    f
}

/// What the far PE sends for a customer frame of `len` bytes: the pseudowire label
/// (S=1) and a zero control word in front of it.
fn pw_frame(len: usize) -> Vec<u8> {
    let mut f = CORE_MAC.to_vec();
    f.extend_from_slice(&P_MAC);
    f.extend_from_slice(&[0x88, 0x47]);
    f.extend_from_slice(&((PW_LABEL << 12) | 0x100 | 255).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(&ip_frame([0x5a, 0, 0, 0, 0, 2], len));
    f
}

struct Case {
    name: &'static str,
    in_port: PortId,
    out_port: PortId,
    frame: Vec<u8>,
}

/// ns per frame over `budget`; every frame must leave by the case's port.
fn measure(case: &Case, budget: Duration) -> f64 {
    let mut dp = pe();
    let mut pool = PacketPool::new(4 * BATCH);
    let mut out = Output::new(3);
    let mut batch: Vec<Packet> = Vec::with_capacity(BATCH);
    let (mut n, mut sent) = (0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < budget {
        for _ in 0..64 {
            for _ in 0..BATCH {
                let mut p = pool.get().expect("pool sized for a batch");
                p.set_frame(&case.frame);
                p.port = case.in_port;
                batch.push(p);
            }
            dp.process_batch(Instant::now(), &mut batch, &mut pool, &mut out);
            n += BATCH as u64;
            for (port, tx) in out.tx.iter_mut().enumerate() {
                if port == usize::from(case.out_port) {
                    sent += tx.len() as u64;
                }
                for p in tx.drain(..) {
                    pool.put(black_box(p));
                }
            }
        }
    }
    assert_eq!(sent, n, "{}: every frame out of port {}", case.name, case.out_port);
    start.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let budget = Duration::from_millis(700);
    let mut rows = Vec::new();
    for len in [64usize, 1500] {
        let cases = [
            Case {
                name: "IPv4 push (baseline)",
                in_port: IP_PORT,
                out_port: CORE,
                frame: ip_frame(IP_MAC, len),
            },
            Case {
                name: "VPWS encapsulation",
                in_port: AC,
                out_port: CORE,
                frame: ip_frame([0x5a, 0, 0, 0, 0, 2], len),
            },
            Case { name: "VPWS decapsulation", in_port: CORE, out_port: AC, frame: pw_frame(len) },
        ];
        let mut best = [f64::INFINITY; 3];
        for _ in 0..3 {
            for (i, c) in cases.iter().enumerate() {
                best[i] = best[i].min(measure(c, budget));
            }
        }
        for (c, ns) in cases.iter().zip(best) {
            rows.push((len, c.name, ns, ns / best[0]));
        }
    }
    println!("VPWS in the pipeline, best of 3 x {} ms per case:", budget.as_millis());
    println!("| frame | case | ns/frame | Mpps | cost against the IPv4 push |");
    println!("|---|---|---|---|---|");
    for (len, name, ns, ratio) in rows {
        println!("| {len} B | {name} | {ns:.1} | {:.2} | {ratio:.2}x |", 1e3 / ns);
    }
}
