//! Progress on stderr: a live line on a terminal (every 250 ms), a plain
//! status line at most every 10 s otherwise (logs, CI), so a long run is
//! never silent. Wall-clock paced, whatever the target's clock.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::results::Tally;

/// Counts for the progress line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    pub sent: u64,
    pub done: u64,
    pub failed: u64,
}

pub struct Progress {
    mode: Mode,
    plain_every: Duration,
    last: Instant,
    /// The last live line drawn (to erase it at the end).
    drawn: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Off,
    /// A terminal: redraw one line.
    Live,
    /// Not a terminal: a plain line now and then.
    Plain,
}

const LIVE_EVERY: Duration = Duration::from_millis(250);

impl Progress {
    /// `plain_every`: the interval of plain status lines (10 s by default).
    pub fn new(mode: Mode, plain_every: Duration) -> Progress {
        Progress {
            mode,
            plain_every,
            last: Instant::now(),
            drawn: false,
        }
    }

    /// For stderr as it is: live on a terminal, plain otherwise.
    pub fn for_stderr(plain_every: Duration) -> Progress {
        use std::io::IsTerminal;
        let mode = if std::io::stderr().is_terminal() {
            Mode::Live
        } else {
            Mode::Plain
        };
        Progress::new(mode, plain_every)
    }

    pub fn tick(&mut self, c: &Counts, in_flight: usize, tally: &Tally) {
        let every = match self.mode {
            Mode::Off => return,
            Mode::Live => LIVE_EVERY,
            Mode::Plain => self.plain_every,
        };
        if self.last.elapsed() < every {
            return;
        }
        self.last = Instant::now();
        let line = status_line(c, in_flight, tally.lag.stats().map(|s| s.p99));
        let mut err = std::io::stderr().lock();
        let _ = match self.mode {
            Mode::Live => {
                self.drawn = true;
                write!(err, "\r\x1b[K{line}")
            }
            _ => writeln!(err, "mc-replay: {line}"),
        };
    }

    /// Erases the live line before the summary.
    pub fn finish(&mut self) {
        if self.drawn {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
            self.drawn = false;
        }
    }
}

/// `sent 10  done 8  failed 1  in flight 2  lag p99 3.1 ms`
pub fn status_line(c: &Counts, in_flight: usize, lag_p99_ms: Option<f64>) -> String {
    let lag = lag_p99_ms.map_or("-".to_string(), |l| format!("{l:.1} ms"));
    format!(
        "sent {}  done {}  failed {}  in flight {in_flight}  lag p99 {lag}",
        c.sent, c.done, c.failed
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_line_names_every_count() {
        let c = Counts {
            sent: 10,
            done: 8,
            failed: 1,
        };
        assert_eq!(
            status_line(&c, 2, Some(3.16)),
            "sent 10  done 8  failed 1  in flight 2  lag p99 3.2 ms"
        );
        assert_eq!(
            status_line(&Counts::default(), 0, None),
            "sent 0  done 0  failed 0  in flight 0  lag p99 -"
        );
    }
}
