//! mc-fit recovers an engine whose coefficients it is not told: runs of
//! the engine model with a hidden profile stand in for a server (exact and
//! deterministic, so the test needs no wall clock), the fit is checked on
//! the run it saw and on a run it did not see.

use std::path::Path;

use crate::util::{assert_success, tool};

const HIDDEN: &str = r#"{"name": "hidden", "model": "roofline", "t_fix_ms": 0.5, "c_seq_ms": 0.02,
 "t_w_ms": 12.0, "c_lin_ms": 0.05, "k_ms": 2e-6, "c_kv_ms": 1e-4,
 "kv_tokens": 200000, "block_size": 16, "max_batched_tokens": 2048, "max_seqs": 64}"#;

/// A session workload (40 sessions of 3 turns) and two runs of the hidden
/// engine on it: at the trace's pace, and three times faster.
fn runs(dir: &Path) {
    let trace = tool("mc-gen")
        .args([
            "sessions",
            "--sessions",
            "40",
            "--session-rate",
            "4",
            "--turns",
            "3",
        ])
        .args(["--new-tokens", "300", "--osl", "64", "--block-size", "16"])
        .output()
        .unwrap();
    assert_success(&trace);
    std::fs::write(dir.join("t.jsonl"), &trace.stdout).unwrap();
    std::fs::write(dir.join("hidden.json"), HIDDEN).unwrap();
    for (name, speedup) in [("seen.jsonl", "1"), ("held-out.jsonl", "3")] {
        let out = tool("mc-replay")
            .current_dir(dir)
            .args([
                "--engine-profile",
                "hidden.json",
                "-i",
                "t.jsonl",
                "--speedup",
                speedup,
            ])
            .args(["-o", name])
            .output()
            .unwrap();
        assert_success(&out);
    }
}

/// The `--predict` table's errors by metric (percent, or pp for the hit rate).
fn errors(stderr: &str) -> Vec<(String, f64)> {
    stderr
        .lines()
        .filter(|l| l.contains(" (") && (l.ends_with('%') || l.ends_with(" pp")))
        .map(|l| {
            let metric = l[..l.find(" (").unwrap()].to_string();
            let last = l.split_whitespace().rev().find(|w| *w != "pp").unwrap();
            (metric, last.trim_end_matches('%').parse::<f64>().unwrap())
        })
        .collect()
}

fn predict(dir: &Path, profile: &str, run: &str) -> Vec<(String, f64)> {
    let out = tool("mc-fit")
        .current_dir(dir)
        .args(["--trace", "t.jsonl", "--predict", profile, run])
        .output()
        .unwrap();
    assert_success(&out);
    errors(&String::from_utf8_lossy(&out.stderr))
}

#[test]
fn the_true_profile_predicts_its_own_runs_exactly() {
    let dir = tempfile::tempdir().unwrap();
    runs(dir.path());
    let e = predict(dir.path(), "hidden.json", "held-out.jsonl");
    assert_eq!(e.len(), 12, "{e:?}");
    for (metric, err) in e {
        assert_eq!(
            err, 0.0,
            "{metric}: the simulation of actual sends is exact"
        );
    }
}

#[test]
fn a_fit_recovers_the_hidden_engine_and_predicts_a_run_it_did_not_see() {
    let dir = tempfile::tempdir().unwrap();
    runs(dir.path());
    let out = tool("mc-fit")
        .current_dir(dir.path())
        .args(["--trace", "t.jsonl", "seen.jsonl", "-o", "fitted.json"])
        .output()
        .unwrap();
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let fitted: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("fitted.json")).unwrap()).unwrap();
    // The weight-read floor and the per-token cost dominate these steps:
    // recovered within 2%.
    for (name, truth) in [("t_w_ms", 12.0), ("c_lin_ms", 0.05)] {
        let v = fitted[name].as_f64().unwrap();
        assert!(
            (v / truth - 1.0).abs() < 0.02,
            "{name} {v} vs {truth}\n{stderr}"
        );
    }
    // Every step holds about as many requests, and no prompt is long: the
    // fit says so instead of pretending.
    for name in ["t_fix_ms", "c_seq_ms", "k_ms"] {
        assert!(
            stderr.contains(&format!("cannot identify {name}")),
            "{stderr}"
        );
    }
    // The shape came from the runs' own engine.
    assert_eq!(fitted["max_seqs"], 64);
    assert_eq!(fitted["kv_tokens"], 200000);
    // Held out (three times the rate): means and medians within 5%, the
    // throughput within 1%, the hit rate exact.
    let e = predict(dir.path(), "fitted.json", "held-out.jsonl");
    for (metric, err) in &e {
        let bound = match metric.as_str() {
            "TTFT p90" | "TTFT p99" | "ITL p99" | "E2E p99" => 10.0,
            "output tok/s" => 1.0,
            "prefix-cache hit rate" => 0.0,
            _ => 5.0,
        };
        assert!(err.abs() <= bound, "{metric}: {err} (bound {bound})\n{e:?}");
    }
    // The profile loads where profiles are used.
    let replay = tool("mc-replay")
        .current_dir(dir.path())
        .args([
            "--engine-profile",
            "fitted.json",
            "-i",
            "t.jsonl",
            "--max-requests",
            "5",
        ])
        .output()
        .unwrap();
    assert_success(&replay);
}

