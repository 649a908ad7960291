//! Longest-prefix match: a path-compressed binary trie (Patricia trie) in an arena.
//!
//! Addresses of both families are handled as 128-bit keys aligned to the left (an IPv4
//! address occupies the top 32 bits), so one implementation serves both. A node is either a
//! prefix that holds a value or a branch point without one; a node has at most two
//! children, chosen by the first bit after the node's prefix. Lookups walk at most one node
//! per distinct prefix length on the path and never allocate.

use core::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use crate::FibError;
use crate::chunks::Chunks;
use crate::dir::Dir;

mod sealed {
    pub trait Sealed {}
    impl Sealed for std::net::Ipv4Addr {}
    impl Sealed for std::net::Ipv6Addr {}
}

/// An address type an [`Lpm`] can be keyed by: [`Ipv4Addr`] or [`Ipv6Addr`].
///
/// Sealed: the trie relies on the exact bit layout of these two types.
pub trait LpmKey: sealed::Sealed + Copy + fmt::Debug + Eq {
    /// Number of bits in the address: the longest prefix length.
    const BITS: u8;
    /// The address as a 128-bit key aligned to the left.
    fn to_key(self) -> u128;
    /// The inverse of [`to_key`](LpmKey::to_key) (low bits beyond `BITS` are ignored).
    fn from_key(key: u128) -> Self;
}

impl LpmKey for Ipv4Addr {
    const BITS: u8 = 32;
    #[inline]
    fn to_key(self) -> u128 {
        (u32::from(self) as u128) << 96
    }
    #[inline]
    fn from_key(key: u128) -> Self {
        Ipv4Addr::from((key >> 96) as u32)
    }
}

impl LpmKey for Ipv6Addr {
    const BITS: u8 = 128;
    #[inline]
    fn to_key(self) -> u128 {
        u128::from(self)
    }
    #[inline]
    fn from_key(key: u128) -> Self {
        Ipv6Addr::from(key)
    }
}

/// The key with only its first `len` bits kept.
#[inline]
fn mask(key: u128, len: u8) -> u128 {
    if len == 0 { 0 } else { key & (u128::MAX << (128 - u32::from(len))) }
}

/// The bit of `key` at position `pos` (0 = most significant), as a child index.
#[inline]
fn bit(key: u128, pos: u8) -> usize {
    ((key >> (127 - u32::from(pos))) & 1) as usize
}

/// Number of leading bits `a` and `b` have in common.
#[inline]
fn common_len(a: u128, b: u128) -> u8 {
    (a ^ b).leading_zeros() as u8
}

const NONE: u32 = u32::MAX;

/// A trie node, aligned to a cache line: a route table's node (a 32-byte [`PrefixRoute`]
/// in it) is exactly one line, so reading it is one miss, not two for the nodes that would
/// straddle lines.
///
/// [`PrefixRoute`]: crate::PrefixRoute
#[derive(Debug, Clone, PartialEq)]
#[repr(align(64))]
pub(crate) struct Node<V> {
    /// The prefix, masked to `len` bits.
    key: u128,
    len: u8,
    value: Option<V>,
    /// Children by the bit after the prefix; in an unused slot, `children[0]` links the
    /// next unused slot.
    children: [u32; 2],
}

/// Longest-prefix-match table from prefixes of `A` to values `V`.
///
/// Its nodes live in chunks shared between copies (see [`Lpm::clone`]): a copy costs one
/// pointer per thousand nodes, and a change to the copy copies only the few chunks it
/// writes. That is how a router publishes a new version of a table of a million prefixes
/// in microseconds while readers keep the old one.
///
/// ```
/// use std::net::Ipv4Addr;
/// use vmpls_fib::Lpm;
/// let mut t = Lpm::new();
/// t.insert(Ipv4Addr::new(198, 18, 0, 0), 15, "lab").unwrap();
/// t.insert(Ipv4Addr::new(198, 18, 2, 0), 24, "ce2").unwrap();
/// let (addr, len, v) = t.lookup(Ipv4Addr::new(198, 18, 2, 7)).unwrap();
/// assert_eq!((addr, len, *v), (Ipv4Addr::new(198, 18, 2, 0), 24, "ce2"));
/// ```
pub struct Lpm<A: LpmKey, V> {
    nodes: Chunks<Node<V>>,
    /// For IPv4: the direct index that answers lookups in two or three reads, shared
    /// between copies until one writes (a copy of a FIB of many VRFs then costs a pointer
    /// per VRF, not each VRF's 32 KiB index of /24 chunks).
    dir: Option<Arc<Dir>>,
    /// First unused slot in `nodes` (the rest are linked through `children[0]`).
    free: u32,
    root: u32,
    len: usize,
    _addr: core::marker::PhantomData<A>,
}

