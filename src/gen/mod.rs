//! `mc-gen`: workloads from nothing, from statistics and from prompt
//! collections (AIBrix's workload generator, seeded and streaming). Each
//! mode is a generator that hands requests to a [`sink::Sink`], which writes
//! Mooncake rows or AIBrix's format and attaches real prompts when asked.

pub mod agent;
pub mod agent_graph;
pub mod arrival;
pub mod calibrate;
pub mod collection;
pub mod dist;
pub mod from_trace;
pub mod pattern;
pub mod prefix;
pub mod prompts;
pub mod rate;
pub mod rng;
pub mod sessions;
pub mod sink;
pub mod stat;

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::jsonl::Output;
use sink::{Format, Sink};

/// The tool's name, for its messages and `--version`.
pub const TOOL: &str = "mc-gen";

/// Generate a workload: Mooncake rows (or AIBrix's workload format) from a
/// rate, from patterns, from Grafana statistics, with shared prefixes, as
/// multi-turn or agent sessions, or from an existing trace; optionally with
/// real prompts from an AIBrix prompt collection.
///
/// Writes JSONL on stdout (or --output) as it is generated, in constant
/// memory (sessions and agent in --format aibrix are held until the end to
/// sort them by time). Every random choice follows --seed (default 0): the
/// same arguments give the same bytes on every machine. Timestamps are
/// whole ms from 0; requests get fresh hash_ids of --block-size tokens
/// unless a mode shares them. A summary line goes to stderr.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-gen constant --qps 2.5 --duration-ms 60000 --isl lognormal:1024:0.6 --osl 128 | mc-analyze
  mc-gen synthetic --traffic-pattern quick_rising --prompt-len-pattern slight_fluctuation --duration-ms 600000 --interval-ms 10000
  mc-gen stat --traffic-file qps.csv --prompt-len-file in.csv --completion-len-file out.csv
  mc-gen prefix --prefix-groups 16 --prefix-tokens 4096 --share-ratio 0.7 --num-requests 10000 | mc-analyze
  mc-gen sessions --sessions 200 --turns uniform:2:8 --system-prompt-tokens 1024 | mc-replay --url http://127.0.0.1:8000
  mc-gen agent --config agent.json --format aibrix > workload.jsonl
  mc-gen agent --graph sub-agents --num-sessions 50 > agents.jsonl
  mc-gen from-trace -i azure.jsonl --prompt-file prompts.jsonl --tokenizer meta-llama/Llama-3.1-8B-Instruct
  mc-gen prompts --prefix-groups 8 --turns uniform:2:5 > sessions.jsonl
  mc-gen calibrate --max-model-len 32768 --max-seqs 256 --block-size 16 > design.jsonl"
)]
pub struct GenArgs {
    // Optional for clap so `--completions`/`--man` work without a mode;
    // a missing mode is a usage error in `run`.
    #[command(subcommand)]
    pub mode: Option<Mode>,

    #[command(flatten)]
    pub common: Common,
}

/// Options every mode takes.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Seed of every random choice: the same arguments and seed give the
    /// same bytes on every machine.
    #[arg(long, global = true, default_value_t = 0, value_name = "N")]
    pub seed: u64,

    /// Output format: Mooncake rows, or AIBrix's workload lines.
    #[arg(long, global = true, value_enum, default_value_t = Format::Mooncake)]
    pub format: Format,

    /// Tokens per hash id.
    #[arg(long, global = true, default_value_t = 512, value_name = "B")]
    pub block_size: u64,

    /// Attach a real prompt to each request from an AIBrix prompt collection
    /// (plain `{"prompt", "completion"?}` or sessioned `{"session_id",
    /// "prompts", "completions"?}` lines), matched by token length. Rows then
    /// carry `text_input` instead of input_length and hash_ids.
    #[arg(long, global = true, value_name = "FILE")]
    pub prompt_file: Option<PathBuf>,

    /// Tokenizer for --prompt-file: a tokenizer.json, a folder holding one,
    /// or a HuggingFace model id (resolved as nat2mc does).
    #[arg(long, global = true, value_name = "X")]
    pub tokenizer: Option<String>,

    /// Where prompt token counts are cached (default $MCTRACE_CACHE_DIR,
    /// $XDG_CACHE_HOME/mctrace or ~/.cache/mctrace).
    #[arg(long, global = true, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// Write to FILE instead of stdout.
    #[arg(short, long, global = true, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Also draw the generated workload as SVG into FILE: the figure mc-plot
    /// draws of the same rows with its defaults (rates, lengths, sessions,
    /// prefix-cache hit rate per window).
    #[arg(long, global = true, value_name = "FILE")]
    pub plot: Option<PathBuf>,

    /// Flush after every line.
    #[arg(long, global = true)]
    pub line_buffered: bool,
}

