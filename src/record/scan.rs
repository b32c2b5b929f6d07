//! The validating scan of one line: walks the top-level object once and
//! remembers where each known field's value lies.

use super::ids::{self, IdArrayShape};
use super::{shorten, Field, Record, FIELDS};
use crate::error::RecordError;

/// Nesting limit for values we only skip, so a hostile line cannot overflow the stack.
const MAX_DEPTH: usize = 256;

impl<'a> Record<'a> {
    /// Scans and validates one line holding one JSON object.
    pub fn parse(line: &'a [u8]) -> Result<Record<'a>, RecordError> {
        // The plain path checks the UTF-8 of the strings it steps over
        // (every other byte it takes is ASCII), so a line it takes needs
        // no pass of its own for it.
        if u32::try_from(line.len()).is_ok() {
            if let Some(rec) = parse_plain::<false>(line) {
                return Ok(rec);
            }
        }
        // An ASCII line (nearly every one) is valid UTF-8: the OR of its
        // bytes, which the compiler does sixteen bytes at a time, saves
        // most of `from_utf8`'s 0.8 instructions a byte (cachegrind,
        // docs/decisions/0029-ids-scanned-sixty-four-bytes.md).
        if !all_ascii(line) && std::str::from_utf8(line).is_err() {
            return Err(RecordError::new("invalid UTF-8"));
        }
        // Spans are kept in `u32`s (`Record::spans`); `--max-line-bytes`
        // is 64 MiB unless raised this far.
        if u32::try_from(line.len()).is_err() {
            return Err(RecordError::new(
                "a line of 4 GiB or more: records are read from shorter lines",
            ));
        }
        Record::parse_general(line)
    }

    /// [`Record::parse`] into `rec` (from [`Record::slot`], or any
    /// record: it is overwritten), decoding the ids of `hash_ids` into
    /// `ids` as the scan walks them when it can: true when it did, and
    /// `ids` then holds what [`Record::hash_ids_into`] would give
    /// (`Ok(true)`); when false, `ids` holds nothing of use and the ids are
    /// `hash_ids_into`'s to read (and to refuse, in its words). The same
    /// record, and the same errors, as `parse`. For a reader that decodes
    /// every row's ids (mc-analyze): the walk and the decode were two
    /// passes over the same bytes, and the record returned by value was
    /// copied twice a row (`memcpy`; docs/decisions/0051-ids-decoded-four-at-a-time.md).
    pub fn parse_decoding_ids(
        line: &'a [u8],
        rec: &mut Record<'a>,
        ids: &mut Vec<u64>,
    ) -> Result<bool, RecordError> {
        if u32::try_from(line.len()).is_ok() {
            if let Some(decoded) = scan_plain::<false, true>(line, rec, ids) {
                return Ok(decoded);
            }
        }
        // `parse` tries the plain path again: rare lines, the same verdict.
        *rec = Record::parse(line)?;
        Ok(false)
    }

    /// [`Record::parse_line_into`] that also decodes the ids of
    /// `hash_ids` into `ids` as [`Record::parse_decoding_ids`] does:
    /// returns where the next line starts and whether `ids` holds them.
    /// For mc-analyze's one-thread reader, which reads lines where they
    /// lie in its read buffer as the filters do (decision 0039).
    #[inline]
    pub fn parse_line_decoding_ids(
        buf: &'a [u8],
        rec: &mut Record<'a>,
        ids: &mut Vec<u64>,
    ) -> Option<(usize, bool)> {
        let most = buf.len().min(u32::MAX as usize);
        let decoded = scan_plain::<true, true>(&buf[..most], rec, ids)?;
        let end = rec.line.len();
        Some((end + 1 + usize::from(buf[end] == b'\r'), decoded))
    }

    /// The record at the start of `buf` when it is a line in the plain
    /// form (`parse_plain`) ended by `\n` or `\r\n`: the record's line
    /// is the bytes before that ending (its `\n` the first in `buf`: the
    /// plain form holds none). `None` for anything else, which the caller then cuts at its
    /// `\n` and gives to [`Record::parse`] (the verdict is the same for
    /// every line this takes). For the line loop of the filters, which
    /// parses lines where they lie in its read buffer instead of finding
    /// each `\n` first (docs/decisions/0039-filters-under-five-instructions-a-byte.md).
    /// `buf` may be longer than 4 GiB; only its first 4 GiB are looked at.
    /// Returns the record and where the next line starts: after the `\n`,
    /// or after `\r\n` (the reader drops a line's last `\r`).
    #[inline]
    pub fn parse_line_at(buf: &'a [u8]) -> Option<(Record<'a>, usize)> {
        let mut rec = Record::slot();
        let next = Record::parse_line_into(buf, &mut rec)?;
        Some((rec, next))
    }

    /// [`Record::parse_line_at`] into `rec` (from [`Record::slot`], or
    /// any record: it is overwritten; on `None` it holds no record),
    /// returning where the next line starts: the record stays where the
    /// caller keeps it, not copied out (decision 0039).
    #[inline]
    pub fn parse_line_into(buf: &'a [u8], rec: &mut Record<'a>) -> Option<usize> {
        let most = buf.len().min(u32::MAX as usize);
        parse_plain_into::<true>(&buf[..most], rec)?;
        let end = rec.line.len();
        Some(end + 1 + usize::from(buf[end] == b'\r'))
    }

    /// A place for [`Record::parse_line_into`] to parse into: the record
    /// of no line, with no fields.
    #[inline]
    pub fn slot() -> Record<'a> {
        Record {
            line: &[],
            spans: [(0, 0); FIELDS],
            close: 0,
            has_members: false,
            hash_ids_shape: None,
        }
    }

