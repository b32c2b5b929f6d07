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
//! block ([`BlockIds`]). Two rows share a block id exactly when they share
//! the prompt up to the end of that block.
//!
//! `input_length` is 6 to 12 tokens more than the components in the real
//! file (chat-template tokens). Those are taken as one last chunk named by
//! its length: rows with the same components and the same overhead share
//! every block, as their prompts would; any other row differs in it.

use std::borrow::Cow;
use std::collections::HashMap;

/// The tables' hasher: foldhash's, fixed (ids come from files, not from
/// an adversary; SipHash was an eighth of the run time).
type Fast = foldhash::fast::FixedState;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::{json_error, time, ImportArgs, Importer, SessionId, Sink};
use crate::error::{Error, RecordError, Result};
use crate::jsonl::LineReader;
use crate::progress::Progress;

/// The kind of the template-overhead pseudo-chunk (its id is its length).
const TEMPLATE: u16 = u16::MAX;

/// Content-addressed block ids: a block's key is its parent's id and the
/// pieces it covers (component kind, chunk id, token range); keys get dense
/// ids in first-seen order.
///
/// Memory is O(distinct blocks), kept small: a chunk's length is fixed for
/// the folder its table came from, so a block's pieces follow from the
/// token its first piece starts at and the chunks it covers in order (a
/// piece after the first starts at its chunk's token 0; every piece but the
/// last runs to its chunk's end; the last ends at the block's end, or at
/// its chunk's end in a prompt's last, partial block, and the two cannot
/// cover the same chunks: the chunks' lengths sum to more than B in the
/// one and less in the other). A key is then `[parent (2 words), start (2
/// words), chunk numbers…]`, the chunks numbered densely per folder, packed
/// in one arena of u32 words; the table holds only the block ids.
pub struct BlockIds {
    block: u64,
    /// (kind, chunk id) -> its dense number in the keys.
    chunks: HashMap<(u16, u64), u32, Fast>,
    /// Every block's key, back to back; `starts[id]` is where block `id`'s begins.
    keys: Vec<u32>,
    starts: Vec<usize>,
    table: hashbrown::HashTable<u64>,
    hasher: Fast,
    /// The key being built.
    scratch: Vec<u32>,
}

impl BlockIds {
    pub fn new(block: u64) -> Self {
        BlockIds {
            block: block.max(1),
            chunks: HashMap::default(),
            keys: Vec::new(),
            starts: vec![0],
            table: hashbrown::HashTable::new(),
            hasher: Fast::default(),
            scratch: Vec::new(),
        }
    }

    /// Blocks named so far.
    fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Forgets every block (the next ids are new ones): chunk ids of
    /// another component folder name other content.
    fn forget(&mut self) {
        self.table.clear();
        self.chunks.clear();
    }

    /// The id of the block whose key is in `scratch`.
    fn intern(&mut self) -> u64 {
        use std::hash::BuildHasher;
        let hash = self.hasher.hash_one(&self.scratch[..]);
        let (keys, starts, scratch) = (&self.keys, &self.starts, &self.scratch);
        let same = |&id: &u64| {
            let i = id as usize;
            keys[starts[i]..starts[i + 1]] == scratch[..]
        };
        if let Some(&id) = self.table.find(hash, same) {
            return id;
        }
        let id = (self.starts.len() - 1) as u64;
        self.keys.extend_from_slice(&self.scratch);
        self.starts.push(self.keys.len());
        let (keys, starts, hasher) = (&self.keys, &self.starts, &self.hasher);
        self.table.insert_unique(hash, id, |&id| {
            let i = id as usize;
            hasher.hash_one(&keys[starts[i]..starts[i + 1]])
        });
        id
    }

    /// Starts the key of a block after `parent` whose first piece starts
    /// at token `start` of its chunk.
    fn begin(&mut self, parent: u64, start: u64) {
        self.scratch.clear();
        for w in [parent, start] {
            self.scratch.extend([w as u32, (w >> 32) as u32]);
        }
    }

    fn chunk_no(&mut self, kind: u16, chunk: u64) -> u32 {
        let n = self.chunks.len() as u32;
        *self.chunks.entry((kind, chunk)).or_insert(n)
    }

    /// The block ids of a prompt made of `chunks` (kind, chunk id, tokens)
    /// in order, into `out`: `ceil(total / B)` ids, the last block partial.
    fn prompt(&mut self, chunks: impl IntoIterator<Item = (u16, u64, u64)>, out: &mut Vec<u64>) {
        out.clear();
        let (mut parent, mut fill) = (u64::MAX, 0);
        self.begin(parent, 0);
        for (kind, chunk, len) in chunks {
            let mut at = 0;
            let no = if len > 0 {
                self.chunk_no(kind, chunk)
            } else {
                0
            };
            while at < len {
                if fill == 0 {
                    self.begin(parent, at);
                }
                let take = (len - at).min(self.block - fill);
                self.scratch.push(no);
                at += take;
                fill += take;
                if fill == self.block {
                    parent = self.intern();
                    out.push(parent);
                    fill = 0;
                }
            }
        }
        if fill > 0 {
            out.push(self.intern());
        }
    }
}

