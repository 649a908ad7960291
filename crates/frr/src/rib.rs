//! The routes zebra has sent over FPM, and what changed since they were last taken.
//!
//! zebra sends changes one message at a time and, on every new connection, its whole
//! table again, without marking where that walk ends. [`Rib`] keeps the last word for
//! every destination and collects the destinations that changed, so that the router
//! applies a burst of messages as one table change. [`Rib::begin_resync`] and
//! [`Rib::end_resync`] bracket a reconnection: what zebra does not send again in
//! between is removed at the end, and nothing is removed before, so live routes keep
//! forwarding while the walk is under way.
//!
//! The changes stay pending until the router says they are in force
//! ([`Rib::pending_changes`], then [`Rib::mark_applied`]): a table change that fails
//! loses nothing, and the next try applies what zebra sent since, on top.
//!
//! An IPv6 route over the IPv4 core (6PE, 6VPE) comes from zebra with no gateway: it is
//! that of the default VRF's IPv4 next hops out of the same interface with the labels
//! its stack begins with ([`Rib::core_gateways`]). The Rib keeps those gateways as an
//! index, updated route by route, and when a change of the core changes the gateways of
//! an (interface, labels), it marks as changed the IPv6 routes over that interface whose
//! stacks begin with those labels, and only them: a table of many VPN routes is not
//! walked on every change of the core.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use crate::route::{Dest, MAIN_TABLE, Nexthop, Route, RouteKey, Skipped, Update};

/// The gateways of the default VRF's IPv4 next hops by (interface index, labels), each
/// with the number of next hops that have it.
type CoreGateways = HashMap<(u32, Vec<u32>), BTreeMap<IpAddr, u32>>;

/// See the module documentation.
#[derive(Debug, Default, Clone)]
pub struct Rib {
    routes: HashMap<RouteKey, Route>,
    stale: HashSet<RouteKey>,
    changed: BTreeSet<RouteKey>,
    core_gateways: CoreGateways,
    /// The IPv6 routes with a labelled next hop without gateway, by that next hop's
    /// interface: those whose gateway is the core's.
    over_core: HashMap<u32, HashSet<RouteKey>>,
}

/// The (interface, labels, gateway) of each next hop of `r` that is one of the core's:
/// `r` is a default-VRF IPv4 route and the next hop has an interface and an IPv4 gateway.
fn core_nexthops(r: &Route) -> impl Iterator<Item = (u32, &Vec<u32>, IpAddr)> {
    let core = r.key.table == MAIN_TABLE && matches!(r.key.dest, Dest::Prefix(IpAddr::V4(_), _));
    r.nexthops.iter().filter(move |_| core).filter_map(|n| match (n.gateway, n.ifindex) {
        (Some(g @ IpAddr::V4(_)), Some(i)) => Some((i, &n.labels, g)),
        _ => None,
    })
}

/// Whether next hop `n` of `r` takes its gateway from the core: `r` is an IPv6 route and
/// `n` is labelled, with an interface and no gateway.
fn over_core(r: &Route, n: &Nexthop) -> bool {
    matches!(r.key.dest, Dest::Prefix(IpAddr::V6(_), _))
        && n.gateway.is_none()
        && n.ifindex.is_some()
        && !n.labels.is_empty()
}

impl Rib {
    /// An empty table.
    pub fn new() -> Rib {
        Rib::default()
    }

    /// Applies one update. Deleting what is not there is not an error (zebra deletes
    /// routes it never got installed), and re-adding an identical route changes nothing.
    pub fn apply(&mut self, update: Update) {
        match update {
            Update::Add(route) => {
                let key = route.key;
                self.stale.remove(&key);
                if self.routes.get(&key) != Some(&route) {
                    self.replace(key, Some(route));
                    self.changed.insert(key);
                }
            }
            Update::Delete(key) => {
                self.stale.remove(&key);
                if self.remove(&key) {
                    self.changed.insert(key);
                }
            }
            // zebra replaced the route with one vmpls cannot carry: what was there is
            // not zebra's any more.
            Update::Unsupported(Skipped { key: Some(key), .. }) => {
                self.stale.remove(&key);
                if self.remove(&key) {
                    self.changed.insert(key);
                }
            }
            Update::Ignored(_) | Update::Unsupported(Skipped { key: None, .. }) => {}
        }
    }

