//! A borrowed view of one trace record (DESIGN.md §2).
//!
//! The scanner walks the top-level object once, validating it as JSON, and
//! remembers where the value of each known field lies in the line. Nothing is
//! decoded until asked for, and everything else stays raw bytes, so a tool can
//! rewrite one value and copy the rest of the line untouched. A hand-written
//! scanner is used rather than a DOM parser because a Mooncake line is mostly
//! the `hash_ids` array, which most tools need only to skip (see
//! `benches/parse.rs` for the comparison with simd-json).

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
    Int(i64),
    Float(f64),
}

impl Number {
    pub fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
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
}

const FIELDS: usize = 10;

impl Field {
    pub fn name(self) -> &'static str {
        match self {
            Field::Timestamp => "timestamp",
            Field::SessionId => "session_id",
            Field::Delay => "delay",
            Field::InputLength => "input_length",
            Field::OutputLength => "output_length",
            Field::HashIds => "hash_ids",
            Field::TextInput => "text_input",
            Field::Messages => "messages",
            Field::Tools => "tools",
            Field::Extra => "extra",
        }
    }

    fn from_key(key: &[u8]) -> Option<Field> {
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
            _ => return None,
        })
    }
}

/// One record: the line and where its known fields' values are.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    line: &'a [u8],
    spans: [Option<Span>; FIELDS],
    /// Position of the closing `}` of the object.
    close: usize,
    /// True when the object has at least one member.
    has_members: bool,
    /// Known from the scan when `hash_ids` is a non-empty array of plain integers.
    hash_ids_shape: Option<IdArrayShape>,
}

/// Nesting limit for values we only skip, so a hostile line cannot overflow the stack.
const MAX_DEPTH: usize = 256;

impl<'a> Record<'a> {
    /// Scans and validates one line holding one JSON object.
    pub fn parse(line: &'a [u8]) -> Result<Record<'a>, RecordError> {
        if std::str::from_utf8(line).is_err() {
            return Err(RecordError::new("invalid UTF-8"));
        }
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
            spans: [None; FIELDS],
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
                let span = Span { start, end: s.i };
                if let Some(f) = key {
                    rec.spans[f as usize] = Some(span);
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

    pub fn line(&self) -> &'a [u8] {
        self.line
    }

    /// The raw bytes of a known field's value, if present.
    pub fn raw(&self, f: Field) -> Option<&'a [u8]> {
        self.span(f).map(|s| &self.line[s.start..s.end])
    }

    pub fn span(&self, f: Field) -> Option<Span> {
        self.spans[f as usize]
    }

    pub fn has(&self, f: Field) -> bool {
        self.spans[f as usize].is_some()
    }

    /// A field that is absent or `null` reads as `None`.
    fn present(&self, f: Field) -> Option<&'a [u8]> {
        self.raw(f).filter(|v| *v != b"null")
    }

