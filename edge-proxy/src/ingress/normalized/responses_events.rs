//! The Responses API's JSON shapes as typed structs, serialized straight
//! into a buffer: the whole answer of a non-streaming request, and the
//! events that open and close a stream.
//!
//! A stream's closing events carry the answer's whole text four times (the
//! text's `done`, the part's, the item's, and the completed response).
//! Built as `serde_json::Value` trees, each took a copy of the text and
//! ~30 allocations, then a second pass to print it. Here the text is
//! borrowed and written once an event, escaped as it goes.
//!
//! Every struct's members are declared in sorted order, the order a
//! `Value` object writes them in, so the bytes are those of the `json!`
//! form each replaced (`sse_tests` holds them to it).

use serde::Serialize;

use super::{Ids, Output};
use crate::ingress::openai::{ResponsesUsage, write_sse};

/// A Responses object: the non-streaming answer, or the `response` of a
/// stream's `response.created` and `response.completed` events.
#[derive(Serialize)]
struct Response<'a> {
    created_at: u64,
    id: &'a str,
    model: &'a str,
    object: &'static str,
    /// The answer's message once completed; empty before.
    output: &'a [MessageItem<'a>],
    status: &'static str,
    usage: Option<ResponsesUsage>,
}

/// An output item: the assistant's message.
#[derive(Serialize)]
struct MessageItem<'a> {
    /// Its text once there is one; empty when the item is added.
    content: &'a [OutputText<'a>],
    id: &'a str,
    role: &'static str,
    status: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// A message's text part.
#[derive(Serialize)]
struct OutputText<'a> {
    annotations: [(); 0],
    text: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// A stream event: its `type` and the members it has.
#[derive(Serialize, Default)]
struct Event<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    content_index: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    item: Option<MessageItem<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    item_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_index: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    part: Option<OutputText<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<Response<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(rename = "type")]
    kind: &'static str,
}

fn output_text(text: &str) -> OutputText<'_> {
    OutputText {
        annotations: [],
        text,
        kind: "output_text",
    }
}

fn message_item<'a>(
    ids: &'a Ids,
    status: &'static str,
    content: &'a [OutputText<'a>],
) -> MessageItem<'a> {
    MessageItem {
        content,
        id: &ids.item_id,
        role: "assistant",
        status,
        kind: "message",
    }
}

fn response<'a>(
    ids: &'a Ids,
    status: &'static str,
    output: &'a [MessageItem<'a>],
    out: &Output,
) -> Response<'a> {
    Response {
        created_at: ids.created,
        id: &ids.id,
        model: &ids.model,
        object: "response",
        output,
        status,
        usage: out.usage.as_ref().map(ResponsesUsage::of),
    }
}

/// An event of `kind` about the message's one text part.
fn text_event<'a>(ids: &'a Ids, kind: &'static str) -> Event<'a> {
    Event {
        content_index: Some(0),
        item_id: Some(&ids.item_id),
        output_index: Some(0),
        kind,
        ..Event::default()
    }
}

/// Writes `events` as SSE events, each named by its type.
fn write_events(bytes: &mut Vec<u8>, events: &[Event<'_>]) {
    for event in events {
        write_sse(bytes, Some(event.kind), event);
    }
}

/// The Responses body of a whole (non-stream) answer.
pub(super) fn body(ids: &Ids, out: &Output) -> Vec<u8> {
    let content = [output_text(&out.text)];
    let item = [message_item(ids, "completed", &content)];
    let mut bytes = Vec::with_capacity(384 + out.text.len());
    // Strings, numbers and arrays into a Vec: cannot fail.
    let _ = serde_json::to_writer(&mut bytes, &response(ids, "completed", &item, out));
    bytes
}

/// A stream's opening events: the response created (in progress), its
/// message item added, and the item's text part added (empty), into
/// `bytes`.
pub(super) fn opening(ids: &Ids, bytes: &mut Vec<u8>) {
    bytes.reserve(768);
    let none = Output::default();
    let events = [
        Event {
            response: Some(response(ids, "in_progress", &[], &none)),
            kind: "response.created",
            ..Event::default()
        },
        Event {
            item: Some(message_item(ids, "in_progress", &[])),
            output_index: Some(0),
            kind: "response.output_item.added",
            ..Event::default()
        },
        Event {
            part: Some(output_text("")),
            ..text_event(ids, "response.content_part.added")
        },
    ];
    write_events(bytes, &events);
}

/// A stream's closing events: the text done, its part done, the item done,
/// and the response completed, each with the whole text.
pub(super) fn closing(ids: &Ids, out: &Output, bytes: &mut Vec<u8>) {
    let content = [output_text(&out.text)];
    let item = [message_item(ids, "completed", &content)];
    bytes.reserve(1024 + 4 * out.text.len());
    let events = [
        Event {
            text: Some(&out.text),
            ..text_event(ids, "response.output_text.done")
        },
        Event {
            part: Some(output_text(&out.text)),
            ..text_event(ids, "response.content_part.done")
        },
        Event {
            item: Some(message_item(ids, "completed", &content)),
            output_index: Some(0),
            kind: "response.output_item.done",
            ..Event::default()
        },
        Event {
            response: Some(response(ids, "completed", &item, out)),
            kind: "response.completed",
            ..Event::default()
        },
    ];
    write_events(bytes, &events);
}
