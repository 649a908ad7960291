//! vmpls in FRR mode under real FRR daemons: the seed topology ce1 -- pe1 -- p -- pe2 --
//! ce2 with OSPF + LDP (zebra with our module and `dplane_fpm_nl`) and one `vmpls run`
//! with `[frr]` per router ([`vmpls_lab::frr_lab::FrrLab`]).
//!
//! - LDP sessions come up and every vmpls label table equals FRR's `show mpls table`
//!   entry for entry (in label, out labels, next hop), the routes too (pe1 pushes p's
//!   label for ce2's subnet);
//! - the ports LDP runs on take labels, the customer's does not: frames from ce1 under
//!   a real label of pe1's are refused (`mpls_not_accepted`) and never reach ce2;
//! - the labels on the core links are the ones LDP bound (tshark on captures);
//! - `traceroute -e` shows every hop, p with the label it received;
//! - content-checked TCP flows cross the LSP with and without `fast-path = "tc"`;
//! - zebra restarted on p under a running flow: the flow completes intact and vmpls's
//!   table equals zebra's again afterwards, nothing stale;
//! - a static LSP (`mpls lsp`) and a labelled static route added and removed through
//!   vtysh appear in and leave vmpls's tables.
//!
//! Needs root (skipped otherwise); installs Debian's `frr` if missing. The zebra module
//! comes from `VMPLS_ZEBRA_MODULE`, else `scripts/build-zebra-module` builds it.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use vmpls_lab::IpPrefix;
use vmpls_lab::capture::{Capture, tshark_fields};
use vmpls_lab::frr::{self, Daemon};
use vmpls_lab::frr_lab::{FrrLab, LabelHop, ROUTER_NAMES, RouteHop, ce1_addr, ce2_addr, expected_lsps};
use vmpls_lab::inject::{self, ETHERTYPE_MPLS};
use vmpls_lab::ping::{PingOptions, ping};
use vmpls_lab::traffic::{FlowOptions, Limit};

const BIN: &str = env!("CARGO_BIN_EXE_vmpls");

