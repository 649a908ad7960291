//! The one property the routing table promises: whatever the file, the CLI and FRR did,
//! `route get` answers what the forwarding tables do, `route show` lists exactly the
//! routes the forwarding tables hold, and a change that fails leaves everything as it was.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use proptest::prelude::*;
use vmpls_fib::{Fib, Label, PortId, RouteTarget};

use super::frr_tests::flat;
use super::{Change, FrrChange, Tables};
use crate::api::{Family, IpRoute, MplsAction, MplsRoute, Nexthop, Protocol, RouteSpec, RouteType};
use crate::{Config, LabelConfigAction, NexthopConfig, RouteAction};

/// Two VRFs holding the same connected subnet, so that a route's VRF matters.
const BASE: &str = r#"
[router]
name = "r"
addresses = ["198.18.255.1"]

[[vrf]]
name = "cust"

[[port]]
name = "a"
interface = "r-a"
addresses = ["198.18.1.1/24"]

[[port]]
name = "b"
interface = "r-b"
addresses = ["198.18.2.1/24"]

[[port]]
name = "c"
interface = "r-c"
vrf = "cust"
addresses = ["198.18.1.1/24"]
"#;

const VRFS: [&str; 2] = ["default", "cust"];

/// Destinations that overlap each other, the connected subnets and the router's own
/// addresses.
const PREFIXES: [(&str, u8); 10] = [
    ("0.0.0.0", 0),
    ("198.18.0.0", 16),
    ("198.18.1.0", 24),
    ("198.18.1.0", 25),
    ("198.18.1.128", 25),
    ("198.18.2.0", 24),
    ("198.18.4.0", 22),
    ("198.18.4.0", 24),
    ("198.18.4.7", 32),
    ("198.18.255.1", 32),
];

const PROBES: [&str; 10] = [
    "198.18.1.9",
    "198.18.1.200",
    "198.18.2.9",
    "198.18.4.7",
    "198.18.4.9",
    "198.18.5.1",
    "198.18.9.9",
    "198.18.255.1",
    "198.18.255.2",
    "203.0.113.1",
];

/// The next hop every route uses: port `b` (default VRF) or `c` (cust).
fn gateway(vrf: &str) -> (&'static str, &'static str, PortId) {
    if vrf == "default" { ("b", "198.18.2.9", 1) } else { ("c", "198.18.1.9", 2) }
}

#[derive(Debug, Clone)]
enum Op {
    /// A reload with the file holding these routes (prefix index, out label; the
    /// default VRF) and label routes.
    File(Vec<(usize, Label)>, Vec<Label>),
    /// `route add`/`replace`/`del` in a VRF; `None`: blackhole.
    Cli(Change, usize, usize, Option<Label>),
    /// `-f mpls route add`/`del` of a swap.
    CliLabel(Change, Label),
    /// A burst from zebra: set (`Some`) or remove routes in a VRF.
    Frr(Vec<(usize, usize, Option<Label>)>),
    /// A burst from zebra for label routes.
    FrrLabel(Vec<(Label, bool)>),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![Just(Change::Add), Just(Change::Replace), Just(Change::Delete)]
}

fn out_label() -> impl Strategy<Value = Label> {
    16..40u32
}

fn in_label() -> impl Strategy<Value = Label> {
    100..106u32
}

fn op() -> impl Strategy<Value = Op> {
    let prefix = 0..PREFIXES.len();
    let vrf = 0..VRFS.len();
    prop_oneof![
        1 => (
            prop::collection::vec((prefix.clone(), out_label()), 0..5),
            prop::collection::vec(in_label(), 0..3)
        )
            .prop_map(|(r, l)| Op::File(r, l)),
        3 => (change(), vrf.clone(), prefix.clone(), prop::option::of(out_label()))
            .prop_map(|(c, v, p, l)| Op::Cli(c, v, p, l)),
        1 => (change(), in_label()).prop_map(|(c, l)| Op::CliLabel(c, l)),
        3 => prop::collection::vec((vrf, prefix, prop::option::of(out_label())), 1..5).prop_map(Op::Frr),
        1 => prop::collection::vec((in_label(), any::<bool>()), 1..4).prop_map(Op::FrrLabel),
    ]
}

fn config(text: &str) -> Config {
    Config::from_str(text, Path::new("r.toml")).unwrap()
}

