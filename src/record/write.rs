//! Writing records: a record with some values replaced (the rest of the line
//! copied byte for byte), the one writer of new rows ([`RowWriter`]), and the
//! value formats the tools write.

use super::{Number, Record};

/// A new value for one field, as JSON text.
#[derive(Debug)]
pub struct Edit<'v> {
    pub field: super::Field,
    pub value: &'v [u8],
}

impl Record<'_> {
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

    /// Field `f`'s value and where it lies, when the value is an integer
    /// of 1 to 8 digits and the line has eight bytes from its start: the
    /// one-load read [`Record::number`] and [`Record::uint`] start with
    /// (the same value they give), for a filter's own path of a row.
    /// `None` for anything else (absent, longer, not digits alone, near
    /// the line's end), which the caller reads the usual way.
    ///
    /// Always inlined, as is [`Record::write_with_uint`]: as calls into
    /// this module their cost moved with how the release build's
    /// codegen units placed unrelated code (mc-scale `--speedup 2`, 4.95
    /// to 5.04 instructions a byte with no change of its own;
    /// docs/decisions/0039-filters-under-five-instructions-a-byte.md).
    #[inline(always)]
    pub fn short_uint(&self, f: super::Field) -> Option<(super::Span, u64)> {
        let v = self.short_digits(f)?;
        Some((self.span(f)?, v))
    }

    /// Writes the record to `out` with the value at `span` (a field's
    /// value, from [`Record::span`] or [`Record::short_uint`]) replaced by
    /// the integer `v`: the bytes [`Record::write_edited`] writes for that
    /// one edit with the value as [`write_number`] writes it, in one
    /// reservation, the bytes before a value that starts in the line's
    /// first 16 copied as 16 (a few moves; `span.start` bytes are a
    /// `memcpy` call).
    #[inline(always)]
    pub fn write_with_uint(&self, span: super::Span, v: u64, out: &mut Vec<u8>) {
        let line = self.line;
        // The line, at most 20 digits for the value, and the 8-byte store
        // `put_uint` may make past them: nothing below grows the `Vec`.
        out.reserve(line.len() + 28);
        match line.first_chunk::<16>() {
            Some(head) if span.start <= 16 => {
                out.extend_from_slice(head);
                out.truncate(out.len() - (16 - span.start));
            }
            _ => out.extend_from_slice(&line[..span.start]),
        }
        put_uint(v, out);
        out.extend_from_slice(&line[span.end..]);
    }
}

/// Appends `v` in decimal, as [`write_number`] writes it.
#[inline(always)]
fn put_uint(v: u64, out: &mut Vec<u8>) {
    // Room for 20 digits and `put_decimal`'s 8-byte store, cut to the
    // digits it wrote.
    let at = out.len();
    out.extend_from_slice(&[0; 24]);
    let end = super::ids::put_decimal(v, out, at);
    out.truncate(end);
}

/// The one writer of rows a tool creates (mc-gen, mc-import, nat2mc), in the
/// style of the Mooncake release files: `{"timestamp": 0, "input_length": 12,
/// "output_length": 3, "hash_ids": [0, 1]}` (`", "` between fields, `": "`
/// after keys). Filters that edit rows keep each row's own style instead
/// ([`Record::write_edited`]).
///
/// Fields come in one order, the release files' with the optional fields in
/// their places: `timestamp`, `session_id`, `delay`, `text_input`,
/// `input_length`, `output_length`, `hash_ids`, then any extra fields in
/// the order written. Each method writes its field at once (no row is held),
/// so a caller must call them in that order; a debug build checks it.
pub struct RowWriter<'a> {
    out: &'a mut Vec<u8>,
    /// The place of the last field written (`Slot`), or `None` before the
    /// first: decides the separator and checks the order.
    last: Option<Slot>,
}

/// A field's place in a written row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    Timestamp,
    SessionId,
    Delay,
    TextInput,
    InputLength,
    OutputLength,
    HashIds,
    Extra,
}

