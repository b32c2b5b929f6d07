//! Agent graphs through the tools (docs/guide/agents.md): each filter keeps
//! the graph valid and its dependency structure; expected rows written by
//! hand.

use mctrace::graph::Graphs;

use crate::util::temp_files as files;
use crate::util::{run, run_ok};

/// root spawns a and b (branches); join waits for both; a leaf without id
/// waits for join. Block size 8: input_length 20 → 3 ids.
const AGENT: &str = r#"{"session_id": "s", "timestamp": 1000, "request_id": "root", "branches": ["b"], "input_length": 20, "output_length": 4, "hash_ids": [0, 1, 2]}
{"session_id": "s", "request_id": "a", "wait_for": ["root"], "delay": 10, "tool_wait_ms": 7, "input_length": 8, "output_length": 4, "hash_ids": [3]}
{"session_id": "s", "request_id": "b", "delay": 20.5, "tool_wait_ms": 301, "input_length": 8, "output_length": 4, "hash_ids": [4]}
{"session_id": "s", "request_id": "join", "wait_for": ["a", "b"], "delay": 1, "input_length": 40, "output_length": 4, "hash_ids": [0, 1, 2, 5, 6]}
{"session_id": "s", "wait_for": ["join"], "prefix_reset": true, "delay": 3, "input_length": 8, "output_length": 4, "hash_ids": [7]}
"#;

