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
//! on a monotonic [`Clock`]. Only the stamp's age is carried across (wall
//! now minus stamp, both read within a microsecond of each other), so a
//! wall clock stepped by NTP during a run moves nothing but the one read
//! that straddles the step, and that one is clamped to the read's own time.

use std::io;
#[cfg(target_os = "linux")]
use std::time::SystemTime;

use mio::net::TcpStream;

use super::client::Clock;

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

/// Asks the kernel to stamp what `sock` receives. A socket that refuses
/// is read with the read's own time.
pub fn enable(sock: &TcpStream) {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::socket::{setsockopt, sockopt::ReceiveTimestampns};
        let _ = setsockopt(sock, ReceiveTimestampns, &true);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = sock;
}

impl RxReader {
    /// Reads into `buf`: the bytes read, and when they arrived on the
    /// run's clock (never later than now). `Ok((0, _))` is the peer's EOF.
    #[cfg(target_os = "linux")]
    pub fn read(
        &mut self,
        sock: &TcpStream,
        buf: &mut [u8],
        clock: &Clock,
    ) -> io::Result<(usize, u64)> {
        use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
        use std::io::IoSliceMut;
        use std::os::fd::AsRawFd;

        let mut iov = [IoSliceMut::new(buf)];
        let msg = recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut self.cmsg),
            MsgFlags::empty(),
        )
        .map_err(io::Error::from)?;
        let wall_now = SystemTime::now();
        let now = clock.now_us();
        let stamp = msg.cmsgs().ok().and_then(|mut c| {
            c.find_map(|m| match m {
                ControlMessageOwned::ScmTimestampns(ts) => Some(ts),
                _ => None,
            })
        });
        let at = match stamp {
            Some(ts) => {
                let stamp_us = (ts.tv_sec() as i128) * 1_000_000 + (ts.tv_nsec() as i128) / 1_000;
                let now_wall_us = wall_now
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros() as i128);
                age_to_time(now, now_wall_us - stamp_us)
            }
            None => now,
        };
        Ok((msg.bytes, at))
    }

    /// Reads into `buf`, timed as the read returns.
    #[cfg(not(target_os = "linux"))]
    pub fn read(
        &mut self,
        sock: &TcpStream,
        buf: &mut [u8],
        clock: &Clock,
    ) -> io::Result<(usize, u64)> {
        use std::io::Read;
        let n = (&*sock).read(buf)?;
        Ok((n, clock.now_us()))
    }
}

/// The run-clock time of a stamp `age_us` old at run-clock time `now`:
/// a negative age (the wall clock stepped back since the stamp) counts as
/// none, and an age over the run's whole length as the run's start.
fn age_to_time(now: u64, age_us: i128) -> u64 {
    let age = u64::try_from(age_us.max(0)).unwrap_or(u64::MAX);
    now.saturating_sub(age)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::{Duration, Instant};

    #[test]
    fn ages_map_back_from_now() {
        assert_eq!(age_to_time(10_000, 250), 9_750);
        // The wall clock stepped back: the read's own time.
        assert_eq!(age_to_time(10_000, -5_000), 10_000);
        // Older than the run: its start.
        assert_eq!(age_to_time(10_000, 1 << 40), 0);
    }

    /// Bytes that wait in the socket keep the time they arrived, not the
    /// time they are read (Linux: the kernel's stamp).
    #[test]
    fn a_late_read_keeps_the_arrival_time() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let clock = Clock {
            start: Instant::now(),
        };
        let client = std::net::TcpStream::connect(addr).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let sock = TcpStream::from_std(client);
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
                let (n, at) = reader.read(&sock, &mut buf, &clock).unwrap();
                assert_eq!(n, 1);
                clock.now_us() - at >= 15_000
            });
            assert!(stamped, "no read came back with the kernel's stamp in 2 s");
        }
        let before = clock.now_us();
        server.write_all(b"token").unwrap();
        let after = clock.now_us();
        std::thread::sleep(Duration::from_millis(50));
        // Non-blocking: the bytes are there (they were written 50 ms ago).
        let (n, at) = reader.read(&sock, &mut buf, &clock).unwrap();
        let read_at = clock.now_us();
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
