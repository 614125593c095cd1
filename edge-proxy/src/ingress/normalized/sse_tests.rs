//! The typed per-event shapes of [`super`] against the `json!` form.

use super::*;

fn writer_ids() -> Ids {
    Ids {
        id: "chatcmpl-r\"1".into(),
        item_id: "msg-r1".into(),
        model: "llama3\u{e9}".into(),
        created: 1_700_000_000,
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
            sse(None, &writer.chat_chunk(json!({"content": text}), None))
        );
        let mut typed = Vec::new();
        writer.chat_delta(DeltaText::reasoning(text), &mut typed);
        let value = writer.chat_chunk(json!({"reasoning_content": text}), None);
        assert_eq!(typed, sse(None, &value));
        let mut typed = Vec::new();
        writer.responses_delta(text, &mut typed);
        let value = json!({"type": "response.output_text.delta", "item_id": ids.item_id,
            "output_index": 0, "content_index": 0, "delta": text});
        assert_eq!(typed, sse(Some("response.output_text.delta"), &value));
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
    let ids = writer_ids();
    let usage = proto::v1::Usage {
        input_tokens: 3,
        output_tokens: 2,
        reasoning_tokens: Some(1),
        cached_input_tokens: None,
    };
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

#[test]
fn responses_body_is_the_json_bytes() {
    let ids = writer_ids();
    let usage = proto::v1::Usage {
        input_tokens: 3,
        output_tokens: 2,
        reasoning_tokens: Some(1),
        cached_input_tokens: None,
    };
    assert_eq!(
        responses_usage(&usage),
        json!({"input_tokens": 3, "output_tokens": 2, "total_tokens": 5,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 1}})
    );
    for (text, usage) in [
        ("", None),
        ("quote \" back \\ nl \n \u{1} \u{e9}", Some(usage)),
    ] {
        let out = Output {
            text: text.into(),
            reasoning: String::new(),
            finish_reason: String::new(),
            usage,
            keep_text: true,
        };
        assert_eq!(
            responses_body_bytes(&ids, &out),
            responses_body(&ids, "completed", &out)
                .to_string()
                .into_bytes()
        );
    }
}
