//! The rest of the malformed-traffic suite (`lsp_malformed.rs` has the first kinds):
//! hostile and odd frames written into the seed lab's routers with an AF_PACKET
//! injector while a content-checked TCP flow crosses them. Each case ends in the exact
//! drop counter, the exact ICMP reply (read off ce1's link), or the exact packet
//! delivered to ce2 (read off ce2's link); the flow arrives intact. Needs root.
//!
//! Where frames go in (the routers ignore frames sent on their own interfaces, so only
//! the peer router sees them):
//! - "at pe1": from ce1's interface, as ce1 would send them (pe1 pushes label 1002);
//! - "at p": from pe1's core interface, labelled, as pe1 would send them;
//! - "at pe2": from p's east interface, labelled 2002, as p would send them.
//!
//! TTL arithmetic under the uniform model: a packet that goes in at pe1 with TTL t
//! arrives with t - 3; at p with label TTL l over t, with min(t, l - 1) - 1; at pe2
//! with label TTL l over t, with min(t, l) - 1.

mod common;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use common::*;
use vmpls_lab::inject::*;
use vmpls_lab::seed::SeedParams;
use vmpls_lab::stats::RouterStats;
use vmpls_lab::traffic::{FlowOptions, FlowResult, Limit, run_flow};

const CE1: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
const CE2: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 2);
const CE1_6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);
const CE2_6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 2);

/// Where a frame goes in: the host and interface it is written on, and the router (and
/// its interface) that receives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Site {
    Pe1,
    P,
    Pe2,
    /// pe1's core port, from p's side (ARP and ND toward pe1 as p would send them).
    Pe1Core,
}

impl Site {
    /// (host, interface written on, receiving router, its interface)
    fn ends(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            Site::Pe1 => ("ce1", "ce1-pe1", "pe1", "pe1-ce1"),
            Site::P => ("pe1", "pe1-p", "p", "p-pe1"),
            Site::Pe2 => ("p", "p-pe2", "pe2", "pe2-p"),
            Site::Pe1Core => ("p", "p-pe1", "pe1", "pe1-p"),
        }
    }
}

const SITES: [Site; 4] = [Site::Pe1, Site::P, Site::Pe2, Site::Pe1Core];

/// The MACs of the injection sites: (destination, source) per site.
struct Macs(BTreeMap<Site, ([u8; 6], [u8; 6])>);

impl Macs {
    fn read(lab: &Lab) -> Macs {
        let mut m = BTreeMap::new();
        for site in SITES {
            let (host, ifname, router, rif) = site.ends();
            let dst = interface_mac(&lab.ns(router), rif).unwrap();
            let src = interface_mac(&lab.ns(host), ifname).unwrap();
            m.insert(site, (dst, src));
        }
        Macs(m)
    }

    fn frame(&self, site: Site, ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let (dst, src) = self.0[&site];
        ethernet(dst, src, ethertype, payload)
    }

    /// An IP packet as a frame for `site`: bare at pe1, under `labels` (label, TTL)
    /// elsewhere.
    fn ip_frame(&self, site: Site, labels: &[(u32, u8)], ip: &[u8]) -> Vec<u8> {
        if labels.is_empty() {
            let ethertype = if ip[0] >> 4 == 6 { ETHERTYPE_IPV6 } else { ETHERTYPE_IPV4 };
            return self.frame(site, ethertype, ip);
        }
        self.frame(site, ETHERTYPE_MPLS, &stack(labels, ip))
    }
}

/// An open injector per site.
fn injectors(lab: &Lab) -> BTreeMap<Site, Injector> {
    SITES
        .into_iter()
        .map(|site| {
            let (host, ifname, _, _) = site.ends();
            (site, Injector::open(&lab.ns(host), ifname).unwrap())
        })
        .collect()
}

/// Label stack entries (bottom-of-stack on the last) followed by `payload`.
fn stack(labels: &[(u32, u8)], payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for (i, &(label, ttl)) in labels.iter().enumerate() {
        v.extend_from_slice(&mpls_entry(label, 0, i + 1 == labels.len(), ttl));
    }
    v.extend_from_slice(payload);
    v
}

/// `ip` with its TTL / hop limit set to `ttl` (IPv4 checksum redone).
fn with_ttl(ip: &[u8], ttl: u8) -> Vec<u8> {
    let mut p = ip.to_vec();
    if p[0] >> 4 == 4 {
        set_ipv4_ttl(&mut p, ttl);
    } else {
        p[7] = ttl;
    }
    p
}

/// Sets the IPv6 flow label (the tests' case key for IPv6).
fn flow_label(mut ip: Vec<u8>, label: u32) -> Vec<u8> {
    ip[1] = (ip[1] & 0xf0) | ((label >> 16) & 0x0f) as u8;
    ip[2] = (label >> 8) as u8;
    ip[3] = label as u8;
    ip
}

/// A TCP segment ce1 -> ce2 with only ACK set, `seq`, and `payload`, its checksum
/// computed as if it were a whole datagram (so only a fragment check can keep GRO from
/// merging it).
fn tcp_segment(src: IpAddr, dst: IpAddr, seq: u32, payload: &[u8]) -> Vec<u8> {
    use vmpls_wire::checksum as c;
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&5001u16.to_be_bytes());
    t[2..4].copy_from_slice(&5002u16.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&1u32.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = 0x10;
    t[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
    t.extend_from_slice(payload);
    let len = t.len() as u32;
    let pseudo = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => c::pseudo_header_v4(s, d, 6, len),
        (IpAddr::V6(s), IpAddr::V6(d)) => c::pseudo_header_v6(s, d, 6, len),
        _ => unreachable!("one family"),
    };
    let sum = c::finish(c::add(pseudo, c::sum(&t)));
    t[16..18].copy_from_slice(&sum.to_be_bytes());
    t
}

/// An ICMP error a test expects back at ce1.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Expect {
    from: IpAddr,
    icmp_type: u8,
    code: u8,
    /// The MTU a "fragmentation needed" / "packet too big" announces.
    mtu: Option<u32>,
    /// The RFC 4950 label stack object: (label, TTL) as the router received them.
    labels: Vec<(u32, u8)>,
}

/// One kind of hostile frame and what must become of it.
struct Case {
    /// The key that finds its packets and the ICMP errors quoting them: the IPv4
    /// identification or the IPv6 flow label.
    key: u32,
    name: String,
    site: Site,
    /// Sent in order, every round.
    frames: Vec<Vec<u8>>,
    /// (router, drop reason, count per round).
    drops: Vec<(&'static str, &'static str, u64)>,
    /// (router, event, count per round).
    events: Vec<(&'static str, &'static str, u64)>,
    /// IP packets that reach ce2, byte for byte, once per round.
    deliver: Vec<Vec<u8>>,
    /// The ICMP error that reaches ce1, once per round; `None`: none from any router.
    reply: Option<Expect>,
}

/// Builds the cases, handing out keys.
struct Cases {
    list: Vec<Case>,
    next: u32,
}

impl Cases {
    fn new() -> Cases {
        Cases { list: Vec::new(), next: 1 }
    }

    /// The key for the next case.
    fn key(&self) -> u32 {
        0x5000 + self.next
    }

    fn add(&mut self, name: impl Into<String>, site: Site, frames: Vec<Vec<u8>>) -> &mut Case {
        self.list.push(Case {
            key: self.key(),
            name: name.into(),
            site,
            frames,
            drops: Vec::new(),
            events: Vec::new(),
            deliver: Vec::new(),
            reply: None,
        });
        self.next += 1;
        self.list.last_mut().unwrap()
    }
}

impl Case {
    fn drop(&mut self, router: &'static str, reason: &'static str) -> &mut Case {
        self.drops.push((router, reason, 1));
        self
    }

    fn event(&mut self, router: &'static str, name: &'static str) -> &mut Case {
        self.events.push((router, name, 1));
        self
    }

    fn deliver(&mut self, ip: Vec<u8>) -> &mut Case {
        self.deliver.push(ip);
        self
    }

    fn reply(&mut self, e: Expect) -> &mut Case {
        self.reply = Some(e);
        self
    }
}

fn time_exceeded(from: &str, labels: &[(u32, u8)]) -> Expect {
    let from = ip(from);
    let icmp_type = if from.is_ipv4() { 11 } else { 3 };
    Expect { from, icmp_type, code: 0, mtu: None, labels: labels.to_vec() }
}

/// A UDP datagram ce1 -> ce2 (discard port) with `len` bytes of payload, keyed.
fn udp4(key: u32, ttl: u8, frag: u16, len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|i| (i as u8) ^ (key as u8)).collect();
    let d = udp(IpAddr::V4(CE1), IpAddr::V4(CE2), 40000, 9, &payload);
    ipv4_packet(CE1, CE2, ttl, 17, key as u16, frag, &d)
}

