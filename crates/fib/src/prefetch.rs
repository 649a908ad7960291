//! Route lookups of a batch taken together, one dependent read per pass over the batch,
//! so that the cache misses of all of them are in flight at once instead of one after the
//! other, as VPP's graph nodes and DPDK's pipelines do by prefetching a few packets
//! ahead.
//!
//! [`Fib::prefetch_lookups`] takes the batch's keys (a top label, or a VRF and an IPv4
//! destination), and each pass reads, for every key still going, the entry the previous
//! pass prefetched (in cache by then) and prefetches the next: the label slot or the
//! IPv4 index entries (`tbl24`, `tbl8`) and the trie node; then, for a route that does not
//! hold a copy of its next hop (`inline_hop`), the next-hop group (with the next hop of a
//! single-path group), the first next hop of a multipath group, the next hop's labels.
//! The keys' state lives in one small array per step, so a pass is a tight loop
//! over one kind of read, not a dispatch per key and step. The caller's own lookups then
//! find the tables in cache; IPv4 routes found are handed back so the caller need not
//! look again. A hint only: no lookup's result depends on it, and a route changed in
//! between costs a miss, nothing else.

use std::net::Ipv4Addr;

use crate::dir::Dir;
use crate::lpm::Node;
use crate::{
    Fib, Label, LabelAction, LabelRoute, Lpm, Nexthop, NexthopGroup, PrefixRoute, RouteTarget, VrfId,
};

/// What one frame's lookup looks for, for [`Fib::prefetch_lookups`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LookupKey {
    /// Nothing to look up.
    #[default]
    None,
    /// A labelled frame's top label.
    Label(Label),
    /// An IPv4 packet's destination, in the VRF of the port it arrived on.
    Ipv4(VrfId, Ipv4Addr),
}

/// Routes in one table (the label table, or one VRF's IPv4 routes) from which
/// prefetching pays: below, a router's tables stay in its caches, and the prefetch passes
/// cost more than the misses they would save (`cargo bench -p vmpls-dataplane --bench
/// pipeline`: BENCHMARKS.md).
pub const PREFETCH_MIN_ROUTES: usize = 8192;

type Ipv4Table = Lpm<Ipv4Addr, PrefixRoute>;

impl Fib {
    /// Whether the tables are large enough for [`prefetch_lookups`](Fib::prefetch_lookups)
    /// to pay: see [`PREFETCH_MIN_ROUTES`].
    pub fn prefetch_pays(&self) -> bool {
        self.labels.len() >= PREFETCH_MIN_ROUTES
            || self.vrfs.iter().any(|v| v.v4.len() >= PREFETCH_MIN_ROUTES)
    }

