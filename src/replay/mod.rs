//! `mc-replay`: sends a trace's requests to an OpenAI-compatible server on
//! the trace's schedule and measures what the server did.
//!
//! The pieces: [`options`] is the command line; [`trace`] loads and checks
//! every row before the run; [`request`] (with [`prompt`] and [`body`])
//! builds each request; [`schedule`] decides when it is sent and drives a
//! [`target::Target`]: [`http`] sends to a server with [`client`], which
//! reads the stream ([`sse`]); [`recorder`] writes each result and feeds
//! [`metrics`]; [`report`] turns them into the summary. Against a real
//! server, [`scrape`] reads its Prometheus metrics around the run and
//! [`fidelity`] compares what it saw with what the trace describes.
//! [`sweep`] runs all of that once per value of a
//! `--rate`/`--concurrency`/`--speedup` list.

pub mod body;
pub mod client;
pub mod engine_target;
pub mod error;
pub mod fidelity;
pub mod http;
pub mod inflight;
pub mod metrics;
pub mod options;
pub mod outcome;
pub mod progress;
pub mod prompt;
pub mod recorder;
pub mod report;
pub mod request;
pub mod schedule;
pub mod scrape;
pub mod sse;
pub mod sweep;
pub mod target;
pub mod trace;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::error::{Error, Result};
use crate::filter::{report_skipped, IoArgs};
use crate::jsonl::{ErrorPolicy, SendOutput};
use body::{BodyOptions, Endpoint};
use client::Clock;
use error::{ModelsError, ReplayError};
pub use options::ReplayArgs;
use prompt::{Synth, Vocab};
use recorder::{Recorder, RecorderOptions};
use request::{RequestBuilder, RunId};
use schedule::{Arrivals, Limits, Scheduler};
use target::Target;
use trace::{Content, Trace};

/// How session rows relate to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Turns {
    /// Each row is the whole prompt (Mooncake's meaning).
    Cumulative,
    /// Each row is appended to the conversation so far, with the server's
    /// live answers (AIPerf's reading).
    Delta,
}

/// Gaps between arrivals under `--rate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ArrivalKind {
    Poisson,
    Constant,
}

/// The whole tool: signals, the run, and the run's verdict (every request
/// failing, or a server that went away, is a failed run).
pub fn main(args: &ReplayArgs) -> Result<()> {
    let sweep = sweep::plan(args)?;
    let stop = Arc::new(AtomicBool::new(false));
    install_signals(stop.clone())?;
    if let Some(plan) = sweep {
        return sweep::run(args, &plan, stop);
    }
    let args = &args.at(None);
    let summary = if args.engine || args.url.is_none() {
        engine_target::run(args, stop)?
    } else {
        run(args, stop)?
    };
    verdict(&summary)
}

/// The exit policy: a run in which the server stopped answering, or in
/// which every request failed, is a failure.
pub fn verdict(summary: &report::Summary) -> Result<()> {
    let r = &summary.requests;
    if let Some(gone) = &summary.stopped_early {
        return Err(ReplayError::ServerGone {
            failures: gone.consecutive_failures,
            sent: r.sent + r.warmup,
            last: gone.last_error.clone(),
        }
        .into());
    }
    if r.sent > 0 && r.ok == 0 {
        return Err(ReplayError::AllFailed { sent: r.sent }.into());
    }
    Ok(())
}

/// A loaded and checked trace and its arrival schedule: what any target
/// replays.
pub struct Loaded {
    pub trace: Arc<Trace>,
    pub arrivals: Arrivals,
    /// `--block-size`, or the size the rows decide under `auto`.
    pub block_size: u64,
}

impl ReplayArgs {
    /// These options with the block size the trace decided.
    pub fn with_block_size(&self, block_size: u64) -> ReplayArgs {
        ReplayArgs {
            block_size,
            ..self.clone()
        }
    }
}

