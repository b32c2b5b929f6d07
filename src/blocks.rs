//! Block-size rules (DESIGN.md §2): which (ids, length) pairs are consistent.

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
