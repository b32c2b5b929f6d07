//! `agent --graph`: the agent sessions of [`super::agent`] written as agent
//! graphs (the row format of docs/guide/workloads-of-agents.md). Each turn
//! is a plan call, `parallel_tools` branches in one of three shapes, and a
//! call that joins them; the next turn's plan waits for that call and its
//! think time. The first plan is the session's root, at the session's
//! arrival time; every other row is released by its edges.
//!
//! Prefixes are the ones agents have: every call of a session starts with
//! the full blocks of the first `initial_prompt_tokens` (the system prompt
//! and tool schemas, the same leading hash_ids), the plan's history grows
//! turn by turn as in flat mode, a branch that sees the plan's prompt
//! extends it, and a sub-agent or a map call starts fresh after the system
//! prompt (`prefix_reset`).
//!
//! Timing: the times written (`at_ms`) assume each call takes a
//! `model_latency_ms` draw, as flat mode does; only `delay` and
//! `tool_wait_ms` are written, so a replay's own service times decide
//! when the branches are released.

use super::agent::{tool_time, AgentConfig, Plan, Shape};
use super::rng::Rng;
use super::sessions::extend_ids;
use super::sink::{GenRequest, GraphFields, Sink};
use super::{Common, Ids};
use crate::error::Result;

/// One row of the graph being written.
struct Call<'a> {
    id: &'a str,
    at_ms: u64,
    /// The session's first plan: a root with a timestamp.
    root: bool,
    delay: u64,
    input: u64,
    hash_ids: &'a [u64],
    wait_for: &'a [String],
    branches: &'a [String],
    tool_wait_ms: Option<u64>,
    prefix_reset: bool,
}

/// The generator's state across sessions.
struct Writer<'s> {
    sink: &'s mut Sink,
    output_tokens: u64,
    session: String,
}

impl Writer<'_> {
    fn emit(&mut self, c: &Call<'_>) -> Result<()> {
        let graph = GraphFields {
            request_id: c.id,
            wait_for: c.wait_for,
            branches: c.branches,
            tool_wait_ms: c.tool_wait_ms,
            prefix_reset: c.prefix_reset,
        };
        self.sink.emit(&GenRequest {
            timestamp: c.root.then_some(c.at_ms),
            at_ms: c.at_ms,
            session_id: Some(&self.session),
            delay: (!c.root).then_some(c.delay),
            input_length: c.input,
            output_length: self.output_tokens,
            hash_ids: c.hash_ids,
            graph: Some(&graph),
        })
    }
}

/// The request id of row `n` of session `name`: unique in the file, since
/// session names are.
fn row_id(name: &str, n: u64) -> String {
    format!("{name}.{n}")
}

