//! mc-analyze: AIPerf parity on the golden files, and every other section on
//! small traces whose expected values are worked out by hand in comments.

use serde_json::Value;

use schema::Report;

use crate::util::{data_dir, run_ok, tool};

/// `../shared/golden/aiperf-0.13.0/seven_rows.jsonl`.
const SEVEN_ROWS: &str = r#"{"timestamp":0,"input_length":1200,"output_length":52,"hash_ids":[0,1,2]}
{"timestamp":105,"input_length":1800,"output_length":26,"hash_ids":[0,3,4,5]}
{"timestamp":274,"input_length":1300,"output_length":52,"hash_ids":[1,4,6]}
{"timestamp":300,"input_length":2048,"output_length":10,"hash_ids":[0,1,7,8]}
{"timestamp":450,"input_length":700,"output_length":100,"hash_ids":[9,10]}
{"timestamp":600,"input_length":500,"output_length":5}
{"timestamp":800,"input_length":1100,"output_length":40,"hash_ids":[0,1,11]}
"#;

/// AIPerf 0.13.0's own `analyze-trace --output-file` for SEVEN_ROWS
/// (`analyze_seven_rows.json`), byte for byte.
const SEVEN_ROWS_AIPERF: &str = r#"{
  "total_requests": 7,
  "unique_prefixes": 14,
  "num_prefix_groups": 1,
  "cache_hit_rate": 0.3472222222222222,
  "min_isl": 500,
  "max_isl": 2048,
  "avg_isl": 1235.4285714285713,
  "min_osl": 5,
  "max_osl": 100,
  "avg_osl": 40.714285714285715,
  "prefix_reuse_ratio": 0.3684210526315789,
  "isl_stats": {
    "mean": 1235.4285714285713,
    "std_dev": 511.34524460844796,
    "min": 500.0,
    "p25": 900.0,
    "median": 1200.0,
    "p75": 1550.0,
    "max": 2048.0
  },
  "osl_stats": {
    "mean": 40.714285714285715,
    "std_dev": 29.773978503357043,
    "min": 5.0,
    "p25": 18.0,
    "median": 40.0,
    "p75": 52.0,
    "max": 100.0
  },
  "context_length_stats": {
    "mean": 512.0,
    "std_dev": 474.0198910835463,
    "min": 0.0,
    "p25": 0.0,
    "median": 512.0,
    "p75": 1024.0,
    "max": 1024.0
  },
  "unique_prompt_length_stats": {
    "mean": 723.4285714285714,
    "std_dev": 464.5781057330733,
    "min": 76.0,
    "p25": 338.0,
    "median": 700.0,
    "p75": 1156.0,
    "max": 1300.0
  },
  "hit_rate_stats": {
    "mean": 0.34722222222222215,
    "std_dev": 0.28225557545696633,
    "min": 0.0,
    "p25": 0.0625,
    "median": 0.375,
    "p75": 0.625,
    "max": 0.6666666666666666
  }
}"#;

/// The `--json` report as this test expects it, written here rather than
/// taken from the crate, so a renamed or added field fails the tests
/// instead of changing both sides (as ripgrep's tests/json.rs does).
/// Every field is listed to pin the schema; not every test reads each one.
#[allow(dead_code)]
mod schema {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Report {
        pub aiperf: Aiperf,
        pub input: Input,
        pub blocks: Blocks,
        pub cache: Cache,
        pub timing: Timing,
        pub sessions: Sessions,
        pub graphs: Graphs,
        pub lint: Lint,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Graphs {
        pub graph_rows: u64,
        pub plain_session_rows: u64,
        pub tasks: u64,
        pub calls_per_task: Option<Stats>,
        pub fan_out: Vec<u64>,
        pub max_fan_out: u64,
        pub depth: Option<Stats>,
        pub parallelism: Option<Stats>,
        pub peak_parallelism: u64,
        pub critical_path_share: Option<Stats>,
        pub critical_path_ms: Option<Stats>,
        pub think_ms: f64,
        pub tool_wait_ms: f64,
        pub prefix_resets: u64,
        pub first_problems: Vec<String>,
    }

    /// AIPerf's `analyze-trace` keys, in AIPerf's order (the parity test
    /// writes this back out and compares it with AIPerf's file).
    #[derive(Debug, Deserialize, Serialize)]
    #[serde(deny_unknown_fields)]
    pub struct Aiperf {
        pub total_requests: u64,
        pub unique_prefixes: u64,
        pub num_prefix_groups: u64,
        pub cache_hit_rate: f64,
        pub min_isl: f64,
        pub max_isl: f64,
        pub avg_isl: f64,
        pub min_osl: f64,
        pub max_osl: f64,
        pub avg_osl: f64,
        pub prefix_reuse_ratio: f64,
        pub isl_stats: Option<Stats>,
        pub osl_stats: Option<Stats>,
        pub context_length_stats: Option<Stats>,
        pub unique_prompt_length_stats: Option<Stats>,
        pub hit_rate_stats: Option<Stats>,
    }

