//! A borrowed view of one trace record (ARCHITECTURE.md §1).
//!
//! The scanner walks the top-level object once, validating it as JSON, and
//! remembers where the value of each known field lies in the line. Nothing is
//! decoded until asked for, and everything else stays raw bytes, so a tool can
//! rewrite one value and copy the rest of the line untouched. A hand-written
//! scanner is used rather than a DOM parser because a Mooncake line is mostly
//! the `hash_ids` array, which most tools need only to skip (see
//! `benches/parse.rs` and docs/ARCHITECTURE.md for the comparison with
//! simd-json and serde_json).
//!
//! `scan` validates a line and finds the fields, `ids` is the one walker
//! over id arrays, `write` writes edited records, new rows and values.

mod ids;
mod renumber;
mod scan;
mod write;

pub(crate) use ids::{eight_digits, put_decimal};
pub use ids::{id_array_shape, read_id_array, IdArrayShape};
pub use renumber::namespace_id;
pub use write::{write_id_array, write_id_array_like, write_number, write_str, Edit, RowWriter};

use crate::error::RecordError;

/// A byte range in the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

/// A JSON number as written: integers stay integers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    /// An integer that fits i64 (what parsing gives for every integer up to
    /// 2^63 − 1).
    Int(i64),
    /// A non-negative integer: what counts are written as, and what parsing
    /// gives for integers above i64::MAX, so no u64 is cast to i64.
    UInt(u64),
    Float(f64),
}

impl Number {
    pub fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::UInt(u) => u as f64,
            Number::Float(f) => f,
        }
    }
}

/// The fields every tool knows; all others are left as raw bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Timestamp,
    SessionId,
    Delay,
    InputLength,
    OutputLength,
    HashIds,
    TextInput,
    Messages,
    Tools,
    Extra,
    /// The agent-graph fields (docs/guide/agents.md, `graph`): known to the
    /// scanner so tools can rewrite them in place (mc-merge's id namespaces,
    /// mc-scale's tool waits, mc-cap's re-wiring).
    RequestId,
    WaitFor,
    Branches,
    ToolWaitMs,
    PrefixReset,
}

const FIELDS: usize = 15;

impl Field {
    pub fn name(self) -> &'static str {
        FIELD_NAMES[self as usize]
    }

    /// The field a key names. Keys are told apart by their length and two
    /// words (`key_words`), one compare each: a match on byte strings
    /// called `memcmp` per candidate, 40 instructions a key (cachegrind,
    /// docs/decisions/0029-ids-scanned-sixty-four-bytes.md).
    fn from_key(key: &[u8]) -> Option<Field> {
        use Field::*;
        let words = key_words(key)?;
        let candidates: &[Field] = match key.len() {
            5 => &[Delay, Tools, Extra],
            8 => &[HashIds, Messages, WaitFor, Branches],
            9 => &[Timestamp],
            10 => &[SessionId, TextInput, RequestId],
            12 => &[InputLength, ToolWaitMs, PrefixReset],
            13 => &[OutputLength],
            _ => return None,
        };
        candidates
            .iter()
            .copied()
            .find(|&f| KEY_WORDS[f as usize] == words)
    }

    /// The byte-string match `from_key` stands for (the tests hold it to it).
    #[cfg(test)]
    fn from_key_slow(key: &[u8]) -> Option<Field> {
        Some(match key {
            b"timestamp" => Field::Timestamp,
            b"session_id" => Field::SessionId,
            b"delay" => Field::Delay,
            b"input_length" => Field::InputLength,
            b"output_length" => Field::OutputLength,
            b"hash_ids" => Field::HashIds,
            b"text_input" => Field::TextInput,
            b"messages" => Field::Messages,
            b"tools" => Field::Tools,
            b"extra" => Field::Extra,
            b"request_id" => Field::RequestId,
            b"wait_for" => Field::WaitFor,
            b"branches" => Field::Branches,
            b"tool_wait_ms" => Field::ToolWaitMs,
            b"prefix_reset" => Field::PrefixReset,
            _ => return None,
        })
    }
}

