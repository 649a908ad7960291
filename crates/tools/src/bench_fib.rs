//! `vmpls bench fib`: the router's tables at the size of real networks, beside the
//! kernel's FIB measured in the same run. For each size N (at most 262,141: the IPv4
//! prefixes stay inside the benchmarking range): a config of N IPv4 prefixes
//! pushing a label, N/10 IPv6 prefixes and N/10 label routes is loaded and built (time,
//! and the process's memory growth per route); one route is changed through the same
//! path as `vmpls route replace` (time until the new tables exist); the longest-prefix
//! match is timed on random addresses of the table; and
//! the kernel takes the same N IPv4 routes with `ip -batch` in a namespace of its own
//! (time, and the kernel's slab memory growth).

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use vmpls_control::Config;
use vmpls_control::api::{IpRoute, Nexthop, Protocol, RouteSpec, RouteType};
use vmpls_control::tables::{Change, Tables};
use vmpls_fib::Fib;

/// The IPv4 prefixes the tables get: every prefix inside the benchmarking range
/// 198.18.0.0/15, the /32s first, then the /31s and so on (262,143 in all), but the
/// port's connected subnet and address.
fn v4_prefixes(n: u32) -> Vec<(Ipv4Addr, u8)> {
    let base = u32::from(Ipv4Addr::new(198, 18, 0, 0));
    let own = [(Ipv4Addr::new(198, 18, 10, 0), 24), (Ipv4Addr::new(198, 18, 10, 1), 32)];
    (15..=32u8)
        .rev()
        .flat_map(|len| (0..1u32 << (len - 15)).map(move |i| (Ipv4Addr::from(base + (i << (32 - len))), len)))
        .filter(|p| !own.contains(p))
        .take(n as usize)
        .collect()
}

/// The most IPv4 prefixes [`v4_prefixes`] has.
const MAX_V4: u32 = (1 << 18) - 1 - 2;

fn v6(i: u32) -> Ipv6Addr {
    Ipv6Addr::from((0x2001_0db8u128 << 96) | (u128::from(i) << 64))
}

fn config_text(v4: &[(Ipv4Addr, u8)]) -> String {
    let n = v4.len() as u32;
    let mut s = String::with_capacity(n as usize * 90);
    s.push_str("[router]\nname = \"bench\"\n\n[[port]]\nname = \"core\"\ninterface = \"core0\"\n");
    s.push_str("addresses = [\"198.18.10.1/24\", \"2001:db8:ffff::1/64\"]\n");
    for (i, (a, len)) in v4.iter().enumerate() {
        let _ = write!(
            s,
            "\n[[route]]\nprefix = \"{a}/{len}\"\npush = [{}]\nvia = \"198.18.10.2\"\nport = \"core\"\n",
            16 + i % 100_000
        );
    }
    for i in 0..n / 10 {
        let _ = write!(
            s,
            "\n[[route]]\nprefix = \"{}/64\"\npush = [{}]\nvia = \"2001:db8:ffff::2\"\nport = \"core\"\n",
            v6(i + 1),
            16 + i % 100_000
        );
    }
    for i in 0..n / 10 {
        let _ = write!(
            s,
            "\n[[label]]\nin = {}\naction = \"swap\"\nout = [{}]\nvia = \"198.18.10.2\"\nport = \"core\"\n",
            16 + i,
            100_000 + i
        );
    }
    s
}

