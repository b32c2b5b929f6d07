//! mc-replay end to end: against mc-mock (and, where the exact request
//! bytes matter, a capturing server in this file), on 127.0.0.1.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::util::{assert_success, lines, tool, Killed, MockServer};
use schema::{RequestResult, Summary};

/// mc-replay's output schema as the tests expect it, written here rather
/// than taken from the crate: a renamed or added field fails these tests
/// instead of changing both sides at once.
pub mod schema {
    // Every field is listed to check the schema, not to be read.
    #![allow(dead_code)]

    use std::collections::BTreeMap;

    use serde::Deserialize;

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct RequestResult {
        pub line: u64,
        pub session_id: Option<String>,
        pub turn: u32,
        pub request_id: String,
        pub x_request_id: String,
        pub target: String,
        pub warmup: bool,
        pub status: String,
        pub http_status: Option<u16>,
        pub error: Option<ErrorOut>,
        pub t_sched_ms: f64,
        pub t_send_ms: f64,
        pub t_first_ms: Option<f64>,
        pub t_last_ms: Option<f64>,
        pub t_end_ms: f64,
        pub lag_ms: f64,
        pub ttft_ms: Option<f64>,
        pub e2e_ms: Option<f64>,
        pub tpot_ms: Option<f64>,
        pub sched_latency_ms: Option<f64>,
        pub chunks: u64,
        pub itl_ms: Option<Itl>,
        pub itl_gaps_ms: Vec<f64>,
        pub input_tokens: Option<u64>,
        pub prompt_tokens: Option<u64>,
        pub cached_tokens: Option<u64>,
        pub output_tokens: Option<u64>,
        pub completion_tokens: Option<u64>,
        pub tokens_estimated: bool,
        pub finish_reason: Option<String>,
        pub short: bool,
        /// Sent again after a closed keep-alive connection (absent when 0).
        #[serde(default)]
        pub resends: u64,
        /// `--shard` runs only.
        #[serde(default)]
        pub shard: Option<String>,
        #[serde(default)]
        pub plan_digest: Option<String>,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct ErrorOut {
        pub kind: String,
        pub message: String,
        #[serde(default)]
        pub retry_after_s: Option<f64>,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Itl {
        pub mean: f64,
        pub min: f64,
        pub p50: f64,
        pub p99: f64,
        pub max: f64,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Summary {
        pub run: RunInfo,
        pub requests: Counts,
        pub errors: BTreeMap<String, u64>,
        pub duration_s: f64,
        pub request_throughput: f64,
        pub output_token_throughput: f64,
        pub input_token_throughput: f64,
        pub tokens: Tokens,
        pub send_rate: f64,
        pub trace_rate: Option<f64>,
        pub metrics: Metrics,
        pub slo: Option<Slo>,
        pub goodput: Option<Goodput>,
        pub degraded: bool,
        pub workers: usize,
        pub stopped_early: Option<StoppedEarly>,
        pub engine: Option<serde_json::Value>,
        pub fidelity: Option<Fidelity>,
        #[serde(default)]
        pub connections: Option<Connections>,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Connections {
        pub connects: u64,
        pub per_request: f64,
        pub most_open: u64,
        pub cap: Option<u64>,
        pub auto: bool,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Fidelity {
        pub server_metrics: String,
        pub metrics_url: Option<String>,
        pub metrics_note: Option<String>,
        pub server_engine: Option<String>,
        pub scrapes: u64,
        pub hit_rate: HitRate,
        pub prompt_tokens: TokenCheck,
        pub output_tokens: TokenCheck,
        pub arrival_rate: Rates,
        pub lag_p99_ms: Option<f64>,
        pub server: Option<ServerLoad>,
        pub threshold_pp: f64,
        pub flagged: bool,
        pub cause: Option<String>,
        pub verdict: String,
        /// The run's share of the server's request-phase histograms
        /// (absent when it exported none).
        #[serde(default)]
        pub server_histograms: Option<serde_json::Value>,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct HitRate {
        pub observed: Option<f64>,
        pub server_queried_tokens: Option<f64>,
        pub server_hit_tokens: Option<f64>,
        pub predicted: Option<f64>,
        pub predicted_at_kv: Option<f64>,
        pub block_size: u64,
        pub block_size_from: String,
        pub kv_tokens: Option<u64>,
        pub kv_tokens_from: Option<String>,
        pub requests: u64,
        pub predicted_queried_tokens: u64,
        pub note: Option<String>,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct TokenCheck {
        pub requests: u64,
        pub requested: u64,
        pub realised: u64,
        pub diff_pct: Option<f64>,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Rates {
        pub intended: Option<f64>,
        pub achieved: f64,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct ServerLoad {
        pub running_max: Option<f64>,
        pub waiting_max: Option<f64>,
        pub kv_usage_max: Option<f64>,
        pub preemptions: Option<f64>,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct RunInfo {
        pub tool: String,
        pub version: String,
        pub target: String,
        pub url: Option<String>,
        pub endpoint: String,
        pub model: Option<String>,
        pub input: String,
        pub rows: u64,
        pub speedup: f64,
        pub arrival: String,
        pub rate: Option<f64>,
        pub concurrency: Option<u64>,
        pub turns: String,
        pub seed: u64,
        pub block_size: u64,
        pub start_unix_ms: f64,
        pub start_time: String,
        pub host: Option<String>,
        /// `--shard` runs (and mc-report's merge of them) only.
        #[serde(default)]
        pub shard: Option<ShardRun>,
        /// `--max-delay` runs only.
        #[serde(default)]
        pub max_delay: Option<DelayCap>,
        pub options: LoadOptions,
    }

    #[derive(Debug, Clone, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    pub struct LoadOptions {
        pub exact_output: bool,
        pub timeout_s: f64,
        pub extra_body_sha256: Option<String>,
        pub header_names: Vec<String>,
        pub tokenizer: Option<String>,
        pub max_requests: Option<u64>,
        pub duration_s: Option<f64>,
        pub warmup: u64,
        pub max_connections: Option<u64>,
        pub reset_prefix_cache: bool,
        pub engine_profile: Option<String>,
    }

    #[derive(Debug, Clone, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    pub struct DelayCap {
        pub max_ms: f64,
        pub capped: u64,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct ShardRun {
        pub index: Option<u32>,
        pub count: u32,
        pub plan_digest: String,
        pub rows: Vec<u64>,
        pub tokens: Vec<u64>,
        pub start_at_unix_ms: Option<u64>,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Counts {
        pub sent: u64,
        pub ok: u64,
        pub failed: u64,
        pub warmup: u64,
        pub not_sent: u64,
        pub interrupted: bool,
        pub short: u64,
        pub cut_at_done: u64,
        pub resends: u64,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Tokens {
        pub input_intended: u64,
        pub input_reported: u64,
        pub output: u64,
        pub output_estimated_requests: u64,
        pub output_requested: u64,
        pub output_received: u64,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Metrics {
        pub ttft: Option<Stats>,
        pub tpot: Option<Stats>,
        pub itl: Option<Stats>,
        pub e2e: Option<Stats>,
        pub sched_latency: Option<Stats>,
        pub lag: Option<Stats>,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Stats {
        pub count: u64,
        pub mean: f64,
        pub std: f64,
        pub min: f64,
        pub p50: f64,
        pub p90: f64,
        pub p95: f64,
        pub p99: f64,
        pub p99_9: f64,
        pub max: f64,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Slo {
        pub ttft_ms: Option<f64>,
        pub tpot_ms: Option<f64>,
        pub e2e_ms: Option<f64>,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Goodput {
        pub requests: u64,
        pub rate: f64,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct StoppedEarly {
        pub consecutive_failures: u64,
        pub last_error: String,
    }
}

/// A running mc-mock ([`MockServer`]), its log read on a thread; killed
/// on drop.
pub struct Mock {
    _child: Killed,
    pub url: String,
    log: Arc<Mutex<Vec<Value>>>,
}

impl Mock {
    pub fn start(args: &[&str]) -> Mock {
        let server = MockServer::start(args);
        let url = server.url();
        let MockServer {
            child, log: lines, ..
        } = server;
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for l in lines.lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&l) {
                    sink.lock().unwrap().push(v);
                }
            }
        });
        Mock {
            _child: child,
            url,
            log,
        }
    }

    /// The request lines once `n` of them name a trace line: the mock
    /// logs each request as it arrives, but the log reaches the test
    /// through a pipe and a reader thread, which a loaded machine can hold
    /// back. Waits at most 10 s, then returns what there is.
    pub fn log_of(&self, n: usize) -> Vec<Value> {
        let waited = std::time::Instant::now();
        loop {
            let log = self.requests();
            let traced = log.iter().filter(|v| v["x_trace_line"].is_string()).count();
            if traced >= n || waited.elapsed() > Duration::from_secs(10) {
                return log;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The request lines the mock logged.
    pub fn requests(&self) -> Vec<Value> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|v| v["event"] == "request")
            .cloned()
            .collect()
    }
}

pub struct Run {
    pub code: i32,
    pub results: Vec<RequestResult>,
    pub stderr: String,
}

/// Runs mc-replay on `trace` and reads every result line into the strict type.
pub fn replay(url: &str, args: &[&str], trace: &str) -> Run {
    let out = tool("mc-replay")
        .args(["--url", url])
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .write_stdin(trace.to_string())
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let results = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    Run {
        code: out.status.code().unwrap_or(-1),
        results,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn by_line(results: &[RequestResult]) -> HashMap<u64, &RequestResult> {
    results.iter().map(|r| (r.line, r)).collect()
}

/// A zero-latency mock writes a whole answer at once: 300 token events,
/// about 70 KB, more than one read of the event loop (64 KB) takes, and
/// the loop reads on (edge-triggered: no new event would come for bytes
/// already there): every token counted, every stream complete.
#[test]
fn answers_larger_than_a_first_read_are_read_whole() {
    let mock = Mock::start(&[]);
    let rows: Vec<Value> = (0..6)
        .map(|i| json!({"timestamp": i * 5, "input_length": 4, "output_length": 300}))
        .collect();
    // A stream left unread would time out instead.
    let run = replay(&mock.url, &["--timeout", "5"], &lines(&rows));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.results.len(), 6);
    for r in &run.results {
        assert_eq!(r.status, "ok", "{r:?}");
        assert_eq!((r.chunks, r.completion_tokens), (300, Some(300)), "{r:?}");
        assert_eq!(r.itl_gaps_ms.len(), 299);
    }
}

#[test]
fn timed_run_reports_every_request_with_exact_lengths() {
    let trace = lines(&[
        json!({"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]}),
        json!({"timestamp": 60, "input_length": 512, "output_length": 3, "hash_ids": [1]}),
        json!({"timestamp": 120, "input_length": 20, "output_length": 1}),
        json!({"timestamp": 180, "text_input": "one two three", "output_length": 2}),
    ]);
    // Sent on schedule (the trace's timestamps, from run start) within
    // 40 ms: a bound a loaded machine can miss, so up to three runs (a
    // late sender misses every one).
    let mut kept = None;
    crate::util::within_attempts(3, || {
        let mock = Mock::start(&["--ttft-ms", "10", "--itl-ms", "1"]);
        // No --model: the first model mc-mock lists is used.
        let run = replay(&mock.url, &[], &trace);
        for res in &run.results {
            let want = (res.line - 1) as f64 * 60.0;
            if !(res.t_send_ms >= want && res.t_send_ms - want < 40.0) {
                return Err(format!("sent off schedule: {res:?}"));
            }
        }
        kept = Some((mock, run));
        Ok(())
    });
    let (mock, run) = kept.unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.results.len(), 4);
    let r = by_line(&run.results);
    for (line, isl, osl) in [(1, 700, 5), (2, 512, 3), (3, 20, 1), (4, 3, 2)] {
        let res = r[&line];
        assert_eq!(res.status, "ok", "{res:?}");
        // mc-mock counts prompt words; our prompts are one word per token.
        assert_eq!(res.prompt_tokens, Some(isl), "line {line}");
        assert_eq!(res.completion_tokens, Some(osl), "line {line}");
        assert_eq!(res.chunks, osl, "line {line}");
        assert!(!res.tokens_estimated);
        assert_eq!(res.finish_reason.as_deref(), Some("length"));
        let ttft = res.ttft_ms.unwrap();
        assert!(ttft >= 10.0, "ttft {ttft} below the mock's 10 ms");
        // Sent on schedule: the trace's timestamps, from run start.
        let want = (line - 1) as f64 * 60.0;
        assert_eq!(res.t_sched_ms, want);
        assert!((res.lag_ms - (res.t_send_ms - res.t_sched_ms)).abs() < 1e-6);
    }
    // TPOT = (last - first) / (tokens - 1).
    let five = r[&1];
    let tpot = (five.t_last_ms.unwrap() - five.t_first_ms.unwrap()) / 4.0;
    assert!((five.tpot_ms.unwrap() - tpot).abs() < 1e-3);
    assert_eq!(five.itl_ms.as_ref().map(|_| ()), Some(()));
    assert!(
        run.stderr.contains("4 requests: 4 ok, 0 failed"),
        "{}",
        run.stderr
    );
    // The mock saw each request with its trace line.
    let mut seen: Vec<String> = mock
        .log_of(4)
        .iter()
        .filter(|v| v["path"] == "/v1/chat/completions")
        .map(|v| v["x_trace_line"].as_str().unwrap().to_string())
        .collect();
    seen.sort();
    assert_eq!(seen, ["1", "2", "3", "4"]);
}

#[test]
fn measured_ttft_and_itl_match_the_mock() {
    let mock = Mock::start(&["--ttft-ms", "60", "--itl-ms", "8"]);
    let trace = lines(&[json!({"timestamp": 0, "input_length": 10, "output_length": 21})]);
    let run = replay(&mock.url, &["--model", "mock-model"], &trace);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let r = &run.results[0];
    let ttft = r.ttft_ms.unwrap();
    assert!((60.0..100.0).contains(&ttft), "ttft {ttft}");
    let itl = r.itl_ms.as_ref().unwrap();
    // The gaps add up to the span from the first to the last token, exactly
    // (the mean is written to the µs: 20 times half a µs of rounding).
    let span = r.t_last_ms.unwrap() - r.t_first_ms.unwrap();
    assert!(
        (itl.mean * 20.0 - span).abs() <= 0.0101,
        "itl {itl:?}, span {span}"
    );
    // Near 8 ms; a client that reads the first token late (a loaded
    // machine) shortens the span, so the lower bound leaves room for that.
    assert!((5.0..14.0).contains(&itl.mean), "itl {itl:?}");
    // The raw gaps: one per token after the first, summing to the span
    // (each gap and each time is a whole number of µs).
    assert_eq!(r.itl_gaps_ms.len(), 20);
    let sum_us: i64 = r
        .itl_gaps_ms
        .iter()
        .map(|g| (g * 1000.0).round() as i64)
        .sum();
    let span_us = ((r.t_last_ms.unwrap() - r.t_first_ms.unwrap()) * 1000.0).round() as i64;
    assert_eq!(sum_us, span_us);
    let max = r.itl_gaps_ms.iter().copied().fold(0.0, f64::max);
    assert_eq!(max, itl.max);
    let tpot = r.tpot_ms.unwrap();
    assert!((5.0..14.0).contains(&tpot), "tpot {tpot}");
    // 20 gaps of 8 ms after the first token.
    let e2e = r.e2e_ms.unwrap();
    assert!(e2e >= 60.0 + 20.0 * 8.0 - 1.0, "e2e {e2e}");
}

/// With a hundred streams in flight the evented client polls its sockets
/// only every --read-coalesce-us (here 40 ms, far longer than its default,
/// to make a late read visible; shorter than the 50 ms between two tokens,
/// so that no read returns two): the times must still be the arrival
/// times (the kernel's stamps on Linux), not the reads'. The requests
/// leave over 40 ms, so their tokens fall anywhere in a pause: read times
/// would put TTFT at 100 ms plus half the pause (~120 ms).
#[test]
fn coalesced_reads_keep_the_arrival_times() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let rows: Vec<Value> = (0..120)
        .map(|i| json!({"timestamp": i / 3, "input_length": 10, "output_length": 4}))
        .collect();
    // Bounds a loaded machine can miss (the mock's own sends run late):
    // up to three runs; read times instead of arrival stamps miss every one.
    crate::util::within_attempts(3, || {
        let mock = Mock::start(&["--ttft-ms", "100", "--itl-ms", "50"]);
        let run = replay(
            &mock.url,
            &["--model", "mock-model", "--read-coalesce-us", "40000"],
            &lines(&rows),
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(run.results.len(), 120);
        let p50 = |f: &dyn Fn(&RequestResult) -> f64| {
            let mut v: Vec<f64> = run.results.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[60]
        };
        let ttft = p50(&|r| r.ttft_ms.unwrap());
        // The end is the last token's arrival: 100 + 3 x 50 ms.
        let e2e = p50(&|r| r.e2e_ms.unwrap());
        if (99.0..113.0).contains(&ttft) && (249.0..263.0).contains(&e2e) {
            Ok(())
        } else {
            Err(format!(
                "TTFT p50 {ttft} ms (99-113), e2e p50 {e2e} ms (249-263)"
            ))
        }
    });
}

#[test]
fn session_turns_never_overlap_and_honour_delay() {
    let mock = Mock::start(&["--ttft-ms", "80"]);
    let trace = lines(&[
        json!({"session_id": "a", "timestamp": 0, "input_length": 5, "output_length": 2}),
        json!({"session_id": "b", "timestamp": 0, "input_length": 5, "output_length": 2}),
        // Its own timestamp (10 ms) is before turn 0 ends: sent at the end.
        json!({"session_id": "a", "timestamp": 10, "input_length": 9, "output_length": 2}),
        json!({"session_id": "a", "delay": 50, "input_length": 12, "output_length": 2}),
    ]);
    let run = replay(&mock.url, &["--model", "m"], &trace);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let r = by_line(&run.results);
    assert_eq!(
        (r[&1].turn, r[&3].turn, r[&4].turn, r[&2].turn),
        (0, 1, 2, 0)
    );
    assert_eq!(r[&3].session_id.as_deref(), Some("a"));
    // Turn 1 waits for turn 0 to end; turn 2 waits 50 ms more.
    assert!(r[&3].t_sched_ms >= r[&1].t_end_ms - 0.001, "{:?}", r[&3]);
    assert!(r[&3].t_send_ms >= r[&1].t_end_ms);
    assert!(r[&4].t_sched_ms >= r[&3].t_end_ms + 50.0 - 0.001);
    assert!(r[&4].t_send_ms >= r[&3].t_end_ms + 50.0);
    // Session b ran beside a's first turn.
    assert!(r[&2].t_send_ms < r[&1].t_end_ms);
    // The session id reached the server.
    let sessions: Vec<&str> = mock
        .log_of(4)
        .iter()
        .filter_map(|v| v["x_session_id"].as_str().map(|_| ""))
        .collect();
    assert_eq!(sessions.len(), 4);
}

#[test]
fn closed_loop_keeps_concurrency() {
    let mock = Mock::start(&["--ttft-ms", "60"]);
    let rows: Vec<Value> = (0..6)
        .map(|_| json!({"input_length": 4, "output_length": 1}))
        .collect();
    crate::util::within_attempts(3, || {
        let run = replay(
            &mock.url,
            &["--model", "m", "--concurrency", "2"],
            &lines(&rows),
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(run.results.len(), 6);
        // At no send time are more than 2 requests open.
        for a in &run.results {
            let open = run
                .results
                .iter()
                .filter(|b| b.t_send_ms <= a.t_send_ms && b.t_end_ms > a.t_send_ms)
                .count();
            assert!(open <= 2, "{open} open at {}", a.t_send_ms);
        }
        // Three rounds of about 60 ms.
        let last = run.results.iter().map(|r| r.t_end_ms).fold(0.0, f64::max);
        assert!(last >= 180.0, "{last}");
        // Closed loop: a request is due when its slot frees, so lag stays
        // small (sent at the trace's times, the third round's would be
        // 120 ms late).
        match run.results.iter().find(|r| r.lag_ms >= 30.0) {
            Some(r) => Err(format!("lag {} ms: {r:?}", r.lag_ms)),
            None => Ok(()),
        }
    });
}

#[test]
fn rate_mode_spaces_arrivals() {
    let mock = Mock::start(&[]);
    let rows: Vec<Value> = (0..5)
        .map(|_| json!({"input_length": 4, "output_length": 1}))
        .collect();
    let args = ["--model", "m", "--rate", "50", "--arrival", "constant"];
    let run = replay(&mock.url, &args, &lines(&rows));
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut sched: Vec<f64> = run.results.iter().map(|r| r.t_sched_ms).collect();
    sched.sort_by(f64::total_cmp);
    assert_eq!(sched, [0.0, 20.0, 40.0, 60.0, 80.0]);
    // Poisson with a seed: the same schedule twice, a different one with another seed.
    let poisson = |seed: &str| {
        let run = replay(
            &mock.url,
            &["--model", "m", "--rate", "50", "--seed", seed],
            &lines(&rows),
        );
        let mut s: Vec<f64> = run.results.iter().map(|r| r.t_sched_ms).collect();
        s.sort_by(f64::total_cmp);
        s
    };
    assert_eq!(poisson("1"), poisson("1"));
    assert_ne!(poisson("1"), poisson("2"));
    // A timed trace under --rate: the timestamps give way, and it says so.
    let timed: Vec<Value> = (0..3)
        .map(|i| json!({"timestamp": i * 1000, "input_length": 4, "output_length": 1}))
        .collect();
    let run = replay(
        &mock.url,
        &["--model", "m", "--rate", "100", "--arrival", "constant"],
        &lines(&timed),
    );
    let mut sched: Vec<f64> = run.results.iter().map(|r| r.t_sched_ms).collect();
    sched.sort_by(f64::total_cmp);
    assert_eq!(sched, [0.0, 10.0, 20.0]);
    assert!(
        run.stderr.contains("timestamps are ignored"),
        "{}",
        run.stderr
    );
}

#[test]
fn untimed_trace_needs_rate_or_concurrency() {
    let run = replay(
        "http://127.0.0.1:9",
        &["--model", "m"],
        "{\"input_length\":3}\n",
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("--rate"), "{}", run.stderr);
}

#[test]
fn a_bad_line_stops_before_any_request() {
    let mock = Mock::start(&[]);
    let trace = "{\"timestamp\":0,\"input_length\":3}\n{\"timestamp\":1,\"input_length\":\"x\"}\n";
    let run = replay(&mock.url, &["--model", "m"], trace);
    assert_eq!(run.code, 65);
    assert!(
        run.stderr.contains("line 2: field `input_length`"),
        "{}",
        run.stderr
    );
    assert!(run.results.is_empty());
    std::thread::sleep(Duration::from_millis(100));
    assert!(mock.requests().is_empty());
}

#[test]
fn warmup_and_max_requests() {
    let mock = Mock::start(&[]);
    let rows: Vec<Value> = (0..10)
        .map(|i| json!({"timestamp": i, "input_length": 4, "output_length": 1}))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("s.json");
    let csv = dir.path().join("s.csv");
    let args = [
        "--model",
        "m",
        "--warmup",
        "2",
        "--max-requests",
        "5",
        "--summary",
        summary.to_str().unwrap(),
        "--summary-csv",
        csv.to_str().unwrap(),
        "--slo",
        "ttft=10000,e2e=20000",
    ];
    let run = replay(&mock.url, &args, &lines(&rows));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.results.len(), 7);
    assert_eq!(run.results.iter().filter(|r| r.warmup).count(), 2);
    let s: Summary = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    assert_eq!(
        (s.requests.sent, s.requests.ok, s.requests.warmup),
        (5, 5, 2)
    );
    assert_eq!(s.requests.not_sent, 3);
    assert_eq!(s.metrics.ttft.as_ref().unwrap().count, 5);
    assert_eq!(s.goodput.as_ref().unwrap().requests, 5);
    assert!(!s.degraded);
    // One table (issue 9 §4): one row per metric, every row as wide as the header.
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert!(csv.starts_with("metric,value,count,mean_ms"));
    assert!(csv.contains("\nttft,,5,"), "{csv}");
    assert!(csv.contains("\nrequests_sent,5,,"), "{csv}");
    assert!(csv.lines().all(|l| l.split(',').count() == 12), "{csv}");
    assert!(!csv.contains("\n\n"), "{csv}");
}

/// Each result's error kind, `ok` for none.
pub fn kinds(run: &Run) -> Vec<String> {
    run.results
        .iter()
        .map(|r| r.error.as_ref().map_or("ok".into(), |e| e.kind.clone()))
        .collect()
}

fn two_rows() -> String {
    lines(&[
        json!({"timestamp": 0, "input_length": 4, "output_length": 4}),
        json!({"timestamp": 5, "input_length": 4, "output_length": 4}),
    ])
}

#[test]
fn connection_refused_and_dns_failure() {
    // A port nobody listens on: bind, read the port, close.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Checked once before the first request: exit 69 at once, the cause
    // named, nothing sent, no result lines.
    let started = std::time::Instant::now();
    let run = replay(
        &format!("http://127.0.0.1:{port}"),
        &["--model", "m"],
        &two_rows(),
    );
    assert_eq!(run.code, 69, "{}", run.stderr);
    assert!(run.results.is_empty());
    assert!(
        run.stderr
            .contains(&format!("nothing answers at 127.0.0.1:{port}"))
            && run.stderr.to_lowercase().contains("connection refused"),
        "{}",
        run.stderr
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let run = replay(
        "http://nonexistent.invalid:8000",
        &["--model", "m"],
        &two_rows(),
    );
    assert_eq!(run.code, 69, "{}", run.stderr);
    assert!(
        run.stderr.contains("cannot resolve nonexistent.invalid"),
        "{}",
        run.stderr
    );
    // A server that goes away after the check: the requests' own failures
    // are results, of kind connect.
    let run = replay(&gone_after_the_check(), &["--model", "m"], &two_rows());
    assert_eq!(kinds(&run), ["connect", "connect"], "{}", run.stderr);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("every request failed"));
}

#[test]
fn http_errors_are_results() {
    let mock = Mock::start(&["--status", "500"]);
    let run = replay(&mock.url, &["--model", "m"], &two_rows());
    assert_eq!(kinds(&run), ["http_5xx", "http_5xx"]);
    assert_eq!(run.results[0].http_status, Some(500));
    assert!(run.results[0]
        .error
        .as_ref()
        .unwrap()
        .message
        .contains("mc-mock injected error"));
    assert_eq!(run.code, 1);

    let mock = Mock::start(&["--status", "429", "--retry-after", "3"]);
    let run = replay(&mock.url, &["--model", "m"], &two_rows());
    assert_eq!(kinds(&run), ["rate_limited", "rate_limited"]);
    assert_eq!(
        run.results[0].error.as_ref().unwrap().retry_after_s,
        Some(3.0)
    );

    let mock = Mock::start(&["--status", "400"]);
    let run = replay(&mock.url, &["--model", "m"], &two_rows());
    assert_eq!(kinds(&run), ["http_4xx", "http_4xx"]);
}

#[test]
fn some_failures_still_exit_zero() {
    let mock = Mock::start(&["--status", "503", "--fail-rate", "0.5", "--seed", "1"]);
    let rows: Vec<Value> = (0..30)
        .map(|i| json!({"timestamp": i, "input_length": 4, "output_length": 2}))
        .collect();
    let run = replay(&mock.url, &["--model", "m"], &lines(&rows));
    assert_eq!(run.results.len(), 30);
    let k = kinds(&run);
    let failed = k.iter().filter(|k| *k == "http_5xx").count();
    assert!(failed > 0 && failed < 30, "{k:?}");
    assert_eq!(k.iter().filter(|k| *k == "ok").count() + failed, 30);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("(http_5xx {failed})")),
        "{}",
        run.stderr
    );
}

#[test]
fn stream_faults_are_results() {
    for (flag, kind) in [
        ("--error-after", "stream_error"),
        ("--malformed-after", "bad_sse"),
        ("--drop-after", "incomplete"),
    ] {
        let mock = Mock::start(&[flag, "2"]);
        let run = replay(&mock.url, &["--model", "m"], &two_rows());
        assert_eq!(kinds(&run), [kind, kind], "{flag}: {}", run.stderr);
        // What was measured before the fault is kept.
        assert!(run
            .results
            .iter()
            .all(|r| r.chunks >= 2 && r.ttft_ms.is_some()));
    }
}

#[test]
fn a_server_that_never_answers_times_out() {
    let mock = Mock::start(&["--hang"]);
    let run = replay(
        &mock.url,
        &["--model", "m", "--timeout", "0.5"],
        &two_rows(),
    );
    assert_eq!(kinds(&run), ["timeout", "timeout"], "{}", run.stderr);
    for r in &run.results {
        let waited = r.t_end_ms - r.t_send_ms;
        assert!((450.0..5000.0).contains(&waited), "{waited}");
    }
}

#[test]
fn without_usage_tokens_are_counted_and_marked() {
    let mock = Mock::start(&["--no-usage"]);
    let run = replay(&mock.url, &["--model", "m"], &two_rows());
    assert_eq!(run.code, 0);
    for r in &run.results {
        assert!(r.tokens_estimated);
        assert_eq!(r.completion_tokens, Some(4));
        assert_eq!(r.prompt_tokens, None);
    }
    assert!(run.stderr.contains("counted from events"), "{}", run.stderr);
}

#[cfg(unix)]
#[test]
fn sigterm_drains_then_cancels() {
    // Requests that take 1.5 s; SIGTERM after 500 ms.
    let run_with_drain = |drain: &str| {
        let mock = Mock::start(&["--ttft-ms", "1500"]);
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("mc-replay"))
            .args(["--url", &mock.url, "--model", "m", "--drain-timeout", drain])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let rows = lines(&[
            json!({"timestamp": 0, "input_length": 4, "output_length": 1}),
            json!({"timestamp": 5000, "input_length": 4, "output_length": 1}),
        ]);
        child
            .stdin
            .take()
            .unwrap()
            .write_all(rows.as_bytes())
            .unwrap();
        // Late enough for the first request to be in flight, well before it ends.
        std::thread::sleep(Duration::from_millis(500));
        let pid = child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let out = child.wait_with_output().unwrap();
        let results: Vec<RequestResult> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (
            out.status.code(),
            results,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Long enough to finish: the request in flight completes; the second is never sent.
    let (code, results, stderr) = run_with_drain("10");
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].status, "ok");
    assert!(
        stderr.contains("1 rows not sent") && stderr.contains("interrupted"),
        "{stderr}"
    );
    // Too short: the request in flight is reported as cancelled.
    let (code, results, stderr) = run_with_drain("0.2");
    assert_eq!(results.len(), 1, "{stderr}");
    assert_eq!(results[0].error.as_ref().unwrap().kind, "cancelled");
    assert_eq!(code, Some(1));
}

/// One captured request: its headers (lower-case names) and JSON body.
pub type Seen = (HashMap<String, String>, Value);

/// A server that records each request (headers and body) and answers with a
/// fixed two-token stream, closing the connection after each answer.
pub struct Capture {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// How a capturing server behaves.
#[derive(Clone, Copy, Default)]
struct Personality {
    /// As llama-cpp-python's server: an `x-request-id` that is not a UUID
    /// gets `400` with an empty body.
    uuid_ids_only: bool,
    /// As llama.cpp: no usage chunk.
    no_usage: bool,
}

impl Capture {
    pub fn start() -> Capture {
        Capture::start_as(Personality::default())
    }

    fn start_as(p: Personality) -> Capture {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let store = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let store = store.clone();
                std::thread::spawn(move || serve_one(conn, &store, p));
            }
        });
        Capture { url, seen }
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// `8-4-4-4-12` hex digits, as Python's `uuid.UUID(s)` accepts in its
/// canonical form.
fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
        && parts
            .iter()
            .all(|p| p.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn line_is_get(headers: &HashMap<String, String>) -> bool {
    headers.get(":method").is_some_and(|m| m == "GET")
}

fn serve_one(conn: TcpStream, store: &Mutex<Vec<Seen>>, p: Personality) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut headers = HashMap::new();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    headers.insert(
        ":method".to_string(),
        line.split(' ').next().unwrap_or("").to_string(),
    );
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.insert(k.trim().to_lowercase(), v.trim().to_string());
    }
    // Like a server without Prometheus metrics: mc-replay's `GET /metrics`
    // scrape gets a 404 (and is not a request this server records).
    if line_is_get(&headers) {
        let _ = (&conn)
            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        return;
    }
    let len: usize = headers["content-length"].parse().unwrap();
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap();
    let refused = p.uuid_ids_only && !headers.get("x-request-id").is_some_and(|id| is_uuid(id));
    store.lock().unwrap().push((headers, body));
    let mut w = conn;
    if refused {
        let _ = w.write_all(
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        );
        return;
    }
    let usage =
        r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#;
    let events = [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":" hello"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":" world"},"finish_reason":"length"}]}"#,
        if p.no_usage { "" } else { usage },
        "[DONE]",
    ];
    let mut out = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
    );
    for e in events.into_iter().filter(|e| !e.is_empty()) {
        out.push_str(&format!("data: {e}\n\n"));
    }
    let _ = w.write_all(out.as_bytes());
}

#[test]
fn the_uuid_checking_server_refuses_other_ids() {
    let server = Capture::start_as(Personality {
        uuid_ids_only: true,
        ..Personality::default()
    });
    let addr = server.url.trim_start_matches("http://");
    let ask = |id: &str| {
        let mut c = TcpStream::connect(addr).unwrap();
        let req = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-request-id: {id}\r\n\
             content-length: 2\r\n\r\n{{}}"
        );
        c.write_all(req.as_bytes()).unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        answer
    };
    // The id mc-replay sent before: refused with 400 and an empty body.
    let refused = ask("76899414fad6ab69-0");
    assert!(refused.starts_with("HTTP/1.1 400"), "{refused}");
    assert!(refused.ends_with("\r\n\r\n"), "{refused}");
    assert!(ask("01234567-89ab-4def-8000-000000000000").starts_with("HTTP/1.1 200"));
}

#[test]
fn a_strict_server_without_usage_accepts_every_request() {
    let server = Capture::start_as(Personality {
        uuid_ids_only: true,
        no_usage: true,
    });
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("s.json");
    let args = ["--model", "m", "--summary", summary.to_str().unwrap()];
    let run = replay(&server.url, &args, &two_rows());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(kinds(&run), ["ok", "ok"]);
    let seen = server.requests();
    assert_eq!(seen.len(), 2);
    for r in &run.results {
        assert!(is_uuid(&r.x_request_id), "{r:?}");
        // The readable id names the same run and request: RUN-SEQ.
        let (run_id, seq) = r.request_id.rsplit_once('-').unwrap();
        assert!(r
            .x_request_id
            .ends_with(&format!("{:012x}", seq.parse::<u64>().unwrap())));
        let hex: String = r.x_request_id.split('-').take(2).collect();
        assert_eq!(format!("{run_id:0>16}")[..12], hex, "{r:?}");
        assert_eq!(r.target, "http");
        // Two content events, no usage: counted and flagged.
        assert_eq!(r.completion_tokens, Some(2));
        assert!(r.tokens_estimated);
    }
    let ids: Vec<&str> = seen
        .iter()
        .map(|(h, _)| h["x-request-id"].as_str())
        .collect();
    let mut sent: Vec<&str> = run
        .results
        .iter()
        .map(|r| r.x_request_id.as_str())
        .collect();
    sent.sort_unstable();
    let mut ids_sorted = ids.clone();
    ids_sorted.sort_unstable();
    assert_eq!(ids_sorted, sent);
    assert_ne!(ids[0], ids[1]);
    // A latency client asks for no compression.
    for (h, _) in &seen {
        assert!(
            h.get("accept-encoding").is_none_or(|v| v == "identity"),
            "{h:?}"
        );
    }
    let s: Summary = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    assert_eq!(s.tokens.output_estimated_requests, 2);
    assert_eq!(s.tokens.output, 4);
    assert!(
        run.stderr
            .contains("output tokens of 2 requests are counted from events"),
        "{}",
        run.stderr
    );
}

#[test]
fn an_empty_error_body_is_named() {
    let server = Capture::start_as(Personality {
        uuid_ids_only: true,
        ..Personality::default()
    });
    // A second x-request-id that is not a UUID: the server refuses it.
    let run = replay(
        &server.url,
        &["--model", "m", "--header", "x-request-id: nope"],
        &two_rows(),
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(kinds(&run), ["http_4xx", "http_4xx"]);
    assert_eq!(
        run.results[0].error.as_ref().unwrap().message,
        "HTTP 400 Bad Request (empty body)"
    );
}

#[test]
fn request_bodies_and_headers() {
    let server = Capture::start();
    let trace = lines(&[
        json!({"session_id": "s1", "timestamp": 0, "input_length": 6, "output_length": 7,
               "hash_ids": [4], "extra": {"temperature": 0}}),
        json!({"timestamp": 1, "messages": [{"role": "user", "content": "hi"}],
               "tools": [{"type": "function", "function": {"name": "f"}}], "output_length": 2}),
    ]);
    let out = tool("mc-replay")
        .args(["--url", &server.url, "--model", "M", "--block-size", "4"])
        .args([
            "--header",
            "X-Team: perf",
            "--extra-body",
            r#"{"top_p":0.5}"#,
        ])
        .env("OPENAI_API_KEY", "sk-secret")
        .write_stdin(trace)
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert_success(&out);
    // The key is never printed nor written to results.
    let all = [out.stdout.clone(), out.stderr.clone()].concat();
    assert!(!String::from_utf8_lossy(&all).contains("sk-secret"));
    let mut seen = server.requests();
    seen.sort_by_key(|(h, _)| h["x-trace-line"].clone());
    let (h, b) = &seen[0];
    assert_eq!(h["authorization"], "Bearer sk-secret");
    assert_eq!(h["x-team"], "perf");
    assert_eq!(h["x-session-id"], "s1");
    assert_eq!(h["x-trace-line"], "1");
    assert!(!h["x-request-id"].is_empty());
    assert_ne!(h["x-request-id"], seen[1].0["x-request-id"]);
    assert_eq!(b["model"], "M");
    assert_eq!(b["max_tokens"], 7);
    assert_eq!(b["max_completion_tokens"], 7);
    assert_eq!(b["min_tokens"], 7);
    assert_eq!(b["ignore_eos"], true);
    assert_eq!(b["stream"], true);
    assert_eq!(b["stream_options"], json!({"include_usage": true}));
    assert_eq!(b["temperature"], 0);
    assert_eq!(b["top_p"], 0.5);
    // 6 tokens: block 4 (4 words), then 2 words unique to the row.
    let content = b["messages"][0]["content"].as_str().unwrap();
    assert_eq!(content.split_whitespace().count(), 6);
    assert_eq!(b["messages"][0]["role"], "user");
    let (h2, b2) = &seen[1];
    assert!(!h2.contains_key("x-session-id"));
    assert_eq!(b2["messages"], json!([{"role": "user", "content": "hi"}]));
    assert_eq!(b2["tools"][0]["function"]["name"], "f");
    // Results carry the capture's answer.
    let results: Vec<RequestResult> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(results.iter().all(|r| r.completion_tokens == Some(2)));
}

#[test]
fn shared_hash_ids_give_shared_prompt_text() {
    let server = Capture::start();
    let trace = lines(&[
        json!({"timestamp": 0, "input_length": 10, "hash_ids": [1, 2, 3], "output_length": 1}),
        json!({"timestamp": 1, "input_length": 12, "hash_ids": [1, 2, 9], "output_length": 1}),
    ]);
    let args = [
        "--model",
        "M",
        "--block-size",
        "4",
        "--endpoint",
        "completions",
    ];
    let run = replay(&server.url, &args, &trace);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut seen = server.requests();
    seen.sort_by_key(|(h, _)| h["x-trace-line"].clone());
    let words = |i: usize| -> Vec<String> {
        seen[i].1["prompt"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let (a, b) = (words(0), words(1));
    assert_eq!((a.len(), b.len()), (10, 12));
    assert_eq!(a[..8], b[..8]);
    assert_ne!(a[8..10], b[8..10]);
    assert!(seen[0].1.get("messages").is_none());
    assert!(seen[0].1.get("max_completion_tokens").is_none());
}

#[test]
fn delta_turns_carry_the_live_conversation() {
    let server = Capture::start();
    let trace = lines(&[
        json!({"session_id": 1, "timestamp": 0, "text_input": "first", "output_length": 2}),
        json!({"session_id": 1, "text_input": "second", "output_length": 2}),
    ]);
    let run = replay(&server.url, &["--model", "M", "--turns", "delta"], &trace);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut seen = server.requests();
    seen.sort_by_key(|(h, _)| h["x-trace-line"].clone());
    assert_eq!(
        seen[0].1["messages"],
        json!([{"role": "user", "content": "first"}])
    );
    assert_eq!(
        seen[1].1["messages"],
        json!([
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": " hello world"},
            {"role": "user", "content": "second"}
        ])
    );
    // Cumulative (the default): each row alone.
    let run = replay(&server.url, &["--model", "M"], &trace);
    assert_eq!(run.code, 0);
    let seen = server.requests();
    let last = seen
        .iter()
        .rev()
        .find(|(h, _)| h["x-trace-line"] == "2")
        .unwrap();
    assert_eq!(
        last.1["messages"],
        json!([{"role": "user", "content": "second"}])
    );
}

#[test]
fn waiting_for_a_slot_is_lag_and_a_late_run_is_degraded() {
    // Four rows due at once, one slot, 100 ms each: the last waits ~300 ms.
    let mock = Mock::start(&["--ttft-ms", "100"]);
    let rows: Vec<Value> = (0..4)
        .map(|_| json!({"timestamp": 0, "input_length": 4, "output_length": 1}))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("s.json");
    let args = [
        "--model",
        "m",
        "--concurrency",
        "1",
        "--summary",
        summary.to_str().unwrap(),
    ];
    let run = replay(&mock.url, &args, &lines(&rows));
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut lags: Vec<f64> = run.results.iter().map(|r| r.lag_ms).collect();
    lags.sort_by(f64::total_cmp);
    assert!(lags[0] < 30.0 && lags[3] >= 290.0, "{lags:?}");
    for r in &run.results {
        assert_eq!(r.t_sched_ms, 0.0);
        // Scheduled latency includes the wait; E2E does not.
        let (s, e) = (r.sched_latency_ms.unwrap(), r.e2e_ms.unwrap());
        assert!((s - (e + r.lag_ms)).abs() < 0.01, "{r:?}");
    }
    let s: Summary = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    assert!(s.degraded);
    assert!(
        run.stderr.contains("WARNING: degraded run"),
        "{}",
        run.stderr
    );
}

#[test]
fn duration_stops_sending() {
    let mock = Mock::start(&[]);
    let rows: Vec<Value> = (0..10)
        .map(|i| json!({"timestamp": i * 100, "input_length": 4, "output_length": 1}))
        .collect();
    let run = replay(
        &mock.url,
        &["--model", "m", "--duration", "0.35"],
        &lines(&rows),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut sched: Vec<f64> = run.results.iter().map(|r| r.t_sched_ms).collect();
    sched.sort_by(f64::total_cmp);
    assert_eq!(sched, [0.0, 100.0, 200.0, 300.0]);
    assert!(run.stderr.contains("6 rows not sent"), "{}", run.stderr);
}

#[test]
fn speedup_divides_timestamps_and_delays() {
    let mock = Mock::start(&[]);
    let trace = lines(&[
        json!({"session_id": "s", "timestamp": 1000, "input_length": 4, "output_length": 1}),
        json!({"session_id": "s", "delay": 200, "input_length": 4, "output_length": 1}),
        json!({"timestamp": 1400, "input_length": 4, "output_length": 1}),
    ]);
    let run = replay(&mock.url, &["--model", "m", "--speedup", "4"], &trace);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let r = by_line(&run.results);
    assert_eq!(r[&1].t_sched_ms, 0.0);
    assert_eq!(r[&3].t_sched_ms, 100.0);
    // delay 200 / 4 = 50 ms after turn 0 ends (to the µs).
    let want = r[&1].t_end_ms + 50.0;
    assert!(
        (r[&2].t_sched_ms - want).abs() < 0.002,
        "{:?} vs {want}",
        r[&2]
    );
}

/// A session whose second turn follows a 5.4-hour think time (19,440,000
/// ms, as in the WEKA sample), on the engine model's virtual clock.
#[test]
fn max_delay_caps_think_times_and_counts_them() {
    let trace = lines(&[
        json!({"session_id": "s", "timestamp": 0, "input_length": 4, "output_length": 2}),
        json!({"session_id": "s", "delay": 19_440_000, "input_length": 8, "output_length": 2}),
        json!({"session_id": "s", "delay": 500, "input_length": 12, "output_length": 2}),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let summary = dir.path().join("s.json");
        let out = tool("mc-replay")
            .args(["--summary", summary.to_str().unwrap()])
            .args(extra)
            .write_stdin(trace.clone())
            .timeout(Duration::from_secs(60))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let results: Vec<RequestResult> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let s: schema::Summary =
            serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
        (
            results,
            s,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Gap between a turn's end and the next turn's send, by line.
    let gaps = |results: &[RequestResult]| {
        let r = by_line(results);
        [
            r[&2].t_sched_ms - r[&1].t_end_ms,
            r[&3].t_sched_ms - r[&2].t_end_ms,
        ]
    };
    let (results, s, stderr) = run(&[]);
    assert!(
        stderr.contains("1 delay over 1 h (longest 5.4 h at line 2)"),
        "{stderr}"
    );
    assert_eq!(s.run.max_delay, None);
    let [a, b] = gaps(&results);
    assert!(
        (a - 19_440_000.0).abs() < 0.002 && (b - 500.0).abs() < 0.002,
        "{a} {b}"
    );

    let (results, s, stderr) = run(&["--max-delay", "60000", "--speedup", "2"]);
    assert!(
        stderr.contains("--max-delay 60 s: capped 1 delay"),
        "{stderr}"
    );
    assert!(!stderr.contains("over 1 h"), "{stderr}");
    assert_eq!(
        s.run.max_delay,
        Some(schema::DelayCap {
            max_ms: 60_000.0,
            capped: 1
        })
    );
    // The cap is in the trace's ms: --speedup 2 then halves it.
    let [a, b] = gaps(&results);
    assert!(
        (a - 30_000.0).abs() < 0.002 && (b - 250.0).abs() < 0.002,
        "{a} {b}"
    );

    let bad = tool("mc-replay")
        .arg("--max-delay=-1")
        .write_stdin(trace.clone())
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("is not a delay in ms"));
}

#[test]
fn a_server_that_ignores_stream_is_measured_whole() {
    // `stream: false` through --extra-body: mc-mock answers with one JSON body.
    let mock = Mock::start(&["--ttft-ms", "30", "--itl-ms", "2"]);
    let args = ["--model", "m", "--extra-body", r#"{"stream": false}"#];
    let run = replay(&mock.url, &args, &two_rows());
    assert_eq!(run.code, 0, "{}", run.stderr);
    for r in &run.results {
        assert_eq!(r.status, "ok");
        assert_eq!(r.chunks, 1);
        assert_eq!(r.completion_tokens, Some(4));
        assert!(!r.tokens_estimated);
        // The whole answer comes when its last token is due: 30 + 3 * 2 ms.
        assert!(r.ttft_ms.unwrap() >= 36.0, "{r:?}");
        assert_eq!(r.ttft_ms, r.e2e_ms);
    }
}

#[test]
fn no_exact_output_leaves_the_length_to_the_server() {
    let server = Capture::start();
    let trace = lines(&[json!({"timestamp": 0, "input_length": 3, "output_length": 9})]);
    let run = replay(&server.url, &["--model", "M", "--no-exact-output"], &trace);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (_, b) = &server.requests()[0];
    assert_eq!(b["max_tokens"], 9);
    assert!(b.get("min_tokens").is_none() && b.get("ignore_eos").is_none());
}

#[test]
fn messages_need_the_chat_endpoint() {
    let trace = "{\"timestamp\":0,\"input_length\":2}\n{\"timestamp\":1,\"messages\":[]}\n";
    let run = replay(
        "http://127.0.0.1:9",
        &["--model", "m", "--endpoint", "completions"],
        trace,
    );
    assert_eq!(run.code, 65);
    assert!(
        run.stderr.contains("line 2: field `messages`"),
        "{}",
        run.stderr
    );
}

#[test]
fn prompts_with_a_real_tokenizer_are_exact() {
    let Some(data) = crate::util::data_dir("prompts_with_a_real_tokenizer_are_exact") else {
        return;
    };
    let tok_path = data.join("tokenizers/deepseek-v4/tokenizer.json");
    let tok = tokenizers::Tokenizer::from_file(&tok_path).unwrap();
    use mctrace::replay::http::prompt::{Synth, Vocab};
    // Every built-in word is one token in this tokenizer, so even without
    // --tokenizer the prompts have exactly the intended length.
    let own = Vocab::for_tokenizer(&tok).unwrap();
    assert_eq!(own.len(), Vocab::builtin().len());
    let builtin = Synth::new(Vocab::builtin(), 0, 512);
    let exact = Synth::new(own, 0, 512);
    for (synth, tolerance) in [(&builtin, 0.0), (&exact, 0.0)] {
        for (len, ids) in [
            (1000u64, vec![1u64, 2]),
            (512, vec![3]),
            (77, vec![]),
            (3000, vec![1, 2, 5, 6, 7, 8]),
        ] {
            let mut text = String::new();
            synth.prompt(9, len, &ids, &mut text);
            let got = tok.encode(text.as_str(), false).unwrap().get_ids().len() as f64;
            let err = (got - len as f64).abs() / len as f64;
            assert!(err <= tolerance, "{len} tokens wanted, {got} encoded");
        }
    }
    // mc-replay --tokenizer checks its prompts and says so.
    let server = Capture::start();
    let trace = lines(&[
        json!({"timestamp": 0, "input_length": 1000, "hash_ids": [1, 2], "output_length": 1}),
        json!({"timestamp": 1, "input_length": 1500, "hash_ids": [1, 2, 3], "output_length": 1}),
    ]);
    let run = replay(
        &server.url,
        &["--model", "M", "--tokenizer", tok_path.to_str().unwrap()],
        &trace,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("prompts re-encoded, largest difference 0 tokens"),
        "{}",
        run.stderr
    );
    for (_, b) in server.requests() {
        let text = b["messages"][0]["content"].as_str().unwrap().to_string();
        let n = tok.encode(text.as_str(), false).unwrap().get_ids().len();
        assert!(n == 1000 || n == 1500, "{n}");
    }
}

#[test]
fn duration_ends_a_closed_loop() {
    let mock = Mock::start(&["--ttft-ms", "50"]);
    let rows: Vec<Value> = (0..40)
        .map(|_| json!({"input_length": 4, "output_length": 1}))
        .collect();
    let args = ["--model", "m", "--concurrency", "1", "--duration", "0.2"];
    let run = replay(&mock.url, &args, &lines(&rows));
    assert_eq!(run.code, 0, "{}", run.stderr);
    // One at a time, 50 ms each: about 4 fit in 200 ms; none is due after it.
    let n = run.results.len();
    assert!((2..=5).contains(&n), "{n} sent");
    assert!(run.results.iter().all(|r| r.t_sched_ms <= 200.0));
    assert!(
        run.stderr.contains(&format!("{} rows not sent", 40 - n)),
        "{}",
        run.stderr
    );
}

#[test]
fn real_mooncake_rows_replay_with_exact_lengths() {
    let Some(data) = crate::util::data_dir("real_mooncake_rows_replay_with_exact_lengths") else {
        return;
    };
    let mock = Mock::start(&[]);
    for (file, rows, speedup) in [
        ("conversation_trace.jsonl", 200, "144"),
        ("synthetic_trace.jsonl", 200, "50"),
    ] {
        let text = std::fs::read_to_string(data.join("mooncake").join(file)).unwrap();
        let head: String = text.lines().take(rows).map(|l| format!("{l}\n")).collect();
        let run = replay(&mock.url, &["--model", "m", "--speedup", speedup], &head);
        assert_eq!(run.code, 0, "{file}: {}", run.stderr);
        assert_eq!(run.results.len(), rows, "{file}");
        for (r, line) in run.results.iter().map(|r| (r, r.line)) {
            let row: Value =
                serde_json::from_str(text.lines().nth(line as usize - 1).unwrap()).unwrap();
            assert_eq!(r.status, "ok", "{file} line {line}: {r:?}");
            // mc-mock counts words: the prompt has exactly input_length of them.
            assert_eq!(
                r.prompt_tokens,
                row["input_length"].as_u64(),
                "{file} line {line}"
            );
            assert_eq!(
                r.completion_tokens,
                row["output_length"].as_u64(),
                "{file} line {line}"
            );
        }
    }
}

#[test]
fn the_server_cache_sees_the_traces_sharing() {
    // mc-mock keeps every 16-word block it has seen (an infinite prefix
    // cache); one request at a time, in file order.
    let mock = Mock::start(&["--prefix-cache", "--cache-block-size", "16"]);
    let rows = [
        (json!([1, 2, 3]), 48, 0),
        (json!([1, 2, 4]), 48, 32),
        (json!([1, 2, 3, 5]), 64, 48),
        (json!([6]), 16, 0),
        (json!([1, 7]), 32, 16),
        // Block 3 cut to 8 words: blocks 1 and 2 hit, half a block cannot.
        (json!([1, 2, 3]), 40, 32),
        // No ids: text of its own.
        (json!(null), 32, 0),
        (json!([1, 2, 3]), 48, 48),
    ];
    let trace: String = rows
        .iter()
        .map(|(ids, len, _)| {
            let mut r = json!({"input_length": len, "output_length": 1});
            if !ids.is_null() {
                r["hash_ids"] = ids.clone();
            }
            format!("{r}\n")
        })
        .collect();
    let args = ["--model", "m", "--concurrency", "1", "--block-size", "16"];
    let run = replay(&mock.url, &args, &trace);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let r = by_line(&run.results);
    for (i, (_, len, cached)) in rows.iter().enumerate() {
        let res = r[&(i as u64 + 1)];
        assert_eq!(res.prompt_tokens, Some(*len), "line {}", i + 1);
        assert_eq!(res.cached_tokens, Some(*cached), "line {}", i + 1);
    }
    // Another seed is other text: nothing of the first run is reused.
    let run = replay(&mock.url, &[&args[..], &["--seed", "9"]].concat(), &trace);
    assert_eq!(
        run.results
            .iter()
            .find(|r| r.line == 1)
            .unwrap()
            .cached_tokens,
        Some(0)
    );
}

#[test]
fn replayed_real_traces_hit_the_cache_as_mc_analyze_predicts() {
    let Some(data) =
        crate::util::data_dir("replayed_real_traces_hit_the_cache_as_mc_analyze_predicts")
    else {
        return;
    };
    for (file, rows) in [
        ("conversation_trace.jsonl", 200),
        ("synthetic_trace.jsonl", 300),
    ] {
        // A fresh cache per trace (both number their ids from 0).
        let mock = Mock::start(&["--prefix-cache"]);
        let text = std::fs::read_to_string(data.join("mooncake").join(file)).unwrap();
        let head: String = text.lines().take(rows).map(|l| format!("{l}\n")).collect();
        // mc-analyze's infinite cache, in file order.
        let report: Value =
            serde_json::from_str(&crate::util::run_ok("mc-analyze", &["--json"], &head)).unwrap();
        // (mc-analyze writes token counts as JSON floats.)
        let predicted = report["cache"]["results"][0]["hit_tokens"]
            .as_f64()
            .unwrap() as u64;
        // One request at a time, in file order, against mc-mock's cache.
        let args = ["--model", "m", "--concurrency", "1", "--speedup", "1000"];
        let run = replay(&mock.url, &args, &head);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let measured: u64 = run.results.iter().map(|r| r.cached_tokens.unwrap()).sum();
        // mc-mock credits whole 16-word blocks only, so a reused partial
        // last block (k tokens) counts floor(k/16)*16 there: less than 16
        // short per row. Where no partial block is reused, equal.
        assert!(measured <= predicted, "{file}: {measured} > {predicted}");
        assert!(
            predicted - measured < 16 * rows as u64,
            "{file}: {measured} vs {predicted}"
        );
        if file == "conversation_trace.jsonl" {
            assert_eq!(measured, predicted, "{file}");
            assert_eq!(predicted, 164_864);
        }
    }
}

#[test]
fn rows_that_disagree_with_the_block_size_are_named() {
    let server = Capture::start();
    // At B = 512, 3 ids need more than 1024 tokens: these rows were made
    // with another block size.
    let trace = lines(&[
        json!({"timestamp": 0, "input_length": 300, "hash_ids": [1, 2, 3], "output_length": 1}),
        json!({"timestamp": 1, "input_length": 1500, "hash_ids": [1, 2, 3], "output_length": 1}),
        json!({"timestamp": 2, "input_length": 200, "hash_ids": [4, 5], "output_length": 1}),
    ]);
    // auto: 300 tokens in 3 ids allow 100..=149, 1500 in 3 allow 500..=749:
    // no size fits both, and nothing is sent.
    let run = replay(&server.url, &["--model", "M"], &trace);
    assert_eq!(run.code, 65, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("mc-replay: --block-size auto: no block size fits every row"),
        "{}",
        run.stderr
    );
    // An explicit 512: rows 1 and 3 have fewer tokens than their ids need.
    let run = replay(
        &server.url,
        &["--model", "M", "--block-size", "512"],
        &trace,
    );
    assert_eq!(run.code, 65, "{}", run.stderr);
    assert!(
        run.stderr.contains("mc-replay: line 1: field `input_length`: 300 tokens do not fill 3 hash ids at block size 512 (2 such rows; check --block-size)"),
        "{}",
        run.stderr
    );
    assert!(server.requests().is_empty());
    // At 128 rows 1 and 3 fit, row 2 has an unhashed tail (1500 > 3 * 128):
    // it is sent, with text unique to the row after its blocks.
    let run = replay(
        &server.url,
        &["--model", "M", "--block-size", "128"],
        &trace,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "1 rows have more tokens than their hash ids cover at --block-size 128 (line 2)"
        ),
        "{}",
        run.stderr
    );
    // Their prompts still have input_length tokens.
    let r = by_line(&run.results);
    assert_eq!(r[&1].input_tokens, Some(300));
    let mut seen = server.requests();
    seen.sort_by_key(|(h, _)| h["x-trace-line"].clone());
    let words = |i: usize| {
        seen[i].1["messages"][0]["content"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .count()
    };
    assert_eq!((words(0), words(1), words(2)), (300, 1500, 200));
}

#[test]
fn on_error_skip_replays_the_good_rows() {
    let mock = Mock::start(&[]);
    let trace =
        "{\"timestamp\":0,\"input_length\":3}\nnot json\n{\"timestamp\":1,\"input_length\":3}\n";
    let run = replay(&mock.url, &["--model", "m", "--on-error", "skip"], trace);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut got: Vec<u64> = run.results.iter().map(|r| r.line).collect();
    got.sort();
    assert_eq!(got, [1, 3]);
    assert!(run.stderr.contains("skipped 1"), "{}", run.stderr);
}

#[test]
fn any_session_id_reaches_the_server() {
    let server = Capture::start();
    let trace = lines(&[json!({"session_id": "会话 1%", "timestamp": 0, "input_length": 2})]);
    let run = replay(&server.url, &["--model", "M"], &trace);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.results[0].status, "ok");
    // The result keeps the id as written; the header carries it percent-encoded.
    assert_eq!(run.results[0].session_id.as_deref(), Some("会话 1%"));
    assert_eq!(
        server.requests()[0].0["x-session-id"],
        "%E4%BC%9A%E8%AF%9D 1%25"
    );
    // A header value that HTTP cannot carry is a usage error, not failed requests.
    let run = replay(&server.url, &["--model", "M", "--header", "X-A: é"], &trace);
    assert_eq!(run.code, 2);
}

#[test]
fn arrival_rate_counts_first_turns() {
    let mock = Mock::start(&[]);
    // Three sessions starting 100 ms apart, each with two later turns.
    let mut rows = Vec::new();
    for s in 0..3 {
        rows.push(
            json!({"session_id": s, "timestamp": s * 100, "input_length": 4, "output_length": 1}),
        );
    }
    for s in 0..3 {
        for _ in 0..2 {
            rows.push(json!({"session_id": s, "input_length": 8, "output_length": 1}));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("s.json");
    let args = ["--model", "m", "--summary", summary.to_str().unwrap()];
    let run = replay(&mock.url, &args, &lines(&rows));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.results.len(), 9);
    let s: Summary = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    // 3 arrivals over 200 ms: 10 per second, asked and achieved.
    assert_eq!(s.trace_rate, Some(10.0));
    assert!((s.send_rate - 10.0).abs() < 1.0, "{}", s.send_rate);
    assert!(run.stderr.contains("arrival rate"), "{}", run.stderr);
}

#[test]
fn errors_print_their_cause_and_urls_need_a_scheme() {
    let trace = "{\"timestamp\":0,\"input_length\":3}\n";
    let out = tool("mc-replay")
        .args(["--url", "http://127.0.0.1:9"])
        .write_stdin(trace)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot list models"), "{err}");
    assert!(err.to_lowercase().contains("connection refused"), "{err}");

    let out = tool("mc-replay")
        .args(["--url", "localhost:8123"])
        .write_stdin(trace)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("expected http://HOST:PORT"), "{err}");
}

/// A server that answers mc-replay's one check that it is there (a
/// connection) and then goes away: every request after it is refused.
fn gone_after_the_check() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let _ = listener.accept();
        drop(listener);
    });
    url
}

#[test]
fn a_dead_server_stops_the_run_early_with_exit_69() {
    // The server goes away after the check: every request is refused.
    let rows: Vec<Value> = (0..400)
        .map(|i| json!({"timestamp": i * 5, "input_length": 4, "output_length": 1}))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("s.json");
    let args = [
        "--model",
        "m",
        "--max-consecutive-failures",
        "20",
        "--summary",
        summary.to_str().unwrap(),
    ];
    let started = std::time::Instant::now();
    let run = replay(&gone_after_the_check(), &args, &lines(&rows));
    assert_eq!(run.code, 69, "{}", run.stderr);
    // Stopped after about 20 rows of 5 ms, not the trace's 2 s.
    assert!(started.elapsed() < Duration::from_millis(1500));
    assert!(
        run.stderr.contains("stopped early: 20 requests in a row"),
        "{}",
        run.stderr
    );
    let s: Summary = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    // Every request sent is written.
    assert_eq!(run.results.len() as u64, s.requests.sent);
    assert!(
        (20..400).contains(&run.results.len()),
        "{}",
        run.results.len()
    );
    assert_eq!(s.stopped_early.as_ref().unwrap().consecutive_failures, 20);
    assert!(kinds(&run).iter().all(|k| k == "connect"));

    // 0 never stops: the whole trace is sent (and every request failed).
    let rows: Vec<Value> = (0..30)
        .map(|_| json!({"timestamp": 0, "input_length": 4, "output_length": 1}))
        .collect();
    let run = replay(
        &gone_after_the_check(),
        &["--model", "m", "--max-consecutive-failures", "0"],
        &lines(&rows),
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.results.len(), 30);
}

#[test]
fn a_server_that_dies_mid_run_stops_it() {
    let mock = Mock::start(&[]);
    let url = mock.url.clone();
    let rows: Vec<Value> = (0..300)
        .map(|i| json!({"timestamp": i * 10, "input_length": 4, "output_length": 1}))
        .collect();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        drop(mock);
    });
    let run = replay(
        &url,
        &["--model", "m", "--max-consecutive-failures", "10"],
        &lines(&rows),
    );
    killer.join().unwrap();
    assert_eq!(run.code, 69, "{}", run.stderr);
    let k = kinds(&run);
    assert!(k.iter().filter(|k| *k == "ok").count() >= 10, "{k:?}");
    assert!(k[k.len() - 10..].iter().all(|k| k == "connect"), "{k:?}");
    assert!(k.len() < 300);
}

#[test]
fn flags_from_vllm_and_aiperf_are_understood() {
    let mock = Mock::start(&[]);
    let rows: Vec<Value> = (0..5)
        .map(|_| json!({"input_length": 4, "output_length": 1}))
        .collect();
    for args in [
        ["--request-rate", "200", "--num-prompts", "2"],
        ["--request-rate", "200", "--request-count", "2"],
    ] {
        let out = tool("mc-replay")
            .args(["--base-url", &mock.url, "--model", "m"])
            .args(args)
            .write_stdin(lines(&rows))
            .timeout(Duration::from_secs(30))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
    }
    let timed = lines(&[json!({"timestamp": 0, "input_length": 4, "output_length": 1})]);
    let run = replay(&mock.url, &["--model", "m", "--fixed-schedule"], &timed);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("timestamps are followed by default"));
    let help = tool("mc-replay").arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(help.contains("--request-rate is --rate"), "{help}");
    assert!(help.contains("69"), "{help}");
}

#[test]
fn the_summary_describes_the_run() {
    let mock = Mock::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("t.jsonl");
    std::fs::write(&input, two_rows()).unwrap();
    let summary = dir.path().join("s.json");
    let before_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64;
    let out = tool("mc-replay")
        .args(["--url", &mock.url, "--speedup", "2", "--seed", "7"])
        .args(["--block-size", "16", "--summary", summary.to_str().unwrap()])
        .args(["-i", input.to_str().unwrap()])
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert_success(&out);
    let s: Summary = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    let r = &s.run;
    assert_eq!(
        (r.tool.as_str(), r.version.as_str()),
        ("mc-replay", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(r.target, "http");
    assert_eq!(r.url.as_deref(), Some(mock.url.as_str()));
    assert_eq!(r.endpoint, "chat");
    // Found at /v1/models.
    assert_eq!(r.model.as_deref(), Some("mock-model"));
    assert_eq!(r.input, input.display().to_string());
    assert_eq!(r.rows, 2);
    assert_eq!((r.speedup, r.seed, r.block_size), (2.0, 7, 16));
    assert_eq!(
        (r.arrival.as_str(), r.rate, r.concurrency),
        ("timestamps", None, None)
    );
    assert_eq!(r.turns, "cumulative");
    assert!(r.start_unix_ms >= before_ms && r.start_unix_ms < before_ms + 20_000.0);
    assert!(
        r.start_time.ends_with('Z') && r.start_time.len() == 20,
        "{}",
        r.start_time
    );
    assert!(r.host.as_ref().is_some_and(|h| !h.is_empty()));
    assert!(s.engine.is_none());

    // Standard input is `-`; --rate and --concurrency are recorded.
    let run = replay(
        &mock.url,
        &[
            "--model",
            "m",
            "--rate",
            "50",
            "--arrival",
            "constant",
            "--concurrency",
            "3",
            "--summary",
            summary.to_str().unwrap(),
        ],
        &two_rows(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let s: Summary = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    assert_eq!(s.run.input, "-");
    assert_eq!(
        (s.run.arrival.as_str(), s.run.rate, s.run.concurrency),
        ("constant", Some(50.0), Some(3))
    );
    assert_eq!(s.trace_rate, Some(50.0));
}

#[test]
fn the_trace_rate_is_over_the_rows_replayed() {
    let mock = Mock::start(&[]);
    // Five rows 10 ms apart (100 per second), then five an hour later.
    let mut rows: Vec<Value> = (0..5)
        .map(|i| json!({"timestamp": i * 10, "input_length": 4, "output_length": 1}))
        .collect();
    rows.extend((0..5).map(|i| json!({"timestamp": 3_600_000 + i, "input_length": 4})));
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("s.json");
    let args = [
        "--model",
        "m",
        "--max-requests",
        "5",
        "--summary",
        summary.to_str().unwrap(),
    ];
    let run = replay(&mock.url, &args, &lines(&rows));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.results.len(), 5);
    let s: Summary = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    // 4 gaps over 40 ms; over the whole trace it would be 9 / 3600 s.
    let rate = s.trace_rate.unwrap();
    assert!((rate - 100.0).abs() < 1e-9, "{rate}");
    assert!(
        run.stderr.contains("the trace asks for 100.00 req/s"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_plain_status_line_when_stderr_is_not_a_terminal() {
    let mock = Mock::start(&["--itl-ms", "50"]);
    let rows: Vec<Value> = (0..4)
        .map(|i| json!({"timestamp": i * 100, "input_length": 4, "output_length": 6}))
        .collect();
    let run = replay(
        &mock.url,
        &["--model", "m", "--status-every", "0.1"],
        &lines(&rows),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let status: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("mc-replay: sent "))
        .collect();
    assert!(!status.is_empty(), "{}", run.stderr);
    // Plain lines (no terminal control codes), with every count.
    for l in &status {
        assert!(!l.contains('\x1b'), "{l}");
        for word in ["done ", "failed ", "in flight ", "lag p99 "] {
            assert!(l.contains(word), "{l}");
        }
    }
    // At the default (10 s) a 1-second run prints none.
    let run = replay(&mock.url, &["--model", "m"], &lines(&rows));
    assert!(!run.stderr.contains("mc-replay: sent "), "{}", run.stderr);
}

#[test]
fn the_tokenizer_check_is_announced_and_its_failure_explained() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-tokenizer.json");
    let out = tool("mc-replay")
        .args(["--url", "http://127.0.0.1:9", "--model", "m"])
        .args(["--tokenizer", missing.to_str().unwrap()])
        .env("HF_HUB_OFFLINE", "1")
        .write_stdin(two_rows())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let announce = err.find("loading it and checking").expect("announced");
    let failure = err.find("cannot use the tokenizer").expect("explained");
    assert!(announce < failure, "{err}");
}

#[test]
fn absurd_times_are_usage_errors_naming_the_limit() {
    for (flag, value) in [
        ("--timeout", "1e20"),
        ("--drain-timeout", "1e300"),
        ("--duration", "1e20"),
        ("--rate", "1e-300"),
    ] {
        let out = tool("mc-replay")
            .args(["--url", "http://127.0.0.1:9", "--model", "m", flag, value])
            .write_stdin(two_rows())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains("limit") && err.contains(flag), "{flag}: {err}");
    }
}

#[test]
fn absurd_rows_are_refused_before_anything_is_sent() {
    let mock = Mock::start(&[]);
    for (row, want) in [
        (
            json!({"timestamp": 1, "input_length": 1_000_000_000_000u64}),
            "line 2: field `input_length`: more than the limit of 10000000 tokens",
        ),
        (
            json!({"timestamp": 1e308, "input_length": 4}),
            "line 2: field `timestamp`",
        ),
        (
            json!({"session_id": "a", "delay": 1e15, "input_length": 4}),
            "line 2: field `delay`",
        ),
        (
            json!({"session_id": "a", "delay": 1e17, "input_length": 4}),
            "line 2: field `delay`",
        ),
        // Within the per-field limits, but a schedule of 31 years.
        (
            json!({"timestamp": 1e12, "input_length": 4}),
            "line 2: field `timestamp`",
        ),
        // 30,000 ids of 512 tokens: 15 M tokens.
        (
            json!({"timestamp": 1, "hash_ids": (0..30_000).collect::<Vec<u64>>()}),
            "line 2: field `hash_ids`",
        ),
    ] {
        let first =
            json!({"session_id": "a", "timestamp": 0, "input_length": 4, "output_length": 1});
        let run = replay(&mock.url, &["--model", "m"], &lines(&[first, row.clone()]));
        assert_eq!(run.code, 65, "{row}: {}", run.stderr);
        assert!(run.stderr.contains(want), "{row}: {}", run.stderr);
        assert!(run.stderr.contains("limit"), "{row}: {}", run.stderr);
        assert!(run.results.is_empty());
    }
    assert!(mock.requests().is_empty());
}

#[test]
fn limits_end_the_run_when_reached() {
    let mock = Mock::start(&[]);
    // 20 rows 1 s apart.
    let rows: Vec<Value> = (0..20)
        .map(|i| json!({"timestamp": i * 1000, "input_length": 4, "output_length": 1}))
        .collect();
    let started = std::time::Instant::now();
    let run = replay(
        &mock.url,
        &["--model", "m", "--max-requests", "2"],
        &lines(&rows),
    );
    let took = started.elapsed();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.results.len(), 2);
    // The second request is due at 1 s; nothing waits for the 18 others.
    assert!(took < Duration::from_millis(1900), "{took:?}");
    assert!(run.stderr.contains("18 rows not sent"), "{}", run.stderr);

    // --duration 2 with the next row due at 30 s: ends at 2 s.
    let rows = [
        json!({"timestamp": 0, "input_length": 4, "output_length": 1}),
        json!({"timestamp": 30_000, "input_length": 4, "output_length": 1}),
    ];
    let started = std::time::Instant::now();
    let run = replay(
        &mock.url,
        &["--model", "m", "--duration", "2"],
        &lines(&rows),
    );
    let took = started.elapsed();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.results.len(), 1);
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_millis(2900),
        "{took:?}"
    );
    assert!(run.stderr.contains("1 rows not sent"), "{}", run.stderr);
}

#[test]
fn line_buffered_results_arrive_as_they_complete() {
    let mock = Mock::start(&[]);
    let trace = lines(&[
        json!({"timestamp": 0, "input_length": 4, "output_length": 1}),
        json!({"timestamp": 1500, "input_length": 4, "output_length": 1}),
    ]);
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("mc-replay"))
        .args(["--url", &mock.url, "--model", "m", "--line-buffered"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(trace.as_bytes())
        .unwrap();
    let started = std::time::Instant::now();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    // The first result is out long before the second row is due (1.5 s),
    // and before the periodic flush (1 s) of block-buffered output.
    assert!(
        started.elapsed() < Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
    let r: RequestResult = serde_json::from_str(&first).unwrap();
    assert_eq!(r.line, 1);
    assert!(child.try_wait().unwrap().is_none());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert_eq!(rest.lines().count(), 1);
    assert!(child.wait().unwrap().success());
}

/// The six rows of the fidelity checks: blocks of 16 tokens, never a prompt
/// the cache holds whole (there vLLM recomputes the last block and mc-mock
/// does not). Queries and hits of an infinite cache of 16-token blocks,
/// one request at a time in file order:
///   [1,2,3] 48        → 0 of 48
///   [1,2,4] 48        → 1,2 = 32 of 48
///   [1,2,3,5] 64      → 1,2,3 = 48 of 64
///   [6] 16            → 0 of 16
///   [1,7] 32          → 1 = 16 of 32
///   [1,2,3,5,8] 72    → 1,2,3,5 = 64 of 72 (id 8 is a partial block)
/// Queries 48+48+64+16+32+72 = 280, hits 32+48+16+64 = 160: 4/7.
fn fidelity_trace() -> String {
    [
        (json!([1, 2, 3]), 48),
        (json!([1, 2, 4]), 48),
        (json!([1, 2, 3, 5]), 64),
        (json!([6]), 16),
        (json!([1, 7]), 32),
        (json!([1, 2, 3, 5, 8]), 72),
    ]
    .iter()
    .map(|(ids, len)| {
        format!(
            "{}\n",
            json!({"input_length": len, "output_length": 2, "hash_ids": ids})
        )
    })
    .collect()
}

/// Runs the fidelity trace one request at a time; the summary's fidelity.
fn fidelity_run(url: &str, extra: &[&str]) -> (Run, schema::Fidelity) {
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("s.json");
    let mut args = vec![
        "--model",
        "m",
        "--concurrency",
        "1",
        "--block-size",
        "16",
        "--summary",
        summary.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let run = replay(url, &args, &fidelity_trace());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let s: Summary = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    (
        run,
        s.fidelity
            .expect("a real server's summary has a fidelity section"),
    )
}

#[test]
fn fidelity_the_server_sees_the_predicted_hit_rate() {
    let mock = Mock::start(&["--prefix-cache", "--cache-block-size", "16"]);
    let dir = tempfile::tempdir().unwrap();
    let scrapes = dir.path().join("scrapes.jsonl");
    let (run, f) = fidelity_run(&mock.url, &["--metrics-out", scrapes.to_str().unwrap()]);
    assert_eq!(f.server_metrics, "ok");
    assert_eq!(f.server_engine.as_deref(), Some("vllm"));
    assert_eq!(f.metrics_url, Some(format!("{}/metrics", mock.url)));
    let h = &f.hit_rate;
    // See fidelity_trace: 160 of 280 tokens on both sides.
    assert_eq!(h.server_queried_tokens, Some(280.0));
    assert_eq!(h.server_hit_tokens, Some(160.0));
    assert_eq!(h.observed, Some(160.0 / 280.0));
    assert_eq!(h.predicted, Some(160.0 / 280.0));
    assert_eq!(h.predicted_queried_tokens, 280);
    assert_eq!(h.requests, 6);
    // The block size is the one mc-mock reports in vllm:cache_config_info.
    assert_eq!((h.block_size, h.block_size_from.as_str()), (16, "server"));
    assert_eq!((h.kv_tokens, h.predicted_at_kv), (None, None));
    assert!(!f.flagged, "{f:?}");
    assert_eq!(f.cause, None);
    // mc-mock's prompts are exactly the words asked for.
    assert_eq!(
        (f.prompt_tokens.requested, f.prompt_tokens.realised),
        (280, 280)
    );
    assert_eq!(f.prompt_tokens.diff_pct, Some(0.0));
    assert_eq!(
        (f.output_tokens.requested, f.output_tokens.realised),
        (12, 12)
    );
    assert_eq!(f.arrival_rate.intended, None); // a closed loop
    assert!(f.lag_p99_ms.is_some());
    assert_eq!(f.threshold_pp, 5.0);
    let load = f.server.as_ref().unwrap();
    // Scraped after the run: nothing running any more.
    assert_eq!(load.waiting_max, Some(0.0));
    assert!(run.stderr.contains(
        "  prefix-cache hit rate: server 57.14% (160 of 280 tokens); trace 57.14% at block size 16 (the server's)"
    ), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("  ok: the server's hit rate 57.14% is within 5 pp"),
        "{}",
        run.stderr
    );
    // Every scrape is in the file: before, (maybe during), after.
    let text = std::fs::read_to_string(&scrapes).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= 2, "{text}");
    assert_eq!(lines[0]["phase"], "before");
    assert_eq!(lines.last().unwrap()["phase"], "after");
    assert_eq!(lines[0]["known"]["prefix_queries"], 0.0);
    assert_eq!(lines.last().unwrap()["known"]["prefix_queries"], 280.0);
    // Unknown series are kept in the file (a counter's `_created`).
    assert!(lines[0]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["name"] == "vllm:prefix_cache_hits_created"));

    // The same prompts again (same --seed): the cache already holds them.
    let (_, again) = fidelity_run(&mock.url, &[]);
    assert!(again.flagged, "{again:?}");
    assert_eq!(again.cause.as_deref(), Some("warm_cache"));
}

#[test]
fn fidelity_flags_a_server_without_prefix_caching() {
    let mock = Mock::start(&[]);
    let (run, f) = fidelity_run(&mock.url, &[]);
    assert_eq!(f.server_metrics, "ok");
    // vLLM counts no lookups with caching off; mc-mock neither.
    assert_eq!(f.hit_rate.server_queried_tokens, Some(0.0));
    assert_eq!(f.hit_rate.observed, None);
    assert_eq!(f.hit_rate.predicted, Some(160.0 / 280.0));
    assert!(f.flagged);
    assert_eq!(f.cause.as_deref(), Some("prefix_caching_off"));
    assert!(run.stderr.contains("  FLAGGED: the server counted no prefix-cache lookups; the trace predicts 57.14%: likely prefix caching looks off"), "{}", run.stderr);
}

#[test]
fn fidelity_without_server_metrics_the_run_goes_on() {
    let mock = Mock::start(&["--prefix-cache", "--cache-block-size", "16"]);
    // A server that answers 404 at its metrics URL.
    let nowhere = format!("{}/nowhere", mock.url);
    let (run, f) = fidelity_run(&mock.url, &["--metrics-url", &nowhere]);
    assert_eq!(f.server_metrics, "unavailable");
    assert_eq!(f.metrics_note.as_deref(), Some("HTTP 404"));
    assert_eq!(f.scrapes, 0);
    assert!(!f.flagged);
    assert_eq!(f.hit_rate.observed, None);
    // The trace's side is still there.
    assert_eq!(f.hit_rate.predicted, Some(160.0 / 280.0));
    assert_eq!(
        run.stderr
            .matches("mc-replay: note: server metrics at")
            .count(),
        1,
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!(
            "fidelity: server metrics not available (HTTP 404 at {nowhere})"
        )),
        "{}",
        run.stderr
    );
    // --no-server-metrics: nothing is asked (the log is read on a thread:
    // let it catch up first).
    std::thread::sleep(Duration::from_millis(200));
    let before = mock.requests().len();
    let (_, f) = fidelity_run(&mock.url, &["--no-server-metrics"]);
    assert_eq!(f.server_metrics, "off");
    let asked: Vec<Value> = mock.requests()[before..]
        .iter()
        .filter(|r| r["path"] != "/v1/chat/completions")
        .cloned()
        .collect();
    assert!(asked.is_empty(), "{asked:?}");
}

/// A listener that only counts the connections made to it.
fn counting_listener() -> (String, Arc<Mutex<u64>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(Mutex::new(0u64));
    let c = count.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            if conn.is_ok() {
                *c.lock().unwrap() += 1;
            }
        }
    });
    (url, count)
}

#[test]
fn an_output_in_a_missing_folder_is_refused_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir");
    for option in ["--summary", "--summary-csv", "--output", "--metrics-out"] {
        let (url, count) = counting_listener();
        let path = missing.join("x.json");
        let out = tool("mc-replay")
            .args(["--url", &url, option, path.to_str().unwrap()])
            .write_stdin(two_rows())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(73), "{option}: {stderr}");
        assert!(
            stderr.contains(option) && stderr.contains("does not exist"),
            "{option}: {stderr}"
        );
        // Give a connection that was made time to be counted.
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            *count.lock().unwrap(),
            0,
            "{option}: the server was contacted"
        );
        assert!(!missing.exists());
    }
}

