//! What the container tests share (`container_seed.rs`, `netlab_ldp.rs`): docker or
//! podman as `image/engine.sh` picks it, the vmpls-frr image built for a test, and a
//! containerlab topology (`.clab.yml`, `kind: linux` nodes) wired as containerlab does:
//! each node's container with no network but its own namespace (`--network none`,
//! privileged, `CLAB_INTFS` set, the binds applied, the namespace named
//! `clab-LAB-NODE` under /run/netns), one veth pair per link with each end made in its
//! node's namespace under the link's interface name, then the nodes' `exec` commands.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;
use serde_yaml_ng::Value as Yaml;
use vmpls_control::api;
use vmpls_lab::process::run_here_timeout;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn is_root() -> bool {
    vmpls_sys::process::is_root()
}

/// Runs `cmd` for at most `timeout`; its stdout, or an error with its stderr.
pub fn run(mut cmd: Command, timeout: Duration) -> anyhow::Result<String> {
    cmd.stdin(Stdio::null());
    let shown = format!("{cmd:?}");
    let out = run_here_timeout(cmd, timeout).with_context(|| shown.clone())?;
    if !out.status.success() {
        bail!("{shown} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn ip(args: &[&str]) -> anyhow::Result<String> {
    let mut cmd = Command::new("ip");
    cmd.args(args);
    run(cmd, Duration::from_secs(10))
}

/// docker or podman with the options this machine needs, as `image/engine.sh` (the
/// scripts' one place for that) picks them.
pub struct Engine {
    /// The command and its global options.
    pub cmd: Vec<String>,
    /// Options of every `run`.
    pub run: Vec<String>,
}

impl Engine {
    pub fn pick() -> anyhow::Result<Self> {
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

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.cmd[0]);
        cmd.args(&self.cmd[1..]).args(args);
        cmd
    }

    pub fn output(&self, args: &[&str], timeout: Duration) -> anyhow::Result<String> {
        run(self.command(args), timeout)
    }

    /// Runs a container to its end: its exit status and its log (stdout and stderr).
    pub fn run_to_end(&self, args: &[&str]) -> anyhow::Result<(Option<i32>, String)> {
        let mut cmd = self.command(&["run", "--rm"]);
        cmd.args(&self.run).args(args).stdin(Stdio::null());
        let out = run_here_timeout(cmd, Duration::from_secs(60))?;
        let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        Ok((out.status.code(), log))
    }
}

/// The image built for this test, removed on drop.
pub struct Image<'a> {
    pub engine: &'a Engine,
    pub tag: String,
}

