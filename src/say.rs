//! Every line a tool writes to stderr, written whole and never fatal.
//!
//! `eprintln!` on Rust's unbuffered stderr makes one `write` per piece of
//! its format (`mc-replay: `, the value, the rest, the newline): shards
//! sharing one Slurm log cut each other's lines mid-word. And it panics
//! (exit 101) when the write fails, so `2>/dev/full` ended a run before
//! its first request and wrote no results. Here a line is formatted first
//! and handed to the kernel in one `write` call, and a failed write is
//! dropped: what stderr can take never changes a run's results or exit
//! code. `lib.rs` points the crate's `eprintln!` and `eprint!` here.

use std::io::Write;

/// Writes `text` and a newline to stderr in one call; errors are dropped.
pub fn line(text: &str) {
    let _ = line_into(&mut std::io::stderr().lock(), text);
}

/// Writes `text` (its own line ends) to stderr in one call; errors are
/// dropped.
pub fn text(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// `text` and a newline into `out`, as one `write_all` of one buffer.
pub fn line_into(out: &mut impl Write, text: &str) -> std::io::Result<()> {
    let mut buf = String::with_capacity(text.len() + 1);
    buf.push_str(text);
    buf.push('\n');
    out.write_all(buf.as_bytes())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Counts the `write` calls it is given.
    #[derive(Default)]
    pub struct Writes(pub Vec<Vec<u8>>);

    impl Write for Writes {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_line_is_one_write() {
        let mut w = Writes::default();
        line_into(&mut w, &format!("mc-replay: {} rows, {:.1} s", 12, 3.25)).unwrap();
        assert_eq!(w.0, [b"mc-replay: 12 rows, 3.2 s\n".to_vec()]);
        // What `writeln!` does on an unbuffered writer: a write a piece.
        let mut w = Writes::default();
        writeln!(w, "mc-replay: {} rows, {:.1} s", 12, 3.25).unwrap();
        assert!(w.0.len() > 1, "{:?}", w.0);
    }
}
