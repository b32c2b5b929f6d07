//! mc-scale --to-delta / --from-delta: Dynamo's mooncake-delta rows, worked
//! out by hand, read the way Dynamo reads them, and full -> delta -> full
//! byte for byte.

use proptest::prelude::*;

use crate::util::{run, run_code, run_ok, run_ok_both};

/// A 3-turn session at block size 4 (and a session-less row between its
/// turns), worked out by hand:
/// turn 1: 6 tokens, ids [1, 2] (blocks of 4 and 2), answer 3.
/// turn 2: 6 + 3 + 5 new = 14 tokens. Turn 1's full blocks: one (id 1);
///   tokens 4..14 are 3 blocks [10, 11, 12]. Delta: 5 new tokens need
///   ceil(5/4) = 2 ids, the last two (11, 12); the block holding turn 1's
///   last 2 tokens and its answer, 10, is context.
/// turn 3: 14 + 2 + 4 new = 20 tokens. Turn 2's full blocks: 3 (1, 10, 11);
///   tokens 12..20 are [20, 21]. Delta: 4 new tokens, 1 id (21); context [20].
const FULL: &str = r#"{"timestamp": 0, "session_id": "s", "input_length": 6, "output_length": 3, "hash_ids": [1, 2]}
{"timestamp": 5, "input_length": 3, "output_length": 1, "hash_ids": [7]}
{"session_id": "s", "delay": 5, "input_length": 14, "output_length": 2, "hash_ids": [1, 10, 11, 12]}
{"session_id": "s", "delay": 7, "input_length": 20, "output_length": 1, "hash_ids": [1, 10, 11, 20, 21], "extra": {"k": 1}}
"#;

const DELTA: &str = r#"{"timestamp": 0, "session_id": "s", "input_length": 6, "output_length": 3, "hash_ids": [1, 2]}
{"timestamp": 5, "input_length": 3, "output_length": 1, "hash_ids": [7]}
{"session_id": "s", "delay": 5, "input_length": 5, "output_length": 2, "hash_ids": [11, 12], "context_ids": [10]}
{"session_id": "s", "delay": 7, "input_length": 4, "output_length": 1, "hash_ids": [21], "extra": {"k": 1}, "context_ids": [20]}
"#;

#[test]
fn a_three_turn_session_worked_out_by_hand() {
    let (out, err) = run_ok_both("mc-scale", &["--to-delta", "--block-size", "4"], FULL);
    assert_eq!(out, DELTA);
    assert!(
        err.contains("2 later turns of 1 sessions written as deltas (delta form, block size 4)"),
        "{err}"
    );
    let (back, err) = run_ok_both("mc-scale", &["--from-delta", "--block-size", "4"], DELTA);
    assert_eq!(back, FULL);
    assert!(
        err.contains("2 later turns of 1 sessions made full"),
        "{err}"
    );
}

/// Dynamo's own test of its delta reader (ai-dynamo/dynamo,
/// `test_engine_stack_runs_mooncake_delta`): at block size 4, a first turn
/// of 4 tokens answered with 2, then a delta of 2 tokens, is a second
/// request of 8 tokens. Their rows, request ids included.
#[test]
fn dynamo_s_own_delta_example_reads_the_same() {
    let rows = r#"{"request_id": "r0", "session_id": "s0", "input_length": 4, "output_length": 2, "hash_ids": [1], "timestamp": 0}
{"request_id": "r1", "session_id": "s0", "input_length": 2, "output_length": 1, "hash_ids": [2], "delay": 5}
"#;
    let out = run_ok("mc-scale", &["--from-delta", "--block-size", "4"], rows);
    let second: serde_json::Value = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
    assert_eq!(second["input_length"], 8);
    // Turn 1's one full block (id 1), then one block for the answer's 2
    // tokens and the 2 new ones: 8 tokens in 2 blocks, so no id is minted
    // and the delta's id names the second.
    assert_eq!(second["hash_ids"], serde_json::json!([1, 2]));
    // With a 3-token delta the prompt is 9 tokens, 3 blocks: the block
    // after turn 1's gets a fresh id (no context_ids given).
    let longer = rows.replace("\"input_length\": 2,", "\"input_length\": 3,");
    let out = run_ok("mc-scale", &["--from-delta", "--block-size", "4"], &longer);
    let second: serde_json::Value = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
    assert_eq!(second["input_length"], 9);
    assert_eq!(second["hash_ids"], serde_json::json!([1, 1u64 << 48, 2]));
}

