//! `mc-replay --shard I/N` and mc-report's merge: the plan (deterministic,
//! sessions whole, balanced), shards as separate processes against one
//! mc-mock equal to a single run, and the merge's refusals.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::replay::schema::{RequestResult, Summary};
use crate::replay::{Capture, Mock};
use crate::util::{data_dir, run, run_code, run_ok, run_ok_both, tool};

/// A trace of sessions (2–4 turns) and single rows over about `span_ms`.
fn trace(rows: usize, span_ms: u64) -> String {
    let mut s = String::new();
    let mut turns: HashMap<u64, u64> = HashMap::new();
    for i in 0..rows as u64 {
        let ts = i * span_ms / rows as u64;
        let len = 20 + (i * 37) % 200;
        let out = 2 + i % 5;
        let ids: Vec<String> = (0..len.div_ceil(16))
            .map(|b| (i * 100 + b).to_string())
            .collect();
        if i % 3 == 2 {
            s.push_str(&format!(
                "{{\"timestamp\": {ts}, \"input_length\": {len}, \"output_length\": {out}, \"hash_ids\": [{}]}}\n",
                ids.join(", ")
            ));
        } else {
            let sid = i % 7;
            let turn = turns.entry(sid).or_default();
            *turn += 1;
            if *turn == 1 {
                s.push_str(&format!(
                    "{{\"timestamp\": {ts}, \"session_id\": \"s{sid}\", \"input_length\": {len}, \"output_length\": {out}, \"hash_ids\": [{}]}}\n",
                    ids.join(", ")
                ));
            } else {
                s.push_str(&format!(
                    "{{\"session_id\": \"s{sid}\", \"delay\": 5, \"input_length\": {len}, \"output_length\": {out}, \"hash_ids\": [{}]}}\n",
                    ids.join(", ")
                ));
            }
        }
    }
    s
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn results(path: &Path) -> Vec<RequestResult> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

fn summary(path: &Path) -> Summary {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Runs `n` shards of `trace_path` on the engine model into `dir`.
fn engine_shards(dir: &Path, trace_path: &Path, n: u32) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let out = dir.join(format!("shard-{i}.jsonl"));
            let shard = format!("{i}/{n}");
            run_ok(
                "mc-replay",
                &[
                    "--shard",
                    &shard,
                    "-i",
                    trace_path.to_str().unwrap(),
                    "-o",
                    out.to_str().unwrap(),
                ],
                "",
            );
            out
        })
        .collect()
}

/// Runs `n` shards of `trace_path` against `url` into `dir`, one after
/// another, each with `extra` options (per shard: `extra(i)`).
fn server_shards(
    url: &str,
    dir: &Path,
    trace_path: &Path,
    n: u32,
    extra: &dyn Fn(u32) -> Vec<String>,
) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let out = dir.join(format!("shard-{i}.jsonl"));
            let shard = format!("{i}/{n}");
            let mut a: Vec<String> = ["--url", url, "--model", "m", "--shard", &shard, "-i"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            a.push(trace_path.to_str().unwrap().into());
            a.push("-o".into());
            a.push(out.to_str().unwrap().into());
            a.extend(extra(i));
            run_ok("mc-replay", &a, "");
            out
        })
        .collect()
}

