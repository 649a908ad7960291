//! The incoming-label table.

use crate::{FibError, Label, MAX_LABEL, NexthopGroup, TtlModel, VrfId};

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
}

/// A label table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelRoute {
    /// What to do.
    pub action: LabelAction,
    /// How TTL is handled when labels are popped (RFC 3443).
    pub ttl_model: TtlModel,
}

const EMPTY: u32 = u32::MAX;

/// Routes by incoming label: a direct array indexed by label, like the kernel's
/// `platform_label`, so a lookup is one bounds check and two loads.
///
/// The index array is sized to the largest label in use + 1 (4 bytes a slot) and shrinks
/// when the largest label is removed; the routes themselves are stored densely.
#[derive(Debug, Clone, Default)]
pub struct LabelTable {
    /// Label -> position in `routes`, or `EMPTY`.
    index: Vec<u32>,
    routes: Vec<(Label, LabelRoute)>,
}

impl LabelTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The route for `label`.
    #[inline]
    pub fn get(&self, label: Label) -> Option<&LabelRoute> {
        let i = *self.index.get(label as usize)?;
        self.routes.get(i as usize).map(|(_, r)| r)
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
        let slot = label as usize;
        if slot >= self.index.len() {
            self.index.resize(slot + 1, EMPTY);
        }
        let i = self.index[slot];
        if i != EMPTY {
            return Ok(Some(core::mem::replace(&mut self.routes[i as usize].1, route)));
        }
        self.index[slot] = self.routes.len() as u32;
        self.routes.push((label, route));
        Ok(None)
    }

    /// Removes the route for `label` and returns it.
    pub fn remove(&mut self, label: Label) -> Option<LabelRoute> {
        let slot = label as usize;
        let i = *self.index.get(slot)?;
        if i == EMPTY {
            return None;
        }
        self.index[slot] = EMPTY;
        let (_, route) = self.routes.swap_remove(i as usize);
        if let Some((moved, _)) = self.routes.get(i as usize) {
            self.index[*moved as usize] = i;
        }
        // Shrink the index to the largest label still in use.
        let keep = self.index.iter().rposition(|&x| x != EMPTY).map_or(0, |p| p + 1);
        self.index.truncate(keep);
        if self.index.capacity() > 2 * self.index.len() + 64 {
            self.index.shrink_to_fit();
        }
        Some(route)
    }

    /// All routes in label order.
    pub fn iter(&self) -> impl Iterator<Item = (Label, &LabelRoute)> + '_ {
        self.index
            .iter()
            .enumerate()
            .filter(|&(_, &i)| i != EMPTY)
            .map(|(label, &i)| (label as Label, &self.routes[i as usize].1))
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// Whether the table has no route.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// Number of slots in the direct index: the largest label in use + 1.
    pub fn capacity_slots(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pop(vrf: VrfId) -> LabelRoute {
        LabelRoute { action: LabelAction::PopAndLookup { vrf }, ttl_model: TtlModel::Uniform }
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
        assert_eq!(t.capacity_slots(), 2002);
        t.insert(1_048_575, pop(2));
        assert_eq!(t.capacity_slots(), 1_048_576);
        assert_eq!(t.remove(1_048_575), Some(pop(2)));
        assert_eq!(t.capacity_slots(), 2002);
        assert_eq!(t.remove(16), Some(pop(0)));
        assert_eq!(t.capacity_slots(), 2002);
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
