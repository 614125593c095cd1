//! The OpenAI-compatible front door (F16, F17): HTTP/1.1 on every Edge
//! core, one `SO_REUSEPORT` listener per core.
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/chat/completions` | stream (SSE) or JSON |
//! | `POST /v1/responses` | stream (SSE) or JSON |
//! | `GET /v1/models` | the configured model groups |
//! | `GET /healthz` | 200 while the process serves |
//! | `GET /readyz` | 200 when some model has a provider on a ready node, else 503 |
//! | `GET /metrics` | Prometheus text |
//! | `POST /admin/…` | operator lease revocation (`admin`) |
//!
//! A request's `model` picks a model group; the pool leases a provider
//! ([`crate::pool`]), and the provider's kind alone picks the wire (F17):
//! OpenAI-compatible providers get a raw tunnel whose bytes reach the client
//! untouched (`tunnel`); Ollama providers get a normalized run translated
//! into the OpenAI shapes (`normalized`). Errors are OpenAI-shaped JSON
//! with the right status ([`error`]).
//!
//! Every completion request is owned by one StreamGate ([`gate`], F27): it
//! runs as attempts, and a confirmed stall before anything reached the
//! client re-admits on another provider under one shared budget.

mod accept;
mod admin;
mod client_read;
pub mod error;
pub mod gate;
pub mod http;
mod json_out;
pub mod metrics;
mod normalized;
pub mod openai;
pub mod placement;
pub mod read_timer;
mod responder;
mod tunnel;

use std::sync::Arc;

use framing::http::Method;
use serde_json::json;

pub use self::accept::serve_core;
use self::error::ApiError;
use self::gate::{Avoid, Decision, GateEvent, Path, RecoveryResult, StreamGate};
use self::http::{Handler, IngressLimits, Request, Responder};
use self::metrics::Metrics;
use crate::config::{EdgeConfig, ProviderKind};
use crate::dispatch::Dispatcher;
use crate::pool::{Pools, Preference};
use crate::registry::NodeRegistry;

/// What every core's ingress shares.
#[derive(Debug)]
pub struct IngressShared {
    /// Live nodes.
    pub registry: Arc<NodeRegistry<EdgeConfig>>,
    /// Sends runs and tunnels to nodes.
    pub dispatcher: Dispatcher<EdgeConfig>,
    /// Model groups, capacity and leases.
    pub pools: Arc<Pools>,
    /// Request limits.
    pub limits: IngressLimits,
    /// Counters for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Set when the Edge drains: the accept loop stops, new requests get
    /// 503 + `Connection: close`, `/readyz` answers 503.
    pub drain: Arc<crate::ops::drain::DrainSwitch>,
    /// Which core serves an accepted connection ([`placement`]).
    pub placement: Arc<placement::Placement>,
}

/// The routes.
#[derive(Debug)]
struct Router {
    shared: Arc<IngressShared>,
    /// This core's wheel of request-read deadlines.
    read_timers: std::rc::Rc<read_timer::ReadTimers>,
}

/// The API a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/responses`.
    Responses,
}

impl Api {
    /// Its path on the provider (and on the Edge).
    pub fn path(self) -> &'static str {
        match self {
            Self::Chat => "/v1/chat/completions",
            Self::Responses => "/v1/responses",
        }
    }

    /// Its metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Chat => "chat_completions",
            Self::Responses => "responses",
        }
    }
}

impl Handler for Router {
    async fn handle(&self, request: Box<Request>, responder: &mut Responder) {
        // Routing answers everything but a completion itself; what a
        // completion needs comes out of it, and the request (and every
        // local of the routing) is gone before the answer, which a quiet
        // stream waits in for its whole life.
        let Some((api, body, principal)) = self.route(request, responder).await else {
            return;
        };
        // In flight for the drain until its last byte is written.
        let _in_flight = self.shared.drain.enter();
        let status = self.completion(api, body, principal, responder).await;
        self.shared.metrics.request(api, status);
    }
}

