//! The per-row facts the second pass needs, kept compactly: a few numbers
//! per row, and the ids as runs of consecutive values (a Mooncake row is
//! usually a shared prefix and then one run of fresh ids, so two or three
//! runs instead of dozens of ids). A run is two LEB128 varints in one byte
//! stream: its first id as the zigzag distance from where the row's run
//! before it ended, and its length; about 5 bytes a run on the 1 GB
//! generated trace where a (u64, u32) pair took 16 (ARCHITECTURE.md §5).

/// The numbers of a row (what the first pass read from it).
#[derive(Debug, Clone, Copy)]
pub struct RowFacts {
    pub line: u64,
    /// `input_length` (0 when missing, as AIPerf counts it).
    pub isl: f64,
    pub osl: f64,
    pub timestamp: Option<f64>,
    pub delay: Option<f64>,
    /// Index of the first id no earlier row used (AIPerf's hit rate).
    pub first_unseen: u32,
}

/// One row of the trace, as the analysis remembers it: its facts (reachable
/// as `row.isl` and so on) and where its ids are.
#[derive(Debug, Clone, Copy)]
pub struct StoredRow {
    pub facts: RowFacts,
    pub n_ids: u32,
    n_runs: u32,
    /// Offset of the row's first run in `RowStore::runs`.
    runs: u64,
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

#[derive(Default)]
pub struct RowStore {
    pub rows: Vec<StoredRow>,
    /// Every row's runs of consecutive ids, encoded (see the module's doc).
    runs: Vec<u8>,
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
    pub fn push(&mut self, facts: RowFacts, ids: &[u64]) -> usize {
        let start = self.runs.len() as u64;
        let mut n_runs = 0u32;
        // Where the run before ended (the next id it would have held).
        let mut end = 0u64;
        let mut k = 0;
        while k < ids.len() {
            let first = ids[k];
            let mut len = 1;
            while k + len < ids.len() && ids[k + len] == first.wrapping_add(len as u64) {
                len += 1;
            }
            // Zigzag: a run may start below where the one before ended.
            let delta = first.wrapping_sub(end) as i64;
            put_varint(&mut self.runs, ((delta << 1) ^ (delta >> 63)) as u64);
            put_varint(&mut self.runs, len as u64);
            end = first.wrapping_add(len as u64);
            n_runs += 1;
            k += len;
        }
        self.rows.push(StoredRow {
            facts,
            n_ids: ids.len() as u32,
            n_runs,
            runs: start,
        });
        self.rows.len() - 1
    }

    /// The ids of `row`, decoded into `out` (cleared first).
    pub fn ids_into(&self, row: &StoredRow, out: &mut Vec<u64>) {
        out.clear();
        let mut at = row.runs as usize;
        let mut end = 0u64;
        for _ in 0..row.n_runs {
            let z = get_varint(&self.runs, &mut at);
            let delta = ((z >> 1) as i64) ^ -((z & 1) as i64);
            let first = end.wrapping_add(delta as u64);
            let len = get_varint(&self.runs, &mut at);
            out.extend((0..len).map(|k| first.wrapping_add(k)));
            end = first.wrapping_add(len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(line: u64) -> RowFacts {
        RowFacts {
            line,
            isl: 0.0,
            osl: 0.0,
            timestamp: None,
            delay: None,
            first_unseen: 0,
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
        for (i, ids) in rows.iter().enumerate() {
            s.push(facts(i as u64), ids);
        }
        // [0] [5,6,7] [9]; none; [3] [3,4] [2]; one run; the run wraps past
        // u64::MAX like the ids it stands for.
        let runs: Vec<u32> = s.rows.iter().map(|r| r.n_runs).collect();
        assert_eq!(runs, [3, 0, 3, 1, 2, 2]);
        // Small steps take a byte each: 0 (0, 1), 5 (+5, 3), 9 (+1, 1).
        assert_eq!(s.rows[1].runs, 6);
        let mut out = Vec::new();
        for (row, ids) in s.rows.iter().zip(rows) {
            s.ids_into(row, &mut out);
            assert_eq!(out, ids);
        }
    }
}
