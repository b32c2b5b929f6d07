//! A run's summary recomputed from its result lines: the same [`Tally`]
//! and [`summarize`] mc-replay uses, so the numbers are mc-replay's own.

use crate::results::summary::{summarize, Ending, RunInfo, Summary, TraceRate};
use crate::results::{Slo, Tally};

use super::input::Run;

/// A recomputed summary and whether the run's description was found.
pub struct Recomputed {
    pub summary: Summary,
    /// False when no `--summary` JSON was found: `summary.run` is a
    /// placeholder and what only the run knows (rows not sent, workers,
    /// the trace's own rate under `--rate`) is unknown.
    pub described: bool,
    /// Prompt tokens served from the server's prefix cache, over the prompt
    /// tokens of the successful requests that reported it.
    pub hit_rate: Option<f64>,
    /// Successful measured requests whose lines carry no ITL gaps (files
    /// of mc-replay before 0.1's `itl_gaps_ms`).
    pub missing_gaps: u64,
}

/// How mc-replay knew the trace's own rate, from the run's description:
/// `--rate` is the rate, a closed loop has none, a timed trace's comes from
/// its first turns' scheduled times (in the result lines).
fn trace_rate(run: &RunInfo) -> TraceRate {
    match (run.arrival.as_str(), run.rate) {
        ("closed", _) => TraceRate::None,
        (_, Some(r)) => TraceRate::Fixed(r),
        _ => TraceRate::Timed,
    }
}

/// Summarises `run`'s result lines. `slo` overrides the run's own SLO.
pub fn recompute(run: &Run, slo: Option<Slo>) -> Recomputed {
    let slo = slo.or(run.info.as_ref().and_then(|s| s.slo));
    let mut tally = Tally::default();
    let (mut prompt, mut cached, mut reported) = (0u64, 0u64, false);
    let mut missing_gaps = 0;
    for r in &run.results {
        tally.add(r, slo.as_ref());
        if r.warmup || !r.is_ok() {
            continue;
        }
        if let (Some(p), Some(c)) = (r.prompt_tokens, r.cached_tokens) {
            prompt += p;
            cached += c;
            reported = true;
        }
        if r.itl_gaps_ms.is_empty() && r.itl_ms.is_some() {
            missing_gaps += 1;
        }
    }
    let hit_rate = (reported && prompt > 0).then(|| cached as f64 / prompt as f64);
    let Some(side) = &run.info else {
        let target = run.results.first().map_or("", |r| r.target.as_str());
        let summary = summarize(
            &tally,
            &Ending::default(),
            TraceRate::Timed,
            slo,
            undescribed(target),
        );
        return Recomputed {
            summary,
            described: false,
            hit_rate,
            missing_gaps,
        };
    };
    let end = Ending {
        not_sent: side.requests.not_sent,
        skipped_dep_failed: side.requests.skipped_dep_failed,
        interrupted: side.requests.interrupted,
        stopped_early: side.stopped_early.clone(),
        workers: side.workers,
    };
    let c = summarize(&tally, &end, trace_rate(&side.run), slo, side.run.clone());
    // Everything the result lines decide is recomputed; the rest (the run,
    // its workers, the engine's statistics, and any section a later
    // version adds) is the run's own.
    let summary = Summary {
        requests: c.requests,
        errors: c.errors,
        duration_s: c.duration_s,
        request_throughput: c.request_throughput,
        output_token_throughput: c.output_token_throughput,
        input_token_throughput: c.input_token_throughput,
        tokens: c.tokens,
        send_rate: c.send_rate,
        trace_rate: c.trace_rate,
        metrics: c.metrics,
        slo: c.slo,
        goodput: c.goodput,
        degraded: c.degraded,
        tasks: c.tasks,
        ..side.clone()
    };
    Recomputed {
        summary,
        described: true,
        hit_rate,
        missing_gaps,
    }
}

/// The placeholder description of a run without one (never printed as if
/// it were real: the JSON shows `"run": null`).
fn undescribed(target: &str) -> RunInfo {
    RunInfo {
        tool: "mc-replay".into(),
        version: String::new(),
        target: target.into(),
        url: None,
        endpoint: String::new(),
        model: None,
        input: String::new(),
        rows: 0,
        speedup: 1.0,
        arrival: String::new(),
        rate: None,
        concurrency: None,
        turns: String::new(),
        seed: 0,
        block_size: 0,
        start_unix_ms: 0.0,
        start_time: String::new(),
        host: None,
        shard: None,
        max_delay: None,
        options: None,
    }
}

impl Recomputed {
    /// The summary as JSON: mc-replay's `--summary` document, with
    /// `"run": null` when the run is undescribed.
    pub fn json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(&self.summary).unwrap_or_default();
        if !self.described {
            v["run"] = serde_json::Value::Null;
        }
        v
    }

    /// mc-replay's table, headed by the run's description.
    /// What the recomputation could not do, one sentence each: the table
    /// opens with them (`note: `), and so does the HTML page.
    pub fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.missing_gaps > 0 {
            out.push(format!(
                "{} results carry no itl_gaps_ms (an older mc-replay): itl leaves them out",
                self.missing_gaps
            ));
        }
        out
    }

    pub fn table(&self, label: &str) -> String {
        let mut s = format!("run {label}: {}\n", describe(self));
        for n in self.notes() {
            s.push_str(&format!("note: {n}\n"));
        }
        s.push_str(&self.summary.table_as("mc-report"));
        if let Some(h) = self.hit_rate {
            // Whose counts they are: the engine model's in a run without a
            // server (the run's target, when it is known).
            let whose = if self.described && self.summary.run.target == "engine" {
                "the engine model"
            } else {
                "the server"
            };
            s.push_str(&format!(
                "prefix-cache hit rate {:.2}% (cached_tokens / prompt_tokens, as {whose} reported)\n",
                h * 100.0
            ));
        }
        s
    }
}

/// One line saying what was run, or that nobody said.
pub fn describe(r: &Recomputed) -> String {
    if !r.described {
        return "undescribed (no summary JSON beside the results; pass --run-info SUMMARY.json)"
            .into();
    }
    let run = &r.summary.run;
    let mut parts = vec![format!("{} {}", run.tool, run.version)];
    match &run.url {
        // The server by host and port only: the report holds no URLs.
        Some(u) => parts.push(format!("server {}", server(u))),
        None => parts.push(format!("target {}", run.target)),
    }
    if let Some(m) = &run.model {
        parts.push(format!("model {m}"));
    }
    parts.push(format!("input {} ({} rows)", run.input, run.rows));
    if let Some(sh) = &run.shard {
        let plan = sh.plan_digest.get(..12).unwrap_or_default();
        parts.push(match sh.index {
            Some(i) => format!("shard {i}/{} of plan {plan}", sh.count),
            None => format!("{} shards merged, plan {plan}", sh.count),
        });
    }
    parts.push(format!("arrival {}", run.arrival));
    if let Some(r) = run.rate {
        parts.push(format!("rate {r}"));
    }
    if let Some(c) = run.concurrency {
        parts.push(format!("concurrency {c}"));
    }
    if run.speedup != 1.0 {
        parts.push(format!("speedup {}", run.speedup));
    }
    parts.push(format!("seed {}", run.seed));
    parts.push(format!("started {}", run.start_time));
    if let Some(h) = &run.host {
        parts.push(format!("on {h}"));
    }
    parts.join(", ")
}

/// `http://127.0.0.1:8000/v1` → `127.0.0.1:8000/v1 (http)`.
pub fn server(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => format!("{rest} ({scheme})"),
        None => url.to_string(),
    }
}