/// An IPv6 packet ce1 -> ce2, keyed, with `next` and `payload`.
fn pkt6(key: u32, hop: u8, next: u8, payload: &[u8]) -> Vec<u8> {
    flow_label(ipv6_packet(CE1_6, CE2_6, hop, next, payload), key)
}

/// A UDP datagram for IPv6 ce1 -> ce2 with `len` bytes of payload.
fn udp6_datagram(key: u32, len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|i| (i as u8) ^ (key as u8)).collect();
    udp(IpAddr::V6(CE1_6), IpAddr::V6(CE2_6), 40000, 9, &payload)
}

/// Extension headers in order: each as (the next-header value naming it, its bytes).
type Chain = Vec<(u8, Vec<u8>)>;

/// Extension header chains ending in `upper`, by name.
fn chains(upper: u8) -> Vec<(&'static str, Chain)> {
    // Each header is built naming the one after it.
    let build = |kinds: &[(u8, usize)]| -> Chain {
        kinds
            .iter()
            .enumerate()
            .map(|(i, &(kind, len))| {
                let next = kinds.get(i + 1).map_or(upper, |k| k.0);
                let bytes = match kind {
                    ext::FRAGMENT => ipv6_fragment_header(next, 0, false, 0x77).to_vec(),
                    ext::ROUTING => ipv6_options_header(next, len, true),
                    _ => ipv6_options_header(next, len, false),
                };
                (kind, bytes)
            })
            .collect()
    };
    let mut long = vec![(ext::HOP_BY_HOP, 8), (ext::DEST_OPTS, 16), (ext::ROUTING, 24)];
    long.extend(std::iter::repeat_n((ext::DEST_OPTS, 8), 12));
    long.extend([(ext::FRAGMENT, 8), (ext::DEST_OPTS, 64)]);
    vec![
        ("hop-by-hop", build(&[(ext::HOP_BY_HOP, 8)])),
        ("routing (type 253, no segments left)", build(&[(ext::ROUTING, 16)])),
        ("atomic fragment", build(&[(ext::FRAGMENT, 8)])),
        ("destination options", build(&[(ext::DEST_OPTS, 24)])),
        ("17 headers", build(&long)),
    ]
}

/// The IPv6 payload of a chain and its first next-header value.
fn chain_payload(headers: &[(u8, Vec<u8>)], upper: &[u8]) -> (u8, Vec<u8>) {
    let mut v: Vec<u8> = headers.iter().flat_map(|(_, h)| h.iter().copied()).collect();
    v.extend_from_slice(upper);
    (headers[0].0, v)
}

