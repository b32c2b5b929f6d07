//! One byte of flags per id, in pages of 64 Ki ids made when an id in them
//! is first met.
//!
//! Ids are conventionally dense (0, 1, 2, … in first-use order), so a byte
//! indexed by id is the cheapest home for them; `IdMap`'s one table grown
//! by doubling left up to half of it unused and zeroed (17 MB for the 13 M
//! ids of the 256 MB generated trace), where pages leave at most one page
//! (64 KB) unused. Ids far beyond the ones met go to a hash map, as in
//! `IdMap`, and move into pages when the pages' reach grows over them:
//! every id lives in exactly one of the two, so the numbering never
//! changes an answer (ids are only names).

use std::collections::HashMap;

use super::IdHash;

const PAGE_BITS: u32 = 16;
const PAGE: usize = 1 << PAGE_BITS;
const MASK: u64 = PAGE as u64 - 1;
/// Ids the pages reach at least, however few ids were met.
const MIN_REACH: u64 = 1 << 20;

#[derive(Debug, Default)]
pub struct Flags {
    /// Page `i` holds ids `i << 16 ..`; `None` until one of them is met.
    pages: Vec<Option<Box<[u8]>>>,
    /// Ids at or beyond the pages' reach.
    far: HashMap<u64, u8, IdHash>,
    /// Ids given a byte: the scale of the numbering, for the reach.
    met: u64,
}

impl Flags {
    /// The flags of `id` (0: never met).
    #[inline]
    pub fn get(&self, id: u64) -> u8 {
        match self.pages.get(page_of(id)) {
            Some(Some(page)) => page[(id & MASK) as usize],
            Some(None) => 0,
            None if self.far.is_empty() => 0,
            None => self.far.get(&id).copied().unwrap_or(0),
        }
    }

    /// The flags of `id` to change, made (0) when it was never met.
    #[inline]
    pub fn slot(&mut self, id: u64) -> &mut u8 {
        let p = page_of(id);
        if !matches!(self.pages.get(p), Some(Some(_))) {
            self.make_page(id);
        }
        let v = match self.pages.get_mut(p) {
            Some(Some(page)) => &mut page[(id & MASK) as usize],
            _ => self.far.entry(id).or_insert(0),
        };
        self.met += u64::from(*v == 0);
        v
    }

    /// The flags of ids `id..id + n` (n > 0), cut at the end of `id`'s
    /// page (made when the pages reach it); `None` when `id` lives in the
    /// far map. A caller that gives 0 bytes flags says how many with
    /// [`Flags::met_more`], as [`Flags::slot`] counts them.
    #[inline]
    pub fn run_mut(&mut self, id: u64, n: usize) -> Option<&mut [u8]> {
        let p = page_of(id);
        if !matches!(self.pages.get(p), Some(Some(_))) {
            self.make_page(id);
        }
        let Some(Some(page)) = self.pages.get_mut(p) else {
            return None;
        };
        let at = (id & MASK) as usize;
        Some(&mut page[at..at + n.min(PAGE - at)])
    }

    /// `k` ids were given their first flags through [`Flags::run_mut`].
    pub fn met_more(&mut self, k: u64) {
        self.met += k;
    }

    /// Makes the page of `id` when the pages reach it (growing their
    /// reach first when they may).
    #[cold]
    fn make_page(&mut self, id: u64) {
        let p = page_of(id);
        if p >= self.pages.len() {
            self.reach(id);
        }
        if let Some(page @ None) = self.pages.get_mut(p) {
            *page = Some(vec![0; PAGE].into_boxed_slice());
        }
    }

