//! Prometheus text exposition format (what `GET /metrics` returns), and the
//! serving-engine series the replay-fidelity check reads: vLLM's (current
//! names and the older `gpu_` forms) and SGLang's. Unknown series are kept
//! in the [`Scrape`] (every scrape is written out for later) but never
//! reach [`ServerStats`].

use std::collections::BTreeMap;

/// One sample: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A line of the exposition that is not a sample, a comment or blank.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metrics line {line}: {msg}")]
pub struct ParseError {
    pub line: usize,
    pub msg: String,
}

/// Every sample of one scrape, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    pub samples: Vec<Sample>,
}

/// Parses the text format (version 0.0.4): `# HELP`/`# TYPE` lines and
/// blank lines are skipped; label values may hold escaped quotes; an
/// optional timestamp after the value is ignored.
pub fn parse(text: &str) -> Result<Scrape, ParseError> {
    let mut samples = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |msg: &str| ParseError {
            line: i + 1,
            msg: format!("{msg}: `{line}`"),
        };
        let name_end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .ok_or_else(|| err("a sample needs a value after its name"))?;
        let name = &line[..name_end];
        let mut rest = &line[name_end..];
        let mut labels = BTreeMap::new();
        if let Some(body) = rest.strip_prefix('{') {
            let (parsed, after) = parse_labels(body).map_err(|m| err(&m))?;
            labels = parsed;
            rest = after;
        }
        let value = rest
            .split_whitespace()
            .next()
            .ok_or_else(|| err("no value"))?;
        let value = parse_value(value).ok_or_else(|| err("the value is not a number"))?;
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Ok(Scrape { samples })
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

/// `a="x",b="y\"z"}` → the labels and what follows the `}`.
fn parse_labels(mut s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    loop {
        s = s.trim_start_matches([' ', ',']);
        if let Some(rest) = s.strip_prefix('}') {
            return Ok((labels, rest));
        }
        let (key, rest) = s.split_once('=').ok_or("a label needs `=`")?;
        let rest = rest.strip_prefix('"').ok_or("a label value needs quotes")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err("unterminated label value".into()),
                },
                Some((j, '"')) => break j,
                Some((_, c)) => value.push(c),
                None => return Err("unterminated label value".into()),
            }
        };
        labels.insert(key.trim().to_string(), value);
        s = &rest[end + 1..];
    }
}

/// Which engine a scrape came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Vllm,
    Sglang,
}

/// What the fidelity check reads from a server: the known series, summed
/// over their labels (one model, several engines or ranks).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ServerStats {
    pub engine: Option<Engine>,
    /// Prefix-cache lookups and hits in tokens (vLLM, cumulative counters).
    pub prefix_queries: Option<f64>,
    pub prefix_hits: Option<f64>,
    /// SGLang's own hit rate (0..1).
    pub cache_hit_rate: Option<f64>,
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    /// KV-cache use, 0..1.
    pub kv_usage: Option<f64>,
    pub preemptions: Option<f64>,
    /// From vLLM's `vllm:cache_config_info` labels (an info gauge): tokens
    /// per KV block, KV blocks per engine, and whether prefix caching is on.
    pub block_size: Option<u64>,
    pub kv_blocks: Option<u64>,
    pub prefix_caching: Option<bool>,
    /// vLLM's request-phase histograms and per-step tokens
    /// ([`SERVICE_HISTOGRAMS`]), cumulative, by family name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub histograms: BTreeMap<String, Histogram>,
}

/// The histograms a run keeps the deltas of (vLLM's names): where the
/// server says how long each request waited, prefilled and decoded, and
/// how many tokens its steps held. A fit of the service time reads them.
pub const SERVICE_HISTOGRAMS: [&str; 4] = [
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:iteration_tokens_total",
];

/// One histogram family summed over its label sets (engines, models):
/// the observations, their sum, and the cumulative bucket counts by
/// upper bound (`le`, +Inf last).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Histogram {
    pub count: f64,
    pub sum: f64,
    /// (upper bound, cumulative count), ascending; +Inf is written as null
    /// in JSON, which has no infinity.
    pub buckets: Vec<(Option<f64>, f64)>,
}

