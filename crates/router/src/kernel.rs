//! FRR mode's share of each router with the kernel: the kernel owns the addresses (FRR's
//! daemons talk through its sockets) and the static neighbours zebra sets (BGP
//! unnumbered), vmpls reads both over rtnetlink and follows their changes, and checks
//! that the kernel does not forward transit traffic too.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use netlink_packet_core::{NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};
use tracing::{error, info, warn};

use crate::protocol::NeighborChange;
use crate::vrfs::VrfNetns;

/// rtnetlink multicast groups of neighbour and address changes.
const RTNLGRP_NEIGH: u32 = 3;
const RTNLGRP_IPV4_IFADDR: u32 = 5;
const RTNLGRP_IPV6_IFADDR: u32 = 9;
/// The least time between two reads of the addresses and neighbours.
const MIN_READ_GAP: Duration = Duration::from_millis(200);
/// Event messages drained per socket and turn (the rest wake the next turn).
const MAX_EVENTS_DRAINED: usize = 4096;
/// How often the addresses and neighbours are read again even without a change event
/// (events can be lost when the socket's queue overflows).
const REREAD_EVERY: Duration = Duration::from_secs(5);

/// The kernel's addresses as the router uses them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Addresses {
    /// Per port (in config order): its global addresses with prefix lengths.
    pub ports: Vec<Vec<(IpAddr, u8)>>,
    /// The loopback's first global IPv4 address: the router's own (router id, ICMP source).
    pub router_v4: Option<Ipv4Addr>,
    /// The loopback's first global IPv6 address.
    pub router_v6: Option<Ipv6Addr>,
}

/// One address the kernel reported: interface index, address, prefix length.
type KernelAddress = (u32, IpAddr, u8);

/// The router's addresses from the kernel's: those of the ports' interfaces
/// (`port_ifindexes`, in port order) and of the loopback (`lo_ifindex`). Link- and
/// host-scope addresses (IPv6 link-local, 127.0.0.1, ::1) are the kernel's alone.
pub fn router_addresses(all: &[KernelAddress], port_ifindexes: &[u32], lo_ifindex: u32) -> Addresses {
    let global = |a: &IpAddr| match a {
        IpAddr::V4(a) => !a.is_loopback() && !a.is_link_local() && !a.is_unspecified(),
        IpAddr::V6(a) => !a.is_loopback() && !a.is_unicast_link_local() && !a.is_unspecified(),
    };
    let ports = port_ifindexes
        .iter()
        .map(|&i| all.iter().filter(|(x, a, _)| *x == i && global(a)).map(|&(_, a, l)| (a, l)).collect())
        .collect();
    let on_lo = || all.iter().filter(|(x, a, _)| *x == lo_ifindex && global(a)).map(|&(_, a, _)| a);
    Addresses {
        ports,
        router_v4: on_lo().find_map(|a| match a {
            IpAddr::V4(a) => Some(a),
            IpAddr::V6(_) => None,
        }),
        router_v6: on_lo().find_map(|a| match a {
            IpAddr::V6(a) => Some(a),
            IpAddr::V4(_) => None,
        }),
    }
}

/// A static neighbour the kernel holds on a port's interface: the one zebra sets for BGP
/// unnumbered (RFC 8950: IPv4 routes `via 169.254.0.1 onlink`, and `169.254.0.1` PERMANENT
/// with the peer's MAC, which nobody answers ARP for), or one set with `ip neigh add ...
/// nud permanent`. The router takes them as its own static neighbours, as the kernel's
/// forwarding would use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelNeighbor {
    /// The port whose interface holds it.
    pub port: vmpls_fib::PortId,
    /// The neighbour's address.
    pub addr: IpAddr,
    /// Its MAC address.
    pub mac: [u8; 6],
}

