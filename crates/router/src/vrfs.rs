//! The VRFs the kernel has, as FRR's zebra sees them, followed at runtime.
//!
//! Where the kernel has no VRF devices, zebra (`-n`) takes every network namespace under
//! the router's `/run/netns` as a VRF named like it; the zebra module puts a VRF
//! interface in it, named like the VRF, whose ifindex T (the same as its peer's in the
//! router's namespace) is the VRF's table id. Where the kernel has VRF devices, the `vrf`
//! links of the router's namespace (`IFLA_VRF_TABLE`) are the VRFs and a port's VRF is its
//! master's. [`scan`] reads both; [`Vrfs`] holds the last scan behind a generation number
//! and answers [`VrfLookup`]; [`spawn_rescan`] scans every second.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::link::{InfoData, InfoKind, InfoVrf, LinkAttribute, LinkInfo, LinkMessage};
use tracing::{info, warn};
use vmpls_dataplane::PortId;

/// Where `ip netns` (and zebra `-n`) keeps named network namespaces.
pub const NETNS_DIR: &str = "/run/netns";
/// How often [`spawn_rescan`] looks again.
pub const RESCAN_EVERY: Duration = Duration::from_secs(1);
/// At most this many namespaces are looked into per scan (each costs a thread's
/// `setns` and a name lookup): the scan stays bounded whatever the directory holds.
pub const MAX_NAMESPACES: usize = 1024;
/// Kernel table ids that are never a VRF's: unspecified, default, main, local.
const RESERVED_TABLES: [u32; 4] = [0, 253, 254, 255];

/// A VRF's network namespace, held open from the start: a port's socket lives in it, and
/// the kernel's reads for the port (addresses, forwarding, its interface's index and MTU)
/// go to the same namespace even after its name is gone from [`NETNS_DIR`]. When the
/// name is back on another namespace (the VRF deleted and created again), that one is
/// opened and held instead, for every clone: the port's interface comes back in it.
#[derive(Debug, Clone)]
pub struct VrfNetns {
    /// Its name under [`NETNS_DIR`] (the VRF's).
    pub name: String,
    /// The namespace's file under `dir`.
    path: PathBuf,
    /// The namespace held; shared by the clones (a port's, the address reader's), so
    /// that the first to see the name on a new namespace moves them all.
    file: Arc<Mutex<Arc<File>>>,
}

impl VrfNetns {
    /// Opens namespace `name` of [`NETNS_DIR`].
    ///
    /// # Errors
    /// There is no such namespace.
    pub fn open(name: &str) -> io::Result<VrfNetns> {
        Self::open_in(Path::new(NETNS_DIR), name)
    }

    /// Opens namespace `name` of `dir`.
    fn open_in(dir: &Path, name: &str) -> io::Result<VrfNetns> {
        let path = dir.join(name);
        let file = File::open(&path)?;
        Ok(VrfNetns { name: name.to_owned(), path, file: Arc::new(Mutex::new(Arc::new(file))) })
    }

    /// The namespace to enter: the one held, unless the name now stands for another one
    /// (another inode of the same file system, nsfs), which is then opened and held from
    /// now on. A name that is gone, or not (or no longer) a namespace (`ip netns delete`
    /// unmounts before it unlinks), keeps the one held.
    fn current(&self) -> Arc<File> {
        let mut held = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        let (Ok(now), Ok(was)) = (std::fs::metadata(&self.path), held.metadata()) else {
            return Arc::clone(&held);
        };
        if now.dev() == was.dev() && now.ino() != was.ino() {
            match File::open(&self.path) {
                Ok(f) => {
                    info!(vrf = %self.name, "the VRF's namespace was created again: its ports follow it");
                    *held = Arc::new(f);
                }
                Err(e) => warn!(vrf = %self.name, error = %e, "opening the VRF's new namespace"),
            }
        }
        Arc::clone(&held)
    }

    /// Runs `f` inside it, on a thread of its own.
    ///
    /// # Errors
    /// The namespace cannot be entered.
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> io::Result<R> {
        vmpls_sys::netns::run_in(&self.current(), f)
    }
}

/// Runs `f` in `netns`, or here (the router's namespace) for `None`.
///
/// # Errors
/// The namespace cannot be entered.
pub fn run_in<R: Send>(netns: Option<&VrfNetns>, f: impl FnOnce() -> R + Send) -> io::Result<R> {
    match netns {
        Some(ns) => ns.run(f),
        None => Ok(f()),
    }
}

