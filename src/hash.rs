//! Fixed, portable hashing and random streams. Not `std`'s hasher: these
//! outputs must never change between Rust versions or machines, because
//! seeded runs (trees, prompt text, arrivals, injected faults) promise the
//! same bytes everywhere.

/// SplitMix64's increment (the golden ratio in 64 bits).
pub const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// One SplitMix64 step: the output for state `x + GOLDEN_GAMMA`. Also a
/// cheap, well-spread hash of a 64-bit value.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(GOLDEN_GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The SplitMix64 generator.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        let out = splitmix64(self.state);
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        out
    }

    /// A float in (0, 1]: never 0, so its logarithm is finite.
    pub fn next_open_unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
}

/// The top 53 bits of `x` as a float in [0, 1).
pub fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// FNV-1a, fed in pieces; its state after any prefix names that prefix.
#[derive(Debug, Clone, Copy)]
pub struct Fnv1a {
    state: u64,
}

impl Fnv1a {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    /// Starts from the standard offset basis mixed with `seed`.
    pub fn new(seed: u64) -> Self {
        Fnv1a {
            state: Self::OFFSET ^ seed,
        }
    }

    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.state = (self.state ^ u64::from(b)).wrapping_mul(Self::PRIME);
        }
    }

    pub fn finish(&self) -> u64 {
        self.state
    }
}

/// FNV-1a over the bytes, finished with SplitMix64 so nearby inputs spread
/// over all 64 bits.
pub fn stable_hash(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = Fnv1a::new(seed);
    h.write(bytes);
    splitmix64(h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_the_reference() {
        // The reference generator seeded with 0 starts with these values.
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(g.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn fnv1a_matches_the_reference() {
        // FNV-1a 64 of "a" and of "" (published test vectors).
        let mut h = Fnv1a::new(0);
        assert_eq!(h.finish(), 0xcbf2_9ce4_8422_2325);
        h.write(b"a");
        assert_eq!(h.finish(), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn open_unit_is_never_zero() {
        let mut g = SplitMix64::new(7);
        for _ in 0..1000 {
            let u = g.next_open_unit();
            assert!(u > 0.0 && u <= 1.0);
        }
    }
}
