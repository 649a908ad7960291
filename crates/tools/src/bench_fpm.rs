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
        // The counters come from the forwarding loop, which may be busy for seconds
        // writing a whole table into the fast path's maps: a request it does not answer
        // in time is asked again until the timeout.
        let now = held(c);
        if now.as_ref().is_ok_and(|h| *h == want) {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            match now {
                Ok(h) => bail!("the router holds {h:?} routes from zebra, not {want:?}, after {timeout:?}"),
                Err(e) => bail!("the router's counters, after {timeout:?}: {e:#}"),
            }
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

/// The VPN mode of `vmpls bench fpm` (`--vrfs N`).
pub struct VpnBenchOptions {
    /// VRFs (network namespaces, as zebra `-n` has them).
    pub vrfs: u32,
    /// Labelled VPN routes per VRF.
    pub routes_per_vrf: u32,
    /// Single route changes timed after the full table.
    pub changes: u32,
    /// Run the router with the in-kernel fast path.
    pub fast_path: bool,
    /// Print JSON.
    pub json: bool,
}

/// The first VRF's table id: the index of its VRF interface, as the zebra module gives
/// them (from 1000 up).
const FIRST_VRF_TABLE: u32 = 1000;
/// The transport label every VPN route is pushed under (the remote PE's LSP).
const TRANSPORT_LABEL: u32 = 100;
/// VRF i's remote VPN label (what its routes push under the transport label) and its own
/// (the label popping into it).
const REMOTE_VPN_LABEL: u32 = 80_000;
const LOCAL_VPN_LABEL: u32 = 90_000;
/// Changed routes push labels from here (one new label per change).
const CHANGED_VPN_LABEL: u32 = 200_000;

fn vrf_name(i: u32) -> String {
    format!("vrf{i}")
}

/// Route `r` of VRF `v`: 198.19.x.y/32 (the same destinations in every VRF, as
/// customers' addresses overlap), pushing `vpn_label` under the transport label.
fn vpn_route(v: u32, r: u32, vpn_label: u32, ifindex: u32) -> Route {
    Route {
        key: RouteKey { table: FIRST_VRF_TABLE + v, dest: Dest::Prefix(IpAddr::V4(prefix_v4(r)), 32) },
        protocol: 186, // bgp
        kind: Kind::Unicast,
        nexthops: vec![Nexthop {
            gateway: Some(IpAddr::V4(Ipv4Addr::new(198, 18, 10, 2))),
            ifindex: Some(ifindex),
            labels: vec![TRANSPORT_LABEL, vpn_label],
            weight: 1,
        }],
    }
}

/// VRF `v`'s own VPN label: pop, then route in the VRF (out of its VRF interface).
fn vpn_label_route(v: u32) -> Route {
    Route {
        key: RouteKey { table: MAIN_TABLE, dest: Dest::Label(LOCAL_VPN_LABEL + v) },
        protocol: 186,
        kind: Kind::Unicast,
        nexthops: vec![Nexthop {
            gateway: None,
            ifindex: Some(FIRST_VRF_TABLE + v),
            labels: vec![],
            weight: 1,
        }],
    }
}

/// Kernel memory in the FIB's own slab caches (`ip_fib_alias`, `ip_fib_trie`: a route's
/// alias and leaf; the trie's inner nodes come from kmalloc and are not in them), and
/// all slab memory (`Slab:` of /proc/meminfo, the whole machine's), in bytes.
fn kernel_slab() -> anyhow::Result<(u64, u64)> {
    let slabinfo = std::fs::read_to_string("/proc/slabinfo").context("reading /proc/slabinfo")?;
    let mut fib = 0;
    for line in slabinfo.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() > 3 && (f[0] == "ip_fib_alias" || f[0] == "ip_fib_trie") {
            fib += f[1].parse::<u64>()? * f[3].parse::<u64>()?;
        }
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    let slab = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("Slab:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .context("no Slab: in /proc/meminfo")?;
    Ok((fib, slab * 1024))
}

/// Resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .context("no VmRSS in the router's /proc status")
}

/// The labels of the route a packet to `addr` takes in `vrf`, as the router answers
/// `route get` (from the tables in force: the FPM thread holds them until the forwarding
/// loop, and with the fast path the kernel's maps, took a change).
fn labels_in_force(c: &mut Connection, vrf: &str, addr: Ipv4Addr) -> anyhow::Result<Vec<u64>> {
    let r = c
        .request(&Request::RouteGet { addr: IpAddr::V4(addr), vrf: Some(vrf.to_string()) })
        .map_err(|e| anyhow::anyhow!("route get {addr} vrf {vrf}: {e}"))?
        .context("route get without data")?;
    let nhs = r["nexthops"].as_array().cloned().unwrap_or_default();
    Ok(nhs
        .first()
        .and_then(|n| n["labels"].as_array())
        .map(|l| l.iter().filter_map(serde_json::Value::as_u64).collect())
        .unwrap_or_default())
}

/// The VRFs the router has found (with a table id).
fn vrfs_found(c: &mut Connection) -> anyhow::Result<usize> {
    let v = c.request(&Request::VrfShow).map_err(|e| anyhow::anyhow!("vrf show: {e}"))?;
    Ok(v.as_ref()
        .and_then(serde_json::Value::as_array)
        .map(|a| a.iter().filter(|v| v["table"].is_u64()).count())
        .unwrap_or(0))
}

struct VpnBench {
    // Drop order: the router and the namespaces of the topology, then the VRFs'.
    topo: Topology,
    vrf_dir: vmpls_lab::netns::NetnsDir,
    dir: PathBuf,
}

impl Drop for VpnBench {
    fn drop(&mut self) {
        let _ = self.topo.stop_all(Duration::from_secs(3));
        let _ = self.topo.cleanup();
        let _ = self.vrf_dir.cleanup();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Percentile `p` (0 to 100) of sorted `v`.
fn percentile(v: &[Duration], p: usize) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v[((v.len() * p).div_ceil(100)).saturating_sub(1).min(v.len() - 1)]
}

/// Runs the VPN benchmark: the router in FRR mode with `vrfs` VRF namespaces in a
/// private `/run/netns` (each holding its VRF interface, as the zebra module makes them),
/// a generator sending per VRF `routes_per_vrf` labelled routes (VPN label under a
/// transport label) and the VRF's own VPN label; then single route changes, each timed
/// until `route get` answers with the new label; the router's memory per route; the
/// kernel's FIB taking the same routes (without labels) into as many tables.
pub fn run_vpn(opts: &VpnBenchOptions) -> anyhow::Result<()> {
    vmpls_lab::require_root()?;
    let (nv, nr) = (opts.vrfs, opts.routes_per_vrf);
    anyhow::ensure!(
        (1..=1000).contains(&nv) && (1..=60_000).contains(&nr) && opts.changes <= 1000,
        "--vrfs must be 1 to 1000, --routes-per-vrf 1 to 60000 (destinations come from 198.19.0.0/16) and \
         --updates at most 1000"
    );
    let total = u64::from(nv) * u64::from(nr);
    let mut topo = Topology::new();
    topo.add_host("r")?;
    topo.add_host("h")?;
    topo.add_link("r", "r-h", "h", "h-r", 1500)?;
    topo.add_address("r", "r-h", "198.18.10.1/24".parse::<IpPrefix>()?)?;
    topo.add_address("h", "h-r", "198.18.10.2/24".parse::<IpPrefix>()?)?;
    topo.add_address("r", "lo", "198.18.255.1/32".parse::<IpPrefix>()?)?;
    topo.set_forwarding("r", false)?;
    let vrf_dir = Path::new("/run/vmpls-lab").join(format!("{}-bench-fpm", topo.prefix()));
    let vrf_dir = vmpls_lab::netns::NetnsDir::create(&vrf_dir)?;
    let dir = std::env::temp_dir().join(format!("vmpls-bench-fpm-vpn-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let mut b = VpnBench { topo, vrf_dir, dir: dir.clone() };

    // The VRFs as `zebra -n` and the zebra module make them: namespace NAME holding a veth
    // end NAME of index T, whose peer NAME has index T in the router's namespace.
    let mut links = String::new();
    for v in 0..nv {
        let name = vrf_name(v);
        b.vrf_dir.add(&name)?;
        let t = FIRST_VRF_TABLE + v;
        links.push_str(&format!(
            "link add {name} index {t} type veth peer name {name} index {t} netns {}\n",
            b.vrf_dir.ns_path(&name).display()
        ));
    }
    let batch = dir.join("vrfs.batch");
    std::fs::write(&batch, links)?;
    let mut cmd = Command::new("ip");
    cmd.arg("-batch").arg(&batch);
    let out = b.topo.run_timeout("r", cmd, Duration::from_secs(120))?;
    anyhow::ensure!(
        out.status.success(),
        "making the VRF interfaces: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The baseline: the kernel's FIB taking the same destinations into one table per VRF
    // (plain IPv4 routes: this kernel has no MPLS), its slab memory before and after.
    let mut text = String::new();
    for v in 0..nv {
        for r in 0..nr {
            text.push_str(&format!(
                "route add {}/32 via 198.18.10.2 table {}\n",
                prefix_v4(r),
                FIRST_VRF_TABLE + v
            ));
        }
    }
    let batch = dir.join("kernel.batch");
    std::fs::write(&batch, text)?;
    let slab_before = kernel_slab()?;
    let mut cmd = Command::new("ip");
    cmd.arg("-batch").arg(&batch);
    let t = Instant::now();
    let out = b.topo.run_timeout("r", cmd, Duration::from_secs(600))?;
    let kernel_full = t.elapsed();
    anyhow::ensure!(out.status.success(), "ip -batch: {}", String::from_utf8_lossy(&out.stderr));
    let slab_after = kernel_slab()?;
    let kernel_fib_per_route = slab_after.0.saturating_sub(slab_before.0) as f64 / total as f64;
    let kernel_slab_per_route = slab_after.1.saturating_sub(slab_before.1) as f64 / total as f64;
    let mut one_kernel = Vec::new();
    for i in 0..opts.changes.min(20) {
        let mut cmd = Command::new("ip");
        cmd.args(["route", "replace", &format!("{}/32", prefix_v4(i % nr)), "via", "198.18.10.2", "table"])
            .arg((FIRST_VRF_TABLE + i % nv).to_string())
            .args(["realm", &(i + 1).to_string()]);
        let t = Instant::now();
        let out = b.topo.run_timeout("r", cmd, Duration::from_secs(10))?;
        one_kernel.push(t.elapsed());
        anyhow::ensure!(out.status.success(), "ip route replace: {}", String::from_utf8_lossy(&out.stderr));
    }

    // The router, seeing the VRFs' directory as its /run/netns.
    let socket = dir.join("r.sock");
    let cfg = dir.join("r.toml");
    let fast = if opts.fast_path { "fast-path = \"tc\"\n" } else { "fast-path = \"off\"\n" };
    std::fs::write(
        &cfg,
        format!(
            "[router]\nname = \"r\"\ncontrol-socket = \"{}\"\n{fast}\n[frr]\n\n[[port]]\nname = \"core\"\ninterface = \"r-h\"\n",
            socket.display()
        ),
    )?;
    let log = dir.join("r.log");
    let mut cmd = Command::new(crate::router_binary()?);
    cmd.args(["run", "--config"]).arg(&cfg).stdout(Stdio::null()).stderr(std::fs::File::create(&log)?);
    b.vrf_dir.private_for(&mut cmd)?;
    let pid = b.topo.spawn("r", "vmpls", cmd, Some(log.clone()))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        if Instant::now() > deadline {
            bail!("the router did not start: {}", Topology::log_tail(&log, 20));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut ctl = connect(&socket)?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while vrfs_found(&mut ctl)? < nv as usize {
        if Instant::now() > deadline {
            bail!(
                "the router found {} of the {nv} VRFs in 20 s: {}",
                vrfs_found(&mut ctl)?,
                Topology::log_tail(&log, 20)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The tables take the VRFs right after the scan that found them (same thread).
    std::thread::sleep(Duration::from_millis(200));
    let ifindex = b.topo.in_host("r", || vmpls_ports::if_nametoindex("r-h"))?.context("no interface r-h")?;
    let mut zebra = b.topo.in_host("r", || TcpStream::connect("127.0.0.1:2620"))??;
    zebra.set_nodelay(true)?;
    let mut stream = Vec::new();
    for v in 0..nv {
        stream.extend(fpm::frame(&encode::message(&vpn_label_route(v), false)));
        for r in 0..nr {
            stream
                .extend(fpm::frame(&encode::message(&vpn_route(v, r, REMOTE_VPN_LABEL + v, ifindex), false)));
        }
    }
    let rss_before = rss(pid)?;
    let cpu_before = crate::bench_vhost_user::process_cpu_seconds(pid)?;
    let t = Instant::now();
    zebra.write_all(&stream)?;
    wait_held(&mut ctl, (total, u64::from(nv)), Duration::from_secs(300))
        .with_context(|| Topology::log_tail(&log, 20))?;
    let full = t.elapsed();
    let full_cpu = crate::bench_vhost_user::process_cpu_seconds(pid)? - cpu_before;
    let rss_after = rss(pid)?;
    let rss_per_route = rss_after.saturating_sub(rss_before) as f64 / total as f64;

    // One route changed at a time: a new VPN label, in force when `route get` shows it.
    let mut one = Vec::new();
    let cpu_changes = crate::bench_vhost_user::process_cpu_seconds(pid)?;
    for i in 0..opts.changes {
        let (v, r) = (i % nv, (i.wrapping_mul(7919)) % nr);
        let label = CHANGED_VPN_LABEL + i;
        let msg = fpm::frame(&encode::message(&vpn_route(v, r, label, ifindex), false));
        let (vrf, addr) = (vrf_name(v), prefix_v4(r));
        let want = vec![u64::from(TRANSPORT_LABEL), u64::from(label)];
        let t = Instant::now();
        zebra.write_all(&msg)?;
        loop {
            if labels_in_force(&mut ctl, &vrf, addr)? == want {
                break;
            }
            if t.elapsed() > Duration::from_secs(10) {
                bail!("route {addr}/32 in VRF {vrf} is not pushing {want:?} 10 s after its message");
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        one.push(t.elapsed());
    }
    // The router's CPU per change (the `route get` polls included): what a change costs
    // whatever else the machine runs.
    let cpu_per_change =
        (crate::bench_vhost_user::process_cpu_seconds(pid)? - cpu_changes) / f64::from(opts.changes.max(1));
    let (routes, labels) = held(&mut ctl)?;
    anyhow::ensure!(
        (routes, labels) == (total, u64::from(nv)),
        "after the changes the router holds {routes} routes and {labels} label routes from zebra, not {total} and {nv}"
    );
    one.sort();
    one_kernel.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let report = json!({
        "vrfs": nv, "routes_per_vrf": nr, "vpn_routes": total, "vpn_labels": nv,
        "fast_path": opts.fast_path,
        "full_table_s": full.as_secs_f64(),
        "full_table_router_cpu_s": full_cpu,
        "kernel_full_table_s": kernel_full.as_secs_f64(),
        "changes": one.len(),
        "change_median_ms": ms(percentile(&one, 50)),
        "change_p99_ms": ms(percentile(&one, 99)),
        "change_max_ms": ms(one.last().copied().unwrap_or_default()),
        "change_router_cpu_ms": cpu_per_change * 1e3,
        "kernel_change_median_ms": ms(percentile(&one_kernel, 50)),
        "router_rss_before_bytes": rss_before,
        "router_rss_after_bytes": rss_after,
        "router_bytes_per_route": rss_per_route,
        "kernel_fib_slab_bytes_per_route": kernel_fib_per_route,
        "kernel_all_slab_bytes_per_route": kernel_slab_per_route,
    });
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("| what | vmpls (FPM, in force) | kernel (same namespace) |");
        println!("|------|------:|------:|");
        println!(
            "| all applied: {nv} VRFs x {nr} VPN routes ({total}, two labels each) + {nv} VPN labels (kernel: {total} IPv4 routes in {nv} tables, `ip -batch`) | {:.3} s | {:.3} s |",
            full.as_secs_f64(),
            kernel_full.as_secs_f64()
        );
        println!("| all applied: the router's CPU time (user + system) meanwhile | {full_cpu:.2} s | |");
        println!(
            "| one VPN route changed (new VPN label), in force: median of {} | {:.3} ms | {:.2} ms (`ip route replace`, process start included) |",
            one.len(),
            ms(percentile(&one, 50)),
            ms(percentile(&one_kernel, 50))
        );
        println!(
            "| one VPN route changed: p99 (max {:.3} ms) | {:.3} ms | |",
            ms(one.last().copied().unwrap_or_default()),
            ms(percentile(&one, 99))
        );
        println!(
            "| one VPN route changed: the router's CPU time per change (`route get` polls included) | {:.3} ms | |",
            cpu_per_change * 1e3
        );
        println!(
            "| memory per VPN route (vmpls: RSS delta / routes; kernel: `ip_fib_alias` + `ip_fib_trie` slab delta / routes; all slab: {:.0} B) | {:.0} B | {:.0} B |",
            kernel_slab_per_route, rss_per_route, kernel_fib_per_route
        );
        println!();
        println!(
            "fast path: {}",
            if opts.fast_path { "tc (changes confirmed once in the kernel's maps)" } else { "off" }
        );
    }
    drop(zebra);
    Ok(())
}
