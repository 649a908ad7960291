//! Bump-in-the-wire forwarder benchmark: `AfPacketPort` (recvmmsg/sendmmsg) against
//! `AfPacketRingPort` (TPACKET_V3 receive ring), alternating, in the same run.
//!
//! Topology, in namespaces this program creates and deletes (`vmpls-io-<pid>-{s,f,r}`):
//! sender `s0` 198.18.0.1 --veth-- `f0` [forwarder] `f1` --veth-- `r0` 198.18.0.2 receiver.
//! A kernel TCP flow (iperf3, default offloads, so TSO super-frames) crosses the
//! forwarder, which moves frames unchanged between its two ports on one thread.
//! Reports Gbit/s (iperf3 receiver side) and the forwarder thread's user/sys CPU time
//! (`getrusage(RUSAGE_THREAD)`).
//!
//! Run (as root): `CARGO_TARGET_DIR=/work/target-ring cargo bench -p vmpls-ports --bench io`
//! Environment: `IO_BENCH_SECS` (default 5), `IO_BENCH_ROUNDS` (default 3).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vmpls_dataplane::PacketPool;
use vmpls_ports::{AfPacketPort, AfPacketRingPort, Port, PortStats, RingConfig};

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

fn ns_exec(ns: &str, cmd: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(cmd);
    c
}

struct Lab {
    s: String,
    f: String,
    r: String,
}