    /// The scan of any line (UTF-8 already checked): every JSON form,
    /// and the errors with their messages.
    fn parse_general(line: &'a [u8]) -> Result<Record<'a>, RecordError> {
        let mut s = Scanner {
            b: line,
            i: 0,
            int_array: None,
        };
        s.ws();
        if s.peek() != Some(b'{') {
            return Err(RecordError::new(match s.peek() {
                None => "empty line".to_string(),
                Some(_) => format!("expected a JSON object, found {}", s.describe()),
            }));
        }
        s.i += 1;
        let mut rec = Record {
            line,
            spans: [(0, 0); FIELDS],
            close: 0,
            has_members: false,
            hash_ids_shape: None,
        };
        s.ws();
        if s.peek() == Some(b'}') {
            rec.close = s.i;
            s.i += 1;
        } else {
            loop {
                s.ws();
                let key = s.key()?;
                s.ws();
                s.expect(b':', "`:` after an object key")?;
                s.ws();
                let start = s.i;
                s.int_array = None;
                s.value(0)?;
                if let Some(f) = key {
                    rec.set_span(f, start, s.i);
                    if f == Field::HashIds {
                        rec.hash_ids_shape = s.int_array.filter(|_| line[start] == b'[');
                    }
                }
                rec.has_members = true;
                s.ws();
                match s.peek() {
                    Some(b',') => s.i += 1,
                    Some(b'}') => {
                        rec.close = s.i;
                        s.i += 1;
                        break;
                    }
                    _ => return Err(s.unexpected("`,` or `}`")),
                }
            }
        }
        s.ws();
        if s.i != line.len() {
            return Err(s.unexpected("end of line after the object"));
        }
        Ok(rec)
    }
}

/// The scan of a line in the form the Mooncake traces and the toolkit's
/// writers give it (`{"key": value, "key": value}`: no whitespace but one
/// space after `:` and `,`, keys without escapes, values that are plain
/// integers, simple decimals, strings without escapes, `null` or id
/// arrays [`ids::walk_fast`] takes), stepping over each part with SWAR
/// runs instead of the general scanner's byte loop. `None` for anything
/// else: [`Record::parse_general`] then decides, so this path only has to
/// be right about what it accepts (property tests hold it to the general
/// scan), and every error and its message stays the general scan's. The
/// ~75 bytes before `hash_ids` cost the general scan ~1,390 instructions
/// a row (cachegrind, docs/decisions/0036-one-pass-plain-lines.md).
///
/// With `UNTIL_NEWLINE`, `line` is where a line starts in a larger buffer,
/// and the record ends at a `}` followed by `\n` (the record's line is cut
/// there); else the record is the whole of `line`.
#[inline]
fn parse_plain<const UNTIL_NEWLINE: bool>(line: &[u8]) -> Option<Record<'_>> {
    let mut rec = Record::slot();
    parse_plain_into::<UNTIL_NEWLINE>(line, &mut rec)?;
    Some(rec)
}

/// [`parse_plain`] into `rec`, whatever it held (on `None`, it holds a
/// part of the line's fields): for a caller that keeps the record where it
/// is, as copying a returned `Record` (176 bytes) was a `memcpy` call or
/// two a row (cachegrind, decision 0039).
#[inline(always)]
fn parse_plain_into<'a, const UNTIL_NEWLINE: bool>(
    line: &'a [u8],
    rec: &mut Record<'a>,
) -> Option<()> {
    scan_plain::<UNTIL_NEWLINE, false>(line, rec, &mut Vec::new()).map(|_| ())
}

