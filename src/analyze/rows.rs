//! The per-row facts the second pass needs, kept compactly: a few numbers
//! per row, and the ids as runs of consecutive values (a Mooncake row is
//! usually a shared prefix and then one run of fresh ids, so two or three
//! runs instead of dozens of ids). A run is two LEB128 varints in one byte
//! stream: its first id as the zigzag distance from where the row's run
//! before it ended, and its length; about 5 bytes a run on the 1 GB
//! generated trace where a (u64, u32) pair took 16 (ARCHITECTURE.md §5).
//!
//! The numbers are a byte stream too ([`Rows`]): a tag byte, then varints
//! (lengths as whole numbers, the timestamp as the zigzag step from the
//! row before's), about 9 bytes a row where a struct took 32 (decision 47).
//! Every reader takes the rows in order; the few out of order keep a
//! [`RowAt`] or read through a [`RowCursor`] ([`RowStore::cursor`]).

use crate::blocks::FeasibleSizes;

/// An optional number in 8 bytes, not `Option<f64>`'s 16. `None` is one
/// NaN bit pattern no number read from JSON has (a parser makes no NaN,
/// and arithmetic makes the canonical one), compared by bits, so every
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
/// as `row.isl` and so on) and how many ids it has. Made afresh by
/// [`Rows::iter`] from the packed bytes; where its ids are is not kept:
/// rows are read in order, each row's runs after the one before's
/// ([`RowStore::for_each_ids`]).
#[derive(Debug, Clone, Copy)]
pub struct StoredRow {
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

/// Where a stored row's runs start, and how many ids they hold: enough to
/// decode its ids out of order ([`RowStore::ids_at`]).
#[derive(Debug, Clone, Copy)]
pub struct RowAt {
    runs: u64,
    n_ids: u32,
}

/// The tag byte of a packed row: which numbers are not whole (stored as
/// their 8 bytes), whether the row has a timestamp, and whether
/// `first_unseen` is `n_ids` (a row whose ids were all seen before).
mod tag {
    pub const ISL_RAW: u8 = 1;
    pub const OSL_RAW: u8 = 1 << 1;
    /// A timestamp, as the zigzag step from the last whole one.
    pub const TS_WHOLE: u8 = 1 << 2;
    /// A timestamp, as its 8 bytes (it leaves the last whole one as it is).
    pub const TS_RAW: u8 = 1 << 3;
    pub const ALL_SEEN: u8 = 1 << 4;
}

/// Below this, a whole non-negative f64 and its u64 convert both ways
/// exactly (every such f64 is an integer a u64 holds).
const WHOLE_LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63

/// `v` as a whole number when it is one the varint form gives back bit for
/// bit: not negative (nor -0.0), no fraction, below 2^63; not NaN. (Two
/// conversions, not `fract`: that is a call to libm's `trunc` here.)
fn whole(v: f64) -> Option<u64> {
    let w = v as i64;
    (v.is_sign_positive() && v < WHOLE_LIMIT && w as f64 == v).then_some(w as u64)
}

fn zigzag(delta: u64) -> u64 {
    let d = delta as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(z: u64) -> u64 {
    ((z >> 1) as i64 ^ -((z & 1) as i64)) as u64
}

/// Reads a varint `Packing::varint` wrote at `*at`, moving `*at` past it. Up
/// to three bytes (a row's counts, lengths below 2 M, most steps) are read
/// here, inline; the rest by a call (as a loop here, the two-byte ones
/// made decoding a row cost 190 instructions; the three-byte ones, input
/// lengths of 16 Ki tokens and more, were a third of the rows).
#[inline(always)]
fn get_varint(bytes: &[u8], at: &mut usize) -> u64 {
    let b = bytes[*at];
    if b < 0x80 {
        *at += 1;
        return u64::from(b);
    }
    let c = bytes[*at + 1];
    if c < 0x80 {
        *at += 2;
        return u64::from(b & 0x7f) | u64::from(c) << 7;
    }
    let d = bytes[*at + 2];
    if d < 0x80 {
        *at += 3;
        return u64::from(b & 0x7f) | u64::from(c & 0x7f) << 7 | u64::from(d) << 14;
    }
    let (v, next) = get_long_varint(bytes, *at);
    *at = next;
    v
}

/// A varint of four bytes or more at `at`, and where the next thing is
/// (returned, not written through a reference: `at` stays in a register
/// in the callers).
#[inline(never)]
fn get_long_varint(bytes: &[u8], mut at: usize) -> (u64, usize) {
    let mut v = 0;
    let mut shift = 0;
    loop {
        let b = bytes[at];
        at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return (v, at);
        }
        shift += 7;
    }
}

fn get_f64(bytes: &[u8], at: &mut usize) -> f64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[*at..*at + 8]);
    *at += 8;
    f64::from_bits(u64::from_le_bytes(b))
}

