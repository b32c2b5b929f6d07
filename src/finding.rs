//! A counted finding with the first line numbers where it occurs: skipped
//! bad lines, inconsistent rows, out-of-order timestamps, lint. One type and
//! one rendering (`3 (line 4, 9, 12)`), so every tool words it the same way.

use serde::Serialize;

/// How many first line numbers a finding keeps.
pub const FIRST_LINES: usize = 5;

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

impl Finding {
    /// The first lines as text: `line 4, 9, 12` (with `, …` when there are
    /// more); empty when nothing was found.
    pub fn first_lines_text(&self) -> String {
        if self.count == 0 {
            return String::new();
        }
        let shown: Vec<String> = self.first_lines.iter().map(u64::to_string).collect();
        let more = if self.count > self.first_lines.len() as u64 {
            ", …"
        } else {
            ""
        };
        format!("line {}{more}", shown.join(", "))
    }
}

/// `3 (line 4, 9, 12)`, or `0`.
impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.count == 0 {
            return f.write_str("0");
        }
        write!(f, "{} ({})", self.count, self.first_lines_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_count_and_the_first_lines() {
        let mut f = Finding::default();
        assert_eq!(f.to_string(), "0");
        f.add(4);
        f.add(4);
        f.add(9);
        // Line 4 counted twice: the count is above the lines listed.
        assert_eq!(f.to_string(), "3 (line 4, 9, …)");
        for line in 10..20 {
            f.add(line);
        }
        assert_eq!(f.first_lines, vec![4, 9, 10, 11, 12]);
        assert_eq!(f.to_string(), "13 (line 4, 9, 10, 11, 12, …)");
    }
}
