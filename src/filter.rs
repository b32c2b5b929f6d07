//! The record loop every filter runs: the shared input/output options, a
//! line reader feeding parsed records to a step, the `--on-error` policy,
//! the framing of written records, and the counts behind each filter's
//! summary line. It sits next to the reader and writer (`jsonl`) and knows
//! nothing of the command line beyond the options it owns.

use crate::blocks::{BlockSize, FeasibleSizes, DEFAULT_BLOCK_SIZE};
use crate::chunks::{self, Chunk, ChunkLine};
use crate::error::{Error, RecordError, Result};
use crate::jsonl::{self, ErrorPolicy, LineReader, LineRules, OnError, Output};
use crate::progress::Progress;
use crate::record::{Field, Record};
use std::cell::Cell;
use std::io::Read;
use std::ops::Range;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Input, output and error-policy options common to all filters.
#[derive(Debug, Clone, clap::Args)]
pub struct IoArgs {
    /// Read records from FILE instead of stdin (`-` is stdin).
    #[arg(short, long, visible_alias = "input-file", value_name = "FILE")]
    pub input: Option<PathBuf>,

    /// The input file, as a plain argument (the same as --input).
    // Always the first plain argument: a tool's own list of inputs, if it
    // has one, is index 2 and takes the rest (`cli::parse_args` hides this
    // one there).
    #[arg(value_name = "FILE", index = 1)]
    pub file: Option<PathBuf>,

    /// Write records to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// What to do with a line that is not a valid record: stop with exit
    /// code 65, or skip it and report the count at the end.
    #[arg(long, value_enum, default_value_t = OnError::Fail, value_name = "POLICY")]
    pub on_error: OnError,

    /// Longest accepted line; a longer one is a bad line.
    #[arg(long, default_value_t = jsonl::DEFAULT_MAX_LINE_BYTES, value_name = "BYTES")]
    pub max_line_bytes: usize,

    /// Flush after every record (for `tail -f` pipelines).
    #[arg(long)]
    pub line_buffered: bool,
}

impl Default for IoArgs {
    /// stdin to stdout, stopping at the first bad line: what the options
    /// give when none is passed.
    fn default() -> Self {
        IoArgs {
            input: None,
            file: None,
            output: None,
            on_error: OnError::Fail,
            max_line_bytes: jsonl::DEFAULT_MAX_LINE_BYTES,
            line_buffered: false,
        }
    }
}

impl IoArgs {
    /// The input: `--input`, else the plain FILE argument; `None` is stdin.
    /// (The two together are a usage error, `cli::parse_args`' rule.)
    pub fn input(&self) -> Option<&std::path::Path> {
        self.input.as_deref().or(self.file.as_deref())
    }

    pub fn reader(&self) -> Result<LineReader<Box<dyn std::io::Read>>> {
        Ok(LineReader::new(
            jsonl::open_input(self.input())?,
            self.max_line_bytes,
        ))
    }

    /// The output, refused (exit 73) when it is the input file.
    pub fn writer(&self) -> Result<Output> {
        self.writer_for(&[])
    }

    /// The output, refused (exit 73) when it is the input or one of `more`
    /// inputs the tool reads besides `--input`.
    pub fn writer_for(&self, more: &[&std::path::Path]) -> Result<Output> {
        let mut inputs = more.to_vec();
        inputs.push(self.input().unwrap_or(std::path::Path::new("-")));
        Output::open_for(self.output.as_deref(), self.line_buffered, &inputs)
    }
}

/// What a per-record step decided.
pub enum Emit {
    /// Write the record exactly as read.
    Unchanged,
    /// The step wrote the record into the output buffer (without its `\n`:
    /// the driver ends every record).
    Written,
    /// Leave the record out.
    Dropped,
    /// The record needs state built in input order (a table of fresh ids):
    /// the loop runs the step on it again, in order. Only a step called
    /// out of order ([`Ctx::in_order`] false) may answer this.
    InOrder,
}

/// What the loop tells a step besides the record.
pub struct Ctx {
    row: u64,
    used_row: Cell<bool>,
    in_order: bool,
}

impl Ctx {
    /// A step called in input order on record `row`.
    pub fn in_order_at(row: u64) -> Ctx {
        Ctx {
            row,
            used_row: Cell::new(false),
            in_order: true,
        }
    }

