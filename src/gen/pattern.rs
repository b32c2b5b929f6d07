//! Synthetic patterns (AIBrix's `synthetic` workload): value(t) =
//! A·sin(2πP·t/L) + mean + N(0, noise²), rounded half to even, for step t of
//! L steps. Rising patterns never decrease. Unlike AIBrix, a negative value
//! is clamped (to 0 for traffic, 1 for lengths) instead of failing later.

use serde::Deserialize;

use super::rng::Rng;
use crate::error::{Error, Result};

/// A pattern's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pattern {
    pub amplitude: f64,
    pub mean: f64,
    pub noise: f64,
    /// Whole sine periods over the run.
    pub periods: f64,
    pub only_rise: bool,
}

/// AIBrix's user config schema.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UserConfig {
    fluctuate: f64,
    mean: f64,
    noise: f64,
    period_len_ms: f64,
    #[serde(default)]
    only_rise: bool,
}

/// AIBrix's presets: (name, amplitude as a share of the mean, periods, rising).
/// Their noise is 0.1.
pub const PRESETS: [(&str, f64, f64, bool); 5] = [
    ("quick_rising", 0.5, 5.0, true),
    ("slow_rising", 0.5, 0.25, true),
    ("slight_fluctuation", 0.1, 1.0, false),
    ("severe_fluctuation", 0.5, 12.0, false),
    ("constant", 0.0, 12.0, false),
];

impl Pattern {
    /// A preset name, a JSON file in AIBrix's schema, or that JSON inline.
    pub fn parse(spec: &str, mean: f64, duration_ms: f64) -> Result<Pattern> {
        if let Some(&(_, a, p, rise)) = PRESETS.iter().find(|(n, ..)| *n == spec) {
            return Ok(Pattern {
                amplitude: a * mean,
                mean,
                noise: 0.1,
                periods: p,
                only_rise: rise,
            });
        }
        let text = if spec.trim_start().starts_with('{') {
            spec.to_string()
        } else {
            std::fs::read_to_string(spec).map_err(|e| {
                Error::Usage(format!(
                    "pattern `{spec}`: not a preset ({}) and not a readable file: {e}",
                    PRESETS.map(|p| p.0).join(", ")
                ))
            })?
        };
        let c: UserConfig = serde_json::from_str(&text).map_err(|e| {
            Error::Input(format!(
                "pattern `{spec}`: {e} (expected {{\"fluctuate\", \"mean\", \"noise\", \"period_len_ms\", \"only_rise\"}})"
            ))
        })?;
        if c.period_len_ms <= 0.0 || c.noise < 0.0 {
            return Err(Error::Input(format!(
                "pattern `{spec}`: period_len_ms must be > 0 and noise >= 0"
            )));
        }
        Ok(Pattern {
            amplitude: c.fluctuate,
            mean: c.mean,
            noise: c.noise,
            periods: duration_ms / c.period_len_ms,
            only_rise: c.only_rise,
        })
    }

    /// The `steps` values of the curve, clamped to at least `floor`.
    pub fn curve(&self, steps: usize, floor: f64, rng: &mut Rng) -> Vec<f64> {
        let mut prev = f64::NEG_INFINITY;
        (0..steps)
            .map(|t| {
                let trend = self.amplitude
                    * libm::sin(std::f64::consts::TAU * self.periods * t as f64 / steps as f64)
                    + self.mean;
                let noise = if self.noise > 0.0 {
                    self.noise * rng.normal()
                } else {
                    0.0
                };
                let mut v = (trend + noise).round_ties_even().max(floor);
                if self.only_rise {
                    v = v.max(prev);
                    prev = v;
                }
                v
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curve_points_match_hand_computed_values() {
        // A=4, mean 10, 1 period over 8 steps, no noise:
        // 10 + 4·sin(2π·t/8) = 10, 12.83, 14, 12.83, 10, 7.17, 6, 7.17.
        let p = Pattern {
            amplitude: 4.0,
            mean: 10.0,
            noise: 0.0,
            periods: 1.0,
            only_rise: false,
        };
        let v = p.curve(8, 0.0, &mut Rng::new(0, 0));
        assert_eq!(v, vec![10.0, 13.0, 14.0, 13.0, 10.0, 7.0, 6.0, 7.0]);
        let rising = Pattern {
            only_rise: true,
            ..p
        };
        let v = rising.curve(8, 0.0, &mut Rng::new(0, 0));
        assert_eq!(v, vec![10.0, 13.0, 14.0, 14.0, 14.0, 14.0, 14.0, 14.0]);
    }

    #[test]
    fn presets_follow_aibrix_and_negative_values_clamp() {
        let p = Pattern::parse("quick_rising", 6.0, 1.0).unwrap();
        assert_eq!((p.amplitude, p.periods, p.only_rise), (3.0, 5.0, true));
        let p = Pattern::parse("severe_fluctuation", 1024.0, 1.0).unwrap();
        assert_eq!((p.amplitude, p.periods), (512.0, 12.0));
        let deep = Pattern {
            amplitude: 10.0,
            mean: 1.0,
            noise: 0.0,
            periods: 1.0,
            only_rise: false,
        };
        assert!(deep
            .curve(4, 0.0, &mut Rng::new(0, 0))
            .iter()
            .all(|v| *v >= 0.0));
    }

    #[test]
    fn user_config_sets_periods_from_period_length() {
        let p = Pattern::parse(
            r#"{"fluctuate": 2, "mean": 5, "noise": 0, "period_len_ms": 500, "only_rise": false}"#,
            2000.0,
            2000.0,
        )
        .unwrap();
        assert_eq!(p.periods, 4.0);
        assert_eq!(p.amplitude, 2.0);
    }
}
