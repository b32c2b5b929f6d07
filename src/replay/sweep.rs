//! Sweeps: `--rate 1,2,4,8`, `--concurrency 1,4,16,64` or `--speedup 1,2,4`
//! replays the trace once per value, in order, into `--out-dir`, and stops
//! early when the target saturates or fails (`--stop-when`).
//!
//! The trace is read and every value's schedule checked before the first
//! request; each value then is an ordinary run (same target, same result
//! lines, same summary) whose files go to `DIR/NAME/`. After each value
//! `sweep.json` and `sweep.csv` are rewritten, so a sweep cut short still
//! describes the values it ran.
//!
//! The stopping rule follows GuideLLM's over-saturation stop (a load whose
//! responses no longer keep up with its requests is not worth going past:
//! its latencies measure the queue, not the server) and its escalation
//! stop across rates (vllm-project/guidellm#605: a constraint met at one
//! rate skips the higher ones). GuideLLM detects it within a run from the
//! slopes of concurrency and TTFT over time; a sweep here decides between
//! runs, from their summaries: [`stop_reason`].

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::error::ReplayError;
use super::report::Summary;
use super::schedule::Arrivals;
use super::{Loaded, ReplayArgs};
use crate::error::{Error, Result};

/// The option a sweep varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    Rate,
    Concurrency,
    Speedup,
}

impl Param {
    /// The option's name, also the name in paths and in `sweep.json`.
    pub fn name(self) -> &'static str {
        match self {
            Param::Rate => "rate",
            Param::Concurrency => "concurrency",
            Param::Speedup => "speedup",
        }
    }

    fn from_name(s: &str) -> Option<Param> {
        [Param::Rate, Param::Concurrency, Param::Speedup]
            .into_iter()
            .find(|p| p.name() == s)
    }
}

/// A sweep to run: which option, its values in order, and where to write.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub param: Param,
    pub values: Vec<f64>,
    pub dir: PathBuf,
}

/// `rate-0.5`, `concurrency-16`, `speedup-2`: the shortest decimal that
/// reads back as the value, so names are stable and readable.
pub fn run_name(param: Param, value: f64) -> String {
    format!("{}-{value}", param.name())
}

/// The sweep the options ask for, or `None` for one plain run (at most one
/// value per option and no `--out-dir`: today's behaviour exactly).
pub fn plan(args: &ReplayArgs) -> Result<Option<Plan>> {
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
        [] => {
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
            return Ok(Some(Plan {
                param: one.0,
                values: vec![one.1],
                dir: dir.clone(),
            }));
        }
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
    Ok(Some(Plan {
        param,
        values,
        dir: dir.clone(),
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

impl ReplayArgs {
    /// These options for one run: the sweep's value for its option, and
    /// the single value (if any) of each other list.
    pub fn at(&self, point: Option<(Param, f64)>) -> ReplayArgs {
        let mut a = self.clone();
        a.rate = self.rates.first().copied();
        a.concurrency = self.concurrencies.first().copied();
        a.speedup = self.speedups.first().copied().unwrap_or(1.0);
        match point {
            Some((Param::Rate, v)) => a.rate = Some(v),
            // Listed values are whole numbers of at most 10^6 (checked by
            // the option's parser), so this is exact.
            Some((Param::Concurrency, v)) => a.concurrency = Some(v as u64),
            Some((Param::Speedup, v)) => a.speedup = v,
            None => {}
        }
        a
    }
}

// ---------------------------------------------------------------- the rule

/// `--stop-when`: the sweep's stopping rule. A `None` test is off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StopWhen {
    /// Output throughput has stopped growing when it beats the best earlier
    /// value by less than this fraction.
    pub throughput_gain: Option<f64>,
    /// TTFT p99 has risen when it is more than this multiple of the lowest
    /// earlier TTFT p99.
    pub ttft_p99: Option<f64>,
    /// Schedule lag p99 has risen when it is above this many ms.
    pub lag_p99_ms: Option<f64>,
    /// Failing: more than this fraction of the measured requests failed.
    pub error_rate: Option<f64>,
}

impl StopWhen {
    /// The documented default, as the option's text.
    pub const DEFAULT: &'static str =
        "throughput-gain=5%,ttft-p99=2x,lag-p99=1000ms,error-rate=10%";

    pub const NEVER: StopWhen = StopWhen {
        throughput_gain: None,
        ttft_p99: None,
        lag_p99_ms: None,
        error_rate: None,
    };

    /// `never`, or `TEST=THRESHOLD|off,…` over the defaults.
    pub fn parse(s: &str) -> std::result::Result<StopWhen, String> {
        let s = s.trim();
        if s == "never" {
            return Ok(StopWhen::NEVER);
        }
        let mut w = StopWhen {
            throughput_gain: Some(0.05),
            ttft_p99: Some(2.0),
            lag_p99_ms: Some(1000.0),
            error_rate: Some(0.10),
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                format!(
                    "`{part}`: expected TEST=THRESHOLD or TEST=off \
                     (tests: throughput-gain, ttft-p99, lag-p99, error-rate), or `never`"
                )
            })?;
            let (key, value) = (key.trim(), value.trim());
            let off = value == "off";
            match key {
                "throughput-gain" => {
                    w.throughput_gain = (!off).then(|| percent(key, value)).transpose()?
                }
                "ttft-p99" => w.ttft_p99 = (!off).then(|| times(key, value)).transpose()?,
                "lag-p99" => w.lag_p99_ms = (!off).then(|| millis(key, value)).transpose()?,
                "error-rate" => w.error_rate = (!off).then(|| percent(key, value)).transpose()?,
                _ => {
                    return Err(format!(
                    "`{key}` is not a test: use throughput-gain, ttft-p99, lag-p99 or error-rate"
                ))
                }
            }
        }
        Ok(w)
    }
}

fn threshold(key: &str, value: &str, num: &str, form: &str) -> std::result::Result<f64, String> {
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{key}={value}: expected {form}")),
    }
}

