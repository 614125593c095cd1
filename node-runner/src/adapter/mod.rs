//! Adapters: the Node's normalized view of one model server (F9–F13, F18).
//!
//! An [`Adapter`] turns an [`ExecuteSpec`] (target + [`RunInput`]) into an
//! [`EventStream`] of [`RuntimeEvent`]s, one provider HTTP request per run,
//! over the core's [`ProviderClient`]. Two implementations:
//!
//! - [`OpenAiAdapter`]: `POST /v1/chat/completions` with `stream: true`, SSE
//!   observed chunk by chunk. One type serves `openai_compat` and `vllm`
//!   ([`OpenAiFlavor`]); usage counts are presence-based either way.
//! - [`OllamaAdapter`]: `POST /api/chat` NDJSON, and `terminate_session`
//!   (unload via `keep_alive: 0`).
//!
//! [`AnyAdapter::from_provider`] builds the right one from a
//! [`ProviderConfig`] (the trait's `async fn`s make it not object-safe, so
//! the run manager holds the enum).
//!
//! # Stream contract
//! - [`EventStream::next`] yields [`RuntimeEvent::Start`] first, then
//!   deltas / usage in provider order, then exactly one terminal
//!   ([`RuntimeEvent::Complete`] or [`RuntimeEvent::Error`]), then `None`
//!   forever. Failures before the provider answered (connect refused, bad
//!   parameters, HTTP error status) still come as `Start` + `Error`, so the
//!   run manager sees one shape.
//! - Provider bytes are pulled one chunk at a time
//!   ([`ProviderResponse::next_chunk`](crate::provider_http::ProviderResponse::next_chunk)) and parsed incrementally; a delta is
//!   yielded as soon as its event is complete. Nothing is buffered beyond
//!   the parser's partial line.
//! - Errors are typed ([`ExecutionFailure`]): HTTP 4xx → `PROVIDER_HTTP_STATUS`
//!   side `CLIENT`, 5xx → side `PROVIDER`; unparsable JSON or SSE →
//!   `PROVIDER_MALFORMED`; a body that ends without the terminator (`[DONE]`
//!   or `done: true`) or breaks → `PROVIDER_UNREACHABLE`. Messages are safe
//!   summaries: never the provider's body or the prompt.
//! - Dropping the stream before its end drops the provider response, which
//!   closes the connection (the provider sees the client leave).
//!
//! # Not here
//! The stall watchdog (F20–F23, [`crate::stall`]), admission by
//! `max_concurrency` and cancel belong to the run manager;
//! [`ExecuteSpec::stall_timeout_ms`] is carried for it.
//!
//! # Health probe
//! [`Adapter::probe_health`] is the bounded exact-target probe of the
//! [`probe`] module (the stall evidence of F21/F22 and the `CAPABILITIES`
//! recovery probe of F25 both use it): what each kind asks and how the
//! answer maps to `AVAILABLE` / `UNAVAILABLE` / `UNKNOWN` is documented
//! there.

mod body_fields;
mod lenient;
#[cfg(test)]
pub(crate) use lenient::json_value;
mod ollama;
mod openai;
pub mod probe;
mod request_body;
mod stream;
#[cfg(test)]
mod tests;

use std::time::Duration;

use proto::v1::{
    AdapterKind, ExecutionFailure, FailureCode, FailureSide, ProviderConfig, ProviderHealth,
    RunEvent, RunEventKind, RunInput, Usage,
};

use crate::provider_http::{BaseUrl, BaseUrlError, ProviderClient, ProviderError, ProviderRequest};

pub use ollama::OllamaAdapter;
pub use openai::{OpenAiAdapter, OpenAiFlavor};
use stream::Parser;
pub(crate) use stream::drain;
pub use stream::{DRAIN_AFTER_COMPLETE, EventStream};

/// Default bound on one health probe when the config says 0, in ms.
pub const DEFAULT_HEALTH_TIMEOUT_MS: u64 = 2_000;

/// One event of a run, as an adapter reports it. Maps 1:1 onto
/// [`RunEventKind`] (see [`RuntimeEvent::into_run_event`]).
#[derive(Clone, Debug, PartialEq)]
pub enum RuntimeEvent {
    /// The run started; always the first event.
    Start,
    /// Generated text.
    Delta(String),
    /// Generated reasoning text (`delta.reasoning_content`, `message.thinking`).
    ReasoningDelta(String),
    /// A non-terminal usage observation (counts as progress, F20).
    Usage(Usage),
    /// Terminal: the provider finished.
    Complete {
        /// The provider's finish reason (`stop`, `length`, …), empty if none.
        finish_reason: String,
        /// Provider-reported usage, if it reported any (F18).
        usage: Option<Usage>,
    },
    /// Terminal: the run failed.
    Error(ExecutionFailure),
    /// Terminal: the run was cancelled (F12). Adapters never yield it; the
    /// run manager does.
    Cancelled,
}

