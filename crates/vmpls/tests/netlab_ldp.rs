//! The netlab device `vmpls` (`netlab/`): `netlab create` of the LDP lab
//! `netlab/examples/ldp.yml`, h1 -- r1 -- r2 -- r3 -- h2 with `module: [ospf, mpls]`,
//! `mpls.ldp: true` and `device: vmpls`, gives the files a vmpls-frr container needs,
//! and none of what this kernel lacks:
//!
//! - `netlab/install` into a home of the test's own makes netlab know the device;
//! - clab.yml runs the routers on the vmpls-frr image, with the daemons file and the
//!   configuration scripts bound where the image and netlab expect them;
//! - each router's initial script keeps the kernel's IP forwarding off (the sysctls and
//!   FRR's `ip forwarding`), creates no VRF and is valid bash; its mpls script turns no
//!   kernel MPLS sysctl on and configures LDP on the core links only; its daemons file
//!   starts ospfd, bgpd and ldpd;
//! - the same lab with OSPF segment routing instead of LDP: the sr scripts turn no
//!   kernel MPLS sysctl on;
//! - netlab refuses what the device does not declare (the vrf module, mpls.vpn);
//! - the lab comes up: its containers (the vmpls-frr image built for the test) wired as
//!   containerlab would (`container_common`), then netlab itself configures them
//!   (`netlab initial`) and runs the lab's checks (`netlab validate`: OSPF adjacencies,
//!   LDP and IBGP sessions, ping h1 -> h2), through podman where docker is not there;
//!   the routers' kernels do not forward and r2's vmpls switched the pings by label.
//!
//! netlab comes from `VMPLS_NETLAB`, else `target/netlab-venv/bin/netlab`, installed
//! there from PyPI (networklab, the version below) when missing. The lab needs root
//! (skipped otherwise) and docker or podman.
mod container_common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use container_common::{ClabLab, Engine, Image, is_root, parse_clab, repo};
use vmpls_lab::process::run_here_timeout;
use vmpls_testkit::TempDir;

/// The netlab release the templates in `netlab/templates` wrap.
const NETLAB_VERSION: &str = "26.10";

/// The LDP lab users get (`netlab/examples/ldp.yml`): h1 -- r1 -- r2 -- r3 -- h2.
fn ldp_topology() -> String {
    read(&repo().join("netlab/examples/ldp.yml"))
}

