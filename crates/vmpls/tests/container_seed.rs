//! The vmpls-frr container image (`scripts/build-image`) in the containerlab seed lab,
//! `examples/containerlab/seed.clab.yml`, ce1 -- pe1 -- p -- pe2 -- ce2.
//!
//! containerlab cannot be installed here, so the test wires the topology as containerlab
//! does for `kind: linux` nodes: each node's container with no network but its own
//! namespace (`--network none`, privileged, `CLAB_INTFS` set, the binds applied), one
//! veth pair per link created on the host with each end moved into its node's
//! namespace under the link's interface name, then the nodes' `exec` commands. Then:
//!
//! - OSPF Full and LDP OPERATIONAL toward every router neighbour (vtysh in the
//!   containers), and each vmpls label table (`vmpls -j` inside) holds FRR's labels;
//! - frr.conf applied without errors, pe1's static route in zebra's table (FRR 10:
//!   through mgmtd); on FRR 10, netlab's OSPF validation command answers;
//! - ping ce1 -> ce2, and a content-checked TCP flow ce1 -> ce2 whose bytes p's vmpls
//!   switched by label;
//! - a router whose zebra dies exits 1 saying so; `stop` ends a router with 0;
//! - bad input: the image without NET_ADMIN, without data interfaces, with the kernel
//!   forwarding IP where it cannot be turned off, or with a zebra module built for
//!   another FRR exits non-zero with a log line saying so.
//!
//! The image is built on build-image's default Debian suite (trixie, FRR 10.3), or on
//! `VMPLS_IMAGE_SUITE` (`bookworm`: FRR 8.4); the host's IP forwarding must be as it was after the build
//! and at the end.
//!
//! Needs root (skipped otherwise) and docker or podman (`scripts/build-image` installs
//! podman when neither is there). Containers, namespaces, veths and the image it
//! builds are removed at the end, also on failure.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;
use serde_yaml_ng::Value as Yaml;
use vmpls_control::api;
use vmpls_lab::frr::{parse_ldp_operational, parse_mpls_table, parse_ospf_full};
use vmpls_lab::process::run_here_timeout;
use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};
use vmpls_testkit::TempDir;

/// The image the topology names, replaced by the tag this test builds.
const TOPOLOGY_IMAGE: &str = "vmpls-frr:latest";
/// The seed lab's hosts and the address the flow goes to.
const CE1: &str = "ce1";
const CE2: &str = "ce2";
const CE2_ADDR: &str = "198.18.2.2";
/// The static route pe1's frr.conf configures.
const PE1_STATIC: &str = "198.18.100.0/24";
/// p's OSPF router id.
const P_ROUTER_ID: &str = "198.18.255.2";
/// The transit router whose label counters must carry the flow.
const P: &str = "p";
const FLOW_BYTES: u64 = 64 << 20;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn is_root() -> bool {
    vmpls_sys::process::is_root()
}

/// Runs `cmd` for at most `timeout`; its stdout, or an error with its stderr.
fn run(mut cmd: Command, timeout: Duration) -> anyhow::Result<String> {
    cmd.stdin(Stdio::null());
    let shown = format!("{cmd:?}");
    let out = run_here_timeout(cmd, timeout).with_context(|| shown.clone())?;
    if !out.status.success() {
        bail!("{shown} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ip(args: &[&str]) -> anyhow::Result<String> {
    let mut cmd = Command::new("ip");
    cmd.args(args);
    run(cmd, Duration::from_secs(10))
}

/// docker or podman with the options this machine needs, as `image/engine.sh` (the
/// scripts' one place for that) picks them.
struct Engine {
    /// The command and its global options.
    cmd: Vec<String>,
    /// Options of every `run`.
    run: Vec<String>,
}

impl Engine {
    fn pick() -> anyhow::Result<Self> {
        let mut sh = Command::new("bash");
        sh.current_dir(repo()).arg("-c").arg(
            r#"set -e; . image/engine.sh; engine_pick
               printf '%s\n' "${ENGINE_CMD[@]}"; echo --; printf '%s\n' "${ENGINE_RUN[@]}""#,
        );
        let out = run(sh, Duration::from_secs(300))?;
        let (cmd, opts) = out.split_once("--\n").ok_or_else(|| anyhow!("image/engine.sh printed {out:?}"))?;
        let words = |s: &str| s.lines().filter(|l| !l.is_empty()).map(str::to_string).collect::<Vec<_>>();
        Ok(Self { cmd: words(cmd), run: words(opts) })
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.cmd[0]);
        cmd.args(&self.cmd[1..]).args(args);
        cmd
    }

    fn output(&self, args: &[&str], timeout: Duration) -> anyhow::Result<String> {
        run(self.command(args), timeout)
    }

    /// Runs a container to its end: its exit status and its log (stdout and stderr).
    fn run_to_end(&self, args: &[&str]) -> anyhow::Result<(Option<i32>, String)> {
        let mut cmd = self.command(&["run", "--rm"]);
        cmd.args(&self.run).args(args).stdin(Stdio::null());
        let out = run_here_timeout(cmd, Duration::from_secs(60))?;
        let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        Ok((out.status.code(), log))
    }
}

/// The image built for this test, removed on drop.
struct Image<'a> {
    engine: &'a Engine,
    tag: String,
}

