use clap::Parser;
use mctrace::cli;
use mctrace::mock::{self, faults::Faults, latency::Latency, MockOptions};

const TOOL: &str = "mc-mock";

/// A vLLM-like OpenAI-compatible test server with made-up answers.
///
/// Serves POST /v1/chat/completions and /v1/completions (streaming or not,
/// in vLLM's exact format), GET /v1/models and GET /health. Answers are
/// tokens " the", " of", " and", ... timed on absolute deadlines from the
/// request's arrival: token i is due at TTFT + i*ITL, with TTFT =
/// --ttft-ms + --ttft-per-1k-tokens-ms * prompt_tokens / 1000; a non-streaming
/// answer is sent when its last token is due. There is no tokenizer: prompt
/// tokens are whitespace-separated words of every message's content (text
/// parts of list contents too) or of the completions prompt (a prompt of
/// token ids counts its ids).
///
/// Answer length: with `ignore_eos: true`, exactly max_tokens (chat:
/// max_completion_tokens wins; 16 when neither is given), finish_reason
/// "length"; otherwise --eos-after kept within min_tokens..=max_tokens,
/// finish_reason "stop" when that is below max_tokens. A max_tokens above
/// 1048576 (the max_model_len in /v1/models), a min_tokens above max_tokens,
/// or a body that is not JSON gets a 400.
///
/// Writes JSON lines on stdout, each flushed: first
/// {"event":"listening","addr":"HOST:PORT"}, then one line per request as it
/// arrives: {"event":"request","seq","unix_us","t_us","method","path",
/// "x_trace_line","x_request_id","x_session_id","prompt_tokens","max_tokens"}
/// (headers X-Trace-Line, X-Request-Id, X-Session-Id; null when absent).
/// Send stdout to a file or /dev/null when nothing reads it: a full pipe
/// would hold up the requests being logged.
///
/// Faults apply to completion requests only. --fail-rate picks which
/// requests get the faults (--status, --hang, --drop-after, --error-after,
/// --malformed-after); --no-usage applies to every request. Runs until killed.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-mock --port 8000 --ttft-ms 200 --ttft-per-1k-tokens-ms 50 --itl-ms 20
  mc-mock --port 0 --status 429 --retry-after 2 --fail-rate 0.1 --seed 3
  mc-mock --itl-ms 20 | jq -c 'select(.event == \"request\") | {seq, t_us, x_trace_line}'
  curl -N localhost:8000/v1/chat/completions -H 'content-type: application/json' \\
    -d '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true,\"max_tokens\":4}'"
)]
struct Args {
    /// Simulate an infinite prefix cache: usage reports as
    /// `prompt_tokens_details.cached_tokens` the prompt's leading blocks of
    /// --cache-block-size words that earlier requests already sent.
    #[arg(long)]
    prefix_cache: bool,

    /// Words per block of the simulated prefix cache.
    #[arg(long, default_value_t = 16, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    cache_block_size: u64,

    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1", value_name = "H")]
    host: String,

    /// Port to listen on; 0 picks a free one (see the first stdout line).
    #[arg(long, default_value_t = 8000, value_name = "P")]
    port: u16,

    /// Model name served (in /v1/models and in every response).
    #[arg(long, default_value = "mock-model", value_name = "NAME")]
    model: String,

    /// Seeds the --fail-rate choice, which depends only on the seed and the
    /// request's sequence number (the log's `seq`, which counts every request).
    #[arg(long, default_value_t = 0, value_name = "N")]
    seed: u64,

    /// Time to first token, fixed part, in ms.
    #[arg(long, default_value_t = 0.0, value_name = "X")]
    ttft_ms: f64,

    /// Time to first token added per 1000 prompt tokens, in ms.
    #[arg(long, default_value_t = 0.0, value_name = "Y")]
    ttft_per_1k_tokens_ms: f64,

    /// Time between tokens, in ms.
    #[arg(long, default_value_t = 0.0, value_name = "Z")]
    itl_ms: f64,

    /// Answer length when the request does not set ignore_eos.
    #[arg(long, default_value_t = 64, value_name = "N")]
    eos_after: u64,

    /// Answer with this HTTP status (400-599) and a vLLM error body instead
    /// of a completion.
    #[arg(long, value_name = "CODE")]
    status: Option<u16>,

    /// Seconds sent in Retry-After with --status 429.
    #[arg(long, default_value_t = 1, value_name = "S")]
    retry_after: u64,

    /// Fraction (0 to 1) of requests that get the faults [default: 1].
    #[arg(long, value_name = "F")]
    fail_rate: Option<f64>,

    /// Cut the connection after the role chunk and N content tokens: no
    /// end of the chunked body, no `[DONE]`. A non-streaming request (with N
    /// at most its length) gets no answer, the connection closed when token
    /// N would be due.
    #[arg(long, value_name = "N")]
    drop_after: Option<u64>,

    /// Streams: after N content tokens send an error event, then `[DONE]`.
    #[arg(long, value_name = "N")]
    error_after: Option<u64>,

    /// Streams: after N content tokens send an event that is not JSON, then
    /// go on normally.
    #[arg(long, value_name = "N")]
    malformed_after: Option<u64>,

    /// Read the request and never answer (until the client goes away).
    #[arg(long)]
    hang: bool,

    /// Never send usage (no usage chunk, no usage in whole responses), as
    /// some servers do.
    #[arg(long)]
    no_usage: bool,
}

fn main() -> std::process::ExitCode {
    let args: Args = cli::parse_args(TOOL);
    let opts = MockOptions {
        host: args.host,
        port: args.port,
        model: args.model,
        latency: Latency {
            ttft_ms: args.ttft_ms,
            ttft_per_1k_tokens_ms: args.ttft_per_1k_tokens_ms,
            itl_ms: args.itl_ms,
        },
        eos_after: args.eos_after,
        cache_block: if args.prefix_cache {
            args.cache_block_size
        } else {
            0
        },
        faults: Faults {
            status: args.status,
            retry_after: args.retry_after,
            fail_rate: args.fail_rate,
            seed: args.seed,
            drop_after: args.drop_after,
            error_after: args.error_after,
            malformed_after: args.malformed_after,
            hang: args.hang,
            no_usage: args.no_usage,
        },
    };
    cli::exit(TOOL, mock::run(opts))
}
