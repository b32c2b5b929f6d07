//! The random streams behind every generator. Hand-written on our
//! SplitMix64 (src/hash.rs) with `libm`'s pure-Rust math instead of the
//! platform's: a seed must give the same bytes on every machine, and the
//! system `ln`/`sin` may differ in the last bit between libcs. No `rand`
//! crates: the few distributions needed are short and their algorithms are
//! fixed here, so a dependency upgrade can never change a seeded output.

use crate::hash::{splitmix64, unit, SplitMix64};

/// A seeded generator with the distributions the generators draw from.
#[derive(Debug, Clone)]
pub struct Rng {
    inner: SplitMix64,
}

impl Rng {
    /// A stream for `seed`; `stream` separates independent uses of one seed
    /// (arrivals, lengths, prompt choice) so adding draws to one never
    /// shifts another.
    pub fn new(seed: u64, stream: u64) -> Self {
        Rng {
            inner: SplitMix64::new(splitmix64(seed ^ splitmix64(stream))),
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        unit(self.inner.next_u64())
    }

    /// Uniform in (0, 1]: its logarithm is finite.
    pub fn open_unit(&mut self) -> f64 {
        self.inner.next_open_unit()
    }

    /// Uniform integer in [0, n) (n > 0), by Lemire's multiply-shift; the
    /// bias is below 2^-32 for every n used here.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.inner.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform integer in [lo, hi] (inclusive, lo <= hi).
    pub fn range_inclusive(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// Exponential with the given mean (inversion).
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * libm::log(self.open_unit())
    }

    /// Standard normal (Box–Muller, one value per call so the stream
    /// position does not depend on a cached second value).
    pub fn normal(&mut self) -> f64 {
        let r = libm::sqrt(-2.0 * libm::log(self.open_unit()));
        r * libm::cos(std::f64::consts::TAU * self.uniform())
    }

    /// Gamma(shape, 1) by Marsaglia and Tsang (2000); shape < 1 by the
    /// boost Gamma(a) = Gamma(a+1) · U^(1/a).
    pub fn gamma(&mut self, shape: f64) -> f64 {
        if shape < 1.0 {
            let u = self.open_unit();
            return self.gamma(shape + 1.0) * libm::pow(u, 1.0 / shape);
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / libm::sqrt(9.0 * d);
        loop {
            let x = self.normal();
            let v = 1.0 + c * x;
            if v <= 0.0 {
                continue;
            }
            let v = v * v * v;
            let u = self.open_unit();
            if libm::log(u) < 0.5 * x * x + d - d * v + d * libm::log(v) {
                return d * v;
            }
        }
    }

    /// Lognormal: exp(mu + sigma · N(0,1)).
    pub fn lognormal(&mut self, mu: f64, sigma: f64) -> f64 {
        libm::exp(mu + sigma * self.normal())
    }
}

/// Zipf over ranks 0..n with exponent `s` (rank 0 most likely), by
/// inversion of the cumulative weights (n is a group count: small).
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, s: f64) -> Self {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|k| {
                acc += libm::pow(k as f64, -s);
                acc
            })
            .collect();
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf { cdf }
    }

    pub fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.uniform();
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len().saturating_sub(1))
    }
}

/// The standard normal quantile (Acklam's rational approximation, relative
/// error below 1.2e-9, refined by one Halley step on erfc).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p_low = 0.024_25;
    let x = if p < p_low {
        let q = libm::sqrt(-2.0 * libm::log(p));
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - p_low {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        let q = libm::sqrt(-2.0 * libm::log(1.0 - p));
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    // One Halley step brings it to full double precision.
    let e = 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2) - p;
    let u = e * libm::sqrt(std::f64::consts::TAU) * libm::exp(x * x / 2.0);
    x - u / (1.0 + x * u / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_quantile_matches_tables() {
        // Published values of the standard normal quantile.
        assert!((normal_quantile(0.5)).abs() < 1e-12);
        assert!((normal_quantile(0.975) - 1.959_963_984_540_054).abs() < 1e-9);
        assert!((normal_quantile(0.99) - 2.326_347_874_040_841).abs() < 1e-9);
        assert!((normal_quantile(0.01) + 2.326_347_874_040_841).abs() < 1e-9);
        assert!((normal_quantile(0.7) - 0.524_400_512_708_041).abs() < 1e-9);
    }

    #[test]
    fn moments_are_right() {
        let mut r = Rng::new(1, 0);
        let n = 200_000;
        let (mut se, mut sn, mut sn2, mut sg) = (0.0, 0.0, 0.0, 0.0);
        for _ in 0..n {
            se += r.exp(3.0);
            let z = r.normal();
            sn += z;
            sn2 += z * z;
            sg += r.gamma(0.5);
        }
        let n = n as f64;
        assert!((se / n - 3.0).abs() < 0.05, "exp mean {}", se / n);
        assert!((sn / n).abs() < 0.01);
        assert!((sn2 / n - 1.0).abs() < 0.02);
        assert!((sg / n - 0.5).abs() < 0.01, "gamma mean {}", sg / n);
    }

    #[test]
    fn zipf_prefers_low_ranks_and_stays_in_range() {
        let z = Zipf::new(4, 1.0);
        let mut r = Rng::new(2, 0);
        let mut counts = [0u32; 4];
        for _ in 0..100_000 {
            counts[z.sample(&mut r)] += 1;
        }
        // Weights 1, 1/2, 1/3, 1/4 over 25/12: rank 0 has 12/25 = 0.48.
        assert!((f64::from(counts[0]) / 1e5 - 0.48).abs() < 0.01);
        assert!(counts[0] > counts[1] && counts[1] > counts[2] && counts[2] > counts[3]);
    }

    #[test]
    fn the_stream_is_fixed() {
        // Pinned: a change here changes every seeded output.
        let mut r = Rng::new(0, 0);
        let first = r.next_u64();
        assert_eq!(first, splitmix64(splitmix64(splitmix64(0))));
    }
}
