//! Prompt text for rows that give only lengths and hash ids.
//!
//! Every hash id maps to one block of text that depends only on (id, seed):
//! equal ids give equal text, so a server's prefix cache sees exactly the
//! sharing the trace describes. A block is B words, each a common English
//! word with a leading space, which common BPE tokenizers (GPT-2/cl100k/
//! o200k, Llama 3, Qwen, DeepSeek) encode as exactly one token each and never
//! merge across the space. With `--tokenizer`, only words that are one token
//! in that tokenizer are used, and sample prompts are re-encoded to check.

use anyhow::{bail, Result};

use crate::hash::{splitmix64, SplitMix64};

/// Candidate words; each is written with a leading space.
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "she", "other", "its", "may",
    "these", "about", "them", "than", "some", "time", "into", "only", "two", "new", "could",
    "what", "first", "also", "any", "like", "our", "then", "made", "out", "up", "over", "after",
    "years", "most", "such", "used", "people", "many", "where", "through", "well", "those", "how",
    "state", "between", "each", "world", "did", "under", "same", "while", "work", "life",
    "because", "both", "being", "before", "should", "very", "long", "year", "during", "use", "day",
    "back", "three", "make", "even", "way", "just", "much", "good", "great", "own", "part", "take",
    "number", "high", "last", "small", "found", "since", "another", "war", "down", "general",
    "system", "must", "still", "place", "old", "end", "large", "school", "city", "country",
    "group", "water", "point", "house", "name", "home", "power", "second", "family", "form",
    "week", "early", "public", "order", "area", "case", "without", "left", "right", "often",
    "never", "local", "show", "open", "later", "next", "team", "game", "water", "market", "money",
    "music", "data", "light", "line", "side", "book", "field", "film", "car", "road", "body",
    "death", "power", "head", "hand", "mind", "word", "story", "child", "result", "level",
    "health", "church", "club", "free", "full", "real", "true", "black", "white", "red", "green",
    "blue", "north", "south", "west", "east", "river", "land", "sea", "air", "fire", "king", "law",
    "art", "food", "love", "page", "plan", "rate", "room", "role", "rule", "site", "size", "term",
    "test", "type", "unit", "view", "wall", "war", "wind", "town", "tree", "star", "sun", "moon",
    "song", "voice", "table", "paper", "phone", "price", "report", "service", "support", "study",
    "theory", "energy", "office", "period", "policy", "process", "program", "project", "question",
    "reason", "record", "research", "section", "source", "space", "stage", "street",
];

/// The words a prompt is made of.
#[derive(Debug, Clone)]
pub struct Vocab {
    /// Each word with its leading space.
    words: Vec<String>,
}

impl Vocab {
    /// The built-in words, assumed to be one token each.
    pub fn builtin() -> Vocab {
        let mut words: Vec<String> = Vec::with_capacity(WORDS.len());
        for w in WORDS {
            let w = format!(" {w}");
            if !words.contains(&w) {
                words.push(w);
            }
        }
        Vocab { words }
    }

    /// The built-in words that `tok` encodes as exactly one token.
    pub fn for_tokenizer(tok: &tokenizers::Tokenizer) -> Result<Vocab> {
        let mut kept = Vec::new();
        for w in Vocab::builtin().words {
            match tok.encode(w.as_str(), false) {
                Ok(enc) if enc.get_ids().len() == 1 => kept.push(w),
                Ok(_) => {}
                Err(e) => bail!("tokenizer failed on {w:?}: {e}"),
            }
        }
        if kept.len() < 32 {
            bail!(
                "the tokenizer encodes only {} of the {} built-in words as one token; \
                 it cannot be used to build exact prompts",
                kept.len(),
                WORDS.len()
            );
        }
        Ok(Vocab { words: kept })
    }

