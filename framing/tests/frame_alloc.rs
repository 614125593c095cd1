//! Proves the frame decoder refuses an oversize frame before allocating.
//!
//! This test binary installs a counting global allocator. Counts are kept per
//! thread so the test harness's other threads cannot disturb the reading.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::{BufMut, BytesMut};
use framing::frame::{FrameDecoder, FrameError};

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
// work is bumping a const-initialised thread-local counter, which does not
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

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

fn allocated_bytes() -> usize {
    ALLOCATED_BYTES.with(Cell::get)
}

#[test]
fn oversize_frame_is_refused_without_allocating() {
    let mut decoder = FrameDecoder::new(64 * 1024);
    let mut rx = BytesMut::with_capacity(64);
    rx.put_u32(u32::MAX); // announces a 4 GiB frame

    let before = allocations();
    let result = decoder.decode(&mut rx);
    let after = allocations();

    assert!(
        matches!(result, Err(FrameError::TooLarge { len, max: 65536 }) if len == u64::from(u32::MAX))
    );
    assert_eq!(
        after - before,
        0,
        "the decoder allocated before refusing the frame"
    );
    assert_eq!(rx.capacity(), 64);
}

#[test]
fn decoding_a_body_frame_does_not_copy_the_body() {
    // A 1 MiB body: a copy would need an allocation at least that large; the
    // decoder may allocate only small bookkeeping (refcount headers).
    let body = bytes::Bytes::from(vec![3u8; 1 << 20]);
    let frame = framing::frame::FrameEncoder::default()
        .encode_tunnel_body(9, body)
        .unwrap();
    let mut rx = BytesMut::with_capacity(frame.len());
    rx.put_slice(&frame.head);
    rx.put_slice(&frame.body);
    let mut decoder = FrameDecoder::default();

    let before = allocated_bytes();
    let envelope = decoder.decode(&mut rx).unwrap().unwrap();
    let allocated = allocated_bytes() - before;
    std::hint::black_box(&envelope);
    assert!(
        allocated < 1024,
        "{allocated} bytes allocated decoding a 1 MiB body frame: the body was copied"
    );
}

#[test]
fn the_counter_sees_allocations() {
    // Guards the tests above against a counter that never counts.
    let before = allocations();
    let v: Vec<u8> = Vec::with_capacity(1 << 20);
    std::hint::black_box(&v);
    assert!(allocations() > before);
}
