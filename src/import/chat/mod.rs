//! `--from chat`: production chat logs (OpenAI Batch API input and output
//! files, LiteLLM's StandardLoggingPayload lines; `shape`) into anonymised
//! Mooncake rows.
//!
//! Each request's messages are rendered with the model's chat template
//! (`template`), tokenised with `--tokenizer`, and hashed into blocks by
//! nat2mc's `BlockHasher` (exact prefixes: identical prefixes share ids
//! across the file). Sessions are recognised by accumulated history
//! (`sessions`). Rows come out in time order once the whole input is read
//! (a batch's answers arrive in any order, LiteLLM logs a call when it
//! ends): only lengths, ids and hashes of the text are kept in memory, and
//! the text itself only with `--messages`.

pub mod sessions;
pub mod shape;
pub mod template;

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::{ImportArgs, Importer, Sink};
use crate::error::{Error, RecordError, Result};
use crate::jsonl::LineReader;
use crate::nat::hasher::BlockHasher;
use crate::progress::Progress;
use crate::record::{Number, RowWriter};
use crate::tokenizer;
use sessions::History;
use shape::{Entry, Outcome, Prompt};
use template::ChatTemplate;

/// Requests rendered and tokenised together (in parallel).
const BATCH: usize = 512;

/// A request read, waiting for its batch to be tokenised.
struct Pending {
    line: u64,
    file: usize,
    custom_id: Option<String>,
    prompt: Prompt,
    outcome: Option<Outcome>,
}

/// A request tokenised and hashed: what its row needs, and its history.
struct Request {
    line: u64,
    file: usize,
    input_length: u64,
    ids: Vec<u64>,
    history: History,
    outcome: Option<Outcome>,
    /// `messages` (or `text_input`) as JSON text, with `--messages`.
    text: Option<(&'static str, String)>,
}

pub struct Chat {
    max_line: usize,
    keep_text: bool,
    tokenizer: tokenizers::Tokenizer,
    tokenizer_source: String,
    template: ChatTemplate,
    hasher: BlockHasher,
    pending: Vec<Pending>,
    requests: Vec<Request>,
    /// The batch inputs' `custom_id`s seen (each must be unique).
    inputs: HashSet<String>,
    /// Batch outputs by `custom_id`: their line, file and outcome.
    outputs: HashMap<String, (u64, usize, Outcome)>,
    /// Request index by `custom_id`, filled as batches are flushed.
    by_id: HashMap<String, usize>,
    /// Tokenising is slow (a few MB/s): a long import says how far it is.
    progress: Progress,
}

/// The folder of a tokenizer named by `spec` (a folder, a tokenizer.json,
/// or a model id in the HuggingFace cache): where its tokenizer_config.json is.
fn tokenizer_folder(spec: &str) -> Option<PathBuf> {
    let p = Path::new(spec);
    if p.is_dir() {
        return Some(p.to_path_buf());
    }
    if p.is_file() {
        return Some(p.parent().unwrap_or(Path::new(".")).to_path_buf());
    }
    let file = tokenizer::find_in_cache(&tokenizer::hub_cache_dir()?, spec)?;
    file.parent().map(Path::to_path_buf)
}

impl Chat {
    pub fn new(args: &ImportArgs) -> Result<Self> {
        let Some(spec) = args.tokenizer.as_deref() else {
            return Err(Error::Usage(
                "--from chat needs --tokenizer: the model's tokenizer folder (tokenizer.json and \
                 tokenizer_config.json with its chat template), a tokenizer.json, or a model id \
                 in the HuggingFace cache"
                    .into(),
            ));
        };
        let resolved = tokenizer::resolve(spec)?;
        let folder = tokenizer_folder(spec).unwrap_or_else(|| PathBuf::from("."));
        let template = ChatTemplate::load(&folder, args.chat_template.as_deref())
            .map_err(|e| Error::Input(e.to_string()))?;
        Ok(Chat {
            max_line: args.io.max_line_bytes,
            keep_text: args.messages,
            tokenizer: resolved.tokenizer,
            tokenizer_source: resolved.source,
            template,
            hasher: BlockHasher::new(
                args.block_size.unwrap_or(crate::blocks::DEFAULT_BLOCK_SIZE) as usize
            ),
            pending: Vec::new(),
            requests: Vec::new(),
            inputs: HashSet::new(),
            outputs: HashMap::new(),
            by_id: HashMap::new(),
            progress: Progress::for_stderr(super::TOOL, std::time::Duration::from_secs(10)),
        })
    }

