//! One request: send it, read the stream as it arrives, and note when each
//! part came (µs on the run's [`Clock`]). Every failure becomes an
//! [`Outcome`] with an error kind, never a panic or an early return without
//! a result.

use std::io::Read;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::inflight::Live;
use super::sse::{self, Event};
use super::stream::{BodyEnd, StreamReader};
pub use crate::replay::outcome::{ErrorKind, Failure, Outcome};

/// One prepared request.
pub struct Outgoing<'a> {
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
    pub fn now_us(&self) -> u64 {
        self.us(Instant::now())
    }
    pub fn at(&self, us: u64) -> Instant {
        self.start + Duration::from_micros(us)
    }
}

/// Sends `req` and reads its answer to the end.
pub fn execute(agent: &ureq::Agent, req: &Outgoing<'_>, clock: Clock, live: &Live) -> Outcome {
    let mut builder = agent
        .post(req.url)
        .header("content-type", "application/json");
    for (k, v) in req.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let t_send_us = clock.now_us();
    let mut out = Outcome {
        t_send_us,
        t_end_us: t_send_us,
        ..Outcome::default()
    };
    let response = builder.send(req.body);
    let mut response = match response {
        Ok(r) => r,
        Err(e) => {
            out.t_end_us = clock.now_us();
            out.error = Some(transport_failure(e));
            return out;
        }
    };
    let status = response.status().as_u16();
    out.http_status = Some(status);
    if !(200..300).contains(&status) {
        out.error = Some(status_failure(&mut response));
        out.t_end_us = clock.now_us();
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

/// Reads an SSE stream, timing each read that completes events; the
/// stream's verdict is [`StreamReader`]'s.
fn read_stream(
    body: &mut impl Read,
    keep_text: bool,
    clock: Clock,
    live: &Live,
    out: &mut Outcome,
) {
    let mut reader = StreamReader::new(std::mem::take(out), keep_text);
    let mut buf = vec![0u8; 16 * 1024];
    let end = loop {
        match body.read(&mut buf) {
            Ok(0) => break BodyEnd::Clean,
            Ok(n) => reader.feed(&buf[..n], clock.now_us(), live),
            Err(e) => {
                let e = ureq::Error::from(e);
                break match e {
                    ureq::Error::Timeout(_) => BodyEnd::Timeout(e.to_string()),
                    _ => BodyEnd::Broken(e.to_string()),
                };
            }
        }
    };
    *out = reader.finish(end, clock.now_us());
}

/// A server that ignored `stream: true` and sent one JSON answer.
fn read_whole(body: &mut impl Read, live: &Live, clock: Clock, out: &mut Outcome) {
    let mut bytes = Vec::new();
    let read = body.take(256 << 20).read_to_end(&mut bytes);
    let now = clock.now_us();
    out.t_end_us = now;
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
            out.t_first_us = Some(now);
            out.t_last_us = Some(now);
            out.chunks = 1;
            live.first_us_plus1.store(now + 1, Ordering::Relaxed);
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
        Event::StreamUsage(_) | Event::Done => {}
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
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = response
        .body_mut()
        .with_config()
        .limit(64 * 1024)
        .read_to_string()
        .unwrap_or_default();
    let message = status_message(status, content_type.as_deref(), &body);
    let kind = match status {
        429 => ErrorKind::RateLimited,
        400..=499 => ErrorKind::Http4xx,
        _ => ErrorKind::Http5xx,
    };
    Failure {
        kind,
        message,
        retry_after_s,
    }
}

/// `HTTP 400 Bad Request: the server's message`; an empty body says so,
/// and a body that is not JSON names its content type.
fn status_message(status: u16, content_type: Option<&str>, body: &str) -> String {
    let reason = ureq::http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .map_or(String::new(), |r| format!(" {r}"));
    let head = format!("HTTP {status}{reason}");
    if body.trim().is_empty() {
        return match content_type {
            Some(ct) if !ct.is_empty() => format!("{head} (empty body, content-type {ct})"),
            _ => format!("{head} (empty body)"),
        };
    }
    let is_json = content_type.is_some_and(|ct| ct.contains("json"));
    match serde_json::from_str::<serde_json::Value>(body) {
        Ok(v) => match v.get("error").or_else(|| v.get("message")) {
            Some(e) => format!("{head}: {}", sse::error_message(e)),
            None => format!("{head}: {}", sse::shorten(body.as_bytes())),
        },
        Err(_) if !is_json => format!(
            "{head} ({}): {}",
            content_type.unwrap_or("no content-type"),
            sse::shorten(body.as_bytes())
        ),
        Err(_) => format!("{head}: {}", sse::shorten(body.as_bytes())),
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

#[cfg(test)]
mod tests {
    use super::status_message;

    #[test]
    fn status_messages_say_what_is_known() {
        assert_eq!(
            status_message(400, None, ""),
            "HTTP 400 Bad Request (empty body)"
        );
        assert_eq!(
            status_message(400, Some("text/plain"), " "),
            "HTTP 400 Bad Request (empty body, content-type text/plain)"
        );
        assert_eq!(
            status_message(503, Some("text/html"), "<h1>down</h1>"),
            "HTTP 503 Service Unavailable (text/html): <h1>down</h1>"
        );
        assert_eq!(
            status_message(
                400,
                Some("application/json"),
                r#"{"error":{"message":"bad messages","type":"BadRequestError"}}"#
            ),
            "HTTP 400 Bad Request: bad messages"
        );
        assert_eq!(
            status_message(599, None, "x"),
            "HTTP 599 (no content-type): x"
        );
    }
}
