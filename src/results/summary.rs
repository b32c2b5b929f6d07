//! A run's summary: the table on stderr, the JSON (`--summary`, and the
//! `R.summary.json` beside `-o R.jsonl`) and the CSV (`--summary-csv`), all
//! from one [`Summary`], made by [`summarize`] from a [`Tally`] of result
//! lines and an [`Ending`] (how the run ended). mc-replay and mc-report
//! both summarise through it, so their numbers are the same numbers.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::fidelity::Fidelity;
use super::line::{ms, ErrorKind};
use super::tally::{Slo, Stats, Tally};
use super::tasks::TaskSummary;
use crate::error::{Error, Result};

/// Schedule lag p99 above this means the client could not keep the schedule.
pub const DEGRADED_LAG_P99_MS: f64 = 50.0;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// What was run, so two runs can be compared.
    pub run: RunInfo,
    pub requests: Counts,
    /// Failed requests by error kind.
    pub errors: BTreeMap<ErrorKind, u64>,
    /// Last end − first send of the measured requests, in seconds.
    pub duration_s: f64,
    pub request_throughput: f64,
    pub output_token_throughput: f64,
    pub input_token_throughput: f64,
    pub tokens: Tokens,
    /// Arrivals sent per second: rows that start something (a session's
    /// first turn, or a row without a session), whose times the schedule
    /// sets; later turns follow their session instead.
    pub send_rate: f64,
    /// The arrival rate the trace asks for, over the rows actually sent
    /// (timed: first turns over their scheduled span, which is the timestamp
    /// span ÷ speedup; `--rate`: the rate; closed loop: null).
    pub trace_rate: Option<f64>,
    pub metrics: Metrics,
    pub slo: Option<Slo>,
    /// Requests that met every SLO bound, and their rate.
    pub goodput: Option<Goodput>,
    /// Schedule lag p99 over 50 ms: latencies include client backlog.
    pub degraded: bool,
    pub workers: usize,
    /// Set when `--max-consecutive-failures` ended the run.
    pub stopped_early: Option<StoppedEarly>,
    /// The engine model's parameters and statistics (engine target only).
    pub engine: Option<serde_json::Value>,
    /// The router's report, per worker (`--engine-workers N`, `--url
    /// A,B,…`); absent with one worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<serde_json::Value>,
    /// Did the server see the run the trace describes (real servers only).
    pub fidelity: Option<Fidelity>,
    /// Several servers behind mc-replay's router (`--url A,B,…`): each
    /// server's check of the requests sent to it, in the order given (the
    /// result lines' `worker`); `fidelity` is then null.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fidelity_by_server: Vec<Fidelity>,
    /// How the agent-graph tasks went (runs of traces with graphs only;
    /// absent in files of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<TaskSummary>,
    /// The connections the evented client opened (absent for the engine
    /// model, the blocking client and files of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<Connections>,
}

/// What the client's connections cost: a connection opened per request is
/// a port left in TIME_WAIT for 60 s, and at thousands of requests a
/// second the kernel's search for a free port becomes the client's work.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Connections {
    /// TCP connects the client made (each a new connection).
    pub connects: u64,
    /// `connects` over the requests sent (warm-up included): 1 when no
    /// connection was reused, near 0 when a few carried them all.
    pub per_request: f64,
    /// The most connections open at once.
    pub most_open: u64,
    /// The most connections the client allowed itself: `--max-connections`,
    /// or the largest cap it grew to without it (`null` under
    /// `--max-connections 0`, no cap).
    pub cap: Option<u64>,
    /// True when the cap followed the measured rate and latency (no
    /// `--max-connections`).
    pub auto: bool,
}

impl Connections {
    /// `connects` per request over `requests` sent.
    pub fn per(connects: u64, requests: u64) -> f64 {
        if requests == 0 {
            0.0
        } else {
            connects as f64 / requests as f64
        }
    }
}

