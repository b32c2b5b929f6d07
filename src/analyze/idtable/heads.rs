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

use super::{IdHash, ROOT};

/// One word of the bitmap: 64 ids, and the appended heads below them. The
/// bits as two halves: 12 bytes, where a `u64` beside the count padded
/// the word to 16.
#[derive(Debug, Clone, Copy, Default)]
struct Word {
    lo: u32,
    hi: u32,
    before: u32,
}

impl Word {
    fn bits(self) -> u64 {
        u64::from(self.lo) | u64::from(self.hi) << 32
    }

    fn set(&mut self, bit: u32) {
        if bit < 32 {
            self.lo |= 1 << bit;
        } else {
            self.hi |= 1 << (bit - 32);
        }
    }
}

/// An appended head's entry: its parent as the distance below it (0: the
/// root), its position and its first row. 12 bytes where the parent key
/// took 8 of 16 (decision 47, last): fresh ids are numbered in first-use
/// order, so a head's parent, met before it, is an id below it; a parent
/// that is not (an overflow key, an id above) sends the head to the map.
#[derive(Debug, Clone, Copy)]
struct Entry {
    below: u32,
    pos: u32,
    row: u32,
}

/// Ids the bitmap covers at least, however few heads there are.
const MIN_SPAN: u64 = 1 << 20;
/// The bitmap covers at most this many ids per appended head: a bit per
/// id stays a small share of the entry it indexes.
const IDS_PER_HEAD: u64 = 256;

#[derive(Debug, Default)]
pub struct Heads {
    words: Vec<Word>,
    /// The appended heads, in id order.
    entries: Vec<Entry>,
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
        let below = if parent == ROOT {
            Some(0)
        } else {
            id.checked_sub(parent)
                .and_then(|d| u32::try_from(d).ok())
                .filter(|&d| d > 0)
        };
        // `before` is a u32: beyond 4 G appended heads, the map.
        let Some(below) =
            below.filter(|_| in_order && id < span && self.entries.len() < u32::MAX as usize)
        else {
            self.others.insert(id, (parent, pos, row));
            return;
        };
        let w = (id / 64) as usize;
        if w >= self.words.len() {
            // Every appended head is below `id`, so below the new words.
            let before = self.entries.len() as u32;
            self.words.resize(
                w + 1,
                Word {
                    before,
                    ..Word::default()
                },
            );
        }
        self.words[w].set((id % 64) as u32);
        self.entries.push(Entry { below, pos, row });
        self.last = Some(id);
    }

    /// The (parent key, position, row) of head `id`.
    pub fn get(&self, id: u64) -> Option<(u64, u32, u32)> {
        let bit = 1u64 << (id % 64);
        match usize::try_from(id / 64)
            .ok()
            .and_then(|w| self.words.get(w))
        {
            Some(&word) if word.bits() & bit != 0 => {
                let index = word.before + (word.bits() & (bit - 1)).count_ones();
                let e = self.entries.get(index as usize)?;
                let parent = if e.below == 0 {
                    ROOT
                } else {
                    id - u64::from(e.below)
                };
                Some((parent, e.pos, e.row))
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
        h.insert(0, ROOT, 0, 10);
        h.insert(63, 8, 1, 11);
        h.insert(64, 7, 2, 12);
        h.insert(1000, 6, 3, 13);
        // Out of order, and far beyond the bitmap's span: the map.
        h.insert(500, 5, 4, 14);
        h.insert(1 << 40, 4, 5, u32::MAX);
        h.insert(1001, 3, 6, 0);
        // Parents the distance below cannot hold: above the head, an
        // overflow key (and a head 2^32 above its parent, beyond the
        // bitmap's span anyway); and the root.
        h.insert(1002, 1003, 7, 1);
        h.insert(1003, 1 << 63, 8, 2);
        h.insert((1 << 32) + 1004, 1004, 9, 3);
        h.insert(1005, ROOT, 0, 4);
        h.insert(1006, 1005, 1, 5);
        assert_eq!(h.entries.len(), 7);
        assert_eq!(h.others.len(), 5);
        assert_eq!(h.len(), 12);
        let want = [
            (0, (ROOT, 0, 10)),
            (63, (8, 1, 11)),
            (64, (7, 2, 12)),
            (1000, (6, 3, 13)),
            (500, (5, 4, 14)),
            (1 << 40, (4, 5, u32::MAX)),
            (1001, (3, 6, 0)),
            (1002, (1003, 7, 1)),
            (1003, (1 << 63, 8, 2)),
            ((1 << 32) + 1004, (1004, 9, 3)),
            (1005, (ROOT, 0, 4)),
            (1006, (1005, 1, 5)),
        ];
        for (id, v) in want {
            assert_eq!(h.get(id), Some(v), "head {id}");
        }
        for id in [1, 62, 65, 999, 1004, 1 << 20, u64::MAX] {
            assert_eq!(h.get(id), None, "not a head: {id}");
        }
    }
}
