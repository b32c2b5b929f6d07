//! The inputs of mc-merge: opening each file (stdin held in memory when it
//! must be read more than once), the look-ahead passes (row counts for
//! `--weights`, the earliest arrival for concat), and the row stream of one
//! file with its next row rewritten and ready to write.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::chunks::{self, Chunk, ChunkLine};
use crate::error::{Error, Result};
use crate::jsonl::{self, ErrorPolicy, LineReader, LineRules, OnError};
use crate::progress::Progress;
use crate::record::{Number, Record};

use super::ahead::{Ahead, BatchRow, Ended};
use super::reading::in_file;
use super::reading::Reading;
use super::rewrite::Rewriter;
use super::sorted::{Sorted, Sorter};

/// Where one input's bytes come from.
enum Bytes {
    File(PathBuf),
    Stdin,
    /// stdin read whole, for a tool that reads this input more than once.
    Held(Arc<Vec<u8>>),
}

/// One input file, by the name its messages use.
pub struct Input {
    pub name: String,
    bytes: Bytes,
    max_line: usize,
}

/// The held bytes as a reader's source.
struct Shared(Arc<Vec<u8>>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Input {
    /// `-` is stdin. The file is opened once here, so a missing file stops
    /// the run before anything is written.
    pub fn new(path: &std::path::Path, max_line: usize) -> Result<Self> {
        if path == std::path::Path::new("-") {
            return Ok(Input {
                name: "stdin".into(),
                bytes: Bytes::Stdin,
                max_line,
            });
        }
        drop(jsonl::open_input(Some(path))?);
        Ok(Input {
            name: path.display().to_string(),
            bytes: Bytes::File(path.to_path_buf()),
            max_line,
        })
    }

    /// Reads stdin into memory, so it can be read again. Files are not held:
    /// they are opened again for each pass.
    pub fn hold(&mut self) -> Result<()> {
        if let Bytes::Stdin = self.bytes {
            let mut all = Vec::new();
            std::io::stdin().lock().read_to_end(&mut all)?;
            self.bytes = Bytes::Held(Arc::new(all));
        }
        Ok(())
    }

    /// The input's bytes from the start.
    fn bytes(&self) -> Result<Box<dyn Read + Send>> {
        Ok(match &self.bytes {
            Bytes::File(p) => jsonl::open_input_send(Some(p))?,
            Bytes::Stdin => jsonl::open_input_send(None)?,
            Bytes::Held(b) => Box::new(std::io::Cursor::new(Shared(Arc::clone(b)))),
        })
    }

    /// A reader from the start of the input.
    pub fn lines(&self) -> Result<LineReader<Box<dyn Read + Send>>> {
        Ok(LineReader::new(self.bytes()?, self.max_line))
    }

    /// Names this file in a message about one of its lines.
    pub fn err(&self, e: Error) -> Error {
        in_file(&self.name, e)
    }

    /// Records in the input (non-blank lines; bad ones count too, they are
    /// reported by the pass that writes).
    pub fn count_rows(&self) -> Result<u64> {
        let mut reader = self.lines()?;
        let mut n = 0;
        loop {
            match reader.next_line() {
                Ok(Some(_)) => n += 1,
                Ok(None) => return Ok(n),
                Err(e @ Error::Data { .. }) => drop(e),
                Err(e) => return Err(self.err(e)),
            }
        }
    }

    /// [`Input::earliest`] on `workers` threads: the input cut into chunks
    /// (`chunks::in_order_chunks`), each chunk's earliest found by a
    /// worker, the chunks' taken in input order here (so the error that
    /// stops the pass is the first in the file, as in order).
    pub fn earliest_chunked(&self, rw: &Rewriter, workers: usize) -> Result<Option<f64>> {
        let max_line = self.max_line.max(1);
        let mut min: Option<f64> = None;
        // No non-blank line seen yet before the next chunk: a worker
        // guesses it from the chunk's place (only the first chunk starts
        // the file), this thread makes a chunk again when it guessed wrong.
        let mut first = true;
        let (result, _) = chunks::in_order_chunks(
            self.bytes()?,
            chunks::chunk_bytes(),
            0,
            max_line,
            vec![(); workers.max(1)],
            |c: &Chunk| c.seq == 0,
            |(): &mut (), chunk: &Chunk, &first: &bool, _: &mut Vec<u8>| {
                earliest_in(chunk, first, max_line, rw)
            },
            |chunk, guessed, mut found| {
                if guessed != first {
                    found = earliest_in(chunk, first, max_line, rw);
                }
                first = found.first_after;
                if let Some(e) = found.stop {
                    return Err(e);
                }
                if let Some(t) = found.min {
                    min = Some(min.map_or(t, |m: f64| m.min(t)));
                }
                Ok(())
            },
        );
        result.map_err(|e| self.err(e))?;
        Ok(min)
    }

    /// The earliest timestamp of the rows `rw` keeps, after its
    /// `--scale-rate`. Bad lines are passed over here: the pass that
    /// writes reports them where they are.
    pub fn earliest(&self, rw: &Rewriter) -> Result<Option<f64>> {
        let mut reader = self.lines()?;
        let mut min: Option<f64> = None;
        loop {
            let line = match reader.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => return Ok(min),
                Err(Error::Data { .. }) => continue,
                Err(e) => return Err(self.err(e)),
            };
            let Ok(rec) = Record::parse(line.bytes) else {
                continue;
            };
            if let (Ok(true), Ok(Some(t))) = (rw.keeps(&rec, line.no), rw.scaled_time(&rec)) {
                let t = t.as_f64();
                min = Some(min.map_or(t, |m| m.min(t)));
            }
        }
    }
}

