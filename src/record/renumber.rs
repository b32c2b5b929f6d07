//! The id-namespacing rule (`h*k + t`) and its fast path: a proven id
//! array renumbered four ids at a time on AVX2.
//!
//! mc-roots and mc-merge rewrite every id of every row by this rule, and
//! read, renumbered and written one at a time an id cost ~154 instructions
//! (decision 0036): 14 a byte of input on its own, over mc-roots' target
//! of 10. Here the ids' ends come from a digit mask of each 64-byte window,
//! four ids are loaded into one 256-bit register, and their digits are
//! turned into values, renumbered, and turned back into digits for all
//! four lanes at once; only finding each id and storing its text stay per
//! id (docs/decisions/0040-ids-renumbered-four-at-a-time.md).

/// The id-namespacing rule: id `h` of namespace `t` (of `k`) becomes
/// `h*k + t`. One-to-one within a namespace, disjoint between namespaces,
/// and the identity for `k = 1`. mc-roots, mc-merge and the WEKA importer
/// all use it, so ids namespaced by one tool read the same in another.
/// `None` when the result does not fit 64 bits.
#[inline]
pub fn namespace_id(h: u64, k: u64, t: u64) -> Option<u64> {
    h.checked_mul(k).and_then(|v| v.checked_add(t))
}

/// Whether every id of at most `digits` digits stays below 10^8 (eight
/// digits, what one lane makes) under [`namespace_id`] with `k`, `t`: then
/// no id can overflow either, and the fast path gives what the rule gives.
fn fits_eight_digits(digits: usize, k: u64, t: u64) -> bool {
    const LARGEST: [u64; 9] = [0, 9, 99, 999, 9_999, 99_999, 999_999, 9_999_999, 99_999_999];
    LARGEST
        .get(digits)
        .and_then(|&largest| namespace_id(largest, k, t))
        .is_some_and(|v| v < 100_000_000)
}

/// Appends `[` the ids of `line[open..end]` renumbered by
/// [`namespace_id`] with `k`, `t`, `separator` between them `]` to `out`,
/// and returns true; or returns false and leaves `out` as it was when the
/// fast path does not apply: no AVX2 (with BMI1, BMI2 and POPCNT), ids of more
/// than eight digits or new ids that could be (`longest_digits`), or an
/// array too near the start of the line for the 8-byte loads that end at
/// its ids. `line[open]` is the `[` and `line[end - 1]` the `]` of an array
/// the scan proved (`walk` accepted it: maximal runs of digits, `count` of
/// them, are its ids; anything else between them is separator), which is
/// all this path relies on.
///
/// Inlined into `Record::namespace_hash_ids`: as a call of its own, with
/// the textual path's seven arguments passed on, it cost ~66 instructions
/// a row (cachegrind, decision 0048, "last").
#[inline(always)]
pub(super) fn namespace_fast<const N: usize>(
    line: &[u8],
    (open, end): (usize, usize),
    (count, longest_digits): (usize, usize),
    (k, t): (u64, u64),
    separator: &[u8; N],
    out: &mut Vec<u8>,
) -> bool {
    if count == 0 || open < 8 || end > line.len() || open >= end || !(1..=2).contains(&N) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if has_features() {
        // Two files (or five) are rewritten as text, 32 bytes at a time;
        // an array whose spacing is not the separator's falls through.
        if matches!(k, 2 | 5) && t < k && longest_digits <= TEXTUAL_MAX_DIGITS {
            // SAFETY: the CPU has the features the function is compiled
            // for, and the checks above are its preconditions.
            if unsafe { textual::<N>(line, open, end, count, k, t, out) } {
                return true;
            }
        }
        if fits_eight_digits(longest_digits, k, t) {
            // SAFETY: as above.
            return unsafe { namespace_avx2(line, open, end, count, k, t, separator, out) };
        }
    }
    let _ = (separator, out, longest_digits, k, t);
    false
}

/// Whether the CPU has AVX2, BMI1, BMI2 and POPCNT, asked once: the four
/// detections were a test of a cached flag each on every row.
#[cfg(target_arch = "x86_64")]
#[inline]
fn has_features() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    // 0: not asked yet; 1: no; 2: yes.
    static KNOWN: AtomicU8 = AtomicU8::new(0);
    match KNOWN.load(Ordering::Relaxed) {
        0 => {
            let yes = std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("bmi1")
                && std::is_x86_feature_detected!("bmi2")
                && std::is_x86_feature_detected!("popcnt");
            KNOWN.store(1 + u8::from(yes), Ordering::Relaxed);
            yes
        }
        known => known == 2,
    }
}

/// The longest id the textual path takes: `5 * (10^18 - 1) + 4` fits 64
/// bits, so no id it takes can overflow; longer ids go to the paths that
/// refuse an overflow by value.
const TEXTUAL_MAX_DIGITS: usize = 18;

