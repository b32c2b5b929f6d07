use mctrace::cli;
use mctrace::gen::{self, Common, Mode};

const TOOL: &str = "mc-gen";

/// Generate a workload: Mooncake rows (or AIBrix's workload format) from a
/// rate, from patterns, from Grafana statistics, with shared prefixes, as
/// multi-turn or agent sessions, or from an existing trace; optionally with
/// real prompts from an AIBrix prompt collection.
///
/// Writes JSONL on stdout (or --output) as it is generated, in constant
/// memory (sessions and agent in --format aibrix are held until the end to
/// sort them by time). Every random choice follows --seed (default 0): the
/// same arguments give the same bytes on every machine. Timestamps are
/// whole ms from 0; requests get fresh hash_ids of --block-size tokens
/// unless a mode shares them. A summary line goes to stderr.
#[derive(Debug, clap::Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-gen constant --qps 2.5 --duration-ms 60000 --isl lognormal:1024:0.6 --osl 128 | mc-analyze
  mc-gen synthetic --traffic-pattern quick_rising --prompt-len-pattern slight_fluctuation --duration-ms 600000 --interval-ms 10000
  mc-gen stat --traffic-file qps.csv --prompt-len-file in.csv --completion-len-file out.csv
  mc-gen prefix --prefix-groups 16 --prefix-tokens 4096 --share-ratio 0.7 --num-requests 10000 | mc-analyze
  mc-gen sessions --sessions 200 --turns uniform:2:8 --system-prompt-tokens 1024 | mc-replay --url http://127.0.0.1:8000
  mc-gen agent --config agent.json --format aibrix > workload.jsonl
  mc-gen from-trace -i azure.jsonl --prompt-file prompts.jsonl --tokenizer meta-llama/Llama-3.1-8B-Instruct
  mc-gen prompts --prefix-groups 8 --turns uniform:2:5 > sessions.jsonl"
)]
struct Args {
    // Optional for clap so `--completions`/`--man` work without a mode;
    // a missing mode is still a usage error below.
    #[command(subcommand)]
    mode: Option<Mode>,

    #[command(flatten)]
    common: Common,
}

fn main() -> std::process::ExitCode {
    let args: Args = cli::parse_args(TOOL);
    let Some(mode) = args.mode else {
        use clap::CommandFactory;
        Args::command()
            .name(TOOL)
            .error(
                clap::error::ErrorKind::MissingSubcommand,
                "a mode is required: constant, synthetic, stat, prefix, sessions, agent, from-trace or prompts",
            )
            .exit();
    };
    cli::exit(TOOL, gen::run(TOOL, &args.common, &mode))
}
