//! The report's panels, from result lines: latencies over the run (a dot
//! per request, p50/p99 per window), their CDFs, output tokens per second,
//! requests in flight, schedule lag, sessions; and a sweep's
//! throughput-latency curve. Runs are overlaid, one legend entry each.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::plot::fmt::human;
use crate::plot::{cdf, Body, Panel, Series, Style, Unit};
use crate::results::RequestResult;
use crate::stats::percentile_linear;

use super::summary::Recomputed;

/// At most this many dots per run and panel (every k-th request beyond);
/// at most this many points per CDF.
const MAX_DOTS: usize = 5000;
const MAX_CDF_POINTS: usize = 1000;

/// A run as the figures see it.
pub struct RunData<'a> {
    pub label: &'a str,
    pub results: &'a [RequestResult],
}

/// Measured requests (no warm-up).
fn measured<'a>(r: &'a RunData) -> impl Iterator<Item = &'a RequestResult> {
    r.results.iter().filter(|x| !x.warmup)
}

fn ok<'a>(r: &'a RunData) -> impl Iterator<Item = &'a RequestResult> {
    measured(r).filter(|x| x.is_ok())
}

/// A window width that gives about 40 windows over `span_s`.
pub fn auto_window_s(span_s: f64) -> f64 {
    nice(span_s / 40.0)
}

/// `raw` rounded up to 1, 2 or 5 times a power of ten (at least 1 ms).
fn nice(raw: f64) -> f64 {
    let raw = raw.max(0.001);
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    let nice = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * p
}

/// The span of the runs, in s (the latest end).
pub fn span_s(runs: &[RunData]) -> f64 {
    runs.iter()
        .flat_map(|r| r.results.iter())
        .map(|x| x.t_end_ms / 1000.0)
        .fold(0.0, f64::max)
}

/// (x, y) points of a series.
type Points = Vec<(f64, f64)>;

/// Palette colours of the runs, in order (blue, red, green, purple, ...).
const RUN_COLORS: [usize; 8] = [3, 0, 1, 5, 4, 6, 7, 9];

/// What a series shows of its run.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    Dots,
    P50,
    P99,
    Line,
}

/// One run's series: with one run, dots blue, p50 green, p99 red (dashed);
/// overlaid runs each keep their own colour, p99 dashed.
fn series(runs: &[RunData], k: usize, what: &str, points: Vec<(f64, f64)>, role: Role) -> Series {
    let color = if runs.len() == 1 {
        match role {
            Role::P50 => 1,
            Role::P99 => 0,
            Role::Dots | Role::Line => 3,
        }
    } else {
        RUN_COLORS[k % RUN_COLORS.len()]
    };
    Series {
        name: name(runs, &runs[k], what),
        points,
        dots: role == Role::Dots,
        style: Style {
            color: Some(color),
            dashed: role == Role::P99,
        },
    }
}

/// `label` alone for one run; `label name` when runs are overlaid.
fn name(runs: &[RunData], r: &RunData, what: &str) -> String {
    if runs.len() == 1 {
        what.to_string()
    } else if what.is_empty() {
        r.label.to_string()
    } else {
        format!("{} {what}", r.label)
    }
}

/// What [`thin`] left out, said on the panel: `None` when nothing was.
fn thinned(n: usize, max: usize, what: &str) -> Option<String> {
    let k = n.div_ceil(max.max(1)).max(1);
    (k > 1).then(|| {
        format!(
            "{what}: 1 in {k} of {} shown",
            human(n as f64, Unit::Plain, 6)
        )
    })
}

/// `title`, then what was thinned out, if anything.
fn noted(title: &str, notes: &[String]) -> String {
    if notes.is_empty() {
        title.to_string()
    } else {
        format!("{title} ({})", notes.join("; "))
    }
}

/// Every k-th point so that at most `max` remain.
fn thin<T: Copy>(v: &[T], max: usize) -> Vec<T> {
    let k = v.len().div_ceil(max.max(1)).max(1);
    v.iter().step_by(k).copied().collect()
}

