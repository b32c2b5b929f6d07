//! The causal, token-weighted cache model: the share of input tokens a
//! prefix cache would serve, replaying rows in file or timestamp order.
//! A block hits only if every earlier block of its row hit (prefix
//! semantics); every block of the row is then in the cache.

use std::collections::HashMap;

use serde::Serialize;

use super::idtable::{IdTable, Pass};
use super::rows::{RowCursor, RowStore, Rows, StoredRow};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Rows in the order of the file.
    File,
    /// Rows by timestamp (rows without one stay after the row before them).
    Timestamp,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct CacheModel {
    pub order: Order,
    pub input_tokens: f64,
    pub results: Vec<CacheResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct CacheResult {
    /// `None`: an infinite cache.
    pub cache_blocks: Option<u64>,
    pub hit_tokens: f64,
    /// hit_tokens / input_tokens (0 when there are no input tokens).
    pub hit_rate: f64,
}

/// A cache of block ids.
trait BlockCache {
    /// True (and the block is refreshed) if `id` is cached.
    fn hit(&mut self, id: u64) -> bool;
    /// Puts `id` in the cache (or refreshes it).
    fn insert(&mut self, id: u64);
}

struct Infinite<'t>(&'t mut IdTable);

impl BlockCache for Infinite<'_> {
    fn hit(&mut self, id: u64) -> bool {
        self.0.mark(id)
    }
    fn insert(&mut self, id: u64) {
        self.0.mark(id);
    }
}

/// Least-recently-used over at most `cap` blocks: a map to slots of an
/// intrusive doubly linked list, O(1) per operation.
struct Lru {
    cap: usize,
    slot: HashMap<u64, u32>,
    ids: Vec<u64>,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
}

const NIL: u32 = u32::MAX;

impl Lru {
    fn new(cap: usize) -> Self {
        Lru {
            cap,
            slot: HashMap::with_capacity(cap.min(1 << 24)),
            ids: Vec::new(),
            prev: Vec::new(),
            next: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }

    fn unlink(&mut self, s: u32) {
        let (p, n) = (self.prev[s as usize], self.next[s as usize]);
        if p == NIL {
            self.head = n
        } else {
            self.next[p as usize] = n
        }
        if n == NIL {
            self.tail = p
        } else {
            self.prev[n as usize] = p
        }
    }

    fn push_front(&mut self, s: u32) {
        self.prev[s as usize] = NIL;
        self.next[s as usize] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = s;
        }
        self.head = s;
        if self.tail == NIL {
            self.tail = s;
        }
    }
}

impl BlockCache for Lru {
    fn hit(&mut self, id: u64) -> bool {
        match self.slot.get(&id) {
            Some(&s) => {
                self.unlink(s);
                self.push_front(s);
                true
            }
            None => false,
        }
    }

    fn insert(&mut self, id: u64) {
        if self.cap == 0 || self.hit(id) {
            return;
        }
        let s = if self.ids.len() < self.cap {
            self.ids.push(id);
            self.prev.push(NIL);
            self.next.push(NIL);
            (self.ids.len() - 1) as u32
        } else {
            // Full: reuse the least recently used slot.
            let s = self.tail;
            self.unlink(s);
            self.slot.remove(&self.ids[s as usize]);
            self.ids[s as usize] = id;
            s
        };
        self.slot.insert(id, s);
        self.push_front(s);
    }
}

/// Row indices in replay order; `None` for the file's (also timestamp
/// order when the rows are in it already: the stable sort would leave
/// them be). Indices are 32 bits: the first pass refuses more rows.
fn replay_order(rows: &Rows, order: Order) -> Option<Vec<u32>> {
    if order == Order::File {
        return None;
    }
    // A row without a timestamp keeps the key of the row before.
    let keys = || {
        let mut key = f64::NEG_INFINITY;
        rows.iter().map(move |r| {
            key = r.timestamp.get().unwrap_or(key);
            key
        })
    };
    let mut prev = f64::NEG_INFINITY;
    let sorted = keys().all(|k| {
        let le = prev.total_cmp(&k).is_le();
        prev = k;
        le
    });
    if sorted {
        return None;
    }
    let keys: Vec<f64> = keys().collect();
    let mut idx: Vec<u32> = (0..rows.len() as u32).collect();
    idx.sort_by(|&a, &b| keys[a as usize].total_cmp(&keys[b as usize]));
    Some(idx)
}

