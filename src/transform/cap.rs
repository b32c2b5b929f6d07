//! `mc-cap`: length caps. Rows longer than `--max-isl` are truncated (or
//! dropped, AIPerf profile's rule) and `output_length` is capped at `--max-osl`.
//!
//! A truncated row keeps the ids of the blocks that still hold tokens. When
//! the cap cuts a block short, that block's content changes, so it gets a
//! fresh id: the same (id, new size) always gets the same fresh id, so rows
//! cut at the same place still share their last block. Fresh ids are drawn
//! from `--fresh-id-base` upward, and an input id at or above the base is an
//! error, so they can never collide with an input id.

use std::collections::HashMap;

use crate::blocks;
use crate::cli::{self, Emit, IoArgs};
use crate::error::{RecordError, Result};
use crate::record::{self, Edit, Field, Number, Record};

/// Default first fresh id: far above real traces' ids, and below 2^53 so
/// every JSON reader (including JavaScript and float-based ones) keeps it exact.
pub const DEFAULT_FRESH_ID_BASE: u64 = 1 << 48;

#[derive(Debug, Clone)]
pub struct CapOptions {
    pub max_isl: Option<u64>,
    pub drop: bool,
    pub max_osl: Option<u64>,
    pub block_size: u64,
    pub fresh_id_base: u64,
}

pub fn run(tool: &str, io: &IoArgs, opts: &CapOptions) -> Result<()> {
    if opts.block_size == 0 {
        return Err(cli::usage("--block-size must be at least 1"));
    }
    if opts.drop && opts.max_isl.is_none() {
        return Err(cli::usage("--drop needs --max-isl"));
    }
    let mut cap = Capper::new(opts.clone());
    cli::run_filter(tool, io, |rec, out| cap.apply(rec, out))?;
    if opts.drop {
        if let Some(n) = opts.max_isl {
            eprintln!(
                "{tool}: dropped {} row{} longer than {n} tokens",
                cap.dropped,
                if cap.dropped == 1 { "" } else { "s" }
            );
        }
    }
    Ok(())
}

pub struct Capper {
    opts: CapOptions,
    cuts: Cuts,
    pub dropped: u64,
    pub truncated: u64,
    ids: Vec<u64>,
    values: [Vec<u8>; 3],
}

impl Capper {
    pub fn new(opts: CapOptions) -> Self {
        Capper {
            cuts: Cuts {
                fresh: HashMap::new(),
                next: opts.fresh_id_base,
            },
            opts,
            dropped: 0,
            truncated: 0,
            ids: Vec::new(),
            values: Default::default(),
        }
    }

    pub fn apply(
        &mut self,
        rec: &Record<'_>,
        out: &mut Vec<u8>,
    ) -> std::result::Result<Emit, RecordError> {
        let [isl_text, ids_text, osl_text] = &mut self.values;
        let mut edits: Vec<Edit<'_>> = Vec::new();
        if let Some(max) = self.opts.max_isl {
            let len = rec.uint(Field::InputLength)?;
            if self.opts.drop {
                if len.is_some_and(|l| l > max) {
                    self.dropped += 1;
                    return Ok(Emit::Dropped);
                }
            } else {
                // Ids are read on every row so an id in the fresh range is
                // caught wherever it appears, not only on cut rows.
                let has_ids = rec.hash_ids_into(&mut self.ids)?;
                if let Some(&big) = self.ids.iter().find(|&&h| h >= self.opts.fresh_id_base) {
                    return Err(RecordError::field(
                        "hash_ids",
                        format!(
                            "id {big} is in mc-cap's fresh-id range (>= {}); pass a larger --fresh-id-base",
                            self.opts.fresh_id_base
                        ),
                    ));
                }
                if let Some(len) = len.filter(|&l| l > max) {
                    self.truncated += 1;
                    isl_text.clear();
                    record::write_number(Number::Int(max as i64), isl_text);
                    edits.push(Edit {
                        field: Field::InputLength,
                        value: isl_text,
                    });
                    if has_ids {
                        self.cuts.cut(&mut self.ids, len, max, self.opts.block_size);
                        ids_text.clear();
                        record::write_id_array_like(&self.ids, rec.raw(Field::HashIds), ids_text);
                        edits.push(Edit {
                            field: Field::HashIds,
                            value: ids_text,
                        });
                    }
                }
            }
        }
        if let Some(max) = self.opts.max_osl {
            if rec.uint(Field::OutputLength)?.is_some_and(|o| o > max) {
                osl_text.clear();
                record::write_number(Number::Int(max as i64), osl_text);
                edits.push(Edit {
                    field: Field::OutputLength,
                    value: osl_text,
                });
            }
        }
        if edits.is_empty() {
            return Ok(Emit::Unchanged);
        }
        rec.write_edited(&mut edits, out);
        out.push(b'\n');
        Ok(Emit::Written)
    }
}

