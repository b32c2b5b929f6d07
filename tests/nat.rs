//! nat2mc on NAT-shaped files made here, with a word-level tokenizer made
//! here (one token per whitespace-separated word), so every token count and
//! hash id below is worked out by hand.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::util::{self, assert_success, data_dir, run_ok_both, tool};

/// A WordLevel tokenizer: one token per word, unknown words -> [UNK].
fn word_tokenizer(dir: &Path) -> PathBuf {
    util::word_tokenizer(
        dir,
        &["s1", "s2", "s3", "s4", "s5", "q1", "q2", "a1", "a2", "o1"],
    )
}

fn start(uuid: &str, t: f64, messages: Value) -> Value {
    json!({"parent_id": "root", "function_ancestry": {}, "payload": {
        "event_type": "LLM_START", "event_timestamp": t, "name": "meta/llama-3.3-70b-instruct",
        "UUID": uuid, "metadata": {"chat_inputs": messages, "chat_responses": null}, "usage_info": null}})
}

fn end(uuid: &str, t: f64, prompt: u64, completion: u64) -> Value {
    json!({"parent_id": "root", "function_ancestry": {}, "payload": {
        "event_type": "LLM_END", "event_timestamp": t, "name": "meta/llama-3.3-70b-instruct", "UUID": uuid,
        "usage_info": {"token_usage": {"prompt_tokens": prompt, "completion_tokens": completion}}}})
}

fn token_event(uuid: &str, t: f64) -> Value {
    json!({"payload": {"event_type": "LLM_NEW_TOKEN", "event_timestamp": t, "UUID": uuid, "data": {"chunk": "word "}}})
}

fn lc(kind: &str, content: &str) -> Value {
    json!({"type": kind, "content": content, "additional_kwargs": {}, "id": null})
}

/// Four requests. Block size 4 throughout.
/// - Request 0 (LangChain `type` messages): call A = "s1 s2 s3 s4 s5\nq1 q2"
///   (7 tokens: blocks [s1..s4] [s5 q1 q2] -> ids 0, 1); call B adds an ai
///   and a tool message (10 tokens: [s1..s4] [s5 q1 q2 a1] [a2 o1]: the grown
///   tail is a new prefix -> 0, 2, 3); call C goes back to A's prompt -> 0, 1.
///   C's END comes before B's in the file but later in time: rows follow END time.
/// - Request 1 (OpenAI `role`, list content): call D has A's text -> 0, 1 (shared
///   across sessions); one START without END and one END without START.
/// - Request 2: metadata null, usage_info null, and empty text: three skipped calls.
/// - Request 3: "x x x x x x x x x" (9 unknown words -> [UNK] x 9): blocks of
///   4, 4, 1 -> new ids 4, 5, 6.
fn nat_file() -> String {
    let a = json!([lc("system", "s1 s2 s3 s4 s5"), lc("human", "q1 q2")]);
    let b = json!([
        lc("system", "s1 s2 s3 s4 s5"),
        lc("human", "q1 q2"),
        lc("ai", "a1 a2"),
        lc("tool", "o1")
    ]);
    let r0 = json!({"request_number": 0, "intermediate_steps": [
        start("A", 100.0, a.clone()), token_event("A", 100.1), end("A", 100.5, 11, 2),
        start("B", 100.7, b), start("C", 101.5, a),
        end("C", 102.0, 11, 3), end("B", 101.0, 15, 4),
    ]});
    let d = json!([{"role": "system", "content": "s1 s2 s3 s4 s5"}, {"role": "user", "content": [{"type": "text", "text": "q1 q2"}]}]);
    let r1 = json!({"request_number": 1, "intermediate_steps": [
        start("D", 100.2, d), end("D", 100.4, 9, 5), start("E", 100.5, json!([lc("human", "q1")])), end("F", 100.6, 1, 1),
    ]});
    let mut no_meta = start("G", 103.0, json!([]));
    no_meta["payload"]["metadata"] = Value::Null;
    let mut no_usage = end("H", 103.5, 1, 1);
    no_usage["payload"]["usage_info"] = Value::Null;
    let r2 = json!({"request_number": 2, "intermediate_steps": [
        no_meta, end("G", 103.2, 1, 1), start("H", 103.3, json!([lc("human", "q1")])), no_usage,
        start("I", 103.6, json!([lc("human", "")])), end("I", 103.7, 1, 1),
    ]});
    let r3 = json!({"request_number": 3, "intermediate_steps": [
        start("J", 104.0, json!([lc("human", "x x x x x x x x x")])), end("J", 104.25, 9, 7),
    ]});
    // NAT writes json.dump(indent=2).
    serde_json::to_string_pretty(&json!([r0, r1, r2, r3])).unwrap()
}

