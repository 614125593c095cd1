//! Node commands (F14, F25): the closed set `CAPABILITIES`,
//! `TRANSPORT_STATUS` and `OLLAMA_API`, separate from runs.
//!
//! [`run_command`] answers one [`NodeCommandRequest`] through an `emit`
//! callback. It owns no runtime state: the caller (the edge link / run
//! manager) lends a [`CommandContext`] with the adapters, the per-adapter
//! active run counts, a transport snapshot, the session's health sequence
//! (F23) and the core's [`ProviderClient`]. Nothing else is reachable from
//! here: no host shell, no arbitrary command, no arbitrary provider path.
//!
//! # Response contract
//! - Every call emits at least one [`NodeCommandResponse`]; exactly the last
//!   has `final = true`. Every response's `kind` echoes the request's (also
//!   an unknown one).
//! - `ok = false` always carries a typed [`ExecutionFailure`] with a safe
//!   message (never the provider's body or a credential).
//! - An unknown or unspecified command kind is `INVALID_REQUEST`.
//!
//! # `CAPABILITIES`
//! Lists every adapter (name, kind, targets, limits, features and its
//! current active runs). With `adapter` and `target` set it also runs that
//! adapter's bounded exact-target [`Adapter::probe_health`] (the config's
//! health timeout) and returns the result as `probe`, stamped with
//! `next_health_seq()`, called once when the probe has finished (F23, F25).
//! Only one of the two set is `INVALID_REQUEST`; an adapter not on this
//! Node is `UNKNOWN_ADAPTER`; a target it does not serve (an adapter with no
//! targets serves any) is `UNKNOWN_TARGET`. A failed lookup calls no probe
//! and takes no sequence number.
//!
//! F29: right after the lookups and before the probe, the request's
//! `credential_lease` is opened through the caller's [`OpenProbeLease`]
//! (the run manager opens it with exactly a run's rules, route
//! [`PROBE_ROUTE`], slot `probe_id`); the opened credential is the probe's
//! header. A provider without a managed credential gets `None` (its plain
//! configured headers apply, as for runs). Any lease refusal is the typed
//! `CREDENTIAL_LEASE_*` failure: no provider call, no sequence number.
//! [`run_command`] has no opener: a probe carrying a lease fails closed.
//!
//! # `TRANSPORT_STATUS`
//! The link's snapshot, with `active_runs` summed over the adapters.
//!
//! # `OLLAMA_API`: the Ollama API tunnel
//! Only to an adapter of kind `ollama`, only `TAGS`, `SHOW`, `PS`, `PULL`.
//! - Adapter: `request.adapter`; when empty, the only `ollama` adapter (none
//!   or several: `UNKNOWN_ADAPTER` / `INVALID_REQUEST`). A named adapter that
//!   is not `ollama` is `INVALID_REQUEST`.
//! - Calls: `TAGS` = `GET /api/tags`, `PS` = `GET /api/ps`, `SHOW` =
//!   `POST /api/show`, `PULL` = `POST /api/pull` (with `"stream": true`
//!   forced), on the adapter's base URL with its configured headers.
//! - `body_json` must be a JSON object of at most
//!   [`CommandLimits::max_request_body`] (`SHOW`, `PULL`: required; `TAGS`,
//!   `PS`: optional and ignored); otherwise `INVALID_REQUEST` before any
//!   provider call.
//! - `TAGS`, `SHOW`, `PS`: one final response with the provider's status
//!   and JSON body, within [`CommandLimits::call_timeout`] (else
//!   `HARD_TIMEOUT`) and [`CommandLimits::max_response_body`] (else
//!   `PROVIDER_MALFORMED`, as is a 2xx body that is not JSON).
//! - `PULL`: one non-final response per NDJSON progress line (`body_json` =
//!   the line), then a final one with no body. No overall deadline, but at
//!   most [`CommandLimits::pull_idle_timeout`] between body chunks (else
//!   `RESPONSE_STALLED`); a line that is not a JSON object is
//!   `PROVIDER_MALFORMED`; an `{"error": …}` line ends it as
//!   `PROVIDER_HTTP_STATUS` (that line in the final `body_json`); a body that
//!   ends without `{"status":"success"}` is `PROVIDER_UNREACHABLE`.
//! - A provider status outside 2xx: `ok = false`, `PROVIDER_HTTP_STATUS`
//!   with `http_status` (side `CLIENT` for 4xx, `PROVIDER` otherwise), and
//!   `ollama.http_status` plus the provider's error body when it is a JSON
//!   object within the bound.

mod ollama;
#[cfg(test)]
mod tests;

use std::time::Duration;

use proto::v1::{
    AdapterKind, CapabilitiesResult, ExecutionFailure, FailureCode, FailureSide, NodeCommandKind,
    NodeCommandRequest, NodeCommandResponse, TargetHealth, TransportStatusResult,
};

use crate::adapter::{Adapter, AnyAdapter, failure};
use crate::lease::OpenedCredential;
use crate::provider_http::ProviderClient;

/// The route a CAPABILITIES probe's credential lease is bound to (F29).
pub const PROBE_ROUTE: &str = "probe";

