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

/// vLLM's bucket edges (`vllm/v1/metrics/loggers.py`,
/// `PrometheusStatLogger`; read at the 0.11 line, where
/// `vllm:inter_token_latency_seconds` replaced
/// `vllm:time_per_output_token_seconds` with the same edges).
pub const TTFT_BUCKETS_S: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
pub const ITL_BUCKETS_S: [f64; 19] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// vLLM's `request_latency_buckets`: e2e, queue, prefill, decode, inference.
pub const REQUEST_LATENCY_BUCKETS_S: [f64; 21] = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
pub const ITERATION_TOKENS_BUCKETS: [f64; 13] = [
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];

/// One Prometheus histogram: counts per `le` bound (one more for +Inf),
/// and the sum.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        }
    }

    /// One value; bounds are inclusive (`le`).
    pub fn observe(&mut self, v: f64) {
        let i = self.bounds.partition_point(|&b| b < v);
        self.counts[i] += 1;
        self.sum += v;
    }

    /// The family as `prometheus_client` writes a histogram: cumulative
    /// `_bucket` samples with `le` after the metric's labels, `_count`,
    /// `_sum`, `_created`.
    pub fn render(
        &self,
        out: &mut String,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        created: f64,
    ) {
        use crate::prom::format_value;
        use std::fmt::Write as _;
        let plain: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        let plain = plain.join(",");
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut total = 0;
        for (i, c) in self.counts.iter().enumerate() {
            total += c;
            let le = self
                .bounds
                .get(i)
                .map_or("+Inf".to_string(), |&b| format_value(b));
            let _ = writeln!(
                out,
                "{name}_bucket{{{plain},le=\"{le}\"}} {}",
                format_value(total as f64)
            );
        }
        let _ = writeln!(
            out,
            "{name}_count{{{plain}}} {}",
            format_value(total as f64)
        );
        let _ = writeln!(out, "{name}_sum{{{plain}}} {}", format_value(self.sum));
        let _ = writeln!(out, "{name}_created{{{plain}}} {}", format_value(created));
    }
}

/// vLLM's per-request and per-step histograms, as `mc-mock --engine`
/// observes them on the engine's clock, with vLLM's semantics
/// (`vllm/v1/metrics/stats.py`): queue = first scheduled − arrival;
/// prefill = first token − first scheduled; decode = last token − first
/// token; inference = last token − first scheduled (prefill + decode);
/// TTFT = first token − arrival, observed when the token is made; one ITL
/// per later token, the gap since the one before; iteration tokens per
/// engine step that made output: the tokens it generated plus the prompt
/// tokens of the requests whose first token it made (vLLM counts a prompt
/// in the step that finishes its prefill, not chunk by chunk).
#[derive(Debug, Clone, PartialEq)]
pub struct EngineHistograms {
    pub queue: Histogram,
    pub prefill: Histogram,
    pub decode: Histogram,
    pub inference: Histogram,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub iteration_tokens: Histogram,
}

impl Default for EngineHistograms {
    fn default() -> Self {
        EngineHistograms {
            queue: Histogram::new(&REQUEST_LATENCY_BUCKETS_S),
            prefill: Histogram::new(&REQUEST_LATENCY_BUCKETS_S),
            decode: Histogram::new(&REQUEST_LATENCY_BUCKETS_S),
            inference: Histogram::new(&REQUEST_LATENCY_BUCKETS_S),
            ttft: Histogram::new(&TTFT_BUCKETS_S),
            itl: Histogram::new(&ITL_BUCKETS_S),
            iteration_tokens: Histogram::new(&ITERATION_TOKENS_BUCKETS),
        }
    }
}

fn secs(from_us: u64, to_us: u64) -> f64 {
    to_us.saturating_sub(from_us) as f64 / 1e6
}

impl EngineHistograms {
    /// A finished request's phases (µs on the engine clock).
    pub fn finished(&mut self, arrival_us: u64, first_scheduled_us: u64, token_us: &[u64]) {
        self.queue.observe(secs(arrival_us, first_scheduled_us));
        let (first, last) = match (token_us.first(), token_us.last()) {
            (Some(&f), Some(&l)) => (f, l),
            // No token: nothing was prefilled or decoded.
            _ => (first_scheduled_us, first_scheduled_us),
        };
        self.prefill.observe(secs(first_scheduled_us, first));
        self.decode.observe(secs(first, last));
        self.inference.observe(secs(first_scheduled_us, last));
    }

    /// A request's first token, made at `at_us`.
    pub fn first_token(&mut self, arrival_us: u64, at_us: u64) {
        self.ttft.observe(secs(arrival_us, at_us));
    }

    /// A later token, `gap_us` after the one before.
    pub fn next_token(&mut self, gap_us: u64) {
        self.itl.observe(gap_us as f64 / 1e6);
    }

    /// An engine step that made output: its generated tokens plus the
    /// prompt tokens of the requests it made a first token for.
    pub fn iteration(&mut self, tokens: u64) {
        self.iteration_tokens.observe(tokens as f64);
    }

