//! `nat2mc`: NeMo Agent Toolkit profiler traces to Mooncake rows, one row
//! per LLM call, a session per request, block ids shared wherever prompts
//! share a token prefix, and the agent's own pacing.

pub mod calls;
pub mod edges;
pub mod hasher;
pub mod reader;

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::jsonl::{self, Output};
use crate::progress::Progress;
use crate::record::{Number, RowWriter};
use crate::tokenizer::{self, Resolved};
use calls::{Call, SkipReason};
use hasher::BlockHasher;
use reader::End;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TimingMode {
    /// A call that waits for no other (the first of a session, and any
    /// call that started before another had ended): `timestamp` (ms since
    /// the earliest LLM_START of the file); a call that waits: `delay` +
    /// `tool_wait_ms` = own LLM_START minus the latest LLM_END it waits for
    /// (with --linear: minus the previous call's LLM_END, all in `delay`).
    Auto,
    /// No `timestamp` and no `delay`.
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum InputLength {
    /// Tokens of the hashed text: every row consistent for the block size.
    Tokens,
    /// The server's `prompt_tokens` (rows may then be inconsistent).
    Usage,
}

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
///
/// Rows are an agent graph (docs/guide/agents.md): each call has a
/// `request_id`; a call waits for the calls of its request that had ended
/// before it started, reduced to the latest ones (`wait_for`); calls that
/// overlap in time are `branches` of the call they both wait for; the gap
/// after the latest dependency is `tool_wait_ms` (the TOOL_START/TOOL_END
/// spans inside it) plus `delay` (the rest). --linear writes the chain
/// instead, for tools that cannot read graphs.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    version,
    after_help = "Examples:
  nat2mc --tokenizer tokenizer.json < all_requests_profiler_traces.json > agent.jsonl
  nat2mc --input-file traces.json --tokenizer meta-llama/Llama-3.3-70B-Instruct   # writes traces_mooncake.jsonl
  nat2mc --tokenizer tok/ < traces.json | mc-scale --speedup 2 | mc-analyze --block-size 128"
)]
pub struct NatArgs {
    /// The profiler trace (default: stdin).
    #[arg(
        long = "input-file",
        visible_alias = "input",
        short = 'i',
        value_name = "FILE"
    )]
    pub input: Option<PathBuf>,

    /// Where to write the rows (`-` for stdout). Without it, rows go beside
    /// --input-file as `<stem>_mooncake.jsonl` (as the upstream converter
    /// does; unlike every other mctrace tool, which writes to stdout), or to
    /// stdout when reading stdin.
    #[arg(
        long = "output-file",
        visible_alias = "output",
        short = 'o',
        value_name = "FILE"
    )]
    pub output: Option<PathBuf>,

    /// A tokenizer.json, a folder holding one, or a HuggingFace model id
    /// (looked up in $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub,
    /// downloaded from $HF_ENDPOINT only if not cached). Default: inferred
    /// from the model name in the trace.
    #[arg(long, value_name = "X")]
    pub tokenizer: Option<String>,

    /// Tokens per hash id.
    #[arg(long, default_value_t = 128, value_name = "B")]
    pub block_size: usize,

    /// Timing of the rows: `auto` gives each session's first row a
    /// timestamp (ms since the earliest LLM_START) and later rows the
    /// measured delay (own LLM_START minus the previous call's LLM_END).
    #[arg(long, value_enum, default_value_t = TimingMode::Auto)]
    pub timing: TimingMode,

    /// A constant delay (ms) for later rows instead of the measured one
    /// (and no `tool_wait_ms`).
    #[arg(long, value_name = "MS", value_parser = crate::options::delay_ms)]
    pub delay: Option<f64>,

    /// Write each request as a chain of turns (each call waits for the one
    /// that ended before it, `delay` the whole gap), without `request_id`,
    /// `wait_for`, `branches` and `tool_wait_ms`: for tools that cannot read
    /// graphs. AIPerf 0.13.0's Mooncake loader accepts the graph fields and
    /// ignores them, so it would replay a graph as plain sessions (calls
    /// that ran in parallel one after another) without a word: use --linear
    /// to make that choice visible.
    #[arg(long)]
    pub linear: bool,

    /// input_length from the hashed text's tokens, or the server's prompt_tokens.
    #[arg(long, value_enum, default_value_t = InputLength::Tokens)]
    pub input_length: InputLength,

    /// Also write each call's chat messages as OpenAI `messages`. Note that
    /// AIPerf 0.13.0 refuses rows holding both `messages` and `input_length`;
    /// for AIPerf keep one: `jq -c 'del(.input_length, .hash_ids)'`.
    #[arg(long)]
    pub messages: bool,

    /// Convert at most N requests (after --skip-requests).
    #[arg(long, value_name = "N")]
    pub num_requests: Option<usize>,

    /// Skip the first N requests of the file.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub skip_requests: usize,

    /// Overwrite `<stem>_mooncake.jsonl` beside --input-file when it exists
    /// (without it, an existing file is refused with exit code 73).
    #[arg(long)]
    pub force: bool,
}

