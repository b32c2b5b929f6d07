//! mc-merge: interleave order (ties stable), concat gaps, unsorted inputs,
//! disjoint ids checked through mc-analyze's cache model, --weights,
//! --scale-rate and stdin; every expected value worked out by hand.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::util::temp_files as files;
use crate::util::{run_ok, tool};

fn args<'a>(head: &[&'a str], paths: &'a [PathBuf]) -> Vec<&'a std::ffi::OsStr> {
    head.iter()
        .map(|s| std::ffi::OsStr::new(*s))
        .chain(paths.iter().map(|p| p.as_os_str()))
        .collect()
}

fn merge_ok(head: &[&str], paths: &[PathBuf], stdin: &str) -> String {
    run_ok("mc-merge", &args(head, paths), stdin)
}

/// The value of `"tag"` on every output row.
fn tags(out: &str) -> Vec<String> {
    out.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["tag"].as_str().unwrap().to_string()
        })
        .collect()
}

fn timestamps(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["timestamp"].clone())
        .collect()
}

const A: &str = r#"{"timestamp": 0, "tag": "a1", "input_length": 3}
{"timestamp": 5, "tag": "a2", "session_id": "s"}
{"session_id": "s", "delay": 100, "tag": "a2b"}
{"timestamp": 5, "tag": "a3"}
{"timestamp": 9, "tag": "a4"}
"#;

const B: &str = r#"{"timestamp": 5, "tag": "b1"}
{"tag": "b2", "timestamp": 5}
{"timestamp": 7, "tag": "b3"}
"#;

#[test]
fn interleave_orders_by_time_and_keeps_ties_stable() {
    let (_d, p) = files(&[("a.jsonl", A), ("b.jsonl", B)]);
    let out = merge_ok(&["interleave", "--shared-ids"], &p, "");
    // Times a: 0 5 (5) 5 9, b: 5 5 7. At 5 file a (index 0) goes first, in
    // its file order, and a2b (no timestamp) stays behind a2.
    assert_eq!(
        tags(&out),
        ["a1", "a2", "a2b", "a3", "b1", "b2", "b3", "a4"]
    );
    // Rows are written as read (key order, spacing) with --shared-ids.
    assert!(out.contains("{\"tag\": \"b2\", \"timestamp\": 5}\n"));
    assert!(out.starts_with("{\"timestamp\": 0, \"tag\": \"a1\", \"input_length\": 3}\n"));
    // B before A: ties now go to b.
    let rev = vec![p[1].clone(), p[0].clone()];
    let out = merge_ok(&["interleave", "--shared-ids"], &rev, "");
    assert_eq!(
        tags(&out),
        ["a1", "b1", "b2", "a2", "a2b", "a3", "b3", "a4"]
    );
}

#[test]
fn summary_names_rows_per_file_and_the_span() {
    let (_d, p) = files(&[("a.jsonl", A), ("b.jsonl", B)]);
    let out = tool("mc-merge")
        .args(args(&["interleave"], &p))
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    let a = p[0].display();
    let b = p[1].display();
    assert_eq!(
        err,
        format!(
            "mc-merge: interleave: {a} 5 rows, {b} 3 rows; 8 rows written, timestamps 0 to 9 ms\n"
        )
    );
}

