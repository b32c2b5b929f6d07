//! `mc-replay`: sends a trace's requests to an OpenAI-compatible server on
//! the trace's schedule and measures what the server did.
//!
//! The pieces: [`trace`] loads and checks every row before the run;
//! [`prompt`] and [`body`] build each request; [`schedule`] decides when it
//! is sent; [`worker`] sends it with [`client`], which reads the stream
//! ([`sse`]); [`metrics`] and [`report`] turn the results into a summary.

pub mod body;
pub mod client;
pub mod metrics;
pub mod prompt;
pub mod report;
pub mod schedule;
pub mod sse;
pub mod trace;
pub mod worker;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Context as _};
use serde_json::{Map, Value};

use crate::cli::{report_skipped, usage, IoArgs};
use crate::error::{Error, Result};
use crate::jsonl::{ErrorPolicy, SendOutput};
use body::{BodyOptions, Endpoint};
use client::Clock;
use metrics::Slo;
use prompt::{Synth, Vocab};
use schedule::{Arrivals, Limits, Scheduler};
use trace::{Content, Trace};
use worker::{Context, Sink};

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

#[derive(Debug, Clone)]
pub struct Options {
    pub url: String,
    pub endpoint: Endpoint,
    pub model: Option<String>,
    pub api_key: Option<String>,
    pub headers: Vec<(String, String)>,
    pub extra_body: Option<Map<String, Value>>,
    pub exact_output: bool,
    pub turns: Turns,
    pub speedup: f64,
    pub rate: Option<f64>,
    pub arrival: ArrivalKind,
    pub concurrency: Option<usize>,
    pub max_requests: Option<u64>,
    pub duration: Option<Duration>,
    pub warmup: u64,
    pub drain_timeout: Duration,
    pub timeout: Duration,
    pub seed: u64,
    pub block_size: u64,
    pub tokenizer: Option<String>,
    pub slo: Option<Slo>,
    pub summary_json: Option<PathBuf>,
    pub summary_csv: Option<PathBuf>,
}

/// Runs the replay. Returns the summary; the caller decides the exit code
/// (every request failing is a failed run).
pub fn run(io: &IoArgs, opts: &Options, stop: Arc<AtomicBool>) -> Result<report::Summary> {
    let trace = load(io)?;
    let arrivals = arrivals(&trace, opts)?;
    check_rows(&trace, opts)?;
    let synth = synthesizer(&trace, opts)?;
    let agent = agent(opts);
    let base = base_url(&opts.url);
    let mut headers = opts.headers.clone();
    if let Some(key) = &opts.api_key {
        headers.push(("authorization".into(), format!("Bearer {key}")));
    }
    let model = match &opts.model {
        Some(m) => m.clone(),
        None => discover_model(&agent, &base, &headers)?,
    };
    let out = SendOutput::open_send(io.output.as_deref(), true)?;
    let trace_rate = trace_rate(&trace, arrivals);
    let delta = opts.turns == Turns::Delta;
    let clock = Clock {
        start: Instant::now(),
    };
    let run_start_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_micros() as f64 / 1000.0);
    let ctx = Arc::new(Context::new(
        trace,
        synth,
        BodyOptions {
            endpoint: opts.endpoint,
            model,
            exact_output: opts.exact_output,
            extra_body: opts.extra_body.clone(),
        },
        format!("{base}{}", opts.endpoint.path()),
        headers,
        delta,
        agent,
        clock,
        Sink::new(out, opts.slo),
        stop,
    ));
    let limits = Limits {
        concurrency: opts.concurrency,
        max_requests: opts.max_requests,
        duration: opts.duration,
        warmup: opts.warmup,
        drain: opts.drain_timeout,
    };
    let progress = std::io::stderr()
        .is_terminal()
        .then(|| progress::start(ctx.clone()));
    let end = Scheduler::new(ctx.clone(), arrivals, limits, delta).run();
    if let Some(p) = progress {
        p.finish();
    }
    let mut sink = ctx.sink();
    let summary = report::summarize(&sink.tally, &end, trace_rate, opts.slo, run_start_unix_ms);
    let flushed = sink.flush();
    drop(sink);
    eprint!("{}", summary.table());
    if let Some(p) = &opts.summary_json {
        let json = serde_json::to_vec_pretty(&summary).map_err(|e| anyhow!(e))?;
        write_file(p, &json)?;
    }
    if let Some(p) = &opts.summary_csv {
        write_file(p, summary.csv().as_bytes())?;
    }
    match flushed {
        // A closed stdout stopped the run; the summary above still stands.
        Err(e) if e.is_broken_pipe() => Ok(summary),
        Err(e) => Err(e),
        Ok(()) => Ok(summary),
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
fn arrivals(trace: &Trace, opts: &Options) -> Result<Arrivals> {
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
        (Some(_), false) => Err(usage(
            "the trace has no timestamps: give --rate R (open loop) or --concurrency C (closed loop)",
        )),
    }
}

