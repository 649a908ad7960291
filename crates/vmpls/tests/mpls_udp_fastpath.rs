//! The in-kernel fast path over MPLS-in-UDP (RFC 7510): the seed LSP split over two hosts
//! (`vmpls_lab::hosts`), pe1's `core` and p's `west` port a `kind = "udp"` tunnel between
//! the routers' own underlay links (sockets in the routers' namespaces), every router with
//! `fast-path = "tc"`. The TC programs encapsulate at pe1 (push) and p (swap), decapsulate
//! at p (swap) and pe1 (pop); the tunnel port's fast-path counters show it, so these
//! tests fail if the pipeline did the work. Needs root, tshark and dumpcap.

mod common;

use std::path::Path;
use std::time::Duration;

use vmpls_lab::capture::{Capture, tshark_fields};
use vmpls_lab::hosts::{H2, router_underlay};
use vmpls_lab::ping::{IcmpError, PingOptions, ping};
use vmpls_lab::seed::{CE1_V4, CE1_V6, CE2_V4, CE2_V6, SeedLab, SeedParams};
use vmpls_lab::stats::RouterStats;

use common::{WorkDir, content_checked_flow, host_of};

const VMPLS: &str = env!("CARGO_BIN_EXE_vmpls");
const TRANSFER: u64 = 16 << 20;
/// The tunnel's MTU over the 1500-byte underlay, less IPv4 and UDP; the LSP's IP MTU is
/// one label less.
const LSP_MTU: u32 = 1500 - 28 - 4;

/// The two-host lab, the tunnel in the routers' namespaces over the IPv6 underlay if
/// `v6`, the fast path on. The namespaces go when the lab drops (also on failure).
fn start(tag: &str, v6: bool) -> (SeedLab, WorkDir) {
    start_with(tag, v6, SeedParams { fast_path: true, ..SeedParams::default() })
}

/// [`start`] with the routers' configs made from `params`.
fn start_with(tag: &str, v6: bool, params: SeedParams) -> (SeedLab, WorkDir) {
    vmpls_lab::require_root().expect("the integration tests need root");
    let work = WorkDir::new(tag);
    let mut lab = SeedLab::build_two_hosts(&params).expect("building the two-host lab");
    lab.clear_kernel_ip().expect("taking the kernel out");
    lab.set_udp_core(Some(v6)).expect("a udp core");
    lab.set_udp_tunnel_in_routers(true).expect("the tunnel in the routers' namespaces");
    lab.start_routers_with_stats(Path::new(VMPLS), work.path()).expect("starting the routers");
    if let Err(e) = lab.check_pings(Duration::from_secs(15)) {
        panic!("{e:#}\n{}", lab.router_logs(30));
    }
    (lab, work)
}

/// Every router's counters (the stats files are rewritten every second).
fn stats(lab: &SeedLab) -> [RouterStats; 3] {
    std::thread::sleep(Duration::from_millis(1200));
    ["pe1", "p", "pe2"].map(|r| lab.router_stats(r).unwrap_or_else(|e| panic!("{r}'s stats: {e:#}")))
}

/// What the fast path moved through `router`'s port `port`: (rx, tx) frames.
fn fast_port(s: &RouterStats, port: &str) -> (u64, u64) {
    let p =
        s.ports.iter().find(|p| p["name"] == port).unwrap_or_else(|| panic!("no port {port}: {:?}", s.ports));
    let get = |k: &str| p["fast_path"][k].as_u64().unwrap_or(0);
    (get("rx_packets"), get("tx_packets"))
}

