//! Summary statistics, and the three percentile definitions the toolkit
//! uses, each where its consumer needs it:
//!
//! - [`percentile_linear`]: numpy's linear interpolation at k = (n-1)p over
//!   every value. mc-analyze must match AIPerf number for number, and AIPerf
//!   uses numpy; the trace's values fit in memory.
//! - [`nearest_rank`]: over a histogram of small integers (the engine's
//!   batch sizes and tokens per step): exact, constant memory, and always a
//!   value that occurred (a batch of 7.3 requests means nothing).
//! - HDR histograms (`hdrhistogram`, in `replay::metrics`): mc-replay's
//!   latencies, millions of inter-token gaps in constant memory at 3
//!   significant digits; means and std are kept exactly beside them.
//!
//! Mean and population standard deviation use compensated (Neumaier) sums,
//! so results agree with numpy's pairwise sums to far better than 1e-12
//! relative.

use serde::Serialize;

/// `{mean, std_dev, min, p25, median, p75, max}` of a list of values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Summary {
    pub mean: f64,
    pub std_dev: f64,
    pub min: f64,
    pub p25: f64,
    pub median: f64,
    pub p75: f64,
    pub max: f64,
}

impl Summary {
    /// `None` for no values (AIPerf writes `null`). Reorders `values`: the
    /// quantiles are selected, not sorted for (a sort of each column was
    /// a tenth of mc-analyze's instructions; decision 46), and are the
    /// same bits a sort by `f64::total_cmp` would give.
    pub fn of(values: &mut [f64]) -> Option<Summary> {
        if values.is_empty() {
            return None;
        }
        let m = mean(values);
        let var = mean_by(values, |x| (x - m) * (x - m));
        let n = values.len();
        let ranks = SummaryRanks::of(n);
        let at = ranked(values, ranks.positions);
        Some(ranks.summary(m, var, at))
    }
}

/// The sorted positions a [`Summary`] of `n > 0` values reads (the ends,
/// the quartiles' two neighbours each, the middle two), and how the
/// quartiles lie between their neighbours: one rule for [`Summary::of`]
/// and [`SecondPass::finish`].
struct SummaryRanks {
    n: usize,
    positions: [usize; 8],
    q1: f64,
    q3: f64,
}

impl SummaryRanks {
    fn of(n: usize) -> SummaryRanks {
        let (q1, q3) = (linear_rank(n, 0.25), linear_rank(n, 0.75));
        SummaryRanks {
            n,
            positions: [0, n - 1, q1.0, q1.1, (n - 1) / 2, n / 2, q3.0, q3.1],
            q1: q1.2,
            q3: q3.2,
        }
    }

    /// The summary from the mean, the variance and the values at
    /// `positions`, in their order.
    fn summary(&self, mean: f64, var: f64, at: [f64; 8]) -> Summary {
        let [min, max, q1_lo, q1_hi, mid_lo, mid_hi, q3_lo, q3_hi] = at;
        Summary {
            mean,
            std_dev: var.sqrt(),
            min,
            p25: lerp(q1_lo, q1_hi, self.q1),
            median: middle(self.n, mid_lo, mid_hi),
            p75: lerp(q3_lo, q3_hi, self.q3),
            max,
        }
    }
}

/// `ranks` sorted with repeats dropped: the first `m` of the array, and `m`.
fn distinct<const N: usize>(mut ranks: [usize; N]) -> ([usize; N], usize) {
    ranks.sort_unstable();
    let mut m = 0;
    for i in 0..N {
        if m == 0 || ranks[m - 1] != ranks[i] {
            ranks[m] = ranks[i];
            m += 1;
        }
    }
    (ranks, m)
}

/// The values at sorted positions `ranks` (each below `values.len()`):
/// what `values` sorted by `f64::total_cmp` holds there, bit for bit (in a
/// total order, the value at a position is the same whatever the
/// algorithm). May reorder `values`. A long column is counted by the top
/// 16 bits of each value's order key and only the values in the ranks'
/// buckets are selected among (two passes over the column); a short one is
/// selected in place.
pub fn ranked<const N: usize>(values: &mut [f64], ranks: [usize; N]) -> [f64; N] {
    ranked_with(values, ranks, RADIX_MIN)
}

