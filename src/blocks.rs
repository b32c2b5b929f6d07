//! Block-size rules (ARCHITECTURE.md §1), in one place: which (ids, length) pairs
//! are consistent, which block sizes a set of rows allows, and the size
//! `--block-size auto` settles on.

/// `--block-size`: a number of tokens, or `auto` (the size the rows point to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockSize {
    Fixed(u64),
    Auto,
}

/// Largest accepted block size (sizes are kept in 32 bits per id by
/// mc-analyze; real block sizes are far smaller).
pub const MAX_BLOCK_SIZE: u64 = 1 << 30;

/// The size Mooncake traces use, where nothing says otherwise.
pub const DEFAULT_BLOCK_SIZE: u64 = 512;

impl std::str::FromStr for BlockSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "auto" {
            return Ok(BlockSize::Auto);
        }
        match s.parse::<u64>() {
            Ok(b) if b > 0 && b <= MAX_BLOCK_SIZE => Ok(BlockSize::Fixed(b)),
            _ => Err(format!(
                "expected an integer from 1 to 2^30, or `auto`, got `{s}`"
            )),
        }
    }
}

impl std::fmt::Display for BlockSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BlockSize::Fixed(b) => write!(f, "{b}"),
            BlockSize::Auto => f.write_str("auto"),
        }
    }
}

/// The block sizes every row seen so far allows: `(n-1)·B < len ≤ n·B`
/// bounds B to `[ceil(len/n), floor((len-1)/(n-1))]` for each row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeasibleSizes {
    pub min: u64,
    /// `u64::MAX`: no upper bound (only single-block rows so far).
    pub max: u64,
    /// Rows with ids seen.
    pub rows: u64,
}

impl Default for FeasibleSizes {
    fn default() -> Self {
        FeasibleSizes {
            min: 1,
            max: u64::MAX,
            rows: 0,
        }
    }
}

impl FeasibleSizes {
    /// Narrows the range by a row of `n` ids and `len` tokens (rows without
    /// ids say nothing of the block size).
    pub fn add(&mut self, n: u64, len: u64) {
        if n == 0 {
            return;
        }
        self.rows += 1;
        if len == 0 {
            // No size fits ids without tokens.
            self.min = u64::MAX;
            self.max = 0;
            return;
        }
        self.min = self.min.max(len.div_ceil(n));
        if n >= 2 {
            self.max = self.max.min((len - 1) / (n - 1));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.min > self.max
    }

    pub fn contains(&self, b: u64) -> bool {
        self.min <= b && b <= self.max
    }

    /// The powers of two in the range (up to [`MAX_BLOCK_SIZE`]).
    pub fn powers_of_two(&self) -> impl Iterator<Item = u64> + '_ {
        (0..=MAX_BLOCK_SIZE.trailing_zeros())
            .map(|e| 1u64 << e)
            .filter(|&b| self.contains(b))
    }

    /// The one size the rows decide for `--block-size auto`: the only power
    /// of two every row allows. `Ok(None)`: no row has ids, so the size does
    /// not matter to them.
    pub fn decide(&self) -> Result<Option<u64>, Undecided> {
        if self.rows == 0 {
            return Ok(None);
        }
        if self.is_empty() {
            return Err(Undecided::NoSizeFits);
        }
        let mut pows = self.powers_of_two();
        match (pows.next(), pows.next()) {
            (Some(b), None) => Ok(Some(b)),
            (None, _) => Err(Undecided::NoPowerOfTwo(*self)),
            (Some(_), Some(_)) => Err(Undecided::Several(*self)),
        }
    }
}

/// Why `--block-size auto` could not settle on a size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Undecided {
    #[error("no block size fits every row (some rows contradict each other); pass --block-size B")]
    NoSizeFits,
    #[error("the rows allow block sizes {} to {}, which hold no power of two; pass --block-size B", .0.min, .0.max)]
    NoPowerOfTwo(FeasibleSizes),
    #[error("the rows allow block sizes from {} to {}, more than one power of two; pass --block-size B", .0.min, if .0.max == u64::MAX { "any size".to_string() } else { .0.max.to_string() })]
    Several(FeasibleSizes),
}

/// One rule for a `--block-size` given by hand, in every tool: when most
/// rows with ids do not fit it, it is the wrong size (a bad-data error,
/// exit 65, naming the size the rows decide). The usual mistake is giving
/// the serving engine's KV block size (vLLM's 16), which is mc-replay's
/// `--engine-block-size`, where the trace's hash-id block size belongs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SizeCheck {
    feasible: FeasibleSizes,
    /// Rows with ids, and those that do not fit the given size.
    contradicting: u64,
}

impl SizeCheck {
    /// A row of `n` ids and `len` tokens, against the size `given`.
    pub fn add(&mut self, n: u64, len: u64, given: u64) {
        if n == 0 {
            return;
        }
        self.feasible.add(n, len);
        if !is_consistent(n as usize, len, given) {
            self.contradicting += 1;
        }
    }