/// The digit tables of the textual rule for `k` (2 or 5), one entry a
/// digit value `d` (index 0-9); a table lookup (`pshufb`) of a byte that is
/// not a digit reads 0 (the `,` and space minus `'0'` have the top bit set;
/// `]` and `[` minus `'0'` index 13 and 11).
///
/// Multiplying a decimal number by 2 or 5 needs no carry chain: the carry
/// into digit i is `floor(k * d_{i+1} / 10)`, decided by the next digit
/// alone (for 2, `d >= 5`; for 5, `d / 2`: the rest of the digits after it
/// add less than one to `k * d_{i+1} / 10`), and `(k * d_i) % 10` plus it
/// is at most 9, so it carries no further. The last digit of `k * h` is
/// even (k = 2) or 0 or 5 (k = 5), so `+ t` with `t < k` carries nowhere.
/// The number grows by one digit, `floor(k * d_0 / 10)`, when that is not
/// zero.
#[cfg(target_arch = "x86_64")]
struct Tables {
    /// `'0' + (k * d) % 10`: the digit before its carry.
    times: [u8; 16],
    /// `floor(k * d / 10)`, the carry a digit hands to the one before it;
    /// at index 10 (every non-digit after `min(_, 10)`) `t`, added to an
    /// id's last digit.
    carry: [u8; 16],
    /// `0x80` where `floor(k * d / 10)` is not zero: an id starting with
    /// `d` grows a digit.
    grows: [u8; 16],
    /// `'0' + floor(k * d / 10)`: the digit a grown id starts with.
    lead: [u8; 16],
}

#[cfg(target_arch = "x86_64")]
impl Tables {
    const fn new(k: u8, t: u8) -> Tables {
        let mut tables = Tables {
            times: [0; 16],
            carry: [0; 16],
            grows: [0; 16],
            lead: [0; 16],
        };
        let mut d = 0;
        while d < 10 {
            let up = k * d / 10;
            tables.times[d as usize] = b'0' + k * d % 10;
            tables.carry[d as usize] = up;
            tables.grows[d as usize] = if up > 0 { 0x80 } else { 0 };
            tables.lead[d as usize] = b'0' + up;
            d += 1;
        }
        tables.carry[10] = t;
        tables
    }
}

/// [`Tables`] for every `(k, t)` the textual path takes, made at compile
/// time (made a row, they cost ~60 instructions a row): two files' at
/// `[t]`, five files' at `[2 + t]`.
#[cfg(target_arch = "x86_64")]
static TABLES: [Tables; 7] = [
    Tables::new(2, 0),
    Tables::new(2, 1),
    Tables::new(5, 0),
    Tables::new(5, 1),
    Tables::new(5, 2),
    Tables::new(5, 3),
    Tables::new(5, 4),
];

/// For each pattern of insertions in 8 bytes (bit j: a digit goes in
/// before byte j), the `pshufb` control that spreads a register of those
/// 8 bytes (low half) and the digit to insert before each (high half) over
/// `8 + popcount` bytes.
#[cfg(target_arch = "x86_64")]
#[repr(align(16))]
struct Spread([[u8; 16]; 256]);

#[cfg(target_arch = "x86_64")]
static SPREAD: Spread = {
    let mut table = [[0x80u8; 16]; 256];
    let mut m = 0;
    while m < 256 {
        let mut at = 0;
        let mut j = 0;
        while j < 8 {
            if m & (1 << j) != 0 {
                table[m][at] = 8 + j as u8;
                at += 1;
            }
            table[m][at] = j as u8;
            at += 1;
            j += 1;
        }
        m += 1;
    }
    Spread(table)
};

/// What one 32-byte block hands to the next: whether its last byte was a
/// digit, and the counts the spacing is checked by.
#[cfg(target_arch = "x86_64")]
#[derive(Default)]
struct Running {
    digit: u32,
    /// Digits seen.
    digits: usize,
    /// Spaces right after a comma.
    spaced: usize,
}

