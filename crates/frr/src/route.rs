//! The netlink messages inside FPM frames, decoded into route updates.
//!
//! zebra encodes for FPM exactly what it would send the kernel: `RTM_NEWROUTE` /
//! `RTM_DELROUTE` for IPv4, IPv6 and MPLS (`AF_MPLS`) routes. A label route carries its
//! incoming label in `RTA_DST`, its outgoing labels in `RTA_NEWDST` (none: pop) and its
//! next hop in `RTA_VIA`; a labelled IP route carries `RTA_ENCAP_TYPE` = MPLS and the
//! labels to push in `RTA_ENCAP`; ECMP next hops come in `RTA_MULTIPATH`, each with
//! its own attributes and `rtnh_hops` = weight - 1.
//!
//! Strict about framing, lenient about content. A frame whose netlink header or route
//! attributes (type-length-value, nested ones included) do not add up is an error: the
//! stream cannot be trusted past it, so the caller closes the connection and keeps its
//! table. A well-framed route message saying something vmpls cannot carry (an SRv6
//! encapsulation, an attribute or next hop it does not know, another family) is never
//! read as a guess either: it becomes [`Update::Unsupported`], one of a fixed set of
//! [`Unsupported`] kinds, and the messages after it are read as usual (zebra replays the
//! same route on every reconnection, so closing would stop everything behind it for
//! good). Messages that are not about routes (neighbours and links, which zebra sends
//! for EVPN) are reported as [`Update::Ignored`].

use std::net::IpAddr;

use netlink_packet_core::{Emitable, NetlinkBuffer, Nla, Parseable};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteLwEnCapType, RouteLwTunnelEncap, RouteMessage, RouteMplsIpTunnel,
    RouteNextHop, RouteType, RouteVia,
};
use thiserror::Error;
use vmpls_wire::mpls::{IMPLICIT_NULL, MAX_LABEL};

/// `RTM_NEWROUTE`.
pub const RTM_NEWROUTE: u16 = 24;
/// `RTM_DELROUTE`.
pub const RTM_DELROUTE: u16 = 25;
const RTM_NEWNEIGH: u16 = 28;
const RTM_DELNEIGH: u16 = 29;
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_NEWNEXTHOP: u16 = 104;
const RTM_DELNEXTHOP: u16 = 105;
const MPLS_IPTUNNEL_DST: u16 = 1;
const MPLS_IPTUNNEL_TTL: u16 = 2;
/// The main routing table, where zebra's default VRF lives.
pub const MAIN_TABLE: u32 = 254;

/// What a route is for: an incoming label or an IP prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dest {
    /// A label route (`AF_MPLS`).
    Label(u32),
    /// An IPv4 or IPv6 prefix, host bits clear.
    Prefix(IpAddr, u8),
}

/// Identifies a route: its table (zebra's VRF) and destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RouteKey {
    /// Kernel routing table id (254 for the default VRF).
    pub table: u32,
    /// The destination.
    pub dest: Dest,
}

/// A next hop as zebra gives it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Nexthop {
    /// The gateway (`RTA_GATEWAY` or `RTA_VIA`); `None` for a directly attached route.
    pub gateway: Option<IpAddr>,
    /// The interface index (`RTA_OIF` / `rtnh_ifindex`); `None` if not given.
    pub ifindex: Option<u32>,
    /// IP routes: labels to push, top first. Label routes: the labels replacing the
    /// incoming one, top first; empty = pop. Implicit null never appears here.
    pub labels: Vec<u32>,
    /// Relative share of flows (1..=256).
    pub weight: u32,
}

/// What the route does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Forward through the next hops.
    Unicast,
    /// Drop silently (`blackhole`, FRR's `Null0` and `blackhole`).
    Blackhole,
    /// Drop and answer ICMP host unreachable (`unreachable`, FRR's `reject`).
    Unreachable,
    /// Drop and answer ICMP administratively prohibited (`prohibit`).
    Prohibit,
}

/// A route zebra wants installed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route {
    /// Table and destination.
    pub key: RouteKey,
    /// `rtm_protocol`: who made it (188 ospf, 193 ldp, 196 static, 11 zebra, ...).
    pub protocol: u8,
    /// Forward or drop.
    pub kind: Kind,
    /// Next hops (empty for a blackhole).
    pub nexthops: Vec<Nexthop>,
}

/// One decoded netlink message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// Install or replace.
    Add(Route),
    /// Remove.
    Delete(RouteKey),
    /// Not a route message; the message type is given.
    Ignored(u16),
    /// A well-framed message vmpls cannot carry, skipped.
    Unsupported(Skipped),
}

/// What vmpls cannot carry, by kind: a small fixed set, for counters and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unsupported {
    /// Next-hop objects (`RTM_NEWNEXTHOP`, `RTA_NH_ID`): zebra uses next-hop groups.
    NexthopGroups,
    /// A family other than IPv4, IPv6 and MPLS.
    Family,
    /// A route type other than unicast, blackhole, unreachable and prohibit.
    RouteType,
    /// An SRv6 encapsulation (`LWTUNNEL_ENCAP_SEG6`).
    Seg6,
    /// An SRv6 local behaviour (`LWTUNNEL_ENCAP_SEG6_LOCAL`).
    Seg6Local,
    /// Another encapsulation than MPLS (IP tunnels, BPF, VXLAN for EVPN, ...).
    Encapsulation,
    /// A route attribute vmpls does not know.
    Attribute,
    /// A next hop vmpls cannot represent (no gateway nor interface, a gateway of
    /// another family).
    Nexthop,
    /// A netlink message type that is not a route, neighbour or link message.
    MessageType,
    /// Well framed, but what a known attribute holds is not valid.
    Malformed,
}

impl Unsupported {
    /// Every kind, in counter order.
    pub const ALL: [Unsupported; 10] = [
        Unsupported::NexthopGroups,
        Unsupported::Family,
        Unsupported::RouteType,
        Unsupported::Seg6,
        Unsupported::Seg6Local,
        Unsupported::Encapsulation,
        Unsupported::Attribute,
        Unsupported::Nexthop,
        Unsupported::MessageType,
        Unsupported::Malformed,
    ];

