//! The engine model's invariants (issue 11 §5), on random workloads.

use mctrace::engine::{row_blocks, Engine, EngineParams, EngineRequest, Finished, Profile};
use proptest::prelude::*;

/// A row: (ms after the previous row, shared ids taken from one of three
/// base prefixes, fresh ids, tokens short of the last block, output).
type Row = (u64, usize, usize, usize, u64, u64);

const TRACE_BLOCK: u64 = 32;

fn rows() -> impl Strategy<Value = Vec<Row>> {
    prop::collection::vec(
        (
            0u64..40,
            0usize..3,
            0usize..5,
            1usize..4,
            0u64..32,
            1u64..24,
        ),
        1..40,
    )
}

/// Requests from rows: ids `base·100 + j` are shared, fresh ids are unique.
fn requests(rows: &[Row], gap_scale: u64, engine_block: u64) -> Vec<EngineRequest> {
    let mut t = 0;
    let mut fresh = 1_000_000;
    rows.iter()
        .enumerate()
        .map(|(i, &(gap, base, shared, new, short, out))| {
            t += gap * gap_scale;
            let mut ids: Vec<u64> = (0..shared as u64).map(|j| base as u64 * 100 + j).collect();
            for _ in 0..new {
                fresh += 1;
                ids.push(fresh);
            }
            let len = ids.len() as u64 * TRACE_BLOCK - short;
            EngineRequest {
                id: i as u64,
                arrival_us: t,
                blocks: row_blocks(&ids, len, TRACE_BLOCK, engine_block, i as u64),
                prompt_tokens: len,
                output_tokens: out,
            }
        })
        .collect()
}

fn params(profile: &str, kv_tokens: u64, block: u64, budget: u64) -> EngineParams {
    EngineParams {
        profile: Profile::builtin(profile).unwrap(),
        kv_tokens,
        block_size: block,
        max_batched_tokens: budget,
        max_seqs: 8,
        max_model_len: None,
        prefix_cache: mctrace::engine::PrefixCache::Blocks,
    }
}

