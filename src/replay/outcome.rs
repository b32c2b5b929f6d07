//! What happened to one request, as a target reports it: every time in µs
//! on the run's clock, so nothing downstream rebuilds µs from rounded ms.

use crate::results::line::{itl_summary, ms, ErrorOut, RequestResult, Status};
pub use crate::results::ErrorKind;

/// The token counts a server reported for one answer (its `usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StreamUsage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub kind: ErrorKind,
    pub message: String,
    pub retry_after_s: Option<f64>,
}

impl Failure {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Failure {
            kind,
            message: message.into(),
            retry_after_s: None,
        }
    }
}

/// One request's measurements, µs since the run's zero on the target's
/// clock. A real server fills it from the wire; the engine model from its
/// virtual clock.
///
/// In C order, what each token read updates first: those four fields are
/// one cache line ([`Outcome::TOKEN_BYTES`]), which the HTTP client fetches
/// ahead of a stream's next token.
#[derive(Debug, Clone, Default)]
#[repr(C)]
pub struct Outcome {
    /// The first event that carried generated output.
    pub t_first_us: Option<u64>,
    /// The last such event.
    pub t_last_us: Option<u64>,
    /// Events that carried generated output.
    pub chunks: u64,
    /// Gaps between consecutive output events, in µs.
    pub itl_us: Vec<u64>,
    pub http_status: Option<u16>,
    /// When the request left (≥ the schedule's time; the gap is lag).
    pub t_send_us: u64,
    /// When the response was read to its end (or failed).
    pub t_end_us: u64,
    pub usage: Option<StreamUsage>,
    pub finish_reason: Option<String>,
    /// The answer's content (kept only for `--turns delta`).
    pub text: String,
    pub error: Option<Failure>,
    /// Times the request was sent again (a closed keep-alive connection).
    pub resends: u64,
}

impl Outcome {
    /// The bytes at the start that a token read updates.
    pub const TOKEN_BYTES: usize =
        std::mem::offset_of!(Outcome, itl_us) + std::mem::size_of::<Vec<u64>>();

    /// A request still in flight when the drain time ran out.
    pub fn cancelled(t_send_us: u64, t_first_us: Option<u64>, chunks: u64, now_us: u64) -> Outcome {
        Outcome {
            t_send_us,
            t_first_us,
            t_end_us: now_us,
            chunks,
            error: Some(Failure::new(
                ErrorKind::Cancelled,
                format!("still in flight after the drain time ({chunks} output events)"),
            )),
            ..Outcome::default()
        }
    }
}

/// Names the requests of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunId(pub u64);

impl RunId {
    /// A run id from the wall clock: two runs never share one in practice.
    pub fn from_clock() -> RunId {
        let ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        RunId(crate::hash::splitmix64(ns))
    }

    /// The readable id of request `seq` (in result lines): `RUN-SEQ`.
    pub fn request_id(self, seq: u64) -> String {
        format!("{:x}-{seq}", self.0)
    }

    /// The `x-request-id` header of request `seq`: a version-4-shaped UUID
    /// (some servers, e.g. llama-cpp-python's, refuse anything else). The
    /// first half is the run id and the second the sequence number, so ids
    /// are unique within a run and reproducible from the result line.
    pub fn request_uuid(self, seq: u64) -> String {
        let hi = (self.0 & !0xF000) | 0x4000;
        let lo = (seq & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000;
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            hi >> 32,
            (hi >> 16) & 0xFFFF,
            hi & 0xFFFF,
            lo >> 48,
            lo & 0xFFFF_FFFF_FFFF
        )
    }
}

/// The row's side of a result: who it was and what it asked for.
pub struct Identity {
    pub line: u64,
    pub session_id: Option<String>,
    pub turn: u32,
    pub request_id: String,
    pub x_request_id: String,
    pub target: &'static str,
    pub warmup: bool,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// The request asked for exactly `output_tokens` (`min_tokens`,
    /// `ignore_eos`): an ok answer with fewer is `short`.
    pub exact_output: bool,
}

impl From<&Failure> for ErrorOut {
    fn from(f: &Failure) -> Self {
        ErrorOut {
            kind: f.kind,
            message: f.message.clone(),
            retry_after_s: f.retry_after_s,
        }
    }
}

