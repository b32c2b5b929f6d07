//! One session's spans into an agent graph (docs/tools/mc-import.md, "otel").
//!
//! The rule: every agent (an `invoke_agent` span; the session itself for
//! what is in none) has its own timeline. Its items are the LLM calls whose
//! nearest agent ancestor it is, and the sub-agents it started (their
//! times the hull of the span and everything in it). Within a timeline an
//! item waits for the items that had ended before it started, reduced to
//! the latest ones: nat2mc's rule, `nat::edges::build`, so that items that
//! overlap in time are parallel. Then sub-agents are opened: an edge into
//! a sub-agent is an edge into each of its first calls (those that wait
//! for nothing inside it), an edge out of it one out of each of its last
//! calls (those nothing inside it waits for). Calls of two agents running
//! side by side therefore never wait for each other, however their times
//! interleave.
//!
//! A call's gap (its start less the latest end of what it waits for) is
//! split into tool time, the part covered by the `execute_tool` spans of
//! its agent and the agents above it (not the ones that contain the call),
//! and the rest. An LLM span that holds another LLM span (a framework's
//! span around the SDK's span of the same request) is the same call seen
//! twice: the innermost one is kept.

/// foldhash's fixed hasher: span ids come from exports, not from an
/// adversary, and SipHash was an eighth of the run (`perf`).
pub(super) type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;
pub(super) type Set<K> = std::collections::HashSet<K, foldhash::fast::FixedState>;

use super::spans::{Kind, Span};
use crate::nat::edges;

/// One call of the session's graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The span (index into the session's spans).
    pub span: usize,
    /// The calls it waits for (indices into [`Graph::calls`], sorted).
    pub deps: Vec<usize>,
    /// Its start less the latest end of its dependencies, ns (0 for a root).
    pub gap_ns: u64,
    /// The part of the gap its agents' tools cover, ns.
    pub tool_ns: u64,
    /// The first call of a sub-agent: it starts with the sub-agent's own
    /// prompt, not its caller's history.
    pub prefix_reset: bool,
}

/// A session's calls, in start order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Graph {
    pub calls: Vec<Call>,
    /// LLM spans left out because they hold another LLM span.
    pub wrappers: u64,
}

/// A timeline's item: a call or a sub-agent (span indices).
#[derive(Debug, Clone, Copy)]
enum Item {
    Call(usize),
    Agent(usize),
}

/// The graph of one session's spans (any order; several traces of one
/// conversation allowed). Fails, naming the spans, when parent links make
/// a circle.
pub fn build(spans: &[&Span]) -> Result<Graph, String> {
    let parent = parent_links(spans);
    let order = parents_first(spans, &parent)?;
    let agent_of = nearest_agents(spans, &parent, &order);
    let (kept, wrappers) = innermost_calls(spans, &parent);
    let (mut items, agents) = timelines(&order, &kept, &agent_of);
    let base = kept.iter().map(|&c| spans[c].start_ns).min().unwrap_or(0);
    let mut links = Links::new(spans, base);
    let scopes = agents.iter().map(|&a| Some(a)).chain([None]);
    for scope in scopes {
        let Some(list) = items.get_mut(&scope) else {
            continue;
        };
        links.link(scope, list, &agent_of);
    }
    let tools = tools_by_agent(spans, &agent_of);
    let calls = calls_in_start_order(spans, kept, &links, &tools, &agent_of, &parent);
    Ok(Graph { calls, wrappers })
}

/// Each span's parent (index), when the session holds it.
fn parent_links(spans: &[&Span]) -> Vec<Option<usize>> {
    let mut index: Map<(&str, &str), usize> =
        Map::with_capacity_and_hasher(spans.len(), Default::default());
    for (i, s) in spans.iter().enumerate() {
        index.entry((&s.trace, &s.id)).or_insert(i);
    }
    spans
        .iter()
        .map(|s| {
            s.parent
                .as_deref()
                .and_then(|p| index.get(&(&*s.trace, p)).copied())
        })
        .collect()
}

