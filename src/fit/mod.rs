//! `mc-fit`: an engine profile fitted to your own server's runs, and its
//! error stated on runs it was not fitted to.
//!
//! - [`design`]: which coefficient each part of a designed workload
//!   (`mc-gen calibrate`) pins, and which the runs' parts cannot.
//! - [`direct`]: a designed run's rungs read as known sums of steps: the
//!   search's start.
//! - [`runs`]: the runs (mc-replay's result files, through
//!   [`crate::results`]) and the trace they replayed.
//! - [`model`]: the fit by simulation (each run's actual send times through
//!   the engine model) and the search.
//! - [`table`]: predicted against measured, metric by metric.
//! - [`heldout`]: the error on runs a fit did not see (k-fold over runs).

pub mod design;
pub mod direct;
pub mod heldout;
pub mod model;
pub mod runs;
pub mod table;

use std::path::PathBuf;

use clap::Parser;
use serde_json::json;

use crate::engine::{
    check_shape, Calibrated, EngineParams, EngineShapeArgs, PrefixCache, Profile, StepModel,
    DEFAULT_BLOCK_SIZE, DEFAULT_KV_TOKENS, DEFAULT_MAX_BATCHED_TOKENS, DEFAULT_MAX_SEQS,
};
use crate::error::{Error, Result};
use crate::progress::Progress;
use model::{Prepared, Shape, NAMES};

pub const TOOL: &str = "mc-fit";

/// Fit an engine profile to your own server's runs, and state its error.
///
/// Reads mc-replay's result files (or folders of them) of runs against a
/// real server, and the trace they replayed (--trace). Each run's requests
/// go through the engine model at the times they were actually sent, and
/// the six coefficients of the roofline step-time model (eight with
/// `--model serving`) are searched
/// (Nelder–Mead, then golden-section rounds, in log space) to minimise the
/// error: for each of per-request TTFT, ITL and E2E its mean squared log
/// ratio of predicted to measured, then the mean of the three (each metric
/// weighs a third, so none dominates). Progress is shown on stderr.
///
/// The engine's shape (KV tokens, block size, step budget) is not searched:
/// it comes from the options, else from the runs' summaries (the engine
/// model's own runs), else vLLM's defaults, and is named on stderr. The
/// concurrency limit (max seqs), when neither options nor runs give it, is
/// searched only among the limits the runs can tell apart (1, 2, 4, …
/// below the most requests any run had in flight); when none of them fits
/// better, it stays at vLLM's default 256 and is reported as not
/// identified, with the load that would pin it.
///
/// Writes the fitted profile as JSON (stdout, or -o), which
/// `mc-replay --engine-profile FILE` and `mc-mock --engine` load, with the
/// load it was calibrated at; prints on stderr the coefficients, a warning
/// for each coefficient the data cannot identify (for example no long
/// prompts: the attention term is free), the in-sample error, and the
/// held-out error: each run predicted by a fit to the others
/// (leave-one-run-out up to 5 runs, 5 folds beyond), per metric, with the
/// direction of the bias (over or under).
///
/// Runs of a designed workload (`mc-gen calibrate`: rows whose request_id
/// is `cal:PART:…`) are read part by part: mc-fit names what each part pins,
/// starts the search from the rungs fitted directly (each a known sum of
/// steps), and reports a coefficient whose part the runs lack as not
/// identified. With --server-histograms, a run whose summary holds the
/// server's request-phase histograms (vLLM's prefill and decode time;
/// mc-replay keeps them) is scored on them instead of the client's TTFT and
/// E2E, so queueing is simulated, not fitted (off by default: it fitted
/// worse, see the option); stderr says which each run used.
///
/// With --predict PROFILE, fits nothing: prints predicted against measured
/// for the runs given, which should be runs the profile was not fitted to,
/// and says when they are beyond the load the profile was calibrated at.
///
/// Exit codes: 0 done; 2 usage; 65 a bad trace line or result file; 66 an
/// input missing; 73 an output that cannot be created.
#[derive(Debug, Clone, Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-replay --url http://gpu:8000 --rate 1,2,4 --out-dir cal -i trace.jsonl
  mc-fit --trace trace.jsonl cal/rate-1 cal/rate-2 -o my-server.json
  mc-fit --trace trace.jsonl --predict my-server.json cal/rate-4     # error on a held-out run
  mc-replay --engine-profile my-server.json --rate 8 -i trace.jsonl  # what-if at a rate not measured"
)]
pub struct FitArgs {
    /// Result files of mc-replay (`-o`), or folders holding them (a sweep's
    /// `rate-2/`); each is one run.
    #[arg(value_name = "RUN")]
    pub runs: Vec<PathBuf>,

