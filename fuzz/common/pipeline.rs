//! The whole-pipeline fuzz harness, shared by the cargo-fuzz target
//! (`fuzz/fuzz_targets/pipeline.rs`) and the stable replay of the saved corpus
//! (`crates/dataplane/tests/fuzz_corpus.rs`). Both include this file with `#[path]`, next
//! to the dataplane test fixtures as `crate::fixtures`, which build the seed's pe1, p and
//! pe2 tables with `vmpls_fib::FibBuilder`.
//!
//! An input is a byte string read by [`Reader`] (missing bytes read as zero), not an
//! `arbitrary` structure, so the replay needs no dependency the dataplane crate lacks:
//!
//! ```text
//! byte 0   role (% 3: pe1, p, pe2); bit 7 set: start with no neighbour resolved
//! byte 1   MTU of port 0 (bits 0-1) and port 1 (bits 2-3) from MTUS
//! byte 2-3 output offload caps of port 0 and port 1 (bits: tso4 tso6 uso csum mpls_gso)
//! then up to MAX_OPS operations, each an op byte:
//!   op % 4 == 0  one frame (record below) through Dataplane::process
//!   op % 4 == 1  2 + (op >> 2) % 7 frames through Dataplane::process_batch (GRO)
//!   op % 4 == 2  move the clock by u16 * 16 ms and run Dataplane::poll
//!   op % 4 == 3  a valid frame of the role (template u8 % n), mutated:
//!                n flips (u8 % 8) of (u16 position, u8 xor), a cut (u16, 0 = none),
//!                then the fix-up flags byte as in a record
//! frame record: port byte (% 8: 7 = a port that does not exist, else % 2), flags byte
//!   (bit 0: destination MAC = the port's, bit 1: fill the IPv4 header checksum,
//!   bit 2: fill the ICMP/TCP/UDP checksum, bit 3: 10 bytes of offload metadata follow),
//!   [offload], u16 length, the frame bytes.
//! ```
//!
//! After every step each output frame is checked ([`check_frame`]) and returned to the
//! pool, and the buffers are counted: pool + frames held by the neighbour table must equal
//! [`POOL`]. At the end the clock runs until every held frame is released, and the pool
//! must be full again.
#![allow(dead_code)]

use std::net::IpAddr;
use std::time::{Duration, Instant};

use vmpls_dataplane::{Dataplane, DataplaneConfig, Output, Packet, PacketPool, PortCaps, PortId, PortInfo};
use vmpls_fib::{FibBuilder, FibHandle};
use vmpls_wire::virtio_net::{self, GsoType};
use vmpls_wire::{arp, icmpv4, icmpv6, ipv4, ipv6, mpls, tcp, udp};

use crate::fixtures::*;

/// Packet buffers in the pool of every run.
pub const POOL: usize = 128;
/// Operations read from one input at most.
pub const MAX_OPS: usize = 32;
/// MTUs a port may get.
pub const MTUS: [u32; 4] = [1500, 1280, 9000, 65535];

const ETH: usize = 14;

/// Reads an input front to back; past its end every read yields zeros.
pub struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { data }
    }

    /// True when every byte was read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// One byte.
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    /// A little-endian u16.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.data.split_at(n.min(self.data.len()));
        self.data = b;
        a
    }
}

/// Which seed router a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// pe1: ce1 (0) and core (1).
    Pe1,
    /// p: west (0) and east (1).
    P,
    /// pe2: core (0) and ce2 (1).
    Pe2,
}

impl Role {
    /// The role of an input's first byte.
    pub fn from_byte(b: u8) -> Role {
        [Role::Pe1, Role::P, Role::Pe2][usize::from(b % 3)]
    }

    fn builder(self) -> FibBuilder {
        match self {
            Role::Pe1 => pe1_builder(),
            Role::P => p_builder(),
            Role::Pe2 => pe2_builder(),
        }
    }

    fn ports(self) -> Vec<PortInfo> {
        match self {
            Role::Pe1 => pe1_ports(),
            Role::P => p_ports(),
            Role::Pe2 => pe2_ports(),
        }
    }

