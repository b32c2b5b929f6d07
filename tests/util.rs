//! Helpers shared by the integration tests.

use std::path::PathBuf;

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
    let out = tool(name)
        .args(args)
        .write_stdin(input.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
