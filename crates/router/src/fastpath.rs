//! The in-kernel fast path (`[router] fast-path = "tc"`): what of the router's forwarding
//! state the TC programs of `vmpls-fastpath` can carry, kept in step with the FIB and the
//! neighbour table, and their counters folded into the router's.
//!
//! The programs handle a frame only where the result is what the pipeline would send;
//! everything else (TTL expiry, unknown labels, ECMP, unresolved next hops, frames too
//! big, ports that are neither veth nor MPLS-in-UDP in the router's namespace)
//! reaches the pipeline through the port's socket as before. [`fast_tables`] therefore
//! installs every prefix of the FIB, those it cannot carry as `Local` ("leave it to the
//! pipeline"), so the kernel's longest match always lands on the route the FIB would
//! choose.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use tracing::{info, warn};
use vmpls_dataplane::neighbor::NeighborTable;
use vmpls_dataplane::{Dataplane, Event, Output, PacketPool, PortId};
use vmpls_fastpath::{
    Adjacency, FastCounters, FastPath, FastPort, FastPortStats, FastTables, FastTablesChange, LabelEntry,
    RouteEntry, Tunnel,
};
use vmpls_fib::{Fib, FibChanges, LabelAction, Nexthop, PrefixRoute, RouteTarget, TtlModel, VrfId};

/// Most labels the programs push at once.
const MAX_PUSH: usize = 4;

/// A port the fast path serves: an AF_PACKET port over a veth, or an MPLS-in-UDP port
/// whose socket is in the router's namespace (`tunnel`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastPortInfo {
    /// The interface: the veth, or a tunnel's underlay interface.
    pub ifname: String,
    /// The veth's index, or a tunnel's [`vmpls_fastpath::tunnel_key`].
    pub ifindex: u32,
    pub mac: [u8; 6],
    pub mtu: u32,
    /// An MPLS-in-UDP port: the tunnel the programs encapsulate into and decapsulate from.
    pub tunnel: Option<Tunnel>,
}

impl FastPortInfo {
    /// Sending out of this port to the neighbour with MAC `mac` (a tunnel has none: the
    /// kernel resolves the underlay's next hop).
    fn adjacency(&self, mac: [u8; 6]) -> Adjacency {
        Adjacency { ifindex: self.ifindex, mtu: self.mtu, dst_mac: mac, src_mac: self.mac }
    }
}

/// The one next hop of a group, if it has exactly one (ECMP stays with the pipeline).
fn single(nexthops: &[Nexthop]) -> Option<&Nexthop> {
    match nexthops {
        [nh] => Some(nh),
        _ => None,
    }
}

/// How the fast path's entries are made from a FIB, the neighbour table and the served
/// ports: one place for the whole tables ([`fast_tables`]) and for the few entries a route
/// change touches ([`fast_changes`]), so both give the same entry for the same key.
struct Entries<'a> {
    fib: &'a Fib,
    ports: &'a [Option<FastPortInfo>],
    neighbors: &'a NeighborTable,
    default_ttl: u8,
    /// The router's own addresses: always the pipeline's, in every VRF.
    locals: Vec<IpAddr>,
    /// The next hops the entries made so far send to.
    used: Vec<(PortId, IpAddr)>,
}

impl<'a> Entries<'a> {
    fn new(
        fib: &'a Fib,
        ports: &'a [Option<FastPortInfo>],
        neighbors: &'a NeighborTable,
        default_ttl: u8,
    ) -> Self {
        let locals = fib
            .port_addrs
            .iter()
            .flat_map(|p| {
                p.v4.iter().map(|&(a, _)| IpAddr::V4(a)).chain(p.v6.iter().map(|&(a, _)| IpAddr::V6(a)))
            })
            .chain(fib.router_v4.map(IpAddr::V4))
            .chain(fib.router_v6.map(IpAddr::V6))
            .collect();
        Entries { fib, ports, neighbors, default_ttl, locals, used: Vec::new() }
    }

