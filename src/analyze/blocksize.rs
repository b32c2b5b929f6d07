//! The block size check: which block sizes the data allows, which rows
//! break the chosen one, and which ids are materialised at two sizes.

use serde::Serialize;

use super::idtable::{IdTable, Pass};
use super::rows::{RowStore, StoredRow};
use crate::blocks::{is_consistent, FeasibleSizes};
use crate::finding::Finding;

/// Block sizes tried when no single size fits every row.
const MAX_POW2: u32 = 20;

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct BlockReport {
    /// The block size the report uses.
    pub block_size: u64,
    /// The power of two the data points to, if any row has ids.
    pub detected: Option<u64>,
    /// Every row is consistent for any B in [feasible_min, feasible_max]
    /// (max `None`: unbounded); both `None` when no B fits every row.
    pub feasible_min: Option<u64>,
    pub feasible_max: Option<u64>,
    /// Rows with hash_ids that are not consistent for `block_size`.
    pub inconsistent_rows: Finding,
    /// Ids that end up holding two different numbers of tokens (a partial
    /// last block here, a full block there): AIPerf's replay aborts on them.
    /// Counts ids; the lines are the rows where a second size first showed.
    pub conflicting_ids: Finding,
}

/// The range of block sizes every row allows (`blocks::FeasibleSizes`);
/// `None` when no block size fits every row (or no row has ids).
/// Counted as the rows were stored ([`RowStore::feasible`]).
pub fn feasible(rows: &RowStore) -> Option<FeasibleSizes> {
    rows.feasible()
}

/// `blocks::is_consistent` for a length read as a number (a fractional
/// length fits no block size).
fn consistent(n: u32, len: f64, b: u64) -> bool {
    len >= 0.0 && len.fract() == 0.0 && is_consistent(n as usize, len as u64, b)
}

/// The power of two the data points to: the smallest one every row allows,
/// else the one the most rows allow (the smaller on a tie).
pub fn detect(rows: &RowStore, feasible: Option<FeasibleSizes>) -> Option<u64> {
    if rows.rows.with_ids() == 0 {
        return None;
    }
    let pows = (0..=MAX_POW2).map(|e| 1u64 << e);
    if let Some(b) = feasible.and_then(|f| pows.clone().find(|&b| f.contains(b))) {
        return Some(b);
    }
    pows.max_by_key(|&b| {
        let fits = rows
            .rows
            .iter()
            .filter(|r| r.has_ids() && consistent(r.n_ids, r.isl, b))
            .count();
        (fits, std::cmp::Reverse(b))
    })
}

/// The size of the last block of a row of `n` ids and `isl` tokens at
/// block size `b` (every other block is `b`); `None` for a broken row (too
/// short for its ids), which has no sizes to speak of, and for no ids. A
/// size of 0 (a length that is not a number) says nothing either.
fn last_size(n: u32, isl: f64, b: u64) -> Option<u32> {
    let full = n.checked_sub(1)? as f64 * b as f64;
    (isl > full).then(|| (isl - full).clamp(0.0, b as f64) as u32)
}

/// Whether the size check must walk the rows: only when some row whose
/// last block is an id met elsewhere too ([`IdTable::candidate_rows`])
/// has a last block of another size than `b`. Otherwise every block of
/// such an id is `b` (or says nothing), so no id conflicts; a generated
/// trace's candidates are last blocks exactly full (1 row in 512).
///
/// The rows are a byte stream read in order, so the candidates are sorted
/// and met as the rows come: [`MustWalk::add`] each row in order (the
/// report's one pass over the rows, decision 47, last), then
/// [`MustWalk::finish`].
pub struct MustWalk {
    /// The candidate rows not met yet, in decreasing order (the next is
    /// last).
    wanted: Vec<u32>,
    b: u64,
    walk: bool,
}

impl MustWalk {
    pub fn new(table: &IdTable, b: u64) -> MustWalk {
        let mut wanted = table.candidate_rows().to_vec();
        wanted.sort_unstable_by(|x, y| y.cmp(x));
        wanted.dedup();
        MustWalk {
            wanted,
            b,
            walk: false,
        }
    }

    /// Row `i`, in order.
    #[inline]
    pub fn add(&mut self, i: usize, r: &StoredRow) {
        if self.wanted.last().is_some_and(|&next| next as usize == i) {
            self.wanted.pop();
            let b = self.b;
            self.walk |= last_size(r.n_ids, r.isl, b).is_some_and(|s| s != 0 && u64::from(s) != b);
        }
    }

    /// Whether the size check must walk (a candidate past the last row
    /// says nothing sure: walk).
    pub fn finish(self) -> bool {
        self.walk || !self.wanted.is_empty()
    }
}