    /// The record's index among the records parsed so far (0-based; bad
    /// lines and blank lines do not count). In a chunk worker it is a guess
    /// the loop checks, redoing the chunk in order when it was wrong, so a
    /// step must read it only through this method.
    pub fn row(&self) -> u64 {
        self.used_row.set(true);
        self.row
    }

    /// False on a chunk worker: records arrive in input order within a
    /// chunk, but chunks run at the same time, each on a fork of the step.
    pub fn in_order(&self) -> bool {
        self.in_order
    }
}

/// A filter's per-record step, for the chunked loop: `apply` must be a
/// function of the record, [`Ctx::row`] and the options, except where it
/// answers [`Emit::InOrder`] out of order; counts it keeps are added up
/// from the forks by `join`.
pub trait Step: Send {
    fn apply(
        &mut self,
        rec: &Record<'_>,
        cx: &Ctx,
        out: &mut Vec<u8>,
    ) -> std::result::Result<Emit, RecordError>;

    /// A copy for a worker thread: the same options, counts at zero.
    fn fork(&self) -> Self
    where
        Self: Sized;

    /// Adds a fork's counts into `self`.
    fn join(&mut self, fork: Self)
    where
        Self: Sized;
}

/// Runs a streaming filter: each line is parsed into a [`Record`] and handed
/// to `step`, which may write a changed record into the output buffer.
/// Bad lines follow the `--on-error` policy; the summary of skipped lines is
/// printed to stderr under the tool's name. Returns the counts, the step's
/// own counts joined in.
pub fn run_steps<S: Step>(tool: &'static str, io: &IoArgs, step: &mut S) -> Result<RowCounts> {
    let src = jsonl::open_input_send(io.input())?;
    let mut out = io.writer()?;
    let mut policy = ErrorPolicy::new(io.on_error);
    let start = Start {
        carry: Vec::new(),
        line_base: 0,
        rules: LineRules::jsonl(),
    };
    let result = run_loop_from(tool, io, src, start, 0, &mut out, &mut policy, step);
    // Good records already produced are flushed even when a bad one stops us.
    let flushed = out.flush();
    report_skipped(tool, &policy);
    result.and_then(|counts| flushed.map(|()| counts))
}

/// Where the loop picks the input up (after a look-ahead, past the start).
struct Start {
    carry: Vec<u8>,
    line_base: u64,
    rules: LineRules,
}

/// The counts so far and the progress line of one run.
struct Tally {
    counts: RowCounts,
    /// Records parsed (the next record's [`Ctx::row`]).
    rows: u64,
    bytes: u64,
    lines: u64,
    progress: Progress,
    started: Instant,
}

/// How often a long run says where it is when stderr is not a terminal,
/// and how long any run stays silent first.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
const PROGRESS_QUIET: Duration = Duration::from_secs(3);

impl Tally {
    fn new(tool: &'static str) -> Tally {
        Tally {
            counts: RowCounts::default(),
            rows: 0,
            bytes: 0,
            lines: 0,
            progress: Progress::for_stderr(tool, PROGRESS_EVERY).quiet_for(PROGRESS_QUIET),
            started: Instant::now(),
        }
    }

    fn tick(&mut self) {
        let (lines, bytes, secs) = (self.lines, self.bytes, self.started.elapsed().as_secs_f64());
        self.progress.tick(|| {
            let mb = bytes as f64 / 1e6;
            format!(
                "{lines} lines, {mb:.0} MB read ({:.0} MB/s)",
                mb / secs.max(1e-3)
            )
        });
    }
}

/// The chunked loop on the rest of `src`; in order on this thread with
/// `--line-buffered` (a chunk would hold records back) or a single CPU.
#[allow(clippy::too_many_arguments)]
fn run_loop_from<S: Step>(
    tool: &'static str,
    io: &IoArgs,
    src: Box<dyn Read + Send>,
    start: Start,
    rows: u64,
    out: &mut Output,
    policy: &mut ErrorPolicy,
    step: &mut S,
) -> Result<RowCounts> {
    let mut tally = Tally::new(tool);
    tally.rows = rows;
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let result = if io.line_buffered || workers < 2 {
        in_order(io, src, start, out, policy, step, &mut tally)
    } else {
        chunked(io, src, start, workers, out, policy, step, &mut tally)
    };
    tally.progress.finish();
    result.map(|()| tally.counts)
}

