//! How many connections an event loop may hold when `--max-connections`
//! is not given: Little's law on what the loop measured. Requests in
//! flight are the arrival rate times the time each one takes, so a loop
//! needs about `rate × latency` connections, and [`HEADROOM`] times that
//! leaves room for bursts and for the spread of latencies around their
//! mean. Both figures are immune to the loop's own stalls, which is what
//! ends the churn: the rate is read from the schedule's due times (not
//! from when the loop took the jobs), and the latency from each answer's
//! send to its end as the kernel stamped it (not from when the loop read
//! it). A loop held up 50 ms at 10,000 tiny req/s used to open a
//! connection for every request due meanwhile, their answers unread in the
//! sockets; now they wait for the few connections the measured rate and
//! latency call for.
//!
//! Before any answer has ended, and while a slow server holds every
//! connection, the age of the oldest request still in flight is a lower
//! bound of the latency (it has not ended yet), so the cap grows with a
//! slow server's first answers instead of waiting for them.
//!
//! Requests already waiting (after a stall of the client or the server)
//! add what it takes to send them all within [`DRAIN_US`] at that latency:
//! `waiting × latency / DRAIN_US`. Against a server that answers in
//! 0.3 ms, 1,000 requests waiting after a 100 ms stall ask for 15 more
//! connections, not 1,000; against one that takes 50 ms, each waiting
//! request gets one (it would otherwise wait a whole answer).

/// The cap over the measured need.
pub const HEADROOM: f64 = 2.0;
/// Connections a loop may always open: below it Little's law's estimate
/// is noise (at 10,000 tiny req/s the need is 3 to 5 connections), and
/// a few spare connections cost nothing.
pub const FLOOR: usize = 16;
/// The span of due times the arrival rate is measured over (two of them,
/// the last whole one and the current one).
const WINDOW_US: u64 = 100_000;
/// The shortest span a rate is divided by: the first few requests of a
/// run are not a rate.
const MIN_SPAN_US: u64 = 10_000;
/// How soon the requests waiting for a connection should all be sent.
pub const DRAIN_US: f64 = 20_000.0;
/// The weight of each new latency in the running mean (Little's law wants
/// the mean; a recent one, as a server's latency moves with its load).
const LATENCY_WEIGHT: f64 = 1.0 / 16.0;

/// One loop's measurements and the cap they give.
#[derive(Debug, Clone)]
pub(super) struct Demand {
    ceiling: usize,
    /// Due time (µs) the current window began at; `None` before any job.
    window_start: Option<u64>,
    in_window: u64,
    /// The window before: its job count and its length (µs).
    last_count: u64,
    last_span: u64,
    /// The latest due time seen.
    last_due: u64,
    /// Running mean of send-to-end times (µs); `None` before any end.
    latency_us: Option<f64>,
}

impl Demand {
    /// Measurements of a loop whose cap never passes `ceiling` (nor goes
    /// below [`FLOOR`], unless the ceiling does).
    pub fn new(ceiling: usize) -> Demand {
        Demand {
            ceiling,
            window_start: None,
            in_window: 0,
            last_count: 0,
            last_span: 0,
            last_due: 0,
            latency_us: None,
        }
    }

    /// A job due at `due_us` (the schedule's time, µs) came to the loop.
    pub fn arrived(&mut self, due_us: u64) {
        let start = *self.window_start.get_or_insert(due_us);
        // Due times of later turns follow their sessions' ends and may be
        // out of order by a little: a window only moves forward.
        self.last_due = self.last_due.max(due_us);
        let span = self.last_due.saturating_sub(start);
        if span >= WINDOW_US {
            self.last_count = self.in_window;
            self.last_span = span;
            self.window_start = Some(self.last_due);
            self.in_window = 0;
        }
        self.in_window += 1;
    }

    /// A request ended `latency_us` after it was sent.
    pub fn ended(&mut self, latency_us: u64) {
        let l = latency_us as f64;
        self.latency_us = Some(match self.latency_us {
            None => l,
            Some(m) => m + (l - m) * LATENCY_WEIGHT,
        });
    }

    /// Arrivals per µs over the last whole window and the current one.
    fn rate_per_us(&self) -> f64 {
        let Some(start) = self.window_start else {
            return 0.0;
        };
        let span = (self.last_due.saturating_sub(start) + self.last_span).max(MIN_SPAN_US);
        (self.in_window + self.last_count) as f64 / span as f64
    }

    /// The cap now: [`HEADROOM`] × rate × latency, plus `waiting` ×
    /// latency / [`DRAIN_US`] for the requests waiting for a connection,
    /// where the latency is the running mean or, if longer,
    /// `oldest_age_us` (how long the oldest request in flight has been
    /// waiting for its answer, as of a poll that read every answer already
    /// in), within [`FLOOR`] and the ceiling.
    pub fn cap(&self, oldest_age_us: u64, waiting: usize) -> usize {
        let latency = self.latency_us.unwrap_or(0.0).max(oldest_age_us as f64);
        let backlog = waiting as f64 * (latency / DRAIN_US).min(1.0);
        let need = (HEADROOM * self.rate_per_us() * latency + backlog).ceil();
        // `as` saturates a float too large for usize.
        (need as usize).max(FLOOR).min(self.ceiling)
    }
}

