//! The Linux kernel's own MPLS as the PEs, in two QEMU guests (kernel 6.1 from Debian,
//! `mpls_router` + `mpls_iptunnel`), and `vmpls run` as the P router between them on the
//! host, attached with AF_PACKET to the TAP devices QEMU owns:
//!
//! ```text
//!  guest pe1                       netns p (host)                       guest pe2
//!  cust 198.18.1.1/24                                                 cust 198.18.2.1/24
//!  eth0 198.18.10.1 ==tap pe1-p== vmpls west .10.2 | east .20.1 ==tap pe2-p== eth0 198.18.20.2
//!       2001:db8:10::1                2001:db8:10::2 | 2001:db8:20::1        2001:db8:20::2
//! ```
//!
//! pe1 pushes 1002 (IPv4) / 1012 (IPv6) towards pe2's customer, p swaps them to 2002 /
//! 2012, pe2 pops; back the other way 1001 / 1011 -> 2001 / 2011. Checked: pings between
//! the customer addresses both ways over IPv4 and IPv6, and the labels on both TAPs from
//! dumpcap captures dissected by tshark. Needs root, QEMU (TCG is enough), tshark, and
//! the guest image (`vmpls-guest`; the first build downloads the kernel package).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vmpls_guest::{Guest, GuestCache, GuestConfig, GuestImage, Nic};
use vmpls_lab::capture::{Capture, tshark_fields};
use vmpls_lab::topology::{HostOptions, Topology};

const P_CONFIG: &str = r#"
[router]
fast-path = "off"
name = "p"
addresses = ["198.18.255.2", "2001:db8:ff::2"]

[[port]]
name = "west"
interface = "pe1-p"
addresses = ["198.18.10.2/24", "2001:db8:10::2/64"]

[[port]]
name = "east"
interface = "pe2-p"
addresses = ["198.18.20.1/24", "2001:db8:20::1/64"]

[[label]]
in = 1002
action = "swap"
out = [2002]
via = "198.18.20.2"
port = "east"

[[label]]
in = 1012
action = "swap"
out = [2012]
via = "2001:db8:20::2"
port = "east"

[[label]]
in = 1001
action = "swap"
out = [2001]
via = "198.18.10.1"
port = "west"

[[label]]
in = 1011
action = "swap"
out = [2011]
via = "2001:db8:10::1"
port = "west"
"#;

/// The PE script: the kernel's MPLS set up with iproute2, then pings to the other PE's
/// customer addresses from our own, reported on the result channel.
#[allow(clippy::too_many_arguments)]
fn pe_script(
    me: u8,
    peer: u8,
    core_v4: &str,
    core_v6: &str,
    p_v4: &str,
    p_v6: &str,
    out_labels: (u32, u32),
    in_labels: (u32, u32),
) -> String {
    format!(
        r#"
sysctl -qw net.mpls.platform_labels=4096
sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
ip link set eth0 up
ip addr add {core_v4}/24 dev eth0
ip addr add {core_v6}/64 dev eth0 nodad
sysctl -qw net.mpls.conf.eth0.input=1
ip link add cust type dummy
ip link set cust up
ip addr add 198.18.{me}.1/24 dev cust
ip addr add 2001:db8:{me}::1/64 dev cust nodad
ip route add 198.18.{peer}.0/24 encap mpls {v4_out} via inet {p_v4} dev eth0 || fail "ipv4 encap route"
ip -6 route add 2001:db8:{peer}::/64 encap mpls {v6_out} via inet6 {p_v6} dev eth0 || fail "ipv6 encap route"
ip -f mpls route add {v4_in} dev lo || fail "mpls pop route {v4_in}"
ip -f mpls route add {v6_in} dev lo || fail "mpls pop route {v6_in}"
result "configured"
retry 90 ping -c 1 -W 1 -I 198.18.{me}.1 198.18.{peer}.1 || fail "no IPv4 reply through the LSP"
ping -c 5 -i 0.2 -W 2 -I 198.18.{me}.1 198.18.{peer}.1 > /tmp/ping4 2>&1
result "ping4 $(grep 'packets transmitted' /tmp/ping4)"
retry 60 ping -6 -c 1 -W 1 -I 2001:db8:{me}::1 2001:db8:{peer}::1 || fail "no IPv6 reply through the LSP"
ping -6 -c 5 -i 0.2 -W 2 -I 2001:db8:{me}::1 2001:db8:{peer}::1 > /tmp/ping6 2>&1
result "ping6 $(grep 'packets transmitted' /tmp/ping6)"
ip -f mpls route show > /dev/console
result "pings done"
# Stay up for the other PE's pings; the host stops us.
sleep 300
"#,
        v4_out = out_labels.0,
        v6_out = out_labels.1,
        v4_in = in_labels.0,
        v6_in = in_labels.1,
    )
}

