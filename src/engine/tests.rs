//! Hand-computed cases (issue 11 §5). Each expected time is worked out in
//! the comment next to it from the step-time formula; the engine rounds each
//! step to whole µs.

use super::*;

fn params(model: StepModel, kv_tokens: u64, block_size: u64, max_batched: u64) -> EngineParams {
    EngineParams {
        profile: Profile {
            name: "test".into(),
            model,
            kv_tokens: None,
            block_size: None,
            max_batched_tokens: None,
            max_seqs: None,
            max_model_len: None,
            prefix_cache: None,
            calibrated: None,
        },
        kv_tokens,
        block_size,
        max_batched_tokens: max_batched,
        max_seqs: 256,
        max_model_len: None,
        prefix_cache: PrefixCache::Blocks,
    }
}

fn req(id: u64, arrival_us: u64, blocks: Vec<u64>, prompt: u64, output: u64) -> EngineRequest {
    EngineRequest {
        id,
        arrival_us,
        blocks,
        prompt_tokens: prompt,
        output_tokens: output,
    }
}

/// Runs until everything added has finished; results by id.
fn run_all(e: &mut Engine) -> Vec<Finished> {
    let mut out = Vec::new();
    while e.in_flight() > 0 {
        e.advance(None, &mut out);
    }
    out.sort_by_key(|f| f.id);
    out
}

#[test]
fn one_1k_prompt_alone() {
    let mut e = Engine::new(EngineParams::default());
    e.add(req(1, 0, row_blocks(&[1, 2], 1024, 512, 16, 1), 1024, 2));
    let f = run_all(&mut e);
    // Prefill step: B = 1, T = n = 1024, p = 0:
    // 0.13 + 0.0044·1 + sqrt(6.5² + (0.020·1024)²) + 8.5e-7·1024·(0 + 512)
    // = 0.1344 + sqrt(42.25 + 419.4304) + 0.4456448 = 0.1344 + 21.48675 + 0.44564
    // = 22.0668 ms -> TTFT 22067 µs (the issue's "≈ 22 ms").
    assert_eq!(f[0].first_token_us, Some(22_067));
    // Decode step: B = T = 1, L = 1025 (the sequence with the new token):
    // 0.1344 + sqrt(42.25 + 0.0004) + 4.4e-5·1025 = 0.1344 + 6.50003 + 0.0451 = 6.67953 ms.
    assert_eq!(f[0].token_us, vec![22_067, 22_067 + 6_680]);
    assert_eq!(f[0].end_us, 22_067 + 6_680);
    assert_eq!(f[0].cached_tokens, 0);
    let s = e.stats();
    assert_eq!(s.steps, 2);
    assert_eq!(s.tokens_per_step_p99, 1024);
}

#[test]
fn decode_step_of_64_requests_at_2k_context() {
    // One step prefills all 64 (budget 64·2047), the next decodes all 64.
    let mut e = Engine::new(params(
        StepModel::Roofline(H100_LLAMA3_8B),
        DEFAULT_KV_TOKENS,
        16,
        64 * 2047,
    ));
    for i in 0..64 {
        e.add(req(
            i,
            0,
            row_blocks(&[1000 + i], 2047, 2048, 16, i),
            2047,
            2,
        ));
    }
    let f = run_all(&mut e);
    for r in &f {
        // All first tokens at the end of the prefill step, all seconds one
        // decode step later: B = T = 64, L_j = 2048 each:
        // 0.13 + 0.0044·64 + sqrt(6.5² + (0.020·64)²) + 4.4e-5·64·2048
        // = 0.13 + 0.2816 + sqrt(42.25 + 1.6384) + 5.767168
        // = 0.4116 + 6.624832 + 5.767168 = 12.8036 ms.
        // (The issue's "≈ 12.4 ms" leaves out c_seq·B = 0.28 ms.)
        assert_eq!(r.token_us[1] - r.token_us[0], 12_804, "{r:?}");
    }
    let s = e.stats();
    assert_eq!((s.steps, s.batch_size_p99), (2, 64));
    assert_eq!(s.batch_size_mean, 64.0);
}

