//! Text output of the CLI's show commands, in iproute2's words and order. A route's line
//! is its `Display` (`api::IpRoute`, `api::MplsRoute`), which the tables' errors quote too.

use std::fmt::Write;

use crate::api::{Link, NeighState, Neighbor, Stats, Vrf};

/// `vrf show`: a line a VRF, its ports last; `-s` adds each VRF's traffic: its ports' (RX, TX) and what arrived under
/// its labels (LABELS).
pub fn vrfs(list: &[Vrf], stats: bool) -> String {
    let mut s = format!("{:<16} {:>10} {:<7} {:>8}  interfaces\n", "name", "table", "origin", "routes");
    for v in list {
        let table = v.table.map_or_else(|| "-".to_string(), |t| t.to_string());
        let ports = if v.interfaces.is_empty() { "-".to_string() } else { v.interfaces.join(" ") };
        let _ = writeln!(s, "{:<16} {:>10} {:<7} {:>8}  {ports}", v.name, table, v.origin, v.routes);
        if !stats {
            continue;
        }
        let Some(t) = &v.stats else {
            let _ = writeln!(s, "    no counters: the forwarding loop did not answer");
            continue;
        };
        let labels = if t.labels.is_empty() {
            "-".to_string()
        } else {
            t.labels.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
        };
        let _ = writeln!(s, "    {:<8} {:>12} {:>10}", "", "bytes", "packets");
        let _ = writeln!(s, "    {:<8} {:>12} {:>10}", "RX:", t.rx_bytes, t.rx_packets);
        let _ = writeln!(s, "    {:<8} {:>12} {:>10}", "TX:", t.tx_bytes, t.tx_packets);
        let _ = writeln!(
            s,
            "    {:<8} {:>12} {:>10}  labels {labels}",
            "LABELS:", t.label_bytes, t.label_packets
        );
    }
    s
}

/// `link show`, `-s` adds the counters.
pub fn links(list: &[Link], stats: bool) -> String {
    let mut s = String::new();
    for l in list {
        let state = l.state.flags_text();
        let _ = writeln!(
            s,
            "{}: {}: <{state}> mtu {} interface {} vrf {} mpls {}",
            l.index,
            l.name,
            l.mtu,
            l.interface,
            l.vrf,
            if l.mpls { "on" } else { "off" }
        );
        let offloads = if l.offloads.is_empty() { "none".to_string() } else { l.offloads.join(",") };
        let _ = writeln!(s, "    link/ether {} {} offloads {offloads}", l.address, l.kind);
        for a in &l.addresses {
            let fam = if a.contains(':') { "inet6" } else { "inet" };
            let _ = writeln!(s, "    {fam} {a}");
        }
        if stats {
            let t = &l.stats;
            let _ = writeln!(s, "    RX: {:>12} {:>10} {:>8}", "bytes", "packets", "dropped");
            let _ = writeln!(s, "        {:>12} {:>10} {:>8}", t.rx_bytes, t.rx_packets, t.rx_dropped);
            let _ = writeln!(s, "    TX: {:>12} {:>10} {:>8} {:>8}", "bytes", "packets", "dropped", "errors");
            let _ = writeln!(
                s,
                "        {:>12} {:>10} {:>8} {:>8}",
                t.tx_bytes, t.tx_packets, t.tx_dropped, t.tx_errors
            );
            if let Some(f) = &t.fast_path {
                let _ = writeln!(
                    s,
                    "    of which the fast path: rx {} packets {} bytes, tx {} packets {} bytes",
                    f.rx_packets, f.rx_bytes, f.tx_packets, f.tx_bytes
                );
            }
            if t.rx_kernel_dropped + t.errors + t.reopened > 0 || t.detached {
                let _ = writeln!(
                    s,
                    "    kernel rx dropped {}, port errors {}, reopened {}{}",
                    t.rx_kernel_dropped,
                    t.errors,
                    t.reopened,
                    if t.detached { ", detached" } else { "" }
                );
            }
        }
    }
    s
}

