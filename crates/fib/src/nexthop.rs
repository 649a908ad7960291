//! Next hops and weighted ECMP groups.

use std::net::IpAddr;
use std::sync::Arc;

use crate::{FibError, IMPLICIT_NULL, Label, MAX_LABEL, PortId};

/// Most next hops one group holds.
pub const MAX_NEXTHOPS: usize = 64;

/// Most buckets a group's selection table has; weights whose sum is larger are scaled down
/// to this many buckets (each next hop keeps at least one).
const MAX_BUCKETS: u32 = 4096;

/// Where a packet goes next, and what labels it carries there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nexthop {
    /// The port to send on.
    pub port: PortId,
    /// The gateway; `None` means the destination itself is directly connected on `port`.
    pub via: Option<IpAddr>,
    /// For prefix routes: labels pushed, first = outermost (top of stack).
    /// For label routes: labels that replace the received top label; empty = pop
    /// (penultimate-hop popping). A stack of exactly `[3]` (implicit null) is normalised
    /// to empty by [`NexthopGroup::new`].
    pub labels: Vec<Label>,
    /// Relative share of traffic, at least 1.
    pub weight: u32,
}

impl Nexthop {
    /// A next hop of weight 1.
    pub fn new(port: PortId, via: Option<IpAddr>, labels: Vec<Label>) -> Self {
        Nexthop { port, via, labels, weight: 1 }
    }
}

/// One or more next hops with weights; a flow hash picks one. Immutable once built.
///
/// Selection uses a precomputed bucket table: each next hop owns a number of buckets
/// proportional to its weight, and a hash maps to a bucket by a multiply and a shift, so
/// [`select`](NexthopGroup::select) is O(1) and does not allocate.
///
/// Cloning shares the group (a reference count), so the thousands of routes that use one
/// group, and the copies of a table, cost one pointer each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NexthopGroup(Arc<Group>);

#[derive(Debug, PartialEq, Eq)]
struct Group {
    nexthops: Nexthops,
    /// Index into the next hops for each bucket.
    buckets: Box<[u8]>,
}

/// A group's next hops: a single one inline, so that forwarding by a single-path group
/// (the common case) reads the group and not a second allocation after it.
#[derive(Debug, PartialEq, Eq)]
enum Nexthops {
    One(Nexthop),
    Many(Box<[Nexthop]>),
}

impl Nexthops {
    #[inline]
    fn as_slice(&self) -> &[Nexthop] {
        match self {
            Nexthops::One(nh) => std::slice::from_ref(nh),
            Nexthops::Many(nhs) => nhs,
        }
    }
}

impl NexthopGroup {
    /// A group of the given next hops.
    ///
    /// # Errors
    /// No next hop ([`FibError::EmptyNexthopGroup`]), more than [`MAX_NEXTHOPS`]
    /// ([`FibError::TooManyNexthops`]), a weight of 0 ([`FibError::ZeroWeight`]), a label
    /// above 1048575 ([`FibError::LabelOutOfRange`]), or implicit null inside a longer stack
    /// ([`FibError::ImplicitNullInStack`]).
    pub fn new(mut nexthops: Vec<Nexthop>) -> Result<NexthopGroup, FibError> {
        if nexthops.is_empty() {
            return Err(FibError::EmptyNexthopGroup);
        }
        if nexthops.len() > MAX_NEXTHOPS {
            return Err(FibError::TooManyNexthops { count: nexthops.len() });
        }
        for (index, nh) in nexthops.iter_mut().enumerate() {
            if nh.weight == 0 {
                return Err(FibError::ZeroWeight { index });
            }
            if let Some(&label) = nh.labels.iter().find(|&&l| l > MAX_LABEL) {
                return Err(FibError::LabelOutOfRange { label });
            }
            if nh.labels == [IMPLICIT_NULL] {
                nh.labels.clear();
            } else if nh.labels.contains(&IMPLICIT_NULL) {
                return Err(FibError::ImplicitNullInStack);
            }
        }
        let buckets = bucket_table(&nexthops).into_boxed_slice();
        let nexthops = match <[Nexthop; 1]>::try_from(nexthops) {
            Ok([nh]) => Nexthops::One(nh),
            Err(nhs) => Nexthops::Many(nhs.into_boxed_slice()),
        };
        Ok(NexthopGroup(Arc::new(Group { nexthops, buckets })))
    }

