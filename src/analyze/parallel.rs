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

/// Most lines one `ReadChunk` holds. A chunk is cut by bytes, and a
/// parsed line costs `Line`'s size (about 100 bytes) however short its
/// text: 2 MB of `{}` rows made 700,000 lines, 90 MB a chunk in flight,
/// and mc-analyze used 297 MB for 6 MB of input (106 MB on one thread).
/// Past this many, the worker stops and the in-order side reads the rest
/// of the chunk itself, this many lines at a time; rows of 32 bytes or
/// more (every real trace) never reach it.
pub const MAX_LINES_PER_READ: usize = 65_536;

/// mc-analyze's chunks: half the filters' [`chunks::DEFAULT_CHUNK_BYTES`].
/// A chunk in flight holds its text and, parsed, its rows and ids (8
/// bytes an id: about 1.5 times the text on a generated trace), and the
/// rows kept are a fraction of the input, so the chunks were a third of
/// the peak: 1 MB chunks took 9 MB off 90 MB on the 256 MB generated trace
/// (decision 47). A chunk of 1 MB is still thousands of rows: handing it
/// over costs nothing next to parsing them.
pub const CHUNK_BYTES: usize = 1 << 20;

/// What a worker made of one chunk (or of its first [`MAX_LINES_PER_READ`]
/// lines). Reused from chunk to chunk.
#[derive(Default)]
struct ReadChunk {
    lines: Vec<Line>,
    /// Every row's ids, one after the other.
    ids: Vec<u64>,
    /// The line rules' `first` after the chunk (no non-blank line yet).
    first_after: bool,
    /// Where the read stopped at the line cap: the index (in
    /// `Chunk::lines`' walk) of the first line not read.
    rest: Option<usize>,
}