fn rows(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn convert(args: &[&str], input: &str) -> (Vec<Value>, String) {
    let dir = tempfile::tempdir().unwrap();
    let tok = word_tokenizer(dir.path());
    let mut all: Vec<std::ffi::OsString> = vec!["--tokenizer".into(), tok.into()];
    all.extend(["--block-size", "4"].iter().chain(args).map(Into::into));
    let (out, err) = run_ok_both("nat2mc", &all, input);
    (rows(out.as_bytes()), err)
}

#[test]
fn rows_ids_lengths_and_timing() {
    let (rows, stderr) = convert(&[], &nat_file());
    // Earliest LLM_START: A at 100.0. B starts 0.2 s after A ends, C 0.5 s
    // after B ends; D (request 1) starts at 100.2 -> timestamp 200 ms;
    // J at 104.0 -> 4000 ms.
    let want = vec![
        json!({"session_id": "conv_0", "timestamp": 0, "input_length": 7, "output_length": 2, "hash_ids": [0, 1], "request_id": "conv_0:0"}),
        json!({"session_id": "conv_0", "delay": 200, "input_length": 10, "output_length": 4, "hash_ids": [0, 2, 3], "request_id": "conv_0:1", "wait_for": ["conv_0:0"]}),
        json!({"session_id": "conv_0", "delay": 500, "input_length": 7, "output_length": 3, "hash_ids": [0, 1], "request_id": "conv_0:2", "wait_for": ["conv_0:1"]}),
        json!({"session_id": "conv_1", "timestamp": 200, "input_length": 7, "output_length": 5, "hash_ids": [0, 1], "request_id": "conv_1:0"}),
        json!({"session_id": "conv_3", "timestamp": 4000, "input_length": 9, "output_length": 7, "hash_ids": [4, 5, 6], "request_id": "conv_3:0"}),
    ];
    assert_eq!(rows, want);
    // --linear: today's chain, the same rows without the graph fields.
    let (linear, _) = convert(&["--linear"], &nat_file());
    let chain: Vec<Value> = want
        .iter()
        .map(|r| {
            let mut r = r.clone();
            let o = r.as_object_mut().unwrap();
            o.remove("request_id");
            o.remove("wait_for");
            r
        })
        .collect();
    assert_eq!(linear, chain);
    // Key order as in Mooncake rows.
    assert!(stderr.contains("4 requests, 10 calls, 5 rows, 5 skipped (unmatched 2, empty text 1, no metadata 1, no usage 1), 3 sessions"), "{stderr}");
    assert!(
        stderr.contains("warning: request 2, call G: LLM_START has no metadata; call skipped"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "warning: request 2, call H: LLM_END has no usage_info.token_usage; call skipped"
        ),
        "{stderr}"
    );
}

#[test]
fn key_order_is_mooncake_like() {
    let dir = tempfile::tempdir().unwrap();
    let tok = word_tokenizer(dir.path());
    let out = tool("nat2mc")
        .arg("--tokenizer")
        .arg(&tok)
        .args(["--block-size", "4", "--num-requests", "1"])
        .write_stdin(nat_file())
        .output()
        .unwrap();
    let first = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        first,
        r#"{"timestamp": 0, "session_id": "conv_0", "input_length": 7, "output_length": 2, "hash_ids": [0, 1], "request_id": "conv_0:0"}"#
    );
}

