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
    // `hash_ids`' key is 14 bytes more than a plain row's.
    let mut buf = [0u8; PLAIN_ROW_ROOM + 14];
    let p = put_plain_fields(&mut buf, 0, ts, input, output);
    match ids {
        None => {
            let p = put(&mut buf, p, b"}\n");
            out.extend_from_slice(&buf[..p]);
        }
        Some(ids) => {
            let p = put(&mut buf, p, b", \"hash_ids\": ");
            out.extend_from_slice(&buf[..p]);
            crate::record::write_id_array(ids, out);
            out.extend_from_slice(b"}\n");
        }
    }
}

/// The most a plain row takes in a buffer: the keys, `}` and the newline
/// are 53 bytes, the numbers at most 20 digits each (a float's text 24),
/// and `put_decimal` may store eight bytes past the last digit.
pub const PLAIN_ROW_ROOM: usize = 53 + 24 + 20 + 20 + 8;

/// A plain row's fields from `buf[p]`, up to the output length's last
/// digit (the caller closes the row); returns the index after it.
#[inline(always)]
fn put_plain_fields(buf: &mut [u8], p: usize, ts: PlainTime<'_>, input: u64, output: u64) -> usize {
    let mut p = put(buf, p, b"{\"timestamp\": ");
    p = put_time(ts, buf, p);
    p = put(buf, p, b", \"input_length\": ");
    p = put_decimal(input, buf, p);
    p = put(buf, p, b", \"output_length\": ");
    put_decimal(output, buf, p)
}

/// A token count as a plain row has it: its digits as the input wrote them
/// when they are the text `put_decimal` would write (one to seven digits,
/// no leading zero), copied into the row as one word, else its value. Both
/// the value and its text were a third of an Azure import's instructions
/// once the row was read in one walk (`put_decimal`, cachegrind), and the
/// plain rows need neither.
#[derive(Clone, Copy)]
pub struct Count {
    /// The eight bytes from the first digit, the first in the lowest byte;
    /// with `len` 0, the value.
    text: u64,
    /// How many bytes of `text` are the number's digits; 0 for a value.
    len: usize,
}

// Seven digits are always within the limit, so `Count::at` need not read
// their value to check it.
const _: () = assert!(crate::limits::MAX_ROW_TOKENS >= 9_999_999);

impl Count {
    /// The token count whose digits start at `data[at]`, within
    /// `limits::MAX_ROW_TOKENS`, and the index after its digits (the
    /// caller checks the byte there). `None` when no digit is there, for
    /// sixteen digits or more, or near the end of `data`
    /// (`crate::csv::plain_uint_at`): the general way takes those.
    #[inline(always)]
    pub fn at(data: &[u8], at: usize) -> Option<(Count, usize)> {
        let text = crate::csv::word_at(data, at)?;
        let len = crate::csv::leading_digits(text);
        if len == 0 {
            return None;
        }
        if let Some(count) = Count::digits(text, len) {
            return Some((count, at + len));
        }
        let (value, end) = crate::csv::plain_uint_at(data, at)?;
        if value > crate::limits::MAX_ROW_TOKENS {
            return None;
        }
        Some((
            Count {
                text: value,
                len: 0,
            },
            end,
        ))
    }

    /// The digits `text` (eight bytes from the first), `len` of them, when
    /// they can be copied as they stand (one to seven, no leading zero).
    #[inline(always)]
    pub fn digits(text: u64, len: usize) -> Option<Count> {
        ((1..8).contains(&len) && (len == 1 || text as u8 != b'0')).then_some(Count { text, len })
    }

    /// Whether the count is 0 (a failed BurstGPT request).
    #[inline(always)]
    pub fn is_zero(self) -> bool {
        // Copied digits with a leading `0` are the one digit `0`.
        if self.len == 0 {
            self.text == 0
        } else {
            self.text as u8 == b'0'
        }
    }

    /// Stores the count's digits at `buf[p..]`, perhaps with bytes after
    /// them (up to `p + 8`) that the caller overwrites; returns the index
    /// after its last digit.
    #[inline(always)]
    fn put(self, buf: &mut [u8], p: usize) -> usize {
        if self.len == 0 {
            return put_decimal(self.text, buf, p);
        }
        buf[p..p + 8].copy_from_slice(&self.text.to_le_bytes());
        p + self.len
    }
}

