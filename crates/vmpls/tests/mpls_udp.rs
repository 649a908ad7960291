//! MPLS-in-UDP ports (RFC 7510) between two hosts: the seed LSP split over namespaces
//! h1 and h2 joined only by an IP underlay (`vmpls_lab::hosts`), pe1's `core` and p's
//! `west` port a `kind = "udp"` tunnel whose sockets live in the hosts' namespaces.
//! Needs root, tshark and dumpcap.

mod common;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::time::Duration;

use vmpls_lab::capture::{Capture, tshark_fields};
use vmpls_lab::hosts::{H1, H1_IF, H2, underlay};
use vmpls_lab::ping::{IcmpError, PingOptions, ping};
use vmpls_lab::seed::{CE1_V4, CE1_V6, CE2_V4, CE2_V6, SeedLab, SeedParams};
use vmpls_lab::stats::RouterStats;

use common::{WorkDir, content_checked_flow, host_of};

const VMPLS: &str = env!("CARGO_BIN_EXE_vmpls");
/// The tunnel's MTU over the 1500-byte underlay, less IPv4 and UDP; the LSP's IP MTU is
/// one label less.
const TUNNEL_MTU_V4: u32 = 1500 - 28;
const LSP_MTU: u32 = TUNNEL_MTU_V4 - 4;

/// The two-host lab with routers over the tunnel (IPv6 underlay if `v6`). The lab's
/// namespaces go when it drops (also when a test fails).
fn start(tag: &str, v6: bool) -> (SeedLab, WorkDir) {
    vmpls_lab::require_root().expect("the integration tests need root");
    let work = WorkDir::new(tag);
    let mut lab = SeedLab::build_two_hosts(&SeedParams::default()).expect("building the two-host lab");
    lab.clear_kernel_ip().expect("taking the kernel out");
    lab.set_udp_core(Some(v6)).expect("a udp core");
    lab.start_routers_with_stats(Path::new(VMPLS), work.path()).expect("starting the routers");
    if let Err(e) = lab.check_pings(Duration::from_secs(15)) {
        panic!("{e:#}\n{}", lab.router_logs(30));
    }
    (lab, work)
}

/// pe1's counters of its tunnel port `core` (the stats file is rewritten every second).
fn pe1_core(lab: &SeedLab) -> serde_json::Value {
    std::thread::sleep(Duration::from_millis(1200));
    let s: RouterStats = lab.router_stats("pe1").expect("pe1's stats");
    s.ports.iter().find(|p| p["name"] == "core").cloned().expect("pe1 has a port core")
}

fn count(port: &serde_json::Value, key: &str) -> u64 {
    port[key].as_u64().unwrap_or_else(|| panic!("no counter {key} in {port}"))
}

#[test]
fn tcp_both_ways_over_an_ipv4_underlay_dissected_as_mpls_with_one_source_port_a_flow() {
    let (mut lab, work) = start("v4", false);
    let pcap = work.path().join("underlay.pcap");
    let ns_h2 = lab.topology().ns(H2).unwrap().to_string();
    let cap = Capture::start(&ns_h2, "h2-u", &pcap, Some("udp port 6635")).expect("capture on the underlay");
    content_checked_flow(&lab, "ce1", "ce2", CE2_V4, 4 << 20);
    content_checked_flow(&lab, "ce1", "ce2", CE2_V6, 4 << 20);
    content_checked_flow(&lab, "ce2", "ce1", CE1_V4, 4 << 20);
    content_checked_flow(&lab, "ce2", "ce1", CE1_V6, 4 << 20);
    // More flows ce1 -> ce2, each on its own ephemeral port.
    for _ in 0..6 {
        content_checked_flow(&lab, "ce1", "ce2", CE2_V4, 64 << 10);
    }
    let pcap = cap.stop().expect("stopping the capture");
    lab.check_routers_running().unwrap();

    // tshark dissects UDP 6635 as MPLS by itself: pe1 -> p carries 1002, p -> pe1 2001.
    let rows = tshark_fields(
        &pcap,
        "mpls && tcp",
        &["ip.src", "udp.srcport", "udp.dstport", "mpls.label", "tcp.srcport", "tcp.dstport"],
        Duration::from_secs(60),
    )
    .expect("tshark");
    let (a, b) = underlay(false);
    let to_p: Vec<_> = rows.iter().filter(|r| r[0] == a.to_string()).collect();
    let to_pe1: Vec<_> = rows.iter().filter(|r| r[0] == b.to_string()).collect();
    assert!(to_p.len() > 100 && to_pe1.len() > 100, "{} / {} packets", to_p.len(), to_pe1.len());
    assert!(to_p.iter().all(|r| r[2] == "6635" && r[3] == "1002"), "{:?}", &to_p[..3]);
    assert!(to_pe1.iter().all(|r| r[2] == "6635" && r[3] == "2001"), "{:?}", &to_pe1[..3]);
    // Source ports: in the dynamic range, one per flow, several over the flows.
    let mut per_flow = std::collections::BTreeMap::<(String, String), std::collections::BTreeSet<u16>>::new();
    for r in &to_p {
        let sport: u16 = r[1].parse().expect("a UDP source port");
        assert!(sport >= 49152, "{r:?}");
        per_flow.entry((r[4].clone(), r[5].clone())).or_default().insert(sport);
    }
    // A GSO train is captured as one datagram and tshark dissects its first segment
    // only, so not every short flow shows; at least two flows must.
    assert!(per_flow.len() >= 2, "{per_flow:?}");
    assert!(per_flow.values().all(|s| s.len() == 1), "a flow changed its source port: {per_flow:?}");
    // Flows spread over the 16 source ports by their hash: two flows share one with a
    // chance of 1 in 16, so only a handful of flows all on one port says the spreading
    // is broken (1 in 4,096 by chance); the ports crate tests the spread itself.
    let used: std::collections::BTreeSet<u16> = per_flow.values().flatten().copied().collect();
    assert!(per_flow.len() < 4 || used.len() >= 2, "{} flows, all from {used:?}", per_flow.len());

    let core = pe1_core(&lab);
    for key in
        ["rx_truncated", "rx_not_mpls", "rx_wrong_source", "tx_unreachable", "tx_not_mpls", "tx_errors"]
    {
        assert_eq!(count(&core, key), 0, "{key}: {core}");
    }
    // Super-frames leave as trains of datagrams: far more datagrams than sends would be
    // unusual to see here, but the receiving side must have cut trains into frames.
    assert!(count(&core, "rx_packets") > 0 && count(&core, "tx_packets") > 0, "{core}");
}

