//! The routing table (RIB): one map per VRF and family keyed by prefix, one keyed by
//! incoming label. A destination holds a candidate from every source that has a route
//! for it: the file or the CLI, FRR, and the ports (a connected subnet, one of the
//! router's own addresses). [`Dest::selected`] picks the one in force; the forwarding
//! tables, `route show`, `route get`, `route flush` and the running config all go
//! through it, so they cannot disagree.

use std::collections::BTreeMap;
use std::net::IpAddr;

use vmpls_fib::{DEFAULT_VRF_NAME, Label, PortId};

use super::{mask, max_len};
use crate::api::Protocol;
use crate::{Config, LabelConfig, RouteConfig};

/// A destination in a prefix table: the prefix (host bits clear) and its length.
pub(crate) type Prefix = (IpAddr, u8);

/// A route as one source gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry<T> {
    pub(crate) item: T,
    /// Who owns it: `Static` the file, `Boot` the CLI, else FRR (which daemon).
    pub(crate) origin: Protocol,
    /// What `route show` says, if not `origin`: the CLI's `proto NAME` (a route pasted
    /// back from `route show` keeps its protocol; ownership stays the CLI's).
    pub(crate) shown: Option<Protocol>,
}

impl<T> Entry<T> {
    pub(crate) fn new(item: T, origin: Protocol) -> Entry<T> {
        Entry { item, origin, shown: None }
    }

    /// The protocol `route show` prints.
    pub(crate) fn proto(&self) -> Protocol {
        self.shown.unwrap_or(self.origin)
    }
}

/// Which candidate of a destination a route change sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The file or the CLI: one candidate, so that the CLI's `replace` takes over the
    /// file's route and a reload gives it back (the entry's `origin` says whose it is).
    Own,
    /// zebra, over FPM: kept apart so that zebra's reconnection replaces only its own.
    Frr,
}

/// A destination the ports' and the router's addresses make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Derived {
    /// The connected subnet of `port` (the first port that has it).
    Connected { port: PortId },
    /// One of the router's own addresses: delivered, not routed; `route show` does not
    /// list it.
    Local,
}

/// The candidates for one destination. The routes are boxed so that a destination with
/// one of them (most have one) costs no room for the other: a table of a million routes
/// takes no more memory than the single map per source it replaced.
#[derive(Debug, Clone)]
pub(crate) struct Dest<T> {
    own: Option<Box<Entry<T>>>,
    frr: Option<Box<Entry<T>>>,
    derived: Option<Derived>,
}

/// The candidate in force at a destination.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Selected<'a, T> {
    /// A route of the file, the CLI or FRR.
    Route(&'a Entry<T>),
    /// The port's connected subnet or the router's own address.
    Derived(Derived),
}

impl<T> Default for Dest<T> {
    fn default() -> Self {
        Dest { own: None, frr: None, derived: None }
    }
}

impl<T> Dest<T> {
    /// The one rule: the file's or the CLI's route wins (as a static route with a better
    /// distance would); then the ports' own destinations, which exist as long as the port
    /// has the address; then FRR's (zebra picks an IGP route to a connected subnet when
    /// the link goes down, while the address stays on the interface: it is kept, to take
    /// over should the address go).
    pub(crate) fn selected(&self) -> Option<Selected<'_, T>> {
        if let Some(e) = &self.own {
            return Some(Selected::Route(e));
        }
        if let Some(d) = self.derived {
            return Some(Selected::Derived(d));
        }
        self.frr.as_deref().map(Selected::Route)
    }

    /// The selected route, if a source's route (not a port's destination) is in force.
    pub(crate) fn selected_route(&self) -> Option<&Entry<T>> {
        match self.selected()? {
            Selected::Route(e) => Some(e),
            Selected::Derived(_) => None,
        }
    }

    /// The candidate of `source`.
    pub(crate) fn candidate(&self, source: Source) -> Option<&Entry<T>> {
        match source {
            Source::Own => self.own.as_deref(),
            Source::Frr => self.frr.as_deref(),
        }
    }

    pub(crate) fn derived(&self) -> Option<Derived> {
        self.derived
    }

    fn slot(&mut self, source: Source) -> &mut Option<Box<Entry<T>>> {
        match source {
            Source::Own => &mut self.own,
            Source::Frr => &mut self.frr,
        }
    }

    fn is_empty(&self) -> bool {
        self.own.is_none() && self.frr.is_none() && self.derived.is_none()
    }
}

/// The prefix table of one VRF and family.
pub(crate) type PrefixTable = BTreeMap<Prefix, Dest<RouteConfig>>;

/// How many candidates each source holds.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    own_routes: usize,
    frr_routes: usize,
    own_labels: usize,
    frr_labels: usize,
}

impl Counts {
    fn of(&mut self, source: Source, label: bool) -> &mut usize {
        match (source, label) {
            (Source::Own, false) => &mut self.own_routes,
            (Source::Frr, false) => &mut self.frr_routes,
            (Source::Own, true) => &mut self.own_labels,
            (Source::Frr, true) => &mut self.frr_labels,
        }
    }

    fn track<T>(&mut self, source: Source, label: bool, old: &Option<T>, new: &Option<T>) {
        let n = self.of(source, label);
        *n = *n + usize::from(new.is_some()) - usize::from(old.is_some());
    }
}

/// The routing table; see the module documentation.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rib {
    /// Per VRF (by name; the VPN work adds zebra's table ids), IPv4 then IPv6.
    vrfs: BTreeMap<String, [PrefixTable; 2]>,
    labels: BTreeMap<Label, Dest<LabelConfig>>,
    counts: Counts,
}

