//! Temporary files on disk, for the tools that must see their input more
//! than once or hold more of it than memory should: an input read twice
//! (`Twice`: a seekable file read again, a pipe copied to an unlinked
//! temporary file while the first pass reads it) and the sorted runs of an
//! external sort. Every temporary file lives in `std::env::temp_dir()`
//! (`$TMPDIR`, else `/tmp`), is removed by the system when closed, and a
//! failure to create or write one is an error naming that directory and
//! TMPDIR (exit 73 to create, 74 to write).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The directory temporary files go to.
pub fn temp_dir() -> PathBuf {
    std::env::temp_dir()
}

/// A new temporary file, already unlinked (nothing is left behind, even
/// after a crash). Exit 73 when it cannot be created.
pub fn temp_file() -> Result<File> {
    let dir = temp_dir();
    tempfile::tempfile_in(&dir).map_err(|e| {
        Error::CantCreate(format!(
            "cannot create a temporary file in {} ({}): {e}; point TMPDIR at a writable \
             directory with room",
            dir.display(),
            tmpdir_note()
        ))
    })
}

/// A failure to write or read back a temporary file, naming where it was
/// (exit 74).
pub fn io_error(e: io::Error) -> Error {
    let dir = temp_dir();
    Error::Io(io::Error::new(
        e.kind(),
        format!(
            "temporary file in {} ({}): {e}; point TMPDIR at a directory with room",
            dir.display(),
            tmpdir_note()
        ),
    ))
}

fn tmpdir_note() -> String {
    match std::env::var_os("TMPDIR") {
        Some(v) => format!("TMPDIR={}", Path::new(&v).display()),
        None => "TMPDIR is not set".into(),
    }
}

/// An input a tool reads twice (or more): `--input FILE` or stdin. A
/// regular file (stdin redirected from one included) is read again from
/// where it started; a pipe (stdin, or a named pipe given as FILE) is
/// copied to a temporary file as the first pass reads it, and the later
/// passes read the copy.
pub struct Twice {
    /// The file the later passes read, and the offset they start at.
    file: Option<(File, u64)>,
    /// The pipe, until the first pass takes it.
    pipe: Option<Box<dyn Read>>,
}

impl Twice {
    /// Opens `path` (`None` or `-`: stdin). Nothing is copied yet.
    pub fn open(path: Option<&Path>) -> Result<Twice> {
        let stdin = path.is_none_or(|p| p == Path::new("-"));
        if !stdin {
            // Opened once (a named pipe opened twice would lose its writer).
            let file = crate::jsonl::open_file(path.unwrap_or(Path::new("-")))?;
            // A named pipe (or a device) cannot be read again: copied as stdin is.
            if !file.metadata().is_ok_and(|m| m.is_file()) {
                return Ok(Twice {
                    file: None,
                    pipe: Some(Box::new(file)),
                });
            }
            return Ok(Twice {
                file: Some((file, 0)),
                pipe: None,
            });
        }
        if let Some(file) = stdin_file() {
            let mut file = file;
            // A redirected stdin may already be part-read: start where it is.
            let at = file.stream_position().unwrap_or(0);
            return Ok(Twice {
                file: Some((file, at)),
                pipe: None,
            });
        }
        Ok(Twice {
            file: None,
            pipe: Some(crate::jsonl::open_input(None)?),
        })
    }

    /// True when the input is a pipe the first pass copies to disk.
    pub fn spools(&self) -> bool {
        self.pipe.is_some()
    }

    /// The reader of the first pass. For a pipe, what it reads is copied
    /// to a temporary file, which [`Twice::again`] reads after the pass.
    pub fn first(&mut self) -> Result<Box<dyn Read>> {
        match self.pipe.take() {
            Some(pipe) => {
                let spool = temp_file()?;
                let copy = spool.try_clone().map_err(io_error)?;
                self.file = Some((spool, 0));
                Ok(Box::new(Tee {
                    src: pipe,
                    copy: io::BufWriter::with_capacity(1 << 20, copy),
                    failed: None,
                }))
            }
            None => self.again(),
        }
    }

    /// A reader from the start of the input again (the copy, for a pipe).
    /// Only one reader at a time: they share the file's offset.
    pub fn again(&self) -> Result<Box<dyn Read>> {
        let Some((file, at)) = &self.file else {
            return Err(Error::Input(
                "the input was read before it was copied".into(),
            ));
        };
        let mut f = file.try_clone()?;
        f.seek(SeekFrom::Start(*at))?;
        Ok(Box::new(f))
    }
}

/// stdin as a regular file, when it is one (seekable, readable again).
fn stdin_file() -> Option<File> {
    use std::os::fd::AsFd;
    let fd = io::stdin().as_fd().try_clone_to_owned().ok()?;
    let file = File::from(fd);
    file.metadata().ok()?.is_file().then_some(file)
}

/// A reader that copies what it reads to a file. The copy is flushed when
/// the reader reaches the end; a failed write is reported as the read's
/// error, naming the temporary directory.
struct Tee {
    src: Box<dyn Read>,
    copy: io::BufWriter<File>,
    failed: Option<io::ErrorKind>,
}

impl Read for Tee {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(kind) = self.failed {
            return Err(io::Error::new(kind, "the temporary copy failed before"));
        }
        let n = self.src.read(buf)?;
        let wrote = if n == 0 {
            self.copy.flush()
        } else {
            self.copy.write_all(&buf[..n])
        };
        if let Err(e) = wrote {
            self.failed = Some(e.kind());
            let Error::Io(e) = io_error(e) else {
                unreachable!("io_error makes an Io error")
            };
            return Err(e);
        }
        Ok(n)
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        // A first pass stopped early (a bad line) still leaves what it read
        // on disk for the second, which stops at the same line.
        let _ = self.copy.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_piped_input_is_copied_as_it_is_read_and_read_again() {
        let mut t = Twice {
            file: None,
            pipe: Some(Box::new(io::Cursor::new(b"a\nbb\nccc\n".to_vec()))),
        };
        assert!(t.spools());
        let mut first = String::new();
        t.first().unwrap().read_to_string(&mut first).unwrap();
        assert_eq!(first, "a\nbb\nccc\n");
        for _ in 0..2 {
            let mut again = String::new();
            t.again().unwrap().read_to_string(&mut again).unwrap();
            assert_eq!(again, "a\nbb\nccc\n");
        }
    }

    #[test]
    fn a_file_is_read_again_from_where_it_started() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"skip\nrow\n").unwrap();
        f.seek(SeekFrom::Start(5)).unwrap();
        let mut t = Twice {
            file: Some((f, 5)),
            pipe: None,
        };
        assert!(!t.spools());
        let mut s = String::new();
        t.first().unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "row\n");
        s.clear();
        t.again().unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "row\n");
    }
}
