//! `calibrate`: a workload designed to calibrate the engine model, whose
//! parts each pin some of the roofline step-time coefficients
//! (`engine::profile`: `t_fix + c_seq·B + sqrt(t_w² + (c_lin·T)²) +
//! k·Σ n(p + n/2) + c_kv·Σ L`):
//!
//! 1. `prefill`: a prefill ladder, one request at a time, prompts from 16
//!    tokens to the context limit (×√2 a rung), one output token each: the
//!    time to first token of a lone prompt of n tokens is the compute line
//!    `c_lin` and, for the long rungs, the attention term `k`.
//! 2. `decode`: a decode ladder, batches of 1, 2, 4, … `--max-seqs` short
//!    prompts sent together and decoding together: the inter-token time of
//!    a batch of B is the weight-read floor `t_w` plus `c_seq` per request.
//! 3. `kv`: long contexts decoding alone (⅛, ¼, ½ and all of the context
//!    limit): the inter-token time grows with the context by `c_kv`.
//! 4. `rate`: a rate ladder of Poisson arrivals at each of `--rates`, for
//!    queueing, mixed steps and the concurrency limit.
//!
//! The parts never overlap: the whole workload is one agent graph (one
//! session, `calibrate`), each rung released `--gap-ms` after the previous
//! one ended (a batch or a rate segment ends with a one-token `fence` call
//! that waits for all of it), so the design holds whatever the server's
//! speed. Every row's `request_id` names its part (`cal:PART:…`), which is
//! how mc-fit tells what each run can pin.

use super::dist::LengthDist;
use super::rng::Rng;
use super::sink::{GenRequest, GraphFields, Sink};
use super::{blocks, Common, Ids};
use crate::error::{Error, Result};

/// The session every row of the design belongs to.
pub const SESSION: &str = "calibrate";

/// The marker a designed row's `request_id` starts with.
pub const MARKER: &str = "cal:";

/// Tokens the top rungs stay below the context limit: the chat template's
/// tokens are added to the prompt by a real server, and a prompt over the
/// limit is refused (400), not measured.
pub const TEMPLATE_MARGIN: u64 = 64;

#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Example:\n  mc-gen calibrate --max-model-len 32768 --max-seqs 256 --rates 2,4,8,16 --block-size 16 > design.jsonl\n  mc-replay --url http://gpu:8000 -i design.jsonl -o cal.jsonl\n  mc-fit --trace design.jsonl cal.jsonl -o my-server.json"
)]
pub struct CalibrateArgs {
    /// The server's context limit (vLLM's `max_model_len`): the prefill
    /// ladder climbs to it, the long contexts reach it.
    #[arg(long, value_name = "TOKENS")]
    pub max_model_len: u64,

    /// The server's concurrency limit (vLLM's `max_num_seqs`): the decode
    /// ladder's widest batch.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub max_seqs: u64,

    /// Idle time between rungs, ms (the server settles; no rung overlaps
    /// another whatever the gap).
    #[arg(long, default_value_t = 200, value_name = "MS")]
    pub gap_ms: u64,

    /// Prompt tokens of each decode-ladder request.
    #[arg(long, default_value_t = 32, value_name = "TOKENS")]
    pub decode_isl: u64,

    /// Output tokens of each decode-ladder and long-context request.
    #[arg(long, default_value_t = 64, value_name = "TOKENS")]
    pub decode_osl: u64,

    /// The rate ladder's rates, requests per second (empty: no rate ladder).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8", value_name = "R,R,…", value_parser = crate::options::positive)]
    pub rates: Vec<f64>,

    /// Requests at each rate.
    #[arg(long, default_value_t = 40, value_name = "N")]
    pub rate_requests: u64,

    /// Prompt length of the rate ladder's requests.
    #[arg(long, default_value = "lognormal:512:0.6", value_name = "DIST")]
    pub rate_isl: LengthDist,

    /// Answer length of the rate ladder's requests.
    #[arg(long, default_value = "lognormal:64:0.5", value_name = "DIST")]
    pub rate_osl: LengthDist,
}

/// The parts of the design, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    Prefill,
    Decode,
    Kv,
    Rate,
    /// The one-token call that ends a batch or a rate segment.
    Fence,
}

