//! kv-cache-tester (WEKA) agent traces: one JSON object per session file,
//! `{"id", "block_size", "hash_id_scope", "requests": [...]}`. A request has
//! `t` (s from its session's start), `in`, `out`, `hash_ids` (blocks of the
//! file's `block_size`) and `think_time` (s between the previous answer and
//! this request); a `"type": "subagent"` entry holds the sub-agent's own
//! `requests`, timed from the entry's `t`.
//!
//! Each session becomes Mooncake turns: the first with a `timestamp` (the
//! session's start on the common timeline plus its `t`), later ones with
//! `delay` = the recorded think time (ARCHITECTURE.md §1: a later turn waits that
//! long after the previous turn completes). Session k (in file order) starts
//! at k × `--session-gap` ms, or k / `--session-rate` s; at 0 by default.
//!
//! A session with sub-agents becomes one agent graph (`--sub-agents graph`,
//! the default; docs/guide/workloads-of-agents.md): every call gets a
//! `request_id`, each call waits for the previous call of its chain; a
//! sub-agent's first call is a branch of the call that spawned it (the
//! parent's latest call before the sub-agent's entry, released the
//! recorded gap after that call's end, `prefix_reset`: it starts with its
//! own prompt), and the parent's first call that starts after the
//! sub-agent's last call ended (`t` + `api_time`) also waits for that call,
//! its delay then the recorded start less the later end (never more than
//! its think time). What the files say and nothing more: a sub-agent
//! entry's place in the list, its `t`, and its calls' `t` and `api_time`.
//! With `--sub-agents sessions` a sub-agent is instead a session of its
//! own, `<id>/<agent_id>`, with `parent_session_id` naming the session that
//! started it, written where it appears.
//!
//! Ids are local to a file (`hash_id_scope: "local"`): they are renumbered
//! through one map per file, so two files never share a block by accident,
//! while a file's sub-agents keep sharing theirs (they all start with the
//! same system prompt). The files hash only full blocks (`floor(in / B)`
//! ids); a row then gets a fresh id for its partial last block, so every
//! row is consistent at the file's block size.
//!
//! The files are read by hand (`scan`; serde, the reference, for any
//! document off their shape) and renumbered a row at a time
//! (`renumber`), each row taking the ids it shares with the previous
//! row from it (docs/decisions/0050-weka-by-hand.md).

mod renumber;
mod scan;

use std::collections::HashMap;
use std::io::Read;
use std::ops::Range;

use serde::Deserialize;

use renumber::Renumber;

use super::{ImportArgs, Importer, Sink};
use crate::error::{Error, RecordError, Result};
use crate::record::Number;

/// One session document. serde's reading of it is the reference; the
/// files' own shape is read by hand ([`scan`]) into the same values.
#[derive(Deserialize, Debug, PartialEq)]
struct Session {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    block_size: Option<u64>,
    #[serde(default)]
    hash_id_scope: Option<String>,
    requests: Vec<WekaRequest>,
}

#[derive(Deserialize, Debug, PartialEq, Default)]
struct WekaRequest {
    #[serde(default)]
    t: f64,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default, rename = "in")]
    input: Option<u64>,
    #[serde(default)]
    out: Option<u64>,
    #[serde(default)]
    hash_ids: Vec<u64>,
    #[serde(default)]
    think_time: Option<f64>,
    #[serde(default)]
    api_time: Option<f64>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    requests: Option<Vec<WekaRequest>>,
}

/// `--sub-agents`: how a session's sub-agents are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SubAgents {
    /// The session as one agent graph: each sub-agent's calls a branch of
    /// the call that spawned it, joined by the parent's first call after
    /// the sub-agent's end (docs/guide/workloads-of-agents.md).
    Graph,
    /// Each sub-agent a session of its own, `<id>/<agent_id>`, with
    /// `parent_session_id` (no edges: the parent does not wait for it).
    Sessions,
}

pub struct Weka {
    gap_ms: f64,
    /// `--sub-agents graph`: sessions with sub-agents become graphs.
    graph: bool,
    block_size: Option<u64>,
    /// The block size of the files read so far (they must agree).
    file_block: Option<(u64, String)>,
    files: Vec<std::path::PathBuf>,
    /// Sessions started so far (the k of the timeline).
    sessions: u64,
    /// Local id -> output id, per file (or across files for `global` scope).
    ids: Renumber,
    /// The current session's rows' `hash_ids` text (`Call::ids`).
    texts: Vec<u8>,
    /// Rows whose partial last block got a fresh id; rows cut to their length.
    tails: u64,
    cut: u64,
    /// Session names used so far, with the input that used each: a name
    /// met again (another file, or one file given twice) is made unique.
    names: HashMap<String, usize>,
    renamed: u64,
    /// Think times over an hour, named at the end.
    long: crate::delays::LongDelays,
}

