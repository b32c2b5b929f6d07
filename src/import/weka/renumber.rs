//! A session file's local block ids renumbered into the output's, each
//! row's `hash_ids` written as text.
//!
//! The files number a session's blocks from 1 in the order they are first
//! hashed, and each call's ids are mostly the previous call's (the history
//! so far) with the new turn's blocks after them: 93% of the sample's ids
//! are in the common prefix of a call and the one before it. So the text of
//! the common prefix is copied from the previous row's (the same local ids
//! map to the same output ids for the whole session), and only the rest is
//! looked up and written id by id. Ids below [`DENSE`] are looked up in a
//! vector indexed by the id (the files' ids are small and dense), any other
//! in a hash map: the hash lookup of every id and its decimal text were 30%
//! of an import (cachegrind, docs/decisions/0050-weka-by-hand.md).

use std::collections::HashMap;

use crate::record::put_decimal;

/// Local ids below this are looked up in a vector (8 MB at most).
const DENSE: u64 = 1 << 20;
/// A vector slot that no output id has been given yet.
const UNSET: u64 = u64::MAX;
/// Room for one id in the text: 20 digits and `, `.
const ID_ROOM: usize = 22;

#[derive(Default)]
pub struct Renumber {
    /// Local id -> output id for local ids below `DENSE`, `UNSET` where none.
    dense: Vec<u64>,
    /// The slots of `dense` set since the last `clear`.
    used: Vec<u32>,
    /// Local id -> output id for the others. foldhash's fixed hasher: ids
    /// come from files, not from an adversary.
    sparse: HashMap<u64, u64, foldhash::fast::FixedState>,
    next: u64,
    /// The previous row's ids that were looked up (its first
    /// `ceil(in / B)`), their text (`a, b, c`, no brackets), and where each
    /// id's text ends in it: the next row keeps what it shares and
    /// writes the rest after it, in place.
    prev_local: Vec<u64>,
    text: Vec<u8>,
    ends: Vec<u32>,
}

/// What [`Renumber::row`] had to do to make a row's ids fit its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fitted {
    /// Fresh ids were added for blocks the file gave no id.
    pub tail: bool,
    /// The file gave more ids than blocks: they were cut.
    pub cut: bool,
}

impl Renumber {
    /// Forgets every local id (a new file's are another file's numbers).
    pub fn clear(&mut self) {
        for &slot in &self.used {
            self.dense[slot as usize] = UNSET;
        }
        self.used.clear();
        self.sparse.clear();
        self.prev_local.clear();
    }

    /// The output id of local id `h`, given the next one when it is new.
    #[inline]
    fn map(&mut self, h: u64) -> u64 {
        if h >= DENSE {
            let next = &mut self.next;
            return *self.sparse.entry(h).or_insert_with(|| {
                *next += 1;
                *next - 1
            });
        }
        let i = h as usize;
        if i >= self.dense.len() {
            let len = (i + 1).next_power_of_two().max(1024);
            self.dense.resize(len, UNSET);
        }
        let slot = &mut self.dense[i];
        if *slot == UNSET {
            *slot = self.next;
            self.next += 1;
            self.used.push(i as u32);
        }
        *slot
    }

    /// Appends the `hash_ids` array of a row of `input` tokens at block
    /// size `b` whose file gave the ids `local` to `out`: the first
    /// `ceil(input / b)` ids renumbered; a cut-short last block is not the
    /// full block its id names elsewhere, so it is dropped when ids were
    /// cut; blocks without an id get fresh ones.
    pub fn row(&mut self, local: &[u64], input: u64, b: u64, out: &mut Vec<u8>) -> Fitted {
        let need = input.div_ceil(b) as usize;
        let taken = &local[..local.len().min(need)];
        // The previous row's text for the ids this row shares with it,
        // the rest made id by id.
        let shared = common_prefix(taken, &self.prev_local);
        let keep = shared.checked_sub(1).map_or(0, |k| self.ends[k] as usize);
        self.ends.truncate(shared);
        let mut text = std::mem::take(&mut self.text);
        let mut ends = std::mem::take(&mut self.ends);
        // `put_decimal` stores 8 bytes at a time: room is made once. A
        // row's text fits u32 ends: `in` is at most
        // `limits::MAX_ROW_TOKENS`, 22 bytes an id.
        text.resize(keep + (taken.len() - shared) * ID_ROOM + 8, 0);
        let mut p = keep;
        for &h in &taken[shared..] {
            let id = self.map(h);
            if p > 0 {
                text[p..p + 2].copy_from_slice(b", ");
                p += 2;
            }
            p = put_decimal(id, &mut text, p);
            ends.push(p as u32);
        }
        text.truncate(p);
        self.prev_local.truncate(shared);
        self.prev_local.extend_from_slice(&taken[shared..]);

        let cut = local.len() > need;
        let kept = if cut && !input.is_multiple_of(b) {
            taken.len() - 1
        } else {
            taken.len()
        };
        out.push(b'[');
        out.extend_from_slice(&text[..kept.checked_sub(1).map_or(0, |k| ends[k] as usize)]);
        let mut digits = [0u8; ID_ROOM + 8];
        for k in kept..need {
            let id = self.next;
            self.next += 1;
            let mut q = 0;
            if k > 0 {
                digits[..2].copy_from_slice(b", ");
                q = 2;
            }
            q = put_decimal(id, &mut digits, q);
            out.extend_from_slice(&digits[..q]);
        }
        out.push(b']');
        self.text = text;
        self.ends = ends;
        Fitted {
            tail: kept < need,
            cut,
        }
    }
}

