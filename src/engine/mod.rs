//! The engine model: a vLLM-V1-style LLM server in discrete steps, with a
//! prefix-caching KV cache, a token-budget scheduler with chunked prefill
//! and preemption, and a step-time formula. No HTTP, no threads, no wall
//! clock: the caller feeds requests and advances the simulated clock, so
//! the same input always gives the same output.
//!
//! Used as mc-replay's target in virtual time and behind `mc-mock --engine`
//! in real time.

mod args;
mod blocks;
mod cluster;
mod kv;
mod profile;
pub mod router;
mod sched;
mod stats;

pub use args::{check_shape, EngineArgs, EngineShapeArgs, MODEL_HELP};
pub use blocks::{chain, row_blocks, text_blocks, token_blocks};
pub use cluster::Cluster;
pub use profile::{
    Calibrated, Polynomial, Profile, ProfileFile, Roofline, Serving, StepModel, StepShape, BUILTIN,
    DYNAMO_POLYNOMIAL, H100_LLAMA3_8B, LLAMA31_8B_MAX_MODEL_LEN,
};
pub use sched::{context_length_message, Engine, EngineLoad, EngineRequest, Finished};
pub use stats::EngineStats;

use serde::Serialize;

/// What the engine's prefix cache keeps of finished prompts.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum PrefixCache {
    /// Every block it has room for, least recently used evicted first
    /// (vLLM's automatic prefix caching).
    #[default]
    Blocks,
    /// Only the last request's prompt (llama.cpp's one slot: a prompt
    /// reuses what it shares with the one before it, nothing older).
    LastPrompt,
}

/// Everything that shapes the engine.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineParams {
    pub profile: Profile,
    /// KV cache capacity in tokens (whole blocks of `block_size` are used).
    pub kv_tokens: u64,
    /// Tokens per KV block.
    pub block_size: u64,
    /// Token budget of one step.
    pub max_batched_tokens: u64,
    /// Requests running at once.
    pub max_seqs: u64,
    /// The context limit (vLLM's `max_model_len`); `None`: no limit.
    pub max_model_len: Option<u64>,
    /// What the prefix cache keeps.
    pub prefix_cache: PrefixCache,
}

/// What vLLM gives Llama-3.1-8B in KV on one 80 GB H100.
pub const DEFAULT_KV_TOKENS: u64 = 467_000;
pub const DEFAULT_BLOCK_SIZE: u64 = 16;
pub const DEFAULT_MAX_BATCHED_TOKENS: u64 = 2048;
pub const DEFAULT_MAX_SEQS: u64 = 256;

impl Default for EngineParams {
    fn default() -> Self {
        EngineParams {
            profile: Profile::builtin("h100-llama3-8b")
                .unwrap_or_else(|| unreachable!("the default profile is built in")),
            kv_tokens: DEFAULT_KV_TOKENS,
            block_size: DEFAULT_BLOCK_SIZE,
            max_batched_tokens: DEFAULT_MAX_BATCHED_TOKENS,
            max_seqs: DEFAULT_MAX_SEQS,
            max_model_len: Some(profile::LLAMA31_8B_MAX_MODEL_LEN),
            prefix_cache: PrefixCache::Blocks,
        }
    }
}

/// The parameters as the run summary shows them.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamsOut {
    pub profile: String,
    pub model: String,
    /// The step-time coefficients by name (ms).
    pub coefficients: std::collections::BTreeMap<String, f64>,
    pub kv_tokens: u64,
    pub block_size: u64,
    pub max_batched_tokens: u64,
    pub max_seqs: u64,
    /// Absent in summaries written before the engine had a context limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u64>,
    /// Absent for the default (`blocks`) and in older summaries.
    #[serde(default, skip_serializing_if = "is_blocks")]
    pub prefix_cache: PrefixCache,
}

fn is_blocks(c: &PrefixCache) -> bool {
    *c == PrefixCache::Blocks
}

impl EngineParams {
    pub fn describe(&self) -> ParamsOut {
        let mut c = std::collections::BTreeMap::new();
        let model = match self.profile.model {
            StepModel::Roofline(r) | StepModel::Serving(Serving { base: r, .. }) => {
                for (k, v) in [
                    ("t_fix_ms", r.t_fix_ms),
                    ("c_seq_ms", r.c_seq_ms),
                    ("t_w_ms", r.t_w_ms),
                    ("c_lin_ms", r.c_lin_ms),
                    ("k_ms", r.k_ms),
                    ("c_kv_ms", r.c_kv_ms),
                ] {
                    c.insert(k.to_string(), v);
                }
                if let StepModel::Serving(v) = self.profile.model {
                    c.insert("c_new_ms".into(), v.c_new_ms);
                    c.insert("t_req_ms".into(), v.t_req_ms);
                    "serving"
                } else {
                    "roofline"
                }
            }
            StepModel::Polynomial(p) => {
                for (name, co) in [("prefill", p.prefill_ms), ("decode", p.decode_ms)] {
                    for (i, v) in co.iter().enumerate() {
                        c.insert(format!("{name}_ms_{}", ["a", "b", "c"][i]), *v);
                    }
                }
                c.insert("decode_min_ms".into(), p.decode_min_ms);
                "dynamo-polynomial"
            }
        };
        ParamsOut {
            profile: self.profile.name.clone(),
            model: model.to_string(),
            coefficients: c,
            kv_tokens: self.kv_tokens,
            block_size: self.block_size,
            max_batched_tokens: self.max_batched_tokens,
            max_seqs: self.max_seqs,
            max_model_len: self.max_model_len,
            prefix_cache: self.prefix_cache,
        }
    }
}

#[cfg(test)]
mod tests;
