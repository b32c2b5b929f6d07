use mctrace::analyze::{self, AnalyzeOptions};
use mctrace::cli;

const TOOL: &str = "mc-analyze";

fn main() -> std::process::ExitCode {
    let opts: AnalyzeOptions = cli::parse_args(TOOL);
    cli::exit(TOOL, analyze::run(TOOL, &opts))
}
