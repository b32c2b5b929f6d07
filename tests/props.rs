//! Property tests over generated traces: identities, consistency of every
//! output row, fresh ids that collide with nothing, rows kept in count and
//! order, sessions kept whole, and speedups that compose.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use serde_json::Value;

use crate::util::run_ok;

const B: u64 = 8;

/// A generated row: session, ids and length; `n` numbers the rows.
#[derive(Debug, Clone)]
struct Row {
    session: Option<u32>,
    ts: u64,
    ids: Vec<u64>,
    len: u64,
    osl: u64,
}

/// Traces shaped like real ones: each row either repeats an earlier row
/// exactly, or extends the full blocks of an earlier row's prefix with new
/// ids, so ids are prefix-shaped and no id is used at two sizes.
fn trace() -> impl Strategy<Value = Vec<Row>> {
    prop::collection::vec(
        (
            any::<prop::sample::Index>(),
            0usize..4,
            0u64..5,
            1u64..=B,
            0u64..3000,
            0u64..600,
            prop::option::of(0u32..6),
            any::<bool>(),
        ),
        1..40,
    )
    .prop_map(|specs| {
        let mut rows: Vec<Row> = Vec::new();
        let mut next_id = 0u64;
        for (pick, reuse, fresh, tail, gap, osl, session, repeat) in specs {
            let ts = rows.last().map_or(0, |r| r.ts) + gap;
            if repeat && !rows.is_empty() {
                let src = rows[pick.index(rows.len())].clone();
                rows.push(Row {
                    ts,
                    session,
                    osl,
                    ..src
                });
                continue;
            }
            let mut ids = Vec::new();
            if !rows.is_empty() {
                let src = &rows[pick.index(rows.len())];
                let full = src.ids.len() - usize::from(!src.len.is_multiple_of(B));
                ids.extend_from_slice(&src.ids[..reuse.min(full)]);
            }
            for _ in 0..=fresh {
                ids.push(next_id);
                next_id += 1;
            }
            let len = (ids.len() as u64 - 1) * B + tail;
            rows.push(Row {
                session,
                ts,
                ids,
                len,
                osl,
            });
        }
        rows
    })
}

fn render(rows: &[Row]) -> String {
    let mut s = String::new();
    for (n, r) in rows.iter().enumerate() {
        let sess = r
            .session
            .map(|x| format!("\"session_id\": \"s{x}\", "))
            .unwrap_or_default();
        let ids: Vec<String> = r.ids.iter().map(u64::to_string).collect();
        s.push_str(&format!(
            "{{{sess}\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}, \"hash_ids\": [{}], \"n\": {n}}}\n",
            r.ts,
            r.len,
            r.osl,
            ids.join(", ")
        ));
    }
    s
}

fn run(t: &str, args: &[String], input: &str) -> String {
    run_ok(t, args, input)
}

