//! The text form of the API's routes: iproute2's words and order, so that a `route show`
//! line can be pasted back after `route add`, and an error can quote the route it is about.
//!
//! ```text
//! 198.18.1.0/24 dev ce1 proto kernel scope link src 198.18.1.1
//! 198.18.2.0/24 encap mpls 1002 via 198.18.10.2 dev core proto static
//! 1002 as to 2002 via inet 198.18.20.2 dev east proto static
//! 2001 vrf default proto static
//! ```

use std::fmt::{self, Write};
use std::net::IpAddr;

use super::{IpRoute, MplsAction, MplsRoute, Nexthop, Protocol};

fn labels(l: &[u32]) -> String {
    l.iter().map(u32::to_string).collect::<Vec<_>>().join("/")
}

fn proto(p: Protocol) -> String {
    match p {
        Protocol::Boot => String::new(),
        p => format!(" proto {}", p.name()),
    }
}

fn family_word(a: IpAddr) -> &'static str {
    if a.is_ipv4() { "inet" } else { "inet6" }
}

/// A next hop's words: `encap mpls L/L via G dev D` (prefix routes) or
/// `as to L/L via inet G dev D` (label routes).
fn nexthop_words(n: &Nexthop, mpls: bool) -> String {
    let mut s = String::new();
    if !n.labels.is_empty() {
        if mpls {
            let _ = write!(s, " as to {}", labels(&n.labels));
        } else {
            let _ = write!(s, " encap mpls {}", labels(&n.labels));
        }
    }
    if let Some(g) = n.gateway {
        if mpls {
            let _ = write!(s, " via {} {g}", family_word(g));
        } else {
            let _ = write!(s, " via {g}");
        }
    }
    if let Some(d) = &n.dev {
        let _ = write!(s, " dev {d}");
    }
    s
}

fn multipath(out: &mut String, nhs: &[Nexthop], mpls: bool) {
    for n in nhs {
        let _ = write!(out, "\n\tnexthop{} weight {}", nexthop_words(n, mpls), n.weight);
    }
}

/// A destination as iproute2 prints it: `default` for 0.0.0.0/0 and ::/0.
fn dst_word(dst: &str) -> &str {
    if dst.ends_with("/0") { "default" } else { dst }
}

/// One prefix route as `ip route show` prints it.
fn ip_route_line(r: &IpRoute) -> String {
    let mut s = String::new();
    let dst = dst_word(&r.dst);
    if !r.kind.forwards() {
        let _ = write!(s, "{} {dst}{}", r.kind.name(), proto(r.protocol));
    } else if let [n] = r.nexthops.as_slice() {
        let _ = write!(s, "{dst}{}{}", nexthop_words(n, false), proto(r.protocol));
        if n.weight != 1 {
            let _ = write!(s, " weight {}", n.weight);
        }
    } else {
        let _ = write!(s, "{dst}{}", proto(r.protocol));
    }
    if r.protocol == Protocol::Kernel {
        s.push_str(" scope link");
    }
    if let Some(src) = r.prefsrc {
        let _ = write!(s, " src {src}");
    }
    if !r.ttl_propagate {
        s.push_str(" ttl-propagate disabled");
    }
    if r.nexthops.len() > 1 {
        multipath(&mut s, &r.nexthops, false);
    }
    s
}

/// One label route as `ip -f mpls route show` prints it; pop-and-lookup routes show as
/// `LABEL vrf NAME`.
fn mpls_route_line(r: &MplsRoute) -> String {
    let mut s = r.label.to_string();
    match (&r.action, r.nexthops.as_slice()) {
        (MplsAction::Lookup, _) => {
            let _ = write!(s, " vrf {}", r.vrf.as_deref().unwrap_or("default"));
        }
        (MplsAction::Forward, [n]) => {
            s.push_str(&nexthop_words(n, true));
            if n.weight != 1 {
                let _ = write!(s, " weight {}", n.weight);
            }
        }
        (MplsAction::Forward, _) => {}
    }
    s.push_str(&proto(r.protocol));
    if !r.ttl_propagate {
        s.push_str(" ttl-propagate disabled");
    }
    if r.action == MplsAction::Forward && r.nexthops.len() > 1 {
        multipath(&mut s, &r.nexthops, true);
    }
    s
}

impl fmt::Display for IpRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&ip_route_line(self))
    }
}

impl fmt::Display for MplsRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&mpls_route_line(self))
    }
}