/// Every case of the flow test.
fn flow_cases(m: &Macs) -> Vec<Case> {
    let mut c = Cases::new();
    let ce1 = IpAddr::V4(CE1);

    // ------------------------------------------------ IPv6 extension header chains
    for (site, labels, aged) in [(Site::Pe1, vec![], 61), (Site::Pe2, vec![(2002, 64)], 63)] {
        for (name, headers) in chains(17) {
            let key = c.key();
            let (next, payload) = chain_payload(&headers, &udp6_datagram(key, 40));
            let p = pkt6(key, 64, next, &payload);
            c.add(format!("IPv6 {name} at {site:?}"), site, vec![m.ip_frame(site, &labels, &p)])
                .deliver(with_ttl(&p, aged));
        }
        // A chain cut short: the destination options header claims 64 bytes, the
        // packet ends 16 bytes into it. Not the router's to parse: forwarded as it is.
        let key = c.key();
        let mut payload = ipv6_options_header(ext::DEST_OPTS, 8, false);
        payload.extend_from_slice(&ipv6_options_header(17, 64, false)[..16]);
        let p = pkt6(key, 64, ext::HOP_BY_HOP, &payload);
        c.add(format!("IPv6 chain cut mid-header at {site:?}"), site, vec![m.ip_frame(site, &labels, &p)])
            .deliver(with_ttl(&p, aged));
    }

    // ------------------------------------------------ fragments
    {
        // A 2400-byte UDP datagram in three IPv4 fragments, first to last, at pe1.
        let key = c.key();
        let d = udp(ce1, IpAddr::V4(CE2), 40000, 9, &(0..2392).map(|i| i as u8).collect::<Vec<u8>>());
        let frags: Vec<Vec<u8>> = d
            .chunks(800)
            .enumerate()
            .map(|(i, part)| {
                let more = if i < 2 { IPV4_MF } else { 0 };
                ipv4_packet(CE1, CE2, 64, 17, key as u16, more | (i as u16 * 100), part)
            })
            .collect();
        let case = c.add("IPv4 UDP in three fragments at pe1", Site::Pe1, vec![]);
        for f in &frags {
            case.frames.push(m.ip_frame(Site::Pe1, &[], f));
            case.deliver(with_ttl(f, 61));
        }
        // The same in IPv6 fragments.
        let key = c.key();
        let d = udp6_datagram(key, 2392);
        let case = c.add("IPv6 UDP in three fragments at pe1", Site::Pe1, vec![]);
        for (i, part) in d.chunks(800).enumerate() {
            let mut payload = ipv6_fragment_header(17, i as u16 * 100, i < 2, key).to_vec();
            payload.extend_from_slice(part);
            let f = pkt6(key, 64, ext::FRAGMENT, &payload);
            case.frames.push(m.ip_frame(Site::Pe1, &[], &f));
            case.deliver(with_ttl(&f, 61));
        }
    }
    {
        // TCP-looking fragments leaving the LSP at pe2, back to back: first fragments
        // (offset 0, more to come) and later ones whose payload reads like consecutive
        // TCP segments. GRO must not merge them, nor take them for TCP.
        let case = c.add("IPv4 fragments of TCP at pe2 (GRO)", Site::Pe2, vec![]);
        for (i, frag) in [IPV4_MF, IPV4_MF, IPV4_MF, IPV4_MF, 200, 300, 400, 500].into_iter().enumerate() {
            let seg = tcp_segment(ce1, IpAddr::V4(CE2), 1000 + 100 * i as u32, &[i as u8; 100]);
            // Identifications outside the range of case keys.
            let p = ipv4_packet(CE1, CE2, 64, 6, 0x7000 + i as u16, frag, &seg);
            case.frames.push(m.ip_frame(Site::Pe2, &[(2002, 64)], &p));
            case.deliver(with_ttl(&p, 63));
        }
        let key = c.key();
        let case = c.add("IPv6 TCP behind fragment headers at pe2 (GRO)", Site::Pe2, vec![]);
        for i in 0..4u32 {
            let seg = tcp_segment(IpAddr::V6(CE1_6), IpAddr::V6(CE2_6), 1000 + 100 * i, &[i as u8; 100]);
            let mut payload = ipv6_fragment_header(6, 0, false, key).to_vec();
            payload.extend_from_slice(&seg);
            let p = pkt6(key, 64, ext::FRAGMENT, &payload);
            case.frames.push(m.ip_frame(Site::Pe2, &[(2002, 64)], &p));
            case.deliver(with_ttl(&p, 63));
        }
    }

    // ------------------------------------------------ ICMP errors about ICMP errors
    // Quoted in the errors injected: some packet ce2 -> ce1.
    let quoted = udp4(0x4444, 5, 0, 8);
    for (name, t, code) in
        [("time exceeded", 11, 0), ("port unreachable", 3, 3), ("parameter problem", 12, 0)]
    {
        let key = c.key();
        let p = ipv4_packet(CE1, CE2, 1, 1, key as u16, 0, &icmpv4(t, code, [0; 4], &quoted));
        c.add(format!("ICMP {name} with TTL 1 at pe1"), Site::Pe1, vec![m.ip_frame(Site::Pe1, &[], &p)])
            .drop("pe1", "ip_ttl_expired");
    }
    for (name, t) in [("echo request", 8), ("echo reply", 0)] {
        let key = c.key();
        let p = ipv4_packet(CE1, CE2, 1, 1, key as u16, 0, &icmpv4(t, 0, [0, 1, 0, 1], &[0x61; 32]));
        c.add(format!("ICMP {name} with TTL 1 at pe1"), Site::Pe1, vec![m.ip_frame(Site::Pe1, &[], &p)])
            .drop("pe1", "ip_ttl_expired")
            .event("pe1", "icmp_time_exceeded_sent")
            .reply(time_exceeded(PE1_V4, &[]));
    }
    {
        let key = c.key();
        let p = ipv4_packet(CE1, CE2, 1, 1, key as u16, 3, &[0x61; 32]);
        c.add(
            "non-first fragment of an echo request, TTL 1, at pe1",
            Site::Pe1,
            vec![m.ip_frame(Site::Pe1, &[], &p)],
        )
        .drop("pe1", "ip_ttl_expired");
    }
    let quoted6 = ipv6_packet(CE2_6, CE1_6, 5, 17, &[0; 8]);
    for (name, t, code) in [("unreachable", 1, 4), ("time exceeded", 3, 0), ("packet too big", 2, 0)] {
        let key = c.key();
        let p = pkt6(key, 1, 58, &icmpv6(CE1_6, CE2_6, t, code, &[&[0, 0, 5, 0xdc][..], &quoted6].concat()));
        c.add(
            format!("ICMPv6 {name} with hop limit 1 at pe1"),
            Site::Pe1,
            vec![m.ip_frame(Site::Pe1, &[], &p)],
        )
        .drop("pe1", "ip_ttl_expired");
    }
    {
        let key = c.key();
        let p = pkt6(key, 1, 58, &icmpv6(CE1_6, CE2_6, 128, 0, &[0, 1, 0, 1, 0x61, 0x62]));
        c.add("ICMPv6 echo request with hop limit 1 at pe1", Site::Pe1, vec![m.ip_frame(Site::Pe1, &[], &p)])
            .drop("pe1", "ip_ttl_expired")
            .event("pe1", "icmp_time_exceeded_sent")
            .reply(time_exceeded(PE1_V6, &[]));
        // Behind extension headers: the error is still an error, the echo an echo.
        let key = c.key();
        let error = icmpv6(CE1_6, CE2_6, 1, 4, &[&[0; 4][..], &quoted6].concat());
        let (next, payload) = chain_payload(&chains(58)[3].1, &error);
        let p = pkt6(key, 1, next, &payload);
        c.add(
            "ICMPv6 unreachable behind options, hop limit 1, at pe1",
            Site::Pe1,
            vec![m.ip_frame(Site::Pe1, &[], &p)],
        )
        .drop("pe1", "ip_ttl_expired");
        let key = c.key();
        let echo = icmpv6(CE1_6, CE2_6, 128, 0, &[0, 1, 0, 2, 0x61, 0x62]);
        let (next, payload) = chain_payload(&chains(58)[4].1, &echo);
        let p = pkt6(key, 1, next, &payload);
        c.add(
            "ICMPv6 echo behind 17 headers, hop limit 1, at pe1",
            Site::Pe1,
            vec![m.ip_frame(Site::Pe1, &[], &p)],
        )
        .drop("pe1", "ip_ttl_expired")
        .event("pe1", "icmp_time_exceeded_sent")
        .reply(time_exceeded(PE1_V6, &[]));
        // A later fragment, and a chain cut short: the upper layer cannot be known.
        let key = c.key();
        let mut payload = ipv6_fragment_header(58, 10, false, key).to_vec();
        payload.extend_from_slice(&[0x61; 16]);
        let p = pkt6(key, 1, ext::FRAGMENT, &payload);
        c.add("IPv6 later fragment with hop limit 1 at pe1", Site::Pe1, vec![m.ip_frame(Site::Pe1, &[], &p)])
            .drop("pe1", "ip_ttl_expired");
        let key = c.key();
        let cut = ipv6_options_header(58, 64, false)[..24].to_vec();
        let p = pkt6(key, 1, ext::DEST_OPTS, &cut);
        c.add(
            "IPv6 chain cut short with hop limit 1 at pe1",
            Site::Pe1,
            vec![m.ip_frame(Site::Pe1, &[], &p)],
        )
        .drop("pe1", "ip_ttl_expired");
    }
    {
        // The same rule where labels expire and after a pop.
        let key = c.key();
        let p = ipv4_packet(CE1, CE2, 64, 1, key as u16, 0, &icmpv4(3, 1, [0; 4], &quoted));
        c.add(
            "ICMP unreachable under label TTL 1 at p",
            Site::P,
            vec![m.ip_frame(Site::P, &[(1002, 1)], &p)],
        )
        .drop("p", "label_ttl_expired");
        let key = c.key();
        let p = pkt6(key, 1, 58, &icmpv6(CE1_6, CE2_6, 3, 0, &[&[0; 4][..], &quoted6].concat()));
        c.add(
            "ICMPv6 time exceeded, hop limit 1, popped at pe2",
            Site::Pe2,
            vec![m.ip_frame(Site::Pe2, &[(2002, 64)], &p)],
        )
        .drop("pe2", "ip_ttl_expired");
    }

    // ------------------------------------------------ TTL 0 and 1 at every role
    for ttl in [1, 0] {
        let key = c.key();
        let p = udp4(key, ttl, 0, 32);
        c.add(format!("IP TTL {ttl} into pe1"), Site::Pe1, vec![m.ip_frame(Site::Pe1, &[], &p)])
            .drop("pe1", "ip_ttl_expired")
            .event("pe1", "icmp_time_exceeded_sent")
            .reply(time_exceeded(PE1_V4, &[]));
        let key = c.key();
        let p = pkt6(key, ttl, 17, &udp6_datagram(key, 32));
        c.add(format!("IPv6 hop limit {ttl} into pe1"), Site::Pe1, vec![m.ip_frame(Site::Pe1, &[], &p)])
            .drop("pe1", "ip_ttl_expired")
            .event("pe1", "icmp_time_exceeded_sent")
            .reply(time_exceeded(PE1_V6, &[]));
        // Label TTL at p: the error goes on along the LSP to pe2, which routes it back.
        let key = c.key();
        let p = udp4(key, 64, 0, 32);
        c.add(format!("label TTL {ttl} at p"), Site::P, vec![m.ip_frame(Site::P, &[(1002, ttl)], &p)])
            .drop("p", "label_ttl_expired")
            .event("p", "icmp_time_exceeded_sent")
            .event("p", "icmp_sent_along_lsp")
            .reply(time_exceeded(P_V4, &[(1002, ttl)]));
        let key = c.key();
        let p = pkt6(key, 64, 17, &udp6_datagram(key, 32));
        c.add(
            format!("label TTL {ttl} over IPv6 at p"),
            Site::P,
            vec![m.ip_frame(Site::P, &[(1002, ttl)], &p)],
        )
        .drop("p", "label_ttl_expired")
        .event("p", "icmp_time_exceeded_sent")
        .event("p", "icmp_sent_along_lsp")
        .reply(time_exceeded(P_V6, &[(1002, ttl)]));
        // Label TTL at pe2, where the label is popped.
        let key = c.key();
        let p = udp4(key, 64, 0, 32);
        c.add(format!("label TTL {ttl} at pe2"), Site::Pe2, vec![m.ip_frame(Site::Pe2, &[(2002, ttl)], &p)])
            .drop("pe2", "label_ttl_expired")
            .event("pe2", "icmp_time_exceeded_sent")
            .reply(time_exceeded(PE2_V4, &[(2002, ttl)]));
        // IP TTL after the pop at pe2.
        let key = c.key();
        let p = udp4(key, ttl, 0, 32);
        c.add(
            format!("IP TTL {ttl} under label 2002 at pe2"),
            Site::Pe2,
            vec![m.ip_frame(Site::Pe2, &[(2002, 64)], &p)],
        )
        .drop("pe2", "ip_ttl_expired")
        .event("pe2", "icmp_time_exceeded_sent")
        .reply(time_exceeded(PE2_V4, &[(2002, 64)]));
        let key = c.key();
        let p = pkt6(key, ttl, 17, &udp6_datagram(key, 32));
        c.add(
            format!("hop limit {ttl} under label 2002 at pe2"),
            Site::Pe2,
            vec![m.ip_frame(Site::Pe2, &[(2002, 64)], &p)],
        )
        .drop("pe2", "ip_ttl_expired")
        .event("pe2", "icmp_time_exceeded_sent")
        .reply(time_exceeded(PE2_V6, &[(2002, 64)]));
    }
    {
        // One above: forwarded with what is left.
        let key = c.key();
        let p = udp4(key, 2, 0, 32);
        c.add("IP TTL 2 under label 2002 at pe2", Site::Pe2, vec![m.ip_frame(Site::Pe2, &[(2002, 64)], &p)])
            .deliver(with_ttl(&p, 1));
        let key = c.key();
        let p = udp4(key, 64, 0, 32);
        c.add(
            "label TTL 2 at pe2 (uniform: IP TTL 2)",
            Site::Pe2,
            vec![m.ip_frame(Site::Pe2, &[(2002, 2)], &p)],
        )
        .deliver(with_ttl(&p, 1));
        // Label TTL 3 at p leaves 2 for pe2, which leaves 1 for the IP packet.
        let key = c.key();
        let p = udp4(key, 64, 0, 32);
        c.add("label TTL 3 at p", Site::P, vec![m.ip_frame(Site::P, &[(1002, 3)], &p)])
            .deliver(with_ttl(&p, 1));
    }

    // ------------------------------------------------ label stack depth
    // The limit is 32 entries (MAX_LABELS in the pipeline). Explicit nulls under the
    // top label let a full stack cross: pe2 pops them all.
    for (site, top, deep_ok_ttl) in [(Site::P, (1002, 64), 62), (Site::Pe2, (2002, 64), 63)] {
        let router = site.ends().2;
        for depth in [32usize, 33, 64] {
            let key = c.key();
            let p = udp4(key, 64, 0, 32);
            let mut labels = vec![top];
            labels.extend(std::iter::repeat_n((0, 64), depth - 1));
            let case = c.add(
                format!("{depth} labels at {router}"),
                site,
                vec![m.frame(site, ETHERTYPE_MPLS, &stack(&labels, &p))],
            );
            if depth <= 32 {
                case.deliver(with_ttl(&p, deep_ok_ttl));
            } else {
                case.drop(router, "label_stack_too_deep");
            }
        }
    }

    // ------------------------------------------------ IPv4 and IPv6 lengths
    {
        let key = c.key();
        let mut p = udp4(key, 64, 0, 32);
        p[2..4].copy_from_slice(&1000u16.to_be_bytes());
        let p = with_ttl(&p, 64); // checksum redone
        c.add("IPv4 total length beyond the frame at pe1", Site::Pe1, vec![m.ip_frame(Site::Pe1, &[], &p)])
            .drop("pe1", "bad_ipv4_header");
        c.add("the same under label 2002 at pe2", Site::Pe2, vec![m.ip_frame(Site::Pe2, &[(2002, 64)], &p)])
            .drop("pe2", "bad_ipv4_header");
        for total in [12u16, 19] {
            let key = c.key();
            let mut p = udp4(key, 64, 0, 32);
            p[2..4].copy_from_slice(&total.to_be_bytes());
            let p = with_ttl(&p, 64);
            c.add(
                format!("IPv4 total length {total} (under the header) at pe1"),
                Site::Pe1,
                vec![m.ip_frame(Site::Pe1, &[], &p)],
            )
            .drop("pe1", "bad_ipv4_header");
        }
        // Shorter than the frame: the rest is Ethernet padding, cut off.
        let key = c.key();
        let p = udp4(key, 64, 0, 12);
        let mut padded = p.clone();
        padded.extend_from_slice(&[0xee; 20]);
        c.add(
            "IPv4 packet with 20 bytes of padding behind it at pe1",
            Site::Pe1,
            vec![m.ip_frame(Site::Pe1, &[], &padded)],
        )
        .deliver(with_ttl(&p, 61));
        let key = c.key();
        let mut p = pkt6(key, 64, 17, &udp6_datagram(key, 32));
        p[4..6].copy_from_slice(&500u16.to_be_bytes());
        c.add("IPv6 payload length beyond the frame at pe1", Site::Pe1, vec![m.ip_frame(Site::Pe1, &[], &p)])
            .drop("pe1", "bad_ipv6_header");
    }

    // ------------------------------------------------ the MTU of pe2's customer port
    // Labelled into p (the core MTU is 64 KiB): what pe2 sends ce2 is the IP packet.
    {
        let key = c.key();
        let p = udp4(key, 64, IPV4_DF, 1500 - 28);
        c.add("IPv4 of 1500 bytes with DF", Site::P, vec![m.ip_frame(Site::P, &[(1002, 64)], &p)])
            .deliver(with_ttl(&p, 62));
        let key = c.key();
        let p = udp4(key, 64, IPV4_DF, 1501 - 28);
        c.add("IPv4 of 1501 bytes with DF", Site::P, vec![m.ip_frame(Site::P, &[(1002, 64)], &p)])
            .drop("pe2", "mtu_exceeded")
            .event("pe2", "icmp_too_big_sent")
            .reply(Expect { from: ip(PE2_V4), icmp_type: 3, code: 4, mtu: Some(1500), labels: vec![] });
        // Without DF: fragmented at pe2, 1480 + 1 bytes of payload.
        let key = c.key();
        let p = udp4(key, 64, 0, 1501 - 28);
        let data = &p[20..];
        c.add("IPv4 of 1501 bytes without DF", Site::P, vec![m.ip_frame(Site::P, &[(1002, 64)], &p)])
            .event("pe2", "ipv4_fragmented")
            .deliver(ipv4_packet(CE1, CE2, 62, 17, key as u16, IPV4_MF, &data[..1480]))
            .deliver(ipv4_packet(CE1, CE2, 62, 17, key as u16, 185, &data[1480..]));
        let key = c.key();
        let p = pkt6(key, 64, 17, &udp6_datagram(key, 1500 - 48));
        c.add("IPv6 of 1500 bytes", Site::P, vec![m.ip_frame(Site::P, &[(1002, 64)], &p)])
            .deliver(with_ttl(&p, 62));
        let key = c.key();
        let p = pkt6(key, 64, 17, &udp6_datagram(key, 1501 - 48));
        c.add("IPv6 of 1501 bytes", Site::P, vec![m.ip_frame(Site::P, &[(1002, 64)], &p)])
            .drop("pe2", "mtu_exceeded")
            .event("pe2", "icmp_too_big_sent")
            .reply(Expect { from: ip(PE2_V6), icmp_type: 2, code: 0, mtu: Some(1500), labels: vec![] });
    }
    c.list
}

