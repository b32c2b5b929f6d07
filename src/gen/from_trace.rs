//! `from-trace`: AIBrix's `azure` and `mooncake` trace types on any Mooncake
//! trace: its own arrival times (sub-second, unless --interval-ms groups
//! them), output lengths, sessions and delays are kept; a prompt file gives
//! each row a real prompt of about its input length (tolerance from 10%).

use std::collections::HashMap;
use std::path::PathBuf;

use super::sink::{GenRequest, Sink};
use super::Common;
use crate::error::{Error, RecordError, Result};
use crate::jsonl::{self, ErrorPolicy, LineReader, OnError};
use crate::record::{Field, Record};

#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Example:\n  mc-gen from-trace -i conversation_trace.jsonl --prompt-file prompts.jsonl --tokenizer tok.json"
)]
pub struct FromTraceArgs {
    /// The Mooncake trace (default: stdin).
    #[arg(long, short = 'i', visible_alias = "input", value_name = "FILE")]
    pub trace: Option<PathBuf>,

    /// Group arrivals into windows of MS (each row's timestamp becomes its
    /// window's start), as AIBrix does; default: keep every arrival time.
    #[arg(long, value_name = "MS")]
    pub interval_ms: Option<u64>,

    /// Stop at rows arriving at or after MS (default: the whole trace).
    #[arg(long, value_name = "MS")]
    pub duration_ms: Option<u64>,

    /// A bad trace line: stop with exit code 65, or skip it and report the count.
    #[arg(long, value_enum, default_value_t = OnError::Fail, value_name = "POLICY")]
    pub on_error: OnError,

    /// Longest accepted line; a longer one is a bad line.
    #[arg(long, default_value_t = jsonl::DEFAULT_MAX_LINE_BYTES, value_name = "BYTES")]
    pub max_line_bytes: usize,
}

/// One trace row, as the generator needs it.
struct TraceRow {
    ts: Option<u64>,
    delay: Option<u64>,
    input: u64,
    output: u64,
    /// The session id as raw JSON (equal raw values name one session) and as text.
    session: Option<(Vec<u8>, String)>,
}

fn parse_row(
    rec: &Record<'_>,
    ids: &mut Vec<u64>,
    interval: Option<u64>,
) -> Result<TraceRow, RecordError> {
    // Times and lengths within the limits (`crate::limits`): a negative or
    // huge time is refused, never clamped or saturated.
    let ts = rec
        .number(Field::Timestamp)?
        .map(|n| crate::limits::time_ms("timestamp", n.as_f64()))
        .transpose()?
        .map(|t| t as u64)
        .map(|t| interval.map_or(t, |w| t / w * w));
    let delay = rec
        .number(Field::Delay)?
        .map(|n| crate::limits::time_ms("delay", n.as_f64()))
        .transpose()?
        .map(|t| t as u64);
    let input = rec.uint(Field::InputLength)?.ok_or_else(|| {
        RecordError::field(
            "input_length",
            "missing (from-trace takes lengths from the trace)",
        )
    })?;
    crate::limits::tokens("input_length", input)?;
    let output =
        crate::limits::tokens("output_length", rec.uint(Field::OutputLength)?.unwrap_or(0))?;
    rec.hash_ids_into(ids)?;
    let session = match rec.session_id()? {
        Some(raw) if raw.first() == Some(&b'"') => Some((
            raw.to_vec(),
            serde_json::from_slice::<String>(raw)
                .map_err(|e| RecordError::field("session_id", e))?,
        )),
        Some(raw) => Some((raw.to_vec(), String::from_utf8_lossy(raw).into_owned())),
        None => None,
    };
    Ok(TraceRow {
        ts,
        delay,
        input,
        output,
        session,
    })
}

pub fn run(tool: &str, common: &Common, a: &FromTraceArgs, sink: &mut Sink) -> Result<()> {
    if a.interval_ms == Some(0) {
        return Err(Error::Usage("--interval-ms must be at least 1".into()));
    }
    if common.format == super::sink::Format::Aibrix {
        // Later turns are timed by delays: their times come out of order.
        sink.set_unordered();
    }
    let mut reader = LineReader::new(jsonl::open_input(a.trace.as_deref())?, a.max_line_bytes);
    let mut policy = ErrorPolicy::new(a.on_error);
    let mut last_at: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut ids = Vec::new();
    let end = a.duration_ms.unwrap_or(u64::MAX);
    loop {
        let line = match reader.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                policy.handle(e)?;
                continue;
            }
        };
        let no = line.no;
        let row = match Record::parse(line.bytes)
            .and_then(|rec| parse_row(&rec, &mut ids, a.interval_ms))
        {
            Ok(row) => row,
            Err(e) => {
                policy.record(no, e)?;
                continue;
            }
        };
        let prev = row
            .session
            .as_ref()
            .and_then(|(r, _)| last_at.get(r).copied());
        let at = match (row.ts, row.delay, prev) {
            (Some(t), _, _) => t,
            (None, Some(d), Some(p)) => p + d,
            (None, _, p) => p.unwrap_or(0),
        };
        if at >= end {
            if row.ts.is_some() && row.session.is_none() {
                // Rows are in time order without sessions: nothing later fits.
                break;
            }
            continue;
        }
        if let Some((raw, _)) = &row.session {
            last_at.insert(raw.clone(), at);
        }
        sink.emit(&GenRequest {
            timestamp: row.ts,
            at_ms: at,
            session_id: row.session.as_ref().map(|(_, s)| s.as_str()),
            delay: if row.ts.is_some() { None } else { row.delay },
            input_length: row.input,
            output_length: row.output,
            hash_ids: &ids,
            graph: None,
        })?;
    }
    crate::filter::report_skipped(tool, &policy);
    Ok(())
}
