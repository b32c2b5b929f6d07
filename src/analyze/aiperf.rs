//! The `aiperf` section: AIPerf 0.13.0 `analyze-trace`, number for number,
//! computed from the id table instead of AIPerf's set of prefix tuples.

use std::collections::HashMap;

use serde::{Serialize, Serializer};

use super::idtable::{IdHash, IdTable};
use super::rows::{RowStore, StoredRow};
use crate::stats::{ExactMean, SecondPass, Summary, TwoPass};

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
pub struct FirstIds {
    counts: HashMap<u64, u8, IdHash>,
    /// The last id added, when it already starts two rows or more: the
    /// next row starting with it changes nothing (only `> 1` is read), so
    /// it is not looked up (a generated trace's rows all start with the
    /// same id).
    last_many: Option<u64>,
}

impl FirstIds {
    pub fn add(&mut self, id: u64) {
        if self.last_many == Some(id) {
            return;
        }
        let c = self.counts.entry(id).or_insert(0);
        *c = c.saturating_add(1);
        self.last_many = (*c > 1).then_some(id);
    }

    /// AIPerf's `num_prefix_groups`: first ids that start two or more rows.
    pub fn groups(&self) -> u64 {
        self.counts.values().filter(|&&c| c > 1).count() as u64
    }
}

/// The statistics of AIPerf's that read the rows (their own numbers and
/// their repeated pairs' counts, no id table): [`RowColumns::of`] then
/// [`compute`].
pub struct RowColumns {
    n: u64,
    isl: (f64, f64, f64, Option<Summary>),
    osl: (f64, f64, f64, Option<Summary>),
    cache_hit_rate: f64,
    hit_rate_stats: Option<Summary>,
    context_length_stats: Option<Summary>,
    unique_prompt_length_stats: Option<Summary>,
}

/// A column's min and max as AIPerf takes them (`min(...)`, `max(...)`
/// over the values in order), and its summary's first pass.
struct Column {
    min: f64,
    max: f64,
    summary: TwoPass,
}

impl Default for Column {
    fn default() -> Self {
        Column {
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            summary: TwoPass::default(),
        }
    }
}

impl Column {
    #[inline]
    fn first(&mut self, x: f64) {
        self.min = self.min.min(x);
        self.max = self.max.max(x);
        self.summary.first(x);
    }
}

/// (min, max, mean, summary) of a column's second pass `s`, AIPerf's 0s
/// for no values. The mean is AIPerf's `sum / len`: the summary's, the
/// same compensated sum over the same values in the same order.
fn column_stats(min: f64, max: f64, s: SecondPass) -> (f64, f64, f64, Option<Summary>) {
    match s.finish() {
        None => (0.0, 0.0, 0.0, None),
        Some(s) => (min, max, s.mean, Some(s)),
    }
}

impl RowColumns {
    /// The columns, summarised in two passes over the rows and no column
    /// of them ([`TwoPass`]: a column each was a pass over the rows and 8
    /// bytes a row; decision 47, last). `repeated` is each row's repeated
    /// pairs ([`IdTable::take_repeated`]), `block_size` the report's;
    /// `also(i, row)` is called for each row in the first pass, for the
    /// other sections that read the rows in order.
    pub fn of(
        rows: &RowStore,
        repeated: &[u32],
        block_size: u64,
        mut also: impl FnMut(usize, &StoredRow),
    ) -> RowColumns {
        let (mut isl, mut osl) = (Column::default(), Column::default());
        let (mut hit, mut exact) = (TwoPass::default(), ExactMean::default());
        let (mut context, mut unique) = (TwoPass::default(), TwoPass::default());
        let context_of = |row: &StoredRow, rep: u32| {
            if !row.has_ids() {
                0.0
            } else if rep == row.n_ids {
                row.isl
            } else {
                (u64::from(rep) * block_size) as f64
            }
        };
        let rate = |r: &StoredRow| f64::from(r.first_unseen) / f64::from(r.n_ids);
        // Rows without a count of their own (none: the counts are taken
        // for every row) would count none.
        let rep = |i: usize| repeated.get(i).copied().unwrap_or(0);
        // Not `enumerate`: its `next` was a call a row (with the row's
        // decoding in it, 30 instructions more a row).
        let mut it = rows.rows.iter();
        for i in 0..rows.rows.len() {
            let Some(r) = it.next() else { break };
            isl.first(r.isl);
            osl.first(r.osl);
            if r.has_ids() {
                let h = rate(&r);
                hit.first(h);
                exact.add(h);
            }
            let c = context_of(&r, rep(i));
            context.first(c);
            unique.first(r.isl - c);
            also(i, &r);
        }
        // statistics.mean: exact, rounded once (else the compensated mean,
        // the summary's).
        let cache_hit_rate = if hit.is_empty() {
            0.0
        } else {
            exact.value().unwrap_or_else(|| hit.mean())
        };
        let (isl_min, isl_max) = (isl.min, isl.max);
        let (osl_min, osl_max) = (osl.min, osl.max);
        let mut isl = isl.summary.second_pass();
        let mut osl = osl.summary.second_pass();
        let mut hit = hit.second_pass();
        let mut context = context.second_pass();
        let mut unique = unique.second_pass();
        let mut it = rows.rows.iter();
        for i in 0..rows.rows.len() {
            let Some(r) = it.next() else { break };
            isl.add(r.isl);
            osl.add(r.osl);
            if r.has_ids() {
                hit.add(rate(&r));
            }
            let c = context_of(&r, rep(i));
            context.add(c);
            unique.add(r.isl - c);
        }
        RowColumns {
            n: rows.rows.len() as u64,
            isl: column_stats(isl_min, isl_max, isl),
            osl: column_stats(osl_min, osl_max, osl),
            cache_hit_rate,
            hit_rate_stats: hit.finish(),
            context_length_stats: context.finish(),
            unique_prompt_length_stats: unique.finish(),
        }
    }
}

