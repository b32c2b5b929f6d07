//! `mc-merge interleave --sort`: one input's rows (already rewritten) in
//! timestamp order, by an external merge sort. Rows are gathered into a run
//! of at most `run_bytes`; a full run is sorted (stable) and written to an
//! unlinked temporary file (`spill`); at the end the runs are merged k ways,
//! equal keys going to the earlier run. Runs hold consecutive rows in file
//! order, so the result is exactly the stable sort of the whole file. An
//! input that fits in one run never touches the disk.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, Write};

use crate::error::Result;
use crate::record::Number;
use crate::spill;

/// The default run size: rows held in memory before they are sorted and
/// written to a temporary file (the `--sort-run-bytes` default).
pub const DEFAULT_RUN_BYTES: usize = 64 << 20;

/// One row: its merge key, its written timestamp and its bytes.
pub struct Row {
    pub key: f64,
    pub timestamp: Option<Number>,
    pub bytes: Vec<u8>,
}

/// One run in memory: rows packed in one arena.
#[derive(Default)]
struct Run {
    arena: Vec<u8>,
    rows: Vec<Held>,
}

struct Held {
    key: f64,
    timestamp: Option<Number>,
    start: usize,
    end: usize,
}

impl Run {
    fn bytes(&self) -> usize {
        self.arena.len() + self.rows.len() * std::mem::size_of::<Held>()
    }

    fn sort(&mut self) {
        // Stable: equal keys keep file order.
        self.rows.sort_by(|a, b| a.key.total_cmp(&b.key));
    }
}

/// Gathers rows, spilling sorted runs when the memory budget is reached.
pub struct Sorter {
    run_bytes: usize,
    run: Run,
    spilled: Vec<File>,
}

impl Sorter {
    pub fn new(run_bytes: usize) -> Sorter {
        Sorter {
            run_bytes: run_bytes.max(1),
            run: Run::default(),
            spilled: Vec::new(),
        }
    }

    /// Adds the next row in file order.
    pub fn push(&mut self, key: f64, timestamp: Option<Number>, bytes: &[u8]) -> Result<()> {
        let start = self.run.arena.len();
        self.run.arena.extend_from_slice(bytes);
        self.run.rows.push(Held {
            key,
            timestamp,
            start,
            end: self.run.arena.len(),
        });
        if self.run.bytes() >= self.run_bytes {
            self.spill()?;
        }
        Ok(())
    }

    /// Runs written to disk so far.
    pub fn runs(&self) -> usize {
        self.spilled.len()
    }

    /// Sorts the run in memory and writes it to a temporary file.
    fn spill(&mut self) -> Result<()> {
        let mut run = std::mem::take(&mut self.run);
        run.sort();
        let mut file = spill::temp_file()?;
        let mut w = BufWriter::with_capacity(1 << 20, &mut file);
        for r in &run.rows {
            write_row(&mut w, r.key, r.timestamp, &run.arena[r.start..r.end])
                .map_err(spill::io_error)?;
        }
        w.flush().map_err(spill::io_error)?;
        drop(w);
        file.rewind().map_err(spill::io_error)?;
        self.spilled.push(file);
        Ok(())
    }

    /// The rows in order.
    pub fn finish(mut self) -> Result<Sorted> {
        if self.spilled.is_empty() {
            self.run.sort();
            return Ok(Sorted(Inner::Memory {
                run: self.run,
                next: 0,
            }));
        }
        if !self.run.rows.is_empty() {
            self.spill()?;
        }
        let mut runs = Vec::with_capacity(self.spilled.len());
        let mut heap = BinaryHeap::with_capacity(self.spilled.len());
        for (i, f) in self.spilled.into_iter().enumerate() {
            let mut r = RunReader {
                src: BufReader::with_capacity(64 << 10, f),
                head: None,
            };
            r.advance()?;
            if let Some(h) = &r.head {
                heap.push(Reverse(Next(h.key, i)));
            }
            runs.push(r);
        }
        Ok(Sorted(Inner::Disk { runs, heap }))
    }
}

/// The merge key and run of a run's head; earlier runs first on equal keys.
struct Next(f64, usize);

