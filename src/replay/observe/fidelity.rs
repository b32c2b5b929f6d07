//! The fidelity check: did the server see the run the trace describes?
//!
//! Side by side: the prefix-cache hit rate the server counted between the
//! scrapes before and after the run, and the one the trace predicts
//! (mc-analyze's causal cache model, [`RowByRow`], fed the requests the
//! server accepted in the order they were sent, in the server's blocks);
//! prompt and output tokens asked for and reported; the arrival rate
//! achieved and intended; schedule lag. A hit rate further off than the
//! threshold is flagged with its likely cause ([`judge`]).

use super::scrape::Observed;
use crate::analyze::cache::RowByRow;
use crate::engine::row_blocks;
use crate::prom::ServerStats;
use crate::replay::outcome::Outcome;
use crate::replay::trace::{Content, Trace};
pub use crate::results::fidelity::{
    Cause, Fidelity, HitRate, MetricsStatus, Rates, ServerLoad, Source, TokenCheck,
};

/// `--fidelity-threshold`'s default: percentage points of hit rate.
pub const DEFAULT_THRESHOLD_PP: f64 = 5.0;
/// Realised prompt tokens this far (in %) from the requested ones point at
/// a tokenizer other than the server's. A chat template adds a few tokens
/// per request, well below this for prompts of a few hundred tokens.
pub const DRIFT_PCT: f64 = 5.0;
/// A hit rate at or below this (half a percentage point) counts as none.
pub const NO_HITS: f64 = 0.005;

/// What the fidelity check keeps of one request sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SentRequest {
    pub row: usize,
    pub t_send_us: u64,
    /// The server accepted it (HTTP 2xx): it reached the prefix cache.
    pub accepted: bool,
    pub ok: bool,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// The server the router chose (`--url A,B,…`), as in the result line.
    pub worker: Option<u32>,
}

impl SentRequest {
    pub fn of(row: usize, worker: Option<u32>, o: &Outcome) -> SentRequest {
        let usage = o.usage.unwrap_or_default();
        SentRequest {
            row,
            t_send_us: o.t_send_us,
            accepted: o.http_status.is_some_and(|s| (200..300).contains(&s)),
            ok: o.error.is_none(),
            prompt_tokens: usage.prompt_tokens,
            // Without usage, the output events are the count (an estimate,
            // as in the result line).
            completion_tokens: usage.completion_tokens.or(Some(o.chunks)),
            worker,
        }
    }
}

/// What [`judge`] weighs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Evidence {
    /// The server's hit rate (0..1).
    pub observed: Option<f64>,
    /// The trace's, at the KV size when known, else with an infinite cache.
    pub predicted: Option<f64>,
    /// The server's word on prefix caching (its configuration, or counters
    /// that did not move although requests went through).
    pub caching_on: Option<bool>,
    /// Realised prompt tokens against requested, in %.
    pub prompt_diff_pct: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub flagged: bool,
    pub cause: Option<Cause>,
    pub verdict: String,
}

/// Flags a hit rate more than `threshold_pp` percentage points from the
/// prediction and names the likely cause: a server that found next to
/// nothing (or says caching is off) has prefix caching off; otherwise
/// prompts of other lengths than asked (by more than [`DRIFT_PCT`]) are
/// tokenizer drift; otherwise fewer hits are a block size mismatch or
/// eviction, and more hits a cache that was already warm.
pub fn judge(e: &Evidence, threshold_pp: f64) -> Judgement {
    let thr = threshold_pp / 100.0;
    let pct = |x: f64| format!("{:.2}%", x * 100.0);
    let quiet = |verdict: String| Judgement {
        flagged: false,
        cause: None,
        verdict,
    };
    let Some(p) = e.predicted else {
        return quiet("no prediction of the trace's hit rate".into());
    };
    let drift = e.prompt_diff_pct.is_some_and(|d| d.abs() > DRIFT_PCT);
    let (o, cause) = match e.observed {
        None if e.caching_on == Some(false) && p > thr => (None, Cause::PrefixCachingOff),
        None => return quiet("the server reported no prefix-cache hit rate".into()),
        Some(o) if (o - p).abs() <= thr => {
            return quiet(format!(
                "the server's hit rate {} is within {threshold_pp} pp of the trace's {}",
                pct(o),
                pct(p)
            ))
        }
        Some(o) if o < p && (o <= NO_HITS || e.caching_on == Some(false)) => {
            (Some(o), Cause::PrefixCachingOff)
        }
        Some(o) if drift => (Some(o), Cause::TokenizerDrift),
        Some(o) if o < p => (Some(o), Cause::BlockSizeOrEviction),
        Some(o) => (Some(o), Cause::WarmCache),
    };
    let seen = match o {
        Some(o) => format!(
            "the server's hit rate {} is {:.1} pp from the trace's {}",
            pct(o),
            ((o - p) * 100.0).abs(),
            pct(p)
        ),
        None => format!(
            "the server counted no prefix-cache lookups; the trace predicts {}",
            pct(p)
        ),
    };
    Judgement {
        flagged: true,
        cause: Some(cause),
        verdict: format!("{seen}: likely {}", cause.explain()),
    }
}