/// Reads the lines of `chunk` into `out`, from the rules' `first` state
/// `first` (the one walk of `Chunk::lines`, so line numbers and bad-line
/// verdicts are the one-thread reader's), skipping the walk's first `skip`
/// lines and stopping after [`MAX_LINES_PER_READ`] (`out.rest` says where).
fn read_chunk(chunk: &Chunk, first: bool, max_line: usize, skip: usize, out: &mut ReadChunk) {
    out.lines.clear();
    out.ids.clear();
    out.rest = None;
    let data = chunk.bufs.data();
    let mut rules = LineRules {
        first,
        ..LineRules::jsonl()
    };
    let mut ids = Vec::new();
    for (k, ChunkLine { no, text, .. }) in chunk.lines(&mut rules, max_line).enumerate() {
        if k < skip {
            continue;
        }
        if out.lines.len() == MAX_LINES_PER_READ {
            out.rest = Some(k);
            return;
        }
        let line = match text {
            Err(e) => Line::Bad(e),
            Ok(None) => continue, // blank
            Ok(Some(text)) => match ReadRow::parse(text, &mut ids) {
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
    let size = chunks::chunk_bytes_or(CHUNK_BYTES);
    let max_line = max_line.max(1);
    let (job_tx, job_rx) = crossbeam_channel::bounded::<Chunk>(workers);
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<Done>();
    let (free_tx, free_rx) = crossbeam_channel::unbounded::<Buffers>();
    let (spare_tx, spare_rx) = crossbeam_channel::unbounded::<ReadChunk>();
    // The pool: every chunk in flight holds one, so memory is bounded. One
    // a worker and one being applied; the reader fills one when a worker's
    // comes back (copying a chunk in is fast next to parsing it). Each more
    // was a chunk's text and its parsed rows at the peak, which is during
    // the read (twice the workers plus two: 107 MB for 256 MB of trace;
    // workers plus two: 100 MB; decision 47 has this one's figures).
    for _ in 0..workers + 1 {
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
                    read_chunk(&chunk, first, max_line, 0, &mut read);
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

/// Applies what a read made of a chunk (`data`), in order.
fn apply(
    read: &mut ReadChunk,
    data: &[u8],
    policy: &mut ErrorPolicy,
    analyzer: &mut Analyzer,
) -> Result<()> {
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
    Ok(())
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
                read_chunk(&chunk, first, max_line, 0, &mut read);
            }
            let data = chunk.bufs.data();
            loop {
                apply(&mut read, data, policy, analyzer)?;
                // A chunk of more lines than a read holds: the rest, here.
                let Some(k) = read.rest else { break };
                read_chunk(&chunk, first, max_line, k, &mut read);
            }
            first = read.first_after;
            bytes += data.len() as u64;
            progress(chunk.line_base + chunk.lines, bytes);
            let _ = free.send(chunk.bufs);
            let _ = spare.send(read);
            next += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chunks `text` is cut into (chunks of `size` bytes).
    fn chunks_of(text: &[u8], size: usize) -> Vec<Chunk> {
        let (free_tx, free_rx) = crossbeam_channel::unbounded();
        for _ in 0..64 {
            free_tx.send(Buffers::default()).unwrap();
        }
        let mut out = Vec::new();
        chunks::read_chunks(text, size, 1 << 20, &free_rx, |c| {
            out.push(c);
            true
        })
        .unwrap();
        out
    }

    #[test]
    fn a_read_holds_at_most_the_line_cap() {
        // Issue 36: 2 MB of `{}` rows were 700,000 parsed lines in one
        // read, 90 MB a chunk in flight.
        let n = 2 * MAX_LINES_PER_READ + 5;
        let text = "{}\n\n".repeat(n);
        let chunks = chunks_of(text.as_bytes(), text.len());
        assert_eq!(chunks.len(), 1);
        let mut read = ReadChunk::default();
        let (mut rows, mut reads, mut skip) = (0, 0, 0);
        loop {
            read_chunk(&chunks[0], true, 1 << 20, skip, &mut read);
            assert!(read.lines.len() <= MAX_LINES_PER_READ);
            assert!(read.lines.capacity() <= 2 * MAX_LINES_PER_READ);
            rows += read.lines.len();
            reads += 1;
            match read.rest {
                Some(k) => skip = k,
                None => break,
            }
        }
        assert_eq!((rows, reads), (n, 3));
        assert!(!read.first_after);
    }

    #[test]
    fn capped_reads_analyze_as_one_thread_does() {
        let mut text = String::new();
        for i in 0..3 * MAX_LINES_PER_READ as u64 {
            // Short rows (13 bytes on average): a chunk of `CHUNK_BYTES`
            // holds more than a read's cap.
            match i % 3 {
                0 => text.push_str(&format!("{{\"timestamp\":{i}}}\n")),
                1 => text.push_str(&format!("{{\"hash_ids\":[{}]}}\n", i % 7)),
                _ => text.push_str("{}\n"),
            }
            if i % 1000 == 0 {
                text.push_str("not json\n");
            }
        }
        assert!(chunks_of(text.as_bytes(), CHUNK_BYTES)
            .iter()
            .any(|c| c.lines > MAX_LINES_PER_READ as u64));
        let opts = <crate::analyze::AnalyzeArgs as clap::Parser>::parse_from(["mc-analyze"]);
        let mut policy = ErrorPolicy::new(crate::jsonl::OnError::Skip);
        let mut analyzer = Analyzer::default();
        let src: Box<dyn Read + Send> = Box::new(std::io::Cursor::new(text.clone().into_bytes()));
        read_into(src, 1 << 20, 2, &mut policy, &mut analyzer, &mut |_, _| {}).unwrap();
        let skipped = policy.skipped().clone();
        let report = analyzer.finish(&opts, &policy);
        assert_eq!(skipped.count, 197);
        assert_eq!(skipped.first_lines[0], 2);
        // The one-thread reader's report.
        let mut policy = ErrorPolicy::new(crate::jsonl::OnError::Skip);
        let mut analyzer = Analyzer::default();
        let mut src = crate::jsonl::LineReader::new(text.as_bytes(), 1 << 20);
        crate::filter::for_each_line(&mut src, &mut policy, |no, bytes, policy| {
            match analyzer.add(no, bytes) {
                Ok(()) => Ok(()),
                Err(e) => policy.record(no, e),
            }
        })
        .unwrap();
        assert_eq!(policy.skipped(), &skipped);
        assert_eq!(analyzer.finish(&opts, &policy), report);
    }
}
