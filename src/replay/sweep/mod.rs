//! Sweeps: `--rate 1,2,4,8`, `--concurrency 1,4,16,64` or `--speedup 1,2,4`
//! replays the trace once per value, in order, into `--out-dir`, and stops
//! early when the target saturates or fails (`--stop-when`).
//!
//! The trace is read and every value's schedule checked before the first
//! request ([`crate::replay::plan`]); each value then is an ordinary run
//! (same target, same result lines, same summary) whose files go to
//! `DIR/NAME/`. After each value `sweep.json` and `sweep.csv` are rewritten
//! ([`crate::results::sweep`]), so a sweep cut short still describes the
//! values it ran.
//!
//! - [`plan`]: the sweep's option, values and folder.
//! - [`stop`]: the rule that ends a sweep early, a pure function of points.

pub mod plan;
pub mod stop;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::drive::{execute, verdict};
use super::error::ReplayError;
use super::plan::Plan;
use crate::error::{Error, Result};
use crate::results::sweep::{table, write_index, Point, Stopped};
use plan::Sweep;

/// Runs the sweep: every value in order until the rule stops it. Exit
/// policy: a server that stops answering ends the sweep at once (exit 69);
/// every request of every run failing is a failed sweep (exit 1);
/// otherwise the sweep succeeded, stopped early or not.
pub fn run(plan: &Plan, stop: Arc<AtomicBool>) -> Result<()> {
    let Some(sweep) = &plan.sweep else {
        return Err(Error::usage("not a sweep: give --out-dir"));
    };
    let n = plan.runs.len();
    announce(plan, sweep);
    let mut points: Vec<Point> = Vec::with_capacity(n);
    let mut stopped: Option<Stopped> = None;
    let (mut sent, mut ok) = (0, 0);
    let mut failure: Option<Error> = None;
    for (i, run) in plan.runs.iter().enumerate() {
        let Some((param, v)) = run.point else {
            continue;
        };
        if let Some(d) = &run.outputs.dir {
            plan::make_dir(d)?;
            eprintln!(
                "mc-replay: sweep {} {} of {n}: --{} {v} into {}",
                param.name(),
                i + 1,
                param.name(),
                d.display()
            );
        }
        let summary = match execute(plan, run, stop.clone()) {
            Ok(s) => s,
            Err(e) => {
                // Describe what ran, then fail as the run did.
                let st = Stopped {
                    reason: plan.redactor.redact(&format!("error: {e:#}")),
                    value: v,
                };
                write_index(&sweep.dir, param, &points, Some(&st))?;
                return Err(e);
            }
        };
        let point = Point::of(v, &summary);
        sent += summary.requests.sent;
        ok += summary.requests.ok;
        let reason = match verdict(&summary) {
            Err(e @ Error::Unavailable(_)) => {
                let r = format!("{e:#}");
                failure = Some(e);
                Some(r)
            }
            _ if summary.requests.interrupted || stop.load(Ordering::SeqCst) => {
                Some("interrupted".to_string())
            }
            _ => stop::stop_reason(&sweep.stop_when, &points, &point),
        };
        points.push(point);
        stopped = reason.map(|reason| Stopped { reason, value: v });
        write_index(&sweep.dir, param, &points, stopped.as_ref())?;
        if stopped.is_some() {
            break;
        }
    }
    report(sweep, n, &points, stopped.as_ref());
    if let Some(e) = failure {
        return Err(e);
    }
    if sent > 0 && ok == 0 {
        return Err(ReplayError::AllFailed { sent }.into());
    }
    Ok(())
}

/// What the sweep's values share: the same prompts or their own, the
/// server's cache emptied before each or not.
fn announce(plan: &Plan, sweep: &Sweep) {
    eprintln!(
        "mc-replay: sweep: {}",
        if sweep.same_prompts {
            "every value sends the same prompts (--same-prompts): later values may be served \
             from the blocks earlier ones left in the server's prefix cache"
        } else {
            "each value sends prompts of its own seed (the summary's run.seed), so no value is \
             served from blocks an earlier one cached (--same-prompts shares them)"
        }
    );
    if plan.target.resets_prefix_cache() {
        eprintln!(
            "mc-replay: sweep: the server empties its prefix cache before each value \
             (--reset-prefix-cache)"
        );
    }
}

/// The values run of `n`, where the index is, and the sweep's table.
fn report(sweep: &Sweep, n: usize, points: &[Point], stopped: Option<&Stopped>) {
    let skipped = n - points.len();
    eprintln!(
        "mc-replay: sweep of --{} over {} of {n} values{}; wrote {}",
        sweep.param.name(),
        points.len(),
        if skipped > 0 {
            format!(" ({skipped} skipped)")
        } else {
            String::new()
        },
        sweep.dir.join("sweep.json").display()
    );
    eprint!("{}", table(sweep.param, points, stopped));
}
