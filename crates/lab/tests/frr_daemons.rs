//! FRR daemons in lab namespaces: pe1 -- p -- pe2 with the seed lab's FRR configs
//! (OSPF + LDP), converging, surviving a zebra restart, and leaving nothing behind.
//! Needs root (skipped with a message otherwise) and installs Debian's `frr` if missing.
//!
//! zebra runs without our module unless `VMPLS_ZEBRA_MODULE` names it (the .so that
//! `scripts/build-zebra-module` prints); with it the test also expects LSPs in
//! `show mpls table` and labels on pe1's route to ce2's subnet.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use vmpls_lab::IpPrefix;
use vmpls_lab::frr::{self, Daemon, FrrOptions, FrrRouter};
use vmpls_lab::topology::Topology;

fn is_root() -> bool {
    vmpls_sys::process::is_root()
}

fn p(s: &str) -> IpPrefix {
    s.parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Removes the routers' directory at the end, also after a panic.
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// pe1 -- p -- pe2 with the seed lab's core links and addresses. The customer-facing
/// interfaces (pe1-ce1, pe2-ce2) are veth pairs inside their PE, so the CE subnets exist
/// (and OSPF advertises them) without two more namespaces.
fn line() -> Topology {
    let mut t = Topology::new();
    for h in ["pe1", "p", "pe2"] {
        t.add_host(h).unwrap();
    }
    t.add_link("pe1", "pe1-p", "p", "p-pe1", 1500).unwrap();
    t.add_link("p", "p-pe2", "pe2", "pe2-p", 1500).unwrap();
    t.add_link("pe1", "pe1-ce1", "pe1", "ce1-pe1", 1500).unwrap();
    t.add_link("pe2", "pe2-ce2", "pe2", "ce2-pe2", 1500).unwrap();
    for (host, ifname, addr) in [
        ("pe1", "pe1-ce1", "198.18.1.1/24"),
        ("pe1", "pe1-p", "198.18.10.1/24"),
        ("p", "p-pe1", "198.18.10.2/24"),
        ("p", "p-pe2", "198.18.20.1/24"),
        ("pe2", "pe2-p", "198.18.20.2/24"),
        ("pe2", "pe2-ce2", "198.18.2.1/24"),
    ] {
        t.add_address(host, ifname, p(addr)).unwrap();
    }
    for h in ["pe1", "p", "pe2"] {
        t.set_forwarding(h, true).unwrap();
    }
    t
}

/// Waits until `router` has a selected OSPF route to `prefix`.
fn wait_ospf_route(router: &FrrRouter, prefix: IpPrefix, timeout: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let routes = router.ip_routes().unwrap();
        if routes.iter().any(|r| r.prefix == prefix && r.protocol == "ospf" && r.selected) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < timeout,
            "{}: no OSPF route to {prefix} after {timeout:?}: {routes:?}",
            router.options().hostname
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn ospf_and_ldp_converge_survive_a_zebra_restart_and_leave_nothing_behind() {
    if !is_root() {
        eprintln!("skipping frr_daemons: needs root (network namespaces, FRR daemons)");
        return;
    }
    frr::ensure_frr_installed().unwrap();
    let module = std::env::var_os("VMPLS_ZEBRA_MODULE").map(PathBuf::from);
    let work = WorkDir(std::env::temp_dir().join(format!("vmpls-frr-test-{}", std::process::id())));
    let t = line();

    let started = Instant::now();
    let mut routers: Vec<FrrRouter> = ["pe1", "p", "pe2"]
        .into_iter()
        .map(|name| {
            let mut o = FrrOptions::seed(name).unwrap();
            o.zebra_module = module.clone();
            FrrRouter::start(&t, name, &work.0, o).unwrap()
        })
        .collect();
    assert!(Path::new(&work.0).join("p/zebra.log").exists());
    for r in &routers {
        r.wait_converged(Duration::from_secs(30)).unwrap();
    }
    eprintln!("OSPF full and LDP operational on all three routers {:?} after start", started.elapsed());

    for r in &routers {
        assert_eq!(r.config_errors(), Vec::<String>::new(), "{} refused config lines", r.options().hostname);
    }

    let [pe1, p_router, pe2] = &routers[..] else { unreachable!() };
    assert_eq!(p_router.ospf_full_neighbors().unwrap(), 2);
    assert_eq!(p_router.ldp_sessions_operational().unwrap(), 2);
    assert_eq!(pe1.ospf_full_neighbors().unwrap(), 1);
    assert_eq!(pe2.ldp_sessions_operational().unwrap(), 1);

    // pe1 reaches ce2's subnet over OSPF, and p (its LDP next hop) gave it a label for it.
    let ce2 = p("198.18.2.0/24");
    wait_ospf_route(pe1, ce2, Duration::from_secs(10));
    let routes = pe1.ip_routes().unwrap();
    let to_ce2 = routes.iter().find(|r| r.prefix == ce2 && r.protocol == "ospf").unwrap();
    assert_eq!(to_ce2.nexthops[0].via, Some(ip("198.18.10.2")), "{to_ce2:?}");
    assert_eq!(to_ce2.nexthops[0].interface.as_deref(), Some("pe1-p"));
    let bindings = pe1.ldp_bindings().unwrap();
    let b = bindings
        .iter()
        .find(|b| b.prefix == ce2)
        .unwrap_or_else(|| panic!("no binding for {ce2}: {bindings:?}"));
    assert_eq!(b.neighbor.to_string(), "198.18.255.2");
    assert!(b.in_use, "{b:?}");
    assert!(matches!(b.remote_label, Some(l) if l >= 16), "p must bind a real label to ce2's subnet: {b:?}");
    // p: pe2 gives implicit null for its own subnet and loopback (penultimate-hop pop).
    let p_bindings = p_router.ldp_bindings().unwrap();
    for fec in ["198.18.2.0/24", "198.18.255.3/32"] {
        let b = p_bindings.iter().find(|b| b.prefix == p(fec) && b.in_use);
        assert_eq!(b.and_then(|b| b.remote_label), Some(3), "{fec}: {p_bindings:?}");
    }
    if module.is_some() {
        // p pops toward pe2 (implicit null) for pe2's FECs and swaps toward pe1.
        let table = p_router.mpls_table().unwrap();
        let nexthops: Vec<_> = table.values().flat_map(|l| &l.nexthops).collect();
        let php = |via: &str, dev: &str| {
            nexthops.iter().any(|n| {
                // FRR 8.4 shows LDP's next hops without an interface (address only).
                n.kind == "LDP"
                    && n.out_labels == [3]
                    && n.via == Some(ip(via))
                    && n.interface.as_deref().is_none_or(|i| i == dev)
            })
        };
        assert!(php("198.18.20.2", "p-pe2") && php("198.18.10.1", "pe1-p"), "{table:#?}");
        let routes = pe1.ip_routes().unwrap();
        let to_ce2 = routes.iter().find(|r| r.prefix == ce2 && r.protocol == "ospf").unwrap();
        assert!(!to_ce2.nexthops[0].labels.is_empty(), "pe1 pushes a label toward ce2: {to_ce2:?}");
    } else {
        eprintln!("no VMPLS_ZEBRA_MODULE: zebra's MPLS is off, show mpls table stays empty");
    }

    // zebra on p restarts: its clients reconnect and OSPF, LDP and the routes come back.
    let old_zebra = routers[1].pid(Daemon::Zebra).unwrap();
    let restarted = Instant::now();
    routers[1].restart_zebra().unwrap();
    let new_zebra = routers[1].pid(Daemon::Zebra).unwrap();
    assert_ne!(old_zebra, new_zebra);
    assert!(!frr::process_running(old_zebra));
    for r in &routers {
        r.wait_converged(Duration::from_secs(20)).unwrap();
    }
    wait_ospf_route(&routers[1], p("198.18.255.3/32"), Duration::from_secs(15));
    wait_ospf_route(&routers[1], p("198.18.1.0/24"), Duration::from_secs(15));
    wait_ospf_route(&routers[0], ce2, Duration::from_secs(15));
    eprintln!("after restarting p's zebra, OSPF, LDP and routes back after {:?}", restarted.elapsed());

    // Configuration through vtysh reaches the running daemons.
    routers[1].vtysh(&["configure terminal", "ip route 198.18.99.0/24 198.18.20.2"]).unwrap();
    let routes = routers[1].ip_routes().unwrap();
    assert!(routes.iter().any(|r| r.prefix == p("198.18.99.0/24") && r.protocol == "static"), "{routes:?}");
    assert!(routers[1].vtysh(&["show no-such-thing"]).is_err());

    let pids: Vec<u32> = routers.iter().flat_map(FrrRouter::pids).collect();
    // zebra, staticd, ospfd, ldpd and ldpd's two helpers on each router.
    assert_eq!(pids.len(), 3 * 6, "{pids:?}");
    assert!(pids.iter().all(|&pid| frr::process_running(pid)));
    drop(routers);
    let left: Vec<u32> = pids.into_iter().filter(|&pid| frr::process_running(pid)).collect();
    assert!(left.is_empty(), "FRR processes left after drop: {left:?}");
    eprintln!("whole test: {:?}", started.elapsed());
}
