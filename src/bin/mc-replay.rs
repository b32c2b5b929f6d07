use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use mctrace::cli::{self, IoArgs};
use mctrace::error::Error;
use mctrace::replay::body::Endpoint;
use mctrace::replay::metrics::Slo;
use mctrace::replay::{self, ArrivalKind, Options, Turns};

const TOOL: &str = "mc-replay";

/// Replay a Mooncake trace against an OpenAI-compatible server and measure it.
///
/// Reads the whole trace first (a bad line stops the run before any request
/// is sent), then sends each row on the trace's schedule: rows with
/// timestamps at start + (timestamp - first) / --speedup; the turns of a
/// session one after another (a later turn waits for the previous one to end,
/// plus its `delay`). Rows without timestamps need --rate or --concurrency.
///
/// Prompts: `messages` (and `tools`) are sent verbatim, `text_input` as one
/// user message; otherwise the prompt is built from input_length and
/// hash_ids so that equal ids give equal text (the server's prefix cache sees
/// the trace's sharing). Each request asks for exactly output_length tokens
/// (max_tokens, min_tokens, ignore_eos) and streams.
///
/// Writes one JSON result per request to stdout as it completes (failures
/// included), and a summary table to stderr. TTFT, TPOT, ITL and E2E are
/// measured from the moment the request is sent; schedule lag (send - due)
/// and scheduled latency (last token - due) show when the client itself fell
/// behind. Exit code 0 when the run completed, 1 when every request failed,
/// 2 on usage errors, 65 on a bad trace.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-replay --url http://127.0.0.1:8000 < trace.jsonl > results.jsonl
  mc-scale --speedup 2 < trace.jsonl | mc-replay --url http://gpu:8000 --summary s.json > r.jsonl
  mc-replay --url http://127.0.0.1:8000 --concurrency 16 --max-requests 500 -i untimed.jsonl
  jq -s 'map(.ttft_ms) | add / length' results.jsonl"
)]
struct Args {
    /// Server base URL (`http://host:port`, with or without `/v1`).
    #[arg(long, default_value = "http://127.0.0.1:8000", value_name = "URL")]
    url: String,

    /// Which API to call.
    #[arg(long, value_enum, default_value_t = Endpoint::Chat)]
    endpoint: Endpoint,

    /// Model name; default: the first model the server lists at /v1/models.
    #[arg(long, value_name = "NAME")]
    model: Option<String>,

    /// API key, sent as a bearer token; never printed or written.
    #[arg(
        long,
        env = "OPENAI_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    api_key: Option<String>,

    /// Extra request header, `Name: value` (repeatable).
    #[arg(long = "header", value_name = "K:V", value_parser = parse_header)]
    headers: Vec<(String, String)>,

    /// JSON object merged into every request body (a row's `extra` wins).
    #[arg(long, value_name = "JSON", value_parser = parse_object)]
    extra_body: Option<serde_json::Map<String, serde_json::Value>>,

    /// Do not ask for exact answer lengths (no min_tokens / ignore_eos).
    #[arg(long)]
    no_exact_output: bool,

    /// How session rows relate: each is the whole prompt (cumulative), or
    /// is appended to the conversation so far with the live answers (delta).
    #[arg(long, value_enum, default_value_t = Turns::Cumulative)]
    turns: Turns,

    /// Divide timestamps and delays by this.
    #[arg(long, default_value_t = 1.0, value_name = "X", value_parser = positive)]
    speedup: f64,

    /// Open loop at R requests/s (ignores timestamps).
    #[arg(long, value_name = "R", value_parser = positive)]
    rate: Option<f64>,

    /// Gaps between arrivals under --rate.
    #[arg(long, value_enum, default_value_t = ArrivalKind::Poisson)]
    arrival: ArrivalKind,

    /// At most C requests in flight; alone (no timestamps, no --rate) it is
    /// a closed loop. Waiting for a slot counts as schedule lag.
    #[arg(long, value_name = "C", value_parser = clap::value_parser!(u64).range(1..))]
    concurrency: Option<u64>,