/// [`MustWalk`] over the rows by itself.
#[cfg(test)]
fn must_walk(rows: &RowStore, table: &IdTable, b: u64) -> bool {
    let mut m = MustWalk::new(table, b);
    for (i, r) in rows.rows.iter().enumerate() {
        m.add(i, &r);
    }
    m.finish()
}

/// The ids seen at two sizes, for block size `b`: a second pass over the
/// rows in order, made only when some id can conflict (`walk`, from
/// [`MustWalk`]), which looks at the ids that can
/// ([`IdTable::size_candidates`]) only, found in each row's runs by binary
/// search. The first pass counted the repeated pairs.
pub fn conflicts(rows: &RowStore, table: &mut IdTable, b: u64, walk: bool) -> Finding {
    let mut conflicts = Finding::default();
    if !walk {
        return conflicts;
    }
    let candidates = table.size_candidates();
    table.enter(Pass::Sizes);
    rows.for_each_runs(|i, r, runs| {
        let n = r.n_ids as usize;
        let Some(last) = last_size(r.n_ids, r.isl, b) else {
            return;
        };
        let mut pos = 0;
        for &(first, len) in runs {
            let from = candidates.partition_point(|&c| c < first);
            // Ids are at most 2^63 - 1: a run's end does not wrap.
            for &id in candidates[from..].iter().take_while(|&&c| c - first < len) {
                let at = pos + (id - first) as usize;
                let size = if at + 1 < n { b as u32 } else { last };
                if table.check_size(id, size, b as u32) {
                    conflicts.add(rows.line(i));
                }
            }
            pos += len as usize;
        }
    });
    conflicts
}

pub fn check(
    rows: &RowStore,
    block_size: u64,
    detected: Option<u64>,
    feasible: Option<FeasibleSizes>,
    conflicts: Finding,
) -> BlockReport {
    // Every row with ids allows every size in the feasible range (the
    // range is exactly where `consistent` holds for all of them), so a
    // size in it breaks no row and the walk over the rows is skipped.
    let fits_all = feasible.is_some_and(|f| f.contains(block_size));
    let inconsistent = if fits_all {
        Finding::default()
    } else {
        inconsistent_rows(rows, block_size)
    };
    BlockReport {
        block_size,
        detected,
        feasible_min: feasible.map(|f| f.min),
        feasible_max: feasible.and_then(|f| (f.max != u64::MAX).then_some(f.max)),
        inconsistent_rows: inconsistent,
        conflicting_ids: conflicts,
    }
}