#[test]
fn a_shared_prefix_is_served_from_cache_and_still_costs_attention() {
    let mut e = Engine::new(EngineParams::default());
    // Row 1: ids [1, 2] of 512 tokens; row 2 at 100 ms: ids [1, 3].
    e.add(req(1, 0, row_blocks(&[1, 2], 1024, 512, 16, 1), 1024, 1));
    let mut out = Vec::new();
    e.advance(Some(100_000), &mut out);
    e.advance(Some(100_000), &mut out);
    assert_eq!(e.now_us(), 100_000);
    e.add(req(
        2,
        100_000,
        row_blocks(&[1, 3], 1024, 512, 16, 2),
        1024,
        1,
    ));
    let f = run_all(&mut e);
    // Row 2 hits id 1's 512 tokens: n = 512, p = 512:
    // 0.1344 + sqrt(6.5² + (0.020·512)²) + 8.5e-7·512·(512 + 256)
    // = 0.1344 + sqrt(42.25 + 104.8576) + 0.3342336 = 0.1344 + 12.12879 + 0.33423
    // = 12.5974 ms (22.07 ms without the cache).
    assert_eq!(f[0].cached_tokens, 512);
    assert_eq!(f[0].first_token_us, Some(100_000 + 12_597));
    // The same prompt again: at most prompt − 1 tokens hit, in whole blocks:
    // floor(1023 / 16) = 63 blocks = 1008 tokens; n = 16, p = 1008:
    // 0.1344 + sqrt(42.25 + 0.1024) + 8.5e-7·16·(1008 + 8) = 0.1344 + 6.50787 + 0.01382 = 6.6561 ms.
    e.add(req(
        3,
        200_000,
        row_blocks(&[1, 3], 1024, 512, 16, 3),
        1024,
        1,
    ));
    let mut out = Vec::new();
    e.advance(Some(200_000), &mut out);
    let g = run_all(&mut e);
    assert_eq!(g[0].cached_tokens, 1008);
    assert_eq!(g[0].first_token_us, Some(200_000 + 6_656));
    let s = e.stats();
    // (0 + 512 + 1008) / (3 · 1024)
    assert!((s.hit_rate - 1520.0 / 3072.0).abs() < 1e-12);
}

/// Step time = 1 ms + 0.5 ms per scheduled token (t_w = 0 makes the square
/// root c_lin·T).
const LINEAR: Roofline = Roofline {
    t_fix_ms: 1.0,
    c_seq_ms: 0.0,
    t_w_ms: 0.0,
    c_lin_ms: 0.5,
    k_ms: 0.0,
    c_kv_ms: 0.0,
};

fn preemption_case(shared_prompt: bool) -> Vec<Finished> {
    // 4 blocks of 4 tokens. Two requests at t = 0, prompt 4, output 6.
    let mut e = Engine::new(params(StepModel::Roofline(LINEAR), 16, 4, 100));
    let ids2 = if shared_prompt { [7] } else { [8] };
    e.add(req(1, 0, row_blocks(&[7], 4, 4, 4, 1), 4, 6));
    e.add(req(2, 0, row_blocks(&ids2, 4, 4, 4, 2), 4, 6));
    let f = run_all(&mut e);
    assert_eq!(e.stats().preemptions, 1);
    f
}

#[test]
fn preemption_recomputes_only_what_was_evicted() {
    // Step 1: both prefill 4 tokens (1 block each): T = 8 -> 1 + 4 = 5 ms; first tokens at 5.
    // Steps 2-5: both decode (T = 2 -> 2 ms): tokens at 7, 9, 11, 13; step 2 took a
    //   second block each, so all 4 blocks are held; after step 5 each has 8 tokens
    //   computed and its block 1 is full and named.
    // Step 6: request 1 needs a third block (9 tokens): none free -> request 2 (the
    //   most recently admitted) is preempted, its blocks [b1, b3] go to the free list,
    //   request 1 takes b1 and decodes alone: T = 1 -> 1.5 ms, ends at 14.5 ms with
    //   6 tokens.
    let f = preemption_case(true);
    assert_eq!(
        f[0].token_us,
        vec![5_000, 7_000, 9_000, 11_000, 13_000, 14_500]
    );
    assert_eq!(f[0].end_us, 14_500);
    // Shared prompt: request 2's block 0 duplicated request 1's (named by request 1),
    // so b1 was unnamed and taking it evicted nothing. Step 7: request 2 has 9 tokens,
    // hits floor(8/4) = 2 blocks (its prompt block via request 1's copy and its own
    // output block b3) and recomputes 1 token: 1 + 0.5 = 1.5 ms -> ends at 16 ms.
    assert_eq!(
        f[1].token_us,
        vec![5_000, 7_000, 9_000, 11_000, 13_000, 16_000]
    );
    assert_eq!((f[1].preemptions, f[1].cached_tokens), (1, 0));
    // Own prompt: b1 held request 2's prompt block, evicted at step 6, so nothing of
    // its prefix is cached: it recomputes all 9 tokens: 1 + 4.5 = 5.5 ms -> 20 ms.
    let g = preemption_case(false);
    assert_eq!(g[0].end_us, 14_500);
    assert_eq!(g[1].end_us, 20_000);
}