    /// A group of one next hop.
    ///
    /// # Errors
    /// As [`new`](NexthopGroup::new).
    pub fn single(nexthop: Nexthop) -> Result<NexthopGroup, FibError> {
        Self::new(vec![nexthop])
    }

    /// The next hop for a flow hash. The same hash always gives the same next hop; over
    /// uniformly distributed hashes each next hop gets its weight's share of flows.
    ///
    /// A single-path group's answer inlined into the caller; the buckets out of line.
    #[inline(always)]
    pub fn select(&self, hash: u32) -> &Nexthop {
        match &self.0.nexthops {
            Nexthops::One(nh) => nh,
            Nexthops::Many(nhs) => self.select_bucket(nhs, hash),
        }
    }

    #[inline(never)]
    fn select_bucket<'a>(&'a self, nhs: &'a [Nexthop], hash: u32) -> &'a Nexthop {
        // Multiply-shift maps the 32-bit hash onto [0, buckets) without a division.
        let buckets = &self.0.buckets;
        let i = ((u64::from(mix(hash)) * buckets.len() as u64) >> 32) as usize;
        &nhs[usize::from(buckets[i])]
    }

    /// What [`select`](NexthopGroup::select) reads first: the group itself, with the next
    /// hop of a single-path group (for a prefetch; nothing is read).
    #[inline]
    pub(crate) fn header(&self) -> &impl Sized {
        &*self.0
    }

    /// The first next hop: the one a single-path group selects. Reads the group.
    #[inline]
    pub(crate) fn first(&self) -> &Nexthop {
        &self.0.nexthops.as_slice()[0]
    }

    /// The next hops, in the order given.
    pub fn nexthops(&self) -> &[Nexthop] {
        self.0.nexthops.as_slice()
    }

    /// The selection table [`select`](NexthopGroup::select) reads: an index into
    /// [`nexthops`](NexthopGroup::nexthops) per bucket (1 to 4096 buckets), so that the
    /// in-kernel fast path can select exactly alike.
    pub fn buckets(&self) -> &[u8] {
        &self.0.buckets
    }

    /// Whether the group has more than one next hop.
    #[inline]
    pub fn is_multipath(&self) -> bool {
        matches!(self.0.nexthops, Nexthops::Many(_))
    }
}

