//! Resource limits, sans I/O: the rate of ARP requests and neighbour solicitations the
//! router originates, the rate and burst of ICMP errors, and the neighbour table's
//! bounds, on pe1 of the seed topology with a clock the tests move.

mod fixtures;

use std::net::IpAddr;
use std::time::Duration;

use fixtures::*;
use vmpls_dataplane::neighbor::NeighborConfig;
use vmpls_dataplane::{DataplaneConfig, DropReason, Event};
use vmpls_wire::arp;

/// A frame from ce1's host to pe1.
fn from_ce1(ip: &[u8]) -> Vec<u8> {
    ipv4_frame(PE1_CE1_MAC, CE1_MAC, ip)
}

/// A UDP packet from ce1 to host `i` of pe1's core subnet (198.18.10.0/24, connected).
fn to_core_host(i: u8) -> Vec<u8> {
    from_ce1(&ipv4_udp(CE1, &core_host(i), 64, &[0x5a; 16]))
}

fn core_host(i: u8) -> String {
    format!("198.18.10.{i}")
}

/// The targets of the ARP requests among `sent`; panics on any other frame.
fn arp_targets(sent: &[Sent]) -> Vec<String> {
    sent.iter()
        .map(|s| {
            let p = s.parse();
            assert_eq!((s.port, p.ethertype), (PE1_CORE, 0x0806), "only ARP requests on the core port");
            let a = arp::Packet::new_checked(&p.l3[..]).unwrap();
            let repr = arp::Repr::parse(&a).unwrap();
            assert_eq!(repr.operation, arp::Operation::Request);
            repr.target_protocol_addr.to_string()
        })
        .collect()
}

fn pe1_with(config: DataplaneConfig) -> Router {
    let mut r = Router::with_config(pe1_builder(), pe1_ports(), config);
    r.resolve_all_pe1();
    r
}

#[test]
fn neighbor_requests_over_the_rate_are_not_sent_and_counted() {
    let cfg = DataplaneConfig {
        neighbor_request_rate: 2,
        neighbor_request_burst: Some(3),
        ..DataplaneConfig::default()
    };
    let mut r = pe1_with(cfg);
    // A scan: one frame to each of ten silent hosts at once.
    let mut asked = Vec::new();
    for i in 50..60 {
        asked.extend(arp_targets(&r.send(PE1_CE1, &to_core_host(i))));
    }
    assert_eq!(asked, ["198.18.10.50", "198.18.10.51", "198.18.10.52"], "the burst, in order");
    assert_eq!(r.events(Event::ArpRequest), 3);
    r.assert_only_drop(DropReason::NeighborRequestSuppressed, 7);
    assert_eq!(r.dp.neighbors().held(), 10, "the frames wait all the same");
    // One second later every host is due again: two tokens.
    assert_eq!(arp_targets(&r.poll(Duration::from_secs(1))).len(), 2);
    assert_eq!(r.drops(DropReason::NeighborRequestSuppressed), 7 + 8);
}

#[test]
fn a_host_whose_request_was_suppressed_is_asked_at_the_next_retransmission() {
    let cfg = DataplaneConfig {
        neighbor_request_rate: 1,
        neighbor_request_burst: Some(1),
        ..DataplaneConfig::default()
    };
    let mut r = pe1_with(cfg);
    assert_eq!(arp_targets(&r.send(PE1_CE1, &to_core_host(50))), ["198.18.10.50"]);
    assert!(r.send(PE1_CE1, &to_core_host(51)).is_empty(), "no token left");
    assert_eq!(r.drops(DropReason::NeighborRequestSuppressed), 1);
    // .50 answers; a second later .51 is asked (one token earned).
    let mac50 = [2, 0, 0, 0, 0x10, 0x50];
    let reply = |mac, host: u8| {
        arp_frame(
            mac,
            v4(&core_host(host)),
            v4("198.18.10.1"),
            arp::Operation::Reply,
            PE1_CORE_MAC,
            PE1_CORE_MAC,
        )
    };
    let released = r.send(PE1_CORE, &reply(mac50, 50));
    assert_eq!((released.len(), released[0].parse().dst), (1, mac50));
    assert_eq!(arp_targets(&r.poll(Duration::from_secs(1))), ["198.18.10.51"]);
    let mac51 = [2, 0, 0, 0, 0x10, 0x51];
    let released = r.send(PE1_CORE, &reply(mac51, 51));
    assert_eq!((released.len(), released[0].parse().dst), (1, mac51), "its held frame goes out");
    assert_eq!(r.drops(DropReason::NeighborUnresolved), 0);
}

