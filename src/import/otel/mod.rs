//! OpenTelemetry GenAI spans (OTLP/JSON exports) into agent graphs.
//!
//! `spans` reads the documents (one per file, or one per line as the
//! Collector's file exporter writes them) into checked spans; `agents`
//! turns one session's spans into its graph. Here: spans are grouped into
//! sessions (a trace, or the traces of one `gen_ai.conversation.id`), each
//! LLM call becomes a row (docs/tools/mc-import.md, "otel"):
//!
//! - `session_id`: the conversation id when the trace's spans carry one (and
//!   only one), else the trace id;
//! - `request_id`: the span id (`<traceId>:<spanId>` when another trace's
//!   call already has that id);
//! - a call that waits for nothing has a `timestamp` (ms since the first
//!   call's start in the input); any other call `delay` + `tool_wait_ms` =
//!   its start less the latest end of what it waits for, in whole ms;
//! - a call two or more calls wait for lists them in its `branches`; any
//!   other edge is in the waiting call's `wait_for` (as nat2mc writes them);
//! - `prefix_reset: true` on a sub-agent's first calls;
//! - no `hash_ids`: spans carry no prompt text, so nothing says which
//!   prefixes calls share (`--synth-hash-ids`: fresh ids for every row).
//!
//! Spans of one trace may come in several documents and files (the
//! exporter batches them), so the rows are written at the end, once every
//! input has been read and the rows as written have passed the core
//! `graph`'s checks.

mod agents;
mod spans;

use std::io::Read;

use super::row::SynthIds;
use super::{ImportArgs, Importer, Sink};
use crate::error::{Error, RecordError, Result};
use crate::graph;
use crate::record::{Number, Record, RowWriter};
use agents::{Map, Set};
use spans::{Doc, Kind, Place, Span};

/// The semantic conventions version the attributes are read by.
pub const SEMCONV: &str = "v1.37.0";

pub struct Otel {
    synth: Option<SynthIds>,
    /// The inputs, named in messages when there are several.
    files: Vec<std::path::PathBuf>,
    spans: Vec<Span>,
}

/// What the summary note says about the spans read.
#[derive(Default)]
struct Tally {
    traces: usize,
    sessions: usize,
    agents: u64,
    tools: u64,
    other_genai: u64,
    plain: u64,
    wrappers: u64,
    /// Traces whose spans name several conversations.
    mixed: u64,
    renamed: u64,
}

impl Otel {
    pub fn new(args: &ImportArgs) -> Self {
        Otel {
            synth: args
                .synth_hash_ids
                .then(|| SynthIds::new(args.block_size.unwrap_or(512))),
            files: args.inputs().cloned().collect(),
            spans: Vec::new(),
        }
    }

    /// `line N`, with the input named when there are several.
    fn at(&self, s: &Span) -> String {
        match self.files.get(s.file).filter(|_| self.files.len() > 1) {
            Some(p) => format!("{}: line {}", p.display(), s.line),
            None => format!("line {}", s.line),
        }
    }

    /// The spans grouped into sessions, in the order their traces were
    /// first met: a trace's spans with the one conversation id they carry,
    /// else on their own under the trace id. A span met twice in one
    /// trace is a bad record (the second copy is left out under
    /// `--on-error skip`).
    fn sessions(&self, sink: &mut Sink, tally: &mut Tally) -> Result<Vec<(String, Vec<&Span>)>> {
        let mut traces: Vec<(&str, Vec<&Span>)> = Vec::new();
        let mut trace_no: Map<&str, usize> = Map::default();
        for s in &self.spans {
            let k = *trace_no.entry(&s.trace).or_insert_with(|| {
                traces.push((&s.trace, Vec::new()));
                traces.len() - 1
            });
            traces[k].1.push(s);
        }
        tally.traces = traces.len();
        let mut sessions: Vec<(String, Vec<&Span>)> = Vec::new();
        let mut session_no: Map<String, usize> = Map::default();
        for (trace, spans) in traces {
            let mut seen: Map<&str, &Span> =
                Map::with_capacity_and_hasher(spans.len(), Default::default());
            let mut kept = Vec::with_capacity(spans.len());
            for s in spans {
                if let Some(first) = seen.get(&*s.id) {
                    let err = RecordError::new(format!(
                        "span `{}` (`{}`) of trace `{trace}` is also at {}: each span once \
                         (an export read twice?)",
                        s.id,
                        s.name,
                        self.at(first)
                    ));
                    if self.files.len() > 1 {
                        // Lines of several inputs are named with their file.
                        sink.policy
                            .handle(Error::Input(format!("{}: {err}", self.at(s))))?;
                    } else {
                        sink.bad(s.line, err)?;
                    }
                    continue;
                }
                seen.insert(&s.id, s);
                kept.push(s);
            }
            let conversations: Set<&str> = kept
                .iter()
                .filter_map(|s| s.conversation.as_deref())
                .collect();
            let key = match conversations.len() {
                1 => conversations
                    .into_iter()
                    .next()
                    .unwrap_or(trace)
                    .to_string(),
                0 => trace.to_string(),
                _ => {
                    tally.mixed += 1;
                    trace.to_string()
                }
            };
            match session_no.get(&key) {
                Some(&k) => sessions[k].1.extend(kept),
                None => {
                    session_no.insert(key.clone(), sessions.len());
                    sessions.push((key, kept));
                }
            }
        }
        Ok(sessions)
    }