    /// The kind's name in counters (`unsupported_<name>`) and logs.
    pub fn name(self) -> &'static str {
        match self {
            Unsupported::NexthopGroups => "nexthop_groups",
            Unsupported::Family => "family",
            Unsupported::RouteType => "route_type",
            Unsupported::Seg6 => "seg6",
            Unsupported::Seg6Local => "seg6local",
            Unsupported::Encapsulation => "encapsulation",
            Unsupported::Attribute => "attribute",
            Unsupported::Nexthop => "nexthop",
            Unsupported::MessageType => "message_type",
            Unsupported::Malformed => "malformed",
        }
    }

    /// Its index in [`Unsupported::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A message skipped: why, and the route it was about when that could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// What vmpls cannot carry.
    pub kind: Unsupported,
    /// The route zebra replaced with one vmpls cannot carry (`RTM_NEWROUTE` whose
    /// destination was read): what was held there is zebra's no longer, so it goes.
    pub key: Option<RouteKey>,
    /// The details, for the log.
    pub detail: String,
}

/// Why an FPM frame's payload cannot be read further: its framing is broken.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The netlink header is cut short or its length is wrong.
    #[error("truncated netlink message: {0}")]
    Truncated(String),
    /// The route header or an attribute's length does not fit the message.
    #[error("route message framing is broken: {0}")]
    Framing(String),
}

/// A reason to skip a message, before the key is known.
#[derive(Debug)]
struct Skip {
    kind: Unsupported,
    detail: String,
}

fn skip(kind: Unsupported, detail: impl Into<String>) -> Skip {
    Skip { kind, detail: detail.into() }
}

/// Decodes every netlink message of one FPM frame's payload.
///
/// # Errors
/// The first message whose framing is broken (see [`DecodeError`]); well-framed
/// messages vmpls cannot carry are [`Update::Unsupported`], not errors.
pub fn decode(payload: &[u8]) -> Result<Vec<Update>, DecodeError> {
    let mut out = Vec::new();
    let mut rest = payload;
    while !rest.is_empty() {
        let buf = NetlinkBuffer::new_checked(rest).map_err(|e| DecodeError::Truncated(e.to_string()))?;
        let len = buf.length() as usize;
        let kind = buf.message_type();
        out.push(decode_message(kind, buf.payload())?);
        // Messages are padded to 4 bytes; the last one may end without padding.
        rest = rest.get(len.next_multiple_of(4)..).unwrap_or_default();
    }
    Ok(out)
}

fn decode_message(kind: u16, body: &[u8]) -> Result<Update, DecodeError> {
    let skipped = |s: Skip, key| Update::Unsupported(Skipped { kind: s.kind, key, detail: s.detail });
    match kind {
        RTM_NEWROUTE | RTM_DELROUTE => {}
        RTM_NEWNEIGH | RTM_DELNEIGH | RTM_NEWLINK | RTM_DELLINK => return Ok(Update::Ignored(kind)),
        RTM_NEWNEXTHOP | RTM_DELNEXTHOP => {
            return Ok(skipped(skip(Unsupported::NexthopGroups, NEXTHOP_GROUPS_HINT), None));
        }
        _ => {
            let s =
                skip(Unsupported::MessageType, format!("netlink message type {kind} is not a route message"));
            return Ok(skipped(s, None));
        }
    }
    check_route_framing(body)?;
    let key = match route_key(body) {
        Ok(key) => key,
        Err(s) => return Ok(skipped(s, None)),
    };
    if kind == RTM_DELROUTE {
        // zebra's deletes name the destination and little else: no next hop for an
        // LSP, route type 0, protocol 0.
        return Ok(Update::Delete(key));
    }
    Ok(match route(key, body) {
        Ok(route) => Update::Add(route),
        Err(s) => skipped(s, Some(key)),
    })
}

const NEXTHOP_GROUPS_HINT: &str =
    "zebra sends next-hop groups; configure `no fpm use-next-hop-groups` in zebra";

/// `struct rtmsg`, before the attributes.
const RTMSG_LEN: usize = 12;
const RTA_DST: u16 = 1;
const RTA_METRICS: u16 = 8;
const RTA_MULTIPATH: u16 = 9;
const RTA_TABLE: u16 = 15;
const RTA_ENCAP_TYPE: u16 = 21;
const RTA_ENCAP: u16 = 22;
/// `struct rtnexthop`, before its attributes.
const RTNH_LEN: usize = 8;
const LWTUNNEL_ENCAP_MPLS: u16 = 1;
const LWTUNNEL_ENCAP_SEG6: u16 = 5;
const LWTUNNEL_ENCAP_SEG6_LOCAL: u16 = 7;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const AF_MPLS: u8 = 28;

/// An attribute's type (without the nested and byte-order flags) and value, and the
/// bytes after it.
type Attribute<'a> = (u16, &'a [u8], &'a [u8]);

/// The first attribute of `buf`; `Ok(None)` at the end.
fn next_attribute(buf: &[u8]) -> Result<Option<Attribute<'_>>, DecodeError> {
    if buf.is_empty() {
        return Ok(None);
    }
    let header = buf
        .get(..4)
        .ok_or_else(|| DecodeError::Framing(format!("{} bytes after the last attribute", buf.len())))?;
    let len = usize::from(u16::from_ne_bytes([header[0], header[1]]));
    let kind = u16::from_ne_bytes([header[2], header[3]]) & 0x3fff;
    if len < 4 || len > buf.len() {
        return Err(DecodeError::Framing(format!("attribute {kind} of length {len} in {} bytes", buf.len())));
    }
    Ok(Some((kind, &buf[4..len], buf.get(len.next_multiple_of(4)..).unwrap_or_default())))
}

/// Checks every length in a route message: the header, the attributes, the next hops of
/// `RTA_MULTIPATH` and the attributes nested in them, in `RTA_ENCAP` and `RTA_METRICS`.
fn check_route_framing(body: &[u8]) -> Result<(), DecodeError> {
    let attrs = body
        .get(RTMSG_LEN..)
        .ok_or_else(|| DecodeError::Framing(format!("a route header of {} bytes", body.len())))?;
    check_attributes(attrs, true)
}