impl Part {
    pub const ALL: [Part; 5] = [
        Part::Prefill,
        Part::Decode,
        Part::Kv,
        Part::Rate,
        Part::Fence,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Part::Prefill => "prefill",
            Part::Decode => "decode",
            Part::Kv => "kv",
            Part::Rate => "rate",
            Part::Fence => "fence",
        }
    }

    /// The part a `request_id` names (`cal:PART:…`), if it is a designed row.
    pub fn of_request_id(id: &str) -> Option<Part> {
        let rest = id.strip_prefix(MARKER)?;
        let name = rest.split(':').next()?;
        Part::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// The prefill ladder's prompt lengths: 16·√2^k rounded, below the limit
/// less the template's margin and the one output token, then that top.
pub fn prefill_lengths(max_model_len: u64) -> Vec<u64> {
    let top = max_model_len.saturating_sub(TEMPLATE_MARGIN + 1).max(16);
    let mut out = Vec::new();
    for k in 0.. {
        let n = (16.0 * std::f64::consts::SQRT_2.powi(k)).round() as u64;
        if n >= top {
            break;
        }
        out.push(n);
    }
    out.push(top);
    out
}

/// The decode ladder's batch sizes: 1, 2, 4, … up to `max_seqs`, which is
/// the last even when not a power of two.
pub fn decode_batches(max_seqs: u64) -> Vec<u64> {
    let mut out: Vec<u64> = (0..63)
        .map(|k| 1u64 << k)
        .take_while(|&n| n < max_seqs)
        .collect();
    out.push(max_seqs.max(1));
    out
}

/// The long contexts' prompt lengths: ⅛, ¼, ½ of the limit and the limit
/// (less the template margin and the answer), each distinct and above the
/// decode ladder's prompts.
pub fn kv_lengths(max_model_len: u64, osl: u64) -> Vec<u64> {
    let top = max_model_len.saturating_sub(TEMPLATE_MARGIN + osl);
    let mut out: Vec<u64> = [8, 4, 2]
        .iter()
        .map(|d| max_model_len / d)
        .filter(|&n| n < top)
        .collect();
    out.push(top);
    out.retain(|&n| n >= 16);
    out.dedup();
    out
}

/// Writes rows, each released by the calls before it.
struct Writer<'s> {
    sink: &'s mut Sink,
    ids: Ids,
    block: u64,
    /// The calls the next rung waits for.
    after: Vec<String>,
    /// The time the design would reach with zero service time (ms).
    at_ms: u64,
    first: bool,
    hash: Vec<u64>,
}

impl Writer<'_> {
    /// One call: fresh blocks (no part shares a prefix with another, so
    /// no cache hit blurs a rung), waiting for `self.after` + `delay`.
    fn call(&mut self, id: &str, input: u64, output: u64, delay: u64) -> Result<()> {
        self.hash.clear();
        self.ids
            .push_fresh(blocks(input, self.block), &mut self.hash);
        let root = std::mem::take(&mut self.first);
        let graph = GraphFields {
            request_id: id,
            wait_for: &self.after,
            branches: &[],
            tool_wait_ms: None,
            prefix_reset: false,
        };
        self.sink.emit(&GenRequest {
            timestamp: root.then_some(0),
            at_ms: self.at_ms + delay,
            session_id: Some(SESSION),
            delay: (!root).then_some(delay),
            input_length: input,
            output_length: output,
            hash_ids: &self.hash,
            graph: Some(&graph),
        })
    }

    /// A rung of one call: the next rung waits for it.
    fn single(&mut self, id: String, input: u64, output: u64, gap: u64) -> Result<()> {
        self.call(&id, input, output, gap)?;
        self.at_ms += gap;
        self.after = vec![id];
        Ok(())
    }

    /// The fence that closes a group of calls (`ids`): one 16-token call
    /// with one output token, released when all of them ended, which the
    /// next rung waits for.
    fn fence(&mut self, name: &str, ids: Vec<String>) -> Result<()> {
        self.after = ids;
        let id = format!("{MARKER}fence:{name}");
        self.single(id, 16, 1, 0)
    }
}

