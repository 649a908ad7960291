//! The neighbour table: IPv4 (ARP) and IPv6 (neighbour discovery) next hops to MAC
//! addresses, per port, with a few frames held while an address is being resolved.
//!
//! Sans-I/O like the rest of the pipeline: the table says when to send a request and
//! which held frames to release or drop; the pipeline builds and sends the frames.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::packet::{Packet, PortId};

/// Timers and limits of the neighbour table.
#[derive(Debug, Clone, Copy)]
pub struct NeighborConfig {
    /// How long a learned address is used without asking again.
    pub reachable: Duration,
    /// How long a stale entry is still used while it is being re-confirmed.
    pub stale_grace: Duration,
    /// Interval between requests for one address.
    pub retransmit: Duration,
    /// Requests sent before giving up on an address.
    pub max_probes: u8,
    /// Frames held per unresolved address.
    pub max_held: usize,
    /// Frames held for all unresolved addresses together. Held frames keep their packet
    /// buffers: without this bound, traffic toward many silent hosts of a connected
    /// subnet (a scan) would hold `max_entries * max_held` buffers and starve the pool.
    pub max_held_total: usize,
    /// Entries in all, static ones aside; beyond this, new addresses are not resolved
    /// (frames dropped).
    pub max_entries: usize,
    /// Entries of one port, static ones aside; `None`: an equal share of `max_entries`
    /// for each port ([`NeighborConfig::for_ports`]). Whatever the hosts on one port do
    /// (spoofed requests from many addresses, answers to a scan) fills only that port's
    /// share, so the next hops of other ports still resolve. Of a port's share, and of
    /// `max_entries`, at most half goes to entries learned from hosts' requests: the rest
    /// is kept for the addresses the router itself resolves.
    pub max_entries_per_port: Option<usize>,
}

impl NeighborConfig {
    /// The configuration for a router of `ports` ports: `max_entries_per_port`, when
    /// not set, is `max_entries` shared equally (at least [`MIN_ENTRIES_PER_PORT`]).
    pub fn for_ports(self, ports: usize) -> NeighborConfig {
        let share = (self.max_entries / ports.max(1)).max(MIN_ENTRIES_PER_PORT).min(self.max_entries);
        NeighborConfig { max_entries_per_port: Some(self.max_entries_per_port.unwrap_or(share)), ..self }
    }

    fn per_port(&self) -> usize {
        self.max_entries_per_port.unwrap_or(self.max_entries)
    }
}

/// The smallest share of the neighbour table a port gets by default.
pub const MIN_ENTRIES_PER_PORT: usize = 16;

impl Default for NeighborConfig {
    fn default() -> Self {
        NeighborConfig {
            reachable: Duration::from_secs(30),
            stale_grace: Duration::from_secs(5),
            retransmit: Duration::from_secs(1),
            max_probes: 3,
            max_held: 16,
            max_held_total: 256,
            max_entries: 4096,
            max_entries_per_port: None,
        }
    }
}

#[derive(Debug)]
struct Entry {
    mac: Option<[u8; 6]>,
    /// When the MAC was last learned or confirmed.
    confirmed: Instant,
    /// `confirmed + reachable`: from then on the entry is used while it is re-confirmed.
    stale_at: Instant,
    /// When the last request went out, and how many went out since the last confirmation.
    last_probe: Option<Instant>,
    probes: u8,
    held: Vec<Packet>,
    /// A static entry (`neigh add`, `[[neighbor]]`): never aged, never asked for again,
    /// not changed by what the port hears.
    permanent: bool,
    /// Created from a host's request and not asked for by the router since: counted
    /// against the learned half of the port's share.
    learned: bool,
}

impl Entry {
    fn new(now: Instant, mac: Option<[u8; 6]>, learned: bool) -> Entry {
        Entry {
            mac,
            confirmed: now,
            stale_at: now,
            last_probe: None,
            probes: 0,
            held: Vec::new(),
            permanent: false,
            learned,
        }
    }
}

/// How many entries (static ones aside) a port has, and how many of them were learned
/// from its hosts' requests.
#[derive(Debug, Default, Clone, Copy)]
struct PortEntries {
    entries: usize,
    learned: usize,
}

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// Known; `probe` says a refresh request is due now (the entry is getting stale).
    Known { mac: [u8; 6], probe: bool },
    /// Unknown: hold the frame; `probe` says a request is due now.
    Unknown { probe: bool },
}

