//! One request's exchange on its connection, sans-IO: a plain state
//! machine that holds the request's bytes until they are written, is fed
//! the answer's bytes with the time they arrived, and says when the answer
//! ended and what it measured. It never touches a socket or a clock: the
//! event loop (`event_loop`) reads and writes, and tells it the time, so
//! every framing and accounting rule is tested here byte by byte.
//!
//! What the bytes mean is decided elsewhere, once: the framing in
//! [`wire`], a stream's verdict in [`crate::replay::http::stream`], a
//! status or a whole answer in [`answer`].

use crate::replay::http::answer;
use crate::replay::http::inflight::Live;
use crate::replay::http::stream::{BodyEnd, StreamReader};
use crate::replay::http::wire::{self, Body, Parsed};
use crate::replay::outcome::{ErrorKind, Failure, Outcome};

/// How an exchange ended.
#[derive(Debug)]
pub enum End {
    /// Before the body: the request failed.
    Failed(Failure),
    /// The body ended (cleanly or not); `reuse`: the connection may carry
    /// the next request.
    Body { end: BodyEnd, reuse: bool },
}

/// What reading an answer needs from the run: where a stream's live
/// facts go, whether its text is kept (`--turns delta`), and
/// `--max-event-bytes`.
#[derive(Clone, Copy)]
pub struct Reading<'a> {
    pub live: &'a Live,
    pub keep_text: bool,
    pub max_event_bytes: usize,
}

/// One request, from its first byte written to its end.
pub struct Exchange {
    request: Vec<u8>,
    written: usize,
    /// Some byte of the answer arrived (a resend is no longer safe).
    got_bytes: bool,
    /// Times the request was sent again from its first byte.
    resends: u8,
    /// When the last bytes arrived (the send before any): reads' times
    /// never go back.
    last_at: u64,
    /// The answer's bytes ended it, at this time (else it ends when it is
    /// concluded: an EOF, an error, a timeout).
    ended_at: Option<u64>,
    phase: Phase,
}

/// An exchange's state: small, so that a connection's fields a token read
/// touches share few cache lines (the outcome and the rarer sinks are
/// boxed; the event loop's prefetch fetches the whole connection).
enum Phase {
    /// Reading the response head; `out` is the outcome so far; `interim`:
    /// bytes of `1xx` heads already read (and dropped from `buf`), which
    /// count toward the head limit.
    Head {
        buf: Vec<u8>,
        out: Box<Outcome>,
        interim: usize,
    },
    Body {
        body: Body,
        keep_alive: bool,
        sink: Sink,
    },
}

/// Where a body's bytes go.
enum Sink {
    /// An SSE answer: judged by the one stream rule. Every sink is boxed,
    /// so that a connection stays three cache lines (see [`Phase`]).
    Stream(Box<StreamReader>),
    /// A whole JSON answer (a server that ignored `stream: true`).
    Whole(Box<WholeSink>),
    /// A non-2xx answer: its body is read for the message.
    Status(Box<StatusSink>),
}

struct WholeSink {
    bytes: Vec<u8>,
    out: Outcome,
}

struct StatusSink {
    status: u16,
    content_type: Option<String>,
    retry_after: Option<String>,
    bytes: Vec<u8>,
    out: Outcome,
}

impl Exchange {
    /// An exchange that will write `request`; `out` is the outcome so far
    /// (its send time is when the answer's reads start counting from).
    pub fn new(request: Vec<u8>, out: Outcome) -> Exchange {
        Exchange {
            request,
            written: 0,
            got_bytes: false,
            resends: 0,
            last_at: out.t_send_us,
            ended_at: None,
            phase: Phase::Head {
                buf: Vec::new(),
                out: Box::new(out),
                interim: 0,
            },
        }
    }

    /// The request's bytes not yet written (none once the answer began).
    pub fn unwritten(&self) -> &[u8] {
        self.request.get(self.written..).unwrap_or_default()
    }

    /// `n` more bytes of [`Self::unwritten`] were written.
    pub fn wrote(&mut self, n: usize) {
        self.written += n;
    }

    /// Bytes of the request written so far.
    pub fn written(&self) -> usize {
        self.written
    }

