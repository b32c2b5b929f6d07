//! The graph of one request's LLM calls (docs/guide/agents.md): a call
//! waits for the calls that had ended before it started, reduced to the
//! latest ones (the transitive reduction of "ended before started"); calls
//! that overlap in time are branches of the call they both wait for. The
//! gap between a call's latest dependency's end and its start is split into
//! tool time (the union of TOOL_START/TOOL_END spans inside it) and the
//! rest (think time, `delay`).

/// A call's place in time, epoch seconds; calls come in END order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    pub start: Option<f64>,
    pub end: Option<f64>,
}

/// The gap before a call with dependencies, seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gap {
    /// From the latest dependency's end to the call's start (≥ 0).
    pub total: f64,
    /// The part of it covered by tool spans.
    pub tool: f64,
}

/// The edges of one request, by call index (END order).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Edges {
    /// What each call waits for (sorted).
    pub deps: Vec<Vec<usize>>,
    /// How each edge is written: a call with two or more dependents lists
    /// them in its `branches` (they overlap: each started before the other
    /// ended, or one would wait for the other); any other edge is in the
    /// dependent's `wait_for`.
    pub wait_for: Vec<Vec<usize>>,
    pub branches: Vec<Vec<usize>>,
    /// `None` for a call without dependencies (a root: it gets a timestamp).
    pub gap: Vec<Option<Gap>>,
}

/// Builds the edges of calls in END order, with the request's tool spans.
/// A request with a call missing a time is a chain (each call waits for the
/// one before it, a missing gap 0), as the rows were before graphs.
pub fn build(calls: &[Span], tools: &[(f64, f64)]) -> Edges {
    let n = calls.len();
    let timed = calls.iter().all(|c| c.start.is_some() && c.end.is_some());
    let mut deps: Vec<Vec<usize>> = vec![Vec::new(); n];
    if timed {
        let start = |k: usize| calls[k].start.unwrap_or(0.0);
        let end = |k: usize| calls[k].end.unwrap_or(0.0);
        for (c, deps_of_c) in deps.iter_mut().enumerate() {
            // "d ended before c started", ordered by END (the index breaks
            // ties, so two calls of no length at one instant make no cycle).
            let before: Vec<usize> = (0..c).filter(|&d| end(d) <= start(c)).collect();
            // d is direct unless some later-ending e in `before` started
            // after d ended (d before e before c): scan from the latest,
            // keeping the latest start seen.
            let mut latest_start = f64::NEG_INFINITY;
            let mut direct = Vec::new();
            for &d in before.iter().rev() {
                if latest_start < end(d) {
                    direct.push(d);
                }
                latest_start = latest_start.max(start(d));
            }
            direct.reverse();
            *deps_of_c = direct;
        }
    } else {
        for (c, d) in deps.iter_mut().enumerate().skip(1) {
            d.push(c - 1);
        }
    }
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (c, ds) in deps.iter().enumerate() {
        for &d in ds {
            dependents[d].push(c);
        }
    }
    let mut wait_for: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut branches: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (d, cs) in dependents.iter().enumerate() {
        if cs.len() >= 2 {
            branches[d] = cs.clone();
        } else {
            for &c in cs {
                wait_for[c].push(d);
            }
        }
    }
    for w in &mut wait_for {
        w.sort_unstable();
    }
    let spans = union(tools);
    let gap = (0..n)
        .map(|c| {
            if deps[c].is_empty() {
                return None;
            }
            let after = deps[c]
                .iter()
                .filter_map(|&d| calls[d].end)
                .fold(f64::NEG_INFINITY, f64::max);
            match calls[c].start {
                Some(s) if after.is_finite() => {
                    let total = (s - after).max(0.0);
                    let tool = covered(&spans, after, s).min(total);
                    Some(Gap { total, tool })
                }
                _ => Some(Gap {
                    total: 0.0,
                    tool: 0.0,
                }),
            }
        })
        .collect();
    Edges {
        deps,
        wait_for,
        branches,
        gap,
    }
}