    /// Removes the route of `key`; whether there was one.
    fn remove(&mut self, key: &RouteKey) -> bool {
        self.replace(*key, None)
    }

    /// Puts `new` in the place of the route of `key` (`None`: removes it), with the
    /// index, and marks as changed the IPv6 routes whose core gateways that changes (a
    /// gateway came or went for an (interface, labels) they use; a count, not). Returns
    /// whether there was a route.
    fn replace(&mut self, key: RouteKey, new: Option<Route>) -> bool {
        let old = self.routes.remove(&key);
        let mut slots: Vec<(u32, Vec<u32>)> = Vec::new();
        for r in old.iter().chain(new.iter()) {
            for (ifindex, labels, _) in core_nexthops(r) {
                if !slots.iter().any(|(i, l)| *i == ifindex && l == labels) {
                    slots.push((ifindex, labels.clone()));
                }
            }
        }
        let gateways_of = |index: &CoreGateways, slot: &(u32, Vec<u32>)| -> Vec<IpAddr> {
            index.get(slot).map(|g| g.keys().copied().collect()).unwrap_or_default()
        };
        let before: Vec<Vec<IpAddr>> = slots.iter().map(|s| gateways_of(&self.core_gateways, s)).collect();
        for (r, add) in old.iter().map(|r| (r, false)).chain(new.iter().map(|r| (r, true))) {
            self.index(r, add);
        }
        let existed = old.is_some();
        if let Some(r) = new {
            self.routes.insert(key, r);
        }
        for (slot, before) in slots.iter().zip(before) {
            if gateways_of(&self.core_gateways, slot) != before {
                self.mark_over_core(slot);
            }
        }
        existed
    }

    /// Adds `r` to the index (`add`) or takes it out.
    fn index(&mut self, r: &Route, add: bool) {
        for n in r.nexthops.iter().filter(|n| over_core(r, n)) {
            let Some(ifindex) = n.ifindex else { continue };
            if add {
                self.over_core.entry(ifindex).or_default().insert(r.key);
            } else if let Some(keys) = self.over_core.get_mut(&ifindex) {
                keys.remove(&r.key);
                if keys.is_empty() {
                    self.over_core.remove(&ifindex);
                }
            }
        }
        for (ifindex, labels, gateway) in core_nexthops(r) {
            let slot = (ifindex, labels.clone());
            let gateways = self.core_gateways.entry(slot.clone()).or_default();
            let count = gateways.entry(gateway).or_default();
            *count = if add { *count + 1 } else { count.saturating_sub(1) };
            if *count == 0 {
                gateways.remove(&gateway);
                if gateways.is_empty() {
                    self.core_gateways.remove(&slot);
                }
            }
        }
    }

    /// Marks as changed the IPv6 routes with a next hop over the core out of `ifindex`
    /// whose stack begins with `labels`.
    fn mark_over_core(&mut self, (ifindex, labels): &(u32, Vec<u32>)) {
        let Some(keys) = self.over_core.get(ifindex) else { return };
        for key in keys {
            let uses = self.routes.get(key).is_some_and(|v6| {
                v6.nexthops
                    .iter()
                    .any(|n| over_core(v6, n) && n.ifindex == Some(*ifindex) && n.labels.starts_with(labels))
            });
            if uses {
                self.changed.insert(*key);
            }
        }
    }

    /// The gateways of the default VRF's IPv4 next hops out of interface `ifindex` with
    /// exactly the stack `labels` (none: no such next hop).
    pub fn core_gateways(&self, ifindex: u32, labels: &[u32]) -> Option<impl Iterator<Item = &IpAddr>> {
        self.core_gateways.get(&(ifindex, labels.to_vec())).map(BTreeMap::keys)
    }

    /// A new connection: every route now held is stale until zebra sends it again.
    pub fn begin_resync(&mut self) {
        self.stale = self.routes.keys().copied().collect();
    }

