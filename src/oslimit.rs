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
}
