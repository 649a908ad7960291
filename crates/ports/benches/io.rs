//! Bump-in-the-wire forwarder benchmark: one forwarder thread moves frames unchanged
//! between two AF_PACKET ports, in several ways, alternating within each round:
//! - `mmsg`: `AfPacketPort` (`recvmmsg` into pool buffers, `sendmmsg` out of them);
//! - `ring256`, `ring128`: `AfPacketRingPort` (TPACKET_V3 receive ring, `sendmmsg`);
//! - `txring-copy`: `recvmmsg` into pool buffers, `memcpy` into a frame of the output
//!   port's `AfPacketTxRing` (PACKET_TX_RING), one `send` per batch;
//! - `txring-zerocopy`: `recvmmsg` straight into free frames of the output port's
//!   `AfPacketTxRing` (`recv_from`), one `send` per batch.
//!
//! Topology, in namespaces this program creates and deletes (`vmpls-io-<pid>-{s,f,r}`):
//! sender `s0` 198.18.0.1 --veth-- `f0` [forwarder] `f1` --veth-- `r0` 198.18.0.2 receiver.
//! A kernel TCP flow (iperf3) crosses the forwarder: data one way, ACKs the other. Modes:
//! `tso` (default offloads, so TSO super-frames) and `1500` (`ethtool -K s0 tso off gso
//! off` in the sender's namespace, so 1514-byte frames; the average frame size printed
//! shows what the forwarder saw). Reports Gbit/s (iperf3 receiver side) and the
//! forwarder thread's user/sys CPU time (`getrusage(RUSAGE_THREAD)`; it includes the
//! softirq work the kernel does in the thread's `send` calls).
//!
//! Run (as root): `CARGO_TARGET_DIR=/work/target-txring cargo bench -p vmpls-ports --features rings --bench io`
//! Environment: `IO_BENCH_SECS` (default 5), `IO_BENCH_ROUNDS` (default 3),
//! `IO_BENCH_KINDS` (default `mmsg,txring-copy,txring-zerocopy`), `IO_BENCH_MODES`
//! (default `tso,1500`). Results: see `src/af_packet_txring.rs`.

use std::os::fd::{AsFd, BorrowedFd};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vmpls_dataplane::PacketPool;
use vmpls_ports::{AfPacketPort, AfPacketRingPort, AfPacketTxRing, Port, RingConfig, TxRingConfig};
use vmpls_testkit::{End, Netns, readable, veth};
use vmpls_wire::virtio_net;

fn ns_exec(ns: &str, cmd: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(cmd);
    c
}

/// Sender `s` -- forwarder `f` -- receiver `r`, IPv6 off; gone when dropped.
struct Lab {
    s: Netns,
    f: Netns,
    r: Netns,
}

impl Lab {
    fn new() -> Lab {
        let lab = Lab {
            s: Netns::without_ipv6("io-s"),
            f: Netns::without_ipv6("io-f"),
            r: Netns::without_ipv6("io-r"),
        };
        let end = |ns, ifname| End { ns, ifname, mac: None };
        veth(end(&lab.s, "s0"), end(&lab.f, "f0"), 1500);
        veth(end(&lab.f, "f1"), end(&lab.r, "r0"), 1500);
        lab.s.ip(&["addr", "add", "198.18.0.1/24", "dev", "s0"]);
        lab.r.ip(&["addr", "add", "198.18.0.2/24", "dev", "r0"]);
        lab
    }
}

fn thread_cpu() -> (f64, f64) {
    // SAFETY: rusage is plain data; zeroes are valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a live rusage the kernel fills.
    let r = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    assert_eq!(r, 0);
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (t(ru.ru_utime), t(ru.ru_stime))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// `AfPacketPort`: `recvmmsg` into pool buffers, `sendmmsg` out of them.
    Mmsg,
    /// `AfPacketRingPort`, 64 blocks of 256 KiB.
    Ring,
    /// `AfPacketRingPort`, 128 blocks of 128 KiB: one super-frame closes a block.
    Ring128,
    /// `recvmmsg` into pool buffers (`AfPacketPort`), `memcpy` into a free frame of the
    /// output port's `AfPacketTxRing`, one `send` per batch.
    TxCopy,
    /// `recvmmsg` straight into free frames of the output port's `AfPacketTxRing`
    /// (`AfPacketTxRing::recv_from`), one `send` per batch: no user-space copy.
    TxZero,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Mmsg => "mmsg",
            Kind::Ring => "ring256",
            Kind::Ring128 => "ring128",
            Kind::TxCopy => "txring-copy",
            Kind::TxZero => "txring-zerocopy",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        [Kind::Mmsg, Kind::Ring, Kind::Ring128, Kind::TxCopy, Kind::TxZero]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

/// What the sender's TCP hands to the wire.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// Default offloads: TSO super-frames of up to 64 KiB.
    Tso,
    /// `ethtool -K s0 tso off gso off`: 1514-byte frames.
    Mtu1500,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Tso => "tso",
            Mode::Mtu1500 => "1500",
        }
    }
}