    /// The seven families, vLLM's names and help texts.
    pub fn render(&self, out: &mut String, model: &str, created: f64) {
        let labels: &[(&str, &str)] = &[("engine", "0"), ("model_name", model)];
        for (h, name, help) in [
            (
                &self.queue,
                "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
            ),
            (
                &self.inference,
                "vllm:request_inference_time_seconds",
                "Histogram of time spent in RUNNING phase for request.",
            ),
            (
                &self.prefill,
                "vllm:request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.",
            ),
            (
                &self.decode,
                "vllm:request_decode_time_seconds",
                "Histogram of time spent in DECODE phase for request.",
            ),
            (
                &self.ttft,
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
            ),
            (
                &self.itl,
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
            ),
            (
                &self.iteration_tokens,
                "vllm:iteration_tokens_total",
                "Histogram of number of tokens per engine_step.",
            ),
        ] {
            h.render(out, name, help, labels, created);
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

    /// One request by hand: arrived at 0, first scheduled at 0.2 s, tokens
    /// at 0.5, 0.52 and 0.6 s: queue 0.2, prefill 0.3, decode 0.1,
    /// inference 0.4, TTFT 0.5, ITLs 0.02 and 0.08; one step of a
    /// 100-token prompt's first token (101 tokens) and two of one.
    #[test]
    fn engine_histograms_have_vllms_names_buckets_and_phases() {
        let mut h = EngineHistograms::default();
        h.first_token(0, 500_000);
        h.next_token(20_000);
        h.next_token(80_000);
        h.finished(0, 200_000, &[500_000, 520_000, 600_000]);
        for t in [101, 1, 1] {
            h.iteration(t);
        }
        let mut text = String::new();
        h.render(&mut text, "m", 1.7e9);
        assert!(text.contains(
            "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.\n\
             # TYPE vllm:time_to_first_token_seconds histogram\n\
             vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"0.001\"} 0.0\n"
        ));
        let scrape = parse(&text).unwrap();
        let get = |name: &str, le: Option<&str>| -> f64 {
            scrape
                .samples
                .iter()
                .find(|s| {
                    s.name == name
                        && s.labels.get("model_name").map(String::as_str) == Some("m")
                        && s.labels.get("le").map(String::as_str) == le
                })
                .unwrap_or_else(|| panic!("{name} {le:?}\n{text}"))
                .value
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        for (name, sum) in [
            ("vllm:request_queue_time_seconds", 0.2),
            ("vllm:request_prefill_time_seconds", 0.3),
            ("vllm:request_decode_time_seconds", 0.1),
            ("vllm:request_inference_time_seconds", 0.4),
            ("vllm:time_to_first_token_seconds", 0.5),
        ] {
            assert_eq!(get(&format!("{name}_count"), None), 1.0, "{name}");
            assert!(close(get(&format!("{name}_sum"), None), sum), "{name}");
        }
        // Queue 0.2 s: above no request-latency bound below 0.3.
        assert_eq!(
            get("vllm:request_queue_time_seconds_bucket", Some("0.3")),
            1.0
        );
        // Decode 0.1 s is below the first bound (0.3) as well.
        assert_eq!(
            get("vllm:request_decode_time_seconds_bucket", Some("0.3")),
            1.0
        );
        // Prefill 0.3 s: bounds are inclusive.
        assert_eq!(
            get("vllm:request_prefill_time_seconds_bucket", Some("0.3")),
            1.0
        );
        assert_eq!(
            get("vllm:request_inference_time_seconds_bucket", Some("0.3")),
            0.0
        );
        assert_eq!(
            get("vllm:request_inference_time_seconds_bucket", Some("0.5")),
            1.0
        );
        // TTFT 0.5 s: not within 0.25, within 0.5.
        assert_eq!(
            get("vllm:time_to_first_token_seconds_bucket", Some("0.25")),
            0.0
        );
        assert_eq!(
            get("vllm:time_to_first_token_seconds_bucket", Some("0.5")),
            1.0
        );
        assert_eq!(
            get("vllm:time_to_first_token_seconds_bucket", Some("2560.0")),
            1.0
        );
        assert_eq!(
            get("vllm:time_to_first_token_seconds_bucket", Some("+Inf")),
            1.0
        );
        // ITLs 0.02 and 0.08: one within 0.025, both within 0.1.
        assert_eq!(
            get("vllm:inter_token_latency_seconds_bucket", Some("0.01")),
            0.0
        );
        assert_eq!(
            get("vllm:inter_token_latency_seconds_bucket", Some("0.025")),
            1.0
        );
        assert_eq!(
            get("vllm:inter_token_latency_seconds_bucket", Some("0.075")),
            1.0
        );
        assert_eq!(
            get("vllm:inter_token_latency_seconds_bucket", Some("0.1")),
            2.0
        );
        assert!(close(
            get("vllm:inter_token_latency_seconds_sum", None),
            0.1
        ));
        // Steps of 1, 1 and 101 tokens.
        assert_eq!(get("vllm:iteration_tokens_total_bucket", Some("1.0")), 2.0);
        assert_eq!(get("vllm:iteration_tokens_total_bucket", Some("64.0")), 2.0);
        assert_eq!(
            get("vllm:iteration_tokens_total_bucket", Some("128.0")),
            3.0
        );
        assert_eq!(get("vllm:iteration_tokens_total_count", None), 3.0);
        assert_eq!(get("vllm:iteration_tokens_total_sum", None), 103.0);
        // Every edge, as vLLM has them.
        let edges = |name: &str| -> Vec<String> {
            scrape
                .samples
                .iter()
                .filter(|s| s.name == format!("{name}_bucket"))
                .map(|s| s.labels["le"].clone())
                .collect()
        };
        assert_eq!(
            edges("vllm:request_decode_time_seconds").join(","),
            "0.3,0.5,0.8,1.0,1.5,2.0,2.5,5.0,10.0,15.0,20.0,30.0,40.0,50.0,60.0,120.0,240.0,\
             480.0,960.0,1920.0,7680.0,+Inf"
        );
        assert_eq!(
            edges("vllm:iteration_tokens_total").join(","),
            "1.0,8.0,16.0,32.0,64.0,128.0,256.0,512.0,1024.0,2048.0,4096.0,8192.0,16384.0,+Inf"
        );
        assert_eq!(edges("vllm:inter_token_latency_seconds").len(), 20);
        assert_eq!(edges("vllm:time_to_first_token_seconds").len(), 23);
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
