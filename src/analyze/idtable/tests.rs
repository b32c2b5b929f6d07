//! The compact table against the reference (the 16-byte-per-id table it
//! replaced): every answer the analysis asks for, on rows built to hit the
//! irregular cases (ids under two parents or at two positions, repeats in
//! a row, far ids, long runs, broken sizes).

use proptest::prelude::*;

use super::reference;
use super::*;

#[test]
fn a_flag_byte_per_id_and_one_head_per_run() {
    let mut t = IdTable::default();
    let long: Vec<u64> = (0..200).collect();
    t.visit(0, &long);
    // Heads every MAX_CHAIN ids: 0, 64, 128, 192.
    assert_eq!(t.heads.len(), 4);
    t.visit(2, &[0, 1, 500, 501, 502]);
    assert_eq!(t.heads.len(), 5);
}

#[test]
fn trie_nodes_pairs_and_row_checks() {
    let mut t = IdTable::default();
    // Rows: [0,1,2], [0,1,3], [1,4], [0,1,2,2], [5,0]
    assert_eq!(
        t.visit(1, &[0, 1, 2]),
        RowVisit {
            first_unseen: 0,
            ..Default::default()
        }
    );
    assert_eq!(
        t.visit(2, &[0, 1, 3]),
        RowVisit {
            first_unseen: 2,
            ..Default::default()
        }
    );
    // 1 under the root: a new node (1 was under 0 before), a new pair (0, 1).
    assert_eq!(
        t.visit(3, &[1, 4]),
        RowVisit {
            first_unseen: 1,
            ..Default::default()
        }
    );
    assert_eq!(
        t.visit(4, &[0, 1, 2, 2]),
        RowVisit {
            first_unseen: 4,
            duplicate: true,
            not_prefix_shaped: false
        }
    );
    assert_eq!(
        t.visit(5, &[5, 0]),
        RowVisit {
            first_unseen: 0,
            duplicate: false,
            not_prefix_shaped: true
        }
    );
    // Nodes: (0) (0,1) (0,1,2) (0,1,3) (1) (1,4) (0,1,2,2) (5) (5,0) = 9.
    assert_eq!(t.nodes, 9);
    assert_eq!(t.blocks, 3 + 3 + 2 + 4 + 2);
    // Visited twice or more: (0) x3, (0,1) x3, (0,1,2) x2 -> 8.
    assert_eq!(t.reused_visits(), 8);
    assert!(t.pair_repeated(0, 0)); // rows 1, 2, 4
    assert!(!t.pair_repeated(1, 0)); // only row 5
    assert!(!t.pair_repeated(0, 1)); // only row 3
    assert!(t.pair_repeated(1, 1));
    assert!(t.pair_repeated(2, 2)); // rows 1 and 4
    assert!(!t.pair_repeated(3, 2));
    assert!(!t.pair_repeated(0, 99));
}

#[test]
fn sparse_ids_work_like_dense_ones() {
    let mut t = IdTable::default();
    let big = 1u64 << 60;
    t.visit(1, &[big, big + 1]);
    assert_eq!(
        t.visit(2, &[big, 7]),
        RowVisit {
            first_unseen: 1,
            ..Default::default()
        }
    );
    assert_eq!(t.nodes, 3);
    assert_eq!(t.distinct_ids(), 3);
    assert!(t.pair_repeated(0, big));
    // big + 1 under another far parent: a second node, and the pair
    // (1, big + 1) now repeats.
    t.visit(3, &[big + 5, big + 1]);
    assert_eq!(t.nodes, 5);
    assert!(t.pair_repeated(1, big + 1));
    t.visit(4, &[big, big + 1]);
    assert_eq!(t.nodes, 5);
    assert_eq!(t.reused_visits(), 3 + 2);
}

#[test]
fn positions_past_16_bits_are_counted_exactly() {
    let mut t = IdTable::default();
    let long: Vec<u64> = (0..70_000).collect();
    t.visit(1, &long);
    assert!(!t.pair_repeated(69_999, 69_999));
    t.visit(2, &long);
    assert!(t.pair_repeated(69_999, 69_999));
    assert!(t.pair_repeated(65_535, 65_535));
    assert!(t.pair_repeated(3, 3));
    assert!(!t.pair_repeated(3, 69_999));
    assert_eq!(t.nodes, 70_000);
}

