//! The routes of a running router: what the config file said plus what was changed at
//! runtime and what FRR sent, kept by the control plane as the source of truth for every
//! new [`Fib`].
//!
//! The routes of every source are held in one RIB (`rib`), where one rule picks the route
//! in force at each destination. Every change ([`Tables::change`], [`Tables::reload`],
//! [`Tables::apply_frr`], ...) is checked like the config file checks its routes and
//! staged in one transaction (`txn`); the forwarding tables are made from the result, and
//! only if that succeeds is the change kept. The caller swaps the returned `Fib` in
//! ([`vmpls_fib::FibHandle::store`]), so the data plane moves from one consistent version
//! to the next.
//!
//! Reload semantics: the running routes are brought back to the new file for everything
//! the file owns, as FRR's reload does: every route and label route the file defines is
//! set as the file says (also one deleted or replaced with the CLI since), and routes
//! that came from the file before and are no longer in it are removed. Routes added at
//! runtime for destinations the file does not define stay, as do routes taken over with
//! `replace` that the file no longer defines. Port changes (a port added, removed,
//! renamed, moved to another interface, a new MTU, kind or forced offloads) need a
//! restart and are rejected.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use vmpls_fib::{
    DEFAULT_VRF_NAME, FIRST_UNRESERVED, Fib, IMPLICIT_NULL, Label, LabelAction, LabelRoute, MAX_LABEL,
    MAX_NEXTHOPS, PortId, TtlModel, VrfId,
};

use vmpls_wire::prefix::{mask, max_len};

use crate::PrefixError;
use crate::api::{
    Family, FlushSummary, IpRoute, MplsAction, MplsRoute, Nexthop, PrefixMatch, Protocol, ReloadSummary,
    RouteFilter, RouteSpec, RouteType,
};
use crate::nexthop::{NexthopError, on_subnet, port_index, resolve_port};
use crate::{Config, LabelConfig, LabelConfigAction, NexthopConfig, RouteAction, RouteConfig, nexthop_group};

mod bulk;
mod error;
#[cfg(test)]
mod prop_tests;
mod pw;
mod pw_set;
#[cfg(test)]
mod pw_tests;
mod rib;
mod txn;
mod vpls_set;
pub use bulk::{ShowChunk, ShowCursor};
pub use error::TablesError;
use rib::{Derived, Entry, Rib, Source};
use txn::Txn;

/// A route change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Add; the destination must have no route.
    Add,
    /// Add or replace.
    Replace,
    /// Delete; the destination must have a route (matching the next hops, if given).
    Delete,
}

/// The running routes; see the module documentation.
#[derive(Debug, Clone)]
pub struct Tables {
    file: Config,
    /// The routes of every source, and which is in force ([`rib::Dest::selected`]).
    rib: Rib,
    /// The forwarding tables last made of the routes in force, so that the next change to
    /// a few routes is made on a copy of them in time that does not grow with the table.
    /// Set by every committed change ([`Txn::commit`]).
    built: Option<Fib>,
    /// The pseudowires ([`pw`]).
    pws: pw_set::PwSet,
}

/// A route from FRR, its next hops already on the router's ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrrChange {
    /// Set or remove (`None`) the route for a prefix.
    Route {
        /// VRF name.
        vrf: String,
        /// The prefix (host bits clear).
        prefix: IpAddr,
        /// Its length.
        len: u8,
        /// The route now, and who made it.
        route: Option<(RouteAction, Protocol)>,
    },
    /// Set or remove (`None`) the route for an incoming label.
    Label {
        /// The label.
        label: Label,
        /// The route now, and who made it.
        route: Option<(LabelConfigAction, Protocol)>,
    },
}

/// What [`Tables::apply_frr`] did.
#[derive(Debug)]
pub struct FrrApplied {
    /// The tables to store.
    pub fib: Fib,
    /// Changes refused, each with the reason (the rest were applied).
    pub refused: Vec<String>,
}

fn same_route(a: &RouteConfig, b: &RouteConfig) -> bool {
    (&a.vrf, a.prefix, a.len, &a.action, a.ttl_model) == (&b.vrf, b.prefix, b.len, &b.action, b.ttl_model)
}

fn same_label(a: &LabelConfig, b: &LabelConfig) -> bool {
    (a.label, &a.action, a.ttl_model) == (b.label, &b.action, b.ttl_model)
}

/// Parses `address/length`, a bare address (a host route) or `default`.
///
/// # Errors
/// A message saying what was expected.
pub fn parse_prefix(text: &str, family: Family) -> Result<(IpAddr, u8), PrefixError> {
    if text == "default" || text == "all" || text == "any" {
        return Ok(match family {
            Family::Inet6 => (IpAddr::V6(0.into()), 0),
            _ => (IpAddr::V4(0.into()), 0),
        });
    }
    let bad = || PrefixError::Malformed { text: text.to_string() };
    let (addr, len) = match text.split_once('/') {
        Some((a, l)) => {
            let a: IpAddr = a.parse().map_err(|_| bad())?;
            let l: u8 = l.parse().map_err(|_| bad())?;
            (a, l)
        }
        None => {
            let a: IpAddr = text.parse().map_err(|_| bad())?;
            (a, max_len(a))
        }
    };
    if len > max_len(addr) {
        return Err(PrefixError::TooLong { text: text.to_string(), len, max: max_len(addr) });
    }
    Ok((addr, len))
}

/// What a runtime route asked to be shown as (`proto NAME`) is shown as: `None` for
/// `boot`, the default.
fn shown(p: Protocol) -> Result<Option<Protocol>, TablesError> {
    match p {
        Protocol::Boot => Ok(None),
        Protocol::Kernel => {
            Err("proto kernel is for the ports' connected subnets; give another protocol".into())
        }
        p => Ok(Some(p)),
    }
}

fn ttl(propagate: bool) -> TtlModel {
    if propagate { TtlModel::Uniform } else { TtlModel::Pipe }
}

impl Tables {
    /// The tables of a freshly loaded config.
    pub fn new(mut config: Config) -> Tables {
        // The routes move into the tables: the config keeps ports, VRFs and settings, so a
        // table of a million routes is held once.
        let mut rib = Rib::default();
        for r in std::mem::take(&mut config.routes) {
            let (vrf, prefix) = (r.vrf.clone(), (r.prefix, r.len));
            rib.set_route(&vrf, prefix, Source::Own, Some(Entry::new(r, Protocol::Static)));
        }
        for l in std::mem::take(&mut config.labels) {
            rib.set_label(l.label, Source::Own, Some(Entry::new(l, Protocol::Static)));
        }
        for ((vrf, prefix), d) in rib::derived_of(&config) {
            rib.set_derived(&vrf, prefix, Some(d));
        }
        let pws = pw_set::pws_of(&config);
        Tables { file: config, rib, built: None, pws }
    }

    /// The tables of a freshly loaded config and the forwarding tables it describes, built
    /// once for both (the router's start).
    ///
    /// # Errors
    /// As [`Config::build_fib`], with the file's line.
    pub fn built(config: Config) -> Result<(Tables, Fib), crate::ConfigError> {
        let mut fib = config.build_fib()?;
        let (path, pws) = (config.path.clone(), pw_set::pws_of(&config));
        let installed =
            pw_set::install(&pws, &mut fib).and_then(|()| vpls_set::install(&config.vpls, &pws, &mut fib));
        installed.map_err(|source| crate::ConfigError::Build { path, line: None, source })?;
        let mut tables = Tables::new(config);
        tables.built = Some(fib.clone());
        Ok((tables, fib))
    }

    /// Applies a burst of changes from FRR as one table change and returns the tables to
    /// store. A change the tables cannot hold (a label out of range, too many next hops)
    /// is refused alone, with its reason; the others apply.
    ///
    /// # Errors
    /// The tables could not be built (nothing changed).
    pub fn apply_frr(&mut self, changes: Vec<FrrChange>) -> Result<FrrApplied, TablesError> {
        let mut refused = Vec::new();
        let mut txn = Txn::new(self);
        for c in changes {
            match c {
                FrrChange::Route { vrf, prefix, len, route } => {
                    let entry = match route {
                        None => None,
                        // The router follows the kernel's VRFs; zebra may be a moment
                        // ahead of it.
                        Some((_, origin)) if let Err(e) = txn.check_vrf(&vrf) => {
                            refused.push(format!("{prefix}/{len} ({}) in VRF {vrf}: {e}", origin.name()));
                            continue;
                        }
                        Some((action, origin)) => match &action {
                            RouteAction::Forward(nhs)
                                if let Err(e) = check_frr_nexthops(nhs, Some(prefix.is_ipv4())) =>
                            {
                                refused.push(format!("{prefix}/{len} ({}): {e}", origin.name()));
                                None
                            }
                            _ => Some(Entry::new(
                                RouteConfig {
                                    vrf: vrf.clone(),
                                    prefix,
                                    len,
                                    action,
                                    ttl_model: TtlModel::Uniform,
                                    line: 0,
                                },
                                origin,
                            )),
                        },
                    };
                    txn.set_route(&vrf, (prefix, len), Source::Frr, entry);
                }
                FrrChange::Label { label, route } => {
                    let entry = match route {
                        None => None,
                        Some((action, origin)) => {
                            let nhs_ok = match &action {
                                LabelConfigAction::Forward(nhs) => check_frr_nexthops(nhs, None),
                                LabelConfigAction::PopAndLookup { vrf } => txn.check_vrf(vrf),
                            };
                            let range_ok = if (FIRST_UNRESERVED..=MAX_LABEL).contains(&label) {
                                Ok(())
                            } else {
                                Err(format!("incoming label {label} is reserved or out of range").into())
                            };
                            match range_ok.and(nhs_ok) {
                                Err(e) => {
                                    refused.push(format!("label {label} ({}): {e}", origin.name()));
                                    None
                                }
                                Ok(()) => Some(Entry::new(
                                    LabelConfig { label, action, ttl_model: TtlModel::Uniform, line: 0 },
                                    origin,
                                )),
                            }
                        }
                    };
                    txn.set_label(label, Source::Frr, entry);
                }
            }
        }
        let e = match txn.fib() {
            Ok(fib) => {
                txn.commit(&fib);
                return Ok(FrrApplied { fib, refused });
            }
            Err(e) => e,
        };
        // Something the checks above did not foresee: take the burst back, then apply it
        // in halves, refusing only what the tables refuse, so that the rest (a reroute,
        // say) is not lost with it, and a few bad changes in a table walk of thousands
        // cost a few builds each, not one build per change.
        let mut changed: Vec<FrrChange> =
            txn.rollback().into_iter().filter_map(|s| s.into_frr_change()).collect();
        if changed.len() <= 1 {
            return Err(e);
        }
        let second = changed.split_off(changed.len() / 2);
        let mut fib = None;
        for half in [changed, second] {
            let what = half.len();
            match self.apply_frr(half) {
                Ok(applied) => {
                    refused.extend(applied.refused);
                    fib = Some(applied.fib);
                }
                Err(e) if what == 1 => refused.push(e.message()),
                Err(e) => return Err(e),
            }
        }
        match fib {
            Some(fib) => Ok(FrrApplied { fib, refused }),
            None => Txn::new(self).finish().map(|fib| FrrApplied { fib, refused }),
        }
    }

