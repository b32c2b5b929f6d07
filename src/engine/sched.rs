//! The engine: a vLLM-V1-style step loop over the KV cache.
//!
//! Each step schedules running requests first, in admission order (a decode
//! is one token; an unfinished prefill takes its next chunk), then waiting
//! requests in arrival order, within the token budget and the sequence cap.
//! When a running request needs a block and none is free, the most recently
//! admitted running request is preempted (its blocks are freed but keep
//! their hashes, so on readmission it recomputes only what was evicted), and
//! no waiting request is admitted in that step.

use std::collections::VecDeque;

use super::kv::KvCache;
use super::profile::{StepModel, StepShape};
use super::stats::{EngineStats, Tally};
use super::{EngineParams, PrefixCache};
use crate::hash::splitmix64;

/// vLLM's refusal of a request past the context limit, word for word
/// (`OpenAIServing._validate_input`), so a client that matches it (to
/// shorten the prompt and retry) matches the model's too.
pub fn context_length_message(max_model_len: u64, prompt: u64, max_tokens: u64) -> String {
    format!(
        "This model's maximum context length is {max_model_len} tokens. However, you requested \
         {} tokens ({prompt} in the messages, {max_tokens} in the completion). Please reduce \
         the length of the messages or completion.",
        prompt.saturating_add(max_tokens)
    )
}

/// A request as the engine sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineRequest {
    /// The caller's name for it, returned in [`Finished`].
    pub id: u64,
    /// When it arrived (µs on the engine clock). It may be earlier than the
    /// clock (it arrived mid-step): it then waits for the next step, and its
    /// latencies still count from here.
    pub arrival_us: u64,
    /// Chained hashes of its prompt's engine blocks (see
    /// [`row_blocks`](super::row_blocks)); only full blocks are used.
    pub blocks: Vec<u64>,
    pub prompt_tokens: u64,
    /// Exactly this many tokens are generated.
    pub output_tokens: u64,
}

/// A request the engine is done with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub id: u64,
    pub arrival_us: u64,
    /// When a step first scheduled it.
    pub first_scheduled_us: u64,
    pub first_token_us: Option<u64>,
    /// The time of every output token (the end of the step that made it).
    pub token_us: Vec<u64>,
    pub end_us: u64,
    pub prompt_tokens: u64,
    /// Prompt tokens served from the prefix cache at first admission.
    pub cached_tokens: u64,
    pub output_tokens: u64,
    pub preemptions: u32,
    /// Set when the request can never fit in the KV cache; nothing ran.
    pub rejected: Option<String>,
}

struct Req {
    id: u64,
    arrival_us: u64,
    /// When a step may first take it: its arrival plus the model's
    /// request latency (`serving`'s `t_req`), else its arrival.
    ready_us: u64,
    /// Block hashes: the prompt's full blocks, then (made lazily) hashes
    /// unique to this request for blocks holding its own output.
    hashes: Vec<u64>,
    unique: u64,
    prompt: u64,
    output: u64,
    generated: u64,
    /// Tokens whose KV is computed.
    computed: u64,
    blocks: Vec<u32>,
    /// Leading blocks already named in the cache.
    registered: usize,
    admitted: bool,
    cached_tokens: u64,
    first_scheduled_us: Option<u64>,
    token_us: Vec<u64>,
    preemptions: u32,
}

impl Req {
    fn tokens(&self) -> u64 {
        self.prompt + self.generated
    }

    /// Makes sure the first `n` block hashes exist.
    fn ensure_hashes(&mut self, n: usize) {
        while self.hashes.len() < n {
            let k = self.hashes.len() as u64;
            let prev = self.hashes.last().copied().unwrap_or(0);
            self.hashes.push(super::blocks::chain(prev, self.unique, k));
        }
    }
}

/// See [`Engine::load`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EngineLoad {
    pub running: u64,
    pub waiting: u64,
    /// KV blocks held by running requests / all blocks.
    pub kv_usage: f64,
    pub kv_blocks: u64,
    pub queried_tokens: u64,
    pub cached_tokens: u64,
    pub preemptions: u64,
}

/// One scheduled request in a step.
#[derive(Clone, Copy)]
struct Slot {
    req: usize,
    /// Tokens computed in this step.
    n: u64,
}

