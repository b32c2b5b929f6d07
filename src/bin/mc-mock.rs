use mctrace::cli;
use mctrace::mock::{self, MockArgs, TOOL};

fn main() -> std::process::ExitCode {
    let args: MockArgs = cli::parse_args(TOOL);
    cli::exit(TOOL, mock::run(&args))
}