/// p50 and p99 of the values in each window `[k·w, (k+1)·w)`, drawn at the
/// window's middle; windows without values are skipped.
pub fn window_percentiles(points: &[(f64, f64)], w: f64) -> (Points, Points) {
    let mut by: HashMap<u64, Vec<f64>> = HashMap::new();
    for &(t, v) in points {
        if t.is_finite() && v.is_finite() && t >= 0.0 {
            by.entry((t / w) as u64).or_default().push(v);
        }
    }
    let mut keys: Vec<u64> = by.keys().copied().collect();
    keys.sort_unstable();
    let (mut p50, mut p99) = (Vec::new(), Vec::new());
    for k in keys {
        let v = by.get_mut(&k).map(std::mem::take).unwrap_or_default();
        let mut v = v;
        v.sort_by(f64::total_cmp);
        let x = (k as f64 + 0.5) * w;
        p50.push((x, percentile_linear(&v, 0.5)));
        p99.push((x, percentile_linear(&v, 0.99)));
    }
    (p50, p99)
}

/// Dots, p50 and p99 lines of one metric over the run, per run.
fn over_run(
    runs: &[RunData],
    w: f64,
    title: &str,
    y: &str,
    dots: &dyn Fn(&RequestResult) -> Option<(f64, f64)>,
    window_points: &dyn Fn(&RequestResult, &mut Points),
) -> Panel {
    let mut out = Vec::new();
    let mut notes = Vec::new();
    for (k, r) in runs.iter().enumerate() {
        let d: Vec<(f64, f64)> = ok(r).filter_map(dots).collect();
        let mut wp = Vec::new();
        for x in ok(r) {
            window_points(x, &mut wp);
        }
        let (p50, p99) = window_percentiles(&wp, w);
        notes.extend(thinned(d.len(), MAX_DOTS, &name(runs, r, "dots")));
        out.push(series(runs, k, "requests", thin(&d, MAX_DOTS), Role::Dots));
        out.push(series(runs, k, "p50", p50, Role::P50));
        out.push(series(runs, k, "p99", p99, Role::P99));
    }
    Panel {
        title: noted(title, &notes),
        x_label: format!(
            "time since the run's start; p50/p99 per {} window (all requests)",
            human(w, Unit::S, 6)
        ),
        y_label: y.into(),
        x_unit: Unit::S,
        y_unit: Unit::Ms,
        body: Body::Lines(out),
    }
}

/// Each output event's time (ms) and gap: the first token, then one per
/// ITL gap (exact event times, from the raw gaps).
fn gap_times(x: &RequestResult) -> impl Iterator<Item = (f64, f64)> + '_ {
    let t0 = x.t_first_ms.unwrap_or(0.0);
    x.itl_gaps_ms.iter().scan(t0, |t, &g| {
        *t += g;
        Some((*t, g))
    })
}

fn cdf_panel(
    runs: &[RunData],
    title: &str,
    x: &str,
    values: &dyn Fn(&RunData) -> Vec<f64>,
) -> Panel {
    let mut notes = Vec::new();
    let out = (0..runs.len())
        .map(|k| {
            let all = cdf(&values(&runs[k]));
            notes.extend(thinned(
                all.len(),
                MAX_CDF_POINTS,
                &name(runs, &runs[k], "steps"),
            ));
            series(runs, k, "", thin(&all, MAX_CDF_POINTS), Role::Line)
        })
        .collect();
    Panel {
        title: noted(title, &notes),
        x_label: x.into(),
        y_label: "share of requests at or below".into(),
        x_unit: Unit::Ms,
        y_unit: Unit::Share,
        body: Body::Lines(out),
    }
}

