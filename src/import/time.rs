//! Timestamps as the public traces write them: wall-clock datetimes (Azure)
//! and decimal seconds (BurstGPT, RAGPulse), read exactly into integer
//! nanoseconds so no float rounding creeps into millisecond arithmetic.

use crate::csv::word_at;
use crate::record::{self, Number};

/// `YYYY-MM-DD[ T]HH:MM:SS[.f{1,9}][Z|±HH:MM]` as nanoseconds since the Unix
/// epoch. Without an offset the time is taken as UTC (Azure 2023 writes none;
/// its 2024 files write `+00:00`).
pub fn parse_datetime(s: &[u8]) -> Option<i64> {
    seconds_and_after(s, minute(s)?)
}

/// Digits `r` of `s` as a number (`None`: not all digits, or out of `s`).
fn digits(s: &[u8], r: std::ops::Range<usize>) -> Option<i64> {
    let b = s.get(r)?;
    let mut v = 0i64;
    for &c in b {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i64::from(c - b'0');
    }
    Some(v)
}

/// The first 17 bytes of a datetime, `YYYY-MM-DD[ T]HH:MM` and the `:` after
/// them, as seconds since the Unix epoch (UTC) of that minute; the rest is
/// [`seconds_and_after`]'s. Checks that the date and time exist.
fn minute(s: &[u8]) -> Option<i64> {
    if s.len() < 19 || s[4] != b'-' || s[7] != b'-' || !matches!(s[10], b' ' | b'T') {
        return None;
    }
    if s[13] != b':' || s[16] != b':' {
        return None;
    }
    let (y, mo, d) = (digits(s, 0..4)?, digits(s, 5..7)?, digits(s, 8..10)?);
    let (h, mi) = (digits(s, 11..13)?, digits(s, 14..16)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 {
        return None;
    }
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60)
}

