use mctrace::cli;
use mctrace::import::{self, ImportArgs, TOOL};

fn main() -> std::process::ExitCode {
    let args: ImportArgs = cli::parse_args(TOOL);
    cli::exit(TOOL, import::run(&args))
}