    /// Some byte of the answer arrived.
    pub fn got_bytes(&self) -> bool {
        self.got_bytes
    }

    /// Times the request was sent again.
    pub fn resends(&self) -> u8 {
        self.resends
    }

    /// When the last bytes arrived.
    pub fn last_at(&self) -> u64 {
        self.last_at
    }

    /// When the answer's own bytes ended it, if they did.
    pub fn ended_at(&self) -> Option<u64> {
        self.ended_at
    }

    /// The head was read: the body is coming.
    pub fn in_body(&self) -> bool {
        matches!(self.phase, Phase::Body { .. })
    }

    /// The stream being read, once an SSE answer began.
    pub fn stream(&self) -> Option<&StreamReader> {
        match &self.phase {
            Phase::Body {
                sink: Sink::Stream(r),
                ..
            } => Some(r),
            _ => None,
        }
    }

    /// The request goes out again from its first byte (on a new
    /// connection, after a reused one turned out closed before any byte
    /// of the answer).
    pub fn resend(&mut self) {
        self.resends = self.resends.saturating_add(1);
        self.written = 0;
        self.got_bytes = false;
        if let Phase::Head { buf, interim, .. } = &mut self.phase {
            buf.clear();
            *interim = 0;
        }
    }

    /// Bytes of the answer that arrived at `at` (plaintext, whichever way
    /// they came); `Some` when the exchange ended with them.
    pub fn receive(&mut self, bytes: &[u8], at: u64, how: &Reading<'_>) -> Option<End> {
        // Reads' times never go back.
        let at = at.max(self.last_at);
        self.last_at = at;
        self.got_bytes = true;
        let end = self.on_bytes(bytes, at, how)?;
        self.ended_at = Some(at);
        Some(end)
    }

    /// The server closed the connection: how the exchange ended, or
    /// `None` when nothing of the answer had arrived (whether that is a
    /// failure or a reason to resend is the connection's business).
    pub fn eof(&self) -> Option<End> {
        match &self.phase {
            Phase::Head { buf, interim, .. } if buf.is_empty() && *interim == 0 => None,
            Phase::Head { .. } => Some(End::Failed(Failure::new(
                ErrorKind::Incomplete,
                "the server closed the connection in the middle of the response head",
            ))),
            Phase::Body { body, .. } => Some(End::Body {
                end: match body.at_eof() {
                    Ok(()) => BodyEnd::Clean,
                    Err(e) => BodyEnd::Broken(e.to_string()),
                },
                reuse: false,
            }),
        }
    }

