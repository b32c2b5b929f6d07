//! JSONL plumbing shared by every tool: a memchr line reader over one large
//! reused buffer, one buffered writer, and the `--on-error` policy.

use std::fs::File;
use std::io::{self, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, RecordError, Result};
use crate::finding::Finding;

/// Default cap on one line (ARCHITECTURE.md §2): a longer line is an error, never an OOM.
pub const DEFAULT_MAX_LINE_BYTES: usize = 64 << 20;

const READ_CHUNK: usize = 1 << 20;

/// One line of input, without its `\n` or `\r\n` terminator.
pub struct Line<'a> {
    /// 1-based line number in the input.
    pub no: u64,
    pub bytes: &'a mut [u8],
}

/// A line reader that splits with memchr over a large buffer, so the common
/// case never copies a line; only a line straddling two reads is moved.
pub struct LineReader<R> {
    src: R,
    buf: Vec<u8>,
    /// Start of the unconsumed bytes in `buf`.
    pos: usize,
    /// End of the valid bytes in `buf`.
    end: usize,
    eof: bool,
    line_no: u64,
    max_line: usize,
    /// What happens to a line once it is cut: see [`LineRules`].
    rules: LineRules,
}

/// The rules a line goes through once it is cut from the input, in one
/// place for the line reader and the chunked reader of the filters
/// (`chunks`): a trailing `\r` is dropped, a UTF-8 BOM before the first
/// non-blank line is stripped, blank lines are skipped, and the first
/// non-blank line is checked for an input that is not JSONL at all (see
/// [`sniff_first_line`]).
#[derive(Debug, Clone, Copy)]
pub struct LineRules {
    /// No non-blank line seen yet.
    pub first: bool,
    /// False for readers of other line formats (mc-import's CSV): no JSONL sniff.
    pub sniff: bool,
}

impl LineRules {
    /// Rules for the start of a JSONL input.
    pub fn jsonl() -> LineRules {
        LineRules {
            first: true,
            sniff: true,
        }
    }

    /// The span of the record in `raw` (a line without its `\n`), or
    /// `None` for a blank line; `Err(Error::Input)` when the first line
    /// shows the input is not JSONL.
    #[inline]
    pub fn clean(&mut self, raw: &[u8], line_no: u64) -> Result<Option<std::ops::Range<usize>>> {
        let mut end = raw.len();
        if end > 0 && raw[end - 1] == b'\r' {
            end -= 1;
        }
        let mut start = 0;
        if self.first && raw[..end].starts_with(UTF8_BOM) {
            start = UTF8_BOM.len();
        }
        let line = &raw[start..end];
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            return Ok(None);
        }
        if self.first {
            self.first = false;
            if let Some(hint) = sniff_first_line(line).filter(|_| self.sniff) {
                return Err(Error::Input(format!("line {line_no}: {hint}")));
            }
        }
        Ok(Some(start..end))
    }
}

impl<R: Read> LineReader<R> {
    pub fn new(src: R, max_line: usize) -> Self {
        LineReader {
            src,
            buf: vec![0; READ_CHUNK],
            pos: 0,
            end: 0,
            eof: false,
            line_no: 0,
            max_line: max_line.max(1),
            rules: LineRules::jsonl(),
        }
    }

    /// A reader that goes on from line `line_no` with the rules in the
    /// state `rules` (after [`LineReader::into_parts`]).
    pub fn resume(src: R, max_line: usize, line_no: u64, rules: LineRules) -> Self {
        LineReader {
            line_no,
            rules,
            ..LineReader::new(src, max_line)
        }
    }

    /// A reader for line formats that are not JSONL (CSV): a BOM is still
    /// stripped, but the first line is not checked for being JSON.
    pub fn new_text(src: R, max_line: usize) -> Self {
        let mut reader = LineReader::new(src, max_line);
        reader.rules.sniff = false;
        reader
    }