impl RuntimeEvent {
    /// Whether this event ends the run.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::Complete { .. } | Self::Error(_) | Self::Cancelled
        )
    }

    /// The wire event with sequence number `seq` (1 for `Start`).
    pub fn into_run_event(self, seq: u64) -> RunEvent {
        let mut event = RunEvent {
            seq,
            ..RunEvent::default()
        };
        match self {
            Self::Start => event.set_kind(RunEventKind::Start),
            Self::Delta(text) => {
                event.set_kind(RunEventKind::Delta);
                event.text = text.into();
            }
            Self::ReasoningDelta(text) => {
                event.set_kind(RunEventKind::ReasoningDelta);
                event.text = text.into();
            }
            Self::Usage(usage) => {
                event.set_kind(RunEventKind::Usage);
                event.usage = Some(usage);
            }
            Self::Complete {
                finish_reason,
                usage,
            } => {
                event.set_kind(RunEventKind::Complete);
                event.finish_reason = finish_reason;
                event.usage = usage;
            }
            Self::Error(failure) => {
                event.set_kind(RunEventKind::Error);
                event.failure = Some(failure);
            }
            Self::Cancelled => event.set_kind(RunEventKind::Cancelled),
        }
        event
    }
}

/// What one run asks of an adapter.
#[derive(Clone, Debug, Default)]
pub struct ExecuteSpec {
    /// The model (target) on the adapter.
    pub target: String,
    /// Messages and OpenAI-style parameters.
    pub input: RunInput,
    /// Opaque correlation value (never links runs).
    pub session_id: String,
    /// Effective stall timeout in ms, for the run watchdog (not enforced by
    /// the adapter).
    pub stall_timeout_ms: u64,
    /// F29: the credential from the run's opened lease, set as one header
    /// on the provider request (its `Debug` is redacted).
    pub credential: Option<crate::lease::OpenedCredential>,
}

/// What an adapter instance offers (F9, F13, F14).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterCapabilities {
    /// Admission bound on concurrent runs.
    pub max_concurrency: u32,
    /// Whether the Edge may tunnel raw provider requests to it (F16).
    pub supports_tunnel: bool,
    /// Whether [`Adapter::terminate_session`] does anything.
    pub supports_session_terminate: bool,
    /// Models it serves.
    pub targets: Vec<String>,
}

/// Why [`Adapter::terminate_session`] did not terminate.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TerminateError {
    /// The adapter has no session terminate (F13: answer "unsupported").
    #[error("adapter does not support session terminate")]
    Unsupported,
    /// The provider call failed.
    #[error("session terminate failed: {}", .0.message)]
    Failed(ExecutionFailure),
}

/// The settings of one adapter instance, from its [`ProviderConfig`].
#[derive(Clone, Debug)]
pub struct AdapterConfig {
    /// Instance name (`RunRequest.adapter`).
    pub name: String,
    /// Where the model server listens.
    pub base: BaseUrl,
    /// Models it serves; empty accepts any target.
    pub targets: Vec<String>,
    /// Admission bound.
    pub max_concurrency: u32,
    /// Whether raw tunnel requests are allowed.
    pub supports_tunnel: bool,
    /// Extra request headers added to every provider request.
    pub headers: Vec<(bytes::Bytes, bytes::Bytes)>,
    /// Health probe path (`health_probe.path`); empty means the kind's
    /// default (see [`probe`]).
    pub health_path: String,
    /// Health probe bound in ms; 0 means [`DEFAULT_HEALTH_TIMEOUT_MS`].
    pub health_timeout_ms: u64,
}

impl AdapterConfig {
    /// A config for `base` with no targets, headers or probe settings.
    pub fn new(name: impl Into<String>, base: BaseUrl) -> Self {
        Self {
            name: name.into(),
            base,
            targets: Vec::new(),
            max_concurrency: 1,
            supports_tunnel: false,
            headers: Vec::new(),
            health_path: String::new(),
            health_timeout_ms: 0,
        }
    }

    /// The settings of `provider`; fails on a base URL the client refuses.
    pub fn from_provider(provider: &ProviderConfig) -> Result<Self, BaseUrlError> {
        let probe = provider.health_probe.clone().unwrap_or_default();
        Ok(Self {
            name: provider.adapter.clone(),
            base: BaseUrl::parse(&provider.base_url)?,
            targets: provider.targets.clone(),
            max_concurrency: provider.max_concurrency,
            supports_tunnel: provider.supports_tunnel,
            headers: provider
                .headers
                .iter()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect(),
            health_path: probe.path,
            health_timeout_ms: probe.timeout_ms,
        })
    }

