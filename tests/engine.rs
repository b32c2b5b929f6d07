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
        // computes a shared prefix first, and no such promise holds).
        let reqs = requests(&rows, 10_000_000, 8);
        let (_, small) = replay(params("h100-llama3-8b", kv_blocks * 8, 8, 2048), &reqs);
        let (_, big) = replay(params("h100-llama3-8b", (kv_blocks + extra) * 8, 8, 2048), &reqs);
        let (s, b) = (small.stats(), big.stats());
        prop_assert!(b.cached_tokens >= s.cached_tokens, "{:?} vs {:?}", s, b);
    }
}