/// Columns from this long are counted first: below it, the histogram's
/// fixed cost (64 Ki counters) is more than the selection it saves.
const RADIX_MIN: usize = 4096;
const RADIX_BITS: u32 = 16;

/// [`ranked`], counting the columns of `radix_min` values or more.
fn ranked_with<const N: usize>(
    values: &mut [f64],
    ranks: [usize; N],
    radix_min: usize,
) -> [f64; N] {
    let (unique, m) = distinct(ranks);
    let mut found = [0.0; N];
    if values.len() >= radix_min && u32::try_from(values.len()).is_ok() {
        select_by_buckets(values, &unique[..m], &mut found[..m]);
    } else {
        select_ranks(values, 0, &unique[..m], &mut found[..m]);
    }
    ranks.map(|r| found[unique[..m].partition_point(|&u| u < r)])
}

/// `x`'s place in `f64::total_cmp`'s order as an unsigned number: negative
/// values (sign bit set) reversed below the positive ones.
fn order_key(x: f64) -> u64 {
    let b = x.to_bits();
    // Without a branch (each value of each column is keyed): all ones to
    // flip a negative value's bits, the sign bit alone to set a positive
    // one's.
    let flip = ((b as i64 >> 63) as u64) | 1 << 63;
    b ^ flip
}

/// [`select_ranks`] for a long column (fewer than 2^32 values): counts
/// the values per bucket of the top bits of their order key, finds the
/// bucket of each rank, gathers those buckets' values (a few per cent of
/// the column) and selects in each.
fn select_by_buckets(values: &[f64], ranks: &[usize], out: &mut [f64]) {
    let mut counts = Buckets::new();
    for &x in values {
        counts.count(x);
    }
    let mut gather = counts.gather(ranks);
    for &x in values {
        gather.add(x);
    }
    gather.select(ranks, out);
}

fn bucket(x: f64) -> usize {
    (order_key(x) >> (64 - RADIX_BITS)) as usize
}

/// The values counted by bucket (the top [`RADIX_BITS`] of their order
/// key): [`select_by_buckets`]'s first pass over a column, and
/// [`TwoPass`]'s over values met twice.
struct Buckets {
    counts: Vec<u32>,
}

impl Buckets {
    fn new() -> Buckets {
        Buckets {
            counts: vec![0u32; 1 << RADIX_BITS],
        }
    }

    #[inline]
    fn count(&mut self, x: f64) {
        self.counts[bucket(x)] += 1;
    }

    /// Where the values at `ranks` (increasing, each below the values
    /// counted) are: each rank's bucket and how many values lie below it.
    fn gather(self, ranks: &[usize]) -> Gather {
        // The buckets counted again by their top 8 bits: walking 64 Ki
        // counters to the top rank (the max) cost more than the column's
        // own counting on 60 K values; a column's values sit under a few
        // of these 256, and only those are walked bucket by bucket
        // (decision 46, later). Summed here, once, not counted a value at
        // a time (decision 46, last).
        let fine = 1usize << (RADIX_BITS - 8);
        let coarse: Vec<u32> = self
            .counts
            .chunks_exact(fine)
            .map(|c| c.iter().sum())
            .collect();
        // Ranks increase, so their buckets do.
        let mut at = vec![(0usize, 0usize); ranks.len()];
        let (mut below, mut r) = (0usize, 0);
        for (cb, &cc) in coarse.iter().enumerate() {
            if r == ranks.len() {
                break;
            }
            if ranks[r] >= below + cc as usize {
                below += cc as usize;
                continue;
            }
            let first = cb * fine;
            for (i, &c) in self.counts[first..first + fine].iter().enumerate() {
                while r < ranks.len() && ranks[r] < below + c as usize {
                    at[r] = (first + i, below);
                    r += 1;
                }
                below += c as usize;
            }
        }
        // The buckets wanted, numbered from 1 in `group_of` (0: not wanted).
        let mut wanted: Vec<(usize, usize)> = Vec::new();
        for &(b, below) in &at {
            if wanted.last().is_none_or(|&(w, _)| w != b) {
                wanted.push((b, below));
            }
        }
        // The counters' room, zeroed, becomes the map of the wanted buckets.
        let mut group_of = self.counts;
        let mut groups: Vec<Vec<f64>> = Vec::with_capacity(wanted.len());
        for &(b, _) in &wanted {
            groups.push(Vec::with_capacity(group_of[b] as usize));
        }
        group_of.fill(0);
        for (j, &(b, _)) in wanted.iter().enumerate() {
            // At most one group per rank: `ranked` asks for 8 at most.
            group_of[b] = u32::try_from(j + 1).unwrap_or(u32::MAX);
        }
        Gather {
            group_of,
            groups,
            wanted,
            at,
        }
    }
}