    /// The configured probe bound.
    pub fn health_timeout(&self) -> Duration {
        match self.health_timeout_ms {
            0 => Duration::from_millis(DEFAULT_HEALTH_TIMEOUT_MS),
            ms => Duration::from_millis(ms),
        }
    }

    /// Whether this instance serves `target` (no targets: any).
    pub fn serves(&self, target: &str) -> bool {
        self.targets.is_empty() || self.targets.iter().any(|t| t == target)
    }

    /// `Ok` if this instance serves `target`; else the client's
    /// `UNKNOWN_TARGET` failure naming `adapter` (this instance's name) and
    /// `target`: the refusal of a run's admission and of a tunnel's check.
    pub fn check_serves(&self, adapter: &str, target: &str) -> Result<(), ExecutionFailure> {
        if self.serves(target) {
            return Ok(());
        }
        Err(failure(
            FailureCode::UnknownTarget,
            FailureSide::Client,
            format!("adapter {adapter:?} does not serve target {target:?}"),
        ))
    }

    /// This instance's capabilities; whether it can terminate sessions is
    /// the adapter's.
    fn capabilities(&self, supports_session_terminate: bool) -> AdapterCapabilities {
        AdapterCapabilities {
            max_concurrency: self.max_concurrency,
            supports_tunnel: self.supports_tunnel,
            supports_session_terminate,
            targets: self.targets.clone(),
        }
    }

    /// The JSON `POST path` for `spec`, with `body` built by the adapter; or
    /// the failure that ends the run before any provider call (a target this
    /// instance does not serve, or input the adapter cannot send).
    fn json_request(
        &self,
        spec: &ExecuteSpec,
        path: &str,
        body: impl FnOnce(&ExecuteSpec) -> Result<crate::provider_http::RequestBody, ExecutionFailure>,
    ) -> Result<ProviderRequest, ExecutionFailure> {
        if !self.serves(&spec.target) {
            return Err(failure(
                FailureCode::UnknownTarget,
                FailureSide::Client,
                "target not served by this adapter",
            ));
        }
        let body = body(spec)?;
        let mut request = self.request("POST", path);
        if let Some(credential) = &spec.credential {
            let value = bytes::Bytes::copy_from_slice(&credential.value);
            request = request.header(credential.header.clone(), value);
        }
        Ok(request
            .header("content-type", "application/json")
            .body(body))
    }

    /// A `method path` request to this provider, with the configured
    /// headers (e.g. the Ollama API tunnel of the node commands, F14).
    pub fn request(&self, method: &'static str, path: impl Into<String>) -> ProviderRequest {
        let mut request = ProviderRequest::new(method, self.base.clone(), path);
        for (name, value) in &self.headers {
            request = request.header(name.clone(), value.clone());
        }
        request
    }
}

/// An adapter instance. One per provider per core; `!Send` by design (the
/// Node is thread-per-core), hence `async fn` without `Send` bounds.
#[allow(async_fn_in_trait)]
pub trait Adapter {
    /// Its limits, targets and optional features.
    fn capabilities(&self) -> AdapterCapabilities;

    /// Starts one run. Never fails: every failure is a stream of `Start` +
    /// `Error`.
    async fn execute(&self, spec: ExecuteSpec) -> EventStream;

    /// Ends `session_id` on `target` (F13); [`TerminateError::Unsupported`]
    /// where the provider has no such thing.
    async fn terminate_session(&self, target: &str, session_id: &str)
    -> Result<(), TerminateError>;

    /// One exact-target health probe of `target`, bounded by `timeout`;
    /// fail-closed (see [`probe`] for what is asked and the mapping). Its
    /// result is evidence only: never progress, never a retry grant.
    /// `credential` is the opened credential of the request the probe is
    /// part of (F29), set as its header and never kept.
    async fn probe_health(
        &self,
        target: &str,
        timeout: Duration,
        credential: Option<&crate::lease::OpenedCredential>,
    ) -> ProviderHealth;
}

/// Why [`AnyAdapter::from_provider`] refused a provider config.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdapterConfigError {
    /// `kind` is unspecified or unknown.
    #[error("provider {0}: adapter kind not set")]
    UnknownKind(String),
    /// The base URL is not one the client accepts.
    #[error("provider {0}: {1}")]
    BaseUrl(String, BaseUrlError),
}

/// Any adapter, by kind: the [`Adapter`] trait has `async fn`s, so it is
/// not object-safe; the run manager holds these instead of trait objects.
#[derive(Clone, Debug)]
pub enum AnyAdapter {
    /// `openai_compat` or `vllm`.
    OpenAi(OpenAiAdapter),
    /// `ollama`.
    Ollama(OllamaAdapter),
}