/// The run's description.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunInfo {
    pub tool: String,
    pub version: String,
    /// `http` (a server) or `engine` (the model).
    pub target: String,
    pub url: Option<String>,
    pub endpoint: String,
    pub model: Option<String>,
    /// The input file, or `-` for stdin.
    pub input: String,
    /// Rows loaded (skipped bad lines not included).
    pub rows: u64,
    pub speedup: f64,
    /// How arrivals were timed: `timestamps`, `poisson`, `constant` or `closed`.
    pub arrival: String,
    pub rate: Option<f64>,
    pub concurrency: Option<u64>,
    pub turns: String,
    pub seed: u64,
    pub block_size: u64,
    /// Wall-clock time of the run's zero (ms since the Unix epoch), so
    /// result times can be lined up with server logs.
    pub start_unix_ms: f64,
    /// The same, as UTC ISO 8601.
    pub start_time: String,
    pub host: Option<String>,
    /// The shard plan this run is part of (`mc-replay --shard`), or, in a
    /// summary mc-report merged from every shard, the plan they ran.
    /// Absent in unsharded runs and in files of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardRun>,
    /// `--max-delay`: the cap on think times and how many it cut. Absent
    /// when no cap was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay: Option<crate::delays::DelayCap>,
    /// The other options that change what the server sees (the load, the
    /// requests' bodies and heads). Absent in files of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<LoadOptions>,
}

/// The options of a run that change what the server sees, beyond the
/// fields of [`RunInfo`] itself: two runs that differ here are not the
/// same load, and the shards of one run must agree on every one.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct LoadOptions {
    /// Answers asked for at exactly `output_length` (min_tokens,
    /// ignore_eos); false under `--no-exact-output`.
    pub exact_output: bool,
    /// `--timeout`, seconds per request.
    pub timeout_s: f64,
    /// SHA-256 (hex) of `--extra-body`'s JSON: its values may be private.
    pub extra_body_sha256: Option<String>,
    /// The names of the `--header`s (lower case, sorted; values are not
    /// written: they may be credentials).
    pub header_names: Vec<String>,
    /// `--tokenizer`.
    pub tokenizer: Option<String>,
    /// `--max-requests`, `--duration` (s) and `--warmup`.
    pub max_requests: Option<u64>,
    pub duration_s: Option<f64>,
    pub warmup: u64,
    /// `--max-connections`: `null` when not given (a cap grown on demand),
    /// 0 for none (one connection per request in flight).
    pub max_connections: Option<u64>,
    /// `--reset-prefix-cache`.
    pub reset_prefix_cache: bool,
    /// `--engine-profile` on the engine model (`default` without it).
    pub engine_profile: Option<String>,
    /// Several workers behind mc-replay's router (`--engine-workers N`,
    /// `--url A,B,…`): how many, and `--router`. Absent with one worker
    /// and in summaries of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<String>,
}

/// A sharded run's part in its plan: the same `plan_digest`, `rows` and
/// `tokens` in every shard's summary.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ShardRun {
    /// This shard (0-based); `None` in a merged summary (all of them).
    pub index: Option<u32>,
    /// Shards in the plan.
    pub count: u32,
    /// SHA-256 (hex) of the trace's bytes, the shard count and every
    /// shard's row and token counts.
    pub plan_digest: String,
    /// Rows each shard replays, by shard index.
    pub rows: Vec<u64>,
    /// Tokens (input + output asked for) each shard replays.
    pub tokens: Vec<u64>,
    /// `--start-at`: the wall-clock instant (ms since the Unix epoch) that
    /// is every shard's schedule zero.
    pub start_at_unix_ms: Option<u64>,
}

/// How the trace's own arrival rate is known.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TraceRate {
    /// Timestamps: from the scheduled times of the arrivals sent.
    Timed,
    /// `--rate`.
    Fixed(f64),
    /// Closed loop: none.
    None,
}

