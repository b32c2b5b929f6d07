//! The shell examples in README.md and docs/**/*.md, run against the built
//! binaries, their output checked against what the docs show.
//!
//! The convention, by a fenced block's info string (the words after the
//! opening three backticks):
//!
//! - `sh run`: an example meant to run. It runs with `sh -c`, stderr merged
//!   into stdout, in a temporary directory that holds `sample.jsonl` and
//!   `examples/sample.jsonl` (copies of examples/sample.jsonl), with the
//!   debug binaries' directory first on `PATH`. The blocks of one file run in
//!   order in one directory, so a later block may read what an earlier one
//!   wrote. It must exit 0 (`sh run exit=N` expects exit code N). A line
//!   that begins `cargo build --release && export PATH=...&& ` (the
//!   README's first command) runs from after that prefix: the build is the
//!   test's own build, and `PATH` already leads to its binaries.
//! - `text output`: what the `sh run` block before it prints (the next
//!   fenced block after it; prose may stand between). Lines are compared
//!   with trailing spaces trimmed; a line that is just `...` stands for any
//!   number of lines (none included), and `...` inside a line for any text
//!   within that line (a wall time, a temporary path).
//! - `sh norun: WHY` (also `bash`, `console`, `shell`): an example that
//!   cannot run here, with the reason (`needs a server`, `needs Slurm`,
//!   `needs ../shared/data`). The reason must be there.
//! - Any other shell block (`sh`, `bash`, ... without `run` or `norun: WHY`)
//!   and any fence without an info string fail the test, so no example is
//!   left unchecked by accident. Other languages (`text`, `json`, `yaml`)
//!   are not examples and are left alone.

use std::path::{Path, PathBuf};
use std::process::Command;

const SHELLS: [&str; 5] = ["sh", "bash", "shell", "console", "zsh"];

/// The prefix of the README's first command that the test does not run.
const BUILD_PREFIX: &str = "cargo build --release && export PATH=";

#[derive(Debug)]
enum Kind {
    Run { exit: i32 },
    Output,
    NoRun,
    Other,
}

#[derive(Debug)]
struct Block {
    line: usize,
    kind: Kind,
    body: String,
}

/// The fenced blocks of a Markdown text, or the problems that make a block
/// unchecked (an unmarked shell block, a fence without an info string).
fn blocks(text: &str) -> (Vec<Block>, Vec<String>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, l)) = lines.next() {
        let trimmed = l.trim_start();
        let Some(info) = trimmed.strip_prefix("```") else {
            continue;
        };
        let indent = l.len() - trimmed.len();
        let info = info.trim();
        let mut body = String::new();
        for (_, b) in lines.by_ref() {
            if b.trim() == "```" {
                break;
            }
            // Content is indented like its fence (a block inside a list item).
            let cut = b.len() - b.trim_start().len();
            body.push_str(&b[cut.min(indent)..]);
            body.push('\n');
        }
        let line = n + 1;
        let mut words = info.split_whitespace();
        let first = words.next().unwrap_or("");
        let second = words.next().unwrap_or("");
        let kind = if info.is_empty() {
            problems.push(format!(
                "line {line}: a fence without an info string (say `text`, `sh run` or `sh norun: WHY`)"
            ));
            Kind::Other
        } else if first == "text" && second == "output" {
            Kind::Output
        } else if SHELLS.contains(&first) {
            if second == "run" {
                let exit = match words.next() {
                    None => 0,
                    Some(w) => match w.strip_prefix("exit=").and_then(|c| c.parse().ok()) {
                        Some(c) => c,
                        None => {
                            problems.push(format!("line {line}: `{info}`: expected `exit=N`"));
                            0
                        }
                    },
                };
                Kind::Run { exit }
            } else if second == "norun:" && words.next().is_some() {
                Kind::NoRun
            } else {
                problems.push(format!(
                    "line {line}: shell block `{info}` is neither `{first} run` nor `{first} norun: WHY`"
                ));
                Kind::Other
            }
        } else {
            Kind::Other
        };
        out.push(Block { line, kind, body });
    }
    (out, problems)
}