    /// Whether a resync is under way with routes not yet confirmed.
    pub fn resyncing(&self) -> bool {
        !self.stale.is_empty()
    }

    /// The walk is over: removes the routes zebra did not send again; returns how many.
    pub fn end_resync(&mut self) -> usize {
        let stale = std::mem::take(&mut self.stale);
        for key in &stale {
            self.remove(key);
            self.changed.insert(*key);
        }
        stale.len()
    }

    /// Removes every route (zebra stayed away too long); returns how many.
    pub fn clear(&mut self) -> usize {
        self.stale.clear();
        self.core_gateways.clear();
        self.over_core.clear();
        let n = self.routes.len();
        self.changed.extend(self.routes.drain().map(|(k, _)| k));
        n
    }

    /// The destinations changed and not yet applied, each with its route now (`None`:
    /// removed). They stay pending until [`Rib::mark_applied`].
    pub fn pending_changes(&self) -> Vec<(RouteKey, Option<&Route>)> {
        self.changed.iter().map(|k| (*k, self.routes.get(k))).collect()
    }

    /// The changes [`Rib::pending_changes`] returned are in force.
    pub fn mark_applied(&mut self) {
        self.changed.clear();
    }

    /// The pending changes, marked applied at once (for callers whose apply cannot fail).
    pub fn take_changes(&mut self) -> Vec<(RouteKey, Option<&Route>)> {
        let changed = std::mem::take(&mut self.changed);
        changed.into_iter().map(|k| (k, self.routes.get(&k))).collect()
    }

    /// Marks every route held that `retranslate` picks as changed, so that the router
    /// takes it again (what zebra's table ids or interfaces mean changed); returns how
    /// many.
    pub fn mark_changed(&mut self, retranslate: impl Fn(&Route) -> bool) -> usize {
        let before = self.changed.len();
        self.changed.extend(self.routes.values().filter(|r| retranslate(r)).map(|r| r.key));
        self.changed.len() - before
    }

    /// Whether anything changed and is not applied yet.
    pub fn has_changes(&self) -> bool {
        !self.changed.is_empty()
    }

    /// How many routes are held.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// Whether no route is held.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The route held for `key`.
    pub fn get(&self, key: &RouteKey) -> Option<&Route> {
        self.routes.get(key)
    }

    /// The tables that hold at least one route, a walk over every route.
    pub fn tables(&self) -> BTreeSet<u32> {
        self.routes.keys().map(|k| k.table).collect()
    }

