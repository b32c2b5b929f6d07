//! `--emit-slurm` and `--emit-k8s-job`: the job that runs every shard of
//! this very command line.
//!
//! The shards' command is this invocation's arguments less the job's own
//! options (`--emit-*`, `--shards`, `--image`, `--start-in`,
//! `--results-dir`, `--job-name`) and the per-shard ones the job sets
//! (`--shard env`, `--start-at`, `--output` into the results folder, the
//! input's path as the nodes see it). The trace is read and planned here
//! first, so a bad trace fails before the job is submitted, and the plan's
//! digest is written into the job for `mc-report` to match.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::super::plan::{load_hashed, Job};
use crate::error::{Error, Result};

/// Options that belong to the job, not to a shard: (name, takes a value).
const JOB_OPTIONS: [(&str, bool); 13] = [
    ("--start-grace-ms", true),
    ("--emit-slurm", false),
    ("--emit-k8s-job", false),
    ("--shards", true),
    ("--image", true),
    ("--start-in", true),
    ("--results-dir", true),
    ("--job-name", true),
    ("--shard", true),
    ("--start-at", true),
    ("--output", true),
    ("--input", true),
    ("--plan", true),
];

/// Options a shard cannot take from one command line shared by all.
const REFUSED: [&str; 3] = ["--summary", "--summary-csv", "--metrics-out"];

/// The slack `activeDeadlineSeconds` gives past the start, the schedule
/// and `--timeout` (the last request's drain).
const DEADLINE_SLACK_S: u64 = 300;

/// This invocation's arguments less the job's options (`-i`/`-o` too).
pub fn shard_args(argv: &[OsString]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut it = argv.iter().map(|a| a.to_string_lossy().into_owned());
    while let Some(a) = it.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        if let Some(r) = REFUSED.iter().find(|r| **r == name) {
            return Err(Error::usage(format!(
                "{r} with --emit-*: every shard writes its summary beside its results in \
                 --results-dir (shard-I.summary.json); leave {r} out"
            )));
        }
        // `-i FILE`, `-iFILE`, `-o FILE`, `-oFILE`.
        if let Some(rest) = name.strip_prefix("-i").or_else(|| name.strip_prefix("-o")) {
            if !name.starts_with("--") {
                if rest.is_empty() {
                    it.next();
                }
                continue;
            }
        }
        match JOB_OPTIONS.iter().find(|(n, _)| *n == name) {
            Some((_, true)) if inline.is_none() => {
                it.next();
            }
            Some(_) => {}
            None => out.push(a),
        }
    }
    Ok(out)
}

/// `'text'` for a POSIX shell.
pub fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@%+".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).map_err(|e| Error::usage(format!("{}: {e}", p.display())))
}

/// Prints the job to stdout.
pub fn run(opts: &Job) -> Result<()> {
    let text = job(opts)?;
    print!("{text}");
    Ok(())
}

/// The job's text for the options of `--emit-*` ([`Job`]).
pub fn job(opts: &Job) -> Result<String> {
    let (n, input, rest) = (opts.shards, opts.input.as_path(), &opts.rest);
    let (trace, block_size, sha) = load_hashed(&opts.source, true)?;
    let plan = super::plan(&trace, block_size, n, sha);
    let span_s = super::super::schedule::first_timestamp(&trace)
        .map(|t0| {
            let last = trace
                .turns
                .iter()
                .filter_map(|t| t.timestamp_ms)
                .fold(t0, f64::max);
            ((last - t0) / opts.speedup / 1000.0).ceil() as u64
        })
        .unwrap_or(0);
    if opts.k8s {
        k8s(opts, n, rest, input, &plan.digest, span_s)
    } else {
        slurm(opts, n, rest, input, &plan)
    }
}

