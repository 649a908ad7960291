//! The netlab device `vmpls` as BGP/MPLS VPN PEs: `netlab create` of the L3VPN lab
//! `netlab/examples/vpn.yml` (pe1 -- p -- pe2, OSPF + LDP + IBGP VPNv4 in the core,
//! customers red: h1 at pe1, h2 at pe2, and blue: h3 at pe1, h4 at pe2, `module: [ospf,
//! bgp, mpls, vrf]`, `mpls.vpn: true`, `device: vmpls`) gives files a vmpls-frr
//! container runs on a kernel without VRF devices:
//!
//! - each PE's /etc/vmpls/vrfs (`templates/vmpls/vrfs.j2`, bound by clab.yml) names its
//!   VRFs' interfaces, from which the image's entrypoint makes a network namespace per
//!   VRF when the container starts; p's names none;
//! - the initial script configures those interfaces in their VRF's namespace (`ip
//!   netns exec VRF ...`, vtysh `interface IF vrf VRF`), keeps forwarding off;
//! - the vrf script makes no kernel VRF and enslaves nothing, but checks the
//!   namespaces, and gives FRR netlab's BGP VRF config as it is (rd, rt, `label vpn
//!   export auto`, import/export vpn); the mpls script activates VPNv4;
//! - the lab comes up: the containers (the vmpls-frr image built for the test) wired as
//!   containerlab would (`container_common`), then `netlab initial` and `netlab
//!   validate`: LDP, the VPNv4 session, each VRF's remote prefix in BGP, pings h1 -> h2
//!   (red) and h3 -> h4 (blue), and no ping from red to blue nor from blue to red; the
//!   routers' kernels forward in no namespace, vmpls on each PE has both VRFs with
//!   their interfaces, and p's vmpls switched the pings by label;
//! - bad input: an /etc/vmpls/vrfs the entrypoint cannot read as NAME=INTERFACE words, or
//!   naming an interface that is no data interface, stops the container (exit 1) saying
//!   so.
//!
//! The image is built on build-image's default suite (trixie, FRR 10.3) unless
//! `VMPLS_IMAGE_SUITE` names another; the checks in vpn.yml are ones FRR 8.4 (bookworm)
//! answers too. netlab as in `netlab_common`. Needs root (skipped otherwise) and docker
//! or podman.
mod container_common;
mod netlab_common;

use std::collections::BTreeMap;
use std::time::Instant;

use container_common::{Engine, Image, is_root, repo};
use netlab_common::{
    NetlabLab, active_lines, assert_bash_syntax, assert_kernel_does_not_forward, clab_node, command_shims,
    create_and_deploy, logs_of, read,
};
use vmpls_control::api;

const PES: [&str; 2] = ["pe1", "pe2"];
const ROUTERS: [&str; 3] = ["pe1", "p", "pe2"];
/// Each PE's customer-facing interfaces (netlab numbers them in link order).
const VRF_INTERFACES: [(&str, &str); 2] = [("red", "eth2"), ("blue", "eth3")];

/// The L3VPN lab users get (`netlab/examples/vpn.yml`).
fn vpn_topology() -> String {
    read(&repo().join("netlab/examples/vpn.yml"))
}

#[test]
fn netlab_creates_an_l3vpn_lab_whose_vrfs_are_namespaces_not_kernel_vrfs() {
    let netlab = NetlabLab::new("netlab-vpn", &vpn_topology());
    let lab = &netlab.dir;
    let created = netlab.netlab(&["create"], None).unwrap_or_else(|e| panic!("{e}"));
    println!("{created}");
    let clab = read(&lab.join("clab.yml"));

    for r in ROUTERS {
        let node = clab_node(&clab, r);
        let bind = format!("node_files/{r}/vrfs:/etc/vmpls/vrfs");
        assert!(node.contains(&bind), "{r} lacks the bind {bind}:\n{node}");
        let vrfs = read(&lab.join("node_files").join(r).join("vrfs"));
        let expected: &[&str] = if r == "p" { &[] } else { &["red=eth2", "blue=eth3"] };
        assert_eq!(active_lines(&vrfs), expected, "{r}'s /etc/vmpls/vrfs:\n{vrfs}");
    }

    for pe in PES {
        let files = lab.join("node_files").join(pe);
        let initial = read(&files.join("initial"));
        let lines = active_lines(&initial);
        for (vrf, intf) in VRF_INTERFACES {
            // vtysh: the interface in its VRF, where zebra -n finds it
            let vtysh = format!("interface {intf} vrf {vrf}");
            assert!(lines.contains(&vtysh.as_str()), "{pe}'s initial lacks {vtysh:?}:\n{initial}");
            assert!(!lines.contains(&format!("interface {intf}").as_str()), "{pe}'s initial:\n{initial}");
            // shell commands naming it run in the VRF's namespace
            let naming: Vec<&&str> = lines
                .iter()
                .filter(|l| l.split(['/', ' ']).any(|w| w == intf) && !l.starts_with("interface "))
                .collect();
            assert!(!naming.is_empty(), "{pe}'s initial never sets up {intf}:\n{initial}");
            for line in naming {
                assert!(line.starts_with(&format!("ip netns exec {vrf} ")), "{pe}'s initial: {line}");
            }
        }
        for line in &lines {
            assert!(!(line.ends_with("forward=1") || line.ends_with("forwarding=1")), "{pe}: {line}");
            assert!(*line != "ip forwarding" && *line != "ipv6 forwarding", "{pe}: {line}");
        }
        assert!(lines.contains(&"no ip forwarding"), "{pe}'s initial:\n{initial}");
        assert_bash_syntax(&files.join("initial"));

        let vrf = read(&files.join("vrf"));
        let lines = active_lines(&vrf);
        for line in &lines {
            assert!(!line.contains("type vrf") && !line.contains(" master "), "{pe}'s vrf script: {line}");
        }
        for want in [
            "[ ! -e /run/netns/red ]",
            "router bgp 65000 vrf red",
            "router bgp 65000 vrf blue",
            "label vpn export auto",
            "export vpn",
            "import vpn",
            "rd vpn export 65000:1",
            "rt vpn import 65000:1",
            "rt vpn export 65000:2",
        ] {
            assert!(lines.iter().any(|l| l.contains(want)), "{pe}'s vrf script lacks {want:?}:\n{vrf}");
        }
        assert_bash_syntax(&files.join("vrf"));

        let mpls = read(&files.join("mpls"));
        let lines = active_lines(&mpls);
        assert!(lines.contains(&"address-family ipv4 vpn"), "{pe}'s mpls script:\n{mpls}");
        // LDP only toward p, never on a customer's link
        let ldp: Vec<&str> = lines.iter().filter_map(|l| l.strip_prefix("interface ")).collect();
        assert_eq!(ldp, ["eth1"], "{pe}'s LDP interfaces:\n{mpls}");
        assert_bash_syntax(&files.join("mpls"));
    }
}