fn check_attributes(mut buf: &[u8], top: bool) -> Result<(), DecodeError> {
    while let Some((kind, value, rest)) = next_attribute(buf)? {
        match kind {
            RTA_MULTIPATH if top => {
                let mut nhs = value;
                while !nhs.is_empty() {
                    let len = nhs.get(..2).map_or(0, |b| usize::from(u16::from_ne_bytes([b[0], b[1]])));
                    if len < RTNH_LEN || len > nhs.len() {
                        return Err(DecodeError::Framing(format!(
                            "a next hop of length {len} in {} bytes",
                            nhs.len()
                        )));
                    }
                    check_attributes(&nhs[RTNH_LEN..len], false)?;
                    nhs = nhs.get(len.next_multiple_of(4)..).unwrap_or_default();
                }
            }
            RTA_ENCAP | RTA_METRICS => check_attributes(value, false)?,
            _ => {}
        }
        buf = rest;
    }
    Ok(())
}

/// The attributes of a well-framed route message, or of one next hop.
fn attributes(mut buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let (kind, value, rest) = next_attribute(buf).ok()??;
        buf = rest;
        Some((kind, value))
    })
}

/// The table and destination of a well-framed route message, read from its bytes (a
/// delete carries little else, and a route skipped still names what it replaces).
fn route_key(body: &[u8]) -> Result<RouteKey, Skip> {
    let (family, len) = (body[0], body[1]);
    if !matches!(family, AF_INET | AF_INET6 | AF_MPLS) {
        return Err(skip(
            Unsupported::Family,
            format!("route family {family} is not IPv4 (2), IPv6 (10) or MPLS (28)"),
        ));
    }
    let mut table = u32::from(body[4]);
    let mut dest = None;
    for (kind, value) in attributes(&body[RTMSG_LEN..]) {
        match kind {
            RTA_TABLE => {
                let v: [u8; 4] =
                    value.try_into().map_err(|_| skip(Unsupported::Malformed, "RTA_TABLE is not 4 bytes"))?;
                table = u32::from_ne_bytes(v);
            }
            RTA_DST => dest = Some(value),
            _ => {}
        }
    }
    let bad = |what: &str| skip(Unsupported::Malformed, format!("destination {what} for family {family}"));
    let dest = match (family, dest) {
        (AF_MPLS, Some(v)) => {
            let v: [u8; 4] = v.try_into().map_err(|_| bad(&format!("of {} bytes", v.len())))?;
            Dest::Label(u32::from_be_bytes(v) >> 12)
        }
        (AF_MPLS, None) => return Err(bad("missing")),
        (AF_INET, v) => {
            let a: [u8; 4] = v.unwrap_or(&[0; 4]).try_into().map_err(|_| bad("not 4 bytes"))?;
            prefix(IpAddr::V4(a.into()), len)?
        }
        (_, v) => {
            let a: [u8; 16] = v.unwrap_or(&[0; 16]).try_into().map_err(|_| bad("not 16 bytes"))?;
            prefix(IpAddr::V6(a.into()), len)?
        }
    };
    Ok(RouteKey { table, dest })
}

/// An encapsulation other than MPLS anywhere in the message (the route's own, or one
/// of its next hops'), read from the bytes: whether the netlink crate can parse what
/// such an encapsulation holds does not matter.
fn foreign_encapsulation(body: &[u8]) -> Option<Skip> {
    let encap = |attrs: &[u8]| {
        attributes(attrs).find_map(|(kind, value)| {
            let t = u16::from_ne_bytes(value.try_into().ok()?);
            (kind == RTA_ENCAP_TYPE && t != LWTUNNEL_ENCAP_MPLS).then_some(t)
        })
    };
    let attrs = &body[RTMSG_LEN..];
    let in_nexthops =
        attributes(attrs).filter(|(kind, _)| *kind == RTA_MULTIPATH).find_map(|(_, mut nhs)| {
            while nhs.len() >= RTNH_LEN {
                let len = usize::from(u16::from_ne_bytes([nhs[0], nhs[1]])).clamp(RTNH_LEN, nhs.len());
                if let Some(t) = encap(&nhs[RTNH_LEN..len]) {
                    return Some(t);
                }
                nhs = nhs.get(len.next_multiple_of(4)..).unwrap_or_default();
            }
            None
        });
    let t = encap(attrs).or(in_nexthops)?;
    Some(match t {
        LWTUNNEL_ENCAP_SEG6 => skip(Unsupported::Seg6, "an SRv6 encapsulation (seg6)"),
        LWTUNNEL_ENCAP_SEG6_LOCAL => skip(Unsupported::Seg6Local, "an SRv6 local behaviour (seg6local)"),
        t => skip(Unsupported::Encapsulation, format!("encapsulation type {t} (only MPLS, 1)")),
    })
}

