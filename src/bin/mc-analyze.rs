use std::path::PathBuf;

use clap::Parser;
use mctrace::analyze::cache::Order;
use mctrace::analyze::{self, AnalyzeOptions, BlockSize};
use mctrace::cli::{self, IoArgs};

const TOOL: &str = "mc-analyze";

/// Report what is in a Mooncake trace: AIPerf's `analyze-trace` statistics
/// (exactly), the block size check, a causal prefix-cache model, arrival
/// timing, sessions and lint.
///
/// Reads JSONL records on stdin (or --input) and writes a readable report on
/// stdout (or --output); --json writes it as one JSON object on one line.
/// With --pass the records go to stdout unchanged and the report to stderr,
/// so mc-analyze can sit in the middle of a pipeline. Memory grows with the
/// number of rows and distinct ids (a fraction of the input size), not with
/// the number of prefixes.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-analyze < conversation_trace.jsonl
  mc-analyze --json < trace.jsonl | jq .aiperf.cache_hit_rate
  mc-analyze --block-size auto --cache-blocks 1000,10000,100000 < trace.jsonl
  mc-scale --speedup 2 < trace.jsonl | mc-analyze --pass --output-file stats.json | mc-replay ..."
)]
struct Args {
    /// Tokens per hash id, or `auto` for the power of two the data points to.
    #[arg(long, default_value = "512", value_name = "B|auto")]
    block_size: BlockSize,

    /// Also model an LRU prefix cache of this many blocks (comma-separated
    /// for several sizes).
    #[arg(long, value_delimiter = ',', value_name = "C")]
    cache_blocks: Vec<u64>,

    /// Order in which the cache model replays the rows.
    #[arg(long, value_enum, default_value_t = Order::File)]
    order: Order,

    /// Write the whole report as one JSON object on one line.
    #[arg(long)]
    json: bool,

    /// Also write AIPerf's `analyze-trace` JSON (same keys, same order) to FILE.
    #[arg(long, value_name = "FILE")]
    output_file: Option<PathBuf>,

    /// Tee mode: copy the records to stdout (or --output) byte for byte and
    /// write the report to stderr.
    #[arg(long)]
    pass: bool,

    #[command(flatten)]
    io: IoArgs,
}

fn main() -> std::process::ExitCode {
    let args: Args = cli::parse_args(TOOL);
    let opts = AnalyzeOptions {
        block_size: args.block_size,
        cache_blocks: args.cache_blocks,
        order: args.order,
        json: args.json,
        output_file: args.output_file,
        pass: args.pass,
    };
    cli::exit(TOOL, analyze::run(TOOL, &args.io, &opts))
}
