//! `mc-fit`: an engine profile fitted to your own server's runs, and its
//! error stated on runs it was not fitted to.
//!
//! - [`runs`]: the runs (mc-replay's result files, through
//!   [`crate::results`]) and the trace they replayed.
//! - [`model`]: the fit by simulation (each run's actual send times through
//!   the engine model) and the search.
//! - [`table`]: predicted against measured, metric by metric.

pub mod model;
pub mod runs;
pub mod table;

use std::path::PathBuf;

use clap::Parser;
use serde_json::json;

use crate::engine::{
    check_shape, EngineParams, EngineShapeArgs, Profile, Roofline, StepModel, DEFAULT_BLOCK_SIZE,
    DEFAULT_KV_TOKENS, DEFAULT_MAX_BATCHED_TOKENS, DEFAULT_MAX_SEQS,
};
use crate::error::{Error, Result};
use model::{Prepared, Shape, NAMES};

pub const TOOL: &str = "mc-fit";

/// Fit an engine profile to your own server's runs, and state its error.
///
/// Reads mc-replay's result files (or folders of them) of runs against a
/// real server, and the trace they replayed (--trace). Each run's requests
/// go through the engine model at the times they were actually sent, and
/// the six coefficients of the roofline step-time model are searched
/// (Nelder–Mead in log space) to minimise the mean absolute log error of
/// per-request TTFT, ITL and E2E. The engine's shape is not searched: it
/// comes from the options, else from the runs' summaries (the engine model's
/// own runs), else vLLM's defaults, and is named on stderr.
///
/// Writes the fitted profile as JSON (stdout, or -o), which
/// `mc-replay --engine-profile FILE` and `mc-mock --engine` load; prints on
/// stderr the coefficients, the in-sample error of every metric, and a
/// warning for each coefficient the data cannot identify (for example no
/// long prompts: the attention term is free).
///
/// With --predict PROFILE, fits nothing: prints predicted against measured
/// for the runs given, which should be runs the profile was not fitted to.
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

    /// Write the fitted profile here instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// The server's shape (vLLM reports its block size and KV blocks in
    /// `vllm:cache_config_info`; its CPU build uses blocks of 128). Without
    /// --max-seqs (and without a run on the engine model that says), the
    /// fit also tries 1, 2, 4, … 256 and keeps the one that fits best.
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
    };
    let seqs_known = args.max_seqs.is_some() || known.is_some();
    (s, seqs_known)
}

pub fn run(args: &FitArgs) -> Result<()> {
    let runs = read_runs(args)?;
    let (mut shape, seqs_known) = shape(args, &runs);
    // The same checks as the engine's own options (no zero sizes, a
    // bounded KV cache), before any simulation.
    check_shape(&model::params(
        crate::engine::H100_LLAMA3_8B,
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
    let start = match Profile::load(&args.start)?.model {
        StepModel::Roofline(r) => r,
        StepModel::Polynomial(_) => {
            return Err(Error::usage(format!(
                "--start {}: the fit searches the roofline model; start from a roofline profile",
                args.start
            )))
        }
    };
    let (fitted, err) = if seqs_known {
        model::fit(&prepared, shape, start)
    } else {
        let (fitted, err, seqs) = fit_max_seqs(&prepared, shape, start);
        shape.max_seqs = seqs;
        (fitted, err)
    };
    report_fit(&prepared, shape, fitted, err);
    write_profile(args, shape, &fitted)
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
    let p = EngineParams {
        kv_tokens: o.kv_tokens.or(profile.kv_tokens).unwrap_or(shape.kv_tokens),
        block_size: shape.block_size,
        max_batched_tokens: o
            .max_batched_tokens
            .or(profile.max_batched_tokens)
            .unwrap_or(shape.max_batched_tokens),
        max_seqs: o.max_seqs.or(profile.max_seqs).unwrap_or(shape.max_seqs),
        max_model_len: o.max_model_len.or(profile.max_model_len),
        profile,
    };
    check_shape(&p)?;
    eprintln!("{TOOL}: predicting with {spec}");
    eprint!("{}", table::render(&table::compare(prepared, &p)));
    Ok(())
}

/// The fit at each usual concurrency limit, the one with the least error
/// kept: (coefficients, error, max seqs).
///
/// The server's concurrency limit is structure, not a coefficient, and
/// coefficients fitted at one limit say little of another (a server that
/// runs one request at a time, fitted as 256 wide, then probed at 1,
/// looks worse than at 4).
fn fit_max_seqs(prepared: &[Prepared<'_>], shape: Shape, start: Roofline) -> (Roofline, f64, u64) {
    let (mut fitted, mut err) = model::fit(prepared, shape, start);
    let mut best = shape.max_seqs;
    for n in [1u64, 2, 4, 8, 16, 32, 64, 128, 256] {
        if n == shape.max_seqs {
            continue;
        }
        let s = Shape {
            max_seqs: n,
            ..shape
        };
        let (f, e) = model::fit(prepared, s, start);
        if e < err {
            (fitted, err, best) = (f, e, n);
        }
    }
    eprintln!("{TOOL}: max seqs {best} fits best (not given, not reported)");
    (fitted, err, best)
}

/// The fitted coefficients, the ones the runs cannot identify, and the
/// in-sample error, on stderr.
fn report_fit(prepared: &[Prepared<'_>], shape: Shape, fitted: Roofline, err: f64) {
    eprintln!("{TOOL}: fitted roofline coefficients (mean squared log error {err:.5}):");
    for (name, value) in NAMES.iter().zip(model::to_vec(&fitted)) {
        eprintln!("  {name:<10} {value:.6e}");
    }
    for name in model::unidentified(prepared, shape, fitted, err) {
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
fn write_profile(args: &FitArgs, shape: Shape, fitted: &Roofline) -> Result<()> {
    let mut profile = json!({"name": "fitted", "model": "roofline"});
    for (name, value) in NAMES.iter().zip(model::to_vec(fitted)) {
        profile[*name] = json!(value);
    }
    profile["kv_tokens"] = json!(shape.kv_tokens);
    profile["block_size"] = json!(shape.block_size);
    profile["max_batched_tokens"] = json!(shape.max_batched_tokens);
    profile["max_seqs"] = json!(shape.max_seqs);
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