    #[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
    #[serde(deny_unknown_fields)]
    pub struct Stats {
        pub mean: f64,
        pub std_dev: f64,
        pub min: f64,
        pub p25: f64,
        pub median: f64,
        pub p75: f64,
        pub max: f64,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Input {
        pub rows: u64,
        pub rows_with_ids: u64,
        pub blocks: u64,
        pub distinct_ids: u64,
        pub skipped_lines: u64,
        pub first_skipped_lines: Vec<u64>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Finding {
        pub count: u64,
        pub first_lines: Vec<u64>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Blocks {
        pub block_size: u64,
        pub detected: Option<u64>,
        pub feasible_min: Option<u64>,
        pub feasible_max: Option<u64>,
        pub inconsistent_rows: Finding,
        pub conflicting_ids: Finding,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Cache {
        pub order: String,
        pub input_tokens: f64,
        pub results: Vec<CacheResult>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct CacheResult {
        pub cache_blocks: Option<u64>,
        pub hit_tokens: f64,
        pub hit_rate: f64,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Timing {
        pub rows_with_timestamp: u64,
        pub sorted: bool,
        pub out_of_order: Finding,
        pub span_ms: Option<f64>,
        pub mean_rate_per_s: Option<f64>,
        pub peak_rate_1s: Option<f64>,
        pub peak_rate_10s: Option<f64>,
        pub inter_arrival_p50_ms: Option<f64>,
        pub inter_arrival_p99_ms: Option<f64>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Sessions {
        pub sessions: u64,
        pub rows_in_sessions: u64,
        pub rows_without_session: u64,
        pub turns_per_session: Option<Stats>,
        pub delay_ms: Option<Stats>,
        pub later_turns: u64,
        pub repeated_fraction: Option<Stats>,
        pub repeated_tokens_fraction: Option<f64>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Lint {
        pub negative_length: Finding,
        pub non_integer_length: Finding,
        pub duplicate_ids: Finding,
        pub not_prefix_shaped: Finding,
        pub missing_input_length: Finding,
        pub missing_output_length: Finding,
        pub missing_hash_ids: Finding,
        pub missing_timing: Finding,
        pub delay_over_an_hour: Finding,
        pub graph_unknown_id: Finding,
        pub graph_duplicate_id: Finding,
        pub graph_cycle: Finding,
        pub graph_other_session: Finding,
        pub graph_negative_delay: Finding,
    }
}

fn report(args: &[&str], input: &str) -> Report {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let text = run_ok("mc-analyze", &all, input);
    assert_eq!(text.lines().count(), 1, "--json writes one line");
    // Strict: every field as the test-side schema expects, no more.
    serde_json::from_str(&text).unwrap()
}

/// Every number of `ours` within 1e-12 relative of `want` (same keys, same order).
fn assert_close(ours: &str, want: &str) {
    let (a, b): (Value, Value) = (
        serde_json::from_str(ours).unwrap(),
        serde_json::from_str(want).unwrap(),
    );
    fn walk(a: &Value, b: &Value, path: &str) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                assert_eq!(
                    x.keys().collect::<Vec<_>>(),
                    y.keys().collect::<Vec<_>>(),
                    "keys at {path}"
                );
                for (k, v) in x {
                    walk(v, &y[k], &format!("{path}.{k}"));
                }
            }
            (Value::Number(x), Value::Number(y)) => {
                let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                assert!(
                    (x - y).abs() <= 1e-12 * y.abs().max(f64::MIN_POSITIVE),
                    "{path}: {x} vs {y}"
                );
            }
            _ => assert_eq!(a, b, "{path}"),
        }
    }
    walk(&a, &b, "");
}

#[test]
fn seven_rows_match_aiperf_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("aiperf.json");
    tool("mc-analyze")
        .arg("--output-file")
        .arg(&file)
        .write_stdin(SEVEN_ROWS)
        .assert()
        .code(0);
    let ours = std::fs::read_to_string(&file).unwrap();
    assert_close(&ours, SEVEN_ROWS_AIPERF);
    assert_eq!(ours, SEVEN_ROWS_AIPERF);
    // The same numbers in the `aiperf` section of --json.
    let r = report(&[], SEVEN_ROWS);
    assert_close(
        &serde_json::to_string(&r.aiperf).unwrap(),
        SEVEN_ROWS_AIPERF,
    );
}

#[test]
fn real_traces_match_aiperf_golden_files() {
    let Some(data) = data_dir("real_traces_match_aiperf_golden_files") else {
        return;
    };
    let golden = data.join("../golden/aiperf-0.13.0");
    for name in ["conversation_trace", "synthetic_trace"] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("out.json");
        tool("mc-analyze")
            .arg("--input")
            .arg(data.join("mooncake").join(format!("{name}.jsonl")))
            .arg("--output-file")
            .arg(&file)
            .assert()
            .code(0);
        let ours = std::fs::read_to_string(&file).unwrap();
        let want = std::fs::read_to_string(golden.join(format!("analyze_{name}.json"))).unwrap();
        assert_close(&ours, &want);
        assert_eq!(ours, want, "{name}: not byte-identical");
    }
}

#[test]
fn json_paths_are_stable_for_jq() {
    let text = run_ok("mc-analyze", &["--json"], SEVEN_ROWS);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["aiperf"]["cache_hit_rate"],
        serde_json::json!(0.3472222222222222)
    );
    assert_eq!(v["aiperf"]["total_requests"], 7);
    for section in [
        "aiperf", "input", "blocks", "cache", "timing", "sessions", "lint",
    ] {
        assert!(v[section].is_object(), "{section}");
    }
    assert_eq!(v["blocks"]["block_size"], 512);
    assert_eq!(v["cache"]["results"][0]["cache_blocks"], Value::Null);
}

#[test]
fn empty_input_gives_null_stats() {
    let r = report(&[], "");
    assert_eq!(r.aiperf.total_requests, 0);
    assert_eq!(r.aiperf.isl_stats, None);
    assert_eq!(r.aiperf.hit_rate_stats, None);
    assert_eq!((r.aiperf.min_isl, r.aiperf.cache_hit_rate), (0.0, 0.0));
    assert_eq!(r.blocks.detected, None);
    assert_eq!(r.timing.span_ms, None);
}

#[test]
fn block_size_check() {
    // Row 1: 2 ids, 7 tokens: (2-1)B < 7 <= 2B -> B in [4, 6].
    // Row 2: 3 ids, 9 tokens: 2B < 9 <= 3B -> B in [3, 4].
    // Together B = 4: the detected power of two.
    let rows = "{\"input_length\": 7, \"hash_ids\": [1, 2]}\n{\"input_length\": 9, \"hash_ids\": [1, 3, 4]}\n";
    let r = report(&["--block-size", "auto"], rows);
    assert_eq!(
        (
            r.blocks.feasible_min,
            r.blocks.feasible_max,
            r.blocks.detected
        ),
        (Some(4), Some(4), Some(4))
    );
    assert_eq!(r.blocks.block_size, 4);
    assert_eq!(r.blocks.inconsistent_rows.count, 0);
    // At B = 8: row 1 needs 8 < 7 (no), row 2 needs 16 < 9 (no): both inconsistent.
    let r = report(&["--block-size", "8"], rows);
    assert_eq!(r.blocks.inconsistent_rows.count, 2);
    assert_eq!(r.blocks.inconsistent_rows.first_lines, vec![1, 2]);

    // Id 5 is a partial last block of 3 tokens in row 1 and a full block in
    // row 2 (B = 4): one id at two sizes, first seen at line 2. No single B
    // fits both rows... row 1 (2 ids, 7): [4, 6]; row 2 (3 ids, 12): [4, 5].
    let conflict = "{\"input_length\": 7, \"hash_ids\": [1, 5]}\n{\"input_length\": 12, \"hash_ids\": [1, 5, 6]}\n";
    let r = report(&["--block-size", "4"], conflict);
    assert_eq!(r.blocks.conflicting_ids.count, 1);
    assert_eq!(r.blocks.conflicting_ids.first_lines, vec![2]);
    assert_eq!(r.blocks.inconsistent_rows.count, 0);
}

#[test]
fn cache_model_is_causal_and_token_weighted() {
    // B = 4. Row 1: [1,2,3] 12 tokens, all misses. Row 2: [1,2,4] 11 tokens:
    // 1 and 2 hit (8 tokens), 4 misses. Row 3: [9,1] 6 tokens: 9 misses, so
    // 1 cannot hit (prefix semantics). Row 4: [1,2,3] 10 tokens: all three
    // seen; hits 4 + 4 + 2 = 10 tokens.
    // Infinite: (8 + 10) / (12 + 11 + 6 + 10) = 18 / 39.
    // LRU of 3 blocks: after row 1 {1,2,3}; row 2 hits 1,2 (8), inserts 4,
    // evicting 3 -> {4,2,1}; row 3 inserts 9 and 1 -> {1,9,4}, 2 evicted;
    // row 4: 1 hits (4 tokens), 2 misses -> 4 / 39... total hits 8 + 4 = 12.
    let rows = "{\"input_length\": 12, \"hash_ids\": [1, 2, 3]}\n{\"input_length\": 11, \"hash_ids\": [1, 2, 4]}\n{\"input_length\": 6, \"hash_ids\": [9, 1]}\n{\"input_length\": 10, \"hash_ids\": [1, 2, 3]}\n";
    let r = report(&["--block-size", "4", "--cache-blocks", "3"], rows);
    assert_eq!(r.cache.input_tokens, 39.0);
    assert_eq!(r.cache.results.len(), 2);
    assert_eq!(
        (
            r.cache.results[0].cache_blocks,
            r.cache.results[0].hit_tokens
        ),
        (None, 18.0)
    );
    assert_eq!(r.cache.results[0].hit_rate, 18.0 / 39.0);
    assert_eq!(
        (
            r.cache.results[1].cache_blocks,
            r.cache.results[1].hit_tokens
        ),
        (Some(3), 12.0)
    );
}

#[test]
fn cache_model_in_timestamp_order() {
    // File order [1,2] at t=100 then [1,2] at t=0: in timestamp order the
    // second line comes first and the first line hits both blocks (8 of 8).
    let rows = "{\"timestamp\": 100, \"input_length\": 8, \"hash_ids\": [1, 2]}\n{\"timestamp\": 0, \"input_length\": 8, \"hash_ids\": [1, 2]}\n";
    let r = report(
        &[
            "--block-size",
            "4",
            "--order",
            "timestamp",
            "--cache-blocks",
            "10",
        ],
        rows,
    );
    assert_eq!(r.cache.results[0].hit_tokens, 8.0);
    assert_eq!(r.cache.results[1].hit_tokens, 8.0);
    assert!(!r.timing.sorted);
    assert_eq!(r.timing.out_of_order.first_lines, vec![2]);
}

#[test]
fn timing() {
    // Arrivals 0, 500, 1200, 1300, 5000 ms: span 5 s, mean 5 / 5 s = 1/s.
    // Most in a 1 s window: [500, 1500) holds 3 -> 3/s; 10 s: all 5 -> 0.5/s.
    // Gaps 500, 700, 100, 3700 sorted 100, 500, 700, 3700: p50 at k = 1.5 is
    // 600; p99 at k = 2.97 is 3700 - 0.03 * 3000 = 3610.
    let rows: String = [0, 500, 1200, 1300, 5000]
        .iter()
        .map(|t| format!("{{\"timestamp\": {t}}}\n"))
        .collect();
    let t = report(&[], &rows).timing;
    assert_eq!(t.rows_with_timestamp, 5);
    assert!(t.sorted);
    assert_eq!(t.span_ms, Some(5000.0));
    assert_eq!(t.mean_rate_per_s, Some(1.0));
    assert_eq!(t.peak_rate_1s, Some(3.0));
    assert_eq!(t.peak_rate_10s, Some(0.5));
    assert_eq!(t.inter_arrival_p50_ms, Some(600.0));
    assert!((t.inter_arrival_p99_ms.unwrap() - 3610.0).abs() < 1e-9);
}

#[test]
fn sessions() {
    // B = 4. Session a: [0,1] 8 tokens, then [0,1,2] 10 tokens (delay 100),
    // then [0,1,2,3] 13 tokens (delay 300). Session b: [7] 3, then [8,9] 6
    // (delay 50). One row without a session.
    // Later turns repeat 2 blocks (8 of 10 tokens), 3 blocks (12 of 13) and
    // nothing (0 of 6): fractions 0.8, 12/13, 0; by tokens 20 / 29.
    let rows = r#"{"session_id": "a", "timestamp": 0, "input_length": 8, "hash_ids": [0, 1]}
{"session_id": "b", "timestamp": 5, "input_length": 3, "hash_ids": [7]}
{"session_id": "a", "delay": 100, "input_length": 10, "hash_ids": [0, 1, 2]}
{"timestamp": 9, "input_length": 4, "hash_ids": [20]}
{"session_id": "b", "delay": 50, "input_length": 6, "hash_ids": [8, 9]}
{"session_id": "a", "delay": 300, "input_length": 13, "hash_ids": [0, 1, 2, 3]}
"#;
    let s = report(&["--block-size", "4"], rows).sessions;
    assert_eq!(
        (
            s.sessions,
            s.rows_in_sessions,
            s.rows_without_session,
            s.later_turns
        ),
        (2, 5, 1, 3)
    );
    let turns = s.turns_per_session.unwrap();
    assert_eq!((turns.mean, turns.min, turns.max), (2.5, 2.0, 3.0));
    let delay = s.delay_ms.unwrap();
    assert_eq!((delay.mean, delay.median, delay.max), (150.0, 100.0, 300.0));
    let f = s.repeated_fraction.unwrap();
    assert_eq!((f.min, f.median, f.max), (0.0, 0.8, 12.0 / 13.0));
    assert_eq!(s.repeated_tokens_fraction, Some(20.0 / 29.0));
}

#[test]
fn lint() {
    let rows = r#"{"timestamp": 0, "input_length": -5, "output_length": 1, "hash_ids": [1]}
{"timestamp": 1, "input_length": 12.5, "output_length": 2, "hash_ids": [2]}
{"timestamp": 2, "input_length": 8, "output_length": 3, "hash_ids": [3, 3]}
{"timestamp": 3, "input_length": 8, "output_length": 4, "hash_ids": [4, 1]}
{"input_length": 8}
{"session_id": "s", "delay": 3600000, "input_length": 4, "output_length": 1, "hash_ids": [5]}
{"session_id": "s", "delay": 3600001, "input_length": 4, "output_length": 1, "hash_ids": [5]}
"#;
    let l = report(&["--block-size", "4"], rows).lint;
    // An hour exactly is not over it; a ms more is.
    assert_eq!(l.delay_over_an_hour.first_lines, vec![7]);
    assert_eq!(l.negative_length.first_lines, vec![1]);
    assert_eq!(l.non_integer_length.first_lines, vec![2]);
    assert_eq!(l.duplicate_ids.first_lines, vec![3]);
    // Row 4: 4 is new, then 1 (used by row 1) follows it.
    assert_eq!(l.not_prefix_shaped.first_lines, vec![4]);
    assert_eq!(l.missing_output_length.first_lines, vec![5]);
    assert_eq!(l.missing_hash_ids.first_lines, vec![5]);
    assert_eq!(l.missing_timing.first_lines, vec![5]);
    assert_eq!(l.missing_input_length.count, 0);
    assert_eq!(l.delay_over_an_hour.count, 1);
}

#[test]
fn pass_mode_tees_records_and_reports_on_stderr() {
    let out = tool("mc-analyze")
        .args(["--pass", "--json"])
        .write_stdin(SEVEN_ROWS)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), SEVEN_ROWS);
    let r: Report = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(r.aiperf.total_requests, 7);
}

#[test]
fn text_report_has_the_aiperf_section_first() {
    let text = run_ok::<&str>("mc-analyze", &[], SEVEN_ROWS);
    assert!(text.starts_with("AIPerf analyze-trace (block size 512)\n"));
    assert!(text.contains("  total requests           7\n"), "{text}");
    assert!(text.contains("1,235.43"));
    let sections: Vec<usize> = [
        "AIPerf",
        "Block size",
        "Prefix cache model",
        "Timing",
        "Sessions",
        "Lint",
        "Input",
    ]
    .iter()
    .map(|s| text.find(s).unwrap())
    .collect();
    assert!(sections.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn bad_lines_fail_or_are_counted() {
    let input = format!("{}not json\n{{\"hash_ids\": \"x\"}}\n", SEVEN_ROWS);
    tool("mc-analyze")
        .write_stdin(input.clone())
        .assert()
        .code(65)
        .stderr("mc-analyze: line 8: expected a JSON object, found `not json` at byte 1\n");
    let r = report(&["--on-error", "skip"], &input);
    assert_eq!(r.aiperf.total_requests, 7);
    assert_eq!(
        (r.input.skipped_lines, r.input.first_skipped_lines.clone()),
        (2, vec![8, 9])
    );
}

/// The whole text report for the seven rows, as a snapshot. The AIPerf
/// numbers are those of AIPerf's own file above (rounded for print); the
/// block check (1200 tokens in 3 ids and 2048 in 4 allow exactly 512), the
/// timing (7 rows over 0.8 s) and the lint counts were checked by hand.
#[test]
fn text_report_snapshot() {
    let text = run_ok::<&str>("mc-analyze", &[], SEVEN_ROWS);
    insta::assert_snapshot!("analyze_seven_rows_text", text);
}

/// A small seeded generator (SplitMix64), so each seed is one trace.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

/// Rows shaped like Mooncake's (an earlier row's prefix, then a run of
/// fresh ids) mixed with the irregular ones the compact id table must get
/// right: small random ids (repeats in a row, ids under two parents or at
/// two positions), far ids, rows without ids; sessions on some rows; every
/// length consistent with blocks of 4.
fn seeded_rows(seed: u64) -> Vec<Vec<u64>> {
    let mut g = Lcg(seed);
    let mut rows: Vec<Vec<u64>> = Vec::new();
    let mut next = 100u64;
    for _ in 0..(20 + g.below(200)) {
        let ids = match g.below(10) {
            0..=5 => {
                let mut ids = match rows.len() {
                    0 => vec![0],
                    n => {
                        let base = &rows[g.below(n as u64) as usize];
                        base[..g.below(base.len() as u64 + 1) as usize].to_vec()
                    }
                };
                for _ in 0..1 + g.below(80) {
                    ids.push(next);
                    next += 1;
                }
                ids
            }
            6 | 7 => (0..1 + g.below(6)).map(|_| g.below(30)).collect(),
            8 => (0..1 + g.below(4))
                .map(|k| (1 << 60) + k * g.below(3))
                .collect(),
            _ => Vec::new(),
        };
        rows.push(ids);
    }
    rows
}

/// AIPerf's algorithm, written the plain way: a set of prefix tuples, a
/// count per (position, id), a set of ids seen so far.
struct Naive {
    unique_prefixes: u64,
    reused_visits: u64,
    blocks: u64,
    distinct_ids: u64,
    hit_rate_mean: f64,
    context_max: f64,
    duplicate_rows: u64,
    not_prefix_rows: u64,
}

fn naive(rows: &[Vec<u64>], lens: &[u64], b: u64) -> Naive {
    use std::collections::{HashMap, HashSet};
    let mut prefixes: HashMap<&[u64], u64> = HashMap::new();
    let mut pairs: HashMap<(usize, u64), u64> = HashMap::new();
    let mut seen: HashSet<u64> = HashSet::new();
    let (mut hit_rates, mut dup, mut not_prefix) = (Vec::new(), 0, 0);
    for ids in rows {
        for k in 0..ids.len() {
            *prefixes.entry(&ids[..=k]).or_insert(0) += 1;
            *pairs.entry((k, ids[k])).or_insert(0) += 1;
        }
        if ids.is_empty() {
            continue;
        }
        let first_unseen = ids
            .iter()
            .position(|i| !seen.contains(i))
            .unwrap_or(ids.len());
        hit_rates.push(first_unseen as f64 / ids.len() as f64);
        let mut in_row = HashSet::new();
        let (mut d, mut np) = (false, false);
        for (k, id) in ids.iter().enumerate() {
            if !in_row.insert(id) {
                d = true;
            } else if seen.contains(id) && k > first_unseen {
                np = true;
            }
        }
        dup += u64::from(d);
        not_prefix += u64::from(np);
        seen.extend(ids.iter().copied());
    }
    let context_max = rows
        .iter()
        .zip(lens)
        .filter(|(ids, _)| !ids.is_empty())
        .map(|(ids, &len)| {
            let rep = (0..ids.len()).filter(|&k| pairs[&(k, ids[k])] > 1).count();
            if rep == ids.len() {
                len as f64
            } else {
                (rep as u64 * b) as f64
            }
        })
        .fold(0.0, f64::max);
    Naive {
        unique_prefixes: prefixes.len() as u64,
        reused_visits: prefixes.values().filter(|&&c| c > 1).sum(),
        blocks: rows.iter().map(|r| r.len() as u64).sum(),
        distinct_ids: seen.len() as u64,
        hit_rate_mean: hit_rates.iter().sum::<f64>() / hit_rates.len().max(1) as f64,
        context_max,
        duplicate_rows: dup,
        not_prefix_rows: not_prefix,
    }
}

/// The compact id table and row store, end to end, against the plain
/// algorithm on seeded traces (block size auto, sessions on some rows, a
/// bad line skipped and named).
#[test]
fn statistics_match_the_plain_algorithm_across_seeds() {
    for seed in 0..24 {
        let rows = seeded_rows(seed);
        let mut g = Lcg(seed ^ 0xabc);
        let mut lens = Vec::new();
        let mut text = String::new();
        let bad = 1 + g.below(rows.len() as u64);
        for (i, ids) in rows.iter().enumerate() {
            if i as u64 + 1 == bad {
                text.push_str("{\"hash_ids\": [1,\n");
            }
            // Consistent with blocks of 4: (n - 1) * 4 < len <= n * 4.
            let len = (ids.len() as u64).saturating_sub(1) * 4 + 1 + g.below(4);
            lens.push(len);
            let session = match g.below(3) {
                0 => format!("\"session_id\": \"s{}\", ", g.below(5)),
                _ => String::new(),
            };
            let ids_field = match ids.is_empty() {
                true => String::new(),
                false => format!(", \"hash_ids\": {ids:?}"),
            };
            text.push_str(&format!(
                "{{{session}\"timestamp\": {i}, \"input_length\": {len}, \"output_length\": 3{ids_field}}}\n"
            ));
        }
        let r = report(&["--on-error", "skip"], &text);
        let want = naive(&rows, &lens, 4);
        let ctx = format!("seed {seed}");
        assert_eq!(
            (r.input.skipped_lines, r.input.first_skipped_lines.clone()),
            (1, vec![bad]),
            "{ctx}"
        );
        assert_eq!(r.aiperf.total_requests, rows.len() as u64, "{ctx}");
        if rows.iter().any(|ids| ids.len() > 1) {
            assert_eq!(
                (r.blocks.detected, r.blocks.block_size),
                (Some(4), 4),
                "{ctx}"
            );
        }
        assert_eq!(r.aiperf.unique_prefixes, want.unique_prefixes, "{ctx}");
        assert_eq!(r.input.blocks, want.blocks, "{ctx}");
        assert_eq!(r.input.distinct_ids, want.distinct_ids, "{ctx}");
        let ratio = want.reused_visits as f64 / want.blocks.max(1) as f64;
        assert_eq!(r.aiperf.prefix_reuse_ratio, ratio, "{ctx}");
        assert!(
            (r.aiperf.cache_hit_rate - want.hit_rate_mean).abs() < 1e-12,
            "{ctx}"
        );
        let max_ctx = r.aiperf.context_length_stats.map_or(0.0, |s| s.max);
        assert_eq!(max_ctx, want.context_max, "{ctx}");
        assert_eq!(r.lint.duplicate_ids.count, want.duplicate_rows, "{ctx}");
        assert_eq!(
            r.lint.not_prefix_shaped.count, want.not_prefix_rows,
            "{ctx}"
        );
    }
}

/// A trace of `n` rows for the parallel reader: shared prefixes and fresh
/// runs of ids (the id table's order matters), sessions whose turns land in
/// different chunks, delays, and a row without ids or timestamp now and then.
fn parallel_trace(n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        let blocks = 1 + (i * 7) % 30;
        let ids: Vec<String> = (0..blocks)
            .map(|b| match b {
                0..=2 => (i % 13 * 3 + b).to_string(),
                _ => (1000 + i * 40 + b).to_string(),
            })
            .collect();
        let len = blocks * 16 - (i % 16);
        s.push('{');
        if i % 11 != 0 {
            s.push_str(&format!("\"timestamp\": {}, ", i * 37 - (i % 4) * 5));
        }
        s.push_str(&format!(
            "\"input_length\": {len}, \"output_length\": {}",
            1 + i % 300
        ));
        if i % 17 != 0 {
            s.push_str(&format!(", \"hash_ids\": [{}]", ids.join(", ")));
        }
        if i % 3 == 0 {
            s.push_str(&format!(", \"session_id\": \"s{}\"", i % 97));
        }
        if i % 5 == 0 {
            s.push_str(&format!(", \"delay\": {}.5", i % 700));
        }
        s.push_str("}\n");
    }
    s
}

/// `input` with `line` put in as line `at` (1-based) of the result.
fn line_at(input: &str, at: usize, line: &str) -> String {
    let mut lines: Vec<&str> = input.lines().collect();
    lines.insert(at - 1, line);
    lines.join("\n") + "\n"
}

#[test]
fn the_parallel_reader_gives_the_one_thread_report_whatever_the_chunk_edges() {
    // `--line-buffered` takes the one-thread reader: the reference.
    let input = parallel_trace(6000);
    assert!(input.len() > 1 << 20, "{} bytes", input.len());
    let sizes = [None, Some(1), Some(4096), Some(65_537)];
    let out = crate::chunked::same_as_in_order("mc-analyze", &["--json"], input.as_bytes(), &sizes);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["input"]["rows"], 6000);
    assert!(report["sessions"]["later_turns"].as_u64().unwrap() > 0);
    let text = crate::chunked::same_as_in_order("mc-analyze", &[], input.as_bytes(), &sizes);
    assert_eq!(text.code, Some(0), "{}", text.stderr);
}

#[test]
fn the_parallel_reader_skips_and_stops_at_the_lines_the_one_thread_reader_does() {
    let good = parallel_trace(300);
    // Bad lines, an id too large, a too-long line and blank lines, some on
    // a chunk edge for each of the chunk sizes.
    let mut input = good.clone();
    for at in [1, 3, 50, 51, 200] {
        input = line_at(&input, at, "not json");
    }
    input = line_at(
        &input,
        120,
        "{\"input_length\": 5, \"hash_ids\": [9223372036854775808]}",
    );
    input = line_at(&input, 100, "");
    input = line_at(&input, 101, "   ");
    input = line_at(
        &input,
        250,
        &format!("{{\"pad\": \"{}\"}}", "x".repeat(3000)),
    );
    let sizes: Vec<Option<usize>> = [None, Some(1), Some(700)]
        .into_iter()
        .chain((1..400).step_by(61).map(Some))
        .collect();
    let args = ["--json", "--on-error", "skip", "--max-line-bytes", "2000"];
    let out = crate::chunked::same_as_in_order("mc-analyze", &args, input.as_bytes(), &sizes);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["input"]["skipped_lines"], 7, "{}", out.stderr);
    assert_eq!(report["input"]["rows"], 300);
    // Without skip: the first bad line stops the run, named the same.
    let out = crate::chunked::same_as_in_order("mc-analyze", &["--json"], input.as_bytes(), &sizes);
    assert_eq!(out.code, Some(65));
    assert!(out.stderr.contains("line 1: "), "{}", out.stderr);
    let late = line_at(&good, 250, "{\"timestamp\": ");
    let out = crate::chunked::same_as_in_order("mc-analyze", &[], late.as_bytes(), &sizes);
    assert_eq!(out.code, Some(65));
    assert!(out.stderr.contains("line 250: "), "{}", out.stderr);
}

