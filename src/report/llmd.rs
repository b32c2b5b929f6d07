//! `mc-report --format llm-d`: one run as llm-d-benchmark's benchmark
//! report (schema v0.2.1), so dashboards and analyses made for the
//! harnesses llm-d-benchmark converts (inference-perf, GuideLLM, vllm
//! bench, ...) read mctrace's runs too.
//!
//! The report is JSON: llm-d-benchmark reads reports with a YAML loader
//! (`yaml.safe_load`, which reads JSON) and writes them as JSON or YAML
//! itself. Its YAML 1.1 loader reads `1e-06` as a string, so every float
//! is written in plain decimal ([`Plain`]).
//!
//! What each field holds, and why, is in docs/tools/mc-report.md; what is
//! left out and the units in docs/decisions/0033-llm-d-benchmark-report.md.
//! In short: a field is written only when the run's summary or its result
//! lines say it; the fields the schema requires and mctrace cannot know (a
//! server's version) are written empty, as llm-d-benchmark's own
//! converters do. Nothing secret is written: the run description's URL has
//! its credentials hidden ([`super::input::read_summary`]), and it holds
//! header names and a hash of `--extra-body`, never their values.

use std::collections::BTreeMap;
use std::io;

use serde::Serialize;
use serde_json::ser::{Formatter, PrettyFormatter};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::results::summary::{utc_iso8601, Metrics, Summary};
use crate::results::{ErrorKind, RequestResult, Stats};

use super::input::Run;
use super::summary::{describe, Recomputed};

/// The schema version written.
pub const VERSION: &str = "0.2.1";

/// The stack component the load was sent to, by its label.
const SERVER: &str = "server";
const ENGINE: &str = "engine-model";

/// The report of one run, as pretty JSON with a final newline.
pub fn render(run: &Run, rc: &Recomputed) -> Result<String> {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Plain::default());
    report(run, rc)
        .serialize(&mut ser)
        .map_err(|e| Error::Other(e.into()))?;
    out.push(b'\n');
    String::from_utf8(out).map_err(|e| Error::Other(e.into()))
}

/// The report of one run.
pub fn report(run: &Run, rc: &Recomputed) -> Value {
    let mut top = Map::new();
    top.insert("version".into(), json!(VERSION));
    top.insert("run".into(), run_section(run, rc));
    // Without mc-replay's run description nothing is known of the load or
    // the target but the result lines: the optional scenario is left out.
    if rc.described {
        top.insert("scenario".into(), scenario(run, rc));
    }
    top.insert("results".into(), results(run, rc));
    Value::Object(top)
}

/// `run`: the report's id, and the run's wall-clock span.
fn run_section(run: &Run, rc: &Recomputed) -> Value {
    // A hash of the run's whole summary (its start time included): the
    // same results give the same id, two runs never do.
    let summary = serde_json::to_vec(&rc.json()).unwrap_or_default();
    let mut uid = sha256_hex(&summary);
    uid.truncate(32);
    let mut out = Map::new();
    out.insert("uid".into(), json!(uid));
    if rc.described {
        let start_ms = rc.summary.run.start_unix_ms;
        // The last answer's end, from the run's zero (warm-up included:
        // the experiment's span, not the measured window).
        let span_ms = run.results.iter().map(|r| r.t_end_ms).fold(0.0, f64::max);
        out.insert(
            "time".into(),
            json!({
                "start": iso8601_ms(start_ms),
                "end": iso8601_ms(start_ms + span_ms),
                "duration": format!("PT{}S", Plain::decimal(round3(span_ms / 1000.0))),
            }),
        );
    }
    Value::Object(out)
}

