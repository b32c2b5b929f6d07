//! mc-replay sweeps (`--rate 1,2,4`, `--concurrency …`, `--speedup …`):
//! the files of each value and the sweep's index, the saturation stop, and
//! the usage and overwrite errors. Against mc-mock on 127.0.0.1 and the
//! engine model (virtual time, exact).

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::replay::schema::{RequestResult, Summary};
use crate::replay::Mock;
use crate::util::{assert_success, lines, tool};

/// `sweep.json` as the tests expect it (the report reads this schema).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepFile {
    parameter: String,
    runs: Vec<SweepRun>,
    stopped: Option<Stopped>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepRun {
    value: f64,
    results: String,
    summary: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stopped {
    reason: String,
    value: f64,
}

/// One value's files, read back strictly.
struct ValueRun {
    results: Vec<RequestResult>,
    summary: Summary,
}

struct Swept {
    code: i32,
    stderr: String,
    index: Option<SweepFile>,
    runs: Vec<ValueRun>,
    /// sweep.csv: header, then one row per value.
    csv: Vec<Vec<String>>,
}

fn temp_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("mc-sweep-{tag}-"))
        .tempdir()
        .unwrap()
}

/// Runs mc-replay with `args` on `trace`, and reads whatever the sweep
/// wrote in `dir`.
fn sweep(dir: &Path, args: &[&str], trace: &str) -> Swept {
    let out = tool("mc-replay")
        .args(args)
        .arg("--out-dir")
        .arg(dir)
        .env_remove("OPENAI_API_KEY")
        .write_stdin(trace.to_string())
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(out.stdout.is_empty(), "a sweep writes its results to files");
    let index: Option<SweepFile> = std::fs::read_to_string(dir.join("sweep.json"))
        .ok()
        .map(|t| serde_json::from_str(&t).unwrap());
    let runs = index.as_ref().map_or(Vec::new(), |ix| {
        ix.runs
            .iter()
            .map(|r| {
                let text = std::fs::read_to_string(dir.join(&r.results)).unwrap();
                ValueRun {
                    results: text
                        .lines()
                        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                        .collect(),
                    summary: serde_json::from_str(
                        &std::fs::read_to_string(dir.join(&r.summary)).unwrap(),
                    )
                    .unwrap(),
                }
            })
            .collect()
    });
    let csv = std::fs::read_to_string(dir.join("sweep.csv"))
        .map(|t| {
            t.lines()
                .map(|l| l.split(',').map(str::to_string).collect())
                .collect()
        })
        .unwrap_or_default();
    Swept {
        code: out.status.code().unwrap_or(-1),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        index,
        runs,
        csv,
    }
}

fn num(cell: &str) -> Option<f64> {
    (!cell.is_empty()).then(|| cell.parse().unwrap())
}

/// Every row of sweep.csv holds exactly its value's summary numbers (both
/// are shortest round-trip decimals, so equal numbers are equal text).
fn csv_matches_summaries(s: &Swept) {
    let ix = s.index.as_ref().unwrap();
    assert_eq!(
        s.csv[0].join(","),
        format!(
            "{},request_throughput,output_token_throughput,ttft_p50_ms,ttft_p99_ms,\
             itl_p50_ms,itl_p99_ms,e2e_p50_ms,e2e_p99_ms,lag_p99_ms,error_rate",
            ix.parameter
        )
    );
    assert_eq!(s.csv.len(), 1 + ix.runs.len());
    for ((row, r), run) in s.csv[1..].iter().zip(&ix.runs).zip(&s.runs) {
        let m = &run.summary.metrics;
        let p =
            |st: &Option<crate::replay::schema::Stats>,
             q: fn(&crate::replay::schema::Stats) -> f64| { st.as_ref().map(q) };
        let sum = &run.summary;
        let want = [
            Some(r.value),
            Some(sum.request_throughput),
            Some(sum.output_token_throughput),
            p(&m.ttft, |x| x.p50),
            p(&m.ttft, |x| x.p99),
            p(&m.itl, |x| x.p50),
            p(&m.itl, |x| x.p99),
            p(&m.e2e, |x| x.p50),
            p(&m.e2e, |x| x.p99),
            p(&m.lag, |x| x.p99),
            Some(sum.requests.failed as f64 / sum.requests.sent as f64),
        ];
        let got: Vec<Option<f64>> = row.iter().map(|c| num(c)).collect();
        assert_eq!(got, want, "{row:?}");
    }
}

