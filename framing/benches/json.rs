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
//!   all: every block plain);
//! - `emoji_100k`: 100,000 characters of a line with an emoji, written as
//!   Python's `json.dumps` writes it (the emoji a surrogate pair of `\u`
//!   escapes);
//! - `japanese_30k`: 30,000 characters of Japanese, the same way (every
//!   character a `\u` escape).
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

/// `line` repeated to `len` characters.
fn repeated(line: &str, len: usize) -> String {
    line.chars().cycle().take(len).collect()
}

/// `json` with every character past ASCII a `\u` escape (a surrogate pair
/// past the BMP), as Python's `json.dumps` writes by default.
fn ascii_only(json: &str) -> String {
    let mut out = String::with_capacity(json.len() * 2);
    for c in json.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
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
    let emoji = repeated(
        "Nice work \u{1F600} on the \"quick\" fix, thanks!\n",
        100_000,
    );
    let japanese = repeated("日本語のテキストです。\"引用\"も含みます。\n", 30_000);
    vec![
        ("prose_100k", chat(json!(prose))),
        ("lines_100k", chat(json!(lines))),
        ("image_1m", chat(image)),
        ("emoji_100k", ascii_only(&chat(json!(emoji)))),
        ("japanese_30k", ascii_only(&chat(json!(japanese)))),
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
