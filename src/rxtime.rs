//! When a read's bytes reached this machine. On Linux the kernel stamps
//! every segment as it arrives, and a socket with `SO_TIMESTAMPNS` set
//! hands the stamp of the last segment a `recvmsg` returned to the reader.
//! A stream's event times then do not depend on when the client got round
//! to reading the socket: a busy event loop, a core taken by another
//! process, or the evented client's read coalescing (it reads a thousand
//! streams every few hundred µs rather than on every token) delay the
//! read, not the time recorded for it. Elsewhere, and whenever the kernel
//! gives no stamp, a read is timed as it returns, as before.
//!
//! One stamp per read: when a read returns two segments (two tokens of a
//! stream that both arrived since the last read), both carry the later
//! one's time, as both carried the read's time before. Reads that follow
//! every event make that rare; a loop that polls every `P` µs makes it
//! happen to tokens of one stream less than `P` apart, and moves the
//! earlier one by less than `P`.
//!
//! The stamp is on the wall clock (`CLOCK_REALTIME`); the run's times are
//! on a monotonic clock. Only the stamp's age is carried across (wall
//! now minus stamp, both read within a microsecond of each other), so a
//! wall clock stepped by NTP during a run moves nothing but the one read
//! that straddles the step, and that one is clamped to the read's own time.

use std::io;
use std::time::Duration;
#[cfg(target_os = "linux")]
use std::time::SystemTime;

/// A socket, listening or connected (on Linux: anything with a file
/// descriptor; elsewhere anything, as nothing is stamped).
#[cfg(target_os = "linux")]
pub trait Stampable: std::os::fd::AsFd {}
#[cfg(target_os = "linux")]
impl<T: std::os::fd::AsFd> Stampable for T {}
/// A socket, listening or connected (here: anything; nothing is stamped).
#[cfg(not(target_os = "linux"))]
pub trait Stampable {}
#[cfg(not(target_os = "linux"))]
impl<T> Stampable for T {}

/// A socket reader that keeps the buffer the kernel's stamps arrive in.
pub struct RxReader {
    #[cfg(target_os = "linux")]
    cmsg: Vec<u8>,
}

impl Default for RxReader {
    fn default() -> Self {
        RxReader {
            #[cfg(target_os = "linux")]
            cmsg: nix::cmsg_space!(nix::sys::time::TimeSpec),
        }
    }
}

/// Asks the kernel to stamp what `sock` receives (a listening socket's
/// accepted sockets inherit it). A socket that refuses is read unstamped.
pub fn enable<S: Stampable>(sock: &S) {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::socket::{setsockopt, sockopt::ReceiveTimestampns};
        let _ = setsockopt(sock, ReceiveTimestampns, &true);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = sock;
}

impl RxReader {
    /// Reads into `buf`: the bytes read, and how long ago the last of them
    /// arrived (None: no stamp; the read's own time is all there is).
    /// `Ok((0, _))` is the peer's EOF.
    #[cfg(target_os = "linux")]
    pub fn read<S: Stampable + io::Read>(
        &mut self,
        sock: &mut S,
        buf: &mut [u8],
    ) -> io::Result<(usize, Option<Duration>)> {
        use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
        use std::io::IoSliceMut;
        use std::os::fd::{AsFd, AsRawFd};

        let mut iov = [IoSliceMut::new(buf)];
        let msg = recvmsg::<()>(
            sock.as_fd().as_raw_fd(),
            &mut iov,
            Some(&mut self.cmsg),
            MsgFlags::empty(),
        )
        .map_err(io::Error::from)?;
        let stamp = msg.cmsgs().ok().and_then(|mut c| {
            c.find_map(|m| match m {
                ControlMessageOwned::ScmTimestampns(ts) => Some(ts),
                _ => None,
            })
        });
        let age = stamp.map(|ts| {
            let stamp_ns = (ts.tv_sec() as i128) * 1_000_000_000 + ts.tv_nsec() as i128;
            let now_ns = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as i128);
            age_of(now_ns - stamp_ns)
        });
        Ok((msg.bytes, age))
    }

    /// Reads into `buf`, unstamped.
    #[cfg(not(target_os = "linux"))]
    pub fn read<S: Stampable + io::Read>(
        &mut self,
        sock: &mut S,
        buf: &mut [u8],
    ) -> io::Result<(usize, Option<Duration>)> {
        Ok((sock.read(buf)?, None))
    }
}

/// A stamp's age from wall now minus stamp: a negative one (the wall
/// clock stepped back since the stamp) counts as none.
fn age_of(age_ns: i128) -> Duration {
    Duration::from_nanos(u64::try_from(age_ns.max(0)).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpStream;
    use std::time::Instant;

    #[test]
    fn ages_are_never_negative() {
        assert_eq!(age_of(250_000), Duration::from_micros(250));
        // The wall clock stepped back: no age, the read's own time.
        assert_eq!(age_of(-5_000), Duration::ZERO);
    }

    /// Bytes that wait in the socket keep the time they arrived, not the
    /// time they are read (Linux: the kernel's stamp).
    #[test]
    fn a_late_read_keeps_the_arrival_time() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let start = Instant::now();
        let us = |t: Instant| t.duration_since(start).as_micros() as u64;
        // Where `read` puts its bytes on the test's clock.
        let read = |r: &mut RxReader, s: &mut TcpStream, b: &mut [u8]| {
            let (n, age) = r.read(s, b).unwrap();
            let now = Instant::now();
            (n, us(now - age.unwrap_or_default()), us(now))
        };
        let client = std::net::TcpStream::connect(addr).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let mut sock = client;
        enable(&sock);
        let mut reader = RxReader::default();
        let mut buf = [0u8; 64];
        // The kernel turns its stamping on lazily (a static key flipped
        // by a deferred work item): until then reads come back unstamped,
        // timed as they return. Wait for the first stamped byte.
        if cfg!(target_os = "linux") {
            let stamped = (0..100).any(|_| {
                server.write_all(b"w").unwrap();
                std::thread::sleep(Duration::from_millis(20));
                let (n, at, now) = read(&mut reader, &mut sock, &mut buf);
                assert_eq!(n, 1);
                now - at >= 15_000
            });
            assert!(stamped, "no read came back with the kernel's stamp in 2 s");
        }
        let before = us(Instant::now());
        server.write_all(b"token").unwrap();
        let after = us(Instant::now());
        std::thread::sleep(Duration::from_millis(50));
        // The bytes are there (they were written 50 ms ago).
        let (n, at, read_at) = read(&mut reader, &mut sock, &mut buf);
        assert_eq!(&buf[..n], b"token");
        assert!(at <= read_at);
        if cfg!(target_os = "linux") {
            // Stamped on arrival, during the write (1 ms of slack for the
            // wall-to-run clock conversion), at least 50 ms before the read.
            assert!(
                at + 1_000 >= before && at <= after + 1_000 && read_at - at >= 49_000,
                "arrival {at} µs, written {before}-{after} µs, read {read_at} µs"
            );
        }
    }
}
