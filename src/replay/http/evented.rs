//! The event-driven real-server target: a few event-loop threads, each
//! owning its connections (non-blocking sockets under `mio`), HTTP/1.1
//! keep-alive reuse, and one buffer per stream. Every read carries the
//! time its bytes arrived ([`crate::rxtime`]: the kernel's stamp on Linux,
//! else the read's own time) on the run's [`Clock`], so a thousand streams
//! in flight cost a thousand sockets, not a thousand threads, and no
//! answer's time waits for a thread to be scheduled.
//!
//! https:// goes the same way: a connection to a TLS endpoint carries a
//! [`Session`] (rustls) that takes the ciphertext the loop read, with its
//! arrival stamp, and hands back the plaintext, which then goes where a
//! plaintext connection's bytes go. The handshake is driven by the same
//! readiness events, within the request's `--timeout`.
//!
//! With many answers in flight a loop coalesces its reads (`Config::coalesce`):
//! it waits a few hundred µs between two polls, for new jobs only, so one
//! wake-up serves dozens of tokens instead of a few. The kernel's stamps
//! keep the times exact; a new request is still sent at once.
//!
//! What the bytes mean is decided elsewhere, once: the framing in
//! [`super::wire`], a stream's verdict in [`super::stream`], a status or a
//! whole answer in [`super::answer`]. Requests in flight are in the shared
//! [`Registry`], so a drain that runs out cancels them exactly as the
//! blocking target does: whoever claims a request first writes its result.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use crossbeam_utils::sync::{Parker, Unparker};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use serde_json::{json, Value};

use super::answer;
use super::cancel_registered;
use super::client::Clock;
use super::inflight::{Entry, Registry};
use super::request::RequestBuilder;
use super::stream::{BodyEnd, StreamReader};
use super::tls::{self, Received, Session, Tls};
use super::wire::{self, Body, Endpoint};
use crate::oslimit;
use crate::replay::outcome::{ErrorKind, Failure, Outcome};
use crate::replay::target::{Done, Job, Target};
use crate::replay::trace::Trace;
use crate::rxtime::{self, RxReader};

/// The waker's token; connections use their slot index.
const WAKER: Token = Token(usize::MAX);

/// Bytes read per `read` call: a whole burst of events in one call.
const READ_BUF: usize = 64 * 1024;

/// Ready sockets handled between two looks at the new jobs.
const JOBS_EVERY: usize = 32;
/// Ready sockets a request that finds no idle connection may handle first
/// (see [`Loop::reclaim`]), and how long after the last look at the
/// sockets it may: a backlog of requests then pays at most 16 reads (a
/// few µs each) per 100 µs of sends. Without the second bound every
/// request of a backlog read up to 64 token events of long streams
/// before it was sent, freeing nothing, and lag p99 at 2,000 streams rose
/// to 9-22 ms in three of six runs.
const RECLAIM_AT_MOST: usize = 16;
const RECLAIM_EVERY_US: u64 = 100;
/// The most ITL gaps an answer's outcome makes room for before its first
/// token (32 KB; a longer answer grows it as it comes).
const GAPS_AHEAD_AT_MOST: u64 = 4096;
/// How long a loop that ran out of file descriptors waits before it tries
/// to open a connection again, when none of its own has freed one.
const PROBE_FILES_US: u64 = 10_000;

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
    /// `--max-connections`; 0: one per request in flight.
    pub max_connections: usize,
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
}

impl Shared {
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
        if cfg.max_connections > 0 {
            cfg.loops = cfg.loops.min(cfg.max_connections);
        }
        // `--max-connections` split exactly: the first loops take the remainder.
        let per_loop = |i: usize| match cfg.max_connections {
            0 => usize::MAX,
            n => n / cfg.loops + usize::from(i < n % cfg.loops),
        };
        let n_loops = cfg.loops;
        let caps: Vec<usize> = (0..n_loops).map(per_loop).collect();
        let shared = Arc::new(Shared {
            trace,
            builder,
            cfg,
            clock,
            registry: Registry::default(),
            stop,
            addrs: Mutex::new(None),
            out_of_files: AtomicBool::new(false),
            open_total: AtomicUsize::new(0),
        });
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
            let mut lp = Loop::new(shared.clone(), rx, done_tx.clone(), quit.clone(), cap)
                .map_err(StartError)?;
            let waker = Arc::new(Waker::new(lp.poll.registry(), WAKER).map_err(StartError)?);
            let unparker = lp.parker.unparker().clone();
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
}

/// One request on its connection, from its first byte written to its end.
struct Exchange {
    entry: Arc<Entry>,
    /// `--turns delta`: the conversation, answered when the request ends.
    history: Option<Vec<Value>>,
    request: Vec<u8>,
    written: usize,
    deadline_us: u64,
    /// Sent once more after a reused connection turned out closed.
    retried: bool,
    /// Some byte of the answer arrived (a retry is no longer safe).
    got_bytes: bool,
    /// When the last bytes arrived (the send before any): reads' times
    /// never go back.
    last_at: u64,
    /// The answer's bytes ended it, at this time (else it ends when it is
    /// concluded: an EOF, an error, a timeout).
    ended_at: Option<u64>,
    phase: Phase,
}

impl Exchange {
    /// The stream being read, once an SSE answer began.
    fn stream(&self) -> Option<&StreamReader> {
        match &self.phase {
            Phase::Body {
                sink: Sink::Stream(r),
                ..
            } => Some(r),
            _ => None,
        }
    }
}

/// An exchange's state: small, so that a connection's fields a token read
/// touches share few cache lines (the outcome and the rarer sinks are
/// boxed; `prefetch_ahead` fetches the whole connection).
enum Phase {
    /// Reading the response head; `out` is the outcome so far.
    Head { buf: Vec<u8>, out: Box<Outcome> },
    Body {
        body: Body,
        keep_alive: bool,
        sink: Sink,
    },
}

/// Where a body's bytes go.
enum Sink {
    /// An SSE answer: judged by the one stream rule. Every sink is boxed,
    /// so that a connection stays three cache lines (see [`Phase`]).
    Stream(Box<StreamReader>),
    /// A whole JSON answer (a server that ignored `stream: true`).
    Whole(Box<WholeSink>),
    /// A non-2xx answer: its body is read for the message.
    Status(Box<StatusSink>),
}

struct WholeSink {
    bytes: Vec<u8>,
    out: Outcome,
}

struct StatusSink {
    status: u16,
    content_type: Option<String>,
    retry_after: Option<String>,
    bytes: Vec<u8>,
    out: Outcome,
}