impl<'a> RowWriter<'a> {
    /// Starts a row (`{`) at the end of `out`.
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        RowWriter { out, last: None }
    }

    /// Writes `"name": ` after the separator, checking the field order.
    fn key(&mut self, slot: Slot, name: &str) -> &mut Vec<u8> {
        debug_assert!(
            self.last
                .is_none_or(|l| l < slot || (l == Slot::Extra && slot == Slot::Extra)),
            "row field `{name}` written after {:?}",
            self.last
        );
        if self.last.is_some() {
            self.out.extend_from_slice(b", ");
        }
        self.last = Some(slot);
        self.out.push(b'"');
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"\": ");
        self.out
    }

    /// `timestamp`, ms.
    pub fn timestamp(&mut self, ms: Number) {
        write_number(ms, self.key(Slot::Timestamp, "timestamp"));
    }

    /// `timestamp` already written as a JSON number: an importer's exact
    /// decimal (ns converted to ms as text, never through a float).
    pub fn timestamp_text(&mut self, json: &[u8]) {
        self.key(Slot::Timestamp, "timestamp")
            .extend_from_slice(json);
    }

    pub fn session_id(&mut self, id: &str) {
        write_str(id, self.key(Slot::SessionId, "session_id"));
    }

    /// `delay`, ms after the session's previous turn completes.
    pub fn delay(&mut self, ms: Number) {
        write_number(ms, self.key(Slot::Delay, "delay"));
    }

    pub fn text_input(&mut self, text: &str) {
        write_str(text, self.key(Slot::TextInput, "text_input"));
    }

    pub fn input_length(&mut self, tokens: u64) {
        write_number(
            Number::UInt(tokens),
            self.key(Slot::InputLength, "input_length"),
        );
    }

    pub fn output_length(&mut self, tokens: u64) {
        write_number(
            Number::UInt(tokens),
            self.key(Slot::OutputLength, "output_length"),
        );
    }

    pub fn hash_ids(&mut self, ids: &[u64]) {
        write_id_array(ids, self.key(Slot::HashIds, "hash_ids"));
    }

    /// A field the release files do not have, as a JSON string.
    pub fn extra_str(&mut self, name: &str, s: &str) {
        write_str(s, self.key(Slot::Extra, name));
    }

    /// A field the release files do not have, a list of strings in the
    /// house style of lists (`["a", "b"]`, as `hash_ids`): the agent
    /// graph's `wait_for` and `branches`.
    pub fn extra_str_list<S: AsRef<str>>(&mut self, name: &str, items: &[S]) {
        let out = self.key(Slot::Extra, name);
        out.push(b'[');
        for (k, s) in items.iter().enumerate() {
            if k > 0 {
                out.extend_from_slice(b", ");
            }
            write_str(s.as_ref(), out);
        }
        out.push(b']');
    }

    /// A field the release files do not have, already JSON text.
    pub fn extra_raw(&mut self, name: &str, json: &[u8]) {
        self.key(Slot::Extra, name).extend_from_slice(json);
    }

    /// Ends the row: `}` and the newline.
    pub fn finish(self) {
        self.out.extend_from_slice(b"}\n");
    }
}