fn family(prefix: IpAddr) -> usize {
    usize::from(!prefix.is_ipv4())
}

impl Rib {
    /// The prefix table of `vrf` and one family, if anything was ever put there.
    pub(crate) fn table(&self, vrf: &str, v4: bool) -> Option<&PrefixTable> {
        self.vrfs.get(vrf).map(|t| &t[usize::from(!v4)])
    }

    /// Every prefix table: VRF name, whether IPv4, the table.
    pub(crate) fn tables(&self) -> impl Iterator<Item = (&str, bool, &PrefixTable)> {
        self.vrfs.iter().flat_map(|(vrf, [v4, v6])| [(vrf.as_str(), true, v4), (vrf.as_str(), false, v6)])
    }

    /// The destination `prefix` in `vrf`.
    pub(crate) fn dest(&self, vrf: &str, prefix: Prefix) -> Option<&Dest<RouteConfig>> {
        self.table(vrf, prefix.0.is_ipv4())?.get(&prefix)
    }

    /// The label table.
    pub(crate) fn labels(&self) -> &BTreeMap<Label, Dest<LabelConfig>> {
        &self.labels
    }

    /// The routes in force (the file's, the CLI's, FRR's), of every VRF.
    pub(crate) fn selected_routes(&self) -> impl Iterator<Item = &RouteConfig> {
        self.tables().flat_map(|(_, _, t)| t.values()).filter_map(|d| d.selected_route()).map(|e| &e.item)
    }

    /// The label routes in force.
    pub(crate) fn selected_labels(&self) -> impl Iterator<Item = &LabelConfig> {
        self.labels.values().filter_map(|d| d.selected_route()).map(|e| &e.item)
    }

    /// Sets (or, `None`, removes) the candidate of `source` for `prefix` in `vrf`;
    /// returns the one it replaced.
    pub(crate) fn set_route(
        &mut self,
        vrf: &str,
        prefix: Prefix,
        source: Source,
        entry: Option<Entry<RouteConfig>>,
    ) -> Option<Entry<RouteConfig>> {
        if entry.is_none() && self.dest(vrf, prefix).is_none() {
            return None;
        }
        let tables = match self.vrfs.get_mut(vrf) {
            Some(t) => t,
            None => self.vrfs.entry(vrf.to_string()).or_default(),
        };
        let table = &mut tables[family(prefix.0)];
        let dest = table.entry(prefix).or_default();
        let old = std::mem::replace(dest.slot(source), entry.map(Box::new));
        self.counts.track(source, false, &old, dest.slot(source));
        if dest.is_empty() {
            table.remove(&prefix);
        }
        old.map(|e| *e)
    }

    /// Sets (or removes) the ports' destination at `prefix` in `vrf`; returns the one it
    /// replaced.
    pub(crate) fn set_derived(
        &mut self,
        vrf: &str,
        prefix: Prefix,
        derived: Option<Derived>,
    ) -> Option<Derived> {
        if derived.is_none() && self.dest(vrf, prefix).is_none() {
            return None;
        }
        let table = &mut self.vrfs.entry(vrf.to_string()).or_default()[family(prefix.0)];
        let dest = table.entry(prefix).or_default();
        let old = std::mem::replace(&mut dest.derived, derived);
        if dest.is_empty() {
            table.remove(&prefix);
        }
        old
    }

    /// Sets (or removes) the candidate of `source` for incoming `label`; returns the one
    /// it replaced.
    pub(crate) fn set_label(
        &mut self,
        label: Label,
        source: Source,
        entry: Option<Entry<LabelConfig>>,
    ) -> Option<Entry<LabelConfig>> {
        if entry.is_none() && !self.labels.contains_key(&label) {
            return None;
        }
        let dest = self.labels.entry(label).or_default();
        let old = std::mem::replace(dest.slot(source), entry.map(Box::new));
        self.counts.track(source, true, &old, dest.slot(source));
        if dest.is_empty() {
            self.labels.remove(&label);
        }
        old.map(|e| *e)
    }

    /// How many routes and label routes FRR holds (some may not be in force).
    pub(crate) fn frr_counts(&self) -> (usize, usize) {
        (self.counts.frr_routes, self.counts.frr_labels)
    }

    /// How many candidates of the file, the CLI and FRR it holds.
    pub(crate) fn len(&self) -> usize {
        let c = self.counts;
        c.own_routes + c.frr_routes + c.own_labels + c.frr_labels
    }
}

/// The destinations `config`'s ports and router addresses make, by VRF and prefix: each
/// address is a `Local` host route in its port's VRF and (shorter than a host route) the
/// port's connected subnet, named by the first port that has it; the router's addresses
/// are `Local` in the default VRF.
pub(crate) fn derived_of(config: &Config) -> BTreeMap<(String, Prefix), Derived> {
    let mut out = BTreeMap::new();
    for (i, p) in config.ports.iter().enumerate() {
        for &(a, len) in &p.addresses {
            out.entry((p.vrf.clone(), (a, max_len(a)))).or_insert(Derived::Local);
            if len < max_len(a) {
                let port = PortId::try_from(i).unwrap_or(PortId::MAX);
                out.entry((p.vrf.clone(), (mask(a, len), len))).or_insert(Derived::Connected { port });
            }
        }
    }
    let router = [config.router.v4.map(IpAddr::V4), config.router.v6.map(IpAddr::V6)];
    for a in router.into_iter().flatten() {
        out.entry((DEFAULT_VRF_NAME.to_string(), (a, max_len(a)))).or_insert(Derived::Local);
    }
    out
}