#[test]
fn plan_is_deterministic_sessions_whole_and_balanced() {
    let dir = tempfile::tempdir().unwrap();
    let t = crate::util::write_file(dir.path(), "t.jsonl", &trace(90, 3000));
    let tp = t.to_str().unwrap();
    let a = run_ok("mc-replay", &["--plan", "4", "-i", tp], "");
    let b = run_ok("mc-replay", &["--plan", "4", "-i", tp], "");
    assert_eq!(a, b);
    assert!(a.contains("plan digest"), "{a}");
    let pct: f64 = a
        .lines()
        .find_map(|l| l.strip_prefix("largest shard's tokens: "))
        .and_then(|l| l.split('%').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(pct < 110.0, "{a}");
    // Every row in exactly one shard, every session in one shard only,
    // every shard naming the same plan.
    let files = engine_shards(dir.path(), &t, 4);
    let mut line_shard: BTreeMap<u64, String> = BTreeMap::new();
    let mut session_shard: HashMap<String, String> = HashMap::new();
    let mut digests = Vec::new();
    for f in &files {
        for r in results(f) {
            let shard = r.shard.clone().unwrap();
            assert!(line_shard.insert(r.line, shard.clone()).is_none());
            if let Some(s) = &r.session_id {
                let first = session_shard.entry(s.clone()).or_insert(shard.clone());
                assert_eq!(*first, shard, "session {s} split");
            }
            digests.push(r.plan_digest.clone().unwrap());
        }
        let side = summary(&f.with_extension("summary.json"));
        let plan = side.run.shard.unwrap();
        assert_eq!(plan.count, 4);
        assert!(a.contains(&plan.plan_digest), "{a}");
        digests.push(plan.plan_digest);
    }
    assert_eq!(line_shard.len(), 90);
    assert_eq!(*line_shard.keys().next_back().unwrap(), 90);
    digests.dedup();
    assert_eq!(digests.len(), 1);
}

#[test]
fn real_trace_balance_at_8_shards() {
    let Some(d) = data_dir("shard::real_trace_balance_at_8_shards") else {
        return;
    };
    let t = d.join("mooncake/conversation_trace.jsonl");
    let out = run_ok("mc-replay", &["--plan", "8", "-i", t.to_str().unwrap()], "");
    let pct: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("largest shard's tokens: "))
        .and_then(|l| l.split('%').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(pct <= 105.0, "{out}");
}

#[test]
fn four_shards_against_one_mock_are_the_single_run() {
    let dir = tempfile::tempdir().unwrap();
    let t = crate::util::write_file(dir.path(), "t.jsonl", &trace(48, 1200));
    let tp = t.to_str().unwrap();
    let mock = Mock::start(&["--ttft-ms", "5", "--itl-ms", "1"]);
    // The single run.
    let single = dir.path().join("single.jsonl");
    run_ok(
        "mc-replay",
        &["--url", &mock.url, "-i", tp, "-o", single.to_str().unwrap()],
        "",
    );
    let single_log = mock.log_of(48);
    // Four processes, one common start.
    let start = (now_ms() + 4000).to_string();
    let children: Vec<_> = (0..4)
        .map(|i| {
            let out = dir.path().join(format!("shard-{i}.jsonl"));
            Command::new(assert_cmd::cargo::cargo_bin("mc-replay"))
                .args(["--url", &mock.url, "-i", tp, "--start-at", &start])
                .args(["--shard", &format!("{i}/4"), "-o", out.to_str().unwrap()])
                .env_remove("OPENAI_API_KEY")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let all_log = mock.log_of(96);
    let sharded_log = &all_log[single_log.len()..];
    // The server saw each row once, with the same prompt and answer sizes.
    let key = |v: &Value| {
        (
            v["x_trace_line"].as_str().unwrap_or("").to_string(),
            v["prompt_tokens"].as_u64(),
            v["max_tokens"].as_u64(),
        )
    };
    let mut a: Vec<_> = single_log
        .iter()
        .filter(|v| v["x_trace_line"].is_string())
        .map(key)
        .collect();
    let mut b: Vec<_> = sharded_log
        .iter()
        .filter(|v| v["x_trace_line"].is_string())
        .map(key)
        .collect();
    a.sort();
    b.sort();
    assert_eq!(a.len(), 48);
    assert_eq!(a, b);
    // Request ids never repeat across shards.
    let ids: std::collections::HashSet<_> = sharded_log
        .iter()
        .filter_map(|v| v["x_request_id"].as_str())
        .collect();
    assert_eq!(ids.len(), 48);
    // Each row due at the single run's time after the common start.
    let files: Vec<PathBuf> = (0..4)
        .map(|i| dir.path().join(format!("shard-{i}.jsonl")))
        .collect();
    let due: BTreeMap<u64, f64> = results(&single)
        .iter()
        .filter(|r| r.turn == 0)
        .map(|r| (r.line, r.t_sched_ms))
        .collect();
    for f in &files {
        for r in results(f).iter().filter(|r| r.turn == 0) {
            assert_eq!(due[&r.line], r.t_sched_ms, "line {}", r.line);
        }
    }
    // mc-report over the shards: the single run's counts and token sums.
    let args: Vec<&str> = std::iter::once("--json")
        .chain(files.iter().map(|f| f.to_str().unwrap()))
        .collect();
    let (merged, err) = run_ok_both("mc-report", &args, "");
    assert!(err.contains("1 run, 48 result lines from 4 files"), "{err}");
    let merged: Summary = serde_json::from_str(&merged).unwrap();
    let one: Summary = serde_json::from_str(&run_ok(
        "mc-report",
        &["--json", single.to_str().unwrap()],
        "",
    ))
    .unwrap();
    let counts = |s: &Summary| {
        (
            s.requests.sent,
            s.requests.ok,
            s.requests.failed,
            s.requests.not_sent,
            s.tokens.input_intended,
            s.tokens.input_reported,
            s.tokens.output,
            s.tokens.output_requested,
            s.run.rows,
        )
    };
    assert_eq!(counts(&merged), counts(&one));
    assert_eq!(merged.requests.sent, 48);
    assert_eq!(merged.trace_rate, one.trace_rate);
    let plan = merged.run.shard.unwrap();
    assert_eq!((plan.index, plan.count), (None, 4));
    assert_eq!(plan.rows.iter().sum::<u64>(), 48);
}

#[test]
fn shards_send_the_single_runs_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let t = crate::util::write_file(dir.path(), "t.jsonl", &trace(15, 300));
    let tp = t.to_str().unwrap();
    let bodies = |shards: &[&str]| -> BTreeMap<String, Value> {
        let cap = Capture::start();
        for s in shards {
            let mut args = vec![
                "--url",
                &cap.url,
                "-i",
                tp,
                "--no-server-metrics",
                "--model",
                "m",
            ];
            if !s.is_empty() {
                args.extend(["--shard", s]);
            }
            run_ok("mc-replay", &args, "");
        }
        cap.requests()
            .into_iter()
            .filter_map(|(h, body)| {
                let line = h.get("x-trace-line")?.clone();
                Some((line, body["messages"].clone()))
            })
            .collect()
    };
    let one = bodies(&[""]);
    let three = bodies(&["0/3", "1/3", "2/3"]);
    assert_eq!(one.len(), 15);
    assert_eq!(one, three);
}

#[test]
fn a_late_shard_exits_75_and_says_how_late() {
    let dir = tempfile::tempdir().unwrap();
    let t = crate::util::write_file(dir.path(), "t.jsonl", &trace(10, 100));
    let at = (now_ms() - 5000).to_string();
    let err = run_code(
        "mc-replay",
        &[
            "-i",
            t.to_str().unwrap(),
            "--shard",
            "1/2",
            "--start-at",
            &at,
        ],
        "",
        75,
    );
    assert!(
        err.contains("ms late") && err.contains("--start-grace-ms 1000"),
        "{err}"
    );
    // Within the grace: runs.
    let at = (now_ms() - 100).to_string();
    run_ok(
        "mc-replay",
        &[
            "-i",
            t.to_str().unwrap(),
            "--shard",
            "1/2",
            "--start-at",
            &at,
        ],
        "",
    );
}

#[test]
fn usage_errors() {
    let t = trace(10, 100);
    for (args, want) in [
        (
            vec!["--shard", "0/2", "--max-requests", "3"],
            "--max-requests",
        ),
        (vec!["--shard", "0/2", "--warmup", "1"], "--warmup"),
        (vec!["--start-at", "1"], "--shard"),
        (vec!["--shard", "env"], "SLURM_PROCID"),
        (vec!["--shard", "2/2"], "not a shard"),
    ] {
        let r = tool("mc-replay")
            .args(&args)
            .env_remove("SLURM_PROCID")
            .env_remove("JOB_COMPLETION_INDEX")
            .write_stdin(t.clone())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // From srun's environment.
    let r = tool("mc-replay")
        .args(["--shard", "env"])
        .env("SLURM_PROCID", "1")
        .env("SLURM_NTASKS", "3")
        .write_stdin(t)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success() && err.contains("shard 1/3"), "{err}");
}

#[test]
fn merge_refuses_two_plans_a_missing_shard_and_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let a = crate::util::write_file(dir.path(), "a.jsonl", &trace(30, 300));
    let b = crate::util::write_file(dir.path(), "b.jsonl", &trace(31, 300));
    let da = dir.path().join("a");
    let db = dir.path().join("b");
    std::fs::create_dir_all(&da).unwrap();
    std::fs::create_dir_all(&db).unwrap();
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1"]);
    let fa = server_shards(&mock.url, &da, &a, 3, &|_| vec![]);
    let fb = server_shards(&mock.url, &db, &b, 3, &|_| vec![]);
    let p = |f: &PathBuf| f.to_str().unwrap().to_string();
    // The whole plan merges.
    let (_, err) = run_ok_both("mc-report", &[p(&fa[0]), p(&fa[1]), p(&fa[2])], "");
    assert!(err.contains("30 result lines from 3 files"), "{err}");
    // A directory of shard files merges too.
    run_ok("mc-report", &[da.to_str().unwrap()], "");
    // Two plans.
    let err = run_code("mc-report", &[p(&fa[0]), p(&fb[1]), p(&fa[2])], "", 65);
    assert!(err.contains("two shard plans"), "{err}");
    assert!(
        err.contains("a/shard-0.jsonl") && err.contains("b/shard-1.jsonl"),
        "{err}"
    );
    // A missing shard, named.
    let err = run_code("mc-report", &[p(&fa[0]), p(&fa[2])], "", 65);
    assert!(
        err.contains("shard 1/3") && err.contains("missing"),
        "{err}"
    );
    // A shard given twice: the same file, or a copy.
    let err = run_code(
        "mc-report",
        &[p(&fa[0]), p(&fa[0]), p(&fa[1]), p(&fa[2])],
        "",
        65,
    );
    assert!(
        err.contains("appears twice") && err.contains("shard-0.jsonl line 1"),
        "{err}"
    );
    // An incomplete shard (a line lost).
    let text = std::fs::read_to_string(&fa[1]).unwrap();
    let cut: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
    std::fs::write(&fa[1], cut).unwrap();
    let err = run_code("mc-report", &[p(&fa[0]), p(&fa[1]), p(&fa[2])], "", 65);
    assert!(err.contains("shard 1/3 is incomplete"), "{err}");
}

#[test]
fn the_same_file_twice_is_not_counted_twice() {
    // Issue 24: `mc-report r.jsonl r.jsonl` doubled every count.
    let dir = tempfile::tempdir().unwrap();
    let t = crate::util::write_file(dir.path(), "t.jsonl", &trace(5, 100));
    let r = dir.path().join("r.jsonl");
    run_ok(
        "mc-replay",
        &["-i", t.to_str().unwrap(), "-o", r.to_str().unwrap()],
        "",
    );
    let rp = r.to_str().unwrap();
    let out = run("mc-report", &[rp, rp], "");
    assert_eq!(out.code, Some(65), "{}", out.stderr);
    assert!(out.stderr.contains("appears twice"), "{}", out.stderr);
    assert!(out.stderr.contains("r.jsonl line 1 and"), "{}", out.stderr);
}

#[test]
fn emitted_jobs_run_every_shard() {
    let dir = tempfile::tempdir().unwrap();
    let t = crate::util::write_file(dir.path(), "t.jsonl", &trace(20, 2000));
    let tp = t.to_str().unwrap();
    let plan = run_ok("mc-replay", &["--plan", "3", "-i", tp], "");
    let digest = plan
        .lines()
        .find_map(|l| l.strip_prefix("plan digest  "))
        .unwrap()
        .to_string();
    // Slurm: one task per shard, the shard from srun, one start for all.
    let sbatch = run_ok(
        "mc-replay",
        &[
            "--url",
            "http://gpu:8000",
            "-i",
            tp,
            "--seed",
            "4",
            "--emit-slurm",
            "--shards",
            "3",
            "--results-dir",
            "/shared/run1",
            "--start-in",
            "45",
        ],
        "",
    );
    for want in [
        "#SBATCH --nodes=3\n#SBATCH --ntasks=3\n#SBATCH --ntasks-per-node=1\n",
        "export RESULTS=/shared/run1",
        "+ 45000 ))",
        "srun --nodes=3 --ntasks=3 --ntasks-per-node=1 ",
        "--shard env --start-at \"$START_AT\"",
        "--output \"$RESULTS/shard-$SLURM_PROCID.jsonl\"",
        "--url http://gpu:8000 --seed 4",
        &digest,
    ] {
        assert!(sbatch.contains(want), "{want}: {sbatch}");
    }
    let err = run_code(
        "mc-replay",
        &[
            "--url",
            "http://gpu:8000",
            "-i",
            tp,
            "--emit-slurm",
            "--shards",
            "3",
            "--summary",
            "s.json",
        ],
        "",
        2,
    );
    assert!(err.contains("--summary"), "{err}");
    // Without --url every shard would simulate an engine of its own.
    for emit in [&["--emit-slurm"][..], &["--emit-k8s-job", "--image", "i"]] {
        let mut a = vec!["-i", tp, "--shards", "3"];
        a.extend(emit);
        let err = run_code("mc-replay", &a, "", 2);
        assert!(err.contains("give --url"), "{err}");
    }
    // Kubernetes: an Indexed Job with the issue's fields.
    let job = run_ok(
        "mc-replay",
        &[
            "--url",
            "http://vllm:8000",
            "-i",
            tp,
            "--emit-k8s-job",
            "--shards",
            "3",
            "--image",
            "mctrace:0.1",
            "--job-name",
            "replay1",
        ],
        "",
    );
    for want in [
        "apiVersion: \"batch/v1\"",
        "kind: \"Job\"",
        "completionMode: \"Indexed\"",
        "completions: 3\n",
        "parallelism: 3\n",
        "backoffLimitPerIndex: 0\n",
        "maxFailedIndexes: 0\n",
        "podReplacementPolicy: \"Failed\"",
        "restartPolicy: \"Never\"",
        "activeDeadlineSeconds: ",
        "- action: \"FailJob\"\n      onExitCodes:\n        containerName: \"mc-replay\"\n        operator: \"In\"\n        values:\n        - 75\n",
        "topologyKey: \"kubernetes.io/hostname\"",
        "whenUnsatisfiable: \"DoNotSchedule\"",
        "maxSkew: 1\n",
        "configMap:\n          name: \"replay1-trace\"",
        "claimName: \"replay1-results\"",
        "- \"/trace/t.jsonl\"",
        "- \"--shard\"\n        - \"env\"\n        - \"--shards\"\n        - \"3\"",
        "- \"/results/shard-$(MC_SHARD).jsonl\"",
        "batch.kubernetes.io/job-completion-index",
        "image: \"mctrace:0.1\"",
        &digest,
    ] {
        assert!(job.contains(want), "{want}: {job}");
    }
}

#[test]
fn shards_keep_the_single_runs_arrival_times_under_rate() {
    let dir = tempfile::tempdir().unwrap();
    let t = crate::util::write_file(dir.path(), "t.jsonl", &trace(40, 1000));
    let tp = t.to_str().unwrap();
    for extra in [
        &["--rate", "80"][..],
        &["--rate", "80", "--arrival", "constant"],
        &[],
    ] {
        let due = |shard: Option<String>| -> BTreeMap<u64, f64> {
            let mut args = vec!["-i", tp];
            args.extend_from_slice(extra);
            if let Some(s) = &shard {
                args.extend(["--shard", s.as_str()]);
            }
            run_ok("mc-replay", &args, "")
                .lines()
                .map(|l| serde_json::from_str::<RequestResult>(l).unwrap())
                .filter(|r| r.turn == 0)
                .map(|r| (r.line, r.t_sched_ms))
                .collect()
        };
        let one = due(None);
        let mut parts = BTreeMap::new();
        for i in 0..3 {
            parts.extend(due(Some(format!("{i}/3"))));
        }
        assert_eq!(one, parts, "{extra:?}");
    }
}

#[test]
fn emitted_jobs_never_hold_a_secret() {
    // Issue 36: the key, a URL's password, a query key and a credential
    // header were written verbatim into the script and the Job's args.
    let dir = tempfile::tempdir().unwrap();
    let t = crate::util::write_file(dir.path(), "t.jsonl", &trace(20, 2000));
    let tp = t.to_str().unwrap();
    let common = [
        "--url",
        "http://alice:pw0rd-9@gpu:8000/v1?api_key=qk-4242",
        "--api-key",
        "sk-SECRET-77",
        "--header",
        "Authorization: Bearer tok-5150",
        "--header",
        "x-trace: visible-1",
        "--metrics-url=http://gpu:8000/metrics?token=mt-3131",
        "-i",
        tp,
        "--shards",
        "3",
    ];
    let secrets = [
        "pw0rd-9",
        "alice",
        "qk-4242",
        "sk-SECRET-77",
        "tok-5150",
        "mt-3131",
    ];
    let mut slurm = common.to_vec();
    slurm.extend(["--emit-slurm", "--results-dir", "/shared/run1"]);
    let sbatch = run_ok("mc-replay", &slurm, "");
    let mut k8s = common.to_vec();
    k8s.extend([
        "--emit-k8s-job",
        "--image",
        "mctrace:0.1",
        "--job-name",
        "r1",
    ]);
    let job = run_ok("mc-replay", &k8s, "");
    for text in [&sbatch, &job] {
        for s in secrets {
            assert!(!text.contains(s), "{s} written: {text}");
        }
        assert!(text.contains("visible-1"), "{text}");
    }
    for want in [
        ": \"${OPENAI_API_KEY:?export OPENAI_API_KEY",
        "--url \"$MC_REPLAY_URL\"",
        "--header \"$MC_REPLAY_HEADER_1\"",
        "--metrics-url \"$MC_REPLAY_METRICS_URL\"",
        "--header 'x-trace: visible-1'",
    ] {
        assert!(sbatch.contains(want), "{want}: {sbatch}");
    }
    let srun = sbatch.split("srun ").nth(1).unwrap();
    assert!(!srun.contains("--api-key"), "{srun}");
    for want in [
        "- name: \"OPENAI_API_KEY\"\n          valueFrom:\n            secretKeyRef:\n              key: \"api-key\"\n              name: \"r1-secrets\"",
        "- \"--url\"\n        - \"$(MC_REPLAY_URL)\"",
        "- \"--header\"\n        - \"$(MC_REPLAY_HEADER_1)\"",
        "- \"--metrics-url\"\n        - \"$(MC_REPLAY_METRICS_URL)\"",
        "kubectl create secret generic r1-secrets --from-literal=api-key=\"$OPENAI_API_KEY\"",
    ] {
        assert!(job.contains(want), "{want}: {job}");
    }
    // The script is valid shell, and stops before srun without a secret.
    let script = crate::util::write_file(dir.path(), "run.sbatch", &sbatch);
    let out = Command::new("/bin/bash")
        .arg(&script)
        .env_remove("OPENAI_API_KEY")
        .env("MC_REPLAY", "/bin/false")
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("export OPENAI_API_KEY"),
        "{err}"
    );
}