/// `pw show`: one line a pseudowire, as `ip`'s style: name, state, then key-value pairs.
pub fn pseudowires(list: &[crate::api::PwStatus]) -> String {
    let mut s = String::new();
    for p in list {
        let state = if p.up { "up" } else { "down" };
        let _ = write!(s, "{} {state}", p.name);
        if let Some(r) = &p.reason {
            let _ = write!(s, " ({r})");
        }
        match &p.vpls {
            Some(v) => {
                let _ = write!(s, " vpls {v}");
            }
            None => {
                let _ = write!(s, " attachment {}", p.attachment.as_deref().unwrap_or("-"));
            }
        }
        if let Some(spec) = &p.spec {
            let cw = if spec.control_word { "on" } else { "off" };
            let _ = write!(
                s,
                " local-label {} remote-label {} peer {} control-word {cw}",
                spec.local_label, spec.remote_label, spec.peer
            );
        }
        let _ = writeln!(
            s,
            " origin {} rx {}/{} tx {}/{}",
            p.origin, p.rx_frames, p.rx_bytes, p.tx_frames, p.tx_bytes
        );
    }
    s
}

/// `vpls show`: an instance a line (name, MACs, limits), then its members indented.
pub fn vpls(list: &[crate::api::VplsStatus]) -> String {
    let mut s = String::new();
    for v in list {
        let rate = if v.flood_rate == 0 { "unlimited".to_string() } else { v.flood_rate.to_string() };
        let _ = writeln!(
            s,
            "{} macs {}/{} mac-aging {} flood-rate {rate}",
            v.name, v.macs, v.mac_limit, v.mac_aging
        );
        for a in &v.attachments {
            let _ = writeln!(s, "    attachment {} {}", a.port, if a.up { "up" } else { "down" });
        }
        for p in &v.pseudowires {
            let state = if p.up { "up" } else { "down" };
            let _ = write!(s, "    pw {} {state}", p.name);
            if let Some(r) = &p.reason {
                let _ = write!(s, " ({r})");
            }
            if let Some(spec) = &p.spec {
                let cw = if spec.control_word { "on" } else { "off" };
                let _ = write!(
                    s,
                    " local-label {} remote-label {} peer {} control-word {cw}",
                    spec.local_label, spec.remote_label, spec.peer
                );
            }
            let _ = writeln!(s, " origin {}", p.origin);
        }
    }
    s
}

/// `bridge fdb show`, as iproute2's `bridge fdb show` prints learned entries:
/// `MAC dev PORT master VPLS` (`MAC pw NAME master VPLS` for a pseudowire).
pub fn fdb(list: &[crate::api::FdbEntry]) -> String {
    let mut s = String::new();
    for e in list {
        match (&e.ifname, &e.pw) {
            (_, Some(pw)) => {
                let _ = writeln!(s, "{} pw {pw} master {}", e.mac, e.master);
            }
            (dev, None) => {
                let _ = writeln!(s, "{} dev {} master {}", e.mac, dev.as_deref().unwrap_or("-"), e.master);
            }
        }
    }
    s
}

/// `neigh show`.
pub fn neighbors(list: &[Neighbor]) -> String {
    let mut s = String::new();
    for n in list {
        let state = match n.state {
            NeighState::Reachable => "REACHABLE",
            NeighState::Incomplete => "INCOMPLETE",
            NeighState::Permanent => "PERMANENT",
        };
        match &n.lladdr {
            Some(mac) => {
                let _ = writeln!(s, "{} dev {} lladdr {mac} {state}", n.dst, n.dev);
            }
            None => {
                let _ = writeln!(s, "{} dev {} {state}", n.dst, n.dev);
            }
        }
    }
    s
}

