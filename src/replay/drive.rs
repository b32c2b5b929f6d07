//! One run of the plan on its target, and its verdict: [`execute`] picks
//! the target (a server, or the engine model) and [`drive`] replays the
//! trace on it: the schedule, the result lines, the summary on stderr and
//! in the files asked for. [`verdict`] is the exit policy of one run. A
//! sweep (`super::sweep`) calls them per value; `super::run` for a plain
//! run. Below them: the plan ([`super::plan`]) and the parts a run is made
//! of.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use super::engine_target;
use super::error::ReplayError;
use super::http;
use super::observe::{self, fidelity, Found, Watch, WatchOptions};
use super::options::Turns;
use super::outcome::RunId;
use super::plan::{Plan, Run, TargetKind};
use super::progress;
use super::recorder::{self, Recorder, RecorderOptions};
use super::routed;
use super::schedule::{Arrivals, Scheduler};
use super::shard;
use super::target::Target;
use crate::error::{Error, Result};
use crate::jsonl::SendOutput;
use crate::results::summary::{summarize, Ending, RunInfo, Summary, TraceRate};

/// The exit policy: a run in which the server stopped answering, or in
/// which every request failed, is a failure.
pub fn verdict(summary: &Summary) -> Result<()> {
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

/// Executes one run of the plan on its target: the one way any run, plain
/// or a sweep's value, on a server or the engine model, is carried out.
pub fn execute(plan: &Plan, run: &Run, stop: Arc<AtomicBool>) -> Result<Summary> {
    match &plan.target {
        TargetKind::Engine {
            params,
            router,
            tokenizer,
            because,
        } => {
            let target = engine_target::EngineTarget::prepared(
                plan.trace.clone(),
                plan.block_size,
                params.clone(),
                router.clone(),
                tokenizer.as_deref(),
                because,
            )?;
            on_engine(plan, run, target, &stop)
        }
        TargetKind::Http {
            urls,
            router: Some(router),
            cacert,
            server: options,
            watch,
            ..
        } => {
            let servers = Servers {
                urls,
                router,
                options,
                watch,
                cacert: cacert.as_ref(),
            };
            routed(plan, run, &servers, stop)
        }
        TargetKind::Http {
            url,
            cacert,
            server: options,
            watch,
            ..
        } => {
            let mut server = http::connect::connect(
                options,
                &plan.trace,
                plan.block_size,
                run.prompt_seed,
                url,
                cacert.as_ref(),
            )?;
            server.run_id = shard_run_id(plan, server.run_id);
            // Before the run's clock starts: the first scrape costs the
            // schedule nothing.
            let watch = Watch::start(
                watch,
                &plan.redactor,
                &server.base,
                &server.headers,
                cacert.as_ref(),
            )?;
            let (model, run_id) = (server.model.clone(), server.run_id);
            // Made by `drive` once the run is ready to send: its clock,
            // the schedule's zero, starts then.
            let make = || server.target(options, &plan.trace, stop.clone());
            drive(plan, run, make, Some(model), run_id, watch, &stop)
        }
    }
}

/// A run on the engine model, in virtual time: its run id from the seed,
/// so the same input gives the same result lines.
fn on_engine(
    plan: &Plan,
    run: &Run,
    target: engine_target::EngineTarget,
    stop: &AtomicBool,
) -> Result<Summary> {
    let run_id = shard_run_id(
        plan,
        RunId(crate::hash::splitmix64(plan.seed ^ 0x656e_6769_6e65)),
    );
    let summary = drive(
        plan,
        run,
        || Ok(target),
        None,
        run_id,
        Watch::NoServer,
        stop,
    )?;
    if let Some(r) = engine_target::EngineReport::of(&summary) {
        eprint!("{}", engine_target::table(&r));
    }
    Ok(summary)
}

/// The servers of a routed run, as the plan checked them.
struct Servers<'a> {
    urls: &'a [String],
    router: &'a crate::engine::router::RouterParams,
    options: &'a http::connect::ServerOptions,
    watch: &'a WatchOptions,
    cacert: Option<&'a http::tls::CaCerts>,
}

