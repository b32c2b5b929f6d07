//! The summary's task section: how the agent-graph tasks of a run went,
//! from result lines only (a task is a session whose lines carry a
//! `call_id` or a `wait_for`; docs/guide/agents.md, "Replay").
//!
//! Per task:
//! - makespan: the first send to the last end;
//! - the critical path as measured: from the call that ended last, back
//!   through the dependency that ended last (the one whose end released
//!   the call), to a call that waited for nothing; its time split into
//!   LLM time (send to end), client wait (due to send: lag, a concurrency
//!   slot), think time and tool time (the gaps the schedule applied);
//! - the critical path's share of the task's time (LLM, wait, think and
//!   tool time over all its calls): 1 for a chain, 1/k for k equal
//!   branches (the measured [`crate::graph::TaskFacts::critical_share`]);
//! - parallelism: the most calls in flight at once (send to end), and the
//!   most the graph's own timing implies: the release rule
//!   ([`crate::graph::Graphs::schedule`]) with each call taking its
//!   measured time and no client wait. Achieved below recorded means the
//!   client (or `--concurrency`) held calls back.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::line::round_us;
use super::tally::{Dist, Stats, TaskTally};
use crate::graph::{AgentFields, Builder, Graphs, RowIndex};

/// The summary's task section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TaskSummary {
    /// Tasks with at least one measured call.
    pub tasks: u64,
    pub calls: u64,
    /// Tasks with a failed call.
    pub tasks_with_failed_call: u64,
    /// First send to last end, per task, ms.
    pub makespan: Option<Stats>,
    /// The critical path's share of its task's time, averaged over tasks.
    pub critical_path_share: f64,
    /// The critical paths' time, summed over tasks, by kind, ms.
    pub critical_path_ms: PathSplit,
    pub parallelism: Parallelism,
}

/// A span of time by what it was spent on, ms.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PathSplit {
    /// Calls running: send to end.
    pub llm: f64,
    /// Calls due but not yet sent (schedule lag, a concurrency slot).
    pub wait: f64,
    /// `delay` before calls, as applied.
    pub think: f64,
    /// `tool_wait_ms` before calls, as applied.
    pub tool: f64,
}

impl PathSplit {
    pub fn total(&self) -> f64 {
        self.llm + self.wait + self.think + self.tool
    }
}

/// Peak calls in flight per task: achieved in the run and implied by the
/// graph's timing.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Parallelism {
    pub achieved_mean: f64,
    pub achieved_max: u32,
    pub recorded_mean: f64,
    pub recorded_max: u32,
    /// Tasks whose achieved peak is below their recorded one.
    pub tasks_below_recorded: u64,
}

impl TaskTally {
    /// The task section; `None` when the run had no graph calls.
    pub fn summary(&self) -> Option<TaskSummary> {
        if self.calls.is_empty() {
            return None;
        }
        // Tasks in order of first appearance, each its calls' indices.
        let mut index: HashMap<Option<&str>, usize> = HashMap::new();
        let mut tasks: Vec<Vec<usize>> = Vec::new();
        for (i, c) in self.calls.iter().enumerate() {
            let t = *index.entry(c.session.as_deref()).or_insert_with(|| {
                tasks.push(Vec::new());
                tasks.len() - 1
            });
            tasks[t].push(i);
        }
        let recorded = self.recorded_peaks(&tasks);
        let mut makespan = Dist::default();
        let mut split = PathSplit::default();
        let (mut share_sum, mut failed) = (0.0, 0u64);
        let mut par = Parallelism::default();
        for (calls, &rec) in tasks.iter().zip(&recorded) {
            let first = calls.iter().map(|&i| self.calls[i].send_us).min();
            let last = calls.iter().map(|&i| self.calls[i].end_us).max();
            if let (Some(f), Some(l)) = (first, last) {
                makespan.add(l.saturating_sub(f));
            }
            failed += u64::from(calls.iter().any(|&i| !self.calls[i].ok));
            let path = self.critical_path(calls);
            let all: f64 = calls.iter().map(|&i| self.own(i).total()).sum();
            if all > 0.0 {
                share_sum += path.total() / all;
            }
            split.llm += path.llm;
            split.wait += path.wait;
            split.think += path.think;
            split.tool += path.tool;
            let achieved = Graphs::peak_in_flight(
                &(0..calls.len() as RowIndex).collect::<Vec<_>>(),
                &calls
                    .iter()
                    .map(|&i| (self.calls[i].send_us as f64, self.calls[i].end_us as f64))
                    .collect::<Vec<_>>(),
            );
            par.achieved_mean += f64::from(achieved);
            par.achieved_max = par.achieved_max.max(achieved);
            par.recorded_mean += f64::from(rec);
            par.recorded_max = par.recorded_max.max(rec);
            par.tasks_below_recorded += u64::from(achieved < rec);
        }
        let n = tasks.len() as f64;
        par.achieved_mean = round3(par.achieved_mean / n);
        par.recorded_mean = round3(par.recorded_mean / n);
        Some(TaskSummary {
            tasks: tasks.len() as u64,
            calls: self.calls.len() as u64,
            tasks_with_failed_call: failed,
            makespan: makespan.stats(),
            critical_path_share: round3(share_sum / n),
            critical_path_ms: PathSplit {
                llm: round_us(split.llm),
                wait: round_us(split.wait),
                think: round_us(split.think),
                tool: round_us(split.tool),
            },
            parallelism: par,
        })
    }

