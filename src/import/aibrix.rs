//! AIBrix workload files (vllm-project/aibrix `benchmarks/generator`): one
//! entry per dispatch time, `{"timestamp": ms, "requests": [{"prompt",
//! "prompt_length", "output_length", "session_id"}, ...]}`, written as JSONL
//! or as one (indented) JSON array. Older files spell the lengths `"Prompt
//! Length"` and `"Output Length"`; `output_length` may be `null`.
//!
//! Each request becomes a row at its entry's timestamp. A request with a
//! prompt becomes `text_input` and one without (or any with `--no-text`)
//! `input_length` from its prompt length: AIPerf's Mooncake loader accepts
//! exactly one of the two in a row, and mc-gen writes text rows the same way.

use std::io::Read;

use serde::Deserialize;

use super::lines::{self, Convert};
use super::{json_error, peek_start, write_row, Counts, ImportArgs, Importer, SessionId, Sink};
use crate::error::{Error, RecordError, Result};
use crate::jsonl::LineReader;
use crate::nat::reader::ArraySplitter;

#[derive(Deserialize)]
struct Entry {
    timestamp: serde_json::Number,
    requests: Vec<AibrixRequest>,
}

#[derive(Deserialize)]
struct AibrixRequest {
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default, alias = "Prompt Length")]
    prompt_length: Option<u64>,
    #[serde(default, alias = "Output Length")]
    output_length: Option<u64>,
    #[serde(default)]
    session_id: Option<SessionId>,
}

pub struct Aibrix {
    max_line: usize,
    text: bool,
}

impl Aibrix {
    pub fn new(args: &ImportArgs) -> Self {
        Aibrix {
            max_line: args.io.max_line_bytes,
            text: !args.no_text,
        }
    }
}

impl Importer for Aibrix {
    fn file(&mut self, src: Box<dyn Read + Send>, _file_no: usize, sink: &mut Sink) -> Result<()> {
        let (first, src) = peek_start(src)?;
        if first == Some(b'[') {
            let mut split = ArraySplitter::named(src, "AIBrix workload", "entry");
            while let Some(el) = split.next_element()? {
                let el = el.map_err(|_| {
                    Error::Input(
                        "the AIBrix workload's JSON array is cut short (no closing `]`)".into(),
                    )
                })?;
                let parsed = match serde_json::from_slice::<Entry>(&el.bytes) {
                    Ok(e) => {
                        let mut rows = Vec::new();
                        let entries = Entries {
                            text: self.text,
                            reqs: Vec::new(),
                        };
                        let made = entries.entry(&e, &mut rows, &mut sink.counts);
                        sink.out.write_records(&rows)?;
                        made
                    }
                    Err(e) => {
                        let at = el.start.of_error_within(&e);
                        sink.bad(
                            at.line,
                            RecordError::new(format!(
                                "column {}: {}",
                                at.column,
                                crate::nat::reader::error_text(&e)
                            )),
                        )?;
                        continue;
                    }
                };
                if let Err(e) = parsed {
                    sink.bad(el.start.line, e)?;
                }
            }
            return Ok(());
        }
        // JSONL: one entry a line, converted in chunks (`lines`).
        let rd = LineReader::new(src, self.max_line);
        let mut conv = Entries {
            text: self.text,
            reqs: Vec::new(),
        };
        lines::convert(sink, rd, self.max_line, &mut conv)
    }
}

/// The JSONL entries of a workload as a line converter: each line is a
/// function of itself and `--no-text`, so any worker can take it.
struct Entries {
    text: bool,
    /// The narrow scanner's room for an entry's requests.
    reqs: Vec<fast::Req>,
}