/// A plain row's timestamp at `buf[p..]`; returns the index after it.
#[inline(always)]
fn put_time(ts: PlainTime<'_>, buf: &mut [u8], p: usize) -> usize {
    match ts {
        PlainTime::Ms(ms) => put_decimal(ms, buf, p),
        // 0 s is 0 ms; any other count of seconds has no leading zero.
        PlainTime::Seconds(s) if s.is_zero() => put(buf, p, b"0"),
        PlainTime::Seconds(s) => {
            let p = s.put(buf, p);
            put(buf, p, b"000")
        }
        PlainTime::Text(t) => {
            // ryu's longest text is 24 bytes.
            let t = &t[..t.len().min(24)];
            buf[p..p + t.len()].copy_from_slice(t);
            p + t.len()
        }
    }
}

/// Plain request rows (as [`write_plain_request`] writes them without
/// ids) gathered in a block of their own and moved to the output a block
/// at a time: the chunked fast paths write a row with no `Vec` growth
/// check and no copy call of its own (the per-row append was 58
/// instructions a row, cachegrind). The block stays below 4 KiB, where
/// glibc's `memcpy` still copies with vector moves. [`PlainRows::flush`]
/// before anything else is written to the same output.
pub struct PlainRows {
    block: Box<[u8; PLAIN_BLOCK]>,
    len: usize,
    ms: MsText,
}

const PLAIN_BLOCK: usize = 3 << 10;

impl Default for PlainRows {
    fn default() -> Self {
        PlainRows {
            block: Box::new([0; PLAIN_BLOCK]),
            len: 0,
            ms: MsText::default(),
        }
    }
}

/// Whole ms written as the digits of their second, kept from the row
/// before, and three digits: rows come in time order, tens a second in the
/// Azure traces, so the second's digits are made once a second, not once
/// a row (`put_decimal` was 65 instructions an Azure row).
struct MsText {
    /// The second `head` holds the digits of (`u64::MAX`: none yet).
    secs: u64,
    /// Its digits, and the eight bytes `put_decimal` may store after them.
    head: [u8; 32],
    head_len: usize,
}

impl Default for MsText {
    fn default() -> Self {
        MsText {
            secs: u64::MAX,
            head: [0; 32],
            head_len: 0,
        }
    }
}

impl MsText {
    /// Stores `ms` at `buf[p..]` as `put_decimal` writes it (with bytes
    /// after it, up to `p + 24`, that the caller overwrites); returns the
    /// index after its last digit.
    #[inline(always)]
    fn put(&mut self, ms: u64, buf: &mut [u8], p: usize) -> usize {
        let secs = ms / 1000;
        if secs == 0 {
            return put_decimal(ms, buf, p);
        }
        if secs != self.secs {
            self.head_len = put_decimal(secs, &mut self.head, 0);
            self.secs = secs;
        }
        // A second has at most 17 digits: the head and the three digits
        // fit in the 24 bytes copied.
        buf[p..p + 24].copy_from_slice(&self.head[..24]);
        let p = p + self.head_len;
        let r = (ms - secs * 1000) as u32;
        let (h, t) = (r / 100, r / 10 % 10);
        let digits = [b'0' + h as u8, b'0' + t as u8, b'0' + (r % 10) as u8];
        put(buf, p, &digits)
    }
}

impl PlainRows {
    /// Adds one row (and its newline).
    #[inline(always)]
    pub fn push(&mut self, out: &mut Vec<u8>, ts: PlainTime<'_>, input: Count, output: Count) {
        if self.len + PLAIN_ROW_ROOM > PLAIN_BLOCK {
            self.flush(out);
        }
        let buf = &mut self.block[..];
        let mut p = put(buf, self.len, b"{\"timestamp\": ");
        p = match ts {
            PlainTime::Ms(ms) => self.ms.put(ms, buf, p),
            ts => put_time(ts, buf, p),
        };
        p = put(buf, p, b", \"input_length\": ");
        p = input.put(buf, p);
        p = put(buf, p, b", \"output_length\": ");
        p = output.put(buf, p);
        self.len = put(buf, p, b"}\n");
    }

    /// Moves the rows gathered so far to the end of `out`.
    pub fn flush(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.block[..self.len]);
        self.len = 0;
    }
}