#[test]
fn concat_shifts_each_file_after_the_last_arrival() {
    // a is unsorted: its last line is not its latest arrival (30).
    let a = "{\"timestamp\": 10}\n{\"timestamp\": 30}\n{\"timestamp\": 20}\n";
    // b: earliest 3, latest 12; offset = 30 + 100 - 3 = 127 -> 134 130 139.
    let b = "{\"timestamp\": 7}\n{\"timestamp\": 3}\n{\"timestamp\": 12}\n";
    // c: earliest 40; offset = 139 + 100 - 40 = 199 -> 249 239; a row
    // without a timestamp is not moved.
    let c = "{\"timestamp\": 50}\n{\"input_length\": 1}\n{\"timestamp\": 40}\n";
    let (_d, p) = files(&[("a", a), ("b", b), ("c", c)]);
    let out = merge_ok(&["concat", "--gap-ms", "100"], &p, "");
    assert_eq!(
        out,
        "{\"timestamp\": 10}\n{\"timestamp\": 30}\n{\"timestamp\": 20}\n\
         {\"timestamp\": 134}\n{\"timestamp\": 130}\n{\"timestamp\": 139}\n\
         {\"timestamp\": 249}\n{\"input_length\": 1}\n{\"timestamp\": 239}\n"
    );
    // No gap: b starts at a's latest arrival (offset 30 - 3 = 27 -> 34 30 39).
    let out = merge_ok(&["concat"], &p[..2], "");
    assert_eq!(
        timestamps(&out),
        [10, 30, 20, 34, 30, 39].map(serde_json::Value::from)
    );
    // A fractional gap makes the shifted times fractional: 30 + 0.5 - 3.
    let out = merge_ok(&["concat", "--gap-ms", "0.5"], &p[..2], "");
    assert_eq!(
        timestamps(&out)[3..],
        [34.5, 30.5, 39.5].map(serde_json::Value::from)
    );
}

const UNSORTED_A: &str = "{\"timestamp\": 10, \"tag\": \"a1\"}\n{\"timestamp\": 30, \"tag\": \"a2\"}\n{\"timestamp\": 20, \"tag\": \"a3\"}\n";
const UNSORTED_B: &str = "{\"timestamp\": 7, \"tag\": \"b1\"}\n{\"timestamp\": 3, \"tag\": \"b2\"}\n{\"timestamp\": 12, \"tag\": \"b3\"}\n";

#[test]
fn an_unsorted_input_is_an_error_naming_file_and_line() {
    let (_d, p) = files(&[("a.jsonl", UNSORTED_A), ("b.jsonl", UNSORTED_B)]);
    let out = tool("mc-merge")
        .args(args(&["interleave"], &p))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
    // Heads a1 (10) and b1 (7): b1 is written, then b's line 2 goes back.
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "{\"timestamp\": 7, \"tag\": \"b1\"}\n"
    );
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&format!(
            "{}: line 2: timestamp 3 is earlier than 7 on line 1",
            p[1].display()
        )) && err.contains("--sort"),
        "{err}"
    );
}

#[test]
fn sort_orders_unsorted_inputs_in_memory() {
    let (_d, p) = files(&[("a.jsonl", UNSORTED_A), ("b.jsonl", UNSORTED_B)]);
    let out = merge_ok(&["interleave", "--sort"], &p, "");
    // a sorted: 10 20 30; b sorted: 3 7 12.
    assert_eq!(tags(&out), ["b2", "b1", "a1", "b3", "a3", "a2"]);
}

/// The part of `mc-analyze --json` these tests read, strictly.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Cache {
    order: String,
    input_tokens: f64,
    results: Vec<CacheResult>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct CacheResult {
    cache_blocks: Option<u64>,
    hit_tokens: f64,
    hit_rate: f64,
}

fn cache_of(trace: &str) -> Cache {
    let json = run_ok("mc-analyze", &["--json", "--block-size", "512"], trace);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    serde_json::from_value(v["cache"].clone()).unwrap()
}

