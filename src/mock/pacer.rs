//! The pacer: one thread that sends the tokens of every plain stream on
//! their deadlines, so a thousand streams in flight cost one timer heap and
//! one `write` per token, not a thousand threads each woken per token.
//!
//! A connection thread hands a stream over once its head (and chat's role
//! chunk) is sent: a duplicate of its socket, the stream's events already
//! framed (every token event of an answer is one of eight, because the
//! token text cycles through eight words; the last carries the finish
//! reason, the usage, `[DONE]` and the end of the body), and the latency
//! model's deadlines. The connection thread then waits for the verdict and
//! serves the connection's next request as before. Streams with injected
//! faults or timed by `--engine` stay on their connection thread (rare,
//! and their rules live there once).
//!
//! The socket is non-blocking while the pacer holds it: a client that does
//! not read holds up only its own stream (its bytes wait, and are retried
//! every millisecond), never the others.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crossbeam_channel::Sender;

use super::latency::Latency;
use super::metrics::{Running, SendDelay};

/// How soon bytes a client did not take are offered again.
const RETRY: Duration = Duration::from_millis(1);

/// Events due this soon after a wake-up are sent with it: a thousand
/// streams at 10 ms ITL have a token due every 10 µs, and a wake-up per
/// token cost the pacer more than the writes (a context switch each). At
/// most this early, 0.1 ms, is far inside what a client can tell apart on
/// loopback and what bench-replay checks (TTFT within 1 ms).
const EARLY: Duration = Duration::from_micros(100);

/// `--pacer-threads`' default. More threads than cores, because on a
/// machine whose cores are busy with other work each wake-up waits for a
/// core, and a few threads each with its share of the streams wait less
/// than one or two with all of them: 200 streams at 20 ms ITL (2-core VM,
/// load average 16, 2026-11-25) measured TTFT p99 257-458 ms with 2
/// threads, 45-72 ms with 8 (thread per stream: 47-56 ms).
pub const DEFAULT_THREADS: u16 = 8;

/// One stream handed to the pacer.
pub struct Paced {
    /// A duplicate of the connection's socket (same connection).
    pub sock: TcpStream,
    pub latency: Latency,
    pub arrival: Instant,
    pub prompt_tokens: u64,
    /// Token events to send (at least 1).
    pub events: u64,
    /// Event `i` (not the last) is `cycle[i % cycle.len()]`, framed.
    pub cycle: Vec<Vec<u8>>,
    /// The last event and everything after it, framed: one write.
    pub last: Vec<u8>,
    /// The request leaves the running gauge as its last token is made.
    pub running: Option<Running>,
}

/// A stream, and where its verdict goes (an error: the connection is gone).
type Submitted = (Paced, Sender<io::Result<()>>);

impl Paced {
    fn due(&self, i: u64) -> Instant {
        self.latency.deadline(self.arrival, self.prompt_tokens, i)
    }

    /// The framed bytes of event `i`.
    fn event(&self, i: u64) -> &[u8] {
        if i + 1 >= self.events || self.cycle.is_empty() {
            &self.last
        } else {
            &self.cycle[(i % self.cycle.len() as u64) as usize]
        }
    }
}

/// The handle connection threads submit streams through: streams go to
/// the pacer threads in turn.
pub struct Pacer {
    inboxes: Vec<Arc<Inbox>>,
    next: AtomicUsize,
    /// Each thread's send delays.
    delays: Vec<Arc<SendDelay>>,
}

/// Streams waiting for a pacer thread. A mutex and a condition variable,
/// not a channel: crossbeam's timed receive spins and yields before it
/// sleeps, and on a machine whose cores are all busy a thread that yields
/// is put at the back of the queue, so the pacer woke 20-40 ms late (tokens
/// arrived in pairs at 20 ms ITL) where a plain timed wait is not.
#[derive(Default)]
struct Inbox {
    state: Mutex<InboxState>,
    ready: Condvar,
}

#[derive(Default)]
struct InboxState {
    streams: Vec<Submitted>,
    /// The `Pacer` is gone: the thread ends once its streams have.
    closed: bool,
}

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, InboxState> {
        // A panic while holding it leaves at worst a stream list.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        for inbox in &self.inboxes {
            inbox.lock().closed = true;
            inbox.ready.notify_one();
        }
    }
}