/// `--block-size`, or under `auto` the one power of two every row that
/// builds its prompt from hash ids allows.
fn decide_block_size(trace: &Trace, size: crate::blocks::BlockSize) -> Result<u64> {
    use crate::blocks::{BlockSize, FeasibleSizes, DEFAULT_BLOCK_SIZE};
    let BlockSize::Fixed(b) = size else {
        let mut sizes = FeasibleSizes::default();
        for t in &trace.turns {
            if let (trace::Content::Synth, Some(len)) = (&t.content, t.input_length) {
                sizes.add(t.hash_ids.len() as u64, len);
            }
        }
        return match sizes.decide() {
            Ok(Some(b)) => {
                eprintln!(
                    "mc-replay: block size {b} (detected from {} rows with hash_ids)",
                    sizes.rows
                );
                Ok(b)
            }
            Ok(None) => Ok(DEFAULT_BLOCK_SIZE),
            Err(e) => Err(Error::Input(format!("--block-size auto: {e}"))),
        };
    };
    Ok(b)
}

/// Reads the whole trace and checks it against the options (before any
/// request is sent, on any target).
pub fn load_checked(args: &ReplayArgs) -> Result<Loaded> {
    let (trace, block_size) = load_trace(args)?;
    let args = &args.with_block_size(block_size);
    let arrivals = arrivals(&trace, args)?;
    check_rows(&trace, args)?;
    Ok(Loaded {
        trace,
        arrivals,
        block_size,
    })
}

/// Reads the whole trace and decides the block size (a sweep does this
/// once for all its runs).
pub fn load_trace(args: &ReplayArgs) -> Result<(Arc<Trace>, u64)> {
    if args.fixed_schedule {
        eprintln!("mc-replay: note: --fixed-schedule: timestamps are followed by default");
    }
    let trace = load(&args.io)?;
    let block_size = decide_block_size(&trace, args.block)?;
    Ok((Arc::new(trace), block_size))
}

/// Replays a loaded trace on the target the options choose: the engine
/// model without --url (or with --engine), else the server.
pub fn run_on_target(
    args: &ReplayArgs,
    loaded: &Loaded,
    stop: Arc<AtomicBool>,
) -> Result<report::Summary> {
    if args.engine || args.url.is_none() {
        engine_target::run_loaded(args, loaded, stop)
    } else {
        run_loaded(args, loaded, stop)
    }
}

/// Runs the replay on a real server. Returns the summary; [`verdict`]
/// decides the exit code.
pub fn run(args: &ReplayArgs, stop: Arc<AtomicBool>) -> Result<report::Summary> {
    let loaded = load_checked(args)?;
    run_loaded(args, &loaded, stop)
}

/// [`run`] on a trace already loaded and checked.
pub fn run_loaded(
    args: &ReplayArgs,
    loaded: &Loaded,
    stop: Arc<AtomicBool>,
) -> Result<report::Summary> {
    let args = &args.with_block_size(loaded.block_size);
    let synth = synthesizer(&loaded.trace, args)?;
    let agent = agent(Duration::from_secs_f64(args.timeout));
    let Some(url) = args.url.as_deref() else {
        return Err(Error::usage("a real server needs --url"));
    };
    let base = base_url(url);
    let mut headers = args.headers.clone();
    if let Some(key) = args.api_key.as_deref().filter(|k| !k.is_empty()) {
        headers.push(("authorization".into(), format!("Bearer {key}")));
    }
    let model = match &args.model {
        Some(m) => m.clone(),
        None => discover_model(&agent, &base, &headers)?,
    };
    let run_id = RunId::from_clock();
    // Before the run's clock starts: the first scrape costs the schedule nothing.
    let observer = if args.no_server_metrics {
        None
    } else {
        let url = args
            .metrics_url
            .clone()
            .unwrap_or_else(|| scrape::metrics_url(&base));
        let scraper = scrape::Scraper::new(url, headers.clone(), args.metrics_out.clone())?;
        Some(scrape::Observer::start(
            scraper,
            Duration::from_secs_f64(args.metrics_interval),
        ))
    };
    let builder = RequestBuilder {
        synth,
        body: BodyOptions {
            endpoint: args.endpoint,
            model: model.clone(),
            exact_output: !args.no_exact_output,
            extra_body: args.extra_body.clone(),
        },
        headers,
        run_id,
    };
    let mut target = http::HttpTarget::new(
        loaded.trace.clone(),
        builder,
        format!("{base}{}", args.endpoint.path()),
        agent,
        Clock {
            start: Instant::now(),
        },
        stop.clone(),
    );
    drive_observed(
        args,
        loaded,
        &mut target,
        Some(model),
        run_id,
        &stop,
        Some(observer),
    )
}