fn route(key: RouteKey, body: &[u8]) -> Result<Route, Skip> {
    if let Some(s) = foreign_encapsulation(body) {
        return Err(s);
    }
    let msg = RouteMessage::parse(body).map_err(|e| skip(Unsupported::Malformed, format!("{e:#}")))?;
    let h = &msg.header;
    let mpls = h.address_family == AddressFamily::Mpls;
    let mut top = NexthopAttrs::default();
    let mut multipath = None;
    for a in &msg.attributes {
        match a {
            RouteAttribute::Table(_) | RouteAttribute::Destination(_) => {}
            RouteAttribute::MultiPath(nhs) => multipath = Some(nhs),
            // The metric, preferred source and the kernel's own annotations change
            // nothing in how vmpls forwards.
            RouteAttribute::Priority(_)
            | RouteAttribute::PrefSource(_)
            | RouteAttribute::Metrics(_)
            | RouteAttribute::CacheInfo(_)
            | RouteAttribute::Preference(_) => {}
            other => top.take(other)?,
        }
    }
    let kind = match h.kind {
        RouteType::Unicast => Kind::Unicast,
        RouteType::BlackHole => Kind::Blackhole,
        RouteType::Unreachable => Kind::Unreachable,
        RouteType::Prohibit => Kind::Prohibit,
        other => {
            return Err(skip(Unsupported::RouteType, format!("route type {other:?} for {:?}", key.dest)));
        }
    };
    let mut nexthops = Vec::new();
    if kind == Kind::Unicast {
        match multipath {
            Some(nhs) if nhs.is_empty() => {
                return Err(skip(Unsupported::Nexthop, format!("an empty RTA_MULTIPATH for {:?}", key.dest)));
            }
            Some(nhs) => {
                for nh in nhs {
                    let mut attrs = NexthopAttrs { ifindex: nonzero(nh.interface_index), ..top.clone() };
                    attrs.weight = u32::from(nh.hops) + 1;
                    for a in &nh.attributes {
                        attrs.take(a)?;
                    }
                    nexthops.push(attrs.nexthop(mpls)?);
                }
            }
            None => nexthops.push(top.nexthop(mpls)?),
        }
    }
    // The route is kept as long as zebra has it: a vector grown by pushes holds room for
    // four next hops (224 bytes for one), most routes have one.
    nexthops.shrink_to_fit();
    Ok(Route { key, protocol: u8::from(h.protocol), kind, nexthops })
}

fn nonzero(i: u32) -> Option<u32> {
    (i != 0).then_some(i)
}

fn prefix(addr: IpAddr, len: u8) -> Result<Dest, Skip> {
    let bits = if addr.is_ipv4() { 32 } else { 128 };
    if len > bits {
        return Err(skip(Unsupported::Malformed, format!("prefix length /{len} for {addr}")));
    }
    let masked = match addr {
        IpAddr::V4(a) => {
            IpAddr::V4((u32::from(a) & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)).into())
        }
        IpAddr::V6(a) => {
            IpAddr::V6((u128::from(a) & u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)).into())
        }
    };
    Ok(Dest::Prefix(masked, len))
}

/// The attributes of one next hop, gathered from the message or a `RTA_MULTIPATH` entry.
#[derive(Debug, Clone, Default)]
struct NexthopAttrs {
    gateway: Option<IpAddr>,
    ifindex: Option<u32>,
    labels: Option<Vec<u32>>,
    encap_mpls: Option<bool>,
    raw_labels: Option<Vec<u8>>,
    weight: u32,
}

impl NexthopAttrs {
    fn take(&mut self, a: &RouteAttribute) -> Result<(), Skip> {
        match a {
            RouteAttribute::Gateway(RouteAddress::Inet(a)) => self.gateway = Some(IpAddr::V4(*a)),
            RouteAttribute::Gateway(RouteAddress::Inet6(a)) => self.gateway = Some(IpAddr::V6(*a)),
            RouteAttribute::Via(RouteVia::Inet(a)) => self.gateway = Some(IpAddr::V4(*a)),
            RouteAttribute::Via(RouteVia::Inet6(a)) => self.gateway = Some(IpAddr::V6(*a)),
            RouteAttribute::Oif(i) => self.ifindex = nonzero(*i),
            RouteAttribute::NewDestination(ls) => self.labels = Some(ls.iter().map(|l| l.label).collect()),
            RouteAttribute::EncapType(RouteLwEnCapType::Mpls) => self.encap_mpls = Some(true),
            RouteAttribute::EncapType(other) => {
                return Err(skip(Unsupported::Encapsulation, format!("encapsulation {other:?} (only MPLS)")));
            }
            RouteAttribute::Encap(encaps) => {
                for e in encaps {
                    match e {
                        RouteLwTunnelEncap::Mpls(RouteMplsIpTunnel::Destination(ls)) => {
                            self.labels = Some(ls.iter().map(|l| l.label).collect());
                        }
                        // zebra sets no TTL for the push; the route's TTL model applies.
                        RouteLwTunnelEncap::Mpls(RouteMplsIpTunnel::Ttl(_)) => {}
                        // Inside RTA_MULTIPATH the crate reads RTA_ENCAP with the route's
                        // encapsulation type rather than the next hop's own, so an MPLS
                        // push arrives raw: MPLS_IPTUNNEL_DST (1), label stack entries.
                        RouteLwTunnelEncap::Other(nla) if nla.kind() == MPLS_IPTUNNEL_DST => {
                            let mut value = vec![0; nla.value_len()];
                            nla.emit_value(&mut value);
                            self.raw_labels = Some(value);
                        }
                        RouteLwTunnelEncap::Other(nla) if nla.kind() == MPLS_IPTUNNEL_TTL => {}
                        other => {
                            return Err(skip(Unsupported::Attribute, format!("in RTA_ENCAP: {other:?}")));
                        }
                    }
                }
            }
            RouteAttribute::NhId(_) => return Err(skip(Unsupported::NexthopGroups, NEXTHOP_GROUPS_HINT)),
            RouteAttribute::Priority(_) | RouteAttribute::PrefSource(_) => {}
            RouteAttribute::Gateway(g) => {
                return Err(skip(Unsupported::Nexthop, format!("a gateway {g:?}")));
            }
            RouteAttribute::Via(v) => {
                return Err(skip(Unsupported::Nexthop, format!("a next hop via {v:?}")));
            }
            other => return Err(skip(Unsupported::Attribute, attribute_name(other))),
        }
        Ok(())
    }

    fn nexthop(&self, mpls: bool) -> Result<Nexthop, Skip> {
        let raw = self.raw_labels.as_ref().map(|raw| stack_entries(raw)).transpose()?;
        let given = self.labels.as_ref().or(raw.as_ref());
        if given.is_some() && !mpls && self.encap_mpls != Some(true) {
            return Err(skip(Unsupported::Malformed, "labels in RTA_ENCAP without RTA_ENCAP_TYPE = MPLS"));
        }
        if self.gateway.is_none() && self.ifindex.is_none() {
            return Err(skip(Unsupported::Nexthop, "a next hop with neither gateway nor interface"));
        }
        let labels: Vec<u32> = given.into_iter().flatten().copied().filter(|&l| l != IMPLICIT_NULL).collect();
        if labels.iter().any(|&l| l > MAX_LABEL) {
            return Err(skip(Unsupported::Malformed, format!("label out of range in {labels:?}")));
        }
        Ok(Nexthop { gateway: self.gateway, ifindex: self.ifindex, labels, weight: self.weight.max(1) })
    }
}

