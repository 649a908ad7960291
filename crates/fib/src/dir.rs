//! A direct index over an IPv4 prefix trie (DIR-24-8, as DPDK's `rte_lpm` and most
//! hardware FIBs lay it out), so that a lookup costs two or three memory reads whatever
//! the size of the table, instead of one read per trie level (up to 32).
//!
//! Three tables of entries, each entry naming the trie node of the longest prefix that
//! covers it, with that prefix's length (its "depth"):
//! - `tbl24`, one entry per /24, for prefixes of length 8 to 24 (a /16 fills 256
//!   entries);
//! - `tbl8` groups of 256 entries, one group per /24 that holds longer prefixes: the
//!   /24's entry then points to its group, whose entries also carry what covers the /24;
//! - `short`, one entry per /8, for prefixes shorter than 8 (so that a default route does
//!   not fill sixteen million entries), consulted when the others have no match.
//!
//! `tbl24` is allocated in chunks as used and every table is shared between copies chunk
//! by chunk (copy-on-write), like the trie itself: a change copies the chunks it writes.

use std::sync::Arc;

use crate::chunks::Chunks;

/// Entries in a chunk of `tbl24`.
const CHUNK24: usize = 4096;
const CHUNKS24: usize = (1 << 24) / CHUNK24;
/// An entry that points to a `tbl8` group (its index in the low bits).
const EXT: u32 = 1 << 31;
const DEPTH_SHIFT: u32 = 25;
/// The node index + 1 (0 = no match).
const NODE_MASK: u32 = (1 << DEPTH_SHIFT) - 1;
/// The most trie nodes the index can name.
pub(crate) const MAX_NODES: u32 = NODE_MASK - 1;

fn entry(depth: u8, node: u32) -> u32 {
    debug_assert!(node < MAX_NODES);
    (u32::from(depth) << DEPTH_SHIFT) | (node + 1)
}

fn depth(e: u32) -> u8 {
    ((e >> DEPTH_SHIFT) & 0x3f) as u8
}

/// Whether a prefix of length `len` replaces the entry `e` (no match, or a shorter one).
fn yields_to(e: u32, len: u8) -> bool {
    e == 0 || depth(e) <= len
}

#[derive(Debug, Clone)]
pub(crate) struct Dir {
    short: [u32; 256],
    tbl24: Vec<Option<Arc<[u32; CHUNK24]>>>,
    tbl8: Chunks<u32>,
    /// Groups of `tbl8` not in use.
    free8: Vec<u32>,
}

impl Default for Dir {
    fn default() -> Self {
        Dir { short: [0; 256], tbl24: Vec::new(), tbl8: Chunks::default(), free8: Vec::new() }
    }
}

impl Dir {
    /// The trie node of the longest prefix containing `a`.
    #[inline]
    pub(crate) fn lookup(&self, a: u32) -> Option<u32> {
        let e = self.entry24(a).copied().unwrap_or(0);
        match self.entry8(a, e) {
            Ok(&e) => self.finish(a, e),
            Err(node) => node,
        }
    }

    /// The first read of [`lookup`](Dir::lookup): the /24's entry of `a`, if its chunk of
    /// `tbl24` exists (else the lookup reads only `short`, which stays in cache).
    #[inline]
    pub(crate) fn entry24(&self, a: u32) -> Option<&u32> {
        let slot = (a >> 8) as usize;
        match self.tbl24.get(slot / CHUNK24) {
            Some(Some(chunk)) => Some(&chunk[slot % CHUNK24]),
            _ => None,
        }
    }

    /// The second read of [`lookup`](Dir::lookup), given the /24's entry `e`: the `tbl8`
    /// entry of `a` if `e` points to a group, else `Err` with the lookup's result.
    #[inline]
    pub(crate) fn entry8(&self, a: u32, e: u32) -> Result<&u32, Option<u32>> {
        if e & EXT != 0 {
            Ok(self.tbl8.get(((e & !EXT) as usize) << 8 | (a & 0xff) as usize))
        } else {
            Err(self.finish(a, e))
        }
    }

    /// The lookup's result from the last entry it read (`short` when that one has no match).
    #[inline]
    pub(crate) fn finish(&self, a: u32, mut e: u32) -> Option<u32> {
        if e == 0 {
            e = self.short[(a >> 24) as usize];
        }
        (e != 0).then(|| (e & NODE_MASK) - 1)
    }

