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

use std::collections::HashMap;
use std::io::{ErrorKind, Read};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tracing::{error, info, warn};
use vmpls_control::api::Protocol;
use vmpls_control::tables::FrrChange;
use vmpls_control::{FrrConfig, LabelConfigAction, NexthopConfig, RouteAction};
use vmpls_fib::{DEFAULT_VRF_NAME, PortId};
use vmpls_frr::route::MAIN_TABLE;
use vmpls_frr::{Dest, Kind, Rib, Route, RouteKey, Unsupported, Update, fpm};
use vmpls_sys::event::PollSet;

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
/// The first wait before a failed table change is tried again; it doubles up to
/// [`RETRY_MAX`] while the tables keep refusing.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How often a refused peer (per user) is logged at most.
const REFUSED_LOG_EVERY: Duration = Duration::from_secs(60);

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
    /// Routes not installed: no next hop on a port, another table, or refused by the
    /// tables.
    pub unusable: AtomicU64,
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
/// `allowed` users only ([`allowed_users`]).
///
/// # Errors
/// The thread cannot be started.
pub fn spawn(
    server: Arc<dyn RouteSink>,
    cfg: FrrConfig,
    listener: TcpListener,
    allowed: Vec<u32>,
    interfaces: Vec<String>,
) -> anyhow::Result<Arc<FrrStatus>> {
    let status = Arc::new(FrrStatus::default());
    let st = status.clone();
    info!(address = %cfg.fpm, hold_s = cfg.hold.as_secs(), stale_s = cfg.stale.as_secs(), users = ?allowed, "waiting for zebra's FPM connection");
    std::thread::Builder::new().name("fpm".into()).spawn(move || {
        Session::new(server, cfg, allowed, interfaces, st).run(&listener);
    })?;
    Ok(status)
}

struct Session {
    server: Arc<dyn RouteSink>,
    cfg: FrrConfig,
    /// Users whose sockets are served.
    allowed: Vec<u32>,
    interfaces: Vec<String>,
    status: Arc<FrrStatus>,
    rib: Rib,
    conn: Option<TcpStream>,
    buf: Vec<u8>,
    last_message: Instant,
    connected_at: Instant,
    lost_at: Option<Instant>,
    warned_tables: bool,
    /// Kinds of unsupported messages logged already (once each).
    unsupported_logged: [bool; Unsupported::ALL.len()],
    /// When each refused user (`None`: owner unknown) was last logged.
    refused_logged: HashMap<Option<u32>, Instant>,
    /// A failed table change is tried again then.
    retry_at: Option<Instant>,
    retry_delay: Duration,
}