impl<A: LpmKey, V> Clone for Lpm<A, V> {
    /// A copy that shares every node with `self` until one of them writes.
    fn clone(&self) -> Self {
        Lpm {
            nodes: self.nodes.clone(),
            dir: self.dir.clone(),
            free: self.free,
            root: self.root,
            len: self.len,
            _addr: self._addr,
        }
    }
}

impl<A: LpmKey, V> Default for Lpm<A, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A: LpmKey, V: Clone + fmt::Debug> fmt::Debug for Lpm<A, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter().map(|(a, l, v)| (Prefix(a, l), v))).finish()
    }
}

struct Prefix<A>(A, u8);
impl<A: fmt::Debug> fmt::Debug for Prefix<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}/{}", self.0, self.1)
    }
}

impl<A: LpmKey, V> Lpm<A, V> {
    /// An empty table.
    pub fn new() -> Self {
        Lpm {
            nodes: Chunks::default(),
            dir: (A::BITS == 32).then(|| Arc::new(Dir::default())),
            free: NONE,
            root: NONE,
            len: 0,
            _addr: core::marker::PhantomData,
        }
    }

    /// Number of prefixes in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds no prefix.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<V> Default for Node<V> {
    /// An unused slot.
    fn default() -> Self {
        Node { key: 0, len: 0, value: None, children: [NONE; 2] }
    }
}

impl<V> Node<V> {
    /// The value of the prefix this node holds; `None` for a branch point.
    #[inline]
    pub(crate) fn value(&self) -> Option<&V> {
        self.value.as_ref()
    }
}

impl<A: LpmKey, V: Clone> Lpm<A, V> {
    #[inline]
    pub(crate) fn node(&self, i: u32) -> &Node<V> {
        self.nodes.get(i as usize)
    }

    /// The direct index (IPv4 tables only).
    #[inline]
    pub(crate) fn dir(&self) -> Option<&Dir> {
        self.dir.as_deref()
    }

    fn node_mut(&mut self, i: u32) -> &mut Node<V> {
        self.nodes.get_mut(i as usize)
    }

    fn alloc(&mut self, node: Node<V>) -> u32 {
        if self.free != NONE {
            let i = self.free;
            let slot = self.node_mut(i);
            let next = slot.children[0];
            *slot = node;
            self.free = next;
            i
        } else {
            self.nodes.push(node) as u32
        }
    }

    fn release(&mut self, i: u32) {
        let free = self.free;
        let n = self.node_mut(i);
        n.value = None;
        n.children = [free, NONE];
        self.free = i;
    }

    /// Follows `parent`'s child slot (or the root when `parent` is `NONE`).
    fn slot(&self, parent: u32, dir: usize) -> u32 {
        if parent == NONE { self.root } else { self.node(parent).children[dir] }
    }

    fn set_slot(&mut self, parent: u32, dir: usize, to: u32) {
        if parent == NONE {
            self.root = to;
        } else {
            self.node_mut(parent).children[dir] = to;
        }
    }