/// The trace's side of the hit rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    pub queried_tokens: u64,
    pub hit_tokens: f64,
    pub hit_tokens_at_kv: Option<f64>,
}

impl Prediction {
    pub fn rate(&self, hits: f64) -> Option<f64> {
        (self.queried_tokens > 0).then(|| hits / self.queried_tokens as f64)
    }
}

/// Replays `(row, prompt tokens)` in order through mc-analyze's causal
/// cache model in the server's blocks of `server_block` tokens: a row's
/// blocks are its tokens cut at the server's block boundaries, named by
/// the trace ids they cover (equal ids, equal blocks; [`row_blocks`]);
/// only full blocks are cached, and as in vLLM a hit covers at most the
/// prompt minus one token (the last token is always computed). Rows of
/// literal text share nothing here. `kv_blocks`: also an LRU cache of that
/// many blocks.
pub fn predict(
    trace: &Trace,
    rows: &[(usize, u64)],
    trace_block: u64,
    server_block: u64,
    kv_blocks: Option<u64>,
) -> Prediction {
    let sb = server_block.max(1);
    let mut infinite = RowByRow::new(sb, None);
    let mut lru = kv_blocks.map(|c| RowByRow::new(sb, Some(c)));
    let mut p = Prediction {
        queried_tokens: 0,
        hit_tokens: 0.0,
        hit_tokens_at_kv: lru.as_ref().map(|_| 0.0),
    };
    for &(row, len) in rows {
        let turn = &trace.turns[row];
        let ids: &[u64] = match turn.content {
            Content::Synth => &turn.hash_ids,
            _ => &[],
        };
        let blocks = row_blocks(ids, len, trace_block, sb, turn.line);
        let full = &blocks[..(len / sb) as usize];
        let most = ((len.saturating_sub(1) / sb) * sb) as f64;
        p.queried_tokens += len;
        p.hit_tokens += infinite.row(full, len as f64).min(most);
        if let (Some(m), Some(h)) = (lru.as_mut(), p.hit_tokens_at_kv.as_mut()) {
            *h += m.row(full, len as f64).min(most);
        }
    }
    p
}

/// Everything the check needs besides the scrapes.
pub struct Inputs<'a> {
    pub trace: &'a Trace,
    /// The trace's block size (given or detected).
    pub trace_block: u64,
    /// `--turns delta`: prompts carry live answers; no prediction.
    pub delta_turns: bool,
    pub sent: &'a [SentRequest],
    /// `--server-block-size`.
    pub server_block_size: Option<u64>,
    /// `--kv-tokens`.
    pub kv_tokens: Option<u64>,
    pub threshold_pp: f64,
    pub intended_rate: Option<f64>,
    pub achieved_rate: f64,
    pub lag_p99_ms: Option<f64>,
}

