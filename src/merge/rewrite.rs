//! What mc-merge does to one row of input file `t`: keep or drop it
//! (`--weights`), scale its time (`--scale-rate`, mc-scale's `--speedup`
//! rule), shift it (concat), and move its session and hash ids into the
//! file's own namespace. Every other byte of the row is kept as read.

use crate::error::RecordError;
use crate::hash::{splitmix64, stable_hash, unit, GOLDEN_GAMMA};
use crate::record::{self, namespace_id, Field, Number, Record};
use crate::transform::scale::{speed_up_delay, speed_up_timestamp, speed_up_wait};

/// Largest integer written as an integer after a shift: beyond 2^53 a
/// reader that parses numbers as doubles (jq, JavaScript) loses it.
const MAX_EXACT_INT: f64 = 9_007_199_254_740_992.0;

/// The rules for the rows of one input file.
#[derive(Debug, Clone)]
pub struct FileRule {
    /// The file's index, its id namespace.
    pub t: u64,
    /// Namespaces in use: the number of files, or 1 with `--shared-ids`.
    pub k: u64,
    /// `--scale-rate` factor: arrivals come this many times faster.
    pub rate: f64,
    /// Fraction of sessions kept (`--weights`); 1 keeps every row.
    pub keep: f64,
    /// `--seed`.
    pub seed: u64,
    /// Added to every (scaled) timestamp: concat's shift, 0 for interleave.
    pub offset: f64,
}

/// A row after the rules: the written timestamp, if it has one.
#[derive(Debug)]
pub struct Kept {
    pub timestamp: Option<Number>,
}

/// Applies a [`FileRule`] to rows, with scratch buffers reused across rows.
pub struct Rewriter {
    pub rule: FileRule,
    session: Vec<u8>,
    ts: Vec<u8>,
    delay: Vec<u8>,
    tool_wait: Vec<u8>,
    /// `request_id`, `wait_for`, `branches` in the file's namespace.
    graph_ids: [Vec<u8>; 3],
    /// `f{t}:`, the prefix of the file's request ids (made once, not a row).
    request_prefix: String,
}

impl Rewriter {
    pub fn new(rule: FileRule) -> Self {
        Rewriter {
            session: Vec::new(),
            ts: Vec::new(),
            delay: Vec::new(),
            tool_wait: Vec::new(),
            graph_ids: Default::default(),
            request_prefix: format!("f{}:", rule.t),
            rule,
        }
    }

    /// Whether `--weights` keeps this row: one seeded draw per session (so a
    /// conversation is kept or dropped whole), per line for a row without one.
    pub fn keeps(&self, rec: &Record<'_>, line: u64) -> Result<bool, RecordError> {
        let p = self.rule.keep;
        if p >= 1.0 {
            return Ok(true);
        }
        if p <= 0.0 {
            return Ok(false);
        }
        // The file index is in the seed: equal session ids in two files are
        // different sessions and get independent draws.
        let seed = self.rule.seed ^ splitmix64(self.rule.t);
        let h = match rec.session_id()? {
            Some(s) => stable_hash(seed, s),
            None => stable_hash(seed ^ GOLDEN_GAMMA, &line.to_le_bytes()),
        };
        Ok(unit(h) < p)
    }

    /// The row's timestamp after `--scale-rate` (before any shift).
    #[inline]
    pub fn scaled_time(&self, rec: &Record<'_>) -> Result<Option<Number>, RecordError> {
        let Some(t) = rec.number(Field::Timestamp)? else {
            return Ok(None);
        };
        // The merge orders rows by time: a time past the limit (or
        // negative) would sort them by nonsense (limits.rs). The rule and
        // its message are `time_ms`'s; a time within it does not call it
        // (the call was ~28 instructions a row).
        let v = t.as_f64();
        if !(0.0..=crate::limits::MAX_TIME_MS).contains(&v) {
            crate::limits::time_ms("timestamp", v)?;
        }
        if self.rule.rate == 1.0 {
            return Ok(Some(t));
        }
        speed_up_timestamp(t, self.rule.rate, "--scale-rate").map(Some)
    }

