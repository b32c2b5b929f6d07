//! A minimal HTTP/1.1 server: one thread per connection, keep-alive,
//! requests framed by `Content-Length`, responses with `Content-Length` or
//! `Transfer-Encoding: chunked`.
//!
//! Request heads are parsed by `httparse` (ureq's parser, so no new code is
//! compiled in) into `http`'s `Method` and `HeaderMap`. A head that is not
//! HTTP/1.x is answered 400 (505 for another HTTP version), a head over
//! [`MAX_HEAD_BYTES`] or [`MAX_HEADERS`] 431, and the connection is closed
//! after either, as real servers do.
//!
//! It knows nothing about completions: a [`Handler`] gets each parsed
//! request and writes its answer through the [`Conn`]. Only std networking,
//! so the mock adds no async runtime to the crate.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use http::header::{CONNECTION, CONTENT_LENGTH, EXPECT, TRANSFER_ENCODING};
/// The request's types, from the `http` crate.
pub use http::{HeaderMap, Method};
use http::{HeaderName, HeaderValue};

use crate::rxtime::{self, RxReader};

/// Longest accepted request head (request line and headers).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most header lines accepted in one request (hyper's default).
pub const MAX_HEADERS: usize = 100;
/// Longest accepted request body.
pub const MAX_BODY_BYTES: u64 = 256 * 1024 * 1024;

/// How often a hanging connection checks whether its client went away: long
/// enough not to spin, short enough that threads do not pile up.
const HANG_POLL: Duration = Duration::from_millis(200);
/// How long a closing connection keeps reading what the client still sends,
/// so the kernel does not answer it with a reset that could destroy our
/// response before the client reads it.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: u64 = 4 * 1024 * 1024;

/// One request, body read in full.
#[derive(Debug)]
pub struct HttpRequest {
    pub method: Method,
    /// The request target as sent (path and query).
    pub target: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// When the body had been read: the mock's clock starts here.
    pub arrival: Instant,
    pub arrival_wall: SystemTime,
}

impl HttpRequest {
    /// The value of header `name` (case-insensitive), the first if repeated;
    /// `None` too for a value that is not visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// The target without its query string.
    pub fn path(&self) -> &str {
        self.target
            .split_once('?')
            .map_or(self.target.as_str(), |(path, _)| path)
    }
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Why no request could be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The client closed the connection between requests: a normal end.
    #[error("connection closed")]
    Closed,
    #[error(transparent)]
    Io(#[from] io::Error),
    /// A request we will not serve; answer with this status, then close
    /// (its body, if any, was not read, so the connection is out of step).
    #[error("{message}")]
    Reject { status: u16, message: &'static str },
}

fn reject(status: u16, message: &'static str) -> ReadError {
    ReadError::Reject { status, message }
}

/// What the server does with requests; one instance serves every connection.
pub trait Handler: Send + Sync + 'static {
    /// Answers `req` through `conn`. An error ends the connection.
    fn request(&self, conn: &mut Conn, req: HttpRequest) -> io::Result<()>;
    /// Answers a request that could not be read (see [`ReadError::Reject`]).
    fn reject(&self, conn: &mut Conn, status: u16, message: &str) -> io::Result<()>;
}

/// The most connections served at once, and why that many (for the note
/// printed when the server first reaches it).
#[derive(Debug, Clone, Copy)]
pub struct Cap {
    pub max: usize,
    pub why: &'static str,
}

/// Counts the connection threads alive; `accept` waits for room below the
/// cap, so connections past it wait in the listen queue (and, when that is
/// full, their SYNs are retried by the client's kernel): the latency a
/// client measures then says the server was full, where a thread that
/// could not start would abort the process.
struct Gate {
    open: Mutex<usize>,
    freed: Condvar,
    cap: Cap,
}

impl Gate {
    /// Waits until a connection may be accepted, and counts it.
    fn enter(&self, noted: &mut bool) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if *open >= self.cap.max && !*noted {
            *noted = true;
            let why = if self.cap.why.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.cap.why)
            };
            eprintln!(
                "mc-mock: {} connections open, the most it serves at once{why}: \
                 new ones wait in the listen queue until one closes",
                self.cap.max
            );
        }
        while *open >= self.cap.max {
            open = self.freed.wait(open).unwrap_or_else(|e| e.into_inner());
        }
        *open += 1;
    }

    fn leave(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        *open -= 1;
        self.freed.notify_one();
    }
}