    /// The neighbours the fixtures resolve for this router: (port, address, MAC).
    fn neighbours(self) -> [(PortId, &'static str, [u8; 6]); 4] {
        match self {
            Role::Pe1 => [
                (PE1_CE1, CE1, CE1_MAC),
                (PE1_CE1, CE1_V6, CE1_MAC),
                (PE1_CORE, "198.18.10.2", P_WEST_MAC),
                (PE1_CORE, "2001:db8:10::2", P_WEST_MAC),
            ],
            Role::P => [
                (P_WEST, "198.18.10.1", PE1_CORE_MAC),
                (P_WEST, "2001:db8:10::1", PE1_CORE_MAC),
                (P_EAST, "198.18.20.2", PE2_CORE_MAC),
                (P_EAST, "2001:db8:20::2", PE2_CORE_MAC),
            ],
            Role::Pe2 => [
                (PE2_CORE, "198.18.20.1", P_EAST_MAC),
                (PE2_CORE, "2001:db8:20::1", P_EAST_MAC),
                (PE2_CE2, CE2, CE2_MAC),
                (PE2_CE2, CE2_V6, CE2_MAC),
            ],
        }
    }

    /// Valid frames this router forwards or answers, to mutate: (port, frame, offload).
    pub fn templates(self) -> Vec<(PortId, Vec<u8>, virtio_net::Repr)> {
        let none = virtio_net::Repr::default();
        let tcp4 = |src, dst, ttl| ipv4_tcp(src, dst, ttl, 40000, 5201, &pattern(1400, 1), true);
        let tcp6 = |src, dst, hl| ipv6_tcp(src, dst, hl, 40000, 5201, &pattern(300, 2));
        match self {
            Role::Pe1 => {
                // A TCP super-frame with a partial checksum, as a TSO sender hands it over.
                let seg = 1000;
                let tso = ipv4_frame(
                    PE1_CE1_MAC,
                    CE1_MAC,
                    &ipv4_tcp_partial(CE1, CE2, 64, 1, &pattern(3 * seg, 3)),
                );
                let tso_off = virtio_net::Repr {
                    needs_csum: true,
                    gso_type: GsoType::TcpV4,
                    hdr_len: 54,
                    gso_size: seg as u16,
                    csum_start: 34,
                    csum_offset: 16,
                    ..none
                };
                vec![
                    (PE1_CE1, ipv4_frame(PE1_CE1_MAC, CE1_MAC, &tcp4(CE1, CE2, 64)), none),
                    (PE1_CE1, ipv6_frame(PE1_CE1_MAC, CE1_MAC, &tcp6(CE1_V6, CE2_V6, 64)), none),
                    (
                        PE1_CE1,
                        ipv4_frame(PE1_CE1_MAC, CE1_MAC, &ipv4_udp(CE1, CE2, 1, &pattern(64, 4))),
                        none,
                    ),
                    (PE1_CE1, ipv4_frame(PE1_CE1_MAC, CE1_MAC, &icmpv4_echo(CE1, "198.18.1.1", 64)), none),
                    (
                        PE1_CE1,
                        ipv6_frame(PE1_CE1_MAC, CE1_MAC, &icmpv6_echo(CE1_V6, "2001:db8:1::1", 64)),
                        none,
                    ),
                    (PE1_CE1, tso, tso_off),
                    (
                        PE1_CE1,
                        arp_frame(
                            CE1_MAC,
                            v4(CE1),
                            v4("198.18.1.1"),
                            arp::Operation::Request,
                            [0xff; 6],
                            [0; 6],
                        ),
                        none,
                    ),
                    (
                        PE1_CE1,
                        neighbor_solicit(CE1_MAC, v6(CE1_V6), v6("2001:db8:1::1"), PE1_CE1_MAC, false),
                        none,
                    ),
                    (
                        PE1_CORE,
                        mpls_frame(PE1_CORE_MAC, P_WEST_MAC, &[(2001, 64)], &tcp4(CE2, CE1, 64)),
                        none,
                    ),
                ]
            }
            Role::P => vec![
                (P_WEST, mpls_frame(P_WEST_MAC, PE1_CORE_MAC, &[(1002, 64)], &tcp4(CE1, CE2, 64)), none),
                (
                    P_WEST,
                    mpls_frame(
                        P_WEST_MAC,
                        PE1_CORE_MAC,
                        &[(1002, 2), (7, 3), (99_999, 4)],
                        &tcp6(CE1_V6, CE2_V6, 64),
                    ),
                    none,
                ),
                (P_WEST, mpls_frame(P_WEST_MAC, PE1_CORE_MAC, &[(1002, 1)], &tcp4(CE1, CE2, 64)), none),
                (
                    P_EAST,
                    mpls_frame(P_EAST_MAC, PE2_CORE_MAC, &[(1001, 64)], &tcp6(CE2_V6, CE1_V6, 64)),
                    none,
                ),
                (
                    P_WEST,
                    ipv4_frame(P_WEST_MAC, PE1_CORE_MAC, &icmpv4_echo("198.18.10.1", "198.18.10.2", 64)),
                    none,
                ),
            ],
            Role::Pe2 => vec![
                (PE2_CORE, mpls_frame(PE2_CORE_MAC, P_EAST_MAC, &[(2002, 64)], &tcp4(CE1, CE2, 64)), none),
                (
                    PE2_CORE,
                    mpls_frame(PE2_CORE_MAC, P_EAST_MAC, &[(0, 64), (2002, 1)], &tcp6(CE1_V6, CE2_V6, 64)),
                    none,
                ),
                (PE2_CORE, mpls_frame(PE2_CORE_MAC, P_EAST_MAC, &[(2002, 64)], &tcp4(CE1, CE2, 1)), none),
                (
                    PE2_CORE,
                    neighbor_solicit(
                        P_EAST_MAC,
                        v6("2001:db8:20::1"),
                        v6("2001:db8:20::2"),
                        PE2_CORE_MAC,
                        false,
                    ),
                    none,
                ),
                (PE2_CE2, ipv4_frame(PE2_CE2_MAC, CE2_MAC, &tcp4(CE2, CE1, 64)), none),
                (PE2_CE2, ipv6_frame(PE2_CE2_MAC, CE2_MAC, &tcp6(CE2_V6, CE1_V6, 2)), none),
            ],
        }
    }
}

/// Checks one frame the pipeline handed to `port` for sending.
///
/// # Panics
/// On a frame the port must not send: shorter than an Ethernet header; another source MAC
/// than the port's; over the port's MTU without GSO metadata; a label stack with no
/// bottom entry; an IP header that does not check (or a wrong IPv4 header checksum, or a
/// total length other than the frame's); a TTL or hop limit of 0; a malformed ARP packet;
/// any other EtherType.
pub fn check_frame(port: &PortInfo, pkt: &Packet) {
    let f = pkt.frame();
    let gso = pkt.offload.is_gso();
    assert!(f.len() >= ETH, "runt frame out of port {}: {} bytes", port.id, f.len());
    assert_eq!(&f[6..12], &port.mac, "source MAC of a frame out of port {}", port.id);
    if !gso {
        assert!(
            f.len() - ETH <= port.mtu as usize,
            "{} bytes out of port {} over its MTU {}",
            f.len() - ETH,
            port.id,
            port.mtu
        );
    }
    let ethertype = u16::from_be_bytes([f[12], f[13]]);
    let mut l3 = &f[ETH..];
    match ethertype {
        0x8847 => {
            let depth = mpls::stack_depth(l3).expect("a labelled frame out with no bottom of stack");
            assert!(l3[3] >= 1, "a label with TTL 0 sent");
            l3 = &l3[4 * depth..];
            // What is under the labels is the customer's; at the ingress we built it.
            black_box_ip(l3);
        }
        0x0800 => {
            let ip = ipv4::Packet::new_checked(l3).expect("an IPv4 header out that does not check");
            assert!(ip.verify_checksum(), "IPv4 header checksum of a frame out");
            assert!(ip.ttl() >= 1, "an IPv4 packet with TTL 0 sent");
            if !gso {
                assert_eq!(usize::from(ip.total_len()), l3.len(), "IPv4 total length vs frame");
            }
        }
        0x86dd => {
            let ip = ipv6::Packet::new_checked(l3).expect("an IPv6 header out that does not check");
            assert!(ip.hop_limit() >= 1, "an IPv6 packet with hop limit 0 sent");
            if !gso {
                assert_eq!(ip.total_len(), l3.len(), "IPv6 payload length vs frame");
            }
        }
        0x0806 => {
            let p = arp::Packet::new_checked(l3).expect("a malformed ARP packet sent");
            arp::Repr::parse(&p).expect("a non-Ethernet/IPv4 ARP packet sent");
        }
        other => panic!("a frame with EtherType {other:#06x} sent"),
    }
}

fn black_box_ip(ip: &[u8]) {
    std::hint::black_box(ip.first());
}

/// Fills the IPv4 header checksum (`ip_header`) and/or the ICMP/TCP/UDP checksum
/// (`transport`) of the IP packet after the Ethernet header and any label stack, so that
/// mutated frames get past the checks that guard the deeper paths. Leaves what does not
/// parse alone.
pub fn fix_checksums(frame: &mut [u8], ip_header: bool, transport: bool) {
    if frame.len() < ETH {
        return;
    }
    let mut l3 = ETH;
    if frame[12..14] == [0x88, 0x47] {
        match mpls::stack_depth(&frame[ETH..]) {
            Ok(d) => l3 += 4 * d,
            Err(_) => return,
        }
    }
    let ip = &mut frame[l3..];
    match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= 20 => {
            let hl = usize::from(ip[0] & 0x0f) * 4;
            if hl < 20 || hl > ip.len() {
                return;
            }
            if ip_header {
                ip[10] = 0;
                ip[11] = 0;
                let c = vmpls_wire::checksum::checksum(&ip[..hl]);
                ip[10..12].copy_from_slice(&c.to_be_bytes());
            }
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]])).clamp(hl, ip.len());
            let (src, dst, proto) = {
                let p = ipv4::Packet::new_unchecked(&ip[..]);
                (p.src_addr(), p.dst_addr(), p.protocol())
            };
            if !transport {
                return;
            }
            let l4 = &mut ip[hl..total];
            match proto {
                ipv4::protocol::ICMP if l4.len() >= 8 => icmpv4::Packet::new_unchecked(l4).fill_checksum(),
                ipv4::protocol::TCP => {
                    if let Ok(mut t) = tcp::Packet::new_checked(l4) {
                        t.fill_checksum_v4(src, dst);
                    }
                }
                ipv4::protocol::UDP => {
                    if let Ok(mut u) = udp::Packet::new_checked(l4) {
                        u.fill_checksum_v4(src, dst);
                    }
                }
                _ => {}
            }
        }
        Some(6) if ip.len() >= 40 && transport => {
            let (src, dst, next, end) = {
                let p = ipv6::Packet::new_unchecked(&ip[..]);
                (
                    p.src_addr(),
                    p.dst_addr(),
                    p.next_header(),
                    (40 + usize::from(p.payload_len())).min(ip.len()),
                )
            };
            let l4 = &mut ip[40..end];
            match next {
                ipv4::protocol::IPV6_ICMP if l4.len() >= 8 => {
                    icmpv6::Packet::new_unchecked(l4).fill_checksum(src, dst)
                }
                ipv4::protocol::TCP => {
                    if let Ok(mut t) = tcp::Packet::new_checked(l4) {
                        t.fill_checksum_v6(src, dst);
                    }
                }
                ipv4::protocol::UDP => {
                    if let Ok(mut u) = udp::Packet::new_checked(l4) {
                        u.fill_checksum_v6(src, dst);
                    }
                }
                _ => {}
            }
        }
        _ => {}
    }
}

