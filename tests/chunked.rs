//! The chunked record loop (filters cut their input into chunks that
//! workers transform while one thread writes them in order) against the
//! loop that reads one line at a time (`--line-buffered` takes it): the
//! same bytes out, the same exit code, the same stderr, whatever the chunk
//! edges. `MCTRACE_CHUNK_BYTES` forces small chunks so a small input has
//! many edges; bad lines, blank lines, rows that need the order (mc-cap's
//! fresh ids) and rows that need their index (mc-roots' rows without a
//! session) are placed on and around those edges.

use crate::util::{tool, with_line_at};

/// What one run left.
#[derive(Debug, PartialEq, Eq)]
pub struct Out {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

pub fn run(t: &str, args: &[&str], input: &[u8], chunk: Option<usize>) -> Out {
    let mut cmd = tool(t);
    cmd.args(args).write_stdin(input.to_vec());
    match chunk {
        Some(n) => cmd.env("MCTRACE_CHUNK_BYTES", n.to_string()),
        None => cmd.env_remove("MCTRACE_CHUNK_BYTES"),
    };
    let out = cmd.output().unwrap();
    Out {
        code: out.status.code(),
        stdout: out.stdout,
        stderr: without_progress(&String::from_utf8_lossy(&out.stderr)),
    }
}

/// Stderr without the progress lines a run prints every few seconds when
/// stderr is not a terminal (`TOOL: line N, X MB (Y MB/s)`): whether one
/// comes depends on how long the run took (chunks of one byte on a loaded
/// machine take seconds), not on what it did.
fn without_progress(stderr: &str) -> String {
    stderr
        .split_inclusive('\n')
        .filter(|l| !(l.trim_end().ends_with(" MB/s)") && l.contains(" MB ")))
        .collect()
}

/// The reference: one line at a time, in order.
pub fn in_order(t: &str, args: &[&str], input: &[u8]) -> Out {
    let mut args = args.to_vec();
    args.push("--line-buffered");
    run(t, &args, input, None)
}

/// Asserts the chunked loop, at each chunk size, matches the reference
/// (also mc-import's and mc-merge's, `chunked_import`).
pub fn same_as_in_order(t: &str, args: &[&str], input: &[u8], chunks: &[Option<usize>]) -> Out {
    let want = in_order(t, args, input);
    for &c in chunks {
        let got = run(t, args, input, c);
        assert_same(
            &got,
            &want,
            &format!("{t} {args:?} with chunks of {c:?} bytes"),
        );
    }
    want
}

/// Asserts a run left what the reference left, saying what differs.
pub fn assert_same(got: &Out, want: &Out, what: &str) {
    assert!(
        got == want,
        "{what}: code {:?} vs {:?}, stderr {:?} vs {:?}, stdout {} vs {} bytes",
        got.code,
        want.code,
        got.stderr,
        want.stderr,
        got.stdout.len(),
        want.stdout.len()
    );
}

/// A trace of `n` rows, Mooncake-shaped: block size 16, ids shared between
/// rows, a session on every third row, a delay on every fifth.
fn trace(n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        let blocks = 1 + (i * 7) % 40;
        let len = (blocks - 1) * 16 + 1 + (i * 5) % 16;
        let ids: Vec<String> = (0..blocks)
            .map(|b| ((i / 3) * 50 + b * (1 + i % 2)).to_string())
            .collect();
        s.push_str(&format!(
            "{{\"timestamp\": {}, \"input_length\": {len}, \"output_length\": {}, \"hash_ids\": [{}]",
            i * 37,
            1 + (i * 13) % 900,
            ids.join(", ")
        ));
        if i % 3 == 0 {
            s.push_str(&format!(", \"session_id\": \"s{}\"", i / 9));
        }
        if i % 5 == 0 {
            s.push_str(&format!(", \"delay\": {}", i % 700));
        }
        s.push_str("}\n");
    }
    s
}

/// The filters, each with options that change rows: mc-cap's `--max-isl
/// 100` at block size 16 cuts inside a block (fresh ids, in order).
const FILTERS: [(&str, &[&str]); 6] = [
    ("mc-cap", &["--max-isl", "100", "--max-osl", "512"]),
    ("mc-cap", &["--max-osl", "512"]),
    ("mc-cap", &["--max-isl", "100", "--drop"]),
    ("mc-scale", &["--speedup", "2"]),
    ("mc-scale", &["--output-len-multiplier", "0.7"]),
    ("mc-roots", &["--roots", "4"]),
];

/// Chunk sizes: the default (2 MB), and small ones that cut a few-MB
/// input into thousands of chunks.
const SIZES: [Option<usize>; 3] = [None, Some(4096), Some(65_537)];

#[test]
fn a_several_mb_trace_gives_the_same_bytes_chunked_and_in_order() {
    let input = trace(25_000);
    assert!(input.len() > 4 << 20, "{} bytes", input.len());
    for (t, args) in FILTERS {
        let out = same_as_in_order(t, args, input.as_bytes(), &SIZES);
        assert_eq!(out.code, Some(0), "{t}: {}", out.stderr);
        assert!(
            out.stdout != input.as_bytes(),
            "{t} {args:?} changed nothing"
        );
    }
}

