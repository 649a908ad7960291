//! `process`: programs run to completion with a timeout, and background programs that
//! are stopped on request or on drop. Needs root (it creates a namespace).

use std::process::Command;
use std::time::{Duration, Instant};

use vmpls_lab::process::{Background, run_timeout};
use vmpls_lab::topology::Topology;

#[test]
fn runs_with_a_timeout_and_stops_background_programs() {
    let mut t = Topology::new();
    t.add_host("a").unwrap();
    let ns = t.ns("a").unwrap().to_string();

    let mut sh = Command::new("sh");
    sh.args(["-c", "echo out; echo err >&2; ip -o link show lo; exit 3"]);
    let out = run_timeout(&ns, sh, Duration::from_secs(5)).unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("out\n"), "{stdout}");
    // Inside the namespace there is only lo.
    assert!(stdout.contains("1: lo:"), "{stdout}");
    assert_eq!(out.stderr, b"err\n");

    // Topology::run_timeout is the same, by host name.
    let mut ip = Command::new("ip");
    ip.args(["-o", "link"]);
    let out = t.run_timeout("a", ip, Duration::from_secs(5)).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);

    let mut sleep = Command::new("sleep");
    sleep.arg("30");
    let start = Instant::now();
    let err = run_timeout(&ns, sleep, Duration::from_millis(200)).unwrap_err();
    assert!(format!("{err:#}").contains("did not finish"), "{err:#}");
    assert!(start.elapsed() < Duration::from_secs(5));

    let mut sleep = Command::new("sleep");
    sleep.arg("30");
    let mut bg = Background::spawn(&ns, "sleep", sleep).unwrap();
    assert!(bg.wait_timeout(Duration::from_millis(50)).unwrap().is_none());
    let start = Instant::now();
    let status = bg.stop(libc::SIGTERM, Duration::from_secs(2)).unwrap();
    assert!(!status.success());
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(bg.stop(libc::SIGTERM, Duration::from_secs(1)).is_err());

    // Dropped while running: stopped.
    let mut sleep = Command::new("sleep");
    sleep.arg("30");
    let bg = Background::spawn(&ns, "sleep", sleep).unwrap();
    let pid = bg.pid().unwrap();
    drop(bg);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
}