/// `5%` → 0.05.
fn percent(key: &str, value: &str) -> std::result::Result<f64, String> {
    let form = "a percentage like 5%, or off";
    let num = value
        .strip_suffix('%')
        .ok_or_else(|| format!("{key}={value}: expected {form}"))?;
    Ok(threshold(key, value, num, form)? / 100.0)
}

/// `2x` → 2.
fn times(key: &str, value: &str) -> std::result::Result<f64, String> {
    let form = "a factor like 2x, or off";
    let num = value
        .strip_suffix('x')
        .ok_or_else(|| format!("{key}={value}: expected {form}"))?;
    threshold(key, value, num, form)
}

/// `1000ms` or `1s` → ms.
fn millis(key: &str, value: &str) -> std::result::Result<f64, String> {
    let form = "a time like 1000ms or 1s, or off";
    if let Some(num) = value.strip_suffix("ms") {
        return threshold(key, value, num, form);
    }
    let num = value
        .strip_suffix('s')
        .ok_or_else(|| format!("{key}={value}: expected {form}"))?;
    Ok(threshold(key, value, num, form)? * 1000.0)
}

/// What a sweep keeps of each run: one row of `sweep.csv`, and what the
/// stopping rule and the sweep curve read.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub value: f64,
    pub request_throughput: f64,
    pub output_token_throughput: f64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
    pub e2e_p50_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
    pub lag_p99_ms: Option<f64>,
    /// Failed over sent (measured requests); 0 when none was sent.
    pub error_rate: f64,
}

impl Point {
    pub fn of(value: f64, s: &Summary) -> Point {
        let m = &s.metrics;
        let p50 = |st: &Option<super::metrics::Stats>| st.as_ref().map(|x| x.p50);
        let p99 = |st: &Option<super::metrics::Stats>| st.as_ref().map(|x| x.p99);
        Point {
            value,
            request_throughput: s.request_throughput,
            output_token_throughput: s.output_token_throughput,
            ttft_p50_ms: p50(&m.ttft),
            ttft_p99_ms: p99(&m.ttft),
            itl_p50_ms: p50(&m.itl),
            itl_p99_ms: p99(&m.itl),
            e2e_p50_ms: p50(&m.e2e),
            e2e_p99_ms: p99(&m.e2e),
            lag_p99_ms: p99(&m.lag),
            error_rate: if s.requests.sent > 0 {
                s.requests.failed as f64 / s.requests.sent as f64
            } else {
                0.0
            },
        }
    }
}