#[test]
fn a_long_scan_sends_at_most_burst_plus_rate_times_time() {
    let cfg = DataplaneConfig {
        neighbor_request_rate: 5,
        neighbor_request_burst: Some(4),
        ..DataplaneConfig::default()
    };
    let mut r = pe1_with(cfg);
    // 200 hosts, one every 20 ms (4 s), with the timers run every 100 ms meanwhile and
    // for 5 s after.
    let mut requests = 0;
    for i in 0..200u32 {
        let host = 20 + (i % 200) as u8;
        requests += arp_targets(&r.send(PE1_CE1, &to_core_host(host))).len();
        r.now += Duration::from_millis(20);
        if i % 5 == 4 {
            requests += arp_targets(&r.poll(Duration::ZERO)).len();
        }
    }
    for _ in 0..50 {
        requests += arp_targets(&r.poll(Duration::from_millis(100))).len();
    }
    // The last host is asked for at 4 s, and twice more by 6 s; after 7 s no entry is
    // left to ask for. Demand exceeds the limit all along until then.
    assert!(requests <= 4 + 5 * 7, "{requests} requests");
    assert!(requests >= 4 + 5 * 5, "the limit is used, not undercut: {requests}");
    assert_eq!(r.events(Event::ArpRequest), requests as u64);
    assert!(r.drops(DropReason::NeighborRequestSuppressed) > 200, "most hosts were due more than once");
    // Every frame was either refused or held and then given up on.
    assert_eq!(r.drops(DropReason::NeighborUnresolved) + r.drops(DropReason::NeighborQueueFull), 200);
    assert_eq!(
        (r.dp.neighbors().held(), r.dp.neighbors().entries().filter(|e| e.2.is_none()).count()),
        (0, 0)
    );
}

#[test]
fn neighbor_solicitations_share_the_request_limit() {
    let cfg = DataplaneConfig {
        neighbor_request_rate: 1,
        neighbor_request_burst: Some(2),
        ..DataplaneConfig::default()
    };
    let mut r = pe1_with(cfg);
    let v6 = |i: u8| {
        ipv6_frame(PE1_CE1_MAC, CE1_MAC, &ipv6(CE1_V6, &format!("2001:db8:10::{i:x}"), 17, 64, &[0; 8]))
    };
    assert_eq!(r.send(PE1_CE1, &v6(0x50)).len(), 1);
    assert_eq!(arp_targets(&r.send(PE1_CE1, &to_core_host(50))).len(), 1);
    assert!(r.send(PE1_CE1, &v6(0x51)).is_empty());
    assert!(r.send(PE1_CE1, &to_core_host(51)).is_empty());
    assert_eq!((r.events(Event::NdSolicit), r.events(Event::ArpRequest)), (1, 1));
    r.assert_only_drop(DropReason::NeighborRequestSuppressed, 2);
}

#[test]
fn known_neighbors_are_forwarded_to_while_requests_are_suppressed() {
    let cfg = DataplaneConfig {
        neighbor_request_rate: 1,
        neighbor_request_burst: Some(1),
        ..DataplaneConfig::default()
    };
    let mut r = pe1_with(cfg);
    for i in 50..100 {
        r.send(PE1_CE1, &to_core_host(i));
    }
    assert_eq!(r.drops(DropReason::NeighborRequestSuppressed), 49);
    // p's west port (resolved) still gets ce1's traffic toward ce2.
    let out = r.send(PE1_CE1, &from_ce1(&ipv4_udp(CE1, CE2, 64, &[1; 8])));
    assert_eq!((out.len(), out[0].port, out[0].parse().dst), (1, PE1_CORE, P_WEST_MAC));
}

