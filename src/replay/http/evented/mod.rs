//! The event-driven real-server target: a few event-loop threads, each
//! owning its connections (non-blocking sockets under `mio`), HTTP/1.1
//! keep-alive reuse, and one buffer per stream. Every read carries the
//! time its bytes arrived ([`crate::rxtime`]: the kernel's stamp on Linux,
//! else the read's own time) on the run's [`Clock`], so a thousand streams
//! in flight cost a thousand sockets, not a thousand threads, and no
//! answer's time waits for a thread to be scheduled.
//!
//! Three rooms, each with one job:
//! - here, the target: the seam the scheduler sees ([`Target`]), which
//!   hands jobs to the loops round-robin and collects their ends;
//! - `event_loop`, the loops: sockets, readiness, timers, connections
//!   kept alive and reclaimed, read coalescing, prefetch; one connection's
//!   reads and writes (plaintext or through TLS) are in `conn`;
//! - [`exchange`], the protocol: one request's bytes out and its answer's
//!   bytes in, sans-IO (no socket, no clock: every read comes with its
//!   arrival time), so it is tested and fuzzed byte by byte.
//!
//! Requests in flight are in the shared [`Registry`], so a drain that runs
//! out cancels them exactly as the blocking target does: whoever claims a
//! request first writes its result.

mod conn;
mod demand;
mod event_loop;
pub mod exchange;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use crossbeam_utils::sync::{Parker, Unparker};
use mio::{Token, Waker};

use super::cancel_registered;
use super::client::Clock;
use super::inflight::Registry;
use super::request::RequestBuilder;
use super::tls::Tls;
use super::wire::Endpoint;
use crate::oslimit;
use crate::replay::target::{Done, Job, Target};
use crate::replay::trace::Trace;
use crate::results::summary::Connections;
use event_loop::Loop;

/// The waker's token; connections use their slot index.
const WAKER: Token = Token(usize::MAX);

/// Answers in flight on a loop from which it coalesces its reads: below
/// it, CPU per token does not matter and a stream's end is noticed at
/// once (a session's next turn waits for it).
pub const COALESCE_FROM: usize = 100;

/// How the evented client is set up.
#[derive(Debug, Clone)]
pub struct Config {
    pub endpoint: Endpoint,
    pub user_agent: String,
    /// `--timeout`, per request from its send.
    pub timeout: Duration,
    /// `--max-connections`, or the cap grown on demand without it.
    pub max_connections: ConnCap,
    /// Event-loop threads (at least 1).
    pub loops: usize,
    /// `--max-event-bytes`.
    pub max_event_bytes: usize,
    /// `--read-coalesce-us`: with `COALESCE_FROM` answers in flight, at
    /// most one poll per this long (zero: poll on every event).
    pub coalesce: Duration,
    /// Set for an https:// endpoint: every connection is a TLS session.
    pub tls: Option<Tls>,
}

/// How many connections the client may open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnCap {
    /// No `--max-connections`: as many as the measured rate and latency
    /// call for (`demand`), never more than `ceiling` (see
    /// [`auto_ceiling`]).
    Auto { ceiling: usize },
    /// `--max-connections 0`: one per request in flight.
    Unlimited,
    /// `--max-connections N`.
    Fixed(usize),
}

impl ConnCap {
    /// `--max-connections` as given (`None`: not given), for a trace of
    /// `rows` rows.
    pub fn from_option(n: Option<usize>, rows: usize) -> ConnCap {
        match n {
            None => ConnCap::Auto {
                ceiling: auto_ceiling(rows),
            },
            Some(0) => ConnCap::Unlimited,
            Some(n) => ConnCap::Fixed(n),
        }
    }

    /// The most connections open at once, if there is a most.
    pub fn most(self) -> Option<usize> {
        match self {
            ConnCap::Auto { ceiling } => Some(ceiling),
            ConnCap::Unlimited => None,
            ConnCap::Fixed(n) => Some(n),
        }
    }
}

/// The most connections the client opens without `--max-connections`
/// (call after the open-file limit was raised): the open-file limit less
/// a reserve, half the ephemeral port range, and no more than the
/// trace's `rows`.
pub fn auto_ceiling(rows: usize) -> usize {
    demand::ceiling(oslimit::open_files(), oslimit::ephemeral_ports(), rows)
}