/// Offload metadata from 10 input bytes (any `gso_type` of the five).
fn read_offload(r: &mut Reader<'_>) -> virtio_net::Repr {
    let flags = r.u8();
    let gso = r.u8();
    virtio_net::Repr {
        needs_csum: flags & 1 != 0,
        data_valid: flags & 2 != 0,
        gso_type: [GsoType::None, GsoType::TcpV4, GsoType::Udp, GsoType::TcpV6, GsoType::UdpL4]
            [usize::from(gso & 0x7f) % 5],
        gso_ecn: gso & 0x80 != 0,
        hdr_len: r.u16(),
        gso_size: r.u16(),
        csum_start: r.u16(),
        csum_offset: r.u16(),
    }
}

/// One router under fuzz: its pipeline, a pool of [`POOL`] buffers and a clock.
pub struct Harness {
    dp: Dataplane,
    pool: PacketPool,
    now: Instant,
    ports: Vec<PortInfo>,
    role: Role,
    templates: Option<Vec<(PortId, Vec<u8>, virtio_net::Repr)>>,
}

impl Harness {
    /// The router of `role` with `ports`, neighbours resolved if `resolve`.
    pub fn new(role: Role, ports: Vec<PortInfo>, resolve: bool) -> Harness {
        let fib = role.builder().build().expect("the seed tables build");
        let dp = Dataplane::new(FibHandle::new(fib), ports.clone(), DataplaneConfig::default());
        let mut h =
            Harness { dp, pool: PacketPool::new(POOL), now: Instant::now(), ports, role, templates: None };
        if resolve {
            for (port, addr, mac) in role.neighbours() {
                h.learn(port, addr, mac);
            }
        }
        h
    }