/// The nearest agent above each span (None: the session's timeline);
/// `order` puts parents first, so a parent's is known before its children's.
fn nearest_agents(
    spans: &[&Span],
    parent: &[Option<usize>],
    order: &[usize],
) -> Vec<Option<usize>> {
    let is_agent = |i: usize| spans[i].kind == Kind::Agent;
    let mut agent_of: Vec<Option<usize>> = vec![None; spans.len()];
    for &i in order {
        agent_of[i] = parent[i].and_then(|p| if is_agent(p) { Some(p) } else { agent_of[p] });
    }
    agent_of
}

/// The calls kept (none below them) and how many wrap another: a call with
/// a call below it wraps that call, and the inner one is kept.
fn innermost_calls(spans: &[&Span], parent: &[Option<usize>]) -> (Vec<usize>, u64) {
    let n = spans.len();
    let is_call = |i: usize| matches!(spans[i].kind, Kind::Call { .. });
    let mut wrapper = vec![false; n];
    for i in (0..n).filter(|&i| is_call(i)) {
        let mut p = parent[i];
        while let Some(q) = p {
            if is_call(q) {
                wrapper[q] = true;
            }
            p = parent[q];
        }
    }
    let kept: Vec<usize> = (0..n).filter(|&i| is_call(i) && !wrapper[i]).collect();
    let wrappers = (0..n).filter(|&i| wrapper[i]).count() as u64;
    (kept, wrappers)
}

/// Each timeline's items, and the agents with a call below them (the
/// others are left out) deepest first, so a sub-agent's hull, first and
/// last calls are known before its caller's timeline is built.
fn timelines(
    order: &[usize],
    kept: &[usize],
    agent_of: &[Option<usize>],
) -> (Map<Option<usize>, Vec<Item>>, Vec<usize>) {
    let n = agent_of.len();
    let mut busy = vec![false; n];
    for &c in kept {
        let mut a = agent_of[c];
        while let Some(x) = a.filter(|&x| !busy[x]) {
            busy[x] = true;
            a = agent_of[x];
        }
    }
    let mut items: Map<Option<usize>, Vec<Item>> = Map::default();
    for &c in kept {
        items.entry(agent_of[c]).or_default().push(Item::Call(c));
    }
    let mut agents: Vec<(usize, usize)> = Vec::new();
    let mut depth = vec![0usize; n];
    for &i in order {
        if busy[i] {
            depth[i] = agent_of[i].map_or(0, |a| depth[a] + 1);
            agents.push((depth[i], i));
            items.entry(agent_of[i]).or_default().push(Item::Agent(i));
        }
    }
    agents.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    (items, agents.into_iter().map(|(_, a)| a).collect())
}

/// The edges found timeline by timeline, and what a caller's timeline needs
/// of a sub-agent's: its hull and its first and last calls.
struct Links {
    /// Times of each span and everything in it (ns).
    hull: Vec<(u64, u64)>,
    first: Map<usize, Vec<usize>>,
    last: Map<usize, Vec<usize>>,
    /// The calls each call waits for (span indices, unsorted).
    deps: Vec<Vec<usize>>,
    prefix_reset: Vec<bool>,
    /// The earliest call's start: times are ms from it.
    base: u64,
}

impl Links {
    fn new(spans: &[&Span], base: u64) -> Self {
        let n = spans.len();
        Links {
            hull: spans.iter().map(|s| (s.start_ns, s.end_ns)).collect(),
            first: Map::default(),
            last: Map::default(),
            deps: vec![Vec::new(); n],
            prefix_reset: vec![false; n],
            base,
        }
    }