/// Tokens in block `i` of a row of `len` tokens.
fn block_tokens(i: usize, len: f64, b: f64) -> f64 {
    (len - i as f64 * b).clamp(0.0, b)
}

/// The tokens of a row's first `m` blocks: Σ `block_tokens(k, isl, b)`
/// for k < m, summed in that order. For a whole positive length that is
/// `min(isl, m b)`, and the sum of whole numbers below 2^53 is exact in
/// any order, so that is the same bits without a loop over the blocks
/// (half a million on the 16 MB slice; decision 46, later). Anything
/// else (fractions, signs of zero, NaN) is summed as written.
fn leading_tokens(m: usize, isl: f64, b: u64) -> f64 {
    const TWO_53: f64 = 9_007_199_254_740_992.0;
    let mb = m as f64 * b as f64;
    if m > 0 && isl > 0.0 && isl < TWO_53 && (isl as u64) as f64 == isl && mb < TWO_53 {
        return isl.min(mb);
    }
    (0..m).map(|k| block_tokens(k, isl, b as f64)).sum::<f64>()
}

/// The rows through `cache` in `order` (`None`: the file's, read in
/// order; else through `cursor`): the hit tokens, summed in that order.
fn replay(
    rows: &RowStore,
    order: Option<&[u32]>,
    cursor: &mut Option<RowCursor<'_>>,
    b: u64,
    cache: &mut dyn BlockCache,
) -> f64 {
    let mut hit_tokens = 0.0;
    match (order, cursor) {
        (Some(order), Some(cursor)) => {
            let mut ids = Vec::new();
            for &i in order {
                let r = cursor.row(i as usize, &mut ids);
                hit_tokens += replay_row(&ids, r.isl, b, cache);
            }
        }
        _ => rows.for_each_ids(|_, r, ids| hit_tokens += replay_row(ids, r.isl, b, cache)),
    }
    hit_tokens
}

/// One row through the cache: the tokens of its leading blocks that hit.
fn replay_row(ids: &[u64], isl: f64, b: u64, cache: &mut dyn BlockCache) -> f64 {
    let mut hit_tokens = 0.0;
    let mut hitting = true;
    for (k, &id) in ids.iter().enumerate() {
        if hitting && cache.hit(id) {
            hit_tokens += block_tokens(k, isl, b as f64);
        } else {
            hitting = false;
            cache.insert(id);
        }
    }
    hit_tokens
}

/// An infinite cache of the ids seen so far, for callers without an
/// [`IdTable`].
#[derive(Default)]
struct Seen(std::collections::HashSet<u64>);

impl BlockCache for Seen {
    fn hit(&mut self, id: u64) -> bool {
        self.0.contains(&id)
    }
    fn insert(&mut self, id: u64) {
        self.0.insert(id);
    }
}

/// The same causal model fed one row at a time (in the caller's order), so
/// hits can be charted per time window: an infinite cache, or an LRU of
/// `cache_blocks` blocks.
pub struct RowByRow {
    cache: Box<dyn BlockCache>,
    block_size: u64,
}

impl RowByRow {
    pub fn new(block_size: u64, cache_blocks: Option<u64>) -> RowByRow {
        let cache: Box<dyn BlockCache> = match cache_blocks {
            None => Box::new(Seen::default()),
            Some(c) => Box::new(Lru::new(c as usize)),
        };
        RowByRow { cache, block_size }
    }

    /// The hit tokens of a row of `isl` tokens with these block ids.
    pub fn row(&mut self, ids: &[u64], isl: f64) -> f64 {
        replay_row(ids, isl, self.block_size, self.cache.as_mut())
    }
}

/// What the cache model reads from the rows in file order, summed in the
/// report's one pass over them ([`super::aiperf::RowColumns::of`]'s
/// `also`): the input tokens, and the infinite cache's hits in file order.
pub struct FileTotals {
    block_size: u64,
    input_tokens: f64,
    hit_tokens: f64,
}