/// One chain of calls: a session, or a sub-agent inside one.
struct Chain<'a> {
    /// The chain's own session name (`<id>/<agent_id>` for a sub-agent).
    session: &'a str,
    parent: Option<&'a str>,
    agent: Option<String>,
    /// Its start on the common timeline, ms.
    start_ms: f64,
    /// The call (index into the session's calls) that started this
    /// sub-agent: the parent's latest call before the sub-agent's entry.
    spawner: Option<usize>,
}

/// One call, read and checked, before it is written.
struct Call {
    session: String,
    parent: Option<String>,
    agent: Option<String>,
    /// Its recorded start and end (`t` + `api_time`), ms on the timeline.
    ts_ms: f64,
    end_ms: f64,
    /// As a session row: the think time after the chain's previous call.
    delay: Option<f64>,
    /// As a graph row: after the latest end of what it waits for.
    graph_delay: Option<f64>,
    input: u64,
    output: u64,
    /// Its `hash_ids` array's text in `Weka::texts`.
    ids: Range<usize>,
    /// The calls it waits for (indexes): the chain's previous call and the
    /// sub-agents' last calls it joins.
    wait_for: Vec<usize>,
    /// For a sub-agent's first call: the call that spawned it.
    spawned_by: Option<usize>,
    /// Its output line, for the note on long delays.
    line: u64,
}

/// Seconds to whole ms: the files give `t` to the ms and think times in s.
fn ms(s: f64) -> f64 {
    (s * 1000.0).round()
}

impl Weka {
    pub fn new(args: &ImportArgs) -> Self {
        let gap_ms = match (args.session_gap, args.session_rate) {
            (Some(g), _) => g,
            (None, Some(r)) => 1000.0 / r,
            (None, None) => 0.0,
        };
        Weka {
            gap_ms,
            graph: args.sub_agents == SubAgents::Graph,
            block_size: args.block_size,
            file_block: None,
            files: args.inputs().cloned().collect(),
            sessions: 0,
            ids: Renumber::default(),
            texts: Vec::new(),
            tails: 0,
            cut: 0,
            names: HashMap::new(),
            renamed: 0,
            long: crate::delays::LongDelays::default(),
        }
    }

    /// How the sessions' starts were placed on the common timeline.
    fn placement(&self) -> String {
        let n = self.sessions;
        if self.gap_ms == 0.0 {
            format!(
                "{n} session{} all start at 0 ms (--session-gap MS or --session-rate R spreads them)",
                if n == 1 { "" } else { "s" }
            )
        } else {
            format!(
                "{n} session{} start {} ms apart (session k at k × {} ms)",
                if n == 1 { "" } else { "s" },
                self.gap_ms,
                self.gap_ms
            )
        }
    }

    /// Reads the calls of one chain (a session, or a sub-agent inside it)
    /// into `calls`, in file order, sub-agents where they appear; the
    /// chain's calls and their ids are checked as they are met.
    fn collect(
        &mut self,
        reqs: &[WekaRequest],
        chain: &Chain<'_>,
        b: u64,
        path: &str,
        calls: &mut Vec<Call>,
        rows_before: u64,
    ) -> std::result::Result<(), RecordError> {
        let mut prev: Option<&WekaRequest> = None;
        // This chain's previous call (index into `calls`), and the
        // sub-agents it started that no later call of it has joined yet:
        // (their last call, when that call ended).
        let mut prev_call: Option<usize> = None;
        let mut open: Vec<(usize, f64)> = Vec::new();
        let mut subs = 0usize;
        for (k, r) in reqs.iter().enumerate() {
            let at = format!("{path}[{k}]");
            if r.kind.as_deref() == Some("subagent") {
                subs += 1;
                let spawner = prev_call.or(chain.spawner);
                let sub = (r, subs, spawner);
                if let Some(last) = self.collect_subagent(sub, chain, b, &at, calls, rows_before)? {
                    open.push(last);
                }
                continue;
            }
            let (input, output, ts, delay) = checked_call(r, prev, chain.start_ms, &at)?;
            let from = self.texts.len();
            let fitted = self.ids.row(&r.hash_ids, input, b, &mut self.texts);
            self.tails += u64::from(fitted.tail);
            self.cut += u64::from(fitted.cut);
            let end_ms = ts + ms(r.api_time.unwrap_or(0.0)).max(0.0);
            let mut wait_for = Vec::new();
            let mut graph_delay = delay;
            if let Some(p) = prev_call {
                wait_for.push(p);
                graph_delay = join_ended(&mut open, ts, delay, &mut wait_for);
            }
            let spawned_by = if prev_call.is_none() {
                chain.spawner
            } else {
                None
            };
            if let Some(sp) = spawned_by {
                // A sub-agent's first call: released when its spawner ends
                // and the recorded gap after it has passed.
                graph_delay = Some((ts - calls[sp].end_ms).max(0.0));
            }
            calls.push(Call {
                session: chain.session.to_string(),
                parent: chain.parent.map(str::to_string),
                agent: chain.agent.clone(),
                ts_ms: ts,
                end_ms,
                delay,
                graph_delay,
                input,
                output,
                ids: from..self.texts.len(),
                wait_for,
                spawned_by,
                line: rows_before + calls.len() as u64 + 1,
            });
            prev_call = Some(calls.len() - 1);
            prev = Some(r);
        }
        Ok(())
    }

