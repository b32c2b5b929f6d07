//! What mc-report reads: result files (stdin, paths, directories of them),
//! the run description beside them, and sweep directories.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::results::summary::{self, sidecar_path};
use crate::results::sweep::{under, SweepFile};
use crate::results::{line, RequestResult, Summary};

/// One run: its result lines, pooled from every file given for it, and
/// its description when one was found.
#[derive(Debug, Clone)]
pub struct Run {
    pub label: String,
    /// The files read (`-` for stdin).
    pub sources: Vec<PathBuf>,
    pub results: Vec<RequestResult>,
    /// Where each result came from: (index into `sources`, line number).
    pub places: Vec<(usize, u64)>,
    /// mc-replay's `--summary` JSON of the run (the run description and
    /// what result lines do not hold).
    pub info: Option<Summary>,
    pub info_path: Option<PathBuf>,
}

/// A sweep: its runs in the order of `sweep.json`, each labelled
/// `parameter=value`.
pub struct Sweep {
    pub dir: PathBuf,
    pub file: SweepFile,
    pub runs: Vec<Run>,
}

/// What the inputs turned out to be.
pub enum Inputs {
    /// One run (every file pooled), or one per argument (`--compare`).
    Runs(Vec<Run>),
    Sweep(Sweep),
}

/// The result files a path names: itself, or every `*.jsonl` in a
/// directory (sorted, so pooling is reproducible).
fn result_files(p: &Path) -> Result<Vec<PathBuf>> {
    if !p.is_dir() {
        return Ok(vec![p.to_path_buf()]);
    }
    let no_input = |source| Error::NoInput {
        path: p.to_path_buf(),
        source,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(p)
        .map_err(no_input)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|f| f.is_file() && f.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(no_input(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "a directory without result files (*.jsonl) or sweep.json",
        )));
    }
    Ok(files)
}

/// The description found beside a results file: `<stem>.summary.json`
/// (what mc-replay writes next to `--output`), else `summary.json` in the
/// same directory.
pub fn find_sidecar(results: &Path) -> Option<PathBuf> {
    if results == Path::new("-") {
        return None;
    }
    let own = sidecar_path(results);
    if own.is_file() {
        return Some(own);
    }
    let dir = if results.is_dir() {
        results.to_path_buf()
    } else {
        results.parent().unwrap_or(Path::new("")).to_path_buf()
    };
    let shared = dir.join("summary.json");
    shared.is_file().then_some(shared)
}

/// Reads the files of one run (pooled) and its description: `run_info`,
/// else the first sidecar found beside a file.
///
/// A request id seen twice is an error naming both places (the same file
/// given twice would count every request twice).
pub fn read_run(label: String, paths: &[PathBuf], run_info: Option<&Path>) -> Result<Run> {
    let mut results = Vec::new();
    let mut places = Vec::new();
    let mut sources = Vec::new();
    let mut sidecar = run_info.map(Path::to_path_buf);
    for p in paths {
        if sidecar.is_none() {
            sidecar = find_sidecar(p);
        }
        for f in result_files(p)? {
            let src = sources.len();
            line::read_file_numbered(&f, &mut |no, r| {
                results.push(r);
                places.push((src, no));
            })?;
            sources.push(f);
        }
    }
    let info = sidecar.as_deref().map(read_summary).transpose()?;
    let run = Run {
        label,
        sources,
        results,
        places,
        info,
        info_path: sidecar,
    };
    check_unique_ids(&run)?;
    Ok(run)
}

/// A run's summary JSON, its URL's credentials hidden: summaries written
/// before mc-replay hid a key in the URL's query (`?api_key=…`) still hold
/// it, and mc-report prints and draws the URL.
pub fn read_summary(path: &Path) -> Result<Summary> {
    let mut s = summary::read(path)?;
    s.run.url = s.run.url.as_deref().map(crate::options::redacted_url);
    Ok(s)
}

