//! When each request is sent. One thread owns the schedule: it waits on the
//! target's clock to absolute deadlines (so it never drifts), serialises the
//! turns of each session, honours the concurrency cap and the limits, hands
//! jobs to the [`Target`] and records what ends.

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
                    let ts = trace.turns[i].timestamp_ms.unwrap_or(t0);
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
            ringing: None,
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
        self.end.not_sent += self.due.len() as u64 + self.waiting.len() as u64;
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
        sink.sent();
        target.submit(job);
    }

    /// A request ended: record it, free its slot and release its session's
    /// next turn.
    fn finished(&mut self, mut d: Done, sink: &ResultSink) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.slot_freed_us = self.slot_freed_us.max(d.t_end_us);
        let (row, t_end_us, sent) = (d.job.row, d.t_end_us, d.outcome.is_some());
        let history = d.job.history.take();
        sink.record(d);
        if !sent {
            self.end.not_sent += 1;
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
        let Some(&next) = list.get(state.next) else {
            return;
        };
        state.next += 1;
        let next_turn = &self.trace.turns[next];
        let speedup = match self.arrivals {
            Arrivals::Timed { speedup } => speedup,
            _ => 1.0,
        };
        let after_prev =
            t_end_us.saturating_add(to_us(next_turn.delay_ms.unwrap_or(0.0) / speedup));
        let own = match (self.arrivals, next_turn.timestamp_ms) {
            (Arrivals::Timed { speedup }, Some(ts)) => to_us((ts - self.t0_ms) / speedup),
            _ => 0,
        };
        self.due.push(Reverse(Due {
            at_us: after_prev.max(own),
            row: next,
        }));
    }
}

#[cfg(test)]
mod tests {
    //! The scheduler on a virtual-clock target: the same rules as on a real
    //! server, checked exactly and without sleeping.
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::jsonl::{ErrorPolicy, LineReader, OnError, SendOutput};
    use crate::replay::outcome::Outcome;
    use crate::replay::outcome::RunId;
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
                let outcome = Outcome {
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
            },
        );
        let mut target = Virtual {
            now: 0,
            service_us,
            running: Vec::new(),
            sent: Vec::new(),
            ring: true,
            rings: Vec::new(),
        };
        let stop = AtomicBool::new(false);
        let progress = Progress::new(Mode::Off, std::time::Duration::from_secs(10));
        let (end, rec) = record_on_thread(t, rec, progress, &stop, |sink| {
            Scheduler::new(t, arrivals, limits, false, &stop).run(&mut target, sink)
        });
        assert_eq!(rec.tally.sent, end.dispatched);
        (target.sent, end, target.rings)
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
}