    /// Send at most N measured requests.
    #[arg(long, value_name = "N")]
    max_requests: Option<u64>,

    /// Stop sending after S seconds.
    #[arg(long, value_name = "S", value_parser = positive)]
    duration: Option<f64>,

    /// The first N requests are sent but left out of the summary.
    #[arg(long, default_value_t = 0, value_name = "N")]
    warmup: u64,

    /// After Ctrl-C / SIGTERM, how long requests in flight may finish.
    #[arg(long, default_value_t = 30.0, value_name = "S", value_parser = non_negative)]
    drain_timeout: f64,

    /// Per-request timeout, in seconds.
    #[arg(long, default_value_t = 600.0, value_name = "S", value_parser = positive)]
    timeout: f64,

    /// Seed for prompt text and --rate arrivals.
    #[arg(long, default_value_t = 0, value_name = "N")]
    seed: u64,

    /// Tokens per hash id (must match the trace).
    #[arg(long, default_value_t = 512, value_name = "B",
          value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    block_size: u64,

    /// A tokenizer.json, a folder holding one, or a HuggingFace model id:
    /// prompts are then exactly input_length tokens of it (checked).
    #[arg(long, value_name = "TOKENIZER")]
    tokenizer: Option<String>,

    /// Goodput bounds, e.g. `ttft=500,tpot=50,e2e=10000` (ms).
    #[arg(long, value_name = "BOUNDS", value_parser = Slo::parse)]
    slo: Option<Slo>,

    /// Write the summary as JSON to FILE.
    #[arg(long = "summary", value_name = "FILE")]
    summary_json: Option<PathBuf>,

    /// Write the summary as CSV to FILE.
    #[arg(long, value_name = "FILE")]
    summary_csv: Option<PathBuf>,

    #[command(flatten)]
    io: IoArgs,
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a positive number")),
    }
}

fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a non-negative number")),
    }
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once(':')
        .ok_or_else(|| format!("`{s}`: expected NAME:VALUE"))?;
    let k = k.trim();
    if k.is_empty() || !k.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!("`{k}` is not a header name"));
    }
    let v = v.trim();
    if !v.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b)) {
        return Err(format!("the value of `{k}` must be printable ASCII"));
    }
    Ok((k.to_string(), v.to_string()))
}

fn parse_object(s: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    match serde_json::from_str(s) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err("expected a JSON object".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn main() -> std::process::ExitCode {
    let args: Args = cli::parse_args(TOOL);
    let opts = Options {
        url: args.url,
        endpoint: args.endpoint,
        model: args.model,
        api_key: args.api_key.filter(|k| !k.is_empty()),
        headers: args.headers,
        extra_body: args.extra_body,
        exact_output: !args.no_exact_output,
        turns: args.turns,
        speedup: args.speedup,
        rate: args.rate,
        arrival: args.arrival,
        concurrency: args.concurrency.map(|c| c as usize),
        max_requests: args.max_requests,
        duration: args.duration.map(Duration::from_secs_f64),
        warmup: args.warmup,
        drain_timeout: Duration::from_secs_f64(args.drain_timeout),
        timeout: Duration::from_secs_f64(args.timeout),
        seed: args.seed,
        block_size: args.block_size,
        tokenizer: args.tokenizer,
        slo: args.slo,
        summary_json: args.summary_json,
        summary_csv: args.summary_csv,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let result = replay::install_signals(stop.clone())
        .and_then(|()| replay::run(&args.io, &opts, stop))
        .and_then(|summary| {
            if summary.requests.sent > 0 && summary.requests.ok == 0 {
                Err(Error::Other(anyhow::anyhow!(
                    "every request failed ({} sent)",
                    summary.requests.sent
                )))
            } else {
                Ok(())
            }
        });
    cli::exit(TOOL, result)
}
