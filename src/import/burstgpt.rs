//! BurstGPT (HPMLL/BurstGPT): `Timestamp,Model,Request tokens,Response
//! tokens,Total tokens,Log Type` (v1/v2), and v3 with `Session ID` and
//! `Elapsed time` added. Columns are found by name, so their order and the
//! spelling of v3's new ones (`Session ID`, `SessionID`) do not matter.
//!
//! `Timestamp` is seconds since midnight of the trace's first day; rows
//! keep that clock in ms (no rebasing: a `--model` filter keeps the
//! selected rows' place in the day). A row with 0 response tokens is a
//! failed request (the upstream README says so of `BurstGPT_1.csv`): it is
//! dropped and counted unless `--keep-failed`.

use std::io::Read;

use super::csv::{column_error, plain_tokens, read_rows, show, CsvFormat, CsvRow, Header};
use super::row::{write_plain_request, Count, PlainRows, PlainTime, SynthIds};
use super::{time, write_request, Counts, ImportArgs, Importer, Sink};
use crate::error::{RecordError, Result};

const FORMAT: &str = "BurstGPT";
pub const FAILED: &str = "failed: 0 response tokens";
pub const OTHER_MODEL: &str = "--model";
pub const OTHER_LOG_TYPE: &str = "--log-type";

pub struct BurstGpt {
    max_line: usize,
    float: bool,
    keep_failed: bool,
    models: Vec<String>,
    log_types: Vec<String>,
    synth: Option<SynthIds>,
    ts: Vec<u8>,
    rows: PlainRows,
}

/// The columns of the header this format reads.
pub struct Cols {
    ts: usize,
    model: Option<usize>,
    input: usize,
    output: usize,
    log_type: Option<usize>,
    session: Option<usize>,
}

