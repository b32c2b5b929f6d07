//! The workers: each takes a job, builds its body, sends it, writes its
//! result line and tells the scheduler it is done. Blocking I/O on a pool of
//! threads that grows to the peak number of requests in flight.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use serde_json::{json, Value};

use super::body::{self, BodyOptions, Prompt};
use super::client::{self, Clock, Live};
use super::metrics::{Identity, RequestResult, Slo, Tally};
use super::prompt::Synth;
use super::trace::{Content, Trace, Turn};
use crate::error::Error;
use crate::jsonl::SendOutput;

/// One request to send.
pub struct Job {
    pub seq: u64,
    pub turn: usize,
    pub t_sched_us: u64,
    pub warmup: bool,
    /// `--turns delta`: the conversation so far (messages).
    pub history: Option<Vec<Value>>,
}

/// A job's end, for the scheduler.
pub struct Done {
    pub turn: usize,
    pub t_end_us: u64,
    /// False when the run was stopped before the job was sent.
    pub sent: bool,
    pub history: Option<Vec<Value>>,
}

/// Counters for the progress line.
#[derive(Default)]
pub struct Counters {
    pub sent: AtomicU64,
    pub done: AtomicU64,
    pub errors: AtomicU64,
    pub last_lag_us: AtomicU64,
}

/// Where results go: the result lines and the tally behind the summary.
pub struct Sink {
    out: SendOutput,
    pub tally: Tally,
    slo: Option<Slo>,
    /// The first error writing results (a closed stdout ends the run).
    pub write_error: Option<Error>,
    line: Vec<u8>,
}

impl Sink {
    pub fn new(out: SendOutput, slo: Option<Slo>) -> Sink {
        Sink {
            out,
            tally: Tally::default(),
            slo,
            write_error: None,
            line: Vec::new(),
        }
    }

    fn push(&mut self, r: &RequestResult, itl_us: &[u64]) -> bool {
        self.tally.add(r, itl_us, self.slo.as_ref());
        if self.write_error.is_some() {
            return false;
        }
        self.line.clear();
        // Serialising plain structs into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut self.line, r);
        // The output is line-buffered: each result is out once written.
        match self.out.write_line(&self.line) {
            Ok(()) => true,
            Err(e) => {
                self.write_error = Some(e);
                false
            }
        }
    }

    pub fn flush(&mut self) -> crate::error::Result<()> {
        match self.write_error.take() {
            Some(e) => Err(e),
            None => self.out.flush(),
        }
    }
}

/// A request between its start and its result.
struct InFlight {
    job_seq: u64,
    turn: usize,
    t_sched_us: u64,
    t_send_us: u64,
    warmup: bool,
    live: Live,
    /// Set by whoever writes the result: the worker, or the drain's end.
    claimed: AtomicBool,
}

/// Everything the workers share.
pub struct Context {
    pub trace: Trace,
    pub synth: Synth,
    pub body: BodyOptions,
    pub url: String,
    /// `--header` and the API key.
    pub headers: Vec<(String, String)>,
    pub delta: bool,
    pub agent: ureq::Agent,
    pub clock: Clock,
    pub run_id: String,
    pub sink: Mutex<Sink>,
    pub counters: Counters,
    /// Stop sending: a signal, or results can no longer be written.
    pub stop: Arc<AtomicBool>,
    /// Workers waiting for a job and not yet claimed by the scheduler.
    pub idle_workers: AtomicUsize,
    in_flight: Mutex<HashMap<u64, Arc<InFlight>>>,
}

/// Locks a mutex even if a worker panicked while holding it: the data it
/// guards (counters, a writer) stays usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Context {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        trace: Trace,
        synth: Synth,
        body: BodyOptions,
        url: String,
        headers: Vec<(String, String)>,
        delta: bool,
        agent: ureq::Agent,
        clock: Clock,
        sink: Sink,
        stop: Arc<AtomicBool>,
    ) -> Context {
        Context {
            trace,
            synth,
            body,
            url,
            headers,
            delta,
            agent,
            clock,
            run_id: format!("{:x}", crate::hash::splitmix64(wall_clock_ns())),
            sink: Mutex::new(sink),
            counters: Counters::default(),
            stop,
            idle_workers: AtomicUsize::new(0),
            in_flight: Mutex::new(HashMap::new()),
        }
    }

    pub fn sink(&self) -> MutexGuard<'_, Sink> {
        lock(&self.sink)
    }

    fn identity(&self, turn: &Turn, seq: u64, warmup: bool) -> Identity {
        Identity {
            line: turn.line,
            session_id: self.trace.session_id(turn).map(str::to_string),
            turn: turn.turn,
            request_id: format!("{}-{seq}", self.run_id),
            warmup,
            input_tokens: turn.intended_input(self.synth.block_size()),
            output_tokens: turn.output_length,
        }
    }

    /// Writes a `cancelled` result for every request still in flight.
    pub fn cancel_in_flight(&self) -> usize {
        let now = self.clock.us(Instant::now());
        let pending: Vec<Arc<InFlight>> = lock(&self.in_flight).values().cloned().collect();
        let mut n = 0;
        for f in pending {
            if f.claimed.swap(true, Ordering::AcqRel) {
                continue;
            }
            let turn = &self.trace.turns[f.turn];
            let first = match f.live.first_us_plus1.load(Ordering::Relaxed) {
                0 => None,
                v => Some(v - 1),
            };
            let r = RequestResult::cancelled(
                self.identity(turn, f.job_seq, f.warmup),
                f.t_sched_us,
                f.t_send_us,
                first,
                f.live.chunks.load(Ordering::Relaxed),
                now,
            );
            self.sink().push(&r, &[]);
            n += 1;
        }
        n
    }
}