#[test]
fn a_result_that_names_no_row_of_the_trace_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    runs(dir.path());
    std::fs::write(
        dir.path().join("short.jsonl"),
        "{\"timestamp\": 0, \"input_length\": 4}\n",
    )
    .unwrap();
    let out = tool("mc-fit")
        .current_dir(dir.path())
        .args(["--trace", "short.jsonl", "seen.jsonl"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--trace"), "{stderr}");
}

#[test]
fn the_profile_may_not_overwrite_an_input() {
    let dir = tempfile::tempdir().unwrap();
    runs(dir.path());
    let before = std::fs::read(dir.path().join("seen.jsonl")).unwrap();
    let out = tool("mc-fit")
        .current_dir(dir.path())
        .args(["--trace", "t.jsonl", "seen.jsonl", "-o", "seen.jsonl"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(73));
    assert_eq!(
        std::fs::read(dir.path().join("seen.jsonl")).unwrap(),
        before
    );
}

/// A server that runs one request at a time, whose runs do not say so
/// (no run description beside them): the fit tries each usual limit with
/// coefficients of its own and finds 1. (Probing every limit with the
/// coefficients fitted at the default 256 chose 4 on llama-cpp-python.)
#[test]
fn the_concurrency_limit_is_found_when_no_run_says_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let trace = tool("mc-gen")
        .args([
            "sessions",
            "--sessions",
            "12",
            "--session-rate",
            "2",
            "--turns",
            "2",
        ])
        .args(["--new-tokens", "200", "--osl", "16", "--block-size", "16"])
        .output()
        .unwrap();
    assert_success(&trace);
    std::fs::write(d.join("t.jsonl"), &trace.stdout).unwrap();
    std::fs::write(
        d.join("one.json"),
        HIDDEN.replace("\"max_seqs\": 64", "\"max_seqs\": 1"),
    )
    .unwrap();
    let out = tool("mc-replay")
        .current_dir(d)
        .args([
            "--engine-profile",
            "one.json",
            "-i",
            "t.jsonl",
            "-o",
            "seen.jsonl",
        ])
        .output()
        .unwrap();
    assert_success(&out);
    // Without its description the run is a server's: nothing says its shape.
    std::fs::remove_file(d.join("seen.summary.json")).unwrap();
    let out = tool("mc-fit")
        .current_dir(d)
        .args(["--trace", "t.jsonl", "seen.jsonl", "-o", "fitted.json"])
        .args(["--engine-block-size", "16", "--kv-tokens", "200000"])
        .args(["--max-batched-tokens", "2048"])
        .output()
        .unwrap();
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("max seqs 1 fits best"), "{stderr}");
    let fitted: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("fitted.json")).unwrap()).unwrap();
    assert_eq!(fitted["max_seqs"], 1);
}

