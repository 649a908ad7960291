//! The seed topology's routers (pe1, p, pe2: their ports, addresses and links) and the
//! TOML configs `vmpls lab seed` gives them, apart from the lab that runs them so that
//! the two-host lab (`hosts`) and the QEMU labs build on the same configs.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;

use crate::IpPrefix;

/// The variable parts of the seed topology and its router configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedParams {
    /// The label pe1 pushes toward p for traffic to ce2.
    pub pe1_push: u32,
    /// The label p swaps `pe1_push` to, toward pe2.
    pub p_to_pe2: u32,
    /// The label pe2 pushes toward p for traffic to ce1.
    pub pe2_push: u32,
    /// The label p swaps `pe2_push` to, toward pe1.
    pub p_to_pe1: u32,
    /// Penultimate-hop popping: p swaps to implicit null (3) and the egress PEs get
    /// plain IP.
    pub php: bool,
    /// MTU of the customer links (ce1 -- pe1, pe2 -- ce2).
    pub customer_mtu: u32,
    /// MTU of the core links (pe1 -- p, p -- pe2). The default, 65535, lets super-frames
    /// pass between the routers as single jumbo frames.
    pub core_mtu: u32,
    /// Write each port's MTU into the configs (`mtu = N`); by default the routers use
    /// the interface's MTU.
    pub mtu_in_config: bool,
    /// Plain IP routing instead of the LSP: prefix routes with no labels on all three
    /// routers (the `vmpls-ip` mode).
    pub ip_only: bool,
    /// `fast-path = "tc"` in every router's config; without it `"off"`, the routers'
    /// own pipelines alone (what the lab's and the tests' `vmpls-mpls` modes measure).
    pub fast_path: bool,
    /// No `fast-path` line in the configs: the routers' default, `"auto"` (wins over
    /// [`SeedParams::fast_path`]).
    pub fast_path_auto: bool,
    /// ECMP toward ce2 over the one core link of each hop: pe1's routes to ce2 have two
    /// next hops (labels `pe1_push` and `pe1_push + 100`, weights 1:1) and p swaps each
    /// over two next hops (to `p_to_pe2` and `p_to_pe2 + 100`, weights 3:1), which pe2
    /// pops: every frame is hashed and its next hop selected at both hops, on the same
    /// links as the single path (the `-ecmp` modes).
    pub ecmp: bool,
    /// `poll = "interrupt"` in every router's config; without it the default, `"adaptive"`.
    pub poll_interrupt: bool,
    /// `cpus = "..."` in every router's config: the CPUs its threads run on.
    pub cpus: Option<String>,
    /// The core links are memif ports (shared memory, no kernel) instead of the veth
    /// pairs, their control sockets in this directory: pe1 -- p on `pe1-p.sock` (pe1
    /// listens), p -- pe2 on `p-pe2.sock` (p listens). The veths stay, unused.
    pub memif_core: Option<PathBuf>,
}

impl Default for SeedParams {
    fn default() -> Self {
        Self {
            pe1_push: 1002,
            p_to_pe2: 2002,
            pe2_push: 1001,
            p_to_pe1: 2001,
            php: false,
            customer_mtu: 1500,
            core_mtu: 65535,
            mtu_in_config: false,
            ip_only: false,
            fast_path: false,
            fast_path_auto: false,
            ecmp: false,
            poll_interrupt: false,
            cpus: None,
            memif_core: None,
        }
    }
}

/// One generated router config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterConfig {
    /// The router (and host) name: `pe1`, `p` or `pe2`.
    pub router: String,
    /// The TOML text for `vmpls run --config`.
    pub toml: String,
}

/// ce1's addresses and gateway.
pub const CE1_V4: &str = "198.18.1.2/24";
/// ce1's IPv6 address.
pub const CE1_V6: &str = "2001:db8:1::2/64";
/// ce2's IPv4 address.
pub const CE2_V4: &str = "198.18.2.2/24";
/// ce2's IPv6 address.
pub const CE2_V6: &str = "2001:db8:2::2/64";

pub(crate) struct Port {
    pub(crate) name: &'static str,
    pub(crate) interface: &'static str,
    pub(crate) v4: &'static str,
    pub(crate) v6: &'static str,
    pub(crate) core: bool,
}