    /// The next non-blank line. `Err(Error::Data)` for a line longer than the
    /// limit; the reader has then skipped past it, so the caller may go on.
    pub fn next_line(&mut self) -> Result<Option<Line<'_>>> {
        loop {
            let (start, len) = match self.next_raw()? {
                None => return Ok(None),
                Some(span) => span,
            };
            let Some(span) = self
                .rules
                .clean(&self.buf[start..start + len], self.line_no)?
            else {
                continue;
            };
            return Ok(Some(Line {
                no: self.line_no,
                bytes: &mut self.buf[start + span.start..start + span.end],
            }));
        }
    }

    /// Finds the next line and returns its (start, len) in `buf`.
    fn next_raw(&mut self) -> Result<Option<(usize, usize)>> {
        let mut scanned = 0; // bytes after `pos` already known to hold no '\n'
        loop {
            let avail = &self.buf[self.pos + scanned..self.end];
            if let Some(i) = memchr::memchr(b'\n', avail) {
                let start = self.pos;
                let len = scanned + i;
                self.pos = start + len + 1;
                self.line_no += 1;
                if len > self.max_line {
                    return Err(self.too_long());
                }
                return Ok(Some((start, len)));
            }
            scanned = self.end - self.pos;
            if scanned > self.max_line {
                self.line_no += 1;
                self.skip_rest_of_line()?;
                return Err(self.too_long());
            }
            if self.eof {
                if scanned == 0 {
                    return Ok(None);
                }
                let start = self.pos;
                self.pos = self.end;
                self.line_no += 1;
                return Ok(Some((start, scanned)));
            }
            self.fill()?;
        }
    }

    /// The bytes read and not yet handed out, for a caller that parses
    /// lines where they lie (the filters' line loop, `filter`); `None`
    /// before the first line is handed out, as that one goes through the
    /// first line's rules (BOM, format sniff). A line the caller takes
    /// from them is passed over with [`LineReader::consume`]; anything
    /// else it leaves to [`LineReader::next_line`].
    #[inline]
    pub fn unread(&self) -> Option<&[u8]> {
        (!self.rules.first).then(|| &self.buf[self.pos..self.end])
    }

    /// Passes over a line of `unread()` the caller took: `len` bytes with
    /// its ending, its text no longer than `--max-line-bytes` and not
    /// blank (the caller's to check). Returns its line number.
    #[inline]
    pub fn consume(&mut self, len: usize) -> u64 {
        debug_assert!(self.pos + len <= self.end);
        self.pos += len;
        self.line_no += 1;
        self.line_no
    }

    /// The number of the last line handed out or passed over (0 before any).
    #[inline]
    pub fn line_no(&self) -> u64 {
        self.line_no
    }

    /// `--max-line-bytes`, the longest line text handed out.
    pub fn max_line(&self) -> usize {
        self.max_line
    }

    fn too_long(&self) -> Error {
        too_long(self.line_no, self.max_line)
    }

    /// Takes the reader apart after some lines were read: the bytes read
    /// but not yet handed out, the source, the number of the last line
    /// handed out, and the rules' state (for the chunked reader to go on).
    pub fn into_parts(self) -> (Vec<u8>, R, u64, LineRules) {
        let rest = self.buf[self.pos..self.end].to_vec();
        (rest, self.src, self.line_no, self.rules)
    }

    /// Moves the partial line to the front, grows the buffer if it is full,
    /// and reads more.
    fn fill(&mut self) -> Result<()> {
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.end == self.buf.len() {
            let grown = (self.buf.len() * 2).min(self.max_line + READ_CHUNK + 1);
            self.buf.resize(grown.max(self.buf.len() + READ_CHUNK), 0);
        }
        loop {
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::Io(e)),
            }
        }
    }

    /// Discards input up to and including the next '\n' (after an over-long line).
    fn skip_rest_of_line(&mut self) -> Result<()> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.pos..self.end]) {
                self.pos += i + 1;
                return Ok(());
            }
            self.pos = 0;
            self.end = 0;
            if self.eof {
                return Ok(());
            }
            self.fill()?;
        }
    }
}

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// The bad line of a line longer than `--max-line-bytes`.
pub fn too_long(line: u64, max_line: usize) -> Error {
    Error::Data {
        line,
        err: RecordError::new(format!(
            "line is longer than --max-line-bytes ({max_line} bytes)"
        )),
    }
}

