//! Keeping the heap an allocator holds close to what the daemon really uses.
//!
//! After a burst of work (a replan of a thousand services, a large state write) the allocator
//! keeps the freed memory of every thread's arena for reuse, and an idle daemon would carry
//! that peak forever. [`trim_heap`] hands whatever is free back to the kernel, so the
//! anonymous memory the system sees follows what the daemon really holds. [`tune_allocator`]
//! keeps the allocator from holding so much in the first place.

/// Sets glibc's allocator up for a long-lived daemon with a few busy threads, before any
/// thread starts; does nothing when the environment already tunes it (`MALLOC_*` variables
/// or `GLIBC_TUNABLES`), so that an operator's own choice wins.
///
/// By default glibc gives each thread that meets contention an arena of its own (up to eight
/// per core) and, once a freed block above its mmap threshold comes back, raises that
/// threshold to the block's size, so later buffers of that size (a listing of a thousand
/// changes, a state checkpoint) are carved from the arenas and stay there once freed. Under
/// a soak of mixed traffic (docs/architecture.md, "The allocator") the daemon held about 4.5 MiB of live
/// heap in 15 arenas totalling 13.3 MiB: two thirds of its anonymous memory was free heap.
/// Two arenas are enough for a daemon whose runtime has two workers, and a fixed threshold
/// sends every large buffer to its own mapping, returned to the kernel when freed.
///
/// The threshold sits above the exec relay's buffers (a 128 KiB read, copied into the
/// websocket's frame buffer of the same size). Mapped blocks all start 16 bytes into a page,
/// so with both mapped the copy's destination sat 10 bytes (the frame header) past its
/// source modulo 4096: loads then alias the stores just made, and `memcpy` ran at 3.3 GB/s
/// instead of 57 on this machine's CPU. At a 64 KiB threshold that copy made the relay
/// cost 40-65 % more daemon CPU (docs/architecture.md, "The allocator").
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune_allocator() {
    let tuned = std::env::vars_os().any(|(name, _)| {
        let name = name.to_string_lossy();
        name.starts_with("MALLOC_") || name == "GLIBC_TUNABLES"
    });
    if tuned {
        return;
    }
    for (param, value) in [
        (libc::M_ARENA_MAX, ARENA_MAX),
        (libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD),
    ] {
        // SAFETY: mallopt only changes the allocator's parameters, under its own lock; a
        // value it refuses leaves the parameter as it was.
        unsafe {
            libc::mallopt(param, value);
        }
    }
}

/// Only glibc's allocator is tuned; with other C libraries this does nothing.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune_allocator() {}

/// Arenas the allocator may create: one per runtime worker.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENA_MAX: libc::c_int = 2;
/// Blocks of this size or more get their own mapping. Setting it also pins the trim
/// threshold at its default (128 KiB), which glibc would otherwise raise alongside.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 256 * 1024;

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

    /// Touches every page of `block` so it counts as resident.
    fn touch(block: &mut [u8]) {
        block.iter_mut().step_by(4096).for_each(|b| *b = 1);
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn after_tuning_a_large_block_goes_back_to_the_kernel_when_freed() {
        if std::env::vars_os().any(|(n, _)| n.to_string_lossy().starts_with("MALLOC_")) {
            return;
        }
        tune_allocator();
        // Untuned, freeing a large mapped block raises glibc's mmap threshold to its size, so
        // the next block of a similar size comes from the heap and stays there once freed.
        let mut first = vec![0u8; 4 << 20];
        touch(&mut first);
        drop(first);
        let before = rss_anon_kib();
        let mut block = vec![0u8; 2 << 20];
        touch(&mut block);
        // Keeps the heap's top in use, so no trim of the top hides the difference.
        let pin = Box::new([1u8; 64]);
        let held = rss_anon_kib();
        drop(block);
        let after = rss_anon_kib();
        assert!(
            held >= before + 1024 && after + 1024 <= held,
            "RssAnon {before} KiB before, {held} KiB with the block, {after} KiB after freeing it"
        );
        assert_eq!(pin[0], 1);
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
