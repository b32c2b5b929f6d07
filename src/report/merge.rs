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
//! - one run description: the shards ran the same options.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::input::{find_sidecar, Run};
use crate::error::{Error, Result};
use crate::results::summary::{self, ShardRun, Summary};

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

/// Checks the shards and replaces the run's description with the merged
/// one (the run a single machine would have described).
pub fn merge(run: &mut Run) -> Result<()> {
    let place = |k: usize| -> String {
        let (src, no) = run.places.get(k).copied().unwrap_or((0, 0));
        let file = run
            .sources
            .get(src)
            .map_or("?".into(), |p| p.display().to_string());
        format!("{file} line {no}")
    };
    // One plan, and which file holds which shard.
    let mut digest: Option<(String, usize)> = None;
    let mut count: Option<u32> = None;
    let mut files_of: BTreeMap<u32, BTreeSet<usize>> = BTreeMap::new();
    for (k, r) in run.results.iter().enumerate() {
        let (Some(t), Some(d)) = (&r.shard, &r.plan_digest) else {
            return Err(Error::Input(format!(
                "{}: a result without a shard among sharded results: merge only the shard \
                 files of one `mc-replay --shard` run",
                place(k)
            )));
        };
        let Some((i, n)) = tag(t).filter(|(i, n)| i < n) else {
            return Err(Error::Input(format!(
                "{}: `shard` is {t:?}, not I/N",
                place(k)
            )));
        };
        match &digest {
            None => digest = Some((d.clone(), k)),
            Some((d0, k0)) if d0 != d => {
                return Err(Error::Input(format!(
                    "two shard plans: {} ran plan {} and {} ran plan {}: merge the shards of one \
                     plan (the same trace and --shard N on every machine)",
                    place(*k0),
                    short(d0),
                    place(k),
                    short(d)
                )))
            }
            Some(_) => {}
        }
        if count.is_some_and(|c| c != n) {
            return Err(Error::Input(format!(
                "{}: shard {t} of a plan of {n}, while others are of {}",
                place(k),
                count.unwrap_or(0)
            )));
        }
        count = Some(n);
        files_of
            .entry(i)
            .or_default()
            .insert(run.places.get(k).map_or(0, |p| p.0));
    }
    let (Some((digest, _)), Some(count)) = (digest, count) else {
        return Ok(());
    };
    for (i, files) in &files_of {
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
    // Each shard's summary, beside its file.
    let mut shards: BTreeMap<u32, (Summary, PathBuf)> = BTreeMap::new();
    for (i, files) in &files_of {
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
        let s = summary::read(&side)?;
        match &s.run.shard {
            Some(sr) if sr.plan_digest == digest && sr.index == Some(*i) => {}
            Some(sr) => {
                return Err(Error::Input(format!(
                    "{}: the summary is of shard {}/{} of plan {}, but {} holds shard {i}/{count} \
                     of plan {}: is it another run's summary?",
                    side.display(),
                    sr.index.map_or("-".into(), |x| x.to_string()),
                    sr.count,
                    short(&sr.plan_digest),
                    src.display(),
                    short(&digest)
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
    let Some((first, first_path)) = shards.values().next().cloned() else {
        return Ok(());
    };
    let plan = first.run.shard.clone().unwrap_or_else(|| ShardRun {
        index: None,
        count,
        plan_digest: digest.clone(),
        rows: Vec::new(),
        tokens: Vec::new(),
        start_at_unix_ms: None,
    });
    // Every shard that has rows is present, each complete.
    let missing: Vec<String> = (0..count)
        .filter(|i| !shards.contains_key(i) && plan.rows.get(*i as usize).copied().unwrap_or(1) > 0)
        .map(|i| format!("{i}/{count}"))
        .collect();
    if !missing.is_empty() {
        return Err(Error::Input(format!(
            "shard{} {} of plan {} missing: no result lines from {} among the inputs (give every \
             shard's results file)",
            if missing.len() > 1 { "s" } else { "" },
            missing.join(", "),
            short(&digest),
            if missing.len() > 1 { "them" } else { "it" },
        )));
    }
    let mut lines: BTreeMap<(u32, u64), usize> = BTreeMap::new();
    let mut got = vec![0u64; count as usize];
    for (k, r) in run.results.iter().enumerate() {
        let i = r.shard.as_deref().and_then(tag).map_or(0, |t| t.0);
        if let Some(k0) = lines.insert((i, r.line), k) {
            return Err(Error::Input(format!(
                "trace line {} has two results: {} and {} (each planned row is sent once)",
                r.line,
                place(k0),
                place(k)
            )));
        }
        got[i as usize] += 1;
    }
    for (i, (s, side)) in &shards {
        let want = plan.rows.get(*i as usize).copied().unwrap_or(0);
        let have = got[*i as usize];
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
        same_run(&first, &first_path, s, side)?;
    }
    run.info = Some(merged(&shards, plan));
    run.info_path = None;
    Ok(())
}

/// The shards must have run the same options.
fn same_run(a: &Summary, a_path: &Path, b: &Summary, b_path: &Path) -> Result<()> {
    let (x, y) = (&a.run, &b.run);
    let fields: [(&str, String, String); 11] = [
        ("target", x.target.clone(), y.target.clone()),
        ("url", format!("{:?}", x.url), format!("{:?}", y.url)),
        ("endpoint", x.endpoint.clone(), y.endpoint.clone()),
        ("model", format!("{:?}", x.model), format!("{:?}", y.model)),
        ("speedup", x.speedup.to_string(), y.speedup.to_string()),
        ("arrival", x.arrival.clone(), y.arrival.clone()),
        ("rate", format!("{:?}", x.rate), format!("{:?}", y.rate)),
        ("turns", x.turns.clone(), y.turns.clone()),
        ("seed", x.seed.to_string(), y.seed.to_string()),
        // Each shard caps the whole trace's delays before taking its part,
        // so the count is the whole trace's in every shard.
        (
            "max_delay",
            format!("{:?}", x.max_delay),
            format!("{:?}", y.max_delay),
        ),
        (
            "block_size",
            x.block_size.to_string(),
            y.block_size.to_string(),
        ),
    ];
    for (name, u, v) in fields {
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
    // Per-shard statistics a merge cannot pool.
    m.engine = None;
    m.fidelity = None;
    m
}
