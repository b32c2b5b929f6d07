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
//!
//! Secrets are never written into the job (a Job's args are readable by
//! anyone who may `get jobs`, a batch script by anyone who may read the
//! file or `scontrol show job`): the API key, a URL with credentials
//! (userinfo or a `?api_key=`-like query) and credential headers reach the
//! shards through their environment ([`Secret`]): the submitter's for
//! sbatch (which passes it on), a Kubernetes Secret for the Job.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::super::plan::{load_hashed, Job};
use crate::error::{Error, Result};

/// Options that belong to the job, not to a shard: (name, takes a value).
const JOB_OPTIONS: [(&str, bool); 14] = [
    ("--trace-volume", true),
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

/// The most data a ConfigMap holds (Kubernetes refuses a larger one): a
/// larger trace needs `--trace-volume`.
pub const CONFIGMAP_MAX_BYTES: u64 = 1 << 20;

/// The slack `activeDeadlineSeconds` gives past the start, the schedule
/// and `--timeout` (the last request's drain).
const DEADLINE_SLACK_S: u64 = 300;

/// A secret a shard needs, passed through its environment: `env` in the
/// shard's environment, `key` in the Kubernetes Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secret {
    pub env: String,
    pub key: String,
    /// The option it is the value of (`--api-key` takes it from `env`).
    pub option: &'static str,
}

/// A shard's argument: written as it is, or the value of a [`Secret`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    Plain(String),
    Secret(usize),
}

/// The environment variable mc-replay's `--api-key` reads.
const API_KEY_ENV: &str = "OPENAI_API_KEY";

/// `rest` (from [`shard_args`]) with every secret taken out: `--api-key`
/// dropped (the shard reads `API_KEY_ENV`), the value of a URL option
/// with credentials and of a credential header replaced by a [`Secret`].
/// `api_key`: the key this invocation has (from `--api-key` or the
/// environment), which the shards need too.
pub fn split_secrets(rest: &[String], api_key: bool) -> (Vec<Arg>, Vec<Secret>) {
    let mut args = Vec::new();
    let mut secrets = Vec::new();
    if api_key {
        secrets.push(Secret {
            env: API_KEY_ENV.into(),
            key: "api-key".into(),
            option: "--api-key",
        });
    }
    let mut headers = 0;
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let option = match name {
            "--api-key" => {
                if inline.is_none() {
                    it.next();
                }
                continue;
            }
            "--url" | "--base-url" => "--url",
            "--metrics-url" => "--metrics-url",
            "--header" => "--header",
            _ => {
                args.push(Arg::Plain(a.clone()));
                continue;
            }
        };
        let Some(value) = inline.or_else(|| it.next().cloned()) else {
            args.push(Arg::Plain(a.clone()));
            continue;
        };
        let secret = match option {
            "--header" => value.split_once(':').is_some_and(|(k, _)| {
                super::super::redact::SECRET_HEADERS
                    .contains(&k.trim().to_ascii_lowercase().as_str())
            }),
            _ => !crate::options::url_secrets(&value).is_empty(),
        };
        args.push(Arg::Plain(option.into()));
        if !secret {
            args.push(Arg::Plain(value));
            continue;
        }
        let (env, key) = match option {
            "--url" => ("MC_REPLAY_URL".to_string(), "url".to_string()),
            "--metrics-url" => ("MC_REPLAY_METRICS_URL".into(), "metrics-url".into()),
            _ => {
                headers += 1;
                (
                    format!("MC_REPLAY_HEADER_{headers}"),
                    format!("header-{headers}"),
                )
            }
        };
        args.push(Arg::Secret(secrets.len()));
        secrets.push(Secret { env, key, option });
    }
    (args, secrets)
}

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
pub fn job(args: &Job) -> Result<String> {
    let n = args.shards;
    if !args.has_url || args.engine {
        return Err(Error::usage(
            "--emit-*: without --url (or with --engine) every shard would replay on an engine \
             model of its own, and the shards would not be one run of one server: give --url \
             (to replay the whole trace on the engine model, leave --emit-* and --shards out)",
        ));
    }
    let input = args.input.as_path();
    let (rest, secrets) = split_secrets(&args.rest, args.has_api_key);
    let (trace, block_size, sha) = load_hashed(&args.source, true)?;
    let plan = super::plan(&trace, block_size, n, sha);
    let span_s = super::super::schedule::first_timestamp(&trace)
        .map(|t0| {
            let last = trace
                .turns
                .iter()
                .filter_map(|t| t.timestamp_ms)
                .fold(t0, f64::max);
            ((last - t0) / args.speedup / 1000.0).ceil() as u64
        })
        .unwrap_or(0);
    if args.k8s {
        k8s(args, n, (&rest, &secrets), input, &plan.digest, span_s)
    } else {
        slurm(args, n, (&rest, &secrets), input, &plan)
    }
}

