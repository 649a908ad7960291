//! A VPLS instance's MAC table (its forwarding database): which member (attachment
//! circuit or pseudowire) each source MAC was last seen on, aged out after a while,
//! bounded by the instance's MAC limit.
//!
//! Sans-I/O: time comes in as an argument. Entries expire lazily (a lookup or a learn
//! of an expired entry treats it as gone) and are swept out when the table is full
//! (at most once a second) or when the caller asks ([`MacTable::sweep`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::packet::PortId;

/// How often a full table looks for expired entries to make room, at most: a storm of
/// new source MACs at the limit costs one walk a second, not one a frame.
const SWEEP_AT_LIMIT_EVERY: Duration = Duration::from_secs(1);

/// A member of a VPLS instance: where a MAC was learned and where frames for it go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Member {
    /// An attachment circuit (a port in raw Ethernet mode).
    Ac(PortId),
    /// A pseudowire (index into the FIB's pseudowires).
    Pw(u16),
}

/// What [`MacTable::learn`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learned {
    /// A new entry.
    New,
    /// Seen again on the same member: its age starts over.
    Refreshed,
    /// Seen on another member than before: the entry moved.
    Moved {
        /// Where it was.
        from: Member,
    },
    /// Not learned: the table holds its limit of entries.
    LimitReached,
    /// Not learned: not a station's address (multicast, broadcast, all zeros).
    NotUnicast,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    member: Member,
    seen: Instant,
}

/// The MAC table of one VPLS instance.
#[derive(Debug, Clone)]
pub struct MacTable {
    entries: HashMap<[u8; 6], Entry>,
    limit: usize,
    aging: Duration,
    last_sweep: Option<Instant>,
}

/// A station's address: unicast (I/G bit clear) and not all zeros.
#[inline]
pub fn is_station(mac: [u8; 6]) -> bool {
    mac[0] & 1 == 0 && mac != [0; 6]
}

impl MacTable {
    /// An empty table of `limit` entries at most, each aged out `aging` after it was
    /// last seen.
    pub fn new(limit: usize, aging: Duration) -> MacTable {
        // Room for the usual table up front; a larger limit grows on demand.
        MacTable { entries: HashMap::with_capacity(limit.min(1024)), limit, aging, last_sweep: None }
    }

    /// Changes the limit and the aging time (entries above a lower limit stay until
    /// they age out or are withdrawn).
    pub fn set_limits(&mut self, limit: usize, aging: Duration) {
        self.limit = limit;
        self.aging = aging;
    }

    /// Entries held (expired ones not yet swept out included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    #[inline]
    fn live(&self, e: &Entry, now: Instant) -> bool {
        now.saturating_duration_since(e.seen) < self.aging
    }

    /// Records that `mac` was seen as a source on `member` at `now`.
    pub fn learn(&mut self, mac: [u8; 6], member: Member, now: Instant) -> Learned {
        if !is_station(mac) {
            return Learned::NotUnicast;
        }
        let aging = self.aging;
        if let Some(e) = self.entries.get_mut(&mac) {
            let was = e.member;
            let expired = now.saturating_duration_since(e.seen) >= aging;
            e.member = member;
            e.seen = now;
            return match (was == member, expired) {
                (true, _) => Learned::Refreshed,
                (false, true) => Learned::New,
                (false, false) => Learned::Moved { from: was },
            };
        }
        if self.entries.len() >= self.limit {
            let due =
                self.last_sweep.is_none_or(|t| now.saturating_duration_since(t) >= SWEEP_AT_LIMIT_EVERY);
            if !due || self.sweep(now) == 0 || self.entries.len() >= self.limit {
                return Learned::LimitReached;
            }
        }
        self.entries.insert(mac, Entry { member, seen: now });
        Learned::New
    }

    /// The member `mac` was learned on, if its entry has not aged out by `now`.
    #[inline]
    pub fn lookup(&self, mac: [u8; 6], now: Instant) -> Option<Member> {
        self.entries.get(&mac).filter(|e| self.live(e, now)).map(|e| e.member)
    }

    /// Removes the entries aged out by `now`; returns how many.
    pub fn sweep(&mut self, now: Instant) -> usize {
        self.last_sweep = Some(now);
        let aging = self.aging;
        let before = self.entries.len();
        self.entries.retain(|_, e| now.saturating_duration_since(e.seen) < aging);
        before - self.entries.len()
    }