/// Feeds requests at their arrival times, as a replay would; returns the
/// finished requests in finishing order and the engine.
fn replay(p: EngineParams, reqs: &[EngineRequest]) -> (Vec<Finished>, Engine) {
    let mut e = Engine::new(p);
    let mut out = Vec::new();
    for r in reqs {
        while e.now_us() < r.arrival_us {
            e.advance(Some(r.arrival_us), &mut out);
        }
        e.add(r.clone());
    }
    while e.in_flight() > 0 {
        e.advance(None, &mut out);
    }
    (out, e)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn same_input_same_output_and_one_finish_per_request(
        rows in rows(),
        kv_blocks in 4u64..64,
        budget in 8u64..200,
        dynamo in any::<bool>(),
    ) {
        let profile = if dynamo { "dynamo-polynomial" } else { "h100-llama3-8b" };
        let reqs = requests(&rows, 1000, 8);
        let p = params(profile, kv_blocks * 8, 8, budget);
        let (a, ea) = replay(p.clone(), &reqs);
        let (b, eb) = replay(p, &reqs);
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(ea.stats(), eb.stats());
        let mut ids: Vec<u64> = a.iter().map(|f| f.id).collect();
        ids.sort_unstable();
        prop_assert_eq!(ids, (0..reqs.len() as u64).collect::<Vec<_>>());
        for f in &a {
            let r = &reqs[f.id as usize];
            if f.rejected.is_none() {
                // Exactly the tokens asked for, in time order, after arrival.
                prop_assert_eq!(f.token_us.len() as u64, r.output_tokens);
                prop_assert!(f.token_us.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(f.first_scheduled_us >= f.arrival_us);
                prop_assert!(f.first_token_us > Some(f.first_scheduled_us));
                prop_assert_eq!(f.token_us.last().copied(), Some(f.end_us));
                prop_assert!(f.cached_tokens < r.prompt_tokens);
            }
        }
    }

    #[test]
    fn more_kv_never_lowers_the_hit_rate(
        rows in rows(),
        // At least 31 blocks of 8: the largest request (7 ids of 32 tokens and
        // 23 output tokens) always fits, so no row is rejected.
        kv_blocks in 31u64..96,
        extra in 1u64..64,
    ) {
        // Rows 10 s apart: the engine is never the bottleneck, so the rows
        // meet the cache one after another (under load, timing decides who
        // computes a shared prefix first, and no such promise holds). A gap
        // of 0 would let more KV batch two rows into one step, where the
        // second cannot hit the blocks the first is computing.
        let rows: Vec<Row> = rows.into_iter().map(|r| (r.0.max(1), r.1, r.2, r.3, r.4, r.5)).collect();
        let reqs = requests(&rows, 10_000_000, 8);
        let (_, small) = replay(params("h100-llama3-8b", kv_blocks * 8, 8, 2048), &reqs);
        let (_, big) = replay(params("h100-llama3-8b", (kv_blocks + extra) * 8, 8, 2048), &reqs);
        let (s, b) = (small.stats(), big.stats());
        prop_assert!(b.cached_tokens >= s.cached_tokens, "{:?} vs {:?}", s, b);
    }
}

/// Mean time from arrival to first scheduling.
fn mean_queueing_us(f: &[Finished]) -> f64 {
    f.iter()
        .map(|f| (f.first_scheduled_us - f.arrival_us) as f64)
        .sum::<f64>()
        / f.len() as f64
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn a_larger_speedup_never_lowers_mean_queueing_delay(rows in rows(), budget in 16u64..256) {
        // mc-replay's --speedup divides the arrival times; here 1, 2 and 4.
        // A request arriving mid-step waits for the step's end, so moving
        // arrivals can line one up with a step boundary: the promise holds
        // up to one step (shrinking proptest's first counterexample: a
        // second request at 8 ms waits 5.4 ms for the end of a decode step,
        // at 4 ms only 2.8 ms for the end of the first one).
        // Ample KV: when blocks run out, who waits depends on which request
        // got its blocks first, and proptest finds workloads where
        // compressing arrivals lowers the mean wait by more than a step
        // (e.g. 33 blocks of 8 tokens: 15.3 ms at speedup 2 vs 22.4 ms at 1).
        let p = params("h100-llama3-8b", 1_000_000, 8, budget);
        let mut last = -1.0;
        for speedup in [1, 2, 4] {
            let reqs = requests(&rows, 4000 / speedup, 8);
            let (f, e) = replay(p.clone(), &reqs);
            let q = mean_queueing_us(&f);
            let step = e.stats().step_ms_max * 1000.0;
            prop_assert!(q + step >= last, "speedup {}: mean queueing {} µs < {} µs", speedup, q, last);
            last = q;
        }
    }
}

// ---- mc-replay against the engine, end to end ----

use crate::replay::schema::RequestResult;
use crate::util::tool;
use serde::Deserialize;
use std::collections::HashMap;

/// The summary's `engine` object as the tests expect it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct EngineOut {
    params: ParamsOut,
    stats: StatsOut,
    wall_ms: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ParamsOut {
    profile: String,
    model: String,
    coefficients: HashMap<String, f64>,
    kv_tokens: u64,
    block_size: u64,
    max_batched_tokens: u64,
    max_seqs: u64,
    max_model_len: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct StatsOut {
    steps: u64,
    requests_finished: u64,
    requests_rejected: u64,
    prompt_tokens: u64,
    cached_tokens: u64,
    hit_rate: f64,
    preemptions: u64,
    batch_size_mean: f64,
    batch_size_p99: u64,
    tokens_per_step_mean: f64,
    tokens_per_step_p99: u64,
    kv_use_mean: f64,
    kv_use_max: f64,
    busy_ms: f64,
    step_ms_max: f64,
    simulated_ms: f64,
}

struct EngineRun {
    results: Vec<RequestResult>,
    stderr: String,
    engine: EngineOut,
}

/// Runs mc-replay without a server; results by line.
fn engine_replay(args: &[&str], trace: &str) -> EngineRun {
    let run = crate::util::replay_with_summary(args, trace);
    let mut results: Vec<RequestResult> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    results.sort_by_key(|r| r.line);
    let engine = serde_json::from_value(run.summary["engine"].clone()).unwrap();
    EngineRun {
        results,
        stderr: run.stderr,
        engine,
    }
}

#[test]
fn without_url_the_dynamo_profile_replays_three_rows_as_computed_by_hand() {
    let trace = "{\"timestamp\":0,\"input_length\":1000,\"output_length\":2,\"hash_ids\":[1,2]}\n\
                 {\"timestamp\":0,\"input_length\":500,\"output_length\":1,\"hash_ids\":[5]}\n\
                 {\"timestamp\":1000,\"input_length\":1000,\"output_length\":1,\"hash_ids\":[1,3]}\n";
    let run = engine_replay(
        &[
            "--engine-profile",
            "dynamo-polynomial",
            "--kv-tokens",
            "16000",
        ],
        trace,
    );
    assert!(
        run.stderr.contains(
            "mc-replay: no --url: simulating dynamo-polynomial in virtual time; \
             pass --url to measure a real server"
        ),
        "{}",
        run.stderr
    );
    let r = &run.results;
    assert_eq!(r.len(), 3);
    for x in r {
        assert_eq!(
            (x.target.as_str(), x.lag_ms, x.status.as_str()),
            ("engine", 0.0, "ok")
        );
    }
    // Step 1 prefills rows 1 and 2 together: X = 1500 new tokens:
    // 4.209989e-7·1500² + 1.518344e-2·1500 + 16.50142 = 0.94725 + 22.77516 + 16.50142 = 40.224 ms.
    assert_eq!(r[0].ttft_ms, Some(40.224));
    assert_eq!(r[1].ttft_ms, Some(40.224));
    assert_eq!(r[1].e2e_ms, Some(40.224));
    // Step 2 decodes row 1: Dynamo's u is its context, 1000 + 1 tokens, over
    // the 16,000 the cache holds: u = 0.0625625:
    // -25.74·0.0625625² + 54.01·0.0625625 + 5.74 = 9.018 ms; row 1 ends at
    // 49.242 ms. (Re-derived when u stopped counting blocks held, 63 of
    // 1000: 9.040 ms, 49.264 ms.)
    assert_eq!(r[0].t_last_ms, Some(49.242));
    assert_eq!(r[0].itl_ms.as_ref().map(|i| i.max), Some(9.018));
    // Row 3 at 1 s hits id 1's 512 tokens; X = 488:
    // 4.209989e-7·488² + 1.518344e-2·488 + 16.50142 = 0.10026 + 7.40952 + 16.50142 = 24.011 ms.
    assert_eq!(r[2].cached_tokens, Some(512));
    assert_eq!(r[2].t_sched_ms, 1000.0);
    assert_eq!(r[2].ttft_ms, Some(24.011));
    let s = &run.engine.stats;
    // 512 cached of 2500 prompt tokens.
    assert_eq!((s.cached_tokens, s.prompt_tokens, s.steps), (512, 2500, 3));
    assert_eq!(run.engine.params.profile, "dynamo-polynomial");
    assert_eq!(run.engine.params.kv_tokens, 16000);
    assert!(
        run.stderr.contains("prefix-cache hit rate   20.48%"),
        "{}",
        run.stderr
    );
}

#[test]
fn engine_flag_forces_the_model_even_with_a_url() {
    // Port 9 (discard) is never contacted.
    let run = engine_replay(
        &["--url", "http://127.0.0.1:9", "--engine", "--t-fix-ms", "1"],
        "{\"timestamp\":0,\"input_length\":10,\"output_length\":3}\n",
    );
    assert!(run
        .stderr
        .contains("mc-replay: --engine: simulating h100-llama3-8b"));
    assert_eq!(run.engine.params.coefficients["t_fix_ms"], 1.0);
    assert_eq!(run.results[0].completion_tokens, Some(3));
}

#[test]
fn engine_usage_errors_name_the_flag() {
    let out = tool("mc-replay")
        .args(["--engine-profile", "dynamo-polynomial", "--k-ms", "1"])
        .write_stdin("{\"timestamp\":0,\"input_length\":10}\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--k-ms belongs to the `roofline`"));
    let out = tool("mc-replay")
        .args(["--turns", "delta"])
        .write_stdin("{\"timestamp\":0,\"input_length\":10}\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Sessions: (session, gap to the session's start in ms, delays of later turns).
type Session = (u64, Vec<u64>);

fn sessions() -> impl Strategy<Value = Vec<Session>> {
    prop::collection::vec((0u64..3000, prop::collection::vec(0u64..2000, 0..4)), 1..8)
}

fn session_trace(sessions: &[Session]) -> String {
    // First turns in timestamp order, then later turns (file order within a session).
    let mut s = String::new();
    for (i, (ts, _)) in sessions.iter().enumerate() {
        s += &format!(
            "{{\"session_id\":\"s{i}\",\"timestamp\":{ts},\"input_length\":{},\"output_length\":{},\"hash_ids\":[{i}]}}\n",
            300 + 7 * i,
            5 + i
        );
    }
    for (i, (_, delays)) in sessions.iter().enumerate() {
        for (k, d) in delays.iter().enumerate() {
            s += &format!(
                "{{\"session_id\":\"s{i}\",\"delay\":{d},\"input_length\":{},\"output_length\":4,\"hash_ids\":[{i},{}]}}\n",
                600 + 300 * k,
                1000 + 10 * i + k
            );
        }
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn session_turns_never_overlap_keep_their_delays_and_every_row_has_one_result(
        sessions in sessions(),
        speedup in prop::sample::select(vec![1u64, 2, 4]),
    ) {
        let trace = session_trace(&sessions);
        let rows = trace.lines().count();
        let sp = speedup.to_string();
        let run = engine_replay(&["--speedup", &sp, "--block-size", "512"], &trace);
        let lines: Vec<u64> = run.results.iter().map(|r| r.line).collect();
        prop_assert_eq!(lines, (1..=rows as u64).collect::<Vec<_>>());
        let mut by_session: HashMap<String, Vec<&RequestResult>> = HashMap::new();
        for r in &run.results {
            prop_assert_eq!(r.status.as_str(), "ok");
            by_session.entry(r.session_id.clone().unwrap()).or_default().push(r);
        }
        for (i, (_, delays)) in sessions.iter().enumerate() {
            let mut turns = by_session.remove(&format!("s{i}")).unwrap();
            turns.sort_by_key(|r| r.turn);
            for (k, d) in delays.iter().enumerate() {
                let (prev, next) = (turns[k], turns[k + 1]);
                // The next turn is due exactly `delay / speedup` after the
                // previous one ended, and the model receives it then.
                let want = prev.t_end_ms + *d as f64 / speedup as f64;
                prop_assert!((next.t_sched_ms - want).abs() < 0.0015, "{:?} {:?}", prev, next);
                prop_assert!(next.t_send_ms >= prev.t_end_ms);
            }
        }
    }

    #[test]
    fn the_hit_rate_is_mc_analyzes_lru_model_when_the_engine_keeps_up(
        rows in prop::collection::vec((0usize..3, 0usize..5, 1usize..3), 1..30),
        cache_blocks in 8u64..40,
    ) {
        // Rows 10 s apart (each ends long before the next arrives), blocks
        // of 16 tokens in both, whole blocks only, and a fresh last block
        // per row, so neither model's edge rules (partial blocks, the
        // engine's prompt − 1 cap) come into play; output_length 1 computes
        // no output KV.
        let mut fresh = 100_000;
        let mut trace = String::new();
        for (i, &(base, shared, new)) in rows.iter().enumerate() {
            let mut ids: Vec<u64> = (0..shared as u64).map(|j| base as u64 * 100 + j).collect();
            for _ in 0..new {
                fresh += 1;
                ids.push(fresh);
            }
            trace += &format!(
                "{{\"timestamp\":{},\"input_length\":{},\"output_length\":1,\"hash_ids\":{:?}}}\n",
                i * 10_000,
                ids.len() * 16,
                ids
            );
        }
        let kv = (cache_blocks * 16).to_string();
        let run = engine_replay(
            &["--block-size", "16", "--engine-block-size", "16", "--kv-tokens", &kv],
            &trace,
        );
        let analyze = tool("mc-analyze")
            .args(["--json", "--block-size", "16", "--cache-blocks", &cache_blocks.to_string()])
            .write_stdin(trace.clone())
            .output()
            .unwrap();
        prop_assert!(analyze.status.success());
        let a: serde_json::Value = serde_json::from_slice(&analyze.stdout).unwrap();
        let lru = &a["cache"]["results"][1];
        prop_assert_eq!(lru["cache_blocks"].as_u64(), Some(cache_blocks));
        prop_assert_eq!(run.engine.stats.cached_tokens as f64, lru["hit_tokens"].as_f64().unwrap());
        prop_assert_eq!(run.engine.stats.hit_rate, lru["hit_rate"].as_f64().unwrap());
        prop_assert_eq!(run.engine.stats.preemptions, 0);
    }
}

#[test]
fn mc_mock_engine_serves_the_same_model_in_real_time() {
    // Steps of at least 100 ms, so real time's few ms of noise stay small.
    // Rows 1 and 2 arrive together: one is prefilled in step 1 (the
    // 1000-token budget is full), the other queues behind it; row 3 comes
    // 1 s later and shares row 1's first 512 tokens.
    let trace = "{\"timestamp\":0,\"input_length\":1000,\"output_length\":3,\"hash_ids\":[1,2]}\n\
                 {\"timestamp\":0,\"input_length\":1000,\"output_length\":3,\"hash_ids\":[3,4]}\n\
                 {\"timestamp\":1000,\"input_length\":1000,\"output_length\":2,\"hash_ids\":[1,5]}\n";
    let flags = ["--t-fix-ms", "100", "--max-batched-tokens", "1000"];
    let virt = engine_replay(&flags, trace);
    let mock = crate::replay::Mock::start(&[&["--engine"][..], &flags[..]].concat());
    let real = crate::replay::replay(&mock.url, &[], trace);
    assert_eq!(real.code, 0, "{}", real.stderr);
    let mut real_r = real.results.clone();
    real_r.sort_by_key(|r| r.line);
    let ttfts = |r: &[RequestResult]| {
        let mut v: Vec<f64> = r[..2].iter().map(|x| x.ttft_ms.unwrap()).collect();
        v.sort_by(f64::total_cmp);
        v.push(r[2].ttft_ms.unwrap());
        v
    };
    let (v, r) = (ttfts(&virt.results), ttfts(&real_r));
    // The virtual run: alone, 100 + 0.0044 + sqrt(6.5² + 20²) + 8.5e-7·1000·500
    // = 100 + 0.0044 + 21.02974 + 0.425 = 121.459 ms; the queued row waits for
    // it and is prefilled in two chunks.
    assert_eq!(v[0], 121.459);
    assert!(v[1] > 300.0, "{v:?}");
    for (a, b) in v.iter().zip(&r) {
        assert!((a - b).abs() < 40.0, "virtual {v:?} vs real {r:?}");
    }
    assert_eq!(real_r[2].cached_tokens, Some(512));
    assert_eq!(virt.results[2].cached_tokens, Some(512));
    assert_eq!(real_r[0].completion_tokens, Some(3));
}

#[test]
fn text_rows_hash_their_words_and_runs_repeat_byte_for_byte() {
    let words = |n: usize, tag: &str| -> String {
        (0..n)
            .map(|i| format!("{tag}{i}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    // Row 2 repeats row 1's first 32 words (2 blocks of 16) and then differs.
    let trace = format!(
        "{{\"timestamp\":0,\"text_input\":\"{}\",\"output_length\":2}}\n\
         {{\"timestamp\":1000,\"text_input\":\"{} {}\",\"output_length\":2}}\n",
        words(48, "w"),
        words(32, "w"),
        words(16, "x")
    );
    let run = engine_replay(&[], &trace);
    assert_eq!(run.results[0].prompt_tokens, Some(48));
    assert_eq!(run.results[0].cached_tokens, Some(0));
    assert_eq!(run.results[1].cached_tokens, Some(32));
    // The same input and seed give the same result lines, byte for byte.
    let once = tool("mc-replay")
        .write_stdin(trace.clone())
        .output()
        .unwrap();
    let twice = tool("mc-replay").write_stdin(trace).output().unwrap();
    assert!(once.status.success());
    assert!(!once.stdout.is_empty());
    assert_eq!(once.stdout, twice.stdout);
}

#[test]
fn a_row_too_large_for_the_kv_cache_is_a_failed_request() {
    let out = tool("mc-replay")
        .args(["--kv-tokens", "64"])
        .write_stdin("{\"timestamp\":0,\"input_length\":100,\"output_length\":2}\n")
        .output()
        .unwrap();
    // Every request failed: exit 1, with the result line written.
    assert_eq!(out.status.code(), Some(1));
    let r: RequestResult = serde_json::from_slice(&out.stdout).unwrap();
    let e = r.error.unwrap();
    assert_eq!(e.kind, "http_4xx");
    assert!(e.message.contains("needs 7 KV blocks"), "{}", e.message);
    assert!(e.message.contains("raise --kv-tokens"));
}

#[test]
fn a_row_past_the_context_limit_fails_as_vllm_fails_it() {
    // 131,000 + 200 = 131,200 > 131,072 (Llama-3.1-8B's context, the
    // default profile's), while 130,000 + 200 fits; the KV cache (467,000
    // tokens) holds either, so only the context limit refuses the first.
    let trace = "{\"timestamp\":0,\"input_length\":131000,\"output_length\":200}\n\
                 {\"timestamp\":0,\"input_length\":130000,\"output_length\":200}\n";
    let out = tool("mc-replay").write_stdin(trace).output().unwrap();
    // One of two failed: the run itself succeeds (exit 1 is for all failed).
    assert_eq!(out.status.code(), Some(0));
    let mut r: Vec<RequestResult> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    r.sort_by_key(|r| r.line);
    let e = r[0]
        .error
        .as_ref()
        .expect("past the limit: an error, never ok");
    assert_eq!(e.kind, "http_4xx");
    assert_eq!(r[0].http_status, Some(400));
    assert_eq!(
        e.message,
        "HTTP 400 Bad Request: This model's maximum context length is 131072 tokens. \
         However, you requested 131200 tokens (131000 in the messages, 200 in the \
         completion). Please reduce the length of the messages or completion."
    );
    assert!(r[1].error.is_none(), "{:?}", r[1].error);
    // A profile's or the flag's limit replaces the built-in one.
    let out = tool("mc-replay")
        .args(["--max-model-len", "8192"])
        .write_stdin("{\"timestamp\":0,\"input_length\":8000,\"output_length\":193}\n")
        .output()
        .unwrap();
    let r: RequestResult = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r.error.unwrap().message.contains("is 8192 tokens"));
}

#[test]
fn mc_mock_engine_answers_a_request_past_the_context_limit_with_400() {
    let mock =
        crate::util::MockServer::start(&["--engine", "--max-model-len", "40", "--eos-after", "5"]);
    let body = |words: usize, max_tokens: u64| {
        let prompt = vec!["w"; words].join(" ");
        serde_json::json!({"model": "m", "prompt": prompt, "max_tokens": max_tokens}).to_string()
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let post = |b: String| {
        agent
            .post(format!("{}/v1/completions", mock.url()))
            .header("content-type", "application/json")
            .send(b)
            .unwrap()
    };
    let mut over = post(body(30, 11));
    assert_eq!(over.status(), 400);
    let v: serde_json::Value =
        serde_json::from_str(&over.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(
        v["error"]["message"],
        "This model's maximum context length is 40 tokens. However, you requested 41 \
         tokens (30 in the messages, 11 in the completion). Please reduce the length \
         of the messages or completion."
    );
    assert_eq!(v["error"]["code"], 400);
    assert_eq!(post(body(30, 10)).status(), 200);
    // What is asked for counts, not what is answered (vLLM checks
    // max_tokens): 30 + 20 > 40 although the answer would stop at 5.
    let mut early: serde_json::Value = serde_json::from_str(&body(30, 20)).unwrap();
    early["ignore_eos"] = false.into();
    assert_eq!(post(early.to_string()).status(), 400);
}

/// One request of 20 words and 3 tokens on steps of at least 100 ms
/// (`--t-fix-ms 100`): the prefill step takes 100 + 0.0044 + sqrt(6.5² +
/// 0.4²) + 8.5e-7·20·10 ≈ 106.5 ms and each decode step about as long, so TTFT ≈ 0.107 s,
/// two ITLs ≈ 0.107 s, decode ≈ 0.213 s, inference ≈ 0.32 s, queue ≈ 0;
/// three steps of 21, 1 and 1 tokens (the prompt counts in the step of its
/// first token, as vLLM counts it).
#[test]
fn mc_mock_engine_exports_vllms_request_histograms() {
    let mock = crate::util::MockServer::start(&["--engine", "--t-fix-ms", "100", "--model", "m"]);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let prompt = vec!["w"; 20].join(" ");
    let resp = agent
        .post(format!("{}/v1/completions", mock.url()))
        .header("content-type", "application/json")
        .send(serde_json::json!({"model": "m", "prompt": prompt, "max_tokens": 3}).to_string())
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = agent
        .get(format!("{}/metrics", mock.url()))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let scrape = mctrace::prom::parse(&text).unwrap();
    let get = |name: &str, le: Option<&str>| -> f64 {
        scrape
            .samples
            .iter()
            .find(|s| s.name == name && s.labels.get("le").map(String::as_str) == le)
            .unwrap_or_else(|| panic!("{name} {le:?} missing:\n{text}"))
            .value
    };
    for name in [
        "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
        "vllm:request_inference_time_seconds",
        "vllm:time_to_first_token_seconds",
    ] {
        assert_eq!(get(&format!("{name}_count"), None), 1.0, "{name}");
    }
    let b = |name: &str, le: &str| get(&format!("{name}_bucket"), Some(le));
    assert_eq!(b("vllm:time_to_first_token_seconds", "0.1"), 0.0);
    assert_eq!(b("vllm:time_to_first_token_seconds", "0.25"), 1.0);
    assert_eq!(get("vllm:inter_token_latency_seconds_count", None), 2.0);
    assert_eq!(b("vllm:inter_token_latency_seconds", "0.1"), 0.0);
    assert_eq!(b("vllm:inter_token_latency_seconds", "0.15"), 2.0);
    assert_eq!(b("vllm:request_queue_time_seconds", "0.3"), 1.0);
    assert_eq!(b("vllm:request_decode_time_seconds", "0.3"), 1.0);
    assert_eq!(b("vllm:request_inference_time_seconds", "0.3"), 0.0);
    assert_eq!(b("vllm:request_inference_time_seconds", "0.5"), 1.0);
    assert_eq!(get("vllm:iteration_tokens_total_count", None), 3.0);
    assert_eq!(get("vllm:iteration_tokens_total_sum", None), 23.0);
    assert_eq!(b("vllm:iteration_tokens_total", "1.0"), 2.0);
    assert_eq!(b("vllm:iteration_tokens_total", "32.0"), 3.0);
}

#[test]
fn help_explains_the_model_and_what_it_leaves_out() {
    for bin in ["mc-replay", "mc-mock"] {
        let out = tool(bin).arg("--help").output().unwrap();
        let help = String::from_utf8(out.stdout).unwrap();
        for want in [
            "--engine-profile",
            "--kv-tokens",
            "speculative decoding",
            "disaggregation",
        ] {
            assert!(help.contains(want), "{bin} --help lacks {want}");
        }
    }
}

#[test]
fn the_one_slot_prefix_cache_is_chosen_by_flag_or_profile() {
    // Rows 10 s apart (each ends before the next): A, B, A again. Every
    // block kept, the third finds A's 32 blocks of 16 (at most prompt − 1
    // tokens: 511 → 31 blocks = 496); llama.cpp's one slot keeps only B.
    let trace = "{\"timestamp\":0,\"input_length\":512,\"output_length\":2,\"hash_ids\":[1]}\n\
                 {\"timestamp\":10000,\"input_length\":512,\"output_length\":2,\"hash_ids\":[2]}\n\
                 {\"timestamp\":20000,\"input_length\":512,\"output_length\":2,\"hash_ids\":[1]}\n";
    let hits = |args: &[&str]| -> Vec<Option<u64>> {
        let run =
            crate::util::replay_with_summary(&[args, &["--block-size", "512"]].concat(), trace);
        let mut r: Vec<RequestResult> = run
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        r.sort_by_key(|x| x.line);
        r.iter().map(|x| x.cached_tokens).collect()
    };
    assert_eq!(hits(&[]), [Some(0), Some(0), Some(496)]);
    assert_eq!(
        hits(&["--engine-prefix-cache", "last-prompt"]),
        [Some(0), Some(0), Some(0)]
    );
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("p.json");
    std::fs::write(
        &profile,
        r#"{"model": "roofline", "t_fix_ms": 0.1, "c_seq_ms": 0.01, "t_w_ms": 5, "c_lin_ms": 0.02,
            "k_ms": 1e-6, "c_kv_ms": 1e-5, "prefix_cache": "last-prompt"}"#,
    )
    .unwrap();
    let p = profile.to_str().unwrap();
    assert_eq!(hits(&["--engine-profile", p]), [Some(0), Some(0), Some(0)]);
    // The flag beats the profile.
    assert_eq!(
        hits(&["--engine-profile", p, "--engine-prefix-cache", "blocks"]),
        [Some(0), Some(0), Some(496)]
    );
}
