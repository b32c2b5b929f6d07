//! Where a run's ends go: one result line per request, the tally behind
//! the summary, the progress line, and the watch for a server that is gone.
//! All on one recorder thread, the only writer, so the scheduler's thread
//! only keeps time (formatting results there showed as schedule lag).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use crossbeam_utils::sync::{Parker, Unparker};

use super::observe::fidelity::SentRequest;
use super::outcome::{result_line, Identity, Latencies, Outcome, RunId};
use super::progress::{Counts, Progress};
use super::redact::Redactor;
use super::target::Done;
use super::trace::Trace;
use crate::error::Error;
use crate::jsonl::SendOutput;
use crate::results::line::{self, RequestResult};
use crate::results::summary::StoppedEarly;
use crate::results::{Slo, Tally};

/// What the scheduler must do after a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Continue,
    /// Results can no longer be written (a closed stdout): stop sending.
    OutputClosed,
    /// `--max-consecutive-failures` connection failures in a row.
    ServerGone,
}

pub struct Recorder {
    out: SendOutput,
    pub tally: Tally,
    slo: Option<Slo>,
    run_id: RunId,
    target: &'static str,
    block_size: u64,
    exact_output: bool,
    redactor: Redactor,
    /// 0: never stop on failures.
    max_consecutive_failures: u64,
    shard: Option<(String, String)>,
    gap_scale: f64,
    consecutive_unreachable: u64,
    /// The message of the last failure (for a run stopped early).
    pub last_failure: Option<String>,
    pub counts: Counts,
    /// The first error writing results.
    pub write_error: Option<Error>,
    /// Set when `--max-consecutive-failures` was reached.
    pub stopped_early: Option<StoppedEarly>,
    /// Every request sent, in the order they ended (the fidelity check).
    pub sent: Vec<SentRequest>,
    line: Vec<u8>,
    last_flush: Instant,
}

const FLUSH_EVERY: Duration = Duration::from_secs(1);

pub struct RecorderOptions {
    pub slo: Option<Slo>,
    pub run_id: RunId,
    pub target: &'static str,
    pub block_size: u64,
    pub exact_output: bool,
    /// Hides the options' secrets in error messages a server sent back.
    pub redactor: Redactor,
    pub max_consecutive_failures: u64,
    /// A shard's `I/N` and plan digest, written into every result line.
    pub shard: Option<(String, String)>,
    /// What the schedule multiplied a call's think and tool time by
    /// (1/--speedup when following timestamps, else 1).
    pub gap_scale: f64,
}

impl Recorder {
    pub fn new(out: SendOutput, o: RecorderOptions) -> Recorder {
        Recorder {
            out,
            tally: Tally::default(),
            slo: o.slo,
            run_id: o.run_id,
            target: o.target,
            block_size: o.block_size,
            exact_output: o.exact_output,
            redactor: o.redactor,
            max_consecutive_failures: o.max_consecutive_failures,
            shard: o.shard,
            gap_scale: o.gap_scale,
            consecutive_unreachable: 0,
            last_failure: None,
            counts: Counts::default(),
            write_error: None,
            stopped_early: None,
            sent: Vec::new(),
            line: Vec::new(),
            last_flush: Instant::now(),
        }
    }

    /// Writes the result of a job that ended (a job never sent has none).
    pub fn record(&mut self, trace: &Trace, done: &Done) -> Verdict {
        let Some(o) = &done.outcome else {
            return Verdict::Continue;
        };
        self.counts.done += 1;
        self.sent
            .push(SentRequest::of(done.job.row, done.job.worker, o));
        let turn = &trace.turns[done.job.row];
        let id = Identity {
            line: turn.line,
            session_id: trace.session_id(turn).map(str::to_string),
            turn: turn.turn,
            request_id: self.run_id.request_id(done.job.seq),
            x_request_id: self.run_id.request_uuid(done.job.seq),
            target: self.target,
            warmup: done.job.warmup,
            input_tokens: turn.intended_input(self.block_size),
            output_tokens: turn.output_length,
            exact_output: self.exact_output,
        };
        let lat = Latencies::of(done.job.t_sched_us, o);
        let mut r = result_line(id, &lat, o);
        if let Some(e) = r.error.as_mut() {
            e.message = self.redactor.redact(&e.message);
        }
        r.worker = done.job.worker;
        if let Some((tag, digest)) = &self.shard {
            r.shard = Some(tag.clone());
            r.plan_digest = Some(digest.clone());
        }
        if let Some(call) = &turn.call {
            r.call_id = call.id.as_deref().map(str::to_string);
            r.wait_for = call
                .deps
                .iter()
                .filter_map(|&d| trace.turns[d as usize].call.as_ref()?.id.as_deref())
                .map(str::to_string)
                .collect();
            // The gaps the release rule added (a root with a timestamp
            // has none: it is due at its time).
            if !call.deps.is_empty() || turn.timestamp_ms.is_none() {
                let applied = |ms: f64| line::round_us(ms * self.gap_scale);
                r.think_ms = Some(applied(turn.delay_ms.unwrap_or(0.0)));
                r.tool_ms = Some(applied(turn.tool_wait_ms));
            }
        }
        self.tally.add(&r, self.slo.as_ref());
        self.write(&r);
        if self.write_error.is_some() {
            return Verdict::OutputClosed;
        }
        self.watch(o)
    }

