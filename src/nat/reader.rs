//! Streaming the NAT profiler file: a JSON array of requests, read one
//! request at a time (memory bounded by the largest request, not the file),
//! keeping only the fields the conversion needs.

use std::io::Read;

use serde::de::IgnoredAny;
use serde::Deserialize;

use crate::error::{Error, Result};

#[derive(Debug, Deserialize)]
pub struct NatRequest {
    #[serde(default)]
    pub request_number: Option<serde_json::Value>,
    #[serde(default)]
    pub intermediate_steps: Option<Vec<Step>>,
}

#[derive(Debug, Deserialize)]
pub struct Step {
    #[serde(default)]
    pub payload: Option<Payload>,
}

#[derive(Debug, Deserialize)]
pub struct Payload {
    #[serde(default)]
    pub event_type: Option<String>,
    #[serde(default, rename = "UUID")]
    pub uuid: Option<String>,
    /// Epoch seconds; a number (older files may hold a numeric string).
    #[serde(default)]
    pub event_timestamp: Option<serde_json::Value>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    #[serde(default)]
    pub usage_info: Option<UsageInfo>,
}

#[derive(Debug, Deserialize)]
pub struct Metadata {
    #[serde(default)]
    pub chat_inputs: Option<Vec<Message>>,
}

/// A chat message: OpenAI style (`role`) or LangChain style (`type`), or a bare string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Message {
    Object {
        #[serde(default)]
        role: Option<String>,
        #[serde(default, rename = "type")]
        kind: Option<String>,
        #[serde(default)]
        content: Option<Content>,
    },
    Text(String),
    Other(IgnoredAny),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
    Other(IgnoredAny),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Part {
    Object {
        #[serde(default)]
        text: Option<String>,
    },
    Text(String),
    Other(IgnoredAny),
}

#[derive(Debug, Deserialize)]
pub struct UsageInfo {
    #[serde(default)]
    pub token_usage: Option<TokenUsage>,
}

#[derive(Debug, Deserialize)]
pub struct TokenUsage {
    #[serde(default)]
    pub prompt_tokens: Option<f64>,
    #[serde(default)]
    pub completion_tokens: Option<f64>,
}

/// How the array ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    Complete,
    /// The file stops inside the array (a run killed mid-write): every
    /// request before the cut was delivered.
    Truncated,
}

/// Splits the top-level JSON array in `src` into the raw bytes of its
/// elements, without parsing them: a byte scanner that tracks strings and
/// nesting, so requests can then be parsed in parallel (`serde_json` on a
/// slice) and only a batch of them is ever in memory.
pub struct ArraySplitter<R> {
    src: R,
    buf: Vec<u8>,
    pos: usize,
    eof: bool,
    started: bool,
    done: bool,
    /// The input ended right after an element, before `,` or `]`.
    cut: bool,
    /// Where `buf[0]` sits in the file, for messages that name a place.
    base: Place,
    /// Elements returned so far.
    elements: u64,
    /// What the file and its elements are called in messages.
    document: &'static str,
    element: &'static str,
}

/// A place in the input: byte offset, and 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub offset: u64,
    pub line: u64,
    pub column: u64,
}

impl Place {
    const START: Place = Place {
        offset: 0,
        line: 1,
        column: 1,
    };

    /// The place after `bytes` that start here.
    fn after(mut self, bytes: &[u8]) -> Place {
        self.offset += bytes.len() as u64;
        match memchr::memrchr(b'\n', bytes) {
            Some(last) => {
                self.line += memchr::memchr_iter(b'\n', bytes).count() as u64;
                self.column = (bytes.len() - last) as u64;
            }
            None => self.column += bytes.len() as u64,
        }
        self
    }

    /// The place of a serde_json error (line and column counted from the
    /// element's first byte) in the file.
    pub fn of_error_within(self, e: &serde_json::Error) -> Place {
        let (line, column) = (e.line() as u64, e.column() as u64);
        Place {
            offset: self.offset,
            line: self.line + line.saturating_sub(1),
            column: if line <= 1 {
                self.column + column.saturating_sub(1)
            } else {
                column
            },
        }
    }
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// One request's raw bytes and where they start in the file.
pub struct Element {
    pub bytes: Vec<u8>,
    pub start: Place,
}

const CHUNK: usize = 1 << 20;

impl<R: Read> ArraySplitter<R> {
    pub fn new(src: R) -> Self {
        Self::named(src, "profiler trace", "request")
    }

