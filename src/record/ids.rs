//! Arrays of block ids (`hash_ids`). One walker over `[1, 2, 3]` serves the
//! scanner's fast path (find the end, count), the shape of an array the
//! scanner did not classify, and decoding: the rule of what an id array is
//! lives here once.

use super::shorten;

/// What a single pass over an id array tells without decoding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdArrayShape {
    pub count: usize,
    /// Digits of the longest id, to rule out large ids without decoding.
    pub longest_digits: usize,
}

#[inline]
fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// The number of ASCII digits `b` starts with, eight bytes at a time.
///
/// A byte `c` is a digit when its high nibble is 3 and so is that of
/// `c + 6` (which carries `:`..`?` into 4). Both tests run on eight bytes
/// in one `u64`; the first byte that fails is the lowest set byte. The add
/// can carry between bytes only out of a byte of 0xFA or more, which is not
/// a digit, and a carry only reaches later bytes, so the first non-digit is
/// always found exactly.
#[inline]
pub(super) fn digit_run(b: &[u8]) -> usize {
    let mut k = 0;
    while let Some(chunk) = b[k..].first_chunk::<8>() {
        let not_digit = not_digits(u64::from_le_bytes(*chunk));
        if not_digit != 0 {
            return k + (not_digit.trailing_zeros() / 8) as usize;
        }
        k += 8;
    }
    k + b[k..].iter().take_while(|c| c.is_ascii_digit()).count()
}

/// Nonzero bits in the bytes of `x` that are not ASCII digits (see
/// [`digit_run`]; only the lowest flagged byte is sure to be exact).
#[inline]
pub(super) fn not_digits(x: u64) -> u64 {
    const HIGH_NIBBLES: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const THREES: u64 = 0x3030_3030_3030_3030;
    const SIXES: u64 = 0x0606_0606_0606_0606;
    ((x & HIGH_NIBBLES) ^ THREES) | ((x.wrapping_add(SIXES) & HIGH_NIBBLES) ^ THREES)
}

/// Walks a JSON array of plain non-negative integers from `i`, just after
/// its `[`, calling `each` with every id's digits. Returns the
/// index just after the `]` and the array's shape, or `Err` with the index
/// of the first byte that does not belong to such an array. What that byte
/// means is the caller's to judge: the scanner falls back to its general
/// path (the array may be valid JSON of another kind), the decoder names
/// the element.
///
/// This is the hot loop of every tool (`hash_ids` is most of a Mooncake
/// line), so it is one tight pass that only finds the digits: the
/// decoders turn them into values (accumulating them here cost the
/// scanner, which ignores them, 3% of its instructions), and digits are
/// found eight at a time ([`digit_run`]). It is kept out of line so its
/// loops sit where its own code puts them: inlined into the scanner, the
/// same instructions ran up to 1.9x slower in one build than in another,
/// depending on where the code around them placed the loop
/// (`docs/ARCHITECTURE.md`, section 5).
#[inline(never)]
pub(crate) fn walk(
    b: &[u8],
    i: usize,
    mut each: impl FnMut(&[u8]),
) -> Result<(usize, IdArrayShape), usize> {
    let n = b.len();
    let mut shape = IdArrayShape::default();
    let mut i = skip_ws(b, i);
    if i < n && b[i] == b']' {
        return Ok((i + 1, shape));
    }
    loop {
        // Mooncake traces write `[1, 2]`: spaces before an id and a comma
        // right after it are the path every element takes, so they are
        // tested first; other JSON whitespace is handled off that path
        // (testing for it on every element cost the scanner 10% of its
        // instructions, measured with cachegrind on a 64 MB trace).
        while i < n && b[i] == b' ' {
            i += 1;
        }
        let start = i;
        i += digit_run(&b[i..]);
        if i == start {
            if matches!(b.get(i), Some(b'\t' | b'\n' | b'\r')) {
                i = skip_ws(b, i);
                continue;
            }
            return Err(start);
        }
        // A leading zero (`01` is not JSON).
        if b[start] == b'0' && i - start > 1 {
            return Err(start);
        }
        each(&b[start..i]);
        shape.count += 1;
        shape.longest_digits = shape.longest_digits.max(i - start);
        if b.get(i) == Some(&b',') {
            i += 1;
            continue;
        }
        i = skip_ws(b, i);
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b']') => return Ok((i + 1, shape)),
            _ => return Err(i),
        }
    }
}

/// The end and shape of the id array from `i` (just after its `[`), as
/// [`walk`] gives them without the digits: the fast path when the array
/// is in the form it takes, else the walk.
#[inline]
pub(crate) fn measure(b: &[u8], i: usize) -> Result<(usize, IdArrayShape), usize> {
    match walk_fast(b, i) {
        Some(found) => Ok(found),
        None => walk(b, i, |_| {}),
    }
}

/// The longest id the fast path measures; a longer one sends the array to
/// [`walk`] (such ids are rare, and the ladder below costs a step a digit).
const FAST_MAX_DIGITS: usize = 8;

/// [`walk`] for the form Mooncake traces write, 64 bytes at a time: from
/// `i`, just after the `[`, ids of 1 to [`FAST_MAX_DIGITS`] digits without
/// leading zeros, separated by `,` or `, `, then `]`. Returns what `walk`
/// returns for such an array, or `None` for anything else (`[]`, other
/// spacing, long ids, anything invalid): the caller then runs [`walk`],
/// which decides, so this path only has to be right about what it accepts
/// (a property test holds it to `walk` on generated and mutated arrays).
///
/// Each 64-byte window is classified into bit masks (one bit a byte:
/// digit, comma, space, `0`; [`classify`]) and the grammar is checked on
/// the masks: a comma follows a digit, a space follows a comma, a `0` that
/// starts an id is not followed by a digit, the first byte that is none of
/// these is the `]` and follows a digit. The ids are the commas plus one;
/// the longest is found by a ladder of masks (bytes that are at least the
/// k-th digit of their id). Walking id by id, the scanner spent 62
/// instructions an id, this path 31 (cachegrind, 16 MB generated trace;
/// docs/decisions/0029-ids-scanned-sixty-four-bytes.md).
///
/// On a CPU with AVX2 (and POPCNT and BMI1, which every AVX2 CPU has)
/// the same loop is compiled for them and the windows are classified 32
/// bytes at a time: the check costs one test of a cached flag a call,
/// and cachegrind counted 2.9 instructions a byte of input for the
/// SSE2 loop, 1.7 for this one (docs/decisions/0036-one-pass-plain-lines.md).
/// Inlined: the choice of loop is one load and a test, where the call was
/// 27 instructions a row (cachegrind, decision 0039).
#[inline]
pub(crate) fn walk_fast(b: &[u8], i: usize) -> Option<(usize, IdArrayShape)> {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { walk_fast_avx2(b, i) };
    }
    walk_fast_with::<Baseline>(b, i, |_, _| {})
}

/// [`walk_fast`] that also decodes the ids into `out` (cleared first) as
/// it walks them, where the CPU has AVX2: the third value is then true
/// and `out` holds the array's ids, what [`decode`] gives for it. False
/// (and `out` left for the caller to fill) on other CPUs and for an array
/// whose `[` is before byte 7 of `b` (the loads reach seven bytes before
/// an id). The walk already has each window's digit mask, so the ids'
/// ends cost a shift and an AND there, where a separate decode classified
/// every window again (mc-analyze; decision 0051's last section). On
/// `None`, `out` may hold a part of the ids.
// Always inlined: a call of its own was about 40 instructions a row
// (cachegrind, mc-analyze).
#[inline(always)]
pub(crate) fn walk_fast_decoding(
    b: &[u8],
    i: usize,
    out: &mut Vec<u64>,
) -> Option<(usize, IdArrayShape, bool)> {
    out.clear();
    #[cfg(target_arch = "x86_64")]
    if i >= 8 && has_avx2() {
        // SAFETY: the CPU has the features the function is compiled for,
        // and the `[` is at byte 7 or later.
        return unsafe { walk_fast_avx2_decoding(b, i, out) }.map(|(end, s)| (end, s, true));
    }
    walk_fast(b, i).map(|(end, s)| (end, s, false))
}

/// Whether the CPU has AVX2, POPCNT and BMI1, asked once: one load a call
/// where the three detections were three (cachegrind: the call to
/// `walk_fast` was 37 instructions before its loop).
#[cfg(target_arch = "x86_64")]
#[inline]
fn has_avx2() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    // 0: not asked yet; 1: no; 2: yes.
    static KNOWN: AtomicU8 = AtomicU8::new(0);
    match KNOWN.load(Ordering::Relaxed) {
        0 => {
            let yes = std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("popcnt")
                && std::is_x86_feature_detected!("bmi1");
            KNOWN.store(1 + u8::from(yes), Ordering::Relaxed);
            yes
        }
        known => known == 2,
    }
}

