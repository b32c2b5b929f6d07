//! The result line: one JSON object per request, the one format every
//! tool that reads a run's results shares (mc-replay writes it; mc-report,
//! mc-plot and the fit read it). Times are ms from the run's zero with µs
//! resolution ([`ms`], [`us`]).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, RecordError, Result};
use crate::jsonl::{open_input, LineReader, DEFAULT_MAX_LINE_BYTES};
use crate::limits;

/// One request's result line (stdout, JSONL). Times are ms from run start
/// (µs resolution).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestResult {
    /// Input line of the row.
    pub line: u64,
    pub session_id: Option<String>,
    /// 0-based turn within the session.
    pub turn: u32,
    /// Readable id: run id and sequence number.
    pub request_id: String,
    /// The `x-request-id` header sent (a UUID made of the same two parts).
    pub x_request_id: String,
    /// Where the request went: `http` (a server) or `engine` (the model).
    pub target: String,
    /// Sent to warm up; left out of the summary.
    pub warmup: bool,
    pub status: Status,
    pub http_status: Option<u16>,
    pub error: Option<ErrorOut>,
    pub t_sched_ms: f64,
    pub t_send_ms: f64,
    pub t_first_ms: Option<f64>,
    pub t_last_ms: Option<f64>,
    pub t_end_ms: f64,
    /// t_send − t_sched: how late the client was.
    pub lag_ms: f64,
    /// t_first − t_send.
    pub ttft_ms: Option<f64>,
    /// t_last − t_send (t_end − t_send when nothing was generated).
    pub e2e_ms: Option<f64>,
    /// (t_last − t_first) / (output tokens − 1).
    pub tpot_ms: Option<f64>,
    /// t_last − t_sched: latency as the schedule saw it.
    pub sched_latency_ms: Option<f64>,
    /// Events that carried output.
    pub chunks: u64,
    /// The gaps between output events.
    pub itl_ms: Option<ItlSummary>,
    /// Every gap between output events, in order (µs resolution), so the
    /// summary's ITL distribution can be recomputed from result lines
    /// (`mc-report`). Absent in files of older versions.
    #[serde(default)]
    pub itl_gaps_ms: Vec<f64>,
    /// Prompt tokens the row asked for.
    pub input_tokens: Option<u64>,
    /// Prompt tokens the server reported.
    pub prompt_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    /// Output tokens the row asked for.
    pub output_tokens: Option<u64>,
    /// Output tokens the server reported (or, without usage, the event count).
    pub completion_tokens: Option<u64>,
    /// True when the server sent no usage and `completion_tokens` is the
    /// number of output events.
    pub tokens_estimated: bool,
    pub finish_reason: Option<String>,
    /// A successful answer with fewer output tokens than the exact length
    /// asked for (`min_tokens`/`ignore_eos`): the server ignored them.
    /// Absent in files of older versions.
    #[serde(default)]
    pub short: bool,
    /// Times the request was sent again from its first byte: a kept-alive
    /// connection the server closed before answering is retried once on
    /// a new one, and the server may have read the first copy (it then
    /// saw the request twice). Absent when 0, and in files of older
    /// versions.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resends: u64,
    /// The shard that sent it, `I/N` (0-based; `mc-replay --shard`).
    /// Absent in unsharded runs and in files of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// The shard plan's digest (SHA-256, hex) the shard ran: every shard of
    /// one run carries the same one. Absent like `shard`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_digest: Option<String>,
    /// A call of an agent graph: the row's own `request_id` (not to be
    /// confused with `request_id` above, this request's name in the run).
    /// Absent for rows that are not graph calls and in files of older
    /// versions; so are the three fields below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The `call_id`s this call waited for: its `wait_for` and the calls
    /// that list it in their `branches`. It was due (`t_sched_ms`) at the
    /// latest of their ends plus `think_ms` and `tool_ms`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wait_for: Vec<String>,
    /// The call's `delay` as the schedule applied it (after --speedup,
    /// --max-delay), ms: think time before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_ms: Option<f64>,
    /// Its `tool_wait_ms` as applied (after --speedup), ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_ms: Option<f64>,
    /// The worker a router sent it to, from 0: one of `--engine-workers N`
    /// engine models, or the index of its server in `--url A,B,…`. Absent
    /// with one worker and in files of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<u32>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl RequestResult {
    /// The same documented limits as a trace row's (`limits`): every
    /// token count at most `MAX_ROW_TOKENS`, every time finite and within
    /// `MAX_TIME_MS` (durations at least 0). A reader that sizes memory or
    /// a model by these values (mc-fit, mc-report) trusts them after this.
    pub fn check(&self) -> std::result::Result<(), RecordError> {
        for (field, v) in [
            ("input_tokens", self.input_tokens),
            ("prompt_tokens", self.prompt_tokens),
            ("cached_tokens", self.cached_tokens),
            ("output_tokens", self.output_tokens),
            ("completion_tokens", self.completion_tokens),
            ("chunks", Some(self.chunks)),
        ] {
            if let Some(v) = v {
                limits::tokens(field, v)?;
            }
        }
        // Times on the run's clock; lag may be a hair below 0.
        for (field, v) in [
            ("t_sched_ms", Some(self.t_sched_ms)),
            ("t_send_ms", Some(self.t_send_ms)),
            ("t_first_ms", self.t_first_ms),
            ("t_last_ms", self.t_last_ms),
            ("t_end_ms", Some(self.t_end_ms)),
            ("lag_ms", Some(self.lag_ms)),
        ] {
            if let Some(v) = v {
                limits::time_ms(field, v.abs())?;
            }
        }
        let itl = self.itl_ms.as_ref();
        for (field, v) in [
            ("ttft_ms", self.ttft_ms),
            ("e2e_ms", self.e2e_ms),
            ("tpot_ms", self.tpot_ms),
            ("sched_latency_ms", self.sched_latency_ms),
            ("itl_ms.mean", itl.map(|i| i.mean)),
            ("itl_ms.min", itl.map(|i| i.min)),
            ("itl_ms.p50", itl.map(|i| i.p50)),
            ("itl_ms.p99", itl.map(|i| i.p99)),
            ("itl_ms.max", itl.map(|i| i.max)),
            (
                "error.retry_after_s",
                self.error.as_ref().and_then(|e| e.retry_after_s),
            ),
        ] {
            if let Some(v) = v {
                limits::time_ms(field, v)?;
            }
        }
        for &g in &self.itl_gaps_ms {
            limits::time_ms("itl_gaps_ms", g)?;
        }
        Ok(())
    }
}