/// Requests parsed (and their calls tokenized) together, in parallel: at most
/// this many, or this many bytes of raw requests, so memory stays bounded.
const BATCH: usize = 256;
const BATCH_BYTES: usize = 16 << 20;

/// A plain progress line this often when stderr is not a terminal: a long
/// conversion in a log is never silent.
const PLAIN_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// One finished row, kept until the end: timestamps are relative to the
/// earliest LLM_START of the whole file.
struct OutRow {
    session: String,
    first_in_session: bool,
    start: Option<f64>,
    /// Seconds since the previous call of the session ended.
    gap: Option<f64>,
    graph: CallGraph,
    input_length: u64,
    output_length: u64,
    ids: Vec<u64>,
    messages: Option<String>,
}

#[derive(Default)]
struct Counts {
    requests: u64,
    calls: u64,
    unmatched: u64,
    empty_text: u64,
    no_metadata: u64,
    no_usage: u64,
    sessions: u64,
    inconsistent: u64,
}

/// A request's position in the file, and its session number and calls (or
/// why it could not be parsed).
type ParsedRequest = (
    usize,
    std::result::Result<(String, calls::Extracted), String>,
);

struct Pending {
    session: String,
    first_in_session: bool,
    gap: Option<f64>,
    graph: CallGraph,
    call: Call,
}

/// A call's place in its request's graph ([`edges`]): calls named by their
/// index in the request (END order).
#[derive(Debug, Clone, Default)]
struct CallGraph {
    index: usize,
    wait_for: Vec<usize>,
    branches: Vec<usize>,
    /// `None` for a call that waits for nothing.
    gap: Option<edges::Gap>,
}

/// The tokenizer: being loaded beside the reading of the input, loaded, or
/// not named (inferred from the first call's model).
enum Tok {
    Loading(std::thread::JoinHandle<std::result::Result<Resolved, tokenizer::TokenizerError>>),
    /// Boxed: a `Tokenizer` is over a kilobyte, the handle a few words.
    Ready(Box<Resolved>),
    Unnamed,
}

pub struct Converter {
    opts: NatArgs,
    tokenizer: Tok,
    hasher: BlockHasher,
    pending: Vec<Pending>,
    rows: Vec<OutRow>,
    earliest_start: f64,
    counts: Counts,
}

impl Converter {
    pub fn new(opts: NatArgs) -> Result<Self> {
        if opts.block_size == 0 {
            return Err(Error::Usage("--block-size must be at least 1".into()));
        }
        // Loading a tokenizer.json is half of the CPU time on a 16 MB trace
        // (a 6 MB BPE vocabulary, `perf record`): it runs on its own thread
        // while the first requests are read and parsed.
        let tokenizer = match opts.tokenizer.clone() {
            Some(spec) => Tok::Loading(std::thread::spawn(move || tokenizer::resolve(&spec))),
            None => Tok::Unnamed,
        };
        let hasher = BlockHasher::new(opts.block_size);
        Ok(Converter {
            opts,
            tokenizer,
            hasher,
            pending: Vec::new(),
            rows: Vec::new(),
            earliest_start: f64::INFINITY,
            counts: Counts::default(),
        })
    }