    /// A splitter whose messages call the file `document` and its
    /// elements `element` (other importers read JSON arrays too).
    pub fn named(src: R, document: &'static str, element: &'static str) -> Self {
        ArraySplitter {
            src,
            buf: Vec::new(),
            pos: 0,
            eof: false,
            started: false,
            done: false,
            cut: false,
            base: Place::START,
            elements: 0,
            document,
            element,
        }
    }

    /// The place of `buf[at]` in the file.
    fn place(&self, at: usize) -> Place {
        self.base.after(&self.buf[..at])
    }

    /// Reads more input; false at the end of the input.
    fn fill(&mut self) -> Result<bool> {
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 {
            self.base = self.base.after(&self.buf[..self.pos]);
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let old = self.buf.len();
        self.buf.resize(old + CHUNK, 0);
        loop {
            match self.src.read(&mut self.buf[old..]) {
                Ok(n) => {
                    self.buf.truncate(old + n);
                    self.eof = n == 0;
                    return Ok(n > 0);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::Io(e)),
            }
        }
    }

    /// The next byte that is not whitespace, without consuming it.
    fn peek_token(&mut self) -> Result<Option<u8>> {
        loop {
            while self.pos < self.buf.len() && self.buf[self.pos].is_ascii_whitespace() {
                self.pos += 1;
            }
            if self.pos < self.buf.len() {
                return Ok(Some(self.buf[self.pos]));
            }
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    /// Names the place: the byte offset, line and column in the file.
    fn invalid(&self, what: &str) -> Error {
        let at = self.place(self.pos);
        Error::Input(format!(
            "invalid {}: expected {what}, at byte {} ({at})",
            self.document, at.offset
        ))
    }

    /// Reads the array's `[`; returns true when the array is empty (its
    /// `]` read too).
    fn open_array(&mut self) -> Result<bool> {
        match self.peek_token()? {
            Some(b'[') => {
                self.pos += 1;
                self.started = true;
            }
            // Nothing at all is not a file cut off mid-write.
            None => {
                return Err(Error::Input(
                    "the input is empty: expected the profiler's JSON array of requests \
                     (all_requests_profiler_traces.json)"
                        .into(),
                ))
            }
            Some(_) => return Err(self.invalid("a JSON array of requests ([...])")),
        }
        if self.peek_token()? == Some(b']') {
            self.pos += 1;
            self.done = true;
            return Ok(true);
        }
        Ok(false)
    }

    /// Reads what follows an element: `,` before the next one, `]` at the
    /// end, or nothing when the input was cut right after it.
    fn after_element(&mut self) -> Result<()> {
        match self.peek_token()? {
            Some(b',') => self.pos += 1,
            Some(b']') => {
                self.pos += 1;
                self.done = true;
            }
            // Cut right after a complete request.
            None => self.cut = true,
            Some(_) => {
                let what = format!("`,` or `]` after {} {}", self.element, self.elements);
                return Err(self.invalid(&what));
            }
        }
        Ok(())
    }

    /// The next element's bytes; `Ok(None)` after the closing `]`;
    /// `Ok(Some(Err(End::Truncated)))` when the input stops inside the array.
    pub fn next_element(&mut self) -> Result<Option<std::result::Result<Element, End>>> {
        if self.done {
            return Ok(None);
        }
        if self.cut {
            self.done = true;
            return Ok(Some(Err(End::Truncated)));
        }
        if !self.started && self.open_array()? {
            return Ok(None);
        }
        match self.peek_token()? {
            None => return Ok(Some(Err(End::Truncated))),
            Some(b'{') => {}
            Some(_) => {
                let what = format!(
                    "{} {} to be an object ({{...}})",
                    self.element,
                    self.elements + 1
                );
                return Err(self.invalid(&what));
            }
        }
        // Scan to the end of the object, across reads. `self.pos` stays at
        // the element's start (a read moves it to the front of the buffer).
        let (mut i, mut depth, mut in_string, mut escaped) = (self.pos, 0usize, false, false);
        loop {
            while i < self.buf.len() {
                let b = self.buf[i];
                i += 1;
                if in_string {
                    if escaped {
                        escaped = false;
                    } else if b == b'\\' {
                        escaped = true;
                    } else if b == b'"' {
                        in_string = false;
                    }
                    continue;
                }
                match b {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            let element = Element {
                                bytes: self.buf[self.pos..i].to_vec(),
                                start: self.place(self.pos),
                            };
                            self.elements += 1;
                            self.pos = i;
                            self.after_element()?;
                            return Ok(Some(Ok(element)));
                        }
                    }
                    _ => {}
                }
            }
            let scanned = i - self.pos;
            if !self.fill()? {
                return Ok(Some(Err(End::Truncated)));
            }
            i = self.pos + scanned;
        }
    }
}

/// Parses one request's bytes.
pub fn parse_request(bytes: &[u8]) -> std::result::Result<NatRequest, serde_json::Error> {
    serde_json::from_slice(bytes)
}

/// serde_json's message without its own `at line L column C` (counted from
/// the request's start, not the file's).
pub fn error_text(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Request numbers of the complete requests, and how the array ended.
    fn numbers(text: &str) -> (Vec<i64>, Result<End>) {
        // A tiny read size so elements straddle reads.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = buf.len().min(self.0.len()).min(7);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut split = ArraySplitter::new(Trickle(text.as_bytes()));
        let mut seen = Vec::new();
        loop {
            match split.next_element() {
                Ok(None) => return (seen, Ok(End::Complete)),
                Ok(Some(Err(end))) => return (seen, Ok(end)),
                Ok(Some(Ok(el))) => match parse_request(&el.bytes) {
                    Ok(r) => seen.push(r.request_number.and_then(|v| v.as_i64()).unwrap_or(-1)),
                    Err(e) => return (seen, Err(Error::Input(e.to_string()))),
                },
                Err(e) => return (seen, Err(e)),
            }
        }
    }

    #[test]
    fn reads_requests_in_order() {
        let (seen, end) = numbers(
            r#" [{"request_number": 0, "intermediate_steps": []}, {"request_number": 1, "x": {"y": ["}", "\"]", 1]}}] "#,
        );
        assert_eq!(seen, vec![0, 1]);
        assert_eq!(end.unwrap(), End::Complete);
        let (seen, end) = numbers("[]");
        assert!(seen.is_empty());
        assert_eq!(end.unwrap(), End::Complete);
    }

    #[test]
    fn a_cut_file_keeps_every_complete_request() {
        let (seen, end) = numbers(
            r#"[{"request_number": 0}, {"request_number": 1}, {"request_number": 2, "intermediate_steps": [{"pay"#,
        );
        assert_eq!(seen, vec![0, 1]);
        assert_eq!(end.unwrap(), End::Truncated);
        // Cut right after a complete request, with or without its comma.
        for text in [
            r#"[{"request_number": 0}, {"request_number": 1},"#,
            r#"[{"request_number": 0}, {"request_number": 1}"#,
        ] {
            let (seen, end) = numbers(text);
            assert_eq!(seen, vec![0, 1]);
            assert_eq!(end.unwrap(), End::Truncated);
        }
        // Nothing at all (or only blanks) is not a cut file: it is an error.
        for text in ["", " \n\t"] {
            let (seen, end) = numbers(text);
            assert!(seen.is_empty());
            match end {
                Err(Error::Input(msg)) => assert!(msg.starts_with("the input is empty"), "{msg}"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn broken_json_is_an_input_error() {
        let (_, end) = numbers(r#"[{"request_number": 0} {"#);
        assert!(matches!(end, Err(Error::Input(_))));
        let (_, end) = numbers(r#"{"request_number": 0}"#);
        assert!(matches!(end, Err(Error::Input(_))));
        let (_, end) = numbers(r#"[{"request_number": 0, "x": tru}]"#);
        assert!(matches!(end, Err(Error::Input(_))));
    }

    #[test]
    fn messages_of_every_shape() {
        let (seen, end) = numbers(
            r#"[{"request_number": 5, "intermediate_steps": [{"payload": {"event_type": "LLM_START", "metadata": {"chat_inputs": [
                {"type": "human", "content": "hi"}, {"role": "user", "content": [{"type": "text", "text": "a"}, "b", 3]}, "bare", 7, {"content": null}
            ]}}}, {"payload": {"metadata": null, "usage_info": null}}, {"payload": null}]}]"#,
        );
        assert_eq!(seen, vec![5]);
        assert_eq!(end.unwrap(), End::Complete);
    }
}
