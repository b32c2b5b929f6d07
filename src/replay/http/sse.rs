//! Server-sent events as OpenAI-compatible servers stream them: `data:`
//! lines, events ended by a blank line, `:` comment keep-alives, `\r\n` or
//! `\n` line ends, events split across reads and several events in one read.

use std::borrow::Cow;

pub use super::chunk::{Choice, Memo};

/// `--max-event-bytes`' default: far above any completion chunk, far
/// below what would hurt a client streaming thousands of answers.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 << 20;

/// Splits a byte stream into the `data` payloads of complete events.
#[derive(Debug)]
pub struct EventSplitter {
    /// Bytes of a line not yet ended.
    partial: Vec<u8>,
    /// The `data` lines of the event being read, joined with `\n`.
    data: Vec<u8>,
    has_data: bool,
    /// The most bytes one event (or one line) may hold: a server that
    /// never ends its event must not make the client buffer without bound.
    max_event_bytes: usize,
    /// An event went over the limit; nothing more is read.
    oversize: bool,
}

impl Default for EventSplitter {
    fn default() -> Self {
        EventSplitter::with_limit(DEFAULT_MAX_EVENT_BYTES)
    }
}

/// An event longer than the splitter's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Oversize {
    pub limit: usize,
}

impl std::fmt::Display for Oversize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "an event grew past --max-event-bytes ({} bytes) without ending",
            self.limit
        )
    }
}

impl EventSplitter {
    /// A splitter that refuses events longer than `max_event_bytes`.
    pub fn with_limit(max_event_bytes: usize) -> EventSplitter {
        EventSplitter {
            partial: Vec::new(),
            data: Vec::new(),
            has_data: false,
            max_event_bytes,
            oversize: false,
        }
    }

    /// Feeds bytes as they arrived; calls `on_event` with each complete
    /// event's data, in order. Once an event (or a line) outgrows the
    /// limit, the stream is refused: this and every later call fail.
    pub fn feed(
        &mut self,
        mut bytes: &[u8],
        on_event: &mut dyn FnMut(&[u8]),
    ) -> Result<(), Oversize> {
        let over = Oversize {
            limit: self.max_event_bytes,
        };
        if self.oversize {
            return Err(over);
        }
        while let Some(nl) = memchr::memchr(b'\n', bytes) {
            let piece = &bytes[..nl];
            bytes = &bytes[nl + 1..];
            if self.partial.is_empty() {
                // The usual token: a one-line event and its blank line,
                // whole in these bytes. It is handed over from them, not
                // copied into this stream's buffer first (a buffer per
                // stream, cold in the cache after a thousand others).
                if let (false, Some(value), Some(rest)) =
                    (self.has_data, data_value(piece), blank_line(bytes))
                {
                    if value.len() > self.max_event_bytes {
                        self.oversize = true;
                        return Err(over);
                    }
                    on_event(value);
                    bytes = rest;
                    continue;
                }
                self.line(piece, on_event);
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(piece);
                self.line(&line, on_event);
                line.clear();
                self.partial = line;
            }
            if self.data.len() > self.max_event_bytes {
                self.oversize = true;
                return Err(over);
            }
        }
        if self.partial.len() + bytes.len() + self.data.len() > self.max_event_bytes {
            self.oversize = true;
            return Err(over);
        }
        self.partial.extend_from_slice(bytes);
        Ok(())
    }

    /// At the end of the stream: an event the server did not end with a
    /// blank line still counts.
    pub fn finish(&mut self, on_event: &mut dyn FnMut(&[u8])) {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line(&line, on_event);
        }
        self.dispatch(on_event);
    }

    fn line(&mut self, line: &[u8], on_event: &mut dyn FnMut(&[u8])) {
        if line.strip_suffix(b"\r").unwrap_or(line).is_empty() {
            self.dispatch(on_event);
        } else if let Some(value) = data_value(line) {
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
        // `:` comments and other fields (`event:`, `id:`, `retry:`) carry
        // nothing a completion stream needs.
    }

    fn dispatch(&mut self, on_event: &mut dyn FnMut(&[u8])) {
        if self.has_data {
            on_event(&self.data);
            self.data.clear();
            self.has_data = false;
        }
    }
}

