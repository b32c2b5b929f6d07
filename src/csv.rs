//! The one CSV field reader: mc-import's trace formats (Azure, BurstGPT)
//! and mc-gen's Grafana exports split their lines here.
//!
//! The rules (RFC 4180's, for one line at a time):
//!
//! - One record per line: the line reader has already split the lines
//!   (and dropped CR), so a quoted field cannot hold a newline.
//! - Fields are separated by `,`. A field whose first non-blank byte is `"`
//!   is quoted: it runs to the next `"` that is not doubled, `""` inside
//!   it stands for one `"`, and only blanks may follow the closing quote.
//!   A `"` inside an unquoted field is an ordinary byte.
//! - Every field is trimmed of ASCII whitespace, quoted content too: the
//!   columns read are numbers, dates and names, and no caller wants their
//!   edge spaces (`" 12 "` is 12).
//! - An empty quoted field (`""`) is the empty string, exactly like an
//!   unquoted empty field: no caller tells them apart (mc-gen reads both as
//!   0 in a Grafana export, as AIBrix does; mc-import's number columns
//!   reject both, its text columns read both as empty).
//! - An unterminated quote, or text after a closing quote, is an error
//!   naming the column (the caller names the line).
//!
//! Hand-written rather than `csv-core`: fed one line at a time, as the line
//! reader hands them over, the two split an Azure-shaped file equally fast
//! (docs/ARCHITECTURE.md §5, `examples/csv_split.rs`), and this one borrows
//! its fields from the line and names the column in its errors.

use std::borrow::Cow;

use crate::error::RecordError;

/// One field's place in the line: its content without quotes, and whether
/// it holds doubled quotes to undo.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
    escaped: bool,
}

/// The fields of one line, reused between lines.
#[derive(Default)]
pub struct Fields {
    spans: Vec<Span>,
}

impl Fields {
    /// Splits `line` into fields (see the module's rules).
    pub fn split(&mut self, line: &[u8]) -> Result<(), RecordError> {
        self.spans.clear();
        let mut i = 0;
        loop {
            let lead = line[i..]
                .iter()
                .position(|b| !b.is_ascii_whitespace())
                .map_or(line.len(), |k| i + k);
            if line.get(lead) == Some(&b'"') {
                let start = lead + 1;
                let mut j = start;
                let mut escaped = false;
                loop {
                    match memchr::memchr(b'"', &line[j..]) {
                        None => {
                            return Err(RecordError::new(format!(
                                "column {}: unterminated quoted field",
                                self.spans.len() + 1
                            )))
                        }
                        Some(k) if line.get(j + k + 1) == Some(&b'"') => {
                            escaped = true;
                            j += k + 2;
                        }
                        Some(k) => {
                            j += k;
                            break;
                        }
                    }
                }
                self.spans.push(Span {
                    start,
                    end: j,
                    escaped,
                });
                i = j + 1;
                while line.get(i).is_some_and(u8::is_ascii_whitespace) {
                    i += 1;
                }
                match line.get(i) {
                    None => return Ok(()),
                    Some(b',') => i += 1,
                    Some(_) => {
                        return Err(RecordError::new(format!(
                            "column {}: text after a closing quote",
                            self.spans.len()
                        )))
                    }
                }
            } else {
                match memchr::memchr(b',', &line[i..]) {
                    Some(k) => {
                        self.spans.push(Span {
                            start: i,
                            end: i + k,
                            escaped: false,
                        });
                        i += k + 1;
                    }
                    None => {
                        self.spans.push(Span {
                            start: i,
                            end: line.len(),
                            escaped: false,
                        });
                        return Ok(());
                    }
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Field `col` (0-based) of `line`, trimmed; borrowed unless it held
    /// doubled quotes.
    pub fn get<'l>(&self, line: &'l [u8], col: usize) -> Option<Cow<'l, [u8]>> {
        let s = self.spans.get(col)?;
        let raw = line[s.start..s.end].trim_ascii();
        if !s.escaped {
            return Some(Cow::Borrowed(raw));
        }
        let mut out = Vec::with_capacity(raw.len());
        let mut k = 0;
        while k < raw.len() {
            out.push(raw[k]);
            // `split` found every `"` in a quoted field doubled.
            k += if raw[k] == b'"' { 2 } else { 1 };
        }
        Some(Cow::Owned(out.trim_ascii().to_vec()))
    }

    /// Field `col` as text (lossy UTF-8).
    pub fn text<'l>(&self, line: &'l [u8], col: usize) -> Option<Cow<'l, str>> {
        Some(match self.get(line, col)? {
            Cow::Borrowed(b) => String::from_utf8_lossy(b),
            Cow::Owned(v) => Cow::Owned(String::from_utf8_lossy(&v).into_owned()),
        })
    }
}

