//! Many engines behind a router (issue 34 §2): `--engine-workers N --router`
//! in virtual time, and `--url A,B --router` against real servers.

use std::collections::{BTreeMap, BTreeSet};

use mctrace::engine::{row_blocks, Cluster, Engine, EngineParams, EngineRequest, Finished};
use mctrace::results::line::RequestResult;
use proptest::prelude::*;
use serde_json::Value;

use crate::util::run_code;

struct Ran {
    stdout: String,
    results: Vec<RequestResult>,
    summary: Value,
}

/// mc-replay on `trace` with `args`; the result lines in written order.
fn replay(args: &[&str], trace: &str) -> Ran {
    let run = crate::util::replay_with_summary(args, trace);
    let results = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    Ran {
        stdout: run.stdout,
        results,
        summary: run.summary,
    }
}

/// `sessions` conversations of 3 turns, each its own 4-block prefix growing
/// by 2 blocks a turn (16-token blocks), 10 s apart, turns 5 s apart: the
/// engine is idle whenever a request arrives.
fn spaced_sessions(sessions: u64) -> String {
    let mut out = String::new();
    for s in 0..sessions {
        let mut ids: Vec<u64> = (0..4).map(|j| s * 100 + j).collect();
        for turn in 0..3u64 {
            let time = if turn == 0 {
                format!("\"timestamp\":{},", s * 10_000)
            } else {
                "\"delay\":5000,".to_string()
            };
            out.push_str(&format!(
                "{{{time}\"session_id\":\"s{s}\",\"input_length\":{},\"output_length\":4,\"hash_ids\":{:?}}}\n",
                ids.len() * 16,
                ids
            ));
            ids.extend([s * 100 + 10 + 2 * turn, s * 100 + 11 + 2 * turn]);
        }
    }
    out
}

/// The request's dispatch number (the end of its `request_id`).
fn seq(r: &RequestResult) -> u64 {
    r.request_id.rsplit('-').next().unwrap().parse().unwrap()
}

fn without_clock(mut s: Value) -> Value {
    s["engine"]["wall_ms"] = Value::Null;
    s["run"]["start_unix_ms"] = Value::Null;
    s["run"]["start_time"] = Value::Null;
    s
}

#[test]
fn one_worker_is_the_single_engine_exactly() {
    let trace = spaced_sessions(4);
    let plain = replay(&[], &trace);
    for router in ["round-robin", "least-loaded", "prefix"] {
        let one = replay(&["--engine-workers", "1", "--router", router], &trace);
        assert_eq!(one.stdout, plain.stdout, "--router {router}");
        assert_eq!(
            without_clock(one.summary),
            without_clock(plain.summary.clone())
        );
    }
    assert!(plain.summary.get("router").is_none());
    assert!(plain.summary["run"]["options"].get("workers").is_none());
    assert!(!plain.stdout.contains("\"worker\""));
}

#[test]
fn routers_choose_as_worked_by_hand_on_idle_workers() {
    let trace = spaced_sessions(4);
    let workers = |args: &[&str]| -> Vec<(u64, String, u32)> {
        let r = replay(args, &trace);
        let mut v: Vec<_> = r
            .results
            .iter()
            .map(|x| (seq(x), x.session_id.clone().unwrap(), x.worker.unwrap()))
            .collect();
        v.sort();
        v
    };
    // Round-robin: request k (in dispatch order) to worker k mod 4.
    let rr = workers(&["--engine-workers", "4", "--router", "round-robin"]);
    assert_eq!(rr.len(), 12);
    for (k, _, w) in &rr {
        assert_eq!(u64::from(*w), k % 4);
    }
    // Every worker idle at each arrival: least-loaded's tie goes to worker 0.
    let ll = workers(&["--engine-workers", "4", "--router", "least-loaded"]);
    assert!(ll.iter().all(|(_, _, w)| *w == 0), "{ll:?}");
    // Prefix: a session's first turn overlaps nobody (the tie: worker 0);
    // its later turns overlap worker 0 alone. All on 0, as Dynamo's cost
    // says with no load anywhere.
    let px = workers(&["--engine-workers", "4", "--router", "prefix"]);
    assert!(px.iter().all(|(_, _, w)| *w == 0), "{px:?}");
}