/// A text's lines as compared: trailing spaces and blank last lines cut.
fn clean(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().map(|l| l.trim_end().to_string()).collect();
    while v.last().is_some_and(|l| l.is_empty()) {
        v.pop();
    }
    v
}

/// Whether `actual` is what `expected` shows (`...` lines and `...` within
/// a line as described at the top).
fn matches(expected: &str, actual: &str) -> bool {
    let (e, a) = (clean(expected), clean(actual));
    reach(&e, &a)[e.len()][a.len()]
}

/// `reach[i][j]`: the first `i` shown lines match the first `j` printed
/// ones. The one rule for what `...` stands for, read whole by [`matches`]
/// and up to where it stops by [`first_mismatch`].
fn reach(e: &[String], a: &[String]) -> Vec<Vec<bool>> {
    let mut reach = vec![vec![false; a.len() + 1]; e.len() + 1];
    reach[0][0] = true;
    for i in 0..e.len() {
        for j in 0..=a.len() {
            if !reach[i][j] {
                continue;
            }
            if e[i].trim() == "..." {
                for r in reach[i + 1][j..].iter_mut() {
                    *r = true;
                }
            } else if j < a.len() && line_matches(&e[i], &a[j]) {
                reach[i + 1][j + 1] = true;
            }
        }
    }
    reach
}

/// Where a mismatch is: the first shown line that no reading of the
/// printed lines gets past, with the printed line it was held against (the
/// furthest one reached). Printed last in a failure, so a log that keeps
/// only a failure's tail still says what differed.
fn first_mismatch(expected: &str, actual: &str) -> String {
    let (e, a) = (clean(expected), clean(actual));
    let reach = reach(&e, &a);
    let Some(i) = (0..=e.len()).rev().find(|&i| reach[i].iter().any(|&r| r)) else {
        return "nothing matched".to_string();
    };
    let j = (0..=a.len()).rev().find(|&j| reach[i][j]).unwrap_or(0);
    match (e.get(i), a.get(j)) {
        (Some(want), Some(got)) => format!(
            "first difference: shown line {} `{want}` against printed line {} `{got}`",
            i + 1,
            j + 1
        ),
        (Some(want), None) => format!(
            "first difference: shown line {} `{want}` has no printed line left",
            i + 1
        ),
        (None, Some(got)) => format!(
            "first difference: printed line {} `{got}` is past the end of what is shown",
            j + 1
        ),
        (None, None) => "no difference found".to_string(),
    }
}