/// The first `N` commas of a line with no `"` in it (`None` with one: its
/// quoting is [`Fields::split`]'s), and how many of them there are: field
/// `k <= count` runs from after comma `k - 1` (or the line's start) to
/// comma `k` (or the line's end), untrimmed. One walk over the line, where
/// [`Fields::split`] looks for the first non-blank byte and then the next
/// comma, field by field: the fast path of the CSV formats
/// (mc-import's `CsvFormat::fast`), which hand any field they do not take
/// as it stands (blanks, quotes) to the general reader.
pub fn plain_commas<const N: usize>(line: &[u8], commas: &mut [usize; N]) -> Option<usize> {
    let mut count = 0;
    let mut found = |at: usize, count: &mut usize| -> bool {
        if line[at] == b'"' {
            return false;
        }
        if *count < N {
            commas[*count] = at;
            *count += 1;
        }
        true
    };
    // Eight bytes at a time: a line is some 40 bytes, and `memchr2` set up
    // its vector search once per field, 200 instructions a row of
    // Azure's (cachegrind). A marked byte is a candidate, checked by
    // `found`: the borrow of the zero-byte test can mark the byte after a
    // match too.
    let mut words = line.chunks_exact(8);
    let mut base = 0;
    for w in &mut words {
        let x = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        let mut m = zero_bytes(x ^ COMMAS) | zero_bytes(x ^ QUOTES);
        while m != 0 {
            let at = base + (m.trailing_zeros() / 8) as usize;
            m &= m - 1;
            if matches!(line[at], b',' | b'"') && !found(at, &mut count) {
                return None;
            }
        }
        base += 8;
    }
    for (k, &b) in words.remainder().iter().enumerate() {
        if matches!(b, b',' | b'"') && !found(base + k, &mut count) {
            return None;
        }
    }
    Some(count)
}

const COMMAS: u64 = u64::from_le_bytes([b','; 8]);
const QUOTES: u64 = u64::from_le_bytes([b'"'; 8]);

/// The high bit of each zero byte of `x` set (and perhaps of a byte above
/// a zero byte: callers check).
#[inline(always)]
fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(0x0101_0101_0101_0101) & !x & 0x8080_8080_8080_8080
}

/// Field `k` of a line split by [`plain_commas`] (`count` commas, `k <=
/// count`).
#[inline]
pub fn plain_field<'l, const N: usize>(
    line: &'l [u8],
    commas: &[usize; N],
    count: usize,
    k: usize,
) -> &'l [u8] {
    let start = if k == 0 { 0 } else { commas[k - 1] + 1 };
    let end = if k < count { commas[k] } else { line.len() };
    &line[start..end]
}

/// The eight bytes of `data` from `at`, the first in the lowest byte
/// (`None` past the end): the plain-row walkers read a field a word at a
/// time.
#[inline(always)]
pub fn word_at(data: &[u8], at: usize) -> Option<u64> {
    let w: [u8; 8] = data.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(w))
}

const ZEROS: u64 = u64::from_le_bytes([b'0'; 8]);
const HIGH_NIBBLES: u64 = 0xF0F0_F0F0_F0F0_F0F0;

