//! mc-scale on small traces whose expected rows were worked out by hand
//! (block size 4 so the arithmetic stays readable). The crash-free trace was
//! also run through AIPerf 0.13.0's Synthesizer while developing: same
//! input_length, output_length and timestamp on every row, and the same
//! sharing of hash_ids up to a renaming (AIPerf numbers fresh ids from
//! (max shared id + 1) * k + 1, we from above every input id), except where
//! AIPerf is wrong on purpose-built rows: it grows a row without a shared
//! prefix by a phantom block under P < 1, and it turns `output_length: 0`
//! into 1 even when the output multiplier is 1 (we leave values the options
//! do not ask to change).

use crate::util::{run_ok, tool};

/// Ids 1 (3 uses) and 2 (2 uses) are shared; everything else is private.
/// Rows 1, 2 and 5 have core prefixes [1,2], [1,2] and [1]; row 3 has none;
/// row 4 has no hash_ids.
const T1: &str = r#"{"timestamp": 1000, "input_length": 10, "output_length": 7, "hash_ids": [1, 2, 3]}
{"timestamp": 1501, "input_length": 12, "output_length": 3, "hash_ids": [1, 2, 4]}
{"timestamp": 3001, "input_length": 5, "output_length": 5, "hash_ids": [9, 10]}
{"timestamp": 4000, "input_length": 100, "output_length": 2, "note": "no ids"}
{"timestamp": 4100, "input_length": 9, "output_length": 0, "hash_ids": [1, 6, 7]}
"#;

fn scale(args: &[&str], input: &str) -> String {
    let mut all = vec!["--block-size", "4"];
    all.extend_from_slice(args);
    run_ok("mc-scale", &all, input)
}

#[test]
fn no_options_is_the_identity() {
    assert_eq!(scale(&[], T1), T1);
    let odd = "{\"timestamp\":1.25,  \"x\" : [1,{\"y\":null}],\"hash_ids\":[3,1]}\n";
    assert_eq!(scale(&[], odd), odd);
}

#[test]
fn prefix_doubled_prompt_halved_output_and_time_scaled() {
    // k = 2, so shared ids 1, 2 become [2,3], [4,5]. Fresh ids start above
    // max(max input id 10, (max shared 2 + 1) * 2 = 6), i.e. at 11.
    // Row 1: prefix 8 tokens -> 16; prompt 10-8 = 2 -> floor(1) = 1 token on
    //   one fresh block [11]; length 17. t = trunc(1000/2) = 500;
    //   osl = round_half_even(7 * 1.5 = 10.5) = 10.
    // Row 2: prompt 4 -> 2 tokens [12]; length 18; t = trunc(750.5) = 750; osl 4.5 -> 4.
    // Row 3: no shared prefix; prompt 5 -> floor(2.5) = 2 [13]; t 1500; osl 7.5 -> 8.
    // Row 4: no ids: length kept (AIPerf too); t 2000; osl 3.
    // Row 5: [1] -> [2,3] (8 tokens); prompt 9-4 = 5 -> 2 [14]; length 10;
    //   t = 2050; osl max(1, 0) = 1.
    let want = r#"{"timestamp": 500, "input_length": 17, "output_length": 10, "hash_ids": [2, 3, 4, 5, 11]}
{"timestamp": 750, "input_length": 18, "output_length": 4, "hash_ids": [2, 3, 4, 5, 12]}
{"timestamp": 1500, "input_length": 2, "output_length": 8, "hash_ids": [13]}
{"timestamp": 2000, "input_length": 100, "output_length": 3, "note": "no ids"}
{"timestamp": 2050, "input_length": 10, "output_length": 1, "hash_ids": [2, 3, 14]}
"#;
    let args = [
        "--speedup",
        "2",
        "--prefix-len-multiplier",
        "2",
        "--prompt-len-multiplier",
        "0.5",
        "--output-len-multiplier",
        "1.5",
    ];
    assert_eq!(scale(&args, T1), want);
}

