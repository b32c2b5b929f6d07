//! The summary's `fidelity` section as data: did the server see the run the
//! trace describes (its prefix-cache hit rate against the trace's, tokens
//! asked for and realised, arrival rates), and its table. mc-replay's
//! `observe::fidelity` fills it; mc-report prints it back.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::prom::Engine;

/// The summary's `fidelity` object (real servers only).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Fidelity {
    /// `ok`, `off` (`--no-server-metrics`) or `unavailable`.
    pub server_metrics: MetricsStatus,
    pub metrics_url: Option<String>,
    /// Why the server's figures are missing (the first failure).
    pub metrics_note: Option<String>,
    /// Whose metric names the server used.
    pub server_engine: Option<Engine>,
    /// Scrapes that answered (before, during and after the run).
    pub scrapes: u64,
    pub hit_rate: HitRate,
    pub prompt_tokens: TokenCheck,
    pub output_tokens: TokenCheck,
    pub arrival_rate: Rates,
    pub lag_p99_ms: Option<f64>,
    /// The server's gauges over the run's scrapes.
    pub server: Option<ServerLoad>,
    /// Percentage points of hit rate beyond which a run is flagged.
    pub threshold_pp: f64,
    pub flagged: bool,
    pub cause: Option<Cause>,
    /// One sentence: the comparison's outcome, and the cause when flagged.
    pub verdict: String,
    /// The run's share of the server's request-phase histograms (the
    /// scrape after less the scrape before, `prom::SERVICE_HISTOGRAMS`):
    /// how long the server says requests queued, prefilled and decoded.
    /// mc-fit fits service time to them. Absent when the server has none.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub server_histograms: std::collections::BTreeMap<String, crate::prom::Histogram>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MetricsStatus {
    Ok,
    Off,
    Unavailable,
}

/// Where a setting came from.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The command line (`--server-block-size`, `--kv-tokens`).
    Option,
    /// The server's `vllm:cache_config_info`.
    Server,
    /// The trace's block size (given or detected).
    Trace,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HitRate {
    /// hits / queries of the server's counters' increase over the run
    /// (SGLang: its own hit-rate gauge after the run).
    pub observed: Option<f64>,
    /// The counters' increase, in tokens.
    pub server_queried_tokens: Option<f64>,
    pub server_hit_tokens: Option<f64>,
    /// The trace's, with an infinite cache.
    pub predicted: Option<f64>,
    /// The trace's, with an LRU cache of `kv_tokens`.
    pub predicted_at_kv: Option<f64>,
    /// The server's block size the prediction uses.
    pub block_size: u64,
    pub block_size_from: Source,
    pub kv_tokens: Option<u64>,
    pub kv_tokens_from: Option<Source>,
    /// Requests the prediction replays (accepted ones, in send order) and
    /// their prompt tokens.
    pub requests: u64,
    pub predicted_queried_tokens: u64,
    /// What the prediction could not model.
    pub note: Option<String>,
}

/// Tokens asked for and realised: prompt tokens over successful requests
/// whose answer reported usage; output tokens over every answer the server
/// accepted (usage, else the output events counted).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TokenCheck {
    pub requests: u64,
    pub requested: u64,
    pub realised: u64,
    /// (realised − requested) / requested, in %.
    pub diff_pct: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Rates {
    /// The trace's (or `--rate`'s); null in a closed loop.
    pub intended: Option<f64>,
    pub achieved: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerLoad {
    pub running_max: Option<f64>,
    pub waiting_max: Option<f64>,
    /// 0..1.
    pub kv_usage_max: Option<f64>,
    /// Preemptions during the run (the counter's increase).
    pub preemptions: Option<f64>,
}

/// Why a hit rate is off.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The server found (next to) nothing, or says caching is off.
    PrefixCachingOff,
    /// Its prompts are not the lengths asked for: another tokenizer.
    TokenizerDrift,
    /// Fewer hits than predicted, for no reason above: the server's blocks
    /// are not the size assumed, or its KV cache evicted what the model kept.
    BlockSizeOrEviction,
    /// More hits than predicted: the cache already held these prompts.
    WarmCache,
}

impl Cause {
    pub fn explain(self) -> &'static str {
        match self {
            Cause::PrefixCachingOff => {
                "prefix caching looks off on the server (vLLM: --enable-prefix-caching)"
            }
            Cause::TokenizerDrift => {
                "the server's prompt lengths differ from the trace's (tokenizer drift: \
                 give --tokenizer the server's model)"
            }
            Cause::BlockSizeOrEviction => {
                "block size mismatch (--server-block-size) or evictions from a smaller \
                 KV cache than assumed (--kv-tokens)"
            }
            Cause::WarmCache => {
                "the server's cache already held these prompts (an earlier run with the \
                 same --seed?)"
            }
        }
    }
}