    /// One log line: a request goes to the pending batch, an answer to
    /// the outputs waiting for their request.
    fn line(
        &mut self,
        line: u64,
        file: usize,
        bytes: &[u8],
    ) -> std::result::Result<(), RecordError> {
        let entry = shape::read(bytes)?;
        let (custom_id, prompt, outcome) = match entry {
            Entry::Whole { prompt, outcome } => (None, prompt, Some(outcome)),
            Entry::Input { custom_id, prompt } => {
                if !self.inputs.insert(custom_id.clone()) {
                    return Err(duplicate(&custom_id, "input"));
                }
                (Some(custom_id), prompt, None)
            }
            Entry::Output { custom_id, outcome } => {
                if self.outputs.contains_key(&custom_id) {
                    return Err(duplicate(&custom_id, "output"));
                }
                self.outputs.insert(custom_id, (line, file, outcome));
                return Ok(());
            }
        };
        self.pending.push(Pending {
            line,
            file,
            custom_id,
            prompt,
            outcome,
        });
        Ok(())
    }

    /// Renders and tokenises the pending requests in parallel, then hashes
    /// them in order; a request the template refuses is a bad record.
    fn flush(&mut self, sink: &mut Sink) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        let (tok, tpl, keep) = (&self.tokenizer, &self.template, self.keep_text);
        let made: Vec<_> = pending
            .into_par_iter()
            .map(|p| {
                let r = tokenise(tok, tpl, keep, &p);
                (p, r)
            })
            .collect();
        for (p, r) in made {
            let (tokens, history, text, answer_tokens) = match r {
                Ok(x) => x,
                Err(e) => {
                    sink.counts.rows_in += 1;
                    sink.bad(p.line, e)?;
                    continue;
                }
            };
            let mut ids = Vec::with_capacity(tokens.len() / 64 + 1);
            self.hasher.hash(&tokens, &mut ids);
            let mut outcome = p.outcome;
            if let (Some(o), Some(n)) = (outcome.as_mut(), answer_tokens) {
                o.completion_tokens.get_or_insert(n);
            }
            if let Some(id) = p.custom_id {
                self.by_id.insert(id, self.requests.len());
            }
            self.requests.push(Request {
                line: p.line,
                file: p.file,
                input_length: tokens.len() as u64,
                ids,
                history,
                outcome,
                text,
            });
        }
        let n = self.requests.len();
        self.progress
            .tick(|| format!("chat: {n} requests tokenised…"));
        Ok(())
    }

    /// The answers' token counts where the log has text but no usage.
    fn count_answer(&self, text: &str) -> std::result::Result<u64, RecordError> {
        encode(&self.tokenizer, text, "response").map(|t| t.len() as u64)
    }

    /// Pairs the batch answers with their requests; an answer without its
    /// request line is dropped.
    fn pair_outputs(&mut self, sink: &mut Sink) {
        let mut outputs = std::mem::take(&mut self.outputs);
        for (id, &k) in &self.by_id {
            if let Some((_, _, o)) = outputs.remove(id) {
                self.requests[k].outcome = Some(o);
            }
        }
        sink.counts.rows_in += self.requests.len() as u64 + outputs.len() as u64;
        for _ in 0..outputs.len() {
            sink.counts.drop("answer without its request line");
        }
    }