/// Each row's dependencies, named by request id (or `#row` without one).
fn structure(text: &str) -> Vec<Vec<String>> {
    let g = Graphs::from_lines(text).unwrap();
    let name = |r: usize| {
        g.request_id(r)
            .map_or_else(|| format!("#{r}"), |s| s.to_string())
    };
    (0..g.len())
        .map(|r| g.deps(r).iter().map(|&d| name(d as usize)).collect())
        .collect()
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

#[test]
fn the_example_graph_is_valid() {
    assert_eq!(
        structure(AGENT),
        vec![
            vec![],
            vec!["root".to_string()],
            vec!["root".to_string()],
            vec!["a".to_string(), "b".to_string()],
            vec!["join".to_string()],
        ]
    );
}

#[test]
fn scale_speedup_divides_tool_waits_like_delays() {
    let out = run_ok("mc-scale", &["--speedup", "2"], AGENT);
    let l = lines(&out);
    // Integers truncate (AIPerf's rule), fractions divide: 7/2 → 3,
    // 301/2 → 150, 20.5/2 → 10.25, 1000/2 → 500.
    assert_eq!(
        l[1],
        r#"{"session_id": "s", "request_id": "a", "wait_for": ["root"], "delay": 5, "tool_wait_ms": 3, "input_length": 8, "output_length": 4, "hash_ids": [3]}"#
    );
    assert_eq!(
        l[2],
        r#"{"session_id": "s", "request_id": "b", "delay": 10.25, "tool_wait_ms": 150, "input_length": 8, "output_length": 4, "hash_ids": [4]}"#
    );
    assert!(l[0].contains(r#""timestamp": 500,"#), "{}", l[0]);
    assert_eq!(structure(&out), structure(AGENT));
    // --keep-delays keeps the tool waits too.
    let kept = run_ok("mc-scale", &["--speedup", "2", "--keep-delays"], AGENT);
    assert!(lines(&kept)[1].contains(r#""tool_wait_ms": 7,"#));
}

#[test]
fn cap_truncates_graph_rows_and_keeps_their_edges() {
    let out = run_ok("mc-cap", &["--max-isl", "16", "--block-size", "8"], AGENT);
    assert_eq!(structure(&out), structure(AGENT));
    // Rows that need no change are the input's bytes.
    assert_eq!(lines(&out)[1], lines(AGENT)[1]);
}

#[test]
fn cap_drop_refuses_a_call_others_may_wait_for() {
    let r = run(
        "mc-cap",
        &["--max-isl", "16", "--drop", "--block-size", "8"],
        AGENT,
    );
    assert_eq!(r.code, Some(65), "{}", r.stderr);
    assert!(
        r.stderr.contains("line 1: field `request_id`: the row is longer than --max-isl 16 and a call of an agent graph (\"root\")"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("truncate instead"), "{}", r.stderr);
    // A leaf nobody can name is dropped: only the last row is long here.
    let leaf = AGENT.replace(
        r#""prefix_reset": true, "delay": 3, "input_length": 8, "output_length": 4, "hash_ids": [7]"#,
        r#""prefix_reset": true, "delay": 3, "input_length": 50, "output_length": 4, "hash_ids": [7, 8, 9, 10, 11, 12, 13]"#,
    );
    let out = run_ok("mc-cap", &["--max-isl", "45", "--drop"], &leaf);
    assert_eq!(lines(&out).len(), 4);
    assert_eq!(structure(&out), structure(AGENT)[..4].to_vec());
}

#[test]
fn roots_keep_graph_fields() {
    let out = run_ok("mc-roots", &["--roots", "3", "--seed", "5"], AGENT);
    assert_eq!(structure(&out), structure(AGENT));
}

#[test]
fn merge_puts_request_ids_in_each_files_namespace() {
    let (_dir, paths) = files(&[("a.jsonl", AGENT), ("b.jsonl", AGENT)]);
    let args: Vec<&std::ffi::OsStr> = ["concat", "--gap-ms", "0"]
        .iter()
        .map(std::ffi::OsStr::new)
        .chain(paths.iter().map(|p| p.as_os_str()))
        .collect();
    let out = run_ok("mc-merge", &args, "");
    let l = lines(&out);
    assert_eq!(l.len(), 10);
    assert_eq!(
        l[0],
        r#"{"session_id": "f0:s", "timestamp": 1000, "request_id": "f0:root", "branches": ["f0:b"], "input_length": 20, "output_length": 4, "hash_ids": [0, 2, 4]}"#
    );
    assert_eq!(
        l[8],
        r#"{"session_id": "f1:s", "request_id": "f1:join", "wait_for": ["f1:a", "f1:b"], "delay": 1, "input_length": 40, "output_length": 4, "hash_ids": [1, 3, 5, 11, 13]}"#
    );
    // Two copies of one graph, each with its own ids: valid, and each
    // file's part has the input's structure.
    let s = structure(&out);
    let strip = |v: &[Vec<String>], p: &str| -> Vec<Vec<String>> {
        v.iter()
            .map(|d| {
                d.iter()
                    .map(|x| x.strip_prefix(p).unwrap_or(x).to_string())
                    .collect()
            })
            .collect()
    };
    let want = structure(AGENT);
    assert_eq!(strip(&s[..5], "f0:"), want);
    // The leaf without id is named by its row.
    let mut second = strip(&s[5..], "f1:");
    second[4] = vec!["join".to_string()];
    assert_eq!(second, want);
    // --scale-rate divides tool waits: 7 / 2 → 3.
    let out = run_ok(
        "mc-merge",
        &[
            std::ffi::OsStr::new("concat"),
            std::ffi::OsStr::new("--scale-rate"),
            std::ffi::OsStr::new("2"),
            paths[0].as_os_str(),
        ],
        "",
    );
    assert!(lines(&out)[1].contains(r#""tool_wait_ms": 3,"#), "{out}");
}

#[test]
fn merge_with_shared_ids_makes_duplicates_the_checks_name() {
    let (_dir, paths) = files(&[("a.jsonl", AGENT), ("b.jsonl", AGENT)]);
    let out = run_ok(
        "mc-merge",
        &[
            std::ffi::OsStr::new("concat"),
            std::ffi::OsStr::new("--shared-ids"),
            paths[0].as_os_str(),
            paths[1].as_os_str(),
        ],
        "",
    );
    let e = Graphs::from_lines(&out).unwrap_err().to_string();
    assert_eq!(
        e,
        "line 6: field `request_id`: `root` is also the id of line 1: give each call its own id"
    );
}