impl Fidelity {
    /// The summary table's section.
    pub fn table(&self, s: &mut String) {
        self.metrics_line(s);
        self.hit_rate_lines(s);
        self.realised_lines(s);
        if self.server_metrics == MetricsStatus::Ok {
            let tag = if self.flagged { "FLAGGED" } else { "ok" };
            let _ = writeln!(s, "  {tag}: {}", self.verdict);
        }
    }

    /// Where the server's metrics came from, or why there are none.
    fn metrics_line(&self, s: &mut String) {
        match self.server_metrics {
            MetricsStatus::Ok => {
                let _ = write!(
                    s,
                    "fidelity: server metrics from {} ({} scrapes",
                    self.metrics_url.as_deref().unwrap_or("-"),
                    self.scrapes
                );
                if let Some(e) = self.server_engine {
                    let _ = write!(
                        s,
                        ", {}",
                        serde_json::to_value(e)
                            .ok()
                            .and_then(|v| v.as_str().map(String::from))
                            .unwrap_or_default()
                    );
                }
                s.push_str(")\n");
            }
            MetricsStatus::Off => {
                s.push_str("fidelity: server metrics off (--no-server-metrics)\n")
            }
            MetricsStatus::Unavailable => {
                let _ = writeln!(
                    s,
                    "fidelity: server metrics not available ({}{})",
                    self.metrics_note.as_deref().unwrap_or("no answer"),
                    self.metrics_url
                        .as_deref()
                        .map_or(String::new(), |u| format!(" at {u}"))
                );
            }
        }
    }

    /// The server's prefix-cache hit rate against the trace's prediction.
    fn hit_rate_lines(&self, s: &mut String) {
        let pct = |x: f64| format!("{:.2}%", x * 100.0);
        let h = &self.hit_rate;
        s.push_str("  prefix-cache hit rate:");
        if let Some(o) = h.observed {
            let _ = write!(s, " server {}", pct(o));
            if let (Some(q), Some(hit)) = (h.server_queried_tokens, h.server_hit_tokens) {
                let _ = write!(s, " ({hit:.0} of {q:.0} tokens)");
            }
            s.push(';');
        }
        match h.predicted {
            Some(p) => {
                let from = match h.block_size_from {
                    Source::Option => "--server-block-size",
                    Source::Server => "the server's",
                    Source::Trace => "the trace's",
                };
                let _ = write!(
                    s,
                    " trace {} at block size {} ({from})",
                    pct(p),
                    h.block_size
                );
                if let (Some(k), Some(pk)) = (h.kv_tokens, h.predicted_at_kv) {
                    let _ = write!(s, ", {} in {k} KV tokens", pct(pk));
                }
            }
            None => s.push_str(" trace: no prediction"),
        }
        s.push('\n');
        if let Some(n) = &h.note {
            let _ = writeln!(s, "  note: {n}");
        }
    }

    /// The tokens, the arrival rate and the server's load the run realised.
    fn realised_lines(&self, s: &mut String) {
        let tokens = |name: &str, t: &TokenCheck| {
            format!(
                "{name} {} requested, {} realised ({})",
                t.requested,
                t.realised,
                t.diff_pct.map_or("-".into(), |d| format!("{d:+.2}%"))
            )
        };
        let _ = writeln!(
            s,
            "  {}; {}",
            tokens("prompt tokens", &self.prompt_tokens),
            tokens("output tokens", &self.output_tokens)
        );
        let _ = write!(s, "  arrival rate {:.2} req/s", self.arrival_rate.achieved);
        if let Some(i) = self.arrival_rate.intended {
            let _ = write!(s, " (intended {i:.2})");
        }
        if let Some(l) = self.lag_p99_ms {
            let _ = write!(s, "; schedule lag p99 {l:.3} ms");
        }
        s.push('\n');
        if let Some(l) = &self.server {
            let opt = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
            let _ = writeln!(
                s,
                "  server: running max {}, waiting max {}, KV use max {}, preemptions {}",
                opt(l.running_max),
                opt(l.waiting_max),
                l.kv_usage_max
                    .map_or("-".into(), |v| format!("{:.1}%", v * 100.0)),
                opt(l.preemptions)
            );
        }
    }
}