fn slurm(
    args: &Job,
    n: u32,
    (rest, secrets): (&[Arg], &[Secret]),
    input: &Path,
    plan: &super::ShardPlan,
) -> Result<String> {
    let results = absolute(
        args.results_dir
            .as_deref()
            .unwrap_or(Path::new("mc-replay-results")),
    )?;
    let input = absolute(input)?;
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "mc-replay".into());
    let mut s = String::new();
    slurm_header(&mut s, n, &input, plan, &results);
    sbatch_options(&mut s, n, &args.job_name, &results);
    let _ = writeln!(s, "set -euo pipefail");
    slurm_secrets(&mut s, secrets);
    slurm_start(&mut s, args, n, &plan.digest, &results, &exe);
    srun_line(&mut s, args, n, &input, (rest, secrets));
    let _ = writeln!(
        s,
        "echo \"mc-replay: done; merge with: mc-report $RESULTS/shard-*.jsonl\" >&2"
    );
    Ok(s)
}

/// The script's first lines: what it runs, the plan, how to submit it.
fn slurm_header(s: &mut String, n: u32, input: &Path, plan: &super::ShardPlan, results: &Path) {
    let _ = writeln!(s, "#!/bin/bash");
    let _ = writeln!(
        s,
        "# Written by mc-replay --emit-slurm: {n} shards of {}, one task each, one task a node.",
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
}

/// The batch shell's exports: the results folder, the binary (`MC_REPLAY`
/// overrides it) and the one instant every shard starts at.
fn slurm_start(s: &mut String, args: &Job, n: u32, digest: &str, results: &Path, exe: &str) {
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
        args.start_in
    );
    let _ = writeln!(
        s,
        "export START_AT=$(( $(date +%s%3N) + {} ))",
        args.start_in * 1000
    );
    let _ = writeln!(
        s,
        "echo \"mc-replay: {n} shards start at $START_AT (plan {})\" >&2",
        digest.get(..12).unwrap_or_default()
    );
}

/// The `srun` step: every task runs the shard command with `--shard env`.
fn srun_line(
    s: &mut String,
    args: &Job,
    n: u32,
    input: &Path,
    (rest, secrets): (&[Arg], &[Secret]),
) {
    let mut cmd = vec![sh_quote(&input.display().to_string())];
    cmd.extend(rest.iter().map(|a| match a {
        Arg::Plain(a) => sh_quote(a),
        // Expanded by the batch shell from the submitter's environment.
        Arg::Secret(i) => format!("\"${}\"", secrets[*i].env),
    }));
    let _ = writeln!(
        s,
        "srun --nodes={n} --ntasks={n} --ntasks-per-node=1 ${{MC_SRUN_ARGS:-}} bash -c 'exec \"$MC_REPLAY\" --input \"$@\" --shard env \
         --start-at \"$START_AT\" --start-grace-ms {} --output \"$RESULTS/shard-$SLURM_PROCID.jsonl\"' mc-replay \\\n    {}",
        args.start_grace_ms,
        cmd.join(" ")
    );
}

/// The `#SBATCH` lines: the job, its tasks one a node, its log.
fn sbatch_options(s: &mut String, n: u32, name: &str, results: &Path) {
    let _ = writeln!(s, "#SBATCH --job-name={name}");
    // One task a node: shards on one node would share its CPU and network,
    // which a sharded run exists to avoid.
    let _ = writeln!(s, "#SBATCH --nodes={n}");
    let _ = writeln!(s, "#SBATCH --ntasks={n}");
    let _ = writeln!(s, "#SBATCH --ntasks-per-node=1");
    let _ = writeln!(s, "#SBATCH --output={}/{name}-%j.log", results.display());
    let _ = writeln!(
        s,
        "# (on fewer nodes: sbatch --nodes=M --ntasks-per-node=K THIS, and the same in \
         MC_SRUN_ARGS, which comes after srun's own options and wins)"
    );
}