    /// The tokenizer, waiting for it to load; `None` when none was named
    /// and no call has named a model yet. A tokenizer that failed to load
    /// is the error, whatever the input holds.
    fn tokenizer(&mut self) -> Result<Option<&Resolved>> {
        self.tokenizer = match std::mem::replace(&mut self.tokenizer, Tok::Unnamed) {
            Tok::Loading(handle) => {
                let loaded = handle.join().map_err(|_| {
                    Error::Io(std::io::Error::other(
                        "the tokenizer's loading thread failed",
                    ))
                })??;
                Tok::Ready(Box::new(loaded))
            }
            other => other,
        };
        Ok(match &self.tokenizer {
            Tok::Ready(t) => Some(&**t),
            _ => None,
        })
    }

    /// Takes a batch of requests (position in the file, raw bytes): parses
    /// them and pulls out their calls in parallel, then queues the calls in
    /// file order and tokenizes them.
    fn add_batch(&mut self, batch: Vec<(usize, reader::Element)>) -> Result<()> {
        let parsed: Vec<ParsedRequest> = batch
            .par_iter()
            .map(|(index, element)| {
                let extracted = reader::parse_request(&element.bytes).map_err(|e| {
                    let at = element.start.of_error_within(&e);
                    format!("{} ({at})", reader::error_text(&e))
                });
                let extracted = extracted.map(|req| {
                    let number = match &req.request_number {
                        Some(serde_json::Value::Number(n)) => n.to_string(),
                        Some(serde_json::Value::String(s)) => s.clone(),
                        _ => index.to_string(),
                    };
                    (number, calls::extract(&req))
                });
                (*index, extracted)
            })
            .collect();
        drop(batch);
        for (index, result) in parsed {
            let (number, extracted) = result.map_err(|e| {
                Error::Input(format!(
                    "invalid profiler trace: request {} of the file: {e}",
                    index + 1
                ))
            })?;
            self.add_calls(number, extracted);
        }
        self.flush_batch()
    }

    /// Queues the calls of one request (a session), counting what was skipped.
    fn add_calls(&mut self, number: String, extracted: calls::Extracted) {
        self.counts.requests += 1;
        for (uuid, reason) in &extracted.skipped {
            let counter = match reason {
                SkipReason::Unmatched => &mut self.counts.unmatched,
                SkipReason::EmptyText => &mut self.counts.empty_text,
                SkipReason::NoMetadata => &mut self.counts.no_metadata,
                SkipReason::NoUsage => &mut self.counts.no_usage,
            };
            *counter += 1;
            let why = match reason {
                SkipReason::NoMetadata => Some("LLM_START has no metadata"),
                SkipReason::NoUsage => Some("LLM_END has no usage_info.token_usage"),
                _ => None,
            };
            if let Some(why) = why {
                eprintln!("nat2mc: warning: request {number}, call {uuid}: {why}; call skipped");
            }
        }
        self.counts.calls += (extracted.calls.len() + extracted.skipped.len()) as u64;
        if !extracted.calls.is_empty() {
            self.counts.sessions += 1;
        }
        let spans: Vec<edges::Span> = extracted
            .calls
            .iter()
            .map(|c| edges::Span {
                start: c.start,
                end: c.end,
            })
            .collect();
        let mut graph = edges::build(&spans, &extracted.tools);
        let mut prev_end: Option<f64> = None;
        for (k, call) in extracted.calls.into_iter().enumerate() {
            if let Some(s) = call.start {
                self.earliest_start = self.earliest_start.min(s);
            }
            let gap = match (k, call.start, prev_end) {
                (0, _, _) => None,
                (_, Some(s), Some(e)) => Some((s - e).max(0.0)),
                _ => Some(0.0),
            };
            prev_end = call.end.or(prev_end);
            self.pending.push(Pending {
                session: format!("conv_{number}"),
                first_in_session: k == 0,
                gap,
                graph: CallGraph {
                    index: k,
                    wait_for: std::mem::take(&mut graph.wait_for[k]),
                    branches: std::mem::take(&mut graph.branches[k]),
                    gap: graph.gap[k],
                },
                call,
            });
        }
    }

