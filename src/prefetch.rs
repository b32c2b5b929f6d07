//! Cache prefetch hints. A hint changes no result: it asks the CPU to start
//! bringing a cache line in, so that the load that needs it later does not
//! wait for memory. The event loop uses it to fetch the next ready
//! streams' state while the kernel reads the current one (see
//! `replay::http::evented` and docs/ARCHITECTURE.md §5).

/// Hints every cache line `value` spans (not what it points to).
#[inline]
pub fn value<T: ?Sized>(value: &T) {
    let start = (value as *const T).cast::<u8>();
    span(start, std::mem::size_of_val(value));
}

/// Hints the cache lines of `len` bytes from `start`.
#[inline]
pub fn span(start: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let first = start as usize & !(LINE - 1);
    let last = (start as usize).wrapping_add(len - 1) & !(LINE - 1);
    let mut line = first;
    while line <= last {
        one(line as *const u8);
        line += LINE;
    }
}

/// A cache line's size on the CPUs this runs on (x86-64 and most ARM).
const LINE: usize = 64;

/// Hints the cache line holding `p`.
#[inline]
pub fn one(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 never faults, whatever the address (SSE is part of
    // x86-64, so the instruction is always there).
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_change_nothing_even_for_addresses_not_mapped() {
        let v = vec![7u8; 1000];
        value(v.as_slice());
        span(v.as_ptr(), v.len());
        span(std::ptr::null(), 0);
        one(std::ptr::null());
        one(usize::MAX as *const u8);
        assert!(v.iter().all(|&b| b == 7));
    }
}