    /// Counts the answers' text where usage is missing (batch outputs); a
    /// request whose answer cannot be counted loses its answer.
    fn count_answers(&mut self, sink: &mut Sink) -> Result<()> {
        for k in 0..self.requests.len() {
            let text = match &self.requests[k].outcome {
                Some(Outcome {
                    completion_tokens: None,
                    answer: Some(a),
                    failed: false,
                    ..
                }) => a.clone(),
                _ => continue,
            };
            let n = match self.count_answer(&text) {
                Ok(n) => n,
                Err(e) => {
                    let line = self.requests[k].line;
                    sink.bad(line, e)?;
                    self.requests[k].outcome = None;
                    continue;
                }
            };
            if let Some(o) = self.requests[k].outcome.as_mut() {
                o.completion_tokens = Some(n);
            }
        }
        Ok(())
    }

    /// The requests that become rows (answered, with an output length), in
    /// time order (then input order); each one's answer joins its history,
    /// and the others are counted as dropped.
    fn answered_in_time_order(&mut self, sink: &mut Sink) -> Vec<usize> {
        let mut rows: Vec<usize> = Vec::with_capacity(self.requests.len());
        for (k, r) in self.requests.iter_mut().enumerate() {
            match &r.outcome {
                None => sink.counts.drop("request without its answer line"),
                Some(o) if o.failed => sink.counts.drop("failed"),
                Some(o) if o.completion_tokens.is_none() => sink
                    .counts
                    .drop("no output length (no usage, no answer text)"),
                Some(o) => {
                    if let Some(a) = &o.answer {
                        r.history.answer(a);
                    }
                    rows.push(k);
                }
            }
        }
        let reqs = &self.requests;
        rows.sort_by(|&a, &b| {
            let (x, y) = (&reqs[a], &reqs[b]);
            let t = |r: &Request| r.outcome.as_ref().map_or(0.0, |o| o.time_s);
            t(x).total_cmp(&t(y))
                .then((x.file, x.line).cmp(&(y.file, y.line)))
        });
        rows
    }

    /// Writes the rows (`session[i]`: row i's session) and returns how many
    /// distinct blocks they name.
    fn write_rows(&self, rows: &[usize], session: &[u32], sink: &mut Sink) -> Result<u64> {
        let reqs = &self.requests;
        // Ids numbered in output order (the hasher numbered them in input order).
        let mut renumber = vec![u64::MAX; self.hasher.distinct_blocks()];
        let mut next = 0u64;
        let zero_ms = rows
            .first()
            .and_then(|&k| reqs[k].outcome.as_ref())
            .map_or(0.0, |o| o.time_s * 1000.0);
        let mut ids = Vec::new();
        for (i, &k) in rows.iter().enumerate() {
            let r = &reqs[k];
            let Some(o) = r.outcome.as_ref() else {
                continue;
            };
            ids.clear();
            for &id in &r.ids {
                let slot = &mut renumber[id as usize];
                if *slot == u64::MAX {
                    *slot = next;
                    next += 1;
                }
                ids.push(*slot);
            }
            let ms = ((o.time_s * 1000.0 - zero_ms).max(0.0)).floor() as u64;
            let session = session[i].to_string();
            let mut w = RowWriter::new(sink.out.buffer());
            w.timestamp(Number::UInt(ms));
            w.session_id(&session);
            if let Some(("text_input", t)) = &r.text {
                w.text_input(t);
            }
            w.input_length(r.input_length);
            w.output_length(o.completion_tokens.unwrap_or(0));
            w.hash_ids(&ids);
            if let Some(("messages", m)) = &r.text {
                w.extra_raw("messages", m.as_bytes());
            }
            w.finish();
            sink.counts.rows_out += 1;
            sink.out.end_line()?;
        }
        Ok(next)
    }
}

