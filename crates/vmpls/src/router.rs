//! `vmpls run`: one router in the foreground. The forwarding loop is the only place where
//! the sans-I/O pipeline meets the ports: poll, receive a batch, process, send.
//!
//! Around it run the control thread ([`crate::server`]: the control socket, route
//! changes, reloads) and optionally the metrics endpoint ([`crate::metrics`]). They never
//! take a lock the forwarding loop needs:
//!
//! - Route changes: the control thread builds a whole new `Fib` and stores it in the
//!   `FibHandle`; the pipeline loads it once per batch (wait-free).
//! - Counters, neighbours, captures: requests on a channel, with an eventfd in the loop's
//!   poll set to wake it ([`LoopHandle`]). Chosen over publishing a snapshot every tick
//!   because the answer is exact (`vmpls stats` right after a transfer shows all of it,
//!   and a metrics scrape and `vmpls stats` agree), it costs nothing while nobody asks (no
//!   copy of the neighbour table every 200 ms), and capture subscriptions land in state
//!   the loop owns: with no capture running the per-batch check is one `Vec::is_empty`
//!   on a local, cheaper than an atomic. The loop answers with `try_recv`/`send` on
//!   channels that never block it.

use std::io::Write;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use tracing::{info, warn};
use vmpls_control::api::Direction;
use vmpls_control::{Config, OffloadOverrides};
use vmpls_dataplane::{Counters, Dataplane, DataplaneConfig, HostStack, Output, Packet, PacketPool, PortId};
use vmpls_fib::FibHandle;
use vmpls_ports::{AfPacketPort, BATCH, Port, PortError, PortStats};

use crate::fastpath::{FastPathRuntime, FastPortInfo};

/// Buffers per router: enough for a full batch on every port, frames held for neighbour
/// resolution, and the segments of one super-frame.
const POOL_SIZE: usize = 1024;
/// How often timers run and stats are written.
const TICK: Duration = Duration::from_millis(200);
const STATS_EVERY: Duration = Duration::from_secs(1);
/// How often the ports' interfaces are checked (a deleted interface come back) and ports
/// muted for errors are polled again.
const LINK_CHECK_EVERY: Duration = Duration::from_secs(1);
/// At most one warning per port this often while its errors go on (each is counted).
const ERROR_LOG_EVERY: Duration = Duration::from_secs(10);
/// How long a control request waits for the forwarding loop.
const LOOP_ANSWER_TIMEOUT: Duration = Duration::from_secs(3);

static STOP: AtomicBool = AtomicBool::new(false);
/// The eventfd SIGHUP writes to (the control thread polls it); -1 before it exists.
static RELOAD_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

extern "C" fn on_hup(_: libc::c_int) {
    let fd = RELOAD_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        let one: u64 = 1;
        // SAFETY: write(2) is async-signal-safe; `one` is a live 8-byte value. A failure
        // (counter overflow) only loses a reload request that is already pending.
        unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    }
}

fn install(sig: libc::c_int, handler: extern "C" fn(libc::c_int), flags: libc::c_int) -> anyhow::Result<()> {
    // SAFETY: the handlers only store to an atomic or write(2) to an eventfd, both
    // async-signal-safe; the sigaction struct is zero-initialised and fully set before
    // the call.
    let rc = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as *const () as usize;
        sa.sa_flags = flags;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("installing signal handlers");
    }
    Ok(())
}

fn install_signal_handlers() -> anyhow::Result<()> {
    // No SA_RESTART for SIGINT/SIGTERM: poll() returns EINTR so the loop sees STOP at
    // once. SIGHUP restarts interrupted calls: a reload must not disturb anything.
    install(libc::SIGINT, on_signal, 0)?;
    install(libc::SIGTERM, on_signal, 0)?;
    install(libc::SIGHUP, on_hup, libc::SA_RESTART)
}

/// A non-blocking, close-on-exec eventfd.
pub fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: eventfd(2) takes no pointers; a non-negative result is a new descriptor
    // that we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd's counter (wakes its poller).
pub fn eventfd_signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to a descriptor the caller keeps open; an
    // error (counter full) means a wake-up is pending anyway.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Resets an eventfd's counter.
pub fn eventfd_drain(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live u64; the fd is non-blocking.
    unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

/// Options of `vmpls run`.
pub struct RunOptions {
    /// The config file.
    pub config: PathBuf,
    /// `--stats-file`.
    pub stats_file: Option<PathBuf>,
    /// `--metrics`: where to serve Prometheus metrics.
    pub metrics: Option<std::net::SocketAddr>,
    /// `--socket`: overrides the config's control socket.
    pub socket: Option<PathBuf>,
}

/// Loads and validates a config, including that its interfaces exist.
pub fn load_config(path: &Path) -> anyhow::Result<Config> {
    let cfg = Config::from_file(path)?;
    vmpls_control::check_interfaces(&cfg, vmpls_ports::interface_exists)?;
    Ok(cfg)
}

/// Loads and validates a config for starting a router (`run`, `check`): also that every
/// interface is as the ports need it now (up, Ethernet, MTU within the interface's), so
/// that what `run` would refuse, `check` finds, with file and line.
pub fn load_config_to_start(path: &Path) -> anyhow::Result<Config> {
    let cfg = load_config(path)?;
    vmpls_control::check_ports(&cfg, |ifname, mtu| {
        vmpls_ports::check_af_packet(ifname, mtu).map_err(|e| e.to_string())
    })?;
    Ok(cfg)
}

/// A copy of the forwarding loop's state, taken on request.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The pipeline's counters.
    pub counters: Counters,
    /// Each port's own counters (index = port id).
    pub ports: Vec<PortStats>,
    /// The neighbour table: (port, address, MAC if resolved).
    pub neighbors: Vec<(PortId, std::net::IpAddr, Option<[u8; 6]>)>,
    /// Each port's faults (index = port id).
    pub faults: Vec<PortFaults>,
    /// The in-kernel fast path's counters by name (empty without it).
    pub fast_path: Vec<(&'static str, u64)>,
    /// Frames and bytes the fast path took from and sent out of each port (index = port
    /// id); `None` for a port it does not serve (or without it).
    pub fast_path_ports: Vec<Option<vmpls_fastpath::FastPortStats>>,
    /// Each port as the pipeline uses it now (index = port id): its MTU and the offloads
    /// it takes, which follow what a vhost-user guest negotiated since the start.
    pub port_info: Vec<vmpls_dataplane::PortInfo>,
    /// The static entries of `neighbors`.
    pub static_neighbors: std::collections::HashSet<(PortId, std::net::IpAddr)>,
}

/// What went wrong with a port while the router ran, and what the router did about it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortFaults {
    /// Errors the port reported: an error condition on its descriptor (`POLLERR`, as when
    /// its interface goes down or is deleted), a failed receive, a failed send. Frames
    /// the kernel refuses one by one are counted in the port's `tx_errors` instead.
    pub errors: u64,
    /// Times the port was opened again on a re-created interface of the same name.
    pub reopened: u64,
    /// The port has no interface now: it was deleted and is not back, or is back but
    /// cannot be used (down, a smaller MTU); the router checks again every second.
    pub detached: bool,
}

/// One frame copied for a capture.
#[derive(Debug)]
pub struct CaptureFrame {
    /// Nanoseconds since the Unix epoch, per batch.
    pub ts_ns: u64,
    /// Received or sent.
    pub dir: Direction,
    /// The frame, Ethernet header on.
    pub data: Vec<u8>,
}

