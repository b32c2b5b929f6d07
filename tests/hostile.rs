//! Issue 24, "nothing lost, nothing leaked, no crash": hostile inputs and
//! arguments for every tool but mc-replay and mc-report. Four classes:
//! an output that is an input (exit 73, the input untouched); extreme but
//! parseable values (a limit, exit 2 or 65, never a panic or an unbounded
//! allocation); wrong output with exit 0; and every case of those under
//! `ulimit -v` (exit 0, 2 or 65, never 101 or 134).

use crate::util::tool;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const ROWS: &str = "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n\
                    {\"timestamp\": 5, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n";

const AZURE: &str = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                     2024-05-10 00:00:00+00:00,10,1\n\
                     2024-05-10 00:00:01+00:00,20,2\n";

/// What a run left: exit code and stderr.
struct Exit {
    code: Option<i32>,
    stderr: String,
    stdout: String,
}

/// Runs `name` with `args` (stdin empty unless `stdin` names a file).
fn exec(name: &str, args: &[&str], stdin: Option<&Path>) -> Exit {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin(name));
    cmd.args(args);
    match stdin {
        Some(p) => cmd.stdin(std::fs::File::open(p).unwrap()),
        None => cmd.stdin(Stdio::null()),
    };
    let out = cmd.output().unwrap();
    Exit {
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

/// Runs `name args` under `ulimit -v 4000000` (about 4 GB of address
/// space) with a time limit, stdin from `input`, and asserts its exit code
/// is one of `codes` (never 101, a panic, or 134, an abort). Returns stderr.
fn limited(name: &str, args: &[&str], input: &str, codes: &[i32]) -> String {
    let bin = assert_cmd::cargo::cargo_bin(name);
    let out = assert_cmd::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 4000000; exec \"$0\" \"$@\"")
        .arg(&bin)
        .args(args)
        .write_stdin(input.to_string())
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let code = out.status.code();
    assert!(
        code.is_some_and(|c| codes.contains(&c)),
        "{name} {args:?}: exit {code:?} (want one of {codes:?}); stderr: {stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("memory allocation"),
        "{name} {args:?}: {stderr}"
    );
    stderr
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

// ---- 1. an output that is one of the inputs -------------------------------

/// Runs `name args`, expects exit 73 naming the collision, and checks that
/// every file in `kept` still holds its bytes.
fn refused(name: &str, args: &[&str], stdin: Option<&Path>, kept: &[&Path]) {
    let before: Vec<Vec<u8>> = kept.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let r = exec(name, args, stdin);
    assert_eq!(r.code, Some(73), "{name} {args:?}: {}", r.stderr);
    assert!(r.stderr.contains("the output is"), "{}", r.stderr);
    assert!(r.stderr.starts_with(&format!("{name}: ")), "{}", r.stderr);
    for (p, b) in kept.iter().zip(before) {
        assert_eq!(
            std::fs::read(p).unwrap(),
            b,
            "{name} touched {}",
            p.display()
        );
    }
}

fn dir_with(files: &[(&str, &str)]) -> (tempfile::TempDir, Vec<PathBuf>) {
    crate::util::temp_files(files)
}

#[test]
fn scale_output_is_its_input() {
    let (_d, p) = dir_with(&[("a.jsonl", ROWS)]);
    refused(
        "mc-scale",
        &["-i", s(&p[0]), "-o", s(&p[0])],
        None,
        &[&p[0]],
    );
}

#[test]
fn scale_output_is_its_stdin() {
    let (_d, p) = dir_with(&[("a.jsonl", ROWS)]);
    refused("mc-scale", &["-o", s(&p[0])], Some(&p[0]), &[&p[0]]);
}

#[test]
fn cap_output_is_a_hard_link_to_its_input() {
    let (d, p) = dir_with(&[("a.jsonl", ROWS)]);
    let link = d.path().join("link.jsonl");
    std::fs::hard_link(&p[0], &link).unwrap();
    refused("mc-cap", &["-i", s(&p[0]), "-o", s(&link)], None, &[&p[0]]);
}

#[test]
fn roots_output_is_its_input_by_symlink() {
    let (d, p) = dir_with(&[("a.jsonl", ROWS)]);
    let link = d.path().join("link.jsonl");
    std::os::unix::fs::symlink(&p[0], &link).unwrap();
    refused(
        "mc-roots",
        &["-i", s(&link), "-o", s(&p[0])],
        None,
        &[&p[0]],
    );
}

#[test]
fn import_output_is_its_input() {
    let (_d, p) = dir_with(&[("d.csv", AZURE)]);
    refused(
        "mc-import",
        &["--from", "azure", s(&p[0]), "-o", s(&p[0])],
        None,
        &[&p[0]],
    );
    // Auto-detection reads the head first: still refused before that.
    refused("mc-import", &[s(&p[0]), "-o", s(&p[0])], None, &[&p[0]]);
}

#[test]
fn import_output_is_a_ragpulse_component_file() {
    let (d, p) = dir_with(&[
        ("0_trace.jsonl", &rag_row("1", "10")),
        (
            "4_user_input.jsonl",
            "{\"user_input_id\": 300, \"token_length\": 5}\n",
        ),
    ]);
    refused(
        "mc-import",
        &["--from", "ragpulse", s(&p[0]), "-o", s(&p[1])],
        None,
        &[&p[0], &p[1]],
    );
    // Another file in the same folder is fine.
    let out = d.path().join("out.jsonl");
    let r = exec(
        "mc-import",
        &["--from", "ragpulse", s(&p[0]), "-o", s(&out)],
        None,
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

#[test]
fn merge_output_is_its_second_input() {
    let (_d, p) = dir_with(&[("a.jsonl", ROWS), ("b.jsonl", ROWS)]);
    for mode in ["concat", "interleave"] {
        refused(
            "mc-merge",
            &[mode, s(&p[0]), s(&p[1]), "-o", s(&p[1])],
            None,
            &[&p[0], &p[1]],
        );
    }
}

#[test]
fn gen_output_is_its_traffic_file_or_trace() {
    let (_d, p) = dir_with(&[
        ("qps.csv", "Time,qps\n2024-01-01 00:00:00,1\n"),
        ("in.csv", "Time,p50\n2024-01-01 00:00:00,10\n"),
        ("t.jsonl", ROWS),
    ]);
    let args = [
        "stat",
        "--traffic-file",
        s(&p[0]),
        "--prompt-len-file",
        s(&p[1]),
        "-o",
        s(&p[0]),
    ];
    refused("mc-gen", &args, None, &[&p[0], &p[1]]);
    refused(
        "mc-gen",
        &["from-trace", "-i", s(&p[2]), "-o", s(&p[2])],
        None,
        &[&p[2]],
    );
    // --plot is an output too.
    refused(
        "mc-gen",
        &["from-trace", "-i", s(&p[2]), "--plot", s(&p[2])],
        None,
        &[&p[2]],
    );
}

#[test]
fn nat2mc_output_is_its_input() {
    let (_d, p) = dir_with(&[("p.json", "[]")]);
    refused(
        "nat2mc",
        &["--input-file", s(&p[0]), "--output-file", s(&p[0])],
        None,
        &[&p[0]],
    );
}

#[test]
fn plot_svg_or_output_is_its_input() {
    let (_d, p) = dir_with(&[("a.jsonl", ROWS)]);
    refused(
        "mc-plot",
        &["-i", s(&p[0]), "--svg", s(&p[0])],
        None,
        &[&p[0]],
    );
    refused("mc-plot", &["-i", s(&p[0]), "-o", s(&p[0])], None, &[&p[0]]);
}

#[test]
fn plot_svg_is_a_file_of_the_sweep_it_draws() {
    let (d, p) = dir_with(&[("sweep.json", "{\"points\": []}")]);
    refused(
        "mc-plot",
        &["--sweep", s(d.path()), "--svg", s(&p[0])],
        None,
        &[&p[0]],
    );
}

#[test]
fn dev_null_as_input_and_output_is_fine() {
    let r = exec("mc-scale", &["-i", "/dev/null", "-o", "/dev/null"], None);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stdout, "");
    limited("mc-scale", &["-o", "/dev/null"], ROWS, &[0]);
}

// ---- 2. extreme but parseable values: a limit, never a crash -------------

/// A RAGPulse trace row with no components (nothing to load).
fn rag_row(ts: &str, input: &str) -> String {
    format!(
        "{{\"timestamp\": {ts}, \"input_length\": {input}, \"output_length\": 1, \"hash_ids\": \
         {{\"sys_prompt\": [], \"passages_ids\": [], \"history\": [], \"web_search\": [], \
         \"user_input\": []}}}}\n"
    )
}

/// A WEKA session file with the given requests.
fn weka(id: &str, requests: &str) -> String {
    format!("{{\"id\": \"{id}\", \"block_size\": 4, \"requests\": [{requests}]}}")
}

#[test]
fn import_synth_ids_for_a_huge_context_is_a_limit() {
    for big in ["1000000000000", "18446744073709551615"] {
        let csv =
            format!("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00+00:00,{big},1\n");
        let err = limited(
            "mc-import",
            &["--from", "azure", "--synth-hash-ids"],
            &csv,
            &[65],
        );
        assert!(
            err.contains("line 2: column 2 (`ContextTokens`)")
                && err.contains("limit of 10000000 tokens per row"),
            "{err}"
        );
    }
}

#[test]
fn import_weka_in_of_2_64_minus_1_is_a_limit() {
    let w = weka(
        "s",
        "{\"t\": 0, \"in\": 18446744073709551615, \"out\": 1, \"hash_ids\": [1]}",
    );
    let err = limited("mc-import", &["--from", "weka"], &w, &[65]);
    assert!(err.contains("line 1: field `requests[0].in`"), "{err}");
}

#[test]
fn import_ragpulse_huge_input_length_is_a_limit() {
    let (_d, p) = dir_with(&[("0_trace.jsonl", &rag_row("1", "99999999999"))]);
    let err = limited("mc-import", &["--from", "ragpulse", s(&p[0])], "", &[65]);
    assert!(err.contains("line 1: field `input_length`"), "{err}");
}

#[test]
fn gen_huge_lengths_are_usage_errors() {
    for isl in [
        "18446744073709551615",
        "lognormal:1e300:0.5",
        "normal:1e12:1",
    ] {
        let err = limited(
            "mc-gen",
            &[
                "constant",
                "--qps",
                "1",
                "--num-requests",
                "3",
                "--isl",
                isl,
            ],
            "",
            &[2],
        );
        assert!(err.contains("--isl") && err.contains("limit"), "{err}");
    }
}

#[test]
fn gen_prefix_words_with_a_huge_spread_is_a_usage_error() {
    let err = limited(
        "mc-gen",
        &["prompts", "--prefix-words", "normal:0:1e12"],
        "",
        &[2],
    );
    assert!(err.contains("--prefix-words"), "{err}");
}

#[test]
fn gen_qps_1e308_is_bounded_by_rate_times_duration() {
    let err = limited(
        "mc-gen",
        &["constant", "--qps", "1e308", "--duration-ms", "1000"],
        "",
        &[2],
    );
    assert!(
        err.contains("--qps") && err.contains("above the limit"),
        "{err}"
    );
    // With --num-requests the same rate ends.
    limited(
        "mc-gen",
        &["constant", "--qps", "1e308", "--num-requests", "3"],
        "",
        &[0],
    );
}

#[test]
fn plot_one_ms_windows_over_1e11_ms_is_a_usage_error() {
    let rows = "{\"timestamp\": 0, \"input_length\": 1}\n{\"timestamp\": 100000000000, \"input_length\": 1}\n";
    let err = limited("mc-plot", &["--window-ms", "1"], rows, &[2]);
    assert!(
        err.contains("--window-ms 1:") && err.contains("give --window-ms 100001 or more"),
        "{err}"
    );
}

#[test]
fn plot_timestamp_1e308_is_a_data_error() {
    let rows =
        "{\"timestamp\": 0, \"input_length\": 1}\n{\"timestamp\": 1e308, \"input_length\": 1}\n";
    let err = limited("mc-plot", &[], rows, &[65]);
    assert!(err.contains("line 2: field `timestamp`"), "{err}");
}

#[test]
fn plot_bins_2_64_minus_1_is_a_usage_error() {
    let err = limited("mc-plot", &["--bins", "18446744073709551615"], ROWS, &[2]);
    assert!(err.contains("--bins"), "{err}");
}

#[test]
fn engine_step_costs_beyond_a_day_are_usage_errors() {
    let (d, p) = dir_with(&[
        ("t.jsonl", ROWS),
        (
            "prof.json",
            "{\"model\": \"roofline\", \"t_fix_ms\": 1e17, \"c_seq_ms\": 0, \"t_w_ms\": 0, \
             \"c_lin_ms\": 0, \"k_ms\": 0, \"c_kv_ms\": 0}",
        ),
    ]);
    let out = d.path().join("r.jsonl");
    let base = ["-i", s(&p[0]), "-o", s(&out)];
    let cases: [(&[&str], &str); 3] = [
        (&["--t-fix-ms", "1e16"], "--t-fix-ms"),
        (&["--engine-profile", s(&p[1])], "field `t_fix_ms`"),
        (
            &[
                "--engine-profile",
                "dynamo-polynomial",
                "--prefill-ms",
                "1e300,0,0",
            ],
            "--prefill-ms",
        ),
    ];
    for (extra, named) in cases {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let err = limited("mc-replay", &args, "", &[2]);
        assert!(err.contains(named) && err.contains("limit"), "{err}");
    }
    // A negative profile value is an option error too, naming the field.
    let neg = crate::util::write_file(
        d.path(),
        "neg.json",
        "{\"model\": \"roofline\", \"t_fix_ms\": -1, \"c_seq_ms\": 0, \"t_w_ms\": 0, \
         \"c_lin_ms\": 0, \"k_ms\": 0, \"c_kv_ms\": 0}",
    );
    let args: Vec<&str> = base
        .iter()
        .copied()
        .chain(["--engine-profile", s(&neg)])
        .collect();
    let err = limited("mc-replay", &args, "", &[2]);
    assert!(err.contains("field `t_fix_ms` is -1"), "{err}");
}

/// The engine jumps idle gaps (`Engine::advance`), and so does mc-replay's
/// scheduler on a virtual clock (`Target::virtual_clock`).
#[test]
fn engine_idle_gap_of_1e11_ms_is_jumped() {
    let rows = "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2}\n\
                {\"timestamp\": 100000000000, \"input_length\": 10, \"output_length\": 2}\n";
    let (d, p) = dir_with(&[("t.jsonl", rows)]);
    let out = d.path().join("r.jsonl");
    let started = std::time::Instant::now();
    limited("mc-replay", &["-i", s(&p[0]), "-o", s(&out)], "", &[0]);
    assert!(started.elapsed().as_secs() < 10);
}

// ---- 3. wrong output with exit 0 ------------------------------------------

#[test]
fn import_refuses_dates_that_do_not_exist() {
    for (bad, why) in [
        ("2023-02-29 00:00:00", "2023-02 has no day 29"),
        ("2024-04-31 00:00:00", "2024-04 has no day 31"),
        ("2024-05-10 00:00:00+99:99", "+99:99 is not a UTC offset"),
    ] {
        let csv = format!("TIMESTAMP,ContextTokens,GeneratedTokens\n{bad},1,1\n");
        let err = limited("mc-import", &["--from", "azure"], &csv, &[65]);
        assert!(
            err.contains("line 2: column 1 (`TIMESTAMP`)") && err.contains(why),
            "{err}"
        );
    }
}

#[test]
fn import_never_writes_a_time_before_zero() {
    // Azure: the zero is the first row; an earlier row is refused, named.
    let csv = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
               2024-05-10 00:00:01,1,1\n2024-05-10 00:00:00,1,1\n";
    let r = limited("mc-import", &["--from", "azure"], csv, &[65]);
    assert!(
        r.contains("line 3:") && r.contains("not in time order"),
        "{r}"
    );
    // WEKA: a negative or a huge `t`.
    for t in ["-5", "1e300"] {
        let w = weka(
            "s",
            &format!("{{\"t\": {t}, \"in\": 4, \"out\": 1, \"hash_ids\": [1]}}"),
        );
        let err = limited("mc-import", &["--from", "weka"], &w, &[65]);
        assert!(err.contains("field `requests[0].t`"), "{err}");
    }
    // RAGPulse: a negative timestamp.
    let (_d, p) = dir_with(&[("0_trace.jsonl", &rag_row("-5", "10"))]);
    let err = limited("mc-import", &["--from", "ragpulse", s(&p[0])], "", &[65]);
    assert!(err.contains("line 1: field `timestamp`"), "{err}");
}

#[test]
fn import_weka_keeps_same_id_sessions_of_two_inputs_apart() {
    let one = weka(
        "s",
        "{\"t\": 0, \"in\": 4, \"out\": 1, \"hash_ids\": [1]}, \
         {\"t\": 1, \"in\": 8, \"out\": 1, \"hash_ids\": [1, 2], \"think_time\": 1}",
    );
    let (_d, p) = dir_with(&[("a.json", &one), ("b.json", &one)]);
    for files in [[s(&p[0]), s(&p[1])], [s(&p[0]), s(&p[0])]] {
        let r = exec("mc-import", &["--from", "weka", files[0], files[1]], None);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        let ids: Vec<String> = r
            .stdout
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["session_id"].as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(ids, ["s", "s", "s#2", "s#2"], "{}", r.stdout);
        assert!(r.stderr.contains("kept apart"), "{}", r.stderr);
    }
}

#[test]
fn gen_uniform_width_overflow_is_refused_not_length_1() {
    let err = limited(
        "mc-gen",
        &[
            "constant",
            "--qps",
            "1",
            "--num-requests",
            "3",
            "--isl",
            "uniform:0:18446744073709551615",
        ],
        "",
        &[2],
    );
    assert!(err.contains("uniform:0:18446744073709551615"), "{err}");
}

#[test]
fn gen_timestamps_never_saturate() {
    let err = limited(
        "mc-gen",
        &["constant", "--qps", "1e-300", "--num-requests", "3"],
        "",
        &[2],
    );
    assert!(err.contains("2^53 ms") && err.contains("--qps"), "{err}");
    // A ramp whose rate underflows used to end early with exit 0 (2 rows
    // for --num-requests 3): now an error.
    let err = limited(
        "mc-gen",
        &[
            "constant",
            "--qps",
            "10",
            "--qps-start",
            "1e-300",
            "--ramp-up",
            "exponential",
            "--num-requests",
            "3",
        ],
        "",
        &[2],
    );
    assert!(err.contains("2^53 ms"), "{err}");
    // An ordinary ramp writes exactly the rows asked for.
    let out = tool("mc-gen")
        .args([
            "constant",
            "--qps",
            "10",
            "--qps-start",
            "1",
            "--ramp-up",
            "linear",
        ])
        .args(["--num-requests", "3"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
}

#[test]
fn non_utf8_grafana_csv_names_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let bad = d.path().join("qps.csv");
    std::fs::write(
        &bad,
        b"Time,qps\n2024-01-01 00:00:00,1\n2024-01-01 00:01:00,\xff2\n",
    )
    .unwrap();
    let good = d.path().join("in.csv");
    std::fs::write(&good, "Time,p50\n2024-01-01 00:00:00,10\n").unwrap();
    let err = limited(
        "mc-gen",
        &[
            "stat",
            "--traffic-file",
            s(&bad),
            "--prompt-len-file",
            s(&good),
        ],
        "",
        &[65],
    );
    assert!(
        err.contains("qps.csv: line 3:") && err.contains("UTF-8"),
        "{err}"
    );
}

#[test]
fn non_utf8_prompt_file_names_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("p.jsonl");
    std::fs::write(&prompts, b"{\"prompt\": \"a b\"}\n{\"prompt\": \"\xff\"}\n").unwrap();
    let tok = crate::util::word_tokenizer(d.path(), &["a", "b"]);
    let cache = d.path().join("cache");
    let err = limited(
        "mc-gen",
        &[
            "constant",
            "--qps",
            "1",
            "--num-requests",
            "2",
            "--prompt-file",
            s(&prompts),
            "--tokenizer",
            s(&tok),
            "--cache-dir",
            s(&cache),
        ],
        "",
        &[65],
    );
    assert!(
        err.contains("p.jsonl: line 2:") && err.contains("UTF-8"),
        "{err}"
    );
}

// ---- 4. every tool under `ulimit -v` on hostile rows ----------------------

/// Rows that parse but hold extreme values, each after one ordinary row.
const HOSTILE_ROWS: [&str; 8] = [
    "{\"timestamp\": 1e308, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}",
    "{\"timestamp\": -5, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}",
    "{\"timestamp\": 0, \"input_length\": 18446744073709551615, \"output_length\": 18446744073709551615, \"hash_ids\": [1]}",
    "{\"timestamp\": 0, \"session_id\": \"a\", \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [18446744073709551615]}",
    "{\"session_id\": \"a\", \"delay\": 1e308, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}",
    "{\"timestamp\": 0, \"input_length\": 9999999999999, \"output_length\": 2}",
    "{\"timestamp\": 9223372036854775807, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}",
    "{\"timestamp\": 100000000000, \"input_length\": 0, \"output_length\": 0, \"hash_ids\": []}",
];

#[test]
fn every_tool_survives_hostile_rows_under_a_memory_limit() {
    let tools: &[(&str, &[&str])] = &[
        ("mc-scale", &["--speedup", "2"]),
        ("mc-scale", &["--speedup", "1e-300"]),
        ("mc-scale", &["--prompt-len-multiplier", "1e300"]),
        ("mc-scale", &["--output-len-multiplier", "1e300"]),
        ("mc-scale", &["--block-size", "1"]),
        ("mc-cap", &["--max-input", "5"]),
        ("mc-cap", &["--max-output", "1"]),
        ("mc-roots", &[]),
        ("mc-analyze", &[]),
        ("mc-analyze", &["--cache-blocks", "18446744073709551615"]),
        ("mc-merge", &["concat", "-"]),
        ("mc-merge", &["interleave", "-"]),
        ("mc-plot", &[]),
        ("mc-plot", &["--window-ms", "1e-300"]),
        ("mc-gen", &["from-trace"]),
        ("mc-gen", &["from-trace", "--interval-ms", "1"]),
        ("mc-gen", &["from-trace", "--format", "aibrix"]),
    ];
    let first = "{\"timestamp\": 0, \"session_id\": \"a\", \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}";
    for row in HOSTILE_ROWS {
        let input = format!("{first}\n{row}\n");
        for (name, args) in tools {
            limited(name, args, &input, &[0, 2, 65]);
        }
    }
}

#[test]
fn nat2mc_and_importers_survive_broken_documents_under_a_memory_limit() {
    for doc in [
        "",
        "[",
        "[1e308]",
        "{",
        "[{\"payload\": {\"event_type\": 1e308}}]",
    ] {
        limited("nat2mc", &[], doc, &[0, 2, 65]);
        limited("mc-import", &["--from", "nat"], doc, &[0, 2, 65]);
    }
    for (format, doc) in [
        ("weka", "{\"id\": \"s\", \"block_size\": 18446744073709551615, \"requests\": [{\"t\": 0, \"in\": 4, \"out\": 1}]}"),
        ("weka", "{\"id\": \"s\", \"block_size\": 1, \"requests\": [{\"t\": 1e-320, \"in\": 10000000, \"out\": 1, \"hash_ids\": [18446744073709551615]}]}"),
        ("aibrix", "{\"timestamp\": 1e308, \"requests\": [{\"prompt_length\": 1}]}"),
        ("aibrix", "{\"timestamp\": 0, \"requests\": [{\"prompt_length\": 18446744073709551615}]}"),
        ("burstgpt", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1e308,a,1,1,2,b\n"),
        ("burstgpt", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n9223372036.854775807,a,18446744073709551615,1,2,b\n"),
        ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n9999-12-31 23:59:60.999999999-14:00,1,1\n"),
        ("otel", "{\"resourceSpans\": 1}"),
        ("otel", "{\"resourceSpans\": [{\"scopeSpans\": [{\"spans\": [{\"traceId\": \"t\", \"spanId\": \"a\", \"startTimeUnixNano\": \"1\", \"endTimeUnixNano\": \"340282366920938463463374607431768211456\", \"attributes\": [{\"key\": \"gen_ai.operation.name\", \"value\": {\"stringValue\": \"chat\"}}, {\"key\": \"gen_ai.usage.input_tokens\", \"value\": {\"intValue\": \"18446744073709551615\"}}, {\"key\": \"gen_ai.usage.output_tokens\", \"value\": {\"doubleValue\": 1e308}}]}]}]}]}"),
        ("otel", "{\"resourceSpans\": [{\"scopeSpans\": [{\"spans\": [{\"traceId\": \"t\", \"spanId\": \"a\", \"startTimeUnixNano\": \"1\", \"endTimeUnixNano\": \"2\", \"attributes\": [{\"key\": \"gen_ai.operation.name\", \"value\": {\"stringValue\": \"chat\"}}, {\"key\": \"gen_ai.usage.input_tokens\", \"value\": {\"intValue\": 10000000}}, {\"key\": \"gen_ai.usage.output_tokens\", \"value\": {\"intValue\": \"1\"}}]}, {\"traceId\": \"u\", \"spanId\": \"a\", \"startTimeUnixNano\": \"18446744073709551615\", \"endTimeUnixNano\": \"18446744073709551615\", \"attributes\": [{\"key\": \"gen_ai.operation.name\", \"value\": {\"stringValue\": \"chat\"}}, {\"key\": \"gen_ai.usage.input_tokens\", \"value\": {\"intValue\": \"1\"}}, {\"key\": \"gen_ai.usage.output_tokens\", \"value\": {\"intValue\": \"1\"}}]}]}]}]}"),
    ] {
        limited(
            "mc-import",
            &["--from", format, "--synth-hash-ids", "--block-size", "1"],
            doc,
            &[0, 2, 65],
        );
    }
}

#[test]
fn engine_kv_cache_beyond_2_24_blocks_is_a_usage_error() {
    let (d, p) = dir_with(&[("t.jsonl", ROWS)]);
    let out = d.path().join("r.jsonl");
    let err = limited(
        "mc-replay",
        &["-i", s(&p[0]), "-o", s(&out), "--kv-tokens", "30000000000"],
        "",
        &[2],
    );
    assert!(
        err.contains("--kv-tokens 30000000000") && err.contains("16777216 blocks"),
        "{err}"
    );
    // mc-mock --engine refuses it before serving anything.
    let err = limited(
        "mc-mock",
        &["--engine", "--kv-tokens", "30000000000", "--port", "0"],
        "",
        &[2],
    );
    assert!(err.contains("--kv-tokens"), "{err}");
}

/// A NAT profiler file: one request per (start, end, completion tokens).
fn nat_doc(calls: &[(&str, &str, &str)]) -> String {
    let reqs: Vec<String> = calls
        .iter()
        .enumerate()
        .map(|(k, (start, end, completion))| {
            format!(
                "{{\"request_number\": {k}, \"intermediate_steps\": [\
                 {{\"parent_id\": \"root\", \"function_ancestry\": {{}}, \"payload\": {{\"event_type\": \"LLM_START\", \
                 \"event_timestamp\": {start}, \"name\": \"m\", \"UUID\": \"u{k}\", \"metadata\": {{\"chat_inputs\": \
                 [{{\"role\": \"user\", \"content\": \"a a\"}}], \"chat_responses\": null}}, \"usage_info\": null}}}},\
                 {{\"parent_id\": \"root\", \"function_ancestry\": {{}}, \"payload\": {{\"event_type\": \"LLM_END\", \
                 \"event_timestamp\": {end}, \"name\": \"m\", \"UUID\": \"u{k}\", \"usage_info\": {{\"token_usage\": \
                 {{\"prompt_tokens\": 2, \"completion_tokens\": {completion}}}}}}}}}]}}"
            )
        })
        .collect();
    format!("[{}]", reqs.join(","))
}

#[test]
fn nat2mc_refuses_huge_lengths_and_times_instead_of_writing_them() {
    let d = tempfile::tempdir().unwrap();
    let tok = crate::util::word_tokenizer(d.path(), &["a"]);
    let cases = [
        (
            nat_doc(&[("100", "101", "18446744073709551615")]),
            "field `completion_tokens`",
        ),
        (
            nat_doc(&[("-1e308", "1", "1"), ("100", "101", "1")]),
            "field `timestamp`",
        ),
    ];
    for (doc, named) in cases {
        let err = limited("nat2mc", &["--tokenizer", s(&tok), "-o", "-"], &doc, &[65]);
        assert!(err.contains(named) && err.contains("limit"), "{err}");
    }
}

#[test]
fn analyze_output_file_may_not_be_its_input() {
    let rows =
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n";
    let (_d, p) = dir_with(&[("t.jsonl", rows)]);
    let out = crate::util::tool("mc-analyze")
        .args(["-i", s(&p[0]), "--output-file", s(&p[0])])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(73));
    assert_eq!(std::fs::read_to_string(&p[0]).unwrap(), rows);
}

#[test]
fn merge_refuses_times_past_the_limit() {
    let (_d, p) = dir_with(&[
        ("a.jsonl", "{\"timestamp\": 1e300, \"input_length\": 4}\n"),
        ("b.jsonl", "{\"timestamp\": 5, \"input_length\": 4}\n"),
    ]);
    let err = limited("mc-merge", &["interleave", s(&p[0]), s(&p[1])], "", &[65]);
    assert!(
        err.contains("line 1: field `timestamp`") && err.contains("limit"),
        "{err}"
    );
}
