//! When each request is sent. One thread owns the schedule: it waits on the
//! target's clock to absolute deadlines (so it never drifts), serialises the
//! turns of each session, honours the concurrency cap and the limits, hands
//! jobs to the [`Target`] and records what ends.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

use super::progress::Progress;
use super::recorder::{Recorder, Verdict};
use super::report::StoppedEarly;
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

/// How the run ended, for the summary.
#[derive(Debug, Clone, Default)]
pub struct RunEnd {
    /// Requests handed to the workers (warm-up included).
    pub dispatched: u64,
    /// Rows never sent (limits, a stop, a session cut short).
    pub not_sent: u64,
    /// Stopped by a signal (or a closed output).
    pub interrupted: bool,
    /// In flight when the drain time ran out.
    pub cancelled: u64,
    /// Stopped by `--max-consecutive-failures`.
    pub stopped_early: Option<StoppedEarly>,
    pub workers: usize,
}

/// The deadline of each session start, µs after run start, in file order.
pub fn start_deadlines(trace: &Trace, arrivals: Arrivals) -> Vec<(u64, usize)> {
    let starts: Vec<usize> = trace.starts().collect();
    match arrivals {
        Arrivals::Timed { speedup } => {
            let t0 = first_timestamp(trace).unwrap_or(0.0);
            starts
                .into_iter()
                .map(|i| {
                    let ts = trace.turns[i].timestamp_ms.unwrap_or(t0);
                    (to_us((ts - t0) / speedup), i)
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
            starts
                .into_iter()
                .enumerate()
                .map(|(k, i)| {
                    if k > 0 {
                        t += if poisson {
                            -rng.next_open_unit().ln() / rate
                        } else {
                            1.0 / rate
                        };
                    }
                    (to_us(t * 1000.0), i)
                })
                .collect()
        }
        Arrivals::Closed => starts.into_iter().map(|i| (0, i)).collect(),
    }
}

/// The trace's zero: the earliest timestamp of a session start.
pub fn first_timestamp(trace: &Trace) -> Option<f64> {
    trace
        .starts()
        .filter_map(|i| trace.turns[i].timestamp_ms)
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

pub struct Scheduler<'a> {
    trace: &'a Trace,
    arrivals: Arrivals,
    limits: Limits,
    /// A signal (or a closed output, or a gone server): stop sending.
    stop: &'a AtomicBool,
    /// Rows waiting for their deadline: (deadline µs, row).
    due: BinaryHeap<Reverse<(u64, usize)>>,
    /// Rows past their deadline, waiting for a concurrency slot.
    waiting: VecDeque<(u64, usize)>,
    sessions: Vec<SessionState>,
    in_flight: usize,
    /// When a slot was last freed (closed loop: the schedule time of the
    /// next request is when its slot came free).
    slot_freed_us: u64,
    end: RunEnd,
    measured: u64,
    /// A limit was reached: nothing more is sent, what is in flight ends.
    closed: bool,
    t0_ms: f64,
    ended: Vec<Done>,
}

impl<'a> Scheduler<'a> {
    pub fn new(
        trace: &'a Trace,
        arrivals: Arrivals,
        limits: Limits,
        delta: bool,
        stop: &'a AtomicBool,
    ) -> Scheduler<'a> {
        let sessions = trace
            .sessions
            .iter()
            .map(|_| SessionState {
                next: 1,
                history: delta.then(Vec::new),
            })
            .collect();
        let due = start_deadlines(trace, arrivals)
            .into_iter()
            .map(Reverse)
            .collect();
        Scheduler {
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
        }
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
    pub fn run<T: Target>(
        mut self,
        target: &mut T,
        rec: &mut Recorder,
        progress: &mut Progress,
    ) -> RunEnd {
        self.dispatch_loop(target, rec, progress);
        self.drain(target, rec, progress);
        self.end.workers = target.workers();
        self.end
    }

    fn dispatch_loop<T: Target>(
        &mut self,
        target: &mut T,
        rec: &mut Recorder,
        progress: &mut Progress,
    ) {
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
            while let Some(&Reverse((deadline, row))) = self.due.peek() {
                if deadline > now {
                    break;
                }
                self.due.pop();
                if self.limit_reached(deadline) {
                    self.skip();
                    continue;
                }
                self.waiting.push_back((deadline, row));
            }
            while self.has_slot() {
                let Some((deadline, row)) = self.waiting.pop_front() else {
                    break;
                };
                let t_sched = match self.arrivals {
                    Arrivals::Closed => deadline.max(self.slot_freed_us),
                    _ => deadline,
                };
                if self.limit_reached(t_sched) {
                    self.skip();
                    continue;
                }
                self.dispatch(row, t_sched, target, rec);
            }
            if self.due.is_empty() && self.waiting.is_empty() && self.in_flight == 0 {
                return;
            }
            // Wait until the next deadline (or the end of --duration), or
            // until a request ends (which may free a slot or release a
            // session's next turn); wake at least every POLL_US to notice a stop.
            let mut wake = now.saturating_add(POLL_US);
            if let Some(&Reverse((deadline, _))) = self.due.peek() {
                if self.has_slot() || self.waiting.is_empty() {
                    wake = wake.min(deadline);
                }
            }
            if let Some(d) = self.limits.duration_us.filter(|_| !self.closed) {
                wake = wake.min(d);
            }
            target.wait(Some(wake), &mut self.ended);
            let mut ended = std::mem::take(&mut self.ended);
            for d in ended.drain(..) {
                self.finished(d, rec);
            }
            self.ended = ended;
            progress.tick(&rec.counts, self.in_flight, &rec.tally);
            rec.tick();
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
    fn drain<T: Target>(&mut self, target: &mut T, rec: &mut Recorder, progress: &mut Progress) {
        let mut give_up: Option<u64> = None;
        while self.in_flight > 0 {
            let now = target.now_us();
            if self.stopped() && give_up.is_none() {
                self.end.interrupted = true;
                give_up = Some(now.saturating_add(self.limits.drain_us));
            }
            let mut wake = now.saturating_add(POLL_US);
            if let Some(g) = give_up {
                if now >= g {
                    let mut cancelled = Vec::new();
                    self.end.cancelled = target.cancel_in_flight(&mut cancelled) as u64;
                    // Real ends that raced the cancellation come first;
                    // each is written as it is.
                    for d in cancelled {
                        self.finished_draining(d, rec);
                    }
                    break;
                }
                wake = wake.min(g);
            }
            target.wait(Some(wake), &mut self.ended);
            let mut ended = std::mem::take(&mut self.ended);
            for d in ended.drain(..) {
                self.finished_draining(d, rec);
            }
            self.ended = ended;
            progress.tick(&rec.counts, self.in_flight, &rec.tally);
            rec.tick();
        }
        // Whatever was never sent.
        self.end.not_sent += self.due.len() as u64 + self.waiting.len() as u64;
        let later: u64 = self
            .sessions
            .iter()
            .zip(&self.trace.sessions)
            .map(|(s, t)| t.turns.len().saturating_sub(s.next) as u64)
            .sum();
        self.end.not_sent += later;
    }

    fn finished_draining(&mut self, d: Done, rec: &mut Recorder) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if d.outcome.is_none() {
            self.end.not_sent += 1;
        }
        let v = rec.record(self.trace, &d);
        self.verdict(v, rec);
        // A session's later turns are not sent once the run is stopping.
    }

    fn verdict(&mut self, v: Verdict, rec: &Recorder) {
        match v {
            Verdict::Continue => {}
            Verdict::OutputClosed => self.stop.store(true, Ordering::Relaxed),
            Verdict::ServerGone => {
                if self.end.stopped_early.is_none() {
                    self.end.stopped_early = Some(StoppedEarly {
                        consecutive_failures: rec.consecutive_unreachable(),
                        last_error: rec.last_failure.clone().unwrap_or_default(),
                    });
                    self.stop.store(true, Ordering::Relaxed);
                }
            }
        }
    }

    /// A row past a limit. Its session's later turns are never released,
    /// and are counted when the run ends.
    fn skip(&mut self) {
        self.end.not_sent += 1;
    }

    fn dispatch<T: Target>(
        &mut self,
        row: usize,
        t_sched: u64,
        target: &mut T,
        rec: &mut Recorder,
    ) {
        let warmup = self.end.dispatched < self.limits.warmup;
        if !warmup {
            self.measured += 1;
        }
        let turn = &self.trace.turns[row];
        let history = turn.session.and_then(|s| self.sessions[s].history.take());
        let job = Job {
            seq: self.end.dispatched,
            row,
            t_sched_us: t_sched,
            warmup,
            history,
        };
        self.end.dispatched += 1;
        self.in_flight += 1;
        rec.sent();
        target.submit(job);
    }

    /// A request ended: record it, free its slot and release its session's
    /// next turn.
    fn finished(&mut self, d: Done, rec: &mut Recorder) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.slot_freed_us = self.slot_freed_us.max(d.t_end_us);
        let v = rec.record(self.trace, &d);
        self.verdict(v, rec);
        if d.outcome.is_none() {
            self.end.not_sent += 1;
            return;
        }
        let turn = &self.trace.turns[d.job.row];
        let Some(s) = turn.session else {
            return;
        };
        let state = &mut self.sessions[s];
        state.history = d.job.history;
        if self.closed {
            return;
        }
        let list = &self.trace.sessions[s].turns;
        let Some(&next) = list.get(state.next) else {
            return;
        };
        state.next += 1;
        let next_turn = &self.trace.turns[next];
        let speedup = match self.arrivals {
            Arrivals::Timed { speedup } => speedup,
            _ => 1.0,
        };
        let after_prev = d
            .t_end_us
            .saturating_add(to_us(next_turn.delay_ms.unwrap_or(0.0) / speedup));
        let own = match (self.arrivals, next_turn.timestamp_ms) {
            (Arrivals::Timed { speedup }, Some(ts)) => to_us((ts - self.t0_ms) / speedup),
            _ => 0,
        };
        self.due.push(Reverse((after_prev.max(own), next)));
    }
}