/// What zebra's table ids and interface indexes mean, as the kernel says now.
pub trait VrfLookup: Send + Sync {
    /// Changes whenever any answer below may have changed.
    fn generation(&self) -> u64;
    /// The VRF whose table id is `table` (never the default VRF's 254).
    fn vrf_of_table(&self, table: u32) -> Option<String>;
    /// The VRF whose VRF interface (in the router's namespace) has `ifindex`.
    fn vrf_of_device(&self, ifindex: u32) -> Option<String>;
    /// The port whose interface has `ifindex` in `vrf`'s namespace (`None`: the
    /// router's own namespace).
    fn port(&self, vrf: Option<&str>, ifindex: u32) -> Option<PortId>;
}

/// Where a VRF came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VrfOrigin {
    /// A network namespace holding an interface named like it (zebra `-n`).
    Netns,
    /// A `vrf` device of the router's namespace.
    Device,
}

impl VrfOrigin {
    /// As `vrf show` prints it.
    pub fn name(self) -> &'static str {
        match self {
            VrfOrigin::Netns => "netns",
            VrfOrigin::Device => "device",
        }
    }
}

/// One VRF of the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vrf {
    /// Its name (the namespace's, the device's).
    pub name: String,
    /// Its table id: zebra's `RTA_TABLE` for its routes.
    pub table: u32,
    /// The ifindex of its VRF interface (netns: the peer in the router's namespace, equal
    /// to `table`) or device, in the router's namespace.
    pub device: u32,
    /// Where it came from.
    pub origin: VrfOrigin,
}

/// A port as the scan looks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    /// Its interface name; `None` for ports without one (vhost-user, MPLS-in-UDP).
    pub interface: Option<String>,
    /// The namespace its interface is in (a VRF's); `None`: the router's.
    pub netns: Option<String>,
    /// Its VRF as the running config has it.
    pub vrf: String,
}

impl PortSpec {
    /// The scan's view of the config's ports, in port order.
    pub fn of_config(cfg: &vmpls_control::Config) -> Vec<PortSpec> {
        cfg.ports
            .iter()
            .map(|p| PortSpec {
                interface: matches!(
                    p.kind,
                    vmpls_control::PortKind::AfPacket | vmpls_control::PortKind::Tap { .. }
                )
                .then(|| p.interface.clone()),
                netns: p.netns.clone(),
                vrf: p.vrf.clone(),
            })
            .collect()
    }
}

/// Where a port's interface is now: its VRF (`None`: the default) and its ifindex in the
/// namespace it lives in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortPlace {
    /// Its VRF; `None`: the default VRF.
    pub vrf: Option<String>,
    /// Its interface's index in its namespace.
    pub ifindex: u32,
}

/// One scan's result: the VRFs (by name) and where each port is (by [`PortId`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VrfSnapshot {
    /// Bumped whenever `vrfs` or `ports` differ from the scan before.
    pub generation: u64,
    /// The VRFs, sorted by name.
    pub vrfs: Vec<Vrf>,
    /// Per port: where its interface is, `None` if it is not there now.
    pub ports: Vec<Option<PortPlace>>,
}

impl VrfSnapshot {
    /// The VRF named `name`.
    pub fn vrf(&self, name: &str) -> Option<&Vrf> {
        self.vrfs.iter().find(|v| v.name == name)
    }
}

impl VrfLookup for VrfSnapshot {
    fn generation(&self) -> u64 {
        self.generation
    }

    fn vrf_of_table(&self, table: u32) -> Option<String> {
        if RESERVED_TABLES.contains(&table) {
            return None;
        }
        self.vrfs.iter().find(|v| v.table == table).map(|v| v.name.clone())
    }

    fn vrf_of_device(&self, ifindex: u32) -> Option<String> {
        self.vrfs.iter().find(|v| v.device == ifindex).map(|v| v.name.clone())
    }

    fn port(&self, vrf: Option<&str>, ifindex: u32) -> Option<PortId> {
        let i = self
            .ports
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| p.ifindex == ifindex && p.vrf.as_deref() == vrf))?;
        PortId::try_from(i).ok()
    }
}