/// `scenario`: the load (mc-replay and its options) and the stack (the
/// server or the engine model it was sent to).
fn scenario(run: &Run, rc: &Recomputed) -> Value {
    let s = &rc.summary;
    let info = &s.run;
    let measured: Vec<&RequestResult> = run.results.iter().filter(|r| !r.warmup).collect();
    let mut standard = Map::new();
    standard.insert("tool".into(), json!(info.tool));
    standard.insert("tool_version".into(), json!(info.version));
    // The shards of a merged run are parallel generators of one load.
    if let Some(sh) = info.shard.as_ref().filter(|sh| sh.index.is_none()) {
        standard.insert("parallelism".into(), json!(sh.count.max(1)));
    }
    // mc-replay writes synthetic prompt text (the lengths and the prefix
    // sharing come from the trace, the tokens do not).
    standard.insert("source".into(), json!("random"));
    let asked = |f: fn(&RequestResult) -> Option<u64>| -> Vec<u64> {
        measured.iter().filter_map(|r| f(r)).collect()
    };
    standard.insert(
        "input_seq_len".into(),
        sequence_length(&asked(|r| r.input_tokens)).unwrap_or(json!({
            "distribution": "other",
            "value": 0,
        })),
    );
    // Enforced lengths only: min_tokens / ignore_eos (`--no-exact-output`
    // leaves the server free to stop early).
    let exact = info.options.as_ref().is_some_and(|o| o.exact_output);
    if exact {
        if let Some(v) = sequence_length(&asked(|r| r.output_tokens)) {
            standard.insert("output_seq_len".into(), v);
        }
    }
    if let Some(turns) = turns_per_session(&measured) {
        standard.insert(
            "multi_turn".into(),
            json!({ "enabled": true, "max_turns": turns }),
        );
    }
    if let Some(rate) = s.trace_rate.filter(|r| *r > 0.0) {
        standard.insert("rate_qps".into(), json!(rate));
    }
    if let Some(c) = info.concurrency.filter(|c| *c >= 1) {
        standard.insert("concurrency".into(), json!(c));
    }
    let config = serde_json::to_value(info).unwrap_or_default();
    json!({
        "stack": [component(rc)],
        "load": {
            "metadata": {
                "schema_version": "0.0.1",
                "cfg_id": load_cfg_id(&config),
                "description": describe(rc),
            },
            "standardized": standard,
            "native": { "config": config },
        },
    })
}

/// A hash of the load's configuration: the run description without what
/// differs between two runs of the same load (when and where it ran).
fn load_cfg_id(config: &Value) -> String {
    let mut c = config.clone();
    if let Some(m) = c.as_object_mut() {
        for k in ["start_unix_ms", "start_time", "host"] {
            m.remove(k);
        }
        if let Some(sh) = m.get_mut("shard").and_then(Value::as_object_mut) {
            sh.remove("index");
            sh.remove("start_at_unix_ms");
        }
    }
    sha256_hex(&serde_json::to_vec(&c).unwrap_or_default())
}

/// The component the load was sent to: `generic`, since the schema's
/// `inference_engine` requires the accelerator, which mctrace does not
/// know of a server and which the engine model only simulates.
fn component(rc: &Recomputed) -> Value {
    let info = &rc.summary.run;
    if info.target == "engine" {
        let params = rc
            .summary
            .engine
            .as_ref()
            .and_then(|e| e.get("params"))
            .cloned()
            .unwrap_or(Value::Null);
        let profile = params.get("profile").cloned().unwrap_or(Value::Null);
        return json!({
            "metadata": {
                "schema_version": "0.0.1",
                "label": ENGINE,
                "cfg_id": sha256_hex(&serde_json::to_vec(&params).unwrap_or_default()),
                "description": "mctrace's engine model (a simulated server in virtual time: \
                                the run's times are its clock's)",
            },
            "standardized": {
                "kind": "generic",
                "tool": "mctrace-engine-model",
                "tool_version": info.version,
                "profile": profile,
            },
            "native": { "config": params },
        });
    }
    // Whose metric names the server's /metrics used, when it was read.
    let tool = rc
        .summary
        .fidelity
        .as_ref()
        .and_then(|f| f.server_engine)
        .and_then(|e| serde_json::to_value(e).ok())
        .unwrap_or(json!("unknown"));
    let mut standard = Map::new();
    standard.insert("kind".into(), json!("generic"));
    standard.insert("tool".into(), tool);
    // mctrace does not ask a server its version.
    standard.insert("tool_version".into(), json!(""));
    if let Some(u) = &info.url {
        standard.insert("url".into(), json!(u));
    }
    standard.insert("endpoint".into(), json!(info.endpoint));
    if let Some(m) = &info.model {
        // The shape of `inference_engine`'s model, where readers look.
        standard.insert("model".into(), json!({ "name": m }));
    }
    let cfg = json!({ "url": info.url, "endpoint": info.endpoint, "model": info.model });
    json!({
        "metadata": {
            "schema_version": "0.0.1",
            "label": SERVER,
            "cfg_id": sha256_hex(&serde_json::to_vec(&cfg).unwrap_or_default()),
            "description": "the OpenAI-compatible server mc-replay sent the load to",
        },
        "standardized": standard,
        "native": {},
    })
}

