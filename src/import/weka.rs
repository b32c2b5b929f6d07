//! kv-cache-tester (WEKA) agent traces: one JSON object per session file,
//! `{"id", "block_size", "hash_id_scope", "requests": [...]}`. A request has
//! `t` (s from its session's start), `in`, `out`, `hash_ids` (blocks of the
//! file's `block_size`) and `think_time` (s between the previous answer and
//! this request); a `"type": "subagent"` entry holds the sub-agent's own
//! `requests`, timed from the entry's `t`.
//!
//! Each session becomes Mooncake turns: the first with a `timestamp` (the
//! session's start on the common timeline plus its `t`), later ones with
//! `delay` = the recorded think time (ARCHITECTURE.md §1: a later turn waits that
//! long after the previous turn completes). A sub-agent is a session of its
//! own, `<id>/<agent_id>`, with `parent_session_id` naming the session that
//! started it, written where it appears. Session k (in file order) starts
//! at k × `--session-gap` ms, or k / `--session-rate` s; at 0 by default.
//!
//! Ids are local to a file (`hash_id_scope: "local"`): they are renumbered
//! through one map per file, so two files never share a block by accident,
//! while a file's sub-agents keep sharing theirs (they all start with the
//! same system prompt). The files hash only full blocks (`floor(in / B)`
//! ids); a row then gets a fresh id for its partial last block, so every
//! row is consistent at the file's block size.

use std::collections::HashMap;
use std::io::Read;

use serde::Deserialize;

use super::{ImportArgs, Importer, Sink};
use crate::error::{Error, RecordError, Result};
use crate::record::Number;

#[derive(Deserialize)]
struct Session {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    block_size: Option<u64>,
    #[serde(default)]
    hash_id_scope: Option<String>,
    requests: Vec<WekaRequest>,
}

#[derive(Deserialize)]
struct WekaRequest {
    #[serde(default)]
    t: f64,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default, rename = "in")]
    input: Option<u64>,
    #[serde(default)]
    out: Option<u64>,
    #[serde(default)]
    hash_ids: Vec<u64>,
    #[serde(default)]
    think_time: Option<f64>,
    #[serde(default)]
    api_time: Option<f64>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    requests: Option<Vec<WekaRequest>>,
}

pub struct Weka {
    gap_ms: f64,
    block_size: Option<u64>,
    /// The block size of the files read so far (they must agree).
    file_block: Option<(u64, String)>,
    files: Vec<std::path::PathBuf>,
    /// Sessions started so far (the k of the timeline).
    sessions: u64,
    /// Local id -> output id, per file (or across files for `global` scope).
    /// foldhash's fixed hasher: ids come from files, not from an
    /// adversary, and SipHash was a fifth of the run (`perf`).
    ids: HashMap<u64, u64, foldhash::fast::FixedState>,
    next_id: u64,
    out_ids: Vec<u64>,
    /// Rows whose partial last block got a fresh id; rows cut to their length.
    tails: u64,
    cut: u64,
    /// Session names used so far, with the input that used each: a name
    /// met again (another file, or one file given twice) is made unique.
    names: HashMap<String, usize>,
    renamed: u64,
    /// Think times over an hour, named at the end.
    long: crate::delays::LongDelays,
}

/// One session's place: its id, its parent's, its start (ms).
struct Place<'a> {
    id: &'a str,
    parent: Option<&'a str>,
    start_ms: f64,
}

/// Seconds to whole ms: the files give `t` to the ms and think times in s.
fn ms(s: f64) -> f64 {
    (s * 1000.0).round()
}

impl Weka {
    pub fn new(args: &ImportArgs) -> Self {
        let gap_ms = match (args.session_gap, args.session_rate) {
            (Some(g), _) => g,
            (None, Some(r)) => 1000.0 / r,
            (None, None) => 0.0,
        };
        Weka {
            gap_ms,
            block_size: args.block_size,
            file_block: None,
            files: args.inputs().cloned().collect(),
            sessions: 0,
            ids: HashMap::default(),
            next_id: 0,
            out_ids: Vec::new(),
            tails: 0,
            cut: 0,
            names: HashMap::new(),
            renamed: 0,
            long: crate::delays::LongDelays::default(),
        }
    }

    /// How the sessions' starts were placed on the common timeline.
    fn placement(&self) -> String {
        let n = self.sessions;
        if self.gap_ms == 0.0 {
            format!(
                "{n} session{} all start at 0 ms (--session-gap MS or --session-rate R spreads them)",
                if n == 1 { "" } else { "s" }
            )
        } else {
            format!(
                "{n} session{} start {} ms apart (session k at k × {} ms)",
                if n == 1 { "" } else { "s" },
                self.gap_ms,
                self.gap_ms
            )
        }
    }

    fn fresh(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id - 1
    }

