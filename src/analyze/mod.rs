//! `mc-analyze`: what is in a trace. One pass reads the records into compact
//! per-row facts and a per-id table; the report is computed from those once
//! the block size is known (it can be detected from the data).

pub mod aiperf;
pub mod blocksize;
pub mod cache;
pub mod graphs;
pub mod idtable;
pub mod lint;
pub mod parallel;
pub mod report;
pub mod rows;
pub mod sessions;
pub mod timing;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, RecordError, Result};
use crate::filter::{self, IoArgs};
use crate::graph::AgentFields;
use crate::jsonl::{ErrorPolicy, LineReader, Output};
use crate::progress::Progress;
use crate::record::{Field, Record};
use aiperf::{AiperfStats, FirstIds};
use blocksize::BlockReport;
use cache::{CacheModel, Order};
use graphs::{GraphReport, GraphTracker};
use idtable::IdTable;
use lint::Lint;
use rows::{RowFacts, RowStore};
use sessions::{SessionTracker, Sessions};
use timing::TimingStats;

pub use crate::blocks::BlockSize;
use crate::blocks::DEFAULT_BLOCK_SIZE;

/// Report what is in a Mooncake trace: AIPerf's `analyze-trace` statistics
/// (exactly), the block size check, a causal prefix-cache model, arrival
/// timing, sessions and lint.
///
/// Reads JSONL records on stdin (or --input) and writes a readable report on
/// stdout (or --output); --json writes it as one JSON object on one line.
/// With --pass the records go to stdout unchanged and the report to stderr,
/// so mc-analyze can sit in the middle of a pipeline. Memory grows with the
/// number of rows (about 40 bytes a row) and distinct ids, not with the
/// number of prefixes: a fraction of the input for rows of a few hundred
/// bytes, more than the input for rows of a few dozen.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-analyze < conversation_trace.jsonl
  mc-analyze --json < trace.jsonl | jq .aiperf.cache_hit_rate
  mc-analyze --block-size auto --cache-blocks 1000,10000,100000 < trace.jsonl
  mc-scale --speedup 2 < trace.jsonl | mc-analyze --pass --output-file stats.json | mc-replay ..."
)]
pub struct AnalyzeArgs {
    /// Tokens per hash id, or `auto` (the default): the one power of two every
    /// row allows, else the one most rows allow, else 512; the size used is
    /// in the report, and named on stderr when rows break it.
    #[arg(long, default_value = "auto", value_name = "B|auto")]
    pub block_size: BlockSize,

    /// Also model an LRU prefix cache of this many blocks (comma-separated
    /// for several sizes).
    #[arg(long, value_delimiter = ',', value_name = "C")]
    pub cache_blocks: Vec<u64>,

    /// Order in which the cache model replays the rows.
    #[arg(long, value_enum, default_value_t = Order::File)]
    pub order: Order,

    /// Write the whole report as one JSON object on one line.
    #[arg(long)]
    pub json: bool,

    /// Also write AIPerf's `analyze-trace` JSON (same keys, same order) to FILE.
    #[arg(long, value_name = "FILE")]
    pub output_file: Option<PathBuf>,

    /// Tee mode: copy the records to stdout (or --output) byte for byte and
    /// write the report to stderr.
    #[arg(long)]
    pub pass: bool,

    #[command(flatten)]
    pub io: IoArgs,
}

/// Everything `mc-analyze` reports; `--json` writes it on one line.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Report {
    pub aiperf: AiperfStats,
    pub input: InputSummary,
    pub blocks: BlockReport,
    pub cache: CacheModel,
    pub timing: TimingStats,
    pub sessions: Sessions,
    /// Agent graphs; absent from reports written before they were read.
    #[serde(default)]
    pub graphs: GraphReport,
    pub lint: Lint,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct InputSummary {
    pub rows: u64,
    pub rows_with_ids: u64,
    pub blocks: u64,
    pub distinct_ids: u64,
    /// Bad lines skipped under `--on-error skip`.
    pub skipped_lines: u64,
    pub first_skipped_lines: Vec<u64>,
}

