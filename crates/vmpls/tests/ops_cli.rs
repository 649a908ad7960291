//! Operating running routers: the control socket and the iproute2-style CLI against real
//! `vmpls run` processes in the seed lab (ce1 -- pe1 -- p -- pe2 -- ce2, network
//! namespaces), checked against forwarding: route changes, a live change under a
//! content-checked TCP flow, a capture read back by tshark, a metrics scrape against
//! `vmpls stats`, reloads, and who may use the socket.
//!
//! Needs root (namespaces, AF_PACKET) and tshark.

use std::io::{Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use serde_json::Value;
use vmpls_lab::IpPrefix;
use vmpls_lab::ping::{PingOptions, ping};
use vmpls_lab::seed::{CE2_V4, SeedLab, SeedParams, router_configs};
use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};

const BIN: &str = env!("CARGO_BIN_EXE_vmpls");

fn ce2() -> IpAddr {
    CE2_V4.parse::<IpPrefix>().expect("built-in prefix").addr()
}

/// A work directory that others may traverse (0755): the permission test must be
/// stopped by the socket's own mode, not by its directory.
fn work_dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vmpls-ops-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("work dir");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    d
}

/// The seed lab with routers we start ourselves (own configs and sockets); stops them
/// before the namespaces go, also on panic.
struct Lab {
    routers: Vec<(String, Child)>,
    lab: SeedLab,
    dir: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for (_, c) in &mut self.routers {
            let _ = vmpls_sys::process::kill(c.id(), libc::SIGTERM);
        }
        for (_, c) in &mut self.routers {
            let deadline = Instant::now() + Duration::from_secs(3);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = self.lab.cleanup();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Lab {
    fn new(test: &str) -> anyhow::Result<Lab> {
        vmpls_lab::require_root()?;
        let lab = SeedLab::build(&SeedParams::default())?;
        Ok(Lab { routers: Vec::new(), lab, dir: work_dir(test) })
    }

    /// The seed config of `router`, edited by `edit`.
    fn config(&self, router: &str, edit: impl Fn(String) -> String) -> String {
        let cfg = router_configs(&SeedParams::default())
            .into_iter()
            .find(|c| c.router == router)
            .expect("seed router");
        edit(cfg.toml)
    }

    fn socket(&self, router: &str) -> PathBuf {
        self.dir.join(format!("{router}.sock"))
    }

    fn config_path(&self, router: &str) -> PathBuf {
        self.dir.join(format!("{router}.toml"))
    }

    /// Writes `toml` as the router's config, with `control-socket` in our directory
    /// unless `default_socket`.
    fn write_config(&self, router: &str, toml: &str, default_socket: bool) -> PathBuf {
        let text = if default_socket {
            toml.to_string()
        } else {
            toml.replacen(
                "[router]\n",
                &format!("[router]\ncontrol-socket = \"{}\"\n", self.socket(router).display()),
                1,
            )
        };
        let path = self.config_path(router);
        std::fs::write(&path, text).expect("write config");
        path
    }

    /// Starts `vmpls run` in the router's namespace and waits until its control socket
    /// answers.
    fn start(&mut self, router: &str, toml: &str, extra: &[&str]) -> anyhow::Result<()> {
        let config = self.write_config(router, toml, false);
        let child = self.spawn(router, &config, extra)?;
        self.routers.push((router.to_string(), child));
        self.wait_socket(router)
    }

    fn spawn(&self, router: &str, config: &Path, extra: &[&str]) -> anyhow::Result<Child> {
        self.spawn_as(router, router, config, extra)
    }

    /// `vmpls run` in `host`'s namespace, logging to `log.log`.
    fn spawn_as(&self, host: &str, log: &str, config: &Path, extra: &[&str]) -> anyhow::Result<Child> {
        let router = host;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{log}.log")))?;
        let mut cmd = Command::new(BIN);
        cmd.arg("run")
            .arg("--config")
            .arg(config)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        vmpls_lab::netns::command_in_netns(self.lab.topology().ns(router)?, &mut cmd)?;
        cmd.spawn().context("starting vmpls run")
    }

    fn log(&self, router: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{router}.log"))).unwrap_or_default()
    }

    fn wait_socket(&mut self, router: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self.cli(router, &["link", "show"])?;
            if out.status.success() {
                return Ok(());
            }
            if let Some((_, c)) = self.routers.iter_mut().find(|(n, _)| n == router)
                && let Some(status) = c.try_wait()?
            {
                bail!("router {router} exited ({status}):\n{}", self.log(router));
            }
            if Instant::now() > deadline {
                bail!("router {router} did not answer on its socket:\n{}", self.log(router));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn pid(&self, router: &str) -> i32 {
        self.routers.iter().find(|(n, _)| n == router).map(|(_, c)| c.id() as i32).expect("router started")
    }

    /// `vmpls --socket SOCKET ARGS...` (the socket is a file: reachable from any
    /// network namespace).
    fn cli(&self, router: &str, args: &[&str]) -> anyhow::Result<Output> {
        Command::new(BIN)
            .arg("--socket")
            .arg(self.socket(router))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("running the vmpls CLI")
    }

    /// Like [`Lab::cli`], and the command must succeed; returns its standard output.
    fn ok(&self, router: &str, args: &[&str]) -> anyhow::Result<String> {
        let out = self.cli(router, args)?;
        ensure!(
            out.status.success() && out.stderr.is_empty(),
            "vmpls {args:?} on {router}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    }

    fn json(&self, router: &str, args: &[&str]) -> anyhow::Result<Value> {
        let mut a = vec!["-j"];
        a.extend_from_slice(args);
        Ok(serde_json::from_str(&self.ok(router, &a)?)?)
    }

    /// The command must fail with `Error: ...` containing `want` and exit code `code`.
    fn fails(&self, router: &str, args: &[&str], code: i32, want: &str) -> anyhow::Result<String> {
        let out = self.cli(router, args)?;
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        ensure!(out.status.code() == Some(code), "vmpls {args:?}: exit {} (want {code}): {err}", out.status);
        ensure!(err.starts_with("Error: ") && err.contains(want), "vmpls {args:?}: {err:?} lacks {want:?}");
        Ok(err)
    }

    fn replies(&self, n: u32) -> anyhow::Result<u32> {
        let opts = PingOptions {
            count: n,
            interval: Duration::from_millis(50),
            timeout: Duration::from_millis(500),
            ..PingOptions::default()
        };
        Ok(ping(self.lab.topology().ns("ce1")?, ce2(), &opts)?.received)
    }

    /// Waits until ce1 reaches (or, with `reach = false`, no longer reaches) ce2.
    fn wait_ping(&self, reach: bool) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while (self.replies(1)? > 0) != reach {
            ensure!(Instant::now() < deadline, "ce1 -> ce2 reachable is not {reach} after 10 s");
        }
        Ok(())
    }

    fn stats(&self, router: &str) -> anyhow::Result<Value> {
        self.json(router, &["stats"])
    }
}

fn counter(stats: &Value, table: &str, name: &str) -> u64 {
    stats[table]
        .as_array()
        .and_then(|l| l.iter().find(|c| c["name"] == name))
        .and_then(|c| c["value"].as_u64())
        .unwrap_or_else(|| panic!("no {table} counter {name} in {stats}"))
}

/// Drop reasons that a route change must never cause.
const ROUTE_DROPS: [&str; 4] = ["unknown_label", "no_route", "no_such_port", "neighbor_unresolved"];

/// Fetches `/metrics` from inside `router`'s namespace.
fn scrape(lab: &Lab, router: &str, port: u16) -> anyhow::Result<String> {
    lab.lab.topology().in_host(router, || -> anyhow::Result<String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        ensure!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
        Ok(text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
    })?
}

/// The value of the sample `name{labels}` in a metrics text.
fn sample(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {series} in\n{text}"))
}

#[test]
fn cli_routes_live_change_capture_and_metrics_on_the_seed_lab() -> anyhow::Result<()> {
    let mut lab = Lab::new("routes")?;
    // pe1 starts without its IPv4 route toward ce2: the CLI adds it.
    let pe1 = lab.config("pe1", |t| {
        t.replacen(
            "[[route]]\nprefix = \"198.18.2.0/24\"\npush = [1002]\nvia = \"198.18.10.2\"\nport = \"core\"\n",
            "",
            1,
        )
    });
    assert!(!pe1.contains("198.18.2.0/24"));
    let metrics_port = 9108u16;
    lab.start("pe1", &pe1, &["--metrics", &metrics_port.to_string()])?;
    for r in ["p", "pe2"] {
        let cfg = lab.config(r, |t| t);
        lab.start(r, &cfg, &[])?;
    }

    // Without the route, ping fails; pe1 counts no_route.
    assert_eq!(lab.replies(2)?, 0);
    assert!(counter(&lab.stats("pe1")?, "drops", "no_route") >= 1);

    // Add it: ping works.
    lab.ok(
        "pe1",
        &["route", "add", "198.18.2.0/24", "encap", "mpls", "1002", "via", "198.18.10.2", "dev", "core"],
    )?;
    lab.wait_ping(true)?;

    // Shown in text, as iproute2 would, and in JSON.
    let text = lab.ok("pe1", &["route", "show"])?;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "198.18.1.0/24 dev ce1 proto kernel scope link src 198.18.1.1",
            "198.18.2.0/24 encap mpls 1002 via 198.18.10.2 dev core",
            "198.18.10.0/24 dev core proto kernel scope link src 198.18.10.1",
        ],
        "{text}"
    );
    let json = lab.json("pe1", &["route", "show"])?;
    let r =
        json.as_array().and_then(|l| l.iter().find(|r| r["dst"] == "198.18.2.0/24")).expect("route in JSON");
    assert_eq!(r["protocol"], "boot");
    assert_eq!(r["nexthops"][0]["labels"], serde_json::json!([1002]));
    assert_eq!(r["nexthops"][0]["gateway"], "198.18.10.2");
    let pretty = lab.ok("pe1", &["-j", "-p", "route", "show"])?;
    assert!(pretty.contains("\n  {\n"), "{pretty}");
    let v6 = lab.ok("pe1", &["-6", "route", "show"])?;
    assert!(v6.contains("2001:db8:2::/64 encap mpls 1002 via 2001:db8:10::2 dev core proto static"), "{v6}");
    let labels = lab.ok("p", &["-f", "mpls", "route", "show"])?;
    assert!(labels.contains("1002 as to 2002 via inet 198.18.20.2 dev east proto static"), "{labels}");

    // Mistakes: Error: ..., non-zero exit, nothing changed.
    lab.fails("pe1", &["route", "add", "198.18.2.0/24", "via", "198.18.10.2"], 2, "exists")?;
    lab.fails(
        "pe1",
        &["route", "add", "198.18.3.0/24", "via", "198.18.99.9"],
        2,
        "not on any port's subnet",
    )?;
    lab.fails("pe1", &["route", "add", "198.18.3.0/24", "bogus"], 1, "\"bogus\" is duplicate")?;
    lab.fails("pe1", &["-f", "mpls", "route", "del", "4242"], 2, "no route for label 4242")?;

    // Delete: ping fails again; the JSON no longer has it.
    lab.ok("pe1", &["route", "del", "198.18.2.0/24"])?;
    lab.wait_ping(false)?;
    assert!(!lab.ok("pe1", &["route", "show"])?.contains("198.18.2.0/24"));
    lab.ok(
        "pe1",
        &["route", "add", "198.18.2.0/24", "encap", "mpls", "1002", "via", "198.18.10.2", "dev", "core"],
    )?;
    lab.wait_ping(true)?;

    // A live change under a content-checked TCP flow: p learns label 1003 (same path),
    // then pe1 moves the LSP between 1002 and 1003 while the flow runs. No packet may be
    // lost to the change.
    lab.ok(
        "p",
        &["-f", "mpls", "route", "add", "1003", "as", "2002", "via", "inet", "198.18.20.2", "dev", "east"],
    )?;
    let before: Vec<Value> = ["pe1", "p", "pe2"].iter().map(|r| lab.stats(r)).collect::<Result<_, _>>()?;
    let (ce1_ns, ce2_ns) =
        (lab.lab.topology().ns("ce1")?.to_string(), lab.lab.topology().ns("ce2")?.to_string());
    let flow = std::thread::spawn(move || {
        let opts = FlowOptions { limit: Limit::Duration(Duration::from_secs(4)), ..FlowOptions::default() };
        run_flow(&ce1_ns, &ce2_ns, ce2(), &opts, &mut |_| {})
    });
    let mut changes = 0;
    while !flow.is_finished() {
        let label = if changes % 2 == 0 { "1003" } else { "1002" };
        lab.ok(
            "pe1",
            &[
                "route",
                "replace",
                "198.18.2.0/24",
                "encap",
                "mpls",
                label,
                "via",
                "198.18.10.2",
                "dev",
                "core",
            ],
        )?;
        changes += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let result = flow.join().expect("flow thread")?;
    assert!(changes >= 10, "only {changes} route changes during the flow");
    assert!(result.content_ok && result.bytes_received > 0, "{result:?}");
    for (r, b) in ["pe1", "p", "pe2"].iter().zip(&before) {
        let after = lab.stats(r)?;
        for reason in ROUTE_DROPS {
            assert_eq!(
                counter(&after, "drops", reason),
                counter(b, "drops", reason),
                "{r}: {reason} during the live change"
            );
        }
    }
    assert!(counter(&lab.stats("p")?, "events", "label_swap") > counter(&before[1], "events", "label_swap"));
    lab.ok(
        "pe1",
        &["route", "replace", "198.18.2.0/24", "encap", "mpls", "1002", "via", "198.18.10.2", "dev", "core"],
    )?;

    // A capture on pe1's core port, read back by tshark: the echo requests toward ce2
    // carry label 1002; the filter keeps the replies (label 2001) out.
    let pcap = lab.dir.join("core.pcap");
    let mut cap = Command::new(BIN)
        .arg("--socket")
        .arg(lab.socket("pe1"))
        .args(["capture", "core", "-c", "5", "--filter", "label=1002", "-w"])
        .arg(&pcap)
        .stderr(Stdio::piped())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(15);
    while cap.try_wait()?.is_none() {
        ensure!(Instant::now() < deadline, "capture did not end");
        lab.replies(1)?;
    }
    let mut err = String::new();
    cap.stderr.take().expect("piped").read_to_string(&mut err)?;
    assert!(cap.wait()?.success(), "{err}");
    assert!(err.contains("5 frames captured"), "{err}");
    let tshark = Command::new("tshark")
        .args(["-r"])
        .arg(&pcap)
        .args(["-T", "fields", "-e", "mpls.label", "-e", "ip.dst", "-e", "icmp.type"])
        .output()
        .context("running tshark")?;
    assert!(tshark.status.success(), "{}", String::from_utf8_lossy(&tshark.stderr));
    let fields = String::from_utf8(tshark.stdout)?;
    let rows: Vec<&str> = fields.lines().collect();
    assert_eq!(rows.len(), 5, "{fields}");
    for row in rows {
        assert_eq!(row, "1002\t198.18.2.2\t8", "{fields}");
    }
    // Without -w: one summary line per frame.
    let mut cap = Command::new(BIN)
        .arg("--socket")
        .arg(lab.socket("pe1"))
        .args(["capture", "core", "-c", "2", "--filter", "label=1002"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(15);
    while cap.try_wait()?.is_none() {
        ensure!(Instant::now() < deadline, "capture did not end");
        lab.replies(1)?;
    }
    let mut lines = String::new();
    cap.stdout.take().expect("piped").read_to_string(&mut lines)?;
    assert_eq!(lines.lines().count(), 2, "{lines}");
    assert!(
        lines.lines().all(|l| l.contains(" tx ")
            && l.contains("MPLS (label 1002")
            && l.contains("IP 198.18.1.2 > 198.18.2.2: ICMP")),
        "{lines}"
    );
    lab.fails("pe1", &["capture", "nope"], 2, "no port named \"nope\" (ports are: ce1, core)")?;

    // Metrics agree with `vmpls stats` (counters only grow: stats taken between two
    // scrapes lies between them).
    let m1 = scrape(&lab, "pe1", metrics_port)?;
    let st = lab.stats("pe1")?;
    let m2 = scrape(&lab, "pe1", metrics_port)?;
    for p in st["ports"].as_array().expect("ports") {
        let name = p["name"].as_str().expect("name");
        for (key, metric) in [
            ("rx_packets", "vmpls_port_rx_packets_total"),
            ("rx_bytes", "vmpls_port_rx_bytes_total"),
            ("tx_packets", "vmpls_port_tx_packets_total"),
            ("tx_bytes", "vmpls_port_tx_bytes_total"),
        ] {
            let series = format!("{metric}{{port=\"{name}\"}}");
            let v = p[key].as_u64().expect("counter");
            assert!(v > 0, "{name} {key} is 0");
            assert!(
                sample(&m1, &series) <= v && v <= sample(&m2, &series),
                "{series}: {v} not within the scrapes"
            );
        }
    }
    for reason in ["no_route", "unknown_label"] {
        let series = format!("vmpls_drops_total{{reason=\"{reason}\"}}");
        assert_eq!(sample(&m2, &series), counter(&st, "drops", reason), "{series}");
    }
    let series = "vmpls_events_total{event=\"label_push\"}";
    let v = counter(&st, "events", "label_push");
    assert!(v > 0 && sample(&m1, series) <= v && v <= sample(&m2, series));
    assert_eq!(sample(&m2, "vmpls_label_routes"), st["label_routes"].as_u64().expect("n"));
    assert!(sample(&m2, "vmpls_neighbors{state=\"reachable\"}") >= 2, "{m2}");
    assert!(m2.contains("vmpls_events_total{event=\"gso_superframes_segmented\"}"));
    // Per-label counters: pe1 pops the return LSP's label 2001; stats and metrics agree.
    let labels = st["labels"].as_array().expect("labels");
    let l2001 =
        labels.iter().find(|l| l["label"] == 2001).unwrap_or_else(|| panic!("no label 2001 in {labels:?}"));
    let v = l2001["packets"].as_u64().expect("packets");
    let series = "vmpls_label_packets_total{label=\"2001\"}";
    assert!(v > 0 && sample(&m1, series) <= v && v <= sample(&m2, series), "{series}: {v}\n{m2}");

    // link and neigh show what the router has.
    let links = lab.ok("pe1", &["-s", "link", "show"])?;
    assert!(links.contains("1: core: <UP> mtu 65535 interface pe1-p vrf default"), "{links}");
    assert!(links.contains("RX:") && links.contains("    inet 198.18.10.1/24"), "{links}");
    let neigh = lab.json("pe1", &["neigh", "show", "dev", "core"])?;
    assert!(
        neigh
            .as_array()
            .expect("list")
            .iter()
            .any(|n| n["dst"] == "198.18.10.2" && n["state"] == "REACHABLE"),
        "{neigh}"
    );
    let text = lab.ok("pe1", &["neigh", "show"])?;
    assert!(
        text.lines().any(|l| l.starts_with("198.18.1.2 dev ce1 lladdr ") && l.ends_with(" REACHABLE")),
        "{text}"
    );
    Ok(())
}

#[test]
fn reload_sighup_and_who_may_use_the_socket() -> anyhow::Result<()> {
    let mut lab = Lab::new("reload")?;
    let pe1 = lab.config("pe1", |t| t);
    lab.start("pe1", &pe1, &[])?;
    let p = lab.config("p", |t| t);
    lab.start("p", &p, &[])?;
    // pe2 on its default socket, found with -r from inside its namespace.
    let pe2_cfg = lab.write_config("pe2", &lab.config("pe2", |t| t), true);
    let pe2 = lab.spawn("pe2", &pe2_cfg, &[])?;
    lab.routers.push(("pe2".into(), pe2));
    let pe2_ns = lab.lab.topology().ns("pe2")?.to_string();
    let default_socket = Path::new("/run/vmpls/netns").join(&pe2_ns).join("pe2.sock");
    let in_pe2 = |args: &[&str]| -> anyhow::Result<Output> {
        let mut cmd = Command::new(BIN);
        cmd.args(["-r", "pe2"]).args(args);
        vmpls_lab::netns::command_in_netns(&pe2_ns, &mut cmd)?;
        Ok(cmd.output()?)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !in_pe2(&["link", "show"])?.status.success() {
        ensure!(Instant::now() < deadline, "pe2 not up:\n{}", lab.log("pe2"));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(default_socket.exists());
    lab.wait_ping(true)?;

    // The socket is 0600; another user cannot use it, even though the directory lets
    // them through.
    let mode = std::fs::metadata(lab.socket("pe1"))?.permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(std::fs::metadata(default_socket.parent().expect("dir"))?.permissions().mode() & 0o777, 0o755);
    let as_nobody = |args: &[&str]| -> std::io::Result<Output> {
        Command::new(BIN).args(args).uid(65534).gid(65534).stdin(Stdio::null()).output()
    };
    assert!(as_nobody(&["--version"])?.status.success(), "nobody cannot run {BIN}");
    for socket in [lab.socket("pe1"), default_socket.clone()] {
        let out = as_nobody(&["--socket", socket.to_str().expect("utf-8"), "route", "show"])?;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.starts_with("Error: permission denied on "), "{err}");
    }

    // A second router on the same socket fails clearly; the first one keeps running.
    let cfg = lab.config_path("pe1");
    let mut second = lab.spawn("pe1", &cfg, &[])?;
    let status = second.wait()?;
    assert!(!status.success());
    assert!(
        lab.log("pe1").contains(&format!("another router is using {}", lab.socket("pe1").display())),
        "{}",
        lab.log("pe1")
    );
    lab.ok("pe1", &["route", "show"])?;

    // A bad config is rejected with the same error as at start; the running one stays.
    let bad = pe1.replace("via = \"198.18.10.2\"", "via = \"198.18.99.2\"");
    lab.write_config("pe1", &bad, false);
    let check = Command::new(BIN).args(["check", "--config"]).arg(&cfg).output()?;
    assert_eq!(check.status.code(), Some(78), "invalid config exits with EX_CONFIG");
    let check_err = String::from_utf8(check.stderr)?;
    let start_error = check_err.trim().strip_prefix("vmpls: ").expect("vmpls: prefix");
    assert!(start_error.contains("is not on any subnet of port \"core\""), "{start_error}");
    let err = lab.fails("pe1", &["reload"], 2, start_error)?;
    assert_eq!(err.trim(), format!("Error: {start_error}"));
    assert_eq!(lab.replies(3)?, 3, "the running config stays");

    // A port change needs a restart.
    let mtu = pe1.replace("interface = \"pe1-p\"\n", "interface = \"pe1-p\"\nmtu = 9000\n");
    assert_ne!(mtu, pe1);
    lab.write_config("pe1", &mtu, false);
    lab.fails("pe1", &["reload"], 2, "the MTU of port \"core\" changed: restart the router")?;

    // A good config without the IPv4 route toward ce2, by SIGHUP: ping stops.
    let without = pe1.replacen(
        "[[route]]\nprefix = \"198.18.2.0/24\"\npush = [1002]\nvia = \"198.18.10.2\"\nport = \"core\"\n",
        "",
        1,
    );
    assert_ne!(without, pe1);
    lab.write_config("pe1", &without, false);
    vmpls_sys::process::kill(lab.pid("pe1") as u32, libc::SIGHUP).unwrap();
    lab.wait_ping(false)?;
    assert!(!lab.ok("pe1", &["route", "show"])?.contains("198.18.2.0/24"));
    assert!(lab.log("pe1").contains("reloaded"), "{}", lab.log("pe1"));
    // And back, by `vmpls reload`, which says what changed.
    lab.write_config("pe1", &pe1, false);
    let sum = lab.json("pe1", &["reload"])?;
    assert_eq!((sum["routes_added"].as_u64(), sum["routes_removed"].as_u64()), (Some(1), Some(0)), "{sum}");
    lab.wait_ping(true)?;
    let text = lab.ok("pe1", &["reload"])?;
    assert!(text.contains("no change"), "{text}");

    // A router that died leaves its socket behind; the next one replaces it.
    let (_, mut pe2) = lab.routers.pop().expect("pe2");
    pe2.kill()?;
    pe2.wait()?;
    assert!(default_socket.exists(), "SIGKILL leaves the socket file");
    let out = in_pe2(&["route", "show"])?;
    assert!(String::from_utf8_lossy(&out.stderr).contains("no router is listening"), "{out:?}");
    let pe2 = lab.spawn("pe2", &pe2_cfg, &[])?;
    lab.routers.push(("pe2".into(), pe2));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !in_pe2(&["link", "show"])?.status.success() {
        ensure!(Instant::now() < deadline, "pe2 did not replace its stale socket:\n{}", lab.log("pe2"));
        std::thread::sleep(Duration::from_millis(50));
    }
    lab.wait_ping(true)?;
    let out = in_pe2(&["-f", "mpls", "route", "show"])?;
    assert!(String::from_utf8_lossy(&out.stdout).contains("2002 vrf default proto static"), "{out:?}");
    // Stopped cleanly, the router removes its socket.
    let (_, pe2) = lab.routers.pop().expect("pe2");
    let _ = vmpls_sys::process::kill(pe2.id(), libc::SIGTERM);
    let mut pe2 = pe2;
    assert!(pe2.wait()?.success());
    assert!(!default_socket.exists());
    assert!(!default_socket.parent().expect("dir").exists(), "the namespace's directory goes too");
    Ok(())
}

/// Issue 13, item 2: a second `vmpls run` on interfaces another router serves in the
/// same namespace is refused and told which router holds them; once that router is
/// gone (even killed), the interfaces are free.
#[test]
fn a_second_router_on_the_same_interfaces_is_refused() -> anyhow::Result<()> {
    let mut lab = Lab::new("claim")?;
    let pe1 = lab.config("pe1", |t| t);
    lab.start("pe1", &pe1, &[])?;
    lab.start("p", &lab.config("p", |t| t), &[])?;
    lab.start("pe2", &lab.config("pe2", |t| t), &[])?;
    lab.wait_ping(true)?;

    // Another router (own name, own socket) on pe1's interfaces.
    let other_socket = lab.dir.join("other.sock");
    let other = pe1.replacen("name = \"pe1\"", "name = \"other\"", 1).replacen(
        "[router]\n",
        &format!("[router]\ncontrol-socket = \"{}\"\n", other_socket.display()),
        1,
    );
    let other_cfg = lab.dir.join("other.toml");
    std::fs::write(&other_cfg, &other)?;
    let mut second = lab.spawn_as("pe1", "other", &other_cfg, &[])?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = second.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            second.kill()?;
            second.wait()?;
            panic!("a second router on pe1's interfaces started:\n{}", lab.log("other"));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = lab.log("other");
    assert!(!status.success(), "{err}");
    let want = format!(
        "interface pe1-ce1 is already served by router \"pe1\" (pid {}, control socket {})",
        lab.pid("pe1"),
        lab.socket("pe1").display()
    );
    assert!(err.contains(&want), "{err:?} lacks {want:?}");
    assert!(!other_socket.exists(), "the refused router leaves no socket");
    // pe1 still forwards, once: no duplicate replies.
    assert_eq!(lab.replies(3)?, 3);

    // pe1 killed: its claims die with it, and the other router starts.
    let (_, mut pe1_child) = lab.routers.remove(0);
    pe1_child.kill()?;
    pe1_child.wait()?;
    let child = lab.spawn_as("pe1", "other2", &other_cfg, &[])?;
    lab.routers.push(("other".into(), child));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !Command::new(BIN)
        .arg("--socket")
        .arg(&other_socket)
        .args(["link", "show"])
        .output()?
        .status
        .success()
    {
        ensure!(Instant::now() < deadline, "the other router did not start:\n{}", lab.log("other2"));
        std::thread::sleep(Duration::from_millis(50));
    }
    lab.wait_ping(true)?;
    Ok(())
}

/// Issue 13, item 8: `vmpls check` finds what `vmpls run` refuses about the interfaces
/// (down; a configured MTU above the interface's), and both say it with file and line.
#[test]
fn check_finds_what_run_refuses_with_file_and_line() -> anyhow::Result<()> {
    let lab = Lab::new("check")?;
    let ns = lab.lab.topology().ns("pe1")?.to_string();
    let ip = |args: &[&str]| -> anyhow::Result<()> {
        let st = Command::new("ip").arg("-n").arg(&ns).args(args).status()?;
        ensure!(st.success(), "ip {args:?}");
        Ok(())
    };
    let vmpls = |cmd: &str, config: &Path| -> anyhow::Result<Output> {
        let mut c = Command::new(BIN);
        c.arg(cmd).arg("--config").arg(config).stdin(Stdio::null());
        vmpls_lab::netns::command_in_netns(&ns, &mut c)?;
        // `run` of a config that passes would not return: both must fail here.
        let mut child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                child.kill()?;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(child.wait_with_output()?)
    };
    let line_of = |text: &str, needle: &str| text.lines().position(|l| l.contains(needle)).expect("line") + 1;

    // A configured MTU above the interface's.
    ip(&["link", "set", "pe1-p", "mtu", "1500"])?;
    let pe1 =
        lab.config("pe1", |t| t.replace("interface = \"pe1-p\"\n", "interface = \"pe1-p\"\nmtu = 9000\n"));
    let path = lab.write_config("pe1", &pe1, false);
    let want = format!(
        "{}:{}: port.mtu: port \"core\": MTU 9000",
        path.display(),
        line_of(&std::fs::read_to_string(&path)?, "mtu = 9000")
    );
    for cmd in ["check", "run"] {
        let out = vmpls(cmd, &path)?;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "vmpls {cmd}: {err}");
        assert!(
            err.contains(&want) && err.contains("exceeds the interface MTU 1500"),
            "vmpls {cmd}: {err:?} lacks {want:?}"
        );
    }

    // An interface that is down.
    ip(&["link", "set", "pe1-ce1", "down"])?;
    let pe1 = lab.config("pe1", |t| t);
    let path = lab.write_config("pe1", &pe1, false);
    let want = format!(
        "{}:{}: port.interface: port \"ce1\": interface \"pe1-ce1\" is down",
        path.display(),
        line_of(&std::fs::read_to_string(&path)?, "interface = \"pe1-ce1\"")
    );
    for cmd in ["check", "run"] {
        let out = vmpls(cmd, &path)?;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "vmpls {cmd}: {err}");
        assert!(err.contains(&want), "vmpls {cmd}: {err:?} lacks {want:?}");
    }
    Ok(())
}

/// Issue 13, item 6: `link show` names each port's kind (it said `af-packet` for all).
#[test]
fn link_show_names_the_port_kind() -> anyhow::Result<()> {
    let mut lab = Lab::new("kind")?;
    let pe1 = lab.config("pe1", |t| {
        t + "\n[[port]]\nname = \"host\"\nkind = \"tap\"\ninterface = \"vmpls-k13\"\naddresses = [\"198.18.77.1/24\"]\n"
    });
    lab.start("pe1", &pe1, &[])?;
    let tap = lab.ok("pe1", &["link", "show", "dev", "host"])?;
    assert!(tap.contains("interface vmpls-k13") && tap.contains(" tap offloads "), "{tap}");
    let veth = lab.ok("pe1", &["link", "show", "dev", "core"])?;
    assert!(veth.contains(" af-packet offloads "), "{veth}");
    let json = lab.json("pe1", &["link", "show"])?;
    let kinds: Vec<&str> = json.as_array().expect("list").iter().filter_map(|l| l["kind"].as_str()).collect();
    assert_eq!(kinds, ["af-packet", "af-packet", "tap"]);
    Ok(())
}

/// Issue 13, item 10: iproute2 habits: `route show PREFIX`, `route get ADDR`,
/// `default` in and out, `route show` lines pasted back into `route replace`,
/// `neigh show dev NOSUCH` an error.
#[test]
fn cli_keeps_iproute2_habits() -> anyhow::Result<()> {
    let mut lab = Lab::new("habits")?;
    for r in ["pe1", "p", "pe2"] {
        let cfg = lab.config(r, |t| t);
        lab.start(r, &cfg, &[])?;
    }
    lab.wait_ping(true)?;
    assert_eq!(
        lab.ok("pe1", &["route", "show", "198.18.2.0/24"])?,
        "198.18.2.0/24 encap mpls 1002 via 198.18.10.2 dev core proto static\n"
    );
    assert_eq!(lab.ok("pe1", &["route", "show", "198.18.3.0/24"])?, "");
    assert!(
        lab.ok("pe1", &["-6", "route", "show", "2001:db8:2::/64"])?
            .starts_with("2001:db8:2::/64 encap mpls 1002")
    );
    assert_eq!(lab.ok("p", &["-f", "mpls", "route", "show", "1002"])?.lines().count(), 1);
    assert_eq!(
        lab.ok("pe1", &["route", "get", "198.18.2.7"])?,
        "198.18.2.7 encap mpls 1002 via 198.18.10.2 dev core proto static\n"
    );
    assert!(lab.ok("pe1", &["route", "get", "198.18.1.9"])?.starts_with("198.18.1.9 dev ce1 proto kernel"));
    lab.fails("pe1", &["route", "get", "203.0.113.1"], 2, "no route to 203.0.113.1")?;

    // default, in and out, both families.
    lab.ok("pe1", &["route", "add", "default", "via", "198.18.10.2"])?;
    lab.ok("pe1", &["route", "add", "default", "via", "2001:db8:10::2"])?;
    assert_eq!(lab.ok("pe1", &["route", "show", "default"])?, "default via 198.18.10.2 dev core\n");
    assert_eq!(lab.ok("pe1", &["-6", "route", "show", "default"])?, "default via 2001:db8:10::2 dev core\n");
    assert!(
        lab.ok("pe1", &["route", "get", "203.0.113.1"])?.starts_with("203.0.113.1 via 198.18.10.2 dev core")
    );
    lab.ok("pe1", &["route", "del", "default"])?;
    lab.ok("pe1", &["-6", "route", "del", "default"])?;

    // Every line `route show` prints pastes back into `route replace`.
    for family in [&[][..], &["-6"][..]] {
        let mut show = family.to_vec();
        show.extend(["route", "show"]);
        let before = lab.ok("pe1", &show)?;
        for line in before.lines() {
            let mut args = family.to_vec();
            args.extend(["route", "replace"]);
            args.extend(line.split_whitespace());
            lab.ok("pe1", &args)?;
        }
        let after = lab.ok("pe1", &show)?;
        assert_eq!(after.lines().count(), before.lines().count(), "{before}\n{after}");
    }
    lab.fails(
        "pe1",
        &["route", "add", "198.18.1.0/24", "dev", "ce1"],
        2,
        "connected subnet of port \"ce1\"",
    )?;
    lab.wait_ping(true)?;

    lab.fails("pe1", &["neigh", "show", "dev", "nosuch"], 2, "no port named \"nosuch\"")?;
    lab.ok("pe1", &["neigh", "show", "dev", "core"])?;
    Ok(())
}

/// `vmpls -batch FILE` with `--socket`, standard input in `input`.
fn batch(lab: &Lab, router: &str, args: &[&str], input: &str) -> anyhow::Result<Output> {
    let mut child = Command::new(BIN)
        .arg("--socket")
        .arg(lab.socket(router))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child.stdin.take().expect("stdin").write_all(input.as_bytes())?;
    Ok(child.wait_with_output()?)
}

/// Issue 14, item 5: `vmpls -batch` loads 10,000 routes as one table change (comments,
/// IPv6 and label routes in the same file), `route show` streams them back in text and
/// JSON, a failing line is reported as `Command failed FILE:LINE` with the lines before
/// it applied and those after it not (with `-force`: all the others), and `route flush`
/// empties the table.
#[test]
fn batch_loads_ten_thousand_routes_show_streams_them_back_and_flush_empties_them() -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let mut lab = Lab::new("batch")?;
    let pe1 = lab.config("pe1", |t| t);
    lab.start("pe1", &pe1, &[])?;
    let before = lab.ok("pe1", &["route", "show"])?.lines().count();

    let mut text = String::from("# 10,000 host routes toward pe2\n\n");
    for i in 0..10_000u32 {
        writeln!(
            text,
            "route add 198.19.{}.{}/32 via 198.18.10.2 dev core encap mpls {}",
            i / 256,
            i % 256,
            16 + i
        )?;
    }
    text.push_str("-6 route add 2001:db8:99::/64 via 2001:db8:10::2 dev core  # IPv6\n");
    text.push_str("-f mpls route add 5000 as 5001 via inet 198.18.10.2 dev core\n");
    let file = lab.dir.join("routes.batch");
    std::fs::write(&file, &text)?;
    let out = lab.cli("pe1", &["-batch", file.to_str().expect("utf-8")])?;
    ensure!(out.status.success() && out.stderr.is_empty(), "{out:?}");

    // Streamed back: every route, in text and as one JSON array.
    let show = lab.ok("pe1", &["route", "show"])?;
    assert_eq!(show.lines().count(), before + 10_000);
    assert!(show.contains("\n198.19.39.15/32 encap mpls 10015 via 198.18.10.2 dev core\n"));
    let json = lab.json("pe1", &["route", "show"])?;
    assert_eq!(json.as_array().map(Vec::len), Some(before + 10_000));
    let pretty: Value = serde_json::from_str(&lab.ok("pe1", &["-j", "-p", "route", "show"])?)?;
    assert_eq!(pretty, json);
    assert_eq!(
        lab.ok("pe1", &["route", "show", "198.19.0.7/32"])?,
        "198.19.0.7/32 encap mpls 23 via 198.18.10.2 dev core\n"
    );
    assert!(
        lab.ok("pe1", &["-6", "route", "show"])?.contains("2001:db8:99::/64 via 2001:db8:10::2 dev core")
    );
    assert!(lab.ok("pe1", &["-f", "mpls", "route", "show", "5000"])?.starts_with("5000 as to 5001"));
    // A refusal prints no JSON, only the error.
    let out = lab.cli("pe1", &["-j", "route", "show", "vrf", "nosuch"])?;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty() && String::from_utf8(out.stderr)?.contains("\"nosuch\" is not defined"));
    // A reader that stops early (`| head`) is no error.
    let head = Command::new("sh")
        .arg("-c")
        .arg(format!("{BIN} --socket {} route show | head -n 2", lab.socket("pe1").display()))
        .output()?;
    assert_eq!(String::from_utf8(head.stdout)?.lines().count(), 2);
    assert!(head.stderr.is_empty(), "{}", String::from_utf8_lossy(&head.stderr));

    // An error on line 3 of standard input: reported with its line; line 2 applied, 4 not.
    let bad = "# comment\nroute add 198.19.200.1/32 via 198.18.10.2\nroute add 198.19.200.2/32 via 198.18.99.2\nroute add 198.19.200.3/32 via 198.18.10.2\n";
    let out = batch(&lab, "pe1", &["-batch", "-"], bad)?;
    let err = String::from_utf8(out.stderr)?;
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("Error: 198.18.99.2 is not on any"), "{err}");
    assert!(err.ends_with("\nCommand failed -:3\n"), "{err}");
    assert_eq!(lab.ok("pe1", &["route", "show", "198.19.200.1/32"])?.lines().count(), 1);
    assert_eq!(lab.ok("pe1", &["route", "show", "198.19.200.3/32"])?, "");
    // With -force every other line applies, each failure is reported; a command that
    // is not a change runs in its place (after the changes before it).
    let mixed = "route add 198.19.200.1/32 via 198.18.10.2\nroute add 198.19.200.3/32 via 198.18.10.2\nroute add 198.19.200.4/32 bogus\nroute show 198.19.200.3/32\nroute add blackhole 198.19.200.5/32\n";
    let bad_file = lab.dir.join("bad.batch");
    std::fs::write(&bad_file, mixed)?;
    let name = bad_file.to_str().expect("utf-8");
    let out = lab.cli("pe1", &["-force", "-batch", name])?;
    let err = String::from_utf8(out.stderr)?;
    assert_eq!(out.status.code(), Some(1), "{err}");
    let failed: Vec<&str> = err.lines().filter(|l| l.starts_with("Command failed ")).collect();
    assert_eq!(failed, [format!("Command failed {name}:1"), format!("Command failed {name}:3")], "{err}");
    assert!(err.contains("exists") && err.contains("\"bogus\""), "{err}");
    assert_eq!(String::from_utf8(out.stdout)?, "198.19.200.3/32 via 198.18.10.2 dev core\n");
    assert_eq!(lab.ok("pe1", &["route", "show", "198.19.200.5/32"])?, "blackhole 198.19.200.5/32\n");
    let out = lab.cli("pe1", &["-batch", "/nonexistent/routes"])?;
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("Error: cannot open"), "{out:?}");
    let out = lab.cli("pe1", &["-batch", name, "route", "show"])?;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("give none after it"), "{out:?}");