/// No request id twice in one run.
fn check_unique_ids(run: &Run) -> Result<()> {
    let mut seen: std::collections::HashMap<&str, usize> =
        std::collections::HashMap::with_capacity(run.results.len());
    for (k, r) in run.results.iter().enumerate() {
        if let Some(k0) = seen.insert(r.request_id.as_str(), k) {
            let at = |k: usize| {
                let (src, no) = run.places[k];
                let file = run.sources[src].display().to_string();
                format!("{file} line {no}")
            };
            return Err(Error::Input(format!(
                "request id {} appears twice: {} and {} (is a file given twice? each request \
                 is counted once)",
                r.request_id,
                at(k0),
                at(k)
            )));
        }
    }
    Ok(())
}

/// A sweep directory: one holding `sweep.json`.
pub fn is_sweep(p: &Path) -> bool {
    p.join("sweep.json").is_file()
}

pub fn read_sweep(dir: &Path) -> Result<Sweep> {
    let file = crate::results::sweep::read_index(dir)?;
    let mut runs = Vec::new();
    for e in &file.runs {
        let summary = under(dir, &e.summary);
        let label = format!("{}={}", file.parameter, e.value);
        runs.push(read_run(label, &[under(dir, &e.results)], Some(&summary))?);
    }
    Ok(Sweep {
        dir: dir.to_path_buf(),
        file,
        runs,
    })
}

/// A run's label when none is given: the run fields that tell the runs
/// apart, else the file name.
pub fn default_labels(runs: &mut [Run]) {
    type Field = (&'static str, fn(&Summary) -> Option<String>);
    const FIELDS: [Field; 7] = [
        ("rate", |s| s.run.rate.map(|r| r.to_string())),
        ("concurrency", |s| s.run.concurrency.map(|c| c.to_string())),
        ("speedup", |s| Some(s.run.speedup.to_string())),
        ("model", |s| s.run.model.clone()),
        ("arrival", |s| Some(s.run.arrival.clone())),
        ("target", |s| Some(s.run.target.clone())),
        ("input", |s| Some(s.run.input.clone())),
    ];
    // Only described runs tell what differs; the others go by file name.
    let described: Vec<&Summary> = runs.iter().filter_map(|r| r.info.as_ref()).collect();
    let differ: Vec<&Field> = FIELDS
        .iter()
        .filter(|(_, get)| {
            let first = described.first().map(|s| get(s));
            described.iter().any(|s| Some(get(s)) != first)
        })
        .collect();
    for r in runs.iter_mut() {
        let parts: Vec<String> = match &r.info {
            Some(s) => differ
                .iter()
                .filter_map(|(name, get)| get(s).map(|v| format!("{name}={v}")))
                .collect(),
            None => Vec::new(),
        };
        let merged = r
            .info
            .as_ref()
            .and_then(|s| s.run.shard.as_ref())
            .filter(|sh| sh.index.is_none());
        r.label = if let (true, Some(sh)) = (parts.is_empty(), merged) {
            format!("{} shards merged", sh.count)
        } else if parts.is_empty() {
            file_label(&r.sources)
        } else {
            parts.join(" ")
        };
    }
    // Two runs must never share a label: number the repeats.
    let labels: Vec<String> = runs.iter().map(|r| r.label.clone()).collect();
    for (i, r) in runs.iter_mut().enumerate() {
        if labels.iter().filter(|l| **l == labels[i]).count() > 1 {
            r.label = format!("{} #{}", labels[i], i + 1);
        }
    }
}

/// `results.jsonl` → its directory's name, else the file's stem.
fn file_label(sources: &[PathBuf]) -> String {
    let Some(p) = sources.first() else {
        return "stdin".into();
    };
    if p == Path::new("-") {
        return "stdin".into();
    }
    let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned());
    match stem.as_deref() {
        Some("results") | None => p
            .parent()
            .and_then(|d| d.file_name())
            .map_or_else(|| "results".into(), |d| d.to_string_lossy().into_owned()),
        Some(s) => s.to_string(),
    }
}