#[test]
fn sizes_conflict_once_and_only_last_blocks_met_twice_are_checked() {
    let mut t = IdTable::default();
    t.visit(0, &[1, 2]);
    t.visit(1, &[1, 3]);
    assert!(!t.may_conflict(), "last blocks 2 and 3 were met once each");
    // 2 again, one position further: a second pair, a second node.
    t.visit(2, &[4, 1, 2]);
    assert!(t.may_conflict());
    t.enter(Pass::Sizes);
    // 1 is never a row's last block: it has the full size only.
    assert!(!t.check_size(1, 512, 512));
    assert!(!t.check_size(1, 100, 512));
    assert!(!t.check_size(2, 100, 512));
    assert!(t.check_size(2, 512, 512));
    // Counted once per id; size 0 (a broken row) says nothing.
    assert!(!t.check_size(2, 7, 512));
    assert!(!t.check_size(2, 0, 512));
    // 3 occurs once: one size, whatever it is called with.
    assert!(!t.check_size(3, 100, 512));
    assert!(!t.check_size(3, 512, 512));
    assert!(!t.check_size(99, 512, 512));
}

#[test]
fn repeated_pairs_are_counted_for_their_first_row_too() {
    let mut t = IdTable::default();
    // Row 0 shares (0, 0) and (1, 1) with row 2, (2, 9) is in rows 2 and
    // 3, and (1, 9), an extra pair of 9's (first seen at 2), in rows 4
    // and 5; row 1 shares nothing, and 8 is at two positions once each.
    t.visit(0, &[0, 1, 2]);
    t.visit(1, &[5, 6]);
    t.visit(2, &[0, 1, 9]);
    t.visit(3, &[7, 8, 9]);
    t.visit(4, &[8, 9]);
    t.visit(5, &[3, 9]);
    assert!(!t.pair_repeated(1, 8) && !t.pair_repeated(0, 8));
    assert!(t.pair_repeated(1, 9) && t.pair_repeated(2, 9));
    // Row 6 was never visited: none.
    assert_eq!(t.take_repeated(7), vec![2, 0, 3, 1, 1, 1, 0]);
}