impl<'a> Image<'a> {
    /// Builds the image on the Debian suite `VMPLS_IMAGE_SUITE` names (build-image's
    /// default when unset). The build must leave the host's IP forwarding as it was: a
    /// bridge network turning it on changes every namespace created after it.
    pub fn build(engine: &'a Engine) -> anyhow::Result<Self> {
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
pub struct HostForwarding {
    ipv4: String,
    ipv6: String,
}

impl HostForwarding {
    pub fn read() -> anyhow::Result<Self> {
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

    pub fn check_unchanged(&self, during: &str) -> anyhow::Result<()> {
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
pub struct Node {
    pub image: String,
    /// `HOST:CONTAINER[:OPTIONS]`, HOST relative to the topology file.
    pub binds: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cmd: Option<String>,
    pub exec: Vec<String>,
}

/// The part of a containerlab topology this test wires.
#[derive(Debug)]
pub struct ClabTopology {
    pub name: String,
    pub nodes: BTreeMap<String, Node>,
    /// `[(node, interface); 2]` per link.
    pub links: Vec<[(String, String); 2]>,
}

pub fn yaml_str(v: &Yaml, what: &str) -> anyhow::Result<String> {
    v.as_str().map(str::to_string).ok_or_else(|| anyhow!("{what}: a string expected, got {v:?}"))
}

pub fn yaml_strings(v: Option<&Yaml>, what: &str) -> anyhow::Result<Option<Vec<String>>> {
    let Some(v) = v else { return Ok(None) };
    let list = v.as_sequence().ok_or_else(|| anyhow!("{what}: a list expected"))?;
    list.iter().map(|s| yaml_str(s, what)).collect::<anyhow::Result<_>>().map(Some)
}

/// Applies what a `kinds:` entry or a node sets over `node`.
pub fn apply_node_keys(node: &mut Node, v: &Yaml, what: &str) -> anyhow::Result<()> {
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

pub fn parse_clab(text: &str) -> anyhow::Result<ClabTopology> {
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
pub struct ClabLab<'a> {
    pub engine: &'a Engine,
    pub lab: String,
    pub topo: ClabTopology,
    pub containers: Vec<String>,
    pub netns: Vec<String>,
}

impl<'a> ClabLab<'a> {
    pub fn container(&self, node: &str) -> String {
        format!("clab-{}-{node}", self.lab)
    }

    /// Deploys `topo` (read from a file in `dir`) with `image` for every node that
    /// names `replace`, as containerlab deploys `kind: linux` nodes, as lab
    /// `NAME-tPID` (NAME: the topology's), so that runs do not collide.
    pub fn deploy(
        engine: &'a Engine,
        topo: ClabTopology,
        dir: &Path,
        replace: &str,
        image: &str,
    ) -> anyhow::Result<Self> {
        let lab = format!("{}-t{}", topo.name, std::process::id());
        Self::deploy_as(engine, topo, dir, replace, image, lab)
    }

    /// [`ClabLab::deploy`] as lab `lab`: containers `clab-LAB-NODE`.
    pub fn deploy_as(
        engine: &'a Engine,
        topo: ClabTopology,
        dir: &Path,
        replace: &str,
        image: &str,
        lab: String,
    ) -> anyhow::Result<Self> {
        let mut me = ClabLab { engine, lab, topo, containers: Vec::new(), netns: Vec::new() };
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
        // Each end made in its node's namespace under its final name: an end moved in
        // under a temporary name and renamed after could be taken by the entrypoint,
        // which starts once CLAB_INTFS interfaces are there, under the temporary name.
        let links = me.topo.links.clone();
        for [(na, ia), (nb, ib)] in &links {
            let (nsa, nsb) = (me.container(na), me.container(nb));
            ip(&["link", "add", ia, "netns", &nsa, "type", "veth", "peer", "name", ib, "netns", &nsb])?;
            ip(&["-n", &nsa, "link", "set", ia, "up"])?;
            ip(&["-n", &nsb, "link", "set", ib, "up"])?;
        }
        for name in &names {
            for cmd in me.topo.nodes[name].exec.clone() {
                me.exec(name, &["sh", "-c", &cmd]).with_context(|| format!("exec on {name}"))?;
            }
        }
        Ok(me)
    }

    pub fn exec(&self, node: &str, args: &[&str]) -> anyhow::Result<String> {
        let container = self.container(node);
        let mut all = vec!["exec", container.as_str()];
        all.extend_from_slice(args);
        self.engine.output(&all, Duration::from_secs(30))
    }

    pub fn json(&self, node: &str, args: &[&str]) -> anyhow::Result<Value> {
        let out = self.exec(node, args)?;
        serde_json::from_str(&out).with_context(|| format!("{args:?} on {node} printed {out:?}"))
    }

    pub fn vtysh_json(&self, node: &str, command: &str) -> anyhow::Result<Value> {
        self.json(node, &["vtysh", "-c", command])
    }

    pub fn vmpls_stats(&self, node: &str) -> anyhow::Result<api::Stats> {
        let v = self.json(node, &["vmpls", "-r", node, "-j", "stats"])?;
        serde_json::from_value(v).context("vmpls stats")
    }

    /// The nodes running FRR (those binding a frr.conf).
    pub fn routers(&self) -> Vec<String> {
        let frr_conf = |n: &Node| n.binds.iter().any(|b| b.contains(":/etc/frr/frr.conf"));
        self.topo.nodes.iter().filter(|(_, n)| frr_conf(n)).map(|(k, _)| k.clone()).collect()
    }

    /// How many of `router`'s links lead to another router: its OSPF and LDP neighbours.
    pub fn router_neighbours(&self, router: &str, routers: &[String]) -> usize {
        let is_router = |n: &String| routers.contains(n);
        self.topo
            .links
            .iter()
            .filter(|[(a, _), (b, _)]| is_router(a) && is_router(b) && (a == router || b == router))
            .count()
    }

    /// Fails with the router's log if its container stopped.
    pub fn check_running(&self, node: &str) -> anyhow::Result<()> {
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
    pub fn wait_exit(&self, node: &str, timeout: Duration) -> anyhow::Result<(i32, String)> {
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

    pub fn log_tail(&self, node: &str, lines: usize) -> String {
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
    }
}