    /// Writes line `line` (`bytes`) with the rules applied into `out`, or
    /// returns `None` (writing nothing) when `--weights` drops it; an
    /// error writes nothing either.
    pub fn row(
        &mut self,
        bytes: &[u8],
        line: u64,
        out: &mut Vec<u8>,
    ) -> Result<Option<Kept>, RecordError> {
        let rec = Record::parse(bytes)?;
        if !self.keeps(&rec, line)? {
            return Ok(None);
        }
        // The new values are written into the buffers first, then the row
        // is written with each replaced where its value lay.
        let (timestamp, new_ts) = self.shift_timestamp(&rec)?;
        let (new_delay, new_wait) = self.scale_waits(&rec)?;
        let renamed = self.namespace(&rec)?;
        let row_start = out.len();
        if !(new_ts || new_delay || new_wait || renamed.contains(&true)) {
            // Most rows: nothing but the hash ids changes (nothing at all
            // with one namespace), so the row is the text around them, with
            // no list of edits to make and sort (decision 0048, "last").
            match rec.span(Field::HashIds).filter(|_| self.rule.k > 1) {
                Some(span) => {
                    out.extend_from_slice(&bytes[..span.start]);
                    self.hash_ids(&rec, (span.start, span.end), row_start, out)?;
                    out.extend_from_slice(&bytes[span.end..]);
                }
                None => out.extend_from_slice(bytes),
            }
            return Ok(Some(Kept { timestamp }));
        }
        // (start, end, new value) of each value replaced, on the stack (a
        // `Vec` was an allocation a row); `None` for the hash ids, which
        // are renumbered straight into `out` when their place comes (made
        // in a buffer and copied, they were a second copy of most of the
        // row: decision 0048). Every edited field is present (each rule
        // above writes only a value the row has), so no field is appended.
        let mut edits: [(usize, usize, Option<&[u8]>); 8] = [(0, 0, None); 8];
        let mut n = 0;
        let mut edit = |written: bool, field: Field, value| {
            if let Some(span) = rec.span(field).filter(|_| written) {
                edits[n] = (span.start, span.end, value);
                n += 1;
            }
        };
        let [rid, wait, branch] = &self.graph_ids;
        edit(new_ts, Field::Timestamp, Some(&self.ts));
        edit(new_delay, Field::Delay, Some(&self.delay));
        edit(new_wait, Field::ToolWaitMs, Some(&self.tool_wait));
        edit(renamed[0], Field::RequestId, Some(rid));
        edit(renamed[1], Field::WaitFor, Some(wait));
        edit(renamed[2], Field::Branches, Some(branch));
        edit(renamed[3], Field::SessionId, Some(&self.session));
        edit(self.rule.k > 1, Field::HashIds, None);
        let edits = &mut edits[..n];
        edits.sort_unstable_by_key(|e| e.0);
        let mut at = 0;
        for &(start, end, value) in edits.iter() {
            out.extend_from_slice(&bytes[at..start]);
            at = end;
            match value {
                Some(v) => out.extend_from_slice(v),
                None => self.hash_ids(&rec, (start, end), row_start, out)?,
            }
        }
        out.extend_from_slice(&bytes[at..]);
        Ok(Some(Kept { timestamp }))
    }

    /// Writes the row's hash ids (at `start..end` of it) in the file's
    /// namespace to `out`: read, namespaced and written in one pass, as
    /// text or four ids at a time where it can
    /// (`Record::namespace_hash_ids`); `null` and `[]` are kept as
    /// written. A bad row writes nothing, as one `--weights` drops: on an
    /// error `out` is cut back to `row_start`.
    #[inline(always)]
    fn hash_ids(
        &self,
        rec: &Record<'_>,
        (start, end): (usize, usize),
        row_start: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        let (k, t) = (self.rule.k, self.rule.t);
        let mark = out.len();
        let count = rec.namespace_hash_ids(out, (k, t), |id| {
            RecordError::field(
                "hash_ids",
                format!(
                    "id {id} times {k} files overflows 64 bits (use --shared-ids, \
                     or renumber the ids)"
                ),
            )
        });
        let count = count.inspect_err(|_| out.truncate(row_start))?;
        if count.is_none_or(|c| c == 0) {
            out.truncate(mark);
            out.extend_from_slice(&rec.line()[start..end]);
        }
        Ok(())
    }

    /// The row's time after --scale-rate and --offset, and whether it
    /// changed (then its text is in `ts`).
    fn shift_timestamp(&mut self, rec: &Record<'_>) -> Result<(Option<Number>, bool), RecordError> {
        let Some(t) = self.scaled_time(rec)? else {
            return Ok((None, false));
        };
        let shifted = shift(t, self.rule.offset)?;
        let changed = self.rule.rate != 1.0 || self.rule.offset != 0.0;
        if changed {
            self.ts.clear();
            record::write_number(shifted, &mut self.ts);
        }
        Ok((Some(shifted), changed))
    }

    /// `delay` and `tool_wait_ms` sped up by --scale-rate, into `delay` and
    /// `tool_wait`; whether each was written.
    fn scale_waits(&mut self, rec: &Record<'_>) -> Result<(bool, bool), RecordError> {
        let mut written = (false, false);
        if self.rule.rate == 1.0 {
            return Ok(written);
        }
        if let Some(d) = rec.number(Field::Delay)? {
            self.delay.clear();
            let scaled = speed_up_delay(d, self.rule.rate, "--scale-rate")?;
            record::write_number(scaled, &mut self.delay);
            written.0 = true;
        }
        if let Some(w) = rec.number(Field::ToolWaitMs)? {
            self.tool_wait.clear();
            let scaled = speed_up_wait("tool_wait_ms", w, self.rule.rate, "--scale-rate")?;
            record::write_number(scaled, &mut self.tool_wait);
            written.1 = true;
        }
        Ok(written)
    }

