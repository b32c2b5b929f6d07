//! Agents are graphs (docs/guide/agents.md): a call waits for the calls
//! named in its `wait_for` and for the calls that list it in their
//! `branches`, not for "the previous turn". This module is the one reader
//! and checker of that structure:
//!
//! - [`AgentFields`] reads a row's graph fields (types checked per row);
//! - [`Builder`] takes the rows in file order and, at [`Builder::finish`],
//!   checks the whole trace (unknown ids, duplicate ids, cycles, edges
//!   across sessions, negative delays in a graph) and builds [`Graphs`]:
//!   every row's dependencies as row indices, its dependents, and a
//!   topological order;
//! - [`Graphs::release_ms`] is the release rule, the one place it is
//!   written; [`Graphs::schedule`] applies it to the whole trace given
//!   each call's duration;
//! - `facts` holds what mc-analyze reports per task (session).
//!
//! A plain session (no row with a `request_id`) keeps its meaning: each
//! turn waits for the previous one. [`Graphs`] gives such a turn the
//! previous turn as its one dependency, so a plain session *is* the chain
//! graph t_i waits for t_(i-1), with the same `delay` (tested below).
//!
//! Rows without `session_id` are one session among themselves, Dynamo's
//! rule (its agentic rows' `session_id` is optional), in every tool: an
//! edge between two of them passes, and their calls are one task. Their
//! kinds do not change: a row without session and without graph fields
//! is still no turn of anything.

mod facts;
mod fields;

pub use facts::TaskFacts;
pub use fields::{gap_ms, id_text, write_prefixed, AgentFields};

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use crate::error::{Error, RecordError};
use crate::finding::Finding;
use crate::record::{Field, Number, Record};

/// Index of a row: its place among the rows pushed (not its line).
pub type RowIndex = u32;

const NO_SESSION: u32 = u32::MAX;

/// How a row takes part in the trace's dependency structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    /// No session and no graph fields: arrives at its timestamp.
    Single,
    /// A turn of a plain session: waits for the session's previous turn.
    Turn,
    /// A call of a graph session (or a row with graph fields): waits for
    /// its edges only.
    Call,
}

/// A whole-trace check that failed, with the line it is reported on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProblemKind {
    /// A `wait_for`/`branches` id no row has.
    UnknownId,
    /// A `request_id` already used by an earlier row.
    DuplicateId,
    /// Calls that wait for each other.
    Cycle,
    /// An edge to a call of another session (or of a row without one).
    OtherSession,
    /// A negative `delay` on a call of a graph session.
    NegativeDelay,
}

impl ProblemKind {
    /// The lint finding's name.
    pub fn name(self) -> &'static str {
        match self {
            ProblemKind::UnknownId => "graph: unknown request id",
            ProblemKind::DuplicateId => "graph: duplicate request_id",
            ProblemKind::Cycle => "graph: cycle",
            ProblemKind::OtherSession => "graph: edge to another session",
            ProblemKind::NegativeDelay => "graph: negative delay",
        }
    }
}

/// One failed check: the line, what, the field and the fix.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub line: u64,
    /// The input the line is in, when the builder was told of several
    /// ([`Builder::file`]).
    pub file: Option<Arc<str>>,
    /// The row it is reported on: problems are ordered by it.
    pub row: RowIndex,
    pub kind: ProblemKind,
    pub err: RecordError,
}

impl Problem {
    /// The error a tool exits with (65): `line N: ...`, or
    /// `FILE: line N: ...` as tools name a line of one of several inputs.
    pub fn into_error(self) -> Error {
        match self.file {
            None => Error::Data {
                line: self.line,
                err: self.err,
            },
            Some(file) => Error::Input(format!("{file}: line {}: {}", self.line, self.err)),
        }
    }
}

/// Every failed check: counted per kind with their first lines, and the
/// first [`Problems::KEPT`] in full (a broken file must not hold a message
/// per row).
#[derive(Debug, Clone, Default)]
pub struct Problems {
    pub counts: BTreeMap<ProblemKind, Finding>,
    pub first: Vec<Problem>,
    /// The problem on the earliest line (kept even past [`Problems::KEPT`]).
    earliest: Option<Problem>,
}