    /// Call `i`'s own time by kind, ms.
    fn own(&self, i: usize) -> PathSplit {
        let c = &self.calls[i];
        let ms = |us: u64| us as f64 / 1000.0;
        PathSplit {
            llm: ms(c.end_us.saturating_sub(c.send_us)),
            wait: ms(c.send_us.saturating_sub(c.sched_us)),
            think: ms(c.think_us),
            tool: ms(c.tool_us),
        }
    }

    /// The measured critical path of one task: from the call that ended
    /// last, back through the dependency that ended last.
    fn critical_path(&self, calls: &[usize]) -> PathSplit {
        let by_id: HashMap<&str, usize> = calls
            .iter()
            .filter_map(|&i| Some((self.calls[i].id.as_deref()?, i)))
            .collect();
        let Some(mut at) = calls.iter().copied().max_by_key(|&i| self.calls[i].end_us) else {
            return PathSplit::default();
        };
        let mut path = PathSplit::default();
        // Each step goes to a call that ended before this one was due, so
        // the walk ends; the bound only guards a hand-edited file.
        for _ in 0..calls.len() {
            let own = self.own(at);
            path.llm += own.llm;
            path.wait += own.wait;
            path.think += own.think;
            path.tool += own.tool;
            let next = self.calls[at]
                .wait_for
                .iter()
                .filter_map(|w| by_id.get(w.as_str()).copied())
                .max_by_key(|&d| self.calls[d].end_us);
            match next {
                Some(d) => at = d,
                None => break,
            }
        }
        path
    }