fn slurm(
    opts: &Job,
    n: u32,
    rest: &[String],
    input: &Path,
    plan: &super::ShardPlan,
) -> Result<String> {
    let results = absolute(
        opts.results_dir
            .as_deref()
            .unwrap_or(Path::new("mc-replay-results")),
    )?;
    let input = absolute(input)?;
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "mc-replay".into());
    let name = &opts.job_name;
    let mut s = String::new();
    let _ = writeln!(s, "#!/bin/bash");
    let _ = writeln!(
        s,
        "# Written by mc-replay --emit-slurm: {n} shards of {}, one task each.",
        input.display()
    );
    let _ = writeln!(s, "# plan digest {}", plan.digest);
    let _ = writeln!(
        s,
        "# rows per shard {:?}; tokens per shard {:?}",
        plan.rows, plan.tokens
    );
    let _ = writeln!(
        s,
        "# Submit: sbatch THIS; then: mc-report {}/shard-*.jsonl",
        results.display()
    );
    let _ = writeln!(s, "#SBATCH --job-name={name}");
    let _ = writeln!(s, "#SBATCH --ntasks={n}");
    let _ = writeln!(s, "#SBATCH --output={}/{name}-%j.log", results.display());
    let _ = writeln!(s, "set -euo pipefail");
    let _ = writeln!(
        s,
        "export RESULTS={}",
        sh_quote(&results.display().to_string())
    );
    let _ = writeln!(
        s,
        "export MC_REPLAY=\"${{MC_REPLAY:-{}}}\"",
        exe.replace('"', "\\\"")
    );
    let _ = writeln!(s, "mkdir -p \"$RESULTS\"");
    let _ = writeln!(
        s,
        "# Every shard's schedule starts at one wall-clock instant, {} s after the job does.",
        opts.start_in
    );
    let _ = writeln!(
        s,
        "export START_AT=$(( $(date +%s%3N) + {} ))",
        opts.start_in * 1000
    );
    let _ = writeln!(
        s,
        "echo \"mc-replay: {n} shards start at $START_AT (plan {})\" >&2",
        plan.digest.get(..12).unwrap_or_default()
    );
    let mut cmd = vec![sh_quote(&input.display().to_string())];
    cmd.extend(rest.iter().map(|a| sh_quote(a)));
    let _ = writeln!(
        s,
        "srun --ntasks={n} ${{MC_SRUN_ARGS:-}} bash -c 'exec \"$MC_REPLAY\" --input \"$@\" --shard env \
         --start-at \"$START_AT\" --start-grace-ms {} --output \"$RESULTS/shard-$SLURM_PROCID.jsonl\"' mc-replay \\\n    {}",
        opts.start_grace_ms,
        cmd.join(" ")
    );
    let _ = writeln!(
        s,
        "echo \"mc-replay: done; merge with: mc-report $RESULTS/shard-*.jsonl\" >&2"
    );
    Ok(s)
}

fn k8s(
    opts: &Job,
    n: u32,
    rest: &[String],
    input: &Path,
    digest: &str,
    span_s: u64,
) -> Result<String> {
    let image = opts
        .image
        .as_deref()
        .ok_or_else(|| Error::usage("--emit-k8s-job: give --image IMAGE"))?;
    let name = &opts.job_name;
    let file = input
        .file_name()
        .map_or("trace.jsonl".into(), |f| f.to_string_lossy().into_owned());
    let start_at = super::now_unix_ms() as u64 + opts.start_in * 1000;
    let mut shard_args: Vec<Value> = rest.iter().map(|a| json!(a)).collect();
    for a in [
        "--input".to_string(),
        format!("/trace/{file}"),
        "--shard".into(),
        "env".into(),
        "--shards".into(),
        n.to_string(),
        "--start-at".into(),
        start_at.to_string(),
        "--start-grace-ms".into(),
        opts.start_grace_ms.to_string(),
        "--output".into(),
        "/results/shard-$(MC_SHARD).jsonl".into(),
    ] {
        shard_args.push(json!(a));
    }
    let deadline = opts.start_in + span_s + opts.timeout.ceil() as u64 + DEADLINE_SLACK_S;
    let labels = json!({"app.kubernetes.io/name": "mc-replay", "mctrace/job": name});
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "mctrace/plan-digest": digest,
                "mctrace/start-at-unix-ms": start_at.to_string(),
            },
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": n,
            "parallelism": n,
            "backoffLimitPerIndex": 0,
            "maxFailedIndexes": 0,
            "podReplacementPolicy": "Failed",
            "activeDeadlineSeconds": deadline,
            "podFailurePolicy": {
                "rules": [{
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": "mc-replay",
                        "operator": "In",
                        "values": [crate::error::ExitCode::TempFail as i32],
                    },
                }],
            },
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "topologySpreadConstraints": [{
                        "maxSkew": 1,
                        "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"mctrace/job": name}},
                    }],
                    "containers": [{
                        "name": "mc-replay",
                        "image": image,
                        "command": ["mc-replay"],
                        "args": shard_args,
                        // The pod's index (what sets JOB_COMPLETION_INDEX),
                        // for the file name in `args`.
                        "env": [{
                            "name": "MC_SHARD",
                            "valueFrom": {"fieldRef": {
                                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']",
                            }},
                        }],
                        "volumeMounts": [
                            {"name": "trace", "mountPath": "/trace", "readOnly": true},
                            {"name": "results", "mountPath": "/results"},
                        ],
                    }],
                    "volumes": [
                        {"name": "trace", "configMap": {"name": format!("{name}-trace")}},
                        {"name": "results", "persistentVolumeClaim": {"claimName": format!("{name}-results")}},
                    ],
                },
            },
        },
    });
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Written by mc-replay --emit-k8s-job: {n} shards of {}, one pod each, one per node.",
        input.display()
    );
    let _ = writeln!(s, "# plan digest {digest}");
    let _ = writeln!(
        s,
        "# The shards start at {start_at} (ms since the Unix epoch, {} s after this was written):",
        opts.start_in
    );
    let _ = writeln!(s, "# apply it at once. Before:");
    let _ = writeln!(
        s,
        "#   kubectl create configmap {name}-trace --from-file={file}={}",
        input.display()
    );
    let _ = writeln!(
        s,
        "#   a ReadWriteMany PersistentVolumeClaim {name}-results (every pod writes shard-I.jsonl)"
    );
    let _ = writeln!(
        s,
        "#   (a ConfigMap holds at most 1 MiB: a larger trace goes on a volume mounted at /trace)"
    );
    let _ = writeln!(
        s,
        "# A pod that starts more than {} ms late exits 75 and fails the Job (podFailurePolicy).",
        opts.start_grace_ms
    );
    let _ = writeln!(s, "# Then: mc-report RESULTS/shard-*.jsonl");
    s.push_str("---\n");
    yaml(&mut s, &job, 0);
    Ok(s)
}

