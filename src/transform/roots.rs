//! `mc-roots`: AIPerf's prefix-root multiplier, session-preserving.
//!
//! Each session (rows sharing a `session_id`; a row without one is a session
//! of its own) is put in one of K trees, and every id h of its rows becomes
//! `h*K + t`. Different trees share nothing, one tree keeps all its sharing,
//! and all turns of a conversation stay together. The tree is a seeded hash
//! of the session id, so the tool streams in constant memory and the same
//! seed gives the same bytes everywhere.

use crate::error::{Error, RecordError, Result};
use crate::filter::{self, Ctx, Emit, IoArgs, Step};
use crate::hash::{stable_hash, GOLDEN_GAMMA};
use crate::record::{Field, Record};

/// Multiply the prefix roots of a trace: spread sessions over K disjoint
/// prefix trees (AIPerf's prefix-root multiplier, keeping sessions whole).
///
/// Each session (rows with the same session_id; a row without one is its own
/// unit) is assigned one of K trees by a seeded hash of its id, and each of
/// its hash ids h becomes h*K + t. Rows in different trees share no block;
/// rows in the same tree keep their sharing. Streams in constant memory;
/// --roots 1 is the identity.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-roots --roots 4 < trace.jsonl > wide.jsonl
  mc-scale --speedup 2 < trace.jsonl | mc-roots --roots 8 --seed 7 | mc-analyze"
)]
pub struct RootsArgs {
    /// Number of disjoint prefix trees.
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub roots: u64,

    /// Seed of the session-to-tree assignment.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    #[command(flatten)]
    pub io: IoArgs,
}

/// The tool's name, for its messages and `--version`.
pub const TOOL: &str = "mc-roots";

pub fn run(args: &RootsArgs) -> Result<()> {
    let tool = TOOL;
    let io = &args.io;
    if args.roots == 0 {
        return Err(Error::usage("--roots must be at least 1"));
    }
    let mut roots = Roots::new(args.roots, args.seed);
    let counts = filter::run_steps(tool, io, &mut roots)?;
    if counts.any_change() {
        eprintln!(
            "{tool}: {} of {} rows renumbered into {} trees",
            counts.changed, counts.rows, args.roots
        );
    }
    Ok(())
}

/// The id-namespacing rule (`h*k + t`), kept beside the record's fast
/// path for it (`Record::namespace_hash_ids`).
pub use crate::record::namespace_id;

pub struct Roots {
    k: u64,
    seed: u64,
}

impl Roots {
    pub fn new(k: u64, seed: u64) -> Self {
        Roots { k, seed }
    }

    /// The tree of a session id (raw JSON bytes) or, without one, of row `row`.
    pub fn tree(&self, session: Option<&[u8]>, row: u64) -> u64 {
        let h = match session {
            Some(s) => stable_hash(self.seed, s),
            None => stable_hash(self.seed ^ GOLDEN_GAMMA, &row.to_le_bytes()),
        };
        // Multiply-shift maps the hash onto 0..k without modulo bias worth noting.
        ((u128::from(h) * u128::from(self.k)) >> 64) as u64
    }
}

impl Step for Roots {
    /// A row without a session is a unit of its own: its record index
    /// ([`Ctx::row`]) picks its tree.
    fn apply(
        &mut self,
        rec: &Record<'_>,
        cx: &Ctx,
        out: &mut Vec<u8>,
    ) -> std::result::Result<Emit, RecordError> {
        if self.k == 1 {
            return Ok(Emit::Unchanged);
        }
        let session = rec.session_id()?;
        // The array is checked before the tree is picked (the row number is
        // read only for rows that are renumbered), then read, renumbered
        // and written in one pass.
        if rec.hash_ids_shape()?.is_none_or(|s| s.count == 0) {
            return Ok(Emit::Unchanged);
        }
        let t = match session {
            Some(_) => self.tree(session, 0),
            None => self.tree(None, cx.row()),
        };
        let k = self.k;
        let overflow = |id| {
            RecordError::field(
                "hash_ids",
                format!("id {id} times --roots {k} overflows 64 bits"),
            )
        };
        // The row is the line with its array replaced: the text before it,
        // the new array written straight into `out`, the text after it.
        let (Some(span), at) = (rec.span(Field::HashIds), out.len()) else {
            return Ok(Emit::Unchanged);
        };
        let line = rec.line();
        out.extend_from_slice(&line[..span.start]);
        if let Err(e) = rec.namespace_hash_ids(out, (k, t), overflow) {
            out.truncate(at);
            return Err(e);
        }
        out.extend_from_slice(&line[span.end..]);
        Ok(Emit::Written)
    }

    fn fork(&self) -> Self {
        Roots::new(self.k, self.seed)
    }

    fn join(&mut self, _fork: Self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_are_spread_and_stable() {
        let r = Roots::new(4, 42);
        let mut seen = [0u32; 4];
        for i in 0..4000u64 {
            seen[r.tree(Some(format!("\"s{i}\"").as_bytes()), 0) as usize] += 1;
        }
        // Each of 4 trees gets roughly a quarter of 4000 sessions.
        assert!(seen.iter().all(|&c| (800..1200).contains(&c)), "{seen:?}");
        assert_eq!(r.tree(Some(b"\"a\""), 0), r.tree(Some(b"\"a\""), 99));
        assert!(Roots::new(1, 7).tree(Some(b"\"x\""), 0) == 0);
    }

    #[test]
    fn namespaces_are_disjoint_and_one_to_one() {
        // 3 namespaces: 0 -> 0, 1, 2; 1 -> 3, 4, 5 (h*3 + t by hand).
        assert_eq!(namespace_id(0, 3, 2), Some(2));
        assert_eq!(namespace_id(1, 3, 0), Some(3));
        assert_eq!(namespace_id(1, 3, 2), Some(5));
        assert_eq!(namespace_id(7, 1, 0), Some(7));
        assert_eq!(namespace_id(u64::MAX, 2, 0), None);
    }

    #[test]
    fn seeds_change_the_assignment() {
        let a = Roots::new(8, 1);
        let b = Roots::new(8, 2);
        let differ = (0..100u64)
            .filter(|i| a.tree(None, *i) != b.tree(None, *i))
            .count();
        assert!(differ > 50);
    }
}