/// Appends `s` as a JSON string. serde_json escapes exactly what JSON
/// requires; writing into a Vec cannot fail, so the result is ignored.
pub fn write_str(s: &str, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Appends an id list as JSON in the house style of Mooncake traces (`[1, 2]`).
pub fn write_id_array(ids: &[u64], out: &mut Vec<u8>) {
    write_ids(ids, b", ", out);
}

/// Writes ids in the spacing of the array they replace: `[1,2]` when the
/// original was written compactly, else `[1, 2]` (the Mooncake traces' style).
pub fn write_id_array_like(ids: &[u64], original: Option<&[u8]>, out: &mut Vec<u8>) {
    if original.is_some_and(compact_spacing) {
        write_ids(ids, b",", out);
    } else {
        write_ids(ids, b", ", out);
    }
}

/// Whether an id array is written compactly (`[1,2]`): a comma and no
/// `, ` ([`write_id_array_like`]'s rule, also [`Record::map_hash_ids`]').
pub(super) fn compact_spacing(raw: &[u8]) -> bool {
    raw.contains(&b',') && !raw.windows(2).any(|w| w == b", ")
}

/// The separator's length is a constant of each call, so appending it
/// compiles to a store rather than a `memcpy` call per id: with a slice
/// separator, mc-roots spent 18% of its instructions in those calls
/// (cachegrind, 64 MB trace). The room for the longest text is made once
/// and the ids are stored into it at a running index ([`put_decimal`]),
/// cut to what was written at the end: growing the `Vec` id by id checked
/// its capacity and length for every id and every separator (64
/// instructions an id in all, 25 this way; cachegrind, mc-roots,
/// docs/decisions/0036-one-pass-plain-lines.md).
#[inline(always)]
fn write_ids<const N: usize>(ids: &[u64], separator: &[u8; N], out: &mut Vec<u8>) {
    // An id is at most 20 digits; `put_decimal` stores 8 bytes at a time.
    let room = 2 + ids.len() * (20 + N) + 8;
    let at = out.len();
    out.resize(at + room, 0);
    let buf = &mut out[at..];
    buf[0] = b'[';
    let mut p = 1;
    if let Some((first, rest)) = ids.split_first() {
        p = super::ids::put_decimal(*first, buf, p);
        for id in rest {
            buf[p..p + N].copy_from_slice(separator);
            p = super::ids::put_decimal(*id, buf, p + N);
        }
    }
    buf[p] = b']';
    out.truncate(at + p + 1);
}

/// Formats a number for output: integers as integers, floats in the shortest
/// form that reads back to the same value.
pub fn write_number(n: Number, out: &mut Vec<u8>) {
    // Below 10^8 (timestamps, lengths), eight digits made at once and
    // stored as eight bytes (`put_decimal`, the id writer's): `itoa` and
    // the copy of its text were ~90 instructions a timestamp (cachegrind,
    // docs/decisions/0039-filters-under-five-instructions-a-byte.md).
    let small = match n {
        Number::Int(i) => u64::try_from(i).ok(),
        Number::UInt(u) => Some(u),
        Number::Float(_) => None,
    };
    if let Some(v) = small.filter(|&v| v < 100_000_000) {
        let at = out.len();
        out.extend_from_slice(&[0; 8]);
        let end = super::ids::put_decimal(v, out, at);
        out.truncate(end);
        return;
    }
    let mut buf = itoa::Buffer::new();
    match n {
        Number::Int(i) => out.extend_from_slice(buf.format(i).as_bytes()),
        Number::UInt(u) => out.extend_from_slice(buf.format(u).as_bytes()),
        Number::Float(f) => out.extend_from_slice(ryu::Buffer::new().format_finite(f).as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Field;

    #[test]
    fn numbers_are_written_as_itoa_writes_them() {
        for v in [
            0i64,
            1,
            9,
            10,
            4217,
            99_999_999,
            100_000_000,
            i64::MAX,
            -1,
            i64::MIN,
        ] {
            let mut out = b"x".to_vec();
            write_number(Number::Int(v), &mut out);
            assert_eq!(out, format!("x{v}").as_bytes());
        }
        for v in [0u64, 12, 99_999_999, 100_000_000, u64::MAX] {
            let mut out = Vec::new();
            write_number(Number::UInt(v), &mut out);
            assert_eq!(out, v.to_string().as_bytes());
        }
    }

    fn rec(s: &str) -> Record<'_> {
        Record::parse(s.as_bytes()).unwrap()
    }

    /// `short_uint` gives what `uint` gives for 1 to 8 digits and nothing
    /// else; `write_with_uint` writes what `write_edited` writes with the
    /// value as `write_number` writes it, the value starting before, at
    /// and after the 16th byte, in lines shorter and longer than 16 bytes,
    /// after what `out` holds already.
    #[test]
    fn one_integer_written_in_place_is_the_one_value_edit() {
        let values = [
            0u64,
            7,
            10,
            4217,
            12_345_678,
            99_999_999,
            100_000_000,
            1_234_567_890_123,
            u64::MAX,
        ];
        for digits in ["0", "5", "42", "1234567", "87654321"] {
            // The value starting at bytes 13 to 18 of the line.
            let spaced = (0..6).map(|k| format!("{{\"timestamp\":{:k$}{digits}, \"x\": 1}}", ""));
            for line in spaced.chain([
                format!("{{\"timestamp\":{digits}}}"),
                format!("{{\"timestamp\": {digits}, \"input_length\": 3, \"hash_ids\": [1]}}"),
                format!("{{\"input_length\": 3, \"timestamp\": {digits}}}"),
                format!("{{\"input_length\":3,\"output_length\":2,\"timestamp\":{digits} }}"),
            ]) {
                let r = rec(&line);
                let span = r.span(Field::Timestamp).unwrap();
                match r.short_uint(Field::Timestamp) {
                    Some(short) => {
                        assert_eq!(short.0, span, "{line}");
                        assert_eq!(Some(short.1), r.uint(Field::Timestamp).unwrap(), "{line}");
                    }
                    // The one load needs eight bytes from the value's start.
                    None => assert!(line.len() - span.start < 8, "{line}"),
                }
                for new in values {
                    let mut text = Vec::new();
                    write_number(Number::UInt(new), &mut text);
                    let mut want = b"[held]".to_vec();
                    r.write_edited(
                        &mut [Edit {
                            field: Field::Timestamp,
                            value: &text,
                        }],
                        &mut want,
                    );
                    let mut got = b"[held]".to_vec();
                    r.write_with_uint(span, new, &mut got);
                    assert_eq!(
                        String::from_utf8_lossy(&got),
                        String::from_utf8_lossy(&want),
                        "{line} with {new}"
                    );
                }
            }
        }
        for other in ["123456789", "1.5", "1e3", "-3", "null", "\"7\"", "[1]"] {
            let line = format!("{{\"timestamp\": {other}, \"input_length\": 3}}");
            assert_eq!(rec(&line).short_uint(Field::Timestamp), None, "{line}");
        }
        assert_eq!(
            rec("{\"input_length\": 3}").short_uint(Field::Timestamp),
            None
        );
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
    fn new_rows_have_the_release_files_style_and_order() {
        let mut out = Vec::new();
        let mut w = RowWriter::new(&mut out);
        w.timestamp_text(b"1040.0401");
        w.session_id("a\"b");
        w.input_length(12);
        w.output_length(3);
        w.hash_ids(&[0, 1]);
        w.extra_str("parent_session_id", "p");
        w.extra_raw("messages", b"[]");
        w.finish();
        let mut w = RowWriter::new(&mut out);
        w.session_id("s");
        w.delay(Number::UInt(250));
        w.text_input("hi");
        w.output_length(2);
        w.finish();
        RowWriter::new(&mut out).finish();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"timestamp\": 1040.0401, \"session_id\": \"a\\\"b\", \"input_length\": 12, \
             \"output_length\": 3, \"hash_ids\": [0, 1], \"parent_session_id\": \"p\", \"messages\": []}\n\
             {\"session_id\": \"s\", \"delay\": 250, \"text_input\": \"hi\", \"output_length\": 2}\n\
             {}\n"
        );
    }

    #[test]
    fn string_lists_have_the_house_style_of_lists() {
        let mut out = Vec::new();
        let mut w = RowWriter::new(&mut out);
        w.input_length(1);
        w.extra_str_list("wait_for", &["a", "b\"c"]);
        w.extra_str_list("branches", &[String::from("x")]);
        w.extra_str_list::<&str>("none", &[]);
        w.finish();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"input_length\": 1, \"wait_for\": [\"a\", \"b\\\"c\"], \"branches\": [\"x\"], \
             \"none\": []}\n"
        );
    }

    #[test]
    #[should_panic(expected = "row field `session_id` written after")]
    #[cfg(debug_assertions)]
    fn fields_out_of_order_are_a_bug() {
        let mut out = Vec::new();
        let mut w = RowWriter::new(&mut out);
        w.input_length(1);
        w.session_id("late");
    }

    proptest::proptest! {
        /// The array writer writes what joining each id's `to_string`
        /// writes, after whatever the buffer held: ids of every length
        /// (the eight-byte stores and the long-id path), both spacings.
        #[test]
        fn id_arrays_are_written_as_their_decimal_texts_joined(
            ids in proptest::collection::vec(proptest::prop_oneof![
                0u64..10, 0u64..100_000_000, 99_999_990u64..100_000_010, proptest::num::u64::ANY], 0..50),
            before in proptest::collection::vec(proptest::num::u8::ANY, 0..9),
        ) {
            let text: Vec<String> = ids.iter().map(u64::to_string).collect();
            for (original, separator) in [(&b"[1, 2]"[..], ", "), (b"[1,2]", ",")] {
                let mut out = before.clone();
                write_id_array_like(&ids, Some(original), &mut out);
                let mut expected = before.clone();
                expected.extend_from_slice(format!("[{}]", text.join(separator)).as_bytes());
                proptest::prop_assert_eq!(&out, &expected);
            }
        }
    }

    #[test]
    fn number_formatting() {
        let mut out = Vec::new();
        write_number(Number::Int(-3), &mut out);
        out.push(b' ');
        write_number(Number::Float(0.1 + 0.2), &mut out);
        out.push(b' ');
        write_number(Number::Float(2.0), &mut out);
        out.push(b' ');
        write_number(Number::UInt(u64::MAX), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "-3 0.30000000000000004 2.0 18446744073709551615"
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