/// A capture subscription the forwarding loop feeds.
pub struct CaptureSink {
    /// The port.
    pub port: PortId,
    /// Only frames whose label stack holds this label.
    pub label: Option<u32>,
    /// Bounded: a full queue loses the frame (counted in `lost`).
    pub tx: SyncSender<CaptureFrame>,
    /// Frames lost to a full queue.
    pub lost: Arc<AtomicU64>,
}

/// What the control side asks of the forwarding loop.
pub enum LoopRequest {
    /// Copy the counters and neighbour table.
    Snapshot(SyncSender<Snapshot>),
    /// Start feeding a capture.
    Capture(CaptureSink),
    /// The FIB was replaced: answered once the loop has handed it to everything that
    /// keeps a copy (the in-kernel fast path's tables).
    FibStored(SyncSender<()>),
    /// Set or remove a static neighbour; answered with what went wrong, if anything.
    Neighbor(NeighborChange, SyncSender<Result<(), String>>),
}

/// A change of the neighbour table from the control side (`neigh add`, `neigh del`,
/// `[[neighbor]]` on reload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeighborChange {
    /// A static neighbour: `addr` on `port` is `mac` (`replace`: also over a static
    /// entry with another MAC).
    Set { port: PortId, addr: std::net::IpAddr, mac: [u8; 6], replace: bool },
    /// Remove the entry of `addr` on `port`, static or learned.
    Del { port: PortId, addr: std::net::IpAddr },
}

/// How the control side reaches the forwarding loop: a channel and an eventfd in the
/// loop's poll set.
#[derive(Clone)]
pub struct LoopHandle {
    tx: Sender<LoopRequest>,
    wake: Arc<OwnedFd>,
}

impl LoopHandle {
    /// A handle and the loop's ends (the request receiver, the eventfd to poll).
    pub fn new() -> std::io::Result<(LoopHandle, Receiver<LoopRequest>, Arc<OwnedFd>)> {
        let (tx, rx) = mpsc::channel();
        let wake = Arc::new(eventfd()?);
        Ok((LoopHandle { tx, wake: wake.clone() }, rx, wake))
    }

    fn send(&self, req: LoopRequest) -> anyhow::Result<()> {
        self.tx.send(req).map_err(|_| anyhow::anyhow!("the forwarding loop has stopped"))?;
        eventfd_signal(self.wake.as_raw_fd());
        Ok(())
    }

    /// The loop's counters and neighbours, now.
    ///
    /// # Errors
    /// The loop stopped or did not answer in time.
    pub fn snapshot(&self) -> anyhow::Result<Snapshot> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(LoopRequest::Snapshot(tx))?;
        rx.recv_timeout(LOOP_ANSWER_TIMEOUT)
            .map_err(|_| anyhow::anyhow!("the forwarding loop did not answer"))
    }

    /// Waits until the loop has put a FIB just stored in force everywhere: with the
    /// in-kernel fast path, the kernel's tables would otherwise follow only at the loop's
    /// next wake-up, and traffic the kernel forwards does not wake it.
    ///
    /// # Errors
    /// The loop stopped or did not answer in time.
    pub fn fib_stored(&self) -> anyhow::Result<()> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(LoopRequest::FibStored(tx))?;
        rx.recv_timeout(LOOP_ANSWER_TIMEOUT)
            .map_err(|_| anyhow::anyhow!("the forwarding loop did not answer"))
    }

    /// Changes the neighbour table; `Ok(Err(..))` is the loop's refusal (a static entry
    /// with another MAC exists, no such entry).
    ///
    /// # Errors
    /// The loop stopped or did not answer in time.
    pub fn neighbor(&self, change: NeighborChange) -> anyhow::Result<Result<(), String>> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(LoopRequest::Neighbor(change, tx))?;
        rx.recv_timeout(LOOP_ANSWER_TIMEOUT)
            .map_err(|_| anyhow::anyhow!("the forwarding loop did not answer"))
    }

    /// Starts a capture; it ends when the receiver of `sink.tx` is dropped.
    ///
    /// # Errors
    /// The loop stopped.
    pub fn capture(&self, sink: CaptureSink) -> anyhow::Result<()> {
        self.send(LoopRequest::Capture(sink))
    }
}

/// Gives the memory freed since the start back to the system: parsing a config of a
/// million routes leaves hundreds of MB free in the allocator's heap, which would
/// otherwise stay in the router's resident size for good.
pub fn return_freed_memory() {
    // SAFETY: malloc_trim only walks and trims glibc's own heap; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Runs a router until SIGINT or SIGTERM.
pub fn run(opts: RunOptions) -> anyhow::Result<()> {
    let mut cfg = load_config_to_start(&opts.config)?;
    let interfaces: Vec<String> = cfg.ports.iter().map(|p| p.interface.clone()).collect();
    let kernel_addresses = match cfg.frr {
        None => None,
        Some(_) => {
            crate::kernel::check_forwarding_off(&interfaces)?;
            let a = crate::kernel::read(&interfaces).context("reading the kernel's addresses")?;
            for (p, addrs) in cfg.ports.iter_mut().zip(&a.ports) {
                p.addresses.clone_from(addrs);
            }
            (cfg.router.v4, cfg.router.v6) = (a.router_v4, a.router_v6);
            info!(ports = ?a.ports, router_v4 = ?a.router_v4, router_v6 = ?a.router_v6, "the kernel owns the addresses (FRR mode)");
            Some(a)
        }
    };
    // The routes go to the tables; what the rest of the start reads is the ports and
    // settings, so a table of a million routes is not held twice.
    let (routes, labels) = (std::mem::take(&mut cfg.routes), std::mem::take(&mut cfg.labels));
    let (tables, fib) =
        vmpls_control::tables::Tables::built(vmpls_control::Config { routes, labels, ..cfg.clone() })?;
    return_freed_memory();
    let socket_path = opts
        .socket
        .clone()
        .or_else(|| cfg.router.control_socket.clone())
        .unwrap_or_else(|| crate::socket::default_path(&cfg.router.name));
    let control = crate::socket::bind(&socket_path)?;
    let claimed: Vec<&str> = cfg
        .ports
        .iter()
        .filter(|p| {
            !matches!(p.kind, vmpls_control::PortKind::VhostUser { .. } | vmpls_control::PortKind::Udp { .. })
        })
        .map(|p| p.interface.as_str())
        .collect();
    let _claims = crate::claim::Claims::take(&cfg.router.name, &socket_path, &claimed)?;
    let metrics = match opts.metrics {
        Some(addr) => Some(
            std::net::TcpListener::bind(addr).with_context(|| format!("cannot serve metrics on {addr}"))?,
        ),
        None => None,
    };
    let mut ports: Vec<Box<dyn Port>> = Vec::new();
    let mut watch: Vec<PortWatch> = Vec::new();
    for (i, p) in cfg.ports.iter().enumerate() {
        let id = PortId::try_from(i).context("too many ports")?;
        let (port, relink) = open_port(id, p)
            .with_context(|| format!("opening port {:?} ({} {})", p.name, p.kind.name(), p.interface))?;
        let port = with_overrides(port, p.offloads);
        let info = port.info();
        info!(port = %p.name, kind = p.kind.name(), interface = %p.interface, mtu = info.mtu, caps = ?info.caps, "port up");
        ports.push(port);
        watch.push(PortWatch::new(relink));
    }
    let infos: Vec<_> = ports.iter().map(|p| p.info().clone()).collect();
    let fib = FibHandle::new(fib);
    let mut dp = Dataplane::new(fib.clone(), infos.clone(), dataplane_config(&cfg));
    set_static_neighbors(&mut dp, &cfg, ports.len())?;
    for p in ports.iter().filter(|p| p.point_to_point()) {
        dp.set_point_to_point(p.info().id);
    }
    let (handle, requests, wake) = LoopHandle::new().context("creating an eventfd")?;
    let reload = eventfd().context("creating an eventfd")?;
    RELOAD_FD.store(reload.as_raw_fd(), Ordering::Relaxed);
    install_signal_handlers()?;
    let server = crate::server::Server::new(tables, fib, handle, opts.config.clone(), infos);
    let listener = control.listener.try_clone().context("cloning the control socket")?;
    crate::server::spawn(server.clone(), listener, reload)?;
    if let (Some(frr), Some(addrs)) = (cfg.frr, kernel_addresses) {
        crate::kernel::spawn_watch(server.clone(), interfaces.clone(), addrs)?;
        server.set_frr_status(crate::frr::spawn(server.clone(), frr, interfaces)?);
    }
    if let Some(m) = metrics {
        let addr = m.local_addr().ok();
        crate::metrics::spawn(m, server)?;
        info!(address = ?addr, "serving metrics at /metrics");
    }
    info!(router = %cfg.router.name, ports = ports.len(), socket = %control.path().display(), "forwarding");
    let mut fast = start_fast_path(&cfg, &ports)?;
    let result = forward(
        &mut dp,
        &mut ports,
        &mut watch,
        fast.as_mut(),
        opts.stats_file.as_deref(),
        &requests,
        wake.as_raw_fd(),
    );
    if let Some(f) = fast.as_mut() {
        f.count(&mut dp);
    }
    write_stats(&dp, &ports, &watch, fast.as_ref(), opts.stats_file.as_deref());
    for (port, w) in ports.iter().zip(&watch).filter(|(_, w)| w.faults != PortFaults::default()) {
        let f = w.faults;
        info!(port = %port.info().name, errors = f.errors, reopened = f.reopened, detached = f.detached, "port faults");
    }
    for (name, n) in dp.counters().drop_list() {
        info!(reason = name, count = n, "dropped");
    }
    for (name, n) in dp.counters().event_list() {
        info!(event = name, count = n, "counted");
    }
    drop(control);
    info!(router = %cfg.router.name, "stopped");
    result
}

/// Why the in-kernel fast path cannot serve a port, or `None` if it can: the programs
/// hand frames on with `bpf_redirect_peer`, which only veth has, and attach to interfaces
/// the router reads with AF_PACKET (TAP and vhost-user frames never pass TC ingress).
pub(crate) fn fast_path_refuses(kind: &vmpls_control::PortKind, veth: bool) -> Option<&'static str> {
    match kind {
        vmpls_control::PortKind::AfPacket if veth => None,
        vmpls_control::PortKind::AfPacket => Some("not a veth"),
        _ => Some("not an AF_PACKET port"),
    }
}