/// Replays `loaded` on `target` (its clock started just before): the
/// schedule, the result lines, the summary on stderr and in the files
/// asked for. Any target: a real server, or the engine model.
pub fn drive<T: Target>(
    args: &ReplayArgs,
    loaded: &Loaded,
    target: &mut T,
    model: Option<String>,
    run_id: RunId,
    stop: &AtomicBool,
) -> Result<report::Summary> {
    drive_observed(args, loaded, target, model, run_id, stop, None)
}

/// [`drive`], and for a real server the fidelity section: `observer` is
/// `Some(None)` under `--no-server-metrics`, `None` for the engine model.
fn drive_observed<T: Target>(
    args: &ReplayArgs,
    loaded: &Loaded,
    target: &mut T,
    model: Option<String>,
    run_id: RunId,
    stop: &AtomicBool,
    observer: Option<Option<scrape::Observer>>,
) -> Result<report::Summary> {
    let run = run_info(args, &loaded.trace, loaded.arrivals, target.name(), model);
    let out = SendOutput::open_send(args.io.output.as_deref(), args.io.line_buffered)?;
    let rec = Recorder::new(
        out,
        RecorderOptions {
            slo: args.slo,
            run_id,
            target: target.name(),
            block_size: args.block_size,
            max_consecutive_failures: args.max_consecutive_failures,
        },
    );
    let progress = progress::Progress::for_stderr(Duration::from_secs_f64(args.status_every));
    let (mut end, mut rec) =
        recorder::record_on_thread(&loaded.trace, rec, progress, stop, |sink| {
            Scheduler::new(
                &loaded.trace,
                loaded.arrivals,
                limits(args),
                args.turns == Turns::Delta,
                stop,
            )
            .run(target, sink)
        });
    end.stopped_early = rec.stopped_early.take();
    let mut summary =
        report::summarize(&rec.tally, &end, trace_rate(loaded.arrivals), args.slo, run);
    summary.engine = target.report();
    if let Some(observer) = observer {
        let observed = observer.map(scrape::Observer::finish);
        let inputs = fidelity::Inputs {
            trace: &loaded.trace,
            trace_block: loaded.block_size,
            delta_turns: args.turns == Turns::Delta,
            sent: &rec.sent,
            server_block_size: args.server_block_size,
            kv_tokens: args.engine_model.kv_tokens,
            threshold_pp: args.fidelity_threshold,
            intended_rate: summary.trace_rate,
            achieved_rate: summary.send_rate,
            lag_p99_ms: summary.metrics.lag.as_ref().map(|l| l.p99),
        };
        summary.fidelity = Some(fidelity::assess(&inputs, observed.as_ref()));
    }
    let flushed = rec.finish();
    eprint!("{}", summary.table());
    let json = serde_json::to_vec_pretty(&summary).map_err(|e| Error::Other(e.into()))?;
    if let Some(p) = &args.summary_json {
        write_file(p, &json)?;
    }
    // Results written to a file get their summary beside them, so mc-report
    // finds the run's description without being told; not when --summary
    // already wrote it where mc-report looks (a sweep's `summary.json`).
    if let Some(out) = args.io.output.as_deref().filter(|o| *o != Path::new("-")) {
        let side = report::sidecar_path(out);
        let found_anyway = [side.clone(), out.with_file_name("summary.json")]
            .iter()
            .any(|p| args.summary_json.as_deref() == Some(p.as_path()));
        if !found_anyway {
            write_file(&side, &json)?;
        }
    }
    if let Some(p) = &args.summary_csv {
        write_file(p, summary.csv().as_bytes())?;
    }
    match flushed {
        // A closed stdout stopped the run; the summary above still stands.
        Err(e) if e.is_broken_pipe() => Ok(summary),
        Err(e) => Err(e),
        Ok(()) => Ok(summary),
    }
}

/// The schedule's limits, in µs (the options are bounded, so these fit).
fn limits(args: &ReplayArgs) -> Limits {
    let us = |s: f64| (s * 1e6).round() as u64;
    Limits {
        concurrency: args.concurrency.map(|c| c as usize),
        max_requests: args.max_requests,
        duration_us: args.duration.map(us),
        warmup: args.warmup,
        drain_us: us(args.drain_timeout),
    }
}

fn write_file(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|source| Error::Output {
        path: path.to_path_buf(),
        source,
    })
}

