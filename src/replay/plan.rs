//! One checked plan per invocation, the options consumed: [`plan`] turns
//! clap's [`ReplayArgs`] (the raw command line) into a [`Plan`] (the
//! loaded trace, its block size, the target, one [`Run`] per sweep value,
//! and every setting a run reads, in the shape its reader wants) after
//! every usage and data check, and after every output path has been
//! checked, so that nothing found wrong later can lose a run: no request
//! is sent before all of it holds. Nothing after [`plan`] reads the raw
//! options; [`job`] does the same for `--emit-*`.
//!
//! The order of the checks is the order a user fixes things in: usage
//! (options that contradict each other, the engine's parameters), outputs
//! (a missing folder, files a sweep would overwrite), then the trace (bad
//! lines, the block size, each run's schedule).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::http::body::{self, Endpoint};
use super::http::connect::ServerOptions;
use super::http::tls::CaCerts;
use super::observe::WatchOptions;
use super::options::{ArrivalKind, ReplayArgs, Turns};
use super::redact::Redactor;
use super::schedule::{self, Arrivals, Limits};
use super::shard;
use super::sweep::plan::{self as sweep_plan, Sweep};
use super::trace::{self, Trace};
use crate::engine::router::RouterParams;
use crate::engine::EngineParams;
use crate::error::{Error, RecordError, Result};
use crate::filter::report_skipped;
use crate::jsonl::{ErrorPolicy, OnError};
use crate::results::summary::{LoadOptions, ShardRun};
use crate::results::sweep::{run_name, under, Param};
use crate::results::Slo;

/// Where the requests go.
pub enum TargetKind {
    /// The engine model, in virtual time (no `--url`, or `--engine`).
    Engine {
        params: EngineParams,
        /// `--engine-workers` above 1: the router in front of them.
        router: Option<RouterParams>,
        /// `--tokenizer`, for rows of literal text.
        tokenizer: Option<String>,
        /// Why the engine model: `no --url` or `--engine`.
        because: &'static str,
    },
    /// A real server at `--url`; `cacert`: `--cacert`'s roots, read.
    Http {
        /// The first server of `--url`.
        url: String,
        /// Every server of `--url A,B,…`, in order (`url` first).
        urls: Vec<String>,
        /// Several servers: the router that chooses among them.
        router: Option<RouterParams>,
        cacert: Option<CaCerts>,
        /// How requests are built and sent.
        server: ServerOptions,
        /// How the server's metrics are watched.
        watch: WatchOptions,
    },
}

/// Everything a replay runs, checked.
pub struct Plan {
    pub trace: Arc<Trace>,
    /// `--block-size`, or the size the rows decide under `auto`.
    pub block_size: u64,
    pub target: TargetKind,
    /// One run, or one per sweep value in order.
    pub runs: Vec<Run>,
    /// Set for a sweep (`--out-dir`).
    pub sweep: Option<Sweep>,
    /// `--shard`: this shard's place in its plan (`trace` is then only
    /// the shard's part, on the whole trace's schedule).
    pub shard: Option<ShardRun>,
    /// `--max-delay`, and the delays it cut.
    pub delay_cap: Option<crate::delays::DelayCap>,
    /// The options' secrets, hidden in everything mc-replay writes (made
    /// once, here).
    pub redactor: Redactor,
    /// `--max-requests`, `--duration`, `--warmup`, `--drain-timeout`
    /// (each run adds its concurrency: [`Run::limits`]).
    pub limits: Limits,
    pub recording: Recording,
    /// `--turns`.
    pub turns: Turns,
    /// `--on-failed-call`.
    pub on_failed_call: super::schedule::OnFailedCall,
    /// `--seed` (a run's prompts have their own: [`Run::prompt_seed`]).
    pub seed: u64,
    /// `--start-at` and `--start-grace-ms`, for a shard.
    pub start_at: Option<u64>,
    pub start_grace_ms: u64,
    /// What the summary says of the run's options.
    pub described: Described,
}

/// How a run writes its result lines and status.
#[derive(Debug, Clone)]
pub struct Recording {
    pub slo: Option<Slo>,
    /// Not `--no-exact-output`.
    pub exact_output: bool,
    pub max_consecutive_failures: u64,
    /// `--status-every`.
    pub status_every: Duration,
    /// `--line-buffered`.
    pub line_buffered: bool,
}

/// The options as the summary's run description names them.
#[derive(Debug, Clone)]
pub struct Described {
    /// `--url`, its secrets hidden.
    pub url: Option<String>,
    pub endpoint: &'static str,
    /// The input's path, `-` for stdin.
    pub input: String,
    pub turns: &'static str,
    /// The options that change what the server sees (compared across a
    /// sharded run's shards by mc-report).
    pub options: LoadOptions,
}

/// Where the trace comes from and how it is read: what a replay and a
/// job (`--emit-*`, `--plan`) both load.
#[derive(Debug, Clone)]
pub struct TraceSource {
    pub input: Option<PathBuf>,
    pub on_error: OnError,
    pub max_line_bytes: usize,
    pub block: crate::blocks::BlockSize,
    /// `-` for stdin, else the path (for messages and the summary).
    pub name: String,
}

