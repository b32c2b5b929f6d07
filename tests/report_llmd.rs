//! `mc-report --format llm-d`: a run as llm-d-benchmark's benchmark report
//! (schema v0.2.1). The numbers are checked against mc-report's own JSON
//! and against lengths worked out by hand from the trace; the whole
//! report against the schema itself (needs `MCTRACE_DATA`).

use std::path::Path;

use serde_json::{json, Value};

use crate::replay::Mock;
use crate::util::{data_dir, lines, run_code, run_ok_both, tool};

/// Two sessions of two turns and two single rows. Prompt lengths 600, 300,
/// 900, 40, 700, 100: mean 440, population variance 600000 / 6 = 100000;
/// sorted 40 100 300 600 700 900, so the nearest-rank p50 is 300. Answer
/// lengths 12, 8, 6, 1, 9, 20: mean 56 / 6.
fn trace() -> String {
    lines(&[
        json!({"session_id": "a", "timestamp": 0, "input_length": 600, "output_length": 12, "hash_ids": [1, 2]}),
        json!({"session_id": "b", "timestamp": 30, "input_length": 300, "output_length": 8, "hash_ids": [3]}),
        json!({"session_id": "a", "delay": 10, "input_length": 900, "output_length": 6, "hash_ids": [1, 2]}),
        json!({"timestamp": 60, "input_length": 40, "output_length": 1}),
        json!({"session_id": "b", "delay": 5, "input_length": 700, "output_length": 9, "hash_ids": [3, 4]}),
        json!({"timestamp": 90, "input_length": 100, "output_length": 20}),
    ])
}

/// mc-replay on the engine model (virtual time: the same numbers on
/// every machine) with `args`, results in `dir/engine.jsonl`.
fn engine_run(dir: &Path, args: &[&str]) -> std::path::PathBuf {
    let out = dir.join("engine.jsonl");
    let ran = tool("mc-replay")
        .arg("-o")
        .arg(&out)
        .args(args)
        .write_stdin(trace())
        .output()
        .unwrap();
    assert!(ran.status.success(), "{ran:?}");
    out
}

