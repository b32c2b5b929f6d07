//! The id table as it was before the compact one (16 bytes per id), kept
//! as the reference the compact table is tested against: same rows in,
//! same answers out.
//!
//! A trie node is a (parent node, id) pair. In a well-formed trace an id
//! always has the same parent and position, so each id's first node and
//! pair live in one dense entry; an id met again under another parent or at
//! another position gets overflow entries in hash maps. Exact either way,
//! compact in the common case.

use std::collections::HashMap;

use crate::idmap::{IdMap, Slot};

/// Parent key of a first block.
const ROOT: u64 = u64::MAX;
/// Overflow nodes are keyed from here up; ids must stay below it.
#[allow(dead_code)]
pub const MAX_ID: u64 = (1 << 63) - 1;
const OVERFLOW: u64 = 1 << 63;
/// The scratch of an id whose second size was already counted (pass 2).
const CONFLICT_COUNTED: u32 = u32::MAX;

/// Parent keys are stored in 32 bits: the root, an id below `FAR`, or `FAR`
/// with the real key kept aside (ids that large are rare).
const ROOT_TAG: u32 = u32::MAX;
const FAR: u32 = u32::MAX - 1;
/// Positions at or past this are counted only in the overflow pairs.
const FAR_POS: u16 = u16::MAX;

fn parent_tag(key: u64) -> u32 {
    match key {
        ROOT => ROOT_TAG,
        k if k < u64::from(FAR) => k as u32,
        _ => FAR,
    }
}

/// 16 bytes per distinct id: the table is the analysis's largest structure.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    /// Tag of the parent key of this id's primary trie node.
    parent: u32,
    /// Visits of the primary node; 0 marks an unused slot.
    visits: u32,
    /// Per-pass scratch, read only through the accessors of the pass the
    /// table is in ([`Pass`]).
    scratch: u32,
    /// Position of the primary (position, id) pair (`FAR_POS`: none).
    pos: u16,
    /// Occurrences of the primary pair, saturating (only "more than one" matters).
    pairs: u8,
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

/// The passes over the table. Each entry keeps 32 bits of scratch whose
/// meaning is the pass's: one field rather than three keeps an entry at 16
/// bytes (the table is the analysis's largest structure). The table knows
/// its pass, entering a pass clears the scratch, and each pass touches it
/// only through its own accessor on `Entry`, so no pass reads another's
/// leftovers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pass {
    /// [`IdTable::visit`]: the scratch is the last row (1-based) that used the id.
    #[default]
    Trie,
    /// [`IdTable::check_block`]: the block size the id was first seen at.
    Sizes,
    /// The cache model ([`IdTable::mark`]): whether the id is marked.
    Marks,
}

/// Pass 2's reading of the scratch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SizeSeen {
    NotYet,
    At(u32),
    /// A second size was seen and counted; later ones are not counted again.
    ConflictCounted,
}

impl Entry {
    /// [`Pass::Trie`]: stamps `row`, giving back the previous stamp.
    fn stamp_row(&mut self, row: u32) -> u32 {
        std::mem::replace(&mut self.scratch, row)
    }

    /// [`Pass::Sizes`].
    fn size_seen(&self) -> SizeSeen {
        match self.scratch {
            0 => SizeSeen::NotYet,
            CONFLICT_COUNTED => SizeSeen::ConflictCounted,
            s => SizeSeen::At(s),
        }
    }

    fn set_size_seen(&mut self, seen: SizeSeen) {
        self.scratch = match seen {
            SizeSeen::NotYet => 0,
            SizeSeen::At(s) => s,
            SizeSeen::ConflictCounted => CONFLICT_COUNTED,
        };
    }

    /// [`Pass::Marks`]: marks the id, saying whether it already was.
    fn mark(&mut self) -> bool {
        std::mem::replace(&mut self.scratch, 1) == 1
    }
}

impl Slot for Entry {
    fn is_vacant(&self) -> bool {
        self.visits == 0
    }
}

#[derive(Default)]
pub struct IdTable {
    entries: IdMap<Entry>,
    distinct: u64,
    /// Real parent keys of primary nodes whose tag is `FAR`.
    far_parents: HashMap<u64, u64>,
    /// Which pass the entries' scratch belongs to.
    pass: Pass,
    /// Nodes beyond each id's primary one: (parent key, id) -> (key, visits).
    extra_nodes: HashMap<(u64, u64), (u64, u32)>,
    /// Pairs beyond each id's primary one: (position, id) -> count.
    extra_pairs: HashMap<(u32, u64), u32>,
    /// Trie nodes: AIPerf's `unique_prefixes`.
    pub nodes: u64,
    /// Blocks walked: the denominator of the prefix reuse ratio.
    pub blocks: u64,
}

impl IdTable {
    pub fn distinct_ids(&self) -> u64 {
        self.distinct
    }

