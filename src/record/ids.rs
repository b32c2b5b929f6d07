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
fn digit_run(b: &[u8]) -> usize {
    const HIGH_NIBBLES: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const THREES: u64 = 0x3030_3030_3030_3030;
    const SIXES: u64 = 0x0606_0606_0606_0606;
    let mut k = 0;
    while let Some(chunk) = b[k..].first_chunk::<8>() {
        let x = u64::from_le_bytes(*chunk);
        let not_digit =
            ((x & HIGH_NIBBLES) ^ THREES) | ((x.wrapping_add(SIXES) & HIGH_NIBBLES) ^ THREES);
        if not_digit != 0 {
            return k + (not_digit.trailing_zeros() / 8) as usize;
        }
        k += 8;
    }
    k + b[k..].iter().take_while(|c| c.is_ascii_digit()).count()
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
    walk(raw, 1, |_| {})
        .map(|(_, shape)| shape)
        .map_err(|at| not_ids(raw, at))
}

/// Decodes an id array into `out` (appending). `shape` is what the scanner
/// already proved of it: when every id is at most 19 digits (so none can
/// overflow u64), the digits are accumulated in one unchecked pass, the
/// fast path mc-roots and mc-analyze live on (`scripts/bench-filters.sh`
/// measured mc-roots 6–28% slower with the checking walker); otherwise the
/// walker decodes and names what is wrong.
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

/// Decodes an array [`walk`] already accepted, with no id over 19 digits:
/// digits accumulate, anything else ends a number. Nothing is checked
/// (the walk did), which is what makes it the fast path.
fn decode_proven(raw: &[u8], count: usize, out: &mut Vec<u64>) {
    out.reserve(count);
    let (mut v, mut in_number) = (0u64, false);
    for &b in &raw[1..] {
        let d = b.wrapping_sub(b'0');
        if d < 10 {
            v = v * 10 + u64::from(d);
            in_number = true;
        } else if in_number {
            out.push(v);
            v = 0;
            in_number = false;
        }
    }
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

    proptest::proptest! {
        #[test]
        fn digit_run_counts_leading_digits(bytes in proptest::collection::vec(
            proptest::prop_oneof![b'0'..=b'9', proptest::num::u8::ANY], 0..40)
        ) {
            let expected = bytes.iter().take_while(|c| c.is_ascii_digit()).count();
            proptest::prop_assert_eq!(digit_run(&bytes), expected);
        }
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
        assert_eq!(
            ids("[1, -2]").unwrap_err(),
            "expected non-negative integer ids, found -2"
        );
        assert_eq!(
            ids("[1, 2.5, 3]").unwrap_err(),
            "expected non-negative integer ids, found 2.5"
        );
        assert_eq!(
            ids(r#"["1"]"#).unwrap_err(),
            r#"expected non-negative integer ids, found "1""#
        );
        assert_eq!(
            ids("[[1, 2]]").unwrap_err(),
            "expected non-negative integer ids, found [1"
        );
        assert_eq!(
            ids(r#"{"0": 1}"#).unwrap_err(),
            r#"expected an array, found {"0": 1}"#
        );
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
