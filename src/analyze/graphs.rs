//! Agent graphs (docs/guide/agents.md): how many rows are calls of a graph
//! and how many plain session turns, and per task (graph session) its
//! calls, fan-out, depth, critical path and parallelism, through the core
//! `graph`. The whole-trace checks come back as lint findings.
//!
//! A trace holds no call durations, so the timing facts take every call to
//! last no time: the critical path is the longest chain of think + tool
//! time (`delay` + `tool_wait_ms`) through the task, and its share is that
//! over the task's think + tool time summed (1 for a chain, 1/k for k equal
//! branches). Peak parallelism is the widest level of the graph: the most
//! calls in flight at once if every call took the same time and nobody
//! thought or waited for a tool.
//!
//! Memory: only rows with graph fields, and rows of sessions already known
//! as graph sessions, are kept (a plain trace keeps nothing). A row of a
//! graph session that comes before the session's first `request_id` has
//! no edges anyone could name; it is counted as a plain session row and
//! left out of its task.

use std::collections::HashSet;

use serde::Serialize;

use crate::finding::Finding;
use crate::graph::{AgentFields, Builder, ProblemKind};
use crate::stats::Summary;

/// The graph section of the report (`graphs` in `--json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct GraphReport {
    /// Rows with graph fields or in a graph session.
    pub graph_rows: u64,
    /// Turns of plain sessions (each waits for the previous turn).
    pub plain_session_rows: u64,
    /// Graph sessions.
    pub tasks: u64,
    pub calls_per_task: Option<Summary>,
    /// Calls by how many calls wait for them: `fan_out[k]` calls have k
    /// dependents.
    pub fan_out: Vec<u64>,
    pub max_fan_out: u64,
    /// Calls on each task's longest chain.
    pub depth: Option<Summary>,
    /// Per task, the most calls at one depth (see the module's note).
    pub parallelism: Option<Summary>,
    pub peak_parallelism: u64,
    /// Per task, the critical path's share of its think + tool time
    /// (tasks with some).
    pub critical_path_share: Option<Summary>,
    /// Per task, the critical path in ms of think + tool time.
    pub critical_path_ms: Option<Summary>,
    /// `delay` summed over the tasks' calls, ms.
    pub think_ms: f64,
    /// `tool_wait_ms` summed over the tasks' calls, ms.
    pub tool_wait_ms: f64,
    /// Calls with `prefix_reset: true`.
    pub prefix_resets: u64,
    /// The first failed checks in full (line, field and fix).
    pub first_problems: Vec<String>,
}

/// The graph checks as lint findings (`lint.graph_*` in `--json`).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct GraphLint {
    pub graph_unknown_id: Finding,
    pub graph_duplicate_id: Finding,
    pub graph_cycle: Finding,
    pub graph_other_session: Finding,
    pub graph_negative_delay: Finding,
}

impl GraphLint {
    /// The findings with their names, in report order.
    pub fn named(&self) -> [(&'static str, &Finding); 5] {
        let name = ProblemKind::name;
        [
            (name(ProblemKind::UnknownId), &self.graph_unknown_id),
            (name(ProblemKind::DuplicateId), &self.graph_duplicate_id),
            (name(ProblemKind::Cycle), &self.graph_cycle),
            (name(ProblemKind::OtherSession), &self.graph_other_session),
            (name(ProblemKind::NegativeDelay), &self.graph_negative_delay),
        ]
    }

    fn slot(&mut self, kind: ProblemKind) -> &mut Finding {
        match kind {
            ProblemKind::UnknownId => &mut self.graph_unknown_id,
            ProblemKind::DuplicateId => &mut self.graph_duplicate_id,
            ProblemKind::Cycle => &mut self.graph_cycle,
            ProblemKind::OtherSession => &mut self.graph_other_session,
            ProblemKind::NegativeDelay => &mut self.graph_negative_delay,
        }
    }
}

/// How many full problem messages the report keeps.
const FIRST_PROBLEMS: usize = 5;

/// What the first pass gathers about graphs.
#[derive(Default)]
pub struct GraphTracker {
    builder: Builder,
    /// Sessions with a `request_id` on some row seen so far.
    graph_sessions: HashSet<Box<[u8]>>,
    graph_rows: u64,
    graph_rows_in_sessions: u64,
    prefix_resets: u64,
}

impl GraphTracker {
    /// One row, in input order; `agent` is `None` for a row without graph
    /// fields. Inlined, the rest a call: a row without graph fields while
    /// the trace has no graph is nothing to do.
    #[inline]
    pub fn add(
        &mut self,
        line: u64,
        session: Option<&[u8]>,
        timestamp: Option<f64>,
        delay: Option<f64>,
        agent: Option<&AgentFields>,
    ) {
        if agent.is_some() || !self.graph_sessions.is_empty() {
            self.add_any(line, session, timestamp, delay, agent);
        }
    }