/// `results`: request counts, lengths, latencies and rates, and the
/// prefix-cache hit rate the answers reported.
fn results(run: &Run, rc: &Recomputed) -> Value {
    let s = &rc.summary;
    let ok: Vec<&RequestResult> = run
        .results
        .iter()
        .filter(|r| !r.warmup && r.is_ok())
        .collect();
    let mut out = Map::new();
    out.insert(
        "request_performance".into(),
        json!({ "aggregate": {
            "requests": requests(s, &ok),
            "latency": latency(&s.metrics, &ok),
            "throughput": throughput(s),
        }}),
    );
    if let Some(o) = observability(rc) {
        out.insert("observability".into(), o);
    }
    Value::Object(out)
}

/// The request counts, and the input and output lengths of the requests
/// that succeeded (`ok`).
fn requests(s: &Summary, ok: &[&RequestResult]) -> Map<String, Value> {
    // Requests still in flight when the run was stopped did not fail:
    // they are the schema's `incomplete`, the rest of mc-replay's failures
    // its `failures` (total = ok + failures + incomplete).
    let cancelled = s.errors.get(&ErrorKind::Cancelled).copied().unwrap_or(0);
    let mut requests = Map::new();
    requests.insert("total".into(), json!(s.requests.sent));
    requests.insert(
        "failures".into(),
        json!(s.requests.failed.saturating_sub(cancelled)),
    );
    requests.insert("incomplete".into(), json!(cancelled));
    let lengths = |f: fn(&RequestResult) -> Option<u64>| {
        let v: Vec<f64> = ok.iter().filter_map(|r| f(r)).map(|n| n as f64).collect();
        of_values(v, "count")
    };
    if let Some(v) = lengths(|r| r.input_tokens) {
        requests.insert("input_length".into(), v);
    }
    if let Some(v) = lengths(|r| r.completion_tokens) {
        requests.insert("output_length".into(), v);
    }
    requests
}

/// The latency distributions, in seconds, and NTPOT from the requests
/// that succeeded (`ok`).
fn latency(m: &Metrics, ok: &[&RequestResult]) -> Map<String, Value> {
    let mut latency = Map::new();
    let mut put = |name: &str, st: &Option<Stats>, units: &str| {
        if let Some(st) = st {
            latency.insert(name.into(), seconds(st, units));
        }
    };
    put("time_to_first_token", &m.ttft, "s");
    put("time_per_output_token", &m.tpot, "s/token");
    put("inter_token_latency", &m.itl, "s/token");
    put("request_latency", &m.e2e, "s");
    // E2E over output tokens, the first included (NTPOT).
    let ntpot: Vec<f64> = ok
        .iter()
        .filter_map(|r| match (r.e2e_ms, r.completion_tokens) {
            (Some(e), Some(n)) if n > 0 => Some(e / 1000.0 / n as f64),
            _ => None,
        })
        .collect();
    if let Some(v) = of_values(ntpot, "s/token") {
        latency.insert("normalized_time_per_output_token".into(), v);
    }
    latency
}

