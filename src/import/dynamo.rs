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
//!
//! Dynamo's later versioned wire format (a `schema` header line, rows with
//! `play_id`, `not_before_ms` and `dependencies` objects) is refused with
//! that said: its dependency triggers (dispatch or completion) have no
//! equivalent in these rows.

use std::collections::HashMap;
use std::io::Read;

use serde_json::{Map, Value};

use super::{ImportArgs, Importer, Sink};
use crate::error::{Error, RecordError, Result};
use crate::jsonl::LineReader;
use crate::record::{Number, RowWriter};

/// One row, written and waiting for the graph check.
struct Held {
    file_no: usize,
    line: u64,
    bytes: Vec<u8>,
    request_id: Option<String>,
    session: Option<String>,
    wait_for: Vec<String>,
    branches: Vec<String>,
}

pub struct Dynamo {
    max_line: usize,
    files: Vec<std::path::PathBuf>,
    rows: Vec<Held>,
}

impl Dynamo {
    pub fn new(args: &ImportArgs) -> Self {
        Dynamo {
            max_line: args.io.max_line_bytes,
            files: args.inputs().cloned().collect(),
            rows: Vec::new(),
        }
    }

    /// `line N` (of FILE, when there are several inputs).
    fn place(&self, row: &Held) -> String {
        match self.files.get(row.file_no).filter(|_| self.files.len() > 1) {
            Some(p) => format!("{}: line {}", p.display(), row.line),
            None => format!("line {}", row.line),
        }
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

/// Converts one line into a held row.
fn row(line: &[u8]) -> std::result::Result<Held, RecordError> {
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
    let timestamp = take(&mut obj, "timestamp", "created_time")
        .filter(|v| !v.is_null())
        .map(|v| ms(&v, "timestamp"))
        .transpose()?;
    let session = match take(&mut obj, "session_id", "session_id") {
        None | Some(Value::Null) => None,
        Some(v) => Some(id_text(&v, "session_id")?),
    };
    let delay = take(&mut obj, "delay", "delay_ms")
        .filter(|v| !v.is_null())
        .map(|v| ms(&v, "delay"))
        .transpose()?;
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
    let input = take(&mut obj, "input_length", "input_tokens")
        .filter(|v| !v.is_null())
        .map(|v| tokens(&v, "input_length"))
        .transpose()?;
    let output = take(&mut obj, "output_length", "output_tokens")
        .filter(|v| !v.is_null())
        .map(|v| tokens(&v, "output_length"))
        .transpose()?;
    let hash_ids = match obj.remove("hash_ids") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|x| {
                    x.as_u64().ok_or_else(|| {
                        RecordError::field(
                            "hash_ids",
                            format!("{x} is not a block id (an integer >= 0)"),
                        )
                    })
                })
                .collect::<std::result::Result<Vec<u64>, _>>()?,
        ),
        Some(v) => {
            return Err(RecordError::field(
                "hash_ids",
                format!("{v} is not a list of block ids"),
            ))
        }
    };
    let request_id = match obj.remove("request_id") {
        None | Some(Value::Null) => None,
        Some(v) => Some(id_text(&v, "request_id")?),
    };
    let wait_for = id_list(obj.remove("wait_for"), "wait_for")?;
    let branches = id_list(obj.remove("branches"), "branches")?;
    if request_id.is_none() && !branches.is_empty() {
        return Err(RecordError::field(
            "branches",
            "a row that spawns others needs its own `request_id`: give the row one",
        ));
    }
    let tool_wait = obj
        .remove("tool_wait_ms")
        .filter(|v| !v.is_null())
        .map(|v| ms(&v, "tool_wait_ms"))
        .transpose()?;
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
    if input.is_none() && text.is_none() {
        return Err(RecordError::field(
            "input_length",
            "missing: a row needs input_length (or input_tokens, or text_input)",
        ));
    }
    let mut bytes = Vec::new();
    let mut w = RowWriter::new(&mut bytes);
    if let Some(t) = timestamp {
        w.timestamp(t);
    }
    if let Some(s) = &session {
        w.session_id(s);
    }
    if let Some(d) = delay {
        w.delay(d);
    }
    if let Some(t) = &text {
        w.text_input(t);
    }
    if let Some(i) = input {
        w.input_length(i);
    }
    if let Some(o) = output {
        w.output_length(o);
    }
    if let Some(ids) = &hash_ids {
        w.hash_ids(ids);
    }
    if let Some(id) = &request_id {
        w.extra_str("request_id", id);
    }
    for (name, list) in [("wait_for", &wait_for), ("branches", &branches)] {
        if !list.is_empty() {
            // The house style of lists (`["a", "b"]`), as hash_ids.
            let mut json = vec![b'['];
            for (k, id) in list.iter().enumerate() {
                if k > 0 {
                    json.extend_from_slice(b", ");
                }
                crate::record::write_str(id, &mut json);
            }
            json.push(b']');
            w.extra_raw(name, &json);
        }
    }
    if let Some(t) = tool_wait {
        let mut json = Vec::new();
        crate::record::write_number(t, &mut json);
        w.extra_raw("tool_wait_ms", &json);
    }
    if let Some(b) = prefix_reset {
        w.extra_raw("prefix_reset", if b { b"true" } else { b"false" });
    }
    // Every other field, as it was (in key order).
    for (k, v) in &obj {
        let json = serde_json::to_vec(v).unwrap_or_default();
        w.extra_raw(k, &json);
    }
    w.finish();
    Ok(Held {
        file_no: 0,
        line: 0,
        bytes,
        request_id,
        session,
        wait_for,
        branches,
    })
}

