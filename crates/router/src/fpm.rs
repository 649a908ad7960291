//! The FPM server: zebra (FRRouting) connects and hands over its routes and labels,
//! which become the router's tables (`[frr]` in the config).
//!
//! One thread owns the listener and the one connection. Bytes are decoded as they come
//! ([`vmpls_frr`]); whatever a read brings is applied as one table change when the
//! socket has nothing more queued, so a table walk of thousands of messages costs a few
//! table builds, not one per message. A new connection (zebra restarted) marks what the
//! router holds as stale; once zebra has been quiet for [`RESYNC_QUIET`], what it did
//! not send again is removed. While zebra is away, its routes keep forwarding for the
//! configured hold time, then are removed.
//!
//! FPM has no authentication: the listener is on loopback (the config refuses anything
//! else), so only processes in the router's own network namespace reach it. Of those,
//! only zebra is served: the owner of the connecting socket (asked of the kernel by the
//! connection's addresses, `vmpls_sys::cred`) must be root or one of `fpm-users`
//! (zebra's user, `frr` by default); anyone else is closed at once, counted and logged,
//! and changes nothing (no resync, no timer). One connection is served at a time; a
//! second one is closed at once and logged.
//!
//! A route zebra sends that vmpls cannot carry (an SRv6 encapsulation, say) is skipped
//! and counted by kind, and the session goes on; only broken framing closes it. A table
//! change that fails keeps zebra's changes pending and is tried again on a bounded
//! schedule, so the tables end up as zebra sent them. Reads are bounded: at most
//! [`READ_BUDGET`] bytes a wake-up, decoded as they come, so the buffer never holds more
//! than one partial frame and one read ([`MAX_BUFFERED`]); a faster peer waits in TCP.
//!
//! VRFs: zebra's routes of table 254 are the default VRF's, those of another table the
//! VRF whose table id it is ([`VrfLookup`]); the label route popping to a VRF's
//! interface is that VRF's VPN label (pop, then route in the VRF). A table no VRF has is
//! counted and skipped, never guessed into another VRF; its routes stay in zebra's table
//! here and are translated again whenever the VRFs change (the lookup's generation), so
//! that a VRF found a moment after zebra sent its routes gets them, and one that goes
//! takes its routes with it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{ErrorKind, Read};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tracing::{error, info, warn};
use vmpls_control::api::Protocol;
use vmpls_control::tables::FrrChange;
use vmpls_control::{FrrConfig, LabelConfigAction, NexthopConfig, RouteAction};
use vmpls_fib::{DEFAULT_VRF_NAME, PortId, Reject};
use vmpls_frr::route::MAIN_TABLE;
use vmpls_frr::{Dest, Kind, Rib, Route, RouteKey, Unsupported, Update, fpm};
use vmpls_sys::event::PollSet;

use crate::vrf_lookup::VrfLookup;

/// How long zebra must be quiet after connecting before the routes it did not send again
/// are removed (zebra does not mark the end of its table walk).
pub const RESYNC_QUIET: Duration = Duration::from_secs(3);
/// `rtm_protocol` of the kernel's own routes: zebra passes on the connected subnets.
const RTPROT_KERNEL: u8 = 2;
/// Bytes read per call.
const READ_CHUNK: usize = 64 * 1024;
/// Bytes read from zebra per wake-up before the timers and the table change get their
/// turn; the rest waits in the socket (TCP slows zebra down, nothing is dropped).
pub const READ_BUDGET: usize = 4 * 1024 * 1024;
/// The most the read buffer holds: what is left of a frame (under the largest frame)
/// and one read.
pub const MAX_BUFFERED: usize = fpm::MAX_FRAME_LEN + READ_CHUNK;
/// After a table change this large (a table walk of zebra's), the memory its translation
/// and transaction held for a moment goes back to the system: thousands of routes
/// leave megabytes free in the allocator's heap, which would stay in the router's
/// resident size for good.
const TRIM_AFTER_CHANGES: usize = 10_000;
/// The first wait before a failed table change is tried again; it doubles up to
/// [`RETRY_MAX`] while the tables keep refusing.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How often a refused peer (per user) is logged at most.
const REFUSED_LOG_EVERY: Duration = Duration::from_secs(60);
/// The loopback's interface index, the same in every namespace: zebra's pops to it are
/// the default VRF's (its VPN label, a node's own segment).
const LOOPBACK_IFINDEX: u32 = 1;
/// The most tables and interfaces remembered as logged; past it, they are logged again.
const LOGGED_MAX: usize = 1024;

/// How long the router waits before it says that zebra never connected, or that zebra
/// sends no label at all: the two silent mistakes of an FRR setup (no `-M dplane_fpm_nl`
/// or a wrong FPM address; no vmpls module, so zebra turned MPLS off).
const SILENCE_WARN: Duration = Duration::from_secs(30);

/// What the FPM server has seen, for `vmpls stats` and the logs.
#[derive(Debug, Default)]
pub struct FrrStatus {
    /// zebra is connected now.
    pub connected: AtomicBool,
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections refused because one was already served.
    pub refused: AtomicU64,
    /// Connections refused because their socket is not root's or an `fpm-users` user's
    /// (or its owner could not be found).
    pub refused_owner: AtomicU64,
    /// Messages skipped because vmpls cannot carry what they say, by kind
    /// ([`Unsupported::ALL`] order).
    pub unsupported: [AtomicU64; Unsupported::ALL.len()],
    /// Table changes the tables refused; each is kept and tried again.
    pub apply_failures: AtomicU64,
    /// Connections closed because their bytes could not be decoded.
    pub decode_errors: AtomicU64,
    /// Netlink messages received.
    pub messages: AtomicU64,
    /// Routes not installed: no next hop on a port, or refused by the tables.
    pub unusable: AtomicU64,
    /// Routes skipped because their table is no known VRF's (kept, and installed when
    /// that VRF appears); counted each time they are taken.
    pub unknown_table: AtomicU64,
    /// Label routes skipped because they pop to an interface that is neither the
    /// loopback nor a known VRF's (a VPN label whose VRF is gone or not found yet).
    pub unknown_vrf_interface: AtomicU64,
    /// Table changes applied.
    pub batches: AtomicU64,
}

impl FrrStatus {
    /// The counters as `vmpls stats` shows them, with the routes held (`(prefix, label)`).
    pub fn counters(&self, (routes, labels): (usize, usize)) -> Vec<vmpls_control::api::Counter> {
        let c = |name: &str, value: u64| vmpls_control::api::Counter { name: name.into(), value };
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut out = vec![
            c("connected", u64::from(self.connected.load(Ordering::Relaxed))),
            c("connections", get(&self.connections)),
            c("refused", get(&self.refused)),
            c("refused_owner", get(&self.refused_owner)),
            c("decode_errors", get(&self.decode_errors)),
            c("messages", get(&self.messages)),
            c("batches", get(&self.batches)),
            c("unusable", get(&self.unusable)),
            c("unknown_table", get(&self.unknown_table)),
            c("unknown_vrf_interface", get(&self.unknown_vrf_interface)),
            c("apply_failures", get(&self.apply_failures)),
            c("routes", routes as u64),
            c("label_routes", labels as u64),
        ];
        out.extend(
            Unsupported::ALL
                .iter()
                .map(|k| c(&format!("unsupported_{}", k.name()), get(&self.unsupported[k.index()]))),
        );
        out
    }
}

/// Where the FPM server puts the routes from zebra: the router's tables (the control
/// server implements it).
pub trait RouteSink: Send + Sync {
    /// Applies a burst of route changes as one table change, in force when this
    /// returns; returns the changes refused, each with its reason.
    ///
    /// # Errors
    /// The tables could not be built; the running ones stay.
    fn apply_frr(&self, changes: Vec<FrrChange>) -> Result<Vec<String>, String>;
}

/// The FPM listener, bound when the router starts, before anything else it does, so
/// that a port someone else holds stops the start with a clear error.
///
/// # Errors
/// The address is taken (another vmpls, or any process squatting zebra's FPM port,
/// which zebra would then feed), or not in this namespace.
pub fn listen(cfg: &FrrConfig) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(cfg.fpm).with_context(|| {
        format!(
            "cannot listen for zebra's FPM connection on {0}: another process holds it, and zebra \
             would hand it the routes (is another vmpls running here? `ss -ltnpe 'sport = :{1}'` \
             shows who)",
            cfg.fpm,
            cfg.fpm.port()
        )
    })?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// The users whose sockets may connect as zebra: root, and `fpm-users` (by default the
/// `frr` user, if the system has one).
///
/// # Errors
/// A user of `fpm-users` is not in the passwd database, or the database cannot be read.
pub fn allowed_users(cfg: &FrrConfig, config_path: &std::path::Path) -> anyhow::Result<Vec<u32>> {
    let mut uids = vec![0];
    match &cfg.fpm_users {
        None => {
            let frr = FrrConfig::DEFAULT_FPM_USER;
            if let Some(uid) =
                vmpls_sys::cred::user_id(frr).with_context(|| format!("looking up user {frr}"))?
            {
                uids.push(uid);
            }
        }
        Some((names, line)) => {
            for name in names {
                let uid = vmpls_sys::cred::user_id(name)
                    .with_context(|| format!("looking up user {name:?} of frr.fpm-users"))?
                    .with_context(|| {
                        format!(
                            "{}:{line}: frr.fpm-users: there is no user {name:?} on this system; name \
                             the user zebra runs as (`ps -o user= -C zebra`), usually \"frr\"",
                            config_path.display()
                        )
                    })?;
                uids.push(uid);
            }
        }
    }
    uids.dedup();
    Ok(uids)
}

/// Starts the FPM server thread on `listener` ([`listen`]), serving the sockets of
/// `allowed` users only ([`allowed_users`]); `vrfs` says what zebra's tables and
/// interfaces are.
///
/// # Errors
/// The thread cannot be started.
pub fn spawn(
    server: Arc<dyn RouteSink>,
    cfg: FrrConfig,
    listener: TcpListener,
    allowed: Vec<u32>,
    vrfs: Arc<dyn VrfLookup>,
) -> anyhow::Result<Arc<FrrStatus>> {
    let status = Arc::new(FrrStatus::default());
    let st = status.clone();
    info!(address = %cfg.fpm, hold_s = cfg.hold.as_secs(), stale_s = cfg.stale.as_secs(), users = ?allowed, "waiting for zebra's FPM connection");
    std::thread::Builder::new().name("fpm".into()).spawn(move || {
        Session::new(server, cfg, allowed, vrfs, st).run(&listener);
    })?;
    Ok(status)
}