#[test]
fn ids_of_different_files_are_disjoint_unless_shared() {
    // One file: row 2 extends row 1's two blocks. B = 512.
    let one = "{\"timestamp\": 0, \"input_length\": 1024, \"hash_ids\": [0, 1], \"session_id\": 1}\n\
               {\"timestamp\": 10, \"input_length\": 1536, \"hash_ids\": [0, 1, 2], \"session_id\": 1}\n";
    let (_d, p) = files(&[("x", one), ("y", one)]);
    // Inside one file, row 2 hits [0, 1]: 1024 of 2560 tokens.
    let single = cache_of(one);
    assert_eq!(
        (single.input_tokens, single.results[0].hit_tokens),
        (2560.0, 1024.0)
    );

    // Disjoint (default): each file only hits itself, 2 x 1024 of 5120.
    let merged = merge_ok(&["concat"], &p, "");
    let c = cache_of(&merged);
    assert_eq!(c.order, "file");
    assert_eq!(c.results[0].cache_blocks, None);
    assert_eq!((c.input_tokens, c.results[0].hit_tokens), (5120.0, 2048.0));
    assert_eq!(c.results[0].hit_rate, 2048.0 / 5120.0);
    // Ids and sessions in file t of 2: h -> 2h + t; session 1 -> 2 and 3.
    let rows: Vec<serde_json::Value> = merged
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows[1]["hash_ids"], serde_json::json!([0, 2, 4]));
    assert_eq!(rows[3]["hash_ids"], serde_json::json!([1, 3, 5]));
    assert_eq!(rows[0]["session_id"], 2);
    assert_eq!(rows[2]["session_id"], 3);

    // --shared-ids: file y's row 1 hits [0, 1] (1024) and its row 2 hits
    // [0, 1, 2] (1536): 1024 + 1024 + 1536 = 3584 of 5120.
    let shared = merge_ok(&["concat", "--shared-ids"], &p, "");
    let c = cache_of(&shared);
    assert_eq!((c.input_tokens, c.results[0].hit_tokens), (5120.0, 3584.0));
    // Same through interleave (times 0, 0, 10, 10: x1 y1 x2 y2): disjoint
    // gives 2048 again; shared: y1 hits 1024, x2 1024, y2 1536 = 3584.
    assert_eq!(
        cache_of(&merge_ok(&["interleave"], &p, "")).results[0].hit_tokens,
        2048.0
    );
    assert_eq!(
        cache_of(&merge_ok(&["interleave", "--shared-ids"], &p, "")).results[0].hit_tokens,
        3584.0
    );
}

#[test]
fn string_session_ids_get_a_file_prefix() {
    let (_d, p) = files(&[
        ("x", "{\"session_id\": \"chat-1\", \"timestamp\": 0}\n"),
        ("y", "{\"session_id\": \"chat-1\", \"timestamp\": 0}\n"),
    ]);
    assert_eq!(
        merge_ok(&["interleave"], &p, ""),
        "{\"session_id\": \"f0:chat-1\", \"timestamp\": 0}\n{\"session_id\": \"f1:chat-1\", \"timestamp\": 0}\n"
    );
}

/// `n` sessions of 3 rows each, tagged with `name`.
fn sessions(name: &str, n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        for turn in 0..3 {
            s.push_str(&format!(
                "{{\"timestamp\": {}, \"session_id\": \"{name}{i}\", \"tag\": \"{name}\"}}\n",
                i * 10 + turn
            ));
        }
    }
    s
}

#[test]
fn weights_mix_rows_in_proportion_keeping_sessions_whole() {
    let (_d, p) = files(&[("a", &sessions("a", 100)), ("b", &sessions("b", 100))]);
    // 300 rows each at 1:2: s = min(300/1, 300/2) = 150; b keeps all 300,
    // a keeps 150/300 = half its sessions in expectation (100 sessions,
    // sd 5 sessions = 15 rows).
    let out = merge_ok(&["interleave", "--weights", "1,2", "--seed", "3"], &p, "");
    let t = tags(&out);
    let a = t.iter().filter(|x| *x == "a").count();
    assert_eq!(t.len() - a, 300);
    assert!((90..=210).contains(&a) && a % 3 == 0, "{a}");
    // Whole sessions: every kept session has its 3 turns.
    let mut per: std::collections::HashMap<String, usize> = Default::default();
    for l in out.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        *per.entry(v["session_id"].as_str().unwrap().into())
            .or_default() += 1;
    }
    assert!(per.values().all(|&n| n == 3));
    // The same seed gives the same bytes; another seed another sample.
    assert_eq!(
        out,
        merge_ok(&["interleave", "--weights", "1,2", "--seed", "3"], &p, "")
    );
    assert_ne!(
        out,
        merge_ok(&["interleave", "--weights", "1,2", "--seed", "4"], &p, "")
    );
    // Weight 0 leaves a file out; equal weights on equal files keep all.
    let out = merge_ok(&["concat", "--weights", "0,1"], &p, "");
    assert_eq!(tags(&out), vec!["b"; 300]);
    assert_eq!(
        merge_ok(&["concat", "--weights", "1,1"], &p, "")
            .lines()
            .count(),
        600
    );
}