impl Problems {
    pub const KEPT: usize = 100;

    fn add(&mut self, at: Place, kind: ProblemKind, err: RecordError) {
        self.counts.entry(kind).or_default().add(at.line);
        let p = Problem {
            line: at.line,
            file: at.file,
            row: at.row,
            kind,
            err,
        };
        if self.earliest.as_ref().is_none_or(|e| p.row < e.row) {
            self.earliest = Some(p.clone());
        }
        if self.first.len() < Self::KEPT {
            self.first.push(p);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_empty()
    }

    /// The problem on the earliest row, as the error a tool exits with.
    pub fn first_error(&self) -> Option<Error> {
        self.earliest.clone().map(Problem::into_error)
    }
}

/// Where a problem is: the row, its line and its input when there are
/// several.
struct Place {
    row: RowIndex,
    line: u64,
    file: Option<Arc<str>>,
}

/// What the builder keeps of a row.
#[derive(Debug, Clone)]
struct Row {
    line: u64,
    session: u32,
    /// NaN when the row has none.
    timestamp: f64,
    delay: f64,
    tool_wait: f64,
    graph_fields: bool,
    id: Option<Box<str>>,
}

/// An edge as written, resolved at the end (ids may come later in the file).
struct Pending {
    row: RowIndex,
    target: Box<str>,
    /// True for `branches` (the target waits for `row`).
    branch: bool,
}

/// Rows in file order in, checked [`Graphs`] out.
#[derive(Default)]
pub struct Builder {
    rows: Vec<Row>,
    session_ids: HashMap<Box<[u8]>, u32>,
    /// Per session: its raw id, whether any row has a `request_id`, its
    /// first timestamp (NaN: none).
    sessions: Vec<(Box<[u8]>, bool, f64)>,
    ids: HashMap<Box<str>, RowIndex>,
    pending: Vec<Pending>,
    problems: Problems,
    /// The inputs named by [`Builder::file`]: each with the first row
    /// pushed after it.
    files: Vec<(RowIndex, Arc<str>)>,
}

impl Builder {
    pub fn new() -> Self {
        Self::default()
    }

    /// The rows pushed from now on are lines of the input `name`: a tool
    /// reading several inputs into one trace calls it before each, and
    /// problems name the input with the line (`FILE: line N`).
    pub fn file(&mut self, name: &str) {
        self.files.push((self.rows.len() as RowIndex, name.into()));
    }

    /// Row `r`'s place, its input named when there are several.
    fn place(&self, r: RowIndex) -> Place {
        let file = match self.files.partition_point(|(first, _)| *first <= r) {
            0 => None,
            k => Some(self.files[k - 1].1.clone()),
        };
        // A duplicate id is found while its row is pushed, before it is kept.
        let line = self.rows.get(r as usize).map_or(0, |row| row.line);
        Place { row: r, line, file }
    }

    /// `line N`, or `FILE: line N` when there are several inputs.
    fn place_text(&self, r: RowIndex) -> String {
        let at = self.place(r);
        match at.file {
            None => format!("line {}", at.line),
            Some(f) => format!("{f}: line {}", at.line),
        }
    }

    /// Reads one record's session, timestamp, delay and graph fields.
    /// Per-row type errors come back here (the caller's `--on-error`
    /// decides); whole-trace problems wait for [`Builder::finish`].
    pub fn push_record(&mut self, line: u64, rec: &Record<'_>) -> Result<(), RecordError> {
        let agent = AgentFields::read(rec)?;
        let timestamp = rec.number(Field::Timestamp)?.map(Number::as_f64);
        let delay = rec.number(Field::Delay)?.map(Number::as_f64);
        if delay.is_some_and(|d| !d.is_finite()) {
            return Err(RecordError::field("delay", "must be a finite number of ms"));
        }
        self.push(line, rec.session_id()?, timestamp, delay, agent);
        Ok(())
    }

