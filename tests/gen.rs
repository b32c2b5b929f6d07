//! mc-gen: every mode, checked against hand-computed values, mc-analyze and
//! strict parse-backs of both output formats.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mctrace::graph::{Graphs, RowKind};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::util::{self, assert_success, ids, run_ok, tool, write_file};

fn gen(args: &[&str]) -> String {
    run_ok("mc-gen", args, "")
}

fn rows(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// A row is consistent at block size b: (n-1)·b < input_length <= n·b.
fn consistent(v: &Value, b: u64) -> bool {
    let n = ids(v).len() as u64;
    let isl = u(v, "input_length");
    (n == 0 && isl == 0) || (n > 0 && (n - 1) * b < isl && isl <= n * b)
}

#[test]
fn same_arguments_same_bytes_other_seed_other_bytes() {
    let cases: [&[&str]; 9] = [
        &["agent", "--graph", "tools", "--num-sessions", "5"],
        &["agent", "--graph", "sub-agents", "--num-sessions", "5"],
        &["agent", "--graph", "map-reduce", "--num-sessions", "5"],
        &[
            "constant",
            "--qps",
            "3.5",
            "--num-requests",
            "200",
            "--isl",
            "lognormal:800:0.7",
        ],
        &[
            "synthetic",
            "--traffic-pattern",
            "severe_fluctuation",
            "--duration-ms",
            "20000",
        ],
        &["prefix", "--num-requests", "200", "--zipf", "1.1"],
        &["sessions", "--sessions", "20"],
        &["agent", "--num-sessions", "5"],
        &[
            "constant",
            "--qps",
            "1",
            "--num-requests",
            "50",
            "--arrival",
            "gamma:0.5",
            "--format",
            "aibrix",
        ],
    ];
    for args in cases {
        let a = gen(args);
        assert!(!a.is_empty(), "{args:?}");
        assert_eq!(a, gen(args), "{args:?} is not reproducible");
        let mut other = args.to_vec();
        other.extend(["--seed", "7"]);
        assert_ne!(a, gen(&other), "{args:?}: --seed changes nothing");
    }
}

/// The Kolmogorov–Smirnov distance of `gaps` from Exp(mean).
fn ks_exponential(mut gaps: Vec<f64>, mean: f64) -> f64 {
    gaps.sort_by(f64::total_cmp);
    let n = gaps.len() as f64;
    gaps.iter()
        .enumerate()
        .map(|(i, &g)| {
            let f = 1.0 - (-g / mean).exp();
            (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
        })
        .fold(0.0, f64::max)
}

#[test]
fn constant_rate_is_within_3_percent_and_gaps_are_exponential() {
    let out = gen(&[
        "constant",
        "--qps",
        "2",
        "--num-requests",
        "10000",
        "--isl",
        "100",
    ]);
    let r = rows(&out);
    assert_eq!(r.len(), 10_000);
    let ts: Vec<f64> = r.iter().map(|v| u(v, "timestamp") as f64).collect();
    let rate = (ts.len() - 1) as f64 / (ts[ts.len() - 1] / 1000.0);
    assert!((rate / 2.0 - 1.0).abs() < 0.03, "rate {rate}");
    // Constant lengths and fresh ids, consistent at 512.
    assert!(r
        .iter()
        .all(|v| u(v, "input_length") == 100 && consistent(v, 512)));

    // KS on the gaps, at 0.01 requests/s so whole-ms timestamps move the
    // CDF by at most 1e-5. Seed 0's first 10,000 gaps give D = 0.0143
    // (p ≈ 0.03): below the 1% critical value 1.63/√n; the first 100,000
    // give D ≈ 0.0041, below the 5% value 1.36/√n.
    for (n, c) in [(10_000, 1.63), (100_000, 1.36)] {
        let out = gen(&[
            "constant",
            "--qps",
            "0.01",
            "--num-requests",
            &n.to_string(),
            "--isl",
            "1",
        ]);
        let ts: Vec<f64> = out
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["timestamp"]
                    .as_f64()
                    .unwrap()
            })
            .collect();
        let gaps: Vec<f64> = ts.windows(2).map(|w| w[1] - w[0]).collect();
        let d = ks_exponential(gaps, 100_000.0);
        assert!(d < c / ((n - 1) as f64).sqrt(), "{n} gaps: KS D = {d}");
    }
}

#[test]
fn constant_arrivals_and_ramps() {
    // 4 per second, constant gaps: 0, 250, 500, 750 in one second.
    let r = rows(&gen(&[
        "constant",
        "--qps",
        "4",
        "--duration-ms",
        "1000",
        "--arrival",
        "constant",
    ]));
    let ts: Vec<u64> = r.iter().map(|v| u(v, "timestamp")).collect();
    assert_eq!(ts, vec![0, 250, 500, 750]);
    // A linear ramp from 1 to 9 qps over 10 s: the second half is busier.
    let r = rows(&gen(&[
        "constant",
        "--qps",
        "9",
        "--qps-start",
        "1",
        "--ramp-up",
        "linear",
        "--duration-ms",
        "10000",
        "--arrival",
        "constant",
    ]));
    let first = r.iter().filter(|v| u(v, "timestamp") < 5000).count();
    assert!(
        r.len() - first > 2 * first,
        "{first} then {}",
        r.len() - first
    );
    // Exponential from 1 to 16 qps over 8 s with constant gaps: the rate
    // doubles every 2 s, so each 2 s window holds about twice the last.
    let out = gen(&[
        "constant",
        "--qps",
        "16",
        "--qps-start",
        "1",
        "--ramp-up",
        "exponential",
        "--duration-ms",
        "8000",
        "--arrival",
        "constant",
    ]);
    let per = per_window(&out, 2000, 4);
    for w in per.windows(2) {
        let ratio = w[1] as f64 / w[0] as f64;
        assert!((1.6..2.5).contains(&ratio), "{per:?}");
    }
}

