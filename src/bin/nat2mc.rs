use mctrace::cli;
use mctrace::nat::{self, NatArgs, TOOL};

fn main() -> std::process::ExitCode {
    let args: NatArgs = cli::parse_args(TOOL);
    cli::exit(TOOL, nat::run(&args))
}