/// The modes.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Mode {
    /// Requests at a fixed rate (Poisson, constant or gamma gaps), optionally
    /// ramping from --qps-start as `vllm bench serve` does.
    Constant(rate::ConstantArgs),
    /// Rate and lengths following sine patterns (AIBrix's presets or configs).
    Synthetic(rate::SyntheticArgs),
    /// Rates and length percentiles from Grafana CSV exports.
    Stat(rate::StatArgs),
    /// Shared system prompts: groups of requests with a common prefix, so a
    /// prefix cache reaches a chosen hit rate.
    Prefix(prefix::PrefixArgs),
    /// Multi-turn conversations with think time and cumulative prompts.
    Sessions(sessions::SessionArgs),
    /// AIBrix's agent sessions: plan, parallel tool calls, follow-up.
    Agent(agent::AgentArgs),
    /// Arrivals and lengths of an existing Mooncake trace, with prompts from
    /// a prompt file.
    FromTrace(from_trace::FromTraceArgs),
    /// Write a synthetic prompt collection (prefix-sharing, multi-turn).
    Prompts(collection::PromptsArgs),
    /// A workload designed to calibrate the engine model (mc-fit): a
    /// prefill ladder, a decode ladder, long contexts and a rate ladder,
    /// each part pinning some of the step-time coefficients.
    Calibrate(calibrate::CalibrateArgs),
}

/// How long an open-ended generator runs.
#[derive(Debug, Clone, clap::Args)]
pub struct Bound {
    /// Generate arrivals in [0, MS).
    #[arg(long, value_name = "MS")]
    pub duration_ms: Option<u64>,

    /// Stop after N requests.
    #[arg(long, value_name = "N")]
    pub num_requests: Option<u64>,
}

impl Bound {
    /// The end time in ms and the most requests (unbounded sides are
    /// infinite); a usage error when neither is given.
    pub fn limits(&self) -> Result<(f64, u64)> {
        use crate::limits::{MAX_GEN_ROWS, MAX_TIME_MS};
        if self.duration_ms.is_none() && self.num_requests.is_none() {
            return Err(Error::Usage(
                "give --duration-ms or --num-requests (or both) to bound the run".into(),
            ));
        }
        if let Some(n) = self.num_requests.filter(|&n| n > MAX_GEN_ROWS) {
            return Err(Error::Usage(format!(
                "--num-requests {n} is above the limit of {MAX_GEN_ROWS} requests"
            )));
        }
        if let Some(d) = self.duration_ms.filter(|&d| d as f64 > MAX_TIME_MS) {
            return Err(Error::Usage(format!(
                "--duration-ms {d} is above the limit of 2^53 ms"
            )));
        }
        Ok((
            self.duration_ms.map_or(f64::INFINITY, |d| d as f64),
            self.num_requests.unwrap_or(u64::MAX),
        ))
    }
}