fn load(io: &IoArgs) -> Result<Trace> {
    let mut reader = io.reader()?;
    let mut policy = ErrorPolicy::new(io.on_error);
    let trace = trace::load(&mut reader, &mut policy)?;
    report_skipped("mc-replay", &policy);
    if trace.turns.is_empty() {
        return Err(Error::Input(
            "no records in the input: nothing to replay".into(),
        ));
    }
    Ok(trace)
}

/// Picks the schedule from the trace and the options.
fn arrivals(trace: &Trace, opts: &ReplayArgs) -> Result<Arrivals> {
    if let Some(rate) = opts.rate {
        if trace.turns.iter().any(|t| t.timestamp_ms.is_some()) {
            eprintln!("mc-replay: note: --rate {rate}: the trace's timestamps are ignored");
        }
        return Ok(Arrivals::Rate {
            rate,
            poisson: opts.arrival == ArrivalKind::Poisson,
            seed: opts.seed,
        });
    }
    check_span(trace, opts.speedup)?;
    let untimed = trace
        .starts()
        .map(|i| &trace.turns[i])
        .find(|t| t.timestamp_ms.is_none());
    let any_timed = trace
        .starts()
        .any(|i| trace.turns[i].timestamp_ms.is_some());
    match (untimed, any_timed) {
        (None, _) => Ok(Arrivals::Timed {
            speedup: opts.speedup,
        }),
        (Some(t), true) => Err(Error::Data {
            line: t.line,
            err: crate::error::RecordError::field(
                "timestamp",
                "missing on a row that starts a session, while other rows have one \
                 (give every first turn a timestamp, or use --rate / --concurrency)",
            ),
        }),
        (Some(_), false) if opts.concurrency.is_some() => Ok(Arrivals::Closed),
        (Some(_), false) => Err(Error::usage(
            "the trace has no timestamps: give --rate R (open loop) or --concurrency C (closed loop)",
        )),
    }
}

/// The schedule must end within [`trace::MAX_SPAN_MS`]: the latest
/// timestamp after the earliest, and every delay, divided by --speedup.
fn check_span(trace: &Trace, speedup: f64) -> Result<()> {
    let limit = |line: u64, field: &str, what: String| Error::Data {
        line,
        err: crate::error::RecordError::field(
            field,
            format!(
                "{what} is more than the limit of {:e} ms (about 3 years); \
                 is the field in ms, and --speedup right?",
                trace::MAX_SPAN_MS
            ),
        ),
    };
    if let Some(t0) = schedule::first_timestamp(trace) {
        for t in &trace.turns {
            let Some(ts) = t.timestamp_ms else { continue };
            let span = (ts - t0) / speedup;
            if span > trace::MAX_SPAN_MS {
                return Err(limit(
                    t.line,
                    "timestamp",
                    format!("{span:.0} ms after the first row (after --speedup)"),
                ));
            }
        }
    }
    for t in &trace.turns {
        if let Some(d) = t.delay_ms.map(|d| d / speedup) {
            if d > trace::MAX_SPAN_MS {
                return Err(limit(t.line, "delay", format!("{d:.0} ms after --speedup")));
            }
        }
    }
    Ok(())
}

fn check_rows(trace: &Trace, opts: &ReplayArgs) -> Result<()> {
    if let Some(t) = trace
        .turns
        .iter()
        .find(|t| t.intended_input(opts.block_size).unwrap_or(0) > trace::MAX_INPUT_TOKENS)
    {
        return Err(Error::Data {
            line: t.line,
            err: crate::error::RecordError::field(
                "hash_ids",
                format!(
                    "{} ids of {} tokens is more than the limit of {} prompt tokens",
                    t.hash_ids.len(),
                    opts.block_size,
                    trace::MAX_INPUT_TOKENS
                ),
            ),
        });
    }
    if opts.endpoint == Endpoint::Completions {
        if opts.turns == Turns::Delta {
            return Err(Error::usage(
                "--turns delta needs --endpoint chat (it sends the conversation as messages)",
            ));
        }
        if let Some(t) = trace.turns.iter().find(|t| body::needs_chat(t)) {
            return Err(Error::Data {
                line: t.line,
                err: crate::error::RecordError::field(
                    "messages",
                    "rows with messages need --endpoint chat",
                ),
            });
        }
    }
    let c = trace::check_blocks(trace, opts.block_size);
    if let Some(&line) = c.broken.first_lines.first() {
        // A wrong block size would send other prompts than the trace means:
        // a bad line, before anything is sent (the rule is in blocks.rs).
        let t = trace.turns.iter().find(|t| t.line == line);
        return Err(Error::Data {
            line,
            err: crate::error::RecordError::field(
                "input_length",
                format!(
                    "{} tokens do not fill {} hash ids at block size {} ({} such rows; check --block-size)",
                    t.and_then(|t| t.input_length).unwrap_or(0),
                    t.map_or(0, |t| t.hash_ids.len()),
                    opts.block_size,
                    c.broken.count
                ),
            ),
        });
    }
    if c.tail.count > 0 {
        eprintln!(
            "mc-replay: note: {} rows have more tokens than their hash ids cover at \
             --block-size {} ({}); the rest is text unique to the row",
            c.tail.count,
            opts.block_size,
            c.tail.first_lines_text()
        );
    }
    Ok(())
}

