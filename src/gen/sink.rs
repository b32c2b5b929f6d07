//! Where generated requests go: Mooncake rows, or AIBrix's workload format
//! (one line per timestamp, equal timestamps grouped). A prompt matcher, when
//! given, attaches a real prompt to each request on the way.

use crate::progress::Progress;
use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::jsonl::Output;
use crate::record::{Number, RowWriter};

use super::prompts::{Matcher, Picked};

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Mooncake JSONL rows (every mctrace tool reads them).
    Mooncake,
    /// AIBrix's workload JSONL: {"timestamp", "requests": [...]}.
    Aibrix,
}

/// One generated request, borrowed from the generator's buffers.
#[derive(Debug, Clone, Copy)]
pub struct GenRequest<'a> {
    /// The arrival time written for a session's first turn (and every
    /// request that is not a later turn), ms.
    pub timestamp: Option<u64>,
    /// The arrival time the request would have with zero service time: what
    /// AIBrix's format, which has no delays, gets as its timestamp.
    pub at_ms: u64,
    pub session_id: Option<&'a str>,
    /// For a later turn: ms after the previous turn completes.
    pub delay: Option<u64>,
    pub input_length: u64,
    pub output_length: u64,
    pub hash_ids: &'a [u64],
    /// The agent-graph fields (`mc-gen agent --graph`), written after the
    /// Mooncake fields; `None` for every other row.
    pub graph: Option<&'a GraphFields<'a>>,
}

/// A row's place in an agent graph (docs/guide/workloads-of-agents.md):
/// its id, the rows it waits for, the rows it spawns, the tool time before
/// it and whether it starts a fresh context.
#[derive(Debug, Clone, Copy, Default)]
pub struct GraphFields<'a> {
    pub request_id: &'a str,
    pub wait_for: &'a [String],
    pub branches: &'a [String],
    pub tool_wait_ms: Option<u64>,
    pub prefix_reset: bool,
}

impl GraphFields<'_> {
    /// Writes the fields present, in this order: `request_id`, `wait_for`,
    /// `branches`, `tool_wait_ms`, `prefix_reset` (empty lists and a false
    /// `prefix_reset` are left out, as Dynamo's rows leave them out).
    fn write(&self, w: &mut RowWriter<'_>) {
        w.extra_str("request_id", self.request_id);
        for (name, ids) in [("wait_for", self.wait_for), ("branches", self.branches)] {
            if !ids.is_empty() {
                w.extra_str_list(name, ids);
            }
        }
        if let Some(t) = self.tool_wait_ms {
            w.extra_raw("tool_wait_ms", itoa::Buffer::new().format(t).as_bytes());
        }
        if self.prefix_reset {
            w.extra_raw("prefix_reset", b"true");
        }
    }
}

/// Counts for the summary line.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub last_ms: u64,
}

pub struct Sink {
    out: Output,
    format: Format,
    matcher: Option<Matcher>,
    /// AIBrix lines need time order; generators whose requests come out of
    /// order (sessions) have them kept here until the end.
    unordered: bool,
    pending: BTreeMap<u64, Vec<u8>>,
    /// The AIBrix line being built, and its timestamp.
    group: Vec<u8>,
    group_ts: Option<u64>,
    pub counts: Counts,
    scratch: String,
    /// `--plot`: the rows written, gathered for the figure.
    pub plot: Option<crate::plot::trace::Collector>,
    /// Generated session id -> the prompt-file session its turns come from.
    conversations: std::collections::HashMap<String, usize>,
    /// The one reporter (`crate::progress`), ticked every 64k requests so
    /// it costs nothing.
    progress: Progress,
    started: std::time::Instant,
}

impl Sink {
    pub fn new(out: Output, format: Format, matcher: Option<Matcher>) -> Self {
        Sink {
            out,
            format,
            matcher,
            unordered: false,
            pending: BTreeMap::new(),
            group: Vec::new(),
            group_ts: None,
            counts: Counts::default(),
            scratch: String::new(),
            plot: None,
            conversations: std::collections::HashMap::new(),
            progress: Progress::for_stderr("mc-gen", std::time::Duration::from_secs(10)),
            started: std::time::Instant::now(),
        }
    }

    /// Declares that requests may arrive out of time order.
    pub fn set_unordered(&mut self) {
        self.unordered = true;
    }

    /// Whether prompts come from a sessioned prompt file (which then decides
    /// the session ids).
    pub fn has_matcher(&self) -> bool {
        self.matcher.is_some()
    }

    pub fn emit(&mut self, req: &GenRequest<'_>) -> Result<()> {
        self.check_time(req)?;
        self.count(req);
        let picked = self.pick_prompt(req);
        // The summary counts the prompts actually attached.
        self.counts.input_tokens = self
            .counts
            .input_tokens
            .saturating_add(picked.as_ref().map_or(req.input_length, |p| p.prompt_len));
        match self.format {
            Format::Mooncake => self.write_mooncake(req, picked.as_ref()),
            Format::Aibrix => self.write_aibrix(req, picked.as_ref()),
        }
    }