impl Bound {
    /// Refuses a run whose rate (`rate_per_s`, the highest the mode reaches,
    /// named by `option`) over --duration-ms would give more than
    /// `limits::MAX_GEN_ROWS` requests when --num-requests does not stop it
    /// first: such a run would not end.
    pub fn check_rate(&self, rate_per_s: f64, option: &str) -> Result<()> {
        use crate::limits::MAX_GEN_ROWS;
        let (duration, n_max) = self.limits()?;
        let rows = rate_per_s * duration / 1000.0;
        if n_max > MAX_GEN_ROWS && (rows.is_nan() || rows > MAX_GEN_ROWS as f64) {
            return Err(Error::Usage(format!(
                "{option} {rate_per_s:e} over --duration-ms {duration} gives {rows:e} requests, \
                 above the limit of {MAX_GEN_ROWS}; lower the rate, shorten the run or give --num-requests"
            )));
        }
        Ok(())
    }
}

/// The time (ms) of the next arrival of an open-ended generator, refused
/// when the run still needs requests (`more`) but the time has run past
/// `limits::MAX_TIME_MS` (a rate so low its timestamps would saturate, or
/// a ramp whose rate underflows to 0 and ends the run early without a word).
pub fn check_next_time(t_ms: f64, more: bool, option: &str) -> Result<()> {
    if more && (t_ms.is_nan() || t_ms > crate::limits::MAX_TIME_MS) {
        return Err(Error::Usage(format!(
            "the next arrival falls at {t_ms:e} ms, beyond the limit of 2^53 ms: {option} is too low \
             for the requests asked for"
        )));
    }
    Ok(())
}

/// Fresh hash ids, numbered in first-use order.
#[derive(Debug, Default, Clone)]
pub struct Ids {
    next: u64,
}

impl Ids {
    /// Appends `n` new ids to `out`.
    pub fn push_fresh(&mut self, n: u64, out: &mut Vec<u64>) {
        out.extend(self.next..self.next + n);
        self.next += n;
    }
}

/// Blocks covering `tokens` at block size `b`.
pub fn blocks(tokens: u64, b: u64) -> u64 {
    tokens.div_ceil(b)
}

/// Opens the sink: the output, the format and, with --prompt-file, the
/// matcher (tolerance from `initial_tolerance`).
pub fn open_sink(tool: &str, common: &Common, initial_tolerance: f64) -> Result<Sink> {
    let matcher = match &common.prompt_file {
        None => None,
        Some(path) => {
            let spec = common.tokenizer.as_deref().ok_or_else(|| {
                Error::Usage(
                    "--prompt-file needs --tokenizer (a tokenizer.json, a folder or a model id) \
                     to count prompt tokens"
                        .into(),
                )
            })?;
            let tok = crate::tokenizer::resolve(spec)?;
            let cache = common.cache_dir.clone().or_else(prompts::default_cache_dir);
            let started = std::time::Instant::now();
            let (coll, cached) = prompts::Collection::load(path, &tok.tokenizer, cache.as_deref())?;
            eprintln!(
                "{tool}: {} prompts from {} ({}, {:.1} s, tokenizer {})",
                coll.len(),
                path.display(),
                if cached {
                    "lengths cached"
                } else {
                    "tokenized"
                },
                started.elapsed().as_secs_f64(),
                tok.source
            );
            Some(prompts::Matcher::new(coll, initial_tolerance, common.seed))
        }
    };
    let out = Output::open(common.output.as_deref(), common.line_buffered)?;
    Ok(Sink::new(out, common.format, matcher))
}

/// Runs `mc-gen`: the mode given, with the common options.
pub fn run(args: &GenArgs) -> Result<()> {
    let Some(mode) = &args.mode else {
        return Err(Error::usage(
            "a mode is required: constant, synthetic, stat, prefix, sessions, agent, \
             from-trace, prompts or calibrate",
        ));
    };
    run_mode(TOOL, &args.common, mode)
}