/// Starts the in-kernel fast path as `[router] fast-path` asks and logs, port by port,
/// what forwards its frames:
/// - `"off"`: nothing to start, the pipeline serves every port;
/// - `"tc"`: loads the TC programs and attaches them to the AF_PACKET ports over veth;
///   an error stops the router;
/// - `"auto"` (the default): the same where some port is a veth, but a failure to load
///   or attach (a vmpls built without clang, no CAP_BPF, an old kernel) is one warning,
///   and the pipeline serves every port.
///
/// The ports the programs cannot serve stay with the pipeline alone in both modes.
fn start_fast_path(cfg: &Config, ports: &[Box<dyn Port>]) -> anyhow::Result<Option<FastPathRuntime>> {
    use vmpls_control::FastPathMode;
    let mode = cfg.router.fast_path;
    if mode == FastPathMode::Off {
        info!("fast-path = \"off\": the pipeline serves every port");
        return Ok(None);
    }
    let mut served = Vec::new();
    let mut sockets = Vec::new();
    let mut refused = Vec::new();
    for (p, port) in cfg.ports.iter().zip(ports) {
        let veth = p.kind == vmpls_control::PortKind::AfPacket && vmpls_fastpath::is_veth(&p.interface);
        let ifindex = AfPacketPort::interface_index(&p.interface);
        let why = fast_path_refuses(&p.kind, veth).or(ifindex.is_none().then_some("no such interface"));
        match (why, ifindex) {
            (None, Some(ifindex)) => {
                let info = port.info();
                served.push(Some(FastPortInfo {
                    ifname: p.interface.clone(),
                    ifindex,
                    mac: info.mac,
                    mtu: info.mtu,
                }));
                // SAFETY: the port owns the socket and outlives this call.
                sockets.push(Some(unsafe { BorrowedFd::borrow_raw(port.fd()) }));
                refused.push(None);
            }
            (why, _) => {
                served.push(None);
                sockets.push(None);
                refused.push(Some(why.unwrap_or("no such interface")));
            }
        }
    }
    let fast = if mode == FastPathMode::Auto && served.iter().all(Option::is_none) {
        info!(
            "fast-path = \"auto\": no port is an AF_PACKET port over a veth; the pipeline serves every port"
        );
        None
    } else {
        match FastPathRuntime::start(served, &sockets, dataplane_config(cfg).default_ttl) {
            Ok(f) => Some(f),
            Err(e) if mode == FastPathMode::Auto => {
                warn!(
                    error = %format!("{e:#}"),
                    "fast-path = \"auto\": the in-kernel fast path cannot run here, the pipeline serves every port (\"tc\" requires it, \"off\" does not try)"
                );
                None
            }
            Err(e) => return Err(e),
        }
    };
    for (p, why) in cfg.ports.iter().zip(&refused) {
        match (why, &fast) {
            (None, Some(_)) => {
                info!(port = %p.name, kind = p.kind.name(), interface = %p.interface, "forwarding: the in-kernel fast path, the pipeline for what it leaves")
            }
            (None, None) => {
                info!(port = %p.name, kind = p.kind.name(), interface = %p.interface, "forwarding: the pipeline (the fast path did not start)")
            }
            (Some(why), _) => {
                info!(port = %p.name, kind = p.kind.name(), interface = %p.interface, why, "forwarding: the pipeline (the fast path serves AF_PACKET ports over veth only)")
            }
        }
    }
    Ok(fast)
}

/// The config's `[[neighbor]]`s into a new router's neighbour table.
fn set_static_neighbors(dp: &mut Dataplane, cfg: &Config, n_ports: usize) -> anyhow::Result<()> {
    // Nothing is held yet, so nothing is released into these.
    let (mut pool, mut out) = (PacketPool::new(0), Output::new(n_ports));
    for n in &cfg.neighbors {
        let change = NeighborChange::Set { port: n.port, addr: n.address, mac: n.lladdr, replace: false };
        change_neighbor(dp, change, Instant::now(), &mut pool, &mut out)
            .map_err(|e| anyhow::anyhow!("{}:{}: neighbor: {e}", cfg.path.display(), n.line))?;
    }
    if !cfg.neighbors.is_empty() {
        info!(count = cfg.neighbors.len(), "static neighbours set");
    }
    Ok(())
}

