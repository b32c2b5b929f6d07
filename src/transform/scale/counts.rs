//! The first pass's id table: how often each id occurs, saturating at 2
//! (only "shared or not" matters to the multipliers), in one byte an id.
//!
//! Ids are usually numbered densely from 0, so the counts of ids below a
//! bound live in an array indexed by the id: counting one is a bounds
//! check, a load and a store (the general map it replaced, with a hash map
//! behind, cost about 25 instructions an id with the call; cachegrind,
//! docs/decisions/0042-multipliers-count-and-write-runs.md). The bound
//! grows by doubling while it stays within four times the distinct ids
//! met (at least `MIN_DENSE`), so memory stays O(distinct ids) however
//! large the ids; ids beyond it go to a small open-addressing table. An id
//! lives in exactly one of the two: when the array grows over ids in the
//! table, they move into it with their counts.

/// Array slots allowed however few ids were met: 1 MiB, which covers
/// every id of most real traces.
const MIN_DENSE: u64 = 1 << 20;

/// The first size of the array (it doubles from there).
const FIRST_DENSE: u64 = 1 << 12;

/// Counts of ids, saturating at 2.
#[derive(Default)]
pub struct IdCounts {
    /// Counts of the ids below `dense.len()`, indexed by id (0: not met).
    dense: Vec<u8>,
    /// Counts of the ids at or above `dense.len()`.
    sparse: Sparse,
    /// Distinct ids met: the scale of the numbering, for growth.
    distinct: u64,
}

impl IdCounts {
    /// Counts one occurrence of `id`.
    #[inline]
    pub fn add(&mut self, id: u64) {
        match usize::try_from(id).ok().and_then(|i| self.dense.get_mut(i)) {
            Some(c) => {
                if *c < 2 {
                    self.distinct += u64::from(*c == 0);
                    *c += 1;
                }
            }
            None => self.add_beyond(id),
        }
    }

    /// `add` for an id past the array: the array grows over it when that
    /// keeps it within its bound, else the id goes to the table.
    #[inline(never)]
    fn add_beyond(&mut self, id: u64) {
        let limit = self.distinct.saturating_mul(4).max(MIN_DENSE);
        if id < limit && self.grow(id, limit) {
            return self.add(id);
        }
        if self.sparse.add(id) {
            self.distinct += 1;
        }
    }

    /// Grows the array to cover `id` (doubling, within `limit`), moving the
    /// counts of the ids it now covers out of the table; false when the
    /// size does not fit in memory's addresses (the id goes to the table).
    fn grow(&mut self, id: u64, limit: u64) -> bool {
        let doubled = (self.dense.len() as u64)
            .saturating_mul(2)
            .max(FIRST_DENSE)
            .min(limit);
        let len = (id + 1).max(doubled);
        let Ok(len) = usize::try_from(len) else {
            return false;
        };
        self.dense.resize(len, 0);
        if self.sparse.len > 0 {
            let old = std::mem::take(&mut self.sparse);
            for (k, c) in old.iter() {
                match usize::try_from(k).ok().filter(|&i| i < len) {
                    Some(i) => self.dense[i] = c,
                    None => self.sparse.insert(k, c),
                }
            }
        }
        true
    }

    /// Whether `id` occurs at least twice.
    #[inline]
    pub fn is_shared(&self, id: u64) -> bool {
        match usize::try_from(id).ok().and_then(|i| self.dense.get(i)) {
            Some(&c) => c >= 2,
            None => self.sparse.get(id) >= 2,
        }
    }

    /// Largest id that occurs at least `min` times (1 or 2): the array is
    /// read from its top, so this costs the slots above that id.
    fn max_with(&self, min: u8) -> Option<u64> {
        let dense = self.dense.iter().rposition(|&c| c >= min);
        let sparse = self
            .sparse
            .iter()
            .filter(|&(_, c)| c >= min)
            .map(|(k, _)| k);
        // Every table id is above every array slot.
        sparse.max().or(dense.map(|i| i as u64))
    }

    /// Largest id that occurs at least twice.
    pub fn max_shared(&self) -> Option<u64> {
        self.max_with(2)
    }

    /// Largest id met.
    pub fn max_id(&self) -> Option<u64> {
        self.max_with(1)
    }
}

/// Open addressing with linear probing over `keys`, `counts` 0 marking an
/// empty slot; at most half full. The multiplicative (Fibonacci) hash is
/// enough for ids: no adversary picks them to collide, and a bad spread
/// only costs time.
#[derive(Default)]
struct Sparse {
    keys: Vec<u64>,
    counts: Vec<u8>,
    len: usize,
}