/// An ICMP error seen at ce1, decoded.
#[derive(Debug, Clone)]
struct Seen {
    from: IpAddr,
    to: IpAddr,
    icmp_type: u8,
    code: u8,
    /// Bytes 4..8 of the ICMP header.
    word: u32,
    /// The key of the packet it quotes (IPv4 identification / IPv6 flow label).
    quoted_key: u32,
    labels: Vec<(u32, u8)>,
}

/// Decodes an ICMP or ICMPv6 error in a frame, or `None` for anything else.
fn icmp_error(frame: &[u8]) -> Option<Seen> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let (from, to, icmp, v6) = match ethertype {
        ETHERTYPE_IPV4 => {
            let ip = vmpls_wire::ipv4::Packet::new_checked(frame.get(14..)?).ok()?;
            if ip.protocol() != 1 {
                return None;
            }
            (IpAddr::V4(ip.src_addr()), IpAddr::V4(ip.dst_addr()), ip.payload().to_vec(), false)
        }
        ETHERTYPE_IPV6 => {
            let ip = vmpls_wire::ipv6::Packet::new_checked(frame.get(14..)?).ok()?;
            if ip.next_header() != 58 {
                return None;
            }
            (IpAddr::V6(ip.src_addr()), IpAddr::V6(ip.dst_addr()), ip.payload().to_vec(), true)
        }
        _ => return None,
    };
    let t = *icmp.first()?;
    let is_error = if v6 { t < 128 } else { matches!(t, 3 | 4 | 5 | 11 | 12) };
    if !is_error || icmp.len() < 8 + if v6 { 40 } else { 20 } {
        return None;
    }
    let quoted = &icmp[8..];
    let quoted_key = if v6 {
        u32::from_be_bytes([0, quoted[1] & 0x0f, quoted[2], quoted[3]])
    } else {
        u32::from(u16::from_be_bytes([quoted[4], quoted[5]]))
    };
    // RFC 4884: the length field (ICMPv4 byte 5 in words, ICMPv6 byte 4 in 8-byte
    // units) places the extension; an RFC 4950 object of class 1, c-type 1 follows its
    // 4-byte header.
    let len = if v6 { usize::from(icmp[4]) * 8 } else { usize::from(icmp[5]) * 4 };
    let mut labels = Vec::new();
    if len > 0
        && let Some(ext) = icmp.get(8 + len..)
        && ext.len() >= 8
        && ext[0] >> 4 == 2
        && (ext[6], ext[7]) == (1, 1)
    {
        let obj_len = usize::from(u16::from_be_bytes([ext[4], ext[5]]));
        for e in ext[8..(4 + obj_len).min(ext.len())].chunks_exact(4) {
            let w = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
            labels.push((w >> 12, w as u8));
        }
    }
    Some(Seen {
        from,
        to,
        icmp_type: t,
        code: icmp[1],
        word: u32::from_be_bytes([icmp[4], icmp[5], icmp[6], icmp[7]]),
        quoted_key,
        labels,
    })
}

fn is_router_address(a: IpAddr) -> bool {
    [PE1_V4, P_V4, PE2_V4, PE1_V6, P_V6, PE2_V6].iter().any(|r| ip(r) == a)
}