/// The process's resident memory, bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// The kernel's slab memory, bytes (where its routes live).
fn slab() -> u64 {
    let m = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    m.lines()
        .find_map(|l| l.strip_prefix("Slab:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Lookups per second of `fib`'s IPv4 table on `addrs`.
fn lookup_rate(fib: &Fib, addrs: &[Ipv4Addr]) -> f64 {
    let v4 = &fib.vrfs[0].v4;
    let start = Instant::now();
    let mut hits = 0usize;
    let mut rounds = 0;
    while start.elapsed() < Duration::from_millis(300) {
        for &a in addrs {
            hits += usize::from(v4.lookup(a).is_some());
        }
        rounds += 1;
    }
    std::hint::black_box(hits);
    (rounds * addrs.len()) as f64 / start.elapsed().as_secs_f64()
}

fn kernel_batch(v4: &[(Ipv4Addr, u8)], dir: &Path) -> anyhow::Result<(Duration, u64)> {
    let ns = format!("vmpls-benchfib-{}", std::process::id());
    let batch = dir.join("kernel.batch");
    let mut text = String::with_capacity(v4.len() * 50);
    for (a, len) in v4 {
        let _ = writeln!(text, "route add {a}/{len} via 198.18.10.2 dev k0");
    }
    std::fs::write(&batch, text)?;
    let run = |args: &[&str]| -> anyhow::Result<()> {
        let out = Command::new("ip").args(args).output().context("running ip")?;
        anyhow::ensure!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        Ok(())
    };
    run(&["netns", "add", &ns])?;
    let result = (|| {
        run(&["-n", &ns, "link", "add", "k0", "type", "veth", "peer", "name", "k1"])?;
        run(&["-n", &ns, "link", "set", "k0", "up"])?;
        run(&["-n", &ns, "addr", "add", "198.18.10.1/24", "dev", "k0"])?;
        let before = slab();
        let t = Instant::now();
        run(&["-n", &ns, "-batch", batch.to_str().context("path")?])?;
        Ok((t.elapsed(), slab().saturating_sub(before)))
    })();
    let _ = run(&["netns", "del", &ns]);
    result
}

/// Runs the benchmark for each size and prints the table (or JSON).
pub fn run(sizes: &[u32], json: bool) -> anyhow::Result<()> {
    vmpls_lab::require_root()?;
    let dir = std::env::temp_dir().join(format!("vmpls-bench-fib-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut rows = Vec::new();
    for &n in sizes {
        anyhow::ensure!(
            (10..=MAX_V4).contains(&n),
            "sizes are 10 to {MAX_V4}: the IPv4 prefixes stay inside the benchmarking range 198.18.0.0/15"
        );
        eprintln!("fib {n}: generating the config");
        let prefixes = v4_prefixes(n);
        let text = config_text(&prefixes);
        let before = rss();
        let t = Instant::now();
        let cfg = Config::from_str(&text, Path::new("bench.toml"))?;
        let parsed = t.elapsed();
        let (mut tables, fib) = Tables::built(cfg)?;
        let loaded = t.elapsed();
        drop(text);
        // As the router does after loading its config.
        vmpls_router::return_freed_memory();
        let grown = rss().saturating_sub(before);
        let entries = u64::from(n + n / 10 + n / 10);
        // One change, as `vmpls route replace` makes it.
        let (a, len) = prefixes[prefixes.len() / 2];
        let spec = RouteSpec::Inet(IpRoute {
            dst: format!("{a}/{len}"),
            vrf: "default".into(),
            kind: RouteType::Unicast,
            nexthops: vec![Nexthop {
                gateway: Some(IpAddr::V4(Ipv4Addr::new(198, 18, 10, 2))),
                dev: Some("core".into()),
                labels: vec![7777],
                weight: 1,
            }],
            ttl_propagate: true,
            protocol: Protocol::Boot,
            prefsrc: None,
        });
        let t = Instant::now();
        let changed = tables.change(Change::Replace, &spec)?;
        let one = t.elapsed();
        drop(changed);
        let addrs: Vec<Ipv4Addr> = (0..4096)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                prefixes[(rng % u64::from(n)) as usize].0
            })
            .collect();
        let rate = lookup_rate(&fib, &addrs);
        eprintln!("fib {n}: the kernel's ip -batch");
        let (kernel, kernel_mem) = kernel_batch(&prefixes, &dir)?;
        drop(fib);
        drop(tables);
        rows.push(json!({
            "ipv4": n, "ipv6": n / 10, "labels": n / 10,
            "parse_s": parsed.as_secs_f64(), "load_s": loaded.as_secs_f64(),
            "bytes_per_entry": grown / entries.max(1),
            "one_change_ms": one.as_secs_f64() * 1e3,
            "lookups_per_s": rate, "lookup_ns": 1e9 / rate,
            "kernel_ipv4_batch_s": kernel.as_secs_f64(),
            "kernel_bytes_per_route": kernel_mem / u64::from(n),
        }));
    }
    let _ = std::fs::remove_dir_all(&dir);
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!(
        "| IPv4 + IPv6 + labels | load (parse + build) | bytes/entry | one change | IPv4 LPM lookup (random hits) | kernel `ip -batch` of the IPv4 part | kernel bytes/route |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} + {} + {} | {:.2} s ({:.2} + {:.2}) | {} | {:.1} ms | {:.0} ns ({:.1} M/s) | {:.2} s | {} |",
            r["ipv4"],
            r["ipv6"],
            r["labels"],
            r["load_s"].as_f64().unwrap_or(0.0),
            r["parse_s"].as_f64().unwrap_or(0.0),
            r["load_s"].as_f64().unwrap_or(0.0) - r["parse_s"].as_f64().unwrap_or(0.0),
            r["bytes_per_entry"],
            r["one_change_ms"].as_f64().unwrap_or(0.0),
            r["lookup_ns"].as_f64().unwrap_or(0.0),
            r["lookups_per_s"].as_f64().unwrap_or(0.0) / 1e6,
            r["kernel_ipv4_batch_s"].as_f64().unwrap_or(0.0),
            r["kernel_bytes_per_route"],
        );
    }
    Ok(())
}
