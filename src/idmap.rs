//! A map from block ids to small per-id values, fast for the usual numbering.
//!
//! Ids are conventionally dense (0, 1, 2, … in first-use order), so values
//! live in a table indexed by id while that table stays within a small
//! multiple of the ids met; ids far beyond go to a hash map. Ids are only
//! names (ARCHITECTURE.md §1), so the split must never change an answer: every id
//! lives in exactly one of the two, and when the table grows over ids kept
//! in the map, they move into the table with their values. (Before this
//! type, two hand-written copies looked in the table first and lost the
//! counts of such ids: statistics depended on how ids were numbered.)

use std::collections::HashMap;

/// A per-id value with a vacant state: the value a fresh slot holds.
pub trait Slot: Copy + Default {
    fn is_vacant(&self) -> bool;
}

impl Slot for u8 {
    fn is_vacant(&self) -> bool {
        *self == 0
    }
}

/// Table slots reserved at least, however few ids were met (cheap, and it
/// covers every id of most real traces).
const MIN_DENSE: u64 = 1 << 20;

#[derive(Debug, Clone, Default)]
pub struct IdMap<V> {
    /// Ids below `dense.len()`, indexed by id.
    dense: Vec<V>,
    /// Ids at or above `dense.len()`.
    sparse: HashMap<u64, V>,
    /// Slots handed out vacant: the scale of the numbering, for growth.
    claimed: u64,
}

impl<V: Slot> IdMap<V> {
    /// The value of `id`, unless its slot is vacant.
    pub fn get(&self, id: u64) -> Option<&V> {
        let v = match usize::try_from(id).ok().and_then(|i| self.dense.get(i)) {
            Some(v) => v,
            None => self.sparse.get(&id)?,
        };
        (!v.is_vacant()).then_some(v)
    }

    /// The value of `id` to change, unless its slot is vacant.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut V> {
        let v = match usize::try_from(id).ok().filter(|&i| i < self.dense.len()) {
            Some(i) => &mut self.dense[i],
            None => self.sparse.get_mut(&id)?,
        };
        (!v.is_vacant()).then_some(v)
    }

    /// The slot of `id`, vacant (`V::default()`) when the id is new.
    pub fn slot(&mut self, id: u64) -> &mut V {
        if id >= self.dense.len() as u64 {
            let limit = self.claimed.saturating_mul(4).max(MIN_DENSE);
            if id < limit {
                self.grow(id, limit);
            }
        }
        let v = match usize::try_from(id).ok().filter(|&i| i < self.dense.len()) {
            Some(i) => &mut self.dense[i],
            None => self.sparse.entry(id).or_default(),
        };
        if v.is_vacant() {
            self.claimed += 1;
        }
        v
    }

    /// Grows the table to cover `id` (doubling, within `limit`), moving the
    /// ids it now covers out of the map.
    fn grow(&mut self, id: u64, limit: u64) {
        let doubled = (self.dense.len() as u64).saturating_mul(2).min(limit);
        let len = (id + 1).max(doubled);
        let Ok(len) = usize::try_from(len) else {
            return;
        };
        self.dense.resize(len, V::default());
        if !self.sparse.is_empty() {
            let dense = &mut self.dense;
            self.sparse.retain(|&k, v| match usize::try_from(k) {
                Ok(i) if i < len => {
                    dense[i] = *v;
                    false
                }
                _ => true,
            });
        }
    }

    /// Every occupied (id, value), the table's in id order, then the map's.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        self.dense
            .iter()
            .enumerate()
            .map(|(i, v)| (i as u64, v))
            .chain(self.sparse.iter().map(|(&k, v)| (k, v)))
            .filter(|(_, v)| !v.is_vacant())
    }

    /// Every occupied value, to change.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.dense
            .iter_mut()
            .chain(self.sparse.values_mut())
            .filter(|v| !v.is_vacant())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_kept_in_the_map_keeps_its_value_when_the_table_grows_over_it() {
        let mut m: IdMap<u8> = IdMap::default();
        // Far beyond the first table size: kept in the map.
        *m.slot(2_000_000) = 7;
        assert_eq!(m.sparse.len(), 1);
        // Enough small ids that the table grows past 2,000,000.
        for id in 0..600_000 {
            *m.slot(id) = 1;
        }
        *m.slot(2_000_001) = 1;
        assert!(m.dense.len() > 2_000_001, "{}", m.dense.len());
        assert!(m.sparse.is_empty());
        assert_eq!(m.get(2_000_000), Some(&7));
        assert_eq!(m.iter().filter(|&(_, &v)| v == 7).count(), 1);
    }

    #[test]
    fn vacant_slots_are_absent() {
        let mut m: IdMap<u8> = IdMap::default();
        assert_eq!(m.get(3), None);
        assert_eq!(*m.slot(3), 0);
        assert_eq!(m.get(3), None);
        *m.slot(3) = 2;
        *m.slot(u64::MAX) = 1;
        assert_eq!(m.get(3), Some(&2));
        assert_eq!(m.get_mut(u64::MAX).copied(), Some(1));
        let mut ids: Vec<u64> = m.iter().map(|(id, _)| id).collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![3, u64::MAX]);
    }
}