impl<'a> Image<'a> {
    /// Builds the image on the Debian suite `VMPLS_IMAGE_SUITE` names (build-image's
    /// default when unset). The build must leave the host's IP forwarding as it was: a
    /// bridge network turning it on changes every namespace created after it.
    fn build(engine: &'a Engine) -> anyhow::Result<Self> {
        let tag = format!("localhost/vmpls-frr:test-{}", std::process::id());
        let started = Instant::now();
        let mut cmd = Command::new(repo().join("scripts/build-image"));
        cmd.arg("--tag").arg(&tag).stderr(Stdio::inherit());
        let suite = std::env::var("VMPLS_IMAGE_SUITE").ok().filter(|s| !s.is_empty());
        if let Some(suite) = &suite {
            cmd.arg("--suite").arg(suite);
        }
        let forwarding = HostForwarding::read()?;
        let image = Image { engine, tag };
        run(cmd, Duration::from_secs(600))?;
        forwarding.check_unchanged("building the image")?;
        eprintln!(
            "built {} ({}) in {:.0} s",
            image.tag,
            suite.as_deref().unwrap_or("default suite"),
            started.elapsed().as_secs_f64()
        );
        Ok(image)
    }
}

/// The host's IP forwarding switches, which new network namespaces inherit (IPv4).
#[derive(Debug, PartialEq, Eq)]
struct HostForwarding {
    ipv4: String,
    ipv6: String,
}

impl HostForwarding {
    fn read() -> anyhow::Result<Self> {
        let read = |path: &str| {
            std::fs::read_to_string(path)
                .map(|s| s.trim().to_string())
                .with_context(|| format!("reading {path}"))
        };
        Ok(Self {
            ipv4: read("/proc/sys/net/ipv4/ip_forward")?,
            ipv6: read("/proc/sys/net/ipv6/conf/all/forwarding")?,
        })
    }

    fn check_unchanged(&self, during: &str) -> anyhow::Result<()> {
        let now = Self::read()?;
        if now != *self {
            bail!(
                "the host's IP forwarding changed while {during}: {self:?} before, {now:?} after \
                 (a container network bridged to the host turns it on)"
            );
        }
        Ok(())
    }
}

impl Drop for Image<'_> {
    fn drop(&mut self) {
        let _ = self.engine.output(&["rmi", "-f", &self.tag], Duration::from_secs(60));
    }
}

/// One `kind: linux` node of a `.clab.yml`.
#[derive(Debug, Clone, Default)]
struct Node {
    image: String,
    /// `HOST:CONTAINER[:OPTIONS]`, HOST relative to the topology file.
    binds: Vec<String>,
    env: BTreeMap<String, String>,
    cmd: Option<String>,
    exec: Vec<String>,
}

/// The part of a containerlab topology this test wires.
#[derive(Debug)]
struct ClabTopology {
    name: String,
    nodes: BTreeMap<String, Node>,
    /// `[(node, interface); 2]` per link.
    links: Vec<[(String, String); 2]>,
}

fn yaml_str(v: &Yaml, what: &str) -> anyhow::Result<String> {
    v.as_str().map(str::to_string).ok_or_else(|| anyhow!("{what}: a string expected, got {v:?}"))
}

fn yaml_strings(v: Option<&Yaml>, what: &str) -> anyhow::Result<Option<Vec<String>>> {
    let Some(v) = v else { return Ok(None) };
    let list = v.as_sequence().ok_or_else(|| anyhow!("{what}: a list expected"))?;
    list.iter().map(|s| yaml_str(s, what)).collect::<anyhow::Result<_>>().map(Some)
}