#[test]
fn result_lines_are_held_to_the_trace_rows_limits() {
    // Issue 36: `input_tokens` 10^15 aborted mc-fit on a 500 TB
    // allocation; a TTFT of 1e300 made a profile mc-replay then refused.
    let dir = tempfile::tempdir().unwrap();
    runs(dir.path());
    let text = std::fs::read_to_string(dir.path().join("seen.jsonl")).unwrap();
    for (field, value, want) in [
        (
            "input_tokens",
            serde_json::json!(1_000_000_000_000_000u64),
            "limit of 10000000 tokens",
        ),
        ("ttft_ms", serde_json::json!(1e300), "limit of 2^53 ms"),
        ("e2e_ms", serde_json::json!(-1.0), "at least 0"),
    ] {
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        let mut v: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
        v[field] = value;
        lines[1] = v.to_string();
        std::fs::write(dir.path().join("bad.jsonl"), lines.join("\n") + "\n").unwrap();
        let out = tool("mc-fit")
            .current_dir(dir.path())
            .args(["--trace", "t.jsonl", "bad.jsonl"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(65), "{field}: {stderr}");
        assert!(
            stderr.contains("bad.jsonl: line 2: field `")
                && stderr.contains(&format!("`{field}`"))
                && stderr.contains(want),
            "{field}: {stderr}"
        );
    }
}

/// A 256-wide server whose runs never had many requests in flight: every
/// limit from their peak up fits them alike, so the fit must not pick one
/// (it picked 64 for such a server and then predicted a faster run 874%
/// off). It keeps vLLM's 256, says max seqs is not identified and which
/// load would pin it, states the held-out error fold by fold with its
/// bias, and a prediction at a higher load says it is beyond the
/// calibrated load.
#[test]
fn a_concurrency_limit_the_runs_cannot_tell_apart_is_flagged_not_picked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let trace = tool("mc-gen")
        .args(["sessions", "--sessions", "12", "--session-rate", "2"])
        .args(["--turns", "2", "--new-tokens", "200", "--osl", "16"])
        .args(["--block-size", "16"])
        .output()
        .unwrap();
    assert_success(&trace);
    std::fs::write(d.join("t.jsonl"), &trace.stdout).unwrap();
    std::fs::write(
        d.join("wide.json"),
        HIDDEN.replace("\"max_seqs\": 64", "\"max_seqs\": 256"),
    )
    .unwrap();
    for (name, speedup) in [("x1", "1"), ("x2", "2"), ("x8", "8")] {
        let out = tool("mc-replay")
            .current_dir(d)
            .args(["--engine-profile", "wide.json", "-i", "t.jsonl"])
            .args(["--speedup", speedup, "-o", &format!("{name}.jsonl")])
            .output()
            .unwrap();
        assert_success(&out);
        // A server's runs: nothing says the shape.
        std::fs::remove_file(d.join(format!("{name}.summary.json"))).unwrap();
    }
    let shape = [
        "--engine-block-size",
        "16",
        "--kv-tokens",
        "200000",
        "--max-batched-tokens",
        "2048",
    ];
    let out = tool("mc-fit")
        .current_dir(d)
        .args([
            "--trace",
            "t.jsonl",
            "x1.jsonl",
            "x2.jsonl",
            "-o",
            "fitted.json",
        ])
        .args(shape)
        .output()
        .unwrap();
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: max seqs not identified"),
        "{stderr}"
    );
    assert!(stderr.contains("left at 256"), "{stderr}");
    assert!(stderr.contains("would pin it"), "{stderr}");
    let fitted: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("fitted.json")).unwrap()).unwrap();
    assert_eq!(fitted["max_seqs"], 256);
    assert_eq!(fitted["calibrated"]["max_seqs_identified"], false);
    // The held-out error: each of the two runs predicted by a fit to the
    // other, every metric with a bias.
    assert!(
        stderr.contains("held-out error (leave-one-run-out"),
        "{stderr}"
    );
    assert!(
        stderr.contains("  fold 1: x1.jsonl\n  fold 2: x2.jsonl\n"),
        "{stderr}"
    );
    let ttft = stderr
        .lines()
        .skip_while(|l| !l.contains("held-out error"))
        .find(|l| l.starts_with("TTFT p50 (ms)"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        ttft.ends_with(')') && (ttft.contains("over (") || ttft.contains("under (")),
        "{ttft}"
    );
    // Eight times the trace's pace is beyond what it was fitted to.
    let out = tool("mc-fit")
        .current_dir(d)
        .args(["--trace", "t.jsonl", "--predict", "fitted.json", "x8.jsonl"])
        .args(shape)
        .output()
        .unwrap();
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("x8.jsonl: a prediction beyond the calibrated load"),
        "{stderr}"
    );
    // A run within it says nothing of the kind.
    let out = tool("mc-fit")
        .current_dir(d)
        .args(["--trace", "t.jsonl", "--predict", "fitted.json", "x1.jsonl"])
        .args(shape)
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("beyond"));
}

