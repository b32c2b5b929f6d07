//! `mc-report`: mc-replay's summary recomputed from result files (exactly:
//! the raw values of every line go through mc-replay's own tally), runs
//! compared side by side, and a self-contained HTML report.
//!
//! The pieces: [`input`] finds the result files, the run description
//! beside them and sweep directories; [`summary`] recomputes a run's
//! summary; [`compare`] lines runs up; [`figures`] and [`html`] draw;
//! [`llmd`] writes a run as llm-d-benchmark's benchmark report.

pub mod compare;
pub mod figures;
pub mod html;
pub mod input;
pub mod llmd;
pub mod merge;
pub mod replayed;
pub mod summary;

use std::collections::HashSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::Parser;
use serde_json::json;

use crate::blocks::BlockSize;
use crate::error::{Error, Result};
use crate::filter::IoArgs;
use crate::jsonl::Output;
use crate::plot::trace as trace_plot;
use crate::results::Slo;

use crate::results::sweep::SweepFile;
use input::{Inputs, Run};
use summary::{recompute, Recomputed};

/// Summarise, compare and draw mc-replay runs from their result files.
///
/// Reads result lines (JSONL, as mc-replay writes them) from the FILEs,
/// from every *.jsonl file of a directory, or from stdin, and prints the
/// summary table mc-replay prints, recomputed exactly from the raw values
/// (several files of one run are pooled, never their percentiles
/// averaged). The run's description comes from mc-replay's --summary JSON:
/// --run-info, else R.summary.json beside R.jsonl (mc-replay writes it next
/// to --output), else summary.json in the same directory.
///
/// A directory holding sweep.json is a sweep: its runs are compared, and
/// the HTML report draws the throughput-latency curve.
///
/// The result files of `mc-replay --shard` runs (with their summaries
/// beside them) are merged into the run a single machine would have made:
/// every shard of one plan must be there once and complete, or the error
/// names what is missing. A request id found twice is an error naming both
/// places.
#[derive(Debug, Clone, Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-replay --url http://127.0.0.1:8000 -i trace.jsonl -o results.jsonl
  mc-report results.jsonl                       # the summary table (results.summary.json describes the run)
  mc-report --json results.jsonl | jq .metrics.ttft.p99
  mc-report --format llm-d results.jsonl > br.json  # llm-d-benchmark's report (schema v0.2.1)
  mc-report --compare base.jsonl new.jsonl      # one column per run, change against the first
  mc-report --compare --label vllm,sglang --csv a.jsonl b.jsonl > cmp.csv
  mc-report --html report.html --trace trace.jsonl results.jsonl
  mc-report --html sweep.html sweep-dir/        # a sweep: throughput-latency curve and table
  mc-report shards/shard-*.jsonl                # the shards of one mc-replay --shard run, merged"
)]
pub struct ReportArgs {
    /// Result files, directories of them, or a sweep directory (`-` or
    /// none: stdin).
    #[arg(value_name = "FILE")]
    pub inputs: Vec<PathBuf>,

    /// The run's description: mc-replay's --summary JSON (default: the one
    /// found beside the results).
    #[arg(long, value_name = "SUMMARY.json")]
    pub run_info: Option<PathBuf>,

    /// Each FILE is a run (a directory's files pooled): one column per run,
    /// with the change against the first.
    #[arg(long)]
    pub compare: bool,

    /// Names of the runs, comma-separated, in order (default: the run
    /// fields that tell them apart, else the file names).
    #[arg(long, value_delimiter = ',', value_name = "A,B,...")]
    pub label: Vec<String>,

    /// Print JSON: mc-replay's --summary document for one run, the
    /// comparison for several.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,

    /// Print CSV: mc-replay's --summary-csv for one run; metric,run,value,change_pct for several.
    #[arg(long)]
    pub csv: bool,

    /// What to print: `text` (the table), `json` (as --json), `csv` (as
    /// --csv), or `llm-d`: one run as llm-d-benchmark's benchmark report
    /// (JSON, schema v0.2.1), for the dashboards made for its harnesses.
    #[arg(long, value_enum, value_name = "FORMAT", conflicts_with_all = ["json", "csv"])]
    pub format: Option<Format>,

    /// Also write a self-contained HTML report (its charts drawn by its own
    /// inline script: hover, zoom, hide a series, sort a table; no network).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,