/// The neighbour table.
#[derive(Debug, Default)]
pub struct NeighborTable {
    entries: HashMap<(PortId, IpAddr), Entry, BuildHasherDefault<FxHasher>>,
    config: NeighborConfig,
    /// Frames held in all entries.
    held: usize,
    /// Bumped whenever a resolved entry may have changed or gone (learn, poll), so a
    /// cache of fresh resolutions (the pipeline's adjacency cache) knows when to forget.
    generation: u64,
    /// Bumped only when the resolved MACs change: an entry gets a MAC, a new one, or goes
    /// with its MAC. Refreshes and timers leave it, so what is derived from the MACs alone
    /// (the in-kernel fast path's adjacencies) is not made again every timer tick.
    macs_generation: u64,
    /// Entries by port, static ones aside (index: port id).
    per_port: Vec<PortEntries>,
    /// All entries, static ones aside, and those of them learned from hosts' requests.
    dynamic: usize,
    learned: usize,
    /// New entries refused because the port's share, the learned half or the table was
    /// full, not yet taken by [`take_refused`](NeighborTable::take_refused).
    refused: u64,
    /// No entry's timer is due before this (see [`poll_timeout`](NeighborTable::poll_timeout)):
    /// exact after [`poll`](NeighborTable::poll), lowered by every change in between, so
    /// it is never late and a walk of the table happens only when a timer may be due.
    poll_due: Option<Instant>,
}

/// How long an answer of [`NeighborTable::fresh`] for a static entry stays good: it never
/// goes stale, but callers cache answers until the time given.
const STATIC_FRESH: Duration = Duration::from_secs(3600);

/// Why a static neighbour could not be set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaticNeighborError {
    /// `add` on an address that already has a static entry (`replace` changes it).
    Exists,
    /// A broadcast, multicast or all-zero MAC: frames to it would not reach one host.
    NotUnicast(vmpls_wire::ethernet::Address),
}

impl std::fmt::Display for StaticNeighborError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StaticNeighborError::Exists => f.write_str(
                "a static neighbour for this address exists on this port; use replace to change it",
            ),
            StaticNeighborError::NotUnicast(mac) => write!(f, "{mac} is not a unicast MAC address"),
        }
    }
}

impl std::error::Error for StaticNeighborError {}

/// When [`NeighborTable::resolve`] next asks for an address of its own accord.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextRequest {
    /// No entry: the next `resolve` creates one and asks at once.
    NoEntry,
    /// Not before this time (`resolve` asks then if it is called).
    At(Instant),
    /// Never: a static entry, or one whose requests are used up and which
    /// [`poll`](NeighborTable::poll) removes.
    Never,
}

/// What a timer run asks the pipeline to do.
#[derive(Debug, Default)]
pub struct Expiry {
    /// Send a request for each of these.
    pub probes: Vec<(PortId, IpAddr)>,
    /// Frames whose next hop never answered: count and drop them.
    pub dropped: Vec<Packet>,
}

impl NeighborTable {
    /// An empty table.
    pub fn new(config: NeighborConfig) -> NeighborTable {
        NeighborTable {
            entries: HashMap::default(),
            config,
            held: 0,
            generation: 1,
            macs_generation: 1,
            per_port: Vec::new(),
            dynamic: 0,
            learned: 0,
            refused: 0,
            poll_due: None,
        }
    }