/// A row's bytes as they are made: the longest row is a tag, two varints
/// of 32-bit counts (5 bytes each), two numbers (8 or 9 bytes) and a
/// timestamp step (10 bytes).
struct Packing {
    buf: [u8; 48],
    len: usize,
}

impl Packing {
    fn new() -> Packing {
        Packing {
            buf: [0; 48],
            len: 0,
        }
    }

    /// Appends the bytes so far to `out` and empties the buffer. The
    /// whole buffer is copied (a fixed size: a few vector moves, where a
    /// copy of `len` bytes was a call to `memcpy`), then `out` is cut back.
    #[inline]
    fn append_to(&mut self, out: &mut Vec<u8>) {
        let end = out.len() + self.len;
        out.extend_from_slice(&self.buf);
        out.truncate(end);
        self.len = 0;
    }

    /// [`Packing::append_to`] when fewer than `room` bytes are left
    /// (`room` at most the buffer's length).
    #[inline]
    fn make_room(&mut self, room: usize, out: &mut Vec<u8>) {
        if self.len + room > self.buf.len() {
            self.append_to(out);
        }
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf[self.len] = v as u8 | 0x80;
            self.len += 1;
            v >>= 7;
        }
        self.buf[self.len] = v as u8;
        self.len += 1;
    }

    fn raw(&mut self, v: f64) {
        self.buf[self.len..self.len + 8].copy_from_slice(&v.to_bits().to_le_bytes());
        self.len += 8;
    }
}

/// Every row's numbers, packed in input order (see the module's doc).
#[derive(Default)]
pub struct Rows {
    bytes: Vec<u8>,
    len: usize,
    /// Rows with at least one id.
    with_ids: usize,
    /// The last whole timestamp pushed (the next one is a step from it).
    last_ts: u64,
}

impl Rows {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many rows have ids (counted as they come: one pass fewer).
    pub fn with_ids(&self) -> usize {
        self.with_ids
    }

    /// The packed bytes (what the rows' numbers cost).
    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }

    fn push(&mut self, row: &StoredRow) {
        let mut p = Packing::new();
        p.len = 1;
        let mut t = 0;
        p.varint(u64::from(row.n_ids));
        if row.first_unseen == row.n_ids {
            t |= tag::ALL_SEEN;
        } else {
            p.varint(u64::from(row.first_unseen));
        }
        for (v, raw) in [(row.isl, tag::ISL_RAW), (row.osl, tag::OSL_RAW)] {
            match whole(v) {
                Some(w) => p.varint(w),
                None => {
                    t |= raw;
                    p.raw(v);
                }
            }
        }
        if let Some(ts) = row.timestamp.get() {
            match whole(ts) {
                Some(w) => {
                    t |= tag::TS_WHOLE;
                    p.varint(zigzag(w.wrapping_sub(self.last_ts)));
                    self.last_ts = w;
                }
                None => {
                    t |= tag::TS_RAW;
                    p.raw(ts);
                }
            }
        }
        p.buf[0] = t;
        p.append_to(&mut self.bytes);
        self.len += 1;
        self.with_ids += usize::from(row.n_ids > 0);
    }

    /// The rows, in order.
    pub fn iter(&self) -> RowIter<'_> {
        RowIter {
            bytes: &self.bytes,
            at: 0,
            last_ts: 0,
            left: self.len,
        }
    }
}

/// [`Rows::iter`]: each row decoded from the bytes after the one before.
pub struct RowIter<'a> {
    bytes: &'a [u8],
    at: usize,
    last_ts: u64,
    left: usize,
}