/// `[` the ids of `line[open..end]` times `k` plus `t` `]` appended to
/// `out` as text, without reading any id's value, for `k` 2 or 5, `t <
/// k`, ids of at most [`TEXTUAL_MAX_DIGITS`] digits; false, `out` as it
/// was, when the array's spacing is not exactly `separator` (`,` for N = 1,
/// `, ` for N = 2) between ids, or the array is too short or too near the
/// line's start for the 32-byte loads that end at its `]`. Every digit is
/// rewritten from itself and the next byte (see [`Tables`]) 32 bytes at a
/// time; ids that grow a digit get it by a shuffle of each 8 bytes.
///
/// The spacing is checked by counts: a proven array's separators each hold
/// one comma and only whitespace besides, so `count - 1` non-digits means
/// every separator is `,`, and `2 * (count - 1)` of them with a space right
/// after each of the `count - 1` commas means every one is `, `.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,popcnt")]
unsafe fn textual<const N: usize>(
    line: &[u8],
    open: usize,
    end: usize,
    count: usize,
    k: u64,
    t: u64,
    out: &mut Vec<u8>,
) -> bool {
    use std::arch::x86_64::*;
    let close = end - 1;
    let from = open + 1;
    // The last block is loaded as the 32 bytes that end at the `]`.
    if close < 32 || close <= from {
        return false;
    }
    let len = close - from;
    // Each id grows by at most one digit; the last block's 8-byte
    // shuffles store up to 48 bytes past what it keeps.
    let room = 2 + len + count + 64;
    out.reserve(room);
    let base = out.len();
    // SAFETY: `reserve` made `room` bytes from `base` writable; every
    // store below stays within them (see `room`).
    let dst = unsafe { out.as_mut_ptr().add(base) };
    let tables = match k {
        2 => &TABLES[t as usize],
        _ => &TABLES[2 + t as usize],
    };
    // SAFETY: 16 bytes each.
    let table =
        |t: &[u8; 16]| unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr().cast())) };
    let rule = Rule {
        times: table(&tables.times),
        carry: table(&tables.carry),
        grows: table(&tables.grows),
        lead: table(&tables.lead),
    };
    // SAFETY: the first byte of the room.
    unsafe { dst.write(b'[') };
    // The next byte to write (a pointer, not an index: the index cost an
    // add per store).
    // SAFETY: within the room.
    let mut at = unsafe { dst.add(1) };
    let mut run = Running::default();
    let src = line.as_ptr();
    let mut i = from;
    while i + 32 <= close {
        // SAFETY: bytes i..i+33 lie within the line (i + 32 <= close).
        at = unsafe { block::<N>(src.add(i), &rule, &mut run, at) };
        i += 32;
    }
    let tail = close - i;
    if tail > 0 {
        // The last bytes in a buffer of `]`s (a non-digit that reads 0 in
        // every table), as the 32 bytes that end at the array's `]` stored
        // so that byte `i` lands at `buf[32]`.
        let mut buf = std::mem::MaybeUninit::<[u8; 96]>::uninit();
        let b = buf.as_mut_ptr().cast::<u8>();
        // SAFETY: every store lies within the 96 bytes (1 <= 1 + tail and
        // 33 + tail <= 64); the block reads buf[32..65], all written.
        unsafe {
            let close_bytes = _mm256_set1_epi8(b']' as i8);
            _mm256_storeu_si256(b.add(32).cast(), close_bytes);
            _mm256_storeu_si256(b.add(64).cast(), close_bytes);
            let last = _mm256_loadu_si256(src.add(close - 31).cast());
            _mm256_storeu_si256(b.add(1 + tail).cast(), last);
            at = block::<N>(b.add(32), &rule, &mut run, at).sub(32 - tail);
        }
    }
    let separators = count - 1;
    let spaced = match N {
        1 => len - run.digits == separators,
        _ => len - run.digits == 2 * separators && run.spaced == separators,
    };
    if !spaced {
        return false;
    }
    // SAFETY: within the room; every byte up to `at` was written.
    unsafe {
        at.write(b']');
        out.set_len(base + at.offset_from(dst) as usize + 1);
    }
    true
}

/// [`Tables`] broadcast to both lanes.
#[cfg(target_arch = "x86_64")]
struct Rule {
    times: std::arch::x86_64::__m256i,
    carry: std::arch::x86_64::__m256i,
    grows: std::arch::x86_64::__m256i,
    lead: std::arch::x86_64::__m256i,
}

/// The 32 bytes at `s` rewritten by the rule into `dst` (digits replaced,
/// a digit inserted before each id that grows, everything else kept), the
/// counts of `run` advanced; returns where the next block's bytes go
/// (32 plus the ids grown past `dst`). Reads `s[0..33]`; writes up to 48
/// bytes at `dst`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,popcnt")]
#[inline]
unsafe fn block<const N: usize>(
    s: *const u8,
    rule: &Rule,
    run: &mut Running,
    dst: *mut u8,
) -> *mut u8 {
    use std::arch::x86_64::*;
    let zero = _mm256_set1_epi8(b'0' as i8);
    // SAFETY: the caller's: s[0..33] is readable.
    let (v, next) = unsafe {
        (
            _mm256_loadu_si256(s.cast()),
            _mm256_loadu_si256(s.add(1).cast()),
        )
    };
    let d = _mm256_sub_epi8(v, zero);
    let is_digit = _mm256_cmpeq_epi8(_mm256_min_epu8(d, _mm256_set1_epi8(9)), d);
    // The next byte's carry, or `t` where the next byte is not a digit
    // (every non-digit minus '0' is 10 or more, unsigned).
    let dn = _mm256_min_epu8(_mm256_sub_epi8(next, zero), _mm256_set1_epi8(10));
    let digits = _mm256_add_epi8(
        _mm256_shuffle_epi8(rule.times, d),
        _mm256_shuffle_epi8(rule.carry, dn),
    );
    let new = _mm256_blendv_epi8(v, digits, is_digit);
    let lead = _mm256_shuffle_epi8(rule.lead, d);
    let digit = _mm256_movemask_epi8(is_digit) as u32;
    let before = (digit << 1) | run.digit;
    run.digit = digit >> 31;
    // Ids whose first digit grows the number.
    let grown = _mm256_movemask_epi8(_mm256_shuffle_epi8(rule.grows, d)) as u32 & !before;
    run.digits += digit.count_ones() as usize;
    if N == 2 {
        let comma = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b',' as i8));
        let space_after = _mm256_cmpeq_epi8(next, _mm256_set1_epi8(b' ' as i8));
        run.spaced += (_mm256_movemask_epi8(_mm256_and_si256(comma, space_after)) as u32)
            .count_ones() as usize;
    }
    // Each 8 bytes with the digits to insert before them: lanes 0 and 2
    // in `low`, 1 and 3 in `high`.
    let low = _mm256_unpacklo_epi64(new, lead);
    let high = _mm256_unpackhi_epi64(new, lead);
    let parts = [
        _mm256_castsi256_si128(low),
        _mm256_castsi256_si128(high),
        _mm256_extracti128_si256::<1>(low),
        _mm256_extracti128_si256::<1>(high),
    ];
    let mut at = dst;
    for (j, part) in parts.into_iter().enumerate() {
        let m = (grown >> (8 * j)) & 0xff;
        // SAFETY: `m` < 256; the store is within the caller's room.
        unsafe {
            let spread = _mm_load_si128(SPREAD.0[m as usize].as_ptr().cast());
            _mm_storeu_si128(at.cast(), _mm_shuffle_epi8(part, spread));
            at = at.add(8 + m.count_ones() as usize);
        }
    }
    at
}