/// A link of the router's namespace as the scan needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkFacts {
    /// Its index.
    pub ifindex: u32,
    /// Its name.
    pub name: String,
    /// For a `vrf` device: its table.
    pub vrf_table: Option<u32>,
    /// The device it is enslaved to (`IFLA_MASTER`), if any.
    pub master: Option<u32>,
}

/// What a link message says about VRFs: the link, whether it is a `vrf` device (and its
/// table), its master. `None` for a message without a name.
pub fn link_facts(msg: &LinkMessage) -> Option<LinkFacts> {
    let mut facts = LinkFacts { ifindex: msg.header.index, ..LinkFacts::default() };
    let mut named = false;
    for a in &msg.attributes {
        match a {
            LinkAttribute::IfName(n) => {
                facts.name.clone_from(n);
                named = true;
            }
            LinkAttribute::Controller(m) => facts.master = Some(*m),
            LinkAttribute::LinkInfo(infos) => {
                let is_vrf = infos.iter().any(|i| matches!(i, LinkInfo::Kind(InfoKind::Vrf)));
                let table = infos.iter().find_map(|i| match i {
                    LinkInfo::Data(InfoData::Vrf(v)) => v.iter().find_map(|x| match x {
                        InfoVrf::TableId(t) => Some(*t),
                        _ => None,
                    }),
                    _ => None,
                });
                if is_vrf {
                    facts.vrf_table = table;
                }
            }
            _ => {}
        }
    }
    named.then_some(facts)
}

/// What a scan asks the system; [`System`] asks the kernel, tests a fake.
pub trait Kernel {
    /// The names under the namespace directory, sorted, at most [`MAX_NAMESPACES`].
    fn namespaces(&self) -> Vec<String>;
    /// The indexes of the interfaces `names` in namespace `netns` (`None`: the router's),
    /// `None` for a missing one (or all, if the namespace cannot be entered).
    fn indexes_in(&self, netns: Option<&str>, names: &[&str]) -> Vec<Option<u32>>;
    /// Whether the router's namespace has an interface of index `ifindex`.
    fn has_index(&self, ifindex: u32) -> bool;
    /// The links of the router's namespace.
    fn links(&self) -> Vec<LinkFacts>;
}

/// The kernel of the calling thread's network namespace, with named namespaces in `dir`.
#[derive(Debug, Clone)]
pub struct System {
    /// The namespace directory ([`NETNS_DIR`] but in tests).
    pub dir: PathBuf,
}

impl Default for System {
    fn default() -> System {
        System { dir: PathBuf::from(NETNS_DIR) }
    }
}

/// The names in `dir` (not hidden ones), sorted, at most `max`; none if it cannot be read.
pub fn names_in(dir: &Path, max: usize) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names.truncate(max);
    names
}

impl System {
    /// The namespace file of `netns`.
    pub fn netns_path(&self, netns: &str) -> PathBuf {
        self.dir.join(netns)
    }

    /// Runs `f` inside namespace `netns` (`None`: here), on a thread of its own.
    pub fn run_in<R: Send>(&self, netns: Option<&str>, f: impl FnOnce() -> R + Send) -> io::Result<R> {
        match netns {
            None => Ok(f()),
            Some(ns) => vmpls_sys::netns::run_in(&File::open(self.netns_path(ns))?, f),
        }
    }
}

impl Kernel for System {
    fn namespaces(&self) -> Vec<String> {
        names_in(&self.dir, MAX_NAMESPACES)
    }

    fn indexes_in(&self, netns: Option<&str>, names: &[&str]) -> Vec<Option<u32>> {
        self.run_in(netns, || names.iter().map(|n| vmpls_sys::if_nametoindex(n)).collect())
            .unwrap_or_else(|_| vec![None; names.len()])
    }

    fn has_index(&self, ifindex: u32) -> bool {
        vmpls_sys::if_indextoname(ifindex).is_some()
    }

    fn links(&self) -> Vec<LinkFacts> {
        let request = RouteNetlinkMessage::GetLink(LinkMessage::default());
        match crate::kernel::dump(request, "links") {
            Ok(all) => all
                .iter()
                .filter_map(|m| match m {
                    RouteNetlinkMessage::NewLink(l) => link_facts(l),
                    _ => None,
                })
                .collect(),
            Err(e) => {
                warn!("reading the kernel's links for VRF devices: {e:#}");
                Vec::new()
            }
        }
    }
}

