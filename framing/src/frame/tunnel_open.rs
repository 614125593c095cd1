//! [`TunnelOpen`]: a tunnel's request as the Edge opens one, without an
//! allocation a field.
//!
//! prost's `ProviderTunnelRequest` owns five `String`s and a `Vec` of
//! headers. The Edge built each of them to open a tunnel (the tunnel id
//! copied from its stream's shared one, the adapter and target from the
//! provider's, the ingress's fixed method, path and headers), boxed the
//! request to send it to the link's core, and freed it all once its frame
//! was written: eight allocations and their frees a tunnelled request.
//! A `TunnelOpen` holds the same fields as the Edge already has them:
//! shared names as `Arc<str>` (a reference count each), fixed texts and
//! headers as `'static` borrows ([`Cow::Borrowed`]), the body and the
//! credential lease as `Bytes`.
//!
//! It is written by the same field walk as the prost message
//! (`tunnel_encode.rs`' `RequestFields`), so its frame is the one prost
//! writes of the equal `ProviderTunnelRequest` (property-tested below),
//! and the Node reads it as it always has. [`From`] converts either way,
//! for callers that hold a prost request (tools, tests).

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use proto::ENVELOPE_TUNNEL_REQUEST_FIELD;
use proto::v1::{Header, ProviderTunnelRequest};

use super::tunnel_encode::{RequestFields, request_fields};
use super::{BodyFrame, FrameEncoder, FrameError};

/// A `ProviderTunnelRequest` whose texts are shared or `'static`; see the
/// module docs. Each field is the prost message's of the same name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TunnelOpen {
    /// The tunnel's id (its stream keeps the same `Arc`).
    pub tunnel_id: Arc<str>,
    /// The adapter instance on the node.
    pub adapter: Arc<str>,
    /// The target (model) on the provider.
    pub target: Arc<str>,
    /// The provider request's method.
    pub method: Cow<'static, str>,
    /// The provider request's path.
    pub path: Cow<'static, str>,
    /// The provider request's headers.
    pub headers: Cow<'static, [Header]>,
    /// The provider request's body.
    pub body: Bytes,
    /// The stall timeout (F20), 0 for the node's default.
    pub response_stall_timeout_ms: u64,
    /// The hard deadline, 0 for none.
    pub hard_timeout_ms: u64,
    /// The sealed credential lease (F29), empty for none.
    pub credential_lease: Bytes,
    /// The stream's initial window.
    pub initial_window: u32,
    /// Whether the node reports the answer's usage.
    pub extract_usage: bool,
    /// Whether the node cuts the usage-only event out of the stream.
    pub strip_usage_event: bool,
}

impl TunnelOpen {
    /// Its fields for the frame writer; with `body_last` the body goes
    /// after every other field (see
    /// [`FrameEncoder::encode_tunnel_open_sliced`]).
    fn fields(&self, body_last: bool) -> RequestFields<'_> {
        request_fields!(self, body_last)
    }
}

impl From<ProviderTunnelRequest> for TunnelOpen {
    fn from(request: ProviderTunnelRequest) -> Self {
        Self {
            tunnel_id: request.tunnel_id.into(),
            adapter: request.adapter.into(),
            target: request.target.into(),
            method: Cow::Owned(request.method),
            path: Cow::Owned(request.path),
            headers: Cow::Owned(request.headers),
            body: request.body,
            response_stall_timeout_ms: request.response_stall_timeout_ms,
            hard_timeout_ms: request.hard_timeout_ms,
            credential_lease: request.credential_lease,
            initial_window: request.initial_window,
            extract_usage: request.extract_usage,
            strip_usage_event: request.strip_usage_event,
        }
    }
}

impl From<TunnelOpen> for ProviderTunnelRequest {
    fn from(open: TunnelOpen) -> Self {
        Self {
            tunnel_id: String::from(&*open.tunnel_id),
            adapter: String::from(&*open.adapter),
            target: String::from(&*open.target),
            method: open.method.into_owned(),
            path: open.path.into_owned(),
            headers: open.headers.into_owned(),
            body: open.body,
            response_stall_timeout_ms: open.response_stall_timeout_ms,
            hard_timeout_ms: open.hard_timeout_ms,
            credential_lease: open.credential_lease,
            initial_window: open.initial_window,
            extract_usage: open.extract_usage,
            strip_usage_event: open.strip_usage_event,
        }
    }
}