    /// Teaches the router a neighbour the way the fixtures do: an ARP request or a
    /// neighbour solicitation for the port's own address.
    fn learn(&mut self, port: PortId, addr: &str, mac: [u8; 6]) {
        let fib = self.dp.fib().load_full();
        let frame = match addr.parse::<IpAddr>().expect("a fixture address") {
            IpAddr::V4(a) => {
                let target = fib.port_v4(port).expect("the port has an IPv4 address");
                arp_frame(mac, a, target, arp::Operation::Request, [0xff; 6], [0; 6])
            }
            IpAddr::V6(a) => {
                let target = fib.port_v6(port).expect("the port has an IPv6 address");
                neighbor_solicit(mac, a, target, self.ports[usize::from(port)].mac, true)
            }
        };
        let mut pkt = self.pool.get().expect("a buffer");
        pkt.set_frame(&frame);
        pkt.port = port;
        let sent = self.process(pkt);
        assert_eq!(sent, 1, "the router answers the neighbour it learns");
    }

    /// Processes one packet; returns the frames sent.
    fn process(&mut self, pkt: Packet) -> usize {
        let mut out = Output::new(self.ports.len());
        self.dp.process(self.now, pkt, &mut self.pool, &mut out);
        self.drain(out, 0)
    }

    /// Processes a batch the way a port loop does: `process_batch` may stop early when
    /// the pool runs low, and is called again with what is left once the output is sent.
    fn process_batch(&mut self, mut frames: Vec<Packet>) -> usize {
        let mut sent = 0;
        while !frames.is_empty() {
            let before = frames.len();
            let mut out = Output::new(self.ports.len());
            self.dp.process_batch(self.now, &mut frames, &mut self.pool, &mut out);
            assert!(frames.len() < before, "process_batch made no progress");
            sent += self.drain(out, frames.len());
        }
        sent
    }