/// The loop on one thread: each line read, transformed and written in turn.
fn in_order<S: Step>(
    io: &IoArgs,
    src: Box<dyn Read + Send>,
    start: Start,
    out: &mut Output,
    policy: &mut ErrorPolicy,
    step: &mut S,
    tally: &mut Tally,
) -> Result<()> {
    let mut reader = LineReader::resume(
        std::io::Cursor::new(start.carry).chain(src),
        io.max_line_bytes,
        start.line_base,
        start.rules,
    );
    let mut run = InOrderRows {
        step,
        rows: &mut tally.rows,
    };
    let max_line = reader.max_line();
    let mut n = 0u32;
    // Lines left to the reader's own cut after a line the plain parse in
    // the buffer did not take (a file of lines in another form pays that
    // try once in `SLOW_AFTER_MISS` lines, not on every line).
    let mut slow = 0u32;
    loop {
        n = n.wrapping_add(1);
        // A line in the plain form is parsed where it lies in the read
        // buffer: no search for its `\n` first and no second look at its
        // bytes (docs/decisions/0039-filters-under-five-instructions-a-byte.md).
        let unread = reader.unread().filter(|_| slow == 0);
        let mut rec = Record::slot();
        let taken = match unread.and_then(|u| Record::parse_line_into(u, &mut rec)) {
            Some(next) if rec.line().len() <= max_line => {
                let no = reader.line_no() + 1;
                // The line and its `\n`, as they lie in the buffer.
                let whole = unread
                    .map(|u| &u[..next])
                    .filter(|w| w.len() == rec.line().len() + 1);
                write_parsed(out, policy, no, &rec, whole, &mut run, &mut tally.counts)?;
                Some(next)
            }
            _ => None,
        };
        let no = match taken {
            Some(next) => reader.consume(next),
            None => {
                slow = slow.checked_sub(1).unwrap_or(SLOW_AFTER_MISS);
                match reader.next_line() {
                    Ok(Some(line)) => {
                        let (no, bytes) = (line.no, &*line.bytes);
                        write_record(out, policy, no, bytes, &mut run, &mut tally.counts)?;
                        no
                    }
                    Ok(None) => return Ok(()),
                    Err(e) => {
                        policy.handle(e)?;
                        reader.line_no()
                    }
                }
            }
        };
        if n.is_multiple_of(4096) {
            tally.lines = no;
            tally.progress.tick(|| format!("{no} lines"));
        }
    }
}

/// See [`in_order`]: lines read the reader's way after one the plain
/// parse in the buffer did not take.
const SLOW_AFTER_MISS: u32 = 64;

/// What a worker made of one chunk: the output, the events between its
/// bytes that the loop's thread handles in order, and what it counted.
#[derive(Default)]
struct Made {
    /// (position in the output, event), in input order.
    events: Vec<(usize, Event)>,
    counts: RowCounts,
    /// Records parsed in the chunk.
    rows: u64,
    /// Some step read [`Ctx::row`].
    used_row: bool,
    /// The rules' `first` at the end of the chunk.
    first_after: bool,
}

enum Event {
    /// A bad line for the policy (or an input that is no JSONL).
    Bad(Error),
    /// A record to run again in order: its line, its row within the chunk
    /// and its span in the chunk.
    InOrder {
        no: u64,
        row: u64,
        span: Range<usize>,
    },
}

