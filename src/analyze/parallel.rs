//! mc-analyze's reader on every core: one thread cuts the input into
//! chunks of whole lines (the core `chunks`), workers parse each chunk into
//! compact rows ([`ReadRow`]s and their ids, no record kept), and the
//! calling thread applies them to the [`Analyzer`] in input order, so the
//! id table, the lint's first lines and every statistic are exactly what
//! the one-thread reader makes (ARCHITECTURE.md §5, "mc-analyze reads on
//! two cores"). Parsing is most of the reading time; the in-order part
//! (id table, row store, sessions) is what stays on one thread.

use std::collections::BTreeMap;
use std::io::Read;
use std::ops::Range;

use crossbeam_channel::{Receiver, Sender};

use super::{Analyzer, ReadRow};
use crate::chunks::{self, Buffers, Chunk, ChunkLine};
use crate::error::{Error, Result};
use crate::jsonl::{ErrorPolicy, LineRules};
use crate::record::Record;

/// One line of a chunk as a worker read it.
enum Line {
    /// A record: its line, its fields (the session as where it is in the
    /// chunk) and where its ids are in [`ReadChunk::ids`].
    Row {
        no: u64,
        row: ReadRow<Range<usize>>,
        ids: Range<usize>,
    },
    /// A bad line, for the policy.
    Bad(Error),
}

/// What a worker made of one chunk. Reused from chunk to chunk.
#[derive(Default)]
struct ReadChunk {
    lines: Vec<Line>,
    /// Every row's ids, one after the other.
    ids: Vec<u64>,
    /// The line rules' `first` after the chunk (no non-blank line yet).
    first_after: bool,
}

/// Reads the lines of `chunk` into `out`, from the rules' `first` state
/// `first` (the one walk of `Chunk::lines`, so line numbers and bad-line
/// verdicts are the one-thread reader's).
fn read_chunk(chunk: &Chunk, first: bool, max_line: usize, out: &mut ReadChunk) {
    out.lines.clear();
    out.ids.clear();
    let data = chunk.bufs.data();
    let mut rules = LineRules {
        first,
        ..LineRules::jsonl()
    };
    let mut ids = Vec::new();
    for ChunkLine { no, text, .. } in chunk.lines(&mut rules, max_line) {
        let line = match text {
            Err(e) => Line::Bad(e),
            Ok(None) => continue, // blank
            Ok(Some(text)) => match Record::parse(text).and_then(|r| ReadRow::read(&r, &mut ids)) {
                Err(err) => Line::Bad(Error::Data { line: no, err }),
                Ok(row) => {
                    // The session as a range of the chunk: it is a slice of it.
                    let row = row.map_session(|s| {
                        let at = s.as_ptr() as usize - data.as_ptr() as usize;
                        at..at + s.len()
                    });
                    let start = out.ids.len();
                    out.ids.extend_from_slice(&ids);
                    Line::Row {
                        no,
                        row,
                        ids: start..out.ids.len(),
                    }
                }
            },
        };
        out.lines.push(line);
    }
    out.first_after = rules.first;
}

/// A chunk and what a worker made of it, on its way back in order.
struct Done {
    chunk: Chunk,
    read: ReadChunk,
    /// The rules' `first` the worker started from (a guess: true for the
    /// first chunk only; the in-order side reads a chunk again if wrong).
    first: bool,
}

/// Reads all of `src` into `analyzer` with `workers` parsing threads;
/// `progress(last line, bytes)` after each chunk. Bad lines go to `policy`
/// in input order, as the one-thread reader hands them; the first it does
/// not skip ends the run with its error.
pub fn read_into(
    src: Box<dyn Read + Send>,
    max_line: usize,
    workers: usize,
    policy: &mut ErrorPolicy,
    analyzer: &mut Analyzer,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<()> {
    let size = chunks::chunk_bytes();
    let max_line = max_line.max(1);
    let (job_tx, job_rx) = crossbeam_channel::bounded::<Chunk>(workers);
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<Done>();
    let (free_tx, free_rx) = crossbeam_channel::unbounded::<Buffers>();
    let (spare_tx, spare_rx) = crossbeam_channel::unbounded::<ReadChunk>();
    // The pool: every chunk in flight holds one, so memory is bounded.
    for _ in 0..2 * workers + 2 {
        let _ = free_tx.send(Buffers::default());
    }
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || {
            chunks::read_chunks(src, size, max_line, &free_rx, |c| job_tx.send(c).is_ok())
        });
        for _ in 0..workers {
            let (jobs, done, spare) = (job_rx.clone(), done_tx.clone(), spare_rx.clone());
            scope.spawn(move || {
                for chunk in jobs {
                    let first = chunk.seq == 0;
                    let mut read = spare.try_recv().unwrap_or_default();
                    read_chunk(&chunk, first, max_line, &mut read);
                    if done.send(Done { chunk, read, first }).is_err() {
                        break; // the in-order side stopped
                    }
                }
            });
        }
        drop((job_rx, done_tx, spare_rx));
        let applied = apply_in_order(
            done_rx, &free_tx, &spare_tx, max_line, policy, analyzer, progress,
        );
        drop(free_tx); // a reader waiting for a buffer stops
        let read = reader
            .join()
            .unwrap_or_else(|_| Err(Error::Io(std::io::Error::other("the reader thread failed"))));
        applied.and(read)
    })
}

/// The in-order end of [`read_into`]: takes chunks as workers finish them
/// and applies each in input order.
fn apply_in_order(
    done: Receiver<Done>,
    free: &Sender<Buffers>,
    spare: &Sender<ReadChunk>,
    max_line: usize,
    policy: &mut ErrorPolicy,
    analyzer: &mut Analyzer,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<()> {
    let mut waiting = BTreeMap::new();
    let mut next = 0u64;
    let mut first = true;
    let mut bytes = 0u64;
    for d in done {
        waiting.insert(d.chunk.seq, d);
        while let Some(Done {
            chunk,
            mut read,
            first: guessed,
        }) = waiting.remove(&next)
        {
            if guessed != first {
                // Blank lines only before this chunk: read it again as the
                // start of the input.
                read_chunk(&chunk, first, max_line, &mut read);
            }
            first = read.first_after;
            let data = chunk.bufs.data();
            for line in read.lines.drain(..) {
                match line {
                    Line::Bad(e) => policy.handle(e)?,
                    Line::Row { no, row, ids } => {
                        let row = row.map_session(|r| &data[r]);
                        if let Err(e) = analyzer.apply(no, row, &read.ids[ids]) {
                            policy.record(no, e)?;
                        }
                    }
                }
            }
            bytes += data.len() as u64;
            progress(chunk.line_base + chunk.lines, bytes);
            let _ = free.send(chunk.bufs);
            let _ = spare.send(read);
            next += 1;
        }
    }
    Ok(())
}