/// `stats`: per port (totals; a port the fast path serves has its share on the line
/// below), drops by reason, events; without `detail` only non-zero drops and events.
pub fn stats(st: &Stats, detail: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "ports:");
    let _ = writeln!(
        s,
        "  {:<12} {:>12} {:>14} {:>12} {:>14} {:>9} {:>9}",
        "port", "rx packets", "rx bytes", "tx packets", "tx bytes", "rx drop", "tx drop"
    );
    for p in &st.ports {
        let l = &p.link;
        let _ = writeln!(
            s,
            "  {:<12} {:>12} {:>14} {:>12} {:>14} {:>9} {:>9}",
            p.name,
            l.rx_packets,
            l.rx_bytes,
            l.tx_packets,
            l.tx_bytes,
            l.rx_dropped,
            l.tx_dropped + l.tx_errors
        );
        if let Some(f) = &l.fast_path {
            let _ = writeln!(
                s,
                "  {:<12} {:>12} {:>14} {:>12} {:>14}",
                "  fast path", f.rx_packets, f.rx_bytes, f.tx_packets, f.tx_bytes
            );
        }
    }
    let _ = writeln!(s, "drops: {}", st.total_drops());
    for c in st.drops.iter().filter(|c| detail || c.value > 0) {
        let _ = writeln!(s, "  {:<28} {}", c.name, c.value);
    }
    let _ = writeln!(s, "events:");
    for c in st.events.iter().filter(|c| detail || c.value > 0) {
        let _ = writeln!(s, "  {:<28} {}", c.name, c.value);
    }
    if !st.labels.is_empty() {
        let _ = writeln!(s, "labels:");
        let _ = writeln!(s, "  {:<10} {:>12} {:>14}", "in label", "packets", "bytes");
        for l in &st.labels {
            let _ = writeln!(s, "  {:<10} {:>12} {:>14}", l.label, l.packets, l.bytes);
        }
    }
    if !st.vrfs.is_empty() {
        let _ = writeln!(s, "vrfs:");
        let _ = writeln!(
            s,
            "  {:<12} {:>12} {:>14} {:>12} {:>14} {:>12} {:>14}",
            "vrf", "rx packets", "rx bytes", "tx packets", "tx bytes", "label pkts", "label bytes"
        );
        for v in &st.vrfs {
            let t = &v.stats;
            let _ = writeln!(
                s,
                "  {:<12} {:>12} {:>14} {:>12} {:>14} {:>12} {:>14}",
                v.vrf, t.rx_packets, t.rx_bytes, t.tx_packets, t.tx_bytes, t.label_packets, t.label_bytes
            );
        }
    }
    if !st.fast_path.is_empty() {
        let _ = writeln!(s, "fast path:");
        for c in &st.fast_path {
            let _ = writeln!(s, "  {:<28} {}", c.name, c.value);
        }
    }
    if !st.forwarding_loop.is_empty() {
        let get = |name: &str| st.forwarding_loop.iter().find(|c| c.name == name).map_or(0, |c| c.value);
        let (busy, idle) = (get("busy_us"), get("idle_us"));
        let share = if busy + idle > 0 { 100.0 * busy as f64 / (busy + idle) as f64 } else { 0.0 };
        let _ = writeln!(s, "forwarding loop: busy {share:.1} % of its awake time");
        if detail {
            for c in &st.forwarding_loop {
                let _ = writeln!(s, "  {:<28} {}", c.name, c.value);
            }
        }
    }
    if !st.frr.is_empty() {
        let _ = writeln!(s, "frr (zebra over FPM):");
        for c in &st.frr {
            let _ = writeln!(s, "  {:<28} {}", c.name, c.value);
        }
    }
    let _ = writeln!(s, "neighbors: {} ({} reachable)", st.neighbors, st.neighbors_reachable);
    if detail {
        let _ = writeln!(s, "routes: {} label, {} prefix", st.label_routes, st.prefix_routes);
        let _ = writeln!(s, "pipeline:");
        for p in &st.ports {
            let _ = writeln!(
                s,
                "  {:<12} rx {} tx {} tx_errors {} fast path rx {} tx {}",
                p.name, p.pipeline_rx, p.pipeline_tx, p.link.tx_errors, p.fast_path_rx, p.fast_path_tx
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        Counter, IpRoute, LinkState, LinkStats, MplsAction, MplsRoute, Nexthop, PortCounters, Protocol,
        RouteType,
    };

    fn nh(g: &str, dev: &str, l: &[u32], w: u32) -> Nexthop {
        Nexthop { gateway: Some(g.parse().unwrap()), dev: Some(dev.into()), labels: l.to_vec(), weight: w }
    }

    fn route(dst: &str, nhs: Vec<Nexthop>, p: Protocol) -> IpRoute {
        IpRoute {
            dst: dst.into(),
            vrf: "default".into(),
            kind: RouteType::Unicast,
            nexthops: nhs,
            ttl_propagate: true,
            protocol: p,
            prefsrc: None,
        }
    }

    #[test]
    fn vrfs_show_a_line_each_with_their_table_and_ports() {
        let red = Vrf {
            name: "red".into(),
            table: Some(1001),
            interfaces: vec!["ce1".into(), "ce2".into()],
            routes: 4,
            origin: "netns".into(),
            stats: Some(crate::api::VrfStats {
                rx_packets: 3,
                rx_bytes: 300,
                tx_packets: 2,
                tx_bytes: 200,
                label_packets: 2,
                label_bytes: 216,
                labels: vec![80, 81],
            }),
        };
        let cust = Vrf {
            name: "cust".into(),
            table: None,
            interfaces: vec![],
            routes: 0,
            origin: "config".into(),
            stats: None,
        };
        let head = "name                  table origin    routes  interfaces\n\
                    red                    1001 netns          4  ce1 ce2\n";
        let tail = "cust                      - config         0  -\n";
        assert_eq!(vrfs(&[red.clone(), cust.clone()], false), format!("{head}{tail}"));
        assert_eq!(
            vrfs(&[red, cust], true),
            format!(
                "{head}                    bytes    packets\n\
                 \x20   RX:               300          3\n\
                 \x20   TX:               200          2\n\
                 \x20   LABELS:           216          2  labels 80 81\n\
                 {tail}    no counters: the forwarding loop did not answer\n"
            )
        );
    }

    #[test]
    fn a_vrfs_traffic_is_its_ports_and_its_labels() {
        use crate::api::{LabelCounter, LinkStats, PortCounters};
        let port = |name: &str, rx: u64, tx: u64| PortCounters {
            name: name.into(),
            link: LinkStats {
                rx_packets: rx,
                rx_bytes: rx * 100,
                tx_packets: tx,
                tx_bytes: tx * 100,
                ..LinkStats::default()
            },
            pipeline_rx: 0,
            pipeline_tx: 0,
            fast_path_rx: 0,
            fast_path_tx: 0,
        };
        let stats = Stats {
            ports: vec![port("core", 50, 40), port("ce1", 3, 2), port("ce2", 1, 1)],
            drops: vec![],
            events: vec![],
            neighbors: 0,
            neighbors_reachable: 0,
            label_routes: 3,
            prefix_routes: 0,
            labels: vec![
                LabelCounter { label: 16, packets: 30, bytes: 3000 },
                LabelCounter { label: 80, packets: 2, bytes: 216 },
                LabelCounter { label: 81, packets: 1, bytes: 108 },
            ],
            fast_path: vec![],
            forwarding_loop: vec![],
            frr: vec![],
            vrfs: Vec::new(),
        };
        let red = stats.vrf(&["ce1".into(), "ce2".into()], vec![81, 80]);
        assert_eq!(
            red,
            crate::api::VrfStats {
                rx_packets: 4,
                rx_bytes: 400,
                tx_packets: 3,
                tx_bytes: 300,
                label_packets: 3,
                label_bytes: 324,
                labels: vec![80, 81],
            }
        );
        assert_eq!(stats.vrf(&[], vec![]), crate::api::VrfStats::default());
    }

    #[test]
    fn links_show_faults_only_when_there_are_some() {
        let link = |stats: LinkStats| Link {
            index: 1,
            name: "core".into(),
            interface: "pe1-p".into(),
            kind: "af-packet".into(),
            mtu: 1500,
            address: crate::api::Mac([2, 0, 0, 0, 0, 1]),
            vrf: "default".into(),
            mpls: true,
            addresses: vec!["198.18.10.1/24".into()],
            offloads: vec![],
            state: if stats.detached { LinkState::Detached } else { LinkState::Up },
            stats,
        };
        let healthy = links(&[link(LinkStats { rx_packets: 5, ..LinkStats::default() })], true);
        assert!(
            healthy.starts_with("1: core: <UP> mtu 1500 interface pe1-p vrf default mpls on\n"),
            "{healthy}"
        );
        let customer = Link { vrf: "red".into(), mpls: false, ..link(LinkStats::default()) };
        assert!(
            links(&[customer], false)
                .starts_with("1: core: <UP> mtu 1500 interface pe1-p vrf red mpls off\n")
        );
        assert!(!healthy.contains("reopened"), "{healthy}");
        let unplugged = Link { state: LinkState::NoCarrier, ..link(LinkStats::default()) };
        assert!(links(&[unplugged], false).starts_with("1: core: <NO-CARRIER,UP> mtu 1500"));
        let down = Link { state: LinkState::Down, ..link(LinkStats::default()) };
        assert!(links(&[down], false).starts_with("1: core: <DOWN> mtu 1500"));
        let hurt = LinkStats {
            rx_kernel_dropped: 3,
            errors: 2,
            reopened: 1,
            detached: true,
            ..LinkStats::default()
        };
        let text = links(&[link(hurt)], true);
        assert!(text.starts_with("1: core: <DETACHED> mtu 1500"), "{text}");
        assert!(text.contains("    kernel rx dropped 3, port errors 2, reopened 1, detached\n"), "{text}");
    }

    #[test]
    fn port_counters_are_totals_with_the_fast_paths_share() {
        let share = crate::api::FastPathShare {
            rx_packets: 990,
            rx_bytes: 99_000,
            tx_packets: 980,
            tx_bytes: 98_000,
        };
        let t = LinkStats {
            rx_packets: 1000,
            rx_bytes: 100_000,
            tx_packets: 990,
            tx_bytes: 99_000,
            fast_path: Some(share),
            ..LinkStats::default()
        };
        let st = Stats {
            ports: vec![PortCounters {
                name: "east".into(),
                link: t.clone(),
                pipeline_rx: 10,
                pipeline_tx: 10,
                fast_path_rx: 990,
                fast_path_tx: 980,
            }],
            drops: vec![],
            events: vec![],
            neighbors: 0,
            neighbors_reachable: 0,
            label_routes: 0,
            prefix_routes: 0,
            labels: vec![],
            fast_path: vec![],
            forwarding_loop: vec![],
            frr: vec![],
            vrfs: Vec::new(),
        };
        let text = stats(&st, false);
        assert!(
            text.contains(
                "  east                 1000         100000          990          99000         0         0\n    fast path           990          99000          980          98000\n"
            ),
            "{text}"
        );
        let link = Link {
            index: 1,
            name: "east".into(),
            interface: "p-pe2".into(),
            kind: "af-packet".into(),
            mtu: 65535,
            address: crate::api::Mac([2, 0, 0, 0, 0, 1]),
            vrf: "default".into(),
            mpls: true,
            addresses: vec![],
            offloads: vec![],
            state: LinkState::Up,
            stats: t,
        };
        let text = links(std::slice::from_ref(&link), true);
        assert!(
            text.contains("                1000 \n") || text.contains("        100000       1000"),
            "{text}"
        );
        assert!(
            text.contains(
                "    of which the fast path: rx 990 packets 99000 bytes, tx 980 packets 98000 bytes\n"
            ),
            "{text}"
        );
        let plain = Link { stats: LinkStats { fast_path: None, ..link.stats.clone() }, ..link };
        assert!(!links(&[plain], true).contains("fast path"));
    }

    #[test]
    fn ip_routes_read_like_iproute2() {
        let r = route("198.18.2.0/24", vec![nh("198.18.10.2", "core", &[100, 200], 1)], Protocol::Static);
        assert_eq!(r.to_string(), "198.18.2.0/24 encap mpls 100/200 via 198.18.10.2 dev core proto static");
        let r = IpRoute {
            ttl_propagate: false,
            ..route("198.18.3.0/24", vec![nh("198.18.10.2", "core", &[], 1)], Protocol::Boot)
        };
        assert_eq!(r.to_string(), "198.18.3.0/24 via 198.18.10.2 dev core ttl-propagate disabled");
        let c = IpRoute {
            prefsrc: Some("198.18.1.1".parse().unwrap()),
            nexthops: vec![Nexthop { gateway: None, dev: Some("ce1".into()), labels: vec![], weight: 1 }],
            ..route("198.18.1.0/24", vec![], Protocol::Kernel)
        };
        assert_eq!(c.to_string(), "198.18.1.0/24 dev ce1 proto kernel scope link src 198.18.1.1");
        let b = IpRoute { kind: RouteType::Blackhole, ..route("198.18.9.0/24", vec![], Protocol::Boot) };
        assert_eq!(b.to_string(), "blackhole 198.18.9.0/24");
        let u = IpRoute { kind: RouteType::Unreachable, ..route("198.18.9.0/24", vec![], Protocol::Static) };
        assert_eq!(u.to_string(), "unreachable 198.18.9.0/24 proto static");
        let p = IpRoute { kind: RouteType::Prohibit, ..route("2001:db8:9::/64", vec![], Protocol::Boot) };
        assert_eq!(p.to_string(), "prohibit 2001:db8:9::/64");
        let m = route(
            "198.18.2.0/24",
            vec![nh("198.18.10.2", "a", &[100], 2), nh("198.18.11.2", "b", &[101], 1)],
            Protocol::Static,
        );
        assert_eq!(
            m.to_string(),
            "198.18.2.0/24 proto static\n\tnexthop encap mpls 100 via 198.18.10.2 dev a weight 2\n\tnexthop encap mpls 101 via 198.18.11.2 dev b weight 1"
        );
    }

    #[test]
    fn label_routes_read_like_iproute2() {
        let m = MplsRoute {
            label: 100,
            action: MplsAction::Forward,
            nexthops: vec![nh("198.18.20.2", "core1", &[200], 1)],
            vrf: None,
            ttl_propagate: true,
            protocol: Protocol::Boot,
        };
        assert_eq!(m.to_string(), "100 as to 200 via inet 198.18.20.2 dev core1");
        let pop =
            MplsRoute { label: 101, nexthops: vec![nh("2001:db8:20::2", "core1", &[], 1)], ..m.clone() };
        assert_eq!(pop.to_string(), "101 via inet6 2001:db8:20::2 dev core1");
        let lookup = MplsRoute {
            label: 2001,
            action: MplsAction::Lookup,
            nexthops: vec![],
            vrf: Some("default".into()),
            ttl_propagate: true,
            protocol: Protocol::Static,
        };
        assert_eq!(lookup.to_string(), "2001 vrf default proto static");
    }

    #[test]
    fn stats_hide_zero_counters_unless_detailed() {
        let st = Stats {
            ports: vec![PortCounters {
                name: "core".into(),
                link: LinkStats { rx_packets: 5, ..LinkStats::default() },
                pipeline_rx: 5,
                pipeline_tx: 0,
                fast_path_rx: 0,
                fast_path_tx: 0,
            }],
            drops: vec![
                Counter { name: "unknown_label".into(), value: 3 },
                Counter { name: "no_route".into(), value: 0 },
            ],
            events: vec![Counter { name: "label_swap".into(), value: 0 }],
            neighbors: 1,
            neighbors_reachable: 1,
            label_routes: 2,
            prefix_routes: 4,
            labels: vec![crate::api::LabelCounter { label: 1002, packets: 5, bytes: 740 }],
            fast_path: Vec::new(),
            forwarding_loop: Vec::new(),
            frr: Vec::new(),
            vrfs: Vec::new(),
        };
        let short = stats(&st, false);
        assert!(!short.contains("fast path"), "{short}");
        assert!(short.contains("drops: 3\n  unknown_label"), "{short}");
        assert!(short.contains("labels:\n  in label") && short.contains("  1002 "), "{short}");
        assert!(!short.contains("no_route") && !short.contains("label_swap"), "{short}");
        let long = stats(&st, true);
        assert!(
            long.contains("no_route")
                && long.contains("label_swap")
                && long.contains("routes: 2 label, 4 prefix"),
            "{long}"
        );
        assert!(!short.contains("forwarding loop"), "{short}");
        let looped = Stats {
            forwarding_loop: vec![
                Counter { name: "busy_us".into(), value: 100 },
                Counter { name: "idle_us".into(), value: 300 },
                Counter { name: "slept_us".into(), value: 5000 },
            ],
            ..st.clone()
        };
        assert!(stats(&looped, false).contains(
            "forwarding loop: busy 25.0 % of its awake time
"
        ));
        assert!(stats(&looped, true).contains(
            "  slept_us                     5000
"
        ));
        let fast = Stats { fast_path: vec![Counter { name: "swap".into(), value: 7 }], ..st };
        assert!(
            stats(&fast, false).contains("fast path:\n  swap                         7\n"),
            "{}",
            stats(&fast, false)
        );
        assert!(!short.contains("vrfs:"), "{short}");
        let red = crate::api::VrfCounters {
            vrf: "red".into(),
            stats: crate::api::VrfStats {
                rx_packets: 3,
                label_packets: 2,
                label_bytes: 216,
                ..Default::default()
            },
        };
        let with_vrf = stats(&Stats { vrfs: vec![red], ..fast }, false);
        assert!(with_vrf.contains("vrfs:\n  vrf "), "{with_vrf}");
        let line = with_vrf.lines().find(|l| l.starts_with("  red ")).unwrap_or_default();
        assert_eq!(
            line.split_whitespace().collect::<Vec<_>>(),
            ["red", "3", "0", "0", "0", "2", "216"],
            "{with_vrf}"
        );
    }
}
