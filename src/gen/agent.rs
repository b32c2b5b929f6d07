//! `agent`: AIBrix's agent sessions (their config keys and defaults). Each
//! turn is a plan call, parallel tool calls (with latency and retries), and
//! a follow-up call that sees the tool results. Written as Mooncake session
//! rows: the follow-up's `delay` is the tool phase (the slowest branch with
//! its retries), a later plan's `delay` the think time; prompts grow by
//! `context_growth_tokens` per turn and `tool_result_tokens` per tool.

use std::path::PathBuf;

use serde::Deserialize;

use super::rng::Rng;
use super::sessions::extend_ids;
use super::sink::{GenRequest, Sink};
use super::{Common, Ids};
use crate::error::{Error, Result};

#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Example:\n  mc-gen agent --config agent.json --format aibrix > workload.jsonl"
)]
pub struct AgentArgs {
    /// A JSON config with AIBrix's keys (num_sessions, session_arrival_rate_rps,
    /// turns_per_session, parallel_tools, tool_latency_ms, model_latency_ms,
    /// think_time_ms, retry_probability, max_tool_retries,
    /// initial_prompt_tokens, context_growth_tokens, tool_result_tokens,
    /// output_tokens); ranges are N or [MIN, MAX]. Missing keys take
    /// AIBrix's defaults; its `seed` key is ignored for --seed.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Overrides num_sessions.
    #[arg(long, value_name = "N")]
    pub num_sessions: Option<u64>,
}

/// An integer or an inclusive [min, max] range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
enum Range {
    One(u64),
    Two([u64; 2]),
}

impl Range {
    fn bounds(self) -> (u64, u64) {
        match self {
            Range::One(v) => (v, v),
            Range::Two([a, b]) => (a, b),
        }
    }
    fn sample(self, rng: &mut Rng) -> u64 {
        let (a, b) = self.bounds();
        rng.range_inclusive(a, b)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    num_sessions: u64,
    session_arrival_rate_rps: f64,
    turns_per_session: Range,
    parallel_tools: Range,
    tool_latency_ms: Range,
    model_latency_ms: Range,
    think_time_ms: Range,
    retry_probability: f64,
    max_tool_retries: u64,
    initial_prompt_tokens: u64,
    context_growth_tokens: u64,
    tool_result_tokens: u64,
    output_tokens: u64,
    seed: Option<serde_json::Value>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            num_sessions: 10,
            session_arrival_rate_rps: 1.0,
            turns_per_session: Range::One(3),
            parallel_tools: Range::One(2),
            tool_latency_ms: Range::Two([100, 500]),
            model_latency_ms: Range::Two([50, 150]),
            think_time_ms: Range::Two([0, 1000]),
            retry_probability: 0.0,
            max_tool_retries: 1,
            initial_prompt_tokens: 256,
            context_growth_tokens: 128,
            tool_result_tokens: 64,
            output_tokens: 64,
            seed: None,
        }
    }
}

impl AgentConfig {
    /// AIBrix's checks, with the key named.
    fn check(&self) -> std::result::Result<(), String> {
        for (name, r, min) in [
            ("turns_per_session", self.turns_per_session, 1),
            ("parallel_tools", self.parallel_tools, 1),
            ("tool_latency_ms", self.tool_latency_ms, 0),
            ("model_latency_ms", self.model_latency_ms, 0),
            ("think_time_ms", self.think_time_ms, 0),
        ] {
            let (a, b) = r.bounds();
            if a < min || b < a {
                return Err(format!("{name} must satisfy {min} <= min <= max"));
            }
        }
        if self.num_sessions == 0 {
            return Err("num_sessions must be a positive integer".into());
        }
        if !(self.session_arrival_rate_rps > 0.0 && self.session_arrival_rate_rps.is_finite()) {
            return Err("session_arrival_rate_rps must be greater than zero".into());
        }
        if !(0.0..=1.0).contains(&self.retry_probability) {
            return Err("retry_probability must be between zero and one".into());
        }
        if self.initial_prompt_tokens == 0 || self.output_tokens == 0 {
            return Err("initial_prompt_tokens and output_tokens must be positive".into());
        }
        Ok(())
    }
}

