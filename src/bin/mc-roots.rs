use mctrace::cli;
use mctrace::transform::roots::{self, RootsArgs, TOOL};

fn main() -> std::process::ExitCode {
    let args: RootsArgs = cli::parse_args(TOOL);
    cli::exit(TOOL, roots::run(&args))
}
