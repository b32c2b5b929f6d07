//! Fitting by simulation: each run's requests, at the times they were
//! actually sent, go through the engine model with candidate coefficients;
//! the error between predicted and measured per-request TTFT, ITL and E2E
//! is minimised by a derivative-free search ([`nelder_mead`]) over the
//! roofline step-time model's six coefficients, in log space (they span
//! eight orders of magnitude and must stay positive).

use crate::engine::{
    Engine, EngineParams, EngineRequest, Finished, PrefixCache, Profile, Roofline, Serving,
    StepModel,
};

use super::runs::Run;
use crate::prom::Histogram;

/// The engine's shape, which the fit does not search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub kv_tokens: u64,
    pub block_size: u64,
    pub max_batched_tokens: u64,
    pub max_seqs: u64,
    /// What the prefix cache keeps (`--prefix-cache`).
    pub prefix_cache: PrefixCache,
}

/// The coefficient names, in the search vector's order.
pub const NAMES: [&str; 6] = [
    "t_fix_ms", "c_seq_ms", "t_w_ms", "c_lin_ms", "k_ms", "c_kv_ms",
];

pub fn to_vec(r: &Roofline) -> [f64; 6] {
    [
        r.t_fix_ms, r.c_seq_ms, r.t_w_ms, r.c_lin_ms, r.k_ms, r.c_kv_ms,
    ]
}

pub fn from_vec(v: &[f64; 6]) -> Roofline {
    Roofline {
        t_fix_ms: v[0],
        c_seq_ms: v[1],
        t_w_ms: v[2],
        c_lin_ms: v[3],
        k_ms: v[4],
        c_kv_ms: v[5],
    }
}

/// The step models the fit searches (`mc-fit --model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// The six roofline coefficients.
    Roofline,
    /// The roofline's six plus `c_new_ms` and `t_req_ms` (the serving
    /// process's per-request costs; decision 0044).
    Serving,
}

/// The `serving` model's coefficients, in the search vector's order.
pub const SERVING_NAMES: [&str; 8] = [
    "t_fix_ms", "c_seq_ms", "t_w_ms", "c_lin_ms", "k_ms", "c_kv_ms", "c_new_ms", "t_req_ms",
];

/// The names of a searched model's coefficients, in [`coeffs`]' order.
pub fn names(m: &StepModel) -> &'static [&'static str] {
    match m {
        StepModel::Serving(_) => &SERVING_NAMES,
        _ => &NAMES,
    }
}

/// A searched model's coefficients (a polynomial has none the fit searches).
pub fn coeffs(m: &StepModel) -> Vec<f64> {
    match m {
        StepModel::Roofline(r) => to_vec(r).to_vec(),
        StepModel::Serving(v) => {
            let mut c = to_vec(&v.base).to_vec();
            c.extend([v.c_new_ms, v.t_req_ms]);
            c
        }
        StepModel::Polynomial(_) => Vec::new(),
    }
}

/// A model of `like`'s kind with the coefficients `c` ([`coeffs`]' order).
pub fn with_coeffs(like: &StepModel, c: &[f64]) -> StepModel {
    let base = |c: &[f64]| from_vec(&std::array::from_fn(|i| c.get(i).copied().unwrap_or(0.0)));
    match like {
        StepModel::Serving(_) => StepModel::Serving(Serving {
            base: base(c),
            c_new_ms: c.get(6).copied().unwrap_or(0.0),
            t_req_ms: c.get(7).copied().unwrap_or(0.0),
        }),
        StepModel::Roofline(_) => StepModel::Roofline(base(c)),
        StepModel::Polynomial(p) => StepModel::Polynomial(*p),
    }
}

/// The search's start for `kind` from a roofline start: the `serving`
/// model's two extra terms begin at the roofline's fixed step cost (the
/// scale of a step's overhead; the search moves them by factors of e²).
pub fn start_model(kind: Kind, r: Roofline) -> StepModel {
    match kind {
        Kind::Roofline => StepModel::Roofline(r),
        Kind::Serving => StepModel::Serving(Serving {
            base: r,
            c_new_ms: r.t_fix_ms.max(1e-3),
            t_req_ms: r.t_fix_ms.max(1e-3),
        }),
    }
}