/// The first pass: everything the report needs, gathered line by line.
#[derive(Default)]
pub struct Analyzer {
    rows: RowStore,
    table: IdTable,
    first_ids: FirstIds,
    sessions: SessionTracker,
    graphs: GraphTracker,
    lint: Lint,
    ids: Vec<u64>,
}

/// What the analysis reads from one record, before anything is recorded:
/// made on any thread (the parallel reader's workers), applied in input
/// order by [`Analyzer::apply`]. The ids are kept apart, in the caller's
/// buffer.
#[derive(Debug, Clone)]
pub struct ReadRow<S> {
    pub isl: Option<f64>,
    pub osl: Option<f64>,
    pub timestamp: Option<f64>,
    pub delay: Option<f64>,
    /// The raw `session_id` (a slice of the line, or where it is).
    pub session: Option<S>,
    pub has_ids: bool,
    /// The agent-graph fields, when the row has any (boxed: most rows
    /// have none, and the parallel reader holds rows by the thousand).
    pub agent: Option<Box<AgentFields>>,
}

impl<'a> ReadRow<&'a [u8]> {
    /// Parses `line` into a row and its ids into `ids`: [`Record::parse`]
    /// and [`ReadRow::read`] in one, the ids decoded as the scan walks
    /// them ([`Record::parse_decoding_ids`]); the same row and errors.
    pub fn parse(line: &'a [u8], ids: &mut Vec<u64>) -> std::result::Result<Self, RecordError> {
        let mut rec = Record::slot();
        let decoded = Record::parse_decoding_ids(line, &mut rec, ids)?;
        ReadRow::read_with(&rec, ids, decoded)
    }

    /// Reads `rec`'s fields into a row and its ids into `ids`: every check a
    /// record can fail on by itself, in the order the report names the first.
    pub fn read(rec: &Record<'a>, ids: &mut Vec<u64>) -> std::result::Result<Self, RecordError> {
        ReadRow::read_with(rec, ids, false)
    }

    /// [`ReadRow::read`], with `decoded` true when `ids` already holds
    /// `hash_ids`' ids (decoded by the scan, so none has more than eight
    /// digits and none can be refused).
    #[inline(always)]
    fn read_with(
        rec: &Record<'a>,
        ids: &mut Vec<u64>,
        decoded: bool,
    ) -> std::result::Result<Self, RecordError> {
        let length = |f: Field| rec.number_f64(f);
        let isl = length(Field::InputLength)?;
        let osl = length(Field::OutputLength)?;
        let timestamp = length(Field::Timestamp)?;
        let delay = length(Field::Delay)?;
        let session = rec.session_id()?;
        let agent = AgentFields::read_if_any(rec)?.map(Box::new);
        if decoded {
            return Ok(ReadRow {
                isl,
                osl,
                timestamp,
                delay,
                session,
                has_ids: true,
                agent,
            });
        }
        let has_ids = rec.hash_ids_into(ids)?;
        // One OR over the ids (vectorised) finds whether any has the top
        // bit; only then is the first such id looked for, to be named.
        let big = ids.iter().fold(0, |a, &h| a | h) > idtable::MAX_ID;
        if let Some(&big) = ids.iter().find(|&&h| big && h > idtable::MAX_ID) {
            return Err(RecordError::field(
                "hash_ids",
                format!("id {big} is above 2^63 - 1, the largest id mc-analyze handles"),
            ));
        }
        Ok(ReadRow {
            isl,
            osl,
            timestamp,
            delay,
            session,
            has_ids,
            agent,
        })
    }
}