/// A run on several servers behind mc-replay's router (`--url A,B,…`):
/// each server found (and its model listed) as a single run's is, one run
/// id and one clock for all; each server's metrics scraped and checked
/// against the requests sent to it (`fidelity_by_server`).
fn routed(plan: &Plan, run: &Run, s: &Servers<'_>, stop: Arc<AtomicBool>) -> Result<Summary> {
    let mut servers = Vec::with_capacity(s.urls.len());
    for url in s.urls {
        let mut server = http::connect::connect(
            s.options,
            &plan.trace,
            plan.block_size,
            run.prompt_seed,
            url,
            s.cacert,
        )?;
        if let Some(first) = servers.first() {
            let first: &http::connect::Server = first;
            server.set_run_id(first.run_id);
        } else {
            let id = shard_run_id(plan, server.run_id);
            server.set_run_id(id);
        }
        servers.push(server);
    }
    let (model, run_id) = (servers[0].model.clone(), servers[0].run_id);
    let names = s.urls.iter().map(|u| plan.redactor.redact(u)).collect();
    // Before the run's clock starts, as for one server.
    let watched: Vec<_> = servers
        .iter()
        .map(|v| observe::Server {
            base: &v.base,
            headers: &v.headers,
        })
        .collect();
    let watch = Watch::start_each(s.watch, &plan.redactor, &watched, s.cacert)?;
    let make = || {
        let clock = http::client::Clock {
            start: std::time::Instant::now(),
        };
        let targets = servers
            .into_iter()
            .map(|v| v.target_on(s.options, &plan.trace, stop.clone(), Some(clock)))
            .collect::<Result<Vec<_>>>()?;
        Ok(routed::RoutedTarget::new(
            targets,
            names,
            crate::engine::router::Router::new(s.router.clone()),
            plan.trace.clone(),
            plan.block_size,
            clock,
        ))
    };
    drive(plan, run, make, Some(model), run_id, watch, &stop)
}

/// A shard's run id (unique across shards); others keep theirs.
fn shard_run_id(plan: &Plan, base: RunId) -> RunId {
    match &plan.shard {
        Some(s) => shard::run_id(base, s.index.unwrap_or(0), &s.plan_digest, plan.start_at),
        None => base,
    }
}

/// `--start-at`: sleeps until it (a shard past its grace fails, exit 75).
fn wait_for_start(plan: &Plan, stop: &AtomicBool) -> Result<()> {
    let (Some(at), Some(s)) = (plan.start_at, &plan.shard) else {
        return Ok(());
    };
    let what = format!("shard {}/{}", s.index.unwrap_or(0), s.count);
    let late = shard::wait_for_start(at, plan.start_grace_ms, &what, stop)?;
    eprintln!("mc-replay: {what} started {late:.3} ms after --start-at {at}");
    Ok(())
}

