//! Node-socket frame codec benches: frames/s and GB/s for decode and encode.
//!
//! `cargo bench -p framing --bench frame`
//!
//! Decode benches time only decoding: the receive buffer is filled in an
//! untimed setup step, as a socket read would fill it.

use bytes::{BufMut, Bytes, BytesMut};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use framing::frame::{FrameDecoder, FrameEncoder};
use proto::Envelope;
use proto::v1::{RunEvent, RunEventKind, envelope::Msg};
use std::hint::black_box;

/// Body sizes: a token-sized SSE event, a typical read, a large SSE event.
const BODY_SIZES: [usize; 3] = [128, 4 * 1024, 64 * 1024];
/// Bytes of frames decoded per iteration.
const BATCH_BYTES: usize = 4 << 20;

fn body_frames(body_len: usize) -> (Bytes, u64) {
    let mut enc = FrameEncoder::default();
    let body = Bytes::from(vec![b'x'; body_len]);
    let mut wire = BytesMut::new();
    let mut frames = 0u64;
    while wire.len() < BATCH_BYTES {
        let frame = enc.encode_tunnel_body(frames + 1, body.clone()).unwrap();
        wire.put_slice(&frame.head);
        wire.put_slice(&frame.body);
        frames += 1;
    }
    (wire.freeze(), frames)
}

fn decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("frame_decode");
    for size in BODY_SIZES {
        let (wire, frames) = body_frames(size);
        group.throughput(Throughput::Bytes(wire.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("tunnel_body_bytes", size),
            &wire,
            |b, wire| {
                let mut dec = FrameDecoder::default();
                b.iter_batched(
                    || BytesMut::from(&wire[..]),
                    |mut rx| {
                        let mut n = 0u64;
                        while let Some(env) = dec.decode(&mut rx).unwrap() {
                            black_box(env);
                            n += 1;
                        }
                        assert_eq!(n, frames);
                    },
                    BatchSize::LargeInput,
                );
            },
        );
        group.throughput(Throughput::Elements(frames));
        group.bench_with_input(
            BenchmarkId::new("tunnel_body_frames", size),
            &wire,
            |b, wire| {
                let mut dec = FrameDecoder::default();
                b.iter_batched(
                    || BytesMut::from(&wire[..]),
                    |mut rx| {
                        while let Some(env) = dec.decode(&mut rx).unwrap() {
                            black_box(env);
                        }
                    },
                    BatchSize::LargeInput,
                );
            },
        );
    }
    group.finish();
}

fn encode(c: &mut Criterion) {
    let mut group = c.benchmark_group("frame_encode");
    for size in BODY_SIZES {
        let body = Bytes::from(vec![b'x'; size]);
        group.throughput(Throughput::Bytes(size as u64 + 8));
        group.bench_with_input(
            BenchmarkId::new("tunnel_body_head", size),
            &body,
            |b, body| {
                let mut enc = FrameEncoder::default();
                let mut id = 0u64;
                b.iter(|| {
                    id += 1;
                    black_box(enc.encode_tunnel_body(id, body.clone()).unwrap());
                });
            },
        );
    }
    let event = Envelope {
        stream_id: 77,
        msg: Some(Msg::RunEvent(Box::new(RunEvent {
            kind: RunEventKind::Delta as i32,
            seq: 12,
            text: "hello".into(),
            ..Default::default()
        }))),
    };
    group.throughput(Throughput::Elements(1));
    group.bench_function("run_event_delta", |b| {
        let mut enc = FrameEncoder::default();
        b.iter(|| black_box(enc.encode(&event).unwrap()));
    });
    group.finish();
}

criterion_group!(benches, decode, encode);
criterion_main!(benches);