#[test]
fn weights_summary_counts_dropped_rows() {
    let (_d, p) = files(&[("a", &sessions("a", 2)), ("b", &sessions("b", 1))]);
    let out = tool("mc-merge")
        .args(args(&["concat", "--weights", "0,1"], &p))
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    // a (weight 0) writes none of its 6 rows; with nothing written before
    // it, b keeps its own times 0 1 2.
    assert!(
        err.contains(&format!(
            "{} 0 of 6 rows, {} 3 rows; 3 rows written, timestamps 0 to 2 ms",
            p[0].display(),
            p[1].display()
        )),
        "{err}"
    );
}

#[test]
fn scale_rate_speeds_each_file_up() {
    // a at rate 2: 0 10 21 -> 0 5 10 (trunc(21/2) = 10), delay 9 -> 4.
    let a = "{\"timestamp\": 0, \"tag\": \"a1\"}\n{\"timestamp\": 10, \"tag\": \"a2\"}\n{\"timestamp\": 21, \"tag\": \"a3\", \"delay\": 9}\n";
    // b as is: 3 8.
    let b = "{\"timestamp\": 3, \"tag\": \"b1\"}\n{\"timestamp\": 8, \"tag\": \"b2\"}\n";
    let (_d, p) = files(&[("a", a), ("b", b)]);
    let out = merge_ok(&["interleave", "--scale-rate", "2,1"], &p, "");
    assert_eq!(tags(&out), ["a1", "b1", "a2", "b2", "a3"]);
    assert_eq!(
        out.lines().last().unwrap(),
        "{\"timestamp\": 10, \"tag\": \"a3\", \"delay\": 4}"
    );
    // concat: b at rate 0.5 becomes 6 16; a ends at 21; offset = 21 + 5 -
    // 6 = 20 -> 26 36.
    let out = merge_ok(
        &["concat", "--gap-ms", "5", "--scale-rate", "1,0.5"],
        &p,
        "",
    );
    assert_eq!(
        timestamps(&out),
        [0, 10, 21, 26, 36].map(serde_json::Value::from)
    );
}

#[test]
fn stdin_is_a_file_named_dash() {
    let (_d, p) = files(&[("a", UNSORTED_A), ("b", UNSORTED_B)]);
    let want = merge_ok(&["concat", "--gap-ms", "1"], &p, "");
    // stdin first (streamed) and second (held in memory for its earliest arrival).
    let dash = PathBuf::from("-");
    assert_eq!(
        merge_ok(
            &["concat", "--gap-ms", "1"],
            &[dash.clone(), p[1].clone()],
            UNSORTED_A
        ),
        want
    );
    let want = merge_ok(
        &["concat", "--gap-ms", "1"],
        &[p[1].clone(), p[0].clone()],
        "",
    );
    assert_eq!(
        merge_ok(
            &["concat", "--gap-ms", "1"],
            &[p[1].clone(), dash.clone()],
            UNSORTED_A
        ),
        want
    );
    let want = merge_ok(&["interleave", "--sort"], &p, "");
    assert_eq!(
        merge_ok(
            &["interleave", "--sort"],
            &[dash.clone(), p[1].clone()],
            UNSORTED_A
        ),
        want
    );
    // Errors name stdin.
    let out = tool("mc-merge")
        .args(["interleave", "-"])
        .arg(&p[1])
        .write_stdin("{\"timestamp\": 1}\n{\"timestamp\": 0}\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("stdin: line 2: timestamp 0 is earlier than 1 on line 1"));
}

#[test]
fn bad_lines_name_the_file_and_follow_on_error() {
    let bad = "{\"timestamp\": 1, \"tag\": \"c1\"}\n{\"timestamp\": 2,\n{\"timestamp\": 3, \"tag\": \"c3\"}\n";
    let (_d, p) = files(&[("a", "{\"timestamp\": 0, \"tag\": \"a1\"}\n"), ("c", bad)]);
    let out = tool("mc-merge")
        .args(args(&["concat"], &p))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with(&format!(
            "mc-merge: {}: line 2: invalid JSON",
            p[1].display()
        )),
        "{err}"
    );
    // The good rows before the bad one were written.
    assert_eq!(tags(&String::from_utf8(out.stdout).unwrap()), ["a1", "c1"]);
    let out = tool("mc-merge")
        .args(args(&["concat", "--on-error", "skip"], &p))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        tags(&String::from_utf8(out.stdout).unwrap()),
        ["a1", "c1", "c3"]
    );
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&format!("{}: skipped 1 bad line (line 2)", p[1].display())),
        "{err}"
    );
}

