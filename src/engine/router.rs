//! Which of N workers (engine models, or servers at `--url A,B,…`) a
//! request goes to. The router sees only what a client in front of the
//! workers sees: what it sent where, and which of those requests ended. The
//! same router decides in virtual time (the engine cluster) and against
//! real servers, so the two make the same decisions on the same events.
//!
//! - `round-robin`: request k goes to worker k mod N.
//! - `least-loaded`: the fewest requests in flight.
//! - `prefix`: Dynamo's KV router cost (lib/llm/src/kv_router/scheduler.rs,
//!   `DefaultWorkerSelector::select_worker`), lowest wins:
//!   `cost_w = overlap_weight × prefill_blocks_w + active_blocks_w`, where
//!   `prefill_blocks_w = (prompt tokens − overlap_w × B) / B` is the prompt
//!   worker w would compute (overlap_w: the request's leading trace blocks
//!   the router believes w holds, B tokens each) and `active_blocks_w` the
//!   blocks (prompt and output) of the requests in flight on w. What w holds
//!   is the router's picture, as Dynamo's approximate mode (`--no-kv-events`)
//!   keeps it: every block of every request sent to w, least recently sent
//!   forgotten first past w's KV capacity.
//!
//! Ties go to the lowest worker index (Dynamo at temperature 0 takes the
//! minimum too, in hash-map order).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How a router chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RouterKind {
    /// Request k to worker k mod N.
    RoundRobin,
    /// The worker with the fewest requests in flight.
    LeastLoaded,
    /// Dynamo's KV-router cost: the prompt left to compute (weighted by
    /// --router-overlap-weight) plus the blocks in flight.
    Prefix,
}

impl RouterKind {
    pub fn name(self) -> &'static str {
        match self {
            RouterKind::RoundRobin => "round-robin",
            RouterKind::LeastLoaded => "least-loaded",
            RouterKind::Prefix => "prefix",
        }
    }
}

/// Dynamo's default `--kv-overlap-score-weight`.
pub const DEFAULT_OVERLAP_WEIGHT: f64 = 1.0;

/// Routing options (mc-replay: `--engine-workers`, or `--url A,B,…`).
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Routing")]
pub struct RouterArgs {
    /// Engine models behind one router, on one virtual clock (no --url):
    /// each request goes to one of them (--router). 1 is the single engine.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=MAX_WORKERS))]
    pub engine_workers: u64,

    /// How a request's worker is chosen, among --engine-workers engines or
    /// the servers of `--url A,B,…`: `round-robin`, `least-loaded` (fewest
    /// in flight) or `prefix` (Dynamo's KV router: overlap weight × prompt
    /// blocks left to compute + blocks in flight, from the rows' hash_ids)
    /// [default: round-robin].
    #[arg(long, value_enum, value_name = "POLICY")]
    pub router: Option<RouterKind>,

    /// `prefix`: the weight of the prompt left to compute against the
    /// blocks in flight (Dynamo's --kv-overlap-score-weight); 0 routes on
    /// load alone.
    #[arg(long, value_name = "W", default_value_t = DEFAULT_OVERLAP_WEIGHT,
          value_parser = crate::options::non_negative)]
    pub router_overlap_weight: f64,

    /// `prefix`: each worker's KV capacity in tokens, for the router's
    /// picture of what it holds (blocks sent longest ago are forgotten
    /// first) [default: --kv-tokens (the engine model's, or the one given
    /// for servers), else unbounded].
    #[arg(long, value_name = "TOKENS")]
    pub router_kv_tokens: Option<u64>,
}

/// The router's options, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct RouterParams {
    pub kind: RouterKind,
    pub workers: usize,
    pub overlap_weight: f64,
    /// Tokens per trace block (the router's block).
    pub block_tokens: u64,
    /// Per worker, the blocks the router's picture holds; `None`: all.
    pub cache_blocks: Option<u64>,
}

/// The most workers one router spreads over.
pub const MAX_WORKERS: u64 = 1024;

