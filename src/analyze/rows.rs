//! The per-row facts the second pass needs, kept compactly: a few numbers
//! per row, and the ids as runs of consecutive values (a Mooncake row is
//! usually a shared prefix and then one run of fresh ids, so two or three
//! runs instead of dozens of ids). A run is two LEB128 varints in one byte
//! stream: its first id as the zigzag distance from where the row's run
//! before it ended, and its length; about 5 bytes a run on the 1 GB
//! generated trace where a (u64, u32) pair took 16 (ARCHITECTURE.md §5).

/// An optional number in 8 bytes, not `Option<f64>`'s 16: a row store of
/// millions of rows holds two of them per row. `None` is one NaN bit
/// pattern no number read from JSON has (a parser makes no NaN, and
/// arithmetic makes the canonical one), compared by bits, so every
/// `Some` round-trips exactly.
#[derive(Debug, Clone, Copy)]
pub struct MaybeF64(u64);

const NONE_BITS: u64 = 0x7ff4_0000_dead_0001;

impl MaybeF64 {
    pub fn get(self) -> Option<f64> {
        (self.0 != NONE_BITS).then(|| f64::from_bits(self.0))
    }
}

impl From<Option<f64>> for MaybeF64 {
    fn from(v: Option<f64>) -> MaybeF64 {
        MaybeF64(v.map_or(NONE_BITS, f64::to_bits))
    }
}

/// The numbers of a row the second pass needs (what the first pass read
/// from it). Its line is not here: lines are the row's index plus the
/// lines skipped before it ([`RowStore::line`]). A `delay` feeds only a
/// summary and goes straight to the session tracker.
#[derive(Debug, Clone, Copy)]
pub struct RowFacts {
    /// `input_length` (0 when missing, as AIPerf counts it).
    pub isl: f64,
    pub osl: f64,
    pub timestamp: MaybeF64,
}

/// One row of the trace, as the analysis remembers it: its facts (reachable
/// as `row.isl` and so on) and how many ids it has. Where its ids are is
/// not kept: rows are read in order, each row's runs after the one
/// before's ([`RowStore::for_each_ids`]); the few readers out of order keep
/// a [`RowAt`] or make [`RowStore::offsets`] (8 bytes a row, while they run).
#[derive(Debug, Clone, Copy)]
pub struct StoredRow {
    /// Kept apart from `first_unseen` and `n_ids`: inside one struct with
    /// them, its padding made a row 48 bytes.
    pub facts: RowFacts,
    /// Index of the first id no earlier row used (AIPerf's hit rate).
    pub first_unseen: u32,
    /// The row's ids; its runs are read until they add up to this many
    /// (every run holds at least one), so their count is not stored.
    pub n_ids: u32,
}

impl std::ops::Deref for StoredRow {
    type Target = RowFacts;
    fn deref(&self) -> &RowFacts {
        &self.facts
    }
}

impl StoredRow {
    pub fn has_ids(&self) -> bool {
        self.n_ids > 0
    }
}

/// A stored row and where its runs start in the store.
#[derive(Debug, Clone, Copy)]
pub struct RowAt {
    pub index: usize,
    runs: u64,
}

#[derive(Default)]
pub struct RowStore {
    pub rows: Vec<StoredRow>,
    /// Every row's runs of consecutive ids, encoded (see the module's doc),
    /// in row order.
    runs: Vec<u8>,
    /// (row index, line) of the first row and of each row whose line is
    /// not the one after its predecessor's (lines skipped between them):
    /// a few entries, where a line per row took 8 bytes a row.
    line_starts: Vec<(usize, u64)>,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint `put_varint` wrote at `*at`, moving `*at` past it.
fn get_varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = bytes[*at];
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}