impl Session {
    fn new(
        server: Arc<dyn RouteSink>,
        cfg: FrrConfig,
        allowed: Vec<u32>,
        interfaces: Vec<String>,
        status: Arc<FrrStatus>,
    ) -> Session {
        Session {
            server,
            cfg,
            allowed,
            interfaces,
            status,
            rib: Rib::new(),
            conn: None,
            buf: Vec::with_capacity(MAX_BUFFERED),
            last_message: Instant::now(),
            connected_at: Instant::now(),
            lost_at: None,
            warned_tables: false,
            unsupported_logged: [false; Unsupported::ALL.len()],
            refused_logged: HashMap::new(),
            retry_at: None,
            retry_delay: RETRY_FIRST,
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

    /// Whether the socket at `peer` belongs to an allowed user; if not, its user (when
    /// known) and why.
    fn owner_allowed(
        &self,
        local: std::net::SocketAddr,
        peer: std::net::SocketAddr,
    ) -> Result<(), (Option<u32>, String)> {
        match vmpls_sys::cred::tcp_peer_owner(local, peer) {
            Ok(Some(o)) if o.held && self.allowed.contains(&o.uid) => Ok(()),
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

    fn timers(&mut self) {
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

    /// Turns the RIB's pending changes into one table change; they stay pending until the
    /// tables take them, and a refusal is tried again later ([`RETRY_FIRST`], doubling).
    fn flush(&mut self) {
        let ports = port_ifindexes(&self.interfaces);
        let mut unusable = 0;
        let changes: Vec<FrrChange> = self
            .rib
            .pending_changes()
            .into_iter()
            .filter_map(|(key, route)| {
                if key.table != MAIN_TABLE {
                    if !self.warned_tables {
                        self.warned_tables = true;
                        warn!(table = key.table, "zebra sends routes of another table (a VRF); vmpls forwards the default VRF's (table 254) only, for now");
                    }
                    unusable += 1;
                    return None;
                }
                // Connected routes (the kernel's, protocol 2) come from the kernel's
                // addresses, which vmpls reads itself.
                let route = route.filter(|r| r.protocol != RTPROT_KERNEL);
                let change = to_change(key, route, &ports);
                if route.is_some() && change_is_removal(&change) {
                    unusable += 1;
                }
                Some(change)
            })
            .collect();
        if changes.is_empty() {
            self.rib.mark_applied();
            self.status.unusable.fetch_add(unusable, Ordering::Relaxed);
            return;
        }
        let n = changes.len();
        let t = Instant::now();
        match self.server.apply_frr(changes) {
            Ok(refused) => {
                self.rib.mark_applied();
                self.retry_at = None;
                self.retry_delay = RETRY_FIRST;
                self.status.batches.fetch_add(1, Ordering::Relaxed);
                self.status.unusable.fetch_add(unusable + refused.len() as u64, Ordering::Relaxed);
                for r in refused {
                    warn!("a route from zebra is not installed: {r}");
                }
                info!(changes = n, in_force_ms = t.elapsed().as_millis() as u64, "routes from zebra applied");
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
}

fn change_is_removal(c: &FrrChange) -> bool {
    matches!(c, FrrChange::Route { route: None, .. } | FrrChange::Label { route: None, .. })
}

/// Each port's interface index now (interfaces can be deleted and created again).
fn port_ifindexes(interfaces: &[String]) -> HashMap<u32, PortId> {
    interfaces
        .iter()
        .enumerate()
        .filter_map(|(i, name)| Some((vmpls_ports::if_nametoindex(name)?, PortId::try_from(i).ok()?)))
        .collect()
}

/// One route from zebra as a change of the router's tables. Next hops out of interfaces
/// that are not ports of this router are left out; a route left with none is removed
/// (the kernel, which has it too, is the router's own way there).
fn to_change(key: RouteKey, route: Option<&Route>, ports: &HashMap<u32, PortId>) -> FrrChange {
    let nexthops = |r: &Route| -> Vec<NexthopConfig> {
        r.nexthops
            .iter()
            .filter_map(|n| {
                Some(NexthopConfig {
                    port: *ports.get(&n.ifindex?)?,
                    via: n.gateway,
                    labels: n.labels.clone(),
                    weight: n.weight,
                })
            })
            .collect()
    };
    match key.dest {
        Dest::Prefix(prefix, len) => {
            let route = route.and_then(|r| {
                let action = match r.kind {
                    Kind::Blackhole => RouteAction::Blackhole,
                    Kind::Unicast => {
                        let nhs = nexthops(r);
                        if nhs.is_empty() {
                            return None;
                        }
                        RouteAction::Forward(nhs)
                    }
                };
                Some((action, Protocol::from_zebra(r.protocol)))
            });
            FrrChange::Route { vrf: DEFAULT_VRF_NAME.into(), prefix, len, route }
        }
        Dest::Label(label) => {
            let route = route.and_then(|r| {
                let nhs = nexthops(r);
                let action = if !nhs.is_empty() {
                    LabelConfigAction::Forward(nhs)
                } else if r.nexthops.iter().all(|n| n.gateway.is_none() && n.labels.is_empty()) {
                    // Out of an interface that is not a port (zebra uses the loopback):
                    // a local label, popped here and routed.
                    LabelConfigAction::PopAndLookup { vrf: DEFAULT_VRF_NAME.into() }
                } else {
                    return None;
                };
                Some((action, Protocol::from_zebra(r.protocol)))
            });
            FrrChange::Label { label, route }
        }
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

    impl RouteSink for Tables {
        fn apply_frr(&self, changes: Vec<FrrChange>) -> Result<Vec<String>, String> {
            if self.fail.load(Ordering::Relaxed) > 0 {
                self.fail.fetch_sub(1, Ordering::Relaxed);
                return Err("the tables are full (injected)".into());
            }
            let mut t = self.in_force.lock().unwrap();
            for c in changes {
                let key = match &c {
                    FrrChange::Route { prefix, len, .. } => format!("{prefix}/{len}"),
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
        };
        // The loopback (index 1 in every namespace) as port 0.
        Session::new(tables, cfg, vec![0], vec!["lo".into()], Arc::new(FrrStatus::default()))
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

    #[test]
    fn next_hops_off_the_ports_are_left_out() {
        let ports: HashMap<u32, PortId> = [(5, 0), (7, 1)].into_iter().collect();
        let key = RouteKey { table: MAIN_TABLE, dest: Dest::Prefix("198.18.2.0".parse().unwrap(), 24) };
        let r = Route {
            key,
            protocol: 193,
            kind: Kind::Unicast,
            nexthops: vec![nh("198.18.10.2", 5, &[16]), nh("198.18.11.2", 9, &[17])],
        };
        let FrrChange::Route { route: Some((RouteAction::Forward(nhs), proto)), .. } =
            to_change(key, Some(&r), &ports)
        else {
            panic!()
        };
        assert_eq!(proto, Protocol::Ldp);
        assert_eq!(nhs.len(), 1);
        assert_eq!((nhs[0].port, nhs[0].labels.as_slice()), (0, &[16][..]));
        // None left: removed.
        let r = Route { nexthops: vec![nh("198.18.11.2", 9, &[17])], ..r };
        assert_eq!(
            to_change(key, Some(&r), &ports),
            FrrChange::Route {
                vrf: "default".into(),
                prefix: "198.18.2.0".parse().unwrap(),
                len: 24,
                route: None
            }
        );
    }

    #[test]
    fn a_label_out_of_the_loopback_is_popped_here() {
        let ports: HashMap<u32, PortId> = [(5, 0)].into_iter().collect();
        let key = RouteKey { table: MAIN_TABLE, dest: Dest::Label(80) };
        let r = Route {
            key,
            protocol: 186,
            kind: Kind::Unicast,
            nexthops: vec![Nexthop { gateway: None, ifindex: Some(1), labels: vec![], weight: 1 }],
        };
        assert_eq!(
            to_change(key, Some(&r), &ports),
            FrrChange::Label {
                label: 80,
                route: Some((LabelConfigAction::PopAndLookup { vrf: "default".into() }, Protocol::Bgp))
            }
        );
    }
}
