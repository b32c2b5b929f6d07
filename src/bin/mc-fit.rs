use mctrace::cli;
use mctrace::fit::{self, FitArgs, TOOL};

fn main() -> std::process::ExitCode {
    let args: FitArgs = cli::parse_args(TOOL);
    cli::exit(TOOL, fit::run(&args))
}