    /// Links the items of one timeline (`scope`'s; None: the session's),
    /// opening its sub-agents, and records a sub-agent's hull and its first
    /// and last calls.
    fn link(&mut self, scope: Option<usize>, list: &mut [Item], agent_of: &[Option<usize>]) {
        let span_of = |it: &Item| match *it {
            Item::Call(c) => c,
            Item::Agent(a) => a,
        };
        let hull = &self.hull;
        // END order, as `edges::build` takes them.
        list.sort_by_key(|it| {
            let i = span_of(it);
            (hull[i].1, hull[i].0, i)
        });
        let base = self.base;
        let ms = |ns: u64| ns.saturating_sub(base) as f64 / 1e6;
        let times: Vec<edges::Span> = list
            .iter()
            .map(|it| {
                let (s, e) = hull[span_of(it)];
                edges::Span {
                    start: Some(ms(s)),
                    end: Some(ms(e)),
                }
            })
            .collect();
        let e = edges::build(&times, &[]);
        let (first, last) = (&self.first, &self.last);
        let entry = |it: &Item| match *it {
            Item::Call(c) => vec![c],
            Item::Agent(a) => first.get(&a).cloned().unwrap_or_default(),
        };
        let exit = |it: &Item| match *it {
            Item::Call(c) => vec![c],
            Item::Agent(a) => last.get(&a).cloned().unwrap_or_default(),
        };
        let mut waited_for = vec![false; list.len()];
        for (k, ds) in e.deps.iter().enumerate() {
            for &d in ds {
                waited_for[d] = true;
                for x in exit(&list[d]) {
                    for y in entry(&list[k]) {
                        self.deps[y].push(x);
                    }
                }
            }
        }
        let Some(a) = scope else {
            return;
        };
        let starts: Vec<usize> = (0..list.len())
            .filter(|&k| e.deps[k].is_empty())
            .flat_map(|k| entry(&list[k]))
            .collect();
        let ends: Vec<usize> = (0..list.len())
            .filter(|&k| !waited_for[k])
            .flat_map(|k| exit(&list[k]))
            .collect();
        if agent_of[a].is_some() {
            for &c in &starts {
                self.prefix_reset[c] = true;
            }
        }
        let (lo, hi) = list
            .iter()
            .map(|it| hull[span_of(it)])
            .fold(hull[a], |h, x| (h.0.min(x.0), h.1.max(x.1)));
        self.hull[a] = (lo, hi);
        self.first.insert(a, starts);
        self.last.insert(a, ends);
    }
}

/// The kept calls in start order, each with its dependencies (rows), gap
/// and tool time.
fn calls_in_start_order(
    spans: &[&Span],
    kept: Vec<usize>,
    links: &Links,
    tools: &Map<Option<usize>, Vec<usize>>,
    agent_of: &[Option<usize>],
    parent: &[Option<usize>],
) -> Vec<Call> {
    let mut calls: Vec<usize> = kept;
    calls.sort_by_key(|&c| (spans[c].start_ns, spans[c].end_ns, c));
    let row: Map<usize, usize> = calls.iter().enumerate().map(|(k, &c)| (c, k)).collect();
    calls
        .iter()
        .map(|&c| {
            let deps = &links.deps[c];
            let mut ds: Vec<usize> = deps.iter().map(|d| row[d]).collect();
            ds.sort_unstable();
            ds.dedup();
            let after = deps.iter().map(|&d| spans[d].end_ns).max();
            let start = spans[c].start_ns;
            let (gap_ns, tool_ns) = match after {
                None => (0, 0),
                Some(after) => {
                    let gap = start.saturating_sub(after);
                    let tool = tool_time(c, after, start, tools, agent_of, parent, spans);
                    (gap, tool.min(gap))
                }
            };
            Call {
                span: c,
                deps: ds,
                gap_ns,
                tool_ns,
                prefix_reset: links.prefix_reset[c],
            }
        })
        .collect()
}

