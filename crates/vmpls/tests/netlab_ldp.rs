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
//! - netlab refuses what the device does not declare (the vrf module).
//!
//! Not yet: bringing the lab up in containers and running netlab's checks (OSPF and LDP
//! neighbours, ping h1 -> h2) needs the container wiring of the image work.
//!
//! netlab comes from `VMPLS_NETLAB`, else `target/netlab-venv/bin/netlab`, installed
//! there from PyPI (networklab, the version below) when missing.
use std::path::{Path, PathBuf};
use std::process::Command;

/// The netlab release the templates in `netlab/templates` wrap.
const NETLAB_VERSION: &str = "26.10";

/// The LDP lab users get (`netlab/examples/ldp.yml`): h1 -- r1 -- r2 -- r3 -- h2.
fn ldp_topology() -> String {
    read(&repo().join("netlab/examples/ldp.yml"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A directory of this test's own, removed when the test ends, also on failure.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("vmpls-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test's directory");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() { Ok(text) } else { Err(format!("{cmd:?} exited with {}:\n{text}", out.status)) }
}

/// netlab's command, installed into `target/netlab-venv` (a Python venv) when missing.
fn netlab() -> PathBuf {
    if let Some(path) = std::env::var_os("VMPLS_NETLAB") {
        return PathBuf::from(path);
    }
    let venv = repo().join("target/netlab-venv");
    let netlab = venv.join("bin/netlab");
    if !netlab.exists() {
        run(Command::new("python3").arg("-m").arg("venv").arg(&venv)).expect("python3 -m venv");
        run(Command::new(venv.join("bin/pip"))
            .args(["install", "-q"])
            .arg(format!("networklab=={NETLAB_VERSION}")))
        .expect("pip install networklab");
    }
    netlab
}

/// Runs netlab in `lab` with `home` as the user's home (its ~/.netlab.yml and ~/.netlab).
fn netlab_in(home: &Path, lab: &Path, args: &[&str]) -> Result<String, String> {
    run(Command::new(netlab()).args(args).current_dir(lab).env("HOME", home).env_remove("NETLAB_DEVICE"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
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

fn installed_home(scratch: &Scratch) -> PathBuf {
    let home = scratch.0.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let said = run(Command::new(repo().join("netlab/install")).env("HOME", &home)).expect("netlab/install");
    assert!(said.contains(".netlab.yml includes"), "{said}");
    home
}

#[test]
fn netlab_creates_an_ldp_lab_of_vmpls_routers_without_kernel_forwarding_or_kernel_mpls() {
    let scratch = Scratch::new("netlab-ldp");
    let home = installed_home(&scratch);
    let lab = scratch.0.join("lab");
    std::fs::create_dir_all(&lab).unwrap();
    std::fs::write(lab.join("topology.yml"), ldp_topology()).unwrap();

    let created = netlab_in(&home, &lab, &["create"]).unwrap_or_else(|e| panic!("{e}"));
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
        run(Command::new("bash").arg("-n").arg(files.join("initial")))
            .unwrap_or_else(|e| panic!("{r}'s initial is not valid bash: {e}"));

        let mpls = read(&files.join("mpls"));
        let lines = active_lines(&mpls);
        for line in &lines {
            assert!(
                !line.starts_with("sysctl") && !line.starts_with("modprobe"),
                "{r}'s mpls script needs kernel MPLS: {line}"
            );
        }
        assert!(lines.contains(&"mpls ldp"), "{r}'s mpls script:\n{mpls}");
        run(Command::new("bash").arg("-n").arg(files.join("mpls")))
            .unwrap_or_else(|e| panic!("{r}'s mpls is not valid bash: {e}"));
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
    let scratch = Scratch::new("netlab-refuse");
    let home = installed_home(&scratch);
    let lab = scratch.0.join("lab");
    std::fs::create_dir_all(&lab).unwrap();
    std::fs::write(
        lab.join("topology.yml"),
        "provider: clab\ndefaults.device: vmpls\nmodule: [ ospf, vrf ]\n\
         vrfs: { red: }\nnodes: { r1: { vrfs: { red: } }, r2: }\n\
         links: [ r1-r2, { r1: { vrf: red } } ]\n",
    )
    .unwrap();
    let refused = netlab_in(&home, &lab, &["create"]).expect_err("netlab create of a VRF lab");
    assert!(refused.contains("Device type vmpls (node r1) does not support module vrf"), "{refused}");
}

#[test]
fn netlab_creates_ospf_segment_routing_without_kernel_mpls() {
    let scratch = Scratch::new("netlab-sr");
    let home = installed_home(&scratch);
    let lab = scratch.0.join("lab");
    std::fs::create_dir_all(&lab).unwrap();
    let ldp = ldp_topology();
    let modules = "module: [ ospf, bgp, mpls ]\nbgp.as: 65000\nmpls.ldp: true\n";
    assert!(ldp.contains(modules), "netlab/examples/ldp.yml:\n{ldp}");
    let sr = ldp.replace(modules, "module: [ ospf, sr ]\nsr.protocol: [ ospfv2 ]\n");
    std::fs::write(lab.join("topology.yml"), sr).unwrap();
    netlab_in(&home, &lab, &["create"]).unwrap_or_else(|e| panic!("{e}"));

    for r in ["r1", "r2", "r3"] {
        let path = lab.join("node_files").join(r).join("sr");
        let script = read(&path);
        let lines = active_lines(&script);
        for line in &lines {
            assert!(!line.starts_with("sysctl"), "{r}'s sr script needs kernel MPLS: {line}");
        }
        assert!(lines.contains(&"segment-routing on"), "{r}'s sr script:\n{script}");
        run(Command::new("bash").arg("-n").arg(&path))
            .unwrap_or_else(|e| panic!("{r}'s sr is not valid bash: {e}"));
    }
}