impl TraceSource {
    fn of(args: &ReplayArgs) -> TraceSource {
        let input = args.io.input().map(Path::to_path_buf);
        TraceSource {
            name: input
                .as_deref()
                .map_or("-".into(), |p| p.display().to_string()),
            input,
            on_error: args.io.on_error,
            max_line_bytes: args.io.max_line_bytes,
            block: args.block,
        }
    }
}

/// What one invocation does: print a job, print a shard plan, or replay.
pub enum Task {
    /// `--emit-slurm`, `--emit-k8s-job`.
    Emit(Job),
    /// `--plan N`: how N shards split the trace.
    ShowShards { source: TraceSource, count: u32 },
    /// A run or a sweep: [`plan`] checks the options.
    Replay(Box<ReplayArgs>),
}

/// Sorts the invocation into its [`Task`]; `argv`: its arguments (a job
/// re-emits them).
pub fn task(args: ReplayArgs, argv: &[OsString]) -> Result<Task> {
    if args.emit_slurm || args.emit_k8s_job {
        return Ok(Task::Emit(job(args, argv)?));
    }
    if let Some(count) = args.plan_shards {
        return Ok(Task::ShowShards {
            source: TraceSource::of(&args),
            count,
        });
    }
    Ok(Task::Replay(Box::new(args)))
}

/// `--emit-*`: the job's options, and the shards' own command line.
#[derive(Debug, Clone)]
pub struct Job {
    pub shards: u32,
    /// The trace file (every node reads it).
    pub input: PathBuf,
    pub source: TraceSource,
    /// `--emit-k8s-job` (else `--emit-slurm`).
    pub k8s: bool,
    /// The arguments every shard runs with: this invocation's, less the
    /// job's own (the re-emitted argument list).
    pub rest: Vec<String>,
    /// `--speedup`'s first value: the schedule's span.
    pub speedup: f64,
    pub results_dir: Option<PathBuf>,
    pub job_name: String,
    pub image: Option<String>,
    pub start_in: u64,
    pub start_grace_ms: u64,
    /// `--timeout`, in seconds.
    pub timeout: f64,
    /// `--url` given (a job replays a server, never an engine model per
    /// shard).
    pub has_url: bool,
    /// `--engine`.
    pub engine: bool,
    /// `--api-key` given (it reaches the shards through the environment).
    pub has_api_key: bool,
    /// `--trace-volume`: the PersistentVolumeClaim holding the trace.
    pub trace_volume: Option<String>,
}

/// The job of `--emit-*` (`args` parsed from `argv`).
pub fn job(args: ReplayArgs, argv: &[OsString]) -> Result<Job> {
    let shards = args
        .shards
        .ok_or_else(|| Error::usage("--emit-*: give --shards N"))?;
    let input =
        match args.io.input() {
            Some(p) if p != Path::new("-") => p.to_path_buf(),
            _ => return Err(Error::usage(
                "--emit-*: the shards read the trace from a file: give --input FILE (a path every \
                 node can read, for Slurm)",
            )),
        };
    Ok(Job {
        shards,
        input,
        source: TraceSource::of(&args),
        k8s: args.emit_k8s_job,
        rest: shard::emit::shard_args(argv)?,
        speedup: args.speedups.first().copied().unwrap_or(1.0),
        results_dir: args.results_dir,
        job_name: args.job_name,
        image: args.image,
        start_in: args.start_in,
        start_grace_ms: args.start_grace_ms,
        timeout: args.timeout,
        has_url: args.url.is_some(),
        engine: args.engine,
        has_api_key: args.api_key.is_some(),
        trace_volume: args.trace_volume,
    })
}

impl TargetKind {
    /// `--reset-prefix-cache` (a server's run only).
    pub fn resets_prefix_cache(&self) -> bool {
        matches!(self, TargetKind::Http { server, .. } if server.reset_prefix_cache)
    }
}

/// One run: the values of the options a sweep varies, its schedule and
/// where its files go.
#[derive(Debug, Clone)]
pub struct Run {
    /// The sweep's option and this run's value of it.
    pub point: Option<(Param, f64)>,
    pub speedup: f64,
    pub rate: Option<f64>,
    pub concurrency: Option<u64>,
    pub arrivals: Arrivals,
    pub outputs: Outputs,
    /// The seed of this run's prompt text: `--seed` for a plain run and a
    /// sweep's first value; another per later value, so no value meets the
    /// blocks an earlier one left in the server's prefix cache (unless
    /// `--same-prompts`).
    pub prompt_seed: u64,
}