fn is_root() -> bool {
    vmpls_sys::process::is_root()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pfx(s: &str) -> IpPrefix {
    s.parse().unwrap()
}

/// The zebra module: `VMPLS_ZEBRA_MODULE`, or what `scripts/build-zebra-module` builds.
fn zebra_module() -> PathBuf {
    if let Some(m) = std::env::var_os("VMPLS_ZEBRA_MODULE") {
        return m.into();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(root.join("scripts/build-zebra-module")).current_dir(&root).output().unwrap();
    assert!(out.status.success(), "scripts/build-zebra-module: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = PathBuf::from(stdout.lines().last().expect("build-zebra-module printed nothing").trim());
    assert!(path.is_file(), "build-zebra-module printed {path:?}, which is no file");
    path
}

/// Removes the work directory at the end, also after a panic (the lab itself, a field
/// dropped first, stops the daemons and removes the namespaces).
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

/// Polls `f` every 100 ms until it gives `Some`, for at most `timeout`.
fn until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> (T, Duration) {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return (v, start.elapsed());
        }
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn step(t0: Instant, what: &str) {
    eprintln!("[{:6.2} s] {what}", t0.elapsed().as_secs_f64());
}

/// The label `neighbor` bound to `fec` as `router` knows it (its remote label in use).
fn remote_label(lab: &FrrLab, router: &str, fec: &str) -> u32 {
    let bindings = lab.frr(router).unwrap().ldp_bindings().unwrap();
    let b = bindings.iter().find(|b| b.prefix == pfx(fec) && b.in_use);
    let b = b.unwrap_or_else(|| panic!("{router}: no binding in use for {fec}: {bindings:?}"));
    b.remote_label.unwrap_or_else(|| panic!("{router}: no remote label for {fec}: {b:?}"))
}

/// The label `router` itself bound to `fec`.
fn local_label(lab: &FrrLab, router: &str, fec: &str) -> u32 {
    let bindings = lab.frr(router).unwrap().ldp_bindings().unwrap();
    let b = bindings.iter().find(|b| b.prefix == pfx(fec) && b.local_label.is_some());
    b.and_then(|b| b.local_label)
        .unwrap_or_else(|| panic!("{router}: no local label for {fec}: {bindings:?}"))
}

/// The drop counter `name` of `router`'s vmpls (0 if it never counted).
fn drops(lab: &FrrLab, router: &str, name: &str) -> u64 {
    let stats = lab.vmpls_cli(router, &["stats"]).unwrap();
    let list = stats["drops"].as_array().cloned().unwrap_or_default();
    list.iter().filter(|c| c["name"] == name).filter_map(|c| c["value"].as_u64()).sum()
}

/// The echo requests `host`'s kernel received (`Icmp: InEchos`).
fn in_echos(lab: &FrrLab, host: &str) -> u64 {
    let snmp = lab
        .topology()
        .in_host(host, || std::fs::read_to_string("/proc/thread-self/net/snmp"))
        .unwrap()
        .unwrap();
    let mut icmp = snmp.lines().filter(|l| l.starts_with("Icmp:"));
    let (names, values) = (icmp.next().unwrap(), icmp.next().unwrap());
    let i = names.split_whitespace().position(|n| n == "InEchos").unwrap();
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

fn assert_in_sync(lab: &FrrLab, when: &str) {
    for r in ROUTER_NAMES {
        let d = lab.table_differences(r).unwrap();
        assert!(d.is_empty(), "{when}: vmpls on {r} differs from FRR:\n{}", d.join("\n"));
    }
}

/// A content-checked flow ce1 -> ce2 of `bytes`.
fn flow(lab: &FrrLab, bytes: u64, what: &str) {
    let opts = FlowOptions { limit: Limit::Bytes(bytes), ..FlowOptions::default() };
    let r =
        lab.run_flow(&opts, &mut |_| {}).unwrap_or_else(|e| panic!("{what}: {e:#}\n{}", lab.vmpls_logs(20)));
    assert!(r.content_ok && r.bytes_received == bytes, "{what}: {r:?}");
    eprintln!(
        "    {what}: {} MB intact, {:.2} Gbit/s, {} retransmits",
        bytes / 1_000_000,
        r.gbps,
        r.retransmits
    );
}

#[test]
fn vmpls_forwards_what_frr_computes() {
    if !is_root() {
        eprintln!("skipping frr_ldp: needs root (network namespaces, FRR daemons)");
        return;
    }
    frr::ensure_frr_installed().unwrap();
    let module = zebra_module();
    let t0 = Instant::now();
    let work = WorkDir(std::env::temp_dir().join(format!("vmpls-frr-ldp-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&work.0);
    std::fs::create_dir_all(&work.0).unwrap();
    let mut lab = FrrLab::build(Path::new(BIN), &work.0).unwrap();
    lab.start_vmpls(false).unwrap();
    lab.start_frr(&module).unwrap();
    let took = lab.wait_synced(Duration::from_secs(60)).unwrap();
    step(t0, &format!("OSPF, LDP and vmpls in sync {:.2} s after FRR started", took.as_secs_f64()));

    // --- LDP up; vmpls's tables are FRR's, entry for entry.
    for r in ROUTER_NAMES {
        let frr = lab.frr(r).unwrap();
        assert_eq!(frr.ldp_sessions_operational().unwrap(), frr.options().ldp.len(), "{r}: LDP sessions");
        assert_eq!(frr.config_errors(), Vec::<String>::new(), "{r} refused config lines");
        let (f, v) = (lab.frr_label_table(r).unwrap(), lab.vmpls_label_table(r).unwrap());
        assert_eq!(f.len(), expected_lsps(r).unwrap(), "{r}: FRR's LSPs {f:#?}");
        assert_eq!(f, v, "{r}: label tables");
        assert_eq!(lab.frr_routes(r).unwrap(), lab.vmpls_routes(r).unwrap(), "{r}: routes");
        let shown = lab.vmpls_cli(r, &["-f", "mpls", "route", "show"]).unwrap();
        for e in shown.as_array().unwrap() {
            assert_eq!(e["protocol"], "ldp", "{r}: {e}");
        }
        eprintln!("    {r}: {} LSPs in FRR and vmpls: {v:?}", f.len());
    }
    // pe1 pushes p's label for ce2's subnet toward p.
    let p_ce2 = remote_label(&lab, "pe1", "198.18.2.0/24");
    assert_eq!(p_ce2, local_label(&lab, "p", "198.18.2.0/24"));
    assert!(p_ce2 >= 16, "p binds a real label to ce2's subnet: {p_ce2}");
    let routes = lab.vmpls_routes("pe1").unwrap();
    let hop = RouteHop { labels: vec![p_ce2], via: Some(ip("198.18.10.2")), interface: Some("pe1-p".into()) };
    assert_eq!(routes["198.18.2.0/24"], [hop].into(), "pe1's route to ce2's subnet");
    let shown = lab.vmpls_cli("pe1", &["route", "show"]).unwrap();
    let to_ce2 = shown.as_array().unwrap().iter().find(|r| r["dst"] == "198.18.2.0/24").unwrap();
    eprintln!("    pe1: {to_ce2}");
    // p swaps it to pe2's implicit null (pops) toward pe2.
    let p_table = lab.vmpls_label_table("p").unwrap();
    let php = LabelHop { out_labels: vec![], via: Some(ip("198.18.20.2")), interface: Some("p-pe2".into()) };
    assert_eq!(p_table[&p_ce2], [php].into());
    let p_ce1 = remote_label(&lab, "pe2", "198.18.1.0/24");
    assert_eq!(p_ce1, local_label(&lab, "p", "198.18.1.0/24"));
    step(t0, "tables equal");

    // --- Which ports take labels in FRR mode: those LDP runs on (labels leave by them).
    // pe1's core port does; its customer port does not, in the default VRF though it is:
    // ce1 sending pe1's own label for ce2's subnet (which pe1 swaps toward p) is refused.
    let links = lab.vmpls_cli("pe1", &["link", "show"]).unwrap();
    let mpls_of =
        |port: &str| links.as_array().unwrap().iter().find(|l| l["name"] == port).unwrap()["mpls"].clone();
    assert_eq!((mpls_of("core"), mpls_of("ce1")), (true.into(), false.into()), "pe1's ports: {links}");
    let pe1_ce2 = local_label(&lab, "pe1", "198.18.2.0/24");
    let ce1_ns = lab.topology().ns("ce1").unwrap().to_string();
    let ce1_mac = inject::interface_mac(&ce1_ns, "ce1-pe1").unwrap();
    let pe1_mac = inject::interface_mac(lab.topology().ns("pe1").unwrap(), "pe1-ce1").unwrap();
    let echo = inject::icmpv4(8, 0, [0x12, 0x34, 0, 1], b"labelled by a customer");
    let (src, dst) = (Ipv4Addr::new(198, 18, 1, 2), Ipv4Addr::new(198, 18, 2, 2));
    let mut payload = inject::mpls_entry(pe1_ce2, 0, true, 64).to_vec();
    payload.extend_from_slice(&inject::ipv4_packet(src, dst, 64, 1, 7, 0, &echo));
    let frame = inject::ethernet(pe1_mac, ce1_mac, ETHERTYPE_MPLS, &payload);
    const FRAMES: u64 = 5;
    let refused_before = drops(&lab, "pe1", "mpls_not_accepted");
    let echos_before = in_echos(&lab, "ce2");
    inject::send_frames(&ce1_ns, "ce1-pe1", &vec![frame; FRAMES as usize]).unwrap();
    let (refused, _) = until("pe1 refusing ce1's labelled frames", Duration::from_secs(5), || {
        let n = drops(&lab, "pe1", "mpls_not_accepted") - refused_before;
        (n >= FRAMES).then_some(n)
    });
    assert_eq!(refused, FRAMES);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(in_echos(&lab, "ce2"), echos_before, "a labelled frame from ce1 reached ce2");
    step(
        t0,
        &format!("{FRAMES} frames with LDP label {pe1_ce2} from ce1 refused; the core port takes labels"),
    );

    // --- The labels on the wire are the ones LDP bound: captures on p's two links
    // during a ping ce1 -> ce2 (requests labelled pe1 -> p, replies pe2 -> p).
    let p_ns = lab.topology().ns("p").unwrap().to_string();
    let caps: Vec<(&str, Capture)> = ["p-pe1", "p-pe2"]
        .into_iter()
        .map(|i| {
            (
                i,
                Capture::start(&p_ns, i, &work.0.join(format!("{i}.pcap")), Some("not tcp and not udp"))
                    .unwrap(),
            )
        })
        .collect();
    let ce1_ns = lab.topology().ns("ce1").unwrap().to_string();
    let r = ping(&ce1_ns, ce2_addr(), &PingOptions::default()).unwrap();
    assert_eq!(r.received, r.sent, "ping ce1 -> ce2: {r:?}");
    for (ifname, cap) in caps {
        let file = cap.stop().unwrap();
        let rows =
            tshark_fields(&file, "icmp", &["mpls.label", "icmp.type"], Duration::from_secs(30)).unwrap();
        let labels =
            |ty: &str| -> Vec<String> { rows.iter().filter(|r| r[1] == ty).map(|r| r[0].clone()).collect() };
        let (requests, replies) = (labels("8"), labels("0"));
        eprintln!("    on {ifname}: requests with labels {requests:?}, replies with labels {replies:?}");
        assert_eq!(requests.len(), r.sent as usize, "{ifname}: {rows:?}");
        assert_eq!(replies.len(), r.sent as usize, "{ifname}: {rows:?}");
        let (want_req, want_rep) = if ifname == "p-pe1" {
            (p_ce2.to_string(), String::new())
        } else {
            (String::new(), p_ce1.to_string())
        };
        assert!(
            requests.iter().all(|l| *l == want_req),
            "{ifname}: requests {requests:?}, LDP bound {want_req:?}"
        );
        assert!(
            replies.iter().all(|l| *l == want_rep),
            "{ifname}: replies {replies:?}, LDP bound {want_rep:?}"
        );
    }
    step(t0, "labels on the wire are LDP's");

    // --- traceroute -e: every hop answers, p with the label it received.
    let hops = lab.traceroute("ce1", ce2_addr()).unwrap();
    for h in &hops {
        eprintln!("    {}", h.line);
    }
    let owners: [&[&str]; 4] = [
        &["198.18.1.1", "198.18.10.1", "198.18.255.1"],
        &["198.18.10.2", "198.18.20.1", "198.18.255.2"],
        &["198.18.20.2", "198.18.2.1", "198.18.255.3"],
        &["198.18.2.2"],
    ];
    assert_eq!(hops.len(), 4, "{hops:#?}");
    for (h, owner) in hops.iter().zip(owners) {
        let a = h.addr.unwrap_or_else(|| panic!("hop {} did not answer: {hops:#?}", h.ttl));
        assert!(owner.contains(&a.to_string().as_str()), "hop {}: {a} is not one of {owner:?}", h.ttl);
    }
    assert_eq!(
        hops[1].labels,
        [p_ce2],
        "p's answer quotes the label it received (RFC 4950): {}",
        hops[1].line
    );
    assert!(hops[0].labels.is_empty() && hops[3].labels.is_empty(), "{hops:#?}");
    step(t0, "traceroute -e");

    // --- Content-checked TCP over the LSP: the pipeline, then the fast path.
    // Through the pipeline: ce1's TSO super-frames cross the core as jumbo frames, p
    // pops the label (PHP) and pe2 cuts the plain IP super-frame to ce2's 1500-byte link.
    flow(&lab, 50_000_000, "pipeline");
    let st = lab.vmpls_cli("pe2", &["stats"]).unwrap();
    let rebuilt = st["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "gso_superframes_rebuilt")
        .unwrap()["value"]
        .as_u64()
        .unwrap();
    assert!(rebuilt > 0, "pe2 re-cut super-frames popped by p: {}", st["events"]);
    let restarted = Instant::now();
    lab.start_vmpls(true).unwrap();
    let took = lab.wait_synced(Duration::from_secs(45)).unwrap();
    step(
        t0,
        &format!(
            "vmpls restarted with fast-path = \"tc\": zebra's table back after {:.2} s",
            took.as_secs_f64()
        ),
    );
    assert!(restarted.elapsed() < Duration::from_secs(45));
    for r in ROUTER_NAMES {
        assert_eq!(
            lab.frr_counter(r, "connections").unwrap(),
            1,
            "{r}: zebra connected to the new vmpls once"
        );
    }
    flow(&lab, 50_000_000, "fast path");
    let st = lab.vmpls_cli("p", &["stats"]).unwrap();
    eprintln!("    p's frr counters after the flows: {}", st["frr"]);
    step(t0, "flows");

    // --- zebra on p restarts under a running flow.
    let (ce1, ce2) =
        (lab.topology().ns("ce1").unwrap().to_string(), lab.topology().ns("ce2").unwrap().to_string());
    let running = std::thread::spawn(move || {
        let opts = FlowOptions {
            limit: Limit::Duration(Duration::from_secs(25)),
            max_rate: Some(400_000_000),
            io_timeout: Duration::from_secs(30),
            deadline: Some(Duration::from_secs(90)),
            ..FlowOptions::default()
        };
        let mut worst = (Duration::ZERO, 0u64, Instant::now());
        let r = vmpls_lab::traffic::run_flow(&ce1, &ce2, ce2_addr(), &opts, &mut |p| {
            // The longest time without progress, seen at the 1 s progress ticks.
            let now = Instant::now();
            if p.bytes != worst.1 {
                worst.1 = p.bytes;
                worst.2 = now;
            }
            worst.0 = worst.0.max(now - worst.2);
        });
        (r, worst.0)
    });
    std::thread::sleep(Duration::from_secs(3));
    let old = lab.frr("p").unwrap().pid(Daemon::Zebra).unwrap();
    let connections = lab.frr_counter("p", "connections").unwrap();
    step(t0, "restarting zebra on p under the flow");
    lab.frr_mut("p").unwrap().restart_zebra().unwrap();
    assert_ne!(lab.frr("p").unwrap().pid(Daemon::Zebra), Some(old));
    let (_, t) = until("the new zebra connected to p's vmpls", Duration::from_secs(30), || {
        (lab.frr_counter("p", "connections").ok()? > connections
            && lab.frr_counter("p", "connected").ok()? == 1)
            .then_some(())
    });
    step(t0, &format!("the new zebra connected to p's vmpls after {:.2} s", t.as_secs_f64()));
    let took = lab.wait_synced(Duration::from_secs(45)).unwrap();
    step(t0, &format!("vmpls on p equals the new zebra's table after {:.2} s more", took.as_secs_f64()));
    let (result, stall) = running.join().unwrap();
    let result =
        result.unwrap_or_else(|e| panic!("the flow across zebra's restart: {e:#}\n{}", lab.vmpls_logs(30)));
    assert!(result.content_ok, "the flow across zebra's restart: {result:?}");
    eprintln!(
        "    flow across the restart: {} MB intact, {} retransmits, longest stall seen ~{:?}",
        result.bytes_received / 1_000_000,
        result.retransmits,
        stall
    );
    // (The stall: the new zebra has no OSPF routes until `clear ip ospf process`, so
    // its table walk is over with only the connected routes, and vmpls on p drops the
    // rest 3 s later, until ospfd and ldpd have installed them again.)
    // zebra's walk is over (vmpls removes what it did not send again after 3 s of
    // quiet): still equal, nothing stale.
    std::thread::sleep(Duration::from_secs(4));
    assert_in_sync(&lab, "after zebra's restart and the resync");
    let r = ping(&ce1_ns, ce2_addr(), &PingOptions::default()).unwrap();
    assert_eq!(r.received, r.sent, "ping ce1 -> ce2 after zebra's restart: {r:?}");
    step(t0, "zebra restart");

    // --- A static LSP on p through vtysh.
    let p = lab.frr("p").unwrap();
    p.vtysh(&["configure terminal", "mpls lsp 5000 198.18.20.2 5001"]).unwrap();
    let want =
        LabelHop { out_labels: vec![5001], via: Some(ip("198.18.20.2")), interface: Some("p-pe2".into()) };
    let (_, t) = until("LSP 5000 in p's vmpls", Duration::from_secs(10), || {
        (lab.vmpls_label_table("p").ok()?.get(&5000)? == &[want.clone()].into()).then_some(())
    });
    let shown = lab.vmpls_cli("p", &["-f", "mpls", "route", "show"]).unwrap();
    let lsp = shown.as_array().unwrap().iter().find(|e| e["label"] == 5000).unwrap().clone();
    eprintln!("    mpls lsp 5000 in p's vmpls after {:.2} s: {lsp}", t.as_secs_f64());
    assert!(["static", "zebra"].contains(&lsp["protocol"].as_str().unwrap()), "{lsp}");
    assert_in_sync(&lab, "with the static LSP");
    p.vtysh(&["configure terminal", "no mpls lsp 5000 198.18.20.2 5001"]).unwrap();
    until("LSP 5000 gone from p's vmpls", Duration::from_secs(10), || {
        (!lab.vmpls_label_table("p").ok()?.contains_key(&5000)).then_some(())
    });
    assert_in_sync(&lab, "after the static LSP");
    step(t0, "static LSP");

    // --- A labelled static route on pe1 through vtysh (staticd).
    let pe1 = lab.frr("pe1").unwrap();
    pe1.vtysh(&["configure terminal", "ip route 198.18.77.0/24 198.18.10.2 label 7000"]).unwrap();
    let want = RouteHop { labels: vec![7000], via: Some(ip("198.18.10.2")), interface: Some("pe1-p".into()) };
    let (_, t) = until("198.18.77.0/24 in pe1's vmpls", Duration::from_secs(10), || {
        (lab.vmpls_routes("pe1").ok()?.get("198.18.77.0/24")? == &[want.clone()].into()).then_some(())
    });
    let shown = lab.vmpls_cli("pe1", &["route", "show"]).unwrap();
    let route = shown.as_array().unwrap().iter().find(|e| e["dst"] == "198.18.77.0/24").unwrap().clone();
    eprintln!("    labelled static route in pe1's vmpls after {:.2} s: {route}", t.as_secs_f64());
    assert_eq!(route["protocol"], "static", "{route}");
    assert_in_sync(&lab, "with the labelled static route");
    pe1.vtysh(&["configure terminal", "no ip route 198.18.77.0/24 198.18.10.2 label 7000"]).unwrap();
    until("198.18.77.0/24 gone from pe1's vmpls", Duration::from_secs(10), || {
        (!lab.vmpls_routes("pe1").ok()?.contains_key("198.18.77.0/24")).then_some(())
    });
    assert_in_sync(&lab, "after the labelled static route");
    step(t0, "labelled static route");

    let r = ping(lab.topology().ns("ce2").unwrap(), ce1_addr(), &PingOptions::default()).unwrap();
    assert_eq!(r.received, r.sent, "ping ce2 -> ce1 at the end: {r:?}");
    lab.cleanup().unwrap();
    step(t0, "done");
}
