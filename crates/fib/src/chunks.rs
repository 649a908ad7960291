//! A vector stored in fixed-size chunks shared between versions (copy-on-write), so that a
//! table of a million entries can be copied, changed in one place and published as a new
//! version in time that does not grow with the table.
//!
//! Cloning copies one pointer per chunk; the first write to a chunk that another version
//! still shares copies that chunk only ([`Arc::make_mut`]). A chunk is one allocation with
//! its entries in it (`Arc<[T; CHUNK_LEN]>`, filled with `T::default()` past the end), so
//! reaching an entry reads the chunk's pointer and then the entry, nothing in between, and
//! the entry's index within its chunk needs no bounds check. Two versions can be compared
//! chunk by chunk: chunks that are the same allocation hold the same entries, so a diff
//! costs time in proportion to what changed ([`Chunks::changed`]).

use std::sync::Arc;

/// Entries per chunk: small enough that copying one costs a few microseconds, large enough
/// that a million entries need only a thousand pointers.
pub(crate) const CHUNK_LEN: usize = 1024;
const CHUNK_BITS: u32 = CHUNK_LEN.trailing_zeros();

/// A growable vector of `T` in shared chunks of [`CHUNK_LEN`].
#[derive(Debug)]
pub(crate) struct Chunks<T> {
    chunks: Vec<Arc<[T; CHUNK_LEN]>>,
    len: usize,
}

impl<T> Clone for Chunks<T> {
    fn clone(&self) -> Self {
        Chunks { chunks: self.chunks.clone(), len: self.len }
    }
}

impl<T> Default for Chunks<T> {
    fn default() -> Self {
        Chunks { chunks: Vec::new(), len: 0 }
    }
}

impl<T: Clone + Default> Chunks<T> {
    /// Number of entries.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The entry at `i`.
    ///
    /// # Panics
    /// If `i` is out of bounds (callers hold indices they were given).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> &T {
        &self.chunks[i >> CHUNK_BITS][i & (CHUNK_LEN - 1)]
    }

    /// The entry at `i`, for writing: its chunk is copied first if another version shares it.
    ///
    /// # Panics
    /// If `i` is out of bounds.
    #[inline]
    pub(crate) fn get_mut(&mut self, i: usize) -> &mut T {
        &mut Arc::make_mut(&mut self.chunks[i >> CHUNK_BITS])[i & (CHUNK_LEN - 1)]
    }

    /// Appends `value` and returns its index.
    pub(crate) fn push(&mut self, value: T) -> usize {
        let i = self.len;
        if i & (CHUNK_LEN - 1) == 0 {
            // Filled in place on the heap (a chunk of trie nodes is 64 KB, no stack's
            // business), then typed as the array it is.
            let chunk: Arc<[T]> = (0..CHUNK_LEN).map(|_| T::default()).collect();
            self.chunks.push(chunk.try_into().unwrap_or_else(|_| unreachable!("CHUNK_LEN entries")));
        }
        self.len += 1;
        *self.get_mut(i) = value;
        i
    }

    /// Indices of the entries that may differ between `old` and `new`: every index of a chunk
    /// that is not shared between them (indices past the shorter one's end included).
    pub(crate) fn changed<'a>(old: &'a Self, new: &'a Self) -> impl Iterator<Item = usize> + 'a {
        let chunks = old.chunks.len().max(new.chunks.len());
        (0..chunks)
            .filter(move |&c| match (old.chunks.get(c), new.chunks.get(c)) {
                (Some(a), Some(b)) => !Arc::ptr_eq(a, b),
                _ => true,
            })
            .flat_map(move |c| {
                let end = ((c + 1) * CHUNK_LEN).min(old.len.max(new.len));
                c * CHUNK_LEN..end
            })
    }

    /// How many chunks `old` and `new` do not share, and how many the larger has.
    pub(crate) fn unshared(old: &Self, new: &Self) -> (usize, usize) {
        let total = old.chunks.len().max(new.chunks.len());
        let shared = old.chunks.iter().zip(&new.chunks).filter(|(a, b)| Arc::ptr_eq(a, b)).count();
        (total - shared, total)
    }

    /// The entry at `i`, or `None` past the end.
    #[inline]
    pub(crate) fn try_get(&self, i: usize) -> Option<&T> {
        if i < self.len { Some(self.get(i)) } else { None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_copies_only_its_chunk_and_the_diff_sees_only_it() {
        let mut a = Chunks::default();
        for i in 0..5 * CHUNK_LEN {
            assert_eq!(a.push(i), i);
        }
        let mut b = a.clone();
        assert_eq!(Chunks::changed(&a, &b).count(), 0);
        *b.get_mut(2 * CHUNK_LEN + 7) = 99;
        assert_eq!(*a.get(2 * CHUNK_LEN + 7), 2 * CHUNK_LEN + 7, "the old version is untouched");
        assert_eq!(*b.get(2 * CHUNK_LEN + 7), 99);
        let changed: Vec<_> = Chunks::changed(&a, &b).collect();
        assert_eq!(changed, (2 * CHUNK_LEN..3 * CHUNK_LEN).collect::<Vec<_>>());
        assert_eq!(Chunks::unshared(&a, &b), (1, 5));
        // A second write to the same chunk does not copy it again.
        let before = Arc::as_ptr(&b.chunks[2]);
        *b.get_mut(2 * CHUNK_LEN + 8) = 100;
        assert_eq!(Arc::as_ptr(&b.chunks[2]), before);
    }

    #[test]
    fn growth_shows_in_the_diff() {
        let mut a = Chunks::default();
        for i in 0..CHUNK_LEN + 3 {
            a.push(i);
        }
        let mut b = a.clone();
        b.push(7);
        let changed: Vec<_> = Chunks::changed(&a, &b).collect();
        assert_eq!(changed, (CHUNK_LEN..CHUNK_LEN + 4).collect::<Vec<_>>());
        assert_eq!(b.try_get(CHUNK_LEN + 3), Some(&7));
        assert_eq!(a.try_get(CHUNK_LEN + 3), None);
    }
}