impl AnyAdapter {
    /// The adapter `provider` describes, over `client` (the core's).
    pub fn from_provider(
        provider: &ProviderConfig,
        client: ProviderClient,
    ) -> Result<Self, AdapterConfigError> {
        let id = || provider.provider_id.clone();
        let config = AdapterConfig::from_provider(provider)
            .map_err(|e| AdapterConfigError::BaseUrl(id(), e))?;
        Ok(match provider.kind() {
            AdapterKind::OpenaiCompat => Self::OpenAi(OpenAiAdapter::new(
                config,
                OpenAiFlavor::OpenAiCompat,
                client,
            )),
            AdapterKind::Vllm => {
                Self::OpenAi(OpenAiAdapter::new(config, OpenAiFlavor::Vllm, client))
            }
            AdapterKind::Ollama => Self::Ollama(OllamaAdapter::new(config, client)),
            AdapterKind::Unspecified => return Err(AdapterConfigError::UnknownKind(id())),
        })
    }
}

impl AnyAdapter {
    /// The instance's settings.
    pub fn config(&self) -> &AdapterConfig {
        match self {
            Self::OpenAi(a) => a.config(),
            Self::Ollama(a) => a.config(),
        }
    }

    /// Which adapter kind this instance is.
    pub fn kind(&self) -> AdapterKind {
        match self {
            Self::OpenAi(a) => match a.flavor() {
                OpenAiFlavor::OpenAiCompat => AdapterKind::OpenaiCompat,
                OpenAiFlavor::Vllm => AdapterKind::Vllm,
            },
            Self::Ollama(_) => AdapterKind::Ollama,
        }
    }
}

impl Adapter for AnyAdapter {
    fn capabilities(&self) -> AdapterCapabilities {
        match self {
            Self::OpenAi(a) => a.capabilities(),
            Self::Ollama(a) => a.capabilities(),
        }
    }

    async fn execute(&self, spec: ExecuteSpec) -> EventStream {
        match self {
            Self::OpenAi(a) => a.execute(spec).await,
            Self::Ollama(a) => a.execute(spec).await,
        }
    }

    async fn terminate_session(
        &self,
        target: &str,
        session_id: &str,
    ) -> Result<(), TerminateError> {
        match self {
            Self::OpenAi(a) => a.terminate_session(target, session_id).await,
            Self::Ollama(a) => a.terminate_session(target, session_id).await,
        }
    }

    async fn probe_health(
        &self,
        target: &str,
        timeout: Duration,
        credential: Option<&crate::lease::OpenedCredential>,
    ) -> ProviderHealth {
        match self {
            Self::OpenAi(a) => a.probe_health(target, timeout, credential).await,
            Self::Ollama(a) => a.probe_health(target, timeout, credential).await,
        }
    }
}

/// A failure with `code`, `side` and a safe `message`.
pub fn failure(
    code: FailureCode,
    side: FailureSide,
    message: impl Into<String>,
) -> ExecutionFailure {
    let mut failure = ExecutionFailure {
        message: message.into(),
        ..ExecutionFailure::default()
    };
    failure.set_code(code);
    failure.set_side(side);
    failure
}

/// The typed failure of a provider HTTP error status.
pub(crate) fn status_failure(status: u16) -> ExecutionFailure {
    let side = if status < 500 {
        FailureSide::Client
    } else {
        FailureSide::Provider
    };
    let mut f = failure(
        FailureCode::ProviderHttpStatus,
        side,
        format!("provider answered HTTP {status}"),
    );
    f.http_status = u32::from(status);
    f
}

/// The typed failure of a client error.
pub(crate) fn transport_failure(error: &ProviderError) -> ExecutionFailure {
    use crate::provider_http::Side;
    let code = match error {
        ProviderError::InvalidRequest(_) => FailureCode::InvalidRequest,
        ProviderError::Cancelled => FailureCode::Internal,
        ProviderError::HeadTooLarge(_)
        | ProviderError::MalformedHead(_)
        | ProviderError::MalformedBody(_) => FailureCode::ProviderMalformed,
        _ => FailureCode::ProviderUnreachable,
    };
    let side = match error.side() {
        Side::Node => FailureSide::Node,
        Side::Provider => FailureSide::Provider,
    };
    failure(code, side, error.to_string())
}

fn malformed(what: impl std::fmt::Display) -> ExecutionFailure {
    failure(
        FailureCode::ProviderMalformed,
        FailureSide::Provider,
        format!("malformed provider stream: {what}"),
    )
}