/// Every file a mode reads: the prompt file, the agent config, the trace of
/// `from-trace` (stdin when absent), Grafana exports, and pattern specs that
/// name files.
fn input_files<'a>(common: &'a Common, mode: &'a Mode) -> Vec<&'a std::path::Path> {
    use std::path::Path;
    let mut v: Vec<&Path> = common.prompt_file.iter().map(|p| p.as_path()).collect();
    match mode {
        Mode::Synthetic(a) => v.extend(
            std::iter::once(&a.traffic_pattern)
                .chain(&a.prompt_len_pattern)
                .chain(&a.completion_len_pattern)
                .map(Path::new),
        ),
        Mode::Stat(a) => v.extend(
            [&a.traffic_file, &a.prompt_len_file]
                .into_iter()
                .chain(&a.completion_len_file)
                .map(|p| p.as_path()),
        ),
        Mode::Agent(a) => v.extend(a.config.as_deref()),
        Mode::FromTrace(a) => v.push(a.trace.as_deref().unwrap_or(Path::new("-"))),
        _ => {}
    }
    v
}

/// Runs one mode.
fn run_mode(tool: &str, common: &Common, mode: &Mode) -> Result<()> {
    if common.block_size == 0 {
        return Err(Error::Usage("--block-size must be at least 1".into()));
    }
    // Before anything is read or created: no output may be one of the inputs.
    let inputs = input_files(common, mode);
    crate::jsonl::refuse_input_as_output(common.output.as_deref(), &inputs)?;
    crate::jsonl::refuse_input_as_output(common.plot.as_deref(), &inputs)?;
    if let Mode::Prompts(a) = mode {
        return collection::run(tool, common, a);
    }
    let tolerance = if matches!(mode, Mode::FromTrace(_)) {
        0.1
    } else {
        0.5
    };
    let mut sink = open_sink(tool, common, tolerance)?;
    if common.plot.is_some() {
        if common.format != Format::Mooncake {
            return Err(Error::usage(
                "--plot draws Mooncake rows: leave --format at mooncake",
            ));
        }
        sink.plot = Some(crate::plot::trace::Collector::new(common.block_size, None));
    }
    let result = match mode {
        Mode::Constant(a) => rate::constant(common, a, &mut sink),
        Mode::Synthetic(a) => rate::synthetic(common, a, &mut sink),
        Mode::Stat(a) => rate::stat(common, a, &mut sink),
        Mode::Prefix(a) => prefix::run(common, a, &mut sink),
        Mode::Sessions(a) => sessions::run(common, a, &mut sink),
        Mode::Agent(a) => agent::prepare(common, a).and_then(|(c, plan)| match plan.graph {
            Some(shape) => agent_graph::run(common, &c, shape, &plan, &mut sink),
            None => agent::run(common, &c, &mut sink),
        }),
        Mode::FromTrace(a) => from_trace::run(tool, common, a, &mut sink),
        Mode::Calibrate(a) => calibrate::run(common, a, &mut sink),
        Mode::Prompts(_) => Ok(()),
    };
    // What was generated is written even when a later step fails.
    let finished = sink.finish();
    result?;
    let c = finished?;
    if let (Some(path), Some(plot)) = (&common.plot, &sink.plot) {
        if !plot.data().t_ms.is_empty() {
            use crate::plot::trace::{figure, BINS, MAX_SESSIONS, WINDOW_MS};
            let svg = figure(plot.data(), WINDOW_MS, BINS, MAX_SESSIONS).map_err(|e| match e {
                // mc-gen has no --window-ms: say what to run instead.
                Error::Usage(_) => Error::Usage(format!(
                    "--plot: the rows span more than {} windows of {WINDOW_MS} ms (the rows \
                     were written); draw them with `mc-plot --window-ms` and a wider window",
                    crate::limits::MAX_WINDOWS
                )),
                e => e,
            })?;
            std::fs::write(path, svg).map_err(|source| Error::Output {
                path: path.clone(),
                source,
            })?;
        }
    }
    eprintln!(
        "{tool}: {} requests over {:.1} s, {} input and {} output tokens{}",
        c.requests,
        c.last_ms as f64 / 1000.0,
        c.input_tokens,
        c.output_tokens,
        sink.matcher_summary()
    );
    Ok(())
}