    /// How many routes and label routes from FRR are held (some may be shadowed by the
    /// file's or the CLI's, or by the ports' own destinations).
    pub fn frr_counts(&self) -> (usize, usize) {
        self.rib.frr_counts()
    }

    /// Per VRF (by name), how many IPv4 and IPv6 destinations have a route in force.
    pub fn route_counts(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (vrf, _, t) in self.rib.tables() {
            *out.entry(vrf.to_string()).or_default() +=
                t.values().filter(|d| d.selected().is_some()).count() as u64;
        }
        out
    }

    /// FRR mode: follows the kernel's VRFs (`kernel`, by name). Those the tables lack are
    /// added after the others (which keep their ids); those that are not the kernel's and
    /// hold no port and no route are dropped. Returns the tables to store, `None` if the
    /// VRFs stay as they are.
    ///
    /// # Errors
    /// The tables could not be built with them (nothing changed).
    pub fn set_kernel_vrfs(&mut self, kernel: &[String]) -> Result<Option<Fib>, TablesError> {
        let unused = |v: &String| {
            !self.file.ports.iter().any(|p| &p.vrf == v)
                && [true, false].iter().all(|&v4| self.rib.table(v, v4).is_none_or(|t| t.is_empty()))
        };
        let mut vrfs: Vec<String> = self
            .file
            .vrfs
            .iter()
            .enumerate()
            .filter(|(i, v)| *i == 0 || kernel.contains(v) || !unused(v))
            .map(|(_, v)| v.clone())
            .collect();
        for v in kernel {
            if !vrfs.contains(v) {
                vrfs.push(v.clone());
            }
        }
        if vrfs == self.file.vrfs {
            return Ok(None);
        }
        let mut file = self.file.clone();
        file.vrfs = vrfs;
        let mut txn = Txn::new(self);
        txn.set_file(file);
        txn.finish().map(Some)
    }

    /// Sets the addresses the kernel has on each port (in order) and on the router's
    /// loopback (FRR mode: the kernel owns them), and returns the tables to store.
    ///
    /// # Errors
    /// The tables could not be built with them (nothing changed).
    pub fn set_kernel_addresses(
        &mut self,
        ports: Vec<Vec<(IpAddr, u8)>>,
        router: (Option<std::net::Ipv4Addr>, Option<std::net::Ipv6Addr>),
    ) -> Result<Fib, TablesError> {
        // The config holds ports, VRFs and settings (its routes are in the RIB): a copy
        // costs what the ports do.
        let mut file = self.file.clone();
        for (p, a) in file.ports.iter_mut().zip(ports) {
            p.addresses = a;
        }
        (file.router.v4, file.router.v6) = router;
        let mut txn = Txn::new(self);
        txn.set_file(file);
        txn.finish()
    }

    /// The config file as last loaded: its ports, VRFs and settings; its routes are in the
    /// tables ([`Tables::running_config`] has them).
    pub fn config(&self) -> &Config {
        &self.file
    }

    /// The running routes as a config: the file's ports and VRFs with the routes in force.
    pub fn running_config(&self) -> Config {
        Config {
            routes: self.rib.selected_routes().cloned().collect(),
            labels: self.rib.selected_labels().cloned().collect(),
            ..self.file.clone()
        }
    }

    /// The forwarding tables of the routes in force.
    ///
    /// # Errors
    /// A message if the tables reject an entry (checks before catch what they can).
    pub fn build_fib(&self) -> Result<Fib, TablesError> {
        let mut fib = self
            .file
            .build_fib_with(self.rib.selected_routes(), self.rib.selected_labels())
            .map_err(TablesError::Build)?;
        pw_set::install(&self.pws, &mut fib)
            .and_then(|()| vpls_set::install(&self.file.vpls, &self.pws, &mut fib))
            .map_err(|source| TablesError::Fib { what: "pseudowires".into(), source })?;
        Ok(fib)
    }

    /// The id the forwarding tables give VRF `name`: its place in the config's list.
    fn vrf_id(&self, name: &str) -> Result<VrfId, vmpls_fib::FibError> {
        let id = self.file.vrfs.iter().position(|v| v == name).and_then(|i| VrfId::try_from(i).ok());
        id.ok_or(vmpls_fib::FibError::UnknownVrf { vrf: VrfId::MAX })
    }

    fn label_route(&self, l: &LabelConfig) -> Result<LabelRoute, vmpls_fib::FibError> {
        let action = match &l.action {
            LabelConfigAction::Forward(nhs) => LabelAction::Forward(nexthop_group(nhs)?),
            LabelConfigAction::PopAndLookup { vrf } => LabelAction::PopAndLookup { vrf: self.vrf_id(vrf)? },
        };
        Ok(LabelRoute::new(action, l.ttl_model))
    }

    /// Adds, replaces or deletes a route, and returns the forwarding tables to store. On
    /// error nothing changed.
    ///
    /// # Errors
    /// What is wrong with the route, in a sentence for the CLI's `Error: ...`.
    pub fn change(&mut self, change: Change, spec: &RouteSpec) -> Result<Fib, TablesError> {
        let mut txn = Txn::new(self);
        Tables::stage_change(&mut txn, change, spec)?;
        txn.finish()
    }

    /// Applies the difference between the config loaded before and `new` (see the module
    /// documentation) and returns the forwarding tables to store. On error nothing
    /// changed.
    ///
    /// # Errors
    /// Ports or the router's name or socket changed ([`ErrorKind::RestartNeeded`]), or a
    /// route added at runtime does not fit the new ports' addresses or VRFs.
    pub fn reload(&mut self, new: Config) -> Result<(Fib, ReloadSummary), TablesError> {
        if let Some(why) = restart_needed(&self.file, &new) {
            return Err(TablesError::RestartNeeded { why });
        }
        let mut new = new;
        if new.frr.is_some() {
            // The kernel owns the addresses; the file has none to compare.
            for (n, o) in new.ports.iter_mut().zip(&self.file.ports) {
                n.addresses.clone_from(&o.addresses);
            }
            (new.router.v4, new.router.v6) = (self.file.router.v4, self.file.router.v6);
        }
        let mut sum = ReloadSummary { config: new.path.display().to_string(), ..ReloadSummary::default() };
        sum.other_changed = self.file.vrfs != new.vrfs
            || (self.file.router.v4, self.file.router.v6) != (new.router.v4, new.router.v6)
            || self.file.ports.iter().zip(&new.ports).any(|(a, b)| {
                (&a.vrf, &a.addresses, self.file.port_label_acceptance(a))
                    != (&b.vrf, &b.addresses, new.port_label_acceptance(b))
            });
        let routes = std::mem::take(&mut new.routes);
        let labels = std::mem::take(&mut new.labels);
        let mut txn = Txn::new(self);
        txn.set_file(new);
        // What the file owns is brought back to the file, whatever the CLI did to it;
        // the routes the CLI added (or took over with `replace`) and the file does not
        // have stay.
        let in_file: BTreeSet<(&str, IpAddr, u8)> =
            routes.iter().map(|r| (r.vrf.as_str(), r.prefix, r.len)).collect();
        let gone: Vec<(String, IpAddr, u8)> = txn
            .rib
            .tables()
            .flat_map(|(vrf, _, t)| t.iter().map(move |(k, d)| (vrf, k, d)))
            .filter(|(vrf, (a, l), d)| {
                d.candidate(Source::Own).is_some_and(|e| e.origin == Protocol::Static)
                    && !in_file.contains(&(vrf, *a, *l))
            })
            .map(|(vrf, (a, l), _)| (vrf.to_string(), *a, *l))
            .collect();
        drop(in_file);
        sum.routes_removed = gone.len() as u64;
        for (vrf, a, l) in gone {
            txn.set_route(&vrf, (a, l), Source::Own, None);
        }
        for r in routes {
            let (vrf, prefix) = (r.vrf.clone(), (r.prefix, r.len));
            match txn.rib.dest(&vrf, prefix).and_then(|d| d.candidate(Source::Own)) {
                Some(e) if e.origin == Protocol::Static && same_route(&e.item, &r) => continue,
                Some(_) => sum.routes_changed += 1,
                None => sum.routes_added += 1,
            }
            txn.set_route(&vrf, prefix, Source::Own, Some(Entry::new(r, Protocol::Static)));
        }
        let in_file: BTreeSet<Label> = labels.iter().map(|l| l.label).collect();
        let gone: Vec<Label> = txn
            .rib
            .labels()
            .iter()
            .filter(|(k, d)| {
                d.candidate(Source::Own).is_some_and(|e| e.origin == Protocol::Static) && !in_file.contains(k)
            })
            .map(|(k, _)| *k)
            .collect();
        sum.labels_removed = gone.len() as u64;
        for l in gone {
            txn.set_label(l, Source::Own, None);
        }
        for l in labels {
            match txn.rib.labels().get(&l.label).and_then(|d| d.candidate(Source::Own)) {
                Some(e) if e.origin == Protocol::Static && same_label(&e.item, &l) => continue,
                Some(_) => sum.labels_changed += 1,
                None => sum.labels_added += 1,
            }
            txn.set_label(l.label, Source::Own, Some(Entry::new(l, Protocol::Static)));
        }
        // Routes added at runtime must still make sense with the new ports and VRFs.
        for (_, _, t) in txn.rib.tables() {
            for e in
                t.values().filter_map(|d| d.candidate(Source::Own)).filter(|e| e.origin == Protocol::Boot)
            {
                let shown = txn.show_ip(&e.item, e.proto());
                let family = if e.item.prefix.is_ipv4() { Family::Inet } else { Family::Inet6 };
                txn.resolve_ip(&shown, family, false).map_err(|e| TablesError::RuntimeRoute {
                    what: format!("to {}", shown.dst),
                    source: Box::new(e),
                })?;
            }
        }
        let own_labels = txn.rib.labels().values().filter_map(|d| d.candidate(Source::Own));
        for e in own_labels.filter(|e| e.origin == Protocol::Boot) {
            let shown = txn.show_label(&e.item, e.proto());
            txn.resolve_label(&shown, false).map_err(|e| TablesError::RuntimeRoute {
                what: format!("for label {}", shown.label),
                source: Box::new(e),
            })?;
        }
        let fib = txn.finish()?;
        Ok((fib, sum))
    }

