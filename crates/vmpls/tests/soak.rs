//! `vmpls bench soak` end to end: a short soak of the seed lab's routers, read back
//! from its JSON report. Needs root (namespaces, AF_PACKET); about 30 s.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Runs `vmpls ARGS` and returns its exit success, stdout and stderr; kills it after
/// `timeout`.
fn vmpls(args: &[&str], timeout: Duration) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vmpls"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting vmpls");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for vmpls") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            // SIGTERM first: the soak removes its namespaces on an interrupt.
            // Our own child, not reaped yet (try_wait said it runs).
            let _ = vmpls_sys::process::kill(child.id(), libc::SIGTERM);
            std::thread::sleep(Duration::from_secs(5));
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (out, err) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    assert!(status.is_some(), "vmpls {args:?} ran longer than {timeout:?}\n{err}");
    (status.is_some_and(|s| s.success()), out, err)
}

fn u64_at(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} is not a count in {v}"))
}

#[test]
fn short_soak_changes_paths_without_losing_traffic_or_memory() {
    vmpls_lab::require_root().expect("the integration tests need root");
    let start = Instant::now();
    // Rates a debug build forwards with room to spare.
    let (ok, out, err) = vmpls(
        &["bench", "soak", "--duration", "20s", "--json", "--rate", "100", "--udp-rate", "20"],
        Duration::from_secs(90),
    );
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}\n{err}"));
    assert!(ok, "the soak failed: {}\n{err}", report["failures"]);
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(report["failures"].as_array().map(Vec::len), Some(0), "{report:#}");
    eprintln!("soak took {:?}", start.elapsed());

    // The path changed several times, each LSP carried traffic while it was in use,
    // and p switched frames on both LSPs' labels in both directions.
    assert!(u64_at(&report, "path_switches") >= 4, "{report:#}");
    assert!(u64_at(&report, "route_changes") >= 8 * u64_at(&report, "path_switches"), "{report:#}");
    assert_eq!(report["lsp_uses_checked"], report["lsp_uses_with_traffic"], "{report:#}");
    assert!(u64_at(&report, "lsp_uses_checked") >= 3, "{report:#}");
    for label in ["1001", "1002", "1003", "1004"] {
        assert!(report["p_label_frames"][label].as_u64().unwrap_or(0) > 0, "label {label}: {report:#}");
    }

    let flows = report["flows"].as_array().expect("flows");
    assert_eq!(flows.len(), 4, "{report:#}");
    for f in flows {
        match f["proto"].as_str() {
            Some("tcp") => {
                assert_eq!(f["content_ok"], true, "{f}");
                assert_eq!(f["bytes_received"], f["bytes_sent"], "{f}");
                // Paced at 100 Mbit/s for 20 s: about 250 MB.
                let bytes = u64_at(f, "bytes_received");
                assert!((150_000_000..=300_000_000).contains(&bytes), "{f}");
            }
            Some("udp") => {
                let (sent, received) = (u64_at(f, "sent"), u64_at(f, "received"));
                // 20 Mbit/s of 1200-byte datagrams for 20 s: about 41 700.
                assert!((30_000..=45_000).contains(&sent), "{f}");
                assert!(received as f64 >= sent as f64 * 0.999, "{f}");
                assert_eq!(u64_at(f, "lost"), sent - received, "{f}");
                assert_eq!(u64_at(f, "corrupted") + u64_at(f, "duplicated"), 0, "{f}");
            }
            _ => panic!("unknown flow {f}"),
        }
    }

    let routers = report["routers"].as_array().expect("routers");
    assert_eq!(routers.len(), 3);
    for r in routers {
        assert_eq!(r["drops"].as_object().map(|d| d.len()), Some(0), "{r}");
        assert!(u64_at(r, "rss_start_kib") > 0 && u64_at(r, "rss_end_kib") > 0, "{r}");
        assert!(r["rss_growth_kib"].as_i64().is_some_and(|g| g < 10 * 1024), "{r}");
        assert_eq!(r["exit"], "0", "{r}");
    }
    // Progress lines on stderr, one at least every few seconds.
    assert!(err.lines().filter(|l| l.starts_with("soak ")).count() >= 5, "{err}");
}

#[test]
fn soak_rejects_bad_durations_and_rates() {
    for (args, want) in [
        (&["bench", "soak", "--duration", "10x"][..], "unknown unit"),
        (&["bench", "soak", "--duration", ""][..], "a duration is needed"),
        (&["bench", "soak", "--rate", "0"][..], "not a rate"),
        (&["bench", "soak", "--duration", "2s"][..], "too short"),
    ] {
        let (ok, _, err) = vmpls(args, Duration::from_secs(20));
        assert!(!ok, "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