#[test]
fn gamma_gaps_have_the_shapes_burstiness() {
    // Gamma(k) gaps with mean 1/rate have coefficient of variation 1/sqrt(k).
    for (k, cv) in [("0.25", 2.0), ("1", 1.0), ("4", 0.5)] {
        let arrival = format!("gamma:{k}");
        let r = rows(&gen(&[
            "constant",
            "--qps",
            "0.01",
            "--num-requests",
            "20000",
            "--arrival",
            &arrival,
        ]));
        let ts: Vec<f64> = r.iter().map(|v| u(v, "timestamp") as f64).collect();
        let gaps: Vec<f64> = ts.windows(2).map(|w| w[1] - w[0]).collect();
        let n = gaps.len() as f64;
        let mean = gaps.iter().sum::<f64>() / n;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!(
            (mean / 100_000.0 - 1.0).abs() < 0.05,
            "gamma:{k} mean {mean}"
        );
        assert!(
            (sd / mean / cv - 1.0).abs() < 0.08,
            "gamma:{k} cv {}",
            sd / mean
        );
    }
}

#[test]
fn synthetic_curves_equal_hand_computed_values() {
    let dir = tempfile::tempdir().unwrap();
    // rate(t) = 4·sin(2π·t/8) + 10 over 8 steps (7000 ms / 1000 ms + 1),
    // one period (period_len_ms = duration): 10, 13, 14, 13, 10, 7, 6.
    let traffic = dir.path().join("traffic.json");
    std::fs::write(
        &traffic,
        r#"{"fluctuate": 4, "mean": 10, "noise": 0, "period_len_ms": 7000, "only_rise": false}"#,
    )
    .unwrap();
    // isl(t) = 100·sin(2π·t/8) + 500: 500, 571, 600, 571, 500, 429, 400.
    let isl =
        r#"{"fluctuate": 100, "mean": 500, "noise": 0, "period_len_ms": 7000, "only_rise": false}"#;
    let out = gen(&[
        "synthetic",
        "--traffic-pattern",
        traffic.to_str().unwrap(),
        "--prompt-len-pattern",
        isl,
        "--duration-ms",
        "7000",
        "--interval-ms",
        "1000",
        "--arrival",
        "constant",
    ]);
    let mut per: Vec<(u64, u64)> = vec![(0, 0); 7];
    for v in rows(&out) {
        let w = (u(&v, "timestamp") / 1000) as usize;
        per[w].0 += 1;
        per[w].1 = u(&v, "input_length");
    }
    assert_eq!(
        per,
        vec![
            (10, 500),
            (13, 571),
            (14, 600),
            (13, 571),
            (10, 500),
            (7, 429),
            (6, 400)
        ]
    );
    // --interval-ms really is the step: 500 ms steps halve each window.
    let out = gen(&[
        "synthetic",
        "--traffic-pattern",
        traffic.to_str().unwrap(),
        "--duration-ms",
        "7000",
        "--interval-ms",
        "500",
        "--arrival",
        "constant",
    ]);
    let first: Vec<u64> = rows(&out)
        .iter()
        .map(|v| u(v, "timestamp"))
        .take(5)
        .collect();
    // Step 0 at 10/s over 500 ms: 0, 100, 200, 300, 400.
    assert_eq!(first, vec![0, 100, 200, 300, 400]);
}

#[test]
fn rising_length_presets_work_and_never_decrease() {
    let out = gen(&[
        "synthetic",
        "--traffic-pattern",
        "constant",
        "--prompt-len-pattern",
        "quick_rising",
        "--completion-len-pattern",
        "slow_rising",
        "--duration-ms",
        "30000",
    ]);
    let r = rows(&out);
    assert!(r.len() > 100);
    for w in r.windows(2) {
        assert!(u(&w[1], "input_length") >= u(&w[0], "input_length"));
        assert!(u(&w[1], "output_length") >= u(&w[0], "output_length"));
    }
}

fn per_window(out: &str, w: u64, n: usize) -> Vec<usize> {
    let mut c = vec![0; n];
    for v in rows(out) {
        c[(u(&v, "timestamp") / w) as usize] += 1;
    }
    c
}

