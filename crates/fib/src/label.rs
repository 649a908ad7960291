//! The incoming-label table.

use std::sync::Arc;

use crate::{FibError, InlineHop, Label, MAX_LABEL, NexthopGroup, RouteSummary, TtlModel, VrfId};

/// What to do with a packet whose top label matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelAction {
    /// Replace the top label by each next hop's labels (none: pop, penultimate-hop
    /// popping), then send to that next hop.
    Forward(NexthopGroup),
    /// Pop; continue with the next label, or at the bottom of the stack look the IP
    /// packet up in `vrf` (egress PE).
    PopAndLookup {
        /// The routing table for the IP packet underneath.
        vrf: VrfId,
    },
    /// The local label of a pseudowire: pop, take the control word off (if the
    /// pseudowire has one), send the Ethernet frame under it out of the attachment
    /// circuit ([`Fib::pseudowires`](crate::Fib::pseudowires)`[pw]`).
    Pseudowire {
        /// Index into [`Fib::pseudowires`](crate::Fib::pseudowires).
        pw: u16,
    },
}

/// A label table entry: what to do with frames whose top label it is ([`action`]), and
/// how TTL crosses the labels it pops ([`ttl_model`]). A route forwarding to one IPv4 next
/// hop keeps a copy of it ([`inline_hop`]), so that switching by a route of a large table
/// does not read the group behind it; hence the fields behind accessors.
///
/// [`action`]: LabelRoute::action
/// [`ttl_model`]: LabelRoute::ttl_model
/// [`inline_hop`]: LabelRoute::inline_hop
#[derive(Clone, PartialEq, Eq)]
pub struct LabelRoute {
    action: LabelAction,
    summary: RouteSummary,
}

impl LabelRoute {
    /// A route doing `action`, popping labels under `ttl_model`.
    pub fn new(action: LabelAction, ttl_model: TtlModel) -> LabelRoute {
        let group = match &action {
            LabelAction::Forward(group) => Some(group),
            _ => None,
        };
        let summary = RouteSummary::new(ttl_model, group);
        LabelRoute { action, summary }
    }

    /// What to do.
    #[inline]
    pub fn action(&self) -> &LabelAction {
        &self.action
    }

    /// How TTL is handled when labels are popped (RFC 3443).
    #[inline]
    pub fn ttl_model(&self) -> TtlModel {
        self.summary.ttl_model()
    }

    /// The next hop of a route forwarding to one IPv4 next hop with at most
    /// [`INLINE_LABELS`](crate::INLINE_LABELS) labels (to swap the top one for): what
    /// [`NexthopGroup::select`] gives for any hash, without reading the group.
    #[inline]
    pub fn inline_hop(&self) -> Option<InlineHop<'_>> {
        self.summary.inline_hop()
    }

    /// [`inline_hop`](LabelRoute::inline_hop) when it swaps the top label for exactly one
    /// (a P router's common case): the label, the neighbour, the port.
    #[inline]
    pub fn swap_hop(&self) -> Option<(Label, std::net::Ipv4Addr, crate::PortId)> {
        self.summary.single_label_hop()
    }
}

impl std::fmt::Debug for LabelRoute {
    /// The action and TTL model: the inline next hop is a copy of the action's.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LabelRoute")
            .field("action", &self.action)
            .field("ttl_model", &self.ttl_model())
            .finish()
    }
}

/// Labels per chunk of the table.
const CHUNK: usize = crate::chunks::CHUNK_LEN;

/// One chunk of the direct index: the routes of `CHUNK` consecutive labels, in the
/// chunk's own allocation (a lookup reads the chunk's pointer, then the route).
#[derive(Debug, Clone, PartialEq, Eq)]
struct LabelChunk {
    /// Labels with a route in this chunk.
    used: usize,
    routes: [Option<LabelRoute>; CHUNK],
}

