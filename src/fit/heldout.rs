//! The error on runs a fit did not see: k-fold cross-validation over the
//! runs given (leave-one-run-out up to [`MAX_FOLDS`] runs), each fold's
//! runs predicted by a fit to the others, per metric, with the direction of
//! the bias (BLIS reports its calibration the same way). An in-sample error
//! says how well the model can bend to the runs; this says how well it
//! predicts one more.

use std::fmt::Write as _;

use super::model::{self, Prepared, Shape};
use super::table::{self, Line};
use super::{Ticker, TOOL};
use crate::engine::Roofline;

/// Beyond this many runs, runs share folds (run i in fold i mod 5): each
/// fold is a full fit, and five say enough.
pub const MAX_FOLDS: usize = 5;

/// The folds: the runs each one holds out.
pub fn folds(runs: usize) -> Vec<Vec<usize>> {
    let k = runs.min(MAX_FOLDS);
    (0..k)
        .map(|f| (0..runs).filter(|i| i % k == f).collect())
        .collect()
}

/// One metric across the folds.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub metric: &'static str,
    pub unit: &'static str,
    /// Each fold's error (relative; percentage points for the hit rate).
    pub errors: Vec<Option<f64>>,
}

impl Row {
    fn known(&self) -> Vec<f64> {
        self.errors.iter().flatten().copied().collect()
    }

    /// The mean of the folds' absolute errors.
    pub fn mean_abs(&self) -> Option<f64> {
        let k = self.known();
        (!k.is_empty()).then(|| k.iter().map(|e| e.abs()).sum::<f64>() / k.len() as f64)
    }

    /// The mean signed error: above 0 the model predicts too high (over),
    /// below too low (under).
    pub fn bias(&self) -> Option<f64> {
        let k = self.known();
        (!k.is_empty()).then(|| k.iter().sum::<f64>() / k.len() as f64)
    }
}

/// Fits each fold's training runs and predicts its held-out runs.
/// `None` with fewer than two runs (nothing to hold out).
pub fn cross_validate(
    prepared: &[Prepared<'_>],
    shape: Shape,
    start: Roofline,
    kind: model::Kind,
    ticker: &mut Ticker,
) -> Option<Vec<Row>> {
    if prepared.len() < 2 {
        return None;
    }
    let folds = folds(prepared.len());
    let mut per_fold: Vec<Vec<Line>> = Vec::with_capacity(folds.len());
    for (f, held) in folds.iter().enumerate() {
        let (test, train): (Vec<_>, Vec<_>) = prepared
            .iter()
            .enumerate()
            .partition(|(i, _)| held.contains(i));
        let train: Vec<Prepared<'_>> = train.into_iter().map(|(_, p)| p.clone()).collect();
        let test: Vec<Prepared<'_>> = test.into_iter().map(|(_, p)| p.clone()).collect();
        ticker.stage(format!("held-out fold {} of {}", f + 1, folds.len()));
        // The fold's own start: a designed run's rungs read directly, from
        // the training runs only.
        let start = super::direct::start_for_model(train.iter().map(|p| p.run), shape, start, kind);
        let (fitted, _) = model::fit(&train, shape, start, &mut |e| ticker.tick(e));
        let p = model::params(fitted, shape, "fold");
        per_fold.push(table::compare(&test, &p));
    }
    let first = per_fold.first()?;
    Some(
        first
            .iter()
            .enumerate()
            .map(|(m, l)| Row {
                metric: l.metric,
                unit: l.unit,
                errors: per_fold.iter().map(|lines| lines[m].error()).collect(),
            })
            .collect(),
    )
}

/// The held-out table: one column per fold, the mean absolute error and
/// the bias.
pub fn render(rows: &[Row], folds: &[Vec<usize>], labels: &[String]) -> String {
    let mut s = String::new();
    for (f, held) in folds.iter().enumerate() {
        let names: Vec<&str> = held.iter().map(|&i| labels[i].as_str()).collect();
        let _ = writeln!(s, "  fold {}: {}", f + 1, names.join(", "));
    }
    let _ = write!(s, "{:<22}", "metric");
    for f in 0..folds.len() {
        let _ = write!(s, "{:>10}", format!("fold {}", f + 1));
    }
    let _ = writeln!(s, "{:>12}  bias", "mean |err|");
    for r in rows {
        let pp = r.unit == "%";
        let fmt = |e: f64, signed: bool| match (pp, signed) {
            (true, true) => format!("{e:+.2} pp"),
            (true, false) => format!("{e:.2} pp"),
            (false, true) => format!("{:+.1}%", e * 100.0),
            (false, false) => format!("{:.1}%", e * 100.0),
        };
        let _ = write!(s, "{:<22}", format!("{} ({})", r.metric, r.unit));
        for e in &r.errors {
            let _ = write!(s, "{:>10}", e.map_or("-".to_string(), |e| fmt(e, true)));
        }
        let mean = r.mean_abs().map_or("-".to_string(), |e| fmt(e, false));
        let bias = match r.bias() {
            None => "-".to_string(),
            Some(b) if b > 0.0 => format!("over ({})", fmt(b, true)),
            Some(b) if b < 0.0 => format!("under ({})", fmt(b, true)),
            Some(_) => "none".to_string(),
        };
        let _ = writeln!(s, "{mean:>12}  {bias}");
    }
    s
}

/// Cross-validates and prints the table on stderr (or why it cannot).
pub fn report(
    prepared: &[Prepared<'_>],
    shape: Shape,
    start: Roofline,
    kind: model::Kind,
    ticker: &mut Ticker,
) {
    let Some(rows) = cross_validate(prepared, shape, start, kind, ticker) else {
        eprintln!(
            "{TOOL}: held-out error: not measured: it needs two runs or more (each is \
             predicted by a fit to the others); give more runs, or hold one out with --predict"
        );
        return;
    };
    ticker.done();
    let folds = folds(prepared.len());
    let how = if folds.len() == prepared.len() {
        "leave-one-run-out: each run predicted by a fit to the others".to_string()
    } else {
        format!(
            "{}-fold: each fold's runs predicted by a fit to the others",
            folds.len()
        )
    };
    eprintln!("{TOOL}: held-out error ({how}; bias over: predicts too high):");
    let labels: Vec<String> = prepared.iter().map(|p| p.run.label.clone()).collect();
    eprint!("{}", render(&rows, &folds, &labels));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_runs_are_left_out_one_at_a_time_and_many_share_five_folds() {
        assert_eq!(folds(3), vec![vec![0], vec![1], vec![2]]);
        let f = folds(7);
        assert_eq!(f.len(), 5);
        assert_eq!(f[0], vec![0, 5]);
        assert_eq!(f[4], vec![4]);
    }

    #[test]
    fn the_bias_says_over_or_under_and_the_mean_is_of_magnitudes() {
        let r = Row {
            metric: "TTFT p50",
            unit: "ms",
            errors: vec![Some(0.10), Some(-0.04), None],
        };
        assert!((r.mean_abs().unwrap() - 0.07).abs() < 1e-12);
        assert!((r.bias().unwrap() - 0.03).abs() < 1e-12);
        let text = render(
            &[r],
            &[vec![0], vec![1], vec![2]],
            &["a".into(), "b".into(), "c".into()],
        );
        assert!(text.contains("+10.0%"), "{text}");
        assert!(text.contains("-4.0%"), "{text}");
        assert!(text.contains("7.0%  over (+3.0%)"), "{text}");
    }
}
