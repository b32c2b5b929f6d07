//! mc-scale --sample-sessions / --sample-rows: sessions kept whole, the
//! same seed the same rows (in one file or in shards), the kept fraction
//! within binomial bounds, graphs never cut, bad rows named.

use std::collections::{BTreeMap, HashSet};

use crate::util::{run_code, run_ok, run_ok_both};

/// `n` sessions of 1 to 4 turns, interleaved two at a time, with lengths
/// that differ per row so a token share means something.
fn sessions(n: usize) -> String {
    let mut s = String::new();
    for pair in (0..n).step_by(2) {
        for turn in 0..4 {
            for sess in pair..(pair + 2).min(n) {
                if turn < 1 + sess % 4 {
                    s.push_str(&format!(
                        "{{\"session_id\": \"s{sess}\", \"input_length\": {}, \"output_length\": {}, \"hash_ids\": [{sess}]}}\n",
                        10 + sess % 7,
                        1 + turn
                    ));
                }
            }
        }
    }
    s
}

fn rows(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Rows per session id.
fn per_session(text: &str) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in rows(text) {
        *m.entry(r["session_id"].to_string()).or_default() += 1;
    }
    m
}

/// Whether `sub`'s lines are `all`'s, in order.
fn is_subsequence(sub: &str, all: &str) -> bool {
    let mut it = all.lines();
    sub.lines().all(|l| it.any(|a| a == l))
}

#[test]
fn sessions_are_kept_whole_in_order_and_near_the_fraction() {
    let input = sessions(2000);
    let whole = per_session(&input);
    for (f, seed) in [(0.3f64, "5"), (0.5, "9"), (0.05, "1")] {
        let (out, err) = run_ok_both(
            "mc-scale",
            &["--sample-sessions", &f.to_string(), "--seed", seed],
            &input,
        );
        assert!(is_subsequence(&out, &input));
        let kept = per_session(&out);
        for (s, n) in &kept {
            assert_eq!(whole[s], *n, "session {s} cut");
        }
        // Binomial(2000, f): within 5 standard deviations.
        let (mean, sd) = (2000.0 * f, (2000.0 * f * (1.0 - f)).sqrt());
        let k = kept.len() as f64;
        assert!((k - mean).abs() < 5.0 * sd, "{k} sessions kept at {f}");
        // The summary's counts, checked against the output.
        let tokens = |text: &str| -> u64 {
            rows(text)
                .iter()
                .map(|r| r["input_length"].as_u64().unwrap() + r["output_length"].as_u64().unwrap())
                .sum()
        };
        let (t_kept, t_all) = (tokens(&out), tokens(&input));
        let want = format!(
            "kept {} of 2000 sessions ({:.2}%), {} of {} rows ({:.2}%), {:.2}% of tokens ({t_kept} of {t_all} input+output)",
            kept.len(),
            100.0 * k / 2000.0,
            out.lines().count(),
            input.lines().count(),
            100.0 * out.lines().count() as f64 / input.lines().count() as f64,
            100.0 * t_kept as f64 / t_all as f64,
        );
        assert!(err.contains(&want), "{err}\nwanted: {want}");
    }
}

#[test]
fn the_same_seed_keeps_the_same_sessions_in_one_file_or_in_shards() {
    let input = sessions(300);
    let args = ["--sample-sessions", "0.4", "--seed", "11"];
    let once = run_ok("mc-scale", &args, &input);
    assert_eq!(run_ok("mc-scale", &args, &input), once);
    // Cut the file in two (a session's turns on both sides): each half
    // sampled alone keeps the same rows.
    let lines: Vec<&str> = input.lines().collect();
    let half = lines.len() / 2;
    let first = lines[..half]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect::<String>();
    let second = lines[half..]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect::<String>();
    let shards = run_ok("mc-scale", &args, &first) + &run_ok("mc-scale", &args, &second);
    assert_eq!(shards, once);
    let other = run_ok(
        "mc-scale",
        &["--sample-sessions", "0.4", "--seed", "12"],
        &input,
    );
    assert_ne!(other, once);
    // 1 keeps everything, 0 nothing.
    assert_eq!(
        run_ok("mc-scale", &["--sample-sessions", "1"], &input),
        input
    );
    assert_eq!(run_ok("mc-scale", &["--sample-sessions", "0"], &input), "");
}

