use clap::Parser;
use mctrace::cli::{self, IoArgs};
use mctrace::transform::roots::{self, RootsOptions};

const TOOL: &str = "mc-roots";

/// Multiply the prefix roots of a trace: spread sessions over K disjoint
/// prefix trees (AIPerf's prefix-root multiplier, keeping sessions whole).
///
/// Each session (rows with the same session_id; a row without one is its own
/// unit) is assigned one of K trees by a seeded hash of its id, and each of
/// its hash ids h becomes h*K + t. Rows in different trees share no block;
/// rows in the same tree keep their sharing. Streams in constant memory;
/// --roots 1 is the identity.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-roots --roots 4 < trace.jsonl > wide.jsonl
  mc-scale --speedup 2 < trace.jsonl | mc-roots --roots 8 --seed 7 | mc-analyze"
)]
struct Args {
    /// Number of disjoint prefix trees.
    #[arg(long, default_value_t = 1, value_name = "K")]
    roots: u64,

    /// Seed of the session-to-tree assignment.
    #[arg(long, default_value_t = 0)]
    seed: u64,

    #[command(flatten)]
    io: IoArgs,
}

fn main() -> std::process::ExitCode {
    let args: Args = cli::parse_args(TOOL);
    let opts = RootsOptions {
        roots: args.roots,
        seed: args.seed,
    };
    cli::exit(TOOL, roots::run(TOOL, &args.io, &opts))
}
