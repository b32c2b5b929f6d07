//! The distributions a summary is made of: [`Tally`] takes result lines
//! (nothing else), in any order, and [`Dist`] keeps one metric's values.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::line::{ms, round_us, us, ErrorKind, RequestResult, CUT_AT_DONE};

/// Statistics of one metric, in ms.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Stats {
    pub count: u64,
    pub mean: f64,
    pub std: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub max: f64,
}

/// A distribution of µs values: exact count, mean, std, min and max;
/// percentiles from an HDR histogram (3 significant digits). Every part is
/// independent of the order values arrive in (integer sums, not a running
/// mean), so results pooled from several files in any order give the same
/// summary.
pub struct Dist {
    hist: Histogram<u64>,
    n: u64,
    sum: u128,
    sum_sq: u128,
    min: u64,
    max: u64,
}

impl Default for Dist {
    fn default() -> Self {
        Dist {
            // Auto-resizing: any duration fits, from 1 µs up.
            hist: Histogram::new(3).unwrap_or_else(|_| unreachable!("3 digits is valid")),
            n: 0,
            sum: 0,
            sum_sq: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

impl Dist {
    pub fn add(&mut self, us: u64) {
        // Auto-resize makes recording infallible in practice; a failure
        // would only lose the percentile, never the exact moments.
        let _ = self.hist.record(us);
        self.n += 1;
        self.sum += u128::from(us);
        self.sum_sq += u128::from(us) * u128::from(us);
        self.min = self.min.min(us);
        self.max = self.max.max(us);
    }

    pub fn stats(&self) -> Option<Stats> {
        if self.n == 0 {
            return None;
        }
        let q = |q: f64| {
            ms(self.hist.median_equivalent(self.hist.value_at_quantile(q)))
                .clamp(ms(self.min), ms(self.max))
        };
        let n = self.n as f64;
        let mean = self.sum as f64 / n;
        // E[x²] − mean²: both sums are exact, so the only rounding is in
        // the final division (never negative but for that rounding).
        let var = (self.sum_sq as f64 / n - mean * mean).max(0.0);
        Some(Stats {
            count: self.n,
            mean: round_us(mean / 1000.0),
            std: round_us(var.sqrt() / 1000.0),
            min: ms(self.min),
            p50: q(0.5),
            p90: q(0.9),
            p95: q(0.95),
            p99: q(0.99),
            p99_9: q(0.999),
            max: ms(self.max),
        })
    }
}

/// `--slo ttft=MS,tpot=MS,e2e=MS`: a request meets it when every given
/// bound holds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
}

impl Slo {
    pub fn parse(s: &str) -> Result<Slo, String> {
        let mut slo = Slo::default();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}`: expected NAME=MS"))?;
            let v: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v > 0.0)
                .ok_or_else(|| format!("`{part}`: expected a positive number of ms"))?;
            match k.trim() {
                "ttft" => slo.ttft_ms = Some(v),
                "tpot" => slo.tpot_ms = Some(v),
                "e2e" => slo.e2e_ms = Some(v),
                other => return Err(format!("unknown SLO `{other}` (ttft, tpot or e2e)")),
            }
        }
        if slo == Slo::default() {
            return Err("no bound given".into());
        }
        Ok(slo)
    }

    pub fn met(&self, r: &RequestResult) -> bool {
        let within = |bound: Option<f64>, v: Option<f64>| match (bound, v) {
            (None, _) => true,
            (Some(b), Some(v)) => v <= b,
            (Some(_), None) => false,
        };
        // A one-token answer has no TPOT, so a TPOT bound cannot fail it.
        let tpot_ok = r.tpot_ms.is_none() || within(self.tpot_ms, r.tpot_ms);
        r.is_ok() && within(self.ttft_ms, r.ttft_ms) && tpot_ok && within(self.e2e_ms, r.e2e_ms)
    }
}

/// Everything the summary is computed from, fed one result at a time.
#[derive(Default)]
pub struct Tally {
    pub sent: u64,
    pub ok: u64,
    pub failed: u64,
    pub warmup: u64,
    pub errors: BTreeMap<ErrorKind, u64>,
    pub first_send_us: Option<u64>,
    /// Sends of rows that start something (turn 0).
    pub start_sends: SendSpan,
    /// The scheduled times of those rows.
    pub start_scheds: SendSpan,
    pub last_end_us: u64,
    pub input_tokens: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Successful requests whose output count is estimated from events.
    pub estimated_tokens: u64,
    /// Successful answers shorter than the exact length asked for.
    pub short: u64,
    /// `incomplete` streams that reached `[DONE]` without a finish reason.
    pub cut_at_done: u64,
    /// Sends of measured requests again from their first byte.
    pub resends: u64,
    /// Output tokens asked for and received, over every measured request
    /// (failed ones too: a cut stream received what it received).
    pub output_requested: u64,
    pub output_received: u64,
    pub goodput: u64,
    pub ttft: Dist,
    pub tpot: Dist,
    pub itl: Dist,
    pub e2e: Dist,
    pub sched_latency: Dist,
    pub lag: Dist,
    /// The agent-graph calls, for the task section.
    pub tasks: TaskTally,
}

/// What a task's measures need of one call's result line.
#[derive(Debug, Clone)]
pub(super) struct CallLine {
    /// `None`: a call without `session_id` (such calls are one task).
    pub(super) session: Option<String>,
    pub(super) id: Option<String>,
    pub(super) wait_for: Vec<String>,
    pub(super) sched_us: u64,
    pub(super) send_us: u64,
    pub(super) end_us: u64,
    pub(super) think_us: u64,
    pub(super) tool_us: u64,
    pub(super) ok: bool,
}

/// The graph calls of a run, fed one result line at a time (the task
/// section: [`super::tasks`]).
#[derive(Debug, Clone, Default)]
pub struct TaskTally {
    pub(super) calls: Vec<CallLine>,
}

impl TaskTally {
    /// A measured result line; lines of rows that are not graph calls are
    /// not part of a task. Calls without a session are one task among
    /// themselves (the graph module's rule).
    pub fn add(&mut self, r: &RequestResult) {
        if r.call_id.is_none() && r.wait_for.is_empty() {
            return;
        }
        self.calls.push(CallLine {
            session: r.session_id.clone(),
            id: r.call_id.clone(),
            wait_for: r.wait_for.clone(),
            sched_us: us(r.t_sched_ms),
            send_us: us(r.t_send_ms),
            end_us: us(r.t_end_ms),
            think_us: r.think_ms.map_or(0, us),
            tool_us: r.tool_ms.map_or(0, us),
            ok: r.is_ok(),
        });
    }
}

/// How many sends, and the first and last send time (µs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendSpan {
    pub count: u64,
    pub first_us: u64,
    pub last_us: u64,
}

impl SendSpan {
    /// Arrivals per second over the span: (count − 1) / span.
    pub fn rate(&self) -> Option<f64> {
        let span_s = ms(self.last_us.saturating_sub(self.first_us)) / 1000.0;
        (self.count > 1 && span_s > 0.0).then(|| (self.count - 1) as f64 / span_s)
    }

    fn add(&mut self, us: u64) {
        self.first_us = if self.count == 0 {
            us
        } else {
            self.first_us.min(us)
        };
        self.last_us = self.last_us.max(us);
        self.count += 1;
    }
}

impl Tally {
    /// Adds one request from its result line alone (ms values converted
    /// back to the µs they were written from), so mc-replay's summary and
    /// one recomputed from result files (`mc-report`) are the same
    /// function of the same numbers.
    pub fn add(&mut self, r: &RequestResult, slo: Option<&Slo>) {
        if r.warmup {
            self.warmup += 1;
            return;
        }
        self.sent += 1;
        let send = us(r.t_send_ms);
        self.first_send_us = Some(self.first_send_us.map_or(send, |f| f.min(send)));
        if r.turn == 0 {
            self.start_sends.add(send);
            self.start_scheds.add(us(r.t_sched_ms));
        }
        self.last_end_us = self.last_end_us.max(us(r.t_end_ms));
        self.lag.add(us(r.lag_ms));
        self.tasks.add(r);
        self.output_requested += r.output_tokens.unwrap_or(0);
        self.output_received += r.completion_tokens.unwrap_or(0);
        self.resends += r.resends;
        if let Some(e) = &r.error {
            self.failed += 1;
            *self.errors.entry(e.kind).or_default() += 1;
            if e.kind == ErrorKind::Incomplete && e.message.starts_with(CUT_AT_DONE) {
                self.cut_at_done += 1;
            }
            return;
        }
        self.ok += 1;
        if r.short {
            self.short += 1;
        }
        self.input_tokens += r.input_tokens.unwrap_or(0);
        self.prompt_tokens += r.prompt_tokens.unwrap_or(0);
        self.completion_tokens += r.completion_tokens.unwrap_or(0);
        if r.tokens_estimated {
            self.estimated_tokens += 1;
        }
        for (dist, v) in [
            (&mut self.ttft, r.ttft_ms),
            (&mut self.tpot, r.tpot_ms),
            (&mut self.e2e, r.e2e_ms),
            (&mut self.sched_latency, r.sched_latency_ms),
        ] {
            if let Some(v) = v {
                dist.add(us(v));
            }
        }
        for &g in &r.itl_gaps_ms {
            self.itl.add(us(g));
        }
        if slo.is_some_and(|s| s.met(r)) {
            self.goodput += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::line::*;
    use super::*;

    #[test]
    fn dist_moments_are_exact_and_percentiles_close() {
        let mut d = Dist::default();
        for v in 1..=1000u64 {
            d.add(v * 1000); // 1..1000 ms
        }
        let s = d.stats().unwrap();
        assert_eq!(s.count, 1000);
        assert_eq!(s.mean, 500.5);
        // Population std of 1..=1000 is sqrt((1000^2 - 1) / 12).
        assert!((s.std - ((1000.0f64 * 1000.0 - 1.0) / 12.0).sqrt()).abs() < 1e-3);
        assert_eq!((s.min, s.max), (1.0, 1000.0));
        for (got, want) in [
            (s.p50, 500.0),
            (s.p90, 900.0),
            (s.p99, 990.0),
            (s.p99_9, 999.0),
        ] {
            assert!((got - want).abs() / want < 2e-3, "{got} vs {want}");
        }
    }

    #[test]
    fn slo_parsing() {
        let s = Slo::parse("ttft=200,e2e=1500.5").unwrap();
        assert_eq!(s.ttft_ms, Some(200.0));
        assert_eq!(s.e2e_ms, Some(1500.5));
        assert_eq!(s.tpot_ms, None);
        assert!(Slo::parse("ttft").is_err());
        assert!(Slo::parse("ttf=3").is_err());
        assert!(Slo::parse("ttft=-1").is_err());
    }

    fn result(ttft: f64, tpot: Option<f64>, e2e: f64, ok: bool) -> RequestResult {
        let error = (!ok).then(|| serde_json::json!({"kind": "http_5xx", "message": "x"}));
        serde_json::from_value(serde_json::json!({
            "line": 1, "session_id": null, "turn": 0, "request_id": "r", "warmup": false,
            "x_request_id": "u", "target": "http",
            "status": if ok { "ok" } else { "error" }, "http_status": 200, "error": error,
            "t_sched_ms": 0.0, "t_send_ms": 0.0, "t_first_ms": ttft, "t_last_ms": e2e,
            "t_end_ms": e2e, "lag_ms": 0.0, "ttft_ms": ttft, "e2e_ms": e2e, "tpot_ms": tpot,
            "sched_latency_ms": e2e, "chunks": 2, "itl_ms": null, "input_tokens": 1,
            "prompt_tokens": 1, "cached_tokens": null, "output_tokens": 2,
            "completion_tokens": 2, "tokens_estimated": false, "finish_reason": "length"
        }))
        .unwrap()
    }

    #[test]
    fn resends_are_summed_and_absent_in_older_lines() {
        // `result` writes a line as older versions did: no `resends`.
        let old = result(10.0, None, 20.0, true);
        assert_eq!(old.resends, 0);
        let line = serde_json::to_value(&old).unwrap();
        assert!(line.get("resends").is_none(), "written only when not 0");
        let mut resent = result(10.0, None, 20.0, false);
        resent.resends = 1;
        let back: RequestResult =
            serde_json::from_str(&serde_json::to_string(&resent).unwrap()).unwrap();
        assert_eq!(back.resends, 1);
        let mut t = Tally::default();
        for r in [&old, &back, &back] {
            t.add(r, None);
        }
        assert_eq!(t.resends, 2);
    }

    #[test]
    fn slo_met_needs_every_bound() {
        let slo = Slo::parse("ttft=100,tpot=10,e2e=1000").unwrap();
        assert!(slo.met(&result(100.0, Some(10.0), 1000.0, true)));
        assert!(!slo.met(&result(100.1, Some(5.0), 500.0, true)));
        assert!(!slo.met(&result(50.0, Some(10.5), 500.0, true)));
        assert!(!slo.met(&result(50.0, Some(5.0), 1000.5, true)));
        // A one-token answer has no TPOT to miss.
        assert!(slo.met(&result(50.0, None, 500.0, true)));
        // A failed request never counts.
        assert!(!slo.met(&result(1.0, Some(1.0), 2.0, false)));
    }

    #[test]
    fn ms_in_a_result_line_comes_back_to_its_us() {
        // Whole µs up to 2^50 (35 years) through the JSON text a result line
        // holds: every value must come back exactly, not within a µs.
        let mut x: u64 = 1;
        let mut seen = 0;
        while x < 1 << 50 {
            for v in [x - 1, x, x + 1, x * 7 / 3] {
                let text = serde_json::to_string(&ms(v)).unwrap();
                let back: f64 = serde_json::from_str(&text).unwrap();
                assert_eq!(us(back), v, "{v} µs written as {text}");
                seen += 1;
            }
            x = x * 3 / 2 + 1;
        }
        assert!(seen > 300);
        assert_eq!(
            (us(-1.0), us(f64::NAN), us(0.0004), us(0.0005)),
            (0, 0, 0, 1)
        );
    }

    #[test]
    fn dist_is_the_same_in_any_order() {
        let vals: Vec<u64> = (0..500u64).map(|i| (i * 7919) % 1013 * 37 + 5).collect();
        let (mut a, mut b) = (Dist::default(), Dist::default());
        for &v in &vals {
            a.add(v);
        }
        for &v in vals.iter().rev() {
            b.add(v);
        }
        assert_eq!(a.stats(), b.stats());
        // Hand-computed moments of {1, 2, 3, 4} ms: mean 2.5, population
        // variance (1.5² + 0.5² + 0.5² + 1.5²) / 4 = 1.25, std √1.25.
        let mut d = Dist::default();
        for v in [4000, 1000, 3000, 2000] {
            d.add(v);
        }
        let s = d.stats().unwrap();
        assert_eq!(s.mean, 2.5);
        assert_eq!(s.std, (1.25f64.sqrt() * 1000.0).round() / 1000.0);
    }

    #[test]
    fn tally_takes_the_itl_gaps_of_the_line() {
        let mut r = result(10.0, Some(2.0), 20.0, true);
        r.itl_gaps_ms = vec![1.5, 0.001, 8.499];
        let mut t = Tally::default();
        t.add(&r, None);
        let itl = t.itl.stats().unwrap();
        // Three gaps, 0.001 to 8.499 ms, mean (1.5 + 0.001 + 8.499) / 3 = 10 / 3.
        assert_eq!((itl.count, itl.min, itl.max), (3, 0.001, 8.499));
        assert_eq!(itl.mean, 3.333);
        assert_eq!(
            (t.ok, t.completion_tokens, t.first_send_us),
            (1, 2, Some(0))
        );
        assert_eq!(t.ttft.stats().unwrap().max, 10.0);
    }

    #[test]
    fn itl_summary_of_gaps() {
        let s = itl_summary(&[1000, 3000, 2000]).unwrap();
        assert_eq!((s.min, s.p50, s.max, s.mean), (1.0, 2.0, 3.0, 2.0));
        assert!(itl_summary(&[]).is_none());
    }
}