pub struct Engine {
    params: EngineParams,
    model: StepModel,
    bs: u64,
    kv: KvCache,
    now: u64,
    reqs: Vec<Option<Req>>,
    free_slots: Vec<usize>,
    waiting: VecDeque<usize>,
    running: Vec<usize>,
    rejected: Vec<Finished>,
    sched: Vec<Slot>,
    added: u64,
    tally: Tally,
    /// (request id, time) of every token made, when asked for.
    token_log: Option<Vec<(u64, u64)>>,
}

impl Engine {
    pub fn new(params: EngineParams) -> Engine {
        let bs = params.block_size.max(1);
        let blocks = (params.kv_tokens / bs) as usize;
        Engine {
            model: params.profile.model,
            bs,
            kv: KvCache::new(blocks),
            now: 0,
            reqs: Vec::new(),
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            rejected: Vec::new(),
            sched: Vec::new(),
            added: 0,
            tally: Tally::default(),
            token_log: None,
            params,
        }
    }

    pub fn params(&self) -> &EngineParams {
        &self.params
    }

    pub fn now_us(&self) -> u64 {
        self.now
    }

    /// Requests added and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.waiting.len() + self.running.len() + self.rejected.len()
    }

    pub fn stats(&self) -> EngineStats {
        self.tally.stats()
    }

    /// The state a live server's gauges show now, and its counters so far
    /// (prompt tokens looked up in the prefix cache at first admission, and
    /// found there), for mc-mock's `/metrics`.
    pub fn load(&self) -> EngineLoad {
        let cap = self.kv.capacity();
        EngineLoad {
            running: self.running.len() as u64,
            waiting: self.waiting.len() as u64,
            kv_usage: if cap == 0 {
                0.0
            } else {
                self.kv.used() as f64 / cap as f64
            },
            kv_blocks: cap as u64,
            queried_tokens: self.tally.prompt_tokens,
            cached_tokens: self.tally.cached_tokens,
            preemptions: self.tally.preemptions,
        }
    }

    /// From now on, keep every token's (request id, time) as it is made,
    /// for [`drain_tokens`](Engine::drain_tokens): a live server streams
    /// tokens before their request finishes.
    pub fn log_tokens(&mut self) {
        self.token_log.get_or_insert_with(Vec::new);
    }

    /// Moves the tokens made since the last call into `into`.
    pub fn drain_tokens(&mut self, into: &mut Vec<(u64, u64)>) {
        if let Some(log) = &mut self.token_log {
            into.append(log);
        }
    }

    /// Why a request of this size could never run, or `None` if it fits:
    /// its prompt and output pass the context limit (vLLM's message, which
    /// vLLM answers with a 400 before the request reaches its engine), or
    /// need more KV blocks than there are.
    pub fn never_fits(&self, prompt_tokens: u64, output_tokens: u64) -> Option<String> {
        if let Some(why) = self.past_context(prompt_tokens, output_tokens) {
            return Some(why);
        }
        let prompt = prompt_tokens.max(1);
        let need = (prompt + output_tokens).div_ceil(self.bs);
        (need > self.kv.capacity() as u64).then(|| {
            format!(
                "needs {need} KV blocks of {} tokens for {} prompt + {} output tokens; \
                 the engine has {} (raise --kv-tokens)",
                self.bs,
                prompt,
                output_tokens,
                self.kv.capacity()
            )
        })
    }

    /// vLLM's refusal when the prompt plus `max_tokens` (what the request
    /// asks for, which may be more than it generates) passes the context
    /// limit, or `None`.
    pub fn past_context(&self, prompt_tokens: u64, max_tokens: u64) -> Option<String> {
        let max = self.params.max_model_len?;
        let prompt = prompt_tokens.max(1);
        (prompt.saturating_add(max_tokens) > max)
            .then(|| context_length_message(max, prompt, max_tokens))
    }

    /// Queues a request (add requests in arrival order: the queue is
    /// served in the order added). One that can never fit in the KV cache (prompt and
    /// output together need more blocks than there are) is rejected: it
    /// comes back from the next [`advance`](Engine::advance) at once.
    pub fn add(&mut self, r: EngineRequest) {
        self.added += 1;
        // An empty prompt still has one position to compute (vLLM refuses
        // empty prompts; a trace row with input_length 0 gets one token).
        let prompt = r.prompt_tokens.max(1);
        if let Some(why) = self.never_fits(r.prompt_tokens, r.output_tokens) {
            self.tally.rejected += 1;
            let at = self.now.max(r.arrival_us);
            self.rejected.push(Finished {
                id: r.id,
                arrival_us: r.arrival_us,
                first_scheduled_us: at,
                first_token_us: None,
                token_us: Vec::new(),
                end_us: at,
                prompt_tokens: r.prompt_tokens,
                cached_tokens: 0,
                output_tokens: 0,
                preemptions: 0,
                rejected: Some(why),
            });
            return;
        }
        let mut hashes = r.blocks;
        // Only blocks the prompt fills are shared; the block holding the
        // prompt's end also holds this request's output.
        hashes.truncate((prompt / self.bs) as usize);
        let req = Req {
            id: r.id,
            arrival_us: r.arrival_us,
            ready_us: r.arrival_us.saturating_add(self.model.request_latency_us()),
            hashes,
            unique: splitmix64(0x756e_6971 ^ self.added),
            prompt,
            output: r.output_tokens,
            generated: 0,
            computed: 0,
            blocks: Vec::new(),
            registered: 0,
            admitted: false,
            cached_tokens: 0,
            first_scheduled_us: None,
            token_us: Vec::new(),
            preemptions: 0,
        };
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.reqs[s] = Some(req);
                s
            }
            None => {
                self.reqs.push(Some(req));
                self.reqs.len() - 1
            }
        };
        self.waiting.push_back(slot);
    }

    /// Runs steps until the clock reaches `until_us` or a request finishes,
    /// whichever is first (`None`: until a request finishes). Finished
    /// requests are appended to `out`. A step is atomic, so the clock may
    /// end past `until_us`. With nothing to run, the clock jumps to
    /// `until_us` (or to the next arrival before it).
    pub fn advance(&mut self, until_us: Option<u64>, out: &mut Vec<Finished>) {
        if !self.rejected.is_empty() {
            out.append(&mut self.rejected);
            return;
        }
        loop {
            if until_us.is_some_and(|u| self.now >= u) {
                return;
            }
            // Requests are served in the order added (callers add them in
            // arrival order), so the head of the queue is the next arrival.
            // (A constant request latency keeps that order.)
            let next = self.waiting.front().map(|&i| self.req(i).ready_us);
            if !self.running.is_empty() || next.is_some_and(|a| a <= self.now) {
                if self.step(out) {
                    return;
                }
                continue;
            }
            // Idle: jump to the next arrival, or to the deadline.
            match (next, until_us) {
                (Some(a), Some(u)) => self.now = a.min(u),
                (Some(a), None) => self.now = a,
                (None, Some(u)) => {
                    self.now = u;
                    return;
                }
                (None, None) => return,
            }
        }
    }

    /// When this engine's next step starts, or `None` with nothing to
    /// run: at its clock with requests running, else at the first waiting
    /// request's arrival (not before its clock). The cluster's event loop
    /// (`super::cluster`) steps the engine whose next step is first.
    pub fn next_step_at(&self) -> Option<u64> {
        if !self.running.is_empty() {
            return Some(self.now);
        }
        let &i = self.waiting.front()?;
        Some(self.req(i).ready_us.max(self.now))
    }

    /// Runs one step at [`next_step_at`](Engine::next_step_at) (nothing
    /// without work); what it finished is appended to `out`. Returns
    /// whether a request finished.
    pub fn run_step(&mut self, out: &mut Vec<Finished>) -> bool {
        let Some(at) = self.next_step_at() else {
            return false;
        };
        self.now = at;
        self.step(out)
    }

    /// Moves the requests [`add`](Engine::add) refused into `out`; returns
    /// whether there were any (they end at once, before any step).
    pub fn take_rejected(&mut self, out: &mut Vec<Finished>) -> bool {
        let any = !self.rejected.is_empty();
        out.append(&mut self.rejected);
        any
    }

    /// An engine with nothing to run moves its clock to `t` (as
    /// [`advance`](Engine::advance) jumps an idle engine to its deadline);
    /// a busy one keeps its own.
    pub fn idle_until(&mut self, t: u64) {
        if self.next_step_at().is_none() {
            self.now = self.now.max(t);
        }
    }

    pub(crate) fn tally(&self) -> &Tally {
        &self.tally
    }

    fn req(&self, i: usize) -> &Req {
        match &self.reqs[i] {
            Some(r) => r,
            None => unreachable!("scheduled request slots are always occupied"),
        }
    }

    fn req_mut(&mut self, i: usize) -> &mut Req {
        match &mut self.reqs[i] {
            Some(r) => r,
            None => unreachable!("scheduled request slots are always occupied"),
        }
    }

    /// One step. Returns true when a request finished.
    fn step(&mut self, out: &mut Vec<Finished>) -> bool {
        let mut budget = self.params.max_batched_tokens.max(1);
        self.sched.clear();
        let preempted = self.schedule_running(&mut budget);
        if !preempted {
            self.schedule_waiting(&mut budget);
        }
        if self.sched.is_empty() {
            // Nothing fits although nothing else runs: only possible with
            // a degenerate configuration. Reject the head instead of spinning.
            if let Some(i) = self.waiting.pop_front() {
                let r = self.take(i);
                self.tally.rejected += 1;
                out.push(Finished {
                    id: r.id,
                    arrival_us: r.arrival_us,
                    first_scheduled_us: self.now,
                    first_token_us: None,
                    token_us: Vec::new(),
                    end_us: self.now,
                    prompt_tokens: r.prompt,
                    cached_tokens: 0,
                    output_tokens: 0,
                    preemptions: r.preemptions,
                    rejected: Some("the engine could not schedule it".into()),
                });
                return true;
            }
            return false;
        }
        let shape = self.shape();
        let ms = self.model.step_ms(&shape);
        let dur = ((ms * 1000.0).round() as u64).max(1);
        let start = self.now;
        let end = start.saturating_add(dur);
        self.tally.step(
            start,
            dur,
            shape.requests,
            shape.tokens,
            self.kv.used() as f64 / self.kv.capacity().max(1) as f64,
        );
        self.now = end;
        let mut finished_any = false;
        for k in 0..self.sched.len() {
            let Slot { req: i, n } = self.sched[k];
            let bs = self.bs;
            let Some(r) = self.reqs[i].as_mut() else {
                unreachable!("scheduled request slots are always occupied")
            };
            r.computed += n;
            // Blocks this step filled become reusable.
            let full = (r.computed / bs) as usize;
            if full > r.registered {
                r.ensure_hashes(full);
                for b in r.registered..full {
                    self.kv.register(r.blocks[b], r.hashes[b]);
                }
                r.registered = full;
            }
            if r.computed < r.tokens() {
                continue;
            }
            // Caught up: the step sampled a token.
            if r.generated < r.output {
                r.generated += 1;
                r.token_us.push(end);
                if let Some(log) = &mut self.token_log {
                    log.push((r.id, end));
                }
            }
            if r.generated >= r.output {
                finished_any = true;
                self.finish(i, out);
            }
        }
        finished_any
    }

    fn shape(&self) -> StepShape {
        let mut s = StepShape {
            requests: self.sched.len() as u64,
            ..StepShape::default()
        };
        for slot in &self.sched {
            let r = self.req(slot.req);
            s.tokens += slot.n;
            // Admitted in this very step for the first time (a request
            // readmitted after a preemption was first scheduled earlier).
            if r.first_scheduled_us == Some(self.now) && r.preemptions == 0 {
                s.new_requests += 1;
            }
            if slot.n == 1 && r.computed >= r.prompt {
                s.decodes += 1;
                s.decode_context += r.tokens();
            } else {
                let (n, p) = (slot.n as f64, r.computed as f64);
                s.prefill_tokens += slot.n;
                s.attention_pairs += n * (p + n / 2.0);
            }
        }
        // Dynamo's u: the decodes' context tokens over the KV capacity in
        // tokens (not the blocks held, which also count prefills and
        // partly filled blocks).
        let capacity_tokens = self.kv.capacity() as u64 * self.bs;
        s.kv_fraction = s.decode_context as f64 / capacity_tokens.max(1) as f64;
        s
    }

    /// Running requests, in admission order. Returns whether one was preempted.
    fn schedule_running(&mut self, budget: &mut u64) -> bool {
        let mut preempted = false;
        let mut k = 0;
        while k < self.running.len() && *budget > 0 {
            let i = self.running[k];
            let r = self.req(i);
            let n = (r.tokens() - r.computed).min(*budget);
            let want = (r.computed + n).div_ceil(self.bs) as usize - r.blocks.len();
            let mut fits = true;
            while want > self.kv.free() {
                // Out of blocks: the most recently admitted request goes.
                let Some(victim) = self.running.pop() else {
                    fits = false;
                    break;
                };
                self.preempt(victim);
                preempted = true;
                if victim == i {
                    fits = false;
                    break;
                }
            }
            if !fits {
                break;
            }
            let mut blocks = std::mem::take(&mut self.req_mut(i).blocks);
            self.kv.allocate(want, &mut blocks);
            self.req_mut(i).blocks = blocks;
            self.sched.push(Slot { req: i, n });
            *budget -= n;
            k += 1;
        }
        preempted
    }

    /// Waiting requests in arrival order, while budget, sequences and
    /// blocks allow.
    fn schedule_waiting(&mut self, budget: &mut u64) {
        let max_seqs = self.params.max_seqs.max(1) as usize;
        while *budget > 0 && self.running.len() < max_seqs {
            let Some(&i) = self.waiting.front() else {
                return;
            };
            let now = self.now;
            let bs = self.bs;
            let r = self.req_mut(i);
            if r.ready_us > now {
                return;
            }
            // A hit covers whole blocks and at most all tokens but the last.
            let max_hit = ((r.tokens() - 1) / bs) as usize;
            r.ensure_hashes(max_hit);
            let Some(r) = self.reqs[i].as_ref() else {
                unreachable!("scheduled request slots are always occupied")
            };
            // Taking a cached block that sits on the free list costs a free
            // block, like a new one.
            let (hit, hit_free) = self.kv.watched_prefix(r.unique, &r.hashes[..max_hit]);
            debug_assert_eq!(
                (hit, hit_free),
                (
                    self.kv.longest_prefix(&r.hashes[..max_hit]),
                    self.kv.free_among(&r.hashes[..hit])
                )
            );
            let computed = hit as u64 * bs;
            let n = (r.tokens() - computed).min(*budget);
            let new_blocks = (computed + n).div_ceil(bs) as usize - hit;
            // vLLM's admission gate (`scheduler_reserve_full_isl`, on by
            // default): the whole sequence so far must fit in the free
            // blocks, not just this step's chunk, or chunked prefill
            // over-admits long prompts and then preempts them. Only the
            // chunk's blocks are taken now.
            let whole = r.tokens().div_ceil(bs) as usize - hit;
            if whole + hit_free > self.kv.free() {
                return;
            }
            self.kv.unwatch();
            self.waiting.pop_front();
            let mut r = self.take_keep(i);
            self.kv.take_cached(&r.hashes[..hit], &mut r.blocks);
            self.kv.allocate(new_blocks, &mut r.blocks);
            r.computed = computed;
            r.registered = hit;
            if !r.admitted {
                r.admitted = true;
                r.cached_tokens = computed;
                r.first_scheduled_us = Some(now);
                r.token_us.reserve_exact(r.output as usize);
                self.tally.prompt_tokens += r.prompt;
                self.tally.cached_tokens += computed;
            }
            self.reqs[i] = Some(r);
            self.running.push(i);
            self.sched.push(Slot { req: i, n });
            *budget -= n;
        }
    }

    /// Frees a running request's blocks (they stay cached) and puts it at the
    /// head of the waiting queue, to be recomputed.
    fn preempt(&mut self, i: usize) {
        self.tally.preemptions += 1;
        let mut r = self.take_keep(i);
        self.kv.release(&r.blocks);
        r.blocks.clear();
        r.computed = 0;
        r.registered = 0;
        r.preemptions += 1;
        self.reqs[i] = Some(r);
        self.waiting.push_front(i);
    }

    fn finish(&mut self, i: usize, out: &mut Vec<Finished>) {
        self.running.retain(|&j| j != i);
        let r = self.take(i);
        if self.params.prefix_cache == PrefixCache::LastPrompt {
            self.kv.forget_free();
        }
        // In prompt order: a request's first blocks are the least recently
        // used of its blocks and are evicted first (mc-analyze's LRU).
        self.kv.release(&r.blocks);
        self.tally.finished += 1;
        out.push(Finished {
            id: r.id,
            arrival_us: r.arrival_us,
            first_scheduled_us: r.first_scheduled_us.unwrap_or(self.now),
            first_token_us: r.token_us.first().copied(),
            end_us: self.now,
            prompt_tokens: r.prompt,
            cached_tokens: r.cached_tokens,
            output_tokens: r.generated,
            preemptions: r.preemptions,
            token_us: r.token_us,
            rejected: None,
        });
    }

    /// Removes a request from its slot for good.
    fn take(&mut self, i: usize) -> Req {
        self.free_slots.push(i);
        self.take_keep(i)
    }

    /// Moves a request out of its slot; the caller puts it back.
    fn take_keep(&mut self, i: usize) -> Req {
        match self.reqs[i].take() {
            Some(r) => r,
            None => unreachable!("scheduled request slots are always occupied"),
        }
    }
}