    fn poll(&mut self, dt: Duration) -> usize {
        self.now += dt;
        let mut out = Output::new(self.ports.len());
        self.dp.poll(self.now, &mut self.pool, &mut out);
        self.drain(out, 0)
    }

    /// Checks and returns every output frame, then counts the buffers: `pending` are
    /// still waiting in the caller's batch.
    fn drain(&mut self, mut out: Output, pending: usize) -> usize {
        let mut n = 0;
        for (port, frames) in out.tx.iter_mut().enumerate() {
            for p in frames.drain(..) {
                assert_eq!(usize::from(p.port), port, "a frame in tx[{port}] says port {}", p.port);
                check_frame(&self.ports[port], &p);
                self.pool.put(p);
                n += 1;
            }
        }
        assert_eq!(
            self.pool.available() + self.dp.neighbors().held() + pending,
            POOL,
            "packet buffers lost: {} in the pool, {} held for resolution, {pending} waiting",
            self.pool.available(),
            self.dp.neighbors().held()
        );
        n
    }

    /// A frame record of the input in a pool buffer; `None` when the pool is empty.
    fn read_frame(&mut self, r: &mut Reader<'_>) -> Option<Packet> {
        let port = match r.u8() % 8 {
            7 => self.ports.len() as PortId,
            p => PortId::from(p % 2),
        };
        let flags = r.u8();
        let offload = if flags & 8 != 0 { read_offload(r) } else { virtio_net::Repr::default() };
        let len = usize::from(r.u16());
        let bytes = r.take(len);
        let mut pkt = self.pool.get()?;
        pkt.set_frame(bytes);
        pkt.port = port;
        pkt.offload = offload;
        self.fix(&mut pkt, flags);
        Some(pkt)
    }

