//! An event loop of the evented client: one thread, its connections
//! (non-blocking sockets under `mio`, HTTP/1.1 keep-alive reuse), their
//! readiness, the requests' timers, and the jobs the target hands it. A
//! connection's own reads and writes are in [`super::conn`]; what the
//! bytes mean, in [`super::exchange`].
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

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, TryRecvError};
use crossbeam_utils::sync::{Parker, Unparker};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use serde_json::json;

use super::conn::{idle_closed, progress, Conn, Step, Task};
use super::demand::Demand;
use super::exchange::{End, Exchange};
use super::{DoneTx, Msg, Shared, COALESCE_FROM, WAKER};
use crate::oslimit;
use crate::replay::http::answer;
use crate::replay::http::stream::BodyEnd;
use crate::replay::http::tls::{self, Session};
use crate::replay::http::wire;
use crate::replay::outcome::{ErrorKind, Failure, Outcome};
use crate::replay::target::{Done, Job};
use crate::rxtime::RxReader;

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
/// How often `Loop::admit` looks for the oldest request in flight (µs).
const OLDEST_EVERY_US: u64 = 1_000;
/// How long a loop that ran out of file descriptors waits before it tries
/// to open a connection again, when none of its own has freed one.
const PROBE_FILES_US: u64 = 10_000;

