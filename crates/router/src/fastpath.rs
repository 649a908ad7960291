//! The in-kernel fast path (`[router] fast-path = "tc"`): what of the router's forwarding
//! state the TC programs of `vmpls-fastpath` can carry, kept in step with the FIB and the
//! neighbour table, and their counters folded into the router's.
//!
//! The programs handle a frame only where the result is what the pipeline would send;
//! ECMP groups go to the programs with the FIB's bucket tables, and the programs compute
//! the pipeline's flow hash, so a flow takes one path whichever of them forwards a frame.
//! Everything else (TTL expiry, unknown labels, unresolved next hops, frames too
//! big, ports that are neither veth nor MPLS-in-UDP in the router's namespace)
//! reaches the pipeline through the port's socket as before. [`fast_tables`] therefore
//! installs every prefix of the FIB, those it cannot carry as `Local` ("leave it to the
//! pipeline"), so the kernel's longest match always lands on the route the FIB would
//! choose.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tracing::{info, warn};
use vmpls_dataplane::neighbor::{NeighborTable, NextRequest};
use vmpls_dataplane::{Dataplane, Event, Output, PacketPool, PortId};
use vmpls_fastpath::{
    Adjacency, FastCounters, FastGroup, FastMaps, FastNexthop, FastPath, FastPort, FastPortStats, FastTables,
    FastTablesChange, LabelEntry, RouteEntry, Tunnel,
};
use vmpls_fib::{Fib, FibChanges, LabelAction, NexthopGroup, PrefixRoute, RouteTarget, TtlModel, VrfId};

/// Most labels the programs push at once.
const MAX_PUSH: usize = 4;

/// A port the fast path serves: an AF_PACKET port over a veth, or an MPLS-in-UDP port
/// whose socket is in the router's namespace (`tunnel`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastPortInfo {
    /// The interface (a veth or another Ethernet device), or a tunnel's underlay interface.
    pub ifname: String,
    /// The interface's index, or a tunnel's [`vmpls_fastpath::tunnel_key`].
    pub ifindex: u32,
    pub mac: [u8; 6],
    pub mtu: u32,
    /// An MPLS-in-UDP port: the tunnel the programs encapsulate into and decapsulate from.
    pub tunnel: Option<Tunnel>,
    /// A port whose interface is in a VRF's namespace: that namespace and the VRF
    /// interface frames cross it by.
    pub netns: Option<PortNetns>,
    /// How the programs hand frames to the interface.
    pub delivery: vmpls_fastpath::Delivery,
}

/// The VRF namespace of a [`FastPortInfo`], and how the programs cross into it.
#[derive(Debug, Clone)]
pub struct PortNetns {
    /// The namespace, held open.
    pub ns: crate::vrfs::VrfNetns,
    /// Its number in the programs' maps ([`FastPort::netns`]): 1 and up.
    pub number: u8,
    /// The VRF interface (a veth named like the VRF, one end here, one there).
    pub vrf_interface: String,
    /// Its ends' ifindexes.
    pub crossing: vmpls_fastpath::Crossing,
}

impl PartialEq for PortNetns {
    fn eq(&self, other: &Self) -> bool {
        (self.ns.name.as_str(), self.number, &self.vrf_interface, self.crossing)
            == (other.ns.name.as_str(), other.number, &other.vrf_interface, other.crossing)
    }
}

impl Eq for PortNetns {}

impl FastPortInfo {
    /// The name it is attached under in the [`FastPath`]: the interface's, prefixed with
    /// its namespace's for a VRF namespace's (its name may be taken in the router's).
    fn attach_key(&self) -> String {
        match &self.netns {
            Some(n) => format!("{}/{}", n.ns.name, self.ifname),
            None => self.ifname.clone(),
        }
    }

    /// Runs `f` in the port's namespace.
    fn run_in<R: Send>(&self, f: impl FnOnce() -> R + Send) -> std::io::Result<R> {
        crate::vrfs::run_in(self.netns.as_ref().map(|n| &n.ns), f)
    }
}

impl FastPortInfo {
    /// Sending out of this port to the neighbour with MAC `mac` (a tunnel has none: the
    /// kernel resolves the underlay's next hop).
    fn adjacency(&self, mac: [u8; 6]) -> Adjacency {
        Adjacency { ifindex: self.ifindex, mtu: self.mtu, dst_mac: mac, src_mac: self.mac }
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
    /// The entry being made.
    key: FastKey,
    /// The next hops the entries made so far send to, with the entry; an entry made again
    /// (a host entry over a route's) is listed again, the last time for what it is now.
    used: Vec<(FastKey, PortId, IpAddr)>,
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
        Entries { fib, ports, neighbors, default_ttl, locals, key: FastKey::Label(0), used: Vec::new() }
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
        self.used.push((self.key, port, addr));
        Some(p.adjacency(self.neighbors.mac(port, addr)?))
    }

    /// The group's next hops as the programs send to them, if they can send to every one
    /// of them (a next hop the programs cannot take leaves the whole entry to the
    /// pipeline, so the flows keep the FIB's split): labels at most `max_labels`.
    fn group(&mut self, group: &NexthopGroup, max_labels: usize) -> Option<FastGroup> {
        let mut nexthops = Vec::with_capacity(group.nexthops().len());
        let mut all = true;
        for nh in group.nexthops() {
            // Every next hop is recorded (adjacency() does it), resolved or not, so that
            // the entry is made again when any of them is learned.
            let adj = match nh.via {
                Some(via) if nh.labels.len() <= max_labels => {
                    self.adjacency(nh.port, via, !nh.labels.is_empty())
                }
                _ => None,
            };
            match adj {
                Some(adj) => nexthops.push(FastNexthop { labels: nh.labels.clone(), adj }),
                None => all = false,
            }
        }
        all.then(|| FastGroup { nexthops, buckets: group.buckets().to_vec() })
    }