impl Histogram {
    /// The family `name` of a scrape, if it has one.
    pub fn of(scrape: &Scrape, name: &str) -> Option<Histogram> {
        let (bucket, sum, count) = (
            format!("{name}_bucket"),
            format!("{name}_sum"),
            format!("{name}_count"),
        );
        let mut h = Histogram::default();
        let mut seen = false;
        let mut by_le: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for s in &scrape.samples {
            if s.name == sum {
                h.sum += s.value;
                seen = true;
            } else if s.name == count {
                h.count += s.value;
                seen = true;
            } else if s.name == bucket {
                let Some(le) = s.labels.get("le").and_then(|v| v.parse::<f64>().ok()) else {
                    continue;
                };
                // Keyed by the bound's bits (bounds are positive): sums
                // the same bucket of every label set.
                let e = by_le.entry(le.to_bits()).or_insert((le, 0.0));
                e.1 += s.value;
            }
        }
        let mut buckets: Vec<(f64, f64)> = by_le.into_values().collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        h.buckets = buckets
            .into_iter()
            .map(|(le, c)| (le.is_finite().then_some(le), c))
            .collect();
        seen.then_some(h)
    }

    /// What was observed between `before` and `self` (the same family of
    /// the same server, scraped later): counts, sum and buckets subtracted.
    pub fn since(&self, before: &Histogram) -> Histogram {
        Histogram {
            count: self.count - before.count,
            sum: self.sum - before.sum,
            buckets: self
                .buckets
                .iter()
                .map(|&(le, c)| {
                    let old = before
                        .buckets
                        .iter()
                        .find(|b| b.0 == le)
                        .map_or(0.0, |b| b.1);
                    (le, c - old)
                })
                .collect(),
        }
    }

    /// The mean observation (`None` with none).
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }

    /// The q-quantile by linear interpolation within its bucket, as
    /// Prometheus's `histogram_quantile` does (a quantile in the +Inf
    /// bucket is the highest finite bound).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.buckets.last()?.1;
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let (mut lo, mut below) = (0.0, 0.0);
        for &(le, c) in &self.buckets {
            let Some(hi) = le else { return Some(lo) };
            if c >= rank {
                let inside = c - below;
                let f = if inside > 0.0 {
                    (rank - below) / inside
                } else {
                    1.0
                };
                return Some(lo + (hi - lo) * f);
            }
            (lo, below) = (hi, c);
        }
        Some(lo)
    }
}

/// Where a known series goes in [`ServerStats`].
type Slot = fn(&mut ServerStats) -> &mut Option<f64>;

/// (series names, field, engine), the current name first.
const KNOWN: &[(&[&str], Slot, Engine)] = &[
    (
        &[
            "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_queries",
            "vllm:gpu_prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries",
        ],
        |s| &mut s.prefix_queries,
        Engine::Vllm,
    ),
    (
        &[
            "vllm:prefix_cache_hits_total",
            "vllm:prefix_cache_hits",
            "vllm:gpu_prefix_cache_hits_total",
            "vllm:gpu_prefix_cache_hits",
        ],
        |s| &mut s.prefix_hits,
        Engine::Vllm,
    ),
    (
        &["vllm:num_requests_running"],
        |s| &mut s.running,
        Engine::Vllm,
    ),
    (
        &["vllm:num_requests_waiting"],
        |s| &mut s.waiting,
        Engine::Vllm,
    ),
    (
        &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
        |s| &mut s.kv_usage,
        Engine::Vllm,
    ),
    (
        &["vllm:num_preemptions_total", "vllm:num_preemptions"],
        |s| &mut s.preemptions,
        Engine::Vllm,
    ),
    (
        &["sglang:cache_hit_rate"],
        |s| &mut s.cache_hit_rate,
        Engine::Sglang,
    ),
    (
        &["sglang:num_running_reqs"],
        |s| &mut s.running,
        Engine::Sglang,
    ),
    (
        &["sglang:num_queue_reqs"],
        |s| &mut s.waiting,
        Engine::Sglang,
    ),
    (&["sglang:token_usage"], |s| &mut s.kv_usage, Engine::Sglang),
];