#[test]
fn usage_errors() {
    let (_d, p) = files(&[("a", "{}\n"), ("b", "{}\n")]);
    let code = |a: &[&std::ffi::OsStr]| tool("mc-merge").args(a).output().unwrap().status.code();
    assert_eq!(code(&[]), Some(2));
    assert_eq!(code(&args(&["concat", "--weights", "1"], &p)), Some(2));
    assert_eq!(code(&args(&["concat", "--scale-rate", "0,1"], &p)), Some(2));
    assert_eq!(code(&args(&["concat", "--weights", "0,0"], &p)), Some(2));
    assert_eq!(code(&args(&["interleave", "-", "-"], &[])), Some(2));
    let missing = [Path::new("/nonexistent/x.jsonl").to_path_buf()];
    assert_eq!(code(&args(&["concat"], &missing)), Some(66));
}

#[test]
fn sort_spills_runs_and_merges_them_into_the_stable_in_memory_order() {
    // Two unsorted files with many equal timestamps and rows without one
    // (they keep the key of the row before them); each row names its place.
    let make = |name: &str, n: u64, m: u64| -> String {
        (0..n)
            .map(|i| {
                if i % 9 == 4 {
                    format!("{{\"tag\": \"{name}{i}\", \"delay\": 5}}\n")
                } else {
                    format!(
                        "{{\"timestamp\": {}, \"tag\": \"{name}{i}\"}}\n",
                        (i * m) % 23
                    )
                }
            })
            .collect()
    };
    let (a, b) = (make("a", 300, 7), make("b", 200, 11));
    let (_d, p) = files(&[("a.jsonl", &a), ("b.jsonl", &b)]);
    // The default run (64 MiB) holds each file: the in-memory sort.
    let in_memory = merge_ok(&["interleave", "--sort"], &p, "");
    assert_eq!(in_memory.lines().count(), 500);
    // The expected order, by hand: each file's rows stably sorted by key
    // (a row without a timestamp takes its predecessor's), then the k-way
    // merge with ties to the lower file index.
    let keyed = |text: &str| -> Vec<(u64, String)> {
        let mut key = 0;
        let mut rows: Vec<(u64, String)> = text
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                if let Some(t) = v["timestamp"].as_u64() {
                    key = t;
                }
                (key, v["tag"].as_str().unwrap().to_string())
            })
            .collect();
        rows.sort_by_key(|r| r.0);
        rows
    };
    let (ka, kb) = (keyed(&a), keyed(&b));
    let mut want = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < ka.len() || j < kb.len() {
        if j == kb.len() || (i < ka.len() && ka[i].0 <= kb[j].0) {
            want.push(ka[i].1.clone());
            i += 1;
        } else {
            want.push(kb[j].1.clone());
            j += 1;
        }
    }
    assert_eq!(tags(&in_memory), want);
    // Runs of about 1 KB (dozens of runs per file) and of one row: the
    // same bytes.
    for run in ["1000", "1"] {
        let out = merge_ok(&["interleave", "--sort", "--sort-run-bytes", run], &p, "");
        assert_eq!(out, in_memory, "--sort-run-bytes {run}");
    }
    // Spilled runs go to $TMPDIR: one that cannot be written is named.
    let out = tool("mc-merge")
        .args(["interleave", "--sort", "--sort-run-bytes", "1000"])
        .args(&p)
        .env("TMPDIR", "/nonexistent/runs")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(73));
    assert!(String::from_utf8_lossy(&out.stderr).contains(
        "cannot create a temporary file in /nonexistent/runs (TMPDIR=/nonexistent/runs)"
    ));
}

