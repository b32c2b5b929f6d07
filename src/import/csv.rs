//! The CSV row loop of the trace formats (Azure, BurstGPT): loose header
//! names, and each line split by the one CSV field reader (`crate::csv`,
//! which states the quoting rules) and handed over with its columns.

use std::borrow::Cow;
use std::io::Read;

use super::lines::{self, Convert};
use super::{Counts, Sink};
use crate::csv::Fields;
use crate::error::{Error, RecordError, Result};
use crate::jsonl::LineReader;

/// The header row: column names, matched loosely (case, spaces and
/// underscores ignored) so `Request tokens` and `request_tokens` both fit.
pub struct Header {
    names: Vec<String>,
}

fn norm(s: &str) -> String {
    s.chars()
        .filter(|c| !matches!(c, ' ' | '_' | '-'))
        .flat_map(char::to_lowercase)
        .collect()
}

impl Header {
    pub fn parse(line: &[u8]) -> Result<Header, RecordError> {
        let line = line.strip_prefix(b"\xef\xbb\xbf").unwrap_or(line);
        let mut f = Fields::default();
        f.split(line)?;
        let names = (0..f.len())
            .map(|c| f.text(line, c).unwrap_or_default().into_owned())
            .collect();
        Ok(Header { names })
    }

    /// The column named `name` (loosely), if any.
    pub fn find(&self, name: &str) -> Option<usize> {
        let want = norm(name);
        self.names.iter().position(|n| norm(n) == want)
    }

    /// The column named `name`, or an error naming the columns there are.
    pub fn require(&self, name: &str, format: &str) -> Result<usize, RecordError> {
        self.find(name).ok_or_else(|| {
            RecordError::new(format!(
                "the header has no `{name}` column (found: {}); is this a {format} file?",
                self.names.join(", ")
            ))
        })
    }

    pub fn name(&self, col: usize) -> &str {
        self.names.get(col).map_or("?", String::as_str)
    }
}

/// One CSV format's rule for a data row, for the line loop (`lines`).
pub trait CsvFormat: Send {
    /// The columns the format found in the header.
    type Cols: Sync;

    /// Converts one row: rows into `out`, counted in `counts` (a bad row
    /// is the error, named by its line by the loop).
    fn row(
        &mut self,
        r: &CsvRow<'_, Self::Cols>,
        out: &mut Vec<u8>,
        counts: &mut Counts,
    ) -> std::result::Result<(), RecordError>;

    /// The row's fast path: handles a row of the common shape (no quotes,
    /// no blanks around fields, the values as the format expects them) as
    /// [`CsvFormat::row`] would, and says whether it did; any other row
    /// (a bad one too: its message is `row`'s) goes the general way, with
    /// the format's state as it was.
    fn fast(
        &mut self,
        _line: &[u8],
        _cols: &Self::Cols,
        _out: &mut Vec<u8>,
        _counts: &mut Counts,
    ) -> bool {
        false
    }

    /// The chunked loop's fast path ([`Convert::fast_lines`]): the rows at
    /// the start of `data` of the format's plain shape, converted as
    /// [`CsvFormat::row`] would and counted (in and out), each line at
    /// most `max_line` bytes; returns the bytes and lines taken. It stops
    /// before the first line it does not take, with the format's state as
    /// that line needs it.
    fn fast_rows(
        &mut self,
        _data: &[u8],
        _cols: &Self::Cols,
        _max_line: usize,
        _out: &mut Vec<u8>,
        _counts: &mut Counts,
    ) -> (usize, u64) {
        (0, 0)
    }

    /// As [`Convert::ready`]: later rows are a function of the row and the
    /// state held now.
    fn ready(&self) -> bool {
        true
    }

    /// A copy with the same state (for a worker, or to go on with).
    fn fork(&self) -> Self
    where
        Self: Sized;
}

