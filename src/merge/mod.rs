//! `mc-merge`: several traces into one, one after another (`concat`) or
//! side by side in time (`interleave`), with each file's session and hash
//! ids kept apart by default.
//!
//! `rewrite` holds the per-row rules (weights, rate, shift, id namespaces),
//! `input` the files and their row streams; this module the options and the
//! two ways of putting the streams together.

pub mod ahead;
pub mod heads;
pub mod input;
pub mod reading;
pub mod rewrite;
pub mod sorted;

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::filter::IoArgs;
use crate::jsonl::Output;
use crate::options;
use crate::record::{self, Number};
use heads::{Heads, Key};
use input::{Input, Source};
use rewrite::{FileRule, Rewriter};

/// Merge Mooncake traces: one after another (concat) or by timestamp
/// (interleave).
///
/// Session ids and hash ids of different files are made disjoint (two traces
/// that both number ids from 0 share nothing in reality) by mc-roots' rule:
/// in file t of k, hash id h becomes h*k + t; a numeric session id the same,
/// a string session id gets the prefix `f{t}:`, and so does every agent
/// graph id (`request_id`, and the ids in `wait_for` and `branches`, written
/// as strings), so two files' calls never wait for each other.
/// --scale-rate scales `tool_wait_ms` as it does `delay`. --shared-ids
/// keeps all ids as they are. Every other byte of a row is written as read. A one-line summary (rows
/// per file, rows written, time span) goes to stderr.
#[derive(Debug, clap::Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-merge concat --gap-ms 60000 monday.jsonl tuesday.jsonl > two-days.jsonl
  mc-merge interleave chat.jsonl agent.jsonl --weights 3,1 | mc-analyze
  mc-scale --speedup 2 < a.jsonl | mc-merge interleave - b.jsonl --scale-rate 1,0.5"
)]
pub struct MergeArgs {
    // Optional for clap so `--completions`/`--man` work without a mode;
    // a missing mode is a usage error in `run`.
    #[command(subcommand)]
    pub mode: Option<Mode>,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum Mode {
    /// One file after another: each file's timestamps are shifted so that
    /// its earliest arrival comes --gap-ms after the latest arrival written
    /// before it (the first file keeps its own). Unsorted files are fine:
    /// each file after the first is read twice (once for its earliest
    /// arrival); stdin in a later place is held in memory for that.
    #[command(after_help = "Examples:
  mc-merge concat --gap-ms 1000 a.jsonl b.jsonl c.jsonl > abc.jsonl
  mc-gen constant --qps 2 --duration-ms 60000 | mc-merge concat - burst.jsonl")]
    Concat(ConcatArgs),
    /// All rows by timestamp: a streaming k-way merge of inputs sorted by
    /// timestamp, in constant memory. Ties go to the lower file index, then
    /// file order. A row without a timestamp stays right behind the row
    /// before it in its file. An unsorted input is an error naming the file
    /// and line; --sort sorts every input first (an external merge sort).
    #[command(after_help = "Examples:
  mc-merge interleave chat.jsonl code.jsonl > mixed.jsonl
  mc-merge interleave --sort --weights 1,1 --seed 7 a.jsonl b.jsonl | mc-analyze")]
    Interleave(InterleaveArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct ConcatArgs {
    /// Milliseconds between the latest arrival of the files before and the
    /// earliest arrival of the next file.
    #[arg(long, default_value_t = 0.0, value_name = "MS", value_parser = options::non_negative)]
    pub gap_ms: f64,

    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, Clone, clap::Args)]
pub struct InterleaveArgs {
    /// Sort each input by timestamp (stable) instead of refusing an
    /// unsorted one: an external merge sort, in memory of about
    /// --sort-run-bytes (sorted runs wait in temporary files in $TMPDIR).
    #[arg(long)]
    pub sort: bool,

    /// --sort's run size: rows held in memory before they are sorted and
    /// written to a temporary file (an input smaller than this is sorted
    /// in memory).
    #[arg(long, default_value_t = sorted::DEFAULT_RUN_BYTES as u64, value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub sort_run_bytes: u64,

    #[command(flatten)]
    pub common: CommonArgs,
}

/// What both modes take.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Keep session, hash and request ids as they are: equal ids in two
    /// files then name the same session and the same block content (and an
    /// agent-graph `request_id` in both files is a duplicate).
    #[arg(long)]
    pub shared_ids: bool,

    /// Mix the files' rows in these proportions (one weight a file): the
    /// largest output whose rows per file are in proportion to the weights.
    /// The file that limits it keeps all its rows; the others keep a seeded
    /// sample of sessions (whole sessions; a row without a session_id is
    /// its own), so the proportions hold in expectation. Row counts are
    /// taken in a first pass (stdin is held in memory for it).
    #[arg(long, value_name = "W,W,…", value_delimiter = ',', value_parser = options::non_negative)]
    pub weights: Option<Vec<f64>>,

    /// Multiply each file's arrival rate (one factor a file): timestamps
    /// become trunc(t / R) and delays shrink by R, as `mc-scale --speedup R`.
    /// Applied before concat's shift.
    #[arg(long, value_name = "R,R,…", value_delimiter = ',', value_parser = options::positive)]
    pub scale_rate: Option<Vec<f64>>,

    /// Seed of the --weights sample: the same seed, the same rows.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed: u64,

    /// `--input` (read before the FILEs), `--output`, `--on-error`,
    /// `--max-line-bytes` and `--line-buffered`, as every filter has them.
    /// (Its plain FILE is the first of the files below: it comes first so
    /// that the list, the last positional argument, takes the rest.)
    #[command(flatten)]
    pub io: IoArgs,

    /// Input files, in order (`-` is stdin, at most once).
    #[arg(value_name = "FILE", index = 2, required_unless_present_any = ["input", "file"])]
    pub files: Vec<PathBuf>,
}

impl CommonArgs {
    /// The inputs in order: `-i FILE` first, then the FILEs.
    fn inputs(&self) -> Vec<&PathBuf> {
        self.io
            .input
            .iter()
            .chain(&self.io.file)
            .chain(&self.files)
            .collect()
    }
}

/// The tool's name, for its messages and `--version`.
pub const TOOL: &str = "mc-merge";

pub fn run(args: &MergeArgs) -> Result<()> {
    let tool = TOOL;
    match &args.mode {
        Some(Mode::Concat(a)) => concat(tool, a),
        Some(Mode::Interleave(a)) => interleave(tool, a),
        None => Err(Error::usage(
            "a mode is required: `mc-merge concat FILE…` or `mc-merge interleave FILE…`",
        )),
    }
}

/// The inputs, opened, and the rule for each.
struct Plan {
    inputs: Vec<Input>,
    rules: Vec<FileRule>,
}

impl Plan {
    /// Opens every input (stdin held in memory when `read_twice` says a
    /// file is read more than once) and decides each file's rule;
    /// `--weights` counts rows here.
    fn new(c: &CommonArgs, read_twice: impl Fn(usize) -> bool) -> Result<Plan> {
        let files = c.inputs();
        let n = files.len();
        for (name, list) in [("--weights", &c.weights), ("--scale-rate", &c.scale_rate)] {
            if let Some(v) = list.as_ref().filter(|v| v.len() != n) {
                return Err(Error::usage(format!(
                    "{name} has {} values for {n} files; give one per file",
                    v.len()
                )));
            }
        }
        if files.iter().filter(|f| f.as_os_str() == "-").count() > 1 {
            return Err(Error::usage("`-` (stdin) may be given only once"));
        }
        if c.weights
            .as_ref()
            .is_some_and(|w| w.iter().all(|&w| w == 0.0))
        {
            return Err(Error::usage(
                "--weights are all 0: nothing would be written",
            ));
        }
        let mut inputs = files
            .iter()
            .map(|f| Input::new(f, c.io.max_line_bytes))
            .collect::<Result<Vec<_>>>()?;
        for (t, input) in inputs.iter_mut().enumerate() {
            if read_twice(t) || c.weights.is_some() {
                input.hold()?;
            }
        }
        let keep = match &c.weights {
            Some(w) => {
                let rows = inputs
                    .iter()
                    .map(Input::count_rows)
                    .collect::<Result<Vec<_>>>()?;
                rewrite::keep_fractions(w, &rows)
            }
            None => vec![1.0; n],
        };
        let k = if c.shared_ids { 1 } else { n as u64 };
        let rules = (0..n)
            .map(|t| FileRule {
                t: t as u64,
                k,
                rate: c.scale_rate.as_ref().map_or(1.0, |r| r[t]),
                keep: keep[t],
                seed: c.seed,
                offset: 0.0,
            })
            .collect();
        Ok(Plan { inputs, rules })
    }
}

/// What was written: rows per file and the time span, for the summary.
#[derive(Default)]
struct Written {
    /// (name, rows read, rows dropped by --weights, rows written).
    files: Vec<(String, u64, u64, u64)>,
    rows: u64,
    first: Option<Number>,
    last: Option<Number>,
    skipped: Vec<String>,
}

impl Written {
    /// Writes the row `src` moved to and the rows after it that
    /// `goes_first` lets go with it ([`Source::span`]: a read-ahead
    /// batch's run in one write); returns how many rows went out.
    fn span(
        &mut self,
        out: &mut Output,
        src: &mut Source,
        goes_first: impl FnMut(f64) -> bool,
    ) -> Result<u64> {
        self.time(src.timestamp);
        let n = match src.span(goes_first) {
            Some((bytes, taken)) => {
                out.write_records(bytes)?;
                for &(_, _, timestamp) in taken {
                    self.time(timestamp);
                }
                1 + taken.len() as u64
            }
            None => {
                out.write_terminated(src.line())?;
                1
            }
        };
        self.rows += n;
        Ok(n)
    }

