//! Static neighbours (`neigh add`, `[[neighbor]]`) in the pipeline: frames go to the
//! configured MAC without ARP or neighbour discovery, held frames are released when one
//! is set, what the port hears does not change it, and it never expires.

mod fixtures;

use std::net::IpAddr;
use std::time::Duration;

use fixtures::*;
use vmpls_dataplane::{DropReason, Event, Output};
use vmpls_wire::arp;

/// A MAC no host on the link answers ARP for.
const STATIC_MAC: [u8; 6] = [2, 0, 0, 0, 0x77, 0x01];

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn from_ce1(sport: u16) -> Vec<u8> {
    ipv4_frame(PE1_CE1_MAC, CE1_MAC, &ipv4_tcp(CE1, CE2, 64, sport, 5201, &pattern(100, 1), true))
}

fn set_static(r: &mut Router, port: u16, addr: &str, mac: [u8; 6]) -> Vec<Sent> {
    let mut out = Output::new(r.dp.ports().len());
    r.dp.set_static_neighbor(r.now, port, ip(addr), mac, &mut r.pool, &mut out).unwrap();
    let mut sent = Vec::new();
    for (port, frames) in out.tx.iter_mut().enumerate() {
        for p in frames.drain(..) {
            sent.push(Sent { port: port as u16, frame: p.frame().to_vec(), offload: p.offload });
            r.pool.put(p);
        }
    }
    sent
}

#[test]
fn a_static_neighbor_gets_frames_without_arp_and_never_expires() {
    let mut r = Router::new(pe1_builder(), pe1_ports());
    assert!(set_static(&mut r, PE1_CORE, "198.18.10.2", STATIC_MAC).is_empty());
    let out = r.send(PE1_CE1, &from_ce1(1));
    assert_eq!(out.len(), 1, "{out:?}");
    let p = out[0].parse();
    assert_eq!((out[0].port, p.dst, p.src, p.ethertype), (PE1_CORE, STATIC_MAC, PE1_CORE_MAC, 0x8847));
    // An hour of timers: no request, no expiry.
    for _ in 0..3600 / 5 {
        assert!(r.poll(Duration::from_secs(5)).is_empty());
    }
    let p = r.send(PE1_CE1, &from_ce1(2))[0].parse();
    assert_eq!(p.dst, STATIC_MAC);
    assert_eq!(r.events(Event::ArpRequest), 0);
    // An ARP reply or request from the address with another MAC does not change it.
    let reply = arp_frame(
        P_WEST_MAC,
        v4("198.18.10.2"),
        v4("198.18.10.1"),
        arp::Operation::Reply,
        PE1_CORE_MAC,
        PE1_CORE_MAC,
    );
    r.send(PE1_CORE, &reply);
    r.learn(PE1_CORE, "198.18.10.2", P_WEST_MAC);
    assert_eq!(r.send(PE1_CE1, &from_ce1(3))[0].parse().dst, STATIC_MAC, "the static entry wins");
    r.assert_no_drops();
    // Removed, the address is resolved again.
    assert!(r.dp.remove_neighbor(PE1_CORE, ip("198.18.10.2"), &mut r.pool));
    assert!(!r.dp.remove_neighbor(PE1_CORE, ip("198.18.10.2"), &mut r.pool));
    let p = r.send(PE1_CE1, &from_ce1(4));
    assert_eq!(p[0].parse().ethertype, 0x0806, "ARP again after the static entry went");
}

#[test]
fn setting_a_static_neighbor_releases_the_frames_held_for_it() {
    let mut r = Router::new(pe1_builder(), pe1_ports());
    assert_eq!(r.send(PE1_CE1, &from_ce1(1))[0].parse().ethertype, 0x0806, "ARP request");
    assert!(r.send(PE1_CE1, &from_ce1(2)).is_empty(), "held");
    let out = set_static(&mut r, PE1_CORE, "198.18.10.2", STATIC_MAC);
    assert_eq!(out.len(), 2, "{out:?}");
    assert!(out.iter().all(|s| s.port == PE1_CORE && s.parse().dst == STATIC_MAC));
    // Removing an entry that holds frames drops them, counted.
    r.send(
        PE1_CE1,
        &ipv4_frame(PE1_CE1_MAC, CE1_MAC, &ipv4_tcp(CE1, "198.18.10.9", 64, 1, 2, &[0; 8], true)),
    );
    assert!(r.dp.remove_neighbor(PE1_CORE, ip("198.18.10.9"), &mut r.pool));
    r.assert_only_drop(DropReason::NeighborUnresolved, 1);
}