#[test]
fn prefix_routing_keeps_a_session_where_its_prefix_is_under_load() {
    // 6 sessions start together (each its own prefix) on 4 workers, so
    // load spreads them; their later turns must follow their prefix. At
    // weight 4 a later turn's own worker costs at most 4·8 + 52 (the other
    // session's request there, 48 blocks of prompt and 4 of output) = 84,
    // any other at least 4·40 = 160.
    let mut trace = String::new();
    for s in 0..6u64 {
        let mut ids: Vec<u64> = (0..32).map(|j| s * 1000 + j).collect();
        for turn in 0..3u64 {
            let time = if turn == 0 {
                "\"timestamp\":0,".to_string()
            } else {
                "\"delay\":2000,".to_string()
            };
            trace.push_str(&format!(
                "{{{time}\"session_id\":\"s{s}\",\"input_length\":{},\"output_length\":64,\"hash_ids\":{:?}}}\n",
                ids.len() * 16,
                ids
            ));
            ids.extend((0..8).map(|j| s * 1000 + 100 + turn * 10 + j));
        }
    }
    let run = |router: &str| {
        let args = ["--engine-workers", "4", "--router", router];
        replay(
            &[&args[..], &["--router-overlap-weight", "4"]].concat(),
            &trace,
        )
    };
    let px = run("prefix");
    let mut by_session: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for r in &px.results {
        by_session
            .entry(r.session_id.clone().unwrap())
            .or_default()
            .insert(r.worker.unwrap());
    }
    assert!(by_session.values().all(|w| w.len() == 1), "{by_session:?}");
    let used: BTreeSet<u32> = by_session.values().flatten().copied().collect();
    assert_eq!(used.len(), 4, "the first turns spread over every worker");
    // Round-robin sends later turns elsewhere (6 first turns on 4 workers:
    // the second turns start off the first's worker): fewer hits.
    let rr = run("round-robin");
    let hit = |r: &Ran| r.summary["router"]["hit_rate"].as_f64().unwrap();
    assert!(hit(&px) > hit(&rr), "{} vs {}", hit(&px), hit(&rr));
    // The router's report adds up to the engines' totals.
    let router = &px.summary["router"];
    let engine = &px.summary["engine"]["stats"];
    assert_eq!(router["policy"], "prefix");
    assert_eq!(px.summary["run"]["options"]["workers"], 4);
    assert_eq!(px.summary["run"]["options"]["router"], "prefix");
    assert_eq!(router["workers"].as_array().unwrap().len(), 4);
    let sum = |k: &str| -> u64 {
        router["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w[k].as_u64().unwrap())
            .sum()
    };
    assert_eq!(sum("routed"), 18);
    assert_eq!(
        sum("requests"),
        engine["requests_finished"].as_u64().unwrap()
    );
    assert_eq!(
        sum("cached_tokens"),
        engine["cached_tokens"].as_u64().unwrap()
    );
    assert_eq!(router["hit_rate"], engine["hit_rate"]);
    // Each request's cached tokens are its worker's: a session's turns 2
    // and 3 find their whole previous prompt (32 and 40 blocks of 16).
    for r in px.results.iter().filter(|r| r.turn > 0) {
        assert_eq!(
            r.cached_tokens,
            Some((24 + 8 * u64::from(r.turn)) * 16),
            "{r:?}"
        );
    }
}

#[test]
fn bad_routing_options_are_usage_errors() {
    let ids = "{\"timestamp\":0,\"input_length\":32,\"output_length\":2,\"hash_ids\":[1,2]}\n";
    let text = "{\"timestamp\":0,\"text_input\":\"hello there\",\"output_length\":2}\n";
    let cases: [(&[&str], &str, &str); 5] = [
        (&["--engine-workers", "0"], ids, "--engine-workers"),
        (
            &["--engine-workers", "2", "--router", "prefix"],
            text,
            "no row of this trace has hash_ids",
        ),
        (
            &["--url", "http://127.0.0.1:9", "--engine-workers", "2"],
            ids,
            "--url http://a:8000,http://b:8000",
        ),
        (&["--url", "http://127.0.0.1:9,ftp://x"], ids, "ftp://x"),
        (&["--router", "nearest"], ids, "nearest"),
    ];
    for (args, trace, says) in cases {
        let stderr = run_code("mc-replay", args, trace, 2);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn real_servers_and_the_cluster_route_alike_when_arrivals_are_apart() {
    // Steps of at least 20 ms. Row 1 (50 output tokens, > 1 s) is still
    // running when row 2 arrives at 100 ms with another prefix: worker 0
    // has ceil(114 / 16) = 8 blocks in flight, so row 2 goes to worker 1
    // (cost 64/16 = 4 < 4 + 8).
    // At 3 s both ended: row 3 shares row 2's blocks (worker 1: cost 2 <
    // 4), row 4 row 1's (worker 0).
    let trace = "{\"timestamp\":0,\"input_length\":64,\"output_length\":50,\"hash_ids\":[1,2,3,4]}\n\
                 {\"timestamp\":100,\"input_length\":64,\"output_length\":4,\"hash_ids\":[5,6,7,8]}\n\
                 {\"timestamp\":3000,\"input_length\":64,\"output_length\":4,\"hash_ids\":[5,6,9,10]}\n\
                 {\"timestamp\":4000,\"input_length\":64,\"output_length\":4,\"hash_ids\":[1,2,3,11]}\n";
    let flags = ["--t-fix-ms", "20"];
    let routing = ["--router", "prefix"];
    let virt = replay(
        &[&["--engine-workers", "2"][..], &routing, &flags].concat(),
        trace,
    );
    let a = crate::replay::Mock::start(&[&["--engine"][..], &flags[..]].concat());
    let b = crate::replay::Mock::start(&[&["--engine"][..], &flags[..]].concat());
    let urls = format!("{},{}", a.url, b.url);
    let real = replay(&[&["--url", urls.as_str()][..], &routing].concat(), trace);
    let choices = |r: &Ran| {
        let mut v: Vec<(u64, Option<u32>, Option<u64>)> = r
            .results
            .iter()
            .map(|x| (x.line, x.worker, x.cached_tokens))
            .collect();
        v.sort();
        v
    };
    let want = vec![
        (1, Some(0), Some(0)),
        (2, Some(1), Some(0)),
        (3, Some(1), Some(32)),
        (4, Some(0), Some(48)),
    ];
    assert_eq!(choices(&virt), want);
    assert_eq!(choices(&real), want);
    let names: Vec<&str> = real.summary["router"]["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [a.url.as_str(), b.url.as_str()]);
    assert_eq!(
        real.summary["router"]["hit_rate"],
        virt.summary["router"]["hit_rate"]
    );
}

#[test]
fn each_server_is_scraped_and_checked_on_the_requests_it_was_sent() {
    // The routing worked out above: worker 0 gets rows 1 and 4 (row 4
    // finds 3 of row 1's blocks: 48 of 128 prompt tokens), worker 1 rows 2
    // and 3 (32 of 128). Each server's /metrics counts what it was sent,
    // and each prediction must use only those rows: over the whole trace
    // the prediction would be (48 + 32) / 256 for both.
    let trace = "{\"timestamp\":0,\"input_length\":64,\"output_length\":50,\"hash_ids\":[1,2,3,4]}\n\
                 {\"timestamp\":100,\"input_length\":64,\"output_length\":4,\"hash_ids\":[5,6,7,8]}\n\
                 {\"timestamp\":3000,\"input_length\":64,\"output_length\":4,\"hash_ids\":[5,6,9,10]}\n\
                 {\"timestamp\":4000,\"input_length\":64,\"output_length\":4,\"hash_ids\":[1,2,3,11]}\n";
    let flags = ["--engine", "--t-fix-ms", "20"];
    let a = crate::replay::Mock::start(&flags);
    let b = crate::replay::Mock::start(&flags);
    let urls = format!("{},{}", a.url, b.url);
    let dir = tempfile::tempdir().unwrap();
    let scrapes = dir.path().join("m.jsonl");
    let real = crate::util::replay_with_summary(
        &[
            "--url",
            urls.as_str(),
            "--router",
            "prefix",
            "--metrics-out",
            scrapes.to_str().unwrap(),
        ],
        trace,
    );
    assert!(real.summary["fidelity"].is_null(), "{}", real.summary);
    let each = real.summary["fidelity_by_server"].as_array().unwrap();
    assert_eq!(each.len(), 2, "{}", real.summary);
    for (f, (url, hits)) in each.iter().zip([(&a.url, 48.0), (&b.url, 32.0)]) {
        assert_eq!(f["metrics_url"], format!("{url}/metrics"), "{f}");
        let h = &f["hit_rate"];
        assert_eq!(h["server_queried_tokens"], 128.0, "{f}");
        assert_eq!(h["server_hit_tokens"], hits, "{f}");
        assert_eq!(h["observed"], hits / 128.0, "{f}");
        assert_eq!(h["predicted"], hits / 128.0, "{f}");
        assert_eq!(h["requests"], 2, "{f}");
        assert_eq!(f["flagged"], false, "{f}");
    }
    // Both servers' scrapes in the one file, each line naming its server.
    let text = std::fs::read_to_string(&scrapes).unwrap();
    for url in [&a.url, &b.url] {
        let want = format!("{url}/metrics");
        let n = text
            .lines()
            .filter(|l| serde_json::from_str::<Value>(l).unwrap()["url"] == want.as_str())
            .count();
        assert!(n >= 2, "{n} scrapes of {want} in:\n{text}");
    }
    // The table names each server's check.
    assert!(real
        .stderr
        .contains(&format!("server metrics from {}/metrics", a.url)));
    assert!(real
        .stderr
        .contains(&format!("server metrics from {}/metrics", b.url)));
    // One --metrics-url cannot name several servers' metrics.
    let stderr = run_code(
        "mc-replay",
        &[
            "--url",
            urls.as_str(),
            "--metrics-url",
            &format!("{}/metrics", a.url),
        ],
        trace,
        2,
    );
    assert!(
        stderr.contains("--metrics-url names one server"),
        "{stderr}"
    );
}

/// Requests at whole-ms offsets, some sharing a prefix.
fn requests() -> impl Strategy<Value = Vec<(u64, u64, u64, u64)>> {
    prop::collection::vec((0u64..30, 0u64..3, 1u64..6, 1u64..20), 1..30)
}

/// Drives `advance` and `add` as the replay does (each request added once
/// the clock reaches its arrival, arriving no later than the clock),
/// through `advance`; returns every end and the clock after each call.
fn drive(
    reqs: &[(u64, u64, u64, u64)],
    mut add: impl FnMut(EngineRequest),
    mut advance: impl FnMut(Option<u64>, &mut Vec<Finished>) -> u64,
) -> Vec<(Vec<Finished>, u64)> {
    let mut calls = Vec::new();
    let mut t = 0;
    let mut now = 0;
    for (i, &(gap, base, blocks, out)) in reqs.iter().enumerate() {
        t += gap * 1000;
        while now < t {
            let mut got = Vec::new();
            now = advance(Some(t), &mut got);
            calls.push((got, now));
        }
        let ids: Vec<u64> = (0..blocks).map(|j| base * 100 + j).collect();
        add(EngineRequest {
            id: i as u64,
            arrival_us: t.min(now),
            blocks: row_blocks(&ids, blocks * 16, 16, 16, i as u64),
            prompt_tokens: blocks * 16,
            output_tokens: out,
        });
    }
    for _ in 0..10_000 {
        let mut got = Vec::new();
        now = advance(None, &mut got);
        let empty = got.is_empty();
        calls.push((got, now));
        if empty {
            break;
        }
    }
    calls
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The cluster's event loop with one engine is that engine's own loop:
    /// the same ends from the same calls, the same clock after each.
    #[test]
    fn a_cluster_of_one_is_the_engine_call_for_call(reqs in requests(), budget in 16u64..200) {
        let params = EngineParams {
            kv_tokens: 64 * 16,
            max_batched_tokens: budget,
            ..EngineParams::default()
        };
        let engine = std::cell::RefCell::new(Engine::new(params.clone()));
        let alone = drive(
            &reqs,
            |r| engine.borrow_mut().add(r),
            |u, out| {
                let mut e = engine.borrow_mut();
                e.advance(u, out);
                e.now_us()
            },
        );
        let cluster = std::cell::RefCell::new(Cluster::new(params, 1));
        let together = drive(
            &reqs,
            |r| cluster.borrow_mut().add(0, r),
            |u, out| {
                let mut c = cluster.borrow_mut();
                let mut tagged = Vec::new();
                c.advance(u, &mut tagged);
                out.extend(tagged.into_iter().map(|(_, f)| f));
                c.now_us()
            },
        );
        prop_assert_eq!(alone, together);
        prop_assert_eq!(engine.borrow().stats(), cluster.borrow().stats());
    }
}
