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

use crate::blocks::{self, BlockSize, DEFAULT_BLOCK_SIZE};
use crate::error::{Error, RecordError, Result};
use crate::filter::{self, Ctx, Emit, IoArgs, Step};
use crate::record::{self, Edit, Field, Number, Record};

/// Largest cap, and largest fresh id: 2^63 - 1, the largest integer every
/// tool of the toolkit (and AIPerf) reads as a non-negative number.
const MAX_INT: u64 = i64::MAX as u64;

/// Default first fresh id: far above real traces' ids, and below 2^53 so
/// every JSON reader (including JavaScript and float-based ones) keeps it exact.
pub const DEFAULT_FRESH_ID_BASE: u64 = 1 << 48;

/// Cap prompt and answer lengths in a Mooncake trace.
///
/// Rows with input_length above --max-isl are truncated to that many tokens,
/// keeping the hash ids of the blocks that still hold tokens, so every row
/// stays consistent; a block the cap cuts short gets a fresh id (the same for
/// every row cut at the same place). With --drop such rows are removed
/// instead (AIPerf profile's rule) and the count is printed on stderr;
/// --drop refuses (exit 65) a call of an agent graph that others may wait
/// for (a row with a `request_id`): its dependents would wait for a call
/// that is gone. A graph row without a `request_id` (a leaf) is dropped.
/// output_length above --max-osl becomes --max-osl. Streams; rows that need
/// no change are copied byte for byte, and with no caps the output equals
/// the input.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-cap --max-isl 8192 --max-osl 1024 < trace.jsonl > capped.jsonl
  mc-scale --speedup 2 < trace.jsonl | mc-cap --max-isl 32768 --drop | mc-analyze"
)]
pub struct CapArgs {
    /// Longest prompt, in tokens (also accepted under AIPerf's and vLLM's
    /// names: --synthesis-max-isl, --max-input-length).
    #[arg(long, value_name = "N", aliases = ["synthesis-max-isl", "max-input-length"],
          value_parser = clap::value_parser!(u64).range(..=MAX_INT))]
    pub max_isl: Option<u64>,

    /// Drop rows longer than --max-isl instead of truncating them. Refuses
    /// an agent-graph call with a `request_id` (others may wait for it):
    /// truncate such traces instead.
    #[arg(long)]
    pub drop: bool,

    /// Longest answer, in tokens (also accepted as --synthesis-max-osl,
    /// --max-output-length).
    #[arg(long, value_name = "M", aliases = ["synthesis-max-osl", "max-output-length"],
          value_parser = clap::value_parser!(u64).range(..=MAX_INT))]
    pub max_osl: Option<u64>,

    /// Tokens per hash id, or `auto` (the default): the one power of two the
    /// first rows allow (named on stderr; an error when they allow several
    /// or none). Every row truncated is checked against it.
    #[arg(long = "block-size", default_value = "auto", value_name = "B|auto")]
    pub block: BlockSize,

    /// The block size in use: `--block-size`, or the one detected.
    #[arg(skip = DEFAULT_BLOCK_SIZE)]
    pub block_size: u64,

    /// First id given to a block the cap cuts short. Input ids must be below
    /// it; fresh ids count up from it and must stay below 2^63.
    #[arg(long, default_value_t = DEFAULT_FRESH_ID_BASE, value_name = "ID",
          value_parser = clap::value_parser!(u64).range(1..=MAX_INT))]
    pub fresh_id_base: u64,

    #[command(flatten)]
    pub io: IoArgs,
}

/// The tool's name, for its messages and `--version`.
pub const TOOL: &str = "mc-cap";

pub fn run(args: &CapArgs) -> Result<()> {
    let tool = TOOL;
    let io = &args.io;
    if args.drop && args.max_isl.is_none() {
        return Err(Error::usage("--drop needs --max-isl"));
    }
    let (counts, cap) = if args.max_isl.is_some() && !args.drop {
        let (counts, _, cap) = filter::run_filter_sized(tool, io, args.block, |b| {
            Capper::new(CapArgs {
                block_size: b,
                ..args.clone()
            })
        })?;
        (counts, cap)
    } else {
        // Dropping or capping answers: the block size plays no part.
        let mut cap = Capper::new(args.clone());
        (filter::run_steps(tool, io, &mut cap)?, cap)
    };
    if counts.any_change() || args.drop {
        eprintln!("{tool}: {}", cap.summary(counts.rows));
    }
    Ok(())
}