impl Importer for Dynamo {
    fn file(&mut self, src: Box<dyn Read + Send>, file_no: usize, sink: &mut Sink) -> Result<()> {
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
            match row(line.bytes) {
                Ok(mut held) => {
                    held.file_no = file_no;
                    held.line = line.no;
                    self.rows.push(held);
                }
                Err(e) => sink.bad(line.no, e)?,
            }
        }
    }

    fn finish(&mut self, sink: &mut Sink) -> Result<()> {
        self.check_graph()?;
        for r in &self.rows {
            sink.raw_row(&r.bytes)?;
        }
        Ok(())
    }
}

impl Dynamo {
    /// The graph's rules over every row (docs/guide/workloads-of-agents.md).
    fn check_graph(&self) -> Result<()> {
        let fail = |r: &Held, field: &str, msg: String| {
            Err(Error::Input(format!(
                "{}: field `{field}`: {msg}",
                self.place(r)
            )))
        };
        let mut by_id: HashMap<&str, usize> = HashMap::with_capacity(self.rows.len());
        for (k, r) in self.rows.iter().enumerate() {
            if let Some(id) = &r.request_id {
                if let Some(&first) = by_id.get(id.as_str()) {
                    return fail(
                        r,
                        "request_id",
                        format!(
                            "`{id}` is already the id of {}: request ids must be unique in the file; rename one",
                            self.place(&self.rows[first])
                        ),
                    );
                }
                by_id.insert(id, k);
            }
        }
        // deps[k]: the rows row k waits for (its wait_for, and the rows
        // whose branches list it).
        let mut deps: Vec<Vec<usize>> = vec![Vec::new(); self.rows.len()];
        for (k, r) in self.rows.iter().enumerate() {
            for (field, list) in [("wait_for", &r.wait_for), ("branches", &r.branches)] {
                for id in list {
                    let Some(&other) = by_id.get(id.as_str()) else {
                        return fail(
                            r,
                            field,
                            format!("`{id}` is not the request_id of any row: fix the id or add its row"),
                        );
                    };
                    let o = &self.rows[other];
                    if o.session != r.session {
                        return fail(
                            r,
                            field,
                            format!(
                                "`{id}` is a row of session {:?} ({}), this row of {:?}: an edge \
                                 stays within one session_id",
                                o.session.as_deref().unwrap_or("(none)"),
                                self.place(o),
                                r.session.as_deref().unwrap_or("(none)")
                            ),
                        );
                    }
                    if field == "wait_for" {
                        deps[k].push(other);
                    } else {
                        deps[other].push(k);
                    }
                }
            }
        }
        if let Some(cycle) = find_cycle(&deps) {
            let first = &self.rows[cycle[0]];
            let names: Vec<&str> = cycle
                .iter()
                .map(|&k| self.rows[k].request_id.as_deref().unwrap_or("?"))
                .collect();
            return fail(
                first,
                "wait_for",
                format!(
                    "the rows {} wait for each other in a cycle, so none is ever released: \
                     remove one of these edges",
                    names.join(" -> ")
                ),
            );
        }
        Ok(())
    }
}

/// A cycle of `deps` (each row waits for its list), as the rows on it in
/// order, or `None`: Kahn's algorithm releases what it can; a row left
/// has a left dependency, and following those must come back round.
fn find_cycle(deps: &[Vec<usize>]) -> Option<Vec<usize>> {
    let n = deps.len();
    let mut waiting: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (k, d) in deps.iter().enumerate() {
        for &o in d {
            dependents[o].push(k);
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&k| waiting[k] == 0).collect();
    while let Some(k) = ready.pop() {
        for &d in &dependents[k] {
            waiting[d] -= 1;
            if waiting[d] == 0 {
                ready.push(d);
            }
        }
    }
    let start = (0..n).find(|&k| waiting[k] > 0)?;
    // Walk left dependencies until a row repeats: the walk's tail is a cycle.
    let mut seen: HashMap<usize, usize> = HashMap::new();
    let mut path = Vec::new();
    let mut at = start;
    loop {
        if let Some(&i) = seen.get(&at) {
            let mut cycle = path[i..].to_vec();
            cycle.push(at);
            return Some(cycle);
        }
        seen.insert(at, path.len());
        path.push(at);
        at = *deps[at].iter().find(|&&o| waiting[o] > 0)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_is_found_and_named_in_order() {
        // 0 <- 1 <- 2 <- 1 (1 and 2 wait for each other), 3 free.
        let deps = vec![vec![], vec![0, 2], vec![1], vec![]];
        let c = find_cycle(&deps).unwrap();
        assert!(c == vec![1, 2, 1] || c == vec![2, 1, 2], "{c:?}");
        assert_eq!(find_cycle(&[vec![], vec![0], vec![0, 1]]), None);
        assert_eq!(find_cycle(&[vec![0]]), Some(vec![0, 0]));
    }

    #[test]
    fn aliases_become_mooncake_names_and_other_fields_stay() {
        let h = row(br#"{"request_id": 7, "session_id": "s", "input_tokens": 3, "output_tokens": 2, "hash_ids": [1], "created_time": 5.5, "wait_for": [3], "tool_events": [{"a": 1}], "prefix_reset": true}"#).unwrap();
        assert_eq!(
            String::from_utf8(h.bytes).unwrap(),
            "{\"timestamp\": 5.5, \"session_id\": \"s\", \"input_length\": 3, \"output_length\": 2, \
             \"hash_ids\": [1], \"request_id\": \"7\", \"wait_for\": [\"3\"], \"prefix_reset\": true, \
             \"tool_events\": [{\"a\":1}]}\n"
        );
        assert_eq!(h.wait_for, ["3"]);
    }
}