#[test]
fn merge_refuses_shards_that_ran_different_loads() {
    // Issue 36: shards with different --start-at, --concurrency,
    // --no-exact-output, --timeout, --header names or on the engine model
    // merged with exit 0.
    let dir = tempfile::tempdir().unwrap();
    let t = crate::util::write_file(dir.path(), "t.jsonl", &trace(12, 100));
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1"]);
    let soon = now_ms() + 300;
    let cases: [(&str, Vec<String>, Vec<String>); 6] = [
        (
            "shard.start_at_unix_ms",
            vec![
                "--start-at".into(),
                soon.to_string(),
                "--start-grace-ms".into(),
                "60000".into(),
            ],
            vec![
                "--start-at".into(),
                (soon + 1).to_string(),
                "--start-grace-ms".into(),
                "60000".into(),
            ],
        ),
        (
            "concurrency",
            vec!["--concurrency".into(), "4".into()],
            vec!["--concurrency".into(), "8".into()],
        ),
        (
            "options.exact_output",
            vec![],
            vec!["--no-exact-output".into()],
        ),
        (
            "options.timeout_s",
            vec![],
            vec!["--timeout".into(), "30".into()],
        ),
        (
            "options.header_names",
            vec!["--header".into(), "x-a: 1".into()],
            vec!["--header".into(), "x-b: 1".into()],
        ),
        (
            "options.extra_body_sha256",
            vec![],
            vec!["--extra-body".into(), r#"{"top_k": 3}"#.into()],
        ),
    ];
    for (k, (name, first, rest)) in cases.iter().enumerate() {
        let d = dir.path().join(format!("c{k}"));
        std::fs::create_dir_all(&d).unwrap();
        let files = server_shards(&mock.url, &d, &t, 2, &|i| {
            if i == 0 {
                first.clone()
            } else {
                rest.clone()
            }
        });
        let args: Vec<&str> = files.iter().map(|f| f.to_str().unwrap()).collect();
        let err = run_code("mc-report", &args, "", 65);
        assert!(
            err.contains(&format!("the shards ran different options: {name} is")),
            "{name}: {err}"
        );
        assert!(
            err.contains("shard-0.summary.json") && err.contains("shard-1.summary.json"),
            "{err}"
        );
    }
    // The same options merge.
    let d = dir.path().join("same");
    std::fs::create_dir_all(&d).unwrap();
    let files = server_shards(&mock.url, &d, &t, 2, &|_| {
        vec!["--timeout".into(), "30".into()]
    });
    let args: Vec<&str> = files.iter().map(|f| f.to_str().unwrap()).collect();
    run_ok("mc-report", &args, "");
    // Engine shards: each simulated its own engine.
    let e = dir.path().join("engine");
    std::fs::create_dir_all(&e).unwrap();
    let files = engine_shards(&e, &t, 2);
    let args: Vec<&str> = files.iter().map(|f| f.to_str().unwrap()).collect();
    let err = run_code("mc-report", &args, "", 65);
    assert!(
        err.contains("engine model") && err.contains("not merged"),
        "{err}"
    );
    // A shard count past --shard's limit is refused, not allocated.
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let huge = text.replace("\"shard\":\"0/2\"", "\"shard\":\"0/4000000000\"");
    assert_ne!(huge, text);
    std::fs::write(&files[0], huge).unwrap();
    let err = run_code("mc-report", &args, "", 65);
    assert!(
        err.contains("0/4000000000") && err.contains("65535"),
        "{err}"
    );
}

#[test]
fn a_start_at_beyond_the_limit_is_refused_and_a_near_one_is_announced() {
    // Issue 36: --start-at years away (a value in µs) waited silently
    // forever.
    let dir = tempfile::tempdir().unwrap();
    let t = crate::util::write_file(dir.path(), "t.jsonl", &trace(4, 100));
    let tp = t.to_str().unwrap();
    let far = (now_ms() * 1000).to_string();
    let err = run_code(
        "mc-replay",
        &["-i", tp, "--shard", "0/1", "--start-at", &far],
        "",
        2,
    );
    assert!(
        err.contains(&format!("--start-at {far} is")) && err.contains("more than the limit"),
        "{err}"
    );
    let soon = (now_ms() + 2500).to_string();
    let (_, err) = run_ok_both(
        "mc-replay",
        &[
            "-i",
            tp,
            "--shard",
            "0/1",
            "--start-at",
            &soon,
            "--start-grace-ms",
            "60000",
        ],
        "",
    );
    assert!(
        err.contains("shard 0/1 waits") && err.contains(&format!("for --start-at {soon} (20")),
        "{err}"
    );
}

#[test]
fn a_trace_larger_than_a_configmap_needs_a_volume() {
    // Issue 36: the Job always mounted the trace from a ConfigMap (1 MiB
    // at most), so the project's own 2.9 MB trace could not run.
    let dir = tempfile::tempdir().unwrap();
    let mut text = trace(20, 2000);
    while text.len() <= 1 << 20 {
        text = text.clone() + &text;
    }
    let t = crate::util::write_file(dir.path(), "big.jsonl", &text);
    let tp = t.to_str().unwrap();
    let base = [
        "--url",
        "http://vllm:8000",
        "-i",
        tp,
        "--emit-k8s-job",
        "--shards",
        "2",
        "--image",
        "mctrace:0.1",
        "--job-name",
        "r2",
    ];
    let err = run_code("mc-replay", &base, "", 65);
    assert!(
        err.contains(&format!("is {} bytes", text.len()))
            && err.contains("1048576 bytes")
            && err.contains("--trace-volume CLAIM"),
        "{err}"
    );
    let mut with = base.to_vec();
    with.extend(["--trace-volume", "traces"]);
    let job = run_ok("mc-replay", &with, "");
    assert!(
        job.contains(
            "      - name: \"trace\"\n        persistentVolumeClaim:\n          claimName: \"traces\"\n          readOnly: true\n"
        ),
        "{job}"
    );
    assert!(job.contains("- \"/trace/big.jsonl\""), "{job}");
    assert!(
        !job.contains("configMap") && !job.contains("configmap"),
        "{job}"
    );
    // Only for the Job.
    let mut slurm: Vec<&str> = base[..4].to_vec();
    slurm.extend(["--emit-slurm", "--shards", "2", "--trace-volume", "traces"]);
    run_code("mc-replay", &slurm, "", 2);
}