impl Iterator for RowIter<'_> {
    type Item = StoredRow;

    // Inlined into each reader (a dozen passes over the rows): a call cost
    // about 120 instructions a row, most of them moving the row through
    // memory and the fields a reader never looks at.
    #[inline(always)]
    fn next(&mut self) -> Option<StoredRow> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let bytes = self.bytes;
        let mut at = self.at;
        let t = bytes[at];
        at += 1;
        let n_ids = get_varint(bytes, &mut at) as u32;
        let first_unseen = if t & tag::ALL_SEEN != 0 {
            n_ids
        } else {
            get_varint(bytes, &mut at) as u32
        };
        // Whole numbers are below 2^63: the signed conversion is exact.
        let isl = if t & tag::ISL_RAW != 0 {
            get_f64(bytes, &mut at)
        } else {
            get_varint(bytes, &mut at) as i64 as f64
        };
        let osl = if t & tag::OSL_RAW != 0 {
            get_f64(bytes, &mut at)
        } else {
            get_varint(bytes, &mut at) as i64 as f64
        };
        let timestamp = if t & tag::TS_WHOLE != 0 {
            self.last_ts = self
                .last_ts
                .wrapping_add(unzigzag(get_varint(bytes, &mut at)));
            Some(self.last_ts as i64 as f64)
        } else if t & tag::TS_RAW != 0 {
            Some(get_f64(bytes, &mut at))
        } else {
            None
        };
        self.at = at;
        Some(StoredRow {
            facts: RowFacts {
                isl,
                osl,
                timestamp: timestamp.into(),
            },
            first_unseen,
            n_ids,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for RowIter<'_> {}

#[derive(Default)]
pub struct RowStore {
    /// Every row's numbers.
    pub rows: Rows,
    /// Every row's runs of consecutive ids, encoded (see the module's doc),
    /// in row order.
    runs: Vec<u8>,
    /// (row index, line) of the first row and of each row whose line is
    /// not the one after its predecessor's (lines skipped between them):
    /// a few entries, where a line per row took 8 bytes a row.
    line_starts: Vec<(usize, u64)>,
    /// The block sizes every row with ids so far allows, counted as the
    /// rows come: a pass over the rows fewer (decision 46, later).
    feasible: FeasibleSizes,
    /// A row with ids has a length no block size fits (under one token, or
    /// not a whole number): no size fits every row.
    unfit: bool,
    /// The line of the last row pushed.
    last_line: u64,
}

/// Reads the run at `*at` (after one that ended at `end`) as (first id,
/// length), moving `*at` past it.
#[inline]
fn get_run(runs: &[u8], at: &mut usize, end: u64) -> (u64, u64) {
    let first = end.wrapping_add(unzigzag(get_varint(runs, at)));
    (first, get_varint(runs, at))
}

impl RowStore {
    /// Stores the row read from `line` (above every line pushed before).
    /// `first_unseen` is what the id table found for the row.
    pub fn push(&mut self, line: u64, facts: RowFacts, first_unseen: u32, ids: &[u64]) -> RowAt {
        let row = self.rows.len();
        if row == 0 || self.last_line + 1 != line {
            self.line_starts.push((row, line));
        }
        self.last_line = line;
        let start = self.runs.len() as u64;
        // Where the run before ended (the next id it would have held).
        let mut end = 0u64;
        let mut k = 0;
        let mut packed = Packing::new();
        while k < ids.len() {
            let first = ids[k];
            // Index loops, not zip + take_while over the rest of the row:
            // four steps at a time without a branch each (a run is a dozen
            // ids and more), then one at a time to its end (decision 46,
            // later: with the loop alone, 7 instructions an id).
            let mut j = k + 1;
            while j + 4 <= ids.len() {
                let w = &ids[j - 1..j + 4];
                let steps = (w[1] == w[0].wrapping_add(1))
                    & (w[2] == w[1].wrapping_add(1))
                    & (w[3] == w[2].wrapping_add(1))
                    & (w[4] == w[3].wrapping_add(1));
                if !steps {
                    break;
                }
                j += 4;
            }
            while j < ids.len() && ids[j] == ids[j - 1].wrapping_add(1) {
                j += 1;
            }
            let len = j - k;
            // Zigzag: a run may start below where the one before ended.
            // Two varints of 10 bytes at most, written into the row's
            // buffer, not pushed a byte at a time (a capacity check each).
            packed.make_room(20, &mut self.runs);
            packed.varint(zigzag(first.wrapping_sub(end)));
            packed.varint(len as u64);
            end = first.wrapping_add(len as u64);
            k += len;
        }
        packed.append_to(&mut self.runs);
        if !ids.is_empty() {
            // `whole` first: `fract` is a call to libm's `trunc`.
            let isl = facts.isl;
            let len = match whole(isl) {
                Some(w) => Some(w).filter(|&w| w >= 1),
                None => (isl >= 1.0 && isl.fract() == 0.0).then_some(isl as u64),
            };
            match len {
                Some(len) => self.feasible.add(ids.len() as u64, len),
                None => self.unfit = true,
            }
        }
        let n_ids = ids.len() as u32;
        self.rows.push(&StoredRow {
            facts,
            first_unseen,
            n_ids,
        });
        RowAt { runs: start, n_ids }
    }

    /// The range of block sizes every row with ids allows; `None` when no
    /// block size fits every row (or no row has ids).
    pub fn feasible(&self) -> Option<FeasibleSizes> {
        let f = self.feasible;
        (!self.unfit && f.rows > 0 && !f.is_empty()).then_some(f)
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
            let (first, len) = get_run(&self.runs, at, end);
            out.extend((0..len).map(|k| first.wrapping_add(k)));
            end = first.wrapping_add(len);
        }
    }

    /// The ids of the row at `at`, decoded into `out` (cleared first).
    pub fn ids_at(&self, at: RowAt, out: &mut Vec<u64>) {
        self.decode(&mut (at.runs as usize), at.n_ids as usize, out);
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
                let (first, len) = get_run(&self.runs, &mut at, end);
                runs.push((first, len));
                end = first.wrapping_add(len);
                left = left.saturating_sub(len);
            }
            f(i, &r, &runs);
        }
    }

    /// Calls `f(index, row, ids)` for every row, in order.
    pub fn for_each_ids(&self, mut f: impl FnMut(usize, &StoredRow, &[u64])) {
        let mut ids = Vec::new();
        let mut at = 0;
        for (i, r) in self.rows.iter().enumerate() {
            self.decode(&mut at, r.n_ids as usize, &mut ids);
            f(i, &r, &ids);
        }
    }

    /// Moves `*at` past the runs of a row of `n` ids.
    fn skip_runs(&self, at: &mut usize, n: u32) {
        let mut left = u64::from(n);
        while left > 0 {
            get_varint(&self.runs, at);
            left = left.saturating_sub(get_varint(&self.runs, at));
        }
    }

    /// A cursor for reading rows out of order (the cache model's
    /// timestamp order): one pass over the rows to place its checkpoints.
    pub fn cursor(&self) -> RowCursor<'_> {
        let mut checkpoints = Vec::with_capacity(self.rows.len().div_ceil(CHECKPOINT_EVERY));
        let mut it = self.rows.iter();
        let mut runs = 0;
        for i in 0..self.rows.len() {
            if i % CHECKPOINT_EVERY == 0 {
                checkpoints.push(Place {
                    rows: it.at,
                    last_ts: it.last_ts,
                    runs,
                });
            }
            let Some(r) = it.next() else { break };
            self.skip_runs(&mut runs, r.n_ids);
        }
        RowCursor {
            store: self,
            checkpoints,
            next: Place {
                rows: 0,
                last_ts: 0,
                runs: 0,
            },
            next_row: 0,
        }
    }
}

