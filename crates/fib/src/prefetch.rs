//! Route lookups taken one dependent read at a time, so that a data plane looking up a
//! batch of frames has the cache misses of all of them in flight at once, as VPP's graph
//! nodes and DPDK's pipelines do by prefetching a few packets ahead.
//!
//! [`Fib::prefetch_label`] and [`Fib::prefetch_ipv4`] prefetch the first entry the lookup
//! reads and return a [`RoutePrefetch`]; each [`step`](RoutePrefetch::step) reads the entry
//! the previous one prefetched (in cache by then, if the caller stepped the rest of its
//! batch in between) and prefetches the next: the label slot or the IPv4 index entries,
//! the trie node, the next-hop group (with the next hop of a single-path group) and the
//! next hop's labels. The
//! caller's own lookup then finds them in cache. A hint only: no lookup's result depends
//! on it, and a route changed in between costs a miss, nothing else.
//!
//! The one `unsafe` of the crate is here: the prefetch instruction.
#![allow(unsafe_code)]

use std::fmt;
use std::net::Ipv4Addr;

use crate::dir::Dir;
use crate::lpm::Node;
use crate::{
    Fib, Label, LabelAction, LabelRoute, Lpm, Nexthop, NexthopGroup, PrefixRoute, RouteTarget, VrfId,
};

/// A route lookup in progress, one read ahead of the caller: see the [module
/// documentation](self). `RoutePrefetch::default()` has nothing to do.
#[derive(Clone, Copy, Default)]
pub struct RoutePrefetch<'a> {
    step: Step<'a>,
    /// An IPv4 lookup's result, once its trie node was read (or found missing).
    ipv4: Option<Option<&'a PrefixRoute>>,
}

#[derive(Clone, Copy, Default)]
enum Step<'a> {
    #[default]
    Done,
    /// The /24's index entry of `addr` is on its way.
    Index24 { lpm: &'a Lpm<Ipv4Addr, PrefixRoute>, dir: &'a Dir, addr: u32, entry: &'a u32 },
    /// The `tbl8` entry of `addr` is on its way.
    Index8 { lpm: &'a Lpm<Ipv4Addr, PrefixRoute>, dir: &'a Dir, addr: u32, entry: &'a u32 },
    /// The trie node of the longest match is on its way.
    Node(&'a Node<PrefixRoute>),
    /// The label's slot is on its way.
    Label(&'a Option<LabelRoute>),
    /// The next-hop group is on its way.
    Group(&'a NexthopGroup),
    /// The first next hop of a multipath group is on its way.
    Nexthop(&'a Nexthop),
}

impl fmt::Debug for RoutePrefetch<'_> {
    /// The step only: the tables it points into are not printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let step = match self.step {
            Step::Done => "done",
            Step::Index24 { .. } => "index24",
            Step::Index8 { .. } => "index8",
            Step::Node(_) => "node",
            Step::Label(_) => "label",
            Step::Group(_) => "group",
            Step::Nexthop(_) => "nexthop",
        };
        f.debug_tuple("RoutePrefetch").field(&step).finish()
    }
}

/// Routes in one table (the label table, or one VRF's IPv4 routes) from which
/// prefetching pays: below, a router's tables stay in its caches, and the prefetch steps
/// cost more than the misses they would save (`cargo bench -p vmpls-dataplane --bench
/// pipeline`: BENCHMARKS.md).
pub const PREFETCH_MIN_ROUTES: usize = 8192;

impl Fib {
    /// Whether the tables are large enough for [`RoutePrefetch`] to pay: see
    /// [`PREFETCH_MIN_ROUTES`].
    pub fn prefetch_pays(&self) -> bool {
        self.labels.len() >= PREFETCH_MIN_ROUTES
            || self.vrfs.iter().any(|v| v.v4.len() >= PREFETCH_MIN_ROUTES)
    }

    /// Starts prefetching what switching a frame with top label `label` reads: its slot
    /// in the label table, then (by [`RoutePrefetch::step`]) its next-hop group, first
    /// next hop and labels.
    #[inline]
    pub fn prefetch_label(&self, label: Label) -> RoutePrefetch<'_> {
        match self.labels.slot(label) {
            Some(slot) => {
                hint(slot);
                RoutePrefetch { step: Step::Label(slot), ipv4: None }
            }
            None => RoutePrefetch::default(),
        }
    }

    /// Starts prefetching what routing a packet to `addr` in `vrf` reads: the index
    /// entries of `addr`, then (by [`RoutePrefetch::step`]) the trie node of its route, the
    /// route's next-hop group, first next hop and labels.
    #[inline]
    pub fn prefetch_ipv4(&self, vrf: VrfId, addr: Ipv4Addr) -> RoutePrefetch<'_> {
        let Some(lpm) = self.vrf(vrf).map(|v| &v.v4) else { return RoutePrefetch::default() };
        let Some(dir) = lpm.dir() else { return RoutePrefetch::default() };
        let addr = u32::from(addr);
        let mut p = RoutePrefetch::default();
        p.step = match dir.entry24(addr) {
            Some(entry) => {
                hint(entry);
                Step::Index24 { lpm, dir, addr, entry }
            }
            None => p.node(lpm, dir.finish(addr, 0)),
        };
        p
    }
}