impl FileTotals {
    pub fn new(block_size: u64) -> FileTotals {
        // What `Iterator::sum` starts from (the sums were `sum`s over the
        // rows): the same bits for any first term.
        let zero: f64 = std::iter::empty::<f64>().sum();
        FileTotals {
            block_size,
            input_tokens: zero,
            hit_tokens: zero,
        }
    }

    /// The next row, in file order.
    #[inline]
    pub fn add(&mut self, r: &StoredRow) {
        self.input_tokens += r.isl.max(0.0);
        // In file order an infinite cache serves exactly each row's
        // leading blocks that earlier rows used: the first pass found them.
        self.hit_tokens += leading_tokens(r.first_unseen as usize, r.isl, self.block_size);
    }
}

/// Whether [`model`] reads the id table's flags (as marks): in timestamp
/// order, where the infinite cache is replayed. In file order it is the
/// first pass's `first_unseen`.
pub fn needs_marks(order: Order) -> bool {
    order == Order::Timestamp
}

/// The model; `totals` are the rows' in file order, at block size `b`.
pub fn model(
    rows: &RowStore,
    table: &mut IdTable,
    b: u64,
    order: Order,
    sizes: &[u64],
    totals: &FileTotals,
) -> CacheModel {
    debug_assert_eq!(totals.block_size, b);
    let input_tokens = totals.input_tokens;
    let replay_order = if needs_marks(order) || !sizes.is_empty() {
        replay_order(&rows.rows, order)
    } else {
        None
    };
    let replay_order = replay_order.as_deref();
    let mut cursor = replay_order.map(|_| rows.cursor());
    let rate = |hit: f64| {
        if input_tokens > 0.0 {
            hit / input_tokens
        } else {
            0.0
        }
    };
    let hit = if !needs_marks(order) {
        totals.hit_tokens
    } else {
        table.enter(Pass::Marks);
        replay(rows, replay_order, &mut cursor, b, &mut Infinite(table))
    };
    let mut results = vec![CacheResult {
        cache_blocks: None,
        hit_tokens: hit,
        hit_rate: rate(hit),
    }];
    for &c in sizes {
        let hit = replay(
            rows,
            replay_order,
            &mut cursor,
            b,
            &mut Lru::new(c as usize),
        );
        results.push(CacheResult {
            cache_blocks: Some(c),
            hit_tokens: hit,
            hit_rate: rate(hit),
        });
    }
    CacheModel {
        order,
        input_tokens,
        results,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn leading_tokens_are_the_blocks_summed(
            m in 0usize..40,
            isl in prop_oneof![
                4 => (0u32..5000).prop_map(f64::from),
                1 => (0u32..800).prop_map(|q| f64::from(q) / 4.0),
                1 => prop_oneof![Just(-0.0), Just(-3.0), Just(f64::NAN), Just(1e300)],
            ],
            b in prop_oneof![1u64..600, Just(1u64 << 40)],
        ) {
            let plain: f64 = (0..m).map(|k| block_tokens(k, isl, b as f64)).sum();
            prop_assert_eq!(leading_tokens(m, isl, b).to_bits(), plain.to_bits());
        }
    }

    #[test]
    fn lru_evicts_the_least_recently_used() {
        let mut c = Lru::new(2);
        c.insert(1);
        c.insert(2);
        assert!(c.hit(1)); // 1 is now the most recent
        c.insert(3); // evicts 2
        assert!(!c.hit(2));
        assert!(c.hit(1));
        assert!(c.hit(3));
        let mut r = RowByRow::new(2, None);
        // Blocks of 2 tokens; the second row shares the first block only.
        assert_eq!(r.row(&[1, 2], 4.0), 0.0);
        assert_eq!(r.row(&[1, 3, 2], 5.0), 2.0);
        // Block 2 is cached but follows a miss: prefix semantics.
        assert_eq!(r.row(&[9, 2], 3.0), 0.0);
        let mut z = Lru::new(0);
        z.insert(1);
        assert!(!z.hit(1));
    }
}