pub fn load_config(a: &AgentArgs) -> Result<AgentConfig> {
    let mut c = match &a.config {
        None => AgentConfig::default(),
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|source| Error::NoInput {
                path: p.clone(),
                source,
            })?;
            serde_json::from_str(&text)
                .map_err(|e| Error::Input(format!("{}: {e}", p.display())))?
        }
    };
    if let Some(n) = a.num_sessions {
        c.num_sessions = n;
    }
    if c.num_sessions > crate::limits::MAX_GEN_ROWS {
        return Err(Error::Usage(format!(
            "num_sessions {} is above the limit of {} sessions",
            c.num_sessions,
            crate::limits::MAX_GEN_ROWS
        )));
    }
    c.check().map_err(|e| match &a.config {
        Some(p) => Error::Input(format!("{}: {e}", p.display())),
        None => Error::Usage(e),
    })?;
    Ok(c)
}

pub fn run(common: &Common, a: &AgentArgs, sink: &mut Sink) -> Result<()> {
    let c = load_config(a)?;
    sink.set_unordered();
    let b = common.block_size;
    let mut rng = Rng::new(common.seed, 30);
    let mut ids = Ids::default();
    let (mut plan_ids, mut next_plan, mut follow) = (Vec::new(), Vec::new(), Vec::new());
    let mut session_start = 0u64;
    for s in 0..c.num_sessions {
        if s > 0 {
            let gap = rng.exp(1000.0 / c.session_arrival_rate_rps).round() as u64;
            session_start += gap.max(1);
        }
        let name = format!("agent-{s}");
        let turns = c.turns_per_session.sample(&mut rng);
        let mut turn_start = session_start;
        let mut think = 0;
        let mut plan_len = 0;
        for t in 0..turns {
            let plan_input = c.initial_prompt_tokens + t * c.context_growth_tokens;
            if t == 0 {
                plan_ids.clear();
                ids.push_fresh(plan_input.div_ceil(b), &mut plan_ids);
            } else {
                extend_ids(&plan_ids, plan_len, plan_input, b, &mut ids, &mut next_plan);
                std::mem::swap(&mut plan_ids, &mut next_plan);
            }
            plan_len = plan_input;
            sink.emit(&GenRequest {
                timestamp: (t == 0).then_some(turn_start),
                at_ms: turn_start,
                session_id: Some(&name),
                delay: (t > 0).then_some(think),
                input_length: plan_input,
                output_length: c.output_tokens,
                hash_ids: &plan_ids,
            })?;
            let plan_latency = c.model_latency_ms.sample(&mut rng);
            let tools = c.parallel_tools.sample(&mut rng);
            // The tool phase lasts as long as its slowest branch, retries included.
            let mut phase = 0;
            for _ in 0..tools {
                let (mut branch, mut attempt) = (0, 0);
                loop {
                    branch += c.tool_latency_ms.sample(&mut rng);
                    let failed =
                        rng.uniform() < c.retry_probability && attempt < c.max_tool_retries;
                    if !failed {
                        break;
                    }
                    attempt += 1;
                }
                phase = phase.max(branch);
            }
            let join = turn_start + plan_latency + phase;
            let follow_input = plan_input + tools * c.tool_result_tokens;
            extend_ids(
                &plan_ids,
                plan_input,
                follow_input,
                b,
                &mut ids,
                &mut follow,
            );
            sink.emit(&GenRequest {
                timestamp: None,
                at_ms: join,
                session_id: Some(&name),
                delay: Some(phase),
                input_length: follow_input,
                output_length: c.output_tokens,
                hash_ids: &follow,
            })?;
            let follow_latency = c.model_latency_ms.sample(&mut rng);
            if t + 1 < turns {
                think = c.think_time_ms.sample(&mut rng);
                turn_start = join + follow_latency + think;
            }
        }
    }
    Ok(())
}
