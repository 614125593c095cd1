//! SSE and NDJSON parse throughput, in GB/s (criterion `Throughput::Bytes`).
//!
//! `cargo bench -p framing --bench sse -- --warm-up-time 1 --measurement-time 3`
//!
//! Workloads (each about 4 MiB per iteration, fed as `Bytes` chunks of
//! 4–16 KiB, sizes drawn from a fixed-seed generator, as a relay sees them):
//! - `token`: ~120 B OpenAI `chat.completion.chunk` events, one per token;
//! - `token_named`: the same with an `event:` line (Anthropic style);
//! - `64k`: events with 64 KiB of data, which span chunks;
//! - NDJSON `ollama`: ~110 B Ollama `/api/generate` lines.
//!
//! Each is parsed by the observer (borrowed chunks; what the relay runs) and
//! by the decoder (chunks appended to a receive `BytesMut`). `memchr_floor`
//! only counts line endings with `memchr2`: the floor for any line scanner,
//! measured in the same run. Events per iteration are printed at start, so
//! events/s = events / (time per iteration).

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use framing::ndjson::{NdjsonDecoder, NdjsonObserver};
use framing::sse::{SseDecoder, SseItemRef, SseObserver};

/// Bytes of stream per iteration.
const STREAM_BYTES: usize = 4 << 20;

/// A stream split into relay-sized chunks, and how many events it holds.
struct Workload {
    name: &'static str,
    chunks: Vec<Bytes>,
    bytes: usize,
    events: usize,
}

/// Splits `stream` into chunks of 4–16 KiB (fixed-seed xorshift sizes).
fn chunked(stream: Vec<u8>) -> Vec<Bytes> {
    let stream = Bytes::from(stream);
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    let mut chunks = Vec::new();
    let mut at = 0;
    while at < stream.len() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let len = 4096 + (seed % (12 * 1024 + 1)) as usize;
        let end = (at + len).min(stream.len());
        chunks.push(stream.slice(at..end));
        at = end;
    }
    chunks
}

fn workload(name: &'static str, mut event: impl FnMut(usize) -> Vec<u8>) -> Workload {
    let mut stream = Vec::with_capacity(STREAM_BYTES + (1 << 17));
    let mut events = 0;
    while stream.len() < STREAM_BYTES {
        stream.extend(event(events));
        events += 1;
    }
    let bytes = stream.len();
    eprintln!(
        "{name}: {bytes} bytes, {events} events of {:.0} B avg per iteration",
        bytes as f64 / events as f64
    );
    Workload {
        name,
        chunks: chunked(stream),
        bytes,
        events,
    }
}

fn openai_token(i: usize) -> Vec<u8> {
    format!(
        "data: {{\"id\":\"chatcmpl-9x\",\"object\":\"chat.completion.chunk\",\"choices\":\
         [{{\"index\":0,\"delta\":{{\"content\":\"tok{}\"}}}}]}}\n\n",
        i % 1000
    )
    .into_bytes()
}

fn sse_workloads() -> Vec<Workload> {
    vec![
        workload("token", openai_token),
        workload("token_named", |i| {
            let mut ev = b"event: content_block_delta\n".to_vec();
            ev.extend(openai_token(i));
            ev
        }),
        workload("64k", |i| {
            let mut ev = b"data: ".to_vec();
            ev.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, 64 * 1024));
            ev.extend_from_slice(b"\n\n");
            ev
        }),
    ]
}

fn observe(chunks: &[Bytes]) -> usize {
    let mut obs = SseObserver::new();
    let mut events = 0;
    for chunk in chunks {
        obs.feed(chunk, |item| {
            if let SseItemRef::Event(ev) = item {
                black_box(ev.data);
                events += 1;
            }
        })
        .unwrap();
    }
    events
}

fn decode(chunks: &[Bytes]) -> usize {
    let mut dec = SseDecoder::new();
    let mut rx = BytesMut::with_capacity(64 << 10);
    let mut events = 0;
    for chunk in chunks {
        rx.extend_from_slice(chunk);
        while let Some(ev) = dec.decode(&mut rx).unwrap() {
            black_box(ev);
            events += 1;
        }
    }
    events
}

fn floor(chunks: &[Bytes]) -> usize {
    chunks
        .iter()
        .map(|chunk| memchr::memchr2_iter(b'\n', b'\r', chunk).count())
        .sum()
}

fn sse(c: &mut Criterion) {
    let mut group = c.benchmark_group("sse");
    for w in sse_workloads() {
        assert_eq!(observe(&w.chunks), w.events);
        assert_eq!(decode(&w.chunks), w.events);
        group.throughput(Throughput::Bytes(w.bytes as u64));
        group.bench_with_input(
            BenchmarkId::new("observe", w.name),
            &w.chunks,
            |b, chunks| b.iter(|| observe(chunks)),
        );
        group.bench_with_input(
            BenchmarkId::new("decode", w.name),
            &w.chunks,
            |b, chunks| b.iter(|| decode(chunks)),
        );
        group.bench_with_input(
            BenchmarkId::new("memchr_floor", w.name),
            &w.chunks,
            |b, chunks| b.iter(|| floor(chunks)),
        );
    }
    group.finish();
}

fn ndjson(c: &mut Criterion) {
    let w = workload("ollama", |i| {
        format!(
            "{{\"model\":\"llama3.2\",\"created_at\":\"2024-11-05T10:00:00.{i:06}Z\",\
             \"response\":\"tok{}\",\"done\":false}}\n",
            i % 1000
        )
        .into_bytes()
    });
    let observe = |chunks: &[Bytes]| {
        let mut obs = NdjsonObserver::new();
        let mut lines = 0;
        for chunk in chunks {
            obs.feed(chunk, |line| {
                black_box(line);
                lines += 1;
            })
            .unwrap();
        }
        lines
    };
    let decode = |chunks: &[Bytes]| {
        let mut dec = NdjsonDecoder::new();
        let mut rx = BytesMut::with_capacity(64 << 10);
        let mut lines = 0;
        for chunk in chunks {
            rx.extend_from_slice(chunk);
            while let Some(line) = dec.decode(&mut rx).unwrap() {
                black_box(line);
                lines += 1;
            }
        }
        lines
    };
    assert_eq!(observe(&w.chunks), w.events);
    assert_eq!(decode(&w.chunks), w.events);
    let mut group = c.benchmark_group("ndjson");
    group.throughput(Throughput::Bytes(w.bytes as u64));
    group.bench_with_input(
        BenchmarkId::new("observe", w.name),
        &w.chunks,
        |b, chunks| b.iter(|| observe(chunks)),
    );
    group.bench_with_input(
        BenchmarkId::new("decode", w.name),
        &w.chunks,
        |b, chunks| b.iter(|| decode(chunks)),
    );
    group.finish();
}

criterion_group!(benches, sse, ndjson);
criterion_main!(benches);
