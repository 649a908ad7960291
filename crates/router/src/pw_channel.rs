//! The pseudowire channel: the zebra module (`frr/zebra-module/vmpls_zebra.c`) connects
//! and hands over zebra's pseudowires (ldpd's, or zebra's static ones), which become the
//! router's FRR-origin pseudowires; the router answers with each one's status, which the
//! module makes zebra's (`show l2vpn atom vc`, the RFC 4447 status ldpd signals).
//!
//! The protocol (line-delimited JSON) and its decoding are [`vmpls_frr::pw`]. One thread
//! owns the listener and the one connection, like the FPM server ([`crate::fpm`]), with
//! the same peer check: the connecting socket must be root's or an `fpm-users` user's
//! (zebra's), anyone else is closed at once, counted and logged, and changes nothing.
//!
//! - `sync` (after each connect) replaces every FRR pseudowire; `install` adds or changes
//!   one; `uninstall` removes one. Each goes to the tables through [`PwSink`]: a
//!   point-to-point `[[pseudowire]]` or a VPLS instance's `[[vpls.pseudowire]]` of the
//!   same name alike. One whose name the config has not is counted (`unknown`), logged,
//!   and reported down; it is never carried.
//! - Status: after a sync, every PW the module named; afterwards, each one whose state
//!   ([`PwSink::pw_status`], read every [`STATUS_EVERY`]) changed. A PW the tables refused
//!   is down with the tables' reason.
//! - A bad line is counted and logged (a few times), and the session goes on; a line
//!   over [`vmpls_frr::pw::MAX_LINE`] or a module that stops reading its status closes
//!   it (the module reconnects within a second and syncs again).
//! - zebra away (connection lost): its pseudowires keep forwarding for the hold time
//!   (`[frr] hold`), then are removed. A new zebra's sync brings its pseudowires; those
//!   the old one had and the new one did not name keep forwarding for the stale time
//!   (`[frr] stale-time`, as FPM's routes do: a zebra restarted alone hears from ldpd
//!   again only over time), then are removed unless it installs them meanwhile.

use std::collections::{HashMap, HashSet};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tracing::{info, warn};
use vmpls_frr::pw::{self, FromModule, LineBuffer, PwSpec};
use vmpls_sys::event::PollSet;

/// The channel's default listener (the module's default `pw=127.0.0.1:2621`).
pub const DEFAULT_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), pw::DEFAULT_PORT);
/// How often the PWs' state is read for status changes.
pub const STATUS_EVERY: Duration = Duration::from_millis(200);
/// The most status bytes held for a module that does not read them.
const MAX_PENDING_OUT: usize = 1 << 20;
/// Bad lines logged per connection (all are counted).
const BAD_LINES_LOGGED: u64 = 5;

/// A pseudowire's state as the tables see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PwState {
    /// The PW's name.
    pub name: String,
    /// It forwards (attachment up, route to the peer, labels installed).
    pub up: bool,
    /// Why not, when not up ("attachment down", "no route to peer"...).
    pub reason: Option<String>,
}

/// Where the channel puts zebra's pseudowires: the router's tables (the control server
/// implements it over `control::tables`).
pub trait PwSink: Send + Sync {
    /// Replaces every FRR pseudowire with `pws`.
    ///
    /// # Errors
    /// The tables refused the change (the running ones stay); the reason.
    fn pw_sync_frr(&self, pws: Vec<PwSpec>) -> Result<(), String>;
    /// Adds or changes one FRR pseudowire.
    ///
    /// # Errors
    /// The tables refused it (a label in use...); the reason.
    fn pw_replace_frr(&self, pw: PwSpec) -> Result<(), String>;
    /// Removes one FRR pseudowire (nothing if there is none of that name).
    ///
    /// # Errors
    /// The tables could not be changed; the reason.
    fn pw_del_frr(&self, name: &str) -> Result<(), String>;
    /// Every pseudowire's state; `None` when it cannot be read now (the forwarding loop
    /// is stopping): no status is sent then, rather than a false one.
    fn pw_status(&self) -> Option<Vec<PwState>>;
    /// Whether the config has a pseudowire of this name (a `[[pseudowire]]`, a
    /// `[[vpls.pseudowire]]`) for zebra's to fill in; one it has not is still handed to
    /// the tables (shown, down, never carried) and counted as `unknown`.
    fn pw_declared(&self, _name: &str) -> bool {
        true
    }
}

