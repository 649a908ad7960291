//! Forwarding tables of a vmpls router: the label table, per-VRF prefix tables, next hops
//! and ECMP groups, and the handle through which the data plane reads them.
//!
//! The control plane builds a complete [`Fib`] (usually with [`FibBuilder`]) and swaps it
//! in with [`FibHandle::store`]; forwarding threads read it with [`FibHandle::load`],
//! wait-free, once per batch. A `Fib` is never changed while readers hold it, so every
//! lookup sees one consistent version of the tables.
//!
//! No I/O and no `unsafe` here ([`Fib::prefetch_lookups`], which lets a data plane overlap
//! the lookups of a batch, asks `vmpls-sys` for the prefetch instruction). Lookups
//! ([`LabelTable::get`], [`Lpm::lookup`], [`NexthopGroup::select`]) neither allocate nor
//! panic.
#![forbid(unsafe_code)]

mod builder;
mod chunks;
mod dir;
mod error;
mod label;
mod lpm;
mod nexthop;
mod prefetch;
mod vpls;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use arc_swap::ArcSwap;

pub use builder::FibBuilder;
pub use error::FibError;
pub use label::{LabelAction, LabelRoute, LabelTable};
pub use lpm::{Lpm, LpmKey};
pub use nexthop::{MAX_NEXTHOPS, Nexthop, NexthopGroup};
pub use prefetch::{LookupKey, PREFETCH_MIN_ROUTES};
pub use vpls::VplsInstance;

/// Index of a port in the router's port list.
pub type PortId = u16;
/// An MPLS label (20 bits used).
pub type Label = u32;
/// Index of a VRF (routing table) in [`Fib::vrfs`].
pub type VrfId = u16;

/// The VRF of ports and routes that name none: "default".
pub const DEFAULT_VRF: VrfId = 0;
/// Name of [`DEFAULT_VRF`].
pub const DEFAULT_VRF_NAME: &str = "default";
/// The reserved labels and the label range, declared once in the wire crate: the largest
/// label ([`MAX_LABEL`], 2^20 - 1), the first that is not reserved ([`FIRST_UNRESERVED`];
/// RFC 3032 reserves 0-15), implicit null ([`IMPLICIT_NULL`]: signalled, never sent; a
/// label stack of `[3]` means "pop"), IPv4 and IPv6 explicit null.
pub use vmpls_wire::mpls::{
    FIRST_UNRESERVED, IMPLICIT_NULL, IPV4_EXPLICIT_NULL, IPV6_EXPLICIT_NULL, MAX_LABEL,
};
/// The deepest label stack the router forwards: a frame that arrives with more entries is
/// dropped (`label_stack_too_deep`), by the pipeline and by the in-kernel fast path, so a
/// route may not push (or swap to) more than this many labels.
pub const MAX_STACK_DEPTH: usize = 32;

/// How TTL crosses label pushes and pops (RFC 3443).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TtlModel {
    /// The LSP counts as hops: TTL is copied into pushed labels and back out on pop.
    #[default]
    Uniform,
    /// The LSP is one hop: pushed labels get TTL 255 and popping leaves the inner TTL.
    Pipe,
}

/// Where packets for a prefix go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteTarget {
    /// One of the router's own addresses: deliver to the router (ping, ...).
    Local,
    /// A subnet on a port: the next hop is the destination itself.
    Connected {
        /// The port the subnet is on.
        port: PortId,
    },
    /// Through gateways, with an optional label push per next hop.
    Forward(NexthopGroup),
    /// Drop silently (the data plane counts the drops).
    Blackhole,
    /// Drop and tell the sender with an ICMP destination unreachable (iproute2's
    /// `unreachable` and `prohibit` routes, FRR's `reject`).
    Reject(Reject),
}

/// Which ICMP error a rejecting route answers with, as Linux does for its route types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reject {
    /// `unreachable`: host unreachable (ICMP code 1), for IPv6 no route (code 0).
    Unreachable,
    /// `prohibit`: communication administratively prohibited (ICMP code 13, IPv6 code 1).
    Prohibit,
}

impl Reject {
    /// Every kind.
    pub const ALL: [Reject; 2] = [Reject::Unreachable, Reject::Prohibit];

    /// The kind named `name` ([`Reject::name`]).
    pub fn from_name(name: &str) -> Option<Reject> {
        Reject::ALL.into_iter().find(|r| r.name() == name)
    }

    /// The route type's name as iproute2 spells it.
    pub fn name(self) -> &'static str {
        match self {
            Reject::Unreachable => "unreachable",
            Reject::Prohibit => "prohibit",
        }
    }
}

/// A prefix table entry: what to do with packets to the prefix ([`target`]), and how TTL
/// crosses the labels it pushes ([`ttl_model`]). A single-path route keeps a copy of its
/// next hop ([`inline_hop`]), so that forwarding by a route of a large table reads the
/// trie node and not the group behind it; hence the fields behind accessors.
///
/// [`target`]: PrefixRoute::target
/// [`ttl_model`]: PrefixRoute::ttl_model
/// [`inline_hop`]: PrefixRoute::inline_hop
#[derive(Clone, PartialEq, Eq)]
pub struct PrefixRoute {
    target: RouteTarget,
    summary: RouteSummary,
}

impl PrefixRoute {
    /// A route with the default (uniform) TTL model.
    pub fn new(target: RouteTarget) -> Self {
        let group = match &target {
            RouteTarget::Forward(group) => Some(group),
            _ => None,
        };
        let summary = RouteSummary::new(TtlModel::Uniform, group);
        PrefixRoute { target, summary }
    }

    /// The route with TTL model `ttl_model`.
    #[must_use]
    pub fn with_ttl_model(mut self, ttl_model: TtlModel) -> Self {
        self.summary.ttl_model = ttl_model;
        self
    }

    /// What to do.
    #[inline]
    pub fn target(&self) -> &RouteTarget {
        &self.target
    }

    /// How TTL is handled when labels are pushed (RFC 3443).
    #[inline]
    pub fn ttl_model(&self) -> TtlModel {
        self.summary.ttl_model()
    }

    /// The next hop of a single-path route to an IPv4 next hop with at most
    /// [`INLINE_LABELS`] labels: what [`NexthopGroup::select`] gives for any hash, without
    /// reading the group.
    #[inline]
    pub fn inline_hop(&self) -> Option<InlineHop<'_>> {
        self.summary.inline_hop()
    }
}

impl std::fmt::Debug for PrefixRoute {
    /// The target and TTL model: the inline next hop is a copy of the target's.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixRoute")
            .field("target", &self.target)
            .field("ttl_model", &self.ttl_model())
            .finish()
    }
}