    /// Per task, the peak in flight the graph's timing implies: the
    /// graph rebuilt from the lines (a call's `wait_for`, its think and
    /// tool time as `delay` and `tool_wait_ms`, a call that waited for
    /// nothing at its due time), scheduled by the release rule with each
    /// call taking its measured time.
    fn recorded_peaks(&self, tasks: &[Vec<usize>]) -> Vec<u32> {
        let mut b = Builder::new();
        for (i, c) in self.calls.iter().enumerate() {
            let ms = |us: u64| us as f64 / 1000.0;
            b.push(
                i as u64 + 1,
                c.session.as_deref().map(str::as_bytes),
                c.wait_for.is_empty().then(|| ms(c.sched_us)),
                Some(ms(c.think_us)),
                AgentFields {
                    request_id: c.id.clone(),
                    wait_for: c.wait_for.clone(),
                    tool_wait_ms: Some(ms(c.tool_us)),
                    ..AgentFields::default()
                },
            );
        }
        // A call the run never sent (a limit, a stop) leaves its
        // dependents' edges unknown: they count as released at their task's
        // start, which the graph's problems say and this ignores.
        let (g, _) = b.finish();
        let times = g.schedule(|r| {
            let c = &self.calls[r];
            c.end_us.saturating_sub(c.send_us) as f64 / 1000.0
        });
        tasks
            .iter()
            .map(|calls| {
                let rows: Vec<RowIndex> = calls.iter().map(|&i| i as RowIndex).collect();
                Graphs::peak_in_flight(&rows, &times)
            })
            .collect()
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::RequestResult;

    /// A result line of call `id` of task `s`: due, sent, ended (ms).
    fn line(
        s: &str,
        id: &str,
        wait: &[&str],
        t: (f64, f64, f64),
        gaps: (f64, f64),
    ) -> RequestResult {
        let v = serde_json::json!({
            "line": 1, "session_id": s, "turn": 0, "request_id": "r", "x_request_id": "x",
            "target": "http", "warmup": false, "status": "ok", "http_status": 200,
            "error": null, "t_sched_ms": t.0, "t_send_ms": t.1, "t_first_ms": t.2,
            "t_last_ms": t.2, "t_end_ms": t.2, "lag_ms": t.1 - t.0, "ttft_ms": null,
            "e2e_ms": null, "tpot_ms": null, "sched_latency_ms": null, "chunks": 1,
            "itl_ms": null, "input_tokens": null, "prompt_tokens": null,
            "cached_tokens": null, "output_tokens": null, "completion_tokens": null,
            "tokens_estimated": false, "finish_reason": null, "call_id": id,
            "wait_for": wait, "think_ms": gaps.0, "tool_ms": gaps.1,
        });
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_fan_out_task_by_hand() {
        // r 0-10; a and b released at 10 + 5 tool: a 15-45, b waits 2 ms
        // for a slot (sent 17) and runs to 27; j waits for both, 3 ms
        // think: due 48, runs 48-58.
        let mut t = TaskTally::default();
        t.add(&line("s", "r", &[], (0.0, 0.0, 10.0), (0.0, 0.0)));
        t.add(&line("s", "a", &["r"], (15.0, 15.0, 45.0), (0.0, 5.0)));
        t.add(&line("s", "b", &["r"], (15.0, 17.0, 27.0), (0.0, 5.0)));
        t.add(&line("s", "j", &["a", "b"], (48.0, 48.0, 58.0), (3.0, 0.0)));
        let s = t.summary().unwrap();
        assert_eq!((s.tasks, s.calls, s.tasks_with_failed_call), (1, 4, 0));
        assert_eq!(s.makespan.as_ref().unwrap().max, 58.0);
        // Path j ← a ← r: LLM 10 + 30 + 10, tool 5, think 3.
        assert_eq!(
            s.critical_path_ms,
            PathSplit {
                llm: 50.0,
                wait: 0.0,
                think: 3.0,
                tool: 5.0
            }
        );
        // All calls' time: 50 + 10 (b) + 2 (b's wait) + 5 (b's tool) + 58.
        assert_eq!(s.critical_path_share, round3(58.0 / 75.0));
        // a and b overlapped (15-45, 17-27); the graph's timing has them
        // both at 15 too.
        assert_eq!(
            (s.parallelism.achieved_max, s.parallelism.recorded_max),
            (2, 2)
        );
        assert_eq!(s.parallelism.tasks_below_recorded, 0);
    }

    #[test]
    fn a_serialised_task_is_below_its_recorded_parallelism() {
        // b could start with a at 10, but waited for a slot until 30.
        let mut t = TaskTally::default();
        t.add(&line("s", "r", &[], (0.0, 0.0, 10.0), (0.0, 0.0)));
        t.add(&line("s", "a", &["r"], (10.0, 10.0, 30.0), (0.0, 0.0)));
        t.add(&line("s", "b", &["r"], (10.0, 30.0, 50.0), (0.0, 0.0)));
        let s = t.summary().unwrap();
        assert_eq!(
            (s.parallelism.achieved_max, s.parallelism.recorded_max),
            (1, 2)
        );
        assert_eq!(s.parallelism.tasks_below_recorded, 1);
        // The path ends at b: its 20 ms wait is on it.
        assert_eq!(s.critical_path_ms.wait, 20.0);
    }

    #[test]
    fn lines_without_calls_make_no_section() {
        let mut t = TaskTally::default();
        let mut r = line("s", "r", &[], (0.0, 0.0, 10.0), (0.0, 0.0));
        r.call_id = None;
        t.add(&r);
        assert!(t.summary().is_none());
    }
}
