//! One transaction for every change to the tables (a CLI change, a batch, a flush, a
//! burst from FRR, a reload, new kernel addresses): changes are made in place on the
//! routing table and logged, the forwarding tables are made from the result, and only
//! if that succeeds is the change kept; else the log puts everything back. In place,
//! because a copy of a table of a million routes costs more than the change.

use std::ops::Deref;

use vmpls_fib::{Fib, Label};

use super::rib::{Derived, Entry, Prefix, Source};
use super::{Tables, TablesError};
use crate::{Config, LabelConfig, RouteConfig};

/// A staged change, holding the value it replaced. Undoing it swaps that value back, so
/// the record then holds the staged value ([`Txn::rollback`]).
#[derive(Debug)]
pub(crate) enum Staged {
    Route { vrf: String, prefix: Prefix, source: Source, entry: Option<Entry<RouteConfig>> },
    Label { label: Label, source: Source, entry: Option<Entry<LabelConfig>> },
    Derived { vrf: String, prefix: Prefix, derived: Option<Derived> },
    File(Box<Config>),
}

/// Changes to [`Tables`] being staged; dropped without [`Txn::commit`], it undoes them.
pub(crate) struct Txn<'a> {
    tables: &'a mut Tables,
    log: Vec<Staged>,
}

impl Deref for Txn<'_> {
    type Target = Tables;

    fn deref(&self) -> &Tables {
        self.tables
    }
}

