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

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::route::{Route, RouteKey, Skipped, Update};

/// See the module documentation.
#[derive(Debug, Default, Clone)]
pub struct Rib {
    routes: HashMap<RouteKey, Route>,
    stale: HashSet<RouteKey>,
    changed: BTreeSet<RouteKey>,
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
                    self.routes.insert(key, route);
                    self.changed.insert(key);
                }
            }
            Update::Delete(key) => {
                self.stale.remove(&key);
                if self.routes.remove(&key).is_some() {
                    self.changed.insert(key);
                }
            }
            // zebra replaced the route with one vmpls cannot carry: what was there is
            // not zebra's any more.
            Update::Unsupported(Skipped { key: Some(key), .. }) => {
                self.stale.remove(&key);
                if self.routes.remove(&key).is_some() {
                    self.changed.insert(key);
                }
            }
            Update::Ignored(_) | Update::Unsupported(Skipped { key: None, .. }) => {}
        }
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
            self.routes.remove(key);
            self.changed.insert(*key);
        }
        stale.len()
    }

    /// Removes every route (zebra stayed away too long); returns how many.
    pub fn clear(&mut self) -> usize {
        self.stale.clear();
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
