//! Proves the frame decoder refuses an oversize frame before allocating.
//!
//! The counting allocator is `support/counting_alloc.rs` (per-thread counts).

use bytes::{BufMut, BytesMut};
use framing::frame::{FrameDecoder, FrameError};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{allocated_bytes, allocations};

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