/// [`walk_fast`] compiled for AVX2, POPCNT and BMI1.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt,bmi1")]
fn walk_fast_avx2(b: &[u8], i: usize) -> Option<(usize, IdArrayShape)> {
    walk_fast_with::<Avx2>(b, i, |_, _| {})
}

/// [`walk_fast_avx2`] storing each window's ids into `out` as it is
/// walked ([`store_window_ids`]). Safety: the CPU has AVX2, POPCNT and
/// BMI1, and `i >= 8` (every id ends at `i` or later, so the eight bytes
/// that end at it start within `b`). On `None`, `out` holds a part of
/// the array's ids.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt,bmi1")]
unsafe fn walk_fast_avx2_decoding(
    b: &[u8],
    i: usize,
    out: &mut Vec<u64>,
) -> Option<(usize, IdArrayShape)> {
    walk_fast_with::<Avx2>(b, i, |p, ends| {
        // SAFETY: the walk hands out ends of ids of at most eight digits
        // that lie within `b` at `i` or later (so at 8 or later).
        unsafe { store_window_ids(b, p, ends, out) }
    })
}

/// A way to classify a window: the target's baseline or AVX2.
trait Classify {
    fn classify(w: &[u8; 64]) -> Classes;
}

/// SSE2 on x86_64, a byte at a time elsewhere ([`classify`]).
struct Baseline;

impl Classify for Baseline {
    #[inline(always)]
    fn classify(w: &[u8; 64]) -> Classes {
        classify(w)
    }
}

/// Only called from code compiled for AVX2 ([`walk_fast_avx2`]).
#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Classify for Avx2 {
    #[inline(always)]
    fn classify(w: &[u8; 64]) -> Classes {
        // SAFETY: `Avx2` is used only by `walk_fast_avx2`, which runs on
        // a CPU with AVX2.
        unsafe { classify_avx2(w) }
    }
}

/// The body of [`walk_fast`], for each way to classify.
///
/// Each window after the first starts just after the last byte of the
/// window before that is not a digit, so no id is cut by a window's start
/// (an id cut by a window's end is looked at again, whole, in the next):
/// the byte before a window is then a `,` or a space (or the `[`), never a
/// digit, and the ladder that measures ids needs no carries from window
/// to window. An id of more than [`FAST_MAX_DIGITS`] digits ends the fast
/// path, so a window moves on by at least 64 − 8 bytes.
///
/// `ends(p, mask)` is called with each window's ids as they are proven:
/// bit k of `mask` set when `b[p + k]` is the last digit of an id (each
/// id once, whole in the window's bytes, after the window's checks
/// passed; an id cut by the window's end is handed out with the next
/// window). The scan passes a closure that does nothing, which the
/// compiler removes with the masks it would have read.
#[inline(always)]
fn walk_fast_with<C: Classify>(
    b: &[u8],
    i: usize,
    mut ends: impl FnMut(usize, u64),
) -> Option<(usize, IdArrayShape)> {
    let mut p = i;
    // Whether the byte before the window is a comma.
    let mut prev_c = 0u64;
    let mut commas = 0usize;
    let mut longest = 0usize;
    loop {
        let rest = b.get(p..)?;
        let m = match rest.first_chunk::<64>() {
            Some(w) => C::classify(w),
            None if !rest.is_empty() && b.len() >= 64 => {
                // The last bytes: the window that ends where `b` ends,
                // shifted down so its first byte is `b[p]`; the bits
                // shifted in above `b`'s end are no class, as NULs would
                // be, and stop the array where the line stops.
                let w = b.last_chunk::<64>()?;
                C::classify(w).shifted_down(64 - rest.len() as u32)
            }
            None => {
                // A line shorter than a window: padded with NULs.
                let mut w = [0u8; 64];
                w[..rest.len()].copy_from_slice(rest);
                C::classify(&w)
            }
        };
        let after_d = m.digit << 1;
        let after_c = (m.comma << 1) | prev_c;
        let other = !(m.digit | m.comma | m.space);
        // Bits below the first byte of no class: the window's part of the array.
        let inside = if other == 0 {
            !0
        } else {
            (1u64 << other.trailing_zeros()) - 1
        };
        let zero_start = m.zero & !after_d;
        let bad = (m.comma & !after_d) | (m.space & !after_c) | (m.digit & (zero_start << 1));
        if bad & inside != 0 {
            return None;
        }
        let d = m.digit & inside;
        commas += (m.comma & inside).count_ones() as usize;
        longest = longest.max(longest_run(d)?);
        if other != 0 {
            let e = other.trailing_zeros();
            let end = p + e as usize;
            if b.get(end) != Some(&b']') || (after_d >> e) & 1 == 0 {
                return None;
            }
            ends(p, d & !(d >> 1));
            let shape = IdArrayShape {
                count: commas + 1,
                longest_digits: longest,
            };
            return Some((end + 1, shape));
        }
        // The digits that end the window (at most FAST_MAX_DIGITS, or the
        // ladder stopped) start the next one.
        let cut = (!m.digit).leading_zeros();
        // The ids that end below the cut (`cut` is at most 8, the ladder
        // having passed).
        ends(p, d & !(d >> 1) & (!0u64 >> cut));
        prev_c = (m.comma >> (63 - cut)) & 1;
        p += 64 - cut as usize;
    }
}

/// The longest run of set bits in `d` (the longest id of a window, in
/// digits), or `None` when it is longer than [`FAST_MAX_DIGITS`]: by
/// halves, runs of 2, 4 and 8 first, then the one step between. A ladder
/// of one step a digit (`level &= level << 1` until empty) was ~30
/// instructions a window for the trace's ids of 5-7 digits, this ~20
/// (cachegrind, decision 0039).
#[inline(always)]
fn longest_run(d: u64) -> Option<usize> {
    const _: () = assert!(FAST_MAX_DIGITS == 8);
    // `rk`: bit j set when bits j, j-1, …, j-k+1 all are (a run of k ends there).
    let r2 = d & (d << 1);
    if r2 == 0 {
        return Some(usize::from(d != 0));
    }
    let r4 = r2 & (r2 << 2);
    if r4 == 0 {
        let r3 = r2 & (d << 2);
        return Some(2 + usize::from(r3 != 0));
    }
    let r8 = r4 & (r4 << 4);
    if r8 != 0 {
        let r9 = r8 & (d << 8);
        return (r9 == 0).then_some(8);
    }
    let r6 = r4 & (r2 << 4);
    if r6 != 0 {
        let r7 = r6 & (d << 6);
        return Some(6 + usize::from(r7 != 0));
    }
    let r5 = r4 & (d << 4);
    Some(4 + usize::from(r5 != 0))
}

/// One bit a byte of a 64-byte window, the first byte in the lowest bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Classes {
    digit: u64,
    comma: u64,
    space: u64,
    /// `0` (also in `digit`).
    zero: u64,
}

impl Classes {
    /// The classes of the window `by` bytes further on (1 to 63), the
    /// bytes past the end of this one of no class.
    #[inline(always)]
    fn shifted_down(self, by: u32) -> Classes {
        Classes {
            digit: self.digit >> by,
            comma: self.comma >> by,
            space: self.space >> by,
            zero: self.zero >> by,
        }
    }
}