    /// The entry of an incoming label, if the programs can switch it.
    fn label(&mut self, label: u32) -> Option<LabelEntry> {
        self.key = FastKey::Label(label);
        let route = self.fib.labels.get(label)?;
        let uniform = route.ttl_model() == TtlModel::Uniform;
        match &route.action() {
            LabelAction::PopAndLookup { vrf } => Some(LabelEntry::PopIp { vrf: *vrf, uniform }),
            // Pseudowires stay in the pipeline (see `FastPath`'s start-up log).
            LabelAction::Pseudowire { .. } => None,
            LabelAction::Forward(group) if group.is_multipath() => {
                let group = Arc::new(self.group(group, 1)?);
                Some(LabelEntry::Multipath { uniform, group })
            }
            LabelAction::Forward(group) => {
                let nh = &group.nexthops()[0];
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

    /// The entry of a route at `key`: forwarded by the programs, or `Local` (left to the
    /// pipeline).
    fn route(&mut self, key: FastKey, route: &PrefixRoute) -> RouteEntry {
        self.key = key;
        let RouteTarget::Forward(group) = route.target() else { return RouteEntry::Local };
        let label_ttl = match route.ttl_model() {
            TtlModel::Uniform => None,
            TtlModel::Pipe => Some(self.default_ttl),
        };
        if group.is_multipath() {
            return match self.group(group, MAX_PUSH) {
                Some(g) => RouteEntry::Multipath { label_ttl, group: Arc::new(g) },
                None => RouteEntry::Local,
            };
        }
        let nh = &group.nexthops()[0];
        if nh.labels.len() > MAX_PUSH {
            return RouteEntry::Local;
        }
        let labelled = !nh.labels.is_empty();
        let Some(adj) = nh.via.and_then(|via| self.adjacency(nh.port, via, labelled)) else {
            return RouteEntry::Local;
        };
        RouteEntry::Forward { labels: nh.labels.clone(), label_ttl, adj }
    }

    /// The host entry of a neighbour on a connected subnet, if `addr` is one: only where
    /// that subnet is the longest match (a more specific route through a gateway wins).
    fn neighbor_host(&mut self, vrf_id: VrfId, addr: IpAddr) -> Option<RouteEntry> {
        self.key = FastKey::prefix(vrf_id, addr, if addr.is_ipv4() { 32 } else { 128 });
        let &RouteTarget::Connected { port } = self.fib.vrf(vrf_id)?.lookup(addr)?.target() else {
            return None;
        };
        let p = self.fast(port).filter(|p| p.tunnel.is_none())?;
        let mac = self.neighbors.mac(port, addr)?;
        self.used.push((self.key, port, addr));
        Some(RouteEntry::Forward { labels: Vec::new(), label_ttl: None, adj: p.adjacency(mac) })
    }

    /// The entry of one prefix as [`fast_tables`] makes it: the router's own addresses are
    /// `Local`, then neighbours' host entries, then the FIB's route, if any.
    fn prefix(&mut self, vrf_id: VrfId, addr: IpAddr, len: u8) -> Option<RouteEntry> {
        let key = FastKey::prefix(vrf_id, addr, len);
        self.key = key;
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
        Some(self.route(key, route))
    }

    fn into_used(self) -> Vec<(FastKey, PortId, IpAddr)> {
        self.used
    }
}

/// The key of an entry of the fast path's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum FastKey {
    Label(u32),
    V4((VrfId, Ipv4Addr, u8)),
    V6((VrfId, Ipv6Addr, u8)),
}

impl FastKey {
    fn prefix(vrf: VrfId, addr: IpAddr, len: u8) -> FastKey {
        match addr {
            IpAddr::V4(a) => FastKey::V4((vrf, a, len)),
            IpAddr::V6(a) => FastKey::V6((vrf, a, len)),
        }
    }
}

/// The fast path's tables for `fib` as the neighbour table knows the next hops now, and
/// the next hops they depend on (resolved or not: the caller keeps them resolved), each
/// with the entry that sends to it. `ports[i]` is `Some` for the ports the fast path
/// serves.
fn fast_tables(
    fib: &Fib,
    ports: &[Option<FastPortInfo>],
    neighbors: &NeighborTable,
    default_ttl: u8,
) -> (FastTables, Vec<(FastKey, PortId, IpAddr)>) {
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
                let netns = p.netns.as_ref().map_or(0, |n| n.number);
                t.ports.insert(
                    p.ifindex,
                    FastPort { vrf, mac: p.mac, accepts_mpls, netns, delivery: p.delivery },
                );
                if let Some(n) = &p.netns {
                    t.crossings.insert(n.number, n.crossing);
                }
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
            t.routes_v4.insert((vrf_id, addr, len), e.route(FastKey::V4((vrf_id, addr, len)), route));
        }
        for (addr, len, route) in vrf.v6.iter() {
            t.routes_v6.insert((vrf_id, addr, len), e.route(FastKey::V6((vrf_id, addr, len)), route));
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

/// The keys of the entries that `changes` (between two versions of the FIB, `fib` the
/// newer) touch: the changed labels and prefixes, and the host entries of the neighbours
/// that a changed prefix covers (whether a neighbour's subnet is its longest match may
/// have changed).
fn changed_keys(fib: &Fib, changes: &FibChanges, neighbors: &NeighborTable) -> BTreeSet<FastKey> {
    let mut keys: BTreeSet<FastKey> = changes.labels.iter().map(|&l| FastKey::Label(l)).collect();
    keys.extend(changes.v4.iter().map(|&k| FastKey::V4(k)));
    keys.extend(changes.v6.iter().map(|&k| FastKey::V6(k)));
    if changes.v4.is_empty() && changes.v6.is_empty() {
        return keys;
    }
    for (port, addr, _) in neighbors.entries() {
        let Some(vrf_id) = fib.vrf_of_port(port) else { continue };
        match addr {
            IpAddr::V4(a) if changes.v4.iter().any(|&(v, p, l)| v == vrf_id && covers4(p, l, a)) => {
                keys.insert(FastKey::V4((vrf_id, a, 32)));
            }
            IpAddr::V6(a) if changes.v6.iter().any(|&(v, p, l)| v == vrf_id && covers6(p, l, a)) => {
                keys.insert(FastKey::V6((vrf_id, a, 128)));
            }
            _ => {}
        }
    }
    keys
}

/// The entries of `keys` made as [`fast_tables`] makes them, and the next hops those
/// entries send to.
fn fast_entries(
    fib: &Fib,
    keys: &BTreeSet<FastKey>,
    ports: &[Option<FastPortInfo>],
    neighbors: &NeighborTable,
    default_ttl: u8,
) -> (FastTablesChange, Vec<(FastKey, PortId, IpAddr)>) {
    let mut e = Entries::new(fib, ports, neighbors, default_ttl);
    let mut c = FastTablesChange::default();
    for &key in keys {
        match key {
            FastKey::Label(label) => c.labels.push((label, e.label(label))),
            FastKey::V4((vrf, a, len)) => {
                c.routes_v4.push(((vrf, a, len), e.prefix(vrf, IpAddr::V4(a), len)))
            }
            FastKey::V6((vrf, a, len)) => {
                c.routes_v6.push(((vrf, a, len), e.prefix(vrf, IpAddr::V6(a), len)))
            }
        }
    }
    (c, e.into_used())
}

/// The entries of the fast path's tables that `changes` (between two versions of the FIB,
/// `fib` the newer) touch ([`changed_keys`]), made as [`fast_tables`] makes them, and the
/// next hops those entries send to.
#[cfg(test)]
fn fast_changes(
    fib: &Fib,
    changes: &FibChanges,
    ports: &[Option<FastPortInfo>],
    neighbors: &NeighborTable,
    default_ttl: u8,
) -> (FastTablesChange, Vec<(FastKey, PortId, IpAddr)>) {
    fast_entries(fib, &changed_keys(fib, changes, neighbors), ports, neighbors, default_ttl)
}

/// Which entries of the installed tables send to each next hop: a neighbour's new MAC
/// is written into those entries only, not into a whole new set of tables.
#[derive(Debug, Default)]
struct AdjacencyIndex {
    /// The next hops of each entry (several for an ECMP entry).
    by_key: HashMap<FastKey, Vec<(PortId, IpAddr)>>,
    by_neighbor: HashMap<(PortId, IpAddr), HashSet<FastKey>>,
}

impl AdjacencyIndex {
    fn from_used(used: Vec<(FastKey, PortId, IpAddr)>) -> AdjacencyIndex {
        let mut index = AdjacencyIndex::default();
        index.record([], used);
        index
    }

    /// Records the next hops of entries made again: `made` lists every entry made, `used`
    /// the next hops of those that send to some, an entry's listed one after the other
    /// (an entry listed again later, made again, is what its last run says).
    fn record(&mut self, made: impl IntoIterator<Item = FastKey>, used: Vec<(FastKey, PortId, IpAddr)>) {
        for key in made {
            self.forget(&key);
        }
        let mut run = None;
        for (key, port, addr) in used {
            if run != Some(key) {
                self.forget(&key);
                run = Some(key);
            }
            self.by_key.entry(key).or_default().push((port, addr));
            self.by_neighbor.entry((port, addr)).or_default().insert(key);
        }
    }

    fn forget(&mut self, key: &FastKey) {
        let Some(nhs) = self.by_key.remove(key) else { return };
        for nh in nhs {
            if let Some(keys) = self.by_neighbor.get_mut(&nh) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_neighbor.remove(&nh);
                }
            }
        }
    }

    /// The entries that send to `neighbor`.
    fn keys_of(&self, neighbor: &(PortId, IpAddr)) -> impl Iterator<Item = FastKey> + '_ {
        self.by_neighbor.get(neighbor).into_iter().flatten().copied()
    }