pub(super) struct Loop {
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
    /// Without `--max-connections`: the loop's measurements and the cap
    /// they give (`limit`, within `cap`), grown at the end of a turn of
    /// the loop, when every answer already in was read.
    demand: Option<Demand>,
    limit: usize,
    /// What this loop adds to `Shared::cap_total`: `limit`, or its open
    /// connections when more.
    counted: usize,
    /// When the oldest request in flight was last looked for, and its send
    /// time (µs).
    oldest: Option<(u64, u64)>,
    /// Jobs waiting for a connection (the cap).
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

impl Loop {
    /// A loop with no connection yet, allowed `cap` of them.
    pub(super) fn new(
        shared: Arc<Shared>,
        rx: Receiver<Msg>,
        done: DoneTx,
        quit: Arc<AtomicBool>,
        cap: usize,
        demand: Option<Demand>,
    ) -> io::Result<Loop> {
        let limit = match &demand {
            Some(d) => d.cap(0, 0),
            None => usize::MAX,
        };
        let auto = demand.is_some();
        if auto {
            let total = shared.cap_total.fetch_add(limit, Ordering::Relaxed) + limit;
            shared.cap_peak.fetch_max(total, Ordering::Relaxed);
        }
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
            demand,
            limit,
            counted: if auto { limit } else { 0 },
            oldest: None,
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

    /// What wakes this loop from its poll (a waker on its `WAKER` token)
    /// and from its read-coalescing pause.
    pub(super) fn bells(&self) -> io::Result<(Waker, Unparker)> {
        let waker = Waker::new(self.poll.registry(), WAKER)?;
        Ok((waker, self.parker.unparker().clone()))
    }

    pub(super) fn run(&mut self) {
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
            let full = ready.len() >= events.capacity();
            if !full {
                self.admit();
            }
            if self
                .probe_at
                .is_some_and(|t| self.shared.clock.now_us() >= t)
            {
                self.probe_files();
            }
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
        if let Some(d) = &mut self.demand {
            d.arrived(job.t_sched_us);
        }
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
            None if self.open < self.cap.min(self.limit) => match self.open_conn(self.preferred) {
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
        let task = self.task(job);
        self.attach(slot, task);
        self.on_ready(slot);
        None
    }

    /// Without `--max-connections`, at the end of a turn of the loop (every
    /// answer that was in the sockets read, so a connection still busy is
    /// waiting for the server, not for this loop): jobs still waiting for
    /// a connection get the cap the measured rate and latency call for
    /// (`Demand`), and as many of them as it allows start now. Not in the
    /// middle of a turn: after a stall, the requests due meanwhile all come
    /// before the answers that free their connections are read, and a cap
    /// grown then would open a connection for each.
    fn admit(&mut self) {
        if self.demand.is_none() || self.pending.is_empty() {
            return;
        }
        let now = self.shared.clock.now_us();
        // A scan of every connection, at most once per OLDEST_EVERY_US: while
        // requests wait this runs every turn, and at a thousand connections
        // a scan per turn was the loop's work. Between scans the oldest may
        // have ended: its age then overstates the latency for that long.
        let oldest = match self.oldest {
            Some((at, t)) if now < at + OLDEST_EVERY_US => t,
            _ => {
                let t = self
                    .conns
                    .iter()
                    .filter_map(|c| c.as_ref()?.task.as_ref())
                    .map(|t| t.entry.t_send_us)
                    .min()
                    .unwrap_or(now);
                self.oldest = Some((now, t));
                t
            }
        };
        let Some(d) = &self.demand else {
            return;
        };
        let limit = d.cap(now.saturating_sub(oldest), self.pending.len());
        // The summary's cap counts a loop at no less than it holds open
        // (a cap that fell below its open connections closes none), so
        // the most open at once never passes the largest cap.
        let counted = limit.max(self.open);
        if counted != self.counted {
            let sh = &self.shared;
            let total = if counted > self.counted {
                let up = counted - self.counted;
                sh.cap_total.fetch_add(up, Ordering::Relaxed) + up
            } else {
                let down = self.counted - counted;
                sh.cap_total.fetch_sub(down, Ordering::Relaxed) - down
            };
            sh.cap_peak.fetch_max(total, Ordering::Relaxed);
            self.counted = counted;
        }
        self.limit = limit;
        while self.open < self.cap.min(self.limit) {
            let Some(job) = self.pending.pop_front() else {
                break;
            };
            if let Some(job) = self.try_start(job) {
                self.pending.push_front(job);
                break;
            }
        }
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
    fn task(&self, mut job: Job) -> Task {
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
        let out = Outcome {
            t_send_us: now,
            t_end_us: now,
            itl_us: Vec::with_capacity(gaps),
            ..Outcome::default()
        };
        Task {
            entry,
            history,
            deadline_us: now.saturating_add(sh.cfg.timeout.as_micros() as u64),
            ex: Exchange::new(request, out),
        }
    }

    fn attach(&mut self, slot: usize, task: Task) {
        self.fresh.push(slot);
        self.serial += 1;
        self.timers
            .push(Reverse((task.deadline_us, slot, self.serial)));
        if let Some(c) = self.conns[slot].as_mut() {
            c.serial = self.serial;
            c.task = Some(task);
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
            task: None,
        });
        self.open += 1;
        let sh = &self.shared;
        let open = sh.open_total.fetch_add(1, Ordering::Relaxed) + 1;
        sh.most_open.fetch_max(open, Ordering::Relaxed);
        sh.connects.fetch_add(1, Ordering::Relaxed);
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
        if let Some(t) = conn(i + 2).and_then(|c| c.as_ref()?.task.as_ref()) {
            crate::prefetch::value(&t.entry.live);
            if let Some(r) = t.ex.stream() {
                r.prefetch();
            }
        }
        if let Some(r) = conn(i + 1).and_then(|c| c.as_ref()?.task.as_ref()?.ex.stream()) {
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
            if conn.task.is_none() {
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
        self.shared.connects.fetch_add(1, Ordering::Relaxed);
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
        let Some(mut task) = self.conns[slot].as_mut().and_then(|c| c.task.take()) else {
            return;
        };
        self.close(slot);
        task.ex.resend();
        match self.open_conn(self.preferred) {
            Ok(new) => {
                self.attach(new, task);
                self.on_ready(new);
            }
            Err(Open::OutOfFiles(f) | Open::Failed(f)) => {
                let now = self.shared.clock.now_us();
                self.report(task, End::Failed(f), now);
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
                .is_some_and(|c| c.serial == serial && c.task.is_some());
            if !live {
                continue;
            }
            let secs = self.shared.cfg.timeout.as_secs_f64();
            let msg = format!("no answer within --timeout {secs} s");
            let in_body = self.conns[slot]
                .as_ref()
                .and_then(|c| c.task.as_ref())
                .is_some_and(|t| t.ex.in_body());
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
        let Some(task) = conn.task.take() else {
            return;
        };
        let reuse = matches!(end, End::Body { reuse: true, .. });
        if conn.connected {
            let addr = conn.addr;
            self.preferred = addr;
        }
        let now = task
            .ex
            .ended_at()
            .unwrap_or_else(|| self.shared.clock.now_us());
        if let Some(d) = &mut self.demand {
            d.ended(now.saturating_sub(task.entry.t_send_us));
        }
        self.report(task, end, now);
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
                .is_some_and(|c| c.serial == *serial && c.task.is_some())
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
    fn report(&self, task: Task, end: End, now: u64) {
        let Task {
            entry,
            mut history,
            ex,
            ..
        } = task;
        let outcome = ex.conclude(end, now, &entry.live);
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

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader};
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::time::Instant;

    use std::io::{Read, Write};
    use std::sync::atomic::AtomicUsize;

    use super::super::{Config, ConnCap};
    use super::*;
    use crate::jsonl::{ErrorPolicy, LineReader, OnError};
    use crate::replay::http::body::{BodyOptions, Endpoint as Api};
    use crate::replay::http::client::Clock;
    use crate::replay::http::prompt::{Synth, Vocab};
    use crate::replay::http::request::RequestBuilder;
    use crate::replay::http::wire::Endpoint;
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
            worker: None,
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
        let shared = Arc::new(Shared::new(
            Arc::new(trace),
            builder,
            Config {
                endpoint: Endpoint::parse(&url).unwrap(),
                user_agent: "test".into(),
                timeout: Duration::from_secs(10),
                max_connections: ConnCap::Unlimited,
                loops: 1,
                max_event_bytes: 1 << 20,
                coalesce: Duration::ZERO,
                tls: None,
            },
            // Past the reclaim's spacing from the first look on.
            Clock {
                start: Instant::now()
                    .checked_sub(Duration::from_secs(1))
                    .unwrap_or_else(Instant::now),
            },
            Arc::new(AtomicBool::new(false)),
        ));
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
            None,
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