/// What forwarding reads of a route besides its target or action: the TTL model and, for
/// a single-path route to an IPv4 next hop with at most [`INLINE_LABELS`] labels, a copy
/// of that next hop, so that forwarding by a route of a large table reads the route (a
/// trie node, or a label's slot) and not the next-hop group behind it. With a group per
/// route (a label per prefix or per FEC) the group is one more cache line on one more page
/// a packet; an `rte_lpm` keeps its next hop in the index entry for the same reason. The
/// copy is made where the route is made and cannot change after.
///
/// 16 bytes, so that a [`PrefixRoute`] is 32 and a trie node one cache line.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct RouteSummary {
    hop_labels: [Label; INLINE_LABELS],
    hop_via: [u8; 4],
    hop_port: PortId,
    /// The inline next hop's label count, or [`NO_INLINE_HOP`].
    hop_label_count: u8,
    ttl_model: TtlModel,
}

/// The most labels a route's copy of its next hop holds ([`PrefixRoute::inline_hop`],
/// [`LabelRoute::inline_hop`]).
pub const INLINE_LABELS: usize = 2;
const NO_INLINE_HOP: u8 = u8::MAX;

impl RouteSummary {
    /// The summary of a route forwarding by `group` (`None`: a route that does not
    /// forward to a next hop).
    pub(crate) fn new(ttl_model: TtlModel, group: Option<&NexthopGroup>) -> RouteSummary {
        let mut s = RouteSummary {
            hop_labels: [0; INLINE_LABELS],
            hop_via: [0; 4],
            hop_port: 0,
            hop_label_count: NO_INLINE_HOP,
            ttl_model,
        };
        if let Some(group) = group
            && let [Nexthop { port, via: Some(IpAddr::V4(via)), labels, .. }] = group.nexthops()
            && labels.len() <= INLINE_LABELS
        {
            s.hop_labels[..labels.len()].copy_from_slice(labels);
            s.hop_via = via.octets();
            s.hop_port = *port;
            s.hop_label_count = labels.len() as u8;
        }
        s
    }

    #[inline]
    pub(crate) fn ttl_model(&self) -> TtlModel {
        self.ttl_model
    }

    /// The copy's single label, neighbour and port, if it has exactly one label.
    #[inline]
    pub(crate) fn single_label_hop(&self) -> Option<(Label, Ipv4Addr, PortId)> {
        (self.hop_label_count == 1).then(|| (self.hop_labels[0], Ipv4Addr::from(self.hop_via), self.hop_port))
    }

    #[inline]
    pub(crate) fn inline_hop(&self) -> Option<InlineHop<'_>> {
        let count = usize::from(self.hop_label_count);
        let labels = self.hop_labels.get(..count)?;
        Some(InlineHop { port: self.hop_port, via: Ipv4Addr::from(self.hop_via), labels })
    }
}

/// A copy of a single-path route's next hop, kept in the route
/// ([`PrefixRoute::inline_hop`], [`LabelRoute::inline_hop`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineHop<'a> {
    /// The port it leaves by.
    pub port: PortId,
    /// The neighbour it goes to.
    pub via: Ipv4Addr,
    /// The labels to push (a label route's: to swap the top one for), outermost first.
    pub labels: &'a [Label],
}

/// A routing table: IPv4 and IPv6 prefixes.
#[derive(Debug, Clone, Default)]
pub struct Vrf {
    /// The VRF's name ("default" for [`DEFAULT_VRF`]).
    pub name: String,
    /// IPv4 prefixes.
    pub v4: Lpm<Ipv4Addr, PrefixRoute>,
    /// IPv6 prefixes.
    pub v6: Lpm<Ipv6Addr, PrefixRoute>,
}

impl Vrf {
    /// An empty VRF.
    pub fn new(name: impl Into<String>) -> Self {
        Vrf { name: name.into(), v4: Lpm::new(), v6: Lpm::new() }
    }

    /// The longest-match route for `addr`, of either family.
    pub fn lookup(&self, addr: IpAddr) -> Option<&PrefixRoute> {
        match addr {
            IpAddr::V4(a) => self.v4.lookup_value(a),
            IpAddr::V6(a) => self.v6.lookup_value(a),
        }
    }
}

/// A port's configured addresses with their prefix lengths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortAddrs {
    /// IPv4 addresses; the first is the port's primary address.
    pub v4: Vec<(Ipv4Addr, u8)>,
    /// IPv6 addresses; the first is the port's primary address.
    pub v6: Vec<(Ipv6Addr, u8)>,
}

/// All forwarding state of a router at one moment.
#[derive(Debug, Clone)]
pub struct Fib {
    /// Routes by incoming label.
    pub labels: LabelTable,
    /// Routing tables; index = [`VrfId`], `vrfs[0]` is "default".
    pub vrfs: Vec<Vrf>,
    /// The VRF of each port (index = [`PortId`]).
    pub port_vrf: Vec<VrfId>,
    /// Whether each port accepts labelled frames (index = [`PortId`]). The label table is
    /// global: a label that pops into a VRF reaches into it from any port that accepts
    /// labels, so a customer's port must not. Follows
    /// [`port_label_acceptance`](Fib::port_label_acceptance) and
    /// [`port_labels_out`](Fib::port_labels_out).
    pub port_accepts_mpls: Vec<bool>,
    /// When each port accepts labelled frames (index = [`PortId`]).
    pub port_label_acceptance: Vec<LabelAcceptance>,
    /// Per port (index = [`PortId`]): how many label routes and labelled prefix routes
    /// have a next hop on it, kept by [`Fib::set_prefix_route`] and
    /// [`Fib::set_label_route`].
    pub port_labels_out: Vec<u32>,
    /// The addresses of each port (index = [`PortId`]).
    pub port_addrs: Vec<PortAddrs>,
    /// Source of IPv4 ICMP the router originates.
    pub router_v4: Option<Ipv4Addr>,
    /// Source of IPv6 ICMP the router originates.
    pub router_v6: Option<Ipv6Addr>,
    /// The pseudowires (VPWS), in force or not; their local labels are label routes of
    /// [`LabelAction::Pseudowire`] when they are installed.
    pub pseudowires: Vec<Pseudowire>,
    /// Per port (index = [`PortId`]): the pseudowire whose attachment circuit it is
    /// (index into [`pseudowires`](Fib::pseudowires)). Such a port is in raw Ethernet
    /// mode: every frame it receives rides the pseudowire.
    pub port_pw: Vec<Option<u16>>,
    /// The VPLS instances.
    pub vpls: Vec<VplsInstance>,
    /// Per port (index = [`PortId`]): the VPLS instance whose attachment circuit it is
    /// (index into [`vpls`](Fib::vpls)); raw Ethernet mode, bridged.
    pub port_vpls: Vec<Option<u16>>,
    /// Per pseudowire (index into [`pseudowires`](Fib::pseudowires)): the VPLS instance
    /// it belongs to; frames from it are bridged instead of sent to an attachment.
    pub pw_vpls: Vec<Option<u16>>,
}