    #[inline]
    fn get24(&self, slot: u32) -> u32 {
        let slot = slot as usize;
        match self.tbl24.get(slot / CHUNK24) {
            Some(Some(chunk)) => chunk[slot % CHUNK24],
            _ => 0,
        }
    }

    fn set24(&mut self, slot: u32, e: u32) {
        let slot = slot as usize;
        if self.tbl24.is_empty() {
            self.tbl24.resize(CHUNKS24, None);
        }
        let chunk = self.tbl24[slot / CHUNK24].get_or_insert_with(|| Arc::new([0; CHUNK24]));
        Arc::make_mut(chunk)[slot % CHUNK24] = e;
    }

    fn group(&self, g: u32) -> impl Iterator<Item = u32> + '_ {
        (0..256).map(move |i| *self.tbl8.get((g as usize) << 8 | i))
    }

    /// The group of the /24 `slot`, made (with what covers the /24) if it has none.
    fn group_of(&mut self, slot: u32) -> u32 {
        let cur = self.get24(slot);
        if cur & EXT != 0 {
            return cur & !EXT;
        }
        let g = match self.free8.pop() {
            Some(g) => {
                for i in 0..256 {
                    *self.tbl8.get_mut((g as usize) << 8 | i) = cur;
                }
                g
            }
            None => {
                let g = (self.tbl8.len() >> 8) as u32;
                for _ in 0..256 {
                    self.tbl8.push(cur);
                }
                g
            }
        };
        self.set24(slot, EXT | g);
        g
    }

    /// Sets the entries of group `g` in `range` that satisfy `replace` to `e`.
    fn set_in_group(&mut self, g: u32, range: std::ops::Range<u32>, replace: impl Fn(u32) -> bool, e: u32) {
        for i in range {
            let slot = self.tbl8.get_mut((g as usize) << 8 | i as usize);
            if replace(*slot) {
                *slot = e;
            }
        }
    }

    /// A new prefix `a/len` held by trie node `node`.
    pub(crate) fn insert(&mut self, a: u32, len: u8, node: u32) {
        let e = entry(len, node);
        if len < 8 {
            for s in span(a >> 24, 8 - len) {
                if yields_to(self.short[s as usize], len) {
                    self.short[s as usize] = e;
                }
            }
        } else if len <= 24 {
            for slot in span(a >> 8, 24 - len) {
                let cur = self.get24(slot);
                if cur & EXT != 0 {
                    self.set_in_group(cur & !EXT, 0..256, |x| yields_to(x, len), e);
                } else if yields_to(cur, len) {
                    self.set24(slot, e);
                }
            }
        } else {
            let g = self.group_of(a >> 8);
            self.set_in_group(g, span(a & 0xff, 32 - len), |x| yields_to(x, len), e);
        }
    }

    /// The prefix `a/len` of trie node `node` is gone; `parent` is the node and length of
    /// the longest prefix that covers it now, if any.
    pub(crate) fn remove(&mut self, a: u32, len: u8, node: u32, parent: Option<(u32, u8)>) {
        let old = entry(len, node);
        if len < 8 {
            let repl = parent.map_or(0, |(n, l)| entry(l, n));
            for s in span(a >> 24, 8 - len) {
                if self.short[s as usize] == old {
                    self.short[s as usize] = repl;
                }
            }
            return;
        }
        // Shorter than 8: `short` answers for it.
        let repl = parent.filter(|&(_, l)| l >= 8).map_or(0, |(n, l)| entry(l, n));
        if len <= 24 {
            for slot in span(a >> 8, 24 - len) {
                let cur = self.get24(slot);
                if cur & EXT != 0 {
                    self.set_in_group(cur & !EXT, 0..256, |x| x == old, repl);
                } else if cur == old {
                    self.set24(slot, repl);
                }
            }
        } else {
            let slot = a >> 8;
            let g = self.group_of(slot);
            self.set_in_group(g, span(a & 0xff, 32 - len), |x| x == old, repl);
            // No prefix longer than /24 left in the group: its entries are all what covers
            // the /24, which goes back into `tbl24`.
            if self.group(g).all(|x| depth(x) <= 24) {
                let covering = *self.tbl8.get((g as usize) << 8);
                self.set24(slot, covering);
                self.free8.push(g);
            }
        }
    }
}

/// The `2^bits` consecutive slots starting at `first` rounded down to that size.
fn span(first: u32, bits: u8) -> std::ops::Range<u32> {
    let start = first & !((1u32 << bits) - 1);
    start..start + (1u32 << bits)
}