/// The kernel's permanent neighbours with a unicast MAC among `all` on the interfaces
/// `port_ifindexes` (each with its port), sorted.
pub fn permanent_neighbors(
    all: &[NeighbourMessage],
    port_ifindexes: &[(u32, vmpls_fib::PortId)],
) -> Vec<KernelNeighbor> {
    let mut out: Vec<KernelNeighbor> = all
        .iter()
        .filter(|m| m.header.state == NeighbourState::Permanent)
        .filter_map(|m| {
            let port = port_ifindexes.iter().find(|(i, _)| *i == m.header.ifindex)?.1;
            let addr = m.attributes.iter().find_map(|a| match a {
                NeighbourAttribute::Destination(NeighbourAddress::Inet(a)) => Some(IpAddr::V4(*a)),
                NeighbourAttribute::Destination(NeighbourAddress::Inet6(a)) => Some(IpAddr::V6(*a)),
                _ => None,
            })?;
            let mac: [u8; 6] = m.attributes.iter().find_map(|a| match a {
                NeighbourAttribute::LinkLayerAddress(l) => l.as_slice().try_into().ok(),
                _ => None,
            })?;
            let unicast_mac = mac[0] & 1 == 0 && mac != [0; 6];
            let unicast_ip = match addr {
                IpAddr::V4(a) => !a.is_multicast() && !a.is_broadcast() && !a.is_unspecified(),
                IpAddr::V6(a) => !a.is_multicast() && !a.is_unspecified(),
            };
            (unicast_mac && unicast_ip).then_some(KernelNeighbor { port, addr, mac })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// What turns the router's copy of the kernel's neighbours `old` into `new`: new and
/// changed ones set (over a static entry of the router's own: the kernel's is the one
/// the peer answers to), gone ones removed. Both lists sorted.
pub fn neighbor_changes(old: &[KernelNeighbor], new: &[KernelNeighbor]) -> Vec<NeighborChange> {
    let key = |n: &KernelNeighbor| (n.port, n.addr);
    let gone = old.iter().filter(|o| !new.iter().any(|n| key(n) == key(o)));
    let set = new.iter().filter(|n| !old.contains(n));
    gone.map(|o| NeighborChange::Del { port: o.port, addr: o.addr })
        .chain(set.map(|n| NeighborChange::Set { port: n.port, addr: n.addr, mac: n.mac, replace: true }))
        .collect()
}

fn ifindex(name: &str) -> anyhow::Result<u32> {
    vmpls_ports::if_nametoindex(name).with_context(|| format!("no interface {name}"))
}

/// The interface (index) that holds `addr` in this network namespace, if one does.
pub fn interface_with_address(addr: IpAddr) -> anyhow::Result<Option<u32>> {
    Ok(dump_addresses()?.into_iter().find(|(_, a, _)| *a == addr).map(|(i, _, _)| i))
}

/// Reads every address of the kernel (this network namespace) over rtnetlink.
fn dump_addresses() -> anyhow::Result<Vec<KernelAddress>> {
    let all = dump(RouteNetlinkMessage::GetAddress(AddressMessage::default()), "addresses")?;
    Ok(all
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewAddress(a) => address_of(a),
            _ => None,
        })
        .collect())
}

/// Sends the dump request `request` over a new rtnetlink socket of this network namespace
/// and returns what the kernel answers (`what` names it in errors).
pub(crate) fn dump(request: RouteNetlinkMessage, what: &str) -> anyhow::Result<Vec<RouteNetlinkMessage>> {
    let mut sock = Socket::new(NETLINK_ROUTE).context("opening an rtnetlink socket")?;
    sock.bind_auto().context("binding the rtnetlink socket")?;
    sock.connect(&SocketAddr::new(0, 0)).context("connecting the rtnetlink socket")?;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    let mut req = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(request));
    req.finalize();
    let mut buf = vec![0; req.buffer_len()];
    req.serialize(&mut buf);
    sock.send(&buf, 0).with_context(|| format!("asking the kernel for its {what}"))?;
    let mut out = Vec::new();
    let mut rx = Vec::with_capacity(64 * 1024);
    loop {
        rx.clear();
        sock.recv(&mut rx, 0).with_context(|| format!("reading the kernel's {what}"))?;
        let mut rest = &rx[..];
        while !rest.is_empty() {
            let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(rest)
                .with_context(|| format!("decoding the kernel's {what}"))?;
            let len = msg.header.length as usize;
            match msg.payload {
                NetlinkPayload::Done(_) => return Ok(out),
                NetlinkPayload::Error(e) => anyhow::bail!("the kernel refused the dump of its {what}: {e:?}"),
                NetlinkPayload::InnerMessage(m) => out.push(m),
                _ => {}
            }
            if len == 0 || len > rest.len() {
                break;
            }
            rest = &rest[len.next_multiple_of(4).min(rest.len())..];
        }
    }
}

