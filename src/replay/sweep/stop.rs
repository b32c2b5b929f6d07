//! The sweep's stopping rule (`--stop-when`), a pure function of the runs'
//! points: [`stop_reason`].
//!
//! The rule follows GuideLLM's over-saturation stop (a load whose
//! responses no longer keep up with its requests is not worth going past:
//! its latencies measure the queue, not the server) and its escalation
//! stop across rates (vllm-project/guidellm#605: a constraint met at one
//! rate skips the higher ones). GuideLLM detects it within a run from the
//! slopes of concurrency and TTFT over time; a sweep here decides between
//! runs, from their summaries.

use crate::results::sweep::Point;

/// `--stop-when`: the sweep's stopping rule. A `None` test is off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StopWhen {
    /// Output throughput has stopped growing when it beats the best earlier
    /// value by less than this fraction.
    pub throughput_gain: Option<f64>,
    /// TTFT p99 has risen when it is more than this multiple of the lowest
    /// earlier TTFT p99.
    pub ttft_p99: Option<f64>,
    /// Schedule lag p99 has risen when it is above this many ms.
    pub lag_p99_ms: Option<f64>,
    /// Failing: more than this fraction of the measured requests failed.
    pub error_rate: Option<f64>,
}

impl StopWhen {
    /// The documented default, as the option's text.
    pub const DEFAULT: &'static str =
        "throughput-gain=5%,ttft-p99=2x,lag-p99=1000ms,error-rate=10%";

    pub const NEVER: StopWhen = StopWhen {
        throughput_gain: None,
        ttft_p99: None,
        lag_p99_ms: None,
        error_rate: None,
    };

    /// `never`, or `TEST=THRESHOLD|off,…` over the defaults.
    pub fn parse(s: &str) -> std::result::Result<StopWhen, String> {
        let s = s.trim();
        if s == "never" {
            return Ok(StopWhen::NEVER);
        }
        let mut w = StopWhen {
            throughput_gain: Some(0.05),
            ttft_p99: Some(2.0),
            lag_p99_ms: Some(1000.0),
            error_rate: Some(0.10),
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                format!(
                    "`{part}`: expected TEST=THRESHOLD or TEST=off \
                     (tests: throughput-gain, ttft-p99, lag-p99, error-rate), or `never`"
                )
            })?;
            let (key, value) = (key.trim(), value.trim());
            let off = value == "off";
            match key {
                "throughput-gain" => {
                    w.throughput_gain = (!off).then(|| percent(key, value)).transpose()?
                }
                "ttft-p99" => w.ttft_p99 = (!off).then(|| times(key, value)).transpose()?,
                "lag-p99" => w.lag_p99_ms = (!off).then(|| millis(key, value)).transpose()?,
                "error-rate" => w.error_rate = (!off).then(|| percent(key, value)).transpose()?,
                _ => {
                    return Err(format!(
                    "`{key}` is not a test: use throughput-gain, ttft-p99, lag-p99 or error-rate"
                ))
                }
            }
        }
        Ok(w)
    }
}

fn threshold(key: &str, value: &str, num: &str, form: &str) -> std::result::Result<f64, String> {
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{key}={value}: expected {form}")),
    }
}

/// `5%` → 0.05.
fn percent(key: &str, value: &str) -> std::result::Result<f64, String> {
    let form = "a percentage like 5%, or off";
    let num = value
        .strip_suffix('%')
        .ok_or_else(|| format!("{key}={value}: expected {form}"))?;
    Ok(threshold(key, value, num, form)? / 100.0)
}

/// `2x` → 2.
fn times(key: &str, value: &str) -> std::result::Result<f64, String> {
    let form = "a factor like 2x, or off";
    let num = value
        .strip_suffix('x')
        .ok_or_else(|| format!("{key}={value}: expected {form}"))?;
    threshold(key, value, num, form)
}

/// `1000ms` or `1s` → ms.
fn millis(key: &str, value: &str) -> std::result::Result<f64, String> {
    let form = "a time like 1000ms or 1s, or off";
    if let Some(num) = value.strip_suffix("ms") {
        return threshold(key, value, num, form);
    }
    let num = value
        .strip_suffix('s')
        .ok_or_else(|| format!("{key}={value}: expected {form}"))?;
    Ok(threshold(key, value, num, form)? * 1000.0)
}