/// Reads one CSV file: the header (its first non-blank line, BOM stripped)
/// is handed to `columns`, which finds the columns it needs; then each row
/// is split and handed to `format`, in order or in chunks (`lines`).
/// `format` ends in the state the last row in order left it (Azure's zero
/// carries over to the next file).
pub fn read_rows<F: CsvFormat>(
    src: Box<dyn Read + Send>,
    max_line: usize,
    sink: &mut Sink,
    columns: impl FnOnce(&Header) -> std::result::Result<F::Cols, RecordError>,
    format: &mut F,
) -> Result<()> {
    let mut rd = LineReader::new_text(src, max_line);
    let Some(first) = rd.next_line()? else {
        return Ok(());
    };
    let no = first.no;
    let header = Header::parse(first.bytes).map_err(|err| Error::Data { line: no, err })?;
    let cols = columns(&header).map_err(|err| Error::Data { line: no, err })?;
    let mut rows = Rows {
        header: &header,
        cols: &cols,
        fields: Fields::default(),
        format: format.fork(),
    };
    let result = lines::convert(sink, rd, max_line, &mut rows);
    *format = rows.format;
    result
}

/// The CSV rows of one file as a line converter.
struct Rows<'a, F: CsvFormat> {
    header: &'a Header,
    cols: &'a F::Cols,
    fields: Fields,
    format: F,
}

impl<F: CsvFormat> Convert for Rows<'_, F> {
    fn line(
        &mut self,
        line: &[u8],
        out: &mut Vec<u8>,
        counts: &mut Counts,
    ) -> Result<std::result::Result<(), RecordError>> {
        counts.rows_in += 1;
        if self.format.fast(line, self.cols, out, counts) {
            return Ok(Ok(()));
        }
        if let Err(e) = self.fields.split(line) {
            return Ok(Err(e));
        }
        let row = CsvRow {
            header: self.header,
            cols: self.cols,
            fields: &self.fields,
            line,
        };
        Ok(self.format.row(&row, out, counts))
    }

    fn fast_lines(
        &mut self,
        data: &[u8],
        max_line: usize,
        out: &mut Vec<u8>,
        counts: &mut Counts,
    ) -> (usize, u64) {
        self.format
            .fast_rows(data, self.cols, max_line, out, counts)
    }

    fn ready(&self) -> bool {
        self.format.ready()
    }

    fn fork(&self) -> Self {
        Rows {
            header: self.header,
            cols: self.cols,
            fields: Fields::default(),
            format: self.format.fork(),
        }
    }
}

/// One data row of a CSV file, with its header and the columns found in it.
pub struct CsvRow<'a, C> {
    pub header: &'a Header,
    pub cols: &'a C,
    fields: &'a Fields,
    line: &'a [u8],
}

impl<C> CsvRow<'_, C> {
    /// Field `col`, or an error naming the column when the row is short.
    pub fn get(&self, col: usize) -> std::result::Result<Cow<'_, [u8]>, RecordError> {
        self.fields
            .get(self.line, col)
            .ok_or_else(|| column_error(self.header, col, "missing (too few columns)"))
    }

    /// Field `col` as a non-negative integer.
    pub fn uint(&self, col: usize) -> std::result::Result<u64, RecordError> {
        let raw = self.get(col)?;
        crate::record::parse_uint(&raw).ok_or_else(|| {
            column_error(
                self.header,
                col,
                format!("expected a non-negative integer, found {}", show(&raw)),
            )
        })
    }

    /// Field `col` as a token count: a non-negative integer at most
    /// `limits::MAX_ROW_TOKENS`.
    pub fn tokens(&self, col: usize) -> std::result::Result<u64, RecordError> {
        let v = self.uint(col)?;
        if v > crate::limits::MAX_ROW_TOKENS {
            return Err(column_error(
                self.header,
                col,
                format!(
                    "{v} tokens is above the limit of {} tokens per row",
                    crate::limits::MAX_ROW_TOKENS
                ),
            ));
        }
        Ok(v)
    }

    /// Field `col` as text (lossy UTF-8).
    pub fn text(&self, col: usize) -> std::result::Result<Cow<'_, str>, RecordError> {
        self.fields
            .text(self.line, col)
            .ok_or_else(|| column_error(self.header, col, "missing (too few columns)"))
    }
}

/// A token count as the fast paths take it: digits only, at most
/// `limits::MAX_ROW_TOKENS` (anything else is [`CsvRow::tokens`]' to name).
#[inline]
pub fn plain_tokens(raw: &[u8]) -> Option<u64> {
    crate::record::parse_uint(raw).filter(|&v| v <= crate::limits::MAX_ROW_TOKENS)
}

/// An error about column `col` (0-based) of a CSV row: the message names
/// the column by number and header name.
pub fn column_error(header: &Header, col: usize, msg: impl std::fmt::Display) -> RecordError {
    RecordError::new(format!(
        "column {} (`{}`): {msg}",
        col + 1,
        header.name(col)
    ))
}