    /// The next hops the entries send to.
    fn next_hops(&self) -> impl Iterator<Item = (PortId, IpAddr)> + '_ {
        self.by_neighbor.keys().copied()
    }
}

/// The resolved MACs of a neighbour table.
fn resolved_macs(neighbors: &NeighborTable) -> HashMap<(PortId, IpAddr), [u8; 6]> {
    neighbors.entries().filter_map(|(port, addr, mac)| Some(((port, addr), mac?))).collect()
}

/// The neighbours whose MAC is not what `before` says: learned, changed or gone.
fn moved_neighbors(
    before: &HashMap<(PortId, IpAddr), [u8; 6]>,
    now: &HashMap<(PortId, IpAddr), [u8; 6]>,
) -> Vec<(PortId, IpAddr)> {
    let changed = now.iter().filter(|(k, mac)| before.get(k) != Some(mac)).map(|(k, _)| *k);
    let gone = before.keys().filter(|k| !now.contains_key(k)).copied();
    changed.chain(gone).collect()
}

/// What the fast path's maps were last brought to, in full.
struct Installed {
    fib: Arc<Fib>,
    /// The neighbour table's MACs generation, and its resolved MACs.
    macs_generation: u64,
    macs: HashMap<(PortId, IpAddr), [u8; 6]>,
}

/// The fast path's timer step: how soon after a tick the next may run, and the unit of a
/// failed install's retry back-off (1 to 32 ticks).
const FAST_TICK: Duration = Duration::from_millis(200);

/// Keeps the fast path's maps equal to the FIB and the neighbour table: a route change or a
/// neighbour's new MAC writes only the entries it touches; a version is recorded as
/// installed only once every write of it succeeded.
#[derive(Default)]
struct Installer {
    installed: Option<Installed>,
    index: AdjacencyIndex,
    /// After a failed install: timer ticks ([`FAST_TICK`]) until the retry, which makes
    /// the tables anew.
    retry_in: Option<u32>,
    /// Installs that failed, since the start, and since the last one that did not.
    failures: u64,
    failures_in_a_row: u32,
    /// What the kernel's maps could not hold at the last install (logged when it changes).
    overflow: vmpls_fastpath::Overflow,
}

impl Installer {
    /// The next install makes the tables anew (the served ports changed).
    fn invalidate(&mut self) {
        self.installed = None;
    }