    /// The trace the runs replayed (their result lines name its lines).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,

    /// Predict the runs with this profile (a built-in name or a file) and
    /// print the error, instead of fitting.
    #[arg(long, value_name = "PROFILE")]
    pub predict: Option<String>,

    /// Where the search starts (a built-in roofline profile or a file).
    #[arg(long, default_value = "h100-llama3-8b", value_name = "PROFILE")]
    pub start: String,

    /// The step-time model to fit: `roofline` (six coefficients), or
    /// `serving`, the roofline plus the serving process's per-request
    /// costs: `c_new_ms` (CPU time per new request, charged to the step
    /// that first schedules it) and `t_req_ms` (latency from a request's
    /// arrival until it can be scheduled). On vLLM's CPU build a lone
    /// prompt's first token took five times a decode step, which only
    /// `serving` can give (decision 0044).
    #[arg(long, value_enum, default_value = "roofline")]
    pub model: model::Kind,

    /// Score a run on the server's own request-phase histograms (vLLM's
    /// prefill and decode time, which mc-replay keeps) instead of the
    /// client's TTFT and E2E, where the run has them. Off by default: on a
    /// real vLLM (CPU build) the histogram fit missed held-out ITL by
    /// +216% to +330% where the client-side fit missed by 10-19%, and on 20
    /// hidden mock profiles it met the targets in 4 against 6 (vLLM's
    /// latency buckets start at 0.3 s; its prefill time leaves out the HTTP
    /// exchange).
    #[arg(long)]
    pub server_histograms: bool,

    /// Write the fitted profile here instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// The server's shape (vLLM reports its block size and KV blocks in
    /// `vllm:cache_config_info`; its CPU build uses blocks of 128). Without
    /// --max-seqs (and without a run on the engine model that says), the
    /// fit also tries 1, 2, 4, … below the most requests any run had in
    /// flight, and keeps 256 unless one fits better.
    #[command(flatten)]
    pub shape: EngineShapeArgs,
}

/// The shape: options, else the runs' own engine, else vLLM's defaults.
fn shape(args: &FitArgs, runs: &[runs::Run]) -> (Shape, bool) {
    let known = runs.iter().find_map(|r| r.engine.as_ref());
    let args = &args.shape;
    let s = Shape {
        kv_tokens: args
            .kv_tokens
            .or(known.map(|k| k.kv_tokens))
            .unwrap_or(DEFAULT_KV_TOKENS),
        block_size: args
            .engine_block_size
            .or(known.map(|k| k.block_size))
            .unwrap_or(DEFAULT_BLOCK_SIZE),
        max_batched_tokens: args
            .max_batched_tokens
            .or(known.map(|k| k.max_batched_tokens))
            .unwrap_or(DEFAULT_MAX_BATCHED_TOKENS),
        max_seqs: args
            .max_seqs
            .or(known.map(|k| k.max_seqs))
            .unwrap_or(DEFAULT_MAX_SEQS),
        prefix_cache: args
            .engine_prefix_cache
            .or(known.map(|k| k.prefix_cache))
            .unwrap_or_default(),
    };
    let seqs_known = args.max_seqs.is_some() || known.is_some();
    (s, seqs_known)
}

