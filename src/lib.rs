//! mctrace: small, fast Unix-pipe filters for Mooncake-format LLM serving
//! traces. The record format and the pipe conventions are in docs/ARCHITECTURE.md; the
//! binaries in `src/bin` only wire arguments to the functions here.

/// The crate's `eprintln!`: the line formatted first and written to stderr
/// in one call, a failed write dropped (`say`). Defined before every module
/// so it is the one they all see, ahead of std's.
macro_rules! eprintln {
    () => {
        $crate::say::line("")
    };
    ($($arg:tt)*) => {
        $crate::say::line(&::std::format!($($arg)*))
    };
}

/// The crate's `eprint!`, as [`eprintln!`] without the newline.
macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::say::text(&::std::format!($($arg)*))
    };
}

pub mod analyze;
pub mod blocks;
pub mod chunks;
pub mod cli;
pub mod csv;
pub mod delays;
pub mod engine;
pub mod error;
pub mod filter;
pub mod finding;
pub mod fit;
pub mod gen;
pub mod graph;
pub mod hash;
#[cfg(test)]
pub(crate) mod idmap;
pub mod import;
pub mod jsonl;
pub mod limits;
pub mod merge;
pub mod mock;
pub mod nat;
pub mod options;
pub mod oslimit;
pub mod plot;
pub mod prefetch;
pub mod progress;
pub mod prom;
pub mod record;
pub mod replay;
pub mod report;
pub mod results;
pub mod rxtime;
pub mod say;
pub mod spill;
pub mod stats;
pub mod tokenizer;
pub mod transform;