    /// Reads the sub-agent entry `r` (the `subs`-th of `chain`, started by
    /// `spawner`) at `at` into `calls`, and returns its last call and that
    /// call's end: the first later call of `chain` that starts after it
    /// joins it.
    fn collect_subagent(
        &mut self,
        (r, subs, spawner): (&WekaRequest, usize, Option<usize>),
        chain: &Chain<'_>,
        b: u64,
        at: &str,
        calls: &mut Vec<Call>,
        rows_before: u64,
    ) -> std::result::Result<Option<(usize, f64)>, RecordError> {
        let Some(inner) = &r.requests else {
            return Err(RecordError::new(format!(
                "{at}: a sub-agent without `requests`"
            )));
        };
        let agent = r
            .agent_id
            .clone()
            .unwrap_or_else(|| format!("subagent{subs}"));
        let name = format!("{}/{agent}", chain.session);
        let start_ms = crate::limits::time_ms(&format!("{at}.t"), ms(r.t))
            .and_then(|t| crate::limits::time_ms(&format!("{at}.t"), chain.start_ms + t))?;
        let sub = Chain {
            session: &name,
            parent: Some(chain.session),
            agent: Some(agent),
            start_ms,
            // Spawned by this chain's latest call, or, before any, by
            // whatever spawned this chain.
            spawner,
        };
        let first = calls.len();
        self.collect(
            inner,
            &sub,
            b,
            &format!("{at}.requests"),
            calls,
            rows_before,
        )?;
        if calls.len() == first {
            return Ok(None);
        }
        let last = calls
            .iter()
            .rposition(|c| c.session == name)
            .unwrap_or(calls.len() - 1);
        Ok(Some((last, calls[last].end_ms)))
    }

    /// Writes one session's calls: as sessions (each sub-agent a session
    /// of its own with `parent_session_id`), or as one agent graph.
    fn write(&mut self, calls: &[Call], name: &str, sink: &mut Sink) -> Result<()> {
        let graph = self.graph && calls.iter().any(|c| c.agent.is_some());
        let id = |k: usize| format!("{name}.{k}");
        let mut branches: Vec<Vec<String>> = vec![Vec::new(); calls.len()];
        if graph {
            for (k, c) in calls.iter().enumerate() {
                if let Some(sp) = c.spawned_by {
                    branches[sp].push(id(k));
                }
            }
        }
        for (k, c) in calls.iter().enumerate() {
            let delay = if graph { c.graph_delay } else { c.delay };
            if let Some(d) = delay {
                self.long.observe(c.line, d);
            }
            let ids = &self.texts[c.ids.clone()];
            sink.row(|w| {
                // Whole ms (see `ms`), written as integers; a chain's
                // first call has a timestamp (in a graph: unless a
                // spawner releases it), later ones a delay.
                if delay.is_none() {
                    w.timestamp(Number::Int(c.ts_ms as i64));
                }
                w.session_id(if graph { name } else { c.session.as_str() });
                if let Some(d) = delay {
                    w.delay(Number::Int(d as i64));
                }
                w.input_length(c.input);
                w.output_length(c.output);
                // The array's text, made by `Renumber::row` (`RowWriter`
                // has no method for an id array already written):
                // `hash_ids` is the last field before the extras, so the
                // row is the one `w.hash_ids` writes.
                w.extra_raw("hash_ids", ids);
                if graph {
                    w.extra_str("request_id", &id(k));
                    for (field, list) in [
                        ("wait_for", c.wait_for.iter().map(|&j| id(j)).collect()),
                        ("branches", branches[k].clone()),
                    ] {
                        let list: Vec<String> = list;
                        if !list.is_empty() {
                            w.extra_str_list(field, &list);
                        }
                    }
                    // A sub-agent starts with its own prompt, not the
                    // parent's history.
                    if c.agent.is_some() && c.wait_for.is_empty() {
                        w.extra_raw("prefix_reset", b"true");
                    }
                    if let Some(a) = &c.agent {
                        w.extra_str("agent_id", a);
                    }
                } else if let Some(p) = &c.parent {
                    w.extra_str("parent_session_id", p);
                }
            })?;
        }
        Ok(())
    }