#[test]
fn dynamo_polynomial_on_three_rows() {
    let mut p = params(StepModel::Polynomial(DYNAMO_POLYNOMIAL), 16_000, 16, 2048);
    p.profile = Profile::builtin("dynamo-polynomial").unwrap();
    let mut e = Engine::new(p);
    // Row 1 (t = 0): ids [1, 2], 1000 tokens, output 2. Row 2 (t = 0): ids [5], 500
    // tokens, output 1. Row 3 (t = 1 s): ids [1, 3], 1000 tokens, output 1.
    e.add(req(1, 0, row_blocks(&[1, 2], 1000, 512, 16, 1), 1000, 2));
    e.add(req(2, 0, row_blocks(&[5], 500, 512, 16, 2), 500, 1));
    let mut f = run_all(&mut e);
    // Step 1 prefills both: X = 1500:
    // 4.209989e-7·1500² + 1.518344e-2·1500 + 16.50142 = 0.94725 + 22.77516 + 16.50142
    // = 40.2238 ms. Row 2 ends there.
    assert_eq!(f[1].end_us, 40_224);
    assert_eq!(f[0].first_token_us, Some(40_224));
    // Step 2: row 1 decodes; its context is 1000 + 1 = 1001 tokens of the
    // 16,000 the cache holds (Dynamo's u counts the decodes' tokens, not the
    // blocks held): u = 0.0625625:
    // -25.74·0.0625625² + 54.01·0.0625625 + 5.74 = -0.10075 + 3.37900 + 5.74
    // = 9.01825 ms. (Before the fix u was blocks held, 63 of 1000 = 0.063:
    // 9.04047 ms.)
    assert_eq!(f[0].end_us, 40_224 + 9_018);
    e.add(req(
        3,
        1_000_000,
        row_blocks(&[1, 3], 1000, 512, 16, 3),
        1000,
        1,
    ));
    f = run_all(&mut e);
    // Row 3 hits id 1's 512 tokens (32 blocks): X = 488:
    // 4.209989e-7·488² + 1.518344e-2·488 + 16.50142 = 0.10026 + 7.40952 + 16.50142
    // = 24.0112 ms.
    assert_eq!(f[0].cached_tokens, 512);
    assert_eq!(f[0].end_us, 1_000_000 + 24_011);
}

#[test]
fn a_request_that_can_never_fit_is_rejected() {
    let mut e = Engine::new(params(StepModel::Roofline(LINEAR), 64, 16, 100));
    e.add(req(1, 5, vec![], 60, 10));
    let f = run_all(&mut e);
    assert!(f[0]
        .rejected
        .as_deref()
        .unwrap()
        .contains("raise --kv-tokens"));
    assert_eq!(f[0].end_us, 5);
}

#[test]
fn a_request_past_the_context_limit_is_refused_and_one_at_it_runs() {
    let mut p = params(StepModel::Roofline(LINEAR), 1600, 16, 100);
    p.max_model_len = Some(100);
    let mut e = Engine::new(p);
    // 90 + 11 = 101 > 100: refused at once, nothing computed.
    e.add(req(1, 5, vec![], 90, 11));
    // 90 + 10 = 100: exactly the limit, runs.
    e.add(req(2, 5, vec![], 90, 10));
    let f = run_all(&mut e);
    let refused = f.iter().find(|f| f.id == 1).unwrap();
    assert_eq!(
        refused.rejected.as_deref(),
        Some(
            "This model's maximum context length is 100 tokens. However, you requested 101 \
             tokens (90 in the messages, 11 in the completion). Please reduce the length of \
             the messages or completion."
        )
    );
    assert_eq!((refused.output_tokens, refused.end_us), (0, 5));
    let ran = f.iter().find(|f| f.id == 2).unwrap();
    assert_eq!((ran.rejected.as_deref(), ran.output_tokens), (None, 10));
}