/// How an exchange ended.
enum End {
    /// Before the body: the request failed.
    Failed(Failure),
    /// The body ended (cleanly or not); `reuse`: the connection may carry
    /// the next request.
    Body { end: BodyEnd, reuse: bool },
}

/// What reading from a connection led to.
enum Step {
    More,
    End(End),
    /// A reused connection was found closed before the answer: send again.
    Retry,
}

impl Conn {
    /// Still connecting (a TLS handshake counts), or holding request bytes
    /// not yet written.
    fn unsent(&self) -> bool {
        !self.connected
            || self.tls.as_deref().is_some_and(Session::busy)
            || self
                .ex
                .as_ref()
                .is_some_and(|ex| ex.written < ex.request.len())
    }
}

/// Aligned to cache lines: a connection is three of them, all fetched
/// ahead of its event (`Loop::prefetch_ahead`).
#[repr(align(64))]
struct Conn {
    sock: TcpStream,
    connected: bool,
    /// Which of the server's addresses this socket tries.
    addr: usize,
    /// It carried a request before (a closed one may be retried once).
    reused: bool,
    /// Names the current exchange, so a timer for an earlier one is ignored.
    serial: u64,
    /// The server's end was seen closing: read to the EOF (no edge will
    /// announce it again).
    closing: bool,
    /// An https:// connection's TLS: what is read goes through it (boxed:
    /// a session is 1 KB, and inline it spread a plain connection's hot
    /// fields over more cache lines).
    tls: Option<Box<Session>>,
    ex: Option<Exchange>,
}

struct Loop {
    shared: Arc<Shared>,
    poll: Poll,
    rx: Receiver<Msg>,
    done: DoneTx,
    quit: Arc<AtomicBool>,
    /// Connections by slot (the slot is the mio token).
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// Kept-alive connections waiting for a request (last freed first).
    idle: Vec<usize>,
    open: usize,
    /// Connections this loop may open: `max_cap` (its share of
    /// `--max-connections`), or fewer since the process ran out of file
    /// descriptors (until `probe_at`).
    cap: usize,
    max_cap: usize,
    probe_at: Option<u64>,
    /// Jobs waiting for a connection (`--max-connections`).
    pending: VecDeque<Job>,
    /// (deadline µs, slot, serial), earliest first.
    timers: BinaryHeap<Reverse<(u64, usize, u64)>>,
    serial: u64,
    /// The address that connected last, tried first.
    preferred: usize,
    buf: Box<[u8]>,
    rx_reader: RxReader,
    /// Slots opened or given a request since: a loop that is connecting or
    /// has a request to write does not coalesce (a connect's readiness
    /// would wait out the pause, and the send with it).
    fresh: Vec<usize>,
    /// Parked in the read-coalescing pause; a new job unparks it.
    parker: Parker,
    /// [`Loop::reclaim`]'s own poll buffer, and whether it is running (an
    /// answer it ends may start a waiting job, which must not reclaim
    /// again from inside it).
    reclaim_events: Events,
    reclaiming: bool,
    /// When the loop last polled its sockets (µs on the run's clock).
    polled_us: u64,
}

/// Why no connection could be opened.
enum Open {
    /// This process is out of file descriptors: a limit of the client.
    OutOfFiles(Failure),
    Failed(Failure),
}

impl From<Failure> for Open {
    fn from(f: Failure) -> Self {
        Open::Failed(f)
    }
}

