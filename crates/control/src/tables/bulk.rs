//! Table operations that stay usable at a million routes: `route show` a chunk at a time
//! ([`Tables::show_chunk`]), `route get` by lookups rather than a scan, and a batch of
//! CLI changes applied as one table change ([`Tables::change_many`]).

use std::net::IpAddr;
use std::ops::Bound;

use vmpls_fib::{DEFAULT_VRF_NAME, Fib, Label};

use super::rib::{Derived, Dest, Entry, Prefix, Selected, Source};
use super::txn::Txn;
use super::{Change, Tables, TablesError, mask, max_len, shown};
use crate::RouteConfig;
use crate::api::{
    BatchFailure, BatchSummary, Family, IpRoute, MplsAction, Nexthop, Protocol, RouteSpec, RouteType,
    ShowRows,
};

/// Where a streamed `route show` goes on: after this prefix or label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShowCursor {
    /// After this prefix (and length).
    Prefix(IpAddr, u8),
    /// After this label.
    Label(Label),
}

/// One chunk of a table ([`Tables::show_chunk`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShowChunk {
    /// The routes, in the table's order.
    pub rows: ShowRows,
    /// Where the next chunk starts; `None`: this was the last.
    pub next: Option<ShowCursor>,
}

/// Up to `max` rows of `entries` (in key order) that `row` shows, and the key to go on
/// after if more are left.
fn chunk<'a, K: Copy + 'a, D: 'a, R>(
    entries: impl Iterator<Item = (&'a K, &'a D)>,
    max: usize,
    row: impl Fn(&K, &D) -> Option<R>,
) -> (Vec<R>, Option<K>) {
    let mut rows = Vec::with_capacity(max.min(4096));
    let mut last = None;
    for (k, d) in entries {
        let Some(r) = row(k, d) else { continue };
        if rows.len() >= max {
            return (rows, last);
        }
        rows.push(r);
        last = Some(*k);
    }
    (rows, None)
}

impl Tables {
    /// Up to `max` routes of one table, as [`Tables::show`] lists them, starting after
    /// `after` (`None`: from the start); `dst` selects one destination (a prefix
    /// `ADDRESS/LENGTH` or a label) as `route show PREFIX`. The time it takes grows with
    /// `max`, not with the table, so the control socket copies a table out a chunk at a
    /// time, holding the tables only while it copies.
    ///
    /// # Errors
    /// An unknown VRF, a `dst` that is no prefix or label.
    pub fn show_chunk(
        &self,
        family: Family,
        vrf: Option<&str>,
        dst: Option<&str>,
        after: Option<ShowCursor>,
        max: usize,
    ) -> Result<ShowChunk, TablesError> {
        if family == Family::Mpls {
            return self.show_label_chunk(dst, after, max);
        }
        let vrf = vrf.unwrap_or(DEFAULT_VRF_NAME);
        self.check_vrf(vrf)?;
        let v4 = family == Family::Inet;
        let empty = Default::default();
        let table = self.rib.table(vrf, v4).unwrap_or(&empty);
        if let Some(d) = dst {
            let key = super::parse_prefix(d, family)?;
            let row = table.get(&key).and_then(|dest| self.show_selected(vrf, key, dest));
            let rows = row.into_iter().filter(|_| after.is_none() && key.0.is_ipv4() == v4);
            return Ok(ShowChunk { rows: ShowRows::Ip(rows.collect()), next: None });
        }
        let range = match after {
            Some(ShowCursor::Prefix(a, l)) => table.range((Bound::Excluded((a, l)), Bound::Unbounded)),
            Some(ShowCursor::Label(_)) => return Err("a label cursor for a prefix table".into()),
            None => table.range(..),
        };
        let (rows, next) = chunk(range, max, |&key, dest| self.show_selected(vrf, key, dest));
        Ok(ShowChunk { rows: ShowRows::Ip(rows), next: next.map(|(a, l)| ShowCursor::Prefix(a, l)) })
    }