    /// One row, already read. `session` is the raw JSON of `session_id`
    /// (equal raw values name the same session).
    pub fn push(
        &mut self,
        line: u64,
        session: Option<&[u8]>,
        timestamp: Option<f64>,
        delay: Option<f64>,
        agent: AgentFields,
    ) {
        let index = self.rows.len() as RowIndex;
        let session = match session {
            None => NO_SESSION,
            Some(raw) => match self.session_ids.get(raw) {
                Some(&s) => s,
                None => {
                    let s = self.sessions.len() as u32;
                    self.session_ids.insert(raw.into(), s);
                    self.sessions.push((raw.into(), false, f64::NAN));
                    s
                }
            },
        };
        if session != NO_SESSION {
            let (_, graph, first_ts) = &mut self.sessions[session as usize];
            *graph |= agent.request_id.is_some();
            if first_ts.is_nan() {
                if let Some(t) = timestamp {
                    *first_ts = t;
                }
            }
        }
        let graph_fields = agent.is_graph_row();
        let id: Option<Box<str>> = agent.request_id.map(Into::into);
        if let Some(id) = &id {
            if let Some(&first) = self.ids.get(id) {
                let first_at = self.place_text(first);
                let at = Place {
                    line,
                    ..self.place(index)
                };
                self.problems.add(
                    at,
                    ProblemKind::DuplicateId,
                    RecordError::field(
                        "request_id",
                        format!(
                            "`{id}` is also the id of {first_at}: give each call \
                             its own id"
                        ),
                    ),
                );
            } else {
                self.ids.insert(id.clone(), index);
            }
        }
        for (list, branch) in [(agent.wait_for, false), (agent.branches, true)] {
            for target in list {
                self.pending.push(Pending {
                    row: index,
                    target: target.into(),
                    branch,
                });
            }
        }
        self.rows.push(Row {
            line,
            session,
            timestamp: timestamp.unwrap_or(f64::NAN),
            delay: delay.unwrap_or(0.0),
            tool_wait: agent.tool_wait_ms.unwrap_or(0.0),
            graph_fields,
            id,
        });
    }

    /// Checks the whole trace and builds the structure. With problems the
    /// graphs still come back, without the edges in error and with the
    /// rows on or after a cycle left out of the order (what mc-analyze
    /// reports on); a tool that uses the graph calls [`Builder::check`].
    pub fn finish(mut self) -> (Graphs, Problems) {
        let n = self.rows.len();
        let kind = self.row_kinds();
        self.check_delays(&kind);
        // (dependent, dependency) pairs: the edges, then the plain turns.
        let mut pairs: Vec<(RowIndex, RowIndex)> = std::mem::take(&mut self.pending)
            .into_iter()
            .filter_map(|p| self.resolve(&p))
            .collect();
        self.chain_turns(&kind, &mut pairs);
        pairs.sort_unstable();
        pairs.dedup();
        let deps = Csr::new(n, pairs.iter().copied());
        let dependents = Csr::new(n, pairs.iter().map(|&(a, b)| (b, a)));
        let order = topological_order(&deps, &dependents);
        if order.len() < n {
            self.report_cycles(&deps, &order);
        }
        let t0 = self
            .rows
            .iter()
            .map(|r| r.timestamp)
            .find(|t| !t.is_nan())
            .unwrap_or(0.0);
        let graphs = Graphs {
            session_first_ts: self.sessions.iter().map(|s| s.2).collect(),
            session_ids: self.sessions.into_iter().map(|s| s.0).collect(),
            rows: self.rows,
            kind,
            deps,
            dependents,
            order,
            t0,
        };
        (graphs, self.problems)
    }

    /// Each row's kind: a call when it has graph fields or its session
    /// has, else a turn of its session, else (no session) a single row.
    fn row_kinds(&self) -> Vec<RowKind> {
        self.rows
            .iter()
            .map(|r| {
                if r.graph_fields
                    || (r.session != NO_SESSION && self.sessions[r.session as usize].1)
                {
                    RowKind::Call
                } else if r.session == NO_SESSION {
                    RowKind::Single
                } else {
                    RowKind::Turn
                }
            })
            .collect()
    }

    /// A call's `delay` is its wait after its dependencies: a negative one
    /// is a problem.
    fn check_delays(&mut self, kind: &[RowKind]) {
        for (i, r) in self.rows.iter().enumerate() {
            if kind[i] == RowKind::Call && r.delay < 0.0 {
                self.problems.add(
                    self.place(i as RowIndex),
                    ProblemKind::NegativeDelay,
                    RecordError::field(
                        "delay",
                        format!(
                            "{} ms: a call of an agent graph waits a finite number of ms \
                             at least 0 after its dependencies",
                            r.delay
                        ),
                    ),
                );
            }
        }
    }

