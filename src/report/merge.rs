//! Shards of one run (`mc-replay --shard I/N`) merged into the run a
//! single machine would have made: every shard of one plan present once
//! and complete, then pooled like any run's files, so the summary is
//! recomputed from the raw values of every line.
//!
//! The checks, each an error that names the file (and line) at fault:
//! - one plan: every line's and every summary's `plan_digest` agree;
//! - every shard present, each in one file, with its summary beside it;
//! - complete: each shard has exactly one result per planned row (its
//!   count from the plan, each trace line once);
//! - one run description: the shards ran the same options (every field
//!   the run description records, but the few that are per shard);
//! - one server: shards on the engine model are refused (each simulated
//!   an engine of its own);
//! - the shard count is data: at most `limits::MAX_SHARDS`, and the
//!   summaries' count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::input::{find_sidecar, Run};
use crate::error::{Error, Result};
use crate::limits::MAX_SHARDS;
use crate::results::summary::{self, Connections, RunInfo, ShardRun, Summary};

/// True when the run's lines come from shards.
pub fn is_sharded(run: &Run) -> bool {
    run.results.iter().any(|r| r.shard.is_some())
}

/// `I/N` → (I, N).
fn tag(s: &str) -> Option<(u32, u32)> {
    let (i, n) = s.split_once('/')?;
    Some((i.parse().ok()?, n.parse().ok()?))
}

fn short(d: &str) -> &str {
    d.get(..12).unwrap_or(d)
}

/// Which file holds which shard.
type FilesOf = BTreeMap<u32, BTreeSet<usize>>;

/// Each shard's summary and where it was read.
type Shards = BTreeMap<u32, (Summary, PathBuf)>;

/// Checks the shards and replaces the run's description with the merged
/// one (the run a single machine would have described).
pub fn merge(run: &mut Run) -> Result<()> {
    let Some((digest, count, files_of)) = one_plan(run)? else {
        return Ok(());
    };
    each_shard_once(run, &files_of, count)?;
    let shards = summaries(run, &files_of, &digest, count)?;
    let Some((first, first_path)) = shards.values().next().cloned() else {
        return Ok(());
    };
    one_server(&first, &first_path, count)?;
    let plan = first.run.shard.clone().unwrap_or_else(|| ShardRun {
        index: None,
        count,
        plan_digest: digest.clone(),
        rows: Vec::new(),
        tokens: Vec::new(),
        start_at_unix_ms: None,
    });
    every_shard_present(&shards, &plan, &digest, count)?;
    each_complete(run, &shards, &plan, count)?;
    for (s, side) in shards.values() {
        same_run(&first.run, &first_path, &s.run, side)?;
    }
    run.info = Some(merged(&shards, plan));
    run.info_path = None;
    Ok(())
}

/// `file line N` of the run's `k`th result.
fn place(run: &Run, k: usize) -> String {
    let (src, no) = run.places.get(k).copied().unwrap_or((0, 0));
    let file = run
        .sources
        .get(src)
        .map_or("?".into(), |p| p.display().to_string());
    format!("{file} line {no}")
}

/// One plan (digest and shard count) across every line, and which file
/// holds which shard; `None` without lines.
fn one_plan(run: &Run) -> Result<Option<(String, u32, FilesOf)>> {
    let mut digest: Option<(String, usize)> = None;
    let mut count: Option<u32> = None;
    let mut files_of = FilesOf::new();
    for (k, r) in run.results.iter().enumerate() {
        let (Some(t), Some(d)) = (&r.shard, &r.plan_digest) else {
            return Err(Error::Input(format!(
                "{}: a result without a shard among sharded results: merge only the shard \
                 files of one `mc-replay --shard` run",
                place(run, k)
            )));
        };
        let Some((i, n)) = tag(t).filter(|(i, n)| i < n && *n <= MAX_SHARDS) else {
            return Err(Error::Input(format!(
                "{}: `shard` is {t:?}, not I/N with 0 <= I < N <= {MAX_SHARDS} (mc-replay's \
                 limit): is the file an mc-replay --shard result?",
                place(run, k)
            )));
        };
        match &digest {
            None => digest = Some((d.clone(), k)),
            Some((d0, k0)) if d0 != d => {
                return Err(Error::Input(format!(
                    "two shard plans: {} ran plan {} and {} ran plan {}: merge the shards of one \
                     plan (the same trace and --shard N on every machine)",
                    place(run, *k0),
                    short(d0),
                    place(run, k),
                    short(d)
                )))
            }
            Some(_) => {}
        }
        if let Some(c) = count.filter(|c| *c != n) {
            return Err(Error::Input(format!(
                "{}: shard {t} of a plan of {n}, while others are of {c}",
                place(run, k)
            )));
        }
        count = Some(n);
        files_of
            .entry(i)
            .or_default()
            .insert(run.places.get(k).map_or(0, |p| p.0));
    }
    Ok(digest.zip(count).map(|((d, _), n)| (d, n, files_of)))
}

