use mctrace::cli;
use mctrace::gen::{self, GenArgs, TOOL};

fn main() -> std::process::ExitCode {
    let args: GenArgs = cli::parse_args(TOOL);
    cli::exit(TOOL, gen::run(&args))
}
