//! What the engine did, summed over its steps.

use crate::stats::nearest_rank;
use serde::{Deserialize, Serialize};

/// Running sums, updated once per step.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally {
    pub steps: u64,
    pub busy_us: u64,
    /// Steps by batch size (requests in the step).
    pub batch_hist: Vec<u64>,
    /// Steps by tokens scheduled.
    pub token_hist: Vec<u64>,
    pub batch_sum: u64,
    pub token_sum: u64,
    pub kv_use_sum: f64,
    pub kv_use_max: f64,
    pub step_us_max: u64,
    pub preemptions: u64,
    pub finished: u64,
    pub rejected: u64,
    /// Prompt tokens of requests at their first admission.
    pub prompt_tokens: u64,
    /// Of those, served from the prefix cache.
    pub cached_tokens: u64,
    pub first_step_us: Option<u64>,
    pub last_step_end_us: u64,
}

fn bump(hist: &mut Vec<u64>, v: u64) {
    let i = v as usize;
    if hist.len() <= i {
        hist.resize(i + 1, 0);
    }
    hist[i] += 1;
}

impl Tally {
    pub fn step(&mut self, start_us: u64, dur_us: u64, batch: u64, tokens: u64, kv_use: f64) {
        self.steps += 1;
        self.busy_us += dur_us;
        bump(&mut self.batch_hist, batch);
        bump(&mut self.token_hist, tokens);
        self.batch_sum += batch;
        self.token_sum += tokens;
        self.kv_use_sum += kv_use;
        self.kv_use_max = self.kv_use_max.max(kv_use);
        self.step_us_max = self.step_us_max.max(dur_us);
        self.first_step_us.get_or_insert(start_us);
        self.last_step_end_us = start_us + dur_us;
    }

    /// Adds another engine's sums (a cluster's totals): counts and
    /// histograms add, maxima take the larger, the busy span runs from the
    /// first step to the last end of either.
    pub fn merge(&mut self, o: &Tally) {
        self.steps += o.steps;
        self.busy_us += o.busy_us;
        for (hist, other) in [
            (&mut self.batch_hist, &o.batch_hist),
            (&mut self.token_hist, &o.token_hist),
        ] {
            if hist.len() < other.len() {
                hist.resize(other.len(), 0);
            }
            for (h, v) in hist.iter_mut().zip(other) {
                *h += v;
            }
        }
        self.batch_sum += o.batch_sum;
        self.token_sum += o.token_sum;
        self.kv_use_sum += o.kv_use_sum;
        self.kv_use_max = self.kv_use_max.max(o.kv_use_max);
        self.step_us_max = self.step_us_max.max(o.step_us_max);
        self.preemptions += o.preemptions;
        self.finished += o.finished;
        self.rejected += o.rejected;
        self.prompt_tokens += o.prompt_tokens;
        self.cached_tokens += o.cached_tokens;
        self.first_step_us = match (self.first_step_us, o.first_step_us) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_step_end_us = self.last_step_end_us.max(o.last_step_end_us);
    }

    pub fn stats(&self) -> EngineStats {
        let per_step = |x: f64| {
            if self.steps == 0 {
                0.0
            } else {
                x / self.steps as f64
            }
        };
        EngineStats {
            steps: self.steps,
            requests_finished: self.finished,
            requests_rejected: self.rejected,
            prompt_tokens: self.prompt_tokens,
            cached_tokens: self.cached_tokens,
            hit_rate: if self.prompt_tokens == 0 {
                0.0
            } else {
                self.cached_tokens as f64 / self.prompt_tokens as f64
            },
            preemptions: self.preemptions,
            batch_size_mean: per_step(self.batch_sum as f64),
            batch_size_p99: nearest_rank(&self.batch_hist, 0.99),
            tokens_per_step_mean: per_step(self.token_sum as f64),
            tokens_per_step_p99: nearest_rank(&self.token_hist, 0.99),
            kv_use_mean: per_step(self.kv_use_sum),
            kv_use_max: self.kv_use_max,
            busy_ms: self.busy_us as f64 / 1000.0,
            step_ms_max: self.step_us_max as f64 / 1000.0,
            simulated_ms: self
                .first_step_us
                .map_or(0.0, |f| (self.last_step_end_us - f) as f64 / 1000.0),
        }
    }
}

/// The engine's statistics for the run summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineStats {
    pub steps: u64,
    pub requests_finished: u64,
    /// Requests that could never fit in the KV cache.
    pub requests_rejected: u64,
    /// Prompt tokens of admitted requests.
    pub prompt_tokens: u64,
    /// Of those, served from the prefix cache at first admission.
    pub cached_tokens: u64,
    /// cached_tokens / prompt_tokens.
    pub hit_rate: f64,
    pub preemptions: u64,
    /// Requests per step.
    pub batch_size_mean: f64,
    /// Nearest-rank 99th percentile over steps.
    pub batch_size_p99: u64,
    pub tokens_per_step_mean: f64,
    pub tokens_per_step_p99: u64,
    /// KV blocks held by running requests / all blocks, mean over steps.
    pub kv_use_mean: f64,
    pub kv_use_max: f64,
    /// Time spent in steps.
    pub busy_ms: f64,
    /// The longest step.
    pub step_ms_max: f64,
    /// From the first step's start to the last step's end.
    pub simulated_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_of_step_histograms() {
        // 100 steps: 98 of size 1, 2 of size 7. Rank ceil(0.99·100) = 99 -> 7.
        let mut h = vec![0; 8];
        h[1] = 98;
        h[7] = 2;
        assert_eq!(nearest_rank(&h, 0.99), 7);
        h[7] = 1;
        h[1] = 99;
        assert_eq!(nearest_rank(&h, 0.99), 1);
        assert_eq!(nearest_rank(&[], 0.99), 0);
    }
}