    /// The edge `p` as a (dependent, dependency) pair; `None`, with the
    /// problem added, when its target is unknown or of another session.
    fn resolve(&mut self, p: &Pending) -> Option<(RowIndex, RowIndex)> {
        let r = &self.rows[p.row as usize];
        let field = if p.branch { "branches" } else { "wait_for" };
        let Some(&t) = self.ids.get(&p.target) else {
            self.problems.add(
                self.place(p.row),
                ProblemKind::UnknownId,
                RecordError::field(
                    field,
                    format!(
                        "no row has request_id `{}`: add the call, or remove the id \
                         from {field}",
                        p.target
                    ),
                ),
            );
            return None;
        };
        let other = &self.rows[t as usize];
        // Rows without `session_id` are one session among themselves
        // (Dynamo's agentic rows, whose `session_id` is optional): an
        // edge between two of them passes, between one of them and a
        // row with a `session_id` does not.
        if other.session != r.session {
            self.problems.add(
                self.place(p.row),
                ProblemKind::OtherSession,
                RecordError::field(
                    field,
                    format!(
                        "`{}` ({}) is a call of {}, this row of {}: a call waits \
                         only for calls of its own session; give both the same \
                         session_id, or remove the id from {field}",
                        p.target,
                        self.place_text(t),
                        self.session_name(other.session),
                        self.session_name(r.session)
                    ),
                ),
            );
            return None;
        }
        Some(if p.branch { (t, p.row) } else { (p.row, t) })
    }

    /// Session `s` as a message names it.
    fn session_name(&self, s: u32) -> String {
        if s == NO_SESSION {
            "no session".to_string()
        } else {
            format!(
                "session {}",
                String::from_utf8_lossy(&self.sessions[s as usize].0)
            )
        }
    }

    /// Adds a plain session's chain to `pairs`: each turn waits for the
    /// session's previous turn.
    fn chain_turns(&self, kind: &[RowKind], pairs: &mut Vec<(RowIndex, RowIndex)>) {
        let mut last_turn: Vec<Option<RowIndex>> = vec![None; self.sessions.len()];
        for (i, r) in self.rows.iter().enumerate() {
            if kind[i] == RowKind::Turn {
                let s = r.session as usize;
                if let Some(prev) = last_turn[s] {
                    pairs.push((i as RowIndex, prev));
                }
                last_turn[s] = Some(i as RowIndex);
            }
        }
    }

    /// [`Builder::finish`] for a tool: the first problem (earliest line)
    /// is the error, exit 65.
    pub fn check(self) -> Result<Graphs, Error> {
        let (graphs, problems) = self.finish();
        match problems.first_error() {
            Some(e) => Err(e),
            None => Ok(graphs),
        }
    }

