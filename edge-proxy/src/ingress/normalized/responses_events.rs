//! The Responses API's JSON shapes, written straight into a buffer: the
//! whole answer of a non-streaming request, and the events that open and
//! close a stream.
//!
//! A stream's closing events carry the answer's whole text four times (the
//! text's `done`, the part's, the item's, and the completed response).
//! An answer its run cut short (`length`: the output limit; or a content
//! filter) is `incomplete`, as OpenAI's is: its response and message item
//! say so, the response gives the reason in `incomplete_details`, and a
//! stream ends with `response.incomplete` instead of `response.completed`.
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

/// Why an answer is incomplete, in the Responses API's words, when its run
/// ended before the model was done: its output limit (`max_output_tokens`,
/// the run's `length`) or a content filter.
fn incomplete_reason(out: &Output) -> Option<&'static str> {
    match out.finish_reason.as_str() {
        "length" => Some("max_output_tokens"),
        "content_filter" => Some("content_filter"),
        _ => None,
    }
}

/// The status of a finished answer's response and message item.
fn finished_status(out: &Output) -> &'static str {
    match incomplete_reason(out) {
        Some(_) => "incomplete",
        None => "completed",
    }
}

/// The answer's message item: `status` (`in_progress`, `completed` or
/// `incomplete`, as written), with its one text part when `text` is given.
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
/// closing events (`out` given: its text as the one message, `completed`,
/// or `incomplete` with its `incomplete_details`).
fn response(json: &mut JsonOut<'_>, ids: &Ids, out: Option<&Output>) {
    json.raw("{");
    ids.write_time_and_id(json, "created_at");
    if let Some(reason) = out.and_then(incomplete_reason) {
        json.raw(",\"incomplete_details\":{\"reason\":\"")
            .raw(reason)
            .raw("\"}");
    }
    ids.write_model_and_object(json, "response");
    json.raw(",\"output\":[");
    let status = out.map_or("in_progress", finished_status);
    if let Some(out) = out {
        message_item(json, ids, status, Some(&out.text));
    }
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
/// and the response completed (`response.incomplete` when the run stopped
/// at its output limit or a filter), each with the whole text.
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
        message_item(json, ids, finished_status(out), Some(&out.text));
        json.raw(",\"output_index\":0,\"type\":\"response.output_item.done\"}");
    });
    let last = match incomplete_reason(out) {
        Some(_) => "response.incomplete",
        None => "response.completed",
    };
    sse_event(bytes, Some(last), |json| {
        json.raw("{\"response\":");
        response(json, ids, Some(out));
        json.raw(",\"type\":\"").raw(last).raw("\"}");
    });
}
