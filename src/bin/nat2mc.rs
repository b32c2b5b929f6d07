use mctrace::cli;
use mctrace::nat::{self, NatOptions};

const TOOL: &str = "nat2mc";

fn main() -> std::process::ExitCode {
    let opts: NatOptions = cli::parse_args(TOOL);
    cli::exit(TOOL, nat::run(opts))
}
