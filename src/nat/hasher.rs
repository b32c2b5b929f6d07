//! Block ids for token sequences: block i of a prompt is named by the
//! distinct token prefix `tokens[0 .. min((i+1)B, n)]`, numbered in order of
//! first appearance over the whole run. Prefixes are kept exactly, as
//! (parent block id, block tokens) keys, so two different prefixes can never
//! share an id (no hashing that could collide).

use std::collections::HashMap;

const ROOT: u32 = u32::MAX;

pub struct BlockHasher {
    block_size: usize,
    /// [parent id, tokens of the block...] -> block id.
    ids: HashMap<Box<[u32]>, u32>,
    key: Vec<u32>,
}

impl BlockHasher {
    pub fn new(block_size: usize) -> Self {
        BlockHasher {
            block_size,
            ids: HashMap::new(),
            key: Vec::new(),
        }
    }

    /// Appends the ids of `tokens`' blocks (the last may be partial) to `out`.
    pub fn hash(&mut self, tokens: &[u32], out: &mut Vec<u64>) {
        let mut parent = ROOT;
        for block in tokens.chunks(self.block_size) {
            self.key.clear();
            self.key.push(parent);
            self.key.extend_from_slice(block);
            let id = match self.ids.get(self.key.as_slice()) {
                Some(&id) => id,
                None => {
                    let id = self.ids.len() as u32;
                    self.ids.insert(self.key.as_slice().into(), id);
                    id
                }
            };
            out.push(u64::from(id));
            parent = id;
        }
    }

    pub fn distinct_blocks(&self) -> usize {
        self.ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(h: &mut BlockHasher, tokens: &[u32]) -> Vec<u64> {
        let mut out = Vec::new();
        h.hash(tokens, &mut out);
        out
    }

    #[test]
    fn prefixes_share_ids_and_grown_tails_get_new_ones() {
        let mut h = BlockHasher::new(2);
        // [1 2][3]: ids 0, 1.
        assert_eq!(ids(&mut h, &[1, 2, 3]), vec![0, 1]);
        // [1 2][3 4][5]: the full [3 4] is a new prefix (2), [5] new (3).
        assert_eq!(ids(&mut h, &[1, 2, 3, 4, 5]), vec![0, 2, 3]);
        // Back to an earlier prefix: the same ids.
        assert_eq!(ids(&mut h, &[1, 2, 3]), vec![0, 1]);
        // Same block tokens after another prefix: another id.
        assert_eq!(ids(&mut h, &[9, 9, 3, 4]), vec![4, 5]);
        assert_eq!(ids(&mut h, &[]), Vec::<u64>::new());
        assert_eq!(h.distinct_blocks(), 6);
    }
}
