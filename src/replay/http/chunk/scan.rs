//! A streamed chunk read by hand, in one pass over its bytes: the fields
//! [`Choice`] needs, and a check of the whole chunk's syntax.
//!
//! It decides only what it can decide exactly as serde's parser does
//! ([`super::read_serde`]): well-formed JSON made of objects, arrays,
//! strings with the short escapes, integers of up to 18 digits, `true`,
//! `false` and `null`, nested at most `MAX_DEPTH` (64) deep. Anything else (a
//! fraction or an exponent, whose range serde checks; a `\u` escape, whose
//! surrogates serde checks; any syntax error; bytes that are not UTF-8) is
//! [`Scan::Unsure`] and goes to the serde reader, which accepts or refuses
//! it. So the two agree on every chunk: a property test holds them to it,
//! on generated chunks and on vLLM's chunk with bytes changed at random.

use std::borrow::Cow;

use super::Choice;

/// Deeper than this is left to serde (whose own limit is 128).
const MAX_DEPTH: u32 = 64;

/// Integers longer than this are left to serde (it reads them as floats,
/// and a float out of range is an error).
const MAX_DIGITS: usize = 18;

/// What the hand-written read concluded.
#[derive(Debug, PartialEq)]
pub enum Scan<'a> {
    /// The chunk is well-formed: its first choice, as the serde reader
    /// gives it (`None`: no choice).
    Read(Option<Choice<'a>>),
    /// An `error` or `usage` key at the top: the full parse reads it (the
    /// serde reader refuses such a chunk too).
    Full,
    /// Not decided here: the serde reader decides.
    Unsure,
}

/// What one stream's chunks have in common: the bytes of the last chunk
/// before its top-level `"choices"` key (vLLM's `id`, `object`, `created`
/// and `model`, the same in every chunk of a stream), when they read as
/// the opening of an object with no `choices`, `error` or `usage` key. A
/// chunk that starts with the same bytes is in the same state there (the
/// same bytes read the same way), so its scan starts at that key: about
/// two thirds of a vLLM chunk are not read again.
///
/// And, when the last chunk's first choice had one plain string and
/// nothing else (a token: `content`, `text` or a reasoning field, with no
/// escape), the bytes before and after that string's value: a chunk that
/// is those same bytes around a value with no quote, backslash or control
/// character reads as the last one did with this value in place (the
/// parse is in the same state where the value starts, the value ends at
/// the first quote, and the rest is the same bytes again). That is the
/// next token of most streams, read by two comparisons and a look at the
/// token's bytes instead of a parse of the choice (callgrind: 2,000 of
/// mc-replay's 5,000 instructions a token were this scan).
#[derive(Debug, Default)]
pub struct Memo {
    prefix: Vec<u8>,
    template: Template,
}

impl Memo {
    /// Hints the cache lines of the template (see [`crate::prefetch`]).
    pub fn prefetch(&self) {
        let t = &self.template;
        crate::prefetch::span(t.head.as_ptr(), t.head.len());
        crate::prefetch::span(t.tail.as_ptr(), t.tail.len());
    }
}

/// The last chunk around its one string value (see [`Memo`]); its buffers
/// are kept from chunk to chunk.
#[derive(Debug, Default)]
struct Template {
    /// Up to the value's opening quote, included.
    head: Vec<u8>,
    /// From the value's closing quote to the end.
    tail: Vec<u8>,
    /// None: the last chunk made no template.
    field: Option<Field>,
}

/// Which of a [`Choice`]'s strings a [`Template`]'s value is.
#[derive(Debug, Clone, Copy)]
enum Field {
    Content,
    Text,
    ReasoningContent,
    Reasoning,
}