/// Why a request failed, as written in its result line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The server refused or reset the connection before answering.
    Connect,
    /// The host name did not resolve.
    Dns,
    /// `--timeout` passed before the answer was complete.
    Timeout,
    /// HTTP 429.
    RateLimited,
    /// Any other 4xx.
    #[serde(rename = "http_4xx")]
    Http4xx,
    /// 5xx.
    #[serde(rename = "http_5xx")]
    Http5xx,
    /// A 3xx: a redirect, which a completion does not follow. Not in
    /// files of older versions (they called it `http_5xx`).
    #[serde(rename = "http_3xx")]
    Http3xx,
    /// A 1xx as the final answer (`101 Switching Protocols`: the server
    /// wants another protocol). Not in files of older versions (they
    /// called it `http_5xx`).
    #[serde(rename = "http_1xx")]
    Http1xx,
    /// A 200 answer to a streaming request that is not a stream and holds
    /// no completion (`{}`): the server did not stream. Not in files of
    /// older versions (they counted it `ok`).
    NotStreamed,
    /// `data: {"error": ...}` after the stream began.
    StreamError,
    /// An event that is not JSON.
    BadSse,
    /// The stream ended (or broke) before `[DONE]`.
    Incomplete,
    /// Any other transport or protocol failure.
    Transport,
    /// Still in flight when the run was stopped and the drain time ran out.
    Cancelled,
}

impl ErrorKind {
    /// Failures that say the server cannot be reached at all (as opposed
    /// to a server that answers badly): these count towards
    /// `--max-consecutive-failures`.
    pub fn is_unreachable(self) -> bool {
        matches!(self, ErrorKind::Connect | ErrorKind::Dns)
    }
}

impl std::fmt::Display for ErrorKind {
    /// The serde name, so result lines, the summary and its table agree.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = serde_json::to_value(self).map_err(|_| std::fmt::Error)?;
        f.write_str(v.as_str().unwrap_or_default())
    }
}

/// How an `incomplete` stream's message begins when `[DONE]` came before
/// any `finish_reason`: the server cut the stream (the summary counts these).
pub const CUT_AT_DONE: &str = "[DONE] arrived before any finish_reason";

/// A request's status in its result line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Error,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorOut {
    pub kind: ErrorKind,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ItlSummary {
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// Milliseconds with µs resolution.
pub fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// The µs a result line's ms value was made from: exact for every value
/// [`ms`] wrote (a whole number of µs below 2^53 divided by 1000 and
/// printed shortest-round-trip comes back within a fraction of a µs).
/// Negative or non-finite values (hand-edited files) count as 0.
pub fn us(ms: f64) -> u64 {
    let us = (ms * 1000.0).round();
    if us.is_finite() && us > 0.0 {
        us as u64
    } else {
        0
    }
}

pub fn round_us(x_ms: f64) -> f64 {
    (x_ms * 1000.0).round() / 1000.0
}

impl RequestResult {
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }
}

/// Mean, min, p50, p99 and max of a request's gaps between output events.
pub fn itl_summary(gaps_us: &[u64]) -> Option<ItlSummary> {
    if gaps_us.is_empty() {
        return None;
    }
    let mut v = gaps_us.to_vec();
    v.sort_unstable();
    let pick = |q: f64| ms(v[((v.len() - 1) as f64 * q).round() as usize]);
    Some(ItlSummary {
        mean: round_us(ms(v.iter().sum::<u64>()) / v.len() as f64),
        min: ms(v[0]),
        p50: pick(0.5),
        p99: pick(0.99),
        max: ms(v[v.len() - 1]),
    })
}

/// Appends `r` as one JSON line, without the newline (the output adds it).
pub fn write(buf: &mut Vec<u8>, r: &RequestResult) {
    // Serialising plain structs into a Vec cannot fail.
    let _ = serde_json::to_writer(buf, r);
}

/// Reads one result file (or stdin for `-`), appending its lines; a line
/// that is not a result line is an error naming the file and the line.
pub fn read_file(path: &Path, out: &mut Vec<RequestResult>) -> Result<()> {
    read_file_numbered(path, &mut |_, r| out.push(r))
}

/// [`read_file`], handing over each line's number with its result.
pub fn read_file_numbered(path: &Path, each: &mut dyn FnMut(u64, RequestResult)) -> Result<()> {
    let input = open_input(Some(path))?;
    let mut reader = LineReader::new_text(input, DEFAULT_MAX_LINE_BYTES);
    let name = if path == Path::new("-") {
        "stdin".to_string()
    } else {
        path.display().to_string()
    };
    while let Some(line) = reader.next_line()? {
        let r: RequestResult = serde_json::from_slice(line.bytes).map_err(|e| {
            Error::Input(format!(
                "{name}: line {}: not an mc-replay result line: {e}",
                line.no
            ))
        })?;
        r.check()
            .map_err(|e| Error::Input(format!("{name}: line {}: {e}", line.no)))?;
        each(line.no, r);
    }
    Ok(())
}
