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

/// Upper bounds of the send-delay buckets, µs (`le`; one more bucket
/// takes the rest).
pub const DELAY_BOUNDS_US: [u64; 9] = [
    100, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000,
];

/// How late the mock wrote its token events after the latency model's
/// deadlines: a histogram, so a benchmark can tell a slow mock (its
/// pacer waiting for a core) from a slow client. Each writer has its own
/// (a pacer thread, or the connection threads together), so the counts
/// are not a cache line that every token moves between cores.
#[derive(Debug, Default)]
pub struct SendDelay {
    buckets: [AtomicU64; DELAY_BOUNDS_US.len() + 1],
    sum_us: AtomicU64,
}

impl SendDelay {
    /// An event written `late_us` after its deadline (0: on time or early).
    pub fn record(&self, late_us: u64) {
        let i = DELAY_BOUNDS_US.partition_point(|&b| b < late_us);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(late_us, Ordering::Relaxed);
    }
}

/// Appends `mc_mock:token_send_delay_seconds`, the sum of `delays`, as a
/// Prometheus histogram (cumulative `le` buckets, `_count`, `_sum`).
pub fn render_send_delay<'a>(out: &mut String, delays: impl IntoIterator<Item = &'a SendDelay>) {
    use std::fmt::Write as _;
    let mut counts = [0u64; DELAY_BOUNDS_US.len() + 1];
    let mut sum_us = 0;
    for d in delays {
        for (c, b) in counts.iter_mut().zip(&d.buckets) {
            *c += b.load(Ordering::Relaxed);
        }
        sum_us += d.sum_us.load(Ordering::Relaxed);
    }
    let name = "mc_mock:token_send_delay_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} How long after the latency model's deadline mc-mock wrote each token event."
    );
    let _ = writeln!(out, "# TYPE {name} histogram");
    let mut total = 0;
    for (i, c) in counts.iter().enumerate() {
        total += c;
        let le = DELAY_BOUNDS_US.get(i).map_or("+Inf".to_string(), |&b| {
            crate::prom::format_value(b as f64 / 1e6)
        });
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"{le}\"}} {}",
            crate::prom::format_value(total as f64)
        );
    }
    let _ = writeln!(
        out,
        "{name}_count {}",
        crate::prom::format_value(total as f64)
    );
    let _ = writeln!(
        out,
        "{name}_sum {}",
        crate::prom::format_value(sum_us as f64 / 1e6)
    );
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
    fn send_delays_fall_in_their_buckets_and_render_cumulatively() {
        let (a, b) = (SendDelay::default(), SendDelay::default());
        // Bounds are inclusive (`le`): 100 µs is in the first bucket,
        // 101 in the second; past 100 ms is the +Inf bucket's only.
        for us in [0, 100, 101, 1_000] {
            a.record(us);
        }
        b.record(150_000);
        let mut out = String::new();
        render_send_delay(&mut out, [&a, &b]);
        assert_eq!(
            out,
            "# HELP mc_mock:token_send_delay_seconds How long after the latency model's deadline mc-mock wrote each token event.\n\
             # TYPE mc_mock:token_send_delay_seconds histogram\n\
             mc_mock:token_send_delay_seconds_bucket{le=\"0.0001\"} 2.0\n\
             mc_mock:token_send_delay_seconds_bucket{le=\"0.0005\"} 3.0\n\
             mc_mock:token_send_delay_seconds_bucket{le=\"0.001\"} 4.0\n\
             mc_mock:token_send_delay_seconds_bucket{le=\"0.002\"} 4.0\n\
             mc_mock:token_send_delay_seconds_bucket{le=\"0.005\"} 4.0\n\
             mc_mock:token_send_delay_seconds_bucket{le=\"0.01\"} 4.0\n\
             mc_mock:token_send_delay_seconds_bucket{le=\"0.02\"} 4.0\n\
             mc_mock:token_send_delay_seconds_bucket{le=\"0.05\"} 4.0\n\
             mc_mock:token_send_delay_seconds_bucket{le=\"0.1\"} 4.0\n\
             mc_mock:token_send_delay_seconds_bucket{le=\"+Inf\"} 5.0\n\
             mc_mock:token_send_delay_seconds_count 5.0\n\
             mc_mock:token_send_delay_seconds_sum 0.151201\n"
        );
    }

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