/// The high nibble of every byte of `word` that is not an ASCII digit set,
/// with `word` less `'0'` in every byte (each digit byte its value). A
/// byte below `'0'` borrows from the byte above it, and a byte above `'9'`
/// may carry into it, so only the lowest flagged byte is sure: the callers
/// read up to it.
#[inline(always)]
fn non_digits(word: u64) -> (u64, u64) {
    let x = word.wrapping_sub(ZEROS);
    // A digit is 0..=9 here, and stays below 16 with 6 added.
    (
        x,
        (x | x.wrapping_add(0x0606_0606_0606_0606)) & HIGH_NIBBLES,
    )
}

/// How many of the eight bytes of `word` (the first in the lowest byte)
/// are ASCII digits before the first that is not: 0 to 8.
#[inline(always)]
pub fn leading_digits(word: u64) -> usize {
    (non_digits(word).1.trailing_zeros() / 8) as usize
}

/// The number of eight digit values, one a byte, the first (most
/// significant) in the lowest byte: pairs, then fours, then the eight
/// joined by multiplies (the usual SWAR parse).
#[inline(always)]
pub fn join_eight_digits(x: u64) -> u64 {
    let x = (x.wrapping_mul(10) + (x >> 8)) & 0x00FF_00FF_00FF_00FF;
    let x = (x.wrapping_mul(100) + (x >> 16)) & 0x0000_FFFF_0000_FFFF;
    (x.wrapping_mul(10_000) + (x >> 32)) & 0xFFFF_FFFF
}

/// The whole number whose digits start at `data[at]`, read a word at a
/// time: its value and the index of the byte after its last digit (the
/// caller checks that byte). `None` when there is no digit there, when
/// there are sixteen or more (the general reader takes those), or when the
/// words read run past the end of `data`.
#[inline(always)]
pub fn plain_uint_at(data: &[u8], at: usize) -> Option<(u64, usize)> {
    let (x, flags) = non_digits(word_at(data, at)?);
    let n = (flags.trailing_zeros() / 8) as usize;
    if n == 0 {
        return None;
    }
    if n < 8 {
        // The n digits moved to the top bytes, zeros (leading zeros) below.
        return Some((join_eight_digits(x << (64 - 8 * n)), at + n));
    }
    // Eight digits and maybe more: the next word's.
    let (y, flags) = non_digits(word_at(data, at + 8)?);
    let high = join_eight_digits(x);
    match (flags.trailing_zeros() / 8) as usize {
        0 => Some((high, at + 8)),
        8 => None,
        m => Some((
            high * POW10[m] + join_eight_digits(y << (64 - 8 * m)),
            at + 8 + m,
        )),
    }
}

const POW10: [u64; 8] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000];

/// The end of the unquoted field that starts at `data[at]`: the index of
/// the `,` or `\n` after it, and that byte. `None` when the field's first
/// byte is a `"` or a blank (a quoted field, perhaps after blanks: its
/// quoting is [`Fields::split`]'s; a `"` further in is an ordinary byte, as
/// there), when the field runs past `limit` bytes from `at`, or at the end
/// of `data` (a line the walker cannot see the end of goes the general
/// way). Eight bytes at a time, as [`plain_commas`].
#[inline(always)]
pub fn plain_field_end(data: &[u8], mut at: usize, limit: usize) -> Option<(usize, u8)> {
    let first = *data.get(at)?;
    if first == b'"' || first.is_ascii_whitespace() && first != b'\n' {
        return None;
    }
    let stop = at.saturating_add(limit);
    while at < stop {
        let x = word_at(data, at)?;
        let m = zero_bytes(x ^ COMMAS) | zero_bytes(x ^ NEWLINES);
        if m != 0 {
            // The lowest marked byte is a match (a false mark from the
            // borrow only ever sits above a true one).
            let end = at + (m.trailing_zeros() / 8) as usize;
            return Some((end, data[end]));
        }
        at += 8;
    }
    None
}

