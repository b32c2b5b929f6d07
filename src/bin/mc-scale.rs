use clap::Parser;
use mctrace::cli::{self, IoArgs};
use mctrace::transform::scale::{self, ScaleOptions};

const TOOL: &str = "mc-scale";

/// Rescale a Mooncake trace: arrival speed, shared-prefix length, unique-prompt
/// length and answer length (AIPerf's trace synthesis, as a filter).
///
/// Reads JSONL records on stdin (or --input) and writes them on stdout (or
/// --output). Only the changed values are rewritten; everything else in a line
/// is kept byte for byte, and with no options the output equals the input.
///
/// Shared ids are ids that occur at least twice in the whole input; a row's
/// core prefix is its leading run of shared ids, the rest is its unique
/// prompt. --speedup and --output-len-multiplier stream in constant memory.
/// --prefix-len-multiplier and --prompt-len-multiplier need the id counts of
/// the whole trace: the input is read into memory once (about its own size),
/// then written out.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-scale --speedup 2 < trace.jsonl > fast.jsonl
  mc-scale --prefix-len-multiplier 2 --prompt-len-multiplier 0.5 < trace.jsonl | mc-analyze"
)]
struct Args {
    /// Replay R times faster: timestamps become trunc(t / R) (AIPerf's rule),
    /// delays are divided by R (integer delays truncated) unless --keep-delays.
    /// (AIPerf's name, --synthesis-speedup-ratio, is accepted too.)
    #[arg(
        long,
        default_value_t = 1.0,
        value_name = "R",
        alias = "synthesis-speedup-ratio"
    )]
    speedup: f64,

    /// Leave `delay` values unchanged under --speedup.
    #[arg(long)]
    keep_delays: bool,

    /// Scale each row's shared prefix: P > 1 turns each prefix id h into
    /// h*k … h*k+k-1 (k = floor(P)) and adds private blocks for the fraction;
    /// P < 1 keeps the first max(1, floor(n*P)) prefix blocks.
    #[arg(
        long,
        default_value_t = 1.0,
        value_name = "P",
        alias = "synthesis-prefix-len-multiplier"
    )]
    prefix_len_multiplier: f64,

    /// Scale each row's unique prompt to floor(len * Q) tokens, on fresh ids.
    #[arg(
        long,
        default_value_t = 1.0,
        value_name = "Q",
        alias = "synthesis-prompt-len-multiplier"
    )]
    prompt_len_multiplier: f64,

    /// output_length becomes max(1, round_half_even(osl * O)).
    #[arg(long, default_value_t = 1.0, value_name = "O")]
    output_len_multiplier: f64,

    /// Tokens per hash id.
    #[arg(long, default_value_t = 512, value_name = "B")]
    block_size: u64,

    #[command(flatten)]
    io: IoArgs,
}

fn main() -> std::process::ExitCode {
    let args: Args = cli::parse_args(TOOL);
    let opts = ScaleOptions {
        speedup: args.speedup,
        keep_delays: args.keep_delays,
        prefix_mult: args.prefix_len_multiplier,
        prompt_mult: args.prompt_len_multiplier,
        output_mult: args.output_len_multiplier,
        block_size: args.block_size,
    };
    cli::exit(TOOL, scale::run(TOOL, &args.io, &opts))
}