impl<'a> RoutePrefetch<'a> {
    /// Reads what the last step prefetched and prefetches the next read of the lookup.
    /// Returns whether there is more to do: false once the last read was prefetched
    /// (then the next step does nothing).
    #[inline]
    pub fn step(&mut self) -> bool {
        self.step = match self.step {
            Step::Done => return false,
            Step::Index24 { lpm, dir, addr, entry } => match dir.entry8(addr, *entry) {
                Ok(entry) => {
                    hint(entry);
                    Step::Index8 { lpm, dir, addr, entry }
                }
                Err(node) => self.node(lpm, node),
            },
            Step::Index8 { lpm, dir, addr, entry } => self.node(lpm, dir.finish(addr, *entry)),
            Step::Node(node) => {
                self.ipv4 = Some(node.value());
                match node.value() {
                    Some(PrefixRoute { target: RouteTarget::Forward(group), .. }) => Step::group(group),
                    _ => Step::Done,
                }
            }
            Step::Label(slot) => match slot {
                Some(LabelRoute { action: LabelAction::Forward(group), .. }) => Step::group(group),
                _ => Step::Done,
            },
            // A single-path group holds its next hop; a multipath one points to them.
            Step::Group(group) if group.is_multipath() => {
                hint(group.first());
                Step::Nexthop(group.first())
            }
            Step::Group(group) => Step::labels(group.first()),
            Step::Nexthop(nh) => Step::labels(nh),
        };
        !matches!(self.step, Step::Done)
    }

    /// What [`Lpm::lookup`] gives for the address of [`Fib::prefetch_ipv4`], once the
    /// steps have read its trie node (all of them have when [`step`](Self::step) returns
    /// false): `Some(route)`, or `Some(None)` for no route. `None` before that, and for a
    /// label or a VRF that does not exist.
    #[inline]
    pub fn ipv4_route(&self) -> Option<Option<&'a PrefixRoute>> {
        self.ipv4
    }

    /// The trie node `node` of `lpm` requested; no node, no route.
    #[inline]
    fn node(&mut self, lpm: &'a Lpm<Ipv4Addr, PrefixRoute>, node: Option<u32>) -> Step<'a> {
        let Some(i) = node else {
            self.ipv4 = Some(None);
            return Step::Done;
        };
        let node = lpm.node(i);
        hint(node);
        Step::Node(node)
    }
}

impl<'a> Step<'a> {
    /// The group requested.
    #[inline]
    fn group(group: &'a NexthopGroup) -> Step<'a> {
        hint(group.header());
        Step::Group(group)
    }

    /// The labels of `nh` requested: the last read.
    #[inline]
    fn labels(nh: &Nexthop) -> Step<'a> {
        if let Some(label) = nh.labels.first() {
            hint(label);
        }
        Step::Done
    }
}

/// Asks the CPU to bring every cache line of `*value` into its caches, without waiting.
#[inline(always)]
fn hint<T>(value: &T) {
    let first = std::ptr::from_ref(value).cast::<u8>();
    hint_ptr(first);
    // An entry that may straddle two lines (a trie node of 48 bytes) needs both.
    if size_of::<T>() > align_of::<T>() {
        let last = first.wrapping_add(size_of::<T>() - 1);
        if (last as usize) / 64 != (first as usize) / 64 {
            hint_ptr(last);
        }
    }
}

