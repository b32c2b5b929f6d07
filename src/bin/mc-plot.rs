use clap::Parser;
use mctrace::cli;
use mctrace::filter::IoArgs;
use mctrace::plot::trace::{self, PlotArgs};

const TOOL: &str = "mc-plot";

/// Draw the figure of a workload: requests/s, input and output tokens/s and
/// their per-request means per window, the prefix-cache hit rate per window
/// (mc-analyze's causal model), ISL/OSL histograms and a session timeline.
///
/// Reads a Mooncake trace on stdin (or --input) and writes one SVG document
/// to stdout (or --svg FILE). Memory grows with the number of rows.
///
/// With --sweep DIR, draws an mc-replay sweep instead (mc-replay --rate
/// 1,2,4 --out-dir DIR): TTFT p50/p99 against output throughput, and output
/// throughput against the swept value.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-plot < conversation_trace.jsonl > trace.svg
  mc-plot --window-ms 60000 --block-size 512 --svg trace.svg --input trace.jsonl
  mc-replay --rate 1,2,4,8 --out-dir sweep -i trace.jsonl && mc-plot --sweep sweep --svg curve.svg"
)]
struct Args {
    #[command(flatten)]
    plot: PlotArgs,

    #[command(flatten)]
    io: IoArgs,
}

fn main() -> std::process::ExitCode {
    let args: Args = cli::parse_args(TOOL);
    cli::exit(TOOL, trace::run(&args.io, &args.plot))
}