/// Every span after its parent; parent links that make a circle are an
/// error naming its spans.
fn parents_first(spans: &[&Span], parent: &[Option<usize>]) -> Result<Vec<usize>, String> {
    let n = spans.len();
    // 0: not seen, 1: on the walk, 2: placed.
    let mut state = vec![0u8; n];
    let mut order = Vec::with_capacity(n);
    for i in 0..n {
        let mut walk = Vec::new();
        let mut at = Some(i);
        while let Some(x) = at.filter(|&x| state[x] != 2) {
            if state[x] == 1 {
                let from = walk.iter().position(|&w| w == x).unwrap_or(0);
                let names: Vec<String> = walk[from..]
                    .iter()
                    .map(|&w: &usize| format!("`{}`", spans[w].id))
                    .collect();
                return Err(format!(
                    "trace `{}`: the spans {} are each other's parents (parentSpanId): \
                     a trace is a tree; fix the export",
                    spans[x].trace,
                    names.join(" → ")
                ));
            }
            state[x] = 1;
            walk.push(x);
            at = parent[x];
        }
        for &w in walk.iter().rev() {
            state[w] = 2;
            order.push(w);
        }
    }
    Ok(order)
}

/// Tool spans by their agent.
fn tools_by_agent(spans: &[&Span], agent_of: &[Option<usize>]) -> Map<Option<usize>, Vec<usize>> {
    let mut tools: Map<Option<usize>, Vec<usize>> = Map::default();
    for (i, s) in spans.iter().enumerate() {
        if s.kind == Kind::Tool {
            tools.entry(agent_of[i]).or_default().push(i);
        }
    }
    tools
}

