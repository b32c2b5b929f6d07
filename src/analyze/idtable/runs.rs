//! The first pass a run of consecutive ids at a time. A Mooncake row is a
//! few runs of consecutive ids (a shared prefix, then fresh ids), and the
//! id-at-a-time walk ([`IdTable::one`]) spent about 100 instructions an id
//! finding each id's flag byte and deciding again what the id before
//! already decided (decision 46). Here a run's flag bytes are one slice of
//! a page: a fresh run is a fill (and a head every `MAX_CHAIN` ids), a run
//! that follows the block before along its primary nodes an OR with the
//! counts of the bits it sets. Everything else, and every row with an id
//! twice, goes one id at a time; the property test holds both to the same
//! table.

use super::{
    IdTable, Primary, Walk, FOLLOWS, LAST, MAX_CHAIN, MULTI, PAIRED_TWICE, SEEN, VISITED_TWICE,
};

impl IdTable {
    /// Walks the run of consecutive ids of `ids` at `pos` as far as one of
    /// the two shapes goes (within `ids[pos]`'s page): how many ids. 0
    /// when the id at `pos` starts neither, with its flags when it lives
    /// in the pages (then seen). The row has no id twice.
    pub(super) fn run(
        &mut self,
        w: &mut Walk,
        row: u32,
        pos: usize,
        ids: &[u64],
    ) -> (usize, Option<u8>) {
        let id = ids[pos];
        let Some(flags) = self.flags.run_mut(id, ids.len() - pos) else {
            return (0, None);
        };
        if flags[0] == 0 {
            // `flags` is at most the rest of the row long.
            let (ids, n) = (&ids[pos..], flags.len());
            let mut k = 1;
            // Four ids at a time without a branch each (a fresh run is a
            // dozen ids and more; one at a time was 10 instructions an id),
            // then one at a time to its end.
            while k + 4 <= n {
                let w = &ids[k..k + 4];
                let fresh =
                    u32::from_ne_bytes([flags[k], flags[k + 1], flags[k + 2], flags[k + 3]]);
                let next = id.wrapping_add(k as u64);
                let steps = (w[0] == next)
                    & (w[1] == next.wrapping_add(1))
                    & (w[2] == next.wrapping_add(2))
                    & (w[3] == next.wrapping_add(3))
                    & (fresh == 0);
                if !steps {
                    break;
                }
                k += 4;
            }
            while k < n && ids[k] == id.wrapping_add(k as u64) && flags[k] == 0 {
                k += 1;
            }
            self.fresh_run(w, row, pos, id, k);
            return (k, None);
        }
        // Follows the block before at its primary node: see `one`.
        let Some((p, pp)) = w
            .prev
            .filter(|&(p, _)| flags[0] & FOLLOWS != 0 && p.wrapping_add(1) == id && w.parent == p)
        else {
            return (0, Some(flags[0]));
        };
        // The run's ids and their flags, read and set in one loop.
        let (mut not_paired, mut not_visited, mut last_once) = (0u32, 0u64, false);
        let mut k = 0;
        while k < flags.len() && ids[pos + k] == id.wrapping_add(k as u64) {
            let f = flags[k];
            if f & FOLLOWS == 0 {
                break;
            }
            not_paired += u32::from(f & PAIRED_TWICE == 0);
            not_visited += u64::from(f & VISITED_TWICE == 0);
            last_once |= f & (LAST | MULTI) == LAST;
            flags[k] = f | MULTI | VISITED_TWICE | PAIRED_TWICE;
            k += 1;
        }
        // Each pair met for the second time counts for the row it was
        // first seen in, the head's row, once per id.
        if not_paired > 0 {
            if let Some(c) = self.repeated.get_mut(pp.row as usize) {
                *c += not_paired;
            }
        }
        self.visited_twice += not_visited;
        if last_once {
            self.candidate_rows.push(pp.row);
        }
        if w.v.first_unseen < pos {
            w.v.not_prefix_shaped = true;
        }
        w.repeated += k as u32;
        w.prev_fresh = false;
        let last = id + (k as u64 - 1);
        let primary = Primary {
            parent: if k == 1 { p } else { last - 1 },
            pos: pp.pos + k as u32,
            row: pp.row,
            chain: pp.chain + k as u32,
        };
        w.prev = Some((last, primary));
        w.parent = last;
        (k, None)
    }

    /// `k` fresh consecutive ids from `id` at `pos`, their flag bytes 0:
    /// each follows the one before (the first when the block before was
    /// fresh and is `id - 1`), but every `MAX_CHAIN`-th is a head.
    fn fresh_run(&mut self, w: &mut Walk, row: u32, pos: usize, id: u64, k: usize) {
        // The first id's distance from its head (0: it is one).
        let c0 = match w.prev {
            Some((p, pp))
                if w.prev_fresh && p.wrapping_add(1) == id && pp.chain + 1 < MAX_CHAIN =>
            {
                pp.chain + 1
            }
            _ => 0,
        };
        if let Some(flags) = self.flags.run_mut(id, k) {
            flags[..k].fill(SEEN | FOLLOWS);
            let mut j = ((MAX_CHAIN - c0) % MAX_CHAIN) as usize;
            while j < k {
                flags[j] = SEEN;
                j += MAX_CHAIN as usize;
            }
        }
        let mut j = ((MAX_CHAIN - c0) % MAX_CHAIN) as usize;
        while j < k {
            let parent = if j == 0 { w.parent } else { id + j as u64 - 1 };
            self.heads
                .insert(id + j as u64, parent, (pos + j) as u32, row);
            j += MAX_CHAIN as usize;
        }
        self.flags.met_more(k as u64);
        self.distinct += k as u64;
        self.nodes += k as u64;
        w.first_sight(pos);
        let last = id + (k as u64 - 1);
        let primary = Primary {
            parent: if k == 1 { w.parent } else { last - 1 },
            pos: (pos + k - 1) as u32,
            row,
            chain: (c0 + k as u32 - 1) % MAX_CHAIN,
        };
        w.prev = Some((last, primary));
        w.prev_fresh = true;
        w.parent = last;
    }
}
