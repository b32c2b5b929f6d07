//! The one progress reporter on stderr, so a long run is never silent and
//! every tool shows it the same way: on a terminal a live line redrawn at
//! most every 200 ms (`\r`, erased at the end); otherwise (logs, CI) a plain
//! line every N seconds, N chosen by the caller. The caller supplies the
//! text; the reporter adds `TOOL: ` and decides when a line is due. Paced
//! by the wall clock, whatever clock the work runs on.

use std::io::Write;
use std::time::{Duration, Instant};

/// Where the lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Off,
    /// A terminal: redraw one line.
    Live,
    /// Not a terminal: a plain line now and then.
    Plain,
}

/// The live line's pace: often enough to look alive, rarely enough that
/// drawing costs nothing.
pub const LIVE_EVERY: Duration = Duration::from_millis(200);

pub struct Progress {
    tool: &'static str,
    mode: Mode,
    plain_every: Duration,
    last: Instant,
    /// A live line is on the screen (to erase it at the end).
    drawn: bool,
    /// Nothing is shown before this instant (a short run stays silent).
    quiet_until: Instant,
}

impl Progress {
    /// `plain_every`: the interval of plain lines. The first line is due
    /// one interval from now.
    pub fn new(tool: &'static str, mode: Mode, plain_every: Duration) -> Progress {
        Progress::starting_at(tool, mode, plain_every, Instant::now())
    }

    /// As [`Progress::new`], counting the first interval from `now`.
    pub fn starting_at(
        tool: &'static str,
        mode: Mode,
        plain_every: Duration,
        now: Instant,
    ) -> Progress {
        Progress {
            tool,
            mode,
            plain_every,
            last: now,
            drawn: false,
            quiet_until: now,
        }
    }

    /// For stderr as it is: live on a terminal, plain otherwise.
    pub fn for_stderr(tool: &'static str, plain_every: Duration) -> Progress {
        Progress::new(tool, stderr_mode(), plain_every)
    }

    /// Shows nothing, live or plain, until `quiet` has passed since the
    /// start: a run shorter than that prints nothing at all.
    pub fn quiet_for(mut self, quiet: Duration) -> Progress {
        self.quiet_until = self.last + quiet;
        self
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Shows `text()` on stderr if a line is due; `text` is only called
    /// then, so building it may cost something.
    pub fn tick(&mut self, text: impl FnOnce() -> String) {
        let _ = self.tick_at(Instant::now(), text, &mut std::io::stderr().lock());
    }

    /// [`Progress::tick`] at `now`, into `out`; returns whether a line was
    /// written.
    pub fn tick_at(
        &mut self,
        now: Instant,
        text: impl FnOnce() -> String,
        out: &mut impl Write,
    ) -> std::io::Result<bool> {
        let every = match self.mode {
            Mode::Off => return Ok(false),
            Mode::Live => LIVE_EVERY,
            Mode::Plain => self.plain_every,
        };
        if now < self.quiet_until || now.saturating_duration_since(self.last) < every {
            return Ok(false);
        }
        self.last = now;
        let (tool, text) = (self.tool, text());
        // One buffer, one write: a line of one shard is not cut by another
        // shard's in a shared log (`say`).
        let line = match self.mode {
            Mode::Live => {
                self.drawn = true;
                format!("\r\x1b[K{tool}: {text}")
            }
            _ => format!("{tool}: {text}\n"),
        };
        out.write_all(line.as_bytes())?;
        Ok(true)
    }

    /// Erases the live line, so the summary starts on a clean line.
    pub fn finish(&mut self) {
        let _ = self.finish_into(&mut std::io::stderr().lock());
    }

    fn finish_into(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if self.drawn {
            self.drawn = false;
            write!(out, "\r\x1b[K")?;
        }
        Ok(())
    }
}

/// Live on a terminal, plain otherwise.
pub fn stderr_mode() -> Mode {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        Mode::Live
    } else {
        Mode::Plain
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Each `write` call it is given, apart.
    use crate::say::tests::Writes;

    #[test]
    fn a_status_line_is_one_write() {
        // Shards sharing a Slurm log cut each other's lines when a line
        // took a write a piece.
        let t0 = Instant::now();
        for mode in [Mode::Plain, Mode::Live] {
            let mut p = Progress::starting_at("mc-x", mode, ms(10), t0);
            let mut w = Writes(Vec::new());
            assert!(p
                .tick_at(t0 + ms(20_000), || format!("{} rows", 7), &mut w)
                .unwrap());
            assert_eq!(w.0.len(), 1, "{mode:?}: {:?}", w.0);
        }
    }

    #[test]
    fn plain_lines_come_once_an_interval() {
        let t0 = Instant::now();
        let mut p = Progress::starting_at("mc-x", Mode::Plain, ms(10_000), t0);
        let mut out = Vec::new();
        let mut n = 0;
        let mut at = |p: &mut Progress, t: u64, out: &mut Vec<u8>| {
            n += 1;
            let k = n;
            p.tick_at(t0 + ms(t), || format!("{k} rows"), out).unwrap()
        };
        assert!(!at(&mut p, 0, &mut out));
        assert!(!at(&mut p, 9_999, &mut out));
        assert!(at(&mut p, 10_000, &mut out));
        assert!(!at(&mut p, 15_000, &mut out));
        assert!(!at(&mut p, 19_999, &mut out));
        assert!(at(&mut p, 20_000, &mut out));
        // A late tick resets the interval from itself.
        assert!(at(&mut p, 45_000, &mut out));
        assert!(!at(&mut p, 54_999, &mut out));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "mc-x: 3 rows\nmc-x: 6 rows\nmc-x: 7 rows\n"
        );
        // No live line was drawn: nothing to erase.
        let mut end = Vec::new();
        p.finish_into(&mut end).unwrap();
        assert!(end.is_empty());
    }

