//! When each request is sent. One thread owns the schedule: it sleeps to
//! absolute deadlines (so it never drifts), serialises the turns of each
//! session, honours the concurrency cap, and hands jobs to the workers.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::trace::Trace;
use super::worker::{self, Context, Done, Job};
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

#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub concurrency: Option<usize>,
    /// Measured requests to send (warm-up ones not counted).
    pub max_requests: Option<u64>,
    /// Stop sending after this long.
    pub duration: Option<Duration>,
    pub warmup: u64,
    /// After a stop signal, how long in-flight requests may finish.
    pub drain: Duration,
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

pub struct Scheduler {
    ctx: Arc<Context>,
    arrivals: Arrivals,
    limits: Limits,
    /// Rows waiting for their deadline: (deadline µs, row).
    due: BinaryHeap<Reverse<(u64, usize)>>,
    /// Rows past their deadline, waiting for a concurrency slot.
    waiting: VecDeque<(u64, usize)>,
    sessions: Vec<SessionState>,
    /// Jobs go to whichever worker is idle (a multi-consumer channel: no
    /// lock convoy between idle workers).
    jobs: Option<crossbeam_channel::Sender<Job>>,
    job_rx: crossbeam_channel::Receiver<Job>,
    done_tx: Sender<Done>,
    done_rx: Receiver<Done>,
    in_flight: usize,
    workers: usize,
    /// When a slot was last freed (closed loop: the schedule time of the
    /// next request is when its slot came free).
    slot_freed_us: u64,
    end: RunEnd,
    measured: u64,
    t0_ms: f64,
}

impl Scheduler {
    pub fn new(ctx: Arc<Context>, arrivals: Arrivals, limits: Limits, delta: bool) -> Scheduler {
        let (jobs, job_rx) = crossbeam_channel::unbounded();
        let (done_tx, done_rx) = mpsc::channel();
        let sessions = ctx
            .trace
            .sessions
            .iter()
            .map(|_| SessionState {
                next: 1,
                history: delta.then(Vec::new),
            })
            .collect();
        let due = start_deadlines(&ctx.trace, arrivals)
            .into_iter()
            .map(Reverse)
            .collect();
        let t0_ms = first_timestamp(&ctx.trace).unwrap_or(0.0);
        Scheduler {
            ctx,
            arrivals,
            limits,
            due,
            waiting: VecDeque::new(),
            sessions,
            jobs: Some(jobs),
            job_rx,
            done_tx,
            done_rx,
            in_flight: 0,
            workers: 0,
            slot_freed_us: 0,
            end: RunEnd::default(),
            measured: 0,
            t0_ms,
        }
    }

    fn now_us(&self) -> u64 {
        self.ctx.clock.us(Instant::now())
    }

    fn stopped(&self) -> bool {
        self.ctx.stop.load(Ordering::Relaxed)
    }

    fn limit_reached(&self, deadline_us: u64) -> bool {
        self.limits.max_requests.is_some_and(|n| self.measured >= n)
            || self
                .limits
                .duration
                .is_some_and(|d| deadline_us > d.as_micros() as u64)
    }

    fn has_slot(&self) -> bool {
        self.limits.concurrency.is_none_or(|c| self.in_flight < c)
    }

    /// Runs the whole schedule, then waits for the requests in flight.
    pub fn run(mut self) -> RunEnd {
        self.dispatch_loop();
        self.drain();
        self.end.workers = self.workers;
        // Closing the job channel ends the idle workers.
        self.jobs = None;
        self.end
    }