/// The script's word on its secrets: which to export before sbatch, and
/// a stop before srun when one is missing.
fn slurm_secrets(s: &mut String, secrets: &[Secret]) {
    if !secrets.is_empty() {
        let _ = writeln!(
            s,
            "# Secrets are never written here: sbatch passes the environment of the shell \
             that runs it on to every task. Export before sbatch:"
        );
    }
    for x in secrets {
        let _ = writeln!(s, "#   export {}=...   (the value of {})", x.env, x.option);
    }
    for x in secrets {
        let _ = writeln!(
            s,
            ": \"${{{}:?export {} (the value of {}) before sbatch; it is not written in this script}}\"",
            x.env, x.env, x.option
        );
    }
}

/// The Job's comment on its secrets: the `kubectl create secret` line.
fn k8s_secrets(s: &mut String, secret_name: &str, secrets: &[Secret]) {
    if secrets.is_empty() {
        return;
    }
    let literals: Vec<String> = secrets
        .iter()
        .map(|x| format!("--from-literal={}=\"${}\"", x.key, x.env))
        .collect();
    let _ = writeln!(
        s,
        "#   kubectl create secret generic {secret_name} {}",
        literals.join(" ")
    );
    let _ = writeln!(
        s,
        "#   (secrets are never written here: the pods read them from that Secret; {})",
        secrets
            .iter()
            .map(|x| format!("{} is {}", x.env, x.option))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The pod's environment: its index (what sets JOB_COMPLETION_INDEX, for
/// the file name in `args`) and each secret from the Secret.
fn pod_env(secret_name: &str, secrets: &[Secret]) -> Vec<Value> {
    let mut env = vec![json!({
        "name": "MC_SHARD",
        "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']",
        }},
    })];
    for x in secrets {
        env.push(json!({
            "name": x.env,
            "valueFrom": {"secretKeyRef": {"name": secret_name, "key": x.key}},
        }));
    }
    env
}

/// The trace's volume: `--trace-volume`'s claim, else the ConfigMap
/// `NAME-trace` (refused when the trace would not fit in one).
fn trace_volume(args: &Job, input: &Path) -> Result<Value> {
    if let Some(claim) = &args.trace_volume {
        return Ok(
            json!({"name": "trace", "persistentVolumeClaim": {"claimName": claim, "readOnly": true}}),
        );
    }
    let size = std::fs::metadata(input).map(|m| m.len()).unwrap_or(0);
    if size > CONFIGMAP_MAX_BYTES {
        return Err(Error::Input(format!(
            "--emit-k8s-job: {} is {size} bytes, more than a ConfigMap holds \
             ({CONFIGMAP_MAX_BYTES} bytes, 1 MiB): put it on a PersistentVolumeClaim and give \
             --trace-volume CLAIM",
            input.display()
        )));
    }
    Ok(json!({"name": "trace", "configMap": {"name": format!("{}-trace", args.job_name)}}))
}

fn k8s(
    args: &Job,
    n: u32,
    (rest, secrets): (&[Arg], &[Secret]),
    input: &Path,
    digest: &str,
    span_s: u64,
) -> Result<String> {
    let image = args
        .image
        .as_deref()
        .ok_or_else(|| Error::usage("--emit-k8s-job: give --image IMAGE"))?;
    let job = K8sJob {
        args,
        n,
        input,
        file: input
            .file_name()
            .map_or("trace.jsonl".into(), |f| f.to_string_lossy().into_owned()),
        digest,
        start_at: super::now_unix_ms() as u64 + args.start_in * 1000,
        secret_name: format!("{}-secrets", args.job_name),
        secrets,
    };
    let trace_volume = trace_volume(args, input)?;
    let pod = job.pod(image, job.shard_args(rest), trace_volume);
    let manifest = job.manifest(pod, span_s);
    let mut s = String::new();
    job.comment(&mut s);
    s.push_str("---\n");
    yaml(&mut s, &manifest, 0);
    Ok(s)
}

/// What `--emit-k8s-job` writes the Job and its comment from.
struct K8sJob<'a> {
    args: &'a Job,
    n: u32,
    input: &'a Path,
    /// The trace's file name, under /trace in the pods.
    file: String,
    digest: &'a str,
    /// When every shard starts, in ms since the Unix epoch.
    start_at: u64,
    /// The Kubernetes Secret the pods read [`Secret`]s from.
    secret_name: String,
    secrets: &'a [Secret],
}