/// Where one run writes (every path checked before the first request).
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    /// The run's own folder, made when the run starts (a sweep's value).
    pub dir: Option<PathBuf>,
    /// Result lines; `None` is stdout.
    pub results: Option<PathBuf>,
    pub summary_json: Option<PathBuf>,
    /// The summary beside the results file (`R.summary.json`), unless
    /// `summary_json` already is where mc-report looks.
    pub sidecar: Option<PathBuf>,
    pub summary_csv: Option<PathBuf>,
}

impl Run {
    /// The schedule's limits: the plan's, with this run's concurrency.
    pub fn limits(&self, plan: Limits) -> Limits {
        Limits {
            concurrency: self.concurrency.map(|c| c as usize),
            ..plan
        }
    }
}

/// The secrets of these options ([`super::redact`]).
fn redactor(args: &ReplayArgs) -> Redactor {
    Redactor::new(
        args.api_key.as_deref(),
        args.url
            .iter()
            .flat_map(|u| u.split(','))
            .map(str::trim)
            .chain(args.metrics_url.as_deref()),
        &args.headers,
    )
}

/// What the checks produce: the trace and the runs.
struct Checked {
    trace: Arc<Trace>,
    block_size: u64,
    target: TargetKind,
    runs: Vec<Run>,
    sweep: Option<Sweep>,
    shard: Option<ShardRun>,
    delay_cap: Option<crate::delays::DelayCap>,
}

/// The options that change what the server sees, as the run description
/// records them (secrets left out: header names only, a digest of the
/// extra body).
fn load_options(args: &ReplayArgs, target: &TargetKind) -> LoadOptions {
    let engine = matches!(target, TargetKind::Engine { .. });
    let router = match target {
        TargetKind::Engine { router, .. } | TargetKind::Http { router, .. } => router.as_ref(),
    };
    use sha2::{Digest, Sha256};
    let mut header_names: Vec<String> = args
        .headers
        .iter()
        .map(|(k, _)| k.to_ascii_lowercase())
        .collect();
    header_names.sort();
    LoadOptions {
        exact_output: !args.no_exact_output,
        timeout_s: args.timeout,
        extra_body_sha256: args.extra_body.as_ref().map(|b| {
            let json = serde_json::Value::Object(b.clone()).to_string();
            let hash = Sha256::digest(json.as_bytes());
            hash.iter().map(|b| format!("{b:02x}")).collect()
        }),
        header_names,
        tokenizer: args.tokenizer.clone(),
        max_requests: args.max_requests,
        duration_s: args.duration,
        warmup: args.warmup,
        max_connections: args.max_connections.map(|n| n as u64),
        reset_prefix_cache: args.reset_prefix_cache,
        engine_profile: engine.then(|| {
            args.engine_model
                .engine_profile
                .clone()
                .unwrap_or_else(|| "default".into())
        }),
        workers: router.map(|r| r.workers as u64),
        router: router.map(|r| r.kind.name().to_string()),
    }
}

/// Every check, then the plan; the options are consumed. Its errors have
/// the options' secrets hidden.
pub fn plan(args: ReplayArgs) -> Result<Plan> {
    let redactor = redactor(&args);
    let c = checked(&args).map_err(|e| redactor.error(e))?;
    let us = |s: f64| (s * 1e6).round() as u64;
    // The options are bounded, so the µs fit.
    let limits = Limits {
        concurrency: None,
        max_requests: args.max_requests,
        duration_us: args.duration.map(us),
        warmup: args.warmup,
        drain_us: us(args.drain_timeout),
    };
    let described = Described {
        url: args.url.as_deref().map(|u| redactor.redact(u)),
        endpoint: match args.endpoint {
            Endpoint::Chat => "chat",
            Endpoint::Completions => "completions",
        },
        input: TraceSource::of(&args).name,
        turns: match args.turns {
            Turns::Cumulative => "cumulative",
            Turns::Delta => "delta",
        },
        options: load_options(&args, &c.target),
    };
    Ok(Plan {
        trace: c.trace,
        block_size: c.block_size,
        target: c.target,
        runs: c.runs,
        sweep: c.sweep,
        shard: c.shard,
        delay_cap: c.delay_cap,
        redactor,
        limits,
        recording: Recording {
            slo: args.slo,
            exact_output: !args.no_exact_output,
            max_consecutive_failures: args.max_consecutive_failures,
            status_every: Duration::from_secs_f64(args.status_every),
            line_buffered: args.io.line_buffered,
        },
        turns: args.turns,
        on_failed_call: args.on_failed_call,
        seed: args.seed,
        start_at: args.start_at,
        start_grace_ms: args.start_grace_ms,
        described,
    })
}

