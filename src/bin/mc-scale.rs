use mctrace::cli;
use mctrace::transform::scale::{self, ScaleOptions};

const TOOL: &str = "mc-scale";

fn main() -> std::process::ExitCode {
    let opts: ScaleOptions = cli::parse_args(TOOL);
    cli::exit(TOOL, scale::run(TOOL, &opts))
}