/// The most connections the whole client opens without `--max-connections`:
/// the open-file limit less what the process needs besides sockets, and
/// half the ephemeral port range (each connection to one server address
/// takes a port from it, and a closed one keeps it for TIME_WAIT's 60 s:
/// the other half is the next run's, started within the minute), and no
/// more than the trace's rows. `None` where neither limit can be read.
pub fn ceiling(open_files: Option<u64>, ephemeral_ports: Option<u64>, rows: usize) -> usize {
    /// Descriptors kept for what is not a connection (the trace, the
    /// results, the loops' polls and wakers, the metrics scrape).
    const OTHER_FILES: u64 = 64;
    // A tiny limit (a test's `ulimit -n 48`) keeps half for sockets.
    let files = open_files.map(|n| n - OTHER_FILES.min(n / 2));
    let ports = ephemeral_ports.map(|n| n / 2);
    let most = match (files, ports) {
        (Some(f), Some(p)) => f.min(p),
        (f, p) => f.or(p).unwrap_or(u64::MAX),
    };
    usize::try_from(most).unwrap_or(usize::MAX).min(rows).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` jobs due `gap_us` apart from `from_us`.
    fn arrive(d: &mut Demand, from_us: u64, n: u64, gap_us: u64) {
        for i in 0..n {
            d.arrived(from_us + i * gap_us);
        }
    }

    #[test]
    fn the_cap_is_twice_rate_times_latency() {
        // 5,000 req/s (200 µs apart) with answers taking 50 ms: 250 in
        // flight, a cap of 500.
        let mut d = Demand::new(100_000);
        arrive(&mut d, 0, 1_000, 200);
        for _ in 0..100 {
            d.ended(50_000);
        }
        let cap = d.cap(0, 0);
        assert!((495..=505).contains(&cap), "{cap}");
    }

    #[test]
    fn a_stall_does_not_raise_the_cap() {
        // 10,000 req/s of answers taking 300 µs: a need of 3, the floor.
        // A stall of the loop shows as nothing here: the due times are
        // the schedule's and the latencies the kernel's stamps.
        let mut d = Demand::new(100_000);
        arrive(&mut d, 0, 20_000, 100);
        for _ in 0..1_000 {
            d.ended(300);
        }
        assert_eq!(d.cap(0, 0), FLOOR);
        // Requests just sent after the stall are young; the 1,000 due
        // meanwhile and still waiting ask for 1,000 × 0.3 / 20 = 15 more.
        assert_eq!(d.cap(100, 0), FLOOR);
        let cap = d.cap(100, 1_000);
        assert!((21..=22).contains(&cap), "{cap}");
    }

    #[test]
    fn waiting_requests_of_a_slow_server_get_a_connection_each() {
        let mut d = Demand::new(100_000);
        arrive(&mut d, 0, 1_000, 200);
        d.ended(50_000);
        assert_eq!(d.cap(0, 0), 501);
        assert_eq!(d.cap(0, 300), 801);
    }

    #[test]
    fn a_slow_first_answer_grows_the_cap_by_its_age() {
        // No answer yet, 5,000 req/s: the oldest request's age is the
        // latency's lower bound.
        let mut d = Demand::new(100_000);
        arrive(&mut d, 0, 100, 200);
        assert_eq!(d.cap(1_000, 0), FLOOR);
        let cap = d.cap(40_000, 0);
        assert!((395..=405).contains(&cap), "{cap}");
        // A running mean below the age does not lower it.
        d.ended(1_000);
        assert_eq!(d.cap(40_000, 0), cap);
    }

    #[test]
    fn the_rate_follows_the_schedule_after_a_window() {
        let mut d = Demand::new(100_000);
        // 1,000 req/s for a second, then 10,000 req/s.
        arrive(&mut d, 0, 1_000, 1_000);
        d.ended(10_000);
        let slow = d.cap(0, 0);
        arrive(&mut d, 1_000_000, 3_000, 100);
        let fast = d.cap(0, 0);
        assert!((19..=21).contains(&slow), "{slow}");
        assert!((195..=205).contains(&fast), "{fast}");
    }

    #[test]
    fn the_cap_stays_within_the_floor_and_the_ceiling() {
        let mut d = Demand::new(300);
        assert_eq!(d.cap(0, 0), FLOOR, "no job yet");
        arrive(&mut d, 0, 1_000, 10);
        d.ended(10_000_000);
        assert_eq!(d.cap(0, 0), 300);
        assert_eq!(Demand::new(4).cap(0, 0), 4, "a ceiling under the floor");
    }

    #[test]
    fn the_ceiling_is_the_smallest_limit() {
        // ulimit -n 1,024 less 64; half of 28,232 ports; the rows.
        assert_eq!(ceiling(Some(1_024), Some(28_232), 100_000), 960);
        assert_eq!(ceiling(Some(1 << 20), Some(28_232), 100_000), 14_116);
        assert_eq!(ceiling(Some(1 << 20), Some(28_232), 500), 500);
        assert_eq!(ceiling(None, None, 500), 500);
        assert_eq!(ceiling(Some(48), None, 500), 24);
        assert_eq!(ceiling(Some(0), None, 500), 1);
    }
}
