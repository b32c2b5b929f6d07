//! The session files read by hand: the objects, arrays, strings and
//! numbers of kv-cache-tester's shape, into the values serde reads
//! ([`Session`], the reference). Anything else — a `null`, a key written
//! with an escape, a number where a string is, a key twice, bad syntax,
//! nesting deeper than [`MAX_DEPTH`] — makes [`documents`] give up on the
//! file, which is then read by serde, whose messages name the line, the
//! column and what was expected. So the scanner never accepts what serde
//! refuses, and what it accepts it reads as serde does (the module's
//! property test runs both on generated documents).
//!
//! serde read each `hash_ids` element through its sequence visitor and
//! integer parser, 56% of an import (cachegrind,
//! docs/decisions/0050-weka-by-hand.md). Here an id array is first
//! compared with the previous one in the file: a call's ids are mostly the
//! previous call's, written the same, so the ids of the bytes they share
//! (cut back to the last element both hold whole) are copied, and only the
//! rest is read digit by digit.

use super::renumber::common_prefix;
use super::{Session, WekaRequest};

/// Nesting the scanner follows (serde_json stops at 128).
const MAX_DEPTH: usize = 100;

/// Every session document in `body` (the file without its BOM), each with
/// the offset of its first byte; `None` when any of them is off the
/// files' shape (the caller then reads the file with serde).
pub(super) fn documents(body: &[u8]) -> Option<Vec<(usize, Session)>> {
    let mut s = Scan {
        b: body,
        i: 0,
        depth: 0,
        prev: 0..0,
        prev_ends: Vec::new(),
        prev_ids: Vec::new(),
    };
    let mut docs = Vec::new();
    loop {
        s.ws();
        if s.i == body.len() {
            return Some(docs);
        }
        let start = s.i;
        docs.push((start, s.session()?));
    }
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
    depth: usize,
    /// The previous `hash_ids` array in the file: its text, where each
    /// element's digits end (from the `[`), and its ids. The next array
    /// keeps what it shares and puts its own after it, in place.
    prev: std::ops::Range<usize>,
    prev_ends: Vec<u32>,
    prev_ids: Vec<u64>,
}