    fn on_bytes(&mut self, bytes: &[u8], now: u64, how: &Reading<'_>) -> Option<End> {
        let mut rest = bytes;
        let owned;
        if let Phase::Head { buf, out, interim } = &mut self.phase {
            buf.extend_from_slice(bytes);
            let (head, n) = loop {
                // Interim heads read are dropped, not parsed again on the
                // next read, and what they took is off the head limit: a
                // server sending `100 Continue` without end cost 5-6 s of
                // CPU re-parsing a growing buffer in a 10 s timeout.
                match wire::parse_one(buf, wire::MAX_HEAD_BYTES - *interim) {
                    Ok(Parsed::Partial) => return None,
                    Ok(Parsed::Interim(n)) => {
                        *interim += n;
                        buf.drain(..n);
                    }
                    Ok(Parsed::Final(h, n)) => break (h, n),
                    Err(e) => {
                        return Some(End::Failed(Failure::new(
                            ErrorKind::Transport,
                            e.to_string(),
                        )))
                    }
                }
            };
            let mut out = std::mem::take(&mut **out);
            out.http_status = Some(head.status);
            let sink = if !(200..300).contains(&head.status) {
                Sink::Status(Box::new(StatusSink {
                    status: head.status,
                    content_type: head.content_type.clone(),
                    retry_after: head.retry_after.clone(),
                    bytes: Vec::new(),
                    out,
                }))
            } else if head.is_sse() {
                Sink::Stream(Box::new(StreamReader::new(
                    out,
                    how.keep_text,
                    how.max_event_bytes,
                )))
            } else {
                Sink::Whole(Box::new(WholeSink {
                    bytes: Vec::new(),
                    out,
                }))
            };
            owned = std::mem::take(buf);
            rest = &owned[n..];
            // The answer began: the request will not be sent again.
            self.request = Vec::new();
            self.phase = Phase::Body {
                body: head.body,
                keep_alive: head.keep_alive,
                sink,
            };
        }
        let Phase::Body {
            body,
            keep_alive,
            sink,
        } = &mut self.phase
        else {
            return None;
        };
        // Why the sink wants no more bytes, if it does not.
        let mut refused: Option<String> = None;
        let fed = body.feed(rest, &mut |data| {
            if refused.is_some() {
                return;
            }
            match sink {
                Sink::Stream(r) => {
                    if !r.feed(data, now, how.live) {
                        refused = Some("the stream was refused".into());
                    }
                }
                Sink::Whole(w) => {
                    let bytes = &mut w.bytes;
                    if bytes.len() + data.len() > answer::WHOLE_BODY_LIMIT {
                        refused = Some(format!(
                            "the answer is over {} bytes",
                            answer::WHOLE_BODY_LIMIT
                        ));
                    } else {
                        bytes.extend_from_slice(data);
                    }
                }
                Sink::Status(st) => {
                    let bytes = &mut st.bytes;
                    let room = answer::ERROR_BODY_LIMIT.saturating_sub(bytes.len());
                    bytes.extend_from_slice(&data[..room.min(data.len())]);
                    if room < data.len() {
                        // Enough for the message; the rest is not read.
                        refused = Some(String::new());
                    }
                }
            }
        });
        match (fed, refused) {
            (Err(e), _) => Some(End::Body {
                end: BodyEnd::Broken(e.to_string()),
                reuse: false,
            }),
            (Ok(_), Some(msg)) => Some(End::Body {
                end: if matches!(sink, Sink::Status(_)) {
                    BodyEnd::Clean
                } else {
                    BodyEnd::Broken(msg)
                },
                reuse: false,
            }),
            // Bytes after the body's end were never asked for: the
            // connection is not trusted with another request.
            (Ok((used, true)), None) => Some(End::Body {
                end: BodyEnd::Clean,
                reuse: *keep_alive && used == rest.len(),
            }),
            (Ok((_, false)), None) if body.is_complete() => Some(End::Body {
                end: BodyEnd::Clean,
                reuse: *keep_alive,
            }),
            (Ok(_), None) => None,
        }
    }

    /// The request's outcome, from where it stopped and how, at `now`.
    pub fn conclude(self, end: End, now: u64, live: &Live) -> Outcome {
        let resends = u64::from(self.resends);
        let mut out = self.outcome(end, now, live);
        out.resends = resends;
        out
    }

