//! The real-server targets. [`evented::EventedTarget`] (the default, for
//! http:// and https:// alike): a few event-loop threads over non-blocking
//! sockets, TLS through [`tls`]. [`HttpTarget`] (here; `--http-client
//! blocking`): a pool of
//! worker threads, each sending one request at a time with blocking I/O
//! (ureq); the pool grows to the peak number of requests in flight; jobs
//! and ends travel on crossbeam channels. [`ServerTarget`] is either.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use serde_json::json;

pub mod answer;
pub mod body;
pub mod chunk;
pub mod client;
pub mod connect;
pub mod evented;
pub mod inflight;
pub mod prompt;
pub mod redirect;
pub mod request;
pub mod sse;
pub mod stream;
pub mod tls;
pub mod wire;

use client::Clock;
use inflight::Registry;
use request::RequestBuilder;

use crate::replay::outcome::Outcome;
use crate::replay::target::{Done, Job, Target};
use crate::replay::trace::Trace;
use crate::results::summary::Connections;

/// What every worker reads.
struct Shared {
    trace: Arc<Trace>,
    builder: RequestBuilder,
    /// The endpoint's full URL.
    url: String,
    agent: ureq::Agent,
    clock: Clock,
    registry: Registry,
    /// Workers waiting for a job and not yet claimed by a submit.
    idle_workers: AtomicUsize,
    /// Set when the run stops: a job not yet sent is handed back unsent.
    stop: Arc<AtomicBool>,
    /// `--max-event-bytes`.
    max_event_bytes: usize,
}

pub struct HttpTarget {
    shared: Arc<Shared>,
    /// Jobs go to whichever worker is idle (a multi-consumer channel: no
    /// lock convoy between idle workers). Dropped to end the idle workers.
    jobs: Option<Sender<Job>>,
    job_rx: Receiver<Job>,
    done_tx: Sender<Done>,
    done_rx: Receiver<Done>,
    workers: usize,
}

impl HttpTarget {
    pub fn new(
        trace: Arc<Trace>,
        builder: RequestBuilder,
        url: String,
        agent: ureq::Agent,
        clock: Clock,
        stop: Arc<AtomicBool>,
        max_event_bytes: usize,
    ) -> HttpTarget {
        let (jobs, job_rx) = crossbeam_channel::unbounded();
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        HttpTarget {
            shared: Arc::new(Shared {
                trace,
                builder,
                url,
                agent,
                clock,
                registry: Registry::default(),
                idle_workers: AtomicUsize::new(0),
                stop,
                max_event_bytes,
            }),
            jobs: Some(jobs),
            job_rx,
            done_tx,
            done_rx,
            workers: 0,
        }
    }

    fn spawn_worker(&mut self) {
        let shared = self.shared.clone();
        let rx = self.job_rx.clone();
        let tx = self.done_tx.clone();
        let spawned = std::thread::Builder::new()
            .name("mc-replay-worker".into())
            .stack_size(512 * 1024)
            .spawn(move || work(&shared, &rx, &tx));
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
                self.shared.stop.store(true, Ordering::Relaxed);
            }
        }
    }

    fn take_ready(&self, done: &mut Vec<Done>) {
        done.extend(self.done_rx.try_iter());
    }
}

impl Drop for HttpTarget {
    fn drop(&mut self) {
        // Closing the job channel ends the idle workers.
        self.jobs = None;
    }
}

impl Target for HttpTarget {
    fn name(&self) -> &'static str {
        "http"
    }

    fn now_us(&self) -> u64 {
        self.shared.clock.now_us()
    }

    fn submit(&mut self, job: Job) {
        // Claim an idle worker for this job; if none is idle, start one. A
        // count of jobs in flight would over-count here (their ends reach the
        // scheduler late when it is busy) and start threads nobody needs.
        let claimed = self
            .shared
            .idle_workers
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        if !claimed {
            self.spawn_worker();
        }
        if let Some(tx) = &self.jobs {
            // The receiver lives as long as the target.
            let _ = tx.send(job);
        }
    }

    fn wait(&mut self, deadline_us: Option<u64>, done: &mut Vec<Done>) {
        wait_for_ends(&self.done_rx, &self.shared.clock, deadline_us, done);
    }

    fn cancel_in_flight(&mut self, done: &mut Vec<Done>) -> usize {
        // Ends that arrived meanwhile are real results, not cancellations.
        self.take_ready(done);
        cancel_registered(&self.shared.registry, self.now_us(), done)
    }

    fn workers(&self) -> usize {
        self.workers
    }
}