/// When a port switches the labelled frames it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelAcceptance {
    /// Always: the core without FRR, MPLS-in-UDP tunnels, `mpls = true`.
    Always,
    /// Never: `mpls = false`, a customer VRF's port by default.
    Never,
    /// While the tables switch labels out of it (a label route, or a prefix route pushing
    /// labels, has a next hop on it). The label protocols (LDP, segment routing) exchange
    /// labels over an adjacency both ways, so the ports that labels leave by are those
    /// they run on, and a neighbour that sends labels in is one that labels go out to.
    WhileLabelsLeave,
}

impl LabelAcceptance {
    /// Whether a port accepts labels with `labels_out` routes switching labels out of it.
    #[inline]
    pub fn accepts(self, labels_out: u32) -> bool {
        match self {
            LabelAcceptance::Always => true,
            LabelAcceptance::Never => false,
            LabelAcceptance::WhileLabelsLeave => labels_out > 0,
        }
    }
}

/// The ports a prefix route switches labels out of: those of its next hops that push
/// labels, each once per next hop.
pub(crate) fn prefix_route_labels_out(r: &PrefixRoute) -> impl Iterator<Item = PortId> + '_ {
    let hops = match &r.target {
        RouteTarget::Forward(g) => g.nexthops(),
        _ => &[],
    };
    hops.iter().filter(|n| !n.labels.is_empty()).map(|n| n.port)
}

/// The ports a label route switches labels out of: those of all its next hops (a swap,
/// or a penultimate-hop pop toward the neighbour that advertised implicit null).
pub(crate) fn label_route_labels_out(r: &LabelRoute) -> impl Iterator<Item = PortId> + '_ {
    let hops = match r.action() {
        LabelAction::Forward(g) => g.nexthops(),
        _ => &[],
    };
    hops.iter().map(|n| n.port)
}

/// A point-to-point Ethernet pseudowire (RFC 4448) as the pipeline uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pseudowire {
    /// Its name (the key in the control plane).
    pub name: String,
    /// The attachment circuit; `None`: frames from the pseudowire are dropped.
    pub attachment: Option<PortId>,
    /// The label the far PE pushes (ours).
    pub local_label: Label,
    /// The label pushed toward the far PE, under the transport labels.
    pub remote_label: Label,
    /// The far PE: the transport is the default VRF's route to it.
    pub peer: IpAddr,
    /// Whether the RFC 4385 control word is used.
    pub control_word: bool,
    /// In force: signalled (or configured) and its local label installed. Frames from
    /// the attachment of a pseudowire not in force are dropped (`pw_down`).
    pub up: bool,
}

impl Fib {
    /// The pseudowire whose attachment circuit `port` is.
    #[inline]
    pub fn attachment_pw(&self, port: PortId) -> Option<(u16, &Pseudowire)> {
        let pw = (*self.port_pw.get(usize::from(port))?)?;
        Some((pw, self.pseudowires.get(usize::from(pw))?))
    }
}

impl Default for Fib {
    /// A FIB with an empty default VRF and no ports.
    fn default() -> Self {
        Fib {
            labels: LabelTable::new(),
            vrfs: vec![Vrf::new(DEFAULT_VRF_NAME)],
            port_vrf: Vec::new(),
            port_accepts_mpls: Vec::new(),
            port_label_acceptance: Vec::new(),
            port_labels_out: Vec::new(),
            port_addrs: Vec::new(),
            router_v4: None,
            router_v6: None,
            pseudowires: Vec::new(),
            port_pw: Vec::new(),
            vpls: Vec::new(),
            port_vpls: Vec::new(),
            pw_vpls: Vec::new(),
        }
    }
}

impl Fib {
    /// A builder for a FIB with ports, router addresses and routes.
    pub fn builder() -> FibBuilder {
        FibBuilder::new()
    }

    /// The VRF with id `id`.
    #[inline]
    pub fn vrf(&self, id: VrfId) -> Option<&Vrf> {
        self.vrfs.get(usize::from(id))
    }

    /// The VRF a port belongs to.
    #[inline]
    pub fn vrf_of_port(&self, port: PortId) -> Option<VrfId> {
        self.port_vrf.get(usize::from(port)).copied()
    }

    /// Whether labelled frames arriving on `port` may be switched (false for an unknown
    /// port).
    #[inline]
    pub fn accepts_mpls(&self, port: PortId) -> bool {
        self.port_accepts_mpls.get(usize::from(port)).copied().unwrap_or(false)
    }

    /// Whether `a` is the router's address or any port's.
    pub fn is_local_v4(&self, a: Ipv4Addr) -> bool {
        self.router_v4 == Some(a) || self.port_addrs.iter().any(|p| p.v4.iter().any(|&(x, _)| x == a))
    }

    /// Whether `a` is the router's address or any port's.
    pub fn is_local_v6(&self, a: Ipv6Addr) -> bool {
        self.router_v6 == Some(a) || self.port_addrs.iter().any(|p| p.v6.iter().any(|&(x, _)| x == a))
    }

    /// The first IPv4 address of a port (the sender address of its ARP requests).
    #[inline]
    pub fn port_v4(&self, port: PortId) -> Option<Ipv4Addr> {
        self.port_addrs.get(usize::from(port))?.v4.first().map(|&(a, _)| a)
    }

    /// The first IPv6 address of a port (the source of its neighbour solicitations).
    #[inline]
    pub fn port_v6(&self, port: PortId) -> Option<Ipv6Addr> {
        self.port_addrs.get(usize::from(port))?.v6.first().map(|&(a, _)| a)
    }

    /// Source address for ICMP the router sends out of `port`: the router address, else
    /// the port's own.
    #[inline]
    pub fn source_v4_for(&self, port: PortId) -> Option<Ipv4Addr> {
        self.router_v4.or_else(|| self.port_v4(port))
    }

    /// Source address for ICMPv6 the router sends out of `port`: the router address, else
    /// the port's own.
    #[inline]
    pub fn source_v6_for(&self, port: PortId) -> Option<Ipv6Addr> {
        self.router_v6.or_else(|| self.port_v6(port))
    }

    /// Source address for ICMP the router sends in `vrf` about a packet that arrived on
    /// `port`: in the default VRF as [`source_v4_for`](Fib::source_v4_for); in a
    /// customer's VRF an address of that VRF (the port's own if the port is in it, else
    /// the first of the VRF's ports that has one), as a router with a VRF device answers:
    /// the router address belongs to the provider's core, which the customer cannot reach
    /// and whose addresses may be the customer's too. The router address only when the VRF
    /// has none.
    pub fn source_v4_in(&self, vrf: VrfId, port: PortId) -> Option<Ipv4Addr> {
        self.vrf_source(vrf, port, |a| a.v4.first().map(|&(a, _)| a)).or_else(|| self.source_v4_for(port))
    }

    /// [`source_v4_in`](Fib::source_v4_in) for ICMPv6.
    pub fn source_v6_in(&self, vrf: VrfId, port: PortId) -> Option<Ipv6Addr> {
        self.vrf_source(vrf, port, |a| a.v6.first().map(|&(a, _)| a)).or_else(|| self.source_v6_for(port))
    }

