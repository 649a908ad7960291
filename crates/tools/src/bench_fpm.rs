//! `vmpls bench fpm`: how fast routes from zebra are in force. A generator speaking FPM
//! as zebra does (`vmpls_frr::route::encode`) sends a full table (label routes and
//! labelled prefixes) to a `vmpls run` with `[frr]` in a namespace of its own, then single
//! updates one at a time; each is timed from the first byte written until the router's
//! counters show it (the router confirms a table only once it is in force, in the
//! pipeline and, with `--fast-path`, in the kernel's maps). The baseline, in the same
//! run and namespace: the kernel's own FIB taking as many IPv4 routes with `ip -batch`.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;
use vmpls_control::api::Request;

use vmpls_frr::route::{MAIN_TABLE, encode};
use vmpls_frr::{Dest, Kind, Nexthop, Route, RouteKey, fpm};
use vmpls_lab::{IpPrefix, Topology};
use vmpls_router::client::Connection;

/// What `vmpls bench fpm` measures.
pub struct FpmBenchOptions {
    /// Label routes in the full table (and as many labelled prefixes).
    pub routes: u32,
    /// Single updates timed after the full table.
    pub updates: u32,
    /// Run the router with the in-kernel fast path.
    pub fast_path: bool,
    /// Print JSON.
    pub json: bool,
}

struct Bench {
    topo: Topology,
    dir: PathBuf,
    _socket: PathBuf,
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = self.topo.stop_all(Duration::from_secs(3));
        let _ = self.topo.cleanup();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn connect(socket: &Path) -> anyhow::Result<Connection> {
    Ok(Connection::open(socket)?)
}

/// (routes, label routes) from zebra the router holds now.
fn held(c: &mut Connection) -> anyhow::Result<(u64, u64)> {
    let st =
        c.request(&Request::Stats).map_err(|e| anyhow::anyhow!("{}", e))?.context("stats without data")?;
    let get = |name: &str| {
        st["frr"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["name"] == name))
            .and_then(|c| c["value"].as_u64())
    };
    Ok((get("routes").unwrap_or(0), get("label_routes").unwrap_or(0)))
}

fn wait_held(c: &mut Connection, want: (u64, u64), timeout: Duration) -> anyhow::Result<Duration> {
    let start = Instant::now();
    loop {
        if held(c)? == want {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            bail!("the router holds {:?} routes from zebra, not {want:?}, after {timeout:?}", held(c)?);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn lsp(label: u32, ifindex: u32) -> Route {
    Route {
        key: RouteKey { table: MAIN_TABLE, dest: Dest::Label(label) },
        protocol: 193,
        kind: Kind::Unicast,
        nexthops: vec![Nexthop {
            gateway: Some(IpAddr::V4(Ipv4Addr::new(198, 18, 10, 2))),
            ifindex: Some(ifindex),
            labels: vec![label + 100_000],
            weight: 1,
        }],
    }
}

/// The i-th destination: the /32s of 198.19.0.0/16 in order (`i` below 65,536; the
/// callers' limits keep it there, inside the documentation range 198.18.0.0/15).
fn prefix_v4(i: u32) -> Ipv4Addr {
    debug_assert!(i < 1 << 16);
    Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 0, 0)) + (i & 0xffff))
}

fn pushed(i: u32, ifindex: u32) -> Route {
    Route {
        key: RouteKey { table: MAIN_TABLE, dest: Dest::Prefix(IpAddr::V4(prefix_v4(i)), 32) },
        protocol: 193,
        kind: Kind::Unicast,
        nexthops: vec![Nexthop {
            gateway: Some(IpAddr::V4(Ipv4Addr::new(198, 18, 10, 2))),
            ifindex: Some(ifindex),
            labels: vec![16 + (i % 1000)],
            weight: 1,
        }],
    }
}