/// Labels and ICMP echo types seen on one TAP, as (label, echo type) pairs.
fn labelled_echoes(pcap: &std::path::Path) -> BTreeSet<(String, String)> {
    let rows = tshark_fields(
        pcap,
        "mpls && (icmp.type == 8 || icmp.type == 0 || icmpv6.type == 128 || icmpv6.type == 129)",
        &["mpls.label", "icmp.type", "icmpv6.type"],
        Duration::from_secs(60),
    )
    .expect("tshark");
    rows.into_iter()
        .map(|r| {
            let kind = match (r[1].as_str(), r[2].as_str()) {
                ("8", _) | (_, "128") => "request",
                ("0", _) | (_, "129") => "reply",
                _ => "other",
            };
            let v = if r[2].is_empty() { "4" } else { "6" };
            (r[0].clone(), format!("{kind}{v}"))
        })
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    items.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

#[test]
fn kernel_mpls_pes_in_guests_talk_through_vmpls_as_p() {
    let started = Instant::now();
    let image = GuestImage::build(&GuestCache::default_location()).expect("guest image");
    let work = std::env::temp_dir().join(format!("vmpls-guest-kmpls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();

    let mut topo = Topology::new();
    topo.add_host_with("p", HostOptions { ipv6: false }).unwrap();
    let ns = topo.ns("p").unwrap().to_string();

    let boot = |name: &str, tap: &str, script: String| {
        Guest::boot(
            &image,
            GuestConfig {
                name: name.into(),
                nics: vec![Nic::tap(tap)],
                script,
                netns: Some(ns.clone()),
                ..GuestConfig::default()
            },
        )
        .unwrap_or_else(|e| panic!("booting {name}: {e}"))
    };
    let mut pe1 = boot(
        "pe1",
        "pe1-p",
        pe_script(
            1,
            2,
            "198.18.10.1",
            "2001:db8:10::1",
            "198.18.10.2",
            "2001:db8:10::2",
            (1002, 1012),
            (2001, 2011),
        ),
    );
    let mut pe2 = boot(
        "pe2",
        "pe2-p",
        pe_script(
            2,
            1,
            "198.18.20.2",
            "2001:db8:20::2",
            "198.18.20.1",
            "2001:db8:20::1",
            (1001, 1011),
            (2002, 2012),
        ),
    );

    // The TAPs exist and are up: capture on both, then start the P router on them.
    let cap1 = Capture::start(&ns, "pe1-p", &work.join("pe1-p.pcap"), Some("mpls")).unwrap();
    let cap2 = Capture::start(&ns, "pe2-p", &work.join("pe2-p.pcap"), Some("mpls")).unwrap();
    let config = work.join("p.toml");
    std::fs::write(&config, P_CONFIG).unwrap();
    let log = work.join("p.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vmpls"));
    cmd.arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--socket")
        .arg(work.join("p.sock"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    topo.spawn("p", "vmpls p", cmd, Some(log.clone())).unwrap();

    let wait = |g: &mut Guest, marker: &str| -> String {
        g.wait_for(marker, Duration::from_secs(150))
            .unwrap_or_else(|e| panic!("{e}\nvmpls log:\n{}", Topology::log_tail(&log, 30)))
    };
    for g in [&mut pe1, &mut pe2] {
        let v4 = wait(g, "ping4 ");
        assert!(v4.contains("5 packets transmitted, 5 packets received"), "{}: {v4}", g.name());
        let v6 = wait(g, "ping6 ");
        assert!(v6.contains("5 packets transmitted, 5 packets received"), "{}: {v6}", g.name());
    }
    wait(&mut pe1, "pings done");
    wait(&mut pe2, "pings done");
    let ready = started.elapsed();
    assert!(topo.exited_child().is_none(), "vmpls exited:\n{}", Topology::log_tail(&log, 30));

    let pcap1 = cap1.stop().unwrap();
    let pcap2 = cap2.stop().unwrap();
    let west = labelled_echoes(&pcap1);
    let east = labelled_echoes(&pcap2);
    // On pe1-p: what pe1 sends to p (its requests and its replies to pe2's pings, labels
    // 1002/1012) and what p sends to pe1 (swapped 2001/2011). On pe2-p the mirror image.
    let want_west = pairs(&[
        ("1002", "request4"),
        ("1002", "reply4"),
        ("1012", "request6"),
        ("1012", "reply6"),
        ("2001", "request4"),
        ("2001", "reply4"),
        ("2011", "request6"),
        ("2011", "reply6"),
    ]);
    let want_east = pairs(&[
        ("2002", "request4"),
        ("2002", "reply4"),
        ("2012", "request6"),
        ("2012", "reply6"),
        ("1001", "request4"),
        ("1001", "reply4"),
        ("1011", "request6"),
        ("1011", "reply6"),
    ]);
    assert_eq!(west, want_west, "labels on pe1-p");
    assert_eq!(east, want_east, "labels on pe2-p");
    eprintln!("guests booted, configured and pinged both ways in {ready:?} ({:?} accel)", pe1.accel());
    drop(pe1);
    drop(pe2);
    topo.cleanup().unwrap();
    let _ = std::fs::remove_dir_all(PathBuf::from(&work));
}