/// A timestamp as RAGPulse writes it (a string of seconds), or a number.
#[derive(Deserialize)]
#[serde(untagged)]
enum Seconds {
    Text(String),
    Number(serde_json::Number),
}

/// The `hash_ids` object's lists in the order written (the prompt's order).
/// Names are borrowed from the line when they can be (a name without
/// escapes, always in RAGPulse): an owned `String` per name was a malloc
/// and a free per component, 5-10% of the instructions in cachegrind.
struct Components<'a>(Vec<(Cow<'a, str>, Vec<u64>)>);

impl<'de: 'a, 'a> Deserialize<'de> for Components<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Components<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of component id lists")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<Components<'a>, A::Error> {
                let mut v = Vec::new();
                while let Some(k) = m.next_key::<Name<'a>>()? {
                    v.push((k.0, m.next_value::<Vec<u64>>()?));
                }
                Ok(Components(v))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// A component's name: borrowed from the line unless it has escapes.
struct Name<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Name<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Name<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a component name")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> std::result::Result<Name<'a>, E> {
                Ok(Name(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> std::result::Result<Name<'a>, E> {
                Ok(Name(Cow::Owned(s.to_string())))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct RagRequest<'a> {
    timestamp: Seconds,
    input_length: u64,
    output_length: u64,
    #[serde(borrow)]
    hash_ids: Components<'a>,
    #[serde(default)]
    session_id: Option<SessionId>,
}

/// One component's chunk lengths, read from its companion file.
struct Lengths {
    file: PathBuf,
    tokens: HashMap<u64, u64, Fast>,
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
    blocks: BlockIds,
    ids: Vec<u64>,
    chunks: Vec<(u16, u64, u64)>,
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
            blocks: BlockIds::new(args.block_size.unwrap_or(512)),
            ids: Vec::new(),
            chunks: Vec::new(),
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
    fn kind(&mut self, kind: &str) -> Result<u16> {
        if let Some(k) = self.kinds.iter().position(|n| n == kind) {
            return Ok(k as u16);
        }
        if self.kinds.len() >= usize::from(TEMPLATE) {
            return Err(Error::Input("too many RAGPulse component kinds".into()));
        }
        self.kinds.push(kind.to_string());
        self.lengths.push(None);
        Ok((self.kinds.len() - 1) as u16)
    }

    /// Loads the lengths of kind `k` if they are not yet.
    fn load(&mut self, k: u16) -> Result<()> {
        let slot = usize::from(k);
        if self.lengths[slot].is_none() {
            let dir = self.folder.clone().unwrap_or_default();
            self.lengths[slot] = Some(load_lengths(&dir, &self.kinds[slot], self.max_line)?);
        }
        Ok(())
    }

    /// Converts one trace line into `self.row`; returns its time in ns.
    fn convert(&mut self, line: &[u8]) -> Result<std::result::Result<i64, RecordError>> {
        let req: RagRequest = match serde_json::from_slice(line) {
            Ok(r) => r,
            Err(e) => return Ok(Err(json_error(&e))),
        };
        let t = match &req.timestamp {
            Seconds::Text(s) => time::parse_seconds(s.trim().as_bytes()),
            Seconds::Number(n) => time::parse_seconds(n.to_string().as_bytes()),
        };
        let Some(t) = t else {
            return Ok(Err(RecordError::field(
                "timestamp",
                "expected seconds (like \"82\" or 82.5)",
            )));
        };
        if t < 0 {
            return Ok(Err(RecordError::field(
                "timestamp",
                format!(
                    "{} s is before the trace's start: times are seconds from 0",
                    t as f64 / 1e9
                ),
            )));
        }
        if let Err(e) = crate::limits::tokens("input_length", req.input_length)
            .and(crate::limits::tokens("output_length", req.output_length))
        {
            return Ok(Err(e));
        }
        self.chunks.clear();
        let mut sum = 0u64;
        for (name, list) in &req.hash_ids.0 {
            if list.is_empty() {
                continue;
            }
            let k = self.kind(name)?;
            self.load(k)?;
            let Some(lengths) = &self.lengths[usize::from(k)] else {
                continue;
            };
            for &chunk in list {
                let Some(&len) = lengths.tokens.get(&chunk) else {
                    return Ok(Err(RecordError::field(
                        &format!("hash_ids.{name}"),
                        format!("chunk {chunk} is not in {}", lengths.file.display()),
                    )));
                };
                sum = sum.saturating_add(len);
                self.chunks.push((k, chunk, len));
            }
        }
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
            self.chunks.push((TEMPLATE, template, template));
        }
        self.blocks
            .prompt(self.chunks.iter().copied(), &mut self.ids);
        self.row.clear();
        let mut ts = Vec::new();
        time::write_ms(t, self.float, &mut ts);
        let mut w = super::row::ObjWriter::new(&mut self.row);
        w.timestamp_text(&ts);
        if let Some(s) = &req.session_id {
            w.session_id(&s.text());
        }
        w.input_length(req.input_length);
        w.output_length(req.output_length);
        w.hash_ids(&self.ids);
        w.finish();
        Ok(Ok(t))
    }
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
/// lines of `{"<name>_id": N, "token_length": L}`.
fn load_lengths(dir: &Path, kind: &str, max_line: usize) -> Result<Lengths> {
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
    let mut tokens = HashMap::default();
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
            (Some(id), Some(len)) => {
                tokens.insert(id, len);
            }
            _ => {
                return Err(bad(
                    l.no,
                    "expected {\"<component>_id\": N, \"token_length\": L} with whole numbers"
                        .into(),
                ))
            }
        }
    }
    Ok(Lengths { file, tokens })
}