/// Recognises a first line that shows the whole input is not JSONL, and
/// says how to convert it. Every record starts with `{`, so anything else
/// on the first line is at best one bad line among many.
pub fn sniff_first_line(line: &[u8]) -> Option<&'static str> {
    let text = line.trim_ascii_start();
    let has = |needle: &[u8]| memchr::memmem::find(text, needle).is_some();
    match text.first()? {
        // A WEKA session (one object with the session's requests).
        b'{' if has(b"\"block_size\"") && has(b"\"requests\"") => Some(
            "this is a WEKA session file, not Mooncake rows; \
             convert it with `mc-import --from auto`",
        ),
        b'{' => None,
        b'[' if has(b"\"intermediate_steps\"") || has(b"\"request_number\"") => Some(
            "this is a NeMo Agent Toolkit profiler trace, not JSONL; \
             convert it with `nat2mc`",
        ),
        b'[' if text.trim_ascii_end() == b"[" => Some(
            "this is a JSON array, not JSONL (one object per line); a NeMo Agent Toolkit \
             profiler trace converts with `nat2mc`, other traces with `mc-import --from auto`, \
             an array of Mooncake rows with `jq -c '.[]'`",
        ),
        b'[' => Some(
            "this is a JSON array, not JSONL (one object per line); \
             convert it with `jq -c '.[]'`",
        ),
        _ if text.contains(&b',') => Some(
            "this looks like CSV (an Azure or BurstGPT trace?), not JSONL; \
             convert it with `mc-import --from auto`",
        ),
        _ => None,
    }
}

/// Opens `--input FILE`, or stdin when absent or `-`. A directory is refused
/// here, by name (reading one would fail later with a bare "Is a directory").
pub fn open_input(path: Option<&Path>) -> Result<Box<dyn Read>> {
    match path {
        Some(p) if p != Path::new("-") => Ok(Box::new(open_file(p)?)),
        _ => Ok(Box::new(io::stdin().lock())),
    }
}

/// [`open_input`] for a reader on another thread: stdin unlocked (each
/// read takes the lock; the chunked reader reads megabytes at a time).
pub fn open_input_send(path: Option<&Path>) -> Result<Box<dyn Read + Send>> {
    match path {
        Some(p) if p != Path::new("-") => Ok(Box::new(open_file(p)?)),
        _ => Ok(Box::new(io::stdin())),
    }
}

/// An input file, or exit 66 naming it; a directory is refused here.
pub fn open_file(p: &Path) -> Result<File> {
    let no_input = |source| Error::NoInput {
        path: p.to_path_buf(),
        source,
    };
    let file = File::open(p).map_err(no_input)?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(no_input(io::Error::new(
            io::ErrorKind::IsADirectory,
            "is a directory, not a trace file",
        )));
    }
    Ok(file)
}

/// The one buffered writer of a tool. Block-buffered when piped,
/// line-buffered on a terminal or with `--line-buffered`.
pub struct Output<W: Write = Box<dyn Write>> {
    inner: W,
    buf: Vec<u8>,
    line_buffered: bool,
    path: Option<PathBuf>,
}

const OUT_BUF: usize = 256 << 10;

/// Where an output goes: a file it created, or stdout (and whether that is
/// a terminal, which line-buffers it).
enum Target {
    File(File, PathBuf),
    Stdout(bool),
}