/// The token and request rates.
fn throughput(s: &Summary) -> Value {
    let rate = |v: f64, units: &str| json!({ "units": units, "mean": v });
    json!({
        "input_token_rate": rate(s.input_token_throughput, "tokens/s"),
        "output_token_rate": rate(s.output_token_throughput, "tokens/s"),
        "total_token_rate": rate(s.input_token_throughput + s.output_token_throughput, "tokens/s"),
        "request_rate": rate(s.request_throughput, "queries/s"),
    })
}

/// The prefix-cache hit rate, as the stack component's. It belongs to the
/// component, so only a described run (which has one) carries it.
fn observability(rc: &Recomputed) -> Option<Value> {
    let (Some(h), true) = (rc.hit_rate, rc.described) else {
        return None;
    };
    let label = if rc.summary.run.target == "engine" {
        ENGINE
    } else {
        SERVER
    };
    Some(json!({ "components": [{
        "component_label": label,
        "aggregate": { "cache_hit_rate": { "units": "percent", "mean": h * 100.0 } },
    }]}))
}

/// A distribution of mc-replay's (in ms) as the schema's `Statistics`,
/// in seconds (`s`, or `s/token`): the unit llm-d-benchmark's own
/// converters write, so dashboards need not convert.
fn seconds(st: &Stats, units: &str) -> Value {
    // Whole µs (the distributions' resolution) over 10^6: the nearest
    // double to the decimal, so 6.675 ms prints 0.006675, not the
    // 0.0066749999999999995 of 6.675 / 1000.
    let s = |ms: f64| (ms * 1000.0).round() / 1e6;
    json!({
        "units": units,
        "mean": s(st.mean),
        "stddev": s(st.std),
        "min": s(st.min),
        "p50": s(st.p50),
        "p90": s(st.p90),
        "p95": s(st.p95),
        "p99": s(st.p99),
        "p99p9": s(st.p99_9),
        "max": s(st.max),
    })
}

/// `Statistics` of a list of values: exact mean and population standard
/// deviation, percentiles by nearest rank (a value that occurred).
fn of_values(mut v: Vec<f64>, units: &str) -> Option<Value> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable_by(f64::total_cmp);
    let n = v.len() as f64;
    let mean = crate::stats::mean(&v);
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    let rank = |q: f64| v[((q * n).ceil() as usize).clamp(1, v.len()) - 1];
    Some(json!({
        "units": units,
        "mean": mean,
        "stddev": var.sqrt(),
        "min": v[0],
        "p50": rank(0.5),
        "p90": rank(0.9),
        "p95": rank(0.95),
        "p99": rank(0.99),
        "p99p9": rank(0.999),
        "max": v[v.len() - 1],
    }))
}

/// The schema's `SequenceLength` of the lengths asked for: `fixed` when
/// every row asked the same, else `other` (a trace's lengths follow no
/// named distribution) with the mean as its value.
fn sequence_length(v: &[u64]) -> Option<Value> {
    let (&min, &max) = (v.iter().min()?, v.iter().max()?);
    if min == max {
        return Some(json!({ "distribution": "fixed", "value": min }));
    }
    let x: Vec<f64> = v.iter().map(|&n| n as f64).collect();
    let mean = crate::stats::mean(&x);
    let var = x.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / x.len() as f64;
    Some(json!({
        "distribution": "other",
        "value": mean,
        "std_dev": var.sqrt(),
        "min": min,
        "max": max,
    }))
}

/// Requests per session, over the sessions of more than one turn's
/// trace (none when no row is a later turn).
fn turns_per_session(measured: &[&RequestResult]) -> Option<Value> {
    if !measured.iter().any(|r| r.turn > 0) {
        return None;
    }
    let mut per: BTreeMap<&str, u64> = BTreeMap::new();
    for r in measured {
        if let Some(s) = &r.session_id {
            *per.entry(s.as_str()).or_default() += 1;
        }
    }
    sequence_length(&per.into_values().collect::<Vec<_>>())
}