#[test]
fn timing_options_and_usage_lengths() {
    let (rows, _) = convert(&["--timing", "none"], &nat_file());
    assert!(rows
        .iter()
        .all(|r| r.get("timestamp").is_none() && r.get("delay").is_none()));
    let (rows, _) = convert(&["--delay", "500"], &nat_file());
    assert_eq!(rows[1]["delay"], 500);
    assert_eq!(rows[2]["delay"], 500);
    assert_eq!(rows[0]["timestamp"], 0);
    // prompt_tokens: A 11 (2 ids: 4 < 11 <= 8? no), B 15 (3 ids: 8 < 15 <= 12? no),
    // C 11 (no), D 9 (no), J 9 (3 ids: 8 < 9 <= 12: yes) -> 4 inconsistent rows.
    let (rows, stderr) = convert(&["--input-length", "usage"], &nat_file());
    let lengths: Vec<u64> = rows
        .iter()
        .map(|r| r["input_length"].as_u64().unwrap())
        .collect();
    assert_eq!(lengths, vec![11, 15, 11, 9, 9]);
    assert!(
        stderr.contains("warning: 4 rows inconsistent for block size 4"),
        "{stderr}"
    );
}

#[test]
fn selecting_requests_and_messages() {
    // Request 1 alone: its ids are numbered from 0 in this run.
    let (rows, _) = convert(
        &["--skip-requests", "1", "--num-requests", "1", "--messages"],
        &nat_file(),
    );
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["session_id"], "conv_1");
    assert_eq!(rows[0]["hash_ids"], json!([0, 1]));
    assert_eq!(
        rows[0]["messages"],
        json!([{"role": "system", "content": "s1 s2 s3 s4 s5"}, {"role": "user", "content": "q1 q2"}])
    );
    let (rows, _) = convert(&["--num-requests", "1", "--messages"], &nat_file());
    assert_eq!(
        rows[1]["messages"],
        json!([{"role": "system", "content": "s1 s2 s3 s4 s5"}, {"role": "user", "content": "q1 q2"}, {"role": "assistant", "content": "a1 a2"}, {"role": "tool", "content": "o1"}])
    );
}

#[test]
fn truncated_file_keeps_every_complete_request() {
    let text = nat_file();
    // Cut inside request 3 (in its first event, call J).
    let cut = text.find("\"J\"").unwrap();
    let (rows, stderr) = convert(&[], &text[..cut]);
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[3]["session_id"], "conv_1");
    assert!(
        stderr.contains("warning: the file is truncated"),
        "{stderr}"
    );
}

#[test]
fn invalid_json_is_exit_65() {
    let dir = tempfile::tempdir().unwrap();
    let tok = word_tokenizer(dir.path());
    tool("nat2mc")
        .arg("--tokenizer")
        .arg(&tok)
        .write_stdin("[{\"request_number\": 0} x]")
        .assert()
        .code(65)
        .stderr(predicates::str::starts_with(
            "nat2mc: invalid profiler trace:",
        ));
}

#[test]
fn default_output_file_sits_beside_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let tok = word_tokenizer(dir.path());
    let input = dir.path().join("traces.json");
    std::fs::write(&input, nat_file()).unwrap();
    tool("nat2mc")
        .arg("--tokenizer")
        .arg(&tok)
        .arg("--input-file")
        .arg(&input)
        .assert()
        .code(0)
        .stdout("");
    let out_file = dir.path().join("traces_mooncake.jsonl");
    let written = std::fs::read_to_string(&out_file).unwrap();
    assert_eq!(written.lines().count(), 5);
}