impl Pacer {
    /// Starts `threads` pacer threads (at least 1).
    pub fn start(threads: usize) -> io::Result<Pacer> {
        let mut inboxes = Vec::new();
        let mut delays = Vec::new();
        for i in 0..threads.max(1) {
            let inbox = Arc::new(Inbox::default());
            let theirs = Arc::clone(&inbox);
            let delay = Arc::new(SendDelay::default());
            let mut heap = Heap {
                delay: Arc::clone(&delay),
                ..Heap::default()
            };
            std::thread::Builder::new()
                .name(format!("mc-mock-pacer{i}"))
                .spawn(move || heap.run(&theirs))?;
            inboxes.push(inbox);
            delays.push(delay);
        }
        Ok(Pacer {
            inboxes,
            next: AtomicUsize::new(0),
            delays,
        })
    }

    /// How late each thread wrote its events.
    pub fn delays(&self) -> impl Iterator<Item = &SendDelay> {
        self.delays.iter().map(|d| &**d)
    }

    /// Sends `paced` on its deadlines and waits until it has ended.
    pub fn stream(&self, paced: Paced) -> io::Result<()> {
        let (done, verdict) = crossbeam_channel::bounded(1);
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.inboxes.len();
        let inbox = &self.inboxes[i];
        inbox.lock().streams.push((paced, done));
        inbox.ready.notify_one();
        verdict
            .recv()
            .unwrap_or_else(|_| Err(io::Error::other("the pacer thread is gone")))
    }
}

/// A stream being sent.
struct Live {
    paced: Paced,
    done: Sender<io::Result<()>>,
    /// The next event to send.
    next: u64,
    /// Bytes the socket did not take yet.
    pending: Vec<u8>,
}

/// The pacer's state: streams by slot, and when each is next due.
#[derive(Default)]
struct Heap {
    live: Vec<Option<Live>>,
    free: Vec<usize>,
    /// (when, slot), earliest first; one entry per live stream.
    due: BinaryHeap<Reverse<(Instant, usize)>>,
    /// How late this thread wrote its events.
    delay: Arc<SendDelay>,
}

impl Heap {
    fn run(&mut self, inbox: &Inbox) {
        let mut arrived = Vec::new();
        loop {
            {
                let mut state = inbox.lock();
                loop {
                    if !state.streams.is_empty() {
                        std::mem::swap(&mut state.streams, &mut arrived);
                        break;
                    }
                    if state.closed && self.due.is_empty() {
                        return;
                    }
                    let Some(&Reverse((when, _))) = self.due.peek() else {
                        state = inbox.ready.wait(state).unwrap_or_else(|p| p.into_inner());
                        continue;
                    };
                    let now = Instant::now();
                    if when <= now + EARLY {
                        break;
                    }
                    state = inbox
                        .ready
                        .wait_timeout(state, when - now)
                        .map_or_else(|p| p.into_inner().0, |(s, _)| s);
                }
            }
            for submitted in arrived.drain(..) {
                self.add(submitted);
            }
            let now = Instant::now() + EARLY;
            while let Some(&Reverse((when, slot))) = self.due.peek() {
                if when > now {
                    break;
                }
                self.due.pop();
                self.step(slot, now);
            }
        }
    }

    fn add(&mut self, (paced, done): Submitted) {
        if let Err(e) = paced.sock.set_nonblocking(true) {
            let _ = done.send(Err(e));
            return;
        }
        let when = paced.due(0);
        let live = Live {
            paced,
            done,
            next: 0,
            pending: Vec::new(),
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.live[slot] = Some(live);
                slot
            }
            None => {
                self.live.push(Some(live));
                self.live.len() - 1
            }
        };
        self.due.push(Reverse((when, slot)));
    }

    /// Sends what is due of the stream in `slot`, then schedules it again
    /// or ends it.
    fn step(&mut self, slot: usize, now: Instant) {
        let Some(live) = self.live.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let result = live.send_due(now, &self.delay);
        let next = match result {
            Ok(()) if live.next < live.paced.events => {
                let due = live.paced.due(live.next);
                Some(if live.pending.is_empty() {
                    due
                } else {
                    due.min(now + RETRY)
                })
            }
            Ok(()) if !live.pending.is_empty() => Some(now + RETRY),
            _ => None,
        };
        match next {
            Some(when) => self.due.push(Reverse((when, slot))),
            None => {
                if let Some(live) = self.live[slot].take() {
                    self.free.push(slot);
                    live.end(result);
                }
            }
        }
    }
}