    /// Removes the routes of one table that `filter` selects (`route flush`, as
    /// iproute2's `ip route flush SELECTOR`): the file's and the CLI's. A reload brings
    /// back those the file owns. Connected subnets stay (they are there as long as the
    /// port has the address), and so do routes from FRR: zebra owns them, would not know
    /// they were gone, and would not send them again; they are counted as kept. On error
    /// nothing changed.
    ///
    /// # Errors
    /// An unknown VRF or port, `proto kernel`, or tables that cannot be built.
    pub fn flush(
        &mut self,
        family: Family,
        filter: &RouteFilter,
    ) -> Result<(Fib, FlushSummary), TablesError> {
        if filter.proto == Some(Protocol::Kernel) {
            return Err("connected subnets (proto kernel) cannot be flushed: they exist as long as the port has the address".into());
        }
        if let Some(dev) = &filter.dev
            && !self.file.ports.iter().any(|p| &p.name == dev)
        {
            return Err(format!("no port \"{dev}\"; {}", self.port_list()).into());
        }
        let dev = filter.dev.as_ref().and_then(|d| self.file.ports.iter().position(|p| &p.name == d));
        let nexthops_match = |nhs: &[NexthopConfig]| {
            dev.is_none_or(|d| nhs.iter().any(|n| usize::from(n.port) == d))
                && filter.via.is_none_or(|v| nhs.iter().any(|n| n.via == Some(v)))
        };
        let mut sum = FlushSummary::default();
        // The forwarding tables are made once, whatever the number of routes flushed.
        let mut txn = Txn::new(self);
        if family == Family::Mpls {
            if filter.vrf.is_some() {
                return Err("label routes are not per VRF: drop `vrf`".into());
            }
            let label = match &filter.dst {
                None => None,
                Some(l) => Some(l.parse::<Label>().map_err(|_| format!("\"{l}\" is not a label"))?),
            };
            let selects = |k: &Label, e: &Entry<LabelConfig>| {
                let nhs: &[NexthopConfig] = match &e.item.action {
                    LabelConfigAction::Forward(nhs) => nhs,
                    LabelConfigAction::PopAndLookup { .. } => &[],
                };
                label.is_none_or(|l| l == *k)
                    && filter.proto.is_none_or(|p| p == e.proto())
                    && (filter.dev.is_none() && filter.via.is_none() || nexthops_match(nhs))
            };
            let mut removed = Vec::new();
            for (k, d) in txn.rib.labels() {
                if let Some(e) = d.candidate(Source::Own).filter(|e| selects(k, e)) {
                    removed.push(*k);
                    sum.from_file += u64::from(e.origin == Protocol::Static);
                }
                sum.frr_kept += u64::from(d.candidate(Source::Frr).is_some_and(|e| selects(k, e)));
            }
            sum.flushed = removed.len() as u64;
            for k in removed {
                txn.set_label(k, Source::Own, None);
            }
        } else {
            let vrf = filter.vrf.as_deref().unwrap_or(DEFAULT_VRF_NAME);
            if vrf != "all" {
                txn.check_vrf(vrf)?;
            }
            let dst = match &filter.dst {
                None => None,
                Some(d) => Some(parse_prefix(d, family)?),
            };
            let selects = |(a, len): &(IpAddr, u8), e: &Entry<RouteConfig>| {
                let nhs: &[NexthopConfig] = match &e.item.action {
                    RouteAction::Forward(nhs) => nhs,
                    RouteAction::Blackhole | RouteAction::Reject(_) => &[],
                };
                dst.is_none_or(|(net, l)| match filter.dst_match {
                    PrefixMatch::Exact => (*a, *len) == (net, l),
                    PrefixMatch::Root => *len >= l && on_subnet(net, l, *a),
                    PrefixMatch::Match => *len <= l && on_subnet(*a, *len, net),
                }) && filter.proto.is_none_or(|p| p == e.proto())
                    && (filter.dev.is_none() && filter.via.is_none() || nexthops_match(nhs))
            };
            let mut removed = Vec::new();
            let tables = txn
                .rib
                .tables()
                .filter(|(v, v4, _)| (vrf == "all" || *v == vrf) && *v4 == (family == Family::Inet));
            for (v, _, t) in tables {
                for (k, d) in t {
                    if let Some(e) = d.candidate(Source::Own).filter(|e| selects(k, e)) {
                        removed.push((v.to_string(), *k));
                        sum.from_file += u64::from(e.origin == Protocol::Static);
                    }
                    sum.frr_kept += u64::from(d.candidate(Source::Frr).is_some_and(|e| selects(k, e)));
                }
            }
            sum.flushed = removed.len() as u64;
            for (v, k) in removed {
                txn.set_route(&v, k, Source::Own, None);
            }
        }
        let fib = txn.finish()?;
        Ok((fib, sum))
    }

    /// The routes of one table, as `route-show` returns them: for `inet`/`inet6`, the
    /// connected subnets and the routes of `vrf` (default "default") by prefix; for
    /// `mpls`, the label routes by label.
    ///
    /// # Errors
    /// An unknown VRF.
    pub fn show(&self, family: Family, vrf: Option<&str>) -> Result<serde_json::Value, TablesError> {
        let chunk = self.show_chunk(family, vrf, None, None, usize::MAX)?;
        serde_json::to_value(chunk.rows).map_err(|e| TablesError::Invalid(e.to_string()))
    }

    /// The route a packet to `addr` in `vrf` (default "default") would take: the longest
    /// prefix that holds it, connected subnets included (`route get`).
    ///
    /// # Errors
    /// An unknown VRF, or no route.
    pub fn get(&self, addr: IpAddr, vrf: Option<&str>) -> Result<IpRoute, TablesError> {
        let vrf = vrf.unwrap_or(DEFAULT_VRF_NAME);
        self.check_vrf(vrf)?;
        self.longest_match(addr, vrf).ok_or_else(|| TablesError::NoRoute { addr, vrf: vrf.to_string() })
    }

    /// Whether `r` is, word for word, the connected route of one of the ports (as
    /// `route show` prints it: the subnet, `dev PORT`, nothing else).
    fn is_connected_route(&self, r: &IpRoute, family: Family) -> bool {
        let Ok(key) = parse_prefix(&r.dst, family) else { return false };
        let [n] = r.nexthops.as_slice() else { return false };
        let port = match self.rib.dest(&r.vrf, key).and_then(|d| d.derived()) {
            Some(Derived::Connected { port, .. }) => port,
            _ => return false,
        };
        r.kind == RouteType::Unicast
            && n.gateway.is_none()
            && n.labels.is_empty()
            && n.dev.as_deref() == Some(self.file.ports[usize::from(port)].name.as_str())
    }

    fn port_name(&self, id: PortId) -> String {
        self.file.ports.get(usize::from(id)).map_or_else(|| format!("port{id}"), |p| p.name.clone())
    }

    fn show_nexthops(&self, nhs: &[NexthopConfig]) -> Vec<Nexthop> {
        nhs.iter()
            .map(|n| Nexthop {
                gateway: n.via,
                dev: Some(self.port_name(n.port)),
                labels: n.labels.clone(),
                weight: n.weight,
            })
            .collect()
    }

    fn show_ip(&self, r: &RouteConfig, origin: Protocol) -> IpRoute {
        let (kind, nexthops) = match &r.action {
            RouteAction::Blackhole => (RouteType::Blackhole, Vec::new()),
            RouteAction::Reject(r) => (RouteType::from(*r), Vec::new()),
            RouteAction::Forward(nhs) => (RouteType::Unicast, self.show_nexthops(nhs)),
        };
        IpRoute {
            dst: format!("{}/{}", r.prefix, r.len),
            vrf: r.vrf.clone(),
            kind,
            nexthops,
            ttl_propagate: r.ttl_model == TtlModel::Uniform,
            protocol: origin,
            prefsrc: None,
        }
    }

    fn show_label(&self, l: &LabelConfig, origin: Protocol) -> MplsRoute {
        let (action, nexthops, vrf) = match &l.action {
            LabelConfigAction::Forward(nhs) => (MplsAction::Forward, self.show_nexthops(nhs), None),
            LabelConfigAction::PopAndLookup { vrf } => (MplsAction::Lookup, Vec::new(), Some(vrf.clone())),
        };
        MplsRoute {
            label: l.label,
            action,
            nexthops,
            vrf,
            ttl_propagate: l.ttl_model == TtlModel::Uniform,
            protocol: origin,
        }
    }

    fn check_vrf(&self, vrf: &str) -> Result<(), TablesError> {
        if self.file.vrfs.iter().any(|v| v == vrf) {
            Ok(())
        } else {
            Err(TablesError::UnknownVrf { vrf: vrf.to_string(), defined: self.file.vrfs.join(", ") })
        }
    }