/// Why a run ended before its trace did.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StoppedEarly {
    /// Requests in a row that could not reach the server.
    pub consecutive_failures: u64,
    pub last_error: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counts {
    /// Measured requests sent.
    pub sent: u64,
    pub ok: u64,
    pub failed: u64,
    pub warmup: u64,
    /// Rows never sent (limits, stop, sessions cut short).
    pub not_sent: u64,
    /// Of those, the calls (and later turns) skipped because a call they
    /// wait for failed (`mc-replay --on-failed-call skip`). Absent in
    /// files of older versions and when none were.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_dep_failed: u64,
    /// Stopped by a signal or a closed output.
    pub interrupted: bool,
    /// Ok answers shorter than the exact length asked for.
    #[serde(default)]
    pub short: u64,
    /// Streams the server ended at `[DONE]` without a finish reason (among
    /// the `incomplete` errors).
    #[serde(default)]
    pub cut_at_done: u64,
    /// Requests sent again after a kept-alive connection closed before
    /// answering (the server may have read them twice). Absent in
    /// summaries of older versions.
    #[serde(default)]
    pub resends: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tokens {
    /// Prompt tokens the rows asked for (successful requests).
    pub input_intended: u64,
    /// Prompt tokens the server reported.
    pub input_reported: u64,
    /// Output tokens (reported, or counted where the server sent no usage).
    pub output: u64,
    /// Requests whose output count is estimated from events.
    pub output_estimated_requests: u64,
    /// Output tokens asked for and received over every measured request,
    /// failed ones included.
    #[serde(default)]
    pub output_requested: u64,
    #[serde(default)]
    pub output_received: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    pub ttft: Option<Stats>,
    pub tpot: Option<Stats>,
    pub itl: Option<Stats>,
    pub e2e: Option<Stats>,
    pub sched_latency: Option<Stats>,
    pub lag: Option<Stats>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Goodput {
    pub requests: u64,
    pub rate: f64,
}

/// How a run ended, as far as its summary needs to know (what result
/// lines cannot say).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ending {
    /// Rows never sent (limits, a stop, a session cut short).
    pub not_sent: u64,
    /// Of those, the calls skipped because a call they wait for failed
    /// (`--on-failed-call skip`).
    pub skipped_dep_failed: u64,
    /// Stopped by a signal (or a closed output).
    pub interrupted: bool,
    /// Stopped by `--max-consecutive-failures`.
    pub stopped_early: Option<StoppedEarly>,
    /// Requests the client could have in flight at once.
    pub workers: usize,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

pub fn summarize(
    t: &Tally,
    end: &Ending,
    trace_rate: TraceRate,
    slo: Option<Slo>,
    run: RunInfo,
) -> Summary {
    let first = t.first_send_us.unwrap_or(0);
    let duration_s = ms(t.last_end_us.saturating_sub(first)) / 1000.0;
    let per_s = |n: u64| {
        if duration_s > 0.0 {
            n as f64 / duration_s
        } else {
            0.0
        }
    };
    let send_rate = t.start_sends.rate().unwrap_or(0.0);
    let trace_rate = match trace_rate {
        TraceRate::Timed => t.start_scheds.rate(),
        TraceRate::Fixed(r) => Some(r),
        TraceRate::None => None,
    };
    let lag = t.lag.stats();
    let degraded = lag.as_ref().is_some_and(|l| l.p99 > DEGRADED_LAG_P99_MS);
    Summary {
        run,
        requests: Counts {
            sent: t.sent,
            ok: t.ok,
            failed: t.failed,
            warmup: t.warmup,
            not_sent: end.not_sent,
            skipped_dep_failed: end.skipped_dep_failed,
            interrupted: end.interrupted,
            short: t.short,
            cut_at_done: t.cut_at_done,
            resends: t.resends,
        },
        errors: t.errors.clone(),
        duration_s,
        request_throughput: per_s(t.ok),
        output_token_throughput: per_s(t.completion_tokens),
        input_token_throughput: per_s(t.input_tokens),
        tokens: Tokens {
            input_intended: t.input_tokens,
            input_reported: t.prompt_tokens,
            output: t.completion_tokens,
            output_estimated_requests: t.estimated_tokens,
            output_requested: t.output_requested,
            output_received: t.output_received,
        },
        send_rate,
        trace_rate,
        metrics: Metrics {
            ttft: t.ttft.stats(),
            tpot: t.tpot.stats(),
            itl: t.itl.stats(),
            e2e: t.e2e.stats(),
            sched_latency: t.sched_latency.stats(),
            lag,
        },
        slo,
        goodput: slo.map(|_| Goodput {
            requests: t.goodput,
            rate: per_s(t.goodput),
        }),
        degraded,
        workers: end.workers,
        stopped_early: end.stopped_early.clone(),
        engine: None,
        router: None,
        fidelity: None,
        fidelity_by_server: Vec::new(),
        tasks: t.tasks.summary(),
        connections: None,
    }
}

/// Reads a summary JSON (`--summary`, or the one beside a results file).
pub fn read(path: &Path) -> Result<Summary> {
    let bytes = std::fs::read(path).map_err(|source| Error::NoInput {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        Error::Input(format!(
            "{}: not an mc-replay summary (--summary JSON): {e}",
            path.display()
        ))
    })
}

/// Where the summary goes beside a results file, so the two travel
/// together (mc-replay writes it next to `--output FILE`; mc-report looks
/// for it): `results.jsonl` → `results.summary.json`.
pub fn sidecar_path(results: &Path) -> PathBuf {
    let name = results
        .file_name()
        .map_or_else(|| "results".into(), |n| n.to_string_lossy().into_owned());
    let stem = name.strip_suffix(".jsonl").unwrap_or(&name);
    results.with_file_name(format!("{stem}.summary.json"))
}

/// The distributions, in the order the table and the CSV show them.
const METRICS: [&str; 6] = ["ttft", "tpot", "itl", "e2e", "sched_latency", "lag"];

impl Summary {
    fn rows(&self) -> impl Iterator<Item = (&'static str, &Stats)> {
        let m = &self.metrics;
        [
            m.ttft.as_ref(),
            m.tpot.as_ref(),
            m.itl.as_ref(),
            m.e2e.as_ref(),
            m.sched_latency.as_ref(),
            m.lag.as_ref(),
        ]
        .into_iter()
        .zip(METRICS)
        .filter_map(|(st, name)| st.map(|st| (name, st)))
    }

    /// The readable table for stderr, section by section.
    pub fn table(&self) -> String {
        self.table_as("mc-replay")
    }

    /// The table with `tool` naming the first line (mc-report prints the
    /// same table).
    pub fn table_as(&self, tool: &str) -> String {
        let mut s = String::new();
        self.table_requests(tool, &mut s);
        self.table_rates(&mut s);
        self.table_tokens(&mut s);
        self.table_goodput(&mut s);
        self.table_metrics(&mut s);
        self.table_counts(&mut s);
        self.table_connections(&mut s);
        if let Some(t) = &self.tasks {
            t.table(&mut s);
        }
        for f in self.fidelity.iter().chain(&self.fidelity_by_server) {
            f.table(&mut s);
        }
        self.table_warnings(&mut s);
        s
    }

    /// `mc-replay: 10 requests: 9 ok, 1 failed (http_5xx 1); …`
    fn table_requests(&self, tool: &str, s: &mut String) {
        let r = &self.requests;
        let _ = write!(
            s,
            "{tool}: {} requests: {} ok, {} failed",
            r.sent, r.ok, r.failed
        );
        if !self.errors.is_empty() {
            let kinds: Vec<String> = self
                .errors
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            let _ = write!(s, " ({})", kinds.join(", "));
        }
        if r.warmup > 0 {
            let _ = write!(s, "; {} warm-up", r.warmup);
        }
        if r.not_sent > 0 {
            let _ = write!(s, "; {} rows not sent", r.not_sent);
            if r.skipped_dep_failed > 0 {
                let _ = write!(
                    s,
                    " ({} skipped: a call they wait for failed)",
                    r.skipped_dep_failed
                );
            }
        }
        if r.interrupted {
            s.push_str("; interrupted");
        }
        s.push('\n');
    }

    fn table_rates(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "duration {:.3} s; {:.2} req/s; output {:.1} tok/s; input {:.1} tok/s",
            self.duration_s,
            self.request_throughput,
            self.output_token_throughput,
            self.input_token_throughput
        );
        let _ = write!(s, "arrival rate {:.2} req/s", self.send_rate);
        // Who asked for the rate: the trace's timestamps, or --rate.
        let asker = match self.run.arrival.as_str() {
            "poisson" | "constant" => "--rate asks",
            _ => "the trace asks",
        };
        if let Some(t) = self.trace_rate {
            let _ = write!(s, " ({asker} for {t:.2} req/s)");
        }
        // The rate counts session starts (their times are the schedule's);
        // later turns follow their sessions, so throughput can be higher.
        if self.request_throughput > self.send_rate * 1.05 && self.send_rate > 0.0 {
            s.push_str("; session starts only, later turns follow their sessions");
        }
        s.push('\n');
    }

    fn table_tokens(&self, s: &mut String) {
        let tk = &self.tokens;
        if tk.input_reported > 0 {
            let _ = writeln!(
                s,
                "prompt tokens: {} intended, {} reported by the {} ({:+.2}%)",
                tk.input_intended,
                tk.input_reported,
                if self.run.target == "engine" {
                    "engine model"
                } else {
                    "server"
                },
                pct(tk.input_reported, tk.input_intended)
            );
        }
        if tk.output_estimated_requests > 0 {
            let _ = writeln!(
                s,
                "output tokens of {} requests are counted from events (the server sent no usage)",
                tk.output_estimated_requests
            );
        }
    }

    fn table_goodput(&self, s: &mut String) {
        if let (Some(slo), Some(g)) = (&self.slo, &self.goodput) {
            let _ = writeln!(
                s,
                "goodput {:.2} req/s ({} requests within ttft {} tpot {} e2e {})",
                g.rate,
                g.requests,
                bound(slo.ttft_ms),
                bound(slo.tpot_ms),
                bound(slo.e2e_ms)
            );
        }
    }

    /// One line per distribution, columns right-aligned.
    fn table_metrics(&self, s: &mut String) {
        const HEAD: [&str; 10] = [
            "mean", "std", "min", "p50", "p90", "p95", "p99", "p99.9", "max", "count",
        ];
        let _ = write!(s, "{:<14}", "ms");
        for h in HEAD {
            let _ = write!(s, "{h:>9}");
        }
        s.push('\n');
        for (name, st) in self.rows() {
            let _ = write!(s, "{name:<14}");
            for v in [
                st.mean, st.std, st.min, st.p50, st.p90, st.p95, st.p99, st.p99_9, st.max,
            ] {
                let _ = write!(s, "{:>9}", Ms(v));
            }
            let _ = writeln!(s, "{:>9}", st.count);
        }
    }

    /// Every distribution over fewer requests than the ok ones says why,
    /// and answers that are short or cut say what it likely means.
    fn table_counts(&self, s: &mut String) {
        let ok = self.requests.ok;
        let m = &self.metrics;
        let why = [
            ("ttft", &m.ttft, "had no output event"),
            ("tpot", &m.tpot, "had fewer than 2 output tokens"),
            ("e2e", &m.e2e, "had no end time"),
        ];
        for (name, st, reason) in why {
            let n = st.as_ref().map_or(0, |st| st.count);
            if ok > 0 && n < ok {
                let _ = writeln!(
                    s,
                    "note: {name} over {n} of {ok} ok requests: {} {reason}",
                    ok - n
                );
            }
        }
        let r = &self.requests;
        if r.short > 0 {
            let _ = writeln!(
                s,
                "note: {} ok requests ended short of the exact length asked for: the server \
                 ignored ignore_eos/min_tokens (--no-exact-output stops asking)",
                r.short
            );
        }
        if r.resends > 0 {
            let _ = writeln!(
                s,
                "note: {} requests were sent again after the server closed a kept-alive \
                 connection before answering: it may have read some twice",
                r.resends
            );
        }
        if r.cut_at_done > 0 {
            let _ = writeln!(
                s,
                "note: the server cut {} streams ([DONE] before any finish_reason): \
                 llama-cpp-python does this to a stream when another request arrives, \
                 unless started with `--interrupt_requests False`",
                r.cut_at_done
            );
        }
        let tk = &self.tokens;
        if tk.output_requested > 0 && tk.output_received != tk.output_requested {
            let _ = writeln!(
                s,
                "output tokens: {} requested, {} received over all {} measured requests ({:+.2}%)",
                tk.output_requested,
                tk.output_received,
                r.sent,
                pct(tk.output_received, tk.output_requested)
            );
        }
    }

    /// `connections: 12 opened for 20000 requests (0.0006 a request), …`
    fn table_connections(&self, s: &mut String) {
        let Some(c) = &self.connections else {
            return;
        };
        let requests = self.requests.sent + self.requests.warmup;
        let _ = write!(
            s,
            "connections: {} opened for {requests} requests ({:.4} a request), at most {} open at once",
            c.connects, c.per_request, c.most_open
        );
        match (c.cap, c.auto) {
            (Some(cap), true) => {
                let _ = write!(s, "; cap {cap} (grown with the measured rate and latency)");
            }
            (Some(cap), false) => {
                let _ = write!(s, "; cap {cap} (--max-connections)");
            }
            (None, _) => s.push_str("; no cap (--max-connections 0)"),
        }
        s.push('\n');
    }

    fn table_warnings(&self, s: &mut String) {
        for w in self.warnings() {
            let _ = writeln!(s, "{w}");
        }
    }

    /// What makes this run's numbers doubtful, one sentence each: the
    /// table closes with them, and mc-report's page opens with them.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.degraded {
            let p99 = self.metrics.lag.as_ref().map_or(0.0, |l| l.p99);
            out.push(format!(
                "WARNING: degraded run: schedule lag p99 is {p99:.1} ms (> {DEGRADED_LAG_P99_MS} ms); \
                 the client could not keep the schedule, so latencies include its backlog \
                 (see sched_latency)"
            ));
        }
        if let Some(g) = &self.stopped_early {
            out.push(format!(
                "STOPPED EARLY: {} requests in a row could not reach the server",
                g.consecutive_failures
            ));
        }
        out
    }

    /// Every caution of the run for a reader who sees nothing else: the
    /// warnings, a flagged fidelity check, short and cut answers.
    pub fn cautions(&self) -> Vec<String> {
        let mut out = self.warnings();
        if let Some(f) = self.fidelity.as_ref().filter(|f| f.flagged) {
            out.push(format!("FIDELITY FLAGGED: {}", f.verdict));
        }
        for f in self.fidelity_by_server.iter().filter(|f| f.flagged) {
            let url = f.metrics_url.as_deref().unwrap_or("-");
            out.push(format!("FIDELITY FLAGGED at {url}: {}", f.verdict));
        }
        let r = &self.requests;
        if r.cut_at_done > 0 {
            out.push(format!(
                "the server cut {} streams ([DONE] before any finish_reason)",
                r.cut_at_done
            ));
        }
        if r.resends > 0 {
            out.push(format!(
                "{} requests were sent again after a kept-alive connection closed (the server \
                 may have read them twice)",
                r.resends
            ));
        }
        if r.short > 0 {
            out.push(format!(
                "{} ok requests ended short of the exact length asked for (the server ignored \
                 ignore_eos/min_tokens)",
                r.short
            ));
        }
        out
    }

    /// One table, one row per metric: scalars fill `value`, distributions
    /// the statistics columns (ms).
    pub fn csv(&self) -> String {
        let mut s = String::from(
            "metric,value,count,mean_ms,std_ms,min_ms,p50_ms,p90_ms,p95_ms,p99_ms,p99_9_ms,max_ms\n",
        );
        let mut scalar = |name: &str, v: &dyn std::fmt::Display| {
            let _ = writeln!(s, "{name},{v},,,,,,,,,,");
        };
        let r = &self.requests;
        scalar("requests_sent", &r.sent);
        scalar("requests_ok", &r.ok);
        scalar("requests_failed", &r.failed);
        scalar("requests_warmup", &r.warmup);
        scalar("rows_not_sent", &r.not_sent);
        if r.resends > 0 {
            scalar("requests_resent", &r.resends);
        }
        if r.skipped_dep_failed > 0 {
            scalar("calls_skipped_dep_failed", &r.skipped_dep_failed);
        }
        scalar("duration_s", &self.duration_s);
        scalar("request_throughput", &self.request_throughput);
        scalar("output_token_throughput", &self.output_token_throughput);
        scalar("input_token_throughput", &self.input_token_throughput);
        scalar("arrival_rate", &self.send_rate);
        if let Some(t) = self.trace_rate {
            scalar("trace_arrival_rate", &t);
        }
        scalar(
            "output_estimated_requests",
            &self.tokens.output_estimated_requests,
        );
        if let Some(g) = &self.goodput {
            scalar("goodput_requests", &g.requests);
            scalar("goodput_rate", &g.rate);
        }
        for (k, n) in &self.errors {
            scalar(&format!("errors_{k}"), n);
        }
        if let Some(c) = &self.connections {
            scalar("connects", &c.connects);
            scalar("connects_per_request", &c.per_request);
            scalar("connections_most_open", &c.most_open);
        }
        scalar("degraded", &self.degraded);
        if let Some(f) = &self.fidelity {
            let h = &f.hit_rate;
            for (name, v) in [
                ("hit_rate_observed", h.observed),
                ("hit_rate_predicted", h.predicted),
                ("hit_rate_predicted_at_kv", h.predicted_at_kv),
            ] {
                if let Some(v) = v {
                    scalar(name, &v);
                }
            }
            scalar("fidelity_flagged", &f.flagged);
        }
        for (name, st) in self.rows() {
            let _ = writeln!(
                s,
                "{name},,{},{},{},{},{},{},{},{},{},{}",
                st.count, st.mean, st.std, st.min, st.p50, st.p90, st.p95, st.p99, st.p99_9, st.max
            );
        }
        if let Some(t) = &self.tasks {
            t.csv(&mut s);
        }
        s
    }
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        (a as f64 - b as f64) / b as f64 * 100.0
    }
}