    /// Inserts `value` for the prefix `addr/len`, bits of `addr` beyond `len` ignored.
    /// Returns the value the prefix had before.
    ///
    /// # Errors
    /// [`FibError::InvalidPrefixLength`] if `len` is longer than the address.
    pub fn insert(&mut self, addr: A, len: u8, value: V) -> Result<Option<V>, FibError> {
        if len > A::BITS {
            return Err(FibError::InvalidPrefixLength { len, max: A::BITS });
        }
        if self.dir.is_some() && self.nodes.len() as u64 + 2 > u64::from(crate::dir::MAX_NODES) {
            return Err(FibError::TableFull);
        }
        let key = mask(addr.to_key(), len);
        let (old, new_node) = self.insert_node(key, len, value);
        if let (Some(dir), Some(node)) = (&mut self.dir, new_node) {
            Arc::make_mut(dir).insert((key >> 96) as u32, len, node);
        }
        Ok(old)
    }

    /// Puts `value` at `key/len`: the value it replaces, or the node of a new prefix.
    fn insert_node(&mut self, key: u128, len: u8, value: V) -> (Option<V>, Option<u32>) {
        let (mut parent, mut dir) = (NONE, 0usize);
        loop {
            let cur = self.slot(parent, dir);
            if cur == NONE {
                let leaf = self.alloc(Node { key, len, value: Some(value), children: [NONE, NONE] });
                self.set_slot(parent, dir, leaf);
                self.len += 1;
                return (None, Some(leaf));
            }
            let (nkey, nlen) = {
                let n = self.node(cur);
                (n.key, n.len)
            };
            let common = common_len(key, nkey).min(len).min(nlen);
            if common == nlen && nlen == len {
                let old = self.node_mut(cur).value.replace(value);
                if old.is_none() {
                    // A branch point that now holds a prefix.
                    self.len += 1;
                    return (None, Some(cur));
                }
                return (old, None);
            }
            if common == nlen {
                // The node's prefix covers ours: descend.
                parent = cur;
                dir = bit(key, nlen);
                continue;
            }
            if common == len {
                // Our prefix covers the node's: it becomes our child.
                let mut children = [NONE, NONE];
                children[bit(nkey, len)] = cur;
                let new = self.alloc(Node { key, len, value: Some(value), children });
                self.set_slot(parent, dir, new);
                self.len += 1;
                return (None, Some(new));
            }
            // The prefixes diverge below both: a branch node at the common length.
            let leaf = self.alloc(Node { key, len, value: Some(value), children: [NONE, NONE] });
            let mut children = [NONE, NONE];
            children[bit(key, common)] = leaf;
            children[bit(nkey, common)] = cur;
            let branch = self.alloc(Node { key: mask(key, common), len: common, value: None, children });
            self.set_slot(parent, dir, branch);
            self.len += 1;
            return (None, Some(leaf));
        }
    }

    /// Finds the node holding exactly `key/len`, with its parent and the direction from it.
    fn find(&self, key: u128, len: u8) -> Option<(u32, u32, usize)> {
        let (mut parent, mut dir) = (NONE, 0usize);
        loop {
            let cur = self.slot(parent, dir);
            if cur == NONE {
                return None;
            }
            let n = self.node(cur);
            if n.len > len || mask(key, n.len) != n.key {
                return None;
            }
            if n.len == len {
                return Some((cur, parent, dir));
            }
            parent = cur;
            dir = bit(key, n.len);
        }
    }

    /// The value of exactly the prefix `addr/len` (bits beyond `len` ignored).
    pub fn get(&self, addr: A, len: u8) -> Option<&V> {
        if len > A::BITS {
            return None;
        }
        let (i, _, _) = self.find(mask(addr.to_key(), len), len)?;
        self.node(i).value.as_ref()
    }