    /// Names the ids on each cycle among the rows the order left out: from
    /// each such row, follow a left-out dependency until a row repeats.
    fn report_cycles(&mut self, deps: &Csr, order: &[RowIndex]) {
        let n = self.rows.len();
        let mut ordered = vec![false; n];
        for &r in order {
            ordered[r as usize] = true;
        }
        // 0: not visited, 1: on the current walk, 2: done.
        let mut state = vec![0u8; n];
        for start in 0..n {
            if ordered[start] || state[start] != 0 {
                continue;
            }
            let mut walk = vec![start];
            state[start] = 1;
            let cycle_at = loop {
                let here = *walk.last().unwrap_or(&start);
                // A left-out row always has a left-out dependency.
                let Some(&next) = deps.of(here).iter().find(|&&d| !ordered[d as usize]) else {
                    break None;
                };
                let next = next as usize;
                match state[next] {
                    1 => break walk.iter().position(|&w| w == next),
                    2 => break None,
                    _ => {
                        state[next] = 1;
                        walk.push(next);
                    }
                }
            };
            if let Some(at) = cycle_at {
                // The walk goes from a call to what it waits for: reversed,
                // the cycle reads in the order the calls run.
                let mut cycle: Vec<usize> = walk[at..].to_vec();
                cycle.reverse();
                // Named from its earliest row, so the message is stable.
                let earliest = (0..cycle.len()).min_by_key(|&k| cycle[k]).unwrap_or(0);
                cycle.rotate_left(earliest);
                let name = |r: usize| match &self.rows[r].id {
                    Some(id) => format!("`{id}`"),
                    None => format!("line {}", self.rows[r].line),
                };
                let mut text: Vec<String> = cycle.iter().map(|&r| name(r)).collect();
                text.push(name(cycle[0]));
                let first = cycle[0];
                let mut rows: Vec<usize> = cycle.clone();
                rows.sort_unstable();
                rows.dedup();
                let lines = if self.files.is_empty() {
                    let lines: Vec<String> = rows
                        .iter()
                        .map(|&r| self.rows[r].line.to_string())
                        .collect();
                    format!("lines {}", lines.join(", "))
                } else {
                    let places: Vec<String> = rows
                        .iter()
                        .map(|&r| self.place_text(r as RowIndex))
                        .collect();
                    places.join(", ")
                };
                self.problems.add(
                    self.place(first as RowIndex),
                    ProblemKind::Cycle,
                    RecordError::new(format!(
                        "fields `wait_for`/`branches`: the calls {} wait for each other \
                         (a cycle, {lines}): remove one of these edges",
                        text.join(" → "),
                    )),
                );
            }
            for w in walk {
                state[w] = 2;
            }
        }
    }
}

/// Adjacency lists in one array: the list of row `r` is
/// `items[start[r]..start[r + 1]]`.
#[derive(Debug, Clone, Default)]
struct Csr {
    start: Vec<u32>,
    items: Vec<RowIndex>,
}

impl Csr {
    /// From (row, item) pairs, any order.
    fn new(n: usize, pairs: impl Iterator<Item = (RowIndex, RowIndex)> + Clone) -> Csr {
        let mut start = vec![0u32; n + 1];
        for (a, _) in pairs.clone() {
            start[a as usize + 1] += 1;
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut items = vec![0; start[n] as usize];
        for (a, b) in pairs {
            items[fill[a as usize] as usize] = b;
            fill[a as usize] += 1;
        }
        Csr { start, items }
    }

    fn of(&self, r: usize) -> &[RowIndex] {
        &self.items[self.start[r] as usize..self.start[r + 1] as usize]
    }
}

/// Kahn's order, ready rows taken in file order of their becoming ready;
/// rows on or after a cycle are left out.
fn topological_order(deps: &Csr, dependents: &Csr) -> Vec<RowIndex> {
    let n = deps.start.len() - 1;
    let mut waiting: Vec<u32> = (0..n).map(|r| deps.of(r).len() as u32).collect();
    let mut ready: VecDeque<RowIndex> = (0..n as RowIndex)
        .filter(|&r| waiting[r as usize] == 0)
        .collect();
    let mut order = Vec::with_capacity(n);
    while let Some(r) = ready.pop_front() {
        order.push(r);
        for &d in dependents.of(r as usize) {
            waiting[d as usize] -= 1;
            if waiting[d as usize] == 0 {
                ready.push_back(d);
            }
        }
    }
    order
}

/// The trace's dependency structure, rows indexed as pushed.
#[derive(Debug, Clone)]
pub struct Graphs {
    rows: Vec<Row>,
    kind: Vec<RowKind>,
    deps: Csr,
    dependents: Csr,
    order: Vec<RowIndex>,
    session_ids: Vec<Box<[u8]>>,
    session_first_ts: Vec<f64>,
    /// The trace's first timestamp (0 when no row has one).
    t0: f64,
}

impl Graphs {
    /// Builds and checks the structure of `rows` (line numbers from 1):
    /// for tests and small traces in memory.
    pub fn from_lines(text: &str) -> Result<Graphs, Error> {
        let mut b = Builder::new();
        for (i, line) in text.lines().enumerate() {
            let line_no = i as u64 + 1;
            let rec =
                Record::parse(line.as_bytes()).map_err(|err| Error::Data { line: line_no, err })?;
            b.push_record(line_no, &rec)
                .map_err(|err| Error::Data { line: line_no, err })?;
        }
        b.check()
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The input line of row `r`.
    pub fn line(&self, r: usize) -> u64 {
        self.rows[r].line
    }

    pub fn kind(&self, r: usize) -> RowKind {
        self.kind[r]
    }

    /// The row's `request_id`.
    pub fn request_id(&self, r: usize) -> Option<&str> {
        self.rows[r].id.as_deref()
    }

    /// The row's session as an index (first seen first), `None` without
    /// `session_id`.
    pub fn session(&self, r: usize) -> Option<u32> {
        let s = self.rows[r].session;
        (s != NO_SESSION).then_some(s)
    }

    /// A session's raw `session_id` JSON.
    pub fn session_id(&self, s: u32) -> &[u8] {
        &self.session_ids[s as usize]
    }

    pub fn sessions(&self) -> usize {
        self.session_ids.len()
    }

    /// The rows row `r` waits for (sorted, each once): its `wait_for`, the
    /// rows listing it in `branches`, or, for a plain turn, the previous
    /// turn.
    pub fn deps(&self, r: usize) -> &[RowIndex] {
        self.deps.of(r)
    }

    /// The rows that wait for row `r` (sorted, each once).
    pub fn dependents(&self, r: usize) -> &[RowIndex] {
        self.dependents.of(r)
    }

    /// Every row, each after its dependencies (all rows when the checks
    /// passed).
    pub fn order(&self) -> &[RowIndex] {
        &self.order
    }

    /// `delay`, ms (0 when absent).
    pub fn delay_ms(&self, r: usize) -> f64 {
        self.rows[r].delay
    }

    /// `tool_wait_ms` (0 when absent).
    pub fn tool_wait_ms(&self, r: usize) -> f64 {
        self.rows[r].tool_wait
    }

    /// `timestamp`, ms.
    pub fn timestamp_ms(&self, r: usize) -> Option<f64> {
        let t = self.rows[r].timestamp;
        (!t.is_nan()).then_some(t)
    }

    /// Where a row without dependencies and without a timestamp counts its
    /// delay from: its session's first timestamp, else the trace's.
    fn origin_ms(&self, r: usize) -> f64 {
        let s = self.rows[r].session;
        match self.session_first_ts.get(s as usize) {
            Some(t) if !t.is_nan() => *t,
            _ => self.t0,
        }
    }

    /// The time the release rule adds to the row's start point: `delay` +
    /// `tool_wait_ms` after its dependencies (or after its session's first
    /// timestamp, for a root without a timestamp); 0 for a root with a
    /// timestamp.
    pub fn gap_ms(&self, r: usize) -> f64 {
        let row = &self.rows[r];
        if self.deps(r).is_empty() && !row.timestamp.is_nan() {
            0.0
        } else {
            row.delay + row.tool_wait
        }
    }

    /// The release rule, the one place it is written: a row with
    /// dependencies is released at the latest end of its dependencies plus
    /// `delay` plus `tool_wait_ms`; a row without (a root, a plain
    /// session's first turn, a row without session) at its `timestamp`,
    /// else at its session's first timestamp (the trace's, when the session
    /// has none) plus `delay` plus `tool_wait_ms`. `end_ms(d)` is when
    /// dependency `d` ended; only rows in [`Graphs::deps`] are asked.
    pub fn release_ms(&self, r: usize, end_ms: impl Fn(usize) -> f64) -> f64 {
        let deps = self.deps(r);
        let start = if deps.is_empty() {
            let t = self.rows[r].timestamp;
            if !t.is_nan() {
                return t;
            }
            self.origin_ms(r)
        } else {
            deps.iter()
                .map(|&d| end_ms(d as usize))
                .fold(f64::NEG_INFINITY, f64::max)
        };
        start + self.gap_ms(r)
    }

    /// Release and end of every row by the release rule, each call taking
    /// `duration_ms(r)`; rows left out of the order (a cycle) are NaN.
    pub fn schedule(&self, duration_ms: impl Fn(usize) -> f64) -> Vec<(f64, f64)> {
        let mut times = vec![(f64::NAN, f64::NAN); self.len()];
        for &r in &self.order {
            let r = r as usize;
            let release = self.release_ms(r, |d| times[d].1);
            times[r] = (release, release + duration_ms(r));
        }
        times
    }
}

#[cfg(test)]
mod tests;
