//! Proves the cost claims of the SSE and NDJSON observers: events and lines
//! inside one chunk, and lines the parser ignores, cost no allocation; what
//! spans chunks reuses buffers once they have grown.
//!
//! The counting allocator is `support/counting_alloc.rs` (per-thread counts).

use bytes::BytesMut;
use framing::ndjson::NdjsonObserver;
use framing::sse::{SseDecoder, SseItemRef, SseObserver};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::allocations_in;

const TOKEN: &[u8] = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok\"}}]}\n\n";

/// Feeds every chunk, counting events and summing data lengths.
fn feed_all(obs: &mut SseObserver, chunks: &[&[u8]]) -> (usize, usize) {
    let (mut events, mut bytes) = (0, 0);
    for chunk in chunks {
        obs.feed(chunk, |item| {
            if let SseItemRef::Event(ev) = item {
                events += 1;
                bytes += ev.data.len();
            }
        })
        .unwrap();
    }
    (events, bytes)
}

#[test]
fn observer_events_within_chunks_allocate_nothing() {
    let chunk = TOKEN.repeat(64);
    let chunks = vec![&chunk[..]; 16];
    let mut obs = SseObserver::new();
    let mut seen = (0, 0);
    assert_eq!(allocations_in(|| seen = feed_all(&mut obs, &chunks)), 0);
    assert_eq!(seen.0, 64 * 16);
}

#[test]
fn observer_ignored_lines_allocate_nothing() {
    let stream =
        b": keep-alive\n\n: OPENROUTER PROCESSING\n\nfoo: bar\nretryx: 1\nbaz\n\n".repeat(8);
    // Complete lines in one chunk: nothing, from a cold start.
    let mut obs = SseObserver::new();
    assert_eq!(
        allocations_in(|| assert_eq!(feed_all(&mut obs, &[&stream]).0, 0)),
        0
    );
    // Split every 5 bytes: only a line whose start could still name a field
    // that matters ("retr|yx") is held, and only until its name diverges; the
    // buffer is reused, so a warm observer allocates nothing.
    let pieces: Vec<&[u8]> = stream.chunks(5).collect();
    let mut obs = SseObserver::new();
    feed_all(&mut obs, &pieces);
    assert_eq!(
        allocations_in(|| assert_eq!(feed_all(&mut obs, &pieces).0, 0)),
        0
    );
    assert_eq!(obs.buffered(), 0);
}

#[test]
fn observer_reuses_buffers_once_warm() {
    // Named events split at awkward offsets: the event type and spanning
    // data go to buffers that are reused after the first events.
    let stream = [&b"event: content_block_delta\n"[..], TOKEN]
        .concat()
        .repeat(64);
    let chunks: Vec<&[u8]> = stream.chunks(37).collect();
    let mut obs = SseObserver::new();
    assert!(feed_all(&mut obs, &chunks[..chunks.len() / 2]).0 > 0);
    let n = allocations_in(|| {
        feed_all(&mut obs, &chunks[chunks.len() / 2..]);
    });
    assert_eq!(n, 0);
}

#[test]
fn decoder_allocates_nothing_per_event_once_warm() {
    // One-line data is split off the receive buffer; the repeated event type
    // is shared, not reallocated.
    let event = [&b"event: content_block_delta\n"[..], TOKEN].concat();
    let mut dec = SseDecoder::new();
    let mut rx = BytesMut::with_capacity(64 << 10);
    let mut run = |rounds: usize| {
        for _ in 0..rounds {
            rx.extend_from_slice(&event.repeat(32));
            while let Some(ev) = dec.decode(&mut rx).unwrap() {
                assert!(!ev.data.is_empty());
            }
        }
    };
    run(2);
    // `repeat` above allocates once per round; nothing else may.
    assert_eq!(allocations_in(|| run(16)), 16);
}

#[test]
fn ndjson_observer_lines_within_chunks_allocate_nothing() {
    let chunk = b"{\"response\":\"tok\",\"done\":false}\n".repeat(64);
    let mut obs = NdjsonObserver::new();
    let mut lines = 0;
    let n = allocations_in(|| {
        for _ in 0..16 {
            obs.feed(&chunk, |_| lines += 1).unwrap();
        }
    });
    assert_eq!((n, lines), (0, 64 * 16));
}