/// ns of `[after, start]` covered by the tools of call `c`'s agent and the
/// agents above it, leaving out the tools that contain the call (a tool
/// that runs an agent is not time that agent's calls waited for).
fn tool_time(
    c: usize,
    after: u64,
    start: u64,
    tools: &Map<Option<usize>, Vec<usize>>,
    agent_of: &[Option<usize>],
    parent: &[Option<usize>],
    spans: &[&Span],
) -> u64 {
    if start <= after || tools.is_empty() {
        return 0;
    }
    let mut above = Vec::new();
    let mut p = parent[c];
    while let Some(q) = p {
        above.push(q);
        p = parent[q];
    }
    let mut scope = agent_of[c];
    let mut cut: Vec<(u64, u64)> = Vec::new();
    loop {
        for &t in tools.get(&scope).into_iter().flatten() {
            let (s, e) = (spans[t].start_ns.max(after), spans[t].end_ns.min(start));
            if s < e && !above.contains(&t) {
                cut.push((s, e));
            }
        }
        match scope {
            Some(a) => scope = agent_of[a],
            None => break,
        }
    }
    cut.sort_unstable();
    let mut covered = 0;
    let mut reach = after;
    for (s, e) in cut {
        let s = s.max(reach);
        if e > s {
            covered += e - s;
            reach = e;
        }
    }
    covered
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A span of trace `t` from `start` to `end` ms.
    fn span(id: &str, parent: Option<&str>, kind: Kind, start: u64, end: u64) -> Span {
        Span {
            trace: "t".into(),
            id: id.into(),
            parent: parent.map(Into::into),
            name: id.into(),
            start_ns: start * 1_000_000,
            end_ns: end * 1_000_000,
            kind,
            conversation: None,
            line: 1,
            file: 0,
        }
    }

    fn refs(spans: &[Span]) -> Vec<&Span> {
        spans.iter().collect()
    }

    const CALL: Kind = Kind::Call {
        input: 1,
        output: 1,
    };

    fn ids(spans: &[Span], g: &Graph) -> Vec<(String, Vec<String>, u64, u64, bool)> {
        g.calls
            .iter()
            .map(|c| {
                (
                    spans[c.span].id.to_string(),
                    c.deps
                        .iter()
                        .map(|&d| spans[g.calls[d].span].id.to_string())
                        .collect(),
                    c.gap_ns / 1_000_000,
                    c.tool_ns / 1_000_000,
                    c.prefix_reset,
                )
            })
            .collect()
    }

    #[test]
    fn parallel_sub_agents_never_wait_for_each_other() {
        // Agent R: d1 0..500, then sub-agents A (a1 700..1500, tool
        // 1500..2000, a2 2100..2900) and B (b1 800..1200, b2 1300..1900)
        // side by side, then d2 3200..4000. Flat, a2 would wait for b2
        // (ended 1900 before a2 started 2100); per agent it does not.
        let spans = vec![
            span("R", None, Kind::Agent, 0, 5000),
            span("d1", Some("R"), CALL, 0, 500),
            span("A", Some("R"), Kind::Agent, 600, 3000),
            span("a1", Some("A"), CALL, 700, 1500),
            span("tool", Some("A"), Kind::Tool, 1500, 2000),
            span("a2", Some("A"), CALL, 2100, 2900),
            span("B", Some("R"), Kind::Agent, 650, 2000),
            span("b1", Some("B"), CALL, 800, 1200),
            span("b2", Some("B"), CALL, 1300, 1900),
            span("d2", Some("R"), CALL, 3200, 4000),
        ];
        let g = build(&refs(&spans)).unwrap();
        let s = |x: &str| x.to_string();
        assert_eq!(
            ids(&spans, &g),
            vec![
                (s("d1"), vec![], 0, 0, false),
                (s("a1"), vec![s("d1")], 200, 0, true),
                (s("b1"), vec![s("d1")], 300, 0, true),
                (s("b2"), vec![s("b1")], 100, 0, false),
                // 2100 - 1500 = 600, the tool 500 of it.
                (s("a2"), vec![s("a1")], 600, 500, false),
                // After A's last call (2900) and B's (1900): 300; A's tool
                // is not d2's agent's.
                (s("d2"), vec![s("b2"), s("a2")], 300, 0, false),
            ]
        );
    }

    #[test]
    fn a_call_inside_a_call_is_one_call_and_empty_agents_drop_out() {
        // A framework's `chat` span around the SDK's; an agent with no call;
        // a span of no GenAI kind between an agent and its call.
        let spans = vec![
            span("outer", None, CALL, 0, 1000),
            span("inner", Some("outer"), CALL, 10, 990),
            span("idle", None, Kind::Agent, 1000, 1100),
            span("http", None, Kind::Other { genai: false }, 0, 0),
            span("B", Some("http"), Kind::Agent, 1200, 2000),
            span("b1", Some("B"), CALL, 1300, 1900),
        ];
        let g = build(&refs(&spans)).unwrap();
        assert_eq!(g.wrappers, 1);
        let s = |x: &str| x.to_string();
        assert_eq!(
            ids(&spans, &g),
            vec![
                (s("inner"), vec![], 0, 0, false),
                // B is top-level (no agent above it): no prefix reset.
                (s("b1"), vec![s("inner")], 310, 0, false),
            ]
        );
    }

    #[test]
    fn a_tool_around_a_sub_agent_is_not_its_calls_tool_time() {
        // R: c1 0..100; tool T 150..1000 runs agent S (s1 200..900);
        // c2 1100..1200.
        let spans = vec![
            span("R", None, Kind::Agent, 0, 1300),
            span("c1", Some("R"), CALL, 0, 100),
            span("T", Some("R"), Kind::Tool, 150, 1000),
            span("S", Some("T"), Kind::Agent, 160, 950),
            span("s1", Some("S"), CALL, 200, 900),
            span("c2", Some("R"), CALL, 1100, 1200),
        ];
        let g = build(&refs(&spans)).unwrap();
        let s = |x: &str| x.to_string();
        assert_eq!(
            ids(&spans, &g),
            vec![
                (s("c1"), vec![], 0, 0, false),
                // 100 after c1, T contains s1: none of it is tool time.
                (s("s1"), vec![s("c1")], 100, 0, true),
                // 200 after s1, T covers 900..1000 of it.
                (s("c2"), vec![s("s1")], 200, 100, false),
            ]
        );
    }

    #[test]
    fn parents_in_a_circle_are_named() {
        let spans = vec![
            span("x", Some("y"), CALL, 0, 1),
            span("y", Some("x"), CALL, 0, 1),
        ];
        let e = build(&refs(&spans)).unwrap_err();
        assert!(
            e.contains("the spans `x` → `y` are each other's parents"),
            "{e}"
        );
    }
}