/// Whether the TCP socket at `peer` (connected to our `local`) belongs to one of
/// `allowed` users ([`allowed_users`]); if not, its user (when known) and why. The FPM
/// server's and the pseudowire channel's check ([`crate::pw_channel`]).
pub(crate) fn peer_owner_allowed(
    allowed: &[u32],
    local: std::net::SocketAddr,
    peer: std::net::SocketAddr,
) -> Result<(), (Option<u32>, String)> {
    match vmpls_sys::cred::tcp_peer_owner(local, peer) {
        Ok(Some(o)) if o.held && allowed.contains(&o.uid) => Ok(()),
        Ok(Some(o)) if o.held => {
            Err((Some(o.uid), format!("the connecting socket belongs to user {}", o.uid)))
        }
        // A socket its process closed reports uid 0: that says nothing.
        Ok(Some(_)) => {
            Err((None, "the connecting socket was closed before its owner could be checked".into()))
        }
        Ok(None) => Err((None, "the connecting socket is gone; its owner is unknown".into())),
        Err(e) => Err((None, format!("the owner of the connecting socket cannot be found ({e})"))),
    }
}

struct Session {
    server: Arc<dyn RouteSink>,
    cfg: FrrConfig,
    /// Users whose sockets are served.
    allowed: Vec<u32>,
    vrfs: Arc<dyn VrfLookup>,
    /// The lookup's generation the RIB was last translated with.
    vrfs_generation: u64,
    /// The VRF each route of a table other than 254 is installed in now (the name shared
    /// by the routes of a flush: a table of many VRF routes holds no copy per route).
    installed_vrf: HashMap<RouteKey, Arc<str>>,
    /// VRF routes installed with a next hop left out (out of no port that could be
    /// placed): taken again when later routes of a VRF table come, since a leaked next
    /// hop is placed by the route it was copied from, which zebra may send after it.
    unplaced: HashSet<RouteKey>,
    status: Arc<FrrStatus>,
    rib: Rib,
    conn: Option<TcpStream>,
    buf: Vec<u8>,
    last_message: Instant,
    connected_at: Instant,
    lost_at: Option<Instant>,
    /// Tables no VRF has and interfaces no port or VRF has, logged already.
    logged_tables: HashSet<u32>,
    logged_interfaces: HashSet<(Option<String>, u32)>,
    /// Kinds of unsupported messages logged already (once each).
    unsupported_logged: [bool; Unsupported::ALL.len()],
    /// When each refused user (`None`: owner unknown) was last logged.
    refused_logged: HashMap<Option<u32>, Instant>,
    /// A failed table change is tried again then.
    retry_at: Option<Instant>,
    retry_delay: Duration,
    /// When the session started, and what was said about zebra's silence (once each).
    started: Instant,
    silence_warn: Duration,
    warned_no_zebra: bool,
    warned_no_labels: bool,
}

impl Session {
    fn new(
        server: Arc<dyn RouteSink>,
        cfg: FrrConfig,
        allowed: Vec<u32>,
        vrfs: Arc<dyn VrfLookup>,
        status: Arc<FrrStatus>,
    ) -> Session {
        let vrfs_generation = vrfs.generation();
        Session {
            server,
            cfg,
            allowed,
            vrfs,
            vrfs_generation,
            installed_vrf: HashMap::new(),
            unplaced: HashSet::new(),
            status,
            rib: Rib::new(),
            conn: None,
            buf: Vec::with_capacity(MAX_BUFFERED),
            last_message: Instant::now(),
            connected_at: Instant::now(),
            lost_at: None,
            logged_tables: HashSet::new(),
            logged_interfaces: HashSet::new(),
            unsupported_logged: [false; Unsupported::ALL.len()],
            refused_logged: HashMap::new(),
            retry_at: None,
            retry_delay: RETRY_FIRST,
            started: Instant::now(),
            silence_warn: SILENCE_WARN,
            warned_no_zebra: false,
            warned_no_labels: false,
        }
    }

    fn run(mut self, listener: &TcpListener) {
        // The listener, and the connection (muted while there is none).
        let mut set = PollSet::new();
        let accept = set.push(listener.as_fd());
        let conn = set.push(listener.as_fd());
        loop {
            match &self.conn {
                Some(c) => set.set(conn, c.as_fd()),
                None => set.mute(conn),
            }
            let n = set.poll(Duration::from_millis(100)).unwrap_or(0);
            let (on_listener, on_conn) = (set.take(accept), set.take(conn));
            if n > 0 && on_listener.bits() != 0 {
                self.accept(listener);
            }
            if n > 0 && on_conn.bits() != 0 {
                self.read();
            }
            self.timers();
            self.follow_vrfs();
            if self.rib.has_changes() && self.retry_at.is_none_or(|t| Instant::now() >= t) {
                self.flush();
            }
        }
    }

    fn accept(&mut self, listener: &TcpListener) {
        let Ok((stream, peer)) = listener.accept() else { return };
        // Before anything else: whoever is not zebra changes nothing, not even the
        // resync a reconnection starts.
        if let Err((uid, why)) =
            stream.local_addr().map_err(|e| (None, e.to_string())).and_then(|l| self.owner_allowed(l, peer))
        {
            self.status.refused_owner.fetch_add(1, Ordering::Relaxed);
            let now = Instant::now();
            if self.refused_logged.get(&uid).is_none_or(|t| now.duration_since(*t) >= REFUSED_LOG_EVERY) {
                if self.refused_logged.len() >= 1024 {
                    self.refused_logged.clear();
                }
                self.refused_logged.insert(uid, now);
                warn!(%peer, ?uid, allowed = ?self.allowed, "refused an FPM connection: {why} (only zebra may connect: root or frr.fpm-users)");
            }
            return;
        }
        if self.conn.is_some() {
            self.status.refused.fetch_add(1, Ordering::Relaxed);
            warn!(%peer, "refused a second FPM connection: zebra is already connected (one zebra at a time)");
            return;
        }
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        self.status.connections.fetch_add(1, Ordering::Relaxed);
        self.status.connected.store(true, Ordering::Relaxed);
        let held = self.rib.len();
        self.rib.begin_resync();
        info!(%peer, routes_held = held, "zebra connected over FPM");
        self.conn = Some(stream);
        self.buf.clear();
        self.last_message = Instant::now();
        self.connected_at = Instant::now();
        self.lost_at = None;
    }

    fn owner_allowed(
        &self,
        local: std::net::SocketAddr,
        peer: std::net::SocketAddr,
    ) -> Result<(), (Option<u32>, String)> {
        peer_owner_allowed(&self.allowed, local, peer)
    }

    /// Reads what is queued (up to [`READ_BUDGET`]), decodes every whole frame, and
    /// applies the updates to the RIB (the table change follows in [`Session::flush`]).
    fn read(&mut self) {
        let Some(mut conn) = self.conn.take() else { return };
        match self.read_from(&mut conn) {
            Ok(()) => self.conn = Some(conn),
            Err(why) => self.lost(&why),
        }
    }

    /// [`Session::read`] from any source; an error ends the connection.
    fn read_from(&mut self, src: &mut impl Read) -> Result<(), String> {
        let mut total = 0;
        while total < READ_BUDGET {
            let start = self.buf.len();
            self.buf.resize(start + READ_CHUNK, 0);
            let r = src.read(&mut self.buf[start..]);
            self.buf.truncate(start + *r.as_ref().unwrap_or(&0));
            match r {
                Ok(0) => return Err("zebra closed the FPM connection".into()),
                Ok(n) => {
                    total += n;
                    self.last_message = Instant::now();
                    self.decode_buffered()?;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("the FPM connection failed: {e}")),
            }
        }
        Ok(())
    }

    /// Decodes the whole frames in the buffer and drops them from it.
    fn decode_buffered(&mut self) -> Result<(), String> {
        let mut used = 0;
        let mut failure = None;
        loop {
            match fpm::parse_frame(&self.buf[used..]) {
                Ok(None) => break,
                Ok(Some(frame)) => {
                    let (decoded, len) = (vmpls_frr::route::decode(frame.payload), frame.len);
                    match decoded {
                        Ok(updates) => {
                            self.status.messages.fetch_add(updates.len() as u64, Ordering::Relaxed);
                            for u in updates {
                                if let Update::Unsupported(s) = &u {
                                    self.count_unsupported(s);
                                }
                                self.rib.apply(u);
                            }
                        }
                        Err(e) => {
                            failure = Some(e.to_string());
                            break;
                        }
                    }
                    used += len;
                }
                Err(e) => {
                    failure = Some(e.to_string());
                    break;
                }
            }
        }
        self.buf.drain(..used);
        match failure {
            None => Ok(()),
            Some(why) => {
                self.status.decode_errors.fetch_add(1, Ordering::Relaxed);
                // What was decoded before the bad frame is kept: each frame stands alone.
                error!("closing the FPM connection: {why}; the router keeps forwarding on its current table");
                Err("FPM connection closed after a decoding error".into())
            }
        }
    }

    fn count_unsupported(&mut self, s: &vmpls_frr::Skipped) {
        let i = s.kind.index();
        self.status.unsupported[i].fetch_add(1, Ordering::Relaxed);
        if !std::mem::replace(&mut self.unsupported_logged[i], true) {
            warn!(
                kind = s.kind.name(),
                route = ?s.key,
                "a message from zebra is skipped: vmpls cannot carry {}; the session goes on (logged once per kind, \
                 counted in `vmpls stats` as unsupported_{})",
                s.detail,
                s.kind.name()
            );
        }
    }

    fn lost(&mut self, why: &str) {
        self.conn = None;
        self.buf.clear();
        self.status.connected.store(false, Ordering::Relaxed);
        self.lost_at = Some(Instant::now());
        warn!(
            routes = self.rib.len(),
            hold_s = self.cfg.hold.as_secs(),
            "{why}; zebra's routes stay in force for the hold time"
        );
    }

