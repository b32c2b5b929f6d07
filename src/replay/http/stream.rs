//! Reading one streamed answer, whatever carries its bytes: [`StreamReader`]
//! takes the body as it arrives (each piece stamped with the µs it was read
//! at) and, told how the body ended, gives the request's [`Outcome`].
//!
//! The accounting rule lives here, once, for every client: a stream is
//! complete only when the body ended cleanly *and* `[DONE]` arrived *and* a
//! choice carried a `finish_reason` before it. Everything else is an error,
//! `incomplete` unless a timeout or a protocol problem came first, and the
//! outcome keeps the tokens and timings received up to the cut.

use std::borrow::Cow;
use std::sync::atomic::Ordering;

use super::inflight::Live;
use super::sse::{self, Event, EventSplitter, Memo};
use crate::replay::outcome::{ErrorKind, Failure, Outcome, StreamUsage};
use crate::results::line::CUT_AT_DONE;

/// How the body's bytes stopped coming.
#[derive(Debug, Clone, PartialEq)]
pub enum BodyEnd {
    /// The transport delivered the whole body (a chunked body's last
    /// chunk, all of a Content-Length, or EOF of a close-delimited body).
    Clean,
    /// `--timeout` passed first.
    Timeout(String),
    /// The connection broke or the framing was bad (a chunked body without
    /// its terminator, a reset, a body shorter than its Content-Length).
    Broken(String),
}

/// One SSE answer being read.
///
/// In C order, cache-line aligned: what a token read touches comes first
/// and ends with the outcome's own token fields, so [`Self::prefetch`]
/// hints four lines, not the reader's eight.
#[repr(C, align(64))]
pub struct StreamReader {
    splitter: EventSplitter,
    /// What this stream's chunks have in common (read once).
    memo: Memo,
    done: bool,
    /// A `finish_reason` arrived before `[DONE]`.
    finished: bool,
    keep_text: bool,
    out: Outcome,
    usage: Option<StreamUsage>,
    first_problem: Option<Failure>,
}

/// The bytes at the start of a [`StreamReader`] that a token read touches.
const TOKEN_BYTES: usize = std::mem::offset_of!(StreamReader, out) + Outcome::TOKEN_BYTES;

impl StreamReader {
    /// A reader for a request sent at `t_send_us` whose 2xx answer has
    /// begun; `keep_text` keeps the content (`--turns delta`); an event
    /// over `max_event_bytes` fails the request (`bad_sse`).
    pub fn new(out: Outcome, keep_text: bool, max_event_bytes: usize) -> StreamReader {
        StreamReader {
            splitter: EventSplitter::with_limit(max_event_bytes),
            usage: None,
            done: false,
            finished: false,
            first_problem: None,
            keep_text,
            memo: Memo::default(),
            out,
        }
    }

    /// True once `[DONE]` arrived.
    pub fn done(&self) -> bool {
        self.done
    }

    /// Takes bytes read at `now_us`; every event they complete is timed at
    /// `now_us` (the moment its last byte was read). False once the stream
    /// is refused (an event over the size limit): the caller stops reading
    /// and finishes, and the outcome is `bad_sse`.
    #[must_use]
    pub fn feed(&mut self, bytes: &[u8], now_us: u64, live: &Live) -> bool {
        let StreamReader {
            splitter,
            usage,
            done,
            finished,
            first_problem,
            keep_text,
            memo,
            out,
        } = self;
        let fed = splitter.feed(bytes, &mut |data| {
            on_event(
                data,
                now_us,
                live,
                *keep_text,
                memo,
                usage,
                done,
                finished,
                first_problem,
                out,
            )
        });
        match fed {
            Ok(()) => true,
            Err(over) => {
                first_problem.get_or_insert(Failure::new(ErrorKind::BadSse, over.to_string()));
                false
            }
        }
    }

    /// Hints the cache lines of this reader that a token read touches (see
    /// [`crate::prefetch`]).
    pub fn prefetch(&self) {
        crate::prefetch::span((self as *const StreamReader).cast(), TOKEN_BYTES);
    }

    /// Hints the cache lines a token read touches outside this reader: the
    /// memo's template and the end of the gaps (see [`crate::prefetch`]).
    pub fn prefetch_heap(&self) {
        self.memo.prefetch();
        let gaps = &self.out.itl_us;
        crate::prefetch::one(gaps.as_ptr().wrapping_add(gaps.len()).cast());
    }

    /// The outcome, given how the body ended at `now_us`.
    pub fn finish(mut self, end: BodyEnd, now_us: u64) -> Outcome {
        let mut done = self.done;
        self.splitter.finish(&mut |data| {
            if data == b"[DONE]" {
                done = true;
            }
        });
        self.done = done;
        let mut out = self.out;
        out.t_end_us = now_us;
        out.usage = self.usage;
        out.error = self
            .first_problem
            .or_else(|| end_failure(self.done, self.finished, out.chunks, &end));
        out
    }
}

