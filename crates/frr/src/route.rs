//! The netlink messages inside FPM frames, decoded into route updates.
//!
//! zebra encodes for FPM exactly what it would send the kernel: `RTM_NEWROUTE` /
//! `RTM_DELROUTE` for IPv4, IPv6 and MPLS (`AF_MPLS`) routes. A label route carries its
//! incoming label in `RTA_DST`, its outgoing labels in `RTA_NEWDST` (none: pop) and its
//! next hop in `RTA_VIA`; a labelled IP route carries `RTA_ENCAP_TYPE` = MPLS and the
//! labels to push in `RTA_ENCAP`; ECMP next hops come in `RTA_MULTIPATH`, each with
//! its own attributes and `rtnh_hops` = weight - 1.
//!
//! Anything this decoder does not understand is an error, not a guess: a route read
//! wrongly forwards traffic wrongly, so the caller closes the connection and keeps its
//! table. Messages that are not about routes (neighbours and links, which zebra sends
//! for EVPN) are reported as [`Update::Ignored`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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
    /// Drop (blackhole, unreachable and prohibit routes alike).
    Blackhole,
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
}

/// Why a netlink message cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The netlink header is cut short or its length is wrong.
    #[error("truncated netlink message: {0}")]
    Truncated(String),
    /// The route body does not parse.
    #[error("malformed route message: {0}")]
    Malformed(String),
    /// A family other than IPv4, IPv6 and MPLS.
    #[error("route family {0} is not IPv4 (2), IPv6 (10) or MPLS (28)")]
    Family(u8),
    /// Next-hop objects: zebra was told to use next-hop groups.
    #[error(
        "zebra sends next-hop groups (message type {0}); configure `no fpm use-next-hop-groups` in zebra"
    )]
    NexthopGroups(u16),
    /// A message type this decoder has no meaning for.
    #[error("netlink message type {0} is not a route message")]
    MessageType(u16),
    /// An attribute whose meaning is unknown here.
    #[error("route attribute {0} is not understood")]
    Attribute(String),
    /// Something the attributes say that vmpls cannot represent.
    #[error("{0}")]
    Unsupported(String),
}

/// Decodes every netlink message of one FPM frame's payload.
///
/// # Errors
/// The first message that cannot be decoded (see [`DecodeError`]).
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
    match kind {
        RTM_NEWROUTE | RTM_DELROUTE => {}
        RTM_NEWNEXTHOP | RTM_DELNEXTHOP => return Err(DecodeError::NexthopGroups(kind)),
        RTM_NEWNEIGH | RTM_DELNEIGH | RTM_NEWLINK | RTM_DELLINK => return Ok(Update::Ignored(kind)),
        _ => return Err(DecodeError::MessageType(kind)),
    }
    let msg = RouteMessage::parse(body).map_err(|e| DecodeError::Malformed(format!("{e:#}")))?;
    if kind == RTM_DELROUTE {
        // zebra's deletes name the destination and little else: no next hop for an
        // LSP, route type 0, protocol 0.
        return Ok(Update::Delete(key(&msg)?));
    }
    Ok(Update::Add(route(&msg)?))
}

/// The table and destination of a route message.
fn key(msg: &RouteMessage) -> Result<RouteKey, DecodeError> {
    let h = &msg.header;
    let family = h.address_family;
    if !matches!(family, AddressFamily::Inet | AddressFamily::Inet6 | AddressFamily::Mpls) {
        return Err(DecodeError::Family(u8::from(family)));
    }
    let mut table = u32::from(h.table);
    let mut dest = None;
    for a in &msg.attributes {
        match a {
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::Destination(d) => dest = Some(d.clone()),
            _ => {}
        }
    }
    let len = h.destination_prefix_length;
    let dest = match (dest, family) {
        (Some(RouteAddress::Mpls(l)), AddressFamily::Mpls) => Dest::Label(l.label),
        (Some(RouteAddress::Inet(a)), AddressFamily::Inet) => prefix(IpAddr::V4(a), len)?,
        (Some(RouteAddress::Inet6(a)), AddressFamily::Inet6) => prefix(IpAddr::V6(a), len)?,
        (None, AddressFamily::Inet) => prefix(IpAddr::V4(Ipv4Addr::UNSPECIFIED), len)?,
        (None, AddressFamily::Inet6) => prefix(IpAddr::V6(Ipv6Addr::UNSPECIFIED), len)?,
        (d, _) => {
            return Err(DecodeError::Malformed(format!("destination {d:?} does not fit family {family:?}")));
        }
    };
    Ok(RouteKey { table, dest })
}

