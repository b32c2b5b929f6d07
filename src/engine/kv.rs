//! The KV cache: a fixed pool of blocks, a map from chained block hash to
//! the block holding it (the prefix cache), and an LRU list of free blocks.
//!
//! A block is in one of three states: held (reference count > 0, by running
//! requests), free and cached (count 0, still named by its hash, on the LRU
//! list), or free and empty (count 0, no hash, on the LRU list). Allocation
//! takes the least recently freed block and, if it was cached, forgets its
//! hash: that is the only way a cached prefix is evicted.

const NIL: u32 = u32::MAX;

/// Which block holds each cached hash: open addressing with linear
/// probing over 8-byte slots (the hash's low 32 bits, the block number + 1;
/// 0 is empty), at most half full because there are at most as many names
/// as blocks. Half the memory of a general map, so more of it stays in
/// cache: allocation, which evicts, is the engine's hottest path. Block
/// hashes are SplitMix64 outputs, so their low bits index well; a slot's
/// full hash is checked against the block itself.
struct Index {
    slots: Vec<u64>,
    mask: usize,
}

impl Index {
    fn new(blocks: usize) -> Index {
        let n = (2 * blocks).next_power_of_two().max(16);
        Index {
            slots: vec![0; n],
            mask: n - 1,
        }
    }

    fn home(&self, h: u64) -> usize {
        h as usize & self.mask
    }

    fn pack(h: u64, b: u32) -> u64 {
        (h << 32) | (u64::from(b) + 1)
    }