/// Output tokens per second in each window: each output event carries
/// completion_tokens / events tokens at its time (without raw gaps, the
/// events are spread evenly from the first to the last token).
pub fn output_rate(r: &RunData, w: f64, n: usize) -> Vec<(f64, f64)> {
    let mut tok = vec![0.0; n];
    let mut put = |t_ms: f64, v: f64| {
        let k = ((t_ms / 1000.0 / w) as usize).min(n.saturating_sub(1));
        if let Some(slot) = tok.get_mut(k) {
            *slot += v;
        }
    };
    for x in ok(r) {
        let (Some(first), Some(n_tok)) = (x.t_first_ms, x.completion_tokens) else {
            continue;
        };
        if !x.itl_gaps_ms.is_empty() {
            let each = n_tok as f64 / (x.itl_gaps_ms.len() + 1) as f64;
            put(first, each);
            for (t, _) in gap_times(x) {
                put(t, each);
            }
        } else {
            let events = x.chunks.max(1);
            let last = x.t_last_ms.unwrap_or(first);
            let each = n_tok as f64 / events as f64;
            for i in 0..events {
                let f = if events > 1 {
                    i as f64 / (events - 1) as f64
                } else {
                    0.0
                };
                put(first + (last - first) * f, each);
            }
        }
    }
    tok.iter()
        .enumerate()
        .map(|(k, &v)| ((k as f64 + 0.5) * w, v / w))
        .collect()
}

/// Mean requests in flight in each window: the time each request spent
/// between its send and its end inside the window, over the window.
pub fn in_flight(r: &RunData, w: f64, n: usize) -> Vec<(f64, f64)> {
    let mut busy = vec![0.0; n];
    for x in measured(r) {
        let (a, b) = (x.t_send_ms / 1000.0, x.t_end_ms / 1000.0);
        if !(a.is_finite() && b.is_finite()) || b <= a {
            continue;
        }
        let k0 = (a / w) as usize;
        let k1 = ((b / w) as usize).min(n.saturating_sub(1));
        for (k, slot) in busy.iter_mut().enumerate().take(k1 + 1).skip(k0) {
            let lo = a.max(k as f64 * w);
            let hi = b.min((k + 1) as f64 * w);
            if hi > lo {
                *slot += hi - lo;
            }
        }
    }
    busy.iter()
        .enumerate()
        .map(|(k, &v)| ((k as f64 + 0.5) * w, v / w))
        .collect()
}

/// The windows of the figures: (per-window rates, per-window
/// percentiles). Rates get about 40 windows over the run; percentiles
/// also at least about 10 requests a window, so p99 is not one request.
/// A `--window-s` is held to `limits::MAX_WINDOWS` windows over the run,
/// as mc-plot's `--window-ms` is (every window is a slot in memory).
pub fn windows(runs: &[RunData], window_s: Option<f64>) -> Result<(f64, f64)> {
    let span = span_s(runs);
    if let Some(w) = window_s {
        let n = span / w;
        if n.is_nan() || n >= crate::limits::MAX_WINDOWS as f64 {
            return Err(Error::usage(format!(
                "--window-s {w}: the runs span {span:.3} s, {n:.3e} windows, above the limit of \
                 {}; give --window-s {:.3e} or more",
                crate::limits::MAX_WINDOWS,
                span / crate::limits::MAX_WINDOWS as f64 * 1.001
            )));
        }
        return Ok((w, w));
    }
    let most = runs
        .iter()
        .map(|r| measured(r).count())
        .max()
        .unwrap_or(1)
        .max(1);
    let per_request = span * 10.0 / most as f64;
    Ok((auto_window_s(span), nice(per_request.max(span / 40.0))))
}

/// Every panel of the runs' report (sessions last, one per run that has
/// sessions).
pub fn panels(runs: &[RunData], (w, w_pct): (f64, f64), max_sessions: usize) -> Vec<Panel> {
    let mut out = latency_panels(runs, w_pct);
    out.extend(load_panels(runs, w));
    out.push(lag_panel(runs, w_pct));
    for r in runs {
        if let Some(p) = sessions(r, max_sessions) {
            out.push(p);
        }
    }
    out
}

