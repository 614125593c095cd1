//! The typed per-event shapes of [`super`] against the `json!` form.

use serde_json::{Value, json};

use super::*;
use crate::ingress::openai::{chat_usage, sse};

fn writer_ids() -> Ids {
    Ids {
        id: "chatcmpl-r\"1".into(),
        item_id: "msg-r1".into(),
        model: "llama3\u{e9}".into(),
        created: 1_700_000_000,
    }
}

/// A usage with a reasoning breakdown and no cached one.
fn usage() -> proto::v1::Usage {
    proto::v1::Usage {
        input_tokens: 3,
        output_tokens: 2,
        reasoning_tokens: Some(1),
        cached_input_tokens: None,
    }
}

#[test]
fn typed_events_are_the_json_bytes() {
    let ids = writer_ids();
    let writer = SseWriter {
        api: Api::Chat,
        ids: &ids,
        include_usage: false,
        started: true,
    };
    for text in [
        "",
        "tok ",
        "quote \" back \\ nl \n tab \t ctl \u{1} \u{e9}\u{1f600}",
    ] {
        let mut typed = Vec::new();
        writer.chat_delta(DeltaText::content(text), &mut typed);
        assert_eq!(
            typed,
            sse(None, &chat_chunk_json(&ids, json!({"content": text}), None))
        );
        let mut typed = Vec::new();
        writer.chat_delta(DeltaText::reasoning(text), &mut typed);
        let value = chat_chunk_json(&ids, json!({"reasoning_content": text}), None);
        assert_eq!(typed, sse(None, &value));
        let mut typed = Vec::new();
        writer.responses_delta(text, &mut typed);
        let value = json!({"type": "response.output_text.delta", "item_id": ids.item_id,
            "output_index": 0, "content_index": 0, "delta": text});
        assert_eq!(typed, sse(Some("response.output_text.delta"), &value));
    }
}

/// The `json!` form of a chat stream's chunk, which the typed chunks
/// replaced.
fn chat_chunk_json(ids: &Ids, delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": ids.id, "object": "chat.completion.chunk", "created": ids.created,
        "model": ids.model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
}

#[test]
fn chat_opening_and_closing_chunks_are_the_json_bytes() {
    let ids = writer_ids();
    let mut writer = SseWriter {
        api: Api::Chat,
        ids: &ids,
        include_usage: true,
        started: true,
    };
    let opening = chat_chunk_json(&ids, json!({"role": "assistant", "content": ""}), None);
    let mut bytes = b"before ".to_vec();
    writer.opening(&mut bytes);
    assert_eq!(bytes, [&b"before "[..], &sse(None, &opening)].concat());
    let usage = proto::v1::Usage {
        input_tokens: 3,
        output_tokens: 2,
        reasoning_tokens: None,
        cached_input_tokens: Some(1),
    };
    for (finish, usage, include_usage) in [
        ("", Some(usage), true),
        ("length", Some(usage), false),
        ("tool_calls", None, true),
    ] {
        writer.include_usage = include_usage;
        let out = Output {
            finish_reason: finish.into(),
            usage,
            ..Output::default()
        };
        let mut typed = Vec::new();
        writer.chat(&RunEvent::default(), &out, true, &mut typed);
        let finish = if finish.is_empty() { "stop" } else { finish };
        let mut expected = sse(None, &chat_chunk_json(&ids, json!({}), Some(finish)));
        if let (true, Some(usage)) = (include_usage, usage.as_ref()) {
            let mut chunk = chat_chunk_json(&ids, json!({}), None);
            chunk["choices"] = json!([]);
            chunk["usage"] = chat_usage(usage);
            expected.extend(sse(None, &chunk));
        }
        expected.extend_from_slice(b"data: [DONE]\n\n");
        assert_eq!(
            String::from_utf8(typed).unwrap(),
            String::from_utf8(expected).unwrap()
        );
    }
}

/// The `json!` form `chat_body` replaced.
fn chat_json(ids: &Ids, out: &Output) -> Value {
    let mut message = json!({"role": "assistant", "content": out.text});
    if !out.reasoning.is_empty() {
        message["reasoning_content"] = json!(out.reasoning);
    }
    let finish = if out.finish_reason.is_empty() {
        "stop"
    } else {
        &out.finish_reason
    };
    json!({
        "id": ids.id, "object": "chat.completion", "created": ids.created, "model": ids.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": out.usage.as_ref().map(chat_usage),
    })
}

#[test]
fn chat_body_is_the_json_bytes() {
    let (ids, usage) = (writer_ids(), usage());
    for (text, reasoning, finish, usage) in [
        ("", "", "", None),
        (
            "quote \" back \\ nl \n \u{1} \u{e9}",
            "",
            "length",
            Some(usage),
        ),
        ("a", "thought \"x\"", "stop", None),
    ] {
        let out = Output {
            text: text.into(),
            reasoning: reasoning.into(),
            finish_reason: finish.into(),
            usage,
            keep_text: true,
        };
        assert_eq!(
            chat_body(&ids, &out),
            chat_json(&ids, &out).to_string().into_bytes()
        );
    }
}

