//! What an answer means, whichever client carried it (the blocking one in
//! `client`, the event-driven one in `evented`): a non-2xx status and its
//! body become a [`Failure`] of the status's kind, a whole (non-streamed)
//! JSON answer becomes an [`Outcome`], and an I/O error before the answer
//! gets its kind. One place, so both clients give the same result lines.

use std::borrow::Cow;
use std::sync::atomic::Ordering;

use super::inflight::Live;
use super::sse::{self, Event};
use crate::replay::outcome::{ErrorKind, Failure, Outcome};

/// How much of an error body is read for its message.
pub const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// How much of a whole (non-streamed) answer is read.
pub const WHOLE_BODY_LIMIT: usize = 256 << 20;

/// A non-2xx answer: its status decides the kind; the body's message (the
/// OpenAI `{"error": {...}}` or older vLLM `{"message": ...}`) is kept.
pub fn status_failure(
    status: u16,
    content_type: Option<&str>,
    retry_after: Option<&str>,
    body: &str,
) -> Failure {
    let kind = match status {
        429 => ErrorKind::RateLimited,
        400..=499 => ErrorKind::Http4xx,
        _ => ErrorKind::Http5xx,
    };
    Failure {
        kind,
        message: status_message(status, content_type, body),
        retry_after_s: retry_after.and_then(|v| v.trim().parse::<f64>().ok()),
    }
}

/// `HTTP 400 Bad Request: the server's message`; an empty body says so,
/// and a body that is not JSON names its content type.
pub fn status_message(status: u16, content_type: Option<&str>, body: &str) -> String {
    let reason = http::StatusCode::from_u16(status)
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

/// A server that ignored `stream: true` and sent one JSON answer, read
/// whole at `now`: the answer is one output event.
pub fn whole_answer(bytes: &[u8], now: u64, live: &Live, out: &mut Outcome) {
    out.t_end_us = now;
    let mut usage = None;
    match sse::classify(bytes, &mut usage) {
        Event::Token {
            text,
            finish_reason,
        } => {
            out.t_first_us = Some(now);
            out.t_last_us = Some(now);
            out.chunks = 1;
            live.first_us_plus1.store(now + 1, Ordering::Relaxed);
            out.text = text.into_owned();
            out.finish_reason = finish_reason.map(Cow::into_owned);
        }
        Event::Empty { finish_reason } => out.finish_reason = finish_reason.map(Cow::into_owned),
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

/// The kind of an I/O error met before the answer began.
pub fn io_kind(e: &std::io::Error) -> ErrorKind {
    use std::io::ErrorKind as Io;
    match e.kind() {
        Io::ConnectionRefused | Io::ConnectionReset | Io::ConnectionAborted => ErrorKind::Connect,
        Io::TimedOut => ErrorKind::Timeout,
        // A kept-alive connection the server closed while we were idle
        // shows as an early EOF on the answer's first read.
        Io::UnexpectedEof => ErrorKind::Incomplete,
        // std reports a getaddrinfo failure as an uncategorised I/O
        // error; its message is the only sign.
        _ if e.to_string().contains("failed to lookup address") => ErrorKind::Dns,
        _ => ErrorKind::Transport,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn statuses_decide_the_kind() {
        let f = status_failure(429, None, Some(" 2.5"), "");
        assert_eq!(
            (f.kind, f.retry_after_s),
            (ErrorKind::RateLimited, Some(2.5))
        );
        assert_eq!(status_failure(404, None, None, "").kind, ErrorKind::Http4xx);
        assert_eq!(status_failure(502, None, None, "").kind, ErrorKind::Http5xx);
    }

    #[test]
    fn io_errors_before_the_answer() {
        use std::io::{Error, ErrorKind as Io};
        assert_eq!(
            io_kind(&Error::from(Io::ConnectionRefused)),
            ErrorKind::Connect
        );
        assert_eq!(
            io_kind(&Error::from(Io::UnexpectedEof)),
            ErrorKind::Incomplete
        );
        assert_eq!(
            io_kind(&Error::other("failed to lookup address information")),
            ErrorKind::Dns
        );
    }
}
