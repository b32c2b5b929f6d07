//! Per-id state for the whole trace, in O(distinct ids) memory: the prefix
//! trie (AIPerf's `unique_prefixes` and prefix reuse), the (position, id)
//! pair counts (context lengths), and scratch used by the checks.
//!
//! A trie node is a (parent node, id) pair. In a well-formed trace an id
//! always has the same parent and position, so each id has one primary node
//! and pair; an id met again under another parent or at another position
//! gets overflow entries in hash maps. Exact either way.
//!
//! The table is the analysis's largest structure (a 1 GB generated trace
//! holds 50 M distinct ids), so an id costs one byte of flags in the common
//! case. The primary node is not stored per id: a Mooncake row is a shared
//! prefix and then a run of fresh, consecutive ids, and an id whose primary
//! parent is the id just below it (`FOLLOWS`) has its parent and position
//! implied by that id. Only the first id of such a run (a head) keeps its
//! parent and position in a map. Before this, 16 bytes per id took 1.07 GB
//! of the 1.63 GB peak on the 1 GB trace (ARCHITECTURE.md §5).

mod flags;
mod heads;
#[cfg(test)]
pub(crate) mod reference;
mod runs;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::hash::splitmix64;
use flags::Flags;
use heads::Heads;

/// The maps keyed by id are read twice per row or so and grow to millions
/// of entries; SipHash was a tenth of the time on the 1 GB trace (perf). Ids
/// are not chosen by an attacker who gains by colliding them (a slow
/// analysis is the worst they get), so one SplitMix64 step is the hash.
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = splitmix64(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, id: u64) {
        self.0 = splitmix64(self.0 ^ id);
    }
    /// A position in a pair key: one step, not one per byte.
    fn write_u32(&mut self, pos: u32) {
        self.write_u64(u64::from(pos));
    }
}

pub(super) type IdHash = BuildHasherDefault<IdHasher>;

/// Parent key of a first block.
const ROOT: u64 = u64::MAX;
/// Overflow nodes are keyed from here up; ids must stay below it.
pub const MAX_ID: u64 = (1 << 63) - 1;
const OVERFLOW: u64 = 1 << 63;

/// Longest chain of `FOLLOWS` ids before a head: finding an id's primary
/// node reads at most this many flags, whatever the row lengths.
const MAX_CHAIN: u32 = 64;

// An id's flags (0: never seen).
const SEEN: u8 = 1;
/// The primary parent is the node of id - 1, one position further on.
const FOLLOWS: u8 = 1 << 1;
/// The primary node was visited more than once.
const VISITED_TWICE: u8 = 1 << 2;
/// The primary (position, id) pair occurs more than once.
const PAIRED_TWICE: u8 = 1 << 3;
/// The id occurs in more than one block of the trace: only such an id can
/// show two sizes, so only its size is remembered in pass 2.
const MULTI: u8 = 1 << 4;
/// Two bits of per-pass scratch ([`Pass`]).
const SCRATCH_SHIFT: u8 = 5;
const SCRATCH: u8 = 0b11 << SCRATCH_SHIFT;
/// The id is the last block of some row: only a last block can have a
/// size other than the full block, so only an id that is both `LAST` and
/// `MULTI` can show two sizes.
const LAST: u8 = 1 << 7;

/// An id's primary node: its parent key, position, the row it was first
/// seen in, and its distance from the head of its run.
#[derive(Debug, Clone, Copy)]
struct Primary {
    parent: u64,
    pos: u32,
    row: u32,
    chain: u32,
}

/// What walking one row through the table found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RowVisit {
    /// Index of the first id not used by any earlier row (n if none).
    pub first_unseen: usize,
    /// An id appears twice in the row.
    pub duplicate: bool,
    /// An id used by an earlier row follows an id new in this row.
    pub not_prefix_shaped: bool,
}