impl Entries {
    /// Writes the rows of one entry into `out`; `Err` for a bad entry
    /// (nothing of it is written then).
    fn entry(
        &self,
        e: &Entry,
        out: &mut Vec<u8>,
        counts: &mut Counts,
    ) -> std::result::Result<(), RecordError> {
        counts.rows_in += e.requests.len() as u64;
        if e.timestamp.as_f64().is_none_or(|t| t < 0.0) {
            return Err(RecordError::field(
                "timestamp",
                "expected milliseconds (a number at least 0)",
            ));
        }
        if let Some(Err(err)) = e
            .timestamp
            .as_f64()
            .map(|t| crate::limits::time_ms("timestamp", t))
        {
            return Err(err);
        }
        for (k, r) in e.requests.iter().enumerate() {
            for (name, v) in [
                ("prompt_length", r.prompt_length),
                ("output_length", r.output_length),
            ] {
                // The field's name is made only for a value over the limit:
                // a `format!` per request was 3-5% of the import (perf).
                if let Some(n) = v.filter(|&n| n > crate::limits::MAX_ROW_TOKENS) {
                    crate::limits::tokens(&format!("requests[{k}].{name}"), n)?;
                }
            }
            let text = r.prompt.as_deref().filter(|_| self.text);
            if text.is_none() && r.prompt_length.is_none() {
                let why = if r.prompt.is_some() {
                    "has no `prompt_length` (and --no-text leaves the prompt out)"
                } else {
                    "has neither `prompt` nor `prompt_length`"
                };
                return Err(RecordError::new(format!("requests[{k}] {why}")));
            }
        }
        let ts = e.timestamp.to_string();
        for r in &e.requests {
            let text = r.prompt.as_deref().filter(|_| self.text);
            write_row(out, counts, |w| {
                w.timestamp_text(ts.as_bytes());
                if let Some(s) = &r.session_id {
                    w.session_id(&s.text());
                }
                match (text, r.prompt_length) {
                    (Some(t), _) => w.text_input(t),
                    (None, Some(n)) => w.input_length(n),
                    (None, None) => {}
                }
                if let Some(n) = r.output_length {
                    w.output_length(n);
                }
            });
        }
        Ok(())
    }
}

impl Entries {
    /// A JSONL entry read by serde: the reference the narrow scanner
    /// (`fast`) answers as, and the reader of every other line.
    fn by_serde(
        &self,
        line: &[u8],
        out: &mut Vec<u8>,
        counts: &mut Counts,
    ) -> std::result::Result<(), RecordError> {
        match serde_json::from_slice::<Entry>(line) {
            Ok(e) => self.entry(&e, out, counts),
            Err(e) => Err(json_error(&e)),
        }
    }
}

impl Convert for Entries {
    fn line(
        &mut self,
        line: &[u8],
        out: &mut Vec<u8>,
        counts: &mut Counts,
    ) -> Result<std::result::Result<(), RecordError>> {
        if fast::entry(line, self.text, &mut self.reqs, out, counts).is_some() {
            return Ok(Ok(()));
        }
        Ok(self.by_serde(line, out, counts))
    }

    fn fork(&self) -> Self {
        Entries {
            text: self.text,
            reqs: Vec::new(),
        }
    }
}

/// The narrow scanner of AIBrix's JSONL lines, the shape its generator
/// writes: an entry `{"timestamp": ms, "requests": [...]}` whose requests
/// hold only `prompt` (a string), `prompt_length`/`Prompt Length` and
/// `output_length`/`Output Length` (whole numbers) and `session_id` (a
/// string or a whole number), strings of printable ASCII without escapes,
/// every key once. Such an entry is written here as `Entries::entry`
/// writes it (its rows in `ObjWriter`'s style: the test compares the two
/// on every case). Anything else (another key or value, an escape, a
/// fraction, a limit passed, a request without its length) is `None`:
/// the line goes to serde and `entry`, which also name what is wrong.
/// serde into owned structs was 70% of the import (cachegrind,
/// docs/decisions/0043-importers-at-pipe-speed.md).
mod fast {
    use super::Counts;

    /// A request as read: where its strings stand in the line (start, end
    /// of the content), its numbers.
    #[derive(Clone, Copy, Default)]
    pub(super) struct Req {
        prompt: Option<(usize, usize)>,
        prompt_length: Option<u64>,
        output_length: Option<u64>,
        /// Digits or a string's content: written as a string either way.
        session: Option<(usize, usize)>,
    }