#[test]
fn the_file_beside_the_input_is_named_and_never_overwritten_silently() {
    let dir = tempfile::tempdir().unwrap();
    let tok = word_tokenizer(dir.path());
    let input = dir.path().join("traces.json");
    std::fs::write(&input, nat_file()).unwrap();
    let out_file = dir.path().join("traces_mooncake.jsonl");
    let run = |extra: &[&str]| {
        tool("nat2mc")
            .arg("--tokenizer")
            .arg(&tok)
            .arg("--input") // the alias of --input-file
            .arg(&input)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.ends_with(&format!("; rows written to {}\n", out_file.display())),
        "{stderr}"
    );
    // A second run refuses to overwrite it (exit 73) and leaves it alone.
    std::fs::write(&out_file, "keep me\n").unwrap();
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(73));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!(
            "nat2mc: {} already exists; pass --force to overwrite it, or choose another path \
             with --output-file (`-` for stdout)\n",
            out_file.display()
        )
    );
    assert_eq!(std::fs::read_to_string(&out_file).unwrap(), "keep me\n");
    // --force overwrites; `-o -` writes to stdout instead.
    assert!(run(&["--force"]).status.success());
    assert_eq!(
        std::fs::read_to_string(&out_file).unwrap().lines().count(),
        5
    );
    let out = run(&["-o", "-"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 5);
}

#[test]
fn an_empty_input_is_an_error_not_a_cut_file() {
    for input in ["", "\n  \n"] {
        tool("nat2mc")
            .write_stdin(input)
            .assert()
            .code(65)
            .stdout("")
            .stderr(
                "nat2mc: the input is empty: expected the profiler's JSON array of requests \
                 (all_requests_profiler_traces.json)\n",
            );
    }
}

/// A fake HuggingFace cache: models--ORG--NAME/refs/main names the snapshot.
fn fake_cache(root: &Path, model: &str) -> PathBuf {
    let repo = root.join(format!("models--{}", model.replace('/', "--")));
    std::fs::create_dir_all(repo.join("snapshots/abc123")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "abc123\n").unwrap();
    word_tokenizer(&repo.join("snapshots/abc123"))
}

#[test]
fn model_ids_resolve_from_the_hf_cache_and_are_inferred_from_the_trace() {
    let cache = tempfile::tempdir().unwrap();
    fake_cache(cache.path(), "meta-llama/Llama-3.3-70B-Instruct");
    let run = |args: &[&str]| {
        tool("nat2mc")
            .env("HF_HUB_CACHE", cache.path())
            .env("HF_HUB_OFFLINE", "1")
            .args(["--block-size", "4", "--num-requests", "1"])
            .args(args)
            .write_stdin(nat_file())
            .output()
            .unwrap()
    };
    let out = run(&["--tokenizer", "meta-llama/Llama-3.3-70B-Instruct"]);
    assert_success(&out);
    assert_eq!(rows(&out.stdout)[0]["hash_ids"], json!([0, 1]));
    // No --tokenizer: the trace's model name picks it.
    let out = run(&[]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "model `meta/llama-3.3-70b-instruct` -> tokenizer meta-llama/Llama-3.3-70B-Instruct"
        ),
        "{stderr}"
    );
    // HF_HOME/hub is the fallback when HF_HUB_CACHE is unset.
    let home = tempfile::tempdir().unwrap();
    fake_cache(&home.path().join("hub"), "org/tiny");
    let out = tool("nat2mc")
        .env_remove("HF_HUB_CACHE")
        .env("HF_HOME", home.path())
        .env("HF_HUB_OFFLINE", "1")
        .args(["--tokenizer", "org/tiny", "--num-requests", "1"])
        .write_stdin(nat_file())
        .output()
        .unwrap();
    assert_success(&out);
}

#[test]
fn a_missing_tokenizer_names_every_place_searched() {
    let cache = tempfile::tempdir().unwrap();
    let out = tool("nat2mc")
        .env("HF_HUB_CACHE", cache.path())
        .env("HF_HUB_OFFLINE", "1")
        .args(["--tokenizer", "org/absent"])
        .write_stdin(nat_file())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no tokenizer for `org/absent`"), "{stderr}");
    assert!(stderr.contains("models--org--absent"), "{stderr}");
    assert!(stderr.contains("HF_HUB_OFFLINE=1"), "{stderr}");
    assert!(
        stderr.contains("Pass --tokenizer path/to/tokenizer.json"),
        "{stderr}"
    );
}

