//! mc-replay's own failures, typed; printed with their whole cause chain
//! (`{:#}`), so "connection refused" is never hidden behind a summary.

use crate::error::Error;

type Source = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("cannot list models at {url} (pass --model NAME)")]
    ListModels {
        url: String,
        #[source]
        source: ModelsError,
    },
    /// The server is not there: checked once before the first request.
    #[error(
        "nothing answers at {addr} ({cause}); is the server up? nothing was sent \
         (the check is one connection before the first request)"
    )]
    ServerDown { addr: String, cause: String },
    #[error("cannot use the tokenizer `{spec}`")]
    Tokenizer {
        spec: String,
        #[source]
        source: Source,
    },
    #[error("the tokenizer failed on line {line}")]
    Tokenize {
        line: u64,
        #[source]
        source: Source,
    },
    #[error(
        "prompts built for this tokenizer are off by up to {pct:.2}% (line {line}); \
         it cannot be used for exact prompt lengths"
    )]
    TokenizerMismatch { pct: f64, line: u64 },
    #[error("every request failed ({sent} sent)")]
    AllFailed { sent: u64 },
    #[error(
        "stopped early: {failures} requests in a row could not reach the server \
         (last: {last}); {sent} requests sent, all written \
         (--max-consecutive-failures 0 never stops)"
    )]
    ServerGone {
        failures: u64,
        sent: u64,
        last: String,
    },
    /// `--reset-prefix-cache` and the server would not.
    #[error(
        "the server did not reset its prefix cache (POST {url}: {cause}); vLLM serves \
         this only when started with VLLM_SERVER_DEV_MODE=1 (or drop --reset-prefix-cache); \
         nothing was sent"
    )]
    ResetPrefixCache { url: String, cause: String },
    #[error("cannot start the HTTP client")]
    Client(#[source] Source),
    #[error("cannot install the signal handler")]
    Signals(#[source] ctrlc::Error),
}

#[derive(Debug, thiserror::Error)]
pub enum ModelsError {
    #[error(transparent)]
    Http(#[from] ureq::Error),
    #[error(transparent)]
    Redirect(#[from] crate::replay::http::redirect::FollowError),
    #[error("{0}")]
    Status(String),
    #[error("the answer is not JSON")]
    Json(#[from] serde_json::Error),
    #[error("the answer lists no model")]
    NoModel,
}

impl From<ReplayError> for Error {
    fn from(e: ReplayError) -> Error {
        match e {
            ReplayError::ServerGone { .. }
            | ReplayError::ServerDown { .. }
            | ReplayError::ResetPrefixCache { .. } => Error::Unavailable(anyhow::Error::new(e)),
            e => Error::Other(anyhow::Error::new(e)),
        }
    }
}
