//! The binary's hot code, moved into anonymous huge pages in the zygote.
//!
//! A fork copies the page tables of anonymous memory but not of file-backed mappings: every
//! child faulted the engine binary's code in again, page by page (about 6% of the CPU of a
//! trivial script). The zygote copies each 2 MiB stretch of its code that it has used into an
//! anonymous huge page and puts it in place of the file mapping (`mremap`, same address, same
//! bytes, never writable where it executes): a fork then copies one entry per stretch and a
//! child faults nothing in. It costs the zygote the memory of those stretches (shared by every
//! child). The zygote moves them once it is idle after its first forks, so a first script
//! does not wait for the copy. `PADDOCK_PROFILING=1` keeps the file mapping, so that
//! profilers can name the code.

use std::io::Read;

const HUGE_PAGE: usize = 2 << 20;
const PAGE: usize = 4096;
/// A stretch is moved when at least this many of its 512 pages were used.
const HOT_PAGES: usize = 32;

/// The 2 MiB stretches of the executable's code this process has used enough to move (read
/// from `/proc`, so before the zygote leaves the host's file system).
pub fn hot_code_chunks() -> Vec<usize> {
    if std::env::var_os("PADDOCK_PROFILING").is_some_and(|v| v == "1") {
        return Vec::new();
    }
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return Vec::new();
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let Ok(mut pagemap) = std::fs::File::open("/proc/self/pagemap") else {
        return Vec::new();
    };
    let exe = exe.to_string_lossy().into_owned();
    let mut hot = Vec::new();
    for (start, end) in maps.lines().filter_map(|l| code_range(l, &exe)) {
        let mut chunk = start.next_multiple_of(HUGE_PAGE);
        while chunk + HUGE_PAGE <= end {
            if used_pages(&mut pagemap, chunk) >= HOT_PAGES {
                hot.push(chunk);
            }
            chunk += HUGE_PAGE;
        }
    }
    hot
}

/// Moves `chunks` (from [`hot_code_chunks`]) into anonymous huge pages; returns the bytes
/// moved. Children forked before keep the file mapping; those forked after get the copy.
pub fn move_code_chunks(chunks: &[usize]) -> usize {
    chunks.iter().filter(|&&c| move_chunk(c)).count() * HUGE_PAGE
}

/// `(start, end)` of a `/proc/self/maps` line for executable code of `exe`.
fn code_range(line: &str, exe: &str) -> Option<(usize, usize)> {
    let mapping = super::process::Mapping::parse(line)?;
    (mapping.perms == "r-xp" && mapping.name == exe).then_some((mapping.start, mapping.end))
}

/// How many pages of the 2 MiB stretch at `chunk` are present (bit 63 of each pagemap entry).
fn used_pages(pagemap: &mut std::fs::File, chunk: usize) -> usize {
    use std::io::{Seek, SeekFrom};
    let entries = HUGE_PAGE / PAGE;
    let mut buf = vec![0u8; entries * 8];
    let offset = (chunk / PAGE * 8) as u64;
    if pagemap.seek(SeekFrom::Start(offset)).is_err() || pagemap.read_exact(&mut buf).is_err() {
        return 0;
    }
    buf.chunks_exact(8).filter(|e| e[7] & 0x80 != 0).count()
}

/// Replaces the code at `chunk` (2 MiB, aligned) by an anonymous huge-page copy of it.
fn move_chunk(chunk: usize) -> bool {
    // SAFETY: the zygote is single-threaded here. The staging area is fresh anonymous memory
    // of this process, written only while it is not executable; `chunk` is a whole 2 MiB of
    // this process's own code mapping, read (never written) to copy it. `mremap` with
    // MREMAP_FIXED replaces the mapping at `chunk` atomically by pages holding the same bytes,
    // so code running in it (this function's caller included) continues unchanged. Every
    // failure leaves the original mapping in place and releases the staging area.
    unsafe {
        let raw = libc::mmap(
            std::ptr::null_mut(),
            2 * HUGE_PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if raw == libc::MAP_FAILED {
            return false;
        }
        let raw_start = raw as usize;
        let staging = raw_start.next_multiple_of(HUGE_PAGE);
        if staging > raw_start {
            libc::munmap(raw, staging - raw_start);
        }
        let tail = staging + HUGE_PAGE;
        let raw_end = raw_start + 2 * HUGE_PAGE;
        if raw_end > tail {
            libc::munmap(tail as *mut libc::c_void, raw_end - tail);
        }
        let staging_ptr = staging as *mut libc::c_void;
        libc::madvise(staging_ptr, HUGE_PAGE, libc::MADV_HUGEPAGE);
        std::ptr::copy_nonoverlapping(chunk as *const u8, staging as *mut u8, HUGE_PAGE);
        if libc::mprotect(staging_ptr, HUGE_PAGE, libc::PROT_READ | libc::PROT_EXEC) != 0 {
            libc::munmap(staging_ptr, HUGE_PAGE);
            return false;
        }
        // MADV_COLLAPSE (Linux 6.1): make sure it is one huge page before it moves.
        libc::madvise(staging_ptr, HUGE_PAGE, 25);
        let moved = libc::mremap(
            staging_ptr,
            HUGE_PAGE,
            HUGE_PAGE,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            chunk as *mut libc::c_void,
        );
        if moved == libc::MAP_FAILED {
            libc::munmap(staging_ptr, HUGE_PAGE);
            return false;
        }
        true
    }
}