/// The request a probe's credential lease arrived with.
#[derive(Debug, Clone, Copy)]
pub struct ProbeLease<'a> {
    /// The adapter probed.
    pub adapter: &'a str,
    /// The exact target probed.
    pub target: &'a str,
    /// The probe id (`NodeCommandRequest.probe_id`), the lease's slot.
    pub slot: &'a str,
    /// The sealed lease; empty when none came.
    pub sealed: &'a [u8],
}

/// Opens a probe's lease: `Ok(None)` when its provider needs none and none
/// came, the credential when one opened, the typed failure otherwise.
pub type OpenProbeLease<'a> =
    &'a dyn Fn(&ProbeLease<'_>) -> Result<Option<OpenedCredential>, ExecutionFailure>;

/// Default [`CommandLimits::call_timeout`].
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Default [`CommandLimits::pull_idle_timeout`].
pub const DEFAULT_PULL_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Default [`CommandLimits::max_request_body`]: 64 KiB.
pub const DEFAULT_MAX_REQUEST_BODY: usize = 64 * 1024;
/// Default [`CommandLimits::max_response_body`]: 4 MiB.
pub const DEFAULT_MAX_RESPONSE_BODY: usize = 4 * 1024 * 1024;
/// Default [`CommandLimits::max_pull_line`]: 64 KiB.
pub const DEFAULT_MAX_PULL_LINE: usize = 64 * 1024;

/// Bounds of the Ollama API tunnel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandLimits {
    /// Whole-call deadline of `TAGS`, `SHOW`, `PS` (request to last byte).
    pub call_timeout: Duration,
    /// Longest `PULL` waits for its response head or next body chunk.
    pub pull_idle_timeout: Duration,
    /// Largest `body_json` accepted from the Edge.
    pub max_request_body: usize,
    /// Largest provider body of a non-streaming call.
    pub max_response_body: usize,
    /// Largest single `PULL` progress line.
    pub max_pull_line: usize,
}

impl Default for CommandLimits {
    fn default() -> Self {
        Self {
            call_timeout: DEFAULT_CALL_TIMEOUT,
            pull_idle_timeout: DEFAULT_PULL_IDLE_TIMEOUT,
            max_request_body: DEFAULT_MAX_REQUEST_BODY,
            max_response_body: DEFAULT_MAX_RESPONSE_BODY,
            max_pull_line: DEFAULT_MAX_PULL_LINE,
        }
    }
}

/// One adapter instance as the Node's commands see it.
#[derive(Clone, Debug)]
pub struct NamedAdapter {
    /// Instance name (`RunRequest.adapter`, `NodeCommandRequest.adapter`).
    pub name: String,
    /// Its kind on the wire.
    pub kind: AdapterKind,
    /// The adapter.
    pub adapter: AnyAdapter,
}

impl NamedAdapter {
    /// `adapter` under its configured name and kind.
    pub fn new(adapter: AnyAdapter) -> Self {
        Self {
            name: adapter.config().name.clone(),
            kind: adapter.kind(),
            adapter,
        }
    }
}

/// What a command may see of the Node, lent by the caller for one command.
pub struct CommandContext<'a> {
    /// Every adapter instance on this core.
    pub adapters: &'a [NamedAdapter],
    /// Active runs of the adapter with this name.
    pub active_runs: &'a dyn Fn(&str) -> u32,
    /// The transport snapshot taken by the link.
    pub transport: TransportStatusResult,
    /// The session-owned health observation counter (F23): called once per
    /// finalized probe, returns its sequence number.
    pub next_health_seq: &'a dyn Fn() -> u64,
    /// The core's provider HTTP client.
    pub client: ProviderClient,
    /// Bounds of the Ollama API tunnel.
    pub limits: CommandLimits,
}

impl std::fmt::Debug for CommandContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandContext")
            .field("adapters", &self.adapters.len())
            .field("transport", &self.transport)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl CommandContext<'_> {
    fn adapter(&self, name: &str) -> Option<&NamedAdapter> {
        self.adapters.iter().find(|a| a.name == name)
    }
}

/// Answers `request`, emitting one or more responses (the last `final`);
/// see the module docs.
///
/// Without a lease opener: a probe that carries a credential lease fails
/// closed; use [`run_command_leased`] on a link.
pub async fn run_command(
    ctx: &CommandContext<'_>,
    request: NodeCommandRequest,
    emit: &mut dyn FnMut(NodeCommandResponse),
) {
    run_command_leased(ctx, &no_lease_opener, request, emit).await;
}

/// [`run_command`] opening a probe's credential lease with `open_lease`
/// (F29; see the module docs).
pub async fn run_command_leased(
    ctx: &CommandContext<'_>,
    open_lease: OpenProbeLease<'_>,
    request: NodeCommandRequest,
    emit: &mut dyn FnMut(NodeCommandResponse),
) {
    let kind = request.kind;
    let mut emit = Emitter { kind, emit };
    match NodeCommandKind::try_from(kind) {
        Ok(NodeCommandKind::Capabilities) => {
            emit.finish(capabilities(ctx, open_lease, &request).await);
        }
        Ok(NodeCommandKind::TransportStatus) => emit.finish(Ok(transport_status(ctx))),
        Ok(NodeCommandKind::OllamaApi) => ollama::run(ctx, &request, &mut emit).await,
        Ok(NodeCommandKind::Unspecified) | Err(_) => emit.finish(Err(invalid(
            "unknown node command kind (allowed: CAPABILITIES, TRANSPORT_STATUS, OLLAMA_API)",
        ))),
    }
}