/// Runs `step` over the lines of one chunk, writing into `out`. Rows are
/// numbered from `row_base`, lines from `chunk.line_base + 1`. Stops at a
/// bad line the policy will not skip.
#[allow(clippy::too_many_arguments)]
fn make_chunk<S: Step>(
    step: &mut S,
    in_order: bool,
    chunk: &Chunk,
    row_base: u64,
    mut rules: LineRules,
    max_line: usize,
    on_error: OnError,
    out: &mut Vec<u8>,
) -> Made {
    let mut made = Made::default();
    for ChunkLine { no, at, text } in chunk.lines(&mut rules, max_line) {
        let bad = match text {
            Err(e) => Some(e),
            Ok(None) => None,
            Ok(Some(line)) => match Record::parse(line) {
                Err(err) => Some(Error::Data { line: no, err }),
                Ok(rec) => {
                    let cx = Ctx {
                        row: row_base + made.rows,
                        used_row: Cell::new(false),
                        in_order,
                    };
                    made.rows += 1;
                    let mark = out.len();
                    let emit = step.apply(&rec, &cx, out);
                    made.used_row |= cx.used_row.get();
                    match emit {
                        Ok(Emit::Unchanged) => {
                            made.counts.rows += 1;
                            out.extend_from_slice(line);
                            out.push(b'\n');
                            None
                        }
                        Ok(Emit::Written) => {
                            made.counts.rows += 1;
                            made.counts.changed += 1;
                            out.push(b'\n');
                            None
                        }
                        Ok(Emit::Dropped) => {
                            made.counts.rows += 1;
                            made.counts.dropped += 1;
                            None
                        }
                        Ok(Emit::InOrder) if !in_order => {
                            out.truncate(mark);
                            let span = at..at + line.len();
                            let row = made.rows - 1;
                            made.events.push((mark, Event::InOrder { no, row, span }));
                            None
                        }
                        Ok(Emit::InOrder) => {
                            out.truncate(mark);
                            Some(Error::Data {
                                line: no,
                                err: RecordError::new(IN_ORDER_BUG),
                            })
                        }
                        Err(err) => {
                            out.truncate(mark);
                            Some(Error::Data { line: no, err })
                        }
                    }
                }
            },
        };
        if let Some(e) = bad {
            let fatal = !on_error.skips(&e);
            made.events.push((out.len(), Event::Bad(e)));
            if fatal {
                break; // the loop stops here: the rest is never written
            }
        }
    }
    made.first_after = rules.first;
    made
}

const IN_ORDER_BUG: &str = "internal error: a step asked to be run in order while in order";

/// What the reader thread guessed for a chunk, before any chunk ahead of
/// it was made: the rows before it and the rules' `first` at its start.
struct Guess {
    row_base: u64,
    first: bool,
}

/// The loop on chunks (`chunks::in_order_chunks`): one thread reads chunks
/// ahead, `workers` threads transform them each on a fork of `step`, and
/// this thread writes them in order, handling bad lines, records that need
/// the order, and chunks whose guessed row numbers or first-line state
/// turn out wrong (it makes those again, in order, before writing
/// anything of them).
#[allow(clippy::too_many_arguments)]
fn chunked<S: Step>(
    io: &IoArgs,
    src: Box<dyn Read + Send>,
    start: Start,
    workers: usize,
    out: &mut Output,
    policy: &mut ErrorPolicy,
    step: &mut S,
    tally: &mut Tally,
) -> Result<()> {
    let max_line = io.max_line_bytes.max(1);
    let on_error = io.on_error;
    let Start {
        carry,
        line_base,
        mut rules,
    } = start;
    let first_rules = rules;
    let mut guess = tally.rows; // rows so far if every line is a record
    let tag = move |c: &Chunk| {
        let g = Guess {
            row_base: guess,
            first: c.seq == 0 && first_rules.first,
        };
        guess += c.lines;
        g
    };
    let make = |fork: &mut S, chunk: &Chunk, g: &Guess, output: &mut Vec<u8>| {
        let rules = LineRules {
            first: g.first,
            ..first_rules
        };
        make_chunk(
            fork, false, chunk, g.row_base, rules, max_line, on_error, output,
        )
    };
    let forks = (0..workers).map(|_| step.fork()).collect();
    let src = std::io::Cursor::new(carry).chain(src);
    let (result, forks) = chunks::in_order_chunks(
        src,
        chunks::chunk_bytes(),
        line_base,
        max_line,
        forks,
        tag,
        make,
        |chunk, g, mut made| {
            // The worker guessed the rows before its chunk and whether a
            // line was seen before it; a wrong guess that mattered means
            // the chunk is made again here, in order, before any of it is
            // written.
            let wrong_row = made.used_row && g.row_base != tally.rows;
            if wrong_row || g.first != rules.first {
                made = remake(step, chunk, tally.rows, rules, max_line, on_error);
            }
            let written = write_chunk(chunk, &mut made, out, policy, step, tally);
            rules.first = made.first_after;
            tally.rows += made.rows;
            tally.lines = chunk.line_base + chunk.lines;
            tally.bytes += chunk.bufs.len as u64;
            written?;
            tally.tick();
            Ok(())
        },
    );
    for fork in forks {
        step.join(fork);
    }
    result
}