    /// Tokenizes the pending calls in parallel, then hashes them in order.
    fn flush_batch(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        if self.tokenizer()?.is_none() {
            let model = self
                .pending
                .iter()
                .find_map(|p| p.call.model.clone())
                .unwrap_or_default();
            let id = tokenizer::infer_model_id(&model);
            eprintln!("nat2mc: no --tokenizer given; model `{model}` -> tokenizer {id}");
            self.tokenizer = Tok::Ready(Box::new(tokenizer::resolve(id)?));
        }
        let Tok::Ready(tok) = &self.tokenizer else {
            return Ok(());
        };
        let encoded: Vec<std::result::Result<Vec<u32>, String>> = self
            .pending
            .par_iter()
            .map(|p| {
                tok.tokenizer
                    .encode(p.call.text.as_str(), false)
                    .map(|e| e.get_ids().to_vec())
                    .map_err(|e| e.to_string())
            })
            .collect();
        let b = self.opts.block_size as u64;
        for (p, tokens) in self.pending.drain(..).zip(encoded) {
            let tokens = tokens.map_err(|e| {
                Error::Input(format!(
                    "{}: call {}: tokenizer failed: {e}",
                    p.session, p.call.uuid
                ))
            })?;
            let mut ids = Vec::with_capacity(tokens.len() / self.opts.block_size + 1);
            self.hasher.hash(&tokens, &mut ids);
            let input_length = match self.opts.input_length {
                InputLength::Tokens => tokens.len() as u64,
                InputLength::Usage => p.call.prompt_tokens.unwrap_or(tokens.len() as u64),
            };
            for (field, v) in [
                ("prompt_tokens", input_length),
                ("completion_tokens", p.call.completion_tokens),
            ] {
                crate::limits::tokens(field, v).map_err(|e| {
                    Error::Input(format!("{}: call {}: {e}", p.session, p.call.uuid))
                })?;
            }
            if !crate::blocks::is_consistent(ids.len(), input_length, b) {
                self.counts.inconsistent += 1;
            }
            let messages = self.opts.messages.then(|| {
                let list: Vec<serde_json::Value> = p
                    .call
                    .messages
                    .iter()
                    .map(|(role, content)| serde_json::json!({"role": role, "content": content}))
                    .collect();
                serde_json::Value::Array(list).to_string()
            });
            self.rows.push(OutRow {
                session: p.session,
                first_in_session: p.first_in_session,
                start: p.call.start,
                gap: p.gap,
                graph: p.graph,
                input_length,
                output_length: p.call.completion_tokens,
                ids,
                messages,
            });
        }
        Ok(())
    }

