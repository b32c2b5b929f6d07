//! mc-replay's command line: the clap-derived options and their value
//! parsers, next to the code that uses them (the binary only parses).

use std::path::PathBuf;

use clap::Parser;
use serde_json::{Map, Value};

use super::http::body::Endpoint;
pub use super::schedule::OnFailedCall;
use crate::filter::IoArgs;
use crate::results::Slo;

/// The longest time any option accepts (defined with the value parsers).
pub use crate::options::MAX_SECONDS;

/// Replay a Mooncake trace against an OpenAI-compatible server and measure it.
///
/// Without --url, the trace is replayed against a built-in engine model (a
/// vLLM-style server with a prefix cache, batching and preemption; see
/// --engine-profile) in virtual time: no server, no GPU, no waiting, and the
/// same schedule, result lines and summary as a real run, plus the model's
/// statistics.
///
/// Reads the whole trace first (a bad line stops the run before any request
/// is sent), then sends each row on the trace's schedule: rows with
/// timestamps at start + (timestamp - first) / --speedup; the turns of a
/// session one after another (a later turn waits for the previous one to end,
/// plus its `delay`). Rows without timestamps need --rate or --concurrency.
///
/// Agent graphs (docs/guide/agents.md, rows with `request_id`, `wait_for`,
/// `branches`, `tool_wait_ms`): a call is sent when the calls it waits for
/// have ended plus its `delay` and `tool_wait_ms`, siblings together; a bad
/// graph is refused before anything is sent (exit 65). --speedup divides
/// timestamps, delays and tool waits; --rate sets when tasks (sessions)
/// start, the gaps inside a task keep their recorded length; a released
/// call waits for a --concurrency slot (counted as lag). Result lines name
/// the call (`call_id`, `wait_for`); the summary adds a task section
/// (makespan, critical path, LLM/think/tool time, parallelism).
///
/// Prompts: `messages` (and `tools`) are sent verbatim, `text_input` as one
/// user message; otherwise the prompt is built from input_length and
/// hash_ids so that equal ids give equal text (the server's prefix cache sees
/// the trace's sharing). Each request asks for exactly output_length tokens
/// (max_tokens, min_tokens, ignore_eos) and streams. Each request carries
/// `x-request-id` (a UUID made of the run id and the request's number; the
/// result line has both forms), `x-session-id` and `x-trace-line`.
///
/// Writes one JSON result per request to stdout as it completes (failures
/// included), and a summary table to stderr. TTFT, TPOT, ITL and E2E are
/// measured from the moment the request is sent; schedule lag (send - due)
/// and scheduled latency (last token - due) show when the client itself fell
/// behind.
///
/// Sweeps: a comma list for one of --rate, --concurrency or --speedup
/// (`--rate 1,2,4,8`) runs the trace once per value, in order, into
/// --out-dir (per value NAME/results.jsonl, summary.json, summary.csv; and
/// sweep.json, sweep.csv with one row per value), and stops early when the
/// target saturates or fails (--stop-when). On the engine model (no --url),
/// a sweep is a what-if of a few seconds.
///
/// Exit codes: 0 the run completed (some requests may have failed); 1 every
/// request failed; 2 usage error; 65 bad trace; 69 nothing answers at --url
/// (checked with one connection before the first request), or stopped early because
/// the server could not be reached (--max-consecutive-failures), with every
/// sent request written; 73 an output cannot be created (a missing folder
/// for -o, --summary, --summary-csv or --metrics-out; checked before
/// anything is sent), or a sweep would overwrite files in --out-dir
/// (--force); 75 a shard could not start within --start-grace-ms of
/// --start-at (nothing was sent; start it sooner or pick a later instant).
///
/// Shards: --shard I/N (0-based) replays only shard I of a plan that every
/// machine computes alike from the trace: whole sessions, balanced by
/// tokens, each row at its single-run time after the common --start-at.
/// mc-report merges the shards' result files into the single run's
/// summary. --plan N prints the plan; --emit-slurm and --emit-k8s-job
/// write the job that runs it.
#[derive(Debug, Clone, Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-replay < trace.jsonl > results.jsonl      # no server: the engine model, in virtual time
  mc-replay --url http://127.0.0.1:8000 < trace.jsonl > results.jsonl
  mc-replay --url https://gpu:8443 --cacert ca.pem < trace.jsonl > results.jsonl   # a private CA
  mc-scale --speedup 2 < trace.jsonl | mc-replay --url http://gpu:8000 --summary s.json > r.jsonl
  mc-replay --url http://127.0.0.1:8000 --concurrency 16 --max-requests 500 -i untimed.jsonl
  mc-replay --url http://127.0.0.1:8000 --rate 1,2,4,8 --max-requests 200 --out-dir sweep -i t.jsonl
  mc-replay --speedup 1,2,4,8 --out-dir what-if -i trace.jsonl   # the engine model, in seconds
  jq -s 'map(.ttft_ms) | add / length' results.jsonl
  mc-replay --url http://gpu:8000 --metrics-out scrapes.jsonl --summary s.json < trace.jsonl > r.jsonl
  jq .fidelity s.json                          # did the server see the trace's sharing?
  mc-replay --plan 8 -i trace.jsonl            # how 8 shards would split it (nothing sent)
  mc-replay --url http://gpu:8000 -i t.jsonl --shard 1/4 --start-at 1795437688000 -o s1.jsonl
  mc-replay --url http://gpu:8000 -i /shared/t.jsonl --emit-slurm --shards 8 --results-dir /shared/run1 > run.sbatch

