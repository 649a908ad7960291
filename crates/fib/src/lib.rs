//! Forwarding tables of a vmpls router: the label table, per-VRF prefix tables, next hops
//! and ECMP groups, and the handle through which the data plane reads them.
//!
//! The control plane builds a complete [`Fib`] (usually with [`FibBuilder`]) and swaps it
//! in with [`FibHandle::store`]; forwarding threads read it with [`FibHandle::load`],
//! wait-free, once per batch. A `Fib` is never changed while readers hold it, so every
//! lookup sees one consistent version of the tables.
//!
//! No I/O here, and no `unsafe`. Lookups ([`LabelTable::get`], [`Lpm::lookup`],
//! [`NexthopGroup::select`]) neither allocate nor panic.
#![deny(unsafe_code)]

mod builder;
mod error;
mod label;
mod lpm;
mod nexthop;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use arc_swap::ArcSwap;

pub use builder::FibBuilder;
pub use error::FibError;
pub use label::{LabelAction, LabelRoute, LabelTable};
pub use lpm::{Lpm, LpmKey};
pub use nexthop::{MAX_NEXTHOPS, Nexthop, NexthopGroup};

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
/// The largest label (2^20 - 1).
pub const MAX_LABEL: Label = (1 << 20) - 1;
/// The smallest label that is not reserved (RFC 3032: 0-15 are reserved).
pub const MIN_UNRESERVED_LABEL: Label = 16;
/// Implicit null (RFC 3032): signalled, never sent; a label stack of `[3]` means "pop".
pub const IMPLICIT_NULL: Label = 3;
/// IPv4 explicit null (RFC 3032): an IPv4 packet follows the stack.
pub const IPV4_EXPLICIT_NULL: Label = 0;
/// IPv6 explicit null (RFC 3032): an IPv6 packet follows the stack.
pub const IPV6_EXPLICIT_NULL: Label = 2;
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
}

/// A prefix table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixRoute {
    /// What to do.
    pub target: RouteTarget,
    /// How TTL is handled when labels are pushed (RFC 3443).
    pub ttl_model: TtlModel,
}

impl PrefixRoute {
    /// A route with the default (uniform) TTL model.
    pub fn new(target: RouteTarget) -> Self {
        PrefixRoute { target, ttl_model: TtlModel::Uniform }
    }
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
            IpAddr::V4(a) => self.v4.lookup(a).map(|(_, _, r)| r),
            IpAddr::V6(a) => self.v6.lookup(a).map(|(_, _, r)| r),
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
    /// The addresses of each port (index = [`PortId`]).
    pub port_addrs: Vec<PortAddrs>,
    /// Source of IPv4 ICMP the router originates.
    pub router_v4: Option<Ipv4Addr>,
    /// Source of IPv6 ICMP the router originates.
    pub router_v6: Option<Ipv6Addr>,
}

impl Default for Fib {
    /// A FIB with an empty default VRF and no ports.
    fn default() -> Self {
        Fib {
            labels: LabelTable::new(),
            vrfs: vec![Vrf::new(DEFAULT_VRF_NAME)],
            port_vrf: Vec::new(),
            port_addrs: Vec::new(),
            router_v4: None,
            router_v6: None,
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

    fn fib_generation(g: u32) -> Fib {
        // Every table of generation g agrees on g: label g+16, router address, a route.
        let mut b = FibBuilder::new();
        let ip = Ipv4Addr::from(0xc613_0000 | (g & 0xffff));
        b.router_v4(Ipv4Addr::new(198, 18, 255, (g % 250) as u8 + 1));
        b.add_port("p", DEFAULT_VRF, &[(IpAddr::V4(Ipv4Addr::new(198, 18, 1, 1)), 24)]).unwrap();
        b.add_label_route(
            16 + g,
            LabelRoute { action: LabelAction::PopAndLookup { vrf: DEFAULT_VRF }, ttl_model: TtlModel::Pipe },
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
    fn default_fib_has_the_default_vrf() {
        let fib = Fib::default();
        assert_eq!(fib.vrf(DEFAULT_VRF).map(|v| v.name.as_str()), Some("default"));
        assert!(fib.vrf(1).is_none());
    }
}
