//! mctrace: small, fast Unix-pipe filters for Mooncake-format LLM serving
//! traces. The record format and the pipe conventions are in DESIGN.md; the
//! binaries in `src/bin` only wire arguments to the functions here.

pub mod analyze;
pub mod blocks;
pub mod cli;
pub mod error;
pub mod hash;
pub mod import;
pub mod jsonl;
pub mod mock;
pub mod nat;
pub mod record;
pub mod replay;
pub mod stats;
pub mod tokenizer;
pub mod transform;
