//! Dynamo's agentic Mooncake rows (`request_trace_to_mooncake --agentic`,
//! ai-dynamo/dynamo PR #9728) and plain Mooncake rows: every row is checked
//! and written in the house style with its fields kept — the Mooncake
//! ones, the agent-graph ones (`request_id`, `wait_for`, `branches`,
//! `tool_wait_ms`, `prefix_reset`; docs/guide/workloads-of-agents.md) and
//! any other field (Dynamo's `tool_events`, ...) as it was.
//!
//! Dynamo's aliases become the Mooncake names (`input_tokens` →
//! `input_length`, `output_tokens` → `output_length`, `created_time` →
//! `timestamp`, `delay_ms` → `delay`), and a numeric id becomes its decimal
//! text. A row's own faults (types, a negative or non-finite time,
//! `branches` without `request_id`) name its line and go to `--on-error`;
//! the graph's faults (an unknown or duplicate id, an edge to another
//! session, a cycle) need every row, so the rows are held and written only
//! when the whole input has passed, and such a fault stops the import
//! whatever `--on-error` says (a graph with a row left out is another graph).
//! Both are checked by the core `graph` module on the rows as written, the
//! rules every reader of the output applies; rows without `session_id` are
//! one session among themselves, as Dynamo writes them.
//!
//! Dynamo's later versioned wire format (a `schema` header line, rows with
//! `play_id`, `not_before_ms` and `dependencies` objects) is refused with
//! that said: its dependency triggers (dispatch or completion) have no
//! equivalent in these rows.

use std::io::Read;

use serde_json::{Map, Value};

use super::{ImportArgs, Importer, Sink};
use crate::error::{RecordError, Result};
use crate::graph;
use crate::jsonl::LineReader;
use crate::record::{Number, Record, RowWriter};

pub struct Dynamo {
    max_line: usize,
    /// The inputs, named in the graph's faults when there are several.
    files: Vec<std::path::PathBuf>,
    /// The rows as written, waiting for the graph check.
    rows: Vec<Vec<u8>>,
    graph: graph::Builder,
}

impl Dynamo {
    pub fn new(args: &ImportArgs) -> Self {
        let graph = graph::Builder::new();
        Dynamo {
            max_line: args.io.max_line_bytes,
            files: args.inputs().cloned().collect(),
            rows: Vec::new(),
            graph,
        }
    }

    /// Hands the row as written to the graph's checks: its own faults
    /// come back (for `--on-error`), the whole graph's wait for `finish`.
    fn check_row(&mut self, line: u64, bytes: &[u8]) -> std::result::Result<(), RecordError> {
        let text = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        self.graph.push_record(line, &Record::parse(text)?)
    }
}

/// Takes `name` (or its alias) out of `obj`.
fn take(obj: &mut Map<String, Value>, name: &str, alias: &str) -> Option<Value> {
    obj.remove(name).or_else(|| obj.remove(alias))
}

/// An id: a string, or a number read as its decimal text.
fn id_text(v: &Value, field: &str) -> std::result::Result<String, RecordError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        _ => Err(RecordError::field(
            field,
            format!("{v} is not an id: write a string (a number is read as its decimal text)"),
        )),
    }
}

fn id_list(v: Option<Value>, field: &str) -> std::result::Result<Vec<String>, RecordError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items.iter().map(|x| id_text(x, field)).collect(),
        Some(other) => Err(RecordError::field(
            field,
            format!("{other} is not a list: write an array of request ids, e.g. [\"a1\"]"),
        )),
    }
}

/// A time in ms (`timestamp`, `delay`, `tool_wait_ms`): a finite number at
/// least 0 and within the limit of 2^53 ms.
fn ms(v: &Value, field: &str) -> std::result::Result<Number, RecordError> {
    let Some(f) = v.as_f64() else {
        return Err(RecordError::field(
            field,
            format!("{v} is not a number of ms: write e.g. 250 or 12.5"),
        ));
    };
    crate::limits::time_ms(field, f)?;
    Ok(match (v.as_u64(), v.as_i64()) {
        (Some(u), _) => Number::UInt(u),
        (_, Some(i)) => Number::Int(i),
        _ => Number::Float(f),
    })
}

