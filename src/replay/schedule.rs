//! When each request is sent. One thread owns the schedule: it waits on the
//! target's clock to absolute deadlines (so it never drifts), serialises the
//! turns of each session, releases the calls of an agent graph when their
//! dependencies have ended, honours the concurrency cap and the limits,
//! hands jobs to the [`Target`] and records what ends.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

use super::recorder::ResultSink;
use super::target::{Done, Job, Target};
use super::trace::Trace;
use crate::hash::SplitMix64;

/// How session starts (first turns, rows without a session) arrive.
#[derive(Debug, Clone, Copy)]
pub enum Arrivals {
    /// At `(timestamp − first timestamp) / speedup`.
    Timed { speedup: f64 },
    /// `rate` per second, exponential gaps (`poisson`) or equal gaps.
    Rate { rate: f64, poisson: bool, seed: u64 },
    /// All at once; the concurrency cap decides (closed loop).
    Closed,
}

/// Times are µs on the target's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub concurrency: Option<usize>,
    /// Measured requests to send (warm-up ones not counted).
    pub max_requests: Option<u64>,
    /// Stop sending after this long.
    pub duration_us: Option<u64>,
    pub warmup: u64,
    /// After a stop signal, how long in-flight requests may finish.
    pub drain_us: u64,
}

/// What becomes of the calls that wait for a call that failed (an error
/// answer; `--on-failed-call`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OnFailedCall {
    /// Released as if the call had succeeded, at its end: the offered load
    /// stays the trace's whatever the server answers (a server that fails
    /// under load is not relieved by the failures), as plain session turns
    /// always were.
    #[default]
    Send,
    /// Never sent, nor anything that waits for them (an agent that stops
    /// its task at the first failure): counted as skipped.
    Skip,
}

/// How the run ended, for the summary.
#[derive(Debug, Clone, Default)]
pub struct RunEnd {
    /// Requests handed to the workers (warm-up included).
    pub dispatched: u64,
    /// Rows never sent (limits, a stop, a session cut short, a call skipped
    /// because a dependency failed).
    pub not_sent: u64,
    /// Of those, the calls (and later turns) skipped because a call they
    /// wait for failed (`--on-failed-call skip`).
    pub skipped_dep_failed: u64,
    /// Stopped by a signal (or a closed output).
    pub interrupted: bool,
    /// In flight when the drain time ran out.
    pub cancelled: u64,
    pub workers: usize,
}

/// A row and when it is due, µs on the target's clock. Ordered by time,
/// then by row (file order breaks ties).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Due {
    pub at_us: u64,
    pub row: usize,
}

/// The deadline of each session start, µs after run start, in file order.
pub fn start_deadlines(trace: &Trace, arrivals: Arrivals) -> Vec<Due> {
    let starts: Vec<usize> = trace.starts().collect();
    match arrivals {
        Arrivals::Timed { speedup } => {
            let t0 = first_timestamp(trace).unwrap_or(0.0);
            starts
                .into_iter()
                .map(|i| {
                    let ts = trace.start_ms(i).unwrap_or(t0);
                    Due {
                        at_us: to_us((ts - t0) / speedup),
                        row: i,
                    }
                })
                .collect()
        }
        Arrivals::Rate {
            rate,
            poisson,
            seed,
        } => {
            let mut rng = SplitMix64::new(seed ^ 0x7261_7465);
            let mut t = 0.0f64;
            // A shard's starts take their times from the whole trace's
            // sequence of arrivals (the single run's), skipping the others'.
            let ranks: Vec<u64> = match &trace.frame {
                Some(f) => f.start_rank.clone(),
                None => (0..starts.len() as u64).collect(),
            };
            let mut k = 0u64;
            starts
                .into_iter()
                .zip(ranks)
                .map(|(i, rank)| {
                    while k < rank {
                        k += 1;
                        t += gap(&mut rng, rate, poisson);
                    }
                    Due {
                        at_us: to_us(t * 1000.0),
                        row: i,
                    }
                })
                .collect()
        }
        Arrivals::Closed => starts
            .into_iter()
            .map(|row| Due { at_us: 0, row })
            .collect(),
    }
}

/// The gap before the next arrival under `--rate`, in s.
fn gap(rng: &mut SplitMix64, rate: f64, poisson: bool) -> f64 {
    if poisson {
        -rng.next_open_unit().ln() / rate
    } else {
        1.0 / rate
    }
}

/// The trace's zero: the earliest timestamp of a session start (a shard's
/// part keeps the whole trace's).
pub fn first_timestamp(trace: &Trace) -> Option<f64> {
    if let Some(f) = &trace.frame {
        return f.zero_ms;
    }
    trace
        .starts()
        .filter_map(|i| trace.start_ms(i))
        .min_by(f64::total_cmp)
}

fn to_us(ms: f64) -> u64 {
    (ms * 1000.0).round().max(0.0) as u64
}

/// A session between turns.
struct SessionState {
    /// Position of the next turn in the session's list.
    next: usize,
    history: Option<Vec<Value>>,
}