pub(crate) struct Router {
    pub(crate) name: &'static str,
    pub(crate) addresses: [&'static str; 2],
    pub(crate) ports: [Port; 2],
    /// Static routes in kernel-ip mode: (destination, gateway).
    pub(crate) kernel_routes: &'static [(&'static str, &'static str)],
}

pub(crate) const ROUTERS: [Router; 3] = [
    Router {
        name: "pe1",
        addresses: ["198.18.255.1", "2001:db8:ff::1"],
        ports: [
            Port {
                name: "ce1",
                interface: "pe1-ce1",
                v4: "198.18.1.1/24",
                v6: "2001:db8:1::1/64",
                core: false,
            },
            Port {
                name: "core",
                interface: "pe1-p",
                v4: "198.18.10.1/24",
                v6: "2001:db8:10::1/64",
                core: true,
            },
        ],
        kernel_routes: &[("198.18.2.0/24", "198.18.10.2"), ("2001:db8:2::/64", "2001:db8:10::2")],
    },
    Router {
        name: "p",
        addresses: ["198.18.255.2", "2001:db8:ff::2"],
        ports: [
            Port {
                name: "west",
                interface: "p-pe1",
                v4: "198.18.10.2/24",
                v6: "2001:db8:10::2/64",
                core: true,
            },
            Port {
                name: "east",
                interface: "p-pe2",
                v4: "198.18.20.1/24",
                v6: "2001:db8:20::1/64",
                core: true,
            },
        ],
        kernel_routes: &[
            ("198.18.1.0/24", "198.18.10.1"),
            ("2001:db8:1::/64", "2001:db8:10::1"),
            ("198.18.2.0/24", "198.18.20.2"),
            ("2001:db8:2::/64", "2001:db8:20::2"),
        ],
    },
    Router {
        name: "pe2",
        addresses: ["198.18.255.3", "2001:db8:ff::3"],
        ports: [
            Port {
                name: "core",
                interface: "pe2-p",
                v4: "198.18.20.2/24",
                v6: "2001:db8:20::2/64",
                core: true,
            },
            Port {
                name: "ce2",
                interface: "pe2-ce2",
                v4: "198.18.2.1/24",
                v6: "2001:db8:2::1/64",
                core: false,
            },
        ],
        kernel_routes: &[("198.18.1.0/24", "198.18.20.1"), ("2001:db8:1::/64", "2001:db8:20::1")],
    },
];

/// (host a, interface a, host b, interface b, core link?)
pub(crate) const LINKS: [(&str, &str, &str, &str, bool); 4] = [
    ("ce1", "ce1-pe1", "pe1", "pe1-ce1", false),
    ("pe1", "pe1-p", "p", "p-pe1", true),
    ("p", "p-pe2", "pe2", "pe2-p", true),
    ("pe2", "pe2-ce2", "ce2", "ce2-pe2", false),
];

/// The core link `interface` belongs to, named by its first end (`pe1-p`, `p-pe2`), and
/// whether `interface` is that first end (the memif server of [`SeedParams::memif_core`]).
fn memif_link(interface: &str) -> Option<(&'static str, bool)> {
    LINKS
        .iter()
        .filter(|(_, _, _, _, core)| *core)
        .find(|(_, a_if, _, b_if, _)| interface == *a_if || interface == *b_if)
        .map(|(_, a_if, _, _, _)| (*a_if, interface == *a_if))
}

pub(crate) fn prefix(s: &str) -> IpPrefix {
    // The constants above are valid; a failure here is a bug caught by the tests.
    s.parse().unwrap_or_else(|e| panic!("bad built-in prefix {s}: {e}"))
}

pub(crate) fn addr(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("bad built-in address {s}: {e}"))
}

/// The three router configs (pe1, p, pe2) of the seed lab, in the format of
/// `examples/seed/*.toml`; with default [`SeedParams`] they say what those files say.
pub fn router_configs(params: &SeedParams) -> Vec<RouterConfig> {
    ROUTERS
        .iter()
        .map(|r| RouterConfig { router: r.name.to_string(), toml: router_config(r, params) })
        .collect()
}