/// A connection's place under the cap, given back when its thread ends
/// (or never starts).
struct Ticket(Arc<Gate>);

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// Accepts connections forever, one thread each, at most `cap` at once;
/// a connection that waits longer than `idle` for its next request is
/// closed (`None`: never).
pub fn serve<H: Handler>(
    listener: TcpListener,
    handler: H,
    cap: Cap,
    idle: Option<Duration>,
) -> io::Result<()> {
    // Accepted sockets inherit it: a first request that arrives before its
    // connection's thread runs is stamped too.
    rxtime::enable(&listener);
    let handler = Arc::new(handler);
    let gate = Arc::new(Gate {
        open: Mutex::new(0),
        freed: Condvar::new(),
        cap,
    });
    let mut noted = false;
    loop {
        gate.enter(&mut noted);
        let ticket = Ticket(Arc::clone(&gate));
        match listener.accept() {
            Ok((stream, _)) => {
                let handler = Arc::clone(&handler);
                let spawned = thread::Builder::new()
                    .name("mc-mock-conn".into())
                    .spawn(move || {
                        let _ticket = ticket;
                        connection(stream, &*handler, idle)
                    });
                if let Err(e) = spawned {
                    eprintln!("mc-mock: cannot start a connection thread: {e}");
                }
            }
            Err(e) => {
                // Out of file descriptors and the like: the condition may
                // pass, so keep serving, but do not spin on it.
                drop(ticket);
                eprintln!("mc-mock: accept: {e}");
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn connection<H: Handler>(stream: TcpStream, handler: &H, idle: Option<Duration>) {
    // Every SSE event is its own small write and must leave at once.
    let _ = stream.set_nodelay(true);
    // Reads wait at most `idle`: in practice only the wait for the next
    // request is long (a request's own bytes come together; hangs and
    // the linger set their own). Its end is a closed connection, as a
    // server's keep-alive timeout is.
    let _ = stream.set_read_timeout(idle);
    let mut conn = Conn::new(stream);
    loop {
        match conn.read_request() {
            Ok(req) => {
                if handler.request(&mut conn, req).is_err() || !conn.keep_alive {
                    break;
                }
            }
            Err(ReadError::Reject { status, message }) => {
                conn.keep_alive = false;
                let _ = handler.reject(&mut conn, status, message);
                break;
            }
            Err(ReadError::Closed | ReadError::Io(_)) => break,
        }
    }
    conn.close();
}

/// One client connection: reads requests and writes their responses.
pub struct Conn {
    stream: TcpStream,
    /// Bytes read but not yet consumed (the start of a pipelined request).
    buf: Vec<u8>,
    /// Whether the current request allows another one on this connection.
    keep_alive: bool,
    /// HTTP/1.0 clients cannot read chunked bodies.
    http10: bool,
    aborted: bool,
    rx: RxReader,
    /// When the bytes of the last read arrived (the kernel's stamp where
    /// there is one): a request's arrival is when its last byte came, not
    /// when this connection's thread got round to reading it.
    last_rx: Option<(Instant, SystemTime)>,
}

impl Conn {
    pub fn new(stream: TcpStream) -> Self {
        rxtime::enable(&stream);
        Conn {
            stream,
            buf: Vec::new(),
            keep_alive: true,
            http10: false,
            aborted: false,
            rx: RxReader::default(),
            last_rx: None,
        }
    }

    /// Reads the next request: head, then exactly `Content-Length` body bytes.
    pub fn read_request(&mut self) -> Result<HttpRequest, ReadError> {
        let (head_len, head) = self.read_head()?;
        self.buf.drain(..head_len);

        let Framing {
            body_len: len,
            keep_alive,
            http10,
            expects_continue,
        } = framing(&head)?;
        self.http10 = http10;
        self.keep_alive = keep_alive;
        if expects_continue && (self.buf.len() as u64) < len {
            // curl waits for this before sending a large body.
            self.stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        }
        let (body, read_more) = self.read_body(len)?;
        let (arrival, arrival_wall) = match self.last_rx {
            Some(at) if !read_more => at,
            _ => (Instant::now(), SystemTime::now()),
        };
        Ok(HttpRequest {
            method: head.method,
            target: head.target,
            headers: head.headers,
            body,
            arrival,
            arrival_wall,
        })
    }

    /// Reads until the head is complete; returns its length and the head.
    /// A head is refused as soon as what has arrived cannot be one, so a
    /// client sending garbage is not read up to the size limit.
    fn read_head(&mut self) -> Result<(usize, Head), ReadError> {
        loop {
            if let Some(parsed) = take_head(&mut self.buf)? {
                return Ok(parsed);
            }
            if self.fill()? == 0 {
                return Err(if self.buf.is_empty() {
                    ReadError::Closed
                } else {
                    ReadError::Io(io::ErrorKind::UnexpectedEof.into())
                });
            }
        }
    }

    fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 8192];
        loop {
            match self.rx.read(&mut self.stream, &mut chunk) {
                Ok((n, age)) => {
                    let (now, wall) = (Instant::now(), SystemTime::now());
                    self.last_rx = Some(
                        age.and_then(|a| Some((now.checked_sub(a)?, wall.checked_sub(a)?)))
                            .unwrap_or((now, wall)),
                    );
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The body, and whether any of it had to be read from the socket
    /// (then it arrived now, unstamped).
    fn read_body(&mut self, len: u64) -> io::Result<(Vec<u8>, bool)> {
        let buffered = self
            .buf
            .len()
            .min(usize::try_from(len).unwrap_or(usize::MAX));
        let mut body: Vec<u8> = self.buf.drain(..buffered).collect();
        let rest = len - buffered as u64;
        // `take` grows the buffer as bytes arrive, so a client that announces
        // a large body and sends little costs little memory.
        let got = (&mut self.stream).take(rest).read_to_end(&mut body)?;
        if (got as u64) < rest {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok((body, rest > 0))
    }

    /// Ends the connection after the current response.
    pub fn close_after_response(&mut self) {
        self.keep_alive = false;
    }

    /// Writes a whole response with a `Content-Length` body.
    pub fn respond(
        &mut self,
        status: u16,
        content_type: Option<&str>,
        extra_headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<()> {
        let mut out = self.head(status, content_type, extra_headers);
        out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
        out.extend_from_slice(body);
        self.stream.write_all(&out)
    }

    /// Writes the head of a streamed response; the body follows through the
    /// returned [`Stream`], one chunk per [`Stream::send`].
    pub fn start_stream(&mut self, status: u16, content_type: &str) -> io::Result<Stream<'_>> {
        let chunked = !self.http10;
        if !chunked {
            // An HTTP/1.0 body without a length ends when the connection does.
            self.keep_alive = false;
        }
        let mut out = self.head(status, Some(content_type), &[("cache-control", "no-cache")]);
        if chunked {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        }
        out.extend_from_slice(b"\r\n");
        self.stream.write_all(&out)?;
        Ok(Stream {
            conn: self,
            chunked,
        })
    }

    fn head(&self, status: u16, content_type: Option<&str>, extra: &[(&str, &str)]) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {status} {}\r\nserver: mc-mock\r\n",
            reason(status)
        );
        if let Some(ct) = content_type {
            out.push_str(&format!("content-type: {ct}\r\n"));
        }
        for (k, v) in extra {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        if !self.keep_alive {
            out.push_str("connection: close\r\n");
        } else if self.http10 {
            out.push_str("connection: keep-alive\r\n");
        }
        out.into_bytes()
    }

    /// Never answers: waits, without spinning, until the client goes away.
    pub fn wait_for_close(&mut self) {
        self.keep_alive = false;
        if self.stream.set_nonblocking(true).is_err() {
            return;
        }
        let mut sink = [0u8; 4096];
        loop {
            // Reading (not peeking) drains anything else the client sends,
            // so its eventual close is seen.
            match self.stream.read(&mut sink) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => return,
            }
            thread::sleep(HANG_POLL);
        }
    }

    /// Closes abruptly, as a crashed server would: no end of the body.
    pub fn abort(&mut self) {
        self.keep_alive = false;
        self.aborted = true;
        let _ = self.stream.shutdown(Shutdown::Both);
    }

    /// Closes after the last response: sends FIN, then reads what the client
    /// may still send for a moment, so our response is not lost to a reset.
    fn close(mut self) {
        if self.aborted {
            return;
        }
        if self.stream.shutdown(Shutdown::Write).is_err() {
            return;
        }
        if self.stream.set_read_timeout(Some(LINGER)).is_ok() {
            let deadline = Instant::now() + LINGER;
            let mut sink = Vec::new();
            let mut limited = (&mut self.stream).take(LINGER_BYTES);
            while Instant::now() < deadline {
                sink.clear();
                match limited.read_to_end(&mut sink) {
                    Ok(_) => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
        }
    }
}

/// The body of a streamed response.
pub struct Stream<'a> {
    conn: &'a mut Conn,
    chunked: bool,
}

impl Stream<'_> {
    /// Writes `data` as one chunk, at once.
    pub fn send(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            // A zero-length chunk would end the body.
            return Ok(());
        }
        let framed = self.frame(data);
        self.conn.stream.write_all(&framed)
    }

    /// `data` as it goes on the wire: one chunk (or as is, for HTTP/1.0).
    /// Empty data frames to nothing: a zero-length chunk would end the body.
    pub fn frame(&self, data: &[u8]) -> Vec<u8> {
        if !self.chunked || data.is_empty() {
            return data.to_vec();
        }
        let mut out = Vec::with_capacity(data.len() + 12);
        out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
        out
    }

    /// Writes bytes already framed (see [`Stream::frame`]), at once.
    pub fn send_framed(&mut self, framed: &[u8]) -> io::Result<()> {
        self.conn.stream.write_all(framed)
    }

    /// The bytes that end the body properly (see [`Stream::finish`]).
    pub fn end_frame(&self) -> &'static [u8] {
        if self.chunked {
            b"0\r\n\r\n"
        } else {
            b""
        }
    }

    /// A second handle on the connection's socket, for a stream sent by
    /// another thread (the pacer) while this one waits.
    pub fn socket(&self) -> io::Result<TcpStream> {
        self.conn.stream.try_clone()
    }

    /// Ends the body properly (the zero-length chunk).
    pub fn finish(self) -> io::Result<()> {
        let end = self.end_frame();
        if !end.is_empty() {
            self.conn.stream.write_all(end)?;
        }
        Ok(())
    }

    /// Cuts the connection mid-body; later sends fail.
    pub fn abort(&mut self) {
        self.conn.abort();
    }
}

/// A parsed request head.
#[derive(Debug)]
pub struct Head {
    pub method: Method,
    pub target: String,
    /// The minor version: HTTP/1.0 or HTTP/1.1.
    pub version: u8,
    pub headers: HeaderMap,
}

/// The request reader without its socket (what [`Conn`] does with the
/// bytes it read, and what the fuzzer feeds): drops the empty lines
/// before a request line (allowed, RFC 9112 §2.2) from `buf`, then reads
/// the head at its start: its length and contents once whole, `None`
/// while more bytes may complete it. A head is refused as soon as what
/// has arrived cannot be one, or is over [`MAX_HEAD_BYTES`].
pub fn take_head(buf: &mut Vec<u8>) -> Result<Option<(usize, Head)>, ReadError> {
    let blank = buf.chunks(2).take_while(|c| *c == b"\r\n").count();
    buf.drain(..2 * blank);
    if !buf.is_empty() {
        if let Some(parsed) = parse_head(buf)? {
            return Ok(Some(parsed));
        }
    }
    if buf.len() > MAX_HEAD_BYTES {
        return Err(too_large());
    }
    Ok(None)
}

/// How a request's body is framed and what its connection allows next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    /// `Content-Length` (0 without one).
    pub body_len: u64,
    /// Another request may follow on the connection.
    pub keep_alive: bool,
    /// HTTP/1.0 (its client cannot read a chunked answer).
    pub http10: bool,
    /// `Expect: 100-continue`.
    pub expects_continue: bool,
}

/// What `head` says of its body and its connection, or why it is refused.
pub fn framing(head: &Head) -> Result<Framing, ReadError> {
    let http10 = head.version == 0;
    let connection = header(&head.headers, CONNECTION.as_str()).unwrap_or("");
    let keep_alive = if http10 {
        has_token(connection, "keep-alive")
    } else {
        !has_token(connection, "close")
    };
    if head.headers.contains_key(TRANSFER_ENCODING) {
        // Without Content-Length we cannot tell where the body ends, and
        // the clients this mock serves never send chunked bodies.
        return Err(reject(
            411,
            "chunked request bodies are not supported; send Content-Length",
        ));
    }
    let body_len = content_length(&head.headers)?;
    if body_len > MAX_BODY_BYTES {
        return Err(reject(413, "request body too large"));
    }
    let expects_continue = header(&head.headers, EXPECT.as_str())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("100-continue"));
    Ok(Framing {
        body_len,
        keep_alive,
        http10,
        expects_continue,
    })
}

fn too_large() -> ReadError {
    reject(431, "request head too large")
}

/// Parses the head at the start of `buf`: its length and contents when it
/// is complete, `None` while more bytes may complete it.
fn parse_head(buf: &[u8]) -> Result<Option<(usize, Head)>, ReadError> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut slots);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(too_large()),
        Err(httparse::Error::Version) if other_http_version(buf) => {
            return Err(reject(505, "only HTTP/1.0 and HTTP/1.1 are supported"))
        }
        Err(e) => return Err(reject(400, malformed(e))),
    };
    if len > MAX_HEAD_BYTES {
        return Err(too_large());
    }
    // A complete parse fills every field.
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(reject(400, "malformed request line"));
    };
    let method = Method::from_bytes(method.as_bytes())
        .map_err(|_| reject(400, "malformed request method"))?;
    let mut headers = HeaderMap::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| reject(400, "malformed header name"))?;
        // httparse allows obs-text (bytes over 0x7f) in values; the mock's
        // headers are read as text, so a value must be UTF-8.
        let value = std::str::from_utf8(h.value)
            .ok()
            .and_then(|v| HeaderValue::from_str(v.trim()).ok())
            .ok_or_else(|| reject(400, "malformed header value"))?;
        headers.append(name, value);
    }
    Ok(Some((
        len,
        Head {
            method,
            target: target.to_string(),
            version,
            headers,
        },
    )))
}