/// The `json!` form of a Responses object, which the typed shapes of
/// `responses_events` replaced: `status` is `in_progress` (no output yet)
/// or the finished answer's, `incomplete` with its reason when the run
/// stopped at its output limit or a filter.
fn responses_json(ids: &Ids, status: &str, out: &Output) -> Value {
    let output = if status == "in_progress" {
        json!([])
    } else {
        json!([message_item_json(&ids.item_id, status, out)])
    };
    let usage = out.usage.as_ref().map(|usage| {
        json!({
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens.saturating_add(usage.output_tokens),
            "input_tokens_details": { "cached_tokens": usage.cached_input_tokens.unwrap_or(0) },
            "output_tokens_details": { "reasoning_tokens": usage.reasoning_tokens.unwrap_or(0) },
        })
    });
    let mut response = json!({
        "id": ids.id, "object": "response", "created_at": ids.created, "status": status,
        "model": ids.model, "output": output, "usage": usage,
    });
    if status == "incomplete" {
        let reason = match out.finish_reason.as_str() {
            "length" => "max_output_tokens",
            _ => "content_filter",
        };
        response["incomplete_details"] = json!({"reason": reason});
    }
    response
}

/// The status a finished answer's `json!` form says.
fn finished(out: &Output) -> &'static str {
    match out.finish_reason.as_str() {
        "length" | "content_filter" => "incomplete",
        _ => "completed",
    }
}

fn message_item_json(item_id: &str, status: &str, out: &Output) -> Value {
    json!({"type": "message", "id": item_id, "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": out.text, "annotations": []}]})
}

/// The `json!` form of a stream's opening events.
fn opening_json(ids: &Ids) -> Vec<u8> {
    let item = &ids.item_id;
    let mut bytes = sse(
        Some("response.created"),
        &json!({"type": "response.created",
            "response": responses_json(ids, "in_progress", &Output::default())}),
    );
    bytes.extend(sse(
        Some("response.output_item.added"),
        &json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "message", "id": item, "status": "in_progress",
                     "role": "assistant", "content": []}}),
    ));
    bytes.extend(sse(
        Some("response.content_part.added"),
        &json!({"type": "response.content_part.added", "item_id": item,
            "output_index": 0, "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []}}),
    ));
    bytes
}

/// The `json!` form of a stream's closing events.
fn closing_json(ids: &Ids, out: &Output) -> Vec<u8> {
    let item = &ids.item_id;
    let part = json!({"type": "output_text", "text": out.text, "annotations": []});
    let mut bytes = sse(
        Some("response.output_text.done"),
        &json!({"type": "response.output_text.done", "item_id": item,
            "output_index": 0, "content_index": 0, "text": out.text}),
    );
    bytes.extend(sse(
        Some("response.content_part.done"),
        &json!({"type": "response.content_part.done", "item_id": item,
            "output_index": 0, "content_index": 0, "part": part}),
    ));
    let status = finished(out);
    bytes.extend(sse(
        Some("response.output_item.done"),
        &json!({"type": "response.output_item.done", "output_index": 0,
            "item": message_item_json(item, status, out)}),
    ));
    let last = format!("response.{status}");
    bytes.extend(sse(
        Some(&last),
        &json!({"type": last, "response": responses_json(ids, status, out)}),
    ));
    bytes
}

#[test]
fn responses_shapes_are_the_json_bytes() {
    let (ids, usage) = (writer_ids(), usage());
    let mut bytes = b"before ".to_vec();
    responses_events::opening(&ids, &mut bytes);
    assert_eq!(
        bytes,
        [&b"before "[..], &opening_json(&ids)].concat(),
        "opening"
    );
    for (text, usage, finish_reason) in [
        ("", None, ""),
        (
            "quote \" back \\ nl \n \u{1} \u{e9}\u{1f600}",
            Some(usage),
            "stop",
        ),
        ("cut sh", Some(usage), "length"),
        ("", None, "content_filter"),
    ] {
        let out = Output {
            text: text.into(),
            reasoning: String::new(),
            finish_reason: finish_reason.into(),
            usage,
            keep_text: true,
        };
        let body = responses_events::body(&ids, &out);
        let json = responses_json(&ids, finished(&out), &out).to_string();
        assert_eq!(String::from_utf8(body).unwrap(), json, "body");
        let mut closing = b"before".to_vec();
        responses_events::closing(&ids, &out, &mut closing);
        assert_eq!(closing[6..], closing_json(&ids, &out), "closing");
    }
}
