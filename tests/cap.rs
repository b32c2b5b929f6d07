//! mc-cap: truncation keeps rows consistent, --drop drops and counts, osl caps.

use predicates::prelude::*;

use crate::util::tool;

// Block size 4. Row 1 fits; row 2 (10 tokens, ids [1,2,3]) is cut to 6:
// blocks [1] (4 tokens) and [2] (now 2 of its 4 tokens) -> [1, fresh];
// row 3 is cut to 6 inside its own second block [1, 5, 6] -> [1, fresh'];
// row 4 is the same block cut the same way as row 2: the same fresh id;
// row 5 has no ids.
const INPUT: &str = r#"{"input_length": 6, "output_length": 100, "hash_ids": [1, 2]}
{"input_length": 10, "output_length": 5, "hash_ids": [1, 2, 3]}
{"input_length": 9, "output_length": 7, "hash_ids": [1, 5, 6]}
{"input_length": 12, "output_length": 8, "hash_ids": [1, 2, 4]}
{"input_length": 50, "output_length": 1}
"#;

#[test]
fn no_caps_is_the_identity() {
    tool("mc-cap")
        .write_stdin(INPUT)
        .assert()
        .code(0)
        .stdout(INPUT)
        .stderr("");
}

#[test]
fn the_summary_says_what_changed() {
    // Rows 2-5 are longer than 8 tokens (10, 9, 12, 50); rows 1, 3 and 4 ask
    // for more than 6 output tokens (100, 7, 8).
    tool("mc-cap")
        .args(["--max-isl", "8", "--max-osl", "6", "--block-size", "4"])
        .write_stdin(INPUT)
        .assert()
        .code(0)
        .stderr("mc-cap: 5 rows: truncated 4 to 8 tokens, capped 3 answers to 6 tokens\n");
    // The other filters: a line when rows changed, none when nothing did.
    let line = "{\"timestamp\": 10, \"hash_ids\": [1]}\n";
    tool("mc-roots")
        .args(["--roots", "2"])
        .write_stdin(line.repeat(3))
        .assert()
        .stderr("mc-roots: 3 of 3 rows renumbered into 2 trees\n");
    tool("mc-roots").write_stdin(line).assert().stderr("");
    tool("mc-scale").write_stdin(line).assert().stderr("");
}

#[test]
fn truncation_keeps_rows_consistent_and_shares_cut_blocks() {
    let base = 1u64 << 48;
    let want = format!(
        r#"{{"input_length": 6, "output_length": 100, "hash_ids": [1, 2]}}
{{"input_length": 6, "output_length": 5, "hash_ids": [1, {a}]}}
{{"input_length": 6, "output_length": 7, "hash_ids": [1, {b}]}}
{{"input_length": 6, "output_length": 8, "hash_ids": [1, {a}]}}
{{"input_length": 6, "output_length": 1}}
"#,
        a = base,
        b = base + 1
    );
    tool("mc-cap")
        .args(["--max-isl", "6", "--block-size", "4"])
        .write_stdin(INPUT)
        .assert()
        .code(0)
        .stdout(want);
}

#[test]
fn cut_on_a_block_edge_needs_no_fresh_id() {
    let want = r#"{"input_length": 6, "output_length": 100, "hash_ids": [1, 2]}
{"input_length": 8, "output_length": 5, "hash_ids": [1, 2]}
{"input_length": 8, "output_length": 7, "hash_ids": [1, 5]}
{"input_length": 8, "output_length": 8, "hash_ids": [1, 2]}
{"input_length": 8, "output_length": 1}
"#;
    tool("mc-cap")
        .args(["--max-isl", "8", "--block-size", "4"])
        .write_stdin(INPUT)
        .assert()
        .stdout(want);
}

#[test]
fn drop_removes_long_rows_and_counts_them() {
    let want = "{\"input_length\": 6, \"output_length\": 100, \"hash_ids\": [1, 2]}\n";
    tool("mc-cap")
        .args(["--max-isl", "8", "--drop", "--block-size", "4"])
        .write_stdin(INPUT)
        .assert()
        .code(0)
        .stdout(want)
        .stderr("mc-cap: 5 rows: dropped 4 rows longer than 8 tokens\n");
}