/// File `f`'s rows at `times`, row i tagged `f.i` (what [`tags`] reads).
fn tagged_rows(f: usize, times: &[u64]) -> String {
    times
        .iter()
        .enumerate()
        .map(|(i, t)| format!("{{\"timestamp\": {t}, \"tag\": \"{f}.{i}\"}}\n"))
        .collect()
}

/// `texts` as files `0.jsonl`, `1.jsonl`, … in a temporary folder.
fn numbered_files(texts: &[&String]) -> (tempfile::TempDir, Vec<PathBuf>) {
    let names: Vec<String> = (0..texts.len()).map(|f| format!("{f}.jsonl")).collect();
    let named: Vec<(&str, &str)> = names
        .iter()
        .zip(texts)
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    files(&named)
}

/// Runs of one file's rows (which leave without a trip through the heap)
/// between other files' rows, with ties: the output is the stable sort by
/// (timestamp, file index), worked out here by sorting.
#[test]
fn interleave_of_runs_is_the_stable_sort_by_time_then_file() {
    // Three files of runs: gaps, equal times within and across files.
    let times: [&[u64]; 3] = [
        &[0, 1, 2, 2, 9, 10, 11, 30, 30, 31],
        &[2, 3, 4, 5, 6, 10, 30, 40],
        &[1, 2, 10, 10, 10, 12, 13, 14, 15, 16, 17, 40],
    ];
    let texts: Vec<String> = times
        .iter()
        .enumerate()
        .map(|(f, ts)| tagged_rows(f, ts))
        .collect();
    let (_d, p) = numbered_files(&texts.iter().collect::<Vec<_>>());
    let mut want: Vec<(u64, usize, usize)> = times
        .iter()
        .enumerate()
        .flat_map(|(f, ts)| ts.iter().enumerate().map(move |(i, &t)| (t, f, i)))
        .collect();
    want.sort();
    let want: Vec<String> = want.iter().map(|(_, f, i)| format!("{f}.{i}")).collect();
    for extra in [&[][..], &["--line-buffered"]] {
        let mut head = vec!["interleave", "--shared-ids"];
        head.extend_from_slice(extra);
        assert_eq!(tags(&merge_ok(&head, &p, "")), want, "{extra:?}");
    }
}

/// The read-ahead's runs (a file's rows that go out in one write while
/// they stay ahead of every other file's head) in the order the row-by-row
/// merge gives, worked out by hand: a run that ends exactly at a tie with
/// a lower file's head, a run that goes on through a tie with a higher
/// file's head, and a run bounded by the smaller of two other heads; at
/// batch sizes that put batch edges inside the runs.
#[test]
fn interleave_runs_end_at_ties_with_a_lower_file_and_go_on_past_a_higher_one() {
    let (a, b, c) = (
        tagged_rows(0, &[5, 5, 7, 9, 9]),
        tagged_rows(1, &[1, 2, 3, 5, 5, 9, 10]),
        tagged_rows(2, &[2, 9]),
    );
    // Two files: 1's run 1,2,3 stops before its 5 (0's 5 ties and file 0
    // is lower); 0's run 5,5 goes past 1's 5 and stops at 7; 1's 5,5 stop
    // at 9 > 7; 0's 7,9,9 go past 1's 9 (tie, 0 lower); 1's 9,10.
    let two = "1.0 1.1 1.2 0.0 0.1 1.3 1.4 0.2 0.3 0.4 1.5 1.6";
    // Three files: 1's run 1,2 goes past 2's 2 (tie, 1 lower) and stops
    // at 3 > 2, the smaller of the other heads (0 at 5, 2 at 2); then 2's
    // 2, 1's 3; the rest as above, 2's 9 after 1's 9 and before 1's 10.
    let three = "1.0 1.1 2.0 1.2 0.0 0.1 1.3 1.4 0.2 0.3 0.4 1.5 2.1 1.6";
    for (inputs, want) in [(vec![&a, &b], two), (vec![&a, &b, &c], three)] {
        let (_d, p) = numbered_files(&inputs);
        // None: each file one batch (the read-ahead's chunks are 1 MB).
        for chunk in [None, Some(1), Some(60), Some(130)] {
            for extra in [&[][..], &["--line-buffered"]] {
                let mut head = vec!["interleave"];
                head.extend_from_slice(extra);
                let mut cmd = tool("mc-merge");
                cmd.args(args(&head, &p));
                match chunk {
                    Some(n) => cmd.env("MCTRACE_CHUNK_BYTES", n.to_string()),
                    None => cmd.env_remove("MCTRACE_CHUNK_BYTES"),
                };
                let out = cmd.output().unwrap();
                assert!(out.status.success(), "{out:?}");
                let got = tags(&String::from_utf8(out.stdout).unwrap()).join(" ");
                assert_eq!(got, want, "chunk {chunk:?} {extra:?}");
            }
        }
    }
}