fn bound(b: Option<f64>) -> String {
    b.map_or("-".into(), |v| format!("{v}ms"))
}

/// A time in ms with as many decimals as its size deserves: 3 below
/// 10 ms, 1 below 1 s, none above. Padding applies to the whole number.
pub struct Ms(pub f64);

impl std::fmt::Display for Ms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.0;
        let decimals = if v >= 1000.0 {
            0
        } else if v >= 10.0 {
            1
        } else {
            3
        };
        f.pad(&format!("{v:.decimals$}"))
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

/// The task section's lines in the table and the CSV.
impl TaskSummary {
    /// The summary table's task lines.
    pub fn table(&self, s: &mut String) {
        use std::fmt::Write as _;
        let _ = write!(
            s,
            "tasks: {} ({} calls; {} with a failed call)",
            self.tasks, self.calls, self.tasks_with_failed_call
        );
        if let Some(m) = &self.makespan {
            let _ = write!(
                s,
                "; makespan ms p50 {} p90 {} p99 {} max {}",
                Ms(m.p50),
                Ms(m.p90),
                Ms(m.p99),
                Ms(m.max)
            );
        }
        s.push('\n');
        let p = &self.critical_path_ms;
        let share = |x: f64| {
            if p.total() > 0.0 {
                x / p.total() * 100.0
            } else {
                0.0
            }
        };
        let _ = writeln!(
            s,
            "tasks: critical path {:.0}% of a task's time (mean); on it LLM {:.1}%, \
             wait {:.1}%, think {:.1}%, tool {:.1}%",
            self.critical_path_share * 100.0,
            share(p.llm),
            share(p.wait),
            share(p.think),
            share(p.tool)
        );
        let q = &self.parallelism;
        let _ = write!(
            s,
            "tasks: calls in flight per task: achieved mean {} max {}, the graph's timing \
             mean {} max {}",
            q.achieved_mean, q.achieved_max, q.recorded_mean, q.recorded_max
        );
        if q.tasks_below_recorded > 0 {
            let _ = write!(
                s,
                " ({} tasks below: calls held back by the client or --concurrency)",
                q.tasks_below_recorded
            );
        }
        s.push('\n');
    }

