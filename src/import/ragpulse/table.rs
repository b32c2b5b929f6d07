//! RAGPulse's two tables: a component's chunks (id -> token length and the
//! chunk's number in block keys), and the content-addressed block ids.

use std::collections::HashMap;

use crate::hash::splitmix64;

/// The chunk-id map's hasher: foldhash's, fixed (ids come from files, not
/// from an adversary; SipHash was an eighth of the run time).
pub type Fast = foldhash::fast::FixedState;

/// A chunk as a prompt uses it: its number in block keys and its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub no: u32,
    pub tokens: u64,
}

/// One component's chunks by id. Chunk ids are small dense integers in
/// the real files (a few thousand of each kind), so a vector indexed by
/// id when that costs at most a few times the entries, a hash map
/// otherwise (ids from an unknown source may be anything).
#[derive(Debug)]
pub enum Chunks {
    Dense(Vec<Option<Chunk>>),
    Sparse(HashMap<u64, Chunk, Fast>),
}

impl Chunks {
    /// The table of `(id, tokens)` in file order, numbered from `first` in
    /// that order; a repeated id keeps its last line (a map's insert).
    pub fn new(entries: &[(u64, u64)], first: u32) -> Chunks {
        let numbered = entries
            .iter()
            .zip(first..)
            .map(|(&(id, tokens), no)| (id, Chunk { no, tokens }));
        let top = entries.iter().map(|&(id, _)| id).max().unwrap_or(0);
        // Dense when the vector is at most ~4 entries' worth of map slots.
        let dense_limit = entries.len().saturating_mul(4).saturating_add(1024);
        match usize::try_from(top) {
            Ok(top) if top < dense_limit => {
                let mut v = vec![None; top + 1];
                for (id, c) in numbered {
                    v[id as usize] = Some(c);
                }
                Chunks::Dense(v)
            }
            _ => Chunks::Sparse(numbered.collect()),
        }
    }

    pub fn get(&self, id: u64) -> Option<Chunk> {
        match self {
            Chunks::Dense(v) => usize::try_from(id)
                .ok()
                .and_then(|i| v.get(i).copied().flatten()),
            Chunks::Sparse(m) => m.get(&id).copied(),
        }
    }
}

/// Content-addressed block ids: a block's key is its parent's id and the
/// pieces it covers (chunk numbers and the token the first starts at);
/// keys get dense ids in first-seen order.
///
/// Memory is O(distinct blocks), kept small: a chunk's length is fixed for
/// the folder its table came from, so a block's pieces follow from the
/// token its first piece starts at and the chunks it covers in order (a
/// piece after the first starts at its chunk's token 0; every piece but the
/// last runs to its chunk's end; the last ends at the block's end, or at
/// its chunk's end in a prompt's last, partial block, and the two cannot
/// cover the same chunks: the chunks' lengths sum to more than B in the
/// one and less in the other). A key is then `[parent, start, chunk
/// numbers…]` in u32 words (a prompt's chunks are at most
/// `limits::MAX_ROW_TOKENS` long, so `start` fits; ids are u32, the root's
/// parent `u32::MAX`), the chunks numbered once per folder by the caller,
/// keys packed in one arena.
///
/// The table holds each block's id and the upper half of its key's hash
/// in one u64, and hashes by that half: growing the table then reads no
/// key (re-reading every key at random places in the arena was a quarter
/// of the run time, `perf record`), and a lookup reads a key only when 32
/// bits of hash agree.
pub struct BlockIds {
    block: u64,
    /// Every block's key, back to back; `starts[id]` is where block `id`'s begins.
    keys: Vec<u32>,
    starts: Vec<usize>,
    /// `hash << 32 | id` of every block.
    table: hashbrown::HashTable<u64>,
    /// The key being built.
    scratch: Vec<u32>,
}

/// A key that does not fit its u32 words: more distinct blocks than ids
/// (one is kept for the root's parent), or a piece starting past token
/// 2^32 of its chunk (which a row within `limits::MAX_ROW_TOKENS` never
/// has).
#[derive(Debug)]
pub struct Overflow;