pub fn run(
    common: &Common,
    c: &AgentConfig,
    shape: Shape,
    plan: &Plan,
    sink: &mut Sink,
) -> Result<()> {
    let b = common.block_size;
    // Its own stream: the flat mode's bytes do not change with this mode.
    let mut rng = Rng::new(common.seed, 31);
    let mut ids = Ids::default();
    let mut w = Writer {
        sink,
        output_tokens: c.output_tokens,
        session: String::new(),
    };
    let p0 = c.initial_prompt_tokens;
    let (mut plan_ids, mut next_plan, mut system) = (Vec::new(), Vec::new(), Vec::new());
    let (mut branch_ids, mut prev_branch) = (Vec::new(), Vec::new());
    let mut session_start = 0u64;
    for s in 0..c.num_sessions {
        if s > 0 {
            let gap = rng.exp(1000.0 / c.session_arrival_rate_rps).round() as u64;
            session_start = session_start.saturating_add(gap.max(1));
        }
        w.session = format!("agent-{s}");
        let name = w.session.clone();
        let turns = c.turns_per_session.sample(&mut rng);
        let mut n = 0u64;
        let mut turn_start = session_start;
        // The call the next plan waits for, and the think time after it.
        let mut joined: Vec<String> = Vec::new();
        let mut think = 0;
        let mut plan_len = 0;
        for t in 0..turns {
            let plan_input = p0 + t * c.context_growth_tokens;
            if t == 0 {
                plan_ids.clear();
                ids.push_fresh(plan_input.div_ceil(b), &mut plan_ids);
                // The system prompt and tool schemas: the first plan's full
                // blocks of initial_prompt_tokens, shared by every call.
                system.clear();
                system.extend_from_slice(&plan_ids[..(p0 / b) as usize]);
            } else {
                extend_ids(&plan_ids, plan_len, plan_input, b, &mut ids, &mut next_plan);
                std::mem::swap(&mut plan_ids, &mut next_plan);
            }
            plan_len = plan_input;
            let k = c.parallel_tools.sample(&mut rng);
            let m = match shape {
                Shape::SubAgents => plan.sub_agent_calls,
                Shape::Tools | Shape::MapReduce => 1,
            };
            let plan_id = row_id(&name, n);
            // A sub-agent's first call is spawned by the plan (`branches`);
            // tool and map calls wait for it (`wait_for`): both edges occur.
            let spawned: Vec<String> = match shape {
                Shape::SubAgents => (0..k).map(|j| row_id(&name, n + 1 + j * m)).collect(),
                Shape::Tools | Shape::MapReduce => Vec::new(),
            };
            w.emit(&Call {
                id: &plan_id,
                at_ms: turn_start,
                root: t == 0,
                delay: think,
                input: plan_input,
                hash_ids: &plan_ids,
                wait_for: &joined,
                branches: &spawned,
                tool_wait_ms: None,
                prefix_reset: false,
            })?;
            n += 1;
            let plan_end = turn_start.saturating_add(c.model_latency_ms.sample(&mut rng));
            let waits_for_plan = [plan_id];
            // The branches' last calls, which the join waits for, and when
            // the last of them ends.
            let mut ends: Vec<String> = Vec::with_capacity(k as usize);
            let mut join_at = plan_end;
            for _ in 0..k {
                let mut at = plan_end;
                let mut len = 0;
                for call in 0..m {
                    let id = row_id(&name, n);
                    n += 1;
                    let (input, wait, tool_wait, fresh) = match shape {
                        Shape::Tools => {
                            let input = plan_input + c.tool_result_tokens;
                            extend_ids(&plan_ids, plan_input, input, b, &mut ids, &mut branch_ids);
                            (
                                input,
                                &waits_for_plan[..],
                                Some(tool_time(c, &mut rng)),
                                false,
                            )
                        }
                        Shape::MapReduce => {
                            let input = p0 + plan.doc_tokens;
                            extend_ids(&system, p0, input, b, &mut ids, &mut branch_ids);
                            (
                                input,
                                &waits_for_plan[..],
                                Some(tool_time(c, &mut rng)),
                                true,
                            )
                        }
                        Shape::SubAgents if call == 0 => {
                            let input = p0 + c.context_growth_tokens;
                            extend_ids(&system, p0, input, b, &mut ids, &mut branch_ids);
                            (input, &[][..], None, true)
                        }
                        Shape::SubAgents => {
                            let input = len + c.tool_result_tokens;
                            extend_ids(&prev_branch, len, input, b, &mut ids, &mut branch_ids);
                            (
                                input,
                                &ends[ends.len() - 1..],
                                Some(tool_time(c, &mut rng)),
                                false,
                            )
                        }
                    };
                    at = at.saturating_add(tool_wait.unwrap_or(0));
                    w.emit(&Call {
                        id: &id,
                        at_ms: at,
                        root: false,
                        delay: 0,
                        input,
                        hash_ids: &branch_ids,
                        wait_for: wait,
                        branches: &[],
                        tool_wait_ms: tool_wait,
                        prefix_reset: fresh,
                    })?;
                    at = at.saturating_add(c.model_latency_ms.sample(&mut rng));
                    len = input;
                    std::mem::swap(&mut prev_branch, &mut branch_ids);
                    // Within a chain, `ends` holds the chain's latest call
                    // (the next call waits for it); its last call stays.
                    if call > 0 {
                        ends.pop();
                    }
                    ends.push(id);
                }
                join_at = join_at.max(at);
            }
            let join_input = match shape {
                Shape::Tools | Shape::SubAgents => plan_input + k * c.tool_result_tokens,
                Shape::MapReduce => plan_input + k * c.output_tokens,
            };
            extend_ids(
                &plan_ids,
                plan_input,
                join_input,
                b,
                &mut ids,
                &mut branch_ids,
            );
            let join_id = row_id(&name, n);
            n += 1;
            w.emit(&Call {
                id: &join_id,
                at_ms: join_at,
                root: false,
                delay: 0,
                input: join_input,
                hash_ids: &branch_ids,
                wait_for: &ends,
                branches: &[],
                tool_wait_ms: None,
                prefix_reset: false,
            })?;
            let join_end = join_at.saturating_add(c.model_latency_ms.sample(&mut rng));
            joined = vec![join_id];
            if t + 1 < turns {
                think = c.think_time_ms.sample(&mut rng);
                turn_start = join_end.saturating_add(think);
            }
        }
    }
    Ok(())
}