/// The values of the wanted buckets, gathered ([`Buckets::gather`]).
struct Gather {
    group_of: Vec<u32>,
    groups: Vec<Vec<f64>>,
    /// (bucket, values below it) of each group.
    wanted: Vec<(usize, usize)>,
    /// (bucket, values below it) of each rank.
    at: Vec<(usize, usize)>,
}

impl Gather {
    #[inline]
    fn add(&mut self, x: f64) {
        let g = self.group_of[bucket(x)];
        if g != 0 {
            self.groups[g as usize - 1].push(x);
        }
    }

    /// The values at `ranks` (those `gather` was given) into `out`.
    fn select(mut self, ranks: &[usize], out: &mut [f64]) {
        let mut r = 0;
        for (group, &(b, below)) in self.groups.iter_mut().zip(&self.wanted) {
            let n = self.at[r..].iter().take_while(|&&(rb, _)| rb == b).count();
            select_ranks(group, below, &ranks[r..r + n], &mut out[r..r + n]);
            r += n;
        }
    }
}

/// A [`Summary`] of values met twice in the same order, with no column
/// of them: [`TwoPass::first`] each (the mean's sum, the counts by
/// bucket), then [`TwoPass::second_pass`] and [`SecondPass::add`] each
/// again (the variance's sum about the mean, the values of the ranks'
/// buckets), then [`SecondPass::finish`]. The same bits as
/// [`Summary::of`] over the values in that order: the same compensated
/// sums in the same order, and a rank's value is the same whoever selects
/// it. mc-analyze's columns are the rows' numbers, decoded from bytes: two
/// passes over the rows for all of them, where a column each was a pass
/// and 8 bytes a row (decision 47, last).
pub struct TwoPass {
    n: usize,
    sum: Sum,
    buckets: Buckets,
}

/// [`TwoPass`]'s second pass.
pub struct SecondPass {
    n: usize,
    mean: f64,
    var: Sum,
    gather: Gather,
    ranks: Ranks,
}

/// A summary's positions ([`SummaryRanks`]) and the same increasing,
/// without repeats (the first `m`), which the second pass gathers.
struct Ranks {
    summary: SummaryRanks,
    unique: [usize; 8],
    m: usize,
}

impl Ranks {
    /// For n > 0 values.
    fn of(n: usize) -> Ranks {
        let summary = SummaryRanks::of(n);
        let (unique, m) = distinct(summary.positions);
        Ranks { summary, unique, m }
    }
}

impl Default for TwoPass {
    fn default() -> Self {
        TwoPass {
            n: 0,
            sum: Sum::default(),
            buckets: Buckets::new(),
        }
    }
}

impl TwoPass {
    /// A value, in the first pass.
    #[inline]
    pub fn first(&mut self, x: f64) {
        self.n += 1;
        self.sum.add(x);
        self.buckets.count(x);
    }

    /// The values counted in the first pass.
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The mean (the summary's).
    pub fn mean(&self) -> f64 {
        self.sum.value() / self.n as f64
    }

    /// Ends the first pass.
    pub fn second_pass(self) -> SecondPass {
        // No values: no ranks, and no value comes again.
        let ranks = if self.n == 0 {
            Ranks {
                summary: SummaryRanks {
                    n: 0,
                    positions: [0; 8],
                    q1: 0.0,
                    q3: 0.0,
                },
                unique: [0; 8],
                m: 0,
            }
        } else {
            Ranks::of(self.n)
        };
        SecondPass {
            n: self.n,
            mean: self.mean(),
            var: Sum::default(),
            gather: self.buckets.gather(&ranks.unique[..ranks.m]),
            ranks,
        }
    }
}

impl SecondPass {
    /// A value again (in the first pass's order).
    #[inline]
    pub fn add(&mut self, x: f64) {
        let m = self.mean;
        self.var.add((x - m) * (x - m));
        self.gather.add(x);
    }