/// `2026-11-27T09:54:27.646Z` from ms since the Unix epoch (truncated to
/// the ms, as the run description's `start_time` is to the second, so the
/// two agree).
fn iso8601_ms(unix_ms: f64) -> String {
    let ms = unix_ms.max(0.0).floor() as u64;
    let day = utc_iso8601(ms / 1000);
    let base = day.strip_suffix('Z').unwrap_or(&day);
    format!("{base}.{:03}Z", ms % 1000)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// serde_json's pretty printer with every float in plain decimal with a
/// point (`0.000001`, `2.0`), never an exponent: YAML 1.1 loaders
/// (PyYAML's `safe_load`, which llm-d-benchmark reads reports with) take
/// `1e-06` and `1e+20` for strings.
#[derive(Default)]
pub struct Plain(PrettyFormatter<'static>);

impl Plain {
    /// `x` in plain decimal: Rust's `Display` (the shortest digits that
    /// read back as `x`, never an exponent), with `.0` when it has no
    /// point.
    pub fn decimal(x: f64) -> String {
        let s = x.to_string();
        if s.contains('.') || !x.is_finite() {
            s
        } else {
            format!("{s}.0")
        }
    }
}

impl Formatter for Plain {
    fn write_f64<W: ?Sized + io::Write>(&mut self, w: &mut W, value: f64) -> io::Result<()> {
        w.write_all(Plain::decimal(value).as_bytes())
    }
    fn write_f32<W: ?Sized + io::Write>(&mut self, w: &mut W, value: f32) -> io::Result<()> {
        self.write_f64(w, f64::from(value))
    }
    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object_value(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_plain_decimals_yaml_reads_as_numbers() {
        // PyYAML 6 (`yaml.safe_load`) reads `1e-06` and `1e+20` as str;
        // each form below it reads as float (checked by hand).
        for (x, want) in [
            (1e-6, "0.000001"),
            (0.007784, "0.007784"),
            (2.0, "2.0"),
            (1e20, "100000000000000000000.0"),
            (-0.5, "-0.5"),
        ] {
            assert_eq!(Plain::decimal(x), want);
        }
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(&mut out, Plain::default());
        json!({"a": [1e-7, 3], "b": {}})
            .serialize(&mut ser)
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\n  \"a\": [\n    0.0000001,\n    3\n  ],\n  \"b\": {}\n}"
        );
    }

    #[test]
    fn times_keep_their_milliseconds() {
        // 1795773267646.822 ms: `date -u -d @1795773267.646 +%FT%T.%3NZ`
        // prints 2026-11-27T09:54:27.646Z.
        assert_eq!(
            iso8601_ms(1_795_773_267_646.822),
            "2026-11-27T09:54:27.646Z"
        );
        assert_eq!(iso8601_ms(999.6), "1970-01-01T00:00:00.999Z");
    }

    #[test]
    fn nearest_rank_statistics_of_counts() {
        // 1..=10: mean 5.5, population std sqrt(8.25), p50 the 5th value,
        // p90 the 9th, p95..max the 10th.
        let v = of_values((1..=10).map(f64::from).collect(), "count").unwrap();
        assert_eq!(v["mean"], json!(5.5));
        assert!((v["stddev"].as_f64().unwrap() - 8.25f64.sqrt()).abs() < 1e-12);
        assert_eq!(
            [
                &v["min"],
                &v["p50"],
                &v["p90"],
                &v["p95"],
                &v["p99p9"],
                &v["max"]
            ],
            [
                &json!(1.0),
                &json!(5.0),
                &json!(9.0),
                &json!(10.0),
                &json!(10.0),
                &json!(10.0)
            ]
        );
        assert_eq!(of_values(Vec::new(), "count"), None);
    }

    #[test]
    fn sequence_lengths_fixed_or_other() {
        assert_eq!(
            sequence_length(&[16, 16]).unwrap(),
            json!({"distribution": "fixed", "value": 16})
        );
        let v = sequence_length(&[10, 30]).unwrap();
        assert_eq!(v["distribution"], "other");
        assert_eq!(
            (v["value"].clone(), v["std_dev"].clone()),
            (json!(20.0), json!(10.0))
        );
        assert_eq!((v["min"].clone(), v["max"].clone()), (json!(10), json!(30)));
        assert_eq!(sequence_length(&[]), None);
    }
}
