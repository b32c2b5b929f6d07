//! mc-scale's whole-input path (`--prefix-len-multiplier`,
//! `--prompt-len-multiplier`): which ids are shared is a fact of the whole
//! trace, so the input is read twice. The first pass checks every row and
//! counts its ids; the second rewrites the rows. Memory is the id table
//! (O(distinct ids)), never the rows: a file (stdin redirected from one
//! included) is read again, a pipe is copied to a temporary file as the
//! first pass reads it (`spill::Twice`).

use std::io::Read;
use std::time::Duration;

use super::{runs, IdCounts, PrefixPlan, RowScaler, ScaleArgs};
use crate::blocks::{self, BlockSize, FeasibleSizes, DEFAULT_BLOCK_SIZE};
use crate::error::{Error, RecordError, Result};
use crate::filter;
use crate::jsonl::{ErrorPolicy, LineReader, OnError};
use crate::progress::Progress;
use crate::record::{Field, Record};
use crate::spill::Twice;

/// How often a plain progress line is written when stderr is not a
/// terminal (a run shorter than this prints none).
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Lines between two looks at the clock for the progress line.
const TICK_LINES: u64 = 4096;

/// Runs mc-scale's two passes for `args` (the multipliers are not 1).
pub fn run(tool: &'static str, args: &ScaleArgs) -> Result<()> {
    let io = &args.io;
    let mut input = Twice::open(io.input())?;
    let mut policy = ErrorPolicy::new(io.on_error);
    let mut facts = Facts::for_block(args.block);
    let mut progress = Progress::for_stderr(tool, PROGRESS_EVERY);
    let first = input.first()?;
    let loaded = facts.count(
        LineReader::new(first, io.max_line_bytes),
        &mut policy,
        io.on_error == OnError::Skip,
        &mut progress,
    );
    // The whole trace has been seen: every row with ids decides the block size.
    let b = match args.block {
        // The one rule for a size given by hand (blocks.rs).
        BlockSize::Fixed(b) => {
            facts
                .check
                .verdict(b)
                .map_err(|e| Error::Input(e.to_string()))?;
            b
        }
        BlockSize::Auto => match facts.detected_block_size(tool) {
            Ok(b) => b,
            Err(e) => {
                // A bad line the first pass stopped at comes first.
                loaded?;
                return Err(e);
            }
        },
    };
    let mut scaler = RowScaler::new(ScaleArgs {
        block_size: b,
        ..args.clone()
    });
    // A bad line stops the run, but the good rows before it are still
    // written, as the streaming modes write them (their ids counted over
    // those rows).
    let mut out = io.writer()?;
    let mut counts = filter::RowCounts::default();
    let emitted = match PrefixPlan::new(&facts.counts, args.prefix_mult) {
        Err(e) => Err(facts.name_line_of_largest_id(&input, io.max_line_bytes, e)),
        Ok(mut plan) => {
            let mut step =
                |rec: &Record<'_>, buf: &mut Vec<u8>| scaler.apply(rec, Some(&mut plan), buf);
            input.again().and_then(|src| {
                facts.replay(
                    LineReader::new(src, io.max_line_bytes),
                    &mut progress,
                    |no, bytes| {
                        filter::write_record(
                            &mut out,
                            &mut policy,
                            no,
                            bytes,
                            &mut step,
                            &mut counts,
                        )
                    },
                )
            })
        }
    };
    progress.finish();
    let flushed = out.flush();
    filter::report_skipped(tool, &policy);
    loaded?;
    emitted.and(flushed)?;
    if counts.any_change() {
        eprintln!("{tool}: {} of {} rows changed", counts.changed, counts.rows);
    }
    scaler.report_capped(tool);
    Ok(())
}

/// What the first pass learns: the id counts, the block sizes the rows
/// allow, and which lines the second pass reads.
#[derive(Default)]
struct Facts {
    counts: IdCounts,
    scratch: Vec<u64>,
    /// The block sizes the rows allow, for `--block-size auto`.
    sizes: FeasibleSizes,
    /// `--block-size` when given (1 under `auto`), and how the rows fit it.
    given: u64,
    check: blocks::SizeCheck,
    /// Lines the first pass finished with (good or skipped): the second
    /// pass reads as many and stops where the first stopped.
    lines: u64,
    /// Lines `--on-error skip` skipped, in order: the second pass passes
    /// over them without reporting them again.
    skipped: Vec<u64>,
    /// Input bytes, for the progress line.
    bytes: u64,
}

impl Facts {
    /// No facts yet, for `--block-size` `block`.
    fn for_block(block: BlockSize) -> Facts {
        Facts {
            given: match block {
                BlockSize::Fixed(b) => b,
                BlockSize::Auto => 1,
            },
            ..Facts::default()
        }
    }

