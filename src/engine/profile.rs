//! Step time: how long one engine step takes given what it computes.
//!
//! Two models. `roofline` (the default profile `h100-llama3-8b`):
//!
//! ```text
//! ms = t_fix + c_seq·B + sqrt(t_w² + (c_lin·T)²) + k·Σ n_i(p_i + n_i/2) + c_kv·Σ L_j
//! ```
//!
//! with T the tokens scheduled, B the requests in the step, n_i a request's
//! new prefill tokens, p_i its tokens already in KV (so a cached prefix
//! still costs attention time), L_j each decoding request's context. The
//! square root blends the weight-read floor t_w into the compute line c_lin·T.
//!
//! `serving` is the roofline plus two costs of the serving process outside
//! the forward pass, measured on vLLM's CPU build (decision 0044): `c_new`
//! per request in the step that first schedules it (the API server's and
//! the scheduler's work on a new request, which shares the core with the
//! steps), and `t_req`, a latency from a request's arrival until it can be
//! scheduled (HTTP, tokenising, the hand-over to the engine process). A
//! lone 25-token prompt's first token took 10.5 ms there where a decode
//! step took 2.0 ms, which no roofline coefficient can give.
//!
//! `dynamo-polynomial` is Dynamo's mocker timing: a prefill polynomial in the
//! step's new prefill tokens X and a decode polynomial in u, the decodes'
//! context tokens over the KV capacity in tokens; a step with both costs both.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What a step computes, as the step-time models see it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepShape {
    /// Requests in the step (B).
    pub requests: u64,
    /// Tokens scheduled (T).
    pub tokens: u64,
    /// New prefill tokens (Σ n_i, Dynamo's X).
    pub prefill_tokens: u64,
    /// Σ n_i(p_i + n_i/2): query-key pairs of the prefill chunks.
    pub attention_pairs: f64,
    /// Decoding requests.
    pub decodes: u64,
    /// Σ L_j: each decode's context (its sequence length, the new token included).
    pub decode_context: u64,
    /// Requests whose first chunk is in the step (not re-admissions after
    /// a preemption): the `serving` model's `c_new` is charged per each.
    pub new_requests: u64,
    /// Σ L_j / KV capacity in tokens (Dynamo's u: the context the step's
    /// decodes read, as a fraction of the cache).
    pub kv_fraction: f64,
}

/// The roofline-style model's parameters, all in ms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Roofline {
    /// Fixed cost of a step (scheduling, launch).
    pub t_fix_ms: f64,
    /// Per request in the step.
    pub c_seq_ms: f64,
    /// Weight-read floor of a forward pass.
    pub t_w_ms: f64,
    /// Per scheduled token (dense compute).
    pub c_lin_ms: f64,
    /// Per query-key pair of prefill attention.
    pub k_ms: f64,
    /// Per context token read by a decode.
    pub c_kv_ms: f64,
}

/// The `serving` model: the roofline's step plus the serving process's
/// per-request costs, in ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Serving {
    pub base: Roofline,
    /// Per request in the step that first schedules it (CPU time the
    /// request's intake takes from the steps on a shared core).
    pub c_new_ms: f64,
    /// From a request's arrival until the scheduler can take it (latency,
    /// no step time): it adds to TTFT and E2E, not to ITL.
    pub t_req_ms: f64,
}

/// Dynamo's mocker polynomials: `[a, b, c]` means `a·x² + b·x + c`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Polynomial {
    /// In X = new prefill tokens in the step.
    pub prefill_ms: [f64; 3],
    /// In u = the decodes' context tokens / KV capacity in tokens.
    pub decode_ms: [f64; 3],
    /// Floor of the decode time.
    pub decode_min_ms: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepModel {
    Roofline(Roofline),
    Polynomial(Polynomial),
    Serving(Serving),
}

/// BF16 Llama-3.1-8B on one H100 (fitted to a measured microbenchmark and
/// published simulator calibrations).
pub const H100_LLAMA3_8B: Roofline = Roofline {
    t_fix_ms: 0.13,
    c_seq_ms: 0.0044,
    t_w_ms: 6.5,
    c_lin_ms: 0.020,
    k_ms: 8.5e-7,
    c_kv_ms: 4.4e-5,
};

/// Dynamo's mocker default timing.
pub const DYNAMO_POLYNOMIAL: Polynomial = Polynomial {
    prefill_ms: [4.209989e-7, 1.518344e-2, 16.50142],
    decode_ms: [-25.74, 54.01, 5.74],
    decode_min_ms: 1.0,
};