#[test]
fn fresh_ids_follow_the_input_order_across_chunks() {
    // Row i is cut inside its third block (tokens 32..48 of 50) at block
    // size 16; rows i and i + 100 share that block, so the second gets the
    // first's fresh id, however far apart their chunks.
    // 12,000 rows: past the 10,000 the `--block-size` look-ahead reads (and
    // runs in order) before the chunked loop starts.
    let mut input = String::new();
    for i in 0..12_000u64 {
        let id = 1000 + i % 100;
        input.push_str(&format!(
            "{{\"input_length\": 50, \"output_length\": 1, \"hash_ids\": [1, 2, {id}, {}]}}\n",
            5000 + i
        ));
    }
    let out = same_as_in_order(
        "mc-cap",
        &["--max-isl", "40", "--block-size", "16"],
        input.as_bytes(),
        &[None, Some(100), Some(5000)],
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let base = 1u64 << 48;
    // By hand: fresh ids in order of first use, reused 100 rows later.
    for (i, line) in text.lines().enumerate() {
        let want = format!("[1, 2, {}]", base + (i % 100) as u64);
        assert!(line.contains(&want), "row {i}: {line}");
    }
}

/// `input` with `bad` put in as line `at` (1-based) of the result.
#[test]
fn a_bad_line_on_any_chunk_edge_stops_at_the_same_line_with_the_same_bytes() {
    let good = trace(60);
    for at in [1, 17, 30, 61] {
        let input = with_line_at(&good, at, "{\"timestamp\": ");
        // Every chunk size from one line to a few lines: the bad line is
        // first, last and in the middle of a chunk for some of them.
        let sizes: Vec<Option<usize>> = (1..300).step_by(37).map(Some).collect();
        for (t, args) in FILTERS {
            let out = same_as_in_order(t, args, input.as_bytes(), &sizes);
            assert_eq!(out.code, Some(65), "{t}");
            // (mc-cap --max-isl names its block size first.)
            let last = out.stderr.lines().last().unwrap_or("");
            assert!(
                last.starts_with(&format!("{t}: line {at}: ")),
                "{t}: {}",
                out.stderr
            );
            // Everything before the bad line, nothing after it.
            let before = good.lines().take(at - 1).collect::<Vec<_>>().join("\n") + "\n";
            let want = in_order(t, args, if at == 1 { b"" } else { before.as_bytes() });
            assert_eq!(out.stdout, want.stdout, "{t} {args:?}, bad line {at}");
        }
    }
}

#[test]
fn skipped_lines_are_counted_the_same_and_rows_keep_their_index() {
    // Bad lines (at 3, 50, 51, 202, 336 once all are in), blank lines (100,
    // 101) and a too-long line (250): the row index mc-roots
    // gives rows without a session counts records only, so every chunk
    // after these guesses its rows wrong and is made again in order.
    let mut input = trace(400);
    for at in [3, 50, 51, 200, 333] {
        input = with_line_at(&input, at, "not json");
    }
    input = with_line_at(&input, 100, "");
    input = with_line_at(&input, 101, "   ");
    input = with_line_at(
        &input,
        250,
        &format!("{{\"pad\": \"{}\"}}", "x".repeat(3000)),
    );
    let sizes = [None, Some(1), Some(700), Some(5000)];
    for (t, args) in FILTERS {
        let mut args = args.to_vec();
        args.extend(["--on-error", "skip", "--max-line-bytes", "2000"]);
        let out = same_as_in_order(t, &args, input.as_bytes(), &sizes);
        assert_eq!(out.code, Some(0), "{t}: {}", out.stderr);
        // The `--block-size auto` look-ahead meets the too-long line (250)
        // while reading ahead, before any record is parsed.
        let lookahead = args.contains(&"--max-isl") && !args.contains(&"--drop");
        let lines = match lookahead {
            true => "line 250, 3, 50, 51, 202, …",
            false => "line 3, 50, 51, 202, 250, …",
        };
        let want = format!("skipped 6 bad lines ({lines})");
        assert!(out.stderr.contains(&want), "{t}: {}", out.stderr);
    }
}

#[test]
fn the_first_line_rules_hold_across_chunk_edges() {
    // Leading blank lines over several chunks, then a BOM line: the BOM is
    // stripped on the first non-blank line only.
    let body = trace(20);
    let input = format!("\n  \n\n\u{feff}{body}");
    for (t, args) in FILTERS {
        let out = same_as_in_order(t, args, input.as_bytes(), &[Some(1), Some(3), None]);
        assert_eq!(out.code, Some(0), "{t}: {}", out.stderr);
    }
    // A JSON array after blank lines is named as one, on its line.
    let array = "\n\n\n[{\"timestamp\": 1}]\n";
    for (t, args) in FILTERS {
        let out = same_as_in_order(t, args, array.as_bytes(), &[Some(1), Some(2), None]);
        assert_ne!(out.code, Some(0), "{t}");
        assert!(
            out.stderr.contains("line 4: this is a JSON array"),
            "{t}: {}",
            out.stderr
        );
    }
}

#[test]
fn a_file_input_is_chunked_like_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let input = trace(3000);
    std::fs::write(&path, &input).unwrap();
    let want = in_order("mc-roots", &["--roots", "3"], input.as_bytes());
    let got = tool("mc-roots")
        .args(["--roots", "3", "--input"])
        .arg(&path)
        .env("MCTRACE_CHUNK_BYTES", "999")
        .output()
        .unwrap();
    assert_eq!(got.status.code(), Some(0));
    assert_eq!(got.stdout, want.stdout);
}