/// The ends of the ids (the index of each id's last digit) of an array,
/// in order, from the digit mask of one window of 64 bytes at a time.
#[cfg(target_arch = "x86_64")]
struct Ends<'a> {
    line: &'a [u8],
    /// The index of the array's `]`: no byte at or after it is an id's.
    close: usize,
    /// The start of the current window.
    w: usize,
    /// Bit i: `line[w + i]` is the last digit of an id not yet handed out.
    mask: u64,
}

#[cfg(target_arch = "x86_64")]
impl Ends<'_> {
    /// The next id's last digit, or `None` past the array (which a proven
    /// array with ids left to read never reaches).
    #[inline]
    #[target_feature(enable = "avx2,bmi1,bmi2")]
    unsafe fn next(&mut self) -> Option<usize> {
        while self.mask == 0 {
            self.w += 63;
            if self.w >= self.close {
                return None;
            }
            self.mask = unsafe { self.window() };
        }
        let e = self.w + self.mask.trailing_zeros() as usize;
        self.mask &= self.mask - 1;
        Some(e)
    }

    /// The ends in the window at `w`: bytes that are digits and whose next
    /// byte is not, among the first 63 (whether byte 63 ends an id depends
    /// on byte 64, so windows step by 63 and it is the next one's byte 0)
    /// and before the `]`.
    #[inline]
    #[target_feature(enable = "avx2,bmi1,bmi2")]
    unsafe fn window(&self) -> u64 {
        use std::arch::x86_64::*;
        // A window that would run past the line is loaded as the line's
        // last 64 bytes and shifted down to start at `w` (the bytes past
        // the line read as non-digits): every row's last window is one, and
        // copying it into a padded buffer cost a `memcpy` call a row.
        let len = self.line.len();
        let (from, shift) = match len - self.w {
            n if n >= 64 => (self.w, 0),
            _ if len >= 64 => (len - 64, self.w - (len - 64)),
            _ => return unsafe { self.short_window() },
        };
        let zero = _mm256_set1_epi8(b'0' as i8);
        let nine = _mm256_set1_epi8(9);
        let mut d = 0u64;
        for half in 0..2 {
            // SAFETY: bytes from..from+64 lie within the line.
            let v = unsafe { _mm256_loadu_si256(self.line.as_ptr().add(from + 32 * half).cast()) };
            let from_zero = _mm256_sub_epi8(v, zero);
            let digit = _mm256_cmpeq_epi8(_mm256_min_epu8(from_zero, nine), from_zero);
            d |= u64::from(_mm256_movemask_epi8(digit) as u32) << (32 * half);
        }
        let d = d >> shift;
        let before_close = match self.close - self.w {
            n if n >= 63 => (1u64 << 63) - 1,
            n => (1u64 << n) - 1,
        };
        d & !(d >> 1) & before_close
    }

    /// [`Ends::window`] on a line shorter than 64 bytes, a byte at a time.
    #[cold]
    unsafe fn short_window(&self) -> u64 {
        let mut d = 0u64;
        for (i, c) in self.line[self.w..self.close].iter().enumerate().take(63) {
            d |= u64::from(c.is_ascii_digit()) << i;
        }
        d & !(d >> 1) & ((1u64 << 63) - 1)
    }
}