pub fn run(common: &Common, a: &CalibrateArgs, sink: &mut Sink) -> Result<()> {
    check(a)?;
    sink.set_unordered();
    let mut w = Writer {
        sink,
        ids: Ids::default(),
        block: common.block_size,
        after: Vec::new(),
        at_ms: 0,
        first: true,
        hash: Vec::new(),
    };
    let gap = a.gap_ms;
    for n in prefill_lengths(a.max_model_len) {
        w.single(format!("{MARKER}prefill:{n}"), n, 1, gap)?;
    }
    for b in decode_batches(a.max_seqs) {
        let ids: Vec<String> = (0..b).map(|i| format!("{MARKER}decode:{b}:{i}")).collect();
        for id in &ids {
            w.call(id, a.decode_isl, a.decode_osl, gap)?;
        }
        w.at_ms += gap;
        w.fence(&format!("decode-{b}"), ids)?;
    }
    for n in kv_lengths(a.max_model_len, a.decode_osl) {
        w.single(format!("{MARKER}kv:{n}"), n, a.decode_osl, gap)?;
    }
    let mut arrivals = Rng::new(common.seed, 1);
    let mut lengths = Rng::new(common.seed, 20);
    let top = a.max_model_len.saturating_sub(TEMPLATE_MARGIN).max(2);
    for &rate in &a.rates {
        let mut offset = 0.0;
        let mut ids = Vec::with_capacity(a.rate_requests as usize);
        for i in 0..a.rate_requests {
            if i > 0 {
                offset += arrivals.exp(1000.0 / rate);
            }
            let id = format!("{MARKER}rate:{rate}:{i}");
            // Held within the context limit, as the rest of the design.
            let isl = a.rate_isl.sample(&mut lengths, 1).min(top - 1);
            let osl = a.rate_osl.sample(&mut lengths, 1).min(top - isl);
            let delay = gap + offset.round() as u64;
            w.call(&id, isl, osl, delay)?;
            ids.push(id);
        }
        w.at_ms += gap + offset.round() as u64;
        w.fence(&format!("rate-{rate}"), ids)?;
    }
    Ok(())
}

/// The options' own checks, before a row is written.
fn check(a: &CalibrateArgs) -> Result<()> {
    let usage = |m: String| Err(Error::Usage(m));
    if a.max_model_len < 2 * TEMPLATE_MARGIN + 16 {
        return usage(format!(
            "--max-model-len {} is too short for a design: it needs at least {} tokens (the \
             ladders stay {TEMPLATE_MARGIN} tokens below it for the chat template)",
            a.max_model_len,
            2 * TEMPLATE_MARGIN + 16
        ));
    }
    crate::limits::tokens("--max-model-len", a.max_model_len)
        .map_err(|e| Error::Usage(e.to_string()))?;
    if a.max_seqs == 0 || a.max_seqs > 65_536 {
        return usage(format!(
            "--max-seqs {} must be from 1 to 65536 (the decode ladder's widest batch)",
            a.max_seqs
        ));
    }
    if a.decode_isl == 0 || a.decode_osl < 2 {
        return usage(
            "--decode-isl must be at least 1 and --decode-osl at least 2 (an inter-token \
             time needs two tokens)"
                .into(),
        );
    }
    if a.decode_isl + a.decode_osl + TEMPLATE_MARGIN > a.max_model_len {
        return usage(format!(
            "--decode-isl {} + --decode-osl {} do not fit in --max-model-len {} (with the \
             {TEMPLATE_MARGIN}-token template margin)",
            a.decode_isl, a.decode_osl, a.max_model_len
        ));
    }
    // A segment's Poisson offsets are written as `delay`: a rate far
    // below one request a second would put them past any real run.
    if let Some(r) = a.rates.iter().find(|r| !(1e-3..=1e6).contains(*r)) {
        return usage(format!(
            "--rates {r}: each rate must be from 0.001 to 1000000 requests per second"
        ));
    }
    if a.rate_requests > crate::limits::MAX_GEN_ROWS {
        return usage(format!(
            "--rate-requests {} is above the limit of {}",
            a.rate_requests,
            crate::limits::MAX_GEN_ROWS
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefill_ladder_climbs_by_root_two_to_the_limit() {
        // By hand: 16·√2^k rounded = 16, 23, 32, 45, 64, 91, 128, 181,
        // 256, 362, 512, 724; the next (1024) is past 1024 − 65 = 959.
        assert_eq!(
            prefill_lengths(1024),
            vec![16, 23, 32, 45, 64, 91, 128, 181, 256, 362, 512, 724, 959]
        );
    }

    #[test]
    fn the_decode_ladder_ends_at_max_seqs() {
        assert_eq!(decode_batches(8), vec![1, 2, 4, 8]);
        assert_eq!(decode_batches(48), vec![1, 2, 4, 8, 16, 32, 48]);
        assert_eq!(decode_batches(1), vec![1]);
    }

    #[test]
    fn long_contexts_reach_the_limit_less_margin_and_answer() {
        // 4096/8, /4, /2, then 4096 − 64 − 64.
        assert_eq!(kv_lengths(4096, 64), vec![512, 1024, 2048, 3968]);
    }

    #[test]
    fn a_request_id_names_its_part() {
        assert_eq!(Part::of_request_id("cal:decode:8:3"), Some(Part::Decode));
        assert_eq!(Part::of_request_id("cal:prefill:16"), Some(Part::Prefill));
        assert_eq!(Part::of_request_id("cal:other:1"), None);
        assert_eq!(Part::of_request_id("decode:8"), None);
    }
}