    // Flush: a prefix and what is inside it, then everything; the connected subnets stay.
    lab.ok("pe1", &["route", "flush", "root", "198.19.0.0/16"])?;
    assert_eq!(lab.ok("pe1", &["route", "show"])?.lines().count(), before);
    lab.ok("pe1", &["route", "flush", "all"])?;
    let left = lab.ok("pe1", &["route", "show"])?;
    assert!(left.lines().count() == 2 && left.lines().all(|l| l.contains(" proto kernel ")), "{left}");
    Ok(())
}

/// What a local user could plant in a shared directory before the router or `vmpls
/// capture` writes there: a symbolic link at the stats file's old temporary name and at
/// a capture file's name. Neither is followed; the files the router and the CLI make are
/// theirs alone (0600) unless asked.
#[test]
fn stats_and_capture_files_are_private_and_never_written_through_a_planted_link() -> anyhow::Result<()> {
    let mut lab = Lab::new("files")?;
    let precious = lab.dir.join("precious");
    std::fs::write(&precious, b"not yours")?;
    let stats = lab.dir.join("pe1.stats.json");
    std::os::unix::fs::symlink(&precious, lab.dir.join("pe1.stats.tmp"))?;
    let pe1 = lab.config("pe1", |t| t);
    let stats_arg = stats.display().to_string();
    lab.start("pe1", &pe1, &["--stats-file", &stats_arg])?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !stats.exists() {
        ensure!(Instant::now() < deadline, "no stats file after 5 s:\n{}", lab.log("pe1"));
        std::thread::sleep(Duration::from_millis(50));
    }
    let meta = std::fs::symlink_metadata(&stats)?;
    ensure!(meta.file_type().is_file(), "the stats file is not a regular file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "the stats file's mode");
    let counters: Value = serde_json::from_slice(&std::fs::read(&stats)?)?;
    ensure!(counters["ports"].as_array().is_some_and(|p| !p.is_empty()), "{counters}");
    assert_eq!(std::fs::read(&precious)?, b"not yours", "the router wrote through a planted link");
    // A capture into a planted link: refused before any capture starts.
    let planted = lab.dir.join("core.pcap");
    std::os::unix::fs::symlink(&precious, &planted)?;
    lab.fails(
        "pe1",
        &["capture", "core", "-c", "1", "-w", &planted.display().to_string()],
        1,
        "symbolic link",
    )?;
    assert_eq!(std::fs::read(&precious)?, b"not yours", "the capture wrote through a planted link");
    // A capture into a new file: 0600, a valid pcap. ce1's pings reach pe1's port ce1
    // (pe1 alone runs: they go no further, which is all this needs).
    let pcap = lab.dir.join("new.pcap");
    let path = pcap.display().to_string();
    let capture = std::thread::scope(|s| {
        let capture = s.spawn(|| lab.cli("pe1", &["capture", "ce1", "-c", "1", "-w", &path]));
        let deadline = Instant::now() + Duration::from_secs(5);
        while !capture.is_finished() && Instant::now() < deadline {
            let _ = lab.replies(1);
        }
        capture.join().expect("capture thread")
    })?;
    ensure!(capture.status.success(), "{}", String::from_utf8_lossy(&capture.stderr));
    assert_eq!(std::fs::metadata(&pcap)?.permissions().mode() & 0o777, 0o600, "the capture file's mode");
    ensure!(std::fs::read(&pcap)?.len() > 24, "no frame in the capture file");
    Ok(())
}
