//! One connection of an event loop: its socket (plaintext, or a TLS
//! [`Session`] fed the ciphertext the loop read) and the request it
//! carries. [`progress`] moves a request as far as the socket allows:
//! connect, write what the [`Exchange`] has not written, read with every
//! read's arrival time, hand the plaintext to the exchange. What the bytes
//! mean is the exchange's business; whether a closed keep-alive
//! connection is a reason to send the request again is this room's.

use std::io::{self, Read, Write};
use std::sync::Arc;

use mio::net::TcpStream;
use serde_json::Value;

use super::exchange::{End, Exchange, Reading};
use super::Shared;
use crate::replay::http::answer;
use crate::replay::http::inflight::Entry;
use crate::replay::http::stream::BodyEnd;
use crate::replay::http::tls::{self, Received, Session};
use crate::replay::outcome::{ErrorKind, Failure};
use crate::rxtime::{self, RxReader};

/// A request the loop sent: the exchange and what the run keeps around it.
pub(super) struct Task {
    pub entry: Arc<Entry>,
    /// `--turns delta`: the conversation, answered when the request ends.
    pub history: Option<Vec<Value>>,
    pub deadline_us: u64,
    pub ex: Exchange,
}

/// What reading from a connection led to.
pub(super) enum Step {
    More,
    End(End),
    /// A reused connection was found closed before the answer: send again.
    Retry,
}

/// Aligned to cache lines: a connection is three of them, all fetched
/// ahead of its event (`Loop::prefetch_ahead`).
#[repr(align(64))]
pub(super) struct Conn {
    pub sock: TcpStream,
    pub connected: bool,
    /// Which of the server's addresses this socket tries.
    pub addr: usize,
    /// It carried a request before (a closed one may be retried once).
    pub reused: bool,
    /// Names the current exchange, so a timer for an earlier one is ignored.
    pub serial: u64,
    /// The server's end was seen closing: read to the EOF (no edge will
    /// announce it again).
    pub closing: bool,
    /// An https:// connection's TLS: what is read goes through it (boxed:
    /// a session is 1 KB, and inline it spread a plain connection's hot
    /// fields over more cache lines).
    pub tls: Option<Box<Session>>,
    pub task: Option<Task>,
}

impl Conn {
    /// Still connecting (a TLS handshake counts), or holding request bytes
    /// not yet written.
    pub fn unsent(&self) -> bool {
        !self.connected
            || self.tls.as_deref().is_some_and(Session::busy)
            || self
                .task
                .as_ref()
                .is_some_and(|t| !t.ex.unwritten().is_empty())
    }
}

/// An idle connection was woken: true when the server closed it (or sent
/// bytes nobody asked for, which makes it unusable too). A TLS server may
/// send session tickets or a key update to an idle connection: those are
/// taken in and keep it usable.
pub(super) fn idle_closed(conn: &mut Conn, buf: &mut [u8]) -> bool {
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

/// Moves the request on `conn` as far as the socket allows.
pub(super) fn progress(
    conn: &mut Conn,
    buf: &mut [u8],
    reader: &mut RxReader,
    shared: &Shared,
) -> Step {
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
        task,
        closing,
        ..
    } = conn;
    let Some(Task {
        entry, history, ex, ..
    }) = task.as_mut()
    else {
        return Step::More;
    };
    if let Err(e) = send(sock, tls.as_deref_mut(), ex) {
        return before_answer(ex, reused, e);
    }
    let how = Reading {
        live: &entry.live,
        keep_text: history.is_some(),
        max_event_bytes: shared.cfg.max_event_bytes,
    };
    let deliver = |ex: &mut Exchange, p: &[u8], at: u64| ex.receive(p, at, &how).map(Step::End);
    loop {
        match reader.read(sock, buf) {
            Ok((0, _)) => {
                let Some(s) = tls.as_deref_mut() else {
                    return at_eof(ex, reused);
                };
                // Plaintext still held (none, in practice) keeps the time
                // of the read that brought it.
                let at = ex.last_at();
                let got = s.eof(&mut |p| deliver(ex, p, at));
                return after_tls(ex, reused, s, sock, got).unwrap_or_else(|| at_eof(ex, reused));
            }
            Ok((n, age)) => {
                let now = shared.clock.now_us();
                let at = age.map_or(now, |a| now.saturating_sub(a.as_micros() as u64));
                let step = match tls.as_deref_mut() {
                    None => deliver(ex, &buf[..n], at),
                    // The plaintext of every record this read completed
                    // carries this read's arrival time.
                    Some(s) => {
                        let got = s.receive(&buf[..n], &mut |p| deliver(ex, p, at));
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
    if let Some(s) = tls {
        let n = s.send(ex.unwritten(), sock)?;
        ex.wrote(n);
        return Ok(());
    }
    while !ex.unwritten().is_empty() {
        match sock.write(ex.unwritten()) {
            Ok(0) => break,
            Ok(n) => ex.wrote(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
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
            Some(Step::End(if ex.in_body() {
                End::Body {
                    end: BodyEnd::Broken(msg),
                    reuse: false,
                }
            } else {
                // As the blocking client classes it (a transport failure).
                End::Failed(Failure::new(ErrorKind::Transport, msg))
            }))
        }
    }
}

/// An I/O error on the connection: before the answer, as
/// [`before_answer`] says; in the body, the body broke.
fn io_failure(ex: &Exchange, reused: bool, e: io::Error) -> Step {
    if !ex.in_body() {
        return before_answer(ex, reused, e);
    }
    Step::End(End::Body {
        end: BodyEnd::Broken(e.to_string()),
        reuse: false,
    })
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
    if stale && reused && ex.resends() == 0 && !ex.got_bytes() {
        return Step::Retry;
    }
    let kind = match e.kind() {
        // The request went out and the server went away: as ureq says it.
        Io::BrokenPipe if ex.written() > 0 => ErrorKind::Connect,
        _ => answer::io_kind(&e),
    };
    Step::End(End::Failed(Failure::new(kind, e.to_string())))
}

/// The server closed the connection.
fn at_eof(ex: &Exchange, reused: bool) -> Step {
    match ex.eof() {
        Some(end) => Step::End(end),
        None => before_answer(
            ex,
            reused,
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection before answering",
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