/// How often the loop wakes with nothing to do, to notice a stop signal
/// (µs on the target's clock).
const POLL_US: u64 = 50_000;

/// How long the loop may sleep with nothing to do: [`POLL_US`] on a wall
/// clock; on a virtual one, until the next event (a 10^11 ms idle gap
/// between two rows is one wait, not two billion).
fn poll_us<T: Target + ?Sized>(target: &T) -> u64 {
    if target.virtual_clock() {
        u64::MAX
    } else {
        POLL_US
    }
}

pub struct Scheduler<'a> {
    trace: &'a Trace,
    arrivals: Arrivals,
    limits: Limits,
    /// A signal (or a closed output, or a gone server): stop sending.
    stop: &'a AtomicBool,
    /// Rows waiting for their deadline: (deadline µs, row).
    due: BinaryHeap<Reverse<Due>>,
    /// Rows past their deadline, waiting for a concurrency slot.
    waiting: VecDeque<Due>,
    sessions: Vec<SessionState>,
    in_flight: usize,
    /// When a slot was last freed (closed loop: the schedule time of the
    /// next request is when its slot came free).
    slot_freed_us: u64,
    end: RunEnd,
    measured: u64,
    /// Per row: the dependencies of a graph call not yet ended.
    deps_left: Vec<u32>,
    /// Per row: the latest end among a graph call's dependencies so far.
    deps_end_us: Vec<u64>,
    /// Per row: a graph call skipped because a dependency failed.
    skipped: Vec<bool>,
    /// Graph calls with dependencies neither released nor skipped.
    unreleased: u64,
    on_failed: OnFailedCall,
    /// A limit was reached: nothing more is sent, what is in flight ends.
    closed: bool,
    t0_ms: f64,
    ended: Vec<Done>,
    /// What the target was last told by `wake_on_end`.
    ringing: Option<bool>,
}