/// Why the sweep should stop after `now`, given the runs before it (in
/// sweep order), or `None` to go on. Failing: the error rate is above
/// `error-rate`. Saturated (needs an earlier run): output throughput is
/// less than `throughput-gain` above the best earlier one (request
/// throughput when no run produced output tokens), and either TTFT p99 is
/// more than `ttft-p99` times the lowest earlier TTFT p99 or lag p99 is
/// above `lag-p99`. Comparing with the best and the lowest earlier values
/// rather than the previous one keeps the rule right for lists in any order
/// and for a slow drift over several values.
pub fn stop_reason(rule: &StopWhen, earlier: &[Point], now: &Point) -> Option<String> {
    if let Some(max) = rule.error_rate {
        if now.error_rate > max {
            return Some(format!(
                "failing: {:.1}% of the requests failed (more than error-rate={}%)",
                now.error_rate * 100.0,
                max * 100.0
            ));
        }
    }
    let gain_min = rule.throughput_gain?;
    let tokens = earlier
        .iter()
        .chain([now])
        .any(|p| p.output_token_throughput > 0.0);
    let (what, unit, tput): (&str, &str, fn(&Point) -> f64) = if tokens {
        ("output throughput", "tok/s", |p| p.output_token_throughput)
    } else {
        ("request throughput", "req/s", |p| p.request_throughput)
    };
    let best = earlier.iter().max_by(|a, b| tput(a).total_cmp(&tput(b)))?;
    let gain = if tput(best) > 0.0 {
        tput(now) / tput(best) - 1.0
    } else if tput(now) > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    if gain >= gain_min {
        return None;
    }
    let flat = format!(
        "{what} {:.1} {unit} is {:+.1}% over the best earlier ({:.1} {unit} at {}) \
         (less than throughput-gain={}%)",
        tput(now),
        gain * 100.0,
        tput(best),
        best.value,
        gain_min * 100.0
    );
    let ttft = rule.ttft_p99.and_then(|x| {
        let cur = now.ttft_p99_ms?;
        let low = earlier
            .iter()
            .filter_map(|p| p.ttft_p99_ms.map(|t| (t, p.value)))
            .min_by(|a, b| a.0.total_cmp(&b.0))?;
        (cur > x * low.0 && cur > low.0).then(|| {
            format!(
                "TTFT p99 {cur:.1} ms is {:.1}x the lowest earlier ({:.1} ms at {}) \
                 (more than ttft-p99={x}x)",
                cur / low.0,
                low.0,
                low.1
            )
        })
    });
    let lag = rule.lag_p99_ms.and_then(|max| {
        let cur = now.lag_p99_ms?;
        (cur > max).then(|| format!("lag p99 {cur:.1} ms (more than lag-p99={max}ms)"))
    });
    let rose = match (ttft, lag) {
        (Some(t), Some(l)) => format!("{t} and {l}"),
        (Some(t), None) => t,
        (None, Some(l)) => l,
        (None, None) => return None,
    };
    Some(format!("saturated: {flat} while {rose}"))
}

// ------------------------------------------------------------------ files

/// `sweep.json`. Paths are relative to the sweep's folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepFile {
    /// `rate`, `concurrency` or `speedup`.
    pub parameter: String,
    /// The values run, in order.
    pub runs: Vec<SweepRun>,
    /// Set when the sweep ended before its last value.
    pub stopped: Option<Stopped>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepRun {
    pub value: f64,
    /// `NAME/results.jsonl`.
    pub results: String,
    /// `NAME/summary.json`.
    pub summary: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stopped {
    pub reason: String,
    /// The value after which the sweep stopped (it was run and written).
    pub value: f64,
}

const CSV_COLUMNS: &str = "request_throughput,output_token_throughput,ttft_p50_ms,ttft_p99_ms,\
itl_p50_ms,itl_p99_ms,e2e_p50_ms,e2e_p99_ms,lag_p99_ms,error_rate";

/// `sweep.csv`: a header whose first column is the parameter's name, then
/// one row per value; a distribution no request measured is empty.
pub fn csv(param: Param, points: &[Point]) -> String {
    let mut s = format!("{},{CSV_COLUMNS}\n", param.name());
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    for p in points {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{}",
            p.value,
            p.request_throughput,
            p.output_token_throughput,
            opt(p.ttft_p50_ms),
            opt(p.ttft_p99_ms),
            opt(p.itl_p50_ms),
            opt(p.itl_p99_ms),
            opt(p.e2e_p50_ms),
            opt(p.e2e_p99_ms),
            opt(p.lag_p99_ms),
            p.error_rate
        );
    }
    s
}