    /// The flags of `id` to change, unless it was never met.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut u8> {
        let v = match self.pages.get_mut(page_of(id)) {
            Some(Some(page)) => &mut page[(id & MASK) as usize],
            Some(None) => return None,
            None => self.far.get_mut(&id)?,
        };
        (*v != 0).then_some(v)
    }

    /// Extends the pages' reach towards `id` (doubling, within a small
    /// multiple of the ids met), moving the far ids it now covers.
    fn reach(&mut self, id: u64) {
        let limit = self.met.saturating_mul(4).max(MIN_REACH);
        if id >= limit {
            return;
        }
        let len = (page_of(id) + 1)
            .max(self.pages.len() * 2)
            .min(page_of(limit - 1) + 1);
        self.pages.resize(len, None);
        if self.far.is_empty() {
            return;
        }
        let far = std::mem::take(&mut self.far);
        for (k, v) in far {
            match self.pages.get_mut(page_of(k)) {
                Some(page) => {
                    page.get_or_insert_with(|| vec![0; PAGE].into_boxed_slice())
                        [(k & MASK) as usize] = v;
                }
                None => {
                    self.far.insert(k, v);
                }
            }
        }
    }

    /// How many met ids' flags satisfy `pred` (a loop over each page's
    /// bytes, which the compiler vectorises). The tests' view: the table
    /// counts what it needs as flags are set.
    #[cfg(test)]
    pub fn count(&self, pred: impl Fn(u8) -> bool) -> u64 {
        let paged: usize = self
            .pages
            .iter()
            .flatten()
            .map(|p| p.iter().filter(|&&f| f != 0 && pred(f)).count())
            .sum();
        paged as u64 + self.far.values().filter(|&&f| f != 0 && pred(f)).count() as u64
    }

    /// The met ids whose flags satisfy `pred`, in no order.
    pub fn ids_with(&self, pred: impl Fn(u8) -> bool) -> Vec<u64> {
        let mut out = Vec::new();
        for (p, page) in self.pages.iter().enumerate() {
            let Some(page) = page else { continue };
            let base = (p as u64) << PAGE_BITS;
            out.extend(
                (base..)
                    .zip(page.iter())
                    .filter(|&(_, &f)| f != 0 && pred(f))
                    .map(|(id, _)| id),
            );
        }
        out.extend(
            self.far
                .iter()
                .filter(|&(_, &f)| f != 0 && pred(f))
                .map(|(&id, _)| id),
        );
        out
    }

    /// Clears `bits` in every id's flags (the met ones keep a bit of
    /// their own set, so they stay met).
    pub fn clear_bits(&mut self, bits: u8) {
        for page in self.pages.iter_mut().flatten() {
            for f in page.iter_mut() {
                *f &= !bits;
            }
        }
        for f in self.far.values_mut() {
            *f &= !bits;
        }
    }
}

/// The page of `id` (ids past `usize` map past every page).
fn page_of(id: u64) -> usize {
    usize::try_from(id >> PAGE_BITS).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_far_id_keeps_its_flags_when_the_pages_reach_it() {
        let mut f = Flags::default();
        *f.slot(5_000_000) = 7;
        *f.slot(u64::MAX) = 3;
        assert_eq!(f.far.len(), 2);
        // Enough small ids that the reach grows past 5,000,000.
        for id in 0..1_300_000 {
            *f.slot(id) = 1;
        }
        *f.slot(4_999_999) = 2;
        assert_eq!(f.far.len(), 1, "only u64::MAX is still far");
        assert_eq!(f.get(5_000_000), 7);
        assert_eq!(f.get(4_999_999), 2);
        assert_eq!(f.get(u64::MAX), 3);
        assert_eq!(f.get(5_000_001), 0);
        assert_eq!(f.get_mut(5_000_001), None);
        assert_eq!(f.count(|_| true), 1_300_000 + 3);
        // Pages only where ids were met: the 20 of 0..1,300,000 and the
        // one of 4,999,999 and 5,000,000.
        assert_eq!(f.pages.iter().flatten().count(), 20 + 1);
        assert_eq!(f.count(|v| v == 7), 1);
        assert_eq!(f.count(|v| v != 1), 3);
        let mut odd = f.ids_with(|v| v != 1);
        odd.sort_unstable();
        assert_eq!(odd, vec![4_999_999, 5_000_000, u64::MAX]);
        f.clear_bits(0b110);
        assert_eq!(f.get(5_000_000), 1);
        assert_eq!(
            f.get(4_999_999),
            0,
            "flags left 0 by clearing are read as 0"
        );
        assert_eq!(f.get(u64::MAX), 1);
    }

    #[test]
    fn unmet_ids_are_absent_wherever_they_would_live() {
        let mut f = Flags::default();
        for id in [0, 65_535, 65_536, 1 << 40, u64::MAX] {
            assert_eq!(f.get(id), 0);
            assert_eq!(f.get_mut(id), None);
        }
        assert_eq!(*f.slot(1 << 40), 0);
        *f.slot(1 << 40) = 9;
        assert_eq!(f.get_mut(1 << 40).copied(), Some(9));
        assert_eq!(f.ids_with(|_| true), vec![1 << 40]);
        assert_eq!(f.count(|v| v == 9), 1);
    }
}