/// The datetime `s` as nanoseconds, given its minute (from [`minute`]):
/// the seconds, the fraction and the offset after byte 17.
fn seconds_and_after(s: &[u8], minute_s: i64) -> Option<i64> {
    let sec = digits(s, 17..19)?;
    if sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0i64;
    if s.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < s.len() && s[i].is_ascii_digit() {
            if i - start < 9 {
                nanos = nanos * 10 + i64::from(s[i] - b'0');
            }
            i += 1;
        }
        let digits = i - start;
        if digits == 0 {
            return None;
        }
        for _ in digits..9 {
            nanos *= 10;
        }
    }
    let offset_s = match s.get(i) {
        None => 0,
        Some(b'Z') if i + 1 == s.len() => 0,
        Some(&sign @ (b'+' | b'-')) if s.len() == i + 6 && s[i + 3] == b':' => {
            let (oh, om) = (digits(s, i + 1..i + 3)?, digits(s, i + 4..i + 6)?);
            // Real offsets run from -12:00 to +14:00.
            if oh > 14 || om > 59 {
                return None;
            }
            let o = oh * 3600 + om * 60;
            if sign == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    let secs = minute_s + sec - offset_s;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// [`parse_datetime`] for rows in time order: consecutive rows mostly
/// share their minute (Azure's week: about 2,400 rows a minute), so the
/// date's checks and day count are done once a minute, and a row whose
/// first 17 bytes (to the `:` before the seconds) are the last row's reads
/// only its seconds, fraction and offset. The same answers as [`parse_datetime`] for every input (the
/// bytes compared are the ones `minute` read).
#[derive(Debug, Clone, Default)]
pub struct Datetimes {
    /// The last valid minute's first 17 bytes (to its `:`, as two words
    /// and a byte) and its seconds.
    last: Option<(Head, i64)>,
}

/// The first 17 bytes of a datetime, as they are compared.
type Head = (u64, u64, u8);

/// The first 17 bytes of `s` from `at`, when it has 19 (a minute and its
/// seconds' two digits).
#[inline(always)]
fn head_at(s: &[u8], at: usize) -> Option<Head> {
    s.get(at + 18)?;
    Some((word_at(s, at)?, word_at(s, at + 8)?, s[at + 16]))
}

impl Datetimes {
    pub fn parse(&mut self, s: &[u8]) -> Option<i64> {
        let m = self.minute_at(s, 0)?;
        seconds_and_after_fast(s, m)
    }

    /// The seconds of the minute that starts `s` at `at` (the cached one
    /// when its 17 bytes are the last valid minute's).
    #[inline(always)]
    fn minute_at(&mut self, s: &[u8], at: usize) -> Option<i64> {
        let head = head_at(s, at)?;
        match self.last {
            Some((h, m)) if h == head => Some(m),
            _ => {
                let m = minute(s.get(at..)?)?;
                self.last = Some((head, m));
                Some(m)
            }
        }
    }

    /// The datetime that starts at `data[at]` in one of the shapes Azure
    /// writes (`SS`, `SS.f{1,9}`, each alone, with `+00:00` or with `Z`,
    /// after a minute that exists), read without finding its end first: its
    /// time as [`parse_datetime`] reads the same text, and the index of the
    /// byte after it (the caller checks that it ends the field). `None` for
    /// any other shape, and near the end of `data` (the words read): the
    /// general way takes those.
    #[inline]
    pub fn parse_plain(&mut self, data: &[u8], at: usize) -> Option<(i64, usize)> {
        // The bytes read below without `get` reach `at + 25`.
        data.get(at + 25)?;
        let minute_s = self.minute_at(data, at)?;
        let (a, b) = (
            data[at + 17].wrapping_sub(b'0'),
            data[at + 18].wrapping_sub(b'0'),
        );
        if a > 6 || b > 9 {
            return None;
        }
        let sec = i64::from(a) * 10 + i64::from(b);
        if sec > 60 {
            return None;
        }
        let mut end = at + 19;
        let mut nanos = 0;
        if data[end] == b'.' {
            let (v, after) = crate::csv::plain_uint_at(data, end + 1)?;
            // The digits' count scales them to ns; past nine (dropped by
            // the general reader) the general way.
            let n = after - end - 1;
            if n > 9 {
                return None;
            }
            nanos = v as i64 * POW10[9 - n];
            end = after;
        }
        match data[end] {
            b'Z' => end += 1,
            b'+' if data.get(end + 1..end + 6) == Some(b"00:00") => end += 6,
            _ => {}
        }
        let secs = minute_s + sec;
        Some((secs.checked_mul(1_000_000_000)?.checked_add(nanos)?, end))
    }
}

/// [`seconds_and_after`] for the shapes Azure writes, `SS`, `SS.f{1,9}`,
/// either with `+00:00` or `Z`: the digits checked and summed without
/// bounds checks per byte (the general reader was a tenth of an Azure
/// import's instructions, cachegrind); any other tail goes to
/// [`seconds_and_after`], so the answers are its answers (the minute-cache
/// test compares the two on every mutation of the valid shapes).
#[inline]
fn seconds_and_after_fast(s: &[u8], minute_s: i64) -> Option<i64> {
    // Azure 2024's `SS.fffffff+00:00`: the point and seven digits as one
    // word of eight digits (the point read as a 0).
    if let [a, b, b'.', f @ .., b'+', b'0', b'0', b':', b'0', b'0'] = s.get(17..)? {
        if let (Ok(f), true) = (
            <[u8; 7]>::try_from(f),
            a.is_ascii_digit() && b.is_ascii_digit(),
        ) {
            let word = u64::from_le_bytes([b'0', f[0], f[1], f[2], f[3], f[4], f[5], f[6]]);
            let sec = i64::from(a - b'0') * 10 + i64::from(b - b'0');
            if let (Some(frac), true) = (eight_digits(word), sec <= 60) {
                let secs = minute_s + sec;
                return secs
                    .checked_mul(1_000_000_000)?
                    .checked_add(frac as i64 * 100);
            }
        }
    }
    let tail = s.get(17..)?;
    let (sec, rest) = match tail {
        [a, b, rest @ ..] if a.is_ascii_digit() && b.is_ascii_digit() => {
            (i64::from(a - b'0') * 10 + i64::from(b - b'0'), rest)
        }
        _ => return None,
    };
    if sec > 60 {
        return None;
    }
    let (nanos, rest) = match rest {
        [b'.', frac @ ..] => {
            let n = frac.iter().take_while(|c| c.is_ascii_digit()).count();
            if n == 0 || n > 9 {
                return seconds_and_after(s, minute_s);
            }
            let mut v = 0i64;
            for &c in &frac[..n] {
                v = v * 10 + i64::from(c - b'0');
            }
            (v * POW10[9 - n], &frac[n..])
        }
        _ => (0, rest),
    };
    match rest {
        b"" | b"Z" | b"+00:00" => {
            let secs = minute_s + sec;
            secs.checked_mul(1_000_000_000)?.checked_add(nanos)
        }
        _ => seconds_and_after(s, minute_s),
    }
}

/// Eight ASCII digits, the first in the lowest byte, as their number;
/// `None` when a byte is not a digit (joined by `csv::join_eight_digits`).
#[inline]
fn eight_digits(word: u64) -> Option<u64> {
    let x = word.wrapping_sub(0x3030_3030_3030_3030);
    // Each byte below 10: no high nibble, and no carry out when 6 is added.
    if (x | x.wrapping_add(0x0606_0606_0606_0606)) & 0xF0F0_F0F0_F0F0_F0F0 != 0 {
        return None;
    }
    Some(crate::csv::join_eight_digits(x))
}

const POW10: [i64; 10] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
];

/// Why a datetime of the right shape is refused by [`parse_datetime`]: a
/// date or time that does not exist, or an offset no place uses. `None`
/// when the text does not even have the shape (the caller shows examples).
pub fn datetime_problem(s: &[u8]) -> Option<String> {
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let b = s.get(r)?;
        b.iter().try_fold(0i64, |v, &c| {
            c.is_ascii_digit().then(|| v * 10 + i64::from(c - b'0'))
        })
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&mo) {
        return Some(format!("month {mo:02} does not exist"));
    }
    if d < 1 || d > days_in_month(y, mo) {
        return Some(format!("{y:04}-{mo:02} has no day {d:02}"));
    }
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if h > 23 || mi > 59 || sec > 60 {
        return Some(format!("{h:02}:{mi:02}:{sec:02} is not a time of day"));
    }
    let sign = s.iter().skip(19).position(|&c| c == b'+' || c == b'-')? + 19;
    let (oh, om) = (num(sign + 1..sign + 3)?, num(sign + 4..sign + 6)?);
    (oh > 14 || om > 59).then(|| {
        format!(
            "{}{oh:02}:{om:02} is not a UTC offset (they run from -12:00 to +14:00)",
            s[sign] as char
        )
    })
}