/// The classes of 64 bytes, sixteen at a time with SSE2 (every x86_64 CPU
/// has it): per 16 bytes one load, five compares and four mask moves.
#[cfg(target_arch = "x86_64")]
#[inline]
fn classify(w: &[u8; 64]) -> Classes {
    // SAFETY: SSE2 is part of the x86_64 baseline, so the target feature
    // the function asks for is always there.
    unsafe { classify_sse2(w) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn classify_sse2(w: &[u8; 64]) -> Classes {
    use std::arch::x86_64::*;
    let zero = _mm_set1_epi8(b'0' as i8);
    let nine = _mm_set1_epi8(9);
    let comma = _mm_set1_epi8(b',' as i8);
    let space = _mm_set1_epi8(b' ' as i8);
    let mut m = Classes::default();
    for k in 0..4 {
        // SAFETY: bytes 16k..16k+16 lie within `w`; the load takes any alignment.
        let v = unsafe { _mm_loadu_si128(w.as_ptr().add(16 * k).cast()) };
        // A digit is a byte whose distance from `0`, wrapping, is at most 9.
        let from_zero = _mm_sub_epi8(v, zero);
        let digit = _mm_cmpeq_epi8(_mm_min_epu8(from_zero, nine), from_zero);
        let bits = |x: __m128i| u64::from(_mm_movemask_epi8(x) as u16) << (16 * k);
        m.digit |= bits(digit);
        m.comma |= bits(_mm_cmpeq_epi8(v, comma));
        m.space |= bits(_mm_cmpeq_epi8(v, space));
        m.zero |= bits(_mm_cmpeq_epi8(v, zero));
    }
    m
}

/// The classes of 64 bytes, thirty-two at a time with AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn classify_avx2(w: &[u8; 64]) -> Classes {
    use std::arch::x86_64::*;
    let zero = _mm256_set1_epi8(b'0' as i8);
    let nine = _mm256_set1_epi8(9);
    let comma = _mm256_set1_epi8(b',' as i8);
    let space = _mm256_set1_epi8(b' ' as i8);
    let mut m = Classes::default();
    for k in 0..2 {
        // SAFETY: bytes 32k..32k+32 lie within `w`; the load takes any alignment.
        let v = unsafe { _mm256_loadu_si256(w.as_ptr().add(32 * k).cast()) };
        let from_zero = _mm256_sub_epi8(v, zero);
        let digit = _mm256_cmpeq_epi8(_mm256_min_epu8(from_zero, nine), from_zero);
        let bits = |x: __m256i| u64::from(_mm256_movemask_epi8(x) as u32) << (32 * k);
        m.digit |= bits(digit);
        m.comma |= bits(_mm256_cmpeq_epi8(v, comma));
        m.space |= bits(_mm256_cmpeq_epi8(v, space));
        m.zero |= bits(_mm256_cmpeq_epi8(v, zero));
    }
    m
}

/// The classes of 64 bytes, a byte at a time (targets without SSE2 code here).
#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn classify(w: &[u8; 64]) -> Classes {
    let mut m = Classes::default();
    for (k, &c) in w.iter().enumerate() {
        m.digit |= u64::from(c.is_ascii_digit()) << k;
        m.comma |= u64::from(c == b',') << k;
        m.space |= u64::from(c == b' ') << k;
        m.zero |= u64::from(c == b'0') << k;
    }
    m
}

/// Reads the id array that starts at `b[i]` (its `[`), appending its ids
/// to `out`: arrays `walk` takes whose ids have at most 19 digits (so
/// none can overflow; serde reads exactly these as `Vec<u64>`, to the same
/// values). Returns the index just after the `]`, or `None` when no such
/// array is there (what is, is the caller's to judge; `out` may then hold
/// a part of it). For an array inside a line that is not a record's
/// `hash_ids` (mc-import's RAGPulse component lists).
pub fn read_id_array(b: &[u8], i: usize, out: &mut Vec<u64>) -> Option<usize> {
    if b.get(i) != Some(&b'[') {
        return None;
    }
    // Wrapping: a longer id is refused below, whatever its value.
    let value = |digits: &[u8]| {
        digits.iter().fold(0u64, |v, &d| {
            v.wrapping_mul(10).wrapping_add(u64::from(d - b'0'))
        })
    };
    let (end, shape) = walk(b, i + 1, |digits| out.push(value(digits))).ok()?;
    (shape.longest_digits <= 19).then_some(end)
}

/// The element of the array `raw` around byte `at`, for messages.
fn element_at(raw: &[u8], at: usize) -> &[u8] {
    let at = at.min(raw.len());
    let start = raw[..at]
        .iter()
        .rposition(|&c| c == b',' || c == b'[')
        .map_or(0, |p| p + 1);
    let end = raw[at..]
        .iter()
        .position(|&c| c == b',')
        .map_or(raw.len().saturating_sub(1), |p| at + p);
    raw[start..end.max(start)].trim_ascii()
}

fn not_ids(raw: &[u8], at: usize) -> String {
    match element_at(raw, at) {
        [] => "expected an array of non-negative integers".to_string(),
        e => format!("expected non-negative integer ids, found {}", shorten(e)),
    }
}

fn expect_array(raw: &[u8]) -> Result<(), String> {
    if raw.first() == Some(&b'[') {
        Ok(())
    } else {
        Err(format!("expected an array, found {}", shorten(raw)))
    }
}

/// The shape of an id array (validated as JSON by the scanner), rejecting
/// anything but non-negative integers.
pub fn id_array_shape(raw: &[u8]) -> Result<IdArrayShape, String> {
    expect_array(raw)?;
    measure(raw, 1)
        .map(|(_, shape)| shape)
        .map_err(|at| not_ids(raw, at))
}

/// Decodes an id array into `out` (appending). `shape` is what the scanner
/// already proved of it: when every id is at most 19 digits (so none can
/// overflow u64), the digits are accumulated in one unchecked pass, the
/// fast path mc-roots and mc-analyze live on (`scripts/bench-filters.sh`
/// measured mc-roots 6–28% slower with the checking walker); otherwise the
/// walker decodes and names what is wrong.
///
/// Kept out of line: on AVX2 it is the path of arrays [`decode_in`] does
/// not take, and inlined into `Record::map_hash_ids` (after `decode_in`
/// left it one caller fewer) it made mc-roots' row 8 instructions longer
/// (cachegrind, decision 0051).
#[inline(never)]
pub(crate) fn decode(
    raw: &[u8],
    shape: Option<IdArrayShape>,
    out: &mut Vec<u64>,
) -> Result<(), String> {
    expect_array(raw)?;
    if let Some(s) = shape.filter(|s| s.longest_digits <= 19) {
        decode_proven(raw, s.count, out);
        return Ok(());
    }
    let mut too_big = false;
    let walked = walk(raw, 1, |digits| {
        out.push(super::parse_uint(digits).unwrap_or_else(|| {
            too_big = true;
            0
        }));
    });
    match walked {
        Err(at) => Err(not_ids(raw, at)),
        Ok(_) if too_big => Err("an id does not fit in 64 bits".to_string()),
        Ok(_) => Ok(()),
    }
}

/// [`decode`] of the id array `line[open..end]` (its `[` to its `]`),
/// given the whole line the scan read it in: an array the scan proved
/// (`shape`) whose ids have at most eight digits is decoded four ids at a
/// time on AVX2 ([`decode_avx2`]), which loads the eight bytes that end at
/// each id and may reach up to seven bytes before the `[`, so it needs the
/// line, not only the array. Anything else is [`decode`]'s, which is the
/// reference the fast path is tested against.
pub(crate) fn decode_in(
    line: &[u8],
    (open, end): (usize, usize),
    shape: Option<IdArrayShape>,
    out: &mut Vec<u64>,
) -> Result<(), String> {
    let raw = line.get(open..end).unwrap_or_default();
    #[cfg(target_arch = "x86_64")]
    if let Some(s) = shape {
        if s.count > 0
            && s.longest_digits <= 8
            && open >= 7
            && raw.first() == Some(&b'[')
            && raw.last() == Some(&b']')
            && has_avx2()
        {
            // SAFETY: the CPU has the features the function is compiled
            // for; the checks above are its preconditions.
            if unsafe { decode_avx2(line, open, end, s.count, out) } {
                return Ok(());
            }
        }
    }
    decode(raw, shape, out)
}

/// The last digits of the ids of a proven array in the 64-byte window at
/// `w`, as bits (bit i: `line[w + i]`): bytes that are digits and whose
/// next byte is not, among the first 63 (whether byte 63 ends an id
/// depends on byte 64, so windows step by 63 and it is the next one's
/// byte 0) and before `close`, the array's `]`. Two AVX2 compares a
/// window.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,bmi1")]
fn id_ends(line: &[u8], w: usize, close: usize) -> u64 {
    const FIRST_63: u64 = (1 << 63) - 1;
    if close - w >= 64 {
        // A window inside the array (every one but a row's last): no
        // shift, no cut at the `]`.
        let d = digits_avx2(line, w);
        return d & !(d >> 1) & FIRST_63;
    }
    let len = line.len();
    // A window that would run past the line is the line's last 64 bytes
    // shifted down to start at `w`: the bits shifted in read as
    // non-digits (the `]` is before them anyway).
    let (from, shift) = match len - w {
        n if n >= 64 => (w, 0),
        _ if len >= 64 => (len - 64, w - (len - 64)),
        _ => return short_id_ends(line, w, close),
    };
    let d = digits_avx2(line, from) >> shift;
    let before_close = match close - w {
        n if n >= 63 => FIRST_63,
        n => (1u64 << n) - 1,
    };
    d & !(d >> 1) & before_close
}

/// Bit i: `line[from + i]` is a digit, for the 64 bytes from `from`
/// (which must lie within the line).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
fn digits_avx2(line: &[u8], from: usize) -> u64 {
    use std::arch::x86_64::*;
    let bytes = &line[from..from + 64];
    let zero = _mm256_set1_epi8(b'0' as i8);
    let nine = _mm256_set1_epi8(9);
    let mut d = 0u64;
    for half in 0..2 {
        // SAFETY: bytes 32*half..32*half+32 lie within `bytes`.
        let v = unsafe { _mm256_loadu_si256(bytes.as_ptr().add(32 * half).cast()) };
        let from_zero = _mm256_sub_epi8(v, zero);
        let digit = _mm256_cmpeq_epi8(_mm256_min_epu8(from_zero, nine), from_zero);
        d |= u64::from(_mm256_movemask_epi8(digit) as u32) << (32 * half);
    }
    d
}

