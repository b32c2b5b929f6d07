//! What a task's graph looks like, for mc-analyze: a task is a graph
//! session (a session with a `request_id` on some row). A trace holds no
//! call durations, so the timing facts are stated for given durations:
//! mc-analyze passes none (every call takes no time), which makes the
//! critical path the longest chain of think + tool time.

use super::{Graphs, RowIndex, RowKind};

/// One task's shape and waits.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskFacts {
    /// The session's index ([`Graphs::session_id`] names it); `None`: the
    /// calls without `session_id`, one task among themselves.
    pub session: Option<u32>,
    pub calls: u32,
    /// Calls without dependencies.
    pub roots: u32,
    /// The most calls waiting for one call.
    pub max_fan_out: u32,
    /// Calls on the longest chain of dependencies.
    pub depth: u32,
    /// The most calls at one depth: how many run at once when every call
    /// takes the same time and nobody thinks or waits for a tool.
    pub widest: u32,
    /// The longest chain of gap + duration (the release rule's
    /// `delay` + `tool_wait_ms`, see [`Graphs::gap_ms`]), ms.
    pub critical_path_ms: f64,
    /// Gap + duration summed over the task's calls, ms.
    pub total_ms: f64,
    /// `delay` summed over the calls that wait for something, ms.
    pub think_ms: f64,
    /// `tool_wait_ms` summed, ms.
    pub tool_ms: f64,
}

impl TaskFacts {
    /// The critical path's share of the task's time: 1 for a chain, 1/k
    /// for k equal branches; `None` when the task has no time at all.
    pub fn critical_share(&self) -> Option<f64> {
        (self.total_ms > 0.0).then(|| self.critical_path_ms / self.total_ms)
    }
}

impl Graphs {
    /// Depth of every row in the order (1 for a row without
    /// dependencies); 0 for rows left out of the order.
    pub fn depths(&self) -> Vec<u32> {
        let mut depth = vec![0u32; self.len()];
        for &r in self.order() {
            let r = r as usize;
            depth[r] = 1 + self
                .deps(r)
                .iter()
                .map(|&d| depth[d as usize])
                .max()
                .unwrap_or(0);
        }
        depth
    }

    /// The facts of every graph session, in order of first appearance,
    /// each call taking `duration_ms(r)` (mc-analyze: none).
    pub fn tasks(&self, duration_ms: impl Fn(usize) -> f64) -> Vec<TaskFacts> {
        // One slot per session, and the last for the rows without one
        // (one session among themselves).
        let mut index: Vec<Option<usize>> = vec![None; self.sessions() + 1];
        let mut tasks: Vec<TaskFacts> = Vec::new();
        let depth = self.depths();
        let mut longest = vec![0f64; self.len()];
        // Per task: calls at each depth.
        let mut widths: Vec<Vec<u32>> = Vec::new();
        for &r in self.order() {
            let r = r as usize;
            if self.kind(r) != RowKind::Call {
                continue;
            }
            let s = self.session(r);
            let slot = s.map_or(self.sessions(), |s| s as usize);
            let t = *index[slot].get_or_insert_with(|| {
                tasks.push(TaskFacts {
                    session: s,
                    calls: 0,
                    roots: 0,
                    max_fan_out: 0,
                    depth: 0,
                    widest: 0,
                    critical_path_ms: 0.0,
                    total_ms: 0.0,
                    think_ms: 0.0,
                    tool_ms: 0.0,
                });
                widths.push(Vec::new());
                tasks.len() - 1
            });
            let deps = self.deps(r);
            let own = self.gap_ms(r) + duration_ms(r);
            longest[r] = own
                + deps
                    .iter()
                    .map(|&d| longest[d as usize])
                    .fold(0.0, f64::max);
            let f = &mut tasks[t];
            f.calls += 1;
            f.roots += u32::from(deps.is_empty());
            f.max_fan_out = f.max_fan_out.max(self.dependents(r).len() as u32);
            f.depth = f.depth.max(depth[r]);
            f.critical_path_ms = f.critical_path_ms.max(longest[r]);
            f.total_ms += own;
            if !deps.is_empty() || self.timestamp_ms(r).is_none() {
                f.think_ms += self.delay_ms(r);
                f.tool_ms += self.tool_wait_ms(r);
            }
            let w = &mut widths[t];
            let d = depth[r] as usize;
            if w.len() < d {
                w.resize(d, 0);
            }
            w[d - 1] += 1;
        }
        for (f, w) in tasks.iter_mut().zip(&widths) {
            f.widest = w.iter().copied().max().unwrap_or(0);
        }
        tasks
    }

    /// The most of `rows` in flight at once, given their release and end
    /// times ([`Graphs::schedule`]); a call ending when another starts
    /// does not overlap it.
    pub fn peak_in_flight(rows: &[RowIndex], times: &[(f64, f64)]) -> u32 {
        let mut events: Vec<(f64, i32)> = Vec::with_capacity(rows.len() * 2);
        for &r in rows {
            let (start, end) = times[r as usize];
            if start.is_nan() || end <= start {
                continue;
            }
            events.push((start, 1));
            events.push((end, -1));
        }
        // Ends before starts at the same instant.
        events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let (mut now, mut peak) = (0i32, 0i32);
        for (_, step) in events {
            now += step;
            peak = peak.max(now);
        }
        peak as u32
    }
}
