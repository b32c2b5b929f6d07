//! The engine model as a replay target: the scheduler's jobs become engine
//! requests, its waits advance the engine's virtual clock (no sleeping), and
//! each finished request becomes an outcome with the same fields a real
//! server's has (lag 0: the model is never late to receive).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::error::ReplayError;
use super::outcome::{ErrorKind, Failure, Outcome, StreamUsage};
use super::target::{Done, Job, Target};
use super::trace::{Content, Trace};
use crate::engine::router::{
    prefix_hashes, Decision, Measured, RouteRequest, Router, RouterParams,
};
use crate::engine::{
    row_blocks, text_blocks, token_blocks, Cluster, EngineParams, EngineRequest, Finished,
};
use crate::error::Result;
use crate::results::Summary;

/// Output tokens for a row without `output_length` (what mc-mock and the
/// OpenAI completions API default to).
pub const DEFAULT_OUTPUT_TOKENS: u64 = 16;

pub struct EngineTarget {
    trace: Arc<Trace>,
    /// One engine, or `--engine-workers` of them on one clock.
    engine: Cluster,
    /// With more than one engine: who chooses each request's.
    router: Option<Router>,
    trace_block: u64,
    tokenizer: Option<tokenizers::Tokenizer>,
    in_flight: HashMap<u64, (Job, Option<Decision>)>,
    finished: Vec<(usize, Finished)>,
    wall_start: Instant,
}

impl EngineTarget {
    pub fn new(
        trace: Arc<Trace>,
        params: EngineParams,
        router: Option<RouterParams>,
        trace_block: u64,
        tokenizer: Option<tokenizers::Tokenizer>,
    ) -> EngineTarget {
        let workers = router.as_ref().map_or(1, |r| r.workers);
        EngineTarget {
            trace,
            engine: Cluster::new(params, workers),
            router: router.map(Router::new),
            trace_block,
            tokenizer,
            in_flight: HashMap::new(),
            finished: Vec::new(),
            wall_start: Instant::now(),
        }
    }

    /// The row's prompt as engine blocks, and its length in tokens.
    fn prompt(&self, row: usize) -> (Vec<u64>, u64) {
        let turn = &self.trace.turns[row];
        let eb = self.engine.params().block_size;
        let text = match &turn.content {
            Content::Synth => {
                let len = turn.intended_input(self.trace_block).unwrap_or(0);
                let blocks = row_blocks(&turn.hash_ids, len, self.trace_block, eb, turn.line);
                return (blocks, len);
            }
            Content::Text(t) => t.clone(),
            Content::Messages { messages, .. } => message_text(messages),
        };
        let (blocks, words) = match &self.tokenizer {
            Some(tok) => match tok.encode(text.as_str(), false) {
                Ok(enc) => {
                    let ids: Vec<u64> = enc.get_ids().iter().map(|&i| u64::from(i)).collect();
                    let n = ids.len() as u64;
                    (token_blocks(&ids, eb), n)
                }
                Err(_) => text_blocks(&text, eb),
            },
            None => text_blocks(&text, eb),
        };
        // A stated input_length wins over the count (the blocks still name
        // the text, so equal texts share them).
        (blocks, turn.input_length.unwrap_or(words))
    }

    fn outcome(f: &Finished) -> Outcome {
        if let Some(why) = &f.rejected {
            // What a real server's refusal looks like in a result line
            // (`answer::status_message`): vLLM answers a request it can
            // never run (past the context limit) with a 400.
            return Outcome {
                http_status: Some(400),
                t_send_us: f.arrival_us,
                t_end_us: f.end_us,
                error: Some(Failure::new(
                    ErrorKind::Http4xx,
                    format!("HTTP 400 Bad Request: {why}"),
                )),
                ..Outcome::default()
            };
        }
        Outcome {
            http_status: None,
            t_send_us: f.arrival_us,
            t_first_us: f.first_token_us,
            t_last_us: f.token_us.last().copied(),
            t_end_us: f.end_us,
            chunks: f.token_us.len() as u64,
            itl_us: f.token_us.windows(2).map(|w| w[1] - w[0]).collect(),
            usage: Some(StreamUsage {
                prompt_tokens: Some(f.prompt_tokens),
                completion_tokens: Some(f.output_tokens),
                cached_tokens: Some(f.cached_tokens),
            }),
            finish_reason: Some("length".into()),
            text: String::new(),
            error: None,
            resends: 0,
        }
    }
}

/// The text of chat messages: string contents and the text parts of list
/// contents, one message per line.
fn message_text(messages: &[Value]) -> String {
    let mut out = String::new();
    for m in messages {
        match m.get("content") {
            Some(Value::String(s)) => out.push_str(s),
            Some(Value::Array(parts)) => {
                for p in parts {
                    if let Some(t) = p.get("text").and_then(Value::as_str) {
                        out.push_str(t);
                        out.push(' ');
                    }
                }
            }
            _ => {}
        }
        out.push('\n');
    }
    out
}

