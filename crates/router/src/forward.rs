use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use anyhow::Context;
use vmpls_control::PollMode;
use vmpls_control::api::Direction;
use vmpls_dataplane::{Dataplane, Output, PacketPool, PortId};
use vmpls_ports::{BATCH, Port};
use vmpls_sys::EventFd;
use vmpls_sys::event::PollSet;

use crate::capture::{CaptureSink, capture};
use crate::fastpath::FastPathRuntime;
use crate::links::{LINK_CHECK_EVERY, PortWatch, check_links, refresh_caps};
use crate::loop_time::LoopTime;
use crate::protocol::{LoopRequest, NeighborChange, Snapshot};
use crate::signals::STOP;
use crate::stats::StatsFileWriter;

/// Buffers per router: enough for a full batch on every port, frames held for neighbour
/// resolution, and the segments of one super-frame.
pub(crate) const POOL_SIZE: usize = 1024;
/// How often `--stats-file` gets a snapshot.
const STATS_EVERY: Duration = Duration::from_secs(1);
/// Adaptive polling: how long the loop goes on polling after the last frame before it
/// turns the guests' kicks back on and sleeps (DPDK's and VPP's adaptive modes wait
/// tens to hundreds of microseconds): a few wake-ups' worth, so a steady stream never
/// pays them and an idle router costs nothing.
pub(crate) const POLL_IDLE: Duration = Duration::from_micros(100);

/// The forwarding loop's state: the pipeline, the ports and what the loop owns beside
/// them (buffers, the output queues, the capture subscriptions).
pub(crate) struct ForwardingLoop<'a> {
    pub(crate) dp: &'a mut Dataplane,
    pub(crate) ports: &'a mut [Box<dyn Port>],
    pub(crate) watch: &'a mut [PortWatch],
    pub(crate) fast: Option<&'a mut FastPathRuntime>,
    /// `--stats-file`'s writer thread.
    stats_file: Option<StatsFileWriter>,
    captures: Vec<CaptureSink>,
    pool: PacketPool,
    out: Output,
    /// `router.poll`.
    poll: PollMode,
    /// Where the loop's time went (`stats`' `forwarding_loop`).
    time: LoopTime,
}

impl<'a> ForwardingLoop<'a> {
    pub(crate) fn new(
        dp: &'a mut Dataplane,
        ports: &'a mut [Box<dyn Port>],
        watch: &'a mut [PortWatch],
        fast: Option<&'a mut FastPathRuntime>,
        stats_file: Option<StatsFileWriter>,
        poll: PollMode,
    ) -> Self {
        let out = Output::new(ports.len());
        ForwardingLoop {
            dp,
            ports,
            watch,
            fast,
            stats_file,
            captures: Vec::new(),
            pool: PacketPool::new(POOL_SIZE),
            out,
            poll,
            time: LoopTime::default(),
        }
    }

    /// A copy of the loop's state, exact as of now: what the fast path did since its
    /// counters were last read too.
    fn snapshot(&mut self) -> Snapshot {
        let dp = &mut *self.dp;
        if let Some(f) = self.fast.as_deref_mut() {
            f.count(dp);
        }
        let fast = self.fast.as_deref();
        Snapshot {
            counters: dp.counters().clone(),
            ports: self.ports.iter().zip(&*self.watch).map(|(p, w)| w.stats(p.as_ref())).collect(),
            neighbors: dp.neighbors().entries().collect(),
            faults: self.watch.iter().map(|w| w.faults).collect(),
            fast_path: fast.map(FastPathRuntime::named_counters).unwrap_or_default(),
            fast_path_ports: (0..self.ports.len()).map(|i| fast.and_then(|f| f.port_counts(i))).collect(),
            port_info: dp.ports().to_vec(),
            forwarding_loop: self.time,
            static_neighbors: dp
                .neighbors()
                .entries()
                .filter(|&(port, addr, _)| dp.neighbors().is_static(port, addr))
                .map(|(port, addr, _)| (port, addr))
                .collect(),
        }
    }

    /// Answers one request of the control side.
    fn answer(&mut self, req: LoopRequest) {
        let dp = &mut *self.dp;
        match req {
            LoopRequest::Snapshot(reply) => {
                // The requester may have given up; nothing to do then.
                let _ = reply.try_send(self.snapshot());
            }
            LoopRequest::Capture(sink) => self.captures.push(sink),
            LoopRequest::FibStored(reply) => {
                if let Some(f) = self.fast.as_deref_mut() {
                    f.sync(dp);
                }
                let _ = reply.try_send(());
            }
            LoopRequest::Neighbor(change, reply) => {
                let r = change_neighbor(dp, change, Instant::now(), &mut self.pool, &mut self.out);
                if let Some(f) = self.fast.as_deref_mut() {
                    f.sync(dp); // the kernel's adjacencies follow at once
                }
                let _ = reply.try_send(r);
            }
            LoopRequest::Vpls(reply) => {
                let view = crate::protocol::VplsView {
                    fdb: dp.vpls_fdb(Instant::now()),
                    link_up: (0..self.ports.len()).map(|i| dp.port_link_up(i as PortId)).collect(),
                };
                let _ = reply.try_send(view);
            }
        }
    }