fn duplicate(id: &str, which: &str) -> RecordError {
    RecordError::field(
        "custom_id",
        format!("`{id}` is on an earlier {which} line too: a batch's custom_ids are unique (are two batches' files mixed? import each batch on its own)"),
    )
}

fn encode(
    tok: &tokenizers::Tokenizer,
    text: &str,
    field: &str,
) -> std::result::Result<Vec<u32>, RecordError> {
    // The template writes the special tokens (bos) itself, as
    // apply_chat_template(tokenize=True) encodes without adding them.
    tok.encode(text, false)
        .map(|e| e.get_ids().to_vec())
        .map_err(|e| RecordError::field(field, format!("the tokenizer failed: {e}")))
}

type Tokenised = (
    Vec<u32>,
    History,
    Option<(&'static str, String)>,
    Option<u64>,
);

/// One request's prompt tokens, history, kept text and (when the log has
/// its answer's text but no usage) its answer's length.
fn tokenise(
    tok: &tokenizers::Tokenizer,
    tpl: &ChatTemplate,
    keep: bool,
    p: &Pending,
) -> std::result::Result<Tokenised, RecordError> {
    let now = p.outcome.as_ref().map_or(0.0, |o| o.time_s);
    let (text, history, kept) = match &p.prompt {
        Prompt::Chat { messages, tools } => {
            let text = tpl.render(messages, tools.as_ref(), now).map_err(|e| {
                RecordError::field("messages", format!("the chat template refuses them: {e}"))
            })?;
            let kept = keep.then(|| {
                (
                    "messages",
                    serde_json::Value::from(messages.as_slice()).to_string(),
                )
            });
            (text, History::of(messages, None), kept)
        }
        Prompt::Text(s) => {
            let h = History::of(&[serde_json::json!({"prompt": s})], None);
            (s.clone(), h, keep.then(|| ("text_input", s.clone())))
        }
    };
    let tokens = encode(tok, &text, "messages")?;
    crate::limits::tokens("input_length", tokens.len() as u64)?;
    let answer_tokens = match &p.outcome {
        Some(Outcome {
            completion_tokens: None,
            answer: Some(a),
            failed: false,
            ..
        }) => Some(encode(tok, a, "response")?.len() as u64),
        _ => None,
    };
    Ok((tokens, history, kept, answer_tokens))
}

impl Importer for Chat {
    fn file(&mut self, src: Box<dyn Read + Send>, file_no: usize, sink: &mut Sink) -> Result<()> {
        let mut rd = LineReader::new(src, self.max_line);
        loop {
            let (no, res) = match rd.next_line() {
                Ok(Some(l)) => (l.no, self.line(l.no, file_no, l.bytes)),
                Ok(None) => break,
                Err(e) => {
                    sink.policy.handle(e)?;
                    continue;
                }
            };
            if let Err(e) = res {
                sink.counts.rows_in += 1;
                sink.bad(no, e)?;
            }
            if self.pending.len() >= BATCH {
                self.flush(sink)?;
            }
        }
        // Flushed per file, so a refused request is named in its file.
        self.flush(sink)
    }

    fn finish(&mut self, sink: &mut Sink) -> Result<()> {
        // Everything is read and tokenised; the live line goes before the rows.
        self.progress.finish();
        self.pair_outputs(sink);
        self.count_answers(sink)?;
        let rows = self.answered_in_time_order(sink);
        let reqs = &self.requests;
        let assigned = sessions::assign(rows.iter().map(|&k| &reqs[k].history));
        let blocks = self.write_rows(&rows, &assigned.session, sink)?;
        // The rows first, then what was found in them (as one stream, in order).
        sink.out.flush()?;
        let sessions = assigned.session.iter().max().map_or(0, |&s| s + 1);
        eprintln!(
            "{}: chat: {sessions} sessions ({} forks started their own), {} distinct blocks, tokenizer {}, template {}",
            super::TOOL,
            assigned.forks,
            blocks,
            self.tokenizer_source,
            self.template.source
        );
        Ok(())
    }
}
