use mctrace::cli;
use mctrace::transform::cap::{self, CapOptions};

const TOOL: &str = "mc-cap";

fn main() -> std::process::ExitCode {
    let opts: CapOptions = cli::parse_args(TOOL);
    cli::exit(TOOL, cap::run(TOOL, &opts))
}
