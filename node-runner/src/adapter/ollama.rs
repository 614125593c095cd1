//! `ollama`: the native `/api/chat` NDJSON stream.
//!
//! Each line is one JSON object: `message.thinking` →
//! [`RuntimeEvent::ReasoningDelta`], `message.content` →
//! [`RuntimeEvent::Delta`]; the line with `done: true` →
//! [`RuntimeEvent::Complete`] with `done_reason` and usage input =
//! `prompt_eval_count`, output = `eval_count` (Ollama reports no breakdown).
//! A line `{"error": …}` is a provider error.
//!
//! Parameters: the run's OpenAI-style parameters are mapped onto Ollama's
//! request: `max_tokens` / `max_completion_tokens` → `options.num_predict`,
//! the sampling knobs (`temperature`, `top_p`, `top_k`, `seed`, `stop`,
//! `presence_penalty`, `frequency_penalty`) → `options`, and `options`,
//! `format`, `tools`, `think`, `keep_alive` pass through at the top level.
//! Anything else is dropped (Ollama would ignore it).
//!
//! `terminate_session` unloads the target: `POST /api/chat` with
//! `{"model": target, "messages": [], "keep_alive": 0}`.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::Duration;

use framing::ndjson::NdjsonObserver;
use proto::v1::{ExecutionFailure, FailureCode, FailureSide, ProviderHealth, Usage};
use serde::de::{IgnoredAny, MapAccess};
use serde_json::{Map, Value, json};

use super::body_fields::{Fields, Member};
use super::lenient::{Count, Flag, FromMap, JsonObject, Lenient, Text, read_text};
use super::{
    Adapter, AdapterCapabilities, AdapterConfig, EventStream, ExecuteSpec, Parser, RuntimeEvent,
    TerminateError, failure, malformed, probe, request_body, status_failure, transport_failure,
};
use crate::provider_http::ProviderClient;

/// Chat path.
const CHAT_PATH: &str = "/api/chat";
/// OpenAI-style parameters that are Ollama `options` under the same name.
const OPTION_KEYS: [&str; 7] = [
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
];
/// Parameters passed through at the top level.
const TOP_LEVEL_KEYS: [&str; 4] = ["format", "tools", "think", "keep_alive"];

/// The `ollama` adapter.
#[derive(Clone, Debug)]
pub struct OllamaAdapter {
    config: AdapterConfig,
    client: ProviderClient,
}

impl OllamaAdapter {
    /// An adapter over `client` (the core's provider client).
    pub fn new(config: AdapterConfig, client: ProviderClient) -> Self {
        Self { config, client }
    }

    /// The instance's settings.
    pub fn config(&self) -> &AdapterConfig {
        &self.config
    }

    /// The provider request body for `spec`.
    pub(super) fn body(
        spec: &ExecuteSpec,
    ) -> Result<crate::provider_http::RequestBody, ExecutionFailure> {
        let mut params = Fields::parameters(&spec.input)?;
        let mut options = match params.remove("options").map(Member::into_value) {
            Some(Value::Object(options)) => options,
            _ => Map::new(),
        };
        for key in OPTION_KEYS {
            if let Some(value) = params.remove(key) {
                options.insert(key.into(), value.into_value());
            }
        }
        let max = params
            .remove("max_completion_tokens")
            .or_else(|| params.remove("max_tokens"))
            .map(Member::into_value);
        if let Some(max) = max.filter(|m| !m.is_null()) {
            options.insert("num_predict".into(), max);
        }
        let mut body = Fields::default();
        for key in TOP_LEVEL_KEYS {
            if let Some(value) = params.remove(key) {
                body.insert(key, value);
            }
        }
        body.insert("model", Value::String(spec.target.clone()));
        body.insert("stream", Value::Bool(true));
        if !options.is_empty() {
            body.insert("options", Value::Object(options));
        }
        request_body::with_messages(body, &spec.input)
    }
}

impl Adapter for OllamaAdapter {
    fn capabilities(&self) -> AdapterCapabilities {
        self.config.capabilities(true)
    }

