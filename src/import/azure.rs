//! Azure LLM inference traces (2023 and the 2024 week-long files):
//! `TIMESTAMP,ContextTokens,GeneratedTokens`, one request a line. Rows keep
//! file order; timestamps are ms since the first row.

use std::io::Read;

use super::csv::{column_error, plain_tokens, read_rows, show, CsvFormat, CsvRow};
use super::row::{write_plain_request, PlainTime, SynthIds};
use super::{time, write_request, Counts, ImportArgs, Importer, Sink};
use crate::error::{RecordError, Result};

pub struct Azure {
    max_line: usize,
    float: bool,
    synth: Option<SynthIds>,
    /// The first row's time (ns since the epoch): the trace's zero.
    zero: Option<i64>,
    ts: Vec<u8>,
    dates: time::Datetimes,
}

/// The columns of the header this format reads.
pub struct Cols {
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
            dates: time::Datetimes::default(),
        }
    }

    /// The row's token counts; its time since the zero goes to `self.ts`.
    fn times(&mut self, r: &CsvRow<'_, Cols>) -> std::result::Result<(u64, u64), RecordError> {
        let c = r.cols;
        let raw = r.get(c.ts)?;
        let t = self.dates.parse(&raw).ok_or_else(|| {
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

impl CsvFormat for Azure {
    type Cols = Cols;

    fn row(
        &mut self,
        r: &CsvRow<'_, Cols>,
        out: &mut Vec<u8>,
        counts: &mut Counts,
    ) -> std::result::Result<(), RecordError> {
        let (input, output) = self.times(r)?;
        let ids = self.synth.as_mut().map(|s| s.next_row(input));
        write_request(out, counts, &self.ts, None, (input, output), ids);
        Ok(())
    }

    /// A row of three plain fields (`plain_commas`), a datetime that
    /// parses and token counts within the limit, at or after the zero:
    /// written by hand (`write_plain_request`), as `row` writes it.
    fn fast(&mut self, line: &[u8], c: &Cols, out: &mut Vec<u8>, counts: &mut Counts) -> bool {
        let mut commas = [0usize; 4];
        let Some(n) = crate::csv::plain_commas(line, &mut commas) else {
            return false;
        };
        let last = c.ts.max(c.input).max(c.output);
        if last > n || last >= commas.len() {
            return false;
        }
        let field = |k| crate::csv::plain_field(line, &commas, n, k);
        // The cache only remembers a minute: a row refused here is parsed
        // again, with the same answer, by `row`.
        let Some(t) = self.dates.parse(field(c.ts)) else {
            return false;
        };
        let (Some(input), Some(output)) =
            (plain_tokens(field(c.input)), plain_tokens(field(c.output)))
        else {
            return false;
        };
        let zero = self.zero.unwrap_or(t);
        if t < zero {
            return false;
        }
        self.zero = Some(zero);
        let ts = if self.float {
            self.ts.clear();
            time::write_ms(t - zero, true, &mut self.ts);
            PlainTime::Text(&self.ts)
        } else {
            // `write_ms`' floor; `t - zero` is at least 0.
            PlainTime::Ms(((t - zero) / 1_000_000) as u64)
        };
        let ids = self.synth.as_mut().map(|s| s.next_row(input));
        write_plain_request(out, ts, input, output, ids);
        counts.rows_out += 1;
        true
    }

    /// Rows are out-of-order work once the first row set the zero; made-up
    /// ids number on from the rows before, so they stay in order.
    fn ready(&self) -> bool {
        self.zero.is_some() && self.synth.is_none()
    }

    fn fork(&self) -> Self {
        Azure {
            max_line: self.max_line,
            float: self.float,
            synth: self.synth.clone(),
            zero: self.zero,
            ts: Vec::new(),
            dates: time::Datetimes::default(),
        }
    }
}

impl Importer for Azure {
    fn file(&mut self, src: Box<dyn Read + Send>, _file_no: usize, sink: &mut Sink) -> Result<()> {
        let columns = |h: &super::csv::Header| {
            let col = |name| h.require(name, "Azure LLM inference trace");
            Ok(Cols {
                ts: col("TIMESTAMP")?,
                input: col("ContextTokens")?,
                output: col("GeneratedTokens")?,
            })
        };
        read_rows(src, self.max_line, sink, columns, self)
    }
}