/// Labels from raw label stack entries (network order, label in the top 20 bits).
fn stack_entries(raw: &[u8]) -> Result<Vec<u32>, Skip> {
    if raw.is_empty() || !raw.len().is_multiple_of(4) {
        return Err(skip(Unsupported::Malformed, format!("a label stack of {} bytes", raw.len())));
    }
    Ok(raw.chunks_exact(4).map(|e| u32::from_be_bytes([e[0], e[1], e[2], e[3]]) >> 12).collect())
}

fn attribute_name(a: &RouteAttribute) -> String {
    let mut buf = vec![0u8; a.buffer_len()];
    a.emit(&mut buf);
    let kind = buf.get(2..4).map_or(0, |b| u16::from_ne_bytes([b[0], b[1]]));
    format!("type {kind} ({a:?})")
}

/// Encodes routes as zebra does, for tests and load generators.
pub mod encode {
    use super::*;
    use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload};
    use netlink_packet_route::RouteNetlinkMessage;
    use netlink_packet_route::route::{MplsLabel, RouteHeader, RouteProtocol, RouteScope};

    fn label(l: u32, bottom: bool) -> MplsLabel {
        MplsLabel { label: l, traffic_class: 0, bottom_of_stack: bottom, ttl: 0 }
    }

    fn stack(ls: &[u32]) -> Vec<MplsLabel> {
        ls.iter().enumerate().map(|(i, &l)| label(l, i + 1 == ls.len())).collect()
    }

    fn nexthop_attrs(mpls: bool, nh: &Nexthop) -> Vec<RouteAttribute> {
        let mut attrs = Vec::new();
        match (mpls, nh.gateway) {
            (true, Some(IpAddr::V4(a))) => attrs.push(RouteAttribute::Via(RouteVia::Inet(a))),
            (true, Some(IpAddr::V6(a))) => attrs.push(RouteAttribute::Via(RouteVia::Inet6(a))),
            (false, Some(g)) => attrs.push(RouteAttribute::Gateway(g.into())),
            (_, None) => {}
        }
        if !nh.labels.is_empty() {
            if mpls {
                attrs.push(RouteAttribute::NewDestination(stack(&nh.labels)));
            } else {
                attrs.push(RouteAttribute::EncapType(RouteLwEnCapType::Mpls));
                attrs.push(RouteAttribute::Encap(vec![RouteLwTunnelEncap::Mpls(
                    RouteMplsIpTunnel::Destination(stack(&nh.labels)),
                )]));
            }
        }
        attrs
    }

    /// One netlink message (`RTM_NEWROUTE`, or `RTM_DELROUTE` with `delete`) for `route`.
    pub fn message(route: &Route, delete: bool) -> Vec<u8> {
        let mut msg = RouteMessage::default();
        let (family, len) = match route.key.dest {
            Dest::Label(l) => {
                msg.attributes.push(RouteAttribute::Destination(RouteAddress::Mpls(label(l, true))));
                (AddressFamily::Mpls, 20)
            }
            Dest::Prefix(a, len) => {
                if len > 0 {
                    msg.attributes.push(RouteAttribute::Destination(a.into()));
                }
                (if a.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 }, len)
            }
        };
        let mpls = family == AddressFamily::Mpls;
        msg.header = RouteHeader {
            address_family: family,
            destination_prefix_length: len,
            table: u8::try_from(route.key.table).unwrap_or(252),
            protocol: RouteProtocol::from(route.protocol),
            scope: RouteScope::Universe,
            kind: match route.kind {
                Kind::Unicast => RouteType::Unicast,
                Kind::Blackhole => RouteType::BlackHole,
                Kind::Unreachable => RouteType::Unreachable,
                Kind::Prohibit => RouteType::Prohibit,
            },
            ..RouteHeader::default()
        };
        if route.key.table > 255 {
            msg.attributes.push(RouteAttribute::Table(route.key.table));
        }
        msg.attributes.push(RouteAttribute::Priority(20));
        match route.nexthops.as_slice() {
            [] => {}
            [nh] => {
                msg.attributes.extend(nexthop_attrs(mpls, nh));
                if let Some(i) = nh.ifindex {
                    msg.attributes.push(RouteAttribute::Oif(i));
                }
            }
            nhs => msg.attributes.push(RouteAttribute::MultiPath(
                nhs.iter()
                    .map(|nh| {
                        let mut out = RouteNextHop::default();
                        out.hops = u8::try_from(nh.weight.saturating_sub(1)).unwrap_or(u8::MAX);
                        out.interface_index = nh.ifindex.unwrap_or(0);
                        out.attributes = nexthop_attrs(mpls, nh);
                        out
                    })
                    .collect(),
            )),
        }
        let payload =
            if delete { RouteNetlinkMessage::DelRoute(msg) } else { RouteNetlinkMessage::NewRoute(msg) };
        let mut nl = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::InnerMessage(payload));
        nl.finalize();
        let mut buf = vec![0; nl.buffer_len()];
        nl.serialize(&mut buf);
        buf
    }

    /// `route` as FRR 10 sends an SRv6 route (an L3VPN over SRv6): `RTA_ENCAP_TYPE` =
    /// seg6 and `RTA_ENCAP` with a segment routing header holding `segment`, in place of
    /// labels. vmpls does not carry it; this is for tests of what it does instead.
    pub fn srv6_message(route: &Route, segment: std::net::Ipv6Addr) -> Vec<u8> {
        let plain = Route {
            nexthops: route.nexthops.iter().map(|n| Nexthop { labels: vec![], ..n.clone() }).collect(),
            ..route.clone()
        };
        let mut msg = message(&plain, false);
        let attr = |kind: u16, value: &[u8]| {
            let mut a = u16::try_from(4 + value.len()).unwrap_or(u16::MAX).to_ne_bytes().to_vec();
            a.extend(kind.to_ne_bytes());
            a.extend(value);
            a.resize(a.len().next_multiple_of(4), 0);
            a
        };
        // struct seg6_iptunnel_encap: mode 1 (encap), then struct ipv6_sr_hdr with one
        // segment (header length in 8-byte units, type 4, segments left 0).
        let mut srh = 1i32.to_ne_bytes().to_vec();
        srh.extend([0, 2, 4, 0, 0, 0, 0, 0]);
        srh.extend(segment.octets());
        msg.resize(msg.len().next_multiple_of(4), 0);
        msg.extend(attr(RTA_ENCAP_TYPE, &LWTUNNEL_ENCAP_SEG6.to_ne_bytes()));
        msg.extend(attr(RTA_ENCAP | 0x8000, &attr(1, &srh)));
        let len = u32::try_from(msg.len()).unwrap_or(u32::MAX);
        msg[..4].copy_from_slice(&len.to_ne_bytes());
        msg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn round_trip(route: &Route) {
        let bytes = encode::message(route, false);
        assert_eq!(decode(&bytes).unwrap(), vec![Update::Add(route.clone())]);
        let bytes = encode::message(route, true);
        assert_eq!(decode(&bytes).unwrap(), vec![Update::Delete(route.key)]);
    }

    fn nh(gw: &str, ifindex: u32, labels: &[u32], weight: u32) -> Nexthop {
        Nexthop { gateway: Some(v4(gw)), ifindex: Some(ifindex), labels: labels.to_vec(), weight }
    }

    #[test]
    fn swap_php_push_and_ecmp_round_trip() {
        let lsp = |dest, nexthops| Route {
            key: RouteKey { table: MAIN_TABLE, dest },
            protocol: 193,
            kind: Kind::Unicast,
            nexthops,
        };
        round_trip(&lsp(Dest::Label(16), vec![nh("198.18.10.2", 2, &[17], 1)]));
        round_trip(&lsp(Dest::Label(18), vec![nh("198.18.10.2", 2, &[], 1)]));
        round_trip(&lsp(Dest::Prefix(v4("198.18.2.0"), 24), vec![nh("198.18.10.2", 2, &[16, 100], 1)]));
        round_trip(&lsp(
            Dest::Prefix(v4("198.18.2.0"), 24),
            vec![nh("198.18.10.2", 2, &[16], 2), nh("198.18.11.2", 3, &[20], 1)],
        ));
        round_trip(&lsp(Dest::Label(19), vec![nh("198.18.10.2", 2, &[21], 1), nh("198.18.11.2", 3, &[], 1)]));
        round_trip(&Route {
            key: RouteKey { table: MAIN_TABLE, dest: Dest::Prefix("2001:db8:2::".parse().unwrap(), 64) },
            protocol: 196,
            kind: Kind::Blackhole,
            nexthops: vec![],
        });
        for kind in [Kind::Unreachable, Kind::Prohibit] {
            round_trip(&Route {
                key: RouteKey { table: MAIN_TABLE, dest: Dest::Prefix(v4("198.18.9.0"), 24) },
                protocol: 196,
                kind,
                nexthops: vec![],
            });
        }
    }

    #[test]
    fn several_messages_in_one_frame_and_host_bits_cleared() {
        let a = Route {
            key: RouteKey { table: MAIN_TABLE, dest: Dest::Prefix(v4("198.18.2.0"), 24) },
            protocol: 188,
            kind: Kind::Unicast,
            nexthops: vec![nh("198.18.10.2", 2, &[], 1)],
        };
        let b = Route { key: RouteKey { table: MAIN_TABLE, dest: Dest::Label(300) }, ..a.clone() };
        let mut bytes = encode::message(&a, false);
        bytes.extend(encode::message(&b, true));
        assert_eq!(decode(&bytes).unwrap(), vec![Update::Add(a), Update::Delete(b.key)]);
    }

    #[test]
    fn implicit_null_is_no_label() {
        let r = Route {
            key: RouteKey { table: MAIN_TABLE, dest: Dest::Prefix(v4("198.18.2.0"), 24) },
            protocol: 193,
            kind: Kind::Unicast,
            nexthops: vec![nh("198.18.10.2", 2, &[IMPLICIT_NULL], 1)],
        };
        let Update::Add(got) = &decode(&encode::message(&r, false)).unwrap()[0] else { panic!() };
        assert!(got.nexthops[0].labels.is_empty());
    }

    /// One attribute, padded.
    fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut out = u16::try_from(4 + value.len()).unwrap().to_ne_bytes().to_vec();
        out.extend(kind.to_ne_bytes());
        out.extend(value);
        out.resize(out.len().next_multiple_of(4), 0);
        out
    }

    /// A route message built byte by byte: `struct rtmsg` (table 254, protocol 186 bgp)
    /// and `attrs`.
    fn raw_route(kind: u16, family: u8, dst_len: u8, rtype: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut body = vec![family, dst_len, 0, 0, 254, 186, 0, rtype, 0, 0, 0, 0];
        attrs.iter().for_each(|a| body.extend(a));
        let mut msg = u32::try_from(16 + body.len()).unwrap().to_ne_bytes().to_vec();
        msg.extend(kind.to_ne_bytes());
        msg.extend(0x0501u16.to_ne_bytes()); // NLM_F_REQUEST | NLM_F_REPLACE | NLM_F_CREATE
        msg.extend([0; 8]);
        msg.extend(body);
        msg
    }

    const NESTED: u16 = 0x8000;
    const RTA_OIF: u16 = 4;
    const RTA_GATEWAY: u16 = 5;
    const RTA_PRIORITY: u16 = 6;

    /// `RTA_ENCAP` for `seg6` as FRR 10's `fill_seg6ipt_encap` fills it: SEG6_IPTUNNEL_SRH
    /// holding `struct seg6_iptunnel_encap` (mode 1, encap) and a segment routing header
    /// with one segment.
    fn seg6_encap() -> Vec<Vec<u8>> {
        let mut srh = 1i32.to_ne_bytes().to_vec();
        srh.extend([0, 2, 4, 0, 0, 0, 0, 0]);
        srh.extend("2001:db8:100::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        vec![nla(RTA_ENCAP_TYPE, &LWTUNNEL_ENCAP_SEG6.to_ne_bytes()), nla(RTA_ENCAP | NESTED, &nla(1, &srh))]
    }

    /// `RTA_ENCAP` for `seg6local` End.DT4 into table 10, with the NEXT-C-SID flavour
    /// nested as FRR 10 adds it.
    fn seg6local_encap() -> Vec<Vec<u8>> {
        let mut flavors = nla(1, &2u32.to_ne_bytes());
        flavors.extend(nla(2, &[32]));
        flavors.extend(nla(3, &[16]));
        let mut encap = nla(1, &8u32.to_ne_bytes()); // SEG6_LOCAL_ACTION_END_DT4
        encap.extend(nla(9, &10u32.to_ne_bytes())); // SEG6_LOCAL_VRFTABLE
        encap.extend(nla(10 | NESTED, &flavors)); // SEG6_LOCAL_FLAVORS
        vec![nla(RTA_ENCAP_TYPE, &LWTUNNEL_ENCAP_SEG6_LOCAL.to_ne_bytes()), nla(RTA_ENCAP | NESTED, &encap)]
    }

    fn key4(a: &str, len: u8) -> RouteKey {
        RouteKey { table: MAIN_TABLE, dest: Dest::Prefix(v4(a), len) }
    }

    fn skipped(u: &Update) -> (Unsupported, Option<RouteKey>) {
        let Update::Unsupported(s) = u else { panic!("not skipped: {u:?}") };
        (s.kind, s.key)
    }

    #[test]
    fn srv6_routes_as_frr_10_sends_them_are_skipped_and_the_next_ones_read() {
        let lsp = Route {
            key: RouteKey { table: MAIN_TABLE, dest: Dest::Label(16) },
            protocol: 193,
            kind: Kind::Unicast,
            nexthops: vec![nh("198.18.10.2", 2, &[17], 1)],
        };
        // An L3VPN route over SRv6: IPv4 prefix, seg6 encapsulation out of an interface.
        let mut attrs = vec![nla(RTA_DST, &[198, 18, 7, 0]), nla(RTA_PRIORITY, &20u32.to_ne_bytes())];
        attrs.extend(seg6_encap());
        attrs.push(nla(RTA_OIF, &2u32.to_ne_bytes()));
        let vpn = raw_route(RTM_NEWROUTE, AF_INET, 24, 1, &attrs);
        // The local SID: an IPv6 /128 with a seg6local behaviour.
        let mut attrs = vec![nla(RTA_DST, &"2001:db8:100::".parse::<std::net::Ipv6Addr>().unwrap().octets())];
        attrs.extend(seg6local_encap());
        attrs.push(nla(RTA_OIF, &3u32.to_ne_bytes()));
        let sid = raw_route(RTM_NEWROUTE, AF_INET6, 128, 1, &attrs);
        // ECMP with the seg6 encapsulation on the second next hop only.
        let mut second = vec![];
        seg6_encap().iter().for_each(|a| second.extend(a));
        let mut nhs = vec![];
        for (ifindex, attrs) in [(2u32, nla(RTA_GATEWAY, &[198, 18, 10, 2])), (3, second)] {
            nhs.extend(u16::try_from(RTNH_LEN + attrs.len()).unwrap().to_ne_bytes());
            nhs.extend([0, 0]);
            nhs.extend(ifindex.to_ne_bytes());
            nhs.extend(attrs);
        }
        let ecmp = raw_route(
            RTM_NEWROUTE,
            AF_INET,
            24,
            1,
            &[nla(RTA_DST, &[198, 18, 8, 0]), nla(RTA_MULTIPATH, &nhs)],
        );

        let mut frame = vpn;
        frame.extend(sid);
        frame.extend(ecmp);
        frame.extend(encode::message(&lsp, false));
        let u = decode(&frame).unwrap();
        assert_eq!(u.len(), 4);
        assert_eq!(skipped(&u[0]), (Unsupported::Seg6, Some(key4("198.18.7.0", 24))));
        let sid_key =
            RouteKey { table: MAIN_TABLE, dest: Dest::Prefix("2001:db8:100::".parse().unwrap(), 128) };
        assert_eq!(skipped(&u[1]), (Unsupported::Seg6Local, Some(sid_key)));
        assert_eq!(skipped(&u[2]), (Unsupported::Seg6, Some(key4("198.18.8.0", 24))));
        assert_eq!(u[3], Update::Add(lsp));
        // Deletes name the destination only; they apply whatever the route carried.
        let mut attrs = vec![nla(RTA_DST, &[198, 18, 7, 0])];
        attrs.extend(seg6_encap());
        assert_eq!(
            decode(&raw_route(RTM_DELROUTE, AF_INET, 24, 0, &attrs)).unwrap(),
            [Update::Delete(key4("198.18.7.0", 24))]
        );
    }

    #[test]
    fn well_framed_messages_vmpls_cannot_carry_are_skipped_by_kind() {
        let r = Route {
            key: RouteKey { table: MAIN_TABLE, dest: Dest::Label(16) },
            protocol: 193,
            kind: Kind::Unicast,
            nexthops: vec![nh("198.18.10.2", 2, &[17], 1)],
        };
        let good = encode::message(&r, false);
        let with_attribute = |a: &[u8]| {
            let mut m = good.clone();
            m.extend_from_slice(a);
            let len = u32::try_from(m.len()).unwrap();
            m[..4].copy_from_slice(&len.to_ne_bytes());
            m
        };
        let one = |m: &[u8]| {
            let u = decode(m).unwrap();
            assert_eq!(u.len(), 1, "{u:?}");
            skipped(&u[0])
        };
        // Family 7 (AF_BRIDGE): the header's family byte follows the 16-byte nlmsghdr.
        let mut bad = good.clone();
        bad[16] = 7;
        assert_eq!(one(&bad), (Unsupported::Family, None));
        // A next-hop object message, and a route naming one.
        let mut nhg = good.clone();
        nhg[4..6].copy_from_slice(&RTM_NEWNEXTHOP.to_ne_bytes());
        assert_eq!(one(&nhg), (Unsupported::NexthopGroups, None));
        assert_eq!(
            one(&with_attribute(&nla(30, &7u32.to_ne_bytes()))),
            (Unsupported::NexthopGroups, Some(r.key))
        );
        // An attribute with an unknown type (RTA_UID, 25, means nothing for a route here).
        assert_eq!(one(&with_attribute(&nla(25, &[0; 4]))), (Unsupported::Attribute, Some(r.key)));
        // A known attribute holding what it cannot: RTA_OIF of 2 bytes.
        assert_eq!(one(&with_attribute(&nla(RTA_OIF, &[1, 0]))), (Unsupported::Malformed, Some(r.key)));
        // A local route (type 2) and a VXLAN next hop (EVPN, encapsulation 100).
        let local = raw_route(
            RTM_NEWROUTE,
            AF_INET,
            32,
            2,
            &[nla(RTA_DST, &[198, 18, 9, 1]), nla(RTA_OIF, &[2, 0, 0, 0])],
        );
        assert_eq!(one(&local), (Unsupported::RouteType, Some(key4("198.18.9.1", 32))));
        let vxlan = [
            nla(RTA_DST, &[198, 18, 9, 0]),
            nla(RTA_ENCAP_TYPE, &100u16.to_ne_bytes()),
            nla(RTA_ENCAP | NESTED, &nla(0, &[0; 4])),
        ];
        assert_eq!(
            one(&raw_route(RTM_NEWROUTE, AF_INET, 24, 1, &vxlan)),
            (Unsupported::Encapsulation, Some(key4("198.18.9.0", 24)))
        );
        // A gateway that is no address, a prefix longer than its family.
        let mpls_gw = [nla(RTA_DST, &[198, 18, 9, 0]), nla(RTA_GATEWAY, &[198, 18, 10])];
        let (kind, _) = one(&raw_route(RTM_NEWROUTE, AF_INET, 24, 1, &mpls_gw));
        assert!(matches!(kind, Unsupported::Nexthop | Unsupported::Malformed), "{kind:?}");
        assert_eq!(one(&raw_route(RTM_NEWROUTE, AF_INET, 33, 1, &[])), (Unsupported::Malformed, None));
        // Another message type (RTM_NEWRULE, 32).
        let mut rule = good.clone();
        rule[4..6].copy_from_slice(&32u16.to_ne_bytes());
        assert_eq!(one(&rule), (Unsupported::MessageType, None));
        // Neighbour messages (EVPN) are ignored, not counted.
        let mut neigh = good;
        neigh[4..6].copy_from_slice(&RTM_NEWNEIGH.to_ne_bytes());
        assert_eq!(decode(&neigh), Ok(vec![Update::Ignored(RTM_NEWNEIGH)]));
    }

    #[test]
    fn broken_framing_is_an_error() {
        let r = Route {
            key: RouteKey { table: MAIN_TABLE, dest: Dest::Prefix(v4("198.18.2.0"), 24) },
            protocol: 193,
            kind: Kind::Unicast,
            nexthops: vec![nh("198.18.10.2", 2, &[17], 1), nh("198.18.11.2", 3, &[18], 1)],
        };
        let good = encode::message(&r, false);
        for cut in 1..good.len() {
            assert!(decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let framing = |attrs: &[Vec<u8>]| {
            let m = raw_route(RTM_NEWROUTE, AF_INET, 24, 1, attrs);
            assert!(matches!(decode(&m), Err(DecodeError::Framing(_))), "{attrs:?}: {:?}", decode(&m));
        };
        let dst = nla(RTA_DST, &[198, 18, 2, 0]);
        // An attribute longer than what is left, one shorter than its own header, bytes
        // after the last one.
        framing(&[dst.clone(), vec![12, 0, 4, 0, 2, 0, 0, 0]]);
        framing(&[dst.clone(), vec![2, 0, 4, 0]]);
        framing(&[dst.clone(), vec![0, 0]]);
        // A next hop longer than RTA_MULTIPATH, one shorter than its header, a nested
        // attribute longer than its next hop, and inside RTA_ENCAP.
        framing(&[dst.clone(), nla(RTA_MULTIPATH, &[16, 0, 0, 0, 2, 0, 0, 0])]);
        framing(&[dst.clone(), nla(RTA_MULTIPATH, &[4, 0, 0, 0, 2, 0, 0, 0])]);
        framing(&[dst.clone(), nla(RTA_MULTIPATH, &[12, 0, 0, 0, 2, 0, 0, 0, 8, 0, 5, 0])]);
        framing(&[dst, nla(RTA_ENCAP_TYPE, &[1, 0]), nla(RTA_ENCAP, &[9, 0, 1, 0, 0, 0, 0, 0])]);
        // A route header cut short inside a whole netlink message.
        let mut short = good[..16].to_vec();
        short.extend([2, 24, 0, 0]);
        short[..4].copy_from_slice(&20u32.to_ne_bytes());
        assert!(matches!(decode(&short), Err(DecodeError::Framing(_))));
    }

    #[test]
    fn an_empty_multipath_is_skipped_not_a_route_without_next_hops() {
        use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload};
        use netlink_packet_route::RouteNetlinkMessage;
        let mut msg = RouteMessage::default();
        msg.header.address_family = AddressFamily::Inet;
        msg.header.destination_prefix_length = 24;
        msg.header.table = 254;
        msg.header.kind = RouteType::Unicast;
        msg.attributes.push(RouteAttribute::Destination(RouteAddress::Inet("198.18.7.0".parse().unwrap())));
        msg.attributes.push(RouteAttribute::MultiPath(vec![]));
        let mut nl = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(msg)),
        );
        nl.finalize();
        let mut buf = vec![0; nl.buffer_len()];
        nl.serialize(&mut buf);
        let updates = decode(&buf).unwrap();
        let [Update::Unsupported(s)] = updates.as_slice() else { panic!("{updates:?}") };
        assert_eq!(s.kind, Unsupported::Nexthop);
        assert_eq!(s.key.map(|k| k.table), Some(254));
    }
}
