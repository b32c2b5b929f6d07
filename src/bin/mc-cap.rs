use mctrace::cli;
use mctrace::transform::cap::{self, CapArgs, TOOL};

fn main() -> std::process::ExitCode {
    let args: CapArgs = cli::parse_args(TOOL);
    cli::exit(TOOL, cap::run(&args))
}
