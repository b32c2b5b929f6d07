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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Vllm,
    Sglang,
}

/// What the fidelity check reads from a server: the known series, summed
/// over their labels (one model, several engines or ranks).
#[derive(Debug, Clone, Default, PartialEq)]
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
        out
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

#[cfg(test)]
mod tests {
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
}
