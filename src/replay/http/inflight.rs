//! The requests a worker pool has in flight, so a run whose drain time runs
//! out can still report what each one had measured. Whoever ends a request
//! (its worker, or the cancellation) claims it first; the other then leaves
//! it alone, so each request gets exactly one result.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::replay::target::Job;

/// Live facts about a request in flight, written by its worker as the
/// answer streams in.
#[derive(Debug, Default)]
pub struct Live {
    /// µs since run start of the first output event, plus one (0 = none yet).
    pub first_us_plus1: AtomicU64,
    pub chunks: AtomicU64,
}

impl Live {
    pub fn first_us(&self) -> Option<u64> {
        self.first_us_plus1.load(Ordering::Relaxed).checked_sub(1)
    }
}

/// One request between its send and its result.
#[derive(Debug)]
pub struct Entry {
    /// The job as sent (its history is not kept: a cancelled request's
    /// session is not continued).
    pub job: Job,
    pub t_send_us: u64,
    pub live: Live,
    claimed: AtomicBool,
}

impl Entry {
    /// True for the first caller only: that caller writes the result.
    pub fn claim(&self) -> bool {
        !self.claimed.swap(true, Ordering::AcqRel)
    }
}

#[derive(Debug, Default)]
pub struct Registry {
    map: Mutex<HashMap<u64, Arc<Entry>>>,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Arc<Entry>>> {
        // A worker that panicked holding the lock leaves a usable map.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `job` as sent at `t_send_us`.
    pub fn insert(&self, job: Job, t_send_us: u64) -> Arc<Entry> {
        let e = Arc::new(Entry {
            job,
            t_send_us,
            live: Live::default(),
            claimed: AtomicBool::new(false),
        });
        self.lock().insert(e.job.seq, e.clone());
        e
    }

    pub fn remove(&self, seq: u64) {
        self.lock().remove(&seq);
    }

    /// Claims every request still registered: the caller ends them.
    pub fn claim_all(&self) -> Vec<Arc<Entry>> {
        let mut v: Vec<Arc<Entry>> = self
            .lock()
            .values()
            .filter(|e| e.claim())
            .cloned()
            .collect();
        v.sort_by_key(|e| e.job.seq);
        v
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(seq: u64) -> Job {
        Job {
            seq,
            row: 0,
            t_sched_us: 0,
            warmup: false,
            history: None,
            worker: None,
        }
    }

    #[test]
    fn each_request_is_claimed_once() {
        let r = Registry::default();
        let a = r.insert(job(1), 10);
        let _b = r.insert(job(2), 20);
        // The worker of request 1 finishes first and claims it.
        assert!(a.claim());
        r.remove(1);
        let left = r.claim_all();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].job.seq, 2);
        // The worker of request 2 ends later: it must not write a second result.
        assert!(!left[0].claim());
        assert!(r.claim_all().is_empty());
    }

    #[test]
    fn live_first_token_time() {
        let l = Live::default();
        assert_eq!(l.first_us(), None);
        l.first_us_plus1.store(1, Ordering::Relaxed);
        assert_eq!(l.first_us(), Some(0));
    }
}
