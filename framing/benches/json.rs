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
//!   character a `\u` escape);
//! - `tools_24_spaced`, `tools_24_compact`: an agent's turn declaring 24
//!   tools (`perf/k6/agent-tool.json`, as `hack/instructions.sh`'s
//!   `TOOLS=24`), as Python's `json.dumps` writes it (`", "` and `": "`)
//!   and as `JSON.stringify` does: keys, short strings and numbers, the
//!   shape whose every token the cursor reads.
//!
//! Callgrind counts instructions (`hack/instructions.sh`); this is the
//! clock, for a change whose instructions are not all alike (SIMD).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use framing::json_quick::{Cursor, MAX_SKIP_DEPTH};
use serde::Serialize;
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

/// An agent's turn with `count` tools: a weather tool, then schemas as a
/// coding agent declares its tools.
fn agent_turn(count: usize) -> serde_json::Value {
    let mut tools = vec![json!({"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city now.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}})];
    // Past the first, as a coding agent declares them: the template k6 and
    // hack/instructions.sh send, each under a name of its own.
    let template: serde_json::Value =
        serde_json::from_str(include_str!("../../perf/k6/agent-tool.json"))
            .expect("perf/k6/agent-tool.json is JSON");
    tools.extend((1..count).map(|i| {
        let mut tool = template.clone();
        tool["function"]["name"] = json!(format!("workspace_tool_{i}"));
        tool
    }));
    json!({"model": "m", "stream": true, "tools": tools, "messages": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 21}"},
        {"role": "user", "content": "And tomorrow?"}]})
}

/// `value` as Python's `json.dumps` writes it: `", "` between members and
/// elements, `": "` after a key.
fn python_spaced(value: &serde_json::Value) -> String {
    struct Spaced;
    /// `", "` before every element or member but the first.
    fn separator<W: ?Sized + std::io::Write>(writer: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }
    impl serde_json::ser::Formatter for Spaced {
        fn begin_array_value<W: ?Sized + std::io::Write>(
            &mut self,
            writer: &mut W,
            first: bool,
        ) -> std::io::Result<()> {
            separator(writer, first)
        }
        fn begin_object_key<W: ?Sized + std::io::Write>(
            &mut self,
            writer: &mut W,
            first: bool,
        ) -> std::io::Result<()> {
            separator(writer, first)
        }
        fn begin_object_value<W: ?Sized + std::io::Write>(
            &mut self,
            writer: &mut W,
        ) -> std::io::Result<()> {
            writer.write_all(b": ")
        }
    }
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, Spaced);
    value
        .serialize(&mut serializer)
        .expect("a Value into a Vec");
    String::from_utf8(out).expect("serde_json writes UTF-8")
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
        ("tools_24_spaced", python_spaced(&agent_turn(24))),
        ("tools_24_compact", agent_turn(24).to_string()),
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
