use mctrace::cli;
use mctrace::merge::{self, MergeArgs, TOOL};

fn main() -> std::process::ExitCode {
    let args: MergeArgs = cli::parse_args(TOOL);
    cli::exit(TOOL, merge::run(&args))
}