/// The one-thread reader's loop: each line of `reader` to `f` with its
/// row read ([`ReadRow`]) and its ids, or the reading's error. A line in
/// the plain form is read where it lies in the read buffer
/// ([`Record::parse_line_decoding_ids`]), with no search for its `\n`
/// first (the filters' loop, decision 0039); the others, and the
/// [`SLOW_AFTER_MISS`] lines after one, the reader's way. The lines, rows
/// and errors are those of [`LineReader::next_line`] and [`ReadRow::parse`].
fn for_each_row<R: std::io::Read>(
    reader: &mut LineReader<R>,
    policy: &mut ErrorPolicy,
    mut f: impl FnMut(u64, &[u8], ReadResult<'_>, &[u64], &mut ErrorPolicy) -> Result<()>,
) -> Result<()> {
    let max_line = reader.max_line();
    let mut ids = Vec::new();
    let mut slow = 0u32;
    loop {
        if slow == 0 {
            if let Some(unread) = reader.unread() {
                let mut rec = Record::slot();
                if let Some((next, decoded)) =
                    Record::parse_line_decoding_ids(unread, &mut rec, &mut ids)
                {
                    // The reader's limit counts a `\r` before the `\n`.
                    if next - 1 <= max_line {
                        let row = ReadRow::read_with(&rec, &mut ids, decoded);
                        f(reader.line_no() + 1, rec.line(), row, &ids, policy)?;
                        reader.consume(next);
                        continue;
                    }
                }
            }
        }
        slow = slow.checked_sub(1).unwrap_or(SLOW_AFTER_MISS);
        match reader.next_line() {
            Ok(Some(line)) => {
                let row = ReadRow::parse(line.bytes, &mut ids);
                f(line.no, line.bytes, row, &ids, policy)?;
            }
            Ok(None) => return Ok(()),
            Err(e) => policy.handle(e)?,
        }
    }
}

/// A row as [`for_each_row`] hands it out.
type ReadResult<'a> = std::result::Result<ReadRow<&'a [u8]>, RecordError>;

/// See [`for_each_row`]: lines read the reader's way after one the read
/// in the buffer did not take (a trace not in the plain form is not
/// tried line by line).
const SLOW_AFTER_MISS: u32 = 64;

impl<S> ReadRow<S> {
    /// The same row with its session found again through `f`.
    pub fn map_session<T>(self, f: impl FnOnce(S) -> T) -> ReadRow<T> {
        ReadRow {
            isl: self.isl,
            osl: self.osl,
            timestamp: self.timestamp,
            delay: self.delay,
            session: self.session.map(f),
            has_ids: self.has_ids,
            agent: self.agent,
        }
    }
}

impl Analyzer {
    /// Reads the record on one line. Nothing is recorded for a record that is rejected.
    pub fn add(&mut self, line: u64, bytes: &[u8]) -> std::result::Result<(), RecordError> {
        let mut ids = std::mem::take(&mut self.ids);
        let read = ReadRow::parse(bytes, &mut ids).and_then(|row| self.apply(line, row, &ids));
        self.ids = ids;
        read
    }

    /// Records a row [`ReadRow::read`] made of line `line`, with its `ids`;
    /// rows must come in input order. Nothing is recorded when it fails.
    pub fn apply(
        &mut self,
        line: u64,
        row: ReadRow<&[u8]>,
        ids: &[u64],
    ) -> std::result::Result<(), RecordError> {
        let ReadRow {
            isl,
            osl,
            timestamp,
            delay,
            session,
            has_ids,
            agent,
        } = row;
        // The row's index, kept in 32 bits by the id table.
        let index = u32::try_from(self.rows.rows.len())
            .ok()
            .filter(|&i| i < u32::MAX)
            .ok_or_else(|| RecordError::new("more than 4 billion rows"))?;

        let lint = &mut self.lint;
        match isl {
            Some(v) => lint.length(line, v),
            None => lint.missing_input_length.add(line),
        }
        match osl {
            Some(v) => lint.length(line, v),
            None => lint.missing_output_length.add(line),
        }
        if !has_ids {
            lint.missing_hash_ids.add(line);
        }
        if timestamp.is_none() && delay.is_none() {
            lint.missing_timing.add(line);
        }
        if let Some(d) = delay {
            lint.delay(line, d);
        }
        let mut first_unseen = 0;
        if let Some(&first) = ids.first() {
            let visit = self.table.visit(index, ids);
            if visit.duplicate {
                lint.duplicate_ids.add(line);
            }
            if visit.not_prefix_shaped {
                lint.not_prefix_shaped.add(line);
            }
            first_unseen = visit.first_unseen as u32;
            self.first_ids.add(first);
        }
        let facts = RowFacts {
            isl: isl.unwrap_or(0.0),
            osl: osl.unwrap_or(0.0),
            timestamp: timestamp.into(),
        };
        let row = self.rows.push(line, facts, first_unseen, ids);
        self.sessions
            .add(&self.rows, row, session, (ids, facts.isl), delay);
        self.graphs
            .add(line, session, timestamp, delay, agent.as_deref());
        Ok(())
    }

    /// The second pass: the report, for the options' block size and cache sizes.
    pub fn finish(self, opts: &AnalyzeArgs, policy: &ErrorPolicy) -> Report {
        let Analyzer {
            rows,
            mut table,
            first_ids,
            sessions,
            graphs,
            mut lint,
            ids: _,
        } = self;
        let feasible = blocksize::feasible(&rows);
        let detected = blocksize::detect(&rows, feasible);
        let b = match opts.block_size {
            BlockSize::Fixed(b) => b,
            BlockSize::Auto => detected.unwrap_or(DEFAULT_BLOCK_SIZE),
        };
        let rows = &rows;
        // The heads are a third of the table: what the report makes is
        // made in their room (decision 47, last).
        table.end_visits();
        let repeated = table.take_repeated(rows.rows.len());
        // What reads the rows in order, in two passes over them: the AIPerf
        // columns, the arrival times, the cache's file-order totals,
        // whether the size check walks (a pass each before, some on a
        // second thread; decision 47, last).
        let mut must_walk = blocksize::MustWalk::new(&table, b);
        let mut arrivals = timing::Arrivals::new(rows.rows.len());
        let mut totals = cache::FileTotals::new(b);
        let columns = aiperf::RowColumns::of(rows, &repeated, b, |i, r| {
            arrivals.add(rows, i, r);
            totals.add(r);
            must_walk.add(i, r);
        });
        // 4 bytes a row, read by nothing more.
        drop(repeated);
        let timing = arrivals.finish();
        let conflicts = blocksize::conflicts(rows, &mut table, b, must_walk.finish());
        let blocks = blocksize::check(rows, b, detected, feasible, conflicts);
        if !cache::needs_marks(opts.order) {
            // Nothing reads them after the size check.
            table.drop_flags();
        }
        let cache = cache::model(rows, &mut table, b, opts.order, &opts.cache_blocks, &totals);
        let aiperf = aiperf::compute(&table, &first_ids, columns);
        let sessions = sessions.finish(b);
        let (graphs, graph_lint) = graphs.finish(sessions.rows_in_sessions);
        let input = InputSummary {
            rows: rows.rows.len() as u64,
            rows_with_ids: rows.rows.with_ids() as u64,
            blocks: table.blocks,
            distinct_ids: table.distinct_ids(),
            skipped_lines: policy.skipped().count,
            first_skipped_lines: policy.skipped().first_lines.clone(),
        };
        lint.graph = graph_lint;
        Report {
            aiperf,
            input,
            blocks,
            cache,
            timing,
            sessions,
            graphs,
            lint,
        }
    }
}

/// The tool's name, for its messages and `--version`.
pub const TOOL: &str = "mc-analyze";

/// A plain progress line this often when stderr is not a terminal (a day
/// of traffic takes minutes to read); none for runs shorter than this.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Rows between looks at the clock for the progress line.
const PROGRESS_ROWS: u64 = 1 << 14;

/// The progress line's text while reading.
fn reading(line: u64, bytes: u64, started: Instant) -> String {
    let mb = bytes as f64 / 1e6;
    let secs = started.elapsed().as_secs_f64().max(1e-3);
    format!("line {line}, {mb:.0} MB ({:.0} MB/s)", mb / secs)
}

/// Runs `mc-analyze`: reads `io`, writes the report (and, with `--pass`,
/// the records).
pub fn run(args: &AnalyzeArgs) -> Result<()> {
    let tool = TOOL;
    let io = &args.io;
    // AIPerf's JSON must not land on the trace it describes.
    let input = io.input().unwrap_or(std::path::Path::new("-"));
    crate::jsonl::refuse_input_as_output(args.output_file.as_deref(), &[input])?;
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    // The records' copy (--pass) and --line-buffered keep the one-thread
    // reader: each line goes out as it is read.
    let one_thread = args.pass || io.line_buffered || workers < 2;
    // The input is opened first, as before: its error is the one named.
    let mut source = if one_thread {
        Err(io.reader()?)
    } else {
        Ok(crate::jsonl::open_input_send(io.input())?)
    };
    let mut policy = ErrorPolicy::new(io.on_error);
    let mut analyzer = Analyzer::default();
    let mut records = if args.pass { Some(io.writer()?) } else { None };
    let mut last_line = 0;
    let mut progress = Progress::for_stderr(tool, PROGRESS_EVERY);
    let started = Instant::now();
    let mut read_bytes = 0u64;
    let read = match source {
        Err(ref mut reader) => for_each_row(reader, &mut policy, |no, bytes, row, ids, policy| {
            last_line = no;
            read_bytes += bytes.len() as u64 + 1;
            if no % PROGRESS_ROWS == 0 {
                progress.tick(|| reading(no, read_bytes, started));
            }
            match row.and_then(|row| analyzer.apply(no, row, ids)) {
                Ok(()) => match records.as_mut() {
                    Some(out) => out.write_line(bytes),
                    None => Ok(()),
                },
                Err(e) => policy.record(no, e),
            }
        }),
        Ok(src) => parallel::read_into(
            src,
            io.max_line_bytes,
            workers,
            &mut policy,
            &mut analyzer,
            &mut |line, bytes| {
                (last_line, read_bytes) = (line, bytes);
                progress.tick(|| reading(line, bytes, started));
            },
        ),
    };
    let flushed = records.as_mut().map_or(Ok(()), Output::flush);
    if let Err(e) = read.and(flushed) {
        filter::report_skipped(tool, &policy);
        // With --pass, a reader that leaves early (`| head`) is a normal end
        // for the records, but the report would be of a part of the trace:
        // say so instead of ending without a word.
        if args.pass && e.is_broken_pipe() {
            eprintln!(
                "{tool}: stdout was closed after line {last_line}: stopped early, no report \
                 (the report needs the whole trace)"
            );
            return Ok(());
        }
        return Err(e);
    }
    progress.tick(|| {
        format!(
            "{} read; computing the report",
            reading(last_line, read_bytes, started)
        )
    });
    let report = analyzer.finish(args, &policy);
    progress.finish();
    warn_block_size(&report, args.pass);
    write_report(args, &report)
}

/// The block size decides half the report: never let a wrong one pass
/// without a word on stderr, where a script sees it even when the report
/// goes to a file or a pipe (with --pass the report is on stderr itself).
fn warn_block_size(report: &Report, pass: bool) {
    let blocks = &report.blocks;
    if blocks.inconsistent_rows.count > 0 && !pass {
        eprintln!(
            "{TOOL}: warning: {} rows are inconsistent with block size {}{} (first: {}); check --block-size",
            blocks.inconsistent_rows.count,
            blocks.block_size,
            match blocks.detected {
                Some(d) if d != blocks.block_size => format!(", the rows point to {d}"),
                _ => String::new(),
            },
            blocks.inconsistent_rows.first_lines_text(),
        );
    }
}

/// Writes the report: AIPerf's JSON to --output-file, and the text (or
/// JSON) to stdout, or to stderr with --pass (stdout has the records).
fn write_report(args: &AnalyzeArgs, report: &Report) -> Result<()> {
    let io = &args.io;
    if let Some(path) = &args.output_file {
        let text = serde_json::to_string_pretty(&report.aiperf).map_err(anyhow::Error::from)?;
        // Byte for byte what AIPerf writes (pydantic, indent 2, no final newline).
        std::fs::write(path, text).map_err(|source| Error::Output {
            path: path.clone(),
            source,
        })?;
    }
    let text = if args.json {
        serde_json::to_string(report).map_err(anyhow::Error::from)? + "\n"
    } else {
        report::render_text(report)
    };
    if args.pass {
        eprint!("{text}");
    } else {
        let mut out = io.writer()?;
        out.buffer().extend_from_slice(text.as_bytes());
        out.flush()?;
    }
    Ok(())
}