/// Where the walk of a row is: what it found, the trie node it is at,
/// the id before and its primary node.
struct Walk {
    v: RowVisit,
    /// The key of the trie node of the block before (`ROOT` at the start).
    parent: u64,
    /// The id before, its primary node.
    prev: Option<(u64, Primary)>,
    /// The id before was new in this row.
    prev_fresh: bool,
    /// The row's blocks whose (position, id) pair is repeated so far.
    repeated: u32,
}

impl Walk {
    /// An id is first seen at `pos` (positions come in order, so the
    /// first one stays).
    fn first_sight(&mut self, pos: usize) {
        self.v.first_unseen = self.v.first_unseen.min(pos);
    }
}

/// The passes over the table. Each id keeps two bits of scratch whose
/// meaning is the pass's; entering a pass clears them, and each pass
/// touches them only through its own method, so no pass reads another's
/// leftovers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pass {
    /// [`IdTable::visit`] (no scratch: a repeat within a row is found from
    /// the row itself).
    #[default]
    Trie,
    /// [`IdTable::check_size`]: the size the id was first seen at.
    Sizes,
    /// The cache model ([`IdTable::mark`]): whether the id is marked.
    Marks,
}

/// Pass 2's reading of the scratch.
const SIZE_NOT_YET: u8 = 0;
/// Seen at the full block size.
const SIZE_FULL: u8 = 1;
/// Seen at another size, kept in `IdTable::sizes`.
const SIZE_OTHER: u8 = 2;
/// A second size was seen and counted; later ones are not counted again.
const SIZE_CONFLICT_COUNTED: u8 = 3;

fn scratch(f: u8) -> u8 {
    (f & SCRATCH) >> SCRATCH_SHIFT
}

fn with_scratch(f: u8, s: u8) -> u8 {
    (f & !SCRATCH) | (s << SCRATCH_SHIFT)
}

#[derive(Default)]
pub struct IdTable {
    /// Each seen id's flags.
    flags: Flags,
    distinct: u64,
    /// Parent key and position of each id that does not follow the one
    /// below it (the heads of runs).
    heads: Heads,
    /// Which pass the scratch belongs to.
    pass: Pass,
    /// Nodes beyond each id's primary one: (parent key, id) -> (key, visits).
    /// (SipHash here was 2% of the instructions; the keys are ids too.)
    extra_nodes: HashMap<(u64, u64), (u64, u32), IdHash>,
    /// Pairs beyond each id's primary one: (position, id) -> (count, the
    /// row it was first seen in).
    extra_pairs: HashMap<(u32, u64), (u32, u32), IdHash>,
    /// Per row: its blocks whose (position, id) pair occurs in another row
    /// too (AIPerf's context length), counted as the rows are visited: a
    /// pair met the second time counts for its first row as well.
    repeated: Vec<u32>,
    /// The rows whose last block is an id met in another block too (an
    /// id both `LAST` and `MULTI`), in no order: only their last blocks
    /// can show a size other than the full block to an id met at another
    /// size, so when each of them is full at the chosen block size no id
    /// conflicts and the size check walks nothing (decision 46).
    candidate_rows: Vec<u32>,
    /// Ids whose primary node was visited more than once (`VISITED_TWICE`
    /// set), counted as the flag is set: the reuse count without a pass
    /// over every id's flags.
    visited_twice: u64,
    /// [`Pass::Sizes`]: the size of ids first seen at a size other than
    /// the full block.
    sizes: HashMap<u64, u32, IdHash>,
    /// Positions of the row being visited that repeat an earlier id of it.
    repeats: Vec<bool>,
    sorted: Vec<(u64, usize)>,
    /// Set by [`IdTable::end_visits`]: the heads and overflow maps are
    /// gone, and the reuse count is `reused` (no row may be visited).
    ended: bool,
    /// [`IdTable::reused_visits`], kept when the visits end.
    reused: u64,
    /// Set by [`IdTable::drop_flags`]: no pass may read the flags.
    no_flags: bool,
    /// Trie nodes: AIPerf's `unique_prefixes`.
    pub nodes: u64,
    /// Blocks walked: the denominator of the prefix reuse ratio.
    pub blocks: u64,
}

