//! `mc-scale --sample-sessions F` / `--sample-rows F`: a seeded fraction
//! of a trace, sessions kept whole.
//!
//! A session is kept or dropped by a seeded hash of its `session_id`, so
//! the decision needs no state (every chunk on any thread decides alone)
//! and the same session is kept in every shard or file sampled with the
//! same seed. A row without a `session_id` is drawn on its own, by its
//! index, with `--sample-rows`; agent-graph calls without one are one
//! session among themselves (as Dynamo reads them) and drawn once.
//! The summary counts distinct sessions, so it holds a set of 8-byte
//! session hashes (memory O(sessions)); the rows themselves stream.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use crate::error::RecordError;
use crate::filter::{Ctx, Emit, Step};
use crate::hash::{stable_hash, unit, GOLDEN_GAMMA};
use crate::record::{Field, Record};

/// The fractions and the seed, checked by clap (each in [0, 1]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplePlan {
    /// Fraction of sessions kept.
    pub sessions: f64,
    /// Fraction of rows without a `session_id` kept.
    pub rows: f64,
    pub seed: u64,
}

impl SamplePlan {
    /// From the options: `--sample-sessions` alone draws session-less
    /// rows (each a session of its own) at the same rate; `--sample-rows`
    /// alone keeps every session.
    pub fn new(sessions: Option<f64>, rows: Option<f64>, seed: u64) -> SamplePlan {
        SamplePlan {
            sessions: sessions.unwrap_or(1.0),
            rows: rows.or(sessions).unwrap_or(1.0),
            seed,
        }
    }

    /// The draw of session `raw` (its JSON text): kept when under the fraction.
    pub fn session_draw(&self, raw: &[u8]) -> u64 {
        stable_hash(self.seed, raw)
    }

    fn keeps_session(&self, h: u64) -> bool {
        unit(h) < self.sessions
    }

    /// The draw of the session-less row with index `row`.
    fn row_draw(&self, row: u64) -> u64 {
        stable_hash(self.seed ^ GOLDEN_GAMMA, &row.to_le_bytes())
    }
}

/// The summary's counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SampleCounts {
    pub rows: u64,
    pub rows_kept: u64,
    /// Rows without a `session_id`, and those kept.
    pub loose: u64,
    pub loose_kept: u64,
    /// input_length + output_length, read and kept.
    pub tokens: u64,
    pub tokens_kept: u64,
}

/// A session hash is already spread over 64 bits: the set hashes nothing.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type Sessions = HashSet<u64, BuildHasherDefault<Identity>>;

/// The sampling step.
pub struct SampleStep {
    pub plan: SamplePlan,
    pub counts: SampleCounts,
    /// Session draws met (their hashes), for the session counts.
    sessions: Sessions,
}

impl SampleStep {
    pub fn new(plan: SamplePlan) -> Self {
        SampleStep {
            plan,
            counts: SampleCounts::default(),
            sessions: Sessions::default(),
        }
    }

    /// Distinct sessions met, and those kept.
    pub fn sessions(&self) -> (u64, u64) {
        let kept = self
            .sessions
            .iter()
            .filter(|&&h| self.plan.keeps_session(h))
            .count();
        (self.sessions.len() as u64, kept as u64)
    }

    /// The summary line's text.
    pub fn note(&self) -> String {
        let c = &self.counts;
        let (sessions, kept) = self.sessions();
        let pct = |a: u64, b: u64| {
            if b == 0 {
                0.0
            } else {
                100.0 * a as f64 / b as f64
            }
        };
        let mut s = format!(
            "kept {kept} of {sessions} sessions ({:.2}%), {} of {} rows ({:.2}%), \
             {:.2}% of tokens ({} of {} input+output)",
            pct(kept, sessions),
            c.rows_kept,
            c.rows,
            pct(c.rows_kept, c.rows),
            pct(c.tokens_kept, c.tokens),
            c.tokens_kept,
            c.tokens
        );
        if c.loose > 0 {
            s.push_str(&format!(
                "; rows without a session_id: {} of {}",
                c.loose_kept, c.loose
            ));
        }
        s
    }

    /// Whether the row is kept; `None` when its draw needs its true index
    /// (a chunk worker only guesses it).
    fn keeps(&mut self, rec: &Record<'_>, cx: &Ctx) -> Result<Option<bool>, RecordError> {
        Ok(Some(match rec.session_id()? {
            Some(raw) => {
                let h = self.plan.session_draw(raw);
                self.sessions.insert(h);
                self.plan.keeps_session(h)
            }
            None => {
                // Calls of a graph without session ids wait for each other:
                // they stay together (the draw of the absent id, `null`).
                let graph = rec.has(Field::RequestId)
                    || rec.has(Field::WaitFor)
                    || rec.has(Field::Branches);
                let h = if graph {
                    self.plan.session_draw(b"null")
                } else if cx.in_order() {
                    self.plan.row_draw(cx.row())
                } else {
                    // In order, not on the guess: a wrong guess makes the
                    // loop remake the chunk, and this fork's counts of it
                    // would count its rows twice.
                    return Ok(None);
                };
                let keep = unit(h) < self.plan.rows;
                self.counts.loose += 1;
                self.counts.loose_kept += u64::from(keep);
                keep
            }
        }))
    }
}

/// A function of the row and the plan: chunks sample on any thread; a row
/// without a session, drawn by its index, is drawn in order.
impl Step for SampleStep {
    fn apply(
        &mut self,
        rec: &Record<'_>,
        cx: &Ctx,
        _out: &mut Vec<u8>,
    ) -> Result<Emit, RecordError> {
        let Some(keep) = self.keeps(rec, cx)? else {
            return Ok(Emit::InOrder);
        };
        // Saturating: a hostile length must not end the run in a panic.
        let tokens = (rec.uint(Field::InputLength)?.unwrap_or(0))
            .saturating_add(rec.uint(Field::OutputLength)?.unwrap_or(0));
        self.counts.rows += 1;
        self.counts.tokens = self.counts.tokens.saturating_add(tokens);
        if keep {
            self.counts.rows_kept += 1;
            self.counts.tokens_kept = self.counts.tokens_kept.saturating_add(tokens);
            Ok(Emit::Unchanged)
        } else {
            Ok(Emit::Dropped)
        }
    }

    fn fork(&self) -> Self {
        SampleStep::new(self.plan)
    }

    fn join(&mut self, fork: Self) {
        let (c, f) = (&mut self.counts, fork.counts);
        c.rows += f.rows;
        c.rows_kept += f.rows_kept;
        c.loose += f.loose;
        c.loose_kept += f.loose_kept;
        c.tokens = c.tokens.saturating_add(f.tokens);
        c.tokens_kept = c.tokens_kept.saturating_add(f.tokens_kept);
        self.sessions.extend(fork.sessions);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_alone_draw_loose_rows_at_their_rate() {
        let p = SamplePlan::new(Some(0.25), None, 3);
        assert_eq!((p.sessions, p.rows), (0.25, 0.25));
        let p = SamplePlan::new(None, Some(0.5), 3);
        assert_eq!((p.sessions, p.rows), (1.0, 0.5));
    }

    #[test]
    fn the_draw_is_the_seeded_hash_of_the_raw_id() {
        let p = SamplePlan::new(Some(0.5), None, 7);
        assert_eq!(p.session_draw(b"\"s1\""), stable_hash(7, b"\"s1\""));
        assert_ne!(p.session_draw(b"\"s1\""), p.session_draw(b"\"s2\""));
    }
}
