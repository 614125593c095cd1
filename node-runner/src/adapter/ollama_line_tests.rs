//! The typed line reads what the `serde_json::Value` walk it replaced read,
//! for any JSON (the old walk is kept here as the reference).

use std::collections::VecDeque;

use proptest::prelude::*;
use proto::v1::{FailureCode, FailureSide, Usage};
use serde_json::Value;

use super::line_events;
use crate::adapter::{RuntimeEvent, failure, malformed};

fn typed(line: &str) -> (bool, VecDeque<RuntimeEvent>) {
    let mut out = VecDeque::new();
    let done = line_events(line.as_bytes(), &mut out);
    (done, out)
}

/// The `Value` walk the adapter did before, over a parsed line.
fn reference(value: &Value) -> (bool, VecDeque<RuntimeEvent>) {
    let mut out = VecDeque::new();
    if !value.is_object() {
        out.push_back(RuntimeEvent::Error(malformed("line is not a JSON object")));
        return (true, out);
    }
    if value.get("error").is_some() {
        out.push_back(RuntimeEvent::Error(failure(
            FailureCode::ProviderHttpStatus,
            FailureSide::Provider,
            "provider reported an error mid-stream",
        )));
        return (true, out);
    }
    let text = |key: &str| {
        value
            .get("message")
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    if let Some(thinking) = text("thinking") {
        out.push_back(RuntimeEvent::ReasoningDelta(thinking.to_owned()));
    }
    if let Some(content) = text("content") {
        out.push_back(RuntimeEvent::Delta(content.to_owned()));
    }
    if value.get("done").and_then(Value::as_bool) != Some(true) {
        return (false, out);
    }
    let count = |key: &str| value.get(key).and_then(Value::as_u64);
    let usage = match (count("prompt_eval_count"), count("eval_count")) {
        (None, None) => None,
        (input, output) => Some(Usage {
            input_tokens: input.unwrap_or(0),
            output_tokens: output.unwrap_or(0),
            reasoning_tokens: None,
            cached_input_tokens: None,
        }),
    };
    out.push_back(RuntimeEvent::Complete {
        finish_reason: value
            .get("done_reason")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        usage,
    });
    (true, out)
}

fn same(line: &str) {
    let value: Value = serde_json::from_str(line).expect("valid JSON");
    assert_eq!(typed(line), reference(&value), "{line}");
}

#[test]
fn real_lines_read_as_before() {
    for line in [
        r#"{"model":"m","created_at":"2026-01-01T00:00:00Z","message":{"role":"assistant","content":"tok "},"done":false}"#,
        r#"{"message":{"role":"assistant","content":"","thinking":"hmm"},"done":false}"#,
        r#"{"message":{"content":"a \"q\" \u00e9\n"},"done":false}"#,
        r#"{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","total_duration":1,"prompt_eval_count":3,"eval_count":16}"#,
        r#"{"done":true}"#,
        r#"{"done":true,"eval_count":2}"#,
        r#"{"error":"model not found"}"#,
        r#"{"error":null,"message":{"content":"a"}}"#,
        r#"{"message":"text","done":"yes"}"#,
        r#"{"message":null,"done":null,"done_reason":null}"#,
        r#"{"message":{"content":5,"thinking":""},"done":1}"#,
        r#"{"done":true,"prompt_eval_count":-1,"eval_count":2.0,"done_reason":7}"#,
        r#"{"done":true,"prompt_eval_count":18446744073709551615}"#,
        r#"{"message":{"content":"a"},"message":{"content":"b"},"done":true,"done":false}"#,
        r#"{"message":{"content":"a","content":"b"}}"#,
        r#"{"m\u0065ssage":{"c\u006fntent":"escaped keys"}}"#,
        r#"[1,2]"#,
        r#""text""#,
        r#"null"#,
        r#"12"#,
    ] {
        same(line);
    }
}

#[test]
fn not_json_is_a_malformed_terminal() {
    for line in [r#"{nope"#, r#"{"message":[}"#, r#"{"a":1} x"#, ""] {
        let (done, out) = typed(line);
        assert!(done, "{line}");
        let error = serde_json::from_str::<Value>(line).unwrap_err();
        assert_eq!(
            out,
            [RuntimeEvent::Error(malformed(format_args!(
                "line is not JSON ({error})"
            )))],
            "{line}"
        );
    }
}

#[test]
fn a_line_that_is_not_utf8_is_a_malformed_terminal() {
    let mut out = VecDeque::new();
    assert!(line_events(
        b"{\"message\":{\"content\":\"h\xffi\"}}",
        &mut out
    ));
    assert_eq!(
        Vec::from(out),
        [RuntimeEvent::Error(malformed("line is not UTF-8"))]
    );
}

/// JSON values built from the keys the adapter looks at.
fn json_value() -> impl Strategy<Value = Value> {
    crate::adapter::lenient::json_value(vec![
        "error",
        "message",
        "content",
        "thinking",
        "role",
        "done",
        "done_reason",
        "prompt_eval_count",
        "eval_count",
        "model",
    ])
}

proptest! {
    #[test]
    fn any_json_reads_as_before(value in json_value()) {
        let line = value.to_string();
        prop_assert_eq!(typed(&line), reference(&value), "{}", line);
    }
}

/// What serde reads from `line` (the reader the quick one must agree with).
fn serde_read(line: &str) -> Option<super::LineJson<'_>> {
    match serde_json::from_str::<super::JsonObject<super::LineJson<'_>>>(line) {
        Ok(super::JsonObject::Object(line)) => Some(line),
        _ => None,
    }
}

