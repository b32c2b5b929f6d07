//! `agent`: AIBrix's agent sessions (their config keys and defaults). Each
//! turn is a plan call, parallel tool calls (with latency and retries), and
//! a follow-up call that sees the tool results. Written as Mooncake session
//! rows: the follow-up's `delay` is the tool phase (the slowest branch with
//! its retries), a later plan's `delay` the think time; prompts grow by
//! `context_growth_tokens` per turn and `tool_result_tokens` per tool.
//! With `--graph` the same sessions are written as agent graphs
//! (module `agent_graph`, which the mode's dispatch calls). Every quantity a config can make unbounded is
//! checked against `crate::limits` before the first row (issue 36).

use std::path::PathBuf;

use serde::Deserialize;

use super::rng::Rng;
use super::sessions::extend_ids;
use super::sink::{GenRequest, Sink};
use super::{Common, Ids};
use crate::error::{Error, Result};

#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:
  mc-gen agent --config agent.json --format aibrix > workload.jsonl
  mc-gen agent --graph tools --num-sessions 50 > fan-out.jsonl
  mc-gen agent --graph sub-agents --sub-agent-calls 4 --config agent.json > sub-agents.jsonl
  mc-gen agent --graph map-reduce --doc-tokens 4096 > map-reduce.jsonl")]
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

    /// Write each session as an agent graph (rows with request_id,
    /// wait_for, branches, tool_wait_ms, prefix_reset) instead of session
    /// rows, in one of three shapes; each turn is a plan call, then
    /// parallel_tools branches, then a call that joins them. Every call of
    /// a session starts with the same system prompt and tool schemas
    /// (initial_prompt_tokens' full blocks). See
    /// docs/guide/workloads-of-agents.md.
    #[arg(long, value_enum, value_name = "SHAPE")]
    pub graph: Option<Shape>,

    /// --graph sub-agents: calls in each sub-agent's chain.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub sub_agent_calls: u64,

    /// --graph map-reduce: tokens of each map call's document.
    #[arg(long, default_value_t = 2048, value_name = "N")]
    pub doc_tokens: u64,
}

/// `--graph`: the shape of each turn's branches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// Parallel tool calls: parallel_tools calls, each released
    /// tool_wait_ms (the tool's latency, retries included) after the plan
    /// call ends, each seeing the plan's prompt and its own tool's result;
    /// the follow-up waits for all of them.
    Tools,
    /// Sub-agents: the plan spawns parallel_tools sub-agents (its
    /// `branches`), each a chain of --sub-agent-calls calls that starts
    /// fresh (`prefix_reset`: the system prompt and its task, not the
    /// parent's history) and grows its own history; the follow-up joins
    /// their last calls.
    SubAgents,
    /// Map-reduce: parallel_tools map calls, each over its own document
    /// (--doc-tokens, fetched in tool_wait_ms) after the system prompt;
    /// one reduce call (the plan's prompt and every map's answer) waits
    /// for all of them.
    MapReduce,
}

/// An integer or an inclusive [min, max] range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub(super) enum Range {
    One(u64),
    Two([u64; 2]),
}

