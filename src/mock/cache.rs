//! A simulated prefix cache: every full block of prompt words a request
//! brings is kept forever, and a later request is credited with the blocks
//! at the start of its prompt that are already kept, like vLLM's automatic
//! prefix caching with unlimited memory. It lets a test check that a client
//! reproduces a trace's prefix sharing exactly.

use std::collections::HashSet;
use std::sync::Mutex;

pub struct PrefixCache {
    /// Words per block; 0 turns the cache off.
    block: u64,
    /// Hashes of the word prefixes that end a kept block.
    kept: Mutex<HashSet<u64>>,
}

impl PrefixCache {
    pub fn new(block: u64) -> Self {
        PrefixCache {
            block,
            kept: Mutex::new(HashSet::new()),
        }
    }

    /// Forgets every kept block (`POST /reset_prefix_cache`).
    pub fn clear(&self) {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Tokens of a prompt (given by its block prefix hashes) found in the
    /// cache; its blocks are kept from now on.
    pub fn cached_tokens(&self, prefix_hashes: &[u64]) -> u64 {
        if self.block == 0 {
            return 0;
        }
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let hits = prefix_hashes
            .iter()
            .take_while(|h| kept.contains(h))
            .count() as u64;
        kept.extend(prefix_hashes.iter().copied());
        hits * self.block
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::request::{parse, Kind};

    fn hashes(prompt: &str) -> Vec<u64> {
        let body = format!(r#"{{"prompt":"{prompt}"}}"#);
        parse(Kind::Completion, body.as_bytes(), 2)
            .unwrap()
            .prefix_hashes
    }

    #[test]
    fn leading_full_blocks_hit() {
        let c = PrefixCache::new(2);
        assert_eq!(hashes("a b c d e"), hashes("a b c d f")[..2]);
        assert_eq!(c.cached_tokens(&hashes("a b c d e")), 0);
        // Same first two blocks; the partial fifth word never counts.
        assert_eq!(c.cached_tokens(&hashes("a b c d f")), 4);
        // A block equal in words but after a different prefix is a miss.
        assert_eq!(c.cached_tokens(&hashes("x y c d")), 0);
        assert_eq!(c.cached_tokens(&hashes("a b x y c d")), 2);
        // Whitespace does not matter, words do.
        assert_eq!(c.cached_tokens(&hashes("a  b\\nc d")), 4);
    }

    #[test]
    fn off_is_zero() {
        let c = PrefixCache::new(0);
        assert_eq!(c.cached_tokens(&[1, 2]), 0);
        assert_eq!(c.cached_tokens(&[1, 2]), 0);
    }
}