#[test]
fn the_common_lines_are_read_without_serde() {
    for line in [
        r#"{"model":"m","created_at":"2026-01-01T00:00:00Z","message":{"role":"assistant","content":"tok "},"done":false}"#,
        r#"{"model":"m","created_at":"2026-01-01T00:00:00Z","message":{"role":"assistant","content":"","thinking":"hmm"},"done":false}"#,
        r#"{"model":"m","created_at":"2026-01-01T00:00:00Z","message":{"role":"assistant","content":""},"done_reason":"stop","done":true,"total_duration":123456789,"load_duration":1,"prompt_eval_count":3,"prompt_eval_duration":2,"eval_count":16,"eval_duration":4}"#,
        r#"{"error":"model not found"}"#,
        r#"{"message":"text","done":null,"x":{"a":1,"b":"c"}}"#,
        r#"{}"#,
        r#"{"message":{"content":"a \"q\"\n\t\\ \/ \b\f\r"},"done":false}"#,
    ] {
        let quick = super::quick::quick_line(line).expect(line);
        assert_eq!(
            format!("{quick:?}"),
            format!("{:?}", serde_read(line).unwrap())
        );
        same(line);
    }
    // Declined, for serde to read: escapes, whitespace, floats, negative
    // and leading-zero numbers, arrays, deeper objects, trailing bytes.
    for line in [
        r#"{"message":{"content":"\u00e9"}}"#,
        r#"{"m\nodel":"x","message":{"c\/ontent":"k"}}"#,
        r#"{"message":{"content":"a \q"}}"#,
        r#"{"message":{"content":"a \"#,
        r#"{ "done":true}"#,
        r#"{"done":true} "#,
        r#"{"eval_count":2.0}"#,
        r#"{"eval_count":1e3}"#,
        r#"{"eval_count":-1}"#,
        r#"{"eval_count":01}"#,
        r#"{"eval_count":18446744073709551616}"#,
        r#"{"message":{"tool_calls":[]}}"#,
        r#"{"x":{"y":{}}}"#,
        r#"{"done":true,}"#,
        "{\"message\":{\"content\":\"a\u{1}b\"}}",
        r#"[1]"#,
    ] {
        assert!(super::quick::quick_line(line).is_none(), "{line}");
    }
}

/// Lines near the common form: its pieces, and pieces that are one step
/// off it, in any order.
fn near_line() -> impl Strategy<Value = String> {
    let mut pieces = framing::fuzzing::JSON_PIECES.to_vec();
    pieces.extend([
        ".",
        "e",
        "18446744073709551615",
        "18446744073709551616",
        "false",
        "tru",
        "\"message\"",
        "\"content\"",
        "\"thinking\"",
        "\"done\"",
        "\"done_reason\"",
        "\"eval_count\"",
        "\"prompt_eval_count\"",
        "\"error\"",
        "\"model\"",
        "\"tok \"",
        "\\u0065",
        "\"stop\"",
    ]);
    let piece = prop::sample::select(pieces);
    prop::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
}

