//! The second pass's ids: a row's core prefix read from its text only as
//! far as it goes, and its new ids kept and written as runs of
//! consecutive ids.
//!
//! The new ids of a row are runs: `--prefix-len-multiplier` turns a core
//! id h into h*k .. h*k+k-1 (consecutive core ids into one run), and the
//! fresh ids are a counter's next values. Writing a run formats its first
//! id and then counts up in the text (the last digit, carrying rarely),
//! instead of formatting every id from its value; and the ids after the
//! core are never read, only counted (the scanner's shape has the
//! count). Decoding every id twice and formatting every new one was 43%
//! of the multipliers' instructions (cachegrind,
//! docs/decisions/0042-multipliers-count-and-write-runs.md).

/// Calls `f` with the ids of `raw` in order, while it returns true.
/// `raw` is an id array the scanner proved (plain non-negative integers
/// of at most 19 digits, so none overflows): anything but a digit
/// separates ids, and only `[`, `,`, `]` and whitespace can. (On any other
/// text the ids are wrong, never a panic.)
///
/// An id of up to seven digits with eight bytes after its start (nearly
/// every id) is read from one load: its length is the first byte that is
/// not a digit, its value three multiplies (the method of
/// docs/decisions/0029-ids-scanned-sixty-four-bytes.md), and the `, `
/// after it is stepped over at once.
#[inline(always)]
pub fn ids_while(raw: &[u8], mut f: impl FnMut(u64) -> bool) {
    let mut i = 0;
    while i < raw.len() {
        if let Some(chunk) = raw[i..].first_chunk::<8>() {
            let x = u64::from_le_bytes(*chunk);
            let len = (not_digits(x).trailing_zeros() / 8) as usize;
            if (1..8).contains(&len) {
                i += len;
                if raw.get(i) == Some(&b',') {
                    i += 1;
                    if raw.get(i) == Some(&b' ') {
                        i += 1;
                    }
                }
                if !f(crate::record::eight_digits(x, len)) {
                    return;
                }
                continue;
            }
        }
        // Between ids, near the end of the array, or eight digits and more.
        let b = raw[i];
        if !b.is_ascii_digit() {
            if b == b']' {
                return;
            }
            i += 1;
            continue;
        }
        let mut v = 0u64;
        while let Some(&d) = raw.get(i).filter(|d| d.is_ascii_digit()) {
            v = v.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
            i += 1;
        }
        if !f(v) {
            return;
        }
    }
}

/// Nonzero in the bytes of `x` that are not ASCII digits: a digit's high
/// nibble is 3, and so is that of the digit plus 6 (`:` and above carry
/// into 4). An add carries into the next byte only out of a byte of 0xFA
/// or more, itself not a digit, so the lowest flagged byte is always the
/// first non-digit.
#[inline(always)]
fn not_digits(x: u64) -> u64 {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const THREES: u64 = 0x3030_3030_3030_3030;
    const SIXES: u64 = 0x0606_0606_0606_0606;
    ((x & HIGH) ^ THREES) | ((x.wrapping_add(SIXES) & HIGH) ^ THREES)
}

/// A list of ids as runs of consecutive ids, in order.
#[derive(Debug, Default, Clone)]
pub struct IdRuns {
    /// (first id, length), each length at least 1; a run never starts
    /// where the one before it ends (they are joined).
    runs: Vec<(u64, u64)>,
    /// Ids in all.
    count: u64,
}

impl IdRuns {
    pub fn clear(&mut self) {
        self.runs.clear();
        self.count = 0;
    }

    /// Appends `start .. start + len` (the caller made sure the end fits
    /// 64 bits).
    #[inline]
    pub fn push_run(&mut self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        self.count += len;
        if let Some((s, l)) = self.runs.last_mut() {
            if s.checked_add(*l) == Some(start) {
                *l += len;
                return;
            }
        }
        self.runs.push((start, len));
    }

    /// Ids in all.
    pub fn len(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The ids, one by one.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs
            .iter()
            .flat_map(|&(s, l)| (0..l).map(move |j| s + j))
    }

    /// Writes the ids as a JSON array in the spacing of `original`, the
    /// array they replace (what `record::write_id_array_like` writes for
    /// the same ids), at the start of `buf`; returns its length. `buf`
    /// keeps its length from row to row and only grows: it is the row's
    /// scratch, and zeroing the room for every row cost more than the
    /// writing (cachegrind).
    pub fn write_into(&self, original: &[u8], buf: &mut Vec<u8>) -> usize {
        if compact_spacing(original) {
            self.write(b",", buf)
        } else {
            self.write(b", ", buf)
        }
    }