/// No shard in two files.
fn each_shard_once(run: &Run, files_of: &FilesOf, count: u32) -> Result<()> {
    for (i, files) in files_of {
        if files.len() > 1 {
            let names: Vec<String> = files
                .iter()
                .filter_map(|&f| run.sources.get(f))
                .map(|p| p.display().to_string())
                .collect();
            return Err(Error::Input(format!(
                "shard {i}/{count} is given twice: {} (give each shard's results once)",
                names.join(" and ")
            )));
        }
    }
    Ok(())
}

/// Each shard's summary, beside its file, of that shard of that plan.
fn summaries(run: &Run, files_of: &FilesOf, digest: &str, count: u32) -> Result<Shards> {
    let mut shards = Shards::new();
    for (i, files) in files_of {
        let Some(src) = files.iter().next().and_then(|&f| run.sources.get(f)) else {
            continue;
        };
        let Some(side) = find_sidecar(src) else {
            return Err(Error::Input(format!(
                "shard {i}/{count}: no summary beside {} (mc-replay writes {} beside -o); the \
                 merge needs every shard's summary",
                src.display(),
                summary::sidecar_path(src).display()
            )));
        };
        let s = super::input::read_summary(&side)?;
        match &s.run.shard {
            Some(sr) if sr.plan_digest == digest && sr.index == Some(*i) && sr.count == count => {}
            Some(sr) => {
                return Err(Error::Input(format!(
                    "{}: the summary is of shard {}/{} of plan {}, but {} holds shard {i}/{count} \
                     of plan {}: is it another run's summary?",
                    side.display(),
                    sr.index.map_or("-".into(), |x| x.to_string()),
                    sr.count,
                    short(&sr.plan_digest),
                    src.display(),
                    short(digest)
                )))
            }
            None => {
                return Err(Error::Input(format!(
                    "{}: not a shard's summary, but {} holds shard {i}/{count}",
                    side.display(),
                    src.display()
                )))
            }
        }
        shards.insert(*i, (s, side));
    }
    Ok(shards)
}

/// Shards on the engine model each simulated an engine of their own: their
/// results are not one run of one engine (the shard options agree, so the
/// first shard's target is every shard's).
fn one_server(first: &Summary, path: &Path, count: u32) -> Result<()> {
    if first.run.target == "engine" && count > 1 {
        return Err(Error::Input(format!(
            "{}: the {count} shards ran on the engine model (no --url), each on an engine of \
             its own: they are not one run of one server and are not merged (replay the whole \
             trace on the engine model in one process, or shard a run against --url)",
            path.display()
        )));
    }
    Ok(())
}

/// Every shard that has rows is present.
fn every_shard_present(shards: &Shards, plan: &ShardRun, digest: &str, count: u32) -> Result<()> {
    let missing: Vec<String> = (0..count)
        .filter(|i| !shards.contains_key(i) && plan.rows.get(*i as usize).copied().unwrap_or(1) > 0)
        .map(|i| format!("{i}/{count}"))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::Input(format!(
        "shard{} {} of plan {} missing: no result lines from {} among the inputs (give every \
         shard's results file)",
        if missing.len() > 1 { "s" } else { "" },
        missing.join(", "),
        short(digest),
        if missing.len() > 1 { "them" } else { "it" },
    )))
}