fn roofline_ms(r: &Roofline, s: &StepShape) -> f64 {
    r.t_fix_ms
        + r.c_seq_ms * s.requests as f64
        + r.t_w_ms.hypot(r.c_lin_ms * s.tokens as f64)
        + r.k_ms * s.attention_pairs
        + r.c_kv_ms * s.decode_context as f64
}

fn poly(c: [f64; 3], x: f64) -> f64 {
    c[0] * x * x + c[1] * x + c[2]
}

impl StepModel {
    /// How long a request waits after its arrival before a step may take
    /// it, in whole µs (only `serving` has such a latency).
    pub fn request_latency_us(&self) -> u64 {
        match self {
            StepModel::Serving(s) if s.t_req_ms.is_finite() && s.t_req_ms > 0.0 => {
                (s.t_req_ms.min(crate::limits::MAX_STEP_MS) * 1000.0).round() as u64
            }
            _ => 0,
        }
    }

    /// The step's duration in ms, held within [0, `limits::MAX_STEP_MS`]
    /// (the parameters are bounded, but a polynomial may still go negative
    /// or a bounded coefficient meet a large step).
    pub fn step_ms(&self, s: &StepShape) -> f64 {
        let ms = self.raw_step_ms(s);
        if ms.is_nan() {
            return crate::limits::MAX_STEP_MS;
        }
        ms.clamp(0.0, crate::limits::MAX_STEP_MS)
    }

    fn raw_step_ms(&self, s: &StepShape) -> f64 {
        match self {
            StepModel::Roofline(r) => roofline_ms(r, s),
            StepModel::Serving(v) => roofline_ms(&v.base, s) + v.c_new_ms * s.new_requests as f64,
            StepModel::Polynomial(p) => {
                let mut ms = 0.0;
                if s.prefill_tokens > 0 {
                    ms += poly(p.prefill_ms, s.prefill_tokens as f64);
                }
                if s.decodes > 0 {
                    // Dynamo holds u at 1: decodes sharing a cached prefix
                    // read it once each, so Σ L_j may pass the capacity.
                    let u = s.kv_fraction.min(1.0);
                    ms += poly(p.decode_ms, u).max(p.decode_min_ms);
                }
                ms
            }
        }
    }
}

/// A named step model plus, optionally, engine sizes that suit it.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: String,
    pub model: StepModel,
    pub kv_tokens: Option<u64>,
    pub block_size: Option<u64>,
    pub max_batched_tokens: Option<u64>,
    pub max_seqs: Option<u64>,
    /// The model's context limit in tokens (vLLM's `max_model_len`): a
    /// request whose prompt and output together pass it is refused with
    /// a 400, as vLLM refuses it. `None`: no limit.
    pub max_model_len: Option<u64>,
    /// What the prefix cache keeps; `None`: the flag's, else `blocks`.
    pub prefix_cache: Option<super::PrefixCache>,
    /// The load a fitted profile was calibrated at (mc-fit writes it), so
    /// a prediction beyond it can say so.
    pub calibrated: Option<Calibrated>,
}

/// The load of the runs a profile was fitted to.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibrated {
    /// The highest rate of any run (requests sent per second).
    pub max_rate_rps: f64,
    /// The most requests any run had in flight at once.
    pub max_in_flight: u64,
    /// Whether the runs pinned `max_seqs` (some run had more in flight than
    /// the limit), or it was given, or left at vLLM's default unidentified.
    pub max_seqs_identified: bool,
}

/// Llama-3.1-8B's context (`max_position_embeddings` 131072), which vLLM
/// takes as `max_model_len` when none is given. `h100-llama3-8b` models
/// Llama-3.1-8B (its coefficients and [`super::DEFAULT_KV_TOKENS`] are
/// Llama-3.1-8B's on an H100), not Llama-3-8B's 8192.
pub const LLAMA31_8B_MAX_MODEL_LEN: u64 = 131_072;

/// The built-in profile names.
pub const BUILTIN: [&str; 2] = ["h100-llama3-8b", "dynamo-polynomial"];

impl Profile {
    pub fn builtin(name: &str) -> Option<Profile> {
        // Dynamo's mocker timing names no model, so it gets no limit.
        let (model, max_model_len) = match name {
            "h100-llama3-8b" => (
                StepModel::Roofline(H100_LLAMA3_8B),
                Some(LLAMA31_8B_MAX_MODEL_LEN),
            ),
            "dynamo-polynomial" => (StepModel::Polynomial(DYNAMO_POLYNOMIAL), None),
            _ => return None,
        };
        Some(Profile {
            name: name.to_string(),
            model,
            kv_tokens: None,
            block_size: None,
            max_batched_tokens: None,
            max_seqs: None,
            max_model_len,
            prefix_cache: None,
            calibrated: None,
        })
    }

