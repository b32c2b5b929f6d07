//! A counted finding with the first line numbers where it occurs.

use serde::Serialize;

/// How many first line numbers a finding keeps.
const FIRST_LINES: usize = 5;

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Finding {
    pub count: u64,
    pub first_lines: Vec<u64>,
}

impl Finding {
    /// Counts one occurrence on `line` (a line is listed once however
    /// many times it is counted).
    pub fn add(&mut self, line: u64) {
        self.count += 1;
        if self.first_lines.len() < FIRST_LINES && self.first_lines.last() != Some(&line) {
            self.first_lines.push(line);
        }
    }
}
