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
                        let entries = Entries { text: self.text };
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
        let mut conv = Entries { text: self.text };
        lines::convert(sink, rd, self.max_line, &mut conv)
    }
}

/// The JSONL entries of a workload as a line converter: each line is a
/// function of itself and `--no-text`, so any worker can take it.
struct Entries {
    text: bool,
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

impl Convert for Entries {
    fn line(
        &mut self,
        line: &[u8],
        out: &mut Vec<u8>,
        counts: &mut Counts,
    ) -> Result<std::result::Result<(), RecordError>> {
        Ok(match serde_json::from_slice::<Entry>(line) {
            Ok(e) => self.entry(&e, out, counts),
            Err(e) => Err(json_error(&e)),
        })
    }

    fn fork(&self) -> Self {
        Entries { text: self.text }
    }
}