/// A field for messages: at most 40 characters.
pub fn show(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw);
    if s.chars().count() > 40 {
        format!("`{}…`", s.chars().take(40).collect::<String>())
    } else {
        format!("`{s}`")
    }
}

/// The chunked fast path against the line-by-line one, for the format
/// tests: after `warm` went through in order, every line made from the
/// `valid` rows (each as it is, with each byte replaced by one of a set of
/// bytes that matter to a CSV row, and each prefix of it) is given to
/// [`Convert::fast_lines`] (with lines after it that no format takes) and
/// to [`Convert::line`] on a fork of the same state. Whatever line the
/// fast path takes, it takes alone and whole, and writes and counts it as
/// the line-by-line path does, which takes it without an error; every
/// `valid` row is taken (`others` are mutated too, but need not be), and
/// no line of more than `max_line` bytes.
#[cfg(test)]
pub(crate) fn assert_fast_rows_agree<F: CsvFormat>(
    header: &Header,
    cols: &F::Cols,
    mut format: F,
    warm: &[u8],
    valid: &[&[u8]],
    others: &[&[u8]],
) {
    let mut rows = Rows {
        header,
        cols,
        fields: Fields::default(),
        format: format.fork(),
    };
    let (mut out, mut counts) = (Vec::new(), Counts::default());
    assert!(matches!(rows.line(warm, &mut out, &mut counts), Ok(Ok(()))));
    format = rows.format.fork();
    let mut inputs: Vec<(Vec<u8>, bool)> = Vec::new();
    for (k, v) in valid.iter().chain(others).enumerate() {
        inputs.push((v.to_vec(), k < valid.len()));
        for i in 0..v.len() {
            for b in *b"09.,:+-Z \"\r\nx" {
                let mut w = v.to_vec();
                w[i] = b;
                inputs.push((w, false));
            }
            inputs.push((v[..i].to_vec(), false));
        }
    }
    let mut taken = 0;
    for (line, must) in &inputs {
        for max_line in [usize::MAX, line.len(), line.len().saturating_sub(1)] {
            let mut data = line.clone();
            data.extend_from_slice(b"\n#\n");
            data.extend_from_slice(&[b'#'; 64]);
            let mut fast = Rows {
                header,
                cols,
                fields: Fields::default(),
                format: format.fork(),
            };
            let (mut fast_out, mut fast_counts) = (b"x".to_vec(), Counts::default());
            let (bytes, n) = fast.fast_lines(&data, max_line, &mut fast_out, &mut fast_counts);
            let show = String::from_utf8_lossy(line);
            if n == 0 {
                assert_eq!(bytes, 0, "{show}");
                assert!(!must || max_line < line.len(), "not taken: {show}");
                continue;
            }
            taken += 1;
            // The line as the chunk's line walk hands it over.
            let first = &data[..memchr::memchr(b'\n', &data).unwrap()];
            assert_eq!((n, bytes), (1, first.len() + 1), "{show}");
            assert!(first.len() <= max_line, "{show}");
            let first = first.strip_suffix(b"\r").unwrap_or(first);
            assert!(!first.trim_ascii().is_empty(), "{show}");
            let mut general = Rows {
                header,
                cols,
                fields: Fields::default(),
                format: format.fork(),
            };
            let (mut out, mut counts) = (b"x".to_vec(), Counts::default());
            let made = general.line(first, &mut out, &mut counts);
            assert!(matches!(made, Ok(Ok(()))), "{show}");
            assert_eq!(
                String::from_utf8_lossy(&fast_out),
                String::from_utf8_lossy(&out),
                "{show}"
            );
            assert_eq!(fast_counts.summary("f"), counts.summary("f"), "{show}");
        }
    }
    assert!(taken >= valid.len(), "{taken}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_match_loosely() {
        let h = Header::parse(b"\xef\xbb\xbfTimestamp,Model,Request tokens").unwrap();
        assert_eq!(h.find("timestamp"), Some(0));
        assert_eq!(h.find("request_tokens"), Some(2));
        assert_eq!(h.find("Session ID"), None);
        assert!(h
            .require("Response tokens", "BurstGPT")
            .unwrap_err()
            .to_string()
            .contains("found: Timestamp, Model, Request tokens"));
    }
}