/// The target a run on a server uses: either client, one set of rules.
pub enum ServerTarget {
    Evented(evented::EventedTarget),
    Blocking(HttpTarget),
}

impl ServerTarget {
    fn get(&self) -> &dyn Target {
        match self {
            ServerTarget::Evented(t) => t,
            ServerTarget::Blocking(t) => t,
        }
    }

    fn get_mut(&mut self) -> &mut dyn Target {
        match self {
            ServerTarget::Evented(t) => t,
            ServerTarget::Blocking(t) => t,
        }
    }
}

impl Target for ServerTarget {
    fn name(&self) -> &'static str {
        self.get().name()
    }
    fn now_us(&self) -> u64 {
        self.get().now_us()
    }
    fn submit(&mut self, job: Job) {
        self.get_mut().submit(job)
    }
    fn wait(&mut self, deadline_us: Option<u64>, done: &mut Vec<Done>) {
        self.get_mut().wait(deadline_us, done)
    }
    fn cancel_in_flight(&mut self, done: &mut Vec<Done>) -> usize {
        self.get_mut().cancel_in_flight(done)
    }
    fn workers(&self) -> usize {
        self.get().workers()
    }
    fn connections(&self, requests: u64) -> Option<Connections> {
        self.get().connections(requests)
    }
}

/// A worker's life: take jobs until the channel closes.
fn work(shared: &Shared, jobs: &Receiver<Job>, done: &Sender<Done>) {
    while let Ok(job) = jobs.recv() {
        let end = if shared.stop.load(Ordering::Relaxed) {
            Some(Done {
                t_end_us: shared.clock.now_us(),
                job,
                outcome: None,
            })
        } else {
            send(shared, job)
        };
        // Idle again before the scheduler hears of it, so a job it submits
        // on receiving `end` finds this worker.
        shared.idle_workers.fetch_add(1, Ordering::AcqRel);
        if let Some(end) = end {
            if done.send(end).is_err() {
                return;
            }
        }
    }
}

/// Sends one job; `None` when the drain's end already reported it.
fn send(shared: &Shared, mut job: Job) -> Option<Done> {
    let turn = &shared.trace.turns[job.row];
    let mut history = job.history.take();
    let req = shared.builder.build(
        turn,
        shared.trace.session_id(turn),
        job.seq,
        history.as_mut(),
    );
    let entry = shared.registry.insert(job, shared.clock.now_us());
    let outcome = client::execute(
        &shared.agent,
        &client::Outgoing {
            url: &shared.url,
            headers: &req.headers,
            body: &req.body,
            keep_text: history.is_some(),
            max_event_bytes: shared.max_event_bytes,
        },
        shared.clock,
        &entry.live,
    );
    shared.registry.remove(entry.job.seq);
    if !entry.claim() {
        return None;
    }
    if let Some(h) = &mut history {
        h.push(json!({"role": "assistant", "content": outcome.text}));
    }
    let mut job = entry.job.clone();
    job.history = history;
    Some(Done {
        job,
        t_end_us: outcome.t_end_us,
        outcome: Some(outcome),
    })
}

/// A target's wait, for both clients: the first end by `deadline_us` (on
/// `clock`; `None`: until one ends), then every end already there.
fn wait_for_ends(
    rx: &Receiver<Done>,
    clock: &Clock,
    deadline_us: Option<u64>,
    done: &mut Vec<Done>,
) {
    let first = match deadline_us {
        Some(d) => rx.recv_deadline(clock.at(d)).ok(),
        None => rx.recv().ok(),
    };
    if let Some(d) = first {
        done.push(d);
        done.extend(rx.try_iter());
    }
}

/// The drain time ran out: every request still registered ends now as
/// cancelled, with what it had measured; returns how many.
fn cancel_registered(registry: &Registry, now: u64, done: &mut Vec<Done>) -> usize {
    let entries = registry.claim_all();
    for e in &entries {
        done.push(Done {
            job: e.job.clone(),
            t_end_us: now,
            outcome: Some(Outcome::cancelled(
                e.t_send_us,
                e.live.first_us(),
                e.live.chunks.load(Ordering::Relaxed),
                now,
            )),
        });
    }
    entries.len()
}