    /// A requested prefix route, checked like the config's `[[route]]`.
    fn resolve_ip(&self, r: &IpRoute, family: Family, delete: bool) -> Result<RouteConfig, TablesError> {
        let (addr, len) = parse_prefix(&r.dst, family)?;
        if addr.is_ipv4() != (family == Family::Inet) {
            let (is, want) = if addr.is_ipv4() { ("IPv4", "IPv6") } else { ("IPv6", "IPv4") };
            return Err(format!(
                "{} is an {is} prefix, but the route is {want} (drop -4/-6 or fix the prefix)",
                r.dst
            )
            .into());
        }
        let net = mask(addr, len);
        if net != addr {
            return Err(format!("{addr}/{len} has host bits set; did you mean {net}/{len}?").into());
        }
        self.check_vrf(&r.vrf)?;
        let what = format!("{net}/{len}");
        if !delete {
            match self.rib.dest(&r.vrf, (net, len)).and_then(|d| d.derived()) {
                Some(Derived::Connected { port, .. }) => {
                    return Err(format!(
                        "{what} is the connected subnet of port \"{}\"; a route cannot replace it",
                        self.port_name(port)
                    )
                    .into());
                }
                Some(Derived::Local) => {
                    return Err(format!(
                        "{what} is one of this router's own addresses; a route cannot replace it"
                    )
                    .into());
                }
                None => {}
            }
        }
        let action = match r.kind {
            RouteType::Blackhole | RouteType::Unreachable | RouteType::Prohibit => {
                if !r.nexthops.is_empty() {
                    return Err(format!("a {} route takes no next hop", r.kind.name()).into());
                }
                r.kind.reject().map_or(RouteAction::Blackhole, RouteAction::Reject)
            }
            RouteType::Unicast => {
                if r.nexthops.is_empty() {
                    if delete {
                        // Delete by destination only.
                        RouteAction::Blackhole
                    } else {
                        return Err(format!(
                            "the route to {what} has no next hop: add `via ADDRESS` and/or `dev PORT` (or make it `blackhole`)"
                        ).into());
                    }
                } else {
                    RouteAction::Forward(self.resolve_nexthops(&r.nexthops, false, Some(addr.is_ipv4()))?)
                }
            }
        };
        Ok(RouteConfig {
            vrf: r.vrf.clone(),
            prefix: net,
            len,
            action,
            ttl_model: ttl(r.ttl_propagate),
            line: 0,
        })
    }

    /// A requested label route, checked like the config's `[[label]]`.
    fn resolve_label(&self, m: &MplsRoute, delete: bool) -> Result<LabelConfig, TablesError> {
        if m.label < FIRST_UNRESERVED {
            return Err(format!(
                "label {} is reserved (0-15); incoming labels are {FIRST_UNRESERVED} to {MAX_LABEL}",
                m.label
            )
            .into());
        }
        if m.label > MAX_LABEL {
            return Err(
                format!("label {} is out of range; labels are 0 to {MAX_LABEL} (20 bits)", m.label).into()
            );
        }
        let action = match m.action {
            MplsAction::Lookup => {
                if !m.nexthops.is_empty() {
                    return Err("pop-and-lookup takes no next hop".into());
                }
                let vrf = m.vrf.clone().unwrap_or_else(|| DEFAULT_VRF_NAME.to_string());
                self.check_vrf(&vrf)?;
                LabelConfigAction::PopAndLookup { vrf }
            }
            MplsAction::Forward => {
                if m.vrf.is_some() {
                    return Err("vrf applies only to a label route without next hop (pop, then route the packet in that VRF)".into());
                }
                if m.nexthops.is_empty() && !delete {
                    return Err(format!("the route for label {} has no next hop", m.label).into());
                }
                LabelConfigAction::Forward(self.resolve_nexthops(&m.nexthops, true, None)?)
            }
        };
        Ok(LabelConfig { label: m.label, action, ttl_model: ttl(m.ttl_propagate), line: 0 })
    }

    fn resolve_nexthops(
        &self,
        nhs: &[Nexthop],
        label: bool,
        ipv4_payload: Option<bool>,
    ) -> Result<Vec<NexthopConfig>, TablesError> {
        if nhs.len() > MAX_NEXTHOPS {
            return Err(format!("{} next hops; at most {MAX_NEXTHOPS} are allowed", nhs.len()).into());
        }
        nhs.iter().map(|n| self.resolve_nexthop(n, label, ipv4_payload)).collect()
    }

    fn port_list(&self) -> String {
        let names: Vec<&str> = self.file.ports.iter().map(|p| p.name.as_str()).collect();
        if names.is_empty() {
            "the router has no ports".into()
        } else {
            format!("ports are: {}", names.join(", "))
        }
    }

    /// One next hop: the port by name or by the gateway's subnet, the gateway on it, the
    /// labels (`ipv4_payload` as in [`crate::check_out_stack`]), the weight.
    fn resolve_nexthop(
        &self,
        n: &Nexthop,
        label: bool,
        ipv4_payload: Option<bool>,
    ) -> Result<NexthopConfig, TablesError> {
        let ports = &self.file.ports;
        let port = match &n.dev {
            None => None,
            Some(name) => Some(
                port_index(ports, name)
                    .ok_or_else(|| format!("no port named \"{name}\" ({})", self.port_list()))?,
            ),
        };
        if let Some(a) = n.gateway
            && (a.is_unspecified() || a.is_multicast() || a == IpAddr::V4(std::net::Ipv4Addr::BROADCAST))
        {
            return Err(format!("{a} cannot be a gateway (unspecified, multicast or broadcast)").into());
        }
        if n.gateway.is_none() && port.is_some() && label {
            return Err("a labelled packet needs a gateway: add `via inet ADDRESS`".into());
        }
        let port = resolve_port(ports, port, n.gateway).map_err(|e| -> TablesError {
            match e {
                NexthopError::NoGatewayNoPort => "a next hop needs `via ADDRESS` and/or `dev PORT`".into(),
                e @ NexthopError::OnManySubnets { .. } => format!("{e}; add `dev PORT` to choose one").into(),
                e => e.to_string().into(),
            }
        })?;
        crate::check_out_stack(&n.labels, ipv4_payload)?;
        if n.weight == 0 {
            return Err("weight 0: weights start at 1".into());
        }
        let labels = if n.labels == [IMPLICIT_NULL] { Vec::new() } else { n.labels.clone() };
        Ok(NexthopConfig { port: port as PortId, via: n.gateway, labels, weight: n.weight })
    }
}

/// What the tables would refuse in the next hops of a route from FRR.
/// `ipv4_payload`: for a prefix route, whether it is IPv4 (for explicit null); `None`
/// for a label route.
fn check_frr_nexthops(nhs: &[NexthopConfig], ipv4_payload: Option<bool>) -> Result<(), TablesError> {
    if nhs.is_empty() {
        return Err("no next hop on a port of this router".into());
    }
    if nhs.len() > MAX_NEXTHOPS {
        return Err(format!("{} next hops; at most {MAX_NEXTHOPS}", nhs.len()).into());
    }
    for n in nhs {
        crate::check_out_stack(&n.labels, ipv4_payload)?;
        if n.weight == 0 {
            return Err("a next hop with weight 0".into());
        }
        if ipv4_payload.is_none() && n.via.is_none() {
            return Err("a label route's next hop needs a gateway".into());
        }
    }
    Ok(())
}