/// One line against its pattern, `...` matching any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split("...").collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || line.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &line[first.len()..];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// The script a `sh run` block runs: the README's build-and-PATH prefix cut.
fn script(body: &str) -> String {
    body.lines()
        .map(|l| match l.trim_start().strip_prefix(BUILD_PREFIX) {
            Some(rest) => rest
                .find("&& ")
                .map_or(String::new(), |i| rest[i + 3..].to_string()),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn doc_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// Runs one file's examples; returns the failures, and how many ran.
fn check_file(path: &Path) -> (Vec<String>, usize) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let name = path
        .strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string();
    let text = std::fs::read_to_string(path).unwrap();
    let (blocks, problems) = blocks(&text);
    let mut failures: Vec<String> = problems.iter().map(|p| format!("{name}: {p}")).collect();
    let bin = Path::new(env!("CARGO_BIN_EXE_mc-replay"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path_var = match std::env::var_os("PATH") {
        Some(p) => {
            let mut v = vec![bin];
            v.extend(std::env::split_paths(&p));
            std::env::join_paths(v).unwrap()
        }
        None => bin.into_os_string(),
    };
    let dir = tempfile::tempdir().unwrap();
    let sample = root.join("examples/sample.jsonl");
    std::fs::create_dir(dir.path().join("examples")).unwrap();
    std::fs::copy(&sample, dir.path().join("sample.jsonl")).unwrap();
    std::fs::copy(&sample, dir.path().join("examples/sample.jsonl")).unwrap();
    let mut ran = 0;
    for (k, b) in blocks.iter().enumerate() {
        match b.kind {
            Kind::Output => {
                let after_run = k > 0 && matches!(blocks[k - 1].kind, Kind::Run { .. });
                if !after_run {
                    failures.push(format!(
                        "{name}: line {}: a `text output` block that follows no `sh run` block",
                        b.line
                    ));
                }
                continue;
            }
            Kind::Run { exit } => {
                ran += 1;
                let out = Command::new("timeout")
                    .arg("120")
                    .arg("sh")
                    .arg("-c")
                    .arg(format!("exec 2>&1\n{}", script(&b.body)))
                    .current_dir(dir.path())
                    .env("PATH", &path_var)
                    .env("LC_ALL", "C")
                    .output()
                    .unwrap();
                let got = String::from_utf8_lossy(&out.stdout).into_owned();
                if out.status.code() != Some(exit) {
                    failures.push(format!(
                        "{name}: line {}: exit {:?}, expected {exit}; it printed:\n{got}--- {name}: line {}: exit {:?}, expected {exit}",
                        b.line,
                        out.status.code(),
                        b.line,
                        out.status.code()
                    ));
                    continue;
                }
                if let Some(next) = blocks.get(k + 1) {
                    if matches!(next.kind, Kind::Output) && !matches(&next.body, &got) {
                        failures.push(format!(
                            "{name}: line {}: the output differs from the block at line {}.\n--- shown:\n{}--- printed:\n{got}--- {name}: line {}: {}",
                            b.line,
                            next.line,
                            next.body,
                            b.line,
                            first_mismatch(&next.body, &got)
                        ));
                    }
                }
            }
            Kind::NoRun | Kind::Other => {}
        }
    }
    (failures, ran)
}

#[test]
fn doc_examples_run_and_print_what_they_show() {
    let files = doc_files();
    let results: Vec<(Vec<String>, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = files
            .iter()
            .map(|f| s.spawn(move || check_file(f)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ran: usize = results.iter().map(|r| r.1).sum();
    let failures: Vec<String> = results.into_iter().flat_map(|r| r.0).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // The README's first command is an example that runs (not vacuous).
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let (b, _) = blocks(&readme);
    assert!(
        b.first()
            .is_some_and(|b| matches!(b.kind, Kind::Run { .. })),
        "the README's first block is not a `sh run` example"
    );
    assert!(ran >= 10, "only {ran} examples ran");
}

#[test]
fn elision_and_wildcards() {
    assert!(matches("a\n...\nd\n", "a\nb\nc\nd\n"));
    assert!(matches("a\n...\nb\n", "a\nb\n"));
    assert!(matches("wall ... s\n", "wall 0.011 s\n"));
    assert!(!matches("a\nd\n", "a\nb\nd\n"));
    assert!(!matches("a\n...\n", "b\n"));
    assert!(!matches("wall ... s\n", "wall 0.011 ms x\n"));
    assert!(matches("x  \n\n", "x\n"));
}

#[test]
fn a_mismatch_is_named_by_its_lines() {
    assert_eq!(
        first_mismatch("a\n...\nd\ne\n", "a\nb\nd\nx\n"),
        "first difference: shown line 4 `e` against printed line 4 `x`"
    );
    assert_eq!(
        first_mismatch("a\nb\n", "a\n"),
        "first difference: shown line 2 `b` has no printed line left"
    );
    assert_eq!(
        first_mismatch("a\n", "a\nz\n"),
        "first difference: printed line 2 `z` is past the end of what is shown"
    );
}

#[test]
fn unmarked_blocks_are_problems() {
    let (_, p) = blocks(
        "```sh\nls\n```\n```\nx\n```\n```sh norun: needs a server\nx\n```\n```sh norun:\nx\n```\n",
    );
    assert_eq!(p.len(), 3, "{p:?}");
    assert_eq!(
        script("cargo build --release && export PATH=\"$PWD/target/release:$PATH\" && mc-cap --max-osl 1"),
        "mc-cap --max-osl 1"
    );
}

#[test]
fn doc_links_lead_to_files() {
    let mut missing = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let dir = file.parent().unwrap();
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with('#') || target.contains(' ') {
                continue;
            }
            let path = target.split('#').next().unwrap_or(target);
            let full = dir.join(path);
            if !full.exists() {
                missing.push(format!("{}: {target}", file.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "links to nothing:\n{}",
        missing.join("\n")
    );
}