fn report(results: &Path, format: &[&str]) -> Value {
    let mut args: Vec<&str> = format.to_vec();
    let path = results.to_str().unwrap();
    args.push(path);
    let (out, _) = run_ok_both("mc-report", &args, "");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn close(a: &Value, b: f64) {
    let a = a.as_f64().unwrap_or_else(|| panic!("{a} is not a number"));
    assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{a} vs {b}");
}

#[test]
fn the_report_holds_the_runs_numbers_in_the_schemas_units() {
    let dir = tempfile::tempdir().unwrap();
    let results = engine_run(dir.path(), &["--rate", "5"]);
    let summary = report(&results, &["--json"]);
    let br = report(&results, &["--format", "llm-d"]);
    assert_eq!(br["version"], "0.2.1");

    // Latencies: mc-replay's ms as seconds (s, and s/token per token).
    let lat = &br["results"]["request_performance"]["aggregate"]["latency"];
    let m = &summary["metrics"];
    for (name, ours, units) in [
        ("time_to_first_token", "ttft", "s"),
        ("time_per_output_token", "tpot", "s/token"),
        ("inter_token_latency", "itl", "s/token"),
        ("request_latency", "e2e", "s"),
    ] {
        assert_eq!(lat[name]["units"], units, "{name}");
        for (theirs, mine) in [
            ("mean", "mean"),
            ("stddev", "std"),
            ("min", "min"),
            ("p50", "p50"),
            ("p90", "p90"),
            ("p95", "p95"),
            ("p99", "p99"),
            ("p99p9", "p99_9"),
            ("max", "max"),
        ] {
            let ms = m[ours][mine].as_f64().unwrap();
            close(&lat[name][theirs], ms / 1000.0);
        }
    }
    // A TTFT of tens of ms is hundredths of a second, not thousands.
    let ttft = lat["time_to_first_token"]["p50"].as_f64().unwrap();
    assert!(ttft > 0.0 && ttft < 1.0, "{ttft}");

    // NTPOT: each request's E2E over its output tokens, in s/token.
    let lines: Vec<Value> = std::fs::read_to_string(&results)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut ntpot: Vec<f64> = lines
        .iter()
        .map(|r| r["e2e_ms"].as_f64().unwrap() / 1000.0 / r["completion_tokens"].as_f64().unwrap())
        .collect();
    ntpot.sort_by(f64::total_cmp);
    let nt = &lat["normalized_time_per_output_token"];
    assert_eq!(nt["units"], "s/token");
    close(&nt["min"], ntpot[0]);
    close(&nt["max"], ntpot[5]);
    close(&nt["p50"], ntpot[2]);
    close(&nt["mean"], ntpot.iter().sum::<f64>() / 6.0);

    // Requests and lengths, from the trace by hand.
    let req = &br["results"]["request_performance"]["aggregate"]["requests"];
    assert_eq!(
        (&req["total"], &req["failures"], &req["incomplete"]),
        (&json!(6), &json!(0), &json!(0))
    );
    let inl = &req["input_length"];
    assert_eq!(inl["units"], "count");
    close(&inl["mean"], 440.0);
    close(&inl["stddev"], 100_000f64.sqrt());
    close(&inl["p50"], 300.0);
    close(&inl["min"], 40.0);
    close(&inl["max"], 900.0);
    close(&req["output_length"]["mean"], 56.0 / 6.0);
    close(&req["output_length"]["p90"], 20.0);

    // Rates: mc-replay's, total = input + output.
    let tp = &br["results"]["request_performance"]["aggregate"]["throughput"];
    let (i, o) = (
        summary["input_token_throughput"].as_f64().unwrap(),
        summary["output_token_throughput"].as_f64().unwrap(),
    );
    close(&tp["input_token_rate"]["mean"], i);
    close(&tp["output_token_rate"]["mean"], o);
    close(&tp["total_token_rate"]["mean"], i + o);
    assert_eq!(tp["total_token_rate"]["units"], "tokens/s");
    close(
        &tp["request_rate"]["mean"],
        summary["request_throughput"].as_f64().unwrap(),
    );
    assert_eq!(tp["request_rate"]["units"], "queries/s");

    // The load as mc-replay ran it.
    let load = &br["scenario"]["load"];
    let std = &load["standardized"];
    assert_eq!(
        (&std["tool"], &std["source"]),
        (&json!("mc-replay"), &json!("random"))
    );
    assert_eq!(std["tool_version"], summary["run"]["version"]);
    close(&std["rate_qps"], 5.0);
    assert_eq!(std["input_seq_len"]["distribution"], "other");
    close(&std["input_seq_len"]["value"], 440.0);
    close(&std["input_seq_len"]["std_dev"], 100_000f64.sqrt());
    assert_eq!(
        (&std["input_seq_len"]["min"], &std["input_seq_len"]["max"]),
        (&json!(40), &json!(900))
    );
    // The engine model answers exactly the lengths asked for.
    close(&std["output_seq_len"]["value"], 56.0 / 6.0);
    assert_eq!(
        std["multi_turn"],
        json!({"enabled": true, "max_turns": {"distribution": "fixed", "value": 2}})
    );
    assert_eq!(load["native"]["config"], summary["run"]);

    // The stack: the engine model, and its hit rate under its label.
    let stack = &br["scenario"]["stack"][0];
    assert_eq!(stack["metadata"]["label"], "engine-model");
    assert_eq!(stack["standardized"]["kind"], "generic");
    assert_eq!(stack["standardized"]["profile"], "h100-llama3-8b");
    let obs = &br["results"]["observability"]["components"][0];
    assert_eq!(obs["component_label"], "engine-model");
    assert_eq!(obs["aggregate"]["cache_hit_rate"]["units"], "percent");

    // When: the run's start, to the ms, and its span.
    let t = &br["run"]["time"];
    let start = summary["run"]["start_time"].as_str().unwrap();
    assert!(
        t["start"]
            .as_str()
            .unwrap()
            .starts_with(start.trim_end_matches('Z')),
        "{t} vs {start}"
    );
    let last_end = lines
        .iter()
        .map(|r| r["t_end_ms"].as_f64().unwrap())
        .fold(0.0, f64::max);
    // Seconds to the ms, always with a point (`PT4.0S`).
    let secs = format!("{}", last_end.round() / 1000.0);
    let secs = if secs.contains('.') {
        secs
    } else {
        secs + ".0"
    };
    assert_eq!(t["duration"], format!("PT{secs}S"));
    // The same results, the same report.
    assert_eq!(br, report(&results, &["--format", "llm-d"]));
    assert_eq!(br["run"]["uid"].as_str().unwrap().len(), 32);
}

/// Against a server: its URL without the credentials, no header values,
/// the model named; the secrets in the URL and a header never appear.
#[test]
fn a_servers_report_names_it_without_its_secrets() {
    let mock = Mock::start(&["--prefix-cache"]);
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("server.jsonl");
    let url = mock.url.replacen("http://", "http://user:pw-secret-1@", 1);
    let ran = tool("mc-replay")
        .args(["--url", &url, "--model", "m"])
        .args(["--header", "X-Token: hdr-secret-3"])
        .arg("-o")
        .arg(&results)
        .env_remove("OPENAI_API_KEY")
        .write_stdin(trace())
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(ran.status.success(), "{ran:?}");
    let (out, _) = run_ok_both(
        "mc-report",
        &["--format", "llm-d", results.to_str().unwrap()],
        "",
    );
    for secret in ["pw-secret-1", "hdr-secret-3"] {
        assert!(!out.contains(secret), "{secret} in {out}");
    }
    let br: Value = serde_json::from_str(&out).unwrap();
    let stack = &br["scenario"]["stack"][0];
    assert_eq!(stack["metadata"]["label"], "server");
    assert_eq!(stack["standardized"]["model"]["name"], "m");
    let shown = stack["standardized"]["url"].as_str().unwrap();
    assert!(shown.starts_with("http://***@127.0.0.1:"), "{shown}");
    assert_eq!(
        br["scenario"]["load"]["native"]["config"]["options"]["header_names"],
        json!(["x-token"])
    );
    assert_eq!(
        br["results"]["observability"]["components"][0]["component_label"],
        "server"
    );
    if let Some(dir) = data_dir("a_servers_report_names_it_without_its_secrets") {
        assert_valid(&dir, &br);
    }
}

/// A report is one run: a comparison is refused as a usage error, and so
/// are two formats at once.
#[test]
fn llm_d_takes_one_run_and_one_format() {
    let dir = tempfile::tempdir().unwrap();
    let results = engine_run(dir.path(), &[]);
    let r = results.to_str().unwrap();
    let err = run_code(
        "mc-report",
        &["--format", "llm-d", "--compare", r, r],
        "",
        2,
    );
    assert!(
        err.contains("--format llm-d: a report describes one run"),
        "{err}"
    );
    run_code("mc-report", &["--format", "llm-d", "--json", r], "", 2);
    // `--format json` is `--json`.
    assert_eq!(
        report(&results, &["--format", "json"]),
        report(&results, &["--json"])
    );
}

/// The report validates against llm-d-benchmark's own JSON Schema, and
/// the validator is not a formality: a unit the schema does not know, or a
/// missing required field, fails it.
#[test]
fn the_report_validates_against_the_llm_d_schema() {
    let Some(data) = data_dir("the_report_validates_against_the_llm_d_schema") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let results = engine_run(dir.path(), &[]);
    let br = report(&results, &["--format", "llm-d"]);
    assert_valid(&data, &br);

    let schema = schema(&data);
    let mut bad = br.clone();
    bad["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]["units"] =
        json!("seconds");
    assert!(!errors(&schema, &bad).is_empty());
    let mut bad = br.clone();
    bad["run"].as_object_mut().unwrap().remove("uid");
    assert!(!errors(&schema, &bad).is_empty());
    let mut bad = br;
    bad["run"]["time"]["start"] = json!("yesterday");
    assert!(!errors(&schema, &bad).is_empty(), "date-time is checked");
}

fn schema(data: &Path) -> Value {
    let p = data.join("llm-d-benchmark-report/br_v0_2_1_json_schema.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

fn assert_valid(data: &Path, report: &Value) {
    let errs = errors(&schema(data), report);
    assert!(errs.is_empty(), "{}\n{report:#}", errs.join("\n"));
}

/// What the schema finds wrong with `doc` (draft 2020-12, the schema's
/// `$defs`; formats such as `date-time` asserted).
fn errors(schema: &Value, doc: &Value) -> Vec<String> {
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler.enable_format_assertions();
    let url = "mem:///br_v0_2_1_json_schema.json";
    compiler.add_resource(url, schema.clone()).unwrap();
    let index = compiler.compile(url, &mut schemas).unwrap();
    match schemas.validate(doc, index) {
        Ok(()) => Vec::new(),
        Err(e) => vec![format!("{e:#}")],
    }
}

/// Result lines without mc-replay's run description: the report keeps
/// what the lines say (the id, the results) and leaves out the optional
/// parts only the description knows (the load, the stack, the run's time).
#[test]
fn an_undescribed_run_reports_its_results_only() {
    let dir = tempfile::tempdir().unwrap();
    let results = engine_run(dir.path(), &[]);
    let alone = tempfile::tempdir().unwrap();
    let copy = alone.path().join("alone.jsonl");
    std::fs::copy(&results, &copy).unwrap();
    let br = report(&copy, &["--format", "llm-d"]);
    let keys: Vec<&String> = br.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["results", "run", "version"]);
    assert_eq!(br["run"].as_object().unwrap().len(), 1, "{br:#}");
    let req = &br["results"]["request_performance"]["aggregate"]["requests"];
    assert_eq!(req["total"], 6);
    assert!(br["results"].get("observability").is_none(), "{br:#}");
    if let Some(data) = data_dir("an_undescribed_run_reports_its_results_only") {
        assert_valid(&data, &br);
    }
}