/// The keys of a session, then of a request: a key twice is serde's error.
const KEYS: [&[u8]; 4] = [b"id", b"block_size", b"hash_id_scope", b"requests"];
const REQUEST_KEYS: [&[u8]; 9] = [
    b"t",
    b"type",
    b"in",
    b"out",
    b"hash_ids",
    b"think_time",
    b"api_time",
    b"agent_id",
    b"requests",
];

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// JSON's whitespace (serde_json's too): space, tab, CR, LF.
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// The byte `c` after whitespace.
    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.peek()? == c).then(|| self.i += 1)
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// An object's members: `member` reads each value after its key and
    /// `:`, and says whether the key was one it knows; a known key twice
    /// is off the shape (serde's "duplicate field").
    fn object(
        &mut self,
        keys: &[&[u8]],
        mut member: impl FnMut(&mut Self, usize) -> Option<()>,
    ) -> Option<()> {
        self.eat(b'{')?;
        self.enter()?;
        let mut seen = 0u32;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            self.depth -= 1;
            return Some(());
        }
        loop {
            self.ws();
            let key = self.key()?;
            self.eat(b':')?;
            self.ws();
            match keys.iter().position(|k| *k == key) {
                Some(k) => {
                    if seen & (1 << k) != 0 {
                        return None;
                    }
                    seen |= 1 << k;
                    member(self, k)?;
                }
                None => self.skip_value()?,
            }
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    self.depth -= 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn session(&mut self) -> Option<Session> {
        let (mut id, mut block_size, mut hash_id_scope, mut requests) = (None, None, None, None);
        self.object(&KEYS, |s, k| {
            match k {
                0 => id = Some(s.string()?),
                1 => block_size = Some(s.uint()?),
                2 => hash_id_scope = Some(s.string()?),
                _ => requests = Some(s.requests()?),
            }
            Some(())
        })?;
        Some(Session {
            id,
            block_size,
            hash_id_scope,
            // serde's "missing field `requests`".
            requests: requests?,
        })
    }

    fn requests(&mut self) -> Option<Vec<WekaRequest>> {
        self.eat(b'[')?;
        self.enter()?;
        let mut out = Vec::new();
        self.ws();
        if self.peek()? != b']' {
            loop {
                out.push(self.request()?);
                self.ws();
                match self.peek()? {
                    b',' => self.i += 1,
                    b']' => break,
                    _ => return None,
                }
            }
        }
        self.i += 1;
        self.depth -= 1;
        Some(out)
    }

    fn request(&mut self) -> Option<WekaRequest> {
        let mut r = WekaRequest::default();
        self.object(&REQUEST_KEYS, |s, k| {
            match k {
                0 => r.t = s.float()?,
                1 => r.kind = Some(s.string()?),
                2 => r.input = Some(s.uint()?),
                3 => r.out = Some(s.uint()?),
                4 => r.hash_ids = s.ids()?,
                5 => r.think_time = Some(s.float()?),
                6 => r.api_time = Some(s.float()?),
                7 => r.agent_id = Some(s.string()?),
                _ => r.requests = Some(s.requests()?),
            }
            Some(())
        })?;
        Some(r)
    }

    /// A key: a string without escapes, ASCII (serde matches keys after
    /// unescaping; those few go to serde).
    fn key(&mut self) -> Option<&'a [u8]> {
        let (range, escaped) = self.raw_string()?;
        let b: &'a [u8] = self.b;
        let key = &b[range];
        (!escaped && key.is_ascii()).then_some(key)
    }

    /// A string's value: taken as it is without escapes, else serde's own
    /// reading of the string alone.
    fn string(&mut self) -> Option<String> {
        let start = self.i;
        let (range, escaped) = self.raw_string()?;
        if escaped {
            return serde_json::from_slice(&self.b[start..self.i]).ok();
        }
        std::str::from_utf8(&self.b[range]).ok().map(str::to_owned)
    }

    /// The text between a string's quotes, and whether it has escapes
    /// (checked by whoever reads it). A control character is serde's error.
    fn raw_string(&mut self) -> Option<(std::ops::Range<usize>, bool)> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.i + 1;
        let mut i = start;
        let mut escaped = false;
        loop {
            match *self.b.get(i)? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    i += 2;
                }
                0..=0x1f => return None,
                _ => i += 1,
            }
        }
        self.i = i + 1;
        Some((start..i, escaped))
    }

    /// A string skipped: it must still be one serde reads.
    fn skip_string(&mut self) -> Option<()> {
        let start = self.i;
        let (range, escaped) = self.raw_string()?;
        if escaped {
            return serde_json::from_slice::<String>(&self.b[start..self.i])
                .ok()
                .map(drop);
        }
        std::str::from_utf8(&self.b[range]).ok().map(drop)
    }

    /// A whole number without sign, fraction or exponent, at most 19
    /// digits (no overflow); anything else (a float where a count is, 20
    /// digits) goes to serde.
    fn uint(&mut self) -> Option<u64> {
        let start = self.i;
        let mut v = 0u64;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            v = v * 10 + u64::from(d - b'0');
            self.i += 1;
            if self.i - start > 19 {
                return None;
            }
        }
        let digits = &self.b[start..self.i];
        let whole = !digits.is_empty() && (digits[0] != b'0' || digits.len() == 1);
        let ends = !matches!(self.peek(), Some(b'.' | b'e' | b'E'));
        (whole && ends).then_some(v)
    }

    /// A number's text by JSON's grammar, its value by serde's own parser
    /// (the floats here are a few a call, not worth a second float reader).
    fn float(&mut self) -> Option<f64> {
        let start = self.i;
        self.skip_number()?;
        serde_json::from_slice(&self.b[start..self.i]).ok()
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn skip_number(&mut self) -> Option<()> {
        let digits = |s: &mut Self| {
            let from = s.i;
            while let Some(b'0'..=b'9') = s.peek() {
                s.i += 1;
            }
            s.i - from
        };
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        let first = self.peek();
        let n = digits(self);
        if n == 0 || (first == Some(b'0') && n > 1) {
            return None;
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if digits(self) == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if digits(self) == 0 {
                return None;
            }
        }
        Some(())
    }

    /// Any value, checked and skipped (the fields the importer does not use).
    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' => self.object(&[], |_, _| None),
            b'[' => {
                self.i += 1;
                self.enter()?;
                self.ws();
                if self.peek()? != b']' {
                    loop {
                        self.ws();
                        self.skip_value()?;
                        self.ws();
                        match self.peek()? {
                            b',' => self.i += 1,
                            b']' => break,
                            _ => return None,
                        }
                    }
                }
                self.i += 1;
                self.depth -= 1;
                Some(())
            }
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            b'n' => self.word(b"null"),
            _ => self.skip_number(),
        }
    }

    fn word(&mut self, w: &[u8]) -> Option<()> {
        self.b[self.i..].starts_with(w).then(|| self.i += w.len())
    }

    /// A `hash_ids` array. The bytes it shares with the previous array,
    /// cut back to the last element whose digits and the byte after them
    /// are shared, are that array's ids; the rest is read here.
    fn ids(&mut self) -> Option<Vec<u64>> {
        let start = self.i;
        if self.peek()? != b'[' {
            return None;
        }
        let b = self.b;
        let same = common_prefix(&b[start..], &b[self.prev.clone()]);
        let shared = self.prev_ends.partition_point(|&e| (e as usize) < same);
        let mut ids = Vec::with_capacity(self.prev_ids.len().max(16));
        ids.extend_from_slice(&self.prev_ids[..shared]);
        self.prev_ends.truncate(shared);
        self.prev_ids.truncate(shared);
        let mut i = match shared {
            0 => start + 1,
            k => start + self.prev_ends[k - 1] as usize,
        };
        let ws = |i: &mut usize| {
            while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(*i) {
                *i += 1;
            }
        };
        ws(&mut i);
        // After `[`: an element or `]`; after an element: `,` or `]`.
        let mut after_element = shared > 0;
        loop {
            if after_element {
                match *b.get(i)? {
                    b',' => {
                        i += 1;
                        ws(&mut i);
                    }
                    b']' => break,
                    _ => return None,
                }
            } else if b.get(i) == Some(&b']') && ids.is_empty() {
                break;
            }
            let from = i;
            let mut v = 0u64;
            while let Some(&d @ b'0'..=b'9') = b.get(i) {
                v = v.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
                i += 1;
            }
            let n = i - from;
            // No sign, fraction or exponent, no leading zero, at most 19
            // digits (20 may be above u64: serde decides).
            if n == 0 || n > 19 || (b[from] == b'0' && n > 1) {
                return None;
            }
            if let Some(b'.' | b'e' | b'E') = b.get(i) {
                return None;
            }
            ids.push(v);
            // An array of 4 GB or more is serde's.
            self.prev_ends.push(u32::try_from(i - start).ok()?);
            ws(&mut i);
            after_element = true;
        }
        self.i = i + 1;
        self.prev = start..self.i;
        self.prev_ids.extend_from_slice(&ids[shared..]);
        Some(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// serde's reading of every document in `body`, or `None` at its first error.
    fn by_serde(body: &[u8]) -> Option<Vec<(usize, Session)>> {
        let mut stream = serde_json::Deserializer::from_slice(body).into_iter::<Session>();
        let mut out = Vec::new();
        loop {
            let at = stream.byte_offset();
            match stream.next() {
                None => return Some(out),
                Some(Ok(s)) => {
                    let first = at
                        + body[at..]
                            .iter()
                            .take_while(|b| b.is_ascii_whitespace())
                            .count();
                    out.push((first, s));
                }
                Some(Err(_)) => return None,
            }
        }
    }

    /// What the scanner reads, serde reads the same; `accept` says the
    /// document is of the files' shape, so the scanner must read it.
    fn same_as_serde(doc: &str, accept: bool) -> std::result::Result<(), TestCaseError> {
        let hand = documents(doc.as_bytes());
        let serde = by_serde(doc.as_bytes());
        if accept {
            prop_assert!(hand.is_some(), "the scanner gave up on {doc}");
        }
        if let Some(hand) = hand {
            prop_assert_eq!(Some(hand), serde, "{}", doc);
        }
        Ok(())
    }

    /// JSON whitespace, mostly none.
    fn ws() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => Just(String::new()),
            1 => prop::collection::vec(prop::sample::select(vec![" ", "\t", "\n", "\r\n"]), 1..3)
                .prop_map(|v| v.concat()),
        ]
    }

    fn id() -> impl Strategy<Value = String> {
        prop_oneof![
            8 => (1u64..300).prop_map(|v| v.to_string()),
            1 => Just("0".to_string()),
            1 => (0u64..10_000_000_000_000_000_000).prop_map(|v| v.to_string()),
            1 => Just("18446744073709551615".to_string()),
            1 => Just("9999999999999999999".to_string()),
        ]
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => "[a-z0-9_/-]{0,12}".prop_map(|s| format!("\"{s}\"")),
            1 => prop::sample::select(vec![
                r#""a\"b""#, r#""\\""#, r#""\u00e9t\u00e9""#, r#""tab\there""#,
                r#""\ud83d\ude00""#, "\"héllo\"", r#""\/""#,
            ]).prop_map(str::to_string),
        ]
    }

    fn float() -> impl Strategy<Value = String> {
        prop_oneof![
            (0u32..100_000, 0u32..1000).prop_map(|(a, b)| format!("{a}.{b}")),
            (0u32..1000).prop_map(|a| a.to_string()),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| f.to_string()),
            Just("1.5e3".to_string()),
            Just("-0.0".to_string()),
            Just("0.1000000000000000055511151231257827".to_string()),
        ]
    }

    /// A request of the files' shape (keys in any order, the ones the
    /// importer skips too), `prev` the previous request's id elements,
    /// which it often starts with; sub-agents hold their own requests.
    fn request(depth: u32) -> BoxedStrategy<Vec<(String, String)>> {
        let ids = (0usize..30, prop::collection::vec(id(), 0..8), ws(), ws());
        let plain = (
            float(),
            prop_oneof![Just("n"), Just("subagent"), Just("tool")],
            0u64..500_000,
            0u64..5000,
            ids,
            prop::option::of(float()),
            prop::option::of(float()),
            prop::option::of(text()),
            text(),
            ws(),
        )
            .prop_map(
                |(t, kind, input, out, (keep, ids, w1, w2), think, api, agent, model, w)| {
                    let mut fields = vec![
                        ("t".to_string(), t),
                        ("type".to_string(), format!("\"{kind}\"")),
                        ("model".to_string(), model),
                        ("in".to_string(), input.to_string()),
                        ("out".to_string(), out.to_string()),
                        // `keep` and the ids: joined by the document writer
                        // with the previous request's (see `session`).
                        (
                            "hash_ids".to_string(),
                            format!("{keep}|{w1}|{w2}|{}", ids.join(",")),
                        ),
                        ("input_types".to_string(), format!("[{w}\"text\"{w}]")),
                        (
                            "totals".to_string(),
                            format!("{{\"x\":{w}[1,{w}2.5e-3,true,null,{{}}]}}"),
                        ),
                    ];
                    if let Some(th) = think {
                        fields.push(("think_time".to_string(), th));
                    }
                    if let Some(a) = api {
                        fields.push(("api_time".to_string(), a));
                    }
                    if let Some(a) = agent {
                        fields.push(("agent_id".to_string(), a));
                    }
                    fields
                },
            );
        if depth == 0 {
            return plain.boxed();
        }
        (
            plain,
            prop::option::of(prop::collection::vec(request(depth - 1), 0..3)),
        )
            .prop_map(|(mut fields, sub)| {
                if let Some(sub) = sub {
                    fields.push(("requests".to_string(), format!("@{}", sub.len())));
                    // Sub-requests are rendered by `render`.
                    for r in sub {
                        fields.push(("@".to_string(), render_fields(&r)));
                    }
                }
                fields
            })
            .boxed()
    }

    /// Keeps nested requests as pre-rendered text until `render`.
    fn render_fields(fields: &[(String, String)]) -> String {
        serde_json::to_string(fields).unwrap()
    }

    /// Writes a request's fields as an object, joining `hash_ids` with
    /// the previous array's elements (`prev`, updated).
    fn render(
        fields: &[(String, String)],
        order: &[usize],
        prev: &mut Vec<String>,
        w: &str,
    ) -> String {
        let mut members = Vec::new();
        let mut subs: Vec<String> = Vec::new();
        for (k, v) in fields {
            if k == "@" {
                subs.push(v.clone());
            }
        }
        let plain: Vec<&(String, String)> = fields.iter().filter(|(k, _)| k != "@").collect();
        let mut rendered: Vec<String> = Vec::new();
        for (k, v) in &plain {
            let value = if k == "hash_ids" {
                let mut parts = v.splitn(4, '|');
                let keep: usize = parts.next().unwrap().parse().unwrap();
                let (w1, w2) = (parts.next().unwrap(), parts.next().unwrap());
                let mut ids: Vec<String> = prev[..keep.min(prev.len())].to_vec();
                ids.extend(
                    parts
                        .next()
                        .unwrap()
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string),
                );
                *prev = ids.clone();
                format!("[{w1}{}{w2}]", ids.join(&format!("{w2},{w1}")))
            } else if k == "requests" {
                let inner: Vec<String> = subs
                    .iter()
                    .map(|s| {
                        let f: Vec<(String, String)> = serde_json::from_str(s).unwrap();
                        let order: Vec<usize> = (0..f.len()).rev().collect();
                        render(&f, &order, prev, w)
                    })
                    .collect();
                format!("[{w}{}{w}]", inner.join(&format!(",{w}")))
            } else {
                v.clone()
            };
            rendered.push(format!("\"{k}\"{w}:{w}{value}"));
        }
        // Members in `order` (its first mention of each), then the rest.
        let mut used = vec![false; rendered.len()];
        for k in order.iter().copied().chain(0..rendered.len()) {
            if k < rendered.len() && !used[k] {
                used[k] = true;
                members.push(rendered[k].clone());
            }
        }
        format!("{{{w}{}{w}}}", members.join(&format!(",{w}")))
    }

    fn session() -> impl Strategy<Value = String> {
        (
            prop::collection::vec(request(1), 0..6),
            prop::option::of(text()),
            prop::option::of(1u64..1000),
            prop::option::of(prop_oneof![Just("\"local\""), Just("\"global\"")]),
            prop::collection::vec(0usize..12, 0..12),
            ws(),
        )
            .prop_map(|(reqs, id, b, scope, order, w)| {
                let mut prev = Vec::new();
                let reqs: Vec<String> = reqs
                    .iter()
                    .map(|r| render(r, &order, &mut prev, &w))
                    .collect();
                let mut members = Vec::new();
                if let Some(id) = id {
                    members.push(format!("\"id\":{w}{id}"));
                }
                members.push(format!("\"models\":{w}[\"m\"]"));
                if let Some(b) = b {
                    members.push(format!("\"block_size\":{w}{b}"));
                }
                if let Some(s) = scope {
                    members.push(format!("\"hash_id_scope\":{w}{s}"));
                }
                members.push(format!(
                    "\"requests\":{w}[{w}{}{w}]",
                    reqs.join(&format!(",{w}"))
                ));
                format!("{w}{{{}}}{w}", members.join(&format!(",{w}")))
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Documents of the files' shape (whitespace anywhere, escapes
        /// in strings, huge ids, empty arrays, keys in any order, sub-agents):
        /// the scanner reads them, as serde does.
        #[test]
        fn the_scanner_reads_sessions_as_serde_does(docs in prop::collection::vec(session(), 1..3)) {
            let doc = docs.concat();
            // 20-digit ids are serde's to read (or refuse).
            let huge = doc.contains("18446744073709551615");
            same_as_serde(&doc, !huge)?;
        }

        /// Any byte changed or cut off: the scanner reads the document as
        /// serde does, or gives it to serde.
        #[test]
        fn a_changed_document_is_read_as_serde_does_or_left_to_it(
            doc in session(),
            at in any::<prop::sample::Index>(),
            byte in prop::sample::select(b"0123456789 ,[]{}\":.-eE\\tnul\x01\xff".to_vec()),
            cut in any::<bool>(),
        ) {
            let mut bytes = doc.into_bytes();
            if bytes.is_empty() {
                return Ok(());
            }
            let k = at.index(bytes.len());
            if cut {
                bytes.truncate(k);
            } else {
                bytes[k] = byte;
            }
            let hand = documents(&bytes);
            if let Some(hand) = hand {
                prop_assert_eq!(Some(hand), by_serde(&bytes), "{}", String::from_utf8_lossy(&bytes));
            }
        }
    }

    #[test]
    fn off_shape_documents_are_left_to_serde() {
        for doc in [
            r#"{"requests": [{"t": 0, "in": 4, "out": 1, "hash_ids": null}]}"#,
            r#"{"h\u0061sh_id_scope": "local", "requests": []}"#,
            r#"{"id": "a", "id": "b", "requests": []}"#,
            r#"{"requests": [{"in": 4.0, "out": 1}]}"#,
            r#"{"requests": [{"hash_ids": [1, -2]}]}"#,
            r#"{"requests": [{"hash_ids": [01]}]}"#,
            r#"{"requests": [{"hash_ids": [1,]}]}"#,
            r#"{"requests": [], }"#,
            r#"{"id": "a"}"#,
            r#"[]"#,
        ] {
            assert!(documents(doc.as_bytes()).is_none(), "{doc}");
        }
        // Deeper than the scanner goes, still JSON serde reads.
        let deep = format!(
            "{{\"x\": {}{}, \"requests\": []}}",
            "[".repeat(101),
            "]".repeat(101)
        );
        assert!(documents(deep.as_bytes()).is_none());
        assert!(by_serde(deep.as_bytes()).is_some());
    }

    #[test]
    fn ids_shared_with_the_previous_array_are_cut_at_a_whole_element() {
        let doc = r#"{"requests": [{"hash_ids": [1,2,3,45]}, {"hash_ids": [1,2,3,4]},
            {"hash_ids": [1,2,3,4,5]}, {"hash_ids": [1,2,3,4 ]}, {"hash_ids": []}, {"hash_ids": [ 7 ]}]}"#;
        let docs = documents(doc.as_bytes()).unwrap();
        let ids: Vec<Vec<u64>> = docs[0]
            .1
            .requests
            .iter()
            .map(|r| r.hash_ids.clone())
            .collect();
        assert_eq!(
            ids,
            [
                vec![1, 2, 3, 45],
                vec![1, 2, 3, 4],
                vec![1, 2, 3, 4, 5],
                vec![1, 2, 3, 4],
                vec![],
                vec![7]
            ]
        );
        assert_eq!(Some(docs), by_serde(doc.as_bytes()));
    }
}