/// Runs the benchmark and prints the table (or JSON).
pub fn run(opts: &FpmBenchOptions) -> anyhow::Result<()> {
    vmpls_lab::require_root()?;
    anyhow::ensure!(
        (1..=30_000).contains(&opts.routes) && opts.updates <= 1000,
        "--routes must be 1 to 30000 (prefixes come from 198.19.0.0/16) and --updates at most 1000"
    );
    let mut topo = Topology::new();
    topo.add_host("r")?;
    topo.add_host("h")?;
    topo.add_link("r", "r-h", "h", "h-r", 1500)?;
    topo.add_address("r", "r-h", "198.18.10.1/24".parse::<IpPrefix>()?)?;
    topo.add_address("h", "h-r", "198.18.10.2/24".parse::<IpPrefix>()?)?;
    topo.add_address("r", "lo", "198.18.255.1/32".parse::<IpPrefix>()?)?;
    topo.set_forwarding("r", false)?;
    let dir = std::env::temp_dir().join(format!("vmpls-bench-fpm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let socket = dir.join("r.sock");
    let mut b = Bench { topo, dir: dir.clone(), _socket: socket.clone() };

    // The baseline: the kernel's FIB, as many IPv4 routes as the table has entries.
    let n = opts.routes;
    let batch = dir.join("kernel.batch");
    let mut text = String::new();
    for i in 0..2 * n {
        text.push_str(&format!("route add {}/32 via 198.18.10.2 table 100\n", prefix_v4(i)));
    }
    std::fs::write(&batch, text)?;
    let mut cmd = Command::new("ip");
    cmd.arg("-batch").arg(&batch);
    let t = Instant::now();
    let out = b.topo.run_timeout("r", cmd, Duration::from_secs(300))?;
    let kernel_full = t.elapsed();
    anyhow::ensure!(out.status.success(), "ip -batch: {}", String::from_utf8_lossy(&out.stderr));
    let mut one_kernel = Vec::new();
    for i in 0..opts.updates.min(20) {
        let mut cmd = Command::new("ip");
        cmd.args([
            "route",
            "add",
            &format!("{}/32", prefix_v4(2 * n + i)),
            "via",
            "198.18.10.2",
            "table",
            "100",
        ]);
        let t = Instant::now();
        b.topo.run_timeout("r", cmd, Duration::from_secs(10))?;
        one_kernel.push(t.elapsed());
    }

    // The router.
    let cfg = dir.join("r.toml");
    let fast = if opts.fast_path { "fast-path = \"tc\"\n" } else { "fast-path = \"off\"\n" };
    std::fs::write(
        &cfg,
        format!(
            "[router]\nname = \"r\"\ncontrol-socket = \"{}\"\n{fast}\n[frr]\n\n[[port]]\nname = \"east\"\ninterface = \"r-h\"\n",
            socket.display()
        ),
    )?;
    let log = dir.join("r.log");
    let mut cmd = Command::new(crate::router_binary()?);
    cmd.args(["run", "--config"]).arg(&cfg).stdout(Stdio::null()).stderr(std::fs::File::create(&log)?);
    b.topo.spawn("r", "vmpls", cmd, Some(log.clone()))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        if Instant::now() > deadline {
            bail!("the router did not start: {}", Topology::log_tail(&log, 20));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let ifindex = b.topo.in_host("r", || vmpls_ports::if_nametoindex("r-h"))?.context("no interface r-h")?;
    let mut zebra = b.topo.in_host("r", || TcpStream::connect("127.0.0.1:2620"))??;
    zebra.set_nodelay(true)?;
    let mut stream = Vec::new();
    for i in 0..n {
        stream.extend(fpm::frame(&encode::message(&lsp(16 + i, ifindex), false)));
        stream.extend(fpm::frame(&encode::message(&pushed(i, ifindex), false)));
    }
    let t = Instant::now();
    zebra.write_all(&stream)?;
    let mut ctl = connect(&socket)?;
    wait_held(&mut ctl, (u64::from(n), u64::from(n)), Duration::from_secs(120))?;
    let full = t.elapsed();
    let mut one = Vec::new();
    for i in 0..opts.updates {
        let msg = fpm::frame(&encode::message(&lsp(16 + n + i, ifindex), false));
        let t = Instant::now();
        zebra.write_all(&msg)?;
        wait_held(&mut ctl, (u64::from(n), u64::from(n + i + 1)), Duration::from_secs(10))?;
        one.push(t.elapsed());
    }
    one.sort();
    one_kernel.sort();
    let median = |v: &[Duration]| v.get(v.len() / 2).copied().unwrap_or_default();
    let max = |v: &[Duration]| v.last().copied().unwrap_or_default();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let report = json!({
        "routes": n, "label_routes": n, "fast_path": opts.fast_path,
        "full_table_s": full.as_secs_f64(),
        "kernel_full_table_s": kernel_full.as_secs_f64(),
        "single_update_median_ms": ms(median(&one)),
        "single_update_max_ms": ms(max(&one)),
        "kernel_single_route_median_ms": ms(median(&one_kernel)),
        "ratio_full_table": full.as_secs_f64() / kernel_full.as_secs_f64(),
    });
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("| what | vmpls (FPM, in force) | kernel (`ip -batch`, same namespace) | ratio |");
        println!("|------|------:|------:|------:|");
        println!(
            "| full table: {n} label routes + {n} labelled prefixes (kernel: {} IPv4 routes) | {:.3} s | {:.3} s | {:.2} |",
            2 * n,
            full.as_secs_f64(),
            kernel_full.as_secs_f64(),
            full.as_secs_f64() / kernel_full.as_secs_f64()
        );
        println!(
            "| one more route, median of {} (max {:.2} ms) | {:.2} ms | {:.2} ms (`ip route add`, process start included) | {:.2} |",
            one.len(),
            ms(max(&one)),
            ms(median(&one)),
            ms(median(&one_kernel)),
            ms(median(&one)) / ms(median(&one_kernel)).max(1e-9)
        );
        println!();
        println!(
            "fast path: {}",
            if opts.fast_path { "tc (updates confirmed once in the kernel's maps)" } else { "off" }
        );
    }
    drop(zebra);
    Ok(())
}
