//! Lint: values that are legal JSON but suspicious in a trace.

use serde::Serialize;

use crate::finding::Finding;

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Lint {
    /// `input_length` or `output_length` below zero.
    pub negative_length: Finding,
    /// `input_length` or `output_length` with a fraction (`12.5`).
    pub non_integer_length: Finding,
    /// The same id twice in one row.
    pub duplicate_ids: Finding,
    /// An id used by an earlier row after an id new in this row.
    pub not_prefix_shaped: Finding,
    pub missing_input_length: Finding,
    pub missing_output_length: Finding,
    pub missing_hash_ids: Finding,
    /// Neither `timestamp` nor `delay`: the row has no place in time.
    pub missing_timing: Finding,
    /// A think time over an hour (`delays::LONG_DELAY_MS`): an idle user,
    /// whom a replay waits out (`--max-delay` caps it).
    #[serde(default)]
    pub delay_over_an_hour: Finding,
    /// The agent-graph checks (`graph_unknown_id`, `graph_cycle`, …).
    #[serde(flatten)]
    pub graph: super::graphs::GraphLint,
}

impl Lint {
    /// Checks one length value (absent lengths are counted by the caller).
    /// Inlined: two calls a row, and the checks are a few instructions.
    #[inline]
    pub fn length(&mut self, line: u64, value: f64) {
        if value < 0.0 {
            self.negative_length.add(line);
        }
        if has_fraction(value) {
            self.non_integer_length.add(line);
        }
    }

    /// Checks one delay value.
    pub fn delay(&mut self, line: u64, ms: f64) {
        if ms > crate::delays::LONG_DELAY_MS {
            self.delay_over_an_hour.add(line);
        }
    }

    /// The findings with their names, in report order.
    pub fn named(&self) -> [(&'static str, &Finding); 9] {
        [
            ("negative length", &self.negative_length),
            ("non-integer length", &self.non_integer_length),
            ("duplicate ids in a row", &self.duplicate_ids),
            ("ids not prefix-shaped", &self.not_prefix_shaped),
            ("missing input_length", &self.missing_input_length),
            ("missing output_length", &self.missing_output_length),
            ("missing hash_ids", &self.missing_hash_ids),
            ("missing timestamp and delay", &self.missing_timing),
            ("delay over 1 h", &self.delay_over_an_hour),
        ]
    }
}

/// `v.fract() != 0.0` (NaN and the infinities have one) without the call
/// to libm's `trunc` it makes: two conversions below 2^52, where a float
/// can have a fraction; at and above it every finite float is whole.
fn has_fraction(v: f64) -> bool {
    const TWO_52: f64 = 4_503_599_627_370_496.0;
    if v.abs() < TWO_52 {
        (v as i64) as f64 != v
    } else {
        !v.is_finite()
    }
}

#[cfg(test)]
mod fraction_tests {
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn has_fraction_is_fract_not_zero(
            v in prop_oneof![
                any::<f64>(),
                (-1e6f64..1e6),
                (0u32..1000).prop_map(|q| f64::from(q) / 4.0),
                Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY),
                Just(-0.0), Just(4_503_599_627_370_495.5), Just(-4_503_599_627_370_495.5),
            ]
        ) {
            prop_assert_eq!(super::has_fraction(v), v.fract() != 0.0);
        }
    }
}