/// [`parse_plain_into`], and with `DECODE` the ids of `hash_ids` decoded
/// into `ids` as the array is walked ([`ids::walk_fast_decoding`]):
/// returns whether `ids` then holds them (false when `hash_ids` is absent
/// or not an array, or on a CPU without AVX2). Without `DECODE`, `ids` is
/// not touched and the code is the scan's alone.
#[inline(always)]
fn scan_plain<'a, const UNTIL_NEWLINE: bool, const DECODE: bool>(
    line: &'a [u8],
    rec: &mut Record<'a>,
    ids: &mut Vec<u64>,
) -> Option<bool> {
    let mut decoded = false;
    let n = line.len();
    if n < 2 || line[0] != b'{' || line[1] != b'"' {
        return None;
    }
    rec.line = line;
    rec.spans = [(0, 0); FIELDS];
    rec.close = 0;
    rec.has_members = true;
    rec.hash_ids_shape = None;
    let mut i = 1;
    // The place in `EXPECTED` of the key the form puts next.
    let mut next = 0;
    loop {
        // The key, from its `"` (the caller or the separator checked it):
        // first as the one the Mooncake order puts here, else found by its
        // closing quote and looked up.
        let key_start = i + 1;
        let key = match expected_key(line, key_start, next) {
            Some((f, end)) => {
                i = end;
                next += 1;
                Some(f)
            }
            None => {
                let key_end = key_start + plain_run(line.get(key_start..)?);
                if line.get(key_end..key_end + 2)? != b"\":" {
                    return None;
                }
                utf8(&line[key_start..key_end])?;
                i = key_end + 2;
                let key = Field::from_key(&line[key_start..key_end]);
                // Expect next what follows this key in the order, if it is there.
                if let Some(q) = key.and_then(|f| EXPECTED.iter().position(|&e| e == f)) {
                    next = q + 1;
                }
                key
            }
        };
        if line.get(i) == Some(&b' ') {
            i += 1;
        }
        let start = i;
        let mut shape = None;
        // Whether this value's ids are in `ids`.
        let mut walked_ids = false;
        match *line.get(i)? {
            b'1'..=b'9' => {
                i += 1 + ids::digit_run(&line[i + 1..]);
                if line.get(i) == Some(&b'.') {
                    let fraction = ids::digit_run(line.get(i + 1..)?);
                    if fraction == 0 {
                        return None;
                    }
                    i += 1 + fraction;
                }
            }
            b'0' => {
                i += 1;
                // `0.5` and `01` are the general scan's.
                if line.get(i).is_some_and(u8::is_ascii_digit) || line.get(i) == Some(&b'.') {
                    return None;
                }
            }
            b'"' => {
                i += 1 + plain_run(&line[i + 1..]);
                if line.get(i) != Some(&b'"') {
                    return None;
                }
                utf8(&line[start + 1..i])?;
                i += 1;
            }
            b'[' if DECODE && key == Some(Field::HashIds) => {
                let (end, measured, done) = ids::walk_fast_decoding(line, i + 1, ids)?;
                shape = Some(measured);
                walked_ids = done;
                i = end;
            }
            b'[' => {
                let (end, measured) = ids::walk_fast(line, i + 1)?;
                shape = Some(measured);
                i = end;
            }
            b'n' if line.get(i..i + 4) == Some(b"null") => i += 4,
            _ => return None,
        }
        if let Some(f) = key {
            rec.set_span(f, start, i);
            if f == Field::HashIds {
                rec.hash_ids_shape = shape;
                // A key met twice: its last value is the field's.
                decoded = walked_ids;
            }
        }
        match line.get(i) {
            Some(b',') => {
                i += 1;
                if line.get(i) == Some(&b' ') {
                    i += 1;
                }
                if line.get(i) != Some(&b'"') {
                    return None;
                }
            }
            Some(b'}') if UNTIL_NEWLINE => {
                let ending = line.get(i + 1..).unwrap_or_default();
                if !(ending.starts_with(b"\n") || ending.starts_with(b"\r\n")) {
                    return None;
                }
                rec.line = &line[..i + 1];
                rec.close = i;
                return Some(decoded);
            }
            Some(b'}') if i + 1 == n => {
                rec.close = i;
                return Some(decoded);
            }
            _ => return None,
        }
    }
}

/// `Some` when `text` (a string's bytes, between its quotes) is UTF-8:
/// the plain path's one UTF-8 check, as every byte it takes outside
/// strings is ASCII. A line is UTF-8 exactly when each run between its
/// ASCII bytes is, so checking the strings checks the line.
#[inline]
fn utf8(text: &[u8]) -> Option<()> {
    (text.is_ascii() || std::str::from_utf8(text).is_ok()).then_some(())
}

/// The keys of a Mooncake row in the order its writers give them.
const EXPECTED: [Field; 4] = [
    Field::Timestamp,
    Field::InputLength,
    Field::OutputLength,
    Field::HashIds,
];

/// Each of [`EXPECTED`] as the 16 bytes `name":` starts with (zeros
/// after it) and the mask of its bytes, in two little-endian words.
const EXPECTED_WORDS: [([u64; 2], [u64; 2]); 4] = {
    let mut table = [([0; 2], [0; 2]); 4];
    let mut k = 0;
    while k < EXPECTED.len() {
        let name = FIELD_NAME_BYTES[EXPECTED[k] as usize];
        let len = name.len() + 2;
        assert!(len > 8 && len <= 16, "a key of 7 to 14 bytes");
        let mut at = 0;
        while at < len {
            let byte = if at < name.len() {
                name[at]
            } else if at == name.len() {
                b'"'
            } else {
                b':'
            };
            table[k].0[at / 8] |= (byte as u64) << (8 * (at % 8));
            table[k].1[at / 8] |= 0xFF << (8 * (at % 8));
            at += 1;
        }
        k += 1;
    }
    table
};

/// The field names as bytes, for the constant tables.
const FIELD_NAME_BYTES: [&[u8]; FIELDS] = {
    let mut names: [&[u8]; FIELDS] = [b""; FIELDS];
    let mut k = 0;
    while k < FIELDS {
        names[k] = super::FIELD_NAMES[k].as_bytes();
        k += 1;
    }
    names
};

/// Whether the key at `at` (just after its `"`) is `EXPECTED[next]`,
/// its `"` and `:` included: two loads and two masked compares, where
/// finding the closing quote and looking the key up cost ~90
/// instructions a key (cachegrind, decision 0036). Returns the field and
/// the index after the `:`. The bytes match only if the key is exactly
/// that name (the name has no `"`, `\` or control byte), so this is the
/// lookup's answer whenever it gives one.
#[inline]
fn expected_key(line: &[u8], at: usize, next: usize) -> Option<(Field, usize)> {
    let (words, mask) = EXPECTED_WORDS.get(next)?;
    let bytes = line.get(at..at + 16)?;
    let first = u64::from_le_bytes(*bytes.first_chunk::<8>()?);
    let second = u64::from_le_bytes(*bytes.last_chunk::<8>()?);
    if first & mask[0] != words[0] || second & mask[1] != words[1] {
        return None;
    }
    let field = EXPECTED[next];
    Some((field, at + FIELD_NAME_BYTES[field as usize].len() + 2))
}

/// A validating JSON scanner over one line.
struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    /// The shape of the last array of plain integers scanned, so `hash_ids`
    /// needs no second pass to be counted.
    int_array: Option<IdArrayShape>,
}

