//! Which coefficient each part of a designed calibration workload
//! (`mc-gen calibrate`, rows marked by their `request_id`) pins, and which
//! coefficients a set of runs holding only some of the parts cannot pin.
//!
//! The rule, one coefficient at a time, from the step time
//! `t_fix + c_seq·B + sqrt(t_w² + (c_lin·T)²) + k·Σ n(p + n/2) + c_kv·Σ L`:
//! - `c_lin_ms`, `k_ms`: the prefill ladder (lone prompts of 16 tokens to
//!   the context limit: the compute line, and attention on the long rungs);
//! - `t_w_ms`, `c_seq_ms`: the decode ladder with at least two batch sizes
//!   (the inter-token time of a batch of B is the floor plus B·c_seq);
//! - `t_fix_ms`: the prefill and decode ladders together (a step's constant
//!   is told from the weight floor only by steps where the floor is hidden
//!   under the compute line, long prefills, and steps where it is not);
//! - `c_kv_ms`: the long contexts (decodes whose context grows to the limit).
//!
//! The rate ladder pins none of them alone: it checks the queueing and the
//! mixed steps the engine simulates, and pins the concurrency limit when a
//! rate puts more requests in flight than it.

use std::collections::{BTreeMap, BTreeSet};

use super::runs::Run;
use crate::gen::calibrate::Part;

/// What the runs hold of the design: scored requests per part, and the
/// decode ladder's batch sizes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Coverage {
    pub requests: BTreeMap<Part, u64>,
    /// Prompt lengths of the prefill ladder's and the long contexts' rows.
    pub lengths: BTreeMap<Part, (u64, u64)>,
    pub decode_batches: BTreeSet<u64>,
}

impl Coverage {
    /// The design's parts in the runs (scored requests only: a failed rung
    /// pins nothing).
    pub fn of(runs: &[Run]) -> Coverage {
        let mut c = Coverage::default();
        for m in runs.iter().flat_map(|r| &r.requests).filter(|m| m.scored) {
            let Some(id) = m.row.request_id.as_deref() else {
                continue;
            };
            let Some(part) = Part::of_request_id(id) else {
                continue;
            };
            *c.requests.entry(part).or_default() += 1;
            let span = c.lengths.entry(part).or_insert((u64::MAX, 0));
            *span = (span.0.min(m.prompt_tokens), span.1.max(m.prompt_tokens));
            if part == Part::Decode {
                // `cal:decode:B:i`: the batch it ran in.
                if let Some(b) = id.split(':').nth(2).and_then(|b| b.parse().ok()) {
                    c.decode_batches.insert(b);
                }
            }
        }
        c
    }

    /// Whether the runs hold any designed row: only then does a missing
    /// part say a coefficient is not pinned (runs of another workload are
    /// judged by the search alone).
    pub fn designed(&self) -> bool {
        self.requests.keys().any(|p| *p != Part::Fence)
    }

    fn has(&self, part: Part) -> bool {
        match part {
            // One batch size cannot tell the floor from the per-request cost.
            Part::Decode => self.decode_batches.len() >= 2,
            p => self.requests.get(&p).is_some_and(|&n| n > 0),
        }
    }

    /// For a designed run set: the parts a coefficient needs that the runs
    /// lack (empty: the design pins it). `None` for runs without a design.
    pub fn missing(&self, coefficient: &str) -> Option<Vec<Part>> {
        if !self.designed() {
            return None;
        }
        Some(
            needs(coefficient)
                .iter()
                .copied()
                .filter(|p| !self.has(*p))
                .collect(),
        )
    }

    /// One line per part present: its requests and what it pins.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (&part, &n) in &self.requests {
            if part == Part::Fence {
                continue;
            }
            let detail = match part {
                Part::Decode => format!(
                    "batches of {}",
                    self.decode_batches
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Part::Prefill | Part::Kv => {
                    let (lo, hi) = self.lengths[&part];
                    format!("prompts of {lo} to {hi} tokens")
                }
                _ => String::new(),
            };
            let detail = if detail.is_empty() {
                String::new()
            } else {
                format!(", {detail}")
            };
            out.push(format!(
                "{} ({n} requests{detail}): {}",
                label(part),
                pins(part)
            ));
        }
        out
    }
}