    /// Every mode's times pass here: one beyond 2^53 ms comes from a rate
    /// too low for the run (its `as u64` saturated), never a real time.
    fn check_time(&self, req: &GenRequest<'_>) -> Result<()> {
        if req.at_ms as f64 > crate::limits::MAX_TIME_MS
            || req
                .delay
                .is_some_and(|d| d as f64 > crate::limits::MAX_TIME_MS)
        {
            return Err(crate::error::Error::Usage(format!(
                "request {}: its time ({} ms) is beyond the limit of 2^53 ms: the rate \
                 (--qps, --session-rate, the traffic file) is too low for the requests asked for",
                self.counts.requests + 1,
                req.at_ms
            )));
        }
        Ok(())
    }

    /// Counts `req` for the summary, and ticks the progress line.
    fn count(&mut self, req: &GenRequest<'_>) {
        self.counts.requests += 1;
        self.counts.output_tokens = self.counts.output_tokens.saturating_add(req.output_length);
        self.counts.last_ms = self.counts.last_ms.max(req.at_ms);
        if self.counts.requests & 0xffff == 0 {
            let (c, started) = (&self.counts, self.started);
            self.progress.tick(|| {
                format!(
                    "{} requests, up to {:.0} s of trace, {:.0} s elapsed",
                    c.requests,
                    c.last_ms as f64 / 1000.0,
                    started.elapsed().as_secs_f64()
                )
            });
        }
    }

    /// The prompt-file prompt for `req`, when there is a prompt file.
    fn pick_prompt(&mut self, req: &GenRequest<'_>) -> Option<Picked> {
        match (self.matcher.as_mut(), req.session_id) {
            (None, _) => None,
            (Some(m), None) => Some(m.pick(req.input_length, req.output_length)),
            // A generated conversation keeps its own id and timing; its
            // turns take the turns of one prompt-file session in order.
            (Some(m), Some(sid)) => {
                let from = if req.timestamp.is_some() {
                    None
                } else {
                    self.conversations.get(sid).copied()
                };
                let mut p = m.pick_next(from, req.input_length, req.output_length);
                if let Some(fs) = p.file_session {
                    self.conversations.insert(sid.to_string(), fs);
                }
                p.session_id = None;
                Some(p)
            }
        }
    }

    /// Writes `req` as one Mooncake row (and adds it to --plot's figure).
    fn write_mooncake(&mut self, req: &GenRequest<'_>, picked: Option<&Picked>) -> Result<()> {
        let buf = self.out.buffer();
        let start = buf.len();
        match picked {
            Some(p) => write_text_row(buf, req, &p.text, p.session_id.as_deref()),
            None => write_row(buf, req),
        }
        if let Some(plot) = self.plot.as_mut() {
            let row = buf[start..].strip_suffix(b"\n").unwrap_or(&buf[start..]);
            plot.add(row)
                .map_err(|e| Error::Other(anyhow::anyhow!("--plot: {e}")))?;
        }
        self.out.end_line()
    }

    /// Adds `req` to the AIBrix line of its time: held back by time when
    /// requests may come out of order, else written when the time moves on.
    fn write_aibrix(&mut self, req: &GenRequest<'_>, picked: Option<&Picked>) -> Result<()> {
        let (text, len, sid) = match picked {
            Some(p) => (
                p.text.as_str(),
                p.prompt_len,
                p.session_id.as_deref().or(req.session_id),
            ),
            None => {
                filler(&mut self.scratch, req.input_length);
                (self.scratch.as_str(), req.input_length, req.session_id)
            }
        };
        let mut item = Vec::with_capacity(text.len() + 96);
        write_aibrix_request(&mut item, text, len, req.output_length, sid);
        if self.unordered {
            let slot = self.pending.entry(req.at_ms).or_default();
            if !slot.is_empty() {
                slot.push(b',');
            }
            slot.extend_from_slice(&item);
            return Ok(());
        }
        if self.group_ts != Some(req.at_ms) {
            self.flush_group()?;
            self.group_ts = Some(req.at_ms);
        } else {
            self.group.push(b',');
        }
        self.group.extend_from_slice(&item);
        Ok(())
    }

    fn flush_group(&mut self) -> Result<()> {
        if let Some(ts) = self.group_ts.take() {
            let buf = self.out.buffer();
            write_aibrix_line(buf, ts, &self.group);
            self.group.clear();
            self.out.end_line()?;
        }
        Ok(())
    }

    /// ", N prompts within tolerance, M nearest" when prompts were matched.
    pub fn matcher_summary(&self) -> String {
        match &self.matcher {
            Some(m) => format!(
                ", prompts: {} within tolerance, {} nearest",
                m.within_tolerance, m.nearest
            ),
            None => String::new(),
        }
    }