fn connect_failure(addr: SocketAddr, e: &io::Error) -> Failure {
    Failure::new(answer::io_kind(e), format!("{addr}: {e}"))
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

impl Loop {
    /// A loop with no connection yet, allowed `cap` of them.
    fn new(
        shared: Arc<Shared>,
        rx: Receiver<Msg>,
        done: DoneTx,
        quit: Arc<AtomicBool>,
        cap: usize,
    ) -> io::Result<Loop> {
        Ok(Loop {
            shared,
            poll: Poll::new()?,
            rx,
            done,
            quit,
            conns: Vec::new(),
            free: Vec::new(),
            idle: Vec::new(),
            open: 0,
            cap,
            max_cap: cap,
            probe_at: None,
            pending: VecDeque::new(),
            timers: BinaryHeap::new(),
            serial: 0,
            preferred: 0,
            buf: vec![0; READ_BUF].into_boxed_slice(),
            rx_reader: RxReader::default(),
            fresh: Vec::new(),
            parker: Parker::new(),
            reclaim_events: Events::with_capacity(RECLAIM_AT_MOST),
            reclaiming: false,
            polled_us: 0,
        })
    }

    fn run(&mut self) {
        let mut events = Events::with_capacity(1024);
        let mut ready: Vec<(usize, bool)> = Vec::with_capacity(1024);
        loop {
            if self.quit.load(Ordering::Acquire) {
                return;
            }
            let next = self.timers.peek().map(|Reverse((d, _, _))| *d);
            let next = match (next, self.probe_at) {
                (Some(d), Some(p)) => Some(d.min(p)),
                (d, p) => d.or(p),
            };
            let timeout =
                next.map(|d| Duration::from_micros(d.saturating_sub(self.shared.clock.now_us())));
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    eprintln!("mc-replay: the HTTP client's event loop failed: {e}");
                    self.shared.stop.store(true, Ordering::Relaxed);
                    return;
                }
            }
            let polled_at = self.shared.clock.now_us();
            self.polled_us = polled_at;
            ready.clear();
            ready.extend(
                events
                    .iter()
                    .filter(|e| e.token() != WAKER)
                    .map(|e| (e.token().0, e.is_read_closed() || e.is_error())),
            );
            for (i, &(slot, closing)) in ready.iter().enumerate() {
                self.prefetch_ahead(&ready, i);
                self.on_event(slot, closing);
                // A request due now must not wait behind a whole batch of
                // token reads (a thousand streams can ready a thousand
                // sockets at once, milliseconds of work): its send time is
                // the schedule's lag.
                if i % JOBS_EVERY == JOBS_EVERY - 1 {
                    self.take_jobs();
                }
            }
            self.take_jobs();
            self.expire();
            if self
                .probe_at
                .is_some_and(|t| self.shared.clock.now_us() >= t)
            {
                self.probe_files();
            }
            let full = ready.len() >= events.capacity();
            self.coalesce(polled_at, full);
        }
    }

    /// Waits, for new jobs only, until `coalesce` after the last poll
    /// returned: meanwhile tokens gather in the sockets (with their
    /// arrival stamps), and the next poll reads them all after one
    /// wake-up. Not after a full batch (more is waiting), not with few
    /// answers in flight, not while a connection is being opened or a
    /// request written, and never past a timer.
    fn coalesce(&mut self, polled_at: u64, full: bool) {
        let pause = self.shared.cfg.coalesce.as_micros() as u64;
        if pause == 0 || full || self.open - self.idle.len() < COALESCE_FROM {
            return;
        }
        let conns = &self.conns;
        self.fresh.retain(|&s| {
            conns
                .get(s)
                .and_then(Option::as_ref)
                .is_some_and(Conn::unsent)
        });
        if !self.fresh.is_empty() {
            return;
        }
        let mut until = polled_at.saturating_add(pause);
        if let Some(Reverse((deadline, _, _))) = self.timers.peek() {
            until = until.min(*deadline);
        }
        let now = self.shared.clock.now_us();
        if until <= now {
            return;
        }
        // A job ends the pause: it is sent now, and the poll follows. Parked,
        // not in a channel's timed receive: that spins and yields the core
        // first (`sched_yield`, four a pause), to the mock's threads too
        // (`perf`: 63,000 yields in a 2,000-stream run, half of them here).
        loop {
            match self.rx.try_recv() {
                Ok(msg) => {
                    if let Msg::Job(job) = msg {
                        self.start(job);
                    }
                    return self.take_jobs();
                }
                Err(TryRecvError::Disconnected) => return,
                Err(TryRecvError::Empty) => {}
            }
            let now = self.shared.clock.now_us();
            if now >= until {
                return;
            }
            self.parker.park_timeout(Duration::from_micros(until - now));
        }
    }

    fn take_jobs(&mut self) {
        while let Ok(msg) = self.rx.try_recv() {
            match msg {
                Msg::Job(job) => self.start(job),
                Msg::Check => {}
            }
        }
        if self.shared.stop.load(Ordering::Relaxed) {
            while let Some(job) = self.pending.pop_front() {
                self.unsent(job);
            }
        }
    }

    /// A job the run will not send (it is stopping).
    fn unsent(&self, job: Job) {
        self.done.send(Done {
            t_end_us: self.shared.clock.now_us(),
            job,
            outcome: None,
        });
    }

    /// Starts `job` on an idle connection, a new one, or queues it.
    fn start(&mut self, job: Job) {
        if let Some(job) = self.try_start(job) {
            self.pending.push_back(job);
        }
    }

    /// Starts `job`, or hands it back when it must wait for a connection.
    fn try_start(&mut self, job: Job) -> Option<Job> {
        if self.shared.stop.load(Ordering::Relaxed) {
            self.unsent(job);
            return None;
        }
        if self.idle.is_empty() && self.open > 0 {
            self.reclaim();
        }
        let slot = match self.idle.pop() {
            Some(slot) => slot,
            None if self.open < self.cap => match self.open_conn(self.preferred) {
                Ok(slot) => slot,
                // The client's own limit, not the server's answer: while
                // any connection is open, one will free, so the request
                // waits (its lag shows the wait), as under
                // `--max-connections`, rather than fail unsent.
                Err(Open::OutOfFiles(_)) if self.shared.open_total.load(Ordering::Relaxed) > 0 => {
                    self.cap = self.open;
                    self.probe_at = Some(self.shared.clock.now_us() + PROBE_FILES_US);
                    self.shared.note_out_of_files(self.open);
                    return Some(job);
                }
                Err(Open::OutOfFiles(f) | Open::Failed(f)) => {
                    self.fail_unsent(job, f);
                    return None;
                }
            },
            None => return Some(job),
        };
        let ex = self.exchange(job);
        self.attach(slot, ex);
        self.on_ready(slot);
        None
    }

    /// After the open-file limit lowered `cap`: the configured cap again,
    /// and the waiting jobs started while connections open (the next
    /// `EMFILE` lowers it again). Descriptors other loops freed are found
    /// this way; a loop with no connection of its own has no other way.
    fn probe_files(&mut self) {
        self.probe_at = None;
        self.cap = self.max_cap;
        while let Some(job) = self.pending.pop_front() {
            if let Some(job) = self.try_start(job) {
                self.pending.push_front(job);
                break;
            }
        }
    }

    /// A job that failed before anything was sent (no address, no
    /// socket): never in the registry, so its result is written here.
    fn fail_unsent(&self, mut job: Job, f: Failure) {
        let now = self.shared.clock.now_us();
        // A failed turn does not continue its conversation.
        job.history = None;
        self.done.send(Done {
            job,
            t_end_us: now,
            outcome: Some(Outcome {
                t_send_us: now,
                t_end_us: now,
                error: Some(f),
                ..Outcome::default()
            }),
        });
    }

    /// Builds `job`'s request and registers it as sent now.
    fn exchange(&self, mut job: Job) -> Exchange {
        let sh = &*self.shared;
        let turn = &sh.trace.turns[job.row];
        let mut history = job.history.take();
        let built = sh
            .builder
            .build(turn, sh.trace.session_id(turn), job.seq, history.as_mut());
        let mut request = Vec::new();
        wire::write_request(
            &mut request,
            &sh.cfg.endpoint,
            &sh.cfg.user_agent,
            &built.headers,
            &built.body,
        );
        // Room for every gap the row asks for, made once: grown by doubling,
        // the gaps were copied six times in a 100-token answer, each copy
        // cold in the cache.
        let gaps = turn
            .output_length
            .map_or(0, |n| n.saturating_sub(1).min(GAPS_AHEAD_AT_MOST) as usize);
        let now = sh.clock.now_us();
        let entry = sh.registry.insert(job, now);
        Exchange {
            entry,
            history,
            request,
            written: 0,
            deadline_us: now.saturating_add(sh.cfg.timeout.as_micros() as u64),
            retried: false,
            got_bytes: false,
            last_at: now,
            ended_at: None,
            phase: Phase::Head {
                buf: Vec::new(),
                out: Box::new(Outcome {
                    t_send_us: now,
                    t_end_us: now,
                    itl_us: Vec::with_capacity(gaps),
                    ..Outcome::default()
                }),
            },
        }
    }

    fn attach(&mut self, slot: usize, ex: Exchange) {
        self.fresh.push(slot);
        self.serial += 1;
        self.timers
            .push(Reverse((ex.deadline_us, slot, self.serial)));
        if let Some(c) = self.conns[slot].as_mut() {
            c.serial = self.serial;
            c.ex = Some(ex);
        }
    }

    /// The server's addresses (resolved on first use).
    fn addrs(&self) -> Result<Arc<[SocketAddr]>, Failure> {
        let mut known = self.shared.addrs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = &*known {
            return Ok(a.clone());
        }
        let ep = &self.shared.cfg.endpoint;
        let found: Vec<SocketAddr> = (ep.host.as_str(), ep.port)
            .to_socket_addrs()
            .map_err(|e| Failure::new(ErrorKind::Dns, format!("{}: {e}", ep.host)))?
            .collect();
        if found.is_empty() {
            return Err(Failure::new(
                ErrorKind::Dns,
                format!("{}: no address found", ep.host),
            ));
        }
        let found: Arc<[SocketAddr]> = found.into();
        *known = Some(found.clone());
        Ok(found)
    }

    /// Opens a connection to the server's `addr`-th address (or the first).
    fn open_conn(&mut self, addr: usize) -> Result<usize, Open> {
        let addrs = self.addrs()?;
        let addr = if addr < addrs.len() { addr } else { 0 };
        let tls = self.session()?;
        let sock = match TcpStream::connect(addrs[addr]) {
            Ok(sock) => sock,
            Err(e) if oslimit::is_out_of_files(&e) => {
                return Err(Open::OutOfFiles(connect_failure(addrs[addr], &e)))
            }
            Err(e) => return Err(Open::Failed(connect_failure(addrs[addr], &e))),
        };
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        let mut sock = sock;
        if let Err(e) = self.poll.registry().register(
            &mut sock,
            Token(slot),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            self.free.push(slot);
            return Err(Open::Failed(Failure::new(
                ErrorKind::Transport,
                e.to_string(),
            )));
        }
        self.conns[slot] = Some(Conn {
            sock,
            connected: false,
            addr,
            reused: false,
            serial: 0,
            closing: false,
            tls,
            ex: None,
        });
        self.open += 1;
        self.shared.open_total.fetch_add(1, Ordering::Relaxed);
        self.fresh.push(slot);
        Ok(slot)
    }

    /// A new connection's TLS session (none for http://).
    fn session(&self) -> Result<Option<Box<Session>>, Failure> {
        let Some(t) = &self.shared.cfg.tls else {
            return Ok(None);
        };
        Session::new(t)
            .map(|s| Some(Box::new(s)))
            .map_err(|e| Failure::new(ErrorKind::Transport, tls::describe(&e, true)))
    }

    fn connect_to(&self, addr: SocketAddr) -> Result<TcpStream, Failure> {
        TcpStream::connect(addr).map_err(|e| connect_failure(addr, &e))
    }

    fn close(&mut self, slot: usize) {
        if let Some(mut c) = self.conns[slot].take() {
            let _ = self.poll.registry().deregister(&mut c.sock);
            self.open -= 1;
            self.shared.open_total.fetch_sub(1, Ordering::Relaxed);
            self.free.push(slot);
        }
        self.idle.retain(|&s| s != slot);
    }

    /// Hints the state of the sockets ready after the `i`th, while the
    /// kernel reads the `i`th: with a thousand streams their state is out
    /// of the core's caches by the time each next token comes (a token's
    /// user time was mostly waits on these loads), and each stage reads
    /// pointers from the lines the stage before fetched.
    fn prefetch_ahead(&self, ready: &[(usize, bool)], i: usize) {
        let conn = |k: usize| ready.get(k).and_then(|&(s, _)| self.conns.get(s));
        if let Some(c) = conn(i + 3) {
            crate::prefetch::value(c);
        }
        if let Some(ex) = conn(i + 2).and_then(|c| c.as_ref()?.ex.as_ref()) {
            crate::prefetch::value(&ex.entry.live);
            if let Some(r) = ex.stream() {
                r.prefetch();
            }
        }
        if let Some(r) = conn(i + 1).and_then(|c| c.as_ref()?.ex.as_ref()?.stream()) {
            r.prefetch_heap();
        }
    }

    /// A readiness event for `slot` (`closing`: the server's end closed).
    fn on_event(&mut self, slot: usize, closing: bool) {
        if closing {
            if let Some(c) = self.conns.get_mut(slot).and_then(Option::as_mut) {
                c.closing = true;
            }
        }
        self.on_ready(slot);
    }

    /// Handles the sockets that are ready now (at most
    /// [`RECLAIM_AT_MOST`], and not within [`RECLAIM_EVERY_US`] of the last
    /// look), so that connections whose answers have already arrived are
    /// idle again. Called by a request that finds no
    /// idle connection, before it opens one: after the loop was held up
    /// (a page fault, a core taken by another process), the requests due
    /// meanwhile all come at once, and each used to open a connection
    /// while the answers that would have freed one sat unread. At 10,000
    /// tiny req/s that turned a stall of a few ms into 1,600-3,100 new
    /// connections (each a thread start at a thread-per-connection
    /// server, and a port search among those in TIME_WAIT) and a lag of
    /// tens of ms that fed itself.
    fn reclaim(&mut self) {
        let now = self.shared.clock.now_us();
        if self.reclaiming || now < self.polled_us + RECLAIM_EVERY_US {
            return;
        }
        self.polled_us = now;
        self.reclaiming = true;
        let mut events = std::mem::replace(&mut self.reclaim_events, Events::with_capacity(0));
        if self.poll.poll(&mut events, Some(Duration::ZERO)).is_ok() {
            for e in events.iter().filter(|e| e.token() != WAKER) {
                self.on_event(e.token().0, e.is_read_closed() || e.is_error());
            }
        }
        self.reclaim_events = events;
        self.reclaiming = false;
    }

    /// Something happened on `slot`'s socket (or a request was attached):
    /// connect, write, read, as far as the socket allows.
    fn on_ready(&mut self, slot: usize) {
        let step = {
            let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
                return;
            };
            if conn.ex.is_none() {
                // Idle: the only news can be the server closing it.
                let closed = idle_closed(conn, &mut self.buf);
                if closed {
                    self.close(slot);
                }
                return;
            }
            progress(conn, &mut self.buf, &mut self.rx_reader, &self.shared)
        };
        match step {
            Step::More => {}
            Step::End(end) => self.end(slot, end),
            Step::Retry => self.retry(slot),
        }
    }

    /// A connect that failed: true when the next of the server's
    /// addresses is being tried on the same slot instead.
    fn next_address(&mut self, slot: usize) -> bool {
        let next = self.conns[slot].as_ref().map_or(0, |c| c.addr + 1);
        let Some(addrs) = self.addrs().ok().filter(|a| next < a.len()) else {
            return false;
        };
        // A new socket starts a new handshake.
        let Ok(tls) = self.session() else {
            return false;
        };
        let Ok(mut sock) = self.connect_to(addrs[next]) else {
            return false;
        };
        let Some(c) = self.conns[slot].as_mut() else {
            return false;
        };
        let _ = self.poll.registry().deregister(&mut c.sock);
        let reg = self.poll.registry().register(
            &mut sock,
            Token(slot),
            Interest::READABLE | Interest::WRITABLE,
        );
        c.sock = sock;
        c.tls = tls;
        c.addr = next;
        c.connected = false;
        c.closing = false;
        self.fresh.push(slot);
        reg.is_ok()
    }

    /// Sends the exchange on `slot` again on a new connection.
    fn retry(&mut self, slot: usize) {
        let Some(mut ex) = self.conns[slot].as_mut().and_then(|c| c.ex.take()) else {
            return;
        };
        self.close(slot);
        ex.retried = true;
        ex.written = 0;
        ex.got_bytes = false;
        if let Phase::Head { buf, .. } = &mut ex.phase {
            buf.clear();
        }
        match self.open_conn(self.preferred) {
            Ok(new) => {
                self.attach(new, ex);
                self.on_ready(new);
            }
            Err(Open::OutOfFiles(f) | Open::Failed(f)) => {
                let now = self.shared.clock.now_us();
                self.report(ex, End::Failed(f), now);
                self.next_pending();
            }
        }
    }

    /// Timers that passed: their requests time out.
    fn expire(&mut self) {
        let now = self.shared.clock.now_us();
        while let Some(&Reverse((deadline, slot, serial))) = self.timers.peek() {
            if deadline > now {
                break;
            }
            self.timers.pop();
            let live = self
                .conns
                .get(slot)
                .and_then(Option::as_ref)
                .is_some_and(|c| c.serial == serial && c.ex.is_some());
            if !live {
                continue;
            }
            let secs = self.shared.cfg.timeout.as_secs_f64();
            let msg = format!("no answer within --timeout {secs} s");
            let in_body = self.conns[slot]
                .as_ref()
                .and_then(|c| c.ex.as_ref())
                .is_some_and(|ex| matches!(ex.phase, Phase::Body { .. }));
            let end = if in_body {
                End::Body {
                    end: BodyEnd::Timeout(msg),
                    reuse: false,
                }
            } else {
                End::Failed(Failure::new(ErrorKind::Timeout, msg))
            };
            self.end(slot, end);
        }
    }

    /// The exchange on `slot` ended: its result, then its connection is
    /// kept for the next request or closed.
    fn end(&mut self, slot: usize, end: End) {
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        let refused =
            matches!(&end, End::Failed(f) if !conn.connected && f.kind == ErrorKind::Connect);
        // Another of the server's addresses may answer (`localhost` is
        // often ::1 first, and servers listen on 127.0.0.1).
        if refused && self.next_address(slot) {
            return self.on_ready(slot);
        }
        self.finish(slot, end);
    }

    fn finish(&mut self, slot: usize, end: End) {
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        let Some(ex) = conn.ex.take() else {
            return;
        };
        let reuse = matches!(end, End::Body { reuse: true, .. });
        if conn.connected {
            let addr = conn.addr;
            self.preferred = addr;
        }
        let now = ex.ended_at.unwrap_or_else(|| self.shared.clock.now_us());
        self.report(ex, end, now);
        self.prune_timers();
        if reuse {
            if let Some(c) = self.conns[slot].as_mut() {
                c.reused = true;
            }
            self.idle.push(slot);
        } else {
            self.close(slot);
        }
        self.next_pending();
    }

    /// Timers of ended exchanges stay in the heap until their deadline
    /// (--timeout, 600 s by default): at thousands of requests a second
    /// that is millions of entries, so they are swept out once they
    /// outnumber the live ones four to one.
    fn prune_timers(&mut self) {
        if self.timers.len() < 4 * (self.open + 256) {
            return;
        }
        let conns = &self.conns;
        self.timers.retain(|Reverse((_, slot, serial))| {
            conns
                .get(*slot)
                .and_then(Option::as_ref)
                .is_some_and(|c| c.serial == *serial && c.ex.is_some())
        });
    }

    fn next_pending(&mut self) {
        if let Some(job) = self.pending.pop_front() {
            if let Some(job) = self.try_start(job) {
                self.pending.push_front(job);
            }
        }
    }

    /// Writes the exchange's result, unless the drain's end claimed it.
    fn report(&self, ex: Exchange, end: End, now: u64) {
        let Exchange {
            entry,
            mut history,
            phase,
            ..
        } = ex;
        let outcome = conclude(phase, end, now, &entry);
        self.shared.registry.remove(entry.job.seq);
        if !entry.claim() {
            return;
        }
        if let Some(h) = &mut history {
            h.push(json!({"role": "assistant", "content": outcome.text}));
        }
        let mut job = entry.job.clone();
        job.history = history;
        self.done.send(Done {
            job,
            t_end_us: outcome.t_end_us,
            outcome: Some(outcome),
        });
    }
}