pub struct Capper {
    opts: CapArgs,
    cuts: Cuts,
    pub dropped: u64,
    pub truncated: u64,
    /// Rows whose output_length was lowered to --max-osl.
    pub capped_osl: u64,
    ids: Vec<u64>,
    values: [Vec<u8>; 3],
}

impl Capper {
    /// What was done to `rows` rows, for the stderr summary line, e.g.
    /// `26 of 40 rows truncated to 16384 tokens, 3 answers capped to 512 tokens`.
    pub fn summary(&self, rows: u64) -> String {
        let plural = |n: u64| if n == 1 { "" } else { "s" };
        let mut parts = Vec::new();
        if let Some(max) = self.opts.max_isl {
            if self.opts.drop {
                parts.push(format!(
                    "dropped {} row{} longer than {max} tokens",
                    self.dropped,
                    plural(self.dropped)
                ));
            } else if self.truncated > 0 {
                parts.push(format!("truncated {} to {max} tokens", self.truncated));
            }
        }
        if let Some(max) = self.opts.max_osl {
            if self.capped_osl > 0 {
                parts.push(format!(
                    "capped {} answer{} to {max} tokens",
                    self.capped_osl,
                    plural(self.capped_osl)
                ));
            }
        }
        format!("{rows} row{}: {}", plural(rows), parts.join(", "))
    }

    pub fn new(opts: CapArgs) -> Self {
        Capper {
            cuts: Cuts {
                fresh: HashMap::new(),
                next: opts.fresh_id_base,
            },
            opts,
            dropped: 0,
            truncated: 0,
            capped_osl: 0,
            ids: Vec::new(),
            values: Default::default(),
        }
    }
}

/// --drop and agent graphs: a row with a `request_id` may be waited for
/// (through `wait_for` or its own `branches`), and a streaming filter
/// cannot see the whole graph to re-wire its dependents, so dropping it is
/// refused rather than leaving calls waiting for nothing.
fn refuse_dropping_a_call(rec: &Record<'_>, max: u64) -> std::result::Result<(), RecordError> {
    let Some(raw) = rec.raw(Field::RequestId).filter(|v| *v != b"null") else {
        return Ok(());
    };
    Err(RecordError::field(
        "request_id",
        format!(
            "the row is longer than --max-isl {max} and a call of an agent graph ({}) \
             that others may wait for: --drop would leave them waiting for a call that \
             is gone; truncate instead (leave out --drop)",
            String::from_utf8_lossy(raw)
        ),
    ))
}