impl IdTable {
    pub fn distinct_ids(&self) -> u64 {
        self.distinct
    }

    fn flags_of(&self, id: u64) -> u8 {
        self.flags.get(id)
    }

    /// The primary node of seen `id` (flags `f`); `hint` is an id already
    /// resolved, which makes the next id's answer one step.
    fn primary(&self, id: u64, f: u8, hint: Option<(u64, Primary)>) -> Primary {
        if f & FOLLOWS != 0 {
            if let Some((h, p)) = hint.filter(|&(h, _)| h.wrapping_add(1) == id) {
                return Primary {
                    parent: h,
                    pos: p.pos + 1,
                    row: p.row,
                    chain: p.chain + 1,
                };
            }
        }
        let mut head = id;
        while self.flags_of(head) & FOLLOWS != 0 {
            head -= 1;
        }
        let chain = (id - head) as u32;
        // Every seen id that does not follow is a head (set together in
        // `visit`); the fallback is never taken.
        let (parent, pos, row) = self.heads.get(head).unwrap_or((ROOT, 0, 0));
        Primary {
            parent: if chain == 0 { parent } else { id - 1 },
            pos: pos + chain,
            row,
            chain,
        }
    }

    /// Marks in `self.repeats` the positions of `ids` that repeat an
    /// earlier position's id; false when none do (the usual case, found
    /// without sorting when the ids increase).
    fn find_repeats(&mut self, ids: &[u64]) -> bool {
        // Every pair compared, without stopping at the first that is not
        // increasing: a loop the compiler vectorises (`all` over
        // `windows` stopped, and cost two instructions an id more).
        let mut increasing = true;
        for i in 1..ids.len() {
            increasing &= ids[i - 1] < ids[i];
        }
        if increasing {
            return false;
        }
        self.sorted.clear();
        self.sorted.extend(ids.iter().copied().zip(0..));
        self.sorted.sort_unstable();
        self.repeats.clear();
        self.repeats.resize(ids.len(), false);
        let mut any = false;
        for w in self.sorted.windows(2) {
            if w[0].0 == w[1].0 {
                self.repeats[w[1].1] = true;
                any = true;
            }
        }
        any
    }

    /// Walks row number `row` (0-based, in file order; rows come in
    /// order, each once) through the trie and the pair counts.
    pub fn visit(&mut self, row: u32, ids: &[u64]) -> RowVisit {
        self.walk(row, ids, true)
    }

    /// [`IdTable::visit`], a run of consecutive ids at a time where it
    /// can (`by_runs`; [`runs`]) or one id at a time, the rule the runs
    /// must agree with.
    fn walk(&mut self, row: u32, ids: &[u64], by_runs: bool) -> RowVisit {
        debug_assert_eq!(
            self.pass,
            Pass::Trie,
            "rows are visited before any other pass"
        );
        debug_assert!(!self.ended, "rows are visited before the visits end");
        let mut w = Walk {
            v: RowVisit {
                first_unseen: ids.len(),
                ..Default::default()
            },
            parent: ROOT,
            prev: None,
            prev_fresh: false,
            repeated: 0,
        };
        let repeats = self.find_repeats(ids);
        let by_runs = by_runs && !repeats;
        let mut pos = 0;
        while pos < ids.len() {
            // A run's walk that cannot start says what the id's flags
            // are, found (one lookup fewer in the step an id at a time).
            let (k, known) = if by_runs {
                self.run(&mut w, row, pos, ids)
            } else {
                (0, None)
            };
            if k > 0 {
                pos += k;
            } else {
                self.one(&mut w, row, pos, ids[pos], repeats, known);
                pos += 1;
            }
        }
        let Walk { v, repeated, .. } = w;
        self.blocks += ids.len() as u64;
        if let Some(&last) = ids.last() {
            if let Some(f) = self.flags.get_mut(last) {
                *f |= LAST;
                if *f & MULTI != 0 && self.candidate_rows.last() != Some(&row) {
                    self.candidate_rows.push(row);
                }
            }
        }
        let row = row as usize;
        // Rows come in order: the next one is a push (`resize` was a call
        // a row); a row whose visit was skipped (no ids) counts none.
        if self.repeated.len() == row {
            self.repeated.push(repeated);
        } else {
            if self.repeated.len() < row {
                self.repeated.resize(row + 1, 0);
            }
            self.repeated[row] = repeated;
        }
        v
    }

