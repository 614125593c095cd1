//! A request body's skip by `json_quick`'s cursor (routing's one pass over
//! a body), in GB/s (criterion `Throughput::Bytes`).
//!
//! `cargo bench -p framing --bench json -- --warm-up-time 1 --measurement-time 3`
//!
//! Workloads, each a chat request body whose long string is what the pass
//! spends its time on:
//! - `prose_100k`: a 100 KB prompt of k6's `PROMPT_TEXT=prose` line (three
//!   escapes every 56 bytes: an escape in nearly every 64-byte block);
//! - `lines_100k`: 100 KB of 80-byte text lines (one escape, the newline,
//!   every 81 bytes: a plain block now and then);
//! - `image_1m`: a 1 MB base64 image in an `image_url` part (no escape at
//!   all: every block plain).
//!
//! Callgrind counts instructions (`hack/instructions.sh`); this is the
//! clock, for a change whose instructions are not all alike (SIMD).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use framing::json_quick::{Cursor, MAX_SKIP_DEPTH};
use serde_json::json;

/// A chat body with `content` as its user message.
fn chat(content: serde_json::Value) -> String {
    json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": content}]})
        .to_string()
}

/// `line` repeated to `len` bytes.
fn repeated(line: &str, len: usize) -> String {
    line.repeat(len / line.len() + 1)[..len].to_owned()
}

fn workloads() -> Vec<(&'static str, String)> {
    let prose = repeated(
        "The \"quick\" brown fox jumps over the lazy dog, twice.\n",
        100_000,
    );
    let line = format!(
        "{}\n",
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tem"
    );
    let lines = repeated(&line, 100_000);
    let b64 = repeated(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA",
        1 << 20,
    );
    let image = json!([
        {"type": "text", "text": "what is it?"},
        {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{b64}")}},
    ]);
    vec![
        ("prose_100k", chat(json!(prose))),
        ("lines_100k", chat(json!(lines))),
        ("image_1m", chat(image)),
    ]
}

fn skip(c: &mut Criterion) {
    let mut group = c.benchmark_group("json_quick_skip");
    for (name, body) in workloads() {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), &body, |b, body| {
            b.iter(|| {
                let mut cursor = Cursor::spaced(black_box(body));
                cursor
                    .skip_any(MAX_SKIP_DEPTH)
                    .expect("a body the cursor takes");
                assert!(cursor.at_end());
            });
        });
    }
    group.finish();
}

criterion_group!(benches, skip);
criterion_main!(benches);