    /// The array with `separator` between ids. An id below 10^8 is stored
    /// as its eight bytes of text in one `u64` (the next store
    /// overwriting what is past its digits); the next id of its run is
    /// the same text with the last digit up by one, made again from its
    /// value only when that digit is a 9.
    fn write<const N: usize>(&self, separator: &[u8; N], buf: &mut Vec<u8>) -> usize {
        // An id is at most 20 digits; a store is at most 32 bytes.
        let count = usize::try_from(self.count).unwrap_or(usize::MAX);
        let room = count.saturating_mul(20 + N).saturating_add(2 + 32);
        if buf.len() < room {
            buf.resize(room, 0);
        }
        buf[0] = b'[';
        let mut p = 1;
        for &(start, len) in &self.runs {
            let (mut v, mut left) = (start, len);
            while left > 0 {
                if v >= 100_000_000 {
                    if p > 1 {
                        buf[p..p + N].copy_from_slice(separator);
                        p += N;
                    }
                    let mut text = itoa::Buffer::new();
                    let text = text.format(v).as_bytes();
                    buf[p..p + text.len()].copy_from_slice(text);
                    p += text.len();
                    (v, left) = (v.wrapping_add(1), left - 1);
                    continue;
                }
                let (mut text, digits) = ascii_below_1e8(v);
                let last = 8 * (digits - 1);
                loop {
                    if p > 1 {
                        buf[p..p + N].copy_from_slice(separator);
                        p += N;
                    }
                    buf[p..p + 8].copy_from_slice(&text.to_le_bytes());
                    p += digits;
                    left -= 1;
                    v = v.wrapping_add(1);
                    if left == 0 || (text >> last) as u8 == b'9' {
                        break;
                    }
                    text += 1 << last;
                }
            }
        }
        buf[p] = b']';
        p + 1
    }
}

/// Whether an id array is written compactly (`[1,2]`): a comma and no
/// `, `. The rule of `record::write_id_array_like`, which keeps it
/// private; `the_spacing_is_the_record_writers` holds the two together.
fn compact_spacing(raw: &[u8]) -> bool {
    raw.contains(&b',') && !raw.windows(2).any(|w| w == b", ")
}

