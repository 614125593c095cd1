//! The OpenAI shapes of a normalized run's events: the SSE events of a
//! stream (Chat Completions chunks, Responses events) and the JSON body of
//! a whole answer.

use json_escape_simd::escape_into;
use proto::v1::{RunEvent, RunEventKind};
use serde::Serialize;
use serde_json::{Value, json};

use super::{Ids, Output};
use crate::dispatch::run_event_text;
use crate::ingress::Api;
use crate::ingress::error::ApiError;
use crate::ingress::gate::error_event;
use crate::ingress::openai::{ChatUsage, ResponsesUsage, chat_usage, responses_usage, sse};

/// Turns run events into the API's SSE events.
pub(super) struct SseWriter<'a> {
    pub(super) api: Api,
    pub(super) ids: &'a Ids,
    pub(super) include_usage: bool,
    pub(super) started: bool,
}

impl SseWriter<'_> {
    /// Writes `event` (the terminal's failure, if any, as an error event)
    /// as the API's SSE events into `bytes`.
    pub(super) fn event(
        &mut self,
        event: &RunEvent,
        out: &Output,
        terminal: Option<&Result<(), ApiError>>,
        bytes: &mut Vec<u8>,
    ) {
        if !self.started {
            self.started = true;
            bytes.extend(self.opening());
        }
        if let Some(Err(error)) = terminal {
            bytes.extend(error_event(self.api, error));
            return;
        }
        match self.api {
            Api::Chat => self.chat(event, out, terminal.is_some(), bytes),
            Api::Responses => self.responses(event, out, terminal.is_some(), bytes),
        }
    }

    fn chat_chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.ids.id, "object": "chat.completion.chunk", "created": self.ids.created,
            "model": self.ids.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    }

    /// One delta chunk, written in place (the per-event path: no `Value`
    /// tree, no intermediate string). The chunk's shape is fixed, so its
    /// keys and constants are written as they are and only the three
    /// strings that vary (the text, the id, the model) are escaped, with
    /// `json_escape_simd` (6–10 ns a short string here, against serde_json's
    /// 14–43). The bytes are those of the `json!` form (`sse_tests`).
    fn chat_delta(&self, delta: DeltaText<'_>, bytes: &mut Vec<u8>) {
        bytes.extend_from_slice(b"data: {\"choices\":[{\"delta\":{\"");
        bytes.extend_from_slice(delta.key.as_bytes());
        bytes.extend_from_slice(b"\":");
        escape_into(delta.text, bytes);
        bytes.extend_from_slice(b"},\"finish_reason\":null,\"index\":0}],\"created\":");
        // A number into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *bytes, &self.ids.created);
        bytes.extend_from_slice(b",\"id\":");
        escape_into(&self.ids.id, bytes);
        bytes.extend_from_slice(b",\"model\":");
        escape_into(&self.ids.model, bytes);
        bytes.extend_from_slice(b",\"object\":\"chat.completion.chunk\"}\n\n");
    }

    /// One Responses `response.output_text.delta` event, written in place
    /// like [`Self::chat_delta`].
    fn responses_delta(&self, text: &str, bytes: &mut Vec<u8>) {
        bytes.extend_from_slice(
            b"event: response.output_text.delta\ndata: {\"content_index\":0,\"delta\":",
        );
        escape_into(text, bytes);
        bytes.extend_from_slice(b",\"item_id\":");
        escape_into(&self.ids.item_id, bytes);
        bytes
            .extend_from_slice(b",\"output_index\":0,\"type\":\"response.output_text.delta\"}\n\n");
    }

    fn opening(&self) -> Vec<u8> {
        match self.api {
            Api::Chat => sse(
                None,
                &self.chat_chunk(json!({"role": "assistant", "content": ""}), None),
            ),
            Api::Responses => {
                let response = self.response_object("in_progress", &Output::default());
                let mut bytes = sse(
                    Some("response.created"),
                    &json!({"type": "response.created", "response": response}),
                );
                bytes.extend(sse(
                    Some("response.output_item.added"),
                    &json!({"type": "response.output_item.added", "output_index": 0,
                        "item": {"type": "message", "id": self.ids.item_id, "status": "in_progress",
                                 "role": "assistant", "content": []}}),
                ));
                bytes.extend(sse(
                    Some("response.content_part.added"),
                    &json!({"type": "response.content_part.added", "item_id": self.ids.item_id,
                        "output_index": 0, "content_index": 0,
                        "part": {"type": "output_text", "text": "", "annotations": []}}),
                ));
                bytes
            }
        }
    }

    fn chat(&self, event: &RunEvent, out: &Output, terminal: bool, bytes: &mut Vec<u8>) {
        match event.kind() {
            RunEventKind::Delta => {
                self.chat_delta(DeltaText::content(run_event_text(event)), bytes)
            }
            RunEventKind::ReasoningDelta => {
                self.chat_delta(DeltaText::reasoning(run_event_text(event)), bytes);
            }
            _ if terminal => {
                let finish = if out.finish_reason.is_empty() {
                    "stop"
                } else {
                    &out.finish_reason
                };
                bytes.extend(sse(None, &self.chat_chunk(json!({}), Some(finish))));
                if let (true, Some(usage)) = (self.include_usage, out.usage.as_ref()) {
                    let mut chunk = self.chat_chunk(json!({}), None);
                    chunk["choices"] = json!([]);
                    chunk["usage"] = chat_usage(usage);
                    bytes.extend(sse(None, &chunk));
                }
                bytes.extend_from_slice(b"data: [DONE]\n\n");
            }
            _ => {}
        }
    }

    fn responses(&self, event: &RunEvent, out: &Output, terminal: bool, bytes: &mut Vec<u8>) {
        let item = &self.ids.item_id;
        match event.kind() {
            RunEventKind::Delta => self.responses_delta(run_event_text(event), bytes),
            _ if terminal => {
                let part = json!({"type": "output_text", "text": out.text, "annotations": []});
                bytes.extend(sse(
                    Some("response.output_text.done"),
                    &json!({"type": "response.output_text.done", "item_id": item,
                        "output_index": 0, "content_index": 0, "text": out.text}),
                ));
                bytes.extend(sse(
                    Some("response.content_part.done"),
                    &json!({"type": "response.content_part.done", "item_id": item,
                        "output_index": 0, "content_index": 0, "part": part}),
                ));
                bytes.extend(sse(
                    Some("response.output_item.done"),
                    &json!({"type": "response.output_item.done", "output_index": 0,
                        "item": message_item(item, out)}),
                ));
                bytes.extend(sse(
                    Some("response.completed"),
                    &json!({"type": "response.completed",
                        "response": self.response_object("completed", out)}),
                ));
            }
            _ => {}
        }
    }

    fn response_object(&self, status: &str, out: &Output) -> Value {
        responses_body(self.ids, status, out)
    }
}