    fn show_label_chunk(
        &self,
        dst: Option<&str>,
        after: Option<ShowCursor>,
        max: usize,
    ) -> Result<ShowChunk, TablesError> {
        let labels = self.rib.labels();
        let row = |_: &Label, d: &Dest<crate::LabelConfig>| {
            d.selected_route().map(|e| self.show_label(&e.item, e.proto()))
        };
        // The pseudowires' labels are few and not in the RIB: merged in label order.
        let pw_rows = self.pw_label_rows();
        if let Some(d) = dst {
            let label: Label = d.parse().map_err(|_| format!("\"{d}\" is not a label"))?;
            let rows = labels
                .get(&label)
                .filter(|_| after.is_none())
                .and_then(|d| row(&label, d))
                .or_else(|| pw_rows.get(&label).filter(|_| after.is_none()).cloned());
            return Ok(ShowChunk { rows: ShowRows::Mpls(rows.into_iter().collect()), next: None });
        }
        let start = match after {
            Some(ShowCursor::Label(l)) => Bound::Excluded(l),
            Some(ShowCursor::Prefix(..)) => return Err("a prefix cursor for the label table".into()),
            None => Bound::Unbounded,
        };
        let mut routes = labels.range((start, Bound::Unbounded)).peekable();
        let mut pws = pw_rows.range((start, Bound::Unbounded)).peekable();
        let mut rows = Vec::with_capacity(max.min(4096));
        let mut last = None;
        loop {
            // the smaller label of the two; a route wins a label both have
            let next = match (routes.peek(), pws.peek()) {
                (None, None) => break,
                (Some((r, _)), Some((p, _))) if p < r => pws.next().map(|(l, r)| (*l, Some(r.clone()))),
                (Some(_), _) => routes.next().map(|(l, d)| {
                    let pw = pws.next_if(|(p, _)| *p == l).map(|(_, r)| r.clone());
                    (*l, row(l, d).or(pw))
                }),
                (None, Some(_)) => pws.next().map(|(l, r)| (*l, Some(r.clone()))),
            };
            let Some((label, Some(r))) = next else { continue };
            if rows.len() >= max {
                return Ok(ShowChunk { rows: ShowRows::Mpls(rows), next: last.map(ShowCursor::Label) });
            }
            rows.push(r);
            last = Some(label);
        }
        Ok(ShowChunk { rows: ShowRows::Mpls(rows), next: None })
    }

    /// The row `route show` prints for the route in force at `key` in `vrf`; `None` for
    /// the router's own addresses (delivered, not routed).
    fn show_selected(&self, vrf: &str, key: Prefix, dest: &Dest<RouteConfig>) -> Option<IpRoute> {
        let port = match dest.selected()? {
            Selected::Route(e) => return Some(self.show_ip(&e.item, e.proto())),
            Selected::Derived(Derived::Local) => return None,
            Selected::Derived(Derived::Connected { port }) => port,
        };
        let (net, len) = key;
        let src = self.file.ports[usize::from(port)].addresses.iter().find(|&&(a, l)| (mask(a, l), l) == key);
        Some(IpRoute {
            dst: format!("{net}/{len}"),
            vrf: vrf.to_string(),
            kind: RouteType::Unicast,
            nexthops: vec![Nexthop {
                gateway: None,
                dev: Some(self.port_name(port)),
                labels: Vec::new(),
                weight: 1,
            }],
            ttl_propagate: true,
            protocol: Protocol::Kernel,
            prefsrc: src.map(|&(a, _)| a),
        })
    }

    /// `route get`: the longest prefix holding `addr`, one lookup per prefix length.
    pub(super) fn longest_match(&self, addr: IpAddr, vrf: &str) -> Option<IpRoute> {
        let table = self.rib.table(vrf, addr.is_ipv4())?;
        (0..=max_len(addr)).rev().find_map(|len| {
            let key: Prefix = (mask(addr, len), len);
            table.get(&key).and_then(|dest| self.show_selected(vrf, key, dest))
        })
    }