/// The pipeline's settings from the config's `[limits]` and `[frr]` (with FRR, the
/// kernel owns the host stack), the rest the dataplane's defaults.
fn dataplane_config(cfg: &Config) -> DataplaneConfig {
    let limits = &cfg.limits;
    // Held frames keep their buffers: the config's bound leaves half the pool free.
    const _: () = assert!(vmpls_control::MAX_HELD_TOTAL as usize <= POOL_SIZE / 2);
    let d = DataplaneConfig::default();
    DataplaneConfig {
        icmp_rate: limits.icmp_rate,
        icmp_burst: Some(limits.icmp_burst),
        neighbor_request_rate: limits.neighbor_request_rate,
        neighbor_request_burst: Some(limits.neighbor_request_burst),
        neighbor: vmpls_dataplane::neighbor::NeighborConfig {
            max_entries: limits.neighbor_entries as usize,
            max_held: limits.neighbor_held_per_address as usize,
            max_held_total: limits.neighbor_held_total as usize,
            ..d.neighbor
        },
        host_stack: if cfg.frr.is_some() { HostStack::Kernel } else { HostStack::Own },
        ..d
    }
}

/// Opens the port a `[[port]]` describes, by its kind: an AF_PACKET socket on an existing
/// interface, a TAP the router creates, or a vhost-user socket QEMU connects to (its
/// directory is created if missing). For an AF_PACKET port, also how to find its
/// interface again should it be deleted and created anew.
fn open_port(
    id: PortId,
    p: &vmpls_control::PortConfig,
) -> Result<(Box<dyn Port>, Option<Relink>), PortError> {
    use vmpls_control::PortKind as K;
    use vmpls_ports::PortKind as P;
    let port = match &p.kind {
        K::AfPacket => {
            let port = AfPacketPort::open(id, &p.name, &p.interface, p.mtu)?;
            let relink = Relink {
                ifname: p.interface.clone(),
                ifindex: port.ifindex(),
                offloads: p.offloads,
                mtu: p.mtu,
            };
            return Ok((Box::new(port), Some(relink)));
        }
        K::Tap { mac: None } => {
            vmpls_ports::open_port(id, &p.name, &P::Tap { ifname: p.interface.clone() }, p.mtu)
        }
        K::Tap { mac: Some(mac) } => {
            let opts = vmpls_ports::TapOptions { mtu: p.mtu, mac: Some(*mac), ..Default::default() };
            Ok(Box::new(vmpls_ports::TapPort::create(id, &p.name, &p.interface, &opts)?) as Box<dyn Port>)
        }
        K::Udp { local, remote, port, netns } => {
            let opts = vmpls_ports::MplsUdpOptions {
                local: *local,
                remote: *remote,
                udp_port: *port,
                netns: netns.clone(),
                mtu: p.mtu,
            };
            vmpls_ports::open_port(id, &p.name, &P::MplsUdp(opts), p.mtu)
        }
        K::VhostUser { socket, mac } => {
            if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
                std::fs::create_dir_all(dir).map_err(|source| PortError::Io {
                    ifname: socket.display().to_string(),
                    op: "create the socket's directory",
                    source,
                })?;
            }
            match mac {
                None => vmpls_ports::open_port(id, &p.name, &P::VhostUser { socket: socket.clone() }, p.mtu),
                Some(mac) => {
                    let opts = vmpls_ports::VhostUserOptions { mtu: p.mtu, mac: Some(*mac) };
                    Ok(Box::new(vmpls_ports::VhostUserPort::open(id, &p.name, socket, &opts)?)
                        as Box<dyn Port>)
                }
            }
        }
    };
    Ok((port?, None))
}

/// `port`, wrapped to report the config's offload overrides if it has any.
fn with_overrides(port: Box<dyn Port>, offloads: OffloadOverrides) -> Box<dyn Port> {
    if offloads == OffloadOverrides::default() { port } else { Box::new(WithOffloads::new(port, offloads)) }
}

/// How the router finds an AF_PACKET port's interface again.
#[derive(Debug, Clone)]
struct Relink {
    /// The interface name (from the config).
    ifname: String,
    /// The index of the interface the port's socket is bound to.
    ifindex: u32,
    /// The config's offload overrides, for the reopened port.
    offloads: OffloadOverrides,
    /// The config's `mtu`, if any: it wins over the interface's while the interface
    /// carries it.
    mtu: Option<u32>,
}

/// The MTU a port uses on an interface whose MTU is `interface`: the configured one
/// (`configured`) if the interface carries it, else the interface's (frames above it
/// could not leave: the kernel refuses them one by one, and the fast path's redirects
/// skip the check altogether).
fn port_mtu(configured: Option<u32>, interface: u32) -> u32 {
    configured.map_or(interface, |c| c.min(interface))
}

/// What the link check changed.
#[derive(Debug, Default)]
struct LinkChanges {
    /// Ports opened again on a re-created interface, with its new index.
    reopened: Vec<(PortId, u32)>,
    /// Ports whose MTU changed, with the new one.
    mtu: Vec<(PortId, u32)>,
}

/// Follows the MTU of an AF_PACKET port's interface (`relink`) into the pipeline (the
/// configured `mtu`, if any, wins while the interface carries it), with a log line;
/// records the change in `changes`.
fn follow_mtu(dp: &mut Dataplane, id: PortId, name: &str, relink: &Relink, changes: &mut LinkChanges) {
    let Some(interface) = AfPacketPort::interface_mtu(&relink.ifname) else { return };
    let Some(old) = dp.ports().get(usize::from(id)).map(|p| p.mtu) else { return };
    let mtu = port_mtu(relink.mtu, interface);
    if mtu == old {
        return;
    }
    match relink.mtu {
        Some(configured) if configured > interface => warn!(
            port = %name,
            interface = %relink.ifname,
            old_mtu = old,
            mtu,
            configured,
            "the interface's MTU is below the port's configured mtu: the port uses the interface's until it is raised"
        ),
        _ => {
            info!(port = %name, interface = %relink.ifname, old_mtu = old, mtu, "the interface's MTU changed: the port follows it")
        }
    }
    dp.set_port_mtu(id, mtu);
    changes.mtu.push((id, mtu));
}

/// The forwarding loop's record of one port's faults, next to the port.
#[derive(Debug)]
struct PortWatch {
    faults: PortFaults,
    /// Counters of the port's earlier sockets (before it was reopened): the port's
    /// counters run on across a reopen.
    earlier: PortStats,
    /// For AF_PACKET ports.
    relink: Option<Relink>,
    /// The descriptor reported an error in the last poll round.
    erred_last_round: bool,
    /// Left out of the poll set until the next link check: it reported errors in two
    /// poll rounds in a row (an error condition that reading does not clear would
    /// otherwise wake the loop at once, forever).
    muted: bool,
    /// Errors since the last receive that delivered frames.
    failing: bool,
    last_warning: Option<Instant>,
    /// Why the port could not be reopened, as last logged (logged again only if it changes).
    refusal: Option<String>,
}

impl PortWatch {
    fn new(relink: Option<Relink>) -> PortWatch {
        PortWatch {
            faults: PortFaults::default(),
            earlier: PortStats::default(),
            relink,
            erred_last_round: false,
            muted: false,
            failing: false,
            last_warning: None,
            refusal: None,
        }
    }

    /// Counts an error of port `name`; warns at most every [`ERROR_LOG_EVERY`].
    fn error(&mut self, now: Instant, name: &str, what: &dyn std::fmt::Display) {
        self.faults.errors += 1;
        self.failing = true;
        if self.last_warning.is_none_or(|t| now.duration_since(t) >= ERROR_LOG_EVERY) {
            self.last_warning = Some(now);
            warn!(port = %name, error = %what, errors = self.faults.errors, "port error");
        }
    }

