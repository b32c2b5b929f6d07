//! Cutting an input into chunks of whole lines, on a thread of its own, so
//! the filters can transform chunks on other threads while this one reads
//! ahead (ARCHITECTURE.md §5, "chunked filters"). A chunk knows the number
//! of its first line, so line numbers stay exact whatever thread reads
//! them, and its buffers come from a fixed pool the consumer hands back,
//! so memory stays bounded however fast the input arrives.

use std::collections::BTreeMap;
use std::io::{self, Read};

use crate::error::{Error, Result};
use crate::jsonl::{self, LineRules};

/// The default size of a chunk: large enough that the per-chunk handing
/// over costs nothing, small enough that the pool stays a few MB.
pub const DEFAULT_CHUNK_BYTES: usize = 2 << 20;

/// A chunk size forced by the environment (tests: small chunks put
/// chunk edges between the lines of a small input); hidden, not an option.
pub const CHUNK_ENV: &str = "MCTRACE_CHUNK_BYTES";

/// The chunk size: [`CHUNK_ENV`] when set to a number, else the default.
pub fn chunk_bytes() -> usize {
    chunk_bytes_or(DEFAULT_CHUNK_BYTES)
}

/// The chunk size of a reader whose own default is `default`:
/// [`CHUNK_ENV`] when set to a number, else `default`.
pub fn chunk_bytes_or(default: usize) -> usize {
    std::env::var(CHUNK_ENV)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

/// The buffers one chunk travels with: the input bytes, and the output the
/// transform writes. Handed back and forth, never freed mid-run; `input`
/// keeps its length between uses (only `len` bytes of it are the chunk's)
/// so a reused buffer is never zeroed again.
#[derive(Default)]
pub struct Buffers {
    pub input: Vec<u8>,
    pub len: usize,
    pub output: Vec<u8>,
}

impl Buffers {
    /// The chunk's bytes.
    pub fn data(&self) -> &[u8] {
        &self.input[..self.len]
    }
}

/// Whole lines of the input.
pub struct Chunk {
    /// 0, 1, 2, … in input order.
    pub seq: u64,
    /// Lines ending in `\n`, and at the end of the input maybe one without.
    pub bufs: Buffers,
    /// Number of the line before the chunk's first (0 for the first chunk).
    pub line_base: u64,
    /// Lines in the chunk (blank ones included).
    pub lines: u64,
    /// The chunk is one line longer than the limit, not kept (`lines` is 1,
    /// no data).
    pub too_long: bool,
}

impl Chunk {
    /// The chunk's lines, numbered and cleaned by the input's `rules`
    /// (which carry the first-line state from chunk to chunk): the one
    /// walk every chunked loop makes, so a line's number and its verdict
    /// are the same in all of them.
    pub fn lines<'a>(&'a self, rules: &'a mut LineRules, max_line: usize) -> ChunkLines<'a> {
        ChunkLines {
            data: self.bufs.data(),
            at: 0,
            no: self.line_base,
            rules,
            max_line,
            too_long: self.too_long,
        }
    }
}

/// One line of a [`Chunk`], as [`Chunk::lines`] gives it.
pub struct ChunkLine<'a> {
    /// Its number in the input.
    pub no: u64,
    /// Where its text starts in the chunk's data.
    pub at: usize,
    /// The text without its line end (`None`: a blank line), or why the
    /// line is bad: longer than `--max-line-bytes`, or a first line that
    /// shows the input is not JSONL.
    pub text: Result<Option<&'a [u8]>>,
}

impl ChunkLines<'_> {
    /// Where the next line starts in the chunk's data, and the number of
    /// the line before it.
    pub fn position(&self) -> (usize, u64) {
        (self.at, self.no)
    }

    /// Passes over `lines` whole lines, `bytes` bytes from
    /// [`ChunkLines::position`], that the caller took itself (a fast path
    /// over plain lines), so the next line's number stays exact.
    pub fn pass_over(&mut self, bytes: usize, lines: u64) {
        self.at += bytes;
        self.no += lines;
    }
}

/// The lines of a chunk; see [`Chunk::lines`].
pub struct ChunkLines<'a> {
    data: &'a [u8],
    at: usize,
    no: u64,
    rules: &'a mut LineRules,
    max_line: usize,
    /// The chunk is one line over the limit, not yet reported.
    too_long: bool,
}

impl<'a> Iterator for ChunkLines<'a> {
    type Item = ChunkLine<'a>;

