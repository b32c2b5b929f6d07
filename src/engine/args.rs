//! The engine's command-line options, shared by mc-replay and mc-mock.

use super::profile::{Profile, StepModel};
use super::{
    EngineParams, DEFAULT_BLOCK_SIZE, DEFAULT_KV_TOKENS, DEFAULT_MAX_BATCHED_TOKENS,
    DEFAULT_MAX_SEQS,
};
use crate::error::{Error, Result};
use crate::options;

/// A paragraph for `--help`: what the engine model is and what it leaves out.
pub const MODEL_HELP: &str = "\
Step-time profile: `h100-llama3-8b` (default), `dynamo-polynomial`, or a JSON file.

The engine model: a vLLM-V1-style server in discrete steps, no GPU (mc-replay runs it \
in virtual time, without sleeping; mc-mock --engine in real time). KV cache of --kv-tokens in blocks of --engine-block-size tokens \
with chained block hashes; only full blocks are reused, a hit covers at most the prompt \
minus one token, blocks of finished requests stay cached on an LRU list until their space \
is needed. Each step runs the running requests first (one decode token, or the next \
prefill chunk), then admits waiting requests in arrival order, within --max-batched-tokens \
and --max-seqs, each only when its whole sequence fits in the free blocks (vLLM's \
scheduler_reserve_full_isl); out of blocks, the most recently admitted request is preempted and later \
recomputes what was evicted. Step time (h100-llama3-8b, model `roofline`): t_fix + c_seq*B \
+ sqrt(t_w^2 + (c_lin*T)^2) + k*sum n_i(p_i + n_i/2) + c_kv*sum L_j; `dynamo-polynomial` \
is Dynamo's mocker timing. --engine-profile FILE reads a JSON object: {\"model\": \
\"roofline\", \"t_fix_ms\", \"c_seq_ms\", \"t_w_ms\", \"c_lin_ms\", \"k_ms\", \"c_kv_ms\"} or \
{\"model\": \"dynamo-polynomial\", \"prefill_ms\": [a,b,c], \"decode_ms\": [a,b,c], \
\"decode_min_ms\"}, optionally with \"name\", \"kv_tokens\", \"block_size\", \
\"max_batched_tokens\", \"max_seqs\", \"max_model_len\". A request whose prompt plus output \
passes max_model_len (h100-llama3-8b: 131072, Llama-3.1-8B's) is refused with HTTP 400 and \
vLLM's message. Left out: speculative decoding, tensor/pipeline \
parallelism, CPU offload of KV, prefill/decode disaggregation, sampling stops (every \
request generates exactly output_length tokens) and network time.";

/// The engine's shape, as a server reports it: what mc-replay's engine
/// model and mc-fit share (mc-fit searches the step time, not these).
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct EngineShapeArgs {
    /// KV cache capacity in tokens [default: the profile's (mc-fit: the
    /// runs'), else 467000].
    #[arg(long, value_name = "TOKENS")]
    pub kv_tokens: Option<u64>,

    /// Tokens per KV block [default: the profile's (mc-fit: the runs'),
    /// else 16].
    #[arg(long, value_name = "TOKENS")]
    pub engine_block_size: Option<u64>,

    /// Token budget of one engine step [default: the profile's (mc-fit: the
    /// runs'), else 2048].
    #[arg(long, value_name = "TOKENS")]
    pub max_batched_tokens: Option<u64>,

    /// Requests running at once [default: the profile's (mc-fit: the
    /// runs'), else 256].
    #[arg(long, value_name = "N")]
    pub max_seqs: Option<u64>,

    /// The model's context limit in tokens: a request whose prompt plus
    /// output passes it is refused with HTTP 400, as vLLM refuses it
    /// [default: the profile's (h100-llama3-8b: 131072, Llama-3.1-8B's);
    /// dynamo-polynomial: no limit].
    #[arg(long, value_name = "TOKENS")]
    pub max_model_len: Option<u64>,

    /// What the prefix cache keeps of finished prompts: `blocks` (every
    /// block it has room for, LRU: vLLM, SGLang) or `last-prompt` (only the
    /// last request's: llama.cpp's one slot) [default: the profile's, else
    /// blocks].
    #[arg(long, value_name = "KIND", value_enum)]
    pub engine_prefix_cache: Option<super::PrefixCache>,
}

/// The checks every engine shape passes, wherever it came from: no zero
/// sizes, room for a block, and at most the blocks the engine can hold.
pub fn check_shape(params: &EngineParams) -> Result<()> {
    if params.block_size == 0
        || params.max_batched_tokens == 0
        || params.max_seqs == 0
        || params.max_model_len == Some(0)
    {
        return Err(Error::Usage(
            "--engine-block-size, --max-batched-tokens, --max-seqs and --max-model-len must be at least 1"
                .into(),
        ));
    }
    if params.kv_tokens < params.block_size {
        return Err(Error::Usage(format!(
            "--kv-tokens {} holds no block of {} tokens; give at least --engine-block-size",
            params.kv_tokens, params.block_size
        )));
    }
    let max_blocks = crate::limits::MAX_KV_BLOCKS.min(u64::from(u32::MAX - 1));
    if params.kv_tokens / params.block_size > max_blocks {
        return Err(Error::Usage(format!(
            "--kv-tokens {}: {} blocks of {} tokens; at most {max_blocks} blocks are supported \
             (the engine holds every block in memory): lower --kv-tokens or raise --engine-block-size",
            params.kv_tokens,
            params.kv_tokens / params.block_size,
            params.block_size
        )));
    }
    Ok(())
}

/// Engine model options (`--engine-profile` and friends).
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Engine model")]
pub struct EngineArgs {
    /// Step-time profile: `h100-llama3-8b` (default), `dynamo-polynomial`,
    /// or a JSON file.
    #[arg(long, value_name = "NAME|FILE", long_help = MODEL_HELP)]
    pub engine_profile: Option<String>,

    #[command(flatten)]
    pub shape: EngineShapeArgs,

    /// roofline: fixed cost of a step, ms.
    #[arg(long, value_name = "MS", value_parser = options::non_negative)]
    pub t_fix_ms: Option<f64>,
    /// roofline: cost per request in a step, ms.
    #[arg(long, value_name = "MS", value_parser = options::non_negative)]
    pub c_seq_ms: Option<f64>,
    /// roofline: weight-read floor of a forward pass, ms.
    #[arg(long, value_name = "MS", value_parser = options::non_negative)]
    pub t_w_ms: Option<f64>,
    /// roofline: cost per scheduled token, ms.
    #[arg(long, value_name = "MS", value_parser = options::non_negative)]
    pub c_lin_ms: Option<f64>,
    /// roofline: cost per prefill query-key pair, ms.
    #[arg(long, value_name = "MS", value_parser = options::non_negative)]
    pub k_ms: Option<f64>,
    /// roofline: cost per context token of a decode, ms.
    #[arg(long, value_name = "MS", value_parser = options::non_negative)]
    pub c_kv_ms: Option<f64>,
    /// dynamo-polynomial: prefill ms = a·X² + b·X + c in new prefill tokens X.
    #[arg(long, value_name = "A,B,C", value_parser = coefficients)]
    pub prefill_ms: Option<Coefficients>,
    /// dynamo-polynomial: decode ms = a·u² + b·u + c, u = the decodes' context
    /// tokens / KV capacity in tokens (at most 1).
    #[arg(long, value_name = "A,B,C", value_parser = coefficients)]
    pub decode_ms: Option<Coefficients>,
    /// dynamo-polynomial: floor of the decode time, ms.
    #[arg(long, value_name = "MS", value_parser = options::non_negative)]
    pub decode_min_ms: Option<f64>,
}

impl EngineArgs {
    /// Every step-time parameter, after the flags are applied, must be
    /// finite and within `limits::MAX_STEP_MS` (a polynomial coefficient in
    /// size): a step of 1e15 ms or more never ends a run in any useful
    /// time, and wraps the µs clock. Exit 2 naming the flag, or the field
    /// of the profile the value came from.
    fn check_bounds(&self, profile: &Profile) -> Result<()> {
        use crate::limits::MAX_STEP_MS;
        let name = |flag: &str, set: bool| {
            if set {
                format!("--{flag}")
            } else {
                format!(
                    "field `{}` of engine profile {}",
                    flag.replace('-', "_"),
                    profile.name
                )
            }
        };
        let mut values: Vec<(f64, String)> = Vec::new();
        match &profile.model {
            StepModel::Roofline(r) | StepModel::Serving(super::Serving { base: r, .. }) => {
                for (v, flag, set) in [
                    (r.t_fix_ms, "t-fix-ms", self.t_fix_ms.is_some()),
                    (r.c_seq_ms, "c-seq-ms", self.c_seq_ms.is_some()),
                    (r.t_w_ms, "t-w-ms", self.t_w_ms.is_some()),
                    (r.c_lin_ms, "c-lin-ms", self.c_lin_ms.is_some()),
                    (r.k_ms, "k-ms", self.k_ms.is_some()),
                    (r.c_kv_ms, "c-kv-ms", self.c_kv_ms.is_some()),
                ] {
                    values.push((v, name(flag, set)));
                }
            }
            StepModel::Polynomial(p) => {
                for (c, flag, set) in [
                    (p.prefill_ms, "prefill-ms", self.prefill_ms.is_some()),
                    (p.decode_ms, "decode-ms", self.decode_ms.is_some()),
                ] {
                    for v in c {
                        values.push((v, name(flag, set)));
                    }
                }
                values.push((
                    p.decode_min_ms,
                    name("decode-min-ms", self.decode_min_ms.is_some()),
                ));
            }
        }
        for (v, what) in values {
            if !v.is_finite() || v.abs() > MAX_STEP_MS {
                return Err(Error::Usage(format!(
                    "{what}: {v:e} ms is beyond the limit of {MAX_STEP_MS:e} ms (a day) for a \
                     step-time parameter; a step that long never ends a run"
                )));
            }
        }
        Ok(())
    }
}

/// Three polynomial coefficients, highest power first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Coefficients(pub [f64; 3]);

fn coefficients(s: &str) -> std::result::Result<Coefficients, String> {
    options::three_numbers(s).map(Coefficients)
}

impl EngineArgs {
    /// The profile with every flag applied; flags beat the profile file.
    pub fn params(&self) -> Result<EngineParams> {
        let mut profile =
            Profile::load(self.engine_profile.as_deref().unwrap_or("h100-llama3-8b"))?;
        self.apply_step_flags(&mut profile)?;
        self.check_bounds(&profile)?;
        let params = EngineParams {
            kv_tokens: self
                .shape
                .kv_tokens
                .or(profile.kv_tokens)
                .unwrap_or(DEFAULT_KV_TOKENS),
            block_size: self
                .shape
                .engine_block_size
                .or(profile.block_size)
                .unwrap_or(DEFAULT_BLOCK_SIZE),
            max_batched_tokens: self
                .shape
                .max_batched_tokens
                .or(profile.max_batched_tokens)
                .unwrap_or(DEFAULT_MAX_BATCHED_TOKENS),
            max_seqs: self
                .shape
                .max_seqs
                .or(profile.max_seqs)
                .unwrap_or(DEFAULT_MAX_SEQS),
            max_model_len: self.shape.max_model_len.or(profile.max_model_len),
            prefix_cache: self
                .shape
                .engine_prefix_cache
                .or(profile.prefix_cache)
                .unwrap_or_default(),
            profile,
        };
        check_shape(&params)?;
        Ok(params)
    }

    /// The step model's flags onto the profile's step model; a flag of the
    /// other model is a usage error naming the profile.
    fn apply_step_flags(&self, profile: &mut Profile) -> Result<()> {
        let name = profile.name.clone();
        let usage = |flag: &str, model: &str| {
            Error::Usage(format!(
                "--{flag} belongs to the `{model}` step model; profile `{name}` uses the other one"
            ))
        };
        match &mut profile.model {
            StepModel::Roofline(r) | StepModel::Serving(super::Serving { base: r, .. }) => {
                for (v, slot) in [
                    (self.t_fix_ms, &mut r.t_fix_ms),
                    (self.c_seq_ms, &mut r.c_seq_ms),
                    (self.t_w_ms, &mut r.t_w_ms),
                    (self.c_lin_ms, &mut r.c_lin_ms),
                    (self.k_ms, &mut r.k_ms),
                    (self.c_kv_ms, &mut r.c_kv_ms),
                ] {
                    if let Some(v) = v {
                        *slot = v;
                    }
                }
                if self.prefill_ms.is_some() {
                    return Err(usage("prefill-ms", "dynamo-polynomial"));
                }
                if self.decode_ms.is_some() {
                    return Err(usage("decode-ms", "dynamo-polynomial"));
                }
                if self.decode_min_ms.is_some() {
                    return Err(usage("decode-min-ms", "dynamo-polynomial"));
                }
            }
            StepModel::Polynomial(p) => {
                let roofline = [
                    (self.t_fix_ms, "t-fix-ms"),
                    (self.c_seq_ms, "c-seq-ms"),
                    (self.t_w_ms, "t-w-ms"),
                    (self.c_lin_ms, "c-lin-ms"),
                    (self.k_ms, "k-ms"),
                    (self.c_kv_ms, "c-kv-ms"),
                ];
                if let Some((_, flag)) = roofline.iter().find(|(v, _)| v.is_some()) {
                    return Err(usage(flag, "roofline"));
                }
                if let Some(c) = self.prefill_ms {
                    p.prefill_ms = c.0;
                }
                if let Some(c) = self.decode_ms {
                    p.decode_ms = c.0;
                }
                if let Some(v) = self.decode_min_ms {
                    p.decode_min_ms = v;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_profile_and_must_match_its_model() {
        let a = EngineArgs {
            t_fix_ms: Some(1.0),
            shape: EngineShapeArgs {
                kv_tokens: Some(1600),
                ..Default::default()
            },
            ..Default::default()
        };
        let p = a.params().unwrap();
        assert_eq!(p.kv_tokens, 1600);
        assert!(
            matches!(p.profile.model, StepModel::Roofline(r) if r.t_fix_ms == 1.0 && r.t_w_ms == 6.5)
        );
        let bad = EngineArgs {
            engine_profile: Some("dynamo-polynomial".into()),
            k_ms: Some(1.0),
            ..Default::default()
        };
        let err = bad.params().unwrap_err().to_string();
        assert!(err.contains("--k-ms belongs to the `roofline`"), "{err}");
        assert!(coefficients("1,2").is_err());
        assert_eq!(coefficients("1, 2,3e-1"), Ok(Coefficients([1.0, 2.0, 0.3])));
        let tiny = EngineArgs {
            shape: EngineShapeArgs {
                kv_tokens: Some(8),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(tiny.params().is_err());
    }
}
