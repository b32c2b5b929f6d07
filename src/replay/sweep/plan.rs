//! A sweep's plan: which option varies, its values, its folder
//! ([`sweep`], the usage checks), and the folder made ready before the
//! first request ([`prepare`]: nothing overwritten without `--force`).

use std::path::{Path, PathBuf};

use super::stop::StopWhen;
use crate::error::{Error, Result};
use crate::replay::options::ReplayArgs;
use crate::results::sweep::{run_name, under, Param};

/// A sweep to run: which option, its values in order, and where to write.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    pub param: Param,
    pub values: Vec<f64>,
    pub dir: PathBuf,
    /// `--same-prompts`: every value sends the first value's prompts.
    pub same_prompts: bool,
    /// `--stop-when`.
    pub stop_when: StopWhen,
}

/// The sweep the options ask for, or `None` for one plain run (at most one
/// value per option and no `--out-dir`: today's behaviour exactly).
pub fn sweep(args: &ReplayArgs) -> Result<Option<Sweep>> {
    let lists: Vec<(Param, Vec<f64>)> = [
        (Param::Rate, args.rates.clone()),
        (
            Param::Concurrency,
            args.concurrencies.iter().map(|&c| c as f64).collect(),
        ),
        (Param::Speedup, args.speedups.clone()),
    ]
    .into_iter()
    .filter(|(_, v)| v.len() > 1)
    .collect();
    let (param, values) = match &lists[..] {
        [] => return sweep_of_one(args),
        [one] => one.clone(),
        [a, b, ..] => {
            return Err(Error::usage(format!(
                "only one of --rate, --concurrency and --speedup may be a list \
                 (got --{} {} and --{} {})",
                a.0.name(),
                list_text(&a.1),
                b.0.name(),
                list_text(&b.1)
            )))
        }
    };
    let Some(dir) = &args.out_dir else {
        return Err(Error::usage(format!(
            "--{} {} is a sweep: give --out-dir DIR for its result files \
             (one folder per value, plus DIR/sweep.json and sweep.csv)",
            param.name(),
            list_text(&values)
        )));
    };
    check_outputs_free(args)?;
    for (i, v) in values.iter().enumerate() {
        if values[..i].contains(v) {
            return Err(Error::usage(format!(
                "--{} {}: {v} is listed twice",
                param.name(),
                list_text(&values)
            )));
        }
    }
    if param == Param::Speedup && !args.rates.is_empty() {
        return Err(Error::usage(
            "a --speedup sweep needs the trace's timestamps: --rate ignores them",
        ));
    }
    Ok(Some(Sweep {
        param,
        values,
        dir: dir.clone(),
        same_prompts: args.same_prompts,
        stop_when: args.stop_when,
    }))
}

/// No list: a sweep of one value with `--out-dir`, else a plain run.
fn sweep_of_one(args: &ReplayArgs) -> Result<Option<Sweep>> {
    let Some(dir) = &args.out_dir else {
        return Ok(None);
    };
    // A sweep of one: the option that is set, rate first (it
    // decides the schedule), else the speedup.
    let one = if let Some(&r) = args.rates.first() {
        (Param::Rate, r)
    } else if let Some(&c) = args.concurrencies.first() {
        (Param::Concurrency, c as f64)
    } else {
        (
            Param::Speedup,
            args.speedups.first().copied().unwrap_or(1.0),
        )
    };
    check_outputs_free(args)?;
    Ok(Some(Sweep {
        param: one.0,
        values: vec![one.1],
        dir: dir.clone(),
        same_prompts: args.same_prompts,
        stop_when: args.stop_when,
    }))
}

fn check_outputs_free(args: &ReplayArgs) -> Result<()> {
    if args.io.output.is_some() || args.summary_json.is_some() || args.summary_csv.is_some() {
        return Err(Error::usage(
            "--out-dir writes each run's results and summaries into DIR/NAME/; \
             drop --output, --summary and --summary-csv",
        ));
    }
    Ok(())
}

fn list_text(values: &[f64]) -> String {
    values
        .iter()
        .map(f64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Every file the sweep writes, relative to its folder.
fn outputs(plan: &Sweep) -> Vec<String> {
    let mut files = vec!["sweep.json".to_string(), "sweep.csv".to_string()];
    for &v in &plan.values {
        let name = run_name(plan.param, v);
        for f in ["results.jsonl", "summary.json", "summary.csv"] {
            files.push(format!("{name}/{f}"));
        }
    }
    files
}

/// Refuses to overwrite (exit 73) unless `--force`, and makes the sweep's
/// folder (each run's own folder is made when it starts, so the folders
/// present are the values run).
pub fn prepare(plan: &Sweep, force: bool) -> Result<()> {
    if !force {
        let existing: Vec<PathBuf> = outputs(plan)
            .iter()
            .map(|f| under(&plan.dir, f))
            .filter(|p| p.exists())
            .collect();
        if let Some(first) = existing.first() {
            let more = match existing.len() {
                1 => String::new(),
                n => format!(" (and {} more of the sweep's files)", n - 1),
            };
            return Err(Error::CantCreate(format!(
                "{} already exists{more}; pass --force to overwrite, or choose another --out-dir",
                first.display()
            )));
        }
    }
    make_dir(&plan.dir)
}

pub fn make_dir(d: &Path) -> Result<()> {
    std::fs::create_dir_all(d)
        .map_err(|e| Error::CantCreate(format!("cannot create {}: {e}", d.display())))
}
