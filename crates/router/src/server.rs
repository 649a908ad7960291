//! The control thread: serves the control socket (protocol in [`vmpls_control::api`])
//! and reloads the config on SIGHUP.
//!
//! It keeps the running routes ([`Tables`]: the config file plus runtime changes) behind
//! a mutex that only control-side threads take; route changes become a new `Fib` stored
//! in the `FibHandle`. Counters and neighbours come from the forwarding loop through its
//! [`LoopHandle`]. Each connection gets its own thread, so a long capture does not hold
//! up other clients.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context;
use tracing::{info, warn};
use vmpls_control::api::{
    self, Answer, CaptureStart, ControlError, ErrorKind, NeighState, Neighbor, PROTOCOL_VERSION, Reply,
    Request, RequestLine, Stats,
};
use vmpls_control::tables::{Change, FrrChange, Tables};
use vmpls_dataplane::PortInfo;
use vmpls_fib::FibHandle;
use vmpls_sys::EventFd;
use vmpls_sys::event::PollSet;

use crate::capture::CaptureSink;
use crate::metrics::StatsSource;
use crate::protocol::LoopHandle;

mod bulk;
mod vpls;

/// Frames queued per capture before new ones are lost.
const CAPTURE_QUEUE: usize = 1024;

/// The control side of a running router.
pub struct Server {
    tables: Mutex<Tables>,
    /// Held by a reload from before it reads the file until its tables are in force:
    /// reloads at once (a SIGHUP and a `reload` request) run one after the other, so the
    /// last to read the file is the last to apply it and the newest file wins. Apart
    /// from the tables' lock, which route changes and FPM take: they do not wait while a
    /// large file is parsed.
    reloading: Mutex<()>,
    fib: FibHandle,
    lp: LoopHandle,
    config_path: PathBuf,
    ports: Vec<PortInfo>,
    frr: std::sync::OnceLock<Arc<crate::fpm::FrrStatus>>,
    /// FRR mode: the zebra module's pseudowire channel, when it is on.
    pw_channel: std::sync::OnceLock<Arc<crate::pw_channel::PwChannelStatus>>,
    /// FRR mode: the kernel's VRFs as last scanned.
    vrfs: std::sync::OnceLock<Arc<crate::vrfs::Vrfs>>,
}