    #[test]
    fn the_text_is_built_only_when_due() {
        let t0 = Instant::now();
        let mut p = Progress::starting_at("mc-x", Mode::Plain, ms(1_000), t0);
        let mut out = Vec::new();
        let built = std::cell::Cell::new(0);
        let text = || {
            built.set(built.get() + 1);
            String::from("t")
        };
        p.tick_at(t0 + ms(10), text, &mut out).unwrap();
        assert_eq!(built.get(), 0);
        p.tick_at(t0 + ms(1_000), text, &mut out).unwrap();
        assert_eq!(built.get(), 1);
    }

    #[test]
    fn live_lines_redraw_every_200_ms_and_are_erased() {
        let t0 = Instant::now();
        // The plain interval does not pace a live line.
        let mut p = Progress::starting_at("mc-x", Mode::Live, ms(10_000), t0);
        let mut out = Vec::new();
        assert!(!p.tick_at(t0 + ms(199), || "a".into(), &mut out).unwrap());
        assert!(p.tick_at(t0 + ms(200), || "b".into(), &mut out).unwrap());
        assert!(!p.tick_at(t0 + ms(300), || "c".into(), &mut out).unwrap());
        assert!(p.tick_at(t0 + ms(400), || "d".into(), &mut out).unwrap());
        p.finish_into(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\r\x1b[Kmc-x: b\r\x1b[Kmc-x: d\r\x1b[K"
        );
    }

    #[test]
    fn nothing_is_shown_while_quiet() {
        let t0 = Instant::now();
        let mut p = Progress::starting_at("mc-x", Mode::Live, ms(10_000), t0).quiet_for(ms(3_000));
        let mut out = Vec::new();
        // A live line would be due at 200 ms; quiet holds it to 3 s.
        assert!(!p.tick_at(t0 + ms(200), || "a".into(), &mut out).unwrap());
        assert!(!p.tick_at(t0 + ms(2_999), || "b".into(), &mut out).unwrap());
        assert!(p.tick_at(t0 + ms(3_000), || "c".into(), &mut out).unwrap());
        let mut plain =
            Progress::starting_at("mc-x", Mode::Plain, ms(1_000), t0).quiet_for(ms(3_000));
        assert!(!plain
            .tick_at(t0 + ms(2_000), || "d".into(), &mut out)
            .unwrap());
        assert!(plain
            .tick_at(t0 + ms(3_000), || "e".into(), &mut out)
            .unwrap());
        assert_eq!(String::from_utf8(out).unwrap(), "\r\x1b[Kmc-x: cmc-x: e\n");
    }

    #[test]
    fn off_writes_nothing() {
        let t0 = Instant::now();
        let mut p = Progress::starting_at("mc-x", Mode::Off, ms(1), t0);
        let mut out = Vec::new();
        assert!(!p.tick_at(t0 + ms(10_000), || "a".into(), &mut out).unwrap());
        p.finish_into(&mut out).unwrap();
        assert!(out.is_empty());
    }
}