#[test]
fn mc_gen_sessions_go_there_and_back_byte_for_byte() {
    for (seed, b) in [(1, "512"), (2, "16"), (3, "64")] {
        let full = run_ok(
            "mc-gen",
            &[
                "--seed",
                &seed.to_string(),
                "--block-size",
                b,
                "sessions",
                "--sessions",
                "40",
                "--osl",
                "uniform:1:700",
                "--system-prompt-tokens",
                "100",
            ],
            "",
        );
        let delta = run_ok("mc-scale", &["--to-delta"], &full);
        assert_ne!(delta, full);
        assert_dynamo_reads(&delta, &full, b.parse().unwrap());
        let back = run_ok("mc-scale", &["--from-delta", "--block-size", b], &delta);
        assert_eq!(back, full, "seed {seed}, block size {b}");
    }
}

/// Reads `delta` as Dynamo's WorkloadDriver does (each later turn's prompt
/// is the previous prompt, its answer and the delta; each delta has
/// exactly ceil(len / B) ids) and checks the prompt lengths are `full`'s.
fn assert_dynamo_reads(delta: &str, full: &str, b: u64) {
    let mut context: std::collections::HashMap<String, u64> = Default::default();
    for (d, f) in delta.lines().zip(full.lines()) {
        let d: serde_json::Value = serde_json::from_str(d).unwrap();
        let f: serde_json::Value = serde_json::from_str(f).unwrap();
        let len = d["input_length"].as_u64().unwrap();
        let n = d["hash_ids"].as_array().unwrap().len() as u64;
        assert_eq!(
            n,
            len.div_ceil(b),
            "Dynamo wants exactly ceil(len / B) ids: {d}"
        );
        // A row without a session is a session of its own.
        let Some(sid) = d["session_id"].as_str() else {
            assert_eq!(len, f["input_length"].as_u64().unwrap(), "{d}");
            continue;
        };
        let prompt = context.get(sid).copied().unwrap_or(0) + len;
        assert_eq!(prompt, f["input_length"].as_u64().unwrap(), "{d}");
        context.insert(
            sid.to_string(),
            prompt + d["output_length"].as_u64().unwrap(),
        );
    }
}

#[test]
fn a_turn_that_does_not_extend_its_session_names_line_and_field() {
    // Turn 2 drops turn 1's first block (a truncated context).
    let bad = FULL.replace("[1, 10, 11, 12]", "[9, 10, 11, 12]");
    let err = run_code("mc-scale", &["--to-delta", "--block-size", "4"], &bad, 65);
    assert!(
        err.contains("line 3: field `hash_ids`: do not start with the 1 ids of the previous turn's full blocks"),
        "{err}"
    );
    // Turn 2 shorter than turn 1's prompt and answer.
    let short = FULL.replace("\"input_length\": 14", "\"input_length\": 8");
    let err = run_code("mc-scale", &["--to-delta", "--block-size", "4"], &short, 65);
    assert!(err.contains("line 3: field `input_length`: 8 tokens is less than the session's previous prompt and answer (6 + 3 tokens)"), "{err}");
    // The rows before the bad one are written (ARCHITECTURE §2, bad input).
    let r = run("mc-scale", &["--to-delta", "--block-size", "4"], &short);
    assert_eq!(
        r.stdout,
        FULL.lines()
            .take(2)
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    );
    // A missing answer length.
    let no_osl = FULL.replace(
        "\"delay\": 5, \"input_length\": 14, \"output_length\": 2,",
        "\"delay\": 5, \"input_length\": 14,",
    );
    let err = run_code(
        "mc-scale",
        &["--to-delta", "--block-size", "4"],
        &no_osl,
        65,
    );
    assert!(
        err.contains("line 3: field `output_length`: missing"),
        "{err}"
    );
}