impl ServerStats {
    /// The known series of a scrape. When a server exports both a current
    /// and an older name for one figure, the current one is used.
    pub fn from_scrape(scrape: &Scrape) -> ServerStats {
        let mut out = ServerStats::default();
        for (names, field, engine) in KNOWN {
            let Some(name) = names
                .iter()
                .find(|n| scrape.samples.iter().any(|s| s.name == **n))
            else {
                continue;
            };
            let sum: f64 = scrape
                .samples
                .iter()
                .filter(|s| s.name == *name)
                .map(|s| s.value)
                .sum();
            *field(&mut out) = Some(sum);
            out.engine.get_or_insert(*engine);
        }
        out.read_cache_config(scrape);
        for name in SERVICE_HISTOGRAMS {
            if let Some(h) = Histogram::of(scrape, name) {
                out.histograms.insert(name.to_string(), h);
            }
        }
        out
    }

    /// `vllm:cache_config_info{block_size="16",num_gpu_blocks="573",
    /// enable_prefix_caching="True",engine="0",…} 1`: configuration, not a
    /// count, so one label set is read (the first; with several engines
    /// each has its own cache of that size). `"None"` values are absent.
    fn read_cache_config(&mut self, scrape: &Scrape) {
        let Some(info) = scrape
            .samples
            .iter()
            .find(|s| s.name == "vllm:cache_config_info")
        else {
            return;
        };
        let num = |k: &str| info.labels.get(k).and_then(|v| v.parse::<u64>().ok());
        self.block_size = num("block_size").filter(|&b| b > 0);
        self.kv_blocks = num("num_gpu_blocks_override").or(num("num_gpu_blocks"));
        self.prefix_caching = info.labels.get("enable_prefix_caching").and_then(|v| {
            match v.to_ascii_lowercase().as_str() {
                "true" => Some(true),
                "false" => Some(false),
                _ => None,
            }
        });
        self.engine.get_or_insert(Engine::Vllm);
    }

    /// KV capacity in tokens, when the server reports its blocks.
    pub fn kv_tokens(&self) -> Option<u64> {
        Some(self.kv_blocks? * self.block_size?)
    }

    /// The prefix-cache hit rate between two scrapes of the same server
    /// (vLLM: hits over queries of the counters' increase; SGLang: its
    /// gauge at the later scrape).
    pub fn hit_rate_between(before: &ServerStats, after: &ServerStats) -> Option<f64> {
        match (
            before.prefix_queries,
            before.prefix_hits,
            after.prefix_queries,
            after.prefix_hits,
        ) {
            (Some(q0), Some(h0), Some(q1), Some(h1)) if q1 > q0 => Some((h1 - h0) / (q1 - q0)),
            _ => after.cache_hit_rate,
        }
    }
}

/// A metric family's type, as `# TYPE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
}

/// Appends one metric family in the text format as Python's
/// `prometheus_client` (which vLLM uses) writes it: `# HELP` and `# TYPE`
/// under the family's name, then its samples; a counter's samples are
/// `NAME_total`, each followed by `NAME_created` (the Unix time it was made)
/// when `created` is given.
pub fn write_family(
    out: &mut String,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: &[(&[(&str, &str)], f64)],
    created: Option<f64>,
) {
    use std::fmt::Write as _;
    let type_name = match kind {
        MetricType::Counter => "counter",
        MetricType::Gauge => "gauge",
    };
    let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(out, "# TYPE {name} {type_name}");
    for (labels, value) in samples {
        let labels = label_text(labels);
        match kind {
            MetricType::Gauge => {
                let _ = writeln!(out, "{name}{labels} {}", format_value(*value));
            }
            MetricType::Counter => {
                let _ = writeln!(out, "{name}_total{labels} {}", format_value(*value));
                if let Some(c) = created {
                    let _ = writeln!(out, "{name}_created{labels} {}", format_value(c));
                }
            }
        }
    }
}

/// `{a="x",b="y"}`, or nothing without labels.
fn label_text(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    format!("{{{}}}", parts.join(","))
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A sample value as `prometheus_client`'s `floatToGoString` writes it:
/// Python's `repr` of the float (`3.0`, `0.25`, `1e-05`), `+Inf`, `-Inf`,
/// `NaN`, and positive values with more than six digits before the point in
/// Go's exponent form (`12345678.0` → `1.2345678e+07`).
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let s = python_repr(v);
    match s.find('.') {
        Some(dot) if v > 0.0 && dot > 6 && !s.contains('e') => {
            let digits = format!("{}{}", &s[1..dot], &s[dot + 1..]);
            let mantissa = format!("{}.{digits}", &s[..1]);
            let mantissa = mantissa.trim_end_matches(['0', '.']);
            format!("{mantissa}e+0{}", dot - 1)
        }
        _ => s,
    }
}