impl FrameEncoder {
    /// Encodes `{stream_id, provider_tunnel_request: open}` as one frame,
    /// the body copied in: byte-identical to [`encode`](Self::encode) of
    /// the envelope holding the equal `ProviderTunnelRequest`.
    pub fn encode_tunnel_open(
        &mut self,
        stream_id: u64,
        open: &TunnelOpen,
    ) -> Result<Bytes, FrameError> {
        self.encode_fields(
            stream_id,
            ENVELOPE_TUNNEL_REQUEST_FIELD,
            &open.fields(false),
        )
    }

    /// Encodes the same envelope with the body as its own slice after the
    /// frame's head, not copied (a long prompt): the body is the message's
    /// last field, which a protobuf reader takes in any order, so the frame
    /// decodes as [`encode_tunnel_open`](Self::encode_tunnel_open)'s does.
    pub fn encode_tunnel_open_sliced(
        &mut self,
        stream_id: u64,
        open: &TunnelOpen,
    ) -> Result<BodyFrame, FrameError> {
        let head = self.encode_fields_trailing(
            stream_id,
            ENVELOPE_TUNNEL_REQUEST_FIELD,
            &open.fields(true),
            open.body.len(),
        )?;
        Ok(BodyFrame {
            head,
            body: open.body.clone(),
            more: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use proto::{Envelope, Msg};

    use super::*;
    use crate::frame::tunnel_tests::{any_request, decoded, frame_by_prost, joined};

    fn envelope(stream_id: u64, request: ProviderTunnelRequest) -> Envelope {
        Envelope {
            stream_id,
            msg: Some(Msg::ProviderTunnelRequest(Box::new(request))),
        }
    }

    static FIXED: [Header; 2] = [
        Header {
            name: Bytes::from_static(b"content-type"),
            value: Bytes::from_static(b"application/json"),
        },
        Header {
            name: Bytes::from_static(b"accept"),
            value: Bytes::from_static(b"text/event-stream"),
        },
    ];

    #[test]
    fn borrowed_texts_and_headers_write_what_owned_ones_do() {
        let open = TunnelOpen {
            tunnel_id: "t-1".into(),
            adapter: "openai_compat".into(),
            target: "mock".into(),
            method: Cow::Borrowed("POST"),
            path: Cow::Borrowed("/v1/chat/completions"),
            headers: Cow::Borrowed(&FIXED),
            body: Bytes::from_static(br#"{"model":"m","stream":true}"#),
            response_stall_timeout_ms: 300_000,
            credential_lease: Bytes::from_static(b"lease"),
            initial_window: 1 << 18,
            extract_usage: true,
            strip_usage_event: true,
            ..TunnelOpen::default()
        };
        let prost = envelope(300, open.clone().into());
        let mut encoder = FrameEncoder::default();
        assert_eq!(
            encoder.encode_tunnel_open(300, &open).unwrap(),
            frame_by_prost(&prost)
        );
        let sliced = encoder.encode_tunnel_open_sliced(300, &open).unwrap();
        assert_eq!(sliced.body.as_ptr(), open.body.as_ptr(), "not copied");
        assert_eq!(decoded(&joined(&sliced)), prost);
    }

    #[test]
    fn a_request_over_the_frame_limit_is_refused_either_way() {
        let open = TunnelOpen {
            body: Bytes::from(vec![b'x'; 2048]),
            ..TunnelOpen::default()
        };
        let mut encoder = FrameEncoder::new(1024);
        for result in [
            encoder.encode_tunnel_open(1, &open).map(drop),
            encoder.encode_tunnel_open_sliced(1, &open).map(drop),
        ] {
            assert!(
                matches!(result, Err(FrameError::TooLarge { max: 1024, .. })),
                "{result:?}"
            );
        }
    }

    proptest! {
        /// Whole, a `TunnelOpen` is written as prost writes the equal
        /// request; with its body sliced off, it reads back as that
        /// request; and it converts to and from the prost form unchanged.
        #[test]
        fn is_written_as_prost_writes_the_equal_request(
            stream_id in any::<u64>(),
            request in any_request(),
        ) {
            let open = TunnelOpen::from(request.clone());
            prop_assert_eq!(ProviderTunnelRequest::from(open.clone()), request.clone());
            let prost = envelope(stream_id, request);
            let mut encoder = FrameEncoder::default();
            prop_assert_eq!(
                encoder.encode_tunnel_open(stream_id, &open).unwrap(),
                frame_by_prost(&prost)
            );
            let sliced = encoder.encode_tunnel_open_sliced(stream_id, &open).unwrap();
            prop_assert_eq!(decoded(&joined(&sliced)), prost);
        }
    }
}