    /// Writes what is still held and flushes the output.
    pub fn finish(&mut self) -> Result<Counts> {
        self.progress.finish();
        self.flush_group()?;
        for (ts, items) in std::mem::take(&mut self.pending) {
            write_aibrix_line(self.out.buffer(), ts, &items);
            self.out.end_line()?;
        }
        self.out.flush()?;
        Ok(self.counts)
    }
}

fn push_u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

fn push_str(buf: &mut Vec<u8>, s: &str) {
    // serde_json escapes exactly as JSON requires; writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *buf, s);
}

/// Starts a Mooncake row with its timing and session fields.
fn head<'b>(buf: &'b mut Vec<u8>, req: &GenRequest<'_>, sid: Option<&str>) -> RowWriter<'b> {
    let mut w = RowWriter::new(buf);
    // Every generated row has a timestamp or a delay; a trace row with
    // neither (from-trace) gets its arrival time, so no row lacks a time.
    let ts = match (req.timestamp, sid, req.delay) {
        (None, None, None) => Some(req.at_ms),
        (t, _, _) => t,
    };
    if let Some(t) = ts {
        w.timestamp(Number::UInt(t));
    }
    if let Some(s) = sid {
        w.session_id(s);
    }
    if let Some(d) = req.delay {
        w.delay(Number::UInt(d));
    }
    w
}

/// A Mooncake row through the one row writer (`record::RowWriter`):
/// `{"timestamp": T, ["session_id": S, ]["delay": D, ]"input_length": I,
/// "output_length": O, "hash_ids": [..]}`.
pub fn write_row(buf: &mut Vec<u8>, req: &GenRequest<'_>) {
    let mut w = head(buf, req, req.session_id);
    w.input_length(req.input_length);
    w.output_length(req.output_length);
    w.hash_ids(req.hash_ids);
    if let Some(g) = req.graph {
        g.write(&mut w);
    }
    w.finish();
}

/// A row carrying a real prompt: `text_input` replaces input_length and
/// hash_ids (AIPerf accepts exactly one of them).
fn write_text_row(buf: &mut Vec<u8>, req: &GenRequest<'_>, text: &str, sid: Option<&str>) {
    let mut w = head(buf, req, sid.or(req.session_id));
    w.text_input(text);
    w.output_length(req.output_length);
    if let Some(g) = req.graph {
        g.write(&mut w);
    }
    w.finish();
}

fn write_aibrix_request(
    buf: &mut Vec<u8>,
    text: &str,
    prompt_len: u64,
    output_len: u64,
    sid: Option<&str>,
) {
    buf.extend_from_slice(b"{\"prompt\":");
    push_str(buf, text);
    buf.extend_from_slice(b",\"prompt_length\":");
    push_u64(buf, prompt_len);
    buf.extend_from_slice(b",\"output_length\":");
    push_u64(buf, output_len);
    if let Some(s) = sid {
        buf.extend_from_slice(b",\"session_id\":");
        push_str(buf, s);
    }
    buf.push(b'}');
}

fn write_aibrix_line(buf: &mut Vec<u8>, ts: u64, items: &[u8]) {
    buf.extend_from_slice(b"{\"timestamp\":");
    push_u64(buf, ts);
    buf.extend_from_slice(b",\"requests\":[");
    buf.extend_from_slice(items);
    buf.extend_from_slice(b"]}\n");
}

/// A stand-in prompt of `n` words when no prompt file is given (AIBrix's
/// format needs a prompt; one short word is about one token in common
/// tokenizers, so `prompt_length` is approximate).
fn filler(s: &mut String, n: u64) {
    const WORDS: [&str; 8] = ["the", "a", "of", "and", "to", "in", "is", "it"];
    s.clear();
    for i in 0..n {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(WORDS[(i % 8) as usize]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(ids: &[u64]) -> GenRequest<'_> {
        GenRequest {
            timestamp: Some(5),
            at_ms: 5,
            session_id: None,
            delay: None,
            input_length: 600,
            output_length: 10,
            hash_ids: ids,
            graph: None,
        }
    }

    #[test]
    fn rows_are_valid_json_in_house_order() {
        let mut buf = Vec::new();
        write_row(&mut buf, &req(&[1, 2]));
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "{\"timestamp\": 5, \"input_length\": 600, \"output_length\": 10, \"hash_ids\": [1, 2]}\n"
        );
        let mut buf = Vec::new();
        let mut r = req(&[]);
        r.timestamp = None;
        r.delay = Some(7);
        r.session_id = Some("s\"1");
        write_row(&mut buf, &r);
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v["session_id"], "s\"1");
        assert_eq!(v["delay"], 7);
        assert!(v.get("timestamp").is_none());
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "{\"session_id\": \"s\\\"1\", \"delay\": 7, \"input_length\": 600, \"output_length\": 10, \"hash_ids\": []}\n"
        );
        // A prompt replaces input_length and hash_ids.
        let mut buf = Vec::new();
        write_text_row(&mut buf, &req(&[1]), "hi", Some("p"));
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "{\"timestamp\": 5, \"session_id\": \"p\", \"text_input\": \"hi\", \"output_length\": 10}\n"
        );
    }
}