    /// Removes every entry learned on a member for which `gone` is true (MAC
    /// withdrawal: a pseudowire or an attachment circuit went down or left the
    /// instance); returns how many.
    pub fn withdraw(&mut self, mut gone: impl FnMut(Member) -> bool) -> usize {
        let before = self.entries.len();
        self.entries.retain(|_, e| !gone(e.member));
        before - self.entries.len()
    }

    /// The entries alive at `now`: (MAC, member, seconds since last seen), in MAC order.
    pub fn entries(&self, now: Instant) -> Vec<([u8; 6], Member, u64)> {
        let mut v: Vec<_> = self
            .entries
            .iter()
            .filter(|(_, e)| self.live(e, now))
            .map(|(m, e)| (*m, e.member, now.saturating_duration_since(e.seen).as_secs()))
            .collect();
        v.sort_unstable_by_key(|(m, _, _)| *m);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
    const B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
    const C: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0c];

    fn table(limit: usize) -> MacTable {
        MacTable::new(limit, Duration::from_secs(300))
    }

    #[test]
    fn learns_refreshes_and_moves() {
        let t0 = Instant::now();
        let mut t = table(10);
        assert_eq!(t.learn(A, Member::Ac(1), t0), Learned::New);
        assert_eq!(t.learn(A, Member::Ac(1), t0), Learned::Refreshed);
        assert_eq!(t.lookup(A, t0), Some(Member::Ac(1)));
        assert_eq!(t.learn(A, Member::Pw(3), t0), Learned::Moved { from: Member::Ac(1) });
        assert_eq!(t.lookup(A, t0), Some(Member::Pw(3)));
        assert_eq!(t.lookup(B, t0), None);
    }

    #[test]
    fn group_and_zero_addresses_are_not_learned() {
        let mut t = table(10);
        let now = Instant::now();
        assert_eq!(t.learn([0xff; 6], Member::Ac(0), now), Learned::NotUnicast);
        assert_eq!(t.learn([0x01, 0, 0x5e, 0, 0, 1], Member::Ac(0), now), Learned::NotUnicast);
        assert_eq!(t.learn([0; 6], Member::Ac(0), now), Learned::NotUnicast);
        assert!(t.is_empty());
    }

    #[test]
    fn entries_age_out_after_the_aging_time() {
        let t0 = Instant::now();
        let mut t = MacTable::new(10, Duration::from_secs(5));
        t.learn(A, Member::Ac(1), t0);
        t.learn(B, Member::Ac(1), t0 + Duration::from_secs(3));
        assert_eq!(t.lookup(A, t0 + Duration::from_millis(4999)), Some(Member::Ac(1)));
        assert_eq!(t.lookup(A, t0 + Duration::from_secs(5)), None);
        assert_eq!(t.entries(t0 + Duration::from_secs(6)).len(), 1);
        assert_eq!(t.sweep(t0 + Duration::from_secs(6)), 1);
        assert_eq!(t.len(), 1);
        // An expired entry seen on another member is new there, not a move.
        t.learn(C, Member::Ac(1), t0);
        assert_eq!(t.learn(C, Member::Pw(0), t0 + Duration::from_secs(9)), Learned::New);
    }

    #[test]
    fn the_limit_stops_learning_until_entries_age_out() {
        let t0 = Instant::now();
        let mut t = MacTable::new(2, Duration::from_secs(5));
        assert_eq!(t.learn(A, Member::Ac(1), t0), Learned::New);
        assert_eq!(t.learn(B, Member::Ac(1), t0), Learned::New);
        assert_eq!(t.learn(C, Member::Ac(1), t0), Learned::LimitReached);
        assert_eq!(t.lookup(C, t0), None);
        // Known MACs still refresh and move at the limit.
        assert_eq!(t.learn(A, Member::Pw(2), t0), Learned::Moved { from: Member::Ac(1) });
        // Once A and B aged out, C takes a place.
        assert_eq!(t.learn(C, Member::Ac(1), t0 + Duration::from_secs(6)), Learned::New);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn withdrawal_removes_the_members_entries_only() {
        let now = Instant::now();
        let mut t = table(10);
        t.learn(A, Member::Ac(1), now);
        t.learn(B, Member::Pw(1), now);
        t.learn(C, Member::Pw(2), now);
        assert_eq!(t.withdraw(|m| m == Member::Pw(1)), 1);
        let left: Vec<_> = t.entries(now).into_iter().map(|(m, p, _)| (m, p)).collect();
        assert_eq!(left, vec![(A, Member::Ac(1)), (C, Member::Pw(2))]);
    }
}