fn file_text(routes: &[(usize, Label)], labels: &[Label]) -> String {
    let mut text = BASE.to_string();
    let mut seen = BTreeSet::new();
    for &(p, out) in routes {
        let (prefix, len) = PREFIXES[p];
        // The file may not route the connected subnets or the router's own address,
        // nor one destination twice.
        if ["198.18.1.0/24", "198.18.2.0/24", "198.18.255.1/32"].contains(&&*format!("{prefix}/{len}"))
            || !seen.insert(p)
        {
            continue;
        }
        text += &format!(
            "\n[[route]]\nprefix = \"{prefix}/{len}\"\npush = [{out}]\nvia = \"198.18.2.9\"\nport = \"b\"\n"
        );
    }
    for &l in labels.iter().collect::<BTreeSet<_>>() {
        text += &format!(
            "\n[[label]]\nin = {l}\naction = \"swap\"\nout = [{l}]\nvia = \"198.18.2.9\"\nport = \"b\"\n"
        );
    }
    text
}

fn cli_route(vrf: &str, p: usize, out: Option<Label>) -> IpRoute {
    let (prefix, len) = PREFIXES[p];
    let (dev, via, _) = gateway(vrf);
    let (kind, nexthops) = match out {
        None => (RouteType::Blackhole, Vec::new()),
        Some(l) => (
            RouteType::Unicast,
            vec![Nexthop {
                gateway: Some(via.parse().unwrap()),
                dev: Some(dev.into()),
                labels: vec![l],
                weight: 1,
            }],
        ),
    };
    IpRoute {
        dst: format!("{prefix}/{len}"),
        vrf: vrf.into(),
        kind,
        nexthops,
        ttl_propagate: true,
        protocol: Protocol::Boot,
        prefsrc: None,
    }
}

fn frr_nexthop(vrf: &str, out: Label) -> NexthopConfig {
    let (_, via, port) = gateway(vrf);
    NexthopConfig { port, via: Some(via.parse().unwrap()), labels: vec![out], weight: 1 }
}

/// Applies `op`; the forwarding tables to store if it changed anything.
fn apply(t: &mut Tables, op: &Op) -> Result<Option<Fib>, super::TablesError> {
    match op {
        Op::File(routes, labels) => t.reload(config(&file_text(routes, labels))).map(|(f, _)| Some(f)),
        Op::Cli(change, v, p, out) => {
            t.change(*change, &RouteSpec::Inet(cli_route(VRFS[*v], *p, *out))).map(Some)
        }
        Op::CliLabel(change, l) => {
            let m = MplsRoute {
                label: *l,
                action: MplsAction::Forward,
                nexthops: if *change == Change::Delete {
                    Vec::new()
                } else {
                    vec![Nexthop {
                        gateway: Some("198.18.2.9".parse().unwrap()),
                        dev: None,
                        labels: vec![l + 1000],
                        weight: 1,
                    }]
                },
                vrf: None,
                ttl_propagate: true,
                protocol: Protocol::Boot,
            };
            t.change(*change, &RouteSpec::Mpls(m)).map(Some)
        }
        Op::Frr(burst) => {
            let changes = burst
                .iter()
                .map(|&(v, p, out)| {
                    let (prefix, len) = PREFIXES[p];
                    FrrChange::Route {
                        vrf: VRFS[v].into(),
                        prefix: prefix.parse().unwrap(),
                        len,
                        route: out
                            .map(|l| (RouteAction::Forward(vec![frr_nexthop(VRFS[v], l)]), Protocol::Ospf)),
                    }
                })
                .collect();
            t.apply_frr(changes).map(|a| Some(a.fib))
        }
        Op::FrrLabel(burst) => {
            let changes = burst
                .iter()
                .map(|&(l, set)| FrrChange::Label {
                    label: l,
                    route: set.then(|| {
                        (LabelConfigAction::Forward(vec![frr_nexthop("default", l + 2000)]), Protocol::Ldp)
                    }),
                })
                .collect();
            t.apply_frr(changes).map(|a| Some(a.fib))
        }
    }
}

/// A prefix route in words both sides can say: the destination and where it goes.
fn fib_words(cfg: &Config, net: Ipv4Addr, len: u8, target: &RouteTarget) -> Option<String> {
    let port = |p: PortId| cfg.ports[usize::from(p)].name.clone();
    let to = match target {
        RouteTarget::Local => return None,
        RouteTarget::Connected { port: p } => format!("dev {}", port(*p)),
        RouteTarget::Blackhole => "blackhole".into(),
        RouteTarget::Reject(r) => r.name().into(),
        RouteTarget::Forward(g) => {
            let nhs: Vec<String> = g
                .nexthops()
                .iter()
                .map(|n| format!("via {:?} dev {} labels {:?}", n.via, port(n.port), n.labels))
                .collect();
            nhs.join(", ")
        }
    };
    Some(format!("{net}/{len} {to}"))
}