    /// The address `first` picks of `port` if it is in `vrf`, else of the first port of
    /// `vrf` that has one; `None` in the default VRF.
    fn vrf_source<A>(&self, vrf: VrfId, port: PortId, first: impl Fn(&PortAddrs) -> Option<A>) -> Option<A> {
        if vrf == DEFAULT_VRF {
            return None;
        }
        let in_vrf = |p: usize| self.port_vrf.get(p) == Some(&vrf);
        let own = usize::from(port);
        let own = if in_vrf(own) { self.port_addrs.get(own).and_then(&first) } else { None };
        own.or_else(|| {
            (0..self.port_addrs.len()).filter(|&p| in_vrf(p)).find_map(|p| first(&self.port_addrs[p]))
        })
    }
}

/// The entries that may differ between two versions of a [`Fib`], from
/// [`Fib::changes_since`]. An entry may be listed although it did not change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FibChanges {
    /// Incoming labels.
    pub labels: Vec<Label>,
    /// IPv4 prefixes by VRF.
    pub v4: Vec<(VrfId, Ipv4Addr, u8)>,
    /// IPv6 prefixes by VRF.
    pub v6: Vec<(VrfId, Ipv6Addr, u8)>,
}

impl FibChanges {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.v4.is_empty() && self.v6.is_empty()
    }
}

/// Whether a prefix table entry was made from the ports' and router's addresses (by
/// [`FibBuilder::build`]) rather than from a route.
fn derived(r: &PrefixRoute) -> bool {
    matches!(r.target, RouteTarget::Local | RouteTarget::Connected { .. })
}

impl Fib {
    /// Counts the ports in `removed` out and those in `added` in
    /// ([`port_labels_out`](Fib::port_labels_out)) and follows their acceptance of labels.
    fn count_labels_out(&mut self, removed: &[PortId], added: &[PortId]) {
        for &p in removed {
            if let Some(n) = self.port_labels_out.get_mut(usize::from(p)) {
                *n = n.saturating_sub(1);
            }
        }
        for &p in added {
            if let Some(n) = self.port_labels_out.get_mut(usize::from(p)) {
                *n += 1;
            }
        }
        for &p in removed.iter().chain(added) {
            let i = usize::from(p);
            if let (Some(a), Some(&n), Some(out)) = (
                self.port_label_acceptance.get(i),
                self.port_labels_out.get(i),
                self.port_accepts_mpls.get_mut(i),
            ) {
                *out = a.accepts(n);
            }
        }
    }

    /// Sets (`Some`) or removes (`None`) the route of one prefix in place, with the checks
    /// [`FibBuilder::build`] makes. Meant for a copy of the FIB in force (`clone` is cheap:
    /// the tables share their storage), to be stored as the next version: the change then
    /// costs time that does not grow with the table.
    ///
    /// The entries made from addresses (local and connected) are not routes: a route for
    /// one of those prefixes is refused, and removing one leaves it.
    ///
    /// # Errors
    /// Unknown VRF or port, a prefix length too long, [`FibError::DuplicatePrefix`] for a
    /// local or connected prefix, a route whose target is local or connected.
    pub fn set_prefix_route(
        &mut self,
        vrf: VrfId,
        addr: IpAddr,
        len: u8,
        route: Option<PrefixRoute>,
    ) -> Result<(), FibError> {
        let ports = self.port_vrf.len();
        let table = self.vrfs.get_mut(usize::from(vrf)).ok_or(FibError::UnknownVrf { vrf })?;
        builder::check_len(addr, len)?;
        if let Some(r) = &route {
            match &r.target {
                RouteTarget::Forward(g) => {
                    if let Some(nh) = g.nexthops().iter().find(|nh| usize::from(nh.port) >= ports) {
                        return Err(FibError::UnknownPort { port: nh.port });
                    }
                }
                RouteTarget::Blackhole | RouteTarget::Reject(_) => {}
                RouteTarget::Local | RouteTarget::Connected { .. } => {
                    return Err(FibError::DuplicatePrefix {
                        vrf,
                        addr: vmpls_wire::prefix::mask(addr, len),
                        len,
                    });
                }
            }
        }
        let existing = match addr {
            IpAddr::V4(a) => table.v4.get(a, len),
            IpAddr::V6(a) => table.v6.get(a, len),
        };
        if existing.is_some_and(derived) {
            return match route {
                None => Ok(()),
                Some(_) => {
                    Err(FibError::DuplicatePrefix { vrf, addr: vmpls_wire::prefix::mask(addr, len), len })
                }
            };
        }
        let removed: Vec<PortId> = existing.map(|r| prefix_route_labels_out(r).collect()).unwrap_or_default();
        let added: Vec<PortId> =
            route.as_ref().map(|r| prefix_route_labels_out(r).collect()).unwrap_or_default();
        match (addr, route) {
            (IpAddr::V4(a), Some(r)) => table.v4.insert(a, len, r).map(drop)?,
            (IpAddr::V6(a), Some(r)) => table.v6.insert(a, len, r).map(drop)?,
            (IpAddr::V4(a), None) => drop(table.v4.remove(a, len)),
            (IpAddr::V6(a), None) => drop(table.v6.remove(a, len)),
        }
        self.count_labels_out(&removed, &added);
        Ok(())
    }

    /// Sets (`Some`) or removes (`None`) the route of one incoming label in place, with the
    /// checks [`FibBuilder::build`] makes; see [`Fib::set_prefix_route`].
    ///
    /// # Errors
    /// A label out of range or reserved, an unknown VRF or port.
    pub fn set_label_route(&mut self, label: Label, route: Option<LabelRoute>) -> Result<(), FibError> {
        if label > MAX_LABEL {
            return Err(FibError::LabelOutOfRange { label });
        }
        if label < FIRST_UNRESERVED {
            return Err(FibError::ReservedLabel { label });
        }
        let removed: Vec<PortId> =
            self.labels.get(label).map(|r| label_route_labels_out(r).collect()).unwrap_or_default();
        let Some(route) = route else {
            self.labels.remove(label);
            self.count_labels_out(&removed, &[]);
            return Ok(());
        };
        match route.action() {
            LabelAction::Forward(g) => {
                if let Some(nh) = g.nexthops().iter().find(|nh| usize::from(nh.port) >= self.port_vrf.len()) {
                    return Err(FibError::UnknownPort { port: nh.port });
                }
            }
            LabelAction::PopAndLookup { vrf } => {
                if usize::from(*vrf) >= self.vrfs.len() {
                    return Err(FibError::UnknownVrf { vrf: *vrf });
                }
            }
            LabelAction::Pseudowire { pw } => {
                if usize::from(*pw) >= self.pseudowires.len() {
                    return Err(FibError::UnknownPseudowire { pw: *pw });
                }
            }
        }
        let added: Vec<PortId> = label_route_labels_out(&route).collect();
        self.labels.try_insert(label, route)?;
        self.count_labels_out(&removed, &added);
        Ok(())
    }