pub fn run(args: &FitArgs) -> Result<()> {
    let mut runs = read_runs(args)?;
    // Which runs hold the server's histograms, before the option decides
    // whether the fit reads them (stderr says so either way).
    let had_histograms: Vec<bool> = runs
        .iter()
        .map(|r| runs::service_histograms(r).is_some())
        .collect();
    if !args.server_histograms {
        for r in &mut runs {
            r.server.clear();
        }
    }
    let (mut shape, seqs_known) = shape(args, &runs);
    // The same checks as the engine's own options (no zero sizes, a
    // bounded KV cache), before any simulation.
    check_shape(&model::params(
        StepModel::Roofline(crate::engine::H100_LLAMA3_8B),
        shape,
        "shape",
    ))?;
    eprintln!(
        "{TOOL}: {} runs, {} requests; engine shape: kv {} tokens in blocks of {}, \
         step budget {} tokens, {} seqs",
        runs.len(),
        runs.iter().map(|r| r.requests.len()).sum::<usize>(),
        shape.kv_tokens,
        shape.block_size,
        shape.max_batched_tokens,
        shape.max_seqs
    );
    let prepared: Vec<Prepared<'_>> = runs
        .iter()
        .map(|r| Prepared::new(r, shape.block_size))
        .collect();
    if let Some(spec) = &args.predict {
        return predict(args, spec, &prepared, shape);
    }
    let start = start_profile(args)?;
    say_what_is_fitted(&runs, &had_histograms);
    let load = Load::of(&runs);
    let coverage = design::Coverage::of(&runs);
    for line in coverage.describe() {
        eprintln!("{TOOL}: designed part: {line}");
    }
    let mut ticker = Ticker::new();
    let given_start = start;
    let start = direct::start_for_model(&runs, shape, start, args.model);
    if start != model::start_model(args.model, given_start) {
        say_start(&start);
    }
    let (fitted, err, identified) = if seqs_known {
        ticker.stage(format!("fit at max seqs {}", shape.max_seqs));
        let (f, e) = model::fit(&prepared, shape, start, &mut |e| ticker.tick(e));
        (f, e, true)
    } else {
        let (fitted, err, seqs) = fit_max_seqs(&prepared, shape, start, &load, &mut ticker);
        let identified = seqs != shape.max_seqs;
        shape.max_seqs = seqs;
        (fitted, err, identified)
    };
    report_fit(&prepared, shape, fitted, err, &coverage, &mut ticker);
    heldout::report(&prepared, shape, given_start, args.model, &mut ticker);
    ticker.done();
    let calibrated = Calibrated {
        max_rate_rps: load.max_rate_rps,
        max_in_flight: load.peak,
        max_seqs_identified: identified,
    };
    write_profile(args, shape, &fitted, calibrated)
}

/// `--start`: the roofline coefficients the search starts from.
fn start_profile(args: &FitArgs) -> Result<crate::engine::Roofline> {
    match Profile::load(&args.start)?.model {
        StepModel::Roofline(r) => Ok(r),
        StepModel::Serving(v) => Ok(v.base),
        StepModel::Polynomial(_) => Err(Error::usage(format!(
            "--start {}: the fit searches the roofline model; start from a roofline profile",
            args.start
        ))),
    }
}

/// Says, per run, what the fit reads: the server's histograms or the
/// client's times (and whether the run held histograms left unread).
fn say_what_is_fitted(runs: &[runs::Run], had_histograms: &[bool]) {
    for (r, had) in runs.iter().zip(had_histograms) {
        match runs::service_histograms(r) {
            Some((prefill, decode)) => eprintln!(
                "{TOOL}: {}: fitting service time to the server's own histograms \
             (vllm:request_prefill_time_seconds, {} requests; \
             vllm:request_decode_time_seconds, {}): queueing is simulated, not fitted",
                r.label, prefill.count, decode.count
            ),
            None if *had => eprintln!(
                "{TOOL}: {}: fitting the client's TTFT, ITL and E2E (the run holds the \
             server's request-phase histograms; --server-histograms fits service time \
             to them)",
                r.label
            ),
            None => eprintln!(
                "{TOOL}: {}: fitting the client's TTFT, ITL and E2E (the run holds no \
             request-phase histograms of the server)",
                r.label
            ),
        }
    }
}