/// Applies what a `kinds:` entry or a node sets over `node`.
fn apply_node_keys(node: &mut Node, v: &Yaml, what: &str) -> anyhow::Result<()> {
    if let Some(image) = v.get("image") {
        node.image = yaml_str(image, what)?;
    }
    if let Some(binds) = yaml_strings(v.get("binds"), what)? {
        node.binds.extend(binds);
    }
    if let Some(exec) = yaml_strings(v.get("exec"), what)? {
        node.exec = exec;
    }
    if let Some(cmd) = v.get("cmd") {
        node.cmd = Some(yaml_str(cmd, what)?);
    }
    if let Some(env) = v.get("env").and_then(Yaml::as_mapping) {
        for (k, val) in env {
            let val = match val {
                Yaml::String(s) => s.clone(),
                other => serde_yaml_ng::to_string(other)?.trim().to_string(),
            };
            node.env.insert(yaml_str(k, what)?, val);
        }
    }
    Ok(())
}

fn parse_clab(text: &str) -> anyhow::Result<ClabTopology> {
    let doc: Yaml = serde_yaml_ng::from_str(text).context("parsing the topology")?;
    let name = yaml_str(doc.get("name").ok_or_else(|| anyhow!("no name"))?, "name")?;
    let topo = doc.get("topology").ok_or_else(|| anyhow!("no topology"))?;
    let mut nodes = BTreeMap::new();
    let node_map =
        topo.get("nodes").and_then(Yaml::as_mapping).ok_or_else(|| anyhow!("no topology.nodes"))?;
    for (node_name, v) in node_map {
        let node_name = yaml_str(node_name, "node name")?;
        let mut node = Node::default();
        if let Some(defaults) = topo.get("defaults") {
            apply_node_keys(&mut node, defaults, "topology.defaults")?;
        }
        let kind = v.get("kind").map(|k| yaml_str(k, "kind")).transpose()?.unwrap_or_else(|| "linux".into());
        if kind != "linux" {
            bail!("node {node_name}: kind {kind:?}, only linux is wired here");
        }
        if let Some(k) = topo.get("kinds").and_then(|k| k.get(&kind)) {
            apply_node_keys(&mut node, k, "topology.kinds")?;
        }
        apply_node_keys(&mut node, v, &format!("node {node_name}"))?;
        if node.image.is_empty() {
            bail!("node {node_name} has no image");
        }
        nodes.insert(node_name, node);
    }
    let mut links = Vec::new();
    for link in topo.get("links").and_then(Yaml::as_sequence).map(Vec::as_slice).unwrap_or_default() {
        let ends = yaml_strings(link.get("endpoints"), "link endpoints")?.unwrap_or_default();
        let ends: Vec<(String, String)> = ends
            .iter()
            .map(|e| {
                let (n, i) = e.split_once(':').ok_or_else(|| anyhow!("endpoint {e:?}: NODE:INTERFACE"))?;
                if !nodes.contains_key(n) {
                    bail!("endpoint {e:?}: no node {n}");
                }
                Ok((n.to_string(), i.to_string()))
            })
            .collect::<anyhow::Result<_>>()?;
        let [a, b]: [(String, String); 2] =
            ends.try_into().map_err(|e| anyhow!("a link with {} endpoints", Vec::len(&e)))?;
        links.push([a, b]);
    }
    Ok(ClabTopology { name, nodes, links })
}

/// A deployed topology: containers `clab-LAB-NODE` whose network namespaces are also
/// named so under /run/netns. Everything is removed on drop.
struct ClabLab<'a> {
    engine: &'a Engine,
    lab: String,
    topo: ClabTopology,
    containers: Vec<String>,
    netns: Vec<String>,
    veths: Vec<String>,
}

impl<'a> ClabLab<'a> {
    fn container(&self, node: &str) -> String {
        format!("clab-{}-{node}", self.lab)
    }