#[test]
fn a_scan_cannot_keep_the_neighbor_table_full() {
    let cfg = DataplaneConfig {
        neighbor: NeighborConfig { max_entries: 8, max_held_total: 2, ..NeighborConfig::default() },
        ..DataplaneConfig::default()
    };
    let mut r = pe1_with(cfg);
    let resolved = r.dp.neighbors().entries().count();
    for i in 50..80 {
        r.send(PE1_CE1, &to_core_host(i));
    }
    assert_eq!(r.dp.neighbors().entries().count(), 8, "bounded");
    assert_eq!(r.dp.neighbors().held(), 2, "bounded");
    assert_eq!(r.drops(DropReason::NeighborQueueFull), 28);
    // A retransmission interval later, the entries that hold nothing are gone: a new
    // host can be resolved again.
    r.poll(Duration::from_secs(1));
    assert_eq!(r.dp.neighbors().entries().count(), resolved + 2);
    assert_eq!(arp_targets(&r.send(PE1_CE1, &to_core_host(99))), ["198.18.10.99"]);
}

#[test]
fn spoofed_requests_from_one_port_cannot_keep_a_core_next_hop_from_resolving() {
    // A small table, so that one /24 of spoofed senders would fill it all.
    let cfg = DataplaneConfig {
        neighbor: NeighborConfig { max_entries: 64, ..NeighborConfig::default() },
        ..DataplaneConfig::default()
    };
    let mut r = Router::with_config(pe1_builder(), pe1_ports(), cfg);
    // Every address of ce1's subnet asks for pe1's address, each from a MAC of its own.
    for host in 2..=254u8 {
        let mac = [2, 0x66, 0, 0, 1, host];
        let request = arp_frame(
            mac,
            std::net::Ipv4Addr::new(198, 18, 1, host),
            v4("198.18.1.1"),
            arp::Operation::Request,
            [0xff; 6],
            [0; 6],
        );
        assert_eq!(r.send(PE1_CE1, &request).len(), 1, "each request is still answered");
    }
    // ce1's host sends toward ce2, behind the core next hop pe1 has never resolved.
    let out = r.send(PE1_CE1, &from_ce1(&ipv4_udp(CE1, CE2, 64, &[7; 32])));
    assert_eq!(arp_targets(&out), ["198.18.10.2"], "the core next hop is asked for");
    let reply = arp_frame(
        P_WEST_MAC,
        v4("198.18.10.2"),
        v4("198.18.10.1"),
        arp::Operation::Reply,
        PE1_CORE_MAC,
        PE1_CORE_MAC,
    );
    let released = r.send(PE1_CORE, &reply);
    assert_eq!(released.len(), 1, "the held frame goes out");
    let p = released[0].parse();
    assert_eq!((released[0].port, p.dst, p.labels[0].label), (PE1_CORE, P_WEST_MAC, 1002));
    // And forwarding goes on, the flood still in the table.
    let out = r.send(PE1_CE1, &from_ce1(&ipv4_udp(CE1, CE2, 64, &[8; 32])));
    assert_eq!((out.len(), out[0].port), (1, PE1_CORE));
    assert_eq!(r.drops(DropReason::NeighborQueueFull), 0);
    // Two ports: ce1's share is 32 entries, half of them open to what its hosts ask.
    assert_eq!(r.dp.neighbors().port_entries(PE1_CE1), (16, 16));
    assert_eq!(r.events(Event::NeighborEntryRefused), 253 - 16);
}