    /// Removes the prefix `addr/len` and returns its value.
    pub fn remove(&mut self, addr: A, len: u8) -> Option<V> {
        if len > A::BITS {
            return None;
        }
        let key = mask(addr.to_key(), len);
        let (cur, parent, dir) = self.find(key, len)?;
        let value = self.node_mut(cur).value.take()?;
        self.len -= 1;
        if self.dir.is_some() {
            let covering = self.longest_shorter(key, len);
            if let Some(d) = &mut self.dir {
                Arc::make_mut(d).remove((key >> 96) as u32, len, cur, covering);
            }
        }
        self.prune(cur, parent, dir);
        // The parent may now be a valueless branch with a single child: splice it out too.
        if parent != NONE && self.node(parent).value.is_none() {
            let (pkey, plen) = (self.node(parent).key, self.node(parent).len);
            // Locate the parent's own parent by walking from the root.
            if let Some((p, gp, gdir)) = self.find(pkey, plen) {
                self.prune(p, gp, gdir);
            }
        }
        Some(value)
    }

    /// Removes the valueless node `cur` if it has fewer than two children.
    fn prune(&mut self, cur: u32, parent: u32, dir: usize) {
        let n = self.node(cur);
        if n.value.is_some() {
            return;
        }
        match n.children {
            [NONE, NONE] => {
                self.set_slot(parent, dir, NONE);
                self.release(cur);
            }
            [only, NONE] | [NONE, only] => {
                self.set_slot(parent, dir, only);
                self.release(cur);
            }
            _ => {}
        }
    }

    /// The node and length of the longest prefix shorter than `len` that contains `key`.
    fn longest_shorter(&self, key: u128, len: u8) -> Option<(u32, u8)> {
        let mut best = None;
        let mut cur = self.root;
        while cur != NONE {
            let n = self.node(cur);
            if n.len >= len || mask(key, n.len) != n.key {
                break;
            }
            if n.value.is_some() {
                best = Some((cur, n.len));
            }
            cur = n.children[bit(key, n.len)];
        }
        best
    }

    /// The longest prefix containing `addr`: its address, length and value.
    ///
    /// Does not allocate. IPv4 reads two or three entries of the direct index and the
    /// node; IPv6 walks the trie.
    #[inline]
    pub fn lookup(&self, addr: A) -> Option<(A, u8, &V)> {
        if let Some(dir) = &self.dir {
            let n = self.node(dir.lookup((addr.to_key() >> 96) as u32)?);
            return Some((A::from_key(n.key), n.len, n.value.as_ref()?));
        }
        self.walk(addr)
    }

    /// The value of the longest prefix holding `addr`: [`Lpm::lookup`] without building
    /// the prefix, which a forwarding lookup does not need.
    #[inline]
    pub fn lookup_value(&self, addr: A) -> Option<&V> {
        if let Some(dir) = &self.dir {
            return self.node(dir.lookup((addr.to_key() >> 96) as u32)?).value.as_ref();
        }
        self.walk(addr).map(|(_, _, v)| v)
    }

    /// [`Lpm::lookup`] by walking the trie.
    fn walk(&self, addr: A) -> Option<(A, u8, &V)> {
        let key = addr.to_key();
        let mut best: Option<&Node<V>> = None;
        let mut cur = self.root;
        while cur != NONE {
            let n = self.node(cur);
            if mask(key, n.len) != n.key {
                break;
            }
            if n.value.is_some() {
                best = Some(n);
            }
            if n.len >= A::BITS {
                break;
            }
            cur = n.children[bit(key, n.len)];
        }
        let n = best?;
        Some((A::from_key(n.key), n.len, n.value.as_ref()?))
    }

    /// All prefixes in order: by address, then shorter before longer.
    pub fn iter(&self) -> impl Iterator<Item = (A, u8, &V)> + '_ {
        Iter { lpm: self, stack: if self.root == NONE { Vec::new() } else { vec![self.root] } }
    }
}