struct Run {
    gbps: f64,
    /// TCP retransmissions the sender counted (iperf3), -1 if unknown.
    retrans: i64,
    user: f64,
    sys: f64,
    secs: f64,
    /// Frames and bytes received from `f0` (the data direction) and from `f1` (ACKs).
    fwd: (u64, u64),
    rev: (u64, u64),
    /// Frames lost inside the forwarder: refused, dropped for a full ring or buffer.
    drops: String,
}

fn open(kind: Kind, id: u16, ifname: &str) -> Box<dyn Port> {
    match kind {
        Kind::Ring128 => {
            let cfg = RingConfig { block_size: 128 << 10, block_nr: 128, retire_timeout_ms: 1 };
            Box::new(AfPacketRingPort::open_with(id, ifname, ifname, None, cfg).expect("open ring"))
        }
        Kind::Ring => Box::new(AfPacketRingPort::open(id, ifname, ifname, None).expect("open ring")),
        _ => Box::new(AfPacketPort::open(id, ifname, ifname, None).expect("open mmsg")),
    }
}

/// The forwarder's two sides.
enum Fwd {
    /// Two ports, `recv_batch` on one, `send_batch` on the other.
    Ports([Box<dyn Port>; 2]),
    /// Per side an `AfPacketPort` to receive with and a transmit ring to send with.
    TxRing { rx: Box<[AfPacketPort; 2]>, tx: Box<[AfPacketTxRing; 2]>, zerocopy: bool },
}

