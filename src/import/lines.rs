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

use std::collections::BTreeMap;
use std::io::Read;

use super::{Counts, Sink};
use crate::chunks::{self, Buffers, Chunk, ChunkLine};
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
    skip: bool,
    out: &mut Vec<u8>,
) -> Made {
    let mut made = Made::default();
    for ChunkLine { no, text, .. } in chunk.lines(&mut rules, max_line) {
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
            let fatal = !skip || !matches!(e, Error::Data { .. });
            made.events.push((out.len(), e));
            if fatal {
                break; // the loop stops here: the rest is never written
            }
        }
    }
    made
}

/// A chunk a worker made, on its way back to this thread.
struct Done {
    chunk: Chunk,
    made: Made,
}

/// The chunked loop: a reader thread cuts `src` into chunks, `workers`
/// threads convert them each on a fork of `conv`, and this thread writes
/// them in input order.
fn in_chunks<C: Convert>(
    sink: &mut Sink,
    src: impl Read + Send,
    line_base: u64,
    rules: LineRules,
    max_line: usize,
    workers: usize,
    conv: &mut C,
) -> Result<()> {
    let size = chunks::chunk_bytes();
    let skip = sink.on_error == OnError::Skip;
    let (job_tx, job_rx) = crossbeam_channel::bounded::<Chunk>(workers);
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<Done>();
    let (free_tx, free_rx) = crossbeam_channel::unbounded::<Buffers>();
    // The pool: every chunk in flight holds one, so memory is bounded by it.
    for _ in 0..2 * workers + 2 {
        let _ = free_tx.send(Buffers::default());
    }
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || {
            chunks::read_chunks(src, size, max_line, &free_rx, |mut c| {
                c.line_base += line_base;
                job_tx.send(c).is_ok()
            })
        });
        for _ in 0..workers {
            let (jobs, done) = (job_rx.clone(), done_tx.clone());
            let mut fork = conv.fork();
            scope.spawn(move || {
                for mut chunk in jobs {
                    let mut output = std::mem::take(&mut chunk.bufs.output);
                    output.clear();
                    let made = make_chunk(&mut fork, &chunk, rules, max_line, skip, &mut output);
                    chunk.bufs.output = output;
                    if done.send(Done { chunk, made }).is_err() {
                        break; // the writer stopped
                    }
                }
            });
        }
        drop((job_rx, done_tx));
        let written = write_in_order(done_rx, &free_tx, sink);
        drop(free_tx); // a reader waiting for a buffer stops
        let read = reader
            .join()
            .unwrap_or_else(|_| Err(Error::Io(std::io::Error::other("the reader thread failed"))));
        written.and(read)
    })
}

/// The writing end of [`in_chunks`]: the chunks in input order, each
/// one's bad lines handed to the policy where they are.
fn write_in_order(
    done: crossbeam_channel::Receiver<Done>,
    free: &crossbeam_channel::Sender<Buffers>,
    sink: &mut Sink,
) -> Result<()> {
    let mut waiting: BTreeMap<u64, Done> = BTreeMap::new();
    let mut next = 0;
    for d in done {
        waiting.insert(d.chunk.seq, d);
        while let Some(Done { chunk, made }) = waiting.remove(&next) {
            next += 1;
            let out = &chunk.bufs.output;
            let mut from = 0;
            for (at, e) in made.events {
                sink.out.write_records(&out[from..at])?;
                from = at;
                sink.policy.handle(e)?;
            }
            sink.out.write_records(&out[from..])?;
            sink.counts.add(&made.counts);
            let _ = free.send(chunk.bufs);
        }
    }
    Ok(())
}
