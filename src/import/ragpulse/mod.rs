//! RAGPulse (flashserve/RAGPulse): JSONL rows with `timestamp` as a string
//! of seconds and `hash_ids` as an object of component lists (`sys_prompt`,
//! `passages_ids`, `history`, `web_search`, `user_input`). The ids name
//! content chunks of varying token length, given in companion files
//! (`1_sys_prompt.jsonl`: `{"sys_prompt_id", "token_length"}`, and so on),
//! so they are not Mooncake block ids.
//!
//! The conversion is exact: the prompt is the components in the object's
//! order, a stream of pieces (component, chunk, token range); it is cut into
//! blocks of B tokens, and a block's id names what it holds and its parent
//! block (`table::BlockIds`). Two rows share a block id exactly when they
//! share the prompt up to the end of that block.
//!
//! A line is read by `request` (a hand-written scan of the files' shape,
//! serde for anything else); the chunk lengths and block ids live in
//! `table`.
//!
//! `input_length` is 6 to 12 tokens more than the components in the real
//! file (chat-template tokens). Those are taken as one last chunk named by
//! its length: rows with the same components and the same overhead share
//! every block, as their prompts would; any other row differs in it.

mod request;
mod table;

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::{json_error, time, ImportArgs, Importer, Sink};
use crate::error::{Error, RecordError, Result};
use crate::jsonl::LineReader;
use crate::progress::Progress;

/// Component kinds, at most (the kind number is a u16).
const MAX_KINDS: usize = u16::MAX as usize;

/// One component's chunks, read from its companion file.
struct Lengths {
    file: PathBuf,
    chunks: table::Chunks,
}

pub struct RagPulse {
    max_line: usize,
    float: bool,
    sort: bool,
    /// `--components`, or `None` for each input file's own folder.
    components: Option<PathBuf>,
    files: Vec<PathBuf>,
    /// The folder the component tables were read from, and the tables by kind.
    folder: Option<PathBuf>,
    kinds: Vec<String>,
    lengths: Vec<Option<Lengths>>,
    /// The next chunk number of this folder, and the template pseudo-chunks'
    /// numbers by length (a chunk named by its length).
    next_no: u32,
    templates: HashMap<u64, u32, table::Fast>,
    blocks: table::BlockIds,
    ids: Vec<u64>,
    chunks: Vec<table::Chunk>,
    /// The line's component lists (kept: a line allocates nothing).
    lists: request::Lists,
    /// The timestamp's text.
    ts: Vec<u8>,
    row: Vec<u8>,
    /// `--sort`: (ns, row) in file order, sorted (stably) at the end.
    held: Vec<(i64, Vec<u8>)>,
}

impl RagPulse {
    pub fn new(args: &ImportArgs) -> Self {
        RagPulse {
            max_line: args.io.max_line_bytes,
            float: args.float_timestamps,
            sort: args.sort,
            components: args.components.clone(),
            files: args.inputs().cloned().collect(),
            folder: None,
            kinds: Vec::new(),
            lengths: Vec::new(),
            next_no: 0,
            templates: HashMap::default(),
            blocks: table::BlockIds::new(args.block_size.unwrap_or(512)),
            ids: Vec::new(),
            chunks: Vec::new(),
            lists: request::Lists::default(),
            ts: Vec::new(),
            row: Vec::new(),
            held: Vec::new(),
        }
    }

    /// The component folder for input `file_no`.
    fn folder_for(&self, file_no: usize) -> Result<PathBuf> {
        if let Some(dir) = &self.components {
            return Ok(dir.clone());
        }
        match self.files.get(file_no) {
            Some(p) if p.as_os_str() != "-" => Ok(p
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf()),
            _ => Err(Error::Usage(
                "--from ragpulse on stdin: name the folder of the component files with --components DIR"
                    .into(),
            )),
        }
    }

    /// The index of component `kind`, its lengths loaded from the folder.
    fn kind(&mut self, kind: &[u8]) -> Result<u16> {
        if let Some(k) = self.kinds.iter().position(|n| n.as_bytes() == kind) {
            return Ok(k as u16);
        }
        if self.kinds.len() >= MAX_KINDS {
            return Err(Error::Input("too many RAGPulse component kinds".into()));
        }
        self.kinds.push(String::from_utf8_lossy(kind).into_owned());
        self.lengths.push(None);
        Ok((self.kinds.len() - 1) as u16)
    }

    /// Loads the lengths of kind `k` if they are not yet, numbering its
    /// chunks on from the folder's last.
    fn load(&mut self, k: u16) -> Result<()> {
        let slot = usize::from(k);
        if self.lengths[slot].is_none() {
            let dir = self.folder.clone().unwrap_or_default();
            let (file, entries) = load_lengths(&dir, &self.kinds[slot], self.max_line)?;
            let first = self.take_numbers(entries.len())?;
            let chunks = table::Chunks::new(&entries, first);
            self.lengths[slot] = Some(Lengths { file, chunks });
        }
        Ok(())
    }

