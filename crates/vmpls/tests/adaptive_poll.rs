//! Adaptive polling (`poll = "adaptive"`, the default) on the seed lab's three routers
//! between kernel hosts: an idle router sleeps (near 0 % of a core) before traffic and
//! again once it stopped, and frames that arrive one by one, each after the router went
//! back to sleep, all pass with a bounded round trip (none waits for a later frame or a
//! timer to wake the router). The rings' re-arm itself (a frame queued without a kick
//! while polling stops) is `vhost_user_frontend.rs` in the ports crate.
//! `VMPLS_TEST_POLL=interrupt` runs the same with `poll = "interrupt"`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use vmpls_control::CpuList;
use vmpls_lab::SeedParams;
use vmpls_lab::ping::PingOptions;

/// The most of a core an idle router may use: it wakes for its timers (stats file, link
/// check) a few times a second; one that kept polling would use a whole core.
const MAX_IDLE_SHARE: f64 = 0.05;
/// A round trip ce1 -> ce2 -> ce1 through six router hops may take at most this long:
/// far beyond any forwarding time, far below the 1-second timers that would otherwise
/// be what wakes a router that slept through a frame.
const MAX_RTT: Duration = Duration::from_millis(300);

/// Each router's share of a core over 2 s.
fn idle_shares(lab: &Lab, phase: &str) -> Vec<(&'static str, f64)> {
    let pids: Vec<(&str, u32)> = ROUTERS.iter().map(|r| (*r, router_pid(lab, r))).collect();
    let cpu = |pid| vmpls_sys::process::cpu_seconds(pid).expect("the router's /proc/PID/stat");
    let before: Vec<f64> = pids.iter().map(|(_, pid)| cpu(*pid)).collect();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let wall = start.elapsed().as_secs_f64();
    pids.iter()
        .zip(before)
        .map(|((r, pid), b)| {
            let share = (cpu(*pid) - b) / wall;
            eprintln!("{phase}: {r} used {:.2} % of a core", 100.0 * share);
            (*r, share)
        })
        .collect()
}

fn assert_idle(lab: &Lab, phase: &str) {
    for (r, share) in idle_shares(lab, phase) {
        assert!(
            share < MAX_IDLE_SHARE,
            "{phase}: router {r} used {:.1} % of a core\n{}",
            100.0 * share,
            lab.logs()
        );
    }
}

#[test]
fn an_idle_router_sleeps_before_and_after_traffic_and_frames_after_the_switch_are_not_stuck() {
    let mut lab = Lab::start("adaptive-poll", SeedParams::default());
    assert_idle(&lab, "idle after the start");

    // Traffic: the routers poll while it flows, then go back to sleep.
    lab.flow("ce1", "ce2", CE2_V4, 20 << 20);
    std::thread::sleep(Duration::from_millis(200));
    assert_idle(&lab, "idle after a TCP flow");

    // One echo request every 20 ms: each reaches every router after it stopped polling
    // (100 us after the previous frame) and went back to sleep.
    let opts = PingOptions {
        count: 25,
        interval: Duration::from_millis(20),
        timeout: Duration::from_secs(2),
        ..PingOptions::default()
    };
    for to in [CE2_V4, CE2_V6] {
        let r = lab.ping("ce1", to, &opts);
        assert_eq!(r.received, r.sent, "ce1 -> {to}: {r:?}\n{}", lab.logs());
        let worst = r.replies.iter().map(|p| p.rtt).max().unwrap_or_default();
        eprintln!("ce1 -> {to}: {} replies, slowest {worst:?}", r.received);
        assert!(worst < MAX_RTT, "ce1 -> {to}: a reply took {worst:?}: {r:?}");
    }
    assert_idle(&lab, "idle after the pings");
    let stats = lab.stop_routers();
    assert_no_unexpected_drops(&stats, &[], "adaptive polling");
    // The loop's own account agrees: turns that moved frames, and far more time asleep
    // than awake (the routers idled most of the test).
    for (r, s) in &stats {
        let l = &s.forwarding_loop;
        let (busy, idle, slept) = (l["busy_us"], l["idle_us"], l["slept_us"]);
        eprintln!("{r}: forwarding loop {l:?}");
        assert!(l["busy_turns"] > 0 && busy > 0, "{r}: {l:?}");
        assert!(l["turns"] > l["busy_turns"], "{r}: {l:?}");
        assert!(slept > 4 * (busy + idle), "{r}: {l:?}");
    }
}

/// The CPUs in a `Cpus_allowed_list:` line of `/proc/.../status`.
fn allowed_cpus(status: &str) -> Vec<u16> {
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("a Cpus_allowed_list line")
        .trim();
    CpuList::parse(list).expect("the kernel's list").cpus().to_vec()
}

#[test]
fn routers_given_cpus_run_every_thread_there_and_forward() {
    // The last CPU the test may use: on a machine of one, the only one.
    let mine = allowed_cpus(&std::fs::read_to_string("/proc/self/status").unwrap());
    let cpu = *mine.last().unwrap();
    let params = SeedParams { cpus: Some(cpu.to_string()), ..SeedParams::default() };
    // Starting checks that ce1 and ce2 reach each other through the three routers.
    let mut lab = Lab::start("cpus", params);
    for r in ROUTERS {
        let pid = router_pid(&lab, r);
        let tasks: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten().collect();
        // The forwarding loop, the control socket's and the ports' threads.
        assert!(tasks.len() > 1, "{r}: {} threads", tasks.len());
        for t in tasks {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap();
            let name = status.lines().next().unwrap_or_default().to_string();
            assert_eq!(allowed_cpus(&status), [cpu], "{r}, thread {name}");
        }
    }
    lab.flow("ce1", "ce2", CE2_V4, 4 << 20);
    let stats = lab.stop_routers();
    assert_no_unexpected_drops(&stats, &[], "routers pinned to a CPU");

    // A CPU the router may not run on: `vmpls check` names it, and what it may use.
    let config = lab.work.path().join("pinned-beyond.toml");
    let beyond = CpuList::LIMIT - 1;
    let text = std::fs::read_to_string(lab.work.path().join("p.toml"))
        .unwrap()
        .replace(&format!("cpus = \"{cpu}\""), &format!("cpus = \"{beyond}\""));
    std::fs::write(&config, text).unwrap();
    let binary = router_binary();
    let args = [binary.to_str().unwrap(), "check", "--config", config.to_str().unwrap()];
    // In p's namespace, where its interfaces are.
    let out = lab.run("p", &args, Duration::from_secs(10));
    let text = output_text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains(&format!("router.cpus = \"{beyond}\"")), "{text}");
    assert!(text.contains(&format!("CPU {beyond} is not one this process may run on")), "{text}");
}