#[test]
fn fractional_prefix_multiplier_adds_private_blocks() {
    // k = 1; fresh from 11. Row 1: target ceil(2 * 1.5) = 3 blocks: [1, 2, 11]
    // (12 tokens) + prompt 2 tokens [12] = 14. Row 2: [1, 2, 13] + 4 tokens [14] = 16.
    // Row 3: no prefix, prompt 5 on [15, 16]. Row 5: ceil(1.5) = 2: [1, 17]
    // (8 tokens) + prompt 5 on [18, 19] = 13.
    let want = r#"{"timestamp": 1000, "input_length": 14, "output_length": 7, "hash_ids": [1, 2, 11, 12]}
{"timestamp": 1501, "input_length": 16, "output_length": 3, "hash_ids": [1, 2, 13, 14]}
{"timestamp": 3001, "input_length": 5, "output_length": 5, "hash_ids": [15, 16]}
{"timestamp": 4000, "input_length": 100, "output_length": 2, "note": "no ids"}
{"timestamp": 4100, "input_length": 13, "output_length": 0, "hash_ids": [1, 17, 18, 19]}
"#;
    assert_eq!(scale(&["--prefix-len-multiplier", "1.5"], T1), want);
}

#[test]
fn squeezed_prefix_and_doubled_prompt() {
    // Row 1: keep max(1, floor(2 * 0.5)) = 1 block [1] (4 tokens); prompt
    //   2 -> 4 tokens [11]; length 8. Row 2: [1] + 8 tokens [12, 13] = 12.
    // Row 3: no shared prefix keeps no prefix (AIPerf would add a phantom
    //   512-token block here); prompt 5 -> 10 on [14, 15, 16].
    // Row 5: [1] kept whole (4 tokens); prompt 5 -> 10 on [17, 18, 19] = 14.
    let want = r#"{"timestamp": 1000, "input_length": 8, "output_length": 7, "hash_ids": [1, 11]}
{"timestamp": 1501, "input_length": 12, "output_length": 3, "hash_ids": [1, 12, 13]}
{"timestamp": 3001, "input_length": 10, "output_length": 5, "hash_ids": [14, 15, 16]}
{"timestamp": 4000, "input_length": 100, "output_length": 2, "note": "no ids"}
{"timestamp": 4100, "input_length": 14, "output_length": 0, "hash_ids": [1, 17, 18, 19]}
"#;
    assert_eq!(
        scale(
            &[
                "--prefix-len-multiplier",
                "0.5",
                "--prompt-len-multiplier",
                "2"
            ],
            T1
        ),
        want
    );
}

/// Rows 1 and 2 are the same 6-token prompt: both blocks shared, the last
/// partial (2 tokens). AIPerf 0.13.0 aborts here with `input_len (6) <
/// prefix_len (8)`.
const T2: &str = r#"{"session_id": "s", "input_length": 6, "hash_ids": [1, 5]}
{"session_id": "s", "input_length": 6, "hash_ids": [1, 5]}
{"input_length": 12, "hash_ids": [1, 7, 8]}
"#;

#[test]
fn all_shared_row_with_partial_tail_is_handled() {
    // P = 2: k = 2, fresh from max(9, (5+1)*2 = 12). Rows 1-2: [1,5] ->
    // [2,3,10,11], the last id carrying the 2-token tail: 3*4 + 2 = 14.
    // Row 3: [1] -> [2,3] (8 tokens), prompt 12-4 = 8 on [12, 13]: 16.
    let want = r#"{"session_id": "s", "input_length": 14, "hash_ids": [2, 3, 10, 11]}
{"session_id": "s", "input_length": 14, "hash_ids": [2, 3, 10, 11]}
{"input_length": 16, "hash_ids": [2, 3, 12, 13]}
"#;
    assert_eq!(scale(&["--prefix-len-multiplier", "2"], T2), want);
    // Q = 0.5: rows 1-2 are all prefix (prompt 0) and keep their 6 tokens;
    // row 3: prompt 8 -> 4 tokens on fresh [9]: 4 + 4 = 8.
    let want = r#"{"session_id": "s", "input_length": 6, "hash_ids": [1, 5]}
{"session_id": "s", "input_length": 6, "hash_ids": [1, 5]}
{"input_length": 8, "hash_ids": [1, 9]}
"#;
    assert_eq!(scale(&["--prompt-len-multiplier", "0.5"], T2), want);
}

#[test]
fn speedup_rules_for_timestamps_and_delays() {
    let input = r#"{"timestamp": 7, "delay": 5}
{"timestamp": 2.9, "delay": 1.5}
{"timestamp": -3}
"#;
    // trunc(7/2) = 3, trunc(5/2) = 2; float timestamp -> int(1.45) = 1,
    // float delay stays float 0.75; trunc(-1.5) = -1 (toward zero, as Python's int()).
    let want = r#"{"timestamp": 3, "delay": 2}
{"timestamp": 1, "delay": 0.75}
{"timestamp": -1}
"#;
    assert_eq!(scale(&["--speedup", "2"], input), want);
    let want = r#"{"timestamp": 3, "delay": 5}
{"timestamp": 1, "delay": 1.5}
{"timestamp": -1}
"#;
    assert_eq!(scale(&["--speedup", "2", "--keep-delays"], input), want);
}