/// The tokenizer loads on its own thread while the input is read: a
/// tokenizer that cannot load is still the error reported (exit 1), ahead
/// of anything wrong in the input, as when it was loaded first.
#[test]
fn a_tokenizer_that_cannot_load_is_the_error_before_a_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("tokenizer.json");
    std::fs::write(&broken, "{ not a tokenizer").unwrap();
    for input in [
        "[{\"request_number\": 0, \"intermediate_steps\": 7}]",
        "",
        "[1, 2",
    ] {
        let out = tool("nat2mc")
            .args(["--tokenizer", broken.to_str().unwrap()])
            .write_stdin(input)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{input:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("tokenizer.json"), "{input:?}: {stderr}");
    }
}

#[test]
fn a_model_not_cached_is_downloaded_from_hf_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let body = std::fs::read(word_tokenizer(dir.path())).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut req = [0u8; 4096];
        let n = conn.read(&mut req).unwrap();
        let head = String::from_utf8_lossy(&req[..n]).to_string();
        write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .unwrap();
        conn.write_all(&body).unwrap();
        head
    });
    let cache = tempfile::tempdir().unwrap();
    let out = tool("nat2mc")
        .env("HF_HUB_CACHE", cache.path())
        .env_remove("HF_HUB_OFFLINE")
        .env("HF_ENDPOINT", format!("http://{addr}"))
        .args([
            "--tokenizer",
            "org/remote",
            "--block-size",
            "4",
            "--num-requests",
            "1",
        ])
        .write_stdin(nat_file())
        .output()
        .unwrap();
    assert_success(&out);
    let head = server.join().unwrap();
    assert!(
        head.starts_with("GET /org/remote/resolve/main/tokenizer.json "),
        "{head}"
    );
    assert_eq!(rows(&out.stdout)[0]["hash_ids"], json!([0, 1]));
    assert!(cache
        .path()
        .join("models--org--remote/snapshots/main/tokenizer.json")
        .is_file());
}

