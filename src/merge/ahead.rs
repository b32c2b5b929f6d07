//! Reading one input of the merge ahead, off the merging thread: the
//! input is cut into chunks (`chunks::in_order_chunks`, 2 MB;
//! `MCTRACE_CHUNK_BYTES` makes them small in tests), workers parse and
//! rewrite each chunk's rows (the merge's cost per row), and the input's
//! own thread takes the made chunks in file order into batches, while the
//! merging thread takes rows from the batch before (decision 0008,
//! the merge's read-ahead). Workers rather than one thread an input: inputs
//! that follow each other in time (the halves of a trace) are read one
//! after the other, so one input's rows must use both cores
//! (docs/decisions/0048-merge-rows-made-on-workers.md). A chunk's output
//! becomes a batch without a copy; buffers come back to be reused, so
//! memory is bounded whatever the input (about 20 MB an input).
//!
//! Everything the rows' order depends on stays in the file's order: the
//! input's thread owns the file's [`Reading`] (its sort check,
//! `--on-error` policy and counts, [`Reading::kept`]) and hands it back
//! with the last batch, after the rows read before the end or the error
//! that stopped it.

use crossbeam_channel::{Receiver, Sender};

use std::io::Read;

use super::reading::{in_file, Reading};
use super::rewrite::Rewriter;
use crate::chunks::{self, Chunk, ChunkLine};
use crate::error::{Error, Result};
use crate::jsonl::{LineReader, LineRules, OnError};
use crate::record::Number;

/// Rewritten rows, back to back, each with its `\n` (so a run of them is
/// written as it lies: [`Ahead::span`]).
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    /// (end of the row and its `\n` in `bytes`, its key, its written
    /// timestamp).
    rows: Vec<BatchRow>,
    /// After the last row: how the file ended, and its reading state.
    end: Option<(Result<()>, Box<Reading>)>,
}

/// A row's merge key and written timestamp.
pub type Row = (f64, Option<Number>);

/// The end of an input read ahead: `Ok` at the end of the file, or the
/// error that stopped it; and the file's reading state.
pub struct Ended {
    pub result: Result<()>,
    pub reading: Box<Reading>,
}

/// The merging thread's end of one input's read-ahead.
pub struct Ahead {
    full: Receiver<Batch>,
    free: Sender<Batch>,
    batch: Batch,
    /// The next row of `batch`, and where it starts.
    at: usize,
    from: usize,
    /// The current row's bytes in `batch`, without its `\n`.
    row: std::ops::Range<usize>,
}

impl Ahead {
    /// Starts the thread that reads `reading` (whose policy is
    /// `on_error`) with `workers` workers.
    pub fn start(reading: Box<Reading>, on_error: OnError, workers: usize) -> Ahead {
        let (full_tx, full) = crossbeam_channel::bounded::<Batch>(1);
        let (free, free_rx) = crossbeam_channel::unbounded::<Batch>();
        let _ = free.send(Batch::default());
        // Detached: it ends at the end of the file, or when this end is
        // dropped (a send fails).
        // Half the filters' chunk: each input holds a pool of chunks and
        // batches (the inputs not being written wait with theirs full), so
        // memory grows with the number of inputs; 1 MB chunks still cost
        // nothing to hand over.
        let size = (chunks::chunk_bytes() / 2).max(1);
        std::thread::spawn(move || {
            read_ahead(reading, on_error, size, workers, &full_tx, &free_rx)
        });
        Ahead {
            full,
            free,
            batch: Batch::default(),
            at: 0,
            from: 0,
            row: 0..0,
        }
    }

    /// Moves to the next row ([`Ahead::row`]) and returns its key and
    /// written timestamp; the end of the rows is `Err(Ended)`. The row is
    /// not copied out of its batch: the merge writes it from there.
    pub fn advance(&mut self) -> std::result::Result<Result<Row>, Ended> {
        loop {
            if let Some(&(end, key, timestamp)) = self.batch.rows.get(self.at) {
                self.at += 1;
                self.row = self.from..end - 1;
                self.from = end;
                return Ok(Ok((key, timestamp)));
            }
            if let Some((result, reading)) = self.batch.end.take() {
                return Err(Ended { result, reading });
            }
            let Ok(next) = self.full.recv() else {
                // The thread ended without its last batch: it panicked.
                return Ok(Err(Error::Io(std::io::Error::other(
                    "a read-ahead thread of mc-merge failed",
                ))));
            };
            let done = std::mem::replace(&mut self.batch, next);
            let _ = self.free.send(done);
            (self.at, self.from, self.row) = (0, 0, 0..0);
        }
    }

