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
//! else), so only processes in the router's own network namespace reach it, and only one
//! connection is served at a time; a second one is closed at once and logged.

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
use vmpls_frr::{Dest, Kind, Rib, Route, RouteKey, fpm};
use vmpls_sys::event::PollSet;

/// How long zebra must be quiet after connecting before the routes it did not send again
/// are removed (zebra does not mark the end of its table walk).
pub const RESYNC_QUIET: Duration = Duration::from_secs(3);
/// `rtm_protocol` of the kernel's own routes: zebra passes on the connected subnets.
const RTPROT_KERNEL: u8 = 2;
/// Bytes read per call.
const READ_CHUNK: usize = 64 * 1024;

/// What the FPM server has seen, for `vmpls stats` and the logs.
#[derive(Debug, Default)]
pub struct FrrStatus {
    /// zebra is connected now.
    pub connected: AtomicBool,
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections refused because one was already served.
    pub refused: AtomicU64,
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
        vec![
            c("connected", u64::from(self.connected.load(Ordering::Relaxed))),
            c("connections", get(&self.connections)),
            c("refused", get(&self.refused)),
            c("decode_errors", get(&self.decode_errors)),
            c("messages", get(&self.messages)),
            c("batches", get(&self.batches)),
            c("unusable", get(&self.unusable)),
            c("routes", routes as u64),
            c("label_routes", labels as u64),
        ]
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

/// Starts the FPM server thread.
///
/// # Errors
/// The listener cannot be bound (the address is taken, or not in this namespace).
pub fn spawn(
    server: Arc<dyn RouteSink>,
    cfg: FrrConfig,
    interfaces: Vec<String>,
) -> anyhow::Result<Arc<FrrStatus>> {
    let listener = TcpListener::bind(cfg.fpm).with_context(|| {
        format!("cannot listen for zebra's FPM connection on {} (is another vmpls running here?)", cfg.fpm)
    })?;
    listener.set_nonblocking(true)?;
    let status = Arc::new(FrrStatus::default());
    let st = status.clone();
    info!(address = %cfg.fpm, hold_s = cfg.hold.as_secs(), stale_s = cfg.stale.as_secs(), "waiting for zebra's FPM connection");
    std::thread::Builder::new().name("fpm".into()).spawn(move || {
        Session::new(server, cfg, interfaces, st).run(&listener);
    })?;
    Ok(status)
}

struct Session {
    server: Arc<dyn RouteSink>,
    cfg: FrrConfig,
    interfaces: Vec<String>,
    status: Arc<FrrStatus>,
    rib: Rib,
    conn: Option<TcpStream>,
    buf: Vec<u8>,
    last_message: Instant,
    connected_at: Instant,
    lost_at: Option<Instant>,
    warned_tables: bool,
}

impl Session {
    fn new(
        server: Arc<dyn RouteSink>,
        cfg: FrrConfig,
        interfaces: Vec<String>,
        status: Arc<FrrStatus>,
    ) -> Session {
        Session {
            server,
            cfg,
            interfaces,
            status,
            rib: Rib::new(),
            conn: None,
            buf: Vec::new(),
            last_message: Instant::now(),
            connected_at: Instant::now(),
            lost_at: None,
            warned_tables: false,
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
            if self.rib.has_changes() {
                self.flush();
            }
        }
    }

    fn accept(&mut self, listener: &TcpListener) {
        let Ok((stream, peer)) = listener.accept() else { return };
        if self.conn.is_some() {
            self.status.refused.fetch_add(1, Ordering::Relaxed);
            warn!(%peer, "refused a second FPM connection: zebra is already connected (FPM has no authentication; one zebra at a time)");
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

    /// Reads what is queued, decodes every whole frame, and applies the updates to the
    /// RIB (the table change follows in [`Session::flush`]).
    fn read(&mut self) {
        let Some(conn) = self.conn.as_mut() else { return };
        let mut chunk = vec![0; READ_CHUNK];
        loop {
            match conn.read(&mut chunk) {
                Ok(0) => return self.lost("zebra closed the FPM connection"),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return self.lost(&format!("the FPM connection failed: {e}")),
            }
        }
        let mut used = 0;
        let mut failure = None;
        loop {
            match fpm::parse_frame(&self.buf[used..]) {
                Ok(None) => break,
                Ok(Some(frame)) => {
                    match vmpls_frr::route::decode(frame.payload) {
                        Ok(updates) => {
                            self.status.messages.fetch_add(updates.len() as u64, Ordering::Relaxed);
                            for u in updates {
                                self.rib.apply(u);
                            }
                        }
                        Err(e) => {
                            failure = Some(e.to_string());
                            break;
                        }
                    }
                    used += frame.len;
                }
                Err(e) => {
                    failure = Some(e.to_string());
                    break;
                }
            }
        }
        self.buf.drain(..used);
        self.last_message = Instant::now();
        if let Some(why) = failure {
            self.status.decode_errors.fetch_add(1, Ordering::Relaxed);
            // What was decoded before the bad frame is kept: each frame stands alone.
            error!("closing the FPM connection: {why}; the router keeps forwarding on its current table");
            self.lost("FPM connection closed after a decoding error");
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

    /// Turns the RIB's changes into one table change.
    fn flush(&mut self) {
        let ports = port_ifindexes(&self.interfaces);
        let changes: Vec<FrrChange> = self
            .rib
            .take_changes()
            .into_iter()
            .filter_map(|(key, route)| {
                if key.table != MAIN_TABLE {
                    if !self.warned_tables {
                        self.warned_tables = true;
                        warn!(table = key.table, "zebra sends routes of another table (a VRF); vmpls forwards the default VRF's (table 254) only, for now");
                    }
                    self.status.unusable.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                // Connected routes (the kernel's, protocol 2) come from the kernel's
                // addresses, which vmpls reads itself.
                let route = route.filter(|r| r.protocol != RTPROT_KERNEL);
                let change = to_change(key, route, &ports);
                if route.is_some() && change_is_removal(&change) {
                    self.status.unusable.fetch_add(1, Ordering::Relaxed);
                }
                Some(change)
            })
            .collect();
        if changes.is_empty() {
            return;
        }
        let n = changes.len();
        let t = Instant::now();
        match self.server.apply_frr(changes) {
            Ok(refused) => {
                self.status.batches.fetch_add(1, Ordering::Relaxed);
                self.status.unusable.fetch_add(refused.len() as u64, Ordering::Relaxed);
                for r in refused {
                    warn!("a route from zebra is not installed: {r}");
                }
                info!(changes = n, in_force_ms = t.elapsed().as_millis() as u64, "routes from zebra applied");
            }
            Err(e) => error!("routes from zebra could not be applied, the running table stays: {e}"),
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
    use vmpls_frr::Nexthop;

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
