//! mc-import's chunked line loop (Azure and BurstGPT rows converted by
//! two workers, written in order) and mc-merge interleave's read-ahead
//! (each input parsed and rewritten a batch ahead on its own thread)
//! against the in-order paths `--line-buffered` takes: the same bytes out,
//! the same exit code, the same stderr, whatever the chunk edges.
//! `MCTRACE_CHUNK_BYTES` forces small chunks and batches, so a small input
//! has many edges; bad lines sit on and around them.

use crate::chunked::{assert_same, in_order, run, same_as_in_order, Out};
use crate::util::with_line_at;

/// `input` with `bad` put in as line `at` (1-based) of the result.
/// An Azure 2024 CSV of `n` rows: row i arrives i * 250 ms after
/// 2024-05-10 00:00:00 (so its timestamp is `i * 250` by hand), with
/// `100 + i` context and `1 + i % 50` generated tokens.
fn azure(n: usize) -> String {
    let mut s = String::from("TIMESTAMP,ContextTokens,GeneratedTokens\n");
    for i in 0..n {
        let ms = i * 250;
        let (sec, frac) = (ms / 1000, ms % 1000);
        let stamp = format!(
            "2024-05-10 {:02}:{:02}:{:02}",
            sec / 3600,
            sec / 60 % 60,
            sec % 60
        );
        let stamp = match frac {
            0 => format!("{stamp}+00:00"),
            f => format!("{stamp}.{:03}0000+00:00", f),
        };
        s.push_str(&format!("{stamp},{},{}\n", 100 + i, 1 + i % 50));
    }
    s
}

/// A BurstGPT v1 CSV of `n` rows: every fourth a GPT-4 row, every seventh
/// a failure (0 response tokens).
fn burstgpt(n: usize) -> String {
    let mut s =
        String::from("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n");
    for i in 0..n {
        let model = if i % 4 == 0 { "GPT-4" } else { "ChatGPT" };
        let out = if i % 7 == 0 { 0 } else { 10 + i % 90 };
        s.push_str(&format!(
            "{},{model},{},{out},{},Conversation log\n",
            i * 3,
            200 + i,
            200 + i + out
        ));
    }
    s
}

const IMPORTS: [&[&str]; 4] = [
    &["--from", "azure"],
    &["--from", "azure", "--float-timestamps"],
    &["--from", "burstgpt"],
    &["--from", "burstgpt", "--model", "gpt-4", "--keep-failed"],
];

/// The input each import reads.
fn input_for(args: &[&str], n: usize) -> String {
    if args[1] == "azure" {
        azure(n)
    } else {
        burstgpt(n)
    }
}

#[test]
fn imported_rows_are_the_same_chunked_and_in_order() {
    for args in IMPORTS {
        let input = input_for(args, 20_000);
        let out = same_as_in_order(
            "mc-import",
            args,
            input.as_bytes(),
            &[None, Some(1), Some(4096), Some(65_537)],
        );
        assert_eq!(out.code, Some(0), "{args:?}: {}", out.stderr);
        let rows = String::from_utf8(out.stdout).unwrap();
        if args == ["--from", "azure"] {
            // By hand: row i at i * 250 ms from the first row.
            for (i, line) in rows.lines().enumerate() {
                let want = format!(
                    "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}}}",
                    i * 250,
                    100 + i,
                    1 + i % 50
                );
                assert_eq!(line, want, "row {i}");
            }
            assert_eq!(rows.lines().count(), 20_000);
        }
    }
}

#[test]
fn a_bad_import_row_on_any_chunk_edge_stops_at_the_same_line() {
    for args in IMPORTS {
        let good = input_for(args, 60);
        // Line 2 is the first row (Azure's zero comes from it), 62 the last.
        for at in [2, 3, 17, 30, 62] {
            let input = with_line_at(&good, at, "2024-13-01 00:00:00,5,5");
            let sizes: Vec<Option<usize>> = (1..300).step_by(37).map(Some).collect();
            let out = same_as_in_order("mc-import", args, input.as_bytes(), &sizes);
            assert_eq!(out.code, Some(65), "{args:?}");
            let last = out.stderr.lines().last().unwrap_or("");
            assert!(
                last.starts_with(&format!("mc-import: line {at}: ")),
                "{args:?}: {}",
                out.stderr
            );
            // Everything before the bad line, nothing after it.
            let before = good.lines().take(at - 1).collect::<Vec<_>>().join("\n") + "\n";
            let want = in_order("mc-import", args, before.as_bytes());
            assert_eq!(out.stdout, want.stdout, "{args:?}, bad line {at}");
        }
    }
}