/// Makes `chunk` again on this thread, in order, from the true rows
/// before it and the true line rules, into its own output buffer.
fn remake<S: Step>(
    step: &mut S,
    chunk: &mut Chunk,
    row_base: u64,
    rules: LineRules,
    max_line: usize,
    on_error: OnError,
) -> Made {
    let mut output = std::mem::take(&mut chunk.bufs.output);
    output.clear();
    let made = make_chunk(
        step,
        true,
        chunk,
        row_base,
        rules,
        max_line,
        on_error,
        &mut output,
    );
    chunk.bufs.output = output;
    made
}

/// Writes a made chunk: its output bytes, with its events handled at
/// their places.
fn write_chunk<S: Step>(
    chunk: &Chunk,
    made: &mut Made,
    out: &mut Output,
    policy: &mut ErrorPolicy,
    step: &mut S,
    tally: &mut Tally,
) -> Result<()> {
    let output = &chunk.bufs.output;
    let mut at = 0;
    tally.counts.rows += made.counts.rows;
    tally.counts.changed += made.counts.changed;
    tally.counts.dropped += made.counts.dropped;
    for (pos, event) in std::mem::take(&mut made.events) {
        out.write_records(&output[at..pos])?;
        at = pos;
        match event {
            Event::Bad(e) => policy.handle(e)?,
            Event::InOrder { no, row, span } => {
                let bytes = &chunk.bufs.data()[span];
                let row = tally.rows + row;
                let mut run = |rec: &Record<'_>, buf: &mut Vec<u8>| {
                    step.apply(rec, &Ctx::in_order_at(row), buf)
                };
                write_record(out, policy, no, bytes, &mut run, &mut tally.counts)?;
            }
        }
    }
    out.write_records(&output[at..])
}

/// What a filter did to the records it read: the numbers behind the
/// one-line summary each filter prints when it changed anything.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RowCounts {
    /// Records read and parsed (bad lines skipped by the policy excluded).
    pub rows: u64,
    /// Records written with a change.
    pub changed: u64,
    /// Records left out.
    pub dropped: u64,
}

impl RowCounts {
    /// True when the output differs from the input.
    pub fn any_change(&self) -> bool {
        self.changed + self.dropped > 0
    }
}

/// Feeds every line to `f`, applying the policy to lines too long to read.
pub fn for_each_line<R, F>(
    reader: &mut LineReader<R>,
    policy: &mut ErrorPolicy,
    mut f: F,
) -> Result<()>
where
    R: std::io::Read,
    F: FnMut(u64, &[u8], &mut ErrorPolicy) -> Result<()>,
{
    loop {
        match reader.next_line() {
            Ok(Some(line)) => f(line.no, line.bytes, policy)?,
            Ok(None) => return Ok(()),
            Err(e) => policy.handle(e)?,
        }
    }
}

/// A step's call on one record as a loop makes it: a closure (with the
/// record's [`Ctx`] made inside it), or the in-order loop's `InOrderRows`.
pub trait ApplyRow {
    fn apply_row(
        &mut self,
        rec: &Record<'_>,
        out: &mut Vec<u8>,
    ) -> std::result::Result<Emit, RecordError>;
}

impl<F> ApplyRow for F
where
    F: FnMut(&Record<'_>, &mut Vec<u8>) -> std::result::Result<Emit, RecordError>,
{
    #[inline(always)]
    fn apply_row(
        &mut self,
        rec: &Record<'_>,
        out: &mut Vec<u8>,
    ) -> std::result::Result<Emit, RecordError> {
        self(rec, out)
    }
}

/// The in-order loop's call: `step` on each record with its index. A
/// type, not a closure, so that it is always inlined: the closure it
/// replaced was a call (~30 instructions a row) or not as the build
/// placed other code (decision 0039, "2026-11-27, later").
struct InOrderRows<'a, S> {
    step: &'a mut S,
    rows: &'a mut u64,
}

impl<S: Step> ApplyRow for InOrderRows<'_, S> {
    #[inline(always)]
    fn apply_row(
        &mut self,
        rec: &Record<'_>,
        out: &mut Vec<u8>,
    ) -> std::result::Result<Emit, RecordError> {
        let cx = Ctx::in_order_at(*self.rows);
        *self.rows += 1;
        self.step.apply(rec, &cx, out)
    }
}