#[test]
fn the_builtin_profiles_carry_their_models_context() {
    // h100-llama3-8b models Llama-3.1-8B (131,072), not Llama-3-8B (8,192).
    let p = Profile::builtin("h100-llama3-8b").unwrap();
    assert_eq!(p.max_model_len, Some(131_072));
    assert_eq!(EngineParams::default().max_model_len, Some(131_072));
    assert_eq!(
        Profile::builtin("dynamo-polynomial").unwrap().max_model_len,
        None
    );
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("p.json");
    std::fs::write(
        &f,
        r#"{"model":"dynamo-polynomial","prefill_ms":[0,0,1],"decode_ms":[0,0,1],
            "decode_min_ms":1,"max_model_len":8192}"#,
    )
    .unwrap();
    let p = Profile::load(f.to_str().unwrap()).unwrap();
    assert_eq!(p.max_model_len, Some(8192));
}

#[test]
fn a_waiting_request_is_admitted_only_when_its_whole_prompt_fits() {
    // vLLM's scheduler_reserve_full_isl gate. 6 blocks of 4 tokens, budget
    // 8, 1 + 0.5·T ms per step. A: prompt 12 (3 blocks), output 4.
    // B: prompt 16 (4 blocks), output 1. Both at t = 0.
    let mut e = Engine::new(params(StepModel::Roofline(LINEAR), 24, 4, 8));
    e.add(req(1, 0, vec![], 12, 4));
    e.add(req(2, 0, vec![], 16, 1));
    let f = run_all(&mut e);
    // Step 1: A fits whole (3 of 6 blocks), takes a chunk of 8 (2 blocks):
    //   T = 8 -> 5 ms.
    // Step 2: A's last chunk of 4 (3rd block); B would need 4 blocks, 3 are
    //   free: it waits (the first-chunk rule admitted it here with 1 block,
    //   and it was preempted in step 3 when A's decode and B's next chunk
    //   ran out of blocks). T = 4 -> 3 ms: A's first token at 8 ms.
    // Steps 3-5: A decodes alone (its 4th block in step 3; 2 stay free):
    //   1.5 ms each -> 9.5, 11, 12.5; A ends at 12.5 and frees its 4 blocks.
    // Steps 6-7: B, whole, in two chunks of 8: 5 ms each -> 17.5, 22.5.
    assert_eq!(f[0].token_us, vec![8_000, 9_500, 11_000, 12_500]);
    assert_eq!(f[1].first_scheduled_us, 12_500);
    assert_eq!(f[1].token_us, vec![22_500]);
    assert_eq!(e.stats().preemptions, 0);
}

#[test]
fn chunked_prefill_shares_the_budget_with_decodes() {
    // Budget 10 tokens, 1 + 0.5·T ms per step. A: 4 tokens, output 3. B: 12 tokens.
    let mut e = Engine::new(params(StepModel::Roofline(LINEAR), 1600, 4, 10));
    e.add(req(1, 0, vec![], 4, 3));
    e.add(req(2, 0, vec![], 12, 1));
    let f = run_all(&mut e);
    // Step 1: A prefills 4, B its first chunk of 6: T = 10 -> 6 ms. A's token at 6.
    // Step 2: A decodes 1, B's next chunk 6 (done): T = 7 -> 4.5 ms -> 10.5; B ends.
    // Step 3: A decodes alone: 1.5 ms -> 12.
    assert_eq!(f[0].token_us, vec![6_000, 10_500, 12_000]);
    assert_eq!(f[1].token_us, vec![10_500]);
    assert_eq!(e.stats().busy_ms, 12.0);
}

#[test]
fn idle_engine_jumps_to_the_deadline() {
    let mut e = Engine::new(EngineParams::default());
    let mut out = Vec::new();
    e.advance(Some(5_000), &mut out);
    assert_eq!(e.now_us(), 5_000);
    assert!(out.is_empty());
}