    fn fast(&self, port: PortId) -> Option<&'a FastPortInfo> {
        self.ports.get(usize::from(port)).and_then(Option::as_ref)
    }

    /// A next hop the programs can send to: a served port and a known MAC, or a tunnel
    /// (labelled frames only: `labelled`).
    fn adjacency(&mut self, port: PortId, addr: IpAddr, labelled: bool) -> Option<Adjacency> {
        let p = self.fast(port)?;
        if let Some(t) = &p.tunnel {
            return (labelled && t.encap).then(|| p.adjacency([0; 6]));
        }
        self.used.push((port, addr));
        Some(p.adjacency(self.neighbors.mac(port, addr)?))
    }

    /// The entry of an incoming label, if the programs can switch it.
    fn label(&mut self, label: u32) -> Option<LabelEntry> {
        let route = self.fib.labels.get(label)?;
        let uniform = route.ttl_model == TtlModel::Uniform;
        match &route.action {
            LabelAction::PopAndLookup { vrf } => Some(LabelEntry::PopIp { vrf: *vrf, uniform }),
            LabelAction::Forward(group) => {
                let nh = single(group.nexthops())?;
                match (&nh.labels[..], nh.via) {
                    (&[out_label], Some(via)) => {
                        self.adjacency(nh.port, via, true).map(|adj| LabelEntry::Swap { out_label, adj })
                    }
                    (&[], Some(via)) => {
                        self.adjacency(nh.port, via, false).map(|adj| LabelEntry::Php { uniform, adj })
                    }
                    _ => None,
                }
            }
        }
    }

    /// The entry of a route: forwarded by the programs, or `Local` (left to the pipeline).
    fn route(&mut self, route: &PrefixRoute) -> RouteEntry {
        let RouteTarget::Forward(group) = &route.target else { return RouteEntry::Local };
        let Some(nh) = single(group.nexthops()).filter(|nh| nh.labels.len() <= MAX_PUSH) else {
            return RouteEntry::Local;
        };
        let labelled = !nh.labels.is_empty();
        let Some(adj) = nh.via.and_then(|via| self.adjacency(nh.port, via, labelled)) else {
            return RouteEntry::Local;
        };
        let label_ttl = match route.ttl_model {
            TtlModel::Uniform => None,
            TtlModel::Pipe => Some(self.default_ttl),
        };
        RouteEntry::Forward { labels: nh.labels.clone(), label_ttl, adj }
    }

    /// The host entry of a neighbour on a connected subnet, if `addr` is one: only where
    /// that subnet is the longest match (a more specific route through a gateway wins).
    fn neighbor_host(&mut self, vrf_id: VrfId, addr: IpAddr) -> Option<RouteEntry> {
        let RouteTarget::Connected { port } = self.fib.vrf(vrf_id)?.lookup(addr)?.target else {
            return None;
        };
        let p = self.fast(port).filter(|p| p.tunnel.is_none())?;
        let mac = self.neighbors.mac(port, addr)?;
        self.used.push((port, addr));
        Some(RouteEntry::Forward { labels: Vec::new(), label_ttl: None, adj: p.adjacency(mac) })
    }

    /// The entry of one prefix as [`fast_tables`] makes it: the router's own addresses are
    /// `Local`, then neighbours' host entries, then the FIB's route, if any.
    fn prefix(&mut self, vrf_id: VrfId, addr: IpAddr, len: u8) -> Option<RouteEntry> {
        let host = len == if addr.is_ipv4() { 32 } else { 128 };
        if host && self.locals.contains(&addr) {
            return Some(RouteEntry::Local);
        }
        if host && let Some(e) = self.neighbor_host(vrf_id, addr) {
            return Some(e);
        }
        let vrf = self.fib.vrf(vrf_id)?;
        let route = match addr {
            IpAddr::V4(a) => vrf.v4.get(a, len),
            IpAddr::V6(a) => vrf.v6.get(a, len),
        }?;
        Some(self.route(route))
    }

    fn into_used(mut self) -> Vec<(PortId, IpAddr)> {
        self.used.sort_unstable();
        self.used.dedup();
        self.used
    }
}

/// The fast path's tables for `fib` as the neighbour table knows the next hops now, and
/// the next hops they depend on (resolved or not: the caller keeps them resolved).
/// `ports[i]` is `Some` for the ports the fast path serves.
pub fn fast_tables(
    fib: &Fib,
    ports: &[Option<FastPortInfo>],
    neighbors: &NeighborTable,
    default_ttl: u8,
) -> (FastTables, Vec<(PortId, IpAddr)>) {
    let mut t = FastTables::default();
    let mut e = Entries::new(fib, ports, neighbors, default_ttl);
    for (id, p) in ports.iter().enumerate() {
        match p {
            // A tunnel's datagrams are found by their addresses, not by a port entry. One
            // whose labels are refused (not from a config file: it refuses `mpls = false`
            // on a tunnel) is left to the pipeline, which counts them.
            Some(p) if p.tunnel.is_some() && fib.accepts_mpls(id as PortId) => {
                t.tunnels.extend(p.tunnel.map(|tunnel| (p.ifindex, tunnel)));
            }
            Some(p) if p.tunnel.is_some() => {}
            Some(p) => {
                let vrf = fib.port_vrf.get(id).copied().unwrap_or(vmpls_fib::DEFAULT_VRF);
                let accepts_mpls = fib.accepts_mpls(id as PortId);
                t.ports.insert(p.ifindex, FastPort { vrf, mac: p.mac, accepts_mpls });
            }
            None => {}
        }
    }
    for (label, _) in fib.labels.iter() {
        if let Some(entry) = e.label(label) {
            t.labels.insert(label, entry);
        }
    }
    for (vrf_id, vrf) in fib.vrfs.iter().enumerate() {
        let vrf_id = vrf_id as VrfId;
        for (addr, len, route) in vrf.v4.iter() {
            t.routes_v4.insert((vrf_id, addr, len), e.route(route));
        }
        for (addr, len, route) in vrf.v6.iter() {
            t.routes_v6.insert((vrf_id, addr, len), e.route(route));
        }
    }
    // Hosts on connected subnets: one host route per known neighbour whose longest match
    // is that subnet's route.
    for (port, addr, _) in neighbors.entries() {
        let Some(vrf_id) = fib.vrf_of_port(port) else { continue };
        if let Some(entry) = e.neighbor_host(vrf_id, addr) {
            match addr {
                IpAddr::V4(a) => t.routes_v4.insert((vrf_id, a, 32), entry),
                IpAddr::V6(a) => t.routes_v6.insert((vrf_id, a, 128), entry),
            };
        }
    }
    // The router's own addresses, in every VRF: always the pipeline's.
    for vrf_id in 0..fib.vrfs.len() as VrfId {
        for &a in &e.locals {
            match a {
                IpAddr::V4(a) => t.routes_v4.insert((vrf_id, a, 32), RouteEntry::Local),
                IpAddr::V6(a) => t.routes_v6.insert((vrf_id, a, 128), RouteEntry::Local),
            };
        }
    }
    (t, e.into_used())
}