    /// Brings `maps` to `fib` and `neighbors` if either changed since the last install;
    /// after a failed one, waits until [`tick`](Installer::tick) says the retry is due.
    fn sync<M: FastMaps>(
        &mut self,
        maps: &mut M,
        fib: Arc<Fib>,
        neighbors: &NeighborTable,
        ports: &[Option<FastPortInfo>],
        default_ttl: u8,
    ) {
        let generation = neighbors.macs_generation();
        if self.retry_in.is_some()
            || self
                .installed
                .as_ref()
                .is_some_and(|i| Arc::ptr_eq(&i.fib, &fib) && i.macs_generation == generation)
        {
            return;
        }
        let macs = match &self.installed {
            Some(i) if i.macs_generation == generation => None,
            _ => Some(resolved_macs(neighbors)),
        };
        // A route change on a FIB copied from the one installed, or neighbours with a new
        // MAC: only the entries they touch are made and written, so a change is in force
        // in time that does not grow with the tables.
        let keys = self.installed.as_ref().and_then(|i| {
            let changes =
                if Arc::ptr_eq(&i.fib, &fib) { FibChanges::default() } else { fib.changes_since(&i.fib)? };
            let mut keys = changed_keys(&fib, &changes, neighbors);
            for n in macs.as_ref().map(|now| moved_neighbors(&i.macs, now)).unwrap_or_default() {
                keys.extend(self.index.keys_of(&n));
                if let Some(vrf) = fib.vrf_of_port(n.0) {
                    keys.insert(FastKey::prefix(vrf, n.1, if n.1.is_ipv4() { 32 } else { 128 }));
                }
            }
            Some(keys)
        });
        let applied = match keys {
            Some(keys) => {
                let (change, used) = fast_entries(&fib, &keys, ports, neighbors, default_ttl);
                maps.update(&change).inspect(|_| self.index.record(keys, used))
            }
            None => {
                let (tables, used) = fast_tables(&fib, ports, neighbors, default_ttl);
                maps.apply(&tables).inspect(|_| self.index = AdjacencyIndex::from_used(used))
            }
        };
        match applied {
            Ok(overflow) => {
                if overflow != self.overflow {
                    log_overflow(&overflow);
                    self.overflow = overflow;
                }
                if self.failures_in_a_row > 0 {
                    info!(failures = self.failures_in_a_row, "fast path tables installed again");
                    self.failures_in_a_row = 0;
                }
                let macs = match (macs, self.installed.take()) {
                    (Some(macs), _) => macs,
                    (None, Some(i)) => i.macs,
                    (None, None) => resolved_macs(neighbors),
                };
                self.installed = Some(Installed { fib, macs_generation: generation, macs });
            }
            Err(e) => {
                // Part of it may be in the maps: nothing is recorded as installed, and the
                // retry makes the whole tables, which the maps compare with what they hold.
                // A failure that persists is retried less and less often (up to every
                // 32 ticks), as each retry walks the whole tables.
                self.installed = None;
                self.failures += 1;
                self.failures_in_a_row += 1;
                self.retry_in = Some(1 << (self.failures_in_a_row - 1).min(5));
                if self.failures_in_a_row.is_power_of_two() {
                    warn!(error = %e, failures = self.failures_in_a_row, "fast path tables not installed; the pipeline forwards what they miss until a retry installs them");
                }
            }
        }
    }

    /// When the fast path's [`tick`](FastPathRuntime::tick) next has work, the last
    /// having run at `ticked`: the first time the neighbour table would ask for one of
    /// the next hops the programs send to, or a tick later while a retry is counted down
    /// or a next hop has no entry (or used up its requests) and must be asked for anew.
    /// Never sooner than a tick after the last one, so a next hop the table will not ask
    /// for cannot make the loop spin. `None`: nothing to do until the tables change.
    fn next_tick(&self, ticked: Instant, neighbors: &NeighborTable) -> Option<Instant> {
        let soonest = ticked + FAST_TICK;
        if self.retry_in.is_some() {
            return Some(soonest);
        }
        self.index
            .next_hops()
            .filter_map(|(port, addr)| match neighbors.next_request(port, addr) {
                NextRequest::At(t) => Some(t.max(soonest)),
                NextRequest::Never if neighbors.is_static(port, addr) => None,
                NextRequest::Never | NextRequest::NoEntry => Some(soonest),
            })
            .min()
    }

    /// Counts a timer tick toward the retry of a failed install; whether the retry is due
    /// now (the next [`sync`](Installer::sync) tries again).
    fn tick(&mut self) -> bool {
        match self.retry_in {
            Some(n) if n > 1 => {
                self.retry_in = Some(n - 1);
                false
            }
            Some(_) => {
                self.retry_in = None;
                true
            }
            None => false,
        }
    }
}

fn log_overflow(overflow: &vmpls_fastpath::Overflow) {
    if overflow.is_none() {
        info!("fast path: its maps hold the whole table again");
    } else {
        warn!(
            labels_left_out = overflow.labels_left_out,
            ipv4_left_out = overflow.v4_off,
            ipv6_left_out = overflow.v6_off,
            ecmp_groups_left_out = overflow.groups_left_out,
            label_capacity = vmpls_fastpath::LABEL_CAPACITY,
            prefix_capacity = vmpls_fastpath::ROUTE_CAPACITY,
            group_capacity = vmpls_fastpath::GROUP_CAPACITY,
            "fast path: the kernel's maps cannot hold the whole table; the pipeline forwards what they leave out (a family's prefixes all of them, so that no less specific prefix answers for a missing one)"
        );
    }
}

fn covers4(net: Ipv4Addr, len: u8, a: Ipv4Addr) -> bool {
    len == 0 || (u32::from(net) ^ u32::from(a)) >> (32 - u32::from(len)) == 0
}

fn covers6(net: Ipv6Addr, len: u8, a: Ipv6Addr) -> bool {
    len == 0 || (u128::from(net) ^ u128::from(a)) >> (128 - u32::from(len)) == 0
}

/// Takes the fast path's filter off a packet socket (`SO_DETACH_BPF`); a socket without
/// one is left as it is (`SO_DETACH_FILTER`, the same option).
/// Puts the socket filter on a port's socket, raising the kernel's limit on socket option
/// memory where it is below what the filter takes (kernels before 6.9), with a log line.
fn filter_socket(fp: &FastPath, socket: BorrowedFd<'_>) -> anyhow::Result<()> {
    let raised = fp.filter_socket_raising_optmem(socket).map_err(|e| {
        let out_of_memory = e.is_out_of_option_memory();
        let e = anyhow::Error::from(e);
        if out_of_memory {
            e.context(format!(
                "net.core.optmem_max is below what the socket filter takes and cannot be raised from here (it can only from the initial network namespace): sysctl -w net.core.optmem_max={} there",
                vmpls_fastpath::OPTMEM_FOR_FILTER
            ))
        } else {
            e
        }
    })?;
    if let Some(old) = raised {
        info!(
            from = old,
            to = vmpls_fastpath::OPTMEM_FOR_FILTER,
            "raised net.core.optmem_max: the kernel charges the fast path's socket filter to it"
        );
    }
    Ok(())
}

fn unfilter_socket(socket: BorrowedFd<'_>) {
    // SO_DETACH_BPF ignores its value.
    if let Err(e) = vmpls_sys::sockopt::set_int(socket, libc::SOL_SOCKET, libc::SO_DETACH_FILTER, 0)
        && e.raw_os_error() != Some(libc::ENOENT)
    {
        warn!(error = %e, "taking the fast path's filter off a packet socket");
    }
}