/// What one row becomes.
enum Verdict {
    Keep {
        input: u64,
        output: u64,
        session: Option<String>,
    },
    Drop(&'static str),
}

/// Whether `value` is one of `wanted` (no filter when empty); case is
/// ignored, as users type `chatgpt` for `ChatGPT`.
fn selected(wanted: &[String], value: &str) -> bool {
    wanted.is_empty() || wanted.iter().any(|w| w.eq_ignore_ascii_case(value))
}

impl BurstGpt {
    pub fn new(args: &ImportArgs) -> Self {
        BurstGpt {
            max_line: args.io.max_line_bytes,
            float: args.float_timestamps,
            keep_failed: args.keep_failed,
            models: args.model.clone(),
            log_types: args.log_type.clone(),
            synth: args
                .synth_hash_ids
                .then(|| SynthIds::new(args.block_size.unwrap_or(512))),
            ts: Vec::new(),
            rows: PlainRows::default(),
        }
    }
}

impl Cols {
    /// The columns of header `h`; a filter's column is required.
    fn find(h: &Header, model: bool, log_type: bool) -> std::result::Result<Cols, RecordError> {
        // A filter needs its column; without one the column may be absent.
        let wanted = |name, filter: bool| {
            if filter {
                h.require(name, FORMAT).map(Some)
            } else {
                Ok(h.find(name))
            }
        };
        Ok(Cols {
            ts: h.require("Timestamp", FORMAT)?,
            model: wanted("Model", model)?,
            input: h.require("Request tokens", FORMAT)?,
            output: h.require("Response tokens", FORMAT)?,
            log_type: wanted("Log Type", log_type)?,
            session: h.find("Session ID"),
        })
    }
}

impl BurstGpt {
    fn verdict(&mut self, r: &CsvRow<'_, Cols>) -> std::result::Result<Verdict, RecordError> {
        let c = r.cols;
        let raw = r.get(c.ts)?;
        let t = time::parse_seconds(&raw)
            .filter(|&t| t >= 0)
            .ok_or_else(|| {
                column_error(
                    r.header,
                    c.ts,
                    format!(
                        "expected seconds (like `5` or `12.25`), found {}",
                        show(&raw)
                    ),
                )
            })?;
        let (input, output) = (r.tokens(c.input)?, r.tokens(c.output)?);
        // Every field is checked before a filter looks at the row, so a bad
        // row is reported whatever the filters.
        // A column no filter reads is only checked to be there: its text
        // (lossy UTF-8) was 7% of an import without filters (cachegrind).
        let filtered = |col: Option<usize>, wanted: &[String]| match col {
            Some(col) if !wanted.is_empty() => r.text(col).map(Some),
            Some(col) => r.get(col).map(|_| None),
            None => Ok(None),
        };
        let model = filtered(c.model, &self.models)?;
        let log_type = filtered(c.log_type, &self.log_types)?;
        let session = c.session.map(|col| r.text(col)).transpose()?;
        if !selected(&self.models, model.as_deref().unwrap_or_default()) {
            return Ok(Verdict::Drop(OTHER_MODEL));
        }
        if !selected(&self.log_types, log_type.as_deref().unwrap_or_default()) {
            return Ok(Verdict::Drop(OTHER_LOG_TYPE));
        }
        if output == 0 && !self.keep_failed {
            return Ok(Verdict::Drop(FAILED));
        }
        self.ts.clear();
        time::write_ms(t, self.float, &mut self.ts);
        Ok(Verdict::Keep {
            input,
            output,
            session: session.filter(|s| !s.is_empty()).map(|s| s.into_owned()),
        })
    }
}

/// What the plain-row walker reads of each column up to the last one a
/// row must have.
#[derive(Clone, Copy, PartialEq)]
enum Field {
    Seconds,
    Input,
    Output,
    /// Only there (the model and log type without filters; a column
    /// between two read ones).
    Skip,
}

/// The fields of a plain row, up to the last one `verdict` needs.
struct Plan {
    fields: [Field; 8],
    len: usize,
    /// The fields are [`V1`].
    v1: bool,
}

impl BurstGpt {
    /// The walker's plan for columns `c`, when `fast` would take rows at
    /// all and the columns read are among the first eight.
    fn plan(&self, c: &Cols) -> Option<Plan> {
        if !self.models.is_empty()
            || !self.log_types.is_empty()
            || c.session.is_some()
            || self.synth.is_some()
        {
            return None;
        }
        let last = [c.model, c.log_type]
            .into_iter()
            .flatten()
            .fold(c.ts.max(c.input).max(c.output), usize::max);
        let mut fields = [Field::Skip; 8];
        if last >= fields.len() {
            return None;
        }
        fields[c.ts] = Field::Seconds;
        fields[c.input] = Field::Input;
        fields[c.output] = Field::Output;
        Some(Plan {
            fields,
            len: last + 1,
            v1: fields[..=last] == V1,
        })
    }
}

/// The row that starts at `data[at]` when its fields are plain (none
/// quoted or starting with a blank), its seconds whole or with up to nine
/// decimals and its token counts digits within the limit, the line at most
/// `max_line` bytes: its time (ns), token counts and where the next line
/// starts, as `fast` reads them. Any other line is `None`, for the general
/// way. The files' own order of columns is read field after field without
/// the plan.
#[inline(always)]
fn plain_row(
    plan: &Plan,
    data: &[u8],
    at: usize,
    max_line: usize,
) -> Option<(Seconds, Count, Count, usize)> {
    use crate::csv::plain_field_end;
    if plan.v1 {
        // Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
        let (t, p) = seconds_at(data, at)?;
        let (p, _) = plain_field_end(data, comma(data, p)?, max_line)?;
        let (input, p) = Count::at(data, comma(data, p)?)?;
        let (output, p) = Count::at(data, comma(data, p)?)?;
        let (p, _) = plain_field_end(data, comma(data, p)?, max_line)?;
        let (end, b) = plain_field_end(data, comma(data, p)?, max_line)?;
        let next = line_rest(data, at, end, b, max_line)?;
        return Some((t, input, output, next));
    }
    let (mut t, mut input, mut output) = ((0, None), None, None);
    let mut p = at;
    let mut end_byte = b',';
    for &f in &plan.fields[..plan.len] {
        if end_byte != b',' {
            return None; // too few columns: `row` names the missing one
        }
        let end = match f {
            Field::Skip => {
                let (end, b) = plain_field_end(data, p, max_line)?;
                end_byte = b;
                p = end + 1;
                continue;
            }
            Field::Seconds => {
                let (v, end) = seconds_at(data, p)?;
                t = v;
                end
            }
            Field::Input => {
                let (v, end) = Count::at(data, p)?;
                input = Some(v);
                end
            }
            Field::Output => {
                let (v, end) = Count::at(data, p)?;
                output = Some(v);
                end
            }
        };
        end_byte = *data.get(end)?;
        p = end + 1;
        if end_byte == b'\r' {
            // A number last in the line, before `\r\n`.
            p = crate::csv::line_end_at(data, end)?;
            end_byte = b'\n';
        }
    }
    let next = line_rest(data, at, p - 1, end_byte, max_line)?;
    Some((t, input?, output?, next))
}

/// The v1/v2 files' columns, in their order.
const V1: [Field; 6] = [
    Field::Seconds,
    Field::Skip,
    Field::Input,
    Field::Output,
    Field::Skip,
    Field::Skip,
];

/// The index after the `,` at `data[at]`.
#[inline(always)]
fn comma(data: &[u8], at: usize) -> Option<usize> {
    (*data.get(at)? == b',').then_some(at + 1)
}

/// Where the next line starts, when the last field read ended at
/// `data[end]` with byte `b` (`\n` or `,`): columns after it are only
/// checked to be plain; the line from `at` is at most `max_line` bytes
/// before its `\n`.
#[inline(always)]
fn line_rest(data: &[u8], at: usize, mut end: usize, mut b: u8, max_line: usize) -> Option<usize> {
    while b == b',' {
        (end, b) = crate::csv::plain_field_end(data, end + 1, max_line)?;
    }
    (b == b'\n' && end - at <= max_line).then_some(end + 1)
}

/// BurstGPT's seconds at `data[at]`, whole or with up to nine decimals, as
/// `time::parse_seconds` reads them (ns, and the digits of whole seconds),
/// and the index after them.
#[inline(always)]
fn seconds_at(data: &[u8], at: usize) -> Option<(Seconds, usize)> {
    let (secs, mut end) = crate::csv::plain_uint_at(data, at)?;
    let mut whole = Count::digits(crate::csv::word_at(data, at)?, end - at);
    let mut nanos = 0;
    if data.get(end) == Some(&b'.') {
        let (v, after) = crate::csv::plain_uint_at(data, end + 1)?;
        let n = after - end - 1;
        if n > 9 {
            return None;
        }
        nanos = v as i64 * 10i64.pow(9 - n as u32);
        end = after;
        whole = None;
    }
    let t = i64::try_from(secs)
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(nanos)?;
    Some(((t, whole), end))
}

/// A row's time: ns, and its digits when it is whole seconds that can be
/// copied (`Count::digits`).
type Seconds = (i64, Option<Count>);

impl CsvFormat for BurstGpt {
    type Cols = Cols;

