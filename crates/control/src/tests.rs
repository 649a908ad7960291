//! Config tests: the example files, then one test per validation error.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use vmpls_fib::{LabelAction, RouteTarget, TtlModel};

use super::*;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn example_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("examples directory") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            example_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "toml") {
            out.push(path);
        }
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn load(rel: &str) -> Config {
    Config::from_file(&examples_dir().join(rel)).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_example_parses_and_builds() {
    let mut files = Vec::new();
    example_files(&examples_dir(), &mut files);
    assert!(files.len() >= 4, "found {files:?}");
    for f in files {
        let cfg = Config::from_file(&f).unwrap_or_else(|e| panic!("{e}"));
        let fib = cfg
            .build_fib()
            .unwrap_or_else(|e| panic!("{}: {e}: {:?}", f.display(), std::error::Error::source(&e)));
        assert_eq!(fib.port_addrs.len(), cfg.ports.len());
        assert_eq!(fib.labels.len(), cfg.labels.len());
    }
}

#[test]
fn p_swaps_1002_to_2002_toward_pe2() {
    let cfg = load("seed/p.toml");
    assert_eq!(cfg.router.name, "p");
    assert_eq!(cfg.router.v4, Some("198.18.255.2".parse().unwrap()));
    assert_eq!(cfg.ports[1].name, "east");
    assert_eq!(cfg.ports[1].interface, "p-pe2");
    let fib = cfg.build_fib().unwrap();
    let route = fib.labels.get(1002).expect("label 1002");
    let LabelAction::Forward(g) = &route.action() else { panic!("{route:?}") };
    assert!(!g.is_multipath());
    let nh = &g.nexthops()[0];
    assert_eq!((nh.port, nh.via, nh.labels.as_slice()), (1, Some(ip("198.18.20.2")), &[2002][..]));
    let route = fib.labels.get(1001).expect("label 1001");
    let LabelAction::Forward(g) = &route.action() else { panic!("{route:?}") };
    assert_eq!((g.nexthops()[0].port, g.nexthops()[0].labels.as_slice()), (0, &[2001][..]));
    assert_eq!(fib.labels.len(), 2);
    assert_eq!(fib.vrfs[0].lookup(ip("198.18.255.2")).unwrap().target(), &RouteTarget::Local);
    assert_eq!(
        fib.vrfs[0].lookup(ip("2001:db8:20::9")).unwrap().target(),
        &RouteTarget::Connected { port: 1 }
    );
}

#[test]
fn pe1_pushes_1002_and_pops_2001() {
    let cfg = load("seed/pe1.toml");
    let fib = cfg.build_fib().unwrap();
    for dst in ["198.18.2.7", "2001:db8:2::7"] {
        let r = fib.vrfs[0].lookup(ip(dst)).unwrap();
        let RouteTarget::Forward(g) = r.target() else { panic!("{r:?}") };
        let nh = &g.nexthops()[0];
        assert_eq!(nh.port, 1);
        assert_eq!(nh.labels, vec![1002]);
        assert_eq!(nh.via.map(|v| v.is_ipv4()), Some(dst.contains('.')));
        assert_eq!(r.ttl_model(), TtlModel::Uniform);
    }
    assert_eq!(fib.labels.get(2001).unwrap().action(), &LabelAction::PopAndLookup { vrf: 0 });
    assert!(fib.is_local_v4("198.18.1.1".parse().unwrap()));
    assert_eq!(fib.router_v6, Some("2001:db8:ff::1".parse().unwrap()));
}

#[test]
fn ecmp_example_has_weighted_group() {
    let cfg = load("ecmp-pe1.toml");
    let fib = cfg.build_fib().unwrap();
    let r = fib.vrfs[0].lookup(ip("198.18.2.1")).unwrap();
    let RouteTarget::Forward(g) = r.target() else { panic!("{r:?}") };
    assert!(g.is_multipath());
    let got: Vec<_> = g.nexthops().iter().map(|n| (n.port, n.labels[0], n.weight)).collect();
    assert_eq!(got, vec![(1, 1002, 2), (2, 1102, 1)]);
}

const BASE: &str = r#"[router]
name = "t"
addresses = ["198.18.255.1", "2001:db8:ff::1"]

[[port]]
name = "ce1"
interface = "t-ce1"
addresses = ["198.18.1.1/24", "2001:db8:1::1/64"]

[[port]]
name = "core"
interface = "t-core"
addresses = ["198.18.10.1/24", "2001:db8:10::1/64"]
"#;

/// Line of the first line of `extra` once appended to BASE.
fn first_extra_line() -> usize {
    BASE.lines().count() + 1
}

fn parse(extra: &str) -> Result<Config, ConfigError> {
    Config::from_str(&format!("{BASE}{extra}"), Path::new("t.toml"))
}

/// Asserts the error names `line` (relative to the extra text, 1-based) and `field`, and
/// that its message contains every `needle`.
#[track_caller]
fn assert_err(extra: &str, line: usize, field: &str, needles: &[&str]) {
    let e = parse(extra).expect_err("config should be rejected");
    let msg = e.to_string();
    assert_eq!(e.line(), Some(first_extra_line() + line - 1), "{msg}");
    assert_eq!(e.field(), Some(field), "{msg}");
    assert!(msg.starts_with(&format!("t.toml:{}: {field}: ", first_extra_line() + line - 1)), "{msg}");
    for n in needles {
        assert!(msg.contains(n), "{msg:?} lacks {n:?}");
    }
}

#[test]
fn syntax_error_has_line_and_column() {
    let e = Config::from_str("[router]\nname = \"x\"\n[[port]\n", Path::new("bad.toml")).unwrap_err();
    let ConfigError::Parse { line, column, .. } = &e else { panic!("{e:?}") };
    assert_eq!((*line, *column), (3, 8), "{e}");
    assert!(e.to_string().starts_with("bad.toml:3:"), "{e}");
}

#[test]
fn unknown_key_is_an_error() {
    let e =
        parse("[[route]]\nprefix = \"198.18.2.0/24\"\nvia = \"198.18.10.2\"\ngateway = \"x\"\n").unwrap_err();
    assert!(matches!(e, ConfigError::Parse { .. }), "{e:?}");
    assert_eq!(e.line(), Some(first_extra_line() + 3), "{e}");
    assert!(e.to_string().contains("gateway"), "{e}");
}

#[test]
fn missing_required_key_is_an_error() {
    let e = Config::from_str("[router]\nname = \"x\"\n\n[[port]]\nname = \"a\"\n", Path::new("m.toml"))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "m.toml:5: port.interface: port \"a\" needs interface = \"...\": the Linux interface to attach to"
    );
    let e = Config::from_str("[router]\nname = \"x\"\n\n[[port]]\nname = \"a\"\n", Path::new("m.toml"))
        .unwrap_err();
    assert_eq!(e.line(), Some(5), "{e}");
    let e = Config::from_str("[[port]]\nname = \"a\"\ninterface = \"a\"\n", Path::new("m.toml")).unwrap_err();
    assert_eq!(e.field(), Some("router"), "{e}");
}

#[test]
fn reserved_incoming_label_is_rejected() {
    assert_err("[[label]]\nin = 15\naction = \"pop\"\n", 2, "label.in", &["labels 0-15 are reserved"]);
}

#[test]
fn incoming_label_above_20_bits_is_rejected() {
    assert_err("[[label]]\nin = 1048576\naction = \"pop\"\n", 2, "label.in", &["1048576", "out of range"]);
    assert!(parse("[[label]]\nin = 1048575\naction = \"pop\"\n").is_ok());
}

#[test]
fn out_label_above_20_bits_is_rejected() {
    assert_err(
        "[[label]]\nin = 100\naction = \"swap\"\nvia = \"198.18.10.2\"\nout = [\n  200,\n  1048576,\n]\n",
        7,
        "label.out",
        &["1048576", "0 to 1048575"],
    );
}

#[test]
fn duplicate_incoming_label_is_rejected() {
    assert_err(
        "[[label]]\nin = 100\naction = \"pop\"\n\n[[label]]\nin = 100\naction = \"pop\"\n",
        6,
        "label.in",
        &[&format!("already defined at line {}", first_extra_line() + 1)],
    );
}