    /// The output ids of one request at block size `b`: the source ids
    /// renumbered, then made consistent with `input`.
    fn row_ids(&mut self, local: &[u64], input: u64, b: u64) {
        let need = input.div_ceil(b) as usize;
        self.out_ids.clear();
        let next = &mut self.next_id;
        for &h in local.iter().take(need) {
            let id = *self.ids.entry(h).or_insert_with(|| {
                *next += 1;
                *next - 1
            });
            self.out_ids.push(id);
        }
        if local.len() > need {
            // More ids than blocks: cut, and a cut-short last block is not
            // the full block that id names elsewhere.
            self.cut += 1;
            if !input.is_multiple_of(b) {
                self.out_ids.pop();
            }
        }
        if self.out_ids.len() < need {
            self.tails += 1;
        }
        while self.out_ids.len() < need {
            let id = self.fresh();
            self.out_ids.push(id);
        }
    }

    /// Writes the turns of one session (and, where they appear, its
    /// sub-agents' sessions).
    fn session(
        &mut self,
        reqs: &[WekaRequest],
        at: &Place<'_>,
        b: u64,
        path: &str,
        sink: &mut Sink,
    ) -> Result<std::result::Result<(), RecordError>> {
        let mut prev: Option<&WekaRequest> = None;
        let mut subs = 0usize;
        for (k, r) in reqs.iter().enumerate() {
            if r.kind.as_deref() == Some("subagent") {
                subs += 1;
                let Some(inner) = &r.requests else {
                    return Ok(Err(RecordError::new(format!(
                        "{path}[{k}]: a sub-agent without `requests`"
                    ))));
                };
                let name = match &r.agent_id {
                    Some(a) => format!("{}/{a}", at.id),
                    None => format!("{}/subagent{subs}", at.id),
                };
                let start_ms = match crate::limits::time_ms(&format!("{path}[{k}].t"), ms(r.t))
                    .and_then(|t| {
                        crate::limits::time_ms(&format!("{path}[{k}].t"), at.start_ms + t)
                    }) {
                    Ok(t) => t,
                    Err(e) => return Ok(Err(e)),
                };
                let sub = Place {
                    id: &name,
                    parent: Some(at.id),
                    start_ms,
                };
                match self.session(inner, &sub, b, &format!("{path}[{k}].requests"), sink)? {
                    Ok(()) => continue,
                    Err(e) => return Ok(Err(e)),
                }
            }
            sink.counts.rows_in += 1;
            let (Some(input), Some(output)) = (r.input, r.out) else {
                return Ok(Err(RecordError::new(format!(
                    "{path}[{k}]: a request needs `in` and `out`"
                ))));
            };
            let field = |f: &str| format!("{path}[{k}].{f}");
            let checked = crate::limits::tokens(&field("in"), input)
                .and_then(|_| crate::limits::tokens(&field("out"), output))
                .and_then(|_| crate::limits::time_ms(&field("t"), ms(r.t)))
                .and_then(|t| crate::limits::time_ms(&field("t"), at.start_ms + t));
            let ts = match checked {
                Ok(ts) => ts,
                Err(e) => return Ok(Err(e)),
            };
            let delay = prev.map(|p| match r.think_time {
                Some(th) => ms(th),
                // Without a think time: the gap between the two
                // requests, less the previous one's service time.
                None => (ms(r.t) - ms(p.t) - ms(p.api_time.unwrap_or(0.0))).max(0.0),
            });
            if delay.is_some_and(|d| !d.is_finite() || d < 0.0) {
                return Ok(Err(RecordError::new(format!(
                    "{path}[{k}]: `think_time` must be at least 0"
                ))));
            }
            if let Some(Err(e)) = delay.map(|d| crate::limits::time_ms(&field("think_time"), d)) {
                return Ok(Err(e));
            }
            if let Some(d) = delay {
                // The output line this row is about to be written on.
                self.long.observe(sink.counts.rows_out + 1, d);
            }
            self.row_ids(&r.hash_ids, input, b);
            let ids = &self.out_ids;
            sink.row(|w| {
                // Whole ms (see `ms`), written as integers; a session's
                // first turn has a timestamp, later ones a delay.
                if delay.is_none() {
                    w.timestamp(Number::Int(ts as i64));
                }
                w.session_id(at.id);
                if let Some(d) = delay {
                    w.delay(Number::Int(d as i64));
                }
                w.input_length(input);
                w.output_length(output);
                w.hash_ids(ids);
                if let Some(p) = at.parent {
                    w.extra_str("parent_session_id", p);
                }
            })?;
            prev = Some(r);
        }
        Ok(Ok(()))
    }