impl Lab {
    fn new() -> Lab {
        let pid = std::process::id();
        let lab = Lab {
            s: format!("vmpls-io-{pid}-s"),
            f: format!("vmpls-io-{pid}-f"),
            r: format!("vmpls-io-{pid}-r"),
        };
        let (s, f, r) = (lab.s.as_str(), lab.f.as_str(), lab.r.as_str());
        for ns in [s, f, r] {
            ip(&["netns", "add", ns]);
            let ok = ns_exec(
                ns,
                &[
                    "sysctl",
                    "-qw",
                    "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv6.conf.default.disable_ipv6=1",
                ],
            )
            .status()
            .expect("sysctl");
            assert!(ok.success());
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        ip(&["link", "add", "s0", "netns", s, "type", "veth", "peer", "name", "f0", "netns", f]);
        ip(&["link", "add", "f1", "netns", f, "type", "veth", "peer", "name", "r0", "netns", r]);
        for (ns, dev) in [(s, "s0"), (f, "f0"), (f, "f1"), (r, "r0")] {
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        ip(&["-n", s, "addr", "add", "198.18.0.1/24", "dev", "s0"]);
        ip(&["-n", r, "addr", "add", "198.18.0.2/24", "dev", "r0"]);
        lab
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in [&self.s, &self.f, &self.r] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

fn enter_netns(ns: &str) {
    let file = File::open(format!("/run/netns/{ns}")).expect("open netns");
    // SAFETY: setns takes a descriptor we own and changes only this thread's namespace.
    let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
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
    Mmsg,
    /// Default ring: 64 blocks of 256 KiB.
    Ring,
    /// 128 blocks of 128 KiB: one super-frame closes a block.
    Ring128,
}

struct Run {
    gbps: f64,
    user: f64,
    sys: f64,
    secs: f64,
    a: PortStats,
    b: PortStats,
}

fn open(kind: Kind, id: u16, ifname: &str) -> Box<dyn Port> {
    match kind {
        Kind::Mmsg => Box::new(AfPacketPort::open(id, ifname, ifname, None).expect("open mmsg")),
        Kind::Ring128 => {
            let cfg = RingConfig { block_size: 128 << 10, block_nr: 128, retire_timeout_ms: 1 };
            Box::new(AfPacketRingPort::open_with(id, ifname, ifname, None, cfg).expect("open ring"))
        }
        Kind::Ring => Box::new(AfPacketRingPort::open(id, ifname, ifname, None).expect("open ring")),
    }
}

/// Forwards between `f0` and `f1` until `stop`; returns (user, sys, wall, stats).
fn forward(
    ns: &str,
    kind: Kind,
    stop: &AtomicBool,
    ready: &AtomicBool,
) -> (f64, f64, f64, PortStats, PortStats) {
    enter_netns(ns);
    let mut ports = [open(kind, 0, "f0"), open(kind, 1, "f1")];
    let mut pool = PacketPool::new(512);
    let mut v = Vec::with_capacity(64);
    ready.store(true, Ordering::Release);
    let (u0, s0) = thread_cpu();
    let t0 = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let mut pfd = [0, 1].map(|i| libc::pollfd { fd: ports[i].fd(), events: libc::POLLIN, revents: 0 });
        // SAFETY: `pfd` is an array of two live pollfds.
        let n = unsafe { libc::poll(pfd.as_mut_ptr(), 2, 20) };
        if n <= 0 {
            continue;
        }
        for i in 0..2 {
            if pfd[i].revents & libc::POLLIN == 0 {
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
    let wall = t0.elapsed().as_secs_f64();
    let (u1, s1) = thread_cpu();
    (u1 - u0, s1 - s0, wall, ports[0].stats(), ports[1].stats())
}

fn received_bps(json: &str) -> Option<f64> {
    let at = json.find("\"sum_received\"")?;
    let rest = &json[at..];
    let k = rest.find("\"bits_per_second\":")? + "\"bits_per_second\":".len();
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
        let mut server = ns_exec(&lab.r, &["iperf3", "-s", "-1", "-B", "198.18.0.2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("iperf3 -s");
        std::thread::sleep(Duration::from_millis(400));
        let t = secs.to_string();
        let out =
            ns_exec(&lab.s, &["iperf3", "-c", "198.18.0.2", "-t", &t, "-J"]).output().expect("iperf3 -c");
        let _ = server.wait();
        stop.store(true, Ordering::Relaxed);
        let (user, sys, wall, a, b) = fwd.join().expect("forwarder");
        let json = String::from_utf8_lossy(&out.stdout);
        let gbps = received_bps(&json).unwrap_or(0.0) / 1e9;
        Run { gbps, user, sys, secs: wall, a, b }
    })
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let secs: u32 = std::env::var("IO_BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    let rounds: u32 = std::env::var("IO_BENCH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let lab = Lab::new();
    println!(
        "| round | port | Gbit/s | fwd user s | fwd sys s | fwd CPU % of wall | frames f0→f1 | avg frame B |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut sums = [(0.0, 0.0, 0.0, 0.0); 3];
    for round in 1..=rounds {
        for (k, kind) in [Kind::Mmsg, Kind::Ring, Kind::Ring128].into_iter().enumerate() {
            let r = one_run(&lab, kind, secs);
            let frames = r.a.rx_packets;
            let avg = r.a.rx_bytes.checked_div(frames).unwrap_or(0);
            let name = match kind {
                Kind::Mmsg => "AfPacketPort (mmsg)",
                Kind::Ring => "AfPacketRingPort (V3, 64 x 256 KiB)",
                Kind::Ring128 => "AfPacketRingPort (V3, 128 x 128 KiB)",
            };
            println!(
                "| {round} | {name} | {:.2} | {:.2} | {:.2} | {:.0} | {frames} | {avg} |",
                r.gbps,
                r.user,
                r.sys,
                100.0 * (r.user + r.sys) / r.secs
            );
            eprintln!(
                "  drops: f0 rx {} tx {:?}; f1 rx {} tx_dropped {}",
                r.a.rx_dropped(),
                r.a.tx_errors,
                r.b.rx_dropped(),
                r.b.tx_dropped
            );
            sums[k].0 += r.gbps;
            sums[k].1 += r.user;
            sums[k].2 += r.sys;
            sums[k].3 += r.secs;
        }
    }
    for (k, name) in ["mmsg", "ring 256K", "ring 128K"].iter().enumerate() {
        let n = f64::from(rounds);
        let (g, u, s, w) = sums[k];
        println!(
            "mean {name}: {:.2} Gbit/s, user {:.2} s, sys {:.2} s, CPU {:.0} %, sys per Gbit {:.3} s",
            g / n,
            u / n,
            s / n,
            100.0 * (u + s) / w,
            (s / n) / (g / n).max(1e-9)
        );
    }
}