/// What the channel has seen, for `vmpls stats` and the logs.
#[derive(Debug, Default)]
pub struct PwChannelStatus {
    /// The module is connected now.
    pub connected: AtomicBool,
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections refused because one was already served.
    pub refused: AtomicU64,
    /// Connections refused because their socket is not root's or an `fpm-users` user's.
    pub refused_owner: AtomicU64,
    /// Messages read.
    pub messages: AtomicU64,
    /// Lines that were no message (counted, skipped).
    pub bad_lines: AtomicU64,
    /// Changes the tables refused.
    pub apply_failures: AtomicU64,
    /// Pseudowires zebra gave whose name the config has no pseudowire of.
    pub unknown: AtomicU64,
    /// Status lines sent.
    pub status_sent: AtomicU64,
}

impl PwChannelStatus {
    /// The counters as `vmpls stats` shows them.
    pub fn counters(&self) -> Vec<vmpls_control::api::Counter> {
        let c = |name: &str, a: &AtomicU64| vmpls_control::api::Counter {
            name: name.into(),
            value: a.load(Ordering::Relaxed),
        };
        vec![
            vmpls_control::api::Counter {
                name: "connected".into(),
                value: u64::from(self.connected.load(Ordering::Relaxed)),
            },
            c("connections", &self.connections),
            c("refused", &self.refused),
            c("refused_owner", &self.refused_owner),
            c("messages", &self.messages),
            c("bad_lines", &self.bad_lines),
            c("apply_failures", &self.apply_failures),
            c("unknown", &self.unknown),
            c("status_sent", &self.status_sent),
        ]
    }
}