/// `--speedup` alone on rows whose timestamp is the only value it changes
/// (no delay, or `--keep-delays`): timestamps of every length from 1 to 17
/// digits (those whose scaled value stays within 2^53), at the line's start and later, scaled into fewer and more
/// digits, each `trunc(t / R)` written as an integer, with the rest of the
/// line byte for byte, and the same as a row whose delay is scaled too.
#[test]
fn speedup_alone_writes_every_timestamp_length_by_the_rule() {
    // Worked by hand: trunc(7 / 2) = 3, trunc(99999999 / 0.5) = 199999998
    // (a ninth digit), trunc(12345678 / 3) = 4115226.
    let input = "{\"timestamp\": 7, \"x\": [1]}\n{\"timestamp\": 99999999, \"x\": [1]}\n";
    assert_eq!(
        scale(&["--speedup", "2"], input),
        "{\"timestamp\": 3, \"x\": [1]}\n{\"timestamp\": 49999999, \"x\": [1]}\n"
    );
    assert_eq!(
        scale(&["--speedup", "0.5"], input),
        "{\"timestamp\": 14, \"x\": [1]}\n{\"timestamp\": 199999998, \"x\": [1]}\n"
    );
    assert_eq!(
        scale(
            &["--speedup", "3"],
            "{\"input_length\": 4, \"timestamp\": 12345678 }\n"
        ),
        "{\"input_length\": 4, \"timestamp\": 4115226 }\n"
    );
    for r in ["2", "3", "0.5", "7.25", "0.001"] {
        let rate: f64 = r.parse().unwrap();
        let (mut input, mut want) = (String::new(), String::new());
        for digits in 1..=17u32 {
            // 1, 12, 123, ... and 9, 99, 999, ...: every length, both ends.
            let ones = (1..=digits).fold(0u64, |t, d| t * 10 + u64::from(d % 10));
            for t in [ones, 10u64.pow(digits) - 1] {
                let new = (t as f64 / rate).trunc();
                if new > 2f64.powi(53) {
                    continue; // an error (tested below)
                }
                let new = new as u64;
                for (row, out) in [
                    (
                        format!(
                            "{{\"timestamp\": {t}, \"input_length\": 5, \"hash_ids\": [1, 2]}}"
                        ),
                        format!(
                            "{{\"timestamp\": {new}, \"input_length\": 5, \"hash_ids\": [1, 2]}}"
                        ),
                    ),
                    (
                        format!("{{\"input_length\":5,\"timestamp\":{t},\"x\":\"y\"}}"),
                        format!("{{\"input_length\":5,\"timestamp\":{new},\"x\":\"y\"}}"),
                    ),
                    (
                        format!("{{\"timestamp\":{t}}}"),
                        format!("{{\"timestamp\":{new}}}"),
                    ),
                ] {
                    input += &row;
                    input.push('\n');
                    want += &out;
                    want.push('\n');
                }
            }
        }
        assert_eq!(scale(&["--speedup", r], &input), want, "--speedup {r}");
        // The same timestamps in rows with a delay: the general path.
        let delayed = input.replace("{\"timestamp\"", "{\"delay\": 0, \"timestamp\"");
        let want_delayed = want.replace("{\"timestamp\"", "{\"delay\": 0, \"timestamp\"");
        assert_eq!(
            scale(&["--speedup", r], &delayed),
            want_delayed,
            "--speedup {r}"
        );
        assert_eq!(
            scale(&["--speedup", r, "--keep-delays"], &delayed),
            want_delayed,
            "--speedup {r} --keep-delays"
        );
    }
}

#[test]
fn bad_options_are_usage_errors() {
    for args in [
        ["--speedup", "0"],
        ["--speedup", "-1"],
        ["--prefix-len-multiplier", "0"],
        ["--block-size", "0"],
    ] {
        tool("mc-scale").args(args).write_stdin("").assert().code(2);
    }
}