    fn one(
        &mut self,
        s: &Session,
        file_no: usize,
        sink: &mut Sink,
    ) -> Result<std::result::Result<(), RecordError>> {
        let Some(b) = s.block_size.filter(|&b| b > 0) else {
            return Ok(Err(RecordError::field(
                "block_size",
                "missing or 0: the file must say its block size",
            )));
        };
        let mut name = s.id.clone().unwrap_or_else(|| {
            self.files
                .get(file_no)
                .and_then(|p| p.file_stem())
                .map_or_else(
                    || format!("session{}", self.sessions),
                    |n| n.to_string_lossy().into_owned(),
                )
        });
        match (&self.file_block, self.block_size) {
            (_, Some(want)) if want != b => {
                return Err(Error::Input(format!(
                    "session `{name}` has block_size {b}, not --block-size {want} (weka keeps the file's block size)"
                )))
            }
            (Some((seen, first)), _) if *seen != b => {
                return Err(Error::Input(format!(
                    "session `{name}` has block_size {b}, but `{first}` has {seen}: one trace needs one block size"
                )))
            }
            (Some(_), _) => {}
            (None, _) => self.file_block = Some((b, name.clone())),
        }
        if self.names.get(&name).is_some_and(|&f| f != file_no) {
            // The same id in another file (or the same file twice): another
            // session, kept apart under the first free `<id>#<input no.>`.
            let base = format!("{name}#{}", file_no + 1);
            let mut unique = base.clone();
            let mut n = 1;
            while self.names.contains_key(&unique) {
                n += 1;
                unique = format!("{base}.{n}");
            }
            name = unique;
            self.renamed += 1;
        }
        self.names.insert(name.clone(), file_no);
        if s.hash_id_scope.as_deref() != Some("global") {
            self.ids.clear();
        }
        let start_ms = if self.sessions == 0 {
            0.0
        } else {
            self.sessions as f64 * self.gap_ms
        };
        if !(0.0..=crate::limits::MAX_TIME_MS).contains(&start_ms) {
            return Err(Error::Usage(format!(
                "session {} (`{name}`) would start at {start_ms:e} ms, beyond the limit of 2^53 ms: \
                 lower --session-gap or raise --session-rate",
                self.sessions + 1
            )));
        }
        let at = Place {
            id: &name,
            parent: None,
            start_ms,
        };
        self.sessions += 1;
        self.session(&s.requests, &at, b, "requests", sink)
    }
}

/// The 1-based line of byte `offset` in `bytes`.
fn line_at(bytes: &[u8], offset: usize) -> u64 {
    1 + memchr::memchr_iter(b'\n', &bytes[..offset.min(bytes.len())]).count() as u64
}

impl Importer for Weka {
    fn file(
        &mut self,
        mut src: Box<dyn Read + Send>,
        file_no: usize,
        sink: &mut Sink,
    ) -> Result<()> {
        // A session is one JSON object (usually the whole file), so there
        // is nothing to stream; reading it whole lets messages name lines.
        let mut bytes = Vec::new();
        src.read_to_end(&mut bytes)?;
        let body = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&bytes);
        let mut stream = serde_json::Deserializer::from_slice(body).into_iter::<Session>();
        loop {
            let start = stream.byte_offset();
            let s = match stream.next() {
                None => return Ok(()),
                Some(Ok(s)) => s,
                Some(Err(e)) => {
                    // serde_json counts lines from the start of the slice.
                    let err = RecordError::new(format!(
                        "column {}: {}",
                        e.column(),
                        crate::nat::reader::error_text(&e)
                    ));
                    // The rest of the file cannot be read after a syntax error.
                    return sink.bad(e.line() as u64, err);
                }
            };
            let first = start
                + body[start..]
                    .iter()
                    .take_while(|b| b.is_ascii_whitespace())
                    .count();
            if let Err(e) = self.one(&s, file_no, sink)? {
                sink.bad(line_at(body, first), e)?;
            }
        }
    }

    fn finish(&mut self, _sink: &mut Sink) -> Result<()> {
        if let Some((b, _)) = &self.file_block {
            let mut note =
                format!("mc-import: weka: block size {b} (use --block-size {b} downstream)");
            if self.tails > 0 {
                note.push_str(&format!(
                    "; {} rows had no id for their partial last block and got a fresh one",
                    self.tails
                ));
            }
            if self.cut > 0 {
                note.push_str(&format!(
                    "; {} rows had more ids than blocks and were cut",
                    self.cut
                ));
            }
            if self.renamed > 0 {
                note.push_str(&format!(
                    "; {} sessions had an id an earlier input already used and were kept apart as `<id>#<input no.>`",
                    self.renamed
                ));
            }
            eprintln!("{note}");
            eprintln!("mc-import: weka: {}", self.placement());
            if let Some(note) = self.long.note() {
                eprintln!("mc-import: weka: note: {note} (line numbers are the output's)");
            }
        }
        Ok(())
    }
}