/// The target the options name, its own options in the shape its code
/// reads them.
fn target(args: &ReplayArgs) -> Result<TargetKind> {
    let target = match (&args.url, args.engine) {
        (Some(list), false) => TargetKind::Http {
            url: super::options::urls(list).swap_remove(0),
            urls: super::options::urls(list),
            router: None,
            cacert: cacert(args, list)?,
            server: ServerOptions {
                endpoint: args.endpoint,
                model: args.model.clone(),
                api_key: args.api_key.clone(),
                headers: args.headers.clone(),
                extra_body: args.extra_body.clone(),
                exact_output: !args.no_exact_output,
                tokenizer: args.tokenizer.clone(),
                timeout: Duration::from_secs_f64(args.timeout),
                reset_prefix_cache: args.reset_prefix_cache,
                http_client: args.http_client,
                max_connections: args.max_connections,
                event_loops: args.event_loops,
                read_coalesce: Duration::from_micros(args.read_coalesce_us),
                max_event_bytes: usize::try_from(args.max_event_bytes).unwrap_or(usize::MAX),
            },
            watch: WatchOptions {
                scrape: !args.no_server_metrics,
                url: args.metrics_url.clone(),
                out: args.metrics_out.clone(),
                interval: Duration::from_secs_f64(args.metrics_interval),
                server_block_size: args.server_block_size,
                kv_tokens: args.engine_model.shape.kv_tokens,
                threshold_pp: args.fidelity_threshold,
            },
        },
        _ => TargetKind::Engine {
            params: engine_params(args)?,
            router: None,
            tokenizer: args.tokenizer.clone(),
            because: if args.url.is_some() {
                "--engine"
            } else {
                "no --url"
            },
        },
    };
    Ok(target)
}

/// The router in front of several workers (`--engine-workers N`, or
/// `--url A,B,…`), once the trace says its block size and whether its
/// rows name their blocks.
fn route(args: &ReplayArgs, target: &mut TargetKind, trace: &Trace, block: u64) -> Result<()> {
    let has_ids = trace.turns.iter().any(|t| !t.hash_ids.is_empty());
    let r = &args.routing;
    match target {
        TargetKind::Engine { params, router, .. } => {
            *router = r.params(r.engine_workers, block, Some(params.kv_tokens), has_ids)?;
        }
        TargetKind::Http { urls, router, .. } => {
            let kv = args.engine_model.shape.kv_tokens;
            *router = r.params(urls.len() as u64, block, kv, has_ids)?;
        }
    }
    Ok(())
}

/// Every check, in the order a user fixes things in.
fn checked(args: &ReplayArgs) -> Result<Checked> {
    let sweep = sweep_plan::sweep(args)?;
    let mut target = target(args)?;
    check_usage(args, &target)?;
    match &sweep {
        Some(s) => sweep_plan::prepare(s, args.force)?,
        None => check_outputs(args)?,
    }
    if args.fixed_schedule {
        eprintln!("mc-replay: note: --fixed-schedule: timestamps are followed by default");
    }
    let shard_of = match args.shard {
        Some(arg) => Some(shard_usage(args, arg)?),
        None => {
            if args.start_at.is_some() {
                return Err(Error::usage(
                    "--start-at starts a shard: give --shard I/N (or --shard 0/1 for one machine)",
                ));
            }
            None
        }
    };
    let (mut trace, block_size, sha) = load_hashed(&TraceSource::of(args), shard_of.is_some())?;
    route(args, &mut target, &trace, block_size)?;
    let delay_cap = cap_delays(&mut trace, args.max_delay);
    let trace = Arc::new(trace);
    let runs = runs(args, &trace, sweep.as_ref())?;
    check_rows(&trace, args, block_size)?;
    let (trace, shard) = match shard_of {
        Some((index, count)) => {
            let (part, run) = shard_part(args, &trace, block_size, sha, (index, count))?;
            (Arc::new(part), Some(run))
        }
        None => (trace, None),
    };
    Ok(Checked {
        trace,
        block_size,
        target,
        runs,
        sweep,
        shard,
        delay_cap,
    })
}

/// The options that need a server, or the chat endpoint.
fn check_usage(args: &ReplayArgs, target: &TargetKind) -> Result<()> {
    let http = matches!(target, TargetKind::Http { .. });
    if http && args.routing.engine_workers > 1 {
        return Err(Error::usage(
            "--engine-workers sets how many engine models run (no --url, or --engine); for \
             several servers list them: --url http://a:8000,http://b:8000",
        ));
    }
    let several = args
        .url
        .as_deref()
        .is_some_and(|l| super::options::urls(l).len() > 1);
    if several && args.metrics_url.is_some() {
        return Err(Error::usage(
            "--metrics-url names one server's metrics; with several --url servers each is \
             scraped at its own /metrics (leave --metrics-url out, or --no-server-metrics)",
        ));
    }
    if args.cacert.is_some() && !http {
        return Err(Error::usage(
            "--cacert trusts an https:// server's CA: give --url (the engine model has no TLS)",
        ));
    }
    if args.reset_prefix_cache && !http {
        return Err(Error::usage(
            "--reset-prefix-cache asks a server to empty its cache: give --url \
             (the engine model starts every run cold)",
        ));
    }
    if args.turns == Turns::Delta && args.endpoint == Endpoint::Completions {
        return Err(Error::usage(
            "--turns delta needs --endpoint chat (it sends the conversation as messages)",
        ));
    }
    Ok(())
}

