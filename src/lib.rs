//! mctrace: small, fast Unix-pipe filters for Mooncake-format LLM serving
//! traces. The record format and the pipe conventions are in docs/ARCHITECTURE.md; the
//! binaries in `src/bin` only wire arguments to the functions here.

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
pub mod idmap;
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
pub mod spill;
pub mod stats;
pub mod tokenizer;
pub mod transform;