/// Python's `repr(float)`: the shortest round-trip digits, in positional
/// form for exponents in [-4, 16), else `d.ddde±XX`.
fn python_repr(v: f64) -> String {
    let sci = format!("{v:e}"); // shortest digits: `1.5e-7`, `3e0`
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let s = format!("{v}");
        if s.contains('.') {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_histogram_is_summed_over_label_sets_and_subtracted_between_scrapes() {
        let at = |a: f64, b: f64| {
            parse(&format!(
                "h_bucket{{engine=\"0\",le=\"0.5\"}} {a}\n\
                 h_bucket{{engine=\"0\",le=\"1.0\"}} {b}\n\
                 h_bucket{{engine=\"0\",le=\"+Inf\"}} {b}\n\
                 h_bucket{{engine=\"1\",le=\"0.5\"}} 1\n\
                 h_bucket{{engine=\"1\",le=\"1.0\"}} 1\n\
                 h_bucket{{engine=\"1\",le=\"+Inf\"}} 1\n\
                 h_sum{{engine=\"0\"}} {b}\nh_sum{{engine=\"1\"}} 0.25\n\
                 h_count{{engine=\"0\"}} {b}\nh_count{{engine=\"1\"}} 1\n"
            ))
            .unwrap()
        };
        let before = Histogram::of(&at(1.0, 2.0), "h").unwrap();
        assert_eq!(before.count, 3.0);
        assert_eq!(before.sum, 2.25);
        assert_eq!(
            before.buckets,
            vec![(Some(0.5), 2.0), (Some(1.0), 3.0), (None, 3.0)]
        );
        // Later: 2 more observations at most 0.5 and 4 more in (0.5, 1].
        let after = Histogram::of(&at(3.0, 8.0), "h").unwrap();
        let d = after.since(&before);
        assert_eq!(d.count, 6.0);
        assert_eq!(
            d.buckets,
            vec![(Some(0.5), 2.0), (Some(1.0), 6.0), (None, 6.0)]
        );
        // By hand: the median (rank 3) lies 1/4 into (0.5, 1]: 0.625; the
        // p90 (rank 5.4) 3.4/4 into it: 0.925.
        assert!((d.quantile(0.5).unwrap() - 0.625).abs() < 1e-12);
        assert!((d.quantile(0.9).unwrap() - 0.925).abs() < 1e-12);
        assert!(Histogram::of(&at(1.0, 2.0), "other").is_none());
    }

    use super::*;

    const VLLM: &str = r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
vllm:gpu_prefix_cache_queries_total{model_name="m"} 1000.0
vllm:gpu_prefix_cache_hits_total{model_name="m"} 400.0
vllm:prefix_cache_queries_total{model_name="m"} 2000.0
vllm:prefix_cache_hits_total{model_name="m"} 500.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="a \"quoted\" name"} 7 1712345678
"#;

    #[test]
    fn parses_samples_labels_and_specials() {
        let s = parse(VLLM).unwrap();
        assert_eq!(s.samples.len(), 9);
        assert_eq!(s.samples[0].name, "vllm:num_requests_running");
        assert_eq!(s.samples[0].labels["engine"], "0");
        assert_eq!(s.samples[0].value, 3.0);
        let last = &s.samples[8];
        assert_eq!(last.labels["le"], "+Inf");
        assert_eq!(last.labels["model_name"], "a \"quoted\" name");
        assert_eq!(last.value, 7.0);
        assert_eq!(parse("x +Inf").unwrap().samples[0].value, f64::INFINITY);
    }

    #[test]
    fn bad_lines_name_their_number() {
        let e = parse("ok 1\nbroken{a=\"x\" 2\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert_eq!(parse("ok one").unwrap_err().line, 1);
        assert_eq!(parse("lonely").unwrap_err().line, 1);
    }

    #[test]
    fn vllm_names_summed_over_labels_current_name_first() {
        let st = ServerStats::from_scrape(&parse(VLLM).unwrap());
        assert_eq!(st.engine, Some(Engine::Vllm));
        assert_eq!(st.running, Some(5.0));
        assert_eq!(st.waiting, Some(1.0));
        assert_eq!(st.kv_usage, Some(0.25));
        // Both forms exported: the current `prefix_cache_*` wins.
        assert_eq!(
            (st.prefix_queries, st.prefix_hits),
            (Some(2000.0), Some(500.0))
        );
        assert_eq!(st.preemptions, None);
    }

    #[test]
    fn older_gpu_names_alone_are_understood() {
        let old = "vllm:gpu_prefix_cache_queries_total 100\nvllm:gpu_prefix_cache_hits_total 10\n";
        let new = "vllm:gpu_prefix_cache_queries_total 300\nvllm:gpu_prefix_cache_hits_total 160\n";
        let a = ServerStats::from_scrape(&parse(old).unwrap());
        let b = ServerStats::from_scrape(&parse(new).unwrap());
        // (160 − 10) / (300 − 100)
        assert_eq!(ServerStats::hit_rate_between(&a, &b), Some(0.75));
    }

    #[test]
    fn sglang_names() {
        let text = "sglang:cache_hit_rate{model_name=\"m\"} 0.4\nsglang:num_running_reqs 2\n\
                    sglang:num_queue_reqs 7\nsglang:token_usage 0.5\nsglang:other 1\n";
        let st = ServerStats::from_scrape(&parse(text).unwrap());
        assert_eq!(st.engine, Some(Engine::Sglang));
        assert_eq!(
            (st.running, st.waiting, st.kv_usage),
            (Some(2.0), Some(7.0), Some(0.5))
        );
        assert_eq!(
            ServerStats::hit_rate_between(&ServerStats::default(), &st),
            Some(0.4)
        );
    }

    #[test]
    fn cache_config_info_gives_block_size_capacity_and_switch() {
        let text = "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",\
                    enable_prefix_caching=\"True\",engine=\"0\",num_gpu_blocks=\"573\",\
                    num_gpu_blocks_override=\"None\"} 1.0\n";
        let st = ServerStats::from_scrape(&parse(text).unwrap());
        assert_eq!(st.block_size, Some(16));
        assert_eq!(st.kv_blocks, Some(573));
        // 573 blocks of 16 tokens.
        assert_eq!(st.kv_tokens(), Some(9168));
        assert_eq!(st.prefix_caching, Some(true));
        assert_eq!(st.engine, Some(Engine::Vllm));
        let off = "vllm:cache_config_info{enable_prefix_caching=\"False\",block_size=\"32\"} 1\n";
        let st = ServerStats::from_scrape(&parse(off).unwrap());
        assert_eq!((st.prefix_caching, st.kv_tokens()), (Some(false), None));
    }

    #[test]
    fn values_as_prometheus_client_writes_them() {
        // Python: [floatToGoString(x) for x in (...)]
        for (v, want) in [
            (3.0, "3.0"),
            (0.0, "0.0"),
            (0.25, "0.25"),
            (1e-5, "1e-05"),
            (123456.0, "123456.0"),
            (1234567.0, "1.234567e+06"),
            (12345678.0, "1.2345678e+07"),
            (1e7, "1e+07"),
            (-2.5, "-2.5"),
            (1e16, "1e+16"),
            (f64::INFINITY, "+Inf"),
            (f64::NAN, "NaN"),
        ] {
            assert_eq!(format_value(v), want, "{v}");
            if v.is_finite() {
                assert_eq!(parse_value(want), Some(v), "{want}");
            }
        }
    }

    #[test]
    fn written_families_parse_back() {
        let mut out = String::new();
        let labels: &[(&str, &str)] = &[("engine", "0"), ("model_name", "a \"b\"")];
        write_family(
            &mut out,
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            MetricType::Counter,
            &[(labels, 96.0)],
            Some(1.5e9),
        );
        write_family(
            &mut out,
            "g",
            "A gauge.",
            MetricType::Gauge,
            &[(&[], 0.5)],
            None,
        );
        assert_eq!(
            out,
            "# HELP vllm:prefix_cache_hits Prefix cache hits, in terms of number of cached tokens.\n\
             # TYPE vllm:prefix_cache_hits counter\n\
             vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"a \\\"b\\\"\"} 96.0\n\
             vllm:prefix_cache_hits_created{engine=\"0\",model_name=\"a \\\"b\\\"\"} 1.5e+09\n\
             # HELP g A gauge.\n# TYPE g gauge\ng 0.5\n"
        );
        let s = parse(&out).unwrap();
        assert_eq!(s.samples.len(), 3);
        assert_eq!(s.samples[0].labels["model_name"], "a \"b\"");
        assert_eq!(s.samples[0].value, 96.0);
    }
}