    /// Checks that session `name`'s block size `b` is --block-size's and
    /// every earlier session's: one trace needs one block size.
    fn check_block_size(&mut self, b: u64, name: &str) -> Result<()> {
        match (&self.file_block, self.block_size) {
            (_, Some(want)) if want != b => {
                return Err(Error::Input(format!(
                    "session `{name}` has block_size {b}, not --block-size {want} (weka keeps the file's block size)"
                )))
            }
            (Some((seen, first)), _) if *seen != b => {
                return Err(Error::Input(format!(
                    "session `{name}` has block_size {b}, but `{first}` has {seen}: one trace needs one block size"
                )))
            }
            (Some(_), _) => {}
            (None, _) => self.file_block = Some((b, name.to_string())),
        }
        Ok(())
    }

    /// The same id in another file (or the same file twice) is another
    /// session, kept apart under the first free `<id>#<input no.>`.
    fn unique_name(&mut self, name: &str, file_no: usize) -> String {
        let base = format!("{name}#{}", file_no + 1);
        let mut unique = base.clone();
        let mut n = 1;
        while self.names.contains_key(&unique) {
            n += 1;
            unique = format!("{base}.{n}");
        }
        self.renamed += 1;
        unique
    }

    fn one(
        &mut self,
        s: &Session,
        file_no: usize,
        sink: &mut Sink,
    ) -> Result<std::result::Result<(), RecordError>> {
        let Some(b) = s.block_size.filter(|&b| b > 0) else {
            return Ok(Err(RecordError::field(
                "block_size",
                "missing or 0: the file must say its block size",
            )));
        };
        let mut name = s.id.clone().unwrap_or_else(|| {
            self.files
                .get(file_no)
                .and_then(|p| p.file_stem())
                .map_or_else(
                    || format!("session{}", self.sessions),
                    |n| n.to_string_lossy().into_owned(),
                )
        });
        self.check_block_size(b, &name)?;
        if self.names.get(&name).is_some_and(|&f| f != file_no) {
            name = self.unique_name(&name, file_no);
        }
        self.names.insert(name.clone(), file_no);
        if s.hash_id_scope.as_deref() != Some("global") {
            self.ids.clear();
        }
        self.texts.clear();
        let start_ms = if self.sessions == 0 {
            0.0
        } else {
            self.sessions as f64 * self.gap_ms
        };
        if !(0.0..=crate::limits::MAX_TIME_MS).contains(&start_ms) {
            return Err(Error::Usage(format!(
                "session {} (`{name}`) would start at {start_ms:e} ms, beyond the limit of 2^53 ms: \
                 lower --session-gap or raise --session-rate",
                self.sessions + 1
            )));
        }
        let at = Chain {
            session: &name,
            parent: None,
            agent: None,
            start_ms,
            spawner: None,
        };
        self.sessions += 1;
        let mut calls = Vec::new();
        let rows_before = sink.counts.rows_out;
        if let Err(e) = self.collect(&s.requests, &at, b, "requests", &mut calls, rows_before) {
            return Ok(Err(e));
        }
        sink.counts.rows_in += calls.len() as u64;
        self.write(&calls, &name, sink)?;
        Ok(Ok(()))
    }
}

