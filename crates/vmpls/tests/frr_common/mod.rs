//! What the FRR tests with their own topologies share (`frr_sr.rs`, `frr_failover.rs`,
//! `frr_pw.rs`, `frr_vpls.rs`): a lab of FRR routers with vmpls in FRR mode on any
//! topology, the comparison of vmpls's tables with FRR's, bounded waits, ping, and FRR's
//! view of its pseudowires.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use vmpls_lab::Topology;
use vmpls_lab::frr::{FrrOptions, FrrRouter, IsisInterface, OspfInterface};

pub const BIN: &str = env!("CARGO_BIN_EXE_vmpls");

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub fn is_root() -> bool {
    vmpls_sys::process::is_root()
}

/// A work directory, removed at the end unless the test failed (its path is printed then).
pub struct WorkDir(pub PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("logs kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Prints a step of a test with the seconds since `t0`.
pub fn step(t0: Instant, what: &str) {
    eprintln!("[{:6.2} s] {what}", t0.elapsed().as_secs_f64());
}

/// Our zebra module: `VMPLS_ZEBRA_MODULE`, or what `scripts/build-zebra-module` builds
/// (the last line of its stdout).
pub fn zebra_module() -> PathBuf {
    if let Some(m) = std::env::var_os("VMPLS_ZEBRA_MODULE") {
        return PathBuf::from(m);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/build-zebra-module");
    let out = Command::new(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(out.status.success(), "{} failed ({})", script.display(), out.status);
    let text = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(text.lines().last().expect("build-zebra-module printed nothing").trim())
}

/// Runs `frr/zebra-module/tools/vpn-two-pe.sh` (two PEs with netns VRFs, zebra -n with
/// `module`, FPM captured) with the host's FRR or, with `frr_root`, the FRR of that Debian
/// root (`scripts/make-frr-root`), and asserts that it passed every check.
pub fn run_vpn_two_pe(module: &Path, frr_root: Option<&Path>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../frr/zebra-module/tools/vpn-two-pe.sh");
    let mut cmd = Command::new(&script);
    cmd.env("VMPLS_ZEBRA_MODULE", module);
    match frr_root {
        Some(root) => cmd.env("VMPLS_FRR_ROOT", root),
        None => cmd.env_remove("VMPLS_FRR_ROOT"),
    };
    // Every wait in the script is bounded (about 60 s in all if each one times out).
    let (stdout, passed) = run_check_script(cmd, &script, Duration::from_secs(120));
    // A script that stopped early (e.g. at a `set -e` step) passes fewer checks.
    assert!(passed >= 30, "only {passed} checks passed:\n{stdout}");
}

/// Runs one of the zebra module's check scripts (frr/zebra-module/tools/*.sh: lines
/// `PASS: ...` / `FAIL: ...`) within `limit`, asserts it exited 0 with no failed check,
/// and gives its output and the number of checks passed.
pub fn run_check_script(cmd: Command, script: &Path, limit: Duration) -> (String, usize) {
    let out = vmpls_lab::process::run_here_timeout(cmd, limit).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    let passed = stdout.lines().filter(|l| l.starts_with("PASS: ")).count();
    let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL: ")).collect();
    assert!(
        out.status.success() && failed.is_empty(),
        "{} ({}): {} checks failed:\n{}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        script.display(),
        out.status,
        failed.len(),
        failed.join("\n")
    );
    (stdout, passed)
}

/// One router of the lab: its FRR and its vmpls.
pub struct RouterSpec {
    pub name: &'static str,
    /// Loopback 198.18.255.<id>.
    pub id: u8,
    /// Its interfaces, each a vmpls port of the same name.
    pub ports: Vec<&'static str>,
    pub ospf: Vec<OspfInterface>,
    pub ldp: Vec<&'static str>,
    pub ospfd_extra: String,
    pub isis: Vec<IsisInterface>,
    pub isisd_extra: String,
}

/// Namespaces, FRR and vmpls; stops and removes everything on drop (also on panic).
pub struct Lab {
    pub frr: BTreeMap<String, FrrRouter>,
    pub topo: Topology,
    pub dir: PathBuf,
    pub sockets: BTreeMap<String, PathBuf>,
    /// `fast-path = "tc"` for the vmpls routers started from now on (else `"off"`).
    pub fast_path: bool,
    /// The pid of each router's vmpls.
    pub vmpls_pids: BTreeMap<String, u32>,
    /// Lines added to a router's vmpls config (`[[pseudowire]]`...), by router.
    pub vmpls_extra: BTreeMap<String, String>,
    /// Lines added to a router's ldpd config (`l2vpn`...), by router.
    pub ldpd_extra: BTreeMap<String, String>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for (_, mut r) in std::mem::take(&mut self.frr) {
            let _ = r.stop();
        }
        let _ = self.topo.stop_all(Duration::from_secs(3));
        let _ = self.topo.cleanup();
        if std::thread::panicking() {
            eprintln!("work directory (logs, configs, captures) kept: {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Lab {
    pub fn new(tag: &str, topo: Topology) -> Lab {
        let dir = std::env::temp_dir().join(format!("vmpls-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Lab {
            frr: BTreeMap::new(),
            topo,
            dir,
            sockets: BTreeMap::new(),
            fast_path: false,
            vmpls_pids: BTreeMap::new(),
            vmpls_extra: BTreeMap::new(),
            ldpd_extra: BTreeMap::new(),
        }
    }

    pub fn ns(&self, host: &str) -> String {
        self.topo.ns(host).unwrap().to_string()
    }

    /// Starts `vmpls run` in FRR mode on `r`'s namespace (kernel forwarding off first),
    /// with the fast path if [`Lab::fast_path`].
    pub fn start_vmpls(&mut self, r: &RouterSpec) {
        self.topo.set_forwarding(r.name, false).unwrap();
        let socket = self.dir.join(format!("{}.sock", r.name));
        let _ = std::fs::remove_file(&socket);
        let mut cfg = format!(
            "[router]\nname = \"{}\"\nfast-path = \"{}\"\ncontrol-socket = \"{}\"\n\n[frr]\nfpm = \"127.0.0.1:2620\"\n",
            r.name,
            if self.fast_path { "tc" } else { "off" },
            socket.display()
        );
        for p in &r.ports {
            cfg.push_str(&format!("\n[[port]]\nname = \"{p}\"\ninterface = \"{p}\"\n"));
        }
        if let Some(extra) = self.vmpls_extra.get(r.name) {
            cfg.push_str(extra);
        }
        let path = self.dir.join(format!("{}.toml", r.name));
        std::fs::write(&path, cfg).unwrap();
        let log = self.dir.join(format!("{}.vmpls.log", r.name));
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--config"]).arg(&path);
        cmd.stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap());
        let pid = self.topo.spawn(r.name, "vmpls", cmd, Some(log.clone())).unwrap();
        self.vmpls_pids.insert(r.name.to_string(), pid);
        let deadline = Instant::now() + Duration::from_secs(15);
        while !socket.exists() {
            if let Some(c) = self.topo.exited_child() {
                panic!("vmpls on {} exited ({}): {}", c.host, c.status, Topology::log_tail(&log, 20));
            }
            assert!(
                Instant::now() < deadline,
                "vmpls on {} did not start: {}",
                r.name,
                Topology::log_tail(&log, 20)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.sockets.insert(r.name.to_string(), socket);
    }

    /// Stops `r`'s vmpls (zebra loses its FPM connection) and starts it again with
    /// `fast_path`; zebra connects again and sends its tables anew.
    pub fn restart_vmpls(&mut self, r: &RouterSpec, fast_path: bool) {
        if let Some(pid) = self.vmpls_pids.remove(r.name) {
            self.topo.stop(pid, Duration::from_secs(3)).unwrap();
        }
        self.fast_path = fast_path;
        self.start_vmpls(r);
    }

    pub fn start_frr(&mut self, r: &RouterSpec, module: &Path) {
        let mut o = FrrOptions::new(r.name, Ipv4Addr::new(198, 18, 255, r.id));
        o.zebra_module = Some(module.to_path_buf());
        o.ospf = r.ospf.clone();
        o.ldp = r.ldp.iter().map(|s| s.to_string()).collect();
        o.ospfd_extra = r.ospfd_extra.clone();
        o.isis = r.isis.clone();
        o.isisd_extra = r.isisd_extra.clone();
        o.ldpd_extra = self.ldpd_extra.get(r.name).cloned().unwrap_or_default();
        let router = FrrRouter::start(&self.topo, r.name, &self.dir.join("frr"), o).unwrap();
        self.frr.insert(r.name.to_string(), router);
    }

    pub fn frr(&self, name: &str) -> &FrrRouter {
        &self.frr[name]
    }

    pub fn cli(&self, router: &str, args: &[&str]) -> Value {
        let out = Command::new(BIN)
            .arg("--socket")
            .arg(&self.sockets[router])
            .arg("-j")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "vmpls {args:?} on {router}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Fails if a vmpls or an FRR daemon has exited.
    pub fn check_running(&mut self) {
        if let Some(c) = self.topo.exited_child() {
            panic!(
                "{} on {} exited ({}): {}",
                c.label,
                c.host,
                c.status,
                c.log.map(|l| Topology::log_tail(&l, 20)).unwrap_or_default()
            );
        }
        for r in self.frr.values() {
            r.check_running().unwrap();
        }
    }

    /// The kernel's `Ip: ForwDatagrams` in `host`'s namespace.
    pub fn kernel_forwarded(&self, host: &str) -> u64 {
        let out =
            self.topo.run_timeout(host, cmd(&["cat", "/proc/net/snmp"]), Duration::from_secs(5)).unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let mut ip = text.lines().filter(|l| l.starts_with("Ip:"));
        let (names, values) = (ip.next().unwrap(), ip.next().unwrap());
        let i = names.split_whitespace().position(|n| n == "ForwDatagrams").unwrap();
        values.split_whitespace().nth(i).unwrap().parse().unwrap()
    }
}

pub fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(args[0]);
    c.args(&args[1..]);
    c
}

/// A next hop as both sides can say it: gateway, interface (FRR 8.4 gives none for
/// some next hops), labels pushed or swapped in (implicit null left out: nothing is
/// pushed).
pub type Hop = (Option<IpAddr>, Option<String>, Vec<u32>);

pub fn without_implicit_null(labels: &[u32]) -> Vec<u32> {
    labels.iter().copied().filter(|&l| l != 3).collect()
}

/// zebra's label table: label -> next hops.
pub fn frr_labels(r: &FrrRouter) -> BTreeMap<u32, BTreeSet<Hop>> {
    r.mpls_table()
        .unwrap()
        .into_values()
        .map(|lsp| {
            let hops = lsp
                .nexthops
                .iter()
                .map(|n| (n.via, n.interface.clone(), without_implicit_null(&n.out_labels)))
                .collect();
            (lsp.in_label, hops)
        })
        .collect()
}

pub fn vmpls_hops(nexthops: &Value) -> BTreeSet<Hop> {
    nexthops
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|n| {
            (
                n["gateway"].as_str().map(ip),
                n["dev"].as_str().map(str::to_string),
                n["labels"].as_array().unwrap().iter().map(|l| l.as_u64().unwrap() as u32).collect(),
            )
        })
        .collect()
}

/// vmpls's label table: label -> (action, next hops, protocol).
pub fn vmpls_labels(lab: &Lab, router: &str) -> BTreeMap<u32, (String, BTreeSet<Hop>, String)> {
    lab.cli(router, &["-f", "mpls", "route", "show"])
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["label"].as_u64().unwrap() as u32,
                (
                    r["action"].as_str().unwrap_or_default().to_string(),
                    vmpls_hops(&r["nexthops"]),
                    r["protocol"].as_str().unwrap_or_default().to_string(),
                ),
            )
        })
        .collect()
}

/// Where vmpls's label table differs from zebra's (empty: equal). An FRR next hop
/// without an interface matches vmpls's with any; one without a gateway out of no port
/// (zebra's "pop here" out of lo) is vmpls's `lookup`.
pub fn label_differences(
    frr: &BTreeMap<u32, BTreeSet<Hop>>,
    vm: &BTreeMap<u32, (String, BTreeSet<Hop>, String)>,
) -> Vec<String> {
    let mut diffs = Vec::new();
    for (label, hops) in frr {
        let Some((action, vhops, _)) = vm.get(label) else {
            diffs.push(format!("label {label}: FRR {hops:?}, vmpls none"));
            continue;
        };
        let local = hops.iter().all(|(gw, _, labels)| gw.is_none() && labels.is_empty());
        if local && action == "lookup" {
            continue;
        }
        let strip = |s: &BTreeSet<Hop>| -> BTreeSet<(Option<IpAddr>, Vec<u32>)> {
            s.iter().map(|(g, _, l)| (*g, l.clone())).collect()
        };
        let dev_ok = hops.iter().all(|(g, dev, l)| {
            dev.is_none() || vhops.iter().any(|(vg, vdev, vl)| vg == g && vl == l && vdev == dev)
        });
        if action != "forward" || strip(hops) != strip(vhops) || !dev_ok {
            diffs.push(format!("label {label}: FRR {hops:?}, vmpls {action} {vhops:?}"));
        }
    }
    for label in vm.keys().filter(|l| !frr.contains_key(l)) {
        diffs.push(format!("label {label}: vmpls {:?}, FRR none", vm[label]));
    }
    diffs
}

/// The protocols whose IPv4 routes the tables are compared for.
const COMPARED: [&str; 3] = ["ospf", "isis", "static"];

/// zebra's selected OSPF, IS-IS and static IPv4 routes: prefix -> (protocol, active next hops).
pub fn frr_routes(r: &FrrRouter) -> BTreeMap<String, (String, BTreeSet<Hop>)> {
    r.ip_routes()
        .unwrap()
        .into_iter()
        .filter(|r| r.selected && COMPARED.contains(&r.protocol.as_str()))
        .map(|r| {
            let hops = r
                .nexthops
                .iter()
                .filter(|n| n.active)
                .map(|n| (n.via, n.interface.clone(), without_implicit_null(&n.labels)))
                .collect();
            (r.prefix.to_string(), (r.protocol, hops))
        })
        .collect()
}

/// vmpls's OSPF, IS-IS and static (from staticd) IPv4 routes.
pub fn vmpls_routes(lab: &Lab, router: &str) -> BTreeMap<String, (String, BTreeSet<Hop>)> {
    lab.cli(router, &["route", "show"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["protocol"].as_str().is_some_and(|p| COMPARED.contains(&p)))
        .map(|r| {
            (
                r["dst"].as_str().unwrap().to_string(),
                (r["protocol"].as_str().unwrap().to_string(), vmpls_hops(&r["nexthops"])),
            )
        })
        .collect()
}

/// Both tables of `router` equal FRR's: the differences, empty if none.
pub fn differences(lab: &Lab, router: &str) -> Vec<String> {
    let r = lab.frr(router);
    let mut d = label_differences(&frr_labels(r), &vmpls_labels(lab, router));
    let (f, v) = (frr_routes(r), vmpls_routes(lab, router));
    if f != v {
        d.push(format!("IP routes: FRR {f:?}, vmpls {v:?}"));
    }
    d
}

/// Waits until vmpls's tables on every router equal FRR's; returns how long it took.
pub fn wait_tables_equal(lab: &mut Lab, routers: &[&str], timeout: Duration, what: &str) -> Duration {
    let start = Instant::now();
    loop {
        lab.check_running();
        let diffs: Vec<String> = routers
            .iter()
            .flat_map(|r| differences(lab, r).into_iter().map(move |d| format!("{r}: {d}")))
            .collect();
        if diffs.is_empty() {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < timeout,
            "{what}: vmpls's tables differ from FRR's after {timeout:?}:\n{}",
            diffs.join("\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Polls `f` every 200 ms until it is true, for at most `limit` (failing if a vmpls or
/// an FRR daemon exited meanwhile); returns how long it took.
pub fn wait(lab: &mut Lab, what: &str, limit: Duration, mut f: impl FnMut(&Lab) -> bool) -> Duration {
    let t0 = Instant::now();
    loop {
        lab.check_running();
        if f(lab) {
            return t0.elapsed();
        }
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `ping -c COUNT` from host `from` to `to`, within 15 s: whether it had answers.
pub fn ping(lab: &Lab, from: &str, to: &str, count: &str) -> bool {
    let out = lab
        .topo
        .run_timeout(from, cmd(&["ping", "-c", count, "-i", "0.2", "-W", "1", to]), Duration::from_secs(15))
        .unwrap();
    out.status.success()
}

/// Pseudowire `name` in FRR's `show l2vpn atom vc json` on `pe` ("up", "down"...; ""
/// if absent).
pub fn frr_pw_status(lab: &Lab, pe: &str, name: &str) -> String {
    lab.frr(pe)
        .vtysh_json("show l2vpn atom vc json")
        .ok()
        .and_then(|v| v[name]["status"].as_str().map(str::to_owned))
        .unwrap_or_default()
}
