//! The seed lab's kernel-ip mode, end to end. Needs root.

use std::time::Duration;

use vmpls_lab::netns;
use vmpls_lab::seed::{Mode, SeedLab, SeedOptions, SeedParams, run_seed};

#[test]
fn seed_lab_runs_in_kernel_ip_mode() {
    let mut opts = SeedOptions::new("/nonexistent/vmpls", Duration::from_secs(2));
    opts.modes = vec![Mode::kernel_ip()];
    let mut lines = Vec::new();
    let report = run_seed(&opts, &mut |l| lines.push(l.to_string())).unwrap();
    assert!(report.ok(), "{}", report.to_markdown());
    assert_eq!(report.modes.len(), 1);
    let m = &report.modes[0];
    let flow = m.flow.as_ref().unwrap();
    assert!(flow.content_ok);
    assert!(flow.gbps > 0.1, "{flow:?}");
    assert!(flow.seconds >= 1.5, "{flow:?}");
    assert_eq!(m.ratio, Some(1.0));
    let md = report.to_markdown();
    assert!(md.starts_with("| mode | Gbit/s | retransmits | ratio to kernel-ip |"), "{md}");
    assert!(md.contains("| kernel-ip |"), "{md}");
    assert_eq!(report.to_json()["modes"][0]["name"], "kernel-ip");
    // The temporary work dir is removed after a clean run.
    assert!(report.work_dir.is_none());
    assert!(lines.iter().any(|l| l.contains("Gbit/s")), "{lines:?}");
    // The namespaces listed in the progress lines are gone.
    let ns_line = lines.iter().find(|l| l.starts_with("namespaces: ")).unwrap();
    for ns in ns_line.trim_start_matches("namespaces: ").split(' ') {
        assert!(!netns::exists(ns), "{ns} left behind");
    }
}

#[test]
fn seed_lab_switches_the_kernel_out_for_vmpls() {
    // The pieces of a vmpls mode that do not need the router binary: after
    // clear_kernel_ip the routers' interfaces carry no kernel addresses and no IPv6,
    // forwarding is off, and ce1 can no longer reach ce2 through the kernel.
    let mut lab = SeedLab::build(&SeedParams::default()).unwrap();
    let t = lab.topology();
    assert_eq!(t.mtu("pe1", "pe1-p").unwrap(), 65535);
    assert_eq!(t.mtu("pe1", "pe1-ce1").unwrap(), 1500);
    assert_eq!(t.sysctl("p", "net/ipv6/conf/p-pe1/disable_ipv6").unwrap(), "1");
    lab.setup_kernel_ip().unwrap();
    lab.wait_reachable("ce1", "198.18.2.2".parse().unwrap(), Duration::from_secs(5)).unwrap();
    lab.clear_kernel_ip().unwrap();
    let t = lab.topology();
    for (host, ifname) in
        [("pe1", "pe1-ce1"), ("pe1", "pe1-p"), ("p", "p-pe1"), ("p", "p-pe2"), ("pe2", "pe2-p")]
    {
        assert_eq!(t.addresses(host, ifname).unwrap(), vec![], "{host} {ifname}");
        assert_eq!(t.sysctl(host, &format!("net/ipv6/conf/{ifname}/disable_ipv6")).unwrap(), "1");
    }
    assert_eq!(t.sysctl("p", "net/ipv4/ip_forward").unwrap(), "0");
    let err =
        lab.wait_reachable("ce1", "198.18.2.2".parse().unwrap(), Duration::from_millis(500)).unwrap_err();
    assert!(format!("{err:#}").contains("cannot reach"), "{err:#}");
    // And back: kernel-ip mode can be set up again in the same namespaces, here with
    // offloads off.
    lab.set_offloads(false).unwrap();
    let out = lab.topology().run("p", {
        let mut c = std::process::Command::new("ethtool");
        c.args(["-k", "p-pe2"]);
        c
    });
    let text = String::from_utf8(out.unwrap().stdout).unwrap();
    assert!(text.contains("tcp-segmentation-offload: off"), "{text}");
    assert!(text.contains("generic-segmentation-offload: off"), "{text}");
    lab.setup_kernel_ip().unwrap();
    lab.check_pings(Duration::from_secs(5)).unwrap();
    let names = lab.topology().namespaces();
    lab.cleanup().unwrap();
    for ns in names {
        assert!(!netns::exists(&ns));
    }
}

#[test]
fn seed_lab_vmpls_mode_fails_cleanly_when_the_router_exits() {
    // `false` exits at once: the lab must notice and report, not wait or hang.
    let Some(false_bin) =
        ["/usr/bin/false", "/bin/false"].into_iter().find(|p| std::path::Path::new(p).is_file())
    else {
        panic!("no `false` binary");
    };
    let mut opts = SeedOptions::new(false_bin, Duration::from_secs(1));
    opts.modes = vec![Mode::vmpls_mpls()];
    opts.keep_going = true;
    let start = std::time::Instant::now();
    let report = run_seed(&opts, &mut |_| ()).unwrap();
    assert!(start.elapsed() < Duration::from_secs(20));
    let err = report.modes[0].error.as_deref().unwrap();
    assert!(err.contains("exited"), "{err}");
    assert!(!report.ok());
    // The work dir is kept for the logs.
    let dir = report.work_dir.unwrap();
    assert!(dir.join("pe1.toml").is_file());
    assert!(dir.join("p.log").is_file());
    std::fs::remove_dir_all(dir).unwrap();
}