/// The `serving` model: LINEAR's step plus 2 ms per new request in the
/// step that first schedules it, and 3 ms from arrival to schedulable.
#[test]
fn serving_charges_new_requests_and_holds_them_back_by_the_request_latency() {
    let m = StepModel::Serving(super::Serving {
        base: LINEAR,
        c_new_ms: 2.0,
        t_req_ms: 3.0,
    });
    let mut e = Engine::new(params(m, 1600, 4, 100));
    // Request 1 at 0 (prompt 4, 3 tokens), request 2 at 1 ms (prompt 8, 2 tokens).
    e.add(req(1, 0, row_blocks(&[1], 4, 4, 4, 1), 4, 3));
    e.add(req(2, 1_000, row_blocks(&[2, 3], 8, 4, 4, 2), 8, 2));
    let f = run_all(&mut e);
    let (a, b) = (&f[0], &f[1]);
    assert_eq!((a.id, b.id), (1, 2));
    // Request 1 is schedulable at 3 ms; request 2 at 4 ms, mid-step.
    // Step 1 at 3 ms: request 1's prompt, T = 4, one new request:
    //   1 + 0.5·4 + 2 = 5 ms -> its first token at 8 ms (TTFT 8 from arrival 0).
    // Step 2 at 8 ms: request 1 decodes (T = 1) and request 2's prompt is new
    //   (T = 8): 1 + 0.5·9 + 2 = 7.5 ms -> tokens at 15.5 ms for both.
    // Step 3 at 15.5: both decode, T = 2, nothing new: 1 + 1 = 2 ms -> 17.5 ms;
    //   request 1's third token and request 2's second: both finish.
    assert_eq!(a.first_token_us, Some(8_000));
    assert_eq!(a.first_scheduled_us, 3_000);
    assert_eq!(a.token_us, vec![8_000, 15_500, 17_500]);
    assert_eq!(b.arrival_us, 1_000);
    assert_eq!(b.token_us, vec![15_500, 17_500]);
    // The same requests with no new-request cost and no latency: step 1 at 0
    // (T = 4: 3 ms); request 2 arrived at 1 ms, so step 2 at 3 takes it with
    // request 1's decode: T = 9, 5.5 ms -> 8.5 ms.
    let mut plain = Engine::new(params(StepModel::Roofline(LINEAR), 1600, 4, 100));
    plain.add(req(1, 0, row_blocks(&[1], 4, 4, 4, 1), 4, 3));
    plain.add(req(2, 1_000, row_blocks(&[2, 3], 8, 4, 4, 2), 8, 2));
    let g = run_all(&mut plain);
    assert_eq!(g[0].token_us, vec![3_000, 8_500, 10_500]);
}

/// Requests one after another (each finished before the next arrives):
/// the cached tokens each finds.
fn hits_in_turn(prefix_cache: PrefixCache, rows: &[&[u64]]) -> Vec<u64> {
    let mut e = Engine::new(EngineParams {
        prefix_cache,
        ..EngineParams::default()
    });
    let mut hits = Vec::new();
    for (i, ids) in rows.iter().enumerate() {
        let id = i as u64 + 1;
        let at = id * 1_000_000;
        e.advance(Some(at), &mut Vec::new());
        e.add(req(id, at, row_blocks(ids, 1024, 512, 16, id), 1024, 1));
        let f = run_all(&mut e);
        hits.push(f[0].cached_tokens);
    }
    hits
}

#[test]
fn one_slot_keeps_only_the_last_prompt() {
    // A = [1, 2], B = [3, 4], then A's first half again, then B's. Each id
    // is 512 tokens (32 blocks of 16). With every block kept, the third
    // and fourth find 512 each; llama.cpp's one slot holds only the last
    // prompt: the third (after B) finds nothing, the fourth (after the
    // third, [1, 5]) nothing of B's either.
    let rows: [&[u64]; 4] = [&[1, 2], &[3, 4], &[1, 5], &[3, 6]];
    assert_eq!(
        hits_in_turn(PrefixCache::Blocks, &rows),
        vec![0, 0, 512, 512]
    );
    assert_eq!(
        hits_in_turn(PrefixCache::LastPrompt, &rows),
        vec![0, 0, 0, 0]
    );
    // The one before it is kept: the next turn of the same conversation
    // finds its history (at most prompt − 1 tokens, in whole blocks).
    let turns: [&[u64]; 3] = [&[1, 2], &[1, 2], &[3, 4]];
    assert_eq!(
        hits_in_turn(PrefixCache::LastPrompt, &turns),
        vec![0, 1008, 0]
    );
}