#[test]
fn skipped_import_rows_are_counted_the_same_across_chunks() {
    for args in IMPORTS {
        let mut input = input_for(args, 400);
        // Bad rows at 2 (Azure's first row: the zero comes from the next
        // good one), 50, 51, 200, 333; blank lines at 100 and 101; a line
        // over the limit at 250.
        for at in [2, 50, 51, 200, 333] {
            input = with_line_at(&input, at, "x,y,z");
        }
        input = with_line_at(&input, 100, "");
        input = with_line_at(&input, 101, "   ");
        input = with_line_at(&input, 250, &"9".repeat(3000));
        let mut args = args.to_vec();
        args.extend(["--on-error", "skip", "--max-line-bytes", "2000"]);
        let out = same_as_in_order(
            "mc-import",
            &args,
            input.as_bytes(),
            &[None, Some(1), Some(700), Some(5000)],
        );
        assert_eq!(out.code, Some(0), "{args:?}: {}", out.stderr);
        assert!(
            out.stderr
                .contains("skipped 6 bad lines (line 2, 50, 51, 202, 250, …)"),
            "{args:?}: {}",
            out.stderr
        );
    }
    // The drop counts of a filter, added up over the chunks, reasons in the
    // order first met (row 0 is a GPT-4 failure): of 400 rows, 100 are
    // GPT-4 (i % 4 == 0), 15 of them failures (i % 28 == 0).
    let out = same_as_in_order(
        "mc-import",
        &["--from", "burstgpt", "--model", "GPT-4"],
        burstgpt(400).as_bytes(),
        &[Some(1), Some(333)],
    );
    assert!(
        out.stderr.contains(
            "burstgpt: 400 rows in, 85 rows out, 15 dropped (failed: 0 response tokens), 300 dropped (--model)"
        ),
        "{}",
        out.stderr
    );
}

#[test]
fn an_azure_row_before_the_first_is_named_on_any_chunk_edge() {
    // Row 41 (line 42) goes back before row 0's time: the zero set in order
    // holds for every worker.
    let good = azure(80);
    let input = with_line_at(&good, 42, "2024-05-09 23:59:59+00:00,1,1");
    let sizes: Vec<Option<usize>> = (1..200).step_by(23).map(Some).collect();
    let out = same_as_in_order("mc-import", &["--from", "azure"], input.as_bytes(), &sizes);
    assert_eq!(out.code, Some(65));
    assert!(
        out.stderr.contains("line 42: column 1 (`TIMESTAMP`)")
            && out.stderr.contains("before the first row's time"),
        "{}",
        out.stderr
    );
}

/// The read-ahead's workers guess that a chunk after the first follows a
/// non-blank line; after chunks of blank lines only the guess is wrong and
/// the chunk is made again in order: the BOM is stripped and the first line
/// sniffed there, as in order (decision 0048).
#[test]
fn interleave_read_ahead_takes_the_first_line_rules_after_blank_chunks() {
    let b = trace(50, 5, 15);
    let blanks = "\n".repeat(40);
    let sizes: Vec<Option<usize>> = [1, 7, 39, 45, 200].into_iter().map(Some).collect();
    let a = format!("{blanks}\u{feff}{}", trace(60, 0, 10));
    let out = merge_same(&["interleave"], &a, &b, &sizes);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 110);
    let a = format!("{blanks}timestamp,input_length\n{}", trace(60, 0, 10));
    let out = merge_same(&["interleave", "--on-error", "skip"], &a, &b, &sizes);
    assert_eq!(out.code, Some(65));
    assert!(
        out.stderr.contains("DIR/a.jsonl: line 41: "),
        "{}",
        out.stderr
    );
}

/// A sorted Mooncake-shaped trace of `n` rows from time `start`, a
/// session on every third row.
fn trace(n: usize, start: usize, step: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        s.push_str(&format!(
            "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": 3, \"hash_ids\": [{}, {}]",
            start + i * step,
            20 + i % 7,
            i % 5,
            100 + i
        ));
        if i % 3 == 0 {
            s.push_str(&format!(", \"session_id\": \"s{}\"", i / 3));
        }
        s.push_str("}\n");
    }
    s
}