#[test]
fn bad_delta_rows_and_graphs_are_named() {
    // A delta turn with too many ids for its new tokens.
    let bad = DELTA.replace("[11, 12]", "[11, 12, 13]");
    let err = run_code("mc-scale", &["--from-delta", "--block-size", "4"], &bad, 65);
    assert!(
        err.contains("line 3: field `hash_ids`: 3 ids for 5 new tokens"),
        "{err}"
    );
    let bad = DELTA.replace("[10]", "[10, \"x\"]");
    let err = run_code("mc-scale", &["--from-delta", "--block-size", "4"], &bad, 65);
    assert!(err.contains("line 3: field `context_ids`"), "{err}");
    // Already in delta form.
    let err = run_code("mc-scale", &["--to-delta", "--block-size", "4"], DELTA, 65);
    assert!(
        err.contains("line 3: field `context_ids`: already present"),
        "{err}"
    );
    // An agent graph is not a chain of turns.
    let graph = r#"{"session_id": "g", "request_id": "a", "input_length": 4, "output_length": 1, "hash_ids": [1]}
{"session_id": "g", "request_id": "b", "wait_for": ["a"], "input_length": 9, "output_length": 1, "hash_ids": [1, 2, 3]}
"#;
    let err = run_code("mc-scale", &["--to-delta", "--block-size", "4"], graph, 65);
    assert!(
        err.contains("line 1: field `request_id`: an agent-graph call"),
        "{err}"
    );
    let err = run_code(
        "mc-scale",
        &["--from-delta", "--block-size", "4"],
        graph,
        65,
    );
    assert!(
        err.contains("line 2: field `wait_for`: an agent-graph call"),
        "{err}"
    );
    // Not with the rescaling options.
    let err = run_code("mc-scale", &["--to-delta", "--speedup", "2"], "", 2);
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn full_rows_read_as_deltas_are_named_on_stderr() {
    let (_, err) = run_ok_both("mc-scale", &["--from-delta", "--block-size", "4"], FULL);
    assert!(err.contains("is the input in full form already?"), "{err}");
}

/// One generated session trace: sessions of full (cumulative) turns built
/// the way mc-gen builds them, interleaved, some rows without a session,
/// in one of two id-list spacings.
#[derive(Debug, Clone)]
struct Gen {
    b: u64,
    /// Per session, per turn: (new tokens, answer tokens).
    sessions: Vec<Vec<(u64, u64)>>,
    /// The order rows are written in: a session index per row (in turn
    /// order within a session), or None for a row without a session.
    order: Vec<Option<usize>>,
    compact: bool,
}

fn gen() -> impl Strategy<Value = Gen> {
    (
        prop::sample::select(vec![1u64, 2, 4, 8, 16]),
        prop::collection::vec(prop::collection::vec((0u64..40, 0u64..40), 1..5), 1..6),
        any::<bool>(),
        any::<u64>(),
        0usize..4,
    )
        .prop_map(|(b, sessions, compact, seed, loose)| {
            // Interleave: each row picks a session with turns left, by a
            // simple generator seeded by the case.
            let mut left: Vec<usize> = sessions.iter().map(Vec::len).collect();
            let mut order = Vec::new();
            let mut x = seed | 1;
            let total: usize = left.iter().sum::<usize>() + loose;
            let mut loose_left = loose;
            for _ in 0..total {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let live: Vec<usize> = (0..left.len()).filter(|&s| left[s] > 0).collect();
                let pick = (x % (live.len() + loose_left) as u64) as usize;
                if pick < live.len() {
                    left[live[pick]] -= 1;
                    order.push(Some(live[pick]));
                } else {
                    loose_left -= 1;
                    order.push(None);
                }
            }
            Gen {
                b,
                sessions,
                order,
                compact,
            }
        })
}

/// The full rows of `g`: a turn's ids are the previous prompt's full
/// blocks, then fresh ids (mc-gen's rule, `gen::sessions::extend_ids`).
fn render(g: &Gen) -> String {
    let b = g.b;
    let mut next_id = 0u64;
    let mut fresh = |n: u64, out: &mut Vec<u64>| {
        for _ in 0..n {
            out.push(next_id);
            next_id += 1;
        }
    };
    let mut state: Vec<(usize, u64, u64, Vec<u64>)> = vec![(0, 0, 0, Vec::new()); g.sessions.len()];
    let (sep, colon) = if g.compact { (",", ":") } else { (", ", ": ") };
    let mut text = String::new();
    for (row, who) in g.order.iter().enumerate() {
        let (sid, input, osl, ids) = match who {
            Some(s) => {
                let (turn, prev_in, prev_out, prev_ids) = &mut state[*s];
                let (new, osl) = g.sessions[*s][*turn];
                // A first turn of no tokens would have no ids: give it one.
                let new = if *turn == 0 { new.max(1) } else { new };
                let input = *prev_in + *prev_out + new;
                let keep = ((*prev_in / b) as usize).min(prev_ids.len());
                let mut ids = prev_ids[..keep].to_vec();
                fresh(input.div_ceil(b) - keep as u64, &mut ids);
                *turn += 1;
                *prev_in = input;
                *prev_out = osl;
                *prev_ids = ids.clone();
                (
                    format!("\"session_id\"{colon}\"s{s}\"{sep}"),
                    input,
                    osl,
                    ids,
                )
            }
            None => {
                let mut ids = Vec::new();
                fresh(3u64.div_ceil(b), &mut ids);
                (String::new(), 3, 1, ids)
            }
        };
        let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
        text.push_str(&format!(
            "{{\"timestamp\"{colon}{row}{sep}{sid}\"input_length\"{colon}{input}{sep}\"output_length\"{colon}{osl}{sep}\"hash_ids\"{colon}[{}]{sep}\"x\"{colon}null}}\n",
            ids.join(sep)
        ));
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// full -> delta -> full is the identity, and Dynamo's reading of the
    /// delta rows gives every full prompt's length.
    #[test]
    fn full_to_delta_to_full_is_exact(g in gen()) {
        let full = render(&g);
        let b = g.b.to_string();
        let delta = run_ok("mc-scale", &["--to-delta", "--block-size", &b], &full);
        assert_dynamo_reads(&delta, &full, g.b);
        let back = run_ok("mc-scale", &["--from-delta", "--block-size", &b], &delta);
        prop_assert_eq!(back, full);
    }
}

/// The chunked loop (every row asks for the order) writes what the
/// one-line-at-a-time loop writes, a bad row on a chunk edge included.
#[test]
fn chunks_give_the_same_bytes_as_one_line_at_a_time() {
    let full = run_ok(
        "mc-gen",
        &[
            "--seed",
            "5",
            "--block-size",
            "16",
            "sessions",
            "--sessions",
            "30",
        ],
        "",
    );
    let chunks = [Some(1), Some(300), Some(4096), None];
    let delta =
        crate::chunked::same_as_in_order("mc-scale", &["--to-delta"], full.as_bytes(), &chunks);
    assert_eq!(delta.code, Some(0));
    let back = crate::chunked::same_as_in_order(
        "mc-scale",
        &["--from-delta", "--block-size", "16"],
        &delta.stdout,
        &chunks,
    );
    assert_eq!(back.stdout, full.as_bytes());
    let bad = crate::util::with_line_at(&full, 20, "{\"session_id\": \"session-0\", \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}");
    let out = crate::chunked::same_as_in_order(
        "mc-scale",
        &["--to-delta", "--block-size", "16"],
        bad.as_bytes(),
        &chunks,
    );
    assert_eq!(out.code, Some(65));
}
