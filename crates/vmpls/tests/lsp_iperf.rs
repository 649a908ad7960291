//! The lab's built-in TCP sender against iperf3 over the same label-switched path,
//! back to back: the built-in figures must agree with a tool everybody knows (within
//! a generous factor: these machines are noisy). Needs root and iperf3.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use vmpls_lab::process::Background;
use vmpls_lab::seed::SeedParams;
use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};

const SECONDS: u64 = 3;
const PORT: &str = "5201";

/// iperf3's receiver-side throughput in Gbit/s and the sender's retransmits, from
/// `iperf3 -J` output.
fn iperf3_figures(json: &str) -> (f64, u64) {
    let v: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("iperf3 -J output: {e}: {json}"));
    let end = &v["end"];
    let bps = end["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("no end.sum_received.bits_per_second: {json}"));
    let retransmits = end["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    (bps / 1e9, retransmits)
}

fn iperf3(lab: &Lab) -> (f64, u64) {
    let mut server = Command::new("iperf3");
    // -1: serve one client, then exit.
    server.args(["-s", "-1", "-B", CE2_V4, "-p", PORT]).stdout(Stdio::null()).stderr(Stdio::null());
    let mut server = Background::spawn(&lab.ns("ce2"), "iperf3 server", server).unwrap();
    // Wait until it listens.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = lab.run("ce2", &["ss", "-Hltn", &format!("sport = :{PORT}")], Duration::from_secs(5));
        if !out.stdout.is_empty() {
            break;
        }
        assert!(server.try_wait().unwrap().is_none(), "the iperf3 server exited");
        assert!(Instant::now() < deadline, "the iperf3 server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = lab.run(
        "ce1",
        &["iperf3", "-c", CE2_V4, "-p", PORT, "-t", &SECONDS.to_string(), "-J"],
        Duration::from_secs(SECONDS + 30),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "iperf3 client: {}", output_text(&out));
    let _ = server.wait_timeout(Duration::from_secs(5));
    iperf3_figures(&text)
}

#[test]
fn builtin_tcp_figures_agree_with_iperf3() {
    let mut lab = Lab::start("iperf", SeedParams::default());
    let opts = FlowOptions {
        limit: Limit::Duration(Duration::from_secs(SECONDS)),
        io_timeout: Duration::from_secs(10),
        ..FlowOptions::default()
    };
    let builtin = run_flow(&lab.ns("ce1"), &lab.ns("ce2"), ip(CE2_V4), &opts, &mut |_| {})
        .unwrap_or_else(|e| panic!("built-in flow: {e:#}\n{}", lab.logs()));
    assert!(builtin.content_ok, "{builtin:?}");
    lab.assert_routers_running();
    let (iperf_gbps, iperf_retransmits) = iperf3(&lab);
    lab.assert_routers_running();
    let ratio = builtin.gbps / iperf_gbps;
    eprintln!(
        "over the vmpls LSP, {SECONDS} s each: built-in {:.2} Gbit/s ({} retransmits), \
         iperf3 {iperf_gbps:.2} Gbit/s ({iperf_retransmits} retransmits), ratio {ratio:.2}",
        builtin.gbps, builtin.retransmits
    );
    assert!(
        builtin.gbps > 0.05 && iperf_gbps > 0.05,
        "built-in {:.3} Gbit/s, iperf3 {iperf_gbps:.3} Gbit/s",
        builtin.gbps
    );
    assert!(
        (0.5..=2.0).contains(&ratio),
        "built-in {:.2} Gbit/s vs iperf3 {iperf_gbps:.2} Gbit/s: ratio {ratio:.2} outside 0.5..2.0",
        builtin.gbps
    );
}

#[test]
fn iperf3_json_figures_are_read() {
    let json = r#"{"end": {"sum_sent": {"bits_per_second": 2.5e9, "retransmits": 7},
                   "sum_received": {"bits_per_second": 2.0e9}}}"#;
    assert_eq!(iperf3_figures(json), (2.0, 7));
}
