//! A counting global allocator for the allocation tests of this crate.
//!
//! Included by each `*_alloc.rs` test binary with
//! `#[path = "support/counting_alloc.rs"] mod counting_alloc;`; including it
//! installs the allocator for that binary. Counts are kept per thread, so the
//! test harness's other threads cannot disturb a reading.

#![allow(dead_code)] // each test binary uses a different subset

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct CountingAlloc;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    static ALLOCATED_BYTES: Cell<usize> = const { Cell::new(0) };
}

fn count(bytes: usize) {
    // `try_with` avoids touching a thread-local that is being torn down.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
    let _ = ALLOCATED_BYTES.try_with(|n| n.set(n.get() + bytes));
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System` upholds the `GlobalAlloc` contract; the only extra
// work is bumping const-initialised thread-local counters, which does not
// allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` through `alloc`/`realloc` above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: `ptr` came from `System` with `layout`; forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Allocations made on this thread so far.
pub(crate) fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

/// Bytes requested from the allocator on this thread so far.
pub(crate) fn allocated_bytes() -> usize {
    ALLOCATED_BYTES.with(Cell::get)
}

/// `f`'s result, and the allocations and bytes it made on this thread.
pub(crate) fn measure<T>(f: impl FnOnce() -> T) -> (T, usize, usize) {
    let (n0, b0) = (allocations(), allocated_bytes());
    let out = f();
    (out, allocations() - n0, allocated_bytes() - b0)
}

/// Allocations made on this thread while running `f`.
pub(crate) fn allocations_in(f: impl FnOnce()) -> usize {
    measure(f).1
}