impl K8sJob<'_> {
    /// The container's args: the shard command (`rest`), then the options
    /// every shard takes, its output named by its index.
    fn shard_args(&self, rest: &[Arg]) -> Vec<Value> {
        // Kubernetes expands `$(VAR)` in args from the container's env, and
        // reads `$$(` as a literal `$(`.
        let mut shard_args: Vec<Value> = rest
            .iter()
            .map(|a| match a {
                Arg::Plain(a) => json!(a.replace("$(", "$$(")),
                Arg::Secret(i) => json!(format!("$({})", self.secrets[*i].env)),
            })
            .collect();
        for a in [
            "--input".to_string(),
            format!("/trace/{}", self.file),
            "--shard".into(),
            "env".into(),
            "--shards".into(),
            self.n.to_string(),
            "--start-at".into(),
            self.start_at.to_string(),
            "--start-grace-ms".into(),
            self.args.start_grace_ms.to_string(),
            "--output".into(),
            "/results/shard-$(MC_SHARD).jsonl".into(),
        ] {
            shard_args.push(json!(a));
        }
        shard_args
    }

    /// The Job's labels, which its pods carry too (the topology spread
    /// selects on them).
    fn labels(&self) -> Value {
        json!({"app.kubernetes.io/name": "mc-replay", "mctrace/job": self.args.job_name})
    }

    /// The Indexed Job around the pod template `pod`: one completion per
    /// shard, none retried, failed by a late shard's exit code, stopped by
    /// `activeDeadlineSeconds` past the trace's span (`span_s`).
    fn manifest(&self, pod: Value, span_s: u64) -> Value {
        let (args, n) = (self.args, self.n);
        let deadline = args.start_in + span_s + args.timeout.ceil() as u64 + DEADLINE_SLACK_S;
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": args.job_name,
                "labels": self.labels(),
                "annotations": {
                    "mctrace/plan-digest": self.digest,
                    "mctrace/start-at-unix-ms": self.start_at.to_string(),
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
                "template": pod,
            },
        })
    }

    /// The pod template: one pod a node, the trace read-only at /trace,
    /// the results claim at /results.
    fn pod(&self, image: &str, shard_args: Vec<Value>, trace_volume: Value) -> Value {
        let name = &self.args.job_name;
        json!({
            "metadata": {"labels": self.labels()},
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
                    "env": pod_env(&self.secret_name, self.secrets),
                    "volumeMounts": [
                        {"name": "trace", "mountPath": "/trace", "readOnly": true},
                        {"name": "results", "mountPath": "/results"},
                    ],
                }],
                "volumes": [
                    trace_volume,
                    {"name": "results", "persistentVolumeClaim": {"claimName": format!("{name}-results")}},
                ],
            },
        })
    }

    /// The comment above the Job: what it runs, when, and what to create
    /// before applying it.
    fn comment(&self, s: &mut String) {
        let (args, n, input, file) = (self.args, self.n, self.input, &self.file);
        let name = &args.job_name;
        let _ = writeln!(
            s,
            "# Written by mc-replay --emit-k8s-job: {n} shards of {}, one pod each, one per node.",
            input.display()
        );
        let _ = writeln!(s, "# plan digest {}", self.digest);
        let _ = writeln!(
            s,
            "# The shards start at {} (ms since the Unix epoch, {} s after this was written):",
            self.start_at, args.start_in
        );
        let _ = writeln!(s, "# apply it at once. Before:");
        k8s_secrets(s, &self.secret_name, self.secrets);
        match &args.trace_volume {
            Some(claim) => {
                let _ = writeln!(
                    s,
                    "#   {} on the PersistentVolumeClaim {claim} as {file} (mounted read-only at /trace)",
                    input.display()
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "#   kubectl create configmap {name}-trace --from-file={file}={}",
                    input.display()
                );
            }
        }
        let _ = writeln!(
            s,
            "#   a ReadWriteMany PersistentVolumeClaim {name}-results (every pod writes shard-I.jsonl)"
        );
        if args.trace_volume.is_none() {
            let _ = writeln!(
                s,
                "#   (a ConfigMap holds at most 1 MiB: a larger trace needs --trace-volume CLAIM)"
            );
        }
        let _ = writeln!(
            s,
            "# A pod that starts more than {} ms late exits 75 and fails the Job (podFailurePolicy).",
            args.start_grace_ms
        );
        let _ = writeln!(s, "# Then: mc-report RESULTS/shard-*.jsonl");
    }
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