#[test]
fn fast_path_encapsulates_and_decapsulates_tcp_both_ways_over_an_ipv4_underlay() {
    let (mut lab, work) = start("v4", false);
    let pcap = work.path().join("underlay.pcap");
    let ns_h2 = lab.topology().ns(H2).unwrap().to_string();
    let cap = Capture::start(&ns_h2, "h2-u", &pcap, Some("udp port 6635")).expect("capture on the underlay");
    content_checked_flow(&lab, "ce1", "ce2", CE2_V4, TRANSFER);
    content_checked_flow(&lab, "ce1", "ce2", CE2_V6, TRANSFER);
    content_checked_flow(&lab, "ce2", "ce1", CE1_V4, TRANSFER);
    content_checked_flow(&lab, "ce2", "ce1", CE1_V6, TRANSFER);
    let pcap = cap.stop().expect("stopping the capture");
    lab.check_routers_running().unwrap();

    let [pe1, p, pe2] = stats(&lab);
    eprintln!("fast path: pe1 {:?}\np {:?}\npe2 {:?}", pe1.fast_path, p.fast_path, pe2.fast_path);
    // Each direction's data crossed the tunnel as super-frames the programs encapsulated
    // (pe1 pushes into it, p swaps into it) and decapsulated (p swaps out of it, pe1 pops).
    let min = 2 * TRANSFER / 65536;
    let (pe1_rx, pe1_tx) = fast_port(&pe1, "core");
    let (p_rx, p_tx) = fast_port(&p, "west");
    assert!(pe1_tx >= min && p_rx >= min, "pe1 -> p: pe1 tx {pe1_tx}, p rx {p_rx}");
    assert!(p_tx >= min && pe1_rx >= min, "p -> pe1: p tx {p_tx}, pe1 rx {pe1_rx}");
    for (name, s) in [("pe1", &pe1), ("p", &p)] {
        assert!(s.fast("encap") >= min && s.fast("decap") >= min, "{name}: {:?}", s.fast_path);
        assert_eq!(s.fast("redirect_failed"), 0, "{name}: {:?}", s.fast_path);
    }
    assert!(pe1.fast("push") >= min && pe1.fast("pop") >= min, "pe1: {:?}", pe1.fast_path);
    // The frames p swapped out of the tunnel reach pe2 ready for its programs' pop.
    assert!(pe2.fast("pop") >= min && pe2.fast("push") >= min, "pe2: {:?}", pe2.fast_path);

    // tshark dissects UDP 6635 as MPLS: pe1 -> p carries 1002, p -> pe1 2001, from the
    // routers' own underlay addresses, source ports from the dynamic range.
    let rows = tshark_fields(
        &pcap,
        "mpls",
        &["ip.src", "udp.srcport", "udp.dstport", "mpls.label", "udp.checksum"],
        Duration::from_secs(60),
    )
    .expect("tshark");
    let (a, b) = router_underlay(false);
    let to_p: Vec<_> = rows.iter().filter(|r| r[0] == a.to_string()).collect();
    let to_pe1: Vec<_> = rows.iter().filter(|r| r[0] == b.to_string()).collect();
    assert!(to_p.len() > 20 && to_pe1.len() > 20, "{} / {} packets", to_p.len(), to_pe1.len());
    assert!(to_p.iter().all(|r| r[2] == "6635" && r[3] == "1002"), "{:?}", &to_p[..3]);
    assert!(to_pe1.iter().all(|r| r[2] == "6635" && r[3] == "2001"), "{:?}", &to_pe1[..3]);
    for r in to_p.iter().chain(&to_pe1) {
        let sport: u16 = r[1].parse().expect("a UDP source port");
        assert!(sport >= 49152, "{r:?}");
    }
}