Coming from vLLM's benchmark or AIPerf: --base-url is --url, --request-rate
is --rate, --num-prompts and --request-count are --max-requests, and
timestamps are followed by default (AIPerf's --fixed-schedule)."
)]
pub struct ReplayArgs {
    /// Server base URL (`http://host:port`, with or without `/v1`). Without
    /// it, the trace is replayed against the engine model in virtual time.
    /// A comma list (`http://a:8000,http://b:8000`) is several servers
    /// (data-parallel replicas without a router of their own): each request
    /// goes to one of them, chosen by --router, and its result line names
    /// it (`worker`: the index in the list).
    #[arg(long, visible_alias = "base-url", value_name = "URL[,URL…]", value_parser = parse_urls)]
    pub url: Option<String>,

    /// Replay against the engine model even with --url (side-by-side runs).
    #[arg(long)]
    pub engine: bool,

    /// Which API to call.
    #[arg(long, value_enum, default_value_t = Endpoint::Chat)]
    pub endpoint: Endpoint,

    /// Model name; default: the first model the server lists at /v1/models
    /// (connecting may take 5 s, the listing 10 s; then the run stops).
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,

    /// API key, sent as a bearer token; never printed or written (not even
    /// into --emit-slurm's script or --emit-k8s-job's Job: the shards read
    /// it from OPENAI_API_KEY).
    #[arg(
        long,
        env = "OPENAI_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub api_key: Option<String>,

    /// Extra request header, `Name: value` (repeatable).
    #[arg(long = "header", value_name = "K:V", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,

    /// JSON object merged into every request body (a row's `extra` wins).
    #[arg(long, value_name = "JSON", value_parser = parse_object)]
    pub extra_body: Option<Map<String, Value>>,

    /// Do not ask for exact answer lengths (no min_tokens / ignore_eos).
    #[arg(long)]
    pub no_exact_output: bool,

    /// How session rows relate: each is the whole prompt (cumulative), or
    /// is appended to the conversation so far with the live answers (delta).
    #[arg(long, value_enum, default_value_t = Turns::Cumulative)]
    pub turns: Turns,