/// TTFT, ITL and E2E over the run (p99 per `w_pct` window), then their
/// CDFs.
fn latency_panels(runs: &[RunData], w_pct: f64) -> Vec<Panel> {
    let s = |ms: f64| ms / 1000.0;
    vec![
        over_run(
            runs,
            w_pct,
            "TTFT over the run",
            "TTFT",
            &|x| Some((s(x.t_send_ms), x.ttft_ms?)),
            &|x, v| v.extend(x.ttft_ms.map(|t| (s(x.t_send_ms), t))),
        ),
        over_run(
            runs,
            w_pct,
            "ITL over the run (dots: a request's mean gap)",
            "ITL",
            &|x| Some((s(x.t_first_ms?), x.itl_ms.as_ref()?.mean)),
            &|x, v| v.extend(gap_times(x).map(|(t, g)| (s(t), g))),
        ),
        over_run(
            runs,
            w_pct,
            "E2E latency over the run",
            "E2E",
            &|x| Some((s(x.t_send_ms), x.e2e_ms?)),
            &|x, v| v.extend(x.e2e_ms.map(|e| (s(x.t_send_ms), e))),
        ),
        cdf_panel(runs, "TTFT CDF", "TTFT", &|r| {
            ok(r).filter_map(|x| x.ttft_ms).collect()
        }),
        cdf_panel(runs, "ITL CDF (every gap)", "ITL", &|r| {
            ok(r).flat_map(|x| x.itl_gaps_ms.iter().copied()).collect()
        }),
        cdf_panel(runs, "E2E latency CDF", "E2E", &|r| {
            ok(r).filter_map(|x| x.e2e_ms).collect()
        }),
    ]
}

/// Output tokens per second and requests in flight, per `w` window.
fn load_panels(runs: &[RunData], w: f64) -> [Panel; 2] {
    let n = ((span_s(runs) / w).floor() as usize + 1).max(1);
    let per_window = |title: &str, y: &str, f: &dyn Fn(&RunData) -> Vec<(f64, f64)>| Panel {
        title: title.into(),
        x_label: format!(
            "time since the run's start, {} windows",
            human(w, Unit::S, 6)
        ),
        y_label: y.into(),
        x_unit: Unit::S,
        y_unit: Unit::Plain,
        body: Body::Lines(
            (0..runs.len())
                .map(|k| series(runs, k, "", f(&runs[k]), Role::Line))
                .collect(),
        ),
    };
    [
        per_window("Output tokens per second", "tok/s", &|r| {
            output_rate(r, w, n)
        }),
        per_window("Requests in flight (mean per window)", "requests", &|r| {
            in_flight(r, w, n)
        }),
    ]
}

/// Each request's schedule lag at its scheduled time (thinned to
/// `MAX_DOTS` dots a run), with the p99 per `w_pct` window.
fn lag_panel(runs: &[RunData], w_pct: f64) -> Panel {
    let s = |ms: f64| ms / 1000.0;
    let mut lag = Vec::new();
    let mut notes = Vec::new();
    for (k, r) in runs.iter().enumerate() {
        let d: Vec<(f64, f64)> = measured(r).map(|x| (s(x.t_sched_ms), x.lag_ms)).collect();
        let (_, p99) = window_percentiles(&d, w_pct);
        notes.extend(thinned(d.len(), MAX_DOTS, &name(runs, r, "dots")));
        lag.push(series(runs, k, "requests", thin(&d, MAX_DOTS), Role::Dots));
        lag.push(series(runs, k, "p99", p99, Role::P99));
    }
    Panel {
        title: noted("Schedule lag (send − scheduled time)", &notes),
        x_label: format!(
            "scheduled time since the run's start; p99 per {} window (all requests)",
            human(w_pct, Unit::S, 6)
        ),
        y_label: "lag".into(),
        x_unit: Unit::S,
        y_unit: Unit::Ms,
        body: Body::Lines(lag),
    }
}