impl Step for Capper {
    /// Everything but a fresh id is a function of the row; a row whose cut
    /// needs one asks to run in order, where the table of fresh ids is.
    fn apply(
        &mut self,
        rec: &Record<'_>,
        cx: &Ctx,
        out: &mut Vec<u8>,
    ) -> std::result::Result<Emit, RecordError> {
        let [isl_text, ids_text, osl_text] = &mut self.values;
        // On the stack: a `Vec` was an allocation and a free for every
        // changed row (cachegrind, 55 instructions a row of
        // `--max-osl 512`; docs/decisions/0039-filters-under-five-instructions-a-byte.md).
        let mut edits = Edits::default();
        if let Some(max) = self.opts.max_isl {
            let len = rec.uint(Field::InputLength)?;
            if self.opts.drop {
                if len.is_some_and(|l| l > max) {
                    refuse_dropping_a_call(rec, max)?;
                    self.dropped += 1;
                    return Ok(Emit::Dropped);
                }
            } else {
                // Every row is checked so an id in the fresh range is caught
                // wherever it appears, not only on cut rows. One pass finds
                // the longest id; only a row with an id long enough to reach
                // the base is decoded.
                let shape = rec.hash_ids_shape()?;
                refuse_fresh_range_ids(rec, shape, self.opts.fresh_id_base, &mut self.ids)?;
                // Truncation depends on the block size: a row that does not
                // fit it would be cut wrongly, so it is a bad line instead.
                if let (Some(shape), Some(len)) = (shape, len) {
                    if shape.count > 0 {
                        filter::check_consistent(shape.count, len, self.opts.block_size)?;
                    }
                }
                if let Some(len) = len.filter(|&l| l > max) {
                    let cut = Cut {
                        ids: shape.map_or(0, |s| s.count as u64),
                        len,
                        max,
                        block_size: self.opts.block_size,
                    };
                    let has_ids = shape.is_some() && rec.raw(Field::HashIds).is_some();
                    if has_ids && !cx.in_order() && cut.shortened_last_block().is_some() {
                        return Ok(Emit::InOrder); // nothing counted yet
                    }
                    self.truncated += 1;
                    isl_text.clear();
                    record::write_number(Number::UInt(max), isl_text);
                    edits.push(Edit {
                        field: Field::InputLength,
                        value: isl_text,
                    });
                    if let (Some(raw), Some(_)) = (rec.raw(Field::HashIds), shape) {
                        ids_text.clear();
                        self.cuts.cut_raw(raw, cut, ids_text)?;
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
                self.capped_osl += 1;
                osl_text.clear();
                record::write_number(Number::UInt(max), osl_text);
                edits.push(Edit {
                    field: Field::OutputLength,
                    value: osl_text,
                });
            }
        }
        if edits.n == 0 {
            return Ok(Emit::Unchanged);
        }
        rec.write_edited(&mut edits.list[..edits.n], out);
        Ok(Emit::Written)
    }

    fn fork(&self) -> Self {
        Capper::new(self.opts.clone())
    }

    /// The fork's counts; its fresh-id table is empty (rows that need
    /// one run in order, on `self`).
    fn join(&mut self, fork: Self) {
        self.dropped += fork.dropped;
        self.truncated += fork.truncated;
        self.capped_osl += fork.capped_osl;
    }
}

/// A row's edits: at most one each of `input_length`, `hash_ids` and
/// `output_length`.
struct Edits<'v> {
    list: [Edit<'v>; 3],
    n: usize,
}

impl Default for Edits<'_> {
    fn default() -> Self {
        Edits {
            list: std::array::from_fn(|_| Edit {
                field: Field::InputLength,
                value: &[],
            }),
            n: 0,
        }
    }
}

impl<'v> Edits<'v> {
    fn push(&mut self, edit: Edit<'v>) {
        self.list[self.n] = edit;
        self.n += 1;
    }
}

/// Refuses a row with an id at or above `base`, where mc-cap's fresh ids
/// start. Only a row whose longest id (`shape`) has the digits to reach
/// `base` is decoded (into `ids`).
#[inline]
fn refuse_fresh_range_ids(
    rec: &Record<'_>,
    shape: Option<record::IdArrayShape>,
    base: u64,
    ids: &mut Vec<u64>,
) -> std::result::Result<(), RecordError> {
    if shape.is_some_and(|s| s.longest_digits >= decimal_digits(base)) {
        rec.hash_ids_into(ids)?;
        if let Some(&big) = ids.iter().find(|&&h| h >= base) {
            return Err(RecordError::field(
                "hash_ids",
                format!("id {big} is in mc-cap's fresh-id range (>= {base}); pass a larger --fresh-id-base"),
            ));
        }
    }
    Ok(())
}

fn decimal_digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Fresh ids for blocks a cap cut short.
struct Cuts {
    /// (id of a cut block, tokens left in it) -> its fresh id.
    fresh: HashMap<(u64, u64), u64>,
    next: u64,
}

/// A row to cut: its number of ids and tokens, the cap and the block size.
#[derive(Debug, Clone, Copy)]
struct Cut {
    ids: u64,
    len: u64,
    max: u64,
    block_size: u64,
}

impl Cut {
    /// Ids that still hold tokens after the cut.
    fn keep(&self) -> u64 {
        blocks::blocks_for(self.max, self.block_size).min(self.ids)
    }

    /// Tokens left in the last kept block, if the cut made it shorter.
    fn shortened_last_block(&self) -> Option<u64> {
        let last = self.keep().checked_sub(1)?;
        let left = blocks::block_tokens(last, self.max, self.block_size);
        (left < blocks::block_tokens(last, self.len, self.block_size)).then_some(left)
    }
}

impl Cuts {
    /// The fresh id of block `id` cut down to `left` tokens.
    fn fresh_id(&mut self, id: u64, left: u64) -> std::result::Result<u64, RecordError> {
        if let Some(&f) = self.fresh.get(&(id, left)) {
            return Ok(f);
        }
        // Never wrap around into the input's ids.
        if self.next > MAX_INT {
            return Err(RecordError::field(
                "hash_ids",
                format!("fresh ids are used up (the next would pass {MAX_INT}); pass a lower --fresh-id-base"),
            ));
        }
        let f = self.next;
        self.next += 1;
        self.fresh.insert((id, left), f);
        Ok(f)
    }