#[test]
fn over_an_ipv6_underlay_the_pipeline_encapsulates_and_partial_checksums_stay_with_the_socket() {
    let (mut lab, _work) = start("v6", true);
    content_checked_flow(&lab, "ce1", "ce2", CE2_V4, TRANSFER);
    content_checked_flow(&lab, "ce2", "ce1", CE1_V6, TRANSFER);
    lab.check_routers_running().unwrap();
    let [pe1, p, pe2] = stats(&lab);
    eprintln!("fast path: pe1 {:?}\np {:?}", pe1.fast_path, p.fast_path);
    // Over IPv6 the outer UDP checksum must be right on every segment, which only the
    // tunnel's socket (UDP_SEGMENT) gives: the programs do not encapsulate. The sockets'
    // datagrams cross the veth underlay with that checksum still to compute
    // (CHECKSUM_PARTIAL at the outer UDP header), so the programs leave them to the
    // receiving socket too: decapsulating would leave a checksum to compute at bytes that
    // are gone, which the next pipeline would refuse (bad_checksum_offload).
    let (_, pe1_tx) = fast_port(&pe1, "core");
    let (_, p_tx) = fast_port(&p, "west");
    assert_eq!((pe1_tx, p_tx), (0, 0), "no encapsulation over IPv6");
    for (name, s) in [("pe1", &pe1), ("p", &p), ("pe2", &pe2)] {
        assert_eq!(s.fast("encap") + s.fast("redirect_failed"), 0, "{name}: {:?}", s.fast_path);
        assert_eq!(s.drop_count("bad_checksum_offload"), 0, "{name}: {:?}", s.nonzero_drops());
    }
    // pe2's push toward p (two veths) is the programs' still.
    assert!(pe2.fast("push") >= TRANSFER / 65536, "pe2: {:?}", pe2.fast_path);
}

#[test]
fn a_df_packet_too_big_for_the_tunnel_is_left_to_the_pipeline_which_answers_frag_needed() {
    let (lab, _work) = start("pmtu", false);
    let ns = lab.topology().ns("ce1").unwrap().to_string();
    let df = |size| PingOptions {
        count: 2,
        size,
        dont_fragment: true,
        timeout: Duration::from_secs(1),
        ..PingOptions::default()
    };
    let before = stats(&lab)[0].fast("push");
    // Fits with its label: the programs push it into the tunnel.
    let r = ping(&ns, host_of(CE2_V4), &df(LSP_MTU as usize - 28)).expect("ping");
    assert_eq!(r.received, 2, "{r:?}");
    assert!(stats(&lab)[0].fast("push") >= before + 2, "the programs sent the pings that fit");
    // One byte more: the pipeline's, which says how much fits.
    let r = ping(&ns, host_of(CE2_V4), &df(LSP_MTU as usize - 28 + 1)).expect("ping");
    assert_eq!(r.received, 0, "{r:?}");
    assert!(matches!(r.errors.first(), Some(IcmpError::FragmentationNeeded { mtu: LSP_MTU, .. })), "{r:?}");
    let r = ping(&ns, host_of(CE2_V6), &df(LSP_MTU as usize - 48 + 1)).expect("ping");
    assert_eq!(r.received, 0, "{r:?}");
    assert!(matches!(r.errors.first(), Some(IcmpError::PacketTooBig { mtu: LSP_MTU, .. })), "{r:?}");
}

#[test]
fn under_auto_only_the_pipeline_encapsulates_and_tcp_crosses_intact() {
    // The routers' default: the programs may decapsulate, whatever the sender; only the
    // pipeline encapsulates.
    let (mut lab, _work) =
        start_with("auto", false, SeedParams { fast_path_auto: true, ..SeedParams::default() });
    content_checked_flow(&lab, "ce1", "ce2", CE2_V4, TRANSFER);
    content_checked_flow(&lab, "ce2", "ce1", CE1_V4, TRANSFER);
    lab.check_routers_running().unwrap();
    let [pe1, p, _] = stats(&lab);
    let min = TRANSFER / 65536;
    // The programs saw the datagrams; over this veth underlay the pipeline's arrive with
    // their outer checksums still to compute, so they went to the socket whole.
    for (name, s, port) in [("pe1", &pe1, "core"), ("p", &p, "west")] {
        let (_, tx) = fast_port(s, port);
        assert!(s.fast("frames_in") > 0, "{name}: {:?}", s.fast_path);
        assert_eq!((tx, s.fast("encap")), (0, 0), "{name} encapsulated in the kernel: {:?}", s.fast_path);
    }
    // The pipeline sent the data into the tunnel.
    let sent = |s: &RouterStats, port: &str| {
        let p = s.ports.iter().find(|p| p["name"] == port).unwrap();
        p["tx_packets"].as_u64().unwrap_or(0)
    };
    assert!(sent(&pe1, "core") >= min && sent(&p, "west") >= min);
}
