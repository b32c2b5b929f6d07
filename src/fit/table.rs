//! Predicted against measured, metric by metric (means, medians and
//! tails of TTFT, ITL and E2E, throughput, hit rate): the table a fit prints for
//! the runs it was fitted to, and `--predict` prints for runs it was not.

use std::fmt::Write as _;

use super::model::{Predicted, Prepared};
use crate::engine::EngineParams;
use crate::stats::percentile_linear;

/// One metric: measured, predicted, and the relative error.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub metric: &'static str,
    pub unit: &'static str,
    pub measured: Option<f64>,
    pub predicted: Option<f64>,
}

impl Line {
    /// (predicted − measured) / measured; for the hit rate, the difference
    /// in percentage points is the meaningful error and is given instead.
    pub fn error(&self) -> Option<f64> {
        let (m, p) = (self.measured?, self.predicted?);
        if self.unit == "%" {
            return Some(p - m);
        }
        (m != 0.0).then(|| (p - m) / m)
    }
}

fn pct(sorted: &[f64], p: f64) -> Option<f64> {
    (!sorted.is_empty()).then(|| percentile_linear(sorted, p))
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// Every metric over the scored requests of `runs`, predicted by `p`.
pub fn compare(runs: &[Prepared<'_>], p: &EngineParams) -> Vec<Line> {
    let (mut ttft_m, mut ttft_p, mut e2e_m, mut e2e_p) = (vec![], vec![], vec![], vec![]);
    let (mut itl_m, mut itl_p) = (vec![], vec![]);
    let (mut tok, mut span_m, mut span_p) = (0u64, 0.0, 0.0);
    let (mut prompt, mut hit_m, mut hit_p) = (0u64, 0u64, 0u64);
    for prep in runs {
        let pred: Vec<Predicted> = prep.simulate(p);
        let reqs = &prep.run.requests;
        let first = reqs.iter().map(|m| m.send_us).min().unwrap_or(0);
        let (mut last_m, mut last_p) = (first, first);
        for (m, q) in reqs.iter().zip(&pred) {
            if !m.scored {
                continue;
            }
            if let (Some(a), Some(b)) = (m.ttft_us, q.ttft_us) {
                ttft_m.push(a as f64 / 1000.0);
                ttft_p.push(b as f64 / 1000.0);
            }
            if let (Some(a), Some(b)) = (m.itl_us, q.itl_us) {
                itl_m.push(a / 1000.0);
                itl_p.push(b / 1000.0);
            }
            if let Some(a) = m.e2e_us {
                e2e_m.push(a as f64 / 1000.0);
                e2e_p.push(q.e2e_us as f64 / 1000.0);
                last_m = last_m.max(m.send_us + a);
            }
            last_p = last_p.max(q.end_us);
            tok += m.output_tokens;
            if let Some(c) = m.cached_tokens {
                prompt += m.prompt_tokens;
                hit_m += c;
                hit_p += q.cached_tokens;
            }
        }
        span_m += (last_m - first) as f64 / 1e6;
        span_p += (last_p.saturating_sub(first)) as f64 / 1e6;
    }
    let (ttft_m, ttft_p, e2e_m, e2e_p) =
        (sorted(ttft_m), sorted(ttft_p), sorted(e2e_m), sorted(e2e_p));
    let (itl_m, itl_p) = (sorted(itl_m), sorted(itl_p));
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let rate = |span: f64| (span > 0.0).then(|| tok as f64 / span);
    let hit = |h: u64| (prompt > 0).then(|| h as f64 / prompt as f64 * 100.0);
    let l = |metric, unit, measured, predicted| Line {
        metric,
        unit,
        measured,
        predicted,
    };
    vec![
        l("TTFT mean", "ms", mean(&ttft_m), mean(&ttft_p)),
        l("TTFT p50", "ms", pct(&ttft_m, 0.5), pct(&ttft_p, 0.5)),
        l("TTFT p90", "ms", pct(&ttft_m, 0.9), pct(&ttft_p, 0.9)),
        l("TTFT p99", "ms", pct(&ttft_m, 0.99), pct(&ttft_p, 0.99)),
        // Per request: its mean gap between tokens.
        l("ITL mean", "ms", mean(&itl_m), mean(&itl_p)),
        l("ITL p50", "ms", pct(&itl_m, 0.5), pct(&itl_p, 0.5)),
        l("ITL p99", "ms", pct(&itl_m, 0.99), pct(&itl_p, 0.99)),
        l("E2E mean", "ms", mean(&e2e_m), mean(&e2e_p)),
        l("E2E p50", "ms", pct(&e2e_m, 0.5), pct(&e2e_p, 0.5)),
        l("E2E p99", "ms", pct(&e2e_m, 0.99), pct(&e2e_p, 0.99)),
        l("output tok/s", "tok/s", rate(span_m), rate(span_p)),
        l("prefix-cache hit rate", "%", hit(hit_m), hit(hit_p)),
    ]
}

/// The table: one line per metric.
pub fn render(lines: &[Line]) -> String {
    let mut s = format!(
        "{:<22}{:>12}{:>12}{:>10}\n",
        "metric", "measured", "predicted", "error"
    );
    let num = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    for l in lines {
        let err = match (l.error(), l.unit) {
            (None, _) => "-".to_string(),
            (Some(e), "%") => format!("{e:+.2} pp"),
            (Some(e), _) => format!("{:+.1}%", e * 100.0),
        };
        let _ = writeln!(
            s,
            "{:<22}{:>12}{:>12}{:>10}",
            format!("{} ({})", l.metric, l.unit),
            num(l.measured),
            num(l.predicted),
            err
        );
    }
    s
}