impl Range {
    pub(super) fn bounds(self) -> (u64, u64) {
        match self {
            Range::One(v) => (v, v),
            Range::Two([a, b]) => (a, b),
        }
    }
    pub(super) fn sample(self, rng: &mut Rng) -> u64 {
        let (a, b) = self.bounds();
        rng.range_inclusive(a, b)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    pub(super) num_sessions: u64,
    pub(super) session_arrival_rate_rps: f64,
    pub(super) turns_per_session: Range,
    pub(super) parallel_tools: Range,
    pub(super) tool_latency_ms: Range,
    pub(super) model_latency_ms: Range,
    pub(super) think_time_ms: Range,
    pub(super) retry_probability: f64,
    pub(super) max_tool_retries: u64,
    pub(super) initial_prompt_tokens: u64,
    pub(super) context_growth_tokens: u64,
    pub(super) tool_result_tokens: u64,
    pub(super) output_tokens: u64,
    pub(super) seed: Option<serde_json::Value>,
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
    /// AIBrix's checks, with the key named, then the limits that keep a run
    /// bounded (issue 36): every loop and every prompt this config asks for
    /// is bounded before the first row is drawn.
    fn check(&self, plan: &Plan) -> std::result::Result<(), String> {
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
        self.check_limits(plan)
    }

    /// The documented limits (src/limits.rs): fan-out, retries, times,
    /// tokens per row and rows per run, each named with its key.
    fn check_limits(&self, plan: &Plan) -> std::result::Result<(), String> {
        use crate::limits::{
            MAX_AGENT_FANOUT, MAX_GEN_ROWS, MAX_ROW_TOKENS, MAX_TIME_MS, MAX_TOOL_RETRIES,
        };
        let tools = self.parallel_tools.bounds().1;
        if tools > MAX_AGENT_FANOUT {
            return Err(format!(
                "parallel_tools {tools} is above the limit of {MAX_AGENT_FANOUT} parallel calls \
                 per step (every branch is drawn: such a step would not end)"
            ));
        }
        if self.max_tool_retries > MAX_TOOL_RETRIES {
            return Err(format!(
                "max_tool_retries {} is above the limit of {MAX_TOOL_RETRIES} retries per tool call",
                self.max_tool_retries
            ));
        }
        for (name, r) in [
            ("tool_latency_ms", self.tool_latency_ms),
            ("model_latency_ms", self.model_latency_ms),
            ("think_time_ms", self.think_time_ms),
        ] {
            let max = r.bounds().1;
            if max as f64 > MAX_TIME_MS {
                return Err(format!("{name} {max} is above the limit of 2^53 ms"));
            }
        }
        for (name, v) in [
            ("initial_prompt_tokens", self.initial_prompt_tokens),
            ("context_growth_tokens", self.context_growth_tokens),
            ("tool_result_tokens", self.tool_result_tokens),
            ("output_tokens", self.output_tokens),
        ] {
            if v > MAX_ROW_TOKENS {
                return Err(format!(
                    "{name} {v} is above the limit of {MAX_ROW_TOKENS} tokens per row"
                ));
            }
        }
        let turns = self.turns_per_session.bounds().1;
        let (longest, what) = self.longest_prompt(plan);
        if longest > u128::from(MAX_ROW_TOKENS) {
            return Err(format!(
                "{what} reaches {longest} tokens, above the limit of {MAX_ROW_TOKENS} tokens per \
                 row; lower turns_per_session, parallel_tools or the *_tokens keys"
            ));
        }
        let rows = u128::from(self.num_sessions)
            * u128::from(turns)
            * plan.rows_per_turn(u128::from(tools));
        if rows > u128::from(MAX_GEN_ROWS) {
            return Err(format!(
                "num_sessions {} × turns_per_session {turns} gives up to {rows} rows, above the \
                 limit of {MAX_GEN_ROWS} rows; lower num_sessions (--num-sessions), \
                 turns_per_session or parallel_tools",
                self.num_sessions
            ));
        }
        Ok(())
    }

    /// The longest prompt this config can ask for, and which call it is.
    fn longest_prompt(&self, plan: &Plan) -> (u128, &'static str) {
        let t = u128::from;
        let p0 = t(self.initial_prompt_tokens);
        let turns = t(self.turns_per_session.bounds().1);
        let tools = t(self.parallel_tools.bounds().1);
        let last_plan = p0 + (turns - 1) * t(self.context_growth_tokens);
        let follow = last_plan + tools * t(self.tool_result_tokens);
        let mut candidates = vec![(
            follow,
            "the last follow-up call (initial_prompt_tokens + (turns_per_session - 1) × \
                 context_growth_tokens + parallel_tools × tool_result_tokens)",
        )];
        match plan.graph {
            Some(Shape::SubAgents) => candidates.push((
                p0 + t(self.context_growth_tokens)
                    + (t(plan.sub_agent_calls) - 1) * t(self.tool_result_tokens),
                "a sub-agent's last call (initial_prompt_tokens + context_growth_tokens + \
                 (--sub-agent-calls - 1) × tool_result_tokens)",
            )),
            Some(Shape::MapReduce) => {
                candidates.push((
                    p0 + t(plan.doc_tokens),
                    "a map call (initial_prompt_tokens + --doc-tokens)",
                ));
                candidates.push((
                    last_plan + tools * t(self.output_tokens),
                    "the last reduce call (the last plan + parallel_tools × output_tokens)",
                ));
            }
            _ => {}
        }
        candidates
            .into_iter()
            .max_by_key(|c| c.0)
            .unwrap_or((0, ""))
    }
}

/// What `--graph` asks for, checked once.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub graph: Option<Shape>,
    pub sub_agent_calls: u64,
    pub doc_tokens: u64,
}

