//! mc-replay's connections: how many it opens against a slow server, and
//! what the summary says about them (issue 37: an uncapped client opened
//! 13,611 connections for 20,000 requests and left more sockets in
//! TIME_WAIT than the ephemeral port range holds).

use std::io::BufRead;
use std::process::Command;

use serde_json::Value;

use crate::util::{assert_success, MockServer};

/// `n` tiny rows due `gap_ms` apart (Mooncake timestamps are in ms).
fn rows(n: usize, gap_ms: f64) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{{\"timestamp\":{:.1},\"input_length\":4,\"output_length\":1}}\n",
                i as f64 * gap_ms
            )
        })
        .collect()
}

/// mc-mock with `args`, its request log read away on a thread (a full
/// pipe would hold up the requests it logs); its URL and the running mock.
fn mock(args: &[&str]) -> (String, crate::util::Killed) {
    let MockServer {
        child, log, addr, ..
    } = MockServer::start(args);
    std::thread::spawn(move || log.lines().map_while(Result::ok).for_each(drop));
    (format!("http://{addr}"), child)
}

/// Replays `trace` against `url` with `extra` options; the summary JSON.
fn replay(url: &str, trace: &str, extra: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("trace.jsonl");
    std::fs::write(&input, trace).unwrap();
    let summary = dir.path().join("summary.json");
    let out = Command::new(assert_cmd::cargo::cargo_bin("mc-replay"))
        .arg(&input)
        .args(["--url", url, "--model", "m", "--no-server-metrics"])
        .args(["--timeout", "60", "-o", "/dev/null", "--summary"])
        .arg(&summary)
        .args(extra)
        .output()
        .unwrap();
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("connections: "), "{stderr}");
    serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap()
}

/// The case: answers taking 50 ms at 5,000 req/s, with no
/// `--max-connections`. About 250 requests are in flight (Little's law);
/// the client grows its cap to what the measured rate and latency call
/// for and never connects past it, and every request is answered.
/// Timings on a loaded machine are not asserted: a late client or mock
/// raises the measured latency, and the cap with it, but connects stay
/// under whatever cap it reached.
#[test]
fn a_slow_server_never_drives_connects_above_the_cap() {
    let (url, _mock) = mock(&["--ttft-ms", "50"]);
    let n = 2_000;
    let s = replay(&url, &rows(n, 0.2), &[]);
    assert_eq!(s["requests"]["ok"], n as u64, "{s:#}");
    let c = &s["connections"];
    let connects = c["connects"].as_u64().expect("connects counted");
    let cap = c["cap"].as_u64().expect("a cap without --max-connections");
    assert_eq!(c["auto"], true, "{c}");
    assert!(connects >= 1 && connects <= cap, "{c}");
    assert!(c["most_open"].as_u64().unwrap() <= cap, "{c}");
    let per = c["per_request"].as_f64().unwrap();
    assert!((per - connects as f64 / n as f64).abs() < 1e-9, "{c}");
    assert_eq!(s["run"]["options"]["max_connections"], Value::Null);
}

/// `--max-connections N` is the cap, and 0 is none: the summary says which.
#[test]
fn max_connections_sets_the_cap_and_zero_removes_it() {
    let (url, _mock) = mock(&["--ttft-ms", "20"]);
    let trace = rows(40, 0.5);
    let s = replay(&url, &trace, &["--max-connections", "3"]);
    let c = &s["connections"];
    assert_eq!(
        (c["cap"].as_u64(), c["auto"].as_bool()),
        (Some(3), Some(false))
    );
    assert!(c["connects"].as_u64().unwrap() <= 3, "{c}");
    assert_eq!(s["run"]["options"]["max_connections"], 3);
    let s = replay(&url, &trace, &["--max-connections", "0"]);
    let c = &s["connections"];
    assert_eq!(
        (c["cap"].as_u64(), c["auto"].as_bool()),
        (None, Some(false))
    );
    assert!(c["connects"].as_u64().unwrap() >= 1, "{c}");
    assert_eq!(s["run"]["options"]["max_connections"], 0);
}