#[test]
fn the_real_nat_file_with_the_real_tokenizer() {
    let Some(data) = data_dir("the_real_nat_file_with_the_real_tokenizer") else {
        return;
    };
    let out = tool("nat2mc")
        .arg("--tokenizer")
        .arg(data.join("tokenizers/deepseek-v4/tokenizer.json"))
        .arg("--input")
        .arg(data.join("nat/react_mock_4req/all_requests_profiler_traces.json"))
        .arg("--output")
        .arg("-")
        .output()
        .unwrap();
    assert_success(&out);
    let rows = rows(&out.stdout);
    // SOURCE.md: 3, 1, 2 and 1 LLM calls in the 4 requests.
    assert_eq!(rows.len(), 7);
    let sessions: Vec<&str> = rows
        .iter()
        .map(|r| r["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        sessions,
        ["conv_0", "conv_0", "conv_0", "conv_1", "conv_2", "conv_2", "conv_3"]
    );
    // Each later call of a session extends the previous prompt, so it
    // repeats all of the previous call's full blocks.
    for w in rows
        .windows(2)
        .filter(|w| w[0]["session_id"] == w[1]["session_id"])
    {
        let (a, b) = (
            w[0]["hash_ids"].as_array().unwrap(),
            w[1]["hash_ids"].as_array().unwrap(),
        );
        let full = (w[0]["input_length"].as_u64().unwrap() / 128) as usize;
        assert_eq!(a[..full], b[..full], "{} then {}", w[0], w[1]);
    }
    // mc-analyze finds every row consistent at the block size used.
    let text = String::from_utf8(out.stdout).unwrap();
    let report = tool("mc-analyze")
        .args(["--json", "--block-size", "128"])
        .write_stdin(text)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(v["blocks"]["inconsistent_rows"]["count"], 0);
    assert_eq!(v["blocks"]["conflicting_ids"]["count"], 0);
    assert_eq!(v["sessions"]["sessions"], 4);
}

#[test]
fn a_delay_that_is_not_a_finite_number_of_ms_is_refused() {
    use predicates::prelude::PredicateBooleanExt;
    for bad in ["inf", "nan", "-1", "1e300"] {
        tool("nat2mc")
            .arg(format!("--delay={bad}"))
            .write_stdin(nat_file())
            .assert()
            .code(2)
            .stderr(
                predicates::str::contains("is not a non-negative number")
                    .or(predicates::str::contains("ms is more than the limit")),
            );
    }
}

/// nat2mc writes blocks of its own size (128 by default, not 512): the
/// tools downstream detect it, and refuse a wrong explicit one.
#[test]
fn block_size_is_detected_downstream_and_a_wrong_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tok = word_tokenizer(dir.path());
    // Two calls of 300 and 350 unknown words (one token each): at B = 128
    // the first has 3 ids and allows 100..=149 (only 128); at B = 64 it has
    // 5 ids and allows 60..=74 (only 64).
    let long = |n: usize| json!([lc("human", &"x ".repeat(n))]);
    let file = serde_json::to_string(&json!([{"request_number": 0, "intermediate_steps": [
        start("A", 100.0, long(300)), end("A", 100.5, 300, 2),
        start("B", 101.0, long(350)), end("B", 101.5, 350, 2),
    ]}]))
    .unwrap();
    for b in [64u64, 128] {
        let rows = tool("nat2mc")
            .arg("--tokenizer")
            .arg(&tok)
            .args(["--block-size", &b.to_string()])
            .write_stdin(file.clone())
            .output()
            .unwrap();
        assert!(rows.status.success());
        let rows = String::from_utf8(rows.stdout).unwrap();
        // Auto-detection names the size on stderr; the cut keeps rows consistent.
        let out = tool("mc-cap")
            .args(["--max-isl", "200"])
            .write_stdin(rows.clone())
            .output()
            .unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.starts_with(&format!("mc-cap: block size {b} (detected from the first ")),
            "{stderr}"
        );
        let analyzed = tool("mc-analyze")
            .arg("--json")
            .write_stdin(rows.clone())
            .output()
            .unwrap();
        let report: serde_json::Value = serde_json::from_slice(&analyzed.stdout).unwrap();
        assert_eq!(report["blocks"]["block_size"], b);
        assert_eq!(report["blocks"]["inconsistent_rows"]["count"], 0);
        // The old default, given explicitly, is refused, naming the rows' size.
        tool("mc-cap")
            .args(["--max-isl", "200", "--block-size", "512"])
            .write_stdin(rows)
            .assert()
            .code(65)
            .stderr(predicates::str::contains(format!(
                "the rows say {b}: pass --block-size {b}"
            )));
    }
}

/// Structural errors name the request and the place in the file (line and
/// column from the file's start, not the request's). Places checked by hand.
#[test]
fn structural_errors_name_the_request_and_the_place_in_the_file() {
    let cases = [
        // Line 4 is `   "x": tru}`: the `}` after `tru` is column 12.
        (
            "[\n  {\"request_number\": 0},\n  {\"request_number\": 1,\n   \"x\": tru}\n]\n",
            "nat2mc: invalid profiler trace: request 2 of the file: expected ident (line 4, column 12)\n",
        ),
        // `[\n` is 2 bytes and line 2 is 24 with its newline: the second `{`
        // is byte 28, line 3, column 3.
        (
            "[\n  {\"request_number\": 0}\n  {\"request_number\": 1}\n]\n",
            "nat2mc: invalid profiler trace: expected `,` or `]` after request 1, at byte 28 (line 3, column 3)\n",
        ),
        // `[\n` (2) + `  {"a": 1},\n` (12): the `7` is byte 16, line 3, column 3.
        (
            "[\n  {\"a\": 1},\n  7\n]",
            "nat2mc: invalid profiler trace: expected request 2 to be an object ({...}), at byte 16 (line 3, column 3)\n",
        ),
    ];
    for (input, want) in cases {
        tool("nat2mc")
            .write_stdin(input)
            .assert()
            .code(65)
            .stderr(want);
    }
}

fn tool_start(uuid: &str, t: f64) -> Value {
    json!({"payload": {"event_type": "TOOL_START", "event_timestamp": t, "UUID": uuid, "name": "search"}})
}

