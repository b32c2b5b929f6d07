//! Several servers behind mc-replay's own router (`--url A,B,… --router`):
//! data-parallel replicas without a router of their own. Each request goes
//! to the server the router chooses (the same [`Router`] the engine
//! cluster uses in virtual time, so both decide alike on the same events);
//! its job carries the choice into the result line (`worker`). The servers'
//! targets share one clock, so every time is on the run's one zero.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::engine_target::DEFAULT_OUTPUT_TOKENS;
use super::http::client::Clock;
use super::http::ServerTarget;
use super::target::{Done, Job, Target};
use super::trace::Trace;
use crate::engine::router::{prefix_hashes, Decision, Measured, RouteRequest, Router};

/// How long a wait blocks on one server before looking at the others: an
/// end on another server is noticed at most this late (its times are the
/// server's own, measured as it arrived; only a session's next turn or a
/// freed concurrency slot can wait this long).
const SLICE_US: u64 = 1_000;

pub struct RoutedTarget {
    servers: Vec<ServerTarget>,
    /// The servers' URLs, secrets hidden, for the summary.
    names: Vec<String>,
    router: Router,
    trace: Arc<Trace>,
    block_size: u64,
    clock: Clock,
    decisions: HashMap<u64, Decision>,
    measured: Vec<Measured>,
    /// The server the next wait blocks on (each in turn).
    turn: usize,
}

impl RoutedTarget {
    pub fn new(
        servers: Vec<ServerTarget>,
        names: Vec<String>,
        router: Router,
        trace: Arc<Trace>,
        block_size: u64,
        clock: Clock,
    ) -> RoutedTarget {
        let n = servers.len();
        RoutedTarget {
            servers,
            names,
            router,
            trace,
            block_size,
            clock,
            decisions: HashMap::new(),
            measured: vec![Measured::default(); n],
            turn: 0,
        }
    }

    /// The router hears of the ends in `done[from..]`; each server's
    /// reported prompt and cached tokens are summed.
    fn ended(&mut self, done: &[Done]) {
        for d in done {
            let Some(dec) = self.decisions.remove(&d.job.seq) else {
                continue;
            };
            self.router.ended(&dec);
            let usage = d.outcome.as_ref().and_then(|o| o.usage);
            if let Some(u) = usage.filter(|u| u.prompt_tokens.is_some()) {
                let m = &mut self.measured[dec.worker];
                m.requests += 1;
                m.prompt_tokens += u.prompt_tokens.unwrap_or(0);
                m.cached_tokens += u.cached_tokens.unwrap_or(0);
            }
        }
    }
}

impl Target for RoutedTarget {
    fn name(&self) -> &'static str {
        "http"
    }

    fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    fn submit(&mut self, mut job: Job) {
        let turn = &self.trace.turns[job.row];
        let prefix = prefix_hashes(&turn.hash_ids);
        let d = self.router.choose(&RouteRequest {
            prefix: &prefix,
            prompt_tokens: turn.intended_input(self.block_size).unwrap_or(0),
            output_tokens: turn.output_length.unwrap_or(DEFAULT_OUTPUT_TOKENS),
        });
        job.worker = Some(d.worker as u32);
        self.decisions.insert(job.seq, d);
        self.servers[d.worker].submit(job);
    }

    fn wake_on_end(&mut self, on: bool) {
        for s in &mut self.servers {
            s.wake_on_end(on);
        }
    }

    fn wait(&mut self, deadline_us: Option<u64>, done: &mut Vec<Done>) {
        let from = done.len();
        loop {
            // What has ended anywhere (a deadline already past returns at once).
            for s in &mut self.servers {
                s.wait(Some(0), done);
            }
            if done.len() > from {
                break;
            }
            let now = self.clock.now_us();
            if deadline_us.is_some_and(|d| now >= d) {
                break;
            }
            let until = now.saturating_add(SLICE_US);
            let until = deadline_us.map_or(until, |d| d.min(until));
            let n = self.servers.len();
            self.servers[self.turn % n].wait(Some(until), done);
            self.turn = (self.turn + 1) % n;
            if done.len() > from {
                break;
            }
        }
        let ended: Vec<Done> = done.drain(from..).collect();
        self.ended(&ended);
        done.extend(ended);
    }

    fn cancel_in_flight(&mut self, done: &mut Vec<Done>) -> usize {
        let from = done.len();
        let n = self
            .servers
            .iter_mut()
            .map(|s| s.cancel_in_flight(done))
            .sum();
        let ended: Vec<Done> = done.drain(from..).collect();
        self.ended(&ended);
        done.extend(ended);
        n
    }

    fn workers(&self) -> usize {
        self.servers.iter().map(Target::workers).sum()
    }

    fn routing(&self) -> Option<Value> {
        serde_json::to_value(self.router.report(&self.measured, &self.names)).ok()
    }
}
