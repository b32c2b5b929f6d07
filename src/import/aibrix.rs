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

use super::{json_error, peek_start, ImportArgs, Importer, SessionId, Sink};
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

    /// Writes the rows of one entry; `Err` for a bad entry (nothing of it
    /// is written then).
    fn entry(&self, e: &Entry, sink: &mut Sink) -> Result<std::result::Result<(), RecordError>> {
        sink.counts.rows_in += e.requests.len() as u64;
        if e.timestamp.as_f64().is_none_or(|t| t < 0.0) {
            return Ok(Err(RecordError::field(
                "timestamp",
                "expected milliseconds (a number at least 0)",
            )));
        }
        if let Some(Err(err)) = e
            .timestamp
            .as_f64()
            .map(|t| crate::limits::time_ms("timestamp", t))
        {
            return Ok(Err(err));
        }
        for (k, r) in e.requests.iter().enumerate() {
            for (name, v) in [
                ("prompt_length", r.prompt_length),
                ("output_length", r.output_length),
            ] {
                if let Some(Err(err)) =
                    v.map(|n| crate::limits::tokens(&format!("requests[{k}].{name}"), n))
                {
                    return Ok(Err(err));
                }
            }
            let text = r.prompt.as_deref().filter(|_| self.text);
            if text.is_none() && r.prompt_length.is_none() {
                let why = if r.prompt.is_some() {
                    "has no `prompt_length` (and --no-text leaves the prompt out)"
                } else {
                    "has neither `prompt` nor `prompt_length`"
                };
                return Ok(Err(RecordError::new(format!("requests[{k}] {why}"))));
            }
        }
        let ts = e.timestamp.to_string();
        for r in &e.requests {
            let text = r.prompt.as_deref().filter(|_| self.text);
            sink.row(|w| {
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
            })?;
        }
        Ok(Ok(()))
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
                    Ok(e) => self.entry(&e, sink)?,
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
        let mut rd = LineReader::new(src, self.max_line);
        sink.each_line(&mut rd, |sink, bytes| {
            Ok(match serde_json::from_slice::<Entry>(bytes) {
                Ok(e) => self.entry(&e, sink)?,
                Err(e) => Err(json_error(&e)),
            })
        })
    }
}