fn tool_end(uuid: &str, t: f64) -> Value {
    json!({"payload": {"event_type": "TOOL_END", "event_timestamp": t, "UUID": uuid, "name": "search"}})
}

fn function_event(kind: &str, t: f64) -> Value {
    json!({"payload": {"event_type": kind, "event_timestamp": t, "UUID": "sub", "name": "sub_agent"}})
}

/// The rows' graph fields and timing, as (request_id, wait_for, branches,
/// timestamp, delay, tool_wait_ms) with absent ones as null.
fn graph_of(rows: &[Value]) -> Vec<Value> {
    rows.iter()
        .map(|r| {
            json!([
                r["request_id"],
                r["wait_for"],
                r["branches"],
                r["timestamp"],
                r["delay"],
                r["tool_wait_ms"]
            ])
        })
        .collect()
}

/// Calls that overlap become branches of the call they wait for; a join
/// waits for the latest calls that ended before it; tool spans between a
/// call and its dependency are its tool_wait_ms. Every edge and time below
/// worked out by hand from the event times.
#[test]
fn overlapping_calls_and_a_sub_agent_make_a_graph() {
    let q = || json!([lc("human", "q1 q2")]);
    // Request 0, two overlapping calls: P 0–1 plans; tool 1.0–1.3; X
    // 1.5–3 and Y 1.6–2.5 run together (branches of P: X 500 ms after P,
    // of which 300 in the tool; Y 600, 300 of it tool); J 4–5 joins them,
    // 1 s after X (the later end, 3.0).
    let r0 = json!({"request_number": 0, "intermediate_steps": [
        start("P", 100.0, q()), end("P", 101.0, 2, 1),
        tool_start("t1", 101.0), tool_end("t1", 101.3),
        start("X", 101.5, q()), start("Y", 101.6, q()),
        end("Y", 102.5, 2, 1), end("X", 103.0, 2, 1),
        start("J", 104.0, q()), end("J", 105.0, 2, 1),
    ]});
    // Request 1, five overlapping calls after P2 (0–1), starting at 1.1,
    // 1.2, …, 1.5 and all ending at 2.0–2.4 (before any of them ends, all
    // have started): five branches of P2; no join.
    let mut steps = vec![start("P2", 200.0, q()), end("P2", 201.0, 2, 1)];
    for k in 0..5 {
        steps.push(start(&format!("B{k}"), 201.1 + 0.1 * k as f64, q()));
    }
    for k in 0..5 {
        steps.push(end(&format!("B{k}"), 202.0 + 0.1 * k as f64, 2, 1));
    }
    let r1 = json!({"request_number": 1, "intermediate_steps": steps});
    // Request 2, a sub-agent: M 0–1 decides to delegate; the function span
    // 1.2–4 holds the sub-agent's own calls S1 1.2–2 and S2 2.5–3.5 (a
    // chain), with a tool 2.1–2.3 between them; M2 4.5–5 reads the result
    // (waits for S2, 1 s after it ends).
    let r2 = json!({"request_number": 2, "intermediate_steps": [
        start("M", 300.0, q()), end("M", 301.0, 2, 1),
        function_event("FUNCTION_START", 301.2),
        start("S1", 301.2, q()), end("S1", 302.0, 2, 1),
        tool_start("t2", 302.1), tool_end("t2", 302.3),
        start("S2", 302.5, q()), end("S2", 303.5, 2, 1),
        function_event("FUNCTION_END", 304.0),
        start("M2", 304.5, q()), end("M2", 305.0, 2, 1),
    ]});
    let file = serde_json::to_string_pretty(&json!([r0, r1, r2])).unwrap();
    let (rows, _) = convert(&[], &file);
    let n = Value::Null;
    let ids = |v: &[&str]| json!(v);
    // Rows come in END order: P, Y, X, J; P2, B0..B4; M, S1, S2, M2.
    let want = vec![
        json!(["conv_0:0", n, ids(&["conv_0:1", "conv_0:2"]), 0, n, n]),
        // Y (ends first): 101.6 − 101.0 = 600 ms, the tool 300 of it.
        json!(["conv_0:1", n, n, n, 300, 300]),
        // X: 500 ms, 300 of it the tool.
        json!(["conv_0:2", n, n, n, 200, 300]),
        // J: waits for both; 104.0 − 103.0 (X's end, the later) = 1000.
        json!(["conv_0:3", ids(&["conv_0:1", "conv_0:2"]), n, n, 1000, n]),
        json!([
            "conv_1:0",
            n,
            ids(&["conv_1:1", "conv_1:2", "conv_1:3", "conv_1:4", "conv_1:5"]),
            100000,
            n,
            n
        ]),
        json!(["conv_1:1", n, n, n, 100, n]),
        json!(["conv_1:2", n, n, n, 200, n]),
        json!(["conv_1:3", n, n, n, 300, n]),
        json!(["conv_1:4", n, n, n, 400, n]),
        json!(["conv_1:5", n, n, n, 500, n]),
        json!(["conv_2:0", n, n, 200000, n, n]),
        // S1: 200 ms after M.
        json!(["conv_2:1", ids(&["conv_2:0"]), n, n, 200, n]),
        // S2: 500 ms after S1, 200 of it the tool.
        json!(["conv_2:2", ids(&["conv_2:1"]), n, n, 300, 200]),
        // M2: 1000 ms after S2.
        json!(["conv_2:3", ids(&["conv_2:2"]), n, n, 1000, n]),
    ];
    assert_eq!(graph_of(&rows), want);
    // The graph is valid for every tool: mc-analyze finds no problem, one
    // task of 4 calls with fan-out 2, one of 6 with fan-out 5, one chain.
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    let report = tool("mc-analyze")
        .arg("--json")
        .write_stdin(text.clone())
        .output()
        .unwrap();
    assert_success(&report);
    let v: Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(v["graphs"]["tasks"], 3);
    assert_eq!(v["graphs"]["max_fan_out"], 5);
    assert_eq!(v["graphs"]["peak_parallelism"], 5);
    assert_eq!(v["graphs"]["first_problems"], json!([]));
    // --linear flattens it: the five branches become five turns, one
    // after the other (the gap to the previous END, 0 when negative).
    let (linear, _) = convert(&["--linear"], &file);
    assert_eq!(linear[6]["delay"], 0);
    assert!(linear.iter().all(|r| r.get("request_id").is_none()));
}