impl Ord for Next {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0).then(self.1.cmp(&o.1))
    }
}
impl PartialOrd for Next {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl PartialEq for Next {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Next {}

struct RunReader {
    src: BufReader<File>,
    head: Option<Row>,
}

impl RunReader {
    fn advance(&mut self) -> Result<()> {
        self.head = read_row(&mut self.src).map_err(spill::io_error)?;
        Ok(())
    }
}

/// The rows of one input in timestamp order.
pub struct Sorted(Inner);

enum Inner {
    Memory {
        run: Run,
        next: usize,
    },
    Disk {
        runs: Vec<RunReader>,
        heap: BinaryHeap<Reverse<Next>>,
    },
}

impl Sorted {
    /// Moves the next row into `row_bytes`; its key and timestamp, or
    /// `None` at the end.
    pub fn next(&mut self, row_bytes: &mut Vec<u8>) -> Result<Option<(f64, Option<Number>)>> {
        row_bytes.clear();
        match &mut self.0 {
            Inner::Memory { run, next } => {
                let Some(r) = run.rows.get(*next) else {
                    return Ok(None);
                };
                *next += 1;
                row_bytes.extend_from_slice(&run.arena[r.start..r.end]);
                Ok(Some((r.key, r.timestamp)))
            }
            Inner::Disk { runs, heap } => {
                let Some(Reverse(Next(_, i))) = heap.pop() else {
                    return Ok(None);
                };
                let run = &mut runs[i];
                let Some(row) = run.head.take() else {
                    return Ok(None);
                };
                row_bytes.extend_from_slice(&row.bytes);
                run.advance()?;
                if let Some(h) = &run.head {
                    heap.push(Reverse(Next(h.key, i)));
                }
                Ok(Some((row.key, row.timestamp)))
            }
        }
    }
}

// A spilled row: key (f64 bits), timestamp tag (0 none, 1 Int, 2 UInt,
// 3 Float) and its 8 bytes, the row's length (u64) and bytes; little-endian.
fn write_row(w: &mut impl Write, key: f64, t: Option<Number>, bytes: &[u8]) -> std::io::Result<()> {
    w.write_all(&key.to_bits().to_le_bytes())?;
    let (tag, v) = match t {
        None => (0u8, 0u64),
        Some(Number::Int(i)) => (1, i as u64),
        Some(Number::UInt(u)) => (2, u),
        Some(Number::Float(f)) => (3, f.to_bits()),
    };
    w.write_all(&[tag])?;
    w.write_all(&v.to_le_bytes())?;
    w.write_all(&(bytes.len() as u64).to_le_bytes())?;
    w.write_all(bytes)
}

fn read_row(r: &mut impl Read) -> std::io::Result<Option<Row>> {
    let mut head = [0u8; 25];
    match r.read_exact(&mut head[..8]) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    r.read_exact(&mut head[8..])?;
    let word = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().unwrap_or([0; 8]));
    let key = f64::from_bits(word(0));
    let v = word(9);
    // The bit pattern is the one written above: `i as u64` back to i64.
    let timestamp = match head[8] {
        1 => Some(Number::Int(v as i64)),
        2 => Some(Number::UInt(v)),
        3 => Some(Number::Float(f64::from_bits(v))),
        _ => None,
    };
    let mut bytes = vec![0; word(17) as usize];
    r.read_exact(&mut bytes)?;
    Ok(Some(Row {
        key,
        timestamp,
        bytes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(mut s: Sorted) -> Vec<(f64, String)> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        while let Some((k, _)) = s.next(&mut buf).unwrap() {
            out.push((k, String::from_utf8(buf.clone()).unwrap()));
        }
        out
    }

    #[test]
    fn spilled_runs_merge_to_the_stable_sort() {
        // Keys with many ties, rows named by their file position.
        let keys: Vec<f64> = (0..200).map(|i| ((i * 37) % 11) as f64).collect();
        let mut expected: Vec<(f64, String)> = keys
            .iter()
            .enumerate()
            .map(|(i, &k)| (k, format!("row{i}")))
            .collect();
        expected.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Tiny runs (a few rows each) and one run for everything.
        for run_bytes in [1, 100, 1 << 20] {
            let mut s = Sorter::new(run_bytes);
            for (i, &k) in keys.iter().enumerate() {
                s.push(k, Some(Number::Int(k as i64)), format!("row{i}").as_bytes())
                    .unwrap();
            }
            let spilled = s.spilled.len();
            assert_eq!(spilled > 1, run_bytes < 1 << 20, "run_bytes {run_bytes}");
            assert_eq!(
                drain(s.finish().unwrap()),
                expected,
                "run_bytes {run_bytes}"
            );
        }
    }

    #[test]
    fn timestamps_survive_the_disk() {
        let mut s = Sorter::new(1);
        let ts = [
            Some(Number::Int(-3)),
            Some(Number::UInt(u64::MAX)),
            Some(Number::Float(2.5)),
            None,
        ];
        for (i, t) in ts.iter().enumerate() {
            s.push(i as f64, *t, b"x").unwrap();
        }
        let mut sorted = s.finish().unwrap();
        let mut buf = Vec::new();
        for t in ts {
            let (_, got) = sorted.next(&mut buf).unwrap().unwrap();
            assert_eq!(format!("{got:?}"), format!("{t:?}"));
            assert_eq!(buf, b"x");
        }
        assert!(sorted.next(&mut buf).unwrap().is_none());
    }
}
