//! The per-row facts the second pass needs, kept compactly: a few numbers
//! per row, and the ids as runs of consecutive values (a Mooncake row is
//! usually a shared prefix and then one run of fresh ids, so two or three
//! runs instead of dozens of ids).

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
    runs: u32,
    n_runs: u32,
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
    /// (first id, length) of each run of consecutive ids.
    runs: Vec<(u64, u32)>,
}

impl RowStore {
    pub fn push(&mut self, facts: RowFacts, ids: &[u64]) -> usize {
        let start = self.runs.len();
        for &id in ids {
            // Extend the row's last run when `id` follows it (never a run of
            // an earlier row).
            let own = self.runs.len() > start;
            match self.runs.last_mut() {
                Some((first, len))
                    if own && first.wrapping_add(u64::from(*len)) == id && *len < u32::MAX =>
                {
                    *len += 1
                }
                _ => self.runs.push((id, 1)),
            }
        }
        self.rows.push(StoredRow {
            facts,
            n_ids: ids.len() as u32,
            runs: start as u32,
            n_runs: (self.runs.len() - start) as u32,
        });
        self.rows.len() - 1
    }

    /// The ids of `row`, decoded into `out` (cleared first).
    pub fn ids_into(&self, row: &StoredRow, out: &mut Vec<u64>) {
        out.clear();
        let runs = &self.runs[row.runs as usize..(row.runs + row.n_runs) as usize];
        for &(first, len) in runs {
            out.extend((0..u64::from(len)).map(|k| first + k));
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
        let rows: [&[u64]; 4] = [
            &[0, 5, 6, 7, 9],
            &[],
            &[3, 3, 4, 2],
            &[u64::MAX - 1, u64::MAX],
        ];
        for (i, ids) in rows.iter().enumerate() {
            s.push(facts(i as u64), ids);
        }
        // [0] [5,6,7] [9]; none; [3] [3,4] [2]; one run.
        assert_eq!(s.runs.len(), 3 + 3 + 1);
        let mut out = Vec::new();
        for (row, ids) in s.rows.iter().zip(rows) {
            s.ids_into(row, &mut out);
            assert_eq!(out, ids);
        }
    }
}