impl RouterArgs {
    /// The router for `workers` workers (`--engine-workers`, or the
    /// servers listed), or `None` for a single worker. `kv_tokens`: the
    /// default capacity of a worker's cache; `has_hash_ids`: whether any row
    /// names its blocks (prefix routing needs them).
    pub fn params(
        &self,
        workers: u64,
        block_tokens: u64,
        kv_tokens: Option<u64>,
        has_hash_ids: bool,
    ) -> Result<Option<RouterParams>> {
        if workers == 0 {
            return Err(Error::usage(
                "--engine-workers 0: give at least 1 (1 is the single engine model)",
            ));
        }
        if workers > MAX_WORKERS {
            return Err(Error::usage(format!(
                "{workers} workers: at most {MAX_WORKERS} are supported behind one router"
            )));
        }
        let kind = self.router.unwrap_or(RouterKind::RoundRobin);
        if workers == 1 {
            return Ok(None);
        }
        if kind == RouterKind::Prefix && !has_hash_ids {
            return Err(Error::usage(
                "--router prefix scores workers by the blocks the rows share (their hash_ids); \
                 no row of this trace has hash_ids: use --router least-loaded or round-robin",
            ));
        }
        let bt = block_tokens.max(1);
        let cache_blocks = match self.router_kv_tokens.or(kv_tokens) {
            Some(t) if t < bt => {
                return Err(Error::usage(format!(
                    "--router-kv-tokens {t} holds no block of the trace's {bt} tokens; give at \
                     least {bt}"
                )))
            }
            Some(t) => Some(t / bt),
            None => None,
        };
        Ok(Some(RouterParams {
            kind,
            workers: workers as usize,
            overlap_weight: self.router_overlap_weight,
            block_tokens: bt,
            cache_blocks,
        }))
    }
}

/// The chained hashes of a row's trace blocks: block k's names its whole
/// prefix, so two rows match on a block only if they match on all before.
pub fn prefix_hashes(hash_ids: &[u64]) -> Vec<u64> {
    let mut prev = 0x726f_7574_6572_0001;
    hash_ids
        .iter()
        .map(|&id| {
            prev = super::blocks::chain(prev, id, 0);
            prev
        })
        .collect()
}

/// A request as the router sees it.
#[derive(Debug, Clone, Copy)]
pub struct RouteRequest<'a> {
    /// [`prefix_hashes`] of its hash_ids.
    pub prefix: &'a [u64],
    pub prompt_tokens: u64,
    pub output_tokens: u64,
}

/// Where a request went, and what the router expected of it; hand it back
/// to [`Router::ended`] when the request ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub worker: usize,
    /// Prompt tokens the router believed the worker holds.
    pub overlap_tokens: u64,
    /// The blocks the request counts toward its worker's load.
    pub blocks: u64,
}

/// A set of block hashes, least recently sent forgotten first.
#[derive(Debug, Default)]
struct Lru {
    stamp: HashMap<u64, u64>,
    order: BTreeMap<u64, u64>,
    tick: u64,
}

impl Lru {
    fn leading(&self, prefix: &[u64]) -> usize {
        prefix
            .iter()
            .take_while(|h| self.stamp.contains_key(h))
            .count()
    }

    /// Marks `prefix` sent now, in order (its first blocks the oldest, as
    /// the engine frees a request's blocks), then forgets past `cap`.
    fn send(&mut self, prefix: &[u64], cap: Option<u64>) {
        for &h in prefix {
            self.tick += 1;
            if let Some(old) = self.stamp.insert(h, self.tick) {
                self.order.remove(&old);
            }
            self.order.insert(self.tick, h);
        }
        if let Some(cap) = cap {
            while self.stamp.len() as u64 > cap {
                let Some((_, h)) = self.order.pop_first() else {
                    break;
                };
                self.stamp.remove(&h);
            }
        }
    }
}

#[derive(Debug, Default)]
struct Worker {
    in_flight: u64,
    active_blocks: u64,
    cache: Lru,
    routed: u64,
    prompt_tokens: u64,
    overlap_tokens: u64,
    peak_in_flight: u64,
}