    /// Says once what a quiet zebra most likely means (see [`SILENCE_WARN`]); returns
    /// what it said, for the tests.
    fn warn_silence(&mut self) -> Option<&'static str> {
        let ever_connected = self.status.connections.load(Ordering::Relaxed) > 0;
        if !ever_connected && !self.warned_no_zebra && self.started.elapsed() >= self.silence_warn {
            self.warned_no_zebra = true;
            let why = "no zebra has connected over FPM yet";
            warn!(
                waited_s = self.started.elapsed().as_secs(),
                address = %self.cfg.fpm,
                "{why}: is zebra running with `-M dplane_fpm_nl` (and `-M vmpls_zebra`), with `fpm address` \
                 naming this address, and as root or a user of frr.fpm-users?"
            );
            return Some(why);
        }
        if self.conn.is_some()
            && !self.warned_no_labels
            && !self.rib.is_empty()
            && self.connected_at.elapsed() >= self.silence_warn
        {
            self.warned_no_labels = true;
            let labelled = self.rib.routes().any(|r| {
                matches!(r.key.dest, Dest::Label(_)) || r.nexthops.iter().any(|n| !n.labels.is_empty())
            });
            if !labelled {
                let why = "zebra sends routes but no label";
                warn!(
                    routes = self.rib.len(),
                    "{why}: if LDP, segment routing, static LSPs or VPNs are configured, zebra has MPLS off (the \
                     vmpls zebra module is not loaded: `-M vmpls_zebra`; zebra logs \"Disabling MPLS support\" \
                     without the module's \"vmpls: MPLS turned on\")"
                );
                return Some(why);
            }
        }
        None
    }

    fn timers(&mut self) {
        self.warn_silence();
        if self.conn.is_some()
            && self.rib.resyncing()
            && self.last_message.elapsed() >= RESYNC_QUIET
            && self.connected_at.elapsed() >= self.cfg.stale
        {
            let removed = self.rib.end_resync();
            info!(
                removed,
                routes = self.rib.len(),
                "zebra's table walk is over; routes it did not send again are removed"
            );
        }
        if let Some(t) = self.lost_at
            && t.elapsed() >= self.cfg.hold
        {
            self.lost_at = None;
            let removed = self.rib.clear();
            warn!(removed, "zebra stayed away longer than the hold time; its routes are removed");
        }
    }

    /// The VRFs changed: the routes whose meaning depends on them (those of tables other
    /// than 254, the pops to an interface) are taken again at the next flush.
    fn follow_vrfs(&mut self) {
        let generation = self.vrfs.generation();
        if generation == self.vrfs_generation {
            return;
        }
        self.vrfs_generation = generation;
        let n = self.rib.mark_changed(|r| r.key.table != MAIN_TABLE || is_pop(r));
        if n > 0 {
            info!(
                generation,
                routes = n,
                "the VRFs changed; zebra's VRF routes and VPN labels are taken again"
            );
        }
    }

    /// Turns the RIB's pending changes into one table change; they stay pending until the
    /// tables take them, and a refusal is tried again later ([`RETRY_FIRST`], doubling).
    fn flush(&mut self) {
        // An IPv6 route over the IPv4 core takes its gateway from the default VRF's IPv4
        // next hops (Translator::ipv4_core_gateway): the RIB marks it changed when those
        // gateways change.
        if !self.unplaced.is_empty()
            && self
                .rib
                .pending_changes()
                .iter()
                .any(|(k, _)| k.table != MAIN_TABLE && !self.unplaced.contains(k))
        {
            let unplaced = &self.unplaced;
            self.rib.mark_changed(|r| unplaced.contains(&r.key));
        }
        let vrfs = self.vrfs.clone();
        let mut t = Translator::new(&*vrfs).with_rib(&self.rib);
        // A route leaving a VRF (gone, or its table now another's) is removed there
        // first, so that whatever zebra has for that destination now can take its place.
        let mut moved_away = Vec::new();
        let mut changes = Vec::new();
        let mut installed = Vec::new();
        // Each VRF route of this flush, and whether a next hop of it was left out.
        let mut placed = Vec::new();
        let mut vrf_of_table: HashMap<u32, Option<Arc<str>>> = HashMap::new();
        let default_vrf: Arc<str> = Arc::from(DEFAULT_VRF_NAME);
        for (key, route) in self.rib.pending_changes() {
            // Connected routes (the kernel's, protocol 2) come from the kernel's
            // addresses, which vmpls reads itself.
            let route = route.filter(|r| r.protocol != RTPROT_KERNEL);
            let vrf = match key.table {
                MAIN_TABLE => Some(default_vrf.clone()),
                table => vrf_of_table
                    .entry(table)
                    .or_insert_with(|| vrfs.vrf_of_table(table).map(Arc::from))
                    .clone(),
            };
            match key.dest {
                Dest::Prefix(prefix, len) => {
                    if key.table != MAIN_TABLE {
                        if let Some(old) = self.installed_vrf.get(&key)
                            && vrf.as_ref() != Some(old)
                        {
                            moved_away.push(FrrChange::Route {
                                vrf: old.to_string(),
                                prefix,
                                len,
                                route: None,
                            });
                        }
                        installed.push((key, vrf.clone().filter(|_| route.is_some())));
                    }
                    match vrf {
                        Some(vrf) => {
                            let left_out = t.off_port_nexthops;
                            changes.push(t.route(&vrf, key.table != MAIN_TABLE, prefix, len, route));
                            if key.table != MAIN_TABLE {
                                placed.push((key, t.off_port_nexthops > left_out));
                            }
                        }
                        None if route.is_some() => t.unknown_tables.push(key.table),
                        None => {}
                    }
                }
                // Labels are one table, the default VRF's.
                Dest::Label(_) if key.table != MAIN_TABLE => {
                    if route.is_some() {
                        t.unknown_tables.push(key.table);
                    }
                }
                Dest::Label(label) => changes.push(t.label(label, route)),
            }
        }
        moved_away.append(&mut changes);
        let changes = moved_away;
        let left = t.into_leftovers();
        self.log_translation(&left);
        let counts = (left.unusable, left.unknown_tables.len() as u64, left.unknown_interfaces.len() as u64);
        let applied = |s: &mut Session, refused: u64| {
            s.rib.mark_applied();
            for (key, left_out) in placed {
                if left_out {
                    s.unplaced.insert(key);
                } else {
                    s.unplaced.remove(&key);
                }
            }
            for (key, vrf) in installed {
                match vrf {
                    Some(vrf) => s.installed_vrf.insert(key, vrf),
                    None => s.installed_vrf.remove(&key),
                };
            }
            s.status.unusable.fetch_add(counts.0 + refused, Ordering::Relaxed);
            s.status.unknown_table.fetch_add(counts.1, Ordering::Relaxed);
            s.status.unknown_vrf_interface.fetch_add(counts.2, Ordering::Relaxed);
        };
        if changes.is_empty() {
            applied(self, 0);
            return;
        }
        let n = changes.len();
        let t = Instant::now();
        match self.server.apply_frr(changes) {
            Ok(refused) => {
                applied(self, refused.len() as u64);
                self.retry_at = None;
                self.retry_delay = RETRY_FIRST;
                self.status.batches.fetch_add(1, Ordering::Relaxed);
                for r in refused {
                    warn!("a route from zebra is not installed: {r}");
                }
                info!(changes = n, in_force_ms = t.elapsed().as_millis() as u64, "routes from zebra applied");
                if n >= TRIM_AFTER_CHANGES {
                    crate::run::return_freed_memory();
                }
            }
            Err(e) => {
                self.status.apply_failures.fetch_add(1, Ordering::Relaxed);
                self.retry_at = Some(Instant::now() + self.retry_delay);
                error!(
                    changes = n,
                    retry_in_s = self.retry_delay.as_secs(),
                    "routes from zebra could not be applied, the running table stays; they are kept and tried again: {e}"
                );
                self.retry_delay = (self.retry_delay * 2).min(RETRY_MAX);
            }
        }
    }

    /// Logs each table no VRF has and each interface no port or VRF has, once (until
    /// [`LOGGED_MAX`] of them were).
    fn log_translation(&mut self, t: &Leftovers) {
        for &table in t.unknown_tables.iter().collect::<BTreeSet<_>>() {
            if self.logged_tables.len() >= LOGGED_MAX {
                self.logged_tables.clear();
            }
            if self.logged_tables.insert(table) {
                warn!(
                    table,
                    "zebra sends routes of a table that is no VRF's: they are skipped and kept, and installed if a VRF \
                     with that table appears (counted as unknown_table; logged once per table)"
                );
            }
        }
        for (label, ifindex) in &t.unknown_interfaces {
            if self.logged_interfaces.len() >= LOGGED_MAX {
                self.logged_interfaces.clear();
            }
            if self.logged_interfaces.insert((None, *ifindex)) {
                warn!(
                    label,
                    ifindex,
                    "zebra pops a label to an interface that is neither the loopback nor a VRF's (a VPN label whose \
                     VRF is gone or not found yet): not installed until a VRF has that interface (counted as \
                     unknown_vrf_interface; logged once per interface)"
                );
            }
        }
        for (vrf, ifindex) in &t.off_ports {
            if self.logged_interfaces.len() >= LOGGED_MAX {
                self.logged_interfaces.clear();
            }
            if self.logged_interfaces.insert((Some(vrf.clone()), *ifindex)) {
                warn!(
                    vrf,
                    ifindex,
                    "a next hop of a VRF's route from zebra is out of an interface that is no port of that VRF, of \
                     the router's namespace, nor of the one VRF whose route it was leaked from: left out (a route left \
                     with none is counted as unusable; logged once per interface)"
                );
            }
        }
    }
}

/// Whether a route only pops, out of an interface with no gateway: the label routes a
/// VRF's interface (or the loopback) makes local.
fn is_pop(r: &Route) -> bool {
    matches!(r.key.dest, Dest::Label(_))
        && !r.nexthops.is_empty()
        && r.nexthops.iter().all(|n| n.gateway.is_none() && n.labels.is_empty())
}

/// Whether zebra's `table` has a connected route (the kernel's) over `ifindex` that
/// holds `addr`.
fn connected_over(rib: &Rib, table: u32, ifindex: u32, addr: IpAddr) -> bool {
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (0..=max).rev().any(|len| {
        let dest = Dest::Prefix(vmpls_wire::prefix::mask(addr, len), len);
        rib.get(&RouteKey { table, dest }).is_some_and(|c| {
            c.protocol == RTPROT_KERNEL && c.nexthops.iter().any(|m| m.ifindex == Some(ifindex))
        })
    })
}

/// What a flush could not place, to count and log once the translation is done.
struct Leftovers {
    unusable: u64,
    unknown_tables: Vec<u32>,
    unknown_interfaces: Vec<(u32, u32)>,
    off_ports: BTreeSet<(String, u32)>,
}

/// zebra's routes as changes of the router's tables, with what could not be placed.
struct Translator<'a> {
    vrfs: &'a dyn VrfLookup,
    /// Everything zebra has sent: where a next hop leaked from another VRF comes from.
    rib: Option<&'a Rib>,
    /// The VRF tables zebra has routes in (with their VRF), listed once a flush needs them.
    vrf_tables: Option<Vec<(u32, String)>>,
    /// The port of each (VRF namespace, interface index) asked so far in this flush.
    ports: HashMap<(Option<String>, u32), Option<PortId>>,
    /// Routes left with no next hop on a port.
    unusable: u64,
    /// The table of each route skipped because no VRF has it.
    unknown_tables: Vec<u32>,
    /// Label routes skipped because they pop to an interface no VRF has: (label, ifindex).
    unknown_interfaces: Vec<(u32, u32)>,
    /// Next hops of VRF routes out of no port: (VRF, ifindex).
    off_ports: BTreeSet<(String, u32)>,
    /// How many next hops [`Translator::off_ports`] stands for.
    off_port_nexthops: u64,
}