impl<'a> Scheduler<'a> {
    pub fn new(
        trace: &'a Trace,
        arrivals: Arrivals,
        limits: Limits,
        delta: bool,
        stop: &'a AtomicBool,
    ) -> Scheduler<'a> {
        // A graph session's calls follow their edges, not the session's
        // list (and carry no conversation: each call is its own prompt).
        let sessions = (0..trace.sessions.len())
            .map(|s| {
                let graph = trace.is_graph_session(s);
                SessionState {
                    next: if graph {
                        trace.sessions[s].turns.len()
                    } else {
                        1
                    },
                    history: (delta && !graph).then(Vec::new),
                }
            })
            .collect();
        let scale = gap_scale(arrivals);
        let mut due = BinaryHeap::new();
        for d in start_deadlines(trace, arrivals) {
            let t = &trace.turns[d.row];
            let Some(s) = t.session.filter(|_| t.call.is_some()) else {
                due.push(Reverse(d));
                continue;
            };
            // A task starts at its start's deadline; its roots keep their
            // recorded offsets from its earliest root (divided by
            // --speedup), under --rate too.
            let first = trace
                .roots(s)
                .map(|(_, ms)| ms)
                .min_by(f64::total_cmp)
                .unwrap_or(0.0);
            for (row, ms) in trace.roots(s) {
                due.push(Reverse(Due {
                    at_us: d.at_us.saturating_add(to_us((ms - first) * scale)),
                    row,
                }));
            }
        }
        let deps_left: Vec<u32> = trace
            .turns
            .iter()
            .map(|t| t.call.as_ref().map_or(0, |c| c.deps.len() as u32))
            .collect();
        let unreleased = deps_left.iter().filter(|&&n| n > 0).count() as u64;
        Scheduler {
            deps_left,
            deps_end_us: vec![0; trace.turns.len()],
            skipped: vec![false; trace.turns.len()],
            unreleased,
            on_failed: OnFailedCall::default(),
            trace,
            arrivals,
            limits,
            stop,
            due,
            waiting: VecDeque::new(),
            sessions,
            in_flight: 0,
            slot_freed_us: 0,
            end: RunEnd::default(),
            measured: 0,
            closed: false,
            t0_ms: first_timestamp(trace).unwrap_or(0.0),
            ended: Vec::new(),
            ringing: None,
        }
    }

    /// `--on-failed-call`.
    pub fn on_failed_call(mut self, on: OnFailedCall) -> Self {
        self.on_failed = on;
        self
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn limit_reached(&self, deadline_us: u64) -> bool {
        self.max_requests_reached() || self.limits.duration_us.is_some_and(|d| deadline_us > d)
    }

    fn max_requests_reached(&self) -> bool {
        self.limits.max_requests.is_some_and(|n| self.measured >= n)
    }

    fn has_slot(&self) -> bool {
        self.limits.concurrency.is_none_or(|c| self.in_flight < c)
    }

    /// Runs the whole schedule on `target`, recording every end, then waits
    /// for the requests in flight.
    pub fn run<T: Target>(mut self, target: &mut T, sink: &ResultSink) -> RunEnd {
        self.dispatch_loop(target, sink);
        self.ring(target, true);
        self.drain(target, sink);
        self.end.workers = target.workers();
        self.end
    }

    /// Tells the target whether an end must wake the scheduler at once
    /// (only when that changes): when an end can release a request (a
    /// concurrency slot, a closed loop's next request, a session's next
    /// turn), and once nothing is left to send but the ends themselves;
    /// otherwise ends are taken at the next due time (or POLL_US).
    fn ring<T: Target>(&mut self, target: &mut T, on: bool) {
        if self.ringing != Some(on) {
            self.ringing = Some(on);
            target.wake_on_end(on);
        }
    }

    fn dispatch_loop<T: Target>(&mut self, target: &mut T, sink: &ResultSink) {
        let ends_release = self.limits.concurrency.is_some()
            || matches!(self.arrivals, Arrivals::Closed)
            || !self.trace.sessions.is_empty();
        loop {
            if self.stopped() {
                self.end.interrupted = true;
                return;
            }
            let now = target.now_us();
            if !self.closed
                && (self.max_requests_reached()
                    || self.limits.duration_us.is_some_and(|d| now >= d))
            {
                self.close();
            }
            // Everything due goes out now, in deadline order, or waits for a slot.
            while let Some(&Reverse(due)) = self.due.peek() {
                if due.at_us > now {
                    break;
                }
                self.due.pop();
                if self.limit_reached(due.at_us) {
                    self.skip();
                    continue;
                }
                self.waiting.push_back(due);
            }
            while self.has_slot() {
                let Some(Due { at_us, row }) = self.waiting.pop_front() else {
                    break;
                };
                let t_sched = match self.arrivals {
                    Arrivals::Closed => at_us.max(self.slot_freed_us),
                    _ => at_us,
                };
                if self.limit_reached(t_sched) {
                    self.skip();
                    continue;
                }
                self.dispatch(row, t_sched, target, sink);
            }
            if self.due.is_empty() && self.waiting.is_empty() && self.in_flight == 0 {
                return;
            }
            // Wait until the next deadline (or the end of --duration), or
            // until a request ends (which may free a slot or release a
            // session's next turn); on a wall clock wake at least every
            // POLL_US to notice a stop (a virtual one jumps idle gaps).
            let mut wake = now.saturating_add(poll_us(target));
            if let Some(&Reverse(due)) = self.due.peek() {
                if self.has_slot() || self.waiting.is_empty() {
                    wake = wake.min(due.at_us);
                }
            }
            if let Some(d) = self.limits.duration_us.filter(|_| !self.closed) {
                wake = wake.min(d);
            }
            let tail = self.due.is_empty() && self.waiting.is_empty();
            self.ring(target, ends_release || tail);
            target.wait(Some(wake), &mut self.ended);
            let mut ended = std::mem::take(&mut self.ended);
            for d in ended.drain(..) {
                self.finished(d, sink);
            }
            self.ended = ended;
        }
    }

    /// A limit was reached: every row not yet sent stays unsent.
    fn close(&mut self) {
        self.closed = true;
        self.end.not_sent += self.due.len() as u64 + self.waiting.len() as u64;
        self.due.clear();
        self.waiting.clear();
    }

    /// After a stop: requests in flight finish (bounded by the request
    /// timeout), but only for the drain time.
    fn drain<T: Target>(&mut self, target: &mut T, sink: &ResultSink) {
        let mut give_up: Option<u64> = None;
        while self.in_flight > 0 {
            let now = target.now_us();
            if self.stopped() && give_up.is_none() {
                self.end.interrupted = true;
                give_up = Some(now.saturating_add(self.limits.drain_us));
            }
            let mut wake = now.saturating_add(poll_us(target));
            if let Some(g) = give_up {
                if now >= g {
                    let mut cancelled = Vec::new();
                    self.end.cancelled = target.cancel_in_flight(&mut cancelled) as u64;
                    // Real ends that raced the cancellation come first;
                    // each is written as it is.
                    for d in cancelled {
                        self.finished_draining(d, sink);
                    }
                    break;
                }
                wake = wake.min(g);
            }
            target.wait(Some(wake), &mut self.ended);
            let mut ended = std::mem::take(&mut self.ended);
            for d in ended.drain(..) {
                self.finished_draining(d, sink);
            }
            self.ended = ended;
        }
        // Whatever was never sent.
        self.end.not_sent += self.due.len() as u64 + self.waiting.len() as u64 + self.unreleased;
        let later: u64 = self
            .sessions
            .iter()
            .zip(&self.trace.sessions)
            .map(|(s, t)| t.turns.len().saturating_sub(s.next) as u64)
            .sum();
        self.end.not_sent += later;
    }

    fn finished_draining(&mut self, d: Done, sink: &ResultSink) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if d.outcome.is_none() {
            self.end.not_sent += 1;
        }
        sink.record(d);
        // A session's later turns are not sent once the run is stopping.
    }

    /// A row past a limit. Its session's later turns are never released,
    /// and are counted when the run ends.
    fn skip(&mut self) {
        self.end.not_sent += 1;
    }

    fn dispatch<T: Target>(&mut self, row: usize, t_sched: u64, target: &mut T, sink: &ResultSink) {
        let warmup = self.end.dispatched < self.limits.warmup;
        if !warmup {
            self.measured += 1;
        }
        let turn = &self.trace.turns[row];
        let history = turn
            .session
            .filter(|_| turn.call.is_none())
            .and_then(|s| self.sessions[s].history.take());
        let job = Job {
            seq: self.end.dispatched,
            row,
            t_sched_us: t_sched,
            warmup,
            history,
            worker: None,
        };
        self.end.dispatched += 1;
        self.in_flight += 1;
        sink.sent();
        target.submit(job);
    }

    /// A request ended: record it, free its slot and release its session's
    /// next turn, or the graph calls waiting for it.
    fn finished(&mut self, mut d: Done, sink: &ResultSink) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.slot_freed_us = self.slot_freed_us.max(d.t_end_us);
        let (row, t_end_us, sent) = (d.job.row, d.t_end_us, d.outcome.is_some());
        let failed = d.outcome.as_ref().is_some_and(|o| o.error.is_some());
        let skip = failed && self.on_failed == OnFailedCall::Skip;
        let history = d.job.history.take();
        sink.record(d);
        if !sent {
            self.end.not_sent += 1;
            return;
        }
        if self.trace.turns[row].call.is_some() {
            if !self.closed {
                self.release_dependents(row, t_end_us, skip);
            }
            return;
        }
        let Some(s) = self.trace.turns[row].session else {
            return;
        };
        let state = &mut self.sessions[s];
        state.history = history;
        if self.closed {
            return;
        }
        let list = &self.trace.sessions[s].turns;
        if skip {
            // The chain's rule: what waits for a failed turn is skipped.
            let later = list.len().saturating_sub(state.next) as u64;
            state.next = list.len();
            self.end.skipped_dep_failed += later;
            self.end.not_sent += later;
            return;
        }
        let Some(&next) = list.get(state.next) else {
            return;
        };
        state.next += 1;
        let next_turn = &self.trace.turns[next];
        let speedup = match self.arrivals {
            Arrivals::Timed { speedup } => speedup,
            _ => 1.0,
        };
        // The release rule's gap (`graph::Graphs::release_ms`): `delay`
        // and `tool_wait_ms` after the previous turn's end.
        let gap_ms = next_turn.delay_ms.unwrap_or(0.0) + next_turn.tool_wait_ms;
        let after_prev = t_end_us.saturating_add(to_us(gap_ms / speedup));
        let own = match (self.arrivals, next_turn.timestamp_ms) {
            (Arrivals::Timed { speedup }, Some(ts)) => to_us((ts - self.t0_ms) / speedup),
            _ => 0,
        };
        self.due.push(Reverse(Due {
            at_us: after_prev.max(own),
            row: next,
        }));
    }

    /// Graph call `row` ended at `t_end_us`: each call waiting for it that
    /// has no other dependency left is due at the latest end of its
    /// dependencies plus its `delay` and `tool_wait_ms` (divided by
    /// --speedup), the release rule of [`crate::graph::Graphs::release_ms`]
    /// on the measured ends. Calls released by one end share a deadline,
    /// so siblings go out together. With `skip` (the call failed, and
    /// `--on-failed-call skip`), they and what waits for them are skipped.
    fn release_dependents(&mut self, row: usize, t_end_us: u64, skip: bool) {
        let trace = self.trace;
        let Some(call) = &trace.turns[row].call else {
            return;
        };
        if skip {
            let mut stack: Vec<u32> = call.dependents.to_vec();
            while let Some(r) = stack.pop() {
                let r = r as usize;
                if std::mem::replace(&mut self.skipped[r], true) {
                    continue;
                }
                self.unreleased = self.unreleased.saturating_sub(1);
                self.end.skipped_dep_failed += 1;
                self.end.not_sent += 1;
                if let Some(c) = &trace.turns[r].call {
                    stack.extend_from_slice(&c.dependents);
                }
            }
            return;
        }
        let scale = gap_scale(self.arrivals);
        for &r in call.dependents.iter() {
            let r = r as usize;
            if self.skipped[r] {
                continue;
            }
            self.deps_end_us[r] = self.deps_end_us[r].max(t_end_us);
            self.deps_left[r] = self.deps_left[r].saturating_sub(1);
            if self.deps_left[r] > 0 {
                continue;
            }
            let turn = &trace.turns[r];
            let gap_ms = turn.delay_ms.unwrap_or(0.0) + turn.tool_wait_ms;
            self.unreleased = self.unreleased.saturating_sub(1);
            self.due.push(Reverse(Due {
                at_us: self.deps_end_us[r].saturating_add(to_us(gap_ms * scale)),
                row: r,
            }));
        }
    }
}