    /// When [`poll`](NeighborTable::poll) next has work (a request to send again, an
    /// incomplete or stale entry to remove), as quinn's `Connection::poll_timeout`: the
    /// caller sleeps until then and calls `poll` at that time. `None`: no timer runs. Never
    /// later than the first entry's timer; it may be earlier after an entry was
    /// refreshed or removed, and then `poll` finds nothing to do and gives the exact time.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.poll_due
    }

    /// Records that `entry_due` (an entry's timer, just set) may come before the others.
    fn timer_set(&mut self, entry_due: Option<Instant>) {
        if let Some(t) = entry_due {
            self.poll_due = Some(self.poll_due.map_or(t, |d| d.min(t)));
        }
    }

    /// When `poll` has work with entry `e`: a request to repeat or an incomplete entry
    /// to give up (a retransmission interval after the last request), a resolved entry
    /// to remove (stale for the grace period). The exact counterpart of
    /// [`poll_entry`](NeighborTable::poll_entry)'s conditions.
    fn entry_timer(cfg: &NeighborConfig, e: &Entry) -> Option<Instant> {
        match (e.permanent, e.mac) {
            (true, _) => None,
            // Never asked for yet: due at once (it was created then).
            (false, None) => Some(e.last_probe.map_or(e.confirmed, |t| t + cfg.retransmit)),
            (false, Some(_)) => Some(e.confirmed + cfg.reachable + cfg.stale_grace),
        }
    }

    /// When [`resolve`](NeighborTable::resolve) of `addr` on `port` would next send a
    /// request: what a caller that resolves on a timer of its own (the in-kernel fast
    /// path's next hops, which the pipeline never sees traffic for) waits for.
    pub fn next_request(&self, port: PortId, addr: IpAddr) -> NextRequest {
        let cfg = &self.config;
        let Some(e) = self.entries.get(&(port, addr)) else { return NextRequest::NoEntry };
        if e.permanent || e.probes >= cfg.max_probes {
            return NextRequest::Never;
        }
        let retry = e.last_probe.map(|t| t + cfg.retransmit);
        match e.mac {
            None => NextRequest::At(retry.unwrap_or(e.confirmed)),
            Some(_) => NextRequest::At(retry.map_or(e.stale_at, |r| r.max(e.stale_at))),
        }
    }

    /// Whether a new entry on `port` fits (`learned`: one created from a host's request),
    /// else counts it refused.
    fn admit(&mut self, port: PortId, learned: bool) -> bool {
        let per_port = self.config.per_port();
        let here = self.per_port.get(usize::from(port)).copied().unwrap_or_default();
        let fits = self.dynamic < self.config.max_entries
            && here.entries < per_port
            && (!learned || (here.learned < per_port / 2 && self.learned < self.config.max_entries / 2));
        if !fits {
            self.refused += 1;
        }
        fits
    }

    fn count_in(&mut self, port: PortId, learned: bool) {
        let i = usize::from(port);
        if self.per_port.len() <= i {
            self.per_port.resize(i + 1, PortEntries::default());
        }
        self.per_port[i].entries += 1;
        self.dynamic += 1;
        if learned {
            self.per_port[i].learned += 1;
            self.learned += 1;
        }
    }

    /// Takes a dynamic entry (`learned` or the router's own) out of the counts: it
    /// left, or turned static.
    fn uncount(&mut self, port: PortId, learned: bool) {
        let c = &mut self.per_port[usize::from(port)];
        c.entries -= 1;
        self.dynamic -= 1;
        if learned {
            c.learned -= 1;
            self.learned -= 1;
        }
    }

    /// New entries refused since the last call: the port's share, the learned half or
    /// the table was full (see [`NeighborConfig::max_entries_per_port`]).
    pub fn take_refused(&mut self) -> u64 {
        std::mem::take(&mut self.refused)
    }

    /// Entries of `port`, static ones aside, and how many of them were learned from
    /// hosts' requests.
    pub fn port_entries(&self, port: PortId) -> (usize, usize) {
        self.per_port.get(usize::from(port)).map_or((0, 0), |c| (c.entries, c.learned))
    }

    /// Looks up a next hop, creating an incomplete entry if it is unknown.
    pub fn resolve(&mut self, now: Instant, port: PortId, addr: IpAddr) -> Resolution {
        let cfg = self.config;
        // The common case: a known, fresh entry, one hash lookup, no clock arithmetic.
        if let Some(e) = self.entries.get(&(port, addr))
            && let Some(mac) = e.mac
            && (now < e.stale_at || e.permanent)
        {
            return Resolution::Known { mac, probe: false };
        }
        match self.entries.get_mut(&(port, addr)) {
            // The router asks for it: from now on it is one of the router's own.
            Some(e) if e.learned => {
                e.learned = false;
                self.per_port[usize::from(port)].learned -= 1;
                self.learned -= 1;
            }
            Some(_) => {}
            None => {
                if !self.admit(port, false) {
                    return Resolution::Unknown { probe: false };
                }
                self.count_in(port, false);
                self.entries.insert((port, addr), Entry::new(now, None, false));
            }
        }
        let Some(e) = self.entries.get_mut(&(port, addr)) else {
            return Resolution::Unknown { probe: false };
        };
        let probe_due = e.last_probe.is_none_or(|t| now.duration_since(t) >= cfg.retransmit);
        let resolution = match e.mac {
            Some(mac) => {
                let stale = now >= e.stale_at;
                let probe = stale && probe_due && e.probes < cfg.max_probes;
                if probe {
                    e.last_probe = Some(now);
                    e.probes += 1;
                }
                Resolution::Known { mac, probe }
            }
            None => {
                let probe = probe_due && e.probes < cfg.max_probes;
                if probe {
                    e.last_probe = Some(now);
                    e.probes += 1;
                }
                Resolution::Unknown { probe }
            }
        };
        let timer = Self::entry_timer(&cfg, e);
        self.timer_set(timer);
        resolution
    }

    /// The MAC of a known address that is not stale at `now`, and when it turns stale:
    /// exactly the case where [`resolve`](NeighborTable::resolve) answers
    /// `Known { probe: false }`, found without changing the table.
    pub fn fresh(&self, now: Instant, port: PortId, addr: IpAddr) -> Option<([u8; 6], Instant)> {
        let e = self.entries.get(&(port, addr))?;
        let mac = e.mac?;
        if e.permanent {
            return Some((mac, now + STATIC_FRESH));
        }
        (now < e.stale_at).then_some((mac, e.stale_at))
    }

    /// The MAC of a resolved address, fresh or stale, without changing the table.
    pub fn mac(&self, port: PortId, addr: IpAddr) -> Option<[u8; 6]> {
        self.entries.get(&(port, addr))?.mac
    }

    /// A number that changes whenever an answer of [`fresh`](NeighborTable::fresh) may
    /// have changed other than by time passing: an answer is good, until its stale time,
    /// for as long as this stays the same. At least 1 for a table made by
    /// [`new`](NeighborTable::new).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A number that changes whenever the answer of [`mac`](NeighborTable::mac) or the
    /// MACs of [`entries`](NeighborTable::entries) may have changed; refreshes of a MAC
    /// already known and the timers leave it alone.
    pub fn macs_generation(&self) -> u64 {
        self.macs_generation
    }

    /// Holds a frame until its next hop resolves. Gives the frame back when the queue
    /// for that address is full, all queues together hold `max_held_total` frames, or
    /// there is no entry for it.
    pub fn hold(&mut self, port: PortId, addr: IpAddr, pkt: Packet) -> Result<(), Packet> {
        let max = self.config.max_held;
        if self.held >= self.config.max_held_total {
            return Err(pkt);
        }
        match self.entries.get_mut(&(port, addr)) {
            Some(e) if e.held.len() < max => {
                e.held.push(pkt);
                self.held += 1;
                Ok(())
            }
            _ => Err(pkt),
        }
    }

    /// Frames held now, for all addresses.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Records a MAC for an address (from an ARP reply or request, or a neighbour
    /// advertisement or solicitation). With `create` false an unknown address is not
    /// added, as RFC 826's merge rule asks for frames not addressed to us. Returns the
    /// frames that were waiting for it.
    pub fn learn(
        &mut self,
        now: Instant,
        port: PortId,
        addr: IpAddr,
        mac: [u8; 6],
        create: bool,
    ) -> Vec<Packet> {
        if let Some(e) = self.entries.get_mut(&(port, addr)) {
            if e.permanent {
                return Vec::new(); // the operator's word wins over what the port hears
            }
            self.generation += 1;
            if e.mac != Some(mac) {
                self.macs_generation += 1;
            }
            e.mac = Some(mac);
            e.confirmed = now;
            e.stale_at = now + self.config.reachable;
            e.probes = 0;
            e.last_probe = None;
            self.held -= e.held.len();
            let released = std::mem::take(&mut e.held);
            let timer = Self::entry_timer(&self.config, e);
            self.timer_set(timer);
            return released;
        }
        if create && self.admit(port, true) {
            self.generation += 1;
            self.macs_generation += 1;
            self.count_in(port, true);
            let mut e = Entry::new(now, Some(mac), true);
            e.stale_at = now + self.config.reachable;
            self.timer_set(Self::entry_timer(&self.config, &e));
            self.entries.insert((port, addr), e);
        }
        Vec::new()
    }

    /// Sets a static neighbour: `addr` on `port` is `mac` until it is removed, never
    /// aged, never asked for, never changed by ARP or neighbour discovery. A learned or
    /// incomplete entry for the address becomes static; an existing static one is changed
    /// only with `replace`. Static entries do not count against `max_entries` (the
    /// operator sets them). Returns the frames that were waiting for the address.
    pub fn set_static(
        &mut self,
        now: Instant,
        port: PortId,
        addr: IpAddr,
        mac: [u8; 6],
        replace: bool,
    ) -> Result<Vec<Packet>, StaticNeighborError> {
        if mac[0] & 1 != 0 || mac == [0; 6] {
            return Err(StaticNeighborError::NotUnicast(vmpls_wire::ethernet::Address(mac)));
        }
        if let Some(e) = self.entries.get(&(port, addr)) {
            if e.permanent && !replace && e.mac != Some(mac) {
                return Err(StaticNeighborError::Exists);
            }
            if !e.permanent {
                let learned = e.learned;
                self.uncount(port, learned);
            }
        }
        let e = self
            .entries
            .entry((port, addr))
            .or_insert_with(|| Entry { permanent: true, ..Entry::new(now, None, false) });
        self.generation += 1;
        if e.mac != Some(mac) {
            self.macs_generation += 1;
        }
        *e = Entry {
            mac: Some(mac),
            confirmed: now,
            stale_at: now,
            last_probe: None,
            probes: 0,
            held: std::mem::take(&mut e.held),
            permanent: true,
            learned: false,
        };
        self.held -= e.held.len();
        Ok(std::mem::take(&mut e.held))
    }

    /// Removes the entry for `addr` on `port`, static or learned (`neigh del`). Returns
    /// whether there was one, and the frames it held (to be dropped).
    pub fn remove(&mut self, port: PortId, addr: IpAddr) -> Option<Vec<Packet>> {
        let e = self.entries.remove(&(port, addr))?;
        if !e.permanent {
            self.uncount(port, e.learned);
        }
        self.generation += 1;
        if e.mac.is_some() {
            self.macs_generation += 1;
        }
        self.held -= e.held.len();
        Some(e.held)
    }

    /// Whether the entry for `addr` on `port` is static.
    pub fn is_static(&self, port: PortId, addr: IpAddr) -> bool {
        self.entries.get(&(port, addr)).is_some_and(|e| e.permanent)
    }

    /// Runs the timers: incomplete entries that used up their requests are removed with
    /// their held frames, and so are incomplete entries that hold no frame once a
    /// retransmission interval has passed (a scan toward silent hosts cannot fill the
    /// table for longer than that); stale entries not confirmed within the grace period
    /// are removed.
    pub fn poll(&mut self, now: Instant) -> Expiry {
        let cfg = self.config;
        let mut expiry = Expiry::default();
        self.generation += 1;
        let mut macs_gone = false;
        let mut gone = Vec::new();
        let mut next_due: Option<Instant> = None;
        self.entries.retain(|&(port, addr), e| {
            let keep = Self::poll_entry(&cfg, now, port, addr, e, &mut expiry, &mut macs_gone);
            if !keep && !e.permanent {
                gone.push((port, e.learned));
            }
            if keep && let Some(t) = Self::entry_timer(&cfg, e) {
                next_due = Some(next_due.map_or(t, |d| d.min(t)));
            }
            keep
        });
        self.poll_due = next_due;
        for (port, learned) in gone {
            self.uncount(port, learned);
        }
        if macs_gone {
            self.macs_generation += 1;
        }
        self.held -= expiry.dropped.len();
        expiry
    }

    /// One entry's timers (see [`poll`](NeighborTable::poll)); whether it stays.
    fn poll_entry(
        cfg: &NeighborConfig,
        now: Instant,
        port: PortId,
        addr: IpAddr,
        e: &mut Entry,
        expiry: &mut Expiry,
        macs_gone: &mut bool,
    ) -> bool {
        let since_probe = e.last_probe.map(|t| now.duration_since(t));
        match e.mac {
            None => {
                let due = since_probe.is_none_or(|d| d >= cfg.retransmit);
                if e.probes >= cfg.max_probes && due {
                    expiry.dropped.append(&mut e.held);
                    return false;
                }
                if e.held.is_empty() && due {
                    // Nothing waits for it (its frames were refused: queues full):
                    // keeping it would only take a place in the table. The next
                    // frame toward the address asks again.
                    return false;
                }
                if due {
                    e.last_probe = Some(now);
                    e.probes += 1;
                    expiry.probes.push((port, addr));
                }
                true
            }
            Some(_) => {
                let keep = e.permanent || now.duration_since(e.confirmed) < cfg.reachable + cfg.stale_grace;
                *macs_gone |= !keep;
                keep
            }
        }
    }

    /// The entries as (port, address, MAC if resolved), for display.
    pub fn entries(&self) -> impl Iterator<Item = (PortId, IpAddr, Option<[u8; 6]>)> + '_ {
        self.entries.iter().map(|(&(p, a), e)| (p, a, e.mac))
    }
}