/// The start the designed rungs gave, read directly.
fn say_start(start: &StepModel) {
    eprintln!(
        "{TOOL}: the search starts from the designed rungs read directly (each a known \
         sum of steps): {}",
        model::names(start)
            .iter()
            .zip(model::coeffs(start))
            .map(|(n, v)| format!("{n} {v:.4e}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The progress line of a fit (through the one reporter): the stage, the
/// simulations so far and the best error yet. A fit runs thousands of
/// simulations; minutes of silence look like a hang.
pub struct Ticker {
    progress: Progress,
    stage: String,
    sims: u64,
    best: f64,
}

impl Ticker {
    fn new() -> Ticker {
        Ticker {
            progress: Progress::for_stderr(TOOL, std::time::Duration::from_secs(5)),
            stage: String::new(),
            sims: 0,
            best: f64::INFINITY,
        }
    }

    pub fn stage(&mut self, stage: String) {
        self.stage = stage;
        self.sims = 0;
        self.best = f64::INFINITY;
    }

    pub fn tick(&mut self, err: f64) {
        self.sims += 1;
        self.best = self.best.min(err);
        let (stage, sims, best) = (&self.stage, self.sims, self.best);
        self.progress
            .tick(|| format!("{stage}: {sims} simulations, best error {best:.5}"));
    }

    /// Erases a live line before a report is printed.
    pub fn done(&mut self) {
        self.progress.finish();
    }
}

/// The load of the runs: what a concurrency limit could be told from.
struct Load {
    /// The most requests in flight at once in any run, and that run.
    peak: u64,
    peak_run: String,
    /// The rate of the run with the most in flight.
    peak_run_rate: Option<f64>,
    max_rate_rps: f64,
}

impl Load {
    fn of(runs: &[runs::Run]) -> Load {
        let mut load = Load {
            peak: 0,
            peak_run: String::new(),
            peak_run_rate: None,
            max_rate_rps: 0.0,
        };
        for r in runs {
            let peak = r.peak_in_flight();
            if peak > load.peak || load.peak_run.is_empty() {
                load.peak = peak;
                load.peak_run = r.label.clone();
                load.peak_run_rate = r.rate();
            }
            load.max_rate_rps = load.max_rate_rps.max(r.rate().unwrap_or(0.0));
        }
        load
    }
}

/// The trace and the runs, checked: both given, and the profile's file
/// not one of them.
fn read_runs(args: &FitArgs) -> Result<Vec<runs::Run>> {
    // Checked here rather than by clap, so `--completions`/`--man` work alone.
    let Some(trace) = &args.trace else {
        return Err(Error::usage(
            "--trace FILE is required: the trace the runs replayed",
        ));
    };
    if args.runs.is_empty() {
        return Err(Error::usage(
            "give at least one run: mc-replay's -o file, or its folder",
        ));
    }
    // The profile must not overwrite what the fit reads.
    let mut inputs: Vec<&std::path::Path> = vec![trace.as_path()];
    inputs.extend(args.runs.iter().map(PathBuf::as_path));
    crate::jsonl::refuse_input_as_output(args.output.as_deref(), &inputs)?;
    let trace = runs::read_trace(trace)?;
    args.runs
        .iter()
        .map(|p| runs::read_run(p, &trace))
        .collect()
}

/// `--predict PROFILE`: the profile's predictions against the runs,
/// nothing fitted (the options' shape first, then the profile's).
fn predict(args: &FitArgs, spec: &str, prepared: &[Prepared<'_>], shape: Shape) -> Result<()> {
    let profile = Profile::load(spec)?;
    let o = &args.shape;
    let calibrated = profile.calibrated;
    let p = EngineParams {
        kv_tokens: o.kv_tokens.or(profile.kv_tokens).unwrap_or(shape.kv_tokens),
        block_size: shape.block_size,
        max_batched_tokens: o
            .max_batched_tokens
            .or(profile.max_batched_tokens)
            .unwrap_or(shape.max_batched_tokens),
        max_seqs: o.max_seqs.or(profile.max_seqs).unwrap_or(shape.max_seqs),
        max_model_len: o.max_model_len.or(profile.max_model_len),
        prefix_cache: o
            .engine_prefix_cache
            .or(profile.prefix_cache)
            .unwrap_or(shape.prefix_cache),
        profile,
    };
    check_shape(&p)?;
    eprintln!("{TOOL}: predicting with {spec}");
    if let Some(c) = calibrated {
        for prep in prepared {
            if let Some(why) = beyond(prep.run, &c, p.max_seqs) {
                eprintln!("{TOOL}: warning: {}: {why}", prep.run.label);
            }
        }
    }
    eprint!("{}", table::render(&table::compare(prepared, &p)));
    Ok(())
}

/// Why a run is beyond the load the profile was calibrated at, if it is:
/// a higher rate, or more requests in flight (where a concurrency limit
/// the fit could not identify starts to matter).
fn beyond(run: &runs::Run, c: &Calibrated, max_seqs: u64) -> Option<String> {
    let peak = run.peak_in_flight();
    let rate = run.rate().unwrap_or(0.0);
    // 5% over the highest calibrated rate is the same load within noise.
    let faster = rate > c.max_rate_rps * 1.05;
    let wider = peak > c.max_in_flight;
    if !faster && !wider {
        return None;
    }
    let mut why = format!(
        "a prediction beyond the calibrated load: this run sends {rate:.2} req/s with up to \
         {peak} requests in flight; the profile was fitted to at most {:.2} req/s and {} in \
         flight",
        c.max_rate_rps, c.max_in_flight
    );
    if wider && !c.max_seqs_identified {
        why.push_str(&format!(
            "; its max seqs {max_seqs} was not identified (no calibration run exceeded the \
             smaller limits), and this run puts more in flight than any did"
        ));
    }
    Some(why)
}

/// The fit at each concurrency limit the runs can tell apart, the one with
/// the least error kept: (coefficients, error, max seqs).
///
/// The server's concurrency limit is structure, not a coefficient, and
/// coefficients fitted at one limit say little of another (a server that
/// runs one request at a time, fitted as 256 wide, then probed at 1,
/// looks worse than at 4). A limit at or above the most requests any run
/// had in flight never held one back, so every such limit fits the runs
/// alike (the search once chose 64 for a 256-wide server whose runs never
/// had more than 49 in flight, and predicted a run at a higher rate 874%
/// off): only smaller limits are tried, and unless one fits clearly
/// better, vLLM's default stays, reported as not identified.
fn fit_max_seqs(
    prepared: &[Prepared<'_>],
    shape: Shape,
    start: StepModel,
    load: &Load,
    ticker: &mut Ticker,
) -> (StepModel, f64, u64) {
    ticker.stage(format!("fit at max seqs {}", shape.max_seqs));
    let (mut fitted, mut err) = model::fit(prepared, shape, start, &mut |e| ticker.tick(e));
    let mut best = shape.max_seqs;
    let told_apart: Vec<u64> = (0..8)
        .map(|k| 1u64 << k)
        .filter(|&n| n < load.peak && n < shape.max_seqs)
        .collect();
    for n in told_apart {
        let s = Shape {
            max_seqs: n,
            ..shape
        };
        ticker.stage(format!("fit at max seqs {n}"));
        let (f, e) = model::fit(prepared, s, start, &mut |e| ticker.tick(e));
        // Clearly better, not by the search's noise: 2% less error.
        if e < err * 0.98 {
            (fitted, err, best) = (f, e, n);
        }
    }
    ticker.done();
    if best != shape.max_seqs {
        eprintln!(
            "{TOOL}: max seqs {best} fits best of the limits the runs can tell apart \
             (up to {} requests were in flight, in {})",
            load.peak, load.peak_run
        );
    } else {
        let pin = match load.peak_run_rate {
            Some(r) if load.peak > 0 => format!(
                " (about {:.0} req/s on {}'s workload, which ran at {r:.2} req/s)",
                r * shape.max_seqs as f64 / load.peak as f64,
                load.peak_run
            ),
            _ => String::new(),
        };
        eprintln!(
            "{TOOL}: warning: max seqs not identified: no run had more than {} requests in \
             flight ({}), so every limit from {} up fits the runs alike; left at {} (vLLM's \
             default; give the server's with --max-seqs). A run with more than {} in flight \
             would pin it{pin}",
            load.peak, load.peak_run, load.peak, shape.max_seqs, shape.max_seqs
        );
    }
    (fitted, err, best)
}

/// The fitted coefficients, the ones the runs cannot identify, and the
/// in-sample error, on stderr.
fn report_fit(
    prepared: &[Prepared<'_>],
    shape: Shape,
    fitted: StepModel,
    err: f64,
    coverage: &design::Coverage,
    ticker: &mut Ticker,
) {
    ticker.stage("checking which coefficients the runs identify".into());
    let unidentified = model::unidentified(prepared, shape, fitted, err, &mut |e| ticker.tick(e));
    ticker.done();
    // A designed run set lacking the part that pins a coefficient does not
    // pin it, whatever the search found: the part is the evidence.
    let unpinned: Vec<(&str, Vec<&str>)> = NAMES
        .iter()
        .filter_map(|name| {
            let missing = coverage.missing(name)?;
            (!missing.is_empty()).then(|| (*name, missing.into_iter().map(design::label).collect()))
        })
        .collect();
    let kind = if matches!(fitted, StepModel::Serving(_)) {
        "serving"
    } else {
        "roofline"
    };
    eprintln!(
        "{TOOL}: fitted {kind} coefficients (error {err:.5}: mean over TTFT, ITL and E2E \
         of each one's mean squared log error):"
    );
    for (name, value) in model::names(&fitted).iter().zip(model::coeffs(&fitted)) {
        eprintln!("  {name:<10} {value:.6e}");
    }
    for (name, missing) in &unpinned {
        eprintln!(
            "{TOOL}: warning: {name} not identified: these runs hold no {} (the part of \
             `mc-gen calibrate` that pins it); its value is not a fit",
            missing.join(" and no ")
        );
    }
    let unpinned_names: Vec<&str> = unpinned.iter().map(|(n, _)| *n).collect();
    for name in unidentified
        .into_iter()
        .filter(|n| !unpinned_names.contains(n))
    {
        eprintln!(
            "{TOOL}: warning: the runs cannot identify {name} (halved or doubled, the other \
             coefficients make up for it); add runs that exercise it (long prompts for k_ms, \
             long contexts for c_kv_ms, batches of different sizes for t_fix_ms and c_seq_ms)"
        );
    }
    let p = model::params(fitted, shape, "fitted");
    eprintln!("{TOOL}: in-sample error (the runs it was fitted to):");
    eprint!("{}", table::render(&table::compare(prepared, &p)));
}

/// The fitted profile (JSON, `--engine-profile`'s format) to `-o` or
/// stdout.
fn write_profile(
    args: &FitArgs,
    shape: Shape,
    fitted: &StepModel,
    calibrated: Calibrated,
) -> Result<()> {
    let kind = if matches!(fitted, StepModel::Serving(_)) {
        "serving"
    } else {
        "roofline"
    };
    let mut profile = json!({"name": "fitted", "model": kind});
    for (name, value) in model::names(fitted).iter().zip(model::coeffs(fitted)) {
        profile[*name] = json!(value);
    }
    profile["kv_tokens"] = json!(shape.kv_tokens);
    profile["block_size"] = json!(shape.block_size);
    profile["max_batched_tokens"] = json!(shape.max_batched_tokens);
    profile["max_seqs"] = json!(shape.max_seqs);
    if shape.prefix_cache != PrefixCache::Blocks {
        profile["prefix_cache"] = json!(shape.prefix_cache);
    }
    if let Some(m) = args.shape.max_model_len {
        profile["max_model_len"] = json!(m);
    }
    profile["calibrated"] = json!(calibrated);
    let mut text = serde_json::to_string_pretty(&profile).map_err(|e| Error::Other(e.into()))?;
    text.push('\n');
    match &args.output {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| Error::CantCreate(format!("{}: {e}", path.display())))?,
        None => {
            use std::io::Write;
            std::io::stdout().write_all(text.as_bytes())?;
        }
    }
    Ok(())
}
