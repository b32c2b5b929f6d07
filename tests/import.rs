//! mc-import: expected values are checked by hand against the source rows.

use crate::util::{data_dir, run_ok, tool};

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
    let out = tool("mc-import")
        .args(args)
        .write_stdin(input.to_string())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "mc-import {args:?} failed: {err}");
    (String::from_utf8(out.stdout).unwrap(), err)
}

/// Runs mc-import expecting exit code 65 and returns stderr.
fn import_bad(args: &[&str], input: &str) -> String {
    let out = tool("mc-import")
        .args(args)
        .write_stdin(input.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
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
    assert_eq!((r[1].timestamp, r[1].output_length), (Some(45000.0), Some(0)));
}

#[test]
fn burstgpt_model_and_log_type_filters() {
    let (out, err) = import(&["--from", "burstgpt", "--model", "gpt-4"], BURST_V1);
    let r = rows(&out);
    assert_eq!(
        r.iter().map(|r| r.input_length.unwrap()).collect::<Vec<_>>(),
        [417, 1025]
    );
    // 2 ChatGPT rows are other models (the failed one is counted as that first).
    assert!(err.contains("4 rows in, 2 rows out, 2 dropped (--model)"), "{err}");
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
        rows(&out).iter().map(|r| r.input_length.unwrap()).collect::<Vec<_>>(),
        [472, 1025]
    );
    assert!(
        err.contains("4 rows in, 2 rows out, 1 dropped (failed: 0 response tokens), 1 dropped (--log-type)"),
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
        err.contains("line 3: column 4 (`Response tokens`): expected a non-negative integer, found `many`"),
        "{err}"
    );
    let (_, err) = import(&["--from", "burstgpt", "--on-error", "skip"], input);
    assert!(err.contains("skipped 2 bad lines (line 3, 4)"), "{err}");
    // A header without a needed column says which columns there are.
    let err = import_bad(&["--from", "burstgpt"], "Timestamp,Model\n1,x\n");
    assert!(err.contains("line 1: the header has no `Request tokens` column"), "{err}");
    // A filter needs its column.
    let err = import_bad(
        &["--from", "burstgpt", "--log-type", "API log"],
        "Timestamp,Request tokens,Response tokens\n1,2,3\n",
    );
    assert!(err.contains("no `Log Type` column"), "{err}");
}