/// The VRFs the kernel has now and where `ports` are: each namespace NAME holding an
/// interface NAME of index T, where the router's namespace has an interface of index T
/// too, is VRF NAME of table T; each `vrf` device is a VRF of its table (a name taken by
/// a namespace VRF already is skipped). A VRF whose table is a reserved one (254...) is
/// left out.
pub fn scan(kernel: &dyn Kernel, ports: &[PortSpec]) -> (Vec<Vrf>, Vec<Option<PortPlace>>) {
    let mut vrfs = Vec::new();
    for ns in kernel.namespaces() {
        let Some(Some(t)) = kernel.indexes_in(Some(&ns), &[&ns]).first().copied() else { continue };
        if RESERVED_TABLES.contains(&t) || !kernel.has_index(t) {
            continue;
        }
        vrfs.push(Vrf { name: ns, table: t, device: t, origin: VrfOrigin::Netns });
    }
    let links = kernel.links();
    for l in &links {
        let Some(table) = l.vrf_table else { continue };
        if RESERVED_TABLES.contains(&table) || vrfs.iter().any(|v: &Vrf| v.name == l.name) {
            continue;
        }
        vrfs.push(Vrf { name: l.name.clone(), table, device: l.ifindex, origin: VrfOrigin::Device });
    }
    vrfs.sort_by(|a, b| a.name.cmp(&b.name));
    let mut places = vec![None; ports.len()];
    let mut namespaces: Vec<Option<&str>> = ports.iter().map(|p| p.netns.as_deref()).collect();
    namespaces.sort();
    namespaces.dedup();
    for ns in namespaces {
        let here: Vec<usize> = (0..ports.len())
            .filter(|&i| ports[i].netns.as_deref() == ns && ports[i].interface.is_some())
            .collect();
        let names: Vec<&str> = here.iter().filter_map(|&i| ports[i].interface.as_deref()).collect();
        if names.is_empty() {
            continue;
        }
        for (&i, ifindex) in here.iter().zip(kernel.indexes_in(ns, &names)) {
            let vrf = (ports[i].vrf != vmpls_fib::DEFAULT_VRF_NAME).then(|| ports[i].vrf.clone());
            places[i] = ifindex.map(|ifindex| PortPlace { vrf, ifindex });
        }
    }
    (vrfs, places)
}

