//! A small CSV field scanner for the trace formats (Azure, BurstGPT): one
//! record per line, optional double quotes, no embedded newlines. Hand-written
//! rather than the `csv` crate: these files are numbers and dates only, the
//! line reader already handles CRLF and long lines, and a slice scan keeps
//! the 27-million-row Azure files at several hundred MB/s.

use std::io::Read;

use super::Sink;
use crate::error::{Error, RecordError, Result};
use crate::jsonl::LineReader;

/// The spans of a line's fields, reused between lines.
#[derive(Default)]
pub struct Fields {
    spans: Vec<(usize, usize)>,
}

impl Fields {
    /// Splits `line` at commas outside quotes; a quoted field's span is its
    /// content without the quotes (`""` inside stays doubled: no trace
    /// column we read contains one).
    pub fn split(&mut self, line: &[u8]) -> Result<(), RecordError> {
        self.spans.clear();
        let mut i = 0;
        loop {
            if line.get(i) == Some(&b'"') {
                let start = i + 1;
                let mut j = start;
                loop {
                    match memchr::memchr(b'"', &line[j..]) {
                        None => {
                            return Err(RecordError::new(format!(
                                "column {}: unterminated quoted field",
                                self.spans.len() + 1
                            )))
                        }
                        Some(k) if line.get(j + k + 1) == Some(&b'"') => j += k + 2,
                        Some(k) => {
                            j += k;
                            break;
                        }
                    }
                }
                self.spans.push((start, j));
                i = j + 1;
                match line.get(i) {
                    None => return Ok(()),
                    Some(b',') => i += 1,
                    Some(_) => {
                        return Err(RecordError::new(format!(
                            "column {}: text after a closing quote",
                            self.spans.len()
                        )))
                    }
                }
            } else {
                match memchr::memchr(b',', &line[i..]) {
                    Some(k) => {
                        self.spans.push((i, i + k));
                        i += k + 1;
                    }
                    None => {
                        self.spans.push((i, line.len()));
                        return Ok(());
                    }
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Field `col` (0-based) of `line`, trimmed of spaces.
    pub fn get<'l>(&self, line: &'l [u8], col: usize) -> Option<&'l [u8]> {
        self.spans.get(col).map(|&(a, b)| line[a..b].trim_ascii())
    }
}

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
            .map(|c| String::from_utf8_lossy(f.get(line, c).unwrap_or_default()).into_owned())
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

/// Reads one CSV file: the header (its first non-blank line, BOM stripped)
/// is handed to `columns`, which finds the columns it needs; then each row
/// is split and handed to `row`. A row's `RecordError` is a bad record
/// (named by line, handled per `--on-error`); the outer `Result` of `row`
/// is for failures that stop the import (output errors).
pub fn read_rows<C>(
    src: Box<dyn Read>,
    max_line: usize,
    sink: &mut Sink,
    columns: impl FnOnce(&Header) -> std::result::Result<C, RecordError>,
    mut row: impl FnMut(&CsvRow<'_, C>, &mut Sink) -> Result<std::result::Result<(), RecordError>>,
) -> Result<()> {
    let mut rd = LineReader::new_text(src, max_line);
    let Some(first) = rd.next_line()? else {
        return Ok(());
    };
    let no = first.no;
    let header = Header::parse(first.bytes).map_err(|err| Error::Data { line: no, err })?;
    let cols = columns(&header).map_err(|err| Error::Data { line: no, err })?;
    let mut fields = Fields::default();
    sink.each_line(&mut rd, |sink, bytes| {
        sink.counts.rows_in += 1;
        match fields.split(bytes) {
            Ok(()) => row(
                &CsvRow {
                    header: &header,
                    cols: &cols,
                    fields: &fields,
                    line: bytes,
                },
                sink,
            ),
            Err(e) => Ok(Err(e)),
        }
    })
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
    pub fn get(&self, col: usize) -> std::result::Result<&[u8], RecordError> {
        self.fields
            .get(self.line, col)
            .ok_or_else(|| column_error(self.header, col, "missing (too few columns)"))
    }

    /// Field `col` as a non-negative integer.
    pub fn uint(&self, col: usize) -> std::result::Result<u64, RecordError> {
        let raw = self.get(col)?;
        crate::record::parse_uint(raw).ok_or_else(|| {
            column_error(
                self.header,
                col,
                format!("expected a non-negative integer, found {}", show(raw)),
            )
        })
    }

    /// Field `col` as text (lossy UTF-8).
    pub fn text(&self, col: usize) -> std::result::Result<std::borrow::Cow<'_, str>, RecordError> {
        Ok(String::from_utf8_lossy(self.get(col)?))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(line: &str) -> Result<Vec<String>, String> {
        let mut f = Fields::default();
        f.split(line.as_bytes()).map_err(|e| e.to_string())?;
        Ok((0..f.len())
            .map(|c| String::from_utf8_lossy(f.get(line.as_bytes(), c).unwrap()).into_owned())
            .collect())
    }

    #[test]
    fn plain_quoted_and_empty_fields() {
        assert_eq!(fields("a,b,c").unwrap(), ["a", "b", "c"]);
        assert_eq!(fields("a,,").unwrap(), ["a", "", ""]);
        assert_eq!(fields("\"x,y\",2").unwrap(), ["x,y", "2"]);
        assert_eq!(
            fields("\"say \"\"hi\"\"\",2").unwrap(),
            ["say \"\"hi\"\"", "2"]
        );
        assert_eq!(fields(" 1 , 2").unwrap(), ["1", "2"]);
        assert!(fields("\"open,2")
            .unwrap_err()
            .contains("column 1: unterminated"));
        assert!(fields("1,\"a\"b").unwrap_err().contains("column 2"));
    }

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