/// Replays the plan's trace on the target `make` makes:
/// the schedule, the result lines, the summary on stderr and in the files
/// asked for.
///
/// A target's clock starts when it is made, and the schedule's zero is
/// that instant (`--start-at`'s, for a shard), so everything whose cost
/// grows with the trace or the files is done before: opening the results
/// file (truncating last run's 35 MB took 9 ms) and laying out the
/// schedule (3.6 ms for 50,000 rows). Made after them, the first request
/// of a 10,000 req/s run went out 7-51 ms late, and the backlog it left
/// opened a connection per request for the next 300 ms.
pub fn drive<T: Target>(
    plan: &Plan,
    run: &Run,
    make: impl FnOnce() -> Result<T>,
    model: Option<String>,
    run_id: RunId,
    watch: Watch,
    stop: &AtomicBool,
) -> Result<Summary> {
    let out = SendOutput::open_send(run.outputs.results.as_deref(), plan.recording.line_buffered)?;
    let scheduler = Scheduler::new(
        &plan.trace,
        run.arrivals,
        run.limits(plan.limits),
        plan.turns == Turns::Delta,
        stop,
    )
    .on_failed_call(plan.on_failed_call);
    wait_for_start(plan, stop)?;
    let mut target = make()?;
    let info = run_info(plan, run, target.name(), model);
    let rec = Recorder::new(out, recorder_options(plan, run, run_id, target.name()));
    SENDING.store(true, Ordering::SeqCst);
    let progress = progress::Progress::for_stderr(plan.recording.status_every);
    let (end, mut rec) = recorder::record_on_thread(&plan.trace, rec, progress, stop, |sink| {
        scheduler.run(&mut target, sink)
    });
    let ending = Ending {
        not_sent: end.not_sent,
        skipped_dep_failed: end.skipped_dep_failed,
        interrupted: end.interrupted,
        stopped_early: rec.stopped_early.take(),
        workers: end.workers,
    };
    let mut summary = summarize(
        &rec.tally,
        &ending,
        trace_rate(run.arrivals),
        plan.recording.slo,
        info,
    );
    summary.engine = target.report();
    summary.router = target.routing();
    summary.connections = target.connections(rec.tally.sent + rec.tally.warmup);
    match fidelity_of(plan, watch, &rec.sent, &summary) {
        Found::Nothing => {}
        Found::One(f) => summary.fidelity = Some(*f),
        Found::Each(fs) => summary.fidelity_by_server = fs,
    }
    let flushed = rec.finish();
    eprint!("{}", summary.table());
    let routed = summary.router.clone().map(serde_json::from_value);
    if let Some(Ok(r)) = routed {
        eprint!("{}", crate::engine::router::table(&r));
    }
    write_summary(&run.outputs, &summary)?;
    match flushed {
        // A closed stdout stopped the run; the summary above still stands.
        Err(e) if e.is_broken_pipe() => Ok(summary),
        Err(e) => Err(e),
        Ok(()) => Ok(summary),
    }
}

/// How the run's recorder writes its result lines.
fn recorder_options(
    plan: &Plan,
    run: &Run,
    run_id: RunId,
    target: &'static str,
) -> RecorderOptions {
    RecorderOptions {
        slo: plan.recording.slo,
        run_id,
        target,
        block_size: plan.block_size,
        exact_output: plan.recording.exact_output,
        redactor: plan.redactor.clone(),
        max_consecutive_failures: plan.recording.max_consecutive_failures,
        shard: plan.shard.as_ref().map(|s| {
            (
                format!("{}/{}", s.index.unwrap_or(0), s.count),
                s.plan_digest.clone(),
            )
        }),
        gap_scale: super::schedule::gap_scale(run.arrivals),
    }
}

/// The summary's fidelity section, when the run watched a server.
fn fidelity_of(
    plan: &Plan,
    watch: Watch,
    sent: &[fidelity::SentRequest],
    summary: &Summary,
) -> Found {
    // A server's run only (the engine model's watch has no section).
    let opts = match &plan.target {
        TargetKind::Http { watch, .. } => Some(watch),
        TargetKind::Engine { .. } => None,
    };
    watch.finish(&fidelity::Inputs {
        trace: &plan.trace,
        trace_block: plan.block_size,
        delta_turns: plan.turns == Turns::Delta,
        sent,
        server_block_size: opts.and_then(|w| w.server_block_size),
        kv_tokens: opts.and_then(|w| w.kv_tokens),
        threshold_pp: opts.map_or(fidelity::DEFAULT_THRESHOLD_PP, |w| w.threshold_pp),
        intended_rate: summary.trace_rate,
        achieved_rate: summary.send_rate,
        lag_p99_ms: summary.metrics.lag.as_ref().map(|l| l.p99),
    })
}

/// The summary into the files asked for: JSON (`--summary`, beside the
/// results) and CSV.
fn write_summary(o: &super::plan::Outputs, summary: &Summary) -> Result<()> {
    let json = serde_json::to_vec_pretty(summary).map_err(|e| Error::Other(e.into()))?;
    for p in [&o.summary_json, &o.sidecar].into_iter().flatten() {
        write_file(p, &json)?;
    }
    if let Some(p) = &o.summary_csv {
        write_file(p, summary.csv().as_bytes())?;
    }
    Ok(())
}

fn write_file(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|source| Error::Output {
        path: path.to_path_buf(),
        source,
    })
}

