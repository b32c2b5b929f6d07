//! mc-replay's progress on stderr: the counts of a run, shown by the core
//! reporter (`crate::progress`: a live line on a terminal, a plain line
//! every `--status-every` seconds otherwise).

use std::time::Duration;

pub use crate::progress::Mode;
use crate::results::Tally;

/// Counts for the progress line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    pub sent: u64,
    pub done: u64,
    pub failed: u64,
}

const TOOL: &str = "mc-replay";

pub struct Progress(crate::progress::Progress);

impl Progress {
    /// `plain_every`: the interval of plain status lines (10 s by default).
    pub fn new(mode: Mode, plain_every: Duration) -> Progress {
        Progress(crate::progress::Progress::new(TOOL, mode, plain_every))
    }

    /// For stderr as it is: live on a terminal, plain otherwise.
    pub fn for_stderr(plain_every: Duration) -> Progress {
        Progress(crate::progress::Progress::for_stderr(TOOL, plain_every))
    }

    pub fn tick(&mut self, c: &Counts, in_flight: usize, tally: &Tally) {
        self.0
            .tick(|| status_line(c, in_flight, tally.lag.stats().map(|s| s.p99)));
    }

    /// Erases the live line before the summary.
    pub fn finish(&mut self) {
        self.0.finish();
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
