//! Giving back memory an idle daemon no longer needs: the pages of code that only ran during
//! start-up, and heap freed after a burst of work.
//!
//! Most of an idle daemon's resident memory is not memory it allocated: it is the pages of its
//! own executable (and of libc) that were touched while it started — argument parsing, layer
//! YAML, building the router — and that the kernel maps in 64 KiB neighbourhoods. They are
//! clean copies of the files on disk. [`release_file_pages`] drops this process's mappings of
//! such read-only file pages; whatever code runs later simply faults its pages back in from
//! the page cache (a minor fault). Nothing is evicted from the page cache, and writable or
//! anonymous memory is never touched.

use std::io;

/// One read-only, file-backed mapping from `/proc/self/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
}

/// Parses the read-only, private, file-backed mappings without any private copy of a page
/// out of `/proc/<pid>/smaps` text. A read-only mapping can still hold pages written before
/// it was made read-only (the loader's relocations, RELRO): `Anonymous` is then non-zero and
/// the mapping is left alone, because dropping those pages would bring back the file's
/// unrelocated contents.
fn read_only_file_mappings(smaps: &str) -> Vec<Mapping> {
    let mut found = Vec::new();
    let mut current: Option<Mapping> = None;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if let Some((start, end)) = first.split_once('-')
            && let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            )
        {
            // A mapping header: "start-end perms offset dev inode path".
            let perms = fields.next().unwrap_or("");
            let _offset = fields.next();
            let _dev = fields.next();
            let inode: u64 = fields.next().and_then(|i| i.parse().ok()).unwrap_or(0);
            let path = fields.next().unwrap_or("");
            let eligible =
                inode != 0 && path.starts_with('/') && !perms.contains('w') && perms.ends_with('p');
            current = eligible.then_some(Mapping { start, end });
        } else if first == "Anonymous:" {
            let anonymous_kib: u64 = fields.next().and_then(|v| v.parse().ok()).unwrap_or(1);
            if let Some(mapping) = current.take()
                && anonymous_kib == 0
            {
                found.push(mapping);
            }
        }
    }
    found
}

/// Drops this process's resident pages of read-only file mappings (executable code and
/// read-only data of the binary and its libraries). Returns how many bytes of mappings were
/// advised. Safe to call at any time; the pages come back on demand.
pub fn release_file_pages() -> io::Result<usize> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut advised = 0;
    for mapping in read_only_file_mappings(&smaps) {
        let len = mapping.end - mapping.start;
        // SAFETY: the range is a whole mapping of this process, listed by the kernel as
        // private, not writable, file-backed and holding no anonymous (copied-on-write) page:
        // every resident page is an unmodified copy of the file, so MADV_DONTNEED only unmaps
        // them and the next access maps the same contents again from the page cache.
        let rc =
            unsafe { libc::madvise(mapping.start as *mut libc::c_void, len, libc::MADV_DONTNEED) };
        if rc == 0 {
            advised += len;
        }
    }
    Ok(advised)
}

/// Returns freed heap memory to the kernel. After a burst of work (a replan of a thousand
/// services, say) glibc keeps the freed memory of every thread's arena for reuse, and an idle
/// daemon would carry that peak forever; trimming gives back whatever is free.
pub fn trim_heap() {
    // SAFETY: malloc_trim only releases free memory held by the allocator; it takes the
    // allocator's own locks and touches no memory in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_clean_read_only_private_file_mappings() {
        let smaps = "\
55d0c6a00000-55d0c6b00000 r--p 00000000 fd:01 123 /usr/bin/cobble
Rss:                 400 kB
Anonymous:             0 kB
55d0c6b00000-55d0c6c00000 r-xp 00100000 fd:01 123 /usr/bin/cobble
Anonymous:             0 kB
55d0c6c00000-55d0c6c08000 r--p 00200000 fd:01 123 /usr/bin/cobble
Anonymous:            32 kB
55d0c6c08000-55d0c6c10000 rw-p 00208000 fd:01 123 /usr/bin/cobble
Anonymous:             8 kB
55d0c7000000-55d0c7100000 rw-p 00000000 00:00 0 [heap]
Anonymous:          1024 kB
7f0000000000-7f0000001000 r--s 00000000 fd:01 77 /dev/shm/shared
Anonymous:             0 kB
7f0000100000-7f0000200000 r-xp 00000000 00:00 0 [vdso]
Anonymous:             0 kB
";
        assert_eq!(
            read_only_file_mappings(smaps),
            [
                Mapping {
                    start: 0x55d0c6a00000,
                    end: 0x55d0c6b00000
                },
                Mapping {
                    start: 0x55d0c6b00000,
                    end: 0x55d0c6c00000
                },
            ]
        );
    }

    #[test]
    fn trimming_the_heap_keeps_allocations_intact() {
        let kept: Vec<Vec<u8>> = (0..100).map(|i| vec![i as u8; 1000]).collect();
        let freed: Vec<Vec<u8>> = (0..1000).map(|_| vec![0u8; 64 * 1024]).collect();
        drop(freed);
        trim_heap();
        assert!(
            kept.iter()
                .enumerate()
                .all(|(i, v)| v.iter().all(|b| *b == i as u8))
        );
    }

    #[test]
    fn releasing_pages_keeps_the_process_working() {
        fn rss_file_kib() -> u64 {
            std::fs::read_to_string("/proc/self/status")
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("RssFile:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap()
        }
        let before = rss_file_kib();
        assert!(release_file_pages().unwrap() > 0);
        // Code and read-only data still work: format, allocate, read a file.
        let text = format!("{:?}", std::fs::read_to_string("/proc/self/comm").unwrap());
        assert!(!text.is_empty());
        assert!(rss_file_kib() <= before);
    }
}