/// One lane per session (in order of first send), a mark per turn at its
/// send time; `None` when no request belongs to a session.
pub fn sessions(r: &RunData, max_sessions: usize) -> Option<Panel> {
    let mut lanes: Vec<Vec<f64>> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut sends: Vec<&RequestResult> = measured(r).filter(|x| x.session_id.is_some()).collect();
    sends.sort_by(|a, b| a.t_send_ms.total_cmp(&b.t_send_ms));
    for x in sends {
        let Some(id) = x.session_id.as_deref() else {
            continue;
        };
        let n = index.len();
        let lane = *index.entry(id).or_insert(n);
        if lane == lanes.len() {
            lanes.push(Vec::new());
        }
        lanes[lane].push(x.t_send_ms / 1000.0);
    }
    if lanes.is_empty() {
        return None;
    }
    let total = lanes.len();
    lanes.truncate(max_sessions);
    Some(Panel {
        title: format!(
            "Sessions of {} (first {} of {}; a mark per turn sent)",
            r.label,
            lanes.len(),
            total
        ),
        x_label: "send time since the run's start".into(),
        y_label: "session".into(),
        x_unit: Unit::S,
        y_unit: Unit::Plain,
        body: Body::Timeline(lanes),
    })
}

/// A sweep's throughput-latency curves: output tok/s against TTFT and ITL
/// p50/p99, a point per sweep value in sweep order.
pub fn sweep_panels(runs: &[&Recomputed]) -> Vec<Panel> {
    let curve = |title: &str, metric: &dyn Fn(&Recomputed) -> Option<(f64, f64)>| {
        let pts: Vec<(f64, (f64, f64))> = runs
            .iter()
            .filter_map(|r| Some((r.summary.output_token_throughput, metric(r)?)))
            .collect();
        Panel {
            title: title.into(),
            x_label: "output tokens per second".into(),
            y_label: "latency".into(),
            x_unit: Unit::Plain,
            y_unit: Unit::Ms,
            body: Body::Lines(vec![
                curve_series("p50", pts.iter().map(|&(x, (a, _))| (x, a)).collect(), 1),
                curve_series("p99", pts.iter().map(|&(x, (_, b))| (x, b)).collect(), 0),
            ]),
        }
    };
    vec![
        curve("TTFT against throughput", &|r| {
            r.summary.metrics.ttft.as_ref().map(|s| (s.p50, s.p99))
        }),
        curve("ITL against throughput", &|r| {
            r.summary.metrics.itl.as_ref().map(|s| (s.p50, s.p99))
        }),
    ]
}

fn curve_series(name: &str, points: Vec<(f64, f64)>, color: usize) -> Series {
    Series {
        name: name.into(),
        points,
        dots: false,
        style: Style {
            color: Some(color),
            dashed: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_windows() {
        // 40 windows over 100 s is 2.5 s, rounded up to 5; over 3 s, 0.075 → 0.1.
        assert_eq!(auto_window_s(100.0), 5.0);
        assert!((auto_window_s(3.0) - 0.1).abs() < 1e-12);
        assert_eq!(auto_window_s(40.0), 1.0);
    }

    #[test]
    fn percentiles_per_window_by_hand() {
        // Window 0 (0–1 s): 1, 2, 3 → p50 2, p99 2.98 (linear: 2 + 0.98);
        // window 2: 10 alone. Window 1 has nothing and is skipped.
        let (p50, p99) =
            window_percentiles(&[(0.1, 3.0), (0.5, 1.0), (0.9, 2.0), (2.5, 10.0)], 1.0);
        assert_eq!(p50, vec![(0.5, 2.0), (2.5, 10.0)]);
        assert_eq!(p99[1], (2.5, 10.0));
        assert!((p99[0].1 - 2.98).abs() < 1e-12);
    }

    #[test]
    fn thin_keeps_at_most_max() {
        let v: Vec<u32> = (0..10).collect();
        assert_eq!(thin(&v, 4), vec![0, 3, 6, 9]);
        assert_eq!(thin(&v, 20), v);
    }
}
