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
        500..=599 => ErrorKind::Http5xx,
        300..=399 => ErrorKind::Http3xx,
        100..=199 => ErrorKind::Http1xx,
        // Not an HTTP status at all (httparse takes any three digits).
        _ => ErrorKind::Transport,
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
        Event::Empty {
            finish_reason: Some(r),
        } => out.finish_reason = Some(r.into_owned()),
        // No choice, or one that neither carries output nor says why it
        // ended (`{}`): not a completion, and nothing was streamed. As
        // `ok` it passed for a short answer of 0 tokens.
        Event::Empty {
            finish_reason: None,
        }
        | Event::StreamUsage(_)
        | Event::Done => {
            out.error = Some(Failure::new(
                ErrorKind::NotStreamed,
                format!(
                    "the server did not stream (no text/event-stream) and its answer holds no \
                     completion: {}",
                    sse::shorten(bytes)
                ),
            ))
        }
        Event::Error(msg) => out.error = Some(Failure::new(ErrorKind::StreamError, msg)),
        Event::Malformed(msg) => {
            out.error = Some(Failure::new(
                ErrorKind::BadSse,
                format!("answer is not a completion: {msg}"),
            ))
        }
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
        // A redirect is not followed and a switch of protocol not made: neither
        // is a server error.
        assert_eq!(status_failure(307, None, None, "").kind, ErrorKind::Http3xx);
        assert_eq!(status_failure(101, None, None, "").kind, ErrorKind::Http1xx);
        assert_eq!(
            status_failure(999, None, None, "").kind,
            ErrorKind::Transport
        );
    }

    #[test]
    fn a_whole_answer_without_a_completion_did_not_stream() {
        let live = Live::default();
        for body in [
            "{}",
            r#"{"choices":[]}"#,
            r#"{"usage":{"prompt_tokens":3}}"#,
        ] {
            let mut out = Outcome::default();
            whole_answer(body.as_bytes(), 5, &live, &mut out);
            let e = out.error.expect(body);
            assert_eq!(e.kind, ErrorKind::NotStreamed, "{body}");
            assert!(e.message.contains("did not stream"), "{}", e.message);
        }
        // A completion sent whole is still one output event.
        let mut out = Outcome::default();
        let body = r#"{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}"#;
        whole_answer(body.as_bytes(), 5, &live, &mut out);
        assert!(out.error.is_none() && out.chunks == 1);
        // An empty completion that says why it ended is an answer too.
        let mut out = Outcome::default();
        let body = r#"{"choices":[{"message":{"content":""},"finish_reason":"length"}]}"#;
        whole_answer(body.as_bytes(), 5, &live, &mut out);
        assert!(out.error.is_none() && out.finish_reason.as_deref() == Some("length"));
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