/// Closed loop, 4 rows of 3 output tokens each; the mock answers the first
/// token after 30 ms and one every 10 ms after it: 50 ms per request.
#[test]
fn a_concurrency_sweep_writes_each_value_and_an_index() {
    let mock = Mock::start(&["--ttft-ms", "30", "--itl-ms", "10"]);
    let rows: Vec<Value> = (0..4)
        .map(|_| json!({"input_length": 8, "output_length": 3}))
        .collect();
    let dir = temp_dir("conc");
    let s = sweep(
        dir.path(),
        &["--url", &mock.url, "--model", "m", "--concurrency", "1,2"],
        &lines(&rows),
    );
    assert_eq!(s.code, 0, "{}", s.stderr);
    let ix = s.index.as_ref().unwrap();
    assert_eq!(ix.parameter, "concurrency");
    assert!(ix.stopped.is_none(), "{:?}", ix.stopped);
    let paths: Vec<(f64, &str, &str)> = ix
        .runs
        .iter()
        .map(|r| (r.value, r.results.as_str(), r.summary.as_str()))
        .collect();
    assert_eq!(
        paths,
        [
            (
                1.0,
                "concurrency-1/results.jsonl",
                "concurrency-1/summary.json"
            ),
            (
                2.0,
                "concurrency-2/results.jsonl",
                "concurrency-2/summary.json"
            ),
        ]
    );
    for run in &s.runs {
        assert_eq!(run.results.len(), 4);
        assert!(run.results.iter().all(|r| r.completion_tokens == Some(3)));
        assert_eq!(run.summary.requests.ok, 4);
        assert_eq!(run.summary.tokens.output, 12);
        // TTFT is the mock's 30 ms plus local overhead; E2E 30 + 2 × 10.
        // The upper bounds only say the runs were measured, not made up:
        // a loaded 2-core machine adds tens of ms to a few requests.
        let ttft = run.summary.metrics.ttft.as_ref().unwrap();
        assert!((30.0..300.0).contains(&ttft.p50), "{ttft:?}");
        let e2e = run.summary.metrics.e2e.as_ref().unwrap();
        assert!((50.0..300.0).contains(&e2e.p50), "{e2e:?}");
        assert!(e2e.p50 >= ttft.p50 + 19.0, "two gaps of 10 ms: {e2e:?}");
    }
    assert!(dir.path().join("concurrency-1/summary.csv").is_file());
    // summary.json is where mc-report looks: no second copy beside the results.
    assert!(!dir
        .path()
        .join("concurrency-1/results.summary.json")
        .exists());
    // The run's own description names its value.
    assert_eq!(s.runs[0].summary.run.concurrency, Some(1));
    assert_eq!(s.runs[1].summary.run.concurrency, Some(2));
    // One at a time: 4 × 50 ms = 200 ms; two at a time: 2 × 50 = 100 ms,
    // so twice the throughput (overheads allowed for: the first request of
    // a run also opens its connection).
    let tput: Vec<f64> = s
        .runs
        .iter()
        .map(|r| r.summary.request_throughput)
        .collect();
    assert!(tput[0] > 10.0 && tput[0] <= 20.5, "{tput:?}");
    assert!(
        tput[1] / tput[0] > 1.5 && tput[1] / tput[0] < 2.6,
        "{tput:?}"
    );
    csv_matches_summaries(&s);
    assert_eq!(completions(&mock, 8), 8);
    // The sweep's table closes stderr.
    let tail: Vec<&str> = s.stderr.lines().rev().take(3).collect();
    assert!(
        tail[2].starts_with("concurrency     req/s  out tok/s"),
        "{}",
        s.stderr
    );
    assert!(
        tail[1].starts_with("1 ") && tail[0].starts_with("2 "),
        "{}",
        s.stderr
    );
}