#[test]
fn duplicate_prefix_in_a_vrf_is_rejected() {
    let extra = "[[route]]\nprefix = \"198.18.2.0/24\"\nblackhole = true\n\n[[route]]\nprefix = \"198.18.2.0/24\"\nvia = \"198.18.10.2\"\n";
    assert_err(
        extra,
        6,
        "route.prefix",
        &["overlapping definitions", &format!("line {}", first_extra_line() + 1)],
    );
    // The same prefix in another VRF is fine.
    let ok = "[[vrf]]\nname = \"cust\"\n\n[[route]]\nprefix = \"198.18.2.0/24\"\nblackhole = true\n\n[[route]]\nprefix = \"198.18.2.0/24\"\nvrf = \"cust\"\nblackhole = true\n";
    let cfg = parse(ok).unwrap();
    let fib = cfg.build_fib().unwrap();
    assert_eq!(fib.vrfs[1].name, "cust");
    assert_eq!(fib.vrfs[1].lookup(ip("198.18.2.1")).unwrap().target(), &RouteTarget::Blackhole);
}

#[test]
fn reject_routes_come_from_the_file_and_bad_ones_are_refused() {
    use vmpls_fib::Reject;
    let ok = "[[route]]\nprefix = \"198.18.2.0/24\"\nreject = \"unreachable\"\n\n[[route]]\nprefix = \"198.18.3.0/24\"\nreject = \"prohibit\"\n";
    let fib = parse(ok).unwrap().build_fib().unwrap();
    assert_eq!(
        fib.vrfs[0].lookup(ip("198.18.2.1")).unwrap().target(),
        &RouteTarget::Reject(Reject::Unreachable)
    );
    assert_eq!(
        fib.vrfs[0].lookup(ip("198.18.3.1")).unwrap().target(),
        &RouteTarget::Reject(Reject::Prohibit)
    );
    assert_err(
        "[[route]]\nprefix = \"198.18.2.0/24\"\nreject = \"refuse\"\n",
        3,
        "route.reject",
        &["unknown reject \"refuse\"", "\"unreachable\"", "\"prohibit\""],
    );
    assert_err(
        "[[route]]\nprefix = \"198.18.2.0/24\"\nreject = \"unreachable\"\nvia = \"198.18.10.2\"\n",
        4,
        "route.via",
        &["a rejecting route takes no next hop"],
    );
    assert_err(
        "[[route]]\nprefix = \"198.18.2.0/24\"\nblackhole = true\nreject = \"prohibit\"\n",
        4,
        "route.reject",
        &["either a blackhole", "or rejects"],
    );
}

#[test]
fn route_over_a_connected_subnet_is_rejected() {
    assert_err(
        "[[route]]\nprefix = \"2001:db8:1::/64\"\nblackhole = true\n",
        2,
        "route.prefix",
        &["connected subnet of port \"ce1\""],
    );
    assert_err(
        "[[route]]\nprefix = \"198.18.255.1/32\"\nblackhole = true\n",
        2,
        "route.prefix",
        &["own addresses"],
    );
}

#[test]
fn prefix_with_host_bits_is_rejected_with_suggestion() {
    assert_err(
        "[[route]]\nprefix = \"198.18.2.1/24\"\nblackhole = true\n",
        2,
        "route.prefix",
        &["host bits", "did you mean 198.18.2.0/24?"],
    );
}

#[test]
fn duplicate_port_name_and_interface_are_rejected() {
    assert_err(
        "[[port]]\nname = \"core\"\ninterface = \"t-x\"\n",
        2,
        "port.name",
        &["\"core\" is already defined at line 11"],
    );
    assert_err(
        "[[port]]\nname = \"x\"\ninterface = \"t-core\"\n",
        3,
        "port.interface",
        &["already used by port \"core\""],
    );
}

#[test]
fn interface_name_too_long_is_rejected() {
    assert_err(
        "[[port]]\nname = \"x\"\ninterface = \"a-very-long-name\"\n",
        3,
        "port.interface",
        &["16 bytes", "at most 15"],
    );
}

#[test]
fn next_hop_on_unknown_port_is_rejected() {
    assert_err(
        "[[route]]\nprefix = \"198.18.2.0/24\"\nvia = \"198.18.10.2\"\nport = \"cor\"\n",
        4,
        "route.port",
        &["no port named \"cor\"", "ce1, core"],
    );
    assert_err(
        "[[label]]\nin = 100\naction = \"swap\"\nnexthops = [\n  { via = \"198.18.10.2\", port = \"nope\", out = [200] },\n]\n",
        5,
        "label.nexthops.port",
        &["no port named \"nope\""],
    );
}

#[test]
fn next_hop_not_on_the_ports_subnet_is_rejected() {
    assert_err(
        "[[route]]\nprefix = \"198.18.2.0/24\"\nport = \"core\"\nvia = \"198.18.99.2\"\n",
        4,
        "route.via",
        &[
            "198.18.99.2 is not on any subnet of port \"core\" (198.18.10.0/24, 2001:db8:10::/64); a next hop must be directly connected",
        ],
    );
}

#[test]
fn next_hop_without_port_must_be_on_some_subnet() {
    assert_err(
        "[[route]]\nprefix = \"198.18.2.0/24\"\nvia = \"198.18.99.2\"\n",
        3,
        "route.via",
        &["not on any port's subnet"],
    );
    let cfg = parse("[[route]]\nprefix = \"198.18.2.0/24\"\nvia = \"2001:db8:10::2\"\n").unwrap();
    let RouteAction::Forward(nhs) = &cfg.routes[0].action else { panic!() };
    assert_eq!(nhs[0].port, 1, "port found from the via's subnet");
}

#[test]
fn next_hop_that_is_our_own_address_is_rejected() {
    assert_err(
        "[[route]]\nprefix = \"198.18.2.0/24\"\nvia = \"198.18.10.1\"\nport = \"core\"\n",
        3,
        "route.via",
        &["own address"],
    );
}