/// A `data` line's value (`line` without its `\n`): after `data:` and
/// one optional space, without a final `\r`.
fn data_value(line: &[u8]) -> Option<&[u8]> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let value = line.strip_prefix(b"data:")?;
    Some(value.strip_prefix(b" ").unwrap_or(value))
}

/// What follows a blank line at the start of `bytes`, if one is there.
fn blank_line(bytes: &[u8]) -> Option<&[u8]> {
    bytes
        .strip_prefix(b"\n")
        .or_else(|| bytes.strip_prefix(b"\r\n"))
}

/// What one event of a completion stream says; its strings are borrowed
/// from the event's bytes where they can be (no allocation per token).
#[derive(Debug, Clone, PartialEq)]
pub enum Event<'a> {
    /// `[DONE]`: the stream is complete.
    Done,
    /// An event carrying generated output (content, reasoning or tool-call
    /// delta, or completion text); `text` is the content, if any.
    Token {
        text: Cow<'a, str>,
        finish_reason: Option<Cow<'a, str>>,
    },
    /// An event with usage numbers (usually the last, with `choices: []`).
    StreamUsage(StreamUsage),
    /// An event with nothing generated: the role-only first chunk, an empty
    /// delta, a bare finish reason.
    Empty { finish_reason: Option<Cow<'a, str>> },
    /// `{"error": ...}` sent after the headers.
    Error(String),
    /// Not JSON, or not an object.
    Malformed(String),
}

impl Event<'_> {
    /// The event with its strings owned (for one read from a parse tree
    /// that is about to go).
    pub fn into_owned(self) -> Event<'static> {
        let own = |s: Option<Cow<'_, str>>| s.map(|s| Cow::Owned(s.into_owned()));
        match self {
            Event::Token {
                text,
                finish_reason,
            } => Event::Token {
                text: Cow::Owned(text.into_owned()),
                finish_reason: own(finish_reason),
            },
            Event::Empty { finish_reason } => Event::Empty {
                finish_reason: own(finish_reason),
            },
            Event::Done => Event::Done,
            Event::StreamUsage(u) => Event::StreamUsage(u),
            Event::Error(e) => Event::Error(e),
            Event::Malformed(m) => Event::Malformed(m),
        }
    }
}

pub use crate::replay::outcome::StreamUsage;

/// Reads one event's data. A chunk can carry both a token and usage (some
/// servers put usage on every chunk): then it is a token and `usage` is set.
///
/// A token chunk is read by [`super::chunk::read`] without building a
/// JSON tree (the per-token cost of a client holding thousands of streams);
/// anything that reader leaves (errors, usage, chunks that are not JSON)
/// gets [`classify_full`]. Both give the same event for every input.
pub fn classify<'a>(data: &'a [u8], usage: &mut Option<StreamUsage>) -> Event<'a> {
    classify_with(data, usage, &mut Memo::default())
}

/// [`classify`] for the next event of a stream (`memo`: what its chunks
/// have in common, [`Memo`]).
pub fn classify_with<'a>(
    data: &'a [u8],
    usage: &mut Option<StreamUsage>,
    memo: &mut Memo,
) -> Event<'a> {
    if data == b"[DONE]" {
        return Event::Done;
    }
    match super::chunk::read_with(data, memo) {
        Some(Some(choice)) => choice.event(),
        Some(None) => Event::Empty {
            finish_reason: None,
        },
        None => classify_full(data, usage),
    }
}

