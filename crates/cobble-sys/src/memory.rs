//! Giving back heap an idle daemon no longer needs.
//!
//! After a burst of work (a replan of a thousand services, a large state write) the allocator
//! keeps the freed memory of every thread's arena for reuse, and an idle daemon would carry
//! that peak forever. [`trim_heap`] hands whatever is free back to the kernel, so the
//! anonymous memory the system sees follows what the daemon really holds.

/// Returns freed heap memory to the kernel. After a burst of work (a replan of a thousand
/// services, say) glibc keeps the freed memory of every thread's arena for reuse, and an idle
/// daemon would carry that peak forever; trimming gives back whatever is free.
///
/// Only glibc has `malloc_trim`; with other C libraries this does nothing.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim_heap() {
    // SAFETY: malloc_trim only releases free memory held by the allocator; it takes the
    // allocator's own locks and touches no memory in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Only glibc has `malloc_trim`; with other C libraries this does nothing.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim_heap() {}

#[cfg(test)]
mod tests {
    use super::*;

    /// `RssAnon` of this process, in KiB. nextest runs every test in its own process, so
    /// nothing else allocates here meanwhile.
    fn rss_anon_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn trimming_gives_freed_heap_back_and_keeps_live_allocations() {
        // 64 MiB in blocks below the mmap threshold, so they live in the heap, each followed
        // by a small block that stays: the freed memory is a set of holes the allocator does
        // not return by itself.
        let mut freed = Vec::new();
        let mut kept = Vec::new();
        for i in 0..1024 {
            let mut block = vec![0u8; 64 * 1024];
            block.iter_mut().step_by(4096).for_each(|b| *b = 1);
            freed.push(block);
            kept.push(vec![i as u8; 64]);
        }
        drop(freed);
        let before = rss_anon_kib();
        trim_heap();
        let after = rss_anon_kib();
        assert!(
            before.saturating_sub(after) >= 32 * 1024,
            "RssAnon {before} KiB before the trim, {after} KiB after"
        );
        assert!(
            kept.iter()
                .enumerate()
                .all(|(i, v)| v.iter().all(|b| *b == i as u8))
        );
    }
}