#[allow(clippy::too_many_arguments)]
fn on_event(
    data: &[u8],
    now: u64,
    live: &Live,
    keep_text: bool,
    memo: &mut Memo,
    usage: &mut Option<StreamUsage>,
    done: &mut bool,
    finished: &mut bool,
    first_problem: &mut Option<Failure>,
    out: &mut Outcome,
) {
    match sse::classify_with(data, usage, memo) {
        Event::Done => *done = true,
        // After `[DONE]` the stream is over: what a server sends then is
        // not part of the answer, and is not counted.
        Event::Token { .. } if *done => {}
        Event::Token {
            text,
            finish_reason,
        } => {
            match out.t_last_us {
                None => {
                    out.t_first_us = Some(now);
                    live.first_us_plus1.store(now + 1, Ordering::Relaxed);
                }
                Some(prev) => out.itl_us.push(now.saturating_sub(prev)),
            }
            out.t_last_us = Some(now);
            out.chunks += 1;
            live.chunks.store(out.chunks, Ordering::Relaxed);
            if keep_text {
                out.text.push_str(&text);
            }
            if finish_reason.is_some() && !*done {
                *finished = true;
                out.finish_reason = finish_reason.map(Cow::into_owned);
            }
        }
        Event::Empty { finish_reason } => {
            if finish_reason.is_some() && !*done {
                *finished = true;
                out.finish_reason = finish_reason.map(Cow::into_owned);
            }
        }
        Event::StreamUsage(_) => {}
        Event::Error(msg) => {
            first_problem.get_or_insert(Failure::new(ErrorKind::StreamError, msg));
        }
        Event::Malformed(msg) => {
            first_problem.get_or_insert(Failure::new(
                ErrorKind::BadSse,
                format!("malformed event: {msg}"),
            ));
        }
    }
}

