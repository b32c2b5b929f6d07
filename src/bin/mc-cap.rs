use clap::Parser;
use mctrace::cli::{self, IoArgs};
use mctrace::transform::cap::{self, CapOptions, DEFAULT_FRESH_ID_BASE};

const TOOL: &str = "mc-cap";

/// Cap prompt and answer lengths in a Mooncake trace.
///
/// Rows with input_length above --max-isl are truncated to that many tokens,
/// keeping the hash ids of the blocks that still hold tokens, so every row
/// stays consistent; a block the cap cuts short gets a fresh id (the same for
/// every row cut at the same place). With --drop such rows are removed
/// instead (AIPerf profile's rule) and the count is printed on stderr.
/// output_length above --max-osl becomes --max-osl. Streams; rows that need
/// no change are copied byte for byte, and with no caps the output equals
/// the input.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-cap --max-isl 8192 --max-osl 1024 < trace.jsonl > capped.jsonl
  mc-scale --speedup 2 < trace.jsonl | mc-cap --max-isl 32768 --drop | mc-analyze"
)]
struct Args {
    /// Longest prompt, in tokens (also accepted under AIPerf's and vLLM's
    /// names: --synthesis-max-isl, --max-input-length).
    #[arg(long, value_name = "N", aliases = ["synthesis-max-isl", "max-input-length"])]
    max_isl: Option<u64>,

    /// Drop rows longer than --max-isl instead of truncating them.
    #[arg(long)]
    drop: bool,

    /// Longest answer, in tokens (also accepted as --synthesis-max-osl,
    /// --max-output-length).
    #[arg(long, value_name = "M", aliases = ["synthesis-max-osl", "max-output-length"])]
    max_osl: Option<u64>,

    /// Tokens per hash id.
    #[arg(long, default_value_t = 512, value_name = "B")]
    block_size: u64,

    /// First id given to a block the cap cuts short. Input ids must be below it.
    #[arg(long, default_value_t = DEFAULT_FRESH_ID_BASE, value_name = "ID")]
    fresh_id_base: u64,

    #[command(flatten)]
    io: IoArgs,
}

fn main() -> std::process::ExitCode {
    let args: Args = cli::parse_args(TOOL);
    let opts = CapOptions {
        max_isl: args.max_isl,
        drop: args.drop,
        max_osl: args.max_osl,
        block_size: args.block_size,
        fresh_id_base: args.fresh_id_base,
    };
    cli::exit(TOOL, cap::run(TOOL, &args.io, &opts))
}