    /// One id of a row, at `pos` (`repeats`: some ids of the row repeat
    /// an earlier one, marked in `self.repeats`; `known`: the id's flags
    /// when the caller has read them, not 0).
    #[inline]
    fn one(
        &mut self,
        w: &mut Walk,
        row: u32,
        pos: usize,
        id: u64,
        repeats: bool,
        known: Option<u8>,
    ) {
        let pos32 = pos as u32;
        let (f, mut slot) = match known {
            Some(f) => (f, None),
            None => {
                let slot = self.flags.slot(id);
                (*slot, Some(slot))
            }
        };
        if f == 0 {
            let slot = match slot {
                Some(slot) => slot,
                None => self.flags.slot(id),
            };
            // First sight. The id follows the block before when that
            // was new here too (so an id's run shares its head's row).
            self.distinct += 1;
            self.nodes += 1;
            let chain = match w.prev {
                Some((p, pp))
                    if w.prev_fresh && p.wrapping_add(1) == id && pp.chain + 1 < MAX_CHAIN =>
                {
                    *slot = SEEN | FOLLOWS;
                    pp.chain + 1
                }
                _ => {
                    *slot = SEEN;
                    self.heads.insert(id, w.parent, pos32, row);
                    0
                }
            };
            w.first_sight(pos);
            let primary = Primary {
                parent: w.parent,
                pos: pos32,
                row,
                chain,
            };
            w.prev = Some((id, primary));
            w.prev_fresh = true;
            w.parent = id;
            return;
        }
        if repeats && self.repeats[pos] {
            w.v.duplicate = true;
        } else if w.v.first_unseen < pos {
            w.v.not_prefix_shaped = true;
        }
        w.prev_fresh = false;
        // The usual case: the id follows the block before, which was at
        // its primary node (the trie node is the id's key), so this
        // block is at its primary node and pair too, one step on.
        if let Some((p, pp)) = w
            .prev
            .filter(|&(p, _)| f & FOLLOWS != 0 && p.wrapping_add(1) == id && w.parent == p)
        {
            let slot = match slot.take() {
                Some(slot) => slot,
                None => self.flags.slot(id),
            };
            *slot = f | MULTI | VISITED_TWICE | PAIRED_TWICE;
            if f & PAIRED_TWICE == 0 {
                if let Some(c) = self.repeated.get_mut(pp.row as usize) {
                    *c += 1;
                }
            }
            self.visited_twice += u64::from(f & VISITED_TWICE == 0);
            self.met_again_as_last(f, pp.row);
            w.repeated += 1;
            let primary = Primary {
                parent: p,
                pos: pp.pos + 1,
                row: pp.row,
                chain: pp.chain + 1,
            };
            w.prev = Some((id, primary));
            w.parent = id;
            return;
        }
        let primary = self.primary(id, f, w.prev);
        let (key, rep) = self.seen_again(id, f, primary, w.parent, pos32, row);
        w.repeated += u32::from(rep);
        w.prev = Some((id, primary));
        w.parent = key;
    }