/// The prompt builder; with a tokenizer, its words are checked to be one
/// token each and sample prompts are re-encoded to the intended length.
fn synthesizer(trace: &Trace, opts: &ReplayArgs) -> Result<Synth> {
    let Some(spec) = &opts.tokenizer else {
        return Ok(Synth::new(Vocab::builtin(), opts.seed, opts.block_size));
    };
    eprintln!(
        "mc-replay: tokenizer {spec}: loading it and checking that prompts built for it \
         have their exact lengths (this may take a while)"
    );
    let resolved = crate::tokenizer::resolve(spec).map_err(|e| ReplayError::Tokenizer {
        spec: spec.clone(),
        source: e.into(),
    })?;
    let vocab = Vocab::for_tokenizer(&resolved.tokenizer)?;
    let synth = Synth::new(vocab, opts.seed, opts.block_size);
    let check = prompt_check(trace, &synth, &resolved.tokenizer)?;
    eprintln!(
        "mc-replay: tokenizer {}: {} prompts re-encoded, largest difference {} tokens ({:.3}%)",
        resolved.source, check.prompts, check.max_abs, check.max_pct
    );
    if check.max_pct > 1.0 {
        return Err(ReplayError::TokenizerMismatch {
            pct: check.max_pct,
            line: check.worst_line,
        }
        .into());
    }
    Ok(synth)
}

struct PromptCheck {
    prompts: u64,
    max_abs: u64,
    max_pct: f64,
    worst_line: u64,
}

/// Re-encodes the built prompts of up to 64 rows (and at most about 2 M
/// tokens), including the longest row.
fn prompt_check(trace: &Trace, synth: &Synth, tok: &tokenizers::Tokenizer) -> Result<PromptCheck> {
    let mut rows: Vec<&trace::Turn> = trace
        .turns
        .iter()
        .filter(|t| matches!(t.content, Content::Synth))
        .take(64)
        .collect();
    if let Some(longest) = trace
        .turns
        .iter()
        .filter(|t| matches!(t.content, Content::Synth))
        .max_by_key(|t| t.input_length)
    {
        rows.push(longest);
    }
    let mut c = PromptCheck {
        prompts: 0,
        max_abs: 0,
        max_pct: 0.0,
        worst_line: 0,
    };
    let mut budget: u64 = 2_000_000;
    let mut text = String::new();
    for t in rows {
        let want = t.intended_input(synth.block_size()).unwrap_or(0);
        if want == 0 || want > budget {
            continue;
        }
        budget -= want;
        text.clear();
        synth.prompt(t.line, want, &t.hash_ids, &mut text);
        let got = tok
            .encode(text.as_str(), false)
            .map_err(|source| ReplayError::Tokenize {
                line: t.line,
                source,
            })?
            .get_ids()
            .len() as u64;
        let abs = got.abs_diff(want);
        let pct = abs as f64 / want as f64 * 100.0;
        c.prompts += 1;
        if abs > c.max_abs || c.prompts == 1 {
            c.max_abs = c.max_abs.max(abs);
        }
        if pct > c.max_pct {
            c.max_pct = pct;
            c.worst_line = t.line;
        }
    }
    Ok(c)
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        // One idle connection per worker, so every request reuses one.
        .max_idle_connections(100_000)
        .max_idle_connections_per_host(100_000)
        .user_agent(concat!("mc-replay/", env!("CARGO_PKG_VERSION")))
        .build()
        .new_agent()
}