    /// The entries that may differ from `old`, if this FIB was made from `old` by
    /// [`Fib::set_prefix_route`] and [`Fib::set_label_route`] on a copy (same ports,
    /// addresses and VRFs) and changed in few places; `None` otherwise (built anew, or
    /// changed so much that a full walk is as cheap), and the caller compares everything.
    /// Costs time in proportion to the change, not to the tables.
    pub fn changes_since(&self, old: &Fib) -> Option<FibChanges> {
        let same_frame = self.vrfs.len() == old.vrfs.len()
            && self.port_vrf == old.port_vrf
            && self.port_accepts_mpls == old.port_accepts_mpls
            && self.port_label_acceptance == old.port_label_acceptance
            && self.port_addrs == old.port_addrs
            && (self.router_v4, self.router_v6) == (old.router_v4, old.router_v6)
            && self.pseudowires == old.pseudowires
            && self.port_pw == old.port_pw
            && self.vpls == old.vpls
            && self.port_vpls == old.port_vpls
            && self.pw_vpls == old.pw_vpls;
        if !same_frame {
            return None;
        }
        // Most chunks unshared: the tables were built anew or rewritten wholesale.
        let mostly = |(unshared, total): (usize, usize)| unshared > 4 && unshared * 4 > total;
        if mostly(LabelTable::unshared_chunks(&old.labels, &self.labels)) {
            return None;
        }
        for (a, b) in old.vrfs.iter().zip(&self.vrfs) {
            if mostly(Lpm::unshared_chunks(&a.v4, &b.v4)) || mostly(Lpm::unshared_chunks(&a.v6, &b.v6)) {
                return None;
            }
        }
        let mut changes = FibChanges {
            labels: LabelTable::changed_labels(&old.labels, &self.labels).collect(),
            ..Default::default()
        };
        for (id, (a, b)) in old.vrfs.iter().zip(&self.vrfs).enumerate() {
            let id = id as VrfId;
            changes.v4.extend(Lpm::changed_prefixes(&a.v4, &b.v4).map(|(p, l)| (id, p, l)));
            changes.v6.extend(Lpm::changed_prefixes(&a.v6, &b.v6).map(|(p, l)| (id, p, l)));
        }
        changes.v4.sort_unstable();
        changes.v4.dedup();
        changes.v6.sort_unstable();
        changes.v6.dedup();
        Some(changes)
    }
}

/// Shared, atomically replaceable [`Fib`]: readers never block and never see a half-made
/// table; writers replace the whole FIB at once (read-copy-update).
#[derive(Debug, Clone)]
pub struct FibHandle {
    inner: Arc<ArcSwap<Fib>>,
}

impl FibHandle {
    /// A handle holding `fib`.
    pub fn new(fib: Fib) -> Self {
        FibHandle { inner: Arc::new(ArcSwap::from_pointee(fib)) }
    }

    /// The current FIB, wait-free: hold the guard for a batch, not forever.
    #[inline]
    pub fn load(&self) -> arc_swap::Guard<Arc<Fib>> {
        self.inner.load()
    }

    /// The current FIB as an `Arc` that may be kept.
    pub fn load_full(&self) -> Arc<Fib> {
        self.inner.load_full()
    }

