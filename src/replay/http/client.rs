//! One request: send it, read the stream as it arrives, and note when each
//! part came (µs on the run's [`Clock`]). Every failure becomes an
//! [`Outcome`] with an error kind, never a panic or an early return without
//! a result.

use std::io::Read;
use std::time::{Duration, Instant};

use super::answer;
use super::inflight::Live;
use super::stream::{BodyEnd, StreamReader};
use super::tls;
pub use crate::replay::outcome::{ErrorKind, Failure, Outcome};

/// One prepared request.
pub struct Outgoing<'a> {
    pub url: &'a str,
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
    pub keep_text: bool,
    /// `--max-event-bytes`.
    pub max_event_bytes: usize,
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
        read_stream(&mut body, req, clock, live, &mut out);
    } else {
        read_whole(&mut body, live, clock, &mut out);
    }
    out
}

/// Reads an SSE stream, timing each read that completes events; the
/// stream's verdict is [`StreamReader`]'s.
fn read_stream(
    body: &mut impl Read,
    req: &Outgoing<'_>,
    clock: Clock,
    live: &Live,
    out: &mut Outcome,
) {
    let mut reader = StreamReader::new(std::mem::take(out), req.keep_text, req.max_event_bytes);
    let mut buf = vec![0u8; 16 * 1024];
    let end = loop {
        match body.read(&mut buf) {
            Ok(0) => break BodyEnd::Clean,
            Ok(n) => {
                if !reader.feed(&buf[..n], clock.now_us(), live) {
                    break BodyEnd::Broken("the stream was refused".into());
                }
            }
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
    let read = body
        .take(answer::WHOLE_BODY_LIMIT as u64)
        .read_to_end(&mut bytes);
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
    answer::whole_answer(&bytes, now, live, out);
}

/// A non-2xx answer, judged by [`answer::status_failure`].
fn status_failure(response: &mut ureq::http::Response<ureq::Body>) -> Failure {
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let (retry_after, content_type) = (header("retry-after"), header("content-type"));
    let body = response
        .body_mut()
        .with_config()
        .limit(answer::ERROR_BODY_LIMIT as u64)
        .read_to_string()
        .unwrap_or_default();
    answer::status_failure(
        status,
        content_type.as_deref(),
        retry_after.as_deref(),
        &body,
    )
}

fn transport_failure(e: ureq::Error) -> Failure {
    let kind = match &e {
        ureq::Error::HostNotFound => ErrorKind::Dns,
        ureq::Error::Timeout(_) => ErrorKind::Timeout,
        ureq::Error::ConnectionFailed => ErrorKind::Connect,
        ureq::Error::Io(io) => answer::io_kind(io),
        _ => ErrorKind::Transport,
    };
    // A TLS failure (ureq passes rustls' inside an I/O error) in the
    // evented client's words, so both clients' result lines say the same.
    let tls = match &e {
        ureq::Error::Io(io) => tls::rustls_error(io),
        ureq::Error::Rustls(t) => Some(t),
        _ => None,
    };
    match tls {
        // Before any answer: the handshake (where a certificate fails).
        Some(t) => Failure::new(kind, tls::describe(t, true)),
        None => Failure::new(kind, e.to_string()),
    }
}
