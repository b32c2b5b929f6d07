//! N engines on one virtual clock: a discrete-event loop over their steps.
//!
//! Each engine's steps are atomic (decided at their start, their tokens
//! and ends at their end), so the loop always runs the step that starts
//! first (lowest engine index on a tie), and hands back a finished request
//! only once no engine has a step starting before its end: the caller
//! (the router, the schedule) then sees every end in time order, and a
//! request it adds at that time is seen by every step that starts after.
//! With one engine this is [`Engine::advance`] exactly: the same steps, the
//! same ends, the same clock after every call.

use super::sched::{Engine, EngineRequest, Finished};
use super::stats::{EngineStats, Tally};
use super::EngineParams;

pub struct Cluster {
    engines: Vec<Engine>,
    /// Per engine: what its last step finished, not yet handed back (they
    /// end at the engine's clock).
    pending: Vec<Vec<Finished>>,
    /// The cluster's clock: the last time handed back.
    now: u64,
}

impl Cluster {
    /// `workers` engines of the same shape (at least one).
    pub fn new(params: EngineParams, workers: usize) -> Cluster {
        let n = workers.max(1);
        Cluster {
            engines: (0..n).map(|_| Engine::new(params.clone())).collect(),
            pending: (0..n).map(|_| Vec::new()).collect(),
            now: 0,
        }
    }

    pub fn workers(&self) -> usize {
        self.engines.len()
    }

    pub fn params(&self) -> &EngineParams {
        self.engines[0].params()
    }

    pub fn now_us(&self) -> u64 {
        self.now
    }

    pub fn engine(&self, worker: usize) -> &Engine {
        &self.engines[worker]
    }

    /// Queues `r` on engine `worker` (see [`Engine::add`]).
    pub fn add(&mut self, worker: usize, r: EngineRequest) {
        self.engines[worker].add(r);
    }

    /// Requests added and not yet handed back.
    pub fn in_flight(&self) -> usize {
        self.engines.iter().map(Engine::in_flight).sum::<usize>()
            + self.pending.iter().map(Vec::len).sum::<usize>()
    }

    /// Runs steps until the clock reaches `until_us` or requests end,
    /// whichever is first (`None`: until requests end), as
    /// [`Engine::advance`] does for one engine; what ended is appended to
    /// `out` with its engine's index, all at one time (the clock's).
    pub fn advance(&mut self, until_us: Option<u64>, out: &mut Vec<(usize, Finished)>) {
        let mut scratch = Vec::new();
        let mut refused = false;
        for (i, e) in self.engines.iter_mut().enumerate() {
            if e.take_rejected(&mut scratch) {
                refused = true;
                out.extend(scratch.drain(..).map(|f| (i, f)));
            }
        }
        if refused {
            return;
        }
        loop {
            let ends = (0..self.engines.len())
                .filter(|&i| !self.pending[i].is_empty())
                .map(|i| self.engines[i].now_us())
                .min();
            // The first step to start; the lowest index on a tie.
            let next = self
                .engines
                .iter()
                .enumerate()
                .filter_map(|(i, e)| e.next_step_at().map(|t| (t, i)))
                .min();
            if let Some(end) = ends {
                if next.is_none_or(|(t, _)| end <= t) {
                    for (i, p) in self.pending.iter_mut().enumerate() {
                        if !p.is_empty() && self.engines[i].now_us() == end {
                            out.extend(p.drain(..).map(|f| (i, f)));
                        }
                    }
                    self.now = self.now.max(end);
                    self.idle_until_now();
                    return;
                }
            }
            match next {
                Some((t, i)) if until_us.is_none_or(|u| t < u) => {
                    self.engines[i].run_step(&mut self.pending[i]);
                }
                _ => {
                    // Nothing starts before the deadline. The clock moves to
                    // it, or to the earliest engine clock past it (a step
                    // that ran over it, as one engine's clock does).
                    if let Some(u) = until_us {
                        let least = self.engines.iter().map(Engine::now_us).min().unwrap_or(0);
                        self.now = self.now.max(u).max(least);
                        self.idle_until_now();
                    }
                    return;
                }
            }
        }
    }

    /// Idle engines catch up with the cluster's clock: a request added now
    /// starts no earlier than now.
    fn idle_until_now(&mut self) {
        for e in &mut self.engines {
            e.idle_until(self.now);
        }
    }

    /// The cluster's statistics: every engine's sums together.
    pub fn stats(&self) -> EngineStats {
        let mut t = Tally::default();
        for e in &self.engines {
            t.merge(e.tally());
        }
        t.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::row_blocks;

    fn req(id: u64, arrival_us: u64, ids: &[u64], prompt: u64, output: u64) -> EngineRequest {
        EngineRequest {
            id,
            arrival_us,
            blocks: row_blocks(ids, prompt, 16, 16, id),
            prompt_tokens: prompt,
            output_tokens: output,
        }
    }

    #[test]
    fn two_engines_hand_back_ends_in_time_order() {
        // A long request on engine 0 and a short one on engine 1, both at 0:
        // the short one ends first although engine 0 is stepped first.
        let mut c = Cluster::new(EngineParams::default(), 2);
        c.add(0, req(1, 0, &[1, 2, 3], 48, 50));
        c.add(1, req(2, 0, &[4], 16, 2));
        let mut out = Vec::new();
        let mut times = Vec::new();
        while c.in_flight() > 0 {
            out.clear();
            c.advance(None, &mut out);
            for (w, f) in &out {
                assert_eq!(f.end_us, c.now_us());
                times.push((f.end_us, *w, f.id));
            }
        }
        assert_eq!(times.len(), 2);
        assert_eq!((times[0].1, times[0].2), (1, 2));
        assert!(times[0].0 < times[1].0);
        // Each alone on its engine: the same times as one engine alone.
        let mut e = Engine::new(EngineParams::default());
        e.add(req(2, 0, &[4], 16, 2));
        let mut one = Vec::new();
        e.advance(None, &mut one);
        assert_eq!(one[0].end_us, times[0].0);
        assert_eq!(c.stats().requests_finished, 2);
    }

    #[test]
    fn a_deadline_before_any_step_moves_the_clock_and_idle_engines() {
        let mut c = Cluster::new(EngineParams::default(), 3);
        let mut out = Vec::new();
        c.advance(Some(5_000), &mut out);
        assert!(out.is_empty());
        assert_eq!(c.now_us(), 5_000);
        // A request added now on an idle engine starts now, not at its old clock.
        c.add(2, req(7, 5_000, &[9], 16, 1));
        assert_eq!(c.engine(2).next_step_at(), Some(5_000));
    }
}