/// [`id_ends`] on a line shorter than 64 bytes, a byte at a time.
#[cfg(target_arch = "x86_64")]
#[cold]
fn short_id_ends(line: &[u8], w: usize, close: usize) -> u64 {
    let mut d = 0u64;
    for (i, c) in line[w..close].iter().enumerate().take(63) {
        d |= u64::from(c.is_ascii_digit()) << i;
    }
    d & !(d >> 1) & ((1u64 << 63) - 1)
}

/// Decodes the proven array `line[open..end]` (`count` ids, 1 or more,
/// none over eight digits; `open` at least 7) into `out`, four ids at a
/// time, and returns true; false (and `out` as it was) if the array
/// does not hold `count` ids (a caller's bug, not an input's).
///
/// The ids are the maximal runs of digits of the array (the walk proved
/// that, and it is all this relies on): each run's last digit comes from
/// its window's digit mask ([`id_ends`]); the eight bytes that end there
/// are loaded into a 64-bit lane, four ids to a 256-bit register; every
/// byte at or below the last non-digit is cleared (what is left is the id,
/// zero-padded in front), and pairs, quads and halves of digits are
/// combined by multiply-adds into the four values, stored at once. The
/// same method as `record::renumber`'s rewrite (decision 0040), without the
/// way back to text. A window's ids go in groups of four with no test
/// between them: a group short of four repeats the window's last id in its
/// other lanes, which the next group's store (or the end) overwrites. One
/// id at a time ([`decode_proven`]), an id cost about 63 instructions
/// (cachegrind, mc-analyze, decision 0051).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt,bmi1")]
fn decode_avx2(line: &[u8], open: usize, end: usize, count: usize, out: &mut Vec<u64>) -> bool {
    // A group stores four lanes whatever it holds; a window's ids are
    // counted before any is stored, so at most `count` are before a store.
    out.reserve(count + 3);
    let base = out.len();
    // SAFETY: `reserve` made room for `count + 3` ids from `base`.
    let dst = unsafe { out.as_mut_ptr().add(base) };
    let close = end - 1;
    let base_ptr = line.as_ptr();
    let mut done = 0usize;
    let mut w = open + 1;
    while w < close {
        let mask = id_ends(line, w, close);
        let n = mask.count_ones() as usize;
        if n > count - done {
            // SAFETY: no id past `base` counts.
            unsafe { out.set_len(base) };
            return false;
        }
        if mask != 0 {
            // SAFETY: an end lies after `open` (at least 7), so e-7 >= 1,
            // and before the `]`, so e+1 <= line.len(); the window's
            // first id is below `done + n <= count`, so the groups' lanes
            // lie within the `count + 3` reserved.
            unsafe { store_id_groups(base_ptr, w, mask, dst.wrapping_add(done)) };
            done += n;
        }
        w += 63;
    }
    if done != count {
        // SAFETY: no id past `base` counts.
        unsafe { out.set_len(base) };
        return false;
    }
    // SAFETY: the first `count` ids from `base` were stored above.
    unsafe { out.set_len(base + count) };
    true
}

/// Stores the ids of one window of a proven array at `dst`, four at a
/// time: bit k of `ends` (not 0) is set when `base.add(w + k)` is the last
/// digit of an id of at most eight digits. The eight bytes that end at
/// each are loaded into a 64-bit lane, four ids to a 256-bit register,
/// and turned into values at once (`renumber::eight_digit_values`: every
/// byte at or below the last non-digit cleared, then multiply-adds); a
/// group short of four repeats the window's last id in its other lanes,
/// so the groups need no test between them, and up to three lanes past
/// the window's ids are written (the next store, or the caller's length,
/// leaves them out). The one group loop of [`decode_avx2`] and of the
/// walk that decodes ([`store_window_ids`]).
///
/// Safety: the CPU has AVX2 and BMI1; for each end `e`, the bytes
/// `base + e - 7 ..= base + e` are readable; `dst` has room for the
/// window's ids and three more.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,bmi1")]
unsafe fn store_id_groups(base: *const u8, w: usize, mut ends: u64, mut dst: *mut u64) {
    use std::arch::x86_64::*;
    // The window's last end, in every lane past its ids.
    let last = 1u64 << (63 - ends.leading_zeros());
    while ends != 0 {
        let m0 = ends;
        let m1 = m0 & (m0.wrapping_sub(1));
        let m2 = m1 & (m1.wrapping_sub(1));
        let m3 = m2 & (m2.wrapping_sub(1));
        ends = m3 & m3.wrapping_sub(1);
        let at = |m: u64| w + (m | last).trailing_zeros() as usize;
        // SAFETY: the caller's: the eight bytes that end at an end are readable.
        let load = |m: u64| unsafe { base.add(at(m) - 7).cast::<i64>().read_unaligned() };
        let v = _mm256_set_epi64x(load(m3), load(m2), load(m1), load(m0));
        let value = super::renumber::eight_digit_values(v);
        // SAFETY: the caller's: room for the window's ids and three more.
        unsafe { _mm256_storeu_si256(dst.cast(), value) };
        dst = dst.wrapping_add(4);
    }
}

/// Appends to `out` the ids that end at the set bits of `ends` (bit k:
/// `line[p + k]`), by [`store_id_groups`]. Safety: the CPU has AVX2,
/// POPCNT and BMI1; each end `e` is the last digit of an id of at most
/// eight digits, with `7 <= e < line.len()`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,popcnt,bmi1")]
unsafe fn store_window_ids(line: &[u8], p: usize, ends: u64, out: &mut Vec<u64>) {
    if ends == 0 {
        return;
    }
    let n = ends.count_ones() as usize;
    out.reserve(n + 3);
    let len = out.len();
    // SAFETY: the ends' bytes are within `line` (the caller's), and
    // `reserve` made room for `n + 3` ids from `len`, of which the first
    // `n` are stored.
    unsafe {
        store_id_groups(line.as_ptr(), p, ends, out.as_mut_ptr().add(len));
        out.set_len(len + n);
    }
}

/// Decodes an array [`walk`] already accepted, with no id over 19 digits:
/// each run of digits is found and read eight at a time ([`digit_run`],
/// [`eight_digits`]), anything else separates numbers. Nothing is checked
/// (the walk did), which is what makes it the fast path. Reading a byte at
/// a time, this loop was mc-roots' and mc-scale's largest function (21% and
/// 19% of their samples, `perf record` on a 256 MB trace).
///
/// An id of up to seven digits with eight bytes to read (all of them in
/// the Mooncake traces, but for the end of the array) is found and read
/// from one load, and the `, ` after it is stepped over at once: the
/// general loop below cost about 100 instructions an id, this one 66
/// (cachegrind, mc-roots, docs/decisions/0029-ids-scanned-sixty-four-bytes.md).
fn decode_proven(raw: &[u8], count: usize, out: &mut Vec<u64>) {
    out.reserve(count);
    let mut i = 1;
    while let Some(v) = next_proven(raw, &mut i) {
        out.push(v);
    }
}

/// The next id of an array [`decode_proven`] reads, from `*i` (1 at the
/// start, just after the `[`), moving `*i` past it; `None` at the end.
/// The one reading of a proven array, for decoding into a list and for
/// rewriting an array in one pass ([`map_proven`]). A function the loops
/// call rather than a loop calling a closure: with a closure, called from
/// the fast and the slow branch, the compiler kept it out of line, a call
/// an id (100 instructions an id in mc-roots; cachegrind, decision 0036).
#[inline(always)]
fn next_proven(raw: &[u8], i: &mut usize) -> Option<u64> {
    while *i < raw.len() {
        if let Some(chunk) = raw[*i..].first_chunk::<8>() {
            let x = u64::from_le_bytes(*chunk);
            let len = (not_digits(x).trailing_zeros() / 8) as usize;
            if (1..8).contains(&len) {
                // What follows an id the walk accepted is `,` or `]` or
                // whitespace; `, ` is the common pair.
                *i += len + 1;
                if raw.get(*i) == Some(&b' ') {
                    *i += 1;
                }
                return Some(eight_digits(x, len));
            }
        }
        if !raw[*i].is_ascii_digit() {
            *i += 1;
            continue;
        }
        let len = digit_run(&raw[*i..]);
        let v = digits_value(&raw[*i..], len);
        *i += len;
        return Some(v);
    }
    None
}