/// The entries of the fast path's tables that `changes` (between two versions of the FIB,
/// `fib` the newer) touch, made as [`fast_tables`] makes them, and the next hops those
/// entries send to. Besides the changed prefixes, the host entries of the neighbours that
/// a changed prefix covers are made again: whether a neighbour's subnet is its longest
/// match may have changed.
pub fn fast_changes(
    fib: &Fib,
    changes: &FibChanges,
    ports: &[Option<FastPortInfo>],
    neighbors: &NeighborTable,
    default_ttl: u8,
) -> (FastTablesChange, Vec<(PortId, IpAddr)>) {
    let mut e = Entries::new(fib, ports, neighbors, default_ttl);
    let mut c = FastTablesChange::default();
    for &label in &changes.labels {
        c.labels.push((label, e.label(label)));
    }
    let mut v4 = changes.v4.clone();
    let mut v6 = changes.v6.clone();
    for (port, addr, _) in neighbors.entries() {
        let Some(vrf_id) = fib.vrf_of_port(port) else { continue };
        match addr {
            IpAddr::V4(a) if changes.v4.iter().any(|&(v, p, l)| v == vrf_id && covers4(p, l, a)) => {
                v4.push((vrf_id, a, 32));
            }
            IpAddr::V6(a) if changes.v6.iter().any(|&(v, p, l)| v == vrf_id && covers6(p, l, a)) => {
                v6.push((vrf_id, a, 128));
            }
            _ => {}
        }
    }
    v4.sort_unstable();
    v4.dedup();
    v6.sort_unstable();
    v6.dedup();
    for (vrf, a, len) in v4 {
        c.routes_v4.push(((vrf, a, len), e.prefix(vrf, IpAddr::V4(a), len)));
    }
    for (vrf, a, len) in v6 {
        c.routes_v6.push(((vrf, a, len), e.prefix(vrf, IpAddr::V6(a), len)));
    }
    (c, e.into_used())
}

fn covers4(net: Ipv4Addr, len: u8, a: Ipv4Addr) -> bool {
    len == 0 || (u32::from(net) ^ u32::from(a)) >> (32 - u32::from(len)) == 0
}

fn covers6(net: Ipv6Addr, len: u8, a: Ipv6Addr) -> bool {
    len == 0 || (u128::from(net) ^ u128::from(a)) >> (128 - u32::from(len)) == 0
}

/// Takes the fast path's filter off a packet socket (`SO_DETACH_BPF`); a socket without
/// one is left as it is (`SO_DETACH_FILTER`, the same option).
fn unfilter_socket(socket: BorrowedFd<'_>) {
    // SO_DETACH_BPF ignores its value.
    if let Err(e) = vmpls_sys::sockopt::set_int(socket, libc::SOL_SOCKET, libc::SO_DETACH_FILTER, 0)
        && e.raw_os_error() != Some(libc::ENOENT)
    {
        warn!(error = %e, "taking the fast path's filter off a packet socket");
    }
}

/// The fast path of a running router: the loaded programs, the ports they serve, and
/// what was last installed and counted.
pub struct FastPathRuntime {
    fp: FastPath,
    ports: Vec<Option<FastPortInfo>>,
    default_ttl: u8,
    /// The FIB and the neighbour table's MACs generation the installed tables were made from.
    installed: Option<(Arc<Fib>, u64)>,
    next_hops: Vec<(PortId, IpAddr)>,
    /// Counters as last read, to add only the difference to the router's.
    counted: FastCounters,
    counted_labels: BTreeMap<u32, (u64, u64)>,
    counted_ports: BTreeMap<u32, FastPortStats>,
    /// Frames and bytes the programs took in and sent on, by port (across reopens).
    port_counts: Vec<FastPortStats>,
    /// Whether each served port's interface is up with a carrier, as last checked: the
    /// programs send to running ports only (a frame redirected to a down veth is lost
    /// without a trace; the pipeline counts its send errors).
    running: Vec<bool>,
    /// What the kernel's maps could not hold at the last install (logged when it changes).
    overflow: vmpls_fastpath::Overflow,
}