impl Sparse {
    fn slot(&self, id: u64) -> usize {
        let bits = self.keys.len().trailing_zeros();
        let mut i = (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize;
        let mask = self.keys.len() - 1;
        while self.counts[i] != 0 && self.keys[i] != id {
            i = (i + 1) & mask;
        }
        i
    }

    fn get(&self, id: u64) -> u8 {
        if self.len == 0 {
            return 0;
        }
        self.counts[self.slot(id)]
    }

    /// Counts `id` (saturating at 2); whether it was new.
    fn add(&mut self, id: u64) -> bool {
        self.reserve_one();
        let i = self.slot(id);
        let c = &mut self.counts[i];
        let new = *c == 0;
        if new {
            self.keys[i] = id;
            self.len += 1;
        }
        *c = (*c + 1).min(2);
        new
    }

    /// Puts `id` with count `c` (nonzero), absent until now.
    fn insert(&mut self, id: u64, c: u8) {
        self.reserve_one();
        let i = self.slot(id);
        self.keys[i] = id;
        self.counts[i] = c;
        self.len += 1;
    }

    /// Room for one more id at most half full (doubling, rehashed).
    fn reserve_one(&mut self) {
        if (self.len + 1) * 2 <= self.keys.len() {
            return;
        }
        let size = (self.keys.len() * 2).max(16);
        let old = std::mem::replace(
            self,
            Sparse {
                keys: vec![0; size],
                counts: vec![0; size],
                len: 0,
            },
        );
        for (k, c) in old.iter() {
            self.insert(k, c);
        }
    }

    /// Every (id, count) held, in no order.
    fn iter(&self) -> impl Iterator<Item = (u64, u8)> + '_ {
        self.keys
            .iter()
            .zip(&self.counts)
            .filter(|(_, &c)| c != 0)
            .map(|(&k, &c)| (k, c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn counts_saturate_and_handle_sparse_ids() {
        let mut c = IdCounts::default();
        for id in [1, 1, 1, 5, u64::MAX, u64::MAX, 1 << 40] {
            c.add(id);
        }
        assert!(c.is_shared(1));
        assert!(!c.is_shared(5));
        assert!(!c.is_shared(7));
        assert!(c.is_shared(u64::MAX));
        assert!(!c.is_shared(1 << 40));
        assert_eq!(c.max_shared(), Some(u64::MAX));
        assert_eq!(c.max_id(), Some(u64::MAX));
        assert_eq!(IdCounts::default().max_id(), None);
    }

    #[test]
    fn ids_in_the_table_move_into_the_array_with_their_counts() {
        let mut c = IdCounts::default();
        // Past the first bound: into the table, once and twice.
        let far = MIN_DENSE + 10;
        c.add(far);
        c.add(far + 1);
        c.add(far + 1);
        assert!(c.dense.len() as u64 <= far);
        assert_eq!(c.sparse.len, 2);
        // Enough distinct ids that the bound passes them: the array grows
        // over them, and they keep their counts.
        for id in 0..MIN_DENSE / 4 + 10 {
            c.add(id);
        }
        c.add(far + 2);
        assert!(c.dense.len() as u64 > far + 2);
        assert_eq!(c.sparse.len, 0);
        assert!(!c.is_shared(far));
        assert!(c.is_shared(far + 1));
        c.add(far);
        assert!(c.is_shared(far));
        assert_eq!(c.max_shared(), Some(far + 1));
        assert_eq!(c.max_id(), Some(far + 2));
    }

    proptest! {
        /// Whatever the ids (dense, sparse, huge, mixed), the table says
        /// what a plain count of them says.
        #[test]
        fn the_table_agrees_with_a_plain_count(
            ids in proptest::collection::vec(
                prop_oneof![
                    0u64..5_000,
                    0u64..3 * MIN_DENSE,
                    any::<u64>(),
                    (0u64..50).prop_map(|k| u64::MAX - k),
                ],
                0..3_000,
            ),
        ) {
            let mut c = IdCounts::default();
            let mut want: HashMap<u64, u32> = HashMap::new();
            for &id in &ids {
                c.add(id);
                *want.entry(id).or_default() += 1;
            }
            for &id in ids.iter().chain(&[7, MIN_DENSE, u64::MAX]) {
                let n = want.get(&id).copied().unwrap_or(0);
                prop_assert_eq!(c.is_shared(id), n >= 2, "id {}", id);
            }
            prop_assert_eq!(c.max_id(), want.keys().max().copied());
            prop_assert_eq!(
                c.max_shared(),
                want.iter().filter(|(_, &n)| n >= 2).map(|(&k, _)| k).max()
            );
            prop_assert_eq!(c.distinct, want.len() as u64);
            prop_assert!(c.dense.len() as u64 <= (4 * want.len() as u64).max(MIN_DENSE));
        }
    }
}
