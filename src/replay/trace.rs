//! Loading a whole trace before a run: every line is checked first, so a
//! bad line stops the run before any request is sent.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::error::{RecordError, Result};
use crate::filter::for_each_line;
use crate::finding::Finding;
use crate::graph::{AgentFields, Builder, RowKind};
use crate::jsonl::{ErrorPolicy, LineReader};
use crate::record::{Field, Record};

/// The longest prompt a row may ask for, in tokens: prompts are built in
/// memory, so a larger `input_length` (or hash-id count × block size) is a
/// bad line rather than an out-of-memory halfway through a run.
pub const MAX_INPUT_TOKENS: u64 = 10_000_000;

/// The latest `timestamp` accepted, in ms (about 31,700 years: Unix-epoch
/// milliseconds fit with room to spare).
pub const MAX_TIMESTAMP_MS: f64 = 1e15;

/// The longest `delay` accepted, and the longest span of a schedule, in ms
/// (about 3.2 years): times beyond it would never arrive.
pub const MAX_SPAN_MS: f64 = 1e11;

/// Where a turn's prompt comes from.
#[derive(Debug, Clone)]
pub enum Content {
    /// Built from `input_length` and `hash_ids`.
    Synth,
    /// `text_input`, sent as one user message (or as the prompt).
    Text(String),
    /// `messages` (and `tools`), sent verbatim.
    Messages {
        messages: Vec<Value>,
        tools: Option<Value>,
    },
}

/// One row of the trace: one request.
#[derive(Debug, Clone)]
pub struct Turn {
    /// 1-based input line.
    pub line: u64,
    /// Index into [`Trace::sessions`]; `None` for a row without a session.
    pub session: Option<usize>,
    /// 0-based position within its session.
    pub turn: u32,
    pub timestamp_ms: Option<f64>,
    pub delay_ms: Option<f64>,
    /// `tool_wait_ms`: tool time before the row, added to its release
    /// time like `delay` (0 when absent).
    pub tool_wait_ms: f64,
    pub input_length: Option<u64>,
    pub output_length: Option<u64>,
    pub hash_ids: Box<[u64]>,
    pub content: Content,
    pub extra: Option<Map<String, Value>>,
    /// Set on a call of an agent graph (docs/guide/agents.md).
    pub call: Option<Box<Call>>,
}

/// A call of an agent graph: what the scheduler needs to release it, as
/// [`crate::graph::Graphs`] resolved it (row indices are this trace's).
#[derive(Debug, Clone, Default)]
pub struct Call {
    /// The row's `request_id` (a leaf may have none).
    pub id: Option<Box<str>>,
    /// The rows it waits for: its `wait_for` and the rows listing it in
    /// `branches` (sorted, each once).
    pub deps: Box<[u32]>,
    /// The rows that wait for it.
    pub dependents: Box<[u32]>,
    /// For a call without dependencies (a root): its release time by the
    /// release rule, trace ms ([`crate::graph::Graphs::release_ms`]).
    pub root_ms: Option<f64>,
}

