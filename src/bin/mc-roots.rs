use mctrace::cli;
use mctrace::transform::roots::{self, RootsOptions};

const TOOL: &str = "mc-roots";

fn main() -> std::process::ExitCode {
    let opts: RootsOptions = cli::parse_args(TOOL);
    cli::exit(TOOL, roots::run(TOOL, &opts))
}