fn route(msg: &RouteMessage) -> Result<Route, DecodeError> {
    let h = &msg.header;
    let key = key(msg)?;
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
        RouteType::BlackHole | RouteType::Unreachable | RouteType::Prohibit => Kind::Blackhole,
        other => {
            return Err(DecodeError::Unsupported(format!("route type {other:?} for {:?}", key.dest)));
        }
    };
    let mut nexthops = Vec::new();
    if kind == Kind::Unicast {
        match multipath {
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
    Ok(Route { key, protocol: u8::from(h.protocol), kind, nexthops })
}

fn nonzero(i: u32) -> Option<u32> {
    (i != 0).then_some(i)
}

fn prefix(addr: IpAddr, len: u8) -> Result<Dest, DecodeError> {
    let bits = if addr.is_ipv4() { 32 } else { 128 };
    if len > bits {
        return Err(DecodeError::Malformed(format!("prefix length /{len} for {addr}")));
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
    fn take(&mut self, a: &RouteAttribute) -> Result<(), DecodeError> {
        match a {
            RouteAttribute::Gateway(RouteAddress::Inet(a)) => self.gateway = Some(IpAddr::V4(*a)),
            RouteAttribute::Gateway(RouteAddress::Inet6(a)) => self.gateway = Some(IpAddr::V6(*a)),
            RouteAttribute::Via(RouteVia::Inet(a)) => self.gateway = Some(IpAddr::V4(*a)),
            RouteAttribute::Via(RouteVia::Inet6(a)) => self.gateway = Some(IpAddr::V6(*a)),
            RouteAttribute::Oif(i) => self.ifindex = nonzero(*i),
            RouteAttribute::NewDestination(ls) => self.labels = Some(ls.iter().map(|l| l.label).collect()),
            RouteAttribute::EncapType(RouteLwEnCapType::Mpls) => self.encap_mpls = Some(true),
            RouteAttribute::EncapType(other) => {
                return Err(DecodeError::Unsupported(format!("encapsulation {other:?} (only MPLS)")));
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
                        other => return Err(DecodeError::Attribute(format!("{other:?}"))),
                    }
                }
            }
            RouteAttribute::NhId(_) => return Err(DecodeError::NexthopGroups(RTM_NEWNEXTHOP)),
            RouteAttribute::Priority(_) | RouteAttribute::PrefSource(_) => {}
            other => return Err(DecodeError::Attribute(attribute_name(other))),
        }
        Ok(())
    }

    fn nexthop(&self, mpls: bool) -> Result<Nexthop, DecodeError> {
        let raw = self.raw_labels.as_ref().map(|raw| stack_entries(raw)).transpose()?;
        let given = self.labels.as_ref().or(raw.as_ref());
        if given.is_some() && !mpls && self.encap_mpls != Some(true) {
            return Err(DecodeError::Malformed("labels in RTA_ENCAP without RTA_ENCAP_TYPE = MPLS".into()));
        }
        if self.gateway.is_none() && self.ifindex.is_none() {
            return Err(DecodeError::Unsupported("a next hop with neither gateway nor interface".into()));
        }
        let labels: Vec<u32> = given.into_iter().flatten().copied().filter(|&l| l != IMPLICIT_NULL).collect();
        if labels.iter().any(|&l| l > MAX_LABEL) {
            return Err(DecodeError::Malformed(format!("label out of range in {labels:?}")));
        }
        Ok(Nexthop { gateway: self.gateway, ifindex: self.ifindex, labels, weight: self.weight.max(1) })
    }
}

/// Labels from raw label stack entries (network order, label in the top 20 bits).
fn stack_entries(raw: &[u8]) -> Result<Vec<u32>, DecodeError> {
    if raw.is_empty() || !raw.len().is_multiple_of(4) {
        return Err(DecodeError::Malformed(format!("a label stack of {} bytes", raw.len())));
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

    #[test]
    fn what_cannot_be_read_is_an_error() {
        let r = Route {
            key: RouteKey { table: MAIN_TABLE, dest: Dest::Label(16) },
            protocol: 193,
            kind: Kind::Unicast,
            nexthops: vec![nh("198.18.10.2", 2, &[17], 1)],
        };
        let good = encode::message(&r, false);
        for cut in 1..good.len() {
            assert!(decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        // Family 7 (AF_BRIDGE): the header's family byte follows the 16-byte nlmsghdr.
        let mut bad = good.clone();
        bad[16] = 7;
        assert_eq!(decode(&bad), Err(DecodeError::Family(7)));
        // A next-hop object message.
        let mut nhg = good.clone();
        nhg[4..6].copy_from_slice(&RTM_NEWNEXTHOP.to_ne_bytes());
        assert_eq!(decode(&nhg), Err(DecodeError::NexthopGroups(RTM_NEWNEXTHOP)));
        // An attribute with an unknown type (RTA_UID, 25, means nothing for a route here).
        let mut unknown = good.clone();
        unknown.extend_from_slice(&[8, 0, 25, 0, 0, 0, 0, 0]);
        let len = u32::try_from(unknown.len()).unwrap();
        unknown[..4].copy_from_slice(&len.to_ne_bytes());
        assert!(matches!(decode(&unknown), Err(DecodeError::Attribute(_))), "{:?}", decode(&unknown));
        // Neighbour messages (EVPN) are skipped, not errors.
        let mut neigh = good;
        neigh[4..6].copy_from_slice(&RTM_NEWNEIGH.to_ne_bytes());
        assert_eq!(decode(&neigh), Ok(vec![Update::Ignored(RTM_NEWNEIGH)]));
    }
}