impl Router {
    /// Answers every route but a completion; for a completion, returns its
    /// API, the request's body and the key's principal.
    async fn route(
        &self,
        request: Box<Request>,
        responder: &mut Responder,
    ) -> Option<(Api, bytes::Bytes, String)> {
        let path = request.head.path();
        let path = path.split(|&b| b == b'?').next().unwrap_or_default();
        let method = request.head.method();
        if self.shared.drain.is_draining() && path != b"/healthz" && path != b"/metrics" {
            self.draining(path, responder).await;
            return None;
        }
        if path.starts_with(b"/admin/") {
            admin::serve(&self.shared, &request, responder).await;
            return None;
        }
        // The name of the client's API key (F29's principal), from the one
        // check of the key.
        let mut principal = String::new();
        if path.starts_with(b"/v1/") {
            match self.authorize(&request) {
                Ok(name) => principal = name,
                Err(error) => {
                    responder.error(&error).await;
                    return None;
                }
            }
        }
        let route: Result<Option<Api>, ApiError> = match (path, method) {
            (b"/v1/chat/completions", Method::Post) => Ok(Some(Api::Chat)),
            (b"/v1/responses", Method::Post) => Ok(Some(Api::Responses)),
            (b"/healthz", Method::Get | Method::Head) => {
                responder
                    .full(200, "application/json", br#"{"status":"ok"}"#.to_vec())
                    .await;
                Ok(None)
            }
            (b"/readyz", Method::Get | Method::Head) => {
                self.readyz(responder).await;
                Ok(None)
            }
            (b"/v1/models", Method::Get | Method::Head) => {
                self.models(responder).await;
                Ok(None)
            }
            (b"/metrics", Method::Get | Method::Head) => {
                let text = self
                    .shared
                    .metrics
                    .render(&self.shared.pools, &self.shared.registry);
                responder
                    .full(200, "text/plain; version=0.0.4", text.into_bytes())
                    .await;
                Ok(None)
            }
            (
                b"/v1/chat/completions"
                | b"/v1/responses"
                | b"/healthz"
                | b"/readyz"
                | b"/v1/models"
                | b"/metrics",
                _,
            ) => Err(ApiError::new(
                405,
                "invalid_request_error",
                "method_not_allowed",
                "method not allowed on this path",
            )),
            _ => Err(ApiError::new(
                404,
                "invalid_request_error",
                "not_found",
                format!("no route for {}", String::from_utf8_lossy(path)),
            )),
        };
        match route {
            // Only the body goes on: the completion's arguments stay in its
            // layout for the whole answer.
            Ok(Some(api)) => Some((api, request.body, principal)),
            Ok(None) => None,
            Err(error) => {
                responder.error(&error).await;
                None
            }
        }
    }

    /// Checks the client's API key when keys are configured: `/v1/` routes
    /// need `Authorization: Bearer <key>`; health and metrics stay open.
    /// Returns the key's name (empty when the ingress has no keys).
    fn authorize(&self, request: &Request) -> Result<String, ApiError> {
        let directory = self.shared.registry.directory();
        let keys = directory.api_keys();
        if keys.is_empty() {
            return Ok(String::new());
        }
        match crate::config::bearer_token(request.head.headers().get("authorization")) {
            None => Err(ApiError::new(
                401,
                "invalid_request_error",
                "missing_api_key",
                "an API key is required: send `Authorization: Bearer <key>`",
            )),
            Some(key) => keys.check(key).map(str::to_owned).ok_or_else(|| {
                ApiError::new(
                    401,
                    "invalid_request_error",
                    "invalid_api_key",
                    "the API key is not valid",
                )
            }),
        }
    }

    /// Serves one completion request as one or more attempts under its
    /// StreamGate; returns the status answered (for metrics).
    ///
    /// A plain fn over an async block, set up out here: what the block
    /// captures keeps its slot for the whole answer, also once moved out,
    /// and a quiet stream waits in this future for its whole life.
    #[allow(clippy::manual_async_fn)]
    fn completion<'a>(
        &'a self,
        api: Api,
        body: bytes::Bytes,
        principal: String,
        responder: &'a mut Responder,
    ) -> impl Future<Output = u16> + 'a {
        // The parsed request takes the body (a long stream lets go of it at
        // commit, see `release_body`).
        let mut parsed = openai::parse(body);
        let shared = &*self.shared;
        let mut ctx = AttemptCtx {
            shared,
            api,
            principal,
            gate: StreamGate::new(api, &shared.metrics.recovery),
        };
        async move {
            // Borrowed in place, not moved out of the captured result.
            let parsed = match &mut parsed {
                Ok(parsed) => parsed,
                Err(error) => {
                    responder.error(error).await;
                    return error.status;
                }
            };
            Self::attempts(&mut ctx, parsed, responder).await
        }
    }

    /// The attempts of one completion: admit, serve, and on a stall before
    /// commit, admit again elsewhere (F27).
    async fn attempts(
        ctx: &mut AttemptCtx<'_, '_>,
        parsed: &mut openai::ParsedRequest,
        responder: &mut Responder,
    ) -> u16 {
        let shared = ctx.shared;
        let mut preference = Preference::default();
        // The error of a stall being recovered: the answer when no new
        // attempt can be admitted.
        // Boxed: rare, and it is held across every attempt's answer.
        let mut stalled: Option<Box<ApiError>> = None;
        loop {
            // A free unit is taken at once; only a full model queues, in a
            // boxed short step (see `http::serve`): its future holds a timer.
            let now = (shared.pools)
                .try_acquire_preferring(&parsed.model, &shared.registry, &preference)
                .transpose();
            let admission = match now {
                Some(looked) => looked,
                None => {
                    let queued = (shared.pools).acquire_preferring(
                        &parsed.model,
                        &shared.registry,
                        &preference,
                    );
                    Box::pin(queued).await
                }
            };
            let lease = match admission {
                Ok(lease) => lease,
                Err(error) => {
                    let error = match stalled.take() {
                        Some(stall) => {
                            ctx.gate.finish(RecoveryResult::NoCandidate);
                            *stall
                        }
                        None => ApiError::from(error),
                    };
                    responder.error(&error).await;
                    return error.status;
                }
            };
            ctx.gate.begin_attempt();
            let attempt = match lease.provider().kind {
                ProviderKind::Ollama => normalized::serve(ctx, parsed, lease, responder).await,
                ProviderKind::OpenaiCompat | ProviderKind::Vllm => {
                    tunnel::serve(ctx, parsed, lease, responder).await
                }
            };
            match attempt {
                Attempt::Answered(status) => {
                    ctx.gate.finish(RecoveryResult::of_status(status));
                    return status;
                }
                Attempt::Reattempt { avoid, error } => {
                    debug_assert!(
                        !parsed.body.is_empty(),
                        "a reattempt after commit: the body was released"
                    );
                    if responder.is_gone() {
                        // No one to recover for: start no new provider call.
                        ctx.gate.finish(RecoveryResult::ClientGone);
                        return 499;
                    }
                    preference = Preference {
                        avoid_provider_id: Some(avoid.provider_id),
                        allow_avoided_provider_fallback: avoid.allow_fallback,
                    };
                    stalled = Some(Box::new(error));
                }
            }
        }
    }

    /// A request on an open connection while the Edge drains: `/readyz`
    /// says `draining` (503), everything else is refused with 503
    /// `edge_draining` (retryable elsewhere); the connection closes after.
    async fn draining(&self, path: &[u8], responder: &mut Responder) {
        responder.close_after();
        if path == b"/readyz" {
            let body = json!({"status": "draining"}).to_string().into_bytes();
            responder.full(503, "application/json", body).await;
            return;
        }
        let mut error = ApiError::new(
            503,
            "server_error",
            "edge_draining",
            "the edge is shutting down; retry on another instance",
        );
        error.retry_after_s = Some(1);
        responder.error(&error).await;
    }

    async fn readyz(&self, responder: &mut Responder) {
        let ready = self.shared.registry.ready_nodes();
        let serving = self.shared.pools.groups().into_iter().any(|group| {
            group
                .providers()
                .iter()
                .any(|p| ready.iter().any(|(id, _, _)| **id == *p.node_id))
        });
        let (status, body) = if serving {
            (200, json!({"status": "ready", "ready_nodes": ready.len()}))
        } else {
            (
                503,
                json!({"status": "not_ready", "ready_nodes": ready.len()}),
            )
        };
        responder
            .full(status, "application/json", body.to_string().into_bytes())
            .await;
    }

    async fn models(&self, responder: &mut Responder) {
        let data: Vec<_> = self
            .shared
            .pools
            .groups()
            .into_iter()
            .map(|group| {
                json!({"id": group.name, "object": "model", "created": 0, "owned_by": "iop"})
            })
            .collect();
        let body = json!({"object": "list", "data": data});
        responder
            .full(200, "application/json", body.to_string().into_bytes())
            .await;
    }
}