    /// Writes the row `src` moved to.
    #[inline]
    fn row(&mut self, out: &mut Output, src: &Source) -> Result<()> {
        self.time(src.timestamp);
        self.rows += 1;
        // With its `\n`: under `--line-buffered` straight to the writer,
        // not copied into the output's buffer first.
        out.write_terminated(src.line())
    }

    /// A written timestamp, for the summary's span.
    #[inline]
    fn time(&mut self, timestamp: Option<Number>) {
        if let Some(t) = timestamp {
            let f = t.as_f64();
            if self.first.is_none_or(|m| f < m.as_f64()) {
                self.first = Some(t);
            }
            if self.last.is_none_or(|m| f > m.as_f64()) {
                self.last = Some(t);
            }
        }
    }

    fn file_done(&mut self, src: &Source, written: u64) {
        let (read, dropped) = src.counts();
        self.files.push((src.name.clone(), read, dropped, written));
        self.skipped.extend(src.skipped());
    }

    fn report(&self, tool: &str, mode: &str) {
        for s in &self.skipped {
            eprintln!("{tool}: {s}");
        }
        let files: Vec<String> = self
            .files
            .iter()
            .map(|(name, read, dropped, written)| {
                if *dropped > 0 {
                    format!("{name} {written} of {read} rows")
                } else {
                    format!("{name} {written} rows")
                }
            })
            .collect();
        let span = match (self.first, self.last) {
            (Some(a), Some(b)) => format!("timestamps {} to {} ms", fmt(a), fmt(b)),
            _ => "no timestamps".to_string(),
        };
        eprintln!(
            "{tool}: {mode}: {}; {} rows written, {span}",
            files.join(", "),
            self.rows
        );
    }
}

fn fmt(n: Number) -> String {
    let mut v = Vec::new();
    record::write_number(n, &mut v);
    String::from_utf8_lossy(&v).into_owned()
}

/// Runs `body` writing into the output, then flushes what was written even
/// when `body` failed (the good rows before a bad one are kept).
fn with_output(
    c: &CommonArgs,
    body: impl FnOnce(&mut Output, &mut Written) -> Result<()>,
) -> Result<Written> {
    let mut inputs: Vec<&std::path::Path> = c.inputs().into_iter().map(|p| p.as_path()).collect();
    inputs.push(std::path::Path::new("-"));
    let mut out = Output::open_for(c.io.output.as_deref(), c.io.line_buffered, &inputs)?;
    let mut written = Written::default();
    let result = body(&mut out, &mut written);
    let flushed = out.flush();
    result.and(flushed).map(|()| written)
}

fn concat(tool: &str, a: &ConcatArgs) -> Result<()> {
    let c = &a.common;
    // Every file but the first is read once ahead for its earliest arrival.
    let plan = Plan::new(c, |t| t > 0)?;
    let written = with_output(c, |out, w| {
        for (input, rule) in plan.inputs.iter().zip(&plan.rules) {
            let mut rule = rule.clone();
            if let Some(end) = w.last {
                let rw = Rewriter::new(rule.clone());
                let min = if read_ahead(c) {
                    input.earliest_chunked(&rw, cpus())?
                } else {
                    input.earliest(&rw)?
                };
                if let Some(min) = min {
                    rule.offset = end.as_f64() + a.gap_ms - min;
                }
            }
            let rw = Rewriter::new(rule);
            let mut src = Source::new(input, rw, c.io.on_error, false, read_ahead(c))?;
            let before = w.rows;
            // Every row of the file goes out in order: a read-ahead
            // batch's rows in one write.
            while src.advance()? {
                w.span(out, &mut src, |_| true)?;
            }
            w.file_done(&src, w.rows - before);
        }
        Ok(())
    })?;
    written.report(tool, "concat");
    Ok(())
}

/// Whether each input is read and rewritten a batch ahead on a thread of
/// its own (`ahead`), this thread merging and writing: in both modes, with
/// or without `--weights`, but not with `--line-buffered` (a batch holds
/// rows back) or on one CPU.
/// The same holds for concat's look-ahead pass for a file's earliest
/// arrival, which then runs on chunks (`Input::earliest_chunked`).
fn read_ahead(c: &CommonArgs) -> bool {
    !c.io.line_buffered && cpus() >= 2
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn interleave(tool: &str, a: &InterleaveArgs) -> Result<()> {
    let c = &a.common;
    let plan = Plan::new(c, |_| false)?;
    let ahead = read_ahead(c);
    let mut sources = plan
        .inputs
        .iter()
        .zip(&plan.rules)
        .map(|(input, rule)| {
            let rw = Rewriter::new(rule.clone());
            Source::new(input, rw, c.io.on_error, !a.sort, ahead)
        })
        .collect::<Result<Vec<_>>>()?;
    let written = with_output(c, |out, w| {
        let mut counts = vec![0u64; sources.len()];
        let mut heads = Heads::with_capacity(sources.len());
        for (t, src) in sources.iter_mut().enumerate() {
            if a.sort {
                src.sort(
                    usize::try_from(a.sort_run_bytes).unwrap_or(usize::MAX),
                    TOOL,
                )?;
            }
            if src.advance()? {
                heads.push(Key(src.key, t));
            }
        }
        // The smallest (timestamp, file) goes out; its file's next row
        // takes its place. Each file's rows leave in file order, so equal
        // timestamps keep the file order within a file. With it go the
        // rows after it in its read-ahead batch that still come before
        // every other file's head (the runner-up): the order is the
        // row-by-row merge's, but a run of one file's rows, as when the
        // files follow each other in time, goes out in one write with one
        // comparison a row (decision 0048, "later"). The next row's key
        // replaces the top in place (one sift down, not a pop and a push).
        // A run is looked for only when the top's file stayed on top (its
        // last row went before every other head): files that take turns
        // row by row pay nothing for it.
        let mut last = usize::MAX;
        while let Some(Key(_, t)) = heads.top() {
            let src = &mut sources[t];
            if t == last {
                let next = heads.runner_up();
                counts[t] += w.span(out, src, |key| {
                    next.is_none_or(|next| Key(key, t).before(&next))
                })?;
            } else {
                w.row(out, src)?;
                counts[t] += 1;
            }
            last = t;
            if src.advance()? {
                heads.replace_top(Key(src.key, t));
            } else {
                heads.pop_top();
            }
        }
        for (src, n) in sources.iter().zip(counts) {
            w.file_done(src, n);
        }
        Ok(())
    })?;
    written.report(tool, "interleave");
    Ok(())
}