/// One request at a time in 10 ms steps, 2 output tokens each: 20 ms of
/// service, at most 50 requests/s.
const QUEUE: [&str; 14] = [
    "--max-seqs",
    "1",
    "--t-fix-ms",
    "10",
    "--c-seq-ms",
    "0",
    "--t-w-ms",
    "0",
    "--c-lin-ms",
    "0",
    "--k-ms",
    "0",
    "--c-kv-ms",
    "0",
];

fn twenty_rows() -> String {
    lines(
        &(0..20)
            .map(|_| json!({"input_length": 16, "output_length": 2}))
            .collect::<Vec<_>>(),
    )
}

/// The engine model in virtual time, by hand (20 requests, constant gaps,
/// the first at 0; request k waits for k−1, then gets its first token one
/// step after it starts):
/// - rate 20 (50 ms gaps): never queued; TTFT 10 ms; last end 950 + 20 =
///   970 ms: 20 / 0.97 = 20.62 req/s.
/// - rate 100 (10 ms gaps): k starts at 20k; TTFT 20k + 10 − 10k = 10k + 10
///   (10 … 200 ms); last end 400 ms: 50 req/s, 100 tok/s (+142%: growing).
/// - rate 200 (5 ms gaps): TTFT 15k + 10 (10 … 295 ms); last end 400 ms:
///   50 req/s again (+0%) while TTFT p99 is about 29x the 10 ms at rate 20:
///   saturated, so rate 400 is never run.
#[test]
fn the_engine_model_saturates_and_the_sweep_stops() {
    let dir = temp_dir("engine");
    let mut args = vec!["--rate", "20,100,200,400", "--arrival", "constant"];
    args.extend(QUEUE);
    let s = sweep(dir.path(), &args, &twenty_rows());
    assert_eq!(s.code, 0, "{}", s.stderr);
    let ix = s.index.as_ref().unwrap();
    assert_eq!(ix.parameter, "rate");
    let values: Vec<f64> = ix.runs.iter().map(|r| r.value).collect();
    assert_eq!(values, [20.0, 100.0, 200.0]);
    let tput: Vec<f64> = s
        .runs
        .iter()
        .map(|r| r.summary.request_throughput)
        .collect();
    assert!((tput[0] - 20.0 / 0.97).abs() < 1e-9, "{tput:?}");
    assert!(
        (tput[1] - 50.0).abs() < 1e-9 && (tput[2] - 50.0).abs() < 1e-9,
        "{tput:?}"
    );
    let ttft = |i: usize| s.runs[i].summary.metrics.ttft.clone().unwrap();
    assert_eq!((ttft(0).min, ttft(0).max), (10.0, 10.0));
    assert_eq!((ttft(1).min, ttft(1).max), (10.0, 200.0));
    assert_eq!((ttft(2).min, ttft(2).max), (10.0, 295.0));
    let stopped = ix.stopped.as_ref().unwrap();
    assert_eq!(stopped.value, 200.0);
    assert!(
        stopped.reason.starts_with(
            "saturated: output throughput 100.0 tok/s is +0.0% over the best earlier \
             (100.0 tok/s at 100) (less than throughput-gain=5%) while TTFT p99 "
        ),
        "{}",
        stopped.reason
    );
    assert!(stopped
        .reason
        .contains("the lowest earlier (10.0 ms at 20)"));
    assert!(!dir.path().join("rate-400").exists());
    assert!(s.stderr.contains("(1 skipped)"), "{}", s.stderr);
    assert!(
        s.stderr.contains("stopped after rate 200: saturated"),
        "{}",
        s.stderr
    );
    csv_matches_summaries(&s);
    // `--stop-when never` runs every value.
    let dir = temp_dir("never");
    args.extend(["--stop-when", "never"]);
    let s = sweep(dir.path(), &args, &twenty_rows());
    assert_eq!(s.code, 0, "{}", s.stderr);
    let ix = s.index.unwrap();
    assert_eq!(ix.runs.len(), 4);
    assert!(ix.stopped.is_none());
}