    fn outcome(self, end: End, now: u64, live: &Live) -> Outcome {
        match (self.phase, end) {
            (Phase::Head { out, .. }, end) => {
                let mut out = *out;
                out.t_end_us = now;
                out.error = Some(match end {
                    End::Failed(f) => f,
                    // A body end before the head cannot happen; say what is known.
                    End::Body { .. } => Failure::new(ErrorKind::Transport, "no response head"),
                });
                out
            }
            (Phase::Body { sink, .. }, end) => {
                let body_end = match end {
                    End::Body { end, .. } => end,
                    End::Failed(f) if f.kind == ErrorKind::Timeout => BodyEnd::Timeout(f.message),
                    End::Failed(f) => BodyEnd::Broken(f.message),
                };
                match sink {
                    Sink::Stream(r) => r.finish(body_end, now),
                    Sink::Whole(w) => {
                        let WholeSink { bytes, mut out } = *w;
                        out.t_end_us = now;
                        match body_end {
                            BodyEnd::Clean => answer::whole_answer(&bytes, now, live, &mut out),
                            BodyEnd::Timeout(m) => {
                                out.error = Some(Failure::new(ErrorKind::Timeout, m))
                            }
                            BodyEnd::Broken(m) => {
                                out.error = Some(Failure::new(ErrorKind::Incomplete, m))
                            }
                        }
                        out
                    }
                    Sink::Status(st) => {
                        let StatusSink {
                            status,
                            content_type,
                            retry_after,
                            bytes,
                            mut out,
                        } = *st;
                        out.t_end_us = now;
                        out.error = Some(answer::status_failure(
                            status,
                            content_type.as_deref(),
                            retry_after.as_deref(),
                            &String::from_utf8_lossy(&bytes),
                        ));
                        out
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVENTS: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}]}\n\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" b\"}}]}\r\n\r\n\
        : keep-alive\n\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" c\"},\"finish_reason\":\"length\"}]}\n\n\
        data: [DONE]\n\n";

    /// `body` in chunks of `size` bytes, with an extension on the first.
    fn chunked(body: &str, size: usize) -> String {
        let mut out = String::new();
        for (i, c) in body.as_bytes().chunks(size).enumerate() {
            let ext = if i == 0 { ";x=1" } else { "" };
            out += &format!(
                "{:x}{ext}\r\n{}\r\n",
                c.len(),
                std::str::from_utf8(c).unwrap()
            );
        }
        out + "0\r\n\r\n"
    }

    fn sse_chunked() -> String {
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{}",
            chunked(EVENTS, 37)
        )
    }

    fn sse_length() -> String {
        format!(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\ncontent-length: {}\r\n\r\n{EVENTS}",
            EVENTS.len()
        )
    }

    fn sse_until_close() -> String {
        format!("HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\n{EVENTS}")
    }

    const WHOLE: &str =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 75\r\n\r\n\
        {\"choices\":[{\"index\":0,\"message\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}";

    const STATUS: &str = "HTTP/1.1 429 Too Many Requests\r\nretry-after: 2\r\ncontent-type: application/json\r\n\
        transfer-encoding: chunked\r\n\r\n5\r\n{\"err\r\n1d\r\nor\":{\"message\":\"slow down\"}}\r\n0\r\n\r\n";

    /// What reading `wire` in these pieces, each arriving at `at(i)`, led
    /// to: the outcome (as text, every field), and the end's `reuse`.
    fn read(pieces: &[&[u8]], at: impl Fn(usize) -> u64) -> (String, Option<bool>) {
        let live = Live::default();
        let how = Reading {
            live: &live,
            keep_text: true,
            max_event_bytes: 1 << 20,
        };
        let mut ex = Exchange::new(
            b"POST / HTTP/1.1\r\n\r\n".to_vec(),
            Outcome {
                t_send_us: 1,
                ..Outcome::default()
            },
        );
        let n = ex.unwritten().len();
        ex.wrote(n);
        let mut end = None;
        for (i, p) in pieces.iter().enumerate() {
            if let Some(e) = ex.receive(p, at(i), &how) {
                end = Some(e);
                break;
            }
        }
        let end = end.or_else(|| ex.eof()).expect("an end");
        let reuse = match &end {
            End::Body { reuse, .. } => Some(*reuse),
            End::Failed(_) => None,
        };
        let now = ex.ended_at().unwrap_or(1000);
        let out = ex.conclude(end, now, &live);
        (format!("{out:?}"), reuse)
    }

    /// Fed whole, one byte at a time, and cut in two at every point: the
    /// same outcome (every piece arrives at the same time, so the times
    /// cannot differ either).
    fn same_at_every_split(wire: &str) -> String {
        let wire = wire.as_bytes();
        let whole = read(&[wire], |_| 10);
        let bytes: Vec<&[u8]> = wire.chunks(1).collect();
        assert_eq!(read(&bytes, |_| 10), whole, "byte by byte");
        for cut in 1..wire.len() {
            let (a, b) = wire.split_at(cut);
            assert_eq!(read(&[a, b], |_| 10), whole, "cut at {cut}");
        }
        whole.0
    }

    #[test]
    fn a_chunked_stream_reads_the_same_in_any_pieces() {
        let out = same_at_every_split(&sse_chunked());
        assert!(
            out.contains("chunks: 3") && out.contains("error: None"),
            "{out}"
        );
        assert!(out.contains("text: \" a b c\""), "{out}");
        assert_eq!(read(&[sse_chunked().as_bytes()], |_| 10).1, Some(true));
    }

    #[test]
    fn a_content_length_stream_after_an_interim_head_reads_the_same_in_any_pieces() {
        let out = same_at_every_split(&sse_length());
        assert!(
            out.contains("chunks: 3") && out.contains("error: None"),
            "{out}"
        );
        assert_eq!(read(&[sse_length().as_bytes()], |_| 10).1, Some(true));
    }

    #[test]
    fn a_close_delimited_stream_reads_the_same_in_any_pieces() {
        let out = same_at_every_split(&sse_until_close());
        assert!(
            out.contains("chunks: 3") && out.contains("error: None"),
            "{out}"
        );
        assert_eq!(read(&[sse_until_close().as_bytes()], |_| 10).1, Some(false));
    }

    #[test]
    fn whole_and_status_answers_read_the_same_in_any_pieces() {
        let out = same_at_every_split(WHOLE);
        assert!(
            out.contains("chunks: 1") && out.contains("text: \"hi\""),
            "{out}"
        );
        let out = same_at_every_split(STATUS);
        assert!(
            out.contains("RateLimited") && out.contains("slow down"),
            "{out}"
        );
        assert!(out.contains("retry_after_s: Some(2.0)"), "{out}");
    }

    #[test]
    fn each_token_keeps_the_time_its_last_byte_arrived() {
        // One event a read, the n-th read at 100 n µs: the gaps are the reads'.
        let wire = sse_until_close();
        let head_end = wire.find("\r\n\r\n").unwrap() + 4;
        let mut pieces = vec![&wire.as_bytes()[..head_end]];
        let mut rest = &wire.as_bytes()[head_end..];
        while let Some(i) = rest.windows(2).position(|w| w == b"\n\n") {
            pieces.push(&rest[..i + 2]);
            rest = &rest[i + 2..];
        }
        let (out, _) = read(&pieces, |i| 100 * i as u64);
        // Reads 2, 3 and 4 carried the tokens (the role chunk is read 1;
        // the comment came with the third token, which ends in CR LF CR LF).
        assert!(out.contains("t_first_us: Some(200)"), "{out}");
        assert!(out.contains("t_last_us: Some(400)"), "{out}");
        assert!(out.contains("itl_us: [100, 100]"), "{out}");
    }

    #[test]
    fn a_cut_answer_is_incomplete_at_every_cut() {
        for wire in [sse_chunked(), sse_length()] {
            for cut in 1..wire.len() - 1 {
                let (out, _) = read(&[&wire.as_bytes()[..cut]], |_| 10);
                assert!(
                    out.contains("Incomplete") || out.contains("kind: Transport"),
                    "cut at {cut}: {out}"
                );
            }
        }
    }

    #[test]
    fn interim_heads_count_toward_the_head_limit_and_are_not_kept() {
        let live = Live::default();
        let how = Reading {
            live: &live,
            keep_text: false,
            max_event_bytes: 1 << 20,
        };
        let mut ex = Exchange::new(Vec::new(), Outcome::default());
        let interim = b"HTTP/1.1 100 Continue\r\n\r\n";
        let mut end = None;
        let mut sent = 0;
        while sent <= wire::MAX_HEAD_BYTES {
            end = ex.receive(interim, 5, &how);
            sent += interim.len();
            if end.is_some() {
                break;
            }
            // What was read is dropped: nothing is parsed twice.
            let Phase::Head { buf, .. } = &ex.phase else {
                panic!("a head was taken for the answer")
            };
            assert!(buf.is_empty());
        }
        let Some(End::Failed(f)) = end else {
            panic!("endless interim heads were accepted")
        };
        assert_eq!(f.kind, ErrorKind::Transport);
        assert!(f.message.contains("over"), "{}", f.message);
        assert!(sent > wire::MAX_HEAD_BYTES - interim.len());
    }

    #[test]
    fn a_resend_starts_from_the_first_byte_and_is_counted() {
        let mut ex = Exchange::new(b"abcdef".to_vec(), Outcome::default());
        ex.wrote(4);
        assert_eq!(ex.unwritten(), b"ef");
        ex.resend();
        assert_eq!((ex.unwritten(), ex.resends()), (&b"abcdef"[..], 1));
        assert!(!ex.got_bytes() && ex.eof().is_none());
    }
}