    /// With several files, the row's ids put in its file's namespace: the
    /// request ids, `wait_for` and `branches` into `graph_ids`, the session
    /// id into `session`; whether each of the four was written. (The hash
    /// ids are renumbered as the row is written, in [`Rewriter::row`].)
    fn namespace(&mut self, rec: &Record<'_>) -> Result<[bool; 4], RecordError> {
        let mut written = [false; 4];
        if self.rule.k <= 1 {
            return Ok(written);
        }
        // Request ids are unique per file: two files' calls must not
        // wait for each other (`f{t}:`, as string session ids).
        let prefix = &self.request_prefix;
        let [rid, wait, branch] = &mut self.graph_ids;
        for (k, (field, buf)) in [
            (Field::RequestId, rid),
            (Field::WaitFor, wait),
            (Field::Branches, branch),
        ]
        .into_iter()
        .enumerate()
        {
            // Most rows have no agent-graph field: one look at the span.
            if rec.has(field) {
                buf.clear();
                written[k] = crate::graph::write_prefixed(rec, field, prefix, buf)?;
            }
        }
        if let Some(raw) = rec.session_id()? {
            self.session.clear();
            namespace_session(raw, self.rule.k, self.rule.t, &mut self.session)?;
            written[3] = true;
        }
        Ok(written)
    }
}

/// `t + offset`, an integer when both are (and it stays exact).
#[inline]
pub fn shift(t: Number, offset: f64) -> Result<Number, RecordError> {
    if offset == 0.0 {
        return Ok(t);
    }
    let v = t.as_f64() + offset;
    if !v.is_finite() {
        return Err(RecordError::field(
            "timestamp",
            format!("shifted by {offset} ms it is not a finite number"),
        ));
    }
    match t {
        Number::Int(_) if offset.fract() == 0.0 => {
            if v.abs() > MAX_EXACT_INT {
                return Err(RecordError::field(
                    "timestamp",
                    format!("shifted to {v:.3e} ms, too large to write exactly (above 2^53)"),
                ));
            }
            Ok(Number::Int(v as i64))
        }
        _ => Ok(Number::Float(v)),
    }
}

/// The session id of file `t` (of `k`) in that file's namespace: a string
/// gets the prefix `f{t}:`, a non-negative integer becomes `id*k + t` (the
/// hash-id rule), so ids of different files never meet and stay the type
/// they were.
pub fn namespace_session(raw: &[u8], k: u64, t: u64, out: &mut Vec<u8>) -> Result<(), RecordError> {
    if raw.first() == Some(&b'"') {
        out.extend_from_slice(format!("\"f{t}:").as_bytes());
        out.extend_from_slice(&raw[1..]);
        return Ok(());
    }
    let n = record::parse_uint(raw).ok_or_else(|| {
        RecordError::field(
            "session_id",
            format!(
                "{} is not a non-negative integer or a string, so it cannot be given a \
                 namespace per file (use --shared-ids)",
                String::from_utf8_lossy(raw)
            ),
        )
    })?;
    let id = namespace_id(n, k, t).ok_or_else(|| {
        RecordError::field(
            "session_id",
            format!("{n} times {k} files overflows 64 bits (use --shared-ids)"),
        )
    })?;
    out.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
    Ok(())
}

