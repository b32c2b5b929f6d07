use mctrace::cli;
use mctrace::transform::scale::{self, ScaleArgs, TOOL};

fn main() -> std::process::ExitCode {
    let args: ScaleArgs = cli::parse_args(TOOL);
    cli::exit(TOOL, scale::run(&args))
}