    /// The row [`Ahead::advance`] moved to (without its `\n`).
    #[inline]
    pub fn row(&self) -> &[u8] {
        &self.batch.bytes[self.row.clone()]
    }

    /// [`Ahead::row`] with its `\n`.
    #[inline]
    pub fn line(&self) -> &[u8] {
        &self.batch.bytes[self.row.start..self.row.end + 1]
    }

    /// The row [`Ahead::advance`] moved to and the rows after it in its
    /// batch while `goes_first` says of their keys that they go out first,
    /// as one slice with their `\n`s; and the rows taken after the current
    /// one (their written timestamps, for the summary). The next
    /// [`Ahead::advance`] moves past them. One comparison a row, no copy:
    /// a run of one file's rows goes out in one write (decision 0048,
    /// "later").
    #[inline]
    pub fn span(&mut self, mut goes_first: impl FnMut(f64) -> bool) -> (&[u8], &[BatchRow]) {
        let (start, first) = (self.row.start, self.at);
        let rest = &self.batch.rows[first..];
        let n = rest
            .iter()
            .position(|&(_, key, _)| !goes_first(key))
            .unwrap_or(rest.len());
        if let Some(&(end, _, _)) = rest[..n].last() {
            self.from = end;
        }
        self.at += n;
        let taken = &self.batch.rows[first..first + n];
        (&self.batch.bytes[start..self.from], taken)
    }
}

/// A row of a batch: the end of its bytes (with the `\n`), its key and its
/// written timestamp.
pub type BatchRow = (usize, f64, Option<Number>);

/// What a worker made of one chunk: the rows it kept, rewritten, back
/// to back in the chunk's output buffer, and what happened between them.
struct Made {
    /// (end of the row and its `\n` in the output, its line, its written
    /// timestamp).
    rows: Vec<(usize, u64, Option<Number>)>,
    /// (rows kept before it, what happened): rows `--weights` dropped and
    /// bad lines, which the file's policy takes in order.
    events: Vec<(usize, Event)>,
    /// The line rules' `first` after the chunk.
    first_after: bool,
}

enum Event {
    Dropped,
    Bad(Error),
}

/// Rewrites the lines of `chunk` with `rw` into `out`, `first` saying
/// whether no non-blank line came before the chunk. Stops at a bad line
/// the policy will not skip: nothing after it is written.
fn make(
    rw: &mut Rewriter,
    chunk: &Chunk,
    first: bool,
    max_line: usize,
    on_error: OnError,
    out: &mut Vec<u8>,
) -> Made {
    let mut rules = LineRules {
        first,
        ..LineRules::jsonl()
    };
    // Room for the rows once: rewritten, a chunk grows by a few percent
    // (one digit more for some ids), and grown by doubling its buffer was
    // copied again and again: 225 copies, 14 M instructions on `S S` of
    // the 16 MB slice (callgrind, decision 0048, "last").
    out.reserve(chunk.bufs.len + chunk.bufs.len / 8);
    let mut made = Made {
        rows: Vec::with_capacity(chunk.lines as usize),
        events: Vec::new(),
        first_after: first,
    };
    for ChunkLine { no, text, .. } in chunk.lines(&mut rules, max_line) {
        let bad = match text {
            Ok(None) => continue,
            Err(e) => e,
            Ok(Some(line)) => {
                let mark = out.len();
                match rw.row(line, no, out) {
                    Ok(Some(kept)) => {
                        out.push(b'\n');
                        made.rows.push((out.len(), no, kept.timestamp));
                        continue;
                    }
                    Ok(None) => {
                        out.truncate(mark);
                        made.events.push((made.rows.len(), Event::Dropped));
                        continue;
                    }
                    Err(err) => {
                        out.truncate(mark);
                        Error::Data { line: no, err }
                    }
                }
            }
        };
        let fatal = !on_error.skips(&bad);
        made.events.push((made.rows.len(), Event::Bad(bad)));
        if fatal {
            break;
        }
    }
    made.first_after = rules.first;
    made
}

/// Why the in-order side stopped the chunked loop: the merge went away,
/// or the file's rows stopped at an error (kept to be handed back).
const STOPPED: &str = "mc-merge read-ahead stopped";