#[test]
fn bad_address_syntax_is_rejected() {
    assert_err(
        "[[route]]\nprefix = \"198.18.2.0/24\"\nvia = \"198.18.10.x\"\n",
        3,
        "route.via",
        &["not an IPv4 or IPv6 address"],
    );
    assert_err(
        "[[route]]\nprefix = \"198.18.2.0\"\nblackhole = true\n",
        2,
        "route.prefix",
        &["expected address/prefix-length"],
    );
    assert_err(
        "[[route]]\nprefix = \"198.18.2.0/33\"\nblackhole = true\n",
        2,
        "route.prefix",
        &["/33", "at most /32"],
    );
    assert_err(
        "[[port]]\nname = \"x\"\ninterface = \"t-x\"\naddresses = [\"198.18.5.1\"]\n",
        4,
        "port.addresses",
        &["expected address/prefix-length"],
    );
    let e =
        Config::from_str("[router]\nname = \"r\"\naddresses = [\"198.18.255.1/32\"]\n", Path::new("r.toml"))
            .unwrap_err();
    assert_eq!((e.line(), e.field()), (Some(3), Some("router.addresses")), "{e}");
    let e = Config::from_str(
        "[router]\nname = \"r\"\naddresses = [\"198.18.255.1\", \"198.18.255.2\"]\n",
        Path::new("r.toml"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("at most one of each family"), "{e}");
}

#[test]
fn only_core_ports_accept_labels_unless_the_port_says_otherwise() {
    let extra = "[[vrf]]\nname = \"red\"\n\n[[port]]\nname = \"red1\"\ninterface = \"t-red1\"\nvrf = \"red\"\n\n\
                 [[port]]\nname = \"red2\"\ninterface = \"t-red2\"\nvrf = \"red\"\nmpls = true\n\n\
                 [[port]]\nname = \"core2\"\ninterface = \"t-core2\"\nmpls = false\n\n\
                 [[port]]\nname = \"tunnel\"\nkind = \"udp\"\nlocal = \"198.18.100.1\"\nremote = \"198.18.100.2\"\nvrf = \"red\"\n";
    let cfg = parse(extra).unwrap();
    let accepts: Vec<(&str, Option<bool>, LabelAcceptance)> =
        cfg.ports.iter().map(|p| (p.name.as_str(), p.mpls, cfg.port_label_acceptance(p))).collect();
    use LabelAcceptance::{Always, Never};
    assert_eq!(
        accepts,
        vec![
            ("ce1", None, Always),
            ("core", None, Always),
            ("red1", None, Never),
            ("red2", Some(true), Always),
            ("core2", Some(false), Never),
            ("tunnel", None, Always),
        ]
    );
    let fib = cfg.build_fib().unwrap();
    assert_eq!(fib.port_accepts_mpls, vec![true, true, false, true, false, true]);
}

#[test]
fn mpls_off_on_a_tunnel_or_not_a_boolean_is_rejected() {
    assert_err(
        "[[port]]\nname = \"tunnel\"\nkind = \"udp\"\nlocal = \"198.18.100.1\"\nremote = \"198.18.100.2\"\nmpls = false\n",
        6,
        "port.mpls",
        &["MPLS-in-UDP port carries only labelled frames"],
    );
    let e = parse("[[port]]\nname = \"x\"\ninterface = \"t-x\"\nmpls = \"no\"\n").unwrap_err();
    assert!(e.to_string().starts_with(&format!("t.toml:{}:", first_extra_line() + 3)), "{e}");
    assert!(e.to_string().contains("expected true or false"), "{e}");
}

#[test]
fn mtu_out_of_range_is_rejected() {
    assert_err("[[port]]\nname = \"x\"\ninterface = \"t-x\"\nmtu = 67\n", 4, "port.mtu", &["68 to 65535"]);
    assert_err("[[port]]\nname = \"x\"\ninterface = \"t-x\"\nmtu = 65536\n", 4, "port.mtu", &["68 to 65535"]);
    let cfg = parse("[[port]]\nname = \"x\"\ninterface = \"t-x\"\nmtu = 9000\n").unwrap();
    assert_eq!(cfg.ports[2].mtu, Some(9000));
}

#[test]
fn weight_zero_is_rejected() {
    assert_err(
        "[[route]]\nprefix = \"198.18.2.0/24\"\nnexthops = [\n  { via = \"198.18.10.2\", weight = 1 },\n  { via = \"198.18.1.2\", weight = 0 },\n]\n",
        5,
        "route.nexthops.weight",
        &["weight 0"],
    );
}

#[test]
fn empty_push_is_plain_ip() {
    let cfg = parse(
        "[[route]]\nprefix = \"198.18.2.0/24\"\nvia = \"198.18.10.2\"\npush = []\nttl-model = \"pipe\"\n",
    )
    .unwrap();
    let fib = cfg.build_fib().unwrap();
    let r = fib.vrfs[0].lookup(ip("198.18.2.3")).unwrap();
    let RouteTarget::Forward(g) = r.target() else { panic!() };
    assert!(g.nexthops()[0].labels.is_empty());
    assert_eq!(r.ttl_model(), TtlModel::Pipe);
}

#[test]
fn label_actions_are_built_as_written() {
    let extra = r#"[[vrf]]
name = "cust"

[[label]]
in = 100
action = "pop"
vrf = "cust"

[[label]]
in = 101
action = "pop"
via = "198.18.10.2"

[[label]]
in = 102
action = "swap"
out = [3]
via = "198.18.10.2"
port = "core"
ttl-model = "pipe"

[[label]]
in = 103
action = "swap"
nexthops = [
  { via = "198.18.10.2", out = [300, 301] },
  { via = "2001:db8:1::2", out = [400], weight = 3 },
]
"#;
    let fib = parse(extra).unwrap().build_fib().unwrap();
    assert_eq!(fib.labels.get(100).unwrap().action(), &LabelAction::PopAndLookup { vrf: 1 });
    for l in [101, 102] {
        let LabelAction::Forward(g) = &fib.labels.get(l).unwrap().action() else { panic!() };
        assert!(g.nexthops()[0].labels.is_empty(), "label {l} is a PHP pop");
        assert_eq!(g.nexthops()[0].via, Some(ip("198.18.10.2")));
    }
    assert_eq!(fib.labels.get(102).unwrap().ttl_model(), TtlModel::Pipe);
    let LabelAction::Forward(g) = &fib.labels.get(103).unwrap().action() else { panic!() };
    let got: Vec<_> = g.nexthops().iter().map(|n| (n.port, n.labels.clone(), n.weight)).collect();
    assert_eq!(got, vec![(1, vec![300, 301], 1), (0, vec![400], 3)]);
}

#[test]
fn swap_without_next_hop_or_out_is_rejected() {
    assert_err(
        "[[label]]\nin = 100\naction = \"swap\"\nout = [200]\n",
        3,
        "label.action",
        &["needs a next hop"],
    );
    assert_err(
        "[[label]]\nin = 100\naction = \"swap\"\nvia = \"198.18.10.2\"\n",
        4,
        "label.out",
        &["outgoing label"],
    );
    assert_err(
        "[[label]]\nin = 100\naction = \"swap\"\nvia = \"198.18.10.2\"\nout = []\n",
        5,
        "label.out",
        &["outgoing label"],
    );
}

#[test]
fn pop_with_out_or_misplaced_vrf_is_rejected() {
    assert_err(
        "[[label]]\nin = 100\naction = \"pop\"\nout = [200]\n",
        4,
        "label.out",
        &["pop takes no out labels"],
    );
    assert_err(
        "[[label]]\nin = 100\naction = \"pop\"\nvia = \"198.18.10.2\"\nvrf = \"default\"\n",
        5,
        "label.vrf",
        &["only to pop without a next hop"],
    );
    assert_err(
        "[[label]]\nin = 100\naction = \"pop\"\nvrf = \"cust\"\n",
        4,
        "label.vrf",
        &["VRF \"cust\" is not defined"],
    );
}

#[test]
fn unknown_enum_values_are_rejected() {
    assert_err("[[label]]\nin = 100\naction = \"push\"\n", 3, "label.action", &["\"swap\" or \"pop\""]);
    assert_err(
        "[[route]]\nprefix = \"198.18.2.0/24\"\nblackhole = true\nttl-model = \"short\"\n",
        4,
        "route.ttl-model",
        &["\"uniform\" or \"pipe\""],
    );
    assert_err(
        "[[port]]\nname = \"x\"\ninterface = \"t-x\"\nkind = \"af-xdp\"\n",
        4,
        "port.kind",
        &["\"af-xdp\"", "\"af-packet\", \"tap\", \"vhost-user\", \"udp\" or \"memif\""],
    );
}

#[test]
fn route_without_next_hop_or_with_both_forms_is_rejected() {
    assert_err(
        "[[route]]\nprefix = \"198.18.2.0/24\"\npush = [100]\n",
        2,
        "route.prefix",
        &["no next hop", "push alone"],
    );
    assert_err(
        "[[route]]\nprefix = \"198.18.2.0/24\"\nvia = \"198.18.10.2\"\nnexthops = [{ via = \"198.18.10.3\" }]\n",
        3,
        "route.via",
        &["not both"],
    );
    assert_err("[[route]]\nprefix = \"198.18.2.0/24\"\nnexthops = []\n", 3, "route.nexthops", &["empty"]);
    assert_err(
        "[[route]]\nprefix = \"198.18.2.0/24\"\nblackhole = true\nvia = \"198.18.10.2\"\n",
        4,
        "route.via",
        &["blackhole"],
    );
}

#[test]
fn implicit_null_inside_a_stack_is_rejected() {
    assert_err(
        "[[route]]\nprefix = \"198.18.2.0/24\"\nvia = \"198.18.10.2\"\npush = [100, 3]\n",
        4,
        "route.push",
        &["implicit null"],
    );
}

#[test]
fn reserved_outgoing_labels_are_refused_with_the_reason() {
    let route =
        |push: &str| format!("[[route]]\nprefix = \"198.18.2.0/24\"\nvia = \"198.18.10.2\"\npush = {push}\n");
    let route6 = |push: &str| {
        format!("[[route]]\nprefix = \"2001:db8:2::/64\"\nvia = \"2001:db8:10::2\"\npush = {push}\n")
    };
    let swap =
        |out: &str| format!("[[label]]\nin = 100\naction = \"swap\"\nvia = \"198.18.10.2\"\nout = {out}\n");
    assert_err(&route("[1002, 1]"), 4, "route.push", &["label 1 (router alert) is reserved"]);
    assert_err(&swap("[14]"), 5, "label.out", &["label 14 (OAM alert) is reserved"]);
    assert_err(&swap("[7, 100]"), 5, "label.out", &["entropy label indicator"]);
    assert_err(&swap("[13]"), 5, "label.out", &["GAL"]);
    assert_err(&swap("[5]"), 5, "label.out", &["unassigned"]);
    assert_err(&route("[0, 1002]"), 4, "route.push", &["only at the bottom"]);
    assert_err(&route("[1002, 2]"), 4, "route.push", &["IPv4 packets, whose explicit null is 0"]);
    assert_err(&route6("[0]"), 4, "route.push", &["IPv6 packets, whose explicit null is 2"]);
    // What the RFCs allow: explicit null of the payload's family at the bottom, implicit
    // null alone; a swap may end in either explicit null.
    for ok in
        [route("[1002, 0]"), route6("[1002, 2]"), route("[3]"), swap("[200, 2]"), swap("[0]"), swap("[3]")]
    {
        parse(&ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
}

#[test]
fn stacks_deeper_than_the_routers_forward_are_refused() {
    let stack =
        |n: u32| format!("[{}]", (0..n).map(|i| (1000 + i).to_string()).collect::<Vec<_>>().join(", "));
    let route =
        |push: &str| format!("[[route]]\nprefix = \"198.18.2.0/24\"\nvia = \"198.18.10.2\"\npush = {push}\n");
    let swap =
        |out: &str| format!("[[label]]\nin = 100\naction = \"swap\"\nvia = \"198.18.10.2\"\nout = {out}\n");
    let limit = vmpls_fib::MAX_STACK_DEPTH as u32;
    assert_eq!(limit, 32);
    assert_err(&route(&stack(limit + 1)), 4, "route.push", &["33 labels", "at most 32"]);
    assert_err(&route(&stack(300)), 4, "route.push", &["300 labels", "at most 32"]);
    assert_err(&swap(&stack(40)), 5, "label.out", &["40 labels", "at most 32"]);
    parse(&route(&stack(limit))).unwrap();
    parse(&swap(&stack(limit))).unwrap();
}

#[test]
fn two_ports_sharing_a_subnet_is_rejected() {
    assert_err(
        "[[port]]\nname = \"x\"\ninterface = \"t-x\"\naddresses = [\"198.18.1.2/24\"]\n",
        4,
        "port.addresses",
        &["subnet 198.18.1.0/24 is already on port \"ce1\""],
    );
}

#[test]
fn check_interfaces_points_at_the_interface_line() {
    let cfg = parse("").unwrap();
    assert!(check_interfaces(&cfg, |_| true).is_ok());
    let e = check_interfaces(&cfg, |n| n != "t-core").unwrap_err();
    assert_eq!((e.line(), e.field()), (Some(12), Some("port.interface")), "{e}");
    assert!(e.to_string().contains("no network interface \"t-core\""), "{e}");
}

#[test]
fn unreadable_file_names_the_path() {
    let e = Config::from_file(Path::new("/nonexistent/vmpls.toml")).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/vmpls.toml"), "{e}");
    assert!(std::error::Error::source(&e).is_some());
}

#[test]
fn error_message_reads_like_the_documented_example() {
    let path = Path::new("examples/seed/pe1.toml");
    let text = std::fs::read_to_string(examples_dir().join("seed/pe1.toml")).unwrap();
    let broken = text.replacen("via = \"198.18.10.2\"", "via = \"198.18.99.2\"", 1);
    assert_ne!(broken, text);
    let line = broken.lines().position(|l| l.contains("198.18.99.2")).unwrap() + 1;
    let e = Config::from_str(&broken, path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "examples/seed/pe1.toml:{line}: route.via: 198.18.99.2 is not on any subnet of port \"core\" \
             (198.18.10.0/24, 2001:db8:10::/64); a next hop must be directly connected"
        )
    );
}

#[test]
fn toml_shape_errors_show_the_parsers_message() {
    for (text, line, needle) in [
        ("[router]\nname = \"x\"\n\n[[port]]\nname = \"a\"\ninterface = 7\n", 6, "string"),
        ("[router]\nname = \"x\"\nnmae = \"y\"\n", 3, "nmae"),
        ("[router]\nname = \"x\"\n[[label]]\nin = \"100\"\naction = \"pop\"\n", 4, "integer"),
        ("[router]\nname = \"x\"\naddresses = \"198.18.255.1\"\n", 3, "expected a list"),
    ] {
        let e = Config::from_str(text, Path::new("s.toml")).unwrap_err();
        assert_eq!(e.line(), Some(line), "{e}");
        assert!(e.to_string().contains(needle), "{e}");
    }
}

#[test]
fn port_network_or_broadcast_address_is_rejected() {
    assert_err(
        "[[port]]\nname = \"x\"\ninterface = \"t-x\"\naddresses = [\"198.18.5.0/24\"]\n",
        4,
        "port.addresses",
        &["network address of 198.18.5.0/24", "like 198.18.5.1/24"],
    );
    assert_err(
        "[[port]]\nname = \"x\"\ninterface = \"t-x\"\naddresses = [\"198.18.5.255/24\"]\n",
        4,
        "port.addresses",
        &["broadcast address"],
    );
    // /31 point-to-point links use both addresses.
    assert!(parse("[[port]]\nname = \"x\"\ninterface = \"t-x\"\naddresses = [\"198.18.5.0/31\"]\n").is_ok());
}

#[test]
fn tap_port_names_the_tap_the_router_creates() {
    let cfg = parse(
        "[[port]]\nname = \"host\"\nkind = \"tap\"\ninterface = \"vm-tap0\"\nmac = \"02:00:5e:10:00:01\"\nmtu = 9000\naddresses = [\"198.18.3.1/24\"]\n",
    )
    .unwrap();
    let p = &cfg.ports[2];
    assert_eq!(p.kind, PortKind::Tap { mac: Some([0x02, 0x00, 0x5e, 0x10, 0x00, 0x01]) });
    assert_eq!(
        (p.interface.as_str(), p.mtu, p.interface_line),
        ("vm-tap0", Some(9000), first_extra_line() + 3)
    );
    assert_eq!(p.kind.name(), "tap");
    // Without mac: the TAP's own, derived by the port.
    let cfg = parse("[[port]]\nname = \"host\"\nkind = \"tap\"\ninterface = \"vm-tap0\"\n").unwrap();
    assert_eq!(cfg.ports[2].kind, PortKind::Tap { mac: None });
}

#[test]
fn vhost_user_port_takes_a_socket_instead_of_an_interface() {
    let cfg = parse(
        "[[port]]\nname = \"vm1\"\nkind = \"vhost-user\"\nsocket = \"/run/vmpls/vm1.sock\"\nmtu = 1500\naddresses = [\"198.18.3.1/24\"]\n",
    )
    .unwrap();
    let p = &cfg.ports[2];
    assert_eq!(
        p.kind,
        PortKind::VhostUser { socket: "/run/vmpls/vm1.sock".into(), mac: None, socket_group: None }
    );
    assert_eq!(p.interface, "/run/vmpls/vm1.sock");
    assert_eq!(p.interface_line, first_extra_line() + 3);
    assert_eq!(p.kind.name(), "vhost-user");
    let cfg = parse(
        "[[port]]\nname = \"vm1\"\nkind = \"vhost-user\"\nsocket = \"/tmp/a.sock\"\nmac = \"52-54-00-AB-CD-EF\"\n",
    )
    .unwrap();
    assert_eq!(
        cfg.ports[2].kind,
        PortKind::VhostUser {
            socket: "/tmp/a.sock".into(),
            mac: Some([0x52, 0x54, 0, 0xab, 0xcd, 0xef]),
            socket_group: None
        }
    );
}

#[test]
fn memif_port_takes_a_socket_a_role_and_an_id() {
    let cfg = parse(
        "[[port]]\nname = \"mf\"\nkind = \"memif\"\nsocket = \"/run/vmpls/memif0.sock\"\nrole = \"server\"\nid = 7\naddresses = [\"198.18.3.1/24\"]\n",
    )
    .unwrap();
    let p = &cfg.ports[2];
    assert_eq!(
        p.kind,
        PortKind::Memif {
            socket: "/run/vmpls/memif0.sock".into(),
            role: crate::MemifRole::Server,
            id: 7,
            mac: None
        }
    );
    assert_eq!((p.interface.as_str(), p.interface_line), ("/run/vmpls/memif0.sock", first_extra_line() + 3));
    assert_eq!(p.kind.name(), "memif");
    // A client with id 0 unless the file says otherwise, as DPDK's net_memif.
    let cfg = parse("[[port]]\nname = \"mf\"\nkind = \"memif\"\nsocket = \"/tmp/m.sock\"\n").unwrap();
    assert_eq!(
        cfg.ports[2].kind,
        PortKind::Memif { socket: "/tmp/m.sock".into(), role: crate::MemifRole::Client, id: 0, mac: None }
    );
}

#[test]
fn memif_keys_that_do_not_fit_name_file_and_line() {
    let memif = "[[port]]\nname = \"mf\"\nkind = \"memif\"\n";
    assert_err(memif, 2, "port.socket", &["port \"mf\" needs socket = \"/path\"", "memif control socket"]);
    assert_err(
        &format!("{memif}socket = \"/tmp/m.sock\"\nrole = \"master\"\n"),
        5,
        "port.role",
        &["unknown memif role \"master\"", "\"client\" (connects) or \"server\" (listens)"],
    );
    assert_err(
        &format!("{memif}socket = \"/tmp/m.sock\"\nid = -1\n"),
        5,
        "port.id",
        &["memif id -1 is out of range"],
    );
    assert_err(
        &format!("{memif}socket = \"/tmp/m.sock\"\ninterface = \"eth0\"\n"),
        5,
        "port.interface",
        &["a memif port takes no interface"],
    );
    assert_err(&format!("{memif}socket = \"m.sock\"\n"), 4, "port.socket", &["is not an absolute path"]);
    assert_err(
        "[[port]]\nname = \"t\"\nkind = \"tap\"\ninterface = \"t1\"\nrole = \"server\"\n",
        5,
        "port.role",
        &["a tap port takes no role"],
    );
    assert_err(
        "[[port]]\nname = \"t\"\ninterface = \"t1\"\nid = 3\n",
        4,
        "port.id",
        &["a af-packet port takes no id"],
    );
    // One port a socket, as for vhost-user.
    assert_err(
        "[[port]]\nname = \"a\"\nkind = \"memif\"\nsocket = \"/tmp/a.sock\"\n\n[[port]]\nname = \"b\"\nkind = \"vhost-user\"\nsocket = \"/tmp/a.sock\"\n",
        9,
        "port.socket",
        &["socket \"/tmp/a.sock\" is already used by port \"a\""],
    );
}

#[test]
fn vhost_user_socket_group_names_a_group_that_must_exist() {
    let text =
        "[[port]]\nname = \"vm1\"\nkind = \"vhost-user\"\nsocket = \"/tmp/a.sock\"\nsocket-group = \"kvm\"\n";
    let cfg = parse(text).unwrap();
    let line = first_extra_line() + 4;
    let PortKind::VhostUser { socket_group, .. } = &cfg.ports[2].kind else { panic!("{:?}", cfg.ports[2]) };
    assert_eq!(socket_group, &Some(crate::SocketGroup { name: "kvm".into(), line }));
    assert!(crate::check_socket_groups(&cfg, |g| g == "kvm").is_ok());
    let e = crate::check_socket_groups(&cfg, |_| false).unwrap_err();
    let ConfigError::Invalid { line: l, field, message, .. } = &e else { panic!("{e}") };
    assert_eq!((*l, field.as_str()), (line, "port.socket-group"));
    assert!(message.contains("no group \"kvm\""), "{message}");
    assert_err(&text.replace("\"kvm\"", "\"a b\""), 5, "port.socket-group", &["\"a b\" is not a group name"]);
    assert_err(
        "[[port]]\nname = \"t1\"\nkind = \"tap\"\ninterface = \"t1\"\nsocket-group = \"kvm\"\n",
        5,
        "port.socket-group",
        &["a tap port takes no socket-group"],
    );
}

#[test]
fn port_kind_keys_that_do_not_fit_are_rejected() {
    assert_err(
        "[[port]]\nname = \"vm1\"\nkind = \"vhost-user\"\n",
        2,
        "port.socket",
        &["port \"vm1\" needs socket = \"/path\""],
    );
    assert_err(
        "[[port]]\nname = \"vm1\"\nkind = \"vhost-user\"\nsocket = \"/tmp/a.sock\"\ninterface = \"eth9\"\n",
        5,
        "port.interface",
        &["vhost-user port takes no interface", "socket = \"/path\""],
    );
    assert_err(
        "[[port]]\nname = \"vm1\"\nkind = \"vhost-user\"\nsocket = \"vm1.sock\"\n",
        4,
        "port.socket",
        &["\"vm1.sock\" is not an absolute path"],
    );
    let long = format!("/{}", "s".repeat(MAX_SOCKET_PATH));
    assert_err(
        &format!("[[port]]\nname = \"vm1\"\nkind = \"vhost-user\"\nsocket = \"{long}\"\n"),
        4,
        "port.socket",
        &["at most 107"],
    );
    assert_err(
        "[[port]]\nname = \"t\"\nkind = \"tap\"\n",
        2,
        "port.interface",
        &["the name of the TAP device the router creates"],
    );
    assert_err(
        "[[port]]\nname = \"t\"\nkind = \"tap\"\ninterface = \"tap0\"\nsocket = \"/tmp/a.sock\"\n",
        5,
        "port.socket",
        &["tap port takes no socket", "kind = \"vhost-user\""],
    );
    assert_err(
        "[[port]]\nname = \"t\"\ninterface = \"eth9\"\nmac = \"02:00:00:00:00:01\"\n",
        4,
        "port.mac",
        &["af-packet port takes no mac"],
    );
    assert_err(
        "[[port]]\nname = \"t\"\nkind = \"tap\"\ninterface = \"tap0\"\nmtu = 65535\n",
        5,
        "port.mtu",
        &["expected 68 to 65521"],
    );
    assert_err(
        "[[port]]\nname = \"m\"\nkind = \"memif\"\nsocket = \"/run/m.sock\"\nmtu = 65535\n",
        5,
        "port.mtu",
        &["expected 68 to 65521", "memif"],
    );
}

#[test]
fn bad_macs_are_rejected() {
    for (mac, needle) in [
        ("02:00:00:00:00", "not a MAC address"),
        ("02:00:00:00:00:01:02", "not a MAC address"),
        ("02:00:00:00:00:1g", "not a MAC address"),
        ("02:00:00:00:00:100", "not a MAC address"),
        ("01:00:5e:00:00:01", "multicast"),
        ("00:00:00:00:00:00", "cannot be a port's MAC"),
    ] {
        assert_err(
            &format!("[[port]]\nname = \"t\"\nkind = \"tap\"\ninterface = \"tap0\"\nmac = \"{mac}\"\n"),
            5,
            "port.mac",
            &[needle],
        );
    }
}

#[test]
fn two_ports_on_one_tap_name_or_one_socket_are_rejected() {
    assert_err(
        "[[port]]\nname = \"t\"\nkind = \"tap\"\ninterface = \"t-core\"\n",
        4,
        "port.interface",
        &["interface \"t-core\" is already used by port \"core\""],
    );
    assert_err(
        "[[port]]\nname = \"a\"\nkind = \"vhost-user\"\nsocket = \"/tmp/a.sock\"\n\n[[port]]\nname = \"b\"\nkind = \"vhost-user\"\nsocket = \"/tmp/a.sock\"\n",
        9,
        "port.socket",
        &["socket \"/tmp/a.sock\" is already used by port \"a\" (line"],
    );
}

#[test]
fn check_ports_points_at_the_interface_or_the_mtu() {
    let cfg = parse("").unwrap();
    assert!(check_ports(&cfg, |_, _| Ok(())).is_ok());
    let e =
        check_ports(
            &cfg,
            |n, _| if n == "t-core" { Err("interface \"t-core\" is down".into()) } else { Ok(()) },
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "t.toml:{}: port.interface: port \"core\": interface \"t-core\" is down",
            first_extra_line() - 2
        )
    );
    // A configured MTU the interface cannot carry: the error names the mtu line.
    let cfg = Config::from_str(
        &BASE.replace("interface = \"t-core\"\n", "interface = \"t-core\"\nmtu = 9000\n"),
        Path::new("t.toml"),
    )
    .unwrap();
    let probe = |_: &str, mtu: Option<u32>| {
        if mtu.is_some_and(|m| m > 1500) { Err("MTU 9000 exceeds 1500".to_string()) } else { Ok(()) }
    };
    let e = check_ports(&cfg, probe).unwrap_err();
    assert_eq!((e.field(), e.line()), (Some("port.mtu"), Some(first_extra_line() - 1)), "{e}");
}

#[test]
fn check_interfaces_skips_the_ports_the_router_creates() {
    let cfg = parse(
        "[[port]]\nname = \"t\"\nkind = \"tap\"\ninterface = \"new-tap\"\n\n[[port]]\nname = \"vm\"\nkind = \"vhost-user\"\nsocket = \"/tmp/vm.sock\"\n",
    )
    .unwrap();
    let asked = std::cell::RefCell::new(Vec::new());
    check_interfaces(&cfg, |n| {
        asked.borrow_mut().push(n.to_string());
        n.starts_with("t-")
    })
    .unwrap();
    assert_eq!(asked.into_inner(), ["t-ce1", "t-core"]);
}

#[test]
fn the_vm_example_has_a_vhost_user_customer_port() {
    let cfg = load("vm/pe1.toml");
    let (_, ce) = cfg.port("ce1").expect("port ce1");
    assert!(matches!(ce.kind, PortKind::VhostUser { .. }), "{ce:?}");
    assert!(check_interfaces(&cfg, |n| n == "pe1-p").is_ok());
}

#[test]
fn port_offloads_can_be_forced_per_port() {
    let cfg = Config::from_str(
        &BASE.replace(
            "name = \"core\"",
            "name = \"core\"\noffloads = { tso = false, csum = false, mpls-gso = true }",
        ),
        Path::new("t.toml"),
    )
    .unwrap();
    let core = cfg.ports.iter().find(|p| p.name == "core").unwrap();
    assert_eq!(
        core.offloads,
        crate::OffloadOverrides {
            tso4: Some(false),
            tso6: Some(false),
            uso: None,
            csum: Some(false),
            mpls_gso: Some(true)
        }
    );
    let other = cfg.ports.iter().find(|p| p.name != "core").unwrap();
    assert_eq!(other.offloads, crate::OffloadOverrides::default());
    let e = Config::from_str(
        &BASE.replace("name = \"core\"", "name = \"core\"\noffloads = { gro = true }"),
        Path::new("t.toml"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("gro"), "{e}");
}

#[test]
fn limits_default_when_the_table_is_absent_or_empty() {
    assert_eq!(parse("").unwrap().limits, LimitsConfig::default());
    assert_eq!(parse("[limits]\n").unwrap().limits, LimitsConfig::default());
    let d = LimitsConfig::default();
    assert_eq!((d.icmp_rate, d.icmp_burst), (1000, 1000));
    assert_eq!((d.neighbor_request_rate, d.neighbor_request_burst), (100, 100));
    assert_eq!((d.neighbor_entries, d.neighbor_held_per_address, d.neighbor_held_total), (4096, 16, 256));
}

#[test]
fn limits_are_read_and_bursts_default_to_their_rate() {
    let l = parse(
        "[limits]\nicmp-rate = 10\nneighbor-request-rate = 5\nneighbor-request-burst = 20\n\
         neighbor-entries = 64\nneighbor-held-per-address = 2\nneighbor-held-total = 16\n",
    )
    .unwrap()
    .limits;
    assert_eq!(
        l,
        LimitsConfig {
            icmp_rate: 10,
            icmp_burst: 10,
            neighbor_request_rate: 5,
            neighbor_request_burst: 20,
            neighbor_entries: 64,
            neighbor_entries_per_port: None,
            neighbor_held_per_address: 2,
            neighbor_held_total: 16,
        }
    );
    let l = parse("[limits]\nneighbor-entries = 64\nneighbor-entries-per-port = 32\n").unwrap().limits;
    assert_eq!((l.neighbor_entries, l.neighbor_entries_per_port), (64, Some(32)));
    let l = parse("[limits]\nicmp-burst = 50\nneighbor-held-total = 3\n").unwrap().limits;
    assert_eq!((l.icmp_rate, l.icmp_burst), (1000, 50));
    assert_eq!((l.neighbor_held_per_address, l.neighbor_held_total), (3, 3), "per address fits the total");
}

#[test]
fn icmp_rate_zero_means_no_icmp_errors() {
    let l = parse("[limits]\nicmp-rate = 0\n").unwrap().limits;
    assert_eq!((l.icmp_rate, l.icmp_burst), (0, 0));
    assert_err(
        "[limits]\nicmp-rate = 0\nicmp-burst = 5\n",
        3,
        "limits.icmp-burst",
        &["icmp-rate = 0 sends no ICMP errors at all", "remove icmp-burst"],
    );
}

#[test]
fn zero_and_absurd_limits_are_rejected() {
    let cases: &[(&str, &[&str])] = &[
        ("icmp-rate = -1", &["-1 is out of range; expected 0 to 1000000"]),
        ("icmp-rate = 1000001", &["expected 0 to 1000000"]),
        ("icmp-burst = 0", &["expected 1 to 1000000", "set icmp-rate = 0"]),
        ("neighbor-request-rate = 0", &["expected 1 to 1000000", "resolve no next hop"]),
        ("neighbor-request-rate = 99999999999", &["99999999999 is out of range"]),
        ("neighbor-request-burst = 0", &["expected 1 to 1000000"]),
        ("neighbor-entries = 3", &["expected 16 to 1048576", "own next hops"]),
        ("neighbor-entries = 2000000", &["expected 16 to 1048576"]),
        ("neighbor-entries-per-port = 8", &["expected 16 to 4096", "own next hops"]),
        ("neighbor-entries-per-port = 5000", &["expected 16 to 4096", "part of neighbor-entries"]),
        ("neighbor-held-per-address = 0", &["expected 1 to 512"]),
        ("neighbor-held-total = 0", &["expected 1 to 512", "first frames"]),
        ("neighbor-held-total = 100000", &["expected 1 to 512", "starve forwarding"]),
    ];
    for (line, needles) in cases {
        let key = line.split(' ').next().unwrap();
        assert_err(&format!("[limits]\n{line}\n"), 2, &format!("limits.{key}"), needles);
    }
    assert_err(
        "[limits]\nneighbor-held-per-address = 8\nneighbor-held-total = 4\n",
        2,
        "limits.neighbor-held-per-address",
        &["8 is more than neighbor-held-total (4)"],
    );
}

#[test]
fn limits_shape_errors_name_the_line() {
    let e = parse("[limits]\nicmp-rate = \"fast\"\n").unwrap_err();
    assert!(matches!(e, ConfigError::Parse { .. }), "{e:?}");
    assert_eq!(e.line(), Some(first_extra_line() + 1), "{e}");
    assert!(e.to_string().contains("expected an integer"), "{e}");
    let e = parse("[limits]\narp-rate = 5\n").unwrap_err();
    assert_eq!(e.line(), Some(first_extra_line() + 1), "{e}");
    assert!(e.to_string().contains("arp-rate"), "{e}");
}

#[test]
fn reload_refuses_a_limits_change_and_says_to_restart() {
    let mut t = crate::tables::Tables::new(parse("[limits]\nicmp-rate = 10\n").unwrap());
    let e = crate::api::ControlError::from(
        t.reload(parse("[limits]\nicmp-rate = 20\nneighbor-entries = 64\n").unwrap()).unwrap_err(),
    );
    assert_eq!(e.kind, crate::api::ErrorKind::RestartNeeded, "{e}");
    assert!(
        e.message.contains(
            "[limits] changed: icmp-rate (10 -> 20), icmp-burst (10 -> 20), neighbor-entries (4096 -> 64)"
        ) && e.message.contains("restart the router"),
        "{e}"
    );
    assert_eq!(t.config().limits.icmp_rate, 10, "the running limits stay");
    // The same limits written another way are no change.
    let (_, sum) = t.reload(parse("[limits]\nicmp-burst = 10\nicmp-rate = 10\n").unwrap()).unwrap();
    assert!(sum.unchanged(), "{sum}");
}

#[test]
fn the_readme_limits_example_shows_the_defaults() {
    let readme = std::fs::read_to_string(examples_dir().join("../README.md")).unwrap();
    let start = readme.find("```toml\n[limits]\n").expect("README documents [limits]") + "```toml\n".len();
    let block = &readme[start..start + readme[start..].find("```").unwrap()];
    assert_eq!(parse(block).unwrap().limits, LimitsConfig::default());
    // The commented one in examples/seed/pe1.toml too, uncommented.
    let pe1 = std::fs::read_to_string(examples_dir().join("seed/pe1.toml")).unwrap();
    let start = pe1.find("# [limits]\n").expect("pe1.toml shows [limits]");
    let block: String = pe1[start..].lines().map(|l| format!("{}\n", l.trim_start_matches("# "))).collect();
    assert_eq!(parse(&block).unwrap().limits, LimitsConfig::default());
}

#[test]
fn poll_is_adaptive_unless_the_router_says_interrupt() {
    assert_eq!(parse("").unwrap().router.poll, crate::PollMode::Adaptive);
    let with = |value: &str| BASE.replacen("[router]\n", &format!("[router]\npoll = \"{value}\"\n"), 1);
    let c = Config::from_str(&with("interrupt"), Path::new("t.toml")).unwrap();
    assert_eq!(c.router.poll, crate::PollMode::Interrupt);
    let c = Config::from_str(&with("adaptive"), Path::new("t.toml")).unwrap();
    assert_eq!(c.router.poll, crate::PollMode::Adaptive);
    let e = Config::from_str(&with("busy"), Path::new("t.toml")).unwrap_err();
    assert_eq!(e.field(), Some("router.poll"), "{e}");
    assert_eq!(e.line(), Some(2), "{e}");
    assert!(
        e.to_string().contains("unknown poll mode \"busy\"; use \"adaptive\" (the default) or \"interrupt\""),
        "{e}"
    );
    // The loop reads it when it starts: a reload that changes it asks for a restart.
    let mut t = crate::tables::Tables::new(parse("").unwrap());
    let e = crate::api::ControlError::from(
        t.reload(Config::from_str(&with("interrupt"), Path::new("t.toml")).unwrap()).unwrap_err(),
    );
    assert_eq!(e.kind, crate::api::ErrorKind::RestartNeeded, "{e}");
    assert!(e.message.contains("router.poll changed (\"adaptive\" -> \"interrupt\")"), "{e}");
    let mut t = crate::tables::Tables::new(parse("").unwrap());
    assert!(t.reload(Config::from_str(&with("adaptive"), Path::new("t.toml")).unwrap()).is_ok());
}

#[test]
fn cpus_take_the_kernels_list_form_and_a_change_needs_a_restart() {
    assert_eq!(parse("").unwrap().router.cpus, None);
    let with = |value: &str| BASE.replacen("[router]\n", &format!("[router]\ncpus = \"{value}\"\n"), 1);
    let cpus = |value: &str| {
        Config::from_str(&with(value), Path::new("t.toml")).map(|c| c.router.cpus.unwrap().cpus().to_vec())
    };
    assert_eq!(cpus("1").unwrap(), [1]);
    assert_eq!(cpus("0,2-4").unwrap(), [0, 2, 3, 4]);
    assert_eq!(cpus(" 3, 1-2 ,1 ").unwrap(), [1, 2, 3], "sorted, each once");
    assert_eq!(cpus("1023").unwrap(), [1023]);
    for (bad, why) in [
        ("", "\"\" is not a CPU number"),
        ("one", "\"one\" is not a CPU number"),
        ("1,", "\"\" is not a CPU number"),
        ("-1", "\"\" is not a CPU number"),
        ("4-2", "the range 4-2 runs backwards"),
        ("1024", "CPU 1024 is beyond the largest CPU number, 1023"),
        ("0-70000", "\"70000\" is not a CPU number"),
    ] {
        let e = cpus(bad).unwrap_err();
        assert_eq!(e.field(), Some("router.cpus"), "{bad:?}: {e}");
        assert_eq!(e.line(), Some(2), "{e}");
        assert!(e.to_string().contains(&format!("{why}; write CPUs as \"1\" or \"0,2-3\"")), "{bad:?}: {e}");
    }
    // Shown as the kernel shows a list.
    for (text, shown) in [("1", "1"), ("3,1", "1,3"), ("0-1", "0,1"), ("0,2-4,6,7,9-12", "0,2-4,6,7,9-12")] {
        assert_eq!(crate::CpuList::parse(text).unwrap().to_string(), shown, "{text}");
    }
    // The threads are placed when the router starts: a reload that changes it asks for a
    // restart; the same list written otherwise is no change.
    let mut t = crate::tables::Tables::new(Config::from_str(&with("1,2"), Path::new("t.toml")).unwrap());
    assert!(t.reload(Config::from_str(&with("1-2"), Path::new("t.toml")).unwrap()).is_ok());
    let e = crate::api::ControlError::from(t.reload(parse("").unwrap()).unwrap_err());
    assert_eq!(e.kind, crate::api::ErrorKind::RestartNeeded, "{e}");
    assert!(e.message.contains("router.cpus changed (\"1,2\" -> any)"), "{e}");
}

#[test]
fn fast_path_is_auto_unless_the_router_says_tc_or_off() {
    assert_eq!(parse("").unwrap().router.fast_path, crate::FastPathMode::Auto);
    let with = |value: &str| BASE.replacen("[router]\n", &format!("[router]\nfast-path = \"{value}\"\n"), 1);
    let c = Config::from_str(&with("tc"), Path::new("t.toml")).unwrap();
    assert_eq!(c.router.fast_path, crate::FastPathMode::Tc);
    let c = Config::from_str(&with("off"), Path::new("t.toml")).unwrap();
    assert_eq!(c.router.fast_path, crate::FastPathMode::Off);
    let c = Config::from_str(&with("auto"), Path::new("t.toml")).unwrap();
    assert_eq!(c.router.fast_path, crate::FastPathMode::Auto);
    let e = Config::from_str(&with("xdp"), Path::new("t.toml")).unwrap_err();
    assert_eq!(e.field(), Some("router.fast-path"), "{e}");
    assert_eq!(e.line(), Some(2), "{e}");
    assert!(
        e.to_string().contains("unknown fast path \"xdp\"; use \"auto\" (the default), \"tc\" or \"off\""),
        "{e}"
    );
    // A reload cannot switch it: the programs are attached when the router starts.
    let mut t = crate::tables::Tables::new(parse("").unwrap());
    let e = crate::api::ControlError::from(
        t.reload(Config::from_str(&with("tc"), Path::new("t.toml")).unwrap()).unwrap_err(),
    );
    assert_eq!(e.kind, crate::api::ErrorKind::RestartNeeded, "{e}");
    assert!(e.message.contains("router.fast-path changed (\"auto\" -> \"tc\")"), "{e}");
    // Writing the default out changes nothing.
    let mut t = crate::tables::Tables::new(parse("").unwrap());
    assert!(t.reload(Config::from_str(&with("auto"), Path::new("t.toml")).unwrap()).is_ok());
}

#[test]
fn static_neighbors_in_the_config() {
    let n = |addr: &str, mac: &str, port: &str| {
        format!("\n[[neighbor]]\naddress = \"{addr}\"\nlladdr = \"{mac}\"\nport = \"{port}\"\n")
    };
    let c = parse(
        &(n("198.18.10.2", "02:00:00:00:10:02", "core") + &n("2001:db8:10::2", "02-00-00-00-10-02", "core")),
    )
    .unwrap();
    let core = c.ports.iter().position(|p| p.name == "core").unwrap() as PortId;
    assert_eq!(c.neighbors.len(), 2);
    assert_eq!(
        (c.neighbors[0].port, c.neighbors[0].address, c.neighbors[0].lladdr),
        (core, "198.18.10.2".parse().unwrap(), [2, 0, 0, 0, 0x10, 2])
    );
    assert!(parse("").unwrap().neighbors.is_empty());
    for (extra, field, msg) in [
        (n("198.18.10.2", "02:00:00:00:10:02", "nosuch"), "neighbor.port", "no port named \"nosuch\""),
        (n("198.18.10.x", "02:00:00:00:10:02", "core"), "neighbor.address", "not an IPv4 or IPv6 address"),
        (n("224.0.0.1", "02:00:00:00:10:02", "core"), "neighbor.address", "unicast"),
        (n("198.18.10.2", "02:00:00:00:10", "core"), "neighbor.lladdr", "not a MAC address"),
        (n("198.18.10.2", "01:00:5e:00:00:01", "core"), "neighbor.lladdr", "a neighbour needs a unicast MAC"),
        (
            n("198.18.10.2", "02:00:00:00:10:02", "core") + &n("198.18.10.2", "02:00:00:00:10:03", "core"),
            "neighbor.address",
            "already defined at line",
        ),
    ] {
        let e = parse(&extra).unwrap_err();
        assert_eq!(e.field(), Some(field), "{e}");
        assert!(e.to_string().contains(msg), "{e}");
    }
}

/// A config of `n` labelled /32 routes.
fn big_config(n: u32) -> String {
    let mut s = String::from(
        "[router]\nname = \"big\"\n\n[[port]]\nname = \"core\"\ninterface = \"core0\"\naddresses = [\"198.18.10.1/24\"]\n",
    );
    for i in 0..n {
        let a = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(198, 19, 0, 0)) + i);
        s.push_str(&format!(
            "\n[[route]]\nprefix = \"{a}/32\"\npush = [{}]\nvia = \"198.18.10.2\"\nport = \"core\"\n",
            16 + i % 1000
        ));
    }
    s
}