    /// Every session's rows, in the order of their first call, each
    /// checked by the core `graph` as a reader will read it.
    fn rows(&mut self, sink: &mut Sink, tally: &mut Tally) -> Result<Vec<u8>> {
        let sessions = self.sessions(sink, tally)?;
        tally.sessions = sessions.len();
        let graphs = graphs_by_first_call(&sessions, tally)?;
        count_kinds(&self.spans, tally);
        let t0 = graphs.first().map_or(0, |g| g.0);
        let mut out = Vec::new();
        let mut check = graph::Builder::new();
        let mut used: Set<String> = Set::default();
        let mut line = 0;
        let mut synth = self.synth.clone();
        for (_, name, spans, g) in &graphs {
            let ids = request_ids(g, spans, &mut used, tally);
            let dependents = dependents(g);
            for (k, c) in g.calls.iter().enumerate() {
                let s = spans[c.span];
                let Kind::Call { input, output } = s.kind else {
                    continue;
                };
                let start = out.len();
                let wait_for: Vec<&str> = c
                    .deps
                    .iter()
                    .filter(|&&d| dependents[d].len() < 2)
                    .map(|&d| ids[d].as_str())
                    .collect();
                let branches: Vec<&str> = if dependents[k].len() >= 2 {
                    dependents[k].iter().map(|&j| ids[j].as_str()).collect()
                } else {
                    Vec::new()
                };
                let row = CallRow {
                    session: name,
                    request_id: &ids[k],
                    call: c,
                    since_t0_ns: s.start_ns - t0,
                    input,
                    output,
                    wait_for,
                    branches,
                };
                write_call_row(&row, &mut synth, &mut out);
                line += 1;
                let row = &out[start..out.len() - 1];
                let rec = Record::parse(row).map_err(|err| Error::Data { line, err })?;
                check
                    .push_record(line, &rec)
                    .map_err(|err| Error::Data { line, err })?;
            }
        }
        check.check().map_err(|e| {
            Error::Input(format!(
                "the rows made from the spans fail the agent-graph checks ({e}; line numbers \
                 are the output's): a bug, please report it with the input"
            ))
        })?;
        sink.counts.rows_in += line + tally.wrappers;
        if tally.wrappers > 0 {
            for _ in 0..tally.wrappers {
                sink.counts.drop("LLM span around another LLM span");
            }
        }
        Ok(out)
    }

    /// The summary of what the spans held and what became of them.
    fn note(&self, t: &Tally) -> String {
        let mut s = format!(
            "mc-import: otel: GenAI semantic conventions {SEMCONV}; {} traces in {} sessions; \
             {} agent spans, {} tool spans, {} spans of other GenAI operations and {} spans \
             without gen_ai.operation.name (no rows)",
            t.traces, t.sessions, t.agents, t.tools, t.other_genai, t.plain
        );
        if t.wrappers > 0 {
            s.push_str(&format!(
                "; {} LLM spans hold another LLM span (the same request seen by two \
                 instrumentations): the inner one is the row",
                t.wrappers
            ));
        }
        if t.mixed > 0 {
            s.push_str(&format!(
                "; {} traces carry several gen_ai.conversation.id values: each is a session \
                 of its own under its traceId",
                t.mixed
            ));
        }
        if t.renamed > 0 {
            s.push_str(&format!(
                "; {} calls have a span id another trace's call has: their request_id is \
                 `<traceId>:<spanId>`",
                t.renamed
            ));
        }
        if self.synth.is_none() {
            s.push_str(
                "; no hash_ids: spans carry no prompt text, so nothing says which prefixes \
                 calls share (--synth-hash-ids gives every row fresh ids)",
            );
        }
        s
    }
}
/// A session's graph with its first call's start, the name it goes by
/// and its spans.
type SessionGraph<'a> = (u64, &'a String, &'a Vec<&'a Span>, agents::Graph);

/// Each session's graph (sessions without calls left out), in the order
/// of their first call; counts the LLM spans left out as wrappers.
fn graphs_by_first_call<'a>(
    sessions: &'a [(String, Vec<&'a Span>)],
    tally: &mut Tally,
) -> Result<Vec<SessionGraph<'a>>> {
    let mut graphs = Vec::with_capacity(sessions.len());
    for (name, spans) in sessions {
        let g = agents::build(spans).map_err(Error::Input)?;
        tally.wrappers += g.wrappers;
        if let Some(first) = g.calls.first() {
            graphs.push((spans[first.span].start_ns, name, spans, g));
        }
    }
    graphs.sort_by_key(|g| g.0);
    Ok(graphs)
}

