//! `mc-import`: public LLM trace formats into Mooncake rows.
//!
//! One module per format; each reads its input streaming where the format
//! allows and writes rows through one [`Sink`], which also keeps the counts
//! for the one-line summary. `--from auto` sniffs the first bytes
//! ([`detect`]).

pub mod aibrix;
pub mod azure;
pub mod burstgpt;
pub mod chat;
pub mod csv;
pub mod detect;
pub mod dynamo;
pub mod lines;
pub mod otel;
pub mod ragpulse;
pub mod row;
pub mod time;
pub mod weka;

use std::io::Read;
use std::path::PathBuf;

use crate::error::{Error, RecordError, Result};
use crate::filter::IoArgs;
use crate::jsonl::{self, ErrorPolicy, LineReader, OnError, Output};
use crate::nat;
use row::ObjWriter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Detect the format from the first bytes (and say which on stderr).
    Auto,
    /// Azure LLM inference traces, 2023 and 2024 (`TIMESTAMP,ContextTokens,GeneratedTokens`).
    Azure,
    /// BurstGPT v1/v2/v3 CSV.
    Burstgpt,
    /// AIBrix workload files (JSONL or a JSON array).
    Aibrix,
    /// RAGPulse traces (needs the component length files, see --components).
    Ragpulse,
    /// kv-cache-tester (WEKA) agent session files, one session per file.
    Weka,
    /// NeMo Agent Toolkit profiler traces (as nat2mc).
    Nat,
    /// Dynamo's agentic Mooncake rows (`request_trace_to_mooncake
    /// --agentic`) or plain Mooncake rows: checked (the agent graph too)
    /// and written with every field kept.
    Dynamo,
    /// OpenTelemetry GenAI spans as OTLP/JSON (one document, or one per
    /// line as the Collector's file exporter writes them): each trace (or
    /// `gen_ai.conversation.id`) an agent graph of its LLM calls.
    Otel,
    /// Chat request logs (OpenAI Batch API input+output files, LiteLLM's
    /// StandardLoggingPayload lines): rendered with the model's chat
    /// template, tokenised, hashed; needs --tokenizer.
    Chat,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::Azure => "azure",
            Format::Burstgpt => "burstgpt",
            Format::Aibrix => "aibrix",
            Format::Ragpulse => "ragpulse",
            Format::Weka => "weka",
            Format::Nat => "nat",
            Format::Dynamo => "dynamo",
            Format::Otel => "otel",
            Format::Chat => "chat",
        }
    }
}