/// [`classify`] through a whole `serde_json::Value`: the reference.
pub fn classify_full(data: &[u8], usage: &mut Option<StreamUsage>) -> Event<'static> {
    if data == b"[DONE]" {
        return Event::Done;
    }
    let value: serde_json::Value = match serde_json::from_slice(data) {
        Ok(v) => v,
        Err(e) => return Event::Malformed(format!("{e} in {}", shorten(data))),
    };
    let Some(obj) = value.as_object() else {
        return Event::Malformed(format!("not a JSON object: {}", shorten(data)));
    };
    if let Some(err) = obj.get("error") {
        return Event::Error(error_message(err));
    }
    if let Some(u) = obj.get("usage").filter(|u| u.is_object()) {
        *usage = Some(read_usage(u));
    }
    let choice = obj
        .get("choices")
        .and_then(|c| c.as_array())
        .and_then(|c| c.first());
    let Some(choice) = choice else {
        return match usage {
            Some(u) if obj.contains_key("usage") => Event::StreamUsage(*u),
            _ => Event::Empty {
                finish_reason: None,
            },
        };
    };
    fn str_of(v: Option<&serde_json::Value>) -> Option<Cow<'_, str>> {
        v.and_then(|v| v.as_str()).map(Cow::Borrowed)
    }
    // Chat deltas, or a whole message when a server answers one chunk.
    let delta = choice.get("delta").or_else(|| choice.get("message"));
    let field = |key: &str| str_of(delta.and_then(|d| d.get(key)));
    Choice {
        finish_reason: str_of(choice.get("finish_reason")),
        content: field("content"),
        reasoning_content: field("reasoning_content"),
        reasoning: field("reasoning"),
        tool_calls: delta
            .and_then(|d| d.get("tool_calls"))
            .and_then(|t| t.as_array())
            .is_some_and(|t| !t.is_empty()),
        text: str_of(choice.get("text")),
    }
    .event()
    .into_owned()
}

impl<'a> Choice<'a> {
    /// The rule: a choice carries a token when any of its content,
    /// reasoning, tool calls or text is non-empty.
    pub fn event(self) -> Event<'a> {
        let non_empty = |s: &Option<Cow<'_, str>>| s.as_deref().is_some_and(|s| !s.is_empty());
        let generated = non_empty(&self.content)
            || non_empty(&self.reasoning_content)
            || non_empty(&self.reasoning)
            || self.tool_calls
            || non_empty(&self.text);
        let finish_reason = self.finish_reason;
        if !generated {
            return Event::Empty { finish_reason };
        }
        // The content, or the completion's text, or both in that order.
        let text = match (self.content, self.text) {
            (Some(c), None) => c,
            (None, Some(t)) => t,
            (None, None) => Cow::Borrowed(""),
            (Some(c), Some(t)) => Cow::Owned(c.into_owned() + &t),
        };
        Event::Token {
            text,
            finish_reason,
        }
    }
}

/// `usage` as OpenAI and vLLM write it.
pub fn read_usage(u: &serde_json::Value) -> StreamUsage {
    StreamUsage {
        prompt_tokens: u.get("prompt_tokens").and_then(|v| v.as_u64()),
        completion_tokens: u.get("completion_tokens").and_then(|v| v.as_u64()),
        cached_tokens: u
            .get("prompt_tokens_details")
            .and_then(|d| d.get("cached_tokens"))
            .and_then(|v| v.as_u64()),
    }
}

/// The message of an OpenAI error object (`{"message": ...}`), or the
/// value itself when it is a string or has another shape.
pub fn error_message(err: &serde_json::Value) -> String {
    match err {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(o) => match o.get("message").and_then(|m| m.as_str()) {
            Some(m) => m.to_string(),
            None => err.to_string(),
        },
        other => other.to_string(),
    }
}