    pub fn len(&self) -> usize {
        self.words.len()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
}

/// Builds prompt text of an exact length in tokens.
#[derive(Debug, Clone)]
pub struct Synth {
    vocab: Vocab,
    seed: u64,
    block_size: u64,
}

/// Where a row's prompt text comes from, for the seeded word stream.
#[derive(Debug, Clone, Copy)]
enum Stream {
    /// The block named by a hash id: shared by every row that names it.
    Block(u64),
    /// Text that belongs to one row (by its line number): no hash ids, or
    /// the tail beyond its hashed blocks.
    Row(u64),
}

impl Synth {
    pub fn new(vocab: Vocab, seed: u64, block_size: u64) -> Synth {
        Synth {
            vocab,
            seed,
            block_size,
        }
    }

    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    /// Appends the prompt of a row with `input_length` tokens and these hash
    /// ids: block i is the first `min(B, len - i*B)` tokens of its block;
    /// tokens beyond the hashed blocks (or all of them, without ids) are
    /// unique to the row.
    pub fn prompt(&self, line: u64, input_length: u64, hash_ids: &[u64], out: &mut String) {
        let b = self.block_size;
        let mut left = input_length;
        for &id in hash_ids {
            if left == 0 {
                break;
            }
            let take = left.min(b);
            self.words(Stream::Block(id), take, out);
            left -= take;
        }
        if left > 0 {
            self.words(Stream::Row(line), left, out);
        }
    }

    fn words(&self, stream: Stream, count: u64, out: &mut String) {
        let key = match stream {
            Stream::Block(id) => splitmix64(id ^ 0x626c_6f63_6b00_0000),
            Stream::Row(line) => splitmix64(line ^ 0x726f_7700_0000_0000),
        };
        let mut rng = SplitMix64::new(self.seed ^ key);
        let n = self.vocab.words.len() as u64;
        for _ in 0..count {
            out.push_str(&self.vocab.words[(rng.next_u64() % n) as usize]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<&str> {
        s.split(' ').skip(1).collect()
    }

    fn synth(seed: u64) -> Synth {
        Synth::new(Vocab::builtin(), seed, 4)
    }

    #[test]
    fn equal_ids_give_equal_text_and_lengths_are_exact() {
        let s = synth(0);
        let (mut a, mut b) = (String::new(), String::new());
        s.prompt(1, 10, &[7, 8, 9], &mut a);
        s.prompt(2, 12, &[7, 8, 5], &mut b);
        let (wa, wb) = (words(&a), words(&b));
        assert_eq!((wa.len(), wb.len()), (10, 12));
        // Blocks 7 and 8 are shared: 8 words; block 9 vs 5 differ.
        assert_eq!(wa[..8], wb[..8]);
        assert_ne!(wa[8..10], wb[8..10]);
    }

    #[test]
    fn partial_block_is_the_start_of_its_full_block() {
        let s = synth(3);
        let (mut part, mut full) = (String::new(), String::new());
        s.prompt(1, 6, &[1, 2], &mut part);
        s.prompt(2, 8, &[1, 2], &mut full);
        assert_eq!(words(&part)[..], words(&full)[..6]);
    }

    #[test]
    fn rows_without_ids_and_tails_are_unique_to_the_row() {
        let s = synth(0);
        let (mut a, mut b, mut a2) = (String::new(), String::new(), String::new());
        s.prompt(1, 40, &[], &mut a);
        s.prompt(2, 40, &[], &mut b);
        s.prompt(1, 40, &[], &mut a2);
        assert_eq!(a, a2);
        assert_ne!(words(&a)[..8], words(&b)[..8]);
        // Tail beyond the hashed blocks: shared block, then row text.
        let (mut t1, mut t2) = (String::new(), String::new());
        s.prompt(5, 12, &[9], &mut t1);
        s.prompt(6, 12, &[9], &mut t2);
        assert_eq!(words(&t1)[..4], words(&t2)[..4]);
        assert_ne!(words(&t1)[4..], words(&t2)[4..]);
    }

    #[test]
    fn seed_changes_the_text() {
        let (mut a, mut b) = (String::new(), String::new());
        synth(1).prompt(1, 16, &[1, 2, 3, 4], &mut a);
        synth(2).prompt(1, 16, &[1, 2, 3, 4], &mut b);
        assert_ne!(a, b);
    }

    #[test]
    fn builtin_words_are_distinct_single_words() {
        let v = Vocab::builtin();
        assert!(v.len() >= 200);
        for w in &v.words {
            assert!(w.starts_with(' ') && w[1..].chars().all(|c| c.is_ascii_lowercase()));
        }
    }
}