    async fn execute(&self, spec: ExecuteSpec) -> EventStream {
        let request = match self.config.json_request(&spec, CHAT_PATH, Self::body) {
            Ok(request) => request,
            Err(f) => return EventStream::failed(f),
        };
        let parser = Parser::Ndjson(NdjsonParser::default());
        EventStream::open(&self.client, request, parser).await
    }

    async fn terminate_session(
        &self,
        target: &str,
        _session_id: &str,
    ) -> Result<(), TerminateError> {
        let body = json!({"model": target, "messages": [], "keep_alive": 0, "stream": false});
        let request = self
            .config
            .request("POST", CHAT_PATH)
            .header("content-type", "application/json")
            .body(body.to_string());
        let mut response = self
            .client
            .request(request)
            .await
            .map_err(|e| TerminateError::Failed(transport_failure(&e)))?;
        let status = response.status();
        if !(200..300).contains(&status) {
            return Err(TerminateError::Failed(status_failure(status)));
        }
        // Drain the small answer so the connection can be reused.
        while let Some(chunk) = response.next_chunk().await {
            chunk.map_err(|e| TerminateError::Failed(transport_failure(&e)))?;
        }
        Ok(())
    }

    async fn probe_health(
        &self,
        target: &str,
        timeout: Duration,
        credential: Option<&crate::lease::OpenedCredential>,
    ) -> ProviderHealth {
        let plan = probe::ProbePlan::new(&self.config, None, probe::Listing::OllamaTags);
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

/// Bytes of a read in which [`NdjsonParser::feed`] counts lines to size the
/// event queue.
const RESERVE_SAMPLE: usize = 4096;

/// Most events the queue is grown for at once (more grow it as they come).
const MAX_RESERVED: usize = 1024;

/// Incremental parser of an `/api/chat` NDJSON body.
#[derive(Debug, Default)]
pub(super) struct NdjsonParser {
    lines: NdjsonObserver,
    done: bool,
}

impl NdjsonParser {
    /// Parses `chunk`; true once a terminal was pushed. Input after the
    /// terminal is ignored.
    pub(super) fn feed(&mut self, chunk: &[u8], out: &mut VecDeque<RuntimeEvent>) -> bool {
        if self.done {
            return true;
        }
        // About an event a line: room for them at once, not a doubling of
        // the queue (and a copy of it) every few lines of a long read.
        // Counted in the first bytes and scaled (at most MAX_RESERVED): a
        // full count was a pass over every byte, ~4 % of the Node's CPU on
        // a stream of 64 KiB lines.
        let sample = &chunk[..chunk.len().min(RESERVE_SAMPLE)];
        let lines = memchr::memchr_iter(b'\n', sample).count();
        let scale = chunk.len().div_ceil(sample.len().max(1));
        super::stream::make_room(out, (lines * scale).min(MAX_RESERVED));
        let mut done = false;
        let result = self.lines.feed(chunk, |line| {
            if !done {
                done = line_events(line, out);
            }
        });
        self.done = done;
        if let Err(e) = result
            && !self.done
        {
            self.done = true;
            out.push_back(RuntimeEvent::Error(malformed(e)));
        }
        self.done
    }

    /// End of body: the unterminated last line, then a terminal unless
    /// `done: true` was seen.
    pub(super) fn finish(&mut self, out: &mut VecDeque<RuntimeEvent>) {
        if self.done {
            return;
        }
        let mut done = false;
        let result = self.lines.finish(|line| done = line_events(line, out));
        self.done = true;
        if done {
            return;
        }
        out.push_back(RuntimeEvent::Error(match result {
            Err(e) => malformed(e),
            Ok(()) => failure(
                FailureCode::ProviderUnreachable,
                FailureSide::Provider,
                "provider stream ended before done: true",
            ),
        }));
    }
}

/// The events of one NDJSON line; true when it pushed a terminal.
///
/// The line is checked to be UTF-8 once, then read as a `str`: reading the
/// bytes, serde_json checked each string on its own, ~650 instructions a
/// line of Ollama's. A line of the common compact form is read by
/// [`quick::quick_line`] without serde; any other goes through serde.
fn line_events(line: &[u8], out: &mut VecDeque<RuntimeEvent>) -> bool {
    let Ok(line) = simdutf8::basic::from_utf8(line) else {
        out.push_back(RuntimeEvent::Error(malformed("line is not UTF-8")));
        return true;
    };
    let parsed = match quick::quick_line(line) {
        Some(line) => Ok(JsonObject::Object(line)),
        None => serde_json::from_str::<JsonObject<LineJson<'_>>>(line),
    };
    let line = match parsed {
        Ok(JsonObject::Object(line)) => line,
        Ok(JsonObject::NotObject) => {
            out.push_back(RuntimeEvent::Error(malformed("line is not a JSON object")));
            return true;
        }
        Err(e) => {
            out.push_back(RuntimeEvent::Error(malformed(format_args!(
                "line is not JSON ({e})"
            ))));
            return true;
        }
    };
    if line.error {
        out.push_back(RuntimeEvent::Error(failure(
            FailureCode::ProviderHttpStatus,
            FailureSide::Provider,
            "provider reported an error mid-stream",
        )));
        return true;
    }
    let text = |s: Option<Cow<'_, str>>| s.filter(|s| !s.is_empty()).map(Cow::into_owned);
    if let Some(thinking) = text(line.thinking) {
        out.push_back(RuntimeEvent::ReasoningDelta(thinking));
    }
    if let Some(content) = text(line.content) {
        out.push_back(RuntimeEvent::Delta(content));
    }
    if line.done != Some(true) {
        return false;
    }
    let usage = match (line.prompt_eval_count, line.eval_count) {
        (None, None) => None,
        (input, output) => Some(Usage {
            input_tokens: input.unwrap_or(0),
            output_tokens: output.unwrap_or(0),
            reasoning_tokens: None,
            cached_input_tokens: None,
        }),
    };
    out.push_back(RuntimeEvent::Complete {
        finish_reason: line.done_reason.map(Cow::into_owned).unwrap_or_default(),
        usage,
    });
    true
}

/// The fields of one `/api/chat` line the adapter reads, read as a `Value`
/// walk read them (see [`super::lenient`]): ~13 allocations a line fewer.
#[derive(Debug, Default)]
struct LineJson<'a> {
    /// `error`: present, with any value.
    error: bool,
    /// `message.thinking`, when a string.
    thinking: Option<Cow<'a, str>>,
    /// `message.content`, when a string.
    content: Option<Cow<'a, str>>,
    /// `done`, when a boolean.
    done: Option<bool>,
    /// `done_reason`, when a string.
    done_reason: Option<Cow<'a, str>>,
    /// `prompt_eval_count`, when a count.
    prompt_eval_count: Option<u64>,
    /// `eval_count`, when a count.
    eval_count: Option<u64>,
}

impl<'de> FromMap<'de> for LineJson<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "error" => {
                map.next_value::<IgnoredAny>()?;
                self.error = true;
            }
            "message" => {
                let message = map.next_value::<Lenient<MessageJson<'de>>>()?.0;
                let message = message.unwrap_or_default();
                self.thinking = message.thinking;
                self.content = message.content;
            }
            "done" => self.done = map.next_value::<Flag>()?.0,
            "done_reason" => self.done_reason = map.next_value::<Text<'de>>()?.0,
            "prompt_eval_count" => self.prompt_eval_count = map.next_value::<Count>()?.0,
            "eval_count" => self.eval_count = map.next_value::<Count>()?.0,
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// A line's `message`.
#[derive(Debug, Default)]
struct MessageJson<'a> {
    thinking: Option<Cow<'a, str>>,
    content: Option<Cow<'a, str>>,
}

impl<'de> FromMap<'de> for MessageJson<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let slot = match key {
            "thinking" => Some(&mut self.thinking),
            "content" => Some(&mut self.content),
            _ => None,
        };
        read_text(map, slot)
    }
}

#[path = "ollama_quick.rs"]
mod quick;

#[cfg(test)]
#[path = "ollama_line_tests.rs"]
mod line_tests;