/// The fidelity section; `observed` is `None` under `--no-server-metrics`.
pub fn assess(inp: &Inputs<'_>, observed: Option<&Observed>) -> Fidelity {
    let (before, after) = match observed {
        Some(Observed {
            before: Some(b),
            after: Some(a),
            ..
        }) => (Some(b), Some(a)),
        _ => (None, None),
    };
    let server = after.or(before);
    let (prompt_tokens, output_tokens) = token_checks(inp);
    let hit_rate = hit_rate(inp, before, after);
    let accepted = inp.sent.iter().filter(|r| r.accepted).count();
    // vLLM counts no lookups at all with prefix caching off.
    let silent = hit_rate.server_queried_tokens == Some(0.0) && accepted > 0;
    let caching_on = server
        .and_then(|s| s.prefix_caching)
        .or(silent.then_some(false));
    let reference = hit_rate.predicted_at_kv.or(hit_rate.predicted);
    let judgement = judge(
        &Evidence {
            observed: hit_rate.observed,
            predicted: reference,
            caching_on,
            prompt_diff_pct: prompt_tokens.diff_pct,
        },
        inp.threshold_pp,
    );
    let status = match observed {
        None => MetricsStatus::Off,
        Some(o) if o.before.is_some() && o.after.is_some() => MetricsStatus::Ok,
        Some(_) => MetricsStatus::Unavailable,
    };
    let verdict = match status {
        MetricsStatus::Ok => judgement.verdict,
        MetricsStatus::Off => "server metrics off (--no-server-metrics)".into(),
        MetricsStatus::Unavailable => "server metrics not available".into(),
    };
    Fidelity {
        server_metrics: status,
        metrics_url: observed.map(|o| o.url.clone()),
        metrics_note: observed.and_then(|o| o.note.clone()),
        server_engine: server.and_then(|s| s.engine),
        scrapes: observed.map_or(0, |o| o.scrapes),
        hit_rate,
        prompt_tokens,
        output_tokens,
        arrival_rate: Rates {
            intended: inp.intended_rate,
            achieved: inp.achieved_rate,
        },
        lag_p99_ms: inp.lag_p99_ms,
        server: observed.and_then(|o| server_load(o, before, after)),
        threshold_pp: inp.threshold_pp,
        flagged: status == MetricsStatus::Ok && judgement.flagged,
        cause: judgement.cause.filter(|_| status == MetricsStatus::Ok),
        verdict,
        server_histograms: histogram_deltas(before, after),
    }
}

/// The run's share of each service histogram both scrapes hold.
fn histogram_deltas(
    before: Option<&ServerStats>,
    after: Option<&ServerStats>,
) -> std::collections::BTreeMap<String, crate::prom::Histogram> {
    let (Some(b), Some(a)) = (before, after) else {
        return Default::default();
    };
    a.histograms
        .iter()
        .filter_map(|(name, h)| Some((name.clone(), h.since(b.histograms.get(name)?))))
        .collect()
}

/// What the run asked for against what the server realised: the prompt
/// tokens of the requests that succeeded, the output tokens of every
/// answer it accepted.
fn token_checks(inp: &Inputs<'_>) -> (TokenCheck, TokenCheck) {
    let prompt_tokens = token_check(
        inp,
        |r| r.ok,
        |r| {
            let t = &inp.trace.turns[r.row];
            Some((t.intended_input(inp.trace_block)?, r.prompt_tokens?))
        },
    );
    // Every answer the server accepted, cut ones too: what was asked for
    // against what arrived.
    let output_tokens = token_check(
        inp,
        |r| r.accepted,
        |r| Some((inp.trace.turns[r.row].output_length?, r.completion_tokens?)),
    );
    (prompt_tokens, output_tokens)
}

/// The trace's predicted hit rate (at the block size and KV size the
/// options, else the server, else the trace give) and the server's own
/// between its scrapes before and after the run.
fn hit_rate(
    inp: &Inputs<'_>,
    before: Option<&ServerStats>,
    after: Option<&ServerStats>,
) -> HitRate {
    let server = after.or(before);
    let (block_size, block_size_from) =
        match (inp.server_block_size, server.and_then(|s| s.block_size)) {
            (Some(b), _) => (b, Source::Option),
            (None, Some(b)) => (b, Source::Server),
            (None, None) => (inp.trace_block, Source::Trace),
        };
    let (kv_tokens, kv_tokens_from) = match (inp.kv_tokens, server.and_then(ServerStats::kv_tokens))
    {
        (Some(k), _) => (Some(k), Some(Source::Option)),
        (None, Some(k)) => (Some(k), Some(Source::Server)),
        (None, None) => (None, None),
    };
    let mut hit_rate = hit_rate_of(inp, block_size, kv_tokens);
    hit_rate.block_size_from = block_size_from;
    hit_rate.kv_tokens_from = kv_tokens_from;
    if let (Some(b), Some(a)) = (before, after) {
        hit_rate.observed = ServerStats::hit_rate_between(b, a);
        if let (Some(q0), Some(q1)) = (b.prefix_queries, a.prefix_queries) {
            hit_rate.server_queried_tokens = Some(q1 - q0);
        }
        if let (Some(h0), Some(h1)) = (b.prefix_hits, a.prefix_hits) {
            hit_rate.server_hit_tokens = Some(h1 - h0);
        }
    }
    hit_rate
}

