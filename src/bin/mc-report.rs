use mctrace::cli;
use mctrace::report::{self, ReportArgs};

const TOOL: &str = "mc-report";

fn main() -> std::process::ExitCode {
    let args: ReportArgs = cli::parse_args(TOOL);
    cli::exit(TOOL, report::run(TOOL, &args))
}
