//! mc-import: expected values are checked by hand against the source rows.

use mctrace::graph::{Graphs, RowKind};

use crate::util::{data_dir, deps_by_id, run, run_code, run_ok, run_ok_both, temp_files, tool};

#[test]
fn azure_2023_shape_crlf_no_final_newline() {
    // 18:17:03.9799600 -> 0; 18:17:04.0319600 is 52.0 ms later; the last
    // row 18:17:05.0000001 is 1020.0401 ms after the first (floored to 1020).
    let input = "TIMESTAMP,ContextTokens,GeneratedTokens\r\n\
                 2023-11-16 18:17:03.9799600,4808,10\r\n\
                 2023-11-16 18:17:04.0319600,3180,8\r\n\
                 2023-11-16 18:17:05.0200001,1,2";
    let out = run_ok("mc-import", &["--from", "azure"], input);
    assert_eq!(
        out,
        "{\"timestamp\": 0, \"input_length\": 4808, \"output_length\": 10}\n\
         {\"timestamp\": 52, \"input_length\": 3180, \"output_length\": 8}\n\
         {\"timestamp\": 1040, \"input_length\": 1, \"output_length\": 2}\n"
    );
    let out = run_ok(
        "mc-import",
        &["--from", "azure", "--float-timestamps"],
        input,
    );
    // 05.0200001 - 03.9799600 = 1.0400401 s = 1040.0401 ms.
    assert!(
        out.lines()
            .nth(2)
            .unwrap()
            .starts_with("{\"timestamp\": 1040.0401,"),
        "{out}"
    );
}

#[test]
fn azure_2024_shape_mixed_precision_and_offsets() {
    // Rows with and without fractions, all +00:00: 0, 500 ms, 1000 ms, 1000.25 ms.
    let input = "\u{feff}TIMESTAMP,ContextTokens,GeneratedTokens\n\
                 2024-05-10 00:00:00+00:00,10,1\n\
                 2024-05-10 00:00:00.5+00:00,20,2\n\
                 2024-05-10 00:00:01+00:00,30,3\n\
                 2024-05-10 00:00:01.00025+00:00,40,4\n";
    let out = run_ok("mc-import", &["--from", "auto"], input);
    let ts: Vec<&str> = out
        .lines()
        .map(|l| {
            l.split(',')
                .next()
                .unwrap()
                .trim_start_matches("{\"timestamp\": ")
        })
        .collect();
    assert_eq!(ts, ["0", "500", "1000", "1000"]);
}

#[test]
fn synth_hash_ids_only_when_asked() {
    let input = "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00+00:00,1025,1\n2024-05-10 00:00:01+00:00,512,1\n";
    let plain = run_ok("mc-import", &["--from", "azure"], input);
    assert!(!plain.contains("hash_ids"));
    let synth = run_ok("mc-import", &["--from", "azure", "--synth-hash-ids"], input);
    // 1025 tokens = 3 blocks of 512 (0, 1, 2); 512 tokens = 1 fresh block (3).
    assert!(
        synth
            .lines()
            .next()
            .unwrap()
            .ends_with("\"hash_ids\": [0, 1, 2]}"),
        "{synth}"
    );
    assert!(
        synth
            .lines()
            .nth(1)
            .unwrap()
            .ends_with("\"hash_ids\": [3]}"),
        "{synth}"
    );
}

#[test]
fn bad_csv_row_names_line_and_column() {
    let input = "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00+00:00,10,1\n2024-05-10 00:00:01+00:00,ten,1\n";
    let out = tool("mc-import")
        .args(["--from", "azure"])
        .write_stdin(input)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "line 3: column 2 (`ContextTokens`): expected a non-negative integer, found `ten`"
        ),
        "{err}"
    );
    // The good row before it was written.
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    let skip = tool("mc-import")
        .args(["--from", "azure", "--on-error", "skip"])
        .write_stdin(input)
        .output()
        .unwrap();
    assert!(skip.status.success());
    assert!(String::from_utf8_lossy(&skip.stderr).contains("skipped 1 bad line (line 3)"));
}

#[test]
fn unknown_formats_are_refused_by_auto() {
    let out = tool("mc-import")
        .args(["--from", "auto"])
        .write_stdin("{\"timestamp\": 0, \"hash_ids\": [1]}\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
}

#[test]
fn real_azure_2023_files() {
    let Some(dir) = data_dir("real_azure_2023_files") else {
        return;
    };
    let dir = dir.join("azure-llm-2023");
    // code: first row 2023-11-16 18:17:03.9799600,4808,10 -> 0;
    // last row 2023-11-16 19:14:19.9280160,549,173: 57 min 15.948056 s later -> 3435948 ms.
    // conv: first row 18:15:46.6805900,374,44 -> 0; last 19:14:08.4025270,197,183:
    // 58 min 21.721937 s later -> 3501721 ms.
    for (file, rows, last) in [
        (
            "AzureLLMInferenceTrace_code.csv",
            8819,
            "{\"timestamp\": 3435948, \"input_length\": 549, \"output_length\": 173}",
        ),
        (
            "AzureLLMInferenceTrace_conv.csv",
            19366,
            "{\"timestamp\": 3501721, \"input_length\": 197, \"output_length\": 183}",
        ),
    ] {
        let path = dir.join(file);
        let out = run_ok(
            "mc-import",
            &["--from".as_ref(), "azure".as_ref(), path.as_os_str()],
            "",
        );
        assert_eq!(out.lines().count(), rows, "{file}");
        assert!(
            out.lines()
                .next()
                .unwrap()
                .starts_with("{\"timestamp\": 0,"),
            "{file}"
        );
        assert_eq!(out.lines().last().unwrap(), last, "{file}");
    }
}

/// A Mooncake row as mc-import writes it, read back strictly.
#[derive(Debug, serde::Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Row {
    #[serde(default)]
    timestamp: Option<f64>,
    #[serde(default)]
    delay: Option<f64>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    parent_session_id: Option<String>,
    #[serde(default)]
    input_length: Option<u64>,
    #[serde(default)]
    text_input: Option<String>,
    #[serde(default)]
    output_length: Option<u64>,
    #[serde(default)]
    hash_ids: Option<Vec<u64>>,
}

fn rows(out: &str) -> Vec<Row> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Runs mc-import and returns (stdout, stderr), asserting success.
fn import(args: &[&str], input: &str) -> (String, String) {
    run_ok_both("mc-import", args, input)
}

/// Runs mc-import expecting exit code 65 and returns stderr.
fn import_bad(args: &[&str], input: &str) -> String {
    run_code("mc-import", args, input, 65)
}

const BURST_V1: &str = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\r\n\
    5,ChatGPT,472,18,490,Conversation log\r\n\
    45,ChatGPT,1087,0,1087,Conversation log\r\n\
    45.5,GPT-4,417,276,693,API log\r\n\
    118,GPT-4,1025,3,1028,Conversation log";

#[test]
fn burstgpt_seconds_to_ms_and_failures_dropped() {
    let (out, err) = import(&["--from", "burstgpt"], BURST_V1);
    // 5 s -> 5000 ms; 45.5 s -> 45500 ms; the 0-response row at 45 s is a failure.
    assert_eq!(
        out,
        "{\"timestamp\": 5000, \"input_length\": 472, \"output_length\": 18}\n\
         {\"timestamp\": 45500, \"input_length\": 417, \"output_length\": 276}\n\
         {\"timestamp\": 118000, \"input_length\": 1025, \"output_length\": 3}\n"
    );
    assert!(
        err.contains("burstgpt: 4 rows in, 3 rows out, 1 dropped (failed: 0 response tokens)"),
        "{err}"
    );
    let (kept, _) = import(&["--from", "burstgpt", "--keep-failed"], BURST_V1);
    let r = rows(&kept);
    assert_eq!(r.len(), 4);
    assert_eq!(
        (r[1].timestamp, r[1].output_length),
        (Some(45000.0), Some(0))
    );
}

#[test]
fn burstgpt_model_and_log_type_filters() {
    let (out, err) = import(&["--from", "burstgpt", "--model", "gpt-4"], BURST_V1);
    let r = rows(&out);
    assert_eq!(
        r.iter()
            .map(|r| r.input_length.unwrap())
            .collect::<Vec<_>>(),
        [417, 1025]
    );
    // 2 ChatGPT rows are other models (the failed one is counted as that first).
    assert!(
        err.contains("4 rows in, 2 rows out, 2 dropped (--model)"),
        "{err}"
    );
    let (out, err) = import(
        &[
            "--from",
            "burstgpt",
            "--model",
            "GPT-4",
            "--model",
            "ChatGPT",
            "--log-type",
            "Conversation log",
        ],
        BURST_V1,
    );
    assert_eq!(
        rows(&out)
            .iter()
            .map(|r| r.input_length.unwrap())
            .collect::<Vec<_>>(),
        [472, 1025]
    );
    assert!(
        err.contains(
            "4 rows in, 2 rows out, 1 dropped (failed: 0 response tokens), 1 dropped (--log-type)"
        ),
        "{err}"
    );
}