fn tokens(v: &Value, field: &str) -> std::result::Result<u64, RecordError> {
    let n = v.as_u64().ok_or_else(|| {
        RecordError::field(
            field,
            format!("{v} is not a token count: write an integer >= 0"),
        )
    })?;
    crate::limits::tokens(field, n)
}

/// The house-style fields of one row, read and checked; every other field
/// stays in the object they were taken from.
struct Fields {
    timestamp: Option<Number>,
    session: Option<String>,
    delay: Option<Number>,
    text: Option<String>,
    input: Option<u64>,
    output: Option<u64>,
    hash_ids: Option<Vec<u64>>,
    request_id: Option<String>,
    wait_for: Vec<String>,
    branches: Vec<String>,
    tool_wait: Option<Number>,
    prefix_reset: Option<bool>,
}

/// Converts one line into a row in the house style.
fn row(line: &[u8]) -> std::result::Result<Vec<u8>, RecordError> {
    let mut obj: Map<String, Value> =
        serde_json::from_slice(line).map_err(|e| super::json_error(&e))?;
    if obj.contains_key("dependencies")
        || obj.contains_key("not_before_ms")
        || obj.contains_key("schema")
    {
        return Err(RecordError::new(
            "Dynamo's versioned agentic format (a `schema` header, rows with `not_before_ms` and \
             `dependencies`) is not read: export the trace with wait_for/branches rows \
             (`request_trace_to_mooncake --agentic` of ai-dynamo/dynamo PR #9728)",
        ));
    }
    let fields = take_fields(&mut obj)?;
    if fields.input.is_none() && fields.text.is_none() {
        return Err(RecordError::field(
            "input_length",
            "missing: a row needs input_length (or input_tokens, or text_input)",
        ));
    }
    Ok(write_row(&fields, &obj))
}

/// An optional time in ms under `name` (or its alias); null is absent.
fn take_ms(
    obj: &mut Map<String, Value>,
    name: &str,
    alias: &str,
) -> std::result::Result<Option<Number>, RecordError> {
    take(obj, name, alias)
        .filter(|v| !v.is_null())
        .map(|v| ms(&v, name))
        .transpose()
}

/// An optional token count under `name` (or its alias); null is absent.
fn take_tokens(
    obj: &mut Map<String, Value>,
    name: &str,
    alias: &str,
) -> std::result::Result<Option<u64>, RecordError> {
    take(obj, name, alias)
        .filter(|v| !v.is_null())
        .map(|v| tokens(&v, name))
        .transpose()
}

/// An optional id under `name`; null is absent.
fn take_id(
    obj: &mut Map<String, Value>,
    name: &str,
) -> std::result::Result<Option<String>, RecordError> {
    match obj.remove(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => Ok(Some(id_text(&v, name)?)),
    }
}

/// Takes the house-style fields out of `obj`, checked, in the order their
/// errors are reported.
fn take_fields(obj: &mut Map<String, Value>) -> std::result::Result<Fields, RecordError> {
    let timestamp = take_ms(obj, "timestamp", "created_time")?;
    let session = take_id(obj, "session_id")?;
    let delay = take_ms(obj, "delay", "delay_ms")?;
    let text = match obj.remove("text_input") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(v) => {
            return Err(RecordError::field(
                "text_input",
                format!("{v} is not a string"),
            ))
        }
    };
    let input = take_tokens(obj, "input_length", "input_tokens")?;
    let output = take_tokens(obj, "output_length", "output_tokens")?;
    let hash_ids = block_ids(obj.remove("hash_ids"))?;
    let request_id = take_id(obj, "request_id")?;
    let wait_for = id_list(obj.remove("wait_for"), "wait_for")?;
    let branches = id_list(obj.remove("branches"), "branches")?;
    let tool_wait = take_ms(obj, "tool_wait_ms", "tool_wait_ms")?;
    let prefix_reset = match obj.remove("prefix_reset") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(b),
        Some(v) => {
            return Err(RecordError::field(
                "prefix_reset",
                format!("{v} is not true or false"),
            ))
        }
    };
    Ok(Fields {
        timestamp,
        session,
        delay,
        text,
        input,
        output,
        hash_ids,
        request_id,
        wait_for,
        branches,
        tool_wait,
        prefix_reset,
    })
}