/// Why `new` cannot be applied without a restart, if it cannot.
fn restart_needed(old: &Config, new: &Config) -> Option<String> {
    let limits = old.limits.changes(&new.limits);
    if !limits.is_empty() {
        return Some(format!("[limits] changed: {}; limits apply when the router starts", limits.join(", ")));
    }
    if old.router.name != new.router.name {
        return Some(format!("router.name changed (\"{}\" -> \"{}\")", old.router.name, new.router.name));
    }
    if old.frr != new.frr {
        return Some("[frr] changed".into());
    }
    if old.pseudowires != new.pseudowires {
        return Some("[[pseudowire]] changed".into());
    }
    if old.vpls != new.vpls {
        return Some("[[vpls]] changed".into());
    }
    if old.router.control_socket != new.router.control_socket {
        return Some("router.control-socket changed".into());
    }
    if old.router.fast_path != new.router.fast_path {
        return Some(format!(
            "router.fast-path changed (\"{}\" -> \"{}\")",
            old.router.fast_path.name(),
            new.router.fast_path.name()
        ));
    }
    if old.router.poll != new.router.poll {
        return Some(format!(
            "router.poll changed (\"{}\" -> \"{}\")",
            old.router.poll.name(),
            new.router.poll.name()
        ));
    }
    if old.router.cpus != new.router.cpus {
        let list = |c: &Config| c.router.cpus.as_ref().map_or("any".to_string(), |l| format!("\"{l}\""));
        return Some(format!("router.cpus changed ({} -> {})", list(old), list(new)));
    }
    let names = |c: &Config| c.ports.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
    if names(old) != names(new) {
        return Some(format!(
            "the ports changed ([{}] -> [{}])",
            names(old).join(", "),
            names(new).join(", ")
        ));
    }
    for (a, b) in old.ports.iter().zip(&new.ports) {
        if a.interface != b.interface {
            return Some(format!(
                "port \"{}\" moved from interface {} to {}",
                a.name, a.interface, b.interface
            ));
        }
        if a.netns != b.netns {
            return Some(format!(
                "the interface of port \"{}\" moved to another network namespace ({} -> {})",
                a.name,
                a.netns.as_deref().unwrap_or("the router's"),
                b.netns.as_deref().unwrap_or("the router's")
            ));
        }
        if a.mtu != b.mtu {
            return Some(format!("the MTU of port \"{}\" changed", a.name));
        }
        if a.kind != b.kind {
            return Some(format!("the kind of port \"{}\" changed", a.name));
        }
        if a.offloads != b.offloads {
            return Some(format!("the offloads of port \"{}\" changed", a.name));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::api::RouteType;

    const PE1: &str = r#"
[router]
name = "pe1"
addresses = ["198.18.255.1", "2001:db8:ff::1"]

[[port]]
name = "ce1"
interface = "pe1-ce1"
addresses = ["198.18.1.1/24", "2001:db8:1::1/64"]

[[port]]
name = "core"
interface = "pe1-p"
addresses = ["198.18.10.1/24", "2001:db8:10::1/64"]

[[route]]
prefix = "198.18.2.0/24"
push = [1002]
via = "198.18.10.2"
port = "core"

[[label]]
in = 2001
action = "pop"
"#;

    fn tables(text: &str) -> Tables {
        Tables::new(Config::from_str(text, Path::new("pe1.toml")).unwrap())
    }

    fn ip_route(dst: &str, nhs: Vec<Nexthop>) -> IpRoute {
        IpRoute {
            dst: dst.into(),
            vrf: "default".into(),
            kind: RouteType::Unicast,
            nexthops: nhs,
            ttl_propagate: true,
            protocol: Protocol::Boot,
            prefsrc: None,
        }
    }

    fn nh(via: &str, dev: Option<&str>, labels: &[u32]) -> Nexthop {
        Nexthop {
            gateway: Some(via.parse().unwrap()),
            dev: dev.map(Into::into),
            labels: labels.to_vec(),
            weight: 1,
        }
    }

    fn lookup_labels(fib: &Fib, dst: &str) -> Option<Vec<u32>> {
        match &fib.vrfs[0].lookup(dst.parse().unwrap())?.target() {
            vmpls_fib::RouteTarget::Forward(g) => Some(g.nexthops()[0].labels.clone()),
            _ => None,
        }
    }

    #[test]
    fn the_kernels_vrfs_join_the_tables_and_unused_ones_leave() {
        let mut t = tables(PE1);
        let names = |t: &Tables| t.config().vrfs.clone();
        let fib = t.set_kernel_vrfs(&["red".into(), "blue".into()]).unwrap().expect("new VRFs");
        assert_eq!(names(&t), ["default", "red", "blue"]);
        assert_eq!(fib.vrfs.len(), 3);
        assert!(t.set_kernel_vrfs(&["red".into(), "blue".into()]).unwrap().is_none(), "nothing changed");
        // A route in red keeps it while the kernel's red is gone; blue, empty, leaves.
        let mut r = ip_route("198.18.3.0/24", vec![nh("198.18.10.2", Some("core"), &[100])]);
        r.vrf = "red".into();
        t.change(Change::Add, &RouteSpec::Inet(r.clone())).unwrap();
        let fib = t.set_kernel_vrfs(&[]).unwrap().expect("blue leaves");
        assert_eq!(names(&t), ["default", "red"]);
        assert!(fib.vrfs[1].lookup("198.18.3.1".parse().unwrap()).is_some(), "red's route forwards on");
        assert!(fib.vrfs[0].lookup("198.18.2.1".parse().unwrap()).is_some(), "the default VRF's too");
        t.change(Change::Delete, &RouteSpec::Inet(r)).unwrap();
        t.set_kernel_vrfs(&[]).unwrap().expect("red leaves once empty");
        assert_eq!(names(&t), ["default"]);
    }

    #[test]
    fn add_replace_delete_change_the_fib() {
        let mut t = tables(PE1);
        let r = ip_route("198.18.3.0/24", vec![nh("198.18.10.2", None, &[100, 200])]);
        let fib = t.change(Change::Add, &RouteSpec::Inet(r.clone())).unwrap();
        assert_eq!(lookup_labels(&fib, "198.18.3.9"), Some(vec![100, 200]));
        let e = t.change(Change::Add, &RouteSpec::Inet(r.clone())).unwrap_err().message();
        assert!(e.contains("exists") && e.contains("replace"), "{e}");
        let r2 = ip_route("198.18.3.0/24", vec![nh("198.18.10.2", Some("core"), &[300])]);
        let fib = t.change(Change::Replace, &RouteSpec::Inet(r2)).unwrap();
        assert_eq!(lookup_labels(&fib, "198.18.3.9"), Some(vec![300]));
        // The config's route is still there, marked as from the file.
        let shown: Vec<IpRoute> = serde_json::from_value(t.show(Family::Inet, None).unwrap()).unwrap();
        let dsts: Vec<(&str, Protocol)> = shown.iter().map(|r| (r.dst.as_str(), r.protocol)).collect();
        assert_eq!(
            dsts,
            vec![
                ("198.18.1.0/24", Protocol::Kernel),
                ("198.18.2.0/24", Protocol::Static),
                ("198.18.3.0/24", Protocol::Boot),
                ("198.18.10.0/24", Protocol::Kernel)
            ]
        );
        let del = ip_route("198.18.3.0/24", vec![]);
        let fib = t.change(Change::Delete, &RouteSpec::Inet(del.clone())).unwrap();
        assert_eq!(lookup_labels(&fib, "198.18.3.9"), None);
        let e = t.change(Change::Delete, &RouteSpec::Inet(del)).unwrap_err().message();
        assert_eq!(e, "no route to 198.18.3.0/24 in VRF \"default\"");
        // Delete with a next hop that does not match.
        let wrong = ip_route("198.18.2.0/24", vec![nh("198.18.10.2", None, &[999])]);
        let e = t.change(Change::Delete, &RouteSpec::Inet(wrong)).unwrap_err().message();
        assert!(e.contains("encap mpls 1002 via 198.18.10.2 dev core"), "{e}");
    }

    #[test]
    fn bad_routes_are_rejected_with_reasons() {
        let mut t = tables(PE1);
        let cases = [
            (
                ip_route("198.18.3.1/24", vec![nh("198.18.10.2", None, &[])]),
                "host bits set; did you mean 198.18.3.0/24",
            ),
            (ip_route("198.18.3.0/24", vec![nh("198.18.99.2", None, &[])]), "not on any port's subnet"),
            (
                ip_route("198.18.3.0/24", vec![nh("198.18.1.5", Some("core"), &[])]),
                "not on any subnet of port \"core\" (198.18.10.0/24, 2001:db8:10::/64)",
            ),
            (ip_route("198.18.3.0/24", vec![nh("198.18.10.1", None, &[])]), "own address"),
            (
                ip_route("198.18.3.0/24", vec![nh("198.18.10.2", Some("nope"), &[])]),
                "no port named \"nope\" (ports are: ce1, core)",
            ),
            (ip_route("198.18.3.0/24", vec![nh("198.18.10.2", None, &[100, 3])]), "implicit null"),
            (ip_route("198.18.3.0/24", vec![nh("198.18.10.2", None, &[1 << 20])]), "out of range"),
            (
                ip_route("198.18.3.0/24", vec![nh("198.18.10.2", None, &[1002, 1])]),
                "label 1 (router alert) is reserved",
            ),
            (ip_route("198.18.3.0/24", vec![nh("198.18.10.2", None, &[2])]), "whose explicit null is 0"),
            (
                ip_route("198.18.3.0/24", vec![nh("198.18.10.2", None, &(1000..1300).collect::<Vec<_>>())]),
                "300 labels: a router forwards label stacks of at most 32 entries",
            ),
            (
                ip_route("198.18.1.0/24", vec![nh("198.18.10.2", None, &[])]),
                "connected subnet of port \"ce1\"",
            ),
            (ip_route("198.18.255.1/32", vec![nh("198.18.10.2", None, &[])]), "own addresses"),
            (ip_route("198.18.3.0/24", vec![]), "no next hop"),
            (ip_route("2001:db8:3::/64", vec![nh("198.18.10.2", None, &[])]), "is an IPv6 prefix"),
            (
                IpRoute {
                    vrf: "cust".into(),
                    ..ip_route("198.18.3.0/24", vec![nh("198.18.10.2", None, &[])])
                },
                "VRF \"cust\" is not defined",
            ),
        ];
        for (r, want) in cases {
            let e = t.change(Change::Add, &RouteSpec::Inet(r.clone())).unwrap_err().message();
            assert!(e.contains(want), "{r:?}: {e}");
        }
        let m = MplsRoute {
            label: 15,
            action: MplsAction::Lookup,
            nexthops: vec![],
            vrf: None,
            ttl_propagate: true,
            protocol: Protocol::Boot,
        };
        assert!(
            t.change(Change::Add, &RouteSpec::Mpls(m.clone())).unwrap_err().message().contains("reserved")
        );
        let swap_no_gw = MplsRoute {
            label: 100,
            action: MplsAction::Forward,
            nexthops: vec![Nexthop { gateway: None, dev: Some("core".into()), labels: vec![200], weight: 1 }],
            ..m
        };
        assert!(
            t.change(Change::Add, &RouteSpec::Mpls(swap_no_gw.clone()))
                .unwrap_err()
                .message()
                .contains("needs a gateway")
        );
        for (out, want) in [
            (vec![14], "label 14 (OAM alert) is reserved"),
            ((1..=40).map(|l| l + 100).collect(), "40 labels"),
        ] {
            let swap = MplsRoute {
                nexthops: vec![Nexthop {
                    gateway: Some("198.18.10.2".parse().unwrap()),
                    dev: None,
                    labels: out,
                    weight: 1,
                }],
                ..swap_no_gw.clone()
            };
            let e = t.change(Change::Add, &RouteSpec::Mpls(swap)).unwrap_err().message();
            assert!(e.contains(want), "{e}");
        }
        // Nothing changed.
        assert_eq!(
            t.build_fib().unwrap().vrfs[0].v4.len(),
            tables(PE1).build_fib().unwrap().vrfs[0].v4.len()
        );
    }

    #[test]
    fn label_routes_swap_pop_and_lookup() {
        let mut t = tables(PE1);
        let swap = MplsRoute {
            label: 100,
            action: MplsAction::Forward,
            nexthops: vec![nh("198.18.10.2", Some("core"), &[200])],
            vrf: None,
            ttl_propagate: true,
            protocol: Protocol::Boot,
        };
        let fib = t.change(Change::Add, &RouteSpec::Mpls(swap)).unwrap();
        assert!(
            matches!(&fib.labels.get(100).unwrap().action(), vmpls_fib::LabelAction::Forward(g) if g.nexthops()[0].labels == [200])
        );
        let php = MplsRoute {
            label: 101,
            action: MplsAction::Forward,
            nexthops: vec![nh("198.18.10.2", None, &[3])],
            vrf: None,
            ttl_propagate: false,
            protocol: Protocol::Boot,
        };
        let fib = t.change(Change::Add, &RouteSpec::Mpls(php)).unwrap();
        let r = fib.labels.get(101).unwrap();
        assert!(
            matches!(&r.action(), vmpls_fib::LabelAction::Forward(g) if g.nexthops()[0].labels.is_empty())
        );
        assert_eq!(r.ttl_model(), TtlModel::Pipe);
        let shown: Vec<MplsRoute> = serde_json::from_value(t.show(Family::Mpls, None).unwrap()).unwrap();
        assert_eq!(
            shown.iter().map(|m| (m.label, m.protocol)).collect::<Vec<_>>(),
            vec![(100, Protocol::Boot), (101, Protocol::Boot), (2001, Protocol::Static)]
        );
        assert_eq!(shown[2].action, MplsAction::Lookup);
        assert_eq!(shown[2].vrf.as_deref(), Some("default"));
    }

    #[test]
    fn reload_applies_only_the_difference() {
        let mut t = tables(PE1);
        // A runtime route the file does not know stays.
        t.change(
            Change::Add,
            &RouteSpec::Inet(ip_route("198.18.7.0/24", vec![nh("198.18.10.2", None, &[1007])])),
        )
        .unwrap();
        let new_text = PE1.replace("push = [1002]", "push = [1003]")
            + "\n[[route]]\nprefix = \"198.18.8.0/24\"\nblackhole = true\n";
        let new_text = new_text.replace("[[label]]\nin = 2001\naction = \"pop\"\n", "");
        let (fib, sum) = t.reload(Config::from_str(&new_text, Path::new("pe1.toml")).unwrap()).unwrap();
        assert_eq!((sum.routes_added, sum.routes_removed, sum.routes_changed), (1, 0, 1));
        assert_eq!((sum.labels_added, sum.labels_removed, sum.labels_changed), (0, 1, 0));
        assert!(!sum.other_changed);
        assert_eq!(lookup_labels(&fib, "198.18.2.1"), Some(vec![1003]));
        assert_eq!(lookup_labels(&fib, "198.18.7.1"), Some(vec![1007]));
        assert!(fib.labels.get(2001).is_none());
        // The same file again: no change.
        let (_, sum) = t.reload(Config::from_str(&new_text, Path::new("pe1.toml")).unwrap()).unwrap();
        assert!(sum.unchanged(), "{sum}");
    }

    #[test]
    fn reload_brings_back_what_the_file_owns_and_keeps_runtime_routes() {
        let mut t = tables(PE1);
        let file = Config::from_str(PE1, Path::new("pe1.toml")).unwrap();
        // The CLI deletes the file's push route and its pop label, replaces nothing else,
        // and adds a route of its own.
        t.change(Change::Delete, &RouteSpec::Inet(ip_route("198.18.2.0/24", vec![]))).unwrap();
        let pop = MplsRoute {
            label: 2001,
            action: MplsAction::Lookup,
            nexthops: vec![],
            vrf: None,
            ttl_propagate: true,
            protocol: Protocol::Boot,
        };
        t.change(Change::Delete, &RouteSpec::Mpls(pop)).unwrap();
        t.change(
            Change::Add,
            &RouteSpec::Inet(ip_route("198.18.7.0/24", vec![nh("198.18.10.2", None, &[1007])])),
        )
        .unwrap();
        // The same file again: the file's routes are back, the runtime one stays.
        let (fib, sum) = t.reload(file.clone()).unwrap();
        assert_eq!((sum.routes_added, sum.labels_added, sum.routes_removed), (1, 1, 0), "{sum}");
        assert_eq!(lookup_labels(&fib, "198.18.2.1"), Some(vec![1002]));
        assert!(fib.labels.get(2001).is_some());
        assert_eq!(lookup_labels(&fib, "198.18.7.1"), Some(vec![1007]));
        // A file route replaced with the CLI is the file's again.
        t.change(
            Change::Replace,
            &RouteSpec::Inet(ip_route("198.18.2.0/24", vec![nh("198.18.10.2", None, &[999])])),
        )
        .unwrap();
        let (fib, sum) = t.reload(file.clone()).unwrap();
        assert_eq!(sum.routes_changed, 1, "{sum}");
        assert_eq!(lookup_labels(&fib, "198.18.2.1"), Some(vec![1002]));
        assert!(t.reload(file).unwrap().1.unchanged());
    }

    #[test]
    fn reload_applies_a_ports_mpls_setting() {
        let mut t = tables(PE1);
        let off = PE1.replace("interface = \"pe1-p\"\n", "interface = \"pe1-p\"\nmpls = false\n");
        let (fib, sum) = t.reload(Config::from_str(&off, Path::new("pe1.toml")).unwrap()).unwrap();
        assert!(sum.other_changed && !sum.unchanged(), "{sum}");
        assert_eq!(fib.port_accepts_mpls, vec![true, false]);
        // Written out, the default is no change.
        let same = PE1.replace("interface = \"pe1-p\"\n", "interface = \"pe1-p\"\nmpls = true\n");
        let (fib, _) = t.reload(Config::from_str(&same, Path::new("pe1.toml")).unwrap()).unwrap();
        assert_eq!(fib.port_accepts_mpls, vec![true, true]);
        assert!(t.reload(Config::from_str(PE1, Path::new("pe1.toml")).unwrap()).unwrap().1.unchanged());
    }

    #[test]
    fn reload_refuses_port_changes_and_invalid_runtime_routes() {
        let mut t = tables(PE1);
        let moved = PE1.replace("interface = \"pe1-p\"", "interface = \"pe1-q\"");
        let e = t.reload(Config::from_str(&moved, Path::new("pe1.toml")).unwrap()).unwrap_err();
        assert_eq!(e.kind(), crate::api::ErrorKind::RestartNeeded, "{e}");
        assert!(e.message().contains("port \"core\" moved from interface pe1-p to pe1-q"), "{e}");
        // Forced offloads are read when the port opens: a change needs a restart too.
        for offloads in ["{ tso = false }", "{ csum = false, mpls-gso = true }"] {
            let forced = PE1.replace(
                "interface = \"pe1-p\"\n",
                &format!("interface = \"pe1-p\"\noffloads = {offloads}\n"),
            );
            let e = t.reload(Config::from_str(&forced, Path::new("pe1.toml")).unwrap()).unwrap_err();
            assert_eq!(e.kind(), crate::api::ErrorKind::RestartNeeded, "{e}");
            assert!(e.message().contains("the offloads of port \"core\" changed"), "{e}");
        }
        t.change(
            Change::Add,
            &RouteSpec::Inet(ip_route("198.18.7.0/24", vec![nh("198.18.10.2", None, &[1007])])),
        )
        .unwrap();
        let renumbered = PE1
            .replace("198.18.10.1/24", "198.18.11.1/24")
            .replace("via = \"198.18.10.2\"", "via = \"198.18.11.2\"");
        let e = t.reload(Config::from_str(&renumbered, Path::new("pe1.toml")).unwrap()).unwrap_err();
        assert_eq!(e.kind(), crate::api::ErrorKind::Invalid, "{e}");
        assert!(e.message().contains("198.18.7.0/24 (added at runtime)"), "{e}");
        // The running tables are unchanged.
        assert_eq!(lookup_labels(&t.build_fib().unwrap(), "198.18.7.1"), Some(vec![1007]));
        assert_eq!(t.config().ports[1].addresses[0].0, "198.18.10.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn prefixes_parse_like_iproute2() {
        assert_eq!(parse_prefix("default", Family::Inet6).unwrap(), ("::".parse().unwrap(), 0));
        assert_eq!(parse_prefix("198.18.2.7", Family::Inet).unwrap(), ("198.18.2.7".parse().unwrap(), 32));
        assert!(parse_prefix("198.18.2.0/33", Family::Inet).unwrap_err().to_string().contains("/33"));
        assert!(
            parse_prefix("bogus", Family::Inet)
                .unwrap_err()
                .to_string()
                .contains("\"bogus\" is not a prefix")
        );
    }

    fn shown(t: &Tables, family: Family) -> Vec<String> {
        if family == Family::Mpls {
            let l: Vec<MplsRoute> = serde_json::from_value(t.show(family, None).unwrap()).unwrap();
            return l.iter().map(ToString::to_string).collect();
        }
        let l: Vec<IpRoute> = serde_json::from_value(t.show(family, None).unwrap()).unwrap();
        l.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn replace_keeps_the_protocol_it_is_given() {
        let mut t = tables(PE1);
        // `route show`'s line for the file's route, pasted back with `replace`.
        let line = "198.18.2.0/24 encap mpls 1002 via 198.18.10.2 dev core proto static";
        assert!(shown(&t, Family::Inet).iter().any(|l| l == line), "{:?}", shown(&t, Family::Inet));
        let args: Vec<String> = format!("replace {line}").split_whitespace().map(String::from).collect();
        let crate::api::Request::RouteReplace { route } = crate::cli::parse_route(None, &args).unwrap()
        else {
            panic!("not a replace")
        };
        t.change(Change::Replace, &route).unwrap();
        assert!(shown(&t, Family::Inet).iter().any(|l| l == line), "{:?}", shown(&t, Family::Inet));
        // Another protocol is shown as given; the route stays the CLI's: a reload puts
        // the file's back (as changed), and a runtime route with a protocol stays.
        let mut r = ip_route("198.18.2.0/24", vec![nh("198.18.10.2", None, &[1002])]);
        r.protocol = Protocol::Bgp;
        t.change(Change::Replace, &RouteSpec::Inet(r)).unwrap();
        assert!(shown(&t, Family::Inet).iter().any(|l| l.ends_with("dev core proto bgp")));
        let mut own = ip_route("198.18.7.0/24", vec![nh("198.18.10.2", None, &[1007])]);
        own.protocol = Protocol::Ospf;
        t.change(Change::Add, &RouteSpec::Inet(own.clone())).unwrap();
        let mut pop = MplsRoute {
            label: 3001,
            action: MplsAction::Lookup,
            nexthops: vec![],
            vrf: None,
            ttl_propagate: true,
            protocol: Protocol::Static,
        };
        t.change(Change::Replace, &RouteSpec::Mpls(pop.clone())).unwrap();
        assert!(shown(&t, Family::Mpls).contains(&"3001 vrf default proto static".to_string()));
        let (_, sum) = t.reload(Config::from_str(PE1, Path::new("pe1.toml")).unwrap()).unwrap();
        assert_eq!((sum.routes_changed, sum.labels_removed), (1, 0), "{sum}");
        assert!(shown(&t, Family::Inet).contains(&line.to_string()));
        assert!(
            shown(&t, Family::Inet)
                .iter()
                .any(|l| l.starts_with("198.18.7.0/24") && l.ends_with("proto ospf"))
        );
        // `proto kernel` is the connected subnets'.
        pop.protocol = Protocol::Kernel;
        let e = t.change(Change::Replace, &RouteSpec::Mpls(pop)).unwrap_err().message();
        assert!(e.contains("connected subnets"), "{e}");
    }

    fn flush(t: &mut Tables, family: Family, filter: RouteFilter) -> Result<FlushSummary, String> {
        t.flush(family, &filter).map(|(_, s)| s).map_err(|e| e.message())
    }

    #[test]
    fn flush_removes_the_file_and_cli_routes_it_selects() {
        let text = PE1.to_string()
            + r#"
[[vrf]]
name = "cust"

[[route]]
prefix = "198.18.5.0/24"
vrf = "cust"
push = [1005]
via = "198.18.10.2"
port = "core"

[[route]]
prefix = "2001:db8:2::/64"
push = [1002]
via = "2001:db8:10::2"
port = "core"

[[route]]
prefix = "198.18.9.0/24"
blackhole = true
"#;
        let mut t = tables(&text);
        for (dst, labels) in [("198.18.3.0/24", [103]), ("198.18.3.128/25", [104]), ("198.18.0.0/16", [105])]
        {
            t.change(Change::Add, &RouteSpec::Inet(ip_route(dst, vec![nh("198.18.10.2", None, &labels)])))
                .unwrap();
        }
        let dsts = |t: &Tables| -> Vec<String> {
            let l: Vec<IpRoute> = serde_json::from_value(t.show(Family::Inet, None).unwrap()).unwrap();
            l.into_iter().filter(|r| r.protocol != Protocol::Kernel).map(|r| r.dst).collect()
        };
        // root: the prefix and those inside it; exact: the prefix alone; match: those
        // that hold it.
        let root = RouteFilter {
            dst: Some("198.18.3.0/24".into()),
            dst_match: PrefixMatch::Root,
            ..RouteFilter::default()
        };
        assert_eq!(flush(&mut t, Family::Inet, root).unwrap().flushed, 2);
        assert_eq!(dsts(&t), ["198.18.0.0/16", "198.18.2.0/24", "198.18.9.0/24"]);
        let m = RouteFilter {
            dst: Some("198.18.2.0/24".into()),
            dst_match: PrefixMatch::Match,
            ..RouteFilter::default()
        };
        let s = flush(&mut t, Family::Inet, m).unwrap();
        assert_eq!((s.flushed, s.from_file), (2, 1));
        assert_eq!(dsts(&t), ["198.18.9.0/24"]);
        // The default VRF's IPv4 routes only, unless told otherwise; connected subnets stay.
        let s = flush(&mut t, Family::Inet, RouteFilter::default()).unwrap();
        assert_eq!((s.flushed, s.from_file), (1, 1));
        assert!(dsts(&t).is_empty());
        assert!(shown(&t, Family::Inet).iter().any(|l| l.starts_with("198.18.1.0/24 dev ce1 proto kernel")));
        assert_eq!(shown(&t, Family::Inet6).len(), 3, "{:?}", shown(&t, Family::Inet6));
        let cust = RouteFilter { vrf: Some("cust".into()), ..RouteFilter::default() };
        assert_eq!(t.show(Family::Inet, Some("cust")).unwrap().as_array().unwrap().len(), 1);
        let dev = RouteFilter { dev: Some("core".into()), ..cust.clone() };
        let fib = t.flush(Family::Inet, &dev).unwrap().0;
        assert_eq!(t.show(Family::Inet, Some("cust")).unwrap().as_array().unwrap().len(), 0);
        assert!(fib.vrfs[1].lookup("198.18.5.1".parse().unwrap()).is_none(), "gone from the FIB too");
        // Label routes: by label or by protocol; a reload brings the file's back.
        let by_proto = RouteFilter { proto: Some(Protocol::Boot), ..RouteFilter::default() };
        assert_eq!(flush(&mut t, Family::Mpls, by_proto).unwrap().flushed, 0);
        let label = RouteFilter { dst: Some("2001".into()), ..RouteFilter::default() };
        assert_eq!(flush(&mut t, Family::Mpls, label).unwrap().flushed, 1);
        let (fib, sum) = t.reload(Config::from_str(&text, Path::new("pe1.toml")).unwrap()).unwrap();
        assert_eq!((sum.routes_added, sum.labels_added), (3, 1), "{sum}");
        assert_eq!(lookup_labels(&fib, "198.18.2.1"), Some(vec![1002]));
        // Mistakes: an unknown VRF or port, connected subnets, a VRF for labels.
        for (family, f, want) in [
            (
                Family::Inet,
                RouteFilter { vrf: Some("nosuch".into()), ..RouteFilter::default() },
                "not defined",
            ),
            (Family::Inet, RouteFilter { dev: Some("nosuch".into()), ..RouteFilter::default() }, "no port"),
            (
                Family::Inet,
                RouteFilter { proto: Some(Protocol::Kernel), ..RouteFilter::default() },
                "connected",
            ),
            (Family::Mpls, cust, "not per VRF"),
        ] {
            let e = flush(&mut t, family, f).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }
}

#[cfg(test)]
mod frr_tests {
    use super::*;
    use vmpls_fib::RouteTarget;

    fn tables() -> Tables {
        let cfg = Config::from_str(
            "[router]\nname = \"r\"\naddresses = [\"198.18.255.1\"]\n\n[[port]]\nname = \"east\"\ninterface = \"lo\"\naddresses = [\"198.18.11.1/24\"]\n",
            std::path::Path::new("r.toml"),
        )
        .unwrap();
        Tables::new(cfg)
    }

    fn forward(label: Label) -> Vec<NexthopConfig> {
        vec![NexthopConfig {
            port: 0,
            via: Some("198.18.11.2".parse().unwrap()),
            labels: vec![label],
            weight: 1,
        }]
    }

    fn route(prefix: &str, len: u8) -> FrrChange {
        FrrChange::Route {
            vrf: DEFAULT_VRF_NAME.into(),
            prefix: prefix.parse().unwrap(),
            len,
            route: Some((RouteAction::Forward(forward(100)), Protocol::Ospf)),
        }
    }

    /// Every entry of a FIB, to compare versions.
    pub(super) fn flat(f: &Fib) -> Vec<String> {
        let mut out: Vec<String> = f.labels.iter().map(|(l, r)| format!("{l} {r:?}")).collect();
        for (i, v) in f.vrfs.iter().enumerate() {
            out.extend(v.v4.iter().map(|(a, l, r)| format!("{i} {a}/{l} {r:?}")));
            out.extend(v.v6.iter().map(|(a, l, r)| format!("{i} {a}/{l} {r:?}")));
        }
        out
    }

    #[test]
    fn changes_made_in_place_equal_a_full_build_after_any_sequence() {
        // xorshift64*, deterministic.
        let mut seed = 0x007a_b1e5_u64;
        let mut rand = |n: u64| {
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            seed.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
        };
        let mut t = tables();
        for step in 0..300 {
            let mut burst = Vec::new();
            for _ in 0..1 + rand(if step % 50 == 0 { 3000 } else { 8 }) {
                let len = [8u8, 16, 24, 32][rand(4) as usize];
                let a = u32::from(std::net::Ipv4Addr::new(198, 18, rand(16) as u8, rand(4) as u8));
                let prefix = IpAddr::V4((a & (u32::MAX << (32 - u32::from(len)))).into());
                let label = rand(3000) as Label;
                burst.push(match rand(5) {
                    // Routes that come and go, some onto the connected subnet or the
                    // router's own addresses (shadowed), labels some of which are reserved
                    // (refused).
                    0 | 1 => FrrChange::Route {
                        vrf: DEFAULT_VRF_NAME.into(),
                        prefix,
                        len,
                        route: Some((RouteAction::Forward(forward(16 + label)), Protocol::Ospf)),
                    },
                    2 => FrrChange::Route { vrf: DEFAULT_VRF_NAME.into(), prefix, len, route: None },
                    3 => FrrChange::Label {
                        label,
                        route: Some((LabelConfigAction::Forward(forward(16 + label)), Protocol::Ldp)),
                    },
                    _ => FrrChange::Label { label, route: None },
                });
            }
            let mut fib = t.apply_frr(burst).expect("applied").fib;
            if step % 7 == 0 {
                // The CLI's routes win over FRR's, come and go too.
                let dst = format!("198.18.{}.0/24", rand(16));
                let spec = RouteSpec::Inet(IpRoute {
                    dst,
                    vrf: "default".into(),
                    kind: RouteType::Blackhole,
                    nexthops: Vec::new(),
                    ttl_propagate: true,
                    protocol: Protocol::Boot,
                    prefsrc: None,
                });
                let change = if rand(2) == 0 { Change::Replace } else { Change::Delete };
                if let Ok(changed) = t.change(change, &spec) {
                    fib = changed;
                }
            }
            let (a, b) = (flat(&fib), flat(&t.clone().build_fib().unwrap()));
            let only_a: Vec<_> = a.iter().filter(|x| !b.contains(x)).collect();
            let only_b: Vec<_> = b.iter().filter(|x| !a.contains(x)).collect();
            assert!(
                only_a.is_empty() && only_b.is_empty(),
                "step {step}: in place only {only_a:?}, full only {only_b:?}"
            );
        }
    }

    #[test]
    fn a_route_from_frr_to_a_connected_subnet_or_own_address_is_shadowed_not_an_error() {
        let mut t = tables();
        let applied = t
            .apply_frr(vec![route("198.18.11.0", 24), route("198.18.255.1", 32), route("198.18.12.0", 24)])
            .unwrap();
        assert!(applied.refused.is_empty(), "{:?}", applied.refused);
        let v4 = &applied.fib.vrfs[0].v4;
        let target = |a: &str| v4.lookup(a.parse().unwrap()).map(|(_, _, r)| r.target().clone());
        assert!(matches!(target("198.18.11.9"), Some(RouteTarget::Connected { .. })));
        assert!(matches!(target("198.18.255.1"), Some(RouteTarget::Local)));
        assert!(matches!(target("198.18.12.9"), Some(RouteTarget::Forward(_))));
        assert_eq!(t.frr_counts(), (3, 0), "kept, to take over should the subnet go");
    }

    #[test]
    fn a_reload_in_frr_mode_keeps_the_kernels_addresses_and_zebras_routes() {
        let text = "[router]\nname = \"r\"\n\n[frr]\n\n[[port]]\nname = \"east\"\ninterface = \"lo\"\n";
        let path = std::env::temp_dir().join(format!("vmpls-frr-reload-{}.toml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let mut t = Tables::new(Config::from_file(&path).unwrap());
        t.set_kernel_addresses(
            vec![vec![("198.18.11.1".parse().unwrap(), 24)]],
            (Some("198.18.255.1".parse().unwrap()), None),
        )
        .unwrap();
        t.apply_frr(vec![route("198.18.12.0", 24)]).unwrap();
        let (fib, _) = t.reload(Config::from_file(&path).unwrap()).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(fib.is_local_v4("198.18.255.1".parse().unwrap()));
        let v4 = &fib.vrfs[0].v4;
        assert!(matches!(
            v4.lookup("198.18.11.9".parse().unwrap()).map(|r| r.2.target()),
            Some(RouteTarget::Connected { .. })
        ));
        assert!(matches!(
            v4.lookup("198.18.12.9".parse().unwrap()).map(|r| r.2.target()),
            Some(RouteTarget::Forward(_))
        ));
    }

    #[test]
    fn in_frr_mode_a_default_vrf_port_accepts_labels_while_zebras_labels_leave_by_it() {
        let text = "[router]\nname = \"r\"\n\n[frr]\n\n[[port]]\nname = \"core\"\ninterface = \"lo\"\n\n\
                    [[port]]\nname = \"ce\"\ninterface = \"lo2\"\n\n[[port]]\nname = \"opened\"\ninterface = \"lo3\"\nmpls = true\n";
        let mut t = Tables::new(Config::from_str(text, std::path::Path::new("r.toml")).unwrap());
        let fib = t
            .set_kernel_addresses(
                vec![
                    vec![("198.18.11.1".parse().unwrap(), 24)],
                    vec![("198.18.1.1".parse().unwrap(), 24)],
                    vec![],
                ],
                (Some("198.18.255.1".parse().unwrap()), None),
            )
            .unwrap();
        assert_eq!(fib.port_accepts_mpls, vec![false, false, true], "no label protocol yet");
        let hop = |port: PortId, via: &str, labels: Vec<Label>| NexthopConfig {
            port,
            via: Some(via.parse().unwrap()),
            labels,
            weight: 1,
        };
        let lsp = |label: Label, route: Option<Vec<NexthopConfig>>| FrrChange::Label {
            label,
            route: route.map(|nhs| (LabelConfigAction::Forward(nhs), Protocol::Ldp)),
        };
        let route = |prefix: &str, route: Option<Vec<NexthopConfig>>| FrrChange::Route {
            vrf: DEFAULT_VRF_NAME.into(),
            prefix: prefix.parse().unwrap(),
            len: 24,
            route: route.map(|nhs| (RouteAction::Forward(nhs), Protocol::Ldp)),
        };
        // LDP's penultimate-hop pop toward the core neighbour: labels leave by the core.
        let fib = t.apply_frr(vec![lsp(16, Some(vec![hop(0, "198.18.11.2", vec![])]))]).unwrap().fib;
        assert_eq!(fib.port_accepts_mpls, vec![true, false, true]);
        // A plain route out of the customer's port opens nothing; a labelled one does.
        let fib =
            t.apply_frr(vec![route("198.18.50.0", Some(vec![hop(1, "198.18.1.2", vec![])]))]).unwrap().fib;
        assert_eq!(fib.port_accepts_mpls, vec![true, false, true]);
        let fib =
            t.apply_frr(vec![route("198.18.60.0", Some(vec![hop(1, "198.18.1.2", vec![100])]))]).unwrap().fib;
        assert_eq!(fib.port_accepts_mpls, vec![true, true, true]);
        // Moved to the core, then the LSP gone: each port follows, counted per route.
        let fib = t
            .apply_frr(vec![
                route("198.18.60.0", Some(vec![hop(0, "198.18.11.2", vec![100])])),
                lsp(16, None),
            ])
            .unwrap()
            .fib;
        assert_eq!(fib.port_accepts_mpls, vec![true, false, true]);
        let fib = t.apply_frr(vec![route("198.18.60.0", None)]).unwrap().fib;
        assert_eq!(fib.port_accepts_mpls, vec![false, false, true], "no labels leave: none come in");
        assert_eq!(fib.port_accepts_mpls, t.build_fib().unwrap().port_accepts_mpls, "as a whole build says");
    }

    #[test]
    fn labels_from_frr_are_checked_like_the_configs() {
        let mut t = tables();
        let push = |labels: Vec<Label>| FrrChange::Route {
            vrf: DEFAULT_VRF_NAME.into(),
            prefix: "198.18.12.0".parse().unwrap(),
            len: 24,
            route: Some((
                RouteAction::Forward(vec![NexthopConfig {
                    port: 0,
                    via: Some("198.18.11.2".parse().unwrap()),
                    labels,
                    weight: 1,
                }]),
                Protocol::Ldp,
            )),
        };
        for bad in [vec![1], vec![100; 33], vec![2, 100]] {
            let applied = t.apply_frr(vec![push(bad.clone())]).unwrap();
            assert_eq!(applied.refused.len(), 1, "{bad:?}");
        }
        assert!(
            t.apply_frr(vec![push(vec![100, 0])]).unwrap().refused.is_empty(),
            "IPv4 explicit null at the bottom"
        );
    }

    #[test]
    fn a_change_the_tables_refuse_costs_only_itself() {
        let mut t = tables();
        let bad = FrrChange::Label {
            label: 100,
            route: Some((LabelConfigAction::PopAndLookup { vrf: "nosuch".into() }, Protocol::Bgp)),
        };
        let good = FrrChange::Label {
            label: 101,
            route: Some((LabelConfigAction::Forward(forward(200)), Protocol::Ldp)),
        };
        let applied = t.apply_frr(vec![bad, good, route("198.18.12.0", 24)]).unwrap();
        assert_eq!(applied.refused.len(), 1, "{:?}", applied.refused);
        assert!(applied.refused[0].contains("nosuch"), "{:?}", applied.refused);
        assert!(applied.fib.labels.get(101).is_some());
        assert!(applied.fib.labels.get(100).is_none());
        assert_eq!(t.frr_counts(), (1, 1));
    }

    #[test]
    fn routes_from_frr_go_into_the_vrfs_the_tables_have() {
        let cfg = Config::from_str(
            "[router]\nname = \"r\"\n\n[[vrf]]\nname = \"red\"\n\n[[port]]\nname = \"east\"\ninterface = \"lo\"\naddresses = [\"198.18.11.1/24\"]\n",
            std::path::Path::new("r.toml"),
        )
        .unwrap();
        let mut t = Tables::new(cfg);
        let in_vrf = |vrf: &str, set: bool| FrrChange::Route {
            vrf: vrf.into(),
            prefix: "198.18.7.0".parse().unwrap(),
            len: 24,
            route: set.then(|| (RouteAction::Forward(forward(100)), Protocol::Bgp)),
        };
        let pop = |label: Label, vrf: &str| FrrChange::Label {
            label,
            route: Some((LabelConfigAction::PopAndLookup { vrf: vrf.into() }, Protocol::Bgp)),
        };
        let applied = t
            .apply_frr(vec![in_vrf("red", true), in_vrf("blue", true), pop(80, "red"), pop(81, "blue")])
            .unwrap();
        assert_eq!(
            applied.refused,
            [
                "198.18.7.0/24 (bgp) in VRF blue: VRF \"blue\" is not defined (VRFs: default, red)",
                "label 81 (bgp): VRF \"blue\" is not defined (VRFs: default, red)"
            ]
        );
        let red: Vec<IpRoute> = serde_json::from_value(t.show(Family::Inet, Some("red")).unwrap()).unwrap();
        let red: Vec<_> = red.iter().map(ToString::to_string).collect();
        assert_eq!(red, ["198.18.7.0/24 encap mpls 100 via 198.18.11.2 dev east proto bgp"]);
        let labels: Vec<MplsRoute> = serde_json::from_value(t.show(Family::Mpls, None).unwrap()).unwrap();
        assert_eq!(labels.iter().map(ToString::to_string).collect::<Vec<_>>(), ["80 vrf red proto bgp"]);
        assert!(
            t.show(Family::Inet, None)
                .unwrap()
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["dst"] != "198.18.7.0/24")
        );
        assert_eq!(t.get("198.18.7.9".parse().unwrap(), Some("red")).unwrap().dst, "198.18.7.0/24");
        let fib = applied.fib;
        assert!(fib.vrfs[1].lookup("198.18.7.9".parse().unwrap()).is_some());
        assert!(fib.vrfs[0].lookup("198.18.7.9".parse().unwrap()).is_none());
        // Removing from a VRF the tables do not have (gone first) is nothing to refuse,
        // also when the forwarding tables are changed in place (a small change to many
        // routes).
        t.apply_frr((1..=8).map(|i| route(&format!("198.18.{i}.0"), 24)).collect()).unwrap();
        let applied = t.apply_frr(vec![in_vrf("blue", false)]).unwrap();
        assert!(applied.refused.is_empty(), "{:?}", applied.refused);
        let applied = t.apply_frr(vec![in_vrf("red", false)]).unwrap();
        assert!(applied.fib.vrfs[1].lookup("198.18.7.9".parse().unwrap()).is_none());
    }

    #[test]
    fn flush_leaves_routes_from_frr_and_counts_them() {
        let mut t = tables();
        let ldp = FrrChange::Label {
            label: 101,
            route: Some((LabelConfigAction::Forward(forward(200)), Protocol::Ldp)),
        };
        t.apply_frr(vec![route("198.18.12.0", 24), ldp]).unwrap();
        let spec = RouteSpec::Inet(IpRoute {
            dst: "198.18.13.0/24".into(),
            vrf: DEFAULT_VRF_NAME.into(),
            kind: crate::api::RouteType::Unicast,
            nexthops: vec![Nexthop {
                gateway: Some("198.18.11.2".parse().unwrap()),
                dev: None,
                labels: vec![107],
                weight: 1,
            }],
            ttl_propagate: true,
            protocol: Protocol::Boot,
            prefsrc: None,
        });
        t.change(Change::Add, &spec).unwrap();
        let (fib, s) = t.flush(Family::Inet, &RouteFilter::default()).unwrap();
        assert_eq!((s.flushed, s.frr_kept), (1, 1));
        assert!(fib.vrfs[0].lookup("198.18.12.1".parse().unwrap()).is_some(), "FRR's route forwards on");
        assert!(fib.vrfs[0].lookup("198.18.13.1".parse().unwrap()).is_none());
        let ospf = RouteFilter { proto: Some(Protocol::Ospf), ..RouteFilter::default() };
        assert_eq!(
            t.flush(Family::Inet, &ospf).unwrap().1,
            FlushSummary { frr_kept: 1, ..Default::default() }
        );
        let (fib, s) = t.flush(Family::Mpls, &RouteFilter::default()).unwrap();
        assert_eq!((s.flushed, s.frr_kept), (0, 1));
        assert!(fib.labels.get(101).is_some());
        assert_eq!(t.frr_counts(), (1, 1));
    }
}
