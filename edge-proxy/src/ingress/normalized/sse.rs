//! The OpenAI shapes of a normalized run's events: the SSE events of a
//! stream (Chat Completions chunks, Responses events) and the JSON body of
//! a whole answer.

use json_escape_simd::escape_into;
use proto::v1::{RunEvent, RunEventKind, Usage};

use super::responses_events;
use super::{Ids, Output};
use crate::dispatch::run_event_text;
use crate::ingress::Api;
use crate::ingress::error::ApiError;
use crate::ingress::gate::error_event;
use crate::ingress::json_out::{JsonOut, sse_event};
use crate::ingress::openai::ChatUsage;

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
            self.opening(bytes);
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

    /// A chat chunk that is not a text's: the opening (the role), the
    /// finish, or the usage (no choice).
    fn chat_chunk(
        &self,
        choice: Option<ChunkChoice<'_>>,
        usage: Option<&Usage>,
        bytes: &mut Vec<u8>,
    ) {
        sse_event(bytes, None, |json| {
            json.raw("{\"choices\":[");
            if let Some(choice) = choice {
                json.raw("{\"delta\":")
                    .raw(choice.delta)
                    .raw(",\"finish_reason\":");
                match choice.finish_reason {
                    Some(reason) => json.str(reason),
                    None => json.raw("null"),
                };
                json.raw(",\"index\":0}");
            }
            json.raw("],");
            self.ids
                .write_members(json, "created", "chat.completion.chunk");
            if let Some(usage) = usage {
                json.raw(",\"usage\":");
                ChatUsage::of(usage).write(json);
            }
            json.raw("}");
        });
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

    /// The stream's opening events, into `bytes`.
    fn opening(&self, bytes: &mut Vec<u8>) {
        match self.api {
            Api::Chat => {
                let choice = ChunkChoice {
                    delta: OPENING_DELTA,
                    finish_reason: None,
                };
                self.chat_chunk(Some(choice), None, bytes);
            }
            Api::Responses => responses_events::opening(self.ids, bytes),
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
                let choice = ChunkChoice {
                    delta: "{}",
                    finish_reason: Some(finish),
                };
                self.chat_chunk(Some(choice), None, bytes);
                if let (true, Some(usage)) = (self.include_usage, out.usage.as_ref()) {
                    self.chat_chunk(None, Some(usage), bytes);
                }
                bytes.extend_from_slice(b"data: [DONE]\n\n");
            }
            _ => {}
        }
    }

    fn responses(&self, event: &RunEvent, out: &Output, terminal: bool, bytes: &mut Vec<u8>) {
        match event.kind() {
            RunEventKind::Delta => self.responses_delta(run_event_text(event), bytes),
            _ if terminal => responses_events::closing(self.ids, out, bytes),
            _ => {}
        }
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

/// The Chat Completions body of a whole (non-stream) answer, written in
/// one buffer: the bytes of the `json!` form (`chat_body_is_the_json_bytes`)
/// without a `Value` tree (~25 allocations) first.
pub(super) fn chat_body(ids: &Ids, out: &Output) -> Vec<u8> {
    let finish = if out.finish_reason.is_empty() {
        "stop"
    } else {
        &out.finish_reason
    };
    // The members around the texts: ~350 bytes with a model name and the
    // usage's details (256 was a `realloc` of the whole body a request),
    // and an eighth more for the texts' escapes.
    let texts = out.text.len() + out.reasoning.len();
    let mut bytes = Vec::with_capacity(512 + texts + texts / 8);
    let json = &mut JsonOut(&mut bytes);
    json.raw("{\"choices\":[{\"finish_reason\":")
        .str(finish)
        .raw(",\"index\":0,\"message\":{\"content\":")
        .str(&out.text);
    if !out.reasoning.is_empty() {
        json.raw(",\"reasoning_content\":").str(&out.reasoning);
    }
    json.raw(",\"role\":\"assistant\"}}],");
    ids.write_members(json, "created", "chat.completion");
    json.raw(",\"usage\":");
    match &out.usage {
        Some(usage) => ChatUsage::of(usage).write(json),
        None => {
            json.raw("null");
        }
    }
    json.raw("}");
    bytes
}

/// The delta of a stream's opening chunk: the role, and an empty text.
const OPENING_DELTA: &str = "{\"content\":\"\",\"role\":\"assistant\"}";

/// A chunk's one choice: its delta (JSON text as written) and finish
/// reason.
struct ChunkChoice<'a> {
    delta: &'static str,
    finish_reason: Option<&'a str>,
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