impl<'a> Translator<'a> {
    fn new(vrfs: &'a dyn VrfLookup) -> Translator<'a> {
        Translator {
            vrfs,
            rib: None,
            vrf_tables: None,
            ports: HashMap::new(),
            unusable: 0,
            unknown_tables: Vec::new(),
            unknown_interfaces: Vec::new(),
            off_ports: BTreeSet::new(),
            off_port_nexthops: 0,
        }
    }

    fn into_leftovers(self) -> Leftovers {
        Leftovers {
            unusable: self.unusable,
            unknown_tables: self.unknown_tables,
            unknown_interfaces: self.unknown_interfaces,
            off_ports: self.off_ports,
        }
    }

    /// With zebra's table at hand, to place next hops leaked from other VRFs.
    fn with_rib(mut self, rib: &'a Rib) -> Translator<'a> {
        self.rib = Some(rib);
        self
    }

    fn port(&mut self, vrf: Option<&str>, ifindex: u32) -> Option<PortId> {
        let vrfs = self.vrfs;
        *self.ports.entry((vrf.map(String::from), ifindex)).or_insert_with(|| vrfs.port(vrf, ifindex))
    }

    /// The next hops of `r` on ports. Labelled ones go into the core, out of ports of the
    /// router's namespace; unlabelled ones of a VRF's route (`vrf`) name an interface in
    /// the VRF's namespace, or (with VRF devices) a port of the router's enslaved to it.
    /// Next hops out of interfaces that are not ports of this router are left out.
    fn nexthops(&mut self, vrf: Option<&str>, r: &Route) -> Vec<NexthopConfig> {
        let mut out = Vec::with_capacity(r.nexthops.len());
        for (i, n) in r.nexthops.iter().enumerate() {
            let Some(ifindex) = n.ifindex else { continue };
            let in_vrf = match vrf {
                Some(v) if n.labels.is_empty() => self.port(Some(v), ifindex),
                _ => None,
            };
            let leaked = |t: &mut Self| match vrf {
                Some(v) if n.labels.is_empty() => t.leaked_port(v, r, i),
                _ => None,
            };
            let Some(port) = in_vrf.or_else(|| self.port(None, ifindex)).or_else(|| leaked(self)) else {
                if let Some(v) = vrf {
                    self.off_ports.insert((v.to_string(), ifindex));
                    self.off_port_nexthops += 1;
                }
                continue;
            };
            let via = n.gateway.or_else(|| self.ipv4_core_gateway(r, n));
            out.push(NexthopConfig { port, via, labels: n.labels.clone(), weight: n.weight });
        }
        out
    }

    /// The IPv4 gateway of a labelled next hop of an IPv6 route (6PE, 6VPE) that zebra
    /// sends with no gateway. BGP's next hop is an IPv4-mapped IPv6 address, which zebra
    /// resolves over an IPv4 route of the core; for such a next hop zebra (8.4 and 10.3,
    /// `_netlink_route_add_gateway_info`) writes neither `RTA_GATEWAY` nor `RTA_VIA`,
    /// only the interface and the labels: the resolving route's labels, then BGP's. So
    /// the gateway is that of the default VRF's IPv4 next hops out of the same interface
    /// whose labels begin the stack (the longest such stack), provided they all have one
    /// gateway; else none (never a guess between two neighbours).
    fn ipv4_core_gateway(&mut self, r: &Route, n: &vmpls_frr::Nexthop) -> Option<IpAddr> {
        let (Dest::Prefix(IpAddr::V6(_), _), Some(ifindex), false) =
            (r.key.dest, n.ifindex, n.labels.is_empty())
        else {
            return None;
        };
        let rib = self.rib?;
        let mut gateways =
            (0..=n.labels.len()).rev().find_map(|k| rib.core_gateways(ifindex, &n.labels[..k]))?;
        match (gateways.next(), gateways.next()) {
            (Some(&g), None) => Some(g),
            _ => None,
        }
    }

    /// The port of a next hop that zebra leaked into `vrf` from another VRF of this
    /// router (route targets importing a local VRF's routes, as a common-services VRF
    /// does). With network-namespace VRFs the message names the interface by its index
    /// alone, and indexes repeat from one namespace to the next, so the VRF it is in is
    /// the one whose own table in zebra holds the same destination over the same next
    /// hop (the route the leaked one was copied from) and where that next hop is on a
    /// connected subnet of the interface (other VRFs that imported the same route hold
    /// copies of it, not the subnet), provided exactly one VRF does. Customers that use
    /// the same subnet on interfaces of the same index, both imported, give one route
    /// with as many identical next hops as there are such VRFs: one each, in table order.
    fn leaked_port(&mut self, vrf: &str, r: &Route, i: usize) -> Option<PortId> {
        let n = &r.nexthops[i];
        let rib = self.rib?;
        let ifindex = n.ifindex?;
        let vrfs = self.vrfs;
        let tables = self.vrf_tables.get_or_insert_with(|| {
            rib.tables()
                .into_iter()
                .filter(|&t| t != MAIN_TABLE)
                .filter_map(|t| vrfs.vrf_of_table(t).map(|v| (t, v)))
                .collect()
        });
        let Dest::Prefix(dest, _) = r.key.dest else { return None };
        let on_link = n.gateway.unwrap_or(dest);
        let sources: Vec<&String> = tables
            .iter()
            .filter(|(table, other)| {
                other != vrf
                    && rib.get(&RouteKey { table: *table, dest: r.key.dest }).is_some_and(|src| {
                        src.nexthops.iter().any(|m| m.ifindex == Some(ifindex) && m.gateway == n.gateway)
                    })
                    && connected_over(rib, *table, ifindex, on_link)
            })
            .map(|(_, v)| v)
            .collect();
        let twin =
            |m: &vmpls_frr::Nexthop| m.ifindex == n.ifindex && m.gateway == n.gateway && m.labels.is_empty();
        let twins = r.nexthops.iter().filter(|m| twin(m)).count();
        let nth = r.nexthops[..i].iter().filter(|m| twin(m)).count();
        let source = match sources.len() {
            1 => sources[0].clone(),
            k if k == twins => sources[nth].clone(),
            _ => return None,
        };
        self.port(Some(&source), ifindex)
    }

    /// A prefix route of `vrf` (`in_vrf`: not the default VRF) as a change. A route left
    /// with no next hop is removed (the kernel, which has it too, is the router's own
    /// way there).
    fn route(
        &mut self,
        vrf: &str,
        in_vrf: bool,
        prefix: IpAddr,
        len: u8,
        route: Option<&Route>,
    ) -> FrrChange {
        let route = route.and_then(|r| {
            let action = match r.kind {
                Kind::Blackhole => RouteAction::Blackhole,
                Kind::Unreachable => RouteAction::Reject(Reject::Unreachable),
                Kind::Prohibit => RouteAction::Reject(Reject::Prohibit),
                Kind::Unicast => {
                    let nhs = self.nexthops(in_vrf.then_some(vrf), r);
                    if nhs.is_empty() {
                        self.unusable += 1;
                        return None;
                    }
                    RouteAction::Forward(nhs)
                }
            };
            Some((action, Protocol::from_zebra(r.protocol)))
        });
        FrrChange::Route { vrf: vrf.into(), prefix, len, route }
    }

    /// A label route as a change: a swap or penultimate-hop pop out of ports; a pop to
    /// the loopback (routed in the default VRF) or to a VRF's interface (the VPN label:
    /// routed in that VRF).
    fn label(&mut self, label: u32, route: Option<&Route>) -> FrrChange {
        let route = route.and_then(|r| {
            let nhs = self.nexthops(None, r);
            let action = if !nhs.is_empty() {
                LabelConfigAction::Forward(nhs)
            } else if is_pop(r) {
                LabelConfigAction::PopAndLookup { vrf: self.pop_vrf(label, r)? }
            } else {
                self.unusable += 1;
                return None;
            };
            Some((action, Protocol::from_zebra(r.protocol)))
        });
        FrrChange::Label { label, route }
    }

    /// The VRF a pop to an interface routes in: the loopback's, the default VRF; a VRF
    /// interface's, that VRF. Any other interface is counted (never guessed to be the
    /// default VRF: a VPN label whose VRF is not known would leak a customer's traffic
    /// into the core's table).
    fn pop_vrf(&mut self, label: u32, r: &Route) -> Option<String> {
        let lookup = self.vrfs;
        let mut vrfs = r.nexthops.iter().map(|n| match n.ifindex {
            Some(LOOPBACK_IFINDEX) => Some(DEFAULT_VRF_NAME.to_string()),
            Some(i) => lookup.vrf_of_device(i),
            None => None,
        });
        let first = vrfs.next().flatten();
        if let Some(vrf) = first.filter(|v| vrfs.all(|o| o.as_ref() == Some(v))) {
            return Some(vrf);
        }
        let ifindex = r.nexthops.iter().find_map(|n| n.ifindex).unwrap_or(0);
        self.unknown_interfaces.push((label, ifindex));
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;
    use vmpls_frr::Nexthop;
    use vmpls_frr::route::encode;

    /// The router's tables as far as zebra's changes go: what is in force, by
    /// destination; refuses the first `fail` table changes.
    #[derive(Default)]
    struct Tables {
        fail: AtomicUsize,
        in_force: Mutex<BTreeMap<String, FrrChange>>,
    }

    fn change_is_removal(c: &FrrChange) -> bool {
        matches!(c, FrrChange::Route { route: None, .. } | FrrChange::Label { route: None, .. })
    }

    impl RouteSink for Tables {
        fn apply_frr(&self, changes: Vec<FrrChange>) -> Result<Vec<String>, String> {
            if self.fail.load(Ordering::Relaxed) > 0 {
                self.fail.fetch_sub(1, Ordering::Relaxed);
                return Err("the tables are full (injected)".into());
            }
            let mut t = self.in_force.lock().unwrap();
            for c in changes {
                let key = match &c {
                    FrrChange::Route { vrf, prefix, len, .. } => format!("{vrf} {prefix}/{len}"),
                    FrrChange::Label { label, .. } => format!("label {label}"),
                };
                if change_is_removal(&c) {
                    t.remove(&key);
                } else {
                    t.insert(key, c);
                }
            }
            Ok(vec![])
        }
    }

    impl Tables {
        fn keys(&self) -> Vec<String> {
            self.in_force.lock().unwrap().keys().cloned().collect()
        }

        fn get(&self, key: &str) -> Option<FrrChange> {
            self.in_force.lock().unwrap().get(key).cloned()
        }
    }

    /// What the kernel would say of VRFs, set by the test; every change is a new
    /// generation.
    #[derive(Default)]
    struct FakeVrfs {
        generation: AtomicU64,
        state: Mutex<FakeVrfState>,
    }

    #[derive(Default, Clone)]
    struct FakeVrfState {
        tables: HashMap<u32, String>,
        devices: HashMap<u32, String>,
        ports: HashMap<(Option<String>, u32), PortId>,
    }

    impl FakeVrfs {
        fn set(&self, change: impl FnOnce(&mut FakeVrfState)) {
            change(&mut self.state.lock().unwrap());
            self.generation.fetch_add(1, Ordering::Relaxed);
        }
    }

    impl VrfLookup for FakeVrfs {
        fn generation(&self) -> u64 {
            self.generation.load(Ordering::Relaxed)
        }
        fn vrf_of_table(&self, table: u32) -> Option<String> {
            self.state.lock().unwrap().tables.get(&table).cloned()
        }
        fn vrf_of_device(&self, ifindex: u32) -> Option<String> {
            self.state.lock().unwrap().devices.get(&ifindex).cloned()
        }
        fn port(&self, vrf: Option<&str>, ifindex: u32) -> Option<PortId> {
            self.state.lock().unwrap().ports.get(&(vrf.map(String::from), ifindex)).copied()
        }
    }

    /// A connection's bytes: `chunk` at most a read, then "would block".
    struct Feed {
        data: Vec<u8>,
        at: usize,
    }

    impl Read for Feed {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.at == self.data.len() {
                return Err(ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn session(tables: Arc<Tables>) -> Session {
        let cfg = FrrConfig {
            fpm: FrrConfig::DEFAULT_FPM,
            hold: FrrConfig::DEFAULT_HOLD,
            stale: FrrConfig::DEFAULT_STALE,
            fpm_users: None,
            pw_channel: None,
        };
        // The loopback (index 1 in every namespace) as port 0.
        let vrfs = Arc::new(crate::vrf_lookup::DefaultVrfOnly::new(vec!["lo".into()]));
        Session::new(tables, cfg, vec![0], vrfs, Arc::new(FrrStatus::default()))
    }

    #[test]
    fn a_quiet_zebra_is_explained_once() {
        let tables = Arc::new(Tables::default());
        let loopback_stream = || {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            TcpStream::connect(l.local_addr().unwrap()).unwrap()
        };
        let mut s = session(tables.clone());
        s.silence_warn = Duration::ZERO;
        assert_eq!(s.warn_silence(), Some("no zebra has connected over FPM yet"));
        assert_eq!(s.warn_silence(), None, "said once");
        // Connected, routes but no label at all: zebra's MPLS is off.
        let mut s = session(tables.clone());
        s.silence_warn = Duration::ZERO;
        s.status.connections.fetch_add(1, Ordering::Relaxed);
        s.conn = Some(loopback_stream());
        s.rib.apply(Update::Add(prefix_route(
            MAIN_TABLE,
            "198.18.2.0/24",
            188,
            vec![nh("198.18.10.2", 1, &[])],
        )));
        assert_eq!(s.warn_silence(), Some("zebra sends routes but no label"));
        assert_eq!(s.warn_silence(), None, "said once");
        // With a label: nothing to say.
        let mut s = session(tables);
        s.silence_warn = Duration::ZERO;
        s.status.connections.fetch_add(1, Ordering::Relaxed);
        s.conn = Some(loopback_stream());
        s.rib.apply(Update::Add(lsp(16, 100)));
        assert_eq!(s.warn_silence(), None);
    }

    fn session_with(tables: Arc<dyn RouteSink>, vrfs: Arc<FakeVrfs>) -> Session {
        let cfg = FrrConfig {
            fpm: FrrConfig::DEFAULT_FPM,
            hold: FrrConfig::DEFAULT_HOLD,
            stale: FrrConfig::DEFAULT_STALE,
            fpm_users: None,
            pw_channel: None,
        };
        Session::new(tables, cfg, vec![0], vrfs, Arc::new(FrrStatus::default()))
    }

    fn lsp(label: u32, out: u32) -> Route {
        Route {
            key: RouteKey { table: MAIN_TABLE, dest: Dest::Label(label) },
            protocol: 193,
            kind: Kind::Unicast,
            nexthops: vec![nh("198.18.10.2", 1, &[out])],
        }
    }

    fn frames(messages: &[Vec<u8>]) -> Vec<u8> {
        messages.iter().flat_map(|m| fpm::frame(m)).collect()
    }

    #[test]
    fn a_refused_table_change_is_kept_and_tried_again_until_the_tables_are_zebras() {
        let tables = Arc::new(Tables { fail: AtomicUsize::new(1), ..Tables::default() });
        let mut s = session(tables.clone());
        s.rib.apply(Update::Add(lsp(16, 100)));
        s.rib.apply(Update::Add(lsp(17, 101)));
        s.flush();
        assert_eq!(s.status.apply_failures.load(Ordering::Relaxed), 1);
        assert!(tables.keys().is_empty());
        assert!(s.rib.has_changes(), "nothing is marked done before it is done");
        // zebra goes on meanwhile; nothing is tried before the retry is due.
        s.rib.apply(Update::Delete(lsp(17, 0).key));
        s.rib.apply(Update::Add(lsp(18, 102)));
        assert!(s.retry_at.is_some_and(|t| t > Instant::now()));
        s.retry_at = Some(Instant::now());
        s.flush();
        assert_eq!(tables.keys(), ["label 16", "label 18"]);
        assert!(!s.rib.has_changes());
        assert_eq!(s.status.batches.load(Ordering::Relaxed), 1);
        assert_eq!((s.retry_at, s.retry_delay), (None, RETRY_FIRST));
    }

    #[test]
    fn fpm_users_are_resolved_and_an_unknown_one_is_an_error() {
        let cfg = |users: Option<Vec<&str>>| FrrConfig {
            fpm: FrrConfig::DEFAULT_FPM,
            hold: FrrConfig::DEFAULT_HOLD,
            stale: FrrConfig::DEFAULT_STALE,
            fpm_users: users.map(|u| (u.into_iter().map(String::from).collect(), 7)),
            pw_channel: None,
        };
        let path = std::path::Path::new("r.toml");
        // Root always; the frr user by default when the system has one.
        let frr = vmpls_sys::cred::user_id("frr").unwrap();
        assert_eq!(
            allowed_users(&cfg(None), path).unwrap(),
            [Some(0), frr].into_iter().flatten().collect::<Vec<_>>()
        );
        assert_eq!(allowed_users(&cfg(Some(vec!["root"])), path).unwrap(), [0]);
        let e = allowed_users(&cfg(Some(vec!["root", "no-such-zebra-user"])), path).unwrap_err();
        assert!(
            format!("{e:#}").starts_with("r.toml:7: frr.fpm-users: there is no user \"no-such-zebra-user\""),
            "{e:#}"
        );
    }

    #[test]
    fn retries_back_off_up_to_a_bound() {
        let tables = Arc::new(Tables { fail: AtomicUsize::new(100), ..Tables::default() });
        let mut s = session(tables);
        s.rib.apply(Update::Add(lsp(16, 100)));
        let mut waits = vec![];
        for _ in 0..8 {
            waits.push(s.retry_delay.as_secs());
            s.flush();
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(s.status.apply_failures.load(Ordering::Relaxed), 8);
    }

    #[test]
    fn an_srv6_route_is_skipped_and_the_session_goes_on() {
        let tables = Arc::new(Tables::default());
        let mut s = session(tables.clone());
        let vpn = Route {
            key: RouteKey { table: MAIN_TABLE, dest: Dest::Prefix("198.18.7.0".parse().unwrap(), 24) },
            ..lsp(0, 0)
        };
        let srv6 = encode::srv6_message(&vpn, "2001:db8:100::1".parse().unwrap());
        let bytes = frames(&[
            encode::message(&lsp(16, 100), false),
            srv6.clone(),
            encode::message(&lsp(17, 101), false),
        ]);
        assert_eq!(s.read_from(&mut Feed { data: bytes, at: 0 }), Ok(()));
        s.flush();
        assert_eq!(tables.keys(), ["label 16", "label 17"]);
        let status = s.status.clone();
        let seg6 = &status.unsupported[Unsupported::Seg6.index()];
        assert_eq!(seg6.load(Ordering::Relaxed), 1);
        assert_eq!(s.status.decode_errors.load(Ordering::Relaxed), 0);
        // zebra replays it on every reconnection: skipped again, logged once.
        let bytes = frames(&[srv6, encode::message(&lsp(18, 102), false)]);
        assert_eq!(s.read_from(&mut Feed { data: bytes, at: 0 }), Ok(()));
        s.flush();
        assert_eq!(tables.keys(), ["label 16", "label 17", "label 18"]);
        assert_eq!(seg6.load(Ordering::Relaxed), 2);
        let counters = s.status.counters((0, 0));
        assert!(counters.iter().any(|c| c.name == "unsupported_seg6" && c.value == 2), "{counters:?}");
        // Broken framing still ends the connection.
        let mut bad = frames(&[encode::message(&lsp(19, 103), false)]);
        bad[4..8].copy_from_slice(&200u32.to_ne_bytes());
        assert!(s.read_from(&mut Feed { data: bad, at: 0 }).is_err());
        assert_eq!(s.status.decode_errors.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_fast_peer_is_read_in_bounded_steps() {
        let tables = Arc::new(Tables::default());
        let mut s = session(tables);
        let frame = fpm::frame(&encode::message(&lsp(16, 100), false));
        let count = 16 * 1024 * 1024 / frame.len();
        let mut feed = Feed { data: frame.repeat(count), at: 0 };
        let mut reads = 0;
        while feed.at < feed.data.len() {
            let before = feed.at;
            assert_eq!(s.read_from(&mut feed), Ok(()));
            assert!(feed.at - before <= READ_BUDGET + READ_CHUNK, "read {} bytes at once", feed.at - before);
            assert!(
                s.buf.len() < fpm::MAX_FRAME_LEN && s.buf.capacity() <= MAX_BUFFERED,
                "{}",
                s.buf.capacity()
            );
            reads += 1;
        }
        assert!(reads >= 4, "{reads}");
        assert_eq!(s.status.messages.load(Ordering::Relaxed), count as u64);
    }

    fn nh(gw: &str, ifindex: u32, labels: &[u32]) -> Nexthop {
        Nexthop {
            gateway: Some(gw.parse().unwrap()),
            ifindex: Some(ifindex),
            labels: labels.to_vec(),
            weight: 1,
        }
    }

    /// The router's namespace: ports 0 (`core`, ifindex 10) and 2 (ifindex 5); VRF red
    /// with table and interface 1000, its namespace holding port 1 (ifindex 5: indexes
    /// collide across namespaces); port 3 (ifindex 7) of the router's namespace, as a port
    /// enslaved to a VRF device would be.
    fn red() -> FakeVrfState {
        let mut st = FakeVrfState::default();
        st.tables.insert(1000, "red".into());
        st.devices.insert(1000, "red".into());
        st.ports.insert((None, 10), 0);
        st.ports.insert((Some("red".into()), 5), 1);
        st.ports.insert((None, 5), 2);
        st.ports.insert((None, 7), 3);
        st
    }

    fn red_session(tables: Arc<dyn RouteSink>) -> (Session, Arc<FakeVrfs>) {
        let vrfs = Arc::new(FakeVrfs::default());
        vrfs.set(|st| *st = red());
        (session_with(tables, vrfs.clone()), vrfs)
    }

    fn prefix_route(table: u32, dst: &str, protocol: u8, nexthops: Vec<Nexthop>) -> Route {
        let (a, len) = dst.split_once('/').unwrap();
        Route {
            key: RouteKey { table, dest: Dest::Prefix(a.parse().unwrap(), len.parse().unwrap()) },
            protocol,
            kind: Kind::Unicast,
            nexthops,
        }
    }

    /// A next hop out of an interface, no gateway (a pop, or a connected destination).
    fn dev(ifindex: u32) -> Nexthop {
        Nexthop { gateway: None, ifindex: Some(ifindex), labels: vec![], weight: 1 }
    }

    fn vpn_label(label: u32, ifindex: u32) -> Route {
        Route {
            key: RouteKey { table: MAIN_TABLE, dest: Dest::Label(label) },
            protocol: 186,
            kind: Kind::Unicast,
            nexthops: vec![dev(ifindex)],
        }
    }

    /// Reads `routes` (`true`: deleted) as zebra's encoded messages, and flushes.
    fn send(s: &mut Session, routes: &[(&Route, bool)]) {
        let messages: Vec<_> = routes.iter().map(|(r, delete)| encode::message(r, *delete)).collect();
        assert_eq!(s.read_from(&mut Feed { data: frames(&messages), at: 0 }), Ok(()));
        s.follow_vrfs();
        if s.rib.has_changes() {
            s.flush();
        }
    }

    fn counter(s: &Session, name: &str) -> u64 {
        s.status.counters((0, 0)).into_iter().find(|c| c.name == name).map(|c| c.value).unwrap()
    }

    #[test]
    fn routes_of_a_vrf_table_go_into_that_vrf_and_of_an_unknown_table_wait_for_it() {
        let tables = Arc::new(Tables::default());
        let (mut s, vrfs) = red_session(tables.clone());
        let ce = prefix_route(1000, "198.18.7.0/24", 186, vec![nh("198.18.5.2", 5, &[])]);
        let blue = prefix_route(2000, "198.18.7.0/24", 186, vec![nh("198.18.5.2", 5, &[])]);
        let core = prefix_route(MAIN_TABLE, "198.18.7.0/24", 188, vec![nh("198.18.10.2", 10, &[])]);
        send(&mut s, &[(&ce, false), (&blue, false), (&core, false)]);
        assert_eq!(tables.keys(), ["default 198.18.7.0/24", "red 198.18.7.0/24"]);
        assert_eq!(counter(&s, "unknown_table"), 1);
        // Once counted per route, logged once per table.
        send(&mut s, &[(&prefix_route(2000, "198.18.8.0/24", 186, vec![dev(5)]), false)]);
        assert_eq!(counter(&s, "unknown_table"), 2);
        assert_eq!(s.logged_tables, HashSet::from([2000]));
        assert_eq!(counter(&s, "unusable"), 0, "an unknown table is not a route without next hop");

        // Table 2000 becomes VRF blue's (with a port in its namespace): zebra sends
        // nothing again, and its routes are installed.
        vrfs.set(|st| {
            st.tables.insert(2000, "blue".into());
            st.ports.insert((Some("blue".into()), 5), 4);
        });
        send(&mut s, &[]);
        assert_eq!(
            tables.keys(),
            ["blue 198.18.7.0/24", "blue 198.18.8.0/24", "default 198.18.7.0/24", "red 198.18.7.0/24"]
        );
        let Some(FrrChange::Route { route: Some((RouteAction::Forward(nhs), Protocol::Bgp)), .. }) =
            tables.get("blue 198.18.7.0/24")
        else {
            panic!("{:?}", tables.get("blue 198.18.7.0/24"))
        };
        assert_eq!(nhs[0].port, 4, "blue's own port, not red's or the router's of the same index");

        // red goes: its routes leave the tables, zebra's stay here; it comes back: back.
        vrfs.set(|st| {
            st.tables.remove(&1000);
            st.devices.remove(&1000);
        });
        send(&mut s, &[]);
        assert_eq!(tables.keys(), ["blue 198.18.7.0/24", "blue 198.18.8.0/24", "default 198.18.7.0/24"]);
        assert_eq!(s.rib.len(), 4);
        vrfs.set(|st| *st = red());
        send(&mut s, &[]);
        assert_eq!(tables.keys(), ["default 198.18.7.0/24", "red 198.18.7.0/24"], "blue went, red came back");
        // zebra deletes the route of a table no VRF has: nothing to count.
        let before = counter(&s, "unknown_table");
        send(&mut s, &[(&blue, true)]);
        assert_eq!(counter(&s, "unknown_table"), before);
        assert_eq!(s.rib.len(), 3);
    }

    #[test]
    fn a_vrf_whose_table_changes_keeps_the_route_zebra_sent_last() {
        let tables = Arc::new(Tables::default());
        let (mut s, vrfs) = red_session(tables.clone());
        let old = prefix_route(1000, "198.18.7.0/24", 186, vec![nh("198.18.5.2", 5, &[])]);
        send(&mut s, &[(&old, false)]);
        // zebra restarted and red's interface is 1001 now; the old table's routes go at
        // the same time as the new ones come.
        vrfs.set(|st| {
            st.tables = HashMap::from([(1001, "red".into())]);
            st.devices = HashMap::from([(1001, "red".into())]);
        });
        let new = prefix_route(1001, "198.18.7.0/24", 186, vec![nh("198.18.5.3", 5, &[])]);
        send(&mut s, &[(&new, false)]);
        let Some(FrrChange::Route { route: Some((RouteAction::Forward(nhs), _)), .. }) =
            tables.get("red 198.18.7.0/24")
        else {
            panic!("{:?}", tables.keys())
        };
        assert_eq!(nhs[0].via, Some("198.18.5.3".parse().unwrap()));
        assert_eq!(s.installed_vrf.len(), 1);
    }

    #[test]
    fn a_vpn_label_pops_into_its_vrf_and_one_whose_vrf_is_gone_is_not_installed() {
        let tables = Arc::new(Tables::default());
        let (mut s, vrfs) = red_session(tables.clone());
        let pop = |vrf: &str| Some((LabelConfigAction::PopAndLookup { vrf: vrf.into() }, Protocol::Bgp));
        let (red_label, default_label, other) = (vpn_label(80, 1000), vpn_label(81, 1), vpn_label(82, 3000));
        let ldp = Route { nexthops: vec![nh("198.18.10.2", 10, &[100])], ..lsp(16, 100) };
        send(&mut s, &[(&red_label, false), (&default_label, false), (&other, false), (&ldp, false)]);
        assert_eq!(tables.keys(), ["label 16", "label 80", "label 81"]);
        assert_eq!(tables.get("label 80"), Some(FrrChange::Label { label: 80, route: pop("red") }));
        assert_eq!(tables.get("label 81"), Some(FrrChange::Label { label: 81, route: pop("default") }));
        assert_eq!(counter(&s, "unknown_vrf_interface"), 1);
        assert_eq!(s.logged_interfaces, HashSet::from([(None, 3000)]));
        // red goes: its label goes with it (never popped into another VRF); the LSP stays.
        vrfs.set(|st| {
            st.devices.clear();
            st.tables.clear();
        });
        send(&mut s, &[]);
        assert_eq!(tables.keys(), ["label 16", "label 81"]);
        assert_eq!(counter(&s, "unknown_vrf_interface"), 3, "80 and 82 again");
        // Interface 3000 becomes VRF blue's, red comes back.
        vrfs.set(|st| {
            *st = red();
            st.devices.insert(3000, "blue".into());
        });
        send(&mut s, &[]);
        assert_eq!(tables.keys(), ["label 16", "label 80", "label 81", "label 82"]);
        assert_eq!(tables.get("label 82"), Some(FrrChange::Label { label: 82, route: pop("blue") }));
        // zebra moves the label elsewhere: a plain removal.
        send(&mut s, &[(&red_label, true)]);
        assert_eq!(tables.keys(), ["label 16", "label 81", "label 82"]);
    }

    #[test]
    fn next_hops_of_vrf_routes_are_found_in_the_vrf_or_the_core() {
        let tables = Arc::new(Tables::default());
        let (mut s, _vrfs) = red_session(tables.clone());
        let nexthops = |key: &str| match tables.get(key) {
            Some(FrrChange::Route { route: Some((RouteAction::Forward(nhs), _)), .. }) => {
                nhs.iter().map(|n| (n.port, n.labels.clone())).collect::<Vec<_>>()
            }
            other => panic!("{key}: {other:?}"),
        };
        let routes = [
            // A remote PE's VPN route: transport label over the VPN label, into the
            // core out of ifindex 5 of the router's namespace (port 2), not red's 5.
            prefix_route(1000, "198.18.2.0/24", 186, vec![nh("198.18.10.2", 5, &[16, 80])]),
            // A CE's route: ifindex 5 in red's namespace (port 1).
            prefix_route(1000, "198.18.3.0/24", 186, vec![nh("198.18.5.2", 5, &[])]),
            // Unlabelled out of ifindex 7: no port of red's namespace; the router's.
            prefix_route(1000, "198.18.4.0/24", 196, vec![nh("198.18.6.2", 7, &[])]),
            // ECMP with one next hop out of no port at all.
            prefix_route(
                1000,
                "198.18.5.0/24",
                186,
                vec![nh("198.18.5.2", 5, &[]), nh("198.18.9.2", 9, &[])],
            ),
            // Only out of no port: not installed.
            prefix_route(1000, "198.18.6.0/24", 186, vec![nh("198.18.9.2", 9, &[])]),
            // The default VRF: ifindex 5 is the router's.
            prefix_route(MAIN_TABLE, "198.18.3.0/24", 188, vec![nh("198.18.11.2", 5, &[])]),
        ];
        send(&mut s, &routes.iter().map(|r| (r, false)).collect::<Vec<_>>());
        assert_eq!(nexthops("red 198.18.2.0/24"), [(2, vec![16, 80])]);
        assert_eq!(nexthops("red 198.18.3.0/24"), [(1, vec![])]);
        assert_eq!(nexthops("red 198.18.4.0/24"), [(3, vec![])]);
        assert_eq!(nexthops("red 198.18.5.0/24"), [(1, vec![])]);
        assert_eq!(nexthops("default 198.18.3.0/24"), [(2, vec![])]);
        assert!(tables.get("red 198.18.6.0/24").is_none());
        assert_eq!(counter(&s, "unusable"), 1);
        assert_eq!(s.logged_interfaces, HashSet::from([(Some("red".into()), 9)]));
    }

    #[test]
    fn next_hops_off_the_ports_are_left_out() {
        let vrfs = FakeVrfs::default();
        vrfs.set(|st| st.ports = HashMap::from([((None, 5), 0), ((None, 7), 1)]));
        let mut t = Translator::new(&vrfs);
        let prefix: IpAddr = "198.18.2.0".parse().unwrap();
        let r = prefix_route(
            MAIN_TABLE,
            "198.18.2.0/24",
            193,
            vec![nh("198.18.10.2", 5, &[16]), nh("198.18.11.2", 9, &[17])],
        );
        let FrrChange::Route { route: Some((RouteAction::Forward(nhs), proto)), .. } =
            t.route(DEFAULT_VRF_NAME, false, prefix, 24, Some(&r))
        else {
            panic!()
        };
        assert_eq!(proto, Protocol::Ldp);
        assert_eq!(nhs.len(), 1);
        assert_eq!((nhs[0].port, nhs[0].labels.as_slice()), (0, &[16][..]));
        // None left: removed.
        let r = Route { nexthops: vec![nh("198.18.11.2", 9, &[17])], ..r };
        assert_eq!(
            t.route(DEFAULT_VRF_NAME, false, prefix, 24, Some(&r)),
            FrrChange::Route { vrf: "default".into(), prefix, len: 24, route: None }
        );
        assert_eq!(t.unusable, 1);
        assert!(t.off_ports.is_empty(), "the default VRF's next hops off the ports are not VRF routes'");
    }

    /// pe2 of the VPN lab: red and blue use the same subnet on interfaces of the same
    /// index in their namespaces, common imports both customers' routes and they import
    /// common's; zebra names a leaked next hop's interface by its index alone.
    #[test]
    fn next_hops_leaked_from_another_vrf_take_the_port_of_the_vrf_they_come_from() {
        let vrfs = FakeVrfs::default();
        vrfs.set(|st| {
            st.tables = HashMap::from([(1000, "common".into()), (1001, "blue".into()), (1002, "red".into())]);
            st.ports = HashMap::from([
                ((Some("common".into()), 5), 1),
                ((Some("blue".into()), 3), 2),
                ((Some("red".into()), 3), 3),
            ]);
        });
        let ce = |table, dst: &str| prefix_route(table, dst, 186, vec![nh("198.18.2.2", 3, &[])]);
        let mut rib = Rib::new();
        for r in [
            prefix_route(1000, "198.18.3.0/24", RTPROT_KERNEL, vec![dev(5)]),
            prefix_route(1001, "198.18.2.0/24", RTPROT_KERNEL, vec![dev(3)]),
            prefix_route(1002, "198.18.2.0/24", RTPROT_KERNEL, vec![dev(3)]),
            ce(1002, "198.18.203.1/32"),
            ce(1001, "198.18.204.1/32"),
            // The copies the imports made.
            prefix_route(1001, "198.18.3.0/24", 186, vec![dev(5)]),
            prefix_route(1002, "198.18.3.0/24", 186, vec![dev(5)]),
            ce(1000, "198.18.203.1/32"),
            ce(1000, "198.18.204.1/32"),
        ] {
            rib.apply(Update::Add(r));
        }
        let mut t = Translator::new(&vrfs).with_rib(&rib);
        let port_of = |t: &mut Translator<'_>, vrf: &str, key: RouteKey| {
            let r = rib.get(&key).unwrap();
            let nhs = t.nexthops(Some(vrf), r);
            nhs.iter().map(|n| (n.port, n.via)).collect::<Vec<_>>()
        };
        let key = |table, dst: &str| prefix_route(table, dst, 0, vec![]).key;
        let gw = Some("198.18.2.2".parse().unwrap());
        // common's loopback routes: red's from red's port, blue's from blue's, although
        // the index and the gateway are the same.
        assert_eq!(port_of(&mut t, "common", key(1000, "198.18.203.1/32")), [(3, gw)]);
        assert_eq!(port_of(&mut t, "common", key(1000, "198.18.204.1/32")), [(2, gw)]);
        // The customers' copies of common's subnet: common's port, not the other
        // customer's copy of it.
        assert_eq!(port_of(&mut t, "red", key(1002, "198.18.3.0/24")), [(1, None)]);
        assert_eq!(port_of(&mut t, "blue", key(1001, "198.18.3.0/24")), [(1, None)]);
        // Both customers' 198.18.2.0/24 imported into common: one next hop each.
        let both = prefix_route(1000, "198.18.2.0/24", 186, vec![dev(3), dev(3)]);
        let nhs = t.nexthops(Some("common"), &both);
        assert_eq!(nhs.iter().map(|n| n.port).collect::<Vec<_>>(), [2, 3], "blue's (table 1001), then red's");
        assert!(t.off_ports.is_empty(), "{:?}", t.off_ports);
        // A copy whose source is gone (or never was) is placed nowhere.
        let orphan = prefix_route(1000, "198.18.205.1/32", 186, vec![nh("198.18.2.2", 3, &[])]);
        assert!(t.nexthops(Some("common"), &orphan).is_empty());
        assert_eq!(t.off_ports, BTreeSet::from([("common".to_string(), 3)]));
    }

    #[test]
    fn a_leaked_route_sent_before_the_route_it_was_copied_from_is_placed_when_that_comes() {
        let vrfs = Arc::new(FakeVrfs::default());
        vrfs.set(|st| {
            st.tables = HashMap::from([(1000, "common".into()), (1002, "red".into())]);
            st.ports = HashMap::from([((Some("common".into()), 5), 1), ((Some("red".into()), 3), 3)]);
        });
        let tables = Arc::new(Tables::default());
        let mut s = session_with(tables.clone(), vrfs);
        let ce = |table, dst: &str| prefix_route(table, dst, 186, vec![nh("198.18.2.2", 3, &[])]);
        // common's copy of red's CE route first: out of index 3, which is no port of
        // common's, and red's table does not hold the route yet.
        s.rib.apply(Update::Add(ce(1000, "198.18.203.1/32")));
        s.flush();
        assert!(!tables.keys().contains(&"common 198.18.203.1/32".to_string()), "{:?}", tables.keys());
        // red's connected subnet and its own route come: the copy is taken again.
        s.rib.apply(Update::Add(prefix_route(1002, "198.18.2.0/24", RTPROT_KERNEL, vec![dev(3)])));
        s.rib.apply(Update::Add(ce(1002, "198.18.203.1/32")));
        s.flush();
        let leaked = format!("{:?}", tables.get("common 198.18.203.1/32"));
        assert!(leaked.contains("port: 3"), "{leaked}");
        assert!(s.unplaced.is_empty());
    }

    #[test]
    fn a_label_out_of_the_loopback_is_popped_here() {
        let vrfs = FakeVrfs::default();
        let mut t = Translator::new(&vrfs);
        assert_eq!(
            t.label(80, Some(&vpn_label(80, LOOPBACK_IFINDEX))),
            FrrChange::Label {
                label: 80,
                route: Some((LabelConfigAction::PopAndLookup { vrf: "default".into() }, Protocol::Bgp))
            }
        );
    }

    /// The router's real tables behind the FPM session.
    struct RealTables(Mutex<vmpls_control::tables::Tables>);

    impl RouteSink for RealTables {
        fn apply_frr(&self, changes: Vec<FrrChange>) -> Result<Vec<String>, String> {
            let applied = self.0.lock().unwrap().apply_frr(changes).map_err(|e| e.message())?;
            Ok(applied.refused)
        }
    }

    impl RealTables {
        /// A PE: core port 0, port 1 facing a CE in VRF red.
        fn pe() -> Arc<RealTables> {
            RealTables::with_subnets("198.18.10.1/24", "198.18.1.1/24")
        }

        /// A PE whose core and CE-facing ports have these addresses.
        fn with_subnets(core: &str, ce: &str) -> Arc<RealTables> {
            let text = format!(
                r#"
[router]
name = "pe1"
addresses = ["198.18.255.1"]

[[vrf]]
name = "red"

[[port]]
name = "core"
interface = "pe1-p"
addresses = ["{core}"]

[[port]]
name = "ce1"
interface = "pe1-ce1"
vrf = "red"
addresses = ["{ce}"]
"#
            );
            let cfg = vmpls_control::Config::from_str(&text, std::path::Path::new("pe1.toml")).unwrap();
            Arc::new(RealTables(Mutex::new(vmpls_control::tables::Tables::new(cfg))))
        }

        /// `vmpls route show [vrf VRF]` / `vmpls -f mpls route show`, as text.
        fn shown(&self, family: vmpls_control::api::Family, vrf: Option<&str>) -> Vec<String> {
            use vmpls_control::api::{Family, IpRoute, MplsRoute};
            let json = self.0.lock().unwrap().show(family, vrf).unwrap();
            if family == Family::Mpls {
                let l: Vec<MplsRoute> = serde_json::from_value(json).unwrap();
                return l.iter().map(ToString::to_string).collect();
            }
            let l: Vec<IpRoute> = serde_json::from_value(json).unwrap();
            l.iter().map(ToString::to_string).collect()
        }
    }

    /// zebra's burst on a PE: LDP's LSPs and an OSPF route of the default VRF, the
    /// connected subnets, and VRF red's (table 1000) CE route, VPN route and VPN label.
    /// The kernel's interfaces: core 10 (router's namespace), pe1-ce1 2 (red's).
    fn pe_burst() -> Vec<Route> {
        let key = |table, dest| RouteKey { table, dest };
        let label = |l, nexthops, protocol| Route {
            key: key(MAIN_TABLE, Dest::Label(l)),
            protocol,
            kind: Kind::Unicast,
            nexthops,
        };
        vec![
            label(16, vec![nh("198.18.10.2", 10, &[])], 193),
            label(17, vec![nh("198.18.10.2", 10, &[20])], 193),
            prefix_route(MAIN_TABLE, "198.18.255.3/32", 188, vec![nh("198.18.10.2", 10, &[20])]),
            prefix_route(MAIN_TABLE, "198.18.10.0/24", RTPROT_KERNEL, vec![dev(10)]),
            prefix_route(1000, "198.18.1.0/24", RTPROT_KERNEL, vec![dev(2)]),
            prefix_route(1000, "198.18.101.0/24", 186, vec![nh("198.18.1.2", 2, &[])]),
            prefix_route(1000, "198.18.2.0/24", 186, vec![nh("198.18.10.2", 10, &[20, 80])]),
            label(80, vec![dev(1000)], 186),
        ]
    }

    fn pe_vrfs(st: &mut FakeVrfState) {
        st.tables.insert(1000, "red".into());
        st.devices.insert(1000, "red".into());
        st.ports.insert((None, 10), 0);
        st.ports.insert((Some("red".into()), 2), 1);
    }

    #[test]
    fn a_pes_burst_fills_the_default_vrf_and_red_and_follows_red_coming_and_going() {
        use vmpls_control::api::Family;
        let default_routes = [
            "198.18.10.0/24 dev core proto kernel scope link src 198.18.10.1",
            "198.18.255.3/32 encap mpls 20 via 198.18.10.2 dev core proto ospf",
        ];
        let red_connected = "198.18.1.0/24 dev ce1 proto kernel scope link src 198.18.1.1";
        let red_routes = [
            red_connected,
            "198.18.2.0/24 encap mpls 20/80 via 198.18.10.2 dev core proto bgp",
            "198.18.101.0/24 via 198.18.1.2 dev ce1 proto bgp",
        ];
        let lsps = [
            "16 via inet 198.18.10.2 dev core proto ldp",
            "17 as to 20 via inet 198.18.10.2 dev core proto ldp",
        ];
        let with_vpn_label = [lsps[0], lsps[1], "80 vrf red proto bgp"];
        let burst = pe_burst();
        let burst: Vec<_> = burst.iter().map(|r| (r, false)).collect();

        // red known before zebra's routes come.
        let tables = RealTables::pe();
        let vrfs = Arc::new(FakeVrfs::default());
        vrfs.set(pe_vrfs);
        let mut s = session_with(tables.clone(), vrfs);
        send(&mut s, &burst);
        assert_eq!(tables.shown(Family::Inet, None), default_routes);
        assert_eq!(tables.shown(Family::Inet, Some("red")), red_routes);
        assert_eq!(tables.shown(Family::Mpls, None), with_vpn_label);
        assert_eq!(
            tables.0.lock().unwrap().get("198.18.2.9".parse().unwrap(), Some("red")).unwrap().dst,
            "198.18.2.0/24"
        );
        for c in ["unknown_table", "unknown_vrf_interface", "unusable"] {
            assert_eq!(counter(&s, c), 0, "{c}");
        }

        // red found only after zebra's routes: skipped, counted, then installed without
        // zebra sending them again.
        let tables = RealTables::pe();
        let vrfs = Arc::new(FakeVrfs::default());
        vrfs.set(|st| {
            st.ports.insert((None, 10), 0);
        });
        let mut s = session_with(tables.clone(), vrfs.clone());
        send(&mut s, &burst);
        assert_eq!(tables.shown(Family::Inet, None), default_routes);
        assert_eq!(tables.shown(Family::Inet, Some("red")), [red_connected]);
        assert_eq!(tables.shown(Family::Mpls, None), lsps);
        assert_eq!((counter(&s, "unknown_table"), counter(&s, "unknown_vrf_interface")), (2, 1));
        vrfs.set(pe_vrfs);
        send(&mut s, &[]);
        assert_eq!(tables.shown(Family::Inet, None), default_routes);
        assert_eq!(tables.shown(Family::Inet, Some("red")), red_routes);
        assert_eq!(tables.shown(Family::Mpls, None), with_vpn_label);

        // red goes: its routes and its VPN label go, the default VRF's stay as they were.
        vrfs.set(|st| {
            st.tables.clear();
            st.devices.clear();
            st.ports.retain(|(vrf, _), _| vrf.is_none());
        });
        send(&mut s, &[]);
        assert_eq!(tables.shown(Family::Inet, None), default_routes);
        assert_eq!(tables.shown(Family::Inet, Some("red")), [red_connected]);
        assert_eq!(tables.shown(Family::Mpls, None), lsps);
        assert_eq!(s.rib.len(), burst.len(), "zebra's routes are all kept");
        assert_eq!(tables.0.lock().unwrap().frr_counts(), (1, 2));
    }

    /// The `fpm` fuzz target's corpus (zebra's captured streams, VRF routes among them)
    /// through the session into the real tables, with red going and coming back after
    /// each: whatever the stream held, red's routes leave with it and the default VRF's
    /// stay as they were.
    #[test]
    fn the_fpm_corpus_goes_through_the_session_and_red_comes_and_goes() {
        use vmpls_control::api::Family;
        let dir = format!("{}/../../fuzz/corpus/fpm", env!("CARGO_MANIFEST_DIR"));
        let (mut seeds, mut with_vpn) = (0, 0);
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let tables = RealTables::pe();
            let vrfs = Arc::new(FakeVrfs::default());
            vrfs.set(pe_vrfs);
            let mut s = session_with(tables.clone(), vrfs.clone());
            let _ = s.read_from(&mut Feed { data: std::fs::read(&path).unwrap(), at: 0 });
            send(&mut s, &[]);
            let shown = |f, vrf| (tables.shown(f, vrf), tables.shown(Family::Inet6, vrf));
            let (default, with_red) = (shown(Family::Inet, None), shown(Family::Inet, Some("red")));
            let labels = tables.shown(Family::Mpls, None);
            if with_red.0.iter().chain(&with_red.1).any(|l| l.contains("proto bgp")) {
                with_vpn += 1;
            }
            vrfs.set(|st| {
                st.tables.clear();
                st.devices.clear();
            });
            send(&mut s, &[]);
            assert_eq!(shown(Family::Inet, None), default, "{}", path.display());
            let red = tables.shown(Family::Inet, Some("red"));
            assert!(red.iter().all(|l| l.contains("proto kernel")), "{}: {red:?}", path.display());
            let pops = tables.shown(Family::Mpls, None);
            assert!(pops.iter().all(|l| !l.contains("vrf red")), "{}: {pops:?}", path.display());
            vrfs.set(pe_vrfs);
            send(&mut s, &[]);
            assert_eq!(shown(Family::Inet, Some("red")), with_red, "{}", path.display());
            assert_eq!(tables.shown(Family::Mpls, None), labels, "{}", path.display());
            seeds += 1;
        }
        assert!(seeds >= 7, "{seeds} seeds in {dir}");
        assert!(with_vpn >= 1, "no seed fills VRF red");
    }

    /// What Debian's zebra 8.4 with the zebra module sent one PE of an L3VPN over
    /// labelled static routes (captured, `seed-vpn-pe1`; its `.txt` is in the zebra
    /// module's fixtures): the VPN label 16 popping to red's interface 1000, red's
    /// connected subnet and the remote PE's VPN route in table 1000, then red deleted.
    /// The kernel's interfaces: the core link 2, the CE link 3 in red's namespace.
    #[test]
    fn zebras_captured_vpn_routes_go_into_red_and_leave_with_it() {
        use vmpls_control::api::Family;
        let dir = format!("{}/../../fuzz/corpus/fpm", env!("CARGO_MANIFEST_DIR"));
        let bytes = std::fs::read(format!("{dir}/seed-vpn-pe1")).unwrap();
        let mut frames = Vec::new();
        let mut rest = bytes.as_slice();
        while let Some(frame) = fpm::parse_frame(rest).unwrap() {
            frames.push(rest[..frame.len].to_vec());
            rest = &rest[frame.len..];
        }
        assert_eq!(frames.len(), 12);
        let tables = RealTables::with_subnets("198.18.12.1/24", "198.18.101.1/24");
        let vrfs = Arc::new(FakeVrfs::default());
        vrfs.set(|st| {
            st.tables.insert(1000, "red".into());
            st.devices.insert(1000, "red".into());
            st.ports.insert((None, 2), 0);
            st.ports.insert((Some("red".into()), 3), 1);
        });
        let mut s = session_with(tables.clone(), vrfs);
        let feed = |s: &mut Session, frames: &[Vec<u8>]| {
            assert_eq!(s.read_from(&mut Feed { data: frames.concat(), at: 0 }), Ok(()));
            send(s, &[]);
        };
        feed(&mut s, &frames[..8]);
        let red_connected = "198.18.101.0/24 dev ce1 proto kernel scope link src 198.18.101.1";
        assert_eq!(
            tables.shown(Family::Inet, Some("red")),
            [red_connected, "198.18.102.0/24 encap mpls 100/5002 via 198.18.12.2 dev core proto bgp"]
        );
        assert_eq!(tables.shown(Family::Mpls, None), ["16 vrf red proto bgp"]);
        assert_eq!(
            tables.shown(Family::Inet, None),
            [
                "198.18.12.0/24 dev core proto kernel scope link src 198.18.12.1",
                "198.18.255.2/32 encap mpls 100 via 198.18.12.2 dev core proto static"
            ]
        );
        for c in ["unknown_table", "unknown_vrf_interface", "unusable"] {
            assert_eq!(counter(&s, c), 0, "{c}");
        }
        feed(&mut s, &frames[8..]);
        assert_eq!(tables.shown(Family::Inet, Some("red")), [red_connected]);
        assert!(tables.shown(Family::Mpls, None).is_empty());
    }

    /// 6VPE as zebra 8.4 sent it (`frr/fixtures/vpn6-pe1.fpm`): red's IPv6 route to pe2's
    /// CE subnet has the core interface 2 and the labels [100, 5002] but no gateway;
    /// zebra resolved BGP's `::ffff:198.18.255.2` over the labelled static route to
    /// 198.18.255.2 (via 198.18.12.2, label 100), so that is the gateway. Two neighbours
    /// that could be it: none is picked.
    #[test]
    fn an_ipv6_vpn_route_over_the_ipv4_core_gets_the_gateway_of_its_transport() {
        use vmpls_control::api::Family;
        let path = format!("{}/../../frr/fixtures/vpn6-pe1.fpm", env!("CARGO_MANIFEST_DIR"));
        let bytes = std::fs::read(&path).unwrap();
        let mut frames = Vec::new();
        let mut rest = bytes.as_slice();
        while let Some(frame) = fpm::parse_frame(rest).unwrap() {
            frames.push(rest[..frame.len].to_vec());
            rest = &rest[frame.len..];
        }
        assert_eq!(frames.len(), 12);
        let tables = RealTables::with_subnets("198.18.12.1/24", "198.18.101.1/24");
        let vrfs = Arc::new(FakeVrfs::default());
        vrfs.set(|st| {
            st.tables.insert(1000, "red".into());
            st.devices.insert(1000, "red".into());
            st.ports.insert((None, 2), 0);
            st.ports.insert((Some("red".into()), 3), 1);
        });
        let mut s = session_with(tables.clone(), vrfs);
        let feed = |s: &mut Session, frames: &[Vec<u8>]| {
            assert_eq!(s.read_from(&mut Feed { data: frames.concat(), at: 0 }), Ok(()));
            send(s, &[]);
        };
        feed(&mut s, &frames[..11]);
        assert_eq!(
            tables.shown(Family::Inet6, Some("red")),
            ["2001:db8:2::/64 encap mpls 100/5002 via 198.18.12.2 dev core proto bgp"]
        );
        assert_eq!(tables.shown(Family::Mpls, None), ["16 vrf red proto bgp", "17 vrf red proto bgp"]);
        assert_eq!(counter(&s, "unusable"), 0);
        // A second neighbour on the core link with the same transport label: which one
        // zebra resolved over is not in the message, so the route is left with none.
        let other = prefix_route(MAIN_TABLE, "198.18.255.3/32", 196, vec![nh("198.18.12.3", 2, &[100])]);
        send(&mut s, &[(&other, false)]);
        let shown = tables.shown(Family::Inet6, Some("red"));
        assert!(shown.iter().all(|r| !r.contains("via")), "{shown:?}");
        send(&mut s, &[(&other, true)]);
        assert_eq!(
            tables.shown(Family::Inet6, Some("red")),
            ["2001:db8:2::/64 encap mpls 100/5002 via 198.18.12.2 dev core proto bgp"]
        );
        feed(&mut s, &frames[11..12]);
        assert!(tables.shown(Family::Inet6, Some("red")).is_empty());
    }
}