    /// The summary (`None` for no values).
    pub fn finish(self) -> Option<Summary> {
        let n = self.n;
        if n == 0 {
            return None;
        }
        let Ranks { summary, unique, m } = self.ranks;
        let mut found = [0.0; 8];
        self.gather.select(&unique[..m], &mut found[..m]);
        let at = summary
            .positions
            .map(|r| found[unique[..m].partition_point(|&u| u < r)]);
        Some(summary.summary(self.mean, self.var.value() / n as f64, at))
    }
}

/// Puts in `out[i]` the value at sorted position `ranks[i]` (strictly
/// increasing, offsets from `base`, the position of `v[0]`): selects the
/// middle rank, then the ranks below it in the part below, the ranks above
/// in the part above.
fn select_ranks(v: &mut [f64], base: usize, ranks: &[usize], out: &mut [f64]) {
    if ranks.is_empty() {
        return;
    }
    let m = ranks.len() / 2;
    let k = ranks[m] - base;
    let (below, at, above) = v.select_nth_unstable_by(k, f64::total_cmp);
    out[m] = *at;
    let (out_below, out_rest) = out.split_at_mut(m);
    select_ranks(below, base, &ranks[..m], out_below);
    select_ranks(above, base + k + 1, &ranks[m + 1..], &mut out_rest[1..]);
}

/// A compensated running sum.
#[derive(Debug, Default, Clone, Copy)]
pub struct Sum {
    sum: f64,
    c: f64,
}

impl Sum {
    pub fn add(&mut self, x: f64) {
        let t = self.sum + x;
        if self.sum.abs() >= x.abs() {
            self.c += (self.sum - t) + x;
        } else {
            self.c += (x - t) + self.sum;
        }
        self.sum = t;
    }

    pub fn value(&self) -> f64 {
        self.sum + self.c
    }
}

pub fn mean(values: &[f64]) -> f64 {
    mean_by(values, |x| x)
}

fn mean_by(values: &[f64], f: impl Fn(f64) -> f64) -> f64 {
    let mut s = Sum::default();
    for &v in values {
        s.add(f(v));
    }
    s.value() / values.len() as f64
}

/// Python's `statistics.mean`: the exact mean, rounded once. Exact for
/// values in [2^-84, 2^40) such as hit rates k/n; otherwise (or on overflow)
/// the compensated mean.
pub fn exact_mean(values: &[f64]) -> f64 {
    let mut e = ExactMean::default();
    for &v in values {
        e.add(v);
    }
    e.value().unwrap_or_else(|| mean(values))
}

/// [`exact_mean`] fed a value at a time: the fixed-point total of the
/// values, or `None` from [`ExactMean::value`] when one did not fit (the
/// caller then takes the compensated mean of the same values).
#[derive(Debug, Default, Clone, Copy)]
pub struct ExactMean {
    total: i128,
    n: u64,
    failed: bool,
}

impl ExactMean {
    const SCALE: i32 = 84;

    pub fn add(&mut self, v: f64) {
        self.n += 1;
        // v = m * 2^e exactly, with m < 2^53.
        let fixed = if v == 0.0 {
            Some(0)
        } else if v.is_finite() && v.abs() < (1u64 << 40) as f64 {
            let bits = v.to_bits();
            let exp = ((bits >> 52) & 0x7ff) as i32;
            let (m, e) = if exp == 0 {
                (bits & ((1 << 52) - 1), -1074)
            } else {
                ((bits & ((1 << 52) - 1)) | (1 << 52), exp - 1075)
            };
            let shift = e + Self::SCALE;
            // A negation, not a multiply by -1 or 1 (an i128 multiply).
            let m = if v < 0.0 {
                -i128::from(m)
            } else {
                i128::from(m)
            };
            (shift >= 0).then(|| m << shift)
        } else {
            None
        };
        match fixed.and_then(|f| self.total.checked_add(f)) {
            Some(t) => self.total = t,
            None => self.failed = true,
        }
    }

