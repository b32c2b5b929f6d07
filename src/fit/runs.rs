//! What a fit learns from: the requests of real runs (their result lines,
//! read through [`crate::results`]), the rows of the trace they replayed,
//! and the server's shape where the run recorded it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::engine::{row_blocks, ParamsOut};
use crate::error::{Error, RecordError, Result};
use crate::jsonl::{open_input, LineReader, DEFAULT_MAX_LINE_BYTES};
use crate::prom::Histogram;
use crate::results::{line, summary, RequestResult, Summary};

/// One trace row, as the engine needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub hash_ids: Vec<u64>,
    pub input_length: Option<u64>,
    /// The row's `request_id`: a designed row's names its part
    /// (`gen::calibrate`, read by [`super::design`]).
    pub request_id: Option<String>,
}

/// The trace's rows by line number.
pub fn read_trace(path: &Path) -> Result<HashMap<u64, Row>> {
    let mut reader = LineReader::new_text(open_input(Some(path))?, DEFAULT_MAX_LINE_BYTES);
    let mut rows = HashMap::new();
    while let Some(l) = reader.next_line()? {
        let v: Value = serde_json::from_slice(l.bytes).map_err(|e| Error::Data {
            line: l.no,
            err: RecordError::new(format!("not a JSON object: {e}")),
        })?;
        let ids = match v.get("hash_ids") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| {
                    x.as_u64().ok_or_else(|| Error::Data {
                        line: l.no,
                        err: RecordError::field("hash_ids", "expected integers ≥ 0"),
                    })
                })
                .collect::<Result<Vec<u64>>>()?,
            Some(_) => {
                return Err(Error::Data {
                    line: l.no,
                    err: RecordError::field("hash_ids", "expected an array"),
                })
            }
        };
        rows.insert(
            l.no,
            Row {
                hash_ids: ids,
                input_length: v.get("input_length").and_then(Value::as_u64),
                request_id: v
                    .get("request_id")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            },
        );
    }
    Ok(rows)
}

/// One measured request: when it was sent, its prompt as engine blocks,
/// and what the server did (µs).
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub send_us: u64,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    /// The row's prompt in the trace's blocks, expanded to engine blocks
    /// when the engine's block size is known ([`Run::blocks`]).
    pub row: Row,
    pub line: u64,
    pub ttft_us: Option<u64>,
    pub e2e_us: Option<u64>,
    /// Mean gap between output tokens (needs ≥ 2 tokens).
    pub itl_us: Option<f64>,
    pub cached_tokens: Option<u64>,
    /// Sent only to warm up, or failed: replayed (the server saw it) but
    /// not scored.
    pub scored: bool,
}

/// One run: its requests in send order, and what it says about the server.
#[derive(Debug, Clone)]
pub struct Run {
    pub label: String,
    pub requests: Vec<Measured>,
    /// The trace's block size (the run's description, else 512).
    pub trace_block: u64,
    /// The engine's shape when the run was on the engine model.
    pub engine: Option<ParamsOut>,
    /// The server's own request-phase histograms over the run (its
    /// summary's `fidelity.server_histograms`), empty when it exported none.
    pub server: BTreeMap<String, Histogram>,
}

/// The server's prefill and decode histograms of a run, when it has both
/// with observations: what the fit of service time reads instead of the
/// client's TTFT and E2E.
pub fn service_histograms(run: &Run) -> Option<(&Histogram, &Histogram)> {
    let get = |name: &str| run.server.get(name).filter(|h| h.count > 0.0);
    Some((
        get("vllm:request_prefill_time_seconds")?,
        get("vllm:request_decode_time_seconds")?,
    ))
}

impl Run {
    /// The most requests in flight at once (sent, not yet answered), as
    /// the client saw them: queued at the server or running. A concurrency
    /// limit at or above it never held a request back in this run.
    pub fn peak_in_flight(&self) -> u64 {
        // (time, +1 sent / -1 answered); an answer sorts before a send at
        // the same µs, as the request was gone when the next arrived.
        let mut events: Vec<(u64, i64)> = Vec::with_capacity(self.requests.len() * 2);
        for m in &self.requests {
            events.push((m.send_us, 1));
            if let Some(e2e) = m.e2e_us {
                events.push((m.send_us.saturating_add(e2e), -1));
            }
        }
        events.sort_unstable();
        let (mut now, mut peak) = (0i64, 0i64);
        for (_, d) in events {
            now += d;
            peak = peak.max(now);
        }
        peak as u64
    }

