//! Writing records: a record with some values replaced (the rest of the line
//! copied byte for byte), and the value formats the tools write.

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
}

/// Appends an id list as JSON in the house style of Mooncake traces (`[1, 2]`).
pub fn write_id_array(ids: &[u64], out: &mut Vec<u8>) {
    write_ids(ids, b", ", out);
}

/// Writes ids in the spacing of the array they replace: `[1,2]` when the
/// original was written compactly, else `[1, 2]` (the Mooncake traces' style).
pub fn write_id_array_like(ids: &[u64], original: Option<&[u8]>, out: &mut Vec<u8>) {
    let compact =
        original.is_some_and(|raw| raw.contains(&b',') && !raw.windows(2).any(|w| w == b", "));
    if compact {
        write_ids(ids, b",", out);
    } else {
        write_ids(ids, b", ", out);
    }
}

/// The separator's length is a constant of each call, so appending it
/// compiles to a store rather than a `memcpy` call per id: with a slice
/// separator, mc-roots spent 18% of its instructions in those calls
/// (cachegrind, 64 MB trace).
#[inline(always)]
fn write_ids<const N: usize>(ids: &[u64], separator: &[u8; N], out: &mut Vec<u8>) {
    out.push(b'[');
    let mut buf = itoa::Buffer::new();
    for (k, id) in ids.iter().enumerate() {
        if k > 0 {
            out.extend_from_slice(separator);
        }
        out.extend_from_slice(buf.format(*id).as_bytes());
    }
    out.push(b']');
}

/// Formats a number for output: integers as integers, floats in the shortest
/// form that reads back to the same value.
pub fn write_number(n: Number, out: &mut Vec<u8>) {
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

    fn rec(s: &str) -> Record<'_> {
        Record::parse(s.as_bytes()).unwrap()
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