fn router_config(r: &Router, params: &SeedParams) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(s, "# {}: generated by vmpls lab seed.\n", r.name);
    let _ = writeln!(s, "[router]\nname = \"{}\"", r.name);
    let _ = writeln!(s, "addresses = [\"{}\", \"{}\"]", r.addresses[0], r.addresses[1]);
    if !params.fast_path_auto {
        let _ = writeln!(s, "fast-path = \"{}\"", if params.fast_path { "tc" } else { "off" });
    }
    if params.poll_interrupt {
        let _ = writeln!(s, "poll = \"interrupt\"");
    }
    if let Some(cpus) = &params.cpus {
        let _ = writeln!(s, "cpus = \"{cpus}\"");
    }
    for port in &r.ports {
        let _ = writeln!(s, "\n[[port]]\nname = \"{}\"", port.name);
        let memif = params.memif_core.as_ref().zip(memif_link(port.interface));
        match memif {
            Some((dir, (link, listens))) => {
                let role = if listens { "server" } else { "client" };
                let socket = dir.join(format!("{link}.sock"));
                let _ = writeln!(s, "kind = \"memif\"\nsocket = \"{}\"\nrole = \"{role}\"", socket.display());
            }
            None => {
                let _ = writeln!(s, "interface = \"{}\"", port.interface);
            }
        }
        let _ = writeln!(s, "addresses = [\"{}\", \"{}\"]", port.v4, port.v6);
        // A memif has no interface MTU to inherit: it takes the core's, as far as memif goes.
        if params.mtu_in_config || memif.is_some() {
            let mtu = match (port.core, memif) {
                (true, Some(_)) => params.core_mtu.min(vmpls_control::TAP_MEMIF_MAX_MTU),
                (true, None) => params.core_mtu,
                (false, _) => params.customer_mtu,
            };
            let _ = writeln!(s, "mtu = {mtu}");
        }
    }
    let push_route = |s: &mut String, pfx: &str, label: u32, via: &str| {
        let _ = writeln!(
            s,
            "\n[[route]]\nprefix = \"{pfx}\"\npush = [{label}]\nvia = \"{via}\"\nport = \"core\""
        );
    };
    let pop_label = |s: &mut String, label: u32| {
        let _ = writeln!(s, "\n[[label]]\nin = {label}\naction = \"pop\"");
    };
    let swap_label = |s: &mut String, label: u32, out: u32, via: &str, port: &str| {
        let _ = writeln!(
            s,
            "\n[[label]]\nin = {label}\naction = \"swap\"\nout = [{out}]\nvia = \"{via}\"\nport = \"{port}\""
        );
    };
    if params.ip_only {
        let ip_route = |s: &mut String, pfx: &str, via: &str, port: &str| {
            let _ = writeln!(s, "\n[[route]]\nprefix = \"{pfx}\"\nvia = \"{via}\"\nport = \"{port}\"");
        };
        for (dest, via) in r.kernel_routes {
            let port = r
                .ports
                .iter()
                .find(|p| prefix(p.v4).contains(addr(via)) || prefix(p.v6).contains(addr(via)))
                .map_or("core", |p| p.name);
            ip_route(&mut s, dest, via, port);
        }
        return s;
    }
    let ecmp_route = |s: &mut String, pfx: &str, label: u32, via: &str| {
        let _ = writeln!(
            s,
            "\n[[route]]\nprefix = \"{pfx}\"\nnexthops = [\n  {{ push = [{label}], via = \"{via}\", port = \"core\" }},\n  {{ push = [{}], via = \"{via}\", port = \"core\" }},\n]",
            label + 100
        );
    };
    let ecmp_swap = |s: &mut String, label: u32, out: u32, via: &str, port: &str| {
        let _ = writeln!(
            s,
            "\n[[label]]\nin = {label}\naction = \"swap\"\nnexthops = [\n  {{ out = [{out}], via = \"{via}\", port = \"{port}\", weight = 3 }},\n  {{ out = [{}], via = \"{via}\", port = \"{port}\" }},\n]",
            out + 100
        );
    };
    match r.name {
        "pe1" if params.ecmp => {
            ecmp_route(&mut s, "198.18.2.0/24", params.pe1_push, "198.18.10.2");
            ecmp_route(&mut s, "2001:db8:2::/64", params.pe1_push, "2001:db8:10::2");
            if !params.php {
                pop_label(&mut s, params.p_to_pe1);
            }
        }
        "p" if params.ecmp && !params.php => {
            for label in [params.pe1_push, params.pe1_push + 100] {
                ecmp_swap(&mut s, label, params.p_to_pe2, "198.18.20.2", "east");
            }
            swap_label(&mut s, params.pe2_push, params.p_to_pe1, "198.18.10.1", "west");
        }
        "pe1" => {
            push_route(&mut s, "198.18.2.0/24", params.pe1_push, "198.18.10.2");
            push_route(&mut s, "2001:db8:2::/64", params.pe1_push, "2001:db8:10::2");
            if !params.php {
                pop_label(&mut s, params.p_to_pe1);
            }
        }
        "p" => {
            let (to_pe2, to_pe1) = if params.php { (3, 3) } else { (params.p_to_pe2, params.p_to_pe1) };
            swap_label(&mut s, params.pe1_push, to_pe2, "198.18.20.2", "east");
            swap_label(&mut s, params.pe2_push, to_pe1, "198.18.10.1", "west");
        }
        _ => {
            if !params.php {
                pop_label(&mut s, params.p_to_pe2);
            }
            if params.ecmp && !params.php {
                pop_label(&mut s, params.p_to_pe2 + 100);
            }
            push_route(&mut s, "198.18.1.0/24", params.pe2_push, "198.18.20.1");
            push_route(&mut s, "2001:db8:1::/64", params.pe2_push, "2001:db8:20::1");
        }
    }
    s
}