/// A request's latencies in µs, derived once from its outcome: the result
/// line shows them in ms, the summary's distributions take them as they are.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Latencies {
    pub t_sched_us: u64,
    pub lag_us: u64,
    pub ttft_us: Option<u64>,
    /// When the answer was complete: the last output event, or the end of
    /// a successful answer without output.
    pub answered_us: Option<u64>,
    pub e2e_us: Option<u64>,
    pub sched_latency_us: Option<u64>,
    /// Rounded to whole µs (the result line's resolution).
    pub tpot_us: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub tokens_estimated: bool,
}

impl Latencies {
    pub fn of(t_sched_us: u64, o: &Outcome) -> Latencies {
        let send = o.t_send_us;
        let usage = o.usage.unwrap_or_default();
        let cancelled = o
            .error
            .as_ref()
            .is_some_and(|e| e.kind == ErrorKind::Cancelled);
        let (completion_tokens, tokens_estimated) = match usage.completion_tokens {
            Some(n) => (Some(n), false),
            None if !cancelled && (o.error.is_none() || o.chunks > 0) => (Some(o.chunks), true),
            None => (None, false),
        };
        let answered_us = o.t_last_us.or(o.error.is_none().then_some(o.t_end_us));
        let tpot_us = match (o.t_first_us, o.t_last_us, completion_tokens) {
            (Some(f), Some(l), Some(n)) if n >= 2 => {
                Some((l.saturating_sub(f) as f64 / (n - 1) as f64).round() as u64)
            }
            _ => None,
        };
        Latencies {
            t_sched_us,
            lag_us: send.saturating_sub(t_sched_us),
            ttft_us: o.t_first_us.map(|f| f.saturating_sub(send)),
            answered_us,
            e2e_us: answered_us.map(|a| a.saturating_sub(send)),
            sched_latency_us: answered_us.map(|a| a.saturating_sub(t_sched_us)),
            tpot_us,
            completion_tokens,
            tokens_estimated,
        }
    }
}

/// The result line of one request: the row's side, its latencies, and
/// what the target reported.
pub fn result_line(id: Identity, lat: &Latencies, o: &Outcome) -> RequestResult {
    let usage = o.usage.unwrap_or_default();
    RequestResult {
        line: id.line,
        session_id: id.session_id,
        turn: id.turn,
        request_id: id.request_id,
        x_request_id: id.x_request_id,
        target: id.target.to_string(),
        warmup: id.warmup,
        status: if o.error.is_none() {
            Status::Ok
        } else {
            Status::Error
        },
        http_status: o.http_status,
        error: o.error.as_ref().map(ErrorOut::from),
        t_sched_ms: ms(lat.t_sched_us),
        t_send_ms: ms(o.t_send_us),
        t_first_ms: o.t_first_us.map(ms),
        t_last_ms: o.t_last_us.map(ms),
        t_end_ms: ms(o.t_end_us),
        lag_ms: ms(lat.lag_us),
        ttft_ms: lat.ttft_us.map(ms),
        e2e_ms: lat.e2e_us.map(ms),
        tpot_ms: lat.tpot_us.map(ms),
        sched_latency_ms: lat.sched_latency_us.map(ms),
        chunks: o.chunks,
        itl_ms: itl_summary(&o.itl_us),
        itl_gaps_ms: o.itl_us.iter().map(|&g| ms(g)).collect(),
        input_tokens: id.input_tokens,
        prompt_tokens: usage.prompt_tokens,
        cached_tokens: usage.cached_tokens,
        output_tokens: id.output_tokens,
        completion_tokens: lat.completion_tokens,
        tokens_estimated: lat.tokens_estimated,
        finish_reason: o.finish_reason.clone(),
        short: o.error.is_none()
            && id.exact_output
            && matches!((id.output_tokens, lat.completion_tokens), (Some(want), Some(got)) if got < want),
        resends: o.resends,
        shard: None,
        plan_digest: None,
        call_id: None,
        wait_for: Vec::new(),
        think_ms: None,
        tool_ms: None,
        worker: None,
    }
}

#[cfg(test)]
mod tests {
    use crate::results::ErrorKind;

    #[test]
    fn kinds_print_as_their_serde_names() {
        assert_eq!(ErrorKind::Http4xx.to_string(), "http_4xx");
        assert_eq!(ErrorKind::RateLimited.to_string(), "rate_limited");
        assert_eq!(
            serde_json::to_string(&ErrorKind::BadSse).unwrap(),
            "\"bad_sse\""
        );
    }
}