fn check_rows(trace: &Trace, opts: &Options) -> Result<()> {
    if opts.endpoint == Endpoint::Completions {
        if opts.turns == Turns::Delta {
            return Err(usage(
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
    if c.broken > 0 {
        eprintln!(
            "mc-replay: warning: {} rows have fewer tokens than their hash ids need at \
             --block-size {} (first lines: {}); is the block size right? Their prompts \
             keep input_length and use the first blocks",
            c.broken,
            opts.block_size,
            join(&c.first_lines)
        );
    } else if c.tail > 0 {
        eprintln!(
            "mc-replay: note: {} rows have more tokens than their hash ids cover at \
             --block-size {} (first lines: {}); the rest is text unique to the row",
            c.tail,
            opts.block_size,
            join(&c.first_lines)
        );
    }
    Ok(())
}

fn join(lines: &[u64]) -> String {
    lines
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The prompt builder; with a tokenizer, its words are checked to be one
/// token each and sample prompts are re-encoded to the intended length.
fn synthesizer(trace: &Trace, opts: &Options) -> Result<Synth> {
    let Some(spec) = &opts.tokenizer else {
        return Ok(Synth::new(Vocab::builtin(), opts.seed, opts.block_size));
    };
    let resolved = crate::tokenizer::resolve(spec)?;
    let vocab = Vocab::for_tokenizer(&resolved.tokenizer)?;
    let synth = Synth::new(vocab, opts.seed, opts.block_size);
    let check = prompt_check(trace, &synth, &resolved.tokenizer)?;
    eprintln!(
        "mc-replay: tokenizer {}: {} prompts re-encoded, largest difference {} tokens ({:.3}%)",
        resolved.source, check.prompts, check.max_abs, check.max_pct
    );
    if check.max_pct > 1.0 {
        return Err(Error::Other(anyhow!(
            "prompts built for this tokenizer are off by up to {:.2}% (line {}); \
             it cannot be used for exact prompt lengths",
            check.max_pct,
            check.worst_line
        )));
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
            .map_err(|e| anyhow!("tokenizer failed on line {}: {e}", t.line))?
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

fn agent(opts: &Options) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(opts.timeout))
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
    let found = (|| -> anyhow::Result<String> {
        let mut resp = req.call()?;
        let status = resp.status().as_u16();
        if status != 200 {
            anyhow::bail!("HTTP {status}");
        }
        let v: Value = serde_json::from_str(&resp.body_mut().read_to_string()?)?;
        v.get("data")
            .and_then(|d| d.as_array())
            .and_then(|d| d.first())
            .and_then(|m| m.get("id"))
            .and_then(|id| id.as_str())
            .map(str::to_string)
            .ok_or_else(|| anyhow!("no model listed"))
    })();
    found
        .with_context(|| format!("cannot list models at {url} (pass --model NAME)"))
        .map_err(Error::Other)
}

/// The arrival rate the trace asks for: first turns over their time span.
fn trace_rate(trace: &Trace, arrivals: Arrivals) -> Option<f64> {
    match arrivals {
        Arrivals::Rate { rate, .. } => Some(rate),
        Arrivals::Closed => None,
        Arrivals::Timed { speedup } => {
            let ts: Vec<f64> = trace
                .starts()
                .filter_map(|i| trace.turns[i].timestamp_ms)
                .collect();
            let lo = ts.iter().copied().min_by(f64::total_cmp)?;
            let hi = ts.iter().copied().max_by(f64::total_cmp)?;
            let span_s = (hi - lo) / speedup / 1000.0;
            (ts.len() > 1 && span_s > 0.0).then(|| (ts.len() - 1) as f64 / span_s)
        }
    }
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
    .map_err(|e| Error::Other(anyhow!("cannot install the signal handler: {e}")))
}

mod progress {
    //! The progress line on a terminal.
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::thread::JoinHandle;
    use std::time::Duration;

    use super::worker::Context;

    pub struct Progress {
        done: Arc<AtomicBool>,
        handle: JoinHandle<()>,
    }

    pub fn start(ctx: Arc<Context>) -> Progress {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let handle = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(250));
                let c = &ctx.counters;
                let sent = c.sent.load(Ordering::Relaxed);
                let fin = c.done.load(Ordering::Relaxed);
                let _ = write!(
                    std::io::stderr(),
                    "\r\x1b[Ksent {sent}  done {fin}  errors {}  in flight {}  lag {:.1} ms",
                    c.errors.load(Ordering::Relaxed),
                    sent.saturating_sub(fin),
                    c.last_lag_us.load(Ordering::Relaxed) as f64 / 1000.0
                );
            }
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        });
        Progress { done, handle }
    }

    impl Progress {
        pub fn finish(self) {
            self.done.store(true, Ordering::Relaxed);
            let _ = self.handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::base_url;

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