impl Server {
    /// A server for the router whose running routes are `tables`.
    pub fn new(
        tables: Tables,
        fib: FibHandle,
        lp: LoopHandle,
        config_path: PathBuf,
        ports: Vec<PortInfo>,
    ) -> Arc<Server> {
        Arc::new(Server {
            tables: Mutex::new(tables),
            reloading: Mutex::new(()),
            fib,
            lp,
            config_path,
            ports,
            frr: Default::default(),
            pw_channel: Default::default(),
            vrfs: Default::default(),
        })
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        // A panic while holding the lock left the tables as they were before the change
        // (changes are made on a copy), so the data is still good.
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Re-reads the config file and applies the difference.
    ///
    /// # Errors
    /// The file is invalid (the same message as at start) or needs a restart.
    pub fn reload(&self) -> Result<api::ReloadSummary, ControlError> {
        self.reload_from(|| crate::config::load_config(&self.config_path))
    }

    /// A reload of the config `read` returns, read once, under the reload lock (see
    /// [`Server::reloading`]).
    fn reload_from(
        &self,
        read: impl FnOnce() -> anyhow::Result<vmpls_control::Config>,
    ) -> Result<api::ReloadSummary, ControlError> {
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        let cfg = read().map_err(|e| ControlError::new(ErrorKind::Config, format!("{e:#}")))?;
        let mut t = self.tables();
        let (old, new) = (t.config().neighbors.clone(), cfg.neighbors.clone());
        let (fib, sum) = t.reload(cfg)?;
        self.fib.store(fib);
        self.in_force();
        self.reload_neighbors(&old, &new);
        Ok(sum)
    }

    /// After a reload: the file's static neighbours as the file now says (ports cannot
    /// change without a restart, so their ids hold). Entries set with the CLI for other
    /// addresses stay, as routes added at runtime do.
    fn reload_neighbors(
        &self,
        old: &[vmpls_control::StaticNeighborConfig],
        new: &[vmpls_control::StaticNeighborConfig],
    ) {
        use crate::protocol::NeighborChange;
        let gone = old.iter().filter(|o| !new.iter().any(|n| (n.port, n.address) == (o.port, o.address)));
        let changes = gone.map(|o| NeighborChange::Del { port: o.port, addr: o.address }).chain(
            new.iter().filter(|n| !old.contains(n)).map(|n| NeighborChange::Set {
                port: n.port,
                addr: n.address,
                mac: n.lladdr,
                replace: true,
            }),
        );
        for change in changes {
            match self.lp.neighbor(change) {
                Ok(Ok(())) => info!(?change, "static neighbour changed by reload"),
                Ok(Err(e)) => warn!(?change, error = %e, "static neighbour not changed by reload"),
                Err(e) => warn!(?change, error = %e, "static neighbour not changed by reload"),
            }
        }
    }

    /// Returns once the FIB just stored is in force in the forwarding loop and in the
    /// kernel's fast path, if the router has one.
    fn in_force(&self) {
        if let Err(e) = self.lp.fib_stored() {
            warn!(error = %e, "the new routes are stored; the forwarding loop did not confirm them");
        }
    }

    fn reload_logged(&self, why: &str) -> Result<api::ReloadSummary, ControlError> {
        let r = self.reload();
        match &r {
            Ok(sum) => info!(trigger = why, "reloaded {sum}"),
            Err(e) => warn!(trigger = why, "reload rejected, the running config stays: {e}"),
        }
        r
    }

    fn links(&self) -> anyhow::Result<Vec<api::Link>> {
        let snap = self.lp.snapshot()?;
        let cfg = self.tables().config().clone();
        let fib = self.fib.load_full();
        Ok(self
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let pc = cfg.ports.get(i);
                // The port now (a guest renegotiates offloads), else as it started.
                let p = snap.port_info.get(i).unwrap_or(p);
                let caps = p.caps;
                let offloads = [
                    (caps.tso4, "tso4"),
                    (caps.tso6, "tso6"),
                    (caps.uso, "uso"),
                    (caps.csum, "csum"),
                    (caps.mpls_gso, "mpls_gso"),
                ]
                .iter()
                .filter(|(on, _)| *on)
                .map(|(_, n)| n.to_string())
                .collect();
                api::Link {
                    index: p.id,
                    name: p.name.clone(),
                    interface: pc.map(|c| c.interface.clone()).unwrap_or_default(),
                    kind: pc.map_or("af-packet", |c| c.kind.name()).into(),
                    mtu: p.mtu,
                    address: api::Mac(p.mac),
                    vrf: pc.map(|c| c.vrf.clone()).unwrap_or_default(),
                    // As the tables in force say: in FRR mode it follows zebra's labels.
                    mpls: fib.accepts_mpls(p.id),
                    addresses: pc
                        .map(|c| c.addresses.iter().map(|(a, l)| format!("{a}/{l}")).collect())
                        .unwrap_or_default(),
                    offloads,
                    state: interface_state(pc, snap.faults.get(i).is_some_and(|f| f.detached)),
                    stats: crate::stats::link_stats(&snap, i),
                }
            })
            .collect())
    }

    fn neighbors(&self) -> anyhow::Result<Vec<Neighbor>> {
        let snap = self.lp.snapshot()?;
        let mut list: Vec<Neighbor> = snap
            .neighbors
            .iter()
            .map(|(port, addr, m)| Neighbor {
                dst: *addr,
                dev: self
                    .ports
                    .get(usize::from(*port))
                    .map_or_else(|| format!("port{port}"), |p| p.name.clone()),
                lladdr: m.map(api::Mac),
                state: match m {
                    _ if snap.static_neighbors.contains(&(*port, *addr)) => NeighState::Permanent,
                    Some(_) => NeighState::Reachable,
                    None => NeighState::Incomplete,
                },
            })
            .collect();
        list.sort_by(|a, b| (&a.dev, a.dst).cmp(&(&b.dev, b.dst)));
        Ok(list)
    }

    /// Carries out one request (all but `capture`).
    pub fn handle(&self, req: &Request) -> Reply<Answer> {
        // The forwarding loop not answering is the one failure of these reads.
        let unavailable = |e: anyhow::Error| ControlError::new(ErrorKind::Unavailable, format!("{e:#}"));
        let answer = match req {
            Request::RouteShow { family, vrf, dst } => self
                .tables()
                .show_chunk(*family, vrf.as_deref(), dst.as_deref(), None, usize::MAX)
                .map(|chunk| Answer::Routes(chunk.rows))
                .map_err(ControlError::from),
            Request::RouteGet { addr, vrf } => {
                self.tables().get(*addr, vrf.as_deref()).map(Answer::Route).map_err(ControlError::from)
            }
            Request::RouteAdd { route } => return self.change(Change::Add, route),
            Request::RouteDel { route } => return self.change(Change::Delete, route),
            Request::RouteReplace { route } => return self.change(Change::Replace, route),
            Request::RouteFlush { family, filter } => {
                let mut t = self.tables();
                t.flush(*family, filter).map_err(ControlError::from).map(|(fib, sum)| {
                    self.fib.store(fib);
                    self.in_force();
                    info!(
                        family = family.name(),
                        ?filter,
                        flushed = sum.flushed,
                        from_file = sum.from_file,
                        frr_kept = sum.frr_kept,
                        "routes flushed"
                    );
                    Answer::Flushed(sum)
                })
            }
            Request::LinkShow => self.links().map(Answer::Links).map_err(unavailable),
            Request::VrfShow => Ok(Answer::Vrfs(self.vrf_list())),
            Request::NeighShow => self.neighbors().map(Answer::Neighbors).map_err(unavailable),
            Request::NeighAdd { dst, lladdr, dev, replace } => {
                return self.change_neighbor(dev, |port| {
                    let mac = api::check_neighbor_mac(*lladdr)?.0;
                    Ok(crate::protocol::NeighborChange::Set { port, addr: *dst, mac, replace: *replace })
                });
            }
            Request::NeighDel { dst, dev } => {
                return self.change_neighbor(dev, |port| {
                    Ok(crate::protocol::NeighborChange::Del { port, addr: *dst })
                });
            }
            Request::PwShow => self.pw_show().map(Answer::Pseudowires).map_err(unavailable),
            Request::PwReplace { pw, attachment } => {
                return self.pw_change(|t| t.pw_replace_cli(pw.clone(), attachment.as_deref()), &pw.name);
            }
            Request::PwDel { name } => return self.pw_change(|t| t.pw_del_cli(name), name),
            Request::VplsShow => self.vpls_show().map(Answer::Vpls).map_err(unavailable),
            Request::FdbShow { vpls } => match self.fdb_show(vpls.as_deref()) {
                Ok(list) => Ok(Answer::Fdb(list)),
                Err(e) => Err(ControlError::invalid(format!("{e:#}"))),
            },
            Request::Stats => self.stats().map(|s| Answer::Stats(Box::new(s))).map_err(unavailable),
            Request::Reload => self.reload_logged("request").map(Answer::Reloaded),
            Request::Capture { .. } => Err(ControlError::invalid("capture needs its own connection")),
            Request::RouteShowStream { .. } | Request::RouteBatch { .. } => Err(ControlError::invalid(
                "route-show-stream and route-batch are served on the connection itself",
            )),
        };
        Reply::from_result(answer)
    }

    /// `neigh add|replace|del` on the port named `dev`, through the forwarding loop.
    fn change_neighbor(
        &self,
        dev: &str,
        change: impl FnOnce(vmpls_fib::PortId) -> Result<crate::protocol::NeighborChange, String>,
    ) -> Reply<Answer> {
        let Some(port) = self.ports.iter().find(|p| p.name == dev) else {
            return Reply::error(format!("no port named \"{dev}\""));
        };
        let change = match change(port.id) {
            Ok(c) => c,
            Err(e) => return Reply::error(e),
        };
        match self.lp.neighbor(change) {
            Ok(Ok(())) => {
                info!(?change, "neighbour changed");
                Reply::done()
            }
            Ok(Err(e)) => Reply::error(format!("{e} (dev {dev})")),
            Err(e) => Reply::error(ControlError::new(ErrorKind::Unavailable, format!("{e:#}"))),
        }
    }

    /// The pseudowires with their state (`pw-show`): the tables' view against the ports'
    /// links and the routes in force, with the pipeline's counters.
    pub fn pw_show(&self) -> anyhow::Result<Vec<api::PwStatus>> {
        let snap = self.lp.snapshot()?;
        let t = self.tables();
        let cfg = t.config();
        let port_up = |p: vmpls_fib::PortId| {
            let detached = snap.faults.get(usize::from(p)).is_some_and(|f| f.detached);
            interface_state(cfg.ports.get(usize::from(p)), detached) == api::LinkState::Up
        };
        let mut list = t.pw_status(port_up);
        for s in &mut list {
            if let Some(spec) = &s.spec {
                [s.rx_frames, s.rx_bytes] = snap.counters.label_count(spec.local_label);
            }
            let port = s.attachment.as_deref().and_then(|a| cfg.port(a)).map(|(id, _)| usize::from(id));
            if let Some(c) = port.and_then(|p| snap.counters.pw_tx.get(p)) {
                [s.tx_frames, s.tx_bytes] = *c;
            }
        }
        Ok(list)
    }

    /// `pw add` / `pw del`: a change to the tables' pseudowires, stored when it succeeds.
    fn pw_change(
        &self,
        f: impl FnOnce(
            &mut vmpls_control::tables::Tables,
        ) -> Result<vmpls_fib::Fib, vmpls_control::tables::TablesError>,
        name: &str,
    ) -> Reply<Answer> {
        let mut t = self.tables();
        match f(&mut t) {
            Ok(fib) => {
                self.fib.store(fib);
                self.in_force();
                info!(pw = name, "pseudowire changed");
                Reply::done()
            }
            Err(e) => Reply::error(e),
        }
    }

    /// A change to FRR's pseudowires (the module's channel), in force when it succeeds.
    fn pw_frr(
        &self,
        f: impl FnOnce(
            &mut vmpls_control::tables::Tables,
        ) -> Result<vmpls_fib::Fib, vmpls_control::tables::TablesError>,
    ) -> Result<(), String> {
        let mut t = self.tables();
        let fib = f(&mut t).map_err(|e| e.message())?;
        self.fib.store(fib);
        self.in_force();
        Ok(())
    }

    fn change(&self, change: Change, route: &api::RouteSpec) -> Reply<Answer> {
        let mut t = self.tables();
        match t.change(change, route) {
            Ok(fib) => {
                self.fib.store(fib);
                self.in_force();
                info!(change = ?change, route = ?route, "route changed");
                Reply::done()
            }
            Err(e) => Reply::error(e),
        }
    }

    /// Shows the FPM server's status in the stats.
    pub fn set_frr_status(&self, status: Arc<crate::fpm::FrrStatus>) {
        let _ = self.frr.set(status);
    }

    /// Shows the pseudowire channel's counters in the stats (with FRR's, `pw_channel_*`).
    pub fn set_pw_channel_status(&self, status: Arc<crate::pw_channel::PwChannelStatus>) {
        let _ = self.pw_channel.set(status);
    }

    /// FRR mode: the kernel's VRFs, for `vrf show`.
    pub fn set_vrfs(&self, vrfs: Arc<crate::vrfs::Vrfs>) {
        let _ = self.vrfs.set(vrfs);
    }

    /// `vrf show`: in FRR mode the kernel's VRFs as last scanned, else the file's; each
    /// with its ports and how many destinations it routes.
    fn vrf_list(&self) -> Vec<api::Vrf> {
        // Before the tables' lock: the counters are a round trip to the forwarding loop.
        let stats = self.stats().ok();
        let t = self.tables();
        let counts = t.route_counts();
        let cfg = t.config();
        let row = |name: &str, table: Option<u32>, origin: &str| api::Vrf {
            name: name.to_string(),
            table,
            interfaces: cfg.ports.iter().filter(|p| p.vrf == name).map(|p| p.name.clone()).collect(),
            routes: counts.get(name).copied().unwrap_or(0),
            origin: origin.to_string(),
            stats: stats
                .as_ref()
                .and_then(|s| s.vrfs.iter().find(|v| v.vrf == name))
                .map(|v| v.stats.clone()),
        };
        match self.vrfs.get() {
            Some(vrfs) => {
                vrfs.snapshot().vrfs.iter().map(|v| row(&v.name, Some(v.table), v.origin.name())).collect()
            }
            None => cfg.vrfs.iter().skip(1).map(|name| row(name, None, "config")).collect(),
        }
    }

    /// Each VRF's traffic but the default's, from the port and label counters of `stats`:
    /// its ports, and the labels that pop into it in the FIB in force.
    fn vrf_traffic(&self, stats: &Stats) -> Vec<api::VrfCounters> {
        let fib = self.fib.load_full();
        let t = self.tables();
        let cfg = t.config();
        // The FIB's VRF ids are the config's VRF positions; 0 is the default VRF.
        let mut labels: Vec<Vec<u32>> = vec![Vec::new(); cfg.vrfs.len()];
        for (label, route) in fib.labels.iter() {
            if let &vmpls_fib::LabelAction::PopAndLookup { vrf } = route.action()
                && let Some(of_vrf) = labels.get_mut(usize::from(vrf))
            {
                of_vrf.push(label);
            }
        }
        cfg.vrfs
            .iter()
            .zip(labels)
            .skip(1)
            .map(|(name, labels)| {
                let ports: Vec<String> =
                    cfg.ports.iter().filter(|p| &p.vrf == name).map(|p| p.name.clone()).collect();
                api::VrfCounters { vrf: name.clone(), stats: stats.vrf(&ports, labels) }
            })
            .collect()
    }

    /// How many routes and label routes from FRR the router holds.
    pub fn frr_counts(&self) -> (usize, usize) {
        self.tables().frr_counts()
    }

    /// Serves one connection until the client closes it.
    fn serve(&self, stream: UnixStream) -> anyhow::Result<()> {
        let mut writer = stream.try_clone()?;
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = (&mut reader).take(api::MAX_REQUEST_LINE as u64 + 1).read_until(b'\n', &mut line)?;
            if n == 0 {
                return Ok(());
            }
            if line.len() > api::MAX_REQUEST_LINE {
                send(&mut writer, &Reply::<()>::error("request line too long"))?;
                return Ok(());
            }
            let req = match serde_json::from_slice::<RequestLine>(&line) {
                Ok(RequestLine { version: Some(v), .. }) if v != PROTOCOL_VERSION => {
                    let why = format!(
                        "this router speaks version {PROTOCOL_VERSION} of the control protocol, the request version {v}"
                    );
                    send(&mut writer, &Reply::<()>::error(ControlError::new(ErrorKind::Version, why)))?;
                    continue;
                }
                Ok(line) => line.request,
                Err(e) => {
                    send(&mut writer, &Reply::<()>::error(format!("bad request: {e}")))?;
                    continue;
                }
            };
            if let Request::RouteShowStream { family, vrf, dst } = &req {
                self.route_stream(&mut writer, *family, vrf.as_deref(), dst.as_deref())?;
                continue;
            }
            if let Request::RouteBatch { force } = req {
                return self.route_batch(&mut reader, &mut writer, force);
            }
            if let Request::Capture { port, label, count } = req {
                return self.capture(writer, reader.into_inner(), &port, label, count);
            }
            send(&mut writer, &self.handle(&req))?;
        }
    }

    fn capture(
        &self,
        mut writer: UnixStream,
        stream: UnixStream,
        port: &str,
        label: Option<u32>,
        count: Option<u64>,
    ) -> anyhow::Result<()> {
        let cfg_port = self.tables().config().port(port).map(|(id, p)| (id, p.interface.clone()));
        let Some((id, interface)) = cfg_port else {
            let names: Vec<&str> = self.ports.iter().map(|p| p.name.as_str()).collect();
            return send(
                &mut writer,
                &Reply::<()>::error(format!("no port named \"{port}\" (ports are: {})", names.join(", "))),
            );
        };
        if label.is_some_and(|l| l > vmpls_fib::MAX_LABEL) {
            return send(&mut writer, &Reply::<()>::error("label filter out of range (0-1048575)"));
        }
        let (tx, rx) = mpsc::sync_channel(CAPTURE_QUEUE);
        let lost = Arc::new(AtomicU64::new(0));
        let queued = Arc::new(AtomicUsize::new(0));
        let sink = CaptureSink { port: id, label, tx, queued: queued.clone(), lost: lost.clone() };
        if let Err(e) = self.lp.capture(sink) {
            return send(
                &mut writer,
                &Reply::<()>::error(ControlError::new(ErrorKind::Unavailable, format!("{e:#}"))),
            );
        }
        let fast_path = self
            .lp
            .snapshot()
            .is_ok_and(|s| s.fast_path_ports.get(usize::from(id)).copied().flatten().is_some());
        let start = CaptureStart { port: port.to_string(), interface, linktype: 1, fast_path };
        send(&mut writer, &Reply::data(Answer::CaptureStarted(start)))?;
        info!(port, ?label, ?count, "capture started");
        // A client that stops reading (but stays connected) ends the capture after this.
        writer.set_write_timeout(Some(Duration::from_secs(10)))?;
        let mut sent = 0u64;
        let result = loop {
            if count.is_some_and(|c| sent >= c) {
                break Ok(());
            }
            match rx.recv_timeout(Duration::from_millis(250)) {
                Ok(f) => {
                    queued.fetch_sub(f.data.len(), Ordering::Relaxed);
                    let frame = api::CapturedFrame {
                        ts_ns: f.ts_ns,
                        dir: f.dir,
                        data: api::base64_encode(&f.data),
                        lost: lost.load(Ordering::Relaxed),
                    };
                    let mut line = serde_json::to_vec(&frame)?;
                    line.push(b'\n');
                    if let Err(e) = writer.write_all(&line) {
                        break Err(e.into());
                    }
                    sent += 1;
                }
                Err(RecvTimeoutError::Timeout) => {
                    if peer_closed(&stream) {
                        break Ok(());
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break Ok(()),
            }
        };
        info!(port, frames = sent, lost = lost.load(Ordering::Relaxed), "capture ended");
        // Dropping `rx` tells the forwarding loop to stop copying.
        result
    }
}

impl crate::fpm::RouteSink for Server {
    /// Applies a burst of route changes from FRR as one table change, in force when this
    /// returns. Returns the changes refused, each with its reason.
    ///
    /// # Errors
    /// The tables could not be built; the running ones stay.
    fn apply_frr(&self, changes: Vec<FrrChange>) -> Result<Vec<String>, String> {
        let mut t = self.tables();
        let applied = t.apply_frr(changes).map_err(|e| e.message())?;
        self.fib.store(applied.fib);
        self.in_force();
        Ok(applied.refused)
    }
}

impl crate::pw_channel::PwSink for Server {
    /// Replaces every FRR pseudowire (the module's sync), in force when this returns.
    ///
    /// # Errors
    /// The tables refused the set; the running ones stay.
    fn pw_sync_frr(&self, pws: Vec<api::PwSpec>) -> Result<(), String> {
        self.pw_frr(|t| t.pw_sync_frr(pws))
    }

    /// Adds or changes one FRR pseudowire.
    ///
    /// # Errors
    /// The tables refused it; the running ones stay.
    fn pw_replace_frr(&self, pw: api::PwSpec) -> Result<(), String> {
        self.pw_frr(|t| t.pw_replace_frr(pw))
    }

    /// Removes one FRR pseudowire.
    ///
    /// # Errors
    /// The tables could not be made without it.
    fn pw_del_frr(&self, name: &str) -> Result<(), String> {
        self.pw_frr(|t| t.pw_del_frr(name))
    }

    /// Every pseudowire's state as `pw show` has it; `None` when the forwarding loop does
    /// not answer (it is stopping): the channel then sends nothing rather than a wrong
    /// reason, and the module says "vmpls not connected" once the router is gone.
    fn pw_declared(&self, name: &str) -> bool {
        self.tables().pw_declared(name)
    }

    fn pw_status(&self) -> Option<Vec<crate::pw_channel::PwState>> {
        match self.pw_show() {
            Ok(list) => Some(
                list.into_iter()
                    .map(|s| crate::pw_channel::PwState { name: s.name, up: s.up, reason: s.reason })
                    .collect(),
            ),
            Err(e) => {
                warn!("the pseudowires' state cannot be read: {e:#}");
                None
            }
        }
    }
}

impl crate::kernel::KernelSink for Server {
    /// Sets the addresses the kernel has on the ports and the loopback (FRR mode).
    ///
    /// # Errors
    /// The tables could not be built with them; the running ones stay.
    fn set_kernel_addresses(&self, addrs: &crate::kernel::Addresses) -> Result<(), String> {
        let mut t = self.tables();
        let fib = t
            .set_kernel_addresses(addrs.ports.clone(), (addrs.router_v4, addrs.router_v6))
            .map_err(|e| e.message())?;
        self.fib.store(fib);
        self.in_force();
        Ok(())
    }

    /// Applies one change of the kernel's static neighbours in the forwarding loop.
    ///
    /// # Errors
    /// The loop refused it (a MAC that is no unicast one) or did not answer.
    fn change_kernel_neighbor(&self, change: crate::protocol::NeighborChange) -> Result<(), String> {
        self.lp.neighbor(change).map_err(|e| format!("{e:#}"))?
    }
}

impl crate::vrfs::VrfSink for Server {
    /// Follows the kernel's VRFs in the tables (FRR mode).
    ///
    /// # Errors
    /// The tables could not be built with them; the running ones stay.
    fn set_kernel_vrfs(&self, names: &[String]) -> Result<(), String> {
        let mut t = self.tables();
        if let Some(fib) = t.set_kernel_vrfs(names).map_err(|e| e.message())? {
            self.fib.store(fib);
            self.in_force();
            info!(vrfs = ?t.config().vrfs, "the tables follow the kernel's VRFs");
        }
        Ok(())
    }
}

impl crate::metrics::StatsSource for Server {
    /// The router's name.
    fn router_name(&self) -> String {
        self.tables().config().router.name.clone()
    }

    /// All counters, from the forwarding loop now.
    ///
    /// # Errors
    /// The forwarding loop did not answer.
    fn stats(&self) -> anyhow::Result<Stats> {
        let snap = self.lp.snapshot()?;
        let mut stats = crate::stats::collect(&snap, &self.fib.load_full());
        stats.frr = self.frr.get().map(|f| f.counters(self.frr_counts())).unwrap_or_default();
        stats.vrfs = self.vrf_traffic(&stats);
        if let Some(pw) = self.pw_channel.get() {
            stats.frr.extend(pw.counters().into_iter().map(|mut c| {
                c.name.insert_str(0, "pw_channel_");
                c
            }));
        }
        Ok(stats)
    }
}

/// Whether the client closed its end (it sends nothing during a capture, so anything
/// readable is the end of the stream).
fn peer_closed(stream: &UnixStream) -> bool {
    vmpls_sys::event::peer_closed(stream)
}

fn send<T: serde::Serialize>(w: &mut impl Write, reply: &Reply<T>) -> anyhow::Result<()> {
    let mut line = serde_json::to_vec(reply)?;
    line.push(b'\n');
    w.write_all(&line)?;
    Ok(())
}

/// Starts the control thread: it accepts connections on `listener` (one thread each)
/// and reloads the config when `reload` (the SIGHUP eventfd) becomes readable.
///
/// # Errors
/// The thread could not be started.
pub fn spawn(server: Arc<Server>, listener: UnixListener, reload: EventFd) -> anyhow::Result<()> {
    listener.set_nonblocking(true).context("control socket")?;
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || accept_loop(&server, &listener, &reload))
        .context("starting the control thread")?;
    Ok(())
}