    /// Divide timestamps and delays by this (the schedule must still end
    /// within about 3 years). A comma list (`1,2,4`) is a sweep (see
    /// --out-dir).
    #[arg(long = "speedup", default_value = "1", value_name = "X[,X…]",
          value_delimiter = ',', value_parser = positive)]
    pub speedups: Vec<f64>,

    /// What becomes of the calls of an agent graph (and the later turns of
    /// a session) that wait for a call that failed: `send` releases them
    /// at its end as if it had succeeded (the trace's load whatever the
    /// server answers: a server failing under load is not relieved by its
    /// failures), `skip` sends none of them nor anything that waits for
    /// them (an agent that gives up its task); the summary counts the
    /// skipped ones.
    #[arg(long, value_enum, default_value_t = OnFailedCall::Send)]
    pub on_failed_call: OnFailedCall,

    /// Cap every think time (`delay`) at MS, in the trace's ms (before
    /// --speedup); the run description counts the delays it cut. A trace
    /// with delays over an hour is named on stderr either way.
    #[arg(long, value_name = "MS", value_parser = crate::delays::parse_max_delay)]
    pub max_delay: Option<f64>,

    /// Open loop at R requests/s (ignores timestamps). A comma list
    /// (`1,2,4,8`) is a sweep (see --out-dir).
    #[arg(long = "rate", visible_alias = "request-rate", value_name = "R[,R…]",
          value_delimiter = ',', value_parser = rate)]
    pub rates: Vec<f64>,

    /// Gaps between arrivals under --rate.
    #[arg(long, value_enum, default_value_t = ArrivalKind::Poisson)]
    pub arrival: ArrivalKind,

    /// At most C requests in flight; alone (no timestamps, no --rate) it is
    /// a closed loop. Waiting for a slot counts as schedule lag. A comma
    /// list (`1,4,16,64`) is a sweep (see --out-dir).
    #[arg(long = "concurrency", value_name = "C[,C…]", value_delimiter = ',',
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub concurrencies: Vec<u64>,

    /// Send at most N measured requests; the run ends when they have.
    #[arg(long, visible_aliases = ["num-prompts", "request-count"], value_name = "N")]
    pub max_requests: Option<u64>,

    /// Stop sending after S seconds; the run ends when the requests in
    /// flight have.
    #[arg(long, value_name = "S", value_parser = positive_seconds)]
    pub duration: Option<f64>,

    /// The first N requests are sent but left out of the summary.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub warmup: u64,

    /// After Ctrl-C / SIGTERM, how long requests in flight may finish.
    #[arg(long, default_value_t = 30.0, value_name = "S", value_parser = non_negative_seconds)]
    pub drain_timeout: f64,

    /// Per-request timeout, in seconds.
    #[arg(long, default_value_t = 600.0, value_name = "S", value_parser = positive_seconds)]
    pub timeout: f64,

    /// Stop the run (exit code 69) after N requests in a row could not
    /// reach the server (connection refused, host not found); every request
    /// sent is still written. 0 never stops.
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub max_consecutive_failures: u64,

    /// Seed for prompt text and --rate arrivals.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed: u64,

    /// Tokens per hash id, or `auto` (the default): the one power of two
    /// every row with hash_ids allows (named on stderr; an error when the
    /// rows allow several or none). Rows with fewer tokens than their ids
    /// need at this size are bad lines.
    #[arg(long = "block-size", default_value = "auto", value_name = "B|auto")]
    pub block: crate::blocks::BlockSize,

    /// A tokenizer.json, a folder holding one, or a HuggingFace model id:
    /// prompts are then exactly input_length tokens of it (checked).
    #[arg(long, value_name = "TOKENIZER")]
    pub tokenizer: Option<String>,

    /// Goodput bounds, e.g. `ttft=500,tpot=50,e2e=10000` (ms).
    #[arg(long, value_name = "BOUNDS", value_parser = Slo::parse)]
    pub slo: Option<Slo>,

    /// Write the summary as JSON to FILE. With `--output R.jsonl` it is
    /// also written beside the results as `R.summary.json`, where
    /// mc-report finds the run's description.
    #[arg(long = "summary", value_name = "FILE")]
    pub summary_json: Option<PathBuf>,

    /// Write the summary as CSV to FILE (one row per metric).
    #[arg(long, value_name = "FILE")]
    pub summary_csv: Option<PathBuf>,

    /// Sweep: run the trace once per value of the --rate, --concurrency or
    /// --speedup list, in order, writing DIR/NAME/results.jsonl,
    /// summary.json and summary.csv per value (NAME like `rate-0.5`,
    /// `concurrency-16`), and DIR/sweep.json and sweep.csv (one row per
    /// value). Required with a list; with one value it is a sweep of one.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,

    /// Sweep: overwrite files already in --out-dir.
    #[arg(long)]
    pub force: bool,

    /// Sweep: send every value the same prompts (as before 0.1). By
    /// default each value after the first builds its prompts from another
    /// seed, so no value is served from blocks an earlier value left in
    /// the server's prefix cache; sharing inside a value stays exactly as
    /// the trace says.
    #[arg(long)]
    pub same_prompts: bool,

    /// Before the run (each value of a sweep), ask the server to empty its
    /// prefix cache: vLLM's `POST /reset_prefix_cache`, served when vLLM
    /// runs with VLLM_SERVER_DEV_MODE=1. Every value then starts cold even
    /// with --same-prompts; a server that refuses stops the run (exit 69)
    /// before anything is sent. Needs --url.
    #[arg(long)]
    pub reset_prefix_cache: bool,

    /// Sweep: when to stop before the last value. `never`, or a comma list
    /// of tests, each `off` or a threshold (unnamed tests keep their
    /// default). Saturated: output throughput gained less than
    /// `throughput-gain` over the best earlier value while TTFT p99 rose
    /// past `ttft-p99` times the lowest earlier one or lag p99 passed
    /// `lag-p99`. Failing: more than `error-rate` of the requests failed.
    #[arg(long, value_name = "TESTS", value_parser = super::sweep::stop::StopWhen::parse,
          default_value = super::sweep::stop::StopWhen::DEFAULT)]
    pub stop_when: super::sweep::stop::StopWhen,

    /// Scrape the server's Prometheus metrics (GET /metrics at the server's
    /// root) before, during and after the run for the summary's fidelity
    /// section. On by default; a server without them is noted once and
    /// the run goes on.
    #[arg(
        long,
        overrides_with = "no_server_metrics",
        help_heading = "Server metrics"
    )]
    pub server_metrics: bool,

    /// Do not scrape the server's metrics.
    #[arg(
        long,
        overrides_with = "server_metrics",
        help_heading = "Server metrics"
    )]
    pub no_server_metrics: bool,

    /// Where the metrics are [default: /metrics at the root of --url].
    #[arg(long, value_name = "URL", value_parser = parse_url, help_heading = "Server metrics")]
    pub metrics_url: Option<String>,

    /// Seconds between scrapes during the run.
    #[arg(long, default_value_t = 5.0, value_name = "S", value_parser = positive_seconds,
          help_heading = "Server metrics")]
    pub metrics_interval: f64,

    /// Write every scrape to FILE: one JSON object per line, {"phase":
    /// "before"|"during"|"after", "unix_ms", "url", "error", "known": the
    /// series the summary reads, "samples": [{"name", "labels", "value"}]}.
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "Server metrics",
        conflicts_with = "no_server_metrics"
    )]
    pub metrics_out: Option<PathBuf>,

    /// Tokens per KV block of the server, for the predicted hit rate
    /// [default: the server's (vLLM's cache_config_info), else the trace's
    /// block size]. The KV size of the prediction's LRU cache is
    /// --kv-tokens when given, else the server's.
    #[arg(long, value_name = "TOKENS", help_heading = "Server metrics",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub server_block_size: Option<u64>,

    /// Flag the run when the server's prefix-cache hit rate is more than
    /// this many percentage points from the trace's.
    #[arg(long, default_value_t = super::observe::fidelity::DEFAULT_THRESHOLD_PP, value_name = "PP",
          value_parser = percentage_points, help_heading = "Server metrics")]
    pub fidelity_threshold: f64,

    /// Which HTTP client sends the requests. `evented` (the default, for
    /// http:// and https://): a few event-loop threads (--event-loops)
    /// over non-blocking sockets, TLS included, every read timestamped
    /// as it arrives, so thousands of long streams cost little CPU and do
    /// not queue behind each other. `blocking`: one thread per request in
    /// flight (ureq). `auto` is `evented`.
    #[arg(long, value_enum, default_value_t = HttpClient::Auto, help_heading = "HTTP client")]
    pub http_client: HttpClient,

    /// Trust the CA certificate(s) in FILE (PEM, one or more) for an
    /// https:// server, instead of the built-in Mozilla roots, as curl's
    /// --cacert does: for a server whose certificate a private CA signed
    /// (or a self-signed one, not marked as a CA). Both clients, the model
    /// listing and the metrics scrape use it. Read and checked before
    /// anything is sent.
    /// Example: `--url https://gpu:8443 --cacert ca.pem`.
    #[arg(long, value_name = "FILE", help_heading = "HTTP client")]
    pub cacert: Option<PathBuf>,

    /// At most N connections to the server (evented client). Connections
    /// are HTTP/1.1 keep-alive: one finished answer frees its connection
    /// for the next request; a connection the server closes (or answers
    /// with `connection: close` or an HTTP/1.0 body) is not reused, and a
    /// request whose reused connection turns out closed before any byte of
    /// the answer is sent once more on a new one. A request that finds
    /// every connection busy waits for one, and the wait counts as
    /// schedule lag. Without this option the cap follows what the client
    /// measures (Little's law): twice the arrival rate times the mean time
    /// an answer takes (or, if longer, the age of the oldest request in
    /// flight), at least 16 per event loop, at most the open-file limit
    /// (raised to its hard limit at start) and half the ephemeral port
    /// range. 0: no cap, one connection per request in flight (up to the
    /// open-file limit: past it requests wait, and stderr says so once).
    /// The summary says how many connections were opened per request.
    #[arg(long, value_name = "N", help_heading = "HTTP client")]
    pub max_connections: Option<usize>,

    /// Event-loop threads of the evented client; 0 (the default): half
    /// the CPUs, between 1 and 4. Requests are spread over them in turn.
    #[arg(long, default_value_t = 0, value_name = "N", help_heading = "HTTP client",
          value_parser = clap::value_parser!(u64).range(0..=64))]
    pub event_loops: u64,

    /// With at least 100 answers in flight on an event loop, the loop
    /// polls its sockets at most once every US µs instead of on every
    /// arriving token: one wake-up then reads dozens of tokens (at 1,000
    /// streams, about 15% less CPU per streamed token). The times are not
    /// moved: on Linux every read carries the kernel's arrival time of its
    /// bytes, not the time it was read. A request due meanwhile is sent
    /// at once. What waits up to US µs: noticing that an answer ended (a
    /// session's next turn starts that much later, and its schedule lag
    /// says so), a --timeout, and reusing the connection. 0: poll on every
    /// event.
    #[arg(long, default_value_t = 500, value_name = "US", help_heading = "HTTP client",
          value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub read_coalesce_us: u64,

    /// The largest server-sent event accepted, in bytes: a stream whose
    /// event (or line) grows past it fails as `bad_sse` instead of being
    /// buffered without bound.
    #[arg(long, default_value_t = super::http::sse::DEFAULT_MAX_EVENT_BYTES as u64,
          value_name = "BYTES", help_heading = "HTTP client",
          value_parser = clap::value_parser!(u64).range(1..=(1u64 << 40)))]
    pub max_event_bytes: u64,

    /// AIPerf's option: timestamps are followed by default (accepted, no effect).
    #[arg(long, hide = true)]
    pub fixed_schedule: bool,

    /// Seconds between status lines when stderr is not a terminal (tests
    /// shorten it).
    #[arg(long, hide = true, default_value_t = 10.0, value_name = "S",
          value_parser = positive_seconds)]
    pub status_every: f64,

    /// Replay only shard I of N (0-based: 0 <= I < N), whole sessions,
    /// balanced by tokens, on the single run's schedule (see --plan).
    /// `env`: from SLURM_PROCID and SLURM_NTASKS (srun), or from
    /// JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) with --shards N.
    #[arg(long, value_name = "I/N|env", value_parser = super::shard::parse_shard,
          help_heading = "Shards")]
    pub shard: Option<super::shard::ShardArg>,

    /// How many shards: with --shard env (Kubernetes) and --emit-*.
    #[arg(long, value_name = "N", help_heading = "Shards",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(super::shard::MAX_SHARDS)))]
    pub shards: Option<u32>,

    /// Print the plan of N shards (per shard: sessions, rows, tokens, share
    /// of the trace's peak arrival second) and its digest; nothing is sent.
    #[arg(long = "plan", value_name = "N", help_heading = "Shards",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(super::shard::MAX_SHARDS)))]
    pub plan_shards: Option<u32>,

    /// The schedule's zero is this wall-clock instant (ms since the Unix
    /// epoch): the shard waits for it (saying when, on stderr), then runs
    /// on the monotonic clock. At most about 11.6 days ahead.
    #[arg(long, value_name = "UNIX_MS", help_heading = "Shards")]
    pub start_at: Option<u64>,

    /// A shard that cannot start within this many ms after --start-at
    /// exits with code 75 and says how late it is.
    #[arg(
        long,
        default_value_t = 1000,
        value_name = "MS",
        help_heading = "Shards"
    )]
    pub start_grace_ms: u64,

    /// Print an sbatch script that runs --shards N tasks (srun, one per
    /// shard, one task a node: --nodes N --ntasks-per-node 1) of this same command with --shard env and a --start-at
    /// computed when the job starts; results in --results-dir. Secrets are
    /// not written into it: the tasks read them from the environment sbatch
    /// passes on (OPENAI_API_KEY for the key, MC_REPLAY_URL for a URL with
    /// credentials, MC_REPLAY_HEADER_I for a credential header), and the
    /// script says which to export and stops when one is missing.
    #[arg(
        long,
        requires = "shards",
        conflicts_with = "emit_k8s_job",
        help_heading = "Shards"
    )]
    pub emit_slurm: bool,

    /// Print a Kubernetes Indexed Job (batch/v1) that runs --shards N pods
    /// of this command in --image, one per node, the trace from a
    /// ConfigMap (at most 1 MiB) or --trace-volume, results on a volume. Secrets (the API key, a URL with
    /// credentials, credential headers) are not written into it: the pods
    /// read them from the Secret JOB-NAME-secrets (`secretKeyRef`), and the
    /// file's comments give the `kubectl create secret` line.
    #[arg(long, requires_all = ["shards", "image"], help_heading = "Shards")]
    pub emit_k8s_job: bool,

    /// --emit-k8s-job: the pods read the trace from this
    /// PersistentVolumeClaim (mounted read-only at /trace; copy the trace
    /// onto it under its file name) instead of a ConfigMap. A ConfigMap
    /// holds at most 1 MiB: a larger trace is refused without this.
    #[arg(
        long,
        value_name = "CLAIM",
        requires = "emit_k8s_job",
        help_heading = "Shards"
    )]
    pub trace_volume: Option<String>,

    /// The container image holding mc-replay (--emit-k8s-job).
    #[arg(long, value_name = "IMAGE", help_heading = "Shards")]
    pub image: Option<String>,

    /// --emit-*: the shards start this many seconds after the job does.
    #[arg(long, default_value_t = 30, value_name = "S", help_heading = "Shards")]
    pub start_in: u64,

    /// --emit-*: the folder (shared by every node) the shards write
    /// shard-I.jsonl and shard-I.summary.json into.
    #[arg(long, value_name = "DIR", help_heading = "Shards")]
    pub results_dir: Option<PathBuf>,

    /// --emit-*: the job's name.
    #[arg(
        long,
        default_value = "mc-replay",
        value_name = "NAME",
        help_heading = "Shards"
    )]
    pub job_name: String,

    #[command(flatten)]
    pub io: IoArgs,

    #[command(flatten)]
    pub routing: crate::engine::router::RouterArgs,

    // Last: its help heading applies to every option after it.
    #[command(flatten)]
    pub engine_model: crate::engine::EngineArgs,
}

/// How session rows relate to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Turns {
    /// Each row is the whole prompt (Mooncake's meaning).
    Cumulative,
    /// Each row is appended to the conversation so far, with the server's
    /// live answers (AIPerf's reading).
    Delta,
}

/// Which HTTP client a run on a server uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HttpClient {
    /// `evented` (kept so scripts that name it go on working).
    Auto,
    Evented,
    Blocking,
}

/// Gaps between arrivals under `--rate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ArrivalKind {
    Poisson,
    Constant,
}

// The value parsers live in the core `options` module (one wording for
// every tool); the old names stay for the attributes above and for tests.
pub use crate::options::{
    header as parse_header, json_object as parse_object, non_negative_seconds, percentage_points,
    positive, positive_seconds, rate, url as parse_url,
};

/// `--url`: one URL, or a comma list of them, each checked; kept as given
/// (the plan splits it: [`urls`]).
pub fn parse_urls(s: &str) -> Result<String, String> {
    for u in s.split(',') {
        parse_url(u.trim())?;
    }
    Ok(s.to_string())
}

/// The servers of `--url`, in order.
pub fn urls(url: &str) -> Vec<String> {
    url.split(',').map(|u| u.trim().to_string()).collect()
}
