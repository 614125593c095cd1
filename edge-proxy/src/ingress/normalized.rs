//! Normalized runs for OpenAI clients (F17): a leased Ollama-kind provider
//! runs the request as a `RunRequest`, and its typed events become Chat
//! Completions chunks / Responses events (or one JSON body).
//!
//! - Nothing is written until the run's first event, so a run refused on
//!   the node (over capacity, unknown target, provider down before
//!   answering) is a proper HTTP error, not a 200 with an error inside.
//! - Once streaming, a failure is an SSE `error` event and the stream ends
//!   without `[DONE]`, which the `openai` clients raise as an error.
//! - A client that leaves drops the run stream, which cancels the run on
//!   the node (and its provider request); the lease is dropped with it.

use bytes::Bytes;
use proto::v1::{RunEvent, RunEventKind, Usage};
use serde_json::{Value, json};

use super::error::{ApiError, from_failure};
use super::http::Responder;
use super::openai::{self, ParsedRequest, chat_usage, responses_usage, sse};
use super::{Api, IngressShared, unix_s};
use crate::dispatch::{RunStream, SubmitRun};
use crate::pool::Lease;

/// What the run produced, for the non-stream body.
#[derive(Debug, Default)]
struct Output {
    text: String,
    reasoning: String,
    finish_reason: String,
    usage: Option<Usage>,
}

/// Serves one request as a normalized run; returns the status answered.
pub(crate) async fn serve(
    shared: &IngressShared,
    api: Api,
    request: ParsedRequest,
    lease: Lease,
    responder: &mut Responder,
) -> u16 {
    let input = match api {
        Api::Chat => openai::chat_input(&request),
        Api::Responses => openai::responses_input(&request),
    };
    let input = match input {
        Ok(input) => input,
        Err(error) => {
            responder.error(&error).await;
            return error.status;
        }
    };
    let run = SubmitRun {
        input,
        response_stall_timeout_ms: lease.provider().response_stall_timeout_ms,
        ..SubmitRun::default()
    };
    let mut stream = match shared.dispatcher.submit_leased(&lease, run).await {
        Ok(stream) => stream,
        Err(error) => {
            let error = ApiError::from(error);
            responder.error(&error).await;
            return error.status;
        }
    };
    // Wait for the first event before answering anything.
    let first = monoio::select! {
        event = stream.next() => event,
        _ = responder.gone() => None,
    };
    let Some(first) = first else {
        super::release_after_end(stream, lease);
        return 499;
    };
    if first.kind() == RunEventKind::Error {
        let error = first.failure.as_ref().map_or_else(
            || ApiError::new(502, "server_error", "upstream_error", "the run failed"),
            from_failure,
        );
        responder.error(&error).await;
        return error.status;
    }
    let ids = Ids::new(api, stream.run_id(), &request.model);
    let mut out = Output::default();
    let status = if request.stream {
        responder
            .start_stream(200, [("content-type", b"text/event-stream".as_slice())])
            .await;
        let mut writer = SseWriter {
            api,
            ids: &ids,
            include_usage: request.include_usage,
            started: false,
        };
        stream_events(&mut writer, &mut stream, first, &mut out, responder).await
    } else {
        collect(&mut stream, first, &mut out, responder).await
    };
    if status == 499 {
        super::release_after_end(stream, lease);
        return status;
    }
    if let Some(usage) = out.usage.as_ref() {
        super::record_usage(shared, &lease, usage);
    }
    if !request.stream && status == 200 {
        let body = match api {
            Api::Chat => chat_json(&ids, &out),
            Api::Responses => responses_json(&ids, &out),
        };
        responder
            .full(200, "application/json", body.to_string().into_bytes())
            .await;
    }
    status
}

/// The ids and timestamps one response carries.
#[derive(Debug)]
struct Ids {
    id: String,
    item_id: String,
    model: String,
    created: u64,
}

impl Ids {
    fn new(api: Api, run_id: &str, model: &str) -> Self {
        let prefix = match api {
            Api::Chat => "chatcmpl",
            Api::Responses => "resp",
        };
        Self {
            id: format!("{prefix}-{run_id}"),
            item_id: format!("msg-{run_id}"),
            model: model.to_owned(),
            created: unix_s(),
        }
    }
}