/// A chunk's delta: answer text (`content`) or reasoning text
/// (`reasoning_content`).
struct DeltaText<'a> {
    key: &'static str,
    text: &'a str,
}

impl<'a> DeltaText<'a> {
    fn content(text: &'a str) -> Self {
        Self {
            key: "content",
            text,
        }
    }

    fn reasoning(text: &'a str) -> Self {
        Self {
            key: "reasoning_content",
            text,
        }
    }
}

fn message_item(item_id: &str, out: &Output) -> Value {
    json!({"type": "message", "id": item_id, "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": out.text, "annotations": []}]})
}

fn responses_body(ids: &Ids, status: &str, out: &Output) -> Value {
    let output = if status == "completed" {
        json!([message_item(&ids.item_id, out)])
    } else {
        json!([])
    };
    json!({
        "id": ids.id, "object": "response", "created_at": ids.created, "status": status,
        "model": ids.model, "output": output,
        "usage": out.usage.as_ref().map(responses_usage),
    })
}

/// The Chat Completions body of a whole (non-stream) answer, serialized in
/// one buffer: the bytes of the `json!` form (`chat_body_is_the_json_bytes`)
/// without a `Value` tree (~25 allocations) first.
pub(super) fn chat_body(ids: &Ids, out: &Output) -> Vec<u8> {
    let body = ChatBody {
        choices: [ChatChoice {
            finish_reason: if out.finish_reason.is_empty() {
                "stop"
            } else {
                &out.finish_reason
            },
            index: 0,
            message: ChatMessage {
                content: &out.text,
                reasoning_content: (!out.reasoning.is_empty()).then_some(out.reasoning.as_str()),
                role: "assistant",
            },
        }],
        created: ids.created,
        id: &ids.id,
        model: &ids.model,
        object: "chat.completion",
        usage: out.usage.as_ref().map(ChatUsage::of),
    };
    let mut bytes = Vec::with_capacity(256 + out.text.len() + out.reasoning.len());
    // Strings, numbers and a `Value` into a Vec: cannot fail.
    let _ = serde_json::to_writer(&mut bytes, &body);
    bytes
}

/// A whole Chat Completions answer (fields in `Value`'s sorted order).
#[derive(Serialize)]
struct ChatBody<'a> {
    choices: [ChatChoice<'a>; 1],
    created: u64,
    id: &'a str,
    model: &'a str,
    object: &'static str,
    usage: Option<ChatUsage>,
}

/// Its one choice.
#[derive(Serialize)]
struct ChatChoice<'a> {
    finish_reason: &'a str,
    index: u32,
    message: ChatMessage<'a>,
}

/// The choice's message.
#[derive(Serialize)]
struct ChatMessage<'a> {
    content: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    role: &'static str,
}

/// The Responses body of a whole (non-stream) answer, serialized in one
/// buffer: the bytes of [`responses_body`]'s `Value` (`responses_body_is_
/// the_json_bytes`) without building it first (~30 allocations, a fifth of
/// the Edge's instructions on a small Responses request).
pub(super) fn responses_body_bytes(ids: &Ids, out: &Output) -> Vec<u8> {
    let body = ResponsesBody {
        created_at: ids.created,
        id: &ids.id,
        model: &ids.model,
        object: "response",
        output: [MessageItem {
            content: [OutputText {
                annotations: [],
                text: &out.text,
                kind: "output_text",
            }],
            id: &ids.item_id,
            role: "assistant",
            status: "completed",
            kind: "message",
        }],
        status: "completed",
        usage: out.usage.as_ref().map(ResponsesUsage::of),
    };
    let mut bytes = Vec::with_capacity(384 + out.text.len());
    // Strings, numbers and arrays into a Vec: cannot fail.
    let _ = serde_json::to_writer(&mut bytes, &body);
    bytes
}

/// A whole Responses answer (fields in `Value`'s sorted order).
#[derive(Serialize)]
struct ResponsesBody<'a> {
    created_at: u64,
    id: &'a str,
    model: &'a str,
    object: &'static str,
    output: [MessageItem<'a>; 1],
    status: &'static str,
    usage: Option<ResponsesUsage>,
}

/// Its one output item: the assistant's message.
#[derive(Serialize)]
struct MessageItem<'a> {
    content: [OutputText<'a>; 1],
    id: &'a str,
    role: &'static str,
    status: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// The message's text.
#[derive(Serialize)]
struct OutputText<'a> {
    annotations: [(); 0],
    text: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