    /// The replayed trace: the HTML report adds mc-plot's figure of the
    /// rows the run replayed (all of them, or the part a run cut short by
    /// --max-requests sent). It must be the file mc-replay read (after
    /// mc-scale, mc-cap, ...): a trace whose rows, prompt sizes or
    /// timestamps do not match the run's result lines is refused (exit 65)
    /// rather than drawn as the replayed one.
    #[arg(long, value_name = "TRACE", requires = "html")]
    pub trace: Option<PathBuf>,

    /// Goodput against these bounds instead of the run's own `--slo`.
    #[arg(long, value_name = "BOUNDS", value_parser = Slo::parse)]
    pub slo: Option<Slo>,

    /// Window of the per-window lines in the HTML figures, in seconds
    /// (default: about 40 windows over the run).
    #[arg(long, value_name = "S", value_parser = crate::options::positive_seconds)]
    pub window_s: Option<f64>,

    /// At most this many session lanes in a timeline.
    #[arg(long, default_value_t = trace_plot::MAX_SESSIONS, value_name = "N")]
    pub max_sessions: usize,
}

/// What `mc-report` prints on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    Csv,
    #[value(name = "llm-d")]
    LlmD,
}

impl ReportArgs {
    /// The format `--format`, `--json` or `--csv` chose (text without one).
    pub fn format(&self) -> Format {
        match (self.format, self.json, self.csv) {
            (Some(f), _, _) => f,
            (None, true, _) => Format::Json,
            (None, _, true) => Format::Csv,
            (None, false, false) => Format::Text,
        }
    }
}

/// A sweep's own description, beside its runs.
pub struct SweepMeta {
    pub dir: PathBuf,
    pub file: SweepFile,
}

/// Everything the outputs are made from.
pub struct Report {
    pub runs: Vec<Run>,
    pub summaries: Vec<Recomputed>,
    pub sweep: Option<SweepMeta>,
}

impl Report {
    pub fn rows(&self) -> Vec<compare::MetricRow> {
        compare::rows(&self.summaries.iter().collect::<Vec<_>>())
    }

    fn labels(&self) -> Vec<String> {
        self.runs.iter().map(|r| r.label.clone()).collect()
    }

    /// The comparison as JSON.
    pub fn compare_json(&self) -> serde_json::Value {
        let runs: Vec<serde_json::Value> = self
            .runs
            .iter()
            .zip(&self.summaries)
            .map(|(r, s)| {
                json!({
                    "label": r.label,
                    "sources": r.sources,
                    "run": if s.described { json!(s.summary.run) } else { json!(null) },
                })
            })
            .collect();
        let mut v = json!({ "runs": runs, "metrics": self.rows() });
        if let Some(sw) = &self.sweep {
            v["sweep"] = json!({
                "parameter": sw.file.parameter,
                "values": sw.file.runs.iter().map(|r| r.value).collect::<Vec<_>>(),
                "stopped": sw.file.stopped.as_ref().map(|s| json!({"reason": s.reason, "value": s.value})),
            });
        }
        v
    }
}

/// Reads the inputs as the options say: one pooled run, one run per
/// argument (`--compare`), or a sweep directory's runs.
fn read_inputs(args: &ReportArgs) -> Result<Inputs> {
    let paths: Vec<PathBuf> = if args.inputs.is_empty() {
        vec![PathBuf::from("-")]
    } else {
        args.inputs.clone()
    };
    if paths.iter().filter(|p| *p == Path::new("-")).count() > 1 {
        return Err(Error::usage("stdin (`-`) can be read only once"));
    }
    if let Some(dir) = paths.iter().find(|p| input::is_sweep(p)) {
        if paths.len() > 1 {
            return Err(Error::usage(format!(
                "{} is a sweep directory: give it alone",
                dir.display()
            )));
        }
        if args.run_info.is_some() {
            return Err(Error::usage(
                "--run-info: a sweep names each run's summary in its sweep.json",
            ));
        }
        return Ok(Inputs::Sweep(input::read_sweep(dir)?));
    }
    if args.compare {
        if paths.len() < 2 {
            return Err(Error::usage("--compare needs at least two runs"));
        }
        if args.run_info.is_some() {
            return Err(Error::usage(
                "--run-info describes one run; with --compare each run's summary is found beside its results",
            ));
        }
        let runs = paths
            .iter()
            .map(|p| read_run(std::slice::from_ref(p), None))
            .collect::<Result<Vec<_>>>()?;
        return Ok(Inputs::Runs(runs));
    }
    Ok(Inputs::Runs(vec![read_run(
        &paths,
        args.run_info.as_deref(),
    )?]))
}

