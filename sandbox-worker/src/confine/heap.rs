//! The counting global allocator: the script's heap budget.
//!
//! Every allocation of the process goes through [`CountingAllocator`], which keeps the number
//! of live bytes. In a sandbox child the watchdog compares it with the script's budget and
//! raises `MemoryError` inside the script (see `child.rs`); above the hard ceiling allocations
//! fail outright (large ones become `MemoryError`, small ones abort the child, which the engine
//! reports as `codemode:memory_limit`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
/// 0 means no ceiling (the engine and the zygote).
static HARD_CEILING: AtomicUsize = AtomicUsize::new(0);

/// Wraps the system allocator and counts live bytes.
pub struct CountingAllocator;

impl CountingAllocator {
    #[inline]
    fn admit(size: usize) -> bool {
        let ceiling = HARD_CEILING.load(Ordering::Relaxed);
        ceiling == 0 || LIVE_BYTES.load(Ordering::Relaxed).saturating_add(size) <= ceiling
    }

    /// A fresh allocation of `size` bytes: refused (null) above the ceiling, else made by
    /// `allocate` and counted if it succeeded.
    #[inline]
    fn counted(size: usize, allocate: impl FnOnce() -> *mut u8) -> *mut u8 {
        if !Self::admit(size) {
            return std::ptr::null_mut();
        }
        let ptr = allocate();
        if !ptr.is_null() {
            LIVE_BYTES.fetch_add(size, Ordering::Relaxed);
        }
        ptr
    }
}

// SAFETY: every method forwards to `System` with the caller's layout unchanged, so the
// `GlobalAlloc` contract (alignment, size, pointer provenance) is exactly System's. The only
// addition is bookkeeping on an atomic counter and refusing (returning null, which the contract
// allows) when the ceiling would be crossed.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout, which the caller guarantees is valid.
        Self::counted(layout.size(), || unsafe { System.alloc(layout) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        Self::counted(layout.size(), || unsafe { System.alloc_zeroed(layout) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller guarantees `ptr` came from this allocator with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() && !Self::admit(new_size - layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller guarantees `ptr`/`layout` describe a live allocation of ours and
        // `new_size` is valid for `layout.align()`.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            if new_size >= layout.size() {
                LIVE_BYTES.fetch_add(new_size - layout.size(), Ordering::Relaxed);
            } else {
                LIVE_BYTES.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        new
    }
}

/// Bytes currently allocated by this process.
pub fn live_bytes() -> usize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// Whether this process allocates through [`CountingAllocator`] (the binary declares it with
/// `#[global_allocator]`). Without it live bytes stay 0 and no script's memory limit would
/// hold, so the zygote refuses to start. A concurrent free elsewhere can hide one probe's
/// growth: three tries.
pub fn counting_allocator_installed() -> bool {
    (0..3).any(|_| {
        let before = live_bytes();
        let probe = std::hint::black_box(vec![1u8; 1 << 16]);
        let grew = live_bytes() > before;
        drop(probe);
        grew
    })
}

/// Sets the hard ceiling on live bytes (0: none).
pub fn set_hard_ceiling(bytes: usize) {
    HARD_CEILING.store(bytes, Ordering::Relaxed);
}