/// A common line with up to three edits: a piece put in, or bytes taken
/// out, anywhere.
fn edited_line() -> impl Strategy<Value = String> {
    let base = prop::sample::select(vec![
        r#"{"model":"m","created_at":"2026-01-01T00:00:00Z","message":{"role":"assistant","content":"tok "},"done":false}"#,
        r#"{"message":{"content":"","thinking":"hmm"},"done_reason":"stop","done":true,"prompt_eval_count":3,"eval_count":16}"#,
        r#"{"error":"e","x":{"a":1,"b":null}}"#,
    ]);
    let edit = (any::<prop::sample::Index>(), 0usize..4, near_line());
    (base, prop::collection::vec(edit, 1..4)).prop_map(|(base, edits)| {
        let mut line = base.to_owned();
        for (at, cut, piece) in edits {
            let piece: String = piece.chars().take(8).collect();
            let at = at.index(line.len() + 1);
            framing::fuzzing::edit(&mut line, at, cut, &piece);
        }
        line
    })
}

/// A token text of up to a few hundred bytes (past the quick reader's
/// byte-at-a-time head, where runs are found by `memchr2`): plain bytes
/// with up to three pieces put in anywhere, some that end a run (a quote,
/// an escape, a control byte, `\u`), some plain (DEL, multi-byte text).
fn long_text() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "\"", "\\n", "\\\"", "\\\\", "\\/", "\\u0065", "\\q", "\\", "\u{1}", "\u{1f}", "\u{7f}",
        "\u{e9}", "tok ",
    ]);
    let insert = (any::<prop::sample::Index>(), piece);
    (0usize..300, prop::collection::vec(insert, 0..4)).prop_map(|(len, inserts)| {
        let mut text = "x".repeat(len);
        for (at, piece) in inserts {
            let at = at.index(text.len() + 1);
            let at = (0..=at)
                .rev()
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(0);
            text.insert_str(at, piece);
        }
        text
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn a_long_text_is_read_as_serde_reads_it_or_declined(text in long_text()) {
        let line = format!(r#"{{"message":{{"role":"assistant","content":"{text}"}},"done":false}}"#);
        let serde = serde_read(&line);
        match super::quick::quick_line(&line) {
            Some(quick) => {
                prop_assert!(serde.is_some(), "quick read what serde refuses: {}", line);
                prop_assert_eq!(format!("{:?}", quick), format!("{:?}", serde.unwrap()), "{}", line);
            }
            // Declined only for what the quick reader leaves to serde.
            None => prop_assert!(
                serde.is_none() || text.contains("\\u") || text.bytes().any(|b| b < 0x20),
                "declined a line it takes: {}",
                line
            ),
        }
    }
}

proptest! {
    // The quick reader takes ~4 % of edited and near lines and ~14 % of
    // compact objects: enough cases that each run sees a few hundred read.
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn an_edited_line_is_read_as_serde_reads_it_or_declined(line in edited_line()) {
        if let Some(quick) = super::quick::quick_line(&line) {
            let serde = serde_read(&line);
            prop_assert!(serde.is_some(), "quick read what serde refuses: {}", line);
            prop_assert_eq!(format!("{:?}", quick), format!("{:?}", serde.unwrap()), "{}", line);
        }
    }

    #[test]
    fn the_quick_reader_reads_what_serde_reads_or_declines(
        line in near_line(),
        framed in any::<bool>(),
    ) {
        // Half of them framed as an object, so more get past the first byte.
        let line = if framed { format!("{{{line}}}") } else { line };
        if let Some(quick) = super::quick::quick_line(&line) {
            let serde = serde_read(&line);
            prop_assert!(serde.is_some(), "quick read what serde refuses: {}", line);
            prop_assert_eq!(format!("{:?}", quick), format!("{:?}", serde.unwrap()), "{}", line);
        }
    }

    #[test]
    fn the_quick_reader_reads_any_compact_object_as_serde_does(value in json_value()) {
        let line = value.to_string();
        if let Some(quick) = super::quick::quick_line(&line) {
            prop_assert_eq!(format!("{:?}", quick), format!("{:?}", serde_read(&line).unwrap()), "{}", line);
        }
    }
}