    /// The slot naming `h`, given each block's hash.
    fn find(&self, h: u64, hash_of: impl Fn(u32) -> u64) -> Option<usize> {
        let tag = h as u32;
        let mut i = self.home(h);
        loop {
            let e = self.slots[i];
            if e == 0 {
                return None;
            }
            let b = (e as u32) - 1;
            if (e >> 32) as u32 == tag && hash_of(b) == h {
                return Some(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    fn block(&self, slot: usize) -> u32 {
        (self.slots[slot] as u32) - 1
    }

    fn set(&mut self, slot: usize, h: u64, b: u32) {
        self.slots[slot] = Self::pack(h, b);
    }

    /// Adds `h` (not present) for block `b`.
    fn insert(&mut self, h: u64, b: u32) {
        let mut i = self.home(h);
        while self.slots[i] != 0 {
            i = (i + 1) & self.mask;
        }
        self.set(i, h, b);
    }

    /// Removes the slot naming `h`, which block `b` holds; later slots of
    /// the probe run shift back so no lookup stops early.
    fn remove(&mut self, h: u64, b: u32) {
        let want = Self::pack(h, b);
        let mut i = self.home(h);
        loop {
            match self.slots[i] {
                0 => return,
                e if e == want => break,
                _ => i = (i + 1) & self.mask,
            }
        }
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let e = self.slots[j];
            if e == 0 {
                break;
            }
            let k = (e >> 32) as usize & self.mask;
            // The entry at j may stay if its home lies cyclically in (i, j].
            let stays = if i <= j {
                i < k && k <= j
            } else {
                i < k || k <= j
            };
            if !stays {
                self.slots[i] = e;
                i = j;
            }
        }
        self.slots[i] = 0;
    }
}

/// One KV block's bookkeeping, in one place so a block operation touches
/// one cache line.
#[derive(Debug, Clone, Copy)]
struct Block {
    /// The hash the block is registered under, when `named` (only full,
    /// computed blocks are).
    hash: u64,
    refs: u32,
    // The free list links (least recently freed at the pool's `head`).
    prev: u32,
    next: u32,
    on_free: bool,
    named: bool,
    /// Equal to the pool's `watch_gen`: the block is in the watched prefix.
    mark: u32,
}

/// The cached prefix of the request at the head of the waiting queue, kept
/// up to date as blocks come and go: a request blocked for thousands of
/// steps is not looked up block by block at every step.
#[derive(Debug, Clone, Copy)]
struct Watch {
    key: u64,
    /// Leading hashes cached.
    hit: usize,
    /// Of their blocks, how many are on the free list.
    free: usize,
}

/// The block pool.
pub struct KvCache {
    b: Vec<Block>,
    cached: Index,
    // The free list: an intrusive doubly linked list over block numbers,
    // O(1) to remove a block from anywhere.
    head: u32,
    tail: u32,
    free: usize,
    watch: Option<Watch>,
    watch_gen: u32,
}

impl KvCache {
    pub fn new(blocks: usize) -> KvCache {
        let mut kv = KvCache {
            b: vec![
                Block {
                    hash: 0,
                    named: false,
                    refs: 0,
                    prev: NIL,
                    next: NIL,
                    on_free: false,
                    mark: 0,
                };
                blocks
            ],
            cached: Index::new(blocks),
            head: NIL,
            tail: NIL,
            free: 0,
            watch: None,
            watch_gen: 0,
        };
        for b in 0..blocks as u32 {
            kv.push_free(b);
        }
        kv
    }

    pub fn capacity(&self) -> usize {
        self.b.len()
    }

    /// Blocks on the free list (cached or empty).
    pub fn free(&self) -> usize {
        self.free
    }

    /// Blocks held by running requests.
    pub fn used(&self) -> usize {
        self.capacity() - self.free
    }

    /// The block holding `h`, if it is cached.
    fn lookup(&self, h: u64) -> Option<u32> {
        let blocks = &self.b;
        self.cached
            .find(h, |b| blocks[b as usize].hash)
            .map(|slot| self.cached.block(slot))
    }

    /// How many of `hashes` (from the first) are cached, in order.
    pub fn longest_prefix(&self, hashes: &[u64]) -> usize {
        hashes
            .iter()
            .take_while(|&&h| self.lookup(h).is_some())
            .count()
    }

    /// Of the first `n` hashes (all cached), how many sit on the free list:
    /// taking them costs free blocks just like a new allocation.
    pub fn free_among(&self, hashes: &[u64]) -> usize {
        hashes
            .iter()
            .filter_map(|&h| self.lookup(h))
            .filter(|&b| self.b[b as usize].on_free)
            .count()
    }

    /// How many of `hashes` (from the first) are cached, and how many of
    /// those sit on the free list, for the request named `key`. The answer
    /// is remembered and kept current until another key asks, a block of the
    /// prefix is evicted, or [`unwatch`](KvCache::unwatch); asking again
    /// then only looks past the known prefix.
    pub fn watched_prefix(&mut self, key: u64, hashes: &[u64]) -> (usize, usize) {
        let mut w = match self.watch {
            Some(w) if w.key == key && w.hit <= hashes.len() => w,
            _ => {
                self.watch_gen = self.watch_gen.wrapping_add(1);
                if self.watch_gen == 0 {
                    // Marks from 2^32 watches ago would look current.
                    for b in &mut self.b {
                        b.mark = 0;
                    }
                    self.watch_gen = 1;
                }
                Watch {
                    key,
                    hit: 0,
                    free: 0,
                }
            }
        };
        while let Some(b) = hashes.get(w.hit).and_then(|&h| self.lookup(h)) {
            let blk = &mut self.b[b as usize];
            blk.mark = self.watch_gen;
            w.free += usize::from(blk.on_free);
            w.hit += 1;
        }
        self.watch = Some(w);
        (w.hit, w.free)
    }

    /// Forgets the watched prefix (its request was admitted).
    pub fn unwatch(&mut self) {
        self.watch = None;
    }

    fn watched(&self, b: u32) -> bool {
        self.watch.is_some() && self.b[b as usize].mark == self.watch_gen
    }

    /// Takes a reference on the cached block of each hash (all must be cached).
    pub fn take_cached(&mut self, hashes: &[u64], into: &mut Vec<u32>) {
        for h in hashes {
            if let Some(b) = self.lookup(*h) {
                self.hold(b);
                into.push(b);
            }
        }
    }

    /// Allocates `n` empty blocks (the caller checked `free() >= n`),
    /// evicting the least recently freed cached blocks.
    pub fn allocate(&mut self, n: usize, into: &mut Vec<u32>) {
        for _ in 0..n {
            let b = self.head;
            if b == NIL {
                return;
            }
            self.unname(b);
            self.hold(b);
            into.push(b);
        }
    }

    /// Forgets every cached block no request holds (llama.cpp's one slot:
    /// before a finished request's blocks are released, what earlier
    /// prompts left is dropped, so only the last prompt stays cached). The
    /// blocks stay free.
    pub fn forget_free(&mut self) {
        let mut b = self.head;
        while b != NIL {
            let next = self.b[b as usize].next;
            self.unname(b);
            b = next;
        }
    }

    /// A cached block's name dropped: no request finds it any more.
    fn unname(&mut self, b: u32) {
        let blk = &mut self.b[b as usize];
        if blk.named {
            blk.named = false;
            let h = blk.hash;
            self.cached.remove(h, b);
            if self.watched(b) {
                self.watch = None;
            }
        }
    }

    /// Names a computed, full block by its hash so later requests can reuse
    /// it. If another block already holds the hash: while a running request
    /// uses that one, this block stays unnamed (two requests computed the
    /// same prefix at once, as in vLLM); if that one is free, the name moves
    /// here (this copy is the most recently used) and the old block, now
    /// holding nothing, goes to the front of the free list.
    pub fn register(&mut self, block: u32, hash: u64) {
        if self.b[block as usize].named {
            return;
        }
        let blocks = &self.b;
        let old = match self.cached.find(hash, |b| blocks[b as usize].hash) {
            None => {
                self.cached.insert(hash, block);
                None
            }
            Some(slot) => {
                let old = self.cached.block(slot);
                if self.b[old as usize].refs > 0 {
                    return;
                }
                self.cached.set(slot, hash, block);
                Some(old)
            }
        };
        self.b[block as usize].named = true;
        self.b[block as usize].hash = hash;
        if let Some(old) = old {
            self.b[old as usize].named = false;
            if self.watched(old) {
                self.watch = None;
            }
            self.unlink(old);
            self.push_free_front(old);
        }
    }

    /// Drops a request's references. Named blocks whose count reaches 0
    /// join the back of the free list in the order given (the first of them
    /// is evicted first); unnamed ones hold nothing worth keeping and go to
    /// the front, to be reused first. So the named blocks form an LRU cache
    /// by last use: mc-analyze's cache model.
    pub fn release(&mut self, blocks: &[u32]) {
        for &b in blocks {
            let r = &mut self.b[b as usize].refs;
            *r -= 1;
            if *r == 0 {
                if self.b[b as usize].named {
                    self.push_free(b);
                } else {
                    self.push_free_front(b);
                }
            }
        }
    }

    fn push_free_front(&mut self, b: u32) {
        let i = b as usize;
        self.b[i].prev = NIL;
        self.b[i].next = self.head;
        if self.head == NIL {
            self.tail = b;
        } else {
            self.b[self.head as usize].prev = b;
        }
        self.head = b;
        self.b[i].on_free = true;
        self.free += 1;
        self.watch_free(b, true);
    }

    fn hold(&mut self, b: u32) {
        if self.b[b as usize].on_free {
            self.unlink(b);
        }
        self.b[b as usize].refs += 1;
    }

    fn push_free(&mut self, b: u32) {
        let i = b as usize;
        self.b[i].prev = self.tail;
        self.b[i].next = NIL;
        if self.tail == NIL {
            self.head = b;
        } else {
            self.b[self.tail as usize].next = b;
        }
        self.tail = b;
        self.b[i].on_free = true;
        self.free += 1;
        self.watch_free(b, true);
    }

    fn unlink(&mut self, b: u32) {
        let i = b as usize;
        let (p, n) = (self.b[i].prev, self.b[i].next);
        if p == NIL {
            self.head = n;
        } else {
            self.b[p as usize].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.b[n as usize].prev = p;
        }
        self.b[i].on_free = false;
        self.free -= 1;
        self.watch_free(b, false);
    }

    /// A block of the watched prefix joined or left the free list.
    fn watch_free(&mut self, b: u32, joined: bool) {
        if self.watched(b) {
            if let Some(w) = &mut self.watch {
                if joined {
                    w.free += 1;
                } else {
                    w.free -= 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_finds_every_name_after_removals_across_the_wrap() {
        // 8 blocks -> 16 slots. Hashes with home 14 or 15 (low bits) probe
        // past the end of the table into slots 0, 1, ...
        let mut ix = Index::new(8);
        let hashes: Vec<u64> = (0..6u64).map(|i| (i << 40) | (14 + (i % 2))).collect();
        let hash_of = |b: u32| hashes[b as usize];
        for (b, &h) in hashes.iter().enumerate() {
            ix.insert(h, b as u32);
        }
        for remove in [1usize, 4, 0] {
            ix.remove(hashes[remove], remove as u32);
            assert_eq!(ix.find(hashes[remove], hash_of), None);
        }
        for b in [2usize, 3, 5] {
            let slot = ix.find(hashes[b], hash_of).unwrap();
            assert_eq!(ix.block(slot), b as u32);
        }
        assert_eq!(ix.slots.iter().filter(|&&e| e != 0).count(), 3);
    }

    #[test]
    fn freed_blocks_stay_cached_until_their_space_is_needed() {
        let mut kv = KvCache::new(3);
        let mut a = Vec::new();
        kv.allocate(2, &mut a);
        kv.register(a[0], 100);
        kv.register(a[1], 101);
        assert_eq!(kv.free(), 1);
        kv.release(&a);
        assert_eq!(kv.free(), 3);
        assert_eq!(kv.longest_prefix(&[100, 101, 102]), 2);
        // The never-used block goes first, then 100 (freed before 101).
        let mut b = Vec::new();
        kv.allocate(2, &mut b);
        assert_eq!(kv.longest_prefix(&[100, 101]), 0);
        assert_eq!(kv.longest_prefix(&[101]), 1);
    }

    #[test]
    fn taking_a_cached_block_removes_it_from_the_free_list() {
        let mut kv = KvCache::new(2);
        let mut a = Vec::new();
        kv.allocate(1, &mut a);
        kv.register(a[0], 7);
        kv.release(&a);
        assert_eq!(kv.free_among(&[7]), 1);
        let mut b = Vec::new();
        kv.take_cached(&[7], &mut b);
        assert_eq!(b, a);
        assert_eq!(kv.free(), 1);
        // Allocating the last free block must not evict the held one.
        let mut c = Vec::new();
        kv.allocate(1, &mut c);
        assert_eq!(kv.longest_prefix(&[7]), 1);
        assert_eq!(kv.free(), 0);
    }

    #[test]
    fn a_duplicate_hash_is_not_registered_twice() {
        let mut kv = KvCache::new(2);
        let mut a = Vec::new();
        kv.allocate(2, &mut a);
        kv.register(a[0], 5);
        kv.register(a[1], 5);
        kv.release(&a[1..]);
        let mut b = Vec::new();
        kv.allocate(1, &mut b);
        // Reusing the unnamed block evicted nothing.
        assert_eq!(kv.longest_prefix(&[5]), 1);
    }

    #[test]
    fn the_watched_prefix_follows_evictions_and_the_free_list() {
        let mut kv = KvCache::new(4);
        let mut a = Vec::new();
        kv.allocate(2, &mut a);
        kv.register(a[0], 10);
        kv.register(a[1], 11);
        // Both held: cached, none free.
        assert_eq!(kv.watched_prefix(1, &[10, 11, 12]), (2, 0));
        kv.release(&a[1..]);
        assert_eq!(kv.watched_prefix(1, &[10, 11, 12]), (2, 1));
        // 12 appears: the watch extends.
        let mut b = Vec::new();
        kv.allocate(1, &mut b);
        kv.register(b[0], 12);
        assert_eq!(kv.watched_prefix(1, &[10, 11, 12]), (3, 1));
        kv.release(&a[..1]);
        kv.release(&b);
        assert_eq!(kv.watched_prefix(1, &[10, 11, 12]), (3, 3));
        // Allocating 3 (free list: empty block, 11, 10, 12) evicts 11 and 10.
        let mut c = Vec::new();
        kv.allocate(3, &mut c);
        assert_eq!(kv.watched_prefix(1, &[10, 11, 12]), (0, 0));
        // Another key starts afresh and agrees with the plain lookups.
        let h = [12];
        assert_eq!(
            kv.watched_prefix(2, &h),
            (kv.longest_prefix(&h), kv.free_among(&h))
        );
    }

    #[test]
    fn a_recomputed_free_hash_moves_to_the_new_block() {
        let mut kv = KvCache::new(3);
        let mut a = Vec::new();
        kv.allocate(1, &mut a);
        kv.register(a[0], 5);
        kv.release(&a);
        // The free list is now [never used, never used, a0].
        let mut b = Vec::new();
        kv.allocate(1, &mut b);
        kv.register(b[0], 5);
        assert_eq!(kv.longest_prefix(&[5]), 1);
        // a0 lost its name and went to the front: the next allocation takes it
        // and leaves the other empty block.
        let mut c = Vec::new();
        kv.allocate(1, &mut c);
        assert_eq!(c, a);
        kv.release(&b);
        assert_eq!(kv.free_among(&[5]), 1);
    }
}