    fn row(
        &mut self,
        r: &CsvRow<'_, Cols>,
        out: &mut Vec<u8>,
        counts: &mut Counts,
    ) -> std::result::Result<(), RecordError> {
        let (input, output, session) = match self.verdict(r)? {
            Verdict::Keep {
                input,
                output,
                session,
            } => (input, output, session),
            Verdict::Drop(reason) => {
                counts.drop(reason);
                return Ok(());
            }
        };
        let ids = self.synth.as_mut().map(|s| s.next_row(input));
        write_request(
            out,
            counts,
            &self.ts,
            session.as_deref(),
            (input, output),
            ids,
        );
        Ok(())
    }

    /// Without filters and without a session column: a row of plain
    /// fields (`plain_commas`) whose seconds and token counts read as
    /// `verdict` reads them, written by hand (`write_plain_request`) or
    /// dropped as failed, as `row` does.
    fn fast(&mut self, line: &[u8], c: &Cols, out: &mut Vec<u8>, counts: &mut Counts) -> bool {
        if !self.models.is_empty() || !self.log_types.is_empty() || c.session.is_some() {
            return false;
        }
        let mut commas = [0usize; 8];
        let Some(n) = crate::csv::plain_commas(line, &mut commas) else {
            return false;
        };
        // Every column read is there (the model and log type only checked).
        let last = [c.model, c.log_type]
            .into_iter()
            .flatten()
            .fold(c.ts.max(c.input).max(c.output), usize::max);
        if last > n || last >= commas.len() {
            return false;
        }
        let field = |k| crate::csv::plain_field(line, &commas, n, k);
        let Some(t) = time::parse_seconds(field(c.ts)).filter(|&t| t >= 0) else {
            return false;
        };
        let (Some(input), Some(output)) =
            (plain_tokens(field(c.input)), plain_tokens(field(c.output)))
        else {
            return false;
        };
        if output == 0 && !self.keep_failed {
            counts.drop(FAILED);
            return true;
        }
        let ts = if self.float {
            self.ts.clear();
            time::write_ms(t, true, &mut self.ts);
            PlainTime::Text(&self.ts)
        } else {
            // `write_ms`' floor; `t` is at least 0.
            PlainTime::Ms((t / 1_000_000) as u64)
        };
        let ids = self.synth.as_mut().map(|s| s.next_row(input));
        write_plain_request(out, ts, input, output, ids);
        counts.rows_out += 1;
        true
    }