    fn add_any(
        &mut self,
        line: u64,
        session: Option<&[u8]>,
        timestamp: Option<f64>,
        delay: Option<f64>,
        agent: Option<&AgentFields>,
    ) {
        let graph_row = agent.is_some_and(AgentFields::is_graph_row);
        // No hashing of session ids while the trace has no graph.
        let in_graph_session = !self.graph_sessions.is_empty()
            && session.is_some_and(|s| self.graph_sessions.contains(s));
        if !graph_row && !in_graph_session {
            return;
        }
        let agent = agent.cloned().unwrap_or_default();
        if let (Some(s), Some(_)) = (session, &agent.request_id) {
            if !in_graph_session {
                self.graph_sessions.insert(s.into());
            }
        }
        self.graph_rows += 1;
        self.graph_rows_in_sessions += u64::from(session.is_some());
        self.prefix_resets += u64::from(agent.prefix_reset);
        self.builder.push(line, session, timestamp, delay, agent);
    }

    /// The section and the lint findings; `rows_in_sessions` is every row
    /// with a `session_id`.
    pub fn finish(self, rows_in_sessions: u64) -> (GraphReport, GraphLint) {
        let (graphs, problems) = self.builder.finish();
        let mut lint = GraphLint::default();
        for (&kind, finding) in &problems.counts {
            *lint.slot(kind) = finding.clone();
        }
        let mut first: Vec<_> = problems.first.iter().collect();
        first.sort_by_key(|p| p.line);
        let first_problems = first
            .iter()
            .take(FIRST_PROBLEMS)
            .map(|p| format!("line {}: {}", p.line, p.err))
            .collect();
        let tasks = graphs.tasks(|_| 0.0);
        let mut fan_out: Vec<u64> = Vec::new();
        for r in 0..graphs.len() {
            // Calls without a session are a task too (one among themselves).
            if graphs.session(r).is_none() && graphs.kind(r) != crate::graph::RowKind::Call {
                continue;
            }
            let k = graphs.dependents(r).len();
            if fan_out.len() <= k {
                fan_out.resize(k + 1, 0);
            }
            fan_out[k] += 1;
        }
        let of = |f: &dyn Fn(&crate::graph::TaskFacts) -> Option<f64>| {
            let mut v: Vec<f64> = tasks.iter().filter_map(f).collect();
            Summary::of(&mut v)
        };
        let report = GraphReport {
            graph_rows: self.graph_rows,
            plain_session_rows: rows_in_sessions.saturating_sub(self.graph_rows_in_sessions),
            tasks: tasks.len() as u64,
            calls_per_task: of(&|t| Some(f64::from(t.calls))),
            max_fan_out: fan_out.len().saturating_sub(1) as u64,
            fan_out,
            depth: of(&|t| Some(f64::from(t.depth))),
            parallelism: of(&|t| Some(f64::from(t.widest))),
            peak_parallelism: tasks.iter().map(|t| u64::from(t.widest)).max().unwrap_or(0),
            critical_path_share: of(&|t| t.critical_share()),
            critical_path_ms: of(&|t| Some(t.critical_path_ms)),
            think_ms: tasks.iter().map(|t| t.think_ms).sum(),
            tool_wait_ms: tasks.iter().map(|t| t.tool_ms).sum(),
            prefix_resets: self.prefix_resets,
            first_problems,
        };
        (report, lint)
    }
}
