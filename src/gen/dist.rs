//! Length distributions given on the command line: `1024`, `const:N`,
//! `uniform:A:B`, `normal:MEAN:STD`, `lognormal:MEDIAN:SIGMA`.

use std::str::FromStr;

use super::rng::Rng;
use crate::limits::MAX_ROW_TOKENS;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LengthDist {
    Const(u64),
    /// Inclusive integer range.
    Uniform(u64, u64),
    Normal {
        mean: f64,
        std: f64,
    },
    /// ln X ~ N(ln median, sigma²).
    Lognormal {
        median: f64,
        sigma: f64,
    },
}

impl LengthDist {
    /// One draw, rounded half to even and clamped to at least `min`.
    pub fn sample(&self, rng: &mut Rng, min: u64) -> u64 {
        let v = match *self {
            LengthDist::Const(n) => return n.max(min),
            LengthDist::Uniform(a, b) => return rng.range_inclusive(a, b).max(min),
            LengthDist::Normal { mean, std } => mean + std * rng.normal(),
            LengthDist::Lognormal { median, sigma } => rng.lognormal(libm::log(median), sigma),
        };
        // The parser bounds the parameters (`limits::MAX_ROW_TOKENS`); a rare
        // far tail draw is held at the limit too.
        to_count(v).max(min).min(MAX_ROW_TOKENS)
    }

    /// The distribution's mean (for sizing and summaries).
    pub fn mean(&self) -> f64 {
        match *self {
            LengthDist::Const(n) => n as f64,
            LengthDist::Uniform(a, b) => (a + b) as f64 / 2.0,
            LengthDist::Normal { mean, .. } => mean,
            LengthDist::Lognormal { median, sigma } => median * libm::exp(sigma * sigma / 2.0),
        }
    }
}

/// A real value as a token count: rounded half to even (as Python's
/// `round`), negative values clamped to 0.
pub fn to_count(v: f64) -> u64 {
    if v.is_nan() || v <= 0.0 {
        0
    } else {
        v.round_ties_even().min(u64::MAX as f64) as u64
    }
}

impl FromStr for LengthDist {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let limit = |v: f64| -> Result<f64, String> {
            if v > MAX_ROW_TOKENS as f64 {
                return Err(format!(
                    "`{s}`: {v:e} is above the limit of {MAX_ROW_TOKENS} tokens per row"
                ));
            }
            Ok(v)
        };
        let num = |i: usize| -> Result<f64, String> {
            parts
                .get(i)
                .and_then(|p| p.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("`{s}`: expected a non-negative number in place {i}"))
                .and_then(limit)
        };
        let int = |i: usize| -> Result<u64, String> {
            parts
                .get(i)
                .and_then(|p| p.parse::<u64>().ok())
                .ok_or_else(|| format!("`{s}`: expected a whole number in place {i}"))
                .and_then(|v| limit(v as f64).map(|_| v))
        };
        let arity = |n: usize| {
            if parts.len() == n {
                Ok(())
            } else {
                Err(format!("`{s}`: `{}` takes {} value(s)", parts[0], n - 1))
            }
        };
        match parts[0] {
            "const" => {
                arity(2)?;
                Ok(LengthDist::Const(int(1)?))
            }
            "uniform" => {
                arity(3)?;
                let (a, b) = (int(1)?, int(2)?);
                if a > b {
                    return Err(format!("`{s}`: uniform:A:B needs A <= B"));
                }
                Ok(LengthDist::Uniform(a, b))
            }
            "normal" => {
                arity(3)?;
                Ok(LengthDist::Normal {
                    mean: num(1)?,
                    std: num(2)?,
                })
            }
            "lognormal" => {
                arity(3)?;
                let median = num(1)?;
                if median <= 0.0 {
                    return Err(format!("`{s}`: the lognormal median must be positive"));
                }
                let d = LengthDist::Lognormal {
                    median,
                    sigma: num(2)?,
                };
                limit(d.mean()).map_err(|e| format!("{e} (the mean, median·exp(σ²/2))"))?;
                Ok(d)
            }
            _ if parts.len() == 1 => {
                let n = s.parse::<u64>().map_err(|_| {
                    format!(
                        "`{s}`: expected N, const:N, uniform:A:B, normal:MEAN:STD or lognormal:MEDIAN:SIGMA"
                    )
                })?;
                limit(n as f64)?;
                Ok(LengthDist::Const(n))
            }
            other => Err(format!(
                "`{s}`: unknown distribution `{other}` (const, uniform, normal, lognormal)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!("1024".parse(), Ok(LengthDist::Const(1024)));
        assert_eq!("const:7".parse(), Ok(LengthDist::Const(7)));
        assert_eq!("uniform:1:5".parse(), Ok(LengthDist::Uniform(1, 5)));
        assert_eq!(
            "lognormal:512:0.5".parse(),
            Ok(LengthDist::Lognormal {
                median: 512.0,
                sigma: 0.5
            })
        );
        assert!("uniform:5:1".parse::<LengthDist>().is_err());
        assert!("poisson:3".parse::<LengthDist>().is_err());
        assert!("normal:1".parse::<LengthDist>().is_err());
        // Limits: no parameter beyond MAX_ROW_TOKENS (uniform's width
        // overflowed; huge means allocated without bound).
        for bad in [
            "18446744073709551615",
            "uniform:0:18446744073709551615",
            "normal:0:1e12",
            "normal:1e300:1",
            "lognormal:1e300:0.5",
            "lognormal:1000:20",
        ] {
            assert!(bad.parse::<LengthDist>().is_err(), "{bad}");
        }
        assert_eq!("10000000".parse(), Ok(LengthDist::Const(MAX_ROW_TOKENS)));
    }

    #[test]
    fn lognormal_median_is_the_median() {
        let d: LengthDist = "lognormal:1000:0.8".parse().unwrap();
        let mut r = Rng::new(3, 0);
        let mut v: Vec<u64> = (0..20_001).map(|_| d.sample(&mut r, 1)).collect();
        v.sort_unstable();
        let med = v[10_000] as f64;
        assert!((med / 1000.0 - 1.0).abs() < 0.03, "median {med}");
    }

    #[test]
    fn rounding_is_half_even_and_clamped() {
        assert_eq!(to_count(2.5), 2);
        assert_eq!(to_count(3.5), 4);
        assert_eq!(to_count(-4.0), 0);
    }
}