pub fn params(model: StepModel, s: Shape, name: &str) -> EngineParams {
    EngineParams {
        profile: Profile {
            name: name.to_string(),
            model,
            kv_tokens: Some(s.kv_tokens),
            block_size: Some(s.block_size),
            max_batched_tokens: Some(s.max_batched_tokens),
            max_seqs: Some(s.max_seqs),
            // The runs' requests were all served: no limit to apply.
            max_model_len: None,
            prefix_cache: None,
            calibrated: None,
        },
        kv_tokens: s.kv_tokens,
        block_size: s.block_size,
        max_batched_tokens: s.max_batched_tokens,
        max_seqs: s.max_seqs,
        max_model_len: None,
        prefix_cache: s.prefix_cache,
    }
}

/// One request as the model predicts it (µs from its send).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Predicted {
    pub ttft_us: Option<u64>,
    pub e2e_us: u64,
    pub itl_us: Option<f64>,
    pub cached_tokens: u64,
    pub end_us: u64,
    /// vLLM's phases as its histograms time them (first scheduled to first
    /// token; first token to last), µs.
    pub prefill_us: u64,
    pub decode_us: u64,
}

/// A run's requests with their engine blocks worked out once (they do not
/// depend on the coefficients).
#[derive(Clone)]
pub struct Prepared<'a> {
    pub run: &'a Run,
    blocks: Vec<Vec<u64>>,
}