fn poll_in(fds: [BorrowedFd<'_>; 2], timeout_ms: u64) -> [bool; 2] {
    let r = readable(&fds, Duration::from_millis(timeout_ms));
    [r[0], r[1]]
}

/// Forwards between `f0` and `f1` until `stop`; returns (user, sys, wall, stats).
fn forward(ns: &Netns, kind: Kind, stop: &AtomicBool, ready: &AtomicBool) -> Run {
    ns.enter();
    let mut fwd = match kind {
        Kind::TxCopy | Kind::TxZero => {
            let rx = ["f0", "f1"].map(|n| AfPacketPort::open(0, n, n, None).expect("open rx"));
            let tx =
                ["f0", "f1"].map(|n| AfPacketTxRing::open(n, TxRingConfig::default()).expect("open tx ring"));
            Fwd::TxRing { rx: Box::new(rx), tx: Box::new(tx), zerocopy: kind == Kind::TxZero }
        }
        _ => Fwd::Ports([open(kind, 0, "f0"), open(kind, 1, "f1")]),
    };
    let mut pool = PacketPool::new(512);
    let mut v = Vec::with_capacity(64);
    let mut ring_full_drops = 0u64;
    ready.store(true, Ordering::Release);
    let (u0, s0) = thread_cpu();
    let t0 = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        match &mut fwd {
            Fwd::Ports(ports) => {
                let readable = poll_in([ports[0].as_fd(), ports[1].as_fd()], 20);
                for i in 0..2 {
                    if !readable[i] {
                        continue;
                    }
                    loop {
                        let got = ports[i].recv_batch(&mut pool, &mut v, 64).expect("recv");
                        if got > 0 {
                            ports[1 - i].send_batch(&mut v, &mut pool).expect("send");
                        }
                        if got < 64 {
                            break;
                        }
                    }
                }
            }
            Fwd::TxRing { rx, tx, zerocopy } => {
                let pending = tx[0].pending() + tx[1].pending() > 0;
                let readable = poll_in([rx[0].as_fd(), rx[1].as_fd()], if pending { 1 } else { 20 });
                for i in 0..2 {
                    let (rx, out) = (&mut rx[i], &mut tx[1 - i]);
                    if out.pending() > 0 {
                        out.flush();
                    }
                    if !readable[i] {
                        continue;
                    }
                    loop {
                        let got = if *zerocopy {
                            out.recv_from(rx.as_fd(), 0, 64).expect("recv_from").received
                        } else {
                            let got = rx.recv_batch(&mut pool, &mut v, 64).expect("recv");
                            for p in v.drain(..) {
                                match out.next_area() {
                                    Some(area) => {
                                        p.offload
                                            .emit(&mut virtio_net::Header::new_unchecked(&mut area[..10]));
                                        area[10..10 + p.len()].copy_from_slice(p.frame());
                                        out.submit(0, 10 + p.len()).expect("submit");
                                    }
                                    None => ring_full_drops += 1,
                                }
                                pool.put(p);
                            }
                            got
                        };
                        out.flush();
                        if got < 64 {
                            break;
                        }
                    }
                }
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let (u1, s1) = thread_cpu();
    let (user, sys) = (u1 - u0, s1 - s0);
    let (fwd, rev, drops) = match &fwd {
        Fwd::Ports(ports) => {
            let (a, b) = (ports[0].stats(), ports[1].stats());
            let drops = format!(
                "f0 rx {} tx_dropped {} {:?}; f1 rx {} tx_dropped {} {:?}",
                a.rx_dropped(),
                a.tx_dropped,
                a.tx_errors,
                b.rx_dropped(),
                b.tx_dropped,
                b.tx_errors
            );
            ((a.rx_packets, a.rx_bytes), (b.rx_packets, b.rx_bytes), drops)
        }
        Fwd::TxRing { rx, tx, zerocopy } => {
            // Zero-copy: what came in on f0 was counted by the ring of f1, and back.
            let (a, b) =
                if *zerocopy { (tx[1].stats(), tx[0].stats()) } else { (rx[0].stats(), rx[1].stats()) };
            let (t0, t1) = (tx[0].stats(), tx[1].stats());
            let drops = format!(
                "rx dropped {}+{}; ring full {} (recv_from calls) / {} (copy drops); refused f0 {:?} f1 {:?}; \
                 sent f0 {} f1 {}",
                a.rx_dropped(),
                b.rx_dropped(),
                t0.tx_dropped + t1.tx_dropped,
                ring_full_drops,
                t0.tx_errors,
                t1.tx_errors,
                t0.tx_packets,
                t1.tx_packets
            );
            ((a.rx_packets, a.rx_bytes), (b.rx_packets, b.rx_bytes), drops)
        }
    };
    Run { gbps: 0.0, retrans: 0, user, sys, secs, fwd, rev, drops }
}

/// The number after `"key":` in the `section` object of iperf3's JSON end summary.
fn json_number(json: &str, section: &str, key: &str) -> Option<f64> {
    let at = json.rfind(&format!("\"{section}\""))?;
    let rest = &json[at..];
    let pat = format!("\"{key}\":");
    let k = rest.find(&pat)? + pat.len();
    let num: String = rest[k..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == 'e' || *c == '+' || *c == '-')
        .collect();
    num.parse().ok()
}

fn one_run(lab: &Lab, kind: Kind, secs: u32) -> Run {
    let stop = AtomicBool::new(false);
    let ready = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let fwd = sc.spawn(|| forward(&lab.f, kind, &stop, &ready));
        while !ready.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut server = ns_exec(lab.r.name(), &["iperf3", "-s", "-1", "-B", "198.18.0.2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("iperf3 -s");
        std::thread::sleep(Duration::from_millis(400));
        let t = secs.to_string();
        let out = ns_exec(lab.s.name(), &["iperf3", "-c", "198.18.0.2", "-t", &t, "-J"])
            .output()
            .expect("iperf3 -c");
        let _ = server.wait();
        stop.store(true, Ordering::Relaxed);
        let mut run = fwd.join().expect("forwarder");
        let json = String::from_utf8_lossy(&out.stdout);
        run.gbps = json_number(&json, "sum_received", "bits_per_second").unwrap_or(0.0) / 1e9;
        run.retrans = json_number(&json, "sum_sent", "retransmits").unwrap_or(-1.0) as i64;
        run
    })
}

fn set_sender_offloads(lab: &Lab, mode: Mode) {
    let on = if mode == Mode::Tso { "on" } else { "off" };
    let ok = ns_exec(lab.s.name(), &["ethtool", "-K", "s0", "tso", on, "gso", on]).status().expect("ethtool");
    assert!(ok.success(), "ethtool -K s0 tso {on} gso {on}");
}

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .map(|s| s.trim().to_owned())
        .collect()
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let secs: u32 = std::env::var("IO_BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    let rounds: u32 = std::env::var("IO_BENCH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let kinds: Vec<Kind> = env_list("IO_BENCH_KINDS", "mmsg,txring-copy,txring-zerocopy")
        .iter()
        .map(|k| Kind::parse(k).unwrap_or_else(|| panic!("unknown kind {k:?}")))
        .collect();
    let modes: Vec<Mode> = env_list("IO_BENCH_MODES", "tso,1500")
        .iter()
        .map(|m| match m.as_str() {
            "tso" => Mode::Tso,
            "1500" => Mode::Mtu1500,
            _ => panic!("unknown mode {m:?} (tso, 1500)"),
        })
        .collect();
    let lab = Lab::new();
    let mut summary = Vec::new();
    for &mode in &modes {
        set_sender_offloads(&lab, mode);
        println!("\n## sender frames: {} ({secs} s per run)\n", mode.name());
        println!(
            "| round | forwarder | Gbit/s | retrans | fwd user s | fwd sys s | fwd CPU % of wall | frames f0→f1 | avg B | \
             frames f1→f0 | avg B |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        let mut runs: Vec<Vec<Run>> = kinds.iter().map(|_| Vec::new()).collect();
        for round in 1..=rounds {
            for (k, &kind) in kinds.iter().enumerate() {
                let r = one_run(&lab, kind, secs);
                let avg = |(n, b): (u64, u64)| b.checked_div(n).unwrap_or(0);
                println!(
                    "| {round} | {} | {:.2} | {} | {:.2} | {:.2} | {:.0} | {} | {} | {} | {} |",
                    kind.name(),
                    r.gbps,
                    r.retrans,
                    r.user,
                    r.sys,
                    100.0 * (r.user + r.sys) / r.secs,
                    r.fwd.0,
                    avg(r.fwd),
                    r.rev.0,
                    avg(r.rev),
                );
                eprintln!("  {} round {round}: {}", kind.name(), r.drops);
                runs[k].push(r);
            }
        }
        for (k, &kind) in kinds.iter().enumerate() {
            let rs = &runs[k];
            let n = rs.len() as f64;
            let g: Vec<f64> = rs.iter().map(|r| r.gbps).collect();
            let mean = g.iter().sum::<f64>() / n;
            let sd = (g.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0)).sqrt();
            let mut sorted = g.clone();
            sorted.sort_by(f64::total_cmp);
            let median = (sorted[(sorted.len() - 1) / 2] + sorted[sorted.len() / 2]) / 2.0;
            let (u, s, w) = rs.iter().fold((0.0, 0.0, 0.0), |a, r| (a.0 + r.user, a.1 + r.sys, a.2 + r.secs));
            let (data_frames, data_bytes) =
                rs.iter().fold((0u64, 0u64), |a, r| (a.0 + r.fwd.0, a.1 + r.fwd.1));
            let acks: u64 = rs.iter().map(|r| r.rev.0).sum();
            let line = format!(
                "mean {:>4} {:<16}: {mean:6.2} Gbit/s (median {median:.2}, sd {sd:.2}, min {:.2}, max {:.2}), user {:.2} s, sys {:.2} s, \
                 CPU {:.0} %, fwd CPU s per GB of data {:.3}, µs per data frame {:.2}, reverse frames per data frame {:.2}",
                mode.name(),
                kind.name(),
                g.iter().cloned().fold(f64::INFINITY, f64::min),
                g.iter().cloned().fold(0.0, f64::max),
                u / n,
                s / n,
                100.0 * (u + s) / w,
                (u + s) / (data_bytes.max(1) as f64 / 1e9),
                1e6 * (u + s) / (data_frames.max(1) as f64),
                acks as f64 / data_frames.max(1) as f64,
            );
            println!("{line}");
            summary.push(line);
        }
    }
    set_sender_offloads(&lab, Mode::Tso);
    println!("\n## summary\n");
    for l in summary {
        println!("{l}");
    }
}