    /// Deploys `topo` (read from a file in `dir`) with `image` for every node that
    /// names `replace`, as containerlab deploys `kind: linux` nodes.
    fn deploy(
        engine: &'a Engine,
        topo: ClabTopology,
        dir: &Path,
        replace: &str,
        image: &str,
    ) -> anyhow::Result<Self> {
        let lab = format!("{}-t{}", topo.name, std::process::id());
        let mut me =
            ClabLab { engine, lab, topo, containers: Vec::new(), netns: Vec::new(), veths: Vec::new() };
        let names: Vec<String> = me.topo.nodes.keys().cloned().collect();
        for name in &names {
            let node = me.topo.nodes[name].clone();
            let intfs = me.topo.links.iter().flatten().filter(|(n, _)| n == name).count();
            let container = me.container(name);
            let mut args: Vec<String> =
                ["run", "-d", "--name", &container, "--hostname", name, "--network", "none"]
                    .map(str::to_string)
                    .to_vec();
            args.push("--privileged".into());
            args.extend(engine.run.iter().cloned());
            args.extend(["-e".into(), format!("CLAB_INTFS={intfs}")]);
            for (k, v) in &node.env {
                args.extend(["-e".into(), format!("{k}={v}")]);
            }
            for bind in &node.binds {
                let (host, rest) =
                    bind.split_once(':').ok_or_else(|| anyhow!("bind {bind:?}: HOST:CONTAINER"))?;
                let host = dir.join(host);
                if !host.exists() {
                    bail!("node {name}: bind {bind:?}: {} does not exist", host.display());
                }
                args.extend(["-v".into(), format!("{}:{rest}", host.display())]);
            }
            args.push(if node.image == replace { image.to_string() } else { node.image.clone() });
            if let Some(cmd) = &node.cmd {
                args.extend(cmd.split_whitespace().map(str::to_string));
            }
            me.containers.push(container.clone());
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            engine.output(&args, Duration::from_secs(60)).with_context(|| format!("starting node {name}"))?;
            let pid =
                engine.output(&["inspect", "-f", "{{.State.Pid}}", &container], Duration::from_secs(30))?;
            me.netns.push(container.clone());
            ip(&["netns", "attach", &container, pid.trim()])?;
        }
        let tag = std::process::id() % 100_000;
        let links = me.topo.links.clone();
        for (k, [(na, ia), (nb, ib)]) in links.iter().enumerate() {
            let (va, vb) = (format!("vc{tag}x{k}a"), format!("vc{tag}x{k}b"));
            me.veths.push(va.clone());
            ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb])?;
            for (veth, node, ifname) in [(&va, na, ia), (&vb, nb, ib)] {
                let ns = me.container(node);
                ip(&["link", "set", veth, "netns", &ns])?;
                ip(&["-n", &ns, "link", "set", veth, "name", ifname])?;
                ip(&["-n", &ns, "link", "set", ifname, "up"])?;
            }
        }
        for name in &names {
            for cmd in me.topo.nodes[name].exec.clone() {
                me.exec(name, &["sh", "-c", &cmd]).with_context(|| format!("exec on {name}"))?;
            }
        }
        Ok(me)
    }

    fn exec(&self, node: &str, args: &[&str]) -> anyhow::Result<String> {
        let container = self.container(node);
        let mut all = vec!["exec", container.as_str()];
        all.extend_from_slice(args);
        self.engine.output(&all, Duration::from_secs(30))
    }

    fn json(&self, node: &str, args: &[&str]) -> anyhow::Result<Value> {
        let out = self.exec(node, args)?;
        serde_json::from_str(&out).with_context(|| format!("{args:?} on {node} printed {out:?}"))
    }

    fn vtysh_json(&self, node: &str, command: &str) -> anyhow::Result<Value> {
        self.json(node, &["vtysh", "-c", command])
    }

    fn vmpls_stats(&self, node: &str) -> anyhow::Result<api::Stats> {
        let v = self.json(node, &["vmpls", "-r", node, "-j", "stats"])?;
        serde_json::from_value(v).context("vmpls stats")
    }

    /// The nodes running FRR (those binding a frr.conf).
    fn routers(&self) -> Vec<String> {
        let frr_conf = |n: &Node| n.binds.iter().any(|b| b.contains(":/etc/frr/frr.conf"));
        self.topo.nodes.iter().filter(|(_, n)| frr_conf(n)).map(|(k, _)| k.clone()).collect()
    }

    /// How many of `router`'s links lead to another router: its OSPF and LDP neighbours.
    fn router_neighbours(&self, router: &str, routers: &[String]) -> usize {
        let is_router = |n: &String| routers.contains(n);
        self.topo
            .links
            .iter()
            .filter(|[(a, _), (b, _)]| is_router(a) && is_router(b) && (a == router || b == router))
            .count()
    }

    /// Fails with the router's log if its container stopped.
    fn check_running(&self, node: &str) -> anyhow::Result<()> {
        let container = self.container(node);
        let state = self
            .engine
            .output(&["inspect", "-f", "{{.State.Running}}", &container], Duration::from_secs(30))?;
        if state.trim() != "true" {
            bail!("{container} stopped; its log:\n{}", self.log_tail(node, 40));
        }
        Ok(())
    }

    /// Waits until `node`'s container has exited: its exit code and the end of its log.
    fn wait_exit(&self, node: &str, timeout: Duration) -> anyhow::Result<(i32, String)> {
        let container = self.container(node);
        let deadline = Instant::now() + timeout;
        loop {
            let state = self.engine.output(
                &["inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}", &container],
                Duration::from_secs(30),
            )?;
            if let Some(("false", code)) = state.trim().split_once(' ') {
                return Ok((code.parse()?, self.log_tail(node, 20)));
            }
            if Instant::now() > deadline {
                bail!("{container} still runs after {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log_tail(&self, node: &str, lines: usize) -> String {
        let container = self.container(node);
        let cmd = self.engine.command(&["logs", "--tail", &lines.to_string(), &container]);
        match run_here_timeout(cmd, Duration::from_secs(30)) {
            Ok(o) => format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
            Err(e) => format!("(no log: {e:#})"),
        }
    }
}

impl Drop for ClabLab<'_> {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = self.engine.output(&["rm", "-f", "-t", "0", c], Duration::from_secs(60));
        }
        for ns in &self.netns {
            let _ = ip(&["netns", "delete", ns]);
        }
        // A veth still on the host (its move failed) goes with either end.
        for v in &self.veths {
            if Path::new("/sys/class/net").join(v).exists() {
                let _ = ip(&["link", "del", v]);
            }
        }
    }
}