#[test]
fn stat_maas_rates_per_window() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let traffic = write_file(
        d,
        "qps.csv",
        "Time,Total,Success,4xx Error,5xx Error\n\
         2024-05-01 10:00:00,3,2,1,0\n\
         2024-05-01 10:00:10,1,0.5,0,0.5\n\
         2024-05-01 10:00:20,3,3,0,0\n",
    );
    let input = write_file(
        d,
        "in.csv",
        "Time,P50,P70,P90,P99\n\
         2024-05-01 10:00:00,1000,1000,1000,1000\n\
         2024-05-01 10:00:10,200,300,400,900\n\
         2024-05-01 10:00:20,50,50,50,50\n",
    );
    let output = write_file(
        d,
        "out.csv",
        "Time,P50,P70,P95,P99\n\
         2024-05-01 10:00:00,100,100,100,100\n\
         2024-05-01 10:00:10,10,20,30,40\n\
         2024-05-01 10:00:20,7,7,7,7\n",
    );
    let args = |extra: &[&str]| {
        let mut a = vec![
            "stat",
            "--traffic-file",
            traffic.to_str().unwrap(),
            "--prompt-len-file",
            input.to_str().unwrap(),
            "--completion-len-file",
            output.to_str().unwrap(),
            "--arrival",
            "constant",
        ];
        a.extend_from_slice(extra);
        gen(&a)
    };
    // 10 s windows at 2, 0.5 and 3 requests/s: 20, 5 and 30 requests.
    let out = args(&[]);
    assert_eq!(per_window(&out, 10_000, 3), vec![20, 5, 30]);
    // Equal percentiles are a point mass: every length is exact.
    for v in rows(&out) {
        let w = u(&v, "timestamp") / 10_000;
        if w == 0 {
            assert_eq!((u(&v, "input_length"), u(&v, "output_length")), (1000, 100));
        }
        if w == 2 {
            assert_eq!((u(&v, "input_length"), u(&v, "output_length")), (50, 7));
        }
    }
    // The scales divide: half the rate, a quarter of the lengths.
    let out = args(&[
        "--qps-scale",
        "2",
        "--input-scale",
        "4",
        "--output-scale",
        "2",
    ]);
    assert_eq!(per_window(&out, 10_000, 3), vec![10, 3, 15]);
    let r = rows(&out);
    assert_eq!(
        (u(&r[0], "input_length"), u(&r[0], "output_length")),
        (250, 50)
    );
}

#[test]
fn stat_cloudide_rates_and_byte_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let traffic = write_file(
        d,
        "rate.csv",
        "Time,rate\n1700000000000,4\n1700000005000,1\n1700000010000,undefined\n",
    );
    let bytes = write_file(
        d,
        "bytes.csv",
        "Time,recv_bytes.rate@a,recv_bytes.rate@b,sent_bytes.rate@a\n\
         1700000000000,1000,1000,400\n\
         1700000005000,300,0,60\n\
         1700000010000,0,0,0\n",
    );
    let out = gen(&[
        "stat",
        "--stat-type",
        "cloudide",
        "--traffic-file",
        traffic.to_str().unwrap(),
        "--prompt-len-file",
        bytes.to_str().unwrap(),
        "--arrival",
        "constant",
    ]);
    // 5 s windows at 4, 1 and 0 requests/s.
    assert_eq!(per_window(&out, 5000, 3), vec![20, 5, 0]);
    for v in rows(&out) {
        // Input from the summed recv bytes per request, output from sent.
        let want = if u(&v, "timestamp") < 5000 {
            (500, 100)
        } else {
            (300, 60)
        };
        assert_eq!((u(&v, "input_length"), u(&v, "output_length")), want);
    }
}

#[test]
fn stat_errors_name_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let traffic = write_file(
        d,
        "rate.csv",
        "Time,rate\n1700000000000,4\n1700000005000,lots\n",
    );
    let bytes = write_file(
        d,
        "bytes.csv",
        "Time,recv_bytes.x,sent_bytes.x\n1700000000000,1,1\n",
    );
    let out = tool("mc-gen")
        .args(["stat", "--stat-type", "cloudide", "--traffic-file"])
        .arg(&traffic)
        .arg("--prompt-len-file")
        .arg(&bytes)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rate.csv: line 3: column 2 (`rate`): `lots`"),
        "{err}"
    );
    let out = tool("mc-gen")
        .args([
            "stat",
            "--traffic-file",
            "/nonexistent/q.csv",
            "--prompt-len-file",
            "x.csv",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(66));
}

fn hit_rate(trace: &str) -> f64 {
    let out = run_ok("mc-analyze", &["--json", "--block-size", "512"], trace);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["blocks"]["conflicting_ids"]["count"], 0);
    assert_eq!(v["blocks"]["inconsistent_rows"]["count"], 0);
    v["cache"]["results"][0]["hit_rate"].as_f64().unwrap()
}

#[test]
fn prefix_reaches_its_target_hit_rate_per_mc_analyze() {
    for (ratio, extra) in [("0.6", None), ("0.3", Some("1.2")), ("0.9", None)] {
        let mut args = vec![
            "prefix",
            "--num-requests",
            "5000",
            "--prefix-groups",
            "10",
            "--prefix-tokens",
            "uniform:2048:4096",
            "--share-ratio",
            ratio,
        ];
        if let Some(s) = extra {
            args.extend(["--zipf", s]);
        }
        let out = gen(&args);
        let target: f64 = ratio.parse().unwrap();
        let got = hit_rate(&out);
        assert!(
            (got - target).abs() < 0.02,
            "share {target}: hit rate {got}"
        );
    }
}

fn by_session(out: &str) -> Vec<Vec<Value>> {
    let mut order: Vec<String> = Vec::new();
    let mut map: HashMap<String, Vec<Value>> = HashMap::new();
    for v in rows(out) {
        let s = v["session_id"].as_str().unwrap().to_string();
        if !map.contains_key(&s) {
            order.push(s.clone());
        }
        map.entry(s).or_default().push(v);
    }
    order.into_iter().map(|s| map.remove(&s).unwrap()).collect()
}

