//! A designed workload's parts read directly: each rung is a known sum of
//! steps (a lone prompt's chunks, a batch's decode steps, a long context's
//! decode steps), so its measured time is the step-time formula summed
//! over shapes the design fixes. Fitting those sums is a small least
//! squares problem with no simulation, and well posed where each part pins
//! its coefficients; its answer is where the simulation search starts.
//!
//! Started from a built-in profile, the simulation search alone stalled far
//! from the truth on a designed run of the engine model itself (error
//! 0.008, `c_seq_ms` 0.0012 for 0.2): the error surface of whole runs is
//! piecewise flat, and a simplex from far away finds a ledge.

use super::model::{self, from_vec, to_vec, Shape};
use super::runs::Run;
use crate::engine::{Roofline, StepModel, StepShape};
use crate::gen::calibrate::Part;

/// One rung's measurement and the steps it is the sum (or mean) of.
#[derive(Debug, Clone, PartialEq)]
pub struct Rung {
    pub part: Part,
    /// The steps; the predicted value is their sum (TTFT) or mean (ITL).
    pub steps: Vec<StepShape>,
    pub mean: bool,
    /// Measured, ms.
    pub measured_ms: f64,
}

/// The rungs of the runs' designed rows: prefill rungs by their TTFT,
/// decode-ladder and long-context rows by their mean inter-token time.
pub fn rungs(runs: &[Run], shape: Shape) -> Vec<Rung> {
    let mut out = Vec::new();
    for m in runs.iter().flat_map(|r| &r.requests).filter(|m| m.scored) {
        let Some(id) = m.row.request_id.as_deref() else {
            continue;
        };
        let p = m.prompt_tokens;
        match Part::of_request_id(id) {
            Some(Part::Prefill) => {
                let Some(ttft) = m.ttft_us else { continue };
                out.push(Rung {
                    part: Part::Prefill,
                    steps: prefill_steps(p, shape.max_batched_tokens),
                    mean: false,
                    measured_ms: ttft as f64 / 1000.0,
                });
            }
            Some(part @ (Part::Decode | Part::Kv)) => {
                let Some(itl) = m.itl_us else { continue };
                // `cal:decode:B:i` ran in a batch of B; a long context alone.
                let batch = match part {
                    Part::Decode => id.split(':').nth(2).and_then(|b| b.parse().ok()),
                    _ => Some(1),
                };
                let Some(b) = batch.filter(|&b: &u64| b >= 1) else {
                    continue;
                };
                out.push(Rung {
                    part,
                    steps: decode_steps(b, p, m.output_tokens),
                    mean: true,
                    measured_ms: itl / 1000.0,
                });
            }
            _ => {}
        }
    }
    out
}

/// A lone prompt of `n` tokens in chunks of the step budget: the steps up
/// to its first token.
pub fn prefill_steps(n: u64, budget: u64) -> Vec<StepShape> {
    let budget = budget.max(1);
    let mut steps = Vec::new();
    let mut done = 0u64;
    while done < n {
        let c = budget.min(n - done);
        steps.push(StepShape {
            requests: 1,
            tokens: c,
            prefill_tokens: c,
            attention_pairs: c as f64 * (done as f64 + c as f64 / 2.0),
            ..StepShape::default()
        });
        done += c;
    }
    steps
}

/// The decode steps between a batch's first and last tokens: `b` requests
/// of `p` prompt tokens, the step making token g + 1 reading p + g tokens
/// of each.
pub fn decode_steps(b: u64, p: u64, output: u64) -> Vec<StepShape> {
    (1..output.max(2))
        .map(|g| StepShape {
            requests: b,
            tokens: b,
            decodes: b,
            decode_context: b * (p + g),
            ..StepShape::default()
        })
        .collect()
}

/// The mean over the parts of each part's mean squared log error.
pub fn error(rungs: &[Rung], r: &Roofline) -> f64 {
    error_with(rungs, r, 0.0)
}

/// [`error`] with `offset_ms` added to each lone prompt's time to its first
/// token: the `serving` model's intake of a request (`c_new_ms` +
/// `t_req_ms`), which a decode step's time does not hold.
fn error_with(rungs: &[Rung], r: &Roofline, offset_ms: f64) -> f64 {
    let m = StepModel::Roofline(*r);
    let mut per: std::collections::BTreeMap<Part, (f64, u64)> = Default::default();
    for g in rungs {
        let sum: f64 = g.steps.iter().map(|s| m.step_ms(s)).sum();
        let pred = if g.mean {
            sum / g.steps.len().max(1) as f64
        } else {
            sum + offset_ms
        };
        let e = per.entry(g.part).or_default();
        e.0 += (pred.max(1e-6) / g.measured_ms.max(1e-6)).ln().powi(2);
        e.1 += 1;
    }
    if per.is_empty() {
        return f64::INFINITY;
    }
    per.values().map(|(s, n)| s / *n as f64).sum::<f64>() / per.len() as f64
}

