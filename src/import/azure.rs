//! Azure LLM inference traces (2023 and the 2024 week-long files):
//! `TIMESTAMP,ContextTokens,GeneratedTokens`, one request a line. Rows keep
//! file order; timestamps are ms since the first row.

use std::io::Read;

use super::csv::{column_error, plain_tokens, read_rows, show, CsvFormat, CsvRow};
use super::row::{write_plain_request, Count, PlainRows, PlainTime, SynthIds};
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
    rows: PlainRows,
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
            rows: PlainRows::default(),
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

impl Azure {
    /// The row that starts at `data[at]` when it is `datetime,digits,digits`
    /// and its line end, in a shape `Datetimes::parse_plain` reads and with
    /// token counts of one to seven digits: its time (ns), token counts and
    /// where the next line starts. Any other line is `None`, for the
    /// general way (its messages are `row`'s).
    #[inline(always)]
    fn plain_row(&mut self, data: &[u8], at: usize) -> Option<(i64, Count, Count, usize)> {
        use crate::csv::line_end_at;
        let (t, end) = self.dates.parse_plain(data, at)?;
        if *data.get(end)? != b',' {
            return None;
        }
        let (input, end) = Count::at(data, end + 1)?;
        if *data.get(end)? != b',' {
            return None;
        }
        let (output, end) = Count::at(data, end + 1)?;
        let next = line_end_at(data, end)?;
        Some((t, input, output, next))
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

    /// Rows of the order `TIMESTAMP,ContextTokens,GeneratedTokens` (both
    /// years' files), each read field by field from the line's start
    /// (`plain_row`), at or after the zero, until a line that is not of
    /// that shape: the rows `fast` would write, without finding the line's
    /// end or its commas first.
    fn fast_rows(
        &mut self,
        data: &[u8],
        c: &Cols,
        max_line: usize,
        out: &mut Vec<u8>,
        counts: &mut Counts,
    ) -> (usize, u64) {
        let Some(zero) = self.zero else {
            return (0, 0);
        };
        if (c.ts, c.input, c.output) != (0, 1, 2) || self.synth.is_some() {
            return (0, 0);
        }
        let (mut at, mut n) = (0, 0);
        while let Some((t, input, output, next)) = self.plain_row(data, at) {
            // The line's bytes before its `\n` (a `\r` counted) against
            // `--max-line-bytes`, as the line walk counts them.
            if t < zero || next - at - 1 > max_line {
                break;
            }
            let ts = if self.float {
                self.ts.clear();
                time::write_ms(t - zero, true, &mut self.ts);
                PlainTime::Text(&self.ts)
            } else {
                // `write_ms`' floor; `t - zero` is at least 0.
                PlainTime::Ms(((t - zero) / 1_000_000) as u64)
            };
            self.rows.push(out, ts, input, output);
            at = next;
            n += 1;
        }
        self.rows.flush(out);
        counts.rows_in += n;
        counts.rows_out += n;
        (at, n)
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
            rows: PlainRows::default(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// The chunked fast path takes the rows of both years' shapes and
    /// writes what the line-by-line path writes; it takes no line that path
    /// refuses (a byte replaced, the row cut short, a time before the
    /// zero), whole ms and `--float-timestamps` alike.
    #[test]
    fn plain_rows_are_the_line_by_line_rows() {
        let header =
            super::super::csv::Header::parse(b"TIMESTAMP,ContextTokens,GeneratedTokens").unwrap();
        let cols = Cols {
            ts: 0,
            input: 1,
            output: 2,
        };
        let valid: [&[u8]; 9] = [
            b"2024-05-10 00:00:00.0095530+00:00,5102,639",
            b"2024-05-10 00:01:59.9999999+00:00,1,0",
            b"2024-05-10 00:00:07+00:00,1234567,7654321",
            b"2024-05-10 00:00:07+00:00,10000000,1\r",
            b"2023-11-16 18:17:03.9799600,4808,10\r",
            b"2023-11-16 18:17:03.979960012,4808,10",
            b"2024-05-10T00:00:60Z,0,9",
            b"2024-05-10 00:00:00.5Z,10,10",
            b"2024-05-11 00:00:01,10,10000000",
        ];
        for flags in [&[][..], &["--float-timestamps"][..]] {
            let args = ImportArgs::parse_from(["mc-import", "--from", "azure"].iter().chain(flags));
            super::super::csv::assert_fast_rows_agree(
                &header,
                &cols,
                Azure::new(&args),
                b"2023-11-16 18:17:03.0000001,1,1",
                &valid,
                // Not taken: quotes, blanks, an offset, ten decimals, a
                // token count over the limit.
                &[
                    b"\"2024-05-10 00:00:00+00:00\",1,2",
                    b"2024-05-10 00:00:00+00:00, 1,2",
                    b"2024-05-10 00:00:00+01:00,1,2",
                    b"2024-05-10 00:00:00.1234567890,1,2",
                    b"2024-05-10 00:00:00,1,10000001",
                ],
            );
        }
    }
}