    /// The exact mean rounded once (NaN for no values); `None` when a
    /// value did not fit the fixed point or the total overflowed.
    pub fn value(&self) -> Option<f64> {
        if self.failed {
            return None;
        }
        let n = i128::from(self.n);
        if n == 0 {
            return Some(f64::NAN);
        }
        // Correct rounding of total / (n * 2^84): divide with at least 55
        // significant bits, fold the remainder into a sticky bit, convert once.
        let neg = self.total < 0;
        let s = self.total.unsigned_abs();
        if s == 0 {
            return Some(0.0);
        }
        let bits = |x: u128| 128 - x.leading_zeros() as i32;
        let k = (56 + bits(n as u128) - bits(s)).max(0);
        let num = s.checked_shl(k as u32).filter(|_| bits(s) + k < 127)?;
        let (q, r) = (num / n as u128, num % n as u128);
        let q = if r != 0 { q | 1 } else { q };
        let m = q as f64 * 2f64.powi(-(Self::SCALE + k));
        Some(if neg { -m } else { m })
    }
}

/// numpy's `percentile(..., method="linear")` on sorted values, p in [0, 1].
pub fn percentile_linear(sorted: &[f64], p: f64) -> f64 {
    let (lo, hi, t) = linear_rank(sorted.len(), p);
    lerp(sorted[lo], sorted[hi], t)
}

/// The same percentile of unsorted `values` (reordered), selected.
pub fn percentile_linear_unsorted(values: &mut [f64], p: f64) -> f64 {
    let (lo, hi, t) = linear_rank(values.len(), p);
    let [a, b] = ranked(values, [lo, hi]);
    lerp(a, b, t)
}

/// [`percentile_linear_unsorted`] at `p` and `q`, the ranks of both
/// selected at once (the same values: a rank's value does not depend on
/// who selects it).
pub fn two_percentiles_linear_unsorted(values: &mut [f64], p: f64, q: f64) -> (f64, f64) {
    let (a, b) = (linear_rank(values.len(), p), linear_rank(values.len(), q));
    let [a0, a1, b0, b1] = ranked(values, [a.0, a.1, b.0, b.1]);
    (lerp(a0, a1, a.2), lerp(b0, b1, b.2))
}

/// numpy's linear method over n > 0 sorted values: the two positions to
/// interpolate between, and how far (k = (n-1)p).
fn linear_rank(n: usize, p: f64) -> (usize, usize, f64) {
    let k = (n - 1) as f64 * p;
    let lo = k.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    (lo, hi, k - lo as f64)
}

/// numpy's _lerp: interpolate from the nearer end, for symmetry.
fn lerp(a: f64, b: f64, t: f64) -> f64 {
    let d = b - a;
    if t >= 0.5 {
        b - d * (1.0 - t)
    } else {
        a + d * t
    }
}

/// numpy's `median`: the middle value, or the mean of the two middle ones.
pub fn median_sorted(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    middle(n, sorted[(n - 1) / 2], sorted[n / 2])
}

/// The median of n values from the ones at positions (n-1)/2 and n/2.
fn middle(n: usize, lo: f64, hi: f64) -> f64 {
    if !n.is_multiple_of(2) {
        hi
    } else {
        (lo + hi) / 2.0
    }
}

/// Nearest-rank quantile of a histogram of small integers (`hist[v]` =
/// how often `v` occurred): the smallest value with at least `q`·N
/// occurrences at or below it; 0 for an empty histogram.
pub fn nearest_rank(hist: &[u64], q: f64) -> u64 {
    let n: u64 = hist.iter().sum();
    if n == 0 {
        return 0;
    }
    let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
    let mut cum = 0;
    for (v, &c) in hist.iter().enumerate() {
        cum += c;
        if cum >= rank {
            return v as u64;
        }
    }
    (hist.len() - 1) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_a_small_list() {
        // 1, 2, 3, 4: mean 2.5; deviations 1.5, .5, .5, 1.5 -> variance
        // (2.25+.25+.25+2.25)/4 = 1.25; p25 at k = 0.75: 1 + 0.75 = 1.75;
        // median (2+3)/2; p75 at k = 2.25: 3.25.
        let s = Summary::of(&mut [4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(
            s,
            Summary {
                mean: 2.5,
                std_dev: 1.25f64.sqrt(),
                min: 1.0,
                p25: 1.75,
                median: 2.5,
                p75: 3.25,
                max: 4.0
            }
        );
        assert_eq!(Summary::of(&mut []), None);
        let one = Summary::of(&mut [7.0]).unwrap();
        assert_eq!((one.p25, one.median, one.std_dev), (7.0, 7.0, 0.0));
    }

    #[test]
    fn exact_mean_rounds_once_like_python() {
        // The 7-row golden case: statistics.mean of these hit rates is
        // 0.3472222222222222; a plain float sum gives 0.34722222222222215.
        let rates = [0.0, 1.0 / 4.0, 2.0 / 3.0, 2.0 / 4.0, 0.0, 2.0 / 3.0];
        assert_eq!(exact_mean(&rates), 0.3472222222222222);
        assert_eq!(exact_mean(&[0.1, 0.2]), 0.15000000000000002);
        assert_eq!(exact_mean(&[1.0, 2.0, 4.0]), 7.0 / 3.0);
        assert_eq!(exact_mean(&[0.0, 0.0]), 0.0);
        assert_eq!(exact_mean(&[-0.5, 0.25]), -0.125);
    }

    #[test]
    fn compensated_sum_keeps_small_terms() {
        let mut s = Sum::default();
        s.add(1e16);
        for _ in 0..1000 {
            s.add(1.0);
        }
        s.add(-1e16);
        assert_eq!(s.value(), 1000.0);
    }

    /// The summary as it was computed before selection: sort, then read.
    fn summary_by_sorting(values: &mut [f64]) -> Option<Summary> {
        if values.is_empty() {
            return None;
        }
        let m = mean(values);
        let var = mean_by(values, |x| (x - m) * (x - m));
        values.sort_unstable_by(f64::total_cmp);
        Some(Summary {
            mean: m,
            std_dev: var.sqrt(),
            min: values[0],
            p25: percentile_linear(values, 0.25),
            median: median_sorted(values),
            p75: percentile_linear(values, 0.75),
            max: values[values.len() - 1],
        })
    }

    fn bits(s: Option<Summary>) -> Option<[u64; 7]> {
        s.map(|s| [s.mean, s.std_dev, s.min, s.p25, s.median, s.p75, s.max].map(f64::to_bits))
    }

    /// Values that sort differently by bits than by `<`, or are rare: both
    /// zeros, subnormals, infinities, the extremes, and repeats.
    /// A column's value: mostly edges, some sharing a bucket (1.0 to 1.06
    /// share their top 16 bits), some repeated small whole numbers.
    fn column_value() -> impl proptest::strategy::Strategy<Value = f64> {
        use proptest::prelude::*;
        prop_oneof![
            4 => edge_value(),
            2 => 1.0f64..1.06,
            1 => (0u32..3).prop_map(f64::from),
        ]
    }

    fn edge_value() -> impl proptest::strategy::Strategy<Value = f64> {
        use proptest::prelude::*;
        prop_oneof![
            Just(0.0),
            Just(-0.0),
            Just(f64::MIN_POSITIVE / 4.0),
            Just(-f64::MIN_POSITIVE / 8.0),
            Just(f64::from_bits(1)),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(f64::MAX),
            Just(f64::MIN),
            Just(1.0),
            (0u32..50).prop_map(f64::from),
            any::<f64>().prop_filter("no NaN", |x| !x.is_nan()),
            (-1e6f64..1e6),
        ]
    }

    #[test]
    fn summary_selects_what_a_sort_would_read() {
        use proptest::prelude::*;
        proptest!(ProptestConfig::with_cases(2000), |(
            v in proptest::collection::vec(edge_value(), 0..300)
        )| {
            let (mut a, mut b) = (v.clone(), v);
            prop_assert_eq!(bits(Summary::of(&mut a)), bits(summary_by_sorting(&mut b)));
        });
    }

    #[test]
    fn percentiles_select_what_a_sort_would_read() {
        use proptest::prelude::*;
        proptest!(ProptestConfig::with_cases(2000), |(
            v in proptest::collection::vec(edge_value(), 1..300),
            p in prop_oneof![Just(0.0), Just(0.5), Just(0.99), Just(1.0), 0.0f64..=1.0],
        )| {
            let mut sorted = v.clone();
            sorted.sort_unstable_by(f64::total_cmp);
            let mut v = v;
            prop_assert_eq!(
                percentile_linear_unsorted(&mut v, p).to_bits(),
                percentile_linear(&sorted, p).to_bits()
            );
        });
    }

    #[test]
    fn two_percentiles_are_each_selected_alone() {
        use proptest::prelude::*;
        proptest!(ProptestConfig::with_cases(500), |(
            v in proptest::collection::vec(edge_value(), 1..6000),
            p in 0.0f64..=1.0,
            q in prop_oneof![Just(0.99), 0.0f64..=1.0],
        )| {
            let got = two_percentiles_linear_unsorted(&mut v.clone(), p, q);
            let want = (
                percentile_linear_unsorted(&mut v.clone(), p),
                percentile_linear_unsorted(&mut v.clone(), q),
            );
            prop_assert_eq!((got.0.to_bits(), got.1.to_bits()), (want.0.to_bits(), want.1.to_bits()));
        });
    }

    #[test]
    fn counted_columns_select_what_a_sort_would_read() {
        use proptest::prelude::*;
        // Every column counted first (a threshold of 1), short and long,
        // and with values that share a bucket (1.0 to 1.06 share their
        // top 16 bits).
        proptest!(ProptestConfig::with_cases(300), |(
            v in proptest::collection::vec(
                column_value(),
                1..3000,
            ),
            p in 0.0f64..=1.0,
        )| {
            let mut sorted = v.clone();
            sorted.sort_unstable_by(f64::total_cmp);
            let n = v.len();
            let (lo, hi, _) = linear_rank(n, p);
            let ranks = [0, n - 1, lo, hi, (n - 1) / 2, n / 2, n / 3, lo];
            let got = ranked_with(&mut v.clone(), ranks, 1);
            prop_assert_eq!(got.map(f64::to_bits), ranks.map(|r| sorted[r].to_bits()));
        });
    }

    #[test]
    fn two_passes_summarise_as_a_column() {
        use proptest::prelude::*;
        // Short and long, with values sharing a bucket and repeats: the
        // same bits as `Summary::of` (and so as a sort) over the values in
        // their order, and the mean after the first pass is the summary's.
        proptest!(ProptestConfig::with_cases(300), |(
            v in proptest::collection::vec(
                column_value(),
                0..5000,
            ),
        )| {
            let mut t = TwoPass::default();
            for &x in &v {
                t.first(x);
            }
            prop_assert_eq!(t.len(), v.len());
            let mut column = v.clone();
            let want = Summary::of(&mut column);
            if let Some(w) = want {
                prop_assert_eq!(t.mean().to_bits(), w.mean.to_bits());
            }
            let mut t = t.second_pass();
            for &x in &v {
                t.add(x);
            }
            prop_assert_eq!(bits(t.finish()), bits(want));
        });
    }

    #[test]
    fn exact_means_fed_one_at_a_time_fall_back_as_the_column_does() {
        // 0.1 in [2^-84, 2^40) is exact; 2^41 falls back to the
        // compensated mean of the same values.
        let mut e = ExactMean::default();
        for v in [0.1, 0.2, 0.3] {
            e.add(v);
        }
        assert_eq!(e.value(), Some(exact_mean(&[0.1, 0.2, 0.3])));
        e.add(2f64.powi(41));
        assert_eq!(e.value(), None);
        assert_eq!(ExactMean::default().value().map(f64::is_nan), Some(true));
    }

    #[test]
    fn order_keys_order_as_total_cmp() {
        let v = [
            f64::NEG_INFINITY,
            -1.0,
            -f64::from_bits(1),
            -0.0,
            0.0,
            f64::from_bits(1),
            1.0,
            f64::INFINITY,
        ];
        for w in v.windows(2) {
            assert!(order_key(w[0]) < order_key(w[1]), "{} {}", w[0], w[1]);
        }
    }

    #[test]
    fn ranked_reads_any_positions_in_any_order() {
        // Sorted by total_cmp: -inf, -0.0, 0.0, 1, 2, 3, inf.
        let v = [3.0, 0.0, f64::INFINITY, -0.0, 1.0, f64::NEG_INFINITY, 2.0];
        let got = ranked(&mut v.clone(), [6, 1, 1, 2, 0, 4]);
        let want = [f64::INFINITY, -0.0, -0.0, 0.0, f64::NEG_INFINITY, 2.0];
        assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits));
    }
}