    /// Applies many CLI changes (`vmpls -batch`) as one table change: each is checked as
    /// [`Tables::change`] checks it, against the tables with the changes before it, and
    /// applied in order; the forwarding tables are made once, at the end. Without
    /// `force` the first change that fails ends the batch (the ones before it stay),
    /// with `force` the others apply; the summary says which failed. Returns the tables
    /// to store, `None` if no change applied.
    ///
    /// # Errors
    /// The tables could not be built from the result (a check missed something): then
    /// nothing changed.
    pub fn change_many(
        &mut self,
        changes: &[(Change, RouteSpec)],
        force: bool,
    ) -> Result<(Option<Fib>, BatchSummary), TablesError> {
        let mut txn = Txn::new(self);
        let mut sum = BatchSummary::default();
        for (i, (change, spec)) in changes.iter().enumerate() {
            match Tables::stage_change(&mut txn, *change, spec) {
                Ok(()) => sum.applied += 1,
                Err(error) => {
                    sum.failed.push(BatchFailure { index: i as u64, error: error.message() });
                    if !force {
                        break;
                    }
                }
            }
        }
        if sum.applied == 0 {
            return Ok((None, sum));
        }
        match txn.finish() {
            Ok(fib) => Ok((Some(fib), sum)),
            Err(e) => Err(TablesError::Batch(Box::new(e))),
        }
    }