impl Target for EngineTarget {
    fn name(&self) -> &'static str {
        "engine"
    }

    fn now_us(&self) -> u64 {
        self.engine.now_us()
    }

    fn submit(&mut self, mut job: Job) {
        let (blocks, prompt_tokens) = self.prompt(job.row);
        let turn = &self.trace.turns[job.row];
        let output_tokens = turn.output_length.unwrap_or(DEFAULT_OUTPUT_TOKENS);
        let decision = self.router.as_mut().map(|r| {
            let prefix = prefix_hashes(&turn.hash_ids);
            r.choose(&RouteRequest {
                prefix: &prefix,
                prompt_tokens,
                output_tokens,
            })
        });
        let worker = decision.map_or(0, |d| d.worker);
        job.worker = decision.map(|d| d.worker as u32);
        self.engine.add(
            worker,
            EngineRequest {
                id: job.seq,
                // Due at t_sched; the model receives it then (no client
                // lag). If a step was running, it waits for the next one.
                arrival_us: job.t_sched_us.min(self.engine.now_us()),
                blocks,
                prompt_tokens,
                output_tokens,
            },
        );
        self.in_flight.insert(job.seq, (job, decision));
    }

    fn virtual_clock(&self) -> bool {
        true
    }

    fn wait(&mut self, deadline_us: Option<u64>, done: &mut Vec<Done>) {
        if deadline_us.is_none() && self.in_flight.is_empty() {
            return;
        }
        self.engine.advance(deadline_us, &mut self.finished);
        for (_, f) in self.finished.drain(..) {
            let Some((job, decision)) = self.in_flight.remove(&f.id) else {
                continue;
            };
            if let (Some(r), Some(d)) = (self.router.as_mut(), decision) {
                r.ended(&d);
            }
            done.push(Done {
                t_end_us: f.end_us,
                outcome: Some(Self::outcome(&f)),
                job,
            });
        }
    }

    fn cancel_in_flight(&mut self, done: &mut Vec<Done>) -> usize {
        let now = self.engine.now_us();
        let mut jobs: Vec<Job> = self.in_flight.drain().map(|(_, (j, _))| j).collect();
        jobs.sort_by_key(|j| j.seq);
        let n = jobs.len();
        for job in jobs {
            let outcome = Outcome::cancelled(job.t_sched_us, None, 0, now);
            done.push(Done {
                job,
                t_end_us: now,
                outcome: Some(outcome),
            });
        }
        n
    }

    fn routing(&self) -> Option<Value> {
        let r = self.router.as_ref()?;
        let measured: Vec<Measured> = (0..self.engine.workers())
            .map(|i| {
                let s = self.engine.engine(i).stats();
                Measured {
                    requests: s.requests_finished,
                    prompt_tokens: s.prompt_tokens,
                    cached_tokens: s.cached_tokens,
                    busy_ms: Some(s.busy_ms),
                }
            })
            .collect();
        serde_json::to_value(r.report(&measured, &[])).ok()
    }

    fn report(&self) -> Option<Value> {
        let out = EngineReport {
            params: self.engine.params().describe(),
            stats: self.engine.stats(),
            wall_ms: self.wall_start.elapsed().as_secs_f64() * 1000.0,
        };
        serde_json::to_value(out).ok()
    }
}

/// The summary's `engine` object.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineReport {
    pub params: crate::engine::ParamsOut,
    pub stats: crate::engine::EngineStats,
    /// Wall-clock time the simulation took.
    pub wall_ms: f64,
}

/// The engine section of the summary table.
pub fn table(r: &EngineReport) -> String {
    let s = &r.stats;
    let p = &r.params;
    format!(
        "engine model  {} ({}): kv {} tokens in blocks of {}, step budget {} tokens, {} seqs\n\
         \x20 prefix-cache hit rate   {:.2}% ({} of {} prompt tokens)\n\
         \x20 preemptions             {}\n\
         \x20 batch size              mean {:.1}  p99 {}\n\
         \x20 tokens per step         mean {:.1}  p99 {}\n\
         \x20 KV use                  mean {:.1}%  max {:.1}%\n\
         \x20 steps                   {} ({:.1} ms busy)\n\
         \x20 simulated duration      {:.3} s (wall time {:.3} s)\n",
        p.profile,
        p.model,
        p.kv_tokens,
        p.block_size,
        p.max_batched_tokens,
        p.max_seqs,
        s.hit_rate * 100.0,
        s.cached_tokens,
        s.prompt_tokens,
        s.preemptions,
        s.batch_size_mean,
        s.batch_size_p99,
        s.tokens_per_step_mean,
        s.tokens_per_step_p99,
        s.kv_use_mean * 100.0,
        s.kv_use_max * 100.0,
        s.steps,
        s.busy_ms,
        s.simulated_ms / 1000.0,
        r.wall_ms / 1000.0,
    )
}

impl EngineTarget {
    /// The target for a trace: the engine, and the tokenizer for rows of
    /// literal text when `--tokenizer` is given; `because`: why the engine
    /// model (`no --url`, `--engine`).
    pub fn prepared(
        trace: Arc<Trace>,
        block_size: u64,
        params: EngineParams,
        router: Option<RouterParams>,
        tokenizer: Option<&str>,
        because: &str,
    ) -> Result<EngineTarget> {
        let literal = trace
            .turns
            .iter()
            .any(|t| !matches!(t.content, Content::Synth));
        let tokenizer = match tokenizer {
            Some(spec) if literal => Some(
                crate::tokenizer::resolve(spec)
                    .map_err(|e| ReplayError::Tokenizer {
                        spec: spec.to_string(),
                        source: e.into(),
                    })?
                    .tokenizer,
            ),
            _ => None,
        };
        let many = router.as_ref().map_or(String::new(), |r| {
            format!(" x {} behind a {} router", r.workers, r.kind.name())
        });
        eprintln!(
            "mc-replay: {because}: simulating {}{many} in virtual time; pass --url to measure a real server",
            params.profile.name
        );
        Ok(EngineTarget::new(
            trace, params, router, block_size, tokenizer,
        ))
    }
}

impl EngineReport {
    /// The engine section of a summary, when it has one.
    pub fn of(summary: &Summary) -> Option<EngineReport> {
        summary
            .engine
            .clone()
            .and_then(|v| serde_json::from_value(v).ok())
    }
}