/// The key of an IP packet as the cases set it (IPv4 identification, IPv6 flow label).
fn packet_key(ip: &[u8]) -> Option<u32> {
    match ip.first()? >> 4 {
        4 if ip.len() >= 20 => Some(u32::from(u16::from_be_bytes([ip[4], ip[5]]))),
        6 if ip.len() >= 40 => Some(u32::from_be_bytes([0, ip[1] & 0x0f, ip[2], ip[3]])),
        _ => None,
    }
}

/// The IP packets in sniffed frames (untagged IPv4 and IPv6).
fn ip_packets(frames: &[Sniffed]) -> Vec<&[u8]> {
    frames
        .iter()
        .filter(|f| {
            f.frame.len() > 14 && matches!(u16::from_be_bytes([f.frame[12], f.frame[13]]), 0x0800 | 0x86dd)
        })
        .map(|f| &f.frame[14..])
        .collect()
}

/// Copies of each case's frames.
const ROUNDS: u64 = 3;

#[test]
fn hostile_packets_end_in_their_counter_or_reply_while_tcp_flows() {
    hostile_packets(SeedParams::default());
}

/// The same with the in-kernel fast path on every router: what it forwards must be
/// exactly what the pipeline would, and everything else must still reach the pipeline.
#[test]
fn hostile_packets_end_in_their_counter_or_reply_with_the_fast_path() {
    hostile_packets(SeedParams { fast_path: true, ..SeedParams::default() });
}

fn hostile_packets(params: SeedParams) {
    let mut lab = Lab::start("hostile", params);
    let macs = Macs::read(&lab);
    let cases = flow_cases(&macs);
    let mut keys = std::collections::BTreeSet::new();
    assert!(cases.iter().all(|c| keys.insert(c.key)), "keys are unique");

    let to_ce1 = Sniffer::start(&lab.ns("ce1"), "ce1-pe1", SniffFilter::SkipIpv4Tcp).unwrap();
    let to_ce2 = Sniffer::start(&lab.ns("ce2"), "ce2-pe2", SniffFilter::SkipIpv4Tcp).unwrap();
    let before = lab.fresh_stats();
    let flow = start_flow(&lab, Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(500));
    let injectors = injectors(&lab);
    for _ in 0..ROUNDS {
        for case in &cases {
            injectors[&case.site].send_all(&case.frames).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let injection_done = flow.is_finished();
    let flow = finish_flow(&lab, flow);
    assert!(!injection_done, "the flow ended before the injection did: {flow:?}");
    // Replies along the LSP take a few hundred microseconds; the sniffers read on.
    std::thread::sleep(Duration::from_millis(300));
    let at_ce1 = to_ce1.stop().unwrap();
    let at_ce2 = to_ce2.stop().unwrap();
    let after = lab.stop_routers();

    let mut failures = Vec::new();
    // What reached ce2.
    let delivered = ip_packets(&at_ce2);
    for case in &cases {
        for (i, want) in case.deliver.iter().enumerate() {
            let n = delivered.iter().filter(|p| **p == &want[..]).count() as u64;
            if n != ROUNDS {
                let same_key: Vec<String> = delivered
                    .iter()
                    .filter(|p| packet_key(p) == packet_key(want))
                    .map(|p| format!("{} bytes, ttl {}", p.len(), if p[0] >> 4 == 4 { p[8] } else { p[7] }))
                    .collect();
                failures.push(format!(
                    "{}: packet {i} ({} bytes) reached ce2 {n} times, not {ROUNDS}; with its key: {same_key:?}",
                    case.name,
                    want.len()
                ));
            }
        }
        if case.deliver.is_empty() {
            let n = delivered.iter().filter(|p| packet_key(p) == Some(case.key)).count();
            if n > 0 {
                failures.push(format!("{}: {n} packets reached ce2, none should", case.name));
            }
        }
    }
    // What came back to ce1 from the routers.
    let errors: Vec<Seen> = at_ce1.iter().filter_map(|f| icmp_error(&f.frame)).collect();
    for case in &cases {
        let got: Vec<&Seen> =
            errors.iter().filter(|e| e.quoted_key == case.key && is_router_address(e.from)).collect();
        match &case.reply {
            None if !got.is_empty() => failures.push(format!("{}: answered {got:?}", case.name)),
            None => {}
            Some(want) => {
                let quoted_ok = |e: &Seen| {
                    e.from == want.from
                        && e.to == if want.from.is_ipv4() { IpAddr::V4(CE1) } else { IpAddr::V6(CE1_6) }
                        && (e.icmp_type, e.code) == (want.icmp_type, want.code)
                        && want.mtu.is_none_or(|m| e.word & 0xffff == m || e.word == m)
                        && e.labels == want.labels
                };
                let good = got.iter().filter(|e| quoted_ok(e)).count() as u64;
                if good != ROUNDS || got.len() as u64 != ROUNDS {
                    failures.push(format!("{}: want {ROUNDS} x {want:?}, got {got:?}", case.name));
                }
            }
        }
    }
    // The counters, exactly.
    let delta: BTreeMap<&str, RouterStats> =
        ROUTERS.iter().map(|r| (*r, after[*r].since(&before[*r]))).collect();
    let mut drops: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let mut events: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for case in &cases {
        for &(r, d, n) in &case.drops {
            *drops.entry((r, d)).or_default() += n * ROUNDS;
        }
        for &(r, e, n) in &case.events {
            *events.entry((r, e)).or_default() += n * ROUNDS;
        }
    }
    let reasons: std::collections::BTreeSet<&str> = drops.keys().map(|k| k.1).collect();
    for router in ROUTERS {
        for reason in &reasons {
            let want = drops.get(&(router, *reason)).copied().unwrap_or(0);
            let got = delta[router].drop_count(reason);
            if got != want {
                failures.push(format!("{router} {reason}: counted {got}, want {want}"));
            }
        }
        for name in ["icmp_time_exceeded_sent", "icmp_sent_along_lsp", "icmp_too_big_sent", "ipv4_fragmented"]
        {
            let want = events.get(&(router, name)).copied().unwrap_or(0);
            let got = delta[router].event(name);
            if got != want {
                failures.push(format!("{router} {name}: counted {got}, want {want}"));
            }
        }
    }
    let allowed: Vec<&str> = reasons.iter().copied().collect();
    let bad: Vec<String> = after
        .iter()
        .flat_map(|(r, s)| {
            let mut ok = BACKGROUND_DROPS.to_vec();
            ok.extend_from_slice(&allowed);
            s.drops_except(&ok).into_iter().map(move |(d, n)| format!("{r} {d} {n}"))
        })
        .collect();
    if !bad.is_empty() {
        failures.push(format!("unexpected drops: {bad:?}"));
    }
    eprintln!(
        "{} cases x {ROUNDS}; TCP ce1 -> ce2 meanwhile: {} bytes, {:.2} Gbit/s, {} retransmits",
        cases.len(),
        flow.bytes_received,
        flow.gbps,
        flow.retransmits
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}\ncounters: {delta:#?}",
        failures.len(),
        failures.join("\n")
    );
}

/// Starts a content-checked TCP flow ce1 -> ce2 for `duration` on its own thread.
fn start_flow(lab: &Lab, duration: Duration) -> std::thread::JoinHandle<anyhow::Result<FlowResult>> {
    let opts = FlowOptions {
        limit: Limit::Duration(duration),
        io_timeout: Duration::from_secs(10),
        ..FlowOptions::default()
    };
    let (ce1, ce2) = (lab.ns("ce1"), lab.ns("ce2"));
    std::thread::spawn(move || run_flow(&ce1, &ce2, ip(CE2_V4), &opts, &mut |_| {}))
}

/// Waits for the flow and checks that every byte arrived as sent.
fn finish_flow(lab: &Lab, flow: std::thread::JoinHandle<anyhow::Result<FlowResult>>) -> FlowResult {
    let flow = match flow.join().unwrap() {
        Ok(f) => f,
        Err(e) => panic!("TCP flow: {e:#}\n{}", lab.logs()),
    };
    assert!(flow.content_ok && flow.bytes_received > 0 && flow.bytes_received == flow.bytes_sent, "{flow:?}");
    flow
}

// ==================================================================== the quiet lab

/// A small deterministic generator (xorshift64*) for addresses and MACs of floods.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A locally administered unicast MAC.
    fn mac(&mut self) -> [u8; 6] {
        let b = self.next().to_be_bytes();
        [0x02, b[1], b[2], b[3], b[4], b[5]]
    }
}

/// The neighbour table of `router`, as `vmpls neigh show` lists it: (port, address,
/// MAC if resolved).
fn neighbors(lab: &Lab, router: &str) -> Vec<(String, IpAddr, Option<String>)> {
    let socket = format!("/run/vmpls/netns/{}/{router}.sock", lab.ns(router));
    let out = std::process::Command::new(router_binary())
        .args(["--socket", &socket, "-j", "neigh", "show"])
        .output()
        .expect("running vmpls neigh show");
    assert!(out.status.success(), "vmpls neigh show on {router}: {}", output_text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["dev"].as_str().unwrap().to_string(),
                n["dst"].as_str().unwrap().parse().unwrap(),
                n["lladdr"].as_str().map(str::to_string),
            )
        })
        .collect()
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// The MAC `router` has for `addr`.
fn neighbor_mac(lab: &Lab, router: &str, addr: &str) -> Option<String> {
    neighbors(lab, router).into_iter().find(|n| n.1 == ip(addr)).and_then(|n| n.2)
}