/// AIPerf's statistics: the table's counts and the rows' columns.
pub fn compute(table: &IdTable, first_ids: &FirstIds, columns: RowColumns) -> AiperfStats {
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
        context_length_stats,
        unique_prompt_length_stats,
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::analyze::rows::RowFacts;
    use crate::stats::exact_mean;

    /// A summary as bits, to compare exactly.
    fn bits(s: Option<Summary>) -> Option<[u64; 7]> {
        s.map(|s| [s.mean, s.std_dev, s.min, s.p25, s.median, s.p75, s.max].map(f64::to_bits))
    }

    fn plain_column(v: &mut [f64]) -> [u64; 3] {
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mean = Summary::of(v).map_or(0.0, |s| s.mean);
        if v.is_empty() {
            [0, 0, 0]
        } else {
            [min, max, mean].map(f64::to_bits)
        }
    }

    proptest! {
        /// Groups are the first ids met twice or more, however the rows
        /// repeat them (runs of one id, alternating, once).
        #[test]
        fn prefix_groups_are_the_ids_met_twice(ids in prop::collection::vec(0u64..6, 0..40)) {
            let mut f = FirstIds::default();
            for &id in &ids {
                f.add(id);
            }
            let mut counts = std::collections::HashMap::new();
            for &id in &ids {
                *counts.entry(id).or_insert(0) += 1;
            }
            let want = counts.values().filter(|&&c| c > 1).count() as u64;
            prop_assert_eq!(f.groups(), want);
        }

        /// The two passes give what a column per statistic gives (the
        /// computation before them, AIPerf's definitions written plainly):
        /// lengths whole, fractional, negative and zero of both signs, rows
        /// without ids, every repeated count from none to all.
        #[test]
        fn row_columns_are_the_plain_columns(
            rows in prop::collection::vec(
                (
                    prop_oneof![
                        3 => (0u32..20_000).prop_map(f64::from),
                        1 => prop::sample::select(vec![-0.0, 0.0, 0.5, -3.0, 1e300]),
                    ],
                    prop_oneof![(0u32..700).prop_map(f64::from), Just(-0.0)],
                    0u32..40,
                    any::<prop::sample::Index>(),
                    any::<prop::sample::Index>(),
                ),
                0..300,
            ),
            b in prop_oneof![Just(512u64), 1u64..64],
        ) {
            let mut store = RowStore::default();
            let mut repeated = Vec::new();
            let mut plain = Vec::new();
            for (i, &(isl, osl, n, seen, rep)) in rows.iter().enumerate() {
                let ids: Vec<u64> = (0..u64::from(n)).map(|k| 1000 * i as u64 + k).collect();
                let first_unseen = seen.index(n as usize + 1) as u32;
                let rep = rep.index(n as usize + 1) as u32;
                let facts = RowFacts { isl, osl, timestamp: None.into() };
                store.push(i as u64 + 1, facts, first_unseen, &ids);
                repeated.push(rep);
                plain.push((isl, osl, n, first_unseen, rep));
            }
            let mut seen = 0;
            let got = RowColumns::of(&store, &repeated, b, |i, r| {
                assert_eq!(i, seen);
                assert_eq!(r.isl.to_bits(), plain[i].0.to_bits());
                seen += 1;
            });
            prop_assert_eq!(seen, rows.len());
            let context = |&(isl, _, n, _, rep): &(f64, f64, u32, u32, u32)| {
                if n == 0 {
                    0.0
                } else if rep == n {
                    isl
                } else {
                    (u64::from(rep) * b) as f64
                }
            };
            let mut isl: Vec<f64> = plain.iter().map(|p| p.0).collect();
            let mut osl: Vec<f64> = plain.iter().map(|p| p.1).collect();
            let mut hit: Vec<f64> = plain
                .iter()
                .filter(|p| p.2 > 0)
                .map(|p| f64::from(p.3) / f64::from(p.2))
                .collect();
            let mut ctx: Vec<f64> = plain.iter().map(context).collect();
            let mut unique: Vec<f64> = plain.iter().map(|p| p.0 - context(p)).collect();
            let g = &got;
            prop_assert_eq!([g.isl.0, g.isl.1, g.isl.2].map(f64::to_bits), plain_column(&mut isl.clone()));
            prop_assert_eq!([g.osl.0, g.osl.1, g.osl.2].map(f64::to_bits), plain_column(&mut osl.clone()));
            prop_assert_eq!(bits(g.isl.3), bits(Summary::of(&mut isl)));
            prop_assert_eq!(bits(g.osl.3), bits(Summary::of(&mut osl)));
            let rate = if hit.is_empty() { 0.0 } else { exact_mean(&hit) };
            prop_assert_eq!(g.cache_hit_rate.to_bits(), rate.to_bits());
            prop_assert_eq!(bits(g.hit_rate_stats), bits(Summary::of(&mut hit)));
            prop_assert_eq!(bits(g.context_length_stats), bits(Summary::of(&mut ctx)));
            prop_assert_eq!(bits(g.unique_prompt_length_stats), bits(Summary::of(&mut unique)));
            prop_assert_eq!(g.n, rows.len() as u64);
        }
    }
}