#[test]
fn the_parallel_reader_keeps_the_first_line_rules_across_chunk_edges() {
    // Leading blank lines over several chunks, then a BOM: stripped on the
    // first non-blank line only; a JSON array after blank lines is named.
    let input = format!("\n  \n\n\u{feff}{}", parallel_trace(40));
    let sizes = [Some(1), Some(3), None];
    let out = crate::chunked::same_as_in_order("mc-analyze", &["--json"], input.as_bytes(), &sizes);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let array = "\n\n\n[{\"timestamp\": 1}]\n";
    let out = crate::chunked::same_as_in_order("mc-analyze", &[], array.as_bytes(), &sizes);
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr.contains("line 4: this is a JSON array"),
        "{}",
        out.stderr
    );
}

/// Agent graphs: one task of five calls, a plain session and a lone row.
const AGENT: &str = r#"{"session_id":"s","timestamp":0,"request_id":"root","branches":["b"],"input_length":8,"output_length":1,"hash_ids":[0]}
{"session_id":"s","request_id":"a","wait_for":["root"],"delay":10,"tool_wait_ms":7,"input_length":8,"output_length":1,"hash_ids":[1]}
{"session_id":"s","request_id":"b","delay":20,"tool_wait_ms":300,"input_length":8,"output_length":1,"hash_ids":[2]}
{"session_id":"s","request_id":"c","wait_for":["root"],"delay":5,"input_length":8,"output_length":1,"hash_ids":[3]}
{"session_id":"s","request_id":"join","wait_for":["a","b","c"],"delay":1,"prefix_reset":true,"input_length":8,"output_length":1,"hash_ids":[4]}
{"session_id":"p","timestamp":50,"input_length":8,"output_length":1,"hash_ids":[5]}
{"session_id":"p","delay":100,"input_length":8,"output_length":1,"hash_ids":[6]}
{"timestamp":70,"input_length":8,"output_length":1,"hash_ids":[7]}
"#;

