//! Injected faults: error statuses, hangs, and broken streams, and the
//! deterministic choice of which requests get them.

use crate::hash::{splitmix64, unit, GOLDEN_GAMMA};

/// The faults to inject; all off by default.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Faults {
    /// Answer with this HTTP status (400-599) and a vLLM error body instead
    /// of a completion.
    #[arg(long, value_name = "CODE")]
    pub status: Option<u16>,
    /// Seconds sent in Retry-After with --status 429.
    #[arg(long, default_value_t = 1, value_name = "S")]
    pub retry_after: u64,
    /// Fraction (0 to 1) of requests that get the faults [default: 1].
    #[arg(long, value_name = "F", value_parser = crate::options::fraction)]
    pub fail_rate: Option<f64>,
    /// Seeds the --fail-rate choice, which depends only on the seed and the
    /// request's sequence number (the log's `seq`, which counts every request).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed: u64,
    /// Cut the connection after the role chunk and N content tokens: no
    /// end of the chunked body, no `[DONE]`. A non-streaming request (with N
    /// at most its length) gets no answer, the connection closed when token
    /// N would be due.
    #[arg(long, value_name = "N")]
    pub drop_after: Option<u64>,
    /// Streams: after N content tokens send an error event, then `[DONE]`.
    #[arg(long, value_name = "N")]
    pub error_after: Option<u64>,
    /// Streams: after N content tokens send an event that is not JSON, then
    /// go on normally.
    #[arg(long, value_name = "N")]
    pub malformed_after: Option<u64>,
    /// Read the request and never answer (until the client goes away).
    #[arg(long)]
    pub hang: bool,
    /// Never send usage (no usage chunk, no usage in whole responses), as
    /// some servers do. A server personality, so not subject to the rate.
    #[arg(long)]
    pub no_usage: bool,
}

/// What to inject into a stream once a given number of tokens is out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamFaults {
    pub malformed: bool,
    pub error: bool,
    pub drop: bool,
}

impl Faults {
    pub fn validate(&self) -> Result<(), String> {
        if let Some(s) = self.status {
            if !(400..=599).contains(&s) {
                return Err(format!(
                    "--status must be an error status (400-599), not {s}"
                ));
            }
        }
        // The rate's range is checked by its value parser.
        if self.fail_rate.is_some() && !self.any_per_request() {
            return Err("--fail-rate needs a fault to apply: --status, --hang, \
                 --drop-after, --error-after or --malformed-after"
                .into());
        }
        Ok(())
    }

    /// Whether a stream can meet a fault mid-way (`--drop-after`,
    /// `--error-after`, `--malformed-after`).
    pub fn any_in_stream(&self) -> bool {
        self.drop_after.is_some() || self.error_after.is_some() || self.malformed_after.is_some()
    }

    fn any_per_request(&self) -> bool {
        self.status.is_some()
            || self.hang
            || self.drop_after.is_some()
            || self.error_after.is_some()
            || self.malformed_after.is_some()
    }

    /// Whether request number `seq` gets the faults. Depends only on the
    /// seed and `seq`, so a run can be repeated.
    pub fn hits(&self, seq: u64) -> bool {
        let rate = self.fail_rate.unwrap_or(1.0);
        if rate >= 1.0 {
            return true;
        }
        // SplitMix64's `seq`-th output for this seed: a counter-based PRNG
        // needs no shared state between connection threads.
        let x = splitmix64(self.seed.wrapping_add(seq.wrapping_mul(GOLDEN_GAMMA)));
        unit(x) < rate
    }

    /// The stream faults due once `count` content tokens have been sent.
    pub fn at(&self, count: u64) -> StreamFaults {
        StreamFaults {
            malformed: self.malformed_after == Some(count),
            error: self.error_after == Some(count),
            drop: self.drop_after == Some(count),
        }
    }
}

/// The OpenAI SDK's error class for a status, which vLLM puts in `type`.
pub fn error_type(status: u16) -> &'static str {
    match status {
        401 => "AuthenticationError",
        403 => "PermissionDeniedError",
        404 => "NotFoundError",
        405 => "MethodNotAllowedError",
        409 => "ConflictError",
        422 => "UnprocessableEntityError",
        429 => "RateLimitError",
        503 => "ServiceUnavailableError",
        400..=499 => "BadRequestError",
        _ => "InternalServerError",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_picks_about_that_fraction_repeatably() {
        let f = Faults {
            status: Some(500),
            fail_rate: Some(0.25),
            seed: 7,
            ..Faults::default()
        };
        let hits = (0..10_000).filter(|&s| f.hits(s)).count();
        assert!((2300..2700).contains(&hits), "{hits}");
        let again = (0..10_000).filter(|&s| f.hits(s)).count();
        assert_eq!(hits, again);
        let other_seed = Faults {
            seed: 8,
            ..f.clone()
        };
        assert!((0..100).any(|s| f.hits(s) != other_seed.hits(s)));
    }

    #[test]
    fn validation() {
        let rate_alone = Faults {
            fail_rate: Some(0.5),
            ..Faults::default()
        };
        assert!(rate_alone.validate().is_err());
        let ok_status = Faults {
            status: Some(429),
            ..Faults::default()
        };
        assert!(ok_status.validate().is_ok());
        let not_error = Faults {
            status: Some(200),
            ..Faults::default()
        };
        assert!(not_error.validate().is_err());
    }
}
