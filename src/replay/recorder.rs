//! Where a run's ends go: one result line per request (written by the
//! scheduler's thread, the only writer), the tally behind the summary, the
//! counts the progress line shows, and the watch for a server that is gone.

use std::time::{Duration, Instant};

use super::metrics::{Identity, Latencies, RequestResult, Slo, Tally};
use super::outcome::Outcome;
use super::request::RunId;
use super::target::Done;
use super::trace::Trace;
use crate::error::Error;
use crate::jsonl::SendOutput;

/// What the scheduler must do after a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Continue,
    /// Results can no longer be written (a closed stdout): stop sending.
    OutputClosed,
    /// `--max-consecutive-failures` connection failures in a row.
    ServerGone,
}

/// Counts for the progress line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    pub sent: u64,
    pub done: u64,
    pub failed: u64,
}

pub struct Recorder {
    out: SendOutput,
    pub tally: Tally,
    slo: Option<Slo>,
    run_id: RunId,
    target: &'static str,
    block_size: u64,
    /// 0: never stop on failures.
    max_consecutive_failures: u64,
    consecutive_unreachable: u64,
    /// The message of the last failure (for a run stopped early).
    pub last_failure: Option<String>,
    pub counts: Counts,
    /// The first error writing results.
    pub write_error: Option<Error>,
    line: Vec<u8>,
    last_flush: Instant,
}

const FLUSH_EVERY: Duration = Duration::from_secs(1);

pub struct RecorderOptions {
    pub slo: Option<Slo>,
    pub run_id: RunId,
    pub target: &'static str,
    pub block_size: u64,
    pub max_consecutive_failures: u64,
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
            max_consecutive_failures: o.max_consecutive_failures,
            consecutive_unreachable: 0,
            last_failure: None,
            counts: Counts::default(),
            write_error: None,
            line: Vec::new(),
            last_flush: Instant::now(),
        }
    }

    /// A job was handed to the target.
    pub fn sent(&mut self) {
        self.counts.sent += 1;
    }

    /// Writes the result of a job that ended (a job never sent has none).
    pub fn record(&mut self, trace: &Trace, done: &Done) -> Verdict {
        let Some(o) = &done.outcome else {
            return Verdict::Continue;
        };
        self.counts.done += 1;
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
        };
        let lat = Latencies::of(done.job.t_sched_us, o);
        let r = RequestResult::new(id, &lat, o);
        self.tally.add(&r, &lat, o, self.slo.as_ref());
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
        // Serialising plain structs into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut self.line, r);
        if let Err(e) = self.out.write_line(&self.line) {
            self.write_error = Some(e);
        }
    }

    /// Connection failures in a row so far.
    pub fn consecutive_unreachable(&self) -> u64 {
        self.consecutive_unreachable
    }

    fn watch(&mut self, o: &Outcome) -> Verdict {
        if let Some(e) = &o.error {
            self.last_failure = Some(e.message.clone());
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
