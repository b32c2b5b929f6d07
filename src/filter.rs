//! The record loop every filter runs: the shared input/output options, a
//! line reader feeding parsed records to a step, the `--on-error` policy,
//! the framing of written records, and the counts behind each filter's
//! summary line. It sits next to the reader and writer (`jsonl`) and knows
//! nothing of the command line beyond the options it owns.

use crate::blocks::{BlockSize, FeasibleSizes, DEFAULT_BLOCK_SIZE};
use crate::error::{Error, RecordError, Result};
use crate::jsonl::{self, ErrorPolicy, LineReader, OnError, Output};
use crate::record::{Field, Record};
use std::ops::Range;
use std::path::PathBuf;

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
}

/// Runs a streaming filter: each line is parsed into a [`Record`] and handed
/// to `step`, which may write a changed record into the output buffer.
/// Bad lines follow the `--on-error` policy; the summary of skipped lines is
/// printed to stderr under the tool's name.
pub fn run_filter<F>(tool: &str, io: &IoArgs, mut step: F) -> Result<RowCounts>
where
    F: FnMut(&Record<'_>, &mut Vec<u8>) -> std::result::Result<Emit, RecordError>,
{
    let mut reader = io.reader()?;
    let mut out = io.writer()?;
    let mut policy = ErrorPolicy::new(io.on_error);
    let mut counts = RowCounts::default();
    let result = for_each_line(&mut reader, &mut policy, |no, bytes, policy| {
        write_record(&mut out, policy, no, bytes, &mut step, &mut counts)
    });
    // Good records already produced are flushed even when a bad one stops us.
    let flushed = out.flush();
    report_skipped(tool, &policy);
    result.and(flushed).map(|()| counts)
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
    F: FnMut(&Record<'_>, &mut Vec<u8>) -> std::result::Result<Emit, RecordError>,
{
    let outcome = Record::parse(bytes).and_then(|rec| {
        let buf = out.buffer();
        let mark = buf.len();
        step(&rec, buf).inspect_err(|_| buf.truncate(mark))
    });
    if outcome.is_ok() {
        counts.rows += 1;
    }
    match outcome {
        Ok(Emit::Unchanged) => out.write_line(bytes),
        Ok(Emit::Written) => {
            counts.changed += 1;
            out.end_record()
        }
        Ok(Emit::Dropped) => {
            counts.dropped += 1;
            Ok(())
        }
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

/// [`run_filter`] for a step that depends on the block size: with
/// `--block-size auto`, the first rows (up to [`LOOKAHEAD_ROWS`] or
/// [`LOOKAHEAD_BYTES`]) are read ahead and decide the size (named on
/// stderr), then every row, those first ones included, goes through the
/// step built for that size. Returns the counts and the size used.
pub fn run_filter_sized<F, S>(
    tool: &str,
    io: &IoArgs,
    size: BlockSize,
    make_step: S,
) -> Result<(RowCounts, u64)>
where
    S: FnOnce(u64) -> F,
    F: FnMut(&Record<'_>, &mut Vec<u8>) -> std::result::Result<Emit, RecordError>,
{
    let mut reader = io.reader()?;
    let mut policy = ErrorPolicy::new(io.on_error);
    // The rows read ahead, in one buffer: each row's line number and span.
    let (mut ahead, mut ahead_rows): (Vec<u8>, Vec<(u64, Range<usize>)>) = (Vec::new(), Vec::new());
    // The look-ahead: what the rows say of the block size, read once for
    // `auto` (which size) and for a given size (whether most rows
    // contradict it: the one rule of blocks.rs).
    let mut sizes = FeasibleSizes::default();
    let mut check = crate::blocks::SizeCheck::default();
    let given = match size {
        BlockSize::Fixed(b) => b,
        BlockSize::Auto => 0,
    };
    while ahead_rows.len() < LOOKAHEAD_ROWS && ahead.len() < LOOKAHEAD_BYTES {
        match reader.next_line() {
            Ok(Some(line)) => {
                // Bad lines decide nothing; the pass below reports them.
                if let Ok(rec) = Record::parse(line.bytes) {
                    if let (Ok(Some(n)), Ok(Some(len))) =
                        (rec.hash_ids_len(), rec.uint(Field::InputLength))
                    {
                        sizes.add(n as u64, len);
                        check.add(n as u64, len, given.max(1));
                    }
                }
                let start = ahead.len();
                ahead.extend_from_slice(line.bytes);
                ahead_rows.push((line.no, start..ahead.len()));
            }
            Ok(None) => break,
            Err(e) => policy.handle(e)?,
        }
    }
    let b = match size {
        BlockSize::Fixed(b) => {
            check
                .verdict(b)
                .map_err(|e| Error::Input(format!("in the first rows, {e}")))?;
            b
        }
        BlockSize::Auto => {
            match sizes.decide() {
                Ok(Some(b)) => {
                    eprintln!(
                        "{tool}: block size {b} (detected from the first {} rows with hash_ids)",
                        sizes.rows
                    );
                    b
                }
                // No ids yet: the size matters to no row read so far, and
                // each later row is still checked against it.
                Ok(None) => DEFAULT_BLOCK_SIZE,
                Err(e) => {
                    return Err(Error::Input(format!(
                        "--block-size auto: in the first {} rows with hash_ids, {e}",
                        sizes.rows
                    )))
                }
            }
        }
    };
    let mut step = make_step(b);
    let mut out = io.writer()?;
    let mut counts = RowCounts::default();
    let result = ahead_rows
        .iter()
        .try_for_each(|(no, span)| {
            let bytes = &ahead[span.clone()];
            write_record(&mut out, &mut policy, *no, bytes, &mut step, &mut counts)
        })
        .and_then(|()| {
            for_each_line(&mut reader, &mut policy, |no, bytes, policy| {
                write_record(&mut out, policy, no, bytes, &mut step, &mut counts)
            })
        });
    let flushed = out.flush();
    report_skipped(tool, &policy);
    result.and(flushed).map(|()| (counts, b))
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