impl Turn {
    /// The prompt length the row asks for, in tokens (`None` for literal
    /// text or messages without an `input_length`).
    pub fn intended_input(&self, block_size: u64) -> Option<u64> {
        match self.content {
            Content::Synth => Some(
                self.input_length
                    .unwrap_or(self.hash_ids.len() as u64 * block_size),
            ),
            _ => self.input_length,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Session {
    /// The id as the trace wrote it (a string's text, or a number);
    /// `None` for the calls without `session_id`, which are one session
    /// among themselves (the graph module's rule, Dynamo's).
    pub id: Option<String>,
    /// Indices into [`Trace::turns`], in file order.
    pub turns: Vec<usize>,
}

#[derive(Debug, Default)]
pub struct Trace {
    pub turns: Vec<Turn>,
    pub sessions: Vec<Session>,
    /// Set on one shard's part of a trace ([`super::shard`]): the whole
    /// trace's schedule, so the part keeps the single run's times.
    pub frame: Option<Frame>,
}

/// Where a shard's rows sit in the whole trace's schedule.
#[derive(Debug, Clone, Default)]
pub struct Frame {
    /// The whole trace's zero (its earliest session-start timestamp).
    pub zero_ms: Option<f64>,
    /// For each of the part's session starts, in order, its position among
    /// the whole trace's starts (`--rate` draws its arrival times over all).
    pub start_rank: Vec<u64>,
}

impl Trace {
    /// Rows that start something: a session's first turn, or a row without a
    /// session. These follow the arrival schedule; later turns follow their
    /// session.
    pub fn starts(&self) -> impl Iterator<Item = usize> + '_ {
        self.turns
            .iter()
            .enumerate()
            .filter(|(_, t)| t.turn == 0)
            .map(|(i, _)| i)
    }

    pub fn session_id(&self, turn: &Turn) -> Option<&str> {
        turn.session.and_then(|s| self.sessions[s].id.as_deref())
    }

    /// True when some row is a call of an agent graph.
    pub fn has_graph(&self) -> bool {
        self.turns.iter().any(|t| t.call.is_some())
    }

    /// True when session `s` is an agent graph (a task): its rows follow
    /// their edges, not each other.
    pub fn is_graph_session(&self, s: usize) -> bool {
        self.sessions[s]
            .turns
            .first()
            .is_some_and(|&r| self.turns[r].call.is_some())
    }

    /// The roots of graph session `s` (calls without dependencies) and
    /// their release times, trace ms, in file order.
    pub fn roots(&self, s: usize) -> impl Iterator<Item = (usize, f64)> + '_ {
        self.sessions[s].turns.iter().filter_map(|&r| {
            let c = self.turns[r].call.as_ref()?;
            Some((r, c.root_ms?))
        })
    }

    /// When the row `start` (one of [`Trace::starts`]) starts its session,
    /// trace ms: its timestamp; for a graph session, its earliest root's
    /// release, when the session has a timestamp at all.
    pub fn start_ms(&self, start: usize) -> Option<f64> {
        let t = &self.turns[start];
        match t.session {
            Some(s) if t.call.is_some() => {
                let timed = self.sessions[s]
                    .turns
                    .iter()
                    .any(|&r| self.turns[r].timestamp_ms.is_some());
                if !timed {
                    return None;
                }
                self.roots(s).map(|(_, ms)| ms).min_by(f64::total_cmp)
            }
            _ => t.timestamp_ms,
        }
    }
}

/// Reads every record; bad lines follow `policy`.
pub fn load<R: std::io::Read>(
    reader: &mut LineReader<R>,
    policy: &mut ErrorPolicy,
) -> Result<Trace> {
    let mut trace = Trace::default();
    let mut by_id: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut graph = Builder::new();
    for_each_line(reader, policy, |no, bytes, policy| {
        match parse_turn(no, bytes) {
            Ok((mut turn, sid, agent)) => {
                // Only rows kept go in, so the graph's rows are the trace's.
                graph.push(no, sid.as_deref(), turn.timestamp_ms, turn.delay_ms, agent);
                if let Some(raw) = sid {
                    let next = trace.sessions.len();
                    let s = *by_id.entry(raw.clone()).or_insert(next);
                    if s == next {
                        trace.sessions.push(Session {
                            id: Some(session_text(&raw)),
                            turns: Vec::new(),
                        });
                    }
                    turn.session = Some(s);
                    turn.turn = trace.sessions[s].turns.len() as u32;
                    trace.sessions[s].turns.push(trace.turns.len());
                }
                trace.turns.push(turn);
                Ok(())
            }
            Err(e) => policy.record(no, e),
        }
    })?;
    // A bad graph stops the run before anything is sent (exit 65).
    let graphs = graph.check()?;
    // Calls without `session_id` are one session among themselves: one
    // unnamed session, so they start and follow their edges as a task.
    let mut sessionless: Option<usize> = None;
    for (r, turn) in trace.turns.iter_mut().enumerate() {
        if graphs.kind(r) != RowKind::Call {
            continue;
        }
        if turn.session.is_none() {
            let s = *sessionless.get_or_insert_with(|| {
                trace.sessions.push(Session {
                    id: None,
                    turns: Vec::new(),
                });
                trace.sessions.len() - 1
            });
            turn.session = Some(s);
            turn.turn = trace.sessions[s].turns.len() as u32;
            trace.sessions[s].turns.push(r);
        }
        let deps = graphs.deps(r);
        turn.call = Some(Box::new(Call {
            id: graphs.request_id(r).map(Into::into),
            deps: deps.into(),
            dependents: graphs.dependents(r).into(),
            root_ms: deps.is_empty().then(|| graphs.release_ms(r, |_| f64::NAN)),
        }));
    }
    Ok(trace)
}

type Parsed = (Turn, Option<Vec<u8>>, AgentFields);

fn parse_turn(no: u64, bytes: &[u8]) -> Result<Parsed, RecordError> {
    let rec = Record::parse(bytes)?;
    let agent = AgentFields::read(&rec)?;
    if agent.tool_wait_ms.is_some_and(|w| w > MAX_SPAN_MS) {
        return Err(RecordError::field(
            "tool_wait_ms",
            format!("more than the limit of {MAX_SPAN_MS:e} ms (about 3 years)"),
        ));
    }
    let number = |f| -> Result<Option<f64>, RecordError> {
        let n = rec.number(f)?.map(|n| n.as_f64());
        match n {
            Some(v) if !(v.is_finite() && v >= 0.0) => Err(RecordError::field(
                f.name(),
                "must be a non-negative number",
            )),
            _ => Ok(n),
        }
    };
    let timestamp_ms = number(Field::Timestamp)?;
    if timestamp_ms.is_some_and(|t| t > MAX_TIMESTAMP_MS) {
        return Err(RecordError::field(
            "timestamp",
            format!("more than the limit of {MAX_TIMESTAMP_MS:e} ms"),
        ));
    }
    let delay_ms = number(Field::Delay)?;
    if delay_ms.is_some_and(|d| d > MAX_SPAN_MS) {
        return Err(RecordError::field(
            "delay",
            format!("more than the limit of {MAX_SPAN_MS:e} ms (about 3 years)"),
        ));
    }
    let input_length = rec.uint(Field::InputLength)?;
    if input_length.is_some_and(|n| n > MAX_INPUT_TOKENS) {
        return Err(RecordError::field(
            "input_length",
            format!("more than the limit of {MAX_INPUT_TOKENS} tokens"),
        ));
    }
    let output_length = rec.uint(Field::OutputLength)?;
    let mut ids = Vec::new();
    rec.hash_ids_into(&mut ids)?;
    let session = rec.session_id()?.map(<[u8]>::to_vec);
    let content = content(&rec, input_length.is_some() || !ids.is_empty())?;
    let extra = match json(&rec, Field::Extra)? {
        None => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => return Err(RecordError::field("extra", "expected an object")),
    };
    let turn = Turn {
        line: no,
        session: None,
        turn: 0,
        timestamp_ms,
        delay_ms,
        tool_wait_ms: agent.tool_wait_ms.unwrap_or(0.0),
        input_length,
        output_length,
        hash_ids: ids.into_boxed_slice(),
        content,
        extra,
        call: None,
    };
    Ok((turn, session, agent))
}

/// A field's JSON value; `null` is absent.
fn json(rec: &Record<'_>, f: Field) -> Result<Option<Value>, RecordError> {
    match rec.raw(f).filter(|r| *r != b"null") {
        None => Ok(None),
        Some(raw) => serde_json::from_slice(raw)
            .map(Some)
            .map_err(|e| RecordError::field(f.name(), e)),
    }
}

/// The row's prompt: `messages` (and `tools`), else `text_input`, else
/// built from `input_length` and `hash_ids` (`synth`: the row has either).
fn content(rec: &Record<'_>, synth: bool) -> Result<Content, RecordError> {
    let json = |f| json(rec, f);
    let content = if let Some(m) = json(Field::Messages)? {
        let Value::Array(messages) = m else {
            return Err(RecordError::field("messages", "expected an array"));
        };
        let tools = json(Field::Tools)?;
        if tools.as_ref().is_some_and(|t| !t.is_array()) {
            return Err(RecordError::field("tools", "expected an array"));
        }
        Content::Messages { messages, tools }
    } else if let Some(t) = json(Field::TextInput)? {
        let Value::String(text) = t else {
            return Err(RecordError::field("text_input", "expected a string"));
        };
        Content::Text(text)
    } else if synth {
        Content::Synth
    } else {
        return Err(RecordError::new(
            "no prompt: a row needs `input_length` (with or without `hash_ids`), \
             `text_input` or `messages`",
        ));
    };
    Ok(content)
}

/// A session id for headers and results: a string's text, a number as written.
fn session_text(raw: &[u8]) -> String {
    match serde_json::from_slice::<Value>(raw) {
        Ok(Value::String(s)) => s,
        _ => String::from_utf8_lossy(raw).into_owned(),
    }
}

/// Rows whose `input_length` and hash-id count disagree with the block size.
#[derive(Debug, Default)]
pub struct BlockFit {
    /// `input_length <= (n-1)*B`: the ids say more blocks than the length holds.
    pub broken: Finding,
    /// `input_length > n*B`: an unhashed tail (accepted; built as row text).
    pub tail: Finding,
}

pub fn check_blocks(trace: &Trace, b: u64) -> BlockFit {
    let mut c = BlockFit::default();
    for t in &trace.turns {
        let (Content::Synth, Some(len)) = (&t.content, t.input_length) else {
            continue;
        };
        let n = t.hash_ids.len();
        // The rule lives in blocks.rs; here only which way a row breaks it.
        if n == 0 || crate::blocks::is_consistent(n, len, b) {
            continue;
        }
        if crate::blocks::blocks_for(len, b) > n as u64 {
            c.tail.add(t.line);
        } else {
            c.broken.add(t.line);
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonl::OnError;

    fn load_str(s: &str) -> Result<Trace> {
        let mut r = LineReader::new(s.as_bytes(), 1 << 20);
        load(&mut r, &mut ErrorPolicy::new(OnError::Fail))
    }

    #[test]
    fn sessions_and_turns_in_file_order() {
        let t = load_str(
            "{\"session_id\":\"a\",\"timestamp\":0,\"input_length\":3,\"output_length\":1}\n\
             {\"session_id\":7,\"timestamp\":5,\"input_length\":3}\n\
             {\"session_id\":\"a\",\"delay\":10,\"input_length\":6}\n\
             {\"timestamp\":9,\"text_input\":\"hi\"}\n",
        )
        .unwrap();
        assert_eq!(t.sessions.len(), 2);
        assert_eq!(t.sessions[0].id.as_deref(), Some("a"));
        assert_eq!(t.sessions[1].id.as_deref(), Some("7"));
        assert_eq!(t.sessions[0].turns, vec![0, 2]);
        assert_eq!(t.turns[2].turn, 1);
        assert_eq!(t.turns[2].delay_ms, Some(10.0));
        assert_eq!(t.starts().collect::<Vec<_>>(), vec![0, 1, 3]);
        assert!(matches!(t.turns[3].content, Content::Text(ref s) if s == "hi"));
    }

    #[test]
    fn bad_rows_name_line_and_field() {
        let cases = [
            ("{\"timestamp\":1}", "line 1: no prompt"),
            ("{\"input_length\":\"x\"}", "line 1: field `input_length`"),
            (
                "{\"messages\":{}}",
                "line 1: field `messages`: expected an array",
            ),
            (
                "{\"input_length\":1,\"extra\":[1]}",
                "line 1: field `extra`",
            ),
            (
                "{\"input_length\":1,\"timestamp\":-4}",
                "line 1: field `timestamp`",
            ),
        ];
        for (line, want) in cases {
            let err = load_str(line).unwrap_err().to_string();
            assert!(err.starts_with(want), "{line}: {err}");
        }
    }

    #[test]
    fn absurd_sizes_and_times_are_bad_lines() {
        let cases = [
            (
                "{\"input_length\":1000000000000}",
                "line 1: field `input_length`: more than the limit of 10000000 tokens",
            ),
            (
                "{\"input_length\":1,\"timestamp\":1e308}",
                "line 1: field `timestamp`: more than the limit",
            ),
            (
                "{\"input_length\":1,\"delay\":1e15}",
                "line 1: field `delay`: more than the limit",
            ),
            (
                "{\"input_length\":1,\"delay\":1e17}",
                "line 1: field `delay`: more than the limit",
            ),
            (
                "{\"input_length\":1,\"tool_wait_ms\":1e12}",
                "line 1: field `tool_wait_ms`: more than the limit",
            ),
        ];
        for (line, want) in cases {
            let err = load_str(line).unwrap_err().to_string();
            assert!(err.starts_with(want), "{line}: {err}");
        }
        // At the limits: accepted.
        assert!(load_str("{\"input_length\":10000000,\"timestamp\":1e15,\"delay\":1e11}").is_ok());
    }

    #[test]
    fn block_check_counts_broken_rows_and_tails() {
        let t = load_str(
            "{\"input_length\":8,\"hash_ids\":[1,2]}\n\
             {\"input_length\":4,\"hash_ids\":[1,2]}\n\
             {\"input_length\":9,\"hash_ids\":[1,2]}\n\
             {\"input_length\":5,\"hash_ids\":[1,2]}\n",
        )
        .unwrap();
        let c = check_blocks(&t, 4);
        // At B = 4: 4 tokens cannot fill 2 ids (line 2); 9 overflow them (line 3).
        assert_eq!((c.broken.count, c.tail.count), (1, 1));
        assert_eq!(
            (c.broken.first_lines, c.tail.first_lines),
            (vec![2], vec![3])
        );
    }

    #[test]
    fn a_bad_graph_stops_the_load_with_its_line_and_field() {
        let cases = [
            (
                "{\"session_id\":\"s\",\"request_id\":\"a\",\"input_length\":1}\n\
                 {\"session_id\":\"s\",\"request_id\":\"b\",\"wait_for\":[\"zz\"],\"input_length\":1}\n",
                "line 2: field `wait_for`: no row has request_id `zz`",
            ),
            (
                "{\"session_id\":\"s\",\"request_id\":\"a\",\"wait_for\":[\"b\"],\"input_length\":1}\n\
                 {\"session_id\":\"s\",\"request_id\":\"b\",\"wait_for\":[\"a\"],\"input_length\":1}\n",
                "line 1: fields `wait_for`/`branches`: the calls `a` → `b` → `a`",
            ),
            (
                "{\"session_id\":\"s\",\"request_id\":\"a\",\"input_length\":1,\"tool_wait_ms\":-1}\n",
                "line 1: field `tool_wait_ms`",
            ),
        ];
        for (text, want) in cases {
            let err = load_str(text).unwrap_err().to_string();
            assert!(err.starts_with(want), "{text}: {err}");
        }
    }

    #[test]
    fn graph_calls_carry_their_edges_and_roots_their_release() {
        let t = load_str(
            "{\"session_id\":\"s\",\"request_id\":\"b\",\"wait_for\":[\"a\"],\"input_length\":1,\"tool_wait_ms\":5}\n\
             {\"session_id\":\"s\",\"request_id\":\"a\",\"timestamp\":100,\"input_length\":1}\n\
             {\"session_id\":\"s\",\"request_id\":\"c\",\"delay\":30,\"input_length\":1}\n\
             {\"session_id\":\"p\",\"timestamp\":50,\"input_length\":1}\n",
        )
        .unwrap();
        let b = t.turns[0].call.as_deref().unwrap();
        assert_eq!((&*b.deps, b.root_ms), (&[1u32][..], None));
        assert_eq!(t.turns[0].tool_wait_ms, 5.0);
        assert_eq!(&*t.turns[1].call.as_deref().unwrap().dependents, &[0u32]);
        // A root without a timestamp: its session's first timestamp + delay.
        assert_eq!(t.turns[2].call.as_deref().unwrap().root_ms, Some(130.0));
        assert!(t.turns[3].call.is_none());
        assert!(t.is_graph_session(0) && !t.is_graph_session(1));
        // The task starts at its earliest root, not at its first row.
        assert_eq!((t.start_ms(0), t.start_ms(3)), (Some(100.0), Some(50.0)));
    }
}