    fn next(&mut self) -> Option<ChunkLine<'a>> {
        if self.too_long {
            self.too_long = false;
            self.at = self.data.len();
            let no = self.no + 1;
            return Some(ChunkLine {
                no,
                at: 0,
                text: Err(jsonl::too_long(no, self.max_line)),
            });
        }
        if self.at >= self.data.len() {
            return None;
        }
        let start = self.at;
        let rest = &self.data[start..];
        let end = memchr::memchr(b'\n', rest).map_or(self.data.len(), |i| start + i);
        let raw = &self.data[start..end];
        self.at = end + 1;
        self.no += 1;
        let no = self.no;
        if raw.len() > self.max_line {
            return Some(ChunkLine {
                no,
                at: start,
                text: Err(jsonl::too_long(no, self.max_line)),
            });
        }
        Some(match self.rules.clean(raw, no) {
            Err(e) => ChunkLine {
                no,
                at: start,
                text: Err(e),
            },
            Ok(None) => ChunkLine {
                no,
                at: start,
                text: Ok(None),
            },
            Ok(Some(span)) => ChunkLine {
                no,
                at: start + span.start,
                text: Ok(Some(&raw[span])),
            },
        })
    }
}

/// Puts the carried start of a line at the front of `bufs.input` and
/// empties `carry`; returns its length.
#[inline]
fn take_carry(bufs: &mut Buffers, carry: &mut Vec<u8>) -> usize {
    let len = carry.len();
    if bufs.input.len() < len {
        bufs.input.resize(len, 0);
    }
    bufs.input[..len].copy_from_slice(carry);
    carry.clear();
    len
}

/// Ends the chunk of `len` bytes in `bufs` at `cut` (its last `\n`), the
/// bytes after it carried to the next chunk, and returns its line count.
#[inline]
fn end_chunk(bufs: &mut Buffers, mut len: usize, cut: Option<usize>, carry: &mut Vec<u8>) -> u64 {
    if let Some(i) = cut {
        carry.extend_from_slice(&bufs.input[i + 1..len]);
        len = i + 1;
    }
    bufs.len = len;
    let data = bufs.data();
    let mut lines = memchr::memchr_iter(b'\n', data).count() as u64;
    if data.last().is_some_and(|&b| b != b'\n') {
        lines += 1; // the last line, without its `\n`
    }
    lines
}

/// Reads `src` into chunks of whole lines, each ending at the last `\n` of
/// the carried start of a line and `size` more bytes (more when one line
/// is longer), each in
/// buffers taken from `free`, and gives them to `send` in order; stops
/// early when `send` returns false (the consumer has stopped). A line
/// longer than `max_line` is skipped and sent as a `too_long` chunk.
pub fn read_chunks(
    mut src: impl Read,
    size: usize,
    max_line: usize,
    free: &crossbeam_channel::Receiver<Buffers>,
    mut send: impl FnMut(Chunk) -> bool,
) -> Result<()> {
    let size = size.max(1);
    let max_line = max_line.max(1);
    // The start of a line the last read cut, carried to the next chunk.
    let mut carry: Vec<u8> = Vec::new();
    let mut line_base = 0;
    let mut seq = 0;
    let mut eof = false;
    'chunks: loop {
        let Ok(mut bufs) = free.recv() else {
            return Ok(()); // the consumer is gone
        };
        // The carried start of a line first, then reads until the chunk
        // holds `size` bytes and a `\n` past the carried part, or the
        // input ends.
        let mut len = take_carry(&mut bufs, &mut carry);
        let mut scanned = 0;
        let mut cut = None;
        while cut.is_none() && !eof {
            let want = len.max(scanned) + size;
            (len, eof) = fill(&mut src, &mut bufs.input, len, want)?;
            cut = memchr::memrchr(b'\n', &bufs.input[scanned..len]).map(|i| scanned + i);
            scanned = len;
            if cut.is_none() && len > max_line {
                // One line longer than the limit: skip it without keeping it.
                carry = skip_line(&mut src, &mut eof)?;
                bufs.len = 0;
                let chunk = Chunk {
                    seq,
                    bufs,
                    line_base,
                    lines: 1,
                    too_long: true,
                };
                if !send(chunk) {
                    return Ok(());
                }
                seq += 1;
                line_base += 1;
                continue 'chunks;
            }
        }
        if len == 0 {
            return Ok(()); // the input ended on a chunk edge
        }
        let lines = end_chunk(&mut bufs, len, cut, &mut carry);
        let chunk = Chunk {
            seq,
            bufs,
            line_base,
            lines,
            too_long: false,
        };
        if !send(chunk) {
            return Ok(());
        }
        seq += 1;
        line_base += lines;
        if eof && carry.is_empty() {
            return Ok(());
        }
    }
}