pub struct Router {
    params: RouterParams,
    next: usize,
    workers: Vec<Worker>,
}

impl Router {
    pub fn new(params: RouterParams) -> Router {
        Router {
            workers: (0..params.workers.max(1))
                .map(|_| Worker::default())
                .collect(),
            next: 0,
            params,
        }
    }

    pub fn params(&self) -> &RouterParams {
        &self.params
    }

    /// The prompt tokens of `r` that worker `w` holds, in the router's picture.
    fn overlap(&self, w: usize, r: &RouteRequest) -> u64 {
        let held = self.workers[w].cache.leading(r.prefix) as u64 * self.params.block_tokens;
        held.min(r.prompt_tokens)
    }

    /// The cost of sending `r` to `w` under `prefix` (lower is better).
    pub fn cost(&self, w: usize, r: &RouteRequest) -> f64 {
        let b = self.params.block_tokens as f64;
        let prefill_blocks = (r.prompt_tokens - self.overlap(w, r)) as f64 / b;
        self.params.overlap_weight * prefill_blocks + self.workers[w].active_blocks as f64
    }

    /// Chooses the worker for `r` and counts `r` on it.
    pub fn choose(&mut self, r: &RouteRequest) -> Decision {
        let n = self.workers.len();
        let worker = match self.params.kind {
            RouterKind::RoundRobin => {
                let w = self.next % n;
                self.next = self.next.wrapping_add(1);
                w
            }
            RouterKind::LeastLoaded => (0..n)
                .min_by_key(|&w| (self.workers[w].in_flight, w))
                .unwrap_or(0),
            RouterKind::Prefix => {
                let mut best = (0, f64::INFINITY);
                for w in 0..n {
                    let c = self.cost(w, r);
                    // Strictly lower: a tie stays with the lower index.
                    if c < best.1 {
                        best = (w, c);
                    }
                }
                best.0
            }
        };
        let overlap_tokens = self.overlap(worker, r);
        let blocks = (r.prompt_tokens + r.output_tokens).div_ceil(self.params.block_tokens);
        let cap = self.params.cache_blocks;
        let s = &mut self.workers[worker];
        s.in_flight += 1;
        s.peak_in_flight = s.peak_in_flight.max(s.in_flight);
        s.active_blocks += blocks;
        s.routed += 1;
        s.prompt_tokens += r.prompt_tokens;
        s.overlap_tokens += overlap_tokens;
        s.cache.send(r.prefix, cap);
        Decision {
            worker,
            overlap_tokens,
            blocks,
        }
    }

    /// The request `d` was made for ended (or failed).
    pub fn ended(&mut self, d: &Decision) {
        let s = &mut self.workers[d.worker];
        s.in_flight = s.in_flight.saturating_sub(1);
        s.active_blocks = s.active_blocks.saturating_sub(d.blocks);
    }

    /// The router's part of the summary; `measured`: per worker, what the
    /// worker itself reported (requests, prompt and cached tokens, busy
    /// time), and the workers' names (servers' URLs).
    pub fn report(&self, measured: &[Measured], names: &[String]) -> RouterReport {
        let workers = self
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let m = measured.get(i).cloned().unwrap_or_default();
                WorkerReport {
                    worker: i as u64,
                    name: names.get(i).cloned(),
                    routed: w.routed,
                    peak_in_flight: w.peak_in_flight,
                    expected_hit_rate: ratio(w.overlap_tokens, w.prompt_tokens),
                    requests: m.requests,
                    prompt_tokens: m.prompt_tokens,
                    cached_tokens: m.cached_tokens,
                    hit_rate: ratio(m.cached_tokens, m.prompt_tokens),
                    busy_ms: m.busy_ms,
                }
            })
            .collect::<Vec<_>>();
        let (p, c) = workers.iter().fold((0, 0), |(p, c), w| {
            (p + w.prompt_tokens, c + w.cached_tokens)
        });
        let (rp, ro) = self.workers.iter().fold((0, 0), |(p, o), w| {
            (p + w.prompt_tokens, o + w.overlap_tokens)
        });
        RouterReport {
            policy: self.params.kind,
            overlap_weight: self.params.overlap_weight,
            cache_blocks: self.params.cache_blocks,
            block_tokens: self.params.block_tokens,
            hit_rate: ratio(c, p),
            expected_hit_rate: ratio(ro, rp),
            workers,
        }
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// What a worker itself did, for the router's report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measured {
    pub requests: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// Time in engine steps (the engine model only).
    pub busy_ms: Option<f64>,
}

