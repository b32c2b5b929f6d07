//! The pipe conventions every tool shares (docs/ARCHITECTURE.md §2), checked on the
//! transforms: exit codes, error messages, --on-error, files, CRLF, closed pipes.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use crate::util::{assert_success, tool};

const TOOLS: [&str; 3] = ["mc-scale", "mc-roots", "mc-cap"];

#[test]
fn bad_line_stops_with_65_after_flushing_good_records() {
    for t in TOOLS {
        tool(t)
            .write_stdin("{\"a\": 1}\n{\"a\": \n{\"b\": 2}\n")
            .assert()
            .code(65)
            .stdout("{\"a\": 1}\n")
            .stderr(format!(
                "{t}: line 2: invalid JSON: expected a value, found end of line\n"
            ));
    }
}

#[test]
fn wrong_field_type_names_line_and_field() {
    tool("mc-scale")
        .args(["--speedup", "2"])
        .write_stdin("{\"timestamp\": 1}\n\n{\"timestamp\": \"12:00\"}\n")
        .assert()
        .code(65)
        .stderr("mc-scale: line 3: field `timestamp`: expected a number, found \"12:00\"\n");
    tool("mc-roots")
        .args(["--roots", "2"])
        .write_stdin("{\"hash_ids\": {\"a\": 1}}\n")
        .assert()
        .code(65)
        .stderr("mc-roots: line 1: field `hash_ids`: expected an array, found {\"a\": 1}\n");
    tool("mc-cap")
        .args(["--max-osl", "2"])
        .write_stdin("{\"output_length\": -4}\n")
        .assert()
        .code(65)
        .stderr(
            "mc-cap: line 1: field `output_length`: expected a non-negative integer, found -4\n",
        );
}

#[test]
fn skip_policy_skips_and_reports_the_first_lines() {
    let mut input = String::new();
    for i in 1..=8 {
        input.push_str(if i % 2 == 0 {
            "not json\n"
        } else {
            "{\"timestamp\": 10}\n"
        });
    }
    tool("mc-scale")
        .args(["--speedup", "10", "--on-error", "skip"])
        .write_stdin(input)
        .assert()
        .code(0)
        .stdout("{\"timestamp\": 1}\n".repeat(4))
        .stderr("mc-scale: skipped 4 bad lines (line 2, 4, 6, 8)\nmc-scale: 4 of 4 rows changed\n");
}

#[test]
fn too_long_line_is_a_data_error_and_can_be_skipped() {
    let long = format!("{{\"pad\": \"{}\"}}\n", "x".repeat(200));
    let input = format!("{{\"a\": 1}}\n{long}{{\"b\": 2}}\n");
    tool("mc-cap")
        .args(["--max-line-bytes", "100"])
        .write_stdin(input.clone())
        .assert()
        .code(65)
        .stdout("{\"a\": 1}\n")
        .stderr("mc-cap: line 2: line is longer than --max-line-bytes (100 bytes)\n");
    tool("mc-cap")
        .args(["--max-line-bytes", "100", "--on-error", "skip"])
        .write_stdin(input)
        .assert()
        .code(0)
        .stdout("{\"a\": 1}\n{\"b\": 2}\n")
        .stderr("mc-cap: skipped 1 bad line (line 2)\n");
}

#[test]
fn crlf_and_blank_lines_are_accepted() {
    tool("mc-scale")
        .args(["--speedup", "2"])
        .write_stdin("{\"timestamp\": 4}\r\n\r\n  \n{\"timestamp\": 8}")
        .assert()
        .code(0)
        .stdout("{\"timestamp\": 2}\n{\"timestamp\": 4}\n");
}

#[test]
fn missing_input_file_is_66_and_unwritable_output_is_74() {
    tool("mc-roots")
        .args(["--input", "/nonexistent/trace.jsonl"])
        .assert()
        .code(66)
        .stderr(predicates::str::starts_with(
            "mc-roots: /nonexistent/trace.jsonl: No such file",
        ));
    tool("mc-roots")
        .args(["--output", "/nonexistent/dir/out.jsonl"])
        .write_stdin("{}\n")
        .assert()
        .code(74)
        .stderr(predicates::str::starts_with(
            "mc-roots: /nonexistent/dir/out.jsonl:",
        ));
}

#[test]
fn input_and_output_files() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let output = dir.path().join("out.jsonl");
    std::fs::write(&input, "{\"output_length\": 9}\n").unwrap();
    tool("mc-cap")
        .arg("--max-osl=3")
        .arg("-i")
        .arg(&input)
        .arg("-o")
        .arg(&output)
        .assert()
        .code(0)
        .stdout("");
    assert_eq!(
        std::fs::read_to_string(&output).unwrap(),
        "{\"output_length\": 3}\n"
    );
}