/// Spreads the hash's entropy over all bits (murmur3's finaliser), so that a hash with
/// weak high bits still selects evenly.
#[inline]
fn mix(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The bucket table: next hop `i` gets buckets in proportion to its weight.
fn bucket_table(nexthops: &[Nexthop]) -> Vec<u8> {
    let total: u64 = nexthops.iter().map(|n| u64::from(n.weight)).sum();
    let counts: Vec<u32> = if total <= u64::from(MAX_BUCKETS) {
        nexthops.iter().map(|n| n.weight).collect()
    } else {
        // Largest-remainder apportionment of MAX_BUCKETS, at least one bucket each.
        let spare = u64::from(MAX_BUCKETS) - nexthops.len() as u64;
        let mut counts: Vec<u32> = Vec::with_capacity(nexthops.len());
        let mut rems: Vec<(u64, usize)> = Vec::with_capacity(nexthops.len());
        for (i, n) in nexthops.iter().enumerate() {
            let exact = u64::from(n.weight) * spare;
            counts.push(1 + (exact / total) as u32);
            rems.push((exact % total, i));
        }
        let given: u32 = counts.iter().sum();
        rems.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for &(_, i) in rems.iter().take((MAX_BUCKETS - given) as usize) {
            counts[i] += 1;
        }
        counts
    };
    let mut buckets = Vec::with_capacity(counts.iter().sum::<u32>() as usize);
    // Interleave the owners (round-robin while buckets remain) rather than laying them out
    // in runs, so neighbouring buckets belong to different next hops.
    let mut left = counts;
    while left.iter().any(|&c| c > 0) {
        for (i, c) in left.iter_mut().enumerate() {
            if *c > 0 {
                *c -= 1;
                buckets.push(i as u8);
            }
        }
    }
    buckets
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn nh(port: PortId, weight: u32) -> Nexthop {
        Nexthop {
            port,
            via: Some(IpAddr::V4(Ipv4Addr::new(198, 18, 10, port as u8))),
            labels: vec![100 + u32::from(port)],
            weight,
        }
    }

    /// Share of `n` consecutive multiplicative-hash values each next hop receives.
    fn shares(g: &NexthopGroup, n: u32) -> Vec<f64> {
        let mut counts = vec![0u32; g.nexthops().len()];
        let mut x: u64 = 0x1234_5678;
        for _ in 0..n {
            // xorshift: uniformly distributed 32-bit hashes.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let h = (x >> 16) as u32;
            let chosen = g.select(h);
            let i = g.nexthops().iter().position(|c| std::ptr::eq(c, chosen)).unwrap();
            counts[i] += 1;
        }
        counts.iter().map(|&c| f64::from(c) / f64::from(n)).collect()
    }

    #[test]
    fn weighted_selection_shares_follow_weights() {
        for weights in [vec![2, 1], vec![1, 1, 1], vec![5, 3, 1, 1], vec![1_000_000, 1, 3_000_000]] {
            let g = NexthopGroup::new(weights.iter().enumerate().map(|(i, &w)| nh(i as u16, w)).collect())
                .unwrap();
            let sum: f64 = weights.iter().map(|&w| f64::from(w)).sum();
            let got = shares(&g, 200_000);
            for (w, s) in weights.iter().zip(&got) {
                let want = f64::from(*w) / sum;
                assert!((s - want).abs() < 0.02, "weights {weights:?}: share {s} want {want}");
            }
        }
    }

    #[test]
    fn same_hash_selects_same_nexthop() {
        let g = NexthopGroup::new(vec![nh(0, 3), nh(1, 2), nh(2, 1)]).unwrap();
        let mut seen = [false; 3];
        for h in (0..u32::MAX).step_by(7919 * 13) {
            let a = g.select(h);
            let b = g.select(h);
            assert!(std::ptr::eq(a, b));
            assert_eq!(a, g.clone().select(h));
            seen[usize::from(a.port)] = true;
        }
        assert_eq!(seen, [true; 3]);
    }

    #[test]
    fn single_nexthop_group_always_selects_it() {
        let g = NexthopGroup::single(nh(7, 1)).unwrap();
        assert!(!g.is_multipath());
        assert_eq!(g.select(0).port, 7);
        assert_eq!(g.select(u32::MAX).port, 7);
        assert!(NexthopGroup::new(vec![nh(0, 1), nh(1, 1)]).unwrap().is_multipath());
    }

    #[test]
    fn invalid_groups_are_rejected() {
        assert_eq!(NexthopGroup::new(vec![]), Err(FibError::EmptyNexthopGroup));
        assert_eq!(NexthopGroup::new(vec![nh(0, 1), nh(1, 0)]), Err(FibError::ZeroWeight { index: 1 }));
        assert_eq!(
            NexthopGroup::new((0..65).map(|i| nh(i, 1)).collect()),
            Err(FibError::TooManyNexthops { count: 65 })
        );
        assert!(NexthopGroup::new((0..64).map(|i| nh(i, 1)).collect()).is_ok());
        let mut bad = nh(0, 1);
        bad.labels = vec![1 << 20];
        assert_eq!(NexthopGroup::single(bad), Err(FibError::LabelOutOfRange { label: 1 << 20 }));
        let mut bad = nh(0, 1);
        bad.labels = vec![100, 3];
        assert_eq!(NexthopGroup::single(bad), Err(FibError::ImplicitNullInStack));
    }

    #[test]
    fn implicit_null_alone_means_no_label() {
        let mut php = nh(0, 1);
        php.labels = vec![IMPLICIT_NULL];
        let g = NexthopGroup::single(php).unwrap();
        assert!(g.nexthops()[0].labels.is_empty());
    }

    #[test]
    fn large_weights_scale_to_bounded_table_keeping_every_nexthop() {
        let g = NexthopGroup::new(vec![nh(0, u32::MAX), nh(1, 1)]).unwrap();
        assert_eq!(g.0.buckets.len(), MAX_BUCKETS as usize);
        assert!(g.0.buckets.contains(&1));
    }
}