    /// The summary CSV's task rows (scalars, then the makespan's
    /// distribution as `task_makespan`).
    pub fn csv(&self, s: &mut String) {
        use std::fmt::Write as _;
        let p = &self.critical_path_ms;
        let q = &self.parallelism;
        let scalars: [(&str, f64); 13] = [
            ("tasks", self.tasks as f64),
            ("task_calls", self.calls as f64),
            ("tasks_with_failed_call", self.tasks_with_failed_call as f64),
            ("task_critical_path_share", self.critical_path_share),
            ("task_critical_path_llm_ms", p.llm),
            ("task_critical_path_wait_ms", p.wait),
            ("task_critical_path_think_ms", p.think),
            ("task_critical_path_tool_ms", p.tool),
            ("task_parallelism_achieved_mean", q.achieved_mean),
            ("task_parallelism_achieved_max", f64::from(q.achieved_max)),
            ("task_parallelism_recorded_mean", q.recorded_mean),
            ("task_parallelism_recorded_max", f64::from(q.recorded_max)),
            (
                "tasks_below_recorded_parallelism",
                q.tasks_below_recorded as f64,
            ),
        ];
        for (name, v) in scalars {
            let _ = writeln!(s, "{name},{v},,,,,,,,,,");
        }
        if let Some(st) = &self.makespan {
            let _ = writeln!(
                s,
                "task_makespan,,{},{},{},{},{},{},{},{},{},{}",
                st.count, st.mean, st.std, st.min, st.p50, st.p90, st.p95, st.p99, st.p99_9, st.max
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso8601_dates() {
        // Checked with `date -u -d @SECS +%FT%TZ`.
        assert_eq!(utc_iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_iso8601(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_iso8601(1_795_437_688), "2026-11-23T12:41:28Z");
    }

    use super::*;

    fn stats(count: u64, base: f64) -> Stats {
        Stats {
            count,
            mean: base * 1.5,
            std: base / 4.0,
            min: base,
            p50: base * 1.25,
            p90: base * 2.0,
            p95: base * 2.5,
            p99: base * 3.0,
            p99_9: base * 3.5,
            max: base * 4.0,
        }
    }

    /// A run with a bit of everything: failures of two kinds, warm-up,
    /// rows not sent, estimated tokens, an SLO, and times on both sides of
    /// the 10 ms and 1 s column formats.
    fn summary() -> Summary {
        Summary {
            run: RunInfo {
                tool: "mc-replay".into(),
                version: "0.1.0".into(),
                target: "http".into(),
                url: Some("http://127.0.0.1:8000".into()),
                endpoint: "chat".into(),
                model: Some("m".into()),
                input: "-".into(),
                rows: 14,
                speedup: 1.0,
                arrival: "timestamps".into(),
                rate: None,
                concurrency: None,
                turns: "cumulative".into(),
                seed: 0,
                block_size: 512,
                start_unix_ms: 1_795_437_688_000.0,
                start_time: "2026-11-23T12:41:28Z".into(),
                host: Some("h".into()),
                shard: None,
                max_delay: None,
                options: None,
            },
            requests: Counts {
                sent: 10,
                ok: 8,
                failed: 2,
                warmup: 1,
                not_sent: 3,
                skipped_dep_failed: 0,
                interrupted: false,
                short: 0,
                cut_at_done: 0,
                resends: 0,
            },
            errors: [(ErrorKind::Http5xx, 1), (ErrorKind::Timeout, 1)].into(),
            duration_s: 12.5,
            request_throughput: 0.64,
            output_token_throughput: 51.2,
            input_token_throughput: 1638.4,
            tokens: Tokens {
                input_intended: 20480,
                input_reported: 20500,
                output: 640,
                output_estimated_requests: 2,
                output_requested: 640,
                output_received: 640,
            },
            send_rate: 0.8,
            trace_rate: Some(0.75),
            metrics: Metrics {
                ttft: Some(stats(8, 120.0)),
                tpot: Some(stats(8, 2.0)),
                itl: None,
                e2e: Some(stats(8, 1600.0)),
                sched_latency: Some(stats(8, 1601.0)),
                lag: Some(stats(9, 0.004)),
            },
            slo: Some(Slo {
                ttft_ms: Some(500.0),
                tpot_ms: None,
                e2e_ms: Some(10000.0),
            }),
            goodput: Some(Goodput {
                requests: 6,
                rate: 0.48,
            }),
            degraded: false,
            workers: 4,
            stopped_early: None,
            engine: None,
            router: None,
            fidelity: None,
            fidelity_by_server: Vec::new(),
            tasks: None,
            connections: None,
        }
    }

    #[test]
    fn the_connections_line_says_how_many_per_request_and_whose_cap() {
        let mut s = summary();
        assert!(!s.table().contains("connections:"), "none counted");
        // 11 requests sent (10 measured, 1 warm-up) over 3 connections.
        s.connections = Some(Connections {
            connects: 3,
            per_request: Connections::per(3, 11),
            most_open: 2,
            cap: Some(16),
            auto: true,
        });
        let t = s.table();
        assert!(
            t.contains(
                "connections: 3 opened for 11 requests (0.2727 a request), at most 2 open at \
                 once; cap 16 (grown with the measured rate and latency)\n"
            ),
            "{t}"
        );
        let csv = s.csv();
        assert!(csv.contains("\nconnects,3,"), "{csv}");
        assert!(csv.contains("\nconnects_per_request,0.2727"), "{csv}");
        s.connections = Some(Connections {
            cap: None,
            auto: false,
            ..s.connections.unwrap()
        });
        assert!(s.table().contains("; no cap (--max-connections 0)\n"));
        // The JSON carries it, and reads back.
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"connections\":{\"connects\":3,"), "{json}");
        let back: Summary = serde_json::from_str(&json).unwrap();
        assert_eq!(back.connections, s.connections);
    }

    #[test]
    fn table_snapshot() {
        insta::assert_snapshot!(summary().table());
    }

    #[test]
    fn csv_snapshot() {
        insta::assert_snapshot!(summary().csv());
    }

    #[test]
    fn sidecar_beside_the_results() {
        for (results, sidecar) in [
            ("out/results.jsonl", "out/results.summary.json"),
            ("r", "r.summary.json"),
            ("a/b.json", "a/b.json.summary.json"),
        ] {
            assert_eq!(sidecar_path(Path::new(results)), Path::new(sidecar));
        }
    }

    #[test]
    fn the_rate_and_the_token_counts_say_whose_they_are() {
        let mut s = summary();
        let t = s.table();
        assert!(t.contains("(the trace asks for 0.75 req/s)"), "{t}");
        assert!(t.contains("reported by the server"), "{t}");
        s.run.arrival = "poisson".into();
        s.run.target = "engine".into();
        // Throughput above the arrival rate: later turns of sessions.
        s.request_throughput = 2.0;
        let t = s.table();
        assert!(
            t.contains("(--rate asks for 0.75 req/s); session starts only"),
            "{t}"
        );
        assert!(t.contains("reported by the engine model"), "{t}");
    }

    #[test]
    fn warnings_close_the_table() {
        let mut s = summary();
        s.degraded = true;
        s.stopped_early = Some(StoppedEarly {
            consecutive_failures: 100,
            last_error: "io: Connection refused".into(),
        });
        let t = s.table();
        let tail: Vec<&str> = t.lines().rev().take(2).collect();
        assert!(
            tail[1].starts_with("WARNING: degraded run: schedule lag p99 is 0.0 ms"),
            "{t}"
        );
        assert_eq!(
            tail[0],
            "STOPPED EARLY: 100 requests in a row could not reach the server"
        );
    }
}