/// How one attempt of a request ended.
#[derive(Debug)]
pub(crate) enum Attempt {
    /// The client was answered (or left: 499); the request is over.
    Answered(u16),
    /// A confirmed stall before commit, eligible for a new attempt: the old
    /// stream is dropped and its lease released. `error` is the stall's
    /// answer, should no new attempt be admitted.
    Reattempt {
        /// The provider avoidance for the new attempt.
        avoid: Avoid,
        /// The stall's error answer.
        error: ApiError,
    },
}

impl Attempt {
    /// Answers `error` before anything was committed: the attempt is over.
    pub(crate) async fn refused(responder: &mut Responder, error: &ApiError) -> Self {
        responder.error(error).await;
        Self::Answered(error.status)
    }
}

/// What an attempt works with: the shared state and its request's gate.
#[derive(Debug)]
pub(crate) struct AttemptCtx<'s, 'm> {
    pub(crate) shared: &'s IngressShared,
    pub(crate) api: Api,
    /// F29: the API key's name, bound into credential leases.
    pub(crate) principal: String,
    pub(crate) gate: StreamGate<'m>,
}

impl AttemptCtx<'_, '_> {
    /// The attempt on `lease` ended with a stall terminal received on
    /// `reception`: the pool validates it and applies its evidence (F24);
    /// only a confirmed stall becomes a gate event; the gate decides.
    pub(crate) fn stalled(
        &mut self,
        path: Path,
        lease: &crate::pool::Lease,
        reception: (&str, u64),
        failure: &proto::v1::ExecutionFailure,
        committed: bool,
    ) -> Decision {
        let event = self
            .shared
            .pools
            .handoff_stall(lease, reception, failure)
            .map(|handoff| GateEvent {
                provider_id: handoff.provider_id,
                health: handoff.health,
                retryable: handoff.retryable,
            });
        self.gate.stall(path, event, committed)
    }
}