fn shown_words(r: &IpRoute) -> String {
    let to = match r.kind {
        RouteType::Blackhole | RouteType::Unreachable | RouteType::Prohibit => r.kind.name().to_string(),
        RouteType::Unicast if r.protocol == Protocol::Kernel => {
            format!("dev {}", r.nexthops[0].dev.as_deref().unwrap_or_default())
        }
        RouteType::Unicast => {
            let nhs: Vec<String> = r
                .nexthops
                .iter()
                .map(|n| {
                    format!(
                        "via {:?} dev {} labels {:?}",
                        n.gateway,
                        n.dev.as_deref().unwrap_or_default(),
                        n.labels
                    )
                })
                .collect();
            nhs.join(", ")
        }
    };
    format!("{} {to}", r.dst)
}

/// Checks the property against `fib`, the forwarding tables last stored.
fn check(t: &Tables, fib: &Fib) -> Result<(), TestCaseError> {
    let cfg = t.config();
    for (i, vrf) in VRFS.iter().enumerate() {
        let table = &fib.vrfs[i].v4;
        // `route show` lists exactly what the forwarding tables hold.
        let shown: Vec<IpRoute> = serde_json::from_value(t.show(Family::Inet, Some(vrf)).unwrap()).unwrap();
        let shown: BTreeSet<String> = shown.iter().map(shown_words).collect();
        let held: BTreeSet<String> =
            table.iter().filter_map(|(net, len, r)| fib_words(cfg, net, len, r.target())).collect();
        prop_assert_eq!(&shown, &held, "route show in VRF {}", vrf);
        // `route get` is the forwarding tables' lookup (the router's own addresses are
        // delivered, not routed: `route get` does not list them).
        for probe in PROBES {
            let a: Ipv4Addr = probe.parse().unwrap();
            let want = match table.lookup(a) {
                None => {
                    prop_assert!(
                        t.get(IpAddr::V4(a), Some(vrf)).is_err(),
                        "route get {} in {}: the FIB has none",
                        a,
                        vrf
                    );
                    continue;
                }
                Some((_, _, r)) if *r.target() == RouteTarget::Local => continue,
                Some((net, len, r)) => fib_words(cfg, net, len, r.target()).expect("not local"),
            };
            let got = t.get(IpAddr::V4(a), Some(vrf)).map(|r| shown_words(&r)).map_err(|e| e.message());
            prop_assert_eq!(got, Ok(want), "route get {} in VRF {}", a, vrf);
        }
    }
    // Label routes: `route show -f mpls` lists the labels the forwarding tables hold.
    let shown: Vec<MplsRoute> = serde_json::from_value(t.show(Family::Mpls, None).unwrap()).unwrap();
    let shown: Vec<Label> = shown.iter().map(|m| m.label).collect();
    let held: Vec<Label> = fib.labels.iter().map(|(l, _)| l).collect();
    prop_assert_eq!(shown, held, "route show -f mpls");
    // The tables changed in place are the tables built whole.
    let whole = t.build_fib().unwrap();
    prop_assert_eq!(flat(fib), flat(&whole), "changed in place vs built whole");
    Ok(())
}

fn everything(t: &Tables) -> Vec<serde_json::Value> {
    let mut all: Vec<serde_json::Value> =
        VRFS.iter().map(|v| t.show(Family::Inet, Some(v)).unwrap()).collect();
    all.push(t.show(Family::Mpls, None).unwrap());
    all
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn route_get_and_route_show_agree_with_the_fib(ops in prop::collection::vec(op(), 1..25)) {
        let (mut t, mut fib) = Tables::built(config(BASE)).unwrap();
        check(&t, &fib)?;
        for op in &ops {
            let before = everything(&t);
            match apply(&mut t, op) {
                Ok(Some(next)) => fib = next,
                Ok(None) => {}
                Err(_) => prop_assert_eq!(&everything(&t), &before, "a failed {:?} changed the tables", op),
            }
            check(&t, &fib)?;
        }
    }
}