/// Every field's key as [`key_words`] gives it, in `Field` order.
const KEY_WORDS: [(u64, u64); FIELDS] = {
    let mut words = [(0, 0); FIELDS];
    let mut k = 0;
    while k < FIELDS {
        words[k] = match key_words_const(FIELD_NAMES[k].as_bytes()) {
            Some(w) => w,
            None => panic!("a key of 4 to 16 bytes"),
        };
        k += 1;
    }
    words
};

const FIELD_NAMES: [&str; FIELDS] = [
    "timestamp",
    "session_id",
    "delay",
    "input_length",
    "output_length",
    "hash_ids",
    "text_input",
    "messages",
    "tools",
    "extra",
    "request_id",
    "wait_for",
    "branches",
    "tool_wait_ms",
    "prefix_reset",
];

/// A key of 4 to 16 bytes as two words that, with its length, tell it
/// apart: its first and last eight bytes (overlapping under 16), or for a
/// key under 8 its first and last four. `None` for other lengths.
#[inline]
fn key_words(key: &[u8]) -> Option<(u64, u64)> {
    let n = key.len();
    if n >= 8 {
        let first = u64::from_le_bytes(*key.first_chunk::<8>()?);
        let last = u64::from_le_bytes(*key.last_chunk::<8>()?);
        (n <= 16).then_some((first, last))
    } else {
        let first = u32::from_le_bytes(*key.first_chunk::<4>()?);
        let last = u32::from_le_bytes(*key.last_chunk::<4>()?);
        Some((u64::from(first), u64::from(last)))
    }
}

/// [`key_words`] for the constant table.
const fn key_words_const(key: &[u8]) -> Option<(u64, u64)> {
    let n = key.len();
    if n < 4 || n > 16 {
        return None;
    }
    let size = if n >= 8 { 8 } else { 4 };
    let (mut first, mut last) = (0u64, 0u64);
    let mut k = 0;
    while k < size {
        first |= (key[k] as u64) << (8 * k);
        last |= (key[n - size + k] as u64) << (8 * k);
        k += 1;
    }
    Some((first, last))
}

/// One record: the line and where its known fields' values are.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    line: &'a [u8],
    /// Each known field's value as (start, end), `end` 0 when absent (a
    /// value never ends at 0): in `u32`s, as lines are under 4 GiB
    /// ([`Record::parse`]), so the record is 120 bytes of spans rather than
    /// 360 of `Option<Span>` to set and copy for every row (two 408-byte
    /// `memcpy` calls a row before; docs/decisions/0036-one-pass-plain-lines.md).
    spans: [(u32, u32); FIELDS],
    /// Position of the closing `}` of the object.
    close: usize,
    /// True when the object has at least one member.
    has_members: bool,
    /// Known from the scan when `hash_ids` is an array of plain integers.
    hash_ids_shape: Option<IdArrayShape>,
}