/// [`namespace_fast`]'s loop, compiled for AVX2, BMI1, BMI2 and POPCNT.
///
/// Per group of four ids: each id's eight bytes that end at its last digit
/// are loaded into a lane; the bytes from the last non-digit down are
/// cleared (what is left is the id, zero-padded in front); pairs, quads and
/// halves are combined by multiply-adds into the value; `h*k + t` is one
/// multiply and one add; the value is split back into eight digits by
/// multiply-shifts on 32-, 16- and 8-bit lanes (as `ids::put_decimal`
/// does in one `u64`); each lane's leading zeros are counted from one
/// mask, and its digits stored as eight bytes, the next store overwriting
/// what is past its length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,popcnt")]
#[allow(clippy::too_many_arguments)]
unsafe fn namespace_avx2<const N: usize>(
    line: &[u8],
    open: usize,
    end: usize,
    count: usize,
    k: u64,
    t: u64,
    separator: &[u8; N],
    out: &mut Vec<u8>,
) -> bool {
    use std::arch::x86_64::*;
    // Each id takes at most 8 digits and a separator; the last store of
    // eight bytes may reach 8 past the last id's digits.
    let room = 2 + count * (8 + N) + 8;
    out.reserve(room);
    let base = out.len();
    // SAFETY: `reserve` made `room` bytes from `base` writable; every
    // store below stays within them (see `room`).
    let dst = unsafe { out.as_mut_ptr().add(base) };
    let mut ends = Ends {
        line,
        close: end - 1,
        w: open + 1,
        mask: 0,
    };
    ends.mask = unsafe { ends.window() };
    let zeros = _mm256_set1_epi8(b'0' as i8);
    let ten_thousand = _mm256_set1_epi64x(10_000);
    let kk = _mm256_set1_epi64x(k as i64);
    let tt = _mm256_set1_epi64x(t as i64);
    // ceil(2^40 / 10^4): (v * it) >> 40 is v / 10^4 for every v below 10^8
    // (the error term stays under 1 - 9999/10^4; a test checks the edges).
    let by_ten_thousand = _mm256_set1_epi64x(109_951_163);
    let by_hundred = _mm256_set1_epi32(10_486);
    let hundred = _mm256_set1_epi32(100);
    let by_ten = _mm256_set1_epi16(103);
    let ten = _mm256_set1_epi16(10);
    let sep = match N {
        1 => u16::from(separator[0]),
        _ => u16::from_le_bytes([separator[0], separator[N - 1]]),
    };
    // SAFETY: the first byte of the room.
    unsafe { dst.write(b'[') };
    let mut p = 1usize;
    let mut left = count;
    let base_ptr = line.as_ptr();
    while left > 0 {
        let take = left.min(4);
        let (e0, e1, e2, e3);
        if take == 4 && ends.mask.count_ones() >= 4 {
            // Four ends in the window: no test between them.
            let m0 = ends.mask;
            let m1 = m0 & (m0 - 1);
            let m2 = m1 & (m1 - 1);
            let m3 = m2 & (m2 - 1);
            ends.mask = m3 & (m3 - 1);
            let at = |m: u64| ends.w + m.trailing_zeros() as usize;
            (e0, e1, e2, e3) = (at(m0), at(m1), at(m2), at(m3));
        } else {
            // A short last group repeats its last id in the lanes it does not write.
            let Some(f0) = (unsafe { ends.next() }) else {
                return false;
            };
            let (mut f1, mut f2, mut f3) = (f0, f0, f0);
            if take > 1 {
                let Some(e) = (unsafe { ends.next() }) else {
                    return false;
                };
                (f1, f2, f3) = (e, e, e);
                if take > 2 {
                    let Some(e) = (unsafe { ends.next() }) else {
                        return false;
                    };
                    (f2, f3) = (e, e);
                    if take > 3 {
                        let Some(e) = (unsafe { ends.next() }) else {
                            return false;
                        };
                        f3 = e;
                    }
                }
            }
            (e0, e1, e2, e3) = (f0, f1, f2, f3);
        }
        // SAFETY: an end lies after `open` (at least 8), so e-7 >= 1, and
        // before the `]`, so e+1 <= line.len().
        let load = |at: usize| unsafe { base_ptr.add(at - 7).cast::<i64>().read_unaligned() };
        let v = _mm256_set_epi64x(load(e3), load(e2), load(e1), load(e0));
        let value = eight_digit_values(v);
        let r = _mm256_add_epi64(_mm256_mul_epu32(value, kk), tt);
        // Back to digits, the first in the lowest byte.
        let hi = _mm256_srli_epi64::<40>(_mm256_mul_epu32(r, by_ten_thousand));
        let lo = _mm256_sub_epi64(r, _mm256_mul_epu32(hi, ten_thousand));
        let x = _mm256_or_si256(hi, _mm256_slli_epi64::<32>(lo));
        let h = _mm256_srli_epi32::<20>(_mm256_mullo_epi32(x, by_hundred));
        let x = _mm256_or_si256(
            h,
            _mm256_slli_epi32::<16>(_mm256_sub_epi32(x, _mm256_mullo_epi32(h, hundred))),
        );
        let h = _mm256_srli_epi16::<10>(_mm256_mullo_epi16(x, by_ten));
        let x = _mm256_or_si256(
            h,
            _mm256_slli_epi16::<8>(_mm256_sub_epi16(x, _mm256_mullo_epi16(h, ten))),
        );
        let text = _mm256_add_epi8(x, zeros);
        // Bit 8i+j: byte j of lane i is not a leading `0` (the lane's last
        // byte always counts, so 0 is written `0`).
        let lead = !(_mm256_movemask_epi8(_mm256_cmpeq_epi8(text, zeros)) as u32) | 0x8080_8080;
        let low = _mm256_castsi256_si128(text);
        let high = _mm256_extracti128_si256::<1>(text);
        let lanes = [
            _mm_cvtsi128_si64(low) as u64,
            _mm_extract_epi64::<1>(low) as u64,
            _mm_cvtsi128_si64(high) as u64,
            _mm_extract_epi64::<1>(high) as u64,
        ];
        for (i, &lane) in lanes.iter().enumerate().take(take) {
            let skip = (lead >> (8 * i)).trailing_zeros() as usize;
            // SAFETY: p + 8 + N is within the room: at most `count` ids of
            // at most 8 digits and N separator bytes each come before.
            unsafe {
                dst.add(p).cast::<u64>().write_unaligned(lane >> (8 * skip));
                p += 8 - skip;
                dst.add(p).cast::<u16>().write_unaligned(sep);
            }
            p += N;
        }
        left -= take;
    }
    // The last separator becomes the `]`.
    p -= N;
    // SAFETY: within the room; every byte up to p + 1 was written.
    unsafe {
        dst.add(p).write(b']');
        out.set_len(base + p + 1);
    }
    true
}