/// Why the sweep should stop after `now`, given the runs before it (in
/// sweep order), or `None` to go on. Failing: the error rate is above
/// `error-rate`. Saturated (needs an earlier run): output throughput is
/// less than `throughput-gain` above the best earlier one (request
/// throughput when no run produced output tokens), and either TTFT p99 is
/// more than `ttft-p99` times the lowest earlier TTFT p99 or lag p99 is
/// above `lag-p99`. Comparing with the best and the lowest earlier values
/// rather than the previous one keeps the rule right for lists in any order
/// and for a slow drift over several values.
pub fn stop_reason(rule: &StopWhen, earlier: &[Point], now: &Point) -> Option<String> {
    if let Some(max) = rule.error_rate {
        if now.error_rate > max {
            return Some(format!(
                "failing: {:.1}% of the requests failed (more than error-rate={}%)",
                now.error_rate * 100.0,
                max * 100.0
            ));
        }
    }
    let gain_min = rule.throughput_gain?;
    let tokens = earlier
        .iter()
        .chain([now])
        .any(|p| p.output_token_throughput > 0.0);
    let (what, unit, tput): (&str, &str, fn(&Point) -> f64) = if tokens {
        ("output throughput", "tok/s", |p| p.output_token_throughput)
    } else {
        ("request throughput", "req/s", |p| p.request_throughput)
    };
    let best = earlier.iter().max_by(|a, b| tput(a).total_cmp(&tput(b)))?;
    let gain = if tput(best) > 0.0 {
        tput(now) / tput(best) - 1.0
    } else if tput(now) > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    if gain >= gain_min {
        return None;
    }
    let flat = format!(
        "{what} {:.1} {unit} is {:+.1}% over the best earlier ({:.1} {unit} at {}) \
         (less than throughput-gain={}%)",
        tput(now),
        gain * 100.0,
        tput(best),
        best.value,
        gain_min * 100.0
    );
    let ttft = rule.ttft_p99.and_then(|x| {
        let cur = now.ttft_p99_ms?;
        let low = earlier
            .iter()
            .filter_map(|p| p.ttft_p99_ms.map(|t| (t, p.value)))
            .min_by(|a, b| a.0.total_cmp(&b.0))?;
        (cur > x * low.0 && cur > low.0).then(|| {
            format!(
                "TTFT p99 {cur:.1} ms is {:.1}x the lowest earlier ({:.1} ms at {}) \
                 (more than ttft-p99={x}x)",
                cur / low.0,
                low.0,
                low.1
            )
        })
    });
    let lag = rule.lag_p99_ms.and_then(|max| {
        let cur = now.lag_p99_ms?;
        (cur > max).then(|| format!("lag p99 {cur:.1} ms (more than lag-p99={max}ms)"))
    });
    let rose = match (ttft, lag) {
        (Some(t), Some(l)) => format!("{t} and {l}"),
        (Some(t), None) => t,
        (None, Some(l)) => l,
        (None, None) => return None,
    };
    Some(format!("saturated: {flat} while {rose}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::results::sweep::sample_point as pt;

    fn default_rule() -> StopWhen {
        StopWhen::parse(StopWhen::DEFAULT).unwrap()
    }

    #[test]
    fn the_default_rule_and_its_syntax() {
        assert_eq!(
            default_rule(),
            StopWhen {
                throughput_gain: Some(0.05),
                ttft_p99: Some(2.0),
                lag_p99_ms: Some(1000.0),
                error_rate: Some(0.10),
            }
        );
        // Unnamed tests keep their default; `off` turns one off; seconds.
        let w = StopWhen::parse("ttft-p99=3x, lag-p99=2.5s,error-rate=off").unwrap();
        assert_eq!(w.ttft_p99, Some(3.0));
        assert_eq!(w.lag_p99_ms, Some(2500.0));
        assert_eq!(w.error_rate, None);
        assert_eq!(w.throughput_gain, Some(0.05));
        assert_eq!(StopWhen::parse("never").unwrap(), StopWhen::NEVER);
        for (bad, says) in [
            ("ttft-p99=2", "a factor like 2x"),
            ("error-rate=0.1", "a percentage like 5%"),
            ("lag-p99=5m", "a time like 1000ms"),
            ("gain=5%", "`gain` is not a test"),
            ("ttft-p99", "expected TEST=THRESHOLD"),
            ("ttft-p99=-1x", "a factor like 2x"),
        ] {
            let e = StopWhen::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn growing_throughput_never_stops_however_latency_rises() {
        // 1000 → 1500 tok/s is +50%: still growing, although TTFT p99 went
        // from 100 to 900 ms (9x) and lag p99 to 5 s.
        let earlier = [pt(1.0, 1000.0, 100.0, 0.0, 0.0)];
        let now = pt(2.0, 1500.0, 900.0, 5000.0, 0.0);
        assert_eq!(stop_reason(&default_rule(), &earlier, &now), None);
    }

    #[test]
    fn flat_throughput_with_rising_ttft_stops() {
        // Best earlier 2000 tok/s (at 4); now 2060 = +3% < 5%. Lowest
        // earlier TTFT p99 is 100 ms (at 1); now 250 ms = 2.5x > 2x.
        let earlier = [
            pt(1.0, 1000.0, 100.0, 0.0, 0.0),
            pt(4.0, 2000.0, 120.0, 0.0, 0.0),
        ];
        let now = pt(8.0, 2060.0, 250.0, 3.0, 0.0);
        let r = stop_reason(&default_rule(), &earlier, &now).unwrap();
        assert_eq!(
            r,
            "saturated: output throughput 2060.0 tok/s is +3.0% over the best earlier \
             (2000.0 tok/s at 4) (less than throughput-gain=5%) while TTFT p99 250.0 ms \
             is 2.5x the lowest earlier (100.0 ms at 1) (more than ttft-p99=2x)"
        );
    }

    #[test]
    fn flat_throughput_alone_or_with_mild_latency_goes_on() {
        // +3% but TTFT p99 only 1.9x (190 vs 100) and lag 999 ms < 1000.
        let earlier = [pt(1.0, 2000.0, 100.0, 0.0, 0.0)];
        let now = pt(2.0, 2060.0, 190.0, 999.0, 0.0);
        assert_eq!(stop_reason(&default_rule(), &earlier, &now), None);
        // The first value has nothing to saturate against.
        assert_eq!(stop_reason(&default_rule(), &[], &now), None);
    }

    #[test]
    fn lag_alone_is_the_latency_signal_too() {
        // Throughput fell (1900 vs 2000 = -5%); TTFT p99 steady; lag p99
        // 1500 ms > 1000 ms.
        let earlier = [pt(1.0, 2000.0, 100.0, 0.0, 0.0)];
        let now = pt(2.0, 1900.0, 110.0, 1500.0, 0.0);
        let r = stop_reason(&default_rule(), &earlier, &now).unwrap();
        assert!(
            r.starts_with("saturated: output throughput 1900.0 tok/s is -5.0%"),
            "{r}"
        );
        assert!(
            r.ends_with("while lag p99 1500.0 ms (more than lag-p99=1000ms)"),
            "{r}"
        );
        // With lag off, it goes on.
        let rule = StopWhen::parse("lag-p99=off").unwrap();
        assert_eq!(stop_reason(&rule, &earlier, &now), None);
    }

    #[test]
    fn errors_stop_even_the_first_value() {
        // 11 failed of 100 = 11% > 10%.
        let now = pt(1.0, 1000.0, 100.0, 0.0, 0.11);
        assert_eq!(
            stop_reason(&default_rule(), &[], &now).unwrap(),
            "failing: 11.0% of the requests failed (more than error-rate=10%)"
        );
        // Exactly 10% is not more than 10%.
        let now = pt(1.0, 1000.0, 100.0, 0.0, 0.10);
        assert_eq!(stop_reason(&default_rule(), &[], &now), None);
        let now = pt(1.0, 1000.0, 100.0, 0.0, 1.0);
        assert_eq!(stop_reason(&StopWhen::NEVER, &[], &now), None);
    }

    #[test]
    fn order_does_not_matter_best_and_lowest_are_over_every_earlier_run() {
        // A descending list: the best earlier throughput is the first run's.
        let earlier = [
            pt(8.0, 3000.0, 900.0, 0.0, 0.0),
            pt(4.0, 2900.0, 300.0, 0.0, 0.0),
        ];
        // 2950 is -1.7% of 3000; TTFT p99 700 ms is 2.33x the lowest 300 ms.
        let now = pt(2.0, 2950.0, 700.0, 0.0, 0.0);
        let r = stop_reason(&default_rule(), &earlier, &now).unwrap();
        assert!(
            r.contains("(3000.0 tok/s at 8)") && r.contains("(300.0 ms at 4)"),
            "{r}"
        );
    }

    #[test]
    fn without_output_tokens_request_throughput_decides() {
        let mut a = pt(1.0, 0.0, 100.0, 0.0, 0.0);
        a.request_throughput = 10.0;
        let mut b = pt(2.0, 0.0, 300.0, 0.0, 0.0);
        b.request_throughput = 10.2;
        let r = stop_reason(&default_rule(), &[a], &b).unwrap();
        assert!(
            r.starts_with("saturated: request throughput 10.2 req/s is +2.0%"),
            "{r}"
        );
    }
}