#[test]
fn netlab_l3vpn_lab_in_vmpls_frr_containers_passes_netlab_initial_and_validate() {
    if !is_root() {
        eprintln!("skipped: needs root (containers, veths, namespaces)");
        return;
    }
    let started = Instant::now();
    let netlab = NetlabLab::new("netlab-vpn-up", &vpn_topology());
    let engine = Engine::pick().expect("a container engine");
    let image = Image::build(&engine).expect("building the image");
    let lab = create_and_deploy(&netlab, &engine, &image.tag, "vpn");
    let shims = command_shims(netlab.scratch.path(), &engine);
    let router_logs = || logs_of(&lab, &ROUTERS);
    eprintln!("image built, lab created and deployed: {:.0} s", started.elapsed().as_secs_f64());

    let initial = netlab.netlab(&["initial"], Some(&shims));
    let initial = initial.unwrap_or_else(|e| panic!("netlab initial: {e}\n{}", router_logs()));
    println!("{initial}");
    for node in ROUTERS {
        let line = initial.lines().find(|l| l.starts_with(node) && l.contains("Script:"));
        // p's vrf script has no VRF to configure (netlab keeps the module on every node)
        assert_eq!(
            line.map(|l| l.split_whitespace().last()),
            Some(Some("initial,ospf,bgp,mpls,vrf")),
            "{initial}"
        );
    }

    eprintln!("netlab initial done: {:.0} s", started.elapsed().as_secs_f64());

    let validate = netlab.netlab(&["validate"], Some(&shims));
    let validate = validate.unwrap_or_else(|e| panic!("netlab validate: {e}\n{}", router_logs()));
    println!("{validate}");
    assert!(validate.contains("Tests passed: 8"), "{validate}");

    for r in ROUTERS {
        lab.check_running(r).unwrap();
        assert_kernel_does_not_forward(&lab, r);
    }
    for pe in PES {
        let shown: Vec<api::Vrf> =
            serde_json::from_value(lab.json(pe, &["vmpls", "-r", pe, "-j", "vrf", "show"]).unwrap()).unwrap();
        let shown: BTreeMap<&str, &api::Vrf> = shown.iter().map(|v| (v.name.as_str(), v)).collect();
        for (vrf, intf) in VRF_INTERFACES {
            let v = shown.get(vrf).unwrap_or_else(|| panic!("{pe}: vmpls has no VRF {vrf}: {shown:?}"));
            assert!(v.interfaces.iter().any(|i| i == intf), "{pe}: vmpls's VRF {vrf}: {v:?}");
        }
    }
    // the pings between the PEs crossed p labelled
    let switched: u64 = lab.vmpls_stats("p").unwrap().labels.iter().map(|l| l.packets).sum();
    assert!(switched > 0, "p's vmpls switched no labelled packet");
    eprintln!("netlab initial and validate passed, {:.0} s in all", started.elapsed().as_secs_f64());
    drop(lab);

    // Bad input: an /etc/vmpls/vrfs that is not NAME=INTERFACE words, and one naming an
    // interface the router does not have, stop the container saying so.
    for (content, said) in [
        ("red eth2\n", "/etc/vmpls/vrfs: \"red\": NAME=INTERFACE[,INTERFACE...] expected"),
        ("# a PE\nred=eth7\n", "/etc/vmpls/vrfs puts eth7 in VRF red, but eth7 is no data interface"),
    ] {
        let file = netlab.scratch.path().join("bad-vrfs");
        std::fs::write(&file, content).unwrap();
        let bind = format!("{}:/etc/vmpls/vrfs:ro", file.display());
        let run = ["--network", "none", "--privileged", "-e", "VMPLS_INTERFACES=lo", "-v", &bind, &image.tag];
        let (code, log) = engine.run_to_end(&run).unwrap();
        assert_eq!(code, Some(1), "{content:?}: {log}");
        assert!(log.contains(said), "{content:?}: {log}");
    }
}