/// Each planned row has exactly one result.
fn each_complete(run: &Run, shards: &Shards, plan: &ShardRun, count: u32) -> Result<()> {
    let mut lines: BTreeMap<(u32, u64), usize> = BTreeMap::new();
    let mut got: BTreeMap<u32, u64> = BTreeMap::new();
    for (k, r) in run.results.iter().enumerate() {
        let i = r.shard.as_deref().and_then(tag).map_or(0, |t| t.0);
        if let Some(k0) = lines.insert((i, r.line), k) {
            return Err(Error::Input(format!(
                "trace line {} has two results: {} and {} (each planned row is sent once)",
                r.line,
                place(run, k0),
                place(run, k)
            )));
        }
        *got.entry(i).or_default() += 1;
    }
    for (i, (s, side)) in shards {
        let want = plan.rows.get(*i as usize).copied().unwrap_or(0);
        let have = got.get(i).copied().unwrap_or(0);
        if have != want {
            return Err(Error::Input(format!(
                "shard {i}/{count} is incomplete: {have} of its {want} planned rows have a result \
                 ({}: {} not sent{}); rerun it",
                side.display(),
                s.requests.not_sent,
                if s.requests.interrupted {
                    ", interrupted"
                } else {
                    ""
                }
            )));
        }
    }
    Ok(())
}

/// Fields of the run description that differ between the shards of one
/// run by design; every other field, nested ones included (`options.*`,
/// `shard.start_at_unix_ms`), must agree. Compared by the description's
/// JSON keys, so a field added to `RunInfo` is compared unless named here.
const PER_SHARD: [(&str, &str); 6] = [
    (
        "input",
        "each node reads the trace at its own path; the plan digest checks its bytes",
    ),
    ("rows", "each shard's part of the plan"),
    (
        "start_unix_ms",
        "each process's own start; --start-at is the common zero",
    ),
    ("start_time", "the same, as text"),
    ("host", "each shard's machine"),
    ("shard.index", "which shard it is"),
];

/// The run description's JSON as `dotted.key` → value (arrays whole).
fn leaves(prefix: &str, v: &Value, out: &mut BTreeMap<String, Value>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(&key, x, out);
            }
        }
        x => {
            out.insert(prefix.to_string(), x.clone());
        }
    }
}

/// The shards must have run the same options: every recorded field but
/// [`PER_SHARD`]'s agrees, or the merge names the first that does not.
fn same_run(a: &RunInfo, a_path: &Path, b: &RunInfo, b_path: &Path) -> Result<()> {
    let json = |r: &RunInfo| {
        let mut out = BTreeMap::new();
        leaves("", &serde_json::to_value(r).unwrap_or_default(), &mut out);
        out
    };
    let (x, y) = (json(a), json(b));
    let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
    for name in keys {
        if PER_SHARD.iter().any(|(k, _)| k == name) {
            continue;
        }
        let (u, v) = (
            x.get(name).unwrap_or(&Value::Null),
            y.get(name).unwrap_or(&Value::Null),
        );
        if u != v {
            return Err(Error::Input(format!(
                "the shards ran different options: {name} is {u} in {} and {v} in {} (run every \
                 shard with the same options)",
                a_path.display(),
                b_path.display()
            )));
        }
    }
    Ok(())
}

/// The description a single run would have: every shard's rows, the
/// earliest start, the hosts, the rows not sent and the workers summed.
fn merged(shards: &BTreeMap<u32, (Summary, PathBuf)>, plan: ShardRun) -> Summary {
    let all: Vec<&Summary> = shards.values().map(|(s, _)| s).collect();
    let mut m = all[0].clone();
    m.run.rows = all.iter().map(|s| s.run.rows).sum();
    if let Some(s) = all
        .iter()
        .min_by(|a, b| a.run.start_unix_ms.total_cmp(&b.run.start_unix_ms))
    {
        m.run.start_unix_ms = s.run.start_unix_ms;
        m.run.start_time = s.run.start_time.clone();
    }
    let hosts: BTreeSet<&str> = all.iter().filter_map(|s| s.run.host.as_deref()).collect();
    m.run.host = (!hosts.is_empty()).then(|| hosts.into_iter().collect::<Vec<_>>().join(","));
    m.run.shard = Some(ShardRun {
        index: None,
        ..plan
    });
    m.requests.not_sent = all.iter().map(|s| s.requests.not_sent).sum();
    m.requests.skipped_dep_failed = all.iter().map(|s| s.requests.skipped_dep_failed).sum();
    m.requests.interrupted = all.iter().any(|s| s.requests.interrupted);
    m.stopped_early = all.iter().find_map(|s| s.stopped_early.clone());
    m.workers = all.iter().map(|s| s.workers).sum();
    m.connections = merged_connections(&all);
    // Per-shard statistics a merge cannot pool.
    m.engine = None;
    m.fidelity = None;
    m.fidelity_by_server = Vec::new();
    m
}

