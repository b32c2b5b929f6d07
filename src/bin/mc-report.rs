use mctrace::cli;
use mctrace::report::{self, ReportArgs, TOOL};

fn main() -> std::process::ExitCode {
    let args: ReportArgs = cli::parse_args(TOOL);
    cli::exit(TOOL, report::run(&args))
}