#[test]
fn tcp_both_ways_over_an_ipv6_underlay() {
    let (lab, _work) = start("v6", true);
    content_checked_flow(&lab, "ce1", "ce2", CE2_V4, 4 << 20);
    content_checked_flow(&lab, "ce2", "ce1", CE1_V6, 4 << 20);
    let core = pe1_core(&lab);
    assert_eq!(count(&core, "tx_errors") + count(&core, "rx_dropped"), 0, "{core}");
}

#[test]
fn df_too_big_for_the_underlay_gets_frag_needed_and_packet_too_big_with_the_tunnel_mtu_which_follows_the_underlay()
 {
    let (lab, _work) = start("pmtu", false);
    let ns = lab.topology().ns("ce1").unwrap().to_string();
    let df = |size| PingOptions {
        count: 2,
        size,
        dont_fragment: true,
        timeout: Duration::from_secs(1),
        ..PingOptions::default()
    };
    // IPv4: 28 bytes of headers + payload; a packet of LSP_MTU + 1 does not fit.
    let r = ping(&ns, host_of(CE2_V4), &df(LSP_MTU as usize - 28 + 1)).expect("ping");
    assert_eq!(r.received, 0, "{r:?}");
    assert!(matches!(r.errors.first(), Some(IcmpError::FragmentationNeeded { mtu: LSP_MTU, .. })), "{r:?}");
    let r = ping(&ns, host_of(CE2_V4), &df(LSP_MTU as usize - 28)).expect("ping");
    assert_eq!(r.received, 2, "{r:?}");
    // IPv6: 48 bytes of headers.
    let r = ping(&ns, host_of(CE2_V6), &df(LSP_MTU as usize - 48 + 1)).expect("ping");
    assert_eq!(r.received, 0, "{r:?}");
    assert!(matches!(r.errors.first(), Some(IcmpError::PacketTooBig { mtu: LSP_MTU, .. })), "{r:?}");
    let r = ping(&ns, host_of(CE2_V6), &df(LSP_MTU as usize - 48)).expect("ping");
    assert_eq!(r.received, 2, "{r:?}");

    // The underlay's MTU drops to 1400 on h1: pe1's tunnel follows it (the router checks
    // its ports' media every second) and customers learn the new LSP MTU.
    let set_underlay_mtu = |mtu: u32| {
        let h1 = lab.topology().ns(H1).unwrap().to_string();
        let out = std::process::Command::new("ip")
            .args(["-n", &h1, "link", "set", H1_IF, "mtu", &mtu.to_string()])
            .output()
            .expect("running ip");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    let lowered = 1400 - 28 - 4;
    set_underlay_mtu(1400);
    let mut r = None;
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(500));
        let got = ping(&ns, host_of(CE2_V4), &df(lowered as usize - 28 + 1)).expect("ping");
        let learned =
            matches!(got.errors.first(), Some(IcmpError::FragmentationNeeded { mtu, .. }) if *mtu == lowered);
        r = Some(got);
        if learned {
            break;
        }
    }
    let r = r.unwrap();
    assert!(
        matches!(r.errors.first(), Some(IcmpError::FragmentationNeeded { mtu, .. }) if *mtu == lowered),
        "after the underlay went to 1400: {r:?}\n{}",
        lab.router_logs(10)
    );
    let r = ping(&ns, host_of(CE2_V4), &df(lowered as usize - 28)).expect("ping");
    assert_eq!(r.received, 2, "{r:?}");
    // And back (ce1 forgets the path MTU it learned, as it would after its 10 minutes).
    set_underlay_mtu(1500);
    std::thread::sleep(Duration::from_millis(2500));
    let out = std::process::Command::new("ip")
        .args(["-n", &ns, "route", "flush", "cache"])
        .output()
        .expect("running ip");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = ping(&ns, host_of(CE2_V4), &df(LSP_MTU as usize - 28)).expect("ping");
    assert_eq!(r.received, 2, "after the underlay went back to 1500: {r:?}");
}