/// What a trace gap (a delay, a tool wait, a root's offset in its task)
/// is multiplied by: 1/--speedup when following timestamps; under --rate
/// and in a closed loop, 1 (they set when tasks start, not the gaps
/// inside one).
pub fn gap_scale(arrivals: Arrivals) -> f64 {
    match arrivals {
        Arrivals::Timed { speedup } => 1.0 / speedup,
        _ => 1.0,
    }
}

#[cfg(test)]
mod tests {
    //! The scheduler on a virtual-clock target: the same rules as on a real
    //! server, checked exactly and without sleeping.
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::jsonl::{ErrorPolicy, LineReader, OnError, SendOutput};
    use crate::replay::outcome::RunId;
    use crate::replay::outcome::{ErrorKind, Outcome};
    use crate::replay::progress::{Mode, Progress};
    use crate::replay::recorder::{record_on_thread, Recorder, RecorderOptions};

    /// Every request takes `service_us`; time moves only in `wait`, which
    /// (as a wall-clock target does) sleeps past ends to its deadline when
    /// told ends need not wake it.
    struct Virtual {
        now: u64,
        service_us: u64,
        running: Vec<(u64, Job)>,
        sent: Vec<(u64, usize)>,
        ring: bool,
        /// Every `wake_on_end` the scheduler made.
        rings: Vec<bool>,
        /// Rows whose answer is an error.
        fail: Vec<usize>,
    }