/// The parts a coefficient needs, all of them.
pub fn needs(coefficient: &str) -> &'static [Part] {
    match coefficient {
        "t_fix_ms" => &[Part::Prefill, Part::Decode],
        "c_seq_ms" | "t_w_ms" => &[Part::Decode],
        "c_lin_ms" | "k_ms" => &[Part::Prefill],
        "c_kv_ms" => &[Part::Kv],
        _ => &[],
    }
}

/// What a part pins, in words.
pub fn pins(part: Part) -> &'static str {
    match part {
        Part::Prefill => "pins c_lin_ms and k_ms (and, with the decode ladder, t_fix_ms)",
        Part::Decode => "pins t_w_ms and c_seq_ms (and, with the prefill ladder, t_fix_ms)",
        Part::Kv => "pins c_kv_ms",
        Part::Rate => {
            "pins no coefficient alone: checks the queueing and mixed steps, \
                       and max seqs when a rate puts more in flight than it"
        }
        Part::Fence => "pins nothing",
    }
}

/// A part's name in messages.
pub fn label(part: Part) -> &'static str {
    match part {
        Part::Prefill => "prefill ladder",
        Part::Decode => "decode ladder",
        Part::Kv => "long contexts",
        Part::Rate => "rate ladder",
        Part::Fence => "fences",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::runs::{Measured, Row, Run};

    fn run(ids: &[&str]) -> Run {
        Run {
            label: "r".into(),
            requests: ids
                .iter()
                .enumerate()
                .map(|(i, id)| Measured {
                    send_us: i as u64,
                    prompt_tokens: 16 + i as u64,
                    output_tokens: 2,
                    row: Row {
                        hash_ids: vec![],
                        input_length: None,
                        request_id: Some(id.to_string()),
                    },
                    line: i as u64 + 1,
                    ttft_us: Some(1),
                    e2e_us: Some(2),
                    itl_us: Some(1.0),
                    cached_tokens: None,
                    scored: true,
                })
                .collect(),
            trace_block: 16,
            engine: None,
            server: Default::default(),
        }
    }

    #[test]
    fn a_design_without_the_decode_ladder_pins_neither_floor_nor_per_request_cost() {
        let c = Coverage::of(&[run(&["cal:prefill:16", "cal:prefill:23", "cal:kv:512"])]);
        assert!(c.designed());
        assert_eq!(c.missing("c_seq_ms"), Some(vec![Part::Decode]));
        assert_eq!(c.missing("t_w_ms"), Some(vec![Part::Decode]));
        assert_eq!(c.missing("t_fix_ms"), Some(vec![Part::Decode]));
        assert_eq!(c.missing("c_lin_ms"), Some(vec![]));
        assert_eq!(c.missing("c_kv_ms"), Some(vec![]));
    }

    #[test]
    fn one_batch_size_is_not_a_decode_ladder() {
        let one = Coverage::of(&[run(&["cal:decode:4:0", "cal:decode:4:1"])]);
        assert_eq!(one.missing("c_seq_ms"), Some(vec![Part::Decode]));
        let two = Coverage::of(&[run(&["cal:decode:1:0", "cal:decode:2:0"])]);
        assert_eq!(two.missing("c_seq_ms"), Some(vec![]));
        assert_eq!(two.missing("c_lin_ms"), Some(vec![Part::Prefill]));
    }

    #[test]
    fn runs_without_a_design_are_left_to_the_search() {
        let c = Coverage::of(&[run(&["a", "b"])]);
        assert!(!c.designed());
        assert_eq!(c.missing("c_seq_ms"), None);
        // Fences alone are no design.
        assert!(!Coverage::of(&[run(&["cal:fence:decode-1"])]).designed());
    }
}