    /// Prefetches every read the lookups of `keys` make, the misses of all of them
    /// overlapped: one pass over the keys a dependent read (the label slot or the IPv4
    /// index entries, the trie node, then the group and labels of a route that does not
    /// hold its next hop), each reading what the pass before asked for and asking for the
    /// next. Returns what the IPv4 keys found, as [`Lpm::lookup`] finds it:
    /// `Some(Some(route))`, `Some(None)` for no route. `None` for a label, no key, and a
    /// VRF that does not exist or has no IPv4 index.
    #[inline]
    pub fn prefetch_lookups<'a, const N: usize>(
        &'a self,
        keys: &[LookupKey; N],
    ) -> [Option<Option<&'a PrefixRoute>>; N] {
        let mut routes = [None; N];
        // Each array holds the keys waiting for one kind of read, whose line is on its way.
        let mut slots: [Option<&'a Option<LabelRoute>>; N] = [None; N];
        let mut tables: [Option<(&'a Ipv4Table, &'a Dir, u32)>; N] = [None; N];
        let mut entries24: [Option<&'a u32>; N] = [None; N];
        let mut entries8: [Option<&'a u32>; N] = [None; N];
        let mut nodes: [Option<&'a Node<PrefixRoute>>; N] = [None; N];
        let mut groups: [Option<&'a NexthopGroup>; N] = [None; N];
        let mut nexthops: [Option<&'a Nexthop>; N] = [None; N];

        // The first read of each key: its label slot or its /24's index entry.
        for (i, key) in keys.iter().enumerate() {
            match *key {
                LookupKey::None => {}
                LookupKey::Label(label) => {
                    if let Some(slot) = self.labels.slot(label) {
                        hint(slot);
                        slots[i] = Some(slot);
                    }
                }
                LookupKey::Ipv4(vrf, addr) => {
                    let Some(lpm) = self.vrf(vrf).map(|v| &v.v4) else { continue };
                    let Some(dir) = lpm.dir() else { continue };
                    let addr = u32::from(addr);
                    tables[i] = Some((lpm, dir, addr));
                    match dir.entry24(addr) {
                        Some(entry) => {
                            hint(entry);
                            entries24[i] = Some(entry);
                        }
                        None => request_node(lpm, dir.finish(addr, 0), &mut nodes[i], &mut routes[i]),
                    }
                }
            }
        }
        // The label slots (their next-hop group), the /24 entries (a `tbl8` entry, or the
        // trie node).
        for i in 0..N {
            // A route that holds its next hop is done with its slot.
            if let Some(Some(route)) = slots[i]
                && let LabelAction::Forward(group) = route.action()
                && route.inline_hop().is_none()
            {
                groups[i] = Some(request_group(group));
            }
            if let (Some(entry), Some((lpm, dir, addr))) = (entries24[i], tables[i]) {
                match dir.entry8(addr, *entry) {
                    Ok(entry) => {
                        hint(entry);
                        entries8[i] = Some(entry);
                    }
                    Err(node) => request_node(lpm, node, &mut nodes[i], &mut routes[i]),
                }
            }
        }
        // The `tbl8` entries: the trie node.
        for i in 0..N {
            if let (Some(entry), Some((lpm, dir, addr))) = (entries8[i], tables[i]) {
                request_node(lpm, dir.finish(addr, *entry), &mut nodes[i], &mut routes[i]);
            }
        }
        // The trie nodes: the route, and its next-hop group unless the route holds its
        // next hop.
        for i in 0..N {
            if let Some(node) = nodes[i] {
                routes[i] = Some(node.value());
                if let Some(route @ PrefixRoute { target: RouteTarget::Forward(group), .. }) = node.value()
                    && route.inline_hop().is_none()
                {
                    groups[i] = Some(request_group(group));
                }
            }
        }
        // The groups: a single-path group's next hop is in it (its labels next); a
        // multipath one points to its next hops.
        for i in 0..N {
            if let Some(group) = groups[i] {
                if group.is_multipath() {
                    hint(group.first());
                    nexthops[i] = Some(group.first());
                } else {
                    request_labels(group.first());
                }
            }
        }
        for nh in nexthops.iter().flatten() {
            request_labels(nh);
        }
        routes
    }
}

/// Requests trie node `node` of `lpm` (no node: no route).
#[inline(always)]
fn request_node<'a>(
    lpm: &'a Ipv4Table,
    node: Option<u32>,
    pending: &mut Option<&'a Node<PrefixRoute>>,
    route: &mut Option<Option<&'a PrefixRoute>>,
) {
    match node {
        Some(i) => {
            let node = lpm.node(i);
            hint(node);
            *pending = Some(node);
        }
        None => *route = Some(None),
    }
}

/// Requests what selecting a next hop of `group` reads first.
#[inline(always)]
fn request_group(group: &NexthopGroup) -> &NexthopGroup {
    hint(group.header());
    group
}

/// Requests the labels of `nh`: the last read.
#[inline(always)]
fn request_labels(nh: &Nexthop) {
    if let Some(label) = nh.labels.first() {
        hint(label);
    }
}
/// Asks the CPU to bring every cache line of `*value` into its caches, without waiting.
#[inline(always)]
fn hint<T>(value: &T) {
    let first = std::ptr::from_ref(value).cast::<u8>();
    hint_ptr(first);
    // An entry that may straddle two lines (a next-hop group) needs both.
    if size_of::<T>() > align_of::<T>() {
        let last = first.wrapping_add(size_of::<T>() - 1);
        if (last as usize) / 64 != (first as usize) / 64 {
            hint_ptr(last);
        }
    }
}

/// Asks the CPU to bring the cache line of `p` into its caches, without waiting (and,
/// in this crate's tests, notes the address).
#[inline(always)]
fn hint_ptr(p: *const u8) {
    #[cfg(test)]
    tests::HINTED.with_borrow_mut(|h| h.push(p as usize));
    vmpls_sys::cpu::prefetch(p);
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::net::{IpAddr, Ipv4Addr};

    use super::LookupKey;
    use crate::{
        DEFAULT_VRF, Fib, LabelAction, LabelRoute, Nexthop, NexthopGroup, PrefixRoute, RouteTarget, TtlModel,
    };

    thread_local! {
        /// The addresses this thread's prefetches asked for.
        pub(super) static HINTED: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    }

    fn group(label: u32) -> NexthopGroup {
        NexthopGroup::single(Nexthop::new(0, Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))), vec![label]))
            .unwrap()
    }

    fn fib() -> Fib {
        let mut b = Fib::builder();
        b.add_port("core", DEFAULT_VRF, &[("10.0.0.1".parse().unwrap(), 24)]).unwrap();
        b.add_label_route(100, LabelRoute::new(LabelAction::Forward(group(200)), TtlModel::Uniform)).unwrap();
        let nh = |label| Nexthop::new(0, Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, label as u8))), vec![label]);
        let ecmp = NexthopGroup::new(vec![nh(201), nh(202)]).unwrap();
        b.add_label_route(102, LabelRoute::new(LabelAction::Forward(ecmp.clone()), TtlModel::Uniform))
            .unwrap();
        let via = RouteTarget::Forward(group(300));
        b.add_prefix_route(DEFAULT_VRF, "198.18.0.0".parse().unwrap(), 16, PrefixRoute::new(via.clone()))
            .unwrap();
        b.add_prefix_route(DEFAULT_VRF, "198.18.2.128".parse().unwrap(), 25, PrefixRoute::new(via)).unwrap();
        // Routes whose next hops are not in the route: the group is read.
        let deep = NexthopGroup::single(Nexthop::new(
            0,
            Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))),
            vec![301, 302, 303],
        ))
        .unwrap();
        b.add_prefix_route(
            DEFAULT_VRF,
            "198.18.3.0".parse().unwrap(),
            24,
            PrefixRoute::new(RouteTarget::Forward(deep)),
        )
        .unwrap();
        b.add_prefix_route(
            DEFAULT_VRF,
            "198.18.4.0".parse().unwrap(),
            24,
            PrefixRoute::new(RouteTarget::Forward(ecmp)),
        )
        .unwrap();
        b.build().unwrap()
    }

    /// Whether the last prefetches asked for the line of `value`.
    fn hinted<T>(value: &T) -> bool {
        let line = std::ptr::from_ref(value) as usize / 64;
        HINTED.with_borrow(|h| h.iter().any(|&p| p / 64 == line))
    }

    fn ipv4(a: &str) -> LookupKey {
        LookupKey::Ipv4(DEFAULT_VRF, a.parse().unwrap())
    }

    #[test]
    fn prefetch_reaches_every_read_down_to_the_labels() {
        let fib = fib();
        let v4 = &fib.vrf(DEFAULT_VRF).unwrap().v4;
        let keys = [
            LookupKey::Label(100),
            LookupKey::Label(102),
            ipv4("198.18.1.1"),
            // Under the /25: a `tbl8` entry between the /24's entry and the node.
            ipv4("198.18.2.200"),
            LookupKey::None,
        ];
        HINTED.with_borrow_mut(Vec::clear);
        fib.prefetch_lookups(&keys);
        assert!(hinted(fib.labels.slot(100).unwrap()), "label 100: its slot");
        for label in [100, 102] {
            HINTED.with_borrow_mut(Vec::clear);
            fib.prefetch_lookups(&[LookupKey::Label(label)]);
            let slot = fib.labels.slot(label).unwrap();
            assert!(hinted(slot), "label {label}: its slot");
            let route = slot.as_ref().unwrap();
            let LabelAction::Forward(group) = route.action() else { unreachable!() };
            // Label 100's route holds its one next hop: done with its slot. 102 is ECMP.
            let holds_its_hop = route.inline_hop().is_some();
            assert_eq!(holds_its_hop, label == 100);
            assert_eq!(hinted(group.header()), !holds_its_hop, "label {label}: its group");
            let nh = &group.nexthops()[0];
            assert_eq!(hinted(nh), !holds_its_hop, "label {label}: its first next hop");
            assert_eq!(hinted(&nh.labels[0]), !holds_its_hop, "label {label}: the labels");
        }
        for a in ["198.18.1.1", "198.18.2.200", "198.18.3.1", "198.18.4.1"] {
            HINTED.with_borrow_mut(Vec::clear);
            fib.prefetch_lookups(&[ipv4(a)]);
            let addr = u32::from(a.parse::<Ipv4Addr>().unwrap());
            let dir = v4.dir().unwrap();
            let e24 = dir.entry24(addr).unwrap();
            assert!(hinted(e24), "{a}: the /24's entry");
            let node = match dir.entry8(addr, *e24) {
                Ok(e8) => {
                    assert!(hinted(e8), "{a}: the tbl8 entry");
                    dir.finish(addr, *e8)
                }
                Err(node) => node,
            };
            let node = v4.node(node.unwrap());
            assert!(hinted(node), "{a}: the trie node");
            let route = node.value().unwrap();
            let RouteTarget::Forward(group) = route.target() else { unreachable!() };
            // A route that holds its next hop is done with its node; the others read on.
            let holds_its_hop = route.inline_hop().is_some();
            assert_eq!(holds_its_hop, a < "198.18.3", "{a}");
            assert_eq!(hinted(group.header()), !holds_its_hop, "{a}: the group");
            let nh = &group.nexthops()[0];
            assert_eq!(hinted(nh), !holds_its_hop, "{a}: the first next hop");
            assert_eq!(hinted(&nh.labels[0]), !holds_its_hop, "{a}: the labels");
        }
    }

    #[test]
    fn prefetch_finds_the_ipv4_routes_a_lookup_finds() {
        let fib = fib();
        let v4 = &fib.vrf(DEFAULT_VRF).unwrap().v4;
        let addrs = ["198.18.1.1", "198.18.2.200", "198.18.2.1", "10.0.0.1", "10.0.0.7", "192.0.2.1"];
        let mut keys = [LookupKey::None; 8];
        for (k, a) in keys.iter_mut().zip(addrs) {
            *k = ipv4(a);
        }
        keys[6] = LookupKey::Label(100);
        keys[7] = LookupKey::Ipv4(99, "198.18.1.1".parse().unwrap());
        let routes = fib.prefetch_lookups(&keys);
        for (a, route) in addrs.iter().zip(routes) {
            let a: Ipv4Addr = a.parse().unwrap();
            assert_eq!(route, Some(v4.lookup(a).map(|(_, _, r)| r)), "{a}");
        }
        assert_eq!(routes[6], None, "a label hands back no IPv4 route");
        assert_eq!(routes[7], None, "no such VRF");
        assert_eq!(fib.prefetch_lookups(&[LookupKey::None; 4]), [None; 4]);
        assert_eq!(fib.prefetch_lookups(&[LookupKey::Label(999_999)]), [None], "a label without a chunk");
    }
}
