//! What every tool shares on the command line: input/output options, the
//! error policy, the record loop, and turning a result into an exit code.

use std::io::Write;
use std::path::PathBuf;

use crate::error::{Error, ExitCode, RecordError, Result};
use crate::jsonl::{self, ErrorPolicy, LineReader, OnError, Output};
use crate::record::Record;

/// Input, output and error-policy options common to all filters.
#[derive(Debug, Clone, clap::Args)]
pub struct IoArgs {
    /// Read records from FILE instead of stdin (`-` is stdin).
    #[arg(short, long, value_name = "FILE")]
    pub input: Option<PathBuf>,

    /// Write records to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// What to do with a line that is not a valid record: stop with exit
    /// code 65, or skip it and report the count at the end.
    #[arg(long, value_enum, default_value_t = OnError::Fail, value_name = "POLICY")]
    pub on_error: OnError,

    /// Longest accepted line; a longer one is a bad line.
    #[arg(long, default_value_t = jsonl::DEFAULT_MAX_LINE_BYTES, value_name = "BYTES")]
    pub max_line_bytes: usize,

    /// Flush after every record (for `tail -f` pipelines).
    #[arg(long)]
    pub line_buffered: bool,
}

impl IoArgs {
    pub fn reader(&self) -> Result<LineReader<Box<dyn std::io::Read>>> {
        Ok(LineReader::new(
            jsonl::open_input(self.input.as_deref())?,
            self.max_line_bytes,
        ))
    }

    pub fn writer(&self) -> Result<Output> {
        Output::open(self.output.as_deref(), self.line_buffered)
    }
}

/// What a per-record step decided.
pub enum Emit {
    /// Write the record exactly as read.
    Unchanged,
    /// The step wrote the record (and its `\n`) into the output buffer.
    Written,
    /// Leave the record out.
    Dropped,
}

/// Runs a streaming filter: each line is parsed into a [`Record`] and handed
/// to `step`, which may write a changed record into the output buffer.
/// Bad lines follow the `--on-error` policy; the summary of skipped lines is
/// printed to stderr under the tool's name.
pub fn run_filter<F>(tool: &str, io: &IoArgs, mut step: F) -> Result<()>
where
    F: FnMut(&Record<'_>, &mut Vec<u8>) -> std::result::Result<Emit, RecordError>,
{
    let mut reader = io.reader()?;
    let mut out = io.writer()?;
    let mut policy = ErrorPolicy::new(io.on_error);
    let result = for_each_line(&mut reader, &mut policy, |no, bytes, policy| {
        write_record(&mut out, policy, no, bytes, &mut step)
    });
    // Good records already produced are flushed even when a bad one stops us.
    let flushed = out.flush();
    report_skipped(tool, &policy);
    result.and(flushed)
}

/// Feeds every line to `f`, applying the policy to lines too long to read.
pub fn for_each_line<R, F>(
    reader: &mut LineReader<R>,
    policy: &mut ErrorPolicy,
    mut f: F,
) -> Result<()>
where
    R: std::io::Read,
    F: FnMut(u64, &[u8], &mut ErrorPolicy) -> Result<()>,
{
    loop {
        match reader.next_line() {
            Ok(Some(line)) => f(line.no, line.bytes, policy)?,
            Ok(None) => return Ok(()),
            Err(e) => policy.handle(e)?,
        }
    }
}

/// Parses line `no`, runs `step` on it and writes what it decided; a bad
/// record goes to the policy (and leaves nothing half-written).
pub fn write_record<F>(
    out: &mut Output,
    policy: &mut ErrorPolicy,
    no: u64,
    bytes: &[u8],
    step: &mut F,
) -> Result<()>
where
    F: FnMut(&Record<'_>, &mut Vec<u8>) -> std::result::Result<Emit, RecordError>,
{
    let outcome = Record::parse(bytes).and_then(|rec| {
        let buf = out.buffer();
        let mark = buf.len();
        step(&rec, buf).inspect_err(|_| buf.truncate(mark))
    });
    match outcome {
        Ok(Emit::Unchanged) => out.write_line(bytes),
        Ok(Emit::Written) => out.end_line(),
        Ok(Emit::Dropped) => Ok(()),
        Err(e) => policy.record(no, e),
    }
}

/// Prints the `--on-error skip` summary, if anything was skipped.
pub fn report_skipped(tool: &str, policy: &ErrorPolicy) {
    if let Some(s) = policy.summary() {
        eprintln!("{tool}: {s}");
    }
}

/// The end of every `main`: prints `TOOL: error` and maps it to an exit code;
/// a closed stdout is a quiet success.
pub fn exit(tool: &str, result: Result<()>) -> std::process::ExitCode {
    std::process::ExitCode::from(exit_code(tool, result) as u8)
}

fn exit_code(tool: &str, result: Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::Success,
        Err(e) if e.is_broken_pipe() => ExitCode::Success,
        Err(e) => {
            let mut stderr = std::io::stderr().lock();
            // `{:#}`: the whole cause chain ("cannot list models …: io:
            // Connection refused"), as ripgrep prints it.
            let _ = writeln!(stderr, "{tool}: {e:#}");
            e.exit_code()
        }
    }
}

// Options every tool has: it writes its own shell completions and
// man page, so they always match its options. (A plain comment: a doc
// comment here would become every tool's `about` when the options are added.)
#[derive(Debug, Clone, clap::Args)]
struct DocArgs {
    /// Print the completion script for SHELL and exit.
    #[arg(long, value_enum, value_name = "SHELL")]
    completions: Option<clap_complete::Shell>,

    /// Print the man page (roff) and exit.
    #[arg(long)]
    man: bool,
}

/// Parses a tool's arguments (exiting on `--help`, `--version` and usage
/// errors, as clap does). `--completions SHELL` and `--man` are added to
/// every tool here: they print and exit 0.
pub fn parse_args<A: clap::Parser>(tool: &'static str) -> A {
    use clap::{Args as _, FromArgMatches as _};
    let cmd = A::command().name(tool).bin_name(tool);
    let matches = DocArgs::augment_args(cmd.clone()).get_matches();
    let doc = DocArgs::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if doc.completions.is_some() || doc.man {
        let mut out = Vec::new();
        let written = match doc.completions {
            Some(shell) => {
                clap_complete::generate(shell, &mut cmd.clone(), tool, &mut out);
                Ok(())
            }
            None => clap_mangen::Man::new(cmd).render(&mut out),
        };
        let result = written
            .and_then(|()| std::io::stdout().lock().write_all(&out))
            .map_err(Error::Io);
        std::process::exit(exit_code(tool, result) as i32);
    }
    A::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Rejects option values clap cannot check on its own.
pub fn usage(msg: impl Into<String>) -> Error {
    Error::Usage(msg.into())
}
