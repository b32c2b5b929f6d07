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
        let (q1, q3) = (linear_rank(n, 0.25), linear_rank(n, 0.75));
        let [min, max, q1_lo, q1_hi, mid_lo, mid_hi, q3_lo, q3_hi] = ranked(
            values,
            [0, n - 1, q1.0, q1.1, (n - 1) / 2, n / 2, q3.0, q3.1],
        );
        Some(Summary {
            mean: m,
            std_dev: var.sqrt(),
            min,
            p25: lerp(q1_lo, q1_hi, q1.2),
            median: middle(n, mid_lo, mid_hi),
            p75: lerp(q3_lo, q3_hi, q3.2),
            max,
        })
    }
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
    let mut unique = ranks;
    unique.sort_unstable();
    let mut m = 0;
    for i in 0..N {
        if m == 0 || unique[m - 1] != unique[i] {
            unique[m] = unique[i];
            m += 1;
        }
    }
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
    if b >> 63 == 1 {
        !b
    } else {
        b | 1 << 63
    }
}

/// [`select_ranks`] for a long column (fewer than 2^32 values): counts
/// the values per bucket of the top bits of their order key, finds the
/// bucket of each rank, gathers those buckets' values (a few per cent of
/// the column) and selects in each.
fn select_by_buckets(values: &[f64], ranks: &[usize], out: &mut [f64]) {
    let bucket = |x: f64| (order_key(x) >> (64 - RADIX_BITS)) as usize;
    let mut counts = vec![0u32; 1 << RADIX_BITS];
    // The buckets counted again by their top 8 bits: walking 64 Ki counters
    // to the top rank (the max) cost more than the column's own counting
    // on 60 K values; a column's values sit under a few of these 256, and
    // only those are walked bucket by bucket (decision 46, later).
    let mut coarse = [0u32; 1 << 8];
    for &x in values {
        let b = bucket(x);
        counts[b] += 1;
        coarse[b >> (RADIX_BITS - 8)] += 1;
    }
    // Each rank's bucket and how many values lie below that bucket; ranks
    // increase, so their buckets do.
    let mut at = vec![(0usize, 0usize); ranks.len()];
    let (mut below, mut r) = (0usize, 0);
    let fine = 1usize << (RADIX_BITS - 8);
    for (cb, &cc) in coarse.iter().enumerate() {
        if r == ranks.len() {
            break;
        }
        if ranks[r] >= below + cc as usize {
            below += cc as usize;
            continue;
        }
        let first = cb * fine;
        for (i, &c) in counts[first..first + fine].iter().enumerate() {
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
    let mut group_of = vec![0u8; 1 << RADIX_BITS];
    let mut groups: Vec<Vec<f64>> = Vec::with_capacity(wanted.len());
    for (j, &(b, _)) in wanted.iter().enumerate() {
        // At most one group per rank: `ranked` asks for 8 at most.
        group_of[b] = u8::try_from(j + 1).unwrap_or(u8::MAX);
        groups.push(Vec::with_capacity(counts[b] as usize));
    }
    for &x in values {
        let g = group_of[bucket(x)];
        if g != 0 {
            groups[usize::from(g) - 1].push(x);
        }
    }
    let mut r = 0;
    for (group, &(b, below)) in groups.iter_mut().zip(&wanted) {
        let n = at[r..].iter().take_while(|&&(rb, _)| rb == b).count();
        select_ranks(group, below, &ranks[r..r + n], &mut out[r..r + n]);
        r += n;
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
    const SCALE: i32 = 84;
    let mut total: i128 = 0;
    for &v in values {
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
            let shift = e + SCALE;
            let m = i128::from(m) * if v < 0.0 { -1 } else { 1 };
            (shift >= 0).then(|| m << shift)
        } else {
            None
        };
        match fixed.and_then(|f| total.checked_add(f)) {
            Some(t) => total = t,
            None => return mean(values),
        }
    }
    let n = values.len() as i128;
    if n == 0 {
        return f64::NAN;
    }
    // Correct rounding of total / (n * 2^84): divide with at least 55
    // significant bits, fold the remainder into a sticky bit, convert once.
    let neg = total < 0;
    let s = total.unsigned_abs();
    if s == 0 {
        return 0.0;
    }
    let bits = |x: u128| 128 - x.leading_zeros() as i32;
    let k = (56 + bits(n as u128) - bits(s)).max(0);
    let Some(num) = s.checked_shl(k as u32).filter(|_| bits(s) + k < 127) else {
        return mean(values);
    };
    let (q, r) = (num / n as u128, num % n as u128);
    let q = if r != 0 { q | 1 } else { q };
    let m = q as f64 * 2f64.powi(-(SCALE + k));
    if neg {
        -m
    } else {
        m
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
    fn counted_columns_select_what_a_sort_would_read() {
        use proptest::prelude::*;
        // Every column counted first (a threshold of 1), short and long,
        // and with values that share a bucket (1.0 to 1.06 share their
        // top 16 bits).
        proptest!(ProptestConfig::with_cases(300), |(
            v in proptest::collection::vec(
                prop_oneof![
                    4 => edge_value(),
                    2 => 1.0f64..1.06,
                    1 => (0u32..3).prop_map(f64::from),
                ],
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
