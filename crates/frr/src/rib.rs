//! The routes zebra has sent over FPM, and what changed since they were last taken.
//!
//! zebra sends changes one message at a time and, on every new connection, its whole
//! table again, without marking where that walk ends. [`Rib`] keeps the last word for
//! every destination and collects the destinations that changed, so that the router
//! applies a burst of messages as one table change. [`Rib::begin_resync`] and
//! [`Rib::end_resync`] bracket a reconnection: what zebra does not send again in
//! between is removed at the end, and nothing is removed before, so live routes keep
//! forwarding while the walk is under way.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::route::{Route, RouteKey, Update};

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
            Update::Ignored(_) => {}
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

    /// The destinations changed since the last call, each with its route now (`None`:
    /// removed).
    pub fn take_changes(&mut self) -> Vec<(RouteKey, Option<&Route>)> {
        let changed = std::mem::take(&mut self.changed);
        changed.into_iter().map(|k| (k, self.routes.get(&k))).collect()
    }

    /// Whether anything changed since the last [`Rib::take_changes`].
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