    /// A built-in name, or a JSON file (see [`ProfileFile`]).
    pub fn load(spec: &str) -> Result<Profile> {
        if let Some(p) = Profile::builtin(spec) {
            return Ok(p);
        }
        let path = Path::new(spec);
        if !path.exists() {
            return Err(Error::Usage(format!(
                "--engine-profile {spec}: neither a built-in profile ({}) nor an existing file",
                BUILTIN.join(", ")
            )));
        }
        let bytes = std::fs::read(path).map_err(|source| Error::NoInput {
            path: path.to_path_buf(),
            source,
        })?;
        let file: ProfileFile = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Input(format!("engine profile {spec}: {e}")))?;
        file.into_profile(spec)
    }
}

/// An engine profile file: one JSON object.
///
/// ```json
/// {"name": "my-h100", "model": "roofline",
///  "t_fix_ms": 0.13, "c_seq_ms": 0.0044, "t_w_ms": 6.5, "c_lin_ms": 0.02,
///  "k_ms": 8.5e-7, "c_kv_ms": 4.4e-5, "kv_tokens": 467000}
/// {"name": "dynamo", "model": "dynamo-polynomial",
///  "prefill_ms": [4.209989e-7, 0.01518344, 16.50142],
///  "decode_ms": [-25.74, 54.01, 5.74], "decode_min_ms": 1}
/// ```
///
/// `model` picks the formula and its fields are then all required;
/// `kv_tokens`, `block_size`, `max_batched_tokens`, `max_seqs` and
/// `max_model_len` (the context limit; none: no limit) are optional
/// defaults that command-line flags override.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    pub name: Option<String>,
    pub model: String,
    pub t_fix_ms: Option<f64>,
    pub c_seq_ms: Option<f64>,
    pub t_w_ms: Option<f64>,
    pub c_lin_ms: Option<f64>,
    pub k_ms: Option<f64>,
    pub c_kv_ms: Option<f64>,
    pub prefill_ms: Option<[f64; 3]>,
    pub decode_ms: Option<[f64; 3]>,
    pub decode_min_ms: Option<f64>,
    /// `serving` only: per new request, and the latency before scheduling.
    pub c_new_ms: Option<f64>,
    pub t_req_ms: Option<f64>,
    pub kv_tokens: Option<u64>,
    pub block_size: Option<u64>,
    pub max_batched_tokens: Option<u64>,
    pub max_seqs: Option<u64>,
    pub max_model_len: Option<u64>,
    /// `blocks` (the default) or `last-prompt` (llama.cpp's one slot).
    pub prefix_cache: Option<super::PrefixCache>,
    /// Written by mc-fit: the load the profile was fitted at.
    pub calibrated: Option<Calibrated>,
}