impl<A: LpmKey, V: Clone + PartialEq> Lpm<A, V> {
    /// The prefixes whose value may differ between `old` and `new`, two versions of one
    /// table (one cloned from the other, then changed), in time proportional to the change:
    /// only nodes in chunks the versions do not share are compared. A prefix may be listed
    /// twice; one that is in neither table may be listed.
    pub fn changed_prefixes<'a>(old: &'a Self, new: &'a Self) -> impl Iterator<Item = (A, u8)> + 'a {
        Chunks::changed(&old.nodes, &new.nodes).flat_map(move |i| {
            let (a, b) = (old.nodes.try_get(i), new.nodes.try_get(i));
            let valued = |n: Option<&Node<V>>| n.filter(|n| n.value.is_some()).map(|n| (n.key, n.len));
            let differ = match (a, b) {
                (Some(a), Some(b)) => (a.key, a.len, &a.value) != (b.key, b.len, &b.value),
                _ => true,
            };
            let (x, y) = if differ { (valued(a), valued(b)) } else { (None, None) };
            x.into_iter().chain(y.filter(|y| Some(*y) != x)).map(|(k, l)| (A::from_key(k), l))
        })
    }

    /// What share of `new`'s storage is not shared with `old`, as (unshared, total)
    /// chunks: a caller that diffs versions falls back to a full walk when most changed.
    pub fn unshared_chunks(old: &Self, new: &Self) -> (usize, usize) {
        Chunks::unshared(&old.nodes, &new.nodes)
    }
}

struct Iter<'a, A: LpmKey, V> {
    lpm: &'a Lpm<A, V>,
    stack: Vec<u32>,
}