impl Importer for RagPulse {
    fn file(&mut self, src: Box<dyn Read + Send>, file_no: usize, sink: &mut Sink) -> Result<()> {
        let folder = self.folder_for(file_no)?;
        if self.folder.as_ref() != Some(&folder) {
            // Another folder: its chunk ids are another id space.
            self.lengths.iter_mut().for_each(|l| *l = None);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_requests_sharing_a_system_prompt_and_passages() {
        // B = 4. Chunks: system prompt S (kind 0, id 1) of 6 tokens;
        // passages P1 (kind 1, id 10) of 3 and P2 (kind 1, id 11) of 2;
        // user inputs U1, U2, U3 (kind 2, ids 20, 21, 22) of 1, 2, 1.
        let mut b = BlockIds::new(4);
        let mut ids = Vec::new();
        let (s, p1, p2) = ((0, 1, 6), (1, 10, 3), (1, 11, 2));
        // A = S P1 P2 U1, 12 tokens:
        //   S[0,4) -> 0;  S[4,6) P1[0,2) -> 1;  P1[2,3) P2[0,2) U1[0,1) -> 2.
        b.prompt([s, p1, p2, (2, 20, 1)], &mut ids);
        assert_eq!(ids, [0, 1, 2]);
        // B = S P1 P2 U2, 13 tokens: the first two blocks as A's; the third
        // holds U2[0,1) instead of U1[0,1) -> 3; U2[1,2) is a partial 4th -> 4.
        b.prompt([s, p1, p2, (2, 21, 2)], &mut ids);
        assert_eq!(ids, [0, 1, 3, 4]);
        // C = S P2 P1 U3 + 2 template tokens, 14 tokens: S[0,4) -> 0;
        // S[4,6) P2[0,2) differs from A's second block -> 5;
        // P1[0,3) U3[0,1) -> 6; the template T[0,2) -> 7.
        b.prompt([s, p2, p1, (2, 22, 1), (TEMPLATE, 2, 2)], &mut ids);
        assert_eq!(ids, [0, 5, 6, 7]);
        // A again shares everything; a prompt of exactly 8 tokens of S then
        // P1 has two blocks.
        b.prompt([s, p1, p2, (2, 20, 1)], &mut ids);
        assert_eq!(ids, [0, 1, 2]);
        b.prompt([s, (1, 10, 2)], &mut ids);
        assert_eq!(ids, [0, 1]);
        // The same pieces after another parent are another block: P1[0,3)
        // U3[0,1) came after block 5 in C; after a 4-token system prompt
        // S' (id 2) ... S'[0,4) -> 8, then P1[0,3) U3[0,1) -> 9, not 6.
        b.prompt([(0, 2, 4), p1, (2, 22, 1)], &mut ids);
        assert_eq!(ids, [8, 9]);
    }

    #[test]
    fn a_partial_block_is_not_a_full_one() {
        // S of 5 tokens at B = 4: [0,4) -> 0, then [4,5) alone -> 1; a longer
        // prompt S + P covers S[4,5) P[0,3) in its second block -> 2.
        let mut b = BlockIds::new(4);
        let mut ids = Vec::new();
        b.prompt([(0, 1, 5)], &mut ids);
        assert_eq!(ids, [0, 1]);
        b.prompt([(0, 1, 5), (1, 7, 3)], &mut ids);
        assert_eq!(ids, [0, 2]);
    }
}
