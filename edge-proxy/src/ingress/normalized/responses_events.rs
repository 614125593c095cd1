//! The Responses API's JSON shapes, written straight into a buffer: the
//! whole answer of a non-streaming request, and the events that open and
//! close a stream.
//!
//! A stream's closing events carry the answer's whole text four times (the
//! text's `done`, the part's, the item's, and the completed response).
//! Built as `serde_json::Value` trees, each took a copy of the text and
//! ~30 allocations, then a second pass to print it; serde-derived structs
//! after that still escaped every key (~110 strings a stream). Here the
//! text is borrowed, the keys and constants written as they are, and only
//! the strings that vary escaped ([`JsonOut`]).
//!
//! Every object's members are written in sorted order, the order a `Value`
//! object writes them in, so the bytes are those of the `json!` form each
//! replaced (`sse_tests` holds them to it).

use super::{Ids, Output};
use crate::ingress::json_out::{JsonOut, sse_event};
use crate::ingress::openai::ResponsesUsage;

/// A message's text part.
fn output_text(json: &mut JsonOut<'_>, text: &str) {
    json.raw("{\"annotations\":[],\"text\":")
        .str(text)
        .raw(",\"type\":\"output_text\"}");
}

/// The answer's message item: `status` (`in_progress` or `completed`, as
/// written), with its one text part when `text` is given.
fn message_item(json: &mut JsonOut<'_>, ids: &Ids, status: &str, text: Option<&str>) {
    json.raw("{\"content\":[");
    if let Some(text) = text {
        output_text(json, text);
    }
    json.raw("],\"id\":")
        .str(&ids.item_id)
        .raw(",\"role\":\"assistant\",\"status\":\"")
        .raw(status)
        .raw("\",\"type\":\"message\"}");
}

/// A Responses object: the non-streaming answer, or the `response` of a
/// stream's `response.created` (in progress, no output, no usage) and
/// `response.completed` events (`out` given: its text as the one message).
fn response(json: &mut JsonOut<'_>, ids: &Ids, out: Option<&Output>) {
    json.raw("{");
    ids.write_members(json, "created_at", "response");
    json.raw(",\"output\":[");
    if let Some(out) = out {
        message_item(json, ids, "completed", Some(&out.text));
    }
    let status = if out.is_some() {
        "completed"
    } else {
        "in_progress"
    };
    json.raw("],\"status\":\"").raw(status).raw("\",\"usage\":");
    match out.and_then(|out| out.usage.as_ref()) {
        Some(usage) => ResponsesUsage::of(usage).write(json),
        None => {
            json.raw("null");
        }
    }
    json.raw("}");
}

/// An event about the message's one text part: its index members, then
/// what `rest` writes (the members after `output_index`, and `type`).
fn text_event(bytes: &mut Vec<u8>, ids: &Ids, kind: &str, rest: impl FnOnce(&mut JsonOut<'_>)) {
    sse_event(bytes, Some(kind), |json| {
        json.raw("{\"content_index\":0,\"item_id\":")
            .str(&ids.item_id)
            .raw(",\"output_index\":0,");
        rest(json);
        json.raw(",\"type\":\"").raw(kind).raw("\"}");
    });
}

/// The Responses body of a whole (non-stream) answer.
pub(super) fn body(ids: &Ids, out: &Output) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(384 + out.text.len());
    response(&mut JsonOut(&mut bytes), ids, Some(out));
    bytes
}

/// A stream's opening events: the response created (in progress), its
/// message item added, and the item's text part added (empty), into
/// `bytes`.
pub(super) fn opening(ids: &Ids, bytes: &mut Vec<u8>) {
    bytes.reserve(768);
    sse_event(bytes, Some("response.created"), |json| {
        json.raw("{\"response\":");
        response(json, ids, None);
        json.raw(",\"type\":\"response.created\"}");
    });
    sse_event(bytes, Some("response.output_item.added"), |json| {
        json.raw("{\"item\":");
        message_item(json, ids, "in_progress", None);
        json.raw(",\"output_index\":0,\"type\":\"response.output_item.added\"}");
    });
    text_event(bytes, ids, "response.content_part.added", |json| {
        json.raw("\"part\":");
        output_text(json, "");
    });
}

/// A stream's closing events: the text done, its part done, the item done,
/// and the response completed, each with the whole text.
pub(super) fn closing(ids: &Ids, out: &Output, bytes: &mut Vec<u8>) {
    bytes.reserve(1024 + 4 * out.text.len());
    text_event(bytes, ids, "response.output_text.done", |json| {
        json.raw("\"text\":").str(&out.text);
    });
    text_event(bytes, ids, "response.content_part.done", |json| {
        json.raw("\"part\":");
        output_text(json, &out.text);
    });
    sse_event(bytes, Some("response.output_item.done"), |json| {
        json.raw("{\"item\":");
        message_item(json, ids, "completed", Some(&out.text));
        json.raw(",\"output_index\":0,\"type\":\"response.output_item.done\"}");
    });
    sse_event(bytes, Some("response.completed"), |json| {
        json.raw("{\"response\":");
        response(json, ids, Some(out));
        json.raw(",\"type\":\"response.completed\"}");
    });
}