/// How many leading elements `a` and `b` share: compared 32 at a time
/// (a comparison of a fixed size, no call), then one by one. A call
/// usually shares almost all of the previous call's ids.
pub fn common_prefix<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    const RUN: usize = 32;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut i = 0;
    while let (Some(x), Some(y)) = (a[i..].first_chunk::<RUN>(), b[i..].first_chunk::<RUN>()) {
        if x != y {
            break;
        }
        i += RUN;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The rule the renumbering keeps, written plainly: one map lookup an
    /// id (the code before decision 0050).
    struct Plain {
        ids: HashMap<u64, u64>,
        next: u64,
    }

    impl Plain {
        fn row(&mut self, local: &[u64], input: u64, b: u64, out: &mut Vec<u8>) -> Fitted {
            let need = input.div_ceil(b) as usize;
            let mut ids = Vec::new();
            for &h in local.iter().take(need) {
                let next = &mut self.next;
                ids.push(*self.ids.entry(h).or_insert_with(|| {
                    *next += 1;
                    *next - 1
                }));
            }
            let cut = local.len() > need;
            if cut && !input.is_multiple_of(b) {
                ids.pop();
            }
            let tail = ids.len() < need;
            while ids.len() < need {
                ids.push(self.next);
                self.next += 1;
            }
            crate::record::write_id_array(&ids, out);
            Fitted { tail, cut }
        }
    }

    /// A session's rows: each row's ids the previous row's first few
    /// (often all of them) and some of its own, as the files' calls are.
    fn rows() -> impl Strategy<Value = Vec<(usize, Vec<u64>, u64)>> {
        let id = prop_oneof![0u64..40, Just(DENSE - 1), Just(DENSE), Just(u64::MAX)];
        prop::collection::vec(
            (
                0usize..12,
                prop::collection::vec(id, 0..6),
                0u64..14,
                0u64..3,
            ),
            1..10,
        )
        .prop_map(|rows| {
            let mut prev: Vec<u64> = Vec::new();
            rows.into_iter()
                .map(|(keep, new, extra, clear)| {
                    let mut ids: Vec<u64> = prev[..keep.min(prev.len())].to_vec();
                    ids.extend(new);
                    prev = ids.clone();
                    // `in` around the ids' blocks at B = 4: fewer, as many, more.
                    let input = (ids.len() as u64 * 4 + extra).saturating_sub(6);
                    (clear as usize, ids, input)
                })
                .collect()
        })
    }

    proptest! {
        /// Row by row, the same text and the same fitting as one lookup an
        /// id, over sessions of rows sharing prefixes, cleared between some.
        #[test]
        fn rows_are_the_plain_rules(rows in rows()) {
            let mut fast = Renumber::default();
            let mut plain = Plain { ids: HashMap::new(), next: 0 };
            for (clear, ids, input) in rows {
                if clear == 0 {
                    fast.clear();
                    plain.ids.clear();
                }
                let (mut a, mut b) = (b"x".to_vec(), b"x".to_vec());
                let fa = fast.row(&ids, input, 4, &mut a);
                let fb = plain.row(&ids, input, 4, &mut b);
                prop_assert_eq!(String::from_utf8(a).unwrap(), String::from_utf8(b).unwrap());
                prop_assert_eq!(fa, fb);
            }
        }
    }

    #[test]
    fn shared_prefix_text_is_reused_and_cut_rows_drop_their_partial_block() {
        let mut r = Renumber::default();
        let mut out = Vec::new();
        // 3 blocks of 4 and one partial: a fresh id for it.
        let f = r.row(&[7, 8, 9], 13, 4, &mut out);
        assert_eq!(out, b"[0, 1, 2, 3]");
        assert_eq!(
            f,
            Fitted {
                tail: true,
                cut: false
            }
        );
        out.clear();
        // The same ids and two new: 7, 8, 9 keep theirs.
        r.row(&[7, 8, 9, 1, 7], 20, 4, &mut out);
        assert_eq!(out, b"[0, 1, 2, 4, 0]");
        out.clear();
        // More ids than blocks, the last block partial: cut, and the
        // partial block gets a fresh id, not 2.
        let f = r.row(&[7, 8, 9, 1], 10, 4, &mut out);
        assert_eq!(out, b"[0, 1, 5]");
        assert_eq!(
            f,
            Fitted {
                tail: true,
                cut: true
            }
        );
        out.clear();
        r.clear();
        r.row(&[9, 1 << 40], 8, 4, &mut out);
        assert_eq!(out, b"[6, 7]");
    }

    #[test]
    fn common_prefix_counts_across_runs() {
        let a: Vec<u32> = (0..200).collect();
        let mut b = a.clone();
        assert_eq!(common_prefix(&a, &b), 200);
        b[130] = 0;
        assert_eq!(common_prefix(&a, &b), 130);
        assert_eq!(common_prefix(&a[..5], &b), 5);
        assert_eq!(common_prefix::<u32>(&[], &b), 0);
    }
}