/// The same server in real time (mc-mock --engine): rate 20 keeps up,
/// 100 doubles the throughput, 200 only queues.
#[test]
fn a_mock_whose_latency_grows_with_load_stops_the_sweep() {
    let mut flags = vec!["--engine"];
    flags.extend(QUEUE);
    let mock = Mock::start(&flags);
    let dir = temp_dir("mock");
    let s = sweep(
        dir.path(),
        &[
            "--url",
            &mock.url,
            "--model",
            "m",
            "--rate",
            "20,100,200,400",
            "--arrival",
            "constant",
        ],
        &twenty_rows(),
    );
    assert_eq!(s.code, 0, "{}", s.stderr);
    let ix = s.index.as_ref().unwrap();
    let stopped = ix.stopped.as_ref().unwrap();
    assert_eq!(stopped.value, 200.0, "{stopped:?}");
    assert!(stopped.reason.starts_with("saturated: "), "{stopped:?}");
    assert_eq!(ix.runs.len(), 3);
    assert_eq!(completions(&mock, 60), 60);
    csv_matches_summaries(&s);
}

#[test]
fn a_sweep_needs_an_out_dir_and_one_list() {
    let trace = twenty_rows();
    for (args, says) in [
        (
            &["--rate", "1,2"][..],
            "--rate 1,2 is a sweep: give --out-dir DIR",
        ),
        (
            &["--rate", "1,2", "--concurrency", "1,4"][..],
            "only one of --rate, --concurrency and --speedup may be a list",
        ),
        (
            &["--concurrency", "4,4", "--out-dir", "x"][..],
            "4 is listed twice",
        ),
        (
            &["--rate", "1,2", "--out-dir", "x", "--summary", "s.json"][..],
            "drop --output, --summary and --summary-csv",
        ),
        (&["--stop-when", "ttft-p99=2"][..], "a factor like 2x"),
    ] {
        let out = tool("mc-replay")
            .args(args)
            .write_stdin(trace.clone())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // A --speedup sweep of an untimed trace has nothing to speed up.
    let dir = temp_dir("speedup");
    let s = sweep(
        dir.path(),
        &["--speedup", "1,2", "--concurrency", "2"],
        &trace,
    );
    assert_eq!(s.code, 2, "{}", s.stderr);
    assert!(
        s.stderr.contains("needs a trace with timestamps"),
        "{}",
        s.stderr
    );
}

#[test]
fn existing_files_are_kept_unless_forced() {
    let dir = temp_dir("exists");
    let trace = twenty_rows();
    let args = ["--rate", "50,100", "--arrival", "constant"];
    let s = sweep(dir.path(), &args, &trace);
    assert_eq!(s.code, 0, "{}", s.stderr);
    // Mark a file: a refused sweep must leave it as it was.
    let marked = dir.path().join("rate-50/summary.csv");
    std::fs::write(&marked, "mine\n").unwrap();
    let again = sweep(dir.path(), &args, &trace);
    assert_eq!(again.code, 73, "{}", again.stderr);
    assert!(
        again
            .stderr
            .contains("sweep.json already exists (and 7 more of the sweep's files); pass --force"),
        "{}",
        again.stderr
    );
    assert_eq!(std::fs::read_to_string(&marked).unwrap(), "mine\n");
    // One existing file of the sweep's is enough to refuse.
    let dir2 = temp_dir("one");
    std::fs::create_dir(dir2.path().join("rate-100")).unwrap();
    std::fs::write(dir2.path().join("rate-100/results.jsonl"), "").unwrap();
    let one = sweep(dir2.path(), &args, &trace);
    assert_eq!(one.code, 73, "{}", one.stderr);
    assert!(
        one.stderr
            .contains("rate-100/results.jsonl already exists;"),
        "{}",
        one.stderr
    );
    // --force overwrites.
    let forced = sweep(dir.path(), &[&args[..], &["--force"]].concat(), &trace);
    assert_eq!(forced.code, 0, "{}", forced.stderr);
    assert!(std::fs::read_to_string(&marked)
        .unwrap()
        .starts_with("metric,"));
    // A file where the folder should be cannot be created: 73 too.
    let file = dir.path().join("plain-file");
    std::fs::write(&file, "").unwrap();
    let out = tool("mc-replay")
        .args(args)
        .arg("--out-dir")
        .arg(&file)
        .write_stdin(trace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(73));
}

/// One value and no --out-dir is a plain run: results on stdout, no files.
#[test]
fn one_value_is_a_plain_run() {
    let out = tool("mc-replay")
        .args(["--rate", "100", "--arrival", "constant"])
        .args(QUEUE)
        .write_stdin(twenty_rows())
        .output()
        .unwrap();
    assert!(out.status.success());
    let results: Vec<RequestResult> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 20);
    // The last of the 20 queued requests: TTFT 10 · 19 + 10 = 200 ms.
    let max = results.iter().filter_map(|r| r.ttft_ms).fold(0.0, f64::max);
    assert_eq!(max, 200.0);
}

