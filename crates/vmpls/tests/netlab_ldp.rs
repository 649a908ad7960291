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
//! - netlab refuses what the device does not declare (VXLAN, OSPF inside a VRF);
//! - the lab comes up: its containers (the vmpls-frr image built for the test) wired as
//!   containerlab would (`container_common`), then netlab itself configures them
//!   (`netlab initial`) and runs the lab's checks (`netlab validate`: OSPF adjacencies,
//!   LDP and IBGP sessions, ping h1 -> h2), through podman where docker is not there;
//!   the routers' kernels do not forward and r2's vmpls switched the pings by label.
//!
//! netlab comes from `VMPLS_NETLAB`, else `target/netlab-venv/bin/netlab`, installed
//! there from PyPI (networklab, the version `netlab_common` pins) when missing. The lab
//! needs root (skipped otherwise) and docker or podman.
mod container_common;
mod netlab_common;

use std::time::Instant;

use container_common::{Engine, Image, is_root, repo};
use netlab_common::{
    NetlabLab, active_lines, assert_bash_syntax, assert_kernel_does_not_forward, clab_node, command_shims,
    create_and_deploy, logs_of, read,
};

/// The LDP lab users get (`netlab/examples/ldp.yml`): h1 -- r1 -- r2 -- r3 -- h2.
fn ldp_topology() -> String {
    read(&repo().join("netlab/examples/ldp.yml"))
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
        "provider: clab\ndefaults.device: vmpls\nmodule: [ ospf, vlan, vxlan ]\n\
         vlans: { red: { vni: 100 } }\nnodes: [ r1, r2 ]\n\
         links: [ r1-r2, { r1: { vlan.access: red } } ]\n",
    );
    let refused = netlab.netlab(&["create"], None).expect_err("netlab create of a VXLAN lab");
    assert!(refused.contains("Device type vmpls (node r1) does not support module vxlan"), "{refused}");

    // VRFs are network namespaces with BGP toward the VPN; OSPF inside a VRF is not offered
    let netlab = NetlabLab::new(
        "netlab-refuse-vrf-ospf",
        "provider: clab\ndefaults.device: vmpls\nmodule: [ ospf, vrf ]\nvrfs: { red: { ospf: {} } }\n\
         nodes: [ r1, r2 ]\nlinks: [ r1-r2, { r1: { vrf: red }, r2: { vrf: red } } ]\n",
    );
    let refused = netlab.netlab(&["create"], None).expect_err("netlab create of OSPF in a VRF");
    assert!(refused.contains("Device vmpls (node r1) does not support ospfv2 in VRFs"), "{refused}");
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

#[test]
fn netlab_ldp_lab_in_vmpls_frr_containers_passes_netlab_initial_and_validate() {
    if !is_root() {
        eprintln!("skipped: needs root (containers, veths, namespaces)");
        return;
    }
    let started = Instant::now();
    let netlab = NetlabLab::new("netlab-up", &ldp_topology());
    let engine = Engine::pick().expect("a container engine");
    let image = Image::build(&engine).expect("building the image");
    let lab = create_and_deploy(&netlab, &engine, &image.tag, "ldp");
    let shims = command_shims(netlab.scratch.path(), &engine);
    let router_logs = || logs_of(&lab, &["r1", "r2", "r3"]);

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
        assert_kernel_does_not_forward(&lab, r);
    }
    // h1's pings to h2 crossed r2 labelled
    let switched: u64 = lab.vmpls_stats("r2").unwrap().labels.iter().map(|l| l.packets).sum();
    assert!(switched > 0, "r2's vmpls switched no labelled packet");
    eprintln!("netlab initial and validate passed, {:.0} s in all", started.elapsed().as_secs_f64());
}
