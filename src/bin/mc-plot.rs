use mctrace::cli;
use mctrace::plot::trace::{self, PlotArgs, TOOL};

fn main() -> std::process::ExitCode {
    let args: PlotArgs = cli::parse_args(TOOL);
    cli::exit(TOOL, trace::run(&args))
}