/// How the summary finds the rate the trace asks for.
fn trace_rate(arrivals: Arrivals) -> TraceRate {
    match arrivals {
        Arrivals::Rate { rate, .. } => TraceRate::Fixed(rate),
        Arrivals::Closed => TraceRate::None,
        Arrivals::Timed { .. } => TraceRate::Timed,
    }
}

/// The summary's description of the run. Called just before the first
/// request, so `start_unix_ms` is the run's zero (within microseconds).
fn run_info(plan: &Plan, run: &Run, target: &str, model: Option<String>) -> RunInfo {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let arrival = match run.arrivals {
        Arrivals::Timed { .. } => "timestamps",
        Arrivals::Rate { poisson: true, .. } => "poisson",
        Arrivals::Rate { poisson: false, .. } => "constant",
        Arrivals::Closed => "closed",
    };
    RunInfo {
        tool: "mc-replay".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        target: target.into(),
        url: plan.described.url.clone().filter(|_| target == "http"),
        endpoint: plan.described.endpoint.into(),
        model,
        input: plan.described.input.clone(),
        rows: plan.trace.turns.len() as u64,
        speedup: run.speedup,
        arrival: arrival.into(),
        rate: run.rate,
        concurrency: run.concurrency,
        turns: plan.described.turns.into(),
        seed: run.prompt_seed,
        block_size: plan.block_size,
        start_unix_ms: now.as_micros() as f64 / 1000.0,
        start_time: crate::results::summary::utc_iso8601(now.as_secs()),
        host: host_name(),
        shard: plan.shard.clone(),
        max_delay: plan.delay_cap,
        options: Some(plan.described.options.clone()),
    }
}

/// The machine's name (Linux: the kernel's; elsewhere `$HOSTNAME`).
fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

/// Set when the first run's schedule starts: from then on a signal stops
/// sending and lets requests in flight finish.
static SENDING: AtomicBool = AtomicBool::new(false);

/// Installs Ctrl-C / SIGTERM handling: the first signal stops sending, the
/// second ends the process at once.
pub fn install_signals(stop: Arc<AtomicBool>) -> Result<()> {
    ctrlc::set_handler(move || {
        // Before the first request nothing is lost by ending at once, and
        // the waits before it (reading stdin, the model listing, a
        // tokenizer) are not all interruptible from inside.
        if !SENDING.load(Ordering::SeqCst) {
            eprintln!("\nmc-replay: stopped before the first request");
            std::process::exit(130);
        }
        if stop.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!("\nmc-replay: stopping: no new requests; waiting for those in flight");
    })
    .map_err(|e| ReplayError::Signals(e).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::options::ReplayArgs;
    use clap::Parser;

    /// The target (and with it the schedule's zero) is made only once the
    /// results file is open and truncated and the schedule laid out: a
    /// large file left by an earlier run must not make the first request
    /// late. The target's maker sees the file already empty.
    #[test]
    fn the_targets_clock_starts_after_the_outputs_are_ready() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.jsonl");
        let results = dir.path().join("results.jsonl");
        std::fs::write(
            &input,
            "{\"timestamp\":0,\"input_length\":8,\"output_length\":2}\n",
        )
        .unwrap();
        std::fs::write(&results, vec![b'x'; 1 << 20]).unwrap();
        let args = ReplayArgs::parse_from([
            "mc-replay",
            "-i",
            input.to_str().unwrap(),
            "-o",
            results.to_str().unwrap(),
        ]);
        let plan = crate::replay::plan::plan(args).unwrap();
        let TargetKind::Engine { params, .. } = &plan.target else {
            panic!("no --url: the engine model");
        };
        let target = engine_target::EngineTarget::prepared(
            plan.trace.clone(),
            plan.block_size,
            params.clone(),
            None,
            None,
            "no --url",
        )
        .unwrap();
        let mut made_with = None;
        let make = || {
            made_with = Some(std::fs::metadata(&results).unwrap().len());
            Ok(target)
        };
        let stop = AtomicBool::new(false);
        let summary = drive(
            &plan,
            &plan.runs[0],
            make,
            None,
            RunId(1),
            Watch::NoServer,
            &stop,
        )
        .unwrap();
        assert_eq!(made_with, Some(0));
        assert_eq!(summary.requests.ok, 1);
    }
}