/// What one chunk says of the earliest arrival ([`Input::earliest_chunked`]).
struct ChunkEarliest {
    min: Option<f64>,
    /// The line rules' `first` after the chunk.
    first_after: bool,
    /// A line that stops the pass (one that is not a bad record: the input
    /// is not JSONL).
    stop: Option<Error>,
}

/// [`Input::earliest`]'s rule over the lines of one chunk, `first` saying
/// whether a non-blank line came before it.
fn earliest_in(chunk: &Chunk, first: bool, max_line: usize, rw: &Rewriter) -> ChunkEarliest {
    let mut rules = LineRules {
        first,
        ..LineRules::jsonl()
    };
    let mut min: Option<f64> = None;
    let mut stop = None;
    for ChunkLine { no, text, .. } in chunk.lines(&mut rules, max_line) {
        let line = match text {
            Ok(Some(l)) => l,
            Ok(None) | Err(Error::Data { .. }) => continue,
            Err(e) => {
                stop = Some(e);
                break;
            }
        };
        let Ok(rec) = Record::parse(line) else {
            continue;
        };
        if let (Ok(true), Ok(Some(t))) = (rw.keeps(&rec, no), rw.scaled_time(&rec)) {
            let t = t.as_f64();
            min = Some(min.map_or(t, |m| m.min(t)));
        }
    }
    ChunkEarliest {
        min,
        first_after: rules.first,
        stop,
    }
}

/// The rows of one file, in file order or sorted.
enum Rows {
    /// Read and rewritten on this thread.
    Stream(Box<Reading>),
    /// Read and rewritten on a thread of their own, a batch ahead.
    Ahead(Ahead),
    /// `--sort`: every row rewritten, in timestamp order (`sorted`).
    Sorted(Sorted),
    /// The end of the rows.
    Done,
}

/// One input being merged: its next row, rewritten, waits in `pending`
/// (or, read ahead, in its batch): [`Source::row`].
pub struct Source {
    pub name: String,
    rows: Rows,
    /// The reading state while on this thread, and after the end of the
    /// file (a read-ahead thread hands it back with its last batch).
    reading: Option<Box<Reading>>,
    /// The next row as it will be written, with its `\n` (so it goes out
    /// without a copy into the output's buffer under `--line-buffered`),
    /// unless it waits in a read-ahead batch.
    pending: Vec<u8>,
    /// Its written timestamp, if it has one.
    pub timestamp: Option<Number>,
    /// Its merge key: its timestamp, or for a row without one, the key of
    /// the row before it (so a turn that carries only a `delay` stays right
    /// behind its predecessor); before any timestamp, -inf.
    pub key: f64,
}

impl Source {
    /// The rows of `input` under `rw`. With `ahead`, a thread of its own
    /// reads and rewrites them a batch ahead (`ahead`); otherwise this
    /// thread does, row by row.
    pub fn new(
        input: &Input,
        rw: Rewriter,
        on_error: OnError,
        check_sorted: bool,
        ahead: bool,
    ) -> Result<Self> {
        let reading = Box::new(Reading {
            name: input.name.clone(),
            reader: input.lines()?,
            rw,
            policy: ErrorPolicy::new(on_error),
            key: f64::NEG_INFINITY,
            check_sorted,
            key_line: 0,
            rows_read: 0,
            dropped: 0,
        });
        let (rows, reading) = if ahead {
            (
                Rows::Ahead(Ahead::start(reading, on_error, super::cpus())),
                None,
            )
        } else {
            (Rows::Stream(reading), None)
        };
        Ok(Source {
            name: input.name.clone(),
            rows,
            reading,
            pending: Vec::new(),
            timestamp: None,
            key: f64::NEG_INFINITY,
        })
    }