impl FastPathRuntime {
    /// Loads the programs and attaches them to every port in `ports` (`Some`: an
    /// AF_PACKET port over a veth), and filters each of those ports' sockets (`sockets`,
    /// same index) so they no longer receive what the programs forward.
    pub fn start(
        ports: Vec<Option<FastPortInfo>>,
        sockets: &[Option<BorrowedFd<'_>>],
        default_ttl: u8,
    ) -> anyhow::Result<FastPathRuntime> {
        let mut fp = FastPath::load().context("loading the TC fast path")?;
        let mut filtered = Vec::new();
        for (p, socket) in ports.iter().zip(sockets) {
            if let Some(p) = p.as_ref().filter(|p| p.tunnel.is_some()) {
                // A tunnel: its socket is a UDP socket, no tap runs before TC; the
                // programs take its datagrams on the underlay interface.
                if let Err(e) = fp
                    .attach_underlay(&p.ifname)
                    .with_context(|| format!("attaching the fast path to the underlay {}", p.ifname))
                {
                    for socket in filtered {
                        unfilter_socket(socket);
                    }
                    return Err(e);
                }
                info!(underlay = %p.ifname, "fast path attached to a tunnel's underlay");
                continue;
            }
            let (Some(p), Some(socket)) = (p, socket) else { continue };
            let attached = fp
                .filter_socket(*socket)
                .with_context(|| format!("filtering the socket of {}", p.ifname))
                .and_then(|()| {
                    filtered.push(*socket);
                    fp.attach(&p.ifname).with_context(|| format!("attaching the fast path to {}", p.ifname))
                });
            if let Err(e) = attached {
                // Leave the sockets as they were (dropping `fp` detaches the programs), so
                // that a router going on without the fast path reads them unfiltered.
                for socket in filtered {
                    unfilter_socket(socket);
                }
                return Err(e);
            }
            info!(interface = %p.ifname, ifindex = p.ifindex, "fast path attached");
        }
        let n = ports.len();
        Ok(FastPathRuntime {
            fp,
            ports,
            port_counts: vec![FastPortStats::default(); n],
            running: vec![true; n],
            overflow: vmpls_fastpath::Overflow::default(),
            default_ttl,
            installed: None,
            next_hops: Vec::new(),
            counted: FastCounters::default(),
            counted_labels: BTreeMap::new(),
            counted_ports: BTreeMap::new(),
        })
    }

    /// After a port's interface was deleted and created anew (a new ifindex, a new
    /// socket): attaches again, filters the new socket, and reinstalls the tables.
    pub fn port_reopened(&mut self, port: PortId, ifindex: u32, socket: BorrowedFd<'_>) {
        let Some(Some(p)) = self.ports.get_mut(usize::from(port)) else { return };
        p.ifindex = ifindex;
        let ifname = p.ifname.clone();
        let _ = self.fp.detach(&ifname);
        let r = self.fp.filter_socket(socket).and_then(|()| self.fp.attach(&ifname));
        match r {
            Ok(()) => info!(interface = %ifname, ifindex, "fast path attached again"),
            Err(e) => {
                warn!(interface = %ifname, error = %e, "fast path not attached again; the pipeline forwards")
            }
        }
        self.installed = None;
    }

    /// A port's MTU changed (its interface's, followed by the router): the programs
    /// check frames against it from the next install on, which this call forces.
    pub fn set_port_mtu(&mut self, port: PortId, mtu: u32) {
        let Some(Some(p)) = self.ports.get_mut(usize::from(port)) else { return };
        if p.mtu != mtu {
            info!(interface = %p.ifname, old_mtu = p.mtu, mtu, "fast path: port MTU changed");
            p.mtu = mtu;
            self.installed = None;
        }
    }

    /// Checks the served ports' interfaces (with the router's link checks, every second):
    /// a port whose interface went down or lost its carrier leaves the tables until it
    /// is running again.
    pub fn check_links(&mut self) {
        for (p, running) in self.ports.iter().zip(&mut self.running) {
            let Some(p) = p else { continue };
            let now = vmpls_ports::AfPacketPort::interface_running(&p.ifname);
            if now != *running {
                info!(interface = %p.ifname, running = now, "fast path: link state changed");
                *running = now;
                self.installed = None;
            }
        }
    }

    /// Installs the tables again if the FIB or the neighbour table changed since last
    /// time. Cheap when nothing changed: a pointer and a number compared.
    pub fn sync(&mut self, dp: &Dataplane) {
        let fib = dp.fib().load_full();
        let generation = dp.neighbors().macs_generation();
        if self.installed.as_ref().is_some_and(|(f, g)| Arc::ptr_eq(f, &fib) && *g == generation) {
            return;
        }
        let running: Vec<_> =
            self.ports.iter().zip(&self.running).map(|(p, up)| p.clone().filter(|_| *up)).collect();
        // A route change on a FIB copied from the one installed, neighbours and ports as
        // they were: only the entries it touches are made and written, so a change is in
        // force in time that does not grow with the tables.
        let changes = match &self.installed {
            Some((old, g)) if *g == generation => fib.changes_since(old),
            _ => None,
        };
        let applied = match changes {
            Some(changes) => {
                let (change, used) = fast_changes(&fib, &changes, &running, dp.neighbors(), self.default_ttl);
                self.next_hops.extend(used);
                self.next_hops.sort_unstable();
                self.next_hops.dedup();
                self.fp.update(&change)
            }
            None => {
                let (tables, used) = fast_tables(&fib, &running, dp.neighbors(), self.default_ttl);
                self.next_hops = used;
                self.fp.apply(&tables)
            }
        };
        match applied {
            Ok(overflow) if overflow != self.overflow => {
                if overflow.is_none() {
                    info!("fast path: its maps hold the whole table again");
                } else {
                    warn!(
                        labels_left_out = overflow.labels_left_out,
                        ipv4_left_out = overflow.v4_off,
                        ipv6_left_out = overflow.v6_off,
                        label_capacity = vmpls_fastpath::LABEL_CAPACITY,
                        prefix_capacity = vmpls_fastpath::ROUTE_CAPACITY,
                        "fast path: the kernel's maps cannot hold the whole table; the pipeline forwards what they leave out (a family's prefixes all of them, so that no less specific prefix answers for a missing one)"
                    );
                }
                self.overflow = overflow;
            }
            Ok(_) => {}
            Err(e) => {
                warn!(error = %e, "fast path tables not installed; the pipeline forwards what they miss")
            }
        }
        self.installed = Some((fib, generation));
    }

    /// Runs with the pipeline's timers: keeps the next hops the programs send to
    /// resolved (the pipeline never sees their traffic).
    pub fn tick(&mut self, now: Instant, dp: &mut Dataplane, pool: &mut PacketPool, out: &mut Output) {
        for &(port, addr) in &self.next_hops {
            dp.use_neighbor(now, port, addr, pool, out);
        }
    }

    /// Adds what the programs forwarded since last time to the router's counters. Called
    /// where the counters are read (the stats file, a snapshot, the exit), not on every
    /// tick: reading the kernel's per-CPU maps is the costly part.
    pub fn count(&mut self, dp: &mut Dataplane) {
        if let Err(e) = self.fold_counters(dp) {
            warn!(error = %e, "reading the fast path's counters");
        }
    }

    /// The programs' counters by name, as last read: the names of the stats file, the
    /// API and the metrics.
    pub fn named_counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.counted;
        vec![
            ("frames_in", c.frames_in),
            ("swap", c.swap),
            ("push", c.push),
            ("pop", c.pop),
            ("ip_forward", c.ip_forward),
            ("passed", c.passed),
            ("bytes", c.bytes),
            ("redirect_failed", c.redirect_failed),
            ("encap", c.encap),
            ("decap", c.decap),
        ]
    }