    impl Target for Virtual {
        fn name(&self) -> &'static str {
            "virtual"
        }
        fn now_us(&self) -> u64 {
            self.now
        }
        fn submit(&mut self, job: Job) {
            self.sent.push((self.now, job.row));
            self.running.push((self.now + self.service_us, job));
        }
        fn wake_on_end(&mut self, on: bool) {
            self.ring = on;
            self.rings.push(on);
        }
        fn wait(&mut self, deadline_us: Option<u64>, done: &mut Vec<Done>) {
            let first_end = self
                .running
                .iter()
                .map(|(end, _)| *end)
                .min()
                .filter(|_| self.ring || deadline_us.is_none());
            let until = match (deadline_us, first_end) {
                (Some(d), Some(e)) => d.min(e),
                (Some(d), None) => d,
                (None, Some(e)) => e,
                (None, None) => return,
            };
            self.now = self.now.max(until);
            let now = self.now;
            let (ended, running): (Vec<_>, Vec<_>) =
                self.running.drain(..).partition(|(end, _)| *end <= now);
            self.running = running;
            for (end, job) in ended {
                let error = self
                    .fail
                    .contains(&job.row)
                    .then(|| crate::replay::outcome::Failure::new(ErrorKind::Http5xx, "x"));
                let outcome = Outcome {
                    error,
                    t_send_us: job.t_sched_us,
                    t_first_us: Some(end),
                    t_last_us: Some(end),
                    t_end_us: end,
                    chunks: 1,
                    ..Outcome::default()
                };
                done.push(Done {
                    job,
                    t_end_us: end,
                    outcome: Some(outcome),
                });
            }
        }
        fn cancel_in_flight(&mut self, _done: &mut Vec<Done>) -> usize {
            0
        }
    }

    fn trace(jsonl: &str) -> Trace {
        let mut r = LineReader::new(jsonl.as_bytes(), 1 << 20);
        crate::replay::trace::load(&mut r, &mut ErrorPolicy::new(OnError::Fail)).unwrap()
    }

    /// Runs `t` and returns (send time µs, row) of every request, and the end.
    fn run(
        t: &Trace,
        arrivals: Arrivals,
        limits: Limits,
        service_us: u64,
    ) -> (Vec<(u64, usize)>, RunEnd) {
        let (sent, end, _) = run_ringing(t, arrivals, limits, service_us);
        (sent, end)
    }

    /// `run`, and every `wake_on_end` the scheduler made.
    fn run_ringing(
        t: &Trace,
        arrivals: Arrivals,
        limits: Limits,
        service_us: u64,
    ) -> (Vec<(u64, usize)>, RunEnd, Vec<bool>) {
        let (sent, end, rings, _) =
            run_full(t, arrivals, limits, service_us, &[], OnFailedCall::Send);
        (sent, end, rings)
    }

    /// (send µs, row) of every request, the end, every `wake_on_end`, the
    /// result lines.
    type Ran = (Vec<(u64, usize)>, RunEnd, Vec<bool>, Vec<serde_json::Value>);

    /// `run` with rows that fail, and the result lines written.
    fn run_full(
        t: &Trace,
        arrivals: Arrivals,
        limits: Limits,
        service_us: u64,
        fail: &[usize],
        on_failed: OnFailedCall,
    ) -> Ran {
        let dir = tempfile::tempdir().unwrap();
        let out = SendOutput::open_send(Some(&dir.path().join("r.jsonl")), false).unwrap();
        let rec = Recorder::new(
            out,
            RecorderOptions {
                slo: None,
                run_id: RunId(1),
                target: "virtual",
                block_size: 4,
                exact_output: true,
                redactor: Default::default(),
                max_consecutive_failures: 0,
                shard: None,
                gap_scale: gap_scale(arrivals),
            },
        );
        let mut target = Virtual {
            now: 0,
            service_us,
            running: Vec::new(),
            sent: Vec::new(),
            ring: true,
            rings: Vec::new(),
            fail: fail.to_vec(),
        };
        let stop = AtomicBool::new(false);
        let progress = Progress::new(Mode::Off, std::time::Duration::from_secs(10));
        let (end, mut rec) = record_on_thread(t, rec, progress, &stop, |sink| {
            Scheduler::new(t, arrivals, limits, false, &stop)
                .on_failed_call(on_failed)
                .run(&mut target, sink)
        });
        assert_eq!(rec.tally.sent, end.dispatched);
        rec.finish().unwrap();
        let lines = std::fs::read_to_string(dir.path().join("r.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (target.sent, end, target.rings, lines)
    }

    const TIMED: Arrivals = Arrivals::Timed { speedup: 2.0 };

    #[test]
    fn sessions_wait_for_their_previous_turn_and_delay() {
        let t = trace(
            "{\"session_id\":\"a\",\"timestamp\":1000,\"input_length\":1}\n\
             {\"timestamp\":1100,\"input_length\":1}\n\
             {\"session_id\":\"a\",\"delay\":500,\"input_length\":1}\n\
             {\"session_id\":\"a\",\"timestamp\":1200,\"input_length\":1}\n",
        );
        let (sent, end) = run(&t, TIMED, Limits::default(), 30_000);
        // Row 0 at 0; row 1 at (1100-1000)/2 ms; row 2 after row 0 ends
        // (30 ms) plus 500/2 ms; row 3 at the later of its own time (100 ms)
        // and row 2's end (280 + 30 ms).
        assert_eq!(sent, [(0, 0), (50_000, 1), (280_000, 2), (310_000, 3)]);
        assert_eq!((end.dispatched, end.not_sent), (4, 0));
    }

    #[test]
    fn limits_close_the_run_at_once() {
        let rows: String = (0..20)
            .map(|i| format!("{{\"timestamp\":{},\"input_length\":1}}\n", i * 1000))
            .collect();
        let t = trace(&rows);
        let limits = Limits {
            max_requests: Some(2),
            ..Limits::default()
        };
        let (sent, end) = run(&t, Arrivals::Timed { speedup: 1.0 }, limits, 10_000);
        assert_eq!(sent, [(0, 0), (1_000_000, 1)]);
        assert_eq!(end.not_sent, 18);
        let limits = Limits {
            duration_us: Some(2_500_000),
            ..Limits::default()
        };
        let (sent, end) = run(&t, Arrivals::Timed { speedup: 1.0 }, limits, 10_000);
        assert_eq!(sent.len(), 3);
        assert_eq!(end.not_sent, 17);
    }

    #[test]
    fn a_closed_loop_keeps_its_concurrency() {
        let rows = "{\"input_length\":1}\n".repeat(5);
        let t = trace(&rows);
        let limits = Limits {
            concurrency: Some(2),
            ..Limits::default()
        };
        let (sent, _) = run(&t, Arrivals::Closed, limits, 100);
        assert_eq!(sent, [(0, 0), (0, 1), (100, 2), (100, 3), (200, 4)]);
    }

    #[test]
    fn ends_wake_the_scheduler_only_where_they_release_a_request() {
        let plain = trace(&"{\"timestamp\":0,\"input_length\":1}\n".repeat(3));
        let sessions = trace(
            "{\"session_id\":\"a\",\"timestamp\":0,\"input_length\":1}\n\
             {\"session_id\":\"a\",\"delay\":0,\"input_length\":1}\n",
        );
        let capped = Limits {
            concurrency: Some(1),
            ..Limits::default()
        };
        // Not for a timed trace without sessions while rows are due: its
        // ends are taken at the next due time; once all are sent, the
        // run's last ends are what it waits for.
        let spaced = trace(
            "{\"timestamp\":0,\"input_length\":1}\n\
             {\"timestamp\":1000,\"input_length\":1}\n",
        );
        let (_, _, rings) = run_ringing(&spaced, TIMED, Limits::default(), 100);
        assert_eq!(rings, [false, true]);
        for (t, arrivals, limits) in [
            (&sessions, TIMED, Limits::default()),
            (&plain, TIMED, capped),
            (&plain, Arrivals::Closed, capped),
        ] {
            let (sent, _, rings) = run_ringing(t, arrivals, limits, 100);
            assert_eq!(rings, [true]);
            // Each next request leaves as the one before ends, not at the
            // scheduler's next 50 ms poll.
            assert_eq!(sent[..2], [(0, 0), (100, 1)]);
        }
    }

    /// Rows of one agent-graph session `s`: (id, wait_for, extra fields).
    fn graph_rows(rows: &[(&str, &[&str], &str)]) -> String {
        rows.iter()
            .map(|(id, wait, more)| {
                let wait: Vec<String> = wait.iter().map(|w| format!("\"{w}\"")).collect();
                format!(
                    "{{\"session_id\":\"s\",\"request_id\":\"{id}\",\"wait_for\":[{}],\
                     \"input_length\":1{more}}}\n",
                    wait.join(",")
                )
            })
            .collect()
    }

    #[test]
    fn graph_calls_wait_for_every_dependency_plus_delay_and_tool_wait() {
        // d waits for b and c (file order: d first); c waits 100 ms think
        // and 50 ms tool time after a.
        let t = trace(&graph_rows(&[
            ("d", &["b", "c"], ""),
            ("a", &[], ",\"timestamp\":1000"),
            ("b", &["a"], ",\"delay\":100"),
            ("c", &["a"], ",\"delay\":100,\"tool_wait_ms\":50"),
        ]));
        let (sent, end, _, lines) = run_full(
            &t,
            TIMED,
            Limits::default(),
            30_000,
            &[],
            OnFailedCall::Send,
        );
        // At --speedup 2: a at 0, ends at 30 ms; b at 30 + 50; c at
        // 30 + 75; d when the later of b (110) and c (135) ends.
        assert_eq!(sent, [(0, 1), (80_000, 2), (105_000, 3), (135_000, 0)]);
        assert_eq!((end.dispatched, end.not_sent), (4, 0));
        // Each result line names its call, what it waited for, and the
        // gaps as applied; lag counts from the release.
        let d = lines.iter().find(|l| l["call_id"] == "d").unwrap();
        assert_eq!(d["wait_for"], serde_json::json!(["b", "c"]));
        assert_eq!(
            (d["t_sched_ms"].as_f64(), d["lag_ms"].as_f64()),
            (Some(135.0), Some(0.0))
        );
        let c = lines.iter().find(|l| l["call_id"] == "c").unwrap();
        assert_eq!(
            (c["think_ms"].as_f64(), c["tool_ms"].as_f64()),
            (Some(50.0), Some(25.0))
        );
        let a = lines.iter().find(|l| l["call_id"] == "a").unwrap();
        assert!(
            a.get("wait_for").is_none() && a.get("think_ms").is_none(),
            "{a}"
        );
    }

    #[test]
    fn the_schedule_follows_the_graph_modules_release_rule() {
        // Fan-out, fan-in, branches, a second root with its own time and a
        // root without one: at --speedup 1 on equal service times, every
        // send is the release time `Graphs::schedule` computes.
        let text = "{\"session_id\":\"s\",\"request_id\":\"r\",\"timestamp\":500,\"input_length\":1,\"branches\":[\"x\",\"y\",\"z\"]}\n\
             {\"session_id\":\"s\",\"request_id\":\"x\",\"input_length\":1,\"delay\":7}\n\
             {\"session_id\":\"s\",\"request_id\":\"y\",\"input_length\":1,\"tool_wait_ms\":40}\n\
             {\"session_id\":\"s\",\"request_id\":\"z\",\"input_length\":1}\n\
             {\"session_id\":\"s\",\"request_id\":\"j\",\"wait_for\":[\"x\",\"y\",\"z\"],\"input_length\":1,\"delay\":3}\n\
             {\"session_id\":\"s\",\"request_id\":\"q\",\"timestamp\":520,\"input_length\":1}\n\
             {\"session_id\":\"s\",\"request_id\":\"u\",\"delay\":60,\"input_length\":1}\n\
             {\"session_id\":\"s\",\"wait_for\":[\"q\",\"u\",\"j\"],\"input_length\":1}\n\
             {\"session_id\":\"p\",\"timestamp\":510,\"input_length\":1}\n\
             {\"session_id\":\"p\",\"delay\":5,\"input_length\":1}\n";
        let t = trace(text);
        let g = crate::graph::Graphs::from_lines(text).unwrap();
        let want = g.schedule(|_| 30.0);
        let (sent, end) = run(
            &t,
            Arrivals::Timed { speedup: 1.0 },
            Limits::default(),
            30_000,
        );
        assert_eq!((end.dispatched, end.not_sent), (10, 0));
        let mut got = vec![u64::MAX; 10];
        for (at, row) in sent {
            got[row] = at;
        }
        let want: Vec<u64> = want.iter().map(|(r, _)| to_us(r - 500.0)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn siblings_leave_together_and_a_released_call_waits_for_a_slot() {
        let t = trace(
            "{\"session_id\":\"s\",\"request_id\":\"r\",\"timestamp\":0,\"input_length\":1,\"branches\":[\"x\",\"y\",\"z\"]}\n\
             {\"session_id\":\"s\",\"request_id\":\"x\",\"input_length\":1}\n\
             {\"session_id\":\"s\",\"request_id\":\"y\",\"input_length\":1}\n\
             {\"session_id\":\"s\",\"request_id\":\"z\",\"input_length\":1}\n",
        );
        let (sent, _) = run(&t, TIMED, Limits::default(), 100);
        assert_eq!(sent, [(0, 0), (100, 1), (100, 2), (100, 3)]);
        // Two slots: z waits for one; it was due at its release (lag and
        // scheduled latency count from there).
        let limits = Limits {
            concurrency: Some(2),
            ..Limits::default()
        };
        let (sent, _, _, lines) = run_full(&t, TIMED, limits, 100, &[], OnFailedCall::Send);
        assert_eq!(sent, [(0, 0), (100, 1), (100, 2), (200, 3)]);
        let z = lines.iter().find(|l| l["call_id"] == "z").unwrap();
        assert_eq!(z["t_sched_ms"].as_f64(), Some(0.1));
    }

    #[test]
    fn a_failed_call_releases_or_skips_what_waits_for_it() {
        let t = trace(&graph_rows(&[
            ("a", &[], ",\"timestamp\":0"),
            ("b", &["a"], ""),
            ("c", &["b"], ""),
            ("d", &["a"], ""),
            ("e", &["c", "d"], ""),
        ]));
        // b fails: under send everything goes; under skip, c and e (which
        // waits for c) are skipped, d is not.
        let (sent, end, _, _) =
            run_full(&t, TIMED, Limits::default(), 100, &[1], OnFailedCall::Send);
        assert_eq!(
            (sent.len(), end.not_sent, end.skipped_dep_failed),
            (5, 0, 0)
        );
        let (sent, end, _, _) =
            run_full(&t, TIMED, Limits::default(), 100, &[1], OnFailedCall::Skip);
        let rows: Vec<usize> = sent.iter().map(|s| s.1).collect();
        assert_eq!(rows, [0, 1, 3]);
        assert_eq!((end.not_sent, end.skipped_dep_failed), (2, 2));
        // A plain session is the chain: its later turns are skipped.
        let plain = trace(
            "{\"session_id\":\"p\",\"timestamp\":0,\"input_length\":1}\n\
             {\"session_id\":\"p\",\"input_length\":1}\n\
             {\"session_id\":\"p\",\"input_length\":1}\n",
        );
        let (sent, end, _, _) = run_full(
            &plain,
            TIMED,
            Limits::default(),
            100,
            &[0],
            OnFailedCall::Skip,
        );
        assert_eq!(
            (sent.len(), end.not_sent, end.skipped_dep_failed),
            (1, 2, 2)
        );
        let (sent, end, _, _) = run_full(
            &plain,
            TIMED,
            Limits::default(),
            100,
            &[0],
            OnFailedCall::Send,
        );
        assert_eq!((sent.len(), end.not_sent), (3, 0));
    }

    #[test]
    fn a_plain_session_replays_as_its_chain_graph() {
        let plain = trace(
            "{\"session_id\":\"p\",\"timestamp\":0,\"input_length\":1}\n\
             {\"session_id\":\"p\",\"delay\":40,\"input_length\":1}\n\
             {\"session_id\":\"p\",\"delay\":7,\"tool_wait_ms\":20,\"input_length\":1}\n",
        );
        let chain = trace(&graph_rows(&[
            ("t1", &[], ",\"timestamp\":0"),
            ("t2", &["t1"], ",\"delay\":40"),
            ("t3", &["t2"], ",\"delay\":7,\"tool_wait_ms\":20"),
        ]));
        for arrivals in [TIMED, Arrivals::Timed { speedup: 1.0 }] {
            let (p, pe) = run(&plain, arrivals, Limits::default(), 30_000);
            let (c, ce) = run(&chain, arrivals, Limits::default(), 30_000);
            assert_eq!(p, c);
            // t3: t2 ends at 30 + 40 + 30 ms, then 7 + 20 ms (at --speedup 1).
            if matches!(arrivals, Arrivals::Timed { speedup } if speedup == 1.0) {
                assert_eq!(p[2], (127_000, 2));
            }
            assert_eq!((pe.dispatched, pe.not_sent), (ce.dispatched, ce.not_sent));
        }
    }

    #[test]
    fn under_rate_a_tasks_roots_keep_their_offsets_and_stops_count_unreleased_calls() {
        // Two roots 200 ms apart in the task: under --rate the task starts
        // at its drawn time, the second root 200 ms after (not divided).
        let t = trace(&graph_rows(&[
            ("a", &[], ",\"timestamp\":1000"),
            ("b", &[], ",\"timestamp\":1200"),
            ("c", &["a", "b"], ""),
        ]));
        let rate = Arrivals::Rate {
            rate: 1.0,
            poisson: false,
            seed: 0,
        };
        let (sent, _) = run(&t, rate, Limits::default(), 10_000);
        assert_eq!(sent, [(0, 0), (200_000, 1), (210_000, 2)]);
        let limits = Limits {
            max_requests: Some(1),
            ..Limits::default()
        };
        let (sent, end) = run(&t, rate, limits, 10_000);
        assert_eq!((sent.len(), end.not_sent), (1, 2));
    }
}