/// The chunked loop every chunked tool runs (the filters' and the line
/// importers'): a reader thread cuts `src` into chunks of whole lines
/// ([`read_chunks`] of `size` bytes, line numbers counted on from
/// `line_base`), one worker
/// thread per fork in `forks` makes each chunk with `make` into the
/// chunk's output buffer, and this thread hands the made chunks to
/// `write` in input order. `tag` runs on the reader thread, in input
/// order, and gives each chunk what its maker must know of the chunks
/// before it (a guessed row number, the first-line state); `write` gets
/// the tag back, so it can check the guess.
///
/// Memory is bounded by a pool of `2 * workers + 2` buffer pairs: every
/// chunk in flight (being read, queued, being made, waiting its turn)
/// holds one, and `write`'s chunk goes back to the pool after it. The
/// first error of `write` stops the loop (the reader and workers stop at
/// their next hand-over); a read error is returned after what was read
/// before it was written. Returns the forks, for their counts.
#[allow(clippy::too_many_arguments)]
pub fn in_order_chunks<W, T, M>(
    src: impl Read + Send,
    size: usize,
    line_base: u64,
    max_line: usize,
    forks: Vec<W>,
    mut tag: impl FnMut(&Chunk) -> T + Send,
    make: impl Fn(&mut W, &Chunk, &T, &mut Vec<u8>) -> M + Sync,
    mut write: impl FnMut(&mut Chunk, T, M) -> Result<()>,
) -> (Result<()>, Vec<W>)
where
    W: Send,
    T: Send,
    M: Send,
{
    let workers = forks.len().max(1);
    let (job_tx, job_rx) = crossbeam_channel::bounded::<(Chunk, T)>(workers);
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<(Chunk, T, M)>();
    let (free_tx, free_rx) = crossbeam_channel::unbounded::<Buffers>();
    for _ in 0..2 * workers + 2 {
        let _ = free_tx.send(Buffers::default());
    }
    let make = &make;
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || {
            read_chunks(src, size, max_line, &free_rx, |mut c| {
                c.line_base += line_base;
                let t = tag(&c);
                job_tx.send((c, t)).is_ok()
            })
        });
        let threads: Vec<_> = forks
            .into_iter()
            .map(|mut fork| {
                let (jobs, done) = (job_rx.clone(), done_tx.clone());
                scope.spawn(move || {
                    for (mut chunk, t) in jobs {
                        let mut output = std::mem::take(&mut chunk.bufs.output);
                        output.clear();
                        let made = make(&mut fork, &chunk, &t, &mut output);
                        chunk.bufs.output = output;
                        if done.send((chunk, t, made)).is_err() {
                            break; // the writer stopped
                        }
                    }
                    fork
                })
            })
            .collect();
        drop((job_rx, done_tx));
        // In input order: a chunk that comes back early waits for those
        // before it.
        let mut waiting: BTreeMap<u64, (Chunk, T, M)> = BTreeMap::new();
        let mut next = 0;
        let mut written = Ok(());
        'done: for d in done_rx {
            waiting.insert(d.0.seq, d);
            while let Some((mut chunk, t, made)) = waiting.remove(&next) {
                next += 1;
                written = write(&mut chunk, t, made);
                let _ = free_tx.send(chunk.bufs);
                if written.is_err() {
                    break 'done; // dropping the receiver stops the workers
                }
            }
        }
        drop(waiting);
        drop(free_tx); // a reader waiting for a buffer stops
        let forks = threads.into_iter().filter_map(|t| t.join().ok()).collect();
        let read = reader
            .join()
            .unwrap_or_else(|_| Err(Error::Io(io::Error::other("the reader thread failed"))));
        (written.and(read), forks)
    })
}

/// Reads into `buf` after its first `len` bytes until `want` bytes are
/// there or the input ends; returns the bytes there and whether the input
/// ended. `buf` only grows (zeroed once, when it does).
fn fill(
    src: &mut impl Read,
    buf: &mut Vec<u8>,
    mut len: usize,
    want: usize,
) -> Result<(usize, bool)> {
    if buf.len() < want {
        buf.resize(want, 0);
    }
    while len < want {
        match src.read(&mut buf[len..want]) {
            Ok(0) => return Ok((len, true)),
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::Io(e)),
        }
    }
    Ok((len, false))
}