impl Template {
    /// `data`'s value when `data` is this template around a plain value.
    fn value<'a>(&self, data: &'a [u8]) -> Option<&'a str> {
        self.field?;
        let end = data.len().checked_sub(self.tail.len())?;
        if end < self.head.len() || !data.starts_with(&self.head) || !data.ends_with(&self.tail) {
            return None;
        }
        let value = &data[self.head.len()..end];
        if value.iter().any(|&c| c == b'"' || c == b'\\' || c < 0x20) {
            return None;
        }
        std::str::from_utf8(value).ok()
    }

    /// Notes the template `choice` (read from `data`) makes, or none.
    fn note(&mut self, data: &[u8], choice: Option<&Choice<'_>>) {
        self.field = choice.and_then(|c| self.around(data, c));
    }

    /// Notes the bytes around `choice`'s one field when it is a string
    /// borrowed from `data` with quotes around it; which field it is.
    fn around(&mut self, data: &[u8], choice: &Choice<'_>) -> Option<Field> {
        let Choice {
            finish_reason: None,
            content,
            reasoning_content,
            reasoning,
            tool_calls: false,
            text,
        } = choice
        else {
            return None;
        };
        let mut set = [
            (content, Field::Content),
            (text, Field::Text),
            (reasoning_content, Field::ReasoningContent),
            (reasoning, Field::Reasoning),
        ]
        .into_iter()
        .filter(|(v, _)| v.is_some());
        let (Some(Cow::Borrowed(value)), field) = set.next()? else {
            return None;
        };
        if set.next().is_some() {
            return None;
        }
        // Where the value lies in `data` (it was cut from it).
        let start = (value.as_ptr() as usize).checked_sub(data.as_ptr() as usize)?;
        let end = start + value.len();
        if start == 0 || end >= data.len() || data[start - 1] != b'"' || data[end] != b'"' {
            return None;
        }
        self.head.clear();
        self.head.extend_from_slice(&data[..start]);
        self.tail.clear();
        self.tail.extend_from_slice(&data[end..]);
        Some(field)
    }

    /// The choice of a chunk whose value [`Template::value`] found.
    fn choice<'a>(&self, value: &'a str) -> Choice<'a> {
        let value = Some(Cow::Borrowed(value));
        let mut c = Choice::default();
        match self.field {
            Some(Field::Content) => c.content = value,
            Some(Field::Text) => c.text = value,
            Some(Field::ReasoningContent) => c.reasoning_content = value,
            Some(Field::Reasoning) => c.reasoning = value,
            None => {}
        }
        c
    }
}

/// Reads a chunk (the data of one SSE event) on its own.
#[cfg(test)]
pub fn scan(data: &[u8]) -> Scan<'_> {
    scan_with(data, &mut Memo::default())
}

/// Reads a chunk (the data of one SSE event) by the memo's template when
/// it fits, else starting after the prefix this stream's last chunk
/// shared when this one has it too, and notes this chunk's prefix and
/// template.
pub fn scan_with<'a>(data: &'a [u8], memo: &mut Memo) -> Scan<'a> {
    if let Some(value) = memo.template.value(data) {
        return Scan::Read(Some(memo.template.choice(value)));
    }
    let read = scan_from_prefix(data, memo);
    let choice = match &read {
        Scan::Read(Some(choice)) => Some(choice),
        _ => None,
    };
    memo.template.note(data, choice);
    read
}

/// [`scan_with`] without the template: from the memo's prefix when
/// `data` starts with it.
fn scan_from_prefix<'a>(data: &'a [u8], memo: &mut Memo) -> Scan<'a> {
    let from = if !memo.prefix.is_empty() && data.starts_with(&memo.prefix) {
        memo.prefix.len()
    } else {
        0
    };
    // The rest's bytes are checked once: every string is then a slice of
    // `text` cut at a quote, an ASCII byte, so at a char boundary (and the
    // prefix ends before a quote, so the rest starts at one too).
    let rest = &data[from..];
    let Ok(text) = std::str::from_utf8(rest) else {
        return Scan::Unsure;
    };
    // A control character is an error in a string and JSON's whitespace
    // outside one: servers write neither (an event's data has no line
    // break), so a chunk with any is serde's, and no string byte needs
    // checking for one below.
    if rest.iter().fold(0u8, |any, &c| any | u8::from(c < 0x20)) != 0 {
        return Scan::Unsure;
    }
    let mut p = Parser {
        text,
        b: rest,
        i: 0,
        depth: 0,
        key_at: 0,
        choices_at: None,
    };
    let read = if from == 0 {
        p.top()
    } else {
        // Inside the top object, after at least one member, at the key.
        p.depth = 1;
        p.members(true)
    };
    if from == 0 {
        if let Some(at) = p.choices_at {
            memo.prefix.clear();
            memo.prefix.extend_from_slice(&data[..at]);
        }
    }
    read.unwrap_or(Scan::Unsure)
}

