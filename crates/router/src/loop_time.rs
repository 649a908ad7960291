//! Where the forwarding loop's time goes, as the pollers of DPDK applications report it
//! (OVS's `pmd-stats-show` "processing" and "idle" cycles, VPP's `show runtime`): turns
//! that received frames (busy), turns that found none (idle, awake: a polling loop spins
//! through them), and time asleep in `poll(2)`.
//!
//! A router that polls (`poll = "adaptive"`) spends its idle turns awake, so its CPU time
//! says little about what forwarding costs; the busy share of its awake time does. `vmpls
//! stats` shows it, and `vmpls bench vhost-user` charges each switch the CPU time of its
//! busy turns (its CPU time times that share), as it charges Open vSwitch's poller.
//!
//! The loop already reads the clock once a turn; the only extra read is before a `poll`
//! that may sleep (a timeout above zero), so a polling loop pays nothing for this.

use std::time::{Duration, Instant};

/// The loop's time so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopTime {
    /// Awake in turns that received frames.
    pub busy: Duration,
    /// Awake in turns that received none.
    pub idle: Duration,
    /// Asleep in `poll(2)`.
    pub slept: Duration,
    /// Turns of the loop.
    pub turns: u64,
    /// Turns that received frames.
    pub busy_turns: u64,
}

impl LoopTime {
    /// Accounts one turn: `started` (the clock read of its start) to `ended` (the next
    /// turn's), of which the `poll` that began at `asleep_from`, if it was one that could
    /// sleep, was asleep; `busy` if the turn received frames.
    pub(crate) fn turn(
        &mut self,
        started: Instant,
        ended: Instant,
        asleep_from: Option<Instant>,
        busy: bool,
    ) {
        let whole = ended.saturating_duration_since(started);
        let slept = asleep_from.map_or(Duration::ZERO, |s| ended.saturating_duration_since(s)).min(whole);
        let awake = whole - slept;
        self.slept += slept;
        self.turns += 1;
        if busy {
            self.busy += awake;
            self.busy_turns += 1;
        } else {
            self.idle += awake;
        }
    }

    /// As named counters (`stats`' `forwarding_loop`), microseconds and turns.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        vec![
            ("busy_us", us(self.busy)),
            ("idle_us", us(self.idle)),
            ("slept_us", us(self.slept)),
            ("turns", self.turns),
            ("busy_turns", self.busy_turns),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_are_split_into_busy_idle_and_asleep() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut t = LoopTime::default();
        // A busy turn of 3 ms, no sleep.
        t.turn(t0, t0 + ms(3), None, true);
        // An idle turn of 10 ms that slept the last 8 in poll.
        t.turn(t0 + ms(3), t0 + ms(13), Some(t0 + ms(5)), false);
        // An idle turn that polled without sleeping.
        t.turn(t0 + ms(13), t0 + ms(14), None, false);
        assert_eq!(t.busy, ms(3));
        assert_eq!(t.idle, ms(3));
        assert_eq!(t.slept, ms(8));
        assert_eq!((t.turns, t.busy_turns), (3, 1));
        assert_eq!(t.counters()[..3], [("busy_us", 3000), ("idle_us", 3000), ("slept_us", 8000)]);
    }

    #[test]
    fn a_clock_that_does_not_move_forward_counts_nothing_awake() {
        let t0 = Instant::now();
        let mut t = LoopTime::default();
        // The poll "began" after the turn ended (clock reads out of order): all asleep,
        // never more than the turn.
        t.turn(t0, t0, Some(t0), true);
        t.turn(t0 + Duration::from_millis(1), t0, None, true);
        assert_eq!((t.busy, t.idle, t.slept), (Duration::ZERO, Duration::ZERO, Duration::ZERO));
    }
}