    /// Records `id` (flags `f`, primary node `primary`) seen again at `pos`
    /// of row `row` under trie node `parent`: its pair and node counts.
    /// Returns its trie node's key (an overflow key when the node is not
    /// the primary) and whether its pair is now repeated (when this is
    /// the pair's second sight, its first row's count goes up too).
    #[inline]
    fn seen_again(
        &mut self,
        id: u64,
        f: u8,
        primary: Primary,
        parent: u64,
        pos: u32,
        row: u32,
    ) -> (u64, bool) {
        self.met_again_as_last(f, primary.row);
        let mut f = f | MULTI;
        let repeated = if primary.pos == pos {
            if f & PAIRED_TWICE == 0 {
                f |= PAIRED_TWICE;
                self.count_first_row(primary.row);
            }
            true
        } else {
            let pair = self.extra_pairs.entry((pos, id)).or_insert((0, row));
            pair.0 = pair.0.saturating_add(1);
            let (count, first) = *pair;
            if count == 2 {
                self.count_first_row(first);
            }
            count >= 2
        };
        let key = if primary.parent == parent {
            self.visited_twice += u64::from(f & VISITED_TWICE == 0);
            f |= VISITED_TWICE;
            id
        } else {
            let next_key = OVERFLOW + self.extra_nodes.len() as u64;
            let node = self
                .extra_nodes
                .entry((parent, id))
                .or_insert((next_key, 0));
            if node.1 == 0 {
                self.nodes += 1;
            }
            node.1 += 1;
            node.0
        };
        // Seen before (its flags are not 0): its byte is there.
        if let Some(slot) = self.flags.get_mut(id) {
            *slot = f;
        }
        (key, repeated)
    }

    /// An id (flags `f` before this sight) first seen in row `first_row`
    /// is met again. When it was met once, as that row's last block, that
    /// row is a candidate for the size check (the rows where a candidate
    /// id is last later are added at the end of their visit).
    #[inline]
    fn met_again_as_last(&mut self, f: u8, first_row: u32) {
        if f & (LAST | MULTI) == LAST {
            self.candidate_rows.push(first_row);
        }
    }

    /// A pair first seen in (earlier) row `row` was seen again.
    fn count_first_row(&mut self, row: u32) {
        if let Some(c) = self.repeated.get_mut(row as usize) {
            *c += 1;
        }
    }

    /// Per row (0-based, as visited; rows never visited count none): its
    /// blocks whose (position, id) pair occurs in more than one row.
    pub fn take_repeated(&mut self, rows: usize) -> Vec<u32> {
        let mut r = std::mem::take(&mut self.repeated);
        r.resize(rows, 0);
        r
    }

    /// Whether the (position, id) pair occurs more than once in the trace
    /// (before [`IdTable::end_visits`]: it needs the heads).
    pub fn pair_repeated(&self, pos: usize, id: u64) -> bool {
        debug_assert!(!self.ended, "the heads are gone when the visits end");
        let f = self.flags_of(id);
        if f == 0 {
            return false;
        }
        if self.primary(id, f, None).pos as usize == pos {
            f & PAIRED_TWICE != 0
        } else {
            u32::try_from(pos)
                .ok()
                .and_then(|p| self.extra_pairs.get(&(p, id)))
                .is_some_and(|&(c, _)| c > 1)
        }
    }

    /// Whether some id can show two sizes: the last block of a row met in
    /// another block too. When none can, the size check has nothing to do.
    pub fn may_conflict(&self) -> bool {
        !self.candidate_rows.is_empty()
    }

    /// The rows whose last block is an id met in another block too (each
    /// at least once, in no order): an id can show two sizes only when one
    /// of these rows' last blocks is not full.
    pub fn candidate_rows(&self) -> &[u32] {
        &self.candidate_rows
    }

    /// The ids that can show two sizes (the last block of a row met in
    /// another block too), in increasing order: the only ids the size
    /// check needs to look at.
    pub fn size_candidates(&self) -> Vec<u64> {
        if !self.may_conflict() {
            return Vec::new();
        }
        let mut ids = self.flags.ids_with(|f| f & (MULTI | LAST) == MULTI | LAST);
        ids.sort_unstable();
        ids
    }