/// Requested and realised tokens over the `counted` requests: `pick` gives
/// the pair, or `None` when either is unknown.
fn token_check(
    inp: &Inputs<'_>,
    counted: impl Fn(&SentRequest) -> bool,
    pick: impl Fn(&SentRequest) -> Option<(u64, u64)>,
) -> TokenCheck {
    let mut c = TokenCheck {
        requests: 0,
        requested: 0,
        realised: 0,
        diff_pct: None,
    };
    for (want, got) in inp.sent.iter().filter(|r| counted(r)).filter_map(pick) {
        c.requests += 1;
        c.requested += want;
        c.realised += got;
    }
    c.diff_pct = (c.requested > 0)
        .then(|| (c.realised as f64 - c.requested as f64) / c.requested as f64 * 100.0);
    c
}

/// The trace's side: the accepted requests in send order.
fn hit_rate_of(inp: &Inputs<'_>, block_size: u64, kv_tokens: Option<u64>) -> HitRate {
    let mut sent: Vec<&SentRequest> = inp.sent.iter().filter(|r| r.accepted).collect();
    sent.sort_by_key(|r| r.t_send_us);
    let mut literal = 0u64;
    let rows: Vec<(usize, u64)> = sent
        .iter()
        .map(|r| {
            let t = &inp.trace.turns[r.row];
            let len = match t.content {
                Content::Synth => t.intended_input(inp.trace_block).unwrap_or(0),
                _ => {
                    literal += 1;
                    t.input_length.or(r.prompt_tokens).unwrap_or(0)
                }
            };
            (r.row, len)
        })
        .collect();
    let kv_blocks = kv_tokens.map(|k| k / block_size.max(1));
    let mut note = (literal > 0).then(|| {
        format!("{literal} requests of literal text or messages are counted as sharing nothing")
    });
    let p = (!inp.delta_turns)
        .then(|| predict(inp.trace, &rows, inp.trace_block, block_size, kv_blocks));
    if inp.delta_turns {
        note = Some("--turns delta: prompts carry the server's answers; no prediction".into());
    }
    HitRate {
        observed: None,
        server_queried_tokens: None,
        server_hit_tokens: None,
        predicted: p.as_ref().and_then(|p| p.rate(p.hit_tokens)),
        predicted_at_kv: p
            .as_ref()
            .and_then(|p| p.hit_tokens_at_kv.and_then(|h| p.rate(h))),
        block_size,
        block_size_from: Source::Trace,
        kv_tokens,
        kv_tokens_from: None,
        requests: rows.len() as u64,
        predicted_queried_tokens: p.as_ref().map_or(0, |p| p.queried_tokens),
        note,
    }
}