/// Parses line `no`, runs `step` on it and writes what it decided; a bad
/// record goes to the policy (and leaves nothing half-written).
pub fn write_record<F>(
    out: &mut Output,
    policy: &mut ErrorPolicy,
    no: u64,
    bytes: &[u8],
    step: &mut F,
    counts: &mut RowCounts,
) -> Result<()>
where
    F: ApplyRow,
{
    match Record::parse(bytes) {
        Ok(rec) => write_parsed(out, policy, no, &rec, None, step, counts),
        Err(e) => policy.record(no, e),
    }
}

/// [`write_record`] for a record parsed already; `terminated` is its line
/// with its `\n` where it lies in the input, if it does, written as it is
/// when the record is unchanged. Always inlined: a call here was ~30
/// instructions a row of the in-order loop, and whether the hint alone
/// inlined it moved with the build's placement of other code
/// (docs/decisions/0039-filters-under-five-instructions-a-byte.md).
#[inline(always)]
fn write_parsed<F>(
    out: &mut Output,
    policy: &mut ErrorPolicy,
    no: u64,
    rec: &Record<'_>,
    terminated: Option<&[u8]>,
    step: &mut F,
    counts: &mut RowCounts,
) -> Result<()>
where
    F: ApplyRow,
{
    let buf = out.buffer();
    let mark = buf.len();
    let outcome = step.apply_row(rec, buf).inspect_err(|_| buf.truncate(mark));
    if outcome.is_ok() {
        counts.rows += 1;
    }
    match outcome {
        Ok(Emit::Unchanged) => match terminated {
            Some(line) => out.write_terminated(line),
            None => out.write_line(rec.line()),
        },
        Ok(Emit::Written) => {
            counts.changed += 1;
            out.end_record()
        }
        Ok(Emit::Dropped) => {
            counts.dropped += 1;
            Ok(())
        }
        // Here the step runs in order: asking for the order is a bug, named.
        Ok(Emit::InOrder) => policy.record(no, RecordError::new(IN_ORDER_BUG)),
        Err(e) => policy.record(no, e),
    }
}

/// Prints the `--on-error skip` summary, if anything was skipped.
pub fn report_skipped(tool: &str, policy: &ErrorPolicy) {
    if let Some(s) = policy.summary() {
        eprintln!("{tool}: {s}");
    }
}

/// How many rows, or bytes, `--block-size auto` reads ahead in a streaming
/// filter before it must settle on a size.
pub const LOOKAHEAD_ROWS: usize = 10_000;
pub const LOOKAHEAD_BYTES: usize = 16 << 20;

/// The first rows of an input (up to [`LOOKAHEAD_ROWS`] or
/// [`LOOKAHEAD_BYTES`]), read ahead to decide the block size before any
/// row is used, and kept to be used after: what the rows say of the size,
/// for `auto` (which size) and for a given one (whether most rows
/// contradict it: the one rule of `blocks`).
pub struct LookAhead {
    /// The rows, in one buffer: each row's line number and span.
    bytes: Vec<u8>,
    rows: Vec<(u64, Range<usize>)>,
    sizes: FeasibleSizes,
    check: crate::blocks::SizeCheck,
}

impl LookAhead {
    /// Reads the look-ahead; a line the reader refuses goes to `policy`,
    /// a row that does not parse decides nothing (the pass that uses the
    /// rows reports it).
    pub fn read<R: std::io::Read>(
        reader: &mut LineReader<R>,
        policy: &mut ErrorPolicy,
        size: BlockSize,
    ) -> Result<LookAhead> {
        let given = match size {
            BlockSize::Fixed(b) => b,
            BlockSize::Auto => 1,
        };
        let mut ahead = LookAhead {
            bytes: Vec::new(),
            rows: Vec::new(),
            sizes: FeasibleSizes::default(),
            check: crate::blocks::SizeCheck::default(),
        };
        while ahead.rows.len() < LOOKAHEAD_ROWS && ahead.bytes.len() < LOOKAHEAD_BYTES {
            match reader.next_line() {
                Ok(Some(line)) => {
                    if let Ok(rec) = Record::parse(line.bytes) {
                        if let (Ok(Some(n)), Ok(Some(len))) =
                            (rec.hash_ids_len(), rec.uint(Field::InputLength))
                        {
                            ahead.sizes.add(n as u64, len);
                            ahead.check.add(n as u64, len, given);
                        }
                    }
                    let start = ahead.bytes.len();
                    ahead.bytes.extend_from_slice(line.bytes);
                    ahead.rows.push((line.no, start..ahead.bytes.len()));
                }
                Ok(None) => break,
                Err(e) => policy.handle(e)?,
            }
        }
        Ok(ahead)
    }

