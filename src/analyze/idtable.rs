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

mod heads;
#[cfg(test)]
pub(crate) mod reference;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::hash::splitmix64;
use crate::idmap::IdMap;
use heads::Heads;

/// The maps keyed by id are read twice per row or so and grow to millions
/// of entries; SipHash was a tenth of the time on the 1 GB trace (perf). Ids
/// are not chosen by an attacker who gains by colliding them (a slow
/// analysis is the worst they get), so one SplitMix64 step is the hash.
#[derive(Default)]
struct IdHasher(u64);

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
}

type IdHash = BuildHasherDefault<IdHasher>;

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

/// An id's primary node: its parent key, position, and distance from the
/// head of its run.
#[derive(Debug, Clone, Copy)]
struct Primary {
    parent: u64,
    pos: u32,
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
    /// [`IdTable::check_block`]: the size the id was first seen at.
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
    flags: IdMap<u8>,
    distinct: u64,
    /// Parent key and position of each id that does not follow the one
    /// below it (the heads of runs).
    heads: Heads,
    /// Which pass the scratch belongs to.
    pass: Pass,
    /// Nodes beyond each id's primary one: (parent key, id) -> (key, visits).
    extra_nodes: HashMap<(u64, u64), (u64, u32)>,
    /// Pairs beyond each id's primary one: (position, id) -> count.
    extra_pairs: HashMap<(u32, u64), u32>,
    /// [`Pass::Sizes`]: the size of ids first seen at a size other than
    /// the full block.
    sizes: HashMap<u64, u32, IdHash>,
    /// The last id [`IdTable::check_block`] resolved: the next block is
    /// usually the id after it.
    hint: Option<(u64, Primary)>,
    /// Positions of the row being visited that repeat an earlier id of it.
    repeats: Vec<bool>,
    sorted: Vec<(u64, usize)>,
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
        self.flags.get(id).copied().unwrap_or(0)
    }

    /// The primary node of seen `id`; `hint` is an id already resolved,
    /// which makes the next id's answer one step.
    fn primary(&self, id: u64, hint: Option<(u64, Primary)>) -> Primary {
        if self.flags_of(id) & FOLLOWS != 0 {
            if let Some((h, p)) = hint.filter(|&(h, _)| h.wrapping_add(1) == id) {
                return Primary {
                    parent: h,
                    pos: p.pos + 1,
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
        let (parent, pos) = self.heads.get(head).unwrap_or((ROOT, 0));
        Primary {
            parent: if chain == 0 { parent } else { id - 1 },
            pos: pos + chain,
            chain,
        }
    }

    /// Marks in `self.repeats` the positions of `ids` that repeat an
    /// earlier position's id; false when none do (the usual case, found
    /// without sorting when the ids increase).
    fn find_repeats(&mut self, ids: &[u64]) -> bool {
        if ids.windows(2).all(|w| w[0] < w[1]) {
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

    /// Walks row number `row` (1-based, in file order) through the trie and
    /// the pair counts.
    pub fn visit(&mut self, _row: u32, ids: &[u64]) -> RowVisit {
        debug_assert_eq!(
            self.pass,
            Pass::Trie,
            "rows are visited before any other pass"
        );
        let mut v = RowVisit {
            first_unseen: ids.len(),
            ..Default::default()
        };
        let repeats = self.find_repeats(ids);
        let mut parent = ROOT;
        let mut prev: Option<(u64, Primary)> = None;
        for (pos, &id) in ids.iter().enumerate() {
            self.blocks += 1;
            let pos32 = pos as u32;
            let f = self.flags_of(id);
            if f == 0 {
                let primary = self.first_sight(id, parent, pos32, prev);
                if v.first_unseen == ids.len() {
                    v.first_unseen = pos;
                }
                prev = Some((id, primary));
                parent = id;
                continue;
            }
            let primary = self.primary(id, prev);
            if repeats && self.repeats[pos] {
                v.duplicate = true;
            } else if v.first_unseen < pos {
                v.not_prefix_shaped = true;
            }
            let key = self.seen_again(id, f, primary, parent, pos32);
            prev = Some((id, primary));
            parent = key;
        }
        v
    }

    /// Records the first sight of `id`, at `pos` under trie node `parent`
    /// after `prev`, and returns its primary node.
    #[inline]
    fn first_sight(
        &mut self,
        id: u64,
        parent: u64,
        pos: u32,
        prev: Option<(u64, Primary)>,
    ) -> Primary {
        self.distinct += 1;
        self.nodes += 1;
        // `parent == id - 1` only when the block before was the
        // primary node of id - 1 (overflow keys are above every id).
        let follows = match prev {
            Some((p, pp)) => parent == p && p.wrapping_add(1) == id && pp.chain + 1 < MAX_CHAIN,
            None => false,
        };
        if follows {
            *self.flags.slot(id) = SEEN | FOLLOWS;
            let pp = prev.map_or(0, |(_, pp)| pp.chain);
            Primary {
                parent,
                pos,
                chain: pp + 1,
            }
        } else {
            *self.flags.slot(id) = SEEN;
            self.heads.insert(id, parent, pos);
            Primary {
                parent,
                pos,
                chain: 0,
            }
        }
    }

    /// Records `id` (flags `f`, primary node `primary`) seen again at `pos`
    /// under trie node `parent`: its pair and node counts, and returns its
    /// trie node's key (an overflow key when the node is not the primary).
    #[inline]
    fn seen_again(&mut self, id: u64, f: u8, primary: Primary, parent: u64, pos: u32) -> u64 {
        let mut f = f | MULTI;
        let same_pair = primary.pos == pos;
        if same_pair {
            f |= PAIRED_TWICE;
        } else {
            *self.extra_pairs.entry((pos, id)).or_insert(0) += 1;
        }
        let key = if primary.parent == parent {
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
        *self.flags.slot(id) = f;
        key
    }

    /// Whether the (position, id) pair occurs more than once in the trace.
    pub fn pair_repeated(&self, pos: usize, id: u64) -> bool {
        let f = self.flags_of(id);
        if f == 0 {
            return false;
        }
        self.repeated(f, self.primary(id, None), pos, id)
    }

    fn repeated(&self, f: u8, primary: Primary, pos: usize, id: u64) -> bool {
        if primary.pos as usize == pos {
            f & PAIRED_TWICE != 0
        } else {
            u32::try_from(pos)
                .ok()
                .and_then(|p| self.extra_pairs.get(&(p, id)))
                .is_some_and(|&c| c > 1)
        }
    }

    /// The second pass over one block: whether its (position, id) pair is
    /// repeated, and whether the id now shows a second size (a conflict,
    /// reported once per id; `size` 0 checks only the pair). `full` is the
    /// block size, the size of every block but a row's last.
    pub fn check_block(&mut self, pos: usize, id: u64, size: u32, full: u32) -> (bool, bool) {
        debug_assert_eq!(self.pass, Pass::Sizes);
        let f = self.flags_of(id);
        // An id met once (most ids: a row's fresh tail) is in one block, so
        // its pair is not repeated and it has one size; its primary node,
        // the costly part (a chain of flags and a head's entry, out of
        // cache), is not needed. The hint stays on the last id that was.
        if f & MULTI == 0 {
            return (false, false);
        }
        let primary = self.primary(id, self.hint);
        self.hint = Some((id, primary));
        let repeated = self.repeated(f, primary, pos, id);
        // Size 0, a broken row, says nothing about sizes.
        if size == 0 {
            return (repeated, false);
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
        (repeated, conflict)
    }

    /// Σ visits of nodes visited more than once (AIPerf's reused prefixes):
    /// every block visits one node, so it is the blocks less the nodes
    /// visited once.
    pub fn reused_visits(&self) -> u64 {
        let primary_once = self
            .flags
            .iter()
            .filter(|&(_, &f)| f & VISITED_TWICE == 0)
            .count() as u64;
        let extra_once = self.extra_nodes.values().filter(|&&(_, v)| v == 1).count() as u64;
        self.blocks - primary_once - extra_once
    }

    /// Enters `pass`, clearing every id's scratch (entering
    /// [`Pass::Marks`] again clears the marks).
    pub fn enter(&mut self, pass: Pass) {
        for f in self.flags.values_mut() {
            *f &= !SCRATCH;
        }
        self.sizes = HashMap::default();
        self.hint = None;
        self.pass = pass;
    }

    /// Marks `id` and says whether it already was (ids not in the table
    /// never are).
    pub fn mark(&mut self, id: u64) -> bool {
        debug_assert_eq!(self.pass, Pass::Marks);
        self.flags.get_mut(id).is_some_and(|f| {
            let was = scratch(*f) == 1;
            *f = with_scratch(*f, 1);
            was
        })
    }
}

#[cfg(test)]
mod tests;
