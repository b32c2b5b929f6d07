//! Arrival processes: a rate in requests per second becomes gaps in ms.

use std::str::FromStr;

use super::rng::Rng;

/// `--arrival`: how gaps between requests are drawn at a given rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// Exponential gaps (a Poisson process).
    Poisson,
    /// Every gap exactly 1/rate.
    Constant,
    /// Gamma gaps with this shape and mean 1/rate (vLLM's burstiness:
    /// shape < 1 is burstier than Poisson, shape 1 is Poisson).
    Gamma(f64),
}

impl FromStr for Arrival {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "poisson" => Ok(Arrival::Poisson),
            "constant" => Ok(Arrival::Constant),
            _ => match s.strip_prefix("gamma:").map(str::parse::<f64>) {
                Some(Ok(k)) if k > 0.0 && k.is_finite() => Ok(Arrival::Gamma(k)),
                _ => Err(format!(
                    "`{s}`: expected poisson, constant or gamma:SHAPE (SHAPE > 0)"
                )),
            },
        }
    }
}

impl Arrival {
    /// One gap in ms at `rate` requests per second (rate > 0).
    pub fn gap_ms(&self, rng: &mut Rng, rate: f64) -> f64 {
        let mean = 1000.0 / rate;
        match *self {
            Arrival::Poisson => rng.exp(mean),
            Arrival::Constant => mean,
            Arrival::Gamma(k) => rng.gamma(k) * mean / k,
        }
    }
}

/// Arrivals under a rate that is constant within windows of `window_ms`
/// (window `w` covers [w·W, (w+1)·W)): `on_arrival(t_ms, w)` for each, in
/// time order, until it returns false. Poisson and gamma gaps that would
/// cross a window's end restart at the next window (exact for Poisson, which
/// is memoryless); constant arrivals fall at the window start + k/rate.
pub fn piecewise<F>(
    rates: &[f64],
    window_ms: f64,
    arrival: Arrival,
    rng: &mut Rng,
    mut on_arrival: F,
) -> crate::error::Result<()>
where
    F: FnMut(f64, usize) -> crate::error::Result<bool>,
{
    let expected: f64 = rates
        .iter()
        .filter(|r| r.is_finite() && **r > 0.0)
        .map(|r| r * window_ms / 1000.0)
        .sum();
    if expected.is_nan() || expected > crate::limits::MAX_GEN_ROWS as f64 {
        return Err(crate::error::Error::Usage(format!(
            "the rates give about {expected:e} requests, above the limit of {}: lower the rate \
             (--traffic-mean, --qps-scale) or shorten the run",
            crate::limits::MAX_GEN_ROWS
        )));
    }
    for (w, &rate) in rates.iter().enumerate() {
        if rate <= 0.0 || !rate.is_finite() {
            continue;
        }
        let start = w as f64 * window_ms;
        match arrival {
            Arrival::Constant => {
                let gap = 1000.0 / rate;
                let mut k = 0u64;
                // Compared by index so float error cannot add an arrival at the end.
                while (k as f64) * gap < window_ms - 1e-9 {
                    if !on_arrival(start + k as f64 * gap, w)? {
                        return Ok(());
                    }
                    k += 1;
                }
            }
            _ => {
                let end = start + window_ms;
                let mut t = start;
                loop {
                    t += arrival.gap_ms(rng, rate);
                    if t >= end {
                        break;
                    }
                    if !on_arrival(t, w)? {
                        return Ok(());
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_windows_hold_rate_times_length_arrivals() {
        let mut rng = Rng::new(0, 0);
        let mut per = vec![0u32; 3];
        piecewise(
            &[6.0, 0.0, 2.5],
            1000.0,
            Arrival::Constant,
            &mut rng,
            |t, w| {
                assert!(t >= w as f64 * 1000.0 && t < (w + 1) as f64 * 1000.0);
                per[w] += 1;
                Ok(true)
            },
        )
        .unwrap();
        // 6/s over 1 s: 0, 166.7, …, 833.3 → 6; 2.5/s: 0, 400, 800 → 3.
        assert_eq!(per, vec![6, 0, 3]);
    }

    #[test]
    fn parses_arrivals() {
        assert_eq!("gamma:0.5".parse(), Ok(Arrival::Gamma(0.5)));
        assert!("gamma:0".parse::<Arrival>().is_err());
        assert!("bursty".parse::<Arrival>().is_err());
    }
}