    /// The underlay interface of port `port` if it is a tunnel the programs serve, and
    /// whether they encapsulate into it.
    pub fn tunnel_of(&self, port: usize) -> Option<(String, bool)> {
        let p = self.ports.get(port)?.as_ref()?;
        p.tunnel.map(|t| (p.ifname.clone(), t.encap))
    }

    /// Frames and bytes the programs took from `port` and sent out of it, as last read;
    /// `None` if they do not serve it.
    pub fn port_counts(&self, port: usize) -> Option<FastPortStats> {
        self.ports.get(port)?.as_ref()?;
        self.port_counts.get(port).copied()
    }

    fn fold_counters(&mut self, dp: &mut Dataplane) -> anyhow::Result<()> {
        let now = self.fp.counters()?;
        let c = dp.counters_mut();
        let before = &self.counted;
        c.event(Event::LabelSwap, now.swap.saturating_sub(before.swap));
        c.event(Event::LabelPush, now.push.saturating_sub(before.push));
        c.event(Event::LabelPop, now.pop.saturating_sub(before.pop));
        c.event(Event::IpForward, now.ip_forward.saturating_sub(before.ip_forward));
        self.counted = now;
        let labels = self.fp.label_stats()?;
        for (&label, &(frames, bytes)) in &labels {
            let (f0, b0) = self.counted_labels.get(&label).copied().unwrap_or_default();
            if frames > f0 {
                c.label_add(label, frames - f0, bytes.saturating_sub(b0));
            }
        }
        self.counted_labels = labels;
        let ports = self.fp.port_stats()?;
        for (&ifindex, s) in &ports {
            let Some(id) = self.ports.iter().position(|p| p.as_ref().is_some_and(|p| p.ifindex == ifindex))
            else {
                continue;
            };
            let before = self.counted_ports.get(&ifindex).copied().unwrap_or_default();
            let c = &mut self.port_counts[id];
            c.rx_frames += s.rx_frames.saturating_sub(before.rx_frames);
            c.rx_bytes += s.rx_bytes.saturating_sub(before.rx_bytes);
            c.tx_frames += s.tx_frames.saturating_sub(before.tx_frames);
            c.tx_bytes += s.tx_bytes.saturating_sub(before.tx_bytes);
            self.counted_ports.insert(ifindex, *s);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::path::Path;

    use vmpls_dataplane::neighbor::NeighborConfig;

    use super::*;

    const CORE_MAC: [u8; 6] = [2, 0, 0, 0, 20, 2];
    const CE_MAC: [u8; 6] = [2, 0, 0, 0, 2, 1];
    const P_MAC: [u8; 6] = [2, 0, 0, 0, 20, 1];
    const HOST_MAC: [u8; 6] = [2, 0, 0, 0, 2, 2];

    fn fib(text: &str) -> Fib {
        vmpls_control::Config::from_str(text, Path::new("t.toml")).unwrap().build_fib().unwrap()
    }

    fn pe2_text() -> String {
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/seed/pe2.toml")).unwrap()
    }

    fn served() -> Vec<Option<FastPortInfo>> {
        vec![
            Some(FastPortInfo {
                ifname: "pe2-p".into(),
                ifindex: 7,
                mac: CORE_MAC,
                mtu: 65535,
                tunnel: None,
            }),
            Some(FastPortInfo { ifname: "pe2-ce2".into(), ifindex: 9, mac: CE_MAC, mtu: 1500, tunnel: None }),
        ]
    }

    fn v4(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn a_customer_port_in_a_vrf_is_served_without_labels() {
        let text = pe2_text()
            .replace("interface = \"pe2-ce2\"\n", "interface = \"pe2-ce2\"\nvrf = \"cust\"\n")
            + "\n[[vrf]]\nname = \"cust\"\n";
        let fib = fib(&text);
        let (t, _) = fast_tables(&fib, &served(), &NeighborTable::new(NeighborConfig::default()), 255);
        assert_eq!(t.ports.get(&7), Some(&FastPort { vrf: 0, mac: CORE_MAC, accepts_mpls: true }));
        assert_eq!(t.ports.get(&9), Some(&FastPort { vrf: 1, mac: CE_MAC, accepts_mpls: false }));
    }

    #[test]
    fn pe2_pops_to_known_hosts_and_pushes_toward_a_resolved_gateway() {
        let fib = fib(&pe2_text());
        let mut n = NeighborTable::new(NeighborConfig::default());
        let now = Instant::now();
        let (t, used) = fast_tables(&fib, &served(), &n, 255);
        // Nothing resolved yet: the pop is there, the pushes leave it to the pipeline, and
        // the gateway is a next hop to resolve.
        assert_eq!(t.labels.get(&2002), Some(&LabelEntry::PopIp { vrf: 0, uniform: true }));
        assert_eq!(t.routes_v4.get(&(0, v4("198.18.1.0"), 24)), Some(&RouteEntry::Local));
        assert!(used.contains(&(0, "198.18.20.1".parse().unwrap())), "{used:?}");
        assert_eq!(t.ports.get(&7), Some(&FastPort { vrf: 0, mac: CORE_MAC, accepts_mpls: true }));

        n.learn(now, 0, "198.18.20.1".parse().unwrap(), P_MAC, true);
        n.learn(now, 1, "198.18.2.2".parse().unwrap(), HOST_MAC, true);
        n.learn(now, 1, "2001:db8:2::2".parse().unwrap(), HOST_MAC, true);
        let (t, used) = fast_tables(&fib, &served(), &n, 255);
        let toward_p = Adjacency { ifindex: 7, mtu: 65535, dst_mac: P_MAC, src_mac: CORE_MAC };
        assert_eq!(
            t.routes_v4.get(&(0, v4("198.18.1.0"), 24)),
            Some(&RouteEntry::Forward { labels: vec![1001], label_ttl: None, adj: toward_p })
        );
        let to_host = Adjacency { ifindex: 9, mtu: 1500, dst_mac: HOST_MAC, src_mac: CE_MAC };
        let host = RouteEntry::Forward { labels: vec![], label_ttl: None, adj: to_host };
        assert_eq!(t.routes_v4.get(&(0, v4("198.18.2.2"), 32)), Some(&host));
        let h6: Ipv6Addr = "2001:db8:2::2".parse().unwrap();
        assert_eq!(t.routes_v6.get(&(0, h6, 128)), Some(&host));
        // The subnet itself and the router's addresses stay with the pipeline.
        assert_eq!(t.routes_v4.get(&(0, v4("198.18.2.0"), 24)), Some(&RouteEntry::Local));
        assert_eq!(t.routes_v4.get(&(0, v4("198.18.2.1"), 32)), Some(&RouteEntry::Local));
        assert_eq!(t.routes_v4.get(&(0, v4("198.18.255.3"), 32)), Some(&RouteEntry::Local));
        assert!(used.contains(&(1, "198.18.2.2".parse().unwrap())), "{used:?}");
    }

    /// Applies a change to tables as [`FastPath::update`] applies it to the maps.
    fn changed(mut t: FastTables, c: &FastTablesChange) -> FastTables {
        fn set<K: Ord + Copy, V: Clone>(m: &mut BTreeMap<K, V>, c: &[(K, Option<V>)]) {
            for (k, v) in c {
                match v {
                    Some(v) => m.insert(*k, v.clone()),
                    None => m.remove(k),
                };
            }
        }
        set(&mut t.labels, &c.labels);
        set(&mut t.routes_v4, &c.routes_v4);
        set(&mut t.routes_v6, &c.routes_v6);
        t
    }

    #[test]
    fn route_changes_give_the_tables_a_full_walk_gives() {
        use vmpls_fib::{LabelRoute, NexthopGroup};
        let mut fib = fib(&pe2_text());
        let mut n = NeighborTable::new(NeighborConfig::default());
        let now = Instant::now();
        n.learn(now, 0, "198.18.20.1".parse().unwrap(), P_MAC, true);
        for host in 2..40u8 {
            n.learn(now, 1, IpAddr::V4(Ipv4Addr::new(198, 18, 2, host)), HOST_MAC, true);
        }
        n.learn(now, 1, "2001:db8:2::2".parse().unwrap(), HOST_MAC, true);
        let (mut tables, _) = fast_tables(&fib, &served(), &n, 255);
        let mut seed = 0x0fa5_7a7eu64;
        let mut rand = |k: u64| {
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            seed.wrapping_mul(0x2545_f491_4f6c_dd1d) % k
        };
        let toward_p = |labels: Vec<u32>| {
            NexthopGroup::single(Nexthop::new(0, Some("198.18.20.1".parse().unwrap()), labels)).unwrap()
        };
        for step in 0..400 {
            let mut next = fib.clone();
            for _ in 0..1 + rand(4) {
                // Prefixes inside and around the connected subnet of the hosts (a more
                // specific route takes hosts from it), labels that swap, pop or leave.
                let len = [0u8, 16, 24, 25, 28, 32][rand(6) as usize];
                let a = u32::from(Ipv4Addr::new(198, 18, 2, rand(64) as u8))
                    & (u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0));
                let route = match rand(3) {
                    0 => None,
                    1 => Some(PrefixRoute::new(RouteTarget::Forward(toward_p(vec![1000 + rand(9) as u32])))),
                    _ => Some(PrefixRoute::new(RouteTarget::Blackhole)),
                };
                let _ = next.set_prefix_route(0, IpAddr::V4(a.into()), len, route);
                let label = 3000 + rand(50) as u32;
                let route = match rand(3) {
                    0 => None,
                    1 => Some(LabelRoute {
                        action: LabelAction::Forward(toward_p(vec![label + 1])),
                        ttl_model: TtlModel::Uniform,
                    }),
                    _ => Some(LabelRoute {
                        action: LabelAction::Forward(toward_p(vec![])),
                        ttl_model: TtlModel::Pipe,
                    }),
                };
                next.set_label_route(label, route).unwrap();
            }
            let changes = next.changes_since(&fib).expect("a few changes are diffed");
            let (c, _) = fast_changes(&next, &changes, &served(), &n, 255);
            tables = changed(tables, &c);
            let (full, _) = fast_tables(&next, &served(), &n, 255);
            assert_eq!(tables, full, "step {step}");
            fib = next;
        }
    }

    /// pe1's ports with `core` an MPLS-in-UDP tunnel (IPv4 underlay if `encap`).
    fn pe1_over_a_tunnel(encap: bool) -> Vec<Option<FastPortInfo>> {
        let tunnel = Tunnel {
            local: "198.18.101.2".parse().unwrap(),
            remote: "198.18.102.2".parse().unwrap(),
            port: 6635,
            underlay_ifindex: 4,
            encap,
        };
        vec![
            Some(FastPortInfo { ifname: "pe1-ce1".into(), ifindex: 9, mac: CE_MAC, mtu: 1500, tunnel: None }),
            Some(FastPortInfo {
                ifname: "pe1-u".into(),
                ifindex: vmpls_fastpath::tunnel_key(1),
                mac: [0; 6],
                mtu: 1472,
                tunnel: Some(tunnel),
            }),
        ]
    }

    #[test]
    fn pushes_into_a_tunnel_need_no_neighbour_and_only_labelled_frames_go_in() {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/seed/pe1.toml"))
                .unwrap()
                + r#"
[[route]]
prefix = "198.18.7.0/24"
via = "198.18.10.2"
port = "core"

[[label]]
in = 3000
action = "swap"
out = [3]
via = "198.18.10.2"
port = "core"

[[label]]
in = 3001
action = "swap"
out = [3002]
via = "198.18.10.2"
port = "core"
"#;
        let fib = fib(&text);
        let n = NeighborTable::new(NeighborConfig::default());
        let (t, used) = fast_tables(&fib, &pe1_over_a_tunnel(true), &n, 255);
        let key = vmpls_fastpath::tunnel_key(1);
        let into = Adjacency { ifindex: key, mtu: 1472, dst_mac: [0; 6], src_mac: [0; 6] };
        assert_eq!(
            t.routes_v4.get(&(0, v4("198.18.2.0"), 24)),
            Some(&RouteEntry::Forward { labels: vec![1002], label_ttl: None, adj: into })
        );
        assert_eq!(t.labels.get(&3001), Some(&LabelEntry::Swap { out_label: 3002, adj: into }));
        assert_eq!(t.labels.get(&2001), Some(&LabelEntry::PopIp { vrf: 0, uniform: true }));
        // MPLS-in-UDP carries MPLS: plain IP and a PHP pop into the tunnel are the
        // pipeline's (it puts them under explicit null).
        assert_eq!(t.routes_v4.get(&(0, v4("198.18.7.0"), 24)), Some(&RouteEntry::Local));
        assert_eq!(t.labels.get(&3000), None);
        assert!(used.iter().all(|(port, _)| *port != 1), "nothing to resolve on a tunnel: {used:?}");
        assert_eq!(t.tunnels.get(&key).map(|t| t.underlay_ifindex), Some(4));
        assert!(!t.ports.contains_key(&key), "a tunnel's datagrams are found by address");
        // Over IPv6 the programs only decapsulate: the pushes stay with the pipeline.
        let (t, _) = fast_tables(&fib, &pe1_over_a_tunnel(false), &n, 255);
        assert_eq!(t.routes_v4.get(&(0, v4("198.18.2.0"), 24)), Some(&RouteEntry::Local));
        assert_eq!(t.tunnels.get(&key).map(|t| t.encap), Some(false));
    }

    #[test]
    fn a_lowered_port_mtu_reaches_the_adjacencies() {
        let fib = fib(&pe2_text());
        let mut n = NeighborTable::new(NeighborConfig::default());
        n.learn(Instant::now(), 0, "198.18.20.1".parse().unwrap(), P_MAC, true);
        let mut ports = served();
        ports[0].as_mut().unwrap().mtu = 1400;
        let (t, _) = fast_tables(&fib, &ports, &n, 255);
        let Some(RouteEntry::Forward { adj, .. }) = t.routes_v4.get(&(0, v4("198.18.1.0"), 24)) else {
            panic!("{:?}", t.routes_v4)
        };
        assert_eq!(adj.mtu, 1400, "the programs leave larger frames to the pipeline");
    }

    #[test]
    fn what_the_programs_cannot_do_stays_with_the_pipeline() {
        // A port that is not served, ECMP, a pipe-model push, a PHP label and a swap to
        // two labels (PHP and the pipe push are fast; ECMP and two labels are not).
        let text = pe2_text()
            + r#"
[[route]]
prefix = "198.18.5.0/24"
via = "198.18.20.1"
port = "core"
push = [1005]
ttl-model = "pipe"

[[route]]
prefix = "198.18.6.0/24"
nexthops = [
  { via = "198.18.20.1", port = "core", push = [1006] },
  { via = "198.18.20.9", port = "core", push = [1106] },
]

[[label]]
in = 3000
action = "swap"
out = [3]
via = "198.18.20.1"
port = "core"

[[label]]
in = 3001
action = "swap"
out = [3001, 3002]
via = "198.18.20.1"
port = "core"

[[label]]
in = 3003
action = "swap"
out = [3003]
via = "198.18.2.2"
port = "ce2"
"#;
        let fib = fib(&text);
        let mut n = NeighborTable::new(NeighborConfig::default());
        let now = Instant::now();
        n.learn(now, 0, "198.18.20.1".parse().unwrap(), P_MAC, true);
        n.learn(now, 0, "198.18.20.9".parse().unwrap(), P_MAC, true);
        n.learn(now, 1, "198.18.2.2".parse().unwrap(), HOST_MAC, true);
        let mut ports = served();
        let (t, _) = fast_tables(&fib, &ports, &n, 64);
        let toward_p = Adjacency { ifindex: 7, mtu: 65535, dst_mac: P_MAC, src_mac: CORE_MAC };
        assert_eq!(
            t.routes_v4.get(&(0, v4("198.18.5.0"), 24)),
            Some(&RouteEntry::Forward { labels: vec![1005], label_ttl: Some(64), adj: toward_p })
        );
        assert_eq!(t.routes_v4.get(&(0, v4("198.18.6.0"), 24)), Some(&RouteEntry::Local), "ECMP");
        assert_eq!(
            t.labels.get(&3000),
            Some(&LabelEntry::Php { uniform: true, adj: toward_p }),
            "PHP: pop and send the IP packet on"
        );
        assert_eq!(t.labels.get(&3001), None, "two labels out");
        assert!(matches!(t.labels.get(&3003), Some(LabelEntry::Swap { out_label: 3003, .. })));
        // The customer port not served: nothing may be sent there, nothing arrives there.
        ports[1] = None;
        let (t, used) = fast_tables(&fib, &ports, &n, 64);
        assert_eq!(t.labels.get(&3003), None);
        assert_eq!(t.routes_v4.get(&(0, v4("198.18.2.2"), 32)), None);
        assert!(!t.ports.contains_key(&9));
        assert!(used.iter().all(|(port, _)| *port == 0), "{used:?}");
    }
}