/// Routes by incoming label: a direct array indexed by label, like the kernel's
/// `platform_label`, so a lookup is a bounds check and three loads.
///
/// The array is kept in chunks of a thousand labels shared between copies: a copy costs a
/// pointer per chunk in use, a change to it copies one chunk, and chunks without a route
/// take no memory (a table using labels 16 and 1,048,575 holds two chunks).
#[derive(Debug, Clone, Default)]
pub struct LabelTable {
    chunks: Vec<Option<Arc<LabelChunk>>>,
    len: usize,
}

impl LabelTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The route for `label`.
    #[inline]
    pub fn get(&self, label: Label) -> Option<&LabelRoute> {
        let label = label as usize;
        let chunk = self.chunks.get(label / CHUNK)?.as_ref()?;
        chunk.routes[label % CHUNK].as_ref()
    }

    /// The slot of `label` in the direct index, without reading it (for a prefetch);
    /// `None` when no chunk holds it.
    #[inline]
    pub(crate) fn slot(&self, label: Label) -> Option<&Option<LabelRoute>> {
        let label = label as usize;
        let chunk = self.chunks.get(label / CHUNK)?.as_ref()?;
        Some(&chunk.routes[label % CHUNK])
    }

    /// Sets the route for `label` and returns the previous one.
    ///
    /// # Panics
    /// If `label` is above [`MAX_LABEL`]; use [`try_insert`](LabelTable::try_insert) for
    /// labels that are not known to be in range.
    pub fn insert(&mut self, label: Label, route: LabelRoute) -> Option<LabelRoute> {
        match self.try_insert(label, route) {
            Ok(old) => old,
            Err(e) => panic!("LabelTable::insert: {e}"),
        }
    }

    /// Sets the route for `label` and returns the previous one.
    ///
    /// # Errors
    /// [`FibError::LabelOutOfRange`] if `label` is above [`MAX_LABEL`].
    pub fn try_insert(&mut self, label: Label, route: LabelRoute) -> Result<Option<LabelRoute>, FibError> {
        if label > MAX_LABEL {
            return Err(FibError::LabelOutOfRange { label });
        }
        let (c, i) = (label as usize / CHUNK, label as usize % CHUNK);
        if c >= self.chunks.len() {
            self.chunks.resize(c + 1, None);
        }
        let chunk = self.chunks[c]
            .get_or_insert_with(|| Arc::new(LabelChunk { used: 0, routes: std::array::from_fn(|_| None) }));
        let chunk = Arc::make_mut(chunk);
        let old = chunk.routes[i].replace(route);
        if old.is_none() {
            chunk.used += 1;
            self.len += 1;
        }
        Ok(old)
    }

    /// Removes the route for `label` and returns it.
    pub fn remove(&mut self, label: Label) -> Option<LabelRoute> {
        let (c, i) = (label as usize / CHUNK, label as usize % CHUNK);
        let slot = self.chunks.get_mut(c)?;
        slot.as_ref()?.routes[i].as_ref()?;
        let chunk = Arc::make_mut(slot.as_mut()?);
        let old = chunk.routes[i].take();
        chunk.used -= 1;
        self.len -= 1;
        if chunk.used == 0 {
            *slot = None;
            let keep = self.chunks.iter().rposition(Option::is_some).map_or(0, |p| p + 1);
            self.chunks.truncate(keep);
        }
        old
    }

    /// All routes in label order.
    pub fn iter(&self) -> impl Iterator<Item = (Label, &LabelRoute)> + '_ {
        self.chunks.iter().enumerate().filter_map(|(c, chunk)| Some((c, chunk.as_ref()?))).flat_map(
            |(c, chunk)| {
                chunk
                    .routes
                    .iter()
                    .enumerate()
                    .filter_map(move |(i, r)| Some(((c * CHUNK + i) as Label, r.as_ref()?)))
            },
        )
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table has no route.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of slots the direct index covers: one past the last label of the last chunk
    /// in use.
    pub fn capacity_slots(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    /// The labels whose route may differ between `old` and `new`, two versions of one
    /// table, in time proportional to the change (chunks both share are skipped).
    pub fn changed_labels<'a>(old: &'a Self, new: &'a Self) -> impl Iterator<Item = Label> + 'a {
        let chunks = old.chunks.len().max(new.chunks.len());
        let chunk = |t: &'a Self, c: usize| t.chunks.get(c).and_then(Option::as_ref);
        (0..chunks)
            .filter(move |&c| match (chunk(old, c), chunk(new, c)) {
                (Some(a), Some(b)) => !Arc::ptr_eq(a, b),
                (None, None) => false,
                _ => true,
            })
            .flat_map(move |c| {
                (0..CHUNK).filter_map(move |i| {
                    let a = chunk(old, c).and_then(|k| k.routes[i].as_ref());
                    let b = chunk(new, c).and_then(|k| k.routes[i].as_ref());
                    (a != b).then_some((c * CHUNK + i) as Label)
                })
            })
    }

    /// Chunks `old` and `new` do not share, and chunks in use in either (see
    /// [`Lpm::unshared_chunks`](crate::Lpm::unshared_chunks)).
    pub fn unshared_chunks(old: &Self, new: &Self) -> (usize, usize) {
        let (mut unshared, mut total) = (0, 0);
        for c in 0..old.chunks.len().max(new.chunks.len()) {
            let a = old.chunks.get(c).and_then(Option::as_ref);
            let b = new.chunks.get(c).and_then(Option::as_ref);
            match (a, b) {
                (None, None) => continue,
                (Some(a), Some(b)) if Arc::ptr_eq(a, b) => {}
                _ => unshared += 1,
            }
            total += 1;
        }
        (unshared, total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pop(vrf: VrfId) -> LabelRoute {
        LabelRoute::new(LabelAction::PopAndLookup { vrf }, TtlModel::Uniform)
    }

    #[test]
    fn insert_get_replace_remove() {
        let mut t = LabelTable::new();
        assert!(t.is_empty());
        assert_eq!(t.insert(1002, pop(0)), None);
        assert_eq!(t.get(1002), Some(&pop(0)));
        assert_eq!(t.get(1001), None);
        assert_eq!(t.get(u32::MAX), None);
        assert_eq!(t.insert(1002, pop(1)), Some(pop(0)));
        assert_eq!(t.len(), 1);
        assert_eq!(t.remove(1002), Some(pop(1)));
        assert_eq!(t.remove(1002), None);
        assert_eq!(t.remove(u32::MAX), None);
        assert!(t.is_empty());
    }

    #[test]
    fn table_grows_to_largest_label_and_shrinks_back() {
        let mut t = LabelTable::new();
        t.insert(16, pop(0));
        t.insert(2001, pop(1));
        assert_eq!(t.capacity_slots(), 2048);
        t.insert(1_048_575, pop(2));
        assert_eq!(t.capacity_slots(), 1_048_576);
        assert_eq!(t.remove(1_048_575), Some(pop(2)));
        assert_eq!(t.capacity_slots(), 2048);
        assert_eq!(t.remove(16), Some(pop(0)));
        assert_eq!(t.capacity_slots(), 2048);
        assert_eq!(t.get(2001), Some(&pop(1)));
        t.remove(2001);
        assert_eq!(t.capacity_slots(), 0);
    }

    #[test]
    fn remove_keeps_other_entries_reachable() {
        let mut t = LabelTable::new();
        for l in 16..100u32 {
            t.insert(l, pop(l as VrfId));
        }
        for l in (16..100u32).step_by(3) {
            assert_eq!(t.remove(l), Some(pop(l as VrfId)));
        }
        for l in 16..100u32 {
            let want = if (l - 16) % 3 == 0 { None } else { Some(pop(l as VrfId)) };
            assert_eq!(t.get(l).cloned(), want);
        }
        let labels: Vec<_> = t.iter().map(|(l, _)| l).collect();
        let mut sorted = labels.clone();
        sorted.sort();
        assert_eq!(labels, sorted);
        assert_eq!(labels.len(), t.len());
    }

    #[test]
    fn out_of_range_label_is_an_error() {
        let mut t = LabelTable::new();
        assert_eq!(t.try_insert(1 << 20, pop(0)), Err(FibError::LabelOutOfRange { label: 1 << 20 }));
        assert!(t.is_empty());
    }
}