/// Tool spans merged where they overlap, in time order.
fn union(tools: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut spans: Vec<(f64, f64)> = tools
        .iter()
        .copied()
        .filter(|(a, b)| a.is_finite() && b.is_finite() && b > a)
        .collect();
    spans.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(spans.len());
    for (a, b) in spans {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Seconds of `[lo, hi]` the merged spans cover.
fn covered(spans: &[(f64, f64)], lo: f64, hi: f64) -> f64 {
    spans
        .iter()
        .map(|&(a, b)| (b.min(hi) - a.max(lo)).max(0.0))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: f64, end: f64) -> Span {
        Span {
            start: Some(start),
            end: Some(end),
        }
    }

    #[test]
    fn a_sequence_is_a_chain_with_its_gaps() {
        // 0..1, 1.5..2, 2.2..3: each waits for the one before.
        let e = build(&[span(0.0, 1.0), span(1.5, 2.0), span(2.2, 3.0)], &[]);
        assert_eq!(e.deps, vec![vec![], vec![0], vec![1]]);
        assert_eq!(e.wait_for, e.deps);
        assert!(e.branches.iter().all(Vec::is_empty));
        assert_eq!(e.gap[0], None);
        assert_eq!(e.gap[1].map(|g| g.total), Some(0.5));
        assert!((e.gap[2].unwrap().total - 0.2).abs() < 1e-12);
    }

    #[test]
    fn a_fan_out_and_join() {
        // A 0..1; B 1.1..2 and C 1.2..2.5 overlap (branches of A); D
        // 3..4 waits for both (its wait_for); tool 2.6..2.8 and 2.7..2.9
        // (union 0.3 s) inside D's gap of 0.5 s after C.
        let e = build(
            &[
                span(0.0, 1.0),
                span(1.1, 2.0),
                span(1.2, 2.5),
                span(3.0, 4.0),
            ],
            &[(2.6, 2.8), (2.7, 2.9), (0.2, 0.4)],
        );
        assert_eq!(e.deps, vec![vec![], vec![0], vec![0], vec![1, 2]]);
        assert_eq!(e.branches[0], vec![1, 2]);
        assert_eq!(e.wait_for, vec![vec![], vec![], vec![], vec![1, 2]]);
        let g = e.gap[3].unwrap();
        assert!(
            (g.total - 0.5).abs() < 1e-12 && (g.tool - 0.3).abs() < 1e-12,
            "{g:?}"
        );
        // B's gap: 0.1 s after A, no tool inside.
        let g = e.gap[1].unwrap();
        assert!((g.total - 0.1).abs() < 1e-12 && g.tool == 0.0);
    }

    #[test]
    fn the_reduction_keeps_only_the_latest() {
        // A 0..1, B 2..3, C 4..5: C ended-after both but B is between.
        // D 0.5..3.5 overlaps A's end and B: waits for nothing (started
        // before anything ended); E 6..7 waits for C and D? D ended 3.5,
        // C started 4 > 3.5: D before C before E, so E waits for C only.
        let e = build(
            &[
                span(0.0, 1.0),
                span(2.0, 3.0),
                span(0.5, 3.5),
                span(4.0, 5.0),
                span(6.0, 7.0),
            ],
            &[],
        );
        assert_eq!(e.deps, vec![vec![], vec![0], vec![], vec![1, 2], vec![3]]);
        assert_eq!(e.gap[2], None);
    }

    #[test]
    fn calls_of_no_length_at_one_instant_make_no_cycle() {
        let e = build(&[span(1.0, 1.0), span(1.0, 1.0)], &[]);
        assert_eq!(e.deps, vec![vec![], vec![0]]);
    }

    #[test]
    fn a_call_without_times_makes_a_chain() {
        let e = build(
            &[
                span(0.0, 1.0),
                Span {
                    start: None,
                    end: Some(2.0),
                },
                span(0.5, 3.0),
            ],
            &[],
        );
        assert_eq!(e.deps, vec![vec![], vec![0], vec![1]]);
        assert_eq!(
            e.gap[1],
            Some(Gap {
                total: 0.0,
                tool: 0.0
            })
        );
    }
}