fn accept_loop(server: &Arc<Server>, listener: &UnixListener, reload: &EventFd) {
    let mut set = PollSet::new();
    let (accept, reloads) = (set.push(listener.as_fd()), set.push(reload.as_fd()));
    loop {
        // No timeout (the longest poll can wait, weeks): there is nothing to do but wait.
        if let Err(e) = set.poll(Duration::MAX) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                warn!(error = %e, "control socket poll failed");
                std::thread::sleep(Duration::from_millis(100));
            }
            continue;
        }
        if set.take(reloads).readable() {
            reload.drain();
            let _ = server.reload_logged("SIGHUP");
        }
        if set.take(accept).readable() {
            match listener.accept() {
                Ok((stream, _)) => {
                    let s = server.clone();
                    let spawned = std::thread::Builder::new().name("control-conn".into()).spawn(move || {
                        if stream.set_nonblocking(false).is_err() {
                            return;
                        }
                        if let Err(e) = s.serve(stream) {
                            tracing::debug!(error = %e, "control connection ended");
                        }
                    });
                    if let Err(e) = spawned {
                        warn!(error = %e, "cannot start a thread for a control connection");
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => warn!(error = %e, "accept on the control socket failed"),
            }
        }
    }
}

/// The state of a port's interface now: an AF_PACKET port's interface, in its namespace
/// (the router's or its VRF's), administratively up or down, with its carrier or without
/// (`IFF_RUNNING`); other kinds, whose medium has no carrier to read, are up while
/// attached. An interface that cannot be asked counts as down.
fn interface_state(port: Option<&vmpls_control::PortConfig>, detached: bool) -> api::LinkState {
    if detached {
        return api::LinkState::Detached;
    }
    let Some(pc) = port else { return api::LinkState::Down };
    if pc.kind != vmpls_control::PortKind::AfPacket {
        return api::LinkState::Up;
    }
    crate::vrfs::System::default()
        .run_in(pc.netns.as_deref(), || crate::links::interface_state(&pc.interface))
        .and_then(|r| r)
        .unwrap_or(api::LinkState::Down)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::LoopRequest;
    use std::time::Instant;

    /// A config with one port on `lo` and label `label` popped.
    fn config_text(label: u32) -> String {
        format!(
            "[router]\nname = \"r1\"\n\n[[port]]\nname = \"core\"\ninterface = \"lo\"\naddresses = [\"198.18.0.1/24\"]\n\n[[label]]\nin = {label}\naction = \"pop\"\n"
        )
    }

    fn test_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("vmpls-server-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A server for the config at `path`, with a stand-in forwarding loop that confirms
    /// each stored FIB.
    fn server_for(path: &std::path::Path) -> Arc<Server> {
        let cfg = crate::config::load_config(path).unwrap();
        let (tables, fib) = Tables::built(cfg).unwrap();
        let (lp, requests, _wake) = LoopHandle::new().unwrap();
        std::thread::spawn(move || {
            for req in requests {
                if let LoopRequest::FibStored(done) = req {
                    let _ = done.try_send(());
                }
            }
        });
        Server::new(tables, FibHandle::new(fib), lp, path.to_path_buf(), Vec::new())
    }

    fn has_label(server: &Server, label: u32) -> bool {
        server.fib.load().labels.get(label).is_some()
    }

    #[test]
    fn of_two_reloads_at_once_the_newer_file_wins() {
        let dir = test_dir("reload-race");
        let path = dir.join("r1.toml");
        std::fs::write(&path, config_text(100)).unwrap();
        let server = server_for(&path);
        std::fs::write(&path, config_text(200)).unwrap();
        // Reload A reads the file (label 200) and is held there by the test...
        let (read_tx, read) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let a = {
            let (server, path) = (server.clone(), path.clone());
            std::thread::spawn(move || {
                server
                    .reload_from(|| {
                        let cfg = crate::config::load_config(&path);
                        read_tx.send(()).unwrap();
                        go_rx.recv().unwrap();
                        cfg
                    })
                    .unwrap()
            })
        };
        read.recv().unwrap();
        // ...while the file changes again (label 300) and reload B (a SIGHUP) runs.
        std::fs::write(&path, config_text(300)).unwrap();
        let (b_done, b_finished) = mpsc::channel();
        let b = {
            let server = server.clone();
            std::thread::spawn(move || {
                let sum = server.reload().unwrap();
                let _ = b_done.send(());
                sum
            })
        };
        // B cannot finish before A: give it the time it would need, then let A go.
        let finished_first = b_finished.recv_timeout(Duration::from_millis(500)).is_ok();
        go.send(()).unwrap();
        a.join().unwrap();
        b.join().unwrap();
        assert!(has_label(&server, 300) && !has_label(&server, 200), "the older file was applied last");
        assert!(!finished_first, "a reload ran while another was between reading and applying");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_control_client_cannot_grow_a_request_line_without_bound() {
        let dir = test_dir("long-line");
        let path = dir.join("r1.toml");
        std::fs::write(&path, config_text(100)).unwrap();
        let server = server_for(&path);
        let (client, theirs) = UnixStream::pair().unwrap();
        let served = std::thread::spawn(move || server.serve(theirs));
        client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let writer = {
            let mut client = client.try_clone().unwrap();
            // Far beyond the bound, no newline ever: the server stops reading at its
            // bound, so this write fails once the server has closed.
            std::thread::spawn(move || {
                let chunk = vec![b'x'; 64 * 1024];
                let start = Instant::now();
                while start.elapsed() < Duration::from_secs(5) {
                    if client.write_all(&chunk).is_err() {
                        return true;
                    }
                }
                false
            })
        };
        let mut reply = String::new();
        BufReader::new(&client).read_line(&mut reply).unwrap();
        assert!(reply.contains("request line too long"), "{reply}");
        served.join().unwrap().unwrap();
        assert!(writer.join().unwrap(), "the server kept reading");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
