//! Think times (`delay`) that dwarf the rest of a trace, and `--max-delay`,
//! which caps them. One rule for every tool that reads delays: a recorded
//! think time of hours (a user who went to lunch, a session left open
//! overnight) makes a replay last hours while the server idles, and
//! nothing else in the numbers shows why. The tools name the longest one
//! and offer the cap; the cap itself is counted, never silent.

use std::fmt;

/// A delay longer than this is called out: an hour of think time inside
/// one conversation is an idle user, not load.
pub const LONG_DELAY_MS: f64 = 3_600_000.0;

/// The long delays seen in one pass over a trace.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct LongDelays {
    /// Delays over [`LONG_DELAY_MS`].
    pub count: u64,
    /// The longest delay seen (of all, long or not), and its line.
    pub longest: Option<(f64, u64)>,
}

impl LongDelays {
    /// One row's delay, in ms, read from input line `line`.
    pub fn observe(&mut self, line: u64, delay_ms: f64) {
        if delay_ms > LONG_DELAY_MS {
            self.count += 1;
        }
        if self.longest.is_none_or(|(ms, _)| delay_ms > ms) {
            self.longest = Some((delay_ms, line));
        }
    }

    /// The note a tool prints on stderr, when some delay is long.
    pub fn note(&self) -> Option<String> {
        let (ms, line) = self.longest?;
        (self.count > 0).then(|| {
            format!(
                "{} delay{} over 1 h (longest {} at line {line}): a replay waits them out; \
                 --max-delay MS in mc-scale or mc-replay caps them",
                self.count,
                if self.count == 1 { "" } else { "s" },
                Duration(ms)
            )
        })
    }
}

/// `--max-delay`: the cap and how many delays it shortened (in a replay's
/// run description as `max_delay`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayCap {
    pub max_ms: f64,
    pub capped: u64,
}

impl DelayCap {
    pub fn new(max_ms: f64) -> Self {
        DelayCap { max_ms, capped: 0 }
    }

    /// The delay to use for one recorded in the trace, counting a cut.
    pub fn apply(&mut self, delay_ms: f64) -> f64 {
        if delay_ms > self.max_ms {
            self.capped += 1;
            self.max_ms
        } else {
            delay_ms
        }
    }

    /// The stderr line, e.g. `--max-delay 60 s: capped 3 delays`.
    pub fn note(&self) -> String {
        format!(
            "--max-delay {}: capped {} delay{}",
            Duration(self.max_ms),
            self.capped,
            if self.capped == 1 { "" } else { "s" }
        )
    }
}

/// `--max-delay`'s value: a number of ms, at least 0 and at most the
/// options' `MAX_DELAY_MS` (a year: a cap above it caps nothing, and 1e300
/// would be printed as a 300-digit figure).
pub fn parse_max_delay(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => crate::options::delay_ms(s),
        _ => Err(format!(
            "`{s}` is not a delay in ms (a number >= 0, e.g. 60000 for a minute)"
        )),
    }
}

/// A time span as a person writes it: `250 ms`, `42 s`, `5.4 h`.
struct Duration(f64);

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0;
        if ms < 1000.0 {
            write!(f, "{ms:.0} ms")
        } else if ms < 120_000.0 {
            write!(f, "{} s", trim(ms / 1000.0))
        } else if ms < 7_200_000.0 {
            write!(f, "{} min", trim(ms / 60_000.0))
        } else {
            write!(f, "{} h", trim(ms / 3_600_000.0))
        }
    }
}

/// One decimal, without a trailing `.0`.
fn trim(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map_or(s.clone(), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_delay_and_its_line_are_named() {
        let mut d = LongDelays::default();
        for (line, ms) in [(1, 500.0), (2, 19_440_000.0), (3, 4_000_000.0), (4, 10.0)] {
            d.observe(line, ms);
        }
        assert_eq!(d.count, 2);
        assert_eq!(d.longest, Some((19_440_000.0, 2)));
        // 19,440,000 ms = 5.4 h.
        assert_eq!(
            d.note().unwrap(),
            "2 delays over 1 h (longest 5.4 h at line 2): a replay waits them out; \
             --max-delay MS in mc-scale or mc-replay caps them"
        );
    }

    #[test]
    fn short_delays_say_nothing() {
        let mut d = LongDelays::default();
        d.observe(1, LONG_DELAY_MS);
        assert_eq!(d.note(), None);
    }

    #[test]
    fn the_cap_counts_what_it_cut() {
        let mut c = DelayCap::new(60_000.0);
        assert_eq!(c.apply(59_999.0), 59_999.0);
        assert_eq!(c.apply(60_000.0), 60_000.0);
        assert_eq!(c.apply(19_440_000.0), 60_000.0);
        assert_eq!(c.capped, 1);
        assert_eq!(c.note(), "--max-delay 60 s: capped 1 delay");
    }

    #[test]
    fn durations_read_as_written() {
        let s = |ms| Duration(ms).to_string();
        assert_eq!(s(250.0), "250 ms");
        assert_eq!(s(1500.0), "1.5 s");
        assert_eq!(s(90_000.0), "90 s");
        assert_eq!(s(300_000.0), "5 min");
        assert_eq!(s(19_440_000.0), "5.4 h");
    }

    #[test]
    fn max_delay_values() {
        assert_eq!(parse_max_delay("0"), Ok(0.0));
        assert_eq!(parse_max_delay("60000"), Ok(60_000.0));
        assert_eq!(
            parse_max_delay("31536000000"),
            Ok(crate::options::MAX_DELAY_MS)
        );
        // Issue 36: 1e300 was taken, and printed as a 300-digit figure.
        let e = parse_max_delay("1e300").unwrap_err();
        assert!(e.contains("more than the limit") && e.len() < 100, "{e}");
        for bad in ["-1", "nan", "inf", "1m", ""] {
            assert!(parse_max_delay(bad).is_err(), "{bad}");
        }
    }
}