/// The checked lengths, start (ms on the common timeline) and delay
/// after `prev` of the request `r` at `at` in a chain starting at
/// `start_ms`.
fn checked_call(
    r: &WekaRequest,
    prev: Option<&WekaRequest>,
    start_ms: f64,
    at: &str,
) -> std::result::Result<(u64, u64, f64, Option<f64>), RecordError> {
    let (Some(input), Some(output)) = (r.input, r.out) else {
        return Err(RecordError::new(format!(
            "{at}: a request needs `in` and `out`"
        )));
    };
    let field = |f: &str| format!("{at}.{f}");
    let ts = crate::limits::tokens(&field("in"), input)
        .and_then(|_| crate::limits::tokens(&field("out"), output))
        .and_then(|_| crate::limits::time_ms(&field("t"), ms(r.t)))
        .and_then(|t| crate::limits::time_ms(&field("t"), start_ms + t))?;
    let delay = prev.map(|p| match r.think_time {
        Some(th) => ms(th),
        // Without a think time: the gap between the two
        // requests, less the previous one's service time.
        None => (ms(r.t) - ms(p.t) - ms(p.api_time.unwrap_or(0.0))).max(0.0),
    });
    if delay.is_some_and(|d| !d.is_finite() || d < 0.0) {
        return Err(RecordError::new(format!(
            "{at}: `think_time` must be at least 0"
        )));
    }
    if let Some(d) = delay {
        crate::limits::time_ms(&field("think_time"), d)?;
    }
    Ok((input, output, ts, delay))
}

/// The graph's join edges of a call starting at `ts`: the sub-agents in
/// `open` that ended by then are taken out and added to `wait_for` (the
/// first call of the chain after a sub-agent's end joins it). Returns
/// the call's delay in the graph.
fn join_ended(
    open: &mut Vec<(usize, f64)>,
    ts: f64,
    delay: Option<f64>,
    wait_for: &mut Vec<usize>,
) -> Option<f64> {
    let joined: Vec<(usize, f64)> = open.iter().copied().filter(|&(_, end)| end <= ts).collect();
    open.retain(|&(_, end)| end > ts);
    let mut graph_delay = delay;
    if let Some(latest) = joined.iter().map(|j| j.1).reduce(f64::max) {
        // Released at the latest end of what it waits for plus the delay:
        // the recorded start, so the delay is the smaller of the think
        // time and the gap after the sub-agent's end.
        graph_delay = delay.map(|d| d.min(ts - latest).max(0.0));
    }
    wait_for.extend(joined.into_iter().map(|j| j.0));
    graph_delay
}

/// The 1-based line of byte `offset` in `bytes`.
fn line_at(bytes: &[u8], offset: usize) -> u64 {
    1 + memchr::memchr_iter(b'\n', &bytes[..offset.min(bytes.len())]).count() as u64
}

impl Importer for Weka {
    fn file(&mut self, src: Box<dyn Read + Send>, file_no: usize, sink: &mut Sink) -> Result<()> {
        // A session is one JSON object (usually the whole file), so there
        // is nothing to stream; reading it whole lets messages name lines.
        let bytes = super::read_document(src)?;
        let body = &bytes[..];
        if let Some(docs) = scan::documents(body) {
            for (first, s) in docs {
                if let Err(e) = self.one(&s, file_no, sink)? {
                    sink.bad(line_at(body, first), e)?;
                }
            }
            return Ok(());
        }
        // Off the files' shape: serde reads it, and names what is wrong.
        let mut stream = serde_json::Deserializer::from_slice(body).into_iter::<Session>();
        loop {
            let start = stream.byte_offset();
            let s = match stream.next() {
                None => return Ok(()),
                Some(Ok(s)) => s,
                Some(Err(e)) => {
                    // serde_json counts lines from the start of the slice.
                    let err = RecordError::new(format!(
                        "column {}: {}",
                        e.column(),
                        crate::nat::reader::error_text(&e)
                    ));
                    // The rest of the file cannot be read after a syntax error.
                    return sink.bad(e.line() as u64, err);
                }
            };
            let first = start
                + body[start..]
                    .iter()
                    .take_while(|b| b.is_ascii_whitespace())
                    .count();
            if let Err(e) = self.one(&s, file_no, sink)? {
                sink.bad(line_at(body, first), e)?;
            }
        }
    }

    fn finish(&mut self, _sink: &mut Sink) -> Result<()> {
        if let Some((b, _)) = &self.file_block {
            let mut note =
                format!("mc-import: weka: block size {b} (use --block-size {b} downstream)");
            if self.tails > 0 {
                note.push_str(&format!(
                    "; {} rows had no id for their partial last block and got a fresh one",
                    self.tails
                ));
            }
            if self.cut > 0 {
                note.push_str(&format!(
                    "; {} rows had more ids than blocks and were cut",
                    self.cut
                ));
            }
            if self.renamed > 0 {
                note.push_str(&format!(
                    "; {} sessions had an id an earlier input already used and were kept apart as `<id>#<input no.>`",
                    self.renamed
                ));
            }
            eprintln!("{note}");
            eprintln!("mc-import: weka: {}", self.placement());
            if let Some(note) = self.long.note() {
                eprintln!("mc-import: weka: note: {note} (line numbers are the output's)");
            }
        }
        Ok(())
    }
}