/// Runs `mc-merge ARGS a b` with the two inputs in files.
fn merge(args: &[&str], a: &str, b: &str, chunk: Option<usize>) -> Out {
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    std::fs::write(&pa, a).unwrap();
    std::fs::write(&pb, b).unwrap();
    let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    all.push(pa.display().to_string());
    all.push(pb.display().to_string());
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let out = run("mc-merge", &all, b"", chunk);
    // The file names differ from run to run only in the temporary folder.
    let dir = dir.path().display().to_string();
    Out {
        stderr: out.stderr.replace(&dir, "DIR"),
        ..out
    }
}

/// Asserts the read-ahead merge matches the in-order one at each size.
fn merge_same(args: &[&str], a: &str, b: &str, sizes: &[Option<usize>]) -> Out {
    let mut reference = args.to_vec();
    reference.push("--line-buffered");
    let want = merge(&reference, a, b, None);
    for &c in sizes {
        let got = merge(args, a, b, c);
        assert_same(
            &got,
            &want,
            &format!("mc-merge {args:?} with batches of {c:?} bytes"),
        );
    }
    want
}

#[test]
fn interleave_read_ahead_gives_the_same_bytes_as_in_order() {
    let (a, b) = (trace(3000, 0, 10), trace(2000, 5, 15));
    for args in [
        &["interleave"][..],
        &["interleave", "--shared-ids"],
        &["interleave", "--scale-rate", "2,1"],
    ] {
        let out = merge_same(args, &a, &b, &[None, Some(1), Some(999)]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 5000);
    }
    // By hand, the first rows: a's 0 (file 0 of 2: id h -> 2h), b's at 5
    // (2h + 1), a's at 10.
    let out = merge(&["interleave"], &a, &b, Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    let first: Vec<&str> = text.lines().take(3).collect();
    assert!(first[0].starts_with("{\"timestamp\": 0,") && first[0].contains("[0, 200]"));
    assert!(first[1].starts_with("{\"timestamp\": 5,") && first[1].contains("[1, 201]"));
    assert!(first[2].starts_with("{\"timestamp\": 10,") && first[2].contains("[2, 202]"));
}

#[test]
fn interleave_bad_lines_stop_or_are_counted_on_any_batch_edge() {
    let b = trace(200, 5, 15);
    for at in [1, 17, 60, 121] {
        let a = with_line_at(&trace(120, 0, 10), at, "{\"timestamp\": ");
        let sizes: Vec<Option<usize>> = (1..600).step_by(97).map(Some).collect();
        let out = merge_same(&["interleave"], &a, &b, &sizes);
        assert_eq!(out.code, Some(65));
        assert!(
            out.stderr.contains(&format!("DIR/a.jsonl: line {at}: ")),
            "{}",
            out.stderr
        );
        let out = merge_same(&["interleave", "--on-error", "skip"], &a, &b, &sizes);
        assert_eq!(out.code, Some(0));
        assert!(
            out.stderr
                .contains(&format!("DIR/a.jsonl: skipped 1 bad line (line {at})")),
            "{}",
            out.stderr
        );
    }
    // An unsorted row is named with its line in either file.
    let a = with_line_at(&trace(120, 100, 10), 70, "{\"timestamp\": 3}");
    let out = merge_same(&["interleave"], &b, &a, &[Some(1), Some(250)]);
    assert_eq!(out.code, Some(65));
    assert!(
        out.stderr
            .contains("DIR/b.jsonl: line 70: timestamp 3 is earlier than 780 on line 69"),
        "{}",
        out.stderr
    );
}

/// An AIBrix JSONL workload of `n` entries: entry i at i * 40 ms with one
/// to three requests, every other one with a prompt (so with text), some
/// with a numeric session.
fn aibrix(n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        let reqs: Vec<String> = (0..1 + i % 3)
            .map(|k| {
                let prompt = if (i + k) % 2 == 0 {
                    format!("\"prompt\": \"say {i}.{k}\", ")
                } else {
                    String::new()
                };
                let session = if i % 5 == 0 {
                    format!(", \"session_id\": {}", i / 5)
                } else {
                    String::new()
                };
                format!(
                    "{{{prompt}\"prompt_length\": {}, \"output_length\": {}{session}}}",
                    10 + i,
                    1 + k
                )
            })
            .collect();
        s.push_str(&format!(
            "{{\"timestamp\": {}, \"requests\": [{}]}}\n",
            i * 40,
            reqs.join(", ")
        ));
    }
    s
}