/// Where the kernel has an interface named `ifname` outside the default VRF, given a
/// scan's `vrfs` and the router's `links`: enslaved to a VRF device, or (not in the
/// router's namespace) in exactly one VRF's namespace.
///
/// # Errors
/// The interface is in the namespaces of several VRFs.
pub fn find_interface(
    kernel: &dyn Kernel,
    vrfs: &[Vrf],
    links: &[LinkFacts],
    ifname: &str,
) -> Result<Option<vmpls_control::FoundInVrf>, String> {
    if let Some(l) = links.iter().find(|l| l.name == ifname) {
        let device =
            l.master.and_then(|m| vrfs.iter().find(|v| v.origin == VrfOrigin::Device && v.device == m));
        return Ok(device.map(|v| vmpls_control::FoundInVrf { vrf: v.name.clone(), netns: false }));
    }
    let holding: Vec<&Vrf> = vrfs
        .iter()
        .filter(|v| v.origin == VrfOrigin::Netns)
        .filter(|v| kernel.indexes_in(Some(&v.name), &[ifname]).first().copied().flatten().is_some())
        .collect();
    match holding.as_slice() {
        [] => Ok(None),
        [v] => Ok(Some(vmpls_control::FoundInVrf { vrf: v.name.clone(), netns: true })),
        many => Err(format!(
            "interface {ifname} is in the network namespaces of several VRFs ({}): rename one",
            many.iter().map(|v| v.name.as_str()).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// FRR mode: the kernel's VRFs into `cfg` and each port into the VRF the kernel has its
/// interface in ([`vmpls_control::place_ports_in_vrfs`]).
///
/// # Errors
/// A port's `vrf` key disagrees with the kernel, or an interface is in several VRFs.
pub fn place_ports(kernel: &dyn Kernel, cfg: &mut vmpls_control::Config) -> anyhow::Result<()> {
    let (vrfs, _) = scan(kernel, &[]);
    let links = kernel.links();
    let mut found = std::collections::HashMap::new();
    for p in cfg.ports.iter().filter(|p| p.kind == vmpls_control::PortKind::AfPacket) {
        if let Some(at) = find_interface(kernel, &vrfs, &links, &p.interface).map_err(|e| {
            anyhow::anyhow!("{}:{}: port.interface: {e}", cfg.path.display(), p.interface_line)
        })? {
            found.insert(p.interface.clone(), at);
        }
    }
    let names: Vec<String> = vrfs.iter().map(|v| v.name.clone()).collect();
    vmpls_control::place_ports_in_vrfs(cfg, &names, |ifname| found.get(ifname).cloned())?;
    Ok(())
}

/// The VRFs as last scanned, shared by the rescan thread (writer) and the FPM and control
/// threads (readers).
#[derive(Debug)]
pub struct Vrfs {
    current: RwLock<Arc<VrfSnapshot>>,
    generation: AtomicU64,
}

impl Default for Vrfs {
    fn default() -> Vrfs {
        Vrfs::new(VrfSnapshot { generation: 1, ..VrfSnapshot::default() })
    }
}

impl Vrfs {
    /// Starts from `first`.
    pub fn new(first: VrfSnapshot) -> Vrfs {
        Vrfs { generation: AtomicU64::new(first.generation), current: RwLock::new(Arc::new(first)) }
    }

    /// The last scan.
    pub fn snapshot(&self) -> Arc<VrfSnapshot> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Takes a scan's result; returns the new snapshot if it differs from the one in
    /// force (its generation then is the next).
    pub fn update(&self, vrfs: Vec<Vrf>, ports: Vec<Option<PortPlace>>) -> Option<Arc<VrfSnapshot>> {
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        if current.vrfs == vrfs && current.ports == ports {
            return None;
        }
        let next = Arc::new(VrfSnapshot { generation: current.generation + 1, vrfs, ports });
        *current = next.clone();
        self.generation.store(next.generation, Ordering::Release);
        Some(next)
    }
}

impl VrfLookup for Vrfs {
    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn vrf_of_table(&self, table: u32) -> Option<String> {
        self.snapshot().vrf_of_table(table)
    }

    fn vrf_of_device(&self, ifindex: u32) -> Option<String> {
        self.snapshot().vrf_of_device(ifindex)
    }

    fn port(&self, vrf: Option<&str>, ifindex: u32) -> Option<PortId> {
        self.snapshot().port(vrf, ifindex)
    }
}

/// Logs the difference between two scans' VRFs.
fn log_changes(before: &[Vrf], after: &[Vrf]) {
    for v in after.iter().filter(|v| !before.contains(v)) {
        info!(vrf = %v.name, table = v.table, device = v.device, origin = v.origin.name(), "VRF found");
    }
    for v in before.iter().filter(|v| !after.iter().any(|a| a.name == v.name)) {
        info!(vrf = %v.name, table = v.table, "VRF gone");
    }
}

/// Scans once into `vrfs` (logging what changed); returns whether anything did.
pub fn rescan(vrfs: &Vrfs, kernel: &dyn Kernel, ports: &[PortSpec]) -> bool {
    rescan_with(vrfs, kernel, ports, |_| {})
}

/// [`rescan`], handing the VRFs found to `before_publish` before the readers can see
/// them: the tables must know a new VRF before FPM places zebra's routes in it, or they
/// would refuse those routes as routes of an unknown VRF.
fn rescan_with(
    vrfs: &Vrfs,
    kernel: &dyn Kernel,
    ports: &[PortSpec],
    before_publish: impl FnOnce(&[Vrf]),
) -> bool {
    let before = vrfs.snapshot();
    let (found, places) = scan(kernel, ports);
    if found != before.vrfs {
        before_publish(&found);
    }
    match vrfs.update(found, places) {
        Some(now) => {
            log_changes(&before.vrfs, &now.vrfs);
            true
        }
        None => false,
    }
}

/// Where the kernel's VRFs go: the router's tables (the control server implements it).
pub trait VrfSink: Send + Sync {
    /// Makes the tables' VRFs follow the kernel's (`names`).
    ///
    /// # Errors
    /// The tables could not be built with them; the running ones stay.
    fn set_kernel_vrfs(&self, names: &[String]) -> Result<(), String>;
}

/// Scans every [`RESCAN_EVERY`] on a thread of its own (started in the router's
/// namespace, so its scans see the router's), so VRFs created or deleted at runtime are
/// followed, and hands the VRFs' names to `sink` whenever they differ from those it last
/// took (a refusal is logged once and tried again at the next scan).
///
/// # Errors
/// The thread could not be started.
pub fn spawn_rescan(
    vrfs: Arc<Vrfs>,
    kernel: System,
    ports: Vec<PortSpec>,
    sink: Arc<dyn VrfSink>,
) -> io::Result<()> {
    std::thread::Builder::new().name("vrf-scan".into()).spawn(move || {
        let mut applied: Option<Vec<String>> = None;
        let mut refused: Option<String> = None;
        let mut follow = |found: &[Vrf]| {
            let names: Vec<String> = found.iter().map(|v| v.name.clone()).collect();
            if applied.as_ref() == Some(&names) {
                return;
            }
            match sink.set_kernel_vrfs(&names) {
                Ok(()) => {
                    applied = Some(names);
                    refused = None;
                }
                Err(e) => {
                    if refused.as_ref() != Some(&e) {
                        warn!(vrfs = ?names, "the tables cannot follow the kernel's VRFs, trying again: {e}");
                    }
                    refused = Some(e);
                }
            }
        };
        loop {
            // Again each time round, so a refusal is tried again.
            follow(&vrfs.snapshot().vrfs);
            std::thread::sleep(RESCAN_EVERY);
            rescan_with(&vrfs, &kernel, &ports, &mut follow);
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A VRF deleted and created again under its name is a new namespace (another
    /// inode): every clone (a port's, the address reader's) moves to it; while the name
    /// is gone, the one held stays. Plain files stand in for the namespace files.
    #[test]
    fn vrf_netns_follows_its_name_to_a_new_namespace() {
        let dir = std::env::temp_dir().join(format!("vmpls-vrf-netns-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("blue");
        std::fs::write(&path, "first").unwrap();
        let ns = VrfNetns::open_in(&dir, "blue").unwrap();
        let port_copy = ns.clone();
        let first = ns.current().metadata().unwrap().ino();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(ns.current().metadata().unwrap().ino(), first, "a deleted name keeps the namespace held");
        // Another file takes the name (another inode: the first is still open).
        std::fs::write(&path, "second").unwrap();
        let second = std::fs::metadata(&path).unwrap().ino();
        assert_ne!(second, first);
        assert_eq!(port_copy.current().metadata().unwrap().ino(), second, "the new namespace is entered");
        assert_eq!(ns.current().metadata().unwrap().ino(), second, "and held for every clone");
        let mut text = String::new();
        std::io::Read::read_to_string(&mut &*ns.current(), &mut text).unwrap();
        assert_eq!(text, "second");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Namespaces with their interfaces (name -> index); `None` is the router's.
    #[derive(Default)]
    struct FakeKernel {
        namespaces: HashMap<Option<String>, HashMap<String, u32>>,
        links: Vec<LinkFacts>,
    }

    impl FakeKernel {
        fn with(mut self, ns: Option<&str>, ifname: &str, ifindex: u32) -> FakeKernel {
            self.namespaces.entry(ns.map(str::to_owned)).or_default().insert(ifname.into(), ifindex);
            self
        }
    }

    impl Kernel for FakeKernel {
        fn namespaces(&self) -> Vec<String> {
            let mut n: Vec<String> = self.namespaces.keys().flatten().cloned().collect();
            n.sort();
            n
        }
        fn indexes_in(&self, netns: Option<&str>, names: &[&str]) -> Vec<Option<u32>> {
            let ns = self.namespaces.get(&netns.map(str::to_owned));
            names.iter().map(|n| ns.and_then(|ns| ns.get(*n).copied())).collect()
        }
        fn has_index(&self, ifindex: u32) -> bool {
            self.namespaces.get(&None).is_some_and(|ns| ns.values().any(|&i| i == ifindex))
        }
        fn links(&self) -> Vec<LinkFacts> {
            self.links.clone()
        }
    }

    fn port(interface: &str, netns: Option<&str>, vrf: &str) -> PortSpec {
        PortSpec { interface: Some(interface.into()), netns: netns.map(str::to_owned), vrf: vrf.into() }
    }

    fn pe() -> FakeKernel {
        FakeKernel::default()
            .with(None, "lo", 1)
            .with(None, "pe1-p", 2)
            .with(None, "red", 1001)
            .with(None, "blue", 1002)
            .with(Some("red"), "lo", 1)
            .with(Some("red"), "red", 1001)
            .with(Some("red"), "pe1-ce1", 2)
            .with(Some("blue"), "blue", 1002)
            .with(Some("blue"), "pe1-ce2", 2)
            // A namespace without its VRF interface (zebra has not made it yet), one whose
            // interface has no peer in the router's namespace, one of another name.
            .with(Some("green"), "lo", 1)
            .with(Some("grey"), "grey", 1003)
            .with(Some("ce1"), "eth0", 2)
    }

    #[test]
    fn a_namespace_holding_its_namesake_interface_is_a_vrf_of_that_index() {
        let ports = [port("pe1-p", None, "default"), port("pe1-ce1", Some("red"), "red")];
        let (vrfs, places) = scan(&pe(), &ports);
        let names: Vec<(&str, u32, VrfOrigin)> =
            vrfs.iter().map(|v| (v.name.as_str(), v.table, v.origin)).collect();
        assert_eq!(names, vec![("blue", 1002, VrfOrigin::Netns), ("red", 1001, VrfOrigin::Netns)]);
        assert_eq!(
            places,
            vec![
                Some(PortPlace { vrf: None, ifindex: 2 }),
                Some(PortPlace { vrf: Some("red".into()), ifindex: 2 })
            ]
        );
        let snap = VrfSnapshot { generation: 7, vrfs, ports: places };
        assert_eq!(snap.vrf_of_table(1001).as_deref(), Some("red"));
        assert_eq!(snap.vrf_of_table(254), None, "the default VRF's table is never a VRF's");
        assert_eq!(snap.vrf_of_table(1003), None);
        assert_eq!(snap.vrf_of_device(1002).as_deref(), Some("blue"));
        // The same ifindex 2 in two namespaces: two ports.
        assert_eq!(snap.port(None, 2), Some(0));
        assert_eq!(snap.port(Some("red"), 2), Some(1));
        assert_eq!(snap.port(Some("blue"), 2), None, "no port of blue");
        assert_eq!(snap.generation(), 7);
    }

    #[test]
    fn the_generation_moves_only_when_the_vrfs_or_ports_change() {
        let ports = [port("pe1-ce1", Some("red"), "red")];
        let vrfs = Vrfs::default();
        let g0 = vrfs.generation();
        assert!(rescan(&vrfs, &pe(), &ports));
        let g1 = vrfs.generation();
        assert!(g1 > g0);
        assert!(!rescan(&vrfs, &pe(), &ports), "nothing changed");
        assert_eq!(vrfs.generation(), g1);
        // blue's namespace is deleted: its VRF goes.
        let mut k = pe();
        k.namespaces.remove(&Some("blue".into()));
        assert!(rescan(&vrfs, &k, &ports));
        assert!(vrfs.generation() > g1);
        assert_eq!(vrfs.vrf_of_table(1002), None);
        assert_eq!(vrfs.vrf_of_table(1001).as_deref(), Some("red"));
        // The port's interface is re-created with another index.
        let k = k.with(Some("red"), "pe1-ce1", 5);
        let g2 = vrfs.generation();
        assert!(rescan(&vrfs, &k, &ports));
        assert!(vrfs.generation() > g2);
        assert_eq!((vrfs.port(Some("red"), 5), vrfs.port(Some("red"), 2)), (Some(0), None));
    }

    #[test]
    fn ports_are_found_in_the_vrf_namespace_that_holds_their_interface() {
        let k = pe().with(Some("blue"), "pe1-both", 7).with(Some("red"), "pe1-both", 8);
        let (vrfs, _) = scan(&k, &[]);
        let links = k.links();
        let found = |n| find_interface(&k, &vrfs, &links, n);
        assert_eq!(found("pe1-ce1"), Ok(Some(vmpls_control::FoundInVrf { vrf: "red".into(), netns: true })));
        assert_eq!(found("pe1-nowhere"), Ok(None));
        assert!(found("pe1-both").unwrap_err().contains("blue, red"));
        // In the router's namespace (the links list it): the default VRF.
        let k = k.with(None, "pe1-p", 2);
        let links = vec![LinkFacts { ifindex: 2, name: "pe1-p".into(), ..LinkFacts::default() }];
        assert_eq!(find_interface(&k, &vrfs, &links, "pe1-p"), Ok(None));
    }

    /// `ip link add red type vrf table 1001` (ifindex 7) as the kernel dumps it
    /// (RTM_NEWLINK: ifinfomsg, IFLA_IFNAME, IFLA_LINKINFO { IFLA_INFO_KIND "vrf",
    /// IFLA_INFO_DATA { IFLA_VRF_TABLE } }); this machine's kernel has no `vrf` module,
    /// so the bytes follow the kernel's layout (`vrf_fill_info`, `rtnl_link_fill`).
    static VRF_LINK: [u8; 64] = [
        0x40, 0x00, 0x00, 0x00, 0x10, 0x00, 0x02, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, // nlmsghdr
        0x00, 0x00, 0x01, 0x00, 0x07, 0x00, 0x00, 0x00, 0xc1, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, // ifinfomsg
        0x08, 0x00, 0x03, 0x00, b'r', b'e', b'd', 0x00, // IFLA_IFNAME
        0x18, 0x00, 0x12, 0x00, // IFLA_LINKINFO
        0x08, 0x00, 0x01, 0x00, b'v', b'r', b'f', 0x00, // IFLA_INFO_KIND
        0x0c, 0x00, 0x02, 0x00, 0x08, 0x00, 0x01, 0x00, 0xe9, 0x03, 0x00,
        0x00, // IFLA_INFO_DATA { IFLA_VRF_TABLE 1001 }
    ];

    /// A veth `pe1-ce1` (ifindex 9) enslaved to it: IFLA_MASTER 7.
    static PORT_LINK: [u8; 52] = [
        0x34, 0x00, 0x00, 0x00, 0x10, 0x00, 0x02, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, // nlmsghdr
        0x00, 0x00, 0x01, 0x00, 0x09, 0x00, 0x00, 0x00, 0x43, 0x18, 0x01, 0x00, 0x00, 0x00, 0x00,
        0x00, // ifinfomsg
        0x0c, 0x00, 0x03, 0x00, b'p', b'e', b'1', b'-', b'c', b'e', b'1', 0x00, // IFLA_IFNAME
        0x08, 0x00, 0x0a, 0x00, 0x07, 0x00, 0x00, 0x00, // IFLA_MASTER
    ];

    fn decode(bytes: &[u8]) -> LinkFacts {
        use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
        let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes).unwrap();
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l)) = msg.payload else {
            panic!("{:?}", msg.payload)
        };
        link_facts(&l).unwrap()
    }

    #[test]
    fn vrf_devices_and_their_ports_are_read_from_link_messages() {
        let vrf = decode(&VRF_LINK);
        assert_eq!(vrf, LinkFacts { ifindex: 7, name: "red".into(), vrf_table: Some(1001), master: None });
        let slave = decode(&PORT_LINK);
        assert_eq!(slave, LinkFacts { ifindex: 9, name: "pe1-ce1".into(), vrf_table: None, master: Some(7) });
        let k = FakeKernel { links: vec![vrf, slave], ..FakeKernel::default() }.with(None, "pe1-ce1", 9);
        let (vrfs, places) = scan(&k, &[port("pe1-ce1", None, "red")]);
        assert_eq!(vrfs, vec![Vrf { name: "red".into(), table: 1001, device: 7, origin: VrfOrigin::Device }]);
        assert_eq!(places, vec![Some(PortPlace { vrf: Some("red".into()), ifindex: 9 })]);
        assert_eq!(
            find_interface(&k, &vrfs, &k.links(), "pe1-ce1"),
            Ok(Some(vmpls_control::FoundInVrf { vrf: "red".into(), netns: false }))
        );
    }

    #[test]
    fn the_namespace_directory_lists_names_sorted_and_bounded() {
        let dir = std::env::temp_dir().join(format!("vmpls-vrfs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for n in ["red", "blue", ".hidden", "green"] {
            std::fs::write(dir.join(n), b"").unwrap();
        }
        let got = names_in(&dir, 2);
        let all = names_in(&dir, MAX_NAMESPACES);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(got, vec!["blue", "green"]);
        assert_eq!(all, vec!["blue", "green", "red"]);
        assert!(names_in(Path::new("/nonexistent-vmpls"), 8).is_empty());
    }
}
