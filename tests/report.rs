//! mc-report end to end: summaries recomputed from mc-replay's result files
//! (against mc-mock on 127.0.0.1), comparisons of hand-made runs with
//! hand-computed changes, HTML well-formedness, sweep directories.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::replay::Mock;
use crate::util::{lines, run_ok_both, tool};

/// `mc-report --json` for several runs, as the tests expect it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Comparison {
    runs: Vec<RunOut>,
    metrics: Vec<RowOut>,
    #[serde(default)]
    sweep: Option<SweepOut>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunOut {
    label: String,
    sources: Vec<String>,
    run: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RowOut {
    metric: String,
    unit: String,
    values: Vec<Option<f64>>,
    change_pct: Vec<Option<f64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepOut {
    parameter: String,
    values: Vec<f64>,
    stopped: Option<Value>,
}

impl Comparison {
    fn row(&self, metric: &str) -> &RowOut {
        self.metrics
            .iter()
            .find(|r| r.metric == metric)
            .unwrap_or_else(|| panic!("no row {metric}"))
    }
}

fn report(args: &[&str]) -> (String, String) {
    run_ok_both("mc-report", args, "")
}

/// Two sessions of two turns, and two single rows: 6 requests.
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

/// mc-replay against `mock` with `args`, results into `dir/NAME.jsonl`;
/// its stderr.
fn replay_to(mock: &Mock, dir: &Path, name: &str, args: &[&str]) -> String {
    let out = tool("mc-replay")
        .args(["--url", &mock.url, "--model", "m"])
        .arg("-o")
        .arg(dir.join(format!("{name}.jsonl")))
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .write_stdin(trace())
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

#[test]
fn json_equals_the_replay_summary_exactly() {
    // Faults, warm-up and an SLO, so errors by kind, warm-up counts and
    // goodput are recomputed too.
    let mock = Mock::start(&[
        "--ttft-ms",
        "5",
        "--itl-ms",
        "1",
        "--status",
        "503",
        "--fail-rate",
        "0.3",
        "--seed",
        "3",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("s.json");
    let replay_err = replay_to(
        &mock,
        dir.path(),
        "results",
        &[
            "--warmup",
            "1",
            "--slo",
            "ttft=6",
            "--summary",
            summary.to_str().unwrap(),
        ],
    );
    let want = std::fs::read_to_string(&summary).unwrap();
    let want_v: Value = serde_json::from_str(&want).unwrap();
    assert!(
        want_v["requests"]["failed"].as_u64().unwrap() > 0
            && want_v["requests"]["ok"].as_u64().unwrap() > 0,
        "the test needs both kinds: {want}"
    );
    // The sidecar mc-replay wrote beside -o is the same document.
    let side = std::fs::read_to_string(dir.path().join("results.summary.json")).unwrap();
    assert_eq!(side, want);
    let results = dir.path().join("results.jsonl");
    // Found beside the results, or named: the same bytes mc-replay wrote
    // (no field is left out: nothing in the summary is wall-clock only
    // once the run description is read from the run's own summary).
    let (auto, _) = report(&["--json", results.to_str().unwrap()]);
    assert_eq!(auto, format!("{want}\n"));
    let (named, _) = report(&[
        "--json",
        "--run-info",
        summary.to_str().unwrap(),
        results.to_str().unwrap(),
    ]);
    assert_eq!(named, auto);
    // The table is mc-replay's, line for line after the run's description.
    let (table, _) = report(&[results.to_str().unwrap()]);
    assert!(table.contains("goodput"), "{table}");
    let replay_table: Vec<String> = replay_err
        .lines()
        .skip_while(|l| !(l.starts_with("mc-replay: ") && l.contains(" requests: ")))
        .map(|l| l.replacen("mc-replay:", "mc-report:", 1))
        .collect();
    assert!(replay_table.len() > 5, "{replay_err}");
    let report_table: Vec<&str> = table.lines().skip(1).take(replay_table.len()).collect();
    assert_eq!(report_table, replay_table);
    // CSV too.
    let (csv, _) = report(&["--csv", results.to_str().unwrap()]);
    assert!(csv.starts_with("metric,value,count,mean_ms"), "{csv}");
    assert!(csv.contains("errors_http_5xx,"), "{csv}");
}

#[test]
fn pooled_files_in_any_order_give_the_same_metrics() {
    let mock = Mock::start(&["--ttft-ms", "3", "--itl-ms", "1"]);
    let dir = tempfile::tempdir().unwrap();
    replay_to(&mock, dir.path(), "results", &[]);
    let all = std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap();
    let ls: Vec<&str> = all.lines().collect();
    assert_eq!(ls.len(), 6);
    // Split in two files whose sorted order reverses the lines' order.
    let split = tempfile::tempdir().unwrap();
    let part = |v: &[&str]| v.iter().map(|l| format!("{l}\n")).collect::<String>();
    std::fs::write(split.path().join("a.jsonl"), part(&ls[3..])).unwrap();
    std::fs::write(split.path().join("b.jsonl"), part(&ls[..3])).unwrap();
    std::fs::copy(
        dir.path().join("results.summary.json"),
        split.path().join("summary.json"),
    )
    .unwrap();
    let (one, _) = report(&["--json", dir.path().join("results.jsonl").to_str().unwrap()]);
    let (pooled, err) = report(&["--json", split.path().to_str().unwrap()]);
    assert!(err.contains("6 result lines from 2 files"), "{err}");
    assert_eq!(one, pooled);
    // From stdin, without a description: the same metrics, `run` null.
    let out = tool("mc-report")
        .arg("--json")
        .write_stdin(all.clone())
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let want: Value = serde_json::from_str(&one).unwrap();
    assert_eq!(v["run"], Value::Null);
    assert_eq!(v["metrics"], want["metrics"]);
    assert_eq!(v["tokens"], want["tokens"]);
    let out = tool("mc-report").write_stdin(all).output().unwrap();
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .starts_with("run stdin: undescribed"));
}

/// A hand-made result line: sent at 0 (scheduled at 0), first token at
/// `ttft`, done at `e2e` (ms); `error` makes it a failure.
fn result(line: u64, ttft: f64, e2e: f64, tokens: u64, cached: u64, error: Option<&str>) -> Value {
    let ok = error.is_none();
    let gaps: Vec<f64> = if ok && tokens > 1 {
        vec![(e2e - ttft) / (tokens - 1) as f64; tokens as usize - 1]
    } else {
        vec![]
    };
    json!({
        "line": line, "session_id": null, "turn": 0, "request_id": format!("r-{line}"),
        "x_request_id": "u", "target": "http", "warmup": false,
        "status": if ok { "ok" } else { "error" }, "http_status": if ok { 200 } else { 500 },
        "error": error.map(|k| json!({"kind": k, "message": "x"})),
        "t_sched_ms": 0.0, "t_send_ms": 0.0,
        "t_first_ms": ok.then_some(ttft), "t_last_ms": ok.then_some(e2e), "t_end_ms": e2e,
        "lag_ms": 0.0, "ttft_ms": ok.then_some(ttft), "e2e_ms": ok.then_some(e2e),
        "tpot_ms": (ok && tokens > 1).then(|| (e2e - ttft) / (tokens - 1) as f64),
        "sched_latency_ms": ok.then_some(e2e), "chunks": if ok { tokens } else { 0 },
        "itl_ms": null, "itl_gaps_ms": gaps, "input_tokens": 100,
        "prompt_tokens": ok.then_some(100), "cached_tokens": ok.then_some(cached),
        "output_tokens": tokens, "completion_tokens": ok.then_some(tokens),
        "tokens_estimated": false, "finish_reason": ok.then_some("length")
    })
}

#[test]
fn compare_hand_made_runs_with_hand_computed_changes() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.jsonl");
    let b = dir.path().join("b.jsonl");
    // Run A: TTFT 1.0 and 2.0 ms, E2E 10 and 20 ms, 10 + 20 tokens, 50 of
    // 200 prompt tokens cached, one http_5xx; it lasts 20 ms.
    std::fs::write(
        &a,
        lines(&[
            result(1, 1.0, 10.0, 10, 50, None),
            result(2, 2.0, 20.0, 20, 0, None),
            result(3, 0.0, 5.0, 4, 0, Some("http_5xx")),
        ]),
    )
    .unwrap();
    // Run B: TTFT 1.5 and 1.5 ms, E2E 10 and 40 ms, the same tokens, 100
    // of 200 cached, no failure; it lasts 40 ms.
    std::fs::write(
        &b,
        lines(&[
            result(1, 1.5, 10.0, 10, 60, None),
            result(2, 1.5, 40.0, 20, 40, None),
        ]),
    )
    .unwrap();
    let (out, _) = report(&[
        "--compare",
        "--json",
        "--label",
        "base,new",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    let c: Comparison = serde_json::from_str(&out).unwrap();
    assert_eq!(
        c.runs.iter().map(|r| r.label.as_str()).collect::<Vec<_>>(),
        ["base", "new"]
    );
    assert!(c
        .runs
        .iter()
        .all(|r| r.run.is_none() && r.sources.len() == 1));
    assert!(c.sweep.is_none());
    let close = |got: Option<f64>, want: f64| {
        let g = got.unwrap_or(f64::NAN);
        assert!((g - want).abs() < 1e-9, "{got:?} vs {want}");
    };
    let check = |metric: &str, a: f64, b: f64, pct: Option<f64>| {
        let r = c.row(metric);
        close(r.values[0], a);
        close(r.values[1], b);
        assert_eq!(r.change_pct[0], None, "{metric}");
        match pct {
            Some(p) => close(r.change_pct[1], p),
            None => assert_eq!(r.change_pct[1], None, "{metric}"),
        }
    };
    // ok 2 → 2: 0 %; failed 1 → 0: −100 %; http_5xx the same.
    check("requests_ok", 2.0, 2.0, Some(0.0));
    check("requests_failed", 1.0, 0.0, Some(-100.0));
    check("errors_http_5xx", 1.0, 0.0, Some(-100.0));
    // 20 ms vs 40 ms: 2 / 0.02 s = 100 req/s vs 2 / 0.04 = 50 (−50 %);
    // 30 tokens: 1500 vs 750 tok/s (−50 %); 300 vs 200 prompt tokens
    // (successful only): 10000 vs 5000 tok/s.
    check("duration_s", 0.02, 0.04, Some(100.0));
    check("request_throughput", 100.0, 50.0, Some(-50.0));
    check("output_token_throughput", 1500.0, 750.0, Some(-50.0));
    check("input_token_throughput", 10000.0, 5000.0, Some(-50.0));
    // TTFT mean (1 + 2) / 2 = 1.5 vs 1.5: 0 %; E2E mean 15 vs 25: +66.7 %.
    check("ttft_mean_ms", 1.5, 1.5, Some(0.0));
    check("e2e_mean_ms", 15.0, 25.0, Some(200.0 / 3.0));
    // Below 2.048 ms the histogram is exact: p50 of {1, 2} is the first
    // value reaching half the count, 1.0; of {1.5, 1.5} 1.5 (+50 %).
    check("ttft_p50_ms", 1.0, 1.5, Some(50.0));
    // TPOT: (10 − 1) / 9 = 1 and (20 − 2) / 19 ms vs (10 − 1.5) / 9 and
    // (40 − 1.5) / 19; means of µs-rounded values.
    let tpot_a = (1000.0 + (18000.0f64 / 19.0).round()) / 2.0 / 1000.0;
    let tpot_b = ((8500.0f64 / 9.0).round() + (38500.0f64 / 19.0).round()) / 2.0 / 1000.0;
    let r = c.row("tpot_mean_ms");
    close(r.values[0], (tpot_a * 1000.0).round() / 1000.0);
    close(r.values[1], (tpot_b * 1000.0).round() / 1000.0);
    // Prefix-cache hit rate 50 / 200 = 0.25 vs 100 / 200 = 0.5: +100 %.
    check("prefix_cache_hit_rate", 0.25, 0.5, Some(100.0));
    assert_eq!(c.row("prefix_cache_hit_rate").unit, "ratio");
    // The lag is 0 in both: no change to compute against 0.
    check("lag_mean_ms", 0.0, 0.0, None);

    // The text table and the CSV say the same.
    let (text, _) = report(&["--compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(text.contains("run a: undescribed"), "{text}");
    let e2e = text.lines().find(|l| l.starts_with("e2e_mean_ms")).unwrap();
    assert!(e2e.ends_with("25.0 (+66.7%)"), "{e2e}");
    let (csv, _) = report(&[
        "--compare",
        "--csv",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert!(csv.starts_with("metric,run,value,change_pct\n"), "{csv}");
    assert!(csv.contains("\nrequest_throughput,a,100,\n"), "{csv}");
    assert!(csv.contains("\nrequest_throughput,b,50,-50\n"), "{csv}");

    // Usage errors: one run to compare, labels that do not match.
    let one = tool("mc-report")
        .args(["--compare", a.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(one.status.code(), Some(2));
    let lab = tool("mc-report")
        .args([
            "--compare",
            "--label",
            "x",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(lab.status.code(), Some(2));
    // A line that is not a result names its file and line (exit 65).
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"timestamp\": 0}\n").unwrap();
    let out = tool("mc-report").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.jsonl: line 1"));
}

/// Checks that every tag is closed in order (void HTML elements and
/// self-closed SVG elements aside) and that no text holds a bare `<`. A
/// script's body is not markup: it runs to its `</script>`, and must not
/// hold one.
fn assert_well_formed(html: &str) {
    const VOID: [&str; 6] = ["meta", "br", "hr", "img", "input", "link"];
    let mut stack: Vec<&str> = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        let after = &rest[i + 1..];
        let j = after.find('>').expect("a tag left open");
        let tag = &after[..j];
        assert!(!tag.contains('<'), "a bare < before {tag:?}");
        rest = &after[j + 1..];
        if tag.starts_with("script") {
            let end = rest.find("</script>").expect("a script left open");
            rest = &rest[end + "</script>".len()..];
            continue;
        }
        if tag.starts_with('!') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop(), Some(name.trim()), "closing {name}");
        } else if !tag.ends_with('/') {
            let name = tag.split_whitespace().next().unwrap_or("");
            if !VOID.contains(&name) {
                stack.push(name);
            }
        }
    }
    assert!(stack.is_empty(), "left open: {stack:?}");
}

#[test]
fn html_report_is_self_contained_and_well_formed() {
    let mock = Mock::start(&["--ttft-ms", "4", "--itl-ms", "1"]);
    let dir = tempfile::tempdir().unwrap();
    replay_to(&mock, dir.path(), "one", &[]);
    replay_to(&mock, dir.path(), "two", &["--speedup", "2"]);
    let trace_file = dir.path().join("trace.jsonl");
    std::fs::write(&trace_file, trace()).unwrap();
    let html = dir.path().join("r.html");
    report(&[
        "--compare",
        "--html",
        html.to_str().unwrap(),
        "--trace",
        trace_file.to_str().unwrap(),
        dir.path().join("one.jsonl").to_str().unwrap(),
        dir.path().join("two.jsonl").to_str().unwrap(),
    ]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert_well_formed(&page);
    // No URL at all: no network, not even the SVG namespace (HTML5 inline
    // SVG needs none); the server is named by host and port.
    assert!(!page.contains("http://") && !page.contains("https://"));
    assert!(page.contains(&format!(
        "server {}",
        mock.url.trim_start_matches("http://")
    )));
    // One chart per panel, each in its figure: TTFT, ITL, E2E over the
    // run; three CDFs; output tok/s, in flight, lag; a session timeline
    // per run (both have sessions); the trace's seven panels (rates,
    // lengths, hit rate, two histograms, sessions).
    let panels = 3 + 3 + 3 + 2 + 7;
    let charts = charts(&page);
    assert_eq!(charts.len(), panels);
    let titles: Vec<&str> = charts
        .iter()
        .map(|c| c["title"].as_str().unwrap())
        .collect();
    for title in [
        "TTFT over the run",
        "ITL over the run",
        "E2E latency over the run",
        "TTFT CDF",
        "ITL CDF",
        "E2E latency CDF",
        "Output tokens per second",
        "Requests in flight",
        "Schedule lag",
        "Sessions of speedup=1",
        "Sessions of speedup=2",
        "Requests per second", // mc-plot's figure of the trace
        "Input length histogram",
    ] {
        assert!(
            titles.iter().any(|t| t.starts_with(title)),
            "{title}: {titles:?}"
        );
    }
    // Overlaid runs are named in the legends.
    let ttft = &charts[0];
    let names: Vec<&str> = ttft["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"speedup=2 p99"), "{names:?}");
    // TTFT is in ms over time in s: the script writes `1.5 s`, `250 ms`.
    assert_eq!(
        (ttft["x"]["unit"].as_str(), ttft["y"]["unit"].as_str()),
        (Some("s"), Some("ms"))
    );
    // The script that draws them, and sortable tables with their headers.
    assert!(page.contains("<script>") && page.contains("function human("));
    assert!(page.contains(
        "<table class=\"sortable compare\">\n<thead><tr><th>metric</th><th>speedup=1</th>"
    ));
    assert!(page.contains("<table class=\"sortable runs\">\n<thead><tr><th>run</th>"));
    // Every compared value sorts by its number.
    let compare = &page[page.find("sortable compare").unwrap()..];
    let compare = &compare[..compare.find("</table>").unwrap()];
    assert!(compare.matches("data-v=").count() > 10, "{compare}");
    for v in compare.split("data-v=\"").skip(1) {
        let v = &v[..v.find('"').unwrap()];
        assert!(v.parse::<f64>().is_ok(), "{v}");
    }
}

/// The JSON of every chart on the page, checked well-formed: a known
/// kind, every point two numbers (a missing y is `null`, never drawn),
/// every histogram bar between two edges.
fn charts(page: &str) -> Vec<Value> {
    const OPEN: &str = "<figure class=\"chart\"><script type=\"application/json\">";
    page.split(OPEN)
        .skip(1)
        .map(|rest| {
            let json = &rest[..rest.find("</script>").expect("the chart's data closed")];
            let v: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
            let title = v["title"].as_str().expect("a title").to_string();
            for axis in ["x", "y"] {
                let unit = v[axis]["unit"].as_str().unwrap();
                assert!(
                    ["plain", "ms", "s", "share"].contains(&unit),
                    "{title}: {unit}"
                );
            }
            match v["kind"].as_str() {
                Some("lines") => {
                    for s in v["series"].as_array().unwrap() {
                        assert!(s["color"].as_str().unwrap().starts_with('#'));
                        for p in s["points"].as_array().unwrap() {
                            let p = p.as_array().unwrap();
                            assert_eq!(p.len(), 2, "{title}");
                            assert!(p[0].as_f64().is_some_and(f64::is_finite), "{title}: {p:?}");
                            assert!(p[1].is_null() || p[1].as_f64().is_some(), "{title}: {p:?}");
                        }
                    }
                }
                Some("histogram") => {
                    let edges = v["edges"].as_array().unwrap();
                    assert_eq!(
                        edges.len(),
                        v["counts"].as_array().unwrap().len() + 1,
                        "{title}"
                    );
                }
                Some("timeline") => {
                    for l in v["lanes"].as_array().unwrap() {
                        assert!(l["marks"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .all(|m| m.as_f64().is_some()));
                    }
                }
                other => panic!("{title}: kind {other:?}"),
            }
            v
        })
        .collect()
}

/// The chart whose title starts with `title`.
fn chart<'a>(charts: &'a [Value], title: &str) -> &'a Value {
    charts
        .iter()
        .find(|c| c["title"].as_str().unwrap().starts_with(title))
        .unwrap_or_else(|| panic!("no chart {title}"))
}

#[test]
fn trace_figure_draws_only_the_rows_a_short_run_replayed() {
    let mock = Mock::start(&["--ttft-ms", "2", "--itl-ms", "1"]);
    let dir = tempfile::tempdir().unwrap();
    replay_to(&mock, dir.path(), "cut", &["--max-requests", "3"]);
    let trace_file = dir.path().join("trace.jsonl");
    std::fs::write(&trace_file, trace()).unwrap();
    let results = std::fs::read_to_string(dir.path().join("cut.jsonl")).unwrap();
    let mut lines: Vec<u64> = results
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["line"]
                .as_u64()
                .unwrap()
        })
        .collect();
    lines.sort_unstable();
    assert_eq!(lines.len(), 3);
    let html = dir.path().join("r.html");
    report(&[
        "--html",
        html.to_str().unwrap(),
        "--trace",
        trace_file.to_str().unwrap(),
        dir.path().join("cut.jsonl").to_str().unwrap(),
    ]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("The 3 of 6 rows of "), "{page}");
    let cut = charts(&page);
    // The input-length histogram holds exactly the replayed rows: 3
    // requests, its range their lengths' (the trace's rows by line).
    let isl: Vec<f64> = trace()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["input_length"]
                .as_f64()
                .unwrap()
        })
        .collect();
    let kept: Vec<f64> = lines.iter().map(|&n| isl[n as usize - 1]).collect();
    let h = chart(&cut, "Input length histogram");
    assert_eq!(histogram_total(h), 3);
    let edges = h["edges"].as_array().unwrap();
    let lo = kept.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = kept.iter().copied().fold(0.0, f64::max);
    assert_eq!(edges[0].as_f64(), Some(lo));
    assert!((edges.last().unwrap().as_f64().unwrap() - hi).abs() < 1e-6);
    // Without --max-requests every row is drawn.
    replay_to(&mock, dir.path(), "all", &[]);
    report(&[
        "--html",
        html.to_str().unwrap(),
        "--trace",
        trace_file.to_str().unwrap(),
        dir.path().join("all.jsonl").to_str().unwrap(),
    ]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("All 6 rows of "), "{page}");
    let h = chart(&charts(&page), "Input length histogram").clone();
    assert_eq!(histogram_total(&h), 6);
    // A single run's distributions, sortable, each figure its summary's.
    let dists = &page[page
        .find("<table class=\"sortable dists\">")
        .expect("the distributions")..];
    let dists = &dists[..dists.find("</table>").unwrap()];
    let sum: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("all.summary.json")).unwrap(),
    )
    .unwrap();
    let ttft = &dists[dists.find("<tr><td>ttft</td>").expect("a ttft row")..];
    let ttft = &ttft[..ttft.find("</tr>").unwrap()];
    let p99 = sum["metrics"]["ttft"]["p99"].as_f64().unwrap();
    let count = sum["metrics"]["ttft"]["count"].as_u64().unwrap();
    assert!(ttft.contains(&format!("<td data-v=\"{p99}\">")), "{ttft}");
    assert!(
        ttft.ends_with(&format!("<td data-v=\"{count}\">{count}</td>")),
        "{ttft}"
    );
    // A trace none of whose rows has a result is not the run's: exit 65.
    let stray = dir.path().join("stray.jsonl");
    std::fs::write(&stray, format!("{}\n", result(100, 1.0, 2.0, 2, 0, None))).unwrap();
    tool("mc-report")
        .arg("--html")
        .arg(&html)
        .arg("--trace")
        .arg(&trace_file)
        .arg(&stray)
        .assert()
        .code(65)
        .stderr(predicates::str::contains(
            "none of its 6 rows has a result line",
        ));
}

/// Every warning and note the terminal prints of a run opens its page,
/// alone and compared.
#[test]
fn warnings_the_terminal_prints_open_the_single_and_comparison_pages() {
    let mock = Mock::start(&["--ttft-ms", "2", "--itl-ms", "1"]);
    let dir = tempfile::tempdir().unwrap();
    replay_to(&mock, dir.path(), "one", &[]);
    replay_to(&mock, dir.path(), "two", &[]);
    // Run one stopped early and lost its gaps (an older mc-replay).
    let side = dir.path().join("one.summary.json");
    let mut s: Value = serde_json::from_str(&std::fs::read_to_string(&side).unwrap()).unwrap();
    s["stopped_early"] = json!({"consecutive_failures": 9, "last_error": "refused"});
    std::fs::write(&side, s.to_string()).unwrap();
    let one = dir.path().join("one.jsonl");
    let stripped: String = std::fs::read_to_string(&one)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("itl_gaps_ms");
            format!("{v}\n")
        })
        .collect();
    std::fs::write(&one, stripped).unwrap();
    let (text, _) = report(&[one.to_str().unwrap()]);
    let said: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("STOPPED") || l.starts_with("WARNING") || l.starts_with("note:"))
        .collect();
    // STOPPED EARLY, the missing gaps, and tpot over 5 of 6 (one answer
    // of one token); a loaded machine may add a degraded run's WARNING.
    for want in [
        "STOPPED EARLY: 9 requests in a row",
        "note: 5 results carry no itl_gaps_ms",
        "note: tpot over 5 of 6 ok requests",
    ] {
        assert!(said.iter().any(|l| l.starts_with(want)), "{want}: {text}");
    }
    let html = dir.path().join("r.html");
    report(&["--html", html.to_str().unwrap(), one.to_str().unwrap()]);
    let page = std::fs::read_to_string(&html).unwrap();
    let top = &page
        [page.find("<div class=\"warnings\">").expect("the cautions")..page.find("<h2>").unwrap()];
    for w in &said {
        assert!(top.contains(&format!("<li>{w}</li>")), "{w}: {top}");
    }
    report(&[
        "--compare",
        "--html",
        html.to_str().unwrap(),
        one.to_str().unwrap(),
        dir.path().join("two.jsonl").to_str().unwrap(),
    ]);
    let page = std::fs::read_to_string(&html).unwrap();
    let top = &page
        [page.find("<div class=\"warnings\">").expect("the cautions")..page.find("<h2>").unwrap()];
    for w in &said {
        assert!(top.contains(&format!("<li>one: {w}</li>")), "{w}: {top}");
    }
}

/// A generated run of 10,000 requests (with its trace) makes a page
/// under 1 MB, and the page says what it thinned out.
#[test]
fn page_of_ten_thousand_requests_is_under_a_megabyte() {
    let dir = tempfile::tempdir().unwrap();
    let n = 10_000u64;
    let mut trace = String::new();
    let mut results = String::new();
    for i in 0..n {
        let t = i as f64 * 7.3;
        let ttft = 20.0 + (i % 97) as f64 * 1.7;
        let gaps: Vec<f64> = (0..20)
            .map(|k| 8.0 + ((i + k) % 13) as f64 * 0.37)
            .collect();
        let e2e = ttft + gaps.iter().sum::<f64>();
        trace.push_str(&format!(
            "{{\"timestamp\": {t}, \"session_id\": \"s{}\", \"input_length\": {}, \"output_length\": 21, \"hash_ids\": [{}, {}]}}\n",
            i % 500,
            600 + i % 400,
            i % 50,
            i
        ));
        let mut r = result(i + 1, ttft, e2e, 21, 100, None);
        r["session_id"] = json!(format!("s{}", i % 500));
        // The row's own prompt size: --trace must be the replayed trace.
        r["input_tokens"] = json!(600 + i % 400);
        r["t_sched_ms"] = json!(t);
        r["t_send_ms"] = json!(t + 0.25);
        r["t_first_ms"] = json!(t + 0.25 + ttft);
        r["t_last_ms"] = json!(t + 0.25 + e2e);
        r["t_end_ms"] = json!(t + 0.25 + e2e);
        r["lag_ms"] = json!(0.25);
        r["itl_gaps_ms"] = json!(gaps);
        results.push_str(&format!("{r}\n"));
    }
    let (tf, rf, html) = (
        dir.path().join("t.jsonl"),
        dir.path().join("r.jsonl"),
        dir.path().join("r.html"),
    );
    std::fs::write(&tf, trace).unwrap();
    std::fs::write(&rf, results).unwrap();
    report(&[
        "--html",
        html.to_str().unwrap(),
        "--trace",
        tf.to_str().unwrap(),
        rf.to_str().unwrap(),
    ]);
    let size = std::fs::metadata(&html).unwrap().len();
    println!("page of {n} requests: {size} bytes");
    assert!(size < 1_000_000, "{size} bytes");
    let page = std::fs::read_to_string(&html).unwrap();
    let charts = charts(&page);
    // 10,000 dots thinned to 5,000 per panel, said in the title.
    let ttft = chart(&charts, "TTFT over the run");
    assert!(
        ttft["title"]
            .as_str()
            .unwrap()
            .contains("dots: 1 in 2 of 10k shown"),
        "{}",
        ttft["title"]
    );
    assert_eq!(ttft["series"][0]["points"].as_array().unwrap().len(), 5000);
    assert!(page.contains("All 10000 rows of "));
}

/// The page's script writes numbers by the same rule as `plot::fmt`
/// (its port, run under node when node is installed).
#[test]
fn script_writes_numbers_as_plot_fmt_does() {
    use mctrace::plot::fmt::{human, tick_digits, CASES};
    if std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("skipped: no node on PATH to run the page's script");
        return;
    }
    let js = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/plot/web.js");
    let mut cases: Vec<(f64, &str, u32, String)> = CASES
        .iter()
        .map(|&(v, u, d, want)| (v, unit(u), d, want.to_string()))
        .collect();
    // And a sweep of values the cases do not pin, against the Rust rule.
    for k in -6..12 {
        for m in [1.0, 1.25, 2.0, 2.5, 4.999, 9.9996] {
            let v = m * 10f64.powi(k);
            for u in [
                mctrace::plot::Unit::Plain,
                mctrace::plot::Unit::Ms,
                mctrace::plot::Unit::S,
                mctrace::plot::Unit::Share,
            ] {
                for d in [3, 7] {
                    cases.push((v, unit(u), d, human(v, u, d)));
                }
            }
        }
    }
    let input: Vec<Value> = cases
        .iter()
        .map(|(v, u, d, _)| json!([if v.is_finite() { json!(v) } else { json!(null) }, u, d]))
        .collect();
    let script = format!(
        "const f = require({:?}); const c = {}; \
         console.log(JSON.stringify(c.map(([v, u, d]) => f.human(v === null ? NaN : v, u, d)))); \
         console.log(JSON.stringify([f.tickDigits(4000, 500), f.tickDigits(1001, 0.2), f.tickDigits(0, 1)]));",
        js.to_str().unwrap(),
        Value::from(input)
    );
    let out = std::process::Command::new("node")
        .arg("-e")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let got: Vec<String> = serde_json::from_str(lines.next().unwrap()).unwrap();
    for ((v, u, d, want), got) in cases.iter().zip(&got) {
        assert_eq!(got, want, "{v} {u} {d}");
    }
    let ticks: Vec<u32> = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(
        ticks,
        vec![
            tick_digits(4000.0, 500.0),
            tick_digits(1001.0, 0.2),
            tick_digits(0.0, 1.0)
        ]
    );
}