impl<'a> Record<'a> {
    pub fn line(&self) -> &'a [u8] {
        self.line
    }

    /// The raw bytes of a known field's value, if present.
    pub fn raw(&self, f: Field) -> Option<&'a [u8]> {
        self.span(f).map(|s| &self.line[s.start..s.end])
    }

    #[inline]
    pub fn span(&self, f: Field) -> Option<Span> {
        let (start, end) = self.spans[f as usize];
        (end != 0).then_some(Span {
            start: start as usize,
            end: end as usize,
        })
    }

    pub fn has(&self, f: Field) -> bool {
        self.spans[f as usize].1 != 0
    }

    /// Records where field `f`'s value lies (`start < end <= line.len()`,
    /// which the parser made sure fits `u32`).
    #[inline]
    fn set_span(&mut self, f: Field, start: usize, end: usize) {
        self.spans[f as usize] = (start as u32, end as u32);
    }

    /// The value of field `f` when it is 1 to 8 digits and the line has
    /// eight bytes from its start: read with one load (`ids::eight_digits`),
    /// where the byte loop of `parse_number` and `parse_uint` was ~100
    /// instructions for a timestamp (cachegrind, decision 0039). `None`
    /// for anything else, which the callers read their usual way.
    #[inline]
    fn short_digits(&self, f: Field) -> Option<u64> {
        let (start, end) = self.spans[f as usize];
        let (start, len) = (start as usize, end.wrapping_sub(start) as usize);
        if end == 0 || !(1..=8).contains(&len) {
            return None;
        }
        let x = u64::from_le_bytes(*self.line.get(start..)?.first_chunk::<8>()?);
        let digits = (ids::not_digits(x).trailing_zeros() / 8) as usize;
        (digits >= len).then(|| ids::eight_digits(x, len))
    }

    /// A field that is absent or `null` reads as `None`.
    fn present(&self, f: Field) -> Option<&'a [u8]> {
        self.raw(f).filter(|v| *v != b"null")
    }

    /// A non-negative integer field (`input_length`, `output_length`).
    pub fn uint(&self, f: Field) -> Result<Option<u64>, RecordError> {
        if let Some(v) = self.short_digits(f) {
            return Ok(Some(v));
        }
        let Some(raw) = self.present(f) else {
            return Ok(None);
        };
        parse_uint(raw).map(Some).ok_or_else(|| {
            RecordError::field(
                f.name(),
                format!("expected a non-negative integer, found {}", shorten(raw)),
            )
        })
    }

    /// A numeric field (`timestamp`, `delay`).
    pub fn number(&self, f: Field) -> Result<Option<Number>, RecordError> {
        if let Some(v) = self.short_digits(f) {
            // Below 10^8: what `parse_number` gives, an `Int`.
            return Ok(Some(Number::Int(v as i64)));
        }
        let Some(raw) = self.present(f) else {
            return Ok(None);
        };
        parse_number(raw).map(Some).ok_or_else(|| {
            RecordError::field(
                f.name(),
                format!("expected a number, found {}", shorten(raw)),
            )
        })
    }

    /// [`Record::number`] as `f64`: a value of one to eight digits read
    /// inline (`short_digits`), an absent field at once, the
    /// rest by `number`. For mc-analyze's four numbers a row, where the
    /// call to `number` was about 60 instructions each (cachegrind,
    /// decision 0051's last section).
    #[inline]
    pub fn number_f64(&self, f: Field) -> Result<Option<f64>, RecordError> {
        if let Some(v) = self.short_digits(f) {
            return Ok(Some(v as f64));
        }
        if !self.has(f) {
            return Ok(None);
        }
        self.number(f).map(|n| n.map(Number::as_f64))
    }

    /// The session id as raw JSON (a string with its quotes, or a number):
    /// equal raw values name the same session.
    pub fn session_id(&self) -> Result<Option<&'a [u8]>, RecordError> {
        let Some(raw) = self.present(Field::SessionId) else {
            return Ok(None);
        };
        match raw[0] {
            b'"' | b'-' | b'0'..=b'9' => Ok(Some(raw)),
            _ => Err(RecordError::field(
                "session_id",
                format!("expected a string or a number, found {}", shorten(raw)),
            )),
        }
    }

    /// Decodes `hash_ids` into `out` (cleared first). Returns false when the
    /// field is absent or null.
    pub fn hash_ids_into(&self, out: &mut Vec<u64>) -> Result<bool, RecordError> {
        out.clear();
        if self.present(Field::HashIds).is_none() {
            return Ok(false);
        }
        let (open, end) = self.spans[Field::HashIds as usize];
        ids::decode_in(
            self.line,
            (open as usize, end as usize),
            self.hash_ids_shape,
            out,
        )
        .map_err(|msg| RecordError::field("hash_ids", msg))?;
        Ok(true)
    }

    /// Writes `hash_ids` to `out` with every id `h` replaced by `f(h)`, in
    /// the spacing of the original (what [`write_id_array_like`] writes
    /// for the decoded ids, mapped), and returns the number of ids; `None`
    /// (nothing written) when the field is absent or null. The errors are
    /// [`Record::hash_ids_into`]'s and `f`'s; on one, `out` is as it was.
    /// An array the scan proved is read, mapped and written in one pass,
    /// without a list of ids in between (mc-roots, mc-merge's id
    /// namespaces; docs/decisions/0036-one-pass-plain-lines.md).
    pub fn map_hash_ids(
        &self,
        out: &mut Vec<u8>,
        mut f: impl FnMut(u64) -> Result<u64, RecordError>,
    ) -> Result<Option<usize>, RecordError> {
        let Some(raw) = self.present(Field::HashIds) else {
            return Ok(None);
        };
        let compact = write::compact_spacing(raw);
        if let Some(shape) = self.hash_ids_shape.filter(|s| s.longest_digits <= 19) {
            if compact {
                ids::map_proven(raw, shape.count, b",", out, f)?;
            } else {
                ids::map_proven(raw, shape.count, b", ", out, f)?;
            }
            return Ok(Some(shape.count));
        }
        let mut list = Vec::new();
        ids::decode(raw, self.hash_ids_shape, &mut list)
            .map_err(|msg| RecordError::field("hash_ids", msg))?;
        for id in &mut list {
            *id = f(*id)?;
        }
        write_id_array_like(&list, Some(raw), out);
        Ok(Some(list.len()))
    }

    /// [`Record::map_hash_ids`] by the namespacing rule ([`namespace_id`]):
    /// id `h` becomes `h*k + t`, and `overflow(h)` is the error of an id
    /// for which that does not fit 64 bits. An array the scan proved whose
    /// new ids all have at most eight digits is rewritten four ids at a
    /// time on AVX2 (`renumber`), the rest by `map_hash_ids`; both write
    /// the same bytes.
    pub fn namespace_hash_ids(
        &self,
        out: &mut Vec<u8>,
        (k, t): (u64, u64),
        overflow: impl Fn(u64) -> RecordError,
    ) -> Result<Option<usize>, RecordError> {
        if let (Some(shape), Some(span)) = (self.hash_ids_shape, self.span(Field::HashIds)) {
            let raw = &self.line[span.start..span.end];
            let (at, shape) = ((span.start, span.end), (shape.count, shape.longest_digits));
            let done = if write::compact_spacing(raw) {
                renumber::namespace_fast(self.line, at, shape, (k, t), b",", out)
            } else {
                renumber::namespace_fast(self.line, at, shape, (k, t), b", ", out)
            };
            if done {
                return Ok(Some(shape.0));
            }
        }
        self.namespace_hash_ids_slowly(out, (k, t), overflow)
    }

    /// [`Record::namespace_hash_ids`] for the arrays its fast path does
    /// not take. Out of line so the fast path's code is only its own:
    /// with `map_hash_ids` inlined there, how the compiler placed the
    /// loads before the fast path moved from build to build (mc-roots'
    /// `namespace_hash_ids` 5.53 M or 6.00 M instructions on the 16 MB
    /// slice for the same source; cachegrind, decision 0051).
    #[cold]
    #[inline(never)]
    fn namespace_hash_ids_slowly(
        &self,
        out: &mut Vec<u8>,
        (k, t): (u64, u64),
        overflow: impl Fn(u64) -> RecordError,
    ) -> Result<Option<usize>, RecordError> {
        self.map_hash_ids(out, |h| namespace_id(h, k, t).ok_or_else(|| overflow(h)))
    }

    /// The shape of `hash_ids` (count, longest id in digits) without
    /// decoding it; `None` when absent or null.
    pub fn hash_ids_shape(&self) -> Result<Option<IdArrayShape>, RecordError> {
        if self.hash_ids_shape.is_some() {
            return Ok(self.hash_ids_shape);
        }
        let Some(raw) = self.present(Field::HashIds) else {
            return Ok(None);
        };
        id_array_shape(raw)
            .map(Some)
            .map_err(|msg| RecordError::field("hash_ids", msg))
    }

    /// Number of ids in `hash_ids`, without decoding them.
    pub fn hash_ids_len(&self) -> Result<Option<usize>, RecordError> {
        Ok(self.hash_ids_shape()?.map(|s| s.count))
    }
}