#[test]
fn agent_graphs_by_hand() {
    let g = report(&[], AGENT).graphs;
    assert_eq!((g.graph_rows, g.plain_session_rows, g.tasks), (5, 2, 1));
    assert_eq!(g.calls_per_task.unwrap().max, 5.0);
    // root has 3 dependents (a, b through its branches, c); a, b, c one
    // each (join); join none.
    assert_eq!(g.fan_out, vec![1, 3, 0, 1]);
    assert_eq!(g.max_fan_out, 3);
    // root → a|b|c → join.
    assert_eq!(g.depth.unwrap().max, 3.0);
    assert_eq!(g.peak_parallelism, 3);
    // Gaps (delay + tool_wait_ms): root 0 (timestamped), a 17, b 320,
    // c 5, join 1; total 343. Longest chain root → b → join: 321.
    assert_eq!(g.critical_path_ms.unwrap().max, 321.0);
    let share = g.critical_path_share.unwrap();
    assert!((share.mean - 321.0 / 343.0).abs() < 1e-12, "{share:?}");
    assert_eq!((g.think_ms, g.tool_wait_ms), (36.0, 307.0));
    assert_eq!(g.prefix_resets, 1);
    assert!(g.first_problems.is_empty());
    let text = run_ok("mc-analyze", &[] as &[&str], AGENT);
    assert!(text.contains("\nAgent graphs"), "{text}");
    assert!(text.contains("graph: cycle"), "{text}");
    // A plain trace's report has no graph section.
    let plain = run_ok("mc-analyze", &[] as &[&str], SEVEN_ROWS);
    assert!(!plain.contains("Agent graphs") && !plain.contains("graph:"));
}