/// Whether a request line httparse refused for its version names another
/// HTTP version (`HTTP/2`), which is 505 rather than a malformed line.
/// Decided from what httparse had read when it refused: the version's
/// `HTTP/` and its major digit, so the answer does not depend on how much
/// of the line has arrived (it did: `POST / HTTP/1/` read alone was 505,
/// the same line whole 400; found by `examples/fuzz.rs`).
fn other_http_version(buf: &[u8]) -> bool {
    let line = buf
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or_default();
    let v = line.split(|&b| b == b' ').nth(2).unwrap_or_default();
    v.len() > 5 && v.starts_with(b"HTTP/") && v[5].is_ascii_digit() && v[5] != b'1'
}

/// What is wrong with a head httparse refused, for the 400's message.
fn malformed(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "malformed header line (a name, then a colon)",
        httparse::Error::HeaderValue => "malformed header value",
        httparse::Error::NewLine => "malformed line ending in the request head",
        httparse::Error::Token => "malformed request method",
        _ => "malformed request line",
    }
}

/// `Content-Length`: digits only; repeated copies must agree (RFC 9110
/// §8.6), since a server and a proxy reading different copies would split
/// the stream differently.
fn content_length(headers: &HeaderMap) -> Result<u64, ReadError> {
    let mut len = None;
    for v in headers.get_all(CONTENT_LENGTH) {
        let v = v.as_bytes().trim_ascii();
        let n = (!v.is_empty() && v.iter().all(u8::is_ascii_digit))
            .then(|| std::str::from_utf8(v).ok()?.parse::<u64>().ok())
            .flatten()
            .ok_or_else(|| reject(400, "Content-Length is not a number"))?;
        if len.is_some_and(|l| l != n) {
            return Err(reject(400, "conflicting Content-Length headers"));
        }
        len = Some(n);
    }
    Ok(len.unwrap_or(0))
}

