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
    let mut g = Gen {
        c,
        shape,
        plan,
        block: common.block_size,
        chain_len: match shape {
            Shape::SubAgents => plan.sub_agent_calls,
            Shape::Tools | Shape::MapReduce => 1,
        },
        // Its own stream: the flat mode's bytes do not change with this mode.
        rng: Rng::new(common.seed, 31),
        ids: Ids::default(),
        w: Writer {
            sink,
            output_tokens: c.output_tokens,
            session: String::new(),
        },
        plan_ids: Vec::new(),
        next_plan: Vec::new(),
        system: Vec::new(),
        branch_ids: Vec::new(),
        prev_branch: Vec::new(),
    };
    let mut session_start = 0u64;
    for s in 0..c.num_sessions {
        if s > 0 {
            let gap = g.rng.exp(1000.0 / c.session_arrival_rate_rps).round() as u64;
            session_start = session_start.saturating_add(gap.max(1));
        }
        g.session(s, session_start)?;
    }
    Ok(())
}

/// The generator: the run's settings, its random stream, and the hash_id
/// buffers every call reuses.
struct Gen<'a, 's> {
    c: &'a AgentConfig,
    shape: Shape,
    plan: &'a Plan,
    block: u64,
    /// Calls per branch: a sub-agent's chain, else the one tool or map call.
    chain_len: u64,
    rng: Rng,
    ids: Ids,
    w: Writer<'s>,
    /// The current plan's hash_ids, and the buffer the next one is built in.
    plan_ids: Vec<u64>,
    next_plan: Vec<u64>,
    /// The system prompt and tool schemas: the first plan's full blocks of
    /// initial_prompt_tokens, shared by every call of the session.
    system: Vec<u64>,
    /// The branch call being written's hash_ids, and its chain's previous
    /// call's.
    branch_ids: Vec<u64>,
    prev_branch: Vec<u64>,
}

/// Where a session stands between turns.
struct Session {
    /// Rows written so far: the next row's number.
    n: u64,
    turn_start: u64,
    /// The call the next plan waits for, and the think time after it.
    joined: Vec<String>,
    think: u64,
    plan_len: u64,
}

/// What a branch call's `wait_for` names.
enum After {
    /// The turn's plan call (tool and map calls).
    Plan,
    /// The chain's previous call (a sub-agent's later calls).
    PreviousCall,
    /// Nothing: the plan spawns it through `branches` (a sub-agent's first
    /// call).
    Spawn,
}

/// A branch call's fields other than its id and time; its hash_ids are in
/// `Gen::branch_ids`.
struct BranchCall {
    input: u64,
    after: After,
    tool_wait: Option<u64>,
    prefix_reset: bool,
}

impl Gen<'_, '_> {
    /// Session `s`, arriving at `start`: its turns, each after the previous
    /// turn's join and a think time.
    fn session(&mut self, s: u64, start: u64) -> Result<()> {
        self.w.session = format!("agent-{s}");
        let turns = self.c.turns_per_session.sample(&mut self.rng);
        let mut at = Session {
            n: 0,
            turn_start: start,
            joined: Vec::new(),
            think: 0,
            plan_len: 0,
        };
        for t in 0..turns {
            let join_end = self.turn(&mut at, t)?;
            if t + 1 < turns {
                at.think = self.c.think_time_ms.sample(&mut self.rng);
                at.turn_start = join_end.saturating_add(at.think);
            }
        }
        Ok(())
    }

    /// Turn `t`: the plan call, its branches, and the call that joins them;
    /// returns when the join ends.
    fn turn(&mut self, s: &mut Session, t: u64) -> Result<u64> {
        let plan_input = self.c.initial_prompt_tokens + t * self.c.context_growth_tokens;
        self.grow_plan(t, s.plan_len, plan_input);
        s.plan_len = plan_input;
        let k = self.c.parallel_tools.sample(&mut self.rng);
        let plan_id = self.plan_call(s, t, k, plan_input)?;
        let plan_end = s
            .turn_start
            .saturating_add(self.c.model_latency_ms.sample(&mut self.rng));
        let waits_for_plan = [plan_id];
        // The branches' last calls, which the join waits for, and when the
        // last of them ends.
        let mut ends: Vec<String> = Vec::with_capacity(k as usize);
        let mut join_at = plan_end;
        for _ in 0..k {
            let end = self.branch(s, plan_input, &waits_for_plan, plan_end, &mut ends)?;
            join_at = join_at.max(end);
        }
        self.join_call(s, k, plan_input, &ends, join_at)
    }

    /// The plan's hash_ids for turn `t`: fresh on the first turn (which
    /// also fixes the system prompt's), else the last plan's grown to
    /// `plan_input` as in flat mode.
    fn grow_plan(&mut self, t: u64, plan_len: u64, plan_input: u64) {
        let (b, p0) = (self.block, self.c.initial_prompt_tokens);
        if t == 0 {
            self.plan_ids.clear();
            self.ids
                .push_fresh(plan_input.div_ceil(b), &mut self.plan_ids);
            self.system.clear();
            self.system
                .extend_from_slice(&self.plan_ids[..(p0 / b) as usize]);
        } else {
            extend_ids(
                &self.plan_ids,
                plan_len,
                plan_input,
                b,
                &mut self.ids,
                &mut self.next_plan,
            );
            std::mem::swap(&mut self.plan_ids, &mut self.next_plan);
        }
    }

