//! `mc-report --trace`: is the trace given the one the runs replayed?
//! The page draws it as "the replayed trace", so a trace that is not (the
//! original of a scaled or capped one, another day's) is refused rather
//! than drawn beside results it did not produce.
//!
//! Checked per row drawn, against every run's result line of that row:
//! the prompt size the row asks for (`input_tokens`), and, in a run timed
//! by the trace's timestamps, the first turns' due times apart (the
//! trace's timestamps apart ÷ the run's speedup). And against the run
//! description: the rows the run loaded.

use std::collections::HashMap;
use std::path::Path;

use super::input::Run;
use crate::error::{Error, Result};
use crate::plot::trace::TraceRead;

/// How far apart two due times may be and still be the trace's (result
/// times have µs resolution; this allows for rounding only).
const SCHEDULE_SLACK_MS: f64 = 0.5;

/// Refuses `read` (of `path`) unless every run replayed it.
pub fn check(runs: &[Run], path: &Path, read: &TraceRead) -> Result<()> {
    let row_of: HashMap<u64, usize> = read
        .lines
        .iter()
        .enumerate()
        .map(|(k, &l)| (l, k))
        .collect();
    for run in runs {
        let refuse = |what: String| {
            Error::Input(format!(
                "--trace {}: not the trace run {} replayed: {what} (was the trace scaled, \
                 capped or filtered before mc-replay? give --trace the file mc-replay read)",
                path.display(),
                run.label
            ))
        };
        if let Some(info) = &run.info {
            let whole = info
                .run
                .shard
                .as_ref()
                .map_or(info.run.rows, |s| s.rows.iter().sum());
            if whole > 0 && whole != read.rows {
                return Err(refuse(format!(
                    "it has {} rows, the run loaded {whole} (bad lines the run skipped count too)",
                    read.rows
                )));
            }
        }
        sizes(run, read, &row_of).map_err(&refuse)?;
        let timed = run
            .info
            .as_ref()
            .is_none_or(|i| i.run.arrival == "timestamps");
        if timed {
            let speedup = run.info.as_ref().map_or(1.0, |i| i.run.speedup);
            schedule(run, read, &row_of, speedup).map_err(&refuse)?;
        }
    }
    Ok(())
}

/// Every result's prompt size is its row's `input_length`.
fn sizes(
    run: &Run,
    read: &TraceRead,
    row_of: &HashMap<u64, usize>,
) -> std::result::Result<(), String> {
    for r in &run.results {
        let (Some(&k), Some(asked)) = (row_of.get(&r.line), r.input_tokens) else {
            continue;
        };
        let isl = read.data.isl.get(k).copied().unwrap_or(0.0);
        if isl > 0.0 && asked as f64 != isl {
            return Err(format!(
                "line {} asks for {isl} input tokens, the run's result line for {asked}",
                r.line
            ));
        }
    }
    Ok(())
}

/// First turns are due their timestamps apart, divided by the speedup.
fn schedule(
    run: &Run,
    read: &TraceRead,
    row_of: &HashMap<u64, usize>,
    speedup: f64,
) -> std::result::Result<(), String> {
    let mut first: Option<(u64, f64, f64)> = None;
    for r in run.results.iter().filter(|r| r.turn == 0) {
        let Some(t) = row_of.get(&r.line).and_then(|&k| read.data.t_ms.get(k)) else {
            continue;
        };
        let Some((line0, t0, due0)) = first else {
            first = Some((r.line, *t, r.t_sched_ms));
            continue;
        };
        let want = (t - t0) / speedup;
        let got = r.t_sched_ms - due0;
        if (want - got).abs() > SCHEDULE_SLACK_MS + want.abs() * 1e-9 {
            return Err(format!(
                "line {} is due {want:.3} ms after line {line0} at speedup {speedup} by its \
                 timestamps, the run sent it {got:.3} ms after",
                r.line
            ));
        }
    }
    Ok(())
}
