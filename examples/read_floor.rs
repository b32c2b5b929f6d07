//! The floor under mc-replay's CPU per streamed token (scripts/
//! bench-replay.sh, docs/ARCHITECTURE.md §5): streams read exactly as
//! mc-replay's evented client reads them, and nothing else done with them.
//!
//! STREAMS keep-alive connections to an OpenAI-compatible server (mc-mock
//! in the benchmark), started `1 / RATE` s apart; each sends its next
//! request when its answer ends, until REQUESTS were sent. The reads are
//! mc-replay's: mio readiness (edge-triggered), one `recvmsg` with the
//! kernel's arrival stamp (`mctrace::rxtime`) per ready socket and none
//! after a short read, and with 100 or more answers in flight at most one
//! poll per 500 µs (`--read-coalesce-us`' default). What it leaves out is
//! everything mc-replay does with the bytes: HTTP heads, chunked framing
//! (it only looks for the body's last 7 bytes), SSE, JSON, times, results.
//! So its CPU per token is what any client that reads each token as it
//! comes pays on this machine (the syscalls, and on loopback the server's
//! side of the ACK each read sends), and mc-replay's CPU above it is
//! mc-replay's own work.
//!
//!   cargo run --release --example read_floor -- http://127.0.0.1:PORT STREAMS RATE REQUESTS TOKENS
//!
//! Prints one JSON line: requests answered, tokens asked, events read
//! (`data: {` lines: role chunk, tokens, usage), bytes read, wall seconds. Exit 1 with a message when the server closes a
//! connection, answers short or cannot be reached.

use std::io::{self, Write};
use std::net::{TcpStream as StdStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use mctrace::rxtime::{self, RxReader};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

/// Every answer's last bytes: the end of its chunked body.
const BODY_END: &[u8; 7] = b"\r\n0\r\n\r\n";
const COALESCE_FROM: usize = 100;
const COALESCE: Duration = Duration::from_micros(500);

struct Conn {
    sock: TcpStream,
    /// The last bytes read, to find the body's end across reads.
    tail: [u8; 7],
    busy: bool,
}

struct Args {
    addr: std::net::SocketAddr,
    host: String,
    streams: usize,
    rate: f64,
    requests: usize,
    tokens: u64,
}

fn args() -> Result<Args, String> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let [url, streams, rate, requests, tokens] = &a[..] else {
        return Err("usage: read_floor http://HOST:PORT STREAMS RATE REQUESTS TOKENS".into());
    };
    let host = url
        .strip_prefix("http://")
        .ok_or("the URL must be http://HOST:PORT")?
        .trim_end_matches('/')
        .to_string();
    let addr = host
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))?;
    let num = |s: &str, what: &str| {
        s.parse::<f64>()
            .map_err(|_| format!("{what}: not a number: {s}"))
    };
    Ok(Args {
        addr,
        host,
        streams: num(streams, "STREAMS")? as usize,
        rate: num(rate, "RATE")?,
        requests: num(requests, "REQUESTS")? as usize,
        tokens: num(tokens, "TOKENS")? as u64,
    })
}

fn request(a: &Args) -> Vec<u8> {
    let body = format!(
        "{{\"model\":\"mock-model\",\"messages\":[{{\"role\":\"user\",\"content\":\"w w w w w w w w\"}}],\
         \"stream\":true,\"max_tokens\":{t},\"min_tokens\":{t},\"ignore_eos\":true}}",
        t = a.tokens
    );
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        a.host,
        body.len()
    )
    .into_bytes()
}

/// Sends the (small) request whole; a socket that takes part of it now
/// is an error here, not a case to handle.
fn send(sock: &mut TcpStream, req: &[u8]) -> io::Result<()> {
    let n = sock.write(req)?;
    if n < req.len() {
        return Err(io::Error::other("the socket took part of a request"));
    }
    Ok(())
}

fn open(a: &Args, poll: &Poll, slot: usize) -> io::Result<Conn> {
    let s = StdStream::connect(a.addr)?;
    s.set_nodelay(true)?;
    rxtime::enable(&s);
    s.set_nonblocking(true)?;
    let mut sock = TcpStream::from_std(s);
    poll.registry()
        .register(&mut sock, Token(slot), Interest::READABLE)?;
    Ok(Conn {
        sock,
        tail: [0; 7],
        busy: false,
    })
}

fn run(a: &Args) -> Result<(), String> {
    let req = request(a);
    let mut poll = Poll::new().map_err(|e| e.to_string())?;
    let mut events = Events::with_capacity(1024);
    let mut conns: Vec<Conn> = Vec::new();
    let mut reader = RxReader::default();
    let mut buf = vec![0u8; 64 * 1024];
    let (mut sent, mut done, mut bytes, mut in_flight) = (0usize, 0usize, 0u64, 0usize);
    // Events with a JSON object (role, tokens, usage): a check that the
    // answers were whole, at a cost far below a read's.
    let event = memchr::memmem::Finder::new(b"data: {");
    let mut n_events = 0u64;
    let start = Instant::now();
    let spacing = Duration::from_secs_f64(1.0 / a.rate);
    while done < a.requests {
        // The first STREAMS requests on their schedule, each on a new
        // connection.
        while conns.len() < a.streams
            && sent < a.requests
            && start.elapsed() >= spacing * conns.len() as u32
        {
            let mut c = open(a, &poll, conns.len()).map_err(|e| format!("{}: {e}", a.addr))?;
            send(&mut c.sock, &req).map_err(|e| e.to_string())?;
            c.busy = true;
            conns.push(c);
            sent += 1;
            in_flight += 1;
        }
        let timeout = (conns.len() < a.streams && sent < a.requests)
            .then(|| (spacing * conns.len() as u32).saturating_sub(start.elapsed()));
        let polled = Instant::now();
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e.to_string());
            }
        }
        for e in events.iter() {
            let c = &mut conns[e.token().0];
            loop {
                match reader.read(&mut c.sock, &mut buf) {
                    Ok((0, _)) => return Err("the server closed a connection".into()),
                    Ok((n, _age)) => {
                        bytes += n as u64;
                        let got = &buf[..n];
                        n_events += event.find_iter(got).count() as u64;
                        if n >= 7 {
                            c.tail.copy_from_slice(&got[n - 7..]);
                        } else {
                            c.tail.rotate_left(n);
                            c.tail[7 - n..].copy_from_slice(got);
                        }
                        if &c.tail == BODY_END && c.busy {
                            done += 1;
                            c.tail = [0; 7];
                            c.busy = false;
                            in_flight -= 1;
                            if sent < a.requests {
                                send(&mut c.sock, &req).map_err(|e| e.to_string())?;
                                c.busy = true;
                                sent += 1;
                                in_flight += 1;
                            }
                        }
                        if n < buf.len() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
        if in_flight >= COALESCE_FROM {
            let until = polled + COALESCE;
            let now = Instant::now();
            if until > now {
                std::thread::sleep(until - now);
            }
        }
    }
    let wall = start.elapsed().as_secs_f64();
    println!(
        "{{\"requests\":{done},\"tokens\":{},\"events\":{n_events},\"bytes\":{bytes},\"seconds\":{wall:.3}}}",
        done as u64 * a.tokens
    );
    eprintln!("read_floor: {done} answers, {bytes} bytes in {wall:.2} s");
    Ok(())
}

fn main() {
    let result = args().and_then(|a| run(&a));
    if let Err(e) = result {
        eprintln!("read_floor: {e}");
        std::process::exit(1);
    }
}