#[test]
fn aibrix_entries_are_the_same_chunked_and_in_order() {
    let input = aibrix(5000);
    for args in [
        &["--from", "aibrix"][..],
        &["--from", "aibrix", "--no-text"],
    ] {
        let out = same_as_in_order(
            "mc-import",
            args,
            input.as_bytes(),
            &[None, Some(1), Some(4096), Some(65_537)],
        );
        assert_eq!(out.code, Some(0), "{args:?}: {}", out.stderr);
        let rows = String::from_utf8(out.stdout).unwrap();
        // 5000 entries of 1, 2, 3 requests in turn.
        let n = 1667 + 1667 * 2 + 1666 * 3;
        assert_eq!(rows.lines().count(), n);
        let summary = format!("aibrix: {n} rows in, {n} rows out");
        assert!(out.stderr.contains(&summary), "{}", out.stderr);
    }
}

#[test]
fn a_bad_aibrix_entry_on_any_chunk_edge_stops_or_is_skipped_at_the_same_line() {
    let good = aibrix(60);
    for bad in [
        "{\"timestamp\": -5, \"requests\": []}",
        "{\"timestamp\": 5, \"requests\": [{\"output_length\": 1}]}",
        "{\"timestamp\": 5, \"requests\": [{\"prompt_length\": 1}, {\"prompt_length\": 20000000}]}",
        "{\"timestamp\": ",
    ] {
        for at in [1, 2, 17, 30, 61] {
            let input = with_line_at(&good, at, bad);
            let sizes: Vec<Option<usize>> = (1..400).step_by(37).map(Some).collect();
            let out =
                same_as_in_order("mc-import", &["--from", "aibrix"], input.as_bytes(), &sizes);
            assert_eq!(out.code, Some(65), "{bad} at {at}: {}", out.stderr);
            assert!(
                out.stderr.contains(&format!("mc-import: line {at}: ")),
                "{bad} at {at}: {}",
                out.stderr
            );
            let args = ["--from", "aibrix", "--on-error", "skip"];
            let out = same_as_in_order("mc-import", &args, input.as_bytes(), &sizes);
            assert_eq!(out.code, Some(0), "{bad} at {at}: {}", out.stderr);
            assert!(
                out.stderr
                    .contains(&format!("skipped 1 bad line (line {at})")),
                "{bad} at {at}: {}",
                out.stderr
            );
        }
    }
}

#[test]
fn an_aibrix_length_over_the_limit_is_named_by_its_request() {
    let input = with_line_at(
        &aibrix(40),
        23,
        "{\"timestamp\": 5, \"requests\": [{\"prompt_length\": 1}, {\"prompt_length\": 20000000}]}",
    );
    let out = run(
        "mc-import",
        &["--from", "aibrix"],
        input.as_bytes(),
        Some(100),
    );
    assert_eq!(out.code, Some(65));
    assert!(
        out.stderr.contains(
            "line 23: field `requests[1].prompt_length`: 20000000 tokens is above the limit of 10000000 tokens per row"
        ),
        "{}",
        out.stderr
    );
}

#[test]
fn concat_read_ahead_gives_the_same_bytes_as_in_order() {
    let (a, b) = (trace(3000, 0, 10), trace(2000, 5, 15));
    for args in [
        &["concat"][..],
        &["concat", "--gap-ms", "100", "--shared-ids"],
        &["concat", "--weights", "1,2", "--seed", "3"],
        &["interleave", "--weights", "2,1", "--seed", "5"],
        &["concat", "--scale-rate", "2,1"],
    ] {
        let out = merge_same(args, &a, &b, &[None, Some(1), Some(999)]);
        assert_eq!(out.code, Some(0), "{args:?}: {}", out.stderr);
    }
    // Bad lines on any batch edge, in either file: stop at, or skip, the
    // same line.
    let b = trace(200, 5, 15);
    for at in [1, 17, 60, 121] {
        let a = with_line_at(&trace(120, 0, 10), at, "{\"timestamp\": ");
        let sizes: Vec<Option<usize>> = (1..600).step_by(97).map(Some).collect();
        for (x, y, file) in [(&a, &b, "a"), (&b, &a, "b")] {
            let out = merge_same(&["concat"], x, y, &sizes);
            assert_eq!(out.code, Some(65));
            assert!(
                out.stderr
                    .contains(&format!("DIR/{file}.jsonl: line {at}: ")),
                "{}",
                out.stderr
            );
            let out = merge_same(&["concat", "--on-error", "skip"], x, y, &sizes);
            assert_eq!(out.code, Some(0));
            assert!(
                out.stderr
                    .contains(&format!("DIR/{file}.jsonl: skipped 1 bad line (line {at})")),
                "{}",
                out.stderr
            );
        }
    }
}