#[test]
fn broken_row_names_line_and_field() {
    let input = "{\"input_length\": 8, \"hash_ids\": [1, 2]}\n{\"input_length\": 4, \"hash_ids\": [1, 2, 3]}\n";
    tool("mc-scale")
        .args(["--block-size", "4", "--prompt-len-multiplier", "2"])
        .write_stdin(input)
        .assert()
        .code(65)
        // The good first row (unchanged: all prefix, no prompt) is flushed first.
        .stdout("{\"input_length\": 8, \"hash_ids\": [1, 2]}\n")
        .stderr("mc-scale: line 2: field `input_length`: 4 tokens cannot fill 3 hash ids at block size 4 (check --block-size)\n");
}

/// Issue 9's minimal case: an id first met far above the others (kept in the
/// sparse map) must keep its count when the dense table later grows over it.
#[test]
fn a_large_id_keeps_its_count_when_the_id_table_grows() {
    let first = "{\"input_length\": 1024, \"hash_ids\": [2000000, 2000001]}\n";
    let mut input = String::from(first);
    for row in 0..6000u64 {
        let ids: Vec<String> = (row * 100..row * 100 + 100)
            .map(|i| i.to_string())
            .collect();
        input.push_str(&format!(
            "{{\"input_length\": 51200, \"hash_ids\": [{}]}}\n",
            ids.join(", ")
        ));
    }
    input.push_str(first);
    let out = crate::util::run_ok("mc-scale", &["--prefix-len-multiplier", "2"], &input);
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    // Both ids occur twice: the shared prefix is both blocks, doubled.
    assert_eq!(last["input_length"], 2048, "{last}");
    assert_eq!(last["hash_ids"].as_array().unwrap().len(), 4);
}

#[test]
fn sizes_and_values_from_options_are_bounded_never_clamped() {
    // Id 1 is shared; each row's unique prompt is 1000 - 512 = 488 tokens.
    let input = "{\"timestamp\": 10, \"input_length\": 1000, \"output_length\": 9007199254740992, \"hash_ids\": [1, 2]}\n\
                 {\"timestamp\": 10, \"input_length\": 1000, \"output_length\": 9007199254740992, \"hash_ids\": [1, 3]}\n";
    // A multiplier that would make a row of 1e13 tokens: a bad line naming
    // the limit, before any allocation.
    tool("mc-scale")
        .args(["--prompt-len-multiplier", "1e10"])
        .write_stdin(input)
        .assert()
        .code(65)
        .stdout("")
        .stderr(predicates::str::starts_with(
            // 1000 tokens in 2 ids allow block sizes 500..=999: only 512.
            "mc-scale: block size 512 (detected from 2 rows with hash_ids)\n\
             mc-scale: line 1: field `input_length`: 1000 tokens would become about 4.880e12, above the limit of 10000000 tokens a row",
        ));
    // A timestamp or an answer length that no longer fits is an error, not i64::MAX.
    tool("mc-scale")
        .args(["--speedup", "1e-300"])
        .write_stdin(input)
        .assert()
        .code(65)
        .stderr("mc-scale: line 1: field `timestamp`: scaled to 1.000e301, too large to write exactly (above 2^53); check --speedup\n");
    tool("mc-scale")
        .args(["--output-len-multiplier", "2"])
        .write_stdin(input)
        .assert()
        .code(65)
        .stderr(predicates::str::starts_with(
            "mc-scale: line 1: field `output_length`: scaled to 1.801e16",
        ));
    // An id that cannot be stretched by the option: bad data (the ids),
    // naming the line that holds it.
    let big = "{\"input_length\": 512, \"hash_ids\": [4611686018427387904]}\n".repeat(2);
    tool("mc-scale")
        .args(["--prefix-len-multiplier", "8", "--block-size", "512"])
        .write_stdin(big.clone())
        .assert()
        .code(65)
        .stderr(predicates::str::starts_with("mc-scale: line 1: field `hash_ids`: --prefix-len-multiplier 8: hash id 4611686018427387904 times 8"));
    // The largest id possible, shared: no room above it even at 1x; no panic.
    let max = "{\"input_length\": 512, \"hash_ids\": [18446744073709551615]}\n".repeat(2);
    tool("mc-scale")
        .args(["--prefix-len-multiplier", "3", "--block-size", "512"])
        .write_stdin(max)
        .assert()
        .code(65)
        .stderr(predicates::str::contains("line 1: field `hash_ids`"));
    // Without --block-size, one-block rows of 512 tokens allow any size from
    // 512 up: auto cannot decide, and says so.
    tool("mc-scale")
        .args(["--prefix-len-multiplier", "8"])
        .write_stdin(big)
        .assert()
        .code(65)
        .stderr("mc-scale: --block-size auto: the rows allow block sizes from 512 to any size, more than one power of two; pass --block-size B\n");
}