impl RowStore {
    /// Stores the row read from `line` (above every line pushed before).
    /// `first_unseen` is what the id table found for the row.
    pub fn push(&mut self, line: u64, facts: RowFacts, first_unseen: u32, ids: &[u64]) -> RowAt {
        let row = self.rows.len();
        if self.rows.is_empty() || self.line(row - 1) + 1 != line {
            self.line_starts.push((row, line));
        }
        let start = self.runs.len() as u64;
        // Where the run before ended (the next id it would have held).
        let mut end = 0u64;
        let mut k = 0;
        while k < ids.len() {
            let first = ids[k];
            let len = 1 + ids[k + 1..]
                .iter()
                .zip(1u64..)
                .take_while(|&(&id, d)| id == first.wrapping_add(d))
                .count();
            // Zigzag: a run may start below where the one before ended.
            let delta = first.wrapping_sub(end) as i64;
            put_varint(&mut self.runs, ((delta << 1) ^ (delta >> 63)) as u64);
            put_varint(&mut self.runs, len as u64);
            end = first.wrapping_add(len as u64);
            k += len;
        }
        self.rows.push(StoredRow {
            facts,
            first_unseen,
            n_ids: ids.len() as u32,
        });
        RowAt {
            index: row,
            runs: start,
        }
    }

    /// The line row number `row` was read from.
    pub fn line(&self, row: usize) -> u64 {
        let at = self.line_starts.partition_point(|&(r, _)| r <= row);
        // Row 0 always has an entry, so `at` is at least 1 for a stored row.
        let (first, line) = self.line_starts[at.saturating_sub(1)];
        line + (row - first) as u64
    }

    /// Decodes `n` ids from the runs at `*at` into `out` (cleared first),
    /// moving `*at` past them.
    fn decode(&self, at: &mut usize, n: usize, out: &mut Vec<u64>) {
        out.clear();
        let mut end = 0u64;
        while out.len() < n {
            let z = get_varint(&self.runs, at);
            let delta = ((z >> 1) as i64) ^ -((z & 1) as i64);
            let first = end.wrapping_add(delta as u64);
            let len = get_varint(&self.runs, at);
            out.extend((0..len).map(|k| first.wrapping_add(k)));
            end = first.wrapping_add(len);
        }
    }

    /// The ids of the row at `at`, decoded into `out` (cleared first).
    pub fn ids_at(&self, at: RowAt, out: &mut Vec<u64>) {
        let n = self.rows[at.index].n_ids as usize;
        self.decode(&mut (at.runs as usize), n, out);
    }

    /// Calls `f(index, row, runs)` for every row, in order, with the row's
    /// runs of consecutive ids as (first id, length).
    pub fn for_each_runs(&self, mut f: impl FnMut(usize, &StoredRow, &[(u64, u64)])) {
        let mut runs = Vec::new();
        let mut at = 0;
        for (i, r) in self.rows.iter().enumerate() {
            runs.clear();
            let (mut end, mut left) = (0u64, u64::from(r.n_ids));
            while left > 0 {
                let z = get_varint(&self.runs, &mut at);
                let delta = ((z >> 1) as i64) ^ -((z & 1) as i64);
                let first = end.wrapping_add(delta as u64);
                let len = get_varint(&self.runs, &mut at);
                runs.push((first, len));
                end = first.wrapping_add(len);
                left = left.saturating_sub(len);
            }
            f(i, r, &runs);
        }
    }

    /// Calls `f(index, row, ids)` for every row, in order.
    pub fn for_each_ids(&self, mut f: impl FnMut(usize, &StoredRow, &[u64])) {
        let mut ids = Vec::new();
        let mut at = 0;
        for (i, r) in self.rows.iter().enumerate() {
            self.decode(&mut at, r.n_ids as usize, &mut ids);
            f(i, r, &ids);
        }
    }