impl<'a> Txn<'a> {
    pub(crate) fn new(tables: &'a mut Tables) -> Txn<'a> {
        Txn { tables, log: Vec::new() }
    }

    /// Sets (or removes) `source`'s route for `prefix` in `vrf`.
    pub(crate) fn set_route(
        &mut self,
        vrf: &str,
        prefix: Prefix,
        source: Source,
        entry: Option<Entry<RouteConfig>>,
    ) {
        let old = self.tables.rib.set_route(vrf, prefix, source, entry);
        self.log.push(Staged::Route { vrf: vrf.to_string(), prefix, source, entry: old });
    }

    /// Sets (or removes) `source`'s route for incoming `label`.
    pub(crate) fn set_label(&mut self, label: Label, source: Source, entry: Option<Entry<LabelConfig>>) {
        let old = self.tables.rib.set_label(label, source, entry);
        self.log.push(Staged::Label { label, source, entry: old });
    }

    /// Replaces the config (ports, VRFs, router addresses; its routes are ignored) and
    /// with it the destinations the ports make.
    pub(crate) fn set_file(&mut self, file: Config) {
        let before = super::rib::derived_of(&self.tables.file);
        let after = super::rib::derived_of(&file);
        for ((vrf, prefix), _) in before.iter().filter(|(k, _)| !after.contains_key(*k)) {
            let old = self.tables.rib.set_derived(vrf, *prefix, None);
            self.log.push(Staged::Derived { vrf: vrf.clone(), prefix: *prefix, derived: old });
        }
        for ((vrf, prefix), d) in after {
            if before.get(&(vrf.clone(), prefix)) != Some(&d) {
                let old = self.tables.rib.set_derived(&vrf, prefix, Some(d));
                self.log.push(Staged::Derived { vrf, prefix, derived: old });
            }
        }
        let old = std::mem::replace(&mut self.tables.file, file);
        self.log.push(Staged::File(Box::new(old)));
    }

    /// The forwarding tables of the tables with the staged changes: the last built ones
    /// with the changed entries set (time in proportion to the change), or, when the
    /// ports changed or the change is a good part of the table, built whole (faster then).
    ///
    /// # Errors
    /// The forwarding tables refuse an entry (the checks before catch what they can).
    pub(crate) fn fib(&self) -> Result<Fib, TablesError> {
        let t = &*self.tables;
        let whole = self.log.iter().any(|s| matches!(s, Staged::Derived { .. } | Staged::File(_)))
            || self.log.len() * 4 > t.rib.len();
        let built = match &t.built {
            Some(fib) if !whole => fib,
            _ => return t.build_fib(),
        };
        let mut fib = built.clone();
        let mut groups = crate::NexthopGroups::default();
        for s in &self.log {
            match s {
                // A VRF gone from the config has no table in the forwarding tables to
                // remove its routes from.
                Staged::Route { vrf, prefix, .. }
                    if t.vrf_id(vrf).is_err()
                        && t.rib.dest(vrf, *prefix).and_then(|d| d.selected_route()).is_none() => {}
                Staged::Route { vrf, prefix: (addr, len), .. } => {
                    let route = t
                        .rib
                        .dest(vrf, (*addr, *len))
                        .and_then(|d| d.selected_route())
                        .map(|e| groups.prefix_route(&e.item))
                        .transpose();
                    route
                        .and_then(|r| fib.set_prefix_route(t.vrf_id(vrf)?, *addr, *len, r))
                        .map_err(|source| TablesError::Fib { what: format!("{addr}/{len}"), source })?;
                }
                Staged::Label { label, .. } => {
                    let route = t.rib.labels().get(label).and_then(|d| d.selected_route());
                    route
                        .map(|e| t.label_route(&e.item))
                        .transpose()
                        .and_then(|r| fib.set_label_route(*label, r))
                        .map_err(|source| TablesError::Fib { what: format!("label {label}"), source })?;
                }
                Staged::Derived { .. } | Staged::File(_) => unreachable!("built whole"),
            }
        }
        // A label route set above may have taken a pseudowire's label, or given it back.
        super::pw_set::install(&t.pws, &mut fib)
            .and_then(|()| super::vpls_set::install(&t.file.vpls, &t.pws, &mut fib))
            .map_err(|source| TablesError::Fib { what: "pseudowires".into(), source })?;
        Ok(fib)
    }

    /// Keeps the staged changes, `fib` being their forwarding tables.
    pub(crate) fn commit(mut self, fib: &Fib) {
        self.log.clear();
        self.tables.built = Some(fib.clone());
    }

    /// Makes the forwarding tables and keeps the changes if that succeeds; else undoes
    /// them.
    ///
    /// # Errors
    /// As [`Txn::fib`]; then nothing changed.
    pub(crate) fn finish(self) -> Result<Fib, TablesError> {
        let fib = self.fib()?;
        self.commit(&fib);
        Ok(fib)
    }

    /// Undoes the staged changes; returns them, in the order they were staged, each
    /// holding the value it had set.
    pub(crate) fn rollback(mut self) -> Vec<Staged> {
        let mut undone = self.undo();
        undone.reverse();
        undone
    }

    fn undo(&mut self) -> Vec<Staged> {
        let rib = &mut self.tables.rib;
        let mut undone = Vec::with_capacity(self.log.len());
        while let Some(s) = self.log.pop() {
            undone.push(match s {
                Staged::Route { vrf, prefix, source, entry } => {
                    let entry = rib.set_route(&vrf, prefix, source, entry);
                    Staged::Route { vrf, prefix, source, entry }
                }
                Staged::Label { label, source, entry } => {
                    let entry = rib.set_label(label, source, entry);
                    Staged::Label { label, source, entry }
                }
                Staged::Derived { vrf, prefix, derived } => {
                    let derived = rib.set_derived(&vrf, prefix, derived);
                    Staged::Derived { vrf, prefix, derived }
                }
                Staged::File(file) => Staged::File(Box::new(std::mem::replace(&mut self.tables.file, *file))),
            });
        }
        undone
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        if !self.log.is_empty() {
            self.undo();
        }
    }
}

impl Staged {
    /// A staged FRR change as the change that made it.
    pub(crate) fn into_frr_change(self) -> Option<super::FrrChange> {
        match self {
            Staged::Route { vrf, prefix: (prefix, len), source: Source::Frr, entry } => {
                Some(super::FrrChange::Route {
                    vrf,
                    prefix,
                    len,
                    route: entry.map(|e| (e.item.action, e.origin)),
                })
            }
            Staged::Label { label, source: Source::Frr, entry } => {
                Some(super::FrrChange::Label { label, route: entry.map(|e| (e.item.action, e.origin)) })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::api::{Family, IpRoute, Nexthop, Protocol, RouteSpec, RouteType};
    use crate::tables::{Change, FrrChange, Tables};
    use crate::{Config, NexthopConfig, RouteAction};

    fn everything(t: &Tables) -> Vec<serde_json::Value> {
        [Family::Inet, Family::Inet6, Family::Mpls].into_iter().map(|f| t.show(f, None).unwrap()).collect()
    }

    #[test]
    fn new_kernel_addresses_the_tables_cannot_take_leave_everything_as_it_was() {
        let text = "[router]\nname = \"r\"\n\n[[port]]\nname = \"east\"\ninterface = \"lo\"\naddresses = [\"198.18.11.1/24\"]\n";
        let mut t = Tables::new(Config::from_str(text, Path::new("r.toml")).unwrap());
        let route = IpRoute {
            dst: "198.18.12.0/24".into(),
            vrf: "default".into(),
            kind: RouteType::Unicast,
            nexthops: vec![Nexthop {
                gateway: Some("198.18.11.2".parse().unwrap()),
                dev: None,
                labels: vec![100],
                weight: 1,
            }],
            ttl_propagate: true,
            protocol: Protocol::Boot,
            prefsrc: None,
        };
        t.change(Change::Add, &RouteSpec::Inet(route.clone())).unwrap();
        let frr = FrrChange::Route {
            vrf: "default".into(),
            prefix: "198.18.13.0".parse().unwrap(),
            len: 24,
            route: Some((
                RouteAction::Forward(vec![NexthopConfig {
                    port: 0,
                    via: Some("198.18.11.3".parse().unwrap()),
                    labels: vec![200],
                    weight: 1,
                }]),
                Protocol::Ospf,
            )),
        };
        let fib = t.apply_frr(vec![frr]).unwrap().fib;
        let before = everything(&t);
        // The CLI's route would hide the port's new subnet: the tables refuse the addresses.
        let e = t.set_kernel_addresses(vec![vec![("198.18.12.1".parse().unwrap(), 24)]], (None, None));
        assert!(e.is_err());
        assert_eq!(everything(&t), before);
        assert_eq!(t.config().ports[0].addresses, vec![("198.18.11.1".parse().unwrap(), 24)]);
        // The next change is made on the forwarding tables in force, not on the refused ones.
        let del = RouteSpec::Inet(IpRoute { nexthops: Vec::new(), ..route });
        let after = t.change(Change::Delete, &del).unwrap();
        let whole = t.build_fib().unwrap();
        let look = |f: &vmpls_fib::Fib, a: &str| format!("{:?}", f.vrfs[0].lookup(a.parse().unwrap()));
        for a in ["198.18.11.9", "198.18.12.9", "198.18.13.9"] {
            assert_eq!(look(&after, a), look(&whole, a), "{a}");
        }
        assert_eq!(look(&after, "198.18.13.9"), look(&fib, "198.18.13.9"));
    }
}