/// `hash_ids`: absent, null, or a list of integers >= 0.
fn block_ids(v: Option<Value>) -> std::result::Result<Option<Vec<u64>>, RecordError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_u64().ok_or_else(|| {
                    RecordError::field(
                        "hash_ids",
                        format!("{x} is not a block id (an integer >= 0)"),
                    )
                })
            })
            .collect::<std::result::Result<Vec<u64>, _>>()
            .map(Some),
        Some(v) => Err(RecordError::field(
            "hash_ids",
            format!("{v} is not a list of block ids"),
        )),
    }
}

/// Writes `f` in the house order, then every other field of `rest` as it
/// was (in key order).
fn write_row(f: &Fields, rest: &Map<String, Value>) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut w = RowWriter::new(&mut bytes);
    if let Some(t) = f.timestamp {
        w.timestamp(t);
    }
    if let Some(s) = &f.session {
        w.session_id(s);
    }
    if let Some(d) = f.delay {
        w.delay(d);
    }
    if let Some(t) = &f.text {
        w.text_input(t);
    }
    if let Some(i) = f.input {
        w.input_length(i);
    }
    if let Some(o) = f.output {
        w.output_length(o);
    }
    if let Some(ids) = &f.hash_ids {
        w.hash_ids(ids);
    }
    if let Some(id) = &f.request_id {
        w.extra_str("request_id", id);
    }
    for (name, list) in [("wait_for", &f.wait_for), ("branches", &f.branches)] {
        if !list.is_empty() {
            w.extra_str_list(name, list);
        }
    }
    if let Some(t) = f.tool_wait {
        let mut json = Vec::new();
        crate::record::write_number(t, &mut json);
        w.extra_raw("tool_wait_ms", &json);
    }
    if let Some(b) = f.prefix_reset {
        w.extra_raw("prefix_reset", if b { b"true" } else { b"false" });
    }
    for (k, v) in rest {
        let json = serde_json::to_vec(v).unwrap_or_default();
        w.extra_raw(k, &json);
    }
    w.finish();
    bytes
}

impl Importer for Dynamo {
    fn file(&mut self, src: Box<dyn Read + Send>, file_no: usize, sink: &mut Sink) -> Result<()> {
        if let Some(path) = self.files.get(file_no).filter(|_| self.files.len() > 1) {
            self.graph.file(&path.display().to_string());
        }
        let mut rd = LineReader::new(src, self.max_line);
        loop {
            let line = match rd.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => return Ok(()),
                Err(e) => {
                    sink.policy.handle(e)?;
                    continue;
                }
            };
            sink.counts.rows_in += 1;
            let checked = row(line.bytes).and_then(|bytes| {
                self.check_row(line.no, &bytes)?;
                Ok(bytes)
            });
            match checked {
                Ok(bytes) => self.rows.push(bytes),
                Err(e) => sink.bad(line.no, e)?,
            }
        }
    }

    fn finish(&mut self, sink: &mut Sink) -> Result<()> {
        std::mem::take(&mut self.graph).check()?;
        for r in &self.rows {
            sink.raw_row(r)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_become_mooncake_names_and_other_fields_stay() {
        let h = row(br#"{"request_id": 7, "session_id": "s", "input_tokens": 3, "output_tokens": 2, "hash_ids": [1], "created_time": 5.5, "wait_for": [3], "tool_events": [{"a": 1}], "prefix_reset": true}"#).unwrap();
        assert_eq!(
            String::from_utf8(h).unwrap(),
            "{\"timestamp\": 5.5, \"session_id\": \"s\", \"input_length\": 3, \"output_length\": 2, \
             \"hash_ids\": [1], \"request_id\": \"7\", \"wait_for\": [\"3\"], \"prefix_reset\": true, \
             \"tool_events\": [{\"a\":1}]}\n"
        );
    }
}