/// Something the reader leaves to serde.
struct Unsure;

type R<T> = Result<T, Unsure>;

struct Parser<'a> {
    text: &'a str,
    b: &'a [u8],
    i: usize,
    depth: u32,
    /// Where the last key read began (its opening quote).
    key_at: usize,
    /// Where the first top-level `choices` key's quote is, when a member
    /// came before it and none was `error` or `usage` (a [`Memo`]'s end).
    choices_at: Option<usize>,
}

impl<'a> Parser<'a> {
    fn top(&mut self) -> R<Scan<'a>> {
        self.ws();
        self.open(b'{')?;
        self.members(false)
    }

    /// The top object's members, then the end of the chunk: from its
    /// first (`resume` false: after the `{`), or from a key that follows a
    /// comma (`resume`: where a [`Memo`]'s prefix ends).
    fn members(&mut self, resume: bool) -> R<Scan<'a>> {
        let mut choice = None;
        let mut seen_choices = false;
        let mut first = !resume;
        let mut at_key = resume;
        loop {
            let had_member = !first;
            let key = if at_key {
                at_key = false;
                // The prefix may end before spaces this chunk has and the
                // noted one had not (`, "choices"`).
                self.ws();
                self.key_here()?
            } else {
                match self.key(&mut first)? {
                    Some(key) => key,
                    None => break,
                }
            };
            match key {
                b"choices" => {
                    if !seen_choices && had_member {
                        // `key` read the quote, the key, `:` and spaces.
                        self.choices_at = Some(self.key_at);
                    }
                    seen_choices = true;
                    choice = self.first_choice()?;
                }
                b"error" | b"usage" => return Ok(Scan::Full),
                _ => self.skip()?,
            }
        }
        self.ws();
        if self.i != self.b.len() {
            return Err(Unsure);
        }
        Ok(Scan::Read(choice))
    }

    /// `choices`: its first element when it is a non-empty array.
    fn first_choice(&mut self) -> R<Option<Choice<'a>>> {
        if self.peek()? != b'[' {
            self.skip()?;
            return Ok(None);
        }
        self.open(b'[')?;
        let mut first = true;
        if !self.element(&mut first)? {
            return Ok(None);
        }
        let choice = self.choice()?;
        while self.element(&mut first)? {
            self.skip()?;
        }
        Ok(Some(choice))
    }

    /// A choice: any value; one that is not an object has no fields.
    fn choice(&mut self) -> R<Choice<'a>> {
        let mut c = Choice::default();
        if self.peek()? != b'{' {
            self.skip()?;
            return Ok(c);
        }
        self.open(b'{')?;
        let (mut delta, mut message) = (None, None);
        let mut first = true;
        while let Some(key) = self.key(&mut first)? {
            match key {
                b"finish_reason" => c.finish_reason = self.str_field()?,
                b"text" => c.text = self.str_field()?,
                b"delta" => delta = Some(self.fields()?),
                b"message" => message = Some(self.fields()?),
                _ => self.skip()?,
            }
        }
        // Chat's delta, or a whole message when there is no delta.
        if let Some(f) = delta.or(message) {
            c.content = f.content;
            c.reasoning_content = f.reasoning_content;
            c.reasoning = f.reasoning;
            c.tool_calls = f.tool_calls;
        }
        Ok(c)
    }

    /// A `delta` or `message`: its fields, none when it is not an object.
    fn fields(&mut self) -> R<Choice<'a>> {
        let mut f = Choice::default();
        if self.peek()? != b'{' {
            self.skip()?;
            return Ok(f);
        }
        self.open(b'{')?;
        let mut first = true;
        while let Some(key) = self.key(&mut first)? {
            match key {
                b"content" => f.content = self.str_field()?,
                b"reasoning_content" => f.reasoning_content = self.str_field()?,
                b"reasoning" => f.reasoning = self.str_field()?,
                b"tool_calls" => f.tool_calls = self.non_empty_array()?,
                _ => self.skip()?,
            }
        }
        Ok(f)
    }

    /// A string field: `None` for any other value.
    fn str_field(&mut self) -> R<Option<Cow<'a, str>>> {
        if self.peek()? == b'"' {
            return self.string().map(Some);
        }
        self.skip()?;
        Ok(None)
    }

    /// `tool_calls`: true for a non-empty array.
    fn non_empty_array(&mut self) -> R<bool> {
        if self.peek()? != b'[' {
            self.skip()?;
            return Ok(false);
        }
        self.open(b'[')?;
        let mut first = true;
        let any = self.element(&mut first)?;
        if any {
            self.skip()?;
            while self.element(&mut first)? {
                self.skip()?;
            }
        }
        Ok(any)
    }

    /// Any value, checked and dropped.
    fn skip(&mut self) -> R<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' => {
                self.open(b'{')?;
                let mut first = true;
                while self.key(&mut first)?.is_some() {
                    self.skip()?;
                }
                Ok(())
            }
            b'[' => {
                self.open(b'[')?;
                let mut first = true;
                while self.element(&mut first)? {
                    self.skip()?;
                }
                Ok(())
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.integer(),
            _ => Err(Unsure),
        }
    }

    /// Steps over an opening bracket, one level deeper.
    fn open(&mut self, bracket: u8) -> R<()> {
        if self.peek()? != bracket || self.depth == MAX_DEPTH {
            return Err(Unsure);
        }
        self.i += 1;
        self.depth += 1;
        Ok(())
    }

    /// In an object: the next key (its `:` and the space after it read
    /// too), or `None` after the closing brace. A key with an escape is
    /// none of the keys looked for (they have no quote, backslash, slash
    /// or control character), so its raw bytes do.
    fn key(&mut self, first: &mut bool) -> R<Option<&'a [u8]>> {
        if !self.next_item(first, b'}')? {
            return Ok(None);
        }
        self.key_here().map(Some)
    }

    /// The key that starts here, its `:` and the space after it.
    fn key_here(&mut self) -> R<&'a [u8]> {
        if self.peek()? != b'"' {
            return Err(Unsure);
        }
        self.key_at = self.i;
        let start = self.i + 1;
        self.skip_string()?;
        let key = &self.b[start..self.i - 1];
        self.ws();
        if self.peek()? != b':' {
            return Err(Unsure);
        }
        self.i += 1;
        self.ws();
        Ok(key)
    }

    /// In an array: whether an element follows (read up to it), or the
    /// closing bracket was read.
    fn element(&mut self, first: &mut bool) -> R<bool> {
        let more = self.next_item(first, b']')?;
        if more {
            self.ws();
        }
        Ok(more)
    }

    /// Between two items of an object or array: a comma, or the closing
    /// byte (not after a comma: JSON has no trailing comma).
    fn next_item(&mut self, first: &mut bool, close: u8) -> R<bool> {
        self.ws();
        let c = self.peek()?;
        if c == close {
            self.i += 1;
            self.depth -= 1;
            return Ok(false);
        }
        if *first {
            *first = false;
            return Ok(true);
        }
        if c != b',' {
            return Err(Unsure);
        }
        self.i += 1;
        self.ws();
        if self.peek()? == close {
            return Err(Unsure);
        }
        Ok(true)
    }

    /// A string, borrowed unless it has escapes.
    fn string(&mut self) -> R<Cow<'a, str>> {
        self.i += 1;
        let start = self.i;
        self.plain_run();
        match self.peek()? {
            b'"' => {
                let s = &self.text[start..self.i];
                self.i += 1;
                Ok(Cow::Borrowed(s))
            }
            b'\\' => self.escaped(start).map(Cow::Owned),
            _ => Err(Unsure),
        }
    }

    /// Steps over the bytes a string holds as they are, to its next quote
    /// or backslash (the chunk has no control character: [`scan`] checked).
    fn plain_run(&mut self) {
        // Eight bytes at a time (strings are short: memchr's set-up cost
        // more than its search here, by callgrind's count).
        const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
        const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
        let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
        while let Some(word) = self.b.get(self.i..self.i + 8) {
            let w = u64::from_le_bytes([
                word[0], word[1], word[2], word[3], word[4], word[5], word[6], word[7],
            ]);
            let hit = has_zero(w ^ u64::from_ne_bytes([b'"'; 8]))
                | has_zero(w ^ u64::from_ne_bytes([b'\\'; 8]));
            if hit != 0 {
                // The lowest flagged byte is the first match (a borrow
                // only flags bytes above a real zero byte).
                self.i += (hit.trailing_zeros() / 8) as usize;
                return;
            }
            self.i += 8;
        }
        while let Some(&c) = self.b.get(self.i) {
            if c == b'"' || c == b'\\' {
                return;
            }
            self.i += 1;
        }
    }

    /// The rest of a string from its first escape (at `self.i`), unescaped.
    fn escaped(&mut self, start: usize) -> R<String> {
        let mut out = String::from(&self.text[start..self.i]);
        loop {
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Ok(out);
                }
                b'\\' => {
                    out.push(unescape(*self.b.get(self.i + 1).ok_or(Unsure)?)?);
                    self.i += 2;
                }
                _ => return Err(Unsure),
            }
            let run = self.i;
            self.plain_run();
            out.push_str(&self.text[run..self.i]);
        }
    }

    /// A string, checked and dropped.
    fn skip_string(&mut self) -> R<()> {
        self.i += 1;
        loop {
            self.plain_run();
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Ok(());
                }
                b'\\' => {
                    unescape(*self.b.get(self.i + 1).ok_or(Unsure)?)?;
                    self.i += 2;
                }
                _ => return Err(Unsure),
            }
        }
    }

    /// An integer (`-`, then `0` or a digit run without a leading zero).
    fn integer(&mut self) -> R<()> {
        if self.peek()? == b'-' {
            self.i += 1;
        }
        let start = self.i;
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                while matches!(self.b.get(self.i), Some(b'0'..=b'9')) {
                    self.i += 1;
                }
            }
            _ => return Err(Unsure),
        }
        // A fraction, an exponent, a digit after a leading zero, or a
        // long run: serde's to decide.
        if self.i - start > MAX_DIGITS
            || matches!(self.b.get(self.i), Some(b'.' | b'e' | b'E' | b'0'..=b'9'))
        {
            return Err(Unsure);
        }
        Ok(())
    }

    fn literal(&mut self, word: &[u8]) -> R<()> {
        if !self.b[self.i..].starts_with(word) {
            return Err(Unsure);
        }
        self.i += word.len();
        Ok(())
    }

    fn peek(&self) -> R<u8> {
        self.b.get(self.i).copied().ok_or(Unsure)
    }

    /// JSON's whitespace: spaces only, as the chunk has no control
    /// character ([`scan`] checked).
    fn ws(&mut self) {
        while self.b.get(self.i) == Some(&b' ') {
            self.i += 1;
        }
    }
}