/// Counts the spans that are not calls, by kind, for the summary.
fn count_kinds(spans: &[Span], tally: &mut Tally) {
    for s in spans {
        match s.kind {
            Kind::Call { .. } => {}
            Kind::Agent => tally.agents += 1,
            Kind::Tool => tally.tools += 1,
            Kind::Other { genai: true } => tally.other_genai += 1,
            Kind::Other { genai: false } => tally.plain += 1,
        }
    }
}

/// Each call's `request_id`: its span id, or `<traceId>:<spanId>` when a
/// call written before already has that id (`used` holds them all).
fn request_ids(
    g: &agents::Graph,
    spans: &[&Span],
    used: &mut Set<String>,
    tally: &mut Tally,
) -> Vec<String> {
    g.calls
        .iter()
        .map(|c| {
            let s = spans[c.span];
            let mut id = s.id.to_string();
            if !used.insert(id.clone()) {
                tally.renamed += 1;
                id = format!("{}:{}", s.trace, s.id);
                used.insert(id.clone());
            }
            id
        })
        .collect()
}

/// For each call, the calls that wait for it (rows of `g.calls`): a call
/// two or more wait for lists them in its `branches`.
fn dependents(g: &agents::Graph) -> Vec<Vec<usize>> {
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); g.calls.len()];
    for (k, c) in g.calls.iter().enumerate() {
        for &d in &c.deps {
            dependents[d].push(k);
        }
    }
    dependents
}

/// What one call's row says.
struct CallRow<'a> {
    session: &'a str,
    request_id: &'a str,
    call: &'a agents::Call,
    /// Its span's start less the first call's in the input, ns.
    since_t0_ns: u64,
    input: u64,
    output: u64,
    wait_for: Vec<&'a str>,
    branches: Vec<&'a str>,
}

/// Writes one call's row (with fresh ids under `--synth-hash-ids`).
fn write_call_row(row: &CallRow<'_>, synth: &mut Option<SynthIds>, out: &mut Vec<u8>) {
    let c = row.call;
    let mut w = RowWriter::new(out);
    if c.deps.is_empty() {
        w.timestamp(Number::UInt(whole_ms(row.since_t0_ns)));
    }
    w.session_id(row.session);
    // The gap rounded once and the tool part taken out of it,
    // so delay + tool_wait_ms is the gap in whole ms.
    let total = whole_ms(c.gap_ns);
    let tool = whole_ms(c.tool_ns).min(total);
    if !c.deps.is_empty() {
        w.delay(Number::UInt(total - tool));
    }
    w.input_length(row.input);
    w.output_length(row.output);
    if let Some(synth) = synth {
        w.hash_ids(synth.next_row(row.input));
    }
    w.extra_str("request_id", row.request_id);
    if !row.wait_for.is_empty() {
        w.extra_str_list("wait_for", &row.wait_for);
    }
    if !row.branches.is_empty() {
        w.extra_str_list("branches", &row.branches);
    }
    if tool > 0 {
        w.extra_raw("tool_wait_ms", itoa::Buffer::new().format(tool).as_bytes());
    }
    if c.prefix_reset {
        w.extra_raw("prefix_reset", b"true");
    }
    w.finish();
}

/// ns to whole ms, rounded.
fn whole_ms(ns: u64) -> u64 {
    ns.saturating_add(500_000) / 1_000_000
}

impl Importer for Otel {
    fn file(&mut self, src: Box<dyn Read + Send>, file_no: usize, sink: &mut Sink) -> Result<()> {
        let bytes = super::read_document(src)?;
        let body = &bytes[..];
        let mut stream = serde_json::Deserializer::from_slice(body).into_iter::<Doc<'_>>();
        let (mut line, mut counted) = (1u64, 0usize);
        loop {
            let before = stream.byte_offset();
            let doc = match stream.next() {
                None => return Ok(()),
                Some(Ok(d)) => d,
                Some(Err(e)) => {
                    // The rest of the input cannot be read after it.
                    return sink.bad(e.line() as u64, super::json_error(&e));
                }
            };
            let start = before
                + body[before..]
                    .iter()
                    .take_while(|b| b.is_ascii_whitespace())
                    .count();
            line += memchr::memchr_iter(b'\n', &body[counted..start]).count() as u64;
            counted = start;
            let at = Place {
                body,
                start,
                end: stream.byte_offset(),
                line,
            };
            for span in doc.spans(&at) {
                match span {
                    Ok(s) => self.spans.push(Span { file: file_no, ..s }),
                    Err(f) => sink.bad(f.line, f.err)?,
                }
            }
        }
    }

    fn finish(&mut self, sink: &mut Sink) -> Result<()> {
        let mut tally = Tally::default();
        let rows = self.rows(sink, &mut tally)?;
        for row in rows.split_inclusive(|&b| b == b'\n') {
            sink.raw_row(row)?;
        }
        if !self.spans.is_empty() {
            eprintln!("{}", self.note(&tally));
        }
        Ok(())
    }
}