fn parse(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn ids_of(v: &Value) -> Vec<u64> {
    v["hash_ids"].as_array().map_or_else(Vec::new, |a| {
        a.iter().map(|x| x.as_u64().unwrap()).collect()
    })
}

fn assert_consistent(rows: &[Value], b: u64) {
    for r in rows {
        let n = ids_of(r).len() as u64;
        let len = r["input_length"].as_u64().unwrap();
        assert!(
            n == 0 && len == 0 || (n - 1) * b < len && len <= n * b,
            "inconsistent row {r}"
        );
    }
}

/// Row count and order are kept: the pass-through field `n` counts 0, 1, 2, …
fn assert_order(rows: &[Value], count: usize) {
    let ns: Vec<u64> = rows.iter().map(|r| r["n"].as_u64().unwrap()).collect();
    assert_eq!(ns, (0..count as u64).collect::<Vec<_>>());
}

fn s(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn default_options_are_identities(rows in trace()) {
        let input = render(&rows);
        prop_assert_eq!(run("mc-scale", &s(&["--block-size", "8"]), &input), input.clone());
        prop_assert_eq!(run("mc-roots", &s(&["--roots", "1"]), &input), input.clone());
        prop_assert_eq!(run("mc-cap", &[], &input), input);
    }

    #[test]
    fn scaled_rows_are_consistent_and_fresh_ids_collide_with_nothing(
        rows in trace(),
        p in prop::sample::select(vec![0.25f64, 0.5, 1.0, 1.5, 2.0, 3.0, 2.7]),
        q in prop::sample::select(vec![0.0f64, 0.3, 0.5, 1.0, 1.5, 4.0]),
    ) {
        let input = render(&rows);
        let out = parse(&run("mc-scale", &s(&["--block-size", "8", "--prefix-len-multiplier", &p.to_string(), "--prompt-len-multiplier", &q.to_string()]), &input));
        assert_order(&out, rows.len());
        assert_consistent(&out, B);
        if p == 1.0 && q == 1.0 {
            // All multipliers at 1 is the identity, checked above.
            return Ok(());
        }
        let mut count: HashMap<u64, usize> = HashMap::new();
        for r in &rows { for &h in &r.ids { *count.entry(h).or_default() += 1; } }
        let k = if p > 1.0 { p.floor() as u64 } else { 1 };
        // Every output id is either a stretched shared id (h*k + j for an id h
        // used at least twice) or fresh: not an input id, and in one row only.
        let stretched: HashSet<u64> = count.iter().filter(|(_, &c)| c > 1).flat_map(|(&h, _)| (0..k).map(move |j| h * k + j)).collect();
        let input_ids: HashSet<u64> = count.keys().copied().collect();
        let mut fresh_rows: HashMap<u64, usize> = HashMap::new();
        for (i, r) in out.iter().enumerate() {
            for h in ids_of(r) {
                if !stretched.contains(&h) {
                    prop_assert!(!input_ids.contains(&h), "fresh id {} collides with an input id", h);
                    let first = *fresh_rows.entry(h).or_insert(i);
                    prop_assert_eq!(first, i, "fresh id {} used by two rows", h);
                }
            }
        }
    }

    #[test]
    fn capped_rows_are_consistent(rows in trace(), max in 1u64..60) {
        let input = render(&rows);
        let out = parse(&run("mc-cap", &s(&["--block-size", "8", "--max-isl", &max.to_string()]), &input));
        assert_order(&out, rows.len());
        assert_consistent(&out, B);
        for (r, o) in rows.iter().zip(&out) {
            prop_assert_eq!(o["input_length"].as_u64().unwrap(), r.len.min(max));
            // Kept ids are the row's own leading ids, except a cut last block.
            let got = ids_of(o);
            let keep = got.len();
            prop_assert_eq!(&got[..keep.saturating_sub(1)], &r.ids[..keep.saturating_sub(1)]);
        }
        let dropped = parse(&run("mc-cap", &s(&["--block-size", "8", "--max-isl", &max.to_string(), "--drop"]), &input));
        prop_assert_eq!(dropped.len(), rows.iter().filter(|r| r.len <= max).count());
    }

    #[test]
    fn roots_keep_sessions_whole(rows in trace(), k in 1u64..6, seed in 0u64..1000) {
        let input = render(&rows);
        let out = parse(&run("mc-roots", &s(&["--roots", &k.to_string(), "--seed", &seed.to_string()]), &input));
        assert_order(&out, rows.len());
        assert_consistent(&out, B);
        let mut tree: HashMap<u32, u64> = HashMap::new();
        for (r, o) in rows.iter().zip(&out) {
            let got = ids_of(o);
            let t = got[0] % k;
            prop_assert_eq!(got, r.ids.iter().map(|h| h * k + t).collect::<Vec<_>>());
            if let Some(sess) = r.session {
                prop_assert_eq!(*tree.entry(sess).or_insert(t), t);
            }
        }
    }

    #[test]
    fn integer_speedups_compose_exactly(rows in trace(), r in 1u64..10, s2 in 1u64..10) {
        let input = render(&rows);
        let twice = run("mc-scale", &s(&["--speedup", &s2.to_string()]), &run("mc-scale", &s(&["--speedup", &r.to_string()]), &input));
        let once = run("mc-scale", &s(&["--speedup", &(r * s2).to_string()]), &input);
        // floor(floor(t/R)/S) = floor(t/(R*S)) for non-negative integers.
        prop_assert_eq!(twice, once);
    }

    #[test]
    fn real_speedups_compose_up_to_truncation(rows in trace(), r in 0.1f64..10.0, s2 in 0.1f64..10.0) {
        let input = render(&rows);
        let twice = parse(&run("mc-scale", &s(&["--speedup", &s2.to_string()]), &run("mc-scale", &s(&["--speedup", &r.to_string()]), &input)));
        let once = parse(&run("mc-scale", &s(&["--speedup", &(r * s2).to_string()]), &input));
        // trunc(t/R) loses less than 1; dividing by S that becomes < 1/S.
        let slack = (1.0 / s2).ceil() as i64 + 1;
        for (a, b) in twice.iter().zip(&once) {
            let (a, b) = (a["timestamp"].as_i64().unwrap(), b["timestamp"].as_i64().unwrap());
            prop_assert!((a - b).abs() <= slack, "{} vs {}", a, b);
        }
    }
}

/// Renames every id of `rows` by an injective map: some ids stay small (in
/// reverse order), the others move far up (into mc-analyze's and mc-scale's
/// sparse maps), so a tool that let numbering matter would disagree.
fn renamed(rows: &[Row], far: &[bool]) -> Vec<Row> {
    let max = rows
        .iter()
        .flat_map(|r| r.ids.iter())
        .max()
        .map_or(0, |&m| m + 1);
    let name = |id: u64| {
        if far[id as usize % far.len()] {
            (1u64 << 40) + id * 7919
        } else {
            max - 1 - id
        }
    };
    rows.iter()
        .map(|r| Row {
            ids: r.ids.iter().map(|&id| name(id)).collect(),
            ..r.clone()
        })
        .collect()
}

/// The rows with each id replaced by its rank of first appearance: equal
/// for two outputs exactly when they agree up to a renaming of ids.
fn canonical(text: &str) -> Vec<Value> {
    let mut names: HashMap<u64, u64> = HashMap::new();
    parse(text)
        .into_iter()
        .map(|mut r| {
            if let Some(ids) = r.get_mut("hash_ids").and_then(Value::as_array_mut) {
                for id in ids {
                    let n = names.len() as u64;
                    *id = Value::from(*names.entry(id.as_u64().unwrap()).or_insert(n));
                }
            }
            r
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Ids are only names (docs/ARCHITECTURE.md §1, "Ids are names"): renaming them by any one-to-one
    /// map changes no statistic and no transform's output beyond the renaming.
    #[test]
    fn renaming_ids_changes_nothing_but_the_names(
        rows in trace(),
        far in prop::collection::vec(any::<bool>(), 1..8),
    ) {
        let input = render(&rows);
        let other = render(&renamed(&rows, &far));
        let analyze = s(&["--json", "--block-size", "8", "--cache-blocks", "3,10"]);
        prop_assert_eq!(run("mc-analyze", &analyze, &input), run("mc-analyze", &analyze, &other));
        for args in [
            s(&["--block-size", "8", "--prefix-len-multiplier", "2", "--prompt-len-multiplier", "0.5"]),
            s(&["--block-size", "8", "--prefix-len-multiplier", "0.5", "--prompt-len-multiplier", "1.5"]),
        ] {
            prop_assert_eq!(canonical(&run("mc-scale", &args, &input)), canonical(&run("mc-scale", &args, &other)));
        }
        let cap = s(&["--block-size", "8", "--max-isl", "13"]);
        prop_assert_eq!(canonical(&run("mc-cap", &cap, &input)), canonical(&run("mc-cap", &cap, &other)));
        let roots = s(&["--roots", "3"]);
        prop_assert_eq!(canonical(&run("mc-roots", &roots, &input)), canonical(&run("mc-roots", &roots, &other)));
    }
}

/// A generated agent trace: graph sessions `g0`…, each call waiting for
/// some earlier calls of its session (through its `wait_for` or their
/// `branches`), plain sessions `p0`… and rows without session between
/// them. Every row has a timestamp (mc-merge interleave orders by it) and
/// prefix-shaped, consistent ids.
fn agent_trace() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            0u32..3,
            any::<bool>(),
            prop::collection::vec((any::<prop::sample::Index>(), any::<bool>()), 0..3),
            0u64..500,
            prop::option::of(0u64..300),
            1u64..40,
        ),
        1..30,
    )
    .prop_map(|specs| {
        let mut rows: Vec<serde_json::Map<String, Value>> = Vec::new();
        // Per graph session: the rows of its calls.
        let mut calls: HashMap<u32, Vec<usize>> = HashMap::new();
        let mut next_id = 0u64;
        for (i, (sess, graph, deps, delay, tool, len)) in specs.into_iter().enumerate() {
            let mut row = serde_json::Map::new();
            row.insert("timestamp".into(), Value::from(i as u64 * 10));
            let n = len.div_ceil(B);
            let ids: Vec<u64> = (next_id..next_id + n).collect();
            next_id += n;
            if graph {
                let id = format!("c{i}");
                let earlier = calls.entry(sess).or_default();
                let mut wait = Vec::new();
                for (pick, via_branch) in deps {
                    if earlier.is_empty() {
                        break;
                    }
                    let p = earlier[pick.index(earlier.len())];
                    if via_branch {
                        let b = rows[p]
                            .entry("branches")
                            .or_insert_with(|| Value::Array(Vec::new()));
                        b.as_array_mut().unwrap().push(Value::from(id.clone()));
                    } else {
                        wait.push(Value::from(format!("c{p}")));
                    }
                }
                earlier.push(i);
                row.insert("session_id".into(), Value::from(format!("g{sess}")));
                row.insert("request_id".into(), Value::from(id));
                if !wait.is_empty() {
                    row.insert("wait_for".into(), Value::Array(wait));
                }
                if let Some(t) = tool {
                    row.insert("tool_wait_ms".into(), Value::from(t));
                }
            } else if sess > 0 {
                row.insert("session_id".into(), Value::from(format!("p{sess}")));
            }
            row.insert("delay".into(), Value::from(delay));
            row.insert("input_length".into(), Value::from(len));
            row.insert("output_length".into(), Value::from(5));
            row.insert("hash_ids".into(), Value::from(ids));
            rows.push(row);
        }
        rows.into_iter()
            .map(|r| format!("{}\n", Value::Object(r)))
            .collect()
    })
}