impl<'a> Prepared<'a> {
    pub fn new(run: &'a Run, engine_block: u64) -> Prepared<'a> {
        let blocks = (0..run.requests.len())
            .map(|i| run.blocks(i, engine_block))
            .collect();
        Prepared { run, blocks }
    }

    /// Replays the run's sends through the engine.
    pub fn simulate(&self, p: &EngineParams) -> Vec<Predicted> {
        let mut e = Engine::new(p.clone());
        let mut out: Vec<Finished> = Vec::new();
        for (i, m) in self.run.requests.iter().enumerate() {
            while e.now_us() < m.send_us {
                let before = e.now_us();
                e.advance(Some(m.send_us), &mut out);
                if e.now_us() == before && e.in_flight() == 0 {
                    break;
                }
            }
            e.add(EngineRequest {
                id: i as u64,
                arrival_us: m.send_us,
                blocks: self.blocks[i].clone(),
                prompt_tokens: m.prompt_tokens,
                output_tokens: m.output_tokens,
            });
        }
        while e.in_flight() > 0 {
            e.advance(None, &mut out);
        }
        let mut pred = vec![Predicted::default(); self.run.requests.len()];
        for f in out {
            let Some(slot) = pred.get_mut(f.id as usize) else {
                continue;
            };
            let n = f.token_us.len();
            *slot = Predicted {
                ttft_us: f.first_token_us.map(|t| t.saturating_sub(f.arrival_us)),
                e2e_us: f.end_us.saturating_sub(f.arrival_us),
                itl_us: match (f.first_token_us, n) {
                    (Some(first), n) if n >= 2 => {
                        Some(f.end_us.saturating_sub(first) as f64 / (n - 1) as f64)
                    }
                    _ => None,
                },
                cached_tokens: f.cached_tokens,
                end_us: f.end_us,
                prefill_us: f
                    .first_token_us
                    .map_or(0, |t| t.saturating_sub(f.first_scheduled_us)),
                decode_us: match (f.first_token_us, f.token_us.last()) {
                    (Some(first), Some(&last)) => last.saturating_sub(first),
                    _ => 0,
                },
            };
        }
        pred
    }
}

/// The metrics the fit weighs, in [`error`]'s order: the client's per
/// request TTFT, ITL and E2E, and the server's own prefill and decode time
/// histograms where a run has them.
pub const METRICS: [&str; 5] = ["TTFT", "ITL", "E2E", "server prefill", "server decode"];

/// The error the fit minimises: for each metric, the mean squared log
/// ratio of predicted to measured (a factor of 2 off counts the same either
/// way); then the mean over the metrics, so each weighs alike however many
/// requests it has (ITL needs two tokens) and however large its values (E2E
/// is the largest, and a pooled mean let it decide the fit). Squared, not
/// absolute: the absolute error is flat in too many directions where
/// batches change, and the search stalled far from known coefficients
/// with it.
///
/// A run whose server exported its request-phase histograms
/// ([`super::runs::service_histograms`]) is scored on them instead of the
/// client's times: the service time (prefill, decode) is fitted to what the
/// server measured, and the queueing in the client's TTFT and E2E is left
/// to the simulation rather than fitted.
pub fn error(runs: &[Prepared<'_>], p: &EngineParams) -> f64 {
    let per = metric_errors(runs, p);
    let known: Vec<f64> = per.iter().flatten().copied().collect();
    if known.is_empty() {
        f64::INFINITY
    } else {
        known.iter().sum::<f64>() / known.len() as f64
    }
}

/// Each metric's mean squared log error ([`METRICS`] order); `None` for a
/// metric no run measured.
pub fn metric_errors(runs: &[Prepared<'_>], p: &EngineParams) -> [Option<f64>; 5] {
    let mut sum = [0.0f64; 5];
    let mut n = [0u64; 5];
    let mut add = |k: usize, pred: f64, meas: f64| {
        sum[k] += (pred.max(1.0) / meas.max(1.0)).ln().powi(2);
        n[k] += 1;
    };
    for prep in runs {
        let pred = prep.simulate(p);
        if let Some((prefill, decode)) = super::runs::service_histograms(prep.run) {
            // The server's histograms hold every request it served in the
            // run, warm-ups included: so do the predictions compared.
            let served = || {
                prep.run
                    .requests
                    .iter()
                    .zip(&pred)
                    .filter(|(m, _)| m.e2e_us.is_some())
            };
            let pre: Vec<f64> = served().map(|(_, q)| q.prefill_us as f64 / 1e6).collect();
            let dec: Vec<f64> = served().map(|(_, q)| q.decode_us as f64 / 1e6).collect();
            for (k, measured, predicted) in [(3, prefill, pre), (4, decode, dec)] {
                for (a, b) in histogram_points(measured, &predicted) {
                    // In µs, as the client's times are (the 1 µs floor).
                    add(k, a * 1e6, b * 1e6);
                }
            }
            continue;
        }
        for (m, q) in prep.run.requests.iter().zip(&pred) {
            if !m.scored {
                continue;
            }
            if let (Some(a), Some(b)) = (q.ttft_us, m.ttft_us) {
                add(0, a as f64, b as f64);
            }
            if let (Some(a), Some(b)) = (q.itl_us, m.itl_us) {
                add(1, a, b);
            }
            if let Some(b) = m.e2e_us {
                add(2, q.e2e_us as f64, b as f64);
            }
        }
    }
    std::array::from_fn(|k| (n[k] > 0).then(|| sum[k] / n[k] as f64))
}

/// (predicted, measured) pairs of a server histogram against predicted
/// observations (seconds): the mean, and the median and p90 of both read
/// from the measured histogram's own buckets, the same way, so the coarse
/// buckets blur both sides alike.
pub fn histogram_points(measured: &Histogram, predicted: &[f64]) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    if predicted.is_empty() {
        return out;
    }
    let mean = predicted.iter().sum::<f64>() / predicted.len() as f64;
    if let Some(m) = measured.mean() {
        out.push((mean, m));
    }
    let mut binned = Histogram {
        count: predicted.len() as f64,
        sum: mean * predicted.len() as f64,
        buckets: measured
            .buckets
            .iter()
            .map(|&(le, _)| {
                let below = predicted
                    .iter()
                    .filter(|&&x| le.is_none_or(|le| x <= le))
                    .count();
                (le, below as f64)
            })
            .collect(),
    };
    if binned.buckets.is_empty() {
        binned.buckets.push((None, predicted.len() as f64));
    }
    for q in [0.5, 0.9] {
        if let (Some(a), Some(b)) = (binned.quantile(q), measured.quantile(q)) {
            out.push((a, b));
        }
    }
    out
}

/// Nelder–Mead on `f` from `x0` with initial steps `step`; at most
/// `max_evals` evaluations. Returns the best point and its value.
pub fn nelder_mead(
    f: &mut dyn FnMut(&[f64]) -> f64,
    x0: Vec<f64>,
    step: f64,
    max_evals: usize,
) -> (Vec<f64>, f64) {
    let n = x0.len();
    let mut simplex: Vec<(Vec<f64>, f64)> = Vec::with_capacity(n + 1);
    let v0 = f(&x0);
    simplex.push((x0.clone(), v0));
    for i in 0..n {
        let mut x = x0.clone();
        x[i] += step;
        let v = f(&x);
        simplex.push((x, v));
    }
    if n == 0 {
        return simplex.swap_remove(0);
    }
    let mut evals = n + 1;
    while evals < max_evals {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (best, worst) = (simplex[0].1, simplex[n].1);
        if (worst - best).abs() <= 1e-10 * best.abs().max(1e-12) {
            break;
        }
        let mut c = vec![0.0; n];
        for (x, _) in &simplex[..n] {
            for j in 0..n {
                c[j] += x[j] / n as f64;
            }
        }
        let along = |t: f64| -> Vec<f64> {
            (0..n)
                .map(|j| c[j] + t * (simplex[n].0[j] - c[j]))
                .collect()
        };
        let xr = along(-1.0);
        let vr = f(&xr);
        evals += 1;
        if vr < simplex[0].1 {
            let xe = along(-2.0);
            let ve = f(&xe);
            evals += 1;
            simplex[n] = if ve < vr { (xe, ve) } else { (xr, vr) };
        } else if vr < simplex[n - 1].1 {
            simplex[n] = (xr, vr);
        } else {
            let t = if vr < simplex[n].1 { -0.5 } else { 0.5 };
            let xc = along(t);
            let vc = f(&xc);
            evals += 1;
            if vc < simplex[n].1.min(vr) {
                simplex[n] = (xc, vc);
            } else {
                let x0 = simplex[0].0.clone();
                for (x, v) in simplex.iter_mut().skip(1) {
                    for j in 0..n {
                        x[j] = x0[j] + 0.5 * (x[j] - x0[j]);
                    }
                    *v = f(x);
                    evals += 1;
                }
            }
        }
    }
    simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
    simplex.swap_remove(0)
}

/// The fit, in log space from `start`: Nelder–Mead for the valley, then
/// rounds of golden-section searches one coefficient at a time with a
/// shrinking bracket (the error is piecewise flat where steps round to
/// whole µs and batches change, which stalls a simplex alone), then
/// Nelder–Mead again from the best point.
///
/// `tick` hears every evaluation's error (for the progress line).
/// `start` names the model searched (roofline or serving) and where.
pub fn fit(
    runs: &[Prepared<'_>],
    shape: Shape,
    start: StepModel,
    tick: &mut dyn FnMut(f64),
) -> (StepModel, f64) {
    let mut objective = |lx: &[f64]| {
        let v: Vec<f64> = lx.iter().map(|x| x.exp()).collect();
        let e = error(runs, &params(with_coeffs(&start, &v), shape, "fitted"));
        tick(e);
        e
    };
    let mut x0: Vec<f64> = coeffs(&start).iter().map(|v| v.max(1e-12).ln()).collect();
    if let StepModel::Serving(_) = start {
        // The designed rungs read directly pin the roofline's six; of the
        // two intake costs they read only the sum. Place the two first
        // with the six held: started from an even split, the search of all
        // eight stalled at error 1e-3 (t_fix_ms 1.08 for 1.5 on the engine
        // with a CPU-like profile, tests/fit.rs).
        let held = x0.clone();
        let mut two = |y: &[f64]| {
            let mut z = held.clone();
            z[6..8].copy_from_slice(y);
            objective(&z)
        };
        let (y, _) = nelder_mead(&mut two, x0[6..8].to_vec(), 1.0, 200);
        x0[6..8].copy_from_slice(&y);
    }
    let (mut x, mut best) = nelder_mead(&mut objective, x0, 2.0, 800);
    let mut width = 2.0f64;
    for _ in 0..8 {
        for i in 0..x.len() {
            let (xi, v) = golden(
                &mut |t| {
                    let mut y = x.clone();
                    y[i] = t;
                    objective(&y)
                },
                x[i] - width,
                x[i] + width,
                18,
            );
            if v < best {
                best = v;
                x[i] = xi;
            }
        }
        width *= 0.5;
    }
    let (bx, bv) = nelder_mead(&mut objective, x.clone(), 0.05, 600);
    if bv < best {
        x = bx;
        best = bv;
    }
    let v: Vec<f64> = x.iter().map(|x| x.exp()).collect();
    (with_coeffs(&start, &v), best)
}

/// The minimum of `f` on [a, b] by golden-section search (`n` steps).
fn golden(f: &mut dyn FnMut(f64) -> f64, mut a: f64, mut b: f64, n: usize) -> (f64, f64) {
    let g = (5f64.sqrt() - 1.0) / 2.0;
    let mut c = b - g * (b - a);
    let mut d = a + g * (b - a);
    let (mut fc, mut fd) = (f(c), f(d));
    for _ in 0..n {
        if fc <= fd {
            b = d;
            d = c;
            fd = fc;
            c = b - g * (b - a);
            fc = f(c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + g * (b - a);
            fd = f(d);
        }
    }
    if fc <= fd {
        (c, fc)
    } else {
        (d, fd)
    }
}

/// Coefficients the data cannot pin down: with one halved or doubled and
/// the others refitted, the error stays within half again of the best
/// (the others make up for it: `t_fix_ms` and `c_seq_ms` trade off when
/// every step holds about as many requests).
pub fn unidentified(
    runs: &[Prepared<'_>],
    shape: Shape,
    r: StepModel,
    at: f64,
    tick: &mut dyn FnMut(f64),
) -> Vec<&'static str> {
    let v: Vec<f64> = coeffs(&r).iter().map(|x| x.max(1e-12).ln()).collect();
    let mut out = Vec::new();
    for (i, name) in names(&r).iter().enumerate() {
        let worst_kept = [0.5f64, 2.0]
            .iter()
            .map(|f| {
                let fixed = v[i] + f.ln();
                let mut refit = |lx: &[f64]| {
                    let mut y: Vec<f64> = lx.iter().map(|x| x.exp()).collect();
                    y[i] = fixed.exp();
                    let e = error(runs, &params(with_coeffs(&r, &y), shape, "probe"));
                    tick(e);
                    e
                };
                nelder_mead(&mut refit, v.clone(), 0.3, 300).1
            })
            .fold(f64::INFINITY, f64::min);
        if worst_kept < at * 1.5 + 1e-4 {
            out.push(*name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nelder_mead_finds_a_quadratic_minimum() {
        let mut f = |x: &[f64]| (x[0] - 3.0).powi(2) + 10.0 * (x[1] + 1.0).powi(2);
        let (x, v) = nelder_mead(&mut f, vec![0.0, 0.0], 1.0, 2000);
        assert!(
            (x[0] - 3.0).abs() < 1e-3 && (x[1] + 1.0).abs() < 1e-3,
            "{x:?}"
        );
        assert!(v < 1e-6);
    }

    /// Ten lone requests, TTFT measured e (2.718…) times what the model
    /// predicts, ITL (on one request only) and E2E exactly: TTFT's error is
    /// 1 and the others 0, so the fit's error is 1/3. Pooled over all 21
    /// measurements it would be 10/21: the metric with the most values
    /// would weigh most.
    #[test]
    fn each_metric_weighs_a_third_whatever_its_count() {
        use super::super::runs::{Measured, Row, Run};
        let shape = Shape {
            kv_tokens: 100_000,
            block_size: 16,
            max_batched_tokens: 2048,
            max_seqs: 256,
            prefix_cache: PrefixCache::Blocks,
        };
        let p = params(
            StepModel::Roofline(crate::engine::H100_LLAMA3_8B),
            shape,
            "t",
        );
        let mut run = Run {
            label: "r".into(),
            requests: (0..10u64)
                .map(|i| Measured {
                    send_us: i * 10_000_000,
                    prompt_tokens: 100,
                    output_tokens: if i == 0 { 3 } else { 1 },
                    row: Row {
                        hash_ids: vec![],
                        input_length: Some(100),
                        request_id: None,
                    },
                    line: i + 1,
                    ttft_us: None,
                    e2e_us: None,
                    itl_us: None,
                    cached_tokens: None,
                    scored: true,
                })
                .collect(),
            trace_block: 16,
            engine: None,
            server: Default::default(),
        };
        let pred = Prepared::new(&run, 16).simulate(&p);
        for (m, q) in run.requests.iter_mut().zip(&pred) {
            // Measured e times the prediction (to the µs).
            m.ttft_us = q
                .ttft_us
                .map(|t| (t as f64 * std::f64::consts::E).round() as u64);
            m.itl_us = q.itl_us;
            m.e2e_us = Some(q.e2e_us);
        }
        let per = metric_errors(&[Prepared::new(&run, 16)], &p);
        let ttft = per[0].unwrap();
        assert!((ttft - 1.0).abs() < 1e-3, "{per:?}");
        assert_eq!((per[1], per[2]), (Some(0.0), Some(0.0)), "{per:?}");
        let e = error(&[Prepared::new(&run, 16)], &p);
        assert!((e - ttft / 3.0).abs() < 1e-12, "{e} vs {per:?}");
    }

    #[test]
    fn the_vector_round_trips() {
        let r = crate::engine::H100_LLAMA3_8B;
        assert_eq!(from_vec(&to_vec(&r)), r);
    }
}