    /// Writes the raw id array `raw` cut as `cut` says, copying the kept ids
    /// as text (no decoding, the original spacing kept) and decoding only a
    /// last id that needs a fresh one.
    fn cut_raw(
        &mut self,
        raw: &[u8],
        cut: Cut,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), RecordError> {
        let keep = cut.keep() as usize;
        if keep == 0 {
            out.extend_from_slice(b"[]");
            return Ok(());
        }
        // The last kept id lies between the (keep-1)-th comma (or `[`) and
        // the keep-th comma (or `]`).
        let mut commas = memchr::memchr_iter(b',', raw);
        let mut start = 1;
        for _ in 1..keep {
            start = commas.next().map_or(raw.len(), |c| c + 1);
        }
        let end = if keep < cut.ids as usize {
            commas.next()
        } else {
            Some(raw.len() - 1)
        };
        let last = end
            .and_then(|end| raw.get(start..end))
            .map(|t| t.trim_ascii());
        let Some(last) = last.filter(|t| !t.is_empty()) else {
            return Err(RecordError::field("hash_ids", "not a plain list of ids"));
        };
        let last_start = last.as_ptr() as usize - raw.as_ptr() as usize;
        out.extend_from_slice(&raw[..last_start]);
        match cut.shortened_last_block() {
            Some(left) => {
                let id = record::parse_uint(last)
                    .ok_or_else(|| RecordError::field("hash_ids", "bad id"))?;
                let fresh = self.fresh_id(id, left)?;
                out.extend_from_slice(itoa::Buffer::new().format(fresh).as_bytes());
            }
            None => out.extend_from_slice(last),
        }
        out.push(b']');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cuts() -> Cuts {
        Cuts {
            fresh: HashMap::new(),
            next: 1000,
        }
    }

    /// Cuts the id array `raw` of a `len`-token row to `max` tokens, block size 10.
    fn cut(c: &mut Cuts, raw: &str, len: u64, max: u64) -> String {
        let ids = record::id_array_shape(raw.as_bytes()).unwrap().count as u64;
        let mut out = Vec::new();
        c.cut_raw(
            raw.as_bytes(),
            Cut {
                ids,
                len,
                max,
                block_size: 10,
            },
            &mut out,
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn digits() {
        assert_eq!(decimal_digits(0), 1);
        assert_eq!(decimal_digits(99), 2);
        assert_eq!(decimal_digits(100), 3);
        assert_eq!(decimal_digits(DEFAULT_FRESH_ID_BASE), 15);
    }

    #[test]
    fn cut_on_a_block_edge_keeps_ids_and_spacing() {
        let mut c = cuts();
        assert_eq!(cut(&mut c, "[1, 2, 3, 4]", 35, 20), "[1, 2]");
        assert_eq!(cut(&mut c, "[1,2,3,4]", 35, 20), "[1,2]");
        assert_eq!(cut(&mut c, "[ 1 ,2 , 3]", 25, 10), "[ 1]");
        assert_eq!(cut(&mut c, "[1, 2]", 15, 0), "[]");
    }

    #[test]
    fn cut_inside_a_block_gives_it_a_shared_fresh_id() {
        let mut c = cuts();
        // Block 3 (tokens 20..30) keeps 5 tokens: new content, new id 1000.
        assert_eq!(cut(&mut c, "[1, 2, 3, 4]", 35, 25), "[1, 2, 1000]");
        // Same block cut to the same 5 tokens: the same fresh id.
        assert_eq!(cut(&mut c, "[1, 2, 3]", 28, 25), "[1, 2, 1000]");
        // Same block cut to 6 tokens: another content, another id.
        assert_eq!(cut(&mut c, "[1, 2, 3]", 28, 26), "[1, 2, 1001]");
        assert_eq!(cut(&mut c, "[7,8,9]", 30, 25), "[7,8,1002]");
        assert_eq!(cut(&mut c, "[7]", 8, 5), "[1003]");
    }

    #[test]
    fn partial_last_block_cut_shorter_or_unhashed_tail() {
        let mut c = cuts();
        // 27 tokens cut to 25: the last block goes from 7 to 5 tokens.
        assert_eq!(cut(&mut c, "[1, 2, 3]", 27, 25), "[1, 2, 1000]");
        // An unhashed tail: 2 ids for 40 tokens, cut to 25 keeps both as they are.
        assert_eq!(cut(&mut c, "[5, 6]", 40, 25), "[5, 6]");
        // Cut to 15: keeps [5] whole and cuts 6 to 5 tokens.
        assert_eq!(cut(&mut c, "[5, 6]", 40, 15), "[5, 1001]");
    }
}