/// Rewrites an id array the scan proved (`count` ids, none over 19
/// digits) in one pass: each id read as [`decode_proven`] reads it,
/// replaced by `f(id)` and stored as [`put_decimal`] stores it, with
/// `separator` between ids; appends `[...]` to `out`. What mc-roots and
/// mc-merge's id namespaces do to every row, without the list of ids
/// between reading and writing (decision 0036). On an error of `f`, `out`
/// is as it was.
#[inline]
pub(crate) fn map_proven<E, const N: usize>(
    raw: &[u8],
    count: usize,
    separator: &[u8; N],
    out: &mut Vec<u8>,
    mut f: impl FnMut(u64) -> Result<u64, E>,
) -> Result<(), E> {
    // An id is at most 20 digits; `put_decimal` stores 8 bytes at a time.
    let at = out.len();
    out.resize(at + 2 + count * (20 + N) + 8, 0);
    let buf = &mut out[at..];
    buf[0] = b'[';
    let mut p = 1;
    let mut i = 1;
    while let Some(id) = next_proven(raw, &mut i) {
        let gap = if p > 1 { N } else { 0 };
        // The room is for `count` ids: an array longer than its shape
        // said (a caller's bug) is cut there, not overrun.
        if p + gap + 28 > buf.len() {
            break;
        }
        let mapped = match f(id) {
            Ok(v) => v,
            Err(e) => {
                out.truncate(at);
                return Err(e);
            }
        };
        if p > 1 {
            buf[p..p + N].copy_from_slice(separator);
            p += N;
        }
        p = put_decimal(mapped, buf, p);
    }
    buf[p] = b']';
    out.truncate(at + p + 1);
    Ok(())
}

/// The value of the `len` (1 to 19) ASCII digits `b` starts with, eight
/// at a time where eight bytes can be read.
#[inline]
fn digits_value(b: &[u8], len: usize) -> u64 {
    let mut v = 0u64;
    let mut k = 0;
    while k < len {
        let take = (len - k).min(8);
        match b[k..].first_chunk::<8>() {
            Some(chunk) => {
                v = v * POW10[take] + eight_digits(u64::from_le_bytes(*chunk), take);
            }
            None => {
                for &d in &b[k..k + take] {
                    v = v * 10 + u64::from(d - b'0');
                }
            }
        }
        k += take;
    }
    v
}

const POW10: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// The value of the first `len` (1 to 8) bytes of `x` (little-endian), all
/// ASCII digits: the bytes after them may be anything. Subtracting `'0'`
/// from every byte can borrow only out of a byte below `'0'`, and a borrow
/// moves to later bytes, which the shift drops; the shift also puts the
/// digits at the top with zeros (leading zeros) before them, and three
/// multiplies then combine pairs, quads and the two halves.
/// The multiplies are `csv::join_eight_digits`, the crate's one SWAR join.
#[inline]
pub(crate) fn eight_digits(x: u64, len: usize) -> u64 {
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    crate::csv::join_eight_digits(x.wrapping_sub(ZEROS) << (8 * (8 - len)))
}

/// Stores `v` in decimal (as `itoa` writes it) at `buf[p..]`, which has
/// room for its digits and, below 10^8, eight bytes; returns the index
/// after the digits. Ids below 10^8 (all of them in the Mooncake traces)
/// are made eight digits at once in one `u64` and stored as eight bytes,
/// the next id's store overwriting what is past this one's length: a copy
/// of a fixed size, where `itoa`'s text of varying length cost a `memmove`
/// call per id (14% of mc-roots' samples, `perf record`, 256 MB trace).
/// Below 10^16 (every length and timestamp an importer writes), two such
/// words. The writer of whole id arrays makes the room once (`write_ids`),
/// so no id grows the `Vec`.
#[inline]
pub(crate) fn put_decimal(v: u64, buf: &mut [u8], p: usize) -> usize {
    const E8: u64 = 100_000_000;
    if v < E8 {
        return put_below_e8(v, buf, p);
    }
    if v >= E8 * E8 {
        let mut text = itoa::Buffer::new();
        let text = text.format(v).as_bytes();
        buf[p..p + text.len()].copy_from_slice(text);
        return p + text.len();
    }
    let p = put_below_e8(v / E8, buf, p);
    buf[p..p + 8].copy_from_slice(&eight_ascii_digits(v % E8).to_le_bytes());
    p + 8
}

/// `v` below 10^8 as eight digits stored at once, its leading zeros skipped.
#[inline]
fn put_below_e8(v: u64, buf: &mut [u8], p: usize) -> usize {
    let digits = eight_ascii_digits(v);
    // Leading zeros are the low bytes: skip them (keeping one for 0).
    let skip = ((digits ^ ASCII_ZEROS).trailing_zeros() / 8).min(7) as usize;
    buf[p..p + 8].copy_from_slice(&(digits >> (8 * skip)).to_le_bytes());
    p + 8 - skip
}

const ASCII_ZEROS: u64 = 0x3030_3030_3030_3030;

