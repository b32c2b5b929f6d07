//! `sessions`: multi-turn conversations. Each turn's prompt is the previous
//! prompt, its answer and new user text, so a turn's hash_ids start with
//! every full block of the previous turn's (the previous last block, if
//! partial, now holds more text and gets a fresh id: an id names one block
//! size). Later turns carry `delay` (think time after the previous answer).

use super::dist::LengthDist;
use super::rng::Rng;
use super::sink::{GenRequest, Sink};
use super::{blocks, Common, Ids};
use crate::error::Result;

#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Example:\n  mc-gen sessions --sessions 200 --turns uniform:2:8 --think-time-ms lognormal:5000:0.5 > chat.jsonl"
)]
pub struct SessionArgs {
    /// Number of conversations.
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub sessions: u64,

    /// Conversations started per second (Poisson).
    #[arg(long, default_value_t = 1.0, value_name = "R", value_parser = crate::options::positive)]
    pub session_rate: f64,

    /// Turns per conversation (N or a distribution as for --isl; at least 1).
    #[arg(long, default_value = "uniform:2:6", value_name = "DIST")]
    pub turns: LengthDist,

    /// Think time before each later turn, ms.
    #[arg(long, default_value = "lognormal:3000:0.6", value_name = "DIST")]
    pub think_time_ms: LengthDist,

    /// New user tokens per turn.
    #[arg(long, default_value = "lognormal:256:0.5", value_name = "DIST")]
    pub new_tokens: LengthDist,

    /// Answer length per turn.
    #[arg(long, default_value = "128", value_name = "DIST")]
    pub osl: LengthDist,

    /// A system prompt shared by every conversation (whole blocks of it are shared).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub system_prompt_tokens: u64,
}

/// The ids of a prompt that extends one of `prev_len` tokens (named
/// `prev`) to `new_len` tokens: the previous full blocks, then fresh ids.
pub fn extend_ids(
    prev: &[u64],
    prev_len: u64,
    new_len: u64,
    b: u64,
    ids: &mut Ids,
    out: &mut Vec<u64>,
) {
    let keep = ((prev_len / b) as usize).min(prev.len());
    out.clear();
    out.extend_from_slice(&prev[..keep]);
    ids.push_fresh(blocks(new_len, b).saturating_sub(keep as u64), out);
}

pub fn run(common: &Common, a: &SessionArgs, sink: &mut Sink) -> Result<()> {
    sink.set_unordered();
    if a.sessions > crate::limits::MAX_GEN_ROWS {
        return Err(crate::error::Error::Usage(format!(
            "--sessions {} is above the limit of {}",
            a.sessions,
            crate::limits::MAX_GEN_ROWS
        )));
    }
    crate::limits::tokens("--system-prompt-tokens", a.system_prompt_tokens)
        .map_err(|e| crate::error::Error::Usage(e.to_string()))?;
    let b = common.block_size;
    let mut ids = Ids::default();
    let mut system = Vec::new();
    ids.push_fresh(a.system_prompt_tokens / b, &mut system);
    let mut arrivals = Rng::new(common.seed, 1);
    let mut rng = Rng::new(common.seed, 20);
    let (mut prev, mut cur) = (Vec::new(), Vec::new());
    let mut start = 0.0;
    let mut name = String::new();
    for s in 0..a.sessions {
        if s > 0 {
            start += arrivals.exp(1000.0 / a.session_rate);
        }
        name.clear();
        name.push_str("session-");
        name.push_str(itoa::Buffer::new().format(s));
        let turns = a.turns.sample(&mut rng, 1);
        // The previous turn's prompt length, and that plus its answer.
        let (mut prev_input, mut prev_len, mut at) = (0u64, 0u64, start as u64);
        for k in 0..turns {
            let new = a.new_tokens.sample(&mut rng, 1);
            let osl = a.osl.sample(&mut rng, 1);
            let (input, delay) = if k == 0 {
                let input = a.system_prompt_tokens + new;
                extend_ids(
                    &system,
                    a.system_prompt_tokens,
                    input,
                    b,
                    &mut ids,
                    &mut cur,
                );
                (input, None)
            } else {
                let think = a.think_time_ms.sample(&mut rng, 0);
                at += think;
                let input = prev_len + new;
                // Only the previous prompt's full blocks keep their ids.
                extend_ids(&prev, prev_input, input, b, &mut ids, &mut cur);
                (input, Some(think))
            };
            crate::limits::tokens("input_length", input).map_err(|e| {
                crate::error::Error::Usage(format!(
                    "{name} turn {}: the cumulative prompt grows past the limit ({e}); \
                     give fewer --turns or shorter --new-tokens / --osl",
                    k + 1
                ))
            })?;
            sink.emit(&GenRequest {
                timestamp: if k == 0 { Some(at) } else { None },
                at_ms: at,
                session_id: Some(&name),
                delay,
                input_length: input,
                output_length: osl,
                hash_ids: &cur,
                graph: None,
            })?;
            // The next turn's prompt holds this prompt and its answer.
            prev_input = input;
            prev_len = input + osl;
            std::mem::swap(&mut prev, &mut cur);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extension_keeps_full_blocks_and_renames_a_partial_one() {
        let mut ids = Ids::default();
        let mut first = Vec::new();
        ids.push_fresh(3, &mut first); // 0,1,2 for 1100 tokens at 512: 2 full + partial
        let mut next = Vec::new();
        extend_ids(&first, 1100, 1600, 512, &mut ids, &mut next);
        assert_eq!(next, vec![0, 1, 3, 4]);
    }
}