#[test]
fn the_router_resolves_its_own_next_hops_in_the_half_of_a_port_share_hosts_cannot_take() {
    let cfg = DataplaneConfig {
        neighbor: NeighborConfig {
            max_entries: 64,
            max_entries_per_port: Some(8),
            ..NeighborConfig::default()
        },
        ..DataplaneConfig::default()
    };
    let mut r = Router::with_config(pe1_builder(), pe1_ports(), cfg);
    // Hosts of the core subnet ask for pe1: they fill half the core port's share.
    for host in 100..120u8 {
        let request = arp_frame(
            [2, 0x66, 0, 0, 10, host],
            std::net::Ipv4Addr::new(198, 18, 10, host),
            v4("198.18.10.1"),
            arp::Operation::Request,
            [0xff; 6],
            [0; 6],
        );
        r.send(PE1_CORE, &request);
    }
    assert_eq!(r.dp.neighbors().port_entries(PE1_CORE), (4, 4));
    // p's west port, on the same subnet, is resolved all the same.
    let out = r.send(PE1_CE1, &from_ce1(&ipv4_udp(CE1, CE2, 64, &[7; 32])));
    assert_eq!(arp_targets(&out), ["198.18.10.2"]);
    assert_eq!(r.dp.neighbors().port_entries(PE1_CORE), (5, 4));
}

#[test]
fn icmp_burst_is_configurable_apart_from_the_rate() {
    let cfg = DataplaneConfig { icmp_rate: 1, icmp_burst: Some(5), ..DataplaneConfig::default() };
    let mut r = pe1_with(cfg);
    let expiring = from_ce1(&ipv4_udp(CE1, CE2, 1, &[]));
    let sent: usize = (0..20).map(|_| r.send(PE1_CE1, &expiring).len()).sum();
    assert_eq!(sent, 5, "the burst");
    assert_eq!((r.events(Event::IcmpTimeExceeded), r.drops(DropReason::IcmpSuppressed)), (5, 15));
    r.now += Duration::from_millis(2500);
    let sent: usize = (0..20).map(|_| r.send(PE1_CE1, &expiring).len()).sum();
    assert_eq!(sent, 2, "one a second");
}

#[test]
fn icmp_rate_zero_sends_no_errors_at_all() {
    let cfg = DataplaneConfig { icmp_rate: 0, icmp_burst: Some(10), ..DataplaneConfig::default() };
    let mut r = pe1_with(cfg);
    let expiring = from_ce1(&ipv4_udp(CE1, CE2, 1, &[]));
    let unroutable = from_ce1(&ipv4_udp(CE1, "198.18.99.1", 64, &[]));
    for _ in 0..5 {
        assert!(r.send(PE1_CE1, &expiring).is_empty());
        assert!(r.send(PE1_CE1, &unroutable).is_empty());
    }
    // Echo replies are answers, not errors: still sent.
    let echo = from_ce1(&icmpv4_echo(CE1, "198.18.1.1", 64));
    assert_eq!(r.send(PE1_CE1, &echo).len(), 1);
    r.now += Duration::from_secs(10);
    assert!(r.send(PE1_CE1, &expiring).is_empty(), "time earns nothing");
    assert_eq!(r.drops(DropReason::IcmpSuppressed), 11);
}

#[test]
fn defaults_keep_the_documented_limits() {
    let cfg = DataplaneConfig::default();
    assert_eq!((cfg.icmp_rate, cfg.icmp_burst), (1000, None));
    assert_eq!((cfg.neighbor_request_rate, cfg.neighbor_request_burst), (100, None));
    let n = cfg.neighbor;
    assert_eq!((n.max_entries, n.max_held, n.max_held_total), (4096, 16, 256));
    // The default request burst: 100 hosts asked for at once, the 101st suppressed.
    let mut r = pe1_with(cfg);
    let mut requests = 0;
    for i in 0..101u32 {
        let dst: IpAddr = IpAddr::from([198, 18, 10, 100 + (i as u8)]);
        requests += r.send(PE1_CE1, &from_ce1(&ipv4_udp(CE1, &dst.to_string(), 64, &[]))).len();
    }
    assert_eq!((requests, r.drops(DropReason::NeighborRequestSuppressed)), (100, 1));
}