#[test]
fn two_and_five_files_renumber_ids_at_every_digit_edge() {
    // Ids where a digit of 2h or 5h starts to take a carry, or the id
    // grows a digit (first digit 5 for two files, 2 for five), up to 18
    // digits; spaced `, ` and `,` (the spacing kept), and ` , ` (written
    // back as `, `). Every new id is worked out here as h*k + t.
    let ids: [u64; 20] = [
        0,
        1,
        4,
        5,
        9,
        19,
        20,
        49,
        50,
        99,
        1_999,
        2_000,
        4_999_999,
        5_000_000,
        99_999_999,
        100_000_000,
        199_999_999_999_999_999,
        200_000_000_000_000_000,
        499_999_999_999_999_999,
        999_999_999_999_999_999,
    ];
    let list = |sep: &str| ids.iter().map(u64::to_string).collect::<Vec<_>>().join(sep);
    let rows = [
        format!("{{\"timestamp\": 1, \"hash_ids\": [{}]}}", list(", ")),
        format!("{{\"timestamp\": 2, \"hash_ids\": [{}]}}", list(",")),
        format!("{{\"timestamp\": 3, \"hash_ids\": [{}]}}", list(" , ")),
    ];
    let file = rows.join("\n") + "\n";
    for k in [2usize, 5] {
        let named: Vec<(String, &str)> = (0..k).map(|t| (format!("f{t}"), file.as_str())).collect();
        let named: Vec<(&str, &str)> = named.iter().map(|(n, f)| (n.as_str(), *f)).collect();
        let (_d, p) = files(&named);
        let out = merge_ok(&["interleave"], &p, "");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3 * k);
        // Times 1, 2, 3 in every file: row r of file t is line r*k + t.
        for (r, line) in lines.chunks(k).enumerate() {
            for (t, line) in line.iter().enumerate() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                let got: Vec<u64> = v["hash_ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|h| h.as_u64().unwrap())
                    .collect();
                let want: Vec<u64> = ids.iter().map(|h| h * k as u64 + t as u64).collect();
                assert_eq!(got, want, "k {k}, file {t}, row {r}");
                // The array keeps its spacing: `,` in the second row only.
                let array = &line[line.find('[').unwrap()..];
                assert_eq!(array.contains(", "), r != 1, "{line}");
            }
        }
    }
    // 19 digits: 2 * (2^63 - 1) + 1 is u64::MAX; one more overflows.
    let (_d, p) = files(&[
        (
            "a",
            "{\"timestamp\": 1, \"hash_ids\": [1, 9223372036854775807]}\n",
        ),
        (
            "b",
            "{\"timestamp\": 1, \"hash_ids\": [1, 9223372036854775807]}\n",
        ),
    ]);
    let out = merge_ok(&["interleave"], &p, "");
    assert!(out.contains("[2, 18446744073709551614]"), "{out}");
    assert!(out.contains("[3, 18446744073709551615]"), "{out}");
    let (_d, p) = files(&[
        (
            "a",
            "{\"timestamp\": 1, \"hash_ids\": [1, 9223372036854775808]}\n",
        ),
        ("b", "{\"timestamp\": 1, \"hash_ids\": [1]}\n"),
    ]);
    let err = crate::util::run_code("mc-merge", &args(&["interleave"], &p), "", 65);
    assert!(err.contains("overflows 64 bits"), "{err}");
}