/// One router's state as the checks see it.
#[derive(Debug, Default)]
struct RouterState {
    ospf_full: usize,
    ldp_operational: usize,
    frr_labels: BTreeSet<u32>,
    vmpls_labels: BTreeSet<u32>,
}

fn router_state(lab: &ClabLab<'_>, node: &str) -> anyhow::Result<RouterState> {
    let ospf_full = parse_ospf_full(&lab.vtysh_json(node, "show ip ospf neighbor json")?)?;
    let ldp_operational = parse_ldp_operational(&lab.vtysh_json(node, "show mpls ldp neighbor json")?)?;
    let frr_labels = parse_mpls_table(&lab.vtysh_json(node, "show mpls table json")?)?.into_keys().collect();
    let routes: Vec<api::MplsRoute> =
        serde_json::from_value(lab.json(node, &["vmpls", "-r", node, "-j", "-f", "mpls", "route", "show"])?)
            .context("vmpls -j -f mpls route show")?;
    let vmpls_labels = routes.iter().map(|r| r.label).collect();
    Ok(RouterState { ospf_full, ldp_operational, frr_labels, vmpls_labels })
}

fn label_bytes(stats: &api::Stats) -> u64 {
    stats.labels.iter().map(|l| l.bytes).sum()
}

fn seed_topology() -> (ClabTopology, PathBuf) {
    let dir = repo().join("examples/containerlab");
    let text = std::fs::read_to_string(dir.join("seed.clab.yml")).expect("reading seed.clab.yml");
    (parse_clab(&text).expect("seed.clab.yml"), dir)
}

#[test]
fn the_seed_clab_topology_parses_as_containerlab_reads_it() {
    let (topo, dir) = seed_topology();
    assert_eq!(topo.nodes.keys().collect::<Vec<_>>(), ["ce1", "ce2", "p", "pe1", "pe2"]);
    assert_eq!(topo.links.len(), 4);
    for (name, node) in &topo.nodes {
        assert_eq!(node.image, TOPOLOGY_IMAGE, "{name}");
        for bind in &node.binds {
            let host = bind.split(':').next().unwrap();
            assert!(dir.join(host).is_file(), "{name}: bind {bind} names no file");
        }
    }
    assert_eq!(topo.nodes["ce1"].cmd.as_deref(), Some("sleep infinity"));
    assert!(topo.nodes["pe1"].binds.iter().any(|b| b.ends_with(":/etc/frr/daemons")));
    // Every interface of the routers' frr.conf is an endpoint of a link of that router.
    for name in ["pe1", "p", "pe2"] {
        let conf = std::fs::read_to_string(dir.join(format!("seed/{name}/frr.conf"))).unwrap();
        for line in conf.lines().filter_map(|l| l.trim().strip_prefix("interface ")) {
            let ok = line == "lo" || topo.links.iter().flatten().any(|(n, i)| n == name && i == line);
            assert!(ok, "{name}/frr.conf: interface {line} is on no link of {name}");
        }
    }
}