impl ProfileFile {
    fn into_profile(self, spec: &str) -> Result<Profile> {
        let need = |v: Option<f64>, field: &str| -> Result<f64> {
            match v {
                Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
                // A value out of range is a bad option value (exit 2), as
                // the flag that overrides it would be.
                Some(x) => Err(Error::Usage(format!(
                    "engine profile {spec}: field `{field}` is {x}; it must be a finite number >= 0"
                ))),
                None => Err(Error::Input(format!(
                    "engine profile {spec}: model `{}` needs field `{field}`",
                    self.model
                ))),
            }
        };
        let roofline = || -> Result<Roofline> {
            Ok(Roofline {
                t_fix_ms: need(self.t_fix_ms, "t_fix_ms")?,
                c_seq_ms: need(self.c_seq_ms, "c_seq_ms")?,
                t_w_ms: need(self.t_w_ms, "t_w_ms")?,
                c_lin_ms: need(self.c_lin_ms, "c_lin_ms")?,
                k_ms: need(self.k_ms, "k_ms")?,
                c_kv_ms: need(self.c_kv_ms, "c_kv_ms")?,
            })
        };
        let model = match self.model.as_str() {
            "roofline" => StepModel::Roofline(roofline()?),
            "serving" => StepModel::Serving(Serving {
                base: roofline()?,
                c_new_ms: need(self.c_new_ms, "c_new_ms")?,
                t_req_ms: need(self.t_req_ms, "t_req_ms")?,
            }),
            "dynamo-polynomial" => {
                let coeffs = |v: Option<[f64; 3]>, field: &str| -> Result<[f64; 3]> {
                    match v {
                        Some(c) if c.iter().all(|x| x.is_finite()) => Ok(c),
                        Some(_) => Err(Error::Usage(format!(
                            "engine profile {spec}: field `{field}` must hold 3 finite numbers"
                        ))),
                        None => Err(Error::Input(format!(
                            "engine profile {spec}: model `dynamo-polynomial` needs field `{field}` ([a, b, c] for a·x² + b·x + c)"
                        ))),
                    }
                };
                StepModel::Polynomial(Polynomial {
                    prefill_ms: coeffs(self.prefill_ms, "prefill_ms")?,
                    decode_ms: coeffs(self.decode_ms, "decode_ms")?,
                    decode_min_ms: need(self.decode_min_ms, "decode_min_ms")?,
                })
            }
            other => {
                return Err(Error::Input(format!(
                    "engine profile {spec}: field `model` is `{other}`; expected `roofline`, `serving` or `dynamo-polynomial`"
                )))
            }
        };
        Ok(Profile {
            name: self.name.unwrap_or_else(|| spec.to_string()),
            model,
            kv_tokens: self.kv_tokens,
            block_size: self.block_size,
            max_batched_tokens: self.max_batched_tokens,
            max_seqs: self.max_seqs,
            max_model_len: self.max_model_len,
            prefix_cache: self.prefix_cache,
            calibrated: self.calibrated,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamo_polynomial_by_hand() {
        let m = StepModel::Polynomial(DYNAMO_POLYNOMIAL);
        // Prefill of 1000 tokens: 4.209989e-7·1e6 + 1.518344e-2·1000 + 16.50142
        // = 0.4209989 + 15.18344 + 16.50142 = 32.1058589 ms.
        let s = StepShape {
            requests: 1,
            tokens: 1000,
            prefill_tokens: 1000,
            ..Default::default()
        };
        assert!((m.step_ms(&s) - 32.1058589).abs() < 1e-9);
        // Decode at u = 0.5: -25.74·0.25 + 54.01·0.5 + 5.74 = -6.435 + 27.005 + 5.74 = 26.31.
        let d = StepShape {
            requests: 1,
            tokens: 1,
            decodes: 1,
            kv_fraction: 0.5,
            ..Default::default()
        };
        assert!((m.step_ms(&d) - 26.31).abs() < 1e-9);
        // u past 1 (decodes sharing a prefix) is held at 1, as Dynamo does:
        // -25.74 + 54.01 + 5.74 = 34.01 (unheld, u = 2.5 would give -20.11).
        let f = StepShape {
            kv_fraction: 2.5,
            ..d
        };
        assert!((m.step_ms(&f) - 34.01).abs() < 1e-9);
        // A polynomial that dips below the floor is floored: at u = 1 with
        // decode_ms [-10, 0, 5], -10 + 5 = -5 -> 1 ms.
        let low = StepModel::Polynomial(Polynomial {
            decode_ms: [-10.0, 0.0, 5.0],
            ..DYNAMO_POLYNOMIAL
        });
        assert_eq!(low.step_ms(&f), 1.0);
        // A mixed step costs both.
        let mixed = StepShape {
            prefill_tokens: 1000,
            ..d
        };
        assert!((m.step_ms(&mixed) - (32.1058589 + 26.31)).abs() < 1e-9);
    }

    #[test]
    fn profile_files_name_the_missing_field() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.json");
        std::fs::write(&p, r#"{"model":"roofline","t_fix_ms":1}"#).unwrap();
        let err = Profile::load(p.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("needs field `c_seq_ms`"), "{err}");
        std::fs::write(&p, r#"{"model":"roofline","t_fix":1}"#).unwrap();
        let err = Profile::load(p.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("unknown field `t_fix`"), "{err}");
        std::fs::write(
            &p,
            r#"{"name":"x","model":"dynamo-polynomial","prefill_ms":[0,1,2],"decode_ms":[0,0,3],"decode_min_ms":1,"kv_tokens":64}"#,
        )
        .unwrap();
        let prof = Profile::load(p.to_str().unwrap()).unwrap();
        assert_eq!(prof.name, "x");
        assert_eq!(prof.kv_tokens, Some(64));
        let err = Profile::load("no-such-profile").unwrap_err().to_string();
        assert!(err.contains("h100-llama3-8b"), "{err}");
    }
}
