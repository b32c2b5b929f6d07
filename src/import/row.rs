//! What importers add to the one row writer: rows are written by
//! `record::RowWriter` (the style and field order of the Mooncake release
//! files, shared with mc-gen and nat2mc); `SynthIds` makes up block ids for
//! formats without them.

/// The row writer under the name the import sink hands to each format.
pub use crate::record::RowWriter as ObjWriter;

use crate::record::put_decimal;

/// The plain request row of the CSV formats (Azure, BurstGPT without a
/// session), written by hand: `{"timestamp": T,
/// "input_length": I, "output_length": O}` and the newline, in
/// [`ObjWriter`]'s style (its test checks they agree byte for byte). Through
/// `ObjWriter` each key, separator and number was a `Vec` append of its own,
/// a quarter of an Azure import's instructions (cachegrind,
/// docs/decisions/0043-importers-at-pipe-speed.md); here the keys are
/// stores of constant size into a row on the stack, the digits put in
/// place, and the row appended once. Made-up ids go through
/// `record::write_id_array`.
pub fn write_plain_request(
    out: &mut Vec<u8>,
    ts: PlainTime<'_>,
    input: u64,
    output: u64,
    ids: Option<&[u64]>,
) {
    // The keys, `}` and the newline are 53 bytes (`hash_ids`' key 14
    // more), the numbers at most 20 digits each (a float's text 24), and
    // the eight bytes `put_decimal` may store past the last.
    let mut buf = [0u8; 53 + 14 + 24 + 20 + 20 + 8];
    let mut p = put(&mut buf, 0, b"{\"timestamp\": ");
    p = match ts {
        PlainTime::Ms(ms) => put_decimal(ms, &mut buf, p),
        PlainTime::Text(t) => {
            // ryu's longest text is 24 bytes.
            let t = &t[..t.len().min(24)];
            buf[p..p + t.len()].copy_from_slice(t);
            p + t.len()
        }
    };
    p = put(&mut buf, p, b", \"input_length\": ");
    p = put_decimal(input, &mut buf, p);
    p = put(&mut buf, p, b", \"output_length\": ");
    p = put_decimal(output, &mut buf, p);
    match ids {
        None => {
            p = put(&mut buf, p, b"}\n");
            out.extend_from_slice(&buf[..p]);
        }
        Some(ids) => {
            p = put(&mut buf, p, b", \"hash_ids\": ");
            out.extend_from_slice(&buf[..p]);
            crate::record::write_id_array(ids, out);
            out.extend_from_slice(b"}\n");
        }
    }
}

/// A plain row's timestamp: whole ms, or a float's JSON text.
#[derive(Clone, Copy)]
pub enum PlainTime<'a> {
    Ms(u64),
    Text(&'a [u8]),
}

/// Stores the constant `s` at `buf[p..]`; returns the index after it.
#[inline(always)]
fn put<const N: usize>(buf: &mut [u8], p: usize, s: &[u8; N]) -> usize {
    buf[p..p + N].copy_from_slice(s);
    p + N
}

/// Made-up block ids for formats without prefix information: every row gets
/// fresh ids (`ceil(input_length / B)` of them), so nothing is shared — the
/// only pattern that claims nothing the source does not say.
#[derive(Clone)]
pub struct SynthIds {
    block_size: u64,
    next: u64,
    ids: Vec<u64>,
}

impl SynthIds {
    pub fn new(block_size: u64) -> Self {
        SynthIds {
            block_size: block_size.max(1),
            next: 0,
            ids: Vec::new(),
        }
    }

    pub fn next_row(&mut self, input_length: u64) -> &[u64] {
        let n = input_length.div_ceil(self.block_size);
        self.ids.clear();
        self.ids.extend(self.next..self.next + n);
        self.next += n;
        &self.ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written row is `ObjWriter`'s, byte for byte.
    #[test]
    fn plain_rows_are_the_row_writers() {
        let edges = [
            0,
            1,
            9,
            10,
            99,
            100,
            12_345,
            9_999_999,
            10_000_000,
            u64::MAX,
        ];
        for &ts in &edges {
            for &input in &edges {
                for ids in [None, Some(&[][..]), Some(&[0, 7, 123_456_789][..])] {
                    let mut want = b"x".to_vec();
                    let mut w = ObjWriter::new(&mut want);
                    w.timestamp_text(ts.to_string().as_bytes());
                    w.input_length(input);
                    w.output_length(ts ^ input);
                    if let Some(ids) = ids {
                        w.hash_ids(ids);
                    }
                    w.finish();
                    let mut got = b"x".to_vec();
                    write_plain_request(&mut got, PlainTime::Ms(ts), input, ts ^ input, ids);
                    assert_eq!(
                        String::from_utf8(got).unwrap(),
                        String::from_utf8(want).unwrap()
                    );
                    let text = ts.to_string();
                    let mut again = b"x".to_vec();
                    write_plain_request(
                        &mut again,
                        PlainTime::Text(text.as_bytes()),
                        input,
                        ts ^ input,
                        ids,
                    );
                    let mut want = b"x".to_vec();
                    let mut w = ObjWriter::new(&mut want);
                    w.timestamp_text(text.as_bytes());
                    w.input_length(input);
                    w.output_length(ts ^ input);
                    if let Some(ids) = ids {
                        w.hash_ids(ids);
                    }
                    w.finish();
                    assert_eq!(again, want);
                }
            }
        }
        let mut got = Vec::new();
        write_plain_request(&mut got, PlainTime::Text(b"3435948.056"), 1, 2, None);
        assert_eq!(
            got,
            b"{\"timestamp\": 3435948.056, \"input_length\": 1, \"output_length\": 2}\n"
        );
    }

    #[test]
    fn synthesised_ids_are_fresh_per_row() {
        let mut s = SynthIds::new(512);
        assert_eq!(s.next_row(1024), [0, 1]);
        assert_eq!(s.next_row(1025), [2, 3, 4]);
        assert_eq!(s.next_row(0), [] as [u64; 0]);
        assert_eq!(s.next_row(1), [5]);
    }
}
