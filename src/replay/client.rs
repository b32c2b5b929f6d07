//! One request: send it, read the stream as it arrives, and note when each
//! part came. Every failure becomes an [`Outcome`] with an error kind, never
//! a panic or an early return without a result.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::sse::{self, Event, EventSplitter, Usage};

/// Why a request failed, as written in its result line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
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
    Http4xx,
    /// 5xx (and any other non-2xx).
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
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Dns => "dns",
            ErrorKind::Timeout => "timeout",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Http4xx => "http_4xx",
            ErrorKind::Http5xx => "http_5xx",
            ErrorKind::StreamError => "stream_error",
            ErrorKind::BadSse => "bad_sse",
            ErrorKind::Incomplete => "incomplete",
            ErrorKind::Transport => "transport",
            ErrorKind::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Failure {
    pub kind: ErrorKind,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<f64>,
}

impl Failure {
    fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Failure {
            kind,
            message: message.into(),
            retry_after_s: None,
        }
    }
}

/// What happened to one request.
#[derive(Debug)]
pub struct Outcome {
    pub http_status: Option<u16>,
    pub t_send: Instant,
    /// The first event that carried generated output.
    pub t_first: Option<Instant>,
    /// The last such event.
    pub t_last: Option<Instant>,
    /// When the response was read to its end (or failed).
    pub t_end: Instant,
    /// Events that carried generated output.
    pub chunks: u64,
    /// Gaps between consecutive output events, in µs.
    pub itl_us: Vec<u64>,
    pub usage: Option<Usage>,
    pub finish_reason: Option<String>,
    /// The answer's content (kept only when asked, for `--turns delta`).
    pub text: String,
    pub error: Option<Failure>,
}

/// Live facts about a request in flight, so a run stopped before it ends
/// can still report what was measured.
#[derive(Debug, Default)]
pub struct Live {
    /// µs since run start of the first output event, plus one (0 = none yet).
    pub first_us_plus1: AtomicU64,
    pub chunks: AtomicU64,
}

/// One prepared request.
pub struct Request<'a> {
    pub url: &'a str,
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
    pub keep_text: bool,
}

/// The clock every time is measured on.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub start: Instant,
}

impl Clock {
    pub fn us(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.start).as_micros() as u64
    }
    pub fn at(&self, us: u64) -> Instant {
        self.start + Duration::from_micros(us)
    }
}

/// Sends `req` and reads its answer to the end.
pub fn execute(agent: &ureq::Agent, req: &Request<'_>, clock: Clock, live: &Live) -> Outcome {
    let mut builder = agent
        .post(req.url)
        .header("content-type", "application/json");
    for (k, v) in req.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let t_send = Instant::now();
    let mut out = Outcome {
        http_status: None,
        t_send,
        t_first: None,
        t_last: None,
        t_end: t_send,
        chunks: 0,
        itl_us: Vec::new(),
        usage: None,
        finish_reason: None,
        text: String::new(),
        error: None,
    };
    let response = builder.send(req.body);
    let mut response = match response {
        Ok(r) => r,
        Err(e) => {
            out.t_end = Instant::now();
            out.error = Some(transport_failure(e));
            return out;
        }
    };
    let status = response.status().as_u16();
    out.http_status = Some(status);
    if !(200..300).contains(&status) {
        out.error = Some(status_failure(&mut response));
        out.t_end = Instant::now();
        return out;
    }
    let is_sse = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    let mut body = response.into_body().into_reader();
    if is_sse {
        read_stream(&mut body, req.keep_text, clock, live, &mut out);
    } else {
        read_whole(&mut body, live, clock, &mut out);
    }
    out
}