/// One run's files ([`input::read_run`]); the shards of one `mc-replay
/// --shard` run checked and merged ([`merge`]).
fn read_run(paths: &[PathBuf], run_info: Option<&Path>) -> Result<Run> {
    let mut run = input::read_run(String::new(), paths, run_info)?;
    if merge::is_sharded(&run) {
        if run_info.is_some() {
            return Err(Error::usage(
                "--run-info: sharded results are described by each shard's own summary beside them",
            ));
        }
        merge::merge(&mut run)?;
    }
    Ok(run)
}

/// Builds the report: runs labelled and summarised.
pub fn build(args: &ReportArgs) -> Result<Report> {
    let (mut runs, sweep) = match read_inputs(args)? {
        Inputs::Runs(rs) => (rs, None),
        Inputs::Sweep(s) => (
            s.runs,
            Some(SweepMeta {
                dir: s.dir,
                file: s.file,
            }),
        ),
    };
    if sweep.is_none() {
        input::default_labels(&mut runs);
    }
    if !args.label.is_empty() {
        if args.label.len() != runs.len() {
            return Err(Error::usage(format!(
                "--label: {} names for {} runs",
                args.label.len(),
                runs.len()
            )));
        }
        for (r, l) in runs.iter_mut().zip(&args.label) {
            r.label = l.clone();
        }
    }
    if let Some(empty) = runs.iter().find(|r| r.results.is_empty()) {
        return Err(Error::Input(format!(
            "run {}: no result lines in {}",
            empty.label,
            empty
                .sources
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let summaries = runs.iter().map(|r| recompute(r, args.slo)).collect();
    Ok(Report {
        runs,
        summaries,
        sweep,
    })
}

/// The text, JSON, CSV or llm-d report for stdout.
pub fn render(r: &Report, args: &ReportArgs) -> Result<String> {
    let format = args.format();
    let one_run = r.runs.len() == 1 && r.sweep.is_none();
    if format == Format::LlmD {
        // The schema's report describes one load on one stack: a sweep or
        // a comparison is one report per run.
        if !one_run {
            return Err(Error::usage(
                "--format llm-d: a report describes one run; give one run's results \
                 (for a sweep, one report per run directory: \
                 for d in sweep/*/; do mc-report --format llm-d \"$d\" > \"${d%/}.br.json\"; done)",
            ));
        }
        return llmd::render(&r.runs[0], &r.summaries[0]);
    }
    if one_run {
        let s = &r.summaries[0];
        return Ok(if format == Format::Json {
            // A described run prints exactly the document mc-replay wrote
            // (same struct, same field order).
            if s.described {
                pretty(&s.summary)?
            } else {
                pretty(&s.json())?
            }
        } else if format == Format::Csv {
            s.summary.csv()
        } else {
            s.table(&r.runs[0].label)
        });
    }
    let labels = r.labels();
    let rows = r.rows();
    Ok(if format == Format::Json {
        pretty(&r.compare_json())?
    } else if format == Format::Csv {
        compare::csv(&labels, &rows)
    } else {
        let mut s = String::new();
        for (run, rc) in r.runs.iter().zip(&r.summaries) {
            s.push_str(&format!("run {}: {}\n", run.label, summary::describe(rc)));
        }
        if let Some(sw) = &r.sweep {
            if let Some(st) = &sw.file.stopped {
                let at = format!(" at {}", st.value);
                s.push_str(&format!("sweep stopped{at}: {}\n", st.reason));
            }
        }
        s.push_str(&compare::table(&labels, &rows));
        s
    })
}

/// Pretty JSON with a final newline.
fn pretty<T: serde::Serialize + ?Sized>(v: &T) -> Result<String> {
    let mut s = serde_json::to_string_pretty(v).map_err(|e| Error::Other(e.into()))?;
    s.push('\n');
    Ok(s)
}

/// The HTML page of the report.
pub fn html_page(r: &Report, args: &ReportArgs) -> Result<String> {
    let data: Vec<figures::RunData> = r
        .runs
        .iter()
        .map(|x| figures::RunData {
            label: &x.label,
            results: &x.results,
        })
        .collect();
    let windows = figures::windows(&data, args.window_s)?;
    let run_panels = figures::panels(&data, windows, args.max_sessions);
    let sweep_panels = match &r.sweep {
        Some(_) => figures::sweep_panels(&r.summaries.iter().collect::<Vec<_>>()),
        None => Vec::new(),
    };
    let trace = match &args.trace {
        Some(t) => Some(trace_section(r, args, t)?),
        None => None,
    };
    html::page(r, &sweep_panels, &run_panels, trace.as_ref()).map_err(|e| Error::Other(e.into()))
}

/// mc-plot's panels of the replayed trace, drawn from the rows the runs
/// replayed (those with a result line: a run cut short by
/// `--max-requests` draws only its part of the trace).
fn trace_section(r: &Report, args: &ReportArgs, trace: &Path) -> Result<html::TraceSection> {
    // The run's block size, else the size the trace's rows decide.
    let size = r
        .summaries
        .iter()
        .filter(|s| s.described && s.summary.run.block_size > 0)
        .map(|s| BlockSize::Fixed(s.summary.run.block_size))
        .next()
        .unwrap_or(BlockSize::Auto);
    let io = IoArgs {
        input: Some(trace.to_path_buf()),
        ..IoArgs::default()
    };
    let replayed: HashSet<u64> = r
        .runs
        .iter()
        .flat_map(|run| run.results.iter().map(|x| x.line))
        .collect();
    let read = trace_plot::read(TOOL, &io, size, None, Some(&replayed))?;
    replayed::check(&r.runs, trace, &read)?;
    let data = &read.data;
    let drawn = data.t_ms.len() as u64;
    if drawn == 0 {
        return Err(Error::Input(format!(
            "--trace {}: none of its {} rows has a result line (by line number): \
             give the trace the run replayed",
            trace.display(),
            read.rows
        )));
    }
    let note = if drawn == read.rows {
        format!(
            "All {} rows of {} (block size {}).",
            read.rows,
            trace.display(),
            read.block_size
        )
    } else {
        format!(
            "The {drawn} of {} rows of {} that the run replayed (the rows with a result \
             line; the rest were not sent), block size {}.",
            read.rows,
            trace.display(),
            read.block_size
        )
    };
    // mc-plot's panels, their windows sized to the rows drawn like the
    // report's own (mc-plot's 10 s default leaves a short trace one
    // window and no line).
    let (lo, hi) = data
        .t_ms
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &t| {
            (l.min(t), h.max(t))
        });
    let window_ms = if hi > lo {
        figures::auto_window_s((hi - lo) / 1000.0) * 1000.0
    } else {
        trace_plot::WINDOW_MS
    };
    data.check_windows(window_ms)?;
    let panels = trace_plot::panels(data, window_ms, trace_plot::BINS, args.max_sessions);
    Ok(html::TraceSection { panels, note })
}

/// The tool's name, for its messages and `--version`.
pub const TOOL: &str = "mc-report";

/// Runs `mc-report`.
pub fn run(args: &ReportArgs) -> Result<()> {
    let tool = TOOL;
    let report = build(args)?;
    let text = render(&report, args)?;
    let mut out = Output::open(None, false)?;
    out.buffer().extend_from_slice(text.as_bytes());
    out.end_line()?;
    out.flush()?;
    if let Some(p) = &args.html {
        let page = html_page(&report, args)?;
        std::fs::File::create(p)
            .and_then(|mut f| f.write_all(page.as_bytes()))
            .map_err(|source| Error::Output {
                path: p.clone(),
                source,
            })?;
    }
    let lines: usize = report.runs.iter().map(|r| r.results.len()).sum();
    let files: usize = report.runs.iter().map(|r| r.sources.len()).sum();
    let undescribed = report.summaries.iter().filter(|s| !s.described).count();
    eprintln!(
        "{tool}: {} run{}, {lines} result lines from {files} file{}{}{}",
        report.runs.len(),
        if report.runs.len() == 1 { "" } else { "s" },
        if files == 1 { "" } else { "s" },
        if undescribed > 0 {
            format!("; {undescribed} undescribed (no summary JSON found)")
        } else {
            String::new()
        },
        args.html
            .as_ref()
            .map_or(String::new(), |p| format!("; HTML in {}", p.display())),
    );
    Ok(())
}