/// Each row's dependencies named by request id, or by session and turn
/// for a plain turn, with the merge's `f{t}:` prefix taken off; with the
/// graph checks passed.
fn graph_structure(text: &str) -> Vec<(String, Vec<String>)> {
    let g = mctrace::graph::Graphs::from_lines(text).unwrap();
    let strip = |s: &str| {
        let s = s.trim_matches('"');
        match s.split_once(':') {
            Some((f, rest)) if f.starts_with('f') => rest.to_string(),
            _ => s.to_string(),
        }
    };
    let mut turns: HashMap<Option<u32>, usize> = HashMap::new();
    let names: Vec<String> = (0..g.len())
        .map(|r| {
            let sess = g.session(r);
            let k = turns.entry(sess).or_default();
            *k += 1;
            match g.request_id(r) {
                Some(id) => strip(id),
                None => format!(
                    "{}#{k}",
                    sess.map_or(String::new(), |s| strip(&String::from_utf8_lossy(
                        g.session_id(s)
                    )))
                ),
            }
        })
        .collect();
    (0..g.len())
        .map(|r| {
            let mut deps: Vec<String> = g
                .deps(r)
                .iter()
                .map(|&d| names[d as usize].clone())
                .collect();
            deps.sort();
            (names[r].clone(), deps)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any transform of a valid graph is a valid graph with the same
    /// dependency structure (docs/guide/agents.md).
    #[test]
    fn transforms_keep_agent_graphs(text in agent_trace(), pick in 0usize..8) {
        let want = graph_structure(&text);
        let (tool, args): (&str, Vec<&str>) = match pick {
            0 => ("mc-scale", vec!["--speedup", "3"]),
            1 => ("mc-scale", vec!["--speedup", "0.5", "--output-len-multiplier", "2"]),
            2 => ("mc-scale", vec!["--prefix-len-multiplier", "2", "--prompt-len-multiplier", "0.5", "--block-size", "8"]),
            3 => ("mc-roots", vec!["--roots", "3"]),
            4 => ("mc-cap", vec!["--max-isl", "12", "--block-size", "8"]),
            5 => ("mc-cap", vec!["--max-osl", "2"]),
            6 => ("mc-merge", vec!["interleave", "--scale-rate", "2", "-"]),
            _ => ("mc-merge", vec!["concat", "-"]),
        };
        let out = run(tool, &s(&args), &text);
        prop_assert_eq!(graph_structure(&out), want);
    }
}

#[test]
fn merging_two_agent_traces_keeps_both_graphs() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        "{\"session_id\": \"s\", \"timestamp\": 0, \"request_id\": \"a\", \"branches\": [\"b\"]}\n\
                {\"session_id\": \"s\", \"timestamp\": 5, \"request_id\": \"b\", \"delay\": 1}\n";
    let a = crate::util::write_file(dir.path(), "a.jsonl", text);
    let b = crate::util::write_file(dir.path(), "b.jsonl", text);
    let out = run_ok(
        "mc-merge",
        &[
            std::ffi::OsStr::new("interleave"),
            a.as_os_str(),
            b.as_os_str(),
        ],
        "",
    );
    // By hand: rows a(f0), a(f1), b(f0), b(f1); each b waits for its a.
    let g = mctrace::graph::Graphs::from_lines(&out).unwrap();
    assert_eq!(g.deps(2), &[0]);
    assert_eq!(g.deps(3), &[1]);
}
