//! A counting global allocator for the allocation tests of this crate, and
//! for `node-runner/tests/tls_session_memory.rs` (what a quiet TLS session
//! holds).
//!
//! Included by each `*_alloc.rs` test binary with
//! `#[path = "support/counting_alloc.rs"] mod counting_alloc;`; including it
//! installs the allocator for that binary. Counts are kept per thread, so the
//! test harness's other threads cannot disturb a reading: allocations made
//! ([`measure`]) and what is held, allocated and not yet freed ([`live`]).

#![allow(dead_code)] // each test binary uses a different subset

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct CountingAlloc;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    static ALLOCATED_BYTES: Cell<usize> = const { Cell::new(0) };
    static LIVE_BYTES: Cell<isize> = const { Cell::new(0) };
    static LIVE_BLOCKS: Cell<isize> = const { Cell::new(0) };
}

fn count(bytes: usize) {
    // `try_with` avoids touching a thread-local that is being torn down.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
    let _ = ALLOCATED_BYTES.try_with(|n| n.set(n.get() + bytes));
}

/// What this thread holds changed by `bytes` in `blocks` allocations.
fn hold(bytes: isize, blocks: isize) {
    let _ = LIVE_BYTES.try_with(|n| n.set(n.get() + bytes));
    let _ = LIVE_BLOCKS.try_with(|n| n.set(n.get() + blocks));
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System` upholds the `GlobalAlloc` contract; the only extra
// work is updating const-initialised thread-local counters, which does not
// allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        hold(layout.size() as isize, 1);
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        hold(-(layout.size() as isize), -1);
        // SAFETY: `ptr` was allocated by `System` through `alloc`/`realloc` above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        hold(layout.size() as isize, 1);
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        hold(new_size as isize - layout.size() as isize, 0);
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

/// Bytes and allocations this thread holds: allocated and not yet freed.
pub(crate) fn live() -> (isize, isize) {
    (LIVE_BYTES.with(Cell::get), LIVE_BLOCKS.with(Cell::get))
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