/// A plain row's timestamp: whole ms, a float's JSON text, or whole
/// seconds as their digits were read (written with `000` after them:
/// BurstGPT's ms are ten digits, two `put_decimal` words, where the
/// seconds are copied as one).
#[derive(Clone, Copy)]
pub enum PlainTime<'a> {
    Ms(u64),
    Text(&'a [u8]),
    Seconds(Count),
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

    /// A count read from its digits is written as `put_decimal` writes its
    /// value, copied or not (leading zeros, eight digits and more); counts
    /// over the limit and fields that do not start with a digit are not
    /// read.
    #[test]
    fn counts_read_as_digits_are_written_as_their_values() {
        let mut texts: Vec<String> = (0..2000).map(|v| v.to_string()).collect();
        for len in 1..=15 {
            texts.push("9".repeat(len));
            texts.push(format!("1{}", "0".repeat(len - 1)));
            texts.push(format!("0{}", "7".repeat(len - 1)));
            texts.push("0".repeat(len));
        }
        for t in texts {
            let value: u64 = t.parse().unwrap();
            let data = format!("{t},1234567890123456");
            let Some((count, end)) = Count::at(data.as_bytes(), 0) else {
                assert!(value > crate::limits::MAX_ROW_TOKENS, "{t}");
                continue;
            };
            assert!(value <= crate::limits::MAX_ROW_TOKENS, "{t}");
            assert_eq!(end, t.len(), "{t}");
            assert_eq!(count.is_zero(), value == 0, "{t}");
            let mut got = [b'x'; 40];
            let end = count.put(&mut got, 3);
            let mut want = [b'x'; 40];
            let want_end = put_decimal(value, &mut want, 3);
            assert_eq!(&got[3..end], &want[3..want_end], "{t}");
        }
        for bad in [",1", " 1", "\"1\"", "-1", "1234567890123456,"] {
            let data = format!("{bad},12345678");
            assert!(Count::at(data.as_bytes(), 0).is_none(), "{bad}");
        }
    }

    /// Whole seconds copied with `000` after them are their ms as
    /// `put_decimal` writes them; seconds with a leading zero are not
    /// copied.
    #[test]
    fn whole_seconds_are_written_as_their_ms() {
        for secs in (0..3000u64).chain([9_999_999, 1_234_567, 10_000]) {
            let t = secs.to_string();
            let mut word = [b','; 8];
            word[..t.len()].copy_from_slice(t.as_bytes());
            let count = Count::digits(u64::from_le_bytes(word), t.len()).unwrap();
            let mut got = [b'x'; 40];
            let end = put_time(PlainTime::Seconds(count), &mut got, 2);
            let mut want = [b'x'; 40];
            let want_end = put_decimal(secs * 1000, &mut want, 2);
            assert_eq!(&got[2..end], &want[2..want_end], "{secs}");
        }
        assert!(Count::digits(u64::from_le_bytes(*b"05,,,,,,"), 2).is_none());
        assert!(Count::digits(u64::from_le_bytes(*b"12345678"), 8).is_none());
        assert!(Count::digits(0, 0).is_none());
    }

    /// Rows gathered in blocks are `write_plain_request`'s rows, the ms
    /// made from the second before them or afresh, through 0 ms, second
    /// edges, a second met again after another, and long times.
    #[test]
    fn gathered_rows_are_the_plain_rows() {
        let mut times: Vec<u64> = (0..2500).step_by(7).collect();
        times.extend([999, 1000, 1001, 0, 1000, 59_999, 60_000, 5, 123_456_789_012]);
        times.extend([u64::MAX / 1000 * 1000 - 1, u64::MAX, 1_000_000, 999_999]);
        let mut rows = PlainRows::default();
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for (k, &ms) in times.iter().enumerate() {
            let data = format!("{},{k}0,########", k + 1);
            let (input, _) = Count::at(data.as_bytes(), 0).unwrap();
            let (output, _) = Count::at(data.as_bytes(), data.find(',').unwrap() + 1).unwrap();
            rows.push(&mut got, PlainTime::Ms(ms), input, output);
            write_plain_request(
                &mut want,
                PlainTime::Ms(ms),
                k as u64 + 1,
                k as u64 * 10,
                None,
            );
        }
        rows.flush(&mut got);
        assert_eq!(
            String::from_utf8(got).unwrap(),
            String::from_utf8(want).unwrap()
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