/// The id of the block before a prompt's first.
const ROOT: u32 = u32::MAX;

impl BlockIds {
    pub fn new(block: u64) -> Self {
        BlockIds {
            block: block.max(1),
            keys: Vec::new(),
            starts: vec![0],
            table: hashbrown::HashTable::new(),
            scratch: Vec::new(),
        }
    }

    /// Blocks named so far.
    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Forgets every block (the next ids are new ones): chunk numbers of
    /// another component folder name other content.
    pub fn forget(&mut self) {
        self.table.clear();
    }

    /// The id of the block whose key is in `scratch`.
    fn intern(&mut self) -> Result<u32, Overflow> {
        let hash = key_hash(&self.scratch);
        let (keys, starts, scratch) = (&self.keys, &self.starts, &self.scratch);
        let same = |&entry: &u64| {
            let i = entry as u32 as usize;
            entry >> 32 == u64::from(hash) && keys[starts[i]..starts[i + 1]] == scratch[..]
        };
        if let Some(&entry) = self.table.find(table_hash(hash), same) {
            return Ok(entry as u32);
        }
        let id = u32::try_from(self.len())
            .ok()
            .filter(|&id| id != ROOT)
            .ok_or(Overflow)?;
        self.keys.extend_from_slice(&self.scratch);
        self.starts.push(self.keys.len());
        let entry = u64::from(hash) << 32 | u64::from(id);
        self.table
            .insert_unique(table_hash(hash), entry, |&e| table_hash((e >> 32) as u32));
        Ok(id)
    }

    /// Starts the key of a block after `parent` whose first piece starts
    /// at token `start` of its chunk.
    fn begin(&mut self, parent: u32, start: u32) {
        self.scratch.clear();
        self.scratch.extend([parent, start]);
    }

    /// The block ids of a prompt made of `chunks` in order, into `out`:
    /// `ceil(total / B)` ids, the last block partial. A chunk is at most
    /// u32::MAX tokens (the caller's limit on a prompt keeps it far below).
    pub fn prompt(&mut self, chunks: &[Chunk], out: &mut Vec<u64>) -> Result<(), Overflow> {
        out.clear();
        let (mut parent, mut fill) = (ROOT, 0u64);
        self.begin(parent, 0);
        for &Chunk { no, tokens } in chunks {
            let mut at = 0u64;
            while at < tokens {
                if fill == 0 {
                    let start = u32::try_from(at).map_err(|_| Overflow)?;
                    self.begin(parent, start);
                }
                let take = (tokens - at).min(self.block - fill);
                self.scratch.push(no);
                at += take;
                fill += take;
                if fill == self.block {
                    parent = self.intern()?;
                    out.push(u64::from(parent));
                    fill = 0;
                }
            }
        }
        if fill > 0 {
            out.push(u64::from(self.intern()?));
        }
        Ok(())
    }
}

/// A key's 32-bit hash: a multiply per word, then one SplitMix64 step to
/// spread it, its upper half kept (foldhash's byte-slice path was a
/// seventh of the run time).
fn key_hash(words: &[u32]) -> u32 {
    let h = words.iter().fold(words.len() as u64, |h, &w| {
        (h ^ u64::from(w)).wrapping_mul(crate::hash::GOLDEN_GAMMA)
    });
    (splitmix64(h) >> 32) as u32
}