    fn write_rows(&self, out: &mut Output) -> Result<()> {
        let linear = self.opts.linear;
        let mut text = Vec::new();
        for r in &self.rows {
            let (timestamp, delay, tool_wait) = self.row_times(r)?;
            let mut w = RowWriter::new(out.buffer());
            if let Some(t) = timestamp {
                w.timestamp(t);
            }
            w.session_id(&r.session);
            if let Some(d) = delay {
                w.delay(d);
            }
            w.input_length(r.input_length);
            w.output_length(r.output_length);
            w.hash_ids(&r.ids);
            if !linear {
                let id = |k: usize| format!("{}:{k}", r.session);
                w.extra_str("request_id", &id(r.graph.index));
                for (name, list) in [
                    ("wait_for", &r.graph.wait_for),
                    ("branches", &r.graph.branches),
                ] {
                    if list.is_empty() {
                        continue;
                    }
                    text.clear();
                    text.push(b'[');
                    for (j, &k) in list.iter().enumerate() {
                        if j > 0 {
                            text.extend_from_slice(b", ");
                        }
                        crate::record::write_str(&id(k), &mut text);
                    }
                    text.push(b']');
                    w.extra_raw(name, &text);
                }
                if let Some(t) = tool_wait {
                    w.extra_raw("tool_wait_ms", itoa::Buffer::new().format(t).as_bytes());
                }
            }
            if let Some(m) = &r.messages {
                w.extra_raw("messages", m.as_bytes());
            }
            w.finish();
            out.end_line()?;
        }
        out.flush()
    }

    /// Row `r`'s timestamp, delay and tool wait (ms), as --timing and
    /// --delay ask. A root of the graph (or the first turn of the chain)
    /// arrives at its time; any other call waits.
    fn row_times(&self, r: &OutRow) -> Result<(Option<Number>, Option<Number>, Option<u64>)> {
        // Whole ms: the release files' integers; a time beyond 2^53 ms (an
        // event_timestamp far from the others) is refused, never saturated.
        let whole = |v: f64, what: &str| -> Result<u64> {
            crate::limits::time_ms(what, v.max(0.0))
                .map(|v| v.round() as u64)
                .map_err(|e| {
                    Error::Input(format!(
                        "{}: {e} (check the calls' event_timestamp values)",
                        r.session
                    ))
                })
        };
        let ms = |v: f64, what: &str| whole(v, what).map(Number::UInt);
        let linear = self.opts.linear;
        let root = if linear {
            r.first_in_session
        } else {
            r.graph.gap.is_none()
        };
        Ok(match (self.opts.timing, root) {
            (TimingMode::None, _) => (None, None, None),
            (TimingMode::Auto, true) => {
                let at = r.start.map_or(0.0, |s| (s - self.earliest_start) * 1000.0);
                (Some(ms(at, "timestamp")?), None, None)
            }
            (TimingMode::Auto, false) => match (self.opts.delay, linear, r.graph.gap) {
                (Some(d), _, _) => (None, Some(ms(d, "delay")?), None),
                (None, false, Some(g)) => {
                    // The gap is rounded once, and the tool part taken
                    // out of it, so delay + tool_wait_ms is the gap in
                    // whole ms, as the chain's delay is.
                    let total = whole(g.total * 1000.0, "delay")?;
                    let tool = whole(g.tool * 1000.0, "tool_wait_ms")?.min(total);
                    let tool_wait = (tool > 0).then_some(tool);
                    (None, Some(Number::UInt(total - tool)), tool_wait)
                }
                _ => (
                    None,
                    Some(ms(r.gap.unwrap_or(0.0) * 1000.0, "delay")?),
                    None,
                ),
            },
        })
    }

    fn summary(&self, end: &End) -> String {
        let c = &self.counts;
        let skipped = c.unmatched + c.empty_text + c.no_metadata + c.no_usage;
        let tok = match &self.tokenizer {
            Tok::Ready(t) => t.source.clone(),
            _ => "none (no calls)".to_string(),
        };
        let mut s = format!(
            "nat2mc: {} requests, {} calls, {} rows, {} skipped (unmatched {}, empty text {}, no metadata {}, no usage {}), {} sessions, {} distinct blocks, tokenizer {}",
            c.requests,
            c.calls,
            self.rows.len(),
            skipped,
            c.unmatched,
            c.empty_text,
            c.no_metadata,
            c.no_usage,
            c.sessions,
            self.hasher.distinct_blocks(),
            tok
        );
        if self.opts.input_length == InputLength::Usage && c.inconsistent > 0 {
            s.push_str(&format!(
                "; warning: {} rows inconsistent for block size {} with --input-length usage",
                c.inconsistent, self.opts.block_size
            ));
        }
        if *end == End::Truncated {
            s.push_str(
                "; warning: the file is truncated: converted every complete request before the cut",
            );
        }
        s
    }
}

