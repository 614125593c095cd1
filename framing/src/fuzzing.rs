//! Fuzz entry points, shared by the cargo-fuzz targets in `framing/fuzz/` and
//! by the stable-toolchain smoke test `framing/tests/fuzz_smoke.rs`.
//!
//! Each function takes arbitrary bytes, drives one decoder the way a socket
//! would (the first byte picks the read size, so split points vary), and
//! panics only when an invariant breaks: a decoded value that does not
//! re-encode to itself, or a buffer that grows past its limit. Typed errors
//! are the expected answer to garbage and are not failures.

use bytes::BytesMut;

use crate::frame::{FrameDecoder, FrameEncoder};

/// Largest frame the fuzzed decoder accepts; small so limits are reached.
const FUZZ_MAX_FRAME_LEN: usize = 4096;

/// Splits `data` into its read size (from the first byte) and the stream.
fn read_size_and_stream(data: &[u8]) -> (usize, &[u8]) {
    match data.split_first() {
        Some((first, rest)) => (usize::from(*first) + 1, rest),
        None => (1, data),
    }
}

/// Frame decoder: decode, then re-encode every envelope and decode it again.
pub fn frame_decoder(data: &[u8]) {
    let (read, stream) = read_size_and_stream(data);
    let mut decoder = FrameDecoder::new(FUZZ_MAX_FRAME_LEN);
    let mut encoder = FrameEncoder::new(FUZZ_MAX_FRAME_LEN);
    let mut rx = BytesMut::new();
    for chunk in stream.chunks(read) {
        rx.extend_from_slice(chunk);
        loop {
            match decoder.decode(&mut rx) {
                Ok(Some(envelope)) => {
                    // Re-encoding drops unknown fields, so the result may be
                    // shorter than the input, never longer than the limit.
                    let wire = encoder.encode(&envelope).expect("a decoded envelope re-encodes");
                    let mut again = BytesMut::from(&wire[..]);
                    let back = FrameDecoder::new(FUZZ_MAX_FRAME_LEN)
                        .decode(&mut again)
                        .expect("a re-encoded envelope decodes")
                        .expect("a re-encoded envelope is complete");
                    assert_eq!(back, envelope, "envelope did not round-trip");
                }
                Ok(None) => break,
                Err(_) => return, // the connection would be closed here
            }
        }
        assert!(
            rx.len() <= FUZZ_MAX_FRAME_LEN + usize::from(u8::MAX) + 1,
            "receive buffer grew past one frame plus one read"
        );
    }
}