    /// A mutated template frame in a pool buffer.
    fn read_template(&mut self, r: &mut Reader<'_>) -> Option<Packet> {
        let role = self.role;
        let templates = self.templates.get_or_insert_with(|| role.templates());
        let (port, frame, offload) = &templates[usize::from(r.u8()) % templates.len()];
        let mut frame = frame.clone();
        for _ in 0..r.u8() % 8 {
            let at = usize::from(r.u16()) % frame.len();
            frame[at] ^= r.u8();
        }
        let cut = usize::from(r.u16());
        if cut != 0 {
            frame.truncate(cut);
        }
        let flags = r.u8();
        let mut pkt = self.pool.get()?;
        pkt.set_frame(&frame);
        pkt.port = *port;
        pkt.offload = *offload;
        if flags & 8 != 0 {
            pkt.offload = read_offload(r);
        }
        self.fix(&mut pkt, flags);
        Some(pkt)
    }

    fn fix(&self, pkt: &mut Packet, flags: u8) {
        let mac = self.ports.get(usize::from(pkt.port)).map(|p| p.mac);
        let f = pkt.frame_mut();
        if flags & 1 != 0
            && let (Some(mac), Some(dst)) = (mac, f.get_mut(..6))
        {
            dst.copy_from_slice(&mac);
        }
        fix_checksums(f, flags & 2 != 0, flags & 4 != 0);
    }

    /// Runs the clock until the neighbour table has given up on every address, then
    /// checks that every buffer is back in the pool.
    /// Returns the frames sent meanwhile (neighbour requests).
    pub fn finish(&mut self) -> usize {
        let mut sent = 0;
        for _ in 0..32 {
            if self.dp.neighbors().held() == 0 {
                break;
            }
            sent += self.poll(Duration::from_secs(5));
        }
        assert_eq!(self.dp.neighbors().held(), 0, "frames held for resolution forever");
        assert_eq!(self.pool.available(), POOL, "packet buffers lost");
        sent
    }
}

/// The ports of `role` with MTUs and output caps from the input's header bytes.
fn ports_from(role: Role, mtus: u8, caps: [u8; 2]) -> Vec<PortInfo> {
    let mut ports = role.ports();
    for (i, p) in ports.iter_mut().enumerate() {
        p.mtu = MTUS[usize::from(mtus >> (2 * i)) & 3];
        let c = caps[i];
        p.caps = PortCaps {
            tso4: c & 1 != 0,
            tso6: c & 2 != 0,
            uso: c & 4 != 0,
            csum: c & 8 != 0,
            mpls_gso: c & 16 != 0,
        };
    }
    ports
}

