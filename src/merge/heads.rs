//! The interleave's heads: each input's next row as a merge key, smallest
//! first, in a binary min-heap of its own rather than std's
//! `BinaryHeap`: the merge needs the smallest key after the top (the
//! runner-up, one of the top's two children), to send a run of the top's
//! file out in one write while its rows stay ahead of every other head
//! (decision 0048, "later").

/// A merge key: the timestamp (total order on floats), then the file index.
/// Two heads never share a file, so no two keys are equal and the order of
/// the rows out does not depend on how the heap is laid out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Key(pub f64, pub usize);

impl Key {
    /// Whether this key goes out before `o`: earlier, or as early from a
    /// lower file.
    #[inline]
    pub fn before(&self, o: &Key) -> bool {
        // Two different numbers are ordered by `<` as `total_cmp` orders
        // them, in two instructions; equal ones, signed zeros and NaN take
        // `total_cmp` (its bit tricks cost ~10 a comparison, one or two
        // comparisons a row).
        if self.0 < o.0 {
            return true;
        }
        if self.0 > o.0 {
            return false;
        }
        self.0.total_cmp(&o.0).then(self.1.cmp(&o.1)).is_lt()
    }
}

/// The heads, smallest at index 0; the children of `i` at `2i+1`, `2i+2`.
#[derive(Debug, Default)]
pub struct Heads {
    keys: Vec<Key>,
}

impl Heads {
    pub fn with_capacity(n: usize) -> Heads {
        Heads {
            keys: Vec::with_capacity(n),
        }
    }

    pub fn push(&mut self, key: Key) {
        self.keys.push(key);
        let mut i = self.keys.len() - 1;
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.keys[i].before(&self.keys[parent]) {
                break;
            }
            self.keys.swap(i, parent);
            i = parent;
        }
    }

    /// The smallest key.
    #[inline]
    pub fn top(&self) -> Option<Key> {
        self.keys.first().copied()
    }

    /// The smallest key after the top (the smaller of its children).
    #[inline]
    pub fn runner_up(&self) -> Option<Key> {
        match (self.keys.get(1), self.keys.get(2)) {
            (Some(a), Some(b)) => Some(if b.before(a) { *b } else { *a }),
            (a, _) => a.copied(),
        }
    }

    /// Replaces the top with `key` (the top's file's next row): one sift
    /// down, no comparison beyond the first when the top stays.
    #[inline]
    pub fn replace_top(&mut self, key: Key) {
        if let Some(top) = self.keys.first_mut() {
            *top = key;
            self.sift_down(0);
        }
    }

    /// Removes the top (its file has no rows left).
    pub fn pop_top(&mut self) {
        if let Some(last) = self.keys.pop() {
            if !self.keys.is_empty() {
                self.keys[0] = last;
                self.sift_down(0);
            }
        }
    }

    #[inline]
    fn sift_down(&mut self, mut i: usize) {
        let n = self.keys.len();
        loop {
            let left = 2 * i + 1;
            if left >= n {
                return;
            }
            let right = left + 1;
            let child = if right < n && self.keys[right].before(&self.keys[left]) {
                right
            } else {
                left
            };
            if !self.keys[child].before(&self.keys[i]) {
                return;
            }
            self.keys.swap(i, child);
            i = child;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pops everything; the keys come out sorted by (time, file), and the
    /// runner-up is always the key that comes out next.
    #[test]
    fn heads_come_out_in_key_order_and_the_runner_up_is_next() {
        let times = [5.0, 1.0, 3.0, 1.0, 9.0, -0.0, 0.0, 3.0, 2.0];
        let mut heads = Heads::with_capacity(times.len());
        for (t, &x) in times.iter().enumerate() {
            heads.push(Key(x, t));
        }
        let mut out = Vec::new();
        while let Some(top) = heads.top() {
            let next = heads.runner_up();
            heads.pop_top();
            assert_eq!(heads.top(), next);
            out.push((top.0, top.1));
        }
        // By hand: -0 before 0 in the total order; ties by file.
        let want = [
            (-0.0, 5),
            (0.0, 6),
            (1.0, 1),
            (1.0, 3),
            (2.0, 8),
            (3.0, 2),
            (3.0, 7),
            (5.0, 0),
            (9.0, 4),
        ];
        assert_eq!(out.len(), want.len());
        for (got, want) in out.iter().zip(want) {
            assert!(
                got.0.total_cmp(&want.0).is_eq() && got.1 == want.1,
                "{out:?}"
            );
        }
    }

    #[test]
    fn replacing_the_top_keeps_the_order() {
        let mut heads = Heads::with_capacity(3);
        for (t, x) in [(0, 4.0), (1, 2.0), (2, 2.0)] {
            heads.push(Key(x, t));
        }
        assert_eq!(heads.top(), Some(Key(2.0, 1)));
        assert_eq!(heads.runner_up(), Some(Key(2.0, 2)));
        // File 1's next row ties with file 2's head: the lower file stays
        // on top.
        heads.replace_top(Key(2.0, 1));
        assert_eq!(heads.top(), Some(Key(2.0, 1)));
        heads.replace_top(Key(3.0, 1));
        assert_eq!(heads.top(), Some(Key(2.0, 2)));
        assert_eq!(heads.runner_up(), Some(Key(3.0, 1)));
    }
}