/// What every loop reads.
struct Shared {
    trace: Arc<Trace>,
    builder: RequestBuilder,
    cfg: Config,
    clock: Clock,
    registry: Registry,
    stop: Arc<AtomicBool>,
    /// The server's addresses, resolved once (by the first loop that needs
    /// them); a failed lookup is not kept, so each request tries again and
    /// fails as `dns` on its own.
    addrs: Mutex<Option<Arc<[SocketAddr]>>>,
    /// Set when a loop first ran out of file descriptors (noted once).
    out_of_files: AtomicBool,
    /// Connections open in all loops.
    open_total: AtomicUsize,
    /// TCP connects made, and the most connections open at once.
    connects: AtomicU64,
    most_open: AtomicUsize,
    /// The loops' caps summed (auto cap only), and the most it reached.
    cap_total: AtomicUsize,
    cap_peak: AtomicUsize,
}

impl Shared {
    /// The loops' shared state before the first request: nothing resolved,
    /// nothing open, no connect counted.
    fn new(
        trace: Arc<Trace>,
        builder: RequestBuilder,
        cfg: Config,
        clock: Clock,
        stop: Arc<AtomicBool>,
    ) -> Self {
        Shared {
            trace,
            builder,
            cfg,
            clock,
            registry: Registry::default(),
            stop,
            addrs: Mutex::new(None),
            out_of_files: AtomicBool::new(false),
            open_total: AtomicUsize::new(0),
            connects: AtomicU64::new(0),
            most_open: AtomicUsize::new(0),
            cap_total: AtomicUsize::new(0),
            cap_peak: AtomicUsize::new(0),
        }
    }

    /// Says once, on stderr, that the client's open-file limit now caps
    /// its connections (`open`: the loop's when it hit it).
    fn note_out_of_files(&self, open: usize) {
        if self.out_of_files.swap(true, Ordering::Relaxed) {
            return;
        }
        let limit = oslimit::open_files().map_or(String::new(), |n| format!(" (ulimit -n {n})"));
        eprintln!(
            "mc-replay: out of file descriptors{limit} with {open} connections open in one \
             event loop: from now on requests wait for a free connection, and their \
             schedule lag shows it; raise the limit to send them on time"
        );
    }
}

enum Msg {
    Job(Job),
    /// The run is stopping, or the target is gone: look at the flags.
    Check,
}

struct LoopHandle {
    tx: Sender<Msg>,
    waker: Arc<Waker>,
    /// Ends the loop's read-coalescing pause ([`Loop::coalesce`]).
    unparker: Unparker,
    thread: Option<JoinHandle<()>>,
    quit: Arc<AtomicBool>,
}

pub struct EventedTarget {
    shared: Arc<Shared>,
    loops: Vec<LoopHandle>,
    next: usize,
    done_rx: Receiver<Done>,
    /// Woken by every `Done` the loops send ([`DoneTx`]) while `done_ring`.
    done_parker: Parker,
    done_ring: Arc<AtomicBool>,
    /// The loops were told the run is stopping.
    stop_told: bool,
}