/// Whether a comma-separated header value holds `token` (case-insensitive).
fn has_token(value: &str, token: &str) -> bool {
    value
        .split(',')
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request's arrival is when its bytes came, not when its
    /// connection's thread read them (the kernel's stamp, on Linux).
    #[test]
    fn a_request_arrives_when_its_bytes_do() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        rxtime::enable(&listener);
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        // The kernel turns stamping on lazily: give it a moment.
        thread::sleep(Duration::from_millis(50));
        let before = Instant::now();
        client
            .write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
            .unwrap();
        let after = Instant::now();
        thread::sleep(Duration::from_millis(60));
        let (stream, _) = listener.accept().unwrap();
        let req = Conn::new(stream).read_request().unwrap();
        assert_eq!(req.body, b"{}");
        if cfg!(target_os = "linux") {
            let slack = Duration::from_millis(1);
            assert!(
                req.arrival + slack >= before && req.arrival <= after + slack,
                "arrived {:?} after the write began, read {:?} after",
                req.arrival.saturating_duration_since(before),
                Instant::now().saturating_duration_since(before)
            );
        }
    }

    fn head(s: &str) -> Result<Head, ReadError> {
        match parse_head(s.as_bytes())? {
            Some((len, h)) => {
                assert_eq!(len, s.len());
                Ok(h)
            }
            None => panic!("incomplete: {s:?}"),
        }
    }

    fn status(s: &str) -> Option<u16> {
        match parse_head(s.as_bytes()) {
            Err(ReadError::Reject { status, .. }) => Some(status),
            _ => None,
        }
    }

    #[test]
    fn parses_a_head() {
        let h = head("POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nX-Trace-Line:  7 \r\n\r\n")
            .unwrap();
        assert_eq!(h.method, Method::POST);
        assert_eq!(h.target, "/v1/completions?x=1");
        assert_eq!(h.version, 1);
        assert_eq!(header(&h.headers, "x-trace-line"), Some("7"));
        assert!(matches!(
            parse_head(b"GET / HTTP/1.1\r\nHost: a\r\n"),
            Ok(None)
        ));
    }

    #[test]
    fn rejects_bad_heads() {
        for bad in [
            "GET /\r\n\r\n",
            "GET / HTTP/1.1\r\nno colon\r\n\r\n",
            "GET / HTTP/1.1\r\nno-colon\r\n\r\n",
            "GET / HTTP/1.1\r\n folded: x\r\n\r\n",
            "GET / HTTP/1.1\r\n: no name\r\n\r\n",
            "GET  HTTP/1.1\r\n\r\n",
            "G(T / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nx: a\x01b\r\n\r\n",
        ] {
            assert_eq!(status(bad), Some(400), "{bad:?}");
        }
        assert_eq!(status("GET / HTTP/2\r\n\r\n"), Some(505));
        // The same status however much of the line has arrived.
        for line in ["POST / HTTP/1/0\rNc keep", "GET / HTTP/2.0 x\r\n\r\n"] {
            let whole = status(line);
            for cut in 1..line.len() {
                let part = status(&line[..cut]);
                assert!(
                    part.is_none() || part == whole,
                    "{line:?} cut at {cut}: {part:?} {whole:?}"
                );
            }
        }
        // Garbage is refused before the head is complete.
        assert_eq!(status("\x16\x03\x01"), Some(400));
    }

    #[test]
    fn too_many_headers_are_refused() {
        let many = format!(
            "GET / HTTP/1.1\r\n{}\r\n",
            "x: y\r\n".repeat(MAX_HEADERS + 1)
        );
        assert_eq!(status(&many), Some(431));
        let enough = format!("GET / HTTP/1.1\r\n{}\r\n", "x: y\r\n".repeat(MAX_HEADERS));
        assert_eq!(
            head(&enough).unwrap().headers.get_all("x").iter().count(),
            MAX_HEADERS
        );
    }

    #[test]
    fn content_length_is_digits_and_agrees_with_itself() {
        let len = |h: &str| {
            content_length(
                &head(&format!("POST / HTTP/1.1\r\n{h}\r\n"))
                    .unwrap()
                    .headers,
            )
        };
        assert_eq!(len("").unwrap(), 0);
        assert_eq!(len("content-length: 12\r\n").unwrap(), 12);
        assert_eq!(
            len("content-length: 3\r\ncontent-length: 3\r\n").unwrap(),
            3
        );
        for bad in ["+3", "-1", "3x", "", "99999999999999999999999"] {
            assert!(len(&format!("content-length: {bad}\r\n")).is_err(), "{bad}");
        }
        assert!(matches!(
            len("content-length: 3\r\ncontent-length: 4\r\n"),
            Err(ReadError::Reject { status: 400, .. })
        ));
    }

    #[test]
    fn connection_tokens() {
        assert!(has_token("keep-alive, Upgrade", "upgrade"));
        assert!(!has_token("closed", "close"));
    }
}