/// The first 200 bytes of a payload, for an error message.
pub fn shorten(data: &[u8]) -> String {
    let s = String::from_utf8_lossy(data);
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<String> {
        let mut out = Vec::new();
        let mut s = EventSplitter::default();
        for c in chunks {
            s.feed(c, &mut |d| {
                out.push(String::from_utf8_lossy(d).into_owned())
            })
            .unwrap();
        }
        s.finish(&mut |d| out.push(String::from_utf8_lossy(d).into_owned()));
        out
    }

    #[test]
    fn splits_events_across_reads_and_line_endings() {
        let got = events(&[
            b": keep-alive\r\n\r\ndata: {\"a\"",
            b":1}\r\n\r\ndata:{\"b\":2}\n\ndata: x\ndata: y\n\ndata: [DONE]",
        ]);
        assert_eq!(got, ["{\"a\":1}", "{\"b\":2}", "x\ny", "[DONE]"]);
    }

    #[test]
    fn several_events_in_one_read() {
        let got = events(&[b"data: 1\n\ndata: 2\n\ndata: 3\n\n"]);
        assert_eq!(got, ["1", "2", "3"]);
    }

    #[test]
    fn one_byte_at_a_time() {
        let stream = b"data: {\"x\": 1}\r\n\r\n: c\n\ndata: [DONE]\n\n";
        let chunks: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(events(&chunks), ["{\"x\": 1}", "[DONE]"]);
    }

    #[test]
    fn an_event_over_the_limit_is_refused() {
        let mut s = EventSplitter::with_limit(16);
        let mut n = 0;
        // Events up to the limit pass, in any pieces.
        assert!(s
            .feed(b"data: 0123456789\n\ndata: 01", &mut |_| n += 1)
            .is_ok());
        assert!(s.feed(b"23456789\n\n", &mut |_| n += 1).is_ok());
        assert_eq!(n, 2);
        // A line that never ends, or many data lines without a blank one.
        assert!(s.feed(&[b'x'; 17], &mut |_| {}).is_err());
        assert!(s.feed(b"\n\n", &mut |_| {}).is_err(), "refused for good");
        let mut s = EventSplitter::with_limit(16);
        let lines = b"data: 0123\ndata: 0123\ndata: 0123\ndata: 0123\n";
        assert!(s.feed(lines, &mut |_| {}).is_err());
        // The limit is the event's, whole in one read or not.
        for pieces in [
            &[&b"data: 0123456789abcdef\n\n"[..]][..],
            &[b"data: 0123456789abcdef\n", b"\n"],
        ] {
            let mut s = EventSplitter::with_limit(16);
            let mut got = 0;
            for p in pieces {
                assert!(s.feed(p, &mut |_| got += 1).is_ok());
            }
            assert_eq!(got, 1);
        }
        for pieces in [
            &[&b"data: 0123456789abcdefg\n\n"[..]][..],
            &[b"data: 0123456789abcdefg\n", b"\n"],
        ] {
            let mut s = EventSplitter::with_limit(16);
            let refused = pieces
                .iter()
                .any(|p| s.feed(p, &mut |_| panic!("sent")).is_err());
            assert!(refused);
        }
    }

    /// An event whole in one read is handed over from the read's bytes,
    /// one cut anywhere goes through the buffer: the same events either
    /// way (one byte at a time never takes the first).
    #[test]
    fn whole_events_and_cut_ones_are_the_same_events() {
        use proptest::prelude::*;
        let line = prop_oneof![
            "[a-z{}\":]{0,12}".prop_map(|v| format!("data: {v}\n")),
            "[a-z]{0,5}".prop_map(|v| format!("data:{v}\r\n")),
            Just("\n".to_string()),
            Just("\r\n".to_string()),
            Just(": ping\n".to_string()),
            Just("event: x\n".to_string()),
        ];
        let case = (
            prop::collection::vec(line, 0..12),
            prop::collection::vec(any::<prop::sample::Index>(), 0..4),
        );
        proptest!(ProptestConfig::with_cases(2000), |((lines, cuts) in case)| {
            let stream = lines.concat().into_bytes();
            let mut at: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
            at.sort_unstable();
            let mut pieces: Vec<&[u8]> = Vec::new();
            let mut from = 0;
            for a in at {
                pieces.push(&stream[from..a]);
                from = a;
            }
            pieces.push(&stream[from..]);
            let bytes: Vec<&[u8]> = stream.chunks(1).collect();
            prop_assert_eq!(events(&pieces), events(&bytes));
            prop_assert_eq!(events(&[&stream]), events(&bytes));
        });
    }

    #[test]
    fn role_chunk_is_not_a_token() {
        let mut u = None;
        let role = br#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
        assert_eq!(
            classify(role, &mut u),
            Event::Empty {
                finish_reason: None
            }
        );
        let tok =
            br#"{"choices":[{"index":0,"delta":{"content":" hi"},"finish_reason":"length"}]}"#;
        assert_eq!(
            classify(tok, &mut u),
            Event::Token {
                text: " hi".into(),
                finish_reason: Some("length".into())
            }
        );
    }

    #[test]
    fn reasoning_tool_calls_and_completion_text_are_tokens() {
        let mut u = None;
        for data in [
            &br#"{"choices":[{"delta":{"reasoning_content":"think"}}]}"#[..],
            br#"{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}"#,
            br#"{"object":"text_completion","choices":[{"text":" a"}]}"#,
        ] {
            assert!(matches!(classify(data, &mut u), Event::Token { .. }));
        }
    }

    #[test]
    fn usage_error_and_malformed() {
        let mut u = None;
        let usage = br#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":4}}}"#;
        let want = StreamUsage {
            prompt_tokens: Some(7),
            completion_tokens: Some(3),
            cached_tokens: Some(4),
        };
        assert_eq!(classify(usage, &mut u), Event::StreamUsage(want));
        assert_eq!(u, Some(want));
        let err = br#"{"error":{"message":"boom","type":"x","code":500}}"#;
        assert_eq!(classify(err, &mut u), Event::Error("boom".into()));
        assert!(matches!(
            classify(b"{not json", &mut u),
            Event::Malformed(_)
        ));
        assert!(matches!(classify(b"[1]", &mut u), Event::Malformed(_)));
    }
}