    /// Requests sent per second over the span of the sends (`None` for a
    /// run of one request or sends all at once).
    pub fn rate(&self) -> Option<f64> {
        let first = self.requests.iter().map(|m| m.send_us).min()?;
        let last = self.requests.iter().map(|m| m.send_us).max()?;
        (last > first).then(|| (self.requests.len() - 1) as f64 / ((last - first) as f64 / 1e6))
    }

    /// Engine blocks of request `i` at engine block size `eb`.
    pub fn blocks(&self, i: usize, eb: u64) -> Vec<u64> {
        let m = &self.requests[i];
        row_blocks(
            &m.row.hash_ids,
            m.prompt_tokens,
            self.trace_block,
            eb,
            m.line,
        )
    }
}

/// The result files a path names (a file, or every `*.jsonl` in a folder).
fn result_files(p: &Path) -> Result<Vec<PathBuf>> {
    if !p.is_dir() {
        return Ok(vec![p.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(p)
        .map_err(|source| Error::NoInput {
            path: p.to_path_buf(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|f| f.is_file() && f.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    Ok(files)
}

/// The run's summary: beside the results (`R.summary.json`), or
/// `summary.json` in the same folder.
fn find_summary(results: &Path) -> Option<Summary> {
    let own = summary::sidecar_path(results);
    let shared = results.with_file_name("summary.json");
    [own, shared]
        .into_iter()
        .find(|p| p.is_file())
        .and_then(|p| summary::read(&p).ok())
}

/// Reads a run from a results file or folder, with the trace's rows.
pub fn read_run(path: &Path, trace: &HashMap<u64, Row>) -> Result<Run> {
    let mut results: Vec<RequestResult> = Vec::new();
    let mut desc = None;
    for f in result_files(path)? {
        line::read_file(&f, &mut results)?;
        desc = desc.or_else(|| find_summary(&f));
    }
    if results.is_empty() {
        return Err(Error::Input(format!(
            "{}: no result lines (give mc-replay's -o file or its folder)",
            path.display()
        )));
    }
    let trace_block = desc.as_ref().map_or(512, |s| s.run.block_size);
    let engine = desc
        .as_ref()
        .and_then(|s| s.engine.clone())
        .and_then(|v| v.get("params").cloned())
        .and_then(|p| serde_json::from_value::<ParamsOut>(p).ok());
    let server = desc
        .as_ref()
        .and_then(|s| s.fidelity.as_ref())
        .map(|f| f.server_histograms.clone())
        .unwrap_or_default();
    results.sort_by(|a, b| a.t_send_ms.total_cmp(&b.t_send_ms));
    let mut requests = Vec::with_capacity(results.len());
    for r in &results {
        let Some(row) = trace.get(&r.line) else {
            return Err(Error::Input(format!(
                "{}: a result names line {} of the trace, which has no such row \
                 (is --trace the file this run replayed?)",
                path.display(),
                r.line
            )));
        };
        let us = |ms: f64| line::us(ms);
        let tokens = r.completion_tokens.or(r.output_tokens).unwrap_or(16);
        let itl_us = match (r.t_first_ms, r.t_last_ms, r.completion_tokens) {
            (Some(f), Some(l), Some(n)) if n >= 2 => Some((l - f) * 1000.0 / (n - 1) as f64),
            _ => None,
        };
        requests.push(Measured {
            send_us: us(r.t_send_ms),
            prompt_tokens: r
                .input_tokens
                .or(row.input_length)
                .or(r.prompt_tokens)
                .unwrap_or(1),
            output_tokens: tokens.max(1),
            row: row.clone(),
            line: r.line,
            ttft_us: r.ttft_ms.map(us),
            e2e_us: r.e2e_ms.map(us),
            itl_us,
            cached_tokens: r.cached_tokens,
            scored: r.is_ok() && !r.warmup,
        });
    }
    Ok(Run {
        label: path.display().to_string(),
        requests,
        trace_block,
        engine,
        server,
    })
}