    /// Sends what the pipeline queued for each port.
    fn flush(&mut self, now: Instant) {
        let ports = self.ports.iter_mut().zip(self.watch.iter_mut()).zip(self.out.tx.iter_mut());
        for (i, ((port, w), tx)) in ports.enumerate() {
            if tx.is_empty() {
                continue;
            }
            if !self.captures.is_empty() {
                capture(&mut self.captures, i as PortId, Direction::Tx, tx);
            }
            if let Err(e) = port.send_batch(tx, &mut self.pool) {
                w.error(now, &port.info().name, &format_args!("send failed: {e}"));
                for p in tx.drain(..) {
                    self.pool.put(p);
                }
            }
        }
    }

    /// Receives a batch from port `i` (it polled readable, or the loop polls it) and
    /// forwards it; returns how many frames came.
    fn receive(&mut self, now: Instant, i: usize, batch: &mut Vec<vmpls_dataplane::Packet>) -> usize {
        let (port, w) = (&mut self.ports[i], &mut self.watch[i]);
        let mut got = 0;
        match port.recv_batch(&mut self.pool, batch, BATCH) {
            Ok(0) => {}
            Ok(n) => {
                got = n;
                if w.failing {
                    w.received(&port.info().name);
                }
                if !self.captures.is_empty() {
                    capture(&mut self.captures, i as PortId, Direction::Rx, batch);
                }
                // The pipeline stops early when the pool runs low (a batch of
                // super-frames cut into segments); sending returns the buffers.
                loop {
                    self.dp.process_batch(now, batch, &mut self.pool, &mut self.out);
                    if batch.is_empty() {
                        break;
                    }
                    self.flush(now);
                }
            }
            Err(e) => w.error(now, &port.info().name, &format_args!("receive failed: {e}")),
        }
        self.flush(now);
        got
    }

    /// Adaptive polling on or off for every port. Off: the ports whose peer queued frames
    /// while its notifications were off are marked in `pending`, to be received before
    /// the loop sleeps.
    fn set_polling(&mut self, on: bool, pending: &mut [bool]) {
        for (port, p) in self.ports.iter_mut().zip(pending.iter_mut()) {
            *p |= port.set_polling(on);
        }
    }

    /// The link check: reopens ports whose interface came back, follows MTUs, and tells
    /// the fast path.
    fn check_links(&mut self, set: &mut PollSet) {
        if let Some(f) = self.fast.as_deref_mut() {
            f.check_links();
        }
        let changes = check_links(self.dp, self.ports, self.watch, set);
        if let Some(f) = self.fast.as_deref_mut() {
            for (port, ifindex) in changes.reopened {
                f.port_reopened(port, ifindex, self.ports[usize::from(port)].as_fd());
            }
            for (port, mtu) in changes.mtu {
                f.set_port_mtu(port, mtu);
            }
            // In force now: the loop may sleep a second before its next sync, and
            // frames the programs forward meanwhile would not fit.
            f.sync(self.dp);
        }
    }

    /// Hands `--stats-file`'s writer a snapshot (the counters `vmpls stats` shows); the
    /// writer thread writes it, the loop goes on.
    fn write_stats(&mut self) {
        if self.stats_file.is_none() {
            return;
        }
        let snap = self.snapshot();
        let fib = self.dp.fib().load_full();
        if let Some(w) = &mut self.stats_file {
            w.submit(snap, fib);
        }
    }

    /// At exit: the last snapshot to `--stats-file`, waited for.
    pub(crate) fn finish_stats(&mut self) {
        if let Some(w) = self.stats_file.take() {
            let snap = self.snapshot();
            w.finish(snap, self.dp.fib().load_full());
        }
    }

