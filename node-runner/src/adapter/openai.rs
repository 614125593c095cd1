//! `openai_compat` and `vllm`: chat completions over SSE.
//!
//! `POST /v1/chat/completions` with the run's messages, its parameters
//! merged at the top level, `stream: true` and
//! `stream_options.include_usage: true`. Each SSE event is one
//! `chat.completion.chunk`: `choices[0].delta.reasoning_content` (or
//! `delta.reasoning`) → [`RuntimeEvent::ReasoningDelta`],
//! `choices[0].delta.content` → [`RuntimeEvent::Delta`], `finish_reason` and
//! `usage` are kept for the terminal, and `data: [DONE]` →
//! [`RuntimeEvent::Complete`]. An `{"error": …}` event is a provider error.
//!
//! Usage (F18): `prompt_tokens` / `completion_tokens`; the breakdown
//! (`completion_tokens_details.reasoning_tokens`,
//! `prompt_tokens_details.cached_tokens`) is filled only when the provider
//! reported it, for both flavors. Nothing is estimated.

use std::collections::VecDeque;
use std::time::Duration;

use framing::sse::{SseItemRef, SseObserver};
use proto::v1::{FailureCode, FailureSide, ProviderHealth, Usage};
use serde_json::Value;

use super::{
    Adapter, AdapterCapabilities, AdapterConfig, EventStream, ExecuteSpec, Parser, RuntimeEvent,
    TerminateError, failure, json_object, malformed, messages_json, probe,
};
use crate::provider_http::ProviderClient;

/// Chat completions path.
const CHAT_PATH: &str = "/v1/chat/completions";

/// Which OpenAI-compatible server this is. Both parse the same way; the
/// flavor names the instance (and vLLM is where the usage breakdown is
/// expected to show up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenAiFlavor {
    /// Any OpenAI-compatible server.
    OpenAiCompat,
    /// vLLM.
    Vllm,
}

/// The `openai_compat` / `vllm` adapter.
#[derive(Clone, Debug)]
pub struct OpenAiAdapter {
    config: AdapterConfig,
    flavor: OpenAiFlavor,
    client: ProviderClient,
}

impl OpenAiAdapter {
    /// An adapter over `client` (the core's provider client).
    pub fn new(config: AdapterConfig, flavor: OpenAiFlavor, client: ProviderClient) -> Self {
        Self {
            config,
            flavor,
            client,
        }
    }

    /// The instance's settings.
    pub fn config(&self) -> &AdapterConfig {
        &self.config
    }

    /// The flavor.
    pub fn flavor(&self) -> OpenAiFlavor {
        self.flavor
    }

    /// The provider request body for `spec`.
    pub(super) fn body(spec: &ExecuteSpec) -> Result<Vec<u8>, proto::v1::ExecutionFailure> {
        let mut body = json_object(&spec.input.parameters_json, "parameters_json")?;
        body.insert("model".into(), Value::String(spec.target.clone()));
        body.insert("messages".into(), Value::Array(messages_json(&spec.input)?));
        body.insert("stream".into(), Value::Bool(true));
        let options = body
            .entry("stream_options")
            .or_insert_with(|| Value::Object(Default::default()));
        if !options.is_object() {
            *options = Value::Object(Default::default());
        }
        options["include_usage"] = Value::Bool(true);
        Ok(serde_json::to_vec(&Value::Object(body)).unwrap_or_default())
    }
}

impl Adapter for OpenAiAdapter {
    fn capabilities(&self) -> AdapterCapabilities {
        self.config.capabilities(false)
    }

    async fn execute(&self, spec: ExecuteSpec) -> EventStream {
        let request = match self.config.json_request(&spec, CHAT_PATH, Self::body) {
            Ok(request) => request,
            Err(f) => return EventStream::failed(f),
        };
        let request = request.header("accept", "text/event-stream");
        EventStream::open(&self.client, request, Parser::Sse(SseParser::default())).await
    }

    async fn terminate_session(
        &self,
        _target: &str,
        _session_id: &str,
    ) -> Result<(), TerminateError> {
        Err(TerminateError::Unsupported)
    }