/// Days in month `m` of year `y` (proleptic Gregorian): 2023-02-29 and
/// 04-31 do not exist.
fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Decimal seconds (`82`, `5.25`, `-0.5`) as nanoseconds; digits past the
/// ninth decimal are dropped.
pub fn parse_seconds(s: &[u8]) -> Option<i64> {
    // Whole seconds (BurstGPT's), without the general walk below.
    if !s.is_empty() && s.len() <= 18 && s.iter().all(u8::is_ascii_digit) {
        let secs = s.iter().fold(0i64, |v, &c| v * 10 + i64::from(c - b'0'));
        return secs.checked_mul(1_000_000_000);
    }
    let (neg, s) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let (int, frac) = match memchr::memchr(b'.', s) {
        Some(p) => (&s[..p], &s[p + 1..]),
        None => (s, &s[..0]),
    };
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut secs = 0i64;
    for &c in int {
        if !c.is_ascii_digit() {
            return None;
        }
        secs = secs.checked_mul(10)?.checked_add(i64::from(c - b'0'))?;
    }
    let mut nanos = 0i64;
    for (k, &c) in frac.iter().enumerate() {
        if !c.is_ascii_digit() {
            return None;
        }
        if k < 9 {
            nanos += i64::from(c - b'0') * 10i64.pow(8 - k as u32);
        }
    }
    let v = secs.checked_mul(1_000_000_000)?.checked_add(nanos)?;
    Some(if neg { -v } else { v })
}

