//! The block size check: which block sizes the data allows, which rows
//! break the chosen one, and which ids are materialised at two sizes.

use serde::Serialize;

use super::idtable::{IdTable, Pass};
use super::rows::RowStore;
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
pub fn feasible(rows: &RowStore) -> Option<FeasibleSizes> {
    let mut f = FeasibleSizes::default();
    for r in rows.rows.iter().filter(|r| r.has_ids()) {
        if r.isl < 1.0 || r.isl.fract() != 0.0 {
            return None;
        }
        f.add(u64::from(r.n_ids), r.isl as u64);
    }
    (f.rows > 0 && !f.is_empty()).then_some(f)
}

/// `blocks::is_consistent` for a length read as a number (a fractional
/// length fits no block size).
fn consistent(n: u32, len: f64, b: u64) -> bool {
    len >= 0.0 && len.fract() == 0.0 && is_consistent(n as usize, len as u64, b)
}

/// The power of two the data points to: the smallest one every row allows,
/// else the one the most rows allow (the smaller on a tie).
pub fn detect(rows: &RowStore, feasible: Option<FeasibleSizes>) -> Option<u64> {
    if !rows.rows.iter().any(|r| r.has_ids()) {
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

/// What the second pass over every block finds.
pub struct BlockWalk {
    /// Per row: blocks whose (position, id) pair occurs in another row too.
    pub repeated: Vec<u32>,
    pub conflicts: Finding,
}

/// The second pass over every block, for block size `b`: repeated pairs
/// (AIPerf's context length) and ids seen at two sizes.
pub fn walk(rows: &RowStore, table: &mut IdTable, b: u64) -> BlockWalk {
    table.enter(Pass::Sizes);
    let mut conflicts = Finding::default();
    let mut repeated = Vec::with_capacity(rows.rows.len());
    let mut ids = Vec::new();
    for (i, r) in rows.rows.iter().enumerate() {
        rows.ids_into(r, &mut ids);
        let n = ids.len();
        let full = n.saturating_sub(1) as f64 * b as f64;
        // A broken row (too short for its ids) has no sizes to speak of.
        let sized = r.isl > full;
        let last = (r.isl - full).clamp(0.0, b as f64) as u32;
        let mut count = 0;
        for (pos, &id) in ids.iter().enumerate() {
            let size = if !sized {
                0
            } else if pos + 1 < n {
                b as u32
            } else {
                last
            };
            let (rep, conflict) = table.check_block(pos, id, size, b as u32);
            count += u32::from(rep);
            if conflict && sized {
                conflicts.add(rows.line(i));
            }
        }
        repeated.push(count);
    }
    BlockWalk {
        repeated,
        conflicts,
    }
}

pub fn check(
    rows: &RowStore,
    block_size: u64,
    detected: Option<u64>,
    feasible: Option<FeasibleSizes>,
    conflicts: Finding,
) -> BlockReport {
    let mut inconsistent = Finding::default();
    for (i, r) in rows.rows.iter().enumerate().filter(|(_, r)| r.has_ids()) {
        if !consistent(r.n_ids, r.isl, block_size) {
            inconsistent.add(rows.line(i));
        }
    }
    BlockReport {
        block_size,
        detected,
        feasible_min: feasible.map(|f| f.min),
        feasible_max: feasible.and_then(|f| (f.max != u64::MAX).then_some(f.max)),
        inconsistent_rows: inconsistent,
        conflicting_ids: conflicts,
    }
}