/// One run per sweep value (or the one run), each later value with its
/// own prompt seed unless `--same-prompts`.
fn runs(args: &ReplayArgs, trace: &Trace, sweep: Option<&Sweep>) -> Result<Vec<Run>> {
    let points: Vec<Option<(Param, f64)>> = match sweep {
        Some(s) => s.values.iter().map(|&v| Some((s.param, v))).collect(),
        None => vec![None],
    };
    let mut runs = Vec::with_capacity(points.len());
    for (i, point) in points.into_iter().enumerate() {
        let mut r = run(args, trace, point, sweep)?;
        if i > 0 && !args.same_prompts {
            r.prompt_seed = crate::hash::splitmix64(args.seed ^ (i as u64));
        }
        runs.push(r);
    }
    Ok(runs)
}

/// This shard's part of the trace and its place in the plan. The whole
/// trace was checked (every shard finds the same faults); the shard then
/// keeps its part.
fn shard_part(
    args: &ReplayArgs,
    trace: &Trace,
    block_size: u64,
    sha: [u8; 32],
    (index, count): (u32, u32),
) -> Result<(Trace, ShardRun)> {
    let p = shard::plan(trace, block_size, count, sha);
    if let Some(at) = args.start_at {
        shard::check_start_at(at, args.start_grace_ms, &format!("shard {index}/{count}"))?;
    }
    eprintln!(
        "mc-replay: shard {index}/{count}: {} rows, {} sessions, {} tokens (plan {})",
        p.rows[index as usize],
        p.sessions[index as usize],
        p.tokens[index as usize],
        p.digest.get(..12).unwrap_or_default()
    );
    let part = shard::restrict(trace, &p, index);
    Ok((part, p.run(Some(index), args.start_at)))
}

/// `--cacert`, read and checked (a usage error names the file and the
/// fix); a note when nothing the run reaches is https://.
fn cacert(args: &ReplayArgs, url: &str) -> Result<Option<CaCerts>> {
    let Some(path) = &args.cacert else {
        return Ok(None);
    };
    let ca = CaCerts::load(path).map_err(|e| Error::usage(e.to_string()))?;
    let https = |u: &str| {
        u.get(..8)
            .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
    };
    if !https(url) && !args.metrics_url.as_deref().is_some_and(https) {
        eprintln!(
            "mc-replay: note: --cacert {} is not used: --url is not https://",
            path.display()
        );
    }
    Ok(Some(ca))
}

/// `--shard`'s usage rules, then this process's shard.
fn shard_usage(args: &ReplayArgs, arg: shard::ShardArg) -> Result<(u32, u32)> {
    if args.rates.len() > 1
        || args.concurrencies.len() > 1
        || args.speedups.len() > 1
        || args.out_dir.is_some()
    {
        return Err(Error::usage(
            "--shard runs one value: a sweep (a list, --out-dir) cannot be sharded; run one shard job per value",
        ));
    }
    if args.max_requests.is_some() {
        return Err(Error::usage(
            "--max-requests counts each shard's own requests, so the shards would not send the single              run's first N: cut the trace instead (head -n N)",
        ));
    }
    if args.warmup > 0 {
        return Err(Error::usage(
            "--warmup with --shard: each shard would leave out its own first requests, not the single              run's; cut the warm-up rows off the trace and replay them separately",
        ));
    }
    if args.concurrencies.len() == 1 {
        eprintln!("mc-replay: note: --concurrency applies to each shard on its own");
    }
    shard::resolve(arg, args.shards, &|k| std::env::var(k).ok())
}

/// The engine model's parameters, and the options it cannot honour
/// (usage errors, before the trace is read).
fn engine_params(args: &ReplayArgs) -> Result<EngineParams> {
    let params = args.engine_model.params()?;
    if args.turns == Turns::Delta {
        return Err(Error::usage(
            "--turns delta needs a real server (--url): each turn appends the server's own \
             answer, which the engine model does not write",
        ));
    }
    Ok(params)
}

/// One run's values: the sweep's value for its option, the single value
/// (if any) of each other list.
fn run(
    args: &ReplayArgs,
    trace: &Trace,
    point: Option<(Param, f64)>,
    sweep: Option<&Sweep>,
) -> Result<Run> {
    let mut rate = args.rates.first().copied();
    let mut concurrency = args.concurrencies.first().copied();
    let mut speedup = args.speedups.first().copied().unwrap_or(1.0);
    match point {
        Some((Param::Rate, v)) => rate = Some(v),
        // Listed values are whole numbers of at most 10^6 (checked by the
        // option's parser), so this is exact.
        Some((Param::Concurrency, v)) => concurrency = Some(v as u64),
        Some((Param::Speedup, v)) => speedup = v,
        None => {}
    }
    let arrivals = arrivals(trace, args, rate, concurrency, speedup)?;
    if matches!(point, Some((Param::Speedup, _))) && !matches!(arrivals, Arrivals::Timed { .. }) {
        return Err(Error::usage(
            "a --speedup sweep needs a trace with timestamps (speedup divides them)",
        ));
    }
    let outputs = match (sweep, point) {
        (Some(s), Some((param, v))) => {
            let name = run_name(param, v);
            Outputs {
                dir: Some(s.dir.join(&name)),
                results: Some(under(&s.dir, &format!("{name}/results.jsonl"))),
                summary_json: Some(under(&s.dir, &format!("{name}/summary.json"))),
                sidecar: None,
                summary_csv: Some(under(&s.dir, &format!("{name}/summary.csv"))),
            }
        }
        _ => plain_outputs(args),
    };
    Ok(Run {
        point,
        speedup,
        rate,
        concurrency,
        arrivals,
        outputs,
        prompt_seed: args.seed,
    })
}

