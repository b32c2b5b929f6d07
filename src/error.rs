//! The error type shared by every tool, and the exit codes scripts rely on.

use std::io;
use std::path::PathBuf;

/// Exit codes, following `sysexits.h` where one fits (ARCHITECTURE.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    Success = 0,
    Failure = 1,
    Usage = 2,
    DataErr = 65,
    NoInput = 66,
    CantCreate = 73,
    IoErr = 74,
    /// A service the tool needs is gone (mc-replay: the server stopped
    /// answering), as sysexits' EX_UNAVAILABLE.
    Unavailable = 69,
    /// Too late to take part, try again (mc-replay: a shard that could not
    /// start within `--start-grace-ms` of `--start-at`), as EX_TEMPFAIL.
    TempFail = 75,
}

/// What went wrong with one record, before the line number is known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RecordError(pub String);

impl RecordError {
    pub fn new(msg: impl Into<String>) -> Self {
        RecordError(msg.into())
    }

    /// An error about one field, so the message always names it.
    pub fn field(name: &str, msg: impl std::fmt::Display) -> Self {
        RecordError(format!("field `{name}`: {msg}"))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad record: `line N: what is wrong`.
    #[error("line {line}: {err}")]
    Data { line: u64, err: RecordError },
    /// Bad input that is not tied to one line (e.g. a truncated document).
    #[error("{0}")]
    Input(String),
    #[error("{}: {source}", path.display())]
    NoInput { path: PathBuf, source: io::Error },
    #[error("{}: {source}", path.display())]
    Output { path: PathBuf, source: io::Error },
    /// An output file a tool would create implicitly already exists.
    #[error("{} already exists; pass --force to overwrite it, or choose another path with --output-file (`-` for stdout)", path.display())]
    Exists { path: PathBuf },
    #[error("{0}")]
    Usage(String),
    /// An output the tool cannot create, or would overwrite (exit code 73).
    #[error("{0}")]
    CantCreate(String),
    #[error(transparent)]
    Io(#[from] io::Error),
    /// A service the tool needs stopped answering (exit code 69).
    #[error(transparent)]
    Unavailable(anyhow::Error),
    /// Too late to take part (exit code 75): a shard that missed its start.
    #[error("{0}")]
    TempFail(String),
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl Error {
    /// An option value clap cannot check on its own (exit code 2).
    pub fn usage(msg: impl Into<String>) -> Error {
        Error::Usage(msg.into())
    }

    pub fn exit_code(&self) -> ExitCode {
        match self {
            Error::Data { .. } | Error::Input(_) => ExitCode::DataErr,
            Error::NoInput { .. } => ExitCode::NoInput,
            Error::Output { .. } | Error::Io(_) => ExitCode::IoErr,
            Error::Usage(_) => ExitCode::Usage,
            Error::Exists { .. } | Error::CantCreate(_) => ExitCode::CantCreate,
            Error::Unavailable(_) => ExitCode::Unavailable,
            Error::TempFail(_) => ExitCode::TempFail,
            Error::Tokenizer(_) | Error::Other(_) => ExitCode::Failure,
        }
    }

    /// True when the error is (or wraps) a closed pipe: the reader went away,
    /// which for a filter is a normal end, not a failure.
    pub fn is_broken_pipe(&self) -> bool {
        match self {
            Error::Io(e) | Error::Output { source: e, .. } => e.kind() == io::ErrorKind::BrokenPipe,
            Error::Other(e) => e.chain().any(|c| {
                c.downcast_ref::<io::Error>()
                    .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
            }),
            _ => false,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