/// The rule: what is wrong with a stream that had no protocol problem.
pub fn end_failure(done: bool, finished: bool, chunks: u64, end: &BodyEnd) -> Option<Failure> {
    match end {
        BodyEnd::Timeout(msg) if !done => Some(Failure::new(ErrorKind::Timeout, msg.clone())),
        // `[DONE]` with no finish reason, then a cut body: what
        // llama-cpp-python sends when it interrupts a stream. The cut at
        // `[DONE]` is the news; the body's end is the detail.
        BodyEnd::Timeout(msg) | BodyEnd::Broken(msg) if done && !finished => Some(Failure::new(
            ErrorKind::Incomplete,
            format!("{CUT_AT_DONE} ({chunks} output events); then the body was cut: {msg}"),
        )),
        BodyEnd::Timeout(msg) | BodyEnd::Broken(msg) if done => Some(Failure::new(
            ErrorKind::Incomplete,
            format!(
                "the stream reached [DONE] but its body was cut ({chunks} output events): {msg}"
            ),
        )),
        BodyEnd::Timeout(_) | BodyEnd::Broken(_) => {
            let msg = match end {
                BodyEnd::Broken(m) | BodyEnd::Timeout(m) => m.as_str(),
                BodyEnd::Clean => "",
            };
            Some(Failure::new(
                ErrorKind::Incomplete,
                format!("stream broke after {chunks} output events: {msg}"),
            ))
        }
        BodyEnd::Clean if !done => Some(Failure::new(
            ErrorKind::Incomplete,
            format!("stream ended without [DONE] after {chunks} output events"),
        )),
        BodyEnd::Clean if !finished => Some(Failure::new(
            ErrorKind::Incomplete,
            format!("{CUT_AT_DONE} ({chunks} output events)"),
        )),
        BodyEnd::Clean => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pieces: &[&str], end: BodyEnd) -> Outcome {
        let live = Live::default();
        let mut r = StreamReader::new(Outcome::default(), false, 1 << 20);
        for (i, p) in pieces.iter().enumerate() {
            assert!(r.feed(p.as_bytes(), 10 * (i as u64 + 1), &live));
        }
        r.finish(end, 1000)
    }

    /// The event loop hints this many bytes ahead of each token: the
    /// splitter, the memo, the flags and the outcome's token fields, in
    /// four cache lines (the reader whole is eight).
    #[test]
    fn what_a_token_touches_is_four_cache_lines_at_the_start() {
        use std::mem::{offset_of, size_of};
        // Every field a token read touches ends within the hinted bytes.
        let ends = [
            offset_of!(StreamReader, splitter) + size_of::<EventSplitter>(),
            offset_of!(StreamReader, memo) + size_of::<Memo>(),
            offset_of!(StreamReader, done) + 1,
            offset_of!(StreamReader, finished) + 1,
            offset_of!(StreamReader, keep_text) + 1,
            offset_of!(StreamReader, out) + offset_of!(Outcome, t_first_us) + 16,
            offset_of!(StreamReader, out) + offset_of!(Outcome, t_last_us) + 16,
            offset_of!(StreamReader, out) + offset_of!(Outcome, chunks) + 8,
            offset_of!(StreamReader, out) + offset_of!(Outcome, itl_us) + 24,
        ];
        assert!(
            ends.iter().all(|&e| e <= TOKEN_BYTES),
            "{ends:?} {TOKEN_BYTES}"
        );
        assert_eq!(Outcome::TOKEN_BYTES, 64);
        assert_eq!(std::mem::align_of::<StreamReader>(), 64);
        const { assert!(TOKEN_BYTES <= 256) };
        const { assert!(size_of::<StreamReader>() > 256) };
    }

    const ROLE: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
    const TOKEN: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}]}\n\n";
    const LAST: &str =
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" b\"},\"finish_reason\":\"length\"}]}\n\n";
    const DONE: &str = "data: [DONE]\n\n";

    fn kind(o: &Outcome) -> Option<ErrorKind> {
        o.error.as_ref().map(|e| e.kind)
    }

    #[test]
    fn a_whole_stream_is_ok() {
        let o = read(&[ROLE, TOKEN, LAST, DONE], BodyEnd::Clean);
        assert_eq!(kind(&o), None);
        assert_eq!(o.chunks, 2);
        assert_eq!(o.finish_reason.as_deref(), Some("length"));
    }

    #[test]
    fn done_without_a_finish_reason_is_a_cut_stream() {
        // llama-cpp-python's interrupted stream: the role chunk, then [DONE].
        let o = read(&[ROLE, DONE], BodyEnd::Clean);
        assert_eq!(kind(&o), Some(ErrorKind::Incomplete));
        assert!(o.error.unwrap().message.starts_with(CUT_AT_DONE));
        let o = read(&[ROLE, TOKEN, DONE], BodyEnd::Clean);
        assert_eq!(kind(&o), Some(ErrorKind::Incomplete));
        assert_eq!(o.chunks, 1, "the tokens up to the cut are kept");
    }

    #[test]
    fn a_cut_at_done_then_a_cut_body_is_counted_as_a_cut_stream() {
        // llama-cpp-python: the role chunk, [DONE], then a close without
        // the chunked body's last chunk.
        let o = read(&[ROLE, DONE], BodyEnd::Broken("Peer disconnected".into()));
        assert_eq!(kind(&o), Some(ErrorKind::Incomplete));
        let msg = o.error.unwrap().message;
        assert!(
            msg.starts_with(CUT_AT_DONE) && msg.ends_with("Peer disconnected"),
            "{msg}"
        );
    }

    #[test]
    fn a_body_cut_after_done_is_incomplete() {
        let o = read(
            &[ROLE, TOKEN, LAST, DONE],
            BodyEnd::Broken("chunked body without its last chunk".into()),
        );
        assert_eq!(kind(&o), Some(ErrorKind::Incomplete));
        assert_eq!(o.chunks, 2);
    }

    #[test]
    fn a_body_cut_before_done_is_incomplete_and_keeps_its_timings() {
        let o = read(&[ROLE, TOKEN], BodyEnd::Broken("reset".into()));
        assert_eq!(kind(&o), Some(ErrorKind::Incomplete));
        assert_eq!(o.t_first_us, Some(20));
        let o = read(&[ROLE, TOKEN], BodyEnd::Clean);
        assert_eq!(kind(&o), Some(ErrorKind::Incomplete));
    }

    #[test]
    fn a_timeout_before_done_is_a_timeout() {
        let o = read(&[ROLE, TOKEN], BodyEnd::Timeout("timed out".into()));
        assert_eq!(kind(&o), Some(ErrorKind::Timeout));
    }

    #[test]
    fn an_event_over_the_limit_fails_the_stream() {
        let live = Live::default();
        let mut r = StreamReader::new(Outcome::default(), false, 128);
        assert!(r.feed(ROLE.as_bytes(), 10, &live));
        assert!(r.feed(TOKEN.as_bytes(), 20, &live));
        assert!(!r.feed(&[b'a'; 200], 30, &live));
        let o = r.finish(BodyEnd::Broken("refused".into()), 40);
        assert_eq!(kind(&o), Some(ErrorKind::BadSse));
        assert!(o.error.unwrap().message.contains("--max-event-bytes"));
        assert_eq!(o.chunks, 1, "the tokens before it are kept");
    }

    #[test]
    fn tokens_after_done_are_not_counted() {
        let o = read(&[ROLE, TOKEN, LAST, DONE, TOKEN, TOKEN], BodyEnd::Clean);
        assert_eq!(kind(&o), None);
        assert_eq!((o.chunks, o.itl_us.len()), (2, 1));
        assert_eq!(o.t_last_us, Some(30));
    }

    #[test]
    fn a_stream_error_wins() {
        let err = "data: {\"error\":{\"message\":\"boom\"}}\n\n";
        let o = read(&[ROLE, err, DONE], BodyEnd::Clean);
        assert_eq!(kind(&o), Some(ErrorKind::StreamError));
    }
}