/// A plain run's files: `-o`, `--summary`, `--summary-csv`, and the
/// summary beside a results file.
fn plain_outputs(args: &ReplayArgs) -> Outputs {
    let results = args
        .io
        .output
        .clone()
        .filter(|o| o.as_path() != Path::new("-"));
    // Results written to a file get their summary beside them, so
    // mc-report finds the run's description without being told; not when
    // --summary already writes it where mc-report looks.
    let sidecar = results.as_deref().and_then(|out| {
        let side = crate::results::summary::sidecar_path(out);
        let found_anyway = [side.clone(), out.with_file_name("summary.json")]
            .iter()
            .any(|p| args.summary_json.as_deref() == Some(p.as_path()));
        (!found_anyway).then_some(side)
    });
    Outputs {
        dir: None,
        results,
        summary_json: args.summary_json.clone(),
        sidecar,
        summary_csv: args.summary_csv.clone(),
    }
}

/// Every file a plain run writes must be creatable before the first
/// request: its folder exists (exit 73 names it otherwise), and the path
/// is not a folder.
fn check_outputs(args: &ReplayArgs) -> Result<()> {
    let o = plain_outputs(args);
    let files = [
        ("--output", o.results.as_deref()),
        ("--summary", o.summary_json.as_deref()),
        ("--summary-csv", o.summary_csv.as_deref()),
        ("--metrics-out", args.metrics_out.as_deref()),
    ];
    for (option, path) in files {
        if let Some(p) = path {
            check_creatable(option, p)?;
        }
    }
    Ok(())
}

/// `path` can be created or overwritten: its folder is an existing folder
/// and it is not one itself.
pub fn check_creatable(option: &str, path: &Path) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(Error::CantCreate(format!(
            "{option} {}: the folder {} does not exist (create it first; nothing was sent)",
            path.display(),
            parent.display()
        )));
    }
    if path.is_dir() {
        return Err(Error::CantCreate(format!(
            "{option} {}: is a folder, not a file",
            path.display()
        )));
    }
    Ok(())
}

/// The trace, its block size and (when `hashed`) the SHA-256 of its bytes
/// (a shard plan's digest starts from it).
pub fn load_hashed(source: &TraceSource, hashed: bool) -> Result<(Trace, u64, [u8; 32])> {
    let mut policy = ErrorPolicy::new(source.on_error);
    let input = crate::jsonl::open_input(source.input.as_deref())?;
    let (trace, sha) = if hashed {
        let (input, hash) = shard::Hashing::new(input);
        let mut reader = crate::jsonl::LineReader::new(input, source.max_line_bytes);
        let trace = trace::load(&mut reader, &mut policy)?;
        (trace, shard::finish(&hash))
    } else {
        let mut reader = crate::jsonl::LineReader::new(input, source.max_line_bytes);
        (trace::load(&mut reader, &mut policy)?, [0; 32])
    };
    report_skipped("mc-replay", &policy);
    if trace.turns.is_empty() {
        return Err(Error::Input(
            "no records in the input: nothing to replay".into(),
        ));
    }
    let block_size = decide_block_size(&trace, source.block)?;
    Ok((trace, block_size, sha))
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
    // The one rule for a size given by hand (blocks.rs).
    let mut check = crate::blocks::SizeCheck::default();
    for t in &trace.turns {
        if let (trace::Content::Synth, Some(len)) = (&t.content, t.input_length) {
            check.add(t.hash_ids.len() as u64, len, b);
        }
    }
    check.verdict(b).map_err(|e| Error::Input(e.to_string()))?;
    Ok(b)
}