/// Applies one event to the accumulated output; `Some` at a terminal, with
/// the failure to report (if any).
fn apply(event: &RunEvent, out: &mut Output) -> Option<Result<(), ApiError>> {
    match event.kind() {
        RunEventKind::Delta => out.text.push_str(&event.text),
        RunEventKind::ReasoningDelta => out.reasoning.push_str(&event.text),
        RunEventKind::Usage => out.usage = event.usage,
        RunEventKind::Complete => {
            out.finish_reason = event.finish_reason.clone();
            if event.usage.is_some() {
                out.usage = event.usage;
            }
            return Some(Ok(()));
        }
        RunEventKind::Error => {
            let error = event.failure.as_ref().map_or_else(
                || ApiError::new(502, "server_error", "upstream_error", "the run failed"),
                from_failure,
            );
            return Some(Err(error));
        }
        RunEventKind::Cancelled => {
            return Some(Err(ApiError::new(
                503,
                "server_error",
                "cancelled",
                "the run was cancelled",
            )));
        }
        RunEventKind::Start | RunEventKind::Unspecified => {}
    }
    None
}

/// Non-stream: reads to the terminal; 200, or the failure's error answer.
async fn collect(
    stream: &mut RunStream,
    first: RunEvent,
    out: &mut Output,
    responder: &mut Responder,
) -> u16 {
    let mut event = Some(first);
    while let Some(current) = event {
        match apply(&current, out) {
            Some(Ok(())) => return 200,
            Some(Err(error)) => {
                responder.error(&error).await;
                return error.status;
            }
            None => {}
        }
        event = monoio::select! {
            next = stream.next() => next,
            _ = responder.gone() => return 499,
        };
    }
    499
}

/// Stream: writes each event as it arrives.
async fn stream_events(
    writer: &mut SseWriter<'_>,
    stream: &mut RunStream,
    first: RunEvent,
    out: &mut Output,
    responder: &mut Responder,
) -> u16 {
    let mut event = Some(first);
    while let Some(current) = event {
        let terminal = apply(&current, out);
        let bytes = writer.event(&current, out, terminal.as_ref());
        responder.chunk(Bytes::from(bytes)).await;
        if responder.is_gone() {
            return 499;
        }
        if let Some(result) = terminal {
            responder.finish().await;
            return match result {
                Ok(()) => 200,
                Err(error) => error.status,
            };
        }
        event = monoio::select! {
            next = stream.next() => next,
            _ = responder.gone() => return 499,
        };
    }
    responder.close_after();
    499
}

/// Turns run events into the API's SSE events.
struct SseWriter<'a> {
    api: Api,
    ids: &'a Ids,
    include_usage: bool,
    started: bool,
}

impl SseWriter<'_> {
    fn event(
        &mut self,
        event: &RunEvent,
        out: &Output,
        terminal: Option<&Result<(), ApiError>>,
    ) -> Vec<u8> {
        let mut bytes = Vec::new();
        if !self.started {
            self.started = true;
            bytes.extend(self.opening());
        }
        if let Some(Err(error)) = terminal {
            let body = json!({"error": {"message": error.message, "type": error.kind, "code": error.code}});
            let name = (self.api == Api::Responses).then_some("error");
            bytes.extend(sse(name, &body));
            return bytes;
        }
        match self.api {
            Api::Chat => self.chat(event, out, terminal.is_some(), &mut bytes),
            Api::Responses => self.responses(event, out, terminal.is_some(), &mut bytes),
        }
        bytes
    }

    fn chat_chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.ids.id, "object": "chat.completion.chunk", "created": self.ids.created,
            "model": self.ids.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
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
                bytes.extend(sse(
                    None,
                    &self.chat_chunk(json!({"content": event.text}), None),
                ));
            }
            RunEventKind::ReasoningDelta => bytes.extend(sse(
                None,
                &self.chat_chunk(json!({"reasoning_content": event.text}), None),
            )),
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
            RunEventKind::Delta => bytes.extend(sse(
                Some("response.output_text.delta"),
                &json!({"type": "response.output_text.delta", "item_id": item,
                    "output_index": 0, "content_index": 0, "delta": event.text}),
            )),
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

fn responses_json(ids: &Ids, out: &Output) -> Value {
    responses_body(ids, "completed", out)
}