#[test]
fn whole_input_modes_write_the_good_rows_before_a_bad_line() {
    let good = "{\"input_length\": 1000, \"output_length\": 4, \"hash_ids\": [1, 2]}\n";
    let input = format!("{good}{good}{{\"input_length\": \n{good}");
    // Ids 1 and 2 are shared by the two good rows read before the bad line;
    // doubling stretches them to [2, 3] and [4, 5]; the last block stays
    // partial: 3 full blocks of 512 and the 1000 - 512 = 488 tail = 2024.
    let want = "{\"input_length\": 2024, \"output_length\": 4, \"hash_ids\": [2, 3, 4, 5]}\n";
    tool("mc-scale")
        .args(["--prefix-len-multiplier", "2"])
        .write_stdin(input)
        .assert()
        .code(65)
        .stdout(want.repeat(2))
        .stderr(
            "mc-scale: block size 512 (detected from 2 rows with hash_ids)\n\
             mc-scale: line 3: invalid JSON: expected a value, found end of line\n",
        );
}

#[test]
fn a_block_size_most_rows_contradict_is_bad_data_in_the_filters_too() {
    // Rows of 2 ids and ~1,000 tokens: 512 tokens per id.
    let trace: String = (0..5)
        .map(|i| {
            format!(
                "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": 4, \"hash_ids\": [{}, {}]}}\n",
                i * 10,
                1000 + i,
                i * 3,
                i * 3 + 1
            )
        })
        .collect();
    for (tool, args) in [
        (
            "mc-scale",
            vec!["--block-size", "64", "--prefix-len-multiplier", "2"],
        ),
        ("mc-cap", vec!["--block-size", "64", "--max-isl", "900"]),
    ] {
        let out = crate::util::tool(tool)
            .args(&args)
            .write_stdin(trace.clone())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(65), "{tool}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("pass --block-size 512") && stderr.contains("--engine-block-size"),
            "{tool}: {stderr}"
        );
    }
}

/// A trace of `rows` rows where ids are shared between sessions (so the
/// multipliers have prefixes to stretch), with a bad line every 97 rows.
fn shared_trace(rows: u64) -> String {
    let mut t = String::new();
    for i in 0..rows {
        if i % 97 == 50 {
            t.push_str("{\"input_length\": oops}\n");
            continue;
        }
        let root = i % 7;
        let n = 1 + i % 5;
        let ids: Vec<String> = (0..n)
            .map(|j| {
                if j < 2 {
                    root * 2 + j
                } else {
                    1000 + i * 8 + j
                }
            })
            .map(|v| v.to_string())
            .collect();
        t.push_str(&format!(
            "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": 9, \"hash_ids\": [{}]}}\n",
            i * 3,
            n * 4 - (i % 3),
            ids.join(", ")
        ));
    }
    t
}

#[test]
fn whole_input_modes_read_a_file_a_redirected_stdin_and_a_pipe_alike() {
    // The pipe is copied to a temporary file, the file is read twice: the
    // same rows either way, also with bad lines skipped along the way.
    let trace = shared_trace(1000);
    let dir = tempfile::tempdir().unwrap();
    let path = crate::util::write_file(dir.path(), "t.jsonl", &trace);
    let args = [
        "--block-size",
        "4",
        "--prefix-len-multiplier",
        "2.5",
        "--prompt-len-multiplier",
        "0.5",
        "--on-error",
        "skip",
    ];
    let piped = crate::util::run("mc-scale", &args, &trace);
    assert_eq!(piped.code, Some(0), "{}", piped.stderr);
    assert!(
        piped
            .stderr
            .contains("skipped 10 bad lines (line 51, 148, 245"),
        "{}",
        piped.stderr
    );
    let from_file = tool("mc-scale")
        .args(args)
        .arg("--input")
        .arg(&path)
        .output()
        .unwrap();
    let redirected = tool("mc-scale")
        .args(args)
        .pipe_stdin(&path)
        .unwrap()
        .output()
        .unwrap();
    for out in [from_file, redirected] {
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(String::from_utf8_lossy(&out.stdout), piped.stdout);
        assert_eq!(String::from_utf8_lossy(&out.stderr), piped.stderr);
    }
    // A row the second pass rewrites: row 7 (root 0, 3 ids, 12 - 1 = 11
    // tokens) has the shared prefix [0, 1] (rows 0, 7, 14, … share it):
    // P = 2.5 gives k = 2, [0, 1, 2, 3] and ceil(2 * 2.5) - 4 = 1 fresh
    // block; its 11 - 8 = 3 private tokens halve to 1 token, one more id.
    let row7 = piped.stdout.lines().nth(7).unwrap();
    assert!(
        row7.starts_with("{\"timestamp\": 21, \"input_length\": 21, \"output_length\": 9, \"hash_ids\": [0, 1, 2, 3, "),
        "{row7}"
    );
    assert_eq!(row7.matches(',').count(), 3 + 5, "{row7}");
}

