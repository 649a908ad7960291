//! What the netlab tests share (`netlab_ldp.rs`, `netlab_vpn.rs`): netlab itself
//! (`VMPLS_NETLAB`, else `target/netlab-venv/bin/netlab`, installed there from PyPI,
//! networklab at the version below, when missing), a lab directory with a home of its
//! own where `netlab/install` put the device `vmpls`, the checks of generated scripts,
//! and the command shims `netlab initial`/`validate` need on this host.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::container_common::{ClabLab, Engine, parse_clab, repo};
use vmpls_lab::process::run_here_timeout;
use vmpls_testkit::TempDir;

/// The netlab release the templates in `netlab/templates` wrap.
pub const NETLAB_VERSION: &str = "26.10";

/// How long one netlab command may take: `create` takes seconds; `initial` and
/// `validate` wait for the lab (validate's own waits are 40 s at most per check).
pub const NETLAB_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs `cmd` for at most `timeout`: its output (stdout and stderr), or an error with it.
pub fn run(cmd: Command, timeout: Duration) -> Result<String, String> {
    let shown = format!("{cmd:?}");
    let out = run_here_timeout(cmd, timeout).map_err(|e| format!("{shown}: {e:#}"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() { Ok(text) } else { Err(format!("{shown} exited with {}:\n{text}", out.status)) }
}

/// netlab's command, installed into `target/netlab-venv` (a Python venv) when missing.
pub fn netlab() -> PathBuf {
    if let Some(path) = std::env::var_os("VMPLS_NETLAB") {
        return PathBuf::from(path);
    }
    let venv = repo().join("target/netlab-venv");
    let netlab = venv.join("bin/netlab");
    if !netlab.exists() {
        let mut mkvenv = Command::new("python3");
        mkvenv.arg("-m").arg("venv").arg(&venv);
        run(mkvenv, Duration::from_secs(120)).expect("python3 -m venv");
        let mut pip = Command::new(venv.join("bin/pip"));
        pip.args(["install", "-q"]).arg(format!("networklab=={NETLAB_VERSION}"));
        run(pip, Duration::from_secs(600)).expect("pip install networklab");
    }
    netlab
}

/// A netlab lab directory, `topology.yml` in it, and a home of its own where
/// `netlab/install` put the device; all removed on drop.
pub struct NetlabLab {
    pub scratch: TempDir,
    pub home: PathBuf,
    pub dir: PathBuf,
}

impl NetlabLab {
    pub fn new(tag: &str, topology: &str) -> NetlabLab {
        let scratch = TempDir::new(tag);
        let home = scratch.path().join("home");
        let dir = scratch.path().join("lab");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let mut install = Command::new(repo().join("netlab/install"));
        install.env("HOME", &home);
        let said = run(install, Duration::from_secs(30)).expect("netlab/install");
        assert!(said.contains(".netlab.yml includes"), "{said}");
        std::fs::write(dir.join("topology.yml"), topology).unwrap();
        NetlabLab { scratch, home, dir }
    }

    /// Runs `netlab ARGS` in the lab, `path_first` (if any) ahead in PATH.
    pub fn netlab(&self, args: &[&str], path_first: Option<&Path>) -> Result<String, String> {
        let mut cmd = Command::new(netlab());
        cmd.args(args).current_dir(&self.dir).env("HOME", &self.home).env_remove("NETLAB_DEVICE");
        if let Some(dir) = path_first {
            let path = std::env::var_os("PATH").unwrap_or_default();
            let mut dirs = vec![dir.to_path_buf()];
            dirs.extend(std::env::split_paths(&path));
            cmd.env("PATH", std::env::join_paths(dirs).unwrap());
        }
        run(cmd, NETLAB_TIMEOUT)
    }
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Fails unless `script` is valid bash.
pub fn assert_bash_syntax(script: &Path) {
    let mut bash = Command::new("bash");
    bash.arg("-n").arg(script);
    if let Err(e) = run(bash, Duration::from_secs(10)) {
        panic!("{} is not valid bash: {e}", script.display());
    }
}

/// The lines of a script that run (not comments), trimmed.
pub fn active_lines(text: &str) -> Vec<&str> {
    text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect()
}

/// The lines of node `name` in clab.yml (`topology.nodes.NAME`, indented by 4).
pub fn clab_node(clab: &str, name: &str) -> String {
    let head = format!("    {name}:");
    let mut lines = clab.lines().skip_while(|l| *l != head);
    assert!(lines.next().is_some(), "no node {name} in clab.yml:\n{clab}");
    lines.take_while(|l| l.starts_with("      ")).collect::<Vec<_>>().join("\n")
}

/// Commands netlab runs that this host may lack, in a directory to put first in PATH:
/// `docker` (netlab execs into the containers with it) running podman with this
/// machine's options when the engine is podman, and `sudo` (the hosts' scripts run
/// under `sudo ip netns exec`; the test is root already) when there is none.
pub fn command_shims(dir: &Path, engine: &Engine) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let write = |name: &str, body: String| {
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    if engine.cmd[0] != "docker" {
        let words: Vec<String> = engine.cmd.iter().map(|w| format!("'{w}'")).collect();
        write("docker", format!("exec {} \"$@\"", words.join(" ")));
    }
    let mut sudo = Command::new("sudo");
    sudo.arg("-n").arg("true");
    if run(sudo, Duration::from_secs(10)).is_err() {
        write("sudo", "exec \"$@\"".to_string());
    }
    bin
}

/// `netlab create` of `netlab`'s topology as lab `vmnl-NAME-tPID` (netlab names the
/// containers clab-LAB-NODE: a name of this run's own), then its clab.yml deployed with
/// the containerlab wiring, `image` for the nodes that name vmpls-frr:latest.
pub fn create_and_deploy<'a>(netlab: &NetlabLab, engine: &'a Engine, image: &str, name: &str) -> ClabLab<'a> {
    let lab = format!("vmnl-{name}-t{}", std::process::id());
    netlab.netlab(&["create", "-s", &format!("name={lab}")], None).unwrap_or_else(|e| panic!("{e}"));
    let topo = parse_clab(&read(&netlab.dir.join("clab.yml"))).expect("netlab's clab.yml");
    assert_eq!(topo.name, lab);
    ClabLab::deploy_as(engine, topo, &netlab.dir, "vmpls-frr:latest", image, lab)
        .expect("deploying netlab's lab")
}

/// The last lines of the logs of `nodes`' containers, to show with a failure.
pub fn logs_of(lab: &ClabLab, nodes: &[&str]) -> String {
    let logs: Vec<String> = nodes.iter().map(|n| format!("--- {n}:\n{}", lab.log_tail(n, 30))).collect();
    logs.join("\n")
}

/// Fails unless no interface of `node`'s kernel (in every network namespace of its
/// container: its own and its VRFs') forwards IP: netlab's own FRR templates would
/// have turned it on; vmpls forwards.
pub fn assert_kernel_does_not_forward(lab: &ClabLab, node: &str) {
    let script = "for ns in '' $(ip netns list | cut -d' ' -f1); do \
        ${ns:+ip netns exec $ns} sh -c 'cat /proc/sys/net/ipv4/conf/*/forwarding /proc/sys/net/ipv6/conf/*/forwarding'; done";
    let forwarding = lab.exec(node, &["sh", "-c", script]).unwrap();
    assert!(
        !forwarding.trim().is_empty() && forwarding.lines().all(|l| l.trim() == "0"),
        "{node}'s kernel forwards: {forwarding}"
    );
}
