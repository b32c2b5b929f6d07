use mctrace::analyze::{self, AnalyzeArgs, TOOL};
use mctrace::cli;

fn main() -> std::process::ExitCode {
    let args: AnalyzeArgs = cli::parse_args(TOOL);
    cli::exit(TOOL, analyze::run(&args))
}
