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
    pub fn length(&mut self, line: u64, value: f64) {
        if value < 0.0 {
            self.negative_length.add(line);
        }
        if value.fract() != 0.0 {
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