impl Live {
    /// Writes every event due by `now` (late ones together) and what the
    /// socket did not take before; notes how late each event is written.
    fn send_due(&mut self, now: Instant, delay: &SendDelay) -> io::Result<()> {
        let written_at = Instant::now();
        while self.next < self.paced.events && self.paced.due(self.next) <= now {
            let i = self.next;
            let late = written_at.saturating_duration_since(self.paced.due(i));
            delay.record(late.as_micros() as u64);
            self.next += 1;
            if i + 1 == self.paced.events {
                self.paced.running.take();
            }
            if self.pending.is_empty() {
                // The usual case: one event, written straight from its bytes.
                let bytes = self.paced.event(i);
                let n = write_some(&self.paced.sock, bytes)?;
                if n < bytes.len() {
                    self.pending.extend_from_slice(&bytes[n..]);
                }
            } else {
                let bytes = self.paced.event(i);
                self.pending.extend_from_slice(bytes);
            }
        }
        if !self.pending.is_empty() {
            let n = write_some(&self.paced.sock, &self.pending)?;
            self.pending.drain(..n);
        }
        Ok(())
    }

    /// Gives the socket back (blocking again) and the verdict.
    fn end(self, result: io::Result<()>) {
        let result = result.and_then(|()| self.paced.sock.set_nonblocking(false));
        // The connection thread may be gone only if it panicked.
        let _ = self.done.send(result);
    }
}

/// Writes as much of `bytes` as the socket takes now.
fn write_some(mut sock: &TcpStream, bytes: &[u8]) -> io::Result<usize> {
    let mut sent = 0;
    while sent < bytes.len() {
        match sock.write(&bytes[sent..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (s, c)
    }

    fn paced(sock: TcpStream, events: u64, itl_ms: f64) -> Paced {
        Paced {
            sock,
            latency: Latency {
                ttft_ms: 5.0,
                ttft_per_1k_tokens_ms: 0.0,
                itl_ms,
            },
            arrival: Instant::now(),
            prompt_tokens: 0,
            events,
            cycle: vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()],
            last: b"|end".to_vec(),
            running: None,
        }
    }

    #[test]
    fn events_cycle_then_the_last_ends_the_stream_on_time() {
        let pacer = Pacer::start(2).unwrap();
        let (server, mut client) = pair();
        let start = Instant::now();
        let p = paced(server, 5, 2.0);
        pacer.stream(p).unwrap();
        // 5 ms TTFT + 4 gaps of 2 ms: the verdict comes after the last.
        assert!(start.elapsed() >= Duration::from_millis(13) - EARLY);
        let mut got = Vec::new();
        client
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 64];
        while got.len() < 8 {
            let n = client.read(&mut buf).unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"abca|end");
    }

    #[test]
    fn one_event_streams_send_only_the_last() {
        let pacer = Pacer::start(2).unwrap();
        let (server, mut client) = pair();
        pacer.stream(paced(server, 1, 1.0)).unwrap();
        let mut got = [0u8; 4];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"|end");
    }

    #[test]
    fn a_client_that_does_not_read_holds_up_only_its_own_stream() {
        let pacer = std::sync::Arc::new(Pacer::start(2).unwrap());
        // A stuck client: its stream's last event is far bigger than the
        // socket buffers, and nobody reads it.
        let (stuck_server, stuck_client) = pair();
        let mut stuck = paced(stuck_server, 2, 0.0);
        stuck.last = vec![b'x'; 64 << 20];
        let p2 = pacer.clone();
        std::thread::spawn(move || {
            let _ = p2.stream(stuck);
        });
        std::thread::sleep(Duration::from_millis(50));
        let (server, mut client) = pair();
        let start = Instant::now();
        pacer.stream(paced(server, 3, 1.0)).unwrap();
        assert!(start.elapsed() < Duration::from_secs(2));
        let mut got = [0u8; 6];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ab|end");
        drop(stuck_client);
    }

    #[test]
    fn a_client_that_went_away_ends_its_stream_with_an_error() {
        let pacer = Pacer::start(2).unwrap();
        let (server, client) = pair();
        drop(client);
        let mut p = paced(server, 200, 1.0);
        p.latency.ttft_ms = 0.0;
        assert!(pacer.stream(p).is_err());
    }
}