/// Every shard's connections as one client's: counts summed (each shard
/// is its own client, with its own connections and cap), the rate over
/// every shard's requests. `None` unless every shard reported them.
fn merged_connections(all: &[&Summary]) -> Option<Connections> {
    let each: Option<Vec<Connections>> = all.iter().map(|s| s.connections).collect();
    let each = each?;
    let connects = each.iter().map(|c| c.connects).sum();
    let requests = all
        .iter()
        .map(|s| s.requests.sent + s.requests.warmup)
        .sum();
    Some(Connections {
        connects,
        per_request: Connections::per(connects, requests),
        most_open: each.iter().map(|c| c.most_open).sum(),
        cap: each.iter().map(|c| c.cap).sum(),
        auto: each.iter().any(|c| c.auto),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::summary::LoadOptions;

    /// A run description with every field set, so every key is in its JSON.
    fn full() -> RunInfo {
        RunInfo {
            tool: "mc-replay".into(),
            version: "0.1.0".into(),
            target: "http".into(),
            url: Some("http://h:1/v1".into()),
            endpoint: "chat".into(),
            model: Some("m".into()),
            input: "t.jsonl".into(),
            rows: 5,
            speedup: 1.0,
            arrival: "timestamps".into(),
            rate: Some(2.0),
            concurrency: Some(4),
            turns: "cumulative".into(),
            seed: 0,
            block_size: 16,
            start_unix_ms: 1.0,
            start_time: "t".into(),
            host: Some("h".into()),
            shard: Some(ShardRun {
                index: Some(0),
                count: 2,
                plan_digest: "d".into(),
                rows: vec![3, 2],
                tokens: vec![30, 20],
                start_at_unix_ms: Some(7),
            }),
            max_delay: Some(crate::delays::DelayCap {
                max_ms: 9.0,
                capped: 1,
            }),
            options: Some(LoadOptions {
                exact_output: true,
                timeout_s: 600.0,
                extra_body_sha256: Some("e".into()),
                header_names: vec!["x-a".into()],
                tokenizer: Some("tok".into()),
                max_requests: Some(10),
                duration_s: Some(3.0),
                warmup: 1,
                max_connections: Some(0),
                reset_prefix_cache: false,
                engine_profile: Some("default".into()),
                workers: Some(2),
                router: Some("prefix".into()),
            }),
        }
    }

    /// `v` changed, of the same type.
    fn other(v: &Value) -> Value {
        match v {
            Value::Bool(b) => Value::Bool(!b),
            Value::Number(n) => match n.as_u64() {
                Some(u) => serde_json::json!(u + 1),
                None => serde_json::json!(n.as_f64().unwrap_or(0.0) + 1.0),
            },
            Value::String(s) => Value::String(format!("{s}x")),
            Value::Array(a) => Value::Array(a.iter().chain(a.first()).cloned().collect()),
            x => x.clone(),
        }
    }

    #[test]
    fn every_recorded_field_is_compared_or_per_shard() {
        let a = full();
        let mut keys = BTreeMap::new();
        leaves("", &serde_json::to_value(&a).unwrap(), &mut keys);
        assert!(keys.len() > 30, "{keys:?}");
        for (k, _) in PER_SHARD {
            assert!(keys.contains_key(k), "{k} is not a field");
        }
        for (key, v) in &keys {
            // The description with only `key` changed.
            let mut json = serde_json::to_value(&a).unwrap();
            let mut at = &mut json;
            for part in key.split('.') {
                at = &mut at[part];
            }
            *at = other(v);
            assert_ne!(*at, *v, "{key}");
            let b: RunInfo = serde_json::from_value(json).unwrap_or_else(|e| panic!("{key}: {e}"));
            let got = same_run(&a, Path::new("a"), &b, Path::new("b"));
            if PER_SHARD.iter().any(|(k, _)| k == key) {
                assert!(got.is_ok(), "{key}: {got:?}");
            } else {
                let e = got.expect_err(key).to_string();
                assert!(e.contains(&format!("{key} is ")), "{key}: {e}");
            }
        }
        // An option recorded in one shard's description and absent in
        // another's (an older version) is a difference too.
        let mut b = a.clone();
        b.options = None;
        let e = same_run(&a, Path::new("a"), &b, Path::new("b")).unwrap_err();
        assert!(e.to_string().contains("options."), "{e}");
    }
}