    /// `n` new chunk numbers of this folder: the first.
    fn take_numbers(&mut self, n: usize) -> Result<u32> {
        let first = self.next_no;
        self.next_no = u32::try_from(n)
            .ok()
            .and_then(|n| first.checked_add(n))
            .ok_or_else(|| Error::Input("more than 2^32 RAGPulse chunks in one folder".into()))?;
        Ok(first)
    }

    /// The template overhead of `tokens` as a chunk: one per length, so
    /// rows with the same overhead share it.
    fn template(&mut self, tokens: u64) -> Result<table::Chunk> {
        let no = match self.templates.get(&tokens) {
            Some(&no) => no,
            None => {
                let no = self.take_numbers(1)?;
                self.templates.insert(tokens, no);
                no
            }
        };
        Ok(table::Chunk { no, tokens })
    }

    /// Converts one trace line into `self.row`; returns its time in ns.
    fn convert(&mut self, line: &[u8]) -> Result<std::result::Result<i64, RecordError>> {
        let mut lists = std::mem::take(&mut self.lists);
        let made = match request::parse(line, &mut lists) {
            Ok(req) => self.request(&req, &lists, line),
            Err(e) => Ok(Err(e)),
        };
        self.lists = lists;
        made
    }

    /// Converts a parsed request (its lists in `lists`, read from `line`)
    /// into `self.row`; returns its time in ns. The checks run in the
    /// order they always have, so a line with several faults is named by
    /// the same one.
    fn request(
        &mut self,
        req: &request::Request,
        lists: &request::Lists,
        line: &[u8],
    ) -> Result<std::result::Result<i64, RecordError>> {
        let t = match seconds_ns(&req.timestamp) {
            Ok(t) => t,
            Err(e) => return Ok(Err(e)),
        };
        if let Err(e) = crate::limits::tokens("input_length", req.input_length)
            .and(crate::limits::tokens("output_length", req.output_length))
        {
            return Ok(Err(e));
        }
        let sum = match self.pieces(lists, line)? {
            Ok(sum) => sum,
            Err(e) => return Ok(Err(e)),
        };
        let Some(template) = req.input_length.checked_sub(sum) else {
            return Ok(Err(RecordError::field(
                "input_length",
                format!(
                    "{} is less than the {sum} tokens of its components",
                    req.input_length
                ),
            )));
        };
        if template > 0 {
            let t = self.template(template)?;
            self.chunks.push(t);
        }
        if self.blocks.prompt(&self.chunks, &mut self.ids).is_err() {
            return Err(Error::Input(format!(
                "more than {} distinct RAGPulse blocks",
                u32::MAX - 1
            )));
        }
        self.write_row(t, req);
        Ok(Ok(t))
    }

    /// The chunks of the lists in order into `self.chunks` (each kind's
    /// table loaded on its first non-empty list); their tokens, summed.
    fn pieces(
        &mut self,
        lists: &request::Lists,
        line: &[u8],
    ) -> Result<std::result::Result<u64, RecordError>> {
        self.chunks.clear();
        let mut sum = 0u64;
        for (name, list) in lists.iter(line) {
            if list.is_empty() {
                continue;
            }
            let k = self.kind(name)?;
            self.load(k)?;
            let Some(lengths) = &self.lengths[usize::from(k)] else {
                continue;
            };
            for &chunk in list {
                let Some(found) = lengths.chunks.get(chunk) else {
                    return Ok(Err(RecordError::field(
                        &format!("hash_ids.{}", String::from_utf8_lossy(name)),
                        format!("chunk {chunk} is not in {}", lengths.file.display()),
                    )));
                };
                sum = sum.saturating_add(found.tokens);
                self.chunks.push(found);
            }
        }
        Ok(Ok(sum))
    }

    /// The row of a converted request at `t` ns, its ids in `self.ids`.
    fn write_row(&mut self, t: i64, req: &request::Request) {
        self.row.clear();
        self.ts.clear();
        time::write_ms(t, self.float, &mut self.ts);
        let mut w = super::row::ObjWriter::new(&mut self.row);
        w.timestamp_text(&self.ts);
        if let Some(s) = &req.session_id {
            w.session_id(s);
        }
        w.input_length(req.input_length);
        w.output_length(req.output_length);
        w.hash_ids(&self.ids);
        w.finish();
    }
}

/// A request's time: its text as seconds, in ns from the trace's start.
fn seconds_ns(text: &[u8]) -> std::result::Result<i64, RecordError> {
    let Some(t) = time::parse_seconds(text) else {
        return Err(RecordError::field(
            "timestamp",
            "expected seconds (like \"82\" or 82.5)",
        ));
    };
    if t < 0 {
        return Err(RecordError::field(
            "timestamp",
            format!(
                "{} s is before the trace's start: times are seconds from 0",
                t as f64 / 1e9
            ),
        ));
    }
    Ok(t)
}

