//! One RAGPulse request line, parsed: its timestamp text, lengths, session
//! and component lists.
//!
//! serde_json into a typed struct is the reference: what it accepts and
//! refuses, and the words and column of its errors, are the importer's
//! behaviour. It was most of the import's cost (a `String` per timestamp
//! and session, a `Vec` per list, UTF-8 checks per string: 55% of the
//! instructions with malloc), so the shape the files have is read by a
//! hand-written scan first ([`fast`]) that accepts only a strict subset of
//! what serde accepts, with the same values: a line of printable ASCII
//! without a backslash (so no escapes), the known fields once each in any
//! order, whole numbers without sign, fraction or exponent, spaces.
//! Anything else (an escape, a float, an unknown or repeated field, a
//! missing one, any error) goes to serde, so every bad line gets serde's
//! message.

use std::borrow::Cow;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::super::{json_error, SessionId};
use crate::error::RecordError;
use crate::record;

/// What the import reads of one request.
#[derive(Debug, PartialEq)]
pub struct Request<'a> {
    /// The timestamp's text to read as seconds, trimmed (a JSON number's
    /// own text).
    pub timestamp: Cow<'a, [u8]>,
    pub input_length: u64,
    pub output_length: u64,
    pub session_id: Option<Cow<'a, str>>,
}

/// The `hash_ids` object's lists in the order written (the prompt's
/// order), kept from line to line so that a line allocates nothing.
#[derive(Debug, Default)]
pub struct Lists {
    /// Each list's name and where its ids end in `ids`.
    lists: Vec<(Name, usize)>,
    ids: Vec<u64>,
    /// Names serde decoded (escapes), back to back.
    decoded: String,
}

/// Where a list's name is: a span of the line, or of `Lists::decoded`.
#[derive(Debug, Clone, Copy)]
enum Name {
    Line(usize, usize),
    Decoded(usize, usize),
}

impl Lists {
    fn clear(&mut self) {
        self.lists.clear();
        self.ids.clear();
        self.decoded.clear();
    }

    /// Ends the list named `name` with the ids pushed since the last one.
    fn end(&mut self, name: Name) {
        self.lists.push((name, self.ids.len()));
    }

    /// The lists as (name, ids), in order; `line` is the line they were
    /// parsed from. A name is UTF-8 (serde's decoded text, or the fast
    /// scan's printable ASCII).
    pub fn iter<'s>(&'s self, line: &'s [u8]) -> impl Iterator<Item = (&'s [u8], &'s [u64])> {
        let mut from = 0;
        self.lists.iter().map(move |&(name, end)| {
            let ids = &self.ids[from..end];
            from = end;
            let name = match name {
                Name::Line(a, b) => &line[a..b],
                Name::Decoded(a, b) => &self.decoded.as_bytes()[a..b],
            };
            (name, ids)
        })
    }
}

/// Parses one request line into its fields and `lists`, or gives serde's
/// error (column and text) for a line that is not a request.
pub fn parse<'a>(line: &'a [u8], lists: &mut Lists) -> Result<Request<'a>, RecordError> {
    lists.clear();
    if let Some(req) = fast(line, lists) {
        return Ok(req);
    }
    lists.clear();
    reference(line, lists)
}

/// serde's parse: the reference, for every line the fast scan leaves.
pub fn reference<'a>(line: &'a [u8], lists: &mut Lists) -> Result<Request<'a>, RecordError> {
    let req: RagRequest = serde_json::from_slice(line).map_err(|e| json_error(&e))?;
    for (name, ids) in &req.hash_ids.0 {
        // A copy: this path is rare, and the spans stay the fast scan's.
        let at = lists.decoded.len();
        lists.decoded.push_str(name);
        lists.ids.extend_from_slice(ids);
        lists.end(Name::Decoded(at, lists.decoded.len()));
    }
    Ok(Request {
        // Unicode's whitespace, as `str::trim` (a number has none).
        timestamp: match req.timestamp {
            Seconds::Text(s) => Cow::Owned(s.trim().as_bytes().to_vec()),
            Seconds::Number(n) => Cow::Owned(n.to_string().into_bytes()),
        },
        input_length: req.input_length,
        output_length: req.output_length,
        session_id: req.session_id.map(|s| Cow::Owned(s.text().into_owned())),
    })
}

