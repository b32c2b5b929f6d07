//! `from-trace`: AIBrix's `azure` and `mooncake` trace types on any Mooncake
//! trace: its own arrival times (sub-second, unless --interval-ms groups
//! them), output lengths, sessions and delays are kept; a prompt file gives
//! each row a real prompt of about its input length (tolerance from 10%).

use std::collections::HashMap;
use std::path::PathBuf;

use super::sink::{Request, Sink};
use super::Common;
use crate::error::{Error, RecordError, Result};
use crate::jsonl::{self, LineReader};
use crate::record::{Field, Record};

#[derive(Debug, Clone, clap::Args)]
pub struct FromTraceArgs {
    /// The Mooncake trace (default: stdin), e.g. from `mc-import --from azure`.
    #[arg(long, short = 'i', visible_alias = "input", value_name = "FILE")]
    pub trace: Option<PathBuf>,

    /// Group arrivals into windows of MS (each row's timestamp becomes its
    /// window's start), as AIBrix does; default: keep every arrival time.
    #[arg(long, value_name = "MS")]
    pub interval_ms: Option<u64>,

    /// Stop at rows arriving at or after MS (default: the whole trace).
    #[arg(long, value_name = "MS")]
    pub duration_ms: Option<u64>,
}

fn data(line: u64, err: RecordError) -> Error {
    Error::Data { line, err }
}

pub fn run(common: &Common, a: &FromTraceArgs, sink: &mut Sink) -> Result<()> {
    if a.interval_ms == Some(0) {
        return Err(Error::Usage("--interval-ms must be at least 1".into()));
    }
    if common.format == super::sink::Format::Aibrix {
        // Later turns are timed by delays: their times come out of order.
        sink.set_unordered();
    }
    let mut reader = LineReader::new(
        jsonl::open_input(a.trace.as_deref())?,
        jsonl::DEFAULT_MAX_LINE_BYTES,
    );
    let mut last_at: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut ids = Vec::new();
    let end = a.duration_ms.unwrap_or(u64::MAX);
    while let Some(line) = reader.next_line()? {
        let no = line.no;
        let rec = Record::parse(line.bytes).map_err(|e| data(no, e))?;
        let ts = rec
            .number(Field::Timestamp)
            .map_err(|e| data(no, e))?
            .map(|n| n.as_f64().max(0.0) as u64)
            .map(|t| a.interval_ms.map_or(t, |w| t / w * w));
        let delay = rec
            .number(Field::Delay)
            .map_err(|e| data(no, e))?
            .map(|n| n.as_f64().max(0.0) as u64);
        let input = rec
            .uint(Field::InputLength)
            .map_err(|e| data(no, e))?
            .ok_or_else(|| {
                data(
                    no,
                    RecordError::field(
                        "input_length",
                        "missing (from-trace takes lengths from the trace)",
                    ),
                )
            })?;
        let output = rec
            .uint(Field::OutputLength)
            .map_err(|e| data(no, e))?
            .unwrap_or(0);
        rec.hash_ids_into(&mut ids).map_err(|e| data(no, e))?;
        let raw_sid = rec.session_id().map_err(|e| data(no, e))?;
        let session = match raw_sid {
            Some(raw) if raw.first() == Some(&b'"') => Some(
                serde_json::from_slice::<String>(raw)
                    .map_err(|e| data(no, RecordError::field("session_id", e)))?,
            ),
            Some(raw) => Some(String::from_utf8_lossy(raw).into_owned()),
            None => None,
        };
        let prev = raw_sid.and_then(|r| last_at.get(r).copied());
        let at = match (ts, delay, prev) {
            (Some(t), _, _) => t,
            (None, Some(d), Some(p)) => p + d,
            (None, _, p) => p.unwrap_or(0),
        };
        if at >= end {
            if ts.is_some() && raw_sid.is_none() {
                // Rows are in time order without sessions: nothing later fits.
                break;
            }
            continue;
        }
        if let Some(r) = raw_sid {
            last_at.insert(r.to_vec(), at);
        }
        sink.emit(&Request {
            timestamp: ts,
            at_ms: at,
            session_id: session.as_deref(),
            delay: if ts.is_some() { None } else { delay },
            input_length: input,
            output_length: output,
            hash_ids: &ids,
        })?;
    }
    Ok(())
}