impl<'a, A: LpmKey, V: Clone> Iterator for Iter<'a, A, V> {
    type Item = (A, u8, &'a V);
    fn next(&mut self) -> Option<Self::Item> {
        while let Some(i) = self.stack.pop() {
            let n = self.lpm.node(i);
            // Pre-order, child 0 before child 1: push 1 first.
            for c in [n.children[1], n.children[0]] {
                if c != NONE {
                    self.stack.push(c);
                }
            }
            if let Some(v) = &n.value {
                return Some((A::from_key(n.key), n.len, v));
            }
        }
        None
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// xorshift64*: a tiny deterministic PRNG for randomized tests.
    pub(crate) struct Rng(pub(crate) u64);
    impl Rng {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        pub(crate) fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn v4(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn longest_match_prefers_host_over_subnet_over_default() {
        let mut t = Lpm::new();
        t.insert(v4("0.0.0.0"), 0, "default").unwrap();
        t.insert(v4("198.18.1.0"), 24, "subnet").unwrap();
        t.insert(v4("198.18.1.1"), 32, "host").unwrap();
        assert_eq!(t.lookup(v4("198.18.1.1")), Some((v4("198.18.1.1"), 32, &"host")));
        assert_eq!(t.lookup(v4("198.18.1.2")), Some((v4("198.18.1.0"), 24, &"subnet")));
        assert_eq!(t.lookup(v4("203.0.113.1")), Some((v4("0.0.0.0"), 0, &"default")));
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn ipv6_longest_match_prefers_host_over_subnet_over_default() {
        let a = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        let mut t = Lpm::new();
        t.insert(a("::"), 0, 0).unwrap();
        t.insert(a("2001:db8:1::"), 64, 64).unwrap();
        t.insert(a("2001:db8:1::1"), 128, 128).unwrap();
        assert_eq!(t.lookup(a("2001:db8:1::1")).map(|x| *x.2), Some(128));
        assert_eq!(t.lookup(a("2001:db8:1::2")), Some((a("2001:db8:1::"), 64, &64)));
        assert_eq!(t.lookup(a("2001:db8:2::1")).map(|x| (x.1, *x.2)), Some((0, 0)));
    }

    #[test]
    fn no_match_without_a_covering_prefix() {
        let mut t = Lpm::new();
        t.insert(v4("198.18.1.0"), 24, ()).unwrap();
        assert!(t.lookup(v4("198.18.2.1")).is_none());
        assert!(Lpm::<Ipv4Addr, ()>::new().lookup(v4("1.2.3.4")).is_none());
    }

    #[test]
    fn insert_masks_host_bits_and_replaces() {
        let mut t = Lpm::new();
        assert_eq!(t.insert(v4("198.18.1.77"), 24, 1).unwrap(), None);
        assert_eq!(t.get(v4("198.18.1.0"), 24), Some(&1));
        assert_eq!(t.insert(v4("198.18.1.0"), 24, 2).unwrap(), Some(1));
        assert_eq!(t.len(), 1);
        assert_eq!(t.iter().next(), Some((v4("198.18.1.0"), 24, &2)));
    }

    #[test]
    fn too_long_prefix_is_an_error() {
        let mut t = Lpm::new();
        assert_eq!(t.insert(v4("1.2.3.4"), 33, ()), Err(FibError::InvalidPrefixLength { len: 33, max: 32 }));
        let mut t6 = Lpm::new();
        assert!(t6.insert(Ipv6Addr::LOCALHOST, 129, ()).is_err());
        assert!(t6.insert(Ipv6Addr::LOCALHOST, 128, ()).is_ok());
        assert!(t.get(v4("1.2.3.4"), 40).is_none());
        assert!(t.remove(v4("1.2.3.4"), 40).is_none());
    }

    #[test]
    fn remove_restores_shorter_match() {
        let mut t = Lpm::new();
        t.insert(v4("10.0.0.0"), 8, 8).unwrap();
        t.insert(v4("10.1.0.0"), 16, 16).unwrap();
        t.insert(v4("10.1.1.0"), 24, 24).unwrap();
        assert_eq!(t.remove(v4("10.1.0.0"), 16), Some(16));
        assert_eq!(t.remove(v4("10.1.0.0"), 16), None);
        assert_eq!(t.lookup(v4("10.1.1.1")).map(|x| *x.2), Some(24));
        assert_eq!(t.lookup(v4("10.1.2.1")).map(|x| *x.2), Some(8));
        assert_eq!(t.remove(v4("10.1.1.0"), 24), Some(24));
        assert_eq!(t.lookup(v4("10.1.1.1")).map(|x| *x.2), Some(8));
        assert_eq!(t.remove(v4("10.0.0.0"), 8), Some(8));
        assert!(t.is_empty());
        assert!(t.lookup(v4("10.1.1.1")).is_none());
    }

    #[test]
    fn iter_is_in_prefix_order() {
        let mut t = Lpm::new();
        for (a, l) in [("10.1.0.0", 16), ("0.0.0.0", 0), ("10.0.0.0", 8), ("9.0.0.0", 8), ("10.0.0.0", 24)] {
            t.insert(v4(a), l, ()).unwrap();
        }
        let got: Vec<_> = t.iter().map(|(a, l, _)| format!("{a}/{l}")).collect();
        assert_eq!(got, ["0.0.0.0/0", "9.0.0.0/8", "10.0.0.0/8", "10.0.0.0/24", "10.1.0.0/16"]);
    }

    /// Naive reference: scan every prefix, keep the longest that matches.
    fn naive(entries: &[(u128, u8, u32)], key: u128) -> Option<(u128, u8, u32)> {
        entries.iter().filter(|(k, l, _)| mask(key, *l) == *k).max_by_key(|(_, l, _)| *l).copied()
    }

    fn random_against_reference<A: LpmKey>(seed: u64, max_len: u8) {
        let mut rng = Rng(seed);
        let mut t: Lpm<A, u32> = Lpm::new();
        let mut reference: Vec<(u128, u8, u32)> = Vec::new();
        // Keys drawn around a few bases, low bits flipped, so prefixes nest and overlap a lot.
        let shift = 128 - u32::from(A::BITS);
        let bases: Vec<u128> =
            (0..8).map(|_| mask((rng.next() as u128) << 64 | rng.next() as u128, A::BITS)).collect();
        let random_key = |rng: &mut Rng| -> u128 {
            let base = bases[rng.below(bases.len() as u64) as usize];
            let flip_bits = rng.below(u64::from(A::BITS) + 1) as u32;
            let noise = (rng.next() as u128) << 64 | rng.next() as u128;
            let low = if flip_bits == 0 { 0 } else { noise >> (128 - flip_bits) };
            base ^ (low << shift)
        };
        for step in 0..4000u32 {
            let key = random_key(&mut rng);
            let len = (rng.below(u64::from(max_len) + 1)) as u8;
            let mkey = mask(key, len);
            match rng.below(4) {
                0 => {
                    let pos = reference.iter().position(|(k, l, _)| *k == mkey && *l == len);
                    let got = t.remove(A::from_key(key), len);
                    let want = pos.map(|p| reference.swap_remove(p).2);
                    assert_eq!(got, want);
                }
                _ => {
                    let pos = reference.iter().position(|(k, l, _)| *k == mkey && *l == len);
                    let want = pos.map(|p| core::mem::replace(&mut reference[p].2, step));
                    if pos.is_none() {
                        reference.push((mkey, len, step));
                    }
                    assert_eq!(t.insert(A::from_key(key), len, step).unwrap(), want);
                }
            }
            assert_eq!(t.len(), reference.len());
            for _ in 0..8 {
                let probe = random_key(&mut rng);
                let got = t.lookup(A::from_key(probe)).map(|(a, l, v)| (a.to_key(), l, *v));
                assert_eq!(got, naive(&reference, probe), "probe {:?}", A::from_key(probe));
                assert_eq!(t.lookup_value(A::from_key(probe)).copied(), got.map(|g| g.2));
            }
        }
        let mut sorted = reference.clone();
        sorted.sort();
        let listed: Vec<_> = t.iter().map(|(a, l, v)| (a.to_key(), l, *v)).collect();
        assert_eq!(listed, sorted);
        for (k, l, v) in &reference {
            assert_eq!(t.get(A::from_key(*k), *l), Some(v));
        }
    }

    #[test]
    fn the_ipv4_direct_index_answers_as_the_trie_walk() {
        // Lengths around the index's edges (/7-/8, /24-/25, /32, /0), prefixes nested and
        // removed in every order, groups of /25s and longer made and given back; every
        // probe answered by the index as by walking the trie, on each version and its copies.
        let mut rng = Rng(0x0d1e_2448);
        let mut t: Lpm<Ipv4Addr, u32> = Lpm::new();
        let lens = [0u8, 1, 6, 7, 8, 9, 15, 16, 23, 24, 25, 26, 30, 31, 32];
        let base = 0xc612_0000u32;
        let key = |rng: &mut Rng| base ^ (rng.next() as u32 & 0x0003_0fff) ^ ((rng.below(4) as u32) << 28);
        let mut kept = Vec::new();
        for step in 0..6000u32 {
            let a = Ipv4Addr::from(key(&mut rng));
            let len = lens[rng.below(lens.len() as u64) as usize];
            if rng.below(3) == 0 {
                t.remove(a, len);
            } else {
                t.insert(a, len, step).unwrap();
            }
            if step % 500 == 0 {
                kept.push(t.clone());
            }
            for _ in 0..4 {
                let probe = Ipv4Addr::from(key(&mut rng));
                assert_eq!(t.lookup(probe), t.walk(probe), "step {step}, probe {probe}");
                assert_eq!(t.lookup_value(probe), t.walk(probe).map(|w| w.2), "step {step}, probe {probe}");
            }
        }
        // Copies taken along the way still answer as they did.
        for (i, old) in kept.iter().enumerate() {
            for _ in 0..200 {
                let probe = Ipv4Addr::from(key(&mut rng));
                assert_eq!(old.lookup(probe), old.walk(probe), "copy {i}, probe {probe}");
            }
        }
        // Emptied, the index holds nothing.
        let all: Vec<_> = t.iter().map(|(a, l, _)| (a, l)).collect();
        for (a, l) in all {
            t.remove(a, l);
        }
        assert!(t.is_empty());
        for _ in 0..200 {
            assert_eq!(t.lookup(Ipv4Addr::from(key(&mut rng))), None);
        }
    }

    #[test]
    fn random_ipv4_matches_naive_reference() {
        random_against_reference::<Ipv4Addr>(0x9e37_79b9_7f4a_7c15, 32);
    }

    #[test]
    fn random_ipv6_matches_naive_reference() {
        random_against_reference::<Ipv6Addr>(0xdead_beef_cafe_f00d, 128);
    }
}