#[test]
fn output_cap() {
    let out = tool("mc-cap")
        .args(["--max-osl", "7"])
        .write_stdin(INPUT)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let osl: Vec<u64> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["output_length"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(osl, vec![7, 5, 7, 7, 1]);
    // Rows under the cap are copied byte for byte.
    assert_eq!(text.lines().nth(1).unwrap(), INPUT.lines().nth(1).unwrap());
}

#[test]
fn ids_in_the_fresh_range_are_refused() {
    tool("mc-cap")
        .args(["--max-isl", "6", "--block-size", "4", "--fresh-id-base", "100"])
        .write_stdin("{\"input_length\": 3, \"hash_ids\": [100]}\n")
        .assert()
        .code(65)
        .stderr("mc-cap: line 1: field `hash_ids`: id 100 is in mc-cap's fresh-id range (>= 100); pass a larger --fresh-id-base\n");
}

#[test]
fn caps_and_fresh_ids_stay_within_63_bits() {
    for args in [
        ["--fresh-id-base", "18446744073709551615"],
        ["--max-isl", "9223372036854775808"],
        ["--max-osl", "9223372036854775808"],
    ] {
        tool("mc-cap")
            .args(args)
            .write_stdin(INPUT)
            .assert()
            .code(2)
            .stderr(
                predicates::str::contains("is not in 1..=9223372036854775807").or(
                    predicates::str::contains("is not in 0..=9223372036854775807"),
                ),
            );
    }
    // The last fresh id is 2^63 - 1: the first cut block gets it, the second
    // (another block cut at another place) has none left: an error, never a
    // wrap-around onto the input's ids.
    tool("mc-cap")
        .args(["--max-isl", "6", "--block-size", "4", "--fresh-id-base", "9223372036854775807"])
        .write_stdin(
            "{\"input_length\": 10, \"hash_ids\": [1, 2, 3]}\n{\"input_length\": 10, \"hash_ids\": [1, 5, 6]}\n",
        )
        .assert()
        .code(65)
        .stdout("{\"input_length\": 6, \"hash_ids\": [1, 9223372036854775807]}\n")
        .stderr(predicates::str::starts_with(
            "mc-cap: line 2: field `hash_ids`: fresh ids are used up",
        ));
}

#[test]
fn auto_block_size_replays_the_look_ahead_rows_in_order_and_reports_bad_ones() {
    // 10,005 rows: the look-ahead (10,000 rows) ends inside the trace, and
    // line 3 is bad. Rows alternate 600 tokens at block size 512 (two ids,
    // cut to 512 = one id) and 100 tokens (one id, kept), so every row that
    // comes out shows whether it went through the step exactly once and in
    // its place: row k has ids [k, k+1] or [k].
    let mut input = String::new();
    let mut want = String::new();
    for k in 1..=10_005u64 {
        if k == 3 {
            input.push_str("{\"input_length\": oops}\n");
            continue;
        }
        if k % 2 == 0 {
            input.push_str(&format!(
                "{{\"input_length\": 600, \"hash_ids\": [{k}, {}]}}\n",
                k + 1
            ));
            want.push_str(&format!("{{\"input_length\": 512, \"hash_ids\": [{k}]}}\n"));
        } else {
            let line = format!("{{\"input_length\": 100, \"hash_ids\": [{k}]}}\n");
            input.push_str(&line);
            want.push_str(&line);
        }
    }
    tool("mc-cap")
        .args(["--max-isl", "512", "--on-error", "skip"])
        .write_stdin(input)
        .assert()
        .code(0)
        .stdout(want)
        .stderr(predicate::str::contains(
            "mc-cap: block size 512 (detected from the first 9999 rows with hash_ids)",
        ))
        .stderr(predicate::str::contains("line 3"));
}