    /// The size check over one block of `size` tokens (0: a broken row,
    /// which says nothing about sizes): whether `id` now shows a second
    /// size (a conflict, reported once per id). `full` is the block size,
    /// the size of every block but a row's last. Blocks must come in file
    /// order: an id's first size decides which later one conflicts.
    pub fn check_size(&mut self, id: u64, size: u32, full: u32) -> bool {
        debug_assert_eq!(self.pass, Pass::Sizes);
        debug_assert!(!self.no_flags, "the size check reads the flags");
        let f = self.flags_of(id);
        // An id met once has one size; one never last has only `full`.
        if f & (MULTI | LAST) != MULTI | LAST || size == 0 {
            return false;
        }
        let (next, conflict) = match scratch(f) {
            SIZE_NOT_YET if size == full => (SIZE_FULL, false),
            SIZE_NOT_YET => {
                self.sizes.insert(id, size);
                (SIZE_OTHER, false)
            }
            SIZE_FULL if size == full => (SIZE_FULL, false),
            SIZE_OTHER if self.sizes.get(&id) == Some(&size) => (SIZE_OTHER, false),
            SIZE_CONFLICT_COUNTED => (SIZE_CONFLICT_COUNTED, false),
            _ => {
                self.sizes.remove(&id);
                (SIZE_CONFLICT_COUNTED, true)
            }
        };
        if let Some(slot) = self.flags.get_mut(id) {
            *slot = with_scratch(f, next);
        }
        conflict
    }

    /// Ends the first pass: frees what only visiting rows reads (the
    /// heads, a third of the table on a generated trace, and the overflow
    /// maps), keeping the reuse count, so the report's columns are made
    /// in the room they held (decision 47, last). The flags stay: the
    /// size check and the cache model's marks read them
    /// ([`IdTable::drop_flags`] when neither will).
    pub fn end_visits(&mut self) {
        if self.ended {
            return;
        }
        self.reused = self.reused_visits();
        self.ended = true;
        self.heads = Heads::default();
        self.extra_nodes = HashMap::default();
        self.extra_pairs = HashMap::default();
        self.repeats = Vec::new();
        self.sorted = Vec::new();
    }

    /// Frees the flags, after [`IdTable::end_visits`], when no pass will
    /// read them (the size check found nothing to walk, and the cache
    /// model needs no marks): 1 byte a distinct id. The counts stay.
    pub fn drop_flags(&mut self) {
        debug_assert!(self.ended, "the visits read the flags");
        self.flags = Flags::default();
        self.candidate_rows = Vec::new();
        self.no_flags = true;
    }

    /// Σ visits of nodes visited more than once (AIPerf's reused prefixes):
    /// every block visits one node, so it is the blocks less the nodes
    /// visited once.
    pub fn reused_visits(&self) -> u64 {
        if self.ended {
            return self.reused;
        }
        let primary_once = self.distinct - self.visited_twice;
        let extra_once = self.extra_nodes.values().filter(|&&(_, v)| v == 1).count() as u64;
        self.blocks - primary_once - extra_once
    }

    /// Enters `pass`, clearing every id's scratch (entering
    /// [`Pass::Marks`] again clears the marks). The trie pass writes none,
    /// so leaving it needs no clearing.
    pub fn enter(&mut self, pass: Pass) {
        if self.pass != Pass::Trie {
            self.flags.clear_bits(SCRATCH);
        }
        self.sizes = HashMap::default();
        self.pass = pass;
    }

    /// Marks `id` and says whether it already was (ids not in the table
    /// never are).
    pub fn mark(&mut self, id: u64) -> bool {
        debug_assert_eq!(self.pass, Pass::Marks);
        debug_assert!(!self.no_flags, "the marks are flags");
        self.flags.get_mut(id).is_some_and(|f| {
            let was = scratch(*f) == 1;
            *f = with_scratch(*f, 1);
            was
        })
    }
}

#[cfg(test)]
mod tests;