/// A timestamp as RAGPulse writes it (a string of seconds), or a number.
#[derive(Deserialize)]
#[serde(untagged)]
enum Seconds {
    Text(String),
    Number(serde_json::Number),
}

#[derive(Deserialize)]
struct RagRequest<'a> {
    timestamp: Seconds,
    input_length: u64,
    output_length: u64,
    #[serde(borrow)]
    hash_ids: Components<'a>,
    #[serde(default)]
    session_id: Option<SessionId>,
}

/// The `hash_ids` object's lists in the order written. Names are borrowed
/// from the line when they can be (a name without escapes).
struct Components<'a>(Vec<(Cow<'a, str>, Vec<u64>)>);

impl<'de: 'a, 'a> Deserialize<'de> for Components<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Components<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of component id lists")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<Components<'a>, A::Error> {
                let mut v = Vec::new();
                while let Some(k) = m.next_key::<ListName<'a>>()? {
                    v.push((k.0, m.next_value::<Vec<u64>>()?));
                }
                Ok(Components(v))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// A component's name: borrowed from the line unless it has escapes.
struct ListName<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for ListName<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = ListName<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a component name")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> std::result::Result<ListName<'a>, E> {
                Ok(ListName(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> std::result::Result<ListName<'a>, E> {
                Ok(ListName(Cow::Owned(s.to_string())))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

/// The fields of a request, each a bit in the set of those seen.
const TIMESTAMP: u8 = 1;
const INPUT: u8 = 2;
const OUTPUT: u8 = 4;
const HASH_IDS: u8 = 8;
const SESSION: u8 = 16;
/// The fields serde requires (`session_id` defaults to none).
const REQUIRED: u8 = TIMESTAMP | INPUT | OUTPUT | HASH_IDS;

/// The hand-written scan of the files' shape, or `None` for a line it
/// does not take (serde then decides). What it takes, serde takes with
/// the same values (`tests` hold it to that).
pub fn fast<'a>(line: &'a [u8], lists: &mut Lists) -> Option<Request<'a>> {
    if !plain(line) {
        return None;
    }
    let mut s = Scan { b: line, i: 0 };
    let mut req = Request {
        timestamp: Cow::Borrowed(&[]),
        input_length: 0,
        output_length: 0,
        session_id: None,
    };
    let mut seen = 0u8;
    s.ws();
    s.byte(b'{')?;
    loop {
        s.ws();
        let key = s.string()?;
        s.colon()?;
        let bit = match key {
            b"timestamp" => {
                req.timestamp = Cow::Borrowed(s.seconds()?);
                TIMESTAMP
            }
            b"input_length" => {
                req.input_length = s.uint()?;
                INPUT
            }
            b"output_length" => {
                req.output_length = s.uint()?;
                OUTPUT
            }
            b"hash_ids" => {
                s.lists(lists)?;
                HASH_IDS
            }
            b"session_id" => {
                req.session_id = s.session()?;
                SESSION
            }
            _ => return None, // serde skips it, checking its syntax
        };
        if seen & bit != 0 {
            return None; // serde: "duplicate field"
        }
        seen |= bit;
        if s.end_of(b'}')? {
            break;
        }
    }
    s.ws();
    (s.i == line.len() && seen & REQUIRED == REQUIRED).then_some(req)
}

/// Eight bytes of ones, and their high bits: the constants of the
/// eight-bytes-at-a-time tests.
const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The eight bytes of `b` from `i` as one little-endian word, if there are eight.
fn word(b: &[u8], i: usize) -> Option<u64> {
    b.get(i..)?
        .first_chunk::<8>()
        .map(|w| u64::from_le_bytes(*w))
}