    /// The block size `--block-size auto` finds in the rows (said on
    /// stderr), or the default when no row has ids.
    fn detected_block_size(&self, tool: &str) -> Result<u64> {
        match self.sizes.decide() {
            Ok(Some(b)) => {
                eprintln!(
                    "{tool}: block size {b} (detected from {} rows with hash_ids)",
                    self.sizes.rows
                );
                Ok(b)
            }
            Ok(None) => Ok(DEFAULT_BLOCK_SIZE),
            Err(e) => Err(Error::Input(format!("--block-size auto: {e}"))),
        }
    }

    /// The first pass. Bad lines go to `policy`; under `--on-error fail`
    /// the pass stops at the first, and the rows before it are kept.
    fn count<R: Read>(
        &mut self,
        mut reader: LineReader<R>,
        policy: &mut ErrorPolicy,
        skip: bool,
        progress: &mut Progress,
    ) -> Result<()> {
        loop {
            let line = match reader.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => return Ok(()),
                Err(e) => {
                    policy.handle(e)?;
                    continue;
                }
            };
            let (no, len) = (line.no, line.bytes.len() as u64);
            if let Err(e) = self.add(line.bytes) {
                policy.record(no, e)?;
                if skip {
                    self.skipped.push(no);
                }
            }
            self.lines += 1;
            self.bytes += len + 1;
            if self.lines.is_multiple_of(TICK_LINES) {
                let (rows, mb) = (self.lines, self.bytes >> 20);
                progress.tick(|| format!("counting ids: {rows} rows, {mb} MB read (pass 1 of 2)"));
            }
        }
    }

    /// Checks one row and counts its ids.
    fn add(&mut self, line: &[u8]) -> std::result::Result<(), RecordError> {
        let rec = Record::parse(line)?;
        // Check every field the second pass reads, so it cannot fail on types.
        rec.number(Field::Timestamp)?;
        rec.number(Field::Delay)?;
        rec.uint(Field::OutputLength)?;
        let len = rec.uint(Field::InputLength)?;
        // The shape checks the array (the scanner's, or measured now); the
        // ids are counted as they are read, without a list between.
        let n = match (rec.hash_ids_shape()?, rec.raw(Field::HashIds)) {
            (Some(shape), Some(raw)) if shape.longest_digits <= 19 => {
                let counts = &mut self.counts;
                runs::ids_while(raw, |h| {
                    counts.add(h);
                    true
                });
                shape.count
            }
            _ => {
                // An id of 20 digits may not fit 64 bits: the decoder says so.
                rec.hash_ids_into(&mut self.scratch)?;
                for &id in &self.scratch {
                    self.counts.add(id);
                }
                self.scratch.len()
            }
        };
        if let Some(len) = len {
            self.sizes.add(n as u64, len);
            self.check.add(n as u64, len, self.given.max(1));
        }
        Ok(())
    }

    /// The second pass: `f(line number, bytes)` for each row the first pass
    /// kept, in order, up to where the first pass stopped.
    fn replay<R: Read>(
        &self,
        mut reader: LineReader<R>,
        progress: &mut Progress,
        mut f: impl FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let (mut done, mut bytes) = (0u64, 0u64);
        let mut skipped = self.skipped.iter().peekable();
        while done < self.lines {
            let line = match reader.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => return Ok(()),
                // The first pass met it and reported it (or stopped there).
                Err(Error::Data { .. }) => continue,
                Err(e) => return Err(e),
            };
            done += 1;
            bytes += line.bytes.len() as u64 + 1;
            if skipped.next_if_eq(&&line.no).is_some() {
                continue;
            }
            f(line.no, line.bytes)?;
            if done.is_multiple_of(TICK_LINES) {
                let total = self.lines;
                progress.tick(|| {
                    format!(
                        "rewriting: {done} of {total} rows, {} MB read (pass 2 of 2)",
                        bytes >> 20
                    )
                });
            }
        }
        Ok(())
    }

    /// `e` with the line of the first row holding the largest id, when the
    /// ids are what went wrong (one more pass over the input).
    fn name_line_of_largest_id(&self, input: &Twice, max_line: usize, e: Error) -> Error {
        let (Error::Input(msg), Some(max)) = (&e, self.counts.max_id()) else {
            return e;
        };
        let Ok(src) = input.again() else {
            return e;
        };
        let mut found = None;
        let mut ids = Vec::new();
        let _ = self.replay(
            LineReader::new(src, max_line),
            &mut Progress::new("", crate::progress::Mode::Off, PROGRESS_EVERY),
            |no, bytes| {
                let hit = Record::parse(bytes)
                    .is_ok_and(|rec| rec.hash_ids_into(&mut ids).is_ok() && ids.contains(&max));
                if hit {
                    found = Some(no);
                    // Stops the pass: the first such row is the one.
                    return Err(Error::Input(String::new()));
                }
                Ok(())
            },
        );
        match found {
            Some(line) => Error::Data {
                line,
                err: RecordError::field("hash_ids", msg.clone()),
            },
            None => e,
        }
    }
}