#[test]
fn graph_checks_are_lint_findings() {
    let bad = r#"{"session_id":"s","request_id":"x","wait_for":["y"],"input_length":1,"output_length":1}
{"session_id":"s","request_id":"y","wait_for":["x"],"input_length":1,"output_length":1}
{"session_id":"s","request_id":"z","wait_for":["nope"],"input_length":1,"output_length":1}
{"session_id":"t","request_id":"z","input_length":1,"output_length":1}
{"session_id":"t","request_id":"w","wait_for":["x"],"delay":-2,"input_length":1,"output_length":1}
"#;
    let r = report(&[], bad);
    let l = &r.lint;
    assert_eq!(
        (l.graph_cycle.count, l.graph_cycle.first_lines.clone()),
        (1, vec![1])
    );
    assert_eq!(l.graph_unknown_id.first_lines, vec![3]);
    assert_eq!(l.graph_duplicate_id.first_lines, vec![4]);
    assert_eq!(l.graph_other_session.first_lines, vec![5]);
    assert_eq!(l.graph_negative_delay.first_lines, vec![5]);
    assert_eq!(
        r.graphs.first_problems[0],
        "line 1: fields `wait_for`/`branches`: the calls `x` → `y` → `x` wait for each other \
         (a cycle, lines 1, 2): remove one of these edges"
    );
    let text = run_ok("mc-analyze", &[] as &[&str], bad);
    assert!(text.contains("graph: unknown request id"), "{text}");
}