/// The multiply-rotate hash of rustc's `FxHasher`: a few instructions per word, where the
/// standard SipHash costs hundreds per lookup. It does not resist chosen collisions; a
/// sender on a connected subnet can pick the addresses that create entries, but the table
/// holds at most `max_entries`, which bounds what colliding keys can cost.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
        }
        for &b in chunks.remainder() {
            self.add(u64::from(b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn addr() -> IpAddr {
        "198.18.10.2".parse().unwrap()
    }

    #[test]
    fn unknown_address_holds_frames_until_learned() {
        let cfg = NeighborConfig::default();
        let mut t = NeighborTable::new(cfg);
        let now = Instant::now();
        assert_eq!(t.resolve(now, 1, addr()), Resolution::Unknown { probe: true });
        assert_eq!(t.resolve(now, 1, addr()), Resolution::Unknown { probe: false });
        for _ in 0..cfg.max_held {
            t.hold(1, addr(), Packet::new()).unwrap();
        }
        assert!(t.hold(1, addr(), Packet::new()).is_err(), "queue is bounded");
        let released = t.learn(now, 1, addr(), MAC, false);
        assert_eq!(released.len(), cfg.max_held);
        assert_eq!(t.resolve(now, 1, addr()), Resolution::Known { mac: MAC, probe: false });
    }

    #[test]
    fn unanswered_requests_give_up_and_drop_held_frames() {
        let cfg = NeighborConfig::default();
        let mut t = NeighborTable::new(cfg);
        let t0 = Instant::now();
        t.resolve(t0, 0, addr());
        t.hold(0, addr(), Packet::new()).unwrap();
        let mut probes = 1;
        let mut dropped = 0;
        for s in 1..10 {
            let e = t.poll(t0 + Duration::from_secs(s));
            probes += e.probes.len();
            dropped += e.dropped.len();
        }
        assert_eq!(probes, usize::from(cfg.max_probes));
        assert_eq!(dropped, 1);
        assert_eq!(t.entries().count(), 0);
    }

    #[test]
    fn stale_entries_are_refreshed_then_timed_out() {
        let cfg = NeighborConfig::default();
        let mut t = NeighborTable::new(cfg);
        let t0 = Instant::now();
        t.learn(t0, 0, addr(), MAC, true);
        let later = t0 + cfg.reachable;
        assert_eq!(t.resolve(later, 0, addr()), Resolution::Known { mac: MAC, probe: true });
        assert_eq!(t.poll(later).dropped.len(), 0);
        assert_eq!(t.entries().count(), 1);
        t.poll(later + cfg.stale_grace);
        assert_eq!(t.entries().count(), 0, "not re-confirmed: removed");
    }

    #[test]
    fn held_frames_are_bounded_across_all_addresses() {
        let cfg = NeighborConfig { max_held_total: 5, ..NeighborConfig::default() };
        let mut t = NeighborTable::new(cfg);
        let t0 = Instant::now();
        let host = |i: u8| IpAddr::from([198, 18, 10, i]);
        let mut refused = 0;
        for i in 1..=4 {
            t.resolve(t0, 0, host(i));
            for _ in 0..2 {
                refused += usize::from(t.hold(0, host(i), Packet::new()).is_err());
            }
        }
        assert_eq!((t.held(), refused), (5, 3));
        assert_eq!(t.learn(t0, 0, host(1), MAC, false).len(), 2);
        assert_eq!(t.held(), 3);
        t.hold(0, host(4), Packet::new()).unwrap();
        let mut dropped = 0;
        for s in 1..10 {
            dropped += t.poll(t0 + Duration::from_secs(s)).dropped.len();
        }
        assert_eq!((dropped, t.held()), (4, 0));
    }

    #[test]
    fn incomplete_entries_holding_nothing_leave_after_a_retransmission_interval() {
        let cfg = NeighborConfig { max_entries: 3, max_held_total: 1, ..NeighborConfig::default() };
        let mut t = NeighborTable::new(cfg);
        let t0 = Instant::now();
        let host = |i: u8| IpAddr::from([198, 18, 10, i]);
        for i in 1..=5 {
            t.resolve(t0, 0, host(i));
            let _ = t.hold(0, host(i), Packet::new());
        }
        assert_eq!((t.entries().count(), t.held()), (3, 1), "full: hosts 4 and 5 are not added");
        assert_eq!(t.resolve(t0, 0, host(4)), Resolution::Unknown { probe: false });
        let e = t.poll(t0 + cfg.retransmit / 2);
        assert_eq!((e.probes.len(), t.entries().count()), (0, 3), "not yet");
        let e = t.poll(t0 + cfg.retransmit);
        assert_eq!(e.probes, vec![(0, host(1))], "only the entry with a frame is asked for again");
        assert!(e.dropped.is_empty());
        assert_eq!(t.entries().count(), 1);
        assert_eq!(t.resolve(t0 + cfg.retransmit, 0, host(4)), Resolution::Unknown { probe: true });
    }

    #[test]
    fn static_entries_are_never_aged_asked_for_or_overridden() {
        let cfg = NeighborConfig::default();
        let mut t = NeighborTable::new(cfg);
        let t0 = Instant::now();
        let other = [2, 0, 0, 0, 0, 9];
        assert!(t.set_static(t0, 1, addr(), MAC, false).unwrap().is_empty());
        assert!(t.is_static(1, addr()));
        // Long after any learned entry would have been re-confirmed or removed.
        let later = t0 + (cfg.reachable + cfg.stale_grace) * 10;
        let e = t.poll(later);
        assert!(e.probes.is_empty() && e.dropped.is_empty());
        assert_eq!(t.resolve(later, 1, addr()), Resolution::Known { mac: MAC, probe: false });
        assert_eq!(t.fresh(later, 1, addr()).map(|f| f.0), Some(MAC));
        // ARP or ND with another MAC does not change it.
        t.learn(later, 1, addr(), other, true);
        assert_eq!(t.mac(1, addr()), Some(MAC));
        // add again: the same MAC is fine, another needs replace.
        assert!(t.set_static(later, 1, addr(), MAC, false).is_ok());
        assert_eq!(t.set_static(later, 1, addr(), other, false).err(), Some(StaticNeighborError::Exists));
        let g = t.generation();
        assert!(t.set_static(later, 1, addr(), other, true).is_ok());
        assert_ne!(t.generation(), g, "a cached adjacency must not keep the old MAC");
        assert_eq!(t.mac(1, addr()), Some(other));
        assert!(t.remove(1, addr()).is_some());
        assert!(t.remove(1, addr()).is_none());
        assert_eq!(t.entries().count(), 0);
    }

    #[test]
    fn a_static_entry_wins_over_a_learned_one_and_releases_held_frames() {
        let mut t = NeighborTable::new(NeighborConfig { max_entries: 1, ..NeighborConfig::default() });
        let now = Instant::now();
        assert_eq!(t.resolve(now, 1, addr()), Resolution::Unknown { probe: true });
        t.hold(1, addr(), Packet::new()).unwrap();
        let released = t.set_static(now, 1, addr(), MAC, false).unwrap();
        assert_eq!((released.len(), t.held()), (1, 0));
        assert_eq!(t.resolve(now, 1, addr()), Resolution::Known { mac: MAC, probe: false });
        // A learned entry turns static; a full table does not stop a static entry.
        let host = IpAddr::from([198, 18, 10, 3]);
        assert!(t.set_static(now, 1, host, MAC, false).is_ok());
        assert_eq!(t.entries().count(), 2);
        for bad in [[0xff; 6], [1, 0, 0x5e, 0, 0, 1], [0; 6]] {
            assert!(matches!(t.set_static(now, 1, host, bad, true), Err(StaticNeighborError::NotUnicast(_))));
        }
    }

    #[test]
    fn each_port_has_its_share_and_hosts_only_half_of_it() {
        let cfg = NeighborConfig { max_entries: 100, ..NeighborConfig::default() }.for_ports(2);
        assert_eq!(cfg.max_entries_per_port, Some(50));
        let mut t = NeighborTable::new(cfg);
        let t0 = Instant::now();
        let host = |i: u8| IpAddr::from([198, 18, 1, i]);
        for i in 1..=40 {
            t.learn(t0, 0, host(i), MAC, true);
        }
        assert_eq!((t.port_entries(0), t.take_refused()), ((25, 25), 15));
        // The router's own resolutions take the other half, and no more.
        for i in 100..140 {
            t.resolve(t0, 0, host(i));
        }
        assert_eq!((t.port_entries(0), t.take_refused()), ((50, 25), 15));
        // The other port is untouched by all of it.
        assert_eq!(t.resolve(t0, 1, host(1)), Resolution::Unknown { probe: true });
        // A learned entry the router asks for becomes its own; a static one leaves the
        // counts; removed and timed-out entries give their places back.
        t.resolve(t0 + cfg.reachable, 0, host(1));
        assert_eq!(t.port_entries(0), (50, 24));
        t.set_static(t0, 0, host(2), MAC, false).unwrap();
        assert_eq!(t.port_entries(0), (49, 23));
        t.remove(0, host(2));
        t.remove(0, host(3));
        assert_eq!(t.port_entries(0), (48, 22));
        t.poll(t0 + (cfg.reachable + cfg.stale_grace) * 2);
        assert_eq!((t.port_entries(0), t.port_entries(1)), ((0, 0), (0, 0)));
        assert_eq!(t.entries().count(), 0);
    }

    #[test]
    fn the_counts_follow_the_entries_through_every_change() {
        let cfg =
            NeighborConfig { max_entries: 40, max_entries_per_port: Some(16), ..NeighborConfig::default() };
        let mut t = NeighborTable::new(cfg);
        let t0 = Instant::now();
        let mut now = t0;
        let mut seed = 0x2545_f491u64;
        let mut rand = |k: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % k
        };
        for step in 0..20_000 {
            let port = rand(3) as PortId;
            let addr = IpAddr::from([198, 18, port as u8, rand(40) as u8]);
            match rand(8) {
                0 | 1 => {
                    t.resolve(now, port, addr);
                }
                2 | 3 => {
                    t.learn(now, port, addr, MAC, rand(4) > 0);
                }
                4 => {
                    let _ = t.set_static(now, port, addr, MAC, rand(2) == 0);
                }
                5 => {
                    t.remove(port, addr);
                }
                _ => {
                    now += Duration::from_millis(rand(3000));
                    t.poll(now);
                }
            }
            for p in 0..3 {
                let mine = t.entries.iter().filter(|((q, _), e)| *q == p && !e.permanent);
                let learned = mine.clone().filter(|(_, e)| e.learned).count();
                assert_eq!(t.port_entries(p), (mine.count(), learned), "step {step}, port {p}");
                assert!(t.port_entries(p).0 <= 16 && learned <= 8, "step {step}");
            }
            assert_eq!(t.dynamic, t.entries.values().filter(|e| !e.permanent).count());
            assert_eq!(t.learned, t.entries.values().filter(|e| e.learned).count());
            assert!(t.dynamic <= 40 && t.learned <= 20);
        }
    }

    #[test]
    fn merge_rule_does_not_create_entries() {
        let mut t = NeighborTable::new(NeighborConfig::default());
        t.learn(Instant::now(), 0, addr(), MAC, false);
        assert_eq!(t.entries().count(), 0);
    }

    #[test]
    fn fresh_matches_resolve_and_generation_tracks_changes() {
        let cfg = NeighborConfig::default();
        let mut t = NeighborTable::new(cfg);
        let now = Instant::now();
        assert!(t.generation() >= 1);
        assert_eq!(t.fresh(now, 1, addr()), None, "unknown");
        t.resolve(now, 1, addr());
        assert_eq!(t.fresh(now, 1, addr()), None, "incomplete");
        let g0 = t.generation();
        t.learn(now, 1, addr(), MAC, false);
        let g1 = t.generation();
        assert_ne!(g0, g1, "learning changes the generation");
        assert_eq!(t.fresh(now, 1, addr()), Some((MAC, now + cfg.reachable)));
        assert_eq!(t.fresh(now, 2, addr()), None, "per port");
        assert_eq!(t.fresh(now + cfg.reachable, 1, addr()), None, "stale");
        t.resolve(now, 1, addr());
        assert_eq!(t.generation(), g1, "lookups leave it alone");
        t.poll(now);
        assert_ne!(t.generation(), g1, "timers change it");
    }

    #[test]
    fn an_unanswered_request_is_due_again_after_the_retransmission_interval() {
        let cfg = NeighborConfig::default();
        let mut t = NeighborTable::new(cfg);
        let t0 = Instant::now();
        assert_eq!(t.poll_timeout(), None, "an empty table runs no timer");
        assert_eq!(t.next_request(0, addr()), NextRequest::NoEntry);
        assert_eq!(t.resolve(t0, 0, addr()), Resolution::Unknown { probe: true });
        t.hold(0, addr(), Packet::new()).unwrap();
        let retry = t0 + cfg.retransmit;
        assert_eq!(t.poll_timeout(), Some(retry));
        assert_eq!(t.next_request(0, addr()), NextRequest::At(retry));
        let early = t.poll(retry - Duration::from_nanos(1));
        assert!(early.probes.is_empty(), "not before its time");
        assert_eq!(t.poll_timeout(), Some(retry), "a poll with nothing due gives the same time");
        assert_eq!(t.poll(retry).probes, vec![(0, addr())], "the request is sent again at its time");
        assert_eq!(t.poll_timeout(), Some(retry + cfg.retransmit));
    }

    #[test]
    fn held_frames_are_dropped_at_the_time_given_after_the_last_request() {
        let cfg = NeighborConfig::default();
        let mut t = NeighborTable::new(cfg);
        let t0 = Instant::now();
        t.resolve(t0, 0, addr());
        t.hold(0, addr(), Packet::new()).unwrap();
        let mut probes = 1;
        let mut polls = 0;
        // Polled only when it says: every request, then the give-up, and nothing else.
        while let Some(due) = t.poll_timeout() {
            let e = t.poll(due);
            polls += 1;
            probes += e.probes.len();
            if !e.dropped.is_empty() {
                assert_eq!(
                    due,
                    t0 + cfg.retransmit * u32::from(cfg.max_probes),
                    "dropped after the last request's interval"
                );
                assert_eq!(e.dropped.len(), 1);
            }
            assert!(polls <= 10, "the timers end");
        }
        assert_eq!(probes, usize::from(cfg.max_probes));
        assert_eq!(polls, usize::from(cfg.max_probes));
        assert_eq!(t.entries().count(), 0);
    }

    #[test]
    fn a_learned_entry_ages_out_at_its_time() {
        let cfg = NeighborConfig::default();
        let mut t = NeighborTable::new(cfg);
        let t0 = Instant::now();
        t.learn(t0, 0, addr(), MAC, true);
        let gone_at = t0 + cfg.reachable + cfg.stale_grace;
        assert_eq!(t.poll_timeout(), Some(gone_at));
        // Stale at `reachable`: the next frame (or the fast path's tick) asks again.
        assert_eq!(t.next_request(0, addr()), NextRequest::At(t0 + cfg.reachable));
        t.poll(gone_at - Duration::from_nanos(1));
        assert_eq!(t.entries().count(), 1, "kept until its time");
        t.poll(gone_at);
        assert_eq!(t.entries().count(), 0, "aged out at its time");
        assert_eq!(t.poll_timeout(), None);
    }

    #[test]
    fn a_refreshed_entry_is_polled_early_once_then_at_its_new_time() {
        let cfg = NeighborConfig::default();
        let mut t = NeighborTable::new(cfg);
        let t0 = Instant::now();
        t.learn(t0, 0, addr(), MAC, true);
        let later = t0 + cfg.reachable;
        t.learn(later, 0, addr(), MAC, false);
        let first = t0 + cfg.reachable + cfg.stale_grace;
        assert_eq!(t.poll_timeout(), Some(first), "never late: the earlier time stands");
        t.poll(first);
        assert_eq!(t.entries().count(), 1, "refreshed: kept");
        assert_eq!(t.poll_timeout(), Some(later + cfg.reachable + cfg.stale_grace));
    }

    #[test]
    fn a_static_entry_runs_no_timer() {
        let mut t = NeighborTable::new(NeighborConfig::default());
        let t0 = Instant::now();
        t.set_static(t0, 0, addr(), MAC, false).unwrap();
        assert_eq!(t.next_request(0, addr()), NextRequest::Never);
        t.poll(t0);
        assert_eq!(t.poll_timeout(), None);
    }

    #[test]
    fn the_macs_generation_changes_only_with_the_macs() {
        let cfg = NeighborConfig::default();
        let mut t = NeighborTable::new(cfg);
        let now = Instant::now();
        let g = t.macs_generation();
        t.resolve(now, 1, addr());
        t.poll(now);
        assert_eq!(t.macs_generation(), g, "an incomplete entry and the timers: no MAC changed");
        t.learn(now, 1, addr(), MAC, false);
        let g1 = t.macs_generation();
        assert_ne!(g1, g, "a MAC learned");
        t.learn(now + cfg.reachable / 2, 1, addr(), MAC, false);
        t.poll(now + cfg.reachable / 2);
        assert_eq!(t.macs_generation(), g1, "a refresh of the same MAC and the timers leave it");
        let other = [2, 0, 0, 0, 0, 0x99];
        t.learn(now, 1, addr(), other, false);
        let g2 = t.macs_generation();
        assert_ne!(g2, g1, "a new MAC");
        t.poll(now + cfg.reachable + cfg.stale_grace + Duration::from_secs(1));
        assert_eq!(t.entries().count(), 0);
        assert_ne!(t.macs_generation(), g2, "an entry gone with its MAC");
        let g3 = t.macs_generation();
        t.set_static(now, 1, addr(), other, false).unwrap();
        assert_ne!(t.macs_generation(), g3, "a static entry");
        let g4 = t.macs_generation();
        t.remove(1, addr());
        assert_ne!(t.macs_generation(), g4, "removed");
    }
}