#[test]
fn usage_errors_exit_2() {
    for t in TOOLS {
        tool(t).arg("--no-such-option").assert().code(2);
    }
    tool("mc-cap")
        .arg("--drop")
        .write_stdin("")
        .assert()
        .code(2)
        .stderr("mc-cap: --drop needs --max-isl\n");
    tool("mc-roots")
        .args(["--roots", "0"])
        .write_stdin("")
        .assert()
        .code(2);
}

#[test]
fn help_shows_examples() {
    for t in TOOLS {
        tool(t)
            .arg("--help")
            .assert()
            .code(0)
            .stdout(predicates::str::contains("Examples:"))
            .stdout(predicates::str::contains("--on-error"));
    }
}

/// `| head -1`: the reader goes away; the tool must end quietly with 0.
#[test]
fn closed_stdout_is_a_quiet_success() {
    let line = "{\"timestamp\": 1000, \"input_length\": 600, \"output_length\": 10, \"hash_ids\": [1, 2]}\n";
    let input = line.repeat(100_000); // ~8 MB: far more than a pipe buffer
    for t in TOOLS {
        let mut child = Command::new(assert_cmd::cargo::cargo_bin(t))
            .args(if t == "mc-scale" {
                vec!["--speedup", "2"]
            } else {
                vec![]
            })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let feeder = {
            let input = input.clone();
            std::thread::spawn(move || {
                // The tool may stop reading once its stdout is gone; ignore EPIPE here.
                let _ = stdin.write_all(input.as_bytes());
            })
        };
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(first.starts_with("{\"timestamp\""), "{t}: {first}");
        // The reader (and with it our end of the pipe) is dropped here.
        let out = child.wait_with_output().unwrap();
        feeder.join().unwrap();
        assert_eq!(out.status.code(), Some(0), "{t}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{t}");
    }
}

#[test]
fn analyze_pass_says_when_a_closed_stdout_cost_the_report() {
    let line = "{\"timestamp\": 1000, \"input_length\": 600, \"hash_ids\": [1, 2]}\n";
    let input = line.repeat(100_000); // ~6 MB: far more than a pipe buffer
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("mc-analyze"))
        .arg("--pass")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first, line);
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8(out.stderr).unwrap();
    // Where it stopped depends on the pipe's buffering; the words do not.
    assert!(
        stderr.starts_with("mc-analyze: stdout was closed after line ")
            && stderr.ends_with(": stopped early, no report (the report needs the whole trace)\n"),
        "{stderr}"
    );
}

/// Every tool that reads JSONL: the transforms, the analyzer and the replay
/// client (which checks its whole input before sending anything).
const READERS: [&str; 5] = ["mc-scale", "mc-roots", "mc-cap", "mc-analyze", "mc-replay"];

#[test]
fn a_utf8_bom_is_accepted_and_stripped() {
    for t in ["mc-scale", "mc-roots", "mc-cap"] {
        tool(t)
            .write_stdin("\u{feff}{\"timestamp\": 1}\n{\"timestamp\": 2}\n")
            .assert()
            .success()
            .stdout("{\"timestamp\": 1}\n{\"timestamp\": 2}\n");
    }
    // With a BOM on a CRLF file the analyzer counts both rows.
    let out = tool("mc-analyze")
        .arg("--json")
        .write_stdin("\u{feff}{\"input_length\": 5}\r\n{\"input_length\": 7}\r\n")
        .output()
        .unwrap();
    assert_success(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["input"]["rows"], 2, "{report}");
    assert_eq!(report["aiperf"]["total_requests"], 2, "{report}");
}

#[test]
fn a_json_array_is_named_with_the_conversion() {
    for t in READERS {
        tool(t)
            .write_stdin("[{\"input_length\": 5},\n {\"input_length\": 7}]\n")
            .assert()
            .code(65)
            .stdout("")
            .stderr(format!(
                "{t}: line 1: this is a JSON array, not JSONL (one object per line); \
                 convert it with `jq -c '.[]'`\n"
            ));
    }
    // The hint stops the run even when bad lines are being skipped: the
    // whole input is in the wrong format, not one line of it.
    tool("mc-scale")
        .args(["--on-error", "skip"])
        .write_stdin("\u{feff}[{\"input_length\": 5}]")
        .assert()
        .code(65)
        .stderr(predicates::str::contains("this is a JSON array"));
}

#[test]
fn a_csv_file_is_named_with_the_importer() {
    for t in READERS {
        tool(t)
            .write_stdin(
                "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,374,44\r\n",
            )
            .assert()
            .code(65)
            .stderr(format!(
                "{t}: line 1: this looks like CSV (an Azure or BurstGPT trace?), not JSONL; \
                 convert it with `mc-import --from auto`\n"
            ));
    }
}