    /// Takes in a poll round's result for the port (`fd`, its entry in the poll set);
    /// returns whether to receive from it. An error condition (the interface went down
    /// or was deleted: `ENETDOWN`) is level-triggered: the receive reads it, and so
    /// clears it. One that reading does not clear would wake the loop at once, forever:
    /// a port reporting errors in two rounds in a row is left out of the poll set until
    /// [`PortWatch::unmute`] (the next link check).
    fn polled(&mut self, now: Instant, name: &str, fd: &mut libc::pollfd) -> bool {
        let revents = std::mem::take(&mut fd.revents);
        let erred = revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0;
        if erred {
            self.error(now, name, &format_args!("poll revents {revents:#x}"));
            if self.erred_last_round {
                self.muted = true;
                fd.fd = -1;
                warn!(port = %name, "the port keeps reporting errors: not polled for a second");
            }
        }
        self.erred_last_round = erred;
        erred || revents & libc::POLLIN != 0
    }

    /// Puts a muted port back in the poll set (`fd`: its entry, `port_fd`: its descriptor).
    fn unmute(&mut self, fd: &mut libc::pollfd, port_fd: RawFd) {
        if self.muted {
            self.muted = false;
            self.erred_last_round = false;
            fd.fd = port_fd;
        }
    }

    /// The port delivered frames.
    fn received(&mut self, name: &str) {
        if self.failing {
            self.failing = false;
            self.last_warning = None;
            info!(port = %name, errors = self.faults.errors, "port receives again");
        }
    }

    /// The port's counters, its earlier sockets' included.
    fn stats(&self, port: &dyn Port) -> PortStats {
        self.earlier + port.stats()
    }
}

/// Checks the interfaces of the AF_PACKET ports: one whose interface was deleted and
/// created again (a new index under the same name) is opened anew on it, standing in for
/// the port it replaces (same MAC and MTU, see [`AfPacketPort::stand_in_for`]), so the
/// pipeline and the neighbours on the link go on as before. A down interface needs
/// nothing: the kernel keeps the socket bound and resumes it when the interface comes up.
/// Follows each interface's MTU ([`follow_mtu`]). Also puts muted ports back in the
/// poll set. Bounded: one name lookup and one MTU query per AF_PACKET port, and one open
/// per port whose interface came back.
fn check_links(
    dp: &mut Dataplane,
    ports: &mut [Box<dyn Port>],
    watch: &mut [PortWatch],
    fds: &mut [libc::pollfd],
) -> LinkChanges {
    let mut changes = LinkChanges::default();
    for (i, (w, fd)) in watch.iter_mut().zip(fds.iter_mut()).enumerate() {
        w.unmute(fd, ports[i].fd());
        let Some(relink) = &mut w.relink else { continue };
        let name = ports[i].info().name.clone();
        let now_index = AfPacketPort::interface_index(&relink.ifname);
        if now_index == Some(relink.ifindex) {
            follow_mtu(dp, i as PortId, &name, relink, &mut changes);
            continue;
        }
        // Deleted (a socket bound to it is unbound for good), and maybe back.
        if !w.faults.detached {
            w.faults.detached = true;
            warn!(
                port = %name,
                interface = %relink.ifname,
                "the interface was deleted: the port is out of service until an interface of that name is back"
            );
        }
        let Some(mut previous) = dp.ports().get(i).filter(|_| now_index.is_some()).cloned() else { continue };
        // The new interface's MTU is followed as any change of it (the configured one
        // wins while it carries it).
        if let Some(interface) = AfPacketPort::interface_mtu(&relink.ifname) {
            previous.mtu = port_mtu(relink.mtu, interface);
        }
        // The MTU asked for is checked before the socket is bound: a refused interface
        // costs a socket and a few ioctls a second, and no membership change on it.
        let reopened = AfPacketPort::open(previous.id, &previous.name, &relink.ifname, Some(previous.mtu))
            .and_then(|mut port| port.stand_in_for(&previous).map(|own| (port, own)));
        match reopened {
            Ok((port, (mac, mtu))) => {
                let ifindex = port.ifindex();
                w.earlier = w.earlier + ports[i].stats();
                ports[i] = with_overrides(Box::new(port), relink.offloads);
                fd.fd = ports[i].fd();
                relink.ifindex = ifindex;
                w.faults.reopened += 1;
                w.faults.detached = false;
                w.refusal = None;
                w.erred_last_round = false;
                changes.reopened.push((previous.id, ifindex));
                info!(port = %name, interface = %relink.ifname, ifindex, "the interface is back: port reopened");
                if mac != previous.mac {
                    info!(
                        port = %name,
                        interface_mac = %fmt_mac(&mac),
                        port_mac = %fmt_mac(&previous.mac),
                        "the interface has a new MAC; the port keeps its own (promiscuous mode)"
                    );
                }
                if dp.ports().get(i).is_some_and(|p| p.mtu != previous.mtu) {
                    info!(
                        port = %name,
                        interface_mtu = mtu,
                        mtu = previous.mtu,
                        "the interface has another MTU: the port follows it"
                    );
                    dp.set_port_mtu(previous.id, previous.mtu);
                    changes.mtu.push((previous.id, previous.mtu));
                }
            }
            Err(e) => {
                let why = format!("{:#}", anyhow::Error::from(e));
                if w.refusal.as_deref() != Some(why.as_str()) {
                    warn!(
                        port = %name,
                        interface = %relink.ifname,
                        error = %why,
                        "the interface is back but the port cannot use it; trying again every second"
                    );
                    w.refusal = Some(why);
                }
            }
        }
    }
    changes
}

