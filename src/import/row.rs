//! What importers add to the one row writer: rows are written by
//! `record::RowWriter` (the style and field order of the Mooncake release
//! files, shared with mc-gen and nat2mc); `SynthIds` makes up block ids for
//! formats without them.

/// The row writer under the name the import sink hands to each format.
pub use crate::record::RowWriter as ObjWriter;

/// Made-up block ids for formats without prefix information: every row gets
/// fresh ids (`ceil(input_length / B)` of them), so nothing is shared — the
/// only pattern that claims nothing the source does not say.
#[derive(Clone)]
pub struct SynthIds {
    block_size: u64,
    next: u64,
    ids: Vec<u64>,
}

impl SynthIds {
    pub fn new(block_size: u64) -> Self {
        SynthIds {
            block_size: block_size.max(1),
            next: 0,
            ids: Vec::new(),
        }
    }

    pub fn next_row(&mut self, input_length: u64) -> &[u64] {
        let n = input_length.div_ceil(self.block_size);
        self.ids.clear();
        self.ids.extend(self.next..self.next + n);
        self.next += n;
        &self.ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthesised_ids_are_fresh_per_row() {
        let mut s = SynthIds::new(512);
        assert_eq!(s.next_row(1024), [0, 1]);
        assert_eq!(s.next_row(1025), [2, 3, 4]);
        assert_eq!(s.next_row(0), [] as [u64; 0]);
        assert_eq!(s.next_row(1), [5]);
    }
}
