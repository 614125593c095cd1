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

use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::Duration;

use framing::sse::{SseItemRef, SseObserver};
use proto::v1::{FailureCode, FailureSide, ProviderHealth, Usage};
use serde_json::{Map, Value};

use super::body_fields::{Fields, Member};
use super::{
    Adapter, AdapterCapabilities, AdapterConfig, EventStream, ExecuteSpec, Parser, RuntimeEvent,
    TerminateError, failure, malformed, probe, request_body,
};
use crate::provider_http::ProviderClient;

mod chunk;
use chunk::{Chunk, ChunkJson};

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
    pub(super) fn body(
        spec: &ExecuteSpec,
    ) -> Result<crate::provider_http::RequestBody, proto::v1::ExecutionFailure> {
        let mut body = Fields::parameters(&spec.input)?;
        body.insert("model", Value::String(spec.target.clone()));
        body.insert("stream", Value::Bool(true));
        let mut options = match body.remove("stream_options").map(Member::into_value) {
            Some(Value::Object(options)) => options,
            _ => Map::new(),
        };
        options.insert("include_usage".into(), Value::Bool(true));
        body.insert("stream_options", Value::Object(options));
        request_body::with_messages(body, &spec.input)
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

    async fn probe_health(
        &self,
        target: &str,
        timeout: Duration,
        credential: Option<&crate::lease::OpenedCredential>,
    ) -> ProviderHealth {
        let liveness = match self.flavor {
            OpenAiFlavor::OpenAiCompat => None,
            OpenAiFlavor::Vllm => Some(probe::VLLM_HEALTH_PATH),
        };
        let plan = probe::ProbePlan::new(&self.config, liveness, probe::Listing::OpenAiModels);
        probe::probe_target(
            &self.client,
            &self.config,
            &plan,
            target,
            timeout,
            credential,
        )
        .await
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
            // UTF-8 first, as a `Value` parse checked it (skipped fields too);
            // `simdutf8` as every provider line and body (`compat`: the error
            // says where).
            let parsed = simdutf8::compat::from_utf8(event.data)
                .map_err(|e| malformed(format_args!("chunk is not JSON ({e})")))
                .and_then(|data| {
                    ChunkJson::parse(data)
                        .map_err(|e| malformed(format_args!("chunk is not JSON ({e})")))
                });
            match parsed {
                Ok(ChunkJson::Object(chunk)) => {
                    if let Err(f) = state.chunk(chunk, out) {
                        failed = Some(f);
                    }
                }
                Ok(ChunkJson::NotObject) => failed = Some(malformed("chunk is not a JSON object")),
                Err(f) => failed = Some(f),
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
        chunk: Chunk<'_>,
        out: &mut VecDeque<RuntimeEvent>,
    ) -> Result<(), proto::v1::ExecutionFailure> {
        if let Some(error) = chunk.error {
            let kind = error.kind.as_deref().unwrap_or("unknown");
            return Err(failure(
                FailureCode::ProviderHttpStatus,
                FailureSide::Provider,
                format!("provider reported an error mid-stream (type {kind})"),
            ));
        }
        if let Some(choice) = chunk.choice {
            if let Some(reasoning) =
                non_empty(choice.reasoning_content).or_else(|| non_empty(choice.reasoning))
            {
                out.push_back(RuntimeEvent::ReasoningDelta(reasoning.into_owned()));
            }
            if let Some(content) = non_empty(choice.content) {
                out.push_back(RuntimeEvent::Delta(content.into_owned()));
            }
            if let Some(reason) = choice.finish_reason {
                reason.as_ref().clone_into(&mut self.finish_reason);
            }
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.into());
        }
        Ok(())
    }
}

/// `text` unless it is empty.
fn non_empty(text: Option<Cow<'_, str>>) -> Option<Cow<'_, str>> {
    text.filter(|s| !s.is_empty())
}

/// The usage of an OpenAI `usage` object; breakdown only when present.
#[cfg(test)]
pub(super) fn usage_of(usage: &Value) -> Usage {
    chunk::usage_from(usage)
        .ok()
        .flatten()
        .map(Usage::from)
        .unwrap_or_default()
}