#[test]
fn burstgpt_v3_sessions_and_synth_ids() {
    // v3 adds Session ID and Elapsed time, here in another column order.
    let input = "\u{feff}Timestamp,Session ID,Model,Request tokens,Response tokens,Total tokens,Log Type,Elapsed time\n\
                 0.25,s1,ChatGPT,600,10,610,Conversation log,1.5\n\
                 1,,ChatGPT,100,10,110,API log,0.5\n\
                 2.0005,s1,ChatGPT,1100,20,1120,Conversation log,2\n";
    let (out, _) = import(&["--from", "auto", "--synth-hash-ids"], input);
    let r = rows(&out);
    assert_eq!(r.len(), 3);
    assert_eq!(r[0].session_id.as_deref(), Some("s1"));
    assert_eq!(r[1].session_id, None);
    assert_eq!(r[2].session_id.as_deref(), Some("s1"));
    // 0.25 s -> 250 ms; 2.0005 s -> 2000.5 ms, floored to 2000.
    assert_eq!(r[0].timestamp, Some(250.0));
    assert_eq!(r[2].timestamp, Some(2000.0));
    // Fresh blocks per row at 512: 600 -> [0, 1]; 100 -> [2]; 1100 -> [3, 4, 5].
    assert_eq!(r[0].hash_ids.as_deref(), Some(&[0, 1][..]));
    assert_eq!(r[1].hash_ids.as_deref(), Some(&[2][..]));
    assert_eq!(r[2].hash_ids.as_deref(), Some(&[3, 4, 5][..]));
    let (plain, _) = import(&["--from", "burstgpt"], input);
    assert!(!plain.contains("hash_ids"));
}

#[test]
fn burstgpt_bad_rows_name_line_and_column() {
    let input = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                 5,ChatGPT,472,18,490,Conversation log\n\
                 6,ChatGPT,472,many,490,Conversation log\n\
                 soon,ChatGPT,1,1,2,Conversation log\n";
    let err = import_bad(&["--from", "burstgpt"], input);
    assert!(
        err.contains(
            "line 3: column 4 (`Response tokens`): expected a non-negative integer, found `many`"
        ),
        "{err}"
    );
    let (_, err) = import(&["--from", "burstgpt", "--on-error", "skip"], input);
    assert!(err.contains("skipped 2 bad lines (line 3, 4)"), "{err}");
    // A header without a needed column says which columns there are.
    let err = import_bad(&["--from", "burstgpt"], "Timestamp,Model\n1,x\n");
    assert!(
        err.contains("line 1: the header has no `Request tokens` column"),
        "{err}"
    );
    // A filter needs its column.
    let err = import_bad(
        &["--from", "burstgpt", "--log-type", "API log"],
        "Timestamp,Request tokens,Response tokens\n1,2,3\n",
    );
    assert!(err.contains("no `Log Type` column"), "{err}");
    // A row short of a column the header has is bad, whether or not a
    // filter reads that column (without one, it is only checked).
    let short = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                 1,ChatGPT,2,3,5\n";
    for args in [
        &["--from", "burstgpt"][..],
        &["--from", "burstgpt", "--log-type", "API log"],
    ] {
        let err = import_bad(args, short);
        assert!(
            err.contains("line 2: column 6 (`Log Type`): missing (too few columns)"),
            "{args:?}: {err}"
        );
    }
}

/// `mc-import --from ragpulse --on-error skip PATH`: (stdout, stderr).
fn import_ragpulse_skipping(path: &std::path::Path) -> (String, String) {
    import(
        &[
            "--from",
            "ragpulse",
            "--on-error",
            "skip",
            path.to_str().unwrap(),
        ],
        "",
    )
}

/// A RAGPulse folder: the trace and its five component files.
fn ragpulse_dir(trace: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let w = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    // System prompt chunks 100 (512 tokens) and 101 (100); passages 0 (400)
    // and 1 (30); history 200 (11); user inputs 300 (5) and 301 (7).
    w(
        "1_sys_prompt.jsonl",
        "{\"sys_prompt_id\": 100, \"token_length\": 512}\n{\"sys_prompt_id\": 101, \"token_length\": 100}\n\n",
    );
    w(
        "2_passages.jsonl",
        "{\"passage_id\": 0, \"token_length\": 400}\r\n{\"passage_id\": 1, \"token_length\": 30}",
    );
    w(
        "3_history.jsonl",
        "{\"history_id\": 200, \"token_length\": 11}\n",
    );
    w(
        "4_user_input.jsonl",
        "\u{feff}{\"user_input_id\": 300, \"token_length\": 5}\n{\"user_input_id\": 301, \"token_length\": 7}\n",
    );
    w("5_web_search.jsonl", "");
    w("0_trace.jsonl", trace);
    dir
}

fn rag_row(ts: &str, input: u64, sys: &str, passages: &str, user: &str, session: &str) -> String {
    format!(
        "{{\"timestamp\": \"{ts}\", \"input_length\": {input}, \"output_length\": 9, \"hash_ids\": \
         {{\"sys_prompt\": [{sys}], \"passages_ids\": [{passages}], \"history\": [200], \
         \"web_search\": [], \"user_input\": [{user}]}}, \"session_id\": \"{session}\"}}\n"
    )
}

#[test]
fn ragpulse_three_requests_share_their_prefix_blocks() {
    // Components in order: sys 100 (512) + 101 (100), passages, history 200
    // (11), user input; B = 512.
    // Row 1: 512+100 + 400+30 + 11 + 5 = 1058, + 6 template tokens = 1064:
    //   block 0 = sys100[0,512); block 1 = sys101 + p0 + p1[0,...) up to 512
    //   (100+400+12); block 2 = the other 40 tokens (p1[12,30), h, u300, 6 T).
    //   -> [0, 1, 2], ceil(1064/512) = 3.
    // Row 2: same components, user 301 (7), 1060 + 8 template = 1068:
    //   blocks 0 and 1 as row 1 (same content, same parents); block 2 holds
    //   u301, not u300 -> 3.  -> [0, 1, 3].
    // Row 3: passages in the other order (p1 then p0): block 0 shared,
    //   block 1 = sys101 + p1 + p0[0,382) differs -> 4; block 2 -> 5.
    //   1058 + 6 = 1064 tokens -> [0, 4, 5].
    let trace = rag_row("82", 1064, "100, 101", "0, 1", "300", "a")
        + &rag_row("93.5", 1068, "100, 101", "0, 1", "301", "b")
        + &rag_row("7", 1064, "100, 101", "1, 0", "300", "c");
    let dir = ragpulse_dir(&trace);
    let path = dir.path().join("0_trace.jsonl");
    let path = path.to_str().unwrap();
    let (out, err) = import(&["--from", "ragpulse", path], "");
    let r = rows(&out);
    let ids: Vec<Vec<u64>> = r.iter().map(|r| r.hash_ids.clone().unwrap()).collect();
    assert_eq!(ids, [vec![0, 1, 2], vec![0, 1, 3], vec![0, 4, 5]]);
    // "82" s -> 82000 ms; "93.5" -> 93500; "7" -> 7000; file order kept.
    let ts: Vec<f64> = r.iter().map(|r| r.timestamp.unwrap()).collect();
    assert_eq!(ts, [82000.0, 93500.0, 7000.0]);
    assert_eq!(r[2].session_id.as_deref(), Some("c"));
    assert_eq!(r[1].input_length, Some(1068));
    assert!(err.contains("ragpulse: 3 rows in, 3 rows out"), "{err}");
    // --sort: the row at 7 s first, the others in file order.
    let (sorted, _) = import(&["--from", "ragpulse", "--sort", path], "");
    let ts: Vec<f64> = rows(&sorted).iter().map(|r| r.timestamp.unwrap()).collect();
    assert_eq!(ts, [7000.0, 82000.0, 93500.0]);
    // Ids are decided in file order, so sorting moves rows, not ids.
    assert_eq!(rows(&sorted)[0].hash_ids.as_deref(), Some(&[0, 4, 5][..]));
    // Block size 256: row 1 = 1064 tokens -> ceil(1064/256) = 5 ids.
    let (small, _) = import(&["--from", "ragpulse", "--block-size", "256", path], "");
    assert_eq!(
        rows(&small)[0].hash_ids.as_deref(),
        Some(&[0, 1, 2, 3, 4][..])
    );
    // stdin needs --components.
    let (piped, _) = import(
        &[
            "--from",
            "ragpulse",
            "--components",
            dir.path().to_str().unwrap(),
        ],
        &trace,
    );
    assert_eq!(piped, out);
}

#[test]
fn ragpulse_segments_restart_and_sort_is_stable() {
    // Two segments: 10, 20 | 0, 20 s. Without --sort the file order stays.
    let trace = rag_row("10", 1058, "100, 101", "0, 1", "300", "a")
        + &rag_row("20", 1058, "100, 101", "0, 1", "300", "b")
        + &rag_row("0", 1058, "100, 101", "0, 1", "300", "c")
        + &rag_row("20", 1058, "100, 101", "0, 1", "300", "d");
    // With a BOM, CRLF line ends and no final newline.
    let trace = format!("\u{feff}{}", trace.trim_end().replace('\n', "\r\n"));
    let dir = ragpulse_dir(&trace);
    let path = dir.path().join("0_trace.jsonl");
    let sessions = |args: &[&str]| -> String {
        let mut a = vec!["--from", "ragpulse"];
        a.extend_from_slice(args);
        a.push(path.to_str().unwrap());
        let (out, _) = import(&a, "");
        rows(&out)
            .iter()
            .map(|r| r.session_id.clone().unwrap())
            .collect()
    };
    assert_eq!(sessions(&[]), "abcd");
    // Sorted by time; b and d (both 20 s) keep their file order.
    assert_eq!(sessions(&["--sort"]), "cabd");
    // Two folders are two id spaces: the same row in another folder
    // shares no block with the first (1058 tokens = 3 blocks each).
    let other = ragpulse_dir(&rag_row("1", 1058, "100, 101", "0, 1", "300", "z"));
    let p2 = other.path().join("0_trace.jsonl");
    let (out, _) = import(
        &[
            "--from",
            "ragpulse",
            path.to_str().unwrap(),
            p2.to_str().unwrap(),
        ],
        "",
    );
    let r = rows(&out);
    assert_eq!(r[0].hash_ids.as_deref(), Some(&[0, 1, 2][..]));
    assert_eq!(r[4].hash_ids.as_deref(), Some(&[3, 4, 5][..]));
}