impl Scanner<'_> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn describe(&self) -> String {
        match self.peek() {
            None => "end of line".to_string(),
            Some(_) => {
                let rest = &self.b[self.i..];
                format!(
                    "`{}` at byte {}",
                    shorten(&rest[..rest.len().min(12)]),
                    self.i + 1
                )
            }
        }
    }

    fn unexpected(&self, wanted: &str) -> RecordError {
        RecordError::new(format!(
            "invalid JSON: expected {wanted}, found {}",
            self.describe()
        ))
    }

    #[inline]
    fn expect(&mut self, c: u8, wanted: &str) -> Result<(), RecordError> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.unexpected(wanted))
        }
    }

    /// An object key; escaped keys are decoded so `"\u0074imestamp"` is still found.
    #[inline]
    fn key(&mut self) -> Result<Option<Field>, RecordError> {
        if self.peek() != Some(b'"') {
            return Err(self.unexpected("an object key"));
        }
        let start = self.i;
        let escaped = self.string()?;
        if !escaped {
            return Ok(Field::from_key(&self.b[start + 1..self.i - 1]));
        }
        let text = std::str::from_utf8(&self.b[start..self.i])
            .map_err(|_| RecordError::new("invalid UTF-8"))?;
        let key =
            unescape(text).ok_or_else(|| RecordError::new("invalid JSON: bad escape in a key"))?;
        Ok(Field::from_key(&key))
    }

    /// Skips a string starting at `"`; returns whether it held escapes.
    #[inline]
    fn string(&mut self) -> Result<bool, RecordError> {
        self.i += 1;
        let mut escaped = false;
        loop {
            self.i += plain_run(&self.b[self.i..]);
            let Some(c) = self.peek() else {
                return Err(RecordError::new("invalid JSON: unterminated string"));
            };
            self.i += 1;
            match c {
                b'"' => return Ok(escaped),
                b'\\' => {
                    escaped = true;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 1,
                        Some(b'u') => {
                            let hex = self.b.get(self.i + 1..self.i + 5);
                            if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                                return Err(RecordError::new("invalid JSON: bad \\u escape"));
                            }
                            self.i += 5;
                        }
                        _ => return Err(RecordError::new("invalid JSON: bad escape in a string")),
                    }
                }
                0..=0x1f => {
                    return Err(RecordError::new(
                        "invalid JSON: control character in a string",
                    ))
                }
                _ => {}
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<(), RecordError> {
        match self.peek() {
            Some(b'"') => self.string().map(|_| ()),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'[') => self.array(depth + 1),
            Some(b'{') => self.object(depth + 1),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            _ => Err(self.unexpected("a value")),
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), RecordError> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(self.unexpected("a value"))
        }
    }

    #[inline]
    fn digits(&mut self) -> usize {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        self.i - start
    }

    /// The JSON number grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Result<(), RecordError> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.unexpected("a digit")),
        }
        // Most numbers are integers: no call for them.
        match self.peek() {
            Some(b'.' | b'e' | b'E') => self.fraction_and_exponent(),
            _ => Ok(()),
        }
    }

    fn fraction_and_exponent(&mut self) -> Result<(), RecordError> {
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(self.unexpected("a digit after `.`"));
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(self.unexpected("a digit in the exponent"));
            }
        }
        Ok(())
    }

    fn array(&mut self, depth: usize) -> Result<(), RecordError> {
        if depth > MAX_DEPTH {
            return Err(RecordError::new("invalid JSON: nested too deeply"));
        }
        if let Ok((end, shape)) = ids::measure(self.b, self.i + 1) {
            self.i = end;
            // Only a field's own value counts, not an array nested in it.
            if depth == 1 {
                self.int_array = Some(shape);
            }
            return Ok(());
        }
        self.i += 1;
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            // Fast path for the common element, a plain integer (hash ids).
            if let Some(b'1'..=b'9') = self.peek() {
                self.digits();
                if let Some(b'.' | b'e' | b'E') = self.peek() {
                    self.fraction_and_exponent()?;
                }
            } else {
                self.value(depth)?;
            }
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.unexpected("`,` or `]`")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<(), RecordError> {
        if depth > MAX_DEPTH {
            return Err(RecordError::new("invalid JSON: nested too deeply"));
        }
        self.i += 1;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(self.unexpected("an object key"));
            }
            self.string()?;
            self.ws();
            self.expect(b':', "`:` after an object key")?;
            self.ws();
            self.value(depth)?;
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.unexpected("`,` or `}`")),
            }
        }
    }
}

/// Whether every byte of `b` is ASCII.
#[inline]
fn all_ascii(b: &[u8]) -> bool {
    b.iter().fold(0u8, |seen, &c| seen | c) < 0x80
}

