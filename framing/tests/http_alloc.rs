//! Proves the HTTP/1.1 codecs do not copy bodies and allocate only small
//! bookkeeping: chunk data and `Content-Length` data come out as slices of
//! the receive buffer, the chunk encoder leaves the body alone and carves
//! size lines from a shared scratch block, and a parsed head keeps one `Vec`
//! of ranges, not a `String` per field.
//!
//! The counting allocator is `support/counting_alloc.rs` (per-thread counts).

use bytes::{Bytes, BytesMut};
use framing::http::{
    BodyDecoder, BodyFraming, BodyItem, ChunkedEncoder, HeadLimits, parse_request_head,
    write_response_head,
};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::measure;

fn drain(decoder: &mut BodyDecoder, buf: &mut BytesMut) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(64);
    while let Some(item) = decoder.decode(buf).unwrap() {
        if let BodyItem::Data(d) = item {
            out.push(d);
        }
    }
    out
}

#[test]
fn chunked_decoding_does_not_copy_the_body() {
    // 1 MiB of chunk data in 16 chunks: a copy would allocate at least that.
    let chunk = vec![7u8; 64 * 1024];
    let mut wire = Vec::new();
    for _ in 0..16 {
        wire.extend_from_slice(b"10000;ext=1\r\n");
        wire.extend_from_slice(&chunk);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b"0\r\nX-T: 1\r\n\r\n");
    let mut rx = BytesMut::from(&wire[..]);
    let mut decoder = BodyDecoder::new(BodyFraming::Chunked);

    let (pieces, _, bytes) = measure(|| drain(&mut decoder, &mut rx));
    assert!(decoder.is_done());
    assert_eq!(
        pieces.iter().map(Bytes::len).sum::<usize>(),
        16 * chunk.len()
    );
    assert!(
        bytes < 4096,
        "{bytes} bytes allocated decoding 1 MiB of chunks: data was copied"
    );
}

#[test]
fn content_length_decoding_does_not_copy_the_body() {
    let mut rx = BytesMut::from(&vec![1u8; 1 << 20][..]);
    let mut decoder = BodyDecoder::new(BodyFraming::Length(1 << 20));
    let (pieces, _, bytes) = measure(|| drain(&mut decoder, &mut rx));
    assert_eq!(pieces.len(), 1);
    assert!(bytes < 4096, "{bytes} bytes allocated: the body was copied");
}

#[test]
fn chunk_encoding_leaves_the_body_alone() {
    let body = Bytes::from(vec![9u8; 1 << 20]);
    let mut enc = ChunkedEncoder::new();
    let mut frames = Vec::with_capacity(100);
    let ((), allocations, bytes) = measure(|| {
        for _ in 0..100 {
            frames.push(enc.encode(body.clone()).unwrap());
        }
    });
    assert!(frames.iter().all(|f| f.body().as_ptr() == body.as_ptr()));
    // A few scratch blocks and their refcount headers, nothing per body.
    assert!(allocations <= 6, "{allocations} allocations for 100 chunks");
    assert!(bytes < 8 * 1024, "{bytes} bytes allocated encoding 100 MiB");
}

#[test]
fn a_parsed_head_allocates_only_its_ranges() {
    let mut head = b"POST /v1/chat/completions HTTP/1.1\r\n".to_vec();
    for i in 0..32 {
        head.extend_from_slice(format!("x-field-{i}: some value {i}\r\n").as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    let mut rx = BytesMut::from(&head[..]);
    let limits = HeadLimits::default();
    let (parsed, allocations, _) = measure(|| parse_request_head(&mut rx, &limits));
    assert_eq!(parsed.unwrap().unwrap().headers().len(), 32);
    // The Vec of ranges, and the refcount header `split_to` may create.
    assert!(
        allocations <= 2,
        "{allocations} allocations parsing 32 fields"
    );
}

#[test]
fn writing_a_head_into_a_sized_buffer_does_not_allocate() {
    let mut dst = BytesMut::with_capacity(256);
    let fields = [
        ("content-type", "text/event-stream"),
        ("cache-control", "no-cache"),
    ];
    let (result, allocations, _) = measure(|| write_response_head(&mut dst, 200, fields));
    result.unwrap();
    assert_eq!(allocations, 0);
}

#[test]
fn the_counter_sees_allocations() {
    // Guards the tests above against a counter that never counts.
    let (_, allocations, _) = measure(|| std::hint::black_box(Vec::<u8>::with_capacity(1 << 20)));
    assert!(allocations > 0);
}