#[test]
fn sessions_grow_by_whole_turns_with_configured_delays() {
    let out = gen(&[
        "sessions",
        "--sessions",
        "30",
        "--turns",
        "3",
        "--think-time-ms",
        "const:777",
        "--new-tokens",
        "const:300",
        "--osl",
        "const:250",
        "--system-prompt-tokens",
        "1024",
    ]);
    let sessions = by_session(&out);
    assert_eq!(sessions.len(), 30);
    let mut last_start = 0;
    for turns in &sessions {
        assert_eq!(turns.len(), 3);
        let start = u(&turns[0], "timestamp");
        assert!(start >= last_start, "sessions in arrival order");
        last_start = start;
        assert!(turns[0].get("delay").is_none());
        // Each prompt is the previous one, its answer and 300 new tokens.
        let lens: Vec<u64> = turns.iter().map(|t| u(t, "input_length")).collect();
        assert_eq!(lens, vec![1324, 1874, 2424]);
        // The shared system prompt: the same 2 leading ids everywhere.
        assert_eq!(ids(&turns[0])[..2], ids(&sessions[0][0])[..2]);
        for w in turns.windows(2) {
            assert!(w[1].get("timestamp").is_none());
            assert_eq!(u(&w[1], "delay"), 777);
            let (a, b) = (ids(&w[0]), ids(&w[1]));
            let full = (u(&w[0], "input_length") / 512) as usize;
            assert_eq!(
                b[..full],
                a[..full],
                "a turn starts with the previous full blocks"
            );
            assert!(
                !a[full..].iter().any(|x| b.contains(x)),
                "a partial block is renamed"
            );
        }
    }
    let _ = hit_rate(&out); // consistent rows, no id conflicts
}