/// The character a short escape stands for; `\u` is left to serde.
fn unescape(c: u8) -> R<char> {
    Ok(match c {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        _ => return Err(Unsure),
    })
}

#[cfg(test)]
mod tests {
    use super::super::{arb_chunk, read_serde};
    use super::*;
    use proptest::prelude::*;

    /// vLLM's token chunk (as mc-mock and vLLM 0.x write it).
    const VLLM: &[u8] = br#"{"id":"chatcmpl-9b95c6eada97bd3174deed1c87b17665","object":"chat.completion.chunk","created":1795698126,"model":"mock-model","choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null}]}"#;

    /// The rule the two readers keep: what the scan reads, serde reads the
    /// same; what it sends to the full parse, serde refuses; what serde
    /// refuses, the scan does not read.
    fn agree(data: &[u8]) {
        let serde = read_serde(data);
        match scan(data) {
            Scan::Read(c) => assert_eq!(serde, Some(c), "{}", String::from_utf8_lossy(data)),
            Scan::Full => assert_eq!(serde, None, "{}", String::from_utf8_lossy(data)),
            Scan::Unsure => {}
        }
    }

    fn content(s: &str) -> Scan<'_> {
        Scan::Read(Some(Choice {
            content: Some(Cow::Borrowed(s)),
            ..Choice::default()
        }))
    }

    #[test]
    fn reads_vllm_token_chunks() {
        assert_eq!(scan(VLLM), content(" the"));
        let last = br#"{"id":"x","choices":[{"index":0,"delta":{"content":"."},"logprobs":null,"finish_reason":"length","stop_reason":null}]}"#;
        let Scan::Read(Some(c)) = scan(last) else {
            panic!("not read")
        };
        assert_eq!(c.finish_reason.as_deref(), Some("length"));
        assert_eq!(c.content.as_deref(), Some("."));
        // The usage chunk (choices: []) and an error go to the full parse.
        assert_eq!(
            scan(br#"{"id":"x","choices":[],"usage":{"prompt_tokens":8}}"#),
            Scan::Full
        );
        assert_eq!(scan(br#"{"error":{"message":"boom"}}"#), Scan::Full);
        assert_eq!(scan(br#"{"choices":[]}"#), Scan::Read(None));
        for c in [VLLM, last] {
            agree(c);
        }
    }

    #[test]
    fn unescapes_the_short_escapes_and_leaves_u_to_serde() {
        let Scan::Read(Some(c)) = scan(br#"{"choices":[{"delta":{"content":"a\n\"b\"\\\/\t"}}]}"#)
        else {
            panic!("not read")
        };
        assert_eq!(c.content.as_deref(), Some("a\n\"b\"\\/\t"));
        assert!(matches!(c.content, Some(Cow::Owned(_))));
        for data in [
            &br#"{"choices":[{"delta":{"content":"\u00e9"}}]}"#[..],
            br#"{"choices":[{"delta":{"content":"\ud800"}}]}"#,
            br#"{"choices":[{"delta":{"cont\u0065nt":"x"}}]}"#,
        ] {
            assert_eq!(scan(data), Scan::Unsure);
            agree(data);
        }
        // A key with a short escape is no key looked for.
        let data = br#"{"choices":[{"delta":{"content\/":"x","content":"y"}}]}"#;
        assert_eq!(scan(data), content("y"));
        agree(data);
    }

    #[test]
    fn what_it_leaves_to_serde() {
        for data in [
            &br#"{"choices":[{"delta":{"content":"x"}}],"t":1.5}"#[..],
            br#"{"t":1e400,"choices":[]}"#,
            br#"{"t":12345678901234567890123,"choices":[]}"#,
            br#"{"t":01}"#,
            br#"{"t":-}"#,
            br#"{"a":1,}"#,
            br#"{"a":[1,]}"#,
            br#"{"a" 1}"#,
            br#"{"a":tru}"#,
            br#"{"a":"x"} x"#,
            br#"{"a":"tab	in"}"#,
            br#"[{"choices":[]}]"#,
            b"{\"a\":\"\xff\"}",
            br#"{"a":"unterminated}"#,
            br#"{"a":{"b":1}"#,
            b"",
            b"[DONE]",
        ] {
            assert_eq!(
                scan(data),
                Scan::Unsure,
                "{}",
                String::from_utf8_lossy(data)
            );
            agree(data);
        }
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(70), "]".repeat(70));
        assert_eq!(scan(deep.as_bytes()), Scan::Unsure);
        agree(deep.as_bytes());
    }

    #[test]
    fn repeated_keys_keep_their_last_copy_and_wrong_types_read_as_absent() {
        for data in [
            &br#"{"choices":[{"delta":{"content":"x"}}],"choices":[]}"#[..],
            br#"{"choices":[{"delta":{"content":"x"},"delta":{"content":"y"}}]}"#,
            br#"{"choices":[{"delta":5,"message":{"content":"m"}}]}"#,
            br#"{"choices":[{"message":{"content":"m"}}]}"#,
            br#"{"choices":[{"delta":{"content":7,"tool_calls":[{}]}}]}"#,
            br#"{"choices":[{"delta":{"tool_calls":[]}}]}"#,
            br#"{"choices":[{"text":"t","finish_reason":3}]}"#,
            br#"{"choices":{"delta":{"content":"x"}}}"#,
            br#"{"choices":[7,{"delta":{"content":"x"}}]}"#,
            br#" {"delta":{"content":"x"},"choices":[{"index":-0}]} "#,
            br#"{}"#,
        ] {
            assert!(
                matches!(scan(data), Scan::Read(_)),
                "{}",
                String::from_utf8_lossy(data)
            );
            agree(data);
        }
    }

    /// A stream's chunks: the memo notes vLLM's prefix (up to `"choices"`)
    /// and the next chunk is read from there, to the same result.
    #[test]
    fn the_memo_starts_the_next_chunk_at_its_choices() {
        let mut memo = Memo::default();
        assert_eq!(scan_with(VLLM, &mut memo), content(" the"));
        let at = VLLM
            .windows(10)
            .position(|w| w == br#""choices":"#)
            .unwrap();
        assert_eq!(memo.prefix, &VLLM[..at]);
        let next = String::from_utf8(VLLM.to_vec())
            .unwrap()
            .replace(" the", " of");
        assert_eq!(scan_with(next.as_bytes(), &mut memo), content(" of"));
        // A space the noted chunk did not have before the key.
        let spaced = [&VLLM[..at], b" ", &VLLM[at..]].concat();
        assert_eq!(scan_with(&spaced, &mut memo), content(" the"));
        // After the prefix, what a chunk may not have there is refused as
        // it is without the memo: a trailing comma, a missing key.
        for rest in [
            &b"}"[..],
            br#""choices":[]"#,
            br#""choices":[]}}"#,
            br#""usage":{}}"#,
        ] {
            let data = [&VLLM[..at], rest].concat();
            assert_eq!(
                scan_with(&data, &mut memo),
                scan(&data),
                "{}",
                String::from_utf8_lossy(&data)
            );
        }
        // Chunks whose choices come first, or that have none, note nothing.
        let mut memo = Memo::default();
        scan_with(br#"{"choices":[],"id":"x"}"#, &mut memo);
        scan_with(br#"{"id":"x","usage":{},"choices":[]}"#, &mut memo);
        assert!(memo.prefix.is_empty());
    }

    /// A stream's next token: the memo's template (the bytes around the
    /// last chunk's one string) reads it, and what does not fit the
    /// template is read as it is without the memo.
    #[test]
    fn the_template_reads_the_next_token_and_nothing_else() {
        let at = VLLM.windows(4).position(|w| w == b" the").unwrap();
        let (head, tail) = (&VLLM[..at], &VLLM[at + 4..]);
        let mut memo = Memo::default();
        assert_eq!(scan_with(VLLM, &mut memo), content(" the"));
        assert_eq!(
            (&memo.template.head[..], &memo.template.tail[..]),
            (head, tail)
        );
        let next = [head, "é of".as_bytes(), tail].concat();
        assert_eq!(memo.template.value(&next), Some("é of"));
        assert_eq!(scan_with(&next, &mut memo), content("é of"));
        // An empty token fits too.
        assert_eq!(scan_with(&[head, tail].concat(), &mut memo), content(""));
        // Values that are not one plain string in place: a quote (a second
        // key follows), an escape, a control character, bytes that are not
        // UTF-8, a value cut short.
        for value in [
            &br#"x","content":"y"#[..],
            br#"a\"b"#,
            br#"a\u0041"#,
            b"tab\there",
            b"\xff",
        ] {
            let data = [head, value, tail].concat();
            assert_eq!(memo.template.value(&data), None);
            let mut fresh = Memo::default();
            scan_with(VLLM, &mut fresh);
            assert_eq!(
                scan_with(&data, &mut fresh),
                scan(&data),
                "{}",
                String::from_utf8_lossy(&data)
            );
            agree(&data);
        }
        assert_eq!(memo.template.value(&VLLM[..VLLM.len() - 1]), None);
        // The last chunk (a finish reason) is not the template's: read in
        // full, and it makes none.
        let tail_end = String::from_utf8(tail.to_vec())
            .unwrap()
            .replace("null}]}", "\"length\"}]}");
        let last = [head, b".", tail_end.as_bytes()].concat();
        let Scan::Read(Some(c)) = scan_with(&last, &mut memo) else {
            panic!("not read")
        };
        assert_eq!(
            (c.content.as_deref(), c.finish_reason.as_deref()),
            (Some("."), Some("length"))
        );
        assert!(memo.template.field.is_none());
        // Completions' text makes one as chat's content does.
        let text = br#"{"id":"c","choices":[{"index":0,"text":" a","finish_reason":null}]}"#;
        let mut memo = Memo::default();
        scan_with(text, &mut memo);
        let next = String::from_utf8(text.to_vec())
            .unwrap()
            .replace(" a", " b");
        assert_eq!(memo.template.value(next.as_bytes()), Some(" b"));
        let Scan::Read(Some(c)) = scan_with(next.as_bytes(), &mut memo) else {
            panic!("not read")
        };
        assert_eq!((c.text.as_deref(), c.content), (Some(" b"), None));
        // Two strings, or an escaped one: no template.
        for data in [
            &br#"{"choices":[{"delta":{"content":"a","reasoning":"b"}}]}"#[..],
            br#"{"choices":[{"delta":{"content":"a\nb"}}]}"#,
        ] {
            let mut memo = Memo::default();
            scan_with(data, &mut memo);
            assert!(
                memo.template.field.is_none(),
                "{}",
                String::from_utf8_lossy(data)
            );
        }
    }

    /// Bytes a mutation puts in: JSON's punctuation, digits, letters of
    /// the literals, escapes, a control character and a non-ASCII byte.
    const ALPHABET: &[u8] = b"{}[]:,\"\\ 0129-.eE+tfnulrsu/\n\t\x01\xc3\xa9";

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn agrees_with_serde_on_changed_bytes(
            edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<prop::sample::Index>()), 1..4)
        ) {
            let mut data = VLLM.to_vec();
            for (at, op, with) in edits {
                let i = at.index(data.len() + 1);
                let b = ALPHABET[with.index(ALPHABET.len())];
                match op {
                    0 => data.insert(i, b),
                    1 if i < data.len() => { data.remove(i); }
                    _ if i < data.len() => data[i] = b,
                    _ => data.push(b),
                }
            }
            agree(&data);
            // Read after vLLM's own chunk (its prefix noted), the same.
            let mut memo = Memo::default();
            scan_with(VLLM, &mut memo);
            prop_assert_eq!(
                scan_with(&data, &mut memo),
                scan(&data),
                "{}",
                String::from_utf8_lossy(&data)
            );
        }

        /// Whatever chunk made the template, a chunk made of its bytes
        /// around any value reads as it does without the memo.
        #[test]
        fn the_template_agrees_on_any_value(
            v in arb_chunk(),
            value in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let data = serde_json::to_vec(&v).unwrap();
            let mut memo = Memo::default();
            scan_with(&data, &mut memo);
            let value: Vec<u8> = value.iter().map(|i| ALPHABET[i.index(ALPHABET.len())]).collect();
            let next = if memo.template.field.is_some() {
                [&memo.template.head[..], &value, &memo.template.tail[..]].concat()
            } else {
                data.clone()
            };
            prop_assert_eq!(
                scan_with(&next, &mut memo),
                scan(&next),
                "{}",
                String::from_utf8_lossy(&next)
            );
            agree(&next);
        }

        #[test]
        fn agrees_with_serde_on_generated_chunks(v in arb_chunk()) {
            let data = serde_json::to_vec(&v).unwrap();
            agree(&data);
            // An object without floats (the strings have no character
            // serde_json writes as `\u`): the scan decides.
            if v.is_object() && !has_float(&v) {
                prop_assert!(
                    matches!(scan(&data), Scan::Read(_) | Scan::Full),
                    "{}",
                    String::from_utf8_lossy(&data)
                );
            }
        }
    }

    fn has_float(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::Number(n) => n.is_f64(),
            serde_json::Value::Array(a) => a.iter().any(has_float),
            serde_json::Value::Object(o) => o.values().any(has_float),
            _ => false,
        }
    }
}