/// A header value from trace text: bytes outside printable ASCII (which
/// HTTP forbids or mangles) are percent-encoded, as is `%` itself, so any
/// session id reaches the server unambiguously.
pub fn header_safe(s: &str) -> String {
    if s.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'%') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for b in s.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn wall_clock_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A worker's life: take jobs until the channel closes.
pub fn work(ctx: Arc<Context>, jobs: crossbeam_channel::Receiver<Job>, done: Sender<Done>) {
    let mut body = Vec::new();
    let mut text = String::new();
    loop {
        let job = match jobs.recv() {
            Ok(j) => j,
            Err(_) => return,
        };
        let turn_idx = job.turn;
        let end = if ctx.stop.load(Ordering::Relaxed) {
            Done {
                turn: turn_idx,
                t_end_us: ctx.clock.us(Instant::now()),
                sent: false,
                history: job.history,
            }
        } else {
            send(&ctx, job, &mut body, &mut text)
        };
        // Idle again before the scheduler hears of it, so a job it sends on
        // receiving `end` finds this worker.
        ctx.idle_workers.fetch_add(1, Ordering::AcqRel);
        if done.send(end).is_err() {
            return;
        }
    }
}

fn send(ctx: &Context, job: Job, body: &mut Vec<u8>, text: &mut String) -> Done {
    let turn = &ctx.trace.turns[job.turn];
    body.clear();
    text.clear();
    let mut history = job.history;
    let prompt_text: Option<&str> = match &turn.content {
        Content::Synth => {
            ctx.synth.prompt(
                turn.line,
                turn.intended_input(ctx.synth.block_size()).unwrap_or(0),
                &turn.hash_ids,
                text,
            );
            Some(text.as_str())
        }
        Content::Text(t) => Some(t.as_str()),
        Content::Messages { .. } => None,
    };
    match (&mut history, &turn.content) {
        (Some(h), Content::Messages { messages, tools }) => {
            h.extend(messages.iter().cloned());
            body::write(&ctx.body, turn, Prompt::Messages(h, tools.as_ref()), body);
        }
        (Some(h), _) => {
            h.push(json!({"role": "user", "content": prompt_text.unwrap_or_default()}));
            body::write(&ctx.body, turn, Prompt::Messages(h, None), body);
        }
        (None, Content::Messages { messages, tools }) => {
            body::write(
                &ctx.body,
                turn,
                Prompt::Messages(messages, tools.as_ref()),
                body,
            );
        }
        (None, _) => {
            body::write(
                &ctx.body,
                turn,
                Prompt::Text(prompt_text.unwrap_or_default()),
                body,
            );
        }
    }
    let mut headers = Vec::with_capacity(ctx.headers.len() + 3);
    headers.push((
        "x-request-id".to_string(),
        format!("{}-{}", ctx.run_id, job.seq),
    ));
    if let Some(s) = ctx.trace.session_id(turn) {
        headers.push(("x-session-id".to_string(), header_safe(s)));
    }
    headers.push(("x-trace-line".to_string(), turn.line.to_string()));
    headers.extend(ctx.headers.iter().cloned());

    let entry = Arc::new(InFlight {
        job_seq: job.seq,
        turn: job.turn,
        t_sched_us: job.t_sched_us,
        t_send_us: ctx.clock.us(Instant::now()),
        warmup: job.warmup,
        live: Live::default(),
        claimed: AtomicBool::new(false),
    });
    lock(&ctx.in_flight).insert(job.seq, entry.clone());
    ctx.counters.sent.fetch_add(1, Ordering::Relaxed);
    let req = client::Request {
        url: &ctx.url,
        headers: &headers,
        body,
        keep_text: history.is_some(),
    };
    let outcome = client::execute(&ctx.agent, &req, ctx.clock, &entry.live);
    lock(&ctx.in_flight).remove(&job.seq);

    let t_send_us = ctx.clock.us(outcome.t_send);
    ctx.counters
        .last_lag_us
        .store(t_send_us.saturating_sub(job.t_sched_us), Ordering::Relaxed);
    if outcome.error.is_some() {
        ctx.counters.errors.fetch_add(1, Ordering::Relaxed);
    }
    if !entry.claimed.swap(true, Ordering::AcqRel) {
        let r = RequestResult::new(
            ctx.identity(turn, job.seq, job.warmup),
            job.t_sched_us,
            &outcome,
            ctx.clock,
        );
        if !ctx.sink().push(&r, &outcome.itl_us) {
            ctx.stop.store(true, Ordering::Relaxed);
        }
    }
    ctx.counters.done.fetch_add(1, Ordering::Relaxed);
    if let Some(h) = &mut history {
        h.push(json!({"role": "assistant", "content": outcome.text}));
    }
    Done {
        turn: job.turn,
        t_end_us: ctx.clock.us(outcome.t_end),
        sent: true,
        history,
    }
}

#[cfg(test)]
mod tests {
    use super::header_safe;

    #[test]
    fn header_values_are_printable_ascii() {
        assert_eq!(header_safe("conv_0 a"), "conv_0 a");
        assert_eq!(header_safe("会"), "%E4%BC%9A");
        assert_eq!(header_safe("a%b\n"), "a%25b%0A");
    }
}