/// An idle connection was woken: true when the server closed it (or sent
/// bytes nobody asked for, which makes it unusable too). A TLS server may
/// send session tickets or a key update to an idle connection: those are
/// taken in and keep it usable.
fn idle_closed(conn: &mut Conn, buf: &mut [u8]) -> bool {
    loop {
        match conn.sock.read(buf) {
            Ok(0) => return true,
            Ok(n) => {
                let Some(s) = conn.tls.as_deref_mut() else {
                    return true;
                };
                match s.receive(&buf[..n], &mut |_| Some(())) {
                    Ok(Received::Open) if s.send(&[], &mut conn.sock).is_ok() => {}
                    _ => return true,
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return true,
        }
    }
}

/// Moves the exchange on `conn` as far as the socket allows.
fn progress(conn: &mut Conn, buf: &mut [u8], reader: &mut RxReader, shared: &Shared) -> Step {
    if !conn.connected {
        match conn.sock.take_error() {
            Ok(Some(e)) | Err(e) => return connect_error(e),
            Ok(None) => {}
        }
        match conn.sock.peer_addr() {
            Ok(_) => {
                conn.connected = true;
                // Small requests leave at once; the answer's latency is
                // what is measured, not Nagle's.
                let _ = conn.sock.set_nodelay(true);
                rxtime::enable(&conn.sock);
            }
            Err(e) if e.kind() == io::ErrorKind::NotConnected => return Step::More,
            Err(e) => return connect_error(e),
        }
    }
    let reused = conn.reused;
    let Conn {
        sock,
        tls,
        ex,
        closing,
        ..
    } = conn;
    let Some(ex) = ex.as_mut() else {
        return Step::More;
    };
    if let Err(e) = send(sock, tls.as_deref_mut(), ex) {
        return before_answer(ex, reused, e);
    }
    loop {
        match reader.read(sock, buf) {
            Ok((0, _)) => {
                let Some(s) = tls.as_deref_mut() else {
                    return at_eof(ex, reused);
                };
                // Plaintext still held (none, in practice) keeps the time
                // of the read that brought it.
                let at = ex.last_at;
                let got = s.eof(&mut |p| deliver(ex, p, at, shared));
                return after_tls(ex, reused, s, sock, got).unwrap_or_else(|| at_eof(ex, reused));
            }
            Ok((n, age)) => {
                let now = shared.clock.now_us();
                let at = age.map_or(now, |a| now.saturating_sub(a.as_micros() as u64));
                let step = match tls.as_deref_mut() {
                    None => deliver(ex, &buf[..n], at, shared),
                    // The plaintext of every record this read completed
                    // carries this read's arrival time.
                    Some(s) => {
                        let got = s.receive(&buf[..n], &mut |p| deliver(ex, p, at, shared));
                        after_tls(ex, reused, s, sock, got).or_else(|| {
                            // The handshake's next flight, or the request
                            // the handshake held back.
                            send(sock, Some(s), ex)
                                .err()
                                .map(|e| io_failure(ex, reused, e))
                        })
                    }
                };
                if let Some(step) = step {
                    return step;
                }
                // Edge-triggered: a short read emptied the socket, and new
                // bytes will raise a new event (saves a read per token).
                // A close seen with the bytes raises none: read on to it.
                if n < buf.len() && !*closing {
                    return Step::More;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::More,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return io_failure(ex, reused, e),
        }
    }
}

/// Writes what the exchange has not yet written: straight to the socket,
/// or through the TLS session (which holds it until its handshake ends).
fn send(sock: &mut TcpStream, tls: Option<&mut Session>, ex: &mut Exchange) -> io::Result<()> {
    // Emptied once the answer began.
    let rest = ex.request.get(ex.written..).unwrap_or_default();
    if let Some(s) = tls {
        ex.written += s.send(rest, sock)?;
        return Ok(());
    }
    while ex.written < ex.request.len() {
        match sock.write(&ex.request[ex.written..]) {
            Ok(0) => break,
            Ok(n) => ex.written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Bytes of the answer that arrived at `at` (plaintext, whichever way they
/// came); `Some` when the exchange ended with them.
fn deliver(ex: &mut Exchange, bytes: &[u8], at: u64, shared: &Shared) -> Option<Step> {
    // Reads' times never go back.
    let at = at.max(ex.last_at);
    ex.last_at = at;
    ex.got_bytes = true;
    let end = on_bytes(ex, bytes, at, shared)?;
    ex.ended_at = Some(at);
    Some(Step::End(end))
}

/// What the TLS session's news means for the exchange; `None`: go on.
fn after_tls(
    ex: &mut Exchange,
    reused: bool,
    s: &mut Session,
    sock: &mut TcpStream,
    got: Result<Received<Step>, rustls::Error>,
) -> Option<Step> {
    match got {
        Ok(Received::Open) => None,
        // Bytes after the answer (or a close) spoil a kept-alive
        // connection, as plaintext bytes after the body do.
        Ok(Received::Stopped(Step::End(End::Body { end, reuse }))) => Some(Step::End(End::Body {
            end,
            reuse: reuse && s.reusable(),
        })),
        Ok(Received::Stopped(step)) => Some(step),
        // The server's side ended: with a close_notify, or with a TCP EOF
        // without one, which is read exactly as a plaintext EOF. RFC 9112
        // §9.8 would call a close-delimited body cut that way incomplete
        // (a truncation attack can only cut), but here what is complete is
        // decided by the answer itself: a stream needs [DONE] and a
        // finish_reason (`stream`), a whole answer must parse, and a
        // length or chunked body must be whole (`wire`), so a cut answer
        // fails either way; and many servers end a TLS connection without
        // close_notify, whose complete answers would otherwise all be
        // `incomplete`. The blocking client (ureq) judges it the same way.
        Ok(Received::Closed | Received::Truncated) => Some(at_eof(ex, reused)),
        Err(e) => {
            // The alert rustls queued tells the server why (best effort).
            let _ = s.send(&[], sock);
            let msg = tls::describe(&e, s.is_handshaking());
            Some(Step::End(match ex.phase {
                // As the blocking client classes it (a transport failure).
                Phase::Head { .. } => End::Failed(Failure::new(ErrorKind::Transport, msg)),
                Phase::Body { .. } => End::Body {
                    end: BodyEnd::Broken(msg),
                    reuse: false,
                },
            }))
        }
    }
}

/// An I/O error on the connection: before the answer, as
/// [`before_answer`] says; in the body, the body broke.
fn io_failure(ex: &Exchange, reused: bool, e: io::Error) -> Step {
    match ex.phase {
        Phase::Head { .. } => before_answer(ex, reused, e),
        Phase::Body { .. } => Step::End(End::Body {
            end: BodyEnd::Broken(e.to_string()),
            reuse: false,
        }),
    }
}

fn connect_error(e: io::Error) -> Step {
    Step::End(End::Failed(Failure::new(
        answer::io_kind(&e),
        e.to_string(),
    )))
}

/// An I/O error before the answer began: a reused connection the server
/// had closed is retried once on a new one; anything else is the result.
fn before_answer(ex: &Exchange, reused: bool, e: io::Error) -> Step {
    use io::ErrorKind as Io;
    let stale = matches!(
        e.kind(),
        Io::ConnectionReset | Io::BrokenPipe | Io::ConnectionAborted | Io::UnexpectedEof
    );
    if stale && reused && !ex.retried && !ex.got_bytes {
        return Step::Retry;
    }
    let kind = match e.kind() {
        // The request went out and the server went away: as ureq says it.
        Io::BrokenPipe if ex.written > 0 => ErrorKind::Connect,
        _ => answer::io_kind(&e),
    };
    Step::End(End::Failed(Failure::new(kind, e.to_string())))
}

/// The server closed the connection.
fn at_eof(ex: &mut Exchange, reused: bool) -> Step {
    match &ex.phase {
        Phase::Head { buf, .. } if buf.is_empty() => before_answer(
            ex,
            reused,
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection before answering",
            ),
        ),
        Phase::Head { .. } => Step::End(End::Failed(Failure::new(
            ErrorKind::Incomplete,
            "the server closed the connection in the middle of the response head",
        ))),
        Phase::Body { body, .. } => Step::End(End::Body {
            end: match body.at_eof() {
                Ok(()) => BodyEnd::Clean,
                Err(e) => BodyEnd::Broken(e.to_string()),
            },
            reuse: false,
        }),
    }
}

/// Bytes read at `now`; `Some` when the exchange ended with them.
fn on_bytes(ex: &mut Exchange, bytes: &[u8], now: u64, shared: &Shared) -> Option<End> {
    let mut rest = bytes;
    let owned;
    if let Phase::Head { buf, out } = &mut ex.phase {
        buf.extend_from_slice(bytes);
        let (head, n) = match wire::parse_head(buf) {
            Ok(None) => return None,
            Ok(Some(h)) => h,
            Err(e) => {
                return Some(End::Failed(Failure::new(
                    ErrorKind::Transport,
                    e.to_string(),
                )))
            }
        };
        let mut out = std::mem::take(&mut **out);
        out.http_status = Some(head.status);
        let keep_text = ex.history.is_some();
        let sink = if !(200..300).contains(&head.status) {
            Sink::Status(Box::new(StatusSink {
                status: head.status,
                content_type: head.content_type.clone(),
                retry_after: head.retry_after.clone(),
                bytes: Vec::new(),
                out,
            }))
        } else if head.is_sse() {
            Sink::Stream(Box::new(StreamReader::new(
                out,
                keep_text,
                shared.cfg.max_event_bytes,
            )))
        } else {
            Sink::Whole(Box::new(WholeSink {
                bytes: Vec::new(),
                out,
            }))
        };
        owned = std::mem::take(buf);
        rest = &owned[n..];
        // The answer began: the request will not be sent again.
        ex.request = Vec::new();
        ex.phase = Phase::Body {
            body: head.body,
            keep_alive: head.keep_alive,
            sink,
        };
    }
    let Phase::Body {
        body,
        keep_alive,
        sink,
    } = &mut ex.phase
    else {
        return None;
    };
    // Why the sink wants no more bytes, if it does not.
    let mut refused: Option<String> = None;
    let fed = body.feed(rest, &mut |data| {
        if refused.is_some() {
            return;
        }
        match sink {
            Sink::Stream(r) => {
                if !r.feed(data, now, &ex.entry.live) {
                    refused = Some("the stream was refused".into());
                }
            }
            Sink::Whole(w) => {
                let bytes = &mut w.bytes;
                if bytes.len() + data.len() > answer::WHOLE_BODY_LIMIT {
                    refused = Some(format!(
                        "the answer is over {} bytes",
                        answer::WHOLE_BODY_LIMIT
                    ));
                } else {
                    bytes.extend_from_slice(data);
                }
            }
            Sink::Status(st) => {
                let bytes = &mut st.bytes;
                let room = answer::ERROR_BODY_LIMIT.saturating_sub(bytes.len());
                bytes.extend_from_slice(&data[..room.min(data.len())]);
                if room < data.len() {
                    // Enough for the message; the rest is not read.
                    refused = Some(String::new());
                }
            }
        }
    });
    match (fed, refused) {
        (Err(e), _) => Some(End::Body {
            end: BodyEnd::Broken(e.to_string()),
            reuse: false,
        }),
        (Ok(_), Some(msg)) => Some(End::Body {
            end: if matches!(sink, Sink::Status(_)) {
                BodyEnd::Clean
            } else {
                BodyEnd::Broken(msg)
            },
            reuse: false,
        }),
        // Bytes after the body's end were never asked for: the
        // connection is not trusted with another request.
        (Ok((used, true)), None) => Some(End::Body {
            end: BodyEnd::Clean,
            reuse: *keep_alive && used == rest.len(),
        }),
        (Ok((_, false)), None) if body.is_complete() => Some(End::Body {
            end: BodyEnd::Clean,
            reuse: *keep_alive,
        }),
        (Ok(_), None) => None,
    }
}

/// The request's outcome, from where it stopped and how.
fn conclude(phase: Phase, end: End, now: u64, entry: &Entry) -> Outcome {
    match (phase, end) {
        (Phase::Head { out, .. }, end) => {
            let mut out = *out;
            out.t_end_us = now;
            out.error = Some(match end {
                End::Failed(f) => f,
                // A body end before the head cannot happen; say what is known.
                End::Body { .. } => Failure::new(ErrorKind::Transport, "no response head"),
            });
            out
        }
        (Phase::Body { sink, .. }, end) => {
            let body_end = match end {
                End::Body { end, .. } => end,
                End::Failed(f) if f.kind == ErrorKind::Timeout => BodyEnd::Timeout(f.message),
                End::Failed(f) => BodyEnd::Broken(f.message),
            };
            match sink {
                Sink::Stream(r) => r.finish(body_end, now),
                Sink::Whole(w) => {
                    let WholeSink { bytes, mut out } = *w;
                    out.t_end_us = now;
                    match body_end {
                        BodyEnd::Clean => answer::whole_answer(&bytes, now, &entry.live, &mut out),
                        BodyEnd::Timeout(m) => {
                            out.error = Some(Failure::new(ErrorKind::Timeout, m))
                        }
                        BodyEnd::Broken(m) => {
                            out.error = Some(Failure::new(ErrorKind::Incomplete, m))
                        }
                    }
                    out
                }
                Sink::Status(st) => {
                    let StatusSink {
                        status,
                        content_type,
                        retry_after,
                        bytes,
                        mut out,
                    } = *st;
                    out.t_end_us = now;
                    out.error = Some(answer::status_failure(
                        status,
                        content_type.as_deref(),
                        retry_after.as_deref(),
                        &String::from_utf8_lossy(&bytes),
                    ));
                    out
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader};
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::time::Instant;

    use super::*;
    use crate::jsonl::{ErrorPolicy, LineReader, OnError};
    use crate::replay::http::body::{BodyOptions, Endpoint as Api};
    use crate::replay::http::prompt::{Synth, Vocab};
    use crate::replay::outcome::RunId;
    use crate::replay::trace;

    /// A keep-alive server that answers each request with a two-token
    /// stream, counts the connections it accepted, and holds its first
    /// answer until `go` (saying on `got` that the request is in).
    fn server(
        go: mpsc::Receiver<()>,
        got: mpsc::Sender<()>,
        answered: mpsc::Sender<()>,
    ) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!(
            "http://{}/v1/chat/completions",
            listener.local_addr().unwrap()
        );
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        std::thread::spawn(move || {
            let mut go = Some(go);
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                counted.fetch_add(1, Ordering::SeqCst);
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut w = conn;
                let (got, answered, mut go) = (got.clone(), answered.clone(), go.take());
                std::thread::spawn(move || loop {
                    let mut length = 0;
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap();
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; length];
                    r.read_exact(&mut body).unwrap();
                    let _ = got.send(());
                    if let Some(go) = go.take() {
                        let _ = go.recv();
                    }
                    let events = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}]}\n\n\
                        data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n\
                        data: [DONE]\n\n";
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                         transfer-encoding: chunked\r\n\r\n{:x}\r\n{events}\r\n0\r\n\r\n",
                        events.len()
                    );
                    if w.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                    let _ = answered.send(());
                });
            }
        });
        (url, accepted)
    }

    fn job(seq: u64) -> Job {
        Job {
            seq,
            row: seq as usize,
            t_sched_us: 0,
            warmup: false,
            history: None,
        }
    }

    /// Polls `lp`'s sockets once (up to 10 ms) and handles what is ready.
    fn turn(lp: &mut Loop, events: &mut Events) {
        lp.poll
            .poll(events, Some(Duration::from_millis(10)))
            .unwrap();
        let ready: Vec<_> = events
            .iter()
            .map(|e| (e.token().0, e.is_read_closed() || e.is_error()))
            .collect();
        for (slot, closing) in ready {
            lp.on_event(slot, closing);
        }
    }

    /// The case `reclaim` is for, made exact: an answer has arrived on
    /// the loop's only connection but the loop has not read it yet, and
    /// a request comes due. It must read the answer and send on that
    /// connection, not open a second one (the loop's run does that with
    /// hundreds of requests due at once after it was held up; how many
    /// answers arrive meanwhile is up to the machine, so that is left to
    /// `scripts/bench-replay.sh`).
    /// `Loop::prefetch_ahead` fetches a whole connection: a field that
    /// makes it bigger than three cache lines (an outcome or a TLS
    /// session held inline: it was 1,544 bytes) costs every token read.
    #[test]
    fn a_connection_is_three_cache_lines() {
        use std::mem::{align_of, size_of};
        // mio's debug build adds a field to every socket (its check that a
        // socket stays with one poll): allowed for, not more.
        let extra = size_of::<TcpStream>() - size_of::<std::net::TcpStream>();
        assert!(
            size_of::<Option<Conn>>() <= (192 + extra).next_multiple_of(64),
            "{} bytes",
            size_of::<Option<Conn>>()
        );
        assert_eq!(align_of::<Option<Conn>>(), 64);
    }

    #[test]
    fn a_request_due_reads_an_answer_already_there_and_reuses_its_connection() {
        let (go_tx, go_rx) = mpsc::channel();
        let (got_tx, got_rx) = mpsc::channel();
        let (answered_tx, answered_rx) = mpsc::channel();
        let (url, accepted) = server(go_rx, got_tx, answered_tx);
        let rows = "{\"input_length\":4,\"output_length\":2}\n".repeat(2);
        let mut reader = LineReader::new(rows.as_bytes(), 1 << 20);
        let trace = trace::load(&mut reader, &mut ErrorPolicy::new(OnError::Fail)).unwrap();
        let builder = RequestBuilder {
            synth: Synth::new(Vocab::builtin(), 0, 4),
            body: BodyOptions {
                endpoint: Api::Chat,
                model: "m".into(),
                exact_output: false,
                extra_body: None,
            },
            headers: Vec::new(),
            run_id: RunId(1),
        };
        let shared = Arc::new(Shared {
            trace: Arc::new(trace),
            builder,
            cfg: Config {
                endpoint: Endpoint::parse(&url).unwrap(),
                user_agent: "test".into(),
                timeout: Duration::from_secs(10),
                max_connections: 0,
                loops: 1,
                max_event_bytes: 1 << 20,
                coalesce: Duration::ZERO,
                tls: None,
            },
            // Past the reclaim's spacing from the first look on.
            clock: Clock {
                start: Instant::now()
                    .checked_sub(Duration::from_secs(1))
                    .unwrap_or_else(Instant::now),
            },
            registry: Registry::default(),
            stop: Arc::new(AtomicBool::new(false)),
            addrs: Mutex::new(None),
            out_of_files: AtomicBool::new(false),
            open_total: AtomicUsize::new(0),
        });
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        let done = DoneTx {
            tx: done_tx,
            bell: Parker::new().unparker().clone(),
            ring: Arc::new(AtomicBool::new(false)),
        };
        let (_tx, rx) = crossbeam_channel::unbounded();
        let mut lp = Loop::new(
            shared,
            rx,
            done,
            Arc::new(AtomicBool::new(false)),
            usize::MAX,
        )
        .unwrap();
        let mut events = Events::with_capacity(16);

        // The first request: connect and send, until the server has it.
        assert!(lp.try_start(job(0)).is_none());
        let t = Instant::now();
        while got_rx.try_recv().is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the request never arrived"
            );
            turn(&mut lp, &mut events);
        }
        // Its answer, written while the loop does not look (on loopback
        // the bytes are in the client's socket when the write returns).
        go_tx.send(()).unwrap();
        answered_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(
            (lp.open, lp.idle.len()),
            (1, 0),
            "the answer was not read yet"
        );

        // The second request comes due.
        lp.polled_us = 0;
        assert!(lp.try_start(job(1)).is_none());
        assert_eq!(lp.open, 1, "a second connection was opened");
        let first = done_rx.try_recv().expect("the first answer was read");
        assert!(first
            .outcome
            .as_ref()
            .is_some_and(|o| o.error.is_none() && o.chunks == 1));

        let t = Instant::now();
        let second = loop {
            if let Ok(d) = done_rx.try_recv() {
                break d;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "no second answer");
            turn(&mut lp, &mut events);
        };
        assert_eq!(second.job.seq, 1);
        assert!(second
            .outcome
            .as_ref()
            .is_some_and(|o| o.error.is_none() && o.chunks == 1));
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }
}