#[test]
fn mc_plot_draws_a_sweep_curve() {
    let dir = temp_dir("plot");
    let mut args = vec![
        "--rate",
        "20,100,200",
        "--arrival",
        "constant",
        "--stop-when",
        "never",
    ];
    args.extend(QUEUE);
    let s = sweep(dir.path(), &args, &twenty_rows());
    assert_eq!(s.code, 0, "{}", s.stderr);
    let out = tool("mc-plot")
        .arg("--sweep")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_success(&out);
    let svg = String::from_utf8(out.stdout).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for title in ["TTFT by output throughput", "Output throughput by rate"] {
        assert!(svg.contains(title), "{title}");
    }
    assert!(!svg.contains("NaN"));
    // A folder that is not a sweep is named.
    let out = tool("mc-plot")
        .arg("--sweep")
        .arg(dir.path().join("rate-20"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(66));
    assert!(String::from_utf8_lossy(&out.stderr).contains("sweep.json"));
}

/// Completion requests the mock saw (its log also holds the `/metrics`
/// scrapes mc-replay makes around each run), once `expected` have come
/// through its log (see `Mock::log_of`).
fn completions(mock: &Mock, expected: usize) -> usize {
    mock.log_of(expected)
        .iter()
        .filter(|r| r["method"] == "POST")
        .count()
}

/// What a sweep writes is what mc-report reads: each value's folder gives
/// back exactly the summary mc-replay wrote, and the sweep folder gives the
/// HTML report its throughput-latency section.
#[test]
fn mc_report_reads_a_sweep_folder_back() {
    let dir = temp_dir("report");
    let mut args = vec!["--rate", "20,100", "--arrival", "constant"];
    args.extend(QUEUE);
    let s = sweep(dir.path(), &args, &twenty_rows());
    assert_eq!(s.code, 0, "{}", s.stderr);
    for name in ["rate-20", "rate-100"] {
        let run = dir.path().join(name);
        let out = tool("mc-report").arg("--json").arg(&run).output().unwrap();
        assert_success(&out);
        let ours: Value = serde_json::from_slice(&out.stdout).unwrap();
        let theirs: Value =
            serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
        assert_eq!(ours, theirs, "{name}");
    }
    let html = dir.path().join("report.html");
    let out = tool("mc-report")
        .arg("--html")
        .arg(&html)
        .arg(dir.path())
        .output()
        .unwrap();
    assert_success(&out);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<h2>Sweep over rate</h2>"));
    assert!(!page.contains("http://") && !page.contains("https://"));
}

/// The prompt text each request carried, in arrival order.
fn prompts(server: &crate::replay::Capture) -> Vec<String> {
    server
        .requests()
        .iter()
        .map(|(_, body)| {
            body["messages"][0]["content"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

#[test]
fn each_value_of_a_sweep_sends_prompts_of_its_own_unless_asked() {
    // One row of 4 blocks, a sweep of two values: by default the second
    // value's prompt shares no text with the first's (a server's prefix
    // cache could not serve it), with --same-prompts it is the same.
    let trace = lines(&[
        json!({"timestamp": 0, "input_length": 64, "output_length": 2,
                                "hash_ids": [1, 2, 3, 4]}),
    ]);
    for (extra, same) in [(None, false), (Some("--same-prompts"), true)] {
        let server = crate::replay::Capture::start();
        let dir = temp_dir("prompts");
        let out_dir = dir.path().join("sweep");
        let mut cmd = tool("mc-replay");
        cmd.args(["--url", &server.url, "--model", "m", "--no-server-metrics"])
            .args([
                "--block-size",
                "16",
                "--rate",
                "50,100",
                "--stop-when",
                "never",
            ])
            .args(["--out-dir", out_dir.to_str().unwrap()]);
        if let Some(e) = extra {
            cmd.arg(e);
        }
        let out = cmd.write_stdin(trace.clone()).output().unwrap();
        assert_success(&out);
        let p = prompts(&server);
        assert_eq!(p.len(), 2, "one request per value");
        assert_eq!(p[0] == p[1], same, "{extra:?}: {p:?}");
        if !same {
            // Not even the first block's words in common.
            let first_block: Vec<&str> = p[0].split_whitespace().take(16).collect();
            assert!(!p[1].starts_with(&first_block.join(" ")), "{p:?}");
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(if same {
            "--same-prompts)"
        } else {
            "prompts of its own seed"
        }));
        // Each value's summary says which seed its prompts came from.
        let seeds: Vec<u64> = ["rate-50", "rate-100"]
            .iter()
            .map(|v| {
                let s: Summary = serde_json::from_slice(
                    &std::fs::read(out_dir.join(v).join("summary.json")).unwrap(),
                )
                .unwrap();
                s.run.seed
            })
            .collect();
        assert_eq!(seeds[0], 0);
        assert_eq!(seeds[0] == seeds[1], same);
    }
}

/// `--reset-prefix-cache` empties the server's cache before each value:
/// with `--same-prompts` the second value then finds nothing the first
/// left (vLLM's dev-mode `POST /reset_prefix_cache`, mc-mock --dev-mode).
#[test]
fn reset_prefix_cache_starts_each_value_cold() {
    // One row of 3 full blocks of 16 words (48 tokens).
    let trace = lines(&[
        json!({"timestamp": 0, "input_length": 48, "output_length": 1, "hash_ids": [1, 2, 3]}),
    ]);
    let cached = |reset: bool| {
        let mock = Mock::start(&["--prefix-cache", "--dev-mode"]);
        let dir = temp_dir("reset");
        let out_dir = dir.path().join("sweep");
        let mut cmd = tool("mc-replay");
        cmd.args(["--url", &mock.url, "--model", "m", "--block-size", "16"])
            .args(["--rate", "50,100", "--stop-when", "never", "--same-prompts"])
            .args(["--out-dir", out_dir.to_str().unwrap()]);
        if reset {
            cmd.arg("--reset-prefix-cache");
        }
        let out = cmd.write_stdin(trace.clone()).output().unwrap();
        assert_success(&out);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let second: RequestResult = serde_json::from_str(
            std::fs::read_to_string(out_dir.join("rate-100").join("results.jsonl"))
                .unwrap()
                .lines()
                .next()
                .unwrap(),
        )
        .unwrap();
        (second.cached_tokens, stderr)
    };
    // Without the reset the second value's prompt is all in the cache.
    assert_eq!(cached(false).0, Some(48));
    let (hit, stderr) = cached(true);
    assert_eq!(hit, Some(0), "{stderr}");
    assert_eq!(
        stderr
            .matches("mc-replay: prefix cache reset (POST ")
            .count(),
        2,
        "{stderr}"
    );
    assert!(
        stderr.contains("before each value (--reset-prefix-cache)"),
        "{stderr}"
    );

    // A server that does not serve it (vLLM without dev mode: 404) stops
    // the run before anything is sent, exit 69, naming the fix.
    let mock = Mock::start(&[]);
    let out = tool("mc-replay")
        .args(["--url", &mock.url, "--model", "m", "--reset-prefix-cache"])
        .write_stdin(trace.clone())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("HTTP 404") && stderr.contains("VLLM_SERVER_DEV_MODE=1"),
        "{stderr}"
    );
    // Only the reset reached it: no completion.
    std::thread::sleep(Duration::from_millis(100));
    let paths: Vec<Value> = mock.requests().iter().map(|r| r["path"].clone()).collect();
    assert_eq!(paths, [json!("/reset_prefix_cache")]);
    // The engine model has no cache to reset: a usage error.
    tool("mc-replay")
        .arg("--reset-prefix-cache")
        .write_stdin(trace)
        .assert()
        .code(2);
}
