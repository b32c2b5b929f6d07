//! `mc-report --compare`: runs side by side, one row per metric, with the
//! change against the first run.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde::Serialize;

use crate::results::summary::Ms;
use crate::results::Stats;

use super::summary::Recomputed;

/// How a row's values read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Count,
    Seconds,
    PerSecond,
    Ms,
    Ratio,
}

#[derive(Debug, Clone, Serialize)]
pub struct MetricRow {
    pub metric: String,
    pub unit: Unit,
    /// One per run; null where the run has no such value.
    pub values: Vec<Option<f64>>,
    /// (value − first run's) / first run's × 100, one per run; null for the
    /// first run and where the first run's value is 0 or missing.
    pub change_pct: Vec<Option<f64>>,
}

/// The distributions compared, with their summary names.
const DISTS: [&str; 5] = ["ttft", "tpot", "itl", "e2e", "lag"];

fn dist<'a>(r: &'a Recomputed, name: &str) -> Option<&'a Stats> {
    let m = &r.summary.metrics;
    match name {
        "ttft" => m.ttft.as_ref(),
        "tpot" => m.tpot.as_ref(),
        "itl" => m.itl.as_ref(),
        "e2e" => m.e2e.as_ref(),
        _ => m.lag.as_ref(),
    }
}

/// Change in percent against `base`.
pub fn change(base: Option<f64>, v: Option<f64>) -> Option<f64> {
    match (base, v) {
        (Some(b), Some(v)) if b != 0.0 => Some((v - b) / b * 100.0),
        _ => None,
    }
}

/// The comparison rows of `runs` (in order; the first is the base).
pub fn rows(runs: &[&Recomputed]) -> Vec<MetricRow> {
    let mut out = Vec::new();
    let mut add = |metric: String, unit: Unit, f: &dyn Fn(&Recomputed) -> Option<f64>| {
        let values: Vec<Option<f64>> = runs.iter().map(|r| f(r)).collect();
        let base = values.first().copied().flatten();
        let change_pct = values
            .iter()
            .enumerate()
            .map(|(i, &v)| if i == 0 { None } else { change(base, v) })
            .collect();
        out.push(MetricRow {
            metric,
            unit,
            values,
            change_pct,
        });
    };
    add("requests_ok".into(), Unit::Count, &|r| {
        Some(r.summary.requests.ok as f64)
    });
    add("requests_failed".into(), Unit::Count, &|r| {
        Some(r.summary.requests.failed as f64)
    });
    let kinds: BTreeSet<_> = runs
        .iter()
        .flat_map(|r| r.summary.errors.keys().copied())
        .collect();
    for k in kinds {
        add(format!("errors_{k}"), Unit::Count, &move |r| {
            Some(r.summary.errors.get(&k).copied().unwrap_or(0) as f64)
        });
    }
    add("duration_s".into(), Unit::Seconds, &|r| {
        Some(r.summary.duration_s)
    });
    add("request_throughput".into(), Unit::PerSecond, &|r| {
        Some(r.summary.request_throughput)
    });
    add("output_token_throughput".into(), Unit::PerSecond, &|r| {
        Some(r.summary.output_token_throughput)
    });
    add("input_token_throughput".into(), Unit::PerSecond, &|r| {
        Some(r.summary.input_token_throughput)
    });
    if runs.iter().any(|r| r.summary.goodput.is_some()) {
        add("goodput_rate".into(), Unit::PerSecond, &|r| {
            r.summary.goodput.as_ref().map(|g| g.rate)
        });
    }
    for name in DISTS {
        type Pick = fn(&Stats) -> f64;
        let picks: [(&str, Pick); 4] = [
            ("mean", |s| s.mean),
            ("p50", |s| s.p50),
            ("p90", |s| s.p90),
            ("p99", |s| s.p99),
        ];
        for (stat, pick) in picks {
            add(format!("{name}_{stat}_ms"), Unit::Ms, &move |r| {
                dist(r, name).map(pick)
            });
        }
    }
    if runs.iter().any(|r| r.hit_rate.is_some()) {
        add("prefix_cache_hit_rate".into(), Unit::Ratio, &|r| r.hit_rate);
    }
    out
}

fn value_text(unit: Unit, v: Option<f64>) -> String {
    let Some(v) = v else { return "-".into() };
    match unit {
        Unit::Count => format!("{v:.0}"),
        Unit::Seconds => format!("{v:.3}"),
        Unit::PerSecond => format!("{v:.2}"),
        Unit::Ms => Ms(v).to_string(),
        Unit::Ratio => format!("{:.2}%", v * 100.0),
    }
}

/// `+12.5%`, or nothing.
pub fn change_text(c: Option<f64>) -> String {
    c.map_or(String::new(), |c| format!("{c:+.1}%"))
}

/// The readable table: a column per run, the change in brackets.
pub fn table(labels: &[String], rows: &[MetricRow]) -> String {
    let name_w = rows
        .iter()
        .map(|r| r.metric.len())
        .max()
        .unwrap_or(6)
        .max(6)
        + 2;
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            r.values
                .iter()
                .zip(&r.change_pct)
                .map(|(&v, &c)| match c {
                    Some(_) => format!("{} ({})", value_text(r.unit, v), change_text(c)),
                    None => value_text(r.unit, v),
                })
                .collect()
        })
        .collect();
    let widths: Vec<usize> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            cells
                .iter()
                .map(|c| c[i].len())
                .chain([l.len()])
                .max()
                .unwrap_or(0)
                + 2
        })
        .collect();
    let mut s = format!("{:<name_w$}", "metric");
    for (l, w) in labels.iter().zip(&widths) {
        let _ = write!(s, "{l:>w$}");
    }
    s.push('\n');
    for (r, c) in rows.iter().zip(&cells) {
        let _ = write!(s, "{:<name_w$}", r.metric);
        for (cell, w) in c.iter().zip(&widths) {
            let _ = write!(s, "{cell:>w$}");
        }
        s.push('\n');
    }
    s
}

/// Long CSV: one line per metric and run.
pub fn csv(labels: &[String], rows: &[MetricRow]) -> String {
    let mut s = String::from("metric,run,value,change_pct\n");
    for r in rows {
        for ((l, v), c) in labels.iter().zip(&r.values).zip(&r.change_pct) {
            let opt = |x: &Option<f64>| x.map_or(String::new(), |x| x.to_string());
            let _ = writeln!(s, "{},{},{},{}", r.metric, csv_field(l), opt(v), opt(c));
        }
    }
    s
}

/// A CSV field, quoted when it must be.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_against_the_base() {
        // 100 → 125 is +25 %; 100 → 80 is −20 %; a zero or missing base has none.
        assert_eq!(change(Some(100.0), Some(125.0)), Some(25.0));
        assert_eq!(change(Some(100.0), Some(80.0)), Some(-20.0));
        assert_eq!(change(Some(0.0), Some(3.0)), None);
        assert_eq!(change(None, Some(3.0)), None);
        assert_eq!(change(Some(2.0), None), None);
        assert_eq!(change_text(Some(25.0)), "+25.0%");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
    }
}