/// Where rows go: `--output-file`, else `<input stem>_mooncake.jsonl` beside
/// `--input-file` (as the upstream converter does), else stdout.
pub fn output_path(opts: &NatArgs) -> Option<PathBuf> {
    if let Some(o) = &opts.output {
        return Some(o.clone());
    }
    let input = opts
        .input
        .as_ref()
        .filter(|p| p.as_path() != Path::new("-"))?;
    let stem = input
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Some(input.with_file_name(format!("{stem}_mooncake.jsonl")))
}

/// The tool's name, for its messages and `--version`.
pub const TOOL: &str = "nat2mc";

pub fn run(args: &NatArgs) -> Result<()> {
    let src = jsonl::open_input(args.input.as_deref())?;
    run_from(src, args.clone())
}

/// [`run`] on an already opened input (`opts.input` then only names the
/// default output file): `mc-import --from nat` hands in what it sniffed.
pub fn run_from(src: Box<dyn std::io::Read>, opts: NatArgs) -> Result<()> {
    let out_path = output_path(&opts);
    let input = opts.input.clone().unwrap_or_else(|| PathBuf::from("-"));
    jsonl::refuse_input_as_output(out_path.as_deref(), &[&input])?;
    // The path beside the input is chosen for the user: never overwrite a
    // file there without being told to (an explicit --output-file is the
    // user's own choice, as with any tool's --output).
    if let Some(p) = out_path.as_ref().filter(|_| opts.output.is_none()) {
        if !opts.force && p.exists() {
            return Err(Error::Exists { path: p.clone() });
        }
    }
    let (skip, limit) = (
        opts.skip_requests,
        opts.num_requests
            .map(|n| n.saturating_add(opts.skip_requests)),
    );
    let mut conv = Converter::new(opts)?;
    let read = convert(&mut conv, src, skip, limit);
    // A tokenizer that failed to load is reported before anything the
    // input did, as when it was loaded before reading.
    conv.tokenizer()?;
    let end = read?;
    let mut out = Output::open_for(out_path.as_deref(), false, &[&input])?;
    conv.write_rows(&mut out)?;
    let mut summary = conv.summary(&end);
    if let Some(p) = out_path.as_ref().filter(|p| p.as_path() != Path::new("-")) {
        summary.push_str(&format!("; rows written to {}", p.display()));
    }
    eprintln!("{summary}");
    Ok(())
}

/// Reads the requests (after `skip`, up to `limit`) and converts them in
/// batches; tells whether the file ended complete or cut off.
fn convert(
    conv: &mut Converter,
    src: Box<dyn std::io::Read>,
    skip: usize,
    limit: Option<usize>,
) -> Result<End> {
    let mut progress = Progress::for_stderr(TOOL, PLAIN_EVERY);
    let mut split = reader::ArraySplitter::new(src);
    let (mut index, mut batch, mut batch_bytes) = (0usize, Vec::new(), 0usize);
    let end = loop {
        if limit.is_some_and(|l| index >= l) {
            break End::Complete;
        }
        let element = match split.next_element()? {
            None => break End::Complete,
            Some(Err(end)) => break end,
            Some(Ok(element)) => element,
        };
        index += 1;
        if index <= skip {
            continue;
        }
        batch_bytes += element.bytes.len();
        batch.push((index - 1, element));
        if batch_bytes >= BATCH_BYTES || batch.len() >= BATCH {
            conv.add_batch(std::mem::take(&mut batch))?;
            batch_bytes = 0;
            progress.tick(|| format!("{index} requests…"));
        }
    };
    conv.add_batch(batch)?;
    progress.finish();
    Ok(end)
}
