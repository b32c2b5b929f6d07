//! The parent and position of each run head, found without hashing in the
//! usual numbering.
//!
//! Fresh ids are numbered in first-use order in every trace we have seen,
//! so run heads arrive in increasing id order. Such heads are appended to a
//! vector and found by rank: one bit per id says "this id is an appended
//! head", and each 64-id word keeps the count of appended heads before it,
//! so a head's index is that count plus a popcount. A lookup reads two
//! cache lines (the word, the entry) and an insert is a push; the hash map
//! this replaced missed the CPU cache on both and was a third of the time
//! on the 1 GB generated trace (ARCHITECTURE.md §5). A head that arrives
//! out of order, or so far above the others that its bit would cost more
//! than its entry, goes to a hash map instead. Every head lives in exactly
//! one of the two, so the numbering never changes an answer.

use std::collections::HashMap;

use super::IdHash;

/// One word of the bitmap: 64 ids, and the appended heads below them.
#[derive(Debug, Clone, Copy, Default)]
struct Word {
    bits: u64,
    before: u32,
}

/// Ids the bitmap covers at least, however few heads there are.
const MIN_SPAN: u64 = 1 << 20;
/// The bitmap covers at most this many ids per appended head: a bit per
/// id stays a small share of the entry it indexes.
const IDS_PER_HEAD: u64 = 256;

#[derive(Debug, Default)]
pub struct Heads {
    words: Vec<Word>,
    /// (parent key, position, row) of appended heads, in id order: 16
    /// bytes, the row in what was the padding of (u64, u32).
    entries: Vec<(u64, u32, u32)>,
    /// The largest appended head.
    last: Option<u64>,
    /// Heads that could not be appended.
    others: HashMap<u64, (u64, u32, u32), IdHash>,
}

impl Heads {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len() + self.others.len()
    }

    /// Records head `id` (new: never inserted before), first seen at `pos`
    /// of row `row` under `parent`.
    pub fn insert(&mut self, id: u64, parent: u64, pos: u32, row: u32) {
        let span = MIN_SPAN.max((self.entries.len() as u64 + 1).saturating_mul(IDS_PER_HEAD));
        let in_order = self.last.is_none_or(|l| id > l);
        // `before` is a u32: beyond 4 G appended heads, the map.
        if !in_order || id >= span || self.entries.len() >= u32::MAX as usize {
            self.others.insert(id, (parent, pos, row));
            return;
        }
        let w = (id / 64) as usize;
        if w >= self.words.len() {
            // Every appended head is below `id`, so below the new words.
            let before = self.entries.len() as u32;
            self.words.resize(w + 1, Word { bits: 0, before });
        }
        self.words[w].bits |= 1 << (id % 64);
        self.entries.push((parent, pos, row));
        self.last = Some(id);
    }

    /// The (parent key, position, row) of head `id`.
    pub fn get(&self, id: u64) -> Option<(u64, u32, u32)> {
        let bit = 1u64 << (id % 64);
        match usize::try_from(id / 64)
            .ok()
            .and_then(|w| self.words.get(w))
        {
            Some(word) if word.bits & bit != 0 => {
                let index = word.before + (word.bits & (bit - 1)).count_ones();
                self.entries.get(index as usize).copied()
            }
            _ => self.others.get(&id).copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_and_mapped_heads_are_both_found() {
        let mut h = Heads::default();
        h.insert(0, 9, 0, 10);
        h.insert(63, 8, 1, 11);
        h.insert(64, 7, 2, 12);
        h.insert(1000, 6, 3, 13);
        // Out of order, and far beyond the bitmap's span: the map.
        h.insert(500, 5, 4, 14);
        h.insert(1 << 40, 4, 5, u32::MAX);
        h.insert(1001, 3, 6, 0);
        assert_eq!(h.entries.len(), 5);
        assert_eq!(h.others.len(), 2);
        assert_eq!(h.len(), 7);
        let want = [
            (0, (9, 0, 10)),
            (63, (8, 1, 11)),
            (64, (7, 2, 12)),
            (1000, (6, 3, 13)),
            (500, (5, 4, 14)),
            (1 << 40, (4, 5, u32::MAX)),
            (1001, (3, 6, 0)),
        ];
        for (id, v) in want {
            assert_eq!(h.get(id), Some(v), "head {id}");
        }
        for id in [1, 62, 65, 999, 1002, 1 << 20, u64::MAX] {
            assert_eq!(h.get(id), None, "not a head: {id}");
        }
    }
}