/// How long one netlab command may take: `create` takes seconds; `initial` and
/// `validate` wait for the lab (validate's own waits are 40 s at most per check).
const NETLAB_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs `cmd` for at most `timeout`: its output (stdout and stderr), or an error with it.
fn run(cmd: Command, timeout: Duration) -> Result<String, String> {
    let shown = format!("{cmd:?}");
    let out = run_here_timeout(cmd, timeout).map_err(|e| format!("{shown}: {e:#}"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() { Ok(text) } else { Err(format!("{shown} exited with {}:\n{text}", out.status)) }
}

/// netlab's command, installed into `target/netlab-venv` (a Python venv) when missing.
fn netlab() -> PathBuf {
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
struct NetlabLab {
    scratch: TempDir,
    home: PathBuf,
    dir: PathBuf,
}

impl NetlabLab {
    fn new(tag: &str, topology: &str) -> NetlabLab {
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
    fn netlab(&self, args: &[&str], path_first: Option<&Path>) -> Result<String, String> {
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

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Fails unless `script` is valid bash.
fn assert_bash_syntax(script: &Path) {
    let mut bash = Command::new("bash");
    bash.arg("-n").arg(script);
    if let Err(e) = run(bash, Duration::from_secs(10)) {
        panic!("{} is not valid bash: {e}", script.display());
    }
}

/// The lines of a script that run (not comments), trimmed.
fn active_lines(text: &str) -> Vec<&str> {
    text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect()
}

/// The lines of node `name` in clab.yml (`topology.nodes.NAME`, indented by 4).
fn clab_node(clab: &str, name: &str) -> String {
    let head = format!("    {name}:");
    let mut lines = clab.lines().skip_while(|l| *l != head);
    assert!(lines.next().is_some(), "no node {name} in clab.yml:\n{clab}");
    lines.take_while(|l| l.starts_with("      ")).collect::<Vec<_>>().join("\n")
}

#[test]
fn netlab_creates_an_ldp_lab_of_vmpls_routers_without_kernel_forwarding_or_kernel_mpls() {
    let netlab = NetlabLab::new("netlab-ldp", &ldp_topology());
    let lab = &netlab.dir;
    let created = netlab.netlab(&["create"], None).unwrap_or_else(|e| panic!("{e}"));
    println!("{created}");

    let clab = read(&lab.join("clab.yml"));
    let routers = ["r1", "r2", "r3"];
    for r in routers {
        let node = clab_node(&clab, r);
        assert!(node.contains("image: vmpls-frr:latest"), "{r} in clab.yml:\n{node}");
        let daemons = format!("node_files/{r}/daemons:/etc/frr/daemons");
        assert!(node.contains(&daemons), "{r} lacks the bind {daemons}:\n{node}");
        // netlab execs /etc/config/NN-MODULE.sh in order: initial first
        for (k, module) in ["initial", "ospf", "bgp", "mpls"].iter().enumerate() {
            let bind = format!("node_files/{r}/{module}:/etc/config/{:02}-{module}.sh", k + 1);
            assert!(node.contains(&bind), "{r} lacks the bind {bind}:\n{node}");
        }
    }

    for r in routers {
        let files = lab.join("node_files").join(r);
        let initial = read(&files.join("initial"));
        let lines = active_lines(&initial);
        for want in [
            "sysctl -w net.ipv4.ip_forward=0",
            "sysctl -w net.ipv6.conf.all.forwarding=0",
            "no ip forwarding",
        ] {
            assert!(lines.contains(&want), "{r}'s initial lacks {want:?}:\n{initial}");
        }
        for line in &lines {
            assert!(
                !(line.ends_with("forward=1") || line.ends_with("forwarding=1")),
                "{r}'s initial turns forwarding on: {line}"
            );
            assert!(
                *line != "ip forwarding" && *line != "ipv6 forwarding",
                "{r}'s initial has FRR turn forwarding on: {line}"
            );
            assert!(!line.contains("type vrf"), "{r}'s initial makes a VRF: {line}");
        }
        assert_bash_syntax(&files.join("initial"));

        let mpls = read(&files.join("mpls"));
        let lines = active_lines(&mpls);
        for line in &lines {
            assert!(
                !line.starts_with("sysctl") && !line.starts_with("modprobe"),
                "{r}'s mpls script needs kernel MPLS: {line}"
            );
        }
        assert!(lines.contains(&"mpls ldp"), "{r}'s mpls script:\n{mpls}");
        assert_bash_syntax(&files.join("mpls"));
        // LDP on the links toward routers only: eth1 faces a host on r1 and r3
        let ldp_interfaces: Vec<&str> = lines.iter().filter_map(|l| l.strip_prefix("interface ")).collect();
        let expected: &[&str] = match r {
            "r1" => &["eth2"],
            "r2" => &["eth1", "eth2"],
            _ => &["eth1"],
        };
        assert_eq!(ldp_interfaces, expected, "{r}'s LDP interfaces:\n{mpls}");

        let daemons = read(&files.join("daemons"));
        let lines = active_lines(&daemons);
        for want in ["ospfd=yes", "bgpd=yes", "ldpd=yes"] {
            assert!(lines.contains(&want), "{r}'s daemons lacks {want}:\n{daemons}");
        }

        let ospf = read(&files.join("ospf"));
        assert!(
            ospf.contains("router ospf") && ospf.contains("ospf router-id 198.18.255."),
            "{r}'s ospf:\n{ospf}"
        );
    }
}

#[test]
fn netlab_refuses_modules_the_vmpls_device_does_not_declare() {
    let netlab = NetlabLab::new(
        "netlab-refuse",
        "provider: clab\ndefaults.device: vmpls\nmodule: [ ospf, vrf ]\n\
         vrfs: { red: }\nnodes: { r1: { vrfs: { red: } }, r2: }\n\
         links: [ r1-r2, { r1: { vrf: red } } ]\n",
    );
    let refused = netlab.netlab(&["create"], None).expect_err("netlab create of a VRF lab");
    assert!(refused.contains("Device type vmpls (node r1) does not support module vrf"), "{refused}");

    // BGP/MPLS L3VPN: not before vmpls has VRFs
    let netlab = NetlabLab::new(
        "netlab-refuse-vpn",
        "provider: clab\ndefaults.device: vmpls\nmodule: [ ospf, bgp, mpls ]\nbgp.as: 65000\n\
         mpls.ldp: true\nmpls.vpn: true\nnodes: [ r1, r2 ]\nlinks: [ r1-r2 ]\n",
    );
    let refused = netlab.netlab(&["create"], None).expect_err("netlab create of an L3VPN lab");
    assert!(refused.contains("Device vmpls used by r1 does not support MPLS/VPN"), "{refused}");
}

#[test]
fn netlab_creates_ospf_segment_routing_without_kernel_mpls() {
    let ldp = ldp_topology();
    let modules = "module: [ ospf, bgp, mpls ]\nbgp.as: 65000\nmpls.ldp: true\n";
    assert!(ldp.contains(modules), "netlab/examples/ldp.yml:\n{ldp}");
    let sr = ldp.replace(modules, "module: [ ospf, sr ]\nsr.protocol: [ ospfv2 ]\n");
    let netlab = NetlabLab::new("netlab-sr", &sr);
    let lab = &netlab.dir;
    netlab.netlab(&["create"], None).unwrap_or_else(|e| panic!("{e}"));

    for r in ["r1", "r2", "r3"] {
        let path = lab.join("node_files").join(r).join("sr");
        let script = read(&path);
        let lines = active_lines(&script);
        for line in &lines {
            assert!(!line.starts_with("sysctl"), "{r}'s sr script needs kernel MPLS: {line}");
        }
        assert!(lines.contains(&"segment-routing on"), "{r}'s sr script:\n{script}");
        assert_bash_syntax(&path);
    }
}

/// Commands netlab runs that this host may lack, in a directory to put first in PATH:
/// `docker` (netlab execs into the containers with it) running podman with this
/// machine's options when the engine is podman, and `sudo` (the hosts' scripts run
/// under `sudo ip netns exec`; the test is root already) when there is none.
fn command_shims(dir: &Path, engine: &Engine) -> PathBuf {
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

#[test]
fn netlab_ldp_lab_in_vmpls_frr_containers_passes_netlab_initial_and_validate() {
    if !is_root() {
        eprintln!("skipped: needs root (containers, veths, namespaces)");
        return;
    }
    let started = Instant::now();
    let netlab = NetlabLab::new("netlab-up", &ldp_topology());
    // netlab's containers are clab-NAME-NODE: a name of this run's own
    let name = format!("vmnl-t{}", std::process::id());
    netlab.netlab(&["create", "-s", &format!("name={name}")], None).unwrap_or_else(|e| panic!("{e}"));

    let engine = Engine::pick().expect("a container engine");
    let image = Image::build(&engine).expect("building the image");
    let topo = parse_clab(&read(&netlab.dir.join("clab.yml"))).expect("netlab's clab.yml");
    assert_eq!(topo.name, name);
    let lab = ClabLab::deploy_as(&engine, topo, &netlab.dir, "vmpls-frr:latest", &image.tag, name)
        .expect("deploying netlab's lab");
    let shims = command_shims(netlab.scratch.path(), &engine);
    let router_logs = || {
        let logs: Vec<String> =
            ["r1", "r2", "r3"].iter().map(|r| format!("--- {r}:\n{}", lab.log_tail(r, 30))).collect();
        logs.join("\n")
    };

    let initial = netlab.netlab(&["initial"], Some(&shims));
    let initial = initial.unwrap_or_else(|e| panic!("netlab initial: {e}\n{}", router_logs()));
    println!("{initial}");
    for node in ["r1", "r2", "r3"] {
        let line = initial.lines().find(|l| l.starts_with(node) && l.contains("Script:"));
        assert_eq!(
            line.map(|l| l.split_whitespace().last()),
            Some(Some("initial,ospf,bgp,mpls")),
            "{initial}"
        );
    }

    let validate = netlab.netlab(&["validate"], Some(&shims));
    let validate = validate.unwrap_or_else(|e| panic!("netlab validate: {e}\n{}", router_logs()));
    println!("{validate}");
    assert!(validate.contains("Tests passed: 6"), "{validate}");
    for r in ["r1", "r2", "r3"] {
        lab.check_running(r).unwrap();
        // netlab's own FRR templates would have turned it on: vmpls forwards
        let forwarding = lab
            .exec(
                r,
                &[
                    "sh",
                    "-c",
                    "cat /proc/sys/net/ipv4/conf/*/forwarding /proc/sys/net/ipv6/conf/*/forwarding",
                ],
            )
            .unwrap();
        assert!(forwarding.lines().all(|l| l.trim() == "0"), "{r}'s kernel forwards: {forwarding}");
    }
    // h1's pings to h2 crossed r2 labelled
    let switched: u64 = lab.vmpls_stats("r2").unwrap().labels.iter().map(|l| l.packets).sum();
    assert!(switched > 0, "r2's vmpls switched no labelled packet");
    eprintln!("netlab initial and validate passed, {:.0} s in all", started.elapsed().as_secs_f64());
}