#[test]
fn a_directory_as_input_is_named() {
    let dir = tempfile::tempdir().unwrap();
    for t in ["mc-scale", "mc-analyze"] {
        let out = tool(t).arg("--input").arg(dir.path()).output().unwrap();
        assert_eq!(out.status.code(), Some(66), "{t}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(
            err,
            format!(
                "{t}: {}: is a directory, not a trace file\n",
                dir.path().display()
            )
        );
    }
}

#[test]
fn aiperf_and_vllm_option_names_are_accepted() {
    let input = "{\"timestamp\": 1000, \"input_length\": 600, \"output_length\": 10, \"hash_ids\": [1, 2]}\n";
    let capped = crate::util::run_ok("mc-cap", &["--max-isl", "300", "--max-osl", "5"], input);
    for (isl, osl) in [
        ("--max-input-length", "--max-output-length"),
        ("--synthesis-max-isl", "--synthesis-max-osl"),
    ] {
        let aliased = crate::util::run_ok("mc-cap", &[isl, "300", osl, "5"], input);
        assert_eq!(capped, aliased, "{isl} {osl}");
    }
    assert_eq!(
        crate::util::run_ok("mc-scale", &["--synthesis-speedup-ratio", "2"], input),
        "{\"timestamp\": 500, \"input_length\": 600, \"output_length\": 10, \"hash_ids\": [1, 2]}\n"
    );
    // A typo of the vLLM name points at it, not at --input.
    tool("mc-cap")
        .args(["--max-input-lenght", "300"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "tip: a similar argument exists: '--max-input-length'",
        ));
}

#[test]
fn a_nat_or_weka_file_is_named_with_its_converter() {
    for t in READERS {
        let nat = tool(t)
            .write_stdin("[{\"request_number\": 0, \"intermediate_steps\": []}]\n")
            .output()
            .unwrap();
        assert_eq!(nat.status.code(), Some(65), "{t}");
        assert!(String::from_utf8_lossy(&nat.stderr).contains("convert it with `nat2mc`"));
        // Pretty-printed: the first line is only `[`; every converter named.
        let pretty = tool(t)
            .write_stdin("[\n  {\n    \"request_number\": 0\n  }\n]\n")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&pretty.stderr);
        assert!(
            err.contains("`nat2mc`") && err.contains("mc-import --from auto"),
            "{t}: {err}"
        );
        let weka = tool(t)
            .write_stdin("{\"id\": \"s\", \"block_size\": 64, \"requests\": []}\n")
            .output()
            .unwrap();
        assert_eq!(weka.status.code(), Some(65), "{t}");
        assert!(String::from_utf8_lossy(&weka.stderr).contains("WEKA session file"));
    }
}

#[test]
fn aiperfs_input_file_spelling_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.jsonl");
    std::fs::write(
        &trace,
        "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 2}\n",
    )
    .unwrap();
    for t in ["mc-replay", "mc-analyze"] {
        let out = tool(t)
            .args(["--input-file", trace.to_str().unwrap()])
            .output()
            .unwrap();
        assert_success(&out);
    }
}

/// Every tool that reads one trace takes it as a plain argument, the same
/// as `--input`; both at once is a usage error naming the two.
#[test]
fn the_input_file_as_a_plain_argument() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let row =
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 9, \"hash_ids\": [1, 2]}\n";
    std::fs::write(&input, row).unwrap();
    let path = input.to_str().unwrap();
    let cases: [(&str, &[&str]); 6] = [
        ("mc-cap", &["--max-osl", "3"]),
        ("mc-scale", &["--speedup", "2"]),
        ("mc-roots", &["--roots", "2"]),
        ("mc-analyze", &[]),
        ("mc-plot", &[]),
        ("mc-replay", &[]),
    ];
    for (t, args) in cases {
        let by_option = tool(t).args(args).args(["-i", path]).output().unwrap();
        let plain = tool(t).args(args).arg(path).output().unwrap();
        assert_eq!(by_option.status.code(), Some(0), "{t}: {by_option:?}");
        assert_eq!(plain.status.code(), Some(0), "{t}: {plain:?}");
        if t != "mc-replay" {
            // (mc-replay's results carry wall-clock times.)
            assert_eq!(by_option.stdout, plain.stdout, "{t}");
        }
        assert!(!plain.stdout.is_empty(), "{t}");
        tool(t)
            .args(args)
            .args(["-i", path, path])
            .assert()
            .code(2)
            .stderr(predicates::str::contains(
                "the argument '--input <FILE>' cannot be used with '[FILE]'",
            ));
    }
    // mc-replay names the plain argument in its run description.
    let summary = dir.path().join("s.json");
    tool("mc-replay")
        .args(["--summary", summary.to_str().unwrap(), path])
        .assert()
        .code(0);
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(s["run"]["input"], path);
    // The tools that read several: the plain arguments are all inputs, in
    // order, after `-i`.
    let out = tool("mc-merge")
        .args(["concat", path, path])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 2);
}
