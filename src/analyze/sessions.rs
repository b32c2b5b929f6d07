//! Sessions: how many, how many turns, the think time between turns
//! (`delay`), and how much of each later turn's prompt repeats the turn
//! before it (the prefix a cache could reuse within the conversation).

use std::collections::HashMap;

use serde::Serialize;

use super::rows::{RowAt, RowStore};
use crate::stats::Summary;

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Sessions {
    pub sessions: u64,
    pub rows_in_sessions: u64,
    pub rows_without_session: u64,
    pub turns_per_session: Option<Summary>,
    /// `delay` values (ms) over all rows that have one.
    pub delay_ms: Option<Summary>,
    pub later_turns: u64,
    /// Per later turn: tokens of the common prefix with the previous turn / input_length.
    pub repeated_fraction: Option<Summary>,
    /// The same over all later turns, weighted by tokens.
    pub repeated_tokens_fraction: Option<f64>,
}

/// What the first pass gathers about sessions.
#[derive(Default)]
pub struct SessionTracker {
    /// Session id (raw JSON) -> (turns, its last row).
    sessions: HashMap<Box<[u8]>, (u32, RowAt)>,
    rows_without: u64,
    /// (input length, blocks in common with the previous turn) per later
    /// turn.
    later: Vec<(f64, u32)>,
    prev_ids: Vec<u64>,
    /// Every row's `delay`, in file order.
    delays: Vec<f64>,
}

impl SessionTracker {
    /// Row `row` (already stored, with `ids`, input length `isl` and
    /// `delay`) belongs to `session`. Inlined, the rest a call: a row
    /// without a session (most of a generated trace) is a count.
    #[inline]
    pub fn add(
        &mut self,
        rows: &RowStore,
        row: RowAt,
        session: Option<&[u8]>,
        ids_isl: (&[u64], f64),
        delay: Option<f64>,
    ) {
        if let Some(d) = delay {
            self.delays.push(d);
        }
        match session {
            None => self.rows_without += 1,
            Some(key) => self.add_to(rows, row, key, ids_isl),
        }
    }

    fn add_to(&mut self, rows: &RowStore, row: RowAt, key: &[u8], (ids, isl): (&[u64], f64)) {
        match self.sessions.get_mut(key) {
            None => {
                self.sessions.insert(key.into(), (1, row));
            }
            Some((turns, last)) => {
                rows.ids_at(*last, &mut self.prev_ids);
                let common = self
                    .prev_ids
                    .iter()
                    .zip(ids)
                    .take_while(|(a, b)| a == b)
                    .count();
                self.later.push((isl, common as u32));
                *turns += 1;
                *last = row;
            }
        }
    }

    pub fn finish(mut self, block_size: u64) -> Sessions {
        let mut turns: Vec<f64> = self.sessions.values().map(|&(t, _)| f64::from(t)).collect();
        let (mut fractions, mut repeated, mut total) = (Vec::new(), 0.0, 0.0);
        for &(len, common) in &self.later {
            let rep = (f64::from(common) * block_size as f64).min(len).max(0.0);
            if len > 0.0 {
                fractions.push(rep / len);
            }
            repeated += rep;
            total += len.max(0.0);
        }
        Sessions {
            sessions: self.sessions.len() as u64,
            rows_in_sessions: turns.iter().sum::<f64>() as u64,
            rows_without_session: self.rows_without,
            turns_per_session: Summary::of(&mut turns),
            delay_ms: Summary::of(&mut self.delays),
            later_turns: self.later.len() as u64,
            repeated_fraction: Summary::of(&mut fractions),
            repeated_tokens_fraction: (total > 0.0).then(|| repeated / total),
        }
    }
}