    /// Reads the whole file, rewritten, and sorts it by timestamp (stable:
    /// equal times keep file order). Memory: one run of `run_bytes`; the
    /// runs before it wait sorted in temporary files (`sorted`).
    pub fn sort(&mut self, run_bytes: usize, tool: &'static str) -> Result<()> {
        let mut sorter = Sorter::new(run_bytes);
        // Quiet for a short sort: the first plain line comes after 5 s.
        let mut progress = Progress::for_stderr(tool, Duration::from_secs(5));
        let mut n = 0u64;
        while self.advance()? {
            sorter.push(self.key, self.timestamp, self.row())?;
            n += 1;
            if n.is_multiple_of(4096) {
                let runs = sorter.runs();
                progress.tick(|| format!("sorting {}: {n} rows, {runs} runs on disk", self.name));
            }
        }
        progress.finish();
        self.rows = Rows::Sorted(sorter.finish()?);
        Ok(())
    }

    /// Moves to the next row kept; false at the end of the file.
    pub fn advance(&mut self) -> Result<bool> {
        self.pending.clear();
        let next = match &mut self.rows {
            Rows::Done => return Ok(false),
            Rows::Sorted(sorted) => {
                let Some((key, timestamp)) = sorted.next(&mut self.pending)? else {
                    return Ok(false);
                };
                self.pending.push(b'\n');
                self.timestamp = timestamp;
                self.key = key;
                return Ok(true);
            }
            Rows::Stream(reading) => reading
                .next(&mut self.pending)
                .map(|t| t.map(|t| (reading.key(), t))),
            Rows::Ahead(ahead) => match ahead.advance() {
                Ok(next) => next.map(Some),
                Err(Ended { result, reading }) => {
                    self.reading = Some(reading);
                    self.rows = Rows::Done;
                    result.map(|()| None)
                }
            },
        };
        match next? {
            Some((key, timestamp)) => {
                if let Rows::Stream(_) = self.rows {
                    self.pending.push(b'\n');
                }
                self.key = key;
                self.timestamp = timestamp;
                Ok(true)
            }
            None => {
                if let Rows::Stream(_) = self.rows {
                    if let Rows::Stream(r) = std::mem::replace(&mut self.rows, Rows::Done) {
                        self.reading = Some(r);
                    }
                }
                Ok(false)
            }
        }
    }

    /// The row [`Source::advance`] moved to, as it will be written
    /// (without its `\n`).
    #[inline]
    pub fn row(&self) -> &[u8] {
        match &self.rows {
            Rows::Ahead(ahead) => ahead.row(),
            _ => self.pending.split_last().map_or(&[], |(_, row)| row),
        }
    }

    /// [`Source::row`] with its `\n`.
    #[inline]
    pub fn line(&self) -> &[u8] {
        match &self.rows {
            Rows::Ahead(ahead) => ahead.line(),
            _ => &self.pending,
        }
    }

    /// The row [`Source::advance`] moved to, and the rows after it that
    /// `goes_first` says of their keys go out first, as one slice with
    /// their `\n`s when they wait together in a read-ahead batch
    /// ([`Ahead::span`]); the rows taken after the current one. Read in
    /// order or sorted, the span is the current row alone (`None`: write
    /// [`Source::row`]). The next [`Source::advance`] moves past them.
    #[inline]
    pub fn span(&mut self, goes_first: impl FnMut(f64) -> bool) -> Option<(&[u8], &[BatchRow])> {
        match &mut self.rows {
            Rows::Ahead(ahead) => Some(ahead.span(goes_first)),
            _ => None,
        }
    }

    /// Records read and those `--weights` dropped (after the end of the
    /// file; 0 before).
    pub fn counts(&self) -> (u64, u64) {
        self.reading
            .as_ref()
            .map_or((0, 0), |r| (r.rows_read, r.dropped))
    }

    /// The `--on-error skip` notice for this file, if it skipped anything.
    pub fn skipped(&self) -> Option<String> {
        let policy = &self.reading.as_ref()?.policy;
        policy.summary().map(|s| format!("{}: {s}", self.name))
    }
}