    /// The size to use: a given one unless most rows contradict it (exit
    /// 65), or under `auto` the one the rows decide (named on stderr),
    /// [`DEFAULT_BLOCK_SIZE`] when no row read has ids (the size then
    /// matters to no row read so far, and later rows are still checked).
    pub fn block_size(&self, tool: &str, size: BlockSize) -> Result<u64> {
        match size {
            BlockSize::Fixed(b) => {
                self.check
                    .verdict(b)
                    .map_err(|e| Error::Input(format!("in the first rows, {e}")))?;
                Ok(b)
            }
            BlockSize::Auto => match self.sizes.decide() {
                Ok(Some(b)) => {
                    eprintln!(
                        "{tool}: block size {b} (detected from the first {} rows with hash_ids)",
                        self.sizes.rows
                    );
                    Ok(b)
                }
                Ok(None) => Ok(DEFAULT_BLOCK_SIZE),
                Err(e) => Err(Error::Input(format!(
                    "--block-size auto: in the first {} rows with hash_ids, {e}",
                    self.sizes.rows
                ))),
            },
        }
    }

    /// The rows read ahead, in order: line number and bytes.
    pub fn lines(&self) -> impl Iterator<Item = (u64, &[u8])> {
        self.rows
            .iter()
            .map(|(no, span)| (*no, &self.bytes[span.clone()]))
    }
}

/// [`run_steps`] for a step that depends on the block size: with
/// `--block-size auto`, the first rows (up to [`LOOKAHEAD_ROWS`] or
/// [`LOOKAHEAD_BYTES`]) are read ahead and decide the size (named on
/// stderr), then every row, those first ones included, goes through the
/// step built for that size. Returns the counts, the size used and the
/// step (its own counts joined from the workers).
pub fn run_filter_sized<S, M>(
    tool: &'static str,
    io: &IoArgs,
    size: BlockSize,
    make_step: M,
) -> Result<(RowCounts, u64, S)>
where
    S: Step,
    M: FnOnce(u64) -> S,
{
    let mut reader = LineReader::new(jsonl::open_input_send(io.input())?, io.max_line_bytes);
    let mut policy = ErrorPolicy::new(io.on_error);
    let ahead = LookAhead::read(&mut reader, &mut policy, size)?;
    let b = ahead.block_size(tool, size)?;
    let mut step = make_step(b);
    let mut out = io.writer()?;
    let mut counts = RowCounts::default();
    let mut rows = 0u64;
    // The rows read ahead go through the step in order, then the rest of
    // the input through the chunked loop.
    let result = ahead
        .lines()
        .try_for_each(|(no, bytes)| {
            let mut run = |rec: &Record<'_>, buf: &mut Vec<u8>| {
                let cx = Ctx::in_order_at(rows);
                rows += 1;
                step.apply(rec, &cx, buf)
            };
            write_record(&mut out, &mut policy, no, bytes, &mut run, &mut counts)
        })
        .and_then(|()| {
            let (carry, src, line_base, rules) = reader.into_parts();
            let start = Start {
                carry,
                line_base,
                rules,
            };
            run_loop_from(tool, io, src, start, rows, &mut out, &mut policy, &mut step)
        });
    let flushed = out.flush();
    report_skipped(tool, &policy);
    let rest = result.and_then(|c| flushed.map(|()| c))?;
    counts.rows += rest.rows;
    counts.changed += rest.changed;
    counts.dropped += rest.dropped;
    Ok((counts, b, step))
}

