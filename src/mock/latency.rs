//! The latency model: when each token of an answer is due.
//!
//! Every deadline is computed from the request's arrival, never from the
//! previous token: relative sleeps one after another drift by about a timer
//! tick per token (ARCHITECTURE.md §2, wire formats).

use std::thread;
use std::time::{Duration, Instant};

/// Longest delay the model produces, so a huge setting cannot overflow the
/// clock (about 11.5 days: far beyond any test).
const MAX_DELAY: Duration = Duration::from_secs(1_000_000);

#[derive(Debug, Clone, Copy, Default, PartialEq, clap::Args)]
pub struct Latency {
    /// Time to first token, fixed part, in ms.
    #[arg(long, default_value_t = 0.0, value_name = "X", value_parser = crate::options::non_negative)]
    pub ttft_ms: f64,
    /// Time to first token added per 1000 prompt tokens (prefill), in ms.
    #[arg(long, default_value_t = 0.0, value_name = "Y", value_parser = crate::options::non_negative)]
    pub ttft_per_1k_tokens_ms: f64,
    /// Time between tokens, in ms.
    #[arg(long, default_value_t = 0.0, value_name = "Z", value_parser = crate::options::non_negative)]
    pub itl_ms: f64,
}

impl Latency {
    /// Time to first token for a prompt of `prompt_tokens` tokens, in ms.
    pub fn ttft(&self, prompt_tokens: u64) -> f64 {
        self.ttft_ms + self.ttft_per_1k_tokens_ms * prompt_tokens as f64 / 1000.0
    }

    /// When token `i` (0-based) of the answer is due.
    pub fn deadline(&self, arrival: Instant, prompt_tokens: u64, i: u64) -> Instant {
        let ms = self.ttft(prompt_tokens) + self.itl_ms * i as f64;
        let delay = Duration::try_from_secs_f64(ms / 1000.0)
            .unwrap_or(MAX_DELAY)
            .min(MAX_DELAY);
        arrival.checked_add(delay).unwrap_or(arrival)
    }
}

/// Sleeps until `deadline`; returns at once if it has passed.
pub fn sleep_until(deadline: Instant) {
    let left = deadline.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        thread::sleep(left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_are_absolute() {
        let l = Latency {
            ttft_ms: 80.0,
            ttft_per_1k_tokens_ms: 10.0,
            itl_ms: 2.5,
        };
        let t0 = Instant::now();
        assert_eq!(l.deadline(t0, 2000, 0) - t0, Duration::from_millis(100));
        assert_eq!(l.deadline(t0, 2000, 4) - t0, Duration::from_millis(110));
    }

    #[test]
    fn huge_settings_do_not_overflow() {
        let l = Latency {
            ttft_ms: 1e300,
            ..Latency::default()
        };
        let t0 = Instant::now();
        assert_eq!(l.deadline(t0, u64::MAX, u64::MAX) - t0, MAX_DELAY);
    }
}