#[cfg(test)]
mod fast_read {
    use super::super::chunk;
    use super::{classify, classify_full, Event};
    use proptest::prelude::*;

    fn both(data: &[u8]) -> (Event<'_>, Event<'_>) {
        let (mut u1, mut u2) = (None, None);
        let fast = classify(data, &mut u1);
        let full = classify_full(data, &mut u2);
        assert_eq!(u1, u2, "usage of {}", String::from_utf8_lossy(data));
        (fast, full)
    }

    #[test]
    fn agrees_with_the_full_parse_on_odd_chunks() {
        let odd: &[&str] = &[
            r#"{"choices":[{"delta":{"content":" a"}}]}"#,
            r#"{"choices":[{"delta":{"content":"a\"b\u00e9"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"delta":{"con\u0074ent":"x"}}]}"#,
            r#"{"choices":[{"delta":{"content":"a","content":1}}]}"#,
            r#"{"choices":[{"delta":{"content":1,"content":"b"}}]}"#,
            r#"{"choices":[{"delta":null,"message":{"content":"m"}}]}"#,
            r#"{"choices":[{"message":{"content":"m"}}]}"#,
            r#"{"choices":[{"message":{"content":"m"},"delta":{}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":{"a":1}}}]}"#,
            r#"{"choices":[{"text":" t","finish_reason":7}]}"#,
            r#"{"choices":[[{"delta":{"content":"x"}}]]}"#,
            r#"{"choices":[1,{"delta":{"content":"x"}}]}"#,
            r#"{"choices":[]}"#,
            r#"{"choices":{"0":{"text":"x"}}}"#,
            r#"{"choices":[{"text":"x"}],"choices":[]}"#,
            r#"{"choices":[{"text":"x"}],"usage":null}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
            r#"{"error":null}"#,
            r#"{"error":{"message":"boom"}}"#,
            r#"{"choices":[{"text":"x","n":1e400}]}"#,
            r#"{"choices":[{"text":"x"}]} x"#,
            r#"[{"choices":[{"text":"x"}]}]"#,
            r#"{"choices":[{"text":"\ud800"}]}"#,
            r#"{"choices":[{"delta":{"reasoning":"r","reasoning_content":""}}]}"#,
            "{}",
            "[DONE]",
            "{not json",
            "",
        ];
        for data in odd {
            let (fast, full) = both(data.as_bytes());
            assert_eq!(fast, full, "{data}");
        }
        let deep = format!(
            r#"{{"choices":[{{"text":"x","n":{}{}}}]}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let (fast, full) = both(deep.as_bytes());
        assert_eq!(fast, full);
        assert!(matches!(full, Event::Malformed(_)), "{full:?}");
    }

    #[test]
    fn reads_vllm_token_chunks_without_the_full_parse() {
        let chunk = br#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" of"},"logprobs":null,"finish_reason":null}]}"#;
        let choice = chunk::read(chunk).unwrap().unwrap();
        assert_eq!(choice.content.as_deref(), Some(" of"));
        assert!(
            matches!(choice.content, Some(std::borrow::Cow::Borrowed(_))),
            "no copy"
        );
        assert!(chunk::read(br#"{"usage":{}}"#).is_none());
    }

    proptest! {
        #[test]
        fn agrees_with_the_full_parse_on_generated_chunks(v in chunk::arb_chunk(), dup in any::<bool>()) {
            let mut data = serde_json::to_string(&v).unwrap();
            if dup && data.starts_with('{') && data.len() > 2 {
                // A repeated key: both must keep the last copy.
                data.insert_str(1, r#""choices":[{"text":"first"}],"#);
            }
            let (fast, full) = both(data.as_bytes());
            prop_assert_eq!(fast, full, "{}", data);
        }
    }
}