    /// Runs until SIGINT or SIGTERM: poll the ports and the control side's eventfd
    /// (`wake`), forward what arrives, answer `requests`, run the timers. The poll sleeps
    /// until the first deadline: the pipeline's and the fast path's (`poll_timeout`, as
    /// quinn's connections say theirs), the link check and the stats file's, so an idle
    /// router wakes only when one of them has work.
    ///
    /// `poll = "adaptive"`: once frames come, the loop stops sleeping. It receives from the
    /// ring ports (vhost-user) at every turn without their descriptors, their guests' kicks
    /// off, and polls the kernel's sockets (if any) without a timeout, until no frame came
    /// for [`POLL_IDLE`]; then the kicks go back on, each ring is looked at once more
    /// (frames queued meanwhile came without a kick) and the loop sleeps as before.
    pub(crate) fn run(&mut self, requests: &Receiver<LoopRequest>, wake: &EventFd) -> anyhow::Result<()> {
        let mut batch = Vec::with_capacity(BATCH);
        // Port `i` at index `i`, the eventfd after them.
        let mut set = PollSet::new();
        for p in self.ports.iter() {
            set.push(p.as_fd());
        }
        let woken = set.push(wake.as_fd());
        let n_ports = self.ports.len();
        // One start for both: they then fall due in the same wake-up.
        let start = Instant::now();
        let mut next_stats = start + STATS_EVERY;
        let mut next_link_check = start + LINK_CHECK_EVERY;
        let adaptive = self.poll == PollMode::Adaptive;
        // Only rings: while polling, no poll(2) at all (requests are looked for directly).
        let rings_only = self.ports.iter().all(|p| p.polls_rings());
        let mut polling = false;
        let mut last_frame = start;
        // Ports with frames found when polling stopped: received before any sleep.
        let mut pending = vec![false; n_ports];
        // The last turn: when it started, and whether it received frames.
        let mut turn_start = start;
        let mut turn_busy = false;
        while !STOP.load(Ordering::Relaxed) {
            let fast_due = self.fast.as_deref().and_then(|f| f.poll_timeout(self.dp.neighbors()));
            let deadline = [self.dp.poll_timeout(), fast_due, Some(next_link_check)]
                .into_iter()
                .flatten()
                .fold(next_stats, Instant::min);
            let polled = !(polling && rings_only);
            let mut asleep_from = None;
            if polled {
                let timeout = if polling || pending.contains(&true) {
                    Duration::ZERO
                } else {
                    let now = Instant::now();
                    asleep_from = Some(now);
                    wait_until(deadline, now)
                };
                if let Err(e) = set.poll(timeout) {
                    if e.kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(e).context("poll");
                }
            }
            let now = Instant::now();
            self.time.turn(turn_start, now, asleep_from, turn_busy);
            turn_start = now;
            let mut got = 0;
            for (i, pend) in pending.iter_mut().enumerate() {
                let ring = polling && self.ports[i].polls_rings();
                let ready = polled && self.watch[i].polled(now, &self.ports[i].info().name, &mut set, i);
                let found = std::mem::take(pend);
                if ready || ring || found {
                    got += self.receive(now, i, &mut batch);
                }
            }
            turn_busy = got > 0;
            if got > 0 {
                last_frame = now;
                if adaptive && !polling {
                    polling = true;
                    self.set_polling(true, &mut pending);
                }
            } else if polling && now.duration_since(last_frame) >= POLL_IDLE {
                polling = false;
                self.set_polling(false, &mut pending);
            }
            refresh_caps(self.dp, self.ports);
            if let Some(f) = self.fast.as_deref_mut() {
                f.sync(self.dp);
            }
            let woke = if polled { set.take(woken).readable() } else { true };
            if woke {
                if polled {
                    wake.drain();
                }
                while let Ok(req) = requests.try_recv() {
                    self.answer(req);
                }
                self.flush(now);
            }
            if self.dp.poll_timeout().is_some_and(|due| now >= due) {
                self.dp.poll(now, &mut self.pool, &mut self.out);
                self.flush(now);
            }
            if let Some(f) = self.fast.as_deref_mut()
                && f.poll_timeout(self.dp.neighbors()).is_some_and(|due| now >= due)
            {
                f.tick(now, self.dp, &mut self.pool, &mut self.out);
                self.flush(now);
            }
            if now >= next_link_check {
                self.check_links(&mut set);
                if polling {
                    // A reopened port starts polled too.
                    self.set_polling(true, &mut pending);
                }
                next_link_check = now + LINK_CHECK_EVERY;
            }
            if now >= next_stats {
                self.write_stats();
                next_stats = now + STATS_EVERY;
            }
        }
        Ok(())
    }
}

/// The poll timeout that wakes the loop at `deadline`, not before: `poll(2)` counts
/// whole milliseconds and would otherwise return just short of it, again and again.
fn wait_until(deadline: Instant, now: Instant) -> Duration {
    let nanos = deadline.saturating_duration_since(now).as_nanos();
    Duration::from_millis(u64::try_from(nanos.div_ceil(1_000_000)).unwrap_or(u64::MAX))
}

/// Applies a neighbour change to the pipeline's table (held frames released or dropped
/// into `out` / `pool`).
pub(crate) fn change_neighbor(
    dp: &mut Dataplane,
    change: NeighborChange,
    now: Instant,
    pool: &mut PacketPool,
    out: &mut Output,
) -> Result<(), String> {
    match change {
        NeighborChange::Set { port, addr, mac, replace } => {
            let set =
                if replace { Dataplane::replace_static_neighbor } else { Dataplane::set_static_neighbor };
            set(dp, now, port, addr, mac, pool, out).map_err(|e| e.to_string())
        }
        NeighborChange::Del { port, addr } => match dp.remove_neighbor(port, addr, pool) {
            true => Ok(()),
            false => Err(format!("no neighbour {addr} on this port")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poll_timeout_never_ends_before_the_deadline() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(wait_until(now + Duration::from_micros(300), now), ms(1), "not 0 ms: a spin");
        assert_eq!(wait_until(now + ms(5), now), ms(5));
        assert_eq!(wait_until(now + ms(5) + Duration::from_nanos(1), now), ms(6));
        assert_eq!(wait_until(now, now), Duration::ZERO);
        assert_eq!(wait_until(now, now + ms(3)), Duration::ZERO, "past: at once");
    }
}