/// The summary's `router` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterReport {
    pub policy: RouterKind,
    pub overlap_weight: f64,
    /// Per worker, the blocks of the router's picture; absent: unbounded.
    pub cache_blocks: Option<u64>,
    /// Tokens per router block (the trace's block size).
    pub block_tokens: u64,
    /// The cluster's prefix-cache hit rate: cached / prompt tokens over
    /// every worker, as the workers reported them.
    pub hit_rate: f64,
    /// The hit rate the router's picture predicted.
    pub expected_hit_rate: f64,
    pub workers: Vec<WorkerReport>,
}

/// One worker's line of the router's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerReport {
    /// Its index: the result line's `worker`.
    pub worker: u64,
    /// The server's URL (`--url A,B,…`), its secrets hidden.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Requests the router sent it.
    pub routed: u64,
    /// The most it had in flight at once.
    pub peak_in_flight: u64,
    /// Of the prompt tokens routed to it, the share the router believed it held.
    pub expected_hit_rate: f64,
    /// Requests that ended with usage (a server's) or finished (the engine's).
    pub requests: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub hit_rate: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_ms: Option<f64>,
}

/// The router's section of the summary table.
pub fn table(r: &RouterReport) -> String {
    let weight = match r.policy {
        RouterKind::Prefix => format!(" (overlap weight {})", r.overlap_weight),
        _ => String::new(),
    };
    let mut s = format!(
        "router        {} over {} workers{weight}: cluster hit rate {:.2}% \
         (router expected {:.2}%)\n",
        r.policy.name(),
        r.workers.len(),
        r.hit_rate * 100.0,
        r.expected_hit_rate * 100.0,
    );
    for w in &r.workers {
        s.push_str(&format!(
            "  worker {:<3} {:>7} routed  peak {:>4} in flight  hit rate {:>6.2}% (expected {:>6.2}%){}{}\n",
            w.worker,
            w.routed,
            w.peak_in_flight,
            w.hit_rate * 100.0,
            w.expected_hit_rate * 100.0,
            w.busy_ms
                .map_or(String::new(), |b| format!("  busy {:.1} s", b / 1000.0)),
            w.name.as_deref().map_or(String::new(), |n| format!("  {n}")),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(kind: RouterKind, workers: usize, weight: f64) -> RouterParams {
        RouterParams {
            kind,
            workers,
            overlap_weight: weight,
            block_tokens: 16,
            cache_blocks: None,
        }
    }

    fn req(prefix: &[u64], prompt: u64) -> RouteRequest<'_> {
        RouteRequest {
            prefix,
            prompt_tokens: prompt,
            output_tokens: 16,
        }
    }

    #[test]
    fn round_robin_cycles_and_least_loaded_takes_the_fewest_in_flight() {
        let p = prefix_hashes(&[1]);
        let mut r = Router::new(params(RouterKind::RoundRobin, 3, 1.0));
        let ws: Vec<usize> = (0..5).map(|_| r.choose(&req(&p, 16)).worker).collect();
        assert_eq!(ws, [0, 1, 2, 0, 1]);
        let mut r = Router::new(params(RouterKind::LeastLoaded, 3, 1.0));
        let a = r.choose(&req(&p, 16));
        let b = r.choose(&req(&p, 16));
        let c = r.choose(&req(&p, 16));
        assert_eq!((a.worker, b.worker, c.worker), (0, 1, 2));
        r.ended(&b);
        // Worker 1 has none in flight now; the others one each.
        assert_eq!(r.choose(&req(&p, 16)).worker, 1);
        // All at one: the lowest index.
        assert_eq!(r.choose(&req(&p, 16)).worker, 0);
    }

    #[test]
    fn prefix_overlap_beats_load_when_the_weight_says_so() {
        // Worker 0 was sent a 10-block prompt (160 tokens, 16 output: 11
        // blocks in flight). A new 20-block prompt sharing those 10 blocks:
        //   weight 1: cost0 = 1·(320−160)/16 + 11 = 21, cost1 = 320/16 + 0 = 20 -> 1
        //   weight 2: cost0 = 2·10 + 11 = 31, cost1 = 2·20 = 40 -> 0
        let ids: Vec<u64> = (1..=20).collect();
        let long = prefix_hashes(&ids);
        for (weight, want, cost0, cost1) in [(1.0, 1, 21.0, 20.0), (2.0, 0, 31.0, 40.0)] {
            let mut r = Router::new(params(RouterKind::Prefix, 2, weight));
            let first = r.choose(&req(&long[..10], 160));
            assert_eq!(first.worker, 0, "a tie goes to the lowest index");
            assert_eq!((first.overlap_tokens, first.blocks), (0, 11));
            let q = req(&long, 320);
            assert_eq!(r.cost(0, &q), cost0);
            assert_eq!(r.cost(1, &q), cost1);
            let d = r.choose(&q);
            assert_eq!(d.worker, want, "weight {weight}");
            assert_eq!(d.overlap_tokens, if want == 0 { 160 } else { 0 });
        }
        // Once the first request ended, overlap wins at weight 1 too:
        // cost0 = 10 + 0 < cost1 = 20.
        let mut r = Router::new(params(RouterKind::Prefix, 2, 1.0));
        let first = r.choose(&req(&long[..10], 160));
        r.ended(&first);
        assert_eq!(r.choose(&req(&long, 320)).worker, 0);
    }

    #[test]
    fn weight_zero_routes_on_load_alone() {
        let ids: Vec<u64> = (1..=8).collect();
        let p = prefix_hashes(&ids);
        let mut r = Router::new(params(RouterKind::Prefix, 2, 0.0));
        assert_eq!(r.choose(&req(&p, 128)).worker, 0);
        // Worker 0 holds all 8 blocks, but has 9 blocks in flight.
        assert_eq!(r.choose(&req(&p, 128)).worker, 1);
    }

    #[test]
    fn the_picture_forgets_the_blocks_sent_longest_ago() {
        let a = prefix_hashes(&[1, 2, 3]);
        let b = prefix_hashes(&[7, 8]);
        let mut lru = Lru::default();
        lru.send(&a, Some(4));
        assert_eq!(lru.leading(&a), 3);
        // Two more blocks in a capacity of 4: a's first block goes, and with
        // it a's whole prefix match (chained: nothing after a miss counts).
        lru.send(&b, Some(4));
        assert_eq!(lru.leading(&b), 2);
        assert_eq!(lru.leading(&a), 0);
        assert_eq!(lru.stamp.len(), 4);
    }

    #[test]
    fn chained_hashes_match_only_on_a_shared_prefix() {
        let a = prefix_hashes(&[1, 2, 3]);
        let b = prefix_hashes(&[9, 2, 3]);
        assert!(a.iter().all(|h| !b.contains(h)));
        assert_eq!(prefix_hashes(&[1, 2]), a[..2]);
    }

    #[test]
    fn bad_options_are_usage_errors() {
        let args = RouterArgs {
            router: Some(RouterKind::Prefix),
            ..RouterArgs::default()
        };
        let code = |r: Result<Option<RouterParams>>| r.unwrap_err().exit_code() as i32;
        assert_eq!(code(args.params(0, 16, None, true)), 2);
        assert_eq!(code(args.params(2, 16, None, false)), 2);
        assert_eq!(args.params(1, 16, None, false).unwrap(), None);
        let p = args.params(4, 512, Some(467_000), true).unwrap().unwrap();
        assert_eq!(p.cache_blocks, Some(467_000 / 512));
    }
}