/// Picks the schedule from the trace and the run's values.
fn arrivals(
    trace: &Trace,
    args: &ReplayArgs,
    rate: Option<f64>,
    concurrency: Option<u64>,
    speedup: f64,
) -> Result<Arrivals> {
    if let Some(rate) = rate {
        if trace.turns.iter().any(|t| t.timestamp_ms.is_some()) {
            eprintln!("mc-replay: note: --rate {rate}: the trace's timestamps are ignored");
        }
        return Ok(Arrivals::Rate {
            rate,
            poisson: args.arrival == ArrivalKind::Poisson,
            seed: args.seed,
        });
    }
    check_span(trace, speedup)?;
    // A task (graph session) starts at its earliest root: timed when any
    // of its rows has a timestamp.
    let untimed = trace
        .starts()
        .find(|&i| trace.start_ms(i).is_none())
        .map(|i| &trace.turns[i]);
    let any_timed = trace.starts().any(|i| trace.start_ms(i).is_some());
    match (untimed, any_timed) {
        (None, _) => Ok(Arrivals::Timed { speedup }),
        (Some(t), true) => Err(Error::Data {
            line: t.line,
            err: RecordError::field(
                "timestamp",
                "missing on a row that starts a session, while other rows have one \
                 (give every first turn a timestamp, or use --rate / --concurrency)",
            ),
        }),
        (Some(_), false) if concurrency.is_some() => Ok(Arrivals::Closed),
        (Some(_), false) => Err(Error::usage(
            "the trace has no timestamps: give --rate R (open loop) or --concurrency C (closed loop)",
        )),
    }
}

/// Names the delays over an hour, then applies `--max-delay` to every
/// turn (in the trace's ms, before --speedup) and says how many it cut.
fn cap_delays(trace: &mut Trace, max_delay: Option<f64>) -> Option<crate::delays::DelayCap> {
    let mut long = crate::delays::LongDelays::default();
    for t in &trace.turns {
        if let Some(d) = t.delay_ms {
            long.observe(t.line, d);
        }
    }
    let Some(max) = max_delay else {
        if let Some(note) = long.note() {
            eprintln!("mc-replay: note: {note}");
        }
        return None;
    };
    let mut cap = crate::delays::DelayCap::new(max);
    for t in &mut trace.turns {
        t.delay_ms = t.delay_ms.map(|d| cap.apply(d));
    }
    eprintln!("mc-replay: {}", cap.note());
    Some(cap)
}

