//! vmpls in FRR mode under FRRouting 10.3 (Debian trixie's, netlab's FRR), while the
//! host has bookworm's 8.4: the seed topology ce1 -- pe1 -- p -- pe2 -- ce2 with OSPF +
//! LDP, every FRR daemon chrooted into a trixie root (`scripts/make-frr-root`, cached
//! under `target/frr-roots/`) inside the router's namespace, zebra 10.3 with the module
//! built for it (`scripts/build-zebra-module --root`), and the host's `vmpls run` with
//! `[frr]` in the same namespace.
//!
//! - LDP sessions come up, zebra 10.3's LSPs and LDP-labelled routes reach vmpls over
//!   FPM and every vmpls table equals FRR's `show mpls table` / `show ip route`;
//! - a ping ce1 -> ce2 crosses the LSP (pe1 pushes p's label, p pops it);
//! - vmpls restarted: zebra 10.3 reconnects and its replay gives the same tables;
//! - a labelled static route set through vtysh (mgmtd -> staticd in FRR 10) reaches
//!   pe1's vmpls and leaves it when removed.
//!
//! Needs root (skipped otherwise). The first run makes the root (mmdebstrap, about
//! 40 s) and builds the module in it (about 20 s: deb-src download and compile).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use vmpls_lab::frr_lab::{FrrLab, LabelHop, ROUTER_NAMES, RouteHop, ce1_addr, ce2_addr, expected_lsps};
use vmpls_lab::ping::{PingOptions, ping};

const BIN: &str = env!("CARGO_BIN_EXE_vmpls");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs one of the repository's scripts and returns the path it prints last.
fn script_path(args: &[&str]) -> PathBuf {
    let out = Command::new(repo().join(args[0])).args(&args[1..]).current_dir(repo()).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path =
        PathBuf::from(stdout.lines().last().unwrap_or_else(|| panic!("{args:?} printed nothing")).trim());
    assert!(path.exists(), "{args:?} printed {path:?}, which does not exist");
    path
}

/// Removes the work directory at the end, also after a panic (the lab itself, dropped
/// first, stops the daemons and removes the namespaces).
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("logs kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Polls `f` every 100 ms until it holds, for at most `timeout`.
fn until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
    start.elapsed()
}

fn step(t0: Instant, what: &str) {
    eprintln!("[{:6.2} s] {what}", t0.elapsed().as_secs_f64());
}