#[test]
fn an_output_in_a_missing_folder_is_refused_on_the_engine_model_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("s.json");
    let out = tool("mc-replay")
        .args(["--summary", path.to_str().unwrap()])
        .write_stdin(two_rows())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(73));
    assert!(out.stdout.is_empty(), "no result line before the check");
}

#[test]
fn a_block_size_most_rows_contradict_is_bad_data_naming_the_right_one() {
    // Rows of 2 ids and ~1,000 tokens: 512 tokens per id.
    let trace: String = (0..5)
        .map(|i| {
            format!(
                "{}\n",
                json!({"timestamp": i * 10, "input_length": 1000 + i, "output_length": 4,
                       "hash_ids": [i * 3, i * 3 + 1]})
            )
        })
        .collect();
    let out = tool("mc-replay")
        .args(["--block-size", "16"])
        .write_stdin(trace.clone())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("5 of 5 rows")
            && stderr.contains("pass --block-size 512")
            && stderr.contains("--engine-block-size"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing replayed");
    let ok = tool("mc-replay")
        .args(["--block-size", "512"])
        .write_stdin(trace)
        .output()
        .unwrap();
    assert_success(&ok);
}

#[test]
fn a_signal_during_the_model_listing_ends_mc_replay_at_once() {
    // A server that accepts connections and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming().flatten() {
            held.push(c);
        }
    });
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("mc-replay"))
        .args(["--url", &url])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(two_rows().as_bytes())
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let sent = std::time::Instant::now();
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(2),
            "still running 2 s after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("stopped before the first request"), "{err}");
}