/// The sweep's table for stderr: one line per value run.
pub fn table(param: Param, points: &[Point], stopped: Option<&Stopped>) -> String {
    let mut s = format!(
        "{:<12}{:>9}{:>11}{:>10}{:>10}{:>9}{:>9}{:>10}{:>10}{:>9}{:>8}\n",
        param.name(),
        "req/s",
        "out tok/s",
        "ttft p50",
        "ttft p99",
        "itl p50",
        "itl p99",
        "e2e p50",
        "e2e p99",
        "lag p99",
        "errors"
    );
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    for p in points {
        let _ = writeln!(
            s,
            "{:<12}{:>9.2}{:>11.1}{:>10}{:>10}{:>9}{:>9}{:>10}{:>10}{:>9}{:>7.1}%",
            p.value,
            p.request_throughput,
            p.output_token_throughput,
            ms(p.ttft_p50_ms),
            ms(p.ttft_p99_ms),
            ms(p.itl_p50_ms),
            ms(p.itl_p99_ms),
            ms(p.e2e_p50_ms),
            ms(p.e2e_p99_ms),
            ms(p.lag_p99_ms),
            p.error_rate * 100.0
        );
    }
    if let Some(st) = stopped {
        let _ = writeln!(
            s,
            "stopped after {} {}: {}",
            param.name(),
            st.value,
            st.reason
        );
    }
    s
}

/// A file under the sweep's folder (relative path with `/`).
fn under(dir: &Path, rel: &str) -> PathBuf {
    rel.split('/')
        .fold(dir.to_path_buf(), |p, part| p.join(part))
}

