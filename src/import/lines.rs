//! The line loop of the line-oriented importers (Azure, BurstGPT and
//! RAGPulse's parse): lines converted in order until the converter is
//! ready to run out of order, then the rest cut into chunks of whole
//! lines (`chunks`) that two workers convert while this thread writes
//! them in input order (ARCHITECTURE.md §5, "chunked importers").
//!
//! What is not a function of one line stays on this thread: line numbers
//! come from the reader's count, bad lines are events handed to the
//! `--on-error` policy at their place in the output (so `fail` writes
//! exactly the rows before the bad line and names it), and counts are
//! added up in order. With `--line-buffered` or one CPU the whole input
//! goes line by line, the reference the chunked path is tested against
//! (`tests/chunked_import.rs`).

use std::io::Read;

use super::{Counts, Sink};
use crate::chunks::{self, Chunk, ChunkLine};
use crate::error::{Error, RecordError, Result};
use crate::jsonl::{LineReader, LineRules, OnError};

/// What one line becomes: rows written into `out` (each ending in `\n`,
/// counted in `counts.rows_out`) or dropped and counted; a bad record is
/// the inner error (named by its line by the loop, handled per
/// `--on-error`); the outer one stops the import.
pub trait Convert: Send {
    fn line(
        &mut self,
        line: &[u8],
        out: &mut Vec<u8>,
        counts: &mut Counts,
    ) -> Result<std::result::Result<(), RecordError>>;

    /// The chunked loop's fast path: converts the whole lines at the start
    /// of `data` (a chunk's, from a line's start) while they are of the
    /// converter's plain shape, exactly as [`Convert::line`] would
    /// (counts included), each at most `max_line` bytes; returns the bytes
    /// and the lines it took. It stops before the first line it does not
    /// take (a bad one too), which goes to [`Convert::line`] with its
    /// number: one walk over the plain lines, where the loop would find
    /// each line's end and then the converter its fields.
    fn fast_lines(
        &mut self,
        _data: &[u8],
        _max_line: usize,
        _out: &mut Vec<u8>,
        _counts: &mut Counts,
    ) -> (usize, u64) {
        (0, 0)
    }

    /// Whether every later line is a function of the line and of what the
    /// converter holds now, so forks can take chunks out of order (Azure:
    /// once the first row set the trace's zero).
    fn ready(&self) -> bool {
        true
    }

    /// A copy for a worker thread: the same state, counts kept by the loop.
    fn fork(&self) -> Self
    where
        Self: Sized;
}

/// Converts the rest of `rd` with `conv`, writing through `sink`.
pub fn convert<R: Read + Send, C: Convert>(
    sink: &mut Sink,
    mut rd: LineReader<R>,
    max_line: usize,
    conv: &mut C,
) -> Result<()> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunked = !sink.line_buffered && workers >= 2;
    let mut row = Vec::new();
    // In order until one line has passed the line rules (the first line's
    // BOM and JSONL check are then behind us) and the converter is ready.
    let mut seen = false;
    while !(chunked && seen && conv.ready()) {
        let line = match rd.next_line() {
            Ok(Some(l)) => l,
            Ok(None) => return Ok(()),
            Err(e) => {
                sink.policy.handle(e)?;
                continue;
            }
        };
        seen = true;
        let no = line.no;
        row.clear();
        let made = conv.line(line.bytes, &mut row, &mut sink.counts)?;
        sink.out.write_records(&row)?;
        if let Err(e) = made {
            sink.bad(no, e)?;
        }
    }
    let (carry, src, line_base, rules) = rd.into_parts();
    let src = std::io::Cursor::new(carry).chain(src);
    in_chunks(sink, src, line_base, rules, max_line, workers, conv)
}

/// What a worker made of one chunk.
#[derive(Default)]
struct Made {
    /// Bad lines, each at its place in the output.
    events: Vec<(usize, Error)>,
    counts: Counts,
}

/// Converts the lines of `chunk` into `out`. Stops at a bad line the
/// policy will not skip (or at an error that stops the import).
fn make_chunk<C: Convert>(
    conv: &mut C,
    chunk: &Chunk,
    mut rules: LineRules,
    max_line: usize,
    on_error: OnError,
    out: &mut Vec<u8>,
) -> Made {
    let mut made = Made::default();
    let data = chunk.bufs.data();
    let mut lines = chunk.lines(&mut rules, max_line);
    loop {
        // Plain lines in one walk, then the line the fast path left (if
        // any) the general way, with its number.
        let (at, _) = lines.position();
        let (bytes, n) =
            conv.fast_lines(&data[at.min(data.len())..], max_line, out, &mut made.counts);
        lines.pass_over(bytes, n);
        let Some(ChunkLine { no, text, .. }) = lines.next() else {
            break;
        };
        let bad = match text {
            Err(e) => Some(e),
            Ok(None) => None,
            Ok(Some(line)) => {
                let mark = out.len();
                match conv.line(line, out, &mut made.counts) {
                    Ok(Ok(())) => None,
                    Ok(Err(err)) => {
                        out.truncate(mark);
                        Some(Error::Data { line: no, err })
                    }
                    Err(e) => {
                        out.truncate(mark);
                        Some(e)
                    }
                }
            }
        };
        if let Some(e) = bad {
            let fatal = !on_error.skips(&e);
            made.events.push((out.len(), e));
            if fatal {
                break; // the loop stops here: the rest is never written
            }
        }
    }
    made
}

/// The chunked loop (`chunks::in_order_chunks`): a reader thread cuts
/// `src` into chunks, `workers` threads convert them each on a fork of
/// `conv`, and this thread writes them in input order, each one's bad
/// lines handed to the policy where they are.
fn in_chunks<C: Convert>(
    sink: &mut Sink,
    src: impl Read + Send,
    line_base: u64,
    rules: LineRules,
    max_line: usize,
    workers: usize,
    conv: &mut C,
) -> Result<()> {
    let on_error = sink.on_error;
    let forks = (0..workers).map(|_| conv.fork()).collect();
    let make = |fork: &mut C, chunk: &Chunk, (): &(), out: &mut Vec<u8>| {
        make_chunk(fork, chunk, rules, max_line, on_error, out)
    };
    let write = |chunk: &mut Chunk, (), made: Made| {
        let out = &chunk.bufs.output;
        let mut from = 0;
        for (at, e) in made.events {
            sink.out.write_records(&out[from..at])?;
            from = at;
            sink.policy.handle(e)?;
        }
        sink.out.write_records(&out[from..])?;
        sink.counts.add(&made.counts);
        Ok(())
    };
    let (result, _forks) = chunks::in_order_chunks(
        src,
        chunks::chunk_bytes(),
        line_base,
        max_line,
        forks,
        |_| (),
        make,
        write,
    );
    result
}