    /// Every route held, in no particular order.
    pub fn routes(&self) -> impl Iterator<Item = &Route> {
        self.routes.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::{Dest, Kind, MAIN_TABLE, Nexthop};

    fn lsp(label: u32, out: u32) -> Route {
        Route {
            key: RouteKey { table: MAIN_TABLE, dest: Dest::Label(label) },
            protocol: 193,
            kind: Kind::Unicast,
            nexthops: vec![Nexthop {
                gateway: Some("198.18.10.2".parse().unwrap()),
                ifindex: Some(2),
                labels: vec![out],
                weight: 1,
            }],
        }
    }

    fn changed(rib: &mut Rib) -> Vec<(u32, Option<u32>)> {
        rib.take_changes()
            .into_iter()
            .map(|(k, r)| {
                let Dest::Label(l) = k.dest else { panic!() };
                (l, r.map(|r| r.nexthops[0].labels[0]))
            })
            .collect()
    }

    fn prefix(table: u32, dst: &str, len: u8, nexthops: Vec<Nexthop>) -> Route {
        Route {
            key: RouteKey { table, dest: Dest::Prefix(dst.parse().unwrap(), len) },
            protocol: 186,
            kind: Kind::Unicast,
            nexthops,
        }
    }

    fn nh(gateway: Option<&str>, ifindex: u32, labels: &[u32]) -> Nexthop {
        Nexthop {
            gateway: gateway.map(|g| g.parse().unwrap()),
            ifindex: Some(ifindex),
            labels: labels.to_vec(),
            weight: 1,
        }
    }

    fn gateways(rib: &Rib, ifindex: u32, labels: &[u32]) -> Vec<String> {
        rib.core_gateways(ifindex, labels).map(|g| g.map(ToString::to_string).collect()).unwrap_or_default()
    }

    fn changed_keys(rib: &mut Rib) -> Vec<String> {
        rib.take_changes()
            .into_iter()
            .map(|(k, _)| match k.dest {
                Dest::Prefix(a, l) => format!("{}:{a}/{l}", k.table),
                Dest::Label(l) => format!("label {l}"),
            })
            .collect()
    }

    #[test]
    fn a_change_of_the_core_takes_again_only_the_ipv6_routes_over_it() {
        let mut rib = Rib::new();
        // The core: two PEs' loopbacks over interface 2, transport labels 100 and 200.
        let pe2 = prefix(MAIN_TABLE, "198.18.255.2", 32, vec![nh(Some("198.18.12.2"), 2, &[100])]);
        let pe3 = prefix(MAIN_TABLE, "198.18.255.3", 32, vec![nh(Some("198.18.12.3"), 2, &[200])]);
        rib.apply(Update::Add(pe2.clone()));
        rib.apply(Update::Add(pe3.clone()));
        // 6VPE routes of VRF table 1000 over each, and a VPNv4 route.
        let over_pe2 = prefix(1000, "2001:db8:2::", 64, vec![nh(None, 2, &[100, 5002])]);
        let over_pe3 = prefix(1000, "2001:db8:3::", 64, vec![nh(None, 2, &[200, 5003])]);
        let v4 = prefix(1000, "198.19.0.0", 24, vec![nh(Some("198.18.12.2"), 2, &[100, 5002])]);
        for r in [&over_pe2, &over_pe3, &v4] {
            rib.apply(Update::Add(r.clone()));
        }
        changed_keys(&mut rib);
        assert_eq!(gateways(&rib, 2, &[100]), ["198.18.12.2"]);
        assert_eq!(gateways(&rib, 2, &[100, 5002]), Vec::<String>::new());
        // Another route over the same gateway and labels: no gateway came or went.
        let more = prefix(MAIN_TABLE, "198.18.254.0", 24, vec![nh(Some("198.18.12.2"), 2, &[100])]);
        rib.apply(Update::Add(more.clone()));
        assert_eq!(changed_keys(&mut rib), ["254:198.18.254.0/24"]);
        // pe2 moves to another neighbour: only the IPv6 route over label 100 is taken again.
        let moved = prefix(MAIN_TABLE, "198.18.255.2", 32, vec![nh(Some("198.18.12.9"), 2, &[100])]);
        rib.apply(Update::Add(moved));
        assert_eq!(changed_keys(&mut rib), ["254:198.18.255.2/32", "1000:2001:db8:2::/64"]);
        assert_eq!(gateways(&rib, 2, &[100]), ["198.18.12.2", "198.18.12.9"]);
        rib.apply(Update::Delete(more.key));
        assert_eq!(changed_keys(&mut rib), ["254:198.18.254.0/24", "1000:2001:db8:2::/64"]);
        assert_eq!(gateways(&rib, 2, &[100]), ["198.18.12.9"]);
        // A route zebra does not send again after a reconnection goes, with its gateway.
        rib.begin_resync();
        for r in [&over_pe2, &over_pe3, &v4] {
            rib.apply(Update::Add((*r).clone()));
        }
        rib.apply(Update::Add(prefix(
            MAIN_TABLE,
            "198.18.255.2",
            32,
            vec![nh(Some("198.18.12.9"), 2, &[100])],
        )));
        assert_eq!(rib.end_resync(), 1);
        assert_eq!(changed_keys(&mut rib), ["254:198.18.255.3/32", "1000:2001:db8:3::/64"]);
        assert_eq!(gateways(&rib, 2, &[200]), Vec::<String>::new());
        // An IPv6 route gone is no longer taken again; clearing forgets every gateway.
        rib.apply(Update::Delete(over_pe2.key));
        changed_keys(&mut rib);
        rib.apply(Update::Add(pe2));
        assert_eq!(changed_keys(&mut rib), ["254:198.18.255.2/32"]);
        rib.clear();
        assert_eq!(gateways(&rib, 2, &[100]), Vec::<String>::new());
        assert!(rib.over_core.is_empty() && rib.core_gateways.is_empty());
    }

    #[test]
    fn a_burst_becomes_one_set_of_changes() {
        let mut rib = Rib::new();
        rib.apply(Update::Add(lsp(16, 100)));
        rib.apply(Update::Add(lsp(17, 101)));
        rib.apply(Update::Add(lsp(16, 102)));
        rib.apply(Update::Delete(lsp(18, 0).key));
        assert_eq!(changed(&mut rib), [(16, Some(102)), (17, Some(101))]);
        assert!(!rib.has_changes());
        rib.apply(Update::Add(lsp(17, 101)));
        assert!(!rib.has_changes(), "the same route again changes nothing");
        rib.apply(Update::Delete(lsp(17, 0).key));
        assert_eq!(changed(&mut rib), [(17, None)]);
    }

    #[test]
    fn changes_stay_pending_until_applied() {
        let mut rib = Rib::new();
        rib.apply(Update::Add(lsp(16, 100)));
        assert_eq!(rib.pending_changes().len(), 1);
        // The apply failed: nothing is lost, and what comes next joins it.
        rib.apply(Update::Add(lsp(17, 101)));
        rib.apply(Update::Add(lsp(16, 102)));
        let pending: Vec<_> = rib.pending_changes().into_iter().map(|(k, r)| (k, r.cloned())).collect();
        assert_eq!(pending, [(lsp(16, 0).key, Some(lsp(16, 102))), (lsp(17, 0).key, Some(lsp(17, 101)))]);
        rib.mark_applied();
        assert!(!rib.has_changes());
    }

    #[test]
    fn a_route_replaced_by_one_vmpls_cannot_carry_goes() {
        use crate::route::Unsupported;
        let mut rib = Rib::new();
        rib.apply(Update::Add(lsp(16, 100)));
        rib.take_changes();
        let skipped =
            |key| Update::Unsupported(Skipped { kind: Unsupported::Seg6, key, detail: String::new() });
        rib.apply(skipped(None));
        assert!(!rib.has_changes());
        rib.apply(skipped(Some(lsp(16, 0).key)));
        assert_eq!(changed(&mut rib), [(16, None)]);
        assert!(rib.is_empty());
    }

    #[test]
    fn routes_picked_again_are_changes_again() {
        let mut rib = Rib::new();
        for l in 16..20 {
            rib.apply(Update::Add(lsp(l, l + 100)));
        }
        rib.take_changes();
        rib.apply(Update::Add(lsp(16, 200)));
        assert_eq!(rib.mark_changed(|r| r.nexthops[0].labels[0] >= 118), 2, "16 is pending already");
        assert_eq!(changed(&mut rib), [(16, Some(200)), (18, Some(118)), (19, Some(119))]);
        assert_eq!(rib.mark_changed(|_| false), 0);
        assert!(!rib.has_changes());
    }

    #[test]
    fn a_resync_removes_only_what_zebra_did_not_send_again() {
        let mut rib = Rib::new();
        for l in 16..20 {
            rib.apply(Update::Add(lsp(l, l + 100)));
        }
        rib.take_changes();
        rib.begin_resync();
        assert!(rib.resyncing());
        rib.apply(Update::Add(lsp(16, 116)));
        rib.apply(Update::Add(lsp(17, 200)));
        rib.apply(Update::Add(lsp(30, 130)));
        // Nothing is removed while the walk goes on.
        assert_eq!(rib.len(), 5);
        assert_eq!(changed(&mut rib), [(17, Some(200)), (30, Some(130))]);
        assert_eq!(rib.end_resync(), 2);
        assert_eq!(changed(&mut rib), [(18, None), (19, None)]);
        assert_eq!(rib.len(), 3);
        assert_eq!(rib.clear(), 3);
        assert_eq!(changed(&mut rib), [(16, None), (17, None), (30, None)]);
    }
}