/// `v` as block YAML; every string JSON-quoted (valid YAML, never
/// mistaken for a number or a boolean).
fn yaml(out: &mut String, v: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match x {
                    Value::Object(c) if !c.is_empty() => {
                        let _ = writeln!(out, "{pad}{k}:");
                        yaml(out, x, indent + 2);
                    }
                    Value::Array(a) if !a.is_empty() => {
                        let _ = writeln!(out, "{pad}{k}:");
                        yaml(out, x, indent);
                    }
                    _ => {
                        let _ = writeln!(out, "{pad}{k}: {}", scalar(x));
                    }
                }
            }
        }
        Value::Array(a) => {
            for x in a {
                match x {
                    Value::Object(c) if !c.is_empty() => {
                        let mut inner = String::new();
                        yaml(&mut inner, x, indent + 2);
                        // The first key goes on the dash's line.
                        let body = inner.get(indent + 2..).unwrap_or_default();
                        let _ = write!(out, "{pad}- {body}");
                    }
                    _ => {
                        let _ = writeln!(out, "{pad}- {}", scalar(x));
                    }
                }
            }
        }
        _ => {
            let _ = writeln!(out, "{pad}{}", scalar(v));
        }
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        // JSON's own text: numbers, true/false, null and quoted strings.
        x => x.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_args_drop_the_jobs_options() {
        let argv: Vec<OsString> = [
            "--url",
            "http://h:8000",
            "--emit-slurm",
            "--shards",
            "4",
            "-i",
            "t.jsonl",
            "--results-dir=/r",
            "-ox.jsonl",
            "--seed",
            "3",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        assert_eq!(
            shard_args(&argv).unwrap(),
            ["--url", "http://h:8000", "--seed", "3"]
        );
        let bad: Vec<OsString> = ["--summary", "s.json"].iter().map(OsString::from).collect();
        assert!(shard_args(&bad).is_err());
    }

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("abc/d.jsonl"), "abc/d.jsonl");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(sh_quote(""), "''");
    }

    #[test]
    fn yaml_of_nested_values() {
        let mut s = String::new();
        yaml(
            &mut s,
            &json!({"a": 1, "b": {"c": "x"}, "d": [{"e": true, "f": [1, 2]}, "g"], "h": []}),
            0,
        );
        assert_eq!(
            s,
            "a: 1\nb:\n  c: \"x\"\nd:\n- e: true\n  f:\n  - 1\n  - 2\n- \"g\"\nh: []\n"
        );
    }
}