/// The number of bytes `b` starts with that a JSON string holds as they
/// are (not `"`, `\\` or a control character), eight at a time: the
/// scanner's keys and string values were its largest cost after the ids,
/// a byte at a time (docs/decisions/0029-ids-scanned-sixty-four-bytes.md).
///
/// Each test is the zero-byte test `(v - 0x01..) & !v & 0x80..` on `x`
/// made zero where it matches (`x ^ '"'`, `x ^ '\\'`), or with `0x20`
/// subtracted (below `0x20`). A test can flag a byte wrongly only by a
/// borrow from a lower byte, which that lower byte's own match raised, so
/// the lowest flag is always a true one.
#[inline]
fn plain_run(b: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut k = 0;
    while let Some(chunk) = b[k..].first_chunk::<8>() {
        let x = u64::from_le_bytes(*chunk);
        let quote = x ^ (ONES * u64::from(b'"'));
        let backslash = x ^ (ONES * u64::from(b'\\'));
        let stop = ((quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (x.wrapping_sub(ONES * 0x20) & !x))
            & HIGH;
        if stop != 0 {
            return k + (stop.trailing_zeros() / 8) as usize;
        }
        k += 8;
    }
    k + b[k..].iter().take_while(|&&c| is_plain(c)).count()
}

/// A byte a JSON string holds as it is.
fn is_plain(c: u8) -> bool {
    c >= 0x20 && c != b'"' && c != b'\\'
}

/// Decodes a JSON string literal (with quotes) that the scanner validated.
fn unescape(text: &str) -> Option<Vec<u8>> {
    let inner = &text[1..text.len() - 1];
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '"' => out.push('"'),
            '\\' => out.push('\\'),
            '/' => out.push('/'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'u' => {
                let hex: String = chars.by_ref().take(4).collect();
                let unit = u32::from_str_radix(&hex, 16).ok()?;
                // A lone surrogate cannot be part of a known key; map it to U+FFFD.
                out.push(char::from_u32(unit).unwrap_or('\u{fffd}'));
            }
            _ => return None,
        }
    }
    Some(out.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Number;

    fn rec(s: &str) -> Record<'_> {
        Record::parse(s.as_bytes()).unwrap()
    }

    fn err(s: &str) -> String {
        Record::parse(s.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn arrays_off_the_integer_fast_path_still_parse() {
        for ok in [
            r#"{"a": [1, -2, 3.5, "x", [4], {"b": 0}]}"#,
            r#"{"a": [ ]}"#,
            r#"{"a": [0, 10 , 2e3]}"#,
            r#"{"a":[7]}"#,
        ] {
            assert!(Record::parse(ok.as_bytes()).is_ok(), "{ok}");
        }
        for bad in [
            r#"{"a": [1,,2]}"#,
            r#"{"a": [1 2]}"#,
            r#"{"a": [1, 2"#,
            r#"{"a": [00]}"#,
        ] {
            assert!(Record::parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn plain_run_stops_where_the_byte_loop_stops(bytes in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::strategy::Just(b'"'), proptest::strategy::Just(b'\\'),
                0x18u8..0x22, b'a'..=b'z', 0x80u8..=0xFF, proptest::num::u8::ANY],
            0..40)
        ) {
            let expected = bytes.iter().take_while(|&&c| is_plain(c)).count();
            proptest::prop_assert_eq!(plain_run(&bytes), expected);
        }
    }

    #[test]
    fn escaped_keys_are_recognised() {
        let r = rec(r#"{"\u0074imestamp": 5}"#);
        assert_eq!(r.number(Field::Timestamp).unwrap(), Some(Number::Int(5)));
    }

    #[test]
    fn invalid_json_is_rejected_with_a_reason() {
        assert_eq!(
            err("[1, 2]"),
            "expected a JSON object, found `[1, 2]` at byte 1"
        );
        assert_eq!(
            err(r#"{"a": 1"#),
            "invalid JSON: expected `,` or `}`, found end of line"
        );
        assert_eq!(
            err(r#"{"a": 1} x"#),
            "invalid JSON: expected end of line after the object, found `x` at byte 10"
        );
        assert!(err(r#"{"a": 01}"#).starts_with("invalid JSON"));
        assert!(err(r#"{"a": 1.}"#).starts_with("invalid JSON"));
        assert!(err(r#"{"a": tru}"#).starts_with("invalid JSON"));
        assert!(err(r#"{"a": "x}"#).starts_with("invalid JSON: unterminated"));
        assert!(err(r#"{"a": "\q"}"#).starts_with("invalid JSON: bad escape"));
        assert!(err("{\"a\": \"\u{1}\"}").starts_with("invalid JSON: control"));
        assert!(err(r#"{a: 1}"#).starts_with("invalid JSON: expected an object key"));
        assert!(err(r#"{"a": [1,]}"#).starts_with("invalid JSON"));
        assert_eq!(
            Record::parse(b"{\"a\": \"\xff\"}").unwrap_err().to_string(),
            "invalid UTF-8"
        );
        let deep = format!("{{\"a\": {}{}}}", "[".repeat(1000), "]".repeat(1000));
        assert_eq!(err(&deep), "invalid JSON: nested too deeply");
    }
}

/// The plain-line path must take the lines in the form it is for and, on
/// any line it takes, find what the general scan finds; on every other
/// line it must leave the verdict to the general scan.
#[cfg(test)]
mod plain_path_agrees_with_the_general_scan {
    use super::*;
    use proptest::prelude::*;

    fn same(fast: &Record<'_>, general: &Record<'_>) -> bool {
        fast.spans == general.spans
            && fast.close == general.close
            && fast.has_members == general.has_members
            && fast.hash_ids_shape == general.hash_ids_shape
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            (0u64..u64::MAX).prop_map(|v| v.to_string()),
            // From 1: a decimal starting `0.` is a near-form the general scan
            // decides (the near-forms test below holds that).
            (1u64..100_000, 0u64..10_000).prop_map(|(a, b)| format!("{a}.{b}")),
            "[a-z_ \u{e9}]{0,12}".prop_map(|s| format!("\"{s}\"")),
            Just("null".to_string()),
            prop::collection::vec(0u64..100_000_000, 1..40).prop_map(|ids| {
                let text: Vec<String> = ids.iter().map(u64::to_string).collect();
                format!("[{}]", text.join(", "))
            }),
        ]
    }

    /// A line of the plain form: known and unknown keys, `: ` or `:`,
    /// `, ` or `,` (the form is the general scan's exactly when no byte is
    /// changed).
    fn plain_line() -> impl Strategy<Value = String> {
        (prop::collection::vec(
            (
                "timestamp|input_length|output_length|hash_ids|session_id|delay|[a-z_]{0,6}",
                value(),
                any::<bool>(),
                any::<bool>(),
            ),
            1..7,
        ),)
            .prop_map(|(members,)| {
                let mut line = String::from("{");
                for (k, (key, value, colon_space, comma_space)) in members.iter().enumerate() {
                    if k > 0 {
                        line.push_str(if *comma_space { ", " } else { "," });
                    }
                    line.push_str(&format!("\"{key}\":"));
                    if *colon_space {
                        line.push(' ');
                    }
                    line.push_str(value);
                }
                line.push('}');
                line
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        #[test]
        fn plain_lines_are_taken_as_the_general_scan_reads_them(line in plain_line()) {
            let fast = parse_plain::<false>(line.as_bytes());
            prop_assert!(fast.is_some(), "{line}");
            let general = Record::parse_general(line.as_bytes()).unwrap();
            prop_assert!(same(&fast.unwrap(), &general), "{line}");
        }

        #[test]
        fn a_changed_line_is_taken_only_when_the_general_scan_reads_it_so(
            line in plain_line(),
            edits in prop::collection::vec((any::<usize>(), 0u8..3, prop::sample::select(
                b"{}[]\",:0123456789-.eE tfnul\\ax\t\x01\xc3".to_vec())), 1..3),
        ) {
            let mut b = line.into_bytes();
            for (at, op, c) in edits {
                let at = at % (b.len() + 1);
                match op {
                    0 if at < b.len() => { b.remove(at); }
                    1 => b.insert(at, c),
                    _ if at < b.len() => b[at] = c,
                    _ => b.push(c),
                }
            }
            if std::str::from_utf8(&b).is_err() {
                // The plain path checks the UTF-8 of what it takes.
                prop_assert!(parse_plain::<false>(&b).is_none(), "{}", String::from_utf8_lossy(&b));
                return Ok(());
            }
            if let Some(fast) = parse_plain::<false>(&b) {
                let general = Record::parse_general(&b);
                prop_assert!(general.is_ok(), "{}: {:?}", String::from_utf8_lossy(&b), general.err());
                prop_assert!(same(&fast, &general.unwrap()), "{}", String::from_utf8_lossy(&b));
            }
        }
    }

    /// What follows a line in the read buffer: more lines, a cut line, a
    /// `\r\n` ending's `\r`, or nothing.
    fn after() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(b"\n".to_vec()),
            Just(Vec::new()),
            Just(b"\r\n".to_vec()),
            Just(b"\n{\"timestamp\": 1, \"hash_ids\": [1, 2]}\n".to_vec()),
            Just(b"\n{\"timestamp\": 1, \"hash_ids\": [1, 2".to_vec()),
            Just(b" \n".to_vec()),
            Just(b"\n\n\n".to_vec()),
            prop::collection::vec(any::<u8>(), 0..80).prop_map(|mut v| {
                v.insert(0, b'\n');
                v
            }),
        ]
    }

    /// Applies 0-2 random byte edits to `line`.
    fn edited(line: String, edits: &[(usize, u8, u8)]) -> Vec<u8> {
        let mut b = line.into_bytes();
        for &(at, op, c) in edits {
            let at = at % (b.len() + 1);
            match op {
                0 if at < b.len() => {
                    b.remove(at);
                }
                1 => b.insert(at, c),
                _ if at < b.len() => b[at] = c,
                _ => b.push(c),
            }
        }
        b
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        /// The line loop's path: a record found where its line lies in the
        /// read buffer is the one `Record::parse` finds in the line cut at
        /// its first `\n` (the reader's cut: no `\r` stripped, as it is
        /// taken only before a bare `\n`), and every plain line before a
        /// `\n` is taken; on edited lines (and whatever follows them) it
        /// takes only what `parse` takes, to the same record.
        #[test]
        fn a_line_parsed_in_the_buffer_is_the_line_cut_and_parsed(
            line in plain_line(),
            edits in prop::collection::vec((any::<usize>(), 0u8..3, prop::sample::select(
                b"{}[]\",:0123456789-.eE tfnul\\ax\t\n\r\x01\xc3\xa9".to_vec())), 0..3),
            tail in after(),
        ) {
            let plain = edits.is_empty();
            let mut buf = edited(line, &edits);
            buf.extend_from_slice(&tail);
            // The reader's cut: at the first `\n`, one `\r` before it dropped.
            let cut = memchr::memchr(b'\n', &buf).map(|i| {
                let line = &buf[..i];
                (line.strip_suffix(b"\r").unwrap_or(line), i + 1)
            });
            match Record::parse_line_at(&buf) {
                Some((fast, next)) => {
                    let (cut, cut_next) = cut.expect("taken only before a `\n`");
                    prop_assert_eq!(fast.line, cut);
                    prop_assert_eq!(next, cut_next);
                    let parsed = Record::parse(cut);
                    prop_assert!(parsed.is_ok(), "{}: {:?}", String::from_utf8_lossy(cut), parsed.err());
                    prop_assert!(same(&fast, &parsed.unwrap()), "{}", String::from_utf8_lossy(cut));
                }
                None => prop_assert!(
                    !(plain && (tail.starts_with(b"\n") || tail.starts_with(b"\r\n"))),
                    "a plain line was left: {}", String::from_utf8_lossy(&buf)
                ),
            }
        }
    }

    #[test]
    fn invalid_utf8_in_a_string_or_key_is_left_to_the_general_scan() {
        for line in [
            &b"{\"a\": \"\xff\"}"[..],
            b"{\"\xc3\": 1}",
            b"{\"a\": \"\xc3\"}",
            b"{\"a\": \"\xed\xa0\x80\"}",
        ] {
            assert!(parse_plain::<false>(line).is_none());
            let mut buf = line.to_vec();
            buf.push(b'\n');
            assert!(Record::parse_line_at(&buf).is_none());
            assert_eq!(
                Record::parse(line).unwrap_err().to_string(),
                "invalid UTF-8"
            );
        }
        // Valid UTF-8 in strings and keys is taken.
        assert!(parse_plain::<false>("{\"é\": \"ü€\", \"timestamp\": 1}".as_bytes()).is_some());
    }

    #[test]
    fn expected_keys_match_only_their_own_name() {
        let rest = "\": 1, \"padding\": 2}";
        for (k, &f) in EXPECTED.iter().enumerate() {
            let name = f.name();
            let line = format!("{name}{rest}");
            assert_eq!(
                expected_key(line.as_bytes(), 0, k),
                Some((f, name.len() + 2))
            );
            for bad in [
                format!("{name}x{rest}"),
                format!("{name}\\{rest}"),
                format!("{}{rest}", &name[1..]),
                format!("x{}{rest}", &name[1..]),
                format!("{name}\" : 1, \"padding\": 2}}"),
                format!("{name}\":"), // too short to load: the lookup's
            ] {
                assert_eq!(expected_key(bad.as_bytes(), 0, k), None, "{bad}");
            }
            // Only the key expected at this place is tried.
            assert_eq!(expected_key(line.as_bytes(), 0, (k + 1) % 4), None);
        }
        assert_eq!(expected_key(b"timestamp\": 1, \"padding\": 2}", 0, 4), None);
    }

    #[test]
    fn other_forms_are_left_to_the_general_scan() {
        for line in [
            "{}",
            " {\"a\": 1}",
            "{\"a\": 1} ",
            "{\"a\" : 1}",
            "{\"a\":  1}",
            "{\"a\": -1}",
            "{\"a\": 1e3}",
            "{\"a\": 0.5}",
            "{\"a\": 1.}",
            "{\"a\": 01}",
            "{\"a\": true}",
            "{\"a\": {}}",
            "{\"a\": []}",
            "{\"a\": \"x\\ny\"}",
            "{\"\\u0074imestamp\": 1}",
            "{\"a\": 1,}",
            "{\"a\": 1,  \"b\": 2}",
            "{\"a\": 1}}",
            "{\"a\": nul}",
            "{\"a\": \"\t\"}",
        ] {
            assert!(parse_plain::<false>(line.as_bytes()).is_none(), "{line}");
        }
    }
}

/// The scanner must accept exactly what a full JSON parser accepts as an
/// object, and find the same values, on generated and mutated lines.
#[cfg(test)]
mod agreement_with_serde_json {
    use super::*;
    use crate::record::Field;
    use proptest::prelude::*;
    use serde_json::Value;

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e9f64..1e9).prop_map(Value::from),
            "[a-z\"\\\\/\u{e9}\u{1F600}\n\t ]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 24, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec(("[a-z_]{1,6}|timestamp|hash_ids|input_length", inner), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    fn object_line() -> impl Strategy<Value = String> {
        (
            prop::collection::vec(
                (
                    "[a-z_]{1,6}|timestamp|hash_ids|input_length|session_id",
                    value(),
                ),
                0..6,
            ),
            any::<bool>(),
        )
            .prop_map(|(kv, pretty)| {
                let obj = Value::Object(kv.into_iter().collect());
                if pretty {
                    // Multi-line JSON has its newlines turned into spaces: still one line.
                    serde_json::to_string_pretty(&obj)
                        .unwrap()
                        .replace('\n', " ")
                } else {
                    serde_json::to_string(&obj).unwrap()
                }
            })
    }

    /// One random edit: delete, insert or replace a byte with a JSON-ish one.
    fn mutate(line: &str, at: usize, op: u8, byte: u8) -> Vec<u8> {
        let mut b = line.as_bytes().to_vec();
        let at = at % (b.len() + 1);
        let table = b"{}[]\",:0123-.eE tfnul\\ax";
        let c = table[byte as usize % table.len()];
        match op % 3 {
            0 if at < b.len() => {
                b.remove(at);
            }
            1 => b.insert(at, c),
            _ if at < b.len() => b[at] = c,
            _ => b.push(c),
        }
        b
    }

    /// serde_json's verdict on "one JSON object", skipping values without
    /// converting them: serde_json refuses numbers too large for f64 when it
    /// converts, though the JSON grammar allows them.
    fn serde_accepts(line: &[u8]) -> bool {
        // Skipping a string does not check its UTF-8; JSON text must be UTF-8.
        let utf8 = std::str::from_utf8(line).is_ok();
        let is_object = line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        utf8 && is_object && serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn valid_objects_are_accepted_and_fields_found(line in object_line()) {
            let rec = Record::parse(line.as_bytes());
            prop_assert!(rec.is_ok(), "{line}: {:?}", rec.err());
            let rec = rec.unwrap();
            let v: serde_json::Map<String, Value> = serde_json::from_str(&line).unwrap();
            for f in [Field::Timestamp, Field::HashIds, Field::InputLength, Field::SessionId] {
                let ours = rec.raw(f).map(|raw| serde_json::from_slice::<Value>(raw).unwrap());
                prop_assert_eq!(ours.as_ref(), v.get(f.name()));
            }
        }

        #[test]
        fn mutated_lines_are_judged_like_serde_json(line in object_line(), at in any::<usize>(), op in any::<u8>(), byte in any::<u8>()) {
            let bad = mutate(&line, at, op, byte);
            prop_assert_eq!(Record::parse(&bad).is_ok(), serde_accepts(&bad), "{}", String::from_utf8_lossy(&bad));
        }
    }
}

/// `Record::parse_decoding_ids` is `Record::parse` and, when it says it
/// decoded the ids, `Record::hash_ids_into`'s answer: on rows of every
/// shape, on every one-byte change of a few rows, and on lines that end
/// anywhere.
#[cfg(test)]
mod ids_decoded_by_the_scan {
    use super::*;
    use proptest::prelude::*;

    /// Holds the fused parse to the reference for `line`: the same verdict
    /// and message, the same record, and ids (when decoded) as
    /// `hash_ids_into` reads them. Returns whether the ids were decoded.
    fn agrees(line: &[u8]) -> Result<bool, String> {
        let text = String::from_utf8_lossy(line);
        let mut ids = vec![3, 2, 1];
        let mut rec = Record::slot();
        let fused = Record::parse_decoding_ids(line, &mut rec, &mut ids);
        match (fused, Record::parse(line)) {
            (Ok(decoded), Ok(reference)) => {
                let same = rec.line == reference.line
                    && rec.spans == reference.spans
                    && rec.close == reference.close
                    && rec.has_members == reference.has_members
                    && rec.hash_ids_shape == reference.hash_ids_shape;
                if !same {
                    return Err(format!("another record: {text}"));
                }
                if decoded {
                    let mut want = Vec::new();
                    match reference.hash_ids_into(&mut want) {
                        Ok(true) if want == ids => {}
                        read => return Err(format!("{ids:?} decoded, {read:?} {want:?}: {text}")),
                    }
                }
                Ok(decoded)
            }
            (Err(a), Err(b)) if a.to_string() == b.to_string() => Ok(false),
            (a, b) => Err(format!("{a:?} against {:?}: {text}", b.err())),
        }
    }

    fn avx2() -> bool {
        #[cfg(target_arch = "x86_64")]
        return std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("popcnt")
            && std::is_x86_feature_detected!("bmi1");
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    fn row(ids: &[u64], sep: &str, before: &str, after: &str) -> String {
        let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
        format!(
            r#"{{"timestamp": 27482, "input_length": 6955, {before}"hash_ids": [{}]{after}}}"#,
            ids.join(sep)
        )
    }

    /// Every one-byte change of a few rows (each byte replaced by each
    /// byte of JSON and id text, deleted, or doubled; lines cut
    /// everywhere): accepted or refused as before, with the same message.
    #[test]
    fn every_one_byte_change_is_judged_as_before() {
        let rows = [
            row(&[46, 47, 2353], ", ", "", ""),
            row(
                &(0..30).collect::<Vec<_>>(),
                ", ",
                r#""output_length": 52, "#,
                "",
            ),
            row(
                &[12345678, 1, 99999999, 10],
                ",",
                "",
                r#", "session_id": "s1""#,
            ),
            row(&[7; 12], ", ", r#""x": [1, 2], "#, r#", "hash_ids": null"#),
            r#"{"hash_ids": null, "timestamp": 1, "hash_ids": [5, 6]}"#.to_string(),
        ];
        let bytes = b"{}[]\",:0123456789-.eE tfnul\\ax\t\n\r\x00\xc3";
        let mut decoded = 0;
        for line in &rows {
            let line = line.as_bytes();
            decoded += usize::from(agrees(line).unwrap());
            for at in 0..line.len() {
                for &c in bytes {
                    let mut b = line.to_vec();
                    b[at] = c;
                    agrees(&b).unwrap();
                }
                let mut b = line.to_vec();
                b.remove(at);
                agrees(&b).unwrap();
                let mut b = line.to_vec();
                b.insert(at, line[at]);
                agrees(&b).unwrap();
                agrees(&line[..at]).unwrap();
            }
        }
        // The rows whose last `hash_ids` is an array were decoded by the scan.
        assert_eq!(decoded, if avx2() { 4 } else { 0 });
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Rows of every shape: ids of 1 to 20 digits (the long ones are
        /// the walker's), arrays anywhere in the line (so windows end
        /// anywhere in them), `,` or `, `, other fields around.
        #[test]
        fn rows_read_with_their_ids_are_rows_read_then_decoded(
            ids in prop::collection::vec(prop_oneof![
                0u64..10, 0u64..100_000, 0u64..100_000_000, 0u64..100_000_000,
                Just(99_999_999u64), Just(100_000_000u64), Just(u64::MAX)], 0..80),
            compact in any::<bool>(),
            pad in 0usize..70,
            after in prop_oneof![Just(""), Just(r#", "delay": 1.5"#), Just(r#", "hash_ids": null"#),
                Just(r#", "x": [1, 2]"#)],
        ) {
            let before = format!(r#""p": "{}", "#, "x".repeat(pad));
            let line = row(&ids, if compact { "," } else { ", " }, &before, after);
            let decoded = agrees(line.as_bytes());
            prop_assert!(decoded.is_ok(), "{}", decoded.unwrap_err());
            // Taken on AVX2 whenever the scan's fast walk takes the array.
            let walkable = !ids.is_empty() && ids.iter().all(|&h| h < 100_000_000);
            prop_assert_eq!(decoded.unwrap(), avx2() && walkable && after != r#", "hash_ids": null"#);
        }
    }
}