/// Rows over a few ids (so they collide), with far ids, repeats and long
/// runs now and then.
fn rows() -> impl Strategy<Value = Vec<Vec<u64>>> {
    let id = prop_oneof![
        8 => 0u64..24,
        1 => (0u64..4).prop_map(|k| (1u64 << 60) + k),
        1 => Just(MAX_ID),
    ];
    let piece = prop_oneof![
        3 => id.prop_map(|i| vec![i]),
        // A run of consecutive ids, as Mooncake rows are made of.
        2 => (0u64..40, 1usize..90).prop_map(|(s, n)| (s..s + n as u64).collect::<Vec<_>>()),
    ];
    prop::collection::vec(
        prop::collection::vec(piece, 0..5).prop_map(|p| p.concat()),
        1..30,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

#[test]
    fn the_compact_table_answers_as_the_reference(
        rows in rows(),
        sizes in prop::collection::vec(prop_oneof![Just(0u32), Just(4), 1u32..4], 64),
    ) {
        let mut new = IdTable::default();
        let mut old = reference::IdTable::default();
        for (i, ids) in rows.iter().enumerate() {
            let a = new.visit(i as u32, ids);
            let b = old.visit(i as u32 + 1, ids);
            prop_assert_eq!(
                (a.first_unseen, a.duplicate, a.not_prefix_shaped),
                (b.first_unseen, b.duplicate, b.not_prefix_shaped),
                "row {}", i + 1
            );
        }
        prop_assert_eq!(new.nodes, old.nodes);
        prop_assert_eq!(new.blocks, old.blocks);
        prop_assert_eq!(new.distinct_ids(), old.distinct_ids());
        prop_assert_eq!(new.reused_visits(), old.reused_visits());
        for ids in &rows {
            for (pos, &id) in ids.iter().enumerate() {
                for p in [pos, pos + 1, pos.saturating_sub(1)] {
                    prop_assert_eq!(new.pair_repeated(p, id), old.pair_repeated(p, id));
                }
            }
        }
        let repeated = new.take_repeated(rows.len() + 1);
        for (i, ids) in rows.iter().enumerate() {
            let want = ids.iter().enumerate().filter(|&(pos, &id)| old.pair_repeated(pos, id)).count();
            prop_assert_eq!(repeated[i] as usize, want, "row {}", i);
        }
        prop_assert_eq!(repeated[rows.len()], 0);
        new.enter(Pass::Sizes);
        old.enter(reference::Pass::Sizes);
        let mut k = 0;
        for ids in &rows {
            for (pos, &id) in ids.iter().enumerate() {
                // Full blocks of 4 but the last, whose size varies.
                let size = if pos + 1 < ids.len() { 4 } else { sizes[k % sizes.len()] };
                k += 1;
                let (_, want) = old.check_block(pos, id, size);
                prop_assert_eq!(new.may_conflict() && new.check_size(id, size, 4), want);
            }
        }
        new.enter(Pass::Marks);
        old.enter(reference::Pass::Marks);
        for ids in rows.iter().rev() {
            for &id in ids {
                prop_assert_eq!(new.mark(id), old.mark(id));
            }
        }
    }
}

/// Rows for the run-wise walk: runs long enough for several heads, runs
/// that cross a page's end (64 Ki ids), far ids and far runs, and ids
/// met again in and out of their runs.
fn rows_of_runs() -> impl Strategy<Value = Vec<Vec<u64>>> {
    let piece = prop_oneof![
        3 => (0u64..24).prop_map(|i| vec![i]),
        3 => (0u64..40, 1u64..140).prop_map(|(s, n)| (s..s + n).collect::<Vec<_>>()),
        2 => (65_500u64..65_536, 1u64..80).prop_map(|(s, n)| (s..s + n).collect::<Vec<_>>()),
        1 => (0u64..4, 1u64..6).prop_map(|(k, n)| ((1 << 60) + k..(1 << 60) + k + n).collect()),
    ];
    prop::collection::vec(
        prop::collection::vec(piece, 0..5).prop_map(|p| p.concat()),
        1..30,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A run at a time makes the table one id at a time makes: every id's
    /// flags and head, the counts, the rows' repeated pairs and the size
    /// check's candidate rows.
    #[test]
    fn runs_walk_as_one_id_at_a_time(rows in rows_of_runs()) {
        let mut runs = IdTable::default();
        let mut ones = IdTable::default();
        for (i, ids) in rows.iter().enumerate() {
            let a = runs.visit(i as u32, ids);
            let b = ones.walk(i as u32, ids, false);
            prop_assert_eq!(a, b, "row {}", i);
        }
        prop_assert_eq!(
            (runs.distinct, runs.nodes, runs.blocks, runs.visited_twice),
            (ones.distinct, ones.nodes, ones.blocks, ones.visited_twice)
        );
        prop_assert_eq!(&runs.repeated, &ones.repeated);
        let rows_of = |t: &IdTable| {
            let mut r = t.candidate_rows.clone();
            r.sort_unstable();
            r.dedup();
            r
        };
        prop_assert_eq!(rows_of(&runs), rows_of(&ones));
        let mut met = runs.flags.ids_with(|_| true);
        met.sort_unstable();
        let mut met_ones = ones.flags.ids_with(|_| true);
        met_ones.sort_unstable();
        prop_assert_eq!(&met, &met_ones);
        for &id in &met {
            prop_assert_eq!(runs.flags.get(id), ones.flags.get(id), "flags of {}", id);
            prop_assert_eq!(runs.heads.get(id), ones.heads.get(id), "head {}", id);
        }
    }
}

#[test]
fn a_fresh_run_has_a_head_every_max_chain_ids_across_rows() {
    // Row 0: 0..100 (heads 0 and 64). Row 1: 100..200 is fresh but does
    // not follow row 0's last id in the row (a new row starts at the
    // root), so 100 is a head, then 164.
    let mut t = IdTable::default();
    t.visit(0, &(0..100).collect::<Vec<_>>());
    t.visit(1, &(100..200).collect::<Vec<_>>());
    let heads: Vec<u64> = (0..200).filter(|&id| t.heads.get(id).is_some()).collect();
    assert_eq!(heads, [0, 64, 100, 164]);
    // Row 1's head 164 is under 163 at position 64, first seen in row 1.
    assert_eq!(t.heads.get(164), Some((163, 64, 1)));
    assert_eq!(t.heads.get(100), Some((ROOT, 0, 1)));
    // Row 2 reuses 0..70 along its primary nodes: 70 repeated pairs, each
    // counted for row 0 too. Its last block, 69, is met in row 0 too: row
    // 2 is a candidate for the size check (row 0's last, 99, is not).
    t.visit(2, &(0..70).collect::<Vec<_>>());
    assert_eq!(t.take_repeated(3), vec![70, 0, 70]);
    assert_eq!(t.candidate_rows, [2]);
}