/// Asks the CPU to bring the cache line of `p` into its caches, without waiting.
#[inline(always)]
fn hint_ptr(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that reads nothing the program sees and never faults,
    // whatever the address (SSE, which it needs, is part of x86_64).
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use crate::{
        DEFAULT_VRF, Fib, LabelAction, LabelRoute, Nexthop, NexthopGroup, PrefixRoute, RouteTarget, TtlModel,
    };

    fn group(label: u32) -> NexthopGroup {
        NexthopGroup::single(Nexthop::new(0, Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))), vec![label]))
            .unwrap()
    }

    /// Steps a lookup takes after it starts, each reading what the one before requested.
    fn steps(mut p: super::RoutePrefetch<'_>) -> usize {
        if matches!(p.step, super::Step::Done) {
            return 0;
        }
        let mut n = 1;
        while p.step() {
            n += 1;
        }
        n
    }

    #[test]
    fn prefetch_walks_every_read_of_a_lookup_down_to_the_labels() {
        let mut b = Fib::builder();
        b.add_port("core", DEFAULT_VRF, &[("10.0.0.1".parse().unwrap(), 24)]).unwrap();
        b.add_label_route(
            100,
            LabelRoute { action: LabelAction::Forward(group(200)), ttl_model: TtlModel::Uniform },
        )
        .unwrap();
        let nh = |label| Nexthop::new(0, Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, label as u8))), vec![label]);
        let ecmp = NexthopGroup::new(vec![nh(201), nh(202)]).unwrap();
        b.add_label_route(
            102,
            LabelRoute { action: LabelAction::Forward(ecmp), ttl_model: TtlModel::Uniform },
        )
        .unwrap();
        let via = RouteTarget::Forward(group(300));
        b.add_prefix_route(DEFAULT_VRF, "198.18.0.0".parse().unwrap(), 16, PrefixRoute::new(via.clone()))
            .unwrap();
        b.add_prefix_route(DEFAULT_VRF, "198.18.2.128".parse().unwrap(), 25, PrefixRoute::new(via)).unwrap();
        let fib = b.build().unwrap();
        // Slot, group (with its next hop), labels.
        assert_eq!(steps(fib.prefetch_label(100)), 2);
        // Slot, group, next hops, labels.
        assert_eq!(steps(fib.prefetch_label(102)), 3);
        assert_eq!(steps(fib.prefetch_label(101)), 1, "an empty slot: read, nothing after it");
        assert_eq!(steps(fib.prefetch_label(999_999)), 0, "no chunk: nothing to read");
        // /24 entry, node, group, labels.
        assert_eq!(steps(fib.prefetch_ipv4(DEFAULT_VRF, "198.18.1.1".parse().unwrap())), 3);
        // /24 entry, tbl8 entry, node, group, labels.
        assert_eq!(steps(fib.prefetch_ipv4(DEFAULT_VRF, "198.18.2.200".parse().unwrap())), 4);
        // A local address (a /32): its index entries and node, no next hop after them.
        assert_eq!(steps(fib.prefetch_ipv4(DEFAULT_VRF, "10.0.0.1".parse().unwrap())), 3);
        assert_eq!(steps(fib.prefetch_ipv4(DEFAULT_VRF, "192.0.2.1".parse().unwrap())), 0, "no route");
        assert_eq!(steps(fib.prefetch_ipv4(99, "198.18.1.1".parse().unwrap())), 0, "no such VRF");

        // The lookup's result, as Lpm::lookup gives it.
        let v4 = &fib.vrf(DEFAULT_VRF).unwrap().v4;
        for a in ["198.18.1.1", "198.18.2.200", "198.18.2.1", "10.0.0.1", "10.0.0.7", "192.0.2.1"] {
            let a: Ipv4Addr = a.parse().unwrap();
            let mut p = fib.prefetch_ipv4(DEFAULT_VRF, a);
            while p.step() {}
            assert_eq!(p.ipv4_route(), Some(v4.lookup(a).map(|(_, _, r)| r)), "{a}");
        }
        assert_eq!(fib.prefetch_ipv4(99, "198.18.1.1".parse().unwrap()).ipv4_route(), None);
        assert_eq!(fib.prefetch_label(100).ipv4_route(), None);
    }
}