    fn dispatch_loop(&mut self) {
        loop {
            if self.stopped() {
                self.end.interrupted = true;
                return;
            }
            let now = self.now_us();
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
                self.dispatch(row, t_sched);
            }
            if self.due.is_empty() && self.waiting.is_empty() && self.in_flight == 0 {
                return;
            }
            // Sleep until the next deadline, or until a request ends (which
            // may free a slot or release a session's next turn); wake at
            // least every 50 ms to notice a stop.
            let mut wait = Duration::from_millis(50);
            if let Some(&Reverse((deadline, _))) = self.due.peek() {
                if self.has_slot() || self.waiting.is_empty() {
                    let to_deadline = self
                        .ctx
                        .clock
                        .at(deadline)
                        .saturating_duration_since(Instant::now());
                    wait = wait.min(to_deadline);
                }
            }
            match self.done_rx.recv_timeout(wait) {
                Ok(d) => {
                    self.finished(d);
                    while let Ok(d) = self.done_rx.try_recv() {
                        self.finished(d);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// After the schedule: requests in flight finish (bounded by the
    /// request timeout); after a stop, only for the drain time.
    fn drain(&mut self) {
        let mut give_up: Option<Instant> = None;
        while self.in_flight > 0 {
            if self.stopped() && give_up.is_none() {
                self.end.interrupted = true;
                give_up = Some(Instant::now() + self.limits.drain);
            }
            let mut wait = Duration::from_millis(50);
            if let Some(g) = give_up {
                let left = g.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    self.end.cancelled = self.ctx.cancel_in_flight() as u64;
                    break;
                }
                wait = wait.min(left);
            }
            match self.done_rx.recv_timeout(wait) {
                Ok(d) => self.finished_draining(d),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        // Whatever was never sent.
        let left: u64 = self.due.len() as u64 + self.waiting.len() as u64;
        self.end.not_sent += left;
        let later: u64 = self
            .sessions
            .iter()
            .zip(&self.ctx.trace.sessions)
            .map(|(s, t)| t.turns.len().saturating_sub(s.next) as u64)
            .sum();
        self.end.not_sent += later;
    }

    fn finished_draining(&mut self, d: Done) {
        self.in_flight -= 1;
        if !d.sent {
            self.end.not_sent += 1;
        }
        // A session's later turns are not sent once the run is stopping.
    }

    /// A row past a limit. Its session's later turns are never released,
    /// and are counted when the run ends.
    fn skip(&mut self) {
        self.end.not_sent += 1;
    }

    fn dispatch(&mut self, row: usize, t_sched: u64) {
        let warmup = self.end.dispatched < self.limits.warmup;
        if !warmup {
            self.measured += 1;
        }
        let turn = &self.ctx.trace.turns[row];
        let history = turn.session.and_then(|s| self.sessions[s].history.take());
        let job = Job {
            seq: self.end.dispatched,
            turn: row,
            t_sched_us: t_sched,
            warmup,
            history,
        };
        self.end.dispatched += 1;
        self.in_flight += 1;
        // Claim an idle worker for this job; if none is idle, start one. A
        // count of jobs in flight would over-count here (their ends reach the
        // scheduler late when it is busy) and start threads nobody needs.
        let claimed = self
            .ctx
            .idle_workers
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        if !claimed {
            self.spawn_worker();
        }
        if let Some(tx) = &self.jobs {
            // The receiver lives as long as the scheduler.
            let _ = tx.send(job);
        }
    }

    fn spawn_worker(&mut self) {
        let ctx = self.ctx.clone();
        let rx = self.job_rx.clone();
        let tx = self.done_tx.clone();
        let spawned = std::thread::Builder::new()
            .name("mc-replay-worker".into())
            .stack_size(512 * 1024)
            .spawn(move || worker::work(ctx, rx, tx));
        match spawned {
            Ok(_) => self.workers += 1,
            // Out of threads: the job waits for a busy worker, and the wait
            // shows as schedule lag.
            Err(e) if self.workers > 0 => {
                if self.workers.is_power_of_two() {
                    eprintln!("mc-replay: cannot start more workers ({e}); requests will queue");
                }
            }
            Err(e) => {
                eprintln!("mc-replay: cannot start a worker thread: {e}");
                self.ctx.stop.store(true, Ordering::Relaxed);
            }
        }
    }

    /// A request ended: free its slot and release its session's next turn.
    fn finished(&mut self, d: Done) {
        self.in_flight -= 1;
        self.slot_freed_us = self.slot_freed_us.max(d.t_end_us);
        let turn = &self.ctx.trace.turns[d.turn];
        if !d.sent {
            self.end.not_sent += 1;
            return;
        }
        let Some(s) = turn.session else {
            return;
        };
        let state = &mut self.sessions[s];
        state.history = d.history;
        let list = &self.ctx.trace.sessions[s].turns;
        let Some(&next) = list.get(state.next) else {
            return;
        };
        state.next += 1;
        let next_turn = &self.ctx.trace.turns[next];
        let speedup = match self.arrivals {
            Arrivals::Timed { speedup } => speedup,
            _ => 1.0,
        };
        let after_prev = d.t_end_us + to_us(next_turn.delay_ms.unwrap_or(0.0) / speedup);
        let own = match (self.arrivals, next_turn.timestamp_ms) {
            (Arrivals::Timed { speedup }, Some(ts)) => to_us((ts - self.t0_ms) / speedup),
            _ => 0,
        };
        self.due.push(Reverse((after_prev.max(own), next)));
    }
}