    /// Writes turn `t`'s plan call, which starts `k` branches; returns its id.
    fn plan_call(&mut self, s: &mut Session, t: u64, k: u64, plan_input: u64) -> Result<String> {
        let plan_id = self.next_id(s);
        // A sub-agent's first call is spawned by the plan (`branches`);
        // tool and map calls wait for it (`wait_for`): both edges occur.
        let spawned: Vec<String> = match self.shape {
            Shape::SubAgents => (0..k)
                .map(|j| row_id(&self.w.session, s.n + j * self.chain_len))
                .collect(),
            Shape::Tools | Shape::MapReduce => Vec::new(),
        };
        self.w.emit(&Call {
            id: &plan_id,
            at_ms: s.turn_start,
            root: t == 0,
            delay: s.think,
            input: plan_input,
            hash_ids: &self.plan_ids,
            wait_for: &s.joined,
            branches: &spawned,
            tool_wait_ms: None,
            prefix_reset: false,
        })?;
        Ok(plan_id)
    }

    /// Writes one branch, released when the plan ends at `plan_end`: a
    /// tool or map call, or a sub-agent's chain. Leaves its last call's id
    /// at the end of `ends` and returns when that call ends.
    fn branch(
        &mut self,
        s: &mut Session,
        plan_input: u64,
        waits_for_plan: &[String],
        plan_end: u64,
        ends: &mut Vec<String>,
    ) -> Result<u64> {
        let mut at = plan_end;
        let mut len = 0;
        for call in 0..self.chain_len {
            let id = self.next_id(s);
            let b = self.branch_call(call, plan_input, len);
            let wait_for = match b.after {
                After::Plan => waits_for_plan,
                After::PreviousCall => &ends[ends.len() - 1..],
                After::Spawn => &[][..],
            };
            at = at.saturating_add(b.tool_wait.unwrap_or(0));
            self.w.emit(&Call {
                id: &id,
                at_ms: at,
                root: false,
                delay: 0,
                input: b.input,
                hash_ids: &self.branch_ids,
                wait_for,
                branches: &[],
                tool_wait_ms: b.tool_wait,
                prefix_reset: b.prefix_reset,
            })?;
            at = at.saturating_add(self.c.model_latency_ms.sample(&mut self.rng));
            len = b.input;
            std::mem::swap(&mut self.prev_branch, &mut self.branch_ids);
            // Within a chain, `ends` holds the chain's latest call (the
            // next call waits for it); its last call stays.
            if call > 0 {
                ends.pop();
            }
            ends.push(id);
        }
        Ok(at)
    }

    /// Call `call` of a branch whose chain's previous call had `len` input
    /// tokens: its fields, with its hash_ids built into `branch_ids`.
    fn branch_call(&mut self, call: u64, plan_input: u64, len: u64) -> BranchCall {
        let (b, p0) = (self.block, self.c.initial_prompt_tokens);
        let (input, prefix, prefix_len, after, reset) = match self.shape {
            Shape::Tools => (
                plan_input + self.c.tool_result_tokens,
                &self.plan_ids,
                plan_input,
                After::Plan,
                false,
            ),
            Shape::MapReduce => (
                p0 + self.plan.doc_tokens,
                &self.system,
                p0,
                After::Plan,
                true,
            ),
            Shape::SubAgents if call == 0 => (
                p0 + self.c.context_growth_tokens,
                &self.system,
                p0,
                After::Spawn,
                true,
            ),
            Shape::SubAgents => (
                len + self.c.tool_result_tokens,
                &self.prev_branch,
                len,
                After::PreviousCall,
                false,
            ),
        };
        extend_ids(
            prefix,
            prefix_len,
            input,
            b,
            &mut self.ids,
            &mut self.branch_ids,
        );
        // A sub-agent's first call is spawned, not released by a tool.
        let tool_wait = match after {
            After::Spawn => None,
            After::Plan | After::PreviousCall => Some(tool_time(self.c, &mut self.rng)),
        };
        BranchCall {
            input,
            after,
            tool_wait,
            prefix_reset: reset,
        }
    }

    /// Writes the call that joins the turn's `k` branches (`ends`), at
    /// `join_at`; returns when it ends.
    fn join_call(
        &mut self,
        s: &mut Session,
        k: u64,
        plan_input: u64,
        ends: &[String],
        join_at: u64,
    ) -> Result<u64> {
        let join_input = match self.shape {
            Shape::Tools | Shape::SubAgents => plan_input + k * self.c.tool_result_tokens,
            Shape::MapReduce => plan_input + k * self.c.output_tokens,
        };
        extend_ids(
            &self.plan_ids,
            plan_input,
            join_input,
            self.block,
            &mut self.ids,
            &mut self.branch_ids,
        );
        let join_id = self.next_id(s);
        self.w.emit(&Call {
            id: &join_id,
            at_ms: join_at,
            root: false,
            delay: 0,
            input: join_input,
            hash_ids: &self.branch_ids,
            wait_for: ends,
            branches: &[],
            tool_wait_ms: None,
            prefix_reset: false,
        })?;
        let join_end = join_at.saturating_add(self.c.model_latency_ms.sample(&mut self.rng));
        s.joined = vec![join_id];
        Ok(join_end)
    }

    /// The next row's id in the session.
    fn next_id(&mut self, s: &mut Session) -> String {
        let id = row_id(&self.w.session, s.n);
        s.n += 1;
        id
    }
}