/// The event loops could not be started.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the HTTP client's event loop")]
pub struct StartError(#[source] pub io::Error);

impl EventedTarget {
    pub fn new(
        trace: Arc<Trace>,
        builder: RequestBuilder,
        mut cfg: Config,
        clock: Clock,
        stop: Arc<AtomicBool>,
    ) -> Result<EventedTarget, StartError> {
        cfg.loops = cfg.loops.max(1);
        if let Some(n) = cfg.max_connections.most() {
            cfg.loops = cfg.loops.min(n.max(1));
        }
        // The cap split exactly: the first loops take the remainder.
        let per_loop = |i: usize| match cfg.max_connections.most() {
            None => usize::MAX,
            Some(n) => n / cfg.loops + usize::from(i < n % cfg.loops),
        };
        let n_loops = cfg.loops;
        let caps: Vec<usize> = (0..n_loops).map(per_loop).collect();
        let auto = matches!(cfg.max_connections, ConnCap::Auto { .. });
        let shared = Arc::new(Shared::new(trace, builder, cfg, clock, stop));
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        let done_parker = Parker::new();
        let done_ring = Arc::new(AtomicBool::new(true));
        let done_tx = DoneTx {
            tx: done_tx,
            bell: done_parker.unparker().clone(),
            ring: done_ring.clone(),
        };
        let mut loops = Vec::with_capacity(n_loops);
        for (i, &cap) in caps.iter().enumerate() {
            let (tx, rx) = crossbeam_channel::unbounded();
            let quit = Arc::new(AtomicBool::new(false));
            let demand = auto.then(|| demand::Demand::new(cap));
            let mut lp = Loop::new(
                shared.clone(),
                rx,
                done_tx.clone(),
                quit.clone(),
                cap,
                demand,
            )
            .map_err(StartError)?;
            let (waker, unparker) = lp.bells().map_err(StartError)?;
            let waker = Arc::new(waker);
            let thread = std::thread::Builder::new()
                .name(format!("mc-replay-loop-{i}"))
                .spawn(move || lp.run())
                .map_err(StartError)?;
            loops.push(LoopHandle {
                tx,
                waker,
                unparker,
                thread: Some(thread),
                quit,
            });
        }
        Ok(EventedTarget {
            shared,
            loops,
            next: 0,
            done_rx,
            done_parker,
            done_ring,
            stop_told: false,
        })
    }

    fn take_ready(&self, done: &mut Vec<Done>) {
        done.extend(self.done_rx.try_iter());
    }

    /// Tells every loop to look at the flags (stop, quit).
    fn check_all(&self) {
        for l in &self.loops {
            let _ = l.tx.send(Msg::Check);
            // A failed wake leaves the loop to its next event or timer.
            let _ = l.waker.wake();
            l.unparker.unpark();
        }
    }
}

impl Drop for EventedTarget {
    fn drop(&mut self) {
        for l in &self.loops {
            l.quit.store(true, Ordering::Release);
        }
        self.check_all();
        for l in &mut self.loops {
            if let Some(t) = l.thread.take() {
                // A loop that panicked has nothing left to report.
                let _ = t.join();
            }
        }
    }
}

impl Target for EventedTarget {
    fn name(&self) -> &'static str {
        "http"
    }

    fn now_us(&self) -> u64 {
        self.shared.clock.now_us()
    }

    fn submit(&mut self, job: Job) {
        let l = &self.loops[self.next % self.loops.len()];
        self.next = self.next.wrapping_add(1);
        // The loop lives as long as the target.
        let _ = l.tx.send(Msg::Job(job));
        let _ = l.waker.wake();
        l.unparker.unpark();
    }

    fn wake_on_end(&mut self, on: bool) {
        self.done_ring.store(on, Ordering::Relaxed);
    }

    fn wait(&mut self, deadline_us: Option<u64>, done: &mut Vec<Done>) {
        if !self.stop_told && self.shared.stop.load(Ordering::Relaxed) {
            // Jobs waiting for a connection go back unsent now, not when
            // a connection frees.
            self.stop_told = true;
            self.check_all();
        }
        wait_parked(
            &self.done_rx,
            &self.done_parker,
            &self.shared.clock,
            deadline_us,
            done,
        );
    }

    fn cancel_in_flight(&mut self, done: &mut Vec<Done>) -> usize {
        // Ends that arrived meanwhile are real results, not cancellations.
        self.take_ready(done);
        cancel_registered(&self.shared.registry, self.now_us(), done)
    }

    fn workers(&self) -> usize {
        self.loops.len()
    }

    fn connections(&self, requests: u64) -> Option<Connections> {
        let sh = &*self.shared;
        let connects = sh.connects.load(Ordering::Relaxed);
        let (cap, auto) = match sh.cfg.max_connections {
            ConnCap::Auto { .. } => (Some(sh.cap_peak.load(Ordering::Relaxed) as u64), true),
            ConnCap::Unlimited => (None, false),
            ConnCap::Fixed(n) => (Some(n as u64), false),
        };
        Some(Connections {
            connects,
            per_request: Connections::per(connects, requests),
            most_open: sh.most_open.load(Ordering::Relaxed) as u64,
            cap,
            auto,
        })
    }
}

/// The loops' side of the `Done` channel: every send also wakes the
/// target's [`wait_parked`].
#[derive(Clone)]
struct DoneTx {
    tx: Sender<Done>,
    bell: Unparker,
    /// `Target::wake_on_end`: else the target finds the ends when it
    /// wakes for its deadline.
    ring: Arc<AtomicBool>,
}

impl DoneTx {
    /// Sends `d` (the target outlives its loops, so the receiver is
    /// there) and wakes the target if it wants every end at once.
    fn send(&self, d: Done) {
        let _ = self.tx.send(d);
        if self.ring.load(Ordering::Relaxed) {
            self.bell.unpark();
        }
    }
}

/// Waits for the requests that end until `deadline_us` (the first of
/// them, then all that are there), parked between looks rather than in
/// the channel's blocking receive, which spins and yields the core first.
fn wait_parked(
    rx: &Receiver<Done>,
    parker: &Parker,
    clock: &Clock,
    deadline_us: Option<u64>,
    done: &mut Vec<Done>,
) {
    let before = done.len();
    loop {
        done.extend(rx.try_iter());
        if done.len() > before {
            return;
        }
        match deadline_us {
            None => parker.park(),
            Some(d) => {
                let now = clock.now_us();
                if now >= d {
                    return;
                }
                parker.park_timeout(Duration::from_micros(d - now));
            }
        }
    }
}