/// The pid of the lab's `vmpls run` for `router`, found by its config path.
fn router_pid(work: &Path, router: &str) -> u32 {
    let config = work.join(format!("{router}.toml"));
    let config = config.to_str().unwrap().as_bytes().to_vec();
    let found: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == config.as_slice()))
        })
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found[0]
}

#[test]
fn bad_datagrams_and_a_remote_that_is_down_are_counted_not_fatal() {
    let (mut lab, work) = start("bad", false);
    let (pe1_end, p_end) = underlay(false);
    let target = SocketAddr::new(pe1_end, 6635);
    // A second address on h2 that is not the configured remote.
    let stranger: IpAddr = "198.18.100.9".parse().unwrap();
    let topo = lab.topology();
    topo.add_address(H2, "h2-u", "198.18.100.9/32".parse().unwrap()).unwrap();
    topo.add_route(H1, "198.18.100.9/32".parse().unwrap(), p_end).unwrap();
    for conf in ["all", "default", "h1-u"] {
        topo.set_sysctl(H1, &format!("net/ipv4/conf/{conf}/rp_filter"), "0").unwrap();
    }
    let mut no_bos = vec![0u8; 160];
    no_bos[3] = 64;
    let mut stack_only = vec![0u8; 4];
    stack_only[..4].copy_from_slice(&((1002u32 << 12) | 0x100 | 64).to_be_bytes());
    let mut good = stack_only.clone();
    good.extend_from_slice(&[0x45; 40]);
    topo.in_host(H2, || {
        let from_remote = UdpSocket::bind(SocketAddr::new(p_end, 0)).unwrap();
        from_remote.send_to(&[0x00, 0x3e], target).unwrap(); // 2 bytes: truncated
        from_remote.send_to(&stack_only, target).unwrap(); // a stack and nothing under it
        from_remote.send_to(&no_bos, target).unwrap(); // 40 entries, none the bottom
        let from_stranger = UdpSocket::bind(SocketAddr::new(stranger, 0)).unwrap();
        from_stranger.send_to(&good, target).unwrap();
    })
    .unwrap();
    let core = pe1_core(&lab);
    assert_eq!(count(&core, "rx_truncated"), 2, "{core}");
    assert_eq!(count(&core, "rx_not_mpls"), 1, "{core}");
    assert_eq!(count(&core, "rx_wrong_source"), 1, "{core}");
    lab.check_routers_running().unwrap();
    lab.check_pings(Duration::from_secs(5)).expect("still forwarding");

    // p goes away: h2 answers pe1's datagrams with "port unreachable", which pe1's next
    // sends report; pe1 counts them and goes on.
    let p = router_pid(work.path(), "p");
    lab.topology_mut().stop(p, Duration::from_secs(5)).expect("stopping p");
    let ns = lab.topology().ns("ce1").unwrap().to_string();
    let opts = PingOptions { count: 20, interval: Duration::from_millis(50), ..PingOptions::default() };
    let r = ping(&ns, host_of(CE2_V4), &opts).expect("ping");
    assert_eq!(r.received, 0, "{r:?}");
    let core = pe1_core(&lab);
    assert!(count(&core, "tx_unreachable") > 0, "{core}");
    // pe1 still answers at once.
    let r = ping(&ns, "198.18.1.1".parse().unwrap(), &PingOptions::default()).expect("ping pe1");
    assert_eq!(r.received, r.sent, "{r:?}");
}