/// Where the simulation search of the model `kind` starts on `runs`: the
/// rungs' own fit when the runs hold designed rungs, else `start`. For `serving`, the rungs
/// are read with a constant per lone prompt beside its steps (without it
/// the prompts' intake is read as step cost: on a CPU-like engine the
/// direct fit put `k_ms` at 3e-16 for 2e-5 and the search never came
/// back); the constant is split evenly between `c_new_ms` and `t_req_ms`,
/// which only the simulation tells apart (a batch's requests each pay
/// `c_new_ms` in turn, `t_req_ms` once together).
pub fn start_for_model<'a>(
    runs: impl IntoIterator<Item = &'a Run>,
    shape: Shape,
    start: Roofline,
    kind: model::Kind,
) -> StepModel {
    let runs: Vec<Run> = runs.into_iter().cloned().collect();
    let r = rungs(&runs, shape);
    if r.is_empty() {
        return model::start_model(kind, start);
    }
    match kind {
        model::Kind::Roofline => StepModel::Roofline(fit(&r, start)),
        model::Kind::Serving => {
            let (base, offset) = fit_offset(&r, start, true);
            StepModel::Serving(crate::engine::Serving {
                base,
                c_new_ms: offset / 2.0,
                t_req_ms: offset / 2.0,
            })
        }
    }
}

/// The least-squares coefficients of the rungs, in log space: Nelder–Mead
/// from `start` and from `start` with the compute line and the attention
/// term each a tenth, as is or ten times (under the weight floor a
/// prompt's linear and quadratic costs can mimic each other over a short
/// range, and one start found the wrong valley: hidden profile 15 of
/// `scripts/bench-fit.sh`, `c_lin_ms` 4e-5 for 0.0127), each restarted
/// from its own answer until it stops improving; the best kept. An
/// evaluation is microseconds, so nine starts cost nothing beside one
/// simulation of a run.
pub fn fit(rungs: &[Rung], start: Roofline) -> Roofline {
    fit_offset(rungs, start, false).0
}

