//! From a trace row to the engine's chained block hashes.
//!
//! A trace hash id names `B` tokens (the trace's block size); the engine
//! works in blocks of `b` tokens (16 by default). Engine block `k` covers
//! tokens `[k·b, (k+1)·b)`; its hash chains the previous block's hash with
//! the trace ids of the tokens it covers and its offset in the first of
//! them, so equal ids give equal engine blocks exactly and a block's hash
//! names its whole prefix (as vLLM's chained block hashes do). Tokens past
//! the row's hash ids are the row's own text: they get ids of their own,
//! derived from the row's `salt`, shared with no other row.

use crate::hash::{splitmix64, stable_hash, GOLDEN_GAMMA};

/// The hash before the first block.
const ROOT: u64 = 0x6d63_7472_6163_6531;
/// Marks ids made up for a row's unhashed tail, so they never equal a
/// trace's own ids.
const TAIL: u64 = 0x7461_696c_0000_0000;

/// The next chained hash: the previous hash, one trace id, an offset.
pub fn chain(prev: u64, id: u64, offset: u64) -> u64 {
    splitmix64(prev.rotate_left(23) ^ splitmix64(id ^ offset.wrapping_mul(GOLDEN_GAMMA)))
}

/// The engine blocks of a synthetic row: `input_length` tokens described by
/// `hash_ids` of `trace_block` tokens each, cut into blocks of
/// `engine_block` tokens (the last may be partial). `salt` names the row
/// (its line number, say) for the tokens its ids do not cover.
pub fn row_blocks(
    hash_ids: &[u64],
    input_length: u64,
    trace_block: u64,
    engine_block: u64,
    salt: u64,
) -> Vec<u64> {
    let (tb, eb) = (trace_block.max(1), engine_block.max(1));
    let n = input_length.div_ceil(eb);
    let mut out = Vec::with_capacity(n as usize);
    let id_at = |t: u64| -> u64 {
        match hash_ids.get(t as usize) {
            Some(&id) => id,
            None => splitmix64(TAIL ^ splitmix64(salt)).wrapping_add(t),
        }
    };
    let mut prev = ROOT;
    for k in 0..n {
        let start = k * eb;
        let end = (start + eb).min(input_length);
        let (first, last) = (start / tb, (end - 1) / tb);
        let mut h = chain(prev, id_at(first), start % tb);
        // A block straddling two trace blocks depends on both.
        for t in first + 1..=last {
            h = chain(h, id_at(t), 0);
        }
        out.push(h);
        prev = h;
    }
    out
}

/// The engine blocks of a literal prompt, one token per whitespace-separated
/// word (an approximation used when no tokenizer is given). Returns the
/// hashes and the token count.
pub fn text_blocks(text: &str, engine_block: u64) -> (Vec<u64>, u64) {
    let words: Vec<u64> = text
        .split_whitespace()
        .map(|w| stable_hash(0, w.as_bytes()))
        .collect();
    (token_blocks(&words, engine_block), words.len() as u64)
}

/// The engine blocks of a token sequence (token ids, or word hashes).
pub fn token_blocks(tokens: &[u64], engine_block: u64) -> Vec<u64> {
    let eb = engine_block.max(1) as usize;
    let mut prev = ROOT;
    tokens
        .chunks(eb)
        .map(|c| {
            let mut h = prev;
            for (i, &t) in c.iter().enumerate() {
                h = chain(h, t, i as u64);
            }
            prev = h;
            h
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_ids_share_engine_blocks_exactly() {
        // Rows of 512-token trace blocks: [1,2,3] and [1,2,9] share the first
        // 1024 tokens = 64 engine blocks of 16, and nothing after.
        let a = row_blocks(&[1, 2, 3], 1500, 512, 16, 1);
        let b = row_blocks(&[1, 2, 9], 1500, 512, 16, 2);
        assert_eq!(a.len(), 94); // ceil(1500 / 16)
        let shared = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        assert_eq!(shared, 64);
        // The same ids on another row give the same blocks (salt unused).
        assert_eq!(a, row_blocks(&[1, 2, 3], 1500, 512, 16, 77));
    }

    #[test]
    fn an_unhashed_tail_is_the_rows_own() {
        // 2 ids of 16 tokens cover 32 of 48 tokens; block 2 is the row's own.
        let a = row_blocks(&[4, 5], 48, 16, 16, 10);
        let b = row_blocks(&[4, 5], 48, 16, 16, 11);
        assert_eq!(&a[..2], &b[..2]);
        assert_ne!(a[2], b[2]);
    }

    #[test]
    fn blocks_straddling_trace_blocks_depend_on_both_ids() {
        // Trace blocks of 24, engine blocks of 16: engine block 1 covers
        // tokens 16..32 = id0's last 8 and id1's first 8.
        let a = row_blocks(&[1, 2], 48, 24, 16, 0);
        let b = row_blocks(&[1, 3], 48, 24, 16, 0);
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
    }

    #[test]
    fn text_rows_hash_their_words() {
        let (a, n) = text_blocks("a b c d e", 2);
        let (b, _) = text_blocks("a  b\nc d x", 2);
        assert_eq!(n, 5);
        assert_eq!(a.len(), 3);
        assert_eq!(&a[..2], &b[..2]);
        assert_ne!(a[2], b[2]);
    }
}