#[test]
fn help_and_docs_say_the_same_of_the_error_metric_and_the_shape_search() {
    let out = tool("mc-fit").arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout).replace('\n', " ");
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for want in [
        "mean squared log ratio",
        "mean of the three",
        "only among the limits the runs can tell apart",
        "leave-one-run-out",
    ] {
        assert!(help.contains(want), "--help lacks {want:?}");
    }
    assert!(!help.contains("mean absolute log error"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for doc in ["docs/tools/mc-fit.md", "docs/guide/calibrate.md"] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for want in [
            "mean squared log",
            "only among the limits the runs can tell apart",
            "leave-one-run-out",
        ] {
            assert!(text.contains(want), "{doc} lacks {want:?}");
        }
        assert!(!text.contains("mean absolute log error"), "{doc}");
    }
}

/// The designed workload's parts, checked by hand: a context limit of
/// 1,024 and 4 sequences give prefill rungs 16·√2^k up to 1024 − 64 − 1,
/// batches of 1, 2 and 4 (each closed by a fence), long contexts of ⅛, ¼,
/// ½ of the limit and the limit less 64 and the answer, and 3 requests at
/// each of two rates; every row after the first waits for the rung before.
#[test]
fn the_designed_workload_has_its_parts_in_order() {
    let out = tool("mc-gen")
        .args(["calibrate", "--max-model-len", "1024", "--max-seqs", "4"])
        .args([
            "--rates",
            "2,8",
            "--rate-requests",
            "3",
            "--block-size",
            "16",
        ])
        .args(["--gap-ms", "100", "--decode-osl", "32"])
        .output()
        .unwrap();
    assert_success(&out);
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let id = |r: &serde_json::Value| r["request_id"].as_str().unwrap().to_string();
    let part = |p: &str| -> Vec<&serde_json::Value> {
        rows.iter()
            .filter(|r| id(r).starts_with(&format!("cal:{p}:")))
            .collect()
    };
    let len = |r: &&serde_json::Value| r["input_length"].as_u64().unwrap();
    let prefill = part("prefill");
    assert_eq!(
        prefill.iter().map(len).collect::<Vec<_>>(),
        vec![16, 23, 32, 45, 64, 91, 128, 181, 256, 362, 512, 724, 959]
    );
    assert!(prefill.iter().all(|r| r["output_length"] == 1));
    // One at a time: each rung waits for the one before, 100 ms after it.
    for w in prefill.windows(2) {
        assert_eq!(w[1]["wait_for"], serde_json::json!([id(w[0])]));
        assert_eq!(w[1]["delay"], 100);
    }
    let decode = part("decode");
    assert_eq!(decode.len(), 1 + 2 + 4);
    assert!(decode
        .iter()
        .all(|r| r["input_length"] == 32 && r["output_length"] == 32));
    // A batch of 4 is released together, after the batch of 2's fence.
    let four: Vec<_> = decode
        .iter()
        .filter(|r| id(r).starts_with("cal:decode:4:"))
        .collect();
    assert_eq!(four.len(), 4);
    assert!(four
        .iter()
        .all(|r| r["wait_for"] == serde_json::json!(["cal:fence:decode-2"])));
    let fences = part("fence");
    assert_eq!(
        fences.iter().map(|r| id(r)).collect::<Vec<_>>(),
        [
            "cal:fence:decode-1",
            "cal:fence:decode-2",
            "cal:fence:decode-4",
            "cal:fence:rate-2",
            "cal:fence:rate-8"
        ]
    );
    assert_eq!(
        fences[2]["wait_for"],
        serde_json::json!([
            "cal:decode:4:0",
            "cal:decode:4:1",
            "cal:decode:4:2",
            "cal:decode:4:3"
        ])
    );
    assert_eq!(
        part("kv").iter().map(len).collect::<Vec<_>>(),
        vec![128, 256, 512, 1024 - 64 - 32]
    );
    let rate = part("rate");
    assert_eq!(rate.len(), 6);
    // A segment's requests wait for what ran before, spread by their
    // Poisson offsets; the first of each after the gap alone.
    assert_eq!(rate[0]["wait_for"], serde_json::json!(["cal:kv:928"]));
    assert_eq!(rate[0]["delay"], 100);
    assert_eq!(rate[3]["wait_for"], serde_json::json!(["cal:fence:rate-2"]));
    assert!(rate[1]["delay"].as_u64().unwrap() >= 100);
    // One session, the first row its root.
    assert!(rows.iter().all(|r| r["session_id"] == "calibrate"));
    assert_eq!(rows[0]["timestamp"], 0);
    assert_eq!(rows.len(), 13 + 7 + 5 + 4 + 6);
}