/// Every file the sweep writes, relative to its folder.
fn outputs(plan: &Plan) -> Vec<String> {
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
fn prepare(plan: &Plan, force: bool) -> Result<()> {
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

fn make_dir(d: &Path) -> Result<()> {
    std::fs::create_dir_all(d)
        .map_err(|e| Error::CantCreate(format!("cannot create {}: {e}", d.display())))
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|source| Error::Output {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `sweep.json` and `sweep.csv` for the runs so far.
fn write_index(plan: &Plan, points: &[Point], stopped: Option<&Stopped>) -> Result<()> {
    let file = SweepFile {
        parameter: plan.param.name().into(),
        runs: points
            .iter()
            .map(|p| {
                let name = run_name(plan.param, p.value);
                SweepRun {
                    value: p.value,
                    results: format!("{name}/results.jsonl"),
                    summary: format!("{name}/summary.json"),
                }
            })
            .collect(),
        stopped: stopped.cloned(),
    };
    let mut json = serde_json::to_vec_pretty(&file).map_err(|e| Error::Other(e.into()))?;
    json.push(b'\n');
    write(&plan.dir.join("sweep.json"), &json)?;
    write(
        &plan.dir.join("sweep.csv"),
        csv(plan.param, points).as_bytes(),
    )
}

/// Reads a sweep's folder back: its parameter and one point per run (from
/// each run's summary.json), in sweep order.
pub fn read(dir: &Path) -> Result<(Param, Vec<Point>, Option<Stopped>)> {
    let index = dir.join("sweep.json");
    let text = std::fs::read_to_string(&index).map_err(|source| Error::NoInput {
        path: index.clone(),
        source,
    })?;
    let file: SweepFile = serde_json::from_str(&text)
        .map_err(|e| Error::Input(format!("{}: not a sweep.json: {e}", index.display())))?;
    let param = Param::from_name(&file.parameter).ok_or_else(|| {
        Error::Input(format!(
            "{}: parameter `{}` is not rate, concurrency or speedup",
            index.display(),
            file.parameter
        ))
    })?;
    let mut points = Vec::with_capacity(file.runs.len());
    for r in &file.runs {
        let path = under(dir, &r.summary);
        let text = std::fs::read_to_string(&path).map_err(|source| Error::NoInput {
            path: path.clone(),
            source,
        })?;
        let s: Summary = serde_json::from_str(&text).map_err(|e| {
            Error::Input(format!("{}: not an mc-replay summary: {e}", path.display()))
        })?;
        points.push(Point::of(r.value, &s));
    }
    Ok((param, points, file.stopped))
}

// -------------------------------------------------------------------- run

/// Runs the sweep: every value in order until the rule stops it. Exit
/// policy: a server that stops answering ends the sweep at once (exit 69);
/// every request of every run failing is a failed sweep (exit 1);
/// otherwise the sweep succeeded, stopped early or not.
pub fn run(args: &ReplayArgs, plan: &Plan, stop: Arc<AtomicBool>) -> Result<()> {
    let engine = args.engine || args.url.is_none();
    if engine {
        super::engine_target::check(args)?;
    }
    prepare(plan, args.force)?;
    let (trace, block_size) = super::load_trace(args)?;
    // Every value's schedule is checked before the first request.
    let mut loads = Vec::with_capacity(plan.values.len());
    for &v in &plan.values {
        let a = args.at(Some((plan.param, v))).with_block_size(block_size);
        let arrivals = super::arrivals(&trace, &a)?;
        if plan.param == Param::Speedup && !matches!(arrivals, Arrivals::Timed { .. }) {
            return Err(Error::usage(
                "a --speedup sweep needs a trace with timestamps (speedup divides them)",
            ));
        }
        loads.push(Loaded {
            trace: trace.clone(),
            arrivals,
            block_size,
        });
    }
    super::check_rows(&trace, &args.at(None).with_block_size(block_size))?;
    let n = plan.values.len();
    let mut points: Vec<Point> = Vec::with_capacity(n);
    let mut stopped: Option<Stopped> = None;
    let (mut sent, mut ok) = (0, 0);
    let mut failure: Option<Error> = None;
    for (i, (&v, loaded)) in plan.values.iter().zip(&loads).enumerate() {
        let name = run_name(plan.param, v);
        make_dir(&plan.dir.join(&name))?;
        let mut a = args.at(Some((plan.param, v)));
        a.io.output = Some(under(&plan.dir, &format!("{name}/results.jsonl")));
        a.summary_json = Some(under(&plan.dir, &format!("{name}/summary.json")));
        a.summary_csv = Some(under(&plan.dir, &format!("{name}/summary.csv")));
        eprintln!(
            "mc-replay: sweep {} {} of {n}: --{} {v} into {}",
            plan.param.name(),
            i + 1,
            plan.param.name(),
            plan.dir.join(&name).display()
        );
        let summary = match super::run_on_target(&a, loaded, stop.clone()) {
            Ok(s) => s,
            Err(e) => {
                // Describe what ran, then fail as the run did.
                let st = Stopped {
                    reason: format!("error: {e:#}"),
                    value: v,
                };
                write_index(plan, &points, Some(&st))?;
                return Err(e);
            }
        };
        let point = Point::of(v, &summary);
        sent += summary.requests.sent;
        ok += summary.requests.ok;
        let reason = match super::verdict(&summary) {
            Err(e @ Error::Unavailable(_)) => {
                let r = format!("{e:#}");
                failure = Some(e);
                Some(r)
            }
            _ if summary.requests.interrupted || stop.load(Ordering::SeqCst) => {
                Some("interrupted".to_string())
            }
            _ => stop_reason(&args.stop_when, &points, &point),
        };
        points.push(point);
        stopped = reason.map(|reason| Stopped { reason, value: v });
        write_index(plan, &points, stopped.as_ref())?;
        if stopped.is_some() {
            break;
        }
    }
    let skipped = n - points.len();
    eprintln!(
        "mc-replay: sweep of --{} over {} of {n} values{}; wrote {}",
        plan.param.name(),
        points.len(),
        if skipped > 0 {
            format!(" ({skipped} skipped)")
        } else {
            String::new()
        },
        plan.dir.join("sweep.json").display()
    );
    eprint!("{}", table(plan.param, &points, stopped.as_ref()));
    if let Some(e) = failure {
        return Err(e);
    }
    if sent > 0 && ok == 0 {
        return Err(ReplayError::AllFailed { sent }.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run as the rule sees it: value, output tok/s, TTFT p99, lag p99,
    /// error rate.
    fn pt(value: f64, tok_s: f64, ttft_p99: f64, lag_p99: f64, errors: f64) -> Point {
        Point {
            value,
            request_throughput: tok_s / 100.0,
            output_token_throughput: tok_s,
            ttft_p50_ms: Some(ttft_p99 / 2.0),
            ttft_p99_ms: Some(ttft_p99),
            itl_p50_ms: Some(10.0),
            itl_p99_ms: Some(20.0),
            e2e_p50_ms: Some(1000.0),
            e2e_p99_ms: Some(2000.0),
            lag_p99_ms: Some(lag_p99),
            error_rate: errors,
        }
    }

    fn default_rule() -> StopWhen {
        StopWhen::parse(StopWhen::DEFAULT).unwrap()
    }

    #[test]
    fn the_default_rule_and_its_syntax() {
        assert_eq!(
            default_rule(),
            StopWhen {
                throughput_gain: Some(0.05),
                ttft_p99: Some(2.0),
                lag_p99_ms: Some(1000.0),
                error_rate: Some(0.10),
            }
        );
        // Unnamed tests keep their default; `off` turns one off; seconds.
        let w = StopWhen::parse("ttft-p99=3x, lag-p99=2.5s,error-rate=off").unwrap();
        assert_eq!(w.ttft_p99, Some(3.0));
        assert_eq!(w.lag_p99_ms, Some(2500.0));
        assert_eq!(w.error_rate, None);
        assert_eq!(w.throughput_gain, Some(0.05));
        assert_eq!(StopWhen::parse("never").unwrap(), StopWhen::NEVER);
        for (bad, says) in [
            ("ttft-p99=2", "a factor like 2x"),
            ("error-rate=0.1", "a percentage like 5%"),
            ("lag-p99=5m", "a time like 1000ms"),
            ("gain=5%", "`gain` is not a test"),
            ("ttft-p99", "expected TEST=THRESHOLD"),
            ("ttft-p99=-1x", "a factor like 2x"),
        ] {
            let e = StopWhen::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn growing_throughput_never_stops_however_latency_rises() {
        // 1000 → 1500 tok/s is +50%: still growing, although TTFT p99 went
        // from 100 to 900 ms (9x) and lag p99 to 5 s.
        let earlier = [pt(1.0, 1000.0, 100.0, 0.0, 0.0)];
        let now = pt(2.0, 1500.0, 900.0, 5000.0, 0.0);
        assert_eq!(stop_reason(&default_rule(), &earlier, &now), None);
    }

    #[test]
    fn flat_throughput_with_rising_ttft_stops() {
        // Best earlier 2000 tok/s (at 4); now 2060 = +3% < 5%. Lowest
        // earlier TTFT p99 is 100 ms (at 1); now 250 ms = 2.5x > 2x.
        let earlier = [
            pt(1.0, 1000.0, 100.0, 0.0, 0.0),
            pt(4.0, 2000.0, 120.0, 0.0, 0.0),
        ];
        let now = pt(8.0, 2060.0, 250.0, 3.0, 0.0);
        let r = stop_reason(&default_rule(), &earlier, &now).unwrap();
        assert_eq!(
            r,
            "saturated: output throughput 2060.0 tok/s is +3.0% over the best earlier \
             (2000.0 tok/s at 4) (less than throughput-gain=5%) while TTFT p99 250.0 ms \
             is 2.5x the lowest earlier (100.0 ms at 1) (more than ttft-p99=2x)"
        );
    }

    #[test]
    fn flat_throughput_alone_or_with_mild_latency_goes_on() {
        // +3% but TTFT p99 only 1.9x (190 vs 100) and lag 999 ms < 1000.
        let earlier = [pt(1.0, 2000.0, 100.0, 0.0, 0.0)];
        let now = pt(2.0, 2060.0, 190.0, 999.0, 0.0);
        assert_eq!(stop_reason(&default_rule(), &earlier, &now), None);
        // The first value has nothing to saturate against.
        assert_eq!(stop_reason(&default_rule(), &[], &now), None);
    }

    #[test]
    fn lag_alone_is_the_latency_signal_too() {
        // Throughput fell (1900 vs 2000 = -5%); TTFT p99 steady; lag p99
        // 1500 ms > 1000 ms.
        let earlier = [pt(1.0, 2000.0, 100.0, 0.0, 0.0)];
        let now = pt(2.0, 1900.0, 110.0, 1500.0, 0.0);
        let r = stop_reason(&default_rule(), &earlier, &now).unwrap();
        assert!(
            r.starts_with("saturated: output throughput 1900.0 tok/s is -5.0%"),
            "{r}"
        );
        assert!(
            r.ends_with("while lag p99 1500.0 ms (more than lag-p99=1000ms)"),
            "{r}"
        );
        // With lag off, it goes on.
        let rule = StopWhen::parse("lag-p99=off").unwrap();
        assert_eq!(stop_reason(&rule, &earlier, &now), None);
    }

    #[test]
    fn errors_stop_even_the_first_value() {
        // 11 failed of 100 = 11% > 10%.
        let now = pt(1.0, 1000.0, 100.0, 0.0, 0.11);
        assert_eq!(
            stop_reason(&default_rule(), &[], &now).unwrap(),
            "failing: 11.0% of the requests failed (more than error-rate=10%)"
        );
        // Exactly 10% is not more than 10%.
        let now = pt(1.0, 1000.0, 100.0, 0.0, 0.10);
        assert_eq!(stop_reason(&default_rule(), &[], &now), None);
        let now = pt(1.0, 1000.0, 100.0, 0.0, 1.0);
        assert_eq!(stop_reason(&StopWhen::NEVER, &[], &now), None);
    }

    #[test]
    fn order_does_not_matter_best_and_lowest_are_over_every_earlier_run() {
        // A descending list: the best earlier throughput is the first run's.
        let earlier = [
            pt(8.0, 3000.0, 900.0, 0.0, 0.0),
            pt(4.0, 2900.0, 300.0, 0.0, 0.0),
        ];
        // 2950 is -1.7% of 3000; TTFT p99 700 ms is 2.33x the lowest 300 ms.
        let now = pt(2.0, 2950.0, 700.0, 0.0, 0.0);
        let r = stop_reason(&default_rule(), &earlier, &now).unwrap();
        assert!(
            r.contains("(3000.0 tok/s at 8)") && r.contains("(300.0 ms at 4)"),
            "{r}"
        );
    }

    #[test]
    fn without_output_tokens_request_throughput_decides() {
        let mut a = pt(1.0, 0.0, 100.0, 0.0, 0.0);
        a.request_throughput = 10.0;
        let mut b = pt(2.0, 0.0, 300.0, 0.0, 0.0);
        b.request_throughput = 10.2;
        let r = stop_reason(&default_rule(), &[a], &b).unwrap();
        assert!(
            r.starts_with("saturated: request throughput 10.2 req/s is +2.0%"),
            "{r}"
        );
    }

    #[test]
    fn names_are_short_decimals() {
        assert_eq!(run_name(Param::Rate, 0.5), "rate-0.5");
        assert_eq!(run_name(Param::Rate, 2.0), "rate-2");
        assert_eq!(run_name(Param::Concurrency, 16.0), "concurrency-16");
        assert_eq!(run_name(Param::Speedup, 1.25), "speedup-1.25");
        assert_eq!(run_name(Param::Rate, 1e-6), "rate-0.000001");
    }

    #[test]
    fn csv_rows_and_empty_cells() {
        let mut p = pt(0.5, 100.0, 40.0, 0.25, 0.0);
        p.itl_p50_ms = None;
        p.itl_p99_ms = None;
        assert_eq!(
            csv(Param::Rate, &[p]),
            "rate,request_throughput,output_token_throughput,ttft_p50_ms,ttft_p99_ms,\
             itl_p50_ms,itl_p99_ms,e2e_p50_ms,e2e_p99_ms,lag_p99_ms,error_rate\n\
             0.5,1,100,20,40,,,1000,2000,0.25,0\n"
        );
    }
}
