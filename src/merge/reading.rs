//! One input of the merge read in order: each line rewritten by the
//! file's `Rewriter`, the interleave's sort check, the `--on-error` policy
//! and the counts. It runs on the merging thread (`input::Source`) or on a
//! read-ahead thread (`ahead`), which hands it back at the end.

use std::io::Read;

use super::rewrite::Rewriter;
use crate::error::{Error, Result};
use crate::jsonl::{ErrorPolicy, LineReader};
use crate::record::Number;

/// Puts the file's name in front of a message about its data.
pub fn in_file(name: &str, e: Error) -> Error {
    match e {
        Error::Data { .. } | Error::Input(_) => Error::Input(format!("{name}: {e}")),
        e => e,
    }
}

/// One file read in order: each row rewritten, the sort check, the
/// `--on-error` policy and the counts. It runs on this thread, or on a
/// read-ahead thread that hands it back at the end of the file.
pub struct Reading {
    pub name: String,
    pub reader: LineReader<Box<dyn Read + Send>>,
    pub rw: Rewriter,
    pub policy: ErrorPolicy,
    /// The key of the last row kept (see [`Reading::key`]).
    pub key: f64,
    /// Refuse rows whose key goes back (interleave without `--sort`).
    pub check_sorted: bool,
    /// Line of the last row with a timestamp, for the unsorted message.
    pub key_line: u64,
    /// Records read, and those `--weights` dropped.
    pub rows_read: u64,
    pub dropped: u64,
}

impl Reading {
    /// Appends the next row kept, rewritten, to `out`; returns its written
    /// timestamp (and the key in `self.key`), or `None` at the end.
    pub fn next(&mut self, out: &mut Vec<u8>) -> Result<Option<Option<Number>>> {
        loop {
            let line = match self.reader.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => return Ok(None),
                Err(e) => {
                    self.policy.handle(e).map_err(|e| in_file(&self.name, e))?;
                    continue;
                }
            };
            let no = line.no;
            let mark = out.len();
            match self.rw.row(line.bytes, no, out) {
                Ok(Some(kept)) => {
                    self.kept(no, kept.timestamp)?;
                    return Ok(Some(kept.timestamp));
                }
                Ok(None) => {
                    out.truncate(mark);
                    self.dropped();
                }
                Err(e) => {
                    out.truncate(mark);
                    self.policy
                        .record(no, e)
                        .map_err(|e| in_file(&self.name, e))?
                }
            }
        }
    }

    /// Takes a row kept (line `no`, written timestamp `timestamp`) in file
    /// order: counts it, sets the key and checks the order. The one place
    /// of these rules, for rows rewritten here ([`Reading::next`]) and on
    /// the chunked read-ahead's workers (`ahead`).
    pub fn kept(&mut self, no: u64, timestamp: Option<Number>) -> Result<()> {
        self.rows_read += 1;
        let key = timestamp.map_or(self.key, Number::as_f64);
        if self.check_sorted && key < self.key {
            return Err(Error::Input(format!(
                "{}: line {no}: timestamp {key} is earlier than {} on line {}: \
                 interleave reads each input in timestamp order; pass --sort to \
                 sort the inputs first",
                self.name, self.key, self.key_line
            )));
        }
        if timestamp.is_some() {
            self.key_line = no;
        }
        self.key = key;
        Ok(())
    }

    /// Counts a row `--weights` dropped.
    pub fn dropped(&mut self) {
        self.rows_read += 1;
        self.dropped += 1;
    }

    /// The key of the last row kept.
    pub fn key(&self) -> f64 {
        self.key
    }
}