/// The identity of a regular file: its device and inode.
#[cfg(unix)]
fn file_id(meta: &std::fs::Metadata) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    meta.is_file().then(|| (meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn file_id(_meta: &std::fs::Metadata) -> Option<(u64, u64)> {
    None
}

/// The identity of stdin when it is a regular file (`tool -o a < a`).
#[cfg(unix)]
fn stdin_id() -> Option<(u64, u64)> {
    use std::os::fd::AsFd;
    let fd = io::stdin().as_fd().try_clone_to_owned().ok()?;
    file_id(&File::from(fd).metadata().ok()?)
}

#[cfg(not(unix))]
fn stdin_id() -> Option<(u64, u64)> {
    None
}

/// The one rule against data loss (ARCHITECTURE.md §2): an output file that
/// is one of the tool's inputs (the same device and inode: the same path, a
/// hard link or a symlink to it) would be truncated before it is read, so it
/// is refused (exit 73) before anything is opened for writing. `-` among
/// `inputs` means stdin, which is compared when it is a regular file.
/// Outputs that are not regular files (`/dev/null`, a pipe) are never refused.
pub fn refuse_input_as_output(output: Option<&Path>, inputs: &[&Path]) -> Result<()> {
    let Some(out) = output.filter(|p| *p != Path::new("-")) else {
        return Ok(());
    };
    let Some(out_id) = std::fs::metadata(out).ok().as_ref().and_then(file_id) else {
        return Ok(()); // not there yet, or not a regular file
    };
    for input in inputs {
        let id = if *input == Path::new("-") {
            stdin_id()
        } else {
            std::fs::metadata(input).ok().as_ref().and_then(file_id)
        };
        if id == Some(out_id) {
            let what = if *input == Path::new("-") {
                "stdin".to_string()
            } else {
                format!("the input {}", input.display())
            };
            return Err(Error::CantCreate(format!(
                "{}: the output is {what}; writing it would truncate it before it is read \
                 (write to another file, then rename it over the input)",
                out.display()
            )));
        }
    }
    Ok(())
}

impl Target {
    fn open(path: Option<&Path>, inputs: &[&Path]) -> Result<Target> {
        refuse_input_as_output(path, inputs)?;
        match path {
            Some(p) if p != Path::new("-") => File::create(p)
                .map(|f| Target::File(f, p.to_path_buf()))
                .map_err(|source| Error::Output {
                    path: p.to_path_buf(),
                    source,
                }),
            _ => Ok(Target::Stdout(io::stdout().is_terminal())),
        }
    }
}

/// stdout for an [`Output`]: std's handle locked for the output's life
/// (no other thread writes between its records), written through a
/// duplicate of its descriptor. `Output` buffers already, and std's
/// `LineWriter` under it cost ~220 instructions a record under
/// `--line-buffered` (a `memrchr` for the last `\n`, its own buffer's
/// checks, three calls; cachegrind,
/// docs/decisions/0039-filters-under-five-instructions-a-byte.md). Where
/// the descriptor cannot be duplicated (stdout closed), std's handle is
/// used as before.
#[cfg(unix)]
fn stdout_writer() -> Box<dyn Write> {
    use std::os::fd::AsFd;
    let mut lock = io::stdout().lock();
    // What was printed through std's handle goes out first.
    let _ = lock.flush();
    match lock.as_fd().try_clone_to_owned() {
        Ok(fd) => Box::new(StdoutFd {
            file: File::from(fd),
            _lock: lock,
        }),
        Err(_) => Box::new(lock),
    }
}

#[cfg(not(unix))]
fn stdout_writer() -> Box<dyn Write> {
    Box::new(io::stdout().lock())
}

/// stdout's descriptor, with std's handle held locked ([`stdout_writer`]).
#[cfg(unix)]
struct StdoutFd {
    file: File,
    _lock: io::StdoutLock<'static>,
}

#[cfg(unix)]
impl Write for StdoutFd {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    /// One `write` call for a record, nearly always the whole of it; std's
    /// loop only for what it leaves.
    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self.file.write(buf) {
            Ok(n) if n == buf.len() => Ok(()),
            Ok(n) if n > 0 => self.file.write_all(&buf[n..]),
            // Nothing written, or interrupted: std's loop says what it is.
            _ => self.file.write_all(buf),
        }
    }

    /// Nothing is held here: every write went to the descriptor.
    #[inline]
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Output {
    /// Opens an output that is no input of the tool: `inputs` are every
    /// file it reads (`-` for stdin); see [`refuse_input_as_output`].
    pub fn open_for(path: Option<&Path>, line_buffered: bool, inputs: &[&Path]) -> Result<Self> {
        Ok(match Target::open(path, inputs)? {
            Target::File(f, p) => Output::new(Box::new(f), line_buffered, Some(p)),
            Target::Stdout(tty) => Output::new(stdout_writer(), line_buffered || tty, None),
        })
    }

    /// Opens an output for a tool that reads no file (or checked its inputs
    /// itself with [`refuse_input_as_output`]); stdin is still compared.
    pub fn open(path: Option<&Path>, line_buffered: bool) -> Result<Self> {
        Ok(match Target::open(path, &[Path::new("-")])? {
            Target::File(f, p) => Output::new(Box::new(f), line_buffered, Some(p)),
            Target::Stdout(tty) => Output::new(stdout_writer(), line_buffered || tty, None),
        })
    }

    /// An output into any writer (tests, in-memory pipelines).
    pub fn from_writer(w: Box<dyn Write>) -> Self {
        Output::new(w, false, None)
    }
}

/// An output that can move between threads: stdout is not locked once but
/// at each flush (for tools whose records come from several threads).
pub type SendOutput = Output<Box<dyn Write + Send>>;

impl SendOutput {
    pub fn open_send(path: Option<&Path>, line_buffered: bool) -> Result<Self> {
        Ok(match Target::open(path, &[Path::new("-")])? {
            Target::File(f, p) => Output::new(Box::new(f), line_buffered, Some(p)),
            Target::Stdout(tty) => Output::new(Box::new(io::stdout()), line_buffered || tty, None),
        })
    }
}

impl<W: Write> Output<W> {
    fn new(inner: W, line_buffered: bool, path: Option<PathBuf>) -> Self {
        Output {
            inner,
            buf: Vec::with_capacity(OUT_BUF + 4096),
            line_buffered,
            path,
        }
    }

    /// Writes one record and its `\n`.
    #[inline]
    pub fn write_line(&mut self, line: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(line);
        self.buf.push(b'\n');
        self.end_line()
    }

    /// Writes one record that `bytes` holds with its `\n` (a line where
    /// it lies in the input buffer): under `--line-buffered`, with nothing
    /// waiting in the buffer, straight to the writer without a copy.
    #[inline]
    pub fn write_terminated(&mut self, bytes: &[u8]) -> Result<()> {
        debug_assert_eq!(bytes.last(), Some(&b'\n'));
        if self.line_buffered && self.buf.is_empty() {
            return self.inner.write_all(bytes).map_err(|e| self.error(e));
        }
        self.buf.extend_from_slice(bytes);
        self.end_line()
    }

    /// Writes bytes that are whole records already (a chunk's output).
    pub fn write_records(&mut self, bytes: &[u8]) -> Result<()> {
        if self.buf.len() + bytes.len() < OUT_BUF {
            self.buf.extend_from_slice(bytes);
            return self.end_line();
        }
        // Large: straight through, without a copy into the buffer.
        self.flush()?;
        self.inner.write_all(bytes).map_err(|e| self.error(e))
    }

    /// The buffer to build a record in place; finish with
    /// [`Output::end_record`] (which adds the `\n`), or with
    /// [`Output::end_line`] after pushing the `\n` yourself.
    #[inline]
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Ends the record built in [`Output::buffer`] with its `\n`.
    #[inline]
    pub fn end_record(&mut self) -> Result<()> {
        self.buf.push(b'\n');
        self.end_line()
    }

    #[inline]
    pub fn end_line(&mut self) -> Result<()> {
        if self.line_buffered || self.buf.len() >= OUT_BUF {
            self.flush()?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> Result<()> {
        let res = self
            .inner
            .write_all(&self.buf)
            .and_then(|()| self.inner.flush());
        self.buf.clear();
        res.map_err(|e| self.error(e))
    }

    fn error(&self, source: io::Error) -> Error {
        match &self.path {
            Some(p) => Error::Output {
                path: p.clone(),
                source,
            },
            None => Error::Io(source),
        }
    }
}

/// `--on-error`: what to do with a bad line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OnError {
    /// Stop at the first bad line with exit code 65.
    #[default]
    Fail,
    /// Skip bad lines and report them at the end.
    Skip,
}

impl OnError {
    /// Whether the policy skips `err` (a bad record under `skip`); any
    /// other error stops the tool. The one rule: [`ErrorPolicy::handle`]
    /// and the chunked loops' workers (which stop making a chunk at an
    /// error the policy will not skip) both ask it.
    pub fn skips(self, err: &Error) -> bool {
        self == OnError::Skip && matches!(err, Error::Data { .. })
    }
}

/// Applies the `--on-error` policy and remembers what was skipped.
#[derive(Debug, Default)]
pub struct ErrorPolicy {
    mode: OnError,
    skipped: Finding,
}

impl ErrorPolicy {
    pub fn new(mode: OnError) -> Self {
        ErrorPolicy {
            mode,
            ..Default::default()
        }
    }

    /// Returns the error again when the policy is `fail`; otherwise counts it.
    pub fn handle(&mut self, err: Error) -> Result<()> {
        match &err {
            Error::Data { line, .. } if self.mode.skips(&err) => {
                self.skipped.add(*line);
                Ok(())
            }
            _ => Err(err),
        }
    }

    /// A bad record on line `line`.
    pub fn record(&mut self, line: u64, err: RecordError) -> Result<()> {
        self.handle(Error::Data { line, err })
    }

    /// The lines skipped: a count and the first line numbers.
    pub fn skipped(&self) -> &Finding {
        &self.skipped
    }

    /// The end-of-run notice, if anything was skipped.
    pub fn summary(&self) -> Option<String> {
        let n = self.skipped.count;
        (n > 0).then(|| {
            format!(
                "skipped {n} bad line{} ({})",
                if n == 1 { "" } else { "s" },
                self.skipped.first_lines_text()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `skip` passes over bad records only: a read error stops every
    /// policy, and `fail` stops at a bad record too.
    #[test]
    fn the_policy_skips_bad_records_only() {
        let bad = || Error::Data {
            line: 3,
            err: RecordError::new("x"),
        };
        let io = || Error::Io(std::io::Error::other("gone"));
        assert!(OnError::Skip.skips(&bad()));
        assert!(!OnError::Skip.skips(&io()));
        assert!(!OnError::Fail.skips(&bad()));
        let mut policy = ErrorPolicy::new(OnError::Skip);
        assert!(policy.handle(bad()).is_ok());
        assert!(policy.handle(io()).is_err());
        assert_eq!(policy.skipped().count, 1);
        assert!(ErrorPolicy::new(OnError::Fail).handle(bad()).is_err());
    }

    /// A reader that hands out at most `n` bytes per read, to force lines
    /// across buffer edges.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn lines_of(input: &[u8], chunk: usize, max: usize) -> Vec<Result<(u64, Vec<u8>), String>> {
        let mut rd = LineReader::new(Trickle(input, chunk), max);
        let mut out = Vec::new();
        loop {
            match rd.next_line() {
                Ok(Some(l)) => out.push(Ok((l.no, l.bytes.to_vec()))),
                Ok(None) => break,
                Err(e) => out.push(Err(e.to_string())),
            }
        }
        out
    }

    #[test]
    fn splits_lines_and_numbers_them() {
        let got = lines_of(b"{\"a\":1}\n{\"b\":2}\n", 1 << 20, 100);
        assert_eq!(
            got,
            vec![
                Ok((1, b"{\"a\":1}".to_vec())),
                Ok((2, b"{\"b\":2}".to_vec()))
            ]
        );
    }

    #[test]
    fn crlf_blank_lines_and_missing_final_newline() {
        let got = lines_of(b"a\r\n\r\n   \nb\n\nc", 1 << 20, 100);
        assert_eq!(
            got,
            vec![
                Ok((1, b"a".to_vec())),
                Ok((4, b"b".to_vec())),
                Ok((6, b"c".to_vec()))
            ]
        );
    }

    #[test]
    fn lines_across_read_edges_survive_any_chunking() {
        let mut input = Vec::new();
        for i in 0..3000 {
            input.extend_from_slice(
                format!("{{\"i\":{i},\"pad\":\"{}\"}}\n", "x".repeat(i % 700)).as_bytes(),
            );
        }
        let want = lines_of(&input, usize::MAX, 1 << 20);
        for chunk in [1, 7, 4096, 65537] {
            assert_eq!(lines_of(&input, chunk, 1 << 20), want, "chunk {chunk}");
        }
        assert_eq!(want.len(), 3000);
    }

    #[test]
    fn line_longer_than_the_buffer_is_read_whole() {
        let long = "y".repeat(3 * READ_CHUNK + 5);
        let input = format!("a\n{long}\nb\n");
        let got = lines_of(input.as_bytes(), 100_000, 8 * READ_CHUNK);
        assert_eq!(got.len(), 3);
        assert_eq!(got[1], Ok((2, long.into_bytes())));
        assert_eq!(got[2], Ok((3, b"b".to_vec())));
    }

    #[test]
    fn too_long_line_is_an_error_and_reading_goes_on() {
        let long = "z".repeat(3 * READ_CHUNK);
        let input = format!("a\n{long}\nb\n");
        for chunk in [1000, usize::MAX] {
            let got = lines_of(input.as_bytes(), chunk, 1000);
            assert_eq!(got[0], Ok((1, b"a".to_vec())));
            assert_eq!(
                got[1],
                Err("line 2: line is longer than --max-line-bytes (1000 bytes)".to_string())
            );
            assert_eq!(got[2], Ok((3, b"b".to_vec())));
        }
        // Exactly at the limit is fine; one more byte is not.
        assert_eq!(lines_of(b"12345\n", 3, 5), vec![Ok((1, b"12345".to_vec()))]);
        assert!(lines_of(b"123456\n", 3, 5)[0].is_err());
        assert!(lines_of(b"123456", 3, 5)[0].is_err());
    }

    #[test]
    fn policy_fail_returns_the_error_and_skip_counts_it() {
        let mut fail = ErrorPolicy::new(OnError::Fail);
        let err = fail.record(3, RecordError::new("bad")).unwrap_err();
        assert_eq!(err.to_string(), "line 3: bad");
        let mut skip = ErrorPolicy::new(OnError::Skip);
        for l in 1..=7 {
            skip.record(l * 10, RecordError::new("bad")).unwrap();
        }
        assert_eq!(skip.skipped().count, 7);
        assert_eq!(
            skip.summary().unwrap(),
            "skipped 7 bad lines (line 10, 20, 30, 40, 50, …)"
        );
        // I/O errors are never skipped.
        assert!(skip.handle(Error::Io(io::Error::other("x"))).is_err());
    }
}