/// The table's hash of a key's 32-bit hash: hashbrown takes the bucket
/// from the low bits and a tag from the top seven, so both get all 32.
fn table_hash(h: u32) -> u64 {
    u64::from(h) << 32 | u64::from(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk numbered `no` of `tokens` tokens.
    fn c(no: u32, tokens: u64) -> Chunk {
        Chunk { no, tokens }
    }

    #[test]
    fn three_requests_sharing_a_system_prompt_and_passages() {
        // B = 4. Chunks: system prompt S (number 1) of 6 tokens; passages
        // P1 (10) of 3 and P2 (11) of 2; user inputs U1, U2, U3 (20, 21,
        // 22) of 1, 2, 1; a template T of 2 tokens (30).
        let mut b = BlockIds::new(4);
        let mut ids = Vec::new();
        let (s, p1, p2) = (c(1, 6), c(10, 3), c(11, 2));
        // A = S P1 P2 U1, 12 tokens:
        //   S[0,4) -> 0;  S[4,6) P1[0,2) -> 1;  P1[2,3) P2[0,2) U1[0,1) -> 2.
        b.prompt(&[s, p1, p2, c(20, 1)], &mut ids).unwrap();
        assert_eq!(ids, [0, 1, 2]);
        // B = S P1 P2 U2, 13 tokens: the first two blocks as A's; the third
        // holds U2[0,1) instead of U1[0,1) -> 3; U2[1,2) is a partial 4th -> 4.
        b.prompt(&[s, p1, p2, c(21, 2)], &mut ids).unwrap();
        assert_eq!(ids, [0, 1, 3, 4]);
        // C = S P2 P1 U3 + 2 template tokens, 14 tokens: S[0,4) -> 0;
        // S[4,6) P2[0,2) differs from A's second block -> 5;
        // P1[0,3) U3[0,1) -> 6; the template T[0,2) -> 7.
        b.prompt(&[s, p2, p1, c(22, 1), c(30, 2)], &mut ids)
            .unwrap();
        assert_eq!(ids, [0, 5, 6, 7]);
        // A again shares everything; a prompt of exactly 8 tokens of S then
        // P1 has two blocks.
        b.prompt(&[s, p1, p2, c(20, 1)], &mut ids).unwrap();
        assert_eq!(ids, [0, 1, 2]);
        b.prompt(&[s, c(10, 2)], &mut ids).unwrap();
        assert_eq!(ids, [0, 1]);
        // The same pieces after another parent are another block: P1[0,3)
        // U3[0,1) came after block 5 in C; after a 4-token system prompt
        // S' (2) ... S'[0,4) -> 8, then P1[0,3) U3[0,1) -> 9, not 6.
        b.prompt(&[c(2, 4), p1, c(22, 1)], &mut ids).unwrap();
        assert_eq!(ids, [8, 9]);
        // After `forget` the same prompt gets new ids.
        b.forget();
        b.prompt(&[s, p1, p2, c(20, 1)], &mut ids).unwrap();
        assert_eq!(ids, [10, 11, 12]);
    }

    #[test]
    fn a_partial_block_is_not_a_full_one() {
        // S of 5 tokens at B = 4: [0,4) -> 0, then [4,5) alone -> 1; a longer
        // prompt S + P covers S[4,5) P[0,3) in its second block -> 2.
        let mut b = BlockIds::new(4);
        let mut ids = Vec::new();
        b.prompt(&[c(1, 5)], &mut ids).unwrap();
        assert_eq!(ids, [0, 1]);
        b.prompt(&[c(1, 5), c(7, 3)], &mut ids).unwrap();
        assert_eq!(ids, [0, 2]);
    }

    #[test]
    fn chunks_dense_and_sparse_answer_alike() {
        // Ids 5, 7 and 5 again (the last line wins, numbered in file order).
        let entries = [(5, 100), (7, 3), (5, 40)];
        let dense = Chunks::new(&entries, 10);
        assert!(matches!(dense, Chunks::Dense(_)));
        let far = [(5, 100), (7, 3), (5, 40), (u64::MAX, 1)];
        let sparse = Chunks::new(&far, 10);
        assert!(matches!(sparse, Chunks::Sparse(_)));
        for t in [&dense, &sparse] {
            assert_eq!(t.get(5), Some(c(12, 40)));
            assert_eq!(t.get(7), Some(c(11, 3)));
            assert_eq!(t.get(6), None);
            assert_eq!(t.get(1 << 40), None);
        }
        assert_eq!(sparse.get(u64::MAX), Some(c(13, 1)));
        assert_eq!(Chunks::new(&[], 0).get(0), None);
    }
}