    /// `Err` when more than half the rows with ids contradict `given` and
    /// the rows decide another size. Rows that decide none (they contradict
    /// each other, or allow several sizes) leave the given size standing:
    /// their own faults are named line by line where they are found.
    pub fn verdict(&self, given: u64) -> Result<(), Contradicted> {
        let rows = self.feasible.rows;
        if rows == 0 || self.contradicting * 2 <= rows {
            return Ok(());
        }
        match self.feasible.decide() {
            Ok(Some(detected)) if detected != given => Err(Contradicted {
                given,
                contradicting: self.contradicting,
                rows,
                detected,
            }),
            _ => Ok(()),
        }
    }
}

/// Most rows contradict the `--block-size` given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "--block-size {given}: {contradicting} of {rows} rows with hash_ids do not fit it \
     (the rows say {detected}: pass --block-size {detected} or auto); the trace's block size \
     is the tokens per hash id (the serving engine's KV block size, vLLM's 16, is another \
     thing: mc-replay's --engine-block-size)"
)]
pub struct Contradicted {
    pub given: u64,
    pub contradicting: u64,
    pub rows: u64,
    pub detected: u64,
}

/// A row with `n` ids and `len` tokens is consistent for block size `b` when
/// every block is full but the last: `(n-1)*b < len <= n*b`. No ids and no
/// tokens is consistent too.
pub fn is_consistent(n: usize, len: u64, b: u64) -> bool {
    let n = n as u64;
    if n == 0 {
        return len == 0;
    }
    (n - 1).saturating_mul(b) < len && len <= n.saturating_mul(b)
}

/// Number of blocks needed for `len` tokens: `ceil(len / b)`.
pub fn blocks_for(len: u64, b: u64) -> u64 {
    len.div_ceil(b)
}

/// Tokens in block `i` (0-based) of a row of `len` tokens: `b` for a full
/// block, fewer for a partial last block, 0 past the end.
pub fn block_tokens(i: u64, len: u64, b: u64) -> u64 {
    len.saturating_sub(i.saturating_mul(b)).min(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_most_rows_contradict_is_refused_naming_theirs() {
        let mut c = SizeCheck::default();
        for len in [1000, 1010, 1020] {
            c.add(2, len, 16);
        }
        let e = c.verdict(16).unwrap_err();
        assert_eq!((e.contradicting, e.rows, e.detected), (3, 3, 512));
        assert!(e.to_string().contains("pass --block-size 512"), "{e}");
        // Half or fewer contradicting: the size stands (the rows' own
        // problems are named line by line elsewhere).
        let mut c = SizeCheck::default();
        c.add(2, 1000, 512);
        c.add(2, 1000, 16);
        assert!(c.verdict(512).is_ok());
        assert!(SizeCheck::default().verdict(16).is_ok());
    }

    #[test]
    fn the_rows_decide_one_power_of_two_or_say_why_not() {
        // nat2mc-style rows at 128: 287 tokens in 3 ids allows 96..=143.
        let mut f = FeasibleSizes::default();
        f.add(3, 287);
        assert_eq!((f.min, f.max), (96, 143));
        assert_eq!(f.decide(), Ok(Some(128)));
        // Two rows at 64: 100 tokens in 2 ids (50..=99), 130 in 3 (44..=64).
        let mut f = FeasibleSizes::default();
        f.add(2, 100);
        f.add(3, 130);
        assert_eq!(f.decide(), Ok(Some(64)));
        // Single-block rows bound B from below only: 256, 512, ... all fit.
        let mut f = FeasibleSizes::default();
        f.add(1, 200);
        assert!(matches!(f.decide(), Err(Undecided::Several(_))));
        // Rows without ids decide nothing, and need no size.
        let mut f = FeasibleSizes::default();
        f.add(0, 999);
        assert_eq!(f.decide(), Ok(None));
        // 600 tokens in 2 ids (300..=599) and 600 in 3 ids (200..=299).
        f.add(2, 600);
        f.add(3, 600);
        assert_eq!(f.decide(), Err(Undecided::NoSizeFits));
        // 16 tokens in 3 ids allows ceil(16/3) = 6 to floor(15/2) = 7: no
        // power of two.
        let mut f = FeasibleSizes::default();
        f.add(3, 16);
        assert_eq!((f.min, f.max), (6, 7));
        assert!(matches!(f.decide(), Err(Undecided::NoPowerOfTwo(_))));
    }

    #[test]
    fn consistency_bounds() {
        assert!(is_consistent(1, 1, 512));
        assert!(is_consistent(1, 512, 512));
        assert!(!is_consistent(1, 513, 512));
        assert!(is_consistent(2, 513, 512));
        assert!(!is_consistent(2, 512, 512));
        assert!(is_consistent(0, 0, 512));
        assert!(!is_consistent(0, 1, 512));
        assert!(!is_consistent(3, 0, 512));
    }

    #[test]
    fn block_arithmetic() {
        assert_eq!(blocks_for(0, 512), 0);
        assert_eq!(blocks_for(1, 512), 1);
        assert_eq!(blocks_for(1024, 512), 2);
        assert_eq!(blocks_for(1025, 512), 3);
        assert_eq!(block_tokens(0, 1025, 512), 512);
        assert_eq!(block_tokens(2, 1025, 512), 1);
        assert_eq!(block_tokens(3, 1025, 512), 0);
    }
}