/// Binds the channel's listener (loopback of the router's namespace, like FPM's).
///
/// # Errors
/// The address is taken or not local.
pub fn listen(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    if !addr.ip().is_loopback() {
        anyhow::bail!(
            "the pseudowire channel must listen on a loopback address, not {addr} (it has no authentication)"
        );
    }
    let l = TcpListener::bind(addr).with_context(|| {
        format!(
            "cannot listen for the zebra module's pseudowire channel on {addr}: another process holds it \
             (`ss -ltnpe 'sport = :{}'` shows who)",
            addr.port()
        )
    })?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Starts the channel's thread on `listener`, serving the sockets of `allowed` users
/// only ([`crate::fpm::allowed_users`]); zebra's PWs are removed `hold` after it leaves.
///
/// # Errors
/// The thread cannot be started.
pub fn spawn(
    sink: Arc<dyn PwSink>,
    listener: TcpListener,
    allowed: Vec<u32>,
    hold: Duration,
    stale: Duration,
) -> anyhow::Result<Arc<PwChannelStatus>> {
    let status = Arc::new(PwChannelStatus::default());
    let st = status.clone();
    info!(address = ?listener.local_addr().ok(), users = ?allowed, "waiting for the zebra module's pseudowire channel");
    std::thread::Builder::new().name("pw-channel".into()).spawn(move || {
        Channel::new(sink, allowed, (hold, stale), st).run(&listener);
    })?;
    Ok(status)
}

struct Channel {
    sink: Arc<dyn PwSink>,
    allowed: Vec<u32>,
    hold: Duration,
    stale_time: Duration,
    status: Arc<PwChannelStatus>,
    conn: Option<TcpStream>,
    lines: LineBuffer,
    out: Vec<u8>,
    /// The PWs the module named on this connection, and what was last sent of each.
    known: HashMap<String, Option<(bool, Option<String>)>>,
    /// PWs the tables refused, with the reason (down whatever the tables say).
    refused: HashMap<String, String>,
    bad_logged: u64,
    lost_at: Option<Instant>,
    /// FRR pseudowires are held by the tables (nothing to remove after the hold).
    holding: bool,
    /// zebra's pseudowires as last given to the tables, by name, across connections.
    installed: HashMap<String, PwSpec>,
    /// Those a new zebra has not named since it connected, kept until `stale_until`.
    stale: HashSet<String>,
    stale_until: Option<Instant>,
    next_status: Instant,
}

impl Channel {
    fn new(
        sink: Arc<dyn PwSink>,
        allowed: Vec<u32>,
        (hold, stale_time): (Duration, Duration),
        status: Arc<PwChannelStatus>,
    ) -> Channel {
        Channel {
            sink,
            allowed,
            hold,
            stale_time,
            status,
            conn: None,
            lines: LineBuffer::new(),
            out: Vec::new(),
            known: HashMap::new(),
            refused: HashMap::new(),
            bad_logged: 0,
            lost_at: None,
            holding: false,
            installed: HashMap::new(),
            stale: HashSet::new(),
            stale_until: None,
            next_status: Instant::now(),
        }
    }

    fn run(mut self, listener: &TcpListener) {
        let mut set = PollSet::new();
        let accept = set.push(listener.as_fd());
        let conn = set.push(listener.as_fd());
        loop {
            match &self.conn {
                Some(c) => set.set(conn, c.as_fd()),
                None => set.mute(conn),
            }
            let n = set.poll(Duration::from_millis(50)).unwrap_or(0);
            let (on_listener, on_conn) = (set.take(accept), set.take(conn));
            if n > 0 && on_listener.bits() != 0 {
                self.accept(listener);
            }
            if n > 0 && on_conn.bits() != 0 {
                self.read();
            }
            self.timers();
            self.flush();
        }
    }

    fn accept(&mut self, listener: &TcpListener) {
        let Ok((stream, peer)) = listener.accept() else { return };
        let owner = stream
            .local_addr()
            .map_err(|e| (None, e.to_string()))
            .and_then(|l| crate::fpm::peer_owner_allowed(&self.allowed, l, peer));
        if let Err((uid, why)) = owner {
            self.status.refused_owner.fetch_add(1, Ordering::Relaxed);
            warn!(%peer, ?uid, "refused a pseudowire channel connection: {why} (only zebra may connect: root or frr.fpm-users)");
            return;
        }
        if self.conn.is_some() {
            self.status.refused.fetch_add(1, Ordering::Relaxed);
            warn!(%peer, "refused a second pseudowire channel connection: the zebra module is already connected");
            return;
        }
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        self.status.connections.fetch_add(1, Ordering::Relaxed);
        self.status.connected.store(true, Ordering::Relaxed);
        info!(%peer, "the zebra module connected on the pseudowire channel");
        self.conn = Some(stream);
        self.connected();
    }

    /// A new connection's state: nothing read or sent on it yet.
    fn connected(&mut self) {
        self.lines.clear();
        self.out.clear();
        self.known.clear();
        self.bad_logged = 0;
        self.lost_at = None;
    }

    fn read(&mut self) {
        let Some(mut conn) = self.conn.take() else { return };
        let mut buf = [0u8; 64 * 1024];
        let mut lines = Vec::new();
        let mut end = None;
        for _ in 0..64 {
            match conn.read(&mut buf) {
                Ok(0) => {
                    end = Some("the zebra module closed the pseudowire channel".to_owned());
                    break;
                }
                Ok(n) => {
                    if self.lines.push(&buf[..n], |l| lines.push(l.to_vec())).is_err() {
                        end = Some(format!(
                            "closing the pseudowire channel: a line longer than {} bytes",
                            pw::MAX_LINE
                        ));
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    end = Some(format!("the pseudowire channel failed: {e}"));
                    break;
                }
            }
        }
        self.conn = Some(conn);
        for l in lines {
            self.line(&l);
        }
        if let Some(why) = end {
            self.lost(&why);
        }
    }

    fn line(&mut self, line: &[u8]) {
        let msg = match pw::decode_line(line) {
            Ok(m) => m,
            Err(e) => {
                self.status.bad_lines.fetch_add(1, Ordering::Relaxed);
                if self.bad_logged < BAD_LINES_LOGGED {
                    self.bad_logged += 1;
                    warn!(
                        "a line from the zebra module is skipped: {e} (the channel goes on; counted as bad_lines)"
                    );
                }
                return;
            }
        };
        self.status.messages.fetch_add(1, Ordering::Relaxed);
        match msg {
            FromModule::Hello { frr } => info!(frr, "the zebra module says hello"),
            FromModule::Sync(pws) => {
                let names: Vec<String> = pws.iter().map(|p| p.name.clone()).collect();
                info!(pseudowires = names.len(), "zebra's pseudowires (sync)");
                for n in &names {
                    self.check_declared(n);
                }
                self.refused.clear();
                // What an earlier zebra gave and this one did not name stays for the
                // stale time: it may still be on its way from ldpd.
                let mut stale: Vec<PwSpec> =
                    self.installed.values().filter(|p| !names.contains(&p.name)).cloned().collect();
                stale.sort_by(|a, b| a.name.cmp(&b.name));
                if !stale.is_empty() {
                    let kept: Vec<&str> = stale.iter().map(|p| p.name.as_str()).collect();
                    info!(
                        pseudowires = ?kept,
                        stale_s = self.stale_time.as_secs(),
                        "zebra did not name these pseudowires again; they keep forwarding for the stale time"
                    );
                }
                let set: Vec<PwSpec> = pws.into_iter().chain(stale.iter().cloned()).collect();
                if let Err(why) = self.sink.pw_sync_frr(set.clone()) {
                    // one by one, so that one refused PW does not keep the others out
                    self.status.apply_failures.fetch_add(1, Ordering::Relaxed);
                    warn!("zebra's pseudowires refused as a set ({why}); taking them one by one");
                    let _ = self.sink.pw_sync_frr(Vec::new());
                    // the sync's names were checked above, the stale ones when given
                    for p in set.iter().cloned() {
                        self.replace_checked(p);
                    }
                }
                self.installed = set.into_iter().map(|p| (p.name.clone(), p)).collect();
                self.stale = stale.into_iter().map(|p| p.name).collect();
                self.stale_until = (!self.stale.is_empty()).then(|| Instant::now() + self.stale_time);
                self.holding = true;
                self.known = names.into_iter().map(|n| (n, None)).collect();
                self.send_status(true);
            }
            FromModule::Install(p) => {
                let name = p.name.clone();
                self.refused.remove(&name);
                self.stale.remove(&name);
                self.installed.insert(name.clone(), p.clone());
                self.replace(p);
                self.holding = true;
                self.known.insert(name, None);
                self.send_status(false);
            }
            FromModule::Uninstall(name) => {
                self.refused.remove(&name);
                self.known.remove(&name);
                self.stale.remove(&name);
                self.installed.remove(&name);
                if let Err(why) = self.sink.pw_del_frr(&name) {
                    self.status.apply_failures.fetch_add(1, Ordering::Relaxed);
                    warn!(pw = name, "zebra's pseudowire could not be removed: {why}");
                } else {
                    info!(pw = name, "zebra's pseudowire removed");
                }
            }
        }
    }

    fn replace(&mut self, p: PwSpec) {
        self.check_declared(&p.name);
        self.replace_checked(p);
    }

    /// Counts and logs zebra's pseudowire `name` if the config has none of that name
    /// (ldpd's `member pseudowire` names no `[[pseudowire]]` or `[[vpls.pseudowire]]`).
    fn check_declared(&self, name: &str) {
        if !self.sink.pw_declared(name) {
            self.status.unknown.fetch_add(1, Ordering::Relaxed);
            warn!(
                pw = name,
                "zebra's pseudowire has no [[pseudowire]] or [[vpls.pseudowire]] of its name in the config: not carried, reported down (counted as unknown)"
            );
        }
    }

    /// As `replace`, the name checked already (by the sync).
    fn replace_checked(&mut self, p: PwSpec) {
        let name = p.name.clone();
        info!(pw = name, local_label = p.local_label, remote_label = p.remote_label, peer = %p.peer, control_word = p.control_word, "zebra's pseudowire");
        if let Err(why) = self.sink.pw_replace_frr(p) {
            self.status.apply_failures.fetch_add(1, Ordering::Relaxed);
            warn!(pw = name, "zebra's pseudowire refused: {why}");
            self.refused.insert(name, why);
        }
    }

    /// Queues a status line for each known PW whose state changed (all with `all`).
    fn send_status(&mut self, all: bool) {
        if self.conn.is_none() || self.known.is_empty() {
            return;
        }
        self.next_status = Instant::now() + STATUS_EVERY;
        let Some(states) = self.sink.pw_status() else { return };
        let states: HashMap<String, PwState> = states.into_iter().map(|s| (s.name.clone(), s)).collect();
        let mut names: Vec<&String> = self.known.keys().collect();
        names.sort();
        let mut lines = Vec::new();
        for name in names {
            let now = match (self.refused.get(name), states.get(name)) {
                (Some(why), _) => (false, Some(why.clone())),
                (None, Some(s)) => (s.up, if s.up { None } else { s.reason.clone() }),
                (None, None) => (false, Some("not in vmpls's tables".to_owned())),
            };
            if all || self.known[name].as_ref() != Some(&now) {
                lines.push((name.clone(), now));
            }
        }
        for (name, now) in lines {
            self.out.extend_from_slice(&pw::encode_status(&name, now.0, now.1.as_deref()));
            self.status.status_sent.fetch_add(1, Ordering::Relaxed);
            self.known.insert(name, Some(now));
        }
    }

    fn flush(&mut self) {
        if self.out.is_empty() {
            return;
        }
        let Some(conn) = self.conn.as_mut() else {
            self.out.clear();
            return;
        };
        let mut failed = None;
        while !self.out.is_empty() {
            match conn.write(&self.out) {
                Ok(0) => {
                    failed = Some("the pseudowire channel closed".to_owned());
                    break;
                }
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    failed = Some(format!("the pseudowire channel failed: {e}"));
                    break;
                }
            }
        }
        if failed.is_none() && self.out.len() > MAX_PENDING_OUT {
            failed = Some("closing the pseudowire channel: the zebra module does not read its status".into());
        }
        if let Some(why) = failed {
            self.lost(&why);
        }
    }

    fn lost(&mut self, why: &str) {
        self.conn = None;
        self.out.clear();
        self.lines.clear();
        self.known.clear();
        self.status.connected.store(false, Ordering::Relaxed);
        self.lost_at = Some(Instant::now());
        warn!(hold_s = self.hold.as_secs(), "{why}; zebra's pseudowires stay in force for the hold time");
    }

    fn timers(&mut self) {
        if self.conn.is_some() && Instant::now() >= self.next_status {
            self.send_status(false);
        }
        if self.stale_until.is_some_and(|t| Instant::now() >= t) {
            self.stale_until = None;
            let mut gone: Vec<String> = self.stale.drain().collect();
            gone.sort();
            for name in gone {
                self.installed.remove(&name);
                match self.sink.pw_del_frr(&name) {
                    Ok(()) => warn!(
                        pw = name,
                        "zebra did not give this pseudowire again within the stale time; removed"
                    ),
                    Err(why) => {
                        self.status.apply_failures.fetch_add(1, Ordering::Relaxed);
                        warn!(pw = name, "a stale pseudowire could not be removed: {why}");
                    }
                }
            }
        }
        if let Some(t) = self.lost_at
            && t.elapsed() >= self.hold
        {
            self.lost_at = None;
            if std::mem::take(&mut self.holding) {
                self.refused.clear();
                self.installed.clear();
                self.stale.clear();
                self.stale_until = None;
                match self.sink.pw_sync_frr(Vec::new()) {
                    Ok(()) => {
                        warn!("zebra stayed away longer than the hold time; its pseudowires are removed")
                    }
                    Err(why) => {
                        self.status.apply_failures.fetch_add(1, Ordering::Relaxed);
                        warn!("zebra's pseudowires could not be removed after the hold time: {why}");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// The tables' FRR pseudowires, by name, as the sink's calls leave them.
    #[derive(Default)]
    struct Tables(Mutex<HashMap<String, PwSpec>>);

    impl PwSink for Tables {
        fn pw_sync_frr(&self, pws: Vec<PwSpec>) -> Result<(), String> {
            *self.0.lock().unwrap() = pws.into_iter().map(|p| (p.name.clone(), p)).collect();
            Ok(())
        }
        fn pw_replace_frr(&self, pw: PwSpec) -> Result<(), String> {
            self.0.lock().unwrap().insert(pw.name.clone(), pw);
            Ok(())
        }
        fn pw_del_frr(&self, name: &str) -> Result<(), String> {
            self.0.lock().unwrap().remove(name);
            Ok(())
        }
        fn pw_status(&self) -> Option<Vec<PwState>> {
            Some(Vec::new())
        }
    }

    impl Tables {
        fn names(&self) -> Vec<String> {
            let mut n: Vec<String> = self.0.lock().unwrap().keys().cloned().collect();
            n.sort();
            n
        }
    }

    /// A module line: `op` with the pseudowires `names` (labels 16, 17...).
    fn line(op: &str, names: &[&str]) -> Vec<u8> {
        let pw = |i: usize, n: &str| {
            format!(
                r#"{{"name":"{n}","local-label":{},"remote-label":{},"peer":"198.18.255.3","control-word":true,"pw-type":"ethernet"}}"#,
                16 + i,
                100 + i
            )
        };
        let text = match op {
            "sync" => {
                let all: Vec<String> = names.iter().enumerate().map(|(i, n)| pw(i, n)).collect();
                format!(r#"{{"op":"sync","pws":[{}]}}"#, all.join(","))
            }
            _ => format!(r#"{{"op":"{op}","pw":{}}}"#, pw(0, names[0])),
        };
        text.into_bytes()
    }

    #[test]
    fn a_new_zebra_keeps_what_the_old_one_had_for_the_stale_time_then_only_what_it_gave() {
        let tables = Arc::new(Tables::default());
        let status = Arc::new(PwChannelStatus::default());
        let times = (Duration::from_secs(120), Duration::from_secs(30));
        let mut ch = Channel::new(tables.clone(), Vec::new(), times, status);
        ch.line(&line("sync", &["mpw0", "mpw1"]));
        assert_eq!(tables.names(), ["mpw0", "mpw1"]);

        // zebra restarted alone: it syncs before ldpd has given it anything again
        ch.lost("zebra stopped");
        ch.connected();
        ch.line(&line("sync", &[]));
        assert_eq!(tables.names(), ["mpw0", "mpw1"], "held through the stale time");
        ch.line(&line("install", &["mpw1"]));
        ch.timers();
        assert_eq!(tables.names(), ["mpw0", "mpw1"], "not before the stale time is over");
        ch.stale_until = Some(Instant::now());
        ch.timers();
        assert_eq!(tables.names(), ["mpw1"], "mpw0 was not given again: removed; mpw1 stays");
        assert!(ch.stale.is_empty() && ch.stale_until.is_none());

        // the first sync of a router that holds none: nothing stale, the set as given
        let fresh = Arc::new(Tables::default());
        let mut ch = Channel::new(fresh.clone(), Vec::new(), times, Arc::new(PwChannelStatus::default()));
        ch.line(&line("sync", &["mpw2"]));
        assert_eq!((fresh.names(), ch.stale_until), (vec!["mpw2".to_string()], None));
    }
}