fn server_load(
    o: &Observed,
    before: Option<&ServerStats>,
    after: Option<&ServerStats>,
) -> Option<ServerLoad> {
    let after = after?;
    let all: Vec<&ServerStats> = o.during.iter().chain([after]).collect();
    let max = |f: fn(&ServerStats) -> Option<f64>| all.iter().filter_map(|s| f(s)).reduce(f64::max);
    Some(ServerLoad {
        running_max: max(|s| s.running),
        waiting_max: max(|s| s.waiting),
        kv_usage_max: max(|s| s.kv_usage),
        preemptions: match (before.and_then(|b| b.preemptions), after.preemptions) {
            (Some(b), Some(a)) => Some(a - b),
            (None, a) => a,
            _ => None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(observed: Option<f64>, predicted: f64) -> Evidence {
        Evidence {
            observed,
            predicted: Some(predicted),
            caching_on: None,
            prompt_diff_pct: Some(0.0),
        }
    }

    #[test]
    fn causes() {
        // Within 5 pp: 0.40 vs 0.43.
        let j = judge(&ev(Some(0.40), 0.43), 5.0);
        assert!(!j.flagged && j.cause.is_none(), "{j:?}");
        // Nothing found while 40% was predicted.
        let j = judge(&ev(Some(0.0), 0.40), 5.0);
        assert_eq!((j.flagged, j.cause), (true, Some(Cause::PrefixCachingOff)));
        assert!(
            j.verdict
                .contains("0.00% is 40.0 pp from the trace's 40.00%"),
            "{}",
            j.verdict
        );
        // No lookups counted, and the server says caching is off.
        let mut e = ev(None, 0.40);
        e.caching_on = Some(false);
        assert_eq!(judge(&e, 5.0).cause, Some(Cause::PrefixCachingOff));
        // ... but a trace that shares nothing is not flagged for it.
        e.predicted = Some(0.01);
        assert!(!judge(&e, 5.0).flagged);
        // Some hits, prompts 8% longer than asked: tokenizer drift.
        let mut e = ev(Some(0.20), 0.40);
        e.prompt_diff_pct = Some(8.0);
        assert_eq!(judge(&e, 5.0).cause, Some(Cause::TokenizerDrift));
        // Some hits, lengths right: block size or eviction.
        assert_eq!(
            judge(&ev(Some(0.20), 0.40), 5.0).cause,
            Some(Cause::BlockSizeOrEviction)
        );
        // More than predicted: a warm cache.
        assert_eq!(
            judge(&ev(Some(0.90), 0.40), 5.0).cause,
            Some(Cause::WarmCache)
        );
        // The threshold is the option's: 20 pp off passes at 25.
        assert!(!judge(&ev(Some(0.20), 0.40), 25.0).flagged);
        // Without a prediction or an observation, nothing is flagged.
        assert!(!judge(&ev(None, 0.40), 5.0).flagged);
        assert!(!judge(&Evidence::default(), 5.0).flagged);
    }

    fn trace(rows: &[(&[u64], u64)]) -> Trace {
        let text: String = rows
            .iter()
            .map(|(ids, len)| {
                format!(
                    "{}\n",
                    serde_json::json!({"input_length": len, "hash_ids": ids})
                )
            })
            .collect();
        let mut policy = crate::jsonl::ErrorPolicy::new(crate::jsonl::OnError::Fail);
        let mut reader = crate::jsonl::LineReader::new(text.as_bytes(), 1 << 20);
        crate::replay::trace::load(&mut reader, &mut policy).unwrap()
    }

    #[test]
    fn prediction_in_server_blocks() {
        // Trace blocks of 32 tokens; the server's are 16.
        let t = trace(&[(&[1, 2], 64), (&[1, 3], 60), (&[1, 2], 64), (&[4], 20)]);
        let rows: Vec<(usize, u64)> = (0..4)
            .map(|r| (r, t.turns[r].intended_input(32).unwrap()))
            .collect();
        let p = predict(&t, &rows, 32, 16, None);
        // Row 1: nothing cached. Row 2: id 1 = 2 server blocks = 32 tokens;
        // its 60 tokens have 3 full blocks (the third is id 3's first half).
        // Row 3: all 4 blocks of row 1 are cached, but the last token is
        // always computed: 3 blocks = 48. Row 4: 20 tokens, 1 full block, new.
        assert_eq!(p.queried_tokens, 64 + 60 + 64 + 20);
        assert_eq!(p.hit_tokens, 32.0 + 48.0);
        // At the trace's own block size: row 2 hits id 1 (32), row 3 hits
        // id 1 and would hit id 2 but for the last token: 32.
        assert_eq!(predict(&t, &rows, 32, 32, None).hit_tokens, 32.0 + 32.0);
        // An LRU of 4 blocks of 16: row 2 evicts row 1's id-2 blocks (rows
        // 1 and 2 bring 4 + 3 blocks, 2 shared: 5 > 4), so row 3 hits id 1
        // only; row 4's block is new either way.
        let p = predict(&t, &rows, 32, 16, Some(4));
        assert_eq!(p.hit_tokens_at_kv, Some(32.0 + 32.0));
    }
}