/// Reads an SSE stream, timing each read that completes events.
fn read_stream(
    body: &mut impl Read,
    keep_text: bool,
    clock: Clock,
    live: &Live,
    out: &mut Outcome,
) {
    let mut splitter = EventSplitter::default();
    let mut buf = vec![0u8; 16 * 1024];
    let mut done = false;
    let mut usage = None;
    let mut first_problem: Option<Failure> = None;
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            // Everything arrived; only the end of the HTTP body went wrong.
            Err(_) if done => break,
            Err(e) => {
                let e = ureq::Error::from(e);
                let f = match e {
                    ureq::Error::Timeout(_) => Failure::new(ErrorKind::Timeout, e.to_string()),
                    _ => Failure::new(
                        ErrorKind::Incomplete,
                        format!("stream broke after {} output events: {e}", out.chunks),
                    ),
                };
                first_problem.get_or_insert(f);
                break;
            }
        };
        let now = Instant::now();
        let mut on_event = |data: &[u8]| match sse::classify(data, &mut usage) {
            Event::Done => done = true,
            Event::Token {
                text,
                finish_reason,
            } => {
                match out.t_last {
                    None => {
                        out.t_first = Some(now);
                        live.first_us_plus1
                            .store(clock.us(now) + 1, Ordering::Relaxed);
                    }
                    Some(prev) => out.itl_us.push(now.duration_since(prev).as_micros() as u64),
                }
                out.t_last = Some(now);
                out.chunks += 1;
                live.chunks.store(out.chunks, Ordering::Relaxed);
                if keep_text {
                    out.text.push_str(&text);
                }
                if finish_reason.is_some() {
                    out.finish_reason = finish_reason;
                }
            }
            Event::Empty { finish_reason } => {
                if finish_reason.is_some() {
                    out.finish_reason = finish_reason;
                }
            }
            Event::Usage(_) => {}
            Event::Error(msg) => {
                first_problem.get_or_insert(Failure::new(ErrorKind::StreamError, msg));
            }
            Event::Malformed(msg) => {
                first_problem.get_or_insert(Failure::new(
                    ErrorKind::BadSse,
                    format!("malformed event: {msg}"),
                ));
            }
        };
        splitter.feed(&buf[..n], &mut on_event);
    }
    splitter.finish(&mut |data| {
        if data == b"[DONE]" {
            done = true;
        }
    });
    out.t_end = Instant::now();
    out.usage = usage;
    out.error = first_problem.or_else(|| {
        (!done).then(|| {
            Failure::new(
                ErrorKind::Incomplete,
                format!(
                    "stream ended without [DONE] after {} output events",
                    out.chunks
                ),
            )
        })
    });
}

/// A server that ignored `stream: true` and sent one JSON answer.
fn read_whole(body: &mut impl Read, live: &Live, clock: Clock, out: &mut Outcome) {
    let mut bytes = Vec::new();
    let read = body.take(256 << 20).read_to_end(&mut bytes);
    let now = Instant::now();
    out.t_end = now;
    if let Err(e) = read {
        let e = ureq::Error::from(e);
        let kind = match e {
            ureq::Error::Timeout(_) => ErrorKind::Timeout,
            _ => ErrorKind::Incomplete,
        };
        out.error = Some(Failure::new(kind, e.to_string()));
        return;
    }
    let mut usage = None;
    match sse::classify(&bytes, &mut usage) {
        Event::Token {
            text,
            finish_reason,
        } => {
            out.t_first = Some(now);
            out.t_last = Some(now);
            out.chunks = 1;
            live.first_us_plus1
                .store(clock.us(now) + 1, Ordering::Relaxed);
            out.text = text;
            out.finish_reason = finish_reason;
        }
        Event::Empty { finish_reason } => out.finish_reason = finish_reason,
        Event::Error(msg) => out.error = Some(Failure::new(ErrorKind::StreamError, msg)),
        Event::Malformed(msg) => {
            out.error = Some(Failure::new(
                ErrorKind::BadSse,
                format!("answer is not a completion: {msg}"),
            ))
        }
        Event::Usage(_) | Event::Done => {}
    }
    out.usage = usage;
}

/// A non-2xx answer: its status decides the kind; the body's message (the
/// OpenAI `{"error": {...}}` or older vLLM `{"message": ...}`) is kept.
fn status_failure(response: &mut ureq::http::Response<ureq::Body>) -> Failure {
    let status = response.status().as_u16();
    let retry_after_s = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok());
    let body = response
        .body_mut()
        .with_config()
        .limit(64 * 1024)
        .read_to_string()
        .unwrap_or_default();
    let detail = match serde_json::from_str::<serde_json::Value>(&body) {
        Ok(v) => match v.get("error").or_else(|| v.get("message")) {
            Some(e) => sse::error_message(e),
            None => sse::shorten(body.as_bytes()),
        },
        Err(_) => sse::shorten(body.as_bytes()),
    };
    let kind = match status {
        429 => ErrorKind::RateLimited,
        400..=499 => ErrorKind::Http4xx,
        _ => ErrorKind::Http5xx,
    };
    Failure {
        kind,
        message: format!("HTTP {status}: {detail}"),
        retry_after_s,
    }
}

fn transport_failure(e: ureq::Error) -> Failure {
    use std::io::ErrorKind as Io;
    let kind = match &e {
        ureq::Error::HostNotFound => ErrorKind::Dns,
        ureq::Error::Timeout(_) => ErrorKind::Timeout,
        ureq::Error::ConnectionFailed => ErrorKind::Connect,
        ureq::Error::Io(io) => match io.kind() {
            Io::ConnectionRefused | Io::ConnectionReset | Io::ConnectionAborted => {
                ErrorKind::Connect
            }
            Io::TimedOut => ErrorKind::Timeout,
            // A kept-alive connection the server closed while we were idle
            // shows as an early EOF on the answer's first read.
            Io::UnexpectedEof => ErrorKind::Incomplete,
            // std reports a getaddrinfo failure as an uncategorised I/O
            // error; its message is the only sign.
            _ if io.to_string().contains("failed to lookup address") => ErrorKind::Dns,
            _ => ErrorKind::Transport,
        },
        _ => ErrorKind::Transport,
    };
    Failure::new(kind, e.to_string())
}