/// Four ids' values, one a lane: each lane holds the eight bytes that end
/// with an id's last digit (little-endian, so the last digit is the top
/// byte); bytes at or below the lane's last non-digit are not the id's and
/// count as nothing. Ids of up to eight digits; the digits are paired by
/// multiply-adds (10, 1), then the pairs (100, 1), then the halves (10^4).
/// Shared by the renumbering here and `ids::decode_avx2`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn eight_digit_values(v: std::arch::x86_64::__m256i) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let d = _mm256_sub_epi8(v, _mm256_set1_epi8(b'0' as i8));
    let digit = _mm256_cmpeq_epi8(_mm256_min_epu8(d, _mm256_set1_epi8(9)), d);
    // Not part of the id: every byte at or below a non-digit.
    let mut cut = _mm256_xor_si256(digit, _mm256_set1_epi8(-1));
    cut = _mm256_or_si256(cut, _mm256_srli_epi64::<8>(cut));
    cut = _mm256_or_si256(cut, _mm256_srli_epi64::<16>(cut));
    cut = _mm256_or_si256(cut, _mm256_srli_epi64::<32>(cut));
    let d = _mm256_andnot_si256(cut, d);
    let pairs = _mm256_maddubs_epi16(d, _mm256_set1_epi16(0x010A));
    let quads = _mm256_madd_epi16(pairs, _mm256_set1_epi32(0x0001_0064));
    _mm256_add_epi64(
        _mm256_mul_epu32(quads, _mm256_set1_epi64x(10_000)),
        _mm256_srli_epi64::<32>(quads),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eight_digit_bound_is_exact() {
        assert!(fits_eight_digits(8, 1, 0));
        assert!(!fits_eight_digits(8, 2, 0));
        assert!(fits_eight_digits(7, 10, 9));
        assert!(!fits_eight_digits(7, 11, 0));
        assert!(!fits_eight_digits(9, 1, 0));
        assert!(!fits_eight_digits(usize::MAX, 1, 0));
        assert!(!fits_eight_digits(1, u64::MAX, 0));
    }

    #[test]
    fn the_division_by_ten_thousand_is_exact_below_ten_to_the_eight() {
        for v in (0..100_000_000u64)
            .step_by(9_973)
            .chain((0..10_000).map(|q| q * 10_000 + 9_999))
            .chain([99_999_999])
        {
            assert_eq!((v * 109_951_163) >> 40, v / 10_000, "{v}");
        }
    }

    fn avx2() -> bool {
        #[cfg(target_arch = "x86_64")]
        return std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("bmi1")
            && std::is_x86_feature_detected!("bmi2");
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    proptest::proptest! {
        /// The four-at-a-time path writes what the one-id-at-a-time rewrite
        /// (`map_hash_ids`, held to decode-map-write by its own test)
        /// writes, and what the rule says by hand: any spacing the walk
        /// takes, any number of ids (groups of four and a partial last one,
        /// windows of 64 bytes crossed anywhere), the array anywhere in the
        /// line, digits right after it; ids up to 8 digits, new ids up to
        /// and past 8 (where it must leave the array to the other path).
        #[test]
        fn four_at_a_time_writes_what_one_at_a_time_writes(
            ids in proptest::collection::vec(proptest::prop_oneof![
                0u64..10, 0u64..1000, 0u64..10_000_000, 0u64..100_000_000], 1..120),
            seps in proptest::collection::vec(proptest::prop_oneof![
                proptest::strategy::Just(", "), proptest::strategy::Just(","),
                proptest::strategy::Just(" , "), proptest::strategy::Just(",\n\t"),
                proptest::strategy::Just(" ,")], 1..3),
            lead in 0usize..70,
            k in proptest::prop_oneof![1u64..5, 1u64..20],
            t_frac in 0u64..1000,
            tail in proptest::prop_oneof![
                proptest::strategy::Just("}"), proptest::strategy::Just(", \"x\": 12345678}"),
                proptest::strategy::Just(", \"input_length\": 99999999}")],
        ) {
            let t = t_frac % k;
            let mut array = String::from("[");
            for (n, id) in ids.iter().enumerate() {
                if n > 0 {
                    array.push_str(seps[n % seps.len()]);
                }
                array.push_str(&id.to_string());
            }
            array.push(']');
            let line = format!("{{\"x\": \"{}\", \"hash_ids\": {array}{tail}", "y".repeat(lead));
            let rec = crate::record::Record::parse(line.as_bytes()).unwrap();
            let overflow = |h| crate::error::RecordError::field("hash_ids", format!("{h}"));
            let mut fast = b"kept".to_vec();
            let n = rec.namespace_hash_ids(&mut fast, (k, t), overflow).unwrap();
            let mut slow = b"kept".to_vec();
            rec.map_hash_ids(&mut slow, |h| namespace_id(h, k, t).ok_or_else(|| overflow(h))).unwrap();
            proptest::prop_assert_eq!(n, Some(ids.len()));
            proptest::prop_assert_eq!(String::from_utf8_lossy(&fast), String::from_utf8_lossy(&slow));
            // By hand: the separator is `,` when no `, ` was written.
            let sep = if array.contains(", ") { ", " } else { "," };
            let by_hand: Vec<String> = ids.iter().map(|h| (h * k + t).to_string()).collect();
            let by_hand = format!("kept[{}]", by_hand.join(sep));
            proptest::prop_assert_eq!(String::from_utf8_lossy(&fast), by_hand);
            // The fast path itself took every array it can take.
            let span = rec.span(crate::record::Field::HashIds).unwrap();
            let longest = ids.iter().map(|h| h.to_string().len()).max().unwrap();
            let mut direct = Vec::new();
            let taken = if sep == "," {
                namespace_fast(line.as_bytes(), (span.start, span.end), (ids.len(), longest), (k, t), b",", &mut direct)
            } else {
                namespace_fast(line.as_bytes(), (span.start, span.end), (ids.len(), longest), (k, t), b", ", &mut direct)
            };
            // Two or five files take the textual path when the spacing is
            // the separator throughout and the `]` is not in the first 32
            // bytes; the rest the four-lane path, when the new ids fit.
            let uniform = (1..ids.len()).all(|n| seps[n % seps.len()] == sep);
            let textual = matches!(k, 2 | 5) && uniform && span.end > 32;
            proptest::prop_assert_eq!(taken, avx2() && (textual || fits_eight_digits(longest, k, t)));
            if taken {
                proptest::prop_assert_eq!(&direct[..], &fast[4..]);
            } else {
                proptest::prop_assert!(direct.is_empty());
            }
        }
    }

    /// Ids at the edges of the textual rule: every power of ten and its
    /// neighbours, 2 and 5 times them (where a first digit starts to grow
    /// the number for 5 and for 2), up to 20 digits.
    fn edge_id() -> impl proptest::strategy::Strategy<Value = u64> {
        use proptest::prelude::*;
        (0u32..20, 1u64..10, 0u64..3, any::<bool>()).prop_map(|(e, lead, off, up)| {
            let p = 10u64.pow(e).saturating_mul(lead);
            if up {
                p.saturating_add(off)
            } else {
                p.saturating_sub(off)
            }
        })
    }

    proptest::proptest! {
        /// The textual path (two or five files) writes `h*k + t` for every
        /// id it takes, takes every array spaced by the separator alone
        /// whose `]` is not in the line's first 32 bytes and whose ids have
        /// at most 18 digits, and refuses any other spacing and any longer
        /// id (19-20 digits, where the rule may overflow and the other
        /// paths refuse by value): ids at the edges of each digit count,
        /// one digit to 20, near `u64::MAX`; `,` and `, `; blocks of 32
        /// bytes ending anywhere in the array.
        #[test]
        fn two_and_five_files_are_rewritten_as_text(
            ids in proptest::collection::vec(proptest::prop_oneof![
                edge_id(), 0u64..10, 0u64..1_000_000, 0u64..1_000_000_000_000_000_000,
                (u64::MAX - 20)..=u64::MAX], 1..60),
            compact in proptest::bool::ANY,
            // Up to three separators spaced otherwise (two can keep the
            // count of non-digits: `,  ` and `,`).
            odd in proptest::collection::vec((0usize..60, proptest::prop_oneof![
                proptest::strategy::Just(" ,"), proptest::strategy::Just(",  "),
                proptest::strategy::Just(", "), proptest::strategy::Just(","),
                proptest::strategy::Just(",\t"), proptest::strategy::Just(" , ")]), 0..4),
            lead in 0usize..70,
            five in proptest::bool::ANY,
            t_frac in 0u64..1000,
        ) {
            if !avx2() {
                return Ok(());
            }
            let k = if five { 5 } else { 2 };
            let t = t_frac % k;
            let sep = if compact { "," } else { ", " };
            let mut array = String::from("[");
            let mut uniform = true;
            for (n, id) in ids.iter().enumerate() {
                if n > 0 {
                    match odd.iter().find(|(at, _)| *at == n) {
                        Some((_, other)) => {
                            uniform &= *other == sep;
                            array.push_str(other);
                        }
                        None => array.push_str(sep),
                    }
                }
                array.push_str(&id.to_string());
            }
            array.push(']');
            let line = format!("{{\"x\": \"{}\", \"hash_ids\": {array}}}", "y".repeat(lead));
            let open = line.find('[').unwrap();
            let end = line.len() - 1;
            let longest = ids.iter().map(|h| h.to_string().len()).max().unwrap();
            let mut out = b"kept".to_vec();
            // SAFETY: the CPU has the features (`avx2()`).
            let taken = unsafe {
                if compact {
                    textual::<1>(line.as_bytes(), open, end, ids.len(), k, t, &mut out)
                } else {
                    textual::<2>(line.as_bytes(), open, end, ids.len(), k, t, &mut out)
                }
            };
            let by_rule: Option<Vec<String>> =
                ids.iter().map(|&h| namespace_id(h, k, t).map(|v| v.to_string())).collect();
            let fits = longest <= TEXTUAL_MAX_DIGITS;
            if fits {
                // The callers send it only ids of at most 18 digits.
                proptest::prop_assert_eq!(taken, uniform && end > 32);
                if taken {
                    let by_rule = by_rule.as_ref().expect("18-digit ids times 5 fit 64 bits");
                    proptest::prop_assert_eq!(
                        String::from_utf8_lossy(&out),
                        format!("kept[{}]", by_rule.join(sep))
                    );
                } else {
                    proptest::prop_assert_eq!(&out[..], b"kept");
                }
            }
            // Through the entry the tools call: what the rule says, or the
            // overflow error when an id's new value does not fit.
            let rec = crate::record::Record::parse(line.as_bytes()).unwrap();
            let overflow = |h| crate::error::RecordError::field("hash_ids", format!("{h}"));
            let mut fast = Vec::new();
            let got = rec.namespace_hash_ids(&mut fast, (k, t), overflow);
            match by_rule {
                Some(new) => {
                    proptest::prop_assert!(got.is_ok());
                    let written = if array.contains(", ") { ", " } else { "," };
                    proptest::prop_assert_eq!(
                        String::from_utf8_lossy(&fast),
                        format!("[{}]", new.join(written))
                    );
                }
                None => proptest::prop_assert!(got.is_err()),
            }
        }
    }

    #[test]
    fn textual_digits_carry_by_the_next_digit_alone() {
        // Worked by hand: 2 * 4999 + 1 = 9999, 2 * 5000 + 1 = 10001,
        // 2 * 0 + 1 = 1; 5 * 1999 + 3 = 9998, 5 * 2000 + 3 = 10003,
        // 5 * 9 + 3 = 48.
        let cases: [(u64, u64, &str, &str); 2] = [
            (2, 1, "4999, 5000, 0", "[9999, 10001, 1]"),
            (5, 3, "1999,2000,9", "[9998,10003,48]"),
        ];
        for (k, t, ids, want) in cases {
            let line = format!("{{\"x\": \"{}\", \"hash_ids\": [{ids}]}}", "y".repeat(40));
            let open = line.find('[').unwrap();
            let mut out = Vec::new();
            if !avx2() {
                return;
            }
            // SAFETY: the CPU has the features (`avx2()`).
            let taken = unsafe {
                if ids.contains(' ') {
                    textual::<2>(line.as_bytes(), open, line.len() - 1, 3, k, t, &mut out)
                } else {
                    textual::<1>(line.as_bytes(), open, line.len() - 1, 3, k, t, &mut out)
                }
            };
            assert!(taken);
            assert_eq!(String::from_utf8(out).unwrap(), want);
        }
        // `,  ` and `,` hold as many non-digits as two `, `: refused, as
        // are a space before a comma and one at the ends.
        for ids in ["1,  2,3", "1 ,2, 3", " 1, 2,3", "1,2, 3 "] {
            let line = format!("{{\"x\": \"{}\", \"hash_ids\": [{ids}]}}", "y".repeat(40));
            let open = line.find('[').unwrap();
            let mut out = Vec::new();
            // SAFETY: the CPU has the features (`avx2()`, above).
            let taken =
                unsafe { textual::<2>(line.as_bytes(), open, line.len() - 1, 3, 2, 0, &mut out) };
            assert!(!taken && out.is_empty(), "{ids}");
        }
    }

    #[test]
    fn every_digit_count_is_written_whole() {
        // Each new id of 1 to 8 digits, the powers of ten and their
        // neighbours, in groups that end at every lane.
        let ids: Vec<u64> = (0..8)
            .flat_map(|e| {
                let p = 10u64.pow(e);
                [p - 1, p, p + 1]
            })
            .chain([0, 99_999_999])
            .collect();
        for n in 1..=ids.len() {
            let ids = &ids[..n];
            let text: Vec<String> = ids.iter().map(u64::to_string).collect();
            let line = format!("{{\"hash_ids\": [{}]}}", text.join(", "));
            let mut out = Vec::new();
            let taken = namespace_fast(
                line.as_bytes(),
                (13, line.len() - 1),
                (n, 8),
                (1, 0),
                b", ",
                &mut out,
            );
            assert_eq!(taken, avx2());
            if taken {
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    format!("[{}]", text.join(", "))
                );
            }
        }
    }
}