/// Stamps responses with the request's kind and hands them to the caller.
struct Emitter<'e> {
    kind: i32,
    emit: &'e mut dyn FnMut(NodeCommandResponse),
}

impl Emitter<'_> {
    /// A non-final response.
    fn progress(&mut self, mut response: NodeCommandResponse) {
        response.kind = self.kind;
        response.r#final = false;
        (self.emit)(response);
    }

    /// The final response: `ok` with `result`, or the failure.
    fn finish(&mut self, result: Result<NodeCommandResponse, ExecutionFailure>) {
        let response = match result {
            Ok(response) => NodeCommandResponse {
                ok: true,
                ..response
            },
            Err(failure) => NodeCommandResponse {
                failure: Some(failure),
                ..NodeCommandResponse::default()
            },
        };
        self.finish_raw(response);
    }

    /// The final response as given (`ok` and `failure` already set).
    fn finish_raw(&mut self, mut response: NodeCommandResponse) {
        response.kind = self.kind;
        response.r#final = true;
        (self.emit)(response);
    }
}

/// `CAPABILITIES`: the adapter list, plus the exact-target probe if asked.
async fn capabilities(
    ctx: &CommandContext<'_>,
    open_lease: OpenProbeLease<'_>,
    request: &NodeCommandRequest,
) -> Result<NodeCommandResponse, ExecutionFailure> {
    let probe = match (request.adapter.as_str(), request.target.as_str()) {
        ("", "") => None,
        ("", _) | (_, "") => {
            return Err(invalid(
                "a CAPABILITIES probe needs both adapter and target",
            ));
        }
        (name, target) => {
            let named = ctx.adapter(name).ok_or_else(unknown_adapter)?;
            if !named.adapter.config().serves(target) {
                return Err(failure(
                    FailureCode::UnknownTarget,
                    FailureSide::Client,
                    "target not served by this adapter",
                ));
            }
            // F29: opened right before the probe; a refusal calls nothing.
            let credential = open_lease(&ProbeLease {
                adapter: &named.name,
                target,
                slot: &request.probe_id,
                sealed: &request.credential_lease,
            })?;
            let timeout = named.adapter.config().health_timeout();
            let status = named
                .adapter
                .probe_health(target, timeout, credential.as_ref())
                .await;
            let mut health = TargetHealth {
                adapter: named.name.clone(),
                target: target.to_owned(),
                health_observation_seq: (ctx.next_health_seq)(),
                ..TargetHealth::default()
            };
            health.set_status(status);
            Some(health)
        }
    };
    let adapters = ctx
        .adapters
        .iter()
        .map(|named| {
            let caps = named.adapter.capabilities();
            let mut out = proto::v1::AdapterCapabilities {
                adapter: named.name.clone(),
                targets: caps.targets,
                max_concurrency: caps.max_concurrency,
                supports_tunnel: caps.supports_tunnel,
                supports_terminate_session: caps.supports_session_terminate,
                active_runs: (ctx.active_runs)(&named.name),
                ..Default::default()
            };
            out.set_kind(named.kind);
            out
        })
        .collect();
    Ok(NodeCommandResponse {
        capabilities: Some(CapabilitiesResult { adapters, probe }),
        ..NodeCommandResponse::default()
    })
}

/// `TRANSPORT_STATUS`: the snapshot with the run count filled in.
fn transport_status(ctx: &CommandContext<'_>) -> NodeCommandResponse {
    let active_runs = ctx
        .adapters
        .iter()
        .fold(0u32, |n, a| n.saturating_add((ctx.active_runs)(&a.name)));
    NodeCommandResponse {
        transport_status: Some(TransportStatusResult {
            active_runs,
            ..ctx.transport.clone()
        }),
        ..NodeCommandResponse::default()
    }
}

/// The opener of [`run_command`]: no lease key, so any lease is refused.
fn no_lease_opener(probe: &ProbeLease<'_>) -> Result<Option<OpenedCredential>, ExecutionFailure> {
    if probe.sealed.is_empty() {
        return Ok(None);
    }
    Err(crate::lease::LeaseRejection::new(
        FailureCode::CredentialLeaseWrongRecipient,
        "this node has no lease key",
    )
    .into_failure())
}

/// `INVALID_REQUEST`, the Edge's fault.
fn invalid(message: impl Into<String>) -> ExecutionFailure {
    failure(FailureCode::InvalidRequest, FailureSide::Client, message)
}

fn unknown_adapter() -> ExecutionFailure {
    failure(
        FailureCode::UnknownAdapter,
        FailureSide::Client,
        "no such adapter on this node",
    )
}