/// The hidden engine of a designed calibration: the concurrency limit the
/// decode ladder climbs to, a context limit the ladders reach, and a
/// per-request cost large enough to show in a batch's inter-token time.
const HIDDEN_DESIGN: &str = r#"{"name": "hidden", "model": "roofline", "t_fix_ms": 0.5, "c_seq_ms": 0.2,
 "t_w_ms": 12.0, "c_lin_ms": 0.05, "k_ms": 2e-6, "c_kv_ms": 1e-3,
 "kv_tokens": 200000, "block_size": 16, "max_batched_tokens": 2048, "max_seqs": 16,
 "max_model_len": 4096}"#;

/// A designed workload and its run on the hidden engine (`design.jsonl`,
/// `full.jsonl`), and the same run without its decode ladder
/// (`nodecode.jsonl`, its summary beside it).
fn designed_runs(dir: &Path) {
    designed_runs_on(dir, HIDDEN_DESIGN);
}

/// [`designed_runs`] with another hidden engine.
fn designed_runs_on(dir: &Path, hidden: &str) {
    let trace = tool("mc-gen")
        .args(["calibrate", "--max-model-len", "4096", "--max-seqs", "16"])
        .args([
            "--rates",
            "4,16",
            "--rate-requests",
            "20",
            "--block-size",
            "16",
        ])
        .output()
        .unwrap();
    assert_success(&trace);
    std::fs::write(dir.join("design.jsonl"), &trace.stdout).unwrap();
    std::fs::write(dir.join("hidden.json"), hidden).unwrap();
    let out = tool("mc-replay")
        .current_dir(dir)
        .args(["--engine-profile", "hidden.json", "-i", "design.jsonl"])
        .args(["-o", "full.jsonl"])
        .output()
        .unwrap();
    assert_success(&out);
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&trace.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let full = std::fs::read_to_string(dir.join("full.jsonl")).unwrap();
    let kept: String = full
        .lines()
        .filter(|l| {
            let r: serde_json::Value = serde_json::from_str(l).unwrap();
            let row = &rows[r["line"].as_u64().unwrap() as usize - 1];
            !row["request_id"]
                .as_str()
                .unwrap()
                .starts_with("cal:decode:")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(kept.lines().count() < full.lines().count());
    std::fs::write(dir.join("nodecode.jsonl"), kept).unwrap();
    std::fs::copy(
        dir.join("full.summary.json"),
        dir.join("nodecode.summary.json"),
    )
    .unwrap();
}

fn fit_designed(dir: &Path, run: &str) -> (serde_json::Value, String) {
    let out = tool("mc-fit")
        .current_dir(dir)
        .args(["--trace", "design.jsonl", run, "-o", "fitted.json"])
        .output()
        .unwrap();
    assert_success(&out);
    let fitted = serde_json::from_slice(&std::fs::read(dir.join("fitted.json")).unwrap()).unwrap();
    (fitted, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// All six coefficients come back from one designed run (a session
/// workload pins two of them, `a_fit_recovers_the_hidden_engine…`), and
/// mc-fit names what each part pins.
#[test]
fn a_designed_run_pins_all_six_coefficients() {
    let dir = tempfile::tempdir().unwrap();
    designed_runs(dir.path());
    let (fitted, stderr) = fit_designed(dir.path(), "full.jsonl");
    for (name, truth) in [
        ("t_fix_ms", 0.5),
        ("c_seq_ms", 0.2),
        ("t_w_ms", 12.0),
        ("c_lin_ms", 0.05),
        ("k_ms", 2e-6),
        ("c_kv_ms", 1e-3),
    ] {
        let v = fitted[name].as_f64().unwrap();
        assert!(
            (v / truth - 1.0).abs() < 0.02,
            "{name} {v} vs {truth}\n{stderr}"
        );
    }
    assert!(
        !stderr.contains("not identified") && !stderr.contains("cannot identify"),
        "{stderr}"
    );
    for said in [
        "designed part: prefill ladder (17 requests, prompts of 16 to 4031 tokens): pins c_lin_ms and k_ms",
        "designed part: decode ladder (31 requests, batches of 1, 2, 4, 8, 16): pins t_w_ms and c_seq_ms",
        "designed part: long contexts (4 requests, prompts of 512 to 3968 tokens): pins c_kv_ms",
        "designed part: rate ladder (40 requests)",
    ] {
        assert!(stderr.contains(said), "{said}\n{stderr}");
    }
}

/// Without its decode ladder, a designed run pins neither the weight-read
/// floor nor the per-request cost (nor the fixed cost, told from the floor
/// by the two ladders together): mc-fit says so, naming the missing part.
#[test]
fn a_run_set_missing_the_decode_ladder_leaves_its_coefficients_not_identified() {
    let dir = tempfile::tempdir().unwrap();
    designed_runs(dir.path());
    let (_, stderr) = fit_designed(dir.path(), "nodecode.jsonl");
    for name in ["t_fix_ms", "c_seq_ms", "t_w_ms"] {
        assert!(
            stderr.contains(&format!(
                "warning: {name} not identified: these runs hold no decode ladder"
            )),
            "{name}\n{stderr}"
        );
    }
    for name in ["c_lin_ms", "k_ms", "c_kv_ms"] {
        assert!(
            !stderr.contains(&format!("{name} not identified")),
            "{name}\n{stderr}"
        );
    }
    assert!(!stderr.contains("designed part: decode ladder"), "{stderr}");
}

/// A run against a server that exports vLLM's request-phase histograms
/// keeps the run's share of them (the scrape after less the scrape before)
/// in its summary, and mc-fit fits service time to them, saying so. Two
/// runs against one mock: each holds its own 12 requests, not the server's
/// running total.
#[test]
fn a_run_keeps_the_servers_histograms_and_the_fit_uses_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("hidden.json"),
        r#"{"model": "roofline", "t_fix_ms": 0.5, "c_seq_ms": 0.02, "t_w_ms": 5.0,
 "c_lin_ms": 0.05, "k_ms": 2e-6, "c_kv_ms": 1e-4, "block_size": 16}"#,
    )
    .unwrap();
    let mock = crate::util::MockServer::start(&[
        "--engine",
        "--engine-profile",
        d.join("hidden.json").to_str().unwrap(),
    ]);
    let trace = tool("mc-gen")
        .args(["constant", "--qps", "4", "--num-requests", "12"])
        .args(["--isl", "200", "--osl", "16", "--block-size", "16"])
        .output()
        .unwrap();
    assert_success(&trace);
    std::fs::write(d.join("t.jsonl"), &trace.stdout).unwrap();
    let url = format!("http://{}", mock.addr);
    for (run, seed) in [("a.jsonl", "1"), ("b.jsonl", "2")] {
        let out = tool("mc-replay")
            .current_dir(d)
            .args(["--url", &url, "--model", "m", "-i", "t.jsonl", "-o", run])
            .args(["--seed", seed])
            .output()
            .unwrap();
        assert_success(&out);
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("b.summary.json")).unwrap()).unwrap();
    let h = &summary["fidelity"]["server_histograms"];
    for name in [
        "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
    ] {
        assert_eq!(h[name]["count"], 12.0, "{name}: {h}");
    }
    // A lone 200-token prompt: 0.5 + 0.02 + hypot(5, 0.05·200) + 2e-6·200·100
    // = 11.70 ms of prefill on the hidden engine; the wall clock only adds.
    let prefill = &h["vllm:request_prefill_time_seconds"];
    let mean = prefill["sum"].as_f64().unwrap() / 12.0;
    assert!((0.0111..0.2).contains(&mean), "{mean}: {prefill}");
    assert!(
        h["vllm:iteration_tokens_total"]["count"].as_f64().unwrap() >= 12.0,
        "{h}"
    );
    let out = tool("mc-fit")
        .current_dir(d)
        .args([
            "--trace",
            "t.jsonl",
            "a.jsonl",
            "b.jsonl",
            "--max-seqs",
            "256",
        ])
        .args(["--engine-block-size", "16", "-o", "fitted.json"])
        .arg("--server-histograms")
        .output()
        .unwrap();
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for run in ["a.jsonl", "b.jsonl"] {
        assert!(
            stderr.contains(&format!(
                "{run}: fitting service time to the server's own histograms \
                 (vllm:request_prefill_time_seconds, 12 requests"
            )),
            "{stderr}"
        );
    }
    // Without the option the client's times are fitted, and stderr says
    // the histograms were there.
    let out = tool("mc-fit")
        .current_dir(d)
        .args(["--trace", "t.jsonl", "a.jsonl", "--max-seqs", "256"])
        .args(["--engine-block-size", "16", "-o", "fitted2.json"])
        .output()
        .unwrap();
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "a.jsonl: fitting the client's TTFT, ITL and E2E (the run holds the server's \
             request-phase histograms; --server-histograms fits service time to them)"
        ),
        "{stderr}"
    );
}