/// The component files RAGPulse's five kinds would read from the folders of
/// `args` (`--components`, else each input file's folder): inputs an output
/// must not replace (ARCHITECTURE.md §2).
pub fn component_files(args: &ImportArgs) -> Vec<PathBuf> {
    const SUFFIXES: [&str; 5] = [
        "sys_prompt.jsonl",
        "passages.jsonl",
        "history.jsonl",
        "web_search.jsonl",
        "user_input.jsonl",
    ];
    let folders: Vec<PathBuf> = match &args.components {
        Some(d) => vec![d.clone()],
        None => args
            .inputs()
            .filter(|p| p.as_os_str() != "-")
            .map(|p| {
                p.parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or(Path::new("."))
                    .to_path_buf()
            })
            .collect(),
    };
    folders
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| SUFFIXES.iter().any(|s| n.ends_with(s)))
        })
        .collect()
}

/// Reads `DIR/*<kind>.jsonl` (`passages_ids` reads `*passages.jsonl`):
/// lines of `{"<name>_id": N, "token_length": L}`. Returns the file and its
/// (id, tokens) in file order.
fn load_lengths(dir: &Path, kind: &str, max_line: usize) -> Result<(PathBuf, Vec<(u64, u64)>)> {
    let stem = kind.strip_suffix("_ids").unwrap_or(kind);
    let suffix = format!("{stem}.jsonl");
    let entries = std::fs::read_dir(dir).map_err(|source| Error::NoInput {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(&suffix) && !n.ends_with("trace.jsonl"))
        })
        .collect();
    found.sort();
    let file = match found.as_slice() {
        [one] => one.clone(),
        [] => {
            return Err(Error::Input(format!(
                "RAGPulse component `{kind}`: no `*{suffix}` in {}; name the folder of the component files with --components DIR",
                dir.display()
            )))
        }
        many => {
            return Err(Error::Input(format!(
                "RAGPulse component `{kind}`: {} files match `*{suffix}` in {}",
                many.len(),
                dir.display()
            )))
        }
    };
    let src = crate::jsonl::open_input(Some(&file))?;
    let mut rd = LineReader::new(src, max_line);
    let mut entries = Vec::new();
    let bad =
        |line: u64, msg: String| Error::Input(format!("{}: line {line}: {msg}", file.display()));
    while let Some(l) = rd.next_line()? {
        let obj: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(l.bytes).map_err(|e| bad(l.no, json_error(&e).to_string()))?;
        let len = obj.get("token_length").and_then(|v| v.as_u64());
        let id = obj
            .iter()
            .find(|(k, _)| k.ends_with("_id"))
            .and_then(|(_, v)| v.as_u64());
        match (id, len) {
            (Some(id), Some(len)) => entries.push((id, len)),
            _ => {
                return Err(bad(
                    l.no,
                    "expected {\"<component>_id\": N, \"token_length\": L} with whole numbers"
                        .into(),
                ))
            }
        }
    }
    Ok((file, entries))
}

impl Importer for RagPulse {
    fn file(&mut self, src: Box<dyn Read + Send>, file_no: usize, sink: &mut Sink) -> Result<()> {
        let folder = self.folder_for(file_no)?;
        if self.folder.as_ref() != Some(&folder) {
            // Another folder: its chunk ids are another id space.
            self.lengths.iter_mut().for_each(|l| *l = None);
            self.templates.clear();
            self.next_no = 0;
            if self.folder.is_some() {
                self.blocks.forget();
            }
            self.folder = Some(folder);
        }
        let mut rd = LineReader::new(src, self.max_line);
        // Quiet for a short run: the first plain line comes after 5 s.
        let mut progress = Progress::for_stderr(super::TOOL, std::time::Duration::from_secs(5));
        let read = sink.each_line(&mut rd, |sink, bytes| {
            sink.counts.rows_in += 1;
            let n = sink.counts.rows_in;
            if n.is_multiple_of(4096) {
                progress
                    .tick(|| format!("ragpulse: {n} rows, {} distinct blocks", self.blocks.len()));
            }
            Ok(match self.convert(bytes)? {
                Ok(t) if self.sort => {
                    self.held.push((t, self.row.clone()));
                    Ok(())
                }
                Ok(_) => sink.raw_row(&self.row).map(Ok)?,
                Err(e) => Err(e),
            })
        });
        progress.finish();
        read
    }

    fn finish(&mut self, sink: &mut Sink) -> Result<()> {
        // Stable: rows at the same time keep file order.
        self.held.sort_by_key(|(t, _)| *t);
        for (_, row) in std::mem::take(&mut self.held) {
            sink.raw_row(&row)?;
        }
        Ok(())
    }
}