/// The thread: the file cut into chunks (`chunks::in_order_chunks`),
/// rewritten by `workers` workers, and taken here in file order (the sort
/// check, the policy and the counts of [`Reading::kept`]) into batches.
/// One input's rows then use both cores even while the other input waits
/// (two files one after the other in time, as the halves of a trace, keep
/// one input's thread busy and the other's idle: decision 0048).
fn read_ahead(
    mut reading: Box<Reading>,
    on_error: OnError,
    size: usize,
    workers: usize,
    full: &Sender<Batch>,
    free: &Receiver<Batch>,
) {
    let max_line = reading.reader.max_line();
    let empty: Box<dyn std::io::Read + Send> = Box::new(std::io::empty());
    let reader = std::mem::replace(&mut reading.reader, LineReader::new(empty, max_line));
    let (carry, src, line_base, start_rules) = reader.into_parts();
    let src = std::io::Cursor::new(carry).chain(src);
    let forks: Vec<Rewriter> = (0..workers.max(1))
        .map(|_| Rewriter::new(reading.rw.rule.clone()))
        .collect();
    // The first chunk starts where the reader was; a later chunk guesses
    // that a non-blank line came before it, and is made again here when
    // the guess was wrong (only blank or no lines before it).
    let mut first = start_rules.first;
    let mut spare = Some(Batch::default());
    let mut stopped: Option<Error> = None;
    let (result, _) = chunks::in_order_chunks(
        src,
        size,
        line_base,
        max_line,
        forks,
        |c: &Chunk| c.seq == 0 && start_rules.first,
        |rw: &mut Rewriter, chunk: &Chunk, &guess: &bool, out: &mut Vec<u8>| {
            make(rw, chunk, guess, max_line, on_error, out)
        },
        |chunk, guess, mut made| {
            if guess != first {
                let mut out = std::mem::take(&mut chunk.bufs.output);
                out.clear();
                made = make(&mut reading.rw, chunk, first, max_line, on_error, &mut out);
                chunk.bufs.output = out;
            }
            first = made.first_after;
            let Some(mut batch) = take_batch(free, &mut spare) else {
                return Err(Error::Io(std::io::Error::other(STOPPED)));
            };
            batch.rows.clear();
            // The chunk's output becomes the batch's bytes (no copy); the
            // batch's old buffer goes back to the chunks' pool.
            batch.bytes.clear();
            std::mem::swap(&mut batch.bytes, &mut chunk.bufs.output);
            let taken = take_rows(&mut reading, made, &mut batch);
            let sent = full.send(batch).is_ok();
            match taken {
                Err(e) => {
                    stopped = Some(e);
                    Err(Error::Io(std::io::Error::other(STOPPED)))
                }
                Ok(()) if sent => Ok(()),
                Ok(()) => Err(Error::Io(std::io::Error::other(STOPPED))),
            }
        },
    );
    let result = match stopped {
        Some(e) => Err(e),
        None => result.map_err(|e| in_file(&reading.name, e)),
    };
    // The last batch: no rows, how the file ended, the reading state.
    let mut last = take_batch(free, &mut spare).unwrap_or_default();
    last.bytes.clear();
    last.rows.clear();
    last.end = Some((result, reading));
    let _ = full.send(last);
}

/// A free batch: one handed back, else the spare (made on the first turn,
/// so three are in flight), else one handed back after a wait; `None`
/// when the merge stopped.
fn take_batch(free: &Receiver<Batch>, spare: &mut Option<Batch>) -> Option<Batch> {
    match free.try_recv() {
        Ok(b) => Some(b),
        Err(_) => spare.take().or_else(|| free.recv().ok()),
    }
}

/// Takes the rows of a made chunk in file order into `batch`, with the
/// events between them; stops at the first error (the rows before it stay
/// in the batch).
fn take_rows(reading: &mut Reading, made: Made, batch: &mut Batch) -> Result<()> {
    let mut events = made.events.into_iter().peekable();
    for (i, &(end, no, timestamp)) in made.rows.iter().enumerate() {
        while let Some((_, event)) = events.next_if(|(at, _)| *at == i) {
            take_event(reading, event)?;
        }
        reading.kept(no, timestamp)?;
        batch.rows.push((end, reading.key(), timestamp));
    }
    for (_, event) in events {
        take_event(reading, event)?;
    }
    Ok(())
}

fn take_event(reading: &mut Reading, event: Event) -> Result<()> {
    match event {
        Event::Dropped => {
            reading.dropped();
            Ok(())
        }
        Event::Bad(e) => {
            let name = &reading.name;
            reading.policy.handle(e).map_err(|e| in_file(name, e))
        }
    }
}