    /// Replaces the FIB; readers that loaded the old one keep it until they drop it.
    pub fn store(&self, fib: Fib) {
        self.inner.store(Arc::new(fib));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_route_holds_its_single_ipv4_next_hop_and_a_trie_node_is_one_line() {
        let v4 = |a: &str| Some(IpAddr::V4(a.parse().unwrap()));
        let forward =
            |nhs: Vec<Nexthop>| PrefixRoute::new(RouteTarget::Forward(NexthopGroup::new(nhs).unwrap()));
        for labels in [vec![], vec![16], vec![16, 1_048_575], vec![3]] {
            let route = forward(vec![Nexthop::new(7, v4("198.18.10.2"), labels.clone())]);
            let RouteTarget::Forward(group) = route.target() else { unreachable!() };
            let nh = group.select(12345);
            let hop = route.inline_hop().expect("single path, IPv4, at most two labels");
            assert_eq!(
                (hop.port, IpAddr::V4(hop.via), hop.labels),
                (nh.port, nh.via.unwrap(), &nh.labels[..])
            );
        }
        let none = [
            forward(vec![Nexthop::new(7, v4("198.18.10.2"), vec![16, 17, 18])]),
            forward(vec![Nexthop::new(7, Some(IpAddr::V6("2001:db8::2".parse().unwrap())), vec![16])]),
            forward(vec![Nexthop::new(7, None, vec![16])]),
            forward(vec![
                Nexthop::new(7, v4("198.18.10.2"), vec![16]),
                Nexthop::new(8, v4("198.18.11.2"), vec![17]),
            ]),
            PrefixRoute::new(RouteTarget::Connected { port: 7 }),
            PrefixRoute::new(RouteTarget::Blackhole),
        ];
        for route in none {
            assert_eq!(route.inline_hop(), None, "{route:?}");
        }
        let pipe = forward(vec![Nexthop::new(7, v4("198.18.10.2"), vec![16])]).with_ttl_model(TtlModel::Pipe);
        assert_eq!((pipe.ttl_model(), pipe.inline_hop().unwrap().labels), (TtlModel::Pipe, &[16][..]));
        // A label route alike; a swap's copy has exactly one label.
        let label_route = |labels: Vec<Label>| {
            let nh = Nexthop::new(7, v4("198.18.10.2"), labels);
            LabelRoute::new(LabelAction::Forward(NexthopGroup::single(nh).unwrap()), TtlModel::Pipe)
        };
        let via: Ipv4Addr = "198.18.10.2".parse().unwrap();
        assert_eq!(label_route(vec![16]).swap_hop(), Some((16, via, 7)));
        assert_eq!(label_route(vec![16]).ttl_model(), TtlModel::Pipe);
        assert_eq!(label_route(vec![16, 17]).inline_hop().map(|h| h.labels.len()), Some(2));
        assert_eq!(label_route(vec![16, 17]).swap_hop(), None);
        assert_eq!(label_route(vec![3]).inline_hop().map(|h| h.labels.len()), Some(0), "a pop");
        assert_eq!(label_route(vec![3]).swap_hop(), None);
        let pop = LabelRoute::new(LabelAction::PopAndLookup { vrf: 0 }, TtlModel::Uniform);
        assert_eq!((pop.inline_hop(), pop.swap_hop()), (None, None));
        // The copy must not cost the trie a line.
        assert_eq!(size_of::<PrefixRoute>(), 32);
        assert_eq!(size_of::<Option<LabelRoute>>(), 32);
        assert_eq!(size_of::<lpm::Node<PrefixRoute>>(), 64);
        assert_eq!(align_of::<lpm::Node<PrefixRoute>>(), 64);
    }

    fn fib_generation(g: u32) -> Fib {
        // Every table of generation g agrees on g: label g+16, router address, a route.
        let mut b = FibBuilder::new();
        let ip = Ipv4Addr::from(0xc613_0000 | (g & 0xffff));
        b.router_v4(Ipv4Addr::new(198, 18, 255, (g % 250) as u8 + 1));
        b.add_port("p", DEFAULT_VRF, &[(IpAddr::V4(Ipv4Addr::new(198, 18, 1, 1)), 24)]).unwrap();
        b.add_label_route(
            16 + g,
            LabelRoute::new(LabelAction::PopAndLookup { vrf: DEFAULT_VRF }, TtlModel::Pipe),
        )
        .unwrap();
        b.add_prefix_route(DEFAULT_VRF, IpAddr::V4(ip), 32, PrefixRoute::new(RouteTarget::Blackhole))
            .unwrap();
        b.build().unwrap()
    }

    #[test]
    fn store_while_loading_never_tears() {
        use std::sync::atomic::AtomicU64;
        let handle = FibHandle::new(fib_generation(0));
        let stop = Arc::new(AtomicBool::new(false));
        let loads = Arc::new(AtomicU64::new(0));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (h, stop, loads) = (handle.clone(), stop.clone(), loads.clone());
                std::thread::spawn(move || {
                    let mut last = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let fib = h.load();
                        let (label, _) = fib.labels.iter().next().expect("one label route");
                        let g = label - 16;
                        assert_eq!(fib.labels.len(), 1);
                        assert_eq!(fib.router_v4, Some(Ipv4Addr::new(198, 18, 255, (g % 250) as u8 + 1)));
                        let ip = Ipv4Addr::from(0xc613_0000 | (g & 0xffff));
                        assert_eq!(
                            fib.vrfs[0].v4.lookup(ip).map(|(_, l, r)| (l, &r.target)),
                            Some((32, &RouteTarget::Blackhole))
                        );
                        assert!(g >= last, "generations go forward");
                        last = g;
                        loads.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        // Store at least 300 generations, and keep going until the readers have loaded
        // many times (the machine may be busy), for at most 20 s.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut g = 0;
        while g < 300 || (loads.load(Ordering::Relaxed) < 2000 && std::time::Instant::now() < deadline) {
            g += 1;
            handle.store(fib_generation(g));
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().expect("reader saw a consistent FIB");
        }
        assert!(loads.load(Ordering::Relaxed) >= 2000, "readers did not run");
        assert_eq!(handle.load_full().labels.iter().next().map(|(l, _)| l), Some(16 + g));
    }

    #[test]
    fn a_port_that_accepts_labels_while_they_leave_follows_each_route_set_in_place() {
        let mut b = FibBuilder::new();
        let core =
            b.add_port("core", DEFAULT_VRF, &[(IpAddr::V4(Ipv4Addr::new(198, 18, 10, 1)), 24)]).unwrap();
        let ce = b.add_port("ce", DEFAULT_VRF, &[(IpAddr::V4(Ipv4Addr::new(198, 18, 1, 1)), 24)]).unwrap();
        b.set_port_label_acceptance(core, LabelAcceptance::WhileLabelsLeave).unwrap();
        b.set_port_label_acceptance(ce, LabelAcceptance::WhileLabelsLeave).unwrap();
        let mut fib = b.build().unwrap();
        assert_eq!(fib.port_accepts_mpls, [false, false]);
        let group = |port: PortId, labels: Vec<Label>| {
            let via = Some(IpAddr::V4(Ipv4Addr::new(198, 18, if port == core { 10 } else { 1 }, 2)));
            NexthopGroup::new(vec![Nexthop { port, via, labels, weight: 1 }]).unwrap()
        };
        let swap = |port| LabelRoute::new(LabelAction::Forward(group(port, vec![17])), TtlModel::Pipe);
        let push = |port, labels| PrefixRoute::new(RouteTarget::Forward(group(port, labels)));
        let net = IpAddr::V4(Ipv4Addr::new(198, 18, 60, 0));

        fib.set_label_route(16, Some(swap(core))).unwrap();
        assert_eq!(fib.port_accepts_mpls, [true, false]);
        fib.set_label_route(16, Some(swap(core))).unwrap();
        fib.set_label_route(16, Some(swap(ce))).unwrap();
        assert_eq!((&fib.port_accepts_mpls[..], &fib.port_labels_out[..]), (&[false, true][..], &[0, 1][..]));
        fib.set_prefix_route(DEFAULT_VRF, net, 24, Some(push(core, vec![]))).unwrap();
        assert_eq!(fib.port_accepts_mpls, [false, true], "an IP route switches no label out");
        fib.set_prefix_route(DEFAULT_VRF, net, 24, Some(push(core, vec![100]))).unwrap();
        assert_eq!(fib.port_accepts_mpls, [true, true]);
        fib.set_label_route(16, None).unwrap();
        fib.set_prefix_route(DEFAULT_VRF, net, 24, None).unwrap();
        assert_eq!(
            (&fib.port_accepts_mpls[..], &fib.port_labels_out[..]),
            (&[false, false][..], &[0, 0][..])
        );
        // A refused change counts nothing.
        assert!(fib.set_label_route(1, Some(swap(core))).is_err());
        assert_eq!(fib.port_labels_out, [0, 0]);
    }

    #[test]
    fn source_addresses_prefer_router_address() {
        let mut b = FibBuilder::new();
        b.add_port(
            "core",
            DEFAULT_VRF,
            &[
                (IpAddr::V4(Ipv4Addr::new(198, 18, 10, 1)), 24),
                (IpAddr::V6("2001:db8:10::1".parse().unwrap()), 64),
            ],
        )
        .unwrap();
        b.add_port("bare", DEFAULT_VRF, &[]).unwrap();
        let fib = b.clone().build().unwrap();
        assert_eq!(fib.port_v4(0), Some(Ipv4Addr::new(198, 18, 10, 1)));
        assert_eq!(fib.port_v6(0), Some("2001:db8:10::1".parse().unwrap()));
        assert_eq!(fib.port_v4(1), None);
        assert_eq!(fib.port_v4(9), None);
        assert_eq!(fib.source_v4_for(0), Some(Ipv4Addr::new(198, 18, 10, 1)));
        assert_eq!(fib.source_v6_for(1), None);
        b.router_v4(Ipv4Addr::new(198, 18, 255, 1));
        b.router_v6("2001:db8:ff::1".parse().unwrap());
        let fib = b.build().unwrap();
        assert_eq!(fib.source_v4_for(0), Some(Ipv4Addr::new(198, 18, 255, 1)));
        assert_eq!(fib.source_v4_for(1), Some(Ipv4Addr::new(198, 18, 255, 1)));
        assert_eq!(fib.source_v6_for(1), Some("2001:db8:ff::1".parse().unwrap()));
        assert!(fib.is_local_v4(Ipv4Addr::new(198, 18, 255, 1)));
        assert!(fib.is_local_v4(Ipv4Addr::new(198, 18, 10, 1)));
        assert!(!fib.is_local_v4(Ipv4Addr::new(198, 18, 10, 2)));
        assert!(fib.is_local_v6("2001:db8:10::1".parse().unwrap()));
        assert!(fib.is_local_v6("2001:db8:ff::1".parse().unwrap()));
        assert!(!fib.is_local_v6("2001:db8:10::2".parse().unwrap()));
    }

    #[test]
    fn source_addresses_in_a_vrf_are_the_vrfs_own() {
        let v4 = |d| IpAddr::V4(Ipv4Addr::new(198, 18, d, 1));
        let mut b = FibBuilder::new();
        b.router_v4(Ipv4Addr::new(198, 18, 255, 1));
        b.router_v6("2001:db8:ff::1".parse().unwrap());
        let red = b.add_vrf("red").unwrap();
        let blue = b.add_vrf("blue").unwrap();
        let empty = b.add_vrf("empty").unwrap();
        b.add_port("core", DEFAULT_VRF, &[(v4(10), 24)]).unwrap();
        b.add_port("red-bare", red, &[]).unwrap();
        b.add_port("red-a", red, &[(v4(1), 24), (IpAddr::V6("2001:db8:1::1".parse().unwrap()), 64)]).unwrap();
        b.add_port("red-b", red, &[(v4(2), 24)]).unwrap();
        b.add_port("blue", blue, &[(v4(1), 24)]).unwrap();
        let fib = b.build().unwrap();
        let router = Some(Ipv4Addr::new(198, 18, 255, 1));
        // The default VRF: the router address, as before.
        assert_eq!(fib.source_v4_in(DEFAULT_VRF, 0), router);
        assert_eq!(fib.source_v4_in(DEFAULT_VRF, 3), router);
        // A VRF's port answers with its own address.
        assert_eq!(fib.source_v4_in(red, 3), Some(Ipv4Addr::new(198, 18, 2, 1)));
        assert_eq!(fib.source_v4_in(blue, 4), Some(Ipv4Addr::new(198, 18, 1, 1)));
        // From the core or an address-less port: the VRF's first address.
        assert_eq!(fib.source_v4_in(red, 0), Some(Ipv4Addr::new(198, 18, 1, 1)));
        assert_eq!(fib.source_v4_in(red, 1), Some(Ipv4Addr::new(198, 18, 1, 1)));
        assert_eq!(fib.source_v6_in(red, 3), Some("2001:db8:1::1".parse().unwrap()));
        // Never another VRF's address: a port of blue does not source red's errors.
        assert_eq!(fib.source_v4_in(red, 4), Some(Ipv4Addr::new(198, 18, 1, 1)));
        assert_eq!(fib.source_v6_in(blue, 4), Some("2001:db8:ff::1".parse().unwrap()));
        // A VRF without addresses: the router's.
        assert_eq!(fib.source_v4_in(empty, 0), router);
    }

    use crate::lpm::tests::Rng;

    fn two_port_fib() -> Fib {
        let mut b = FibBuilder::new();
        b.router_v4(Ipv4Addr::new(198, 18, 255, 1));
        b.add_port("a", DEFAULT_VRF, &[(IpAddr::V4(Ipv4Addr::new(198, 18, 1, 1)), 24)]).unwrap();
        b.add_port("b", DEFAULT_VRF, &[(IpAddr::V6("2001:db8:1::1".parse().unwrap()), 64)]).unwrap();
        b.build().unwrap()
    }

    /// Every (prefix or label) -> value of a FIB, for comparing versions.
    type Flat = (
        std::collections::BTreeMap<Label, LabelRoute>,
        std::collections::BTreeMap<(Ipv4Addr, u8), PrefixRoute>,
        std::collections::BTreeMap<(Ipv6Addr, u8), PrefixRoute>,
    );

    fn flat(f: &Fib) -> Flat {
        (
            f.labels.iter().map(|(l, r)| (l, r.clone())).collect(),
            f.vrfs[0].v4.iter().map(|(a, l, r)| ((a, l), r.clone())).collect(),
            f.vrfs[0].v6.iter().map(|(a, l, r)| ((a, l), r.clone())).collect(),
        )
    }

    /// Keys whose values differ between two flattened FIBs.
    fn differing<K: Ord + Copy, V: PartialEq>(
        a: &std::collections::BTreeMap<K, V>,
        b: &std::collections::BTreeMap<K, V>,
    ) -> Vec<K> {
        let mut keys: Vec<K> = a.keys().chain(b.keys()).copied().collect();
        keys.sort();
        keys.dedup();
        keys.into_iter().filter(|k| a.get(k) != b.get(k)).collect()
    }

    #[test]
    fn changes_in_place_match_a_rebuild_and_the_diff_lists_every_change() {
        let mut rng = Rng(0x5eed_f1b0);
        let base = two_port_fib();
        // A table large enough to span many chunks, then changes one at a time and in
        // bursts, each version compared with a table built from scratch.
        let group = |port: PortId, label: Label| {
            let via = if port == 0 {
                IpAddr::V4(Ipv4Addr::new(198, 18, 1, 2))
            } else {
                IpAddr::V6("2001:db8:1::2".parse().unwrap())
            };
            NexthopGroup::single(Nexthop::new(port, Some(via), vec![label])).unwrap()
        };
        let mut current = base.clone();
        let mut reference = flat(&base);
        let v4_key = |rng: &mut Rng| {
            let len = 8 + rng.below(25) as u8;
            let a = Ipv4Addr::from(0xc612_0000u32 | (rng.next() as u32 & 0x1_ffff));
            (Ipv4Addr::from(u32::from(a) & (u32::MAX << (32 - u32::from(len)))), len)
        };
        for round in 0..60 {
            let mut next = current.clone();
            let burst = if round < 2 { 6000 } else { 1 + rng.below(20) as usize };
            for _ in 0..burst {
                match rng.below(6) {
                    0 | 1 => {
                        let (a, l) = v4_key(&mut rng);
                        let r =
                            PrefixRoute::new(RouteTarget::Forward(group(0, 16 + rng.below(1000) as Label)));
                        match next.set_prefix_route(DEFAULT_VRF, IpAddr::V4(a), l, Some(r.clone())) {
                            Ok(()) => drop(reference.1.insert((a, l), r)),
                            Err(FibError::DuplicatePrefix { .. }) => {
                                assert!(matches!(
                                    reference.1[&(a, l)].target,
                                    RouteTarget::Local | RouteTarget::Connected { .. }
                                ))
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                    2 => {
                        let (a, l) = v4_key(&mut rng);
                        next.set_prefix_route(DEFAULT_VRF, IpAddr::V4(a), l, None).unwrap();
                        if !reference.1.get(&(a, l)).is_some_and(derived) {
                            reference.1.remove(&(a, l));
                        }
                    }
                    3 => {
                        let a = Ipv6Addr::from(
                            0x2001_0db8_0000_0000_0000_0000_0000_0000u128 | u128::from(rng.below(4096)) << 64,
                        );
                        let r = PrefixRoute::new(RouteTarget::Blackhole);
                        if rng.below(2) == 0 {
                            next.set_prefix_route(DEFAULT_VRF, IpAddr::V6(a), 64, Some(r.clone()))
                                .unwrap_or_else(|e| {
                                    assert!(matches!(e, FibError::DuplicatePrefix { .. }));
                                });
                            if !reference.2.get(&(a, 64)).is_some_and(derived) {
                                reference.2.insert((a, 64), r);
                            }
                        } else {
                            next.set_prefix_route(DEFAULT_VRF, IpAddr::V6(a), 64, None).unwrap();
                            if !reference.2.get(&(a, 64)).is_some_and(derived) {
                                reference.2.remove(&(a, 64));
                            }
                        }
                    }
                    4 => {
                        let label = 16 + rng.below(40_000) as Label;
                        let r = LabelRoute::new(LabelAction::Forward(group(1, label)), TtlModel::Uniform);
                        next.set_label_route(label, Some(r.clone())).unwrap();
                        reference.0.insert(label, r);
                    }
                    _ => {
                        let label = 16 + rng.below(40_000) as Label;
                        next.set_label_route(label, None).unwrap();
                        reference.0.remove(&label);
                    }
                }
            }
            let got = flat(&next);
            assert_eq!(got.0, reference.0);
            assert_eq!(got.1, reference.1);
            assert_eq!(got.2, reference.2);
            // Lookups agree with a table built from scratch with the same routes.
            let mut b = FibBuilder::new();
            b.router_v4(Ipv4Addr::new(198, 18, 255, 1));
            b.add_port("a", DEFAULT_VRF, &[(IpAddr::V4(Ipv4Addr::new(198, 18, 1, 1)), 24)]).unwrap();
            b.add_port("b", DEFAULT_VRF, &[(IpAddr::V6("2001:db8:1::1".parse().unwrap()), 64)]).unwrap();
            for ((a, l), r) in reference.1.iter().filter(|(_, r)| !derived(r)) {
                b.add_prefix_route(DEFAULT_VRF, IpAddr::V4(*a), *l, r.clone()).unwrap();
            }
            let rebuilt = b.build().unwrap();
            for _ in 0..200 {
                let probe = Ipv4Addr::from(0xc612_0000u32 | (rng.next() as u32 & 0x1_ffff));
                assert_eq!(next.vrfs[0].v4.lookup(probe), rebuilt.vrfs[0].v4.lookup(probe), "{probe}");
            }
            let before = flat(&current);
            match next.changes_since(&current) {
                Some(c) => {
                    assert!(round >= 1, "the first burst rewrites most chunks: a full walk");
                    for l in differing(&before.0, &got.0) {
                        assert!(c.labels.contains(&l), "label {l} changed, not listed");
                    }
                    for (a, l) in differing(&before.1, &got.1) {
                        assert!(c.v4.contains(&(DEFAULT_VRF, a, l)), "{a}/{l} changed, not listed");
                    }
                    for (a, l) in differing(&before.2, &got.2) {
                        assert!(c.v6.contains(&(DEFAULT_VRF, a, l)), "{a}/{l} changed, not listed");
                    }
                    if round >= 2 {
                        assert!(
                            c.labels.len() + c.v4.len() + c.v6.len() <= 2 * burst + 2,
                            "small change, small diff"
                        );
                    }
                }
                None => assert!(round < 2, "round {round}: a burst of {burst} should be diffed"),
            }
            // The version in force is never touched by the changes to its copy.
            assert_eq!(flat(&current), before);
            current = next;
        }
        assert!(current.changes_since(&current).is_some_and(|c| c.is_empty()));
        assert!(current.changes_since(&base).is_none() || current.labels.len() < 100);
        let rebuilt_labels = {
            let mut b = FibBuilder::new();
            b.add_port("a", DEFAULT_VRF, &[]).unwrap();
            b.build().unwrap()
        };
        assert!(current.changes_since(&rebuilt_labels).is_none(), "other ports: compare everything");
    }

    #[test]
    fn routes_never_replace_or_remove_the_entries_of_addresses() {
        let mut f = two_port_fib();
        let r = || Some(PrefixRoute::new(RouteTarget::Blackhole));
        let connected = IpAddr::V4(Ipv4Addr::new(198, 18, 1, 0));
        let own = IpAddr::V4(Ipv4Addr::new(198, 18, 1, 1));
        assert!(matches!(f.set_prefix_route(0, connected, 24, r()), Err(FibError::DuplicatePrefix { .. })));
        assert!(matches!(f.set_prefix_route(0, own, 32, r()), Err(FibError::DuplicatePrefix { .. })));
        f.set_prefix_route(0, connected, 24, None).unwrap();
        f.set_prefix_route(0, own, 32, None).unwrap();
        assert_eq!(f.vrfs[0].lookup(own).map(|r| &r.target), Some(&RouteTarget::Local));
        assert_eq!(
            f.vrfs[0].lookup(IpAddr::V4(Ipv4Addr::new(198, 18, 1, 9))).map(|r| &r.target),
            Some(&RouteTarget::Connected { port: 0 })
        );
        let local = Some(PrefixRoute::new(RouteTarget::Local));
        assert!(f.set_prefix_route(0, IpAddr::V4(Ipv4Addr::new(198, 18, 9, 9)), 32, local).is_err());
        assert!(matches!(f.set_prefix_route(3, connected, 24, r()), Err(FibError::UnknownVrf { vrf: 3 })));
        let far = NexthopGroup::single(Nexthop::new(7, None, vec![])).unwrap();
        assert!(matches!(
            f.set_prefix_route(
                0,
                IpAddr::V4(Ipv4Addr::new(198, 18, 9, 0)),
                24,
                Some(PrefixRoute::new(RouteTarget::Forward(far.clone())))
            ),
            Err(FibError::UnknownPort { port: 7 })
        ));
        let swap = |g| Some(LabelRoute::new(LabelAction::Forward(g), TtlModel::Uniform));
        assert!(matches!(f.set_label_route(100, swap(far)), Err(FibError::UnknownPort { port: 7 })));
        assert!(matches!(f.set_label_route(15, None), Err(FibError::ReservedLabel { label: 15 })));
        assert!(matches!(f.set_label_route(1 << 20, None), Err(FibError::LabelOutOfRange { .. })));
        let pop = |vrf| Some(LabelRoute::new(LabelAction::PopAndLookup { vrf }, TtlModel::Uniform));
        assert!(matches!(f.set_label_route(100, pop(1)), Err(FibError::UnknownVrf { vrf: 1 })));
        f.set_label_route(100, pop(0)).unwrap();
        assert!(f.labels.get(100).is_some());
    }

    #[test]
    fn default_fib_has_the_default_vrf() {
        let fib = Fib::default();
        assert_eq!(fib.vrf(DEFAULT_VRF).map(|v| v.name.as_str()), Some("default"));
        assert!(fib.vrf(1).is_none());
    }
}
