//! Arrival timing: span, rates and inter-arrival gaps of rows with a
//! `timestamp` (ms). Later session turns (with `delay`) have no absolute
//! arrival time and are not counted here.

use serde::Serialize;

use super::rows::{RowStore, StoredRow};
use crate::finding::Finding;
use crate::stats::two_percentiles_linear_unsorted;

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct TimingStats {
    pub rows_with_timestamp: u64,
    /// Timestamps never decrease in file order.
    pub sorted: bool,
    /// Rows whose timestamp is below the one before them.
    pub out_of_order: Finding,
    /// Last minus first arrival, ms.
    pub span_ms: Option<f64>,
    /// Arrivals per second over the span.
    pub mean_rate_per_s: Option<f64>,
    /// Most arrivals in any 1 s window [t, t+1s), per second.
    pub peak_rate_1s: Option<f64>,
    /// Most arrivals in any 10 s window, per second.
    pub peak_rate_10s: Option<f64>,
    pub inter_arrival_p50_ms: Option<f64>,
    pub inter_arrival_p99_ms: Option<f64>,
}

/// Most timestamps in any window [t, t + w) of sorted `ts`.
#[cfg(test)]
fn peak_in_window(ts: &[f64], w: f64) -> usize {
    peaks_in_windows(ts, [w])[0]
}

/// [`peak_in_window`] for each of `ws`, in one walk over `ts` (a window's
/// start each).
fn peaks_in_windows<const N: usize>(ts: &[f64], ws: [f64; N]) -> [usize; N] {
    let mut best = [0; N];
    let mut lo = [0; N];
    for (hi, &t) in ts.iter().enumerate() {
        for k in 0..N {
            while t - ts[lo[k]] >= ws[k] {
                lo[k] += 1;
            }
            best[k] = best[k].max(hi - lo[k] + 1);
        }
    }
    best
}

/// The rows' arrival times, gathered in order in the report's one pass
/// over the rows ([`super::aiperf::RowColumns::of`]'s `also`), then
/// [`Arrivals::finish`].
pub struct Arrivals {
    out_of_order: Finding,
    ts: Vec<f64>,
    prev: f64,
}

impl Arrivals {
    /// For `rows` rows at most.
    pub fn new(rows: usize) -> Arrivals {
        Arrivals {
            out_of_order: Finding::default(),
            ts: Vec::with_capacity(rows),
            prev: f64::NEG_INFINITY,
        }
    }

    /// Row `i` of `rows`, in order.
    #[inline]
    pub fn add(&mut self, rows: &RowStore, i: usize, r: &StoredRow) {
        if let Some(t) = r.timestamp.get() {
            if t < self.prev {
                self.out_of_order.add(rows.line(i));
            }
            self.prev = t;
            self.ts.push(t);
        }
    }

    /// The timing statistics.
    pub fn finish(self) -> TimingStats {
        let Arrivals {
            out_of_order,
            mut ts,
            ..
        } = self;
        ts.sort_unstable_by(f64::total_cmp);
        let span = (ts.len() >= 2).then(|| ts[ts.len() - 1] - ts[0]);
        let ws = [1000.0, 10_000.0];
        let peaks = peaks_in_windows(&ts, ws);
        let rate = |k: usize| (!ts.is_empty()).then(|| peaks[k] as f64 / (ws[k] / 1000.0));
        let rows_with_timestamp = ts.len() as u64;
        let mean_rate_per_s = span
            .filter(|&s| s > 0.0)
            .map(|s| ts.len() as f64 / (s / 1000.0));
        let (peak_rate_1s, peak_rate_10s) = (rate(0), rate(1));
        // The gaps in place of the times (gap i is `ts[i + 1] - ts[i]`,
        // both read before slot i is written): a second column of 8 bytes
        // a row added to the report's peak memory on a large trace.
        let mut gaps = {
            let mut g = ts;
            for i in 1..g.len() {
                g[i - 1] = g[i] - g[i - 1];
            }
            g.pop();
            g
        };
        // Both percentiles' ranks selected at once (decision 46): the
        // values at them are what two selections give.
        let (gap_p50, gap_p99) = if gaps.is_empty() {
            (None, None)
        } else {
            let (p50, p99) = two_percentiles_linear_unsorted(&mut gaps, 0.5, 0.99);
            (Some(p50), Some(p99))
        };
        TimingStats {
            rows_with_timestamp,
            sorted: out_of_order.count == 0,
            out_of_order,
            span_ms: span,
            mean_rate_per_s,
            peak_rate_1s,
            peak_rate_10s,
            inter_arrival_p50_ms: gap_p50,
            inter_arrival_p99_ms: gap_p99,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_peaks() {
        // Windows are half-open: 0 and 1000 are not in one 1 s window.
        assert_eq!(peak_in_window(&[0.0, 1000.0, 2000.0], 1000.0), 1);
        assert_eq!(
            peak_in_window(&[0.0, 10.0, 999.0, 1500.0, 1600.0, 1700.0, 1800.0], 1000.0),
            5 // [999, 1999) holds 999, 1500, 1600, 1700 and 1800
        );
        assert_eq!(peak_in_window(&[], 1000.0), 0);
        // Both windows in one walk: each as alone.
        let ts = [
            0.0, 10.0, 999.0, 1500.0, 1600.0, 1700.0, 1800.0, 9000.0, 12_000.0,
        ];
        assert_eq!(
            peaks_in_windows(&ts, [1000.0, 10_000.0]),
            [
                peak_in_window(&ts, 1000.0),
                peak_in_window(&ts[..], 10_000.0)
            ]
        );
        assert_eq!(peaks_in_windows(&ts, [1000.0, 10_000.0]), [5, 8]);
    }
}