/// Runs one input through a router and returns how many frames it sent (not counting the
/// replies to the set-up neighbour requests); panics on any broken invariant.
pub fn run(data: &[u8]) -> usize {
    let mut r = Reader::new(data);
    let head = r.u8();
    let role = Role::from_byte(head);
    let mtus = r.u8();
    let caps = [r.u8(), r.u8()];
    let mut h = Harness::new(role, ports_from(role, mtus, caps), head & 0x80 == 0);
    let mut sent = 0;
    for _ in 0..MAX_OPS {
        if r.is_empty() {
            break;
        }
        let op = r.u8();
        match op % 4 {
            0 => {
                if let Some(pkt) = h.read_frame(&mut r) {
                    sent += h.process(pkt);
                }
            }
            1 => {
                let n = 2 + usize::from(op >> 2) % 7;
                let frames: Vec<Packet> = (0..n).filter_map(|_| h.read_frame(&mut r)).collect();
                sent += h.process_batch(frames);
            }
            2 => {
                let dt = Duration::from_millis(u64::from(r.u16()) * 16);
                sent += h.poll(dt);
            }
            _ => {
                if let Some(pkt) = h.read_template(&mut r) {
                    sent += h.process(pkt);
                }
            }
        }
    }
    sent + h.finish()
}

/// Writes inputs in the format [`run`] reads, for the seed corpus.
#[derive(Debug, Clone)]
pub struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    /// An input for `role`, all ports at MTU 1500 with no output offloads, neighbours
    /// resolved unless `unresolved`.
    pub fn new(role: Role, unresolved: bool) -> Encoder {
        let r = match role {
            Role::Pe1 => 0,
            Role::P => 1,
            Role::Pe2 => 2,
        };
        Encoder { buf: vec![r | if unresolved { 0x80 } else { 0 }, 0, 0, 0] }
    }

    /// Sets the MTU index (into [`MTUS`]) and caps byte of a port.
    pub fn port(mut self, port: usize, mtu: u8, caps: u8) -> Encoder {
        self.buf[1] = (self.buf[1] & !(3 << (2 * port))) | ((mtu & 3) << (2 * port));
        self.buf[2 + port] = caps;
        self
    }

    fn record(&mut self, port: PortId, frame: &[u8], offload: Option<virtio_net::Repr>) {
        self.buf.push(port as u8);
        self.buf.push(if offload.is_some() { 8 } else { 0 });
        if let Some(o) = offload {
            self.buf.push(u8::from(o.needs_csum) | (u8::from(o.data_valid) << 1));
            let g = match o.gso_type {
                GsoType::None => 0,
                GsoType::TcpV4 => 1,
                GsoType::Udp => 2,
                GsoType::TcpV6 => 3,
                GsoType::UdpL4 => 4,
            };
            self.buf.push(g | if o.gso_ecn { 0x80 } else { 0 });
            for v in [o.hdr_len, o.gso_size, o.csum_start, o.csum_offset] {
                self.buf.extend_from_slice(&v.to_le_bytes());
            }
        }
        let len = u16::try_from(frame.len()).expect("a frame of at most 65535 bytes");
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf.extend_from_slice(frame);
    }

    /// One frame through `process`.
    pub fn frame(mut self, port: PortId, frame: &[u8], offload: Option<virtio_net::Repr>) -> Encoder {
        self.buf.push(0);
        self.record(port, frame, offload);
        self
    }

    /// Frames (2 to 8) through `process_batch`.
    pub fn batch(mut self, frames: &[(PortId, Vec<u8>)]) -> Encoder {
        assert!((2..=8).contains(&frames.len()));
        self.buf.push(1 | (((frames.len() - 2) as u8) << 2));
        for (port, f) in frames {
            self.record(*port, f, None);
        }
        self
    }

    /// Moves the clock by `ms` (rounded down to 16 ms steps) and polls.
    pub fn poll(mut self, ms: u32) -> Encoder {
        self.buf.push(2);
        let steps = u16::try_from(ms / 16).unwrap_or(u16::MAX);
        self.buf.extend_from_slice(&steps.to_le_bytes());
        self
    }

    /// Template `index` of the role, unmutated.
    pub fn template(mut self, index: u8) -> Encoder {
        self.buf.extend_from_slice(&[3, index, 0, 0, 0, 0]);
        self
    }

    /// The input.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}