fn unit(u: mctrace::plot::Unit) -> &'static str {
    match u {
        mctrace::plot::Unit::Plain => "plain",
        mctrace::plot::Unit::Ms => "ms",
        mctrace::plot::Unit::S => "s",
        mctrace::plot::Unit::Share => "share",
    }
}

#[test]
fn sweep_directory_curve_and_table() {
    let mock = Mock::start(&["--ttft-ms", "4", "--itl-ms", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for rate in ["20", "40"] {
        let sub = dir.path().join(format!("rate-{rate}"));
        std::fs::create_dir(&sub).unwrap();
        let summary = sub.join("summary.json");
        replay_to(
            &mock,
            &sub,
            "results",
            &["--rate", rate, "--summary", summary.to_str().unwrap()],
        );
        runs.push(json!({
            "value": rate.parse::<f64>().unwrap(),
            "results": format!("rate-{rate}/results.jsonl"),
            "summary": format!("rate-{rate}/summary.json"),
        }));
    }
    std::fs::write(
        dir.path().join("sweep.json"),
        json!({"parameter": "rate", "runs": runs, "stopped": {"reason": "ttft p99 over the SLO", "value": 40.0}})
            .to_string(),
    )
    .unwrap();
    let (out, _) = report(&["--json", dir.path().to_str().unwrap()]);
    let c: Comparison = serde_json::from_str(&out).unwrap();
    let sw = c.sweep.as_ref().unwrap();
    assert_eq!(
        (sw.parameter.as_str(), sw.values.clone()),
        ("rate", vec![20.0, 40.0])
    );
    assert_eq!(sw.stopped.as_ref().unwrap()["value"], 40.0);
    assert_eq!(
        c.runs.iter().map(|r| r.label.as_str()).collect::<Vec<_>>(),
        ["rate=20", "rate=40"]
    );
    // Each column is that run's own summary.
    for (i, rate) in ["20", "40"].iter().enumerate() {
        let s: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join(format!("rate-{rate}/summary.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(c.runs[i].run.as_ref().unwrap()["rate"], s["run"]["rate"]);
        for (metric, want) in [
            ("ttft_p99_ms", &s["metrics"]["ttft"]["p99"]),
            ("itl_p50_ms", &s["metrics"]["itl"]["p50"]),
            ("output_token_throughput", &s["output_token_throughput"]),
        ] {
            assert_eq!(c.row(metric).values[i], want.as_f64(), "{metric} at {rate}");
        }
    }
    let (text, _) = report(&[dir.path().to_str().unwrap()]);
    assert!(
        text.contains("sweep stopped at 40: ttft p99 over the SLO"),
        "{text}"
    );
    let html = dir.path().join("s.html");
    report(&[
        "--html",
        html.to_str().unwrap(),
        dir.path().to_str().unwrap(),
    ]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert_well_formed(&page);
    assert!(page.contains("Sweep over rate"));
    assert!(page.contains("TTFT against throughput") && page.contains("ITL against throughput"));
    assert!(!page.contains("http://") && !page.contains("https://"));
    // The terminal's sweep table is on the page (sortable), and its
    // cautions open it.
    let table = &page[page
        .find("<table class=\"sortable sweep\">")
        .expect("the sweep table")..];
    let table = &table[..table.find("</table>").unwrap()];
    assert!(
        table.contains("<th>rate</th><th>req/s</th><th>out tok/s</th>"),
        "{table}"
    );
    assert!(
        table.contains("<tr><td data-v=\"20\">20</td>")
            && table.contains("<tr><td data-v=\"40\">40</td>"),
        "{table}"
    );
    // Each row's figures are that run's summary's, as the terminal writes them.
    let s40: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("rate-40/summary.json")).unwrap(),
    )
    .unwrap();
    let ttft_p99 = s40["metrics"]["ttft"]["p99"].as_f64().unwrap();
    assert!(
        table.contains(&format!("<td data-v=\"{ttft_p99}\">{ttft_p99:.1}</td>")),
        "{table}"
    );
    let warnings = &page[page.find("<div class=\"warnings\">").expect("the cautions")..];
    assert!(
        warnings.contains("the sweep stopped at 40: ttft p99 over the SLO"),
        "{warnings}"
    );
    assert!(page.find("<div class=\"warnings\">") < page.find("<h2>"));
    // A run's warning from its summary (a run stopped early) is there too.
    let side = dir.path().join("rate-40/summary.json");
    let mut s: Value = serde_json::from_str(&std::fs::read_to_string(&side).unwrap()).unwrap();
    s["stopped_early"] = json!({"consecutive_failures": 7, "last_error": "refused"});
    std::fs::write(&side, s.to_string()).unwrap();
    report(&[
        "--html",
        html.to_str().unwrap(),
        dir.path().to_str().unwrap(),
    ]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains(
            "<li>rate=40: STOPPED EARLY: 7 requests in a row could not reach the server</li>"
        ),
        "{page}"
    );
}

/// The hit rate's line says whose counts they are: the engine model's in a
/// run without a server, the server's otherwise.
#[test]
fn the_hit_rate_names_who_reported_it() {
    let dir = tempfile::tempdir().unwrap();
    let engine = dir.path().join("engine.jsonl");
    let out = tool("mc-replay")
        .arg("-o")
        .arg(&engine)
        .write_stdin(trace())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mock = Mock::start(&["--prefix-cache"]);
    replay_to(&mock, dir.path(), "server", &[]);
    for (file, whose) in [
        ("engine.jsonl", "the engine model"),
        ("server.jsonl", "the server"),
    ] {
        let out = tool("mc-report")
            .arg(dir.path().join(file))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.contains(&format!(
                "(cached_tokens / prompt_tokens, as {whose} reported)"
            )),
            "{file}: {text}"
        );
    }
}

/// The rows a page's histogram counts (the sum of its bars).
fn histogram_total(h: &Value) -> u64 {
    h["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .sum()
}

#[test]
fn a_key_in_the_urls_query_is_never_shown() {
    // Issue 36: `--url http://h/v1?api_key=K` put K on stderr, in the
    // summary, and (from the summary) in mc-report's text and HTML.
    let dir = tempfile::tempdir().unwrap();
    let t = crate::util::write_file(dir.path(), "t.jsonl", &trace());
    let out = tool("mc-replay")
        // No --model: the model listing's failure names the whole URL.
        .args(["--url", "http://127.0.0.1:9/v1?api_key=qk-4711"])
        .arg("-i")
        .arg(&t)
        .env_remove("OPENAI_API_KEY")
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("api_key=***"), "{err}");
    assert!(!err.contains("qk-4711"), "{err}");
    // A run description written before the fix still holds the key.
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1"]);
    replay_to(&mock, dir.path(), "one", &[]);
    let side = dir.path().join("one.summary.json");
    let mut s: Value = serde_json::from_str(&std::fs::read_to_string(&side).unwrap()).unwrap();
    s["run"]["url"] = json!(format!("{}/v1?Token=qk-4711&model=m", mock.url));
    std::fs::write(&side, s.to_string()).unwrap();
    let html = dir.path().join("r.html");
    let one = dir.path().join("one.jsonl");
    let (text, err) = report(&[one.to_str().unwrap()]);
    let (_, _) = report(&["--html", html.to_str().unwrap(), one.to_str().unwrap()]);
    let page = std::fs::read_to_string(&html).unwrap();
    for x in [&text, &err, &page] {
        assert!(!x.contains("qk-4711"), "{x}");
    }
    assert!(text.contains("Token=***&model=m"), "{text}");
}

#[test]
fn a_trace_that_is_not_the_replayed_one_is_refused() {
    // Issue 36: `--trace` drew the unscaled original of a scaled replay as
    // "the replayed trace", without a word.
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let original = crate::util::write_file(dir.path(), "t.jsonl", &trace());
    let scaled = crate::util::run_ok(
        "mc-scale",
        &["--speedup", "2", original.to_str().unwrap()],
        "",
    );
    let scaled_file = crate::util::write_file(dir.path(), "scaled.jsonl", &scaled);
    let out = tool("mc-replay")
        .args(["--url", &mock.url, "--model", "m"])
        .arg("-o")
        .arg(dir.path().join("r.jsonl"))
        .env_remove("OPENAI_API_KEY")
        .write_stdin(scaled.clone())
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(out.status.success());
    let html = dir.path().join("r.html");
    let r = dir.path().join("r.jsonl");
    let args = |t: &Path| {
        vec![
            "--html".to_string(),
            html.to_str().unwrap().into(),
            "--trace".into(),
            t.to_str().unwrap().into(),
            r.to_str().unwrap().into(),
        ]
    };
    // The scaled trace is the one replayed: drawn.
    crate::util::run_ok("mc-report", &args(&scaled_file), "");
    // Its unscaled original: refused, by its timestamps.
    let err = crate::util::run_code("mc-report", &args(&original), "", 65);
    assert!(
        err.contains("not the trace run") && err.contains("ms after line"),
        "{err}"
    );
    // Another prompt size: refused, by the row's input_length.
    let other = scaled.replacen("\"input_length\":600", "\"input_length\":601", 1);
    assert_ne!(other, scaled);
    let other_file = crate::util::write_file(dir.path(), "other.jsonl", &other);
    let err = crate::util::run_code("mc-report", &args(&other_file), "", 65);
    assert!(err.contains("line 1 asks for 601 input tokens"), "{err}");
    // A row more than the run loaded.
    let longer = format!("{scaled}{}", scaled.lines().last().unwrap());
    let longer_file = crate::util::write_file(dir.path(), "longer.jsonl", &format!("{longer}\n"));
    let err = crate::util::run_code("mc-report", &args(&longer_file), "", 65);
    assert!(err.contains("it has 7 rows, the run loaded 6"), "{err}");
}

#[test]
fn a_window_too_small_for_the_run_is_refused() {
    // Issue 36: `--window-s 1e-9` aborted on a 94 GB allocation.
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1"]);
    let dir = tempfile::tempdir().unwrap();
    replay_to(&mock, dir.path(), "r", &[]);
    let html = dir.path().join("r.html");
    let r = dir.path().join("r.jsonl");
    let args = |w: &str| {
        vec![
            "--html".to_string(),
            html.to_str().unwrap().into(),
            "--window-s".into(),
            w.into(),
            r.to_str().unwrap().into(),
        ]
    };
    let err = crate::util::run_code("mc-report", &args("1e-9"), "", 2);
    assert!(
        err.contains("--window-s 0.000000001") && err.contains("above the limit of 1000000"),
        "{err}"
    );
    crate::util::run_ok("mc-report", &args("0.01"), "");
}
