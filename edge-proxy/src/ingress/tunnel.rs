//! The raw provider tunnel for OpenAI clients (F16): the provider's own
//! status, headers and body bytes reach the client untouched.
//!
//! - The request goes to the provider as the client sent it. When a
//!   streaming client did not ask for usage, the Edge asks for it
//!   (`stream_options.include_usage`) and has the Node strip that extra
//!   event from the relayed bytes and report it in a `usage` frame instead
//!   (F18), so usage is always accounted and the client's stream is exactly
//!   what it asked for.
//! - Body frames are `Bytes` slices of the node connection's receive buffer;
//!   each goes to the client as one chunk (size line + slice + CRLF in one
//!   `writev`) the moment it arrives — nothing is buffered or copied.
//!   Credit for the stream is returned to the Node after each write, so a
//!   client that stops reading pauses only its own provider read.
//! - Hop-by-hop and framing headers of the provider are dropped; the Edge
//!   frames the body itself (chunked, or close-delimited for HTTP/1.0).
//! - A failure before the provider's head is an OpenAI error answer; after
//!   it, the client's body is cut (no last chunk, connection closed), so
//!   the client sees the truncation instead of a clean end.

use bytes::Bytes;
use proto::v1::provider_tunnel_frame::Frame;
use proto::v1::{Header, ProviderTunnelRequest};
use serde_json::{Value, json};

use super::error::{ApiError, from_failure};
use super::http::Responder;
use super::openai::ParsedRequest;
use super::{Api, IngressShared};
use crate::dispatch::TunnelStream;
use crate::pool::Lease;

/// Provider response headers never relayed: hop-by-hop fields (RFC 9110
/// §7.6.1) and the framing the Edge redoes itself.
const DROPPED_HEADERS: [&str; 10] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "server",
    "date",
];

/// Whether a provider response header reaches the client.
pub(crate) fn relayed(name: &str) -> bool {
    !DROPPED_HEADERS
        .iter()
        .any(|dropped| name.eq_ignore_ascii_case(dropped))
}

/// Serves one request through a raw tunnel; returns the status answered.
pub(crate) async fn serve(
    shared: &IngressShared,
    api: Api,
    request: ParsedRequest,
    body: Bytes,
    lease: Lease,
    responder: &mut Responder,
) -> u16 {
    let strip_usage = api == Api::Chat && request.stream && !request.include_usage;
    let body = if strip_usage {
        let mut object = request.object;
        let options = object.entry("stream_options").or_insert_with(|| json!({}));
        if let Value::Object(options) = options {
            options.insert("include_usage".into(), Value::Bool(true));
        }
        Bytes::from(Value::Object(object).to_string())
    } else {
        body
    };
    let tunnel = ProviderTunnelRequest {
        method: "POST".into(),
        path: api.path().into(),
        headers: vec![
            Header {
                name: "content-type".into(),
                value: Bytes::from_static(b"application/json"),
            },
            Header {
                name: "accept".into(),
                value: if request.stream {
                    Bytes::from_static(b"text/event-stream")
                } else {
                    Bytes::from_static(b"application/json")
                },
            },
        ],
        body,
        response_stall_timeout_ms: lease.provider().response_stall_timeout_ms,
        extract_usage: true,
        strip_usage_event: strip_usage,
        ..ProviderTunnelRequest::default()
    };
    let mut stream = match shared.dispatcher.open_tunnel(&lease, tunnel).await {
        Ok(stream) => stream,
        Err(error) => {
            let error = ApiError::from(error);
            responder.error(&error).await;
            return error.status;
        }
    };
    let status = relay(shared, &lease, &mut stream, responder).await;
    if status == 499 {
        super::release_after_end(stream, lease);
    }
    status
}

/// Relays the tunnel's frames to the client; returns the status answered,
/// 499 when the client left.
async fn relay(
    shared: &IngressShared,
    lease: &Lease,
    stream: &mut TunnelStream,
    responder: &mut Responder,
) -> u16 {
    let mut status = 0u16;
    let mut started = false;
    // Usage frames are candidates; the `end` frame carries the final one.
    let mut last_usage = None;
    loop {
        let frame = monoio::select! {
            frame = stream.next() => frame,
            _ = responder.gone() => return 499,
        };
        let Some(frame) = frame else {
            responder.close_after();
            return 499;
        };
        match frame {
            Frame::Status(s) => status = u16::try_from(s.code).unwrap_or(502),
            Frame::Headers(headers) => {
                let code = if (100..=999).contains(&status) {
                    status
                } else {
                    502
                };
                let fields: Vec<(String, Bytes)> = headers
                    .headers
                    .into_iter()
                    .filter(|h| relayed(&h.name))
                    .map(|h| (h.name, h.value))
                    .collect();
                responder
                    .start_stream(code, fields.iter().map(|(n, v)| (n.as_str(), &v[..])))
                    .await;
                started = true;
            }
            Frame::Body(body) => {
                let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
                responder.chunk(body).await;
                if responder.is_gone() {
                    return 499;
                }
                stream.grant(len);
            }
            Frame::Usage(usage) => last_usage = Some(usage),
            Frame::End(end) => {
                if let Some(usage) = end.usage.as_ref().or(last_usage.as_ref()) {
                    super::record_usage(shared, lease, usage);
                }
                if !started {
                    // A head-less end: nothing to relay.
                    let error = ApiError::new(
                        502,
                        "server_error",
                        "upstream_error",
                        "the provider answered without a response head",
                    );
                    responder.error(&error).await;
                    return error.status;
                }
                responder.finish().await;
                return status;
            }
            Frame::Error(failure) => {
                if started {
                    // Mid-body: cut the client's stream so it sees the break.
                    responder.close_after();
                    return status;
                }
                let error = from_failure(&failure);
                responder.error(&error).await;
                return error.status;
            }
        }
    }
}