/// Writes nanoseconds as milliseconds: whole ms (floored) by default, or a
/// float keeping the sub-ms part with `--float-timestamps`.
pub fn write_ms(nanos: i64, float: bool, out: &mut Vec<u8>) {
    let n = if float {
        Number::Float(nanos as f64 / 1e6)
    } else {
        Number::Int(nanos.div_euclid(1_000_000))
    };
    record::write_number(n, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_of_both_azure_shapes() {
        // 2023-11-16 is 19677 days after 1970-01-01 (date -d 2023-11-16 +%s = 1700092800).
        let t = parse_datetime(b"2023-11-16 18:17:03.9799600").unwrap();
        assert_eq!(
            t,
            (1_700_092_800 + 18 * 3600 + 17 * 60 + 3) * 1_000_000_000 + 979_960_000
        );
        // 2024 shape: with an offset, with and without a fraction.
        let a = parse_datetime(b"2024-05-10 00:00:00+00:00").unwrap();
        let b = parse_datetime(b"2024-05-10 00:00:00.5+00:00").unwrap();
        assert_eq!(b - a, 500_000_000);
        // date -d 2024-05-10Z +%s = 1715299200
        assert_eq!(a, 1_715_299_200 * 1_000_000_000);
        let c = parse_datetime(b"2024-05-10T02:00:00+02:00").unwrap();
        assert_eq!(c, a);
        assert_eq!(parse_datetime(b"2024-05-10 00:00:00Z"), Some(a));
        assert!(parse_datetime(b"2024-02-29 00:00:00").is_some());
        assert!(parse_datetime(b"2000-02-29 00:00:00").is_some());
        assert!(parse_datetime(b"1900-02-29 00:00:00").is_none());
        assert_eq!(
            datetime_problem(b"2023-02-29 00:00:00").as_deref(),
            Some("2023-02 has no day 29")
        );
        assert_eq!(
            datetime_problem(b"2024-04-31 00:00:00").as_deref(),
            Some("2024-04 has no day 31")
        );
        assert!(datetime_problem(b"2024-05-10 00:00:00+99:99")
            .is_some_and(|p| p.starts_with("+99:99 is not a UTC offset")));
        assert_eq!(datetime_problem(b"yesterday"), None);
        for bad in [
            &b"2024-05-10"[..],
            b"2024-13-10 00:00:00",
            b"2024-05-10 00:00:00.",
            b"2024-05-10 00:00:00+0",
            b"2023-02-29 00:00:00",
            b"2024-04-31 00:00:00",
            b"2024-05-10 00:00:00+99:99",
            b"2024-05-10 00:00:00+15:00",
        ] {
            assert_eq!(
                parse_datetime(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// The cache answers as the plain parse does, row after row, on the
    /// shapes Azure writes and on every way one can be wrong (a byte of
    /// a valid datetime replaced, or the text cut short), after a valid row
    /// of the same minute and after none.
    #[test]
    fn the_minute_cache_answers_as_the_plain_parse() {
        let valid: [&[u8]; 8] = [
            b"2023-11-16 18:17:03.9799600",
            // Azure 2024's shape, read as one word of digits.
            b"2024-05-10 00:00:00.0095530+00:00",
            b"2024-05-10 23:59:59.9999999+00:00",
            b"2023-11-16 18:17:59",
            b"2024-05-10 00:00:00.5+00:00",
            b"2024-05-10 00:00:00-03:30",
            b"2024-05-10T00:00:60Z",
            b"2024-02-29 23:59:01.123456789123",
        ];
        let mut inputs: Vec<Vec<u8>> = Vec::new();
        for v in valid {
            inputs.push(v.to_vec());
            for i in 0..v.len() {
                for b in [b'0', b'9', b'-', b':', b' ', b'x', b'+', b'.'] {
                    let mut w = v.to_vec();
                    w[i] = b;
                    inputs.push(w);
                }
                inputs.push(v[..i].to_vec());
            }
        }
        for warm in valid {
            for s in &inputs {
                let mut c = Datetimes::default();
                let _ = c.parse(warm);
                assert_eq!(
                    c.parse(s),
                    parse_datetime(s),
                    "{} after {}",
                    String::from_utf8_lossy(s),
                    String::from_utf8_lossy(warm)
                );
            }
        }
        let mut c = Datetimes::default();
        for s in &inputs {
            assert_eq!(
                c.parse(s),
                parse_datetime(s),
                "{}",
                String::from_utf8_lossy(s)
            );
        }
    }

    #[test]
    fn eight_digits_reads_every_digit_and_refuses_the_rest() {
        for v in [
            0u64, 1, 9, 10, 12_345_678, 99_999_999, 10_203_040, 90_000_001,
        ] {
            let text = format!("{v:08}");
            let word = u64::from_le_bytes(text.as_bytes().try_into().unwrap());
            assert_eq!(eight_digits(word), Some(v), "{text}");
            for i in 0..8 {
                for bad in [b'/', b':', b'.', b' ', b'a', 0, 0xff, b'0' + 16, b'0' - 16] {
                    let mut t = text.as_bytes().to_vec();
                    t[i] = bad;
                    let word = u64::from_le_bytes(t.as_slice().try_into().unwrap());
                    assert_eq!(eight_digits(word), None, "{t:?}");
                }
            }
        }
    }

    #[test]
    fn decimal_seconds_are_exact() {
        assert_eq!(parse_seconds(b"82"), Some(82_000_000_000));
        assert_eq!(parse_seconds(b"0.001"), Some(1_000_000));
        assert_eq!(parse_seconds(b"5.25"), Some(5_250_000_000));
        assert_eq!(parse_seconds(b"-1.5"), Some(-1_500_000_000));
        assert_eq!(parse_seconds(b""), None);
        assert_eq!(parse_seconds(b"1e3"), None);
    }

    #[test]
    fn milliseconds_floor_or_float() {
        let mut o = Vec::new();
        write_ms(52_000_000, false, &mut o);
        o.push(b' ');
        write_ms(3_435_948_056_000, true, &mut o);
        o.push(b' ');
        write_ms(-1, false, &mut o);
        assert_eq!(o, b"52 3435948.056 -1");
    }
}