#[test]
fn agent_rows_follow_aibrix_config() {
    // Defaults: 10 sessions × 3 turns × (plan, follow-up).
    let out = gen(&["agent"]);
    let sessions = by_session(&out);
    assert_eq!(sessions.len(), 10);
    for rows in &sessions {
        let lens: Vec<u64> = rows.iter().map(|r| u(r, "input_length")).collect();
        assert_eq!(lens, vec![256, 384, 384, 512, 512, 640]);
        assert!(rows.iter().all(|r| u(r, "output_length") == 64));
        for (i, r) in rows.iter().enumerate().skip(1) {
            let d = u(r, "delay");
            if i % 2 == 1 {
                assert!((100..=500).contains(&d), "tool phase {d}");
            } else {
                assert!(d <= 1000, "think time {d}");
            }
        }
    }
    let _ = hit_rate(&out);
    // Every tool fails once (max_tool_retries 1): two latencies per branch.
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_file(
        dir.path(),
        "agent.json",
        &json!({"num_sessions": 3, "turns_per_session": [1, 1], "parallel_tools": 4,
                "tool_latency_ms": 100, "retry_probability": 1.0, "tool_result_tokens": 10,
                "seed": 5})
        .to_string(),
    );
    let out = gen(&["agent", "--config", cfg.to_str().unwrap()]);
    let r = rows(&out);
    assert_eq!(r.len(), 6);
    for pair in r.chunks(2) {
        assert_eq!(u(&pair[1], "delay"), 200);
        assert_eq!(u(&pair[1], "input_length"), 256 + 4 * 10);
    }
    let bad = write_file(dir.path(), "bad.json", r#"{"parallel_tools": [3, 1]}"#);
    let o = tool("mc-gen")
        .args(["agent", "--config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&o.stderr).contains("parallel_tools must satisfy"));
}

/// A WordLevel tokenizer: one token per word.
fn word_tokenizer(dir: &Path) -> PathBuf {
    util::word_tokenizer(dir, &["w"])
}

fn words(n: usize, tag: &str) -> String {
    let mut s = tag.to_string();
    for _ in 1..n {
        s.push_str(" w");
    }
    s
}

#[test]
fn prompts_are_matched_within_tolerance() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tok = word_tokenizer(d);
    let mut file = String::new();
    for n in [10, 60, 100, 140, 400] {
        file.push_str(&json!({"prompt": words(n, &format!("p{n}"))}).to_string());
        file.push('\n');
    }
    let prompts = write_file(d, "prompts.jsonl", &file);
    let cache = d.join("cache");
    let run = |extra: &[&str]| {
        let out = tool("mc-gen")
            .args(extra)
            .arg("--prompt-file")
            .arg(&prompts)
            .arg("--tokenizer")
            .arg(&tok)
            .arg("--cache-dir")
            .arg(&cache)
            .output()
            .unwrap();
        assert_success(&out);
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    // Target 100 at 50%: [50, 150] holds the 60, 100 and 140 word prompts.
    let (out, err) = run(&[
        "constant",
        "--qps",
        "5",
        "--num-requests",
        "300",
        "--isl",
        "100",
    ]);
    assert!(err.contains("tokenized"), "{err}");
    let mut seen = std::collections::BTreeSet::new();
    for v in rows(&out) {
        let text = v["text_input"].as_str().unwrap();
        assert!(v.get("input_length").is_none() && v.get("hash_ids").is_none());
        let n = text.split_whitespace().count();
        assert!((50..=150).contains(&n), "{n} words");
        seen.insert(n);
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![60, 100, 140]);
    // The second run reads the cached lengths and gives the same bytes.
    let (again, err) = run(&[
        "constant",
        "--qps",
        "5",
        "--num-requests",
        "300",
        "--isl",
        "100",
    ]);
    assert!(err.contains("lengths cached"), "{err}");
    assert_eq!(out, again);
    // Target 1: nothing within 100%, so the nearest (10 words).
    let (out, err) = run(&[
        "constant",
        "--qps",
        "5",
        "--num-requests",
        "3",
        "--isl",
        "1",
    ]);
    assert!(rows(&out)
        .iter()
        .all(|v| v["text_input"].as_str().unwrap().starts_with("p10 ")));
    assert!(err.contains("3 nearest"), "{err}");
    // Trace-driven: 10% first, so 100 picks only the 100-word prompt.
    let trace = write_file(
        d,
        "trace.jsonl",
        "{\"timestamp\":5,\"input_length\":100,\"output_length\":9,\"hash_ids\":[1]}\n{\"timestamp\":1500,\"input_length\":400,\"output_length\":3,\"hash_ids\":[2]}\n",
    );
    let (out, _) = run(&["from-trace", "-i", trace.to_str().unwrap()]);
    let r = rows(&out);
    assert!(r[0]["text_input"].as_str().unwrap().starts_with("p100 "));
    assert!(r[1]["text_input"].as_str().unwrap().starts_with("p400 "));
    assert_eq!((u(&r[0], "timestamp"), u(&r[0], "output_length")), (5, 9));
    assert_eq!(
        (u(&r[1], "timestamp"), u(&r[1], "output_length")),
        (1500, 3)
    );
}

#[test]
fn sessioned_prompt_files_give_session_ids_and_turn_text() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tok = word_tokenizer(d);
    let file = [
        json!({"session_id": "a", "prompts": [words(100, "a1"), words(100, "a2")]}),
        json!({"session_id": 7, "prompts": [words(100, "b1")]}),
    ]
    .map(|v| v.to_string())
    .join("\n");
    let prompts = write_file(d, "sessions.jsonl", &file);
    let out = run_ok(
        "mc-gen",
        &[
            "constant",
            "--qps",
            "1",
            "--num-requests",
            "3",
            "--isl",
            "100",
            "--prompt-file",
            prompts.to_str().unwrap(),
            "--tokenizer",
            tok.to_str().unwrap(),
            "--cache-dir",
            d.join("c").to_str().unwrap(),
        ],
        "",
    );
    let r = rows(&out);
    let got: Vec<(String, String)> = r
        .iter()
        .map(|v| {
            (
                v["session_id"].as_str().unwrap().to_string(),
                v["text_input"].as_str().unwrap()[..2].to_string(),
            )
        })
        .collect();
    // Each session's turns come in order; all three prompts are used once.
    let pos = |t: &str| got.iter().position(|g| g.1 == t).unwrap();
    assert!(pos("a1") < pos("a2"));
    assert!(got.contains(&("7".into(), "b1".into())));
    assert!(got.iter().filter(|g| g.0 == "a").count() == 2);

    // Generated conversations keep their ids and timing and take the turns
    // of one prompt-file session in order.
    let two = [
        json!({"session_id": "a", "prompts": [words(100, "a1"), words(300, "a2")]}),
        json!({"session_id": "b", "prompts": [words(100, "b1"), words(5, "b2")]}),
    ]
    .map(|v| v.to_string())
    .join("\n");
    let prompts = write_file(d, "two.jsonl", &two);
    let out = run_ok(
        "mc-gen",
        &[
            "sessions",
            "--sessions",
            "1",
            "--turns",
            "2",
            "--new-tokens",
            "100",
            "--prompt-file",
            prompts.to_str().unwrap(),
            "--tokenizer",
            tok.to_str().unwrap(),
            "--cache-dir",
            d.join("c").to_str().unwrap(),
            "--seed",
            "2",
        ],
        "",
    );
    let r = rows(&out);
    assert_eq!(r.len(), 2);
    assert!(r.iter().all(|v| v["session_id"] == "session-0"));
    assert!(r[0].get("timestamp").is_some() && r[1].get("delay").is_some());
    let texts: Vec<&str> = r
        .iter()
        .map(|v| &v["text_input"].as_str().unwrap()[..2])
        .collect();
    // Seed 2 starts in session b; a length match for the second turn
    // (328 tokens) would have picked a2 instead of b2.
    assert_eq!(texts, ["b1", "b2"]);
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AibrixLine {
    timestamp: u64,
    requests: Vec<AibrixRequest>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AibrixRequest {
    prompt: String,
    prompt_length: u64,
    output_length: u64,
    #[serde(default)]
    session_id: Option<String>,
}

fn aibrix(out: &str) -> Vec<AibrixLine> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn aibrix_format_parses_back_into_aibrix_schema() {
    // Constant arrivals at 4 per second with whole-ms grouping: one request
    // per timestamp, the same times and lengths as the Mooncake rows.
    let base = [
        "constant",
        "--qps",
        "3",
        "--num-requests",
        "300",
        "--isl",
        "uniform:10:50",
    ];
    let moon = rows(&gen(&base));
    let mut args = base.to_vec();
    args.extend(["--format", "aibrix"]);
    let lines = aibrix(&gen(&args));
    let flat: Vec<(u64, &AibrixRequest)> = lines
        .iter()
        .flat_map(|l| l.requests.iter().map(move |r| (l.timestamp, r)))
        .collect();
    assert_eq!(flat.len(), moon.len());
    for ((t, r), m) in flat.iter().zip(&moon) {
        assert_eq!(*t, u(m, "timestamp"));
        assert_eq!(r.prompt_length, u(m, "input_length"));
        assert_eq!(r.output_length, u(m, "output_length"));
        assert_eq!(r.prompt.split(' ').count() as u64, r.prompt_length);
        assert!(r.session_id.is_none());
    }
    for w in lines.windows(2) {
        assert!(
            w[0].timestamp < w[1].timestamp,
            "equal timestamps are grouped"
        );
    }
    // Sessions come out in time order too, grouped, with their ids.
    let lines = aibrix(&gen(&["agent", "--format", "aibrix"]));
    assert_eq!(lines.iter().map(|l| l.requests.len()).sum::<usize>(), 60);
    assert!(lines.windows(2).all(|w| w[0].timestamp < w[1].timestamp));
    assert!(lines[0].requests.iter().all(|r| r.session_id.is_some()));
    // Grouping: from-trace with --interval-ms puts rows of a window together.
    let trace = "{\"timestamp\":10,\"input_length\":5,\"output_length\":1}\n\
                 {\"timestamp\":900,\"input_length\":6,\"output_length\":1}\n\
                 {\"timestamp\":1200,\"input_length\":7,\"output_length\":1}\n";
    let out = run_ok(
        "mc-gen",
        &["from-trace", "--interval-ms", "1000", "--format", "aibrix"],
        trace,
    );
    let lines = aibrix(&out);
    assert_eq!(lines.len(), 2);
    assert_eq!((lines[0].timestamp, lines[0].requests.len()), (0, 2));
    assert_eq!((lines[1].timestamp, lines[1].requests.len()), (1000, 1));
}

#[test]
fn from_trace_keeps_arrivals_sessions_and_ids() {
    let trace = "{\"timestamp\":10.7,\"session_id\":\"x\",\"input_length\":600,\"output_length\":3,\"hash_ids\":[4,5]}\n\
                 {\"session_id\":\"x\",\"delay\":250,\"input_length\":700,\"output_length\":2,\"hash_ids\":[4,9]}\n\
                 {\"timestamp\":70000,\"input_length\":1,\"output_length\":1,\"hash_ids\":[1]}\n";
    let r = rows(&run_ok("mc-gen", &["from-trace"], trace));
    assert_eq!(r.len(), 3, "no 60 s cut-off");
    assert_eq!(
        r[0],
        json!({"timestamp":10,"session_id":"x","input_length":600,"output_length":3,"hash_ids":[4,5]})
    );
    assert_eq!(
        r[1],
        json!({"session_id":"x","delay":250,"input_length":700,"output_length":2,"hash_ids":[4,9]})
    );
    let r = rows(&run_ok(
        "mc-gen",
        &["from-trace", "--duration-ms", "60000"],
        trace,
    ));
    assert_eq!(r.len(), 2);
    let out = tool("mc-gen")
        .arg("from-trace")
        .write_stdin("{\"timestamp\":1,\"output_length\":1}\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1: field `input_length`"));
    let out = tool("mc-gen")
        .args(["from-trace", "--on-error", "skip"])
        .write_stdin("{\"timestamp\":1,\"output_length\":1}\nnot json\n{\"timestamp\":2,\"input_length\":3}\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(rows(&String::from_utf8(out.stdout).unwrap()).len(), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("skipped 2 bad lines (line 1, 2)"));
}

#[test]
fn prompts_writes_collections_the_matcher_reads() {
    let plain = gen(&[
        "prompts",
        "--prefix-groups",
        "2",
        "--per-group",
        "3",
        "--prefix-words",
        "20",
        "--suffix-words",
        "5",
    ]);
    let lines = rows(&plain);
    assert_eq!(lines.len(), 6);
    for (i, l) in lines.iter().enumerate() {
        let p = l["prompt"].as_str().unwrap();
        // "[group g]" (2 words) + 20 prefix words + 5 own words.
        assert_eq!(p.split(' ').count(), 27);
        let prefix: Vec<&str> = p.split(' ').take(22).collect();
        let first: Vec<&str> = lines[i / 3 * 3]["prompt"]
            .as_str()
            .unwrap()
            .split(' ')
            .take(22)
            .collect();
        assert_eq!(prefix, first, "a group shares its prefix");
    }
    let sessioned = gen(&["prompts", "--turns", "3", "--per-group", "2"]);
    for l in rows(&sessioned) {
        assert!(l["session_id"].is_string());
        assert_eq!(l["prompts"].as_array().unwrap().len(), 3);
    }
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["constant", "--qps", "0", "--num-requests", "5"][..],
        &["constant", "--qps", "1"],
        &[
            "constant",
            "--qps",
            "1",
            "--num-requests",
            "1",
            "--isl",
            "zipf:3",
        ],
        &[
            "constant",
            "--qps",
            "1",
            "--num-requests",
            "1",
            "--prompt-file",
            "x.jsonl",
        ],
        &["prefix", "--num-requests", "5", "--share-ratio", "1.5"],
    ] {
        let out = tool("mc-gen").args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn a_closed_pipe_ends_quietly_and_bad_prompt_files_name_the_line() {
    // `| head -1`: the reader goes away after one line.
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("mc-gen"))
        .args(["constant", "--qps", "100", "--num-requests", "5000000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));

    let dir = tempfile::tempdir().unwrap();
    let tok = word_tokenizer(dir.path());
    let bad = write_file(
        dir.path(),
        "bad.jsonl",
        "{\"prompt\": \"a b\"}\n{\"prompt\": 3}\n",
    );
    let out = tool("mc-gen")
        .args([
            "constant",
            "--qps",
            "1",
            "--num-requests",
            "1",
            "--prompt-file",
        ])
        .arg(&bad)
        .arg("--tokenizer")
        .arg(&tok)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.jsonl: line 2:"));
}

/// Every mode's `--help` ends with an example of that mode (the example
/// lives with the mode's options, so each mode's help is checked here).
#[test]
fn every_mode_help_shows_its_example() {
    for mode in [
        "constant",
        "synthetic",
        "stat",
        "prefix",
        "sessions",
        "agent",
        "from-trace",
        "prompts",
    ] {
        let out = tool("mc-gen").args([mode, "--help"]).output().unwrap();
        assert!(out.status.success(), "{mode} --help failed");
        let help = String::from_utf8_lossy(&out.stdout);
        let example = format!("Example:\n  mc-gen {mode} ");
        let examples = format!("Examples:\n  mc-gen {mode} ");
        assert!(
            help.contains(&example) || help.contains(&examples),
            "{mode} --help lacks its example:\n{help}"
        );
    }
}

/// Checks the agent graph in `out` with the core graph module, the one
/// checker every reader of rows applies (request ids unique, every
/// wait_for/branches id a row of the same session, no cycle), and every
/// row consistent at block size `b`. Returns each row's dependencies
/// (wait_for ∪ the rows whose branches list it) by id, and the rows by id.
fn check_graph(out: &str, b: u64) -> (HashMap<String, Vec<String>>, HashMap<String, Value>) {
    let g = Graphs::from_lines(out).unwrap_or_else(|e| panic!("{e}"));
    let id = |r: usize| g.request_id(r).expect("request_id").to_string();
    let mut by_id: HashMap<String, Value> = HashMap::new();
    let mut deps: HashMap<String, Vec<String>> = HashMap::new();
    for (r, v) in rows(out).into_iter().enumerate() {
        assert!(consistent(&v, b), "inconsistent row {v}");
        assert_eq!(g.kind(r), RowKind::Call, "{v}");
        let d = g.deps(r).iter().map(|&d| id(d as usize)).collect();
        deps.insert(id(r), d);
        by_id.insert(id(r), v);
    }
    // Roots carry a timestamp; every other row a delay and no timestamp.
    for (id, d) in &deps {
        let v = &by_id[id];
        assert_eq!(d.is_empty(), v.get("timestamp").is_some(), "{id}: {v}");
        assert_eq!(d.is_empty(), v.get("delay").is_none(), "{id}: {v}");
    }
    (deps, by_id)
}

#[test]
fn agent_graph_shapes_are_graphs_with_the_agents_prefixes() {
    let dir = tempfile::tempdir().unwrap();
    // 256-token system prompt (4 blocks of 64), 2 turns, 3 branches, tools
    // that fail once each (retry_probability 1, max_tool_retries 1).
    let cfg = write_file(
        dir.path(),
        "agent.json",
        &json!({"num_sessions": 3, "turns_per_session": 2, "parallel_tools": 3,
                "tool_latency_ms": 100, "retry_probability": 1.0, "max_tool_retries": 1,
                "initial_prompt_tokens": 256, "context_growth_tokens": 128,
                "tool_result_tokens": 64, "output_tokens": 32})
        .to_string(),
    );
    let cfg = cfg.to_str().unwrap();
    for (shape, per_turn) in [("tools", 5), ("sub-agents", 2 + 3 * 2), ("map-reduce", 5)] {
        let out = gen(&[
            "agent",
            "--graph",
            shape,
            "--config",
            cfg,
            "--block-size",
            "64",
            "--sub-agent-calls",
            "2",
            "--doc-tokens",
            "1000",
        ]);
        let (deps, by_id) = check_graph(&out, 64);
        assert_eq!(by_id.len(), 3 * 2 * per_turn, "{shape}");
        let sessions = by_session(&out);
        assert_eq!(sessions.len(), 3);
        for rows in &sessions {
            let first = ids(&rows[0]);
            assert_eq!(
                first.len(),
                4,
                "{shape}: the first plan is the system prompt"
            );
            for r in rows {
                // Every call starts with the session's system prompt.
                assert_eq!(ids(r)[..4], first[..], "{shape}: {r}");
                let id = r["request_id"].as_str().unwrap();
                let d = &deps[id];
                let isl = u(r, "input_length");
                let reset = r.get("prefix_reset") == Some(&json!(true));
                if r.get("tool_wait_ms").is_some() {
                    // One failure and one retry: two latencies of 100 ms.
                    assert_eq!(u(r, "tool_wait_ms"), 200, "{shape}: {r}");
                }
                match (shape, d.len()) {
                    // Plans: the root, or the next turn after the join.
                    (_, 0) => assert_eq!(isl, 256),
                    (_, 3) => {
                        // The join: the plan (256 or 384) and three results.
                        let extra = if shape == "map-reduce" {
                            3 * 32
                        } else {
                            3 * 64
                        };
                        assert!(isl == 256 + extra || isl == 384 + extra, "{shape}: {r}");
                        assert!(!reset);
                    }
                    (_, 1) => {
                        let dep = &by_id[&d[0]];
                        let dep_isl = u(dep, "input_length");
                        match shape {
                            "tools" if r.get("tool_wait_ms").is_some() => {
                                assert_eq!(isl, dep_isl + 64);
                                assert_eq!(
                                    ids(r)[..ids(dep).len()],
                                    ids(dep)[..],
                                    "extends the plan"
                                );
                                assert!(!reset);
                            }
                            "map-reduce" if r.get("tool_wait_ms").is_some() => {
                                assert_eq!(isl, 256 + 1000);
                                assert!(reset, "a map call starts fresh");
                            }
                            "sub-agents" if dep.get("branches").is_some() => {
                                // Spawned by the plan: fresh, the system prompt and its task.
                                assert_eq!(isl, 256 + 128);
                                assert!(reset);
                                assert!(r.get("wait_for").is_none());
                            }
                            "sub-agents" if r.get("tool_wait_ms").is_some() => {
                                // The chain's next call extends its own history.
                                assert_eq!(isl, dep_isl + 64);
                                assert_eq!(ids(r)[..ids(dep).len()], ids(dep)[..]);
                                assert!(!reset);
                            }
                            _ => {
                                // The next turn's plan: after the join and a think time.
                                assert_eq!(isl, 384);
                                assert!(u(r, "delay") <= 1000);
                            }
                        }
                    }
                    (_, n) => panic!("{shape}: {n} dependencies: {r}"),
                }
            }
        }
        // No id names two different blocks (mc-analyze at the rows' size).
        let a = run_ok("mc-analyze", &["--json", "--block-size", "64"], &out);
        let v: Value = serde_json::from_str(&a).unwrap();
        assert_eq!(v["blocks"]["conflicting_ids"]["count"], 0, "{shape}");
        assert_eq!(v["blocks"]["inconsistent_rows"]["count"], 0, "{shape}");
    }
}

#[test]
fn agent_graph_needs_mooncake_rows_and_checked_options() {
    for (args, needle) in [
        (
            &["agent", "--graph", "tools", "--format", "aibrix"][..],
            "--graph",
        ),
        (
            &["agent", "--graph", "sub-agents", "--sub-agent-calls", "0"][..],
            "--sub-agent-calls",
        ),
        (
            &[
                "agent",
                "--graph",
                "map-reduce",
                "--doc-tokens",
                "100000000",
            ][..],
            "--doc-tokens",
        ),
    ] {
        let o = tool("mc-gen").args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(needle),
            "{args:?}"
        );
    }
}

/// Issue 36: configs that hung or ran out of memory are refused at once,
/// naming the key and the limit (exit 65, as every bad key of a config
/// file). The timeout makes a hang fail instead of hanging the suite.
#[test]
fn agent_configs_beyond_the_limits_are_refused_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            json!({"num_sessions": 1, "parallel_tools": 1_000_000_000u64}),
            "parallel_tools 1000000000 is above the limit of 10000",
        ),
        (
            json!({"num_sessions": 1, "initial_prompt_tokens": 1_000_000_000_000_000u64}),
            "initial_prompt_tokens 1000000000000000 is above the limit of 10000000",
        ),
        (
            json!({"num_sessions": 1, "retry_probability": 1.0, "max_tool_retries": 1_000_000_000_000_000_000u64}),
            "max_tool_retries 1000000000000000000 is above the limit of 100",
        ),
        // Each key within its limit, their sum beyond it.
        (
            json!({"num_sessions": 1, "turns_per_session": 1000, "context_growth_tokens": 1_000_000}),
            "the last follow-up call",
        ),
        (
            json!({"num_sessions": 1_000_000, "turns_per_session": 1000, "parallel_tools": 10}),
            "above the limit of 1000000000 rows",
        ),
        (
            json!({"num_sessions": 1, "tool_latency_ms": [0, u64::MAX]}),
            "tool_latency_ms 18446744073709551615 is above the limit of 2^53 ms",
        ),
    ];
    for (k, (cfg, needle)) in cases.iter().enumerate() {
        let path = write_file(dir.path(), &format!("c{k}.json"), &cfg.to_string());
        for graph in [None, Some("sub-agents")] {
            let mut args = vec!["agent", "--config", path.to_str().unwrap()];
            args.extend(graph.map(|g| ["--graph", g]).into_iter().flatten());
            let o = tool("mc-gen")
                .args(&args)
                .timeout(std::time::Duration::from_secs(30))
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(65), "{cfg} {graph:?}: {err}");
            assert!(
                err.contains(needle) && err.contains(&format!("c{k}.json")),
                "{err}"
            );
            assert!(o.stdout.is_empty(), "{cfg}: nothing is written");
        }
    }
    // The same limit through --num-sessions (no config): a usage error.
    let o = tool("mc-gen")
        .args(["agent", "--num-sessions", "1000000000", "--graph", "tools"])
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("rows"));
}