/// Fresh ids for blocks a cap cut short.
struct Cuts {
    /// (id of a cut block, tokens left in it) -> its fresh id.
    fresh: HashMap<(u64, u64), u64>,
    next: u64,
}

impl Cuts {
    /// Cuts `ids` (a row of `len` tokens) down to `max` tokens at block size `b`.
    fn cut(&mut self, ids: &mut Vec<u64>, len: u64, max: u64, b: u64) {
        let keep = blocks::blocks_for(max, b).min(ids.len() as u64);
        ids.truncate(keep as usize);
        if keep == 0 {
            return;
        }
        let last = keep - 1;
        let left = blocks::block_tokens(last, max, b);
        if left < blocks::block_tokens(last, len, b) {
            let next = &mut self.next;
            let fresh = *self
                .fresh
                .entry((ids[last as usize], left))
                .or_insert_with(|| {
                    let f = *next;
                    *next += 1;
                    f
                });
            ids[last as usize] = fresh;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capper(max_isl: u64, b: u64) -> Capper {
        Capper::new(CapOptions {
            max_isl: Some(max_isl),
            drop: false,
            max_osl: None,
            block_size: b,
            fresh_id_base: 1000,
        })
    }

    fn cut(c: &mut Capper, len: u64, max: u64) {
        c.cuts.cut(&mut c.ids, len, max, c.opts.block_size);
    }

    #[test]
    fn cut_on_a_block_edge_keeps_ids() {
        let mut c = capper(20, 10);
        c.ids = vec![1, 2, 3, 4];
        cut(&mut c, 35, 20);
        assert_eq!(c.ids, vec![1, 2]);
    }

    #[test]
    fn cut_inside_a_block_gives_it_a_shared_fresh_id() {
        let mut c = capper(25, 10);
        c.ids = vec![1, 2, 3, 4];
        cut(&mut c, 35, 25);
        // Block 3 (tokens 20..30) keeps 5 tokens: new content, new id 1000.
        assert_eq!(c.ids, vec![1, 2, 1000]);
        c.ids = vec![1, 2, 3];
        cut(&mut c, 28, 25);
        // Same block cut to the same 5 tokens: the same fresh id.
        assert_eq!(c.ids, vec![1, 2, 1000]);
        c.ids = vec![7, 8, 9];
        cut(&mut c, 30, 25);
        assert_eq!(c.ids, vec![7, 8, 1001]);
    }

    #[test]
    fn partial_last_block_that_still_fits_is_unchanged() {
        let mut c = capper(25, 10);
        // 23 tokens: not cut at all (the caller only cuts rows longer than max).
        // A row of 27 tokens cut to 25: its last block goes from 7 to 5 tokens.
        c.ids = vec![1, 2, 3];
        cut(&mut c, 27, 25);
        assert_eq!(c.ids, vec![1, 2, 1000]);
        // An unhashed tail: 2 ids for 40 tokens, cut to 25 keeps both, unchanged.
        c.ids = vec![5, 6];
        cut(&mut c, 40, 25);
        assert_eq!(c.ids, vec![5, 6]);
    }
}
