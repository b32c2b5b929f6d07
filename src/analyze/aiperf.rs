//! The `aiperf` section: AIPerf 0.13.0 `analyze-trace`, number for number,
//! computed from the id table instead of AIPerf's set of prefix tuples.

use std::collections::HashMap;

use serde::{Serialize, Serializer};

use super::idtable::{IdHash, IdTable};
use super::rows::{RowStore, StoredRow};
use crate::stats::Summary;

/// The report AIPerf writes with `--output-file`, with its keys in its order.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct AiperfStats {
    pub total_requests: u64,
    pub unique_prefixes: u64,
    pub num_prefix_groups: u64,
    pub cache_hit_rate: f64,
    #[serde(serialize_with = "int_if_integral")]
    pub min_isl: f64,
    #[serde(serialize_with = "int_if_integral")]
    pub max_isl: f64,
    pub avg_isl: f64,
    #[serde(serialize_with = "int_if_integral")]
    pub min_osl: f64,
    #[serde(serialize_with = "int_if_integral")]
    pub max_osl: f64,
    pub avg_osl: f64,
    pub prefix_reuse_ratio: f64,
    pub isl_stats: Option<Summary>,
    pub osl_stats: Option<Summary>,
    pub context_length_stats: Option<Summary>,
    pub unique_prompt_length_stats: Option<Summary>,
    pub hit_rate_stats: Option<Summary>,
}

/// AIPerf writes lengths as integers (`"min_isl": 500`).
fn int_if_integral<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

/// Counts how many rows start with each first id (keyed with the id
/// table's hash: SipHash was most of its cost, and only the count of the
/// entries is read).
#[derive(Default)]
pub struct FirstIds(HashMap<u64, u8, IdHash>);

impl FirstIds {
    pub fn add(&mut self, id: u64) {
        let c = self.0.entry(id).or_insert(0);
        *c = c.saturating_add(1);
    }

    /// AIPerf's `num_prefix_groups`: first ids that start two or more rows.
    pub fn groups(&self) -> u64 {
        self.0.values().filter(|&&c| c > 1).count() as u64
    }
}

/// The statistics of AIPerf's that read only the rows' own numbers (no
/// id table, no second pass), so they can be computed beside the block
/// walk: [`RowColumns::of`] then [`compute`].
pub struct RowColumns {
    n: u64,
    isl: (f64, f64, f64, Option<Summary>),
    osl: (f64, f64, f64, Option<Summary>),
    cache_hit_rate: f64,
    hit_rate_stats: Option<Summary>,
}

impl RowColumns {
    /// The columns, built one at a time in `column` (cleared first): one
    /// buffer, made by the caller, whichever thread this runs on (a
    /// thread's own allocations stay in its allocator arena after they
    /// are freed, and the report's peak is one column over the rows).
    pub fn of(rows: &RowStore, column: &mut Vec<f64>) -> RowColumns {
        let isl = column_of(column, rows.rows.iter().map(|r| r.isl));
        let osl = column_of(column, rows.rows.iter().map(|r| r.osl));
        column.clear();
        column.extend(
            rows.rows
                .iter()
                .filter(|r| r.has_ids())
                .map(|r| f64::from(r.first_unseen) / f64::from(r.n_ids)),
        );
        // statistics.mean: exact, rounded once.
        let cache_hit_rate = if column.is_empty() {
            0.0
        } else {
            crate::stats::exact_mean(column)
        };
        RowColumns {
            n: rows.rows.len() as u64,
            isl,
            osl,
            cache_hit_rate,
            hit_rate_stats: Summary::of(column),
        }
    }
}

/// AIPerf's statistics, given the per-row counts of repeated (position,
/// id) pairs from the second pass and the rows' own columns.
pub fn compute(
    rows: &RowStore,
    table: &IdTable,
    first_ids: &FirstIds,
    repeated: &[u32],
    block_size: u64,
    columns: RowColumns,
) -> AiperfStats {
    let context_of = |row: &StoredRow, rep: u32| {
        if !row.has_ids() {
            0.0
        } else if rep == row.n_ids {
            row.isl
        } else {
            (u64::from(rep) * block_size) as f64
        }
    };
    // One column at a time, each made in a plain loop into its own
    // length: both at once in one pass saved instructions but raised the
    // peak RSS on the 256 MB trace by 6.5 MiB (two columns at once), and
    // `collect` over the zipped rows grew its vector as it went (decision
    // 46, later).
    let context_length_stats = summary_by_row(rows, repeated, context_of);
    let unique_prompt_length_stats =
        summary_by_row(rows, repeated, |r, rep| r.isl - context_of(r, rep));
    let prefix_reuse_ratio = if table.blocks == 0 {
        0.0
    } else {
        table.reused_visits() as f64 / table.blocks as f64
    };
    let RowColumns {
        n,
        isl: (min_isl, max_isl, avg_isl, isl_stats),
        osl: (min_osl, max_osl, avg_osl, osl_stats),
        cache_hit_rate,
        hit_rate_stats,
    } = columns;
    AiperfStats {
        total_requests: n,
        unique_prefixes: table.nodes,
        num_prefix_groups: first_ids.groups(),
        cache_hit_rate,
        min_isl,
        max_isl,
        avg_isl,
        min_osl,
        max_osl,
        avg_osl,
        prefix_reuse_ratio,
        isl_stats,
        osl_stats,
        context_length_stats,
        unique_prompt_length_stats,
        hit_rate_stats,
    }
}

/// The summary of `value(row, repeated)` over the rows, made in one
/// column of exactly their number.
fn summary_by_row(
    rows: &RowStore,
    repeated: &[u32],
    value: impl Fn(&StoredRow, u32) -> f64,
) -> Option<Summary> {
    let mut v = Vec::with_capacity(rows.rows.len());
    // Not `zip`: its `next` was a call a row, the row's decoding in it.
    let mut reps = repeated.iter().copied();
    for r in rows.rows.iter() {
        let Some(rep) = reps.next() else { break };
        v.push(value(&r, rep));
    }
    Summary::of(&mut v)
}

/// A column's min, max and mean (AIPerf's `min(...) if ... else 0` and
/// `sum / len`) and its summary, built in `v`.
fn column_of(
    v: &mut Vec<f64>,
    values: impl Iterator<Item = f64>,
) -> (f64, f64, f64, Option<Summary>) {
    v.clear();
    v.extend(values);
    if v.is_empty() {
        return (0.0, 0.0, 0.0, None);
    }
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    // The summary's mean is AIPerf's `sum / len`, the same compensated
    // sum over the same values in the same order (taken before the
    // summary reorders them): summed once, not twice.
    let summary = Summary::of(v);
    let mean = summary.map_or(0.0, |s| s.mean);
    (min, max, mean, summary)
}