    struct Scan<'l> {
        s: &'l [u8],
        i: usize,
    }

    impl Scan<'_> {
        fn ws(&mut self) {
            while matches!(self.s.get(self.i), Some(b' ' | b'\t' | b'\r' | b'\n')) {
                self.i += 1;
            }
        }

        /// Skips blanks, then takes `c`.
        fn eat(&mut self, c: u8) -> Option<()> {
            self.ws();
            (self.s.get(self.i) == Some(&c)).then(|| self.i += 1)
        }

        /// Skips blanks; whether the next byte is `c` (taken if so).
        fn take(&mut self, c: u8) -> bool {
            self.ws();
            let yes = self.s.get(self.i) == Some(&c);
            self.i += usize::from(yes);
            yes
        }

        /// A key, one of `keys` (its place in them): the text between the
        /// quotes compared as it stands, so a key with an escape is none.
        fn key(&mut self, keys: &[&[u8]]) -> Option<usize> {
            self.eat(b'"')?;
            let rest = &self.s[self.i..];
            let k = keys
                .iter()
                .position(|k| rest.starts_with(k) && rest.get(k.len()) == Some(&b'"'))?;
            self.i += keys[k].len() + 1;
            Some(k)
        }

        /// A string of printable ASCII without escapes: where its content
        /// stands. The end found by `memchr2`, the bytes checked by a count
        /// the compiler runs on vectors (a byte at a time was half the
        /// scan's instructions).
        fn string(&mut self) -> Option<(usize, usize)> {
            self.eat(b'"')?;
            let start = self.i;
            let len = memchr::memchr2(b'"', b'\\', &self.s[start..])?;
            let end = start + len;
            let odd = self.s[start..end]
                .iter()
                .filter(|&&b| !(b' '..=b'~').contains(&b))
                .count();
            if self.s[end] != b'"' || odd != 0 {
                return None;
            }
            self.i = end + 1;
            Some((start, end))
        }

        /// A whole number as JSON writes it (no sign, no leading zero, no
        /// fraction or exponent after it), at most 15 digits: where its
        /// digits stand.
        fn digits(&mut self) -> Option<(usize, usize)> {
            self.ws();
            let start = self.i;
            let len = self.s[start..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            if len == 0 || len > 15 || (len > 1 && self.s[start] == b'0') {
                return None;
            }
            self.i = start + len;
            if matches!(self.s.get(self.i), Some(b'.' | b'e' | b'E')) {
                return None;
            }
            Some((start, self.i))
        }

        fn uint(&mut self) -> Option<u64> {
            let (a, b) = self.digits()?;
            crate::record::parse_uint(&self.s[a..b])
        }

        /// A request object.
        fn request(&mut self) -> Option<Req> {
            const KEYS: [&[u8]; 6] = [
                b"prompt",
                b"prompt_length",
                b"Prompt Length",
                b"output_length",
                b"Output Length",
                b"session_id",
            ];
            self.eat(b'{')?;
            let mut r = Req::default();
            if self.take(b'}') {
                return Some(r);
            }
            loop {
                let key = self.key(&KEYS)?;
                self.eat(b':')?;
                // A key met twice is serde's error to name.
                match key {
                    0 if r.prompt.is_none() => r.prompt = Some(self.string()?),
                    1 | 2 if r.prompt_length.is_none() => r.prompt_length = Some(self.uint()?),
                    3 | 4 if r.output_length.is_none() => r.output_length = Some(self.uint()?),
                    5 if r.session.is_none() => {
                        self.ws();
                        r.session = Some(if self.s.get(self.i) == Some(&b'"') {
                            self.string()?
                        } else {
                            self.digits()?
                        });
                    }
                    _ => return None,
                }
                if !self.take(b',') {
                    self.eat(b'}')?;
                    return Some(r);
                }
            }
        }
    }

    /// Converts `line` as `Entries::entry` would, or `None` (nothing
    /// written, nothing counted) when it is not of the narrow shape.
    /// `reqs` is room for the requests, reused between lines.
    pub(super) fn entry(
        line: &[u8],
        text: bool,
        reqs: &mut Vec<Req>,
        out: &mut Vec<u8>,
        counts: &mut Counts,
    ) -> Option<()> {
        let mut sc = Scan { s: line, i: 0 };
        sc.eat(b'{')?;
        let mut ts: Option<(usize, usize)> = None;
        let mut requests = false;
        reqs.clear();
        loop {
            match sc.key(&[b"timestamp", b"requests"])? {
                0 if ts.is_none() => {
                    sc.eat(b':')?;
                    ts = Some(sc.digits()?);
                }
                1 if !requests => {
                    sc.eat(b':')?;
                    requests = true;
                    sc.eat(b'[')?;
                    if !sc.take(b']') {
                        loop {
                            let r = sc.request()?;
                            if !fits(&r, text) {
                                return None;
                            }
                            reqs.push(r);
                            if !sc.take(b',') {
                                sc.eat(b']')?;
                                break;
                            }
                        }
                    }
                }
                _ => return None,
            }
            if !sc.take(b',') {
                sc.eat(b'}')?;
                break;
            }
        }
        sc.ws();
        if sc.i != line.len() || !requests {
            return None;
        }
        let ts = &line[ts?.0..ts?.1];
        // `limits::time_ms`: at most 2^53 ms (15 digits may pass it).
        if crate::record::parse_uint(ts)? as f64 > crate::limits::MAX_TIME_MS {
            return None;
        }
        counts.rows_in += reqs.len() as u64;
        for r in reqs.iter() {
            write(out, line, ts, r, text);
            counts.rows_out += 1;
        }
        Some(())
    }

    /// Whether `entry` would take the request `r` as it is.
    fn fits(r: &Req, text: bool) -> bool {
        let max = crate::limits::MAX_ROW_TOKENS;
        r.prompt_length.is_none_or(|n| n <= max)
            && r.output_length.is_none_or(|n| n <= max)
            && ((text && r.prompt.is_some()) || r.prompt_length.is_some())
    }

    /// One row, as `Entries::entry` writes it through `ObjWriter`.
    fn write(out: &mut Vec<u8>, line: &[u8], ts: &[u8], r: &Req, text: bool) {
        out.extend_from_slice(b"{\"timestamp\": ");
        out.extend_from_slice(ts);
        if let Some((a, b)) = r.session {
            out.extend_from_slice(b", \"session_id\": \"");
            out.extend_from_slice(&line[a..b]);
            out.push(b'"');
        }
        match (r.prompt.filter(|_| text), r.prompt_length) {
            (Some((a, b)), _) => {
                out.extend_from_slice(b", \"text_input\": \"");
                out.extend_from_slice(&line[a..b]);
                out.push(b'"');
            }
            (None, Some(n)) => {
                out.extend_from_slice(b", \"input_length\": ");
                crate::record::write_number(crate::record::Number::UInt(n), out);
            }
            (None, None) => {}
        }
        if let Some(n) = r.output_length {
            out.extend_from_slice(b", \"output_length\": ");
            crate::record::write_number(crate::record::Number::UInt(n), out);
        }
        out.extend_from_slice(b"}\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line the narrow scanner takes, it converts as serde and
    /// `entry` do: valid lines of the generator's shape and of the older
    /// keys, each byte of them replaced and each cut short.
    #[test]
    fn the_scanner_answers_as_serde() {
        let valid = [
            r#"{"timestamp": 19, "requests": [{"prompt": "request 1: hi", "prompt_length": 2, "output_length": 5, "session_id": 0}, {"prompt_length": 1, "output_length": 3, "session_id": "s-1"}]}"#,
            r#"{"requests":[{"Prompt Length":7,"Output Length":9}],"timestamp":0}"#,
            r#" { "timestamp" : 1000 , "requests" : [ ] } "#,
            r#"{"timestamp": 5, "requests": [{"prompt": "only text"}, {"prompt": "", "prompt_length": 10000000}]}"#,
            // Keys met twice (serde's error), and unknown keys (serde's).
            r#"{"timestamp": 1, "requests": [{"prompt_length": 1, "Prompt Length": 2}]}"#,
            r#"{"timestamp": 1, "timestamp": 2, "requests": []}"#,
            r#"{"timestamp": 1, "requests": [{"prompt_length": 1, "extra": 2}], "more": 0}"#,
        ];
        let mut lines: Vec<Vec<u8>> = Vec::new();
        for v in valid {
            let v = v.as_bytes();
            lines.push(v.to_vec());
            for i in 0..v.len() {
                for b in [
                    b'0', b'9', b'"', b'\\', b',', b' ', b'.', b'-', b'x', b'{', b']', 0x7f, 0xc3,
                ] {
                    let mut w = v.to_vec();
                    w[i] = b;
                    lines.push(w);
                }
                lines.push(v[..i].to_vec());
            }
        }
        let mut taken = 0;
        for text in [true, false] {
            let conv = Entries {
                text,
                reqs: Vec::new(),
            };
            let mut reqs = Vec::new();
            for line in &lines {
                let (mut fast_out, mut fast_counts) = (Vec::new(), Counts::default());
                if fast::entry(line, text, &mut reqs, &mut fast_out, &mut fast_counts).is_none() {
                    assert!(fast_out.is_empty() && fast_counts.rows_in == 0);
                    continue;
                }
                taken += 1;
                let (mut out, mut counts) = (Vec::new(), Counts::default());
                let made = conv.by_serde(line, &mut out, &mut counts);
                let shown = String::from_utf8_lossy(line);
                assert!(made.is_ok(), "{shown}: {:?}", made.err());
                assert_eq!(
                    String::from_utf8_lossy(&fast_out),
                    String::from_utf8_lossy(&out),
                    "{shown}"
                );
                assert_eq!(
                    (fast_counts.rows_in, fast_counts.rows_out),
                    (counts.rows_in, counts.rows_out),
                    "{shown}"
                );
            }
        }
        // The valid lines themselves, and many a mutation, were taken.
        assert!(taken > 2 * valid.len() + 100, "{taken}");
    }
}