    async fn probe_health(&self, target: &str, timeout: Duration) -> ProviderHealth {
        let liveness = match self.flavor {
            OpenAiFlavor::OpenAiCompat => None,
            OpenAiFlavor::Vllm => Some(probe::VLLM_HEALTH_PATH),
        };
        let plan = probe::ProbePlan::new(&self.config, liveness, probe::Listing::OpenAiModels);
        probe::probe_target(&self.client, &self.config, &plan, target, timeout).await
    }
}

/// Incremental parser of a chat-completions SSE body.
#[derive(Debug, Default)]
pub(super) struct SseParser {
    sse: SseObserver,
    state: ChunkState,
}

/// What the chunks so far left for the terminal.
#[derive(Debug, Default)]
struct ChunkState {
    finish_reason: String,
    usage: Option<Usage>,
    done: bool,
}

impl SseParser {
    /// Parses `chunk`; true once a terminal was pushed. Input after the
    /// terminal is ignored.
    pub(super) fn feed(&mut self, chunk: &[u8], out: &mut VecDeque<RuntimeEvent>) -> bool {
        let state = &mut self.state;
        if state.done {
            return true;
        }
        let mut failed = None;
        let result = self.sse.feed(chunk, |item| {
            let SseItemRef::Event(event) = item else {
                return;
            };
            if state.done || failed.is_some() {
                return;
            }
            if event.is_done() {
                state.done = true;
                out.push_back(RuntimeEvent::Complete {
                    finish_reason: std::mem::take(&mut state.finish_reason),
                    usage: state.usage.take(),
                });
                return;
            }
            match serde_json::from_slice::<Value>(event.data) {
                Ok(value) => {
                    if let Err(f) = state.chunk(&value, out) {
                        failed = Some(f);
                    }
                }
                Err(e) => failed = Some(malformed(format_args!("chunk is not JSON ({e})"))),
            }
        });
        if let Err(e) = result
            && !state.done
        {
            failed.get_or_insert_with(|| malformed(e));
        }
        if let Some(f) = failed {
            state.done = true;
            out.push_back(RuntimeEvent::Error(f));
        }
        state.done
    }

    /// End of body: a terminal unless `[DONE]` was seen.
    pub(super) fn finish(&mut self, out: &mut VecDeque<RuntimeEvent>) {
        if !self.state.done {
            self.state.done = true;
            out.push_back(RuntimeEvent::Error(failure(
                FailureCode::ProviderUnreachable,
                FailureSide::Provider,
                "provider stream ended before [DONE]",
            )));
        }
    }
}

impl ChunkState {
    /// One `chat.completion.chunk`.
    fn chunk(
        &mut self,
        value: &Value,
        out: &mut VecDeque<RuntimeEvent>,
    ) -> Result<(), proto::v1::ExecutionFailure> {
        if !value.is_object() {
            return Err(malformed("chunk is not a JSON object"));
        }
        if let Some(error) = value.get("error") {
            let kind = error
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("unknown");
            return Err(failure(
                FailureCode::ProviderHttpStatus,
                FailureSide::Provider,
                format!("provider reported an error mid-stream (type {kind})"),
            ));
        }
        if let Some(choice) = value
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        {
            let delta = choice.get("delta");
            let text = |key: &str| {
                delta
                    .and_then(|d| d.get(key))
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
            };
            if let Some(reasoning) = text("reasoning_content").or_else(|| text("reasoning")) {
                out.push_back(RuntimeEvent::ReasoningDelta(reasoning.to_owned()));
            }
            if let Some(content) = text("content") {
                out.push_back(RuntimeEvent::Delta(content.to_owned()));
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                reason.clone_into(&mut self.finish_reason);
            }
        }
        if let Some(usage) = value.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage_of(usage));
        }
        Ok(())
    }
}

/// The usage of an OpenAI `usage` object; breakdown only when present.
pub(super) fn usage_of(usage: &Value) -> Usage {
    let count = |v: Option<&Value>| v.and_then(Value::as_u64);
    Usage {
        input_tokens: count(usage.get("prompt_tokens")).unwrap_or(0),
        output_tokens: count(usage.get("completion_tokens")).unwrap_or(0),
        reasoning_tokens: count(usage.pointer("/completion_tokens_details/reasoning_tokens")),
        cached_input_tokens: count(usage.pointer("/prompt_tokens_details/cached_tokens")),
    }
}