impl Plan {
    /// Most rows one turn writes with `tools` parallel branches.
    fn rows_per_turn(&self, tools: u128) -> u128 {
        match self.graph {
            None => 2,
            Some(Shape::Tools) | Some(Shape::MapReduce) => 2 + tools,
            Some(Shape::SubAgents) => 2 + tools * u128::from(self.sub_agent_calls),
        }
    }
}

/// The options of `agent` other than the config, checked (usage errors,
/// exit 2, each naming its option).
fn plan(common: &Common, a: &AgentArgs) -> Result<Plan> {
    use crate::limits::{MAX_AGENT_FANOUT, MAX_ROW_TOKENS};
    if a.graph.is_some() && common.format != super::sink::Format::Mooncake {
        return Err(Error::usage(
            "--graph writes Mooncake rows with request_id and wait_for: AIBrix's format has no \
             dependencies; leave --format at mooncake",
        ));
    }
    if !(1..=MAX_AGENT_FANOUT).contains(&a.sub_agent_calls) {
        return Err(Error::Usage(format!(
            "--sub-agent-calls {} must be between 1 and {MAX_AGENT_FANOUT}",
            a.sub_agent_calls
        )));
    }
    if !(1..=MAX_ROW_TOKENS).contains(&a.doc_tokens) {
        return Err(Error::Usage(format!(
            "--doc-tokens {} must be between 1 and {MAX_ROW_TOKENS} (the limit of tokens per row)",
            a.doc_tokens
        )));
    }
    Ok(Plan {
        graph: a.graph,
        sub_agent_calls: a.sub_agent_calls,
        doc_tokens: a.doc_tokens,
    })
}

pub fn load_config(a: &AgentArgs, plan: &Plan) -> Result<AgentConfig> {
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
    c.check(plan).map_err(|e| match &a.config {
        Some(p) => Error::Input(format!("{}: {e}", p.display())),
        None => Error::Usage(e),
    })?;
    Ok(c)
}

/// One tool call's time: its latency, and again for each retry (a failed
/// attempt is retried while `max_tool_retries` allows).
pub(super) fn tool_time(c: &AgentConfig, rng: &mut Rng) -> u64 {
    let (mut total, mut attempt) = (0u64, 0);
    loop {
        total = total.saturating_add(c.tool_latency_ms.sample(rng));
        let failed = rng.uniform() < c.retry_probability && attempt < c.max_tool_retries;
        if !failed {
            return total;
        }
        attempt += 1;
    }
}

/// The config and the options, checked before anything is drawn.
pub fn prepare(common: &Common, a: &AgentArgs) -> Result<(AgentConfig, Plan)> {
    let plan = plan(common, a)?;
    let c = load_config(a, &plan)?;
    Ok((c, plan))
}

/// Flat mode: the sessions as Mooncake session rows.
pub fn run(common: &Common, c: &AgentConfig, sink: &mut Sink) -> Result<()> {
    sink.set_unordered();
    let b = common.block_size;
    let mut rng = Rng::new(common.seed, 30);
    let mut ids = Ids::default();
    let (mut plan_ids, mut next_plan, mut follow) = (Vec::new(), Vec::new(), Vec::new());
    let mut session_start = 0u64;
    for s in 0..c.num_sessions {
        if s > 0 {
            let gap = rng.exp(1000.0 / c.session_arrival_rate_rps).round() as u64;
            session_start = session_start.saturating_add(gap.max(1));
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
                graph: None,
            })?;
            let plan_latency = c.model_latency_ms.sample(&mut rng);
            let tools = c.parallel_tools.sample(&mut rng);
            // The tool phase lasts as long as its slowest branch, retries included.
            let mut phase = 0;
            for _ in 0..tools {
                phase = tool_time(c, &mut rng).max(phase);
            }
            // Saturating: a time past 2^53 ms is refused by the sink.
            let join = turn_start
                .saturating_add(plan_latency)
                .saturating_add(phase);
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
                graph: None,
            })?;
            let follow_latency = c.model_latency_ms.sample(&mut rng);
            if t + 1 < turns {
                think = c.think_time_ms.sample(&mut rng);
                turn_start = join.saturating_add(follow_latency).saturating_add(think);
            }
        }
    }
    Ok(())
}
