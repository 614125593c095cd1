//! Checking a `ProviderTunnelRequest` and turning it into the provider
//! request, before any byte goes to the provider (F16, F20).

use bytes::Bytes;
use framing::http::{NameSet, is_token};
use proto::v1::{AdapterKind, ExecutionFailure, FailureCode, FailureSide, ProviderTunnelRequest};

use super::TunnelTarget;
use super::response_head::UsageWants;
use crate::adapter::failure;
use crate::provider_http::ProviderRequest;

/// F20: the stall timeout a wire value of 0 means, in ms.
pub const DEFAULT_STALL_TIMEOUT_MS: u64 = proto::DEFAULT_RESPONSE_STALL_TIMEOUT_MS;

/// F20: the largest raw stall timeout accepted (24 h).
pub const MAX_STALL_TIMEOUT_MS: u64 = 24 * 60 * 60 * 1000;

/// Longest method token accepted.
const MAX_METHOD_LEN: usize = 32;

/// Longest path (with query) accepted.
const MAX_PATH_LEN: usize = 8 * 1024;

/// Hop-by-hop fields (RFC 9110 §7.6.1) and the fields the HTTP client frames
/// the message with: never forwarded in either direction.
const HOP_BY_HOP: NameSet = NameSet::new(&[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
]);

/// Whether `name` is a hop-by-hop or framing field.
pub(crate) fn is_hop_by_hop(name: &[u8]) -> bool {
    HOP_BY_HOP.contains(name)
}

/// A checked request, ready to send, and all the tunnel keeps of the
/// request it came from: the tunnel request itself (its names, headers and
/// the link read they are slices of) can go as soon as this is built.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) request: ProviderRequest,
    /// The effective hard timeout, 0 = none.
    pub(crate) hard_timeout_ms: u64,
    /// The effective stall timeout (F20), checked against its maximum.
    pub(crate) stall_timeout_ms: u64,
    /// What the request asked of its usage.
    pub(crate) wants: UsageWants,
}

fn invalid(code: FailureCode, message: String) -> ExecutionFailure {
    failure(code, FailureSide::Client, message)
}

/// Checks `request` against `target` and builds the provider request: the
/// adapter's base URL, its configured headers first, then the request's
/// end-to-end headers except hop-by-hop ones and any the adapter configures
/// itself (so a request never overrides a configured credential).
///
/// The request's method, path, headers and body move into the provider
/// request (taken, not copied: the tunnel request is let go of right
/// after); on a refusal some of them may be gone too. Its names, timeouts
/// and usage flags stay.
pub(crate) fn prepare(
    target: Option<TunnelTarget<'_>>,
    request: &mut ProviderTunnelRequest,
) -> Result<Prepared, ExecutionFailure> {
    let Some(target) = target else {
        return Err(invalid(
            FailureCode::UnknownAdapter,
            format!("no adapter named {:?} on this node", request.adapter),
        ));
    };
    let config = target.config;
    let openai = matches!(target.kind, AdapterKind::OpenaiCompat | AdapterKind::Vllm);
    if !openai || !config.supports_tunnel {
        return Err(invalid(
            FailureCode::Unsupported,
            format!(
                "adapter {:?} does not serve raw tunnels (kind {}, supports_tunnel {})",
                request.adapter,
                target.kind.as_str_name(),
                config.supports_tunnel
            ),
        ));
    }
    if !request.target.is_empty() {
        config.check_serves(&request.adapter, &request.target)?;
    }
    let Some(stall_timeout_ms) = super::effective_stall_timeout_ms(request) else {
        return Err(invalid(
            FailureCode::InvalidRequest,
            format!(
                "response_stall_timeout_ms {} is over the maximum {MAX_STALL_TIMEOUT_MS}",
                request.response_stall_timeout_ms
            ),
        ));
    };
    let method = &request.method;
    if method.len() > MAX_METHOD_LEN || !is_token(method.as_bytes()) {
        return Err(invalid(
            FailureCode::InvalidRequest,
            "tunnel method is not an HTTP token".into(),
        ));
    }
    let path = &request.path;
    if !path.starts_with('/')
        || path.len() > MAX_PATH_LEN
        || !path.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(invalid(
            FailureCode::InvalidRequest,
            "tunnel path must start with / and hold only visible ASCII (no CR, LF or spaces)"
                .into(),
        ));
    }
    let mut provider = config.request("GET", std::mem::take(&mut request.path));
    provider.method = std::mem::take(&mut request.method).into();
    provider.body = std::mem::take(&mut request.body).into();
    let observes = request.extract_usage || request.strip_usage_event;
    for header in std::mem::take(&mut request.headers) {
        let name = &header.name[..];
        if !is_token(name) {
            return Err(invalid(
                FailureCode::InvalidRequest,
                "tunnel header name is not an HTTP token".into(),
            ));
        }
        if header
            .value
            .iter()
            .any(|&b| b == b'\r' || b == b'\n' || b == 0)
        {
            return Err(invalid(
                FailureCode::InvalidRequest,
                format!(
                    "tunnel header {:?} has CR, LF or NUL in its value",
                    String::from_utf8_lossy(&header.name)
                ),
            ));
        }
        let configured = config
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name));
        // Usage is read from the bytes: ask for them uncompressed.
        let encoding = observes && name.eq_ignore_ascii_case(b"accept-encoding");
        if configured || encoding || is_hop_by_hop(name) {
            continue;
        }
        provider.headers.push((header.name, header.value));
    }
    if observes {
        provider.headers.push((
            Bytes::from_static(b"accept-encoding"),
            Bytes::from_static(b"identity"),
        ));
    }
    let hard_timeout_ms = match request.hard_timeout_ms {
        0 => target.request_timeout_ms,
        ms => ms,
    };
    Ok(Prepared {
        request: provider,
        hard_timeout_ms,
        stall_timeout_ms,
        wants: UsageWants::of(request),
    })
}