/// The schedule must end within [`trace::MAX_SPAN_MS`]: the latest
/// timestamp after the earliest, and every delay, divided by --speedup.
fn check_span(trace: &Trace, speedup: f64) -> Result<()> {
    let limit = |line: u64, field: &str, what: String| Error::Data {
        line,
        err: RecordError::field(
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
        let w = t.tool_wait_ms / speedup;
        if w > trace::MAX_SPAN_MS {
            return Err(limit(
                t.line,
                "tool_wait_ms",
                format!("{w:.0} ms after --speedup"),
            ));
        }
    }
    Ok(())
}

/// The rows against the options: prompt size limits, rows the endpoint
/// cannot send, and the block size (a wrong one would send other prompts
/// than the trace means).
fn check_rows(trace: &Trace, args: &ReplayArgs, block_size: u64) -> Result<()> {
    if let Some(t) = trace
        .turns
        .iter()
        .find(|t| t.intended_input(block_size).unwrap_or(0) > trace::MAX_INPUT_TOKENS)
    {
        return Err(Error::Data {
            line: t.line,
            err: RecordError::field(
                "hash_ids",
                format!(
                    "{} ids of {} tokens is more than the limit of {} prompt tokens",
                    t.hash_ids.len(),
                    block_size,
                    trace::MAX_INPUT_TOKENS
                ),
            ),
        });
    }
    if args.endpoint == Endpoint::Completions {
        if let Some(t) = trace.turns.iter().find(|t| body::needs_chat(t)) {
            return Err(Error::Data {
                line: t.line,
                err: RecordError::field("messages", "rows with messages need --endpoint chat"),
            });
        }
    }
    let c = trace::check_blocks(trace, block_size);
    if let Some(&line) = c.broken.first_lines.first() {
        // The rule is in blocks.rs: a bad line, before anything is sent.
        let t = trace.turns.iter().find(|t| t.line == line);
        return Err(Error::Data {
            line,
            err: RecordError::field(
                "input_length",
                format!(
                    "{} tokens do not fill {} hash ids at block size {} ({} such rows; check --block-size)",
                    t.and_then(|t| t.input_length).unwrap_or(0),
                    t.map_or(0, |t| t.hash_ids.len()),
                    block_size,
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
            block_size,
            c.tail.first_lines_text()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::options::HttpClient;
    use clap::Parser;

    fn trace_file(dir: &Path) -> PathBuf {
        let p = dir.join("t.jsonl");
        std::fs::write(&p, "{\"input_length\":8,\"output_length\":2}\n").unwrap();
        p
    }

    /// Every option a run reads reaches it through the plan, each in its
    /// reader's shape (values picked so none is a default, and checked
    /// against the command line by hand), and the secrets are hidden once,
    /// in the plan.
    #[test]
    fn the_plan_holds_every_setting_a_run_reads() {
        let dir = tempfile::tempdir().unwrap();
        let input = trace_file(dir.path());
        let args = ReplayArgs::parse_from([
            "mc-replay",
            "-i",
            input.to_str().unwrap(),
            "--url",
            "http://u:pw-secret@h:1",
            "--api-key",
            "key-secret",
            "--header",
            "x-api-key: hdr-secret",
            "--model",
            "m",
            "--endpoint",
            "completions",
            "--no-exact-output",
            "--timeout",
            "7",
            "--http-client",
            "blocking",
            "--max-connections",
            "3",
            "--event-loops",
            "2",
            "--read-coalesce-us",
            "9",
            "--max-event-bytes",
            "1000",
            "--no-server-metrics",
            "--metrics-url",
            "http://h:2/m",
            "--metrics-interval",
            "2",
            "--server-block-size",
            "32",
            "--fidelity-threshold",
            "7",
            "--kv-tokens",
            "1000",
            "--rate",
            "5",
            "--max-requests",
            "5",
            "--duration",
            "3",
            "--warmup",
            "1",
            "--drain-timeout",
            "4",
            "--slo",
            "ttft=500",
            "--status-every",
            "2",
            "--line-buffered",
            "--seed",
            "9",
            "--tokenizer",
            "tok",
        ]);
        let plan = plan(args).unwrap();
        let TargetKind::Http {
            url,
            cacert,
            server,
            watch,
            ..
        } = &plan.target
        else {
            panic!("--url: a server's run");
        };
        assert_eq!(url, "http://u:pw-secret@h:1");
        assert!(cacert.is_none());
        assert_eq!(server.endpoint, Endpoint::Completions);
        assert_eq!(server.model.as_deref(), Some("m"));
        assert_eq!(server.api_key.as_deref(), Some("key-secret"));
        assert_eq!(
            server.headers,
            [("x-api-key".to_string(), "hdr-secret".to_string())]
        );
        assert!(!server.exact_output);
        assert_eq!(server.tokenizer.as_deref(), Some("tok"));
        assert_eq!(server.timeout, Duration::from_secs(7));
        assert!(!server.reset_prefix_cache);
        assert_eq!(server.http_client, HttpClient::Blocking);
        assert_eq!(server.max_connections, Some(3));
        assert_eq!(server.event_loops, 2);
        assert_eq!(server.read_coalesce, Duration::from_micros(9));
        assert_eq!(server.max_event_bytes, 1000);
        assert!(!watch.scrape);
        assert_eq!(watch.url.as_deref(), Some("http://h:2/m"));
        assert_eq!(watch.interval, Duration::from_secs(2));
        assert_eq!(watch.server_block_size, Some(32));
        assert_eq!(watch.kv_tokens, Some(1000));
        assert_eq!(watch.threshold_pp, 7.0);
        let l = plan.limits;
        assert_eq!(
            (l.max_requests, l.duration_us, l.warmup, l.drain_us),
            (Some(5), Some(3_000_000), 1, 4_000_000)
        );
        assert_eq!(plan.runs[0].limits(l).concurrency, None);
        let r = &plan.recording;
        assert_eq!(r.slo.and_then(|s| s.ttft_ms), Some(500.0));
        assert!(!r.exact_output);
        assert_eq!(r.status_every, Duration::from_secs(2));
        assert!(r.line_buffered);
        assert_eq!((plan.seed, plan.turns), (9, Turns::Cumulative));
        assert_eq!(plan.described.url.as_deref(), Some("http://***@h:1"));
        assert_eq!(plan.described.endpoint, "completions");
        assert_eq!(plan.described.input, input.display().to_string());
        assert_eq!(
            plan.redactor.redact("pw-secret key-secret hdr-secret"),
            "*** *** ***"
        );
    }

    /// An error found while planning has the options' secrets hidden: the
    /// plan's redactor is made before anything is checked.
    #[test]
    fn a_planning_error_hides_the_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let input = trace_file(dir.path());
        let out = dir.path().join("key-secret").join("r.jsonl");
        let args = ReplayArgs::parse_from([
            "mc-replay",
            "-i",
            input.to_str().unwrap(),
            "--api-key",
            "key-secret",
            "-o",
            out.to_str().unwrap(),
        ]);
        let Err(e) = plan(args) else {
            panic!("-o in a missing folder");
        };
        let text = format!("{e:#}");
        assert!(
            text.contains("***") && !text.contains("key-secret"),
            "{text}"
        );
    }

    /// `--emit-*` is a job: the shards' arguments are this command line's
    /// less the job's own, kept in the plan (the clap struct is not).
    #[test]
    fn emit_is_a_job_with_the_shards_arguments() {
        let argv: Vec<OsString> = [
            "--url",
            "http://h:8000",
            "--emit-slurm",
            "--shards",
            "4",
            "-i",
            "t.jsonl",
            "--seed",
            "3",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let args = ReplayArgs::parse_from(
            std::iter::once(OsString::from("mc-replay")).chain(argv.iter().cloned()),
        );
        let Ok(Task::Emit(job)) = task(args, &argv) else {
            panic!("--emit-slurm: a job");
        };
        assert_eq!(job.rest, ["--url", "http://h:8000", "--seed", "3"]);
        assert_eq!((job.shards, job.k8s), (4, false));
        assert_eq!(job.input, Path::new("t.jsonl"));
    }
}
