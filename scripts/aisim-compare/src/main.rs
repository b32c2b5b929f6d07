//! Replays a Mooncake trace through aisimulate-core 0.13.0 (Dynamo's
//! simulator) with its vLLM scheduler and its polynomial timing, and prints
//! one JSON line of the numbers scripts/engine-vs-aisim.sh compares.
//!
//! usage: aisim-compare TRACE.jsonl [--kv-tokens N] [--block-size B]
//!        [--max-batched-tokens T] [--max-seqs S] [--trace-block-size 512]

use std::path::PathBuf;

use aisimulate_core::engine::{Backend, EngineConfig, TimingModelConfig};
use aisimulate_core::replay::loadgen::{Trace, WorkloadDriver};
use aisimulate_core::replay::{
    ReplayCaptureOptions, ReplayDeterminism, ReplayEngineConfig, ReplayEngineFactory,
    ReplayRuntimeInput, ReplaySpec, ReplayTopology, Replayer,
};
use anyhow::{bail, Context, Result};

struct Opts {
    trace: PathBuf,
    kv_tokens: usize,
    block_size: usize,
    max_batched_tokens: usize,
    max_seqs: usize,
    trace_block_size: usize,
}

fn opts() -> Result<Opts> {
    let mut o = Opts {
        trace: PathBuf::new(),
        kv_tokens: 467_000,
        block_size: 16,
        max_batched_tokens: 2048,
        max_seqs: 256,
        trace_block_size: 512,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> Result<usize> {
            args.next()
                .with_context(|| format!("{name} needs a value"))?
                .parse()
                .with_context(|| format!("{name} wants a whole number"))
        };
        match a.as_str() {
            "--kv-tokens" => o.kv_tokens = num("--kv-tokens")?,
            "--block-size" => o.block_size = num("--block-size")?,
            "--max-batched-tokens" => o.max_batched_tokens = num("--max-batched-tokens")?,
            "--max-seqs" => o.max_seqs = num("--max-seqs")?,
            "--trace-block-size" => o.trace_block_size = num("--trace-block-size")?,
            s if s.starts_with("--") => bail!("unknown option {s}"),
            s => o.trace = PathBuf::from(s),
        }
    }
    if o.trace.as_os_str().is_empty() {
        bail!("usage: aisim-compare TRACE.jsonl [--kv-tokens N] [--block-size B] ...");
    }
    Ok(o)
}

fn main() -> Result<()> {
    let o = opts()?;
    let trace = Trace::from_mooncake(&o.trace, o.trace_block_size)?.normalize_session_starts()?;
    let driver = WorkloadDriver::new_trace(trace, o.block_size)?;
    let spec = ReplaySpec {
        version: 1,
        topology: ReplayTopology::aggregated(1),
        engine: serde_json::to_value(ReplayEngineConfig {
            rank: EngineConfig {
                // mc-replay uses whole blocks of --kv-tokens.
                num_gpu_blocks: o.kv_tokens / o.block_size,
                block_size: o.block_size,
                max_num_seqs: o.max_seqs,
                max_num_batched_tokens: o.max_batched_tokens,
                timing_model: TimingModelConfig::Polynomial,
                ..EngineConfig::for_backend(Backend::Vllm)
            },
            ..ReplayEngineConfig::default()
        })?,
        adapters: Default::default(),
        max_sim_time_ms: None,
        max_in_flight: None,
        record_per_request: true,
        sla: Default::default(),
        requests: Vec::new(),
    };
    let report = Replayer::new(spec, ReplayEngineFactory::new())?
        .with_runtime_input(ReplayRuntimeInput::Workload(driver))
        .with_capture_options(ReplayCaptureOptions {
            capture_per_request: true,
            determinism: ReplayDeterminism::CanonicalV1,
            ..Default::default()
        })
        .run()?;
    // The same definitions as mc-replay's summary: TTFT from arrival, TPOT
    // per request (last token - first token) / (tokens - 1) then the mean
    // over requests with two tokens or more, the hit rate as prompt tokens
    // found in the prefix cache at first admission over all prompt tokens
    // (aisimulate's first_admission_prefix_cache_reused_ratio; its
    // prefix_cache_reused_ratio takes each request's largest hit over all
    // its admissions, so a request preempted and readmitted counts the
    // blocks it had computed itself).
    let (mut ttft, mut nt, mut tpot, mut np) = (0.0, 0usize, 0.0, 0usize);
    let (mut first, mut last) = (f64::INFINITY, 0.0f64);
    for r in &report.per_request {
        first = first.min(r.arrival_time_ms);
        last = last.max(r.terminal_time_ms);
        if let Some(t) = r.ttft_ms {
            ttft += t;
            nt += 1;
        }
        if let (Some(a), Some(b)) = (r.first_token_ms, r.last_token_ms) {
            if r.output_length >= 2 {
                tpot += (b - a) / (r.output_length - 1) as f64;
                np += 1;
            }
        }
    }
    let out = serde_json::json!({
        "simulator": "aisimulate-core 0.13.0",
        "requests": report.per_request.len(),
        "completed": report.request_counts.completed_requests,
        "duration_s": (last - first) / 1000.0,
        "readmissions": report.per_request.iter().map(|r| r.readmission_count).sum::<usize>(),
        "ttft_mean_ms": ttft / nt.max(1) as f64,
        "tpot_mean_ms": tpot / np.max(1) as f64,
        "hit_rate": report.first_admission_prefix_cache_reused_ratio,
        "hit_rate_any_admission": report.prefix_cache_reused_ratio,
        "committed_prefill_tokens": report.committed_prefill_tokens,
    });
    println!("{out}");
    Ok(())
}
