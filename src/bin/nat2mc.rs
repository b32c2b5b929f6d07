use std::path::PathBuf;

use clap::Parser;
use mctrace::cli;
use mctrace::nat::{self, InputLength, NatOptions, Timing};

const TOOL: &str = "nat2mc";

/// Convert a NeMo Agent Toolkit profiler trace (all_requests_profiler_traces.json)
/// into a Mooncake trace: one row per LLM call, one session per request.
///
/// Reads the JSON array from stdin or --input-file, one request at a time
/// (memory bounded by the largest request), tokenizes each call's prompt (in
/// parallel) and names its blocks of --block-size tokens by their token
/// prefix, so calls that repeat a prefix repeat its hash_ids, across sessions
/// too. Writes JSONL to --output-file, else beside --input-file as
/// `<stem>_mooncake.jsonl`, else to stdout; a one-line summary goes to stderr.
/// Timestamps and delays are whole milliseconds. A file cut off mid-write
/// yields every complete request and exit code 0.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Examples:
  nat2mc --tokenizer tokenizer.json < all_requests_profiler_traces.json > agent.jsonl
  nat2mc --input-file traces.json --tokenizer meta-llama/Llama-3.3-70B-Instruct   # writes traces_mooncake.jsonl
  nat2mc --tokenizer tok/ < traces.json | mc-scale --speedup 2 | mc-analyze --block-size 128"
)]
struct Args {
    /// The profiler trace (default: stdin).
    #[arg(long, visible_alias = "input", short = 'i', value_name = "FILE")]
    input_file: Option<PathBuf>,

    /// Where to write the rows.
    #[arg(long, visible_alias = "output", short = 'o', value_name = "FILE")]
    output_file: Option<PathBuf>,

    /// A tokenizer.json, a folder holding one, or a HuggingFace model id
    /// (looked up in $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub,
    /// downloaded from $HF_ENDPOINT only if not cached). Default: inferred
    /// from the model name in the trace.
    #[arg(long, value_name = "X")]
    tokenizer: Option<String>,

    /// Tokens per hash id.
    #[arg(long, default_value_t = 128, value_name = "B")]
    block_size: usize,

    /// Timing of the rows: `auto` gives each session's first row a
    /// timestamp (ms since the earliest LLM_START) and later rows the
    /// measured delay (own LLM_START minus the previous call's LLM_END).
    #[arg(long, value_enum, default_value_t = Timing::Auto)]
    timing: Timing,

    /// A constant delay (ms) for later rows instead of the measured one.
    #[arg(long, value_name = "MS")]
    delay: Option<f64>,

    /// input_length from the hashed text's tokens, or the server's prompt_tokens.
    #[arg(long, value_enum, default_value_t = InputLength::Tokens)]
    input_length: InputLength,

    /// Also write each call's chat messages as OpenAI `messages`. Note that
    /// AIPerf 0.13.0 refuses rows holding both `messages` and `input_length`;
    /// for AIPerf keep one: `jq -c 'del(.input_length, .hash_ids)'`.
    #[arg(long)]
    messages: bool,

    /// Convert at most N requests (after --skip-requests).
    #[arg(long, value_name = "N")]
    num_requests: Option<usize>,

    /// Skip the first N requests of the file.
    #[arg(long, default_value_t = 0, value_name = "N")]
    skip_requests: usize,
}

fn main() -> std::process::ExitCode {
    let args: Args = cli::parse_args(TOOL);
    let opts = NatOptions {
        input: args.input_file,
        output: args.output_file,
        tokenizer: args.tokenizer,
        block_size: args.block_size,
        timing: args.timing,
        delay: args.delay,
        input_length: args.input_length,
        messages: args.messages,
        num_requests: args.num_requests,
        skip_requests: args.skip_requests,
    };
    cli::exit(TOOL, nat::run(opts))
}