#[test]
fn ldp_lsps_from_zebra_10_reach_vmpls() {
    if !vmpls_sys::process::is_root() {
        eprintln!("skipping frr10_ldp: needs root (chroot, network namespaces, FRR daemons)");
        return;
    }
    let t0 = Instant::now();
    let root = script_path(&["scripts/make-frr-root"]);
    step(t0, &format!("FRR 10 root {}", root.display()));
    let module = script_path(&["scripts/build-zebra-module", "--root", &root.to_string_lossy()]);
    step(t0, &format!("module {}", module.display()));

    let t0 = Instant::now();
    // The daemons see the work directory: inside the root.
    let work = WorkDir(root.join(format!("run/vmpls/frr10-ldp-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&work.0);
    std::fs::create_dir_all(&work.0).unwrap();
    let mut lab = FrrLab::build(Path::new(BIN), &work.0).unwrap();
    lab.start_vmpls(false).unwrap();
    lab.start_frr_from(Some(&root), &module).unwrap();
    let version = lab.frr("p").unwrap().vtysh(&["show version"]).unwrap();
    assert!(version.contains("FRRouting 10."), "not FRR 10: {version}");
    let took = lab.wait_synced(Duration::from_secs(60)).unwrap();
    step(t0, &format!("OSPF, LDP and vmpls in sync {:.2} s after FRR 10 started", took.as_secs_f64()));

    for r in ROUTER_NAMES {
        let frr = lab.frr(r).unwrap();
        assert_eq!(frr.ldp_sessions_operational().unwrap(), frr.options().ldp.len(), "{r}: LDP sessions");
        assert_eq!(frr.config_errors(), Vec::<String>::new(), "{r} refused config lines");
        let (f, v) = (lab.frr_label_table(r).unwrap(), lab.vmpls_label_table(r).unwrap());
        assert_eq!(f.len(), expected_lsps(r).unwrap(), "{r}: FRR's LSPs {f:#?}");
        assert_eq!(f, v, "{r}: label tables");
        assert_eq!(lab.frr_routes(r).unwrap(), lab.vmpls_routes(r).unwrap(), "{r}: routes");
        eprintln!("    {r}: {} LSPs in FRR 10 and vmpls: {v:?}", f.len());
    }
    // pe1 pushes a real label toward p for ce2's subnet; p pops it toward pe2.
    let pe1 = lab.vmpls_routes("pe1").unwrap();
    let to_ce2 = &pe1["198.18.2.0/24"];
    let label = to_ce2.iter().next().and_then(|h| h.labels.first().copied());
    let label = label.unwrap_or_else(|| panic!("pe1's route to ce2 has no label: {to_ce2:?}"));
    assert!(label >= 16, "{to_ce2:?}");
    let php = LabelHop {
        out_labels: vec![],
        via: Some("198.18.20.2".parse::<IpAddr>().unwrap()),
        interface: Some("p-pe2".into()),
    };
    assert_eq!(lab.vmpls_label_table("p").unwrap()[&label], [php].into(), "p pops pe1's label");
    step(t0, "tables equal");

    let ce1 = lab.topology().ns("ce1").unwrap().to_string();
    let r = ping(&ce1, ce2_addr(), &PingOptions::default()).unwrap();
    assert_eq!(r.received, r.sent, "ping ce1 -> ce2 over the LSP: {r:?}");
    let ce2 = lab.topology().ns("ce2").unwrap().to_string();
    let r = ping(&ce2, ce1_addr(), &PingOptions::default()).unwrap();
    assert_eq!(r.received, r.sent, "ping ce2 -> ce1 over the LSP: {r:?}");
    step(t0, "pings crossed the LSPs");

    // A new vmpls: zebra 10.3 connects again and replays its tables.
    lab.start_vmpls(false).unwrap();
    let took = lab.wait_synced(Duration::from_secs(30)).unwrap();
    for r in ROUTER_NAMES {
        assert_eq!(
            lab.frr_counter(r, "connections").unwrap(),
            1,
            "{r}: zebra connected to the new vmpls once"
        );
    }
    let r = ping(&ce1, ce2_addr(), &PingOptions::default()).unwrap();
    assert_eq!(r.received, r.sent, "ping ce1 -> ce2 after vmpls restarted: {r:?}");
    step(t0, &format!("vmpls restarted: zebra's replay in sync after {:.2} s", took.as_secs_f64()));

    // staticd through mgmtd: a labelled static route in and out of pe1's vmpls.
    let pe1 = lab.frr("pe1").unwrap();
    pe1.vtysh(&["configure terminal", "ip route 198.18.77.0/24 198.18.10.2 label 7000"]).unwrap();
    let want = RouteHop {
        labels: vec![7000],
        via: Some("198.18.10.2".parse::<IpAddr>().unwrap()),
        interface: Some("pe1-p".into()),
    };
    let t = until("198.18.77.0/24 in pe1's vmpls", Duration::from_secs(10), || {
        lab.vmpls_routes("pe1").ok().and_then(|r| r.get("198.18.77.0/24").cloned())
            == Some([want.clone()].into())
    });
    pe1.vtysh(&["configure terminal", "no ip route 198.18.77.0/24 198.18.10.2 label 7000"]).unwrap();
    until("198.18.77.0/24 gone from pe1's vmpls", Duration::from_secs(10), || {
        lab.vmpls_routes("pe1").is_ok_and(|r| !r.contains_key("198.18.77.0/24"))
    });
    step(t0, &format!("labelled static route in pe1's vmpls after {:.2} s, and out", t.as_secs_f64()));
    lab.cleanup().unwrap();
    step(t0, "done");
}
