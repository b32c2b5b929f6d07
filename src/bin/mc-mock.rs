use mctrace::cli;
use mctrace::mock::{self, MockOptions};

const TOOL: &str = "mc-mock";

fn main() -> std::process::ExitCode {
    let opts: MockOptions = cli::parse_args(TOOL);
    cli::exit(TOOL, mock::run(opts))
}