    /// Where each row is, for reading rows out of order.
    pub fn offsets(&self) -> Vec<RowAt> {
        let mut out = Vec::with_capacity(self.rows.len());
        let mut at = 0;
        for (index, r) in self.rows.iter().enumerate() {
            out.push(RowAt {
                index,
                runs: at as u64,
            });
            let mut left = u64::from(r.n_ids);
            while left > 0 {
                get_varint(&self.runs, &mut at);
                left = left.saturating_sub(get_varint(&self.runs, &mut at));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> RowFacts {
        RowFacts {
            isl: 0.0,
            osl: 0.0,
            timestamp: None.into(),
        }
    }

    #[test]
    fn ids_round_trip_through_runs() {
        let mut s = RowStore::default();
        let rows: [&[u64]; 6] = [
            &[0, 5, 6, 7, 9],
            &[],
            &[3, 3, 4, 2],
            &[u64::MAX - 1, u64::MAX],
            &[u64::MAX, 0, 1, 1 << 62],
            &[40_000_000, 40_000_001, 7],
        ];
        let at: Vec<RowAt> = rows
            .iter()
            .enumerate()
            .map(|(i, ids)| s.push(i as u64 + 1, facts(), 0, ids))
            .collect();
        // [0] [5,6,7] [9]; none; [3] [3,4] [2]; one run; the run wraps past
        // u64::MAX like the ids it stands for. Small steps take a byte
        // each: 0 (+0, 1), 5 (+4 from 1, 3), 9 (+1 from 8, 1).
        let starts: Vec<u64> = at.iter().map(|r| r.runs).collect();
        assert_eq!(starts[..4], [0, 6, 6, 12]);
        let mut out = Vec::new();
        for (&at, ids) in at.iter().zip(rows) {
            s.ids_at(at, &mut out);
            assert_eq!(out, ids);
        }
        // In order, and found again for reading out of order.
        let mut seen = Vec::new();
        s.for_each_ids(|i, r, ids| {
            assert_eq!(r.n_ids as usize, ids.len());
            seen.push((i, ids.to_vec()));
        });
        let want: Vec<(usize, Vec<u64>)> = rows.iter().map(|r| r.to_vec()).enumerate().collect();
        assert_eq!(seen, want);
        let mut expanded = Vec::new();
        s.for_each_runs(|i, _, runs| {
            let ids = runs
                .iter()
                .flat_map(|&(first, len)| (0..len).map(move |k| first.wrapping_add(k)));
            expanded.push((i, ids.collect::<Vec<_>>()));
        });
        assert_eq!(expanded, want);
        let found: Vec<(usize, u64)> = s.offsets().iter().map(|r| (r.index, r.runs)).collect();
        let pushed: Vec<(usize, u64)> = at.iter().map(|r| (r.index, r.runs)).collect();
        assert_eq!(found, pushed);
    }

    #[test]
    fn optional_numbers_round_trip_in_8_bytes() {
        assert_eq!(std::mem::size_of::<MaybeF64>(), 8);
        for v in [0.0, -0.0, 1.5, f64::MAX, f64::INFINITY, f64::MIN_POSITIVE] {
            let got = MaybeF64::from(Some(v)).get().map(f64::to_bits);
            assert_eq!(got, Some(v.to_bits()));
        }
        // The canonical NaN is a number, not the missing one.
        assert!(MaybeF64::from(Some(f64::NAN)).get().is_some());
        assert_eq!(MaybeF64::from(None).get(), None);
        // A row's facts and its id count: 32 bytes (80, then 40 before).
        assert_eq!(std::mem::size_of::<StoredRow>(), 32);
    }

    #[test]
    fn lines_are_found_across_skipped_ones() {
        let mut s = RowStore::default();
        let lines = [3, 4, 5, 9, 10, 12, 1 << 40, (1 << 40) + 1];
        for line in lines {
            s.push(line, facts(), 0, &[]);
        }
        // The first row and the three after gaps.
        assert_eq!(s.line_starts.len(), 4);
        let got: Vec<u64> = (0..lines.len()).map(|r| s.line(r)).collect();
        assert_eq!(got, lines);
    }
}