fn address_of(a: &AddressMessage) -> Option<KernelAddress> {
    if !matches!(a.header.family, AddressFamily::Inet | AddressFamily::Inet6)
        || a.header.scope != AddressScope::Universe
    {
        return None;
    }
    // IPv4 gives the interface's own address as IFA_LOCAL (IFA_ADDRESS is the peer on
    // point-to-point links); IPv6 gives only IFA_ADDRESS.
    let local = a.attributes.iter().find_map(|x| match x {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    let address = a.attributes.iter().find_map(|x| match x {
        AddressAttribute::Address(ip) => Some(*ip),
        _ => None,
    });
    local.or(address).map(|ip| (a.header.index, ip, a.header.prefix_len))
}

/// A port's interface as the kernel's side reads it: its name and the network namespace
/// it is in (a VRF's; `None`: the router's).
#[derive(Debug, Clone)]
pub struct PortInterface {
    /// The interface's name.
    pub name: String,
    /// Its namespace; `None`: the router's.
    pub netns: Option<VrfNetns>,
}

impl PortInterface {
    /// How messages name it: `pe1-ce1` in the router's namespace, `pe1-ce1 (netns red)`.
    fn shown(&self) -> String {
        match &self.netns {
            None => self.name.clone(),
            Some(ns) => format!("{} (netns {})", self.name, ns.name),
        }
    }
}

/// The namespaces `ports` are in, each once, the router's (`None`) first.
fn namespaces_of(ports: &[PortInterface]) -> Vec<Option<&VrfNetns>> {
    let mut out: Vec<Option<&VrfNetns>> = vec![None];
    for ns in ports.iter().filter_map(|p| p.netns.as_ref()) {
        if !out.iter().flatten().any(|o| o.name == ns.name) {
            out.push(Some(ns));
        }
    }
    out
}

/// The router's addresses now: the loopback's of the router's namespace, each port's in
/// the namespace its interface is in.
///
/// # Errors
/// An interface is missing, a namespace cannot be entered, or rtnetlink failed.
pub fn read(ports: &[PortInterface]) -> anyhow::Result<Addresses> {
    let mut addrs = Addresses::default();
    for ns in namespaces_of(ports) {
        let here: Vec<usize> = (0..ports.len())
            .filter(|&i| ports[i].netns.as_ref().map(|n| &n.name) == ns.map(|n| &n.name))
            .collect();
        let names: Vec<&str> = here.iter().map(|&i| ports[i].name.as_str()).collect();
        let read_here = || -> anyhow::Result<Addresses> {
            let idx: Vec<u32> = names.iter().map(|n| ifindex(n)).collect::<anyhow::Result<_>>()?;
            let lo = ifindex("lo")?;
            Ok(router_addresses(&dump_addresses()?, &idx, lo))
        };
        let got = crate::vrfs::run_in(ns, read_here)
            .with_context(|| format!("entering network namespace {}", ns.map_or("", |n| n.name.as_str())))?
            .with_context(|| match ns {
                Some(ns) => format!("in network namespace {}", ns.name),
                None => "in the router's network namespace".into(),
            })?;
        if ns.is_none() {
            addrs = Addresses { ports: vec![Vec::new(); ports.len()], ..got.clone() };
        }
        for (&i, a) in here.iter().zip(got.ports) {
            addrs.ports[i] = a;
        }
    }
    Ok(addrs)
}

/// The kernel's permanent neighbours on the ports' interfaces now, each read in the
/// namespace its interface is in.
///
/// # Errors
/// An interface is missing, a namespace cannot be entered, or rtnetlink failed.
pub fn read_neighbors(ports: &[PortInterface]) -> anyhow::Result<Vec<KernelNeighbor>> {
    let mut out = Vec::new();
    for ns in namespaces_of(ports) {
        let here: Vec<(usize, &str)> = (0..ports.len())
            .filter(|&i| ports[i].netns.as_ref().map(|n| &n.name) == ns.map(|n| &n.name))
            .map(|i| (i, ports[i].name.as_str()))
            .collect();
        let read_here = || -> anyhow::Result<Vec<KernelNeighbor>> {
            let mut idx = Vec::with_capacity(here.len());
            for &(i, name) in &here {
                idx.push((ifindex(name)?, vmpls_fib::PortId::try_from(i).context("too many ports")?));
            }
            let all = dump(RouteNetlinkMessage::GetNeighbour(NeighbourMessage::default()), "neighbours")?;
            let msgs: Vec<NeighbourMessage> = all
                .into_iter()
                .filter_map(|m| match m {
                    RouteNetlinkMessage::NewNeighbour(n) => Some(n),
                    _ => None,
                })
                .collect();
            Ok(permanent_neighbors(&msgs, &idx))
        };
        let got = crate::vrfs::run_in(ns, read_here).with_context(|| {
            format!("entering network namespace {}", ns.map_or("", |n| n.name.as_str()))
        })??;
        out.extend(got);
    }
    out.sort();
    Ok(out)
}

/// The interfaces among `ports` on which the kernel (of the namespace each is in)
/// forwards IPv4 or IPv6, as messages name them.
pub fn forwarding_interfaces(ports: &[PortInterface]) -> Vec<String> {
    let on = |path: String| std::fs::read_to_string(path).is_ok_and(|v| v.trim() != "0");
    ports
        .iter()
        .filter(|p| {
            // /proc/sys/net answers for the namespace of the thread that opens it.
            crate::vrfs::run_in(p.netns.as_ref(), || {
                on(format!("/proc/sys/net/ipv4/conf/{}/forwarding", p.name))
                    || on(format!("/proc/sys/net/ipv6/conf/{}/forwarding", p.name))
            })
            .unwrap_or(false)
        })
        .map(PortInterface::shown)
        .collect()
}

/// Fails unless the kernel leaves transit traffic on the ports to vmpls.
///
/// # Errors
/// The kernel forwards on one of the interfaces: every transit packet would be
/// forwarded twice.
pub fn check_forwarding_off(ports: &[PortInterface]) -> anyhow::Result<()> {
    let on = forwarding_interfaces(ports);
    anyhow::ensure!(
        on.is_empty(),
        "the kernel forwards IP on {} (net.ipv4/ipv6.conf.*.forwarding = 1): with [frr], vmpls forwards transit \
         traffic and the kernel must not, or every packet goes out twice; set \
         `sysctl -w net.ipv4.conf.all.forwarding=0 net.ipv6.conf.all.forwarding=0` in the router's namespace \
         and in each VRF's (and leave `ip forwarding` out of zebra's config)",
        on.join(", ")
    );
    Ok(())
}

/// Where the kernel's addresses and static neighbours go: the router's tables and its
/// forwarding loop (the control server implements it).
pub trait KernelSink: Send + Sync {
    /// Sets the addresses the kernel has on the ports and the loopback.
    ///
    /// # Errors
    /// The tables could not be built with them; the running ones stay.
    fn set_kernel_addresses(&self, addrs: &Addresses) -> Result<(), String>;

    /// Applies one change of the kernel's static neighbours to the router's.
    ///
    /// # Errors
    /// The forwarding loop refused it or did not answer.
    fn change_kernel_neighbor(&self, change: NeighborChange) -> Result<(), String>;
}

/// Follows the kernel's addresses and static neighbours in a thread of its own: on every
/// address or neighbour event (and every few seconds) it reads them again and, when they
/// changed, puts them in the router's tables and forwarding loop (the neighbours at once,
/// in the first turn). It also says, once, when the kernel starts forwarding.
///
/// # Errors
/// The event socket could not be opened.
pub fn spawn_watch(
    server: Arc<dyn KernelSink>,
    interfaces: Vec<PortInterface>,
    mut current: Addresses,
) -> anyhow::Result<()> {
    // One event socket per namespace a port is in: a socket hears its own namespace's.
    let mut events = Vec::new();
    for ns in namespaces_of(&interfaces) {
        let socket =
            crate::vrfs::run_in(ns, address_events).context("entering a VRF's network namespace")??;
        events.push(socket);
    }
    std::thread::Builder::new().name("kernel-addresses".into()).spawn(move || {
        let mut warned_forwarding = false;
        let mut neighbors: Vec<KernelNeighbor> = Vec::new();
        let mut last_read: Option<Instant> = None;
        let mut rx = Vec::with_capacity(64 * 1024);
        loop {
            let ready = vmpls_sys::event::readable(&events, Duration::from_secs(1));
            let event = ready.iter().any(|&r| r);
            for (socket, _) in events.iter_mut().zip(&ready).filter(|(_, r)| **r) {
                // Drain what is queued; the content does not matter, the dump does.
                for _ in 0..MAX_EVENTS_DRAINED {
                    rx.clear();
                    if socket.recv(&mut rx, libc::MSG_DONTWAIT).is_err() {
                        break;
                    }
                }
            }
            if !event && last_read.is_some_and(|t| t.elapsed() < REREAD_EVERY) {
                continue;
            }
            // Events in a burst (hosts ARPing the router's kernel make neighbours) come
            // together into one read.
            if let Some(wait) = last_read.and_then(|t| MIN_READ_GAP.checked_sub(t.elapsed())) {
                std::thread::sleep(wait);
            }
            last_read = Some(Instant::now());
            match read_neighbors(&interfaces) {
                Ok(now) if now != neighbors => {
                    for change in neighbor_changes(&neighbors, &now) {
                        match server.change_kernel_neighbor(change) {
                            Ok(()) => info!(?change, "the kernel's static neighbour followed"),
                            Err(e) => warn!(?change, "the kernel's static neighbour not followed: {e}"),
                        }
                    }
                    neighbors = now;
                }
                Ok(_) => {}
                Err(e) => warn!("reading the kernel's neighbours: {e:#}"),
            }
            match read(&interfaces) {
                Ok(now) if now != current => {
                    info!(ports = ?now.ports, router_v4 = ?now.router_v4, router_v6 = ?now.router_v6, "the kernel's addresses changed");
                    match server.set_kernel_addresses(&now) {
                        Ok(()) => current = now,
                        Err(e) => error!("the kernel's new addresses do not fit the tables, the old ones stay: {e}"),
                    }
                }
                Ok(_) => {}
                Err(e) => warn!("reading the kernel's addresses: {e:#}"),
            }
            let forwarding = forwarding_interfaces(&interfaces);
            if !forwarding.is_empty() && !warned_forwarding {
                error!(interfaces = ?forwarding, "the kernel now forwards IP on the router's ports: transit packets go out twice; turn it off");
            }
            warned_forwarding = !forwarding.is_empty();
        }
    })?;
    Ok(())
}

/// An rtnetlink socket of this namespace that hears its address and neighbour changes.
fn address_events() -> anyhow::Result<Socket> {
    let mut events = Socket::new(NETLINK_ROUTE).context("opening an rtnetlink socket")?;
    events.bind_auto().context("binding the rtnetlink socket")?;
    events.add_membership(RTNLGRP_NEIGH).context("joining the neighbour group")?;
    events.add_membership(RTNLGRP_IPV4_IFADDR).context("joining the IPv4 address group")?;
    events.add_membership(RTNLGRP_IPV6_IFADDR).context("joining the IPv6 address group")?;
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `RTM_NEWNEIGH` bodies (after the netlink header) as the kernel dumped them, captured
    /// from a namespace with veth cap0 (ifindex 3) and cap1 (2) after `ip neigh add
    /// 169.254.0.1 lladdr 02:00:5e:10:00:02 dev cap0 nud permanent` (what zebra sets for
    /// BGP unnumbered), `... 198.18.5.5 ... nud reachable` and `... 2001:db8::9 lladdr
    /// 02:00:5e:10:00:09 dev cap0 nud permanent`; the last is the kernel's own NOARP entry
    /// for the multicast group ff02::16 on cap1.
    const CAPTURED_NEIGHBOURS: [&str; 4] = [
        "02000000030000008000000308000100a9fe00010a00020002005e100002000008000400000000001400030019000000190000001900000000000000",
        "02000000030000000200000308000100c61205050a00020002005e100003000008000400000000001400030018000000180000001800000001000000",
        "0a00000003000000800000011400010020010db80000000000000000000000090a00020002005e10000900000800040000000000140003001a0000001a0000001a00000000000000",
        "0a000000020000004000000514000100ff0200000000000000000000000000160a000200333300000016000008000400000000001400030070180000000100000001000000000000",
    ];

    fn captured() -> Vec<NeighbourMessage> {
        use netlink_packet_core::Parseable;
        CAPTURED_NEIGHBOURS
            .iter()
            .map(|hex| {
                let bytes: Vec<u8> = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect();
                NeighbourMessage::parse(bytes.as_slice()).unwrap()
            })
            .collect()
    }

    #[test]
    fn the_kernels_permanent_neighbours_on_ports_become_the_routers() {
        let all = captured();
        let got = permanent_neighbors(&all, &[(3, 1), (2, 0)]);
        let n = |addr: &str, last: u8| KernelNeighbor {
            port: 1,
            addr: addr.parse().unwrap(),
            mac: [0x02, 0x00, 0x5e, 0x10, 0x00, last],
        };
        // the reachable one is the kernel's to age, the multicast one no neighbour
        assert_eq!(got, vec![n("169.254.0.1", 2), n("2001:db8::9", 9)]);
        assert!(permanent_neighbors(&all, &[(2, 0)]).is_empty(), "none on an interface that is no port");
    }

    #[test]
    fn kernel_neighbour_changes_set_new_and_changed_ones_and_remove_gone_ones() {
        let n = |addr: &str, last: u8| KernelNeighbor {
            port: 1,
            addr: addr.parse().unwrap(),
            mac: [2, 0, 0, 0, 0, last],
        };
        let (a, b, c) = (n("169.254.0.1", 1), n("198.18.9.9", 2), n("2001:db8::9", 3));
        assert!(neighbor_changes(&[a, b], &[a, b]).is_empty());
        let moved = n("169.254.0.1", 7);
        assert_eq!(
            neighbor_changes(&[a, b], &[moved, c]),
            vec![
                NeighborChange::Del { port: 1, addr: b.addr },
                NeighborChange::Set { port: 1, addr: a.addr, mac: moved.mac, replace: true },
                NeighborChange::Set { port: 1, addr: c.addr, mac: c.mac, replace: true },
            ]
        );
    }

    #[test]
    fn ports_get_their_global_addresses_and_the_router_its_loopback() {
        let a = |s: &str| s.parse::<IpAddr>().unwrap();
        let all = vec![
            (1, a("127.0.0.1"), 8),
            (1, a("198.18.255.1"), 32),
            (1, a("::1"), 128),
            (1, a("2001:db8:ff::1"), 128),
            (2, a("198.18.10.1"), 24),
            (2, a("fe80::1"), 64),
            (2, a("2001:db8:10::1"), 64),
            (3, a("198.18.1.1"), 24),
            (9, a("198.18.99.1"), 24),
        ];
        let got = router_addresses(&all, &[3, 2], 1);
        assert_eq!(
            got.ports,
            vec![vec![(a("198.18.1.1"), 24)], vec![(a("198.18.10.1"), 24), (a("2001:db8:10::1"), 64)]]
        );
        assert_eq!(got.router_v4, Some("198.18.255.1".parse().unwrap()));
        assert_eq!(got.router_v6, Some("2001:db8:ff::1".parse().unwrap()));
        assert_eq!(router_addresses(&all[..1], &[], 1), Addresses::default());
    }
}