/// Convert a public LLM trace into Mooncake rows.
///
/// Reads the FILEs in turn (default: stdin) and writes Mooncake JSONL to
/// stdout or --output; a one-line summary (rows in, rows out, dropped by
/// reason) goes to stderr. A bad record stops the import naming its line
/// (and column, for CSV) with exit code 65, or is skipped with
/// `--on-error skip`. BOM, CRLF and a missing final newline are accepted.
///
/// Formats: azure (timestamps in ms from the first row), burstgpt (seconds
/// to ms; rows with 0 response tokens are failures and dropped), aibrix (one
/// row per request: `text_input`, or `input_length` with --no-text, as
/// AIPerf takes one of the two), ragpulse (exact prefix block ids at
/// --block-size from the component lengths), weka (one session per file,
/// sub-agents as branches of the call that spawned them, an agent graph, or
/// with --sub-agents sessions as their own sessions linked by
/// `parent_session_id`; ids kept at the file's block size), nat (as
/// nat2mc), dynamo (Dynamo's agentic rows with request_id, wait_for,
/// branches, tool_wait_ms, prefix_reset: checked as a graph, then written
/// with every field), otel (OTLP/JSON exports of OpenTelemetry GenAI spans,
/// semantic conventions v1.37.0: one session per trace or
/// gen_ai.conversation.id, one row per chat/text_completion/generate_content
/// span with its gen_ai.usage tokens, the calls' graph from their times per
/// agent, parallel sub-agents as branches, execute_tool time as
/// tool_wait_ms), chat (OpenAI Batch API input + output files or
/// LiteLLM's StandardLoggingPayload lines: prompts rendered with the model's
/// chat template and tokenised with --tokenizer, exact prefix ids, sessions
/// by accumulated history; lengths and ids only, the text with --messages).
/// Only ragpulse, weka, nat and chat carry prefix information; azure,
/// burstgpt and otel rows get hash_ids only with --synth-hash-ids.
#[derive(Debug, clap::Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-import --from azure AzureLLMInferenceTrace_conv.csv > conv.jsonl
  mc-import --from auto < BurstGPT_1.csv | mc-analyze
  mc-import --from burstgpt --model GPT-4 --synth-hash-ids BurstGPT_2.csv > gpt4.jsonl
  mc-import --from aibrix --no-text workload.jsonl > rows.jsonl
  mc-import --from ragpulse --components ragpulse/ --block-size 512 ragpulse/0_trace.jsonl
  mc-import --from weka --session-gap 60000 traces/*.json > agents.jsonl
  mc-import --from dynamo dynamo-request-trace.agentic-mooncake.jsonl > agents.jsonl
  mc-import --from otel otel-traces.jsonl > agents.jsonl
  mc-import --from chat --tokenizer Qwen3-8B/ batch_input.jsonl batch_output.jsonl > chat.jsonl"
)]
pub struct ImportArgs {
    /// The input format (`auto` detects it and says which on stderr).
    #[arg(long, value_enum, default_value_t = Format::Auto, value_name = "FORMAT")]
    pub from: Format,

    /// `--input`, `--output`, `--on-error`, `--max-line-bytes` and
    /// `--line-buffered`, as every filter has them. (Its plain FILE is the
    /// first of the input files below: it comes first so that the list,
    /// the last positional argument, takes the rest.)
    #[command(flatten)]
    pub io: IoArgs,

    /// Input files, read in turn (default: stdin; `-` is stdin). `-i FILE`
    /// is read before them.
    #[arg(value_name = "FILE", index = 2)]
    pub files: Vec<PathBuf>,

    /// Keep sub-millisecond precision as float timestamps (azure, burstgpt,
    /// ragpulse); the default is whole milliseconds, floored.
    #[arg(long)]
    pub float_timestamps: bool,

    /// Give azure, burstgpt and otel rows made-up hash_ids: fresh ids for every
    /// row (ceil(input_length / B)), so no prefix is shared. Never by default.
    #[arg(long)]
    pub synth_hash_ids: bool,

    /// Tokens per block: for --synth-hash-ids, ragpulse and chat (default
    /// 512), and nat (default 128). weka keeps each file's own block_size (a different
    /// value here is an error).
    #[arg(long, value_name = "B")]
    pub block_size: Option<u64>,

    /// burstgpt: keep only rows of this model (repeatable; e.g. ChatGPT, GPT-4).
    #[arg(long, value_name = "NAME")]
    pub model: Vec<String>,

    /// burstgpt: keep only rows of this log type (repeatable; e.g. "Conversation log").
    #[arg(long, value_name = "TYPE")]
    pub log_type: Vec<String>,

    /// burstgpt: keep failed requests (0 response tokens) instead of dropping them.
    #[arg(long)]
    pub keep_failed: bool,

    /// ragpulse: the folder with the component files (`*sys_prompt.jsonl`,
    /// `*passages.jsonl`, `*history.jsonl`, `*web_search.jsonl`,
    /// `*user_input.jsonl`). Default: the input file's folder.
    #[arg(long, value_name = "DIR")]
    pub components: Option<PathBuf>,

    /// ragpulse: sort rows by timestamp (stable). Default: file order (the
    /// real file has two segments; this buffers the whole trace).
    #[arg(long)]
    pub sort: bool,

    /// aibrix: leave out the prompt text: rows get `input_length` (the
    /// request's prompt_length) instead of `text_input`.
    #[arg(long)]
    pub no_text: bool,

    /// weka: session k (in file order) starts k*MS ms after the first
    /// (without this or --session-rate, every session starts at 0).
    #[arg(long, value_name = "MS", conflicts_with = "session_rate",
          value_parser = crate::options::non_negative)]
    pub session_gap: Option<f64>,

    /// weka: how sub-agents are written: `graph` makes a session with
    /// sub-agents one agent graph (the sub-agent's calls a branch of the
    /// call that spawned it, joined by the parent's first call after it
    /// ended); `sessions` makes each sub-agent a session of its own,
    /// linked by `parent_session_id`.
    #[arg(long, value_enum, default_value_t = weka::SubAgents::Graph, value_name = "HOW")]
    pub sub_agents: weka::SubAgents,

    /// weka: start sessions at RATE per second (evenly spaced).
    #[arg(long, value_name = "RATE", value_parser = crate::options::positive)]
    pub session_rate: Option<f64>,

    /// nat: the tokenizer (as nat2mc --tokenizer). chat: the model's
    /// tokenizer folder (tokenizer.json, and tokenizer_config.json with the
    /// chat template and bos/eos tokens), a tokenizer.json, or a model id in
    /// the HuggingFace cache.
    #[arg(long, value_name = "X")]
    pub tokenizer: Option<String>,

    /// chat: the chat template (a Jinja file) instead of the tokenizer
    /// folder's (for a tokenizer_config.json without one).
    #[arg(long, value_name = "FILE")]
    pub chat_template: Option<PathBuf>,

    /// chat: keep the text: each row gets the request's `messages` (a
    /// completion prompt: `text_input`). Without it rows hold lengths and
    /// ids only.
    #[arg(long)]
    pub messages: bool,
}

impl ImportArgs {
    /// Every input named, in reading order: `--input`, then the files.
    pub fn inputs(&self) -> impl Iterator<Item = &PathBuf> {
        self.io.input.iter().chain(&self.io.file).chain(&self.files)
    }
}

/// Rows in, rows out, and why rows were left out.
#[derive(Debug, Default)]
pub struct Counts {
    pub rows_in: u64,
    pub rows_out: u64,
    dropped: Vec<(&'static str, u64)>,
}

impl Counts {
    pub fn drop(&mut self, reason: &'static str) {
        match self.dropped.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, n)) => *n += 1,
            None => self.dropped.push((reason, 1)),
        }
    }

    pub fn dropped(&self, reason: &str) -> u64 {
        self.dropped
            .iter()
            .find(|(r, _)| *r == reason)
            .map_or(0, |(_, n)| *n)
    }

    /// Adds `other`'s counts (a chunk's) into these.
    pub fn add(&mut self, other: &Counts) {
        self.rows_in += other.rows_in;
        self.rows_out += other.rows_out;
        for &(reason, n) in &other.dropped {
            match self.dropped.iter_mut().find(|(r, _)| *r == reason) {
                Some((_, m)) => *m += n,
                None => self.dropped.push((reason, n)),
            }
        }
    }

    pub fn summary(&self, format: &str) -> String {
        let mut s = format!(
            "{format}: {} rows in, {} rows out",
            self.rows_in, self.rows_out
        );
        for (reason, n) in &self.dropped {
            s.push_str(&format!(", {n} dropped ({reason})"));
        }
        s
    }
}

/// Writes one row built by `f` (and its `\n`) into `out`, counting it.
pub fn write_row(out: &mut Vec<u8>, counts: &mut Counts, f: impl FnOnce(&mut ObjWriter<'_>)) {
    let mut w = ObjWriter::new(out);
    f(&mut w);
    w.finish();
    counts.rows_out += 1;
}

/// One request of a CSV trace (Azure, BurstGPT): its time as JSON text,
/// its session when the trace has one, its lengths, and the made-up ids
/// of `--synth-hash-ids`.
pub fn write_request(
    out: &mut Vec<u8>,
    counts: &mut Counts,
    ts: &[u8],
    session: Option<&str>,
    (input, output): (u64, u64),
    ids: Option<&[u64]>,
) {
    write_row(out, counts, |w| {
        w.timestamp_text(ts);
        if let Some(s) = session {
            w.session_id(s);
        }
        w.input_length(input);
        w.output_length(output);
        if let Some(ids) = ids {
            w.hash_ids(ids);
        }
    });
}

/// Where every importer writes: the output, the error policy and the counts.
pub struct Sink {
    pub out: Output,
    pub policy: ErrorPolicy,
    pub counts: Counts,
    /// `--on-error`: the chunked loop's workers go on past a bad record
    /// only when it is `skip`.
    pub on_error: OnError,
    /// `--line-buffered`: rows go out one at a time, so lines are
    /// converted in order (`lines`).
    pub line_buffered: bool,
}

impl Sink {
    /// A sink writing to `out` under `--on-error on_error`; `line_buffered`
    /// converts lines in order (the output itself flushes as it was opened).
    pub fn new(out: Output, on_error: OnError, line_buffered: bool) -> Sink {
        Sink {
            out,
            policy: ErrorPolicy::new(on_error),
            counts: Counts::default(),
            on_error,
            line_buffered,
        }
    }

    /// Writes one row built by `f`.
    pub fn row(&mut self, f: impl FnOnce(&mut ObjWriter<'_>)) -> Result<()> {
        write_row(self.out.buffer(), &mut self.counts, f);
        self.out.end_line()
    }

    /// Writes a finished row (with its `\n`).
    pub fn raw_row(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.buffer().extend_from_slice(bytes);
        self.counts.rows_out += 1;
        self.out.end_line()
    }

    /// Converts `rd` line by line. A line that cannot be read (too long)
    /// goes to the error policy; `convert` turns a line into rows, or into
    /// a bad-record error that is named by the line's number and handled
    /// per `--on-error`; its outer `Result` stops the import.
    pub fn each_line<R: Read>(
        &mut self,
        rd: &mut LineReader<R>,
        mut convert: impl FnMut(&mut Sink, &[u8]) -> Result<std::result::Result<(), RecordError>>,
    ) -> Result<()> {
        loop {
            let line = match rd.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => return Ok(()),
                Err(e) => {
                    self.policy.handle(e)?;
                    continue;
                }
            };
            let no = line.no;
            if let Err(e) = convert(self, line.bytes)? {
                self.bad(no, e)?;
            }
        }
    }

    /// A bad record on `line`: stops or is counted, per `--on-error`.
    pub fn bad(&mut self, line: u64, err: RecordError) -> Result<()> {
        self.policy.record(line, err)
    }
}

/// One format's converter. `file` is called for each input in turn,
/// `finish` once at the end (for what must see the whole input).
pub trait Importer {
    fn file(&mut self, src: Box<dyn Read + Send>, file_no: usize, sink: &mut Sink) -> Result<()>;
    fn finish(&mut self, _sink: &mut Sink) -> Result<()> {
        Ok(())
    }
}

/// A JSON line that does not parse: serde_json's message, with the column
/// (the line is named by the caller).
/// A whole input read into memory without its UTF-8 byte-order mark, for
/// the formats whose one document is the file (WEKA's session, an OTLP
/// export): their messages name lines of the whole text.
pub fn read_document(mut src: Box<dyn Read + Send>) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    src.read_to_end(&mut bytes)?;
    if bytes.starts_with(b"\xef\xbb\xbf") {
        bytes.drain(..3);
    }
    Ok(bytes)
}

pub fn json_error(e: &serde_json::Error) -> RecordError {
    RecordError::new(format!(
        "column {}: {}",
        e.column(),
        nat::reader::error_text(e)
    ))
}

/// `session_id` as the sources write it: a string, or a number (AIBrix
/// numbers its sessions); rows always get a string.
pub enum SessionId {
    Text(String),
    Number(serde_json::Number),
}

/// By hand, not `#[serde(untagged)]`: that buffers the value, tries the
/// string first and builds an error for every number before it takes it
/// as one (`make_error` and its message search were 8% of an AIBrix
/// import, perf). The same values and the same numbers come out.
impl<'de> serde::Deserialize<'de> for SessionId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = SessionId;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a number")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<SessionId, E> {
                Ok(SessionId::Text(v.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(
                self,
                v: String,
            ) -> std::result::Result<SessionId, E> {
                Ok(SessionId::Text(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<SessionId, E> {
                Ok(SessionId::Number(v.into()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<SessionId, E> {
                Ok(SessionId::Number(v.into()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<SessionId, E> {
                serde_json::Number::from_f64(v)
                    .map(SessionId::Number)
                    .ok_or_else(|| E::custom("a session id that is not a finite number"))
            }
        }
        d.deserialize_any(Visit)
    }
}

impl SessionId {
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            SessionId::Text(s) => s.into(),
            SessionId::Number(n) => n.to_string().into(),
        }
    }
}

/// The first byte of `src` that is not whitespace (after a UTF-8 BOM), and
/// the input again from there: JSON-array and JSON-lines files differ in it.
pub fn peek_start(mut src: Box<dyn Read + Send>) -> Result<(Option<u8>, Box<dyn Read + Send>)> {
    let mut head = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let n = loop {
            match src.read(&mut chunk) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        };
        head.extend_from_slice(&chunk[..n]);
        let body = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&head);
        let first = body.iter().position(|b| !b.is_ascii_whitespace());
        if first.is_some() || n == 0 {
            let first = first.map(|i| body[i]);
            let rest = body.to_vec();
            return Ok((first, Box::new(std::io::Cursor::new(rest).chain(src))));
        }
    }
}

/// How many bytes `--from auto` looks at.
const SNIFF: usize = 64 << 10;

/// Reads up to [`SNIFF`] bytes and gives them back in front of the rest.
fn sniff(mut src: Box<dyn Read + Send>) -> Result<(Vec<u8>, Box<dyn Read + Send>)> {
    let mut head = Vec::with_capacity(SNIFF);
    (&mut src).take(SNIFF as u64).read_to_end(&mut head)?;
    let again = std::io::Cursor::new(head.clone()).chain(src);
    Ok((head, Box::new(again)))
}

/// The tool's name, for its messages and `--version`.
pub const TOOL: &str = "mc-import";

pub fn run(args: &ImportArgs) -> Result<()> {
    let tool = TOOL;
    if args.block_size == Some(0) {
        return Err(Error::Usage("--block-size must be at least 1".into()));
    }
    let named: Vec<&PathBuf> = args.inputs().collect();
    let inputs: Vec<Option<PathBuf>> = if named.is_empty() {
        vec![None]
    } else {
        named.into_iter().cloned().map(Some).collect()
    };
    let read: Vec<&std::path::Path> = inputs
        .iter()
        .map(|p| p.as_deref().unwrap_or(std::path::Path::new("-")))
        .chain(args.components.as_deref())
        .collect();
    // Before anything is read or created: an output that is an input is refused.
    jsonl::refuse_input_as_output(args.io.output.as_deref(), &read)?;
    let mut first = Some(jsonl::open_input_send(inputs[0].as_deref())?);
    let mut format = args.from;
    if format == Format::Auto {
        let (head, src) = sniff(first.take().unwrap_or_else(|| Box::new(std::io::empty())))?;
        let (found, why) = detect::detect(&head)?;
        eprintln!("{tool}: --from auto: reading {} ({why})", found.name());
        format = found;
        first = Some(src);
    }
    if format == Format::Nat {
        let src = first.take().unwrap_or_else(|| Box::new(std::io::empty()));
        return import_nat(args, &inputs, src);
    }
    let mut importer = importer_for(format, args)?;
    if format == Format::Ragpulse {
        // Its component files are inputs too, found only now.
        let comps = ragpulse::component_files(args);
        let comps: Vec<&std::path::Path> = comps.iter().map(|p| p.as_path()).collect();
        jsonl::refuse_input_as_output(args.io.output.as_deref(), &comps)?;
    }
    let mut sink = Sink::new(
        Output::open(args.io.output.as_deref(), args.io.line_buffered)?,
        args.io.on_error,
        args.io.line_buffered,
    );
    let mut result = import_files(importer.as_mut(), &inputs, first, &mut sink);
    if result.is_ok() {
        result = importer.finish(&mut sink);
    }
    // Rows already converted are flushed even when a bad one stops us.
    let flushed = sink.out.flush();
    if let Some(s) = sink.policy.summary() {
        eprintln!("{tool}: {s}");
    }
    if result.is_ok() && flushed.is_ok() {
        eprintln!("{tool}: {}", sink.counts.summary(format.name()));
    }
    result.and(flushed)
}

/// `--from nat`: one profiler file, converted as nat2mc does by default.
fn import_nat(
    args: &ImportArgs,
    inputs: &[Option<PathBuf>],
    src: Box<dyn Read + Send>,
) -> Result<()> {
    if inputs.len() > 1 {
        return Err(Error::Usage(
            "--from nat reads one profiler file at a time".into(),
        ));
    }
    let opts = nat::NatArgs {
        input: inputs[0].clone(),
        output: Some(args.io.output.clone().unwrap_or_else(|| "-".into())),
        tokenizer: args.tokenizer.clone(),
        block_size: args.block_size.unwrap_or(128) as usize,
        timing: nat::TimingMode::Auto,
        delay: None,
        // The profiler's graph, as nat2mc writes it by default.
        linear: false,
        input_length: nat::InputLength::Tokens,
        messages: false,
        num_requests: None,
        skip_requests: 0,
        force: false,
    };
    nat::run_from(src, opts)
}

/// The importer of a row format (not `auto`, not `nat`: both are
/// resolved before).
fn importer_for(format: Format, args: &ImportArgs) -> Result<Box<dyn Importer>> {
    Ok(match format {
        Format::Azure => Box::new(azure::Azure::new(args)),
        Format::Burstgpt => Box::new(burstgpt::BurstGpt::new(args)),
        Format::Ragpulse => Box::new(ragpulse::RagPulse::new(args)),
        Format::Aibrix => Box::new(aibrix::Aibrix::new(args)),
        Format::Weka => Box::new(weka::Weka::new(args)),
        Format::Dynamo => Box::new(dynamo::Dynamo::new(args)),
        Format::Otel => Box::new(otel::Otel::new(args)),
        Format::Chat => Box::new(chat::Chat::new(args)?),
        Format::Auto | Format::Nat => unreachable!("handled above"),
    })
}

/// Feeds every input to `importer` in order (`first`, already open, is
/// the first one's), stopping at the first error; with several inputs a
/// data error names its file.
fn import_files(
    importer: &mut dyn Importer,
    inputs: &[Option<PathBuf>],
    mut first: Option<Box<dyn Read + Send>>,
    sink: &mut Sink,
) -> Result<()> {
    let many = inputs.len() > 1;
    for (k, path) in inputs.iter().enumerate() {
        let src = match first.take() {
            Some(s) => s,
            None => jsonl::open_input_send(path.as_deref())?,
        };
        importer
            .file(src, k, sink)
            .map_err(|e| match (many, path, e) {
                // Name the file when there are several.
                (true, Some(p), e @ (Error::Data { .. } | Error::Input(_))) => {
                    Error::Input(format!("{}: {e}", p.display()))
                }
                (_, _, e) => e,
            })?;
    }
    Ok(())
}