/// Attaches the programs to port `p`'s interface, and for a port in a VRF's namespace
/// also to both ends of the VRF's interface (once per end: attaching again does nothing).
fn attach_port(fp: &mut FastPath, p: &FastPortInfo) -> anyhow::Result<()> {
    let Some(n) = &p.netns else {
        return fp.attach(&p.ifname).with_context(|| format!("attaching the fast path to {}", p.ifname));
    };
    let key = p.attach_key();
    let (vrf_key, root_key) = (format!("{}/{}", n.ns.name, n.vrf_interface), format!("/{}", n.vrf_interface));
    fp.attach_named(&root_key, &n.vrf_interface)
        .with_context(|| format!("attaching the fast path to the VRF interface {}", n.vrf_interface))?;
    n.ns.run(|| -> anyhow::Result<()> {
        fp.attach_named(&vrf_key, &n.vrf_interface).with_context(|| {
            format!("attaching the fast path to the VRF interface {} in its namespace", n.vrf_interface)
        })?;
        fp.attach_named(&key, &p.ifname)
            .with_context(|| format!("attaching the fast path to {} in namespace {}", p.ifname, n.ns.name))
    })
    .with_context(|| format!("entering namespace {}", n.ns.name))?
}

/// The fast path of a running router: the loaded programs, the ports they serve, and
/// what was last installed and counted.
pub struct FastPathRuntime {
    fp: FastPath,
    ports: Vec<Option<FastPortInfo>>,
    default_ttl: u8,
    installer: Installer,
    /// Counters as last read, to add only the difference to the router's.
    counted: FastCounters,
    counted_labels: BTreeMap<u32, (u64, u64)>,
    counted_ports: BTreeMap<u32, FastPortStats>,
    /// Frames and bytes the programs took in and sent on, by port (across reopens).
    port_counts: Vec<FastPortStats>,
    /// Whether each port switches by label in its driver, as last logged (`None`: not yet).
    xdp_states: Vec<Option<Result<bool, String>>>,
    /// When [`tick`](FastPathRuntime::tick) last ran (the start before the first).
    ticked: Instant,
    /// Whether each served port's interface is up with a carrier, as last checked: the
    /// programs send to running ports only (a frame redirected to a down veth is lost
    /// without a trace; the pipeline counts its send errors).
    running: Vec<bool>,
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
            let attached = filter_socket(&fp, *socket)
                .with_context(|| format!("filtering the socket of {}", p.ifname))
                .and_then(|()| {
                    filtered.push(*socket);
                    attach_port(&mut fp, p)
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
            xdp_states: vec![None; n],
            port_counts: vec![FastPortStats::default(); n],
            running: vec![true; n],
            default_ttl,
            installer: Installer::default(),
            counted: FastCounters::default(),
            counted_labels: BTreeMap::new(),
            counted_ports: BTreeMap::new(),
            ticked: Instant::now(),
        })
    }

    /// After a port's interface was deleted and created anew (a new ifindex, a new
    /// socket): attaches again, filters the new socket, and reinstalls the tables.
    pub fn port_reopened(&mut self, port: PortId, ifindex: u32, socket: BorrowedFd<'_>) {
        let Some(Some(p)) = self.ports.get_mut(usize::from(port)) else { return };
        p.ifindex = ifindex;
        let ifname = p.ifname.clone();
        let _ = self.fp.detach(&p.attach_key());
        let r = filter_socket(&self.fp, socket).and_then(|()| attach_port(&mut self.fp, p));
        match r {
            Ok(()) => info!(interface = %ifname, ifindex, "fast path attached again"),
            Err(e) => {
                warn!(interface = %ifname, error = %e, "fast path not attached again; the pipeline forwards")
            }
        }
        self.installer.invalidate();
    }

    /// A port's MTU changed (its interface's, followed by the router): the programs
    /// check frames against it from the next install on, which this call forces.
    pub fn set_port_mtu(&mut self, port: PortId, mtu: u32) {
        let Some(Some(p)) = self.ports.get_mut(usize::from(port)) else { return };
        if p.mtu != mtu {
            info!(interface = %p.ifname, old_mtu = p.mtu, mtu, "fast path: port MTU changed");
            p.mtu = mtu;
            self.installer.invalidate();
        }
    }

    /// Checks the served ports' interfaces (with the router's link checks, every second):
    /// a port whose interface went down or lost its carrier leaves the tables until it
    /// is running again.
    pub fn check_links(&mut self) {
        for (p, running) in self.ports.iter().zip(&mut self.running) {
            let Some(p) = p else { continue };
            let now = p.run_in(|| vmpls_ports::AfPacketPort::interface_running(&p.ifname)).unwrap_or(false);
            if now != *running {
                info!(interface = %p.ifname, running = now, "fast path: link state changed");
                *running = now;
                self.installer.invalidate();
            }
        }
        self.fp.watch_label_switching();
        self.log_xdp_switching();
    }

    /// Installs what changed in the FIB or the neighbour table since the last install.
    /// Cheap when nothing changed: a pointer and a number compared.
    pub fn sync(&mut self, dp: &Dataplane) {
        let running: Vec<_> =
            self.ports.iter().zip(&self.running).map(|(p, up)| p.clone().filter(|_| *up)).collect();
        self.installer.sync(&mut self.fp, dp.fib().load_full(), dp.neighbors(), &running, self.default_ttl);
    }

    /// Says when a port starts or stops switching by label in its driver (see
    /// `FastPath::xdp_switching`).
    fn log_xdp_switching(&mut self) {
        for (p, logged) in self.ports.iter().zip(&mut self.xdp_states) {
            let Some(p) = p else { continue };
            if p.tunnel.is_some() {
                continue;
            }
            let now = self.fp.xdp_switching(&p.attach_key());
            if logged.as_ref() == Some(&now) {
                continue;
            }
            match &now {
                Ok(true) => {
                    info!(interface = %p.ifname, "label switching in the virtio-net driver (XDP): the segments of a TCP flow whose label pops here merge again in GRO and go on as one IP super-frame; swaps toward another such port go there from the driver")
                }
                Ok(false) if logged.is_some() => {
                    info!(interface = %p.ifname, "no more label switching in the driver: the port may no longer receive labelled frames")
                }
                Ok(false) => {}
                Err(why) => {
                    warn!(interface = %p.ifname, why = %why, "no label switching in this virtio-net port's driver (XDP): labels are swapped and popped after GRO, frame by frame, by the TC program")
                }
            }
            *logged = Some(now);
        }
    }

    /// When [`tick`](FastPathRuntime::tick) next has work (see `Installer::next_tick`);
    /// the forwarding loop sleeps no longer. `None`: no timer runs.
    pub fn poll_timeout(&self, neighbors: &NeighborTable) -> Option<Instant> {
        self.installer.next_tick(self.ticked, neighbors)
    }

    /// Runs when [`poll_timeout`](FastPathRuntime::poll_timeout) says: keeps the next
    /// hops the programs send to resolved (the pipeline never sees their traffic), and
    /// tries a failed install again.
    pub fn tick(&mut self, now: Instant, dp: &mut Dataplane, pool: &mut PacketPool, out: &mut Output) {
        self.ticked = now;
        for (port, addr) in self.installer.index.next_hops() {
            dp.use_neighbor(now, port, addr, pool, out);
        }
        if self.installer.tick() {
            self.sync(dp);
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
            ("crossed", c.crossed),
            ("repassed", c.repassed),
            ("act_mpls", c.act_mpls),
            ("recalled", c.recalled),
            ("xdp_pop", c.xdp_pop),
            ("xdp_swap", c.xdp_swap),
            ("install_failed", self.installer.failures),
        ]
    }

    /// The underlay interface of port `port` if it is a tunnel the programs serve, and
    /// whether they encapsulate into it.
    pub fn tunnel_of(&self, port: usize) -> Option<(String, bool)> {
        let p = self.ports.get(port)?.as_ref()?;
        p.tunnel.map(|t| (p.ifname.clone(), t.encap))
    }

    /// Whether port `port` has its action chain (see `FastPath::act_chain`), or why
    /// not; `None` if the programs do not serve it.
    pub fn act_chain_of(&self, port: usize) -> Option<Result<(), String>> {
        let p = self.ports.get(port)?.as_ref()?;
        if p.tunnel.is_some() {
            return None;
        }
        Some(self.fp.act_chain(&p.attach_key()))
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
        // Swaps in the driver (XDP) are swaps.
        let swaps = now.swap.saturating_sub(before.swap) + now.xdp_swap.saturating_sub(before.xdp_swap);
        c.event(Event::LabelSwap, swaps);
        c.event(Event::LabelPush, now.push.saturating_sub(before.push));
        // A pop before GRO is a pop (the packet is then counted again as it goes on).
        let pops = now.pop.saturating_sub(before.pop) + now.xdp_pop.saturating_sub(before.xdp_pop);
        c.event(Event::LabelPop, pops);
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
    use vmpls_fastpath::Delivery;

    /// A port of the router's namespace over a veth, as `fast_tables` enters it.
    fn veth_port(vrf: u16, mac: [u8; 6], accepts_mpls: bool) -> FastPort {
        FastPort { vrf, mac, accepts_mpls, netns: 0, delivery: Delivery::VethPeer }
    }

    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::path::Path;

    use vmpls_dataplane::neighbor::{NeighborConfig, Resolution};
    use vmpls_fib::Nexthop;

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
                netns: None,
                delivery: Delivery::VethPeer,
            }),
            Some(FastPortInfo {
                ifname: "pe2-ce2".into(),
                ifindex: 9,
                mac: CE_MAC,
                mtu: 1500,
                tunnel: None,
                netns: None,
                delivery: Delivery::VethPeer,
            }),
        ]
    }

    fn next_hops(used: &[(FastKey, PortId, IpAddr)]) -> Vec<(PortId, IpAddr)> {
        used.iter().map(|&(_, port, addr)| (port, addr)).collect()
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
        assert_eq!(t.ports.get(&7), Some(&veth_port(0, CORE_MAC, true)));
        assert_eq!(t.ports.get(&9), Some(&veth_port(1, CE_MAC, false)));
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
        assert!(next_hops(&used).contains(&(0, "198.18.20.1".parse().unwrap())), "{used:?}");
        assert_eq!(t.ports.get(&7), Some(&veth_port(0, CORE_MAC, true)));

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
        assert!(next_hops(&used).contains(&(1, "198.18.2.2".parse().unwrap())), "{used:?}");
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
                    1 => Some(LabelRoute::new(
                        LabelAction::Forward(toward_p(vec![label + 1])),
                        TtlModel::Uniform,
                    )),
                    _ => Some(LabelRoute::new(LabelAction::Forward(toward_p(vec![])), TtlModel::Pipe)),
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
            Some(FastPortInfo {
                ifname: "pe1-ce1".into(),
                ifindex: 9,
                mac: CE_MAC,
                mtu: 1500,
                tunnel: None,
                netns: None,
                delivery: Delivery::VethPeer,
            }),
            Some(FastPortInfo {
                ifname: "pe1-u".into(),
                ifindex: vmpls_fastpath::tunnel_key(1),
                mac: [0; 6],
                mtu: 1472,
                tunnel: Some(tunnel),
                netns: None,
                delivery: Delivery::VethPeer,
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
        assert!(used.iter().all(|(_, port, _)| *port != 1), "nothing to resolve on a tunnel: {used:?}");
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
        // two labels (PHP, the pipe push and ECMP whose next hops are all known are fast;
        // ECMP with an unresolved next hop and two labels are not).
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

[[route]]
prefix = "198.18.7.0/24"
nexthops = [
  { via = "198.18.20.1", port = "core", push = [1007] },
  { via = "198.18.20.77", port = "core", push = [1107] },
]

[[label]]
in = 3004
action = "swap"
nexthops = [
  { out = [3005], via = "198.18.20.1", port = "core", weight = 3 },
  { out = [3], via = "198.18.20.9", port = "core" },
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
        let nh = |labels: Vec<u32>| FastNexthop { labels, adj: toward_p };
        let group = FastGroup { nexthops: vec![nh(vec![1006]), nh(vec![1106])], buckets: vec![0, 1] };
        assert_eq!(
            t.routes_v4.get(&(0, v4("198.18.6.0"), 24)),
            Some(&RouteEntry::Multipath { label_ttl: None, group: Arc::new(group) }),
            "ECMP with the FIB's buckets"
        );
        assert_eq!(
            t.routes_v4.get(&(0, v4("198.18.7.0"), 24)),
            Some(&RouteEntry::Local),
            "a next hop unknown"
        );
        // Weights 3:1 are the FIB's bucket table; implicit null is a pop.
        let group = FastGroup { nexthops: vec![nh(vec![3005]), nh(vec![])], buckets: vec![0, 1, 0, 0] };
        assert_eq!(
            t.labels.get(&3004),
            Some(&LabelEntry::Multipath { uniform: true, group: Arc::new(group) })
        );
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
        assert!(used.iter().all(|(_, port, _)| *port == 0), "{used:?}");
        // Every next hop of an ECMP entry is recorded, the unresolved one too.
        let index = AdjacencyIndex::from_used(used);
        let key = FastKey::V4((0, v4("198.18.7.0"), 24));
        for via in ["198.18.20.1", "198.18.20.77"] {
            assert!(index.keys_of(&(0, via.parse().unwrap())).any(|k| k == key), "{via}");
        }
    }

    /// The maps as a test sees them: the tables written so far, every entry written
    /// counted, and a write that fails on demand.
    #[derive(Default)]
    struct RecordingMaps {
        tables: FastTables,
        /// Entries written (upserted or removed), since the start.
        entries_written: usize,
        /// The write after this many more fails; the writes before it are in place.
        fail_after: Option<usize>,
    }

    impl RecordingMaps {
        fn write<K: Ord + Copy, V: Clone>(
            &mut self,
            map: fn(&mut FastTables) -> &mut BTreeMap<K, V>,
            key: K,
            value: Option<V>,
        ) -> Result<(), vmpls_fastpath::FastPathError> {
            match &mut self.fail_after {
                Some(0) => {
                    self.fail_after = None;
                    return Err(vmpls_fastpath::FastPathError::MissingMap("fp_routes_v4"));
                }
                Some(n) => *n -= 1,
                None => {}
            }
            self.entries_written += 1;
            match value {
                Some(v) => map(&mut self.tables).insert(key, v),
                None => map(&mut self.tables).remove(&key),
            };
            Ok(())
        }

        fn write_all<K: Ord + Copy, V: Clone + PartialEq>(
            &mut self,
            map: fn(&mut FastTables) -> &mut BTreeMap<K, V>,
            wanted: &BTreeMap<K, V>,
        ) -> Result<(), vmpls_fastpath::FastPathError> {
            for (k, v) in wanted {
                self.write(map, *k, Some(v.clone()))?;
            }
            let gone: Vec<K> =
                map(&mut self.tables).keys().filter(|k| !wanted.contains_key(k)).copied().collect();
            for k in gone {
                self.write(map, k, None)?;
            }
            Ok(())
        }
    }

    impl FastMaps for RecordingMaps {
        fn apply(
            &mut self,
            t: &FastTables,
        ) -> Result<vmpls_fastpath::Overflow, vmpls_fastpath::FastPathError> {
            self.tables.ports = t.ports.clone();
            self.tables.tunnels = t.tunnels.clone();
            self.write_all(|t| &mut t.labels, &t.labels)?;
            self.write_all(|t| &mut t.routes_v4, &t.routes_v4)?;
            self.write_all(|t| &mut t.routes_v6, &t.routes_v6)?;
            Ok(vmpls_fastpath::Overflow::default())
        }

        fn update(
            &mut self,
            c: &FastTablesChange,
        ) -> Result<vmpls_fastpath::Overflow, vmpls_fastpath::FastPathError> {
            for (k, v) in &c.labels {
                self.write(|t| &mut t.labels, *k, v.clone())?;
            }
            for (k, v) in &c.routes_v4 {
                self.write(|t| &mut t.routes_v4, *k, v.clone())?;
            }
            for (k, v) in &c.routes_v6 {
                self.write(|t| &mut t.routes_v6, *k, v.clone())?;
            }
            Ok(vmpls_fastpath::Overflow::default())
        }
    }

    /// pe2 with `n` more /32 routes, pushing 1001 toward p (198.18.20.1) and 1002 toward
    /// a second core router (198.18.20.9), alternately.
    fn pe2_with_routes(n: u32) -> Fib {
        use vmpls_fib::NexthopGroup;
        let mut fib = fib(&pe2_text());
        for i in 0..n {
            let (via, label) = if i % 2 == 0 { ("198.18.20.1", 1001) } else { ("198.18.20.9", 1002) };
            let group =
                NexthopGroup::single(Nexthop::new(0, Some(via.parse().unwrap()), vec![label])).unwrap();
            let a = Ipv4Addr::from(u32::from(v4("198.19.0.0")) + i);
            fib.set_prefix_route(0, IpAddr::V4(a), 32, Some(PrefixRoute::new(RouteTarget::Forward(group))))
                .unwrap();
        }
        fib
    }

    #[test]
    fn the_tick_is_due_when_a_next_hop_needs_asking_and_no_sooner_than_a_tick_apart() {
        let fib = Arc::new(pe2_with_routes(4));
        let cfg = NeighborConfig::default();
        let mut n = NeighborTable::new(cfg);
        let t0 = Instant::now();
        let (p, p2) = ("198.18.20.1".parse().unwrap(), "198.18.20.9".parse().unwrap());
        let later = t0 + Duration::from_secs(5);
        n.learn(t0, 0, p, P_MAC, true);
        n.learn(later, 0, p2, P_MAC, true);
        n.learn(later, 0, "2001:db8:20::1".parse().unwrap(), P_MAC, true);
        n.learn(later, 1, "198.18.2.2".parse().unwrap(), HOST_MAC, true);
        let mut maps = RecordingMaps::default();
        let mut installer = Installer::default();
        installer.sync(&mut maps, fib.clone(), &n, &served(), 255);
        let next_hops: BTreeSet<_> = installer.index.next_hops().collect();
        assert!(next_hops.contains(&(0, p)) && next_hops.contains(&(0, p2)), "{next_hops:?}");
        // Fresh next hops: the first to turn stale, when resolving it sends a request.
        assert_eq!(installer.next_tick(t0, &n), Some(t0 + cfg.reachable), "{next_hops:?}");
        // Asked for at that time: the next request is a retransmission interval later.
        let stale = t0 + cfg.reachable;
        assert_eq!(n.resolve(stale, 0, p), Resolution::Known { mac: P_MAC, probe: true });
        assert_eq!(installer.next_tick(stale, &n), Some(stale + cfg.retransmit));
        // A next hop without an entry (removed): asked for anew at the next tick.
        n.remove(0, p);
        assert_eq!(installer.next_tick(stale, &n), Some(stale + FAST_TICK));
        // Static next hops run no timer.
        for (port, addr) in next_hops {
            n.set_static(t0, port, addr, P_MAC, true).unwrap();
        }
        assert_eq!(installer.next_tick(stale, &n), None);
        // A failed install is retried on the tick.
        installer.retry_in = Some(2);
        assert_eq!(installer.next_tick(stale, &n), Some(stale + FAST_TICK));
    }

    #[test]
    fn a_neighbour_s_new_mac_rewrites_only_the_entries_that_send_to_it() {
        let fib = Arc::new(pe2_with_routes(10_000));
        let mut n = NeighborTable::new(NeighborConfig::default());
        let now = Instant::now();
        n.learn(now, 0, "198.18.20.1".parse().unwrap(), P_MAC, true);
        n.learn(now, 0, "198.18.20.9".parse().unwrap(), P_MAC, true);
        n.learn(now, 1, "198.18.2.2".parse().unwrap(), HOST_MAC, true);
        let mut maps = RecordingMaps::default();
        let mut installer = Installer::default();
        installer.sync(&mut maps, fib.clone(), &n, &served(), 255);
        assert!(maps.entries_written > 10_000);
        // The second core router's MAC changes: its 5,000 routes, nothing else.
        maps.entries_written = 0;
        n.learn(now, 0, "198.18.20.9".parse().unwrap(), [2, 0, 0, 0, 20, 9], false);
        installer.sync(&mut maps, fib.clone(), &n, &served(), 255);
        assert!((5_000..=5_001).contains(&maps.entries_written), "{} entries written", maps.entries_written);
        assert!(
            maps.tables == fast_tables(&fib, &served(), &n, 255).0,
            "the maps differ from the tables a full walk makes"
        );
        // A host's MAC: its host entry alone.
        maps.entries_written = 0;
        n.learn(now, 1, "198.18.2.2".parse().unwrap(), [2, 0, 0, 0, 2, 9], false);
        installer.sync(&mut maps, fib.clone(), &n, &served(), 255);
        assert_eq!(maps.entries_written, 1);
        assert!(
            maps.tables == fast_tables(&fib, &served(), &n, 255).0,
            "the maps differ from the tables a full walk makes"
        );
    }

    #[test]
    fn after_a_failed_write_nothing_is_recorded_as_installed_and_the_retry_brings_the_maps_to_the_fib() {
        let fib = Arc::new(pe2_with_routes(200));
        let mut n = NeighborTable::new(NeighborConfig::default());
        let now = Instant::now();
        n.learn(now, 0, "198.18.20.1".parse().unwrap(), P_MAC, true);
        n.learn(now, 0, "198.18.20.9".parse().unwrap(), P_MAC, true);
        let mut maps = RecordingMaps::default();
        let mut installer = Installer::default();
        let full = |fib: &Fib, n: &NeighborTable| fast_tables(fib, &served(), n, 255).0;
        installer.sync(&mut maps, fib.clone(), &n, &served(), 255);
        assert!(maps.tables == full(&fib, &n), "the maps differ from the tables a full walk makes");

        // A route change whose tenth write fails.
        let mut next = (*fib).clone();
        for i in 0..50u32 {
            let a = Ipv4Addr::from(u32::from(v4("198.19.0.0")) + i);
            next.set_prefix_route(0, IpAddr::V4(a), 32, None).unwrap();
        }
        let next = Arc::new(next);
        maps.fail_after = Some(9);
        installer.sync(&mut maps, next.clone(), &n, &served(), 255);
        assert_eq!(installer.failures, 1);
        assert!(maps.tables != full(&next, &n), "half written");
        // Nothing more until the retry (the timer tick), then all of it.
        installer.sync(&mut maps, next.clone(), &n, &served(), 255);
        assert!(maps.tables != full(&next, &n), "nothing written before the retry");
        assert!(installer.tick(), "the retry is due at the first tick");
        installer.sync(&mut maps, next.clone(), &n, &served(), 255);
        assert!(maps.tables == full(&next, &n), "the maps differ from the tables a full walk makes");

        // A neighbour's new MAC whose third write fails: the same.
        n.learn(now, 0, "198.18.20.1".parse().unwrap(), [2, 0, 0, 0, 20, 7], false);
        maps.fail_after = Some(2);
        installer.sync(&mut maps, next.clone(), &n, &served(), 255);
        assert_eq!(installer.failures, 2);
        assert!(maps.tables != full(&next, &n), "half written");
        assert!(installer.tick(), "the retry is due at the first tick");
        installer.sync(&mut maps, next.clone(), &n, &served(), 255);
        assert!(maps.tables == full(&next, &n), "the maps differ from the tables a full walk makes");
        // And the next change goes in by itself again.
        maps.entries_written = 0;
        n.learn(now, 0, "198.18.20.1".parse().unwrap(), P_MAC, false);
        installer.sync(&mut maps, next.clone(), &n, &served(), 255);
        assert!(maps.tables == full(&next, &n), "the maps differ from the tables a full walk makes");
        assert!(maps.entries_written < 200, "{}", maps.entries_written);
    }

    #[test]
    fn neighbour_and_route_changes_keep_the_maps_equal_to_a_full_walk() {
        use vmpls_fib::NexthopGroup;
        let mut fib = Arc::new(pe2_with_routes(64));
        let mut n = NeighborTable::new(NeighborConfig::default());
        let now = Instant::now();
        let mut maps = RecordingMaps::default();
        let mut installer = Installer::default();
        let mut seed = 0x5eed_1234u64;
        let mut rand = |k: u64| {
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            seed.wrapping_mul(0x2545_f491_4f6c_dd1d) % k
        };
        let core = |i: u64| IpAddr::V4(Ipv4Addr::new(198, 18, 20, [1, 9, 5][i as usize]));
        let host = |i: u64| IpAddr::V4(Ipv4Addr::new(198, 18, 2, 2 + i as u8));
        for step in 0..300 {
            match rand(5) {
                0 => {
                    n.learn(now, 0, core(rand(3)), [2, 0, 0, 0, 20, rand(4) as u8], true);
                }
                1 => {
                    n.learn(now, 1, host(rand(8)), [2, 0, 0, 0, 2, rand(4) as u8], true);
                }
                2 => {
                    if rand(2) == 0 {
                        n.remove(0, core(rand(3)));
                    } else {
                        n.remove(1, host(rand(8)));
                    }
                }
                _ => {
                    let mut next = (*fib).clone();
                    let a = IpAddr::V4(Ipv4Addr::from(u32::from(v4("198.19.0.0")) + rand(80) as u32));
                    let route = (rand(3) > 0).then(|| {
                        let nh = Nexthop::new(0, Some(core(rand(3))), vec![1000 + rand(9) as u32]);
                        PrefixRoute::new(RouteTarget::Forward(NexthopGroup::single(nh).unwrap()))
                    });
                    next.set_prefix_route(0, a, 32, route).unwrap();
                    // Host routes over the customer subnet, where neighbours' host entries are.
                    let h = host(rand(8));
                    let route = (rand(2) == 0).then(|| PrefixRoute::new(RouteTarget::Blackhole));
                    next.set_prefix_route(0, h, 32, route).unwrap();
                    fib = Arc::new(next);
                }
            }
            installer.sync(&mut maps, fib.clone(), &n, &served(), 255);
            assert!(
                maps.tables == fast_tables(&fib, &served(), &n, 255).0,
                "step {step}: the maps differ from the tables a full walk makes"
            );
        }
    }
}