/// `--url` without a trailing `/`, ending in `/v1`.
pub fn base_url(url: &str) -> String {
    let url = url.trim_end_matches('/');
    let url = url
        .strip_suffix("/chat/completions")
        .or_else(|| url.strip_suffix("/completions"))
        .unwrap_or(url);
    if url.ends_with("/v1") {
        url.to_string()
    } else {
        format!("{url}/v1")
    }
}

/// The first model the server lists.
fn discover_model(agent: &ureq::Agent, base: &str, headers: &[(String, String)]) -> Result<String> {
    let url = format!("{base}/models");
    let mut req = agent.get(&url);
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let found = (|| -> Result<String, ModelsError> {
        let mut resp = req.call()?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(ModelsError::Status(format!("HTTP {status}")));
        }
        let v: Value = serde_json::from_str(&resp.body_mut().read_to_string()?)?;
        v.get("data")
            .and_then(|d| d.as_array())
            .and_then(|d| d.first())
            .and_then(|m| m.get("id"))
            .and_then(|id| id.as_str())
            .map(str::to_string)
            .ok_or(ModelsError::NoModel)
    })();
    found.map_err(|source| ReplayError::ListModels { url, source }.into())
}

/// How the summary finds the rate the trace asks for.
fn trace_rate(arrivals: Arrivals) -> report::TraceRate {
    match arrivals {
        Arrivals::Rate { rate, .. } => report::TraceRate::Fixed(rate),
        Arrivals::Closed => report::TraceRate::None,
        Arrivals::Timed { .. } => report::TraceRate::Timed,
    }
}

/// The summary's description of the run. Called just before the first
/// request, so `start_unix_ms` is the run's zero (within microseconds).
pub fn run_info(
    args: &ReplayArgs,
    trace: &Trace,
    arrivals: Arrivals,
    target: &str,
    model: Option<String>,
) -> report::RunInfo {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let arrival = match arrivals {
        Arrivals::Timed { .. } => "timestamps",
        Arrivals::Rate { poisson: true, .. } => "poisson",
        Arrivals::Rate { poisson: false, .. } => "constant",
        Arrivals::Closed => "closed",
    };
    report::RunInfo {
        tool: "mc-replay".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        target: target.into(),
        url: args.url.clone().filter(|_| target == "http"),
        endpoint: match args.endpoint {
            Endpoint::Chat => "chat",
            Endpoint::Completions => "completions",
        }
        .into(),
        model,
        input: args
            .io
            .input
            .as_ref()
            .map_or("-".into(), |p| p.display().to_string()),
        rows: trace.turns.len() as u64,
        speedup: args.speedup,
        arrival: arrival.into(),
        rate: args.rate,
        concurrency: args.concurrency,
        turns: match args.turns {
            Turns::Cumulative => "cumulative",
            Turns::Delta => "delta",
        }
        .into(),
        seed: args.seed,
        block_size: args.block_size,
        start_unix_ms: now.as_micros() as f64 / 1000.0,
        start_time: utc_iso8601(now.as_secs()),
        host: host_name(),
    }
}

/// `2026-11-23T12:41:28Z` from seconds since the Unix epoch (proleptic
/// Gregorian calendar; Howard Hinnant's days-to-civil algorithm).
pub fn utc_iso8601(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The machine's name (Linux: the kernel's; elsewhere `$HOSTNAME`).
fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

/// Installs Ctrl-C / SIGTERM handling: the first signal stops sending, the
/// second ends the process at once.
pub fn install_signals(stop: Arc<AtomicBool>) -> Result<()> {
    ctrlc::set_handler(move || {
        if stop.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!("\nmc-replay: stopping: no new requests; waiting for those in flight");
    })
    .map_err(|e| ReplayError::Signals(e).into())
}

#[cfg(test)]
mod tests {
    use super::{base_url, utc_iso8601};

    #[test]
    fn iso8601_dates() {
        // Checked with `date -u -d @SECS +%FT%TZ`.
        assert_eq!(utc_iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_iso8601(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_iso8601(1_795_437_688), "2026-11-23T12:41:28Z");
    }

    #[test]
    fn base_url_forms() {
        for u in [
            "http://h:1",
            "http://h:1/",
            "http://h:1/v1",
            "http://h:1/v1/",
            "http://h:1/v1/chat/completions",
            "http://h:1/v1/completions",
        ] {
            assert_eq!(base_url(u), "http://h:1/v1", "{u}");
        }
    }
}