    /// A non-negative integer field (`input_length`, `output_length`).
    pub fn uint(&self, f: Field) -> Result<Option<u64>, RecordError> {
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
        let Some(raw) = self.present(Field::HashIds) else {
            return Ok(false);
        };
        match self.hash_ids_shape {
            // The scan proved it a list of plain integers that fit 19 digits.
            Some(shape) if shape.longest_digits <= 19 => decode_plain_ints(raw, shape.count, out),
            _ => parse_uint_array(raw, out).map_err(|msg| RecordError::field("hash_ids", msg))?,
        }
        Ok(true)
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

    /// Writes the record to `out` with some values replaced. Edits must not
    /// overlap; each replaces the span of an existing field, or, for a field
    /// the record lacks, appends `"name": value` at the end of the object.
    pub fn write_edited(&self, edits: &mut [Edit<'_>], out: &mut Vec<u8>) {
        edits.sort_by_key(|e| self.span(e.field).map_or(usize::MAX, |s| s.start));
        let mut at = 0;
        let mut appended = false;
        for e in edits.iter() {
            match self.span(e.field) {
                Some(span) => {
                    out.extend_from_slice(&self.line[at..span.start]);
                    out.extend_from_slice(e.value);
                    at = span.end;
                }
                None => {
                    out.extend_from_slice(&self.line[at..self.close]);
                    at = self.close;
                    if self.has_members || appended {
                        out.extend_from_slice(b", ");
                    }
                    out.push(b'"');
                    out.extend_from_slice(e.field.name().as_bytes());
                    out.extend_from_slice(b"\": ");
                    out.extend_from_slice(e.value);
                    appended = true;
                }
            }
        }
        out.extend_from_slice(&self.line[at..]);
    }
}

/// A new value for one field, as JSON text.
#[derive(Debug)]
pub struct Edit<'v> {
    pub field: Field,
    pub value: &'v [u8],
}

/// A value for messages: at most 40 bytes of it.
fn shorten(raw: &[u8]) -> String {
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
    // The common case, a small non-negative integer, without going through str.
    if raw.len() <= 18 && !raw.is_empty() && raw.iter().all(u8::is_ascii_digit) {
        let v = raw.iter().fold(0i64, |v, &d| v * 10 + i64::from(d - b'0'));
        return Some(Number::Int(v));
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
    }
    text.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .map(Number::Float)
}

/// Decodes an array the scanner found to hold only plain integers of at
/// most 19 digits (so no overflow): digits accumulate, anything else ends a
/// number. No checks are needed, which makes this the fast path.
fn decode_plain_ints(raw: &[u8], count: usize, out: &mut Vec<u64>) {
    out.reserve(count);
    let (mut v, mut in_number) = (0u64, false);
    for &b in &raw[1..] {
        let d = b.wrapping_sub(b'0');
        if d < 10 {
            v = v * 10 + u64::from(d);
            in_number = true;
        } else if in_number {
            out.push(v);
            v = 0;
            in_number = false;
        }
    }
}

/// Decodes `[1, 2, 3]` (already validated as JSON) into `out`.
fn parse_uint_array(raw: &[u8], out: &mut Vec<u64>) -> Result<(), String> {
    if raw.first() != Some(&b'[') {
        return Err(format!("expected an array, found {}", shorten(raw)));
    }
    let mut i = 1;
    let end = raw.len() - 1;
    loop {
        while i < end && raw[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= end {
            return Ok(());
        }
        let start = i;
        while i < end && raw[i].is_ascii_digit() {
            i += 1;
        }
        let digits = &raw[start..i];
        // Up to 19 digits cannot overflow u64: no checks in the hot loop.
        let v = if digits.len() <= 19 {
            digits
                .iter()
                .fold(0u64, |v, &d| v * 10 + u64::from(d - b'0'))
        } else {
            parse_uint(digits).ok_or("an id does not fit in 64 bits")?
        };
        if i == start || (i < end && !matches!(raw[i], b',' | b' ' | b'\t' | b'\r' | b'\n')) {
            let mut j = start;
            while j < end && raw[j] != b',' {
                j += 1;
            }
            return Err(format!(
                "expected non-negative integer ids, found {}",
                shorten(&raw[start..j])
            ));
        }
        out.push(v);
        while i < end && raw[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < end {
            // The scanner guarantees a comma here.
            i += 1;
        }
    }
}

/// Appends an id list as JSON in the house style of Mooncake traces (`[1, 2]`).
pub fn write_id_array(ids: &[u64], out: &mut Vec<u8>) {
    out.push(b'[');
    let mut buf = itoa::Buffer::new();
    for (k, id) in ids.iter().enumerate() {
        if k > 0 {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(buf.format(*id).as_bytes());
    }
    out.push(b']');
}

/// What a single pass over a validated id array tells without decoding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdArrayShape {
    pub count: usize,
    /// Digits of the longest id, to rule out large ids without decoding.
    pub longest_digits: usize,
}

/// One pass over `[1, 2, 3]` (already validated as JSON): counts the ids and
/// rejects anything but non-negative integers.
pub fn id_array_shape(raw: &[u8]) -> Result<IdArrayShape, String> {
    if raw.first() != Some(&b'[') {
        return Err(format!("expected an array, found {}", shorten(raw)));
    }
    let inner = &raw[1..raw.len() - 1];
    let (mut commas, mut run, mut longest) = (0, 0, 0);
    for &b in inner {
        match b {
            b'0'..=b'9' => {
                run += 1;
                longest = longest.max(run);
            }
            b',' => {
                commas += 1;
                run = 0;
            }
            b' ' | b'\t' | b'\r' | b'\n' => run = 0,
            _ => return Err("expected an array of non-negative integers".to_string()),
        }
    }
    let count = if longest == 0 { 0 } else { commas + 1 };
    Ok(IdArrayShape {
        count,
        longest_digits: longest,
    })
}

/// Writes ids in the spacing of the array they replace: `[1,2]` when the
/// original was written compactly, else `[1, 2]` (the Mooncake traces' style).
pub fn write_id_array_like(ids: &[u64], original: Option<&[u8]>, out: &mut Vec<u8>) {
    let compact =
        original.is_some_and(|raw| raw.contains(&b',') && !raw.windows(2).any(|w| w == b", "));
    if !compact {
        return write_id_array(ids, out);
    }
    out.push(b'[');
    let mut buf = itoa::Buffer::new();
    for (k, id) in ids.iter().enumerate() {
        if k > 0 {
            out.push(b',');
        }
        out.extend_from_slice(buf.format(*id).as_bytes());
    }
    out.push(b']');
}

/// Formats a number for output: integers as integers, floats in the shortest
/// form that reads back to the same value.
pub fn write_number(n: Number, out: &mut Vec<u8>) {
    match n {
        Number::Int(i) => out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes()),
        Number::Float(f) => out.extend_from_slice(ryu::Buffer::new().format_finite(f).as_bytes()),
    }
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

    fn expect(&mut self, c: u8, wanted: &str) -> Result<(), RecordError> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.unexpected(wanted))
        }
    }

    /// An object key; escaped keys are decoded so `"\u0074imestamp"` is still found.
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
        self.fraction_and_exponent()
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
        if let Some((end, shape)) = int_array_end(self.b, self.i + 1) {
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

/// The end (after `]`) of a non-empty array of plain integers starting at
/// `i` (just after `[`), such as `hash_ids`: a tight loop for the field that
/// is most of every Mooncake line. `None` for anything else, which the
/// general scanner then handles (and reports, if invalid).
#[inline]
fn int_array_end(b: &[u8], mut i: usize) -> Option<(usize, IdArrayShape)> {
    let n = b.len();
    let mut shape = IdArrayShape {
        count: 0,
        longest_digits: 0,
    };
    loop {
        while i < n && b[i] == b' ' {
            i += 1;
        }
        let start = i;
        while i < n && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start || (b[start] == b'0' && i - start > 1) {
            return None;
        }
        shape.count += 1;
        shape.longest_digits = shape.longest_digits.max(i - start);
        while i < n && b[i] == b' ' {
            i += 1;
        }
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b']') => return Some((i + 1, shape)),
            _ => return None,
        }
    }
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

    fn rec(s: &str) -> Record<'_> {
        Record::parse(s.as_bytes()).unwrap()
    }

    fn err(s: &str) -> String {
        Record::parse(s.as_bytes()).unwrap_err().to_string()
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
    fn escaped_keys_are_recognised() {
        let r = rec(r#"{"\u0074imestamp": 5}"#);
        assert_eq!(r.number(Field::Timestamp).unwrap(), Some(Number::Int(5)));
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

    #[test]
    fn edits_replace_values_in_place_and_append_missing_fields() {
        let line = r#"{ "timestamp" :10,"z": [1,2], "output_length": 7 }"#;
        let r = rec(line);
        let mut out = Vec::new();
        r.write_edited(
            &mut [
                Edit {
                    field: Field::OutputLength,
                    value: b"3",
                },
                Edit {
                    field: Field::Timestamp,
                    value: b"5",
                },
            ],
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{ "timestamp" :5,"z": [1,2], "output_length": 3 }"#
        );
        let mut out = Vec::new();
        r.write_edited(
            &mut [Edit {
                field: Field::Delay,
                value: b"1.5",
            }],
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{ "timestamp" :10,"z": [1,2], "output_length": 7 , "delay": 1.5}"#
        );
        let mut out = Vec::new();
        rec("{}").write_edited(
            &mut [
                Edit {
                    field: Field::Delay,
                    value: b"1",
                },
                Edit {
                    field: Field::Timestamp,
                    value: b"2",
                },
            ],
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"delay": 1, "timestamp": 2}"#
        );
    }

    #[test]
    fn number_formatting() {
        let mut out = Vec::new();
        write_number(Number::Int(-3), &mut out);
        out.push(b' ');
        write_number(Number::Float(0.1 + 0.2), &mut out);
        out.push(b' ');
        write_number(Number::Float(2.0), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "-3 0.30000000000000004 2.0"
        );
        let mut out = Vec::new();
        write_id_array(&[1, 22, 333], &mut out);
        assert_eq!(out, b"[1, 22, 333]");
        let mut out = Vec::new();
        write_id_array_like(&[4, 5], Some(b"[1,2,3]"), &mut out);
        write_id_array_like(&[4, 5], Some(b"[1, 2]"), &mut out);
        write_id_array_like(&[4, 5], Some(b"[1]"), &mut out);
        assert_eq!(out, b"[4,5][4, 5][4, 5]");
    }
}

/// The scanner must accept exactly what a full JSON parser accepts as an
/// object, and find the same values, on generated and mutated lines.
#[cfg(test)]
mod agreement_with_serde_json {
    use super::*;
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