    fn write(&mut self, r: &RequestResult) {
        if self.write_error.is_some() {
            return;
        }
        self.line.clear();
        line::write(&mut self.line, r);
        if let Err(e) = self.out.write_line(&self.line) {
            self.write_error = Some(e);
        }
    }

    fn watch(&mut self, o: &Outcome) -> Verdict {
        if let Some(e) = &o.error {
            self.last_failure = Some(self.redactor.redact(&e.message));
        }
        match &o.error {
            Some(e) if e.kind.is_unreachable() => {
                self.counts.failed += 1;
                self.consecutive_unreachable += 1;
            }
            Some(_) => {
                self.counts.failed += 1;
                self.consecutive_unreachable = 0;
            }
            None => self.consecutive_unreachable = 0,
        }
        if self.max_consecutive_failures > 0
            && self.consecutive_unreachable >= self.max_consecutive_failures
        {
            Verdict::ServerGone
        } else {
            Verdict::Continue
        }
    }

    /// Block-buffered output (no `--line-buffered`, not a terminal) is
    /// still pushed out at least every second, so results written to a file
    /// are never far behind the run.
    pub fn tick(&mut self) {
        if self.last_flush.elapsed() < FLUSH_EVERY || self.write_error.is_some() {
            return;
        }
        self.last_flush = Instant::now();
        if let Err(e) = self.out.flush() {
            self.write_error = Some(e);
        }
    }

    /// Flushes the results; the first write error, if any.
    pub fn finish(&mut self) -> crate::error::Result<()> {
        match self.write_error.take() {
            Some(e) => Err(e),
            None => self.out.flush(),
        }
    }
}

/// The scheduler's end of the recorder thread.
pub struct ResultSink<'a> {
    tx: Sender<Done>,
    sent: &'a AtomicU64,
    /// Wakes the recorder when results pile up and when the sink is gone.
    bell: Unparker,
}

impl ResultSink<'_> {
    /// A job was handed to the target.
    pub fn sent(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    /// A job ended: its result is written on the recorder thread, which
    /// is woken once `WAKE_AT` results wait (else by its `TICK`): a wake
    /// for every result is a thread switch per request.
    pub fn record(&self, done: Done) {
        // The receiver lives until the scheduler is done.
        let _ = self.tx.send(done);
        if self.tx.len() >= WAKE_AT {
            self.bell.unpark();
        }
    }
}

impl Drop for ResultSink<'_> {
    /// The channel is closed first, then the recorder woken to see it.
    fn drop(&mut self) {
        let (closed, _) = crossbeam_channel::bounded(0);
        drop(std::mem::replace(&mut self.tx, closed));
        self.bell.unpark();
    }
}

/// How often the recorder thread wakes on its own (results, progress,
/// flush): a result waits at most this long to be written, a gone server
/// or a closed output is noticed within it.
const TICK: Duration = Duration::from_millis(20);
/// Results waiting that wake the recorder before its tick.
const WAKE_AT: usize = 64;

/// Runs `schedule` on this thread with a [`ResultSink`] whose results
/// `rec` records on a thread of its own; returns what `schedule` returned
/// and the recorder. A gone server or a closed output sets `stop`.
pub fn record_on_thread<R>(
    trace: &Trace,
    rec: Recorder,
    progress: Progress,
    stop: &AtomicBool,
    schedule: impl FnOnce(&ResultSink) -> R,
) -> (R, Recorder) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let sent = AtomicU64::new(0);
    let parker = Parker::new();
    let bell = parker.unparker().clone();
    std::thread::scope(|scope| {
        let handle = scope.spawn(|| recorder_loop(trace, rec, progress, stop, &sent, rx, parker));
        let out = schedule(&ResultSink {
            tx,
            sent: &sent,
            bell,
        });
        // The sink is gone: the recorder ends once it has written the rest.
        let rec = match handle.join() {
            Ok(rec) => rec,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        (out, rec)
    })
}

fn recorder_loop(
    trace: &Trace,
    mut rec: Recorder,
    mut progress: Progress,
    stop: &AtomicBool,
    sent: &AtomicU64,
    rx: Receiver<Done>,
    parker: Parker,
) -> Recorder {
    loop {
        // Parked between results, not in the channel's timed receive,
        // which spins and yields the core to the client's other threads
        // first (7,000 `sched_yield`s in a 2,000-stream run).
        match rx.try_recv() {
            Ok(d) => match rec.record(trace, &d) {
                Verdict::Continue => {}
                Verdict::OutputClosed => stop.store(true, Ordering::Relaxed),
                Verdict::ServerGone => {
                    if rec.stopped_early.is_none() {
                        rec.stopped_early = Some(StoppedEarly {
                            consecutive_failures: rec.consecutive_unreachable,
                            last_error: rec.last_failure.clone().unwrap_or_default(),
                        });
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            },
            Err(TryRecvError::Empty) => parker.park_timeout(TICK),
            Err(TryRecvError::Disconnected) => break,
        }
        rec.counts.sent = sent.load(Ordering::Relaxed);
        let in_flight = rec.counts.sent.saturating_sub(rec.counts.done) as usize;
        progress.tick(&rec.counts, in_flight, &rec.tally);
        rec.tick();
    }
    progress.finish();
    rec
}