/// [`fit`], and with `offset` also a constant per lone prompt (see
/// [`error_with`]), returned beside the coefficients (0 without).
fn fit_offset(rungs: &[Rung], start: Roofline, offset: bool) -> (Roofline, f64) {
    let split = |lx: &[f64]| {
        let v: [f64; 6] = std::array::from_fn(|i| lx.get(i).map_or(0.0, |x| x.exp()));
        let o = if offset {
            lx.get(6).map_or(0.0, |x| x.exp())
        } else {
            0.0
        };
        (from_vec(&v), o)
    };
    let mut f = |lx: &[f64]| {
        let (r, o) = split(lx);
        error_with(rungs, &r, o)
    };
    let mut x0: Vec<f64> = to_vec(&start).map(|v| v.max(1e-12).ln()).to_vec();
    if offset {
        x0.push(start.t_fix_ms.max(1e-3).ln());
    }
    let (mut x, mut best) = (x0.clone(), f(&x0));
    for lin in [0.1f64, 1.0, 10.0] {
        for attn in [0.1f64, 1.0, 10.0] {
            let mut y = x0.clone();
            y[3] += lin.ln();
            y[4] += attn.ln();
            let mut v = f(&y);
            for step in [3.0, 1.0, 0.3, 0.1, 0.03] {
                let (by, bv) = model::nelder_mead(&mut f, y.clone(), step, 4000);
                if bv < v {
                    (y, v) = (by, bv);
                }
            }
            if v < best {
                (x, best) = (y, v);
            }
        }
    }
    split(&x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decode rung (`b` requests at context `p`, 64 output tokens) as the
    /// model `m` times it: the mean step, as a run's ITL reads it.
    fn decode_rung(m: &StepModel, part: Part, b: u64, p: u64) -> Rung {
        let steps = decode_steps(b, p, 64);
        let ms = steps.iter().map(|s| m.step_ms(s)).sum::<f64>() / steps.len() as f64;
        Rung {
            part,
            steps,
            mean: true,
            measured_ms: ms,
        }
    }

    #[test]
    fn a_long_prompt_is_cut_into_budget_chunks() {
        // 5000 tokens at 2048 a step: 2048, 2048, 904; the third chunk's
        // attention is 904 · (4096 + 452).
        let s = prefill_steps(5000, 2048);
        assert_eq!(
            s.iter().map(|s| s.tokens).collect::<Vec<_>>(),
            vec![2048, 2048, 904]
        );
        assert_eq!(s[2].attention_pairs, 904.0 * (4096.0 + 452.0));
    }

    #[test]
    fn a_batch_decodes_its_answer_less_the_first_token() {
        // 4 requests of 32 prompt tokens, 4 output tokens: the steps making
        // tokens 2, 3 and 4 read 33, 34 and 35 tokens of each.
        let s = decode_steps(4, 32, 4);
        assert_eq!(
            s.iter().map(|s| s.decode_context).collect::<Vec<_>>(),
            vec![132, 136, 140]
        );
        assert!(s.iter().all(|s| s.requests == 4 && s.tokens == 4));
    }

    /// The rungs of a design at `len` tokens and `seqs` sequences, timed
    /// by `truth` (step budget `budget`).
    fn design_rungs(truth: Roofline, len: u64, seqs: u64, budget: u64) -> Vec<Rung> {
        use crate::gen::calibrate::{decode_batches, kv_lengths, prefill_lengths};
        let m = StepModel::Roofline(truth);
        let mut rungs = Vec::new();
        for n in prefill_lengths(len) {
            let steps = prefill_steps(n, budget);
            let ms = steps.iter().map(|s| m.step_ms(s)).sum();
            rungs.push(Rung {
                part: Part::Prefill,
                steps,
                mean: false,
                measured_ms: ms,
            });
        }
        let decodes = decode_batches(seqs)
            .into_iter()
            .map(|b| (Part::Decode, b, 32));
        let kv = kv_lengths(len, 64).into_iter().map(|n| (Part::Kv, 1, n));
        for (part, b, p) in decodes.chain(kv) {
            rungs.push(decode_rung(&m, part, b, p));
        }
        rungs
    }

    /// Hidden profile 15 of `scripts/bench-fit.sh` (seed 34): a 27 ms
    /// weight floor hides the compute line of all but the longest prompts.
    /// On the bench's virtual-time run of it a single start settled on
    /// `c_lin_ms` 4e-5 with a quadratic term 3x too large; these exact
    /// rungs alone do not lead one start astray (the bench shows the
    /// multi-start's effect), so this holds the recovery, not the failure.
    #[test]
    fn a_compute_line_hidden_under_the_floor_is_still_found() {
        let truth = Roofline {
            t_fix_ms: 0.096,
            c_seq_ms: 0.06229,
            t_w_ms: 27.05,
            c_lin_ms: 0.01268,
            k_ms: 1.72e-6,
            c_kv_ms: 0.000191,
        };
        let got = fit(
            &design_rungs(truth, 4096, 16, 4096),
            crate::engine::H100_LLAMA3_8B,
        );
        for (name, (g, t)) in model::NAMES
            .iter()
            .zip(to_vec(&got).iter().zip(to_vec(&truth)))
        {
            if *name != "t_fix_ms" {
                assert!((g / t - 1.0).abs() < 0.05, "{name}: {g} vs {t}: {got:?}");
            }
        }
    }

    #[test]
    fn the_rungs_of_known_coefficients_give_them_back() {
        let truth = Roofline {
            t_fix_ms: 0.5,
            c_seq_ms: 0.2,
            t_w_ms: 12.0,
            c_lin_ms: 0.05,
            k_ms: 2e-6,
            c_kv_ms: 1e-3,
        };
        let m = StepModel::Roofline(truth);
        let mut rungs = Vec::new();
        for n in crate::gen::calibrate::prefill_lengths(8192) {
            let steps = prefill_steps(n, 2048);
            let ms = steps.iter().map(|s| m.step_ms(s)).sum();
            rungs.push(Rung {
                part: Part::Prefill,
                steps,
                mean: false,
                measured_ms: ms,
            });
        }
        for (part, b, p) in [
            (Part::Decode, 1, 32),
            (Part::Decode, 4, 32),
            (Part::Decode, 16, 32),
            (Part::Decode, 64, 32),
            (Part::Kv, 1, 1024),
            (Part::Kv, 1, 4096),
            (Part::Kv, 1, 8000),
        ] {
            rungs.push(decode_rung(&m, part, b, p));
        }
        let got = fit(&rungs, crate::engine::H100_LLAMA3_8B);
        for (name, (g, t)) in model::NAMES
            .iter()
            .zip(to_vec(&got).iter().zip(to_vec(&truth)))
        {
            assert!((g / t - 1.0).abs() < 0.05, "{name}: {g} vs {t}: {got:?}");
        }
    }
}
