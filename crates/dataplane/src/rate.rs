//! Rate limits: one token bucket type for everything the router originates on its own
//! initiative and must not send without bound (ICMP errors, ARP requests and neighbour
//! solicitations).
//!
//! Sans-I/O like the rest of the pipeline: time comes in as an argument, so tests drive
//! the bucket with a clock of their own.

use std::time::Instant;

/// Credit units per token: tokens are counted in billionths, so a refill over any
/// whole number of nanoseconds is exact at any integer rate (no float drift).
const UNIT: u128 = 1_000_000_000;

/// A token bucket: `burst` tokens at most, `rate` new tokens a second, one token per
/// message sent. It starts full.
///
/// A rate of 0 means "never": [`take`](TokenBucket::take) always refuses, whatever the
/// burst. A burst of 0 with a non-zero rate is taken as 1 (a bucket that cannot hold a
/// token would refuse everything, which a rate of 0 already says).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: u32,
    burst: u32,
    /// Tokens in the bucket, in units of 1/[`UNIT`] token; at most `burst * UNIT`.
    credit: u128,
    /// When the credit was last brought up to date; `None` until the first `take`.
    last: Option<Instant>,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilled at `rate` tokens a second.
    pub fn new(rate: u32, burst: u32) -> TokenBucket {
        let burst = if rate == 0 { 0 } else { burst.max(1) };
        TokenBucket { rate, burst, credit: u128::from(burst) * UNIT, last: None }
    }

    /// Tokens a second.
    pub fn rate(&self) -> u32 {
        self.rate
    }

    /// Tokens the bucket holds at most (0 when the rate is 0).
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// Whole tokens in the bucket at `now`, without taking any.
    pub fn available(&self, now: Instant) -> u32 {
        let credit = self.credit_at(now) / UNIT;
        u32::try_from(credit).unwrap_or(u32::MAX)
    }

    /// Takes a token if there is one at `now`: `true` means the message may be sent.
    /// A `now` earlier than a previous call's counts as no time passing.
    pub fn take(&mut self, now: Instant) -> bool {
        self.credit = self.credit_at(now);
        if self.last.is_none_or(|last| now > last) {
            self.last = Some(now);
        }
        if self.credit >= UNIT {
            self.credit -= UNIT;
            true
        } else {
            false
        }
    }

    fn credit_at(&self, now: Instant) -> u128 {
        let cap = u128::from(self.burst) * UNIT;
        let Some(last) = self.last else { return self.credit.min(cap) };
        let elapsed = now.saturating_duration_since(last).as_nanos();
        // elapsed (< 2^64 ns in practice) times a u32 rate cannot overflow a u128.
        let earned = elapsed.saturating_mul(u128::from(self.rate));
        self.credit.saturating_add(earned).min(cap)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn takes(b: &mut TokenBucket, now: Instant, n: usize) -> usize {
        (0..n).filter(|_| b.take(now)).count()
    }

    #[test]
    fn starts_full_then_refills_at_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10, 4);
        assert_eq!(takes(&mut b, t0, 100), 4, "the burst at once");
        assert!(!b.take(t0 + Duration::from_millis(99)), "a tenth of a second earns the first token");
        assert!(b.take(t0 + Duration::from_millis(100)));
        assert!(!b.take(t0 + Duration::from_millis(100)));
        assert_eq!(takes(&mut b, t0 + Duration::from_millis(400), 100), 3);
    }

    #[test]
    fn never_holds_more_than_the_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000, 5);
        assert!(b.take(t0));
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(b.available(later), 5);
        assert_eq!(takes(&mut b, later, 100), 5);
    }

    #[test]
    fn over_a_long_run_sends_burst_plus_rate_times_time() {
        // Asked 1000 times a second for 10 s at 7/s with a burst of 3.
        let t0 = Instant::now();
        let mut b = TokenBucket::new(7, 3);
        let sent = (0..10_000).filter(|i| b.take(t0 + Duration::from_millis(*i))).count();
        assert!((3 + 69..=3 + 70).contains(&sent), "{sent}");
    }

    #[test]
    fn fractional_rates_accumulate_exactly() {
        // 3 tokens a second: one every 333.33 ms, with no rounding loss over many steps
        // (a burst of 2 so that the bucket never fills between two takes: what a full
        // bucket would earn is lost, as it should be).
        let t0 = Instant::now();
        let mut b = TokenBucket::new(3, 2);
        assert_eq!(takes(&mut b, t0, 5), 2);
        let mut sent = 0;
        for ms in 1..=60_000u64 {
            sent += usize::from(b.take(t0 + Duration::from_millis(ms)));
        }
        assert_eq!(sent, 180);
    }

    #[test]
    fn rate_zero_never_sends() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(0, 100);
        assert_eq!(b.burst(), 0);
        assert_eq!(takes(&mut b, t0, 10), 0);
        assert_eq!(takes(&mut b, t0 + Duration::from_secs(1000), 10), 0);
    }

    #[test]
    fn burst_zero_is_one() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(5, 0);
        assert_eq!((b.rate(), b.burst()), (5, 1));
        assert_eq!(takes(&mut b, t0, 10), 1);
        assert_eq!(takes(&mut b, t0 + Duration::from_millis(200), 10), 1);
    }

    #[test]
    fn time_going_backwards_earns_nothing() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut b = TokenBucket::new(10, 1);
        assert!(b.take(t0));
        assert!(!b.take(t0 - Duration::from_secs(5)));
        assert!(!b.take(t0 + Duration::from_millis(50)), "the clock was not moved back");
        assert!(b.take(t0 + Duration::from_millis(100)));
    }
}