/// Rows between two of a [`RowCursor`]'s checkpoints: a checkpoint is 24
/// bytes, 1.5 a row, where a `RowAt` a row was 16 (decision 47, last); a
/// row out of order decodes at most this many before it.
const CHECKPOINT_EVERY: usize = 16;

/// Where a row starts in both byte streams, and the timestamp its step
/// is from.
#[derive(Debug, Clone, Copy)]
struct Place {
    rows: usize,
    last_ts: u64,
    runs: usize,
}

/// Rows read in any order ([`RowStore::cursor`]): a row is decoded from
/// the one after the row read last when it is at most a checkpoint's
/// span ahead (the usual case: a trace nearly in timestamp order), else
/// from the checkpoint before it.
pub struct RowCursor<'a> {
    store: &'a RowStore,
    checkpoints: Vec<Place>,
    /// Where row `next_row` starts.
    next: Place,
    next_row: usize,
}

impl RowCursor<'_> {
    /// Row `i` (below the store's row count), with its ids decoded into
    /// `ids` (cleared first).
    pub fn row(&mut self, i: usize, ids: &mut Vec<u64>) -> StoredRow {
        if i < self.next_row || i - self.next_row > CHECKPOINT_EVERY {
            let c = i / CHECKPOINT_EVERY;
            self.next = self.checkpoints[c];
            self.next_row = c * CHECKPOINT_EVERY;
        }
        let store = self.store;
        let mut it = RowIter {
            bytes: &store.rows.bytes,
            at: self.next.rows,
            last_ts: self.next.last_ts,
            left: store.rows.len() - self.next_row,
        };
        let mut runs = self.next.runs;
        let mut row = None;
        while self.next_row <= i {
            row = it.next();
            if let Some(r) = row.filter(|_| self.next_row < i) {
                store.skip_runs(&mut runs, r.n_ids);
            }
            self.next_row += 1;
        }
        // `i` is below the row count, so the loop read it.
        let r = row.unwrap_or_else(|| panic!("row {i} of {}", store.rows.len()));
        store.decode(&mut runs, r.n_ids as usize, ids);
        self.next = Place {
            rows: it.at,
            last_ts: it.last_ts,
            runs,
        };
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
    }

    #[test]
    fn a_typical_row_packs_in_nine_bytes() {
        // A generated-trace row: 27 ids, 4 seen before, 13,500 tokens in,
        // 350 out, 40 ms after the row before (which had 1,000,000 ms).
        let mut rows = Rows::default();
        let row = |ts: f64, first_unseen| StoredRow {
            facts: RowFacts {
                isl: 13_500.0,
                osl: 350.0,
                timestamp: Some(ts).into(),
            },
            first_unseen,
            n_ids: 27,
        };
        rows.push(&row(1_000_000.0, 27));
        let first = rows.bytes();
        rows.push(&row(1_000_040.0, 4));
        // Tag, n_ids, first_unseen, isl (2 bytes), osl (2), the step (1):
        // 8 bytes where the struct took 32.
        assert_eq!(rows.bytes() - first, 8);
        // The first: no first_unseen (all seen), a 3-byte step from 0.
        assert_eq!(first, 1 + 1 + 2 + 2 + 3);
        let ts: Vec<Option<f64>> = rows.iter().map(|r| r.timestamp.get()).collect();
        assert_eq!(ts, [Some(1_000_000.0), Some(1_000_040.0)]);
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

    /// Numbers at the edges of the packed form: whole ones (small, at a
    /// varint byte's edge, the largest below 2^63), 2^63 and above (kept
    /// as bits), fractions, -0.0, negatives, infinities, the largest f64;
    /// and plain ones.
    fn edge_number() -> impl Strategy<Value = f64> {
        prop_oneof![
            3 => prop::sample::select(vec![
                0.0,
                -0.0,
                1.0,
                127.0,
                128.0,
                16_383.0,
                16_384.0,
                0.5,
                -1.0,
                -1e300,
                9_223_372_036_854_774_784.0, // the largest f64 below 2^63
                9_223_372_036_854_775_808.0, // 2^63
                18_446_744_073_709_551_616.0, // 2^64
                f64::MAX,
                f64::MIN_POSITIVE,
                f64::INFINITY,
                f64::NEG_INFINITY,
            ]),
            3 => (0u64..1 << 20).prop_map(|v| v as f64),
            2 => any::<u64>().prop_map(|v| v as f64),
            2 => any::<f64>().prop_filter("not the missing bits", |v| v.to_bits() != NONE_BITS),
        ]
    }

    /// A row's facts as bits, to compare exactly (-0.0 and 0.0 differ).
    fn bits(r: &StoredRow) -> (u64, u64, Option<u64>, u32, u32) {
        (
            r.isl.to_bits(),
            r.osl.to_bits(),
            r.timestamp.get().map(f64::to_bits),
            r.first_unseen,
            r.n_ids,
        )
    }

    proptest! {
        #[test]
        fn packed_rows_round_trip(
            rows in prop::collection::vec(
                (
                    edge_number(),
                    edge_number(),
                    prop_oneof![
                        1 => Just(None),
                        // Steps up, equal and down from the row before.
                        3 => (0u64..3).prop_map(|k| Some(k as f64 * 1000.0)),
                        2 => edge_number().prop_map(Some),
                    ],
                    prop_oneof![
                        Just(0u32),
                        Just(u32::MAX),
                        0u32..300,
                    ],
                    any::<prop::sample::Index>(),
                ),
                0..40,
            ),
        ) {
            let mut packed = Rows::default();
            let mut want = Vec::new();
            for (isl, osl, ts, n_ids, seen) in rows {
                // first_unseen is at most n_ids: all seen, none, or between.
                let first_unseen = seen.index(n_ids as usize + 1) as u32;
                let row = StoredRow {
                    facts: RowFacts { isl, osl, timestamp: ts.into() },
                    first_unseen,
                    n_ids,
                };
                packed.push(&row);
                want.push(bits(&row));
            }
            prop_assert_eq!(packed.len(), want.len());
            let got: Vec<_> = packed.iter().map(|r| bits(&r)).collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn stored_rows_round_trip_with_their_ids(
            rows in prop::collection::vec(
                (
                    edge_number(),
                    prop::collection::vec(
                        prop_oneof![
                            3 => (0u64..64).prop_map(|s| vec![s]),
                            2 => (0u64..64, 1u64..6).prop_map(|(s, n)| (s..s + n).collect()),
                            1 => any::<u64>().prop_map(|s| vec![s]),
                            1 => Just(vec![u64::MAX, 0]),
                        ],
                        0..5,
                    )
                    .prop_map(|p: Vec<Vec<u64>>| p.concat()),
                ),
                0..30,
            ),
        ) {
            let mut s = RowStore::default();
            let mut at = Vec::new();
            for (i, (isl, ids)) in rows.iter().enumerate() {
                let facts = RowFacts { isl: *isl, osl: 1.0, timestamp: Some(i as f64).into() };
                at.push(s.push(2 * i as u64 + 1, facts, (ids.len() / 2) as u32, ids));
            }
            let mut seen = 0;
            s.for_each_ids(|i, r, ids| {
                assert_eq!(ids, &rows[i].1[..]);
                assert_eq!(r.isl.to_bits(), rows[i].0.to_bits());
                assert_eq!(r.timestamp.get(), Some(i as f64));
                assert_eq!(r.first_unseen as usize, ids.len() / 2);
                assert_eq!(s.line(i), 2 * i as u64 + 1);
                seen += 1;
            });
            prop_assert_eq!(seen, rows.len());
            prop_assert_eq!(s.rows.with_ids(), rows.iter().filter(|r| !r.1.is_empty()).count());
            let mut out = Vec::new();
            // Out of order, from the back.
            for (k, &a) in at.iter().enumerate().rev() {
                s.ids_at(a, &mut out);
                prop_assert_eq!(&out, &rows[k].1);
            }
        }

        /// The cursor reads any row, in any order (back, forward within a
        /// checkpoint's span and beyond, the same row again), as the rows
        /// read in order give it: numbers (timestamps are steps from the
        /// row before) and ids.
        #[test]
        fn a_cursor_reads_rows_as_in_order(
            rows in prop::collection::vec(
                (
                    prop::collection::vec(any::<u64>(), 0..4),
                    prop::collection::vec(0u64..1000, 0..6),
                    prop_oneof![
                        3 => (0u64..1 << 40).prop_map(|t| Some(t as f64)),
                        1 => Just(None),
                        1 => Just(Some(0.25)),
                    ],
                ),
                1..80,
            ),
            picks in prop::collection::vec(
                prop_oneof![
                    2 => any::<prop::sample::Index>().prop_map(Err),
                    3 => (0usize..20).prop_map(Ok),
                ],
                0..60,
            ),
        ) {
            let mut s = RowStore::default();
            for (i, (ids, small, ts)) in rows.iter().enumerate() {
                let ids: Vec<u64> = ids.iter().chain(small).copied().collect();
                let facts = RowFacts { isl: ids.len() as f64, osl: 2.0, timestamp: (*ts).into() };
                s.push(i as u64 + 1, facts, 0, &ids);
            }
            let mut want = Vec::new();
            s.for_each_ids(|_, r, ids| want.push((bits(r), ids.to_vec())));
            let mut cursor = s.cursor();
            let mut ids = Vec::new();
            let mut last = 0;
            for pick in picks {
                // An index anywhere, or a step forward from the row before.
                let i = match pick {
                    Err(at) => at.index(rows.len()),
                    Ok(step) => (last + step) % rows.len(),
                };
                let r = cursor.row(i, &mut ids);
                prop_assert_eq!(&(bits(&r), ids.clone()), &want[i], "row {}", i);
                last = i;
            }
        }
    }
}