#[test]
fn a_hundred_thousand_routes_load_in_linear_time_and_errors_keep_their_line() {
    let text = big_config(100_000);
    let start = std::time::Instant::now();
    let cfg = Config::from_str(&text, Path::new("big.toml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.routes.len(), 100_000);
    cfg.build_fib().unwrap();
    // Generous for a debug build on a loaded 2-core machine; the quadratic line count
    // this replaced took minutes.
    assert!(start.elapsed() < std::time::Duration::from_secs(60), "{:?}", start.elapsed());
    // An error on the last line is reported with that line.
    let bad =
        format!("{text}\n[[route]]\nprefix = \"198.18.2.0/24\"\nvia = \"198.18.99.2\"\nport = \"core\"\n");
    let last = bad.lines().count();
    let e = Config::from_str(&bad, Path::new("big.toml")).unwrap_err().to_string();
    assert!(e.contains(&format!("big.toml:{}:", last - 1)), "{e} (the `via` line is {})", last - 1);
}

#[test]
fn fpm_users_are_user_names() {
    let text = |users: &str| {
        format!(
            "[router]\nname = \"r\"\n\n[frr]\n{users}\n\n[[port]]\nname = \"core\"\ninterface = \"t-core\"\n"
        )
    };
    let frr = |users: &str| Config::from_str(&text(users), Path::new("t.toml")).map(|c| c.frr.unwrap());
    assert_eq!(
        frr("fpm-users = [\"frr\", \"zebra\"]").unwrap().fpm_users,
        Some((vec!["frr".into(), "zebra".into()], 5))
    );
    assert_eq!(frr("").unwrap().fpm_users, None);
    for bad in ["fpm-users = [\"\"]", "fpm-users = [\"a:b\"]"] {
        let e = frr(bad).unwrap_err();
        assert_eq!((e.line(), e.field()), (Some(5), Some("frr.fpm-users")), "{e}");
    }
}

#[test]
fn the_pseudowire_channel_is_on_by_default_on_loopback_or_off() {
    let text = |line: &str| {
        format!(
            "[router]\nname = \"r\"\n\n[frr]\n{line}\n\n[[port]]\nname = \"core\"\ninterface = \"t-core\"\n"
        )
    };
    let frr = |line: &str| Config::from_str(&text(line), Path::new("t.toml")).map(|c| c.frr.unwrap());
    assert_eq!(frr("").unwrap().pw_channel, Some("127.0.0.1:2621".parse().unwrap()));
    assert_eq!(frr("pw-channel = \"off\"").unwrap().pw_channel, None);
    assert_eq!(frr("pw-channel = \"[::1]:3000\"").unwrap().pw_channel, Some("[::1]:3000".parse().unwrap()));
    for (bad, want) in [
        ("pw-channel = \"198.18.0.1:2621\"", "not a loopback address"),
        ("pw-channel = \"nowhere\"", "not an address and port"),
        ("pw-channel = \"127.0.0.1:2620\"", "is FPM's address"),
    ] {
        let e = frr(bad).unwrap_err();
        assert_eq!((e.line(), e.field()), (Some(5), Some("frr.pw-channel")), "{e}");
        assert!(e.to_string().contains(want), "{e}");
    }
}

#[test]
fn label_stack_and_prefix_errors_are_typed_and_read_as_before() {
    assert_eq!(check_out_stack(&[16, 3], None), Err(LabelStackError::ImplicitNullInStack));
    assert_eq!(
        check_out_stack(&[2], Some(true)).unwrap_err().to_string(),
        "label 2 (IPv6 explicit null) would announce the wrong payload: the route carries IPv4 packets, whose explicit null is 0"
    );
    assert_eq!(
        check_out_stack(&[1 << 20], None).unwrap_err().to_string(),
        "label 1048576 is out of range; labels are 0 to 1048575 (20 bits)"
    );
    let e = tables::parse_prefix("198.18.2.0/33", api::Family::Inet).unwrap_err();
    assert_eq!(e, PrefixError::TooLong { text: "198.18.2.0/33".into(), len: 33, max: 32 });
    assert_eq!(
        e.to_string(),
        "\"198.18.2.0/33\": prefix length /33 is longer than the address (at most /32)"
    );
    let e = tables::TablesError::from(e);
    assert_eq!(e.kind(), api::ErrorKind::Invalid);
    assert_eq!(e.message(), "\"198.18.2.0/33\": prefix length /33 is longer than the address (at most /32)");
}

#[test]
fn frr_mode_puts_a_port_in_the_vrf_the_kernel_has_its_interface_in() {
    let text = "[router]\nname = \"pe1\"\n\n[frr]\n\n[[vrf]]\nname = \"blue\"\n\n[[port]]\nname = \"ce1\"\ninterface = \"pe1-ce1\"\n\n[[port]]\nname = \"core\"\ninterface = \"pe1-p\"\n";
    let mut cfg = Config::from_str(text, Path::new("t.toml")).unwrap();
    let found = |n: &str| (n == "pe1-ce1").then(|| FoundInVrf { vrf: "red".into(), netns: true });
    place_ports_in_vrfs(&mut cfg, &["red".into(), "blue".into()], found).unwrap();
    assert_eq!(cfg.vrfs, ["default", "blue", "red"], "the kernel's VRFs join the file's, once");
    let (_, ce1) = cfg.port("ce1").unwrap();
    assert_eq!((ce1.vrf.as_str(), ce1.netns.as_deref()), ("red", Some("red")));
    assert_eq!(cfg.port_label_acceptance(ce1), LabelAcceptance::Never, "a VRF port refuses labels");
    let (_, core) = cfg.port("core").unwrap();
    assert_eq!((core.vrf.as_str(), core.netns.as_deref()), ("default", None));
    cfg.build_fib().unwrap();

    // A `vrf` key that says otherwise: an error naming both.
    let text = text.replace("interface = \"pe1-ce1\"\n", "interface = \"pe1-ce1\"\nvrf = \"blue\"\n");
    let mut cfg = Config::from_str(&text, Path::new("t.toml")).unwrap();
    let e = place_ports_in_vrfs(&mut cfg, &["red".into()], found).unwrap_err();
    assert_eq!((e.field(), e.line()), (Some("port.vrf"), Some(12)), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("vrf \"blue\"") && msg.contains("VRF \"red\""), "{msg}");
    // One that agrees is fine.
    let text = text.replace("vrf = \"blue\"", "vrf = \"red\"").replace("name = \"blue\"", "name = \"red\"");
    let mut cfg = Config::from_str(&text, Path::new("t.toml")).unwrap();
    place_ports_in_vrfs(&mut cfg, &["red".into()], found).unwrap();
    assert_eq!(cfg.vrfs, ["default", "red"]);
}