    /// One route change with every check of `route add`/`replace`/`del`, staged in `txn`
    /// ([`Tables::change`] and [`Tables::change_many`] make the forwarding tables).
    pub(super) fn stage_change(
        txn: &mut Txn<'_>,
        change: Change,
        spec: &RouteSpec,
    ) -> Result<(), TablesError> {
        match spec {
            RouteSpec::Inet(r) | RouteSpec::Inet6(r) => {
                let family = if matches!(spec, RouteSpec::Inet(_)) { Family::Inet } else { Family::Inet6 };
                if change != Change::Delete && txn.is_connected_route(r, family) {
                    return match change {
                        Change::Replace => Ok(()),
                        _ => Err(format!(
                            "{} is the connected subnet of port \"{}\"; it exists as long as the port has that address",
                            r.dst,
                            r.nexthops[0].dev.as_deref().unwrap_or_default()
                        ).into()),
                    };
                }
                let route = txn.resolve_ip(r, family, change == Change::Delete)?;
                let (vrf, key) = (route.vrf.clone(), (route.prefix, route.len));
                let old = txn.rib.dest(&vrf, key).and_then(|d| d.candidate(Source::Own));
                match change {
                    Change::Add if old.is_some() => Err(format!(
                        "a route to {}/{} in VRF \"{}\" exists; use `vmpls route replace` to change it",
                        route.prefix, route.len, route.vrf
                    )
                    .into()),
                    Change::Add | Change::Replace => {
                        let entry = Entry { item: route, origin: Protocol::Boot, shown: shown(r.protocol)? };
                        txn.set_route(&vrf, key, Source::Own, Some(entry));
                        Ok(())
                    }
                    Change::Delete => {
                        let what = format!("{}/{} in VRF \"{}\"", route.prefix, route.len, route.vrf);
                        let Some(old) = old else {
                            return Err(format!("no route to {what}").into());
                        };
                        let given = !r.kind.forwards() || !r.nexthops.is_empty();
                        if given && old.item.action != route.action {
                            return Err(format!(
                                "the route to {what} is not the one given: it is `{}`",
                                txn.show_ip(&old.item, old.proto())
                            )
                            .into());
                        }
                        txn.set_route(&vrf, key, Source::Own, None);
                        Ok(())
                    }
                }
            }
            RouteSpec::Mpls(m) => {
                let label = txn.resolve_label(m, change == Change::Delete)?;
                let key = label.label;
                let old = txn.rib.labels().get(&key).and_then(|d| d.candidate(Source::Own));
                match change {
                    Change::Add if old.is_some() => Err(format!(
                        "label {key} has a route; use `vmpls -f mpls route replace` to change it"
                    )
                    .into()),
                    Change::Add | Change::Replace => {
                        let entry = Entry { item: label, origin: Protocol::Boot, shown: shown(m.protocol)? };
                        txn.set_label(key, Source::Own, Some(entry));
                        Ok(())
                    }
                    Change::Delete => {
                        let Some(old) = old else {
                            return Err(format!("no route for label {key}").into());
                        };
                        let given =
                            !m.nexthops.is_empty() || m.action == MplsAction::Lookup && m.vrf.is_some();
                        if given && old.item.action != label.action {
                            return Err(format!(
                                "the route for label {key} is not the one given: it is `{}`",
                                txn.show_label(&old.item, old.proto())
                            )
                            .into());
                        }
                        txn.set_label(key, Source::Own, None);
                        Ok(())
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::api::{MplsRoute, Request};
    use crate::tables::FrrChange;
    use crate::{Config, NexthopConfig, RouteAction};

    const PE: &str = r#"
[router]
name = "pe1"
addresses = ["198.18.255.1", "2001:db8:ff::1"]

[[vrf]]
name = "cust"

[[port]]
name = "ce1"
interface = "pe1-ce1"
vrf = "cust"
addresses = ["198.18.1.1/24", "2001:db8:1::1/64"]

[[port]]
name = "core"
interface = "pe1-p"
addresses = ["198.18.10.1/24", "2001:db8:10::1/64", "198.18.11.1/24"]

[[route]]
prefix = "198.18.2.0/24"
push = [1002]
via = "198.18.10.2"
port = "core"

[[route]]
prefix = "198.18.5.0/24"
vrf = "cust"
blackhole = true

[[label]]
in = 2001
action = "pop"
"#;

    fn tables() -> Tables {
        Tables::new(Config::from_str(PE, Path::new("pe1.toml")).unwrap())
    }

    /// A change as the CLI words it (`-f mpls` for label routes).
    fn spec(words: &str) -> (Change, RouteSpec) {
        let args: Vec<String> = words.split_whitespace().map(String::from).collect();
        let family = args.get(1).is_some_and(|d| d.parse::<u32>().is_ok()).then_some(Family::Mpls);
        match crate::cli::parse_route(family, &args).unwrap() {
            Request::RouteAdd { route } => (Change::Add, route),
            Request::RouteDel { route } => (Change::Delete, route),
            Request::RouteReplace { route } => (Change::Replace, route),
            other => panic!("{other:?}"),
        }
    }

    fn frr_route(dst: &str, len: u8) -> FrrChange {
        FrrChange::Route {
            vrf: DEFAULT_VRF_NAME.into(),
            prefix: dst.parse().unwrap(),
            len,
            route: Some((
                RouteAction::Forward(vec![NexthopConfig {
                    port: 1,
                    via: Some("198.18.10.3".parse().unwrap()),
                    labels: vec![300],
                    weight: 1,
                }]),
                Protocol::Ospf,
            )),
        }
    }

    /// Tables with routes from everywhere: the file, the CLI, FRR (one for a connected
    /// subnet, one under a CLI route), in two VRFs and both families, and label routes.
    fn busy() -> Tables {
        let mut t = tables();
        for i in 0..40u32 {
            let (c, s) =
                spec(&format!("add 198.18.{}.{}/32 via 198.18.10.2 encap mpls {}", 20 + i / 8, i, 100 + i));
            t.change(c, &s).unwrap();
        }
        for w in [
            "add 2001:db8:5::/64 via 2001:db8:10::2",
            "add default via 198.18.10.2",
            "add 198.18.0.0/15 via 198.18.11.2 proto bgp",
            "add 198.18.7.0/24 vrf cust dev ce1",
            "add 3001 as 400 via inet 198.18.10.2",
        ] {
            let (c, s) = spec(w);
            t.change(c, &s).unwrap();
        }
        t.apply_frr(vec![
            frr_route("198.18.11.0", 24),
            frr_route("198.18.20.3", 32),
            frr_route("198.18.30.0", 24),
            frr_route("2001:db8:30::", 64),
            FrrChange::Label {
                label: 500,
                route: Some((LabelConfigAction::PopAndLookup { vrf: "cust".into() }, Protocol::Ldp)),
            },
        ])
        .unwrap();
        t
    }

    use crate::LabelConfigAction;

    /// `route show` as one walk over the whole table, without chunks.
    fn reference(t: &Tables, family: Family, vrf: &str) -> serde_json::Value {
        if family == Family::Mpls {
            let list: Vec<MplsRoute> = t
                .rib
                .labels()
                .values()
                .filter_map(|d| d.selected_route())
                .map(|e| t.show_label(&e.item, e.proto()))
                .collect();
            return serde_json::to_value(list).unwrap();
        }
        let table = t.rib.table(vrf, family == Family::Inet);
        let list: Vec<IpRoute> =
            table.into_iter().flatten().filter_map(|(k, d)| t.show_selected(vrf, *k, d)).collect();
        serde_json::to_value(list).unwrap()
    }

    fn streamed(t: &Tables, family: Family, vrf: Option<&str>, max: usize) -> (serde_json::Value, usize) {
        let mut all = Vec::new();
        let mut after = None;
        let mut chunks = 0;
        loop {
            let c = t.show_chunk(family, vrf, None, after, max).unwrap();
            chunks += 1;
            assert!(c.rows.len() <= max);
            match serde_json::to_value(&c.rows).unwrap() {
                serde_json::Value::Array(l) => all.extend(l),
                v => panic!("{v}"),
            }
            match c.next {
                Some(n) => after = Some(n),
                None => return (serde_json::Value::Array(all), chunks),
            }
        }
    }

    #[test]
    fn route_show_in_chunks_lists_what_the_whole_table_did() {
        let t = busy();
        for (family, vrf) in [
            (Family::Inet, None),
            (Family::Inet6, None),
            (Family::Inet, Some("cust")),
            (Family::Inet6, Some("cust")),
            (Family::Mpls, None),
        ] {
            let want = reference(&t, family, vrf.unwrap_or(DEFAULT_VRF_NAME));
            let n = want.as_array().unwrap().len();
            assert!(n >= 1, "{family:?} {vrf:?}: {want}");
            assert_eq!(t.show(family, vrf).unwrap(), want, "{family:?} {vrf:?}");
            for max in [1, 2, 3, 7, 1000] {
                let (got, chunks) = streamed(&t, family, vrf, max);
                assert_eq!(got, want, "{family:?} {vrf:?} in chunks of {max}");
                assert_eq!(chunks, n.div_ceil(max).max(1), "no empty chunk at the end");
            }
        }
        // The CLI's route wins over FRR's under it; FRR's to a connected subnet is not in
        // force (the forwarding tables hold the subnet), so the subnet shows.
        let v4 = t.show(Family::Inet, None).unwrap();
        let find = |dst: &str| v4.as_array().unwrap().iter().find(|r| r["dst"] == dst).cloned().unwrap();
        assert_eq!(find("198.18.20.3/32")["protocol"], "boot");
        assert_eq!(find("198.18.11.0/24")["protocol"], "kernel");
        assert_eq!(find("198.18.10.0/24")["protocol"], "kernel");
        // Errors: an unknown VRF, a bad destination.
        assert!(
            t.show_chunk(Family::Inet, Some("nosuch"), None, None, 10)
                .unwrap_err()
                .message()
                .contains("not defined")
        );
        assert!(
            t.show_chunk(Family::Inet, None, Some("bogus"), None, 10)
                .unwrap_err()
                .message()
                .contains("not a prefix")
        );
        assert!(
            t.show_chunk(Family::Mpls, None, Some("x"), None, 10)
                .unwrap_err()
                .message()
                .contains("not a label")
        );
    }

    #[test]
    fn route_show_of_one_destination_finds_it_wherever_it_came_from() {
        let t = busy();
        let one = |family, vrf, dst| match t.show_chunk(family, vrf, Some(dst), None, SHOW).unwrap().rows {
            ShowRows::Ip(l) => {
                l.into_iter().map(|r| format!("{} {}", r.dst, r.protocol.name())).collect::<Vec<_>>()
            }
            ShowRows::Mpls(l) => {
                l.into_iter().map(|r| format!("{} {}", r.label, r.protocol.name())).collect()
            }
        };
        const SHOW: usize = 10;
        assert_eq!(one(Family::Inet, None, "198.18.2.0/24"), ["198.18.2.0/24 static"]);
        assert_eq!(one(Family::Inet, None, "198.18.30.0/24"), ["198.18.30.0/24 ospf"]);
        assert_eq!(one(Family::Inet, None, "198.18.10.0/24"), ["198.18.10.0/24 kernel"]);
        assert_eq!(one(Family::Inet, None, "0.0.0.0/0"), ["0.0.0.0/0 boot"]);
        assert!(one(Family::Inet, None, "198.18.3.0/24").is_empty());
        assert!(one(Family::Inet, None, "198.18.5.0/24").is_empty(), "in VRF cust");
        assert_eq!(one(Family::Inet, Some("cust"), "198.18.5.0/24"), ["198.18.5.0/24 static"]);
        assert_eq!(one(Family::Inet6, None, "2001:db8:30::/64"), ["2001:db8:30::/64 ospf"]);
        assert_eq!(one(Family::Mpls, None, "500"), ["500 ldp"]);
        assert_eq!(one(Family::Mpls, None, "3001"), ["3001 boot"]);
        assert!(one(Family::Mpls, None, "3002").is_empty());
    }

    #[test]
    fn a_stream_goes_on_in_order_past_routes_changed_between_chunks() {
        let mut t = busy();
        let first = t.show_chunk(Family::Inet, None, None, None, 10).unwrap();
        let ShowRows::Ip(rows) = &first.rows else { panic!() };
        let last = rows.last().unwrap().dst.clone();
        // The last route sent goes, one before it and one after it come.
        let del = spec(&format!("del {last}"));
        t.change(del.0, &del.1).unwrap();
        for w in ["add 198.18.0.0/16 via 198.18.10.2", "add 198.18.200.0/24 via 198.18.10.2"] {
            let (c, s) = spec(w);
            t.change(c, &s).unwrap();
        }
        let mut seen: Vec<String> = rows.iter().map(|r| r.dst.clone()).collect();
        let mut after = first.next;
        while let Some(a) = after {
            let c = t.show_chunk(Family::Inet, None, None, Some(a), 10).unwrap();
            let ShowRows::Ip(rows) = c.rows else { panic!() };
            seen.extend(rows.into_iter().map(|r| r.dst));
            after = c.next;
        }
        assert!(!seen.contains(&"198.18.0.0/16".to_string()), "added before the cursor: not seen");
        assert!(seen.contains(&"198.18.200.0/24".to_string()), "added after the cursor: seen");
        let keys: Vec<(IpAddr, u8)> =
            seen.iter().map(|d| super::super::parse_prefix(d, Family::Inet).unwrap()).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "in order, none twice: {seen:?}");
    }

    #[test]
    fn route_get_is_the_longest_prefix_of_route_show_that_holds_the_address() {
        let t = busy();
        for (addr, vrf) in [
            ("198.18.20.3", None),
            ("198.18.20.9", None),
            ("198.18.11.77", None),
            ("198.18.10.2", None),
            ("198.18.2.9", None),
            ("198.18.99.1", None),
            ("203.0.113.1", None),
            ("198.18.7.7", Some("cust")),
            ("198.18.5.5", Some("cust")),
            ("2001:db8:5::1", None),
            ("2001:db8:30::1", None),
            ("2001:db8:99::1", None),
        ] {
            let a: IpAddr = addr.parse().unwrap();
            let family = if a.is_ipv4() { Family::Inet } else { Family::Inet6 };
            let list: Vec<IpRoute> = serde_json::from_value(t.show(family, vrf).unwrap()).unwrap();
            let want = list
                .into_iter()
                .filter(|r| {
                    let (net, len) = super::super::parse_prefix(&r.dst, family).unwrap();
                    crate::nexthop::on_subnet(net, len, a)
                })
                .max_by_key(|r| super::super::parse_prefix(&r.dst, family).unwrap().1);
            assert_eq!(t.get(a, vrf).ok(), want, "{addr} {vrf:?}");
        }
        assert!(
            t.get("2001:db8:99::1".parse().unwrap(), None)
                .unwrap_err()
                .message()
                .contains("no route to 2001:db8:99::1")
        );
        assert!(
            t.get("198.18.1.1".parse().unwrap(), Some("nosuch"))
                .unwrap_err()
                .message()
                .contains("not defined")
        );
    }

    /// A batch that touches every check: adds, a duplicate, a replace, deletes (by
    /// destination, by the route, by a route that is not the one there), a connected
    /// subnet pasted back, label routes, mistakes.
    const BATCH: [&str; 16] = [
        "add 198.18.40.0/24 via 198.18.10.2 encap mpls 140",
        "add 198.18.41.0/24 via 198.18.10.2 encap mpls 141",
        "add 198.18.40.0/24 via 198.18.10.2",
        "replace 198.18.40.0/24 via 198.18.11.2 encap mpls 240",
        "del 198.18.41.0/24",
        "del 198.18.41.0/24",
        "add 198.18.42.0/24 via 198.18.99.2",
        "replace 198.18.10.0/24 dev core",
        "add 198.18.10.0/24 dev core",
        "del 198.18.2.0/24 via 198.18.10.2 encap mpls 900",
        "del 198.18.2.0/24 via 198.18.10.2 encap mpls 1002",
        "add 3003 as 401 via inet 198.18.10.2",
        "add 3002 as 402 via inet 198.18.10.2",
        "del 2001",
        "add 198.18.43.1/24 via 198.18.10.2",
        "add 2001:db8:43::/64 via 2001:db8:10::2 proto ospf",
    ];

    fn all(t: &Tables) -> Vec<serde_json::Value> {
        [(Family::Inet, None), (Family::Inet6, None), (Family::Mpls, None), (Family::Inet, Some("cust"))]
            .into_iter()
            .map(|(f, v)| t.show(f, v).unwrap())
            .collect()
    }

    #[test]
    fn a_batch_does_what_its_changes_one_by_one_do_and_says_which_failed() {
        let changes: Vec<(Change, RouteSpec)> = BATCH.iter().map(|w| spec(w)).collect();
        // One by one, with `change`.
        let mut one = busy();
        let mut errors = Vec::new();
        for (i, (c, s)) in changes.iter().enumerate() {
            if let Err(e) = one.change(*c, s) {
                errors.push(BatchFailure { index: i as u64, error: e.message() });
            }
        }
        assert_eq!(errors.iter().map(|f| f.index).collect::<Vec<_>>(), [2, 5, 6, 8, 9, 14], "{errors:#?}");
        // As one batch, going on past failures (-force).
        let mut batch = busy();
        let (fib, sum) = batch.change_many(&changes, true).unwrap();
        assert_eq!(
            sum,
            BatchSummary { applied: (changes.len() - errors.len()) as u64, failed: errors.clone() }
        );
        assert_eq!(all(&batch), all(&one));
        // The tables to store are those of the result.
        let (fib, want) = (fib.unwrap(), one.build_fib().unwrap());
        for a in ["198.18.40.1", "198.18.41.1", "198.18.2.1", "198.18.10.7", "2001:db8:43::1"] {
            let look = |f: &Fib| format!("{:?}", f.vrfs[0].lookup(a.parse().unwrap()));
            assert_eq!(look(&fib), look(&want), "{a}");
        }
        assert!(fib.labels.get(3002).is_some() && fib.labels.get(2001).is_none());
        // Without -force: stops at the first failure, the changes before it stay.
        let mut stop = busy();
        let (fib, sum) = stop.change_many(&changes, false).unwrap();
        assert_eq!(sum, BatchSummary { applied: 2, failed: vec![errors[0].clone()] });
        assert!(fib.is_some());
        let mut two = busy();
        two.change_many(&changes[..2], false).unwrap();
        assert_eq!(all(&stop), all(&two));
        // Nothing applied: nothing to store.
        let mut t = busy();
        let (fib, sum) = t.change_many(&changes[5..6], false).unwrap();
        assert!(fib.is_none() && sum.applied == 0 && sum.failed.len() == 1);
        assert_eq!(all(&t), all(&busy()));
        let (fib, sum) = t.change_many(&[], false).unwrap();
        assert!(fib.is_none() && sum == BatchSummary::default());
    }

    #[test]
    fn a_batch_of_thousands_of_routes_is_one_table_change() {
        let mut t = tables();
        let changes: Vec<(Change, RouteSpec)> = (0..5000u32)
            .map(|i| {
                spec(&format!("add 198.19.{}.{}/32 via 198.18.10.2 encap mpls {}", i / 256, i % 256, 16 + i))
            })
            .collect();
        let (fib, sum) = t.change_many(&changes, false).unwrap();
        assert_eq!((sum.applied, sum.failed.len()), (5000, 0));
        let fib = fib.unwrap();
        let v4 = &fib.vrfs[0].v4;
        assert!(v4.lookup("198.19.19.135".parse().unwrap()).is_some());
        assert_eq!(t.show(Family::Inet, None).unwrap().as_array().unwrap().len(), 5000 + 3);
        // And back out, in one batch of deletes.
        let dels: Vec<(Change, RouteSpec)> =
            changes.iter().map(|(_, s)| (Change::Delete, s.clone())).collect();
        let (fib, sum) = t.change_many(&dels, false).unwrap();
        assert_eq!(sum.applied, 5000);
        assert!(fib.unwrap().vrfs[0].v4.lookup("198.19.19.135".parse().unwrap()).is_none());
    }
}