/// The consistency rule as a record error naming the fix: a row whose ids
/// and length do not agree at block size `b`.
pub fn check_consistent(n: usize, len: u64, b: u64) -> std::result::Result<(), RecordError> {
    if crate::blocks::is_consistent(n, len, b) {
        return Ok(());
    }
    Err(RecordError::field(
        "input_length",
        format!("{len} tokens do not fit {n} hash ids at block size {b} (check --block-size)"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// An input that gives at most `step` bytes a read, so lines are cut
    /// by the reader's buffer at every place.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Rows with a timestamp are kept as they are, others written as `{}`.
    struct Mark;

    impl Step for Mark {
        fn apply(
            &mut self,
            rec: &Record<'_>,
            _cx: &Ctx,
            out: &mut Vec<u8>,
        ) -> std::result::Result<Emit, RecordError> {
            if rec.has(Field::Timestamp) {
                return Ok(Emit::Unchanged);
            }
            out.extend_from_slice(b"{}");
            Ok(Emit::Written)
        }
        fn fork(&self) -> Self {
            Mark
        }
        fn join(&mut self, _fork: Self) {}
    }

    /// The in-order loop, which parses plain lines where they lie in the
    /// read buffer, writes what reading line by line writes: a BOM and
    /// `\r\n` endings, blank lines, a bad line (skipped), lines in other
    /// forms, a last line without `\n`, cut by reads of every size.
    #[test]
    fn lines_parsed_in_the_buffer_are_the_lines_read_one_by_one() {
        // After a line it does not take the loop reads 64 lines the
        // reader's way: the lines of interest come after enough plain ones.
        let plain = b"{\"timestamp\": 0}\n".repeat(70);
        let mut input = b"\xEF\xBB\xBF".to_vec();
        input.extend_from_slice(&plain);
        input.extend_from_slice(
            b"{\"timestamp\": 1}\r\n\n{\"a\": 1}\n\
            {\"timestamp\": 2, \"hash_ids\": [1, 2]}\r\n  \n{bad}\n\
            { \"timestamp\" : 3 }\n{\"timestamp\": 4}\r\r\n{\"timestamp\": 5}",
        );
        let mut want = plain.clone();
        want.extend_from_slice(
            b"{\"timestamp\": 1}\n{}\n{\"timestamp\": 2, \"hash_ids\": [1, 2]}\n\
            { \"timestamp\" : 3 }\n{\"timestamp\": 4}\r\n{\"timestamp\": 5}\n",
        );
        for step in [1, 2, 3, 5, 7, 16, 64, 300, 1 << 20] {
            let mut policy = ErrorPolicy::new(OnError::Skip);
            let mut tally = Tally::new("test");
            let (done, got) = trickled(&input, step, OnError::Skip, &mut policy, &mut tally);
            done.unwrap();
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "reads of {step} bytes"
            );
            assert_eq!(tally.counts.rows, 76, "reads of {step} bytes");
            assert_eq!(tally.counts.changed, 1);
            assert!(policy.summary().is_some(), "the bad line is counted");
        }
    }

    /// The in-order loop over `input` read `step` bytes at a time, each
    /// row through `Mark`: its end and what it wrote.
    fn trickled(
        input: &[u8],
        step: usize,
        on_error: OnError,
        policy: &mut ErrorPolicy,
        tally: &mut Tally,
    ) -> (Result<()>, Vec<u8>) {
        let io = IoArgs {
            on_error,
            ..IoArgs::default()
        };
        let shared = Shared::default();
        let mut out = Output::from_writer(Box::new(shared.clone()));
        let src = Trickle {
            data: input.to_vec(),
            at: 0,
            step,
        };
        let start = Start {
            carry: Vec::new(),
            line_base: 0,
            rules: LineRules::jsonl(),
        };
        let done = in_order(
            &io,
            Box::new(src),
            start,
            &mut out,
            policy,
            &mut Mark,
            tally,
        );
        out.flush().unwrap();
        let got = shared.0.lock().unwrap().clone();
        (done, got)
    }

    /// Lines taken in the buffer are numbered as the reader numbers them
    /// (a `\r\n` ending is one line): a bad line is named by its number.
    #[test]
    fn lines_taken_in_the_buffer_keep_their_numbers() {
        let mut input = b"{\"timestamp\": 0}\n".repeat(70);
        input.extend_from_slice(
            b"{\"timestamp\": 1}\r\n{\"timestamp\": 2}\r\n\n{\"timestamp\": 3}\n{bad}\n",
        );
        for step in [1, 3, 300, 1 << 20] {
            let mut policy = ErrorPolicy::new(OnError::Fail);
            let mut tally = Tally::new("test");
            let (done, _) = trickled(&input, step, OnError::Fail, &mut policy, &mut tally);
            let err = done.unwrap_err();
            assert!(err.to_string().starts_with("line 75:"), "{err}");
        }
    }
}
