//! Azure LLM inference traces (2023 and the 2024 week-long files):
//! `TIMESTAMP,ContextTokens,GeneratedTokens`, one request a line. Rows keep
//! file order; timestamps are ms since the first row.

use std::io::Read;

use super::csv::{column_error, read_rows, show, CsvRow};
use super::row::SynthIds;
use super::{time, ImportArgs, Importer, Sink};
use crate::error::{RecordError, Result};

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
            max_line: args.io.max_line_bytes,
            float: args.float_timestamps,
            synth: args
                .synth_hash_ids
                .then(|| SynthIds::new(args.block_size.unwrap_or(512))),
            zero: None,
            ts: Vec::new(),
        }
    }

    fn row(&mut self, r: &CsvRow<'_, Cols>) -> std::result::Result<(u64, u64), RecordError> {
        let c = r.cols;
        let raw = r.get(c.ts)?;
        let t = time::parse_datetime(&raw).ok_or_else(|| {
            let why = match time::datetime_problem(&raw) {
                Some(p) => format!("{}: {p}", show(&raw)),
                None => format!(
                    "expected a datetime like `2023-11-16 18:17:03.9799600` or `2024-05-10 00:00:00+00:00`, found {}",
                    show(&raw)
                ),
            };
            column_error(r.header, c.ts, why)
        })?;
        let (input, output) = (r.tokens(c.input)?, r.tokens(c.output)?);
        let zero = *self.zero.get_or_insert(t);
        if t < zero {
            // Rows are streamed with the first row as the zero: an earlier
            // row would get a negative timestamp, which no reader accepts.
            return Err(column_error(
                r.header,
                c.ts,
                format!(
                    "{} is {:.3} s before the first row's time: the rows are not in time order \
                     (mc-import takes its zero from the first row; sort the rows by TIMESTAMP first, \
                     e.g. `(head -n 1 F; tail -n +2 F | sort) > sorted.csv`)",
                    show(&raw),
                    (zero - t) as f64 / 1e9
                ),
            ));
        }
        self.ts.clear();
        time::write_ms(t - zero, self.float, &mut self.ts);
        Ok((input, output))
    }
}

impl Importer for Azure {
    fn file(&mut self, src: Box<dyn Read>, _file_no: usize, sink: &mut Sink) -> Result<()> {
        let columns = |h: &super::csv::Header| {
            let col = |name| h.require(name, "Azure LLM inference trace");
            Ok(Cols {
                ts: col("TIMESTAMP")?,
                input: col("ContextTokens")?,
                output: col("GeneratedTokens")?,
            })
        };
        read_rows(src, self.max_line, sink, columns, |r, sink| {
            let (input, output) = match self.row(r) {
                Ok(v) => v,
                Err(e) => return Ok(Err(e)),
            };
            let ids = self.synth.as_mut().map(|s| s.next_row(input));
            let ts = &self.ts;
            sink.row(|w| {
                w.timestamp_text(ts);
                w.input_length(input);
                w.output_length(output);
                if let Some(ids) = ids {
                    w.hash_ids(ids);
                }
            })?;
            Ok(Ok(()))
        })
    }
}
