//! What happened to one request, as a target reports it: every time in µs
//! on the run's clock, so nothing downstream rebuilds µs from rounded ms.

use serde::{Deserialize, Serialize};

use super::sse::StreamUsage;

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
    /// 5xx (and any other non-2xx).
    #[serde(rename = "http_5xx")]
    Http5xx,
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
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub http_status: Option<u16>,
    /// When the request left (≥ the schedule's time; the gap is lag).
    pub t_send_us: u64,
    /// The first event that carried generated output.
    pub t_first_us: Option<u64>,
    /// The last such event.
    pub t_last_us: Option<u64>,
    /// When the response was read to its end (or failed).
    pub t_end_us: u64,
    /// Events that carried generated output.
    pub chunks: u64,
    /// Gaps between consecutive output events, in µs.
    pub itl_us: Vec<u64>,
    pub usage: Option<StreamUsage>,
    pub finish_reason: Option<String>,
    /// The answer's content (kept only for `--turns delta`).
    pub text: String,
    pub error: Option<Failure>,
}

impl Outcome {
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

#[cfg(test)]
mod tests {
    use super::ErrorKind;

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
