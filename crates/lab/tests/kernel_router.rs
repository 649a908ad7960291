//! Lab machinery against the kernel's own router: h1 -- r -- h2. Needs root.

use std::net::IpAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use vmpls_lab::IpPrefix;
use vmpls_lab::netns;
use vmpls_lab::ping::{IcmpError, PingOptions, ping};
use vmpls_lab::topology::Topology;
use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};

fn p(s: &str) -> IpPrefix {
    s.parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// h1 198.18.101.2 -- .1 r .1 -- 198.18.102.2 h2, and 2001:db8:101::/64, 2001:db8:102::/64.
fn kernel_router(mtu_r_h2: u32) -> Topology {
    let mut t = Topology::new();
    for h in ["h1", "r", "h2"] {
        t.add_host(h).unwrap();
    }
    t.add_link("h1", "h1-r", "r", "r-h1", 1500).unwrap();
    t.add_link("r", "r-h2", "h2", "h2-r", mtu_r_h2).unwrap();
    for (host, ifname, addrs) in [
        ("h1", "h1-r", ["198.18.101.2/24", "2001:db8:101::2/64"]),
        ("r", "r-h1", ["198.18.101.1/24", "2001:db8:101::1/64"]),
        ("r", "r-h2", ["198.18.102.1/24", "2001:db8:102::1/64"]),
        ("h2", "h2-r", ["198.18.102.2/24", "2001:db8:102::2/64"]),
    ] {
        for a in addrs {
            t.add_address(host, ifname, p(a)).unwrap();
        }
    }
    t.add_default_route("h1", ip("198.18.101.1")).unwrap();
    t.add_default_route("h1", ip("2001:db8:101::1")).unwrap();
    t.add_default_route("h2", ip("198.18.102.1")).unwrap();
    t.add_default_route("h2", ip("2001:db8:102::1")).unwrap();
    t.set_forwarding("r", true).unwrap();
    t
}

fn assert_gone(names: &[String]) {
    assert!(!names.is_empty());
    for n in names {
        assert!(!netns::exists(n), "namespace {n} still exists");
    }
}

#[test]
fn kernel_router_pings_and_carries_100_mb_both_ways() {
    let t = kernel_router(1500);
    let names = t.namespaces();
    assert_eq!(names.len(), 3);
    for n in &names {
        assert!(netns::exists(n), "{n}");
    }
    assert_eq!(t.mtu("r", "r-h2").unwrap(), 1500);
    assert_eq!(t.sysctl("r", "net/ipv4/ip_forward").unwrap(), "1");
    assert_eq!(t.sysctl("h1", "net/ipv4/ip_forward").unwrap(), "0");
    let h1_addrs = t.addresses("h1", "h1-r").unwrap();
    assert!(h1_addrs.contains(&p("198.18.101.2/24")), "{h1_addrs:?}");

    for (from, to) in
        [("h1", "198.18.102.2"), ("h1", "2001:db8:102::2"), ("h2", "198.18.101.2"), ("h2", "2001:db8:101::2")]
    {
        let r = ping(t.ns(from).unwrap(), ip(to), &PingOptions::default()).unwrap();
        assert_eq!((r.sent, r.received), (3, 3), "{from} -> {to}: {r:?}");
        assert!(r.errors.is_empty(), "{r:?}");
        assert!(r.replies.iter().all(|x| x.from == ip(to)));
    }

    let opts = FlowOptions { limit: Limit::Bytes(100_000_000), ..FlowOptions::default() };
    let mut ticks = 0;
    let forward =
        run_flow(t.ns("h1").unwrap(), t.ns("h2").unwrap(), ip("198.18.102.2"), &opts, &mut |_| ticks += 1)
            .unwrap();
    assert!(forward.content_ok, "{forward:?}");
    assert_eq!(forward.bytes_received, 100_000_000);
    assert_eq!(forward.bytes_sent, 100_000_000);
    assert!(forward.gbps > 0.0);
    let back = run_flow(t.ns("h2").unwrap(), t.ns("h1").unwrap(), ip("2001:db8:101::2"), &opts, &mut |_| ())
        .unwrap();
    assert!(back.content_ok, "{back:?}");
    assert_eq!(back.bytes_received, 100_000_000);
    eprintln!("h1 -> h2 IPv4: {forward:?}\nh2 -> h1 IPv6: {back:?} (progress calls: {ticks})");

    drop(t);
    assert_gone(&names);
}

#[test]
fn dont_fragment_ping_gets_the_routers_mtu() {
    let t = kernel_router(1400);
    // 1450 bytes of payload + 8 + 20 > 1400 on r's egress link.
    let big = PingOptions { count: 1, size: 1450, dont_fragment: true, ..PingOptions::default() };
    let r = ping(t.ns("h1").unwrap(), ip("198.18.102.2"), &big).unwrap();
    assert_eq!(r.received, 0, "{r:?}");
    assert_eq!(r.errors, vec![IcmpError::FragmentationNeeded { from: ip("198.18.101.1"), mtu: 1400 }]);
    let r = ping(t.ns("h1").unwrap(), ip("2001:db8:102::2"), &big).unwrap();
    assert_eq!(r.received, 0, "{r:?}");
    assert_eq!(r.errors, vec![IcmpError::PacketTooBig { from: ip("2001:db8:101::1"), mtu: 1400 }]);
    // Small enough: passes.
    let small = PingOptions { count: 2, size: 1300, dont_fragment: true, ..PingOptions::default() };
    let r = ping(t.ns("h1").unwrap(), ip("198.18.102.2"), &small).unwrap();
    assert_eq!(r.received, 2, "{r:?}");
    // TTL 1 expires at r.
    let ttl1 = PingOptions { count: 1, ttl: Some(1), ..PingOptions::default() };
    let r = ping(t.ns("h1").unwrap(), ip("198.18.102.2"), &ttl1).unwrap();
    assert_eq!(r.errors, vec![IcmpError::TimeExceeded { from: ip("198.18.101.1") }]);
}

#[test]
fn namespaces_are_removed_after_a_panic() {
    let mut names = Vec::new();
    let result = catch_unwind(AssertUnwindSafe(|| {
        let mut t = Topology::new();
        t.add_host("a").unwrap();
        t.add_host("b").unwrap();
        t.add_link("a", "a-b", "b", "b-a", 9000).unwrap();
        names = t.namespaces();
        // A panic inside a closure running in a namespace reaches the caller...
        t.in_host("a", || panic!("deliberate")).unwrap();
    }));
    assert!(result.is_err());
    // ...and the topology's drop removed everything on the way out.
    assert_gone(&names);
}

#[test]
fn flow_to_an_unreachable_host_times_out_instead_of_hanging() {
    let t = kernel_router(1500);
    // The receiver's address exists, but r stops forwarding: connect must time out.
    t.set_forwarding("r", false).unwrap();
    let opts = FlowOptions {
        limit: Limit::Bytes(1_000_000),
        connect_timeout: Duration::from_secs(1),
        io_timeout: Duration::from_secs(1),
        ..FlowOptions::default()
    };
    let start = std::time::Instant::now();
    let err = run_flow(t.ns("h1").unwrap(), t.ns("h2").unwrap(), ip("198.18.102.2"), &opts, &mut |_| ())
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());
    let msg = format!("{err:#}");
    assert!(msg.contains("connecting to 198.18.102.2"), "{msg}");
}

#[test]
fn flow_that_stalls_midway_ends_with_an_error() {
    let t = kernel_router(1500);
    let opts = FlowOptions {
        limit: Limit::Duration(Duration::from_secs(30)),
        io_timeout: Duration::from_secs(1),
        progress_interval: Duration::from_millis(200),
        ..FlowOptions::default()
    };
    let start = std::time::Instant::now();
    let mut cut = false;
    let err = run_flow(t.ns("h1").unwrap(), t.ns("h2").unwrap(), ip("198.18.102.2"), &opts, &mut |p| {
        // Once data flows, r stops forwarding.
        if !cut && p.bytes > 0 {
            t.set_forwarding("r", false).unwrap();
            cut = true;
        }
    })
    .unwrap_err();
    assert!(cut);
    assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());
    let msg = format!("{err:#}");
    assert!(msg.contains("stalled"), "{msg}");
}
