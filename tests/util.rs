//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};

use mctrace::graph::Graphs;

/// Each row's dependencies as the core graph module reads them, by
/// request id (`#row` for a row without one).
pub fn deps_by_id(g: &Graphs) -> Vec<Vec<String>> {
    let name = |r: usize| {
        g.request_id(r)
            .map_or_else(|| format!("#{r}"), str::to_string)
    };
    (0..g.len())
        .map(|r| g.deps(r).iter().map(|&d| name(d as usize)).collect())
        .collect()
}

/// A command for one of the crate's binaries.
pub fn tool(name: &str) -> assert_cmd::Command {
    assert_cmd::Command::new(assert_cmd::cargo::cargo_bin(name))
}

/// `$MCTRACE_DATA` (the `../shared/data` folder), or `None` with a printed
/// notice so a skipped real-data test is visible in the output.
pub fn data_dir(test: &str) -> Option<PathBuf> {
    match std::env::var_os("MCTRACE_DATA") {
        Some(d) => Some(PathBuf::from(d)),
        None => {
            // Straight to the stderr handle: the test harness captures
            // `eprintln!`, and this notice must show in a normal run.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "skipping {test}: MCTRACE_DATA is not set"
            );
            None
        }
    }
}

/// Runs a check that bounds wall-clock times up to `attempts` times and
/// passes on the first that holds. A loaded machine (a 2-core CI runner,
/// other builds) can stall a thread for tens of ms once; the bugs these
/// checks catch (a request sent at the wrong time, a token stamped when
/// read) move every attempt the same way. The last attempt's failure is
/// the test's.
pub fn within_attempts(attempts: u32, mut check: impl FnMut() -> Result<(), String>) {
    let mut last = String::new();
    for i in 0..attempts {
        match check() {
            Ok(()) => return,
            Err(e) => {
                use std::io::Write;
                let _ = writeln!(std::io::stderr(), "attempt {} of {attempts}: {e}", i + 1);
                last = e;
            }
        }
    }
    panic!("{last}");
}

/// What a successful mc-replay run with `--summary` left: its stdout (the
/// result lines), its stderr and the summary JSON.
pub struct Replayed {
    pub stdout: String,
    pub stderr: String,
    pub summary: serde_json::Value,
}

/// mc-replay on `trace` with `args` and a summary file, without an API key
/// from the environment; fails the test, with its stderr, unless it
/// exits 0.
pub fn replay_with_summary(args: &[&str], trace: &str) -> Replayed {
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("s.json");
    let out = tool("mc-replay")
        .args(args)
        .arg("--summary")
        .arg(&summary)
        .env_remove("OPENAI_API_KEY")
        .write_stdin(trace.to_string())
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "mc-replay {args:?} failed: {stderr}");
    Replayed {
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr,
        summary: serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap(),
    }
}

/// Fails the test, showing the tool's stderr, unless it exited 0.
pub fn assert_success(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `name` with `args` on `input` and returns its stdout, failing the
/// test (with the tool's stderr) if it does not succeed.
pub fn run_ok<S: AsRef<std::ffi::OsStr>>(name: &str, args: &[S], input: &str) -> String {
    run_ok_both(name, args, input).0
}

/// What a finished tool run left: its exit code and its output as text.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `name` with `args` on `input`, whatever its exit code.
pub fn run<S: AsRef<std::ffi::OsStr>>(name: &str, args: &[S], input: &str) -> Ran {
    let out = tool(name)
        .args(args)
        .write_stdin(input.to_string())
        .output()
        .unwrap();
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `name` and returns (stdout, stderr), failing the test (with the
/// tool's stderr) if it does not succeed.
pub fn run_ok_both<S: AsRef<std::ffi::OsStr>>(
    name: &str,
    args: &[S],
    input: &str,
) -> (String, String) {
    let r = run(name, args, input);
    assert_eq!(r.code, Some(0), "{name} failed: {}", r.stderr);
    (r.stdout, r.stderr)
}

/// Runs `name` expecting exit code `code`; returns its stderr.
pub fn run_code<S: AsRef<std::ffi::OsStr>>(
    name: &str,
    args: &[S],
    input: &str,
    code: i32,
) -> String {
    let r = run(name, args, input);
    assert_eq!(r.code, Some(code), "{name}: {}", r.stderr);
    r.stderr
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Writes `files` (name, content) into a fresh temporary folder, which
/// lives as long as the returned handle.
pub fn temp_files(list: &[(&str, &str)]) -> (tempfile::TempDir, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let paths = list
        .iter()
        .map(|(name, text)| write_file(dir.path(), name, text))
        .collect();
    (dir, paths)
}

/// A WordLevel `tokenizer.json` in `dir`: one token per whitespace-separated
/// word, `vocab` numbered from 1, any other word `[UNK]` (0).
pub fn word_tokenizer(dir: &Path, vocab: &[&str]) -> PathBuf {
    let mut words = serde_json::Map::new();
    words.insert("[UNK]".into(), 0.into());
    for (i, w) in vocab.iter().enumerate() {
        words.insert((*w).into(), (i + 1).into());
    }
    let tok = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": words, "unk_token": "[UNK]"}
    });
    write_file(dir, "tokenizer.json", &tok.to_string())
}

/// JSON values as JSONL text, one a line.
pub fn lines(rows: &[serde_json::Value]) -> String {
    rows.iter().map(|r| format!("{r}\n")).collect()
}

/// `input` with the line `bad` inserted as line `at` (1-based).
pub fn with_line_at(input: &str, at: usize, bad: &str) -> String {
    let mut lines: Vec<&str> = input.lines().collect();
    lines.insert(at - 1, bad);
    lines.join("\n") + "\n"
}

/// A row's `hash_ids`.
pub fn ids(row: &serde_json::Value) -> Vec<u64> {
    row["hash_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// A child process killed (and reaped) when dropped, also when a test
/// fails.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// mc-mock on a free port (`--port 0`), killed when dropped (also when a
/// test fails). Its request log (stdout) is left to the caller after the
/// `listening` line, which gave `addr`. The one launcher of mc-mock in the
/// tests (`replay::Mock` reads the log on a thread, `mock::Mock` line by
/// line).
pub struct MockServer {
    pub child: Killed,
    pub log: std::io::BufReader<std::process::ChildStdout>,
    pub addr: String,
    /// The `listening` line as mc-mock wrote it.
    pub listening: String,
}

impl MockServer {
    pub fn start(args: &[&str]) -> MockServer {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("mc-mock"))
            .args(["--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut log = std::io::BufReader::new(child.stdout.take().unwrap());
        let child = Killed(child);
        let mut first = String::new();
        log.read_line(&mut first).unwrap();
        let listening: serde_json::Value = serde_json::from_str(&first)
            .unwrap_or_else(|e| panic!("mc-mock's first line {first:?}: {e}"));
        assert_eq!(listening["event"], "listening", "{first}");
        let addr = listening["addr"].as_str().unwrap().to_string();
        MockServer {
            child,
            log,
            addr,
            listening: first,
        }
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Reads one request off a raw test server's connection: its header lines
/// (as sent, trimmed; the request line first) and its body; `None` when the
/// client closed the connection first.
pub fn read_request(
    reader: &mut std::io::BufReader<std::net::TcpStream>,
) -> Option<(Vec<String>, Vec<u8>)> {
    use std::io::{BufRead, Read};
    let (mut headers, mut len, mut line) = (Vec::new(), 0usize, String::new());
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        headers.push(l.to_string());
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some((headers, body))
}
