//! The documented limit of every quantity a hostile input could make
//! unbounded (ARCHITECTURE.md §2, "Limits"): each is checked where the value
//! enters (a record field: exit 65 naming line and field; an option: exit 2
//! naming the option), so no tool allocates, loops or waits without bound
//! on a value that merely parses.

use crate::error::RecordError;

/// Most tokens one row may hold (`input_length`, `output_length`, a
/// generated length): far beyond any model's context, and small enough
/// that its block ids (at B = 1, 80 MB) fit in memory.
pub const MAX_ROW_TOKENS: u64 = 10_000_000;

/// Latest time (ms) a timestamp or a delay may name: 2^53 ms (about
/// 285,000 years), the largest integer every JSON reader keeps exact.
pub const MAX_TIME_MS: f64 = 9_007_199_254_740_992.0;

/// Most rows an open-ended generator may be asked for (mc-gen: rate ×
/// duration, or `--num-requests`).
pub const MAX_GEN_ROWS: u64 = 1_000_000_000;

/// Most time windows of one figure (mc-plot, mc-gen --plot): the trace's
/// span divided by `--window-ms`.
pub const MAX_WINDOWS: u64 = 1_000_000;

/// Most histogram bins (mc-plot `--bins`).
pub const MAX_BINS: usize = 100_000;

/// Largest step cost (ms) an engine profile may give one step: a day.
pub const MAX_STEP_MS: f64 = 86_400_000.0;

/// Most KV blocks of the engine model (`--kv-tokens` / `--engine-block-size`):
/// each is held in memory (about 50 bytes with its index), so 2^24 blocks
/// (268 M tokens at 16 a block, far above one server) stay under 1 GB.
pub const MAX_KV_BLOCKS: u64 = 1 << 24;

/// The most shards a plan may have (a shard's index fits in 16 bits of the
/// run id, which keeps request ids unique across shards).
/// mc-report holds the merged shards' counts by this limit too: a result
/// line's `shard` is data.
pub const MAX_SHARDS: u32 = 65_535;

/// `v` tokens of field `field`, refused above [`MAX_ROW_TOKENS`].
pub fn tokens(field: &str, v: u64) -> Result<u64, RecordError> {
    if v > MAX_ROW_TOKENS {
        return Err(RecordError::field(
            field,
            format!(
                "{v} tokens is above the limit of {MAX_ROW_TOKENS} tokens per row \
                 (no model takes such a row: check the source's value)"
            ),
        ));
    }
    Ok(v)
}

/// A time in ms of field `field`: finite, at least 0 and at most
/// [`MAX_TIME_MS`].
pub fn time_ms(field: &str, v: f64) -> Result<f64, RecordError> {
    if v.is_nan() || v < 0.0 {
        return Err(RecordError::field(
            field,
            format!(
                "{v} ms: a time must be a finite number at least 0 (ms from the trace's start; \
                 shift the trace so its earliest time is 0)"
            ),
        ));
    }
    if v > MAX_TIME_MS {
        return Err(RecordError::field(
            field,
            format!(
                "{v:e} ms is above the limit of 2^53 ms (about 285,000 years): check the \
                 source's unit (seconds, ms) and value"
            ),
        ));
    }
    Ok(v)
}

/// Most parallel calls one agent step may fan out to (mc-gen agent's
/// `parallel_tools`, and `--sub-agent-calls`): far beyond any real agent's
/// fan-out, and small enough that one turn is drawn in milliseconds (the
/// tool phase draws every branch).
pub const MAX_AGENT_FANOUT: u64 = 10_000;

/// Most retries of one tool call (mc-gen agent's `max_tool_retries`): each
/// retry is drawn, so with `parallel_tools` at its limit a turn stays
/// within a million draws.
pub const MAX_TOOL_RETRIES: u64 = 100;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_the_field() {
        assert_eq!(tokens("in", 5), Ok(5));
        let e = tokens("in", u64::MAX).unwrap_err().to_string();
        assert!(
            e.starts_with("field `in`: 18446744073709551615 tokens"),
            "{e}"
        );
        assert!(time_ms("t", -1.0).is_err());
        assert!(time_ms("t", f64::NAN).is_err());
        assert!(time_ms("t", 1e300).is_err());
        assert_eq!(time_ms("t", 0.0), Ok(0.0));
    }
}
