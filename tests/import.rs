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