/// Discards input up to and including the next `\n`; returns what was read
/// after it.
fn skip_line(src: &mut impl Read, eof: &mut bool) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    while !*eof {
        let len;
        (len, *eof) = fill(src, &mut buf, 0, 64 << 10)?;
        if let Some(i) = memchr::memchr(b'\n', &buf[..len]) {
            return Ok(buf[i + 1..len].to_vec());
        }
    }
    Ok(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chunks of `input` as (line_base, lines, too_long, bytes).
    fn chunks(input: &[u8], size: usize, max: usize) -> Vec<(u64, u64, bool, Vec<u8>)> {
        let (give, free) = crossbeam_channel::unbounded();
        for _ in 0..2 {
            give.send(Buffers::default()).unwrap();
        }
        let mut got = Vec::new();
        read_chunks(input, size, max, &free, |c| {
            got.push((c.line_base, c.lines, c.too_long, c.bufs.data().to_vec()));
            give.send(c.bufs).unwrap();
            true
        })
        .unwrap();
        got
    }

    #[test]
    fn chunks_are_whole_lines_numbered_in_order() {
        let input = b"aaa\nbb\n\ncccc\nd";
        // Each read takes 5 bytes after the carried start of a line and the
        // chunk ends at the last `\n`: "aaa\n|b", "b|b\n\n|cc", "cc|cccc\n|d",
        // then "d" at the end of the input.
        let got = chunks(input, 5, 100);
        assert_eq!(
            got,
            vec![
                (0, 1, false, b"aaa\n".to_vec()),
                (1, 2, false, b"bb\n\n".to_vec()),
                (3, 1, false, b"cccc\n".to_vec()),
                (4, 1, false, b"d".to_vec()),
            ]
        );
        // Whatever the size, the chunks put together are the input.
        for size in 1..20 {
            let got = chunks(input, size, 100);
            let joined: Vec<u8> = got.iter().flat_map(|c| c.3.clone()).collect();
            assert_eq!(joined, input, "size {size}");
            assert_eq!(got.iter().map(|c| c.1).sum::<u64>(), 5, "size {size}");
        }
    }

    #[test]
    fn a_line_over_the_limit_is_a_chunk_of_its_own() {
        let input = b"ab\nxxxxxxxxxxxxxxxxxxxx\ncd\n";
        let got = chunks(input, 2, 8);
        assert_eq!(
            got,
            vec![
                (0, 1, false, b"ab\n".to_vec()),
                (1, 1, true, Vec::new()),
                (2, 1, false, b"cd\n".to_vec()),
            ]
        );
        // At the end of the input, without a `\n`.
        let got = chunks(b"ab\nxxxxxxxxxxxxxxxxxxxx", 2, 8);
        assert_eq!(got[1], (1, 1, true, Vec::new()));
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn empty_input_gives_no_chunk() {
        assert!(chunks(b"", 4, 10).is_empty());
    }

    /// Runs the scaffold over `input` in chunks of `size` with two forks
    /// that upper-case each chunk: what `write` saw, in order, as
    /// (seq, line_base, tag, output), and the result.
    #[allow(clippy::type_complexity)]
    fn scaffold(
        input: &[u8],
        size: usize,
        stop_at: Option<u64>,
    ) -> (Vec<(u64, u64, u64, Vec<u8>)>, Result<()>, usize) {
        let mut seen = Vec::new();
        let mut tags = 0u64;
        let (result, forks) = in_order_chunks(
            input,
            size,
            10,
            100,
            vec![0u64, 0u64],
            |c: &Chunk| {
                tags += c.lines;
                tags
            },
            |made: &mut u64, c: &Chunk, _t: &u64, out: &mut Vec<u8>| {
                *made += 1;
                out.extend(c.bufs.data().iter().map(u8::to_ascii_uppercase));
                c.seq
            },
            |c, t, seq| {
                assert_eq!(seq, c.seq);
                if stop_at == Some(c.seq) {
                    return Err(Error::Input(format!("stop at chunk {seq}")));
                }
                seen.push((c.seq, c.line_base, t, c.bufs.output.clone()));
                Ok(())
            },
        );
        let made: u64 = forks.iter().sum();
        (seen, result, made as usize)
    }

    #[test]
    fn the_scaffold_writes_made_chunks_in_input_order() {
        let input: Vec<u8> = (0..500)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        for size in [1, 7, 64, 1000, 1 << 20] {
            let (seen, result, made) = scaffold(&input, size, None);
            result.unwrap();
            let joined: Vec<u8> = seen.iter().flat_map(|c| c.3.clone()).collect();
            assert_eq!(joined, input.to_ascii_uppercase(), "size {size}");
            assert_eq!(made, seen.len(), "size {size}: both forks handed back");
            let mut lines = 0;
            for (k, (seq, base, tag, out)) in seen.iter().enumerate() {
                // In order, line numbers on from the given base, the tags
                // made in order on the reader thread.
                assert_eq!(*seq, k as u64);
                assert_eq!(*base, 10 + lines);
                lines += memchr::memchr_iter(b'\n', out).count() as u64;
                assert_eq!(*tag, lines);
            }
        }
    }

    #[test]
    fn a_write_error_stops_the_scaffold_with_it() {
        let input: Vec<u8> = (0..500)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let (seen, result, _) = scaffold(&input, 16, Some(3));
        assert_eq!(seen.len(), 3);
        assert!(result.unwrap_err().to_string().contains("stop at chunk 3"));
    }
}