/// The fraction of each file's rows `--weights` keeps: the largest output
/// whose rows are in proportion `weights` and which takes no more rows from
/// a file than it has. With `n_t` rows and weight `w_t`, the scale is
/// `s = min(n_t / w_t)` over files of positive weight; file t keeps
/// `s * w_t / n_t` of its rows (the limiting file keeps all of them). An
/// empty file cannot contribute and is left out of the proportions.
pub fn keep_fractions(weights: &[f64], rows: &[u64]) -> Vec<f64> {
    let s = weights
        .iter()
        .zip(rows)
        .filter(|(&w, &n)| w > 0.0 && n > 0)
        .map(|(&w, &n)| n as f64 / w)
        .fold(f64::INFINITY, f64::min);
    weights
        .iter()
        .zip(rows)
        .map(|(&w, &n)| {
            if w <= 0.0 {
                0.0
            } else if n == 0 || !s.is_finite() {
                1.0
            } else {
                (s * w / n as f64).min(1.0)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(t: u64, k: u64) -> FileRule {
        FileRule {
            t,
            k,
            rate: 1.0,
            keep: 1.0,
            seed: 0,
            offset: 0.0,
        }
    }

    fn rewrite(rule: FileRule, line: &str) -> Option<String> {
        let mut out = Vec::new();
        Rewriter::new(rule)
            .row(line.as_bytes(), 1, &mut out)
            .unwrap()
            .map(|_| String::from_utf8(out).unwrap())
    }

    #[test]
    fn sessions_and_ids_move_to_the_file_namespace() {
        // File 1 of 3: id h -> 3h + 1 (0 -> 1, 4 -> 13), session 5 -> 16.
        assert_eq!(
            rewrite(
                rule(1, 3),
                r#"{"timestamp": 7, "session_id": "a\"b", "hash_ids": [0, 4], "x": [1]}"#
            )
            .unwrap(),
            r#"{"timestamp": 7, "session_id": "f1:a\"b", "hash_ids": [1, 13], "x": [1]}"#
        );
        assert_eq!(
            rewrite(rule(1, 3), r#"{"session_id":5,"hash_ids":[0,4]}"#).unwrap(),
            r#"{"session_id":16,"hash_ids":[1,13]}"#
        );
        // One namespace: the row is written as read.
        let line = r#"{"session_id": 5, "hash_ids": [0, 4]}"#;
        assert_eq!(rewrite(rule(0, 1), line).unwrap(), line);
    }

    #[test]
    fn bad_session_ids_and_overflow_are_errors() {
        let mut out = Vec::new();
        let err = Rewriter::new(rule(0, 2))
            .row(br#"{"session_id": -3}"#, 1, &mut out)
            .unwrap_err();
        assert!(err.to_string().contains("--shared-ids"), "{err}");
        let err = Rewriter::new(rule(1, 2))
            .row(br#"{"hash_ids": [18446744073709551615]}"#, 1, &mut out)
            .unwrap_err();
        assert!(err.to_string().contains("overflows 64 bits"), "{err}");
        assert!(out.is_empty());
    }

    #[test]
    fn shifts_keep_integers_integers() {
        assert_eq!(shift(Number::Int(5), 10.0).unwrap(), Number::Int(15));
        assert_eq!(shift(Number::Int(5), 0.5).unwrap(), Number::Float(5.5));
        assert_eq!(
            shift(Number::Float(1.25), 2.0).unwrap(),
            Number::Float(3.25)
        );
        assert!(shift(Number::Int(1), 1e300 * 1e10).is_err());
        assert!(shift(Number::Int(1), 2f64.powi(60)).is_err());
    }

    #[test]
    fn rate_and_shift_apply_in_that_order() {
        // rate 2: 15 -> trunc(7.5) = 7, + offset 100 = 107; delay 9 -> 4.
        let r = FileRule {
            rate: 2.0,
            offset: 100.0,
            ..rule(0, 1)
        };
        assert_eq!(
            rewrite(r, r#"{"timestamp": 15, "delay": 9}"#).unwrap(),
            r#"{"timestamp": 107, "delay": 4}"#
        );
    }

    #[test]
    fn keep_fractions_follow_the_weights() {
        // 100 and 40 rows at 3:1: s = min(100/3, 40/1) = 33.3, so file 0
        // keeps all 100 and file 1 keeps 33.3 of 40.
        let f = keep_fractions(&[3.0, 1.0], &[100, 40]);
        assert_eq!(f[0], 1.0);
        assert!((f[1] - (100.0 / 3.0) / 40.0).abs() < 1e-12);
        // 1:1 on 10 and 30 rows: file 1 keeps a third.
        let f = keep_fractions(&[1.0, 1.0], &[10, 30]);
        assert_eq!(f[0], 1.0);
        assert!((f[1] - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(keep_fractions(&[0.0, 1.0], &[10, 30]), vec![0.0, 1.0]);
        assert_eq!(keep_fractions(&[1.0, 1.0], &[0, 30]), vec![1.0, 1.0]);
    }

    #[test]
    fn sessions_are_kept_or_dropped_whole() {
        let r = Rewriter::new(FileRule {
            keep: 0.5,
            ..rule(0, 1)
        });
        let mut kept = 0;
        for s in 0..1000 {
            let a = format!(r#"{{"session_id": "s{s}", "timestamp": 1}}"#);
            let b = format!(r#"{{"timestamp": 2, "session_id": "s{s}"}}"#);
            let ka = r.keeps(&Record::parse(a.as_bytes()).unwrap(), 1).unwrap();
            let kb = r.keeps(&Record::parse(b.as_bytes()).unwrap(), 99).unwrap();
            assert_eq!(ka, kb);
            kept += usize::from(ka);
        }
        assert!((400..600).contains(&kept), "{kept}");
    }
}