#[test]
fn seed_lab_in_vmpls_frr_containers_forwards_over_ldp() {
    if !is_root() {
        eprintln!("skipped: needs root (containers, veths, namespaces)");
        return;
    }
    let started = Instant::now();
    let forwarding = HostForwarding::read().unwrap();
    let engine = Engine::pick().expect("a container engine");
    let image = Image::build(&engine).expect("building the image");
    let (topo, dir) = seed_topology();
    let lab =
        ClabLab::deploy(&engine, topo, &dir, TOPOLOGY_IMAGE, &image.tag).expect("deploying the seed lab");
    let deployed = Instant::now();

    let routers = lab.routers();
    assert_eq!(routers, ["p", "pe1", "pe2"]);
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut states = BTreeMap::new();
    loop {
        for r in &routers {
            lab.check_running(r).unwrap();
        }
        // Every router's state, for the message should it not converge.
        let done: Vec<bool> = routers
            .iter()
            .map(|r| {
                let want = lab.router_neighbours(r, &routers);
                let state = router_state(&lab, r).unwrap_or_default();
                let ok = state.ospf_full == want
                    && state.ldp_operational == want
                    && !state.frr_labels.is_empty()
                    && state.frr_labels == state.vmpls_labels;
                states.insert(r.clone(), state);
                ok
            })
            .collect();
        if done.iter().all(|&ok| ok) {
            break;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> =
                routers.iter().map(|r| format!("--- {r}:\n{}", lab.log_tail(r, 30))).collect();
            panic!("not converged in 90 s: {states:#?}\n{}", logs.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("converged {:.1} s after the wiring: {states:?}", deployed.elapsed().as_secs_f64());

    // vtysh -b applied frr.conf without an error status, and staticd's part of it (FRR
    // 10: through mgmtd) took effect: pe1's static route is in zebra's table. vtysh -b
    // passes over a line no daemon knows with status 0, so the route is the real check.
    for r in &routers {
        let log = lab.log_tail(r, 10_000);
        assert!(!log.contains("vtysh -b reported errors"), "{r}:\n{log}");
    }
    let static_route = lab.vtysh_json("pe1", &format!("show ip route {PE1_STATIC} json")).unwrap();
    let installed = static_route[PE1_STATIC].as_array().is_some_and(|routes| {
        routes.iter().any(|r| r["protocol"] == "static" && r["selected"] == true && r["installed"] == true)
    });
    assert!(installed, "pe1's static route {PE1_STATIC}: {static_route}");

    // The command netlab's OSPF validation runs, which FRR 8.4's vtysh refuses: why the
    // image is on trixie by default.
    let frr = lab.exec("pe1", &["dpkg-query", "-W", "-f=${Version}", "frr"]).unwrap();
    let netlab_check = format!("show ip ospf vrf default neighbor {P_ROUTER_ID} detail json");
    let detail = lab.exec("pe1", &["vtysh", "-c", &netlab_check]);
    if frr.split('.').next().and_then(|major| major.parse::<u32>().ok()).is_some_and(|major| major >= 10) {
        let detail = detail.unwrap();
        let parsed: anyhow::Result<Value> = serde_json::from_str(&detail).map_err(Into::into);
        assert!(
            parsed.is_ok() && detail.contains("Full"),
            "pe1 (frr {frr}): {netlab_check} printed {detail:?}"
        );
    } else {
        eprintln!("frr {frr}: `{netlab_check}` gives {detail:?}");
    }

    let ping = lab.exec(CE1, &["ping", "-c", "3", "-i", "0.2", "-W", "2", CE2_ADDR]);
    assert!(ping.is_ok(), "ping ce1 -> ce2: {ping:?}");

    let before = label_bytes(&lab.vmpls_stats(P).unwrap());
    let opts = FlowOptions {
        limit: Limit::Bytes(FLOW_BYTES),
        deadline: Some(Duration::from_secs(60)),
        ..FlowOptions::default()
    };
    let dst: IpAddr = CE2_ADDR.parse().unwrap();
    let flow =
        run_flow(&lab.container(CE1), &lab.container(CE2), dst, &opts, &mut |_| {}).expect("the TCP flow");
    assert!(flow.content_ok, "the flow's content: {flow:?}");
    assert_eq!(flow.bytes_received, FLOW_BYTES, "{flow:?}");
    let switched = label_bytes(&lab.vmpls_stats(P).unwrap()) - before;
    assert!(
        switched >= FLOW_BYTES,
        "p's vmpls switched {switched} bytes by label during a flow of {FLOW_BYTES}: the flow did not take the LSP"
    );
    eprintln!(
        "flow ce1 -> ce2: {} bytes intact, {:.2} Gbit/s, {} retransmits; p switched {switched} bytes by label; {:.0} s in all",
        flow.bytes_received,
        flow.gbps,
        flow.retransmits,
        started.elapsed().as_secs_f64()
    );

    // A daemon dying takes the router down with a reason (pe2's zebra), and `stop` ends
    // a router cleanly (p).
    lab.exec("pe2", &["sh", "-c", "kill $(cat /run/frr/zebra.pid)"]).unwrap();
    let (code, log) = lab.wait_exit("pe2", Duration::from_secs(20)).unwrap();
    assert_eq!(code, 1, "pe2 after its zebra was killed:\n{log}");
    assert!(log.contains("ERROR: zebra exited with status"), "{log}");
    let stopping = Instant::now();
    lab.engine.output(&["stop", "-t", "20", &lab.container(P)], Duration::from_secs(30)).unwrap();
    let (code, log) = lab.wait_exit(P, Duration::from_secs(5)).unwrap();
    assert_eq!(code, 0, "p after stop:\n{log}");
    assert!(stopping.elapsed() < Duration::from_secs(15), "p took {:?} to stop", stopping.elapsed());
    forwarding.check_unchanged("the image was built and the lab ran").unwrap();
}

#[test]
fn vmpls_frr_image_refuses_bad_input_with_a_reason() {
    if !is_root() {
        eprintln!("skipped: needs root (containers)");
        return;
    }
    let engine = Engine::pick().expect("a container engine");
    let image = Image::build(&engine).expect("building the image");
    let tag = image.tag.as_str();

    let (code, log) = engine.run_to_end(&["--network", "none", tag]).unwrap();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("lacks the capabilities NET_ADMIN NET_RAW BPF"), "{log}");

    let (code, log) = engine
        .run_to_end(&["--network", "none", "--privileged", "-e", "VMPLS_WAIT_INTERFACES=1", tag])
        .unwrap();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("no data interfaces after 1 s"), "{log}");

    // The kernel forwarding on a data interface (lo stands for one here) where /proc/sys
    // is read-only (capabilities without --privileged).
    let caps = ["--cap-add", "NET_ADMIN", "--cap-add", "NET_RAW", "--cap-add", "BPF"];
    let mut args = vec!["--network", "none", "--sysctl", "net.ipv4.conf.all.forwarding=1"];
    args.extend(caps);
    args.extend(["-e", "VMPLS_INTERFACES=lo", tag]);
    let (code, log) = engine.run_to_end(&args).unwrap();
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains(
            "the kernel forwards IP on lo (net/ipv4/conf/lo/forwarding=1) and /proc/sys is read-only"
        ),
        "{log}"
    );
    assert!(!log.contains("Read-only file system"), "the refusal is one clear line: {log}");

    // A module of another FRR (its version string is what the entrypoint reads first;
    // zebra's own refusal is the frr tests' business).
    let dir = TempDir::new("container-module");
    let fake = dir.path().join("vmpls_zebra.so");
    std::fs::write(&fake, b"\0VMPLS frr 7.5.1-1.1\0").unwrap();
    let bind = format!("{}:/tmp/other.so:ro", fake.display());
    let (code, log) = engine
        .run_to_end(&[
            "--network",
            "none",
            "--privileged",
            "-v",
            &bind,
            "-e",
            "VMPLS_ZEBRA_MODULE=/tmp/other.so",
            tag,
        ])
        .unwrap();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("was built for frr 7.5.1-1.1, this image runs frr"), "{log}");
}
