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
        let delta = ResponsesTextDelta {
            content_index: 0,
            delta: text,
            item_id: &ids.item_id,
            output_index: 0,
            kind: "response.output_text.delta",
        };
        typed_sse(Some("response.output_text.delta"), &delta, &mut typed);
        let value = json!({"type": "response.output_text.delta", "item_id": ids.item_id,
            "output_index": 0, "content_index": 0, "delta": text});
        assert_eq!(typed, sse(Some("response.output_text.delta"), &value));
    }
}
