//! `GET /metrics`: the mock's prefix cache and queue under vLLM's metric
//! names, in the Prometheus text format as vLLM's `prometheus_client`
//! writes it (`# HELP`/`# TYPE`, counters as `NAME_total` with
//! `NAME_created`, labels `model_name` and `engine`), so mc-replay's
//! fidelity check can be tested end to end.
//!
//! As vLLM counts them: `vllm:prefix_cache_queries` is the prompt tokens
//! looked up in the prefix cache, `vllm:prefix_cache_hits` the tokens found
//! there; with prefix caching off nothing is looked up and both stay 0.
//! Unlike vLLM, `--prefix-cache` credits a prompt's full blocks even when
//! they are the whole prompt (vLLM recomputes the last token, so it finds
//! one block less then); `--engine` follows vLLM.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::prom::{write_family, MetricType};

/// The counters and the running gauge of the latency-model mock.
#[derive(Debug, Default)]
pub struct Counters {
    queries: AtomicU64,
    hits: AtomicU64,
    /// Shared with the guards, so a stream handed to the pacer thread can
    /// carry its guard there and drop it at its last token.
    running: Arc<AtomicU64>,
}

impl Counters {
    /// A prompt of `prompt_tokens` was looked up and `hits` of them found.
    pub fn lookup(&self, prompt_tokens: u64, hits: u64) {
        self.queries.fetch_add(prompt_tokens, Ordering::Relaxed);
        self.hits.fetch_add(hits, Ordering::Relaxed);
    }

    /// A completion is being answered until the guard is dropped.
    pub fn running(&self) -> Running {
        self.running.fetch_add(1, Ordering::Relaxed);
        Running(Arc::clone(&self.running))
    }

    pub fn load(&self) -> Load {
        Load {
            queries: self.queries.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            running: self.running.load(Ordering::Relaxed),
            waiting: 0,
            kv_usage: 0.0,
            preemptions: 0,
        }
    }
}

/// Counts one request as running until dropped.
pub struct Running(Arc<AtomicU64>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What one scrape reports.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Load {
    /// Prompt tokens looked up in the prefix cache.
    pub queries: u64,
    /// Of those, found in it.
    pub hits: u64,
    pub running: u64,
    pub waiting: u64,
    /// KV blocks in use / all blocks (0 for the infinite cache).
    pub kv_usage: f64,
    pub preemptions: u64,
}

/// The cache's configuration, for `vllm:cache_config_info`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheConfig {
    /// Tokens (words) per block.
    pub block_size: u64,
    pub prefix_caching: bool,
    /// `None`: unlimited (`--prefix-cache`).
    pub kv_blocks: Option<u64>,
}

/// The exposition: vLLM's families for one engine (`engine="0"`).
pub fn render(model: &str, cache: CacheConfig, load: Load, created_unix_s: f64) -> String {
    let labels: &[(&str, &str)] = &[("engine", "0"), ("model_name", model)];
    let mut out = String::new();
    let gauge = |out: &mut String, name: &str, help: &str, v: f64| {
        write_family(out, name, help, MetricType::Gauge, &[(labels, v)], None);
    };
    let counter = |out: &mut String, name: &str, help: &str, v: u64| {
        write_family(
            out,
            name,
            help,
            MetricType::Counter,
            &[(labels, v as f64)],
            Some(created_unix_s),
        );
    };
    gauge(
        &mut out,
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        load.running as f64,
    );
    gauge(
        &mut out,
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        load.waiting as f64,
    );
    gauge(
        &mut out,
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        load.kv_usage,
    );
    counter(
        &mut out,
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        load.queries,
    );
    counter(
        &mut out,
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        load.hits,
    );
    counter(
        &mut out,
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        load.preemptions,
    );
    let block = cache.block_size.to_string();
    let blocks = cache.kv_blocks.map_or("None".into(), |b| b.to_string());
    let info: &[(&str, &str)] = &[
        ("block_size", &block),
        (
            "enable_prefix_caching",
            if cache.prefix_caching {
                "True"
            } else {
                "False"
            },
        ),
        ("engine", "0"),
        ("num_gpu_blocks", &blocks),
    ];
    write_family(
        &mut out,
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        MetricType::Gauge,
        &[(info, 1.0)],
        None,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prom::{parse, ServerStats};

    #[test]
    fn renders_what_the_parser_reads() {
        let c = Counters::default();
        // Two prompts of 48 and 64 tokens; 32 of the second were cached.
        c.lookup(48, 0);
        c.lookup(64, 32);
        let _busy = c.running();
        let cache = CacheConfig {
            block_size: 16,
            prefix_caching: true,
            kv_blocks: None,
        };
        let text = render("m", cache, c.load(), 1.7e9);
        assert!(text.starts_with(
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
             # TYPE vllm:num_requests_running gauge\n\
             vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1.0\n"
        ));
        assert!(text.contains(
            "# TYPE vllm:prefix_cache_queries counter\n\
             vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} 112.0\n\
             vllm:prefix_cache_queries_created{engine=\"0\",model_name=\"m\"} 1.7e+09\n"
        ));
        let st = ServerStats::from_scrape(&parse(&text).unwrap());
        // 48 + 64 tokens looked up, 0 + 32 found.
        assert_eq!(
            (st.prefix_queries, st.prefix_hits),
            (Some(112.0), Some(32.0))
        );
        assert_eq!((st.running, st.waiting), (Some(1.0), Some(0.0)));
        assert_eq!((st.block_size, st.kv_blocks), (Some(16), None));
        assert_eq!(st.prefix_caching, Some(true));
        drop(_busy);
        assert_eq!(c.load().running, 0);
    }
}