/// The shared sample has no overlapping calls: its graph times every call
/// as the chain did (delay + tool_wait_ms = the chain's delay, the same
/// timestamps), and --linear writes the chain byte for byte as before.
#[test]
fn the_real_nat_file_keeps_its_timing_as_a_graph() {
    let Some(data) = data_dir("the_real_nat_file_keeps_its_timing_as_a_graph") else {
        return;
    };
    let run = |extra: &[&str]| {
        let out = tool("nat2mc")
            .arg("--tokenizer")
            .arg(data.join("tokenizers/deepseek-v4/tokenizer.json"))
            .arg("--input")
            .arg(data.join("nat/react_mock_4req/all_requests_profiler_traces.json"))
            .args(["--output", "-"])
            .args(extra)
            .output()
            .unwrap();
        assert_success(&out);
        rows(&out.stdout)
    };
    let (graph, linear) = (run(&[]), run(&["--linear"]));
    assert_eq!(graph.len(), linear.len());
    let mut tool_ms = 0;
    for (g, l) in graph.iter().zip(&linear) {
        assert_eq!(g["timestamp"], l["timestamp"]);
        assert_eq!(g["hash_ids"], l["hash_ids"]);
        let gap = g["delay"]
            .as_u64()
            .map(|d| d + g["tool_wait_ms"].as_u64().unwrap_or(0));
        assert_eq!(gap, l["delay"].as_u64(), "{g} against {l}");
        tool_ms += g["tool_wait_ms"].as_u64().unwrap_or(0);
        // A chain: each later call waits for the one before it.
        assert_eq!(
            g["wait_for"].as_array().map(Vec::len),
            l["delay"].as_u64().map(|_| 1)
        );
    }
    // The sample's 3 TOOL spans fall between calls.
    assert!(tool_ms > 0);
}
