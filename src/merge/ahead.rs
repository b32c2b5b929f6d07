//! Reading one input of the merge a batch ahead, on a thread of its own:
//! the thread parses and rewrites rows (the merge's cost per row) into
//! batches of about the chunk size of `chunks` (2 MB; `MCTRACE_CHUNK_BYTES`
//! makes it small in tests), while the merging thread takes rows
//! from the batch before (ARCHITECTURE.md §5, "merge read-ahead"). Two
//! batches are in flight per input and their buffers come back to be
//! reused, so memory stays a few MB whatever the input.
//!
//! Everything the rows' order depends on stays in the file's order: the
//! thread owns the file's [`Reading`] (its sort check, `--on-error` policy
//! and counts) and hands it back with the last batch, after the rows read
//! before the end or the error that stopped it.

use crossbeam_channel::{Receiver, Sender};

use super::reading::Reading;
use crate::chunks;
use crate::error::{Error, Result};
use crate::record::Number;

/// Rewritten rows, back to back.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    /// (end of the row in `bytes`, its key, its written timestamp).
    rows: Vec<(usize, f64, Option<Number>)>,
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
    /// The current row's bytes in `batch`.
    row: std::ops::Range<usize>,
}

impl Ahead {
    /// Starts the thread that reads `reading`.
    pub fn start(reading: Box<Reading>) -> Ahead {
        let (full_tx, full) = crossbeam_channel::bounded::<Batch>(1);
        let (free, free_rx) = crossbeam_channel::unbounded::<Batch>();
        let _ = free.send(Batch::default());
        // Detached: it ends at the end of the file, or when this end is
        // dropped (a send fails).
        let size = chunks::chunk_bytes();
        std::thread::spawn(move || read_ahead(reading, size, &full_tx, &free_rx));
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
                self.row = self.from..end;
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
    pub fn row(&self) -> &[u8] {
        &self.batch.bytes[self.row.clone()]
    }
}

/// The thread: batches of rows until the end of the file or an error.
fn read_ahead(
    mut reading: Box<Reading>,
    size: usize,
    full: &Sender<Batch>,
    free: &Receiver<Batch>,
) {
    // One batch is being filled here, one waits in `full` and one is being
    // read: the third is made on the first turn.
    let mut spare = Some(Batch::default());
    loop {
        let mut batch = match free.try_recv() {
            Ok(b) => b,
            Err(_) => match spare.take() {
                Some(b) => b,
                None => match free.recv() {
                    Ok(b) => b,
                    Err(_) => return, // the merge stopped
                },
            },
        };
        batch.bytes.clear();
        batch.rows.clear();
        let mut end = None;
        while batch.bytes.len() < size {
            match reading.next(&mut batch.bytes) {
                Ok(Some(timestamp)) => {
                    let row = (batch.bytes.len(), reading.key(), timestamp);
                    batch.rows.push(row);
                }
                Ok(None) => {
                    end = Some(Ok(()));
                    break;
                }
                Err(e) => {
                    end = Some(Err(e));
                    break;
                }
            }
        }
        if let Some(result) = end {
            batch.end = Some((result, reading));
            let _ = full.send(batch);
            return;
        }
        if full.send(batch).is_err() {
            return; // the merge stopped
        }
    }
}