/// Where the next line starts when the line ends at `data[at]`: after a
/// `\n`, or after `\r\n` (the line rules drop one `\r` before the `\n`).
/// `None` at any other byte.
#[inline(always)]
pub fn line_end_at(data: &[u8], at: usize) -> Option<usize> {
    match *data.get(at)? {
        b'\n' => Some(at + 1),
        b'\r' if data.get(at + 1) == Some(&b'\n') => Some(at + 2),
        _ => None,
    }
}

const NEWLINES: u64 = u64::from_le_bytes([b'\n'; 8]);

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(line: &str) -> Result<Vec<String>, String> {
        let mut f = Fields::default();
        f.split(line.as_bytes()).map_err(|e| e.to_string())?;
        Ok((0..f.len())
            .map(|c| f.text(line.as_bytes(), c).unwrap().into_owned())
            .collect())
    }

    #[test]
    fn plain_quoted_and_empty_fields() {
        assert_eq!(fields("a,b,c").unwrap(), ["a", "b", "c"]);
        assert_eq!(fields("a,,").unwrap(), ["a", "", ""]);
        assert_eq!(fields("").unwrap(), [""]);
        assert_eq!(fields("\"x,y\",2").unwrap(), ["x,y", "2"]);
        assert_eq!(fields(" 1 , 2").unwrap(), ["1", "2"]);
        assert_eq!(fields(" \" 1 \" ,\"2\"").unwrap(), ["1", "2"]);
        // A quote inside an unquoted field is an ordinary byte.
        assert_eq!(fields("a\"b,c").unwrap(), ["a\"b", "c"]);
    }

    #[test]
    fn an_empty_quoted_field_is_an_empty_string() {
        assert_eq!(fields("\"\",1,,\"\"").unwrap(), ["", "1", "", ""]);
        let mut f = Fields::default();
        f.split(b"\"\",").unwrap();
        assert!(matches!(f.get(b"\"\",", 0), Some(Cow::Borrowed(b""))));
    }

    #[test]
    fn doubled_quotes_stand_for_one() {
        assert_eq!(fields("\"say \"\"hi\"\"\",2").unwrap(), ["say \"hi\"", "2"]);
        assert_eq!(fields("\"\"\"\"").unwrap(), ["\""]);
        assert_eq!(fields("\"a\"\"\"").unwrap(), ["a\""]);
    }

    /// The plain split finds the fields the general one does, untrimmed,
    /// and gives way at a quote.
    #[test]
    fn plain_commas_split_as_the_general_reader() {
        for line in [
            "a,b,c",
            "",
            ",",
            "2024-05-10 00:00:00+00:00,12,7",
            "x,,y,",
            "1",
            ",-,-,,,,,,,,-,,,,-,,,",
            "12345678,12345678,",
            "1234567,,123456789,a",
        ] {
            let mut commas = [0; 32];
            let n = plain_commas(line.as_bytes(), &mut commas).unwrap();
            let got: Vec<String> = (0..=n)
                .map(|k| {
                    String::from_utf8_lossy(plain_field(line.as_bytes(), &commas, n, k)).into()
                })
                .collect();
            assert_eq!(got, fields(line).unwrap(), "{line}");
        }
        assert_eq!(plain_commas(b"a,\"b\",c", &mut [0; 8]), None);
        assert_eq!(plain_commas(b"a\"b", &mut [0; 8]), None);
        assert_eq!(plain_commas(b"12345678,1234\"", &mut [0; 8]), None);
        assert_eq!(plain_commas(b"\"2345678", &mut [0; 8]), None);
        // Only the first N commas are kept; the count stops there.
        let mut commas = [0; 2];
        assert_eq!(plain_commas(b"a,b,c,d", &mut commas), Some(2));
        assert_eq!(plain_field(b"a,b,c,d", &commas, 2, 1), b"b");
    }

    #[test]
    fn malformed_quotes_name_the_column() {
        assert!(fields("\"open,2")
            .unwrap_err()
            .contains("column 1: unterminated"));
        assert!(fields("1,\"a\"b")
            .unwrap_err()
            .contains("column 2: text after a closing quote"));
        assert!(fields("1,\"a\"\"")
            .unwrap_err()
            .contains("column 2: unterminated"));
    }
}