/// `v` (below 10^8) as decimal text in the low bytes of a `u64`, first
/// digit lowest, and its number of digits. Made in the register, not by
/// `itoa` and a copy: a run's first id and every id after a 9 come here,
/// and `itoa`'s call and copy were 5% of the multipliers' instructions
/// (cachegrind). The eight digits are split in lanes, 4 + 4, then 2 + 2,
/// then 1 + 1, the divisions by 100 and by 10 done as multiply-shifts,
/// exact for the lane values they meet (below 10^4 and below 100; the
/// tests try every one); the leading zeros are then shifted out.
#[inline]
fn ascii_below_1e8(v: u64) -> (u64, usize) {
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    // 32-bit lanes: the first four digits low, the last four high.
    let x = (v / 10_000) | ((v % 10_000) << 32);
    // 16-bit lanes: each four split in two pairs, the first pair low.
    let hundreds = ((x * 10_486) >> 20) & 0x0000_007F_0000_007F;
    let x = hundreds | ((x - hundreds * 100) << 16);
    // Bytes: each pair split in two digits, the first low.
    let tens = ((x * 103) >> 10) & 0x000F_000F_000F_000F;
    let x = tens | ((x - tens * 10) << 8);
    let text = x + ZEROS;
    // Leading zeros are the low bytes; 0 keeps one.
    let skip = ((text ^ ZEROS).trailing_zeros() / 8).min(7) as usize;
    (text >> (8 * skip), 8 - skip)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::write_id_array_like;
    use proptest::prelude::*;

    /// The ids `ids_while` gives for `raw` until `stop` (included).
    fn read(raw: &[u8], stop: impl Fn(u64) -> bool) -> Vec<u64> {
        let mut out = Vec::new();
        ids_while(raw, |h| {
            out.push(h);
            !stop(h)
        });
        out
    }

    #[test]
    fn ids_are_read_until_told_to_stop() {
        assert_eq!(read(b"[3, 14, 15, 9, 2]", |h| h == 9), vec![3, 14, 15, 9]);
        assert_eq!(read(b"[ 1,\n\t2 ,3 ]", |_| false), vec![1, 2, 3]);
        assert_eq!(read(b"[]", |_| false), Vec::<u64>::new());
        assert_eq!(read(b"[7]", |_| true), vec![7]);
        assert_eq!(
            read(b"[18446744073709551615, 12345678, 1234567, 0]", |_| false),
            vec![u64::MAX, 12_345_678, 1_234_567, 0]
        );
    }

    /// The text `runs` writes in place of `original`.
    fn text(runs: &IdRuns, original: &[u8]) -> String {
        let mut buf = Vec::new();
        let n = runs.write_into(original, &mut buf);
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn runs_join_consecutive_ids() {
        let mut r = IdRuns::default();
        for (s, l) in [(4, 2), (6, 2), (9, 0), (9, 1), (20, 3)] {
            r.push_run(s, l);
        }
        assert_eq!(r.runs, vec![(4, 4), (9, 1), (20, 3)]);
        assert_eq!(r.len(), 8);
        assert_eq!(
            r.iter().collect::<Vec<_>>(),
            vec![4, 5, 6, 7, 9, 20, 21, 22]
        );
        assert_eq!(text(&r, b"[1, 2]"), "[4, 5, 6, 7, 9, 20, 21, 22]");
        assert_eq!(text(&r, b"[1,2]"), "[4,5,6,7,9,20,21,22]");
        assert_eq!(text(&IdRuns::default(), b"[]"), "[]");
        // The buffer is kept from row to row: a shorter array after a
        // longer one is only its own bytes.
        let mut buf = Vec::new();
        let n = r.write_into(b"[1, 2]", &mut buf);
        assert_eq!(&buf[..n], b"[4, 5, 6, 7, 9, 20, 21, 22]");
        let mut short = IdRuns::default();
        short.push_run(3, 1);
        let n = short.write_into(b"[1, 2]", &mut buf);
        assert_eq!(&buf[..n], b"[3]");
    }

    #[test]
    fn the_lane_divisions_are_exact_for_every_lane_value() {
        for a in 0..10_000u64 {
            assert_eq!((a * 10_486) >> 20, a / 100, "{a}");
        }
        for b in 0..100u64 {
            assert_eq!((b * 103) >> 10, b / 10, "{b}");
        }
        for v in (0..100_000_000u64)
            .step_by(9_973)
            .chain([0, 9, 10, 99_999_999])
        {
            let (text, digits) = ascii_below_1e8(v);
            let s = v.to_string();
            assert_eq!(&text.to_le_bytes()[..digits], s.as_bytes(), "{v}");
            assert!(text.to_le_bytes()[digits..].iter().all(|&b| b == 0), "{v}");
        }
    }

    #[test]
    fn counting_up_carries_into_a_new_digit() {
        let mut r = IdRuns::default();
        r.push_run(7, 5);
        r.push_run(998, 4);
        r.push_run(u64::MAX - 2, 3);
        r.push_run(99_999_998, 3);
        let max = u64::MAX;
        let want = format!(
            "[7,8,9,10,11,998,999,1000,1001,{},{},{max},99999998,99999999,100000000]",
            max - 2,
            max - 1
        );
        assert_eq!(text(&r, b"[0,1]"), want);
    }

    proptest! {
        /// The spacing rule restated here is the record writer's.
        #[test]
        fn the_spacing_is_the_record_writers(
            raw in proptest::collection::vec(
                prop_oneof![Just(b','), Just(b' '), Just(b'1'), Just(b'\n'), Just(b'[')],
                0..12,
            ),
        ) {
            let mut want = Vec::new();
            write_id_array_like(&[1, 2], Some(&raw), &mut want);
            let sep: &[u8] = if compact_spacing(&raw) { b"," } else { b", " };
            prop_assert_eq!(want, [b"[1".as_slice(), sep, b"2]"].concat());
        }

        /// Whatever the ids and the JSON spacing between them, the ids read
        /// are the record decoder's.
        #[test]
        fn ids_read_are_the_record_decoders(
            ids in proptest::collection::vec(
                prop_oneof![0u64..1_000, 0u64..100_000_000, 0u64..10_000_000_000_000_000_000],
                0..40,
            ),
            seps in proptest::collection::vec(
                prop_oneof![Just(", "), Just(","), Just(" , "), Just(",\n  "), Just("\t,\r\n")],
                40,
            ),
            outer in prop_oneof![Just(""), Just(" "), Just("\n")],
        ) {
            let mut text = format!("{{\"hash_ids\": [{outer}");
            for (k, id) in ids.iter().enumerate() {
                if k > 0 {
                    text.push_str(seps[k]);
                }
                text.push_str(&id.to_string());
            }
            text.push_str(&format!("{outer}]}}"));
            let rec = crate::record::Record::parse(text.as_bytes()).unwrap();
            let shape = rec.hash_ids_shape().unwrap().unwrap();
            prop_assert!(shape.longest_digits <= 19);
            let mut want = Vec::new();
            rec.hash_ids_into(&mut want).unwrap();
            prop_assert_eq!(&want, &ids);
            let raw = rec.raw(crate::record::Field::HashIds).unwrap();
            prop_assert_eq!(read(raw, |_| false), want);
        }

        /// Whatever the runs, the text is what the record writer writes
        /// for the same ids, in either spacing.
        #[test]
        fn runs_are_written_as_the_record_writer_writes_their_ids(
            runs in proptest::collection::vec(
                (prop_oneof![0u64..2_000, any::<u64>().prop_map(|v| v >> 1)], 0u64..40),
                0..12,
            ),
            compact in any::<bool>(),
        ) {
            let mut r = IdRuns::default();
            for &(s, l) in &runs {
                r.push_run(s, l);
            }
            let ids: Vec<u64> = r.iter().collect();
            prop_assert_eq!(ids.len() as u64, r.len());
            let original: &[u8] = if compact { b"[1,2]" } else { b"[1, 2]" };
            let mut want = Vec::new();
            write_id_array_like(&ids, Some(original), &mut want);
            prop_assert_eq!(text(&r, original), String::from_utf8(want).unwrap());
        }
    }
}