fn fmt_mac(m: &[u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// A port with the config's `offloads` forced over what it reports, in the manner of
/// smoltcp's `phy` middlewares: the frames pass through untouched; only the caps the
/// pipeline sees change (re-read at every batch, since a vhost-user port's follow its
/// guest).
struct WithOffloads {
    inner: Box<dyn Port>,
    overrides: OffloadOverrides,
    info: vmpls_dataplane::PortInfo,
}

impl WithOffloads {
    fn new(inner: Box<dyn Port>, overrides: OffloadOverrides) -> WithOffloads {
        let mut info = inner.info().clone();
        info.caps = apply_offloads(info.caps, &overrides);
        WithOffloads { inner, overrides, info }
    }

    fn refresh(&mut self) {
        self.info.caps = apply_offloads(self.inner.info().caps, &self.overrides);
    }
}

/// `caps` with every offload the config names set as it says.
fn apply_offloads(mut caps: vmpls_dataplane::PortCaps, o: &OffloadOverrides) -> vmpls_dataplane::PortCaps {
    for (cap, forced) in [
        (&mut caps.tso4, o.tso4),
        (&mut caps.tso6, o.tso6),
        (&mut caps.uso, o.uso),
        (&mut caps.csum, o.csum),
        (&mut caps.mpls_gso, o.mpls_gso),
    ] {
        if let Some(v) = forced {
            *cap = v;
        }
    }
    caps
}

impl Port for WithOffloads {
    fn info(&self) -> &vmpls_dataplane::PortInfo {
        &self.info
    }
    fn fd(&self) -> RawFd {
        self.inner.fd()
    }
    fn recv_batch(
        &mut self,
        pool: &mut PacketPool,
        out: &mut Vec<Packet>,
        max: usize,
    ) -> std::io::Result<usize> {
        self.refresh();
        self.inner.recv_batch(pool, out, max)
    }
    fn send_batch(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> std::io::Result<usize> {
        self.refresh();
        self.inner.send_batch(pkts, pool)
    }
    fn stats(&self) -> PortStats {
        self.inner.stats()
    }
    fn point_to_point(&self) -> bool {
        self.inner.point_to_point()
    }
}

/// Hands the pipeline the offloads each port accepts now, where they changed: a
/// vhost-user port's caps follow what its guest negotiated (they change when a guest
/// connects, renegotiates or goes away). One struct compare per port.
fn refresh_caps(dp: &mut Dataplane, ports: &[Box<dyn Port>]) {
    for (i, port) in ports.iter().enumerate() {
        let caps = port.info().caps;
        if dp.ports().get(i).is_some_and(|known| known.caps != caps) {
            info!(port = %port.info().name, ?caps, "port offloads changed");
            dp.set_port_caps(i as PortId, caps);
        }
    }
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Whether the frame's label stack (if it is MPLS) holds `label`.
fn has_label(frame: &[u8], label: u32) -> bool {
    let Ok(eth) = vmpls_wire::ethernet::Frame::new_checked(frame) else {
        return false;
    };
    if !matches!(
        eth.ethertype(),
        vmpls_wire::ethernet::EtherType::Mpls | vmpls_wire::ethernet::EtherType::MplsMulticast
    ) {
        return false;
    }
    vmpls_wire::mpls::Stack::new(eth.payload()).any(|e| e.label == label)
}

/// Copies the frames of `pkts` on `port` to the captures that want them; drops captures
/// whose reader is gone.
fn capture(captures: &mut Vec<CaptureSink>, port: PortId, dir: Direction, pkts: &[Packet]) {
    let ts_ns = now_ns();
    captures.retain(|c| {
        if c.port != port {
            return true;
        }
        for p in pkts {
            if c.label.is_some_and(|l| !has_label(p.frame(), l)) {
                continue;
            }
            let f = CaptureFrame { ts_ns, dir, data: p.frame().to_vec() };
            match c.tx.try_send(f) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    c.lost.fetch_add(1, Ordering::Relaxed);
                }
                Err(TrySendError::Disconnected(_)) => return false,
            }
        }
        true
    });
}

#[allow(clippy::too_many_arguments)]
fn answer(
    req: LoopRequest,
    dp: &mut Dataplane,
    ports: &[Box<dyn Port>],
    watch: &[PortWatch],
    captures: &mut Vec<CaptureSink>,
    mut fast: Option<&mut FastPathRuntime>,
    pool: &mut PacketPool,
    out: &mut Output,
) {
    match req {
        LoopRequest::Snapshot(reply) => {
            // Exact as of now: what the fast path did since the last tick too.
            if let Some(f) = fast.as_deref_mut() {
                f.count(dp);
            }
            let snap = Snapshot {
                counters: dp.counters().clone(),
                ports: ports.iter().zip(watch).map(|(p, w)| w.stats(p.as_ref())).collect(),
                neighbors: dp.neighbors().entries().collect(),
                faults: watch.iter().map(|w| w.faults).collect(),
                fast_path: fast.as_deref().map(FastPathRuntime::named_counters).unwrap_or_default(),
                fast_path_ports: (0..ports.len())
                    .map(|i| fast.as_deref().and_then(|f| f.port_counts(i)))
                    .collect(),
                port_info: dp.ports().to_vec(),
                static_neighbors: dp
                    .neighbors()
                    .entries()
                    .filter(|&(port, addr, _)| dp.neighbors().is_static(port, addr))
                    .map(|(port, addr, _)| (port, addr))
                    .collect(),
            };
            // The requester may have given up; nothing to do then.
            let _ = reply.try_send(snap);
        }
        LoopRequest::Capture(sink) => captures.push(sink),
        LoopRequest::FibStored(reply) => {
            if let Some(f) = fast {
                f.sync(dp);
            }
            let _ = reply.try_send(());
        }
        LoopRequest::Neighbor(change, reply) => {
            let r = change_neighbor(dp, change, Instant::now(), pool, out);
            if let Some(f) = fast {
                f.sync(dp); // the kernel's adjacencies follow at once
            }
            let _ = reply.try_send(r);
        }
    }
}

/// Applies a neighbour change to the pipeline's table (held frames released or dropped
/// into `out` / `pool`).
fn change_neighbor(
    dp: &mut Dataplane,
    change: NeighborChange,
    now: Instant,
    pool: &mut PacketPool,
    out: &mut Output,
) -> Result<(), String> {
    match change {
        NeighborChange::Set { port, addr, mac, replace } => {
            dp.set_static_neighbor(now, port, addr, mac, replace, pool, out).map_err(|e| e.to_string())
        }
        NeighborChange::Del { port, addr } => match dp.remove_neighbor(port, addr, pool) {
            true => Ok(()),
            false => Err(format!("no neighbour {addr} on this port")),
        },
    }
}

#[allow(clippy::too_many_arguments)]
fn forward(
    dp: &mut Dataplane,
    ports: &mut [Box<dyn Port>],
    watch: &mut [PortWatch],
    mut fast: Option<&mut FastPathRuntime>,
    stats: Option<&Path>,
    requests: &Receiver<LoopRequest>,
    wake: RawFd,
) -> anyhow::Result<()> {
    let mut pool = PacketPool::new(POOL_SIZE);
    let mut out = Output::new(ports.len());
    let mut batch = Vec::with_capacity(BATCH);
    let mut captures: Vec<CaptureSink> = Vec::new();
    let mut fds: Vec<libc::pollfd> = ports
        .iter()
        .map(|p| libc::pollfd { fd: p.fd() as RawFd, events: libc::POLLIN, revents: 0 })
        .collect();
    fds.push(libc::pollfd { fd: wake, events: libc::POLLIN, revents: 0 });
    let n_ports = ports.len();
    let mut next_tick = Instant::now() + TICK;
    let mut next_stats = Instant::now() + STATS_EVERY;
    let mut next_link_check = Instant::now() + LINK_CHECK_EVERY;
    while !STOP.load(Ordering::Relaxed) {
        let timeout = next_tick.saturating_duration_since(Instant::now()).as_millis() as i32;
        // SAFETY: fds is a valid, exclusively borrowed array of pollfd of the given length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout.max(0)) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e).context("poll");
        }
        let now = Instant::now();
        for i in 0..n_ports {
            let w = &mut watch[i];
            if !w.polled(now, &ports[i].info().name, &mut fds[i]) {
                continue;
            }
            match ports[i].recv_batch(&mut pool, &mut batch, BATCH) {
                Ok(0) => {}
                Ok(_) => {
                    if w.failing {
                        w.received(&ports[i].info().name);
                    }
                    if !captures.is_empty() {
                        capture(&mut captures, i as PortId, Direction::Rx, &batch);
                    }
                    // The pipeline stops early when the pool runs low (a batch of
                    // super-frames cut into segments); sending returns the buffers.
                    loop {
                        dp.process_batch(now, &mut batch, &mut pool, &mut out);
                        if batch.is_empty() {
                            break;
                        }
                        flush(ports, watch, now, &mut out, &mut pool, &mut captures);
                    }
                }
                Err(e) => w.error(now, &ports[i].info().name, &format_args!("receive failed: {e}")),
            }
            flush(ports, watch, now, &mut out, &mut pool, &mut captures);
        }
        refresh_caps(dp, ports);
        if let Some(f) = fast.as_deref_mut() {
            f.sync(dp);
        }
        if fds[n_ports].revents & libc::POLLIN != 0 {
            fds[n_ports].revents = 0;
            eventfd_drain(wake);
            while let Ok(req) = requests.try_recv() {
                answer(req, dp, ports, watch, &mut captures, fast.as_deref_mut(), &mut pool, &mut out);
            }
            flush(ports, watch, now, &mut out, &mut pool, &mut captures);
        }
        if now >= next_tick {
            dp.poll(now, &mut pool, &mut out);
            if let Some(f) = fast.as_deref_mut() {
                f.tick(now, dp, &mut pool, &mut out);
            }
            flush(ports, watch, now, &mut out, &mut pool, &mut captures);
            next_tick = now + TICK;
        }
        if now >= next_link_check {
            if let Some(f) = fast.as_deref_mut() {
                f.check_links();
            }
            let changes = check_links(dp, ports, watch, &mut fds[..n_ports]);
            if let Some(f) = fast.as_deref_mut() {
                for (port, ifindex) in changes.reopened {
                    // SAFETY: the port owns the socket and outlives this call.
                    let socket = unsafe { BorrowedFd::borrow_raw(ports[usize::from(port)].fd()) };
                    f.port_reopened(port, ifindex, socket);
                }
                for (port, mtu) in changes.mtu {
                    f.set_port_mtu(port, mtu);
                }
                // In force now: the loop may sleep a tick before its next sync, and
                // frames the programs forward meanwhile would not fit.
                f.sync(dp);
            }
            next_link_check = now + LINK_CHECK_EVERY;
        }
        if now >= next_stats {
            if let Some(f) = fast.as_deref_mut() {
                f.count(dp);
            }
            write_stats(dp, ports, watch, fast.as_deref(), stats);
            next_stats = now + STATS_EVERY;
        }
    }
    Ok(())
}

fn flush(
    ports: &mut [Box<dyn Port>],
    watch: &mut [PortWatch],
    now: Instant,
    out: &mut Output,
    pool: &mut PacketPool,
    captures: &mut Vec<CaptureSink>,
) {
    for (i, ((port, w), tx)) in ports.iter_mut().zip(watch.iter_mut()).zip(out.tx.iter_mut()).enumerate() {
        if tx.is_empty() {
            continue;
        }
        if !captures.is_empty() {
            capture(captures, i as PortId, Direction::Tx, tx);
        }
        if let Err(e) = port.send_batch(tx, pool) {
            w.error(now, &port.info().name, &format_args!("send failed: {e}"));
            for p in tx.drain(..) {
                pool.put(p);
            }
        }
    }
}

/// The counters as JSON: drops and events by name, and per-port frame counts.
fn stats_json(
    dp: &Dataplane,
    ports: &[Box<dyn Port>],
    watch: &[PortWatch],
    fast: Option<&FastPathRuntime>,
) -> serde_json::Value {
    let c = dp.counters();
    let drops: serde_json::Map<_, _> =
        vmpls_dataplane::Drop::ALL.iter().map(|d| (d.name().to_string(), c.drops(*d).into())).collect();
    let events: serde_json::Map<_, _> =
        vmpls_dataplane::Event::ALL.iter().map(|e| (e.name().to_string(), c.events(*e).into())).collect();
    let ports: Vec<serde_json::Value> = ports
        .iter()
        .zip(watch)
        .enumerate()
        .map(|(i, (p, w))| {
            let s = w.stats(p.as_ref());
            serde_json::json!({
                "name": p.info().name,
                "rx_packets": s.rx_packets,
                "rx_bytes": s.rx_bytes,
                "tx_packets": s.tx_packets,
                "tx_bytes": s.tx_bytes,
                "rx_dropped": s.rx_bad_vnet_hdr + s.rx_truncated + s.rx_no_buffer + s.rx_not_mpls + s.rx_wrong_source,
                "rx_truncated": s.rx_truncated,
                "rx_not_mpls": s.rx_not_mpls,
                "rx_wrong_source": s.rx_wrong_source,
                "tx_unreachable": s.tx_unreachable,
                "tx_not_mpls": s.tx_not_mpls,
                "tx_dropped": s.tx_dropped,
                "tx_errors": s.tx_errors.total(),
                "pipeline_rx": c.rx_frames.get(i).copied().unwrap_or(0),
                "pipeline_tx": c.tx_frames.get(i).copied().unwrap_or(0),
                "fast_path_rx": fast.and_then(|f| f.port_counts(i)).map_or(0, |c| c.rx_frames),
                "fast_path_tx": fast.and_then(|f| f.port_counts(i)).map_or(0, |c| c.tx_frames),
                "errors": w.faults.errors,
                "reopened": w.faults.reopened,
                "detached": w.faults.detached,
            })
        })
        .collect();
    let labels: Vec<serde_json::Value> = c
        .label_list()
        .map(|(label, packets, bytes)| serde_json::json!({ "label": label, "packets": packets, "bytes": bytes }))
        .collect();
    let mut json = serde_json::json!({ "drops": drops, "events": events, "ports": ports, "labels": labels });
    if let Some(f) = fast {
        let named: serde_json::Map<_, _> =
            f.named_counters().into_iter().map(|(name, n)| (name.to_string(), n.into())).collect();
        json["fast_path"] = named.into();
    }
    json
}

fn write_stats(
    dp: &Dataplane,
    ports: &[Box<dyn Port>],
    watch: &[PortWatch],
    fast: Option<&FastPathRuntime>,
    path: Option<&Path>,
) {
    let Some(path) = path else { return };
    let tmp = path.with_extension("tmp");
    let r = std::fs::File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(
                serde_json::to_string_pretty(&stats_json(dp, ports, watch, fast))
                    .unwrap_or_default()
                    .as_bytes(),
            )
        })
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = r {
        warn!(path = %path.display(), error = %e, "writing stats failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labelled(labels: &[u32]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x88, 0x47]);
        for (i, l) in labels.iter().enumerate() {
            let bos = u32::from(i + 1 == labels.len());
            f.extend_from_slice(&(l << 12 | bos << 8 | 64).to_be_bytes());
        }
        f.extend_from_slice(&[0x45; 20]);
        f
    }

    #[test]
    fn the_fast_path_serves_af_packet_ports_over_veth_only() {
        use vmpls_control::PortKind;
        assert_eq!(fast_path_refuses(&PortKind::AfPacket, true), None);
        assert_eq!(fast_path_refuses(&PortKind::AfPacket, false), Some("not a veth"));
        assert_eq!(fast_path_refuses(&PortKind::Tap { mac: None }, true), Some("not an AF_PACKET port"));
        let vhost = PortKind::VhostUser { socket: "/run/x.sock".into(), mac: None };
        assert_eq!(fast_path_refuses(&vhost, false), Some("not an AF_PACKET port"));
    }

    #[test]
    fn label_filter_looks_through_the_whole_stack() {
        let f = labelled(&[100, 200]);
        assert!(has_label(&f, 100));
        assert!(has_label(&f, 200));
        assert!(!has_label(&f, 300));
        let mut ip = f.clone();
        ip[12..14].copy_from_slice(&[0x08, 0x00]);
        assert!(!has_label(&ip, 100));
        assert!(!has_label(&f[..10], 100));
    }

    #[test]
    fn captures_are_bounded_and_end_with_their_reader() {
        let (tx, rx) = mpsc::sync_channel(2);
        let lost = Arc::new(AtomicU64::new(0));
        let mut caps = vec![CaptureSink { port: 1, label: Some(100), tx, lost: lost.clone() }];
        let pkts: Vec<Packet> = (0..4).map(|_| Packet::from_frame(1, &labelled(&[100]))).collect();
        let other = vec![Packet::from_frame(1, &labelled(&[999]))];
        capture(&mut caps, 1, Direction::Rx, &other);
        capture(&mut caps, 0, Direction::Rx, &pkts);
        assert_eq!(rx.try_iter().count(), 0, "other labels and ports are not captured");
        capture(&mut caps, 1, Direction::Tx, &pkts);
        assert_eq!(lost.load(Ordering::Relaxed), 2, "a full queue loses frames");
        let got: Vec<CaptureFrame> = rx.try_iter().collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].dir, Direction::Tx);
        assert_eq!(got[0].data, labelled(&[100]));
        drop(rx);
        capture(&mut caps, 1, Direction::Tx, &pkts);
        assert!(caps.is_empty(), "a capture whose reader left is removed");
    }

    /// A port whose offloads the test changes, like a vhost-user port's when a guest
    /// negotiates.
    struct FakePort(vmpls_dataplane::PortInfo);

    impl Port for FakePort {
        fn info(&self) -> &vmpls_dataplane::PortInfo {
            &self.0
        }
        fn fd(&self) -> RawFd {
            -1
        }
        fn recv_batch(
            &mut self,
            _: &mut PacketPool,
            _: &mut Vec<Packet>,
            _: usize,
        ) -> std::io::Result<usize> {
            Ok(0)
        }
        fn send_batch(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> std::io::Result<usize> {
            let n = pkts.len();
            pkts.drain(..).for_each(|p| pool.put(p));
            Ok(n)
        }
        fn stats(&self) -> PortStats {
            PortStats::default()
        }
    }

    #[test]
    fn configured_offloads_override_what_the_port_reports() {
        use vmpls_dataplane::PortCaps;
        let reported = PortCaps { tso4: true, tso6: true, csum: true, ..PortCaps::default() };
        let info = vmpls_dataplane::PortInfo {
            id: 0,
            name: "core".into(),
            mac: [2, 0, 0, 0, 0, 1],
            mtu: 1500,
            caps: reported,
        };
        let overrides =
            OffloadOverrides { tso4: Some(false), mpls_gso: Some(true), ..OffloadOverrides::default() };
        let mut port = WithOffloads::new(Box::new(FakePort(info)), overrides);
        let want = PortCaps { tso4: false, tso6: true, csum: true, mpls_gso: true, uso: false };
        assert_eq!(port.info().caps, want);
        // Re-read at every batch, and still overridden.
        let mut pool = PacketPool::new(1);
        port.recv_batch(&mut pool, &mut Vec::new(), 1).unwrap();
        assert_eq!(port.info().caps, want);
    }

    #[test]
    fn caps_follow_the_ports_when_they_change() {
        use vmpls_dataplane::{PortCaps, PortInfo};
        let info = |id: PortId, caps| PortInfo {
            id,
            name: format!("p{id}"),
            mac: [2, 0, 0, 0, 0, id as u8],
            mtu: 1500,
            caps,
        };
        let offered = PortCaps { tso4: true, tso6: true, csum: true, ..PortCaps::default() };
        let mut ports: Vec<Box<dyn Port>> =
            vec![Box::new(FakePort(info(0, offered))), Box::new(FakePort(info(1, offered)))];
        let infos: Vec<_> = ports.iter().map(|p| p.info().clone()).collect();
        let fib = FibHandle::new(vmpls_fib::Fib::default());
        let mut dp = Dataplane::new(fib, infos, DataplaneConfig::default());
        refresh_caps(&mut dp, &ports);
        assert_eq!(dp.ports()[1].caps, offered);
        // The guest on port 1 negotiated no receive offloads.
        ports[1] = Box::new(FakePort(info(1, PortCaps::default())));
        refresh_caps(&mut dp, &ports);
        assert_eq!(dp.ports()[1].caps, PortCaps::default());
        assert_eq!(dp.ports()[0].caps, offered, "other ports keep theirs");
    }

    #[test]
    fn a_port_whose_error_condition_persists_is_muted_until_the_link_check() {
        // A pipe whose writer is gone: POLLHUP that no read clears.
        let mut ends = [0; 2];
        // SAFETY: pipe2(2) writes two descriptors into a live array of two.
        assert_eq!(unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) }, 0);
        // SAFETY: both were just created and are owned by nobody else.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
        drop(wr);
        let mut w = PortWatch::new(None);
        let mut fd = libc::pollfd { fd: rd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let now = Instant::now();
        let mut rounds = 0;
        // SAFETY: one valid pollfd; a muted entry (fd -1) is ignored and the call times out.
        while unsafe { libc::poll(&mut fd, 1, 50) } > 0 {
            assert!(w.polled(now, "p", &mut fd), "an error is read to clear it");
            rounds += 1;
            assert!(rounds <= 2, "still polled after {rounds} rounds");
        }
        assert_eq!((rounds, fd.fd, w.faults.errors), (2, -1, 2));
        w.unmute(&mut fd, rd.as_raw_fd());
        assert_eq!(fd.fd, rd.as_raw_fd());
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut fd, 1, 0) }, 1, "polled again after the check");
        // A single error (read, cleared) mutes nothing.
        let mut w = PortWatch::new(None);
        let mut ok = libc::pollfd { fd: 7, events: libc::POLLIN, revents: libc::POLLERR };
        assert!(w.polled(now, "p", &mut ok));
        ok.revents = libc::POLLIN;
        assert!(w.polled(now, "p", &mut ok));
        ok.revents = 0;
        assert!(!w.polled(now, "p", &mut ok), "nothing to read");
        assert_eq!((ok.fd, w.faults.errors, w.muted), (7, 1, false));
    }

    #[test]
    fn the_configured_mtu_wins_while_the_interface_carries_it() {
        assert_eq!(port_mtu(None, 1400), 1400, "none configured: the interface's");
        assert_eq!(port_mtu(None, 9000), 9000);
        assert_eq!(port_mtu(Some(1500), 9000), 1500, "a raised interface keeps the configured");
        assert_eq!(port_mtu(Some(1500), 1400), 1400, "frames above the interface's cannot leave");
    }

    #[test]
    fn counters_run_on_across_a_reopen() {
        let mut a = PortStats { rx_packets: 3, tx_bytes: 100, ..PortStats::default() };
        a.tx_errors.record(libc::ENXIO);
        let mut b = PortStats { rx_packets: 2, tx_bytes: 50, tx_dropped: 1, ..PortStats::default() };
        b.tx_errors.record(libc::ENOBUFS);
        let sum = a + b;
        assert_eq!((sum.rx_packets, sum.tx_bytes, sum.tx_dropped), (5, 150, 1));
        assert_eq!((sum.tx_errors.total(), sum.tx_errors.last_other_errno), (2, libc::ENXIO));
    }

    #[test]
    fn eventfd_wakes_and_drains() {
        let fd = eventfd().unwrap();
        let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut p, 1, 0) }, 0);
        eventfd_signal(fd.as_raw_fd());
        eventfd_signal(fd.as_raw_fd());
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut p, 1, 0) }, 1);
        eventfd_drain(fd.as_raw_fd());
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut p, 1, 0) }, 0);
    }
}