/// Longest the Edge waits, after a client left, for the node to confirm the
/// end of its run or tunnel before releasing the lease anyway.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A run or tunnel the client has left.
pub(crate) trait Upstream: 'static {
    /// Asks the node to stop it.
    fn cancel(&self);
    /// Waits for its next item; false after its end.
    async fn advance(&mut self) -> bool;
}

impl Upstream for crate::dispatch::RunStream {
    fn cancel(&self) {
        crate::dispatch::RunStream::cancel(self);
    }
    async fn advance(&mut self) -> bool {
        self.next().await.is_some()
    }
}

impl Upstream for crate::dispatch::TunnelStream {
    fn cancel(&self) {
        crate::dispatch::TunnelStream::cancel(self);
    }
    async fn advance(&mut self) -> bool {
        self.next().await.is_some()
    }
}

/// The client left: cancel the upstream, and keep its lease until the node
/// has ended it (F19: the run's terminal releases the lease; the provider's
/// slot on the node is free only then), at most [`RELEASE_WAIT`].
pub(crate) fn release_after_end(mut upstream: impl Upstream, lease: crate::pool::Lease) {
    upstream.cancel();
    monoio::spawn(async move {
        let _ =
            monoio::time::timeout(RELEASE_WAIT, async { while upstream.advance().await {} }).await;
        drop(lease);
    });
}

/// Counts a request's provider-reported usage (F18) in `iop_tokens_total`
/// and logs it at debug: one `usage` line per request, labelled by model
/// group and provider id (`IOP_LOG=info,edge_proxy::ingress=debug`).
///
/// Debug, not info: formatting and writing a JSON line per request was ~9 %
/// of the Edge's CPU on small requests (issue 8 profile), and the counts are
/// already in the metrics.
pub(crate) fn record_usage(
    shared: &IngressShared,
    lease: &crate::pool::Lease,
    usage: &proto::v1::Usage,
) {
    let provider = &lease.provider().id;
    shared.metrics.usage(lease.group(), provider, usage);
    tracing::debug!(
        event = "usage",
        model = lease.group(),
        provider = %provider,
        input_tokens = usage.input_tokens,
        output_tokens = usage.output_tokens,
        reasoning_tokens = usage.reasoning_tokens,
        cached_input_tokens = usage.cached_input_tokens,
        "usage"
    );
}

/// Seconds since the Unix epoch, for `created` fields.
pub(crate) fn unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