#[test]
fn rows_without_sessions_are_drawn_one_by_one() {
    let mut input = String::new();
    for k in 0..4000 {
        input.push_str(&format!(
            "{{\"timestamp\": {k}, \"input_length\": 5, \"output_length\": 1}}\n"
        ));
    }
    // And one session, which --sample-rows alone keeps.
    input.push_str("{\"session_id\": \"a\", \"input_length\": 5, \"output_length\": 1}\n");
    let (out, err) = run_ok_both(
        "mc-scale",
        &["--sample-rows", "0.25", "--seed", "3"],
        &input,
    );
    assert!(is_subsequence(&out, &input));
    let loose = out.lines().filter(|l| !l.contains("session_id")).count() as f64;
    let (mean, sd) = (1000.0, (4000.0f64 * 0.25 * 0.75).sqrt());
    assert!((loose - mean).abs() < 5.0 * sd, "{loose} rows kept");
    assert!(out.contains("\"session_id\": \"a\""));
    assert!(
        err.contains(&format!("rows without a session_id: {loose} of 4000")),
        "{err}"
    );
}

#[test]
fn agent_graphs_are_never_cut() {
    let graph = run_ok(
        "mc-gen",
        &[
            "--seed",
            "4",
            "agent",
            "--graph",
            "map-reduce",
            "--num-sessions",
            "200",
        ],
        "",
    );
    let whole = per_session(&graph);
    let out = run_ok(
        "mc-scale",
        &["--sample-sessions", "0.5", "--seed", "2"],
        &graph,
    );
    let kept = per_session(&out);
    assert!(kept.len() > 50 && kept.len() < 150, "{}", kept.len());
    for (s, n) in &kept {
        assert_eq!(whole[s], *n, "graph {s} cut");
    }
    // Every call a kept call waits for is kept.
    let ids: HashSet<String> = rows(&out)
        .iter()
        .filter_map(|r| r["request_id"].as_str().map(str::to_string))
        .collect();
    for r in rows(&out) {
        for w in r["wait_for"].as_array().into_iter().flatten() {
            assert!(ids.contains(w.as_str().unwrap()), "{r}");
        }
    }
    // Graph calls without a session id (Dynamo's rows may have none) are
    // one session: kept or dropped together, whatever the seed.
    let loose = "{\"request_id\": \"a\", \"input_length\": 4, \"output_length\": 1}\n\
                 {\"request_id\": \"b\", \"wait_for\": [\"a\"], \"input_length\": 4, \"output_length\": 1}\n\
                 {\"request_id\": \"c\", \"wait_for\": [\"b\"], \"input_length\": 4, \"output_length\": 1}\n";
    let mut seen = HashSet::new();
    for seed in 0..16 {
        let out = run_ok(
            "mc-scale",
            &["--sample-rows", "0.5", "--seed", &seed.to_string()],
            loose,
        );
        assert!(out.is_empty() || out == loose, "seed {seed}: {out}");
        seen.insert(out.is_empty());
    }
    assert_eq!(
        seen.len(),
        2,
        "16 seeds at 0.5 both kept and dropped the graph"
    );
}

#[test]
fn bad_rows_and_options_are_named() {
    let input = sessions(4).replacen("\"session_id\": \"s2\"", "\"session_id\": [2]", 1);
    let line = input
        .lines()
        .position(|l| l.contains("\"session_id\": [2]"))
        .unwrap()
        + 1;
    let err = run_code("mc-scale", &["--sample-sessions", "0.5"], &input, 65);
    assert!(
        err.contains(&format!("line {line}: field `session_id`")),
        "{err}"
    );
    let input = sessions(4).replacen("\"input_length\": 10", "\"input_length\": \"ten\"", 1);
    let err = run_code("mc-scale", &["--sample-sessions", "0.5"], &input, 65);
    assert!(err.contains("line 1: field `input_length`"), "{err}");
    let err = run_code("mc-scale", &["--sample-sessions", "1.5"], "", 2);
    assert!(err.contains("`1.5` is not between 0 and 1"), "{err}");
    let err = run_code("mc-scale", &["--sample-rows", "0.5", "--to-delta"], "", 2);
    assert!(err.contains("cannot be used with"), "{err}");
}

/// The chunked loop (rows without a session are drawn by their index,
/// which a chunk guesses) keeps what the one-line-at-a-time loop keeps.
#[test]
fn chunks_keep_what_one_line_at_a_time_keeps() {
    let mut input = sessions(200);
    for k in 0..300 {
        input.push_str(&format!(
            "{{\"timestamp\": {k}, \"input_length\": 5, \"output_length\": 1}}\n"
        ));
        if k % 50 == 0 {
            input.push('\n');
        }
    }
    let chunks = [Some(1), Some(300), Some(4096), None];
    let out = crate::chunked::same_as_in_order(
        "mc-scale",
        &["--sample-sessions", "0.3", "--seed", "8"],
        input.as_bytes(),
        &chunks,
    );
    assert_eq!(out.code, Some(0));
}