#[test]
fn ragpulse_bad_rows_name_line_and_column() {
    let trace = rag_row("1", 1064, "100, 101", "0, 1", "300", "a")
        + "\n"
        + &rag_row("2", 1064, "100, 101", "0, 9", "300", "b")
        + &rag_row("3", 10, "100, 101", "0, 1", "300", "c")
        + "{\"timestamp\": \"4\", \"input_length\": x}\n"
        + &rag_row("soon", 1064, "100, 101", "0, 1", "300", "e");
    let dir = ragpulse_dir(&trace);
    let path = dir.path().join("0_trace.jsonl");
    let path = path.to_str().unwrap();
    let err = import_bad(&["--from", "ragpulse", path], "");
    // Line 3 (line 2 is blank): passage 9 is in no component file.
    assert!(
        err.contains("line 3: field `hash_ids.passages_ids`: chunk 9 is not in"),
        "{err}"
    );
    let (out, err) = import(&["--from", "ragpulse", "--on-error", "skip", path], "");
    assert_eq!(out.lines().count(), 1);
    assert!(
        err.contains("skipped 4 bad lines (line 3, 4, 5, 6)"),
        "{err}"
    );
    let err = import_bad(&["--from", "ragpulse", path, "--on-error", "fail"], "");
    assert!(!err.contains("line 5: column"), "stops at the first: {err}");
    // Each message on its own.
    for (line, want) in [
        (
            rag_row("3", 10, "100, 101", "0, 1", "300", "c"),
            "line 1: field `input_length`: 10 is less than the 1058 tokens of its components",
        ),
        (
            "{\"timestamp\": \"4\", \"input_length\": x}\n".to_string(),
            // `x` is the 36th character: 19 for `{"timestamp": "4", `, 16 for `"input_length": `.
            "line 1: column 36: expected value",
        ),
        (
            rag_row("soon", 1064, "100, 101", "0, 1", "300", "e"),
            "line 1: field `timestamp`: expected seconds",
        ),
    ] {
        let dir = ragpulse_dir(&line);
        let p = dir.path().join("0_trace.jsonl");
        let err = import_bad(&["--from", "ragpulse", p.to_str().unwrap()], "");
        assert!(err.contains(want), "{err}");
    }
    // A missing component file is named.
    let dir = ragpulse_dir(&rag_row("1", 1064, "100, 101", "0, 1", "300", "a"));
    std::fs::remove_file(dir.path().join("3_history.jsonl")).unwrap();
    let p = dir.path().join("0_trace.jsonl");
    let err = import_bad(&["--from", "ragpulse", p.to_str().unwrap()], "");
    assert!(
        err.contains("component `history`: no `*history.jsonl`"),
        "{err}"
    );
    // stdin without --components is a usage error.
    let out = tool("mc-import")
        .args(["--from", "ragpulse"])
        .write_stdin(rag_row("1", 1064, "100", "", "300", "a"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// RAGPulse request lines at the edges of what the importer reads, each
/// alone in `ragpulse_dir`'s folder (so ids start at 0). The rows and
/// messages are what the serde-only importer (main at e45cb4b, before the
/// hand-written scan of the files' shape) wrote, checked by hand: a value
/// serde decodes (escapes, a number as a timestamp or session, `-0`,
/// `1e2`) converts as its text reads; a field serde refuses, repeats,
/// misses or types wrongly is refused at serde's column with serde's
/// words; a field it does not know is skipped; a struct given as an array
/// (serde's sequence form) converts. The fast scan must not change one.
#[test]
fn ragpulse_odd_lines_convert_and_fail_as_before() {
    const H: &str = r#""hash_ids": {"sys_prompt": [100, 101], "passages_ids": [0, 1], "history": [200], "web_search": [], "user_input": [300]}"#;
    let row = |ts: &str, input: &str, out: &str, hash: &str, session: &str| {
        format!(
            r#"{{"timestamp": {ts}, "input_length": {input}, "output_length": {out}, {hash}, "session_id": {session}}}"#
        )
    };
    let plain = || row(r#""82""#, "1064", "9", H, r#""a""#);
    let ts = |t: &str| row(t, "1064", "9", H, r#""a""#);
    let input = |n: &str| row(r#""82""#, n, "9", H, r#""a""#);
    let session = |s: &str| row(r#""82""#, "1064", "9", H, s);
    let hash = |h: &str, n: &str| row(r#""82""#, n, "9", h, r#""a""#);
    let with_end = |tail: &str| format!("{}{tail}", &plain()[..plain().len() - 1]);
    // 1064 tokens = sys 100 (512) + 101 (100) + passages 400 + 30 + history
    // 11 + user 5 (1058) + 6 template tokens: three blocks.
    let out = |ts: &str, session: Option<&str>, input: u64, ids: &str| match session {
        Some(s) => format!(
            r#"{{"timestamp": {ts}, "session_id": {s}, "input_length": {input}, "output_length": 9, "hash_ids": [{ids}]}}"#
        ),
        None => format!(
            r#"{{"timestamp": {ts}, "input_length": {input}, "output_length": 9, "hash_ids": [{ids}]}}"#
        ),
    } + "\n";
    let a = Some(r#""a""#);
    let usual = out("82000", a, 1064, "0, 1, 2");
    // 630 tokens: sys 100 + 101 and user 300 (617) + 13 template tokens.
    let short = out("82000", a, 630, "0, 1");
    let converted: Vec<(String, String)> = vec![
        (plain(), usual.clone()),
        (plain().replace(": ", ":").replace(", ", ","), usual.clone()),
        (
            r#"{ "session_id" :"a" , "hash_ids":{ "sys_prompt":[100,101], "passages_ids": [0,1],"history":[200] , "web_search":[ ], "user_input" : [ 300 ] } ,"output_length": 9, "timestamp": "82", "input_length": 1064 }  "#.into(),
            usual.clone(),
        ),
        (plain().replace(", ", ",\t"), usual.clone()),
        (plain().replace("\"timestamp\"", r#""time\u0073tamp""#), usual.clone()),
        (
            plain().replace("{\"timestamp\"", r#"{"model": "x", "extra": {"a": [1, {"b": null}], "c": 1.5e3}, "timestamp""#),
            usual.clone(),
        ),
        (with_end(&format!(", \"deep\": {}{}}}", "[".repeat(200), "]".repeat(200))), usual.clone()),
        (ts(r#""\u0038\u0032""#), usual.clone()),
        (ts(r#""  82 ""#), usual.clone()),
        (ts(r#""\t82""#), usual.clone()),
        (ts("\"\u{a0}82\""), usual.clone()),
        (ts(r#""082""#), usual.clone()),
        (ts("82"), usual.clone()),
        (ts("0"), out("0", a, 1064, "0, 1, 2")),
        (ts("-0"), out("0", a, 1064, "0, 1, 2")),
        (ts("82.5"), out("82500", a, 1064, "0, 1, 2")),
        (ts("1e2"), out("100000", a, 1064, "0, 1, 2")),
        // Nanoseconds are kept to the ninth decimal; ms are floored.
        (ts(r#""82.1234567891""#), out("82123", a, 1064, "0, 1, 2")),
        (session(r#""a\"b\\c\u00e9\n\/""#), out("82000", Some(r#""a\"b\\cé\n/""#), 1064, "0, 1, 2")),
        (session("\"caf\u{e9}-\u{4e2d}\""), out("82000", Some("\"caf\u{e9}-\u{4e2d}\""), 1064, "0, 1, 2")),
        (session(r#""x\u0001y""#), out("82000", Some(r#""x\u0001y""#), 1064, "0, 1, 2")),
        (session("\"x\u{7f}y\""), out("82000", Some("\"x\u{7f}y\""), 1064, "0, 1, 2")),
        (session("12"), out("82000", Some(r#""12""#), 1064, "0, 1, 2")),
        (session("1.50"), out("82000", Some(r#""1.5""#), 1064, "0, 1, 2")),
        (session("null"), out("82000", None, 1064, "0, 1, 2")),
        (with_end(r#", "zzz": [true, false, null]}"#), usual.clone()),
        // A list name may repeat (both lists are prompt pieces) or be escaped.
        (hash(r#""hash_ids": {"sys_prompt": [100, 101], "user_input": [300], "user_input": [301]}"#, "630"), short.clone()),
        (hash(r#""hash_ids": {"sys\u005fprompt": [100, 101], "user_input": [300]}"#, "630"), short.clone()),
        (hash(r#""hash_ids": {"foo": [], "sys_prompt": [100, 101], "user_input": [300]}"#, "630"), short.clone()),
        (hash(r#""hash_ids": {"user_input": [300], "sys_prompt": [101, 100]}"#, "630"), short.clone()),
        (hash(r#""hash_ids": {}"#, "7"), out("82000", a, 7, "0")),
        (hash(r#""hash_ids": {}"#, "0"), out("82000", a, 0, "")),
        (input("2000"), out("82000", a, 2000, "0, 1, 2, 3")),
    ];
    for (line, want) in &converted {
        let dir = ragpulse_dir(&format!("{line}\n"));
        let p = dir.path().join("0_trace.jsonl");
        let (got, err) = import(&["--from", "ragpulse", p.to_str().unwrap()], "");
        assert_eq!(&got, want, "{line}");
        assert!(err.contains("1 rows in, 1 rows out"), "{line}: {err}");
    }
    // --float-timestamps keeps the parts of a ms.
    let dir = ragpulse_dir(&format!("{}\n{}\n", ts("82.5"), ts(r#""82.1234567891""#)));
    let p = dir.path().join("0_trace.jsonl");
    let (got, _) = import(
        &[
            "--from",
            "ragpulse",
            "--float-timestamps",
            p.to_str().unwrap(),
        ],
        "",
    );
    let stamps: Vec<&str> = got.lines().map(|l| &l[14..l.find(',').unwrap()]).collect();
    assert_eq!(stamps, ["82500.0", "82123.456789"]);

    let refused: Vec<(Vec<u8>, &str)> = vec![
        (with_end(r#", "timestamp": "90"}"#).into(), "column 213: duplicate field `timestamp`"),
        (with_end(r#", "session_id": "b"}"#).into(), "column 214: duplicate field `session_id`"),
        (with_end(r#", "session_id": null}"#).into(), "column 214: duplicate field `session_id`"),
        (with_end(r#", "hash_ids": {}}"#).into(), "column 212: duplicate field `hash_ids`"),
        (plain().replace("\"timestamp\"", "\"Timestamp\"").into(), "column 201: missing field `timestamp`"),
        (r#"{"input_length": 1064, "output_length": 9}"#.into(), "column 42: missing field `timestamp`"),
        (format!(r#"{{"timestamp": "82", "output_length": 9, {H}}}"#).into(), "column 160: missing field `input_length`"),
        (format!(r#"{{"timestamp": "82", "input_length": 1064, {H}}}"#).into(), "column 162: missing field `output_length`"),
        (r#"{"timestamp": "82", "input_length": 1064, "output_length": 9}"#.into(), "column 61: missing field `hash_ids`"),
        ("{}".into(), "column 2: missing field `timestamp`"),
        ("\"x\"".into(), "column 3: invalid type: string \"x\", expected struct RagRequest"),
        (ts("true").into(), "column 18: data did not match any variant of untagged enum Seconds"),
        (ts("null").into(), "column 18: data did not match any variant of untagged enum Seconds"),
        (ts("082").into(), "column 16: invalid number"),
        (ts(r#""""#).into(), "field `timestamp`: expected seconds (like \"82\" or 82.5)"),
        (ts("18446744073709551616").into(), "field `timestamp`: expected seconds (like \"82\" or 82.5)"),
        (ts("-1").into(), "field `timestamp`: -1 s is before the trace's start: times are seconds from 0"),
        (ts(r#""-3""#).into(), "field `timestamp`: -3 s is before the trace's start"),
        (input("1064.0").into(), "column 42: invalid type: floating point `1064.0`, expected u64"),
        (input("1e3").into(), "column 39: invalid type: floating point `1000.0`, expected u64"),
        (input("-1").into(), "column 38: invalid value: integer `-1`, expected u64"),
        (input("01064").into(), "column 38: invalid number"),
        (input("\"1064\"").into(), "column 42: invalid type: string \"1064\", expected u64"),
        (input("null").into(), "column 40: invalid type: null, expected u64"),
        (input("18446744073709551616").into(), "column 56: invalid type: floating point `1.8446744073709552e+19`, expected u64"),
        (input("18446744073709551615").into(), "field `input_length`: 18446744073709551615 tokens is above the limit of 10000000 tokens per row"),
        (input("10000001").into(), "field `input_length`: 10000001 tokens is above the limit"),
        (input("10").into(), "field `input_length`: 10 is less than the 1058 tokens of its components"),
        (row(r#""82""#, "1064", "9.0", H, r#""a""#).into(), "column 62: invalid type: floating point `9.0`, expected u64"),
        (row(r#""82""#, "1064", "10000001", H, r#""a""#).into(), "field `output_length`: 10000001 tokens is above the limit"),
        // Since the session id is read by hand (not an untagged enum): the
        // type it wants, at the value's last byte.
        (session("true").into(), "column 201: invalid type: boolean `true`, expected a string or a number"),
        (session("\"x\ty\"").into(), "column 200: control character (\\u0000-\\u001F) found while parsing a string"),
        (hash(r#""hash_ids": [1, 2]"#, "1064").into(), "column 74: invalid type: sequence, expected an object of component id lists"),
        (hash(r#""hash_ids": null"#, "1064").into(), "column 78: invalid type: null, expected an object of component id lists"),
        (hash(r#""hash_ids": {"sys_prompt": null}"#, "630").into(), "column 92: invalid type: null, expected a sequence"),
        (hash(r#""hash_ids": {"sys_prompt": [100.0, 101]}"#, "630").into(), "column 94: invalid type: floating point `100.0`, expected u64"),
        (hash(r#""hash_ids": {"sys_prompt": [99999999999999999999]}"#, "630").into(), "column 109: invalid type: floating point `1e+20`, expected u64"),
        (hash(r#""hash_ids": {"sys_prompt": [0100]}"#, "630").into(), "column 91: invalid number"),
        (hash(r#""hash_ids": {"sys_prompt": [-100]}"#, "630").into(), "column 93: invalid value: integer `-100`, expected u64"),
        (hash(r#""hash_ids": {"sys_prompt": ["100"]}"#, "630").into(), "column 94: invalid type: string \"100\", expected u64"),
        (hash(r#""hash_ids": {"sys_prompt": [100, ]}"#, "630").into(), "column 95: trailing comma"),
        (hash(r#""hash_ids": {"sys_prompt": [100, 9]}"#, "630").into(), "field `hash_ids.sys_prompt`: chunk 9 is not in "),
        (hash(r#""hash_ids": {"sys_prompt": [18446744073709551615]}"#, "630").into(), "field `hash_ids.sys_prompt`: chunk 18446744073709551615 is not in "),
        (with_end(",}").into(), "column 202: trailing comma"),
        (format!("{} x", plain()).into(), "column 203: trailing characters"),
        (format!("{}{}", plain(), plain()).into(), "column 202: trailing characters"),
        (plain()[..plain().len() - 1].into(), "column 200: EOF while parsing an object"),
        (
            [&plain().as_bytes()[..plain().len() - 2], b"\xff\"}"].concat(),
            "column 200: invalid unicode code point",
        ),
        (
            [&b"{\"timestamp\": \"8"[..], b"\xff", &plain().as_bytes()[16..]].concat(),
            "column 17: invalid unicode code point",
        ),
    ];
    for (line, want) in &refused {
        let dir = ragpulse_dir("");
        let p = dir.path().join("0_trace.jsonl");
        std::fs::write(&p, [&line[..], b"\n"].concat()).unwrap();
        let r = run(
            "mc-import",
            &["--from", "ragpulse", p.to_str().unwrap()],
            "",
        );
        let shown = String::from_utf8_lossy(line);
        assert_eq!(r.code, Some(65), "{shown}: {}", r.stderr);
        assert_eq!(r.stdout, "", "{shown}");
        assert!(
            r.stderr.contains(&format!("line 1: {want}")),
            "{shown}: {}",
            r.stderr
        );
    }
    // A struct as an array (serde's sequence form) after a first line (a
    // first line that is an array is taken for a JSON array file): sys 100
    // and 101, user 300 and 447 template tokens share block 0 only.
    let arrays = format!(
        "{}\n{}\n{}\n",
        plain(),
        r#"["82", 1064, 9, {"sys_prompt": [100, 101], "user_input": [300]}, "a"]"#,
        "[1, 2]"
    );
    let dir = ragpulse_dir(&arrays);
    let p = dir.path().join("0_trace.jsonl");
    let (got, err) = import_ragpulse_skipping(&p);
    assert_eq!(got, format!("{usual}{}", out("82000", a, 1064, "0, 3, 4")));
    assert!(err.contains("skipped 1 bad line (line 3)"), "{err}");
    let err = import_bad(&["--from", "ragpulse", p.to_str().unwrap()], "");
    assert!(
        err.contains(
            "line 3: column 6: invalid length 2, expected struct RagRequest with 5 elements"
        ),
        "{err}"
    );
    // A list of a kind with no file stops the import (not a bad line).
    let dir = ragpulse_dir(&format!(
        "{}\n",
        hash(
            r#""hash_ids": {"sys_prompt": [100, 101], "foo": [1]}"#,
            "630"
        )
    ));
    let p = dir.path().join("0_trace.jsonl");
    let err = import_bad(&["--from", "ragpulse", p.to_str().unwrap()], "");
    assert!(
        err.contains("RAGPulse component `foo`: no `*foo.jsonl` in "),
        "{err}"
    );
    assert!(!err.contains("line 1"), "{err}");
    // All of them in one file with --on-error skip: the converted rows in
    // order and every refused line counted.
    let mut all = Vec::new();
    for (line, _) in &converted {
        all.extend_from_slice(line.as_bytes());
        all.push(b'\n');
    }
    for (line, _) in &refused {
        all.extend_from_slice(line);
        all.push(b'\n');
    }
    let dir = ragpulse_dir("");
    let p = dir.path().join("0_trace.jsonl");
    std::fs::write(&p, &all).unwrap();
    let (got, err) = import_ragpulse_skipping(&p);
    let n = converted.len();
    let bad = refused.len();
    assert_eq!(got.lines().count(), n);
    assert!(
        err.contains(&format!(
            "skipped {bad} bad lines (line {}, {}, ",
            n + 1,
            n + 2
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("ragpulse: {} rows in, {n} rows out", n + bad)),
        "{err}"
    );
}

#[test]
fn real_ragpulse_trace() {
    let Some(dir) = data_dir("real_ragpulse_trace") else {
        return;
    };
    let path = dir.join("ragpulse/0_trace.jsonl");
    let path = path.to_str().unwrap();
    let (out, err) = import(&["--from", "auto", path], "");
    let r = rows(&out);
    // SOURCE.md: 7,106 requests.
    assert_eq!(r.len(), 7106);
    assert!(err.contains("7106 rows in, 7106 rows out"), "{err}");
    // Line 1 by hand: timestamp "82", input 3112, output 192; every block new:
    // ceil(3112/512) = 7 ids, 0..6.
    assert_eq!(
        r[0],
        Row {
            timestamp: Some(82000.0),
            delay: None,
            session_id: Some("1757476916095-afhwfadnh5ew".into()),
            parent_session_id: None,
            input_length: Some(3112),
            text_input: None,
            output_length: Some(192),
            hash_ids: Some((0..7).collect()),
        }
    );
    // Line 2: sys_prompt [8302, 14332, 15198] against line 1's [8302, 14332,
    // 15199]; 8302 and 14332 are 512 tokens each (1_sys_prompt.jsonl), so
    // blocks 0 and 1 are shared and the rest is new: ceil(3167/512) = 7 ids.
    assert_eq!(r[1].hash_ids.as_deref(), Some(&[0, 1, 7, 8, 9, 10, 11][..]));
    // Last line: "604603", input 3034 = 512+512+437 (sys 8302, 8303, 8304)
    // + 371+159+257+362+178+220 (passages) + 11 (history 15200) + 9 (user
    // 20632) = 3028, + 6 template tokens; ceil(3034/512) = 6 ids, the first
    // shared with every row (sys 8302 is 512 tokens).
    let last = r.last().unwrap();
    assert_eq!(last.timestamp, Some(604_603_000.0));
    assert_eq!(
        (last.input_length, last.output_length),
        (Some(3034), Some(211))
    );
    let ids = last.hash_ids.as_ref().unwrap();
    assert_eq!((ids.len(), ids[0]), (6, 0));
    // Every row is consistent at 512: (n-1)*512 < input_length <= n*512.
    for row in &r {
        let (n, len) = (
            row.hash_ids.as_ref().unwrap().len() as u64,
            row.input_length.unwrap(),
        );
        assert!((n - 1) * 512 < len && len <= n * 512, "{row:?}");
    }
    // --sort: line 3801 (timestamp "0", input 2926) comes first.
    let (sorted, _) = import(&["--from", "ragpulse", "--sort", path], "");
    let first = &rows(&sorted)[0];
    assert_eq!(
        (first.timestamp, first.input_length),
        (Some(0.0), Some(2926))
    );
}

#[test]
fn aibrix_jsonl_new_and_old_keys() {
    // Two entries (CRLF, no final newline); the second uses the older keys
    // and a null output_length.
    let input = "{\"timestamp\": 19, \"requests\": [{\"prompt\": \"hi there\", \"prompt_length\": 2, \"output_length\": 5, \"session_id\": 0}, {\"prompt\": \"x\", \"prompt_length\": 1, \"output_length\": 3}]}\r\n\
                 {\"timestamp\": 1000.5, \"requests\": [{\"prompt\": \"old\", \"Prompt Length\": 7, \"Output Length\": null, \"session_id\": \"s\"}]}";
    let (out, err) = import(&["--from", "aibrix"], input);
    assert_eq!(
        out,
        "{\"timestamp\": 19, \"session_id\": \"0\", \"text_input\": \"hi there\", \"output_length\": 5}\n\
         {\"timestamp\": 19, \"text_input\": \"x\", \"output_length\": 3}\n\
         {\"timestamp\": 1000.5, \"session_id\": \"s\", \"text_input\": \"old\"}\n"
    );
    assert!(err.contains("aibrix: 3 rows in, 3 rows out"), "{err}");
    let (out, _) = import(&["--from", "auto", "--no-text"], input);
    let r = rows(&out);
    assert_eq!(
        r.iter()
            .map(|r| r.input_length.unwrap())
            .collect::<Vec<_>>(),
        [2, 1, 7]
    );
    assert!(r.iter().all(|r| r.text_input.is_none()));
}

#[test]
fn aibrix_json_array_form() {
    // As AIBrix's save_workload writes it without --jsonl: an indented array.
    let input = "\u{feff}[\n    {\n        \"timestamp\": 0,\n        \"requests\": [\n            {\n                \"prompt\": \"a b c\",\n                \"prompt_length\": 3,\n                \"output_length\": 4\n            }\n        ]\n    },\n    {\n        \"timestamp\": 1000,\n        \"requests\": []\n    },\n    {\n        \"timestamp\": 2000,\n        \"requests\": [{\"prompt\": \"d\", \"prompt_length\": 1, \"output_length\": 2, \"session_id\": 3}]\n    }\n]\n";
    let (out, _) = import(&["--from", "auto"], input);
    let r = rows(&out);
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].text_input.as_deref(), Some("a b c"));
    assert_eq!(
        (r[1].timestamp, r[1].session_id.as_deref()),
        (Some(2000.0), Some("3"))
    );
    // A bad entry inside the array is named by its line in the file.
    let bad = "[\n  {\"timestamp\": 0, \"requests\": []},\n  {\"timestamp\": 5,\n   \"requests\": [{\"prompt_length\": \"ten\"}]}\n]\n";
    let err = import_bad(&["--from", "aibrix"], bad);
    // Line 4: 3 spaces and `"requests": [{"prompt_length": ` (31 characters)
    // come first, so `"ten"` is columns 35 to 39; serde names its last one.
    assert!(
        err.contains("line 4: column 39: invalid type: string \"ten\""),
        "{err}"
    );
    let err = import_bad(
        &["--from", "aibrix"],
        "[{\"timestamp\": 0, \"requests\": []},\n",
    );
    assert!(err.contains("cut short"), "{err}");
}

#[test]
fn aibrix_bad_entries_name_the_line() {
    let input = "{\"timestamp\": 0, \"requests\": [{\"prompt\": \"a\", \"prompt_length\": 1}]}\n\
                 {\"timestamp\": 1, \"requests\": [{\"output_length\": 1}]}\n\
                 {\"timestamp\": -2, \"requests\": []}\n\
                 {\"timestamp\": 3, \"requests\": [{\"prompt\": \"b\"}]}\n";
    let err = import_bad(&["--from", "aibrix"], input);
    assert!(
        err.contains("line 2: requests[0] has neither `prompt` nor `prompt_length`"),
        "{err}"
    );
    let (out, err) = import(&["--from", "aibrix", "--on-error", "skip"], input);
    assert_eq!(out.lines().count(), 2);
    assert!(err.contains("skipped 2 bad lines (line 2, 3)"), "{err}");
    // With --no-text a prompt without its length is of no use.
    let err = import_bad(&["--from", "aibrix", "--no-text"], input);
    assert!(err.contains("line 2: requests[0] has neither"), "{err}");
    let last = "{\"timestamp\": 3, \"requests\": [{\"prompt\": \"b\"}]}\n";
    let err = import_bad(&["--from", "aibrix", "--no-text"], last);
    assert!(
        err.contains("line 1: requests[0] has no `prompt_length`"),
        "{err}"
    );
}

#[test]
fn aibrix_round_trip_from_mc_gen() {
    // The same seed in both formats: the AIBrix file groups requests of the
    // same ms into one entry and writes a filler prompt of input_length
    // words; importing it must give back the Mooncake rows' times, lengths
    // and order.
    let gen = |format: &str| {
        run_ok(
            "mc-gen",
            &[
                "--seed",
                "7",
                "--format",
                format,
                "constant",
                "--qps",
                "200",
                "--num-requests",
                "300",
                "--isl",
                "uniform:1:300",
                "--osl",
                "uniform:1:40",
            ],
            "",
        )
    };
    let mooncake = rows(&gen("mooncake"));
    let aibrix = gen("aibrix");
    // At 200 req/s some ms hold two requests, so some entries hold several.
    assert!(aibrix.lines().count() < 300, "no grouped entries to test");
    let (plain, err) = import(&["--from", "auto", "--no-text"], &aibrix);
    assert!(err.contains("aibrix: 300 rows in, 300 rows out"), "{err}");
    let back = rows(&plain);
    assert_eq!(back.len(), mooncake.len());
    for (a, m) in back.iter().zip(&mooncake) {
        assert_eq!(
            (a.timestamp, a.input_length, a.output_length),
            (m.timestamp, m.input_length, m.output_length)
        );
    }
    // With the text: a prompt of input_length words each.
    let (text, _) = import(&["--from", "aibrix"], &aibrix);
    for (a, m) in rows(&text).iter().zip(&mooncake) {
        let words = a.text_input.as_ref().unwrap().split(' ').count() as u64;
        assert_eq!(Some(words), m.input_length);
        assert_eq!(a.input_length, None);
    }
}

/// A WEKA session with one sub-agent, block size 4.
fn weka_session(id: &str) -> String {
    format!(
        "{{\"id\": \"{id}\", \"block_size\": 4, \"hash_id_scope\": \"local\", \"requests\": [\n\
         {{\"t\": 0.0, \"type\": \"n\", \"in\": 9, \"out\": 2, \"hash_ids\": [1, 2], \"think_time\": 0.0}},\n\
         {{\"t\": 10.5, \"type\": \"subagent\", \"agent_id\": \"agent_001\", \"requests\": [\n\
           {{\"t\": 0.0, \"type\": \"n\", \"in\": 8, \"out\": 1, \"hash_ids\": [50, 51], \"think_time\": 0.0}},\n\
           {{\"t\": 3.0, \"type\": \"n\", \"in\": 12, \"out\": 1, \"hash_ids\": [50, 51, 52], \"think_time\": 2.5}}]}},\n\
         {{\"t\": 20.0, \"type\": \"n\", \"in\": 13, \"out\": 3, \"hash_ids\": [1, 2, 3], \"think_time\": 12.0}}\n\
         ]}}"
    )
}

#[test]
fn weka_session_with_a_sub_agent() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    std::fs::write(&a, weka_session("s")).unwrap();
    std::fs::write(&b, format!("\u{feff}{}\r\n", weka_session("t"))).unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let (out, err) = import(
        &[
            "--from",
            "auto",
            "--sub-agents",
            "sessions",
            "--session-gap",
            "1000",
            a,
            b,
        ],
        "",
    );
    let r = rows(&out);
    let row = |ts: Option<f64>,
               delay: Option<f64>,
               sid: &str,
               parent: Option<&str>,
               i: u64,
               o: u64,
               ids: &[u64]| Row {
        timestamp: ts,
        delay,
        session_id: Some(sid.into()),
        parent_session_id: parent.map(Into::into),
        input_length: Some(i),
        text_input: None,
        output_length: Some(o),
        hash_ids: Some(ids.to_vec()),
    };
    // Session s starts at 0. Its first turn: 9 tokens = 3 blocks of 4; the
    // file hashes 2 (ids 1, 2 -> 0, 1), the partial third gets a fresh 2.
    // The sub-agent starts at 10.5 s: its own session, ids 50, 51 -> 3, 4;
    // its second turn waits its think time (2.5 s) and adds 52 -> 5
    // (12 tokens = 3 full blocks). The parent's next turn: 12 s think time,
    // 13 tokens = 4 blocks: 1, 2, 3 -> 0, 1, 6 and a fresh 7.
    // Session t (file 2) starts 1000 ms later and shares no id with s:
    // 1, 2 -> 8, 9, fresh 10; 50, 51 -> 11, 12; 52 -> 13; 3 -> 14, fresh 15.
    let want = [
        row(Some(0.0), None, "s", None, 9, 2, &[0, 1, 2]),
        row(Some(10500.0), None, "s/agent_001", Some("s"), 8, 1, &[3, 4]),
        row(
            None,
            Some(2500.0),
            "s/agent_001",
            Some("s"),
            12,
            1,
            &[3, 4, 5],
        ),
        row(None, Some(12000.0), "s", None, 13, 3, &[0, 1, 6, 7]),
        row(Some(1000.0), None, "t", None, 9, 2, &[8, 9, 10]),
        row(
            Some(11500.0),
            None,
            "t/agent_001",
            Some("t"),
            8,
            1,
            &[11, 12],
        ),
        row(
            None,
            Some(2500.0),
            "t/agent_001",
            Some("t"),
            12,
            1,
            &[11, 12, 13],
        ),
        row(None, Some(12000.0), "t", None, 13, 3, &[8, 9, 14, 15]),
    ];
    assert_eq!(r, want);
    // Rows 1, 4, 5, 8 lacked an id for their partial last block.
    assert!(
        err.contains("block size 4 (use --block-size 4 downstream); 4 rows had no id"),
        "{err}"
    );
    assert!(err.contains("weka: 8 rows in, 8 rows out"), "{err}");
    // Two files, one top-level session each; sub-agents start inside theirs.
    assert!(
        err.contains("weka: 2 sessions start 1000 ms apart (session k at k × 1000 ms)"),
        "{err}"
    );
    // Think times of 2.5 and 12 s are not worth a note.
    assert!(!err.contains("over 1 h"), "{err}");
    // --session-rate 0.5: one session every 2 s; no option: all at 0.
    let (out, _) = import(
        &[
            "--from",
            "weka",
            "--sub-agents",
            "sessions",
            "--session-rate",
            "0.5",
            a,
            b,
        ],
        "",
    );
    assert_eq!(rows(&out)[4].timestamp, Some(2000.0));
    let (out, _) = import(&["--from", "weka", "--sub-agents", "sessions", a, b], "");
    assert_eq!(rows(&out)[4].timestamp, Some(0.0));
    // Several sessions in one stream (stdin): counted in order.
    let (out, _) = import(
        &[
            "--from",
            "weka",
            "--sub-agents",
            "sessions",
            "--session-gap",
            "5",
        ],
        &(weka_session("x") + "\n" + &weka_session("y")),
    );
    assert_eq!(rows(&out)[4].timestamp, Some(5.0));
}

/// A document off the files' usual shape (keys written with escapes,
/// which the hand reader leaves to serde) gives the rows and notes of the
/// same document written plainly, and so does a compact one with other
/// whitespace (read by hand).
#[test]
fn weka_documents_off_the_usual_shape_give_the_same_rows() {
    let plain = weka_session("s");
    let (want, want_err) = import(&["--from", "weka"], &plain);
    assert!(want.contains(r#""hash_ids": [0, 1, 2]"#), "{want}");
    let escaped = plain
        .replace("\"hash_id_scope\"", "\"hash_\\u0069d_scope\"")
        .replace("\"think_time\"", "\"think_tim\\u0065\"");
    assert!(escaped.contains("\\u0069d"), "{escaped}");
    let compact = plain
        .replace(": ", ":")
        .replace(", ", ",\t")
        .replace('\n', "\r\n ");
    for doc in [escaped, compact] {
        let (out, err) = import(&["--from", "weka"], &doc);
        assert_eq!(out, want, "{doc}");
        assert_eq!(err, want_err, "{doc}");
    }
}

#[test]
fn weka_bad_sessions_name_the_line() {
    // A request without `in`, inside the sub-agent: named by its path, on
    // the line where the session starts (line 2, after a blank line).
    let bad = format!("\n{}", weka_session("s").replace("\"in\": 12, ", ""));
    let err = import_bad(&["--from", "weka"], &bad);
    assert!(
        err.contains("line 2: requests[1].requests[1]: a request needs `in` and `out`"),
        "{err}"
    );
    // A syntax error: line 3 starts `{"t": x` (6 characters before `x`).
    let bad = weka_session("s").replace("\"t\": 10.5", "\"t\": x");
    let err = import_bad(&["--from", "weka"], &bad);
    assert!(err.contains("line 3: column 7: expected value"), "{err}");
    let err = import_bad(&["--from", "weka"], "{\"id\": \"z\", \"requests\": []}");
    assert!(
        err.contains("line 1: field `block_size`: missing or 0"),
        "{err}"
    );
    let err = import_bad(
        &["--from", "weka", "--block-size", "64"],
        &weka_session("s"),
    );
    assert!(
        err.contains("has block_size 4, not --block-size 64"),
        "{err}"
    );
    let out = tool("mc-import")
        .args(["--from", "weka", "--session-rate", "0"])
        .write_stdin(weka_session("s"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn real_weka_sample() {
    let Some(dir) = data_dir("real_weka_sample") else {
        return;
    };
    let dir = dir.join("kv-cache-tester-sample");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| p.to_str().unwrap().to_string())
        .collect();
    files.sort();
    let mut args = vec!["--from", "auto", "--session-gap", "60000"];
    args.extend(files.iter().map(String::as_str));
    let (graph, _) = import(&args, "");
    real_weka_graphs(&graph);
    args.splice(2..2, ["--sub-agents", "sessions"]);
    let (out, err) = import(&args, "");
    let r = rows(&out);
    // SOURCE.md: 404 requests in the 10 files, 6 sub-agents (4 in 0277, 2 in 0291).
    assert_eq!(r.len(), 404);
    let sessions: std::collections::BTreeSet<_> =
        r.iter().map(|r| r.session_id.clone().unwrap()).collect();
    assert_eq!(sessions.len(), 16);
    assert_eq!(r.iter().filter(|r| r.timestamp.is_some()).count(), 16);
    assert!(err.contains("block size 64"), "{err}");
    // trace_0008 holds a think time of 19,515 s (5.4 h), output line 142
    // (read off the output with `sed -n 142p`: "delay": 19515000).
    assert_eq!(r[141].delay, Some(19_515_000.0));
    assert!(
        err.contains("1 delay over 1 h (longest 5.4 h at line 142)"),
        "{err}"
    );
    assert!(err.contains("10 sessions start 60000 ms apart"), "{err}");
    // trace_0001 comes first. Its first request by hand: t 0.0, in 71175,
    // out 169, 1112 ids (local 1..=1112); 71175 = 1112*64 + 7, so a 1113th
    // fresh id; all new: 0..=1112.
    assert_eq!(r[0].timestamp, Some(0.0));
    assert_eq!(
        (r[0].input_length, r[0].output_length),
        (Some(71175), Some(169))
    );
    assert_eq!(
        r[0].hash_ids.as_ref().unwrap(),
        &(0..1113).collect::<Vec<u64>>()
    );
    // Its second: think_time 12.0 -> delay 12000; in 72762.
    assert_eq!(
        (r[1].delay, r[1].input_length),
        (Some(12000.0), Some(72762))
    );
    // Its last (the 41st row): think_time 170.0, in 196860, out 1029; 3075
    // ids in the file, ceil(196860/64) = 3076 (3075*64 = 196800).
    assert_eq!(
        (r[40].delay, r[40].input_length, r[40].output_length),
        (Some(170000.0), Some(196860), Some(1029))
    );
    assert_eq!(r[40].hash_ids.as_ref().unwrap().len(), 3076);
    // trace_0002 is session 1: 60 s later.
    assert_eq!(
        (r[41].timestamp, r[41].session_id.as_deref()),
        (Some(60000.0), Some("trace_0002"))
    );
    // Every row consistent at 64.
    for row in &r {
        let (n, len) = (
            row.hash_ids.as_ref().unwrap().len() as u64,
            row.input_length.unwrap(),
        );
        assert!((n - 1) * 64 < len && len <= n * 64, "{row:?}");
    }
    // trace_0277 (session 8, at 480 s): agent_001 starts 79.224 s in.
    let sub = r
        .iter()
        .find(|r| r.session_id.as_deref() == Some("trace_0277/agent_001"))
        .unwrap();
    assert_eq!(sub.timestamp, Some(480_000.0 + 79_224.0));
    assert_eq!(sub.parent_session_id.as_deref(), Some("trace_0277"));
}

#[test]
fn weka_delay_without_think_time() {
    // No think_time: the gap (10 s) less the previous request's api_time
    // (2.25 s) -> 7750 ms. A negative think time is a bad session.
    let s = "{\"id\": \"q\", \"block_size\": 8, \"requests\": [\
             {\"t\": 0, \"in\": 8, \"out\": 1, \"hash_ids\": [7], \"api_time\": 2.25},\
             {\"t\": 10, \"in\": 16, \"out\": 1, \"hash_ids\": [7, 8]}]}";
    let (out, _) = import(&["--from", "weka"], s);
    let r = rows(&out);
    assert_eq!(r[1].delay, Some(7750.0));
    // Full blocks only: 8 and 16 tokens need no fresh id.
    assert_eq!(r[1].hash_ids.as_deref(), Some(&[0, 1][..]));
    // `hash_id_scope: "global"` ids mean the same block in every file:
    // the second session reuses 7 -> 0 and 8 -> 1.
    let global = s.replace(
        "\"block_size\"",
        "\"hash_id_scope\": \"global\", \"block_size\"",
    );
    let (out, _) = import(&["--from", "weka"], &format!("{global}\n{global}"));
    assert_eq!(rows(&out)[3].hash_ids.as_deref(), Some(&[0, 1][..]));
    let (out, _) = import(&["--from", "weka"], &format!("{s}\n{s}"));
    assert_eq!(rows(&out)[3].hash_ids.as_deref(), Some(&[2, 3][..]));
    let bad = s.replace("\"t\": 10,", "\"t\": 10, \"think_time\": -1,");
    let err = import_bad(&["--from", "weka"], &bad);
    assert!(
        err.contains("line 1: requests[1]: `think_time` must be at least 0"),
        "{err}"
    );
}

#[test]
fn input_option_reads_a_file_like_the_other_tools() {
    // `-i FILE` as in every filter; it is read before positional files.
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.csv");
    let b = dir.path().join("b.csv");
    std::fs::write(
        &a,
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,10,1\n",
    )
    .unwrap();
    std::fs::write(
        &b,
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04.9799600,20,2\n",
    )
    .unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let by_option = run_ok("mc-import", &["--from", "azure", "-i", a, b], "");
    let positional = run_ok("mc-import", &["--from", "azure", a, b], "");
    assert_eq!(by_option, positional);
    assert_eq!(by_option.lines().count(), 2, "{by_option}");
    assert!(
        by_option.starts_with("{\"timestamp\": 0, \"input_length\": 10,"),
        "{by_option}"
    );
}

/// Dynamo's agentic Mooncake rows (the fields of its `AgenticMooncakeRow`,
/// aliases included): a spawn, a fresh-context branch and a join.
const DYNAMO: &str = "{\"request_id\": \"r1\", \"session_id\": \"s\", \"input_tokens\": 128, \"output_tokens\": 8, \"hash_ids\": [0, 1], \"created_time\": 1.5, \"branches\": [\"r2\"]}\n\
{\"request_id\": \"r2\", \"session_id\": \"s\", \"input_length\": 64, \"output_length\": 8, \"hash_ids\": [0], \"delay\": 0, \"prefix_reset\": true, \"tool_wait_ms\": 12.5}\n\
{\"request_id\": 3, \"session_id\": \"s\", \"input_length\": 192, \"output_length\": 8, \"hash_ids\": [0, 1, 2], \"wait_for\": [\"r1\", \"r2\"], \"delay_ms\": 3, \"tool_events\": [{\"tool_call_id\": \"t\"}]}\n\
{\"timestamp\": 9, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [7]}\n";

#[test]
fn dynamo_agentic_rows_pass_with_their_fields() {
    let (out, err) = import(&[], DYNAMO);
    // The core graph module reads the output without a fault: r2 spawned
    // by r1 (branches), 3 joining both, the plain row on its own.
    let g = Graphs::from_lines(&out).unwrap();
    assert_eq!(
        deps_by_id(&g),
        [vec![], vec!["r1"], vec!["r1", "r2"], vec![]]
    );
    assert_eq!(g.kind(3), RowKind::Single);
    assert!(err.contains("reading dynamo"), "{err}");
    assert!(err.contains("dynamo: 4 rows in, 4 rows out"), "{err}");
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 4);
    // Aliases become the Mooncake names, values kept.
    assert_eq!(rows[0]["input_length"], 128);
    assert_eq!(rows[0]["output_length"], 8);
    assert_eq!(rows[0]["timestamp"], 1.5);
    assert_eq!(rows[0]["branches"], serde_json::json!(["r2"]));
    assert!(rows[0].get("input_tokens").is_none());
    assert_eq!(rows[1]["prefix_reset"], true);
    assert_eq!(rows[1]["tool_wait_ms"], 12.5);
    assert_eq!(rows[1]["delay"], 0);
    // A numeric id is read as its text; delay_ms is delay; other fields stay.
    assert_eq!(rows[2]["request_id"], "3");
    assert_eq!(rows[2]["delay"], 3);
    assert_eq!(rows[2]["wait_for"], serde_json::json!(["r1", "r2"]));
    assert_eq!(rows[2]["tool_events"][0]["tool_call_id"], "t");
    // A plain Mooncake row passes unchanged.
    assert_eq!(
        out.lines().nth(3).unwrap(),
        "{\"timestamp\": 9, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [7]}"
    );
    // Written once, the rows read back to the same rows.
    let (again, _) = import(&["--from", "dynamo"], &out);
    assert_eq!(again, out);
}

#[test]
fn dynamo_graph_faults_name_the_line_field_and_fix() {
    // The graph's faults in the core `graph` module's words, as every
    // reader of the output (mc-analyze, mc-replay) names them.
    let cases: [(&str, &str, &str); 8] = [
        // An unknown id.
        (
            "\"wait_for\": [\"r1\", \"r2\"]",
            "\"wait_for\": [\"r1\", \"r9\"]",
            "line 3: field `wait_for`: no row has request_id `r9`: add the call, or remove the id from wait_for",
        ),
        // A duplicate id.
        (
            "\"request_id\": 3,",
            "\"request_id\": \"r2\",",
            "line 3: field `request_id`: `r2` is also the id of line 2: give each call its own id",
        ),
        // A cycle, its ids named.
        (
            "\"branches\": [\"r2\"]",
            "\"wait_for\": [\"3\"]",
            "line 1: fields `wait_for`/`branches`: the calls `r1` → `3` → `r1` wait for each other (a cycle, lines 1, 3)",
        ),
        // An edge into another session.
        (
            "\"request_id\": \"r2\", \"session_id\": \"s\"",
            "\"request_id\": \"r2\", \"session_id\": \"t\"",
            "line 1: field `branches`: `r2` (line 2) is a call of session \"t\", this row of session \"s\"",
        ),
        // Negative or wrongly typed values.
        (
            "\"tool_wait_ms\": 12.5",
            "\"tool_wait_ms\": -1",
            "line 2: field `tool_wait_ms`: -1 ms",
        ),
        (
            "\"delay_ms\": 3",
            "\"delay_ms\": \"soon\"",
            "line 3: field `delay`: \"soon\" is not a number",
        ),
        (
            "\"prefix_reset\": true",
            "\"prefix_reset\": 1",
            "line 2: field `prefix_reset`: 1 is not true or false",
        ),
        // branches without an id of its own.
        (
            "\"request_id\": \"r1\", ",
            "",
            "line 1: field `branches`: a call that spawns others needs its own `request_id`: add one",
        ),
    ];
    for (from, to, needle) in cases {
        assert!(DYNAMO.contains(from), "{from}");
        let err = import_bad(&["--from", "dynamo"], &DYNAMO.replacen(from, to, 1));
        assert!(err.contains(needle), "{needle}:\n{err}");
    }
    // A leaf that nobody waits for may wait without an id of its own.
    let leaf = DYNAMO.replacen("\"request_id\": 3, ", "", 1);
    let (out, _) = import(&["--from", "dynamo"], &leaf);
    assert_eq!(out.lines().count(), 4);
    // Dynamo's later versioned format is named, not misread.
    let err = import_bad(
        &["--from", "dynamo"],
        "{\"request_id\": \"a\", \"play_id\": \"p\", \"session_id\": \"s\", \"model\": \"m\", \"not_before_ms\": 0, \"dependencies\": []}\n",
    );
    assert!(err.contains("versioned agentic format"), "{err}");
}

#[test]
fn dynamo_rows_without_session_are_one_session_and_inputs_are_named() {
    // Dynamo's session_id is optional: two rows without one may wait for
    // each other; a row without one may not wait for a row with one.
    let lone = "{\"timestamp\": 0, \"input_length\": 1, \"request_id\": \"a\"}\n\
                {\"delay\": 5, \"input_length\": 1, \"request_id\": \"b\", \"wait_for\": [\"a\"]}\n";
    let (out, _) = import(&["--from", "dynamo"], lone);
    assert_eq!(out, lone);
    let mixed = lone.replacen("0,", "0, \"session_id\": \"s\",", 1);
    let err = import_bad(&["--from", "dynamo"], &mixed);
    assert!(
        err.contains("line 2: field `wait_for`: `a` (line 1) is a call of session \"s\", this row of no session"),
        "{err}"
    );
    // With several inputs, a fault names the file of each line it cites.
    let (_dir, paths) = temp_files(&[("one.jsonl", DYNAMO), ("two.jsonl", DYNAMO)]);
    let args: Vec<&str> = ["--from", "dynamo"]
        .into_iter()
        .chain(paths.iter().map(|p| p.to_str().unwrap()))
        .collect();
    let err = import_bad(&args, "");
    let (one, two) = (paths[0].display(), paths[1].display());
    assert!(
        err.contains(&format!(
            "{two}: line 1: field `request_id`: `r1` is also the id of {one}: line 1"
        )),
        "{err}"
    );
    // A bad row skipped by --on-error is no call of the graph: the row
    // waiting for it names an unknown id.
    let bad_r2 = DYNAMO.replacen("\"prefix_reset\": true", "\"prefix_reset\": 1", 1);
    let err = import_bad(&["--from", "dynamo", "--on-error", "skip"], &bad_r2);
    assert!(
        err.contains("line 1: field `branches`: no row has request_id `r2`"),
        "{err}"
    );
}

/// The agent graph of a session with sub-agents, by id.
fn graph_rows(out: &str, session: &str) -> std::collections::HashMap<String, serde_json::Value> {
    out.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["session_id"] == session)
        .map(|v| (v["request_id"].as_str().unwrap().to_string(), v))
        .collect()
}

fn id_list(v: &serde_json::Value, field: &str) -> Vec<String> {
    v.get(field).map_or(Vec::new(), |l| {
        l.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    })
}

/// The real sample's two sessions with sub-agents as graphs (times read
/// off the files with `python3 -c 'import json; ...'`: a sub-agent's end is
/// its start + its last call's t + api_time).
fn real_weka_graphs(out: &str) {
    // Every session's graph passes the core graph module's checks.
    Graphs::from_lines(out).unwrap();
    // trace_0291: calls 0..=15 of the parent (15 at t 1085, api_time
    // 15.64 s: ends 1100.64 s), then agent_001 (starts 1148.013 s, 5 calls,
    // ends 1192.85 s) and agent_002 (starts 1180.553 s, 7 calls, ends
    // 1256.15 s), then the parent at 1209 s (think 108 s) and 1269 s.
    let g = graph_rows(out, "trace_0291");
    assert_eq!(g.len(), 32);
    let spawner = &g["trace_0291.15"];
    assert_eq!(
        id_list(spawner, "branches"),
        ["trace_0291.16", "trace_0291.21"]
    );
    let first = &g["trace_0291.16"];
    assert_eq!(first["agent_id"], "agent_001");
    assert_eq!(first["prefix_reset"], true);
    // 1148.013 - 1100.64 s, in whole ms of each (1148013 - 1100640).
    assert_eq!(first["delay"], 47373);
    assert!(first.get("timestamp").is_none());
    // The parent's call at 1209 s joins agent_001 (ended at 1192.853 s) but
    // not agent_002 (still running); its delay: 1209 - 1192.853 s, less than
    // its think time of 108 s. The call at 1269 s joins agent_002 (ended at
    // 1256.153 s); its think time of 11 s is less than the 12.847 s since.
    let join1 = &g["trace_0291.28"];
    assert_eq!(
        id_list(join1, "wait_for"),
        ["trace_0291.15", "trace_0291.20"]
    );
    assert_eq!(join1["delay"], 16147);
    let join2 = &g["trace_0291.29"];
    assert_eq!(
        id_list(join2, "wait_for"),
        ["trace_0291.28", "trace_0291.27"]
    );
    assert_eq!(join2["delay"], 11000);
    // trace_0277: agent_004 (ends 1056.35 s) outlives every later parent
    // call (the last at 818 s): a branch nobody joins.
    let g = graph_rows(out, "trace_0277");
    assert_eq!(g.len(), 53);
    let last_sub = g
        .values()
        .filter(|v| v["agent_id"] == "agent_004")
        .map(|v| v["request_id"].as_str().unwrap().to_string())
        .collect::<Vec<_>>();
    assert!(!last_sub.is_empty());
    for v in g.values() {
        for w in id_list(v, "wait_for") {
            assert!(g.contains_key(&w), "{w}");
        }
    }
    // Sessions without sub-agents stay plain session rows.
    assert!(!out
        .lines()
        .any(|l| l.contains("\"trace_0001\"") && l.contains("request_id")));
}

#[test]
fn weka_sub_agents_become_branches_joined_after_their_end() {
    // The parent's first call (0 s, api_time 1 s) spawns agent_001 at
    // 10.5 s: two calls, the second at 10.5 + 3 s with api_time 2 s, so the
    // sub-agent ends at 15.5 s. The parent's next call at 20 s (think time
    // 19 s after the first call's end at 1 s) starts after that: it joins it.
    let s = weka_session("s")
        .replace(
            "\"think_time\": 0.0},\n",
            "\"think_time\": 0.0, \"api_time\": 1.0},\n",
        )
        .replace(
            "\"think_time\": 2.5}",
            "\"think_time\": 2.0, \"api_time\": 2.0}",
        )
        .replace("\"think_time\": 12.0}", "\"think_time\": 19.0}");
    let (out, _) = import(&["--from", "weka"], &s);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "{\"timestamp\": 0, \"session_id\": \"s\", \"input_length\": 9, \"output_length\": 2, \"hash_ids\": [0, 1, 2], \"request_id\": \"s.0\", \"branches\": [\"s.1\"]}",
            // Released 9.5 s after its spawner's end: 10.5 s.
            "{\"session_id\": \"s\", \"delay\": 9500, \"input_length\": 8, \"output_length\": 1, \"hash_ids\": [3, 4], \"request_id\": \"s.1\", \"prefix_reset\": true, \"agent_id\": \"agent_001\"}",
            "{\"session_id\": \"s\", \"delay\": 2000, \"input_length\": 12, \"output_length\": 1, \"hash_ids\": [3, 4, 5], \"request_id\": \"s.2\", \"wait_for\": [\"s.1\"], \"agent_id\": \"agent_001\"}",
            // Waits for both; released 4.5 s after the later end (15.5 s): 20 s.
            "{\"session_id\": \"s\", \"delay\": 4500, \"input_length\": 13, \"output_length\": 3, \"hash_ids\": [0, 1, 6, 7], \"request_id\": \"s.3\", \"wait_for\": [\"s.0\", \"s.2\"]}",
        ]
    );
    // The core graph module reads the same graph, and its release rule,
    // with each call taking its api_time (1, 1, 2 and 1 s), starts the
    // calls when the session did: 0, 10.5, 13.5 and 20 s.
    let g = Graphs::from_lines(&out).unwrap();
    assert_eq!(
        deps_by_id(&g),
        [vec![], vec!["s.0"], vec!["s.1"], vec!["s.0", "s.2"]]
    );
    let api_ms = [1000.0, 1000.0, 2000.0, 1000.0];
    let starts: Vec<f64> = g.schedule(|r| api_ms[r]).iter().map(|t| t.0).collect();
    assert_eq!(starts, [0.0, 10_500.0, 13_500.0, 20_000.0]);
    // A sub-agent still running when the parent's last call starts is a
    // branch nobody joins: the parent's call then waits for its own previous
    // call only, with its think time.
    let late = s.replace("\"t\": 20.0", "\"t\": 14.0");
    let (out, _) = import(&["--from", "weka"], &late);
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["wait_for"], serde_json::json!(["s.0"]));
    assert_eq!(last["delay"], 19000);
    let g = Graphs::from_lines(&out).unwrap();
    assert_eq!(
        deps_by_id(&g),
        [vec![], vec!["s.0"], vec!["s.1"], vec!["s.0"]]
    );
    // --sub-agents sessions keeps the sub-agent a session of its own.
    let (out, _) = import(&["--from", "weka", "--sub-agents", "sessions"], &s);
    assert!(out.contains("\"session_id\": \"s/agent_001\"") && !out.contains("request_id"));
}

/// mc-gen's agent graphs are rows mc-import reads as Dynamo's, byte for
/// byte: the two agree on the format and on its checks.
#[test]
fn dynamo_reads_mc_gen_agent_graphs_unchanged() {
    for shape in ["tools", "sub-agents", "map-reduce"] {
        let rows = run_ok(
            "mc-gen",
            &["agent", "--graph", shape, "--num-sessions", "3"],
            "",
        );
        let (out, err) = import(&[], &rows);
        assert!(err.contains("reading dynamo"), "{err}");
        assert_eq!(out, rows, "{shape}");
    }
}