/// A port's `pipeline_rx` (frames the pipeline took in) from a router's stats.
fn pipeline_rx(stats: &RouterStats, port: &str) -> u64 {
    stats.ports.iter().find(|p| p["name"] == port).and_then(|p| p["pipeline_rx"].as_u64()).unwrap()
}

/// Writes `frames` in chunks of 100 with a pause between, so the router's socket
/// buffer never overflows and every frame is read.
fn paced(inj: &Injector, frames: &[Vec<u8>]) {
    for chunk in frames.chunks(100) {
        inj.send_all(chunk).unwrap();
        std::thread::sleep(Duration::from_millis(4));
    }
}

#[test]
fn ethernet_edges_rx_mtu_and_neighbor_floods_and_spoofs() {
    let mut lab = Lab::start("hostile-l2", SeedParams::default());
    let m = Macs::read(&lab);
    let inj = injectors(&lab);
    let (p_mac, pe1_core_mac) = (m.0[&Site::P].0, m.0[&Site::Pe1Core].0);

    // ------------------------------------------------ Ethernet headers cut short, at p
    let s0 = lab.fresh_stats();
    let whole = m.ip_frame(Site::P, &[(1002, 64)], &udp4(0x6001, 64, 0, 32));
    // Under 14 bytes: the kernel's AF_PACKET refuses them (dev_validate_header), so no
    // such frame reaches a veth peer; if it ever did, p would have to count it.
    let mut short_sent = 0;
    for n in [0, 6, 10, 13] {
        match inj[&Site::P].send(&whole[..n]) {
            Ok(()) => short_sent += 1,
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{n}-byte frame: {e}"),
        }
    }
    // Exactly the Ethernet header, labelled: the stack is missing.
    inj[&Site::P].send(&whole[..14]).unwrap();
    // A VLAN tag cut short (15, 16, 17 bytes): the receiving kernel takes the tag off
    // before packet sockets see the frame, and drops these as it fails to; if one ever
    // reached p, p would have to count it.
    let tagged = vlan_tagged(&whole, 100);
    for n in [15, 16, 17] {
        inj[&Site::P].send(&tagged[..n]).unwrap();
    }
    let s1 = lab.fresh_stats();
    let seen_by_p = pipeline_rx(&s1["p"], "west") - pipeline_rx(&s0["p"], "west");
    let d = s1["p"].since(&s0["p"]);
    eprintln!(
        "ethernet edges at p: {short_sent} of 4 frames under 14 bytes sent, p took in {seen_by_p} of the \
         {} sent; truncated_ethernet {}, truncated_label_stack {}",
        short_sent + 4,
        d.drop_count("truncated_ethernet"),
        d.drop_count("truncated_label_stack"),
    );
    assert_eq!(d.drop_count("truncated_label_stack"), 1, "the 14-byte labelled frame: {d:#?}");
    assert_eq!(
        d.drop_count("truncated_ethernet"),
        seen_by_p - 1,
        "every cut frame p took in is counted: {d:#?}"
    );
    assert!(d.drops_except(&["truncated_label_stack", "truncated_ethernet"]).is_empty(), "{d:#?}");

    // ------------------------------------------------ frames over the MTU on receive
    // ce1's end of its link is raised to 1600, pe1's stays 1500: what does a veth hand
    // pe1's AF_PACKET socket, and what becomes of it? The IPv4 packets carry DF, so the
    // ones pe1 takes in cross the 64 KiB core and end at pe2's 1500-byte customer port:
    // counted as mtu_exceeded with a fragmentation-needed reply, except the one of
    // exactly 1500 bytes, which reaches ce2.
    lab.seed.topology_mut().set_mtu("ce1", "ce1-pe1", 1600).unwrap();
    let s0 = lab.fresh_stats();
    let to_ce1 = Sniffer::start(&lab.ns("ce1"), "ce1-pe1", SniffFilter::All).unwrap();
    let to_ce2 = Sniffer::start(&lab.ns("ce2"), "ce2-pe2", SniffFilter::All).unwrap();
    let sizes = 1500..=1506usize;
    // The veth drops what exceeds the receiving end's MTU plus a VLAN tag's 4 bytes,
    // and says so to the sender (ENOBUFS).
    let mut veth_dropped = Vec::new();
    for (i, size) in sizes.clone().enumerate() {
        let p = udp4(0x6100 + i as u32, 64, IPV4_DF, size - 28);
        match inj[&Site::Pe1].send(&m.ip_frame(Site::Pe1, &[], &p)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => veth_dropped.push(size),
            Err(e) => panic!("{size} bytes: {e}"),
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let s1 = lab.fresh_stats();
    let (at_ce1, at_ce2) = (to_ce1.stop().unwrap(), to_ce2.stop().unwrap());
    lab.seed.topology_mut().set_mtu("ce1", "ce1-pe1", 1500).unwrap();
    let replies: Vec<Seen> =
        at_ce1.iter().filter_map(|f| icmp_error(&f.frame)).filter(|e| is_router_address(e.from)).collect();
    let mut passed = Vec::new();
    for (i, size) in sizes.clone().enumerate() {
        let key = 0x6100 + i as u32;
        let delivered = ip_packets(&at_ce2).iter().filter(|p| packet_key(p) == Some(key)).count();
        let answered: Vec<&Seen> = replies.iter().filter(|e| e.quoted_key == key).collect();
        if size == 1500 {
            assert_eq!((delivered, answered.len()), (1, 0), "{size} bytes");
            continue;
        }
        assert_eq!(delivered, 0, "{size} bytes reached ce2");
        if veth_dropped.contains(&size) {
            assert!(answered.is_empty(), "{size}: {answered:?}");
            continue;
        }
        match answered[..] {
            [e] => assert_eq!(
                (e.from, e.icmp_type, e.code, e.word & 0xffff),
                (ip(PE2_V4), 3, 4, 1500),
                "{size}: {e:?}"
            ),
            _ => panic!("{size} bytes: want one fragmentation needed, got {answered:?}"),
        }
        passed.push(size);
    }
    let d = s1["pe2"].since(&s0["pe2"]);
    eprintln!(
        "IP packets over pe1's 1500-byte MTU the veth delivered: {passed:?}; dropped: {veth_dropped:?}"
    );
    assert_eq!(d.drop_count("mtu_exceeded"), passed.len() as u64, "{d:#?}");
    assert!(passed.contains(&1501), "one byte over the MTU was not received: {passed:?}");

    // ------------------------------------------------ ARP and ND floods at pe1
    let bound = vmpls_dataplane::neighbor::NeighborConfig::default().max_entries;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let count = |lab: &Lab| neighbors(lab, "pe1").len();
    let n0 = count(&lab);
    let s0 = lab.fresh_stats();
    let bcast = [0xff; 6];
    let ours = Ipv4Addr::new(198, 18, 1, 1);
    let arp_frame = |rng: &mut Rng, op: u16, sender: Ipv4Addr| {
        let mac = rng.mac();
        let (dst, tha) =
            if op == ARP_REQUEST { (bcast, [0; 6]) } else { (m.0[&Site::Pe1].0, m.0[&Site::Pe1].0) };
        ethernet(dst, mac, ETHERTYPE_ARP, &arp(op, mac, sender, tha, ours))
    };
    // Requests for pe1's address from 2000 senders off the subnet: all answered, none
    // learned (they can never be a next hop).
    let off: Vec<Vec<u8>> = (0..2000u32)
        .map(|i| arp_frame(&mut rng, ARP_REQUEST, Ipv4Addr::new(198, 19, (i >> 8) as u8, i as u8)))
        .collect();
    paced(&inj[&Site::Pe1], &off);
    // Unsolicited replies from 200 senders on the subnet: not learned.
    let replies: Vec<Vec<u8>> = (0..200u32)
        .map(|i| arp_frame(&mut rng, ARP_REPLY, Ipv4Addr::new(198, 18, 1, 10 + i as u8)))
        .collect();
    paced(&inj[&Site::Pe1], &replies);
    // Solicitations for pe1's address from 500 senders off the subnet: answered, not
    // learned.
    let ours6: Ipv6Addr = "2001:db8:1::1".parse().unwrap();
    let group = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00, 1);
    let ns_frame = |rng: &mut Rng, src: Ipv6Addr| {
        let mac = rng.mac();
        ethernet([0x33, 0x33, 0xff, 0, 0, 1], mac, ETHERTYPE_IPV6, &neighbor_solicit(src, group, ours6, mac))
    };
    let off6: Vec<Vec<u8>> = (0..500u64)
        .map(|i| ns_frame(&mut rng, Ipv6Addr::from((0x2001_0db8_0099u128 << 80) | (u128::from(i) + 1))))
        .collect();
    paced(&inj[&Site::Pe1], &off6);
    let s1 = lab.fresh_stats();
    let d = s1["pe1"].since(&s0["pe1"]);
    assert_eq!(d.event("arp_reply_sent"), 2000, "{d:#?}");
    assert_eq!(d.event("nd_advert_sent"), 500, "{d:#?}");
    assert_eq!(count(&lab), n0, "off-subnet requests or unsolicited replies added neighbours");
    // Requests from 200 senders on the subnet: learned (RFC 826), answered.
    let on: Vec<Vec<u8>> = (0..200u32)
        .map(|i| arp_frame(&mut rng, ARP_REQUEST, Ipv4Addr::new(198, 18, 1, 10 + i as u8)))
        .collect();
    paced(&inj[&Site::Pe1], &on);
    assert_eq!(count(&lab), n0 + 200);
    // Solicitations from more senders on the subnet than the table holds: they fill
    // ce1's share of the table (half of it: two ports), of which hosts' requests may take
    // half, and no more; every one is answered all the same.
    let flood6: Vec<Vec<u8>> = (0..bound as u64 + 1000)
        .map(|_| {
            let host = u128::from(rng.next());
            ns_frame(&mut rng, Ipv6Addr::from((0x2001_0db8_0001u128 << 80) | host))
        })
        .collect();
    let s0 = lab.fresh_stats();
    paced(&inj[&Site::Pe1], &flood6);
    let s1 = lab.fresh_stats();
    let d = s1["pe1"].since(&s0["pe1"]);
    assert_eq!(d.event("nd_advert_sent"), flood6.len() as u64);
    let share = bound / 2;
    let on_ce1 = neighbors(&lab, "pe1").iter().filter(|n| n.0 == "ce1").count();
    assert!((share / 2..=share).contains(&on_ce1), "{on_ce1} neighbours on ce1, its share {share}");
    assert!(d.event("neighbor_entry_refused") >= flood6.len() as u64 - share as u64, "{d:#?}");
    let full = count(&lab);
    assert!(full < bound, "ce1's hosts filled the table: {full}");
    // pe1 forgets p's address, and ce1's hosts go on asking from new addresses: they do
    // not take the place, and pe1 resolves its core next hop again.
    let socket = format!("/run/vmpls/netns/{}/pe1.sock", lab.ns("pe1"));
    let out = std::process::Command::new(router_binary())
        .args(["--socket", &socket, "neigh", "del", "198.18.10.2", "dev", "core"])
        .output()
        .expect("running vmpls neigh del");
    assert!(out.status.success(), "vmpls neigh del on pe1: {}", output_text(&out));
    let more: Vec<Vec<u8>> = (0..50u32)
        .map(|i| {
            arp_frame(
                &mut rng,
                if i % 2 == 0 { ARP_REQUEST } else { ARP_REPLY },
                Ipv4Addr::new(198, 18, 1, 220 + (i % 30) as u8),
            )
        })
        .collect();
    paced(&inj[&Site::Pe1], &more);
    assert_eq!(count(&lab), full - 1, "ce1's share is full: its new addresses change nothing");
    // And good traffic flows.
    lab.seed.check_pings(Duration::from_secs(5)).unwrap_or_else(|e| panic!("after the floods: {e:#}"));
    assert!(neighbor_mac(&lab, "pe1", "198.18.10.2").is_some(), "p resolved again");
    lab.flow("ce1", "ce2", CE2_V4, 50_000_000);

    // ------------------------------------------------ spoofed replies for p's address
    // RFC 826's merge rule, as Linux: an ARP reply for a known address replaces its MAC
    // (how a moved address or a failover announces itself). The spoof works, and so
    // does the correction.
    let spoof = [0x02, 0x66, 0x66, 0x66, 0x66, 0x66];
    let to_pe1 = |op_mac: [u8; 6]| {
        ethernet(
            pe1_core_mac,
            op_mac,
            ETHERTYPE_ARP,
            &arp(
                ARP_REPLY,
                op_mac,
                Ipv4Addr::new(198, 18, 10, 2),
                pe1_core_mac,
                Ipv4Addr::new(198, 18, 10, 1),
            ),
        )
    };
    inj[&Site::Pe1Core].send(&to_pe1(spoof)).unwrap();
    wait_for(
        || neighbor_mac(&lab, "pe1", "198.18.10.2") == Some(mac_text(spoof)),
        "pe1 takes the spoofed MAC",
    );
    inj[&Site::Pe1Core].send(&to_pe1(p_mac)).unwrap();
    wait_for(|| neighbor_mac(&lab, "pe1", "198.18.10.2") == Some(mac_text(p_mac)), "pe1 takes p's MAC back");
    // RFC 4861 section 7.2.5: an unsolicited advertisement without the override flag
    // does not replace a reachable entry's MAC; with it, it does.
    let p6: Ipv6Addr = "2001:db8:10::2".parse().unwrap();
    let all_nodes = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    let na = |mac: [u8; 6], o: bool| {
        ethernet(
            [0x33, 0x33, 0, 0, 0, 1],
            mac,
            ETHERTYPE_IPV6,
            &neighbor_advert(p6, all_nodes, p6, mac, false, o),
        )
    };
    inj[&Site::Pe1Core].send(&na(spoof, false)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(neighbor_mac(&lab, "pe1", "2001:db8:10::2"), Some(mac_text(p_mac)), "O clear: kept");
    inj[&Site::Pe1Core].send(&na(spoof, true)).unwrap();
    wait_for(|| neighbor_mac(&lab, "pe1", "2001:db8:10::2") == Some(mac_text(spoof)), "O set: replaced");
    inj[&Site::Pe1Core].send(&na(p_mac, true)).unwrap();
    wait_for(|| neighbor_mac(&lab, "pe1", "2001:db8:10::2") == Some(mac_text(p_mac)), "restored");
    lab.seed.check_pings(Duration::from_secs(5)).unwrap_or_else(|e| panic!("after the spoofs: {e:#}"));
    let after = lab.stop_routers();
    assert_no_unexpected_drops(
        &after,
        &["truncated_label_stack", "truncated_ethernet", "vlan_tagged", "mtu_exceeded"],
        "the quiet lab",
    );
}

/// `frame` with an 802.1Q tag of VLAN `vid` after its addresses.
fn vlan_tagged(frame: &[u8], vid: u16) -> Vec<u8> {
    let mut tagged = frame[..12].to_vec();
    tagged.extend_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
    tagged.extend_from_slice(&vid.to_be_bytes());
    tagged.extend_from_slice(&frame[12..]);
    tagged
}

/// A router with no VLANs configured must not switch a tagged frame as if it were
/// untagged (the pipeline counts such frames as `vlan_tagged`). The receiving kernel
/// moves the 802.1Q tag out of the frame into the packet's metadata (`skb_vlan_untag`)
/// before packet sockets see it; the AF_PACKET port reads it from `PACKET_AUXDATA` and
/// puts it back. Before it did, a frame of VLAN 100 was switched like an untagged one.
#[test]
fn vlan_tagged_frames_are_counted_not_switched() {
    let mut lab = Lab::start("hostile-vlan", SeedParams::default());
    let m = Macs::read(&lab);
    let inj = injectors(&lab);
    let to_ce2 = Sniffer::start(&lab.ns("ce2"), "ce2-pe2", SniffFilter::All).unwrap();
    let s0 = lab.fresh_stats();
    for vid in [100, 0, 4095] {
        let whole = m.ip_frame(Site::P, &[(1002, 64)], &udp4(0x6200 + u32::from(vid), 64, 0, 32));
        inj[&Site::P].send(&vlan_tagged(&whole, vid)).unwrap();
    }
    let s1 = lab.fresh_stats();
    let at_ce2 = to_ce2.stop().unwrap();
    let switched =
        ip_packets(&at_ce2).iter().filter(|p| packet_key(p).is_some_and(|k| k & 0xff00 == 0x6200)).count();
    let d = s1["p"].since(&s0["p"]);
    assert_eq!((switched, d.drop_count("vlan_tagged")), (0, 3), "{d:#?}");
    lab.stop_routers();
}

/// Waits up to 3 s for `cond`.
fn wait_for(mut cond: impl FnMut() -> bool, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "{what}: not within 3 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ==================================================================== memory under a flood

/// Resident memory of a process in KiB (VmRSS).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS for {pid}"))
}

/// The frames of the flood, per site: malformed frames of every kind the suite knows,
/// TTL expiries (ICMP over its rate limit), ARP and ND from thousands of senders, and
/// packets toward silent hosts of ce2's subnet (neighbour resolution at pe2).
fn flood_frames(m: &Macs) -> BTreeMap<Site, Vec<Vec<u8>>> {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let ours = Ipv4Addr::new(198, 18, 1, 1);
    let ours6: Ipv6Addr = "2001:db8:1::1".parse().unwrap();
    let group = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00, 1);
    let mut at_pe1 = Vec::new();
    for i in 0..3000u32 {
        let mac = rng.mac();
        let sender = match i % 3 {
            0 => Ipv4Addr::new(198, 18, 1, 3 + (rng.next() % 250) as u8),
            _ => Ipv4Addr::from(0xc613_0000 | (rng.next() as u32 & 0xffff)), // 198.19.0.0/16
        };
        let op = if i % 5 == 0 { ARP_REPLY } else { ARP_REQUEST };
        let dst = if op == ARP_REQUEST { [0xff; 6] } else { m.0[&Site::Pe1].0 };
        at_pe1.push(ethernet(dst, mac, ETHERTYPE_ARP, &arp(op, mac, sender, [0; 6], ours)));
        let host = u128::from(rng.next());
        let prefix = if i % 2 == 0 { 0x2001_0db8_0001u128 } else { 0x2001_0db8_0099u128 };
        let src = Ipv6Addr::from((prefix << 80) | host);
        let mac = rng.mac();
        at_pe1.push(ethernet(
            [0x33, 0x33, 0xff, 0, 0, 1],
            mac,
            ETHERTYPE_IPV6,
            &neighbor_solicit(src, group, ours6, mac),
        ));
        let silent = Ipv4Addr::new(198, 18, 2, 100 + (i % 100) as u8);
        let d = udp(IpAddr::V4(CE1), IpAddr::V4(silent), 40000, 9, &[0x5a; 32]);
        at_pe1.push(m.ip_frame(Site::Pe1, &[], &ipv4_packet(CE1, silent, 64, 17, 1, 0, &d)));
    }
    let mut bad_sum = udp4(0x6300, 64, 0, 32);
    bad_sum[10] ^= 0x55;
    let mut long_total = udp4(0x6301, 64, 0, 32);
    long_total[2..4].copy_from_slice(&3000u16.to_be_bytes());
    let long_total = with_ttl(&long_total, 64);
    at_pe1.extend([
        m.ip_frame(Site::Pe1, &[], &udp4(0x6302, 1, 0, 32)),
        m.ip_frame(Site::Pe1, &[], &pkt6(0x6303, 1, 17, &udp6_datagram(0x6303, 32))),
        m.ip_frame(Site::Pe1, &[], &bad_sum),
        m.ip_frame(Site::Pe1, &[], &long_total),
    ]);
    let p = udp4(0x6304, 64, 0, 32);
    let deep: Vec<(u32, u8)> = std::iter::once((1002, 64)).chain(std::iter::repeat_n((0, 64), 40)).collect();
    let at_p = vec![
        m.ip_frame(Site::P, &[(4321, 64)], &p),
        m.ip_frame(Site::P, &[(13, 64)], &p),
        m.ip_frame(Site::P, &[(1002, 1)], &p),
        m.frame(Site::P, ETHERTYPE_MPLS, &stack(&deep, &p)),
        m.frame(Site::P, ETHERTYPE_MPLS, &mpls_entry(1002, 0, false, 64)),
        m.frame(Site::P, ETHERTYPE_MPLS, &mpls_entry(1002, 0, true, 64)[..2]),
    ];
    let at_pe2 = vec![
        m.ip_frame(Site::Pe2, &[(2002, 1)], &p),
        m.ip_frame(Site::Pe2, &[(2002, 64)], &bad_sum),
        m.ip_frame(Site::Pe2, &[(2002, 64)], &udp4(0x6305, 1, 0, 32)),
    ];
    [(Site::Pe1, at_pe1), (Site::P, at_p), (Site::Pe2, at_pe2)].into_iter().collect()
}

/// Drop reasons the flood causes.
const FLOOD_DROPS: &[&str] = &[
    "bad_ipv4_checksum",
    "bad_ipv4_header",
    "ip_ttl_expired",
    "icmp_suppressed",
    "unknown_label",
    "reserved_label",
    "label_ttl_expired",
    "label_stack_too_deep",
    "truncated_label_stack",
    "neighbor_unresolved",
    "neighbor_queue_full",
    "neighbor_request_suppressed",
];

#[test]
fn memory_stays_flat_and_tcp_flows_under_a_flood() {
    let mut lab = Lab::start("hostile-flood", SeedParams::default());
    let m = Macs::read(&lab);
    let frames = flood_frames(&m);
    let pids: BTreeMap<&str, u32> = ROUTERS.iter().map(|r| (*r, router_pid(&lab, r))).collect();
    let before = lab.fresh_stats();
    let flow = start_flow(&lab, Duration::from_secs(7));
    // Warm-up: the flow alone fills the routers' buffers and caches.
    std::thread::sleep(Duration::from_millis(1500));
    let warm: BTreeMap<&str, u64> = pids.iter().map(|(r, pid)| (*r, rss_kib(*pid))).collect();
    let flooders: Vec<_> = frames
        .into_iter()
        .map(|(site, frames)| {
            let (host, ifname, _, _) = site.ends();
            let ns = lab.ns(host);
            std::thread::spawn(move || flood(&ns, ifname, &frames, Duration::from_secs(4), u64::MAX))
        })
        .collect();
    let floods: Vec<FloodStats> = flooders.into_iter().map(|t| t.join().unwrap().unwrap()).collect();
    let flooded: BTreeMap<&str, u64> = pids.iter().map(|(r, pid)| (*r, rss_kib(*pid))).collect();
    let injection_done = flow.is_finished();
    let flow = finish_flow(&lab, flow);
    assert!(!injection_done, "the flow ended before the flood did: {flow:?}");
    let tables: BTreeMap<&str, usize> = ROUTERS.iter().map(|r| (*r, neighbors(&lab, r).len())).collect();
    let after = lab.stop_routers();
    let sent: u64 = floods.iter().map(|f| f.sent).sum();
    eprintln!(
        "flood: {sent} frames in {:?} ({:.0} frames/s; {} refused); TCP meanwhile {} bytes, {:.2} Gbit/s, {} retransmits",
        floods[0].elapsed,
        sent as f64 / floods[0].elapsed.as_secs_f64(),
        floods.iter().map(|f| f.refused).sum::<u64>(),
        flow.bytes_received,
        flow.gbps,
        flow.retransmits
    );
    for r in ROUTERS {
        eprintln!(
            "{r}: VmRSS {} KiB after the warm-up, {} KiB after the flood; {} neighbours",
            warm[r], flooded[r], tables[r]
        );
    }
    let bound = vmpls_dataplane::neighbor::NeighborConfig::default().max_entries;
    for r in ROUTERS {
        let growth = flooded[r].saturating_sub(warm[r]);
        assert!(growth < 2048, "{r} grew by {growth} KiB under the flood ({} -> {})", warm[r], flooded[r]);
        assert!(tables[r] <= bound, "{r}: {} neighbours", tables[r]);
    }
    let delta: BTreeMap<&str, RouterStats> =
        ROUTERS.iter().map(|r| (*r, after[*r].since(&before[*r]))).collect();
    for (r, reason) in [
        ("pe1", "bad_ipv4_checksum"),
        ("pe1", "bad_ipv4_header"),
        ("pe1", "ip_ttl_expired"),
        ("p", "unknown_label"),
        ("p", "reserved_label"),
        ("p", "label_ttl_expired"),
        ("p", "label_stack_too_deep"),
        ("p", "truncated_label_stack"),
        ("pe2", "label_ttl_expired"),
        ("pe2", "bad_ipv4_checksum"),
        ("pe2", "ip_ttl_expired"),
    ] {
        assert!(delta[r].drop_count(reason) > 0, "{r} counted no {reason}: {:#?}", delta[r]);
    }
    assert!(delta["pe1"].event("arp_reply_sent") > 0 && delta["pe1"].event("nd_advert_sent") > 0);
    assert_no_unexpected_drops(&after, FLOOD_DROPS, "the flood");
}