/// A value for messages: at most 40 bytes of it.
pub(crate) fn shorten(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw);
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s.into_owned()
    }
}

/// A JSON integer ≥ 0 that fits u64 (`12`, not `12.0` or `1e3`).
pub fn parse_uint(raw: &[u8]) -> Option<u64> {
    if raw.is_empty() || raw.len() > 20 {
        return None;
    }
    // Up to 19 digits cannot overflow: one test a digit, no checked
    // arithmetic (cachegrind: `uint` was 80 instructions a row in mc-cap;
    // docs/decisions/0039-filters-under-five-instructions-a-byte.md).
    if raw.len() <= 19 {
        let mut v: u64 = 0;
        for &b in raw {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                return None;
            }
            v = v * 10 + u64::from(d);
        }
        return Some(v);
    }
    let mut v: u64 = 0;
    for &b in raw {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}

/// A validated JSON number: `Int` when written without fraction or exponent.
pub fn parse_number(raw: &[u8]) -> Option<Number> {
    // The common case, a small non-negative integer, without going
    // through str, in one pass over its digits.
    if raw.len() <= 18 && !raw.is_empty() {
        let mut v = 0i64;
        let mut digits = true;
        for &b in raw {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                digits = false;
                break;
            }
            v = v * 10 + i64::from(d);
        }
        if digits {
            return Some(Number::Int(v));
        }
    }
    let is_int = !raw.iter().any(|b| matches!(b, b'.' | b'e' | b'E'));
    let text = std::str::from_utf8(raw).ok()?;
    if !matches!(raw.first(), Some(b'-' | b'0'..=b'9')) {
        return None;
    }
    if is_int {
        if let Ok(i) = text.parse::<i64>() {
            return Some(Number::Int(i));
        }
        if let Ok(u) = text.parse::<u64>() {
            return Some(Number::UInt(u));
        }
    }
    text.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .map(Number::Float)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(s: &str) -> Record<'_> {
        Record::parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn finds_known_fields_and_leaves_others_raw() {
        let r = rec(
            r#"{"timestamp": 27482, "x": {"a": [1, {"b": null}]}, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 2353]}"#,
        );
        assert_eq!(
            r.number(Field::Timestamp).unwrap(),
            Some(Number::Int(27482))
        );
        assert_eq!(r.uint(Field::InputLength).unwrap(), Some(6955));
        assert_eq!(r.uint(Field::OutputLength).unwrap(), Some(52));
        let mut ids = Vec::new();
        assert!(r.hash_ids_into(&mut ids).unwrap());
        assert_eq!(ids, vec![46, 47, 2353]);
        assert_eq!(r.hash_ids_len().unwrap(), Some(3));
        assert_eq!(r.raw(Field::Delay), None);
        assert_eq!(r.session_id().unwrap(), None);
    }

    #[test]
    fn keys_are_found_by_their_words_as_by_their_bytes() {
        let mut keys: Vec<Vec<u8>> = FIELD_NAMES.iter().map(|k| k.as_bytes().to_vec()).collect();
        for name in FIELD_NAMES {
            let b = name.as_bytes();
            // Each key cut, grown and with each byte changed.
            keys.push(b[..b.len() - 1].to_vec());
            keys.push([b, b"s"].concat());
            for at in 0..b.len() {
                let mut k = b.to_vec();
                k[at] ^= 0x20;
                keys.push(k);
            }
        }
        keys.extend(
            [
                &b""[..],
                b"a",
                b"abcd",
                b"timestamp_x",
                b"xxxxxxxxxxxxxxxxxx",
            ]
            .map(<[u8]>::to_vec),
        );
        for k in keys {
            assert_eq!(
                Field::from_key(&k),
                Field::from_key_slow(&k),
                "{}",
                String::from_utf8_lossy(&k)
            );
        }
        for (k, name) in FIELD_NAMES.iter().enumerate() {
            let f = Field::from_key(name.as_bytes()).unwrap();
            assert_eq!((f as usize, f.name()), (k, *name));
        }
    }

    proptest::proptest! {
        /// The one-pass rewrite writes what decoding, mapping and writing
        /// the list writes: every spacing, ids of every length (long ones
        /// off the proven path), in a line among other fields.
        #[test]
        fn ids_mapped_in_one_pass_are_the_list_mapped_and_written(
            ids in proptest::collection::vec(proptest::prop_oneof![
                0u64..1000, 0u64..100_000_000, 0u64..u64::MAX / 8], 0..40),
            seps in proptest::collection::vec(proptest::prop_oneof![
                proptest::strategy::Just(", "), proptest::strategy::Just(","),
                proptest::strategy::Just(" , "), proptest::strategy::Just(",\n")], 1..3),
            k in 1u64..9,
            t in 0u64..8,
        ) {
            let mut text = String::from("[");
            for (n, id) in ids.iter().enumerate() {
                if n > 0 {
                    text.push_str(seps[n % seps.len()]);
                }
                text.push_str(&id.to_string());
            }
            text.push(']');
            let line = format!(r#"{{"timestamp": 1, "hash_ids": {text}, "x": [1, 2]}}"#);
            let r = rec(&line);
            let f = |h: u64| Ok(h * k + t);
            let mut one_pass = b"before".to_vec();
            let count = r.map_hash_ids(&mut one_pass, f).unwrap();
            let mut list = Vec::new();
            r.hash_ids_into(&mut list).unwrap();
            let mapped: Vec<u64> = list.iter().map(|&h| h * k + t).collect();
            let mut expected = b"before".to_vec();
            write_id_array_like(&mapped, r.raw(Field::HashIds), &mut expected);
            proptest::prop_assert_eq!(count, Some(ids.len()));
            proptest::prop_assert_eq!(String::from_utf8_lossy(&one_pass), String::from_utf8_lossy(&expected));
        }
    }

    #[test]
    fn a_failed_mapping_leaves_the_output_as_it_was() {
        let mut out = b"kept".to_vec();
        for line in [
            r#"{"hash_ids": [1, 2, 3]}"#,
            r#"{"hash_ids": [1, 2, 99999999999999999999]}"#,
        ] {
            let err = rec(line)
                .map_hash_ids(&mut out, |h| {
                    if h == 2 {
                        Err(RecordError::field("hash_ids", "two"))
                    } else {
                        Ok(h)
                    }
                })
                .unwrap_err();
            assert!(err.to_string().contains("hash_ids"), "{err}");
            assert_eq!(out, b"kept");
        }
        assert_eq!(
            rec(r#"{"hash_ids": null}"#)
                .map_hash_ids(&mut out, Ok)
                .unwrap(),
            None
        );
        assert_eq!(rec("{}").map_hash_ids(&mut out, Ok).unwrap(), None);
        assert_eq!(out, b"kept");
    }

    /// The one-load read of short values gives what the byte loops give,
    /// for values of every length at every place in a line (ending it, or
    /// with eight bytes or more after them).
    #[test]
    fn short_values_read_as_the_byte_loops_read_them() {
        for v in [
            0u64,
            7,
            10,
            99,
            4217,
            99_999_999,
            100_000_000,
            123_456_789_012,
        ] {
            for pad in ["", " ", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"] {
                for tail in ["}", ", \"hash_ids\": [1, 2, 3]}"] {
                    let line =
                        format!(r#"{{"p": "{pad}", "timestamp": {v}, "output_length": {v}{tail}"#);
                    let r = rec(&line);
                    let raw = r.raw(Field::Timestamp).unwrap();
                    assert_eq!(
                        r.number(Field::Timestamp).unwrap(),
                        parse_number(raw),
                        "{line}"
                    );
                    assert_eq!(
                        r.uint(Field::OutputLength).unwrap(),
                        parse_uint(raw),
                        "{line}"
                    );
                    assert_eq!(
                        r.number_f64(Field::Timestamp).unwrap(),
                        parse_number(raw).map(Number::as_f64),
                        "{line}"
                    );
                }
            }
        }
        for odd in ["null", "-5", "1.5", "1e3", "\"7\""] {
            let line = format!(
                r#"{{"timestamp": {odd}, "output_length": {odd}, "x": "padding for a load"}}"#
            );
            let r = rec(&line);
            let raw = r.present(Field::Timestamp);
            assert_eq!(
                r.number(Field::Timestamp).ok().flatten(),
                raw.and_then(parse_number),
                "{line}"
            );
            assert_eq!(
                r.uint(Field::OutputLength).ok().flatten(),
                raw.and_then(parse_uint),
                "{line}"
            );
            // The same value or the same error as `number`'s.
            assert_eq!(
                format!("{:?}", r.number_f64(Field::Timestamp)),
                format!(
                    "{:?}",
                    r.number(Field::Timestamp).map(|n| n.map(Number::as_f64))
                ),
                "{line}"
            );
            assert_eq!(r.number_f64(Field::Delay).unwrap(), None);
        }
    }

    #[test]
    fn numbers_keep_their_kind() {
        let r = rec(r#"{"timestamp": 1.5e3, "delay": -0.25}"#);
        assert_eq!(
            r.number(Field::Timestamp).unwrap(),
            Some(Number::Float(1500.0))
        );
        assert_eq!(r.number(Field::Delay).unwrap(), Some(Number::Float(-0.25)));
        assert_eq!(
            rec(r#"{"delay":7}"#).number(Field::Delay).unwrap(),
            Some(Number::Int(7))
        );
        // Above i64::MAX an integer stays an exact integer, not a float.
        assert_eq!(
            rec(r#"{"timestamp": 18446744073709551615}"#)
                .number(Field::Timestamp)
                .unwrap(),
            Some(Number::UInt(u64::MAX))
        );
        assert_eq!(
            rec(r#"{"timestamp": 18446744073709551616}"#)
                .number(Field::Timestamp)
                .unwrap(),
            Some(Number::Float(18446744073709551616.0))
        );
    }

    #[test]
    fn null_reads_as_absent_and_empty_arrays_are_empty() {
        let r = rec(r#"{"hash_ids": [ ], "input_length": null}"#);
        assert_eq!(r.uint(Field::InputLength).unwrap(), None);
        let mut ids = vec![9];
        assert!(r.hash_ids_into(&mut ids).unwrap());
        assert!(ids.is_empty());
        assert_eq!(r.hash_ids_len().unwrap(), Some(0));
    }

    #[test]
    fn wrong_types_name_the_field() {
        assert_eq!(
            rec(r#"{"input_length": "12"}"#)
                .uint(Field::InputLength)
                .unwrap_err()
                .to_string(),
            r#"field `input_length`: expected a non-negative integer, found "12""#
        );
        assert_eq!(
            rec(r#"{"input_length": 12.5}"#)
                .uint(Field::InputLength)
                .unwrap_err()
                .to_string(),
            "field `input_length`: expected a non-negative integer, found 12.5"
        );
        assert_eq!(
            rec(r#"{"timestamp": "0"}"#)
                .number(Field::Timestamp)
                .unwrap_err()
                .to_string(),
            r#"field `timestamp`: expected a number, found "0""#
        );
        let mut ids = Vec::new();
        assert_eq!(
            rec(r#"{"hash_ids": [1, -2]}"#)
                .hash_ids_into(&mut ids)
                .unwrap_err()
                .to_string(),
            "field `hash_ids`: expected non-negative integer ids, found -2"
        );
        assert_eq!(
            rec(r#"{"hash_ids": {"0": 1}}"#)
                .hash_ids_into(&mut ids)
                .unwrap_err()
                .to_string(),
            r#"field `hash_ids`: expected an array, found {"0": 1}"#
        );
        assert!(rec(r#"{"hash_ids": [1.5]}"#)
            .hash_ids_into(&mut ids)
            .is_err());
        assert!(rec(r#"{"hash_ids": ["1"]}"#).hash_ids_len().is_err());
        assert!(rec(r#"{"hash_ids": [1, -2]}"#).hash_ids_len().is_err());
        assert!(rec(r#"{"hash_ids": [[1, 2]]}"#).hash_ids_len().is_err());
        assert!(rec(r#"{"hash_ids": [[1, 2]]}"#)
            .hash_ids_into(&mut ids)
            .is_err());
        assert_eq!(
            rec(r#"{"x": [1], "hash_ids": [ ]}"#)
                .hash_ids_len()
                .unwrap(),
            Some(0)
        );
        assert_eq!(
            rec(r#"{"hash_ids": [5, 6], "x": [1]}"#)
                .hash_ids_len()
                .unwrap(),
            Some(2)
        );
        assert!(rec(r#"{"hash_ids": [1.5]}"#).hash_ids_len().is_err());
        assert_eq!(
            rec(r#"{"hash_ids": [7, 123456, 0]}"#)
                .hash_ids_shape()
                .unwrap(),
            Some(IdArrayShape {
                count: 3,
                longest_digits: 6
            })
        );
        assert!(rec(r#"{"session_id": [1]}"#).session_id().is_err());
    }
}