/// `v` (below 10^8) as eight ASCII digits with leading zeros, the first
/// digit in the lowest byte (the order they are stored in). Divisions by
/// 100 and by 10 run on all lanes at once as multiply-shifts, exact for
/// the lane values they meet (below 10^4 and below 100; the tests check
/// every one).
#[inline]
fn eight_ascii_digits(v: u64) -> u64 {
    // 32-bit lanes: the upper four digits, then the lower four.
    let x = (v / 10_000) | ((v % 10_000) << 32);
    // 16-bit lanes: each four digits split into two pairs.
    let hundreds = ((x * 10_486) >> 20) & 0x0000_007F_0000_007F;
    let x = hundreds | ((x - hundreds * 100) << 16);
    // 8-bit lanes: each pair split into two digits.
    let tens = ((x * 103) >> 10) & 0x000F_000F_000F_000F;
    let x = tens | ((x - tens * 10) << 8);
    x + ASCII_ZEROS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(s: &str) -> Result<IdArrayShape, String> {
        id_array_shape(s.as_bytes())
    }

    fn ids(s: &str) -> Result<Vec<u64>, String> {
        let mut out = Vec::new();
        decode(s.as_bytes(), None, &mut out).map(|()| out)
    }

    #[test]
    fn walks_plain_integer_arrays_in_any_json_spacing() {
        assert_eq!(ids("[1, 22,333]").unwrap(), vec![1, 22, 333]);
        assert_eq!(ids("[ 0 ,\t7\n]").unwrap(), vec![0, 7]);
        assert_eq!(ids("[ ]").unwrap(), Vec::<u64>::new());
        // Whitespace off the fast path: before an id, before a comma, before `]`.
        assert_eq!(ids("[\n1 ,\t 2\r\n]").unwrap(), vec![1, 2]);
        assert_eq!(ids("[1 ]").unwrap(), vec![1]);
        for bad in ["[1 2]", "[1,]", "[,1]", "[1,,2]", "[\t1\t", "[1 \t"] {
            assert!(ids(bad).is_err(), "{bad}");
        }
        assert_eq!(
            shape("[7, 123456, 0]").unwrap(),
            IdArrayShape {
                count: 3,
                longest_digits: 6
            }
        );
        assert_eq!(shape("[]").unwrap().count, 0);
        // The end index is just after `]`, so the scanner can go on from it.
        assert_eq!(walk(b"[1, 2], 3", 1, |_| {}).unwrap().0, 6);
    }

    #[test]
    fn an_array_inside_a_line_is_read_to_its_end() {
        let read = |s: &str, i: usize| {
            let mut out = vec![9];
            read_id_array(s.as_bytes(), i, &mut out).map(|end| (end, out))
        };
        assert_eq!(
            read("{\"a\": [1, 22, 0]}", 6),
            Some((16, vec![9, 1, 22, 0]))
        );
        assert_eq!(read("[]", 0), Some((2, vec![9])));
        assert_eq!(read("[ 1 ]x", 0), Some((5, vec![9, 1])));
        let max19 = "[9999999999999999999]";
        assert_eq!(
            read(max19, 0),
            Some((21, vec![9, 9_999_999_999_999_999_999]))
        );
        // Not such an array: no `[`, a 20-digit id (serde reads a float or
        // a u64 there: the caller's to judge), a float, a leading zero.
        for bad in [
            "1",
            "[18446744073709551615]",
            "[1.0]",
            "[01]",
            "[1,]",
            "[-1]",
            "[1",
        ] {
            assert_eq!(read(bad, 0), None, "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn digit_run_counts_leading_digits(bytes in proptest::collection::vec(
            proptest::prop_oneof![b'0'..=b'9', proptest::num::u8::ANY], 0..40)
        ) {
            let expected = bytes.iter().take_while(|c| c.is_ascii_digit()).count();
            proptest::prop_assert_eq!(digit_run(&bytes), expected);
        }
    }

    proptest::proptest! {
        /// The eight-at-a-time fast path reads every array the checking
        /// walker reads, to the same ids: any spacing, ids of 1 to 19
        /// digits (the fast path's range), arrays ending near the end of
        /// the slice (where eight bytes cannot be read) or far from it.
        #[test]
        fn the_proven_fast_path_agrees_with_the_walker(
            ids in proptest::collection::vec(
                proptest::prop_oneof![0u64..1000, 0u64..100_000_000, 0u64..10_000_000_000_000_000_000],
                0..40),
            seps in proptest::collection::vec(
                proptest::prop_oneof![proptest::strategy::Just(", "), proptest::strategy::Just(","),
                    proptest::strategy::Just(" , "), proptest::strategy::Just(",\n\t")], 40),
            tail in proptest::prop_oneof![proptest::strategy::Just(""), proptest::strategy::Just("], 7, 8, 9]}")],
        ) {
            let mut raw = String::from("[");
            for (k, id) in ids.iter().enumerate() {
                if k > 0 {
                    raw.push_str(seps[k]);
                }
                raw.push_str(&id.to_string());
            }
            raw.push(']');
            let array_len = raw.len();
            raw.push_str(tail);
            let shape = id_array_shape(&raw.as_bytes()[..array_len]).unwrap();
            let mut fast = Vec::new();
            decode(&raw.as_bytes()[..array_len], Some(shape), &mut fast).unwrap();
            proptest::prop_assert_eq!(&fast, &ids);
        }

        #[test]
        fn eight_digits_reads_any_prefix(n in 0u64..100_000_000, len in 1usize..=8, after in proptest::num::u8::ANY) {
            let text = format!("{n:08}");
            let mut bytes = [after; 8];
            bytes[..len].copy_from_slice(&text.as_bytes()[8 - len..]);
            let expected: u64 = text[8 - len..].parse().unwrap();
            proptest::prop_assert_eq!(eight_digits(u64::from_le_bytes(bytes), len), expected);
        }
    }

    /// An id array as the tests write it: ids with the separators given
    /// (cycled), then `tail` after the `]`.
    /// The separators of an array in the Mooncake form: all `,`, all
    /// `, `, or the two mixed.
    fn mooncake_separators(compact: bool, mixed: bool) -> &'static [&'static str] {
        match (compact, mixed) {
            (_, true) => &[",", ", ", ", ", ","],
            (true, false) => &[","],
            (false, false) => &[", "],
        }
    }

    /// What follows an array in a line: nothing, the row's end, another
    /// field, or digits (which must not be read as an id).
    fn after_an_array() -> impl proptest::strategy::Strategy<Value = &'static str> {
        proptest::prop_oneof![
            proptest::strategy::Just(""),
            proptest::strategy::Just("}"),
            proptest::strategy::Just(", \"x\": [1, 2]}"),
            proptest::strategy::Just("0123456789")
        ]
    }

    fn array_text(ids: &[u64], seps: &[&str], tail: &str) -> Vec<u8> {
        let mut raw = String::from("[");
        for (k, id) in ids.iter().enumerate() {
            if k > 0 {
                raw.push_str(seps[k % seps.len()]);
            }
            raw.push_str(&id.to_string());
        }
        raw.push(']');
        raw.push_str(tail);
        raw.into_bytes()
    }

    proptest::proptest! {
        /// The 64-byte fast path takes every array in the Mooncake form
        /// (ids of 1 to 8 digits, `,` or `, ` between them), anywhere in a
        /// line and across any number of windows, and gives what the walk
        /// gives.
        #[test]
        fn the_fast_path_takes_the_mooncake_form_as_the_walk_does(
            ids in proptest::collection::vec(
                proptest::prop_oneof![0u64..10, 0u64..1000, 0u64..100_000_000], 1..60),
            compact in proptest::bool::ANY,
            mixed in proptest::bool::ANY,
            lead in 0usize..70,
            tail in after_an_array(),
        ) {
            let seps = mooncake_separators(compact, mixed);
            let mut line = vec![b'x'; lead];
            line.extend_from_slice(&array_text(&ids, seps, tail));
            let fast = walk_fast(&line, lead + 1);
            proptest::prop_assert!(fast.is_some());
            // Both ways of classifying (AVX2 where the CPU has it).
            proptest::prop_assert_eq!(walk_fast_with::<Baseline>(&line, lead + 1, |_, _| {}), fast);
            proptest::prop_assert_eq!(Ok(fast.unwrap()), walk(&line, lead + 1, |_| {}));
        }

        /// On anything else, mutated or spaced or with long ids, the fast
        /// path either gives what the walk gives or leaves the array to it.
        #[test]
        fn the_fast_path_never_disagrees_with_the_walk(
            ids in proptest::collection::vec(
                proptest::prop_oneof![0u64..1000, 0u64..100_000_000, 0u64..u64::MAX], 0..40),
            seps in proptest::collection::vec(
                proptest::prop_oneof![proptest::strategy::Just(", "), proptest::strategy::Just(","),
                    proptest::strategy::Just(" , "), proptest::strategy::Just(",\n"),
                    proptest::strategy::Just(",  "), proptest::strategy::Just(" ,")], 1..5),
            edits in proptest::collection::vec((proptest::num::usize::ANY, proptest::prop_oneof![
                proptest::strategy::Just(b'0'), proptest::strategy::Just(b'7'),
                proptest::strategy::Just(b','), proptest::strategy::Just(b' '),
                proptest::strategy::Just(b']'), proptest::strategy::Just(b'['),
                proptest::strategy::Just(b'-'), proptest::strategy::Just(b'.'),
                proptest::strategy::Just(b'\t'), proptest::strategy::Just(b'x'),
                proptest::strategy::Just(0u8), proptest::strategy::Just(0xC3u8)]), 0..4),
            cut in proptest::option::of(proptest::num::usize::ANY),
            tail in proptest::prop_oneof![proptest::strategy::Just(""), proptest::strategy::Just("}"),
                proptest::strategy::Just("], 7]")],
            leading_zero in proptest::option::of(proptest::num::usize::ANY),
        ) {
            let mut line = array_text(&ids, &seps, tail);
            // A leading zero (`01`, not JSON) before one id.
            if let Some(k) = leading_zero {
                let starts: Vec<usize> = (1..line.len())
                    .filter(|&i| line[i].is_ascii_digit() && !line[i - 1].is_ascii_digit())
                    .collect();
                if !starts.is_empty() {
                    line.insert(starts[k % starts.len()], b'0');
                }
            }
            for (at, byte) in edits {
                let at = at % line.len();
                line[at] = byte;
            }
            if let Some(c) = cut {
                line.truncate(1 + c % line.len());
            }
            proptest::prop_assert_eq!(walk_fast_with::<Baseline>(&line, 1, |_, _| {}), walk_fast(&line, 1));
            if let Some(fast) = walk_fast(&line, 1) {
                proptest::prop_assert_eq!(Ok(fast), walk(&line, 1, |_| {}), "{}", String::from_utf8_lossy(&line));
            }
        }
    }

    /// `decode_in`'s answer for the array whose `[` is `line[open]`, with
    /// the end and shape the scan gives it (the rest of the line when it
    /// is no array), next to the reference: the checking walker's
    /// (`decode` without a shape), each appended after a sentinel.
    fn fast_and_reference(
        line: &[u8],
        open: usize,
    ) -> (Result<Vec<u64>, String>, Result<Vec<u64>, String>) {
        let measured = measure(line, open + 1).ok();
        let end = measured.map_or(line.len(), |(end, _)| end);
        let shape = measured.map(|(_, shape)| shape);
        let raw = &line[open..end];
        let mut fast = vec![5];
        let fast = decode_in(line, (open, end), shape, &mut fast).map(|()| fast);
        let mut reference = vec![5];
        let reference = decode(raw, None, &mut reference).map(|()| reference);
        (fast, reference)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 3000, ..Default::default() })]

        /// The four-at-a-time decode (taken for arrays the scan proved
        /// with ids of up to eight digits, on AVX2) gives what the
        /// checking walker gives, and every other array goes to the walker
        /// with its error: ids at the edges (0, 10^8 - 1, 10^8, u64::MAX, a
        /// 20-digit id over it), any spacing the walk takes, empty arrays,
        /// arrays anywhere in a line of digits (so windows and the bytes
        /// before the `[` are crossed anywhere) with digits after them.
        #[test]
        fn decoding_in_the_line_gives_what_the_walker_gives(
            ids in proptest::collection::vec(proptest::prop_oneof![
                proptest::strategy::Just(0u64), proptest::strategy::Just(99_999_999u64),
                proptest::strategy::Just(100_000_000u64), proptest::strategy::Just(u64::MAX),
                0u64..10, 0u64..1000, 0u64..100_000_000, 0u64..100_000_000,
                proptest::num::u64::ANY], 0..70),
            over in proptest::option::of(proptest::num::usize::ANY),
            seps in proptest::collection::vec(proptest::prop_oneof![
                proptest::strategy::Just(", "), proptest::strategy::Just(","),
                proptest::strategy::Just(", "), proptest::strategy::Just(" , "),
                proptest::strategy::Just(",\n\t"), proptest::strategy::Just(",  "),
                proptest::strategy::Just("\r\n,")], 1..4),
            (open_ws, close_ws) in (proptest::prop_oneof![
                proptest::strategy::Just(""), proptest::strategy::Just(""),
                proptest::strategy::Just(" "), proptest::strategy::Just("\n\t")],
                proptest::prop_oneof![proptest::strategy::Just(""),
                proptest::strategy::Just(""), proptest::strategy::Just(" \r\n")]),
            lead in 0usize..80,
            tail in proptest::prop_oneof![proptest::strategy::Just(""), proptest::strategy::Just("}"),
                proptest::strategy::Just("], 7, 8]}"), proptest::strategy::Just("0123456789")],
        ) {
            let mut text: Vec<String> = ids.iter().map(u64::to_string).collect();
            // A 20-digit id, one over u64::MAX.
            if let Some(k) = over.filter(|_| !text.is_empty()) {
                let k = k % text.len();
                text[k] = "18446744073709551616".to_string();
            }
            let mut line = vec![b'7'; lead];
            line.extend_from_slice(b"[");
            line.extend_from_slice(open_ws.as_bytes());
            for (k, id) in text.iter().enumerate() {
                if k > 0 {
                    line.extend_from_slice(seps[k % seps.len()].as_bytes());
                }
                line.extend_from_slice(id.as_bytes());
            }
            line.extend_from_slice(close_ws.as_bytes());
            line.push(b']');
            let end = line.len();
            line.extend_from_slice(tail.as_bytes());
            let (fast, reference) = fast_and_reference(&line, lead);
            proptest::prop_assert!(end <= line.len());
            proptest::prop_assert_eq!(&fast, &reference, "{}", String::from_utf8_lossy(&line));
            if over.is_none() || ids.is_empty() {
                let mut expected = vec![5];
                expected.extend_from_slice(&ids);
                proptest::prop_assert_eq!(fast, Ok(expected));
            } else {
                proptest::prop_assert_eq!(fast, Err("an id does not fit in 64 bits".to_string()));
            }
        }

        /// On arrays with bytes changed (signs, leading zeros, missing `]`,
        /// other values), the decode in the line fails where the walker
        /// fails, with its message, and reads what it reads otherwise.
        #[test]
        fn a_changed_array_is_judged_as_the_walker_judges_it(
            ids in proptest::collection::vec(
                proptest::prop_oneof![0u64..1000, 0u64..100_000_000], 1..40),
            edits in proptest::collection::vec((proptest::num::usize::ANY, proptest::prop_oneof![
                proptest::strategy::Just(b'0'), proptest::strategy::Just(b'7'),
                proptest::strategy::Just(b','), proptest::strategy::Just(b' '),
                proptest::strategy::Just(b']'), proptest::strategy::Just(b'-'),
                proptest::strategy::Just(b'.'), proptest::strategy::Just(b'\t'),
                proptest::strategy::Just(b'x'), proptest::strategy::Just(b'"')]), 1..4),
            lead in 7usize..40,
        ) {
            let mut line = vec![b'1'; lead];
            line.extend_from_slice(&array_text(&ids, &[", "], ""));
            for (at, byte) in edits {
                let at = lead + 1 + at % (line.len() - lead - 1);
                line[at] = byte;
            }
            let (fast, reference) = fast_and_reference(&line, lead);
            proptest::prop_assert_eq!(fast, reference, "{}", String::from_utf8_lossy(&line));
        }
    }

    /// Ids of every length from 1 to 9 digits at every place across the
    /// first windows' ends, in groups of four and short last groups: the
    /// fast path itself (called directly where the CPU has AVX2) reads
    /// each whole, as the walker does; a short line, under one window.
    #[test]
    fn ids_across_a_window_end_are_decoded_whole() {
        for pad in 0..140 {
            for id in ["1", "12", "1234567", "12345678", "10000000", "123456789"] {
                for count in [1, 3, 4, 5, 9] {
                    let mut line = format!("{{\"hash_ids\": [{}", "1, ".repeat(pad / 3));
                    line.push_str(&"9".repeat(pad % 3 + 1));
                    line.push_str(&format!("{}]}}", format!(", {id}").repeat(count)));
                    let b = line.as_bytes();
                    let open = 13;
                    let end = b.len() - 1;
                    let (fast, reference) = fast_and_reference(b, open);
                    assert_eq!(fast, reference, "{line}");
                    #[cfg(target_arch = "x86_64")]
                    if has_avx2() && id.len() <= 8 {
                        let shape = id_array_shape(&b[open..end]).unwrap();
                        let mut out = vec![5];
                        // SAFETY: the CPU has AVX2; a proven array of ids
                        // of at most eight digits, `open` at least 7.
                        assert!(unsafe { decode_avx2(b, open, end, shape.count, &mut out) });
                        assert_eq!(Ok(out), reference, "{line}");
                    }
                }
            }
        }
    }

    /// The walk that decodes ([`walk_fast_decoding`]) against the walk
    /// and the checking walker: the same verdict, end and shape as
    /// [`walk_fast`], and, where it takes the array on a CPU with AVX2,
    /// the ids [`decode`] reads without a shape (`out` empty elsewhere).
    fn decoding_walk_agrees(line: &[u8], i: usize) -> Result<(), String> {
        let mut out = vec![5, 6];
        let fused = walk_fast_decoding(line, i, &mut out);
        let plain = walk_fast(line, i);
        let text = String::from_utf8_lossy(line);
        if fused.map(|(end, shape, _)| (end, shape)) != plain {
            return Err(format!("{fused:?} != {plain:?}: {text}"));
        }
        let Some((end, _, decoded)) = fused else {
            return Ok(());
        };
        #[cfg(target_arch = "x86_64")]
        if decoded != (i >= 8 && has_avx2()) {
            return Err(format!("decoded: {decoded}: {text}"));
        }
        if decoded {
            let mut reference = Vec::new();
            decode(&line[i - 1..end], None, &mut reference)?;
            if out != reference {
                return Err(format!("{out:?} != {reference:?}: {text}"));
            }
        }
        Ok(())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 3000, ..Default::default() })]

        /// Arrays in the Mooncake form anywhere in a line (so windows end
        /// at every byte of them), ids of 1 to 8 digits, cut or not at
        /// the line's end: the ids come out as the walker reads them.
        #[test]
        fn the_walk_that_decodes_reads_the_mooncake_form_as_the_walker(
            ids in proptest::collection::vec(
                proptest::prop_oneof![0u64..10, 0u64..1000, 0u64..100_000_000,
                    proptest::strategy::Just(99_999_999u64), proptest::strategy::Just(10_000_000u64)], 1..90),
            compact in proptest::bool::ANY,
            mixed in proptest::bool::ANY,
            lead in 0usize..140,
            tail in after_an_array(),
        ) {
            let seps = mooncake_separators(compact, mixed);
            let mut line = vec![b'7'; lead];
            line.extend_from_slice(&array_text(&ids, seps, tail));
            proptest::prop_assert!(walk_fast(&line, lead + 1).is_some());
            let checked = decoding_walk_agrees(&line, lead + 1);
            proptest::prop_assert!(checked.is_ok(), "{}", checked.unwrap_err());
        }

        /// Changed arrays (signs, leading zeros, long ids, other spacing,
        /// cut lines): taken only as the walk takes them, and then read
        /// as the walker reads them.
        #[test]
        fn the_walk_that_decodes_takes_only_what_the_walk_takes(
            ids in proptest::collection::vec(
                proptest::prop_oneof![0u64..1000, 0u64..100_000_000, 0u64..u64::MAX], 0..40),
            seps in proptest::collection::vec(
                proptest::prop_oneof![proptest::strategy::Just(", "), proptest::strategy::Just(","),
                    proptest::strategy::Just(" , "), proptest::strategy::Just(",  ")], 1..4),
            edits in proptest::collection::vec((proptest::num::usize::ANY, proptest::prop_oneof![
                proptest::strategy::Just(b'0'), proptest::strategy::Just(b'7'),
                proptest::strategy::Just(b','), proptest::strategy::Just(b' '),
                proptest::strategy::Just(b']'), proptest::strategy::Just(b'['),
                proptest::strategy::Just(b'-'), proptest::strategy::Just(b'.'),
                proptest::strategy::Just(b'x'), proptest::strategy::Just(0u8)]), 0..4),
            cut in proptest::option::of(proptest::num::usize::ANY),
            lead in 0usize..80,
        ) {
            let mut line = vec![b'1'; lead];
            line.extend_from_slice(&array_text(&ids, &seps, ""));
            for (at, byte) in edits {
                let at = lead + 1 + at % (line.len() - lead - 1);
                line[at] = byte;
            }
            if let Some(c) = cut {
                line.truncate(lead + 1 + c % (line.len() - lead));
            }
            let checked = decoding_walk_agrees(&line, lead + 1);
            proptest::prop_assert!(checked.is_ok(), "{}", checked.unwrap_err());
        }
    }

    /// Ids of every length from 1 to 9 digits at every place across the
    /// first windows' ends (the walk's windows start after the last
    /// non-digit of the one before, so an id cut by a window's end is
    /// handed out whole with the next), in lines shorter and longer than
    /// a window.
    #[test]
    fn the_walk_that_decodes_reads_ids_across_window_ends_whole() {
        for pad in 0..140 {
            for id in ["1", "12", "1234567", "12345678", "10000000", "123456789"] {
                for count in [1, 3, 4, 5, 9, 40] {
                    for sep in [", ", ","] {
                        let mut line = format!("{{\"hash_ids\": [{}", "1, ".repeat(pad / 3));
                        line.push_str(&"9".repeat(pad % 3 + 1));
                        line.push_str(&format!("{}]}}", format!("{sep}{id}").repeat(count)));
                        decoding_walk_agrees(line.as_bytes(), 14).unwrap();
                        let cut = &line.as_bytes()[..line.len() - 1];
                        decoding_walk_agrees(cut, 14).unwrap();
                    }
                }
            }
        }
        // An array whose `[` is before byte 7 is walked, not decoded.
        let mut out = vec![1];
        assert_eq!(
            walk_fast_decoding(b"[1, 2]", 1, &mut out),
            Some((
                6,
                IdArrayShape {
                    count: 2,
                    longest_digits: 1
                },
                false
            ))
        );
        assert!(out.is_empty());
    }

    /// The longest run by halves is the one-step ladder's answer.
    #[test]
    fn longest_run_is_the_ladder() {
        let ladder = |d: u64| {
            let (mut level, mut k) = (d, 0);
            while level != 0 {
                if k == FAST_MAX_DIGITS {
                    return None;
                }
                level &= level << 1;
                k += 1;
            }
            Some(k)
        };
        let mut words = vec![0, !0, 1, 1 << 63];
        for len in 1..=12 {
            for at in 0..=(64 - len) {
                let run = ((1u64 << len) - 1) << at;
                words.push(run);
                words.push(run | 0x5555_0000_0000_0005);
                words.push(run | (run << 40));
            }
        }
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            words.push(x);
            words.push(x & (x >> 1));
            words.push(x | (x << 3));
        }
        for d in words {
            assert_eq!(longest_run(d), ladder(d), "{d:#066b}");
        }
    }

    /// Windows start after the last byte of the window before that is no
    /// digit: an id at every place across a window's end, long, too long
    /// or with a leading zero, is measured (or refused) whole, in lines
    /// that end there or go on (a line in the reader's buffer).
    #[test]
    fn ids_across_a_window_end_are_measured_whole() {
        for pad in 0..90 {
            for id in ["12345678", "123456789", "01", "0", "7", "10"] {
                for sep in [", ", ","] {
                    for after in ["", "\n{\"a\": [1, 2]}"] {
                        let line = format!(
                            "[{}{id}{sep}5]{after}",
                            "1, ".repeat(pad / 3) + &"9".repeat(pad % 3)
                        );
                        let b = line.as_bytes();
                        let expected = walk(b, 1, |_| {})
                            .ok()
                            .filter(|(_, s)| s.longest_digits <= FAST_MAX_DIGITS);
                        assert_eq!(walk_fast(b, 1), expected, "{line}");
                        assert_eq!(
                            walk_fast_with::<Baseline>(b, 1, |_, _| {}),
                            expected,
                            "{line}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_fast_path_leaves_other_forms_to_the_walk() {
        for raw in [
            "[]",
            "[ ]",
            "[ 1, 2]",
            "[1 ]",
            "[1 , 2]",
            "[1,\t2]",
            "[1,  2]",
            "[123456789]",
            "[1, 2,]",
            "[01]",
            "[1, 00]",
            "[1, 2",
            "[1, 2 3]",
            "[,1]",
            "[1,,2]",
            "[-1]",
            "[1.5]",
        ] {
            assert_eq!(walk_fast(raw.as_bytes(), 1), None, "{raw}");
        }
        // Zero is an id; a `0` inside an id is a digit like any other.
        assert_eq!(
            walk_fast(b"[0, 10, 100,0]", 1),
            Some((
                14,
                IdArrayShape {
                    count: 4,
                    longest_digits: 3
                }
            ))
        );
        // Eight digits is the longest the fast path measures, also when an
        // id runs across two windows.
        let long = format!("[{}12345678]", "1, ".repeat(20));
        assert_eq!(
            walk_fast(long.as_bytes(), 1),
            Some((
                long.len(),
                IdArrayShape {
                    count: 21,
                    longest_digits: 8
                }
            ))
        );
        assert_eq!(
            walk_fast(format!("[{}123456789]", "1, ".repeat(20)).as_bytes(), 1),
            None
        );
    }

    #[test]
    fn the_lane_divisions_are_exact_for_every_lane_value() {
        for n in 0u64..10_000 {
            assert_eq!((n * 10_486) >> 20, n / 100, "{n}");
        }
        for n in 0u64..100 {
            assert_eq!((n * 103) >> 10, n / 10, "{n}");
        }
    }

    #[test]
    fn put_decimal_writes_what_itoa_writes_over_the_whole_range() {
        let mut v = 0u64;
        while v < u64::MAX / 3 {
            for w in [v, v + 1, v.saturating_sub(1)] {
                let mut buf = [0u8; 28];
                let end = put_decimal(w, &mut buf, 0);
                assert_eq!(&buf[..end], w.to_string().as_bytes());
            }
            v = v * 3 + 7;
        }
        for w in 0..100_000 {
            let mut buf = [b'x'; 28];
            let end = put_decimal(w, &mut buf, 1);
            assert_eq!(&buf[1..end], w.to_string().as_bytes());
        }
    }

    #[test]
    fn put_decimal_writes_what_itoa_writes() {
        let mut out = b"x".to_vec();
        let mut expected = b"x".to_vec();
        let edges = [
            0,
            1,
            9,
            10,
            99,
            100,
            10_000,
            99_999_999,
            100_000_000,
            u64::MAX,
        ];
        let powers = (0..20).flat_map(|e| {
            let p = 10u64.pow(e);
            [p - 1, p, p + 1]
        });
        for v in edges
            .into_iter()
            .chain(powers)
            .chain((0..200_000).map(|k| k * 499))
        {
            let at = out.len();
            out.resize(at + 20, 0);
            let end = put_decimal(v, &mut out, at);
            out.truncate(end);
            out.push(b',');
            expected.extend_from_slice(v.to_string().as_bytes());
            expected.push(b',');
        }
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&expected)
        );
    }

    #[test]
    fn digit_run_finds_the_first_non_digit_in_every_lane() {
        for len in 0..20 {
            for stop in [b'/', b':', b' ', b',', b']', 0xFF, 0xFA, 0x00] {
                let mut b = vec![b'7'; len];
                b.push(stop);
                b.extend_from_slice(b"123456789");
                assert_eq!(digit_run(&b), len, "{len} digits then {stop:#x}");
            }
        }
    }

    #[test]
    fn names_the_element_that_is_not_an_id() {
        let not_an_id = "expected non-negative integer ids, found";
        for (raw, said) in [
            ("[1, -2]", format!("{not_an_id} -2")),
            ("[1, 2.5, 3]", format!("{not_an_id} 2.5")),
            (r#"["1"]"#, format!(r#"{not_an_id} "1""#)),
            ("[[1, 2]]", format!("{not_an_id} [1")),
            (
                r#"{"0": 1}"#,
                r#"expected an array, found {"0": 1}"#.to_string(),
            ),
        ] {
            assert_eq!(ids(raw).unwrap_err(), said, "{raw}");
        }
        assert!(ids("[01]").is_err());
    }

    #[test]
    fn the_proven_fast_path_decodes_as_the_walker_does() {
        for raw in [
            "[1, 22,333]",
            "[ 0 ,\t7\n]",
            "[ ]",
            "[9223372036854775807, 0]",
        ] {
            let shape = id_array_shape(raw.as_bytes()).unwrap();
            let mut fast = Vec::new();
            decode(raw.as_bytes(), Some(shape), &mut fast).unwrap();
            assert_eq!(fast, ids(raw).unwrap(), "{raw}");
        }
    }

    #[test]
    fn ids_beyond_u64_are_an_error_and_u64_max_is_not() {
        assert_eq!(ids("[18446744073709551615]").unwrap(), vec![u64::MAX]);
        assert_eq!(
            ids("[18446744073709551616]").unwrap_err(),
            "an id does not fit in 64 bits"
        );
    }
}