/// The rows with ids that `block_size` does not fit, walked.
fn inconsistent_rows(rows: &RowStore, block_size: u64) -> Finding {
    let mut inconsistent = Finding::default();
    for (i, r) in rows.rows.iter().enumerate().filter(|(_, r)| r.has_ids()) {
        if !consistent(r.n_ids, r.isl, block_size) {
            inconsistent.add(rows.line(i));
        }
    }
    inconsistent
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use proptest::prelude::*;

    use super::*;
    use crate::analyze::rows::RowFacts;

    /// The size check as the report defines it, block by block in file
    /// order: an id's first size, and the rows where another first shows.
    fn plain(rows: &[(Vec<u64>, f64)], b: u64) -> Finding {
        let mut first = HashMap::new();
        let mut counted = HashSet::new();
        let mut out = Finding::default();
        for (i, (ids, isl)) in rows.iter().enumerate() {
            let n = ids.len();
            let full = n.saturating_sub(1) as f64 * b as f64;
            if n == 0 || *isl <= full {
                continue;
            }
            let last = (isl - full).clamp(0.0, b as f64) as u32;
            for (pos, &id) in ids.iter().enumerate() {
                let size = if pos + 1 < n { b as u32 } else { last };
                // Under one token (a fractional length) truncates to 0,
                // which says nothing, like a broken row.
                if size == 0 {
                    continue;
                }
                match first.get(&id) {
                    None => {
                        first.insert(id, size);
                    }
                    Some(&s) if s == size => {}
                    Some(_) => {
                        if counted.insert(id) {
                            out.add(i as u64 + 1);
                        }
                    }
                }
            }
        }
        out
    }

    fn analyzed(rows: &[(Vec<u64>, f64)]) -> (RowStore, IdTable) {
        let mut store = RowStore::default();
        let mut table = IdTable::default();
        for (i, (ids, isl)) in rows.iter().enumerate() {
            let visit = table.visit(i as u32, ids);
            let facts = RowFacts {
                isl: *isl,
                osl: 0.0,
                timestamp: None.into(),
            };
            store.push(i as u64 + 1, facts, visit.first_unseen as u32, ids);
        }
        (store, table)
    }

    #[test]
    fn a_last_block_met_again_at_the_full_size_is_no_conflict() {
        // 3 is the last block of row 1 at the full size (8 tokens of 4 a
        // block), then a middle block: a candidate, not a conflict. 6 is
        // the last block of row 3 at 1 token, and a middle one in row 4.
        let rows = vec![
            (vec![1, 2, 3], 12.0),
            (vec![1, 2, 3, 4], 13.0),
            (vec![5, 6], 5.0),
            (vec![5, 6, 7], 9.0),
        ];
        let (store, mut table) = analyzed(&rows);
        let walk = must_walk(&store, &table, 4);
        let got = conflicts(&store, &mut table, 4, walk);
        assert_eq!((got.count, got.first_lines.clone()), (1, vec![4]));
        assert_eq!(got, plain(&rows, 4));
    }

    #[test]
    fn rows_are_walked_only_when_a_candidate_last_block_is_not_full() {
        // 3 is row 1's last block, full at 4 (12 tokens, 3 blocks), then
        // a middle block of row 2: row 1 is the one candidate row.
        let full = vec![(vec![1, 2, 3], 12.0), (vec![1, 2, 3, 4], 13.0)];
        let (store, table) = analyzed(&full);
        assert_eq!(table.candidate_rows(), &[0]);
        assert!(!must_walk(&store, &table, 4));
        // At 5 its last block is 2 tokens (12 - 2 x 5): walked (row 2, 13
        // tokens for 4 blocks of 5, is broken and shows no sizes, so the
        // walk finds no conflict; deciding that is the walk's job).
        assert!(must_walk(&store, &table, 5));
        // At 3 the last block holds 12 - 2 x 3 = 6 tokens, clamped to a
        // full 3.
        assert!(!must_walk(&store, &table, 3));
        // 9 is row 3's last block (2 tokens), met again as row 4's last
        // (3 tokens), then in the middle of row 5: rows 3 and 4 are
        // candidates, added when 9 is met again and when row 4 ends.
        let rows = vec![(vec![8, 9], 6.0), (vec![8, 9], 7.0), (vec![8, 9, 10], 9.0)];
        let (store, table) = analyzed(&rows);
        let mut got = table.candidate_rows().to_vec();
        got.sort_unstable();
        assert_eq!(got, [0, 1]);
        assert!(must_walk(&store, &table, 4));
        assert!(
            !must_walk(&store, &table, 3),
            "6 and 7 tokens in 2 blocks of 3: full"
        );
    }

    proptest! {
        #[test]
        fn conflicts_are_the_plain_checks(
            rows in prop::collection::vec(
                (
                    prop::collection::vec(
                        prop_oneof![
                            3 => (0u64..12).prop_map(|s| vec![s]),
                            2 => (0u64..12, 1u64..5).prop_map(|(s, n)| (s..s + n).collect()),
                        ],
                        0..4,
                    )
                    .prop_map(|p: Vec<Vec<u64>>| p.concat()),
                    // Quarters too: a last block of 3.75 tokens is 3 (the
                    // size is truncated), not 4.
                    prop_oneof![
                        3 => (0u32..24).prop_map(f64::from),
                        1 => (0u32..96).prop_map(|q| f64::from(q) / 4.0),
                    ],
                ),
                1..24,
            ),
            b in 1u64..5,
        ) {
            let (store, mut table) = analyzed(&rows);
            let walk = must_walk(&store, &table, b);
            prop_assert_eq!(conflicts(&store, &mut table, b, walk), plain(&rows, b));
        }

        /// The range counted as rows are stored is the one a walk over
        /// them finds, and a size in it leaves no row inconsistent (the
        /// check's walk is skipped then).
        #[test]
        fn feasible_sizes_are_the_plain_walk(
            rows in prop::collection::vec(
                (
                    prop::collection::vec(0u64..40, 0..5),
                    prop_oneof![
                        4 => (0u32..40).prop_map(f64::from),
                        1 => (0u32..160).prop_map(|q| f64::from(q) / 4.0),
                        1 => Just(-1.0),
                    ],
                ),
                1..12,
            ),
            b in 1u64..12,
        ) {
            let (store, _) = analyzed(&rows);
            let mut f = FeasibleSizes::default();
            let mut unfit = false;
            for (ids, isl) in rows.iter().filter(|(ids, _)| !ids.is_empty()) {
                unfit |= *isl < 1.0 || isl.fract() != 0.0;
                f.add(ids.len() as u64, *isl as u64);
            }
            let want = (!unfit && f.rows > 0 && !f.is_empty()).then_some(f);
            let got = feasible(&store);
            prop_assert_eq!(got.map(|f| (f.min, f.max, f.rows)), want.map(|f| (f.min, f.max, f.rows)));
            let report = check(&store, b, None, got, Finding::default());
            prop_assert_eq!(report.inconsistent_rows, inconsistent_rows(&store, b));
        }
    }
}
