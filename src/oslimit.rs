//! The operating system's limits that a tool holding thousands of
//! connections sizes itself by. A client or server that finds them only by
//! running into them fails in the worst way: a request reported as a
//! transport error that was never sent, or (for a thread per connection)
//! the whole process aborted by the Rust runtime when a new thread cannot
//! map its signal stack.

/// Raises this process's soft limit on open files to its hard limit (as Go's
/// runtime does at start) and returns the soft limit now in effect; `None`
/// where it cannot be read (not Linux). A failed raise leaves the old one.
pub fn raise_open_files() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
        if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
            return Some(hard);
        }
        Some(soft)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// This process's soft limit on open files; `None` where it cannot be read.
pub fn open_files() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::resource::{getrlimit, Resource};
        getrlimit(Resource::RLIMIT_NOFILE)
            .ok()
            .map(|(soft, _)| soft)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// The most descriptors [`reserve_descriptors`] makes room for.
pub const MAX_RESERVED: u64 = 1 << 16;

/// Grows this process's file-descriptor table to hold `n` descriptors now,
/// before they are needed, where the soft limit allows (capped there).
///
/// Linux grows the table when a new descriptor does not fit (past 64,
/// then 256, 512, 1,024, ...), and in a process with more than one thread
/// each growth waits for an RCU grace period (`synchronize_rcu` in
/// `expand_fdtable`): the thread that opens that socket stops for
/// milliseconds. A client opening its 1,024th connection stalled its
/// event loop about 11 ms, with every request due meanwhile behind it. The
/// table never shrinks, so one duplicate at `n - 1`, closed at once,
/// pays for all of it up front. At most [`MAX_RESERVED`] (a table that
/// size is 512 KB of pointers); past it the table grows as it would have.
/// Does nothing elsewhere.
pub fn reserve_descriptors(n: u64) {
    #[cfg(target_os = "linux")]
    {
        use nix::fcntl::{fcntl, FcntlArg};
        use std::os::fd::{FromRawFd, OwnedFd};
        let n = n.min(MAX_RESERVED).min(open_files().unwrap_or(0));
        let Ok(top) = i32::try_from(n.saturating_sub(1)) else {
            return;
        };
        if top < 64 {
            return;
        }
        let Ok(null) = std::fs::File::open("/dev/null") else {
            return;
        };
        if let Ok(fd) = fcntl(&null, FcntlArg::F_DUPFD_CLOEXEC(top)) {
            // SAFETY: `fcntl` just returned this new descriptor, owned by
            // nothing else; dropping the `OwnedFd` closes it.
            drop(unsafe { OwnedFd::from_raw_fd(fd) });
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = n;
    }
}

/// `vm.max_map_count`: how many memory mappings one process may hold. Each
/// thread takes four (its stack, its guard page, and the signal stack the
/// Rust runtime maps with its own guard), so it caps the threads.
pub fn max_map_count() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// How many local ports the kernel hands out to outgoing connections
/// (`net.ipv4.ip_local_port_range`, both ends included): the most
/// connections one client holds to one server address, those in
/// TIME_WAIT included. `None` where it cannot be read (not Linux).
pub fn ephemeral_ports() -> Option<u64> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    port_range_size(&range)
}

/// The size of a port range written as `LOW HIGH` (tabs or spaces).
fn port_range_size(range: &str) -> Option<u64> {
    let mut ends = range.split_whitespace().map(str::parse::<u64>);
    let (low, high) = (ends.next()?.ok()?, ends.next()?.ok()?);
    (high >= low).then(|| high - low + 1)
}

/// Whether `e` says this process (or the system) is out of file
/// descriptors: a limit of the client, not the server's answer.
pub fn is_out_of_files(e: &std::io::Error) -> bool {
    // EMFILE (this process) and ENFILE (the system), the same numbers on
    // every Unix.
    matches!(e.raw_os_error(), Some(23 | 24))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_files_is_emfile_or_enfile_only() {
        assert!(is_out_of_files(&std::io::Error::from_raw_os_error(24)));
        assert!(is_out_of_files(&std::io::Error::from_raw_os_error(23)));
        assert!(!is_out_of_files(&std::io::Error::from_raw_os_error(111)));
        assert!(!is_out_of_files(&std::io::Error::other("x")));
    }

    #[test]
    fn a_port_range_is_counted_with_both_ends() {
        // Linux's default, as /proc writes it (a tab between).
        assert_eq!(port_range_size("32768\t60999\n"), Some(28_232));
        assert_eq!(port_range_size("1024 1024"), Some(1));
        assert_eq!(port_range_size("60999 32768"), None);
        assert_eq!(port_range_size("32768"), None);
        assert_eq!(port_range_size("a b"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_raised_limit_is_the_hard_one() {
        use nix::sys::resource::{getrlimit, Resource};
        let raised = raise_open_files().expect("Linux reads its limits");
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(raised, soft);
        assert_eq!(open_files(), Some(soft));
        assert_eq!(soft, hard);
        assert!(max_map_count().is_some_and(|n| n > 0));
    }

    /// The table's size is the kernel's `FDSize` in /proc/self/status.
    #[cfg(target_os = "linux")]
    fn fd_table_size() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("FDSize:")).unwrap();
        line["FDSize:".len()..].trim().parse().unwrap()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_descriptor_table_is_grown_up_front_and_the_descriptor_closed() {
        let limit = raise_open_files().unwrap();
        let want = 5_000.min(limit);
        let before = fd_table_size();
        reserve_descriptors(want);
        let after = fd_table_size();
        assert!(
            after >= want.min(MAX_RESERVED),
            "FDSize {before} -> {after}, wanted {want}"
        );
        // The placeholder is gone: the lowest free descriptor is low again.
        let f = std::fs::File::open("/dev/null").unwrap();
        use std::os::fd::AsRawFd;
        assert!((f.as_raw_fd() as u64) < want - 1);
        // Past the cap, only the cap.
        reserve_descriptors(u64::MAX);
        assert!(fd_table_size() >= MAX_RESERVED.min(limit));
    }
}