/// The high bit of each byte of `x` that is zero. Exact for the lowest
/// such byte (a borrow runs only from a zero byte to the bytes above it),
/// which is all the callers use, and for "is there one".
fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(ONES) & !x & HIGH
}

/// Whether every byte of `line` is printable ASCII other than `\\`: then a
/// string in it has no escape and nothing serde would refuse, and any
/// span of it is UTF-8. Eight bytes at a time (a byte loop was an eighth
/// of the import's instructions).
fn plain(line: &[u8]) -> bool {
    let mut i = 0;
    while let Some(x) = word(line, i) {
        // A byte below 0x20, above 0x7e, or a `\\`. Each test is exact for
        // "is there one": a borrow or carry across bytes starts only at a
        // byte the test already found.
        let below = x.wrapping_sub(ONES * 0x20) & !x & HIGH;
        let above = (x.wrapping_add(ONES) | x) & HIGH;
        let backslash = zero_bytes(x ^ (ONES * u64::from(b'\\')));
        if below | above | backslash != 0 {
            return false;
        }
        i += 8;
    }
    line[i..]
        .iter()
        .all(|&c| (b' '..=b'~').contains(&c) && c != b'\\')
}

/// A cursor over one [`plain`] line for [`fast`]: every method takes
/// exactly the form it names or gives `None`.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scan<'a> {
    /// Skips JSON's whitespace (on a plain line, spaces).
    fn ws(&mut self) {
        while self.i < self.b.len() && self.b[self.i] == b' ' {
            self.i += 1;
        }
    }

    /// The byte `c`.
    fn byte(&mut self, c: u8) -> Option<()> {
        (*self.b.get(self.i)? == c).then(|| self.i += 1)
    }

    /// `:` between whitespace.
    fn colon(&mut self) -> Option<()> {
        self.ws();
        self.byte(b':')?;
        self.ws();
        Some(())
    }

    /// After a member or an element: whitespace, then `,` and whitespace
    /// (`false`) or `close` (`true`).
    fn end_of(&mut self, close: u8) -> Option<bool> {
        self.ws();
        match *self.b.get(self.i)? {
            b',' => {
                self.i += 1;
                self.ws();
                Some(false)
            }
            c if c == close => {
                self.i += 1;
                Some(true)
            }
            _ => None,
        }
    }

    /// A string's text (on a plain line a string ends at the next quote;
    /// found eight bytes at a time).
    fn string(&mut self) -> Option<&'a [u8]> {
        self.byte(b'"')?;
        let start = self.i;
        let mut i = start;
        while let Some(x) = word(self.b, i) {
            let quotes = zero_bytes(x ^ (ONES * u64::from(b'"')));
            if quotes != 0 {
                self.i = i + (quotes.trailing_zeros() / 8) as usize + 1;
                return Some(&self.b[start..self.i - 1]);
            }
            i += 8;
        }
        let len = self.b[i..].iter().position(|&c| c == b'"')?;
        self.i = i + len + 1;
        Some(&self.b[start..i + len])
    }

    /// A whole number of at most 19 digits, without sign, fraction or
    /// exponent: its value and its text, which is how serde writes it
    /// back. Its end is checked by the caller's next step (whitespace, `,`
    /// or the close must follow): a fraction, an exponent, a leading
    /// zero's next digit or a 20th digit fails it, as serde refuses or
    /// reads a float there.
    fn uint_text(&mut self) -> Option<(u64, &'a [u8])> {
        let start = self.i;
        let first = self.b.get(start)?.wrapping_sub(b'0');
        if first > 9 {
            return None;
        }
        let end = if first == 0 {
            start + 1
        } else {
            self.b.len().min(start + 19)
        };
        let mut n = 0u64;
        while self.i < end {
            let d = self.b[self.i].wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            n = n * 10 + u64::from(d); // 19 digits cannot overflow
            self.i += 1;
        }
        Some((n, &self.b[start..self.i]))
    }

    fn uint(&mut self) -> Option<u64> {
        Some(self.uint_text()?.0)
    }

    /// The timestamp: a string, trimmed (on a plain line `str::trim`
    /// takes only spaces), or a whole number's text.
    fn seconds(&mut self) -> Option<&'a [u8]> {
        match self.b.get(self.i)? {
            b'"' => Some(self.string()?.trim_ascii()),
            _ => Some(self.uint_text()?.1),
        }
    }

    /// `session_id`: a string, a whole number (written back as its
    /// digits), or `null` (none).
    fn session(&mut self) -> Option<Option<Cow<'a, str>>> {
        let text = match self.b.get(self.i)? {
            b'"' => self.string()?,
            b'n' => {
                let end = self.i + 4;
                (self.b.get(self.i..end)? == b"null").then_some(())?;
                self.i = end;
                return Some(None);
            }
            _ => self.uint_text()?.1,
        };
        Some(Some(Cow::Borrowed(std::str::from_utf8(text).ok()?)))
    }

    /// The `hash_ids` object: names, each with an array of ids (read by
    /// the records' one rule for id arrays); a name may repeat (serde
    /// keeps every pair).
    fn lists(&mut self, lists: &mut Lists) -> Option<()> {
        self.byte(b'{')?;
        self.ws();
        if self.byte(b'}').is_some() {
            return Some(());
        }
        loop {
            let name = self.string()?;
            let end = self.i - 1;
            self.colon()?;
            self.i = record::read_id_array(self.b, self.i, &mut lists.ids)?;
            lists.end(Name::Line(end - name.len(), end));
            if self.end_of(b'}')? {
                return Some(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What a parse gives, as text: the request and its lists, or the error.
    fn shown(line: &[u8], parsed: Result<Request, RecordError>, lists: &Lists) -> String {
        match parsed {
            Ok(r) => {
                let lists: Vec<(String, &[u64])> = lists
                    .iter(line)
                    .map(|(n, ids)| (String::from_utf8_lossy(n).into_owned(), ids))
                    .collect();
                format!("{r:?} {lists:?}")
            }
            Err(e) => format!("error: {}", e.0),
        }
    }

    /// The import's parse and serde's, each as text, and whether the
    /// fast scan took the line.
    fn both(line: &[u8]) -> (String, String, bool) {
        let mut l = Lists::default();
        let took = fast(line, &mut l).is_some();
        let mut l = Lists::default();
        let ours = shown(line, parse(line, &mut l), &l);
        let mut l = Lists::default();
        let theirs = shown(line, reference(line, &mut l), &l);
        (ours, theirs, took)
    }

    const FILE_LINE: &str = r#"{"timestamp": "82", "input_length": 3112, "output_length": 192, "hash_ids": {"sys_prompt": [8302, 14332, 15199], "passages_ids": [7398, 7370], "history": [15200], "web_search": [], "user_input": [26923]}, "session_id": "1757476916095-afhwfadnh5ew"}"#;

    #[test]
    fn the_files_shape_is_read_fast_to_serdes_values() {
        let (ours, theirs, took) = both(FILE_LINE.as_bytes());
        assert!(took);
        assert_eq!(ours, theirs);
        assert!(ours.contains(r#"("passages_ids", [7398, 7370])"#), "{ours}");
    }

    /// Lines at the edges of the fast scan's subset: the ones it takes
    /// and the ones it must leave to serde; either way the import's parse
    /// must give serde's answer (values, or error text and column).
    #[test]
    fn odd_lines_are_parsed_as_serde_parses_them() {
        let row = |ts: &str, input: &str, hash: &str, session: &str| {
            format!(
                r#"{{"timestamp": {ts}, "input_length": {input}, "output_length": 9, "hash_ids": {hash}, "session_id": {session}}}"#
            )
        };
        let h = r#"{"sys_prompt": [100, 101], "user_input": [300]}"#;
        let mut lines: Vec<(String, bool)> = vec![
            // (line, whether the fast scan takes it)
            (row(r#""82""#, "1064", h, r#""a""#), true),
            (row("82", "1064", h, r#""a""#), true),
            (row("0", "0", "{}", "null"), true),
            (row(r#""  82 ""#, "1064", h, "12"), true),
            (row(r#""082""#, "1064", h, r#""""#), true),
            (
                r#"{"session_id":"a","hash_ids":{"x":[1,2],"x":[]},"output_length":9,"timestamp":"1","input_length":7}"#.into(),
                true,
            ),
            (row(r#""82""#, "1064", h, r#""a""#).replace('}', " } "), true),
            (row(r#""82""#, "1064", h, r#""a""#).replace(": ", " :  "), true),
            (
                format!("  {}  ", row(r#""82""#, "9999999999999999999", h, r#""a""#)),
                true,
            ),
            // Escapes, whitespace other than spaces, non-ASCII: serde's.
            (row(r#""\u0038\u0032""#, "1064", h, r#""a""#), false),
            (row(r#""82""#, "1064", h, r#""a\"b\\c\u00e9\n""#), false),
            (row(r#""82""#, "1064", h, "\"caf\u{e9}\""), false),
            (row(r#""82""#, "1064", h, "\"x\ty\""), false),
            (row("\"\u{a0}82\"", "1064", h, r#""a""#), false),
            (row(r#""82""#, "1064", r#"{"sys\u005fprompt": [100]}"#, r#""a""#), false),
            (row(r#""82""#, "1064", h, r#""a""#).replace(", ", ",\t"), false),
            (row(r#""82""#, "1064", h, r#""a""#).replace("\"timestamp\"", r#""time\u0073tamp""#), false),
            // Numbers serde reads otherwise or refuses.
            (row("82.5", "1064", h, r#""a""#), false),
            (row("1e2", "1064", h, r#""a""#), false),
            (row("-1", "1064", h, r#""a""#), false),
            (row("-0", "1064", h, r#""a""#), false),
            (row("082", "1064", h, r#""a""#), false),
            (row("18446744073709551616", "1064", h, r#""a""#), false),
            (row(r#""82""#, "1064.0", h, r#""a""#), false),
            (row(r#""82""#, "1E3", h, r#""a""#), false),
            (row(r#""82""#, "-1", h, r#""a""#), false),
            (row(r#""82""#, "01064", h, r#""a""#), false),
            (row(r#""82""#, "18446744073709551615", h, r#""a""#), false),
            (row(r#""82""#, "18446744073709551616", h, r#""a""#), false),
            (row(r#""82""#, "\"1064\"", h, r#""a""#), false),
            (row(r#""82""#, "1064", h, "1.50"), false),
            (row(r#""82""#, "1064", h, "-3"), false),
            (row(r#""82""#, "1064", h, "true"), false),
            (row(r#""82""#, "1064", h, "nul"), false),
            (row("null", "1064", h, r#""a""#), false),
            (row("true", "1064", h, r#""a""#), false),
            (row(r#""82""#, "1064", r#"{"a": [100.0]}"#, r#""a""#), false),
            (row(r#""82""#, "1064", r#"{"a": [-1]}"#, r#""a""#), false),
            (row(r#""82""#, "1064", r#"{"a": [0100]}"#, r#""a""#), false),
            (row(r#""82""#, "1064", r#"{"a": ["1"]}"#, r#""a""#), false),
            (row(r#""82""#, "1064", r#"{"a": [99999999999999999999]}"#, r#""a""#), false),
            (row(r#""82""#, "1064", r#"{"a": [18446744073709551615]}"#, r#""a""#), false),
            (row(r#""82""#, "1064", r#"{"a": [1, ]}"#, r#""a""#), false),
            (row(r#""82""#, "1064", r#"{"a": null}"#, r#""a""#), false),
            (row(r#""82""#, "1064", "[1, 2]", r#""a""#), false),
            (row(r#""82""#, "1064", "null", r#""a""#), false),
            (row(r#""82""#, "1064", r#"{"a": [1], }"#, r#""a""#), false),
            // Fields unknown, repeated, missing; not an object; trailing bytes.
            (row(r#""82""#, "1064", h, r#""a""#).replace("{\"timestamp\"", r#"{"model": {"a": [1, null]}, "timestamp""#), false),
            (row(r#""82""#, "1064", h, r#""a""#).replace("\"timestamp\"", "\"Timestamp\""), false),
            (row(r#""82""#, "1064", h, r#""a", "timestamp": "90""#), false),
            (row(r#""82""#, "1064", h, r#""a", "session_id": null"#), false),
            (row(r#""82""#, "1064", h, r#""a", "hash_ids": {}"#), false),
            (r#"{"timestamp": "82", "input_length": 1, "output_length": 9}"#.into(), false),
            (r#"{"input_length": 1, "output_length": 9, "hash_ids": {}}"#.into(), false),
            ("{}".into(), false),
            ("".into(), false),
            ("[\"82\", 1064, 9, {}, \"a\"]".into(), false),
            ("\"x\"".into(), false),
            (row(r#""82""#, "1064", h, r#""a""#) + " x", false),
            (row(r#""82""#, "1064", h, r#""a""#) + "{}", false),
            (row(r#""82""#, "1064", h, r#""a","#) + "}", false),
            (row(r#""82""#, "1064", r#"{"a": [1],}"#, r#""a""#), false),
            (row(r#""82""#, "1064", h, r#""a""#).trim_end_matches('}').into(), false),
            (format!("{}, \"deep\": {}{}}}", &row(r#""82""#, "1", "{}", "1")[..row(r#""82""#, "1", "{}", "1").len() - 1], "[".repeat(200), "]".repeat(200)), false),
        ];
        // A line cut anywhere is refused alike.
        let whole = row(r#""82""#, "1064", h, r#""a""#);
        lines.extend((0..whole.len()).map(|k| (whole[..k].to_string(), false)));
        for (line, fast_takes) in &lines {
            let (ours, theirs, took) = both(line.as_bytes());
            assert_eq!(ours, theirs, "{line}");
            assert_eq!(took, *fast_takes, "{line}: {ours}");
        }
        // Bytes that are not UTF-8, in a string serde reads and in one it skips.
        for line in [
            whole.replace("\"a\"", "\"a\u{1}\"").into_bytes(),
            [&whole.as_bytes()[..whole.len() - 2], b"\xff\"}"].concat(),
            [&whole.as_bytes()[..whole.len() - 1], b", \"z\": \"\xc3(\"}"].concat(),
        ] {
            let (ours, theirs, took) = both(&line);
            assert_eq!(ours, theirs);
            assert!(!took);
        }
    }

    /// Request lines with their parts varied: the five fields in any
    /// order, each value mostly of the files' form and otherwise of one
    /// serde reads differently or refuses, fields now and then left out,
    /// repeated or unknown, the spacing varied.
    fn request_line() -> impl Strategy<Value = String> {
        let odd_number = prop_oneof![
            Just("9999999999999999999"),
            Just("18446744073709551615"),
            Just("18446744073709551616"),
            Just("012"),
            Just("12.0"),
            Just("1e3"),
            Just("-5"),
            Just("-0"),
            Just("null"),
            Just("\"7\""),
        ];
        let number = prop_oneof![
            6 => (0u64..100_000).prop_map(|n| n.to_string()),
            1 => Just("0".to_string()),
            3 => odd_number.prop_map(str::to_string),
        ];
        let string = prop_oneof![
            6 => "[a-z0-9 .-]{0,12}".prop_map(|s| format!("\"{s}\"")),
            1 => Just(r#""\u0031""#.to_string()),
            1 => Just("\"caf\u{e9}\"".to_string()),
            1 => Just("\"a\\\"b\"".to_string()),
            1 => Just("\"\u{a0}7\"".to_string()),
        ];
        let value = prop_oneof![number.clone(), string];
        let ids =
            prop::collection::vec(number.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(", ")));
        let list = (
            prop_oneof![
                3 => Just("sys_prompt"),
                3 => Just("user_input"),
                1 => Just("a\\u0062"),
            ],
            prop_oneof![
                8 => ids,
                1 => Just("null".to_string()),
                1 => Just("[1,]".to_string()),
            ],
        )
            .prop_map(|(n, ids)| format!("\"{n}\": {ids}"));
        let hash_ids = prop_oneof![
            8 => prop::collection::vec(list, 0..4).prop_map(|v| format!("{{{}}}", v.join(", "))),
            1 => Just("[]".to_string()),
            1 => Just("null".to_string()),
        ];
        let fields = (
            value.clone(),
            number.clone(),
            number,
            hash_ids,
            prop_oneof![4 => value, 1 => Just("null".to_string())],
        )
            .prop_map(|(ts, input, output, hash, session)| {
                vec![
                    format!("\"timestamp\": {ts}"),
                    format!("\"input_length\": {input}"),
                    format!("\"output_length\": {output}"),
                    format!("\"hash_ids\": {hash}"),
                    format!("\"session_id\": {session}"),
                ]
            });
        let extra = prop_oneof![
            Just("\"timestamp\": \"1\""),
            Just("\"session_id\": null"),
            Just("\"hash_ids\": {}"),
            Just("\"input_length\": 1"),
            Just("\"model\": [1, {\"a\": null}]"),
        ];
        let seps = prop_oneof![
            4 => Just(", "),
            1 => Just(","),
            1 => Just(" , "),
            1 => Just(",\t"),
        ];
        (
            fields.prop_shuffle(),
            prop::collection::vec(0usize..10, 0..2),
            prop::collection::vec(extra, 0..2),
            seps,
            any::<bool>(),
        )
            .prop_map(|(mut members, drop, extra, sep, pad)| {
                for k in drop {
                    if k < members.len() {
                        members.remove(k);
                    }
                }
                members.extend(extra.into_iter().map(str::to_string));
                let body = members.join(sep);
                if pad {
                    format!(" {{ {body} }} ")
                } else {
                    format!("{{{body}}}")
                }
            })
    }

    /// The five fields in the files' order with varied values: mostly
    /// lines the fast scan takes.
    fn file_line() -> impl Strategy<Value = String> {
        (
            0u64..1_000_000,
            prop::collection::vec(prop::collection::vec(0u64..100_000_000, 0..5), 5),
            "[a-z0-9-]{0,30}",
        )
            .prop_map(|(n, lists, session)| {
                let names = ["sys_prompt", "passages_ids", "history", "web_search", "user_input"];
                let hash: Vec<String> = names
                    .iter()
                    .zip(&lists)
                    .map(|(name, ids)| {
                        let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
                        format!("\"{name}\": [{}]", ids.join(", "))
                    })
                    .collect();
                format!(
                    r#"{{"timestamp": "{n}", "input_length": {}, "output_length": {}, "hash_ids": {{{}}}, "session_id": "{session}"}}"#,
                    n * 7,
                    n % 1000,
                    hash.join(", ")
                )
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        #[test]
        fn varied_lines_are_parsed_as_serde_parses_them(line in request_line()) {
            let (ours, theirs, _) = both(line.as_bytes());
            prop_assert_eq!(ours, theirs, "{}", line);
        }

        /// One byte of a file-shaped line replaced, inserted or removed.
        #[test]
        fn mutated_lines_are_parsed_as_serde_parses_them(
            line in file_line(), at in any::<prop::sample::Index>(), op in 0u8..3, byte in any::<u8>()
        ) {
            let (ours, theirs, took) = both(line.as_bytes());
            prop_assert_eq!(&ours, &theirs);
            prop_assert!(took, "{}", line);
            let mut bytes = line.into_bytes();
            let k = at.index(bytes.len());
            match op {
                0 => bytes[k] = byte,
                1 => bytes.insert(k, byte),
                _ => { bytes.remove(k); }
            }
            let (ours, theirs, _) = both(&bytes);
            prop_assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(&bytes));
        }
    }
}