    /// Without filters and without a session column: the rows of plain
    /// fields (`plain_row`) at the start of `data`, written or dropped as
    /// failed as `fast` does, until a line `plain_row` does not take.
    fn fast_rows(
        &mut self,
        data: &[u8],
        c: &Cols,
        max_line: usize,
        out: &mut Vec<u8>,
        counts: &mut Counts,
    ) -> (usize, u64) {
        let Some(plan) = self.plan(c) else {
            return (0, 0);
        };
        let (mut at, mut n, mut written) = (0, 0, 0);
        while let Some((t, input, output, next)) = plain_row(&plan, data, at, max_line) {
            at = next;
            n += 1;
            if output.is_zero() && !self.keep_failed {
                counts.drop(FAILED);
                continue;
            }
            let ts = match t {
                (t, _) if self.float => {
                    self.ts.clear();
                    time::write_ms(t, true, &mut self.ts);
                    PlainTime::Text(&self.ts)
                }
                (_, Some(whole)) => PlainTime::Seconds(whole),
                // `write_ms`' floor; `t` is at least 0.
                (t, None) => PlainTime::Ms((t / 1_000_000) as u64),
            };
            self.rows.push(out, ts, input, output);
            written += 1;
        }
        self.rows.flush(out);
        counts.rows_in += n;
        counts.rows_out += written;
        (at, n)
    }

    /// Every row is a function of itself; made-up ids number on from the
    /// rows before, so they stay in order.
    fn ready(&self) -> bool {
        self.synth.is_none()
    }

    fn fork(&self) -> Self {
        BurstGpt {
            max_line: self.max_line,
            float: self.float,
            keep_failed: self.keep_failed,
            models: self.models.clone(),
            log_types: self.log_types.clone(),
            synth: self.synth.clone(),
            ts: Vec::new(),
            rows: PlainRows::default(),
        }
    }
}

impl Importer for BurstGpt {
    fn file(&mut self, src: Box<dyn Read + Send>, _file_no: usize, sink: &mut Sink) -> Result<()> {
        let (model, log_type) = (!self.models.is_empty(), !self.log_types.is_empty());
        read_rows(
            src,
            self.max_line,
            sink,
            |h| Cols::find(h, model, log_type),
            self,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// The chunked fast path takes plain rows (whole and decimal seconds,
    /// failures, CRLF, extra columns) and writes or drops them as the
    /// line-by-line path does; it takes no line that path refuses.
    #[test]
    fn plain_rows_are_the_line_by_line_rows() {
        for head in [
            &b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"[..],
            b"Request tokens,Timestamp,Response tokens",
        ] {
            let header = Header::parse(head).unwrap();
            let cols = Cols::find(&header, false, false).unwrap();
            let v1 = head.starts_with(b"Timestamp");
            let (valid, others): (Vec<&[u8]>, Vec<&[u8]>) = if v1 {
                (
                    vec![
                        b"6,ChatGPT,199,325,524,Conversation log",
                        b"1234567890,GPT-4,1,0,1,API log\r",
                        b"5.25,,10000000,1,,",
                        b"0.000000001,x,0,1234567,y,z,extra,more",
                    ],
                    // Not taken: a quoted field, blanks, a count over
                    // the limit, a negative time.
                    vec![
                        b"6,ChatGPT,199,325,524,\"Conversation log\"",
                        b"6,ChatGPT,199,325,524,log,\"\"",
                        b"6,ChatGPT, 199,325,524,log",
                        b"6,ChatGPT,10000001,325,524,log",
                        b"-6,ChatGPT,1,325,524,log",
                    ],
                )
            } else {
                (
                    vec![b"199,6,325", b"1,2.5,0\r", b"10,20,30,40"],
                    vec![b"1,2,\"3\""],
                )
            };
            for flags in [&[][..], &["--float-timestamps", "--keep-failed"][..]] {
                let args =
                    ImportArgs::parse_from(["mc-import", "--from", "burstgpt"].iter().chain(flags));
                let warm: &[u8] = if v1 { b"1,a,1,1,2,b" } else { b"1,1,1" };
                super::super::csv::assert_fast_rows_agree(
                    &header,
                    &cols,
                    BurstGpt::new(&args),
                    warm,
                    &valid,
                    &others,
                );
            }
        }
    }
}