/// A design the options cannot make is refused before a row is written.
#[test]
fn a_design_that_cannot_be_made_is_a_usage_error() {
    for (args, says) in [
        (vec!["--max-model-len", "100"], "too short for a design"),
        (
            vec!["--max-model-len", "4096", "--max-seqs", "0"],
            "--max-seqs 0",
        ),
        (
            vec!["--max-model-len", "4096", "--decode-osl", "1"],
            "--decode-osl",
        ),
        (
            vec!["--max-model-len", "4096", "--rates", "1e-9"],
            "--rates 0.000000001",
        ),
        (
            vec!["--max-model-len", "200", "--decode-isl", "100"],
            "do not fit",
        ),
    ] {
        let out = tool("mc-gen")
            .arg("calibrate")
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// A CPU-like hidden engine of the `serving` model (decision 0044): no
/// weight-read floor to speak of, and a new request costs 1.5 ms of the
/// step that takes it and waits 6 ms before any step may take it (vLLM's
/// CPU build: a lone short prompt's first token 10.5 ms, a decode step 2).
const HIDDEN_SERVING: &str = r#"{"name": "hidden", "model": "serving", "t_fix_ms": 1.5, "c_seq_ms": 0.15,
 "t_w_ms": 0.2, "c_lin_ms": 0.02, "k_ms": 2e-5, "c_kv_ms": 4e-4, "c_new_ms": 1.5, "t_req_ms": 6.0,
 "kv_tokens": 200000, "block_size": 16, "max_batched_tokens": 2048, "max_seqs": 16,
 "max_model_len": 4096}"#;

/// `--model serving` recovers the per-request costs from one designed run
/// of a serving engine, and the roofline cannot make up for them: its fit
/// of the same run is worse by orders of magnitude.
#[test]
fn a_serving_fit_recovers_the_per_request_costs_a_roofline_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    designed_runs_on(d, HIDDEN_SERVING);
    let fit = |model: &str| {
        let out = tool("mc-fit")
            .current_dir(d)
            .args(["--trace", "design.jsonl", "full.jsonl", "--model", model])
            .args(["-o", &format!("{model}.json")])
            .output()
            .unwrap();
        assert_success(&out);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.join(format!("{model}.json"))).unwrap())
                .unwrap();
        let err: f64 = stderr
            .split("(error ")
            .nth(1)
            .and_then(|t| t.split(':').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no error in\n{stderr}"));
        (v, err, stderr)
    };
    let (serving, err, stderr) = fit("serving");
    assert_eq!(serving["model"], "serving", "{stderr}");
    for (name, truth) in [
        ("t_fix_ms", 1.5),
        ("c_seq_ms", 0.15),
        ("c_lin_ms", 0.02),
        ("k_ms", 2e-5),
        ("c_kv_ms", 4e-4),
        ("c_new_ms", 1.5),
        ("t_req_ms", 6.0),
    ] {
        let v = serving[name].as_f64().unwrap();
        assert!(
            (v / truth - 1.0).abs() < 0.05,
            "{name} {v} vs {truth}\n{stderr}"
        );
    }
    assert!(err < 1e-3, "{err}\n{stderr}");
    let (roofline, rerr, rstderr) = fit("roofline");
    assert_eq!(roofline["model"], "roofline");
    assert!(rerr > 10.0 * err.max(1e-4), "{rerr} vs {err}\n{rstderr}");
}
