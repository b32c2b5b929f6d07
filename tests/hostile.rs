//! Issue 24, "nothing lost, nothing leaked, no crash": hostile inputs and
//! arguments for every tool but mc-replay and mc-report. Four classes:
//! an output that is an input (exit 73, the input untouched); extreme but
//! parseable values (a limit, exit 2 or 65, never a panic or an unbounded
//! allocation); wrong output with exit 0; and every case of those under
//! `ulimit -v` (exit 0, 2 or 65, never 101 or 134).

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
fn dev_null_as_input_and_output_is_fine() {
    let r = exec("mc-scale", &["-i", "/dev/null", "-o", "/dev/null"], None);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stdout, "");
    limited("mc-scale", &["-o", "/dev/null"], ROWS, &[0]);
}