#[test]
fn a_temporary_copy_that_cannot_be_made_names_the_directory_and_tmpdir() {
    let trace = shared_trace(10);
    let out = tool("mc-scale")
        .args(["--block-size", "4", "--prefix-len-multiplier", "2"])
        .env("TMPDIR", "/nonexistent/spool")
        .write_stdin(trace.clone())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(73));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("mc-scale: cannot create a temporary file in /nonexistent/spool (TMPDIR=/nonexistent/spool)"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    // A file needs no copy: the same TMPDIR is no obstacle.
    let dir = tempfile::tempdir().unwrap();
    let path = crate::util::write_file(dir.path(), "t.jsonl", &trace);
    tool("mc-scale")
        .args([
            "--block-size",
            "4",
            "--prefix-len-multiplier",
            "2",
            "--input",
        ])
        .arg(&path)
        .env("TMPDIR", "/nonexistent/spool")
        .assert()
        .success();
}

#[test]
fn a_named_pipe_given_as_input_is_copied_like_stdin() {
    let trace = shared_trace(200);
    let args = [
        "--block-size",
        "4",
        "--prefix-len-multiplier",
        "2",
        "--on-error",
        "skip",
    ];
    let want = crate::util::run("mc-scale", &args, &trace);
    assert_eq!(want.code, Some(0), "{}", want.stderr);
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("trace.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("skipping: mkfifo is not available");
        return;
    }
    let writer = {
        let (fifo, trace) = (fifo.clone(), trace.clone());
        std::thread::spawn(move || std::fs::write(fifo, trace).unwrap())
    };
    let out = tool("mc-scale")
        .args(args)
        .arg("--input")
        .arg(&fifo)
        .output()
        .unwrap();
    writer.join().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), want.stdout);
}

/// `--max-delay` caps think times in the trace's ms, then `--speedup`
/// divides what is left; every path (one thread, chunks on workers, the
/// two-pass prefix path) counts the same two cuts.
#[test]
fn max_delay_caps_then_speedup_divides() {
    let input = "{\"session_id\":\"s\",\"timestamp\":0,\"input_length\":4}\n\
                 {\"session_id\":\"s\",\"delay\":19440000,\"input_length\":4}\n\
                 {\"session_id\":\"s\",\"delay\":500,\"input_length\":4}\n\
                 {\"session_id\":\"s\",\"delay\":1e8,\"input_length\":4}\n";
    // By hand: 19,440,000 > 60,000 is cut to 60,000 (an integer stays one),
    // then / 2 = 30,000; 500 is kept, / 2 = 250; the float 1e8 is cut to
    // 60000.0, / 2 = 30000.0.
    let want = "{\"session_id\":\"s\",\"timestamp\":0,\"input_length\":4}\n\
                {\"session_id\":\"s\",\"delay\":30000,\"input_length\":4}\n\
                {\"session_id\":\"s\",\"delay\":250,\"input_length\":4}\n\
                {\"session_id\":\"s\",\"delay\":30000.0,\"input_length\":4}\n";
    let args = ["--max-delay", "60000", "--speedup", "2"];
    for chunk in [None, Some("40")] {
        let mut cmd = tool("mc-scale");
        if let Some(c) = chunk {
            cmd.env("MCTRACE_CHUNK_BYTES", c);
        }
        let out = cmd.args(args).write_stdin(input).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            want,
            "chunks {chunk:?}"
        );
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.contains("mc-scale: --max-delay 60 s: capped 2 delays"),
            "{err}"
        );
    }
    // Alone, the cut values are written as they are.
    let out = tool("mc-scale")
        .args(["--max-delay", "60000", "--prefix-len-multiplier", "1.5"])
        .write_stdin(input)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("\"delay\":60000,") && text.contains("\"delay\":60000.0,"),
        "{text}"
    );
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("capped 2 delays"));
    tool("mc-scale")
        .arg("--max-delay=-5")
        .write_stdin(input)
        .assert()
        .code(2);
}
