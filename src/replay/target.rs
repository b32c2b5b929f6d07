//! The seam between the schedule and where requests go. The scheduler
//! (sessions, delays, `--speedup`, `--rate`, `--concurrency`, limits,
//! warm-up, `--turns`) drives a [`Target`] and nothing else, so a real server
//! ([`super::http::HttpTarget`], worker threads on the wall clock) and a
//! model of one (the engine, on a virtual clock) follow the same rules and
//! give the same schedule.

use serde_json::Value;

use super::outcome::Outcome;
use crate::results::summary::Connections;

/// One request the scheduler decided to send now.
#[derive(Debug, Clone)]
pub struct Job {
    /// Dispatch order, from 0 (warm-up included): names the request.
    pub seq: u64,
    /// Index into the trace's turns.
    pub row: usize,
    /// When the schedule wanted it sent, µs on the target's clock.
    pub t_sched_us: u64,
    /// Sent to warm up; left out of the summary.
    pub warmup: bool,
    /// `--turns delta`: the conversation so far. A target that sends the
    /// request appends the row's prompt and the answer to it before handing
    /// the job back in its [`Done`].
    pub history: Option<Vec<Value>>,
    /// The worker a router chose for it (`--engine-workers`, `--url A,B`):
    /// set by the routing target, written in the result line.
    pub worker: Option<u32>,
}

/// A job's end, for the scheduler and the result line.
#[derive(Debug)]
pub struct Done {
    pub job: Job,
    /// µs on the target's clock: frees its concurrency slot and starts the
    /// session's next delay.
    pub t_end_us: u64,
    /// What was measured; `None` when the run was stopping and the job was
    /// never sent.
    pub outcome: Option<Outcome>,
}

/// Where requests go.
pub trait Target {
    /// Which target the result lines name (`"http"` or `"engine"`).
    fn name(&self) -> &'static str;

    /// µs since the run's zero on this target's clock.
    fn now_us(&self) -> u64;

    /// Starts `job` now: the scheduler decided it is due and has a slot.
    fn submit(&mut self, job: Job);

    /// Wall clock: blocks until `deadline_us` or until a request ends.
    /// Virtual clock: advances to `deadline_us` or to the first request end,
    /// whichever is first, without sleeping. `None`: until a request ends.
    /// Appends what ended to `done` (possibly several, possibly none).
    fn wait(&mut self, deadline_us: Option<u64>, done: &mut Vec<Done>);

    /// Whether `wait` must return as soon as a request ends (`true`, and
    /// what a target that ignores this does), or may sleep to its deadline
    /// and hand over every end then. The scheduler needs an end at once
    /// only when it can release a request, or when nothing is left to
    /// send (the rule is `Scheduler::ring`); waking for every end
    /// otherwise costs a thread switch per request, which at thousands of
    /// tiny requests a second is a fifth of the client's CPU.
    fn wake_on_end(&mut self, _on: bool) {}

    /// The drain time ran out: ends what is in flight, appending a `Done`
    /// with a cancelled outcome for each ([`Outcome::cancelled`]); returns
    /// how many.
    fn cancel_in_flight(&mut self, done: &mut Vec<Done>) -> usize;

    /// True when the clock is virtual: waiting costs nothing, so the
    /// scheduler need not wake on its own to notice a stop (a signal is
    /// seen at the next event), and idle gaps are jumped in one wait.
    fn virtual_clock(&self) -> bool {
        false
    }

    /// Worker threads (or other parallel units) used, for the summary.
    fn workers(&self) -> usize {
        0
    }

    /// The connections the target opened, for the summary; `None` where
    /// it does not count them (the engine model, the blocking client).
    fn connections(&self, _requests: u64) -> Option<Connections> {
        None
    }

    /// The summary's `engine` object (the model's parameters and
    /// statistics); `None` for a real server.
    fn report(&self) -> Option<serde_json::Value> {
        None
    }

    /// The summary's `router` object (per worker: requests, load, hit
    /// rate; the router's expectations); `None` with one worker.
    fn routing(&self) -> Option<serde_json::Value> {
        None
    }
}