    /// Walks row number `row` (1-based, in file order) through the trie and
    /// the pair counts.
    pub fn visit(&mut self, row: u32, ids: &[u64]) -> RowVisit {
        debug_assert_eq!(
            self.pass,
            Pass::Trie,
            "rows are visited before any other pass"
        );
        let mut v = RowVisit {
            first_unseen: ids.len(),
            ..Default::default()
        };
        let mut parent = ROOT;
        for (pos, &id) in ids.iter().enumerate() {
            self.blocks += 1;
            let short_pos = u16::try_from(pos).unwrap_or(FAR_POS);
            let e = self.entries.slot(id);
            let new = e.is_vacant();
            if new {
                self.distinct += 1;
            }
            if new {
                let tag = parent_tag(parent);
                *e = Entry {
                    parent: tag,
                    visits: 1,
                    scratch: row,
                    pos: short_pos,
                    pairs: 1,
                };
                if tag == FAR {
                    self.far_parents.insert(id, parent);
                }
                if short_pos == FAR_POS {
                    *self.extra_pairs.entry((pos as u32, id)).or_insert(0) += 1;
                }
                self.nodes += 1;
                if v.first_unseen == ids.len() {
                    v.first_unseen = pos;
                }
                parent = id;
                continue;
            }
            if e.stamp_row(row) == row {
                v.duplicate = true;
            } else if v.first_unseen < pos {
                v.not_prefix_shaped = true;
            }
            let same_pair = e.pos == short_pos && short_pos != FAR_POS;
            if same_pair {
                e.pairs = e.pairs.saturating_add(1);
            }
            let tag = parent_tag(parent);
            let primary =
                e.parent == tag && (tag != FAR || self.far_parents.get(&id) == Some(&parent));
            let key = if primary {
                e.visits += 1;
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
            if !same_pair {
                *self.extra_pairs.entry((pos as u32, id)).or_insert(0) += 1;
            }
            parent = key;
        }
        v
    }

    /// Whether the (position, id) pair occurs more than once in the trace.
    pub fn pair_repeated(&self, pos: usize, id: u64) -> bool {
        match self.entries.get(id) {
            Some(e) if usize::from(e.pos) == pos && e.pos != FAR_POS => e.pairs > 1,
            Some(_) => self
                .extra_pairs
                .get(&(pos as u32, id))
                .is_some_and(|&c| c > 1),
            None => false,
        }
    }

    /// The second pass over one block: whether its (position, id) pair is
    /// repeated, and whether the id now shows a second size (a conflict,
    /// reported once per id; `size` 0 checks only the pair). One lookup for both, since the table is large
    /// and the lookups miss the CPU cache.
    pub fn check_block(&mut self, pos: usize, id: u64, size: u32) -> (bool, bool) {
        debug_assert_eq!(self.pass, Pass::Sizes);
        let Some(e) = self.entries.get_mut(id) else {
            return (false, false);
        };
        let primary = usize::from(e.pos) == pos && e.pos != FAR_POS;
        let repeated_primary = e.pairs > 1;
        let conflict = match e.size_seen() {
            // Size 0: a broken row, which says nothing about sizes.
            _ if size == 0 => false,
            SizeSeen::NotYet => {
                e.set_size_seen(SizeSeen::At(size));
                false
            }
            SizeSeen::ConflictCounted => false,
            SizeSeen::At(s) if s == size => false,
            SizeSeen::At(_) => {
                e.set_size_seen(SizeSeen::ConflictCounted);
                true
            }
        };
        let repeated = if primary {
            repeated_primary
        } else {
            self.extra_pairs
                .get(&(pos as u32, id))
                .is_some_and(|&c| c > 1)
        };
        (repeated, conflict)
    }

    /// Σ visits of nodes visited more than once (AIPerf's reused prefixes).
    pub fn reused_visits(&self) -> u64 {
        let primary = self.entries.iter().map(|(_, e)| e).filter(|e| e.visits > 1);
        let extra = self
            .extra_nodes
            .values()
            .map(|&(_, v)| v)
            .filter(|&v| v > 1);
        primary.map(|e| u64::from(e.visits)).sum::<u64>() + extra.map(u64::from).sum::<u64>()
    }

    /// Enters `pass`, clearing every entry's scratch (entering
    /// [`Pass::Marks`] again clears the marks).
    pub fn enter(&mut self, pass: Pass) {
        for e in self.entries.values_mut() {
            e.scratch = 0;
        }
        self.pass = pass;
    }

    /// Marks `id` and says whether it already was (ids not in the table
    /// never are).
    pub fn mark(&mut self, id: u64) -> bool {
        debug_assert_eq!(self.pass, Pass::Marks);
        self.entries.get_mut(id).is_some_and(Entry::mark)
    }
}
