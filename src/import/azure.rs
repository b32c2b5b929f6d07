//! Azure LLM inference traces (2023 and the 2024 week-long files):
//! `TIMESTAMP,ContextTokens,GeneratedTokens`, one request a line. Rows keep
//! file order; timestamps are ms since the first row.

use std::io::Read;

use super::csv::{column_error, show, Fields, Header};
use super::row::SynthIds;
use super::{time, ImportArgs, Importer, Sink};
use crate::error::{RecordError, Result};
use crate::jsonl::LineReader;
use crate::record::parse_uint;

pub struct Azure {
    max_line: usize,
    float: bool,
    synth: Option<SynthIds>,
    /// The first row's time (ns since the epoch): the trace's zero.
    zero: Option<i64>,
    ts: Vec<u8>,
}

struct Cols {
    ts: usize,
    input: usize,
    output: usize,
}

impl Azure {
    pub fn new(args: &ImportArgs) -> Self {
        Azure {
            max_line: args.max_line_bytes,
            float: args.float_timestamps,
            synth: args
                .synth_hash_ids
                .then(|| SynthIds::new(args.block_size.unwrap_or(512))),
            zero: None,
            ts: Vec::new(),
        }
    }

    fn row(
        &mut self,
        h: &Header,
        c: &Cols,
        f: &Fields,
        line: &[u8],
    ) -> std::result::Result<(u64, u64), RecordError> {
        let get = |col| {
            f.get(line, col)
                .ok_or_else(|| column_error(h, col, "missing (too few columns)"))
        };
        let raw = get(c.ts)?;
        let t = time::parse_datetime(raw).ok_or_else(|| {
            column_error(
                h,
                c.ts,
                format!(
                    "expected a datetime like `2023-11-16 18:17:03.9799600` or `2024-05-10 00:00:00+00:00`, found {}",
                    show(raw)
                ),
            )
        })?;
        let uint = |col| -> std::result::Result<u64, RecordError> {
            let raw = get(col)?;
            parse_uint(raw).ok_or_else(|| {
                column_error(
                    h,
                    col,
                    format!("expected a non-negative integer, found {}", show(raw)),
                )
            })
        };
        let (input, output) = (uint(c.input)?, uint(c.output)?);
        let zero = *self.zero.get_or_insert(t);
        self.ts.clear();
        time::write_ms(t - zero, self.float, &mut self.ts);
        Ok((input, output))
    }
}

impl Importer for Azure {
    fn file(&mut self, src: Box<dyn Read>, _file_no: usize, sink: &mut Sink) -> Result<()> {
        let mut rd = LineReader::new_text(src, self.max_line);
        let Some(first) = rd.next_line()? else {
            return Ok(());
        };
        let (no, header) = (first.no, Header::parse(first.bytes));
        let header = header.map_err(|err| crate::error::Error::Data { line: no, err })?;
        let col = |name| {
            header
                .require(name, "Azure LLM inference trace")
                .map_err(|err| crate::error::Error::Data { line: no, err })
        };
        let cols = Cols {
            ts: col("TIMESTAMP")?,
            input: col("ContextTokens")?,
            output: col("GeneratedTokens")?,
        };
        let mut fields = Fields::default();
        loop {
            let line = match rd.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => return Ok(()),
                Err(e) => {
                    sink.policy.handle(e)?;
                    continue;
                }
            };
            sink.counts.rows_in += 1;
            let no = line.no;
            let parsed = fields
                .split(line.bytes)
                .and_then(|()| self.row(&header, &cols, &fields, line.bytes));
            match parsed {
                Ok((input, output)) => {
                    let ids = self.synth.as_mut().map(|s| s.next_row(input));
                    let ts = &self.ts;
                    sink.row(|w| {
                        w.raw("timestamp", ts);
                        w.uint("input_length", input);
                        w.uint("output_length", output);
                        if let Some(ids) = ids {
                            w.ids("hash_ids", ids);
                        }
                    })?;
                }
                Err(e) => sink.bad(no, e)?,
            }
        }
    }
}
