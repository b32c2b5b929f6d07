use mctrace::cli;
use mctrace::replay::{self, ReplayArgs};

const TOOL: &str = "mc-replay";

fn main() -> std::process::ExitCode {
    let args: ReplayArgs = cli::parse_args(TOOL);
    cli::exit(TOOL, replay::run(args))
}