#[test]
fn a_closed_or_full_stderr_changes_nothing() {
    // Issue 36: with `2>/dev/full` mc-replay exited 101 before its first
    // request and wrote no results.
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<Value> = (0..20)
        .map(|i| json!({"timestamp": i * 10, "input_length": 40, "output_length": 3, "hash_ids": [i % 3]}))
        .collect();
    std::fs::write(dir.path().join("t.jsonl"), lines(&rows)).unwrap();
    std::fs::write(dir.path().join("bad.jsonl"), "{\"input_length\": -1}\n").unwrap();
    let bin = assert_cmd::cargo::cargo_bin("mc-replay");
    let run = |input: &str, stderr: &str| {
        let _ = std::fs::remove_file(dir.path().join("s.json"));
        let out = Command::new("/bin/sh")
            .current_dir(dir.path())
            .arg("-c")
            .arg(format!(
                "exec \"$0\" -i {input} --block-size 16 --summary s.json {stderr}"
            ))
            .arg(&bin)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let results = String::from_utf8_lossy(&out.stdout).lines().count();
        let summary: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("s.json")).unwrap_or_default(),
        )
        .unwrap_or(Value::Null);
        (
            out.status.code(),
            results,
            summary["requests"]["ok"].clone(),
        )
    };
    let normal = run("t.jsonl", "");
    assert_eq!(normal, (Some(0), 20, json!(20)));
    for stderr in ["2>/dev/full", "2>&-"] {
        assert_eq!(run("t.jsonl", stderr), normal, "{stderr}");
    }
    // A bad trace is exit 65 whatever stderr is.
    for stderr in ["", "2>/dev/full", "2>&-"] {
        assert_eq!(run("bad.jsonl", stderr).0, Some(65), "{stderr}");
    }
}
